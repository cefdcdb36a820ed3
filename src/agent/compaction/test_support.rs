//! Builders for the compaction tests: messages and session entries with fixed timestamps.

use serde_json::{Map, Value};

use crate::messages::{
    AgentMessage, AssistantMessage, ContentBlock, StopReason, TextContent, ThinkingContent,
    ToolCall, ToolResultMessage, UserContent, UserMessage,
};
use crate::session::{EntryKind, SessionEntry};

pub fn user(text: &str) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: UserContent::Blocks(vec![ContentBlock::Text(TextContent::new(text))]),
        timestamp: 1,
        extra: Map::new(),
    })
}

pub fn user_string(text: &str) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: UserContent::Text(text.into()),
        timestamp: 1,
        extra: Map::new(),
    })
}

pub fn text(text: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(text))
}

pub fn thinking(text: &str) -> ContentBlock {
    ContentBlock::Thinking(ThinkingContent {
        thinking: text.into(),
        thinking_signature: None,
        redacted: None,
    })
}

pub fn tool_call(id: &str, name: &str, arguments: Value) -> ContentBlock {
    ContentBlock::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
        thought_signature: None,
    })
}

pub fn assistant_msg(content: Vec<ContentBlock>) -> AgentMessage {
    let mut a = AssistantMessage::empty("openai-completions", "p", "m");
    a.content = content;
    a.timestamp = 2;
    AgentMessage::Assistant(a)
}

pub fn set_usage(message: &mut AgentMessage, input: u64, output: u64, cache_read: u64) {
    if let AgentMessage::Assistant(a) = message {
        a.usage.input = input;
        a.usage.output = output;
        a.usage.cache_read = cache_read;
        a.usage.total_tokens = input + output + cache_read;
    }
}

pub fn set_stop(message: &mut AgentMessage, stop: StopReason) {
    if let AgentMessage::Assistant(a) = message {
        a.stop_reason = stop;
    }
}

pub fn tool_result(id: &str, name: &str, text: &str) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: id.into(),
        tool_name: name.into(),
        content: vec![ContentBlock::Text(TextContent::new(text))],
        details: None,
        usage: None,
        is_error: false,
        timestamp: 3,
        extra: Map::new(),
    })
}

/// A chain of entries with ids `e0`, `e1`, … each the child of the previous one.
pub struct Chain {
    pub entries: Vec<SessionEntry>,
}

impl Chain {
    pub fn new() -> Chain {
        Chain {
            entries: Vec::new(),
        }
    }

    pub fn push(&mut self, kind: EntryKind) -> String {
        let id = format!("e{}", self.entries.len());
        let parent = self.entries.last().map(|e| e.id.clone());
        let timestamp = format!("2025-01-01T00:00:{:02}.000Z", self.entries.len() % 60);
        self.entries
            .push(SessionEntry::new(id.clone(), parent, timestamp, kind));
        id
    }

    pub fn message(&mut self, message: AgentMessage) -> String {
        self.push(EntryKind::Message(crate::session::MessageBody::typed(
            Some(Box::new(message)),
        )))
    }

    pub fn model_change(&mut self) -> String {
        self.push(EntryKind::ModelChange {
            provider: "p".into(),
            model_id: "m".into(),
        })
    }

    pub fn branch(&self) -> Vec<&SessionEntry> {
        self.entries.iter().collect()
    }
}
