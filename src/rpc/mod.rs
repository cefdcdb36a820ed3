//! The RPC transport: JSONL framing, wire types, event records, the stdin reader and the stdout
//! writer threads. Only this module knows pi-rs's wire format.

pub mod events;
pub mod jsonl;
pub mod print_mode;
pub mod protocol;
pub mod stdin_reader;
pub mod stdout_writer;

use serde_json::Value;

/// One record for stdout: a JSON value, or a line already serialized (large nested data such as
/// `get_tree`, built without recursion so a deep tree cannot overflow the stack).
#[derive(Debug)]
pub enum Record {
    Json(Value),
    Raw(String),
}

/// Plain text for stdout outside the protocol modes (`--list-models`), where no writer thread runs.
pub fn print_text(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

impl From<Value> for Record {
    fn from(value: Value) -> Record {
        Record::Json(value)
    }
}

#[cfg(test)]
mod fuzz_tests;
