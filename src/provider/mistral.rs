//! The `mistral-conversations` wire API (pi-ai `providers/mistral.js`, which drives the Mistral
//! SDK's `chat.stream`): the request as the SDK puts it on the wire (snake_case keys in the SDK's
//! schema order, its defaults `index: 0` on tool calls and `prefix: false` on assistant messages)
//! and the decoder for its `data:` chunks (text and thinking content parts, tool-call deltas keyed
//! by id and index). Both are pure; the HTTP exchange lives in `provider/mod.rs`.
//!
//! Tool-call ids from other providers are rewritten to the 9 alphanumeric characters Mistral
//! accepts (pi's per-request normalizer: the id itself when it already fits, else a short hash).
//! Tool calls stay open until the stream ends, then close in the order they started. From pi
//! 1.6.0 (which dropped the SDK) the decoder takes two fixes: cached prompt tokens are counted as
//! cache reads, and empty text deltas open no block. The request stays 0.73.1's.

use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::decode::{Emitter, TextRun, WireDecoder};
use super::openai_responses::short_hash;
use super::request::{
    context_clamped_max_tokens, join_url, mapped_effort, mapped_thinking_level, strict_parameters,
    thinking_level, with_extra_headers,
};
use super::sse::SseEvent;
use super::transform::transform_messages;
use super::types::{BlockKind, HttpRequest, StreamRequest};
use crate::config::ThinkingLevel;
use crate::messages::{
    AgentMessage, ContentBlock, StopReason, Usage, UserContent, has_images, joined_text,
};

const DEFAULT_BASE_URL: &str = "https://api.mistral.ai";
const TOOL_CALL_ID_LENGTH: usize = 9;
const MAX_ERROR_BODY_CHARS: usize = 4000;
const USER_AGENT: &str = "mistral-client-typescript/2.7.0";
const IMAGE_OMITTED: &str = "(image omitted: model does not support images)";

/// Strict tools with `compat.supportsStrictMode`.
pub(crate) fn strict_supported(model: &crate::config::Model) -> bool {
    model.compat_bool("supportsStrictMode") == Some(true)
}

pub fn build_request(request: &StreamRequest) -> HttpRequest {
    let model = &request.model;
    let defaults = vec![
        ("Content-Type".to_string(), "application/json".to_string()),
        ("Accept".to_string(), "text/event-stream".to_string()),
        (
            "authorization".to_string(),
            format!("Bearer {}", request.api_key),
        ),
    ];
    let mut headers = with_extra_headers(defaults, model, &request.headers);
    // KV-cache affinity, unless the caller set it.
    if !request.session_id.is_empty()
        && !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("x-affinity"))
    {
        headers.push(("x-affinity".into(), request.session_id.clone()));
    }
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("user-agent"))
    {
        headers.push(("user-agent".into(), USER_AGENT.into()));
    }

    let normalizer = ToolCallIds::default();
    let transformed = transform_messages(&request.messages, model, &|id| normalizer.normalize(id));
    let mut messages = Vec::new();
    if !request.system_prompt.is_empty() {
        messages.push(json!({"role": "system", "content": request.system_prompt}));
    }
    messages.extend(chat_messages(&transformed, model.supports_images()));

    let mut body = Map::new();
    body.insert("model".into(), json!(model.id));
    body.insert(
        "max_tokens".into(),
        json!(context_clamped_max_tokens(request)),
    );
    body.insert("stream".into(), json!(true));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        // pi 1.6.0: strict for the tools that prefer it, with `compat.supportsStrictMode`.
        let supported = strict_supported(model);
        let tools = request.tools.iter().map(|tool| {
            let strict = strict_parameters(request, tool, supported, None);
            json!({"type": "function", "function": {"name": tool.name,
                "description": tool.description,
                "parameters": strict.as_ref().unwrap_or(&tool.parameters),
                "strict": strict.is_some()}})
        });
        body.insert("tools".into(), Value::Array(tools.collect()));
    }
    // pi 1.6.0: a reasoning model with a `thinkingLevelMap` takes `reasoning_effort` (its `off`
    // mapping when thinking is off), any other reasoning model `prompt_mode: "reasoning"`.
    let level = thinking_level(request);
    if model.reasoning && model.thinking_level_map.is_some() {
        let effort = match level {
            Some(level) => Some(mapped_effort(model, level, "high")),
            None => mapped_thinking_level(model, ThinkingLevel::Off).cloned(),
        };
        if let Some(effort) = effort {
            body.insert("reasoning_effort".into(), effort);
        }
    } else if model.reasoning && level.is_some() {
        body.insert("prompt_mode".into(), json!("reasoning"));
    }

    let base = if model.base_url.is_empty() {
        DEFAULT_BASE_URL
    } else {
        model.base_url.trim_end_matches('/')
    };
    HttpRequest {
        url: join_url(base, "/v1/chat/completions"),
        headers,
        body: Value::Object(body),
    }
}

