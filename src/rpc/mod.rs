//! The RPC transport: JSONL framing, wire types, the stdin reader and stdout writer threads.
