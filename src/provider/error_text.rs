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

/// OpenAI SDK: the `error` member of a JSON body is the error (`<status> <error.message>`);
/// OpenRouter's `error.metadata.raw` is appended on its own line, as pi does.
pub fn openai_http_error_message(status: u16, body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(json) if js_truthy(&json) => {
            let error = json.get("error");
            let mut message = sdk_error_message(Some(status), error, None);
            if let Some(raw) = error.and_then(|e| e.pointer("/metadata/raw"))
                && js_truthy(raw)
            {
                message.push('\n');
                match raw {
                    Value::String(s) => message.push_str(s),
                    other => message.push_str(&other.to_string()),
                }
            }
            message
        }
        _ => sdk_error_message(Some(status), None, Some(body)),
    }
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
        assert_eq!(
            openai_http_error_message(429, r#"{"detail":"x"}"#),
            "429 status code (no body)"
        );
        assert_eq!(
            openai_http_error_message(404, "<html>nope</html>"),
            "404 <html>nope</html>"
        );
        assert_eq!(
            openai_http_error_message(400, r#"{"error":{"code":1}}"#),
            r#"400 {"code":1}"#
        );
        assert_eq!(
            openai_http_error_message(
                502,
                r#"{"error":{"message":"Provider returned error","metadata":{"raw":"upstream down"}}}"#
            ),
            "502 Provider returned error\nupstream down"
        );
    }
}