/// pi's per-request tool-call id normalizer: 9 alphanumerics, collisions resolved by rehashing.
#[derive(Default)]
struct ToolCallIds {
    ids: RefCell<HashMap<String, String>>,
    owners: RefCell<HashMap<String, String>>,
}

impl ToolCallIds {
    fn normalize(&self, id: &str) -> String {
        if let Some(existing) = self.ids.borrow().get(id) {
            return existing.clone();
        }
        let mut attempt = 0;
        loop {
            let candidate = derive_tool_call_id(id, attempt);
            let owner = self.owners.borrow().get(&candidate).cloned();
            if owner.as_deref().is_none_or(|o| o == id) {
                self.ids.borrow_mut().insert(id.into(), candidate.clone());
                self.owners
                    .borrow_mut()
                    .insert(candidate.clone(), id.into());
                return candidate;
            }
            attempt += 1;
        }
    }
}

fn derive_tool_call_id(id: &str, attempt: usize) -> String {
    let normalized: String = id.chars().filter(char::is_ascii_alphanumeric).collect();
    if attempt == 0 && normalized.len() == TOOL_CALL_ID_LENGTH {
        return normalized;
    }
    let seed_base = if normalized.is_empty() {
        id
    } else {
        &normalized
    };
    let seed = if attempt == 0 {
        seed_base.to_string()
    } else {
        format!("{seed_base}:{attempt}")
    };
    short_hash(&seed)
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(TOOL_CALL_ID_LENGTH)
        .collect()
}

fn data_url(mime_type: &str, data: &str) -> String {
    format!("data:{mime_type};base64,{data}")
}

fn chat_messages(messages: &[AgentMessage], images: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for message in messages {
        match message {
            AgentMessage::User(user) => match &user.content {
                UserContent::Text(text) => out.push(json!({"role": "user", "content": text})),
                UserContent::Blocks(blocks) => {
                    let had_images = has_images(blocks);
                    let content: Vec<Value> = blocks
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text(t) => Some(json!({"type": "text", "text": t.text})),
                            ContentBlock::Image(img) if images => Some(json!({"type": "image_url",
                                "image_url": data_url(&img.mime_type, &img.data)})),
                            _ => None,
                        })
                        .collect();
                    if !content.is_empty() {
                        out.push(json!({"role": "user", "content": content}));
                    } else if had_images && !images {
                        out.push(json!({"role": "user", "content": IMAGE_OMITTED}));
                    }
                }
            },
            AgentMessage::Assistant(assistant) => {
                let mut content = Vec::new();
                let mut tool_calls = Vec::new();
                for block in &assistant.content {
                    match block {
                        ContentBlock::Text(t) if !t.text.trim().is_empty() => {
                            content.push(json!({"type": "text", "text": t.text}));
                        }
                        ContentBlock::Thinking(t) if !t.thinking.trim().is_empty() => {
                            content.push(json!({"type": "thinking",
                                "thinking": [{"type": "text", "text": t.thinking}]}));
                        }
                        ContentBlock::ToolCall(call) => {
                            let arguments = if call.arguments.is_null() {
                                "{}".to_string()
                            } else {
                                call.arguments.to_string()
                            };
                            tool_calls.push(json!({"id": call.id, "type": "function",
                                "function": {"name": call.name, "arguments": arguments},
                                "index": 0}));
                        }
                        _ => {}
                    }
                }
                if content.is_empty() && tool_calls.is_empty() {
                    continue;
                }
                let mut item = Map::new();
                item.insert("role".into(), json!("assistant"));
                if !content.is_empty() {
                    item.insert("content".into(), Value::Array(content));
                }
                if !tool_calls.is_empty() {
                    item.insert("tool_calls".into(), Value::Array(tool_calls));
                }
                item.insert("prefix".into(), json!(false));
                out.push(Value::Object(item));
            }
            AgentMessage::ToolResult(result) => {
                let text = joined_text(&result.content, "\n");
                let has_images = has_images(&result.content);
                let mut content = vec![json!({"type": "text",
                    "text": tool_result_text(&text, has_images, images, result.is_error)})];
                if images {
                    for block in &result.content {
                        if let ContentBlock::Image(img) = block {
                            content.push(json!({"type": "image_url",
                                "image_url": data_url(&img.mime_type, &img.data)}));
                        }
                    }
                }
                out.push(json!({"role": "tool", "content": content,
                    "tool_call_id": result.tool_call_id, "name": result.tool_name}));
            }
            // A later system message, where it stands (a model that takes them in place).
            AgentMessage::System(system) => {
                let text = system.update_text();
                if !text.is_empty() {
                    out.push(json!({"role": "system", "content": text}));
                }
            }
            _ => {}
        }
    }
    out
}

