//! Claude's limits on strict tools (pi 1.6.0's `strict-tool-limits.js`). The Anthropic API and
//! Bedrock refuse a request whose strict tools go over them (observed: 20 strict tools, 16
//! optional or union-typed parameters across them, a compiled grammar too large) with one of a
//! few messages, before any output. pi then sends the request again with the tools that prefer
//! strict sampling non-strict, records an `<api>_strict_tools_fallback` diagnostic on the reply,
//! and keeps those tools non-strict for the rest of the session. This module recognizes the
//! refusal and makes the diagnostic; the agent sends again and remembers.

use serde_json::{Value, json};

/// What Claude's refusals say (any one of them, anywhere in the error message).
const LIMIT_MESSAGES: [&str; 3] = [
    "The compiled grammar is too large",
    "Too many strict tools (",
    "Schemas contains too many parameters with union types (",
];

/// The error message, as pi 1.6.0 records it, when a failed response of `api` says the request's
/// strict tools exceed Claude's limits: Anthropic's 400 `invalid_request_error` (the SDK's
/// `400 <body>`) or Bedrock's `ValidationException` (its message). `error_type` is the
/// `x-amzn-errortype` header.
pub(crate) fn refusal_message(
    api: &str,
    status: u16,
    error_type: Option<&str>,
    body: &str,
) -> Option<String> {
    let message = match api {
        "anthropic-messages" => {
            let json: Value = serde_json::from_str(body).ok()?;
            if status != 400 || json["error"]["type"] != "invalid_request_error" {
                return None;
            }
            super::error_text::anthropic_http_error_message(status, body)
        }
        "bedrock-converse-stream" => {
            let (name, message) = super::bedrock::exception(status, error_type, body);
            if name != "ValidationException" {
                return None;
            }
            message
        }
        _ => return None,
    };
    LIMIT_MESSAGES
        .iter()
        .any(|limit| message.contains(limit))
        .then_some(message)
}

/// Whether a built Anthropic or Bedrock body declares a strict tool (at the top level, or in
/// Anthropic's in-place `tool_addition` blocks): only then is a refusal worth a second request.
pub(crate) fn declares_strict_tools(body: &Value) -> bool {
    let strict = |tool: &Value| tool["strict"] == true;
    let listed = |value: &Value| value.as_array().into_iter().flatten().any(strict);
    let added = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|message| message["content"].as_array().into_iter().flatten())
        .any(|block| block["type"] == "tool_addition" && strict(&block["tool"]["definition"]));
    let bedrock = body["toolConfig"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|tool| strict(&tool["toolSpec"]));
    listed(&body["tools"]) || added || bedrock
}

/// The reply's diagnostic for the second request without strict tools.
pub(crate) fn fallback_diagnostic(api: &str, message: String) -> Value {
    let kind = match api {
        "bedrock-converse-stream" => "bedrock_strict_tools_fallback",
        _ => "anthropic_strict_tools_fallback",
    };
    json!({"type": kind, "timestamp": crate::time::now_ms(), "error": {"message": message},
        "details": {"reason": "strict_tool_limits_exceeded"}})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anthropic's refusal is a 400 `invalid_request_error` whose SDK message names a limit;
    /// Bedrock's a `ValidationException` (header or body) whose message does.
    #[test]
    fn refusals_are_recognized_by_api_status_type_and_message() {
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Too many strict tools (21). The maximum is 20."},"request_id":"r1"}"#;
        assert_eq!(
            refusal_message("anthropic-messages", 400, None, anthropic).as_deref(),
            Some(format!("400 {anthropic}").as_str())
        );
        assert_eq!(
            refusal_message("anthropic-messages", 413, None, anthropic),
            None
        );
        let other = anthropic.replace("invalid_request_error", "overloaded_error");
        assert_eq!(
            refusal_message("anthropic-messages", 400, None, &other),
            None
        );
        let unrelated = anthropic.replace("Too many strict tools (21)", "Prompt is too long");
        assert_eq!(
            refusal_message("anthropic-messages", 400, None, &unrelated),
            None
        );

        let bedrock = r#"{"message":"The compiled grammar is too large for this request."}"#;
        let header =
            Some("ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/");
        assert_eq!(
            refusal_message("bedrock-converse-stream", 400, header, bedrock).as_deref(),
            Some("The compiled grammar is too large for this request.")
        );
        let throttled = Some("ThrottlingException");
        assert_eq!(
            refusal_message("bedrock-converse-stream", 400, throttled, bedrock),
            None
        );
        assert_eq!(
            refusal_message("openai-completions", 400, None, anthropic),
            None
        );
    }

    #[test]
    fn strict_tools_are_found_where_each_api_declares_them() {
        assert!(declares_strict_tools(
            &json!({"tools": [{"name": "a"}, {"name": "read", "strict": true}]})
        ));
        assert!(declares_strict_tools(
            &json!({"messages": [{"role": "system", "content": [
            {"type": "tool_addition", "tool": {"type": "tool_definition",
                "definition": {"name": "read", "strict": true}}}]}]})
        ));
        assert!(declares_strict_tools(
            &json!({"toolConfig": {"tools": [{"toolSpec": {"name": "read", "strict": true}}]}})
        ));
        assert!(!declares_strict_tools(
            &json!({"tools": [{"name": "read", "strict": false}], "messages": []})
        ));
    }
}
