//! What the wire API request builders share: the url join, the output cap before thinking
//! adjustments, and the header merge the SDKs do. Pure.

use serde_json::{Map, Value, json};

use super::types::StreamRequest;
use crate::config::{Model, ThinkingLevel};

/// `<baseUrl><path>` without a doubled slash (the SDKs' buildURL).
pub(crate) fn join_url(base: &str, path: &str) -> String {
    if base.ends_with('/') && path.starts_with('/') {
        format!("{base}{}", &path[1..])
    } else {
        format!("{base}{path}")
    }
}

/// `<baseUrl><path>` for the model, on the API's default base URL when the model names none.
pub(crate) fn api_url(model: &Model, default_base: &str, path: &str) -> String {
    let base = if model.base_url.is_empty() {
        default_base
    } else {
        &model.base_url
    };
    join_url(base, path)
}

/// The requested thinking level clamped to what the model supports; `None` when thinking is off.
pub(crate) fn thinking_level(request: &StreamRequest) -> Option<ThinkingLevel> {
    match request.thinking {
        ThinkingLevel::Off => None,
        level => {
            Some(request.model.clamp_thinking_level(level)).filter(|l| *l != ThinkingLevel::Off)
        }
    }
}

/// What the model's `thinkingLevelMap` maps `level` to, unless it maps it to nothing (`null`).
pub(crate) fn mapped_thinking_level(model: &Model, level: ThinkingLevel) -> Option<&Value> {
    model
        .thinking_level_map
        .as_ref()
        .and_then(|m| m.get(level.as_str()))
        .filter(|v| !v.is_null())
}

/// The effort to send for `level`: the model's mapping, else `default`.
pub(crate) fn mapped_effort(model: &Model, level: ThinkingLevel, default: &str) -> Value {
    mapped_thinking_level(model, level)
        .cloned()
        .unwrap_or_else(|| json!(default))
}

/// The output cap before thinking adjustments: the caller's, else min(model.maxTokens, 32000);
/// `None` when the model declares no maximum (pi leaves it undefined).
pub(crate) fn base_max_tokens(request: &StreamRequest) -> Option<u64> {
    request
        .max_tokens
        .or_else(|| (request.model.max_tokens > 0).then(|| request.model.max_tokens.min(32000)))
}

/// The output cap pi 1.6.0's clients send (pi-ai `clampMaxTokensToContext` over the caller's cap,
/// else the model's `maxTokens`): no more than what the context window leaves after the input's
/// estimate and a safety margin of 4096 tokens or 15% of the input (only 4096 once that would
/// leave less than 32768, the output then capped at 32768), at least 1. The input is estimated
/// as pi-ai's `estimateContextTokens` does: the last usable reply's reported context plus 3.5
/// characters a token for what came after it, or everything so estimated (the system prompt and
/// the tools' JSON included). Codex sends it; the other APIs keep 0.73.1's `base_max_tokens`.
pub(crate) fn context_clamped_max_tokens(request: &StreamRequest) -> u64 {
    const SAFETY_TOKENS: u64 = 4096;
    const MIN_OUTPUT_WITH_RATIO_MARGIN: u64 = 32768;
    let model = &request.model;
    let max_tokens = request.max_tokens.unwrap_or(model.max_tokens);
    if model.context_window == 0 {
        return max_tokens.max(1);
    }
    let window = model.context_window as i64;
    let input = estimate_input_tokens(request) as i64;
    let margin = (SAFETY_TOKENS as i64).max((input as f64 * 0.15).ceil() as i64);
    let mut room = window - input - margin;
    if room < MIN_OUTPUT_WITH_RATIO_MARGIN as i64 {
        room = (MIN_OUTPUT_WITH_RATIO_MARGIN as i64).min(window - input - SAFETY_TOKENS as i64);
    }
    max_tokens.min(room.max(1) as u64)
}

