//! The `openai-completions` wire API (FACTS §8.2; pi-ai `providers/openai-completions.js`): Chat
//! Completions requests for OpenAI and the many OpenAI-compatible servers, with the per-server
//! `compat` switches (detected from provider/baseUrl, overridden by models.json), and the stream
//! decoder for its `data:` JSON chunks. Both are pure; the HTTP exchange lives in `provider/mod.rs`.
//!
//! The decoder ends at `[DONE]` or at the end of the body; like pi it closes every block (in content
//! order) only then, and reports a finish reason pi does not know as an error.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::decode::{Emitter, WireDecoder, token_count};
use super::error_text::{openai_provider_error_message, sdk_error_message};
use super::grammar::{CustomInput, ResolvedGrammar, grammar_tools};
use super::request::{
    api_url, context_clamped_max_tokens, mapped_effort, strict_parameters, thinking_budget,
    thinking_level, with_extra_headers,
};
use super::sse::SseEvent;
use super::transcript_tools::transcript_tools;
use super::transform::{id_chars, transform_messages};
use super::types::{
    BlockKind, CacheRetention, HttpRequest, StreamRequest, cache_retention_from_env,
};
use crate::config::{Model, ThinkingLevel};
use crate::js::js_truthy;
use crate::messages::{
    AgentMessage, ContentBlock, StopReason, ToolSpec, Usage, UserContent, joined_text,
};

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The server quirks pi knows (`OpenAICompletionsCompat`), fully resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Compat {
    pub supports_store: bool,
    pub supports_developer_role: bool,
    pub supports_reasoning_effort: bool,
    pub supports_usage_in_streaming: bool,
    /// The stream says `finish_reason` (a stream without one is an error); without it the stop
    /// reason is inferred when the stream ends.
    pub supports_finish_reason: bool,
    /// `max_completion_tokens` or `max_tokens`.
    pub max_tokens_field: String,
    pub requires_tool_result_name: bool,
    pub requires_assistant_after_tool_result: bool,
    pub requires_thinking_as_text: bool,
    /// `tools: []` when the request has no tools but the history has tool traffic (proxies in
    /// front of Anthropic want it; vLLM ≥ 0.20 rejects it, so pi 1.6.0 sends it only on request).
    pub requires_tools_with_tool_history: bool,
    pub requires_reasoning_content_on_assistant_messages: bool,
    /// openai | deepseek | zai | qwen | qwen-chat-template | openrouter
    pub thinking_format: String,
    pub zai_tool_stream: bool,
    pub supports_strict_mode: bool,
    /// `Some("anthropic")`: OpenRouter's Anthropic models take `cache_control` markers.
    pub cache_control_format: Option<String>,
    pub send_session_affinity_headers: bool,
    /// `openai` (session_id, x-client-request-id, x-session-affinity), `openrouter`
    /// (x-session-id), anything else: the last two of `openai`'s.
    pub session_affinity_format: String,
    pub supports_long_cache_retention: bool,
    /// `auto` (OpenAI's own API, or long retention where supported), `enabled`, `disabled`.
    pub prompt_cache_key_mode: String,
    /// vLLM's request `priority`.
    pub vllm_priority: Option<Value>,
    /// An assistant message with only tool calls has `content: ""` instead of `null`.
    pub requires_non_null_assistant_content: bool,
    /// `chat_template_kwargs` of the `chat-template` format, `chat_template_args` of `baseten`:
    /// values, or `{"$var": "thinking.enabled" | "thinking.effort" | "thinking.budget",
    /// "omitWhenOff"?}` for pi-controlled ones.
    pub chat_template_kwargs: Map<String, Value>,
    pub chat_template_args: Map<String, Value>,
    /// The top-level field capping reasoning with the thinking budget (`thinkingTokenBudgetField`,
    /// or `thinking_token_budget` with `supportsThinkingTokenBudget`).
    pub thinking_token_budget_field: Option<String>,
}

/// pi-ai `detectCompat` + `getCompat`: known servers by provider name or base URL, then the
/// model's explicit `compat` entries win.
pub fn resolve_compat(model: &Model) -> Compat {
    let provider = model.provider.as_str();
    let url = model.base_url.as_str();
    let is_zai = provider == "zai"
        || provider == "zai-coding-cn"
        || url.contains("api.z.ai")
        || url.contains("open.bigmodel.cn");
    let is_together = provider == "together"
        || url.contains("api.together.ai")
        || url.contains("api.together.xyz");
    let is_moonshot =
        provider == "moonshotai" || provider == "moonshotai-cn" || url.contains("api.moonshot.");
    let is_openrouter = provider == "openrouter" || url.contains("openrouter.ai");
    let is_cf_workers = provider == "cloudflare-workers-ai" || url.contains("api.cloudflare.com");
    let is_cf_gateway =
        provider == "cloudflare-ai-gateway" || url.contains("gateway.ai.cloudflare.com");
    let is_nvidia = provider == "nvidia" || url.contains("integrate.api.nvidia.com");
    let is_ant_ling = provider == "ant-ling" || url.contains("api.ant-ling.com");
    let is_cerebras = provider == "cerebras" || url.contains("cerebras.ai");
    let is_deepseek = provider == "deepseek" || url.to_lowercase().contains("deepseek.com");
    let is_grok = provider == "xai" || url.contains("api.x.ai");
    let is_non_standard = is_nvidia
        || is_cerebras
        || is_grok
        || is_together
        || url.contains("chutes.ai")
        || is_deepseek
        || is_zai
        || is_moonshot
        || provider == "opencode"
        || url.contains("opencode.ai")
        || is_cf_workers
        || is_cf_gateway
        || is_ant_ling;
    let use_max_tokens = url.contains("chutes.ai")
        || is_deepseek
        || is_moonshot
        || is_cf_gateway
        || is_together
        || is_nvidia
        || is_ant_ling
        || is_zai;
    // The developer role is OpenAI's own; other hosts get `system` (pi 1.6.0).
    let is_openai = provider == "openai" || url.contains("api.openai.com");
    let thinking_format = if is_deepseek {
        "deepseek"
    } else if is_zai {
        "zai"
    } else if is_together {
        "together"
    } else if is_ant_ling {
        "ant-ling"
    } else if is_openrouter {
        "openrouter"
    } else {
        "openai"
    };
    let detected = Compat {
        supports_store: !is_non_standard,
        supports_developer_role: is_openai,
        supports_reasoning_effort: !is_grok
            && !is_zai
            && !is_moonshot
            && !is_together
            && !is_cf_gateway
            && !is_nvidia
            && !is_ant_ling,
        supports_usage_in_streaming: true,
        max_tokens_field: if use_max_tokens {
            "max_tokens"
        } else {
            "max_completion_tokens"
        }
        .to_string(),
        supports_finish_reason: true,
        requires_tool_result_name: false,
        requires_assistant_after_tool_result: false,
        requires_thinking_as_text: false,
        requires_tools_with_tool_history: false,
        requires_reasoning_content_on_assistant_messages: is_deepseek,
        thinking_format: thinking_format.to_string(),
        zai_tool_stream: false,
        // OpenAI compatibility alone does not mean strict JSON-schema tools (pi 1.6.0).
        supports_strict_mode: false,
        cache_control_format: (provider == "openrouter" && model.id.starts_with("anthropic/"))
            .then(|| "anthropic".to_string()),
        send_session_affinity_headers: is_openrouter,
        session_affinity_format: if is_openrouter {
            "openrouter"
        } else {
            "openai"
        }
        .to_string(),
        supports_long_cache_retention: !(is_together
            || is_cf_workers
            || is_cf_gateway
            || is_nvidia
            || is_ant_ling),
        prompt_cache_key_mode: "auto".to_string(),
        vllm_priority: None,
        requires_non_null_assistant_content: false,
        chat_template_kwargs: Map::new(),
        chat_template_args: Map::new(),
        thinking_token_budget_field: None,
    };
    if model.compat.is_none() {
        return detected;
    }
    let flag = |key: &str, default: bool| model.compat_bool(key).unwrap_or(default);
    let text = |key: &str, default: &str| model.compat_str(key).unwrap_or(default).to_string();
    Compat {
        supports_store: flag("supportsStore", detected.supports_store),
        supports_developer_role: flag("supportsDeveloperRole", detected.supports_developer_role),
        supports_reasoning_effort: flag(
            "supportsReasoningEffort",
            detected.supports_reasoning_effort,
        ),
        supports_usage_in_streaming: flag(
            "supportsUsageInStreaming",
            detected.supports_usage_in_streaming,
        ),
        supports_finish_reason: flag("supportsFinishReason", detected.supports_finish_reason),
        max_tokens_field: text("maxTokensField", &detected.max_tokens_field),
        requires_tool_result_name: flag(
            "requiresToolResultName",
            detected.requires_tool_result_name,
        ),
        requires_assistant_after_tool_result: flag(
            "requiresAssistantAfterToolResult",
            detected.requires_assistant_after_tool_result,
        ),
        requires_thinking_as_text: flag(
            "requiresThinkingAsText",
            detected.requires_thinking_as_text,
        ),
        requires_tools_with_tool_history: flag(
            "requiresToolsWithToolHistory",
            detected.requires_tools_with_tool_history,
        ),
        requires_reasoning_content_on_assistant_messages: flag(
            "requiresReasoningContentOnAssistantMessages",
            detected.requires_reasoning_content_on_assistant_messages,
        ),
        thinking_format: text("thinkingFormat", &detected.thinking_format),
        zai_tool_stream: flag("zaiToolStream", detected.zai_tool_stream),
        supports_strict_mode: flag("supportsStrictMode", detected.supports_strict_mode),
        cache_control_format: model
            .compat_str("cacheControlFormat")
            .map(str::to_string)
            .or(detected.cache_control_format),
        send_session_affinity_headers: flag(
            "sendSessionAffinityHeaders",
            detected.send_session_affinity_headers,
        ),
        session_affinity_format: text("sessionAffinityFormat", &detected.session_affinity_format),
        supports_long_cache_retention: flag(
            "supportsLongCacheRetention",
            detected.supports_long_cache_retention,
        ),
        prompt_cache_key_mode: text("promptCacheKeyMode", &detected.prompt_cache_key_mode),
        vllm_priority: model
            .compat
            .as_ref()
            .and_then(|c| c.get("vllmPriority"))
            .filter(|v| !v.is_null())
            .cloned(),
        requires_non_null_assistant_content: flag(
            "requiresNonNullAssistantContent",
            detected.requires_non_null_assistant_content,
        ),
        chat_template_kwargs: compat_object(model, "chatTemplateKwargs"),
        chat_template_args: compat_object(model, "chatTemplateArgs"),
        // 1.6.0's schema names the three fields servers read (vLLM, Qwen/SGLang, llama.cpp).
        thinking_token_budget_field: model
            .compat_str("thinkingTokenBudgetField")
            .filter(|f| {
                [
                    "thinking_token_budget",
                    "thinking_budget",
                    "thinking_budget_tokens",
                ]
                .contains(f)
            })
            .map(str::to_string)
            .or_else(|| {
                flag("supportsThinkingTokenBudget", false)
                    .then(|| "thinking_token_budget".to_string())
            }),
    }
}

