//! The RPC transport: JSONL framing, wire types, event records, the stdin reader and the stdout
//! writer threads. Only this module knows pi-rs's wire format.

pub mod events;
pub mod jsonl;
pub mod print_mode;
pub mod protocol;
pub mod stdin_reader;
pub mod stdout_writer;

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

/// The pi release whose RPC protocol pi-rs speaks. `pi --version` prints it, bare and on stdout
/// as that release does, because clients gate features on it (pi-rs's own version would read as
/// an ancient pi).
pub const PI_PROTOCOL_VERSION: &str = "1.6.0";

/// A message serialized once and shared by every record that carries it (message_end, turn_end,
/// agent_end): a long reply is held once, not copied per record, even while a stalled client
/// leaves those records queued.
pub type SharedJson = Arc<String>;

/// Serializes `value` once, into a buffer sized from `size_hint` so a large message does not
/// grow by doubling.
pub fn shared_json<T: Serialize>(value: &T, size_hint: usize) -> SharedJson {
    let mut buffer = Vec::with_capacity(size_hint + 256);
    if serde_json::to_writer(&mut buffer, value).is_err() {
        buffer = b"null".to_vec();
    }
    buffer.shrink_to_fit();
    // serde_json writes valid UTF-8.
    Arc::new(String::from_utf8(buffer).unwrap_or_else(|_| "null".into()))
}

/// One record for stdout.
#[derive(Debug)]
pub enum Record {
    Json(Value),
    /// A line already serialized (large nested data such as `get_tree`, built without recursion
    /// so a deep tree cannot overflow the stack).
    Raw(String),
    /// A line made of JSON fragments written one after another (see `SharedJson`).
    Parts(Vec<Part>),
}

#[derive(Debug, Clone)]
pub enum Part {
    Text(String),
    Shared(SharedJson),
}

impl Part {
    pub fn as_str(&self) -> &str {
        match self {
            Part::Text(text) => text,
            Part::Shared(json) => json,
        }
    }
}

impl Record {
    /// The record as one JSON value (print mode inspects records; the writer never needs this).
    pub fn to_value(&self) -> Option<Value> {
        match self {
            Record::Json(value) => Some(value.clone()),
            Record::Raw(text) => serde_json::from_str(text).ok(),
            Record::Parts(parts) => {
                let text: String = parts.iter().map(Part::as_str).collect();
                serde_json::from_str(&text).ok()
            }
        }
    }
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
