//! The agent's phase and queue items: plain data, no I/O. A worker handle lives only inside the
//! phase that owns it, so leaving a phase (a `mem::replace` to `Idle`) drops — and so cancels —
//! its workers.

use std::time::Instant;

use crossbeam_channel::Receiver;

use super::draft::Draft;
use crate::messages::{ToolCall, UserMessage};
use crate::provider::{ProviderEvent, StreamHandle};
use crate::rpc::SharedJson;
use crate::tools::{ToolEvent, ToolHandle, ToolOutput};

pub enum Phase {
    Idle,
    /// One LLM request is streaming the assistant reply.
    Streaming(Box<Stream>),
    /// The reply's tool calls are running, one thread each.
    RunningTools(ToolBatch),
    /// Between a failed run and its automatic retry; the timer lives in the loop's select.
    RetryWait(RetryWait),
    /// Summarizing the older conversation (manual, threshold or overflow).
    Compacting(Box<super::compacting::Compaction>),
}

pub struct RetryWait {
    pub deadline: Instant,
}

pub struct Stream {
    /// Field order is drop order: the handle (request) goes before its channel.
    pub handle: StreamHandle,
    pub events: Receiver<ProviderEvent>,
    pub draft: Draft,
    /// For the idle timeout.
    pub last_event: Instant,
    /// An event read ahead while merging deltas, handled next.
    pub lookahead: Option<ProviderEvent>,
}

pub struct ToolBatch {
    /// The reply whose calls these are, as `turn_end` will carry it.
    pub assistant: SharedJson,
    pub calls: Vec<ToolCall>,
    /// `None` once a call finished; dropping a handle cancels its call.
    pub handles: Vec<Option<ToolHandle>>,
    pub results: Vec<Option<ToolOutput>>,
    /// The latest cumulative update of each call (kept for an aborted call's result).
    pub partials: Vec<Option<ToolOutput>>,
    pub events: Receiver<ToolEvent>,
}

impl ToolBatch {
    /// The first unfinished call with this id (ids are unique in practice; this tolerates repeats).
    pub fn position_of(&self, call_id: &str) -> Option<usize> {
        (0..self.calls.len()).find(|i| self.calls[*i].id == call_id && self.results[*i].is_none())
    }
}

/// One agent run: from `agent_start` to `agent_end`.
#[derive(Default)]
pub struct Run {
    /// Everything the run produced, serialized once, for `agent_end.messages`.
    pub messages: Vec<SharedJson>,
    /// Index in the agent's messages of the run's latest reply.
    pub last_reply: Option<usize>,
    pub aborted: bool,
}

/// A steering or follow-up message waiting for its drain point.
pub struct QueuedMessage {
    /// As the client sent it (queue_update lists texts).
    pub text: String,
    pub message: UserMessage,
}
