//! The `openai-responses` wire API (FACTS §8.3; pi-ai `providers/openai-responses.js` and
//! `openai-responses-shared.js`): the request builder for OpenAI's Responses endpoint (url,
//! headers, JSON body as pi sends it, history converted into Responses input items) and the
//! stream decoder that turns its typed `data:` events into provider-neutral `StreamEvent`s. Both
//! are pure; the HTTP exchange lives in `provider/mod.rs`.
//!
//! Replies keep what the API needs to continue a conversation: a reasoning item travels as the
//! thinking block's signature (the item's JSON, sent back verbatim), a message item's id as the
//! text signature (`{"v":1,"id":…}`), and a tool call's id is `<call_id>|<item_id>`.
//!
//! The decoder ends with `Done` at `response.completed` (or `[DONE]`, or the end of the body), and
//! with `Failed` on an `error` event, a `response.failed` event, an error chunk or an unparsable
//! event.

use crate::js::{js_string, js_truthy};
use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::decode::{Emitter, WireDecoder, token_count};
use super::error_text::{openai_provider_error_message, sdk_error_message};
use super::grammar::{CustomInput, ResolvedGrammar, grammar_tools};
use super::request::{
    CONFIGURATION_UPDATE_REQUEST_EFFORT, api_url, chatgpt_sign_in, context_clamped_max_tokens,
    mapped_effort, provider_thinking_level, strict_parameters, thinking_level, with_extra_headers,
};
use super::sse::SseEvent;
use super::transcript_tools::{InPlaceTools, TranscriptTools, transcript_tools};
use super::transform::{id_chars, transform_messages};
use super::types::{
    BlockKind, CacheRetention, HttpRequest, StreamRequest, cache_retention_from_env,
};
use crate::config::Model;
use crate::messages::{
    AgentMessage, AssistantMessage, ContentBlock, StopReason, ToolSpec, Usage, UserContent,
    has_images, joined_text,
};

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Providers whose tool-call ids keep the `call_id|item_id` pair when replayed.
const COMPOSITE_ID_PROVIDERS: &[&str] = &["openai", "openai-codex", "opencode"];

/// Responses rejects `max_output_tokens` below this (pi 1.6.0 raises a smaller cap to it).
pub(crate) const MIN_OUTPUT_TOKENS: u64 = 16;

/// The request pi would send, with cache retention taken from the environment.
pub fn build_request(request: &StreamRequest) -> HttpRequest {
    build_request_with(request, cache_retention_from_env())
}

/// How the session's affinity headers are written (pi 1.6.0's `compat.sessionAffinityFormat`):
/// `openrouter` (`x-session-id`; detected for OpenRouter), `openai` (`session-id` and
/// `x-client-request-id`; the default) or `openai-nosession` (the latter alone). 0.73.1's
/// `sendSessionIdHeader: false`, which 1.6.0 no longer reads, still means `openai-nosession`.
fn session_affinity_format(model: &crate::config::Model) -> &str {
    if let Some(format) = model.compat_str("sessionAffinityFormat") {
        return format;
    }
    if model.provider == "openrouter" || model.base_url.contains("openrouter.ai") {
        "openrouter"
    } else if model.compat_bool("sendSessionIdHeader") == Some(false) {
        "openai-nosession"
    } else {
        "openai"
    }
}

pub fn build_request_with(request: &StreamRequest, retention: CacheRetention) -> HttpRequest {
    let model = &request.model;
    let affinity = session_affinity_format(model);
    let long_cache = model
        .compat_bool("supportsLongCacheRetention")
        .unwrap_or(true);

    // The SDK's defaults, then the model's headers, then the session headers, then the caller's.
    let defaults: Vec<(String, String)> = vec![
        ("accept".into(), "application/json".into()),
        ("content-type".into(), "application/json".into()),
        (
            "authorization".into(),
            format!("Bearer {}", request.api_key),
        ),
    ];
    let mut headers =
        with_extra_headers(defaults, model, &super::copilot::dynamic_headers(request));
    if !request.session_id.is_empty() {
        if affinity == "openrouter" {
            set_header(&mut headers, "x-session-id", &request.session_id);
        } else {
            if affinity == "openai" {
                set_header(&mut headers, "session-id", &request.session_id);
            }
            set_header(&mut headers, "x-client-request-id", &request.session_id);
        }
    }
    for (name, value) in &request.headers {
        set_header(&mut headers, name, value);
    }

    let tools = transcript_tools(request);
    let mut body = Map::new();
    body.insert("model".into(), json!(model.id));
    body.insert(
        "input".into(),
        Value::Array(convert_input_with(
            request,
            COMPOSITE_ID_PROVIDERS,
            &tools,
            RESPONSES_TOOLS,
        )),
    );
    body.insert("stream".into(), json!(true));
    if !request.session_id.is_empty() {
        body.insert("prompt_cache_key".into(), json!(request.session_id));
    }
    // Sign in with ChatGPT rejects the cache settings and the output cap (pi 1.6.0).
    let omit_unsupported = chatgpt_sign_in(request);
    // `compat.supportsExplicitPromptCacheMode`: long retention is asked for with
    // `prompt_cache_options` (a 30-minute ttl) instead of `prompt_cache_retention`.
    let explicit_cache_mode = model
        .compat_bool("supportsExplicitPromptCacheMode")
        .unwrap_or(false);
    let long = retention == CacheRetention::Long && long_cache && !omit_unsupported;
    if long && !explicit_cache_mode {
        body.insert("prompt_cache_retention".into(), json!("24h"));
    }
    if long && explicit_cache_mode {
        body.insert("prompt_cache_options".into(), json!({"ttl": "30m"}));
    }
    body.insert("store".into(), json!(false));
    // pi does not tell Copilot's reasoning models to stop reasoning.
    let off_says_none = model.provider != "github-copilot";
    // `compat.supportsMaxOutputTokens: false`: gateways that reject the output cap get none.
    let send_output_cap =
        model.compat_bool("supportsMaxOutputTokens").unwrap_or(true) && !omit_unsupported;
    insert_limits_tools_and_reasoning(
        &mut body,
        request,
        &tools.top_level,
        off_says_none,
        RESPONSES_TOOLS,
        send_output_cap,
    );
    super::request::apply_sampling_params(&mut body, request);

    HttpRequest {
        url: api_url(model, DEFAULT_BASE_URL, "/responses"),
        headers,
        body: Value::Object(body),
    }
}

/// Strict tools with `compat.supportsStrictMode`, else the API's default.
pub(crate) fn strict_supported(model: &crate::config::Model, style: ToolStyle) -> bool {
    model
        .compat_bool("supportsStrictMode")
        .unwrap_or(style.strict_by_default)
}

/// How a Responses client writes tool declarations (pi 1.6.0's `ConvertResponsesToolsOptions`),
/// at the top level and in the input alike.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ToolStyle {
    /// Strict mode where the model's compat does not say (`supportsStrictMode`).
    pub strict_by_default: bool,
    /// In strict mode, a tool that is not strict says `strict: null` (Codex) instead of `false`.
    pub null_when_not_strict: bool,
}

pub(crate) const RESPONSES_TOOLS: ToolStyle = ToolStyle {
    strict_by_default: false,
    null_when_not_strict: false,
};

/// The body members both Responses builders (this one and Azure's) end with, in this order: the
/// output cap, the top-level tools, the reasoning settings. With thinking off, a reasoning model
/// is told `none` (its `off` mapping) when `off_says_none`, unless it maps `off` to nothing.
pub(crate) fn insert_limits_tools_and_reasoning(
    body: &mut Map<String, Value>,
    request: &StreamRequest,
    tools: &[ToolSpec],
    off_says_none: bool,
    style: ToolStyle,
    send_output_cap: bool,
) {
    let model = &request.model;
    let max_tokens = context_clamped_max_tokens(request);
    if max_tokens > 0 && send_output_cap {
        body.insert(
            "max_output_tokens".into(),
            json!(max_tokens.max(MIN_OUTPUT_TOKENS)),
        );
    }
    if !tools.is_empty() {
        body.insert("tools".into(), tools_json(request, tools, style, false));
    }
    if !model.reasoning {
        return;
    }
    if let Some(level) = thinking_level(request) {
        let effort = match provider_thinking_level(request) {
            Some(_) => json!(CONFIGURATION_UPDATE_REQUEST_EFFORT),
            None => mapped_effort(model, level, level.as_str()),
        };
        body.insert(
            "reasoning".into(),
            json!({"effort": effort, "summary": "auto"}),
        );
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    } else {
        // Reasoning models think by default: say "none" unless the model has no off level.
        let off = model.thinking_level_map.as_ref().and_then(|m| m.get("off"));
        if off_says_none && !off.is_some_and(Value::is_null) {
            let effort = off.cloned().unwrap_or_else(|| json!("none"));
            body.insert("reasoning".into(), json!({"effort": effort}));
        }
    }
}

