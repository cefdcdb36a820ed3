//! The assistant message being streamed (pure): provider-neutral `StreamEvent`s in, the growing
//! `AssistantMessage` and the `message_update` events out. The draft holds the reply once; each
//! delta is forwarded, never a cumulative copy (seed: delta-only updates) — except in the legacy
//! profile, where each update also carries the message so far, serialized for that one record
//! and dropped once written (memory stays O(reply); stdout grows quadratically by nature).
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
use crate::redact::{self, Redactions};
use crate::rpc::Profile;
use crate::rpc::events::{AssistantEvent, BlockFamily, Event, MessageUpdate};

pub struct Draft {
    pub message: AssistantMessage,
    /// Raw argument JSON of tool-call blocks, by content index, until the block ends.
    tool_arguments: Vec<(usize, String)>,
    prices: crate::config::ModelCost,
    /// `message_start` went out.
    pub started: bool,
    /// Legacy: updates carry the cumulative message.
    cumulative: bool,
    /// Bytes of deltas streamed into this message so far (what a legacy update repeats).
    streamed: usize,
    /// `message.usage` serialized, for every `message_update` until it changes.
    usage_json: crate::rpc::SharedJson,
    /// Blocks that started and have not ended yet, in start order (abort closes them).
    open_blocks: Vec<usize>,
    /// Per block index: streamed text not yet sent (see the module note).
    held: Vec<(usize, String)>,
    redactions: Redactions,
    redactions_generation: u64,
    /// Per ended text/thinking block: the JSON literal its end record carried, reused as a
    /// piece of the finished message's JSON (a long reply is serialized once).
    literals: Vec<(usize, crate::rpc::SharedJson)>,
}

/// Legacy updates are sent as they come until the message is this large (see
/// `Draft::pace_cumulative`).
const LEGACY_FREE_BYTES: usize = 4 * 1024;
/// Past `LEGACY_FREE_BYTES`, a legacy update brings at least 1/this of the message.
const LEGACY_GROWTH: usize = 8;

impl Draft {
    pub fn new(model: &Model, profile: Profile) -> Draft {
        let mut message = AssistantMessage::empty(&model.api, &model.provider, &model.id);
        if profile == Profile::Default {
            // Partial messages say "pending" (pi 0.83.0); 0.73.1's said "stop" until they ended.
            message.stop_reason = StopReason::Pending;
        }
        Draft {
            message,
            tool_arguments: Vec::new(),
            prices: model.cost.clone(),
            started: false,
            cumulative: profile == Profile::Legacy,
            streamed: 0,
            usage_json: crate::rpc::shared_json(&Usage::default(), 128),
            open_blocks: Vec::new(),
            held: Vec::new(),
            redactions: redact::default_redactions(),
            redactions_generation: redact::generation(),
            literals: Vec::new(),
        }
    }

    /// The `message_start` event (empty content, zero usage), marking the draft started.
    pub fn start_event(&mut self) -> Event {
        self.started = true;
        let message = AgentMessage::Assistant(self.message.clone());
        Event::MessageStart {
            message: crate::rpc::shared_json(&message, 512),
        }
    }

    /// A `message_update` for `event`, with the usage so far (and, in legacy, the message so
    /// far).
    fn update(&self, event: AssistantEvent) -> Event {
        let snapshot = self.cumulative.then(|| self.snapshot());
        Event::MessageUpdate(Box::new(MessageUpdate {
            event,
            usage: self.usage_json.clone(),
            snapshot,
        }))
    }

    pub fn set_meta(&mut self, response_id: Option<String>, response_model: Option<String>) {
        if response_id.is_some() {
            self.message.response_id = response_id;
        }
        if response_model.is_some() {
            self.message.response_model = response_model;
        }
    }

