//! The assistant message being streamed (pure): provider-neutral `StreamEvent`s in, the growing
//! `AssistantMessage` and the `message_update` records out. The draft holds the reply once; each
//! delta is forwarded, never a cumulative copy (seed: delta-only updates).
//!
//! Redaction is per record, so a key streamed in small deltas would arrive whole once the client
//! joins them. So each block's delta stream holds back the longest tail of what it streamed that
//! is the beginning of a known secret (at most longest secret − 1 bytes; usually nothing), and
//! never cuts inside a secret it holds whole: no secret can be completed across records. The
//! held tail goes out with the next delta, or before the block's end record (`flush_held`).

use serde_json::Value;

use crate::config::Model;
use crate::messages::{
    AgentMessage, AssistantMessage, ContentBlock, StopReason, TextContent, ThinkingContent,
    ToolCall, Usage,
};
use crate::provider::{self, BlockKind};
use crate::rpc::events::{self, BlockFamily};
use crate::session::{Redactions, redact};

pub struct Draft {
    pub message: AssistantMessage,
    /// Raw argument JSON of tool-call blocks, by content index, until the block ends.
    tool_arguments: Vec<(usize, String)>,
    prices: crate::config::ModelCost,
    /// `message_start` went out.
    pub started: bool,
    /// Per block index: streamed text not yet sent (see the module note).
    held: Vec<(usize, String)>,
    redactions: Redactions,
    redactions_generation: u64,
}

impl Draft {
    pub fn new(model: &Model) -> Draft {
        Draft {
            message: AssistantMessage::empty(&model.api, &model.provider, &model.id),
            tool_arguments: Vec::new(),
            prices: model.cost.clone(),
            started: false,
            held: Vec::new(),
            redactions: redact::default_redactions(),
            redactions_generation: redact::generation(),
        }
    }

    /// The `message_start` record (empty content, zero usage), marking the draft started.
    pub fn start_record(&mut self) -> Value {
        self.started = true;
        events::message_start(&AgentMessage::Assistant(self.message.clone()))
    }

    pub fn set_meta(&mut self, response_id: Option<String>, response_model: Option<String>) {
        if response_id.is_some() {
            self.message.response_id = response_id;
        }
        if response_model.is_some() {
            self.message.response_model = response_model;
        }
    }

    pub fn set_usage(&mut self, mut usage: Usage) {
        usage.apply_prices(&self.prices);
        self.message.usage = usage;
    }

    pub fn block_start(&mut self, index: usize, kind: BlockKind) -> Value {
        let (block, family) = match kind {
            BlockKind::Text => (ContentBlock::Text(TextContent::new("")), BlockFamily::Text),
            BlockKind::Thinking { redacted } => (
                ContentBlock::Thinking(ThinkingContent {
                    // Redacted thinking has no readable text; pi shows a fixed placeholder.
                    thinking: if redacted {
                        provider::REDACTED_THINKING_TEXT.to_string()
                    } else {
                        String::new()
                    },
                    thinking_signature: None,
                    redacted: redacted.then_some(true),
                }),
                BlockFamily::Thinking,
            ),
            BlockKind::ToolCall { id, name } => {
                self.tool_arguments.push((index, String::new()));
                (
                    ContentBlock::ToolCall(ToolCall {
                        id,
                        name,
                        arguments: Value::Object(Default::default()),
                        thought_signature: None,
                    }),
                    BlockFamily::ToolCall,
                )
            }
        };
        if index != self.message.content.len() {
            log::warn!(
                "provider started block {index} at position {}",
                self.message.content.len()
            );
        }
        self.message.content.push(block);
        events::update_start(family, self.message.content.len() - 1)
    }

    /// Appends a delta; `None` when the index names no block (a provider bug, logged).
    pub fn delta(&mut self, index: usize, delta: String) -> Option<crate::rpc::Record> {
        let family = match self.message.content.get_mut(index) {
            Some(ContentBlock::Text(t)) => {
                t.text.push_str(&delta);
                BlockFamily::Text
            }
            Some(ContentBlock::Thinking(t)) => {
                t.thinking.push_str(&delta);
                BlockFamily::Thinking
            }
            Some(ContentBlock::ToolCall(_)) => {
                let buffer = self.tool_arguments.iter_mut().find(|(i, _)| *i == index)?;
                buffer.1.push_str(&delta);
                BlockFamily::ToolCall
            }
            Some(ContentBlock::Image(_)) | None => {
                log::warn!("delta for unknown content block {index}");
                return None;
            }
        };
        let now = self.hold_back(index, delta);
        (!now.is_empty()).then(|| events::update_delta(family, index, &now))
    }

    /// The part of `delta` (after what this block already holds) that may go out now.
    fn hold_back(&mut self, index: usize, delta: String) -> String {
        if redact::generation() != self.redactions_generation {
            self.redactions_generation = redact::generation();
            self.redactions = redact::default_redactions();
        }
        if self.redactions.is_empty() && self.held.is_empty() {
            return delta;
        }
        let slot = match self.held.iter().position(|(i, _)| *i == index) {
            Some(position) => position,
            None => {
                self.held.push((index, String::new()));
                self.held.len() - 1
            }
        };
        let combined = &mut self.held[slot].1;
        combined.push_str(&delta);
        let cut = self.redactions.streaming_cut(combined);
        let rest = combined.split_off(cut);
        std::mem::replace(combined, rest)
    }