/// A `compat` object entry (`{}` when absent or not an object, as 1.6.0's detected default).
fn compat_object(model: &Model, key: &str) -> Map<String, Value> {
    model
        .compat
        .as_ref()
        .and_then(|c| c.get(key))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// pi's `resolveClampedThinkingBudget`: the level's budget (`request::thinking_budget`), leaving
/// 1024 tokens for the answer under the request's output cap (else the model's); none without
/// thinking or when nothing is left.
fn clamped_thinking_budget(
    request: &StreamRequest,
    effort: Option<ThinkingLevel>,
    body: &Map<String, Value>,
) -> Option<u64> {
    let budget = thinking_budget(request, effort?)?;
    if !request.model.reasoning {
        return None;
    }
    let ceiling = ["max_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
        .unwrap_or(request.model.max_tokens);
    let budget = budget.min(ceiling.saturating_sub(1024));
    (budget > 0).then_some(budget)
}

/// pi's `buildChatTemplateValues`: each value as configured, or the pi-controlled one it names;
/// `None` when nothing is left.
fn chat_template_values(
    model: &Model,
    effort: Option<ThinkingLevel>,
    values: &Map<String, Value>,
    budget: Option<u64>,
) -> Option<Value> {
    let mut resolved = Map::new();
    for (key, value) in values {
        let Value::Object(spec) = value else {
            resolved.insert(key.clone(), value.clone());
            continue;
        };
        if effort.is_none() && spec.get("omitWhenOff").is_some_and(js_truthy) {
            continue;
        }
        let value = match spec.get("$var").and_then(Value::as_str) {
            Some("thinking.enabled") => Some(json!(effort.is_some())),
            Some("thinking.budget") => budget.map(|b| json!(b)),
            _ => {
                let map = model.thinking_level_map.as_ref();
                let mapped = match effort {
                    Some(level) => map.and_then(|m| m.get(level.as_str())),
                    None => map.and_then(|m| m.get("off")),
                };
                match mapped {
                    None => effort.map(|level| json!(level.as_str())),
                    Some(Value::String(s)) => Some(json!(s)),
                    Some(_) => None,
                }
            }
        };
        if let Some(value) = value {
            resolved.insert(key.clone(), value);
        }
    }
    (!resolved.is_empty()).then_some(Value::Object(resolved))
}

/// The request pi would send, with cache retention taken from the environment.
pub fn build_request(request: &StreamRequest) -> HttpRequest {
    build_request_with(request, cache_retention_from_env())
}

pub fn build_request_with(request: &StreamRequest, retention: CacheRetention) -> HttpRequest {
    let model = &request.model;
    let compat = resolve_compat(model);

    let mut headers: Vec<(String, String)> = vec![
        ("accept".into(), "application/json".into()),
        ("content-type".into(), "application/json".into()),
        (
            "authorization".into(),
            format!("Bearer {}", request.api_key),
        ),
    ];
    if compat.send_session_affinity_headers && !request.session_id.is_empty() {
        let names: &[&str] = match compat.session_affinity_format.as_str() {
            "openrouter" => &["x-session-id"],
            "openai" => &["session_id", "x-client-request-id", "x-session-affinity"],
            _ => &["x-client-request-id", "x-session-affinity"],
        };
        for name in names {
            headers.push(((*name).into(), request.session_id.clone()));
        }
    }
    let headers = with_extra_headers(headers, model, &super::copilot::extra_headers(request));

    // Thinking level as pi-ai's streamSimpleOpenAICompletions passes it: clamped, off → none.
    let effort = thinking_level(request);
    let mapped_effort = |level: ThinkingLevel| mapped_effort(model, level, level.as_str());

    let mut messages = convert_messages(request, &compat);
    let mut body = Map::new();
    body.insert("model".into(), json!(model.id));
    // messages are inserted below, after cache markers are applied; keep the key order.
    body.insert("messages".into(), Value::Null);
    body.insert("stream".into(), json!(true));
    let long = retention == CacheRetention::Long && compat.supports_long_cache_retention;
    let cache_key = match compat.prompt_cache_key_mode.as_str() {
        "enabled" => true,
        "auto" => model.base_url.contains("api.openai.com") || long,
        _ => false,
    };
    if cache_key && !request.session_id.is_empty() {
        body.insert("prompt_cache_key".into(), json!(request.session_id));
    }
    if long {
        body.insert("prompt_cache_retention".into(), json!("24h"));
    }
    if compat.supports_usage_in_streaming {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if compat.supports_store {
        body.insert("store".into(), json!(false));
    }
    let max_tokens = context_clamped_max_tokens(request);
    if max_tokens > 0 {
        let field = if compat.max_tokens_field == "max_tokens" {
            "max_tokens"
        } else {
            "max_completion_tokens"
        };
        body.insert(field.into(), json!(max_tokens));
    }
    let mut tools: Option<Vec<Value>> = None;
    // With `compat.supportsMidConvoToolAdditions`, later additions go in place (Kimi's).
    let request_tools = transcript_tools(request).top_level;
    if !request_tools.is_empty() {
        tools = Some(convert_tools(request, &compat, &request_tools));
    } else if compat.requires_tools_with_tool_history && request.history_facts().tool_traffic {
        tools = Some(Vec::new());
    }
    if compat.cache_control_format.as_deref() == Some("anthropic") {
        let mut cache_control = json!({"type": "ephemeral"});
        if long {
            cache_control["ttl"] = json!("1h");
        }
        apply_anthropic_cache_control(&mut messages, tools.as_mut(), &cache_control);
    }
    body.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = tools {
        let had_tools = !tools.is_empty();
        body.insert("tools".into(), Value::Array(tools));
        if had_tools && compat.zai_tool_stream {
            body.insert("tool_stream".into(), json!(true));
        }
    }

    if let Some(priority) = &compat.vllm_priority {
        body.insert("priority".into(), priority.clone());
    }
    let off_value = || model.thinking_level_map.as_ref().and_then(|m| m.get("off"));
    let budget = clamped_thinking_budget(request, effort, &body);
    if model.reasoning {
        match compat.thinking_format.as_str() {
            "zai" => {
                let thinking = if effort.is_some() {
                    json!({"type": "enabled", "clear_thinking": false})
                } else {
                    json!({"type": "disabled"})
                };
                body.insert("thinking".into(), thinking);
                if let Some(level) = effort.filter(|_| compat.supports_reasoning_effort) {
                    let effort = mapped_effort(level);
                    if effort.is_string() {
                        body.insert("reasoning_effort".into(), effort);
                    }
                }
            }
            "qwen" => {
                body.insert("enable_thinking".into(), json!(effort.is_some()));
                if let Some(level) = effort.filter(|_| compat.supports_reasoning_effort) {
                    let effort = mapped_effort(level);
                    if effort.is_string() {
                        body.insert("reasoning_effort".into(), effort);
                    }
                }
            }
            "together" => {
                body.insert("reasoning".into(), json!({"enabled": effort.is_some()}));
                if let Some(level) = effort.filter(|_| compat.supports_reasoning_effort) {
                    body.insert("reasoning_effort".into(), mapped_effort(level));
                }
            }
            "ant-ling" => {
                if let Some(level) = effort {
                    let mapped = model
                        .thinking_level_map
                        .as_ref()
                        .and_then(|m| m.get(level.as_str()))
                        .filter(|v| v.is_string());
                    if let Some(mapped) = mapped {
                        body.insert("reasoning".into(), json!({"effort": mapped}));
                    }
                }
            }
            "string-thinking" => {
                if let Some(level) = effort {
                    body.insert("thinking".into(), mapped_effort(level));
                } else if !off_value().is_some_and(Value::is_null) {
                    let off = off_value().cloned().unwrap_or_else(|| json!("none"));
                    body.insert("thinking".into(), off);
                }
            }
            "qwen-chat-template" => {
                body.insert(
                    "chat_template_kwargs".into(),
                    json!({"enable_thinking": effort.is_some(), "preserve_thinking": true}),
                );
            }
            "chat-template" => {
                let kwargs =
                    chat_template_values(model, effort, &compat.chat_template_kwargs, budget);
                if let Some(kwargs) = kwargs {
                    body.insert("chat_template_kwargs".into(), kwargs);
                }
            }
            "baseten" => {
                let args = chat_template_values(model, effort, &compat.chat_template_args, budget);
                if let Some(args) = args {
                    body.insert("chat_template_args".into(), args);
                }
                if compat.supports_reasoning_effort {
                    let map = model.thinking_level_map.as_ref();
                    let mapped = match effort {
                        Some(level) => map.and_then(|m| m.get(level.as_str())),
                        None => off_value(),
                    };
                    let chosen = match mapped {
                        None => effort.map(|level| json!(level.as_str())),
                        Some(v) => Some(v.clone()),
                    };
                    if let Some(chosen) = chosen.filter(Value::is_string) {
                        body.insert("reasoning_effort".into(), chosen);
                    }
                }
            }
            "deepseek" => {
                if effort.is_some() {
                    body.insert("thinking".into(), json!({"type": "enabled"}));
                } else if !off_value().is_some_and(Value::is_null) {
                    body.insert("thinking".into(), json!({"type": "disabled"}));
                }
                if let Some(level) = effort.filter(|_| compat.supports_reasoning_effort) {
                    body.insert("reasoning_effort".into(), mapped_effort(level));
                }
            }
            "openrouter" => {
                let off = model.thinking_level_map.as_ref().and_then(|m| m.get("off"));
                if let Some(level) = effort {
                    body.insert("reasoning".into(), json!({"effort": mapped_effort(level)}));
                } else if !off.is_some_and(Value::is_null) {
                    let off = off.cloned().unwrap_or_else(|| json!("none"));
                    body.insert("reasoning".into(), json!({"effort": off}));
                }
            }
            _ if compat.supports_reasoning_effort => {
                if let Some(level) = effort {
                    body.insert("reasoning_effort".into(), mapped_effort(level));
                } else if let Some(off) = model
                    .thinking_level_map
                    .as_ref()
                    .and_then(|m| m.get("off"))
                    .filter(|v| v.is_string())
                {
                    body.insert("reasoning_effort".into(), off.clone());
                }
            }
            _ => {}
        }
    }
    // A top-level cap on reasoning, whatever the thinking format (reasoning and answer share
    // the output cap on such servers).
    if let (Some(field), Some(budget)) = (&compat.thinking_token_budget_field, budget) {
        body.insert(field.clone(), json!(budget));
    }
    if model.base_url.contains("openrouter.ai")
        && let Some(routing) = model
            .compat
            .as_ref()
            .and_then(|c| c.get("openRouterRouting"))
        && js_truthy(routing)
    {
        body.insert("provider".into(), routing.clone());
    }
    if model.base_url.contains("ai-gateway.vercel.sh")
        && let Some(routing) = model
            .compat
            .as_ref()
            .and_then(|c| c.get("vercelGatewayRouting"))
    {
        let mut gateway = Map::new();
        for key in ["only", "order"] {
            if let Some(v) = routing.get(key).filter(|v| js_truthy(v)) {
                gateway.insert(key.into(), v.clone());
            }
        }
        if !gateway.is_empty() {
            body.insert("providerOptions".into(), json!({"gateway": gateway}));
        }
    }

    super::request::apply_sampling_params(&mut body, request);
    HttpRequest {
        url: api_url(model, DEFAULT_BASE_URL, "/chat/completions"),
        headers,
        body: Value::Object(body),
    }
}

/// Ids from the Responses API look like `call_id|item_id`: keep the call id, sanitized and cut to
/// OpenAI's 40 characters; `openai` itself gets over-long ids cut.
fn normalize_tool_call_id(model: &Model, id: &str) -> String {
    if let Some((call_id, _)) = id.split_once('|') {
        return id_chars(call_id, 40);
    }
    if model.provider == "openai" && id.chars().count() > 40 {
        return id.chars().take(40).collect();
    }
    id.to_string()
}

/// Chat Completions tool definitions (`strict` where the compat has strict mode).
fn convert_tools(request: &StreamRequest, compat: &Compat, tools: &[ToolSpec]) -> Vec<Value> {
    let grammars = grammar_tools(request);
    tools
        .iter()
        .map(|tool| {
            if let Some(grammar) = grammars.get(&tool.name) {
                return json!({"type": "custom", "custom": {"name": tool.name,
                    "description": tool.description,
                    "format": {"type": "grammar", "grammar": {"syntax": grammar.syntax,
                        "definition": grammar.definition}}}});
            }
            let strict = strict_parameters(request, tool, compat.supports_strict_mode, None);
            let mut function = Map::new();
            function.insert("name".into(), json!(tool.name));
            function.insert("description".into(), json!(tool.description));
            function.insert(
                "parameters".into(),
                strict.clone().unwrap_or_else(|| tool.parameters.clone()),
            );
            if compat.supports_strict_mode {
                function.insert("strict".into(), json!(strict.is_some()));
            }
            json!({"type": "function", "function": function})
        })
        .collect()
}

/// The `messages` array without cache markers: the system prompt, then the conversation.
fn convert_messages(request: &StreamRequest, compat: &Compat) -> Vec<Value> {
    let mut params = Vec::new();
    if !request.system_prompt.is_empty() {
        params.push(json!({"role": instruction_role(request, compat),
            "content": request.system_prompt}));
    }
    convert_conversation(request, compat, &mut params);
    params
}

/// The role of the system prompt and of later system messages: `developer` for OpenAI's
/// reasoning models, else `system`.
fn instruction_role(request: &StreamRequest, compat: &Compat) -> &'static str {
    if request.model.reasoning && compat.supports_developer_role {
        "developer"
    } else {
        "system"
    }
}

/// The elements `request.messages` encode to on their own, without the system prompt or cache
/// markers (what `request_cache` keeps).
pub(super) fn conversation_elements(request: &StreamRequest) -> Vec<Value> {
    let mut params = Vec::new();
    convert_conversation(request, &resolve_compat(&request.model), &mut params);
    params
}

fn convert_conversation(request: &StreamRequest, compat: &Compat, params: &mut Vec<Value>) {
    let model = &request.model;
    let transformed = transform_messages(&request.messages, model, &|id| {
        normalize_tool_call_id(model, id)
    });
    let grammars = grammar_tools(request);
    let bridge = || json!({"role": "assistant", "content": "I have processed the tool results."});
    let mut last_was_tool_result = false;
    let in_place = transcript_tools(request);
    let mut system_index = 0;
    let mut i = 0;
    while i < transformed.len() {
        let message = &transformed[i];
        if compat.requires_assistant_after_tool_result
            && last_was_tool_result
            && matches!(message, AgentMessage::User(_))
        {
            params.push(bridge());
        }
        match message {
            AgentMessage::User(user) => match &user.content {
                UserContent::Text(text) => params.push(json!({"role": "user", "content": text})),
                UserContent::Blocks(blocks) => {
                    let content: Vec<Value> = blocks
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text(t) => Some(json!({"type": "text", "text": t.text})),
                            ContentBlock::Image(img) => Some(json!({"type": "image_url",
                                "image_url": {"url": format!("data:{};base64,{}", img.mime_type, img.data)}})),
                            _ => None,
                        })
                        .collect();
                    if !content.is_empty() {
                        params.push(json!({"role": "user", "content": content}));
                    }
                }
            },
            AgentMessage::Assistant(assistant) => {
                if let Some(converted) = convert_assistant(assistant, model, compat, &grammars) {
                    params.push(converted);
                }
            }
            AgentMessage::ToolResult(_) => {
                let mut images = Vec::new();
                while let Some(AgentMessage::ToolResult(result)) = transformed.get(i) {
                    let text = joined_text(&result.content, "\n");
                    let content = if text.is_empty() {
                        "(see attached image)".to_string()
                    } else {
                        text
                    };
                    let mut tool = json!({"role": "tool", "content": content,
                        "tool_call_id": result.tool_call_id});
                    if compat.requires_tool_result_name && !result.tool_name.is_empty() {
                        tool["name"] = json!(result.tool_name);
                    }
                    params.push(tool);
                    if model.supports_images() {
                        for block in &result.content {
                            if let ContentBlock::Image(img) = block {
                                images.push(json!({"type": "image_url", "image_url":
                                    {"url": format!("data:{};base64,{}", img.mime_type, img.data)}}));
                            }
                        }
                    }
                    i += 1;
                }
                if images.is_empty() {
                    last_was_tool_result = true;
                } else {
                    if compat.requires_assistant_after_tool_result {
                        params.push(bridge());
                    }
                    let mut content = vec![
                        json!({"type": "text", "text": "Attached image(s) from tool result:"}),
                    ];
                    content.extend(images);
                    params.push(json!({"role": "user", "content": content}));
                    last_was_tool_result = false;
                }
                continue;
            }
            // A later system message (the model takes them in place): what it changes, as an
            // instruction where it stands; one that only changes tools sends nothing.
            AgentMessage::System(system) => {
                let added: Vec<ToolSpec> = system.added_tools();
                if in_place.in_place_at(system_index) && !added.is_empty() {
                    params.push(json!({"role": "system",
                        "tools": convert_tools(request, compat, &added)}));
                }
                system_index += 1;
                let text = system.update_text();
                if !text.is_empty() {
                    params.push(json!({"role": instruction_role(request, compat),
                        "content": text}));
                }
            }
            _ => {}
        }
        last_was_tool_result = false;
        i += 1;
    }
}

