//! The RPC transport: JSONL framing, wire types, event records, the stdin reader and the stdout
//! writer threads. Only this module knows pi-rs's wire format.

pub mod events;
pub mod jsonl;
pub mod print_mode;
pub mod protocol;
pub mod stdin_reader;
pub mod stdout_writer;

#[cfg(test)]
mod fuzz_tests;
