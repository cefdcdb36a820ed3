//! The `pi-messages` wire API (pi-ai 1.6.0 `api/pi-messages.js`, the `radius` provider's): pi's
//! own message protocol. One POST of `{model, context, options}` to `<baseUrl>/messages` with the
//! key as a bearer; the answer is an SSE stream of serialized assistant-message events (`start`,
//! `text_*`, `thinking_*`, `toolcall_*`) ending in a `done` or `error` event that carries the stop
//! reason and usage.
//!
//! The context is pi's transcript as 1.6.0 sends it: its messages as the session stores them,
//! the system messages in place (the agent keeps them for this API, `agent::convert`): the
//! first carries the prompt in named `sections` (preamble, tools, rules, docs, cwd) with an empty
//! `content`, and the tools (`toolsAdded`); later ones patch sections and tools. A request
//! without any (a compaction summary's) opens with the message pi-ai's `normalizeContext` makes:
//! the whole prompt as `content`, the tools when there are any, `timestamp` 0.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::decode::{Emitter, WireDecoder};
use super::request::{join_url, with_extra_headers};
use super::sse::SseEvent;
use super::types::{
    BlockKind, CacheRetention, HttpRequest, StreamRequest, cache_retention_from_env,
};
use crate::config::ThinkingLevel;
use crate::messages::{AgentMessage, StopReason, Usage};

pub fn build_request(request: &StreamRequest) -> HttpRequest {
    build_request_with(request, cache_retention_from_env())
}

pub fn build_request_with(request: &StreamRequest, retention: CacheRetention) -> HttpRequest {
    let model = &request.model;
    let defaults = vec![
        (
            "authorization".to_string(),
            format!("Bearer {}", request.api_key),
        ),
        ("accept".to_string(), "text/event-stream".to_string()),
        ("content-type".to_string(), "application/json".to_string()),
    ];
    let headers = with_extra_headers(defaults, model, &request.headers);

    let transcript = request
        .messages
        .iter()
        .any(|m| matches!(m, AgentMessage::System(_)));
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !transcript {
        messages.extend(initial_system_message(request));
    }
    messages.extend(
        request
            .messages
            .iter()
            .map(|m| serde_json::to_value(m).unwrap_or(Value::Null)),
    );

    // Undefined options are left out, as JSON.stringify leaves them.
    let mut options = Map::new();
    if let Some(max_tokens) = request.max_tokens {
        options.insert("maxTokens".into(), json!(max_tokens));
    }
    if request.thinking != ThinkingLevel::Off {
        options.insert("reasoning".into(), json!(request.thinking.as_str()));
    }
    if retention == CacheRetention::Long {
        options.insert("cacheRetention".into(), json!("long"));
    }
    if !request.session_id.is_empty() {
        options.insert("sessionId".into(), json!(request.session_id));
    }

    HttpRequest {
        url: join_url(&model.base_url, "/messages"),
        headers,
        body: json!({
            "model": model.id,
            "context": {"messages": messages},
            "options": options,
        }),
    }
}

/// pi-ai's `createInitialSystemMessage`: the prompt and the tools as one leading system message
/// (none when both are empty).
fn initial_system_message(request: &StreamRequest) -> Option<Value> {
    if request.system_prompt.is_empty() && request.tools.is_empty() {
        return None;
    }
    let mut system = Map::new();
    system.insert("role".into(), json!("system"));
    system.insert("content".into(), json!(request.system_prompt));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
            .collect();
        system.insert("toolsAdded".into(), Value::Array(tools));
    }
    system.insert("timestamp".into(), json!(0));
    Some(Value::Object(system))
}

/// A block the wire opened: its content index and whether argument deltas came for it.
struct Block {
    index: usize,
    kind: &'static str,
    had_delta: bool,
}

pub struct Decoder {
    provider: String,
    /// Wire `contentIndex` → the block.
    blocks: HashMap<u64, Block>,
    /// How many blocks the wire started (a start must name the next one).
    started: u64,
}

impl Decoder {
    pub fn new(request: &StreamRequest) -> Decoder {
        Decoder {
            provider: request.model.provider.clone(),
            blocks: HashMap::new(),
            started: 0,
        }
    }