fn convert_assistant(
    assistant: &crate::messages::AssistantMessage,
    model: &Model,
    compat: &Compat,
    grammars: &HashMap<String, ResolvedGrammar>,
) -> Option<Value> {
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        if compat.requires_assistant_after_tool_result || compat.requires_non_null_assistant_content
        {
            json!("")
        } else {
            Value::Null
        },
    );
    let texts: Vec<&str> = assistant
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) if !t.text.trim().is_empty() => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    let text = texts.concat();
    let thinking: Vec<&crate::messages::ThinkingContent> = assistant
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Thinking(t) if !t.thinking.trim().is_empty() => Some(t),
            _ => None,
        })
        .collect();
    if !thinking.is_empty() {
        if compat.requires_thinking_as_text {
            let joined: Vec<&str> = thinking.iter().map(|t| t.thinking.as_str()).collect();
            let mut parts = vec![json!({"type": "text", "text": joined.join("\n\n")})];
            parts.extend(texts.iter().map(|t| json!({"type": "text", "text": t})));
            message.insert("content".into(), Value::Array(parts));
        } else {
            if !text.is_empty() {
                message.insert("content".into(), json!(text));
            }
            // The reasoning goes back in the field it came from (e.g. `reasoning_content`).
            if let Some(field) = thinking[0]
                .thinking_signature
                .as_deref()
                .filter(|s| !s.is_empty())
            {
                let joined: Vec<&str> = thinking.iter().map(|t| t.thinking.as_str()).collect();
                message.insert(field.to_string(), json!(joined.join("\n")));
            }
        }
    } else if !text.is_empty() {
        message.insert("content".into(), json!(text));
    }
    let calls: Vec<&crate::messages::ToolCall> = assistant.tool_calls().collect();
    if !calls.is_empty() {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|c| {
                // A grammar tool's call replays its raw input (pi 1.6.0); one whose input is
                // not a string replays as a function call (1.6.0 fails the request).
                let custom_input = grammars
                    .get(&c.name)
                    .and_then(|g| c.arguments[&g.input_property].as_str());
                if let Some(input) = custom_input {
                    return json!({"id": c.id, "type": "custom",
                        "custom": {"name": c.name, "input": input}});
                }
                json!({"id": c.id, "type": "function", "function": {"name": c.name,
                    "arguments": serde_json::to_string(&c.arguments).unwrap_or_default()}})
            })
            .collect();
        message.insert("tool_calls".into(), Value::Array(tool_calls));
        let details: Vec<Value> = calls
            .iter()
            .filter_map(|c| c.thought_signature.as_deref())
            .filter(|s| !s.is_empty())
            .filter_map(|s| serde_json::from_str::<Value>(s).ok())
            .filter(js_truthy)
            .collect();
        if !details.is_empty() {
            message.insert("reasoning_details".into(), Value::Array(details));
        }
    }
    if compat.requires_reasoning_content_on_assistant_messages
        && model.reasoning
        && !message.contains_key("reasoning_content")
    {
        message.insert("reasoning_content".into(), json!(""));
    }
    let has_content = match &message["content"] {
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    };
    if !has_content && !message.contains_key("tool_calls") {
        return None;
    }
    Some(Value::Object(message))
}

