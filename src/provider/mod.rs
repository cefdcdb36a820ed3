//! Provider streaming: one thread per LLM request ("provider-<n>"), a blocking ureq POST whose SSE
//! body is decoded by the wire API's module into provider-neutral `StreamEvent`s and sent to the
//! agent over a bounded channel (so a stalled client stalls the socket read, not memory).
//!
//! Only `provider/<api>.rs` knows a provider's format: it builds the request (url, headers, body)
//! and maps SSE events to `StreamEvent`s. This file owns the thread, HTTP and error mapping.
//!
//! How it ends: the body reaches EOF or its terminal event (→ `Done`), or fails (→ `Failed`), or
//! the agent drops the `StreamHandle` (the next `send` fails and the thread returns; a read blocked
//! on a silent socket ends by the idle timeout). Nothing here waits on the agent.

pub mod sse;

use std::time::Duration;

use crossbeam_channel::Sender;
use serde_json::Value;

use crate::config::{Model, ThinkingLevel};
use crate::messages::{AgentMessage, StopReason, Usage};

/// A request counter value; events of an abandoned request are recognised by it and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId(pub u64);

/// A tool as offered to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema, `{"type":"object","properties":…,"required":[…]}`.
    pub parameters: Value,
}

/// Everything a provider thread needs; moved into the thread.
#[derive(Clone, Debug)]
pub struct StreamRequest {
    pub model: Model,
    pub api_key: String,
    /// Extra headers (models.json), already resolved.
    pub headers: Vec<(String, String)>,
    pub system_prompt: String,
    /// Already converted for the LLM (FACTS §7): only user, assistant and toolResult messages.
    pub messages: Vec<AgentMessage>,
    pub tools: Vec<ToolSpec>,
    pub thinking: ThinkingLevel,
    /// settings `thinkingBudgets` for minimal/low/medium/high, where set.
    pub thinking_budgets: [Option<u64>; 4],
    /// Output token cap; `None` → min(model.maxTokens, 32000).
    pub max_tokens: Option<u64>,
    pub session_id: String,
    /// A read that delivers nothing for this long fails the request.
    pub idle_timeout: Duration,
}

/// What a block starts as.
#[derive(Clone, Debug, PartialEq)]
pub enum BlockKind {
    Text,
    Thinking { redacted: bool },
    ToolCall { id: String, name: String },
}

/// Provider-neutral stream events. `index` is the content index in the assistant message, assigned
/// by the API module in order of appearance (blocks are started in index order).
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// Response headers arrived with a success status: the assistant message starts.
    Opened,
    /// Response id / model as the provider reports them.
    Meta {
        response_id: Option<String>,
        response_model: Option<String>,
    },
    BlockStart {
        index: usize,
        kind: BlockKind,
    },
    /// Text, thinking or tool-call argument JSON, by the block's kind.
    Delta {
        index: usize,
        delta: String,
    },
    /// The block is complete. `signature` is the text/thinking signature or the thought signature
    /// of a tool call; for redacted thinking it carries the opaque data.
    BlockEnd {
        index: usize,
        signature: Option<String>,
    },
    /// Token counts so far (replaces earlier ones; cost is filled by the agent from the model).
    Usage(Usage),
    /// The stream finished. An `Error` stop reason carries the provider's message.
    Done {
        stop_reason: StopReason,
        error_message: Option<String>,
    },
    /// The request failed (HTTP status, network, malformed stream). Ends the stream.
    Failed(ProviderError),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProviderEvent {
    pub req: RequestId,
    pub event: StreamEvent,
}

/// A failed request, with the text pi would put in `errorMessage`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderError {
    pub message: String,
    /// From `retry-after` / `retry-after-ms`, when the server sent one.
    pub retry_after: Option<Duration>,
}

/// Owns a running request. Dropping it abandons the request: the thread's next send fails.
pub struct StreamHandle {
    pub req: RequestId,
    _thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts `request` on its own thread; events arrive on `events` tagged with `req`.
pub fn spawn_stream(
    req: RequestId,
    request: StreamRequest,
    events: Sender<ProviderEvent>,
) -> StreamHandle {
    let thread = std::thread::Builder::new()
        .name(format!("provider-{}", req.0))
        .spawn(move || {
            let message = format!("No API provider registered for api: {}", request.model.api);
            let _ = events.send(ProviderEvent {
                req,
                event: StreamEvent::Failed(ProviderError {
                    message,
                    retry_after: None,
                }),
            });
        })
        .ok();
    StreamHandle {
        req,
        _thread: thread,
    }
}
