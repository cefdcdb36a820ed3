//! The `openai-codex-responses` wire API (pi-ai `providers/openai-codex-responses.js`): the
//! ChatGPT-subscription Codex backend. It speaks the Responses stream, so the input conversion and
//! the decoder are `openai_responses`'s; what differs lives here: the url
//! (`<base>/codex/responses`), the headers (the ChatGPT account id read from the OAuth access
//! token, `originator: pi`), the body (pi 1.6.0: the system prompt leads the input as a
//! `developer` item — Codex appends top-level `instructions` after the input, so a prompt there
//! kept the prefix from the prompt cache —, the output cap fitted into the context window, fixed
//! verbosity and tool choice, thinking off sent as effort `none`), the event mapping pi applies before decoding (`mapCodexEvents`) and its HTTP
//! error texts (the usage-limit message).
//!
//! pi first tries a WebSocket transport and falls back to SSE, whose body 1.6.0 compresses with
//! zstd; pi-rs always uses SSE (pi's `transport: "sse"`) with the body as it is, and leaves
//! retries of transient errors to the agent's auto-retry.

use serde_json::{Map, Value, json};

use super::openai_responses::{
    self, MIN_OUTPUT_TOKENS, ToolStyle, convert_input_with, set_header, tools_json,
};
use super::request::{mapped_effort, thinking_level, with_extra_headers};
use super::transcript_tools::transcript_tools;
use super::types::{HttpRequest, StreamRequest};
use crate::js::js_truthy;

const DEFAULT_BASE_URL: &str = "https://chatgpt.com/backend-api";
const TOOL_CALL_PROVIDERS: &[&str] = &["openai", "openai-codex", "opencode"];
/// Strict mode unless the compat says otherwise, `strict: null` for a tool that is not strict
/// (pi 1.6.0).
pub(crate) const TOOLS: ToolStyle = ToolStyle {
    strict_by_default: true,
    null_when_not_strict: true,
};
/// What 0.73.1 sends as its user agent (its `os` module is not loaded in the bundle it runs).
const USER_AGENT: &str = "pi (browser)";

/// The request pi sends; fails like pi when the token carries no ChatGPT account id.
pub fn build_request(request: &StreamRequest) -> Result<HttpRequest, String> {
    if request.api_key.is_empty() {
        return Err(format!(
            "No API key for provider: {}",
            request.model.provider
        ));
    }
    let account_id = crate::config::oauth::codex_account_id(&request.api_key)
        .ok_or_else(|| "Failed to extract accountId from token".to_string())?;
    let model = &request.model;

    let mut headers = with_extra_headers(Vec::new(), model, &request.headers);
    for (name, value) in [
        ("Authorization", format!("Bearer {}", request.api_key)),
        ("chatgpt-account-id", account_id),
        ("originator", "pi".to_string()),
        ("User-Agent", USER_AGENT.to_string()),
        ("OpenAI-Beta", "responses=experimental".to_string()),
        ("accept", "text/event-stream".to_string()),
        ("content-type", "application/json".to_string()),
    ] {
        set_header(&mut headers, name, &value);
    }
    if !request.session_id.is_empty() {
        set_header(&mut headers, "session-id", &request.session_id);
        set_header(&mut headers, "x-client-request-id", &request.session_id);
    }

    let mut body = Map::new();
    body.insert("model".into(), json!(model.id));
    body.insert("store".into(), json!(false));
    body.insert("stream".into(), json!(true));
    let tools = transcript_tools(request);
    body.insert(
        "input".into(),
        Value::Array(convert_input_with(
            request,
            TOOL_CALL_PROVIDERS,
            &tools,
            TOOLS,
        )),
    );
    body.insert("text".into(), json!({"verbosity": "low"}));
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    if !request.session_id.is_empty() {
        body.insert("prompt_cache_key".into(), json!(request.session_id));
    }
    body.insert("tool_choice".into(), json!("auto"));
    body.insert("parallel_tool_calls".into(), json!(true));
    let max_tokens = super::request::context_clamped_max_tokens(request);
    if max_tokens > 0 && model.compat_bool("supportsMaxOutputTokens") != Some(false) {
        body.insert(
            "max_output_tokens".into(),
            json!(max_tokens.max(MIN_OUTPUT_TOKENS)),
        );
    }
    if !tools.top_level.is_empty() {
        body.insert(
            "tools".into(),
            tools_json(request, &tools.top_level, TOOLS, false),
        );
    }
    let effort = match (
        super::request::provider_thinking_level(request),
        thinking_level(request),
    ) {
        (Some(_), _) => Some(json!(super::request::CONFIGURATION_UPDATE_REQUEST_EFFORT)),
        (None, Some(level)) => Some(mapped_effort(model, level, level.as_str())),
        // A reasoning model is told its off level ("none" unless mapped), unless it has none.
        (None, None) => super::request::off_effort(model),
    };
    if let Some(effort) = effort {
        body.insert(
            "reasoning".into(),
            json!({"effort": effort, "summary": "auto"}),
        );
    }

    Ok(HttpRequest {
        url: codex_url(&model.base_url),
        headers,
        body: Value::Object(body),
    })
}

