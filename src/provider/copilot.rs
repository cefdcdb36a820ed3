//! What GitHub Copilot adds to the wire APIs it is served through (pi-ai
//! `providers/github-copilot-headers.js` and the Copilot OAuth provider): per-request headers
//! (who initiated the request, vision input). The API host named in the Copilot token is
//! `config::oauth::copilot_base_url`.

use super::types::StreamRequest;
use crate::config::oauth::COPILOT_PROVIDER as PROVIDER;
use crate::messages::AgentMessage;

/// `X-Initiator` (`user` when the last message is the user's, else `agent`), `Openai-Intent`,
/// and `Copilot-Vision-Request` when images are sent; empty for other providers.
pub fn dynamic_headers(request: &StreamRequest) -> Vec<(String, String)> {
    if request.model.provider != PROVIDER {
        return Vec::new();
    }
    let initiator = match request.messages.last() {
        Some(AgentMessage::User(_)) | None => "user",
        Some(_) => "agent",
    };
    let mut headers = vec![
        ("X-Initiator".to_string(), initiator.to_string()),
        (
            "Openai-Intent".to_string(),
            "conversation-edits".to_string(),
        ),
    ];
    // Images anywhere in the conversation, the kept start included.
    if request.history_facts().images {
        headers.push(("Copilot-Vision-Request".to_string(), "true".to_string()));
    }
    headers
}

/// The dynamic headers followed by the caller's (the caller's win).
pub fn extra_headers(request: &StreamRequest) -> Vec<(String, String)> {
    let mut headers = dynamic_headers(request);
    headers.extend(request.headers.iter().cloned());
    headers
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assistant, model, request, tool_result, user};
    use super::*;

    #[test]
    fn headers_follow_pi() {
        let mut r = request(
            model("openai-completions", PROVIDER, "gpt-4.1"),
            vec![user("hi")],
        );
        assert_eq!(
            dynamic_headers(&r),
            [
                ("X-Initiator".to_string(), "user".to_string()),
                (
                    "Openai-Intent".to_string(),
                    "conversation-edits".to_string()
                )
            ]
        );
        r.messages.push(AgentMessage::Assistant(assistant(
            "openai-completions",
            PROVIDER,
            "gpt-4.1",
            vec![],
        )));
        r.messages.push(tool_result("c1", "bash", "out", false));
        assert_eq!(dynamic_headers(&r)[0].1, "agent");
        r.model.provider = "openai".into();
        assert!(dynamic_headers(&r).is_empty());
    }
}
