//! The `google-generative-ai` wire API (FACTS §8.4; pi-ai `providers/google.js` and
//! `google-shared.js`, requests shaped as `@google/genai` sends them): the request builder for
//! Gemini's `streamGenerateContent` (url, headers, body with contents, system instruction, tools
//! and generation config incl. the per-family thinking settings) and the stream decoder for its
//! `data:` chunks. Both are pure; the HTTP exchange lives in `provider/mod.rs`.
//!
//! Gemini sends whole parts, not deltas of one: consecutive text (or thought) parts form one block,
//! and each function call arrives complete, so it is reported as a block start, one delta with the
//! full argument JSON and a block end. Thought signatures ride on the block they came with.
//!
//! The decoder ends with `Done` at the end of the body (closing the open text/thinking block), or
//! with `Failed` on an unparsable chunk or a finish reason the SDK does not know.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use super::sse::SseEvent;
use super::transform::transform_messages;
use super::{
    BlockKind, HttpRequest, ProviderError, StreamEvent, StreamRequest, base_max_tokens, join_url,
    with_extra_headers,
};
use crate::config::ThinkingLevel;
use crate::messages::{AgentMessage, ContentBlock, StopReason, Usage, UserContent, now_ms};

const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";
const UNKNOWN_ERROR_TEXT: &str = "An unknown error occurred";
/// Finish reasons the SDK knows besides STOP and MAX_TOKENS; all end the reply as an error.
const ERROR_FINISH_REASONS: &[&str] = &[
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "SAFETY",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
    "IMAGE_OTHER",
    "RECITATION",
    "FINISH_REASON_UNSPECIFIED",
    "OTHER",
    "LANGUAGE",
    "MALFORMED_FUNCTION_CALL",
    "UNEXPECTED_TOOL_CALL",
    "NO_IMAGE",
];

/// Numbers the tool calls that arrive without an id; process-wide, as pi's counter is.
static TOOL_CALL_COUNTER: AtomicU64 = AtomicU64::new(0);

pub fn build_request(request: &StreamRequest) -> HttpRequest {
    let model = &request.model;
    let defaults: Vec<(String, String)> = vec![
        ("content-type".into(), "application/json".into()),
        ("x-goog-api-key".into(), request.api_key.clone()),
    ];
    let headers = with_extra_headers(defaults, model, &request.headers);

    // Key order as the SDK writes the body: contents, systemInstruction, tools, generationConfig.
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(convert_messages(request)));
    if !request.system_prompt.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": request.system_prompt}], "role": "user"}),
        );
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"name": tool.name, "description": tool.description,
                    "parametersJsonSchema": tool.parameters})
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations}]),
        );
    }
    let mut generation_config = Map::new();
    if let Some(max_tokens) = base_max_tokens(request) {
        generation_config.insert("maxOutputTokens".into(), json!(max_tokens));
    }
    if let Some(thinking) = thinking_config(request) {
        generation_config.insert("thinkingConfig".into(), thinking);
    }
    body.insert("generationConfig".into(), Value::Object(generation_config));

    let base = if model.base_url.is_empty() {
        DEFAULT_BASE_URL
    } else {
        model.base_url.trim_end_matches('/')
    };
    let model_path = if model.id.starts_with("models/") || model.id.starts_with("tunedModels/") {
        model.id.clone()
    } else {
        format!("models/{}", model.id)
    };
    HttpRequest {
        url: join_url(
            base,
            &format!("/{model_path}:streamGenerateContent?alt=sse"),
        ),
        headers,
        body: Value::Object(body),
    }
}

/// The model families with their own thinking controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Gemini3Pro,
    Gemini3Flash,
    Gemma4,
    Other,
}

fn family(model_id: &str) -> Family {
    let id = model_id.to_lowercase();
    if gemini3_variant(&id, "-pro") {
        Family::Gemini3Pro
    } else if gemini3_variant(&id, "-flash") {
        Family::Gemini3Flash
    } else if id.contains("gemma4") || id.contains("gemma-4") {
        Family::Gemma4
    } else {
        Family::Other
    }
}

