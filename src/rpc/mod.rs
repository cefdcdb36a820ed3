//! The RPC transport: JSONL framing, wire types, event records, the stdin reader and the stdout
//! writer threads. Only this module knows pi-rs's wire format: everything written to stdout is
//! an `events::Event` or a `protocol::Response`, turned into a `Record` here, in the shape of the
//! chosen `Profile`.

pub mod events;
pub mod jsonl;
pub mod print_mode;
pub mod protocol;
pub mod shared;
pub mod stdin_reader;
pub mod stdout_writer;

use serde_json::Value;

/// The pi release whose RPC protocol pi-rs speaks. `pi --version` prints it, bare and on stdout
/// as that release does, because clients gate features on it (pi-rs's own version would read as
/// an ancient pi).
pub const PI_PROTOCOL_VERSION: &str = "1.6.0";

pub use shared::{SharedJson, json_string, shared_json};

/// Which pi protocol generation stdout speaks (README "Protocol versions").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// The newest pi (1.6.0): delta-only `message_update` with `usage`, and everything added
    /// since the seed.
    #[default]
    Default,
    /// For clients written against pi ≤ 0.83: cumulative `message`/`partial` in every
    /// `message_update`, nothing 0.73.1 never sent.
    Legacy,
}

impl Profile {
    pub fn parse(name: &str) -> Option<Profile> {
        match name {
            "default" => Some(Profile::Default),
            "legacy" => Some(Profile::Legacy),
            _ => None,
        }
    }

    /// The generation for this run: `--rpc-profile` (`flag`), else `PI_RPC_PROFILE`, else the
    /// `rpcProfile` setting, else the newest. A wrong flag is an error; a wrong environment
    /// variable or setting gives the default and a warning (returned, for stderr).
    pub fn choose(
        flag: Option<&str>,
        setting: Option<&Value>,
    ) -> Result<(Profile, Option<String>), InvalidProfile> {
        if let Some(name) = flag {
            return Profile::parse(name)
                .map(|profile| (profile, None))
                .ok_or_else(|| InvalidProfile(name.to_string()));
        }
        let env = std::env::var("PI_RPC_PROFILE")
            .ok()
            .filter(|v| !v.is_empty());
        let (name, source) = match (env, setting) {
            (Some(name), _) => (name, "PI_RPC_PROFILE"),
            (None, Some(Value::String(name))) => (name.clone(), "setting rpcProfile"),
            (None, Some(other)) => (other.to_string(), "setting rpcProfile"),
            (None, None) => return Ok((Profile::Default, None)),
        };
        Ok(match Profile::parse(&name) {
            Some(profile) => (profile, None),
            None => (
                Profile::Default,
                Some(format!("ignoring {source} \"{name}\": {PROFILE_NAMES}")),
            ),
        })
    }

    /// How many records the writer's channel holds before the agent waits. Legacy records each
    /// carry the reply so far: a short queue keeps the copies alive at once few (memory stays
    /// O(reply) while a client stalls), and the agent merges deltas while the queue is half full.
    pub fn writer_capacity(self) -> usize {
        match self {
            Profile::Default => stdout_writer::CHANNEL_CAPACITY,
            Profile::Legacy => 8,
        }
    }
}

const PROFILE_NAMES: &str = "expected \"default\" or \"legacy\"";

/// A `--rpc-profile` value that names no profile.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidProfile(pub String);

impl std::fmt::Display for InvalidProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Invalid --rpc-profile \"{}\": {PROFILE_NAMES}", self.0)
    }
}

impl std::error::Error for InvalidProfile {}

/// One record for stdout, as the writer gets it (built by `events` and `protocol` only).
#[derive(Debug)]
pub enum Record {
    Json(Value),
    /// A line already serialized (large nested data such as `get_tree`, built without recursion
    /// so a deep tree cannot overflow the stack).
    Raw(String),
    /// A line made of JSON fragments written one after another (see `SharedJson`).
    Parts(Vec<Part>),
    /// Nothing to write: the work settled, in a profile that has no `agent_settled` (legacy).
    /// The print driver still needs to know; the stdout writer skips it.
    Settled,
}

#[derive(Debug, Clone)]
pub enum Part {
    Text(String),
    Shared(SharedJson),
}

impl Part {
    /// The part's text, in pieces (a shared value may be several).
    pub fn pieces(&self) -> impl Iterator<Item = &str> {
        let (text, shared) = match self {
            Part::Text(text) => (Some(text.as_str()), None),
            Part::Shared(json) => (None, Some(json)),
        };
        text.into_iter()
            .chain(shared.into_iter().flat_map(SharedJson::pieces))
    }
}

impl Record {
    /// The record as one JSON value (print mode inspects records; the writer never needs this).
    pub fn to_value(&self) -> Option<Value> {
        match self {
            Record::Json(value) => Some(value.clone()),
            Record::Raw(text) => serde_json::from_str(text).ok(),
            Record::Parts(parts) => {
                let text: String = parts.iter().flat_map(Part::pieces).collect();
                serde_json::from_str(&text).ok()
            }
            Record::Settled => None,
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
