//! The `anthropic-messages` wire API (FACTS §8.1; pi-ai `providers/anthropic.js`): the request
//! builder (url, headers, JSON body exactly as pi sends it) and the stream decoder that turns
//! Anthropic's SSE events into provider-neutral `StreamEvent`s. Both are pure; the HTTP exchange
//! lives in `provider/mod.rs`.
//!
//! The decoder ends with `Done` at `message_stop`, or with `Failed` on an `event: error`, an
//! unparsable event, an unknown stop reason, or a body that ends after `message_start` but before
//! `message_stop`.

use serde_json::{Map, Value, json};

use super::decode::{Emitter, OpenBlocks, WireDecoder};
use super::error_text::anthropic_http_error_message;
use super::partial_json::parse_json_with_repair;
use super::request::{
    UnsupportedKeyword, adaptive_effort, anthropic_effort_marker, api_url,
    context_clamped_max_tokens, sends_mid_convo_system_messages, strict_parameters,
    thinking_max_tokens_and_budget, with_extra_headers,
};
use super::sse::SseEvent;
use super::transform::{id_chars, transform_messages};
use super::types::{
    BlockKind, CacheRetention, HttpRequest, StreamRequest, cache_retention_from_env,
};
use crate::config::{Model, ModelCost, ThinkingLevel};
use crate::messages::{
    AgentMessage, ContentBlock, StopReason, ToolSpec, Usage, UserContent, has_images,
};

const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
const FINE_GRAINED_TOOL_STREAMING_BETA: &str = "fine-grained-tool-streaming-2025-05-14";
const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";
/// The betas of `compat.supportsMidConvoEffort` (pi 1.6.0): effort set by system messages.
const MID_CONVERSATION_OUTPUT_CONFIG_BETA: &str = "mid-conversation-output-config-2026-07-01";
const THINKING_BINDING_CONTROLS_BETA: &str = "thinking-binding-controls-2026-08-01";
/// The beta of `compat.supportsMidConvoToolChanges` (pi 1.6.0): tools added and removed in place.
const INLINE_TOOLS_BETA: &str = "inline-tools-2026-09-15";
/// The beta of `compat.allowedFallbackModels` (pi 1.6.0): the server may answer with a fallback
/// model when the requested one refuses.
const SERVER_SIDE_FALLBACK_BETA: &str = "server-side-fallback-2026-07-01";
/// The deferred tool pi 1.6.0 declares with native tool changes, so the first change keeps the
/// cached prefix (never activated, the model does not see it).
const DEFERRED_TOOL_PLACEHOLDER: &str = "__pi_deferred_placeholder__";
const CLAUDE_CODE_VERSION: &str = "2.1.75";
const CLAUDE_CODE_IDENTITY: &str = "You are Claude Code, Anthropic's official CLI for Claude.";
/// Claude Code's tool names; OAuth requests use this casing for tools whose names match.
const CLAUDE_CODE_TOOLS: &[&str] = &[
    "Read",
    "Write",
    "Edit",
    "Bash",
    "Grep",
    "Glob",
    "AskUserQuestion",
    "EnterPlanMode",
    "ExitPlanMode",
    "KillShell",
    "NotebookEdit",
    "Skill",
    "Task",
    "TaskOutput",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
];

/// The request pi would send, with cache retention taken from the environment.
pub fn build_request(request: &StreamRequest) -> HttpRequest {
    build_request_with(request, cache_retention_from_env())
}