/// `/gemini-3(?:\.\d+)?<suffix>/` anywhere in `id`.
fn gemini3_variant(id: &str, suffix: &str) -> bool {
    id.match_indices("gemini-3").any(|(at, found)| {
        let rest = &id[at + found.len()..];
        if rest.starts_with(suffix) {
            return true;
        }
        match rest.strip_prefix('.') {
            Some(after_dot) => {
                let digits = after_dot.len()
                    - after_dot
                        .trim_start_matches(|c: char| c.is_ascii_digit())
                        .len();
                digits > 0 && after_dot[digits..].starts_with(suffix)
            }
            None => false,
        }
    })
}

/// `generationConfig.thinkingConfig` as pi's streamSimpleGoogle chooses it.
fn thinking_config(request: &StreamRequest) -> Option<Value> {
    let model = &request.model;
    if !model.reasoning {
        return None;
    }
    let family = family(&model.id);
    if request.thinking == ThinkingLevel::Off {
        // Gemini 3 cannot switch thinking off: ask for the least and hide it.
        return Some(match family {
            Family::Gemini3Pro => json!({"thinkingLevel": "LOW"}),
            Family::Gemini3Flash | Family::Gemma4 => json!({"thinkingLevel": "MINIMAL"}),
            Family::Other => json!({"thinkingBudget": 0}),
        });
    }
    let effort = match model.clamp_thinking_level(request.thinking) {
        ThinkingLevel::Off => ThinkingLevel::High,
        level => level,
    };
    let mut config = Map::new();
    config.insert("includeThoughts".into(), json!(true));
    if family != Family::Other {
        if let Some(level) = thinking_level(family, effort) {
            config.insert("thinkingLevel".into(), json!(level));
        }
    } else if let Some(budget) = thinking_budget(request, effort) {
        config.insert("thinkingBudget".into(), json!(budget));
    }
    Some(Value::Object(config))
}

fn thinking_level(family: Family, effort: ThinkingLevel) -> Option<&'static str> {
    use ThinkingLevel::*;
    match (family, effort) {
        (Family::Gemini3Pro, Minimal | Low) => Some("LOW"),
        (Family::Gemini3Pro, Medium | High) => Some("HIGH"),
        (Family::Gemma4, Minimal | Low) => Some("MINIMAL"),
        (Family::Gemma4, Medium | High) => Some("HIGH"),
        (_, Minimal) => Some("MINIMAL"),
        (_, Low) => Some("LOW"),
        (_, Medium) => Some("MEDIUM"),
        (_, High) => Some("HIGH"),
        _ => None,
    }
}

/// Token budget for Gemini 2.x: settings `thinkingBudgets` win, then the per-model table, else
/// -1 (dynamic). Levels beyond high have no table entry.
fn thinking_budget(request: &StreamRequest, effort: ThinkingLevel) -> Option<i64> {
    let slot = match effort {
        ThinkingLevel::Minimal => Some(0),
        ThinkingLevel::Low => Some(1),
        ThinkingLevel::Medium => Some(2),
        ThinkingLevel::High => Some(3),
        _ => None,
    };
    if let Some(budget) = slot.and_then(|s| request.thinking_budgets[s]) {
        return Some(budget as i64);
    }
    let id = &request.model.id;
    let table: Option<[i64; 4]> = if id.contains("2.5-pro") {
        Some([128, 2048, 8192, 32768])
    } else if id.contains("2.5-flash-lite") {
        Some([512, 2048, 8192, 24576])
    } else if id.contains("2.5-flash") {
        Some([128, 2048, 8192, 24576])
    } else {
        None
    };
    match table {
        Some(table) => slot.map(|s| table[s]),
        None => Some(-1),
    }
}

/// Models behind Google's API that need explicit ids on function calls and responses.
fn requires_tool_call_id(model_id: &str) -> bool {
    model_id.starts_with("claude-") || model_id.starts_with("gpt-oss-")
}