fn tool_result_text(text: &str, has_images: bool, images: bool, is_error: bool) -> String {
    let prefix = if is_error { "[tool error] " } else { "" };
    let trimmed = text.trim();
    if !trimmed.is_empty() {
        let suffix = if has_images && !images {
            "\n[tool image omitted: model does not support images]"
        } else {
            ""
        };
        return format!("{prefix}{trimmed}{suffix}");
    }
    if has_images {
        if images {
            return format!("{prefix}(see attached image)");
        }
        return format!("{prefix}{IMAGE_OMITTED}");
    }
    format!("{prefix}(no tool output)")
}

/// pi's error text for a failed HTTP response: the status and the (truncated) body.
pub fn http_error_message(status: u16, body: &str) -> String {
    let body = body.trim();
    if body.is_empty() {
        let reason = ureq::http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Request failed");
        return format!("Mistral API error ({status}): {reason}");
    }
    let chars = body.chars().count();
    if chars <= MAX_ERROR_BODY_CHARS {
        return format!("Mistral API error ({status}): {body}");
    }
    let head: String = body.chars().take(MAX_ERROR_BODY_CHARS).collect();
    format!(
        "Mistral API error ({status}): {head}... [truncated {} chars]",
        chars - MAX_ERROR_BODY_CHARS
    )
}

/// Mistral chat chunks → `StreamEvent`s.
pub struct Decoder {
    text: TextRun,
    /// Tool blocks by `<id>:<index>`, in the order they started; open until the stream ends.
    tools: Vec<(String, usize)>,
    stop_reason: StopReason,
}

impl Decoder {
    pub fn new(_request: &StreamRequest) -> Decoder {
        Decoder {
            text: TextRun::default(),
            tools: Vec::new(),
            stop_reason: StopReason::Stop,
        }
    }