pub fn build_request_with(request: &StreamRequest, retention: CacheRetention) -> HttpRequest {
    let model = &request.model;
    let oauth = is_oauth_token(&request.api_key);
    // pi 1.6.0 thinks adaptively only where the model's `compat` says `forceAdaptiveThinking`
    // (the catalog sets it for the Claude models that need it; a custom model opts in).
    let adaptive = model.compat_bool("forceAdaptiveThinking") == Some(true);
    let thinking_on = request.thinking != ThinkingLevel::Off;
    let eager_tool_streaming = model
        .compat_bool("supportsEagerToolInputStreaming")
        .unwrap_or(true);
    // pi 1.6.0's native tool changes: the first system message's tools stay the request's tools
    // (and a deferred placeholder), later changes go in place as tool_addition/tool_removal.
    let native_tool_changes = sends_mid_convo_system_messages(model)
        && model.compat_bool("supportsMidConvoToolChanges") == Some(true)
        && !request.initial_tools.is_empty();
    let long_cache = model
        .compat_bool("supportsLongCacheRetention")
        .unwrap_or(true);
    let cache_on_tools = model
        .compat_bool("supportsCacheControlOnTools")
        .unwrap_or(true);
    // pi 1.6.0's managed effort: the level of each reply is set by a system message before it
    // (the last one for this reply), the top-level effort stays "low" so the cached prefix holds.
    let effort_marker = anthropic_effort_marker(request);

    let mut cache_control = json!({"type": "ephemeral"});
    if retention == CacheRetention::Long && long_cache {
        cache_control["ttl"] = json!("1h");
    }

    // Headers: pi's defaults, then the model's and the caller's extra headers.
    let mut betas: Vec<&str> = Vec::new();
    if !request.tools.is_empty() && !eager_tool_streaming {
        betas.push(FINE_GRAINED_TOOL_STREAMING_BETA);
    }
    if model.reasoning && thinking_on && !adaptive {
        betas.push(INTERLEAVED_THINKING_BETA);
    }
    let fallbacks = allowed_fallback_models(model);
    if !fallbacks.is_empty() {
        betas.push(SERVER_SIDE_FALLBACK_BETA);
    }
    if model.compat_bool("supportsMidConvoEffort") == Some(true) {
        betas.push(MID_CONVERSATION_OUTPUT_CONFIG_BETA);
        betas.push(THINKING_BINDING_CONTROLS_BETA);
    }
    if native_tool_changes {
        betas.push(INLINE_TOOLS_BETA);
    }
    if super::anthropic_threads::applies(request) {
        betas.push(super::anthropic_threads::MESSAGE_THREADS_BETA);
    }
    let mut headers: Vec<(String, String)> = vec![
        ("accept".into(), "application/json".into()),
        ("content-type".into(), "application/json".into()),
        ("anthropic-version".into(), "2023-06-01".into()),
        (
            "anthropic-dangerous-direct-browser-access".into(),
            "true".into(),
        ),
    ];
    if model.provider == crate::config::oauth::COPILOT_PROVIDER {
        // Copilot: Bearer auth with the Copilot token, no Claude Code identity.
        if !betas.is_empty() {
            headers.push(("anthropic-beta".into(), betas.join(",")));
        }
        headers.push((
            "authorization".into(),
            format!("Bearer {}", request.api_key),
        ));
    } else if oauth {
        let mut all = vec!["claude-code-20250219", "oauth-2025-04-20"];
        all.extend(&betas);
        headers.push(("anthropic-beta".into(), all.join(",")));
        headers.push((
            "user-agent".into(),
            format!("claude-cli/{CLAUDE_CODE_VERSION}"),
        ));
        headers.push(("x-app".into(), "cli".into()));
        headers.push((
            "authorization".into(),
            format!("Bearer {}", request.api_key),
        ));
    } else {
        if !betas.is_empty() {
            headers.push(("anthropic-beta".into(), betas.join(",")));
        }
        // No key: the credential is a header of its own (`ANTHROPIC_AUTH_TOKEN` as a bearer).
        if !request.api_key.is_empty() {
            headers.push(("x-api-key".into(), request.api_key.clone()));
        }
    }
    let headers = with_extra_headers(headers, model, &super::copilot::extra_headers(request));

    // Thinking and output budget (pi-ai streamSimpleAnthropic + buildParams).
    let reasoning = thinking_on.then_some(request.thinking);
    let mut max_tokens = None;
    let mut thinking: Option<Value> = None;
    let mut output_config: Option<Value> = None;
    match reasoning {
        None => {
            if model.reasoning {
                thinking = Some(json!({"type": "disabled"}));
            }
        }
        Some(level) if adaptive => {
            if model.reasoning {
                thinking = Some(json!({"type": "adaptive", "display": "summarized"}));
                output_config = Some(json!({"effort": adaptive_effort(model, level)}));
            }
        }
        Some(level) => {
            let (grown, budget) = thinking_max_tokens_and_budget(request, level);
            max_tokens = Some(grown);
            if model.reasoning {
                thinking = Some(json!({
                    "type": "enabled",
                    "budget_tokens": if budget > 0 { budget } else { 1024 },
                    "display": "summarized",
                }));
            }
        }
    }
    if effort_marker.is_some() {
        // Adaptive, so a reply whose thinking no longer matches its prefix loses the block
        // instead of failing the request; "low" because an organization may cap the effort.
        thinking = Some(json!({"type": "adaptive", "display": "summarized",
            "block_binding": {"prefix_mismatch_behavior": "drop_block"}}));
        output_config = Some(json!({"effort": "low"}));
    }
    let max_tokens = max_tokens.unwrap_or_else(|| context_clamped_max_tokens(request));

    let mut body = Map::new();
    body.insert("model".into(), json!(model.id));
    body.insert(
        "messages".into(),
        Value::Array(convert_messages(
            &request.messages,
            model,
            oauth,
            &cache_control,
            effort_marker.as_deref(),
            native_tool_changes.then_some(request),
        )),
    );
    body.insert("max_tokens".into(), json!(max_tokens));
    body.insert("stream".into(), json!(true));
    let mut system = Vec::new();
    if oauth {
        system.push(
            json!({"type": "text", "text": CLAUDE_CODE_IDENTITY, "cache_control": cache_control}),
        );
    }
    if !request.system_prompt.is_empty() {
        system.push(
            json!({"type": "text", "text": request.system_prompt, "cache_control": cache_control}),
        );
    }
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    let tool_cache = cache_on_tools.then_some(&cache_control);
    if native_tool_changes {
        let mut tools = convert_tools(request, &request.initial_tools, oauth, tool_cache);
        tools.push(json!({"name": DEFERRED_TOOL_PLACEHOLDER,
            "description": "Reserved placeholder. Never available. Never call this.",
            "input_schema": {"type": "object", "properties": {}, "required": []},
            "defer_loading": true}));
        body.insert("tools".into(), Value::Array(tools));
    } else if !request.tools.is_empty() {
        let tools = convert_tools(request, &request.tools, oauth, tool_cache);
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(thinking) = thinking {
        body.insert("thinking".into(), thinking);
    }
    if let Some(output_config) = output_config {
        body.insert("output_config".into(), output_config);
    }
    if !fallbacks.is_empty() {
        let models: Vec<Value> = fallbacks
            .iter()
            .map(|fallback| json!({"model": fallback["model"]}))
            .collect();
        body.insert("fallbacks".into(), Value::Array(models));
    }

    HttpRequest {
        url: api_url(model, DEFAULT_BASE_URL, "/v1/messages"),
        headers,
        body: Value::Object(body),
    }
}

/// A reply as the next request sends it (its assistant message; the placeholder results
/// `transform_messages` adds for trailing tool calls are left out), for message threads.
pub(crate) fn reply_messages(reply: &AgentMessage, model: &Model, oauth: bool) -> Vec<Value> {
    let converted = convert_messages(
        std::slice::from_ref(reply),
        model,
        oauth,
        &Value::Null,
        None,
        None,
    );
    converted
        .into_iter()
        .filter(|message| message["role"] == "assistant")
        .collect()
}

/// `compat.allowedFallbackModels`: the models (`{provider, model, cost}`) Anthropic may answer
/// with instead of this one (pi 1.6.0 sends them as `fallbacks`, with the server-side fallback
/// beta, and prices a fallback's reply with its `cost`). Entries without a model are skipped.
fn allowed_fallback_models(model: &Model) -> Vec<&Map<String, Value>> {
    let Some(Value::Array(list)) = model
        .compat
        .as_ref()
        .and_then(|c| c.get("allowedFallbackModels"))
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(Value::as_object)
        .filter(|entry| entry.get("model").and_then(Value::as_str).is_some())
        .collect()
}

/// Tool definitions as Anthropic takes them (OAuth: Claude Code's names), `cache_control` on the
/// last one.
fn convert_tools(
    request: &StreamRequest,
    tools: &[ToolSpec],
    oauth: bool,
    cache_control: Option<&Value>,
) -> Vec<Value> {
    let model = &request.model;
    let eager_tool_streaming = model
        .compat_bool("supportsEagerToolInputStreaming")
        .unwrap_or(true);
    let strict_tools = strict_tools_supported(model);
    let last = tools.len().saturating_sub(1);
    tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let mut t = Map::new();
            let name = if oauth {
                to_claude_code_name(&tool.name)
            } else {
                tool.name.clone()
            };
            t.insert("name".into(), json!(name));
            t.insert("description".into(), json!(tool.description));
            if eager_tool_streaming {
                t.insert("eager_input_streaming".into(), json!(true));
            }
            let strict = strict_parameters(
                request,
                tool,
                strict_tools,
                Some(strict_rejects as UnsupportedKeyword),
            );
            if strict.is_some() {
                t.insert("strict".into(), json!(true));
            }
            t.insert(
                "input_schema".into(),
                input_schema(
                    strict.as_ref().unwrap_or(&tool.parameters),
                    strict.is_some(),
                ),
            );
            if let Some(cache_control) = cache_control.filter(|_| i == last) {
                t.insert("cache_control".into(), cache_control.clone());
            }
            Value::Object(t)
        })
        .collect()
}