    /// The held tail of a block as its last delta (before its end record, or when the stream
    /// stops mid-block).
    pub fn flush_held(&mut self, index: usize) -> Option<crate::rpc::Record> {
        let position = self.held.iter().position(|(i, _)| *i == index)?;
        let (_, text) = self.held.swap_remove(position);
        let family = match self.message.content.get(index)? {
            ContentBlock::Text(_) => BlockFamily::Text,
            ContentBlock::Thinking(_) => BlockFamily::Thinking,
            ContentBlock::ToolCall(_) => BlockFamily::ToolCall,
            ContentBlock::Image(_) => return None,
        };
        (!text.is_empty()).then(|| events::update_delta(family, index, &text))
    }

    /// Every block's held tail (the stream ended without closing them).
    pub fn flush_all_held(&mut self) -> Vec<crate::rpc::Record> {
        let indexes: Vec<usize> = self.held.iter().map(|(i, _)| *i).collect();
        indexes
            .into_iter()
            .filter_map(|i| self.flush_held(i))
            .collect()
    }

    pub fn block_end(
        &mut self,
        index: usize,
        signature: Option<String>,
    ) -> Option<crate::rpc::Record> {
        self.finish_tool_arguments(index);
        let block = self.message.content.get_mut(index)?;
        match block {
            ContentBlock::Text(t) => t.text_signature = signature.or(t.text_signature.take()),
            ContentBlock::Thinking(t) => {
                t.thinking_signature = signature.or(t.thinking_signature.take())
            }
            ContentBlock::ToolCall(c) => {
                c.thought_signature = signature.or(c.thought_signature.take())
            }
            ContentBlock::Image(_) => {}
        }
        Some(events::update_end(index, block))
    }

    fn finish_tool_arguments(&mut self, index: usize) {
        let Some(position) = self.tool_arguments.iter().position(|(i, _)| *i == index) else {
            return;
        };
        let (_, raw) = self.tool_arguments.swap_remove(position);
        if let Some(ContentBlock::ToolCall(call)) = self.message.content.get_mut(index) {
            call.arguments = provider::parse_tool_arguments(&raw);
        }
    }

    /// Closes the message: any open tool-call arguments are parsed as far as they go.
    pub fn finish(
        mut self,
        stop_reason: StopReason,
        error_message: Option<String>,
    ) -> AssistantMessage {
        let open: Vec<usize> = self.tool_arguments.iter().map(|(i, _)| *i).collect();
        for index in open {
            self.finish_tool_arguments(index);
        }
        // Streaming grew the texts by doubling; a long reply is held for the rest of the
        // session, so give the slack back.
        for block in &mut self.message.content {
            match block {
                ContentBlock::Text(t) => t.text.shrink_to_fit(),
                ContentBlock::Thinking(t) => t.thinking.shrink_to_fit(),
                ContentBlock::ToolCall(_) | ContentBlock::Image(_) => {}
            }
        }
        self.message.stop_reason = stop_reason;
        self.message.error_message = error_message;
        self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn assembles_text_and_tool_calls_and_emits_deltas_only() {
        let mut model = Model::placeholder();
        model.cost.output = 1_000_000.0;
        let mut draft = Draft::new(&model);
        draft.start_record();
        let start = draft.block_start(0, BlockKind::Text);
        assert_eq!(
            start["assistantMessageEvent"],
            json!({"type":"text_start","contentIndex":0})
        );
        let delta = draft.delta(0, "Hel".into()).unwrap().to_value().unwrap();
        assert_eq!(
            delta["assistantMessageEvent"],
            json!({"type":"text_delta","contentIndex":0,"delta":"Hel"})
        );
        draft.delta(0, "lo".into());
        let end = draft.block_end(0, None).unwrap().to_value().unwrap();
        assert_eq!(
            end["assistantMessageEvent"],
            json!({"type":"text_end","contentIndex":0,"content":"Hello"})
        );
        draft.block_start(
            1,
            BlockKind::ToolCall {
                id: "c1".into(),
                name: "bash".into(),
            },
        );
        draft.delta(1, "{\"command\":".into());
        draft.delta(1, "\"ls\"}".into());
        let end = draft.block_end(1, None).unwrap().to_value().unwrap();
        assert_eq!(
            end["assistantMessageEvent"]["toolCall"],
            json!({"type":"toolCall","id":"c1","name":"bash","arguments":{"command":"ls"}})
        );
        draft.set_usage(Usage {
            output: 2,
            ..Usage::default()
        });
        let message = draft.finish(StopReason::ToolUse, None);
        assert_eq!(message.usage.cost.output, 2.0);
        assert_eq!(message.tool_calls().count(), 1);
    }

    /// A secret streamed a few bytes at a time never spans two delta records.
    #[test]
    fn deltas_hold_back_so_no_secret_spans_records() {
        const SECRET: &str = "sk-draft-HOLDBACK-0123456789";
        redact::register_secrets([SECRET.to_string()]);
        let mut draft = Draft::new(&Model::placeholder());
        draft.block_start(0, BlockKind::Text);
        let text = format!("The key is {SECRET}, and é again {SECRET}.");
        let mut records = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(5) {
            records.extend(draft.delta(0, piece.iter().collect()));
        }
        records.extend(draft.flush_held(0));
        let deltas: Vec<String> = records
            .iter()
            .map(|r| {
                r.to_value().unwrap()["assistantMessageEvent"]["delta"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(deltas.concat(), text);
        // No record boundary falls inside a secret.
        let mut boundary = 0;
        for delta in &deltas {
            boundary += delta.len();
            for (start, _) in text.match_indices(SECRET) {
                assert!(
                    !(start < boundary && boundary < start + SECRET.len()),
                    "{deltas:?}"
                );
            }
        }
    }
}