/// With strict mode (`compat.supportsStrictMode`, else the style's default), each tool says
/// `strict`: `true` for one that prefers it and converts (its parameters converted), else `false`
/// (or the style's `null`); without, no tool says `strict` (pi 1.6.0's `convertResponsesTools`).
/// A grammar tool (`request::grammar_tools`) is a custom tool with its grammar as the format. A
/// tool search result's tools say `defer_loading: true`.
pub(crate) fn tools_json(
    request: &StreamRequest,
    tools: &[ToolSpec],
    style: ToolStyle,
    search_result: bool,
) -> Value {
    let supported = strict_supported(&request.model, style);
    let not_strict = match style.null_when_not_strict {
        true => Value::Null,
        false => json!(false),
    };
    let grammars = grammar_tools(request);
    let tools = tools.iter().map(|tool| {
        if let Some(grammar) = grammars.get(&tool.name) {
            let mut custom = json!({"type": "custom", "name": tool.name,
                "description": tool.description, "format": {"type": "grammar",
                    "syntax": grammar.syntax, "definition": grammar.definition}});
            if search_result {
                custom["defer_loading"] = json!(true);
            }
            return custom;
        }
        let strict = strict_parameters(request, tool, supported, None);
        let mut function = json!({"type": "function", "name": tool.name,
            "description": tool.description,
            "parameters": strict.as_ref().unwrap_or(&tool.parameters)});
        if search_result {
            function["defer_loading"] = json!(true);
        }
        if supported {
            function["strict"] = match strict {
                Some(_) => json!(true),
                None => not_strict.clone(),
            };
        }
        function
    });
    Value::Array(tools.collect())
}

/// Replaces a header of the same name (case-insensitively) or appends it.
pub(crate) fn set_header(headers: &mut Vec<(String, String)>, name: &str, value: &str) {
    headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(name));
    headers.push((name.to_string(), value.to_string()));
}

/// pi-ai's `shortHash` (two 32-bit multiplicative hashes over UTF-16 code units, base 36).
pub fn short_hash(text: &str) -> String {
    let mut h1: u32 = 0xdead_beef;
    let mut h2: u32 = 0x41c6_ce57;
    for unit in text.encode_utf16() {
        let unit = u32::from(unit);
        h1 = (h1 ^ unit).wrapping_mul(2_654_435_761);
        h2 = (h2 ^ unit).wrapping_mul(1_597_334_677);
    }
    h1 = (h1 ^ (h1 >> 16)).wrapping_mul(2_246_822_507)
        ^ (h2 ^ (h2 >> 13)).wrapping_mul(3_266_489_909);
    h2 = (h2 ^ (h2 >> 16)).wrapping_mul(2_246_822_507)
        ^ (h1 ^ (h1 >> 13)).wrapping_mul(3_266_489_909);
    format!("{}{}", to_base36(h2), to_base36(h1))
}

fn to_base36(mut n: u32) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// Characters outside `[A-Za-z0-9_-]` become `_`, at most 64 are kept, trailing `_` dropped.
fn normalize_id_part(part: &str) -> String {
    id_chars(part, 64).trim_end_matches('_').to_string()
}

/// Tool-call ids written by another model, as pi rewrites them for this one. `source` is the
/// (provider, api) of the message holding the call.
fn normalize_tool_call_id(
    model: &Model,
    composite_providers: &[&str],
    id: &str,
    source: Option<&(String, String)>,
) -> String {
    if !composite_providers.contains(&model.provider.as_str()) || !id.contains('|') {
        return normalize_id_part(id);
    }
    let mut parts = id.split('|');
    let call_id = normalize_id_part(parts.next().unwrap_or(""));
    let item_id = parts.next().unwrap_or("");
    let foreign =
        source.is_none_or(|(provider, api)| *provider != model.provider || *api != model.api);
    let mut item_id = if foreign {
        let hashed = format!("fc_{}", short_hash(item_id));
        hashed.chars().take(64).collect()
    } else {
        normalize_id_part(item_id)
    };
    // The Responses API wants function-call item ids to start with "fc".
    if !item_id.starts_with("fc_") {
        item_id = normalize_id_part(&format!("fc_{item_id}"));
    }
    format!("{call_id}|{item_id}")
}

/// The text signature pi stores: `{"v":1,"id":…}` (legacy: the bare id).
fn parse_text_signature(signature: Option<&str>) -> Option<(String, Option<String>)> {
    let signature = signature.filter(|s| !s.is_empty())?;
    if signature.starts_with('{')
        && let Ok(parsed) = serde_json::from_str::<Value>(signature)
        && parsed["v"] == 1
        && let Some(id) = parsed["id"].as_str()
    {
        let phase = parsed["phase"]
            .as_str()
            .filter(|p| *p == "commentary" || *p == "final_answer")
            .map(str::to_string);
        return Some((id.to_string(), phase));
    }
    Some((signature.to_string(), None))
}

fn data_url(mime_type: &str, data: &str) -> String {
    format!("data:{mime_type};base64,{data}")
}

/// pi-ai's `convertResponsesMessages`: `composite_providers` keep `call_id|item_id` tool-call ids
/// (each client has its own list); the system prompt leads the input; the system messages
/// declare their tools where `tools` puts them in place, written in the client's `style`.
pub(crate) fn convert_input_with(
    request: &StreamRequest,
    composite_providers: &[&str],
    tools: &TranscriptTools,
    style: ToolStyle,
) -> Vec<Value> {
    let model = &request.model;
    // Which message each tool call came from: the id rewrite depends on its provider and API.
    let mut call_sources: HashMap<&str, (String, String)> = HashMap::new();
    for message in &request.messages {
        if let AgentMessage::Assistant(a) = message {
            for call in a.tool_calls() {
                call_sources.insert(call.id.as_str(), (a.provider.clone(), a.api.clone()));
            }
        }
    }
    let transformed = transform_messages(&request.messages, model, &|id| {
        normalize_tool_call_id(model, composite_providers, id, call_sources.get(id))
    });

    // Calls of grammar tools replay as custom tool calls (pi 1.6.0).
    let grammars = grammar_tools(request);
    let mut input = Vec::new();
    let role = if model.reasoning && model.compat_bool("supportsDeveloperRole") != Some(false) {
        "developer"
    } else {
        "system"
    };
    let mut declarations = InPlaceDeclarations {
        request,
        support: tools.support,
        style,
        role,
        additional_tools_sent: false,
        unavailable: Vec::new(),
    };
    if tools.head_in_place() {
        declarations.declare(&mut input, &request.initial_tools, "");
    }
    if !request.system_prompt.is_empty() {
        input.push(json!({"role": role, "content": request.system_prompt}));
    }
    let mut system_index = 0usize;
    let effort_marker = provider_thinking_level(request);
    // Counts converted messages; names text items that carry no id of their own.
    let mut message_index = 0usize;
    for message in &transformed {
        match message {
            AgentMessage::User(user) => {
                let content: Vec<Value> = match &user.content {
                    UserContent::Text(text) => vec![json!({"type": "input_text", "text": text})],
                    UserContent::Blocks(blocks) => blocks
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text(t) => {
                                Some(json!({"type": "input_text", "text": t.text}))
                            }
                            ContentBlock::Image(img) => Some(json!({"type": "input_image",
                                "detail": "auto", "image_url": data_url(&img.mime_type, &img.data)})),
                            _ => None,
                        })
                        .collect(),
                };
                if content.is_empty() {
                    continue;
                }
                input.push(json!({"role": "user", "content": content}));
            }
            AgentMessage::Assistant(assistant) => {
                let items = convert_assistant(assistant, model, message_index, &grammars);
                if items.is_empty() {
                    continue;
                }
                // The effort an earlier reply of this model was given, right before it.
                let same_model = assistant.provider == model.provider
                    && assistant.api == model.api
                    && assistant.model == model.id;
                if let Some(level) = assistant.provider_thinking_level.as_ref()
                    && effort_marker.is_some()
                    && same_model
                {
                    input.push(configuration_update(level));
                }
                input.extend(items);
            }
            AgentMessage::ToolResult(result) => {
                let text = joined_text(&result.content, "\n");
                let has_images = has_images(&result.content);
                let output = if has_images && model.supports_images() {
                    let mut parts = Vec::new();
                    if !text.is_empty() {
                        parts.push(json!({"type": "input_text", "text": text}));
                    }
                    for block in &result.content {
                        if let ContentBlock::Image(img) = block {
                            parts.push(json!({"type": "input_image", "detail": "auto",
                                "image_url": data_url(&img.mime_type, &img.data)}));
                        }
                    }
                    Value::Array(parts)
                } else if text.is_empty() {
                    json!("(see attached image)")
                } else {
                    json!(text)
                };
                let call_id = result.tool_call_id.split('|').next().unwrap_or("");
                let kind = if grammars.contains_key(&result.tool_name) {
                    "custom_tool_call_output"
                } else {
                    "function_call_output"
                };
                input.push(json!({"type": kind, "call_id": call_id, "output": output}));
            }
            // A later system message, where it stands (a model that takes them in place): its
            // tool additions first where they go in place, then its text with the removals.
            AgentMessage::System(system) => {
                let in_place = tools.in_place_at(system_index);
                system_index += 1;
                let added: Vec<ToolSpec> = system.added_tools();
                let mut text = system.update_text();
                if in_place {
                    let seed = format!("system:{message_index}");
                    declarations.declare(&mut input, &added, &seed);
                    let removed: Vec<&str> = system
                        .tools_removed
                        .iter()
                        .flatten()
                        .filter_map(|tool| tool["name"].as_str())
                        // A redefinition is a removal and an addition under one name.
                        .filter(|name| !added.iter().any(|tool| tool.name == *name))
                        .collect();
                    if let Some(notice) = declarations.remove(&removed) {
                        if !text.is_empty() {
                            text.push_str("\n\n");
                        }
                        text.push_str(&notice);
                    }
                }
                if !text.is_empty() {
                    input.push(json!({"role": role, "content": text}));
                }
            }
            _ => continue,
        }
        message_index += 1;
    }
    if let Some(level) = effort_marker {
        input.push(configuration_update(&level));
    }
    input
}