pub(crate) fn is_oauth_token(api_key: &str) -> bool {
    api_key.contains("sk-ant-oat")
}

fn to_claude_code_name(name: &str) -> String {
    CLAUDE_CODE_TOOLS
        .iter()
        .find(|t| t.eq_ignore_ascii_case(name))
        .map(|t| t.to_string())
        .unwrap_or_else(|| name.to_string())
}

/// A tool's `input_schema`: an object with its properties and required names, and its
/// `additionalProperties`, `$defs` and `definitions` where it has them (Anthropic rejects other
/// root keywords); a strict schema as converted, with the same keys (pi 1.6.0).
fn input_schema(schema: &Value, strict: bool) -> Value {
    let field = |key: &str| schema.get(key).filter(|v| !v.is_null()).cloned();
    let mut legacy = Map::new();
    legacy.insert("type".into(), json!("object"));
    legacy.insert(
        "properties".into(),
        field("properties").unwrap_or(json!({})),
    );
    legacy.insert("required".into(), field("required").unwrap_or(json!([])));
    for key in ["additionalProperties", "$defs", "definitions"] {
        if let Some(value) = schema.get(key) {
            legacy.insert(key.into(), value.clone());
        }
    }
    if !strict {
        return Value::Object(legacy);
    }
    // A strict schema keeps its own keys in their order, the legacy values over them.
    let mut merged = schema.as_object().cloned().unwrap_or_default();
    for (key, value) in legacy {
        merged.insert(key, value);
    }
    Value::Object(merged)
}

/// The diagnostic of the input transformations Anthropic reports: each one's `type`, `path` and
/// `reason` where given.
fn input_transformations_diagnostic(list: &[Value]) -> Value {
    let transformations: Vec<Value> = list
        .iter()
        .map(|t| {
            let mut kept = Map::new();
            for key in ["type", "path", "reason"] {
                if let Some(value) = t.get(key).filter(|v| !v.is_null()) {
                    kept.insert(key.into(), value.clone());
                }
            }
            Value::Object(kept)
        })
        .collect();
    json!({"type": "anthropic_input_transformations", "timestamp": crate::time::now_ms(),
        "details": {"transformations": transformations}})
}

/// Strict tools with `compat.supportsStrictTools` (the preferring ones go non-strict after
/// Claude refused them: `request::strict_parameters`).
pub(crate) fn strict_tools_supported(model: &crate::config::Model) -> bool {
    model.compat_bool("supportsStrictTools") == Some(true)
}

/// Keywords Anthropic's strict tool use rejects for the whole request (pi 1.6.0).
pub(crate) fn strict_rejects(key: &str, value: &Value) -> bool {
    const KEYWORDS: [&str; 11] = [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "maxItems",
        "uniqueItems",
        "minContains",
        "maxContains",
        "minProperties",
        "maxProperties",
    ];
    const FORMATS: [&str; 10] = [
        "date-time",
        "time",
        "date",
        "duration",
        "email",
        "hostname",
        "uri",
        "ipv4",
        "ipv6",
        "uuid",
    ];
    match key {
        _ if KEYWORDS.contains(&key) => true,
        "minItems" => value != &json!(0) && value != &json!(1),
        "format" => !value.as_str().is_some_and(|f| FORMATS.contains(&f)),
        _ => false,
    }
}

/// Tool call ids Anthropic accepts: `[A-Za-z0-9_-]`, at most 64 characters.
pub fn normalize_tool_call_id(id: &str) -> String {
    id_chars(id, 64)
}

