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