    fn on_event(&mut self, event: &Value, out: &mut Emitter) {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if event.get("contentIndex").is_some() {
            let wire = event.get("contentIndex").and_then(Value::as_u64);
            let valid = match wire {
                Some(i) if kind.ends_with("_start") => i == self.started,
                Some(i) => self.blocks.contains_key(&i),
                None => false,
            };
            if !valid {
                out.fail(format!(
                    "Invalid contentIndex {} in pi-messages {kind} event",
                    event["contentIndex"]
                ));
                return;
            }
        }
        let wire = event
            .get("contentIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let text = |key: &str| event.get(key).and_then(Value::as_str).map(str::to_string);
        match kind {
            "text_start" | "thinking_start" | "toolcall_start" => {
                let (block_kind, name) = match kind {
                    "text_start" => (BlockKind::Text, "text"),
                    "thinking_start" => (BlockKind::Thinking { redacted: false }, "thinking"),
                    _ => (
                        BlockKind::ToolCall {
                            id: text("id").unwrap_or_default(),
                            name: text("toolName").unwrap_or_default(),
                        },
                        "toolCall",
                    ),
                };
                let index = out.start(block_kind);
                self.started += 1;
                self.blocks.insert(
                    wire,
                    Block {
                        index,
                        kind: name,
                        had_delta: false,
                    },
                );
            }
            "text_delta" | "thinking_delta" | "toolcall_delta" => {
                if let Some(block) = self.blocks.get_mut(&wire) {
                    block.had_delta = true;
                    out.delta(block.index, text("delta").unwrap_or_default());
                }
            }
            "text_end" | "thinking_end" => {
                if let Some(block) = self.blocks.get(&wire) {
                    if let Some(redacted) = event["redacted"].as_bool()
                        && kind == "thinking_end"
                    {
                        out.redacted(block.index, redacted);
                    }
                    out.end(block.index, text("contentSignature"));
                }
            }
            "toolcall_end" => {
                if let Some(block) = self.blocks.get(&wire) {
                    // The final arguments: sent whole when no deltas built them.
                    if !block.had_delta && block.kind == "toolCall" {
                        let arguments = event
                            .pointer("/toolCall/arguments")
                            .cloned()
                            .unwrap_or_else(|| json!({}));
                        out.delta(block.index, arguments.to_string());
                    }
                    out.end(block.index, None);
                }
            }
            "done" | "error" => {
                out.meta(text("responseId"), text("responseModel"));
                if let Some(usage) = event.get("usage") {
                    // pi 1.6.0 keeps the server's usage and cost as they are.
                    let usage = serde_json::from_value::<Usage>(usage.clone()).unwrap_or_default();
                    out.priced_usage(usage);
                }
                let reason = event
                    .get("reason")
                    .cloned()
                    .and_then(|r| serde_json::from_value::<StopReason>(r).ok())
                    .unwrap_or(if kind == "done" {
                        StopReason::Stop
                    } else {
                        StopReason::Error
                    });
                if kind == "error" {
                    let message = text("errorMessage")
                        .unwrap_or_else(|| super::decode::UNKNOWN_ERROR_TEXT.to_string());
                    out.done_with_message(reason, Some(message));
                } else {
                    out.done(reason);
                }
            }
            _ => {}
        }
    }
}

impl WireDecoder for Decoder {
    fn on_sse(&mut self, sse: &SseEvent, out: &mut Emitter) {
        let data = sse.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return;
        }
        if let Some(event) = out.parse_json(data, "pi-messages event") {
            self.on_event(&event, out);
        }
    }

    fn on_eof(&mut self, out: &mut Emitter) {
        out.fail(format!(
            "{} stream ended without a terminal event",
            self.provider
        ));
    }

    fn http_error_message(&self, status: u16, body: &str) -> String {
        http_error_message(status, body)
    }
}