fn convert_messages(
    messages: &[AgentMessage],
    model: &Model,
    oauth: bool,
    cache_control: &Value,
    effort_marker: Option<&str>,
    // With native tool changes: the request whose tool conversion the additions use.
    tool_changes: Option<&StreamRequest>,
) -> Vec<Value> {
    let transformed = transform_messages(messages, model, &normalize_tool_call_id);
    let allow_empty_signature = model.compat_bool("allowEmptySignature").unwrap_or(false);
    let mut params: Vec<Value> = Vec::new();
    // Later system messages (a model that takes them in place) wait until just before the next
    // assistant message sent, or the end: Anthropic wants a tool's results right after its call,
    // so an update placed before a user message lands after it (pi 1.6.0).
    let mut pending_systems: Vec<Value> = Vec::new();
    let mut i = 0;
    while i < transformed.len() {
        match &transformed[i] {
            AgentMessage::User(user) => match &user.content {
                UserContent::Text(text) => {
                    if !text.trim().is_empty() {
                        params.push(json!({"role": "user", "content": text}));
                    }
                }
                UserContent::Blocks(blocks) => {
                    let content: Vec<Value> = blocks
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text(t) if t.text.trim().is_empty() => None,
                            ContentBlock::Text(t) => Some(json!({"type": "text", "text": t.text})),
                            ContentBlock::Image(img) => {
                                Some(image_block(&img.mime_type, &img.data))
                            }
                            _ => None,
                        })
                        .collect();
                    if !content.is_empty() {
                        params.push(json!({"role": "user", "content": content}));
                    }
                }
            },
            AgentMessage::Assistant(assistant) => {
                let mut blocks = Vec::new();
                for block in &assistant.content {
                    match block {
                        ContentBlock::Text(t) => {
                            if !t.text.trim().is_empty() {
                                blocks.push(json!({"type": "text", "text": t.text}));
                            }
                        }
                        ContentBlock::Thinking(t) => {
                            if t.redacted == Some(true) {
                                blocks.push(json!({"type": "redacted_thinking",
                                    "data": t.thinking_signature.clone().unwrap_or_default()}));
                                continue;
                            }
                            let signature = t
                                .thinking_signature
                                .as_deref()
                                .filter(|sig| !sig.trim().is_empty());
                            if t.thinking.trim().is_empty() && signature.is_none() {
                                continue;
                            }
                            match signature {
                                Some(sig) => blocks.push(json!({
                                    "type": "thinking", "thinking": t.thinking, "signature": sig})),
                                // Servers that sign nothing take the block back with an empty
                                // signature (`compat.allowEmptySignature`).
                                None if allow_empty_signature => blocks.push(json!({
                                    "type": "thinking", "thinking": t.thinking, "signature": ""})),
                                // Unsigned thinking (e.g. an interrupted stream) is replayed as
                                // plain text; the API rejects thinking without a signature.
                                None => blocks.push(json!({"type": "text", "text": t.thinking})),
                            }
                        }
                        ContentBlock::ToolCall(call) => {
                            let name = if oauth {
                                to_claude_code_name(&call.name)
                            } else {
                                call.name.clone()
                            };
                            let input = if call.arguments.is_null() {
                                json!({})
                            } else {
                                call.arguments.clone()
                            };
                            blocks.push(json!({"type": "tool_use", "id": call.id, "name": name,
                                "input": input}));
                        }
                        ContentBlock::Image(_) => {}
                    }
                }
                if !blocks.is_empty() {
                    params.append(&mut pending_systems);
                    // The effort an earlier reply from this provider was given, right before it.
                    if let Some(level) = assistant.provider_thinking_level.as_deref()
                        && effort_marker.is_some()
                        && assistant.api == "anthropic-messages"
                        && assistant.provider == model.provider
                        && matches!(level, "low" | "medium" | "high" | "xhigh" | "max")
                    {
                        params.push(effort_message(level));
                    }
                    params.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            AgentMessage::System(system) => {
                let text = system.update_text();
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                if let Some(request) = tool_changes {
                    let added: Vec<ToolSpec> = system.added_tools();
                    for removed in system.tools_removed.iter().flatten() {
                        let name = removed["name"].as_str().unwrap_or_default();
                        // A new definition under the same name replaces the old one.
                        if added.iter().any(|tool| tool.name == name) {
                            continue;
                        }
                        let name = if oauth {
                            to_claude_code_name(name)
                        } else {
                            name.to_string()
                        };
                        blocks.push(json!({"type": "tool_removal",
                            "tool": {"type": "tool_reference", "name": name}}));
                    }
                    for definition in convert_tools(request, &added, oauth, None) {
                        blocks.push(json!({"type": "tool_addition",
                            "tool": {"type": "tool_definition", "definition": definition}}));
                    }
                }
                if !blocks.is_empty() {
                    pending_systems.push(json!({"role": "system", "content": blocks}));
                }
            }
            AgentMessage::ToolResult(_) => {
                // Consecutive tool results go into one user message (z.ai's endpoint needs it).
                let mut results = Vec::new();
                while let Some(AgentMessage::ToolResult(result)) = transformed.get(i) {
                    results.push(json!({
                        "type": "tool_result",
                        "tool_use_id": result.tool_call_id,
                        "content": tool_result_content(&result.content),
                        "is_error": result.is_error,
                    }));
                    i += 1;
                }
                params.push(json!({"role": "user", "content": results}));
                continue;
            }
            _ => {}
        }
        i += 1;
    }

    params.append(&mut pending_systems);
    // Cache the conversation so far: the last block of a trailing user or system message.
    if let Some(last) = params.last_mut()
        && (last["role"] == "user" || last["role"] == "system")
    {
        if let Some(text) = last["content"].as_str().map(str::to_string) {
            last["content"] =
                json!([{"type": "text", "text": text, "cache_control": cache_control}]);
        } else if let Some(block) = last["content"]
            .as_array_mut()
            .and_then(|blocks| blocks.last_mut())
        {
            let kind = block["type"].as_str().unwrap_or("");
            if matches!(
                kind,
                "text" | "image" | "tool_result" | "tool_addition" | "tool_removal"
            ) {
                block["cache_control"] = cache_control.clone();
            }
        }
    }
    if let Some(level) = effort_marker {
        params.push(effort_message(level));
    }
    params
}

/// A system message that sets the effort of the replies after it (pi 1.6.0's managed effort).
fn effort_message(level: &str) -> Value {
    json!({"role": "system", "content": [], "output_config": {"effort": level}})
}

fn image_block(mime_type: &str, data: &str) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": mime_type, "data": data}})
}

/// Text-only results are one string (texts joined by LF); with images, a block list that starts
/// with a placeholder text when there is no text at all.
fn tool_result_content(content: &[ContentBlock]) -> Value {
    let has_images = has_images(content);
    if !has_images {
        let texts: Vec<&str> = content
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => t.text.as_str(),
                _ => "",
            })
            .collect();
        return json!(texts.join("\n"));
    }
    let mut blocks: Vec<Value> = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(json!({"type": "text", "text": t.text})),
            ContentBlock::Image(img) => Some(image_block(&img.mime_type, &img.data)),
            _ => None,
        })
        .collect();
    if !blocks.iter().any(|b| b["type"] == "text") {
        blocks.insert(0, json!({"type": "text", "text": "(see attached image)"}));
    }
    Value::Array(blocks)
}

/// Maps Anthropic stop reasons, with pi 1.6.0's error text for the error stops; `Err` carries
/// pi's message for a reason it does not know.
fn map_stop_reason(reason: &str, details: &Value) -> Result<(StopReason, Option<String>), String> {
    match reason {
        "end_turn" | "pause_turn" | "stop_sequence" => Ok((StopReason::Stop, None)),
        "max_tokens" => Ok((StopReason::Length, None)),
        "tool_use" => Ok((StopReason::ToolUse, None)),
        "refusal" => {
            let explanation = details["explanation"].as_str().filter(|e| !e.is_empty());
            let text = explanation.unwrap_or("The model refused to complete the request");
            Ok((StopReason::Error, Some(text.to_string())))
        }
        "sensitive" => Ok((
            StopReason::Error,
            Some("Provider stopped with: sensitive".to_string()),
        )),
        other => Err(format!("Unhandled stop reason: {other}")),
    }
}

/// What an open block accumulates until its stop.
enum OpenKind {
    Text,
    Thinking { signature: String },
    RedactedThinking { data: String },
    ToolCall,
}

/// Anthropic SSE → `StreamEvent`s.
pub struct Decoder {
    open: OpenBlocks<OpenKind>,
    usage: Usage,
    stop_reason: StopReason,
    /// The error text of an error stop (`refusal`, `sensitive`).
    stop_message: Option<String>,
    saw_message_start: bool,
    /// The latest `input_transformations` the stream reported (pi 1.6.0 records them in the
    /// reply's `diagnostics`).
    input_transformations: Option<Vec<Value>>,
    /// OAuth requests rename tools to Claude Code casing; names coming back are mapped to ours.
    oauth_tool_names: Option<Vec<String>>,
    /// The requested model (a reply from another one is a fallback's: `responseModel`).
    model_id: String,
    /// The prices of `compat.allowedFallbackModels` of this provider, by model id.
    fallback_costs: Vec<(String, ModelCost)>,
    /// The prices of the fallback model that answers, if it has its own.
    fallback_cost: Option<ModelCost>,
    /// Whether any content block started (a fallback after that is refused).
    content_started: bool,
}

