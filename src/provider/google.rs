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

use crate::js::{js_string, js_truthy};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use super::decode::{Emitter, TextRun, WireDecoder, token_count};
use super::request::{context_clamped_max_tokens, join_url, strict_parameters, with_extra_headers};
use super::sse::SseEvent;
use super::transform::{id_chars, transform_messages};
use super::types::{BlockKind, HttpRequest, StreamRequest};
use crate::config::ThinkingLevel;
use crate::messages::{AgentMessage, ContentBlock, StopReason, Usage, UserContent, joined_text};
use crate::time::now_ms;

const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";
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
    let body = request_body(request, Dialect::GeminiApi);

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
        body,
    }
}

/// Which of pi's two Gemini providers the body is for: they share the message conversion but not
/// every thinking rule (`google-vertex.js` has no Gemma 4 family and no Flash-Lite budgets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    GeminiApi,
    Vertex,
}

/// The `generateContent` body. Key order as the SDK writes it for the Gemini API: contents,
/// systemInstruction, tools, generationConfig (Vertex reorders some objects: `vertex.rs`).
pub(crate) fn request_body(request: &StreamRequest, dialect: Dialect) -> Value {
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(convert_messages(request)));
    if !request.system_prompt.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": request.system_prompt}], "role": "user"}),
        );
    }
    if !request.tools.is_empty() {
        let supported = strict_supported(&request.model.id);
        let mut any_strict = false;
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                let strict = strict_parameters(request, tool, supported, None);
                any_strict |= strict.is_some();
                let parameters = const_as_enum(strict.as_ref().unwrap_or(&tool.parameters), false);
                json!({"name": tool.name, "description": tool.description,
                    "parametersJsonSchema": parameters})
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations}]),
        );
        if any_strict {
            body.insert(
                "toolConfig".into(),
                json!({"functionCallingConfig": {"mode": "VALIDATED"}}),
            );
        }
    }
    let mut generation_config = Map::new();
    generation_config.insert(
        "maxOutputTokens".into(),
        json!(context_clamped_max_tokens(request)),
    );
    if let Some(thinking) = thinking_config(request, dialect) {
        generation_config.insert("thinkingConfig".into(), thinking);
    }
    body.insert("generationConfig".into(), Value::Object(generation_config));
    Value::Object(body)
}

/// The model families with their own thinking controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Gemini3Pro,
    Gemini3Flash,
    Gemma4,
    Other,
}