/// The Responses decoder, reading the stream and errors as pi's Codex client does.
pub fn decoder(request: &StreamRequest) -> openai_responses::Decoder {
    let tier_pricing = openai_responses::TierPricing::Codex {
        model_id: request.model.id.clone(),
    };
    openai_responses::Decoder::with_client(map_event, http_error_message, tier_pricing)
        .reading_grammar_tools_of(request)
}

/// `<base>/codex/responses`, accepting a base that already ends in `/codex` or the full path.
fn codex_url(base_url: &str) -> String {
    let raw = if base_url.trim().is_empty() {
        DEFAULT_BASE_URL
    } else {
        base_url
    };
    let base = raw.trim_end_matches('/');
    if base.ends_with("/codex/responses") {
        base.to_string()
    } else if base.ends_with("/codex") {
        format!("{base}/responses")
    } else {
        format!("{base}/codex/responses")
    }
}

/// pi's `mapCodexEvents` on one SSE data payload: `Ok(None)` skips it, `Err` ends the stream with
/// that message, terminal events become `response.completed` with a known status.
pub fn map_event(data: &str) -> Result<Option<Value>, String> {
    let data = data.trim();
    if data.is_empty() || data == "[DONE]" {
        return Ok(None);
    }
    let mut event: Value =
        serde_json::from_str(data).map_err(|e| format!("Invalid Codex SSE JSON: {e}"))?;
    let Some(kind) = event["type"].as_str().map(str::to_string) else {
        return Ok(None);
    };
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    match kind.as_str() {
        "error" => {
            let detail = text(&event["message"])
                .or_else(|| text(&event["code"]))
                .unwrap_or_else(|| event.to_string());
            Err(format!("Codex error: {detail}"))
        }
        "response.failed" => Err(text(&event["response"]["error"]["message"])
            .unwrap_or_else(|| "Codex response failed".to_string())),
        "response.done" | "response.completed" | "response.incomplete" => {
            event["type"] = json!("response.completed");
            if let Some(response) = event.get_mut("response").and_then(Value::as_object_mut) {
                const KNOWN: &[&str] = &[
                    "completed",
                    "incomplete",
                    "failed",
                    "cancelled",
                    "queued",
                    "in_progress",
                ];
                let known = response
                    .get("status")
                    .and_then(Value::as_str)
                    .is_some_and(|s| KNOWN.contains(&s));
                if !known {
                    response.remove("status");
                }
            }
            Ok(Some(event))
        }
        _ => Ok(Some(event)),
    }
}