    /// One more entry of the reply's `diagnostics` (pi 1.6.0; not in the legacy profile). The
    /// list stays where its first entry put it, as 1.6.0's key order follows when it was added:
    /// before the response started, right after `timestamp`; before the stop reason, right
    /// before `rawStopReason`; otherwise right before `errorMessage` (which 1.6.0 sets last).
    pub fn add_diagnostic(&mut self, diagnostic: serde_json::Value) {
        if self.cumulative {
            return;
        }
        let message = &mut self.message;
        let list = if message.early_diagnostics.is_some() {
            &mut message.early_diagnostics
        } else if message.mid_diagnostics.is_some() {
            &mut message.mid_diagnostics
        } else if message.diagnostics.is_some() {
            &mut message.diagnostics
        } else if !self.started {
            &mut message.early_diagnostics
        } else if message.raw_stop_reason.is_none() && message.error_message.is_none() {
            &mut message.mid_diagnostics
        } else {
            &mut message.diagnostics
        };
        list.get_or_insert_with(Vec::new).push(diagnostic);
    }

    /// Prices `usage` from the model's rates; a total the provider billed (OpenRouter) stays.
    pub fn set_usage(&mut self, mut usage: Usage) {
        let billed = (usage.cost.total_from_provider == Some(true)).then_some(usage.cost.total);
        self.prices.apply_to(&mut usage);
        if let Some(total) = billed {
            usage.cost.total = total;
            usage.cost.total_from_provider = Some(true);
        }
        if self.cumulative {
            // Fields 0.73.1 never sent (the legacy profile leaves them out).
            usage.reasoning = None;
            usage.cache_write_1h = None;
            usage.cost.total_from_provider = None;
        }
        self.usage_json = crate::rpc::shared_json(&usage, 128);
        self.message.usage = usage;
    }

    /// The stop reason in the provider's words (not in the legacy profile: 0.73.1 had none).
    pub fn set_raw_stop_reason(&mut self, reason: String) {
        if !self.cumulative {
            self.message.raw_stop_reason = Some(reason);
        }
    }

    /// Whether the model ended its turn (not in the legacy profile: 0.73.1 had no such field).
    pub fn set_end_turn(&mut self, end_turn: bool) {
        if !self.cumulative {
            self.message.end_turn = Some(end_turn);
        }
    }

    /// pi 1.6.0's closing fields of a reply: how long it took and the thinking level its
    /// request asked for (not in the legacy profile).
    pub fn set_timing(
        &mut self,
        duration: std::time::Duration,
        level: crate::config::ThinkingLevel,
    ) {
        if !self.cumulative {
            self.message.duration_ms = Some(duration.as_millis() as u64);
            self.message.thinking_level = Some(level.as_str().to_string());
        }
    }

    /// The effort the request told the provider in the conversation (pi 1.6.0's
    /// `providerThinkingLevel`, on the message from its start; not in the legacy profile).
    pub fn set_provider_thinking_level(&mut self, level: Option<String>) {
        if !self.cumulative {
            self.message.provider_thinking_level = level;
        }
    }

    /// Usage the provider priced itself, kept as it is.
    /// Scales the priced cost, total included (pi 1.6.0 prices OpenAI's flex and priority
    /// tiers so, after the model's rates).
    pub fn multiply_cost(&mut self, multiplier: f64) {
        let cost = &mut self.message.usage.cost;
        cost.input *= multiplier;
        cost.output *= multiplier;
        cost.cache_read *= multiplier;
        cost.cache_write *= multiplier;
        cost.total = cost.input + cost.output + cost.cache_read + cost.cache_write;
        self.usage_json = crate::rpc::shared_json(&self.message.usage, 128);
    }

    pub fn set_priced_usage(&mut self, usage: Usage) {
        self.usage_json = crate::rpc::shared_json(&usage, 128);
        self.message.usage = usage;
    }

    /// The message so far, serialized for one legacy record. Open tool calls show their
    /// arguments parsed as far as they have streamed, plus the raw `partialJson`, as 0.73.1 did.
    fn snapshot(&self) -> crate::rpc::SharedJson {
        let message = AgentMessage::Assistant(self.message.clone());
        if self.tool_arguments.is_empty() {
            return crate::rpc::shared_json(&message, 1024);
        }
        let mut value = serde_json::to_value(&message).unwrap_or(Value::Null);
        for (index, raw) in &self.tool_arguments {
            if let Some(Value::Object(block)) = value["content"].get_mut(*index) {
                block.insert(
                    "arguments".into(),
                    provider::partial_json::parse_tool_arguments(raw),
                );
                block.insert("partialJson".into(), Value::String(raw.clone()));
            }
        }
        crate::rpc::shared_json(&value, 1024)
    }

