//! Extension protocol 2 and model providers through the real binary (README.md, Extensions,
//! "Providers"): the provider hooks and events of pi 1.6.0 (`before_provider_headers`,
//! `before_provider_request`, `after_provider_response`, `provider_stream_event`).
//!
//! The fixture `fixtures/extensions/v2_providers.py` reports what it is shown as `notify` notices,
//! so each test reads what the extension saw from pi-rs's stdout and what the provider got from
//! the fake provider.
//!
//! Reference: pi runs TypeScript extensions, not executables; none of these tests applies to it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::extensions::with_extensions;
use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::sse;
use crate::support::{Pi, Setup};

/// The text of a `notify` notice starting with `prefix` (any received so far or the next one),
/// without the prefix.
#[track_caller]
fn notice(pi: &mut Pi, prefix: &str) -> String {
    let record = pi.find(|r| {
        r["type"] == "extension_ui_request"
            && r["method"] == "notify"
            && r["message"].as_str().is_some_and(|m| m.starts_with(prefix))
    });
    record["message"].as_str().unwrap_or_default()[prefix.len()..].to_string()
}

/// fixtures/models.json with extra headers on the fake Anthropic provider.
fn models_with_headers() -> String {
    let text = fixture("models.json");
    text.replacen(
        "\"apiKey\": \"test-key\",",
        "\"apiKey\": \"test-key\",\n      \"headers\": {\"X-Team\": \"blue\", \"X-Drop-Me\": \"1\"},",
        1,
    )
}

#[test]
fn provider_hooks_see_the_extra_headers_change_the_request_and_observe_the_stream() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Hi there."]))]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2_providers.py"])
        .models_json(&models_with_headers());
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "hello SET-TEMPERATURE"}));
    pi.wait_for_event("agent_end");

    // The headers hook is shown the extra headers, never the API key's.
    let shown: Value = serde_json::from_str(&notice(&mut pi, "headers ")).expect("json");
    assert_eq!(shown, json!({"X-Drop-Me": "1", "X-Team": "blue"}));
    assert_eq!(notice(&mut pi, "payload "), "fake-claude");

    let requests = fake.wait_for_requests(1, pi.timeout());
    let request = &requests[0];
    assert_eq!(request.header("x-ext"), Some("v2_providers"));
    assert_eq!(request.header("x-drop-me"), None);
    assert_eq!(request.header("x-team"), Some("blue"));
    assert_eq!(request.header("x-api-key"), Some("test-key"));
    // The payload the extension returned is the body sent.
    assert_eq!(request.body["temperature"], 0.25);
    assert_eq!(request.body["model"], "fake-claude");

    // The events: the response's status and headers, then every parsed stream event.
    let response = notice(&mut pi, "response ");
    assert!(response.starts_with("200 text/event-stream"), "{response}");
    for event in ["message_start", "content_block_delta", "message_stop"] {
        assert_eq!(
            notice(&mut pi, &format!("stream {event} ")),
            "fake-anthropic/fake-claude anthropic-messages"
        );
    }
    // The reply itself is unchanged by the observers.
    let end = pi.find(|r| r["type"] == "agent_end");
    let last = end["messages"].as_array().and_then(|m| m.last()).cloned();
    assert_eq!(
        last.as_ref().map(|m| m["content"][0]["text"].clone()),
        Some(json!("Hi there."))
    );
    // The key reached the provider only.
    for index in 0..pi.records().len() {
        assert!(
            !pi.raw_line(index).contains("test-key"),
            "{}",
            pi.raw_line(index)
        );
    }
}

#[test]
fn a_silent_provider_hook_stalls_neither_the_agent_nor_an_abort() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["never"]))]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2_providers.py"])
        .settings(json!({"extensionHookTimeoutMs": 600_000}));
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "SILENT please"}));
    // The headers hook answered; the payload hook never will.
    notice(&mut pi, "headers ");
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["success"], true, "{state}");
    assert_eq!(state["data"]["isStreaming"], true, "{state}");
    assert!(fake.requests().is_empty());
    let abort = pi.command("a", "abort", json!({}));
    assert_eq!(abort["success"], true, "{abort}");
    pi.wait_for_event("agent_end");
    // The request never went out, and the agent takes the next prompt.
    pi.drain_for(Duration::from_millis(500));
    assert!(fake.requests().is_empty());
    let state = pi.command("s2", "get_state", json!({}));
    assert_eq!(state["data"]["isStreaming"], false, "{state}");
}

#[test]
fn a_provider_hook_past_its_deadline_fails_the_extension_and_the_request_goes_on() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Unchanged."]))]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2_providers.py"])
        .settings(json!({"extensionHookTimeoutMs": 1000}));
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "SILENT SET-TEMPERATURE"}));
    let error = pi.find(|r| r["type"] == "extension_error");
    assert_eq!(error["event"], "before_provider_request", "{error}");
    assert_eq!(
        error["error"], "no answer to before_provider_request within 1000 ms",
        "{error}"
    );
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    // The headers hook had answered; the payload went out as built.
    assert_eq!(requests[0].header("x-ext"), Some("v2_providers"));
    assert!(requests[0].body.get("temperature").is_none());
}