/// `<status> <statusText>: <error.message or the body>[ (<error.code>)]`, as pi-ai words it.
pub fn http_error_message(status: u16, body: &str) -> String {
    let reason = ureq::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let error = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").filter(|e| e.is_object()).cloned());
    let message = error
        .as_ref()
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or(body);
    let code = error
        .as_ref()
        .and_then(|e| e.get("code"))
        .and_then(Value::as_str)
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    format!("{status} {reason}: {message}{code}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::decode::decode_in_parts;
    use crate::provider::test_support::{model, request, user};
    use crate::provider::types::StreamEvent;

    #[test]
    fn request_is_one_post_of_model_context_and_options() {
        let mut m = model("pi-messages", "radius", "balanced");
        m.base_url = "https://radius.pi.dev/v1/".into();
        let mut r = request(m, vec![user("hi")]);
        r.api_key = "rk".into();
        r.system_prompt = "SYS".into();
        r.thinking = ThinkingLevel::High;
        r.session_id = "s-1".into();
        let http = build_request_with(&r, CacheRetention::Long);
        assert_eq!(http.url, "https://radius.pi.dev/v1/messages");
        assert_eq!(
            http.headers[..3],
            [
                ("authorization".to_string(), "Bearer rk".to_string()),
                ("accept".to_string(), "text/event-stream".to_string()),
                ("content-type".to_string(), "application/json".to_string()),
            ]
        );
        assert_eq!(http.body["model"], "balanced");
        assert_eq!(
            http.body["options"],
            json!({"reasoning": "high", "cacheRetention": "long", "sessionId": "s-1"})
        );
        let messages = http.body["context"]["messages"].as_array().unwrap();
        assert_eq!(
            messages[0],
            json!({"role": "system", "content": "SYS", "timestamp": 0})
        );
        assert_eq!(messages[1]["role"], "user");
        assert_eq!(messages[1]["content"][0]["text"], "hi");
    }

    #[test]
    fn events_map_to_blocks_usage_and_the_stop() {
        let stream = concat!(
            "data: {\"type\":\"start\"}\n\n",
            "data: {\"type\":\"text_start\",\"contentIndex\":0}\n\n",
            "data: {\"type\":\"text_delta\",\"contentIndex\":0,\"delta\":\"Hi\"}\n\n",
            "data: {\"type\":\"text_end\",\"contentIndex\":0,\"content\":\"Hi\"}\n\n",
            "data: {\"type\":\"toolcall_start\",\"contentIndex\":1,\"id\":\"t1\",\"toolName\":\"bash\"}\n\n",
            "data: {\"type\":\"toolcall_end\",\"contentIndex\":1,\"toolCall\":{\"type\":\"toolCall\",\"id\":\"t1\",\"name\":\"bash\",\"arguments\":{\"command\":\"ls\"}}}\n\n",
            "data: {\"type\":\"done\",\"reason\":\"toolUse\",\"responseId\":\"r1\",\"usage\":{\"input\":5,\"output\":2,\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":7}}\n\n",
        );
        let r = request(model("pi-messages", "radius", "balanced"), Vec::new());
        let events = decode_in_parts(Decoder::new(&r), &[stream.as_bytes()]);
        assert!(events.contains(&StreamEvent::Delta {
            index: 1,
            delta: "{\"command\":\"ls\"}".into()
        }));
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done {
                stop_reason: StopReason::ToolUse,
                error_message: None
            })
        );
        let bad = "data: {\"type\":\"text_delta\",\"contentIndex\":3,\"delta\":\"x\"}\n\n";
        let events = decode_in_parts(Decoder::new(&r), &[bad.as_bytes()]);
        assert!(matches!(
            events.last(),
            Some(StreamEvent::Failed(e)) if e.message == "Invalid contentIndex 3 in pi-messages text_delta event"
        ));
        let events = decode_in_parts(Decoder::new(&r), &[b"data: {\"type\":\"start\"}\n\n"]);
        assert!(matches!(
            events.last(),
            Some(StreamEvent::Failed(e)) if e.message == "radius stream ended without a terminal event"
        ));
        assert_eq!(
            http_error_message(
                429,
                r#"{"error":{"message":"slow down","code":"rate_limited"}}"#
            ),
            "429 Too Many Requests: slow down (rate_limited)"
        );
    }
}