    fn on_chunk(&mut self, chunk: &Value, out: &mut Emitter) {
        out.first_response_id(chunk["id"].as_str());
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let count = |v: &Value| v.as_u64().unwrap_or(0);
            let prompt = count(&usage["prompt_tokens"]);
            // Cached prompt tokens (pi 1.6.0 reads them; 0.73.1 counted them as input).
            let cached = [
                "/prompt_tokens_details/cached_tokens",
                "/prompt_token_details/cached_tokens",
                "/num_cached_tokens",
            ]
            .iter()
            .find_map(|p| usage.pointer(p).and_then(Value::as_u64))
            .unwrap_or(0)
            .min(prompt);
            let input = prompt - cached;
            let output = count(&usage["completion_tokens"]);
            let total = match count(&usage["total_tokens"]) {
                0 => input + output + cached,
                total => total,
            };
            out.usage(Usage {
                input,
                output,
                cache_read: cached,
                total_tokens: total,
                ..Usage::default()
            });
        }
        let Some(choice) = chunk["choices"].get(0) else {
            return;
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            if !reason.is_empty() {
                out.raw_stop_reason(reason);
            }
            self.stop_reason = match reason {
                "length" | "model_length" => StopReason::Length,
                "tool_calls" => StopReason::ToolUse,
                "error" => StopReason::Error,
                _ => StopReason::Stop,
            };
        }
        let delta = &choice["delta"];
        match &delta["content"] {
            Value::String(text) => self.text_delta(text, out),
            Value::Array(items) => {
                for item in items {
                    match item {
                        Value::String(text) => self.text_delta(text, out),
                        _ if item["type"] == "thinking" => {
                            let text: String = item["thinking"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(|part| part["text"].as_str())
                                .collect();
                            if !text.is_empty() {
                                self.text.append(true, text, out);
                            }
                        }
                        _ if item["type"] == "text" => {
                            self.text_delta(item["text"].as_str().unwrap_or(""), out)
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            self.text.close(out);
            let position = call["index"].as_u64().unwrap_or(0);
            let call_id = match call["id"].as_str() {
                Some(id) if !id.is_empty() && id != "null" => id.to_string(),
                _ => derive_tool_call_id(&format!("toolcall:{position}"), 0),
            };
            let key = format!("{call_id}:{position}");
            let index = match self.tools.iter().find(|(k, _)| *k == key) {
                Some((_, index)) => *index,
                None => {
                    let name = call["function"]["name"].as_str().unwrap_or("").to_string();
                    let index = out.start(BlockKind::ToolCall { id: call_id, name });
                    self.tools.push((key, index));
                    index
                }
            };
            let arguments = match &call["function"]["arguments"] {
                Value::String(s) => s.clone(),
                Value::Null => "{}".to_string(),
                other => other.to_string(),
            };
            out.delta(index, arguments);
        }
    }

    fn text_delta(&mut self, text: &str, out: &mut Emitter) {
        // Empty deltas (GLM models around thinking and tool calls) would split a block, which
        // Mistral rejects on replay (pi 1.6.0 skips them).
        if !text.is_empty() {
            self.text.append(false, text, out);
        }
    }

    fn finish(&mut self, out: &mut Emitter) {
        self.text.close(out);
        for (_, index) in std::mem::take(&mut self.tools) {
            out.end(index, None);
        }
        out.done(self.stop_reason);
    }
}

impl WireDecoder for Decoder {
    fn on_sse(&mut self, sse: &SseEvent, out: &mut Emitter) {
        let data = sse.data.trim();
        if data == "[DONE]" {
            self.finish(out);
            return;
        }
        if data.is_empty() {
            return;
        }
        if let Some(chunk) = out.parse_json(data, "stream event") {
            self.on_chunk(&chunk, out);
        }
    }

    fn on_eof(&mut self, out: &mut Emitter) {
        self.finish(out);
    }

    fn http_error_message(&self, status: u16, body: &str) -> String {
        http_error_message(status, body)
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::{assert_every_split_decodes_the_same, decode_in_parts};
    use super::super::test_support::{assistant, model, request, tool_result, user};
    use super::super::types::StreamEvent;
    use super::*;
    use crate::config::Model;
    use crate::config::ThinkingLevel;
    use crate::messages::{TextContent, ThinkingContent, ToolCall};

    fn mistral_model(id: &str) -> Model {
        let mut m = model("mistral-conversations", "mistral", id);
        m.base_url = "http://127.0.0.1:9".into();
        m.reasoning = true;
        m.max_tokens = 16384;
        m
    }

    /// The second request 0.73.1 sent to a local server for `magistral-medium-latest` with
    /// thinking `high`, after the fake answered with thinking, text and a bash call (a model
    /// without a thinking-level map, as 0.73.1's catalog had it: `prompt_mode`).
    #[test]
    fn request_matches_the_reference() {
        let call = ToolCall {
            id: "D681PevKs".into(),
            name: "bash".into(),
            arguments: json!({"command": "echo hi"}),
            thought_signature: None,
        };
        let reply = assistant(
            "mistral-conversations",
            "mistral",
            "magistral-medium-latest",
            vec![
                ContentBlock::Thinking(ThinkingContent {
                    thinking: "Let me look.".into(),
                    thinking_signature: None,
                    redacted: None,
                }),
                ContentBlock::Text(TextContent::new("Checking.")),
                ContentBlock::ToolCall(call),
            ],
        );
        let messages = vec![
            user("Say hi"),
            AgentMessage::Assistant(reply),
            tool_result("D681PevKs", "bash", "hi", false),
        ];
        let mut r = request(mistral_model("magistral-medium-latest"), messages);
        r.system_prompt = "SYS".into();
        r.thinking = ThinkingLevel::High;
        let http = build_request(&r);
        assert_eq!(http.url, "http://127.0.0.1:9/v1/chat/completions");
        assert_eq!(
            serde_json::to_string(&http.body).unwrap(),
            r#"{"model":"magistral-medium-latest","max_tokens":16384,"stream":true,"messages":[{"role":"system","content":"SYS"},{"role":"user","content":[{"type":"text","text":"Say hi"}]},{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"Let me look."}]},{"type":"text","text":"Checking."}],"tool_calls":[{"id":"D681PevKs","type":"function","function":{"name":"bash","arguments":"{\"command\":\"echo hi\"}"},"index":0}],"prefix":false},{"role":"tool","content":[{"type":"text","text":"hi"}],"tool_call_id":"D681PevKs","name":"bash"}],"prompt_mode":"reasoning"}"#
        );
        let header = |name: &str| {
            http.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(header("authorization"), Some("Bearer KEY"));
        assert_eq!(header("x-affinity"), Some("session-1"));

        // A model with a thinking-level map (the catalog's Mistral models) takes the effort.
        let mut mapped = mistral_model("mistral-small-latest");
        mapped.thinking_level_map = json!({"off": "none", "high": "high", "low": null})
            .as_object()
            .cloned();
        let mut small = request(mapped, vec![]);
        small.thinking = ThinkingLevel::High;
        assert_eq!(build_request(&small).body["reasoning_effort"], "high");
        // Thinking off: the map's `off` (pi 1.6.0); a reasoning model without a map asks for
        // `prompt_mode` instead, and nothing when thinking is off.
        small.thinking = ThinkingLevel::Off;
        assert_eq!(build_request(&small).body["reasoning_effort"], "none");
        small.model.thinking_level_map = None;
        assert!(build_request(&small).body.get("reasoning_effort").is_none());
        assert!(build_request(&small).body.get("prompt_mode").is_none());
        small.thinking = ThinkingLevel::High;
        assert_eq!(build_request(&small).body["prompt_mode"], "reasoning");
    }

    #[test]
    fn foreign_tool_call_ids_become_nine_alphanumerics() {
        let ids = ToolCallIds::default();
        let a = ids.normalize("toolu_01ABCdef");
        assert_eq!(a.len(), 9);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_eq!(ids.normalize("toolu_01ABCdef"), a);
        assert_eq!(ids.normalize("abc-def-123"), "abcdef123");
    }

    fn decode(stream: &str) -> Vec<StreamEvent> {
        let r = request(mistral_model("magistral-medium-latest"), vec![]);
        decode_in_parts(Decoder::new(&r), &[stream.as_bytes()])
    }

    const TOOL_STREAM: &str = include_str!("../../fixtures/mistral/thinking_tool.sse");

    #[test]
    fn decodes_thinking_text_and_a_tool_call() {
        let events = decode(TOOL_STREAM);
        let delta = |index, text: &str| StreamEvent::Delta {
            index,
            delta: text.into(),
        };
        let end = |index| StreamEvent::BlockEnd {
            index,
            signature: None,
        };
        assert_eq!(
            events,
            vec![
                StreamEvent::Meta {
                    response_id: Some("cmpl-2".into()),
                    response_model: None
                },
                StreamEvent::BlockStart {
                    index: 0,
                    kind: BlockKind::Thinking { redacted: false }
                },
                delta(0, "Let me look."),
                end(0),
                StreamEvent::BlockStart {
                    index: 1,
                    kind: BlockKind::Text
                },
                delta(1, "Checking."),
                StreamEvent::Usage(Usage {
                    input: 10,
                    output: 5,
                    total_tokens: 15,
                    ..Usage::default()
                }),
                end(1),
                StreamEvent::BlockStart {
                    index: 2,
                    kind: BlockKind::ToolCall {
                        id: "D681PevKs".into(),
                        name: "bash".into()
                    }
                },
                delta(2, "{\"command\": \"echo hi\"}"),
                end(2),
                StreamEvent::Done {
                    stop_reason: StopReason::ToolUse,
                    error_message: None
                },
            ]
        );
        let r = request(mistral_model("m"), vec![]);
        assert_every_split_decodes_the_same(TOOL_STREAM, &|| Decoder::new(&r));
    }

    #[test]
    fn cached_tokens_and_empty_deltas_follow_pi_1_6() {
        let events = decode(
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"}}]}\n\ndata: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":2,\"total_tokens\":102,\"prompt_tokens_details\":{\"cached_tokens\":60}}}\n\ndata: [DONE]\n\n",
        );
        assert_eq!(
            events[1],
            StreamEvent::Usage(Usage {
                input: 40,
                output: 2,
                cache_read: 60,
                total_tokens: 102,
                ..Usage::default()
            })
        );
        assert_eq!(
            events[2],
            StreamEvent::BlockStart {
                index: 0,
                kind: BlockKind::Text
            }
        );
    }

    #[test]
    fn http_errors_carry_status_and_body() {
        assert_eq!(
            http_error_message(401, "{\"message\":\"Unauthorized\"}\n"),
            "Mistral API error (401): {\"message\":\"Unauthorized\"}"
        );
        let long = "x".repeat(4005);
        assert!(http_error_message(500, &long).ends_with("... [truncated 5 chars]"));
    }
}