impl Decoder {
    pub fn new(request: &StreamRequest) -> Decoder {
        Decoder {
            open: OpenBlocks::new(),
            usage: Usage::default(),
            stop_reason: StopReason::Stop,
            stop_message: None,
            saw_message_start: false,
            input_transformations: None,
            oauth_tool_names: is_oauth_token(&request.api_key)
                .then(|| request.tools.iter().map(|t| t.name.clone()).collect()),
            model_id: request.model.id.clone(),
            fallback_costs: allowed_fallback_models(&request.model)
                .into_iter()
                .filter(|f| {
                    f.get("provider").and_then(Value::as_str) == Some(&request.model.provider)
                })
                .filter_map(|f| {
                    let cost = serde_json::from_value(f.get("cost")?.clone()).ok()?;
                    Some((f.get("model")?.as_str()?.to_string(), cost))
                })
                .collect(),
            fallback_cost: None,
            content_started: false,
        }
    }

    fn push_usage(&mut self, out: &mut Emitter) {
        self.usage.total_tokens =
            self.usage.input + self.usage.output + self.usage.cache_read + self.usage.cache_write;
        match &self.fallback_cost {
            // A fallback model's reply costs what that model costs (pi 1.6.0).
            Some(cost) => {
                let mut usage = self.usage.clone();
                cost.apply_to(&mut usage);
                out.priced_usage(usage);
            }
            None => out.usage(self.usage.clone()),
        }
    }

    fn block_start(&mut self, event: &Value, out: &mut Emitter) {
        let wire_index = event["index"].as_u64().unwrap_or(u64::MAX);
        let block = &event["content_block"];
        let (kind, open_kind) = match block["type"].as_str().unwrap_or("") {
            "text" => (BlockKind::Text, OpenKind::Text),
            "thinking" => (
                BlockKind::Thinking { redacted: false },
                OpenKind::Thinking {
                    signature: String::new(),
                },
            ),
            "redacted_thinking" => (
                BlockKind::Thinking { redacted: true },
                OpenKind::RedactedThinking {
                    data: block["data"].as_str().unwrap_or("").to_string(),
                },
            ),
            "tool_use" => {
                let id = block["id"].as_str().unwrap_or("").to_string();
                let mut name = block["name"].as_str().unwrap_or("").to_string();
                if let Some(ours) = &self.oauth_tool_names
                    && let Some(found) = ours.iter().find(|t| t.eq_ignore_ascii_case(&name))
                {
                    name = found.clone();
                }
                (BlockKind::ToolCall { id, name }, OpenKind::ToolCall)
            }
            // A server-side fallback before any content is the fallback model taking over; one
            // after content started is a switch pi 1.6.0 refuses.
            "fallback" if self.content_started => {
                out.fail("Anthropic performed an unsupported mid-output model fallback");
                return;
            }
            // Server tools, citations and future block types are not part of pi's message.
            _ => return,
        };
        self.content_started = true;
        self.open.start(wire_index, kind, open_kind, out);
    }

    fn block_delta(&mut self, event: &Value, out: &mut Emitter) {
        let wire_index = event["index"].as_u64().unwrap_or(u64::MAX);
        let Some(block) = self.open.get_mut(wire_index) else {
            return;
        };
        let delta = &event["delta"];
        let text = |key: &str| delta[key].as_str().unwrap_or("").to_string();
        match (delta["type"].as_str().unwrap_or(""), &mut block.state) {
            ("text_delta", OpenKind::Text) => out.delta(block.index, text("text")),
            ("thinking_delta", OpenKind::Thinking { .. }) => {
                out.delta(block.index, text("thinking"))
            }
            ("input_json_delta", OpenKind::ToolCall) => {
                out.delta(block.index, text("partial_json"))
            }
            ("signature_delta", OpenKind::Thinking { signature }) => {
                signature.push_str(&text("signature"))
            }
            _ => {}
        }
    }
}