/// pi's `parseErrorResponse`: the error's message, or the ChatGPT usage-limit sentence for 429s
/// and usage-limit codes.
pub fn http_error_message(status: u16, body: &str) -> String {
    // The body, else the status text, else pi's fallback.
    let mut message = if body.is_empty() {
        ureq::http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Request failed")
            .to_string()
    } else {
        body.to_string()
    };
    let Ok(parsed) = serde_json::from_str::<Value>(body) else {
        return message;
    };
    let Some(error) = parsed.get("error").filter(|e| js_truthy(e)) else {
        return message;
    };
    let as_text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let code = as_text(&error["code"])
        .or_else(|| as_text(&error["type"]))
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mut friendly = None;
    if status == 429
        || [
            "usage_limit_reached",
            "usage_not_included",
            "rate_limit_exceeded",
        ]
        .iter()
        .any(|c| code.contains(c))
    {
        let plan = as_text(&error["plan_type"])
            .map(|p| format!(" ({} plan)", p.to_lowercase()))
            .unwrap_or_default();
        let when = error["resets_at"]
            .as_f64()
            .filter(|r| *r != 0.0)
            .map(|resets_at| {
                let minutes = ((resets_at * 1000.0 - crate::time::now_ms() as f64) / 60000.0)
                    .round()
                    .max(0.0);
                format!(" Try again in ~{minutes} min.")
            })
            .unwrap_or_default();
        friendly = Some(format!(
            "You have hit your ChatGPT usage limit{plan}.{when}"
        ));
    }
    if let Some(m) = as_text(&error["message"]).or_else(|| friendly.clone()) {
        message = m;
    }
    friendly.unwrap_or(message)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{model, request, user};
    use super::*;
    use crate::config::ThinkingLevel;
    use base64::Engine;

    fn token(claims: &str) -> String {
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims);
        format!("eyJhbGciOiJub25lIn0.{payload}.sig")
    }

    /// The body and headers as 1.6.0 builds them for `gpt-5.2` with thinking `medium` (its key
    /// order and values; the system prompt and the tool shortened — the whole body is compared
    /// with 1.6.0's in `tests/it/apis.rs`).
    #[test]
    fn request_matches_the_reference() {
        let mut m = model("openai-codex-responses", "openai-codex", "gpt-5.2");
        m.reasoning = true;
        m.base_url = "http://127.0.0.1:9/backend-api".into();
        m.thinking_level_map = json!({"xhigh": "xhigh", "minimal": "low"})
            .as_object()
            .cloned();
        let mut r = request(m, vec![user("Say hi")]);
        r.api_key = token(r#"{"https://api.openai.com/auth":{"chatgpt_account_id":"acct_123"}}"#);
        r.system_prompt = "SYS".into();
        r.thinking = ThinkingLevel::Medium;
        r.tools = vec![crate::messages::ToolSpec {
            name: "read".into(),
            description: "Read".into(),
            parameters: json!({"type": "object"}),
        }];
        let http = build_request(&r).unwrap();
        assert_eq!(http.url, "http://127.0.0.1:9/backend-api/codex/responses");
        assert_eq!(
            serde_json::to_string(&http.body).unwrap(),
            r#"{"model":"gpt-5.2","store":false,"stream":true,"input":[{"role":"developer","content":"SYS"},{"role":"user","content":[{"type":"input_text","text":"Say hi"}]}],"text":{"verbosity":"low"},"include":["reasoning.encrypted_content"],"prompt_cache_key":"session-1","tool_choice":"auto","parallel_tool_calls":true,"max_output_tokens":32000,"tools":[{"type":"function","name":"read","description":"Read","parameters":{"type":"object"},"strict":null}],"reasoning":{"effort":"medium","summary":"auto"}}"#
        );
        let names: Vec<&str> = http.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "Authorization",
                "chatgpt-account-id",
                "originator",
                "User-Agent",
                "OpenAI-Beta",
                "accept",
                "content-type",
                "session-id",
                "x-client-request-id"
            ]
        );
        assert_eq!(http.headers[1].1, "acct_123");

        // Off: a reasoning model is asked for its off level, "none" unless mapped; a model that
        // cannot turn thinking off gets no reasoning field.
        r.thinking = ThinkingLevel::Off;
        let reasoning =
            |r: &StreamRequest| build_request(r).unwrap().body.get("reasoning").cloned();
        assert_eq!(
            reasoning(&r),
            Some(json!({"effort": "none", "summary": "auto"}))
        );
        // With `supportsMidConvoEffort` the off level travels as a configuration update.
        r.model.compat = json!({"supportsMidConvoEffort": true}).as_object().cloned();
        let body = build_request(&r).unwrap().body;
        assert_eq!(
            body["reasoning"],
            json!({"effort": "medium", "summary": "auto"})
        );
        assert_eq!(
            body["input"][2],
            json!({"type": "configuration_update", "reasoning": {"effort": "none"}})
        );
        r.model.compat = None;
        r.model.thinking_level_map = json!({"off": "minimal"}).as_object().cloned();
        assert_eq!(
            reasoning(&r),
            Some(json!({"effort": "minimal", "summary": "auto"}))
        );
        r.model.thinking_level_map = json!({"off": null}).as_object().cloned();
        assert_eq!(reasoning(&r), None);
        r.model.reasoning = false;
        assert_eq!(reasoning(&r), None);
        // The output cap is left out where the compat says the backend takes none.
        r.model.compat = json!({"supportsMaxOutputTokens": false})
            .as_object()
            .cloned();
        assert!(
            build_request(&r)
                .unwrap()
                .body
                .get("max_output_tokens")
                .is_none()
        );
        r.model.compat = None;
        r.max_tokens = Some(5);
        assert_eq!(build_request(&r).unwrap().body["max_output_tokens"], 16);
        r.api_key = "not-a-jwt".into();
        assert_eq!(
            build_request(&r).unwrap_err(),
            "Failed to extract accountId from token"
        );
    }

    #[test]
    fn urls_and_events_map_like_pi() {
        assert_eq!(
            codex_url(""),
            "https://chatgpt.com/backend-api/codex/responses"
        );
        assert_eq!(codex_url("http://h/x/codex/"), "http://h/x/codex/responses");
        assert_eq!(
            codex_url("http://h/codex/responses"),
            "http://h/codex/responses"
        );
        assert_eq!(
            map_event(r#"{"type":"error","code":"c"}"#).unwrap_err(),
            "Codex error: c"
        );
        assert_eq!(
            map_event(r#"{"type":"response.failed","response":{}}"#).unwrap_err(),
            "Codex response failed"
        );
        let done = map_event(r#"{"type":"response.done","response":{"status":"weird"}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(done, json!({"type":"response.completed","response":{}}));
        assert_eq!(map_event("{}").unwrap(), None);
        assert!(
            map_event("{oops")
                .unwrap_err()
                .starts_with("Invalid Codex SSE JSON")
        );
    }

    #[test]
    fn usage_limits_get_the_friendly_text() {
        assert_eq!(
            http_error_message(
                429,
                r#"{"error":{"code":"usage_limit_reached","plan_type":"PLUS"}}"#
            ),
            "You have hit your ChatGPT usage limit (plus plan)."
        );
        assert_eq!(
            http_error_message(400, r#"{"error":{"message":"bad"}}"#),
            "bad"
        );
        assert_eq!(http_error_message(502, "upstream"), "upstream");
        assert_eq!(http_error_message(503, ""), "Service Unavailable");
    }
}