/// OpenRouter's Anthropic models: cache markers on the system prompt, the last tool and the last
/// user/assistant text.
fn apply_anthropic_cache_control(
    messages: &mut [Value],
    tools: Option<&mut Vec<Value>>,
    cache_control: &Value,
) {
    if let Some(system) = messages
        .iter_mut()
        .find(|m| m["role"] == "system" || m["role"] == "developer")
    {
        mark_last_text(system, cache_control);
    }
    if let Some(last) = tools.and_then(|t| t.last_mut()) {
        last["cache_control"] = cache_control.clone();
    }
    for message in messages.iter_mut().rev() {
        if (message["role"] == "user" || message["role"] == "assistant")
            && mark_last_text(message, cache_control)
        {
            return;
        }
    }
}

fn mark_last_text(message: &mut Value, cache_control: &Value) -> bool {
    if let Some(text) = message["content"].as_str() {
        if text.is_empty() {
            return false;
        }
        let text = text.to_string();
        message["content"] =
            json!([{"type": "text", "text": text, "cache_control": cache_control}]);
        return true;
    }
    if let Some(parts) = message["content"].as_array_mut()
        && let Some(part) = parts.iter_mut().rev().find(|p| p["type"] == "text")
    {
        part["cache_control"] = cache_control.clone();
        return true;
    }
    false
}

