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

/// The output cap pi 1.6.0 sends (pi-ai `buildBaseOptions`): the caller's cap, else the model's
/// `maxTokens`, fitted into the context window (`fit_to_context`).
pub fn context_clamped_max_tokens(request: &StreamRequest) -> u64 {
    let input = estimate_input_tokens(request);
    fit_to_context(
        request,
        input,
        request.max_tokens.unwrap_or(request.model.max_tokens),
    )
}

/// The output cap and thinking budget pi 1.6.0 sends where a thinking budget shares the cap
/// (Anthropic Messages and Bedrock Claude without adaptive thinking; pi-ai
/// `adjustMaxTokensForThinking`): the fitted cap grows by the level's budget up to the model's
/// `maxTokens`, is fitted into the context window again, and the budget leaves 1024 tokens of it
/// for the answer.
pub(crate) fn thinking_max_tokens_and_budget(
    request: &StreamRequest,
    level: ThinkingLevel,
) -> (u64, u64) {
    let input = estimate_input_tokens(request);
    let model_max = request.model.max_tokens;
    let base = fit_to_context(request, input, request.max_tokens.unwrap_or(model_max));
    let mut budget = thinking_budget(request, level).unwrap_or(0);
    let grown = (base + budget).min(model_max);
    if grown <= budget {
        budget = budget.min(grown.saturating_sub(MIN_ANSWER_TOKENS));
    }
    let max_tokens = fit_to_context(request, input, grown);
    (
        max_tokens,
        budget.min(max_tokens.saturating_sub(MIN_ANSWER_TOKENS)),
    )
}

/// Tokens a thinking budget always leaves for the answer under a shared cap (pi-ai).
const MIN_ANSWER_TOKENS: u64 = 1024;

/// The level's thinking budget: settings `thinkingBudgets`, else 1024/2048/8192/16384 for
/// minimal/low/medium/high; xhigh and max count as high, off has none.
pub(crate) fn thinking_budget(request: &StreamRequest, level: ThinkingLevel) -> Option<u64> {
    let slot = match level {
        ThinkingLevel::Off => return None,
        ThinkingLevel::Minimal => 0,
        ThinkingLevel::Low => 1,
        ThinkingLevel::Medium => 2,
        ThinkingLevel::High | ThinkingLevel::Xhigh | ThinkingLevel::Max => 3,
    };
    Some(request.thinking_budgets[slot].unwrap_or([1024, 2048, 8192, 16384][slot]))
}

/// pi-ai `clampMaxTokensToContext`: `max_tokens` but no more than what the context window leaves
/// after the input's estimate and a safety margin of 4096 tokens or 15% of the input (only 4096
/// once that would leave less than 32768, the output then capped at 32768), at least 1.
fn fit_to_context(request: &StreamRequest, input: u64, max_tokens: u64) -> u64 {
    const SAFETY_TOKENS: i64 = 4096;
    const MIN_OUTPUT_WITH_RATIO_MARGIN: i64 = 32768;
    if request.model.context_window == 0 {
        return max_tokens.max(1);
    }
    let window = i64::try_from(request.model.context_window).unwrap_or(i64::MAX);
    let input = i64::try_from(input).unwrap_or(i64::MAX);
    let margin = SAFETY_TOKENS.max((input as f64 * 0.15).ceil() as i64);
    let left = |margin: i64| window.saturating_sub(input).saturating_sub(margin);
    let mut room = left(margin);
    if room < MIN_OUTPUT_WITH_RATIO_MARGIN {
        room = MIN_OUTPUT_WITH_RATIO_MARGIN.min(left(SAFETY_TOKENS));
    }
    max_tokens.min(room.max(1) as u64)
}