/// What the input declares in place so far (pi 1.6.0, `compat.supportsAdditionalTools` /
/// `supportsToolSearch` with system messages in place).
struct InPlaceDeclarations<'a> {
    request: &'a StreamRequest,
    support: InPlaceTools,
    style: ToolStyle,
    /// The role of instructions (the system prompt's).
    role: &'static str,
    additional_tools_sent: bool,
    /// Tools announced as removed and not declared again since, in the order of their removal.
    unavailable: Vec<String>,
}

impl InPlaceDeclarations<'_> {
    /// Declares `tools` here: an `additional_tools` item (after the first, preceded by a notice
    /// that it adds to the earlier ones), or a client-executed tool search and its result, its
    /// call id hashed from `seed` and the names.
    fn declare(&mut self, input: &mut Vec<Value>, tools: &[ToolSpec], seed: &str) {
        self.unavailable
            .retain(|name| !tools.iter().any(|tool| tool.name == *name));
        if tools.is_empty() {
            return;
        }
        match self.support {
            InPlaceTools::Changes => {
                if self.additional_tools_sent {
                    input.push(json!({"role": self.role,
                        "content": incremental_tools_notice(&self.unavailable)}));
                }
                self.additional_tools_sent = true;
                input.push(json!({"type": "additional_tools", "role": "developer",
                    "tools": tools_json(self.request, tools, self.style, false)}));
            }
            InPlaceTools::Additions => {
                let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
                let call_id = format!(
                    "pi_tool_load_{}",
                    short_hash(&format!("{seed}:{}", names.join(",")))
                );
                input.push(json!({"type": "tool_search_call", "call_id": call_id,
                    "execution": "client", "status": "completed",
                    "arguments": {"query": names.join(" "), "limit": names.len()}}));
                input.push(json!({"type": "tool_search_output", "call_id": call_id,
                    "execution": "client", "status": "completed",
                    "tools": tools_json(self.request, tools, self.style, true)}));
            }
            InPlaceTools::None => {}
        }
    }

    /// Records `names` as removed; the notice that says so, unless there are none. The tools stay
    /// declared: no Responses item can take one back.
    fn remove(&mut self, names: &[&str]) -> Option<String> {
        if names.is_empty() {
            return None;
        }
        for name in names {
            if !self.unavailable.iter().any(|n| n == name) {
                self.unavailable.push(name.to_string());
            }
        }
        let list: Vec<String> = names.iter().map(|name| format!("- {name}")).collect();
        Some(format!(
            "The following tools are no longer available. Do not call them:\n{}",
            list.join("\n")
        ))
    }
}

/// What precedes every `additional_tools` item after the first (pi 1.6.0's wording: without
/// it, models take the latest item for the whole set once a removal was announced).
fn incremental_tools_notice(unavailable: &[String]) -> String {
    let notice = "This is an incremental tools update. Previously declared tools remain \
        available unless explicitly marked unavailable. A tool declared again here is available \
        again, and its latest definition replaces the earlier one.";
    if unavailable.is_empty() {
        notice.to_string()
    } else {
        format!("{notice}\nStill unavailable: {}.", unavailable.join(", "))
    }
}

/// pi 1.6.0's `openai_input_transformations` diagnostic: the reasoning items the server says it
/// removed from the input, except at a turn boundary (models that keep only the current turn's
/// reasoning report every earlier one, every time).
fn reasoning_removals(transformations: &Value) -> Option<Value> {
    let removals: Vec<Value> = transformations
        .as_array()?
        .iter()
        .filter(|t| {
            t["type"] == "reasoning" && t["action"] == "removed" && t["reason"] != "turn_boundary"
        })
        .map(|t| {
            let mut kept = Map::new();
            for key in ["type", "id", "action", "reason"] {
                if let Some(value) = t.get(key) {
                    kept.insert(key.into(), value.clone());
                }
            }
            Value::Object(kept)
        })
        .collect();
    (!removals.is_empty()).then(|| {
        json!({"type": "openai_input_transformations", "timestamp": crate::time::now_ms(),
            "details": {"transformations": removals}})
    })
}

/// A Responses item that sets the effort from here on (pi 1.6.0, `supportsMidConvoEffort`).
fn configuration_update(effort: &str) -> Value {
    json!({"type": "configuration_update", "reasoning": {"effort": effort}})
}

fn convert_assistant(
    assistant: &AssistantMessage,
    model: &Model,
    message_index: usize,
    grammars: &HashMap<String, ResolvedGrammar>,
) -> Vec<Value> {
    // Same provider and API but another model: its function-call item ids were paired with its
    // own reasoning items, which this model will not see.
    let different_model = assistant.model != model.id
        && assistant.provider == model.provider
        && assistant.api == model.api;
    let mut items = Vec::new();
    for block in &assistant.content {
        match block {
            ContentBlock::Thinking(thinking) => {
                let Some(signature) = thinking
                    .thinking_signature
                    .as_deref()
                    .filter(|s| !s.is_empty())
                else {
                    continue;
                };
                match serde_json::from_str::<Value>(signature) {
                    Ok(item) => items.push(item),
                    Err(e) => log::debug!("reasoning item signature is not JSON: {e}"),
                }
            }
            ContentBlock::Text(text) => {
                let parsed = parse_text_signature(text.text_signature.as_deref());
                let (id, phase) = match parsed {
                    Some((id, phase)) if id.encode_utf16().count() > 64 => {
                        (format!("msg_{}", short_hash(&id)), phase)
                    }
                    Some((id, phase)) if !id.is_empty() => (id, phase),
                    Some((_, phase)) => (format!("msg_{message_index}"), phase),
                    None => (format!("msg_{message_index}"), None),
                };
                let mut item = Map::new();
                item.insert("type".into(), json!("message"));
                item.insert("role".into(), json!("assistant"));
                item.insert(
                    "content".into(),
                    json!([{"type": "output_text", "text": text.text, "annotations": []}]),
                );
                item.insert("status".into(), json!("completed"));
                item.insert("id".into(), json!(id));
                if let Some(phase) = phase {
                    item.insert("phase".into(), json!(phase));
                }
                items.push(Value::Object(item));
            }
            ContentBlock::ToolCall(call) => {
                if let Some(item) = custom_tool_call(call, grammars, different_model) {
                    items.push(item);
                    continue;
                }
                let mut parts = call.id.split('|');
                let call_id = parts.next().unwrap_or("");
                let item_id = parts
                    .next()
                    .filter(|item_id| !(different_model && item_id.starts_with("fc_")));
                let mut item = Map::new();
                item.insert("type".into(), json!("function_call"));
                if let Some(item_id) = item_id {
                    item.insert("id".into(), json!(item_id));
                }
                item.insert("call_id".into(), json!(call_id));
                item.insert("name".into(), json!(call.name));
                item.insert(
                    "arguments".into(),
                    json!(serde_json::to_string(&call.arguments).unwrap_or_default()),
                );
                items.push(Value::Object(item));
            }
            ContentBlock::Image(_) => {}
        }
    }
    items
}

/// A grammar tool's call as a `custom_tool_call` item: its raw input, its item id only when it
/// is a custom call's (`ctc_`) from this model. `None` for another tool, or a call whose input
/// is not a string (it replays as a function call; pi 1.6.0 fails the request).
fn custom_tool_call(
    call: &crate::messages::ToolCall,
    grammars: &HashMap<String, ResolvedGrammar>,
    different_model: bool,
) -> Option<Value> {
    let grammar = grammars.get(&call.name)?;
    let Some(input) = call.arguments[&grammar.input_property].as_str() else {
        log::warn!(
            "grammar tool call {} has no string {}",
            call.name,
            grammar.input_property
        );
        return None;
    };
    let mut parts = call.id.split('|');
    let call_id = parts.next().unwrap_or("");
    let item_id = parts
        .next()
        .filter(|id| !different_model && id.starts_with("ctc_"));
    let mut item = Map::new();
    item.insert("type".into(), json!("custom_tool_call"));
    if let Some(item_id) = item_id {
        item.insert("id".into(), json!(item_id));
    }
    item.insert("call_id".into(), json!(call_id));
    item.insert("name".into(), json!(call.name));
    item.insert("input".into(), json!(input));
    Some(Value::Object(item))
}