/// pi 1.6.0's `parseChunkUsage`: `cached_tokens` (else DeepSeek's `prompt_cache_hit_tokens`,
/// else Kimi's top-level `cached_tokens`) are cache reads, `cache_write_tokens` a separate count,
/// input what is left; reasoning tokens as reported (0 when not). From OpenRouter, the billed
/// cost rides along as the total (`totalFromProvider`; the agent prices the rest).
fn parse_usage(raw: &Value, openrouter: bool) -> Usage {
    let number = token_count;
    let prompt = number(&raw["prompt_tokens"]);
    let details = &raw["prompt_tokens_details"];
    // `??`: only a missing/null value falls through to the next source.
    let cache_read = [
        &details["cached_tokens"],
        &raw["prompt_cache_hit_tokens"],
        &raw["cached_tokens"],
    ]
    .into_iter()
    .find(|v| !v.is_null())
    .map(number)
    .unwrap_or(0);
    let cache_write = number(&details["cache_write_tokens"]);
    let input = prompt
        .saturating_sub(cache_read)
        .saturating_sub(cache_write);
    let output = number(&raw["completion_tokens"]);
    let reasoning = match number(&raw["completion_tokens_details"]["reasoning_tokens"]) {
        0 => number(&raw["reasoning_tokens"]),
        n => n,
    };
    let mut usage = Usage {
        input,
        output,
        cache_read,
        cache_write,
        reasoning: Some(reasoning),
        total_tokens: input + output + cache_read + cache_write,
        ..Usage::default()
    };
    if openrouter && let Some(billed) = openrouter_billed_cost(raw) {
        usage.cost.total = billed;
        usage.cost.total_from_provider = Some(true);
    }
    usage
}

/// OpenRouter's billed cost of a turn, when its accounting is complete: `cost`, plus the
/// upstream inference cost when the key is the user's own (`is_byok`).
fn openrouter_billed_cost(raw: &Value) -> Option<f64> {
    let valid = |v: &Value| v.as_f64().filter(|f| f.is_finite() && *f >= 0.0);
    let cost = valid(&raw["cost"])?;
    match raw["is_byok"].as_bool()? {
        false => Some(cost),
        true => {
            let details = raw.get("cost_details").filter(|d| d.is_object())?;
            let upstream = match &details["upstream_inference_cost"] {
                Value::Null if details.get("upstream_inference_cost").is_some() => {
                    valid(&details["upstream_inference_prompt_cost"])?
                        + valid(&details["upstream_inference_completions_cost"])?
                }
                other => valid(other)?,
            };
            Some(cost + upstream)
        }
    }
}

fn map_finish_reason(reason: &str) -> (StopReason, Option<String>) {
    match reason {
        "stop" | "end" => (StopReason::Stop, None),
        "length" => (StopReason::Length, None),
        "function_call" | "tool_calls" => (StopReason::ToolUse, None),
        other => (
            StopReason::Error,
            Some(format!("Provider finish_reason: {other}")),
        ),
    }
}

enum BlockState {
    Text,
    /// The delta field the reasoning came in (`reasoning_content`, …): pi's thinking signature.
    Thinking {
        field: String,
    },
    ToolCall {
        id: String,
        thought_signature: Option<String>,
        /// A custom tool call's raw input (a grammar tool's), else `None` (JSON arguments).
        custom: Option<CustomInput>,
    },
}

/// Chat Completions chunks → `StreamEvent`s.
pub struct Decoder {
    model_id: String,
    /// OpenRouter reports the billed cost with the usage.
    openrouter: bool,
    /// Blocks in content order (all stay open until the stream ends).
    blocks: Vec<BlockState>,
    text_block: Option<usize>,
    thinking_block: Option<usize>,
    tool_by_stream_index: HashMap<u64, usize>,
    tool_by_id: HashMap<String, usize>,
    response_id: Option<String>,
    response_model: Option<String>,
    stop_reason: StopReason,
    error_message: Option<String>,
    /// Whether a chunk said `finish_reason`, and whether the server is expected to
    /// (`compat.supportsFinishReason`, default true).
    saw_finish_reason: bool,
    finish_reason_expected: bool,
    /// Grammar tools' input properties by tool name (a custom call of another tool: `input`).
    grammar_inputs: HashMap<String, String>,
}

impl Decoder {
    pub fn new(request: &StreamRequest) -> Decoder {
        Decoder {
            model_id: request.model.id.clone(),
            openrouter: request.model.provider == "openrouter"
                || request.model.base_url.contains("openrouter.ai"),
            blocks: Vec::new(),
            text_block: None,
            thinking_block: None,
            tool_by_stream_index: HashMap::new(),
            tool_by_id: HashMap::new(),
            response_id: None,
            response_model: None,
            stop_reason: StopReason::Stop,
            error_message: None,
            saw_finish_reason: false,
            finish_reason_expected: resolve_compat(&request.model).supports_finish_reason,
            grammar_inputs: grammar_tools(request)
                .into_iter()
                .map(|(name, grammar)| (name, grammar.input_property))
                .collect(),
        }
    }

