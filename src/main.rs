//! pi-rs: the pi coding agent's RPC mode as a synchronous, thread-per-component program.

mod agent;
mod cli;
mod config;
mod messages;
mod provider;
mod resources;
mod rpc;
mod session;
mod tools;

fn main() {}