/// Gemini 3 and later (and non-Gemini models) take images inside function responses.
fn supports_multimodal_function_response(model_id: &str) -> bool {
    let id = model_id.to_lowercase();
    let rest = id
        .strip_prefix("gemini-live-")
        .or_else(|| id.strip_prefix("gemini-"));
    let Some(rest) = rest else {
        return true;
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    match digits.parse::<u64>() {
        Ok(major) => major >= 3,
        Err(_) => true,
    }
}

/// Thought signatures are base64 (the API stores them as bytes); anything else is dropped.
fn is_valid_signature(signature: &str) -> bool {
    if signature.is_empty() || signature.len() % 4 != 0 {
        return false;
    }
    let body = signature.trim_end_matches('=');
    signature.len() - body.len() <= 2
        && !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

fn signature_for(same_model: bool, signature: Option<&str>) -> Option<String> {
    signature
        .filter(|s| same_model && is_valid_signature(s))
        .map(str::to_string)
}

fn convert_messages(request: &StreamRequest) -> Vec<Value> {
    let model = &request.model;
    let needs_ids = requires_tool_call_id(&model.id);
    let transformed = transform_messages(&request.messages, model, &|id| {
        if !needs_ids {
            return id.to_string();
        }
        id.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect()
    });

    let mut contents: Vec<Value> = Vec::new();
    for message in &transformed {
        match message {
            AgentMessage::User(user) => {
                let parts: Vec<Value> = match &user.content {
                    UserContent::Text(text) => vec![json!({"text": text})],
                    UserContent::Blocks(blocks) => blocks
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text(t) => Some(json!({"text": t.text})),
                            ContentBlock::Image(img) => Some(json!({"inlineData":
                                {"data": img.data, "mimeType": img.mime_type}})),
                            _ => None,
                        })
                        .collect(),
                };
                if !parts.is_empty() {
                    contents.push(json!({"parts": parts, "role": "user"}));
                }
            }
            AgentMessage::Assistant(assistant) => {
                let same_model =
                    assistant.provider == model.provider && assistant.model == model.id;
                let mut parts = Vec::new();
                for block in &assistant.content {
                    match block {
                        ContentBlock::Text(text) => {
                            if text.text.trim().is_empty() {
                                continue;
                            }
                            let mut part = Map::new();
                            part.insert("text".into(), json!(text.text));
                            if let Some(signature) =
                                signature_for(same_model, text.text_signature.as_deref())
                            {
                                part.insert("thoughtSignature".into(), json!(signature));
                            }
                            parts.push(Value::Object(part));
                        }
                        ContentBlock::Thinking(thinking) => {
                            if thinking.thinking.trim().is_empty() {
                                continue;
                            }
                            let mut part = Map::new();
                            part.insert("text".into(), json!(thinking.thinking));
                            // Another model's thoughts are shown as plain text.
                            if same_model {
                                part.insert("thought".into(), json!(true));
                                if let Some(signature) = signature_for(
                                    same_model,
                                    thinking.thinking_signature.as_deref(),
                                ) {
                                    part.insert("thoughtSignature".into(), json!(signature));
                                }
                            }
                            parts.push(Value::Object(part));
                        }
                        ContentBlock::ToolCall(call) => {
                            let mut function_call = Map::new();
                            if needs_ids {
                                function_call.insert("id".into(), json!(call.id));
                            }
                            let args = if call.arguments.is_null() {
                                json!({})
                            } else {
                                call.arguments.clone()
                            };
                            function_call.insert("args".into(), args);
                            function_call.insert("name".into(), json!(call.name));
                            let mut part = Map::new();
                            part.insert("functionCall".into(), Value::Object(function_call));
                            if let Some(signature) =
                                signature_for(same_model, call.thought_signature.as_deref())
                            {
                                part.insert("thoughtSignature".into(), json!(signature));
                            }
                            parts.push(Value::Object(part));
                        }
                        ContentBlock::Image(_) => {}
                    }
                }
                if !parts.is_empty() {
                    contents.push(json!({"parts": parts, "role": "model"}));
                }
            }
            AgentMessage::ToolResult(result) => {
                let texts: Vec<&str> = result
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text(t) => Some(t.text.as_str()),
                        _ => None,
                    })
                    .collect();
                let text = texts.join("\n");
                let images: Vec<(&str, &str)> = if model.supports_images() {
                    result
                        .content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Image(img) => {
                                Some((img.mime_type.as_str(), img.data.as_str()))
                            }
                            _ => None,
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let multimodal = supports_multimodal_function_response(&model.id);
                let value = if !text.is_empty() {
                    text
                } else if !images.is_empty() {
                    "(see attached image)".to_string()
                } else {
                    String::new()
                };
                let mut function_response = Map::new();
                function_response.insert("name".into(), json!(result.tool_name));
                let key = if result.is_error { "error" } else { "output" };
                function_response.insert("response".into(), json!({key: value}));
                // These parts are passed through as written (mimeType first), unlike user parts.
                if !images.is_empty() && multimodal {
                    let parts: Vec<Value> = images
                        .iter()
                        .map(|(mime, data)| json!({"inlineData": {"mimeType": mime, "data": data}}))
                        .collect();
                    function_response.insert("parts".into(), Value::Array(parts));
                }
                if needs_ids {
                    function_response.insert("id".into(), json!(result.tool_call_id));
                }
                let part = json!({"functionResponse": function_response});
                // All results of one turn go back in a single user turn.
                let merged = match contents.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["parts"].as_array().is_some_and(|parts| {
                                parts.iter().any(|p| p.get("functionResponse").is_some())
                            }) =>
                    {
                        if let Some(parts) = last["parts"].as_array_mut() {
                            parts.push(part.clone());
                        }
                        true
                    }
                    _ => false,
                };
                if !merged {
                    contents.push(json!({"parts": [part], "role": "user"}));
                }
                if !images.is_empty() && !multimodal {
                    let mut parts = vec![json!({"text": "Tool result image:"})];
                    parts.extend(images.iter().map(
                        |(mime, data)| json!({"inlineData": {"data": data, "mimeType": mime}}),
                    ));
                    contents.push(json!({"parts": parts, "role": "user"}));
                }
            }
            _ => {}
        }
    }
    contents
}

