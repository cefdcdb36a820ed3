//! The one integration-test binary: drives `pi --mode rpc` over stdio against a scripted fake
//! provider on 127.0.0.1. See `support.rs` for how to run it against the reference pi.

mod abort;
mod apis;
mod approvals;
mod cloud_providers;
mod commands;
mod compaction;
mod containers;
mod errors;
mod extensions;
mod fake_provider;
mod faults;
mod files;
mod framing;
mod harness;
mod idle_commands;
mod lifecycle;
mod mcp;
mod network;
mod oauth;
mod print_modes;
mod protocol_versions;
mod providers;
mod reference_clients;
mod request_cache;
mod retry;
mod rpc_bash;
mod sandbox;
mod secrets;
mod security;
mod sessions;
mod sse;
mod steering;
mod support;
mod turns;
mod workspace;