/// pi-ai's `estimateContextTokens` over the request's conversation (see
/// `context_clamped_max_tokens`).
fn estimate_input_tokens(request: &StreamRequest) -> u64 {
    use crate::messages::{AgentMessage, StopReason};
    let estimate = tokens_of_chars;
    let timestamp = |message: &AgentMessage| match message {
        AgentMessage::User(m) => m.timestamp,
        AgentMessage::Assistant(m) => m.timestamp,
        AgentMessage::ToolResult(m) => m.timestamp,
        AgentMessage::BashExecution(m) => m.timestamp,
        AgentMessage::Custom(m) => m.timestamp,
        AgentMessage::CompactionSummary(m) => m.timestamp,
        AgentMessage::BranchSummary(m) => m.timestamp,
        AgentMessage::System(m) => m.timestamp,
    };
    let reported = |usage: &crate::messages::Usage| {
        if usage.total_tokens > 0 {
            usage.total_tokens
        } else {
            usage.input + usage.output + usage.cache_read + usage.cache_write
        }
    };
    let mut latest_prefix = i64::MIN;
    let mut last_usage = None;
    for (index, message) in request.messages.iter().enumerate() {
        if let AgentMessage::Assistant(reply) = message
            && reply.timestamp >= latest_prefix
            && !matches!(reply.stop_reason, StopReason::Aborted | StopReason::Error)
            && reported(&reply.usage) > 0
        {
            last_usage = Some((index, reported(&reply.usage)));
        }
        latest_prefix = latest_prefix.max(timestamp(message));
    }
    match last_usage {
        Some((index, usage)) => {
            usage
                + request.messages[index + 1..]
                    .iter()
                    .map(message_tokens)
                    .sum::<u64>()
        }
        None => {
            let tools = if request.tools.is_empty() {
                0
            } else {
                let declared: Vec<Value> = request
                    .tools
                    .iter()
                    .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
                    .collect();
                estimate(crate::js::js_len(&Value::Array(declared).to_string()))
            };
            estimate(crate::js::js_len(&request.system_prompt))
                + tools
                + request.messages.iter().map(message_tokens).sum::<u64>()
        }
    }
}

/// pi-ai's 3.5 characters a token, rounded up: ceil(2 * chars / 7).
fn tokens_of_chars(chars: u64) -> u64 {
    (chars * 2).div_ceil(7)
}

/// pi-ai's `estimateMessageTokens` (JavaScript lengths; an image weighs 4800 characters; a system
/// message's text and tool lists are rounded each).
fn message_tokens(message: &crate::messages::AgentMessage) -> u64 {
    use crate::js::js_len;
    use crate::messages::{AgentMessage, ContentBlock, UserContent};
    const IMAGE_CHARS: u64 = 4800;
    let blocks = |content: &[ContentBlock]| -> u64 {
        content
            .iter()
            .map(|block| match block {
                ContentBlock::Text(t) => js_len(&t.text),
                ContentBlock::Image(_) => IMAGE_CHARS,
                _ => 0,
            })
            .sum()
    };
    let content = |content: &UserContent| match content {
        UserContent::Text(text) => js_len(text),
        UserContent::Blocks(b) => blocks(b),
    };
    let chars = match message {
        AgentMessage::User(m) => content(&m.content),
        AgentMessage::ToolResult(m) => blocks(&m.content),
        AgentMessage::Assistant(m) => m
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::Text(t) => js_len(&t.text),
                ContentBlock::Thinking(t) => js_len(&t.thinking),
                ContentBlock::ToolCall(c) => js_len(&c.name) + js_len(&c.arguments.to_string()),
                ContentBlock::Image(_) => 0,
            })
            .sum(),
        AgentMessage::System(m) => {
            let tools = |list: &Option<Vec<Value>>| {
                list.as_ref().filter(|l| !l.is_empty()).map_or(0, |l| {
                    tokens_of_chars(js_len(&Value::Array(l.clone()).to_string()))
                })
            };
            return tokens_of_chars(js_len(&m.prompt_text()))
                + tools(&m.tools_added)
                + tools(&m.tools_removed);
        }
        AgentMessage::Custom(m) => content(&m.content),
        AgentMessage::BashExecution(m) => js_len(&m.command) + js_len(&m.output),
        AgentMessage::CompactionSummary(m) => js_len(&m.summary),
        AgentMessage::BranchSummary(m) => js_len(&m.summary),
    };
    tokens_of_chars(chars)
}

/// Adds the model's headers, then the request's, to `defaults`; a later header replaces an earlier
/// one of the same name regardless of case (as the SDKs merge headers).
pub(crate) fn with_extra_headers(
    defaults: Vec<(String, String)>,
    model: &Model,
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let mut headers = defaults;
    let model_headers = model
        .headers
        .iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())));
    for (name, value) in model_headers.chain(extra.iter().cloned()) {
        headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(&name));
        headers.push((name, value));
    }
    headers
}

