//! pi-rs: the pi coding agent's RPC mode as a synchronous, thread-per-component program.

// FIXME(skeleton): components are wired one by one; remove once main uses them all.
#![allow(dead_code)]

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
