//! What the request builders read of a conversation beyond its own elements, and the kept,
//! already encoded start of it (`request_cache` builds and splices that; the builders only read its
//! facts). This sits below both the cache and the builders, so the arrows run one way: the cache
//! uses the builders, the builders (and Copilot's headers) use this.

use std::sync::Arc;

use crate::messages::{AgentMessage, UserContent, has_images};

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
}

impl HistoryFacts {
    pub(super) fn of(messages: &[AgentMessage]) -> HistoryFacts {
        let mut facts = HistoryFacts::default();
        for message in messages {
            facts = facts.or(match message {
                AgentMessage::User(u) => HistoryFacts {
                    tool_traffic: false,
                    images: matches!(&u.content, UserContent::Blocks(b) if has_images(b)),
                },
                AgentMessage::ToolResult(r) => HistoryFacts {
                    tool_traffic: true,
                    images: has_images(&r.content),
                },
                AgentMessage::Assistant(a) => HistoryFacts {
                    tool_traffic: a.tool_calls().next().is_some(),
                    images: false,
                },
                _ => HistoryFacts::default(),
            });
        }
        facts
    }

    pub(super) fn or(self, other: HistoryFacts) -> HistoryFacts {
        HistoryFacts {
            tool_traffic: self.tool_traffic || other.tool_traffic,
            images: self.images || other.images,
        }
    }

    /// The facts of a whole conversation: `messages` and the kept start before them.
    pub fn of_conversation(
        messages: &[AgentMessage],
        kept: Option<&EncodedHistory>,
    ) -> HistoryFacts {
        let kept = kept.map(|h| h.facts).unwrap_or_default();
        HistoryFacts::of(messages).or(kept)
    }
}