    fn on_chunk(&mut self, chunk: &Value, out: &mut Emitter) {
        let mut meta_changed = false;
        if self.response_id.is_none()
            && let Some(id) = chunk["id"].as_str().filter(|s| !s.is_empty())
        {
            self.response_id = Some(id.to_string());
            meta_changed = true;
        }
        if self.response_model.is_none()
            && let Some(m) = chunk["model"]
                .as_str()
                .filter(|m| !m.is_empty() && *m != self.model_id)
        {
            self.response_model = Some(m.to_string());
            meta_changed = true;
        }
        if meta_changed {
            out.meta(self.response_id.clone(), self.response_model.clone());
        }
        let chunk_usage = chunk.get("usage").filter(|u| js_truthy(u));
        if let Some(usage) = chunk_usage {
            out.usage(parse_usage(usage, self.openrouter));
        }
        let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) else {
            return;
        };
        // Some servers (Moonshot) put usage on the choice.
        if chunk_usage.is_none()
            && let Some(usage) = choice.get("usage").filter(|u| js_truthy(u))
        {
            out.usage(parse_usage(usage, self.openrouter));
        }
        if let Some(reason) = choice["finish_reason"].as_str().filter(|r| !r.is_empty()) {
            out.raw_stop_reason(reason);
            let (stop, message) = map_finish_reason(reason);
            self.saw_finish_reason = true;
            self.stop_reason = stop;
            if message.is_some() {
                self.error_message = message;
            }
        }
        let delta = &choice["delta"];
        if !delta.is_object() {
            return;
        }
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            let index = match self.text_block {
                Some(index) => index,
                None => {
                    let index = self.start_block(BlockState::Text, BlockKind::Text, out);
                    self.text_block = Some(index);
                    index
                }
            };
            out.delta(index, text);
        }
        // The first non-empty reasoning field wins (some servers send the same text twice).
        let reasoning = ["reasoning_content", "reasoning", "reasoning_text"]
            .iter()
            .find_map(|field| {
                delta[*field]
                    .as_str()
                    .filter(|t| !t.is_empty())
                    .map(|t| (*field, t))
            });
        if let Some((field, text)) = reasoning {
            let index = match self.thinking_block {
                Some(index) => index,
                None => {
                    let index = self.start_block(
                        BlockState::Thinking {
                            field: field.to_string(),
                        },
                        BlockKind::Thinking { redacted: false },
                        out,
                    );
                    self.thinking_block = Some(index);
                    index
                }
            };
            out.delta(index, text);
        }
        if let Some(calls) = delta["tool_calls"].as_array() {
            for call in calls {
                self.tool_call_delta(call, out);
            }
        }
        if let Some(details) = delta["reasoning_details"].as_array() {
            for detail in details {
                let encrypted = detail["type"] == "reasoning.encrypted"
                    && detail.get("data").is_some_and(js_truthy);
                let Some(id) = detail["id"]
                    .as_str()
                    .filter(|id| encrypted && !id.is_empty())
                else {
                    continue;
                };
                if let Some(&index) = self.tool_by_id.get(id)
                    && let BlockState::ToolCall {
                        thought_signature, ..
                    } = &mut self.blocks[index]
                {
                    *thought_signature = Some(detail.to_string());
                }
            }
        }
    }

    fn tool_call_delta(&mut self, call: &Value, out: &mut Emitter) {
        let stream_index = call["index"].as_u64();
        let id = call["id"].as_str().filter(|s| !s.is_empty());
        let name = call["function"]["name"]
            .as_str()
            .or(call["custom"]["name"].as_str())
            .unwrap_or("");
        // A custom call (no `function` member) carries raw input (pi 1.6.0).
        let custom_input = |property: Option<&String>| {
            let property = property.cloned().unwrap_or_else(|| "input".into());
            CustomInput::new(property, "").ok()
        };
        let is_custom = call.get("custom").is_some() && call.get("function").is_none();
        let existing = stream_index
            .and_then(|i| self.tool_by_stream_index.get(&i).copied())
            .or_else(|| id.and_then(|id| self.tool_by_id.get(id).copied()));
        let index = match existing {
            Some(index) => index,
            None => self.start_block(
                BlockState::ToolCall {
                    id: id.unwrap_or("").to_string(),
                    thought_signature: None,
                    custom: is_custom
                        .then(|| custom_input(self.grammar_inputs.get(name)))
                        .flatten(),
                },
                BlockKind::ToolCall {
                    id: id.unwrap_or("").to_string(),
                    name: name.to_string(),
                },
                out,
            ),
        };
        if let Some(stream_index) = stream_index {
            self.tool_by_stream_index
                .entry(stream_index)
                .or_insert(index);
        }
        if let Some(id) = id {
            self.tool_by_id.insert(id.to_string(), index);
            if let BlockState::ToolCall { id: block_id, .. } = &mut self.blocks[index]
                && block_id.is_empty()
            {
                *block_id = id.to_string();
            }
        }
        match &mut self.blocks[index] {
            BlockState::ToolCall {
                custom: Some(input),
                ..
            } => {
                let piece = call["custom"]["input"]
                    .as_str()
                    .and_then(|delta| input.append(delta).ok().flatten());
                out.delta(index, piece.unwrap_or_default());
            }
            _ => out.delta(index, call["function"]["arguments"].as_str().unwrap_or("")),
        }
    }

    fn start_block(&mut self, state: BlockState, kind: BlockKind, out: &mut Emitter) -> usize {
        self.blocks.push(state);
        out.start(kind)
    }

    /// pi closes every block at the end of the stream, in content order, then reports the outcome.
    fn finish(&mut self, out: &mut Emitter) {
        for (index, block) in self.blocks.iter_mut().enumerate() {
            let signature = match block {
                BlockState::Text => None,
                BlockState::Thinking { field } => Some(field.clone()),
                BlockState::ToolCall {
                    thought_signature,
                    custom,
                    ..
                } => {
                    // A custom call's input closes its JSON arguments text.
                    if let Some(piece) = custom.as_mut().and_then(|c| c.close(None).ok().flatten())
                    {
                        out.delta(index, piece);
                    }
                    thought_signature.clone()
                }
            };
            out.end(index, signature);
        }
        if !self.saw_finish_reason {
            if self.finish_reason_expected {
                out.done_with_message(
                    StopReason::Error,
                    Some("Stream ended without finish_reason".to_string()),
                );
                return;
            }
            // A server without `finish_reason` (pi 1.6.0): tool calls mean toolUse, else stop.
            let calls = self
                .blocks
                .iter()
                .any(|b| matches!(b, BlockState::ToolCall { .. }));
            self.stop_reason = if calls {
                StopReason::ToolUse
            } else {
                StopReason::Stop
            };
        }
        let error_message = match self.stop_reason {
            StopReason::Error => Some(
                self.error_message
                    .clone()
                    .unwrap_or_else(|| "Provider returned an error stop reason".to_string()),
            ),
            _ => None,
        };
        out.done_with_message(self.stop_reason, error_message);
    }
}

impl WireDecoder for Decoder {
    fn on_sse(&mut self, sse: &SseEvent, out: &mut Emitter) {
        if sse.data.starts_with("[DONE]") {
            self.finish(out);
            return;
        }
        let Some(chunk) = out.parse_json(&sse.data, "stream chunk") else {
            return;
        };
        // The SDK turns a chunk carrying `error` into an APIError without a status.
        if let Some(error) = chunk.get("error").filter(|e| js_truthy(e)) {
            let mut message = sdk_error_message(None, Some(error), None);
            if let Some(raw) = error.pointer("/metadata/raw").and_then(Value::as_str)
                && !raw.is_empty()
            {
                message.push('\n');
                message.push_str(raw);
            }
            out.fail(message);
            return;
        }
        if chunk.is_object() {
            self.on_chunk(&chunk, out);
        }
    }

