//! The texts a failed request ends with, worded as pi's SDKs word them (the agent's retry and
//! overflow classifiers match these words): network failures, and HTTP error bodies as the
//! Anthropic and OpenAI SDKs' `APIError` shows them. The other APIs' texts live in their files.

use serde_json::Value;

use crate::js::js_truthy;

/// SDK wordings the retry classifier recognises (FACTS §4.6).
const CONNECTION_ERROR_TEXT: &str = "Connection error.";
const TIMEOUT_TEXT: &str = "Request timed out.";
/// What undici reports when the body stream breaks off (socket reset, truncated chunked body).
const TERMINATED_TEXT: &str = "terminated";

/// Words the agent's retry classifier knows, as the SDKs phrase them. `mid_stream`: the response
/// had started, so a broken connection reads as undici's `terminated`.
pub(crate) fn network_error_message(error: &ureq::Error, mid_stream: bool) -> String {
    use std::io::ErrorKind;
    let timed_out = match error {
        ureq::Error::Timeout(_) => true,
        ureq::Error::Io(e) => matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock),
        _ => false,
    };
    if timed_out {
        TIMEOUT_TEXT.to_string()
    } else if mid_stream {
        TERMINATED_TEXT.to_string()
    } else {
        CONNECTION_ERROR_TEXT.to_string()
    }
}

/// The SDKs' `APIError.makeMessage(status, error, message)`.
pub(crate) fn sdk_error_message(
    status: Option<u16>,
    error: Option<&Value>,
    message: Option<&str>,
) -> String {
    let from_error = error
        .filter(|e| js_truthy(e))
        .map(|e| match e.get("message") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            Some(m) if js_truthy(m) => m.to_string(),
            _ => e.to_string(),
        });
    let msg = from_error.or_else(|| message.filter(|m| !m.is_empty()).map(str::to_string));
    match (status, msg) {
        (Some(status), Some(msg)) => format!("{status} {msg}"),
        (Some(status), None) => format!("{status} status code (no body)"),
        (None, Some(msg)) => msg,
        (None, None) => "(no status code or body)".to_string(),
    }
}

/// Anthropic SDK: the whole JSON body is the error (so pi shows `<status> <JSON>` for Anthropic's
/// `{"type":"error","error":{…}}`); a body that is not JSON is shown as text.
pub fn anthropic_http_error_message(status: u16, body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(json) if js_truthy(&json) => sdk_error_message(Some(status), Some(&json), None),
        _ => sdk_error_message(Some(status), None, Some(body)),
    }
}

/// pi 1.6.0's text for an OpenAI SDK `APIError` (`normalizeProviderError` and
/// `formatProviderError`): the body's `error` object as JSON (at most 4000 characters) after the
/// status, unless the SDK's message already holds it; `prefix` (`OpenAI API error`, …) leads as
/// `<prefix> (<status>): `. Without such a body the SDK's message stands (after the prefix).
/// OpenRouter's `error.metadata.raw` follows on its own line when the text lacks it.
pub fn openai_provider_error_message(status: u16, body: &str, prefix: Option<&str>) -> String {
    let json = serde_json::from_str::<Value>(body).ok();
    let error = json.as_ref().and_then(|j| j.get("error"));
    let message = match &json {
        Some(json) if js_truthy(json) => sdk_error_message(Some(status), error, None),
        _ => sdk_error_message(Some(status), None, Some(body)),
    };
    let error_json = error
        .filter(|e| e.as_object().is_some_and(|o| !o.is_empty()))
        .map(|e| truncate_error_text(&e.to_string(), MAX_ERROR_BODY_CHARS))
        .filter(|body| !message.contains(body.as_str()));
    let mut text = match (error_json, prefix) {
        (Some(body), Some(prefix)) => format!("{prefix} ({status}): {body}"),
        (Some(body), None) => format!("{status}: {body}"),
        (None, Some(prefix)) => format!("{prefix} ({status}): {message}"),
        (None, None) => message,
    };
    if let Some(raw) = error.and_then(|e| e.pointer("/metadata/raw"))
        && js_truthy(raw)
    {
        let raw = match raw {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if !text.contains(&raw) {
            text.push('\n');
            text.push_str(&raw);
        }
    }
    text
}

/// The most of an error body pi 1.6.0 shows (`MAX_PROVIDER_ERROR_BODY_CHARS`).
const MAX_ERROR_BODY_CHARS: usize = 4000;

/// pi's `truncateErrorText` (lengths in UTF-16 units, as JavaScript counts them).
fn truncate_error_text(text: &str, max: usize) -> String {
    let units: Vec<u16> = text.encode_utf16().collect();
    if units.len() <= max {
        return text.to_string();
    }
    let head = String::from_utf16_lossy(&units[..max]);
    format!("{head}... [truncated {} chars]", units.len() - max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_error_texts_follow_the_sdks() {
        assert_eq!(
            anthropic_http_error_message(502, "Bad gateway"),
            "502 Bad gateway"
        );
        assert_eq!(
            anthropic_http_error_message(503, ""),
            "503 status code (no body)"
        );
        assert_eq!(
            anthropic_http_error_message(400, r#"{"message":"m"}"#),
            "400 m"
        );
        let openai = |status, body| openai_provider_error_message(status, body, None);
        assert_eq!(
            openai(429, r#"{"detail":"x"}"#),
            "429 status code (no body)"
        );
        assert_eq!(openai(404, "<html>nope</html>"), "404 <html>nope</html>");
        // The SDK's message already holds the body: it stands.
        assert_eq!(openai(400, r#"{"error":{"code":1}}"#), r#"400 {"code":1}"#);
        // pi 1.6.0: the status and the error object; OpenRouter's raw detail is in it already.
        assert_eq!(
            openai(
                502,
                r#"{"error":{"message":"Provider returned error","metadata":{"raw":"upstream down"}}}"#
            ),
            r#"502: {"message":"Provider returned error","metadata":{"raw":"upstream down"}}"#
        );
        assert_eq!(
            openai_provider_error_message(
                400,
                r#"{"error":{"message":"bad"}}"#,
                Some("OpenAI API error")
            ),
            r#"OpenAI API error (400): {"message":"bad"}"#
        );
        assert_eq!(
            openai_provider_error_message(503, "", Some("Azure OpenAI API error")),
            "Azure OpenAI API error (503): 503 status code (no body)"
        );
        let long = format!(r#"{{"error":{{"message":"{}"}}}}"#, "x".repeat(5000));
        assert!(openai(400, &long).ends_with("... [truncated 1014 chars]"));
    }
}