/// The error text of a failed request: the SDK re-serializes a JSON body; any other body is
/// wrapped as `{"error":{"message":…,"code":…,"status":<reason phrase>}}`. No status prefix.
pub fn http_error_message(status: u16, body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(json) => json.to_string(),
        Err(_) => {
            let reason = ureq::http::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("");
            json!({"error": {"message": body, "code": status, "status": reason}}).to_string()
        }
    }
}

fn map_finish_reason(reason: &str) -> Result<StopReason, String> {
    match reason {
        "STOP" => Ok(StopReason::Stop),
        "MAX_TOKENS" => Ok(StopReason::Length),
        other if ERROR_FINISH_REASONS.contains(&other) => Ok(StopReason::Error),
        other => Err(format!("Unhandled stop reason: {other}")),
    }
}

/// `String(value)` for ids and names that may be missing.
fn js_string(value: Option<&Value>) -> String {
    match value {
        None => "undefined".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) => "null".into(),
        Some(other) => other.to_string(),
    }
}

fn count(value: &Value) -> u64 {
    value
        .as_f64()
        .filter(|f| f.is_finite() && *f > 0.0)
        .unwrap_or(0.0) as u64
}

/// The text or thinking block consecutive parts are appended to.
struct OpenBlock {
    index: usize,
    thinking: bool,
    /// The last non-empty thought signature seen on the block's parts.
    signature: Option<String>,
}

/// Gemini stream chunks → `StreamEvent`s.
pub struct Decoder {
    next_index: usize,
    open: Option<OpenBlock>,
    tool_call_ids: Vec<String>,
    response_id: Option<String>,
    stop_reason: StopReason,
    finished: bool,
}

impl Decoder {
    pub fn new(_request: &StreamRequest) -> Decoder {
        Decoder {
            next_index: 0,
            open: None,
            tool_call_ids: Vec::new(),
            response_id: None,
            stop_reason: StopReason::Stop,
            finished: false,
        }
    }

