//! The one integration-test binary: drives `pi --mode rpc` over stdio against a scripted fake
//! provider on 127.0.0.1. See `support.rs` for how to run it against the reference pi.

mod commands;
mod errors;
mod fake_provider;
mod sse;
mod support;
mod turns;
