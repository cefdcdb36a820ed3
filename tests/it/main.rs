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
mod faults;
mod files;
mod idle_commands;
mod lifecycle;
mod mcp;
mod network;
mod oauth;
mod print_modes;
mod protocol_versions;
mod providers;
mod reference_clients;
mod sessions;
// Helper libraries offer more than today's scenarios use (slow streams, request waits, stream
// builders); unused items are for the scenarios that follow, not dead code.
#[allow(dead_code)]
mod fake_provider;
mod framing;
mod retry;
mod rpc_bash;
mod sandbox;
mod secrets;
mod security;
#[allow(dead_code)]
mod sse;
mod steering;
#[allow(dead_code)]
mod support;
mod turns;
mod workspace;