/// `a || b` on a JSON member: the member when truthy, else `fallback`.
fn truthy_or(value: Option<&Value>, fallback: &str) -> String {
    match value.filter(|v| js_truthy(v)) {
        Some(v) => js_string(Some(v)),
        None => fallback.to_string(),
    }
}

fn map_status(status: Option<&str>) -> Result<StopReason, String> {
    match status {
        None | Some("") => Ok(StopReason::Stop),
        Some("completed") | Some("in_progress") | Some("queued") => Ok(StopReason::Stop),
        Some("incomplete") => Ok(StopReason::Length),
        Some("failed") | Some("cancelled") => Ok(StopReason::Error),
        Some(other) => Err(format!("Unhandled stop reason: {other}")),
    }
}

/// The output item being streamed.
enum Current {
    None,
    Reasoning {
        index: usize,
        /// Summary parts the item has so far (a summary delta needs one).
        summary_parts: usize,
        /// Thinking text sent as deltas.
        emitted: String,
        /// pi appends "\n\n" after each summary part; held back until more text follows, so a
        /// finished block does not end in a separator pi's final text lacks.
        pending: String,
    },
    Message {
        index: usize,
        /// The kind of the item's last content part: `output_text` or `refusal`.
        last_part: Option<String>,
        emitted: String,
    },
    FunctionCall {
        index: usize,
        partial_json: String,
    },
    /// A grammar tool's call: raw input, sent on as the JSON text of `{"<property>": input}`.
    CustomCall {
        index: usize,
        input: CustomInput,
    },
}

/// Responses stream events → `StreamEvent`s.
/// How a client words a failed HTTP response.
enum HttpErrorText {
    /// pi 1.6.0 over the OpenAI SDK, after this prefix (`OpenAI API error`, …).
    Sdk { prefix: String },
    /// A client of its own (ChatGPT Codex).
    Own(fn(u16, &str) -> String),
}

pub struct Decoder {
    current: Current,
    has_tool_call: bool,
    response_id: Option<String>,
    /// A backend pi reads without the OpenAI SDK (ChatGPT Codex) maps each event's data first
    /// (`Ok(None)` skips it, `Err` ends the stream).
    map_event: Option<EventMapping>,
    /// The error text of a failed HTTP response, as the request's client words it.
    http_error_text: HttpErrorText,
    /// Grammar tools' input properties by tool name (a custom call of another tool: `input`).
    grammar_inputs: HashMap<String, String>,
    /// How the client prices the service tier the reply was served at.
    tier_pricing: TierPricing,
}

/// The service-tier price rules of pi 1.6.0's Responses clients: the reply's cost is multiplied
/// by the tier the response names (`flex` half, `priority` twice, two and a half times for
/// `gpt-5.5`; the OpenAI client also takes `fast` as priority). pi's agent asks for no tier, so
/// the response's word alone decides. Azure's client prices no tier.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TierPricing {
    None,
    OpenAi { model_id: String },
    Codex { model_id: String },
}

impl TierPricing {
    fn multiplier(&self, tier: &str) -> f64 {
        let (model_id, fast_is_priority) = match self {
            TierPricing::None => return 1.0,
            TierPricing::OpenAi { model_id } => (model_id, true),
            TierPricing::Codex { model_id } => (model_id, false),
        };
        match tier {
            "flex" => 0.5,
            "priority" => priority_multiplier(model_id),
            "fast" if fast_is_priority => priority_multiplier(model_id),
            _ => 1.0,
        }
    }
}

fn priority_multiplier(model_id: &str) -> f64 {
    if model_id == "gpt-5.5" { 2.5 } else { 2.0 }
}

/// A backend's own reading of an event's data, before the Responses mapping.
pub(crate) type EventMapping = fn(&str) -> Result<Option<Value>, String>;

impl Decoder {
    /// The decoder of OpenAI's Responses stream, read as the OpenAI SDK reads it.
    pub fn new(request: &StreamRequest) -> Decoder {
        Decoder {
            current: Current::None,
            has_tool_call: false,
            response_id: None,
            map_event: None,
            http_error_text: HttpErrorText::Sdk {
                prefix: match (request.model.api.as_str(), request.model.provider.as_str()) {
                    ("azure-openai-responses", _) => "Azure OpenAI API error".to_string(),
                    (_, "openai") => "OpenAI API error".to_string(),
                    (_, provider) => format!("{provider} API error"),
                },
            },
            grammar_inputs: HashMap::new(),
            tier_pricing: match request.model.api.as_str() {
                "openai-responses" => TierPricing::OpenAi {
                    model_id: request.model.id.clone(),
                },
                _ => TierPricing::None,
            },
        }
        .reading_grammar_tools_of(request)
    }

    /// Custom tool calls of `request`'s grammar tools carry their input in the tool's property.
    pub(crate) fn reading_grammar_tools_of(mut self, request: &StreamRequest) -> Decoder {
        self.grammar_inputs = grammar_tools(request)
            .into_iter()
            .map(|(name, grammar)| (name, grammar.input_property))
            .collect();
        self
    }

    /// The decoder of a backend that speaks the Responses stream through its own client.
    pub(crate) fn with_client(
        map_event: EventMapping,
        http_error_message: fn(u16, &str) -> String,
        tier_pricing: TierPricing,
    ) -> Decoder {
        Decoder {
            current: Current::None,
            has_tool_call: false,
            response_id: None,
            map_event: Some(map_event),
            http_error_text: HttpErrorText::Own(http_error_message),
            grammar_inputs: HashMap::new(),
            tier_pricing,
        }
    }

    fn on_event(&mut self, event: &Value, out: &mut Emitter) {
        let kind = event["type"].as_str().unwrap_or("");
        match kind {
            "response.created" => {
                if let Some(id) = event["response"]["id"].as_str() {
                    self.set_response_id(id, out);
                }
            }
            "response.output_item.added" => self.item_added(&event["item"], out),
            "response.reasoning_summary_part.added" => {
                if let Current::Reasoning { summary_parts, .. } = &mut self.current {
                    *summary_parts += 1;
                }
            }
            "response.reasoning_summary_text.delta" => {
                if let Current::Reasoning { summary_parts, .. } = &self.current
                    && *summary_parts > 0
                {
                    self.thinking_delta(js_string(event.get("delta")), out);
                }
            }
            "response.reasoning_summary_part.done" => {
                if let Current::Reasoning {
                    summary_parts,
                    pending,
                    ..
                } = &mut self.current
                    && *summary_parts > 0
                {
                    pending.push_str("\n\n");
                }
            }
            "response.reasoning_text.delta" => {
                if matches!(self.current, Current::Reasoning { .. }) {
                    self.thinking_delta(js_string(event.get("delta")), out);
                }
            }
            "response.content_part.added" => {
                if let Current::Message { last_part, .. } = &mut self.current {
                    let part_type = event["part"]["type"].as_str().unwrap_or("");
                    if part_type == "output_text" || part_type == "refusal" {
                        *last_part = Some(part_type.to_string());
                    }
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let wanted = if kind == "response.output_text.delta" {
                    "output_text"
                } else {
                    "refusal"
                };
                if let Current::Message {
                    index,
                    last_part,
                    emitted,
                } = &mut self.current
                    && last_part.as_deref() == Some(wanted)
                {
                    let delta = js_string(event.get("delta"));
                    emitted.push_str(&delta);
                    out.delta(*index, delta);
                }
            }
            "response.function_call_arguments.delta" => {
                if let Current::FunctionCall {
                    index,
                    partial_json,
                } = &mut self.current
                {
                    let delta = js_string(event.get("delta"));
                    partial_json.push_str(&delta);
                    out.delta(*index, delta);
                }
            }
            "response.function_call_arguments.done" => {
                if let Current::FunctionCall {
                    index,
                    partial_json,
                } = &mut self.current
                {
                    let arguments = event["arguments"].as_str().unwrap_or("");
                    match arguments.strip_prefix(partial_json.as_str()) {
                        Some(rest) if !rest.is_empty() => out.delta(*index, rest.to_string()),
                        Some(_) => {}
                        None => log::debug!("final tool arguments differ from the streamed ones"),
                    }
                    *partial_json = arguments.to_string();
                }
            }
            "response.custom_tool_call_input.delta" => {
                if let Current::CustomCall { index, input } = &mut self.current {
                    let delta = js_string(event.get("delta"));
                    let index = *index;
                    match input.append(&delta) {
                        Ok(piece) => {
                            if let Some(piece) = input.send(piece) {
                                out.delta(index, piece);
                            }
                        }
                        Err(message) => out.fail(message),
                    }
                }
            }
            "response.custom_tool_call_input.done" => {
                if let Current::CustomCall { index, input } = &mut self.current {
                    let index = *index;
                    match input.close(event["input"].as_str()) {
                        Ok(piece) => {
                            if let Some(piece) = input.send(piece) {
                                out.delta(index, piece);
                            }
                        }
                        Err(message) => out.fail(message),
                    }
                }
            }
            "response.output_item.done" => self.item_done(&event["item"], out),
            "response.completed" => self.completed(&event["response"], out),
            "error" => {
                let message = format!(
                    "Error Code {}: {}",
                    js_string(event.get("code")),
                    js_string(event.get("message"))
                );
                out.fail(message);
            }
            "response.failed" => {
                let response = &event["response"];
                if let Some(status) = response["status"].as_str() {
                    out.raw_stop_reason(status);
                }
                let error = response.get("error").filter(|e| js_truthy(e));
                let reason = response
                    .pointer("/incomplete_details/reason")
                    .filter(|r| js_truthy(r));
                let message = match (error, reason) {
                    (Some(error), _) => format!(
                        "{}: {}",
                        truthy_or(error.get("code"), "unknown"),
                        truthy_or(error.get("message"), "no message")
                    ),
                    (None, Some(reason)) => format!("incomplete: {}", js_string(Some(reason))),
                    (None, None) => "Unknown error (no error details in response)".to_string(),
                };
                out.fail(message);
            }
            _ => {}
        }
    }

    fn set_response_id(&mut self, id: &str, out: &mut Emitter) {
        if self.response_id.as_deref() != Some(id) {
            self.response_id = Some(id.to_string());
            out.meta(self.response_id.clone(), None);
        }
    }

    fn item_added(&mut self, item: &Value, out: &mut Emitter) {
        match item["type"].as_str().unwrap_or("") {
            "reasoning" => {
                let index = out.start(BlockKind::Thinking { redacted: false });
                self.current = Current::Reasoning {
                    index,
                    summary_parts: item["summary"].as_array().map_or(0, Vec::len),
                    emitted: String::new(),
                    pending: String::new(),
                };
            }
            "message" => {
                let index = out.start(BlockKind::Text);
                let last_part = item["content"]
                    .as_array()
                    .and_then(|parts| parts.last())
                    .and_then(|part| part["type"].as_str())
                    .filter(|t| *t == "output_text" || *t == "refusal")
                    .map(str::to_string);
                self.current = Current::Message {
                    index,
                    last_part,
                    emitted: String::new(),
                };
            }
            "function_call" => {
                let id = format!(
                    "{}|{}",
                    js_string(item.get("call_id")),
                    js_string(item.get("id"))
                );
                let name = js_string(item.get("name"));
                let index = out.start(BlockKind::ToolCall { id, name });
                self.has_tool_call = true;
                let initial = item["arguments"].as_str().unwrap_or("").to_string();
                if !initial.is_empty() {
                    out.delta(index, initial.clone());
                }
                self.current = Current::FunctionCall {
                    index,
                    partial_json: initial,
                };
            }
            "custom_tool_call" => {
                let id = format!(
                    "{}|{}",
                    js_string(item.get("call_id")),
                    js_string(item.get("id"))
                );
                let name = js_string(item.get("name"));
                let property = self
                    .grammar_inputs
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| "input".to_string());
                let index = out.start(BlockKind::ToolCall { id, name });
                self.has_tool_call = true;
                match CustomInput::new(property, item["input"].as_str().unwrap_or("")) {
                    Ok(input) => self.current = Current::CustomCall { index, input },
                    Err(message) => out.fail(message),
                }
            }
            _ => {}
        }
    }