/// models.json's `samplingParams`, then `samplingParamsByThinkingLevel` of the request's
/// (clamped) level, written over the body last (pi 1.6.0's `resolveSamplingParams`; the
/// OpenAI-compatible APIs only).
pub(crate) fn apply_sampling_params(body: &mut Map<String, Value>, request: &StreamRequest) {
    let model = &request.model;
    let level = model.clamp_thinking_level(request.thinking);
    let base = model.extra.get("samplingParams").and_then(Value::as_object);
    let by_level = model
        .extra
        .get("samplingParamsByThinkingLevel")
        .and_then(|m| m.get(level.as_str()))
        .and_then(Value::as_object);
    for (key, value) in base.into_iter().chain(by_level).flatten() {
        body.insert(key.clone(), value.clone());
    }
}

/// Whether requests to `model` carry the transcript's later system messages in place, as pi
/// 1.6.0 sends them to a model whose `compat` says `supportsMidConvoSystemMessages` (on the wire
/// APIs that have them; Google, Vertex and Bedrock always fold them into the leading prompt).
/// Otherwise the request leads with the replayed prompt and has no system message after it.
pub fn sends_mid_convo_system_messages(model: &Model) -> bool {
    let api_has_them = matches!(
        model.api.as_str(),
        "openai-completions"
            | "openai-responses"
            | "azure-openai-responses"
            | "openai-codex-responses"
            | "anthropic-messages"
            | "mistral-conversations"
    );
    api_has_them && model.compat_bool("supportsMidConvoSystemMessages") == Some(true)
}

/// Whether an `openai` request to OpenAI's own API uses Sign in with ChatGPT (a key that is not
/// an `sk-` API key), which rejects some Responses fields (pi 1.6.0).
pub(crate) fn chatgpt_sign_in(request: &StreamRequest) -> bool {
    let model = &request.model;
    model.provider == "openai"
        && model.base_url == "https://api.openai.com/v1"
        && !request.api_key.starts_with("sk-")
}
/// The effort a request carries in the conversation instead of its top level (pi 1.6.0,
/// `compat.supportsMidConvoEffort`), which the reply records as `providerThinkingLevel`:
/// Responses' `configuration_update` items (`openai-responses` and `openai-codex-responses`,
/// not with Sign in with ChatGPT on `openai`; with thinking off `None`, except Codex's off level
/// on a reasoning model), Anthropic's
/// `output_config` system messages (`anthropic_effort_marker`). `None` otherwise.
pub fn provider_thinking_level(request: &StreamRequest) -> Option<String> {
    let model = &request.model;
    if model.api == "anthropic-messages" {
        return anthropic_effort_marker(request);
    }
    let applies = match model.api.as_str() {
        "openai-responses" => !chatgpt_sign_in(request),
        "openai-codex-responses" => true,
        _ => false,
    };
    if !applies || model.compat_bool("supportsMidConvoEffort") != Some(true) {
        return None;
    }
    let Some(level) = thinking_level(request) else {
        // Codex asks a reasoning model for its off level instead (pi 1.6.0).
        if model.api != "openai-codex-responses" {
            return None;
        }
        return off_effort(model).map(|effort| match effort {
            Value::String(effort) => effort,
            other => other.to_string(),
        });
    };
    match mapped_effort(model, level, level.as_str()) {
        Value::String(effort) => Some(effort),
        other => Some(other.to_string()),
    }
}

/// The effort Codex sends a reasoning model with thinking off (pi 1.6.0 asks for `none`): its
/// `off` mapping, else "none"; `None` for a model that cannot turn thinking off (`off` mapped to
/// `null`) or does not reason.
pub(crate) fn off_effort(model: &Model) -> Option<Value> {
    if !model.reasoning {
        return None;
    }
    match model.thinking_level_map.as_ref().and_then(|m| m.get("off")) {
        Some(Value::Null) => None,
        Some(mapped) => Some(mapped.clone()),
        None => Some(json!("none")),
    }
}

/// The effort Anthropic's per-reply markers carry (pi 1.6.0, `compat.supportsMidConvoEffort` on
/// `anthropic-messages`): the adaptive effort of the level where the model thinks adaptively,
/// else `high`; `None` without the key, or with thinking off on a reasoning model (unless its
/// `thinkingLevelMap` maps off to `null`: then it cannot be turned off).
pub(crate) fn anthropic_effort_marker(request: &StreamRequest) -> Option<String> {
    let model = &request.model;
    if model.compat_bool("supportsMidConvoEffort") != Some(true) {
        return None;
    }
    let thinking_on = request.thinking != ThinkingLevel::Off;
    let off_kept = model
        .thinking_level_map
        .as_ref()
        .and_then(|m| m.get(ThinkingLevel::Off.as_str()))
        .is_some_and(Value::is_null);
    if model.reasoning && !thinking_on && !off_kept {
        return None;
    }
    let adaptive = model.compat_bool("forceAdaptiveThinking") == Some(true);
    Some(if thinking_on && adaptive {
        adaptive_effort(model, request.thinking)
    } else {
        "high".to_string()
    })
}