    /// True once a terminal event (`Done`/`Failed`) was produced; later input is ignored.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    pub fn on_sse(&mut self, sse: &SseEvent) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if self.finished || sse.data.trim().is_empty() {
            return out;
        }
        let chunk: Value = match serde_json::from_str(sse.data.trim()) {
            Ok(v) => v,
            Err(e) => {
                self.fail(
                    &mut out,
                    format!("Could not parse stream chunk as JSON: {e}"),
                );
                return out;
            }
        };
        self.on_chunk(&chunk, &mut out);
        out
    }

    /// End of body: the open block closes and the reply ends with the last finish reason.
    pub fn on_eof(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.close_open_block(&mut out);
        self.finished = true;
        let error_message =
            (self.stop_reason == StopReason::Error).then(|| UNKNOWN_ERROR_TEXT.to_string());
        out.push(StreamEvent::Done {
            stop_reason: self.stop_reason,
            error_message,
        });
        out
    }

    fn on_chunk(&mut self, chunk: &Value, out: &mut Vec<StreamEvent>) {
        if self.response_id.is_none()
            && let Some(id) = chunk["responseId"].as_str().filter(|id| !id.is_empty())
        {
            self.response_id = Some(id.to_string());
            out.push(StreamEvent::Meta {
                response_id: self.response_id.clone(),
                response_model: None,
            });
        }
        let candidate = &chunk["candidates"][0];
        if let Some(parts) = candidate["content"]["parts"].as_array() {
            for part in parts {
                if let Some(text) = part.get("text") {
                    self.text_part(part, js_string(Some(text)), out);
                }
                if let Some(call) = part.get("functionCall").filter(|c| super::json_truthy(c)) {
                    self.function_call(part, call, out);
                }
            }
        }
        if let Some(reason) = candidate["finishReason"].as_str().filter(|r| !r.is_empty()) {
            match map_finish_reason(reason) {
                Ok(stop) => {
                    self.stop_reason = if self.tool_call_ids.is_empty() {
                        stop
                    } else {
                        StopReason::ToolUse
                    };
                }
                Err(message) => {
                    self.fail(out, message);
                    return;
                }
            }
        }
        if let Some(usage) = chunk.get("usageMetadata").filter(|u| super::json_truthy(u)) {
            let cached = count(&usage["cachedContentTokenCount"]);
            out.push(StreamEvent::Usage(Usage {
                input: count(&usage["promptTokenCount"]).saturating_sub(cached),
                output: count(&usage["candidatesTokenCount"]) + count(&usage["thoughtsTokenCount"]),
                cache_read: cached,
                cache_write: 0,
                total_tokens: count(&usage["totalTokenCount"]),
                ..Usage::default()
            }));
        }
    }

    fn text_part(&mut self, part: &Value, text: String, out: &mut Vec<StreamEvent>) {
        let thinking = part["thought"] == true;
        if self.open.as_ref().is_none_or(|b| b.thinking != thinking) {
            self.close_open_block(out);
            let index = self.next_index;
            self.next_index += 1;
            let kind = if thinking {
                BlockKind::Thinking { redacted: false }
            } else {
                BlockKind::Text
            };
            out.push(StreamEvent::BlockStart { index, kind });
            self.open = Some(OpenBlock {
                index,
                thinking,
                signature: None,
            });
        }
        if let Some(block) = &mut self.open {
            if let Some(signature) = part["thoughtSignature"].as_str().filter(|s| !s.is_empty()) {
                block.signature = Some(signature.to_string());
            }
            out.push(StreamEvent::Delta {
                index: block.index,
                delta: text,
            });
        }
    }

    fn function_call(&mut self, part: &Value, call: &Value, out: &mut Vec<StreamEvent>) {
        self.close_open_block(out);
        let provided = call
            .get("id")
            .filter(|id| super::json_truthy(id))
            .map(|id| js_string(Some(id)));
        let id = match provided {
            Some(id) if !self.tool_call_ids.contains(&id) => id,
            _ => {
                let counter = TOOL_CALL_COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
                format!("{}_{}_{}", js_string(call.get("name")), now_ms(), counter)
            }
        };
        let name = call
            .get("name")
            .filter(|n| super::json_truthy(n))
            .map(|n| js_string(Some(n)))
            .unwrap_or_default();
        let args = match call.get("args") {
            None | Some(Value::Null) => json!({}),
            Some(args) => args.clone(),
        };
        let index = self.next_index;
        self.next_index += 1;
        self.tool_call_ids.push(id.clone());
        out.push(StreamEvent::BlockStart {
            index,
            kind: BlockKind::ToolCall { id, name },
        });
        out.push(StreamEvent::Delta {
            index,
            delta: args.to_string(),
        });
        let signature = part["thoughtSignature"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        out.push(StreamEvent::BlockEnd { index, signature });
    }

    fn close_open_block(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(block) = self.open.take() {
            out.push(StreamEvent::BlockEnd {
                index: block.index,
                signature: block.signature,
            });
        }
    }

    fn fail(&mut self, out: &mut Vec<StreamEvent>, message: String) {
        self.finished = true;
        out.push(StreamEvent::Failed(ProviderError {
            message,
            retry_after: None,
        }));
    }
}