    pub fn block_start(&mut self, index: usize, kind: BlockKind) -> Event {
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
        let tool = match &block {
            ContentBlock::ToolCall(call) => Some((call.id.clone(), call.name.clone())),
            _ => None,
        };
        self.message.content.push(block);
        let index = self.message.content.len() - 1;
        self.open_blocks.push(index);
        self.update(AssistantEvent::Start {
            family,
            index,
            tool,
        })
    }

    /// Appends a delta; `None` when the index names no block (a provider bug, logged).
    pub fn delta(&mut self, index: usize, delta: String) -> Option<Event> {
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
        self.streamed += delta.len();
        let delta = self.hold_back(index, delta, family == BlockFamily::ToolCall);
        let delta = self.pace_cumulative(index, delta);
        (!delta.is_empty()).then(|| {
            self.update(AssistantEvent::Delta {
                family,
                index,
                delta,
            })
        })
    }

    /// The part of `delta` (after what this block already holds) that may go out now. Tool-call
    /// arguments are JSON source: their `\\u` escapes of ordinary characters go out as those
    /// characters (the same JSON), so a key spelled with escapes is seen — and redacted — whole,
    /// and no record ends inside an escape.
    fn hold_back(&mut self, index: usize, delta: String, json_source: bool) -> String {
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
        if !json_source {
            let cut = self.redactions.streaming_cut(combined);
            let rest = combined.split_off(cut);
            return std::mem::replace(combined, rest);
        }
        let (mut plain, complete) = redact::plain_json_escapes(combined);
        let pending = combined.split_off(complete);
        let cut = redact::escape_safe_cut(&plain, self.redactions.streaming_cut(&plain));
        let mut rest = plain.split_off(cut);
        rest.push_str(&pending);
        *combined = rest;
        plain
    }

    /// Legacy updates repeat the whole message, so their total is quadratic in the reply. Past
    /// `LEGACY_FREE_BYTES`, text that is ready waits (held like a secret's start) until it is at
    /// least `1 / LEGACY_GROWTH` of the message: each update then brings a fixed share of what
    /// it repeats, and stdout stays within ~`2 × LEGACY_GROWTH + 1` times the message (plus the
    /// first `LEGACY_FREE_BYTES`' updates). Held text goes out before the block's end.
    fn pace_cumulative(&mut self, index: usize, ready: String) -> String {
        if !self.cumulative
            || ready.is_empty()
            || self.streamed <= LEGACY_FREE_BYTES
            || ready.len() * LEGACY_GROWTH >= self.streamed
        {
            return ready;
        }
        match self.held.iter_mut().find(|(i, _)| *i == index) {
            Some((_, held)) => held.insert_str(0, &ready),
            None => self.held.push((index, ready)),
        }
        String::new()
    }

    /// The held tail of a block as its last delta (before its end record, or when the stream
    /// stops mid-block).
    pub fn flush_held(&mut self, index: usize) -> Option<Event> {
        let position = self.held.iter().position(|(i, _)| *i == index)?;
        let (_, text) = self.held.swap_remove(position);
        let family = match self.message.content.get(index)? {
            ContentBlock::Text(_) => BlockFamily::Text,
            ContentBlock::Thinking(_) => BlockFamily::Thinking,
            ContentBlock::ToolCall(_) => BlockFamily::ToolCall,
            ContentBlock::Image(_) => return None,
        };
        (!text.is_empty()).then(|| {
            self.update(AssistantEvent::Delta {
                family,
                index,
                delta: text,
            })
        })
    }

    /// Every block's held tail (the stream ended without closing them).
    pub fn flush_all_held(&mut self) -> Vec<Event> {
        let indexes: Vec<usize> = self.held.iter().map(|(i, _)| *i).collect();
        indexes
            .into_iter()
            .filter_map(|i| self.flush_held(i))
            .collect()
    }

    /// Sets a thinking block's `redacted` flag (shown from its end event on).
    pub fn set_redacted(&mut self, index: usize, redacted: bool) {
        if let Some(ContentBlock::Thinking(t)) = self.message.content.get_mut(index) {
            t.redacted = Some(redacted);
        }
    }