impl WireDecoder for Decoder {
    fn on_sse(&mut self, sse: &SseEvent, out: &mut Emitter) {
        if sse.event == "error" {
            // pi throws the raw data of an error event as the message.
            out.fail(sse.data.clone());
            return;
        }
        const MESSAGE_EVENTS: [&str; 6] = [
            "message_start",
            "message_delta",
            "message_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
        ];
        if !MESSAGE_EVENTS.contains(&sse.event.as_str()) {
            return;
        }
        let event = match parse_json_with_repair(&sse.data) {
            Ok(v) => v,
            Err(e) => {
                out.fail(format!(
                    "Could not parse Anthropic SSE event {}: {}; data={}",
                    sse.event, e, sse.data
                ));
                return;
            }
        };
        match event["type"].as_str().unwrap_or("") {
            "message_start" => {
                self.saw_message_start = true;
                let message = &event["message"];
                if let Some(list) = message["input_transformations"].as_array() {
                    self.input_transformations = Some(list.clone());
                }
                let response_id = message["id"].as_str().map(str::to_string);
                let response_model = message["model"]
                    .as_str()
                    .filter(|m| *m != self.model_id)
                    .map(str::to_string);
                self.fallback_cost = response_model.as_ref().and_then(|m| {
                    let found = self.fallback_costs.iter().find(|(id, _)| id == m);
                    found.map(|(_, cost)| cost.clone())
                });
                if response_id.is_some() || response_model.is_some() {
                    out.meta(response_id, response_model);
                }
                let usage = &message["usage"];
                self.usage.input = usage["input_tokens"].as_u64().unwrap_or(0);
                self.usage.output = usage["output_tokens"].as_u64().unwrap_or(0);
                self.usage.cache_read = usage["cache_read_input_tokens"].as_u64().unwrap_or(0);
                self.usage.cache_write = usage["cache_creation_input_tokens"].as_u64().unwrap_or(0);
                self.usage.cache_write_1h = Some(
                    usage["cache_creation"]["ephemeral_1h_input_tokens"]
                        .as_u64()
                        .unwrap_or(0),
                );
                self.push_usage(out);
            }
            "content_block_start" => self.block_start(&event, out),
            "content_block_delta" => self.block_delta(&event, out),
            "content_block_stop" => {
                let wire_index = event["index"].as_u64().unwrap_or(u64::MAX);
                if let Some(block) = self.open.stop(wire_index) {
                    let signature = match block.state {
                        OpenKind::Text | OpenKind::ToolCall => None,
                        OpenKind::Thinking { signature } => Some(signature),
                        OpenKind::RedactedThinking { data } => Some(data),
                    };
                    out.end(block.index, signature);
                }
            }
            "message_delta" => {
                if let Some(list) = event["input_transformations"].as_array() {
                    self.input_transformations = Some(list.clone());
                }
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    out.raw_stop_reason(reason);
                    match map_stop_reason(reason, &event["delta"]["stop_details"]) {
                        Ok((stop, message)) => {
                            self.stop_reason = stop;
                            if message.is_some() {
                                self.stop_message = message;
                            }
                        }
                        Err(message) => {
                            out.fail(message);
                            return;
                        }
                    }
                }
                // Only fields present and non-null replace what message_start said.
                let usage = &event["usage"];
                if let Some(v) = usage["input_tokens"].as_u64() {
                    self.usage.input = v;
                }
                if let Some(v) = usage["output_tokens"].as_u64() {
                    self.usage.output = v;
                }
                if let Some(v) = usage["cache_read_input_tokens"].as_u64() {
                    self.usage.cache_read = v;
                }
                if let Some(v) = usage["cache_creation_input_tokens"].as_u64() {
                    self.usage.cache_write = v;
                }
                // Proxies (Vercel AI Gateway) repeat the one-hour split here.
                if let Some(v) = usage["cache_creation"]["ephemeral_1h_input_tokens"].as_u64() {
                    self.usage.cache_write_1h = Some(v);
                }
                if let Some(v) = usage["output_tokens_details"]["thinking_tokens"].as_u64() {
                    self.usage.reasoning = Some(v);
                }
                self.push_usage(out);
            }
            "message_stop" => {
                // A finished reply records what the API changed in its input (pi 1.6.0's
                // `anthropic_input_transformations`).
                let changed = self.input_transformations.take().filter(|l| !l.is_empty());
                if let Some(list) = changed.filter(|_| self.stop_reason != StopReason::Error) {
                    out.diagnostic(input_transformations_diagnostic(&list));
                }
                match self.stop_message.take() {
                    Some(message) => out.done_with_message(self.stop_reason, Some(message)),
                    None => out.done(self.stop_reason),
                }
            }
            _ => {}
        }
    }

    /// The body ended. Without `message_stop` after a `message_start` the response is incomplete.
    fn on_eof(&mut self, out: &mut Emitter) {
        // pi reports an empty, successful message for a body without any message events; pi-rs
        // calls that what it is, a failure (a proxy page, garbage), so it is seen and retried.
        out.fail(if self.saw_message_start {
            "Anthropic stream ended before message_stop"
        } else {
            "Anthropic stream ended without a message (no message_start event)"
        });
    }

    fn http_error_message(&self, status: u16, body: &str) -> String {
        anthropic_http_error_message(status, body)
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::{
        assert_every_split_decodes_the_same, decode_in_parts, raw_stop_reasons,
    };
    use super::super::test_support::{assistant, header, model, request, tool_result, user};
    use super::super::types::{ProviderError, StreamEvent};
    use super::*;
    use crate::messages::{ThinkingContent, ToolCall};

    fn anthropic_model(id: &str, reasoning: bool) -> Model {
        let mut m = model("anthropic-messages", "anthropic", id);
        m.base_url = "https://api.anthropic.com".into();
        m.reasoning = reasoning;
        m.max_tokens = 64000;
        m
    }

    #[test]
    fn body_matches_the_recorded_reference_shape() {
        let mut r = request(anthropic_model("claude-sonnet-4-5", true), vec![user("hi")]);
        r.system_prompt = "SYS".into();
        r.thinking = ThinkingLevel::Medium;
        r.tools = vec![crate::messages::ToolSpec {
            name: "read".into(),
            description: "Read a file".into(),
            parameters: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
        }];
        let http = build_request_with(&r, CacheRetention::Short);
        assert_eq!(http.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(header(&http, "x-api-key"), Some("KEY"));
        // api.anthropic.com with a session: the message-threads beta (the thread itself is added
        // on the provider thread, `anthropic_threads`).
        assert_eq!(
            header(&http, "anthropic-beta"),
            Some("interleaved-thinking-2025-05-14,message-threads-2026-08-12")
        );
        let expected = json!({
            "model": "claude-sonnet-4-5",
            "messages": [{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}],
            // pi 1.6.0: the model's 64000 (the window holds it); the budget fits inside it.
            "max_tokens": 64000,
            "stream": true,
            "system": [{"type":"text","text":"SYS","cache_control":{"type":"ephemeral"}}],
            "tools": [{"name":"read","description":"Read a file","eager_input_streaming":true,
                "input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]},
                "cache_control":{"type":"ephemeral"}}],
            "thinking": {"type":"enabled","budget_tokens":8192,"display":"summarized"},
        });
        assert_eq!(
            serde_json::to_string(&http.body).unwrap(),
            expected.to_string()
        );
    }

    #[test]
    fn adaptive_models_use_effort_and_no_interleaved_beta() {
        let mut adaptive = anthropic_model("claude-opus-4-6", true);
        adaptive.compat = json!({"forceAdaptiveThinking": true}).as_object().cloned();
        let mut r = request(adaptive, vec![user("hi")]);
        r.thinking = ThinkingLevel::Minimal;
        let http = build_request_with(&r, CacheRetention::Long);
        assert_eq!(
            header(&http, "anthropic-beta"),
            Some("message-threads-2026-08-12")
        );
        assert_eq!(http.body["max_tokens"], 64000);
        assert_eq!(
            http.body["thinking"],
            json!({"type":"adaptive","display":"summarized"})
        );
        assert_eq!(http.body["output_config"], json!({"effort":"low"}));
        assert_eq!(
            http.body["messages"][0]["content"][0]["cache_control"],
            json!({"type":"ephemeral","ttl":"1h"})
        );
        // Thinking off on a reasoning model disables it explicitly.
        r.thinking = ThinkingLevel::Off;
        let http = build_request_with(&r, CacheRetention::Short);
        assert_eq!(http.body["thinking"], json!({"type":"disabled"}));
        assert!(http.body.get("output_config").is_none());
    }

    #[test]
    fn messages_merge_tool_results_and_convert_thinking() {
        let mut a = assistant(
            "anthropic-messages",
            "anthropic",
            "claude-sonnet-4-5",
            vec![
                ContentBlock::Thinking(ThinkingContent {
                    thinking: "hmm".into(),
                    thinking_signature: Some("SIG".into()),
                    redacted: None,
                }),
                ContentBlock::Thinking(ThinkingContent {
                    thinking: "[Reasoning redacted]".into(),
                    thinking_signature: Some("OPAQUE".into()),
                    redacted: Some(true),
                }),
                ContentBlock::Thinking(ThinkingContent {
                    thinking: "unsigned".into(),
                    thinking_signature: Some(String::new()),
                    redacted: None,
                }),
                ContentBlock::Text(crate::messages::TextContent::new("  ")),
                ContentBlock::ToolCall(ToolCall {
                    id: "t1".into(),
                    name: "read".into(),
                    arguments: json!({"path":"a"}),
                    thought_signature: None,
                }),
                ContentBlock::ToolCall(ToolCall {
                    id: "t2".into(),
                    name: "read".into(),
                    arguments: json!({"path":"b"}),
                    thought_signature: None,
                }),
            ],
        );
        a.stop_reason = StopReason::ToolUse;
        let messages = vec![
            user("go"),
            AgentMessage::Assistant(a),
            tool_result("t1", "read", "A", false),
            tool_result("t2", "read", "B\nC", true),
        ];
        let r = request(anthropic_model("claude-sonnet-4-5", true), messages);
        let body = build_request_with(&r, CacheRetention::Short).body;
        let expected = json!([
            {"role":"user","content":[{"type":"text","text":"go"}]},
            {"role":"assistant","content":[
                {"type":"thinking","thinking":"hmm","signature":"SIG"},
                {"type":"redacted_thinking","data":"OPAQUE"},
                {"type":"text","text":"unsigned"},
                {"type":"tool_use","id":"t1","name":"read","input":{"path":"a"}},
                {"type":"tool_use","id":"t2","name":"read","input":{"path":"b"}}]},
            {"role":"user","content":[
                {"type":"tool_result","tool_use_id":"t1","content":"A","is_error":false},
                {"type":"tool_result","tool_use_id":"t2","content":"B\nC","is_error":true,
                 "cache_control":{"type":"ephemeral"}}]}
        ]);
        assert_eq!(body["messages"], expected);
    }

    /// `compat.allowEmptySignature` keeps unsigned thinking as thinking; signed thinking with no
    /// text is kept too, unsigned thinking with no text is dropped (pi 1.6.0).
    #[test]
    fn empty_signatures_follow_the_compat_key() {
        let thinking = |text: &str, signature: &str| {
            ContentBlock::Thinking(ThinkingContent {
                thinking: text.into(),
                thinking_signature: Some(signature.into()),
                redacted: None,
            })
        };
        let reply = assistant(
            "anthropic-messages",
            "anthropic",
            "claude-sonnet-4-5",
            vec![
                thinking("unsigned", ""),
                thinking(" ", "SIG"),
                thinking("", ""),
            ],
        );
        let messages = vec![user("go"), AgentMessage::Assistant(reply), user("next")];
        let mut m = anthropic_model("claude-sonnet-4-5", true);
        let content = |m: &Model| {
            let r = request(m.clone(), messages.clone());
            build_request_with(&r, CacheRetention::Short).body["messages"][1]["content"].clone()
        };
        assert_eq!(
            content(&m),
            json!([{"type":"text","text":"unsigned"},
                {"type":"thinking","thinking":" ","signature":"SIG"}])
        );
        m.compat = json!({"allowEmptySignature": true}).as_object().cloned();
        assert_eq!(
            content(&m),
            json!([{"type":"thinking","thinking":"unsigned","signature":""},
                {"type":"thinking","thinking":" ","signature":"SIG"}])
        );
    }

    /// `compat.allowedFallbackModels`: `fallbacks` (models only, last in the body) and the
    /// server-side fallback beta; entries without a model are skipped; none without the key.
    #[test]
    fn allowed_fallback_models_go_into_the_body_and_betas() {
        let mut m = anthropic_model("claude-sonnet-4-5", false);
        m.base_url = "http://127.0.0.1:9".into();
        let r = request(m.clone(), vec![user("hi")]);
        let http = build_request_with(&r, CacheRetention::Short);
        assert!(http.body.get("fallbacks").is_none());
        assert_eq!(header(&http, "anthropic-beta"), None);
        m.compat = json!({"allowedFallbackModels": [
            {"provider": "anthropic", "model": "claude-fb", "cost": {"input": 1, "output": 2}},
            {"provider": "anthropic"}]})
        .as_object()
        .cloned();
        let r = request(m, vec![user("hi")]);
        let http = build_request_with(&r, CacheRetention::Short);
        assert_eq!(http.body["fallbacks"], json!([{"model": "claude-fb"}]));
        let keys: Vec<&String> = http.body.as_object().unwrap().keys().collect();
        assert_eq!(keys.last().map(|k| k.as_str()), Some("fallbacks"));
        assert_eq!(
            header(&http, "anthropic-beta"),
            Some("server-side-fallback-2026-07-01")
        );
    }

    /// A reply from another model says so (`responseModel`); a fallback model of this provider
    /// in `allowedFallbackModels` prices it with its own cost; a fallback block before content is
    /// skipped, after content it fails the reply.
    #[test]
    fn fallback_replies_are_named_priced_and_refused_mid_output() {
        let mut m = anthropic_model("claude-main", false);
        m.compat = json!({"allowedFallbackModels": [
            {"provider": "anthropic", "model": "claude-fb", "cost": {"input": 1000000, "output": 0}},
            {"provider": "elsewhere", "model": "claude-other", "cost": {"input": 5, "output": 5}}]})
        .as_object()
        .cloned();
        let r = request(m, vec![]);
        let start = |model: &str| {
            format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_1\",\"model\":\"{model}\",\"usage\":{{\"input_tokens\":3,\"output_tokens\":1}}}}}}\n\n"
            )
        };
        let fallback = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"fallback\"}}\n\n";
        let text = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
        let events = decode(
            Decoder::new(&r),
            &format!("{}{fallback}{text}", start("claude-fb")),
        );
        assert_eq!(
            events[0],
            StreamEvent::Meta {
                response_id: Some("msg_1".into()),
                response_model: Some("claude-fb".into())
            }
        );
        let StreamEvent::PricedUsage(usage) = &events[1] else {
            panic!("{events:?}");
        };
        assert_eq!(usage.cost.input, 3.0);
        assert_eq!(
            events[2],
            StreamEvent::BlockStart {
                index: 0,
                kind: BlockKind::Text
            }
        );
        // Another provider's entry does not price this one's reply.
        let events = decode(Decoder::new(&r), &start("claude-other"));
        assert!(matches!(events[1], StreamEvent::Usage(_)), "{events:?}");
        let events = decode(
            Decoder::new(&r),
            &format!("{}{text}{fallback}", start("claude-main")),
        );
        assert_eq!(
            events[0],
            StreamEvent::Meta {
                response_id: Some("msg_1".into()),
                response_model: None
            }
        );
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Failed(ProviderError {
                message: "Anthropic performed an unsupported mid-output model fallback".into(),
                retry_after: None
            }))
        );
    }

    #[test]
    fn oauth_tokens_use_claude_code_identity() {
        let mut r = request(
            anthropic_model("claude-sonnet-4-5", false),
            vec![user("hi")],
        );
        r.api_key = "sk-ant-oat01-abc".into();
        r.system_prompt = "SYS".into();
        r.tools = vec![crate::messages::ToolSpec {
            name: "bash".into(),
            description: "d".into(),
            parameters: json!({"type":"object","properties":{}}),
        }];
        let http = build_request_with(&r, CacheRetention::Short);
        assert_eq!(
            header(&http, "authorization"),
            Some("Bearer sk-ant-oat01-abc")
        );
        assert_eq!(header(&http, "x-api-key"), None);
        assert_eq!(
            header(&http, "anthropic-beta"),
            Some("claude-code-20250219,oauth-2025-04-20,message-threads-2026-08-12")
        );
        assert_eq!(http.body["system"][0]["text"], CLAUDE_CODE_IDENTITY);
        assert_eq!(http.body["system"][1]["text"], "SYS");
        assert_eq!(http.body["tools"][0]["name"], "Bash");
        assert_eq!(http.body["max_tokens"], 64000);
        assert!(http.body.get("thinking").is_none());

        let events = decode(
            Decoder::new(&r),
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n\
             event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"x\",\"name\":\"Bash\",\"input\":{}}}\n\n",
        );
        assert!(events.contains(&StreamEvent::BlockStart {
            index: 0,
            kind: BlockKind::ToolCall {
                id: "x".into(),
                name: "bash".into()
            }
        }));
    }

    fn decode(decoder: Decoder, stream: &str) -> Vec<StreamEvent> {
        decode_in_parts(decoder, &[stream.as_bytes()])
    }

    pub(crate) const THINKING_AND_TOOLS: &str = "event: message_start
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\",\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":5,\"cache_read_input_tokens\":20,\"output_tokens\":1}}}