/// The adaptive-thinking effort for `level`: the model's mapping, else low/medium/high.
pub(crate) fn adaptive_effort(model: &Model, level: ThinkingLevel) -> String {
    if let Some(mapped) = mapped_thinking_level(model, level).and_then(Value::as_str) {
        return mapped.to_string();
    }
    match level {
        ThinkingLevel::Minimal | ThinkingLevel::Low => "low",
        ThinkingLevel::Medium => "medium",
        _ => "high",
    }
    .to_string()
}

/// `reasoning.effort` while `configuration_update` items carry the level (pi 1.6.0).
pub(crate) const CONFIGURATION_UPDATE_REQUEST_EFFORT: &str = "medium";

/// Keywords no strict schema may hold (pi 1.6.0's `UNSUPPORTED_STRICT_SCHEMA_KEYS`).
const UNSUPPORTED_STRICT_KEYS: [&str; 16] = [
    "$ref",
    "$defs",
    "definitions",
    "allOf",
    "oneOf",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "prefixItems",
    "not",
    "if",
    "then",
    "else",
];

/// A keyword (with its value) a provider's strict mode rejects besides the common ones.
pub(crate) type UnsupportedKeyword = fn(&str, &Value) -> bool;

/// The tool's parameters when it is sent strict, else `None`: pi 1.6.0's
/// `resolveJsonSchemaStrictSampling` for a tool that asks for strict JSON-schema sampling
/// (`constrainedSampling` `strict: "prefer"`, as pi's read/bash/edit/write, or `"require"`) where
/// the API supports strict tools (`supported`, before any refusal), with `makeStrictJsonSchema`'s
/// conversion (every property required, optional ones made nullable, no additional properties).
/// A preferring tool falls back to non-strict when the schema is outside the strict subset or
/// Claude refused this session's strict tools; a requiring one never gets here unsendable
/// (`required_strict_failure` failed the request before).
pub(crate) fn strict_parameters(
    request: &StreamRequest,
    tool: &crate::messages::ToolSpec,
    supported: bool,
    unsupported: Option<UnsupportedKeyword>,
) -> Option<Value> {
    let required = request.strict_required.contains(&tool.name);
    let preferred = request.strict_preferred.contains(&tool.name) && !request.strict_tools_refused;
    if !supported || !(required || preferred) {
        return None;
    }
    strict_schema(&tool.parameters, unsupported).ok()
}

/// Why the request cannot be sent, when one of its tools requires strict JSON-schema sampling
/// (`strict: "require"`) that this API or the tool's schema cannot give: pi 1.6.0's error text,
/// for the first such tool.
pub(crate) fn required_strict_failure(
    request: &StreamRequest,
    supported: bool,
    unsupported: Option<UnsupportedKeyword>,
) -> Option<String> {
    request
        .tools
        .iter()
        .filter(|tool| request.strict_required.contains(&tool.name))
        .find_map(|tool| {
            let reason = if supported {
                strict_schema(&tool.parameters, unsupported).err()?
            } else {
                "strict tools are unsupported".to_string()
            };
            Some(format!(
                "Tool \"{}\" requires JSON-schema constrained sampling, but {reason}.",
                tool.name
            ))
        })
}

/// pi 1.6.0's `makeStrictJsonSchema`: the strict form of a tool's parameters, or why there is none.
fn strict_schema(
    parameters: &Value,
    unsupported: Option<UnsupportedKeyword>,
) -> Result<Value, String> {
    const NOT_OBJECT: &str = "root schema must have type object";
    if !parameters.is_object() {
        return Err(NOT_OBJECT.into());
    }
    let mut schema = parameters.clone();
    make_strict(&mut schema, unsupported)?;
    if schema["type"] != "object" {
        return Err(NOT_OBJECT.into());
    }
    Ok(schema)
}

fn is_structured(schema: &Value) -> bool {
    let Some(object) = schema.as_object() else {
        return false;
    };
    let has_type = |t: &str| match &object.get("type") {
        Some(Value::String(s)) => s == t,
        Some(Value::Array(types)) => types.iter().any(|v| v == t),
        _ => false,
    };
    has_type("object")
        || has_type("array")
        || object.contains_key("properties")
        || object.contains_key("items")
}