    /// A thinking delta, preceded by any held-back part separator.
    fn thinking_delta(&mut self, delta: String, out: &mut Emitter) {
        if let Current::Reasoning {
            index,
            emitted,
            pending,
            ..
        } = &mut self.current
        {
            if !pending.is_empty() {
                let separator = std::mem::take(pending);
                emitted.push_str(&separator);
                out.delta(*index, separator);
            }
            emitted.push_str(&delta);
            out.delta(*index, delta);
        }
    }

    fn item_done(&mut self, item: &Value, out: &mut Emitter) {
        let item_type = item["type"].as_str().unwrap_or("");
        match std::mem::replace(&mut self.current, Current::None) {
            Current::Reasoning {
                index,
                emitted,
                pending,
                ..
            } if item_type == "reasoning" => {
                // pi's final text: the summary parts, else the reasoning content, else the deltas.
                let joined = |key: &str| -> String {
                    item[key]
                        .as_array()
                        .map(|parts| {
                            parts
                                .iter()
                                .map(|p| js_string(p.get("text")))
                                .collect::<Vec<_>>()
                                .join("\n\n")
                        })
                        .unwrap_or_default()
                };
                let summary = joined("summary");
                let content = joined("content");
                let final_text = if !summary.is_empty() {
                    summary
                } else if !content.is_empty() {
                    content
                } else {
                    format!("{emitted}{pending}")
                };
                emit_remainder(index, &emitted, &final_text, out);
                out.end(index, Some(item.to_string()));
            }
            Current::Message { index, emitted, .. } if item_type == "message" => {
                let final_text: String = item["content"]
                    .as_array()
                    .map(|parts| {
                        parts
                            .iter()
                            .map(|p| {
                                if p["type"] == "output_text" {
                                    js_string(p.get("text"))
                                } else {
                                    js_string(p.get("refusal"))
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                emit_remainder(index, &emitted, &final_text, out);
                let mut signature = Map::new();
                signature.insert("v".into(), json!(1));
                if let Some(id) = item.get("id").filter(|v| !v.is_null()) {
                    signature.insert("id".into(), id.clone());
                }
                if let Some(phase) = item.get("phase").filter(|p| js_truthy(p)) {
                    signature.insert("phase".into(), phase.clone());
                }
                out.end(index, Some(Value::Object(signature).to_string()));
            }
            Current::FunctionCall {
                index,
                partial_json,
            } if item_type == "function_call" => {
                // Arguments that never streamed come with the finished item.
                if partial_json.is_empty()
                    && let Some(arguments) = item["arguments"].as_str().filter(|a| !a.is_empty())
                {
                    out.delta(index, arguments.to_string());
                }
                out.end(index, None);
            }
            Current::CustomCall { index, mut input } if item_type == "custom_tool_call" => {
                match input.close(item["input"].as_str()) {
                    Ok(piece) => {
                        if let Some(piece) = input.send(piece) {
                            out.delta(index, piece);
                        }
                        out.end(index, None);
                    }
                    Err(message) => out.fail(message),
                }
            }
            other => {
                // An item finishing that is not the one streaming: nothing to close. pi forgets
                // the streaming block when a function call finishes, whatever was streaming.
                if item_type != "function_call" {
                    self.current = other;
                }
            }
        }
    }

    fn completed(&mut self, response: &Value, out: &mut Emitter) {
        if let Some(diagnostic) = reasoning_removals(&response["input_transformations"]) {
            out.diagnostic(diagnostic);
        }
        if let Some(id) = response["id"].as_str().filter(|id| !id.is_empty()) {
            self.set_response_id(id, out);
        }
        // ChatGPT Codex says whether the model ended its turn (pi 1.6.0 keeps it as `endTurn`).
        if self.map_event.is_some()
            && let Some(end_turn) = response["end_turn"].as_bool()
        {
            out.end_turn(end_turn);
        }
        if let Some(usage) = response.get("usage").filter(|u| js_truthy(u)) {
            let details = &usage["input_tokens_details"];
            let cached = token_count(&details["cached_tokens"]);
            // The input counts cached and cache-written tokens too (pi 1.6.0 takes both off).
            let cache_write = token_count(&details["cache_write_tokens"]);
            out.usage(Usage {
                input: token_count(&usage["input_tokens"])
                    .saturating_sub(cached)
                    .saturating_sub(cache_write),
                output: token_count(&usage["output_tokens"]),
                cache_read: cached,
                cache_write,
                reasoning: Some(token_count(
                    &usage["output_tokens_details"]["reasoning_tokens"],
                )),
                total_tokens: token_count(&usage["total_tokens"]),
                ..Usage::default()
            });
        }
        let multiplier = self
            .tier_pricing
            .multiplier(response["service_tier"].as_str().unwrap_or(""));
        if multiplier != 1.0 {
            out.cost_multiplier(multiplier);
        }
        // The status, with the reason of an incomplete response after a dot (pi 1.6.0).
        let status = response["status"].as_str();
        match (status, response["incomplete_details"]["reason"].as_str()) {
            (_, Some(reason)) => {
                out.raw_stop_reason(format!("{}.{reason}", status.unwrap_or("undefined")))
            }
            (Some(status), None) => out.raw_stop_reason(status),
            (None, None) => {}
        }
        match map_status(status) {
            Ok(StopReason::Stop) if self.has_tool_call => out.done(StopReason::ToolUse),
            Ok(stop) => out.done(stop),
            Err(message) => out.fail(message),
        }
    }
}

impl WireDecoder for Decoder {
    fn on_sse(&mut self, sse: &SseEvent, out: &mut Emitter) {
        if sse.data.starts_with("[DONE]") {
            out.done(StopReason::Stop);
            return;
        }
        if let Some(map_event) = self.map_event {
            match map_event(&sse.data) {
                Ok(Some(event)) => self.on_event(&event, out),
                Ok(None) => {}
                Err(message) => out.fail(message),
            }
            return;
        }
        let Some(event) = out.parse_json(&sse.data, "stream event") else {
            return;
        };
        // The SDK turns any event carrying `error` into an APIError without a status.
        if let Some(error) = event.get("error").filter(|e| js_truthy(e)) {
            out.fail(sdk_error_message(None, Some(error), None));
            return;
        }
        self.on_event(&event, out);
    }

    /// End of body without `response.completed`: pi keeps the reply as it stands.
    fn on_eof(&mut self, out: &mut Emitter) {
        out.done(StopReason::Stop);
    }

    fn http_error_message(&self, status: u16, body: &str) -> String {
        match &self.http_error_text {
            HttpErrorText::Sdk { prefix } => {
                openai_provider_error_message(status, body, Some(prefix))
            }
            HttpErrorText::Own(message) => message(status, body),
        }
    }
}

/// Sends what the finished item adds to the streamed text. Text that disagrees with what was
/// streamed cannot be taken back; the streamed text stands.
fn emit_remainder(index: usize, emitted: &str, final_text: &str, out: &mut Emitter) {
    match final_text.strip_prefix(emitted) {
        Some(rest) if !rest.is_empty() => out.delta(index, rest.to_string()),
        Some(_) => {}
        None => log::debug!("final item text differs from the streamed deltas"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::{assert_every_split_decodes_the_same, decode_in_parts};
    use super::super::test_support::{header, model, request, user};
    use super::super::types::{ProviderError, StreamEvent};
    use super::*;
    use crate::config::ThinkingLevel;
    use crate::messages::ToolSpec;

    fn responses_model(provider: &str, id: &str) -> Model {
        let mut m = model("openai-responses", provider, id);
        m.base_url = "http://127.0.0.1:9/v1".into();
        m.reasoning = true;
        m.input = vec!["text".into(), "image".into()];
        m.max_tokens = 128000;
        m
    }

    #[test]
    fn body_matches_the_recorded_reference_shape() {
        let mut r = request(
            responses_model("fake-responses", "fake-gpt-5"),
            vec![user("Say hello")],
        );
        r.system_prompt = "SYS".into();
        r.thinking = ThinkingLevel::Medium;
        r.tools = vec![ToolSpec {
            name: "bash".into(),
            description: "Run".into(),
            parameters: json!({"type":"object","required":["command"],"properties":{"command":{"type":"string"}}}),
        }];
        let http = build_request_with(&r, CacheRetention::Short);
        assert_eq!(http.url, "http://127.0.0.1:9/v1/responses");
        assert_eq!(header(&http, "authorization"), Some("Bearer KEY"));
        assert_eq!(header(&http, "session-id"), Some("session-1"));
        assert_eq!(header(&http, "x-client-request-id"), Some("session-1"));
        // Recorded from the reference (system prompt and tools shortened); pi 1.6.0 leaves
        // `strict` out unless the model's compat says `supportsStrictMode`.
        let expected = r#"{"model":"fake-gpt-5","input":[{"role":"developer","content":"SYS"},{"role":"user","content":[{"type":"input_text","text":"Say hello"}]}],"stream":true,"prompt_cache_key":"session-1","store":false,"max_output_tokens":128000,"tools":[{"type":"function","name":"bash","description":"Run","parameters":{"type":"object","required":["command"],"properties":{"command":{"type":"string"}}}}],"reasoning":{"effort":"medium","summary":"auto"},"include":["reasoning.encrypted_content"]}"#;
        assert_eq!(serde_json::to_string(&http.body).unwrap(), expected);

        // With strict mode, a tool that prefers it is strict with its schema converted (every
        // property required, an optional one nullable); the others say `strict: false`.
        r.model.compat = Some(
            json!({"supportsStrictMode": true})
                .as_object()
                .unwrap()
                .clone(),
        );
        r.strict_preferred = vec!["bash".into()];
        r.tools[0].parameters = json!({"type": "object", "required": ["command"],
            "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}}});
        r.tools.push(ToolSpec {
            name: "other".into(),
            description: "Other".into(),
            parameters: json!({"type": "object"}),
        });
        let tools = build_request_with(&r, CacheRetention::Short).body["tools"].clone();
        assert_eq!(
            tools[0],
            json!({"type": "function", "name": "bash", "description": "Run",
                "parameters": {"type": "object", "required": ["command", "timeout"],
                    "properties": {"command": {"type": "string"},
                        "timeout": {"anyOf": [{"type": "number"}, {"type": "null"}]}},
                    "additionalProperties": false},
                "strict": true})
        );
        assert_eq!(tools[1]["strict"], false);
        assert_eq!(tools[1]["parameters"], json!({"type": "object"}));

        let long = build_request_with(&r, CacheRetention::Long).body;
        assert_eq!(long["prompt_cache_retention"], "24h");
    }

    #[test]
    fn thinking_off_and_compat_switches() {
        let mut r = request(responses_model("openai", "gpt-5"), vec![user("x")]);
        r.thinking = ThinkingLevel::Off;
        let http = build_request_with(&r, CacheRetention::Short);
        assert_eq!(http.body["reasoning"], json!({"effort": "none"}));
        assert!(http.body.get("include").is_none());
        assert_eq!(http.body["input"][0]["role"], "user");

        // A model without an "off" level keeps its default reasoning.
        r.model.thinking_level_map = json!({"off": null, "high": "xhigh"}).as_object().cloned();
        assert!(
            build_request_with(&r, CacheRetention::Short)
                .body
                .get("reasoning")
                .is_none()
        );
        r.thinking = ThinkingLevel::High;
        assert_eq!(
            build_request_with(&r, CacheRetention::Short).body["reasoning"]["effort"],
            "xhigh"
        );

        // Non-reasoning models: system role, no reasoning; no session id: no session headers.
        let mut r = request(model("openai-responses", "openai", "gpt-4.1"), vec![]);
        r.system_prompt = "S".into();
        r.session_id = String::new();
        r.model.compat = json!({"sendSessionIdHeader": false}).as_object().cloned();
        let http = build_request_with(&r, CacheRetention::Short);
        assert_eq!(http.body["input"][0]["role"], "system");
        assert!(http.body.get("reasoning").is_none());
        assert!(http.body.get("prompt_cache_key").is_none());
        assert_eq!(header(&http, "session-id"), None);
        assert_eq!(header(&http, "x-client-request-id"), None);
        assert_eq!(http.url, "https://api.openai.com/v1/responses");
        // The session's headers by `sessionAffinityFormat` (pi 1.6.0), 0.73.1's
        // `sendSessionIdHeader: false` read as `openai-nosession`.
        r.session_id = "s-1".into();
        let headers = |r: &StreamRequest| -> Vec<String> {
            let http = build_request_with(r, CacheRetention::Short);
            ["session-id", "x-client-request-id", "x-session-id"]
                .into_iter()
                .filter(|name| header(&http, name).is_some())
                .map(str::to_string)
                .collect()
        };
        assert_eq!(headers(&r), ["x-client-request-id"]);
        r.model.compat = None;
        assert_eq!(headers(&r), ["session-id", "x-client-request-id"]);
        r.model.compat = json!({"sessionAffinityFormat": "openrouter"})
            .as_object()
            .cloned();
        assert_eq!(headers(&r), ["x-session-id"]);
    }

    /// `supportsExplicitPromptCacheMode` asks for long retention with `prompt_cache_options`,
    /// `supportsMaxOutputTokens: false` drops the output cap, and Sign in with ChatGPT (the
    /// `openai` provider on OpenAI's own API without an `sk-` key) gets neither those nor
    /// `prompt_cache_retention` (pi 1.6.0).
    #[test]
    fn cache_mode_output_cap_and_chatgpt_sign_in() {
        let mut r = request(responses_model("proxy", "gpt-5"), vec![user("x")]);
        r.model.compat = json!({"supportsExplicitPromptCacheMode": true})
            .as_object()
            .cloned();
        let long = build_request_with(&r, CacheRetention::Long).body;
        assert_eq!(long["prompt_cache_options"], json!({"ttl": "30m"}));
        assert!(long.get("prompt_cache_retention").is_none());
        let short = build_request_with(&r, CacheRetention::Short).body;
        assert!(short.get("prompt_cache_options").is_none());
        r.model.compat = json!({"supportsExplicitPromptCacheMode": true,
            "supportsLongCacheRetention": false})
        .as_object()
        .cloned();
        let long = build_request_with(&r, CacheRetention::Long).body;
        assert!(long.get("prompt_cache_options").is_none());

        r.model.compat = json!({"supportsMaxOutputTokens": false})
            .as_object()
            .cloned();
        let body = build_request_with(&r, CacheRetention::Short).body;
        assert!(body.get("max_output_tokens").is_none());
        r.model.compat = None;
        r.max_tokens = Some(3);
        let body = build_request_with(&r, CacheRetention::Short).body;
        assert_eq!(body["max_output_tokens"], 16);

        let mut r = request(responses_model("openai", "gpt-5"), vec![user("x")]);
        r.model.base_url = "https://api.openai.com/v1".into();
        r.api_key = "eyJ-chatgpt-token".into();
        let body = build_request_with(&r, CacheRetention::Long).body;
        assert!(body.get("prompt_cache_retention").is_none());
        assert!(body.get("max_output_tokens").is_none());
        r.api_key = "sk-key".into();
        let body = build_request_with(&r, CacheRetention::Long).body;
        assert_eq!(body["prompt_cache_retention"], "24h");
        assert_eq!(body["max_output_tokens"], 128000);
    }

    #[test]
    fn short_hash_matches_pi() {
        // Values computed with pi-ai's shortHash.
        assert_eq!(short_hash(""), "k4n83c7h0j2b");
        assert_eq!(short_hash("fc_abc"), "1qaoofs1vxahbg");
        assert_eq!(short_hash("item-é😀"), "h8a3ky27gwui");
        assert_eq!(short_hash("toolu_01ABCdef"), "11th46g8nu9yr");
    }

    /// A history mixing this model, another provider, another Responses provider and an older
    /// model of the same provider; the expected input is pi-ai's convertResponsesMessages output.
    const HISTORY: &str = r#"[
 {"role":"user","content":[{"type":"text","text":"go"},{"type":"image","data":"AAAA","mimeType":"image/png"}],"timestamp":1},
 {"role":"assistant","content":[
   {"type":"thinking","thinking":"plan","thinkingSignature":"{\"id\":\"rs_1\",\"type\":\"reasoning\",\"encrypted_content\":\"ENC\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"plan\"}]}"},
   {"type":"text","text":"Looking.","textSignature":"{\"v\":1,\"id\":\"msg_1\",\"phase\":\"commentary\"}"},
   {"type":"toolCall","id":"call_1|fc_1","name":"bash","arguments":{"command":"ls"}}],
  "api":"openai-responses","provider":"openai","model":"gpt-5","usage":{},"stopReason":"toolUse","timestamp":2},
 {"role":"toolResult","toolCallId":"call_1|fc_1","toolName":"bash","content":[{"type":"text","text":"out"}],"isError":false,"timestamp":3},
 {"role":"assistant","content":[
   {"type":"thinking","thinking":"deep","thinkingSignature":"SIG"},
   {"type":"text","text":"Using tools."},
   {"type":"toolCall","id":"toolu_01ABCdef","name":"read","arguments":{"path":"a.png"}}],
  "api":"anthropic-messages","provider":"anthropic","model":"claude","usage":{},"stopReason":"toolUse","timestamp":4},
 {"role":"toolResult","toolCallId":"toolu_01ABCdef","toolName":"read","content":[{"type":"text","text":"an image"},{"type":"image","data":"BBBB","mimeType":"image/jpeg"}],"isError":false,"timestamp":5},
 {"role":"assistant","content":[
   {"type":"toolCall","id":"call_9|item.9","name":"bash","arguments":{"command":"pwd"}}],
  "api":"openai-responses","provider":"azure","model":"gpt-x","usage":{},"stopReason":"toolUse","timestamp":6},
 {"role":"toolResult","toolCallId":"call_9|item.9","toolName":"bash","content":[{"type":"image","data":"CCCC","mimeType":"image/png"}],"isError":true,"timestamp":7},
 {"role":"assistant","content":[
   {"type":"text","text":"Older model."},
   {"type":"toolCall","id":"call_7|fc_7","name":"bash","arguments":{}}],
  "api":"openai-responses","provider":"openai","model":"gpt-4.1","usage":{},"stopReason":"toolUse","timestamp":8},
 {"role":"user","content":"next","timestamp":9}
]"#;

    const HISTORY_INPUT: &str = r#"[{"role":"developer","content":"SYS"},{"role":"user","content":[{"type":"input_text","text":"go"},{"type":"input_image","detail":"auto","image_url":"data:image/png;base64,AAAA"}]},{"id":"rs_1","type":"reasoning","encrypted_content":"ENC","summary":[{"type":"summary_text","text":"plan"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Looking.","annotations":[]}],"status":"completed","id":"msg_1","phase":"commentary"},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"bash","arguments":"{\"command\":\"ls\"}"},{"type":"function_call_output","call_id":"call_1","output":"out"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"deep","annotations":[]}],"status":"completed","id":"msg_3"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Using tools.","annotations":[]}],"status":"completed","id":"msg_3"},{"type":"function_call","call_id":"toolu_01ABCdef","name":"read","arguments":"{\"path\":\"a.png\"}"},{"type":"function_call_output","call_id":"toolu_01ABCdef","output":[{"type":"input_text","text":"an image"},{"type":"input_image","detail":"auto","image_url":"data:image/jpeg;base64,BBBB"}]},{"type":"function_call","id":"fc_7plq8oa3h9n","call_id":"call_9","name":"bash","arguments":"{\"command\":\"pwd\"}"},{"type":"function_call_output","call_id":"call_9","output":[{"type":"input_image","detail":"auto","image_url":"data:image/png;base64,CCCC"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Older model.","annotations":[]}],"status":"completed","id":"msg_7"},{"type":"function_call","call_id":"call_7","name":"bash","arguments":"{}"},{"type":"function_call_output","call_id":"call_7","output":"No result provided"},{"role":"user","content":[{"type":"input_text","text":"next"}]}]"#;

    #[test]
    fn history_converts_like_pi() {
        let messages: Vec<AgentMessage> = serde_json::from_str(HISTORY).unwrap();
        let mut r = request(responses_model("openai", "gpt-5"), messages);
        r.system_prompt = "SYS".into();
        let body = build_request_with(&r, CacheRetention::Short).body;
        assert_eq!(
            serde_json::to_string(&body["input"]).unwrap(),
            HISTORY_INPUT
        );
    }

    fn decode(stream: &str) -> Vec<StreamEvent> {
        let r = request(responses_model("openai", "gpt-5"), vec![]);
        decode_in_parts(Decoder::new(&r), &[stream.as_bytes()])
    }

    fn delta(index: usize, text: &str) -> StreamEvent {
        StreamEvent::Delta {
            index,
            delta: text.into(),
        }
    }

    fn meta(id: &str) -> StreamEvent {
        StreamEvent::Meta {
            response_id: Some(id.into()),
            response_model: None,
        }
    }

    const TEXT: &str = include_str!("../../fixtures/openai-responses/text.sse");
    const TOOL_PARALLEL: &str = include_str!("../../fixtures/openai-responses/tool_parallel.sse");

    /// A custom tool call (a grammar tool's raw input) decodes to the JSON arguments text of its
    /// input property, its first piece sent with the next as pi 1.6.0 does; `toolUse` follows.
    #[test]
    fn decodes_a_custom_tool_call_into_its_input_property() {
        const STREAM: &str = concat!(
            "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"ctc_1\",\"type\":\"custom_tool_call\",\"call_id\":\"call_1\",\"name\":\"codemode\",\"input\":\"text(\"}}\n\n",
            "data: {\"type\":\"response.custom_tool_call_input.delta\",\"output_index\":0,\"delta\":\"\\\"hi\\\"\"}\n\n",
            "data: {\"type\":\"response.custom_tool_call_input.done\",\"output_index\":0,\"input\":\"text(\\\"hi\\\");\"}\n\n",
            "data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"ctc_1\",\"type\":\"custom_tool_call\",\"call_id\":\"call_1\",\"name\":\"codemode\",\"input\":\"text(\\\"hi\\\");\"}}\n\n",
            "data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n",
        );
        let mut r = request(responses_model("openai", "gpt-5"), vec![]);
        r.model.compat = json!({"supportsOpenAIGrammarTools": true})
            .as_object()
            .cloned();
        r.grammar_tools = vec![super::super::types::GrammarTool {
            name: "codemode".into(),
            lark: Some("start: SOURCE".into()),
            regex: None,
            parameters: json!({"type": "object", "required": ["code"],
                "properties": {"code": {"type": "string"}}}),
        }];
        let events = decode_in_parts(Decoder::new(&r), &[STREAM.as_bytes()]);
        assert_eq!(
            events,
            vec![
                StreamEvent::BlockStart {
                    index: 0,
                    kind: BlockKind::ToolCall {
                        id: "call_1|ctc_1".into(),
                        name: "codemode".into()
                    }
                },
                delta(0, r#"{"code":"text(\"hi\""#),
                delta(0, r#");"}"#),
                StreamEvent::BlockEnd {
                    index: 0,
                    signature: None
                },
                StreamEvent::Done {
                    stop_reason: StopReason::ToolUse,
                    error_message: None
                },
            ]
        );
        assert_every_split_decodes_the_same(STREAM, &|| Decoder::new(&r));
    }

    #[test]
    fn decodes_reasoning_summary_and_text() {
        let events = decode(TEXT);
        let reasoning_item = r#"{"id":"rs_0a1b2c3d4e5f60718293a4b5c6d7e8f9aa","type":"reasoning","encrypted_content":"gAAAAABpVGVzdEVuY3J5cHRlZFJlYXNvbmluZ0Jsb2JPbmU=","summary":[{"type":"summary_text","text":"**Greeting the user**\n\nThe user wants a short hello."},{"type":"summary_text","text":"Keep it brief."}]}"#;
        assert_eq!(
            events,
            vec![
                meta("resp_0a1b2c3d4e5f60718293a4b5c6d7e8f9"),
                StreamEvent::BlockStart {
                    index: 0,
                    kind: BlockKind::Thinking { redacted: false }
                },
                delta(0, "**Greeting the user**"),
                delta(0, "\n\nThe user wants a short hello."),
                // The part separator goes out only when the next part has text.
                delta(0, "\n\n"),
                delta(0, "Keep it brief."),
                StreamEvent::BlockEnd {
                    index: 0,
                    signature: Some(reasoning_item.into())
                },
                StreamEvent::BlockStart {
                    index: 1,
                    kind: BlockKind::Text
                },
                delta(1, "Hello"),
                delta(1, " from the fake"),
                delta(1, " responses API."),
                StreamEvent::BlockEnd {
                    index: 1,
                    signature: Some(
                        r#"{"v":1,"id":"msg_0a1b2c3d4e5f60718293a4b5c6d7e8f9bb"}"#.into()
                    )
                },
                StreamEvent::Usage(Usage {
                    input: 819,
                    output: 85,
                    cache_read: 1024,
                    cache_write: 0,
                    reasoning: Some(64),
                    total_tokens: 1928,
                    ..Usage::default()
                }),
                StreamEvent::Done {
                    stop_reason: StopReason::Stop,
                    error_message: None
                },
            ]
        );
    }

    #[test]
    fn decodes_parallel_tool_calls_with_composite_ids() {
        let tool = |index, id: &str, name: &str| StreamEvent::BlockStart {
            index,
            kind: BlockKind::ToolCall {
                id: id.into(),
                name: name.into(),
            },
        };
        let end = |index| StreamEvent::BlockEnd {
            index,
            signature: None,
        };
        let events = decode(TOOL_PARALLEL);
        assert_eq!(
            events,
            vec![
                meta("resp_2c3d4e5f60718293a4b5c6d7e8f90a1b"),
                StreamEvent::BlockStart {
                    index: 0,
                    kind: BlockKind::Text
                },
                delta(0, "Checking both."),
                StreamEvent::BlockEnd {
                    index: 0,
                    signature: Some(
                        r#"{"v":1,"id":"msg_2c3d4e5f60718293a4b5c6d7e8f90a1bee","phase":"commentary"}"#
                            .into()
                    )
                },
                tool(1, "call_AAAA1111|fc_2c3d4e5f60718293a4b5c6d7e8f90a1b01", "bash"),
                delta(1, "{\"command\":\"ls\"}"),
                end(1),
                tool(2, "call_BBBB2222|fc_2c3d4e5f60718293a4b5c6d7e8f90a1b02", "read"),
                delta(2, "{\"path\":\"READ"),
                // The finished arguments extend what streamed: the rest follows as a delta.
                delta(2, "ME.md\"}"),
                end(2),
                StreamEvent::Usage(Usage {
                    input: 952,
                    output: 60,
                    cache_read: 2048,
                    cache_write: 0,
                    reasoning: Some(0),
                    total_tokens: 3060,
                    ..Usage::default()
                }),
                StreamEvent::Done {
                    stop_reason: StopReason::ToolUse,
                    error_message: None
                },
            ]
        );
    }

    #[test]
    fn every_split_point_decodes_the_same() {
        for stream in [TEXT, TOOL_PARALLEL] {
            let r = request(responses_model("openai", "gpt-5"), vec![]);
            assert_every_split_decodes_the_same(stream, &|| Decoder::new(&r));
        }
    }

    fn last_failure(events: &[StreamEvent]) -> String {
        match events.last() {
            Some(StreamEvent::Failed(e)) => e.message.clone(),
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn error_forms_use_pi_texts() {
        let events = decode(include_str!(
            "../../fixtures/openai-responses/error_event.sse"
        ));
        assert_eq!(
            last_failure(&events),
            "Error Code server_error: The server had an error while processing your request. Sorry about that!"
        );
        let events = decode(include_str!("../../fixtures/openai-responses/failed.sse"));
        assert_eq!(
            last_failure(&events),
            "rate_limit_exceeded: Rate limit reached for requests"
        );
        let failed = |response: &str| {
            decode(&format!(
                "data: {{\"type\":\"response.failed\",\"response\":{response}}}\n\n"
            ))
        };
        assert_eq!(
            last_failure(&failed(r#"{"error":{"message":"boom"}}"#)),
            "unknown: boom"
        );
        assert_eq!(
            last_failure(&failed(
                r#"{"error":null,"incomplete_details":{"reason":"max_output_tokens"}}"#
            )),
            "incomplete: max_output_tokens"
        );
        assert_eq!(
            last_failure(&failed(r#"{"status":"failed"}"#)),
            "Unknown error (no error details in response)"
        );
        assert_eq!(
            last_failure(&decode(
                "event: error\ndata: {\"type\":\"error\",\"message\":\"m\"}\n\n"
            )),
            "Error Code undefined: m"
        );
        // A chunk with a top-level `error` is an SDK APIError.
        assert_eq!(
            last_failure(&decode("data: {\"error\":{\"message\":\"quota\"}}\n\n")),
            "quota"
        );
        assert!(last_failure(&decode("data: {oops\n\n")).starts_with("Could not parse"));
        // HTTP errors: pi 1.6.0's text, the status and the body's error object.
        assert_eq!(
            openai_provider_error_message(
                400,
                include_str!("../../fixtures/openai-responses/error_400.json"),
                Some("OpenAI API error")
            ),
            r#"OpenAI API error (400): {"message":"Invalid value: 'xhigh'. Supported values are: 'low', 'medium', and 'high'.","type":"invalid_request_error","param":"reasoning.effort","code":"unsupported_value"}"#
        );
    }

    #[test]
    fn statuses_map_to_stop_reasons() {
        let completed = |status: &str| {
            decode(&format!(
                "data: {{\"type\":\"response.completed\",\"response\":{{\"id\":\"r\",\"status\":\"{status}\"}}}}\n\n"
            ))
            .pop()
        };
        let done = |stop_reason, error_message: Option<&str>| {
            Some(StreamEvent::Done {
                stop_reason,
                error_message: error_message.map(str::to_string),
            })
        };
        assert_eq!(completed("completed"), done(StopReason::Stop, None));
        assert_eq!(completed("incomplete"), done(StopReason::Length, None));
        assert_eq!(completed("queued"), done(StopReason::Stop, None));
        assert_eq!(
            completed("cancelled"),
            done(StopReason::Error, Some("An unknown error occurred"))
        );
        assert_eq!(
            completed("weird"),
            Some(StreamEvent::Failed(ProviderError {
                message: "Unhandled stop reason: weird".into(),
                retry_after: None
            }))
        );
        // A body that ends without response.completed keeps what came, as a normal stop.
        let events = decode(
            "data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"message\",\"id\":\"m\",\"content\":[]}}\n\n",
        );
        assert_eq!(events.last().cloned(), done(StopReason::Stop, None));
    }

    /// pi 1.6.0's tier prices: the response's `service_tier` scales the cost after the model's
    /// rates; cache-written tokens come off the input and are counted as cache writes.
    #[test]
    fn service_tiers_scale_the_cost_and_cache_writes_are_counted() {
        let completed = |tier: &str| {
            decode(&format!(
                "data: {{\"type\":\"response.completed\",\"response\":{{\"id\":\"r\",\"status\":\"completed\",\"service_tier\":\"{tier}\",\"usage\":{{\"input_tokens\":100,\"input_tokens_details\":{{\"cached_tokens\":20,\"cache_write_tokens\":30}},\"output_tokens\":5,\"total_tokens\":105}}}}}}\n\n"
            ))
        };
        let multiplier = |events: &[StreamEvent]| {
            events.iter().find_map(|e| match e {
                StreamEvent::CostMultiplier(m) => Some(*m),
                _ => None,
            })
        };
        assert_eq!(multiplier(&completed("flex")), Some(0.5));
        assert_eq!(multiplier(&completed("priority")), Some(2.0));
        assert_eq!(multiplier(&completed("fast")), Some(2.0));
        assert_eq!(multiplier(&completed("default")), None);
        assert_eq!(multiplier(&completed("auto")), None);
        let usage = completed("flex")
            .into_iter()
            .find_map(|e| match e {
                StreamEvent::Usage(u) => Some(u),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            (usage.input, usage.cache_read, usage.cache_write),
            (50, 20, 30)
        );

        let openai = |id: &str| TierPricing::OpenAi {
            model_id: id.into(),
        };
        let codex = |id: &str| TierPricing::Codex {
            model_id: id.into(),
        };
        assert_eq!(openai("gpt-5.5").multiplier("priority"), 2.5);
        assert_eq!(openai("gpt-5.5").multiplier("fast"), 2.5);
        assert_eq!(codex("gpt-5.5").multiplier("priority"), 2.5);
        assert_eq!(codex("gpt-5.4").multiplier("fast"), 1.0);
        assert_eq!(codex("gpt-5.4").multiplier("flex"), 0.5);
        assert_eq!(TierPricing::None.multiplier("priority"), 1.0);
    }
}