/// pi-ai's `estimateContextTokens` over the whole conversation (the kept start's running sums,
/// then the request's messages); the system prompt and the tools' JSON count as 1.6.0's leading
/// system message does, where the request says they do (`prompt_in_estimate`).
fn estimate_input_tokens(request: &StreamRequest) -> u64 {
    use super::history::tokens_of_chars;
    request.history_facts().input.tokens(|| {
        if !request.prompt_in_estimate {
            return 0;
        }
        let tools = if request.tools.is_empty() {
            0
        } else {
            // 1.6.0's declarations: pi's own tools also say they prefer strict sampling.
            let declared: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    let mut declared = json!({"name": t.name, "description": t.description,
                        "parameters": t.parameters});
                    if request.strict_preferred.contains(&t.name) {
                        declared["constrainedSampling"] =
                            json!({"type": "json_schema", "strict": "prefer"});
                    }
                    declared
                })
                .collect();
            tokens_of_chars(crate::js::js_len(&Value::Array(declared).to_string()))
        };
        tokens_of_chars(crate::js::js_len(&request.system_prompt)) + tools
    })
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

    /// pi 1.6.0's caps (values computed with pi-ai's `clampMaxTokensToContext` and
    /// `adjustMaxTokensForThinking`).
    #[test]
    fn output_caps_fit_the_model_and_the_context_window() {
        let mut m = model("anthropic-messages", "p", "m");
        m.max_tokens = 64000;
        let mut r = request(m, vec![super::super::test_support::user("hi")]);
        // The window holds the model's maximum: it is sent whole (no 32000 ceiling any more).
        assert_eq!(context_clamped_max_tokens(&r), 64000);
        // A budget fits inside the model's maximum; a caller's cap grows by it (here to less than
        // the 1024 answer tokens: no budget is left, the client then asks for 1024).
        assert_eq!(
            thinking_max_tokens_and_budget(&r, ThinkingLevel::Medium),
            (64000, 8192)
        );
        r.max_tokens = Some(100);
        r.thinking_budgets = [None, Some(500), None, None];
        assert_eq!(
            thinking_max_tokens_and_budget(&r, ThinkingLevel::Low),
            (600, 0)
        );
        r.max_tokens = Some(2000);
        assert_eq!(
            thinking_max_tokens_and_budget(&r, ThinkingLevel::Low),
            (2500, 500)
        );
        // A cap smaller than the budget leaves 1024 tokens for the answer; max counts as high.
        r.max_tokens = None;
        r.model.max_tokens = 4096;
        assert_eq!(
            thinking_max_tokens_and_budget(&r, ThinkingLevel::Max),
            (4096, 3072)
        );
        // A small window: what it leaves after the input (1 token for "hi", 3 for the prompt
        // unless it is left out) and 4096 tokens.
        r.model.context_window = 8000;
        r.model.max_tokens = 64000;
        r.system_prompt = "a system prompt".into();
        assert_eq!(context_clamped_max_tokens(&r), 8000 - 5 - 1 - 4096);
        r.prompt_in_estimate = false;
        assert_eq!(context_clamped_max_tokens(&r), 8000 - 1 - 4096);
        assert_eq!(
            thinking_max_tokens_and_budget(&r, ThinkingLevel::High),
            (3903, 3903 - 1024)
        );
        // A large window keeps 15% of the input (here 1_000_000 tokens) as margin while that
        // leaves 32768 tokens; otherwise 4096, the output then capped at 32768.
        r.model.max_tokens = 200_000;
        r.messages = vec![super::super::test_support::user(&"x".repeat(3_500_000))];
        r.model.context_window = 1_200_000;
        assert_eq!(context_clamped_max_tokens(&r), 50_000);
        r.model.context_window = 1_170_000;
        assert_eq!(context_clamped_max_tokens(&r), 32768);
        // An input past the window still asks for 1 token; no window, no fitting.
        r.model.context_window = 900_000;
        assert_eq!(context_clamped_max_tokens(&r), 1);
        r.model.context_window = 0;
        assert_eq!(context_clamped_max_tokens(&r), 200_000);
    }

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