fn allows_null(schema: &Value) -> bool {
    let Some(object) = schema.as_object() else {
        return false;
    };
    let null_type = match object.get("type") {
        Some(Value::String(s)) => s == "null",
        Some(Value::Array(types)) => types.iter().any(|v| v == "null"),
        _ => false,
    };
    null_type
        || object.get("const") == Some(&Value::Null)
        || object
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| e.contains(&Value::Null))
        || object
            .get("anyOf")
            .and_then(Value::as_array)
            .is_some_and(|variants| variants.iter().any(allows_null))
}

/// pi 1.6.0's `makeJsonSchemaNodeStrict`, in place; `Err` (its reason, in its words and check
/// order) for a schema outside the strict subset.
fn make_strict(schema: &mut Value, unsupported: Option<UnsupportedKeyword>) -> Result<(), String> {
    let object = schema
        .as_object_mut()
        .ok_or("boolean schemas are unsupported")?;
    if let Some(key) = UNSUPPORTED_STRICT_KEYS
        .iter()
        .find(|key| object.contains_key(**key))
    {
        return Err(format!("{key} schemas are unsupported"));
    }
    if let Some(rejects) = unsupported
        && let Some((key, value)) = object.iter().find(|(key, value)| rejects(key, value))
    {
        return Err(format!("{key}: {value} is unsupported"));
    }
    // A bare enum counts as typed, a bare const does not.
    let typed = ["type", "anyOf", "enum"]
        .iter()
        .any(|key| object.contains_key(*key));
    if !typed {
        return Err("schemas without a type are unsupported".into());
    }
    if let Some(variants) = object.get_mut("anyOf") {
        let variants = variants
            .as_array_mut()
            .filter(|v| !v.is_empty())
            .ok_or("anyOf must contain at least one schema")?;
        for variant in variants {
            if is_structured(variant) {
                return Err("object and array unions are unsupported".into());
            }
            make_strict(variant, unsupported)?;
        }
    }
    if let Some(items) = object.get_mut("items") {
        if items.is_array() {
            return Err("tuple schemas are unsupported".into());
        }
        make_strict(items, unsupported)?;
    }
    let is_object = object.get("type").and_then(Value::as_str) == Some("object");
    if object.contains_key("properties") && !is_object {
        return Err("properties require type object".into());
    }
    if !is_object {
        return Ok(());
    }
    if object
        .get("additionalProperties")
        .is_some_and(|v| *v != Value::Bool(false))
    {
        return Err("schema-valued or true additionalProperties is unsupported".into());
    }
    if object.get("properties").is_some_and(|p| !p.is_object()) {
        return Err("object properties must be a schema map".into());
    }
    let required: Vec<String> = match object.get("required") {
        None => Vec::new(),
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| n.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or("object required must be a string array")?,
        Some(_) => return Err("object required must be a string array".into()),
    };
    let mut names = Vec::new();
    let mut no_properties = Map::new();
    let properties = match object.get_mut("properties") {
        Some(Value::Object(properties)) => properties,
        _ => &mut no_properties,
    };
    if required.iter().any(|name| !properties.contains_key(name)) {
        return Err("required contains an unknown property".into());
    }
    for (name, property) in properties.iter_mut() {
        make_strict(property, unsupported)?;
        if !required.contains(name) && !allows_null(property) {
            let inner = property.take();
            *property = json!({"anyOf": [inner, {"type": "null"}]});
        }
        names.push(Value::String(name.clone()));
    }
    object.insert("required".into(), Value::Array(names));
    object.insert("additionalProperties".into(), Value::Bool(false));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{model, request};
    use super::*;
    use crate::messages::ToolSpec;

    fn strict(parameters: Value, unsupported: Option<UnsupportedKeyword>) -> Option<Value> {
        let mut r = request(model("openai-completions", "p", "m"), vec![]);
        r.strict_preferred = vec!["t".into()];
        let tool = ToolSpec {
            name: "t".into(),
            description: String::new(),
            parameters,
        };
        strict_parameters(&r, &tool, true, unsupported)
    }

    /// pi 1.6.0's `makeStrictJsonSchema`: nested objects and array items converted, nullable
    /// optionals kept as they are; a schema outside the strict subset is not strict at all.
    #[test]
    fn strict_schemas_convert_as_pi_converts_them() {
        let converted = strict(
            json!({"type": "object", "properties": {
                "list": {"type": "array", "items": {"type": "object",
                    "properties": {"a": {"type": "string"}}}},
                "maybe": {"type": ["string", "null"]}}}),
            None,
        );
        assert_eq!(
            converted,
            Some(json!({"type": "object", "properties": {
                "list": {"anyOf": [{"type": "array", "items": {"type": "object",
                    "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                    "required": ["a"], "additionalProperties": false}}, {"type": "null"}]},
                "maybe": {"type": ["string", "null"]}},
                "required": ["list", "maybe"], "additionalProperties": false}))
        );
        for outside in [
            json!({"type": "object", "properties": {"x": {"oneOf": [{"type": "string"}]}}}),
            json!({"type": "object", "additionalProperties": true}),
            json!({"type": "object", "properties": {"x": {}}}),
            json!({"type": "object", "required": ["missing"]}),
            json!({"type": "string"}),
        ] {
            assert_eq!(strict(outside.clone(), None), None, "{outside}");
        }
        let bounded =
            json!({"type": "object", "properties": {"n": {"type": "number", "minimum": 1}}});
        assert!(strict(bounded.clone(), None).is_some());
        assert_eq!(strict(bounded, Some(|key, _| key == "minimum")), None);
    }

    /// `strict: "require"`: strict where it can be, else pi 1.6.0's reason for the first tool
    /// that cannot; a preferring tool goes non-strict after Claude's refusal, a requiring one not.
    #[test]
    fn required_strict_tools_are_strict_or_fail_with_the_reason() {
        let tool = |name: &str, parameters: Value| ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters,
        };
        let mut r = request(model("openai-completions", "p", "m"), vec![]);
        r.tools = vec![
            tool(
                "fine",
                json!({"type": "object", "properties": {"a": {"type": "string"}}}),
            ),
            tool("loose", json!({"type": "object", "properties": {"a": {}}})),
        ];
        r.strict_required = vec!["fine".into()];
        assert_eq!(required_strict_failure(&r, true, None), None);
        assert_eq!(
            required_strict_failure(&r, false, None).as_deref(),
            Some(
                "Tool \"fine\" requires JSON-schema constrained sampling, but strict tools are unsupported."
            )
        );
        r.strict_tools_refused = true;
        r.strict_preferred = vec!["loose".into()];
        assert!(strict_parameters(&r, &r.tools[0], true, None).is_some());
        assert_eq!(strict_parameters(&r, &r.tools[0], false, None), None);
        r.strict_required = vec!["loose".into(), "fine".into()];
        assert_eq!(
            required_strict_failure(&r, true, None).as_deref(),
            Some(
                "Tool \"loose\" requires JSON-schema constrained sampling, but schemas without a type are unsupported."
            )
        );
        let reason = |parameters: Value, unsupported: Option<UnsupportedKeyword>| {
            strict_schema(&parameters, unsupported).unwrap_err()
        };
        let object = |property: Value| json!({"type": "object", "properties": {"x": property}});
        for (schema, expected) in [
            (json!(true), "root schema must have type object"),
            (
                json!({"type": "string"}),
                "root schema must have type object",
            ),
            (object(json!(false)), "boolean schemas are unsupported"),
            (
                object(json!({"not": {}, "$ref": "#"})),
                "$ref schemas are unsupported",
            ),
            (
                object(json!({"anyOf": []})),
                "anyOf must contain at least one schema",
            ),
            (
                object(json!({"anyOf": [{"type": "object"}]})),
                "object and array unions are unsupported",
            ),
            (
                object(json!({"type": "array", "items": [{"type": "string"}]})),
                "tuple schemas are unsupported",
            ),
            (
                object(json!({"type": "string", "properties": {}})),
                "properties require type object",
            ),
            (
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
                "schema-valued or true additionalProperties is unsupported",
            ),
            (
                json!({"type": "object", "properties": []}),
                "object properties must be a schema map",
            ),
            (
                json!({"type": "object", "required": "x"}),
                "object required must be a string array",
            ),
            (
                json!({"type": "object", "required": ["y"]}),
                "required contains an unknown property",
            ),
        ] {
            assert_eq!(reason(schema.clone(), None), expected, "{schema}");
        }
        assert_eq!(
            reason(
                object(json!({"type": "number", "minimum": 1})),
                Some(|key, _| key == "minimum")
            ),
            "minimum: 1 is unsupported"
        );
    }
}
