//! What the request builders read of a conversation beyond its own elements, and the kept,
//! already encoded start of it (`request_cache` builds and splices that; the builders only read its
//! facts). This sits below both the cache and the builders, so the arrows run one way: the cache
//! uses the builders, the builders (and Copilot's headers) use this.

use std::sync::Arc;

use serde_json::Value;

use crate::messages::{AgentMessage, ContentBlock, StopReason, UserContent, has_images};

/// The serialized wire elements of the conversation's start, comma-joined, for one request.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedHistory {
    pub(super) bytes: Arc<String>,
    pub(super) facts: HistoryFacts,
}

/// What a request reads from every message of its history, not only from their elements.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HistoryFacts {
    /// A tool call or a tool result.
    pub tool_traffic: bool,
    /// An image in a user message or a tool result.
    pub images: bool,
    /// The conversation's size estimate, which the output cap depends on.
    pub input: InputEstimate,
}

impl HistoryFacts {
    /// These facts followed by `messages` (the facts of a conversation fold message by message
    /// in order: the input estimate depends on what came first).
    pub(super) fn then(mut self, messages: &[AgentMessage]) -> HistoryFacts {
        for message in messages {
            let (tool_traffic, images) = match message {
                AgentMessage::User(u) => (
                    false,
                    matches!(&u.content, UserContent::Blocks(b) if has_images(b)),
                ),
                AgentMessage::ToolResult(r) => (true, has_images(&r.content)),
                AgentMessage::Assistant(a) => (a.tool_calls().next().is_some(), false),
                _ => (false, false),
            };
            self.tool_traffic |= tool_traffic;
            self.images |= images;
            self.input.add(message);
        }
        self
    }

    /// The facts of a whole conversation: the kept start, then `messages`.
    pub fn of_conversation(
        messages: &[AgentMessage],
        kept: Option<&EncodedHistory>,
    ) -> HistoryFacts {
        kept.map(|h| h.facts).unwrap_or_default().then(messages)
    }
}

/// pi-ai's `estimateContextTokens` over the messages added so far, kept as running sums so the
/// kept start of a conversation (`request_cache`) contributes without its messages: the last
/// usable reply's reported context plus an estimate of what came after it, else an estimate of
/// everything (to which the system prompt and tools are added, see `tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InputEstimate {
    /// The estimate of every message.
    all: u64,
    /// The last usable reply's reported context and the estimate of the messages after it.
    since_usage: Option<(u64, u64)>,
    /// The latest timestamp so far: a reply older than a message before it (a compaction
    /// summary inserted later) does not describe the prefix it follows.
    latest: Option<i64>,
}

impl InputEstimate {
    fn add(&mut self, message: &AgentMessage) {
        let tokens = message_tokens(message);
        self.all += tokens;
        if let Some((_, after)) = &mut self.since_usage {
            *after += tokens;
        }
        if let AgentMessage::Assistant(reply) = message {
            let usage = &reply.usage;
            let reported = if usage.total_tokens > 0 {
                usage.total_tokens
            } else {
                usage.input + usage.output + usage.cache_read + usage.cache_write
            };
            if self.latest.is_none_or(|latest| reply.timestamp >= latest)
                && !matches!(reply.stop_reason, StopReason::Aborted | StopReason::Error)
                && reported > 0
            {
                self.since_usage = Some((reported, 0));
            }
        }
        let timestamp = message_timestamp(message);
        self.latest = Some(
            self.latest
                .map_or(timestamp, |latest| latest.max(timestamp)),
        );
    }

    /// The input's estimate in tokens; `preamble` estimates the system prompt and tool
    /// declarations, which count only when no reply reported its context.
    pub fn tokens(&self, preamble: impl FnOnce() -> u64) -> u64 {
        match self.since_usage {
            Some((reported, after)) => reported + after,
            None => preamble() + self.all,
        }
    }
}

fn message_timestamp(message: &AgentMessage) -> i64 {
    match message {
        AgentMessage::User(m) => m.timestamp,
        AgentMessage::Assistant(m) => m.timestamp,
        AgentMessage::ToolResult(m) => m.timestamp,
        AgentMessage::BashExecution(m) => m.timestamp,
        AgentMessage::Custom(m) => m.timestamp,
        AgentMessage::CompactionSummary(m) => m.timestamp,
        AgentMessage::BranchSummary(m) => m.timestamp,
        AgentMessage::System(m) => m.timestamp,
    }
}

/// pi-ai's 3.5 characters a token, rounded up: ceil(2 * chars / 7).
pub(super) fn tokens_of_chars(chars: u64) -> u64 {
    (chars * 2).div_ceil(7)
}

/// pi-ai's `estimateMessageTokens` (JavaScript lengths; an image weighs 4800 characters; a system
/// message's text and tool lists are rounded each).
fn message_tokens(message: &AgentMessage) -> u64 {
    use crate::js::js_len;
    use crate::messages::estimated_chars as blocks;
    let content = |content: &UserContent| match content {
        UserContent::Text(text) => js_len(text),
        UserContent::Blocks(b) => blocks(b),
    };
    let chars = match message {
        AgentMessage::User(m) => content(&m.content),
        AgentMessage::ToolResult(m) => blocks(&m.content),
        AgentMessage::Assistant(m) => m
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::Text(t) => js_len(&t.text),
                ContentBlock::Thinking(t) => js_len(&t.thinking),
                ContentBlock::ToolCall(c) => js_len(&c.name) + js_len(&c.arguments.to_string()),
                ContentBlock::Image(_) => 0,
            })
            .sum(),
        AgentMessage::System(m) => {
            let tools = |list: &Option<Vec<Value>>| {
                list.as_ref().filter(|l| !l.is_empty()).map_or(0, |l| {
                    tokens_of_chars(js_len(&Value::Array(l.clone()).to_string()))
                })
            };
            return tokens_of_chars(js_len(&m.prompt_text()))
                + tools(&m.tools_added)
                + tools(&m.tools_removed);
        }
        AgentMessage::Custom(m) => content(&m.content),
        AgentMessage::BashExecution(m) => js_len(&m.command) + js_len(&m.output),
        AgentMessage::CompactionSummary(m) => js_len(&m.summary),
        AgentMessage::BranchSummary(m) => js_len(&m.summary),
    };
    tokens_of_chars(chars)
}