    /// End of body: same as `[DONE]` (the SDK does not require it).
    fn on_eof(&mut self, out: &mut Emitter) {
        self.finish(out);
    }

    fn http_error_message(&self, status: u16, body: &str) -> String {
        openai_provider_error_message(status, body, None)
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::{assert_every_split_decodes_the_same, decode_in_parts};
    use super::super::test_support::{assistant, header, model, request, tool_result, user};
    use super::super::types::{ProviderError, StreamEvent};
    use super::*;
    use crate::messages::ToolSpec;
    use crate::messages::{ImageContent, TextContent, ThinkingContent, ToolCall};

    fn openai_model(provider: &str, base_url: &str, reasoning: bool) -> Model {
        let mut m = model("openai-completions", provider, "gpt-test");
        m.base_url = base_url.into();
        m.reasoning = reasoning;
        m.max_tokens = 16384;
        m
    }

    #[test]
    fn body_matches_the_recorded_reference_shape() {
        let mut r = request(
            openai_model("mock", "http://127.0.0.1:9/v1", true),
            vec![user("hi")],
        );
        r.system_prompt = "SYS".into();
        r.thinking = ThinkingLevel::Medium;
        r.tools = vec![ToolSpec {
            name: "read".into(),
            description: "Read".into(),
            parameters: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
        }];
        let http = build_request_with(&r, CacheRetention::Short);
        assert_eq!(http.url, "http://127.0.0.1:9/v1/chat/completions");
        assert_eq!(header(&http, "authorization"), Some("Bearer KEY"));
        // pi 1.6.0 against a local server: `system` (developer is OpenAI's own), no `strict`.
        let expected = json!({
            "model": "gpt-test",
            "messages": [
                {"role":"system","content":"SYS"},
                {"role":"user","content":[{"type":"text","text":"hi"}]}
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "store": false,
            "max_completion_tokens": 16384,
            "tools": [{"type":"function","function":{"name":"read","description":"Read",
                "parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}],
            "reasoning_effort": "medium",
        });
        assert_eq!(
            serde_json::to_string(&http.body).unwrap(),
            expected.to_string()
        );
    }

    #[test]
    fn compat_detection_changes_roles_fields_and_thinking() {
        let mut r = request(
            openai_model("deepseek", "https://api.deepseek.com", true),
            vec![user("x")],
        );
        r.system_prompt = "S".into();
        r.thinking = ThinkingLevel::High;
        let body = build_request_with(&r, CacheRetention::Short).body;
        assert_eq!(body["messages"][0]["role"], "system");
        assert!(body.get("store").is_none());
        assert_eq!(body["thinking"], json!({"type":"enabled"}));
        assert_eq!(body["reasoning_effort"], "high");

        let mut r = request(
            openai_model("openrouter", "https://openrouter.ai/api/v1", true),
            vec![],
        );
        r.thinking = ThinkingLevel::Off;
        let body = build_request_with(&r, CacheRetention::Short).body;
        assert_eq!(body["reasoning"], json!({"effort":"none"}));

        let r = request(
            openai_model("zai", "https://api.z.ai/api/coding/paas/v4", true),
            vec![],
        );
        let body = build_request_with(&r, CacheRetention::Short).body;
        assert_eq!(body["thinking"], json!({"type": "disabled"}));
        assert_eq!(body["max_tokens"], 16384);
        assert!(body.get("reasoning_effort").is_none());

        // 1.6.0's compat keys: vLLM priority, the prompt cache key on request, non-null
        // assistant content, the together / string-thinking formats.
        let mut m = openai_model("vllm", "http://127.0.0.1:8000/v1", true);
        m.compat = json!({"vllmPriority": 5, "promptCacheKeyMode": "enabled",
            "requiresNonNullAssistantContent": true, "thinkingFormat": "together"})
        .as_object()
        .cloned();
        let mut a = assistant(
            "openai-completions",
            "vllm",
            "gpt-test",
            vec![ContentBlock::ToolCall(ToolCall {
                id: "c1".into(),
                name: "read".into(),
                arguments: json!({}),
                thought_signature: None,
            })],
        );
        a.stop_reason = StopReason::ToolUse;
        let mut r = request(
            m,
            vec![
                user("x"),
                AgentMessage::Assistant(a),
                tool_result("c1", "read", "ok", false),
            ],
        );
        r.thinking = ThinkingLevel::Low;
        let body = build_request_with(&r, CacheRetention::Short).body;
        assert_eq!(body["priority"], 5);
        assert_eq!(body["prompt_cache_key"], "session-1");
        assert_eq!(body["messages"][1]["content"], "");
        assert_eq!(body["reasoning"], json!({"enabled": true}));
        assert_eq!(body["reasoning_effort"], "low");
        let mut m = openai_model("s", "http://127.0.0.1:8000/v1", true);
        m.compat = json!({"thinkingFormat": "string-thinking", "promptCacheKeyMode": "disabled"})
            .as_object()
            .cloned();
        let mut r = request(m, vec![]);
        r.thinking = ThinkingLevel::Off;
        let body = build_request_with(&r, CacheRetention::Long).body;
        assert_eq!(body["thinking"], "none");
        assert!(body.get("prompt_cache_key").is_none());

        let mut m = openai_model("moonshotai", "https://api.moonshot.ai/v1", false);
        m.compat = json!({"maxTokensField":"max_completion_tokens","supportsStore":true})
            .as_object()
            .cloned();
        let body = build_request_with(&request(m, vec![]), CacheRetention::Short).body;
        assert_eq!(body["max_completion_tokens"], 16384);
        assert_eq!(body["store"], false);

        let r = request(
            openai_model("moonshotai", "https://api.moonshot.ai/v1", false),
            vec![],
        );
        assert_eq!(
            build_request_with(&r, CacheRetention::Short).body["max_tokens"],
            16384
        );

        let r = request(
            openai_model("openai", "https://api.openai.com/v1", false),
            vec![],
        );
        let body = build_request_with(&r, CacheRetention::Short).body;
        assert_eq!(body["prompt_cache_key"], "session-1");
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert_eq!(
            keys[..4],
            ["model", "messages", "stream", "prompt_cache_key"]
        );
    }

    #[test]
    fn history_converts_like_pi() {
        let mut m = openai_model("mock", "http://x/v1", true);
        m.input = vec!["text".into(), "image".into()];
        let mut a = assistant(
            "openai-completions",
            "mock",
            "gpt-test",
            vec![
                ContentBlock::Thinking(ThinkingContent {
                    thinking: "think".into(),
                    thinking_signature: Some("reasoning_content".into()),
                    redacted: None,
                }),
                ContentBlock::Text(TextContent::new("a")),
                ContentBlock::Text(TextContent::new("b")),
                ContentBlock::ToolCall(ToolCall {
                    id: "call_1".into(),
                    name: "read".into(),
                    arguments: json!({"path":"x"}),
                    thought_signature: None,
                }),
            ],
        );
        a.stop_reason = StopReason::ToolUse;
        let mut image_result = tool_result("call_1", "read", "", false);
        if let AgentMessage::ToolResult(r) = &mut image_result {
            r.content = vec![ContentBlock::Image(ImageContent {
                data: "AAAA".into(),
                mime_type: "image/png".into(),
            })];
        }
        let empty = assistant("openai-completions", "mock", "gpt-test", vec![]);
        let messages = vec![
            user("go"),
            AgentMessage::Assistant(a),
            image_result,
            AgentMessage::Assistant(empty),
        ];
        let body =
            build_request_with(&request(m.clone(), messages.clone()), CacheRetention::Short).body;
        let expected = json!([
            {"role":"user","content":[{"type":"text","text":"go"}]},
            {"role":"assistant","content":"ab","reasoning_content":"think",
             "tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"x\"}"}}]},
            {"role":"tool","content":"(see attached image)","tool_call_id":"call_1"},
            {"role":"user","content":[{"type":"text","text":"Attached image(s) from tool result:"},
                {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}
        ]);
        assert_eq!(body["messages"], expected);
        // No tools: pi 1.6.0 omits `tools` (vLLM ≥ 0.20 rejects `[]`) unless the model asks.
        assert_eq!(body.get("tools"), None);
        let mut r = request(m, messages);
        let mut compat = Map::new();
        compat.insert("requiresToolsWithToolHistory".into(), json!(true));
        r.model.compat = Some(compat);
        let body = build_request_with(&r, CacheRetention::Short).body;
        assert_eq!(body["tools"], json!([]));
    }

    fn decode(stream: &str) -> Vec<StreamEvent> {
        let r = request(openai_model("mock", "http://x/v1", true), vec![]);
        decode_in_parts(Decoder::new(&r), &[stream.as_bytes()])
    }

    pub(crate) const PARALLEL_TOOLS: &str = r#"data: {"id":"chatcmpl-1","model":"gpt-test-2025","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Plan"}}]}

data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"Hi"}}]}

data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]}}]}