    pub fn block_end(&mut self, index: usize, signature: Option<String>) -> Option<Event> {
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
        let mut event = AssistantEvent::end(index, block);
        if self.message.api == "pi-messages" {
            // pi 1.6.0 passes the gateway's end event on whole: its signature and flag too.
            if let AssistantEvent::TextEnd {
                content_signature,
                redacted,
                ..
            } = &mut event
            {
                match &self.message.content[index] {
                    ContentBlock::Text(t) => content_signature.clone_from(&t.text_signature),
                    ContentBlock::Thinking(t) => {
                        content_signature.clone_from(&t.thinking_signature);
                        *redacted = t.redacted;
                    }
                    _ => {}
                }
            }
        }
        self.keep_literal(&event);
        self.open_blocks.retain(|open| *open != index);
        Some(self.update(event))
    }

    /// The end events of the blocks still open, in content order (abort closes them, as pi does,
    /// before `message_end`); their partial says `stopReason:"aborted"`.
    pub fn close_open_blocks(&mut self, error_message: Option<&str>) -> Vec<Event> {
        let mut open = std::mem::take(&mut self.open_blocks);
        open.sort_unstable();
        if !open.is_empty() {
            self.message.stop_reason = StopReason::Aborted;
            self.message.error_message = error_message.map(str::to_string);
        }
        let mut events = Vec::with_capacity(open.len());
        for index in open {
            self.finish_tool_arguments(index);
            if let Some(block) = self.message.content.get(index) {
                let end = AssistantEvent::end(index, block);
                self.keep_literal(&end);
                events.push(self.update(end));
            }
        }
        events
    }

    fn keep_literal(&mut self, event: &AssistantEvent) {
        if let AssistantEvent::TextEnd { index, content, .. } = event {
            self.literals.retain(|(i, _)| i != index);
            self.literals.push((*index, content.clone()));
        }
    }

    fn finish_tool_arguments(&mut self, index: usize) {
        let Some(position) = self.tool_arguments.iter().position(|(i, _)| *i == index) else {
            return;
        };
        let (_, raw) = self.tool_arguments.swap_remove(position);
        if let Some(ContentBlock::ToolCall(call)) = self.message.content.get_mut(index) {
            call.arguments = provider::partial_json::parse_tool_arguments(&raw);
        }
    }

    /// `finish`, and the message serialized for its records and the session entry, sharing
    /// each ended block's literal with that block's end record.
    pub fn finish_serialized(
        mut self,
        stop_reason: StopReason,
        error_message: Option<String>,
    ) -> (AgentMessage, crate::rpc::SharedJson) {
        let literals = std::mem::take(&mut self.literals);
        let message = AgentMessage::Assistant(self.finish(stop_reason, error_message));
        let json = crate::rpc::shared::message(&message, &literals);
        (message, json)
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

    fn value(event: Event) -> Value {
        event.to_extension_value().unwrap()
    }

    /// The list sits where its first entry put it (pi 1.6.0's key order): before the response,
    /// right after `timestamp`; later, after `errorMessage`. It reads back as `diagnostics`.
    #[test]
    fn diagnostics_stay_where_their_first_entry_put_them() {
        let keys = |message: &AssistantMessage| -> Vec<String> {
            let value = serde_json::to_value(message).unwrap();
            value.as_object().unwrap().keys().cloned().collect()
        };
        let model = Model::placeholder();
        let mut early = Draft::new(&model, Profile::Default);
        early.add_diagnostic(json!({"type": "a"}));
        early.start_event();
        early.add_diagnostic(json!({"type": "b"}));
        let early = early.finish(StopReason::Error, Some("boom".into()));
        let order = keys(&early);
        let at = |key: &str| order.iter().position(|k| k == key).unwrap();
        assert_eq!(at("diagnostics"), at("timestamp") + 1, "{order:?}");
        // Once the response started: before the stop reason and the error message, which
        // 1.6.0 sets after it.
        let mut mid = Draft::new(&model, Profile::Default);
        mid.start_event();
        mid.add_diagnostic(json!({"type": "c"}));
        mid.set_raw_stop_reason("completed".into());
        let mid = mid.finish(StopReason::Error, Some("boom".into()));
        let order = keys(&mid);
        let at = |key: &str| order.iter().position(|k| k == key).unwrap();
        assert_eq!(at("diagnostics") + 1, at("rawStopReason"), "{order:?}");
        assert!(at("diagnostics") < at("errorMessage"), "{order:?}");
        // After the stop reason (Anthropic's input transformations): before `errorMessage`.
        let mut late = Draft::new(&model, Profile::Default);
        late.start_event();
        late.set_raw_stop_reason("end_turn".into());
        late.add_diagnostic(json!({"type": "d"}));
        late.add_diagnostic(json!({"type": "e"}));
        let late = late.finish(StopReason::Error, Some("boom".into()));
        let order = keys(&late);
        let at = |key: &str| order.iter().position(|k| k == key).unwrap();
        assert_eq!(at("diagnostics"), at("rawStopReason") + 1, "{order:?}");
        assert_eq!(at("errorMessage"), at("diagnostics") + 1, "{order:?}");
        assert_eq!(late.diagnostics.as_ref().map(Vec::len), Some(2));

        let text = serde_json::to_string(&early).unwrap();
        let back: AssistantMessage = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back.diagnostics,
            Some(vec![json!({"type": "a"}), json!({"type": "b"})])
        );
    }