event: ping
data: {\"type\":\"ping\"}

event: content_block_start
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me\"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\"}}

event: content_block_stop
data: {\"type\":\"content_block_stop\",\"index\":0}

event: content_block_start
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"OPAQUE\"}}

event: content_block_stop
data: {\"type\":\"content_block_stop\",\"index\":1}

event: content_block_start
data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"Reading.\"}}

event: content_block_stop
data: {\"type\":\"content_block_stop\",\"index\":2}

event: content_block_start
data: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{}}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\":\"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\" \\\"a.txt\\\"}\"}}

event: content_block_stop
data: {\"type\":\"content_block_stop\",\"index\":3}

event: message_delta
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":42}}

event: message_stop
data: {\"type\":\"message_stop\"}

";

    fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> StreamEvent {
        StreamEvent::Usage(Usage {
            input,
            output,
            cache_read,
            cache_write,
            total_tokens: input + output + cache_read + cache_write,
            // message_start reports the one-hour split, 0 when absent.
            cache_write_1h: Some(0),
            ..Usage::default()
        })
    }

    #[test]
    fn decodes_thinking_redacted_text_and_tool_calls() {
        let r = request(anthropic_model("claude", true), vec![]);
        let events = decode(Decoder::new(&r), THINKING_AND_TOOLS);
        let delta = |index, d: &str| StreamEvent::Delta {
            index,
            delta: d.into(),
        };
        assert_eq!(
            events,
            vec![
                StreamEvent::Meta {
                    response_id: Some("msg_1".into()),
                    response_model: None
                },
                usage(10, 1, 20, 5),
                StreamEvent::BlockStart {
                    index: 0,
                    kind: BlockKind::Thinking { redacted: false }
                },
                delta(0, "Let me"),
                StreamEvent::BlockEnd {
                    index: 0,
                    signature: Some("EqQB".into())
                },
                StreamEvent::BlockStart {
                    index: 1,
                    kind: BlockKind::Thinking { redacted: true }
                },
                StreamEvent::BlockEnd {
                    index: 1,
                    signature: Some("OPAQUE".into())
                },
                StreamEvent::BlockStart {
                    index: 2,
                    kind: BlockKind::Text
                },
                delta(2, "Reading."),
                StreamEvent::BlockEnd {
                    index: 2,
                    signature: None
                },
                StreamEvent::BlockStart {
                    index: 3,
                    kind: BlockKind::ToolCall {
                        id: "toolu_1".into(),
                        name: "read".into()
                    }
                },
                delta(3, "{\"path\":"),
                delta(3, " \"a.txt\"}"),
                StreamEvent::BlockEnd {
                    index: 3,
                    signature: None
                },
                usage(10, 42, 20, 5),
                StreamEvent::Done {
                    stop_reason: StopReason::ToolUse,
                    error_message: None
                },
            ]
        );
    }

    #[test]
    fn every_split_point_decodes_the_same() {
        let r = request(anthropic_model("claude-sonnet-4-5", true), vec![]);
        assert_every_split_decodes_the_same(THINKING_AND_TOOLS, &|| Decoder::new(&r));
    }

    #[test]
    fn errors_and_truncation_use_pi_messages() {
        let r = request(anthropic_model("claude-sonnet-4-5", false), vec![]);
        let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":3,\"output_tokens\":0}}}\n\n";
        let failed = |m: &str| {
            StreamEvent::Failed(ProviderError {
                message: m.into(),
                retry_after: None,
            })
        };

        let events = decode(Decoder::new(&r), start);
        assert_eq!(
            events.last(),
            Some(&failed("Anthropic stream ended before message_stop"))
        );

        let body = format!(
            "{start}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}}\n\n"
        );
        let events = decode(Decoder::new(&r), &body);
        assert_eq!(
            events.last(),
            Some(&failed(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ))
        );

        let body = format!(
            "{start}event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"max_tokens\"}},\"usage\":{{\"output_tokens\":9}}}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        );
        let events = decode(Decoder::new(&r), &body);
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done {
                stop_reason: StopReason::Length,
                error_message: None
            })
        );

        let body = format!(
            "{start}event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"refusal\"}},\"usage\":{{}}}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        );
        let events = decode(Decoder::new(&r), &body);
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done {
                stop_reason: StopReason::Error,
                error_message: Some("The model refused to complete the request".into())
            })
        );
        assert_eq!(
            raw_stop_reasons(Decoder::new(&r), &body),
            ["refusal".to_string()]
        );

        let body = format!(
            "{start}event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"weird\"}},\"usage\":{{}}}}\n\n"
        );
        let events = decode(Decoder::new(&r), &body);
        assert_eq!(events.last(), Some(&failed("Unhandled stop reason: weird")));
    }
}