data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"ls","arguments":"{\"pa"}}]}}]}

data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"a\"}"}}]}}]}

data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"th\":\".\"}"}}]}}]}

data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":30}}}

data: [DONE]

"#;

    #[test]
    fn decodes_reasoning_text_and_parallel_tool_calls() {
        let delta = |index, d: &str| StreamEvent::Delta {
            index,
            delta: d.into(),
        };
        let tool = |id: &str, name: &str| BlockKind::ToolCall {
            id: id.into(),
            name: name.into(),
        };
        assert_eq!(
            decode(PARALLEL_TOOLS),
            vec![
                StreamEvent::Meta {
                    response_id: Some("chatcmpl-1".into()),
                    response_model: Some("gpt-test-2025".into())
                },
                StreamEvent::BlockStart {
                    index: 0,
                    kind: BlockKind::Thinking { redacted: false }
                },
                delta(0, "Plan"),
                StreamEvent::BlockStart {
                    index: 1,
                    kind: BlockKind::Text
                },
                delta(1, "Hi"),
                StreamEvent::BlockStart {
                    index: 2,
                    kind: tool("call_a", "read")
                },
                delta(2, ""),
                StreamEvent::BlockStart {
                    index: 3,
                    kind: tool("call_b", "ls")
                },
                delta(3, "{\"pa"),
                delta(2, "{\"path\":\"a\"}"),
                delta(3, "th\":\".\"}"),
                StreamEvent::Usage(Usage {
                    input: 70,
                    output: 20,
                    cache_read: 30,
                    cache_write: 0,
                    reasoning: Some(0),
                    total_tokens: 120,
                    ..Usage::default()
                }),
                StreamEvent::BlockEnd {
                    index: 0,
                    signature: Some("reasoning_content".into())
                },
                StreamEvent::BlockEnd {
                    index: 1,
                    signature: None
                },
                StreamEvent::BlockEnd {
                    index: 2,
                    signature: None
                },
                StreamEvent::BlockEnd {
                    index: 3,
                    signature: None
                },
                StreamEvent::Done {
                    stop_reason: StopReason::ToolUse,
                    error_message: None
                },
            ]
        );
    }

    #[test]
    fn every_split_point_decodes_the_same() {
        let r = request(openai_model("mock", "http://x/v1", true), vec![]);
        assert_every_split_decodes_the_same(PARALLEL_TOOLS, &|| Decoder::new(&r));
    }

    /// Without `finish_reason` the stream is an error (pi 1.6.0's default); with
    /// `compat.supportsFinishReason: false` the stop is inferred: tool calls → toolUse, else stop.
    #[test]
    fn a_stream_without_finish_reason_follows_the_compat_key() {
        let text = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n";
        let call = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"function\":{\"name\":\"read\",\"arguments\":\"{}\"}}]}}]}\n\n";
        let mut m = openai_model("mock", "http://x/v1", false);
        let ending = |m: &Model, body: &str| {
            decode_in_parts(
                Decoder::new(&request(m.clone(), vec![])),
                &[body.as_bytes()],
            )
            .pop()
            .unwrap()
        };
        assert_eq!(
            ending(&m, text),
            StreamEvent::Done {
                stop_reason: StopReason::Error,
                error_message: Some("Stream ended without finish_reason".into())
            }
        );
        m.compat = json!({"supportsFinishReason": false}).as_object().cloned();
        assert_eq!(
            ending(&m, text),
            StreamEvent::Done {
                stop_reason: StopReason::Stop,
                error_message: None
            }
        );
        assert_eq!(
            ending(&m, call),
            StreamEvent::Done {
                stop_reason: StopReason::ToolUse,
                error_message: None
            }
        );
        // A finish_reason the server does send still counts.
        let length =
            "data: {\"id\":\"c\",\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n";
        assert_eq!(
            ending(&m, length),
            StreamEvent::Done {
                stop_reason: StopReason::Length,
                error_message: None
            }
        );
    }

    #[test]
    fn finish_reasons_and_errors() {
        let events = decode(
            "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"length\"}]}\n\n",
        );
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done {
                stop_reason: StopReason::Length,
                error_message: None
            })
        );
        let events = decode(
            "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"content_filter\"}]}\n\ndata: [DONE]\n\n",
        );
        assert_eq!(
            events[events.len() - 2],
            StreamEvent::BlockEnd {
                index: 0,
                signature: None
            }
        );
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done {
                stop_reason: StopReason::Error,
                error_message: Some("Provider finish_reason: content_filter".into())
            })
        );
        let events = decode("data: {\"error\":{\"message\":\"Rate limited\",\"code\":429}}\n\n");
        assert_eq!(
            events,
            vec![StreamEvent::Failed(ProviderError {
                message: "Rate limited".into(),
                retry_after: None
            })]
        );
        // Usage with cache writes: a count of their own beside the reads (pi 1.6.0).
        let usage = parse_usage(
            &json!({"prompt_tokens":100,"completion_tokens":5,
            "prompt_tokens_details":{"cached_tokens":50,"cache_write_tokens":20},
            "completion_tokens_details":{"reasoning_tokens":3}}),
            false,
        );
        assert_eq!(
            (
                usage.input,
                usage.cache_read,
                usage.cache_write,
                usage.reasoning,
                usage.total_tokens
            ),
            (30, 50, 20, Some(3), 105)
        );
        // OpenRouter's billed cost: its own key, or the user's key plus the upstream cost.
        let billed = |extra: Value| {
            let mut raw = json!({"prompt_tokens": 10, "completion_tokens": 2});
            raw.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let usage = parse_usage(&raw, true);
            (usage.cost.total, usage.cost.total_from_provider)
        };
        assert_eq!(
            billed(json!({"cost": 0.5, "is_byok": false})),
            (0.5, Some(true))
        );
        assert_eq!(
            billed(json!({"cost": 0.5, "is_byok": true,
                "cost_details": {"upstream_inference_cost": 0.25}})),
            (0.75, Some(true))
        );
        assert_eq!(
            billed(json!({"cost": 0.5, "is_byok": true,
                "cost_details": {"upstream_inference_cost": null,
                    "upstream_inference_prompt_cost": 0.125,
                    "upstream_inference_completions_cost": 0.125}})),
            (0.75, Some(true))
        );
        assert_eq!(billed(json!({"cost": 0.5})), (0.0, None));
        assert_eq!(billed(json!({"cost": -1, "is_byok": false})), (0.0, None));
    }
}