fn family(model_id: &str, dialect: Dialect) -> Family {
    let id = model_id.to_lowercase();
    if gemini3_variant(&id, "-pro") {
        Family::Gemini3Pro
    } else if gemini3_variant(&id, "-flash") {
        Family::Gemini3Flash
    } else if dialect == Dialect::GeminiApi && (id.contains("gemma4") || id.contains("gemma-4")) {
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
fn thinking_config(request: &StreamRequest, dialect: Dialect) -> Option<Value> {
    let model = &request.model;
    if !model.reasoning {
        return None;
    }
    let family = family(&model.id, dialect);
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
    } else if let Some(budget) = thinking_budget(request, effort, dialect) {
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
fn thinking_budget(
    request: &StreamRequest,
    effort: ThinkingLevel,
    dialect: Dialect,
) -> Option<i64> {
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
    } else if dialect == Dialect::GeminiApi && id.contains("2.5-flash-lite") {
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

/// Gemini 3 and later validate a call against strict schemas (pi 1.6.0).
pub(crate) fn strict_supported(model_id: &str) -> bool {
    gemini_major_version(model_id).is_some_and(|major| major >= 3)
}

/// Models behind Google's API that need explicit ids on function calls and responses: Claude,
/// gpt-oss, and Gemini 3 and later (pi 1.6.0).
fn requires_tool_call_id(model_id: &str) -> bool {
    model_id.starts_with("claude-")
        || model_id.starts_with("gpt-oss-")
        || gemini_major_version(model_id).is_some_and(|major| major >= 3)
}

/// Schema keywords whose values map names to subschemas (their keys are names, not keywords).
const SCHEMA_NAME_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// Schema keywords whose value is a subschema or a list of them (not literal data).
const SCHEMA_SUBSCHEMAS: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "items",
    "prefixItems",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];

/// Gemini ignores `const` in `parametersJsonSchema` but honours `enum`: a string or number
/// `const` without an `enum` beside it becomes a one-value `enum` (at the end of its schema), in
/// every subschema (pi 1.6.0). `names` marks a map from names to subschemas.
fn const_as_enum(schema: &Value, names: bool) -> Value {
    match schema {
        Value::Array(items) => {
            Value::Array(items.iter().map(|i| const_as_enum(i, false)).collect())
        }
        Value::Object(object) => {
            let mut result: Map<String, Value> = object
                .iter()
                .map(|(key, value)| {
                    let value = if names || SCHEMA_SUBSCHEMAS.contains(&key.as_str()) {
                        const_as_enum(value, false)
                    } else if SCHEMA_NAME_MAPS.contains(&key.as_str()) {
                        const_as_enum(value, true)
                    } else {
                        value.clone()
                    };
                    (key.clone(), value)
                })
                .collect();
            let rewritable = matches!(
                result.get("const"),
                Some(Value::String(_) | Value::Number(_))
            );
            if !names
                && rewritable
                && !result.contains_key("enum")
                && let Some(value) = result.shift_remove("const")
            {
                result.insert("enum".into(), json!([value]));
            }
            Value::Object(result)
        }
        other => other.clone(),
    }
}

/// Gemini 3 and later (and non-Gemini models) take images inside function responses.
fn supports_multimodal_function_response(model_id: &str) -> bool {
    gemini_major_version(model_id).is_none_or(|major| major >= 3)
}

/// The major version of a `gemini-<n>…` or `gemini-live-<n>…` model id (any case).
fn gemini_major_version(model_id: &str) -> Option<u64> {
    let id = model_id.to_lowercase();
    let versioned = |rest: &str| -> Option<u64> {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    id.strip_prefix("gemini-live-")
        .and_then(versioned)
        .or_else(|| id.strip_prefix("gemini-").and_then(versioned))
}

/// Thought signatures are base64 (the API stores them as bytes); anything else is dropped.
fn is_valid_signature(signature: &str) -> bool {
    if signature.is_empty() || !signature.len().is_multiple_of(4) {
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
        id_chars(id, 64)
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
                            ContentBlock::Image(img) => {
                                Some(inline_data(&img.mime_type, &img.data))
                            }
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
                            let signature =
                                signature_for(same_model, text.text_signature.as_deref());
                            // An empty part that carries a signature goes back: Gemini needs it.
                            if text.text.trim().is_empty() && signature.is_none() {
                                continue;
                            }
                            let mut part = Map::new();
                            part.insert("text".into(), json!(text.text));
                            if let Some(signature) = signature {
                                part.insert("thoughtSignature".into(), json!(signature));
                            }
                            parts.push(Value::Object(part));
                        }
                        ContentBlock::Thinking(thinking) => {
                            // Another model's thoughts are shown as plain text, unsigned.
                            let signature =
                                signature_for(same_model, thinking.thinking_signature.as_deref());
                            if thinking.thinking.trim().is_empty() && signature.is_none() {
                                continue;
                            }
                            let mut part = Map::new();
                            part.insert("text".into(), json!(thinking.thinking));
                            if same_model {
                                part.insert("thought".into(), json!(true));
                            }
                            if let Some(signature) = signature {
                                part.insert("thoughtSignature".into(), json!(signature));
                            }
                            parts.push(Value::Object(part));
                        }
                        ContentBlock::ToolCall(call) => {
                            // The Gemini API's converter writes args, id, name (Vertex's keeps
                            // pi's name, args, id: `vertex.rs`).
                            let mut function_call = Map::new();
                            let args = if call.arguments.is_null() {
                                json!({})
                            } else {
                                call.arguments.clone()
                            };
                            function_call.insert("args".into(), args);
                            if needs_ids {
                                function_call.insert("id".into(), json!(call.id));
                            }
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
                let text = joined_text(&result.content, "\n");
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
                if !images.is_empty() && multimodal {
                    let parts: Vec<Value> = images
                        .iter()
                        .map(|(mime, data)| inline_data(mime, data))
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
                    parts.extend(images.iter().map(|(mime, data)| inline_data(mime, data)));
                    contents.push(json!({"parts": parts, "role": "user"}));
                }
            }
            _ => {}
        }
    }
    contents
}

/// An image part, keys as pi writes them (both of 1.6.0's SDK converters pass them through).
fn inline_data(mime_type: &str, data: &str) -> Value {
    json!({"inlineData": {"mimeType": mime_type, "data": data}})
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

/// Gemini stream chunks → `StreamEvent`s.
pub struct Decoder {
    text: TextRun,
    tool_call_ids: Vec<String>,
    stop_reason: StopReason,
    /// The last `finishReason`, as Gemini worded it.
    raw_stop_reason: Option<String>,
}

impl Decoder {
    pub fn new(_request: &StreamRequest) -> Decoder {
        Decoder {
            text: TextRun::default(),
            tool_call_ids: Vec::new(),
            stop_reason: StopReason::Stop,
            raw_stop_reason: None,
        }
    }

    fn on_chunk(&mut self, chunk: &Value, out: &mut Emitter) {
        out.first_response_id(chunk["responseId"].as_str());
        let candidate = &chunk["candidates"][0];
        if let Some(parts) = candidate["content"]["parts"].as_array() {
            for part in parts {
                if let Some(text) = part.get("text") {
                    self.text
                        .append(part["thought"] == true, js_string(Some(text)), out);
                    if let Some(signature) =
                        part["thoughtSignature"].as_str().filter(|s| !s.is_empty())
                    {
                        self.text.set_signature(signature.to_string());
                    }
                }
                if let Some(call) = part.get("functionCall").filter(|c| js_truthy(c)) {
                    self.function_call(part, call, out);
                }
            }
        }
        if let Some(reason) = candidate["finishReason"].as_str().filter(|r| !r.is_empty()) {
            out.raw_stop_reason(reason);
            self.raw_stop_reason = Some(reason.to_string());
            match map_finish_reason(reason) {
                Ok(stop) => {
                    self.stop_reason = if self.tool_call_ids.is_empty() {
                        stop
                    } else {
                        StopReason::ToolUse
                    };
                }
                Err(message) => {
                    out.fail(message);
                    return;
                }
            }
        }
        if let Some(usage) = chunk.get("usageMetadata").filter(|u| js_truthy(u)) {
            let cached = token_count(&usage["cachedContentTokenCount"]);
            out.usage(Usage {
                input: token_count(&usage["promptTokenCount"]).saturating_sub(cached),
                output: token_count(&usage["candidatesTokenCount"])
                    + token_count(&usage["thoughtsTokenCount"]),
                cache_read: cached,
                cache_write: 0,
                reasoning: Some(token_count(&usage["thoughtsTokenCount"])),
                total_tokens: token_count(&usage["totalTokenCount"]),
                ..Usage::default()
            });
        }
    }

    /// A function call arrives whole: start, the argument JSON as one delta, end.
    fn function_call(&mut self, part: &Value, call: &Value, out: &mut Emitter) {
        self.text.close(out);
        let provided = call
            .get("id")
            .filter(|id| js_truthy(id))
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
            .filter(|n| js_truthy(n))
            .map(|n| js_string(Some(n)))
            .unwrap_or_default();
        let args = match call.get("args") {
            None | Some(Value::Null) => json!({}),
            Some(args) => args.clone(),
        };
        self.tool_call_ids.push(id.clone());
        let index = out.start(BlockKind::ToolCall { id, name });
        out.delta(index, args.to_string());
        let signature = part["thoughtSignature"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        out.end(index, signature);
    }
}

impl WireDecoder for Decoder {
    fn on_sse(&mut self, sse: &SseEvent, out: &mut Emitter) {
        let data = sse.data.trim();
        if data.is_empty() {
            return;
        }
        if let Some(chunk) = out.parse_json(data, "stream chunk") {
            self.on_chunk(&chunk, out);
        }
    }

    /// End of body: the open block closes and the reply ends with the last finish reason.
    fn on_eof(&mut self, out: &mut Emitter) {
        self.text.close(out);
        match (self.stop_reason, &self.raw_stop_reason) {
            // pi 1.6.0 names the provider's reason for an error stop.
            (StopReason::Error, Some(raw)) => out.done_with_message(
                StopReason::Error,
                Some(format!("Provider stopped with: {raw}")),
            ),
            (stop, _) => out.done(stop),
        }
    }

    fn http_error_message(&self, status: u16, body: &str) -> String {
        http_error_message(status, body)
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::{
        assert_every_split_decodes_the_same, decode_in_parts, raw_stop_reasons,
    };
    use super::super::test_support::{model, request, user};
    use super::super::types::{ProviderError, StreamEvent};
    use super::*;
    use crate::config::Model;
    use crate::messages::ToolSpec;

    fn google_model(id: &str) -> Model {
        let mut m = model("google-generative-ai", "google", id);
        m.base_url = "http://x/v1beta".into();
        m.reasoning = true;
        m.input = vec!["text".into(), "image".into()];
        m.max_tokens = 65536;
        m
    }

    /// Same-model thinking and signatures (valid and not), a blank text, tool results merged into
    /// one turn, images from results, a foreign assistant turn.
    const HISTORY: &str = r#"[{"role": "user", "content": [{"type": "text", "text": "go"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}], "timestamp": 1}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "plan", "thinkingSignature": "c2lnbmF0dXJl"}, {"type": "text", "text": "Looking.", "textSignature": "not base64!"}, {"type": "text", "text": "   "}, {"type": "toolCall", "id": "bash_1_1", "name": "bash", "arguments": {"command": "ls"}, "thoughtSignature": "AAAABBBB"}], "api": "google-generative-ai", "provider": "google", "model": "gemini-2.5-flash", "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}, "stopReason": "toolUse", "timestamp": 2}, {"role": "toolResult", "toolCallId": "bash_1_1", "toolName": "bash", "content": [{"type": "text", "text": "out"}], "isError": false, "timestamp": 3}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "deep", "thinkingSignature": "SIG"}, {"type": "toolCall", "id": "toolu_01|x", "name": "read", "arguments": {"path": "a.png"}}, {"type": "toolCall", "id": "toolu_02", "name": "bash", "arguments": {"command": "pwd"}}], "api": "anthropic-messages", "provider": "anthropic", "model": "claude", "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}, "stopReason": "toolUse", "timestamp": 4}, {"role": "toolResult", "toolCallId": "toolu_01|x", "toolName": "read", "content": [{"type": "text", "text": "an image"}, {"type": "image", "data": "BBBB", "mimeType": "image/jpeg"}], "isError": false, "timestamp": 5}, {"role": "toolResult", "toolCallId": "toolu_02", "toolName": "bash", "content": [{"type": "text", "text": "boom"}], "isError": true, "timestamp": 6}, {"role": "user", "content": "next", "timestamp": 9}]"#;

    /// The bodies pi-ai + @google/genai sent for HISTORY (captured from the reference; parts in
    /// the key order of 1.6.0's SDK, @google/genai 2.32; the output cap is 1.6.0's, the model's
    /// `maxTokens` that the window holds).
    const BODY_GEMINI_25_FLASH: &str = r#"{"contents":[{"parts":[{"text":"go"},{"inlineData":{"mimeType":"image/png","data":"AAAA"}}],"role":"user"},{"parts":[{"text":"plan","thought":true,"thoughtSignature":"c2lnbmF0dXJl"},{"text":"Looking."},{"functionCall":{"args":{"command":"ls"},"name":"bash"},"thoughtSignature":"AAAABBBB"}],"role":"model"},{"parts":[{"functionResponse":{"name":"bash","response":{"output":"out"}}}],"role":"user"},{"parts":[{"text":"deep"},{"functionCall":{"args":{"path":"a.png"},"name":"read"}},{"functionCall":{"args":{"command":"pwd"},"name":"bash"}}],"role":"model"},{"parts":[{"functionResponse":{"name":"read","response":{"output":"an image"}}}],"role":"user"},{"parts":[{"text":"Tool result image:"},{"inlineData":{"mimeType":"image/jpeg","data":"BBBB"}}],"role":"user"},{"parts":[{"functionResponse":{"name":"bash","response":{"error":"boom"}}}],"role":"user"},{"parts":[{"text":"next"}],"role":"user"}],"systemInstruction":{"parts":[{"text":"SYS"}],"role":"user"},"tools":[{"functionDeclarations":[{"name":"bash","description":"Run","parametersJsonSchema":{"type":"object","properties":{"command":{"type":"string"}}}}]}],"generationConfig":{"maxOutputTokens":65536,"thinkingConfig":{"includeThoughts":true,"thinkingBudget":2048}}}"#;
    const BODY_CLAUDE_VIA_GOOGLE: &str = r#"{"contents":[{"parts":[{"text":"go"},{"inlineData":{"mimeType":"image/png","data":"AAAA"}}],"role":"user"},{"parts":[{"text":"plan"},{"text":"Looking."},{"functionCall":{"args":{"command":"ls"},"id":"bash_1_1","name":"bash"}}],"role":"model"},{"parts":[{"functionResponse":{"name":"bash","response":{"output":"out"},"id":"bash_1_1"}}],"role":"user"},{"parts":[{"text":"deep"},{"functionCall":{"args":{"path":"a.png"},"id":"toolu_01_x","name":"read"}},{"functionCall":{"args":{"command":"pwd"},"id":"toolu_02","name":"bash"}}],"role":"model"},{"parts":[{"functionResponse":{"name":"read","response":{"output":"an image"},"parts":[{"inlineData":{"mimeType":"image/jpeg","data":"BBBB"}}],"id":"toolu_01_x"}},{"functionResponse":{"name":"bash","response":{"error":"boom"},"id":"toolu_02"}}],"role":"user"},{"parts":[{"text":"next"}],"role":"user"}],"generationConfig":{"maxOutputTokens":65536,"thinkingConfig":{"includeThoughts":true,"thinkingBudget":5000}}}"#;

    fn history_request(id: &str, thinking: ThinkingLevel) -> StreamRequest {
        let messages: Vec<AgentMessage> = serde_json::from_str(HISTORY).unwrap();
        let mut r = request(google_model(id), messages);
        r.thinking = thinking;
        r
    }

    #[test]
    fn bodies_match_the_reference() {
        let mut r = history_request("gemini-2.5-flash", ThinkingLevel::Low);
        r.system_prompt = "SYS".into();
        r.tools = vec![ToolSpec {
            name: "bash".into(),
            description: "Run".into(),
            parameters: json!({"type":"object","properties":{"command":{"type":"string"}}}),
        }];
        let http = build_request(&r);
        assert_eq!(
            http.url,
            "http://x/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            http.headers,
            vec![
                ("content-type".to_string(), "application/json".to_string()),
                ("x-goog-api-key".to_string(), "KEY".to_string())
            ]
        );
        assert_eq!(
            serde_json::to_string(&http.body).unwrap(),
            BODY_GEMINI_25_FLASH
        );

        // Models that need ids get them (sanitized); Gemini 3+ / non-Gemini models take result
        // images inside the function response; settings budgets win.
        let mut r = history_request("claude-sonnet-4-5", ThinkingLevel::Medium);
        r.thinking_budgets = [None, None, Some(5000), None];
        assert_eq!(
            serde_json::to_string(&build_request(&r).body).unwrap(),
            BODY_CLAUDE_VIA_GOOGLE
        );
    }

    #[test]
    fn thinking_config_per_family_and_level() {
        use ThinkingLevel::*;
        let config = |id: &str, level: ThinkingLevel| {
            let mut r = request(google_model(id), vec![user("x")]);
            r.thinking = level;
            build_request(&r).body["generationConfig"]["thinkingConfig"].to_string()
        };
        // (model, level, expected) as the reference sends them.
        let cases = [
            (
                "gemini-3.1-flash-lite",
                Off,
                r#"{"thinkingLevel":"MINIMAL"}"#,
            ),
            (
                "gemini-3.1-flash-lite",
                Minimal,
                r#"{"includeThoughts":true,"thinkingLevel":"MINIMAL"}"#,
            ),
            (
                "gemini-3.1-flash-lite",
                Medium,
                r#"{"includeThoughts":true,"thinkingLevel":"MEDIUM"}"#,
            ),
            (
                "gemini-3.1-flash-lite",
                Xhigh,
                r#"{"includeThoughts":true,"thinkingLevel":"HIGH"}"#,
            ),
            ("gemma-4-27b", Off, r#"{"thinkingLevel":"MINIMAL"}"#),
            (
                "gemma-4-27b",
                Minimal,
                r#"{"includeThoughts":true,"thinkingLevel":"MINIMAL"}"#,
            ),
            (
                "gemma-4-27b",
                Medium,
                r#"{"includeThoughts":true,"thinkingLevel":"HIGH"}"#,
            ),
            ("gemini-3-pro", Off, r#"{"thinkingLevel":"LOW"}"#),
            (
                "gemini-3-pro",
                Minimal,
                r#"{"includeThoughts":true,"thinkingLevel":"LOW"}"#,
            ),
            (
                "gemini-3-pro",
                Medium,
                r#"{"includeThoughts":true,"thinkingLevel":"HIGH"}"#,
            ),
            ("gemini-2.5-flash-lite", Off, r#"{"thinkingBudget":0}"#),
            (
                "gemini-2.5-flash-lite",
                Minimal,
                r#"{"includeThoughts":true,"thinkingBudget":512}"#,
            ),
            (
                "gemini-2.5-flash-lite",
                Xhigh,
                r#"{"includeThoughts":true,"thinkingBudget":24576}"#,
            ),
            (
                "gemini-2.5-pro",
                High,
                r#"{"includeThoughts":true,"thinkingBudget":32768}"#,
            ),
            ("other", Off, r#"{"thinkingBudget":0}"#),
            (
                "other",
                Medium,
                r#"{"includeThoughts":true,"thinkingBudget":-1}"#,
            ),
        ];
        for (id, level, expected) in cases {
            assert_eq!(config(id, level), expected, "{id} {level:?}");
        }
        // Non-reasoning models get no thinking config at all.
        let mut r = request(
            model("google-generative-ai", "google", "gemini-2.0-flash"),
            vec![user("x")],
        );
        r.thinking = High;
        assert_eq!(
            build_request(&r).body["generationConfig"],
            json!({"maxOutputTokens": 32000})
        );
    }

    fn decode(stream: &str) -> Vec<StreamEvent> {
        let r = request(google_model("gemini-2.5-flash"), vec![]);
        decode_in_parts(Decoder::new(&r), &[stream.as_bytes()])
    }

    fn delta(index: usize, text: &str) -> StreamEvent {
        StreamEvent::Delta {
            index,
            delta: text.into(),
        }
    }

    const TEXT: &str = include_str!("../../fixtures/google/text.sse");
    const TOOL_PARALLEL: &str = include_str!("../../fixtures/google/tool_parallel.sse");

    #[test]
    fn decodes_thoughts_text_signature_and_usage() {
        let usage = |total| {
            StreamEvent::Usage(Usage {
                input: 1843,
                output: 57,
                reasoning: Some(57),
                total_tokens: total,
                ..Usage::default()
            })
        };
        assert_eq!(
            decode(TEXT),
            vec![
                StreamEvent::Meta {
                    response_id: Some("kFdnaJ-xLNWTz7IPqY2x4Qc".into()),
                    response_model: None
                },
                StreamEvent::BlockStart {
                    index: 0,
                    kind: BlockKind::Thinking { redacted: false }
                },
                delta(
                    0,
                    "**Planning a greeting**\n\nThe user wants a short hello."
                ),
                usage(1900),
                StreamEvent::BlockEnd {
                    index: 0,
                    signature: None
                },
                StreamEvent::BlockStart {
                    index: 1,
                    kind: BlockKind::Text
                },
                delta(1, "Hello"),
                usage(1901),
                delta(1, " from the fake Gemini API."),
                StreamEvent::Usage(Usage {
                    input: 819,
                    output: 66,
                    cache_read: 1024,
                    reasoning: Some(57),
                    total_tokens: 1909,
                    ..Usage::default()
                }),
                StreamEvent::BlockEnd {
                    index: 1,
                    signature: Some("CiQB0e2Kb3Rlc3RTaWduYXR1cmVGb3JUZXh0UGFydA==".into())
                },
                StreamEvent::Done {
                    stop_reason: StopReason::Stop,
                    error_message: None
                },
            ]
        );
    }

    #[test]
    fn function_calls_arrive_whole_with_synthesized_ids() {
        let events = decode(TOOL_PARALLEL);
        let ids: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::BlockStart {
                    kind: BlockKind::ToolCall { id, .. },
                    ..
                } => Some(id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(ids.len(), 2);
        for (id, name) in ids.iter().zip(["bash", "read"]) {
            let parts: Vec<&str> = id.split('_').collect();
            assert_eq!(parts.len(), 3, "{id}");
            assert_eq!(parts[0], name);
            assert!(parts[1].parse::<i64>().unwrap() > 1_700_000_000_000, "{id}");
            assert!(parts[2].parse::<u64>().is_ok(), "{id}");
        }
        let counters: Vec<u64> = ids
            .iter()
            .map(|id| id.rsplit('_').next().unwrap().parse().unwrap())
            .collect();
        assert!(counters[1] > counters[0]);
        let tool = |index, id: &str, name: &str| StreamEvent::BlockStart {
            index,
            kind: BlockKind::ToolCall {
                id: id.into(),
                name: name.into(),
            },
        };
        assert_eq!(
            events[1..],
            [
                StreamEvent::BlockStart {
                    index: 0,
                    kind: BlockKind::Text
                },
                delta(0, "Checking both."),
                StreamEvent::Usage(Usage {
                    input: 3000,
                    reasoning: Some(0),
                    total_tokens: 3004,
                    ..Usage::default()
                }),
                StreamEvent::BlockEnd {
                    index: 0,
                    signature: None
                },
                tool(1, &ids[0], "bash"),
                delta(1, r#"{"command":"ls"}"#),
                StreamEvent::BlockEnd {
                    index: 1,
                    signature: Some("CiQB0e2Kb1BhcmFsbGVsT25l".into())
                },
                tool(2, &ids[1], "read"),
                delta(2, r#"{"path":"README.md"}"#),
                StreamEvent::BlockEnd {
                    index: 2,
                    signature: None
                },
                StreamEvent::Usage(Usage {
                    input: 3000,
                    output: 30,
                    reasoning: Some(0),
                    total_tokens: 3030,
                    ..Usage::default()
                }),
                StreamEvent::Done {
                    stop_reason: StopReason::ToolUse,
                    error_message: None
                },
            ]
        );

        // Provided ids are kept unless they repeat.
        let events = decode(
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"id\":\"c1\",\"name\":\"ls\"}},{\"functionCall\":{\"id\":\"c1\",\"name\":\"ls\",\"args\":null}}]}}]}\n\n",
        );
        let ids: Vec<&BlockKind> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::BlockStart { kind, .. } => Some(kind),
                _ => None,
            })
            .collect();
        assert_eq!(
            ids[0],
            &BlockKind::ToolCall {
                id: "c1".into(),
                name: "ls".into()
            }
        );
        assert!(matches!(ids[1], BlockKind::ToolCall { id, .. } if id.starts_with("ls_")));
        assert_eq!(events[1], delta(0, "{}"));
    }

    #[test]
    fn every_split_point_decodes_the_same() {
        let r = request(google_model("gemini-2.5-flash"), vec![]);
        assert_every_split_decodes_the_same(TEXT, &|| Decoder::new(&r));
    }

    #[test]
    fn finish_reasons_and_errors() {
        let events = decode(include_str!("../../fixtures/google/safety.sse"));
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done {
                stop_reason: StopReason::Error,
                error_message: Some("Provider stopped with: SAFETY".into())
            })
        );
        assert_eq!(
            raw_stop_reasons(
                Decoder::new(&request(google_model("gemini-2.5-flash"), vec![])),
                include_str!("../../fixtures/google/safety.sse")
            ),
            ["SAFETY".to_string()]
        );
        assert!(events.contains(&delta(0, "I can")));
        let finish = |reason: &str| {
            decode(&format!(
                "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"x\"}}]}},\"finishReason\":\"{reason}\"}}]}}\n\n"
            ))
            .pop()
        };
        let done = |stop_reason| {
            Some(StreamEvent::Done {
                stop_reason,
                error_message: None,
            })
        };
        assert_eq!(finish("STOP"), done(StopReason::Stop));
        assert_eq!(finish("MAX_TOKENS"), done(StopReason::Length));
        assert_eq!(
            finish("NEW_REASON"),
            Some(StreamEvent::Failed(ProviderError {
                message: "Unhandled stop reason: NEW_REASON".into(),
                retry_after: None
            }))
        );
        assert!(matches!(
            decode("data: {nope\n\n").last(),
            Some(StreamEvent::Failed(e)) if e.message.starts_with("Could not parse")
        ));
        // HTTP errors: the JSON body re-serialized, or a text body wrapped; no status prefix.
        assert_eq!(
            http_error_message(400, include_str!("../../fixtures/google/error_400.json")),
            r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}]}}"#
        );
        assert_eq!(
            http_error_message(503, "upstream down"),
            r#"{"error":{"message":"upstream down","code":503,"status":"Service Unavailable"}}"#
        );
    }

    #[test]
    fn signature_validity_and_family_detection() {
        assert!(is_valid_signature("AAAABBBB"));
        assert!(is_valid_signature("c2lnbmF0dXJl"));
        assert!(is_valid_signature("ab+/cd=="));
        assert!(!is_valid_signature("abc"));
        assert!(!is_valid_signature("not base64!"));
        assert!(!is_valid_signature("a==="));
        assert!(!is_valid_signature("===="));
        assert_eq!(
            family("models/gemini-3.1-pro-preview", Dialect::GeminiApi),
            Family::Gemini3Pro
        );
        assert_eq!(
            family("gemini-3-flash", Dialect::GeminiApi),
            Family::Gemini3Flash
        );
        assert_eq!(family("gemini-3.-pro", Dialect::GeminiApi), Family::Other);
        assert_eq!(family("Gemma4-it", Dialect::GeminiApi), Family::Gemma4);
        assert_eq!(family("Gemma4-it", Dialect::Vertex), Family::Other);
        assert!(!supports_multimodal_function_response("gemini-2.5-flash"));
        assert!(supports_multimodal_function_response("gemini-live-3-x"));
        assert!(supports_multimodal_function_response("claude-sonnet"));
        // Explicit call ids: Claude, gpt-oss and Gemini 3 or later (any case, live models too).
        for id in [
            "claude-x",
            "gpt-oss-120b",
            "gemini-3-pro-preview",
            "Gemini-10-x",
            "gemini-live-3-y",
        ] {
            assert!(requires_tool_call_id(id), "{id}");
        }
        for id in [
            "gemini-2.5-flash",
            "gemma-4-27b",
            "models/gemini-3-pro",
            "gemini-flash-latest",
        ] {
            assert!(!requires_tool_call_id(id), "{id}");
        }
    }

    #[test]
    fn consts_become_one_value_enums_in_subschemas_only() {
        let schema = json!({"type": "object", "const": "root", "$schema": "kept",
            "properties": {
                "mode": {"const": "fast", "description": "M"},
                "level": {"type": "number", "const": 3},
                "flag": {"const": true},
                "none": {"const": null},
                "both": {"const": "x", "enum": ["x", "y"]},
                "const": {"type": "string", "const": "k", "default": {"const": "data"}},
                "list": {"type": "array", "items": {"const": "a"}},
                "pick": {"anyOf": [{"const": 1}, {"type": "string"}]}},
            "additionalProperties": {"const": "extra"}});
        assert_eq!(
            const_as_enum(&schema, false).to_string(),
            json!({"type": "object", "$schema": "kept",
                "properties": {
                    "mode": {"description": "M", "enum": ["fast"]},
                    "level": {"type": "number", "enum": [3]},
                    "flag": {"const": true},
                    "none": {"const": null},
                    "both": {"const": "x", "enum": ["x", "y"]},
                    "const": {"type": "string", "default": {"const": "data"}, "enum": ["k"]},
                    "list": {"type": "array", "items": {"enum": ["a"]}},
                    "pick": {"anyOf": [{"enum": [1]}, {"type": "string"}]}},
                "additionalProperties": {"enum": ["extra"]}, "enum": ["root"]})
            .to_string()
        );
    }

    #[test]
    fn empty_signed_parts_are_replayed() {
        let history = r#"[{"role": "user", "content": "go", "timestamp": 1}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "", "thinkingSignature": "AAAA"}, {"type": "text", "text": " ", "textSignature": "BBBB"}, {"type": "text", "text": ""}, {"type": "thinking", "thinking": " "}], "api": "google-generative-ai", "provider": "google", "model": "gemini-3-pro-preview", "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}, "stopReason": "stop", "timestamp": 2}]"#;
        let messages: Vec<AgentMessage> = serde_json::from_str(history).unwrap();
        let same = request(google_model("gemini-3-pro-preview"), messages.clone());
        assert_eq!(
            convert_messages(&same)[1],
            json!({"parts": [{"text": "", "thought": true, "thoughtSignature": "AAAA"},
                {"text": " ", "thoughtSignature": "BBBB"}], "role": "model"})
        );
        // Another model's signatures are dropped, and with them the empty parts.
        let other = request(google_model("gemini-2.5-pro"), messages);
        assert_eq!(convert_messages(&other).len(), 1);
    }
}