    #[test]
    fn assembles_text_and_tool_calls_and_emits_deltas_only() {
        let mut model = Model::placeholder();
        model.cost.output = 1_000_000.0;
        let mut draft = Draft::new(&model, Profile::Default);
        draft.start_event();
        let start = value(draft.block_start(0, BlockKind::Text));
        assert_eq!(
            start["assistantMessageEvent"],
            json!({"type":"text_start","contentIndex":0})
        );
        let delta = value(draft.delta(0, "Hel".into()).unwrap());
        assert_eq!(
            delta["assistantMessageEvent"],
            json!({"type":"text_delta","contentIndex":0,"delta":"Hel"})
        );
        draft.delta(0, "lo".into());
        let end = value(draft.block_end(0, None).unwrap());
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
        let end = value(draft.block_end(1, None).unwrap());
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

    #[test]
    fn legacy_updates_carry_the_message_so_far_and_abort_closes_the_open_block() {
        let model = Model::placeholder();
        let mut draft = Draft::new(&model, Profile::Legacy);
        draft.start_event();
        draft.block_start(0, BlockKind::Text);
        let delta = draft.delta(0, "Hel".into()).unwrap();
        let legacy = |event: &Event| {
            event
                .to_record(Profile::Legacy)
                .unwrap()
                .to_value()
                .unwrap()
        };
        let record = legacy(&delta);
        assert_eq!(record["message"]["content"][0]["text"], "Hel");
        assert_eq!(
            record["assistantMessageEvent"]["partial"],
            record["message"]
        );
        draft.delta(0, "lo".into());
        let closes = draft.close_open_blocks(Some("Request was aborted"));
        assert_eq!(closes.len(), 1);
        let close = legacy(&closes[0]);
        assert_eq!(
            close["assistantMessageEvent"]["type"], "text_end",
            "{close}"
        );
        assert_eq!(close["assistantMessageEvent"]["content"], "Hello");
        assert_eq!(close["message"]["stopReason"], "aborted");
        assert_eq!(close["message"]["errorMessage"], "Request was aborted");
        assert!(draft.close_open_blocks(None).is_empty());
    }

    /// A secret streamed a few bytes at a time never spans two delta records.
    #[test]
    fn deltas_hold_back_so_no_secret_spans_records() {
        const SECRET: &str = "sk-draft-HOLDBACK-0123456789";
        redact::register_secrets([SECRET.to_string()]);
        let mut draft = Draft::new(&Model::placeholder(), Profile::Default);
        draft.block_start(0, BlockKind::Text);
        let text = format!("The key is {SECRET}, and é again {SECRET}.");
        let mut events = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(5) {
            events.extend(draft.delta(0, piece.iter().collect()));
        }
        events.extend(draft.flush_held(0));
        let deltas: Vec<String> = events
            .into_iter()
            .map(|e| {
                value(e)["assistantMessageEvent"]["delta"]
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
