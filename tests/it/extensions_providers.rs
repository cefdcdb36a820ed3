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
use crate::extensions_v2::ask;
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

/// fixtures/models.json with extra headers (and `authHeader`: an `Authorization` carrying the
/// key) on the fake Anthropic provider.
fn models_with_headers() -> String {
    let text = fixture("models.json");
    text.replacen(
        "\"apiKey\": \"test-key\",",
        "\"apiKey\": \"test-key\",\n      \"headers\": {\"X-Team\": \"blue\", \"X-Drop-Me\": \"1\"}, \"authHeader\": true,",
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

    // The headers hook is shown the extra headers, never those carrying the API key.
    let shown: Value = serde_json::from_str(&notice(&mut pi, "headers ")).expect("json");
    assert_eq!(shown, json!({"X-Drop-Me": "1", "X-Team": "blue"}));
    assert_eq!(notice(&mut pi, "payload "), "fake-claude");

    let requests = fake.wait_for_requests(1, pi.timeout());
    let request = &requests[0];
    assert_eq!(request.header("x-ext"), Some("v2_providers"));
    assert_eq!(request.header("x-drop-me"), None);
    assert_eq!(request.header("x-team"), Some("blue"));
    assert_eq!(request.header("x-api-key"), Some("test-key"));
    assert_eq!(request.header("authorization"), Some("Bearer test-key"));
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

#[test]
fn an_extension_registers_a_provider_that_pi_rs_serves_with_its_own_wire_api() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["From the proxy."])),
        Reply::sse(sse::anthropic_text(&["Through the gateway."])),
    ]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2_providers.py"])
        .env("EXT_PROXY_KEY", "proxy-secret-4711");
    let mut pi = Pi::spawn(&setup);
    let model = json!({"id": "proxy-claude", "name": "Proxy Claude", "reasoning": false,
        "input": ["text"], "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0},
        "contextWindow": 100000, "maxTokens": 4096});
    let register = json!({"type": "register_provider", "id": "r1", "name": "ext-proxy",
        "config": {"baseUrl": fake.base_url(), "apiKey": "$EXT_PROXY_KEY",
            "api": "anthropic-messages", "headers": {"X-Proxy": "yes"}, "models": [model]}});
    let answer = ask(&mut pi, &[register], "r1");
    assert_eq!(answer["result"], Value::Null, "{answer}");

    // Bad registrations are refused and change nothing.
    let command_key = json!({"type": "register_provider", "id": "r2", "name": "bad",
        "config": {"baseUrl": "http://127.0.0.1:9", "apiKey": "!cat /etc/passwd",
            "api": "anthropic-messages", "models": [model]}});
    let answer = ask(&mut pi, &[command_key], "r2");
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("!command")),
        "{answer}"
    );
    let no_api = json!({"type": "register_provider", "id": "r3", "name": "bad",
        "config": {"baseUrl": "http://127.0.0.1:9", "models": [model]}});
    let answer = ask(&mut pi, &[no_api], "r3");
    assert_eq!(
        answer["error"],
        "register_provider: Provider bad, model proxy-claude: no \"api\" specified. Set at provider or model level.",
        "{answer}"
    );

    let available = pi.command("m", "get_available_models", json!({}));
    let listed = |available: &Value, provider: &str, id: &str| {
        available["data"]["models"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["provider"] == provider && m["id"] == id))
    };
    assert!(
        listed(&available, "ext-proxy", "proxy-claude"),
        "{available}"
    );
    assert!(!listed(&available, "bad", "proxy-claude"), "{available}");

    let set = pi.command(
        "s",
        "set_model",
        json!({"provider": "ext-proxy", "modelId": "proxy-claude"}),
    );
    assert_eq!(set["success"], true, "{set}");
    pi.command("p", "prompt", json!({"message": "hello proxy"}));
    let end = pi.wait_for_event("agent_end");
    let reply = end["messages"].as_array().and_then(|m| m.last()).cloned();
    assert_eq!(
        reply
            .as_ref()
            .map(|m| (m["provider"].clone(), m["model"].clone())),
        Some((json!("ext-proxy"), json!("proxy-claude")))
    );
    let requests = fake.wait_for_requests(1, pi.timeout());
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some("proxy-secret-4711"));
    assert_eq!(requests[0].header("x-proxy"), Some("yes"));
    assert_eq!(requests[0].body["model"], "proxy-claude");

    // Unregistered: its models leave the registry.
    let answer = ask(
        &mut pi,
        &[json!({"type": "unregister_provider", "id": "u1", "name": "ext-proxy"})],
        "u1",
    );
    assert_eq!(answer["result"], true, "{answer}");
    let available = pi.command("m2", "get_available_models", json!({}));
    assert!(
        !listed(&available, "ext-proxy", "proxy-claude"),
        "{available}"
    );

    // Only headers for an existing provider: its models stay, its requests carry them.
    let set = pi.command(
        "s2",
        "set_model",
        json!({"provider": "fake-anthropic", "modelId": "fake-claude"}),
    );
    assert_eq!(set["success"], true, "{set}");
    let gateway = json!({"type": "register_provider", "id": "r4", "name": "fake-anthropic",
        "config": {"headers": {"X-Gateway": "g1"}}});
    assert_eq!(ask(&mut pi, &[gateway], "r4")["result"], Value::Null);
    let available = pi.command("m3", "get_available_models", json!({}));
    assert!(
        listed(&available, "fake-anthropic", "fake-claude-plain"),
        "{available}"
    );
    pi.command("p2", "prompt", json!({"message": "hello gateway"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(requests[1].header("x-gateway"), Some("g1"));
    assert_eq!(requests[1].header("x-api-key"), Some("test-key"));

    // The key never reached stdout.
    for index in 0..pi.records().len() {
        assert!(
            !pi.raw_line(index).contains("proxy-secret-4711"),
            "{}",
            pi.raw_line(index)
        );
    }
}

#[test]
fn an_extension_streams_the_responses_of_its_own_provider() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2_providers.py"]);
    let mut pi = Pi::spawn(&setup);
    let register = json!({"type": "register_provider", "id": "r1", "name": "ext-stream",
        "config": {"baseUrl": "http://127.0.0.1:9", "apiKey": "stream-key-0815",
            "api": "ext-stream-api", "streamSimple": true,
            "models": [{"id": "streamer", "name": "Streamer", "input": ["text"],
                "contextWindow": 32000, "maxTokens": 1000}]}});
    assert_eq!(ask(&mut pi, &[register], "r1")["result"], Value::Null);
    let set = pi.command(
        "s",
        "set_model",
        json!({"provider": "ext-stream", "modelId": "streamer"}),
    );
    assert_eq!(set["success"], true, "{set}");

    pi.command("p", "prompt", json!({"message": "hello stream"}));
    let end = pi.wait_for_event("agent_end");
    let reply = end["messages"].as_array().and_then(|m| m.last()).cloned();
    let reply = reply.expect("a reply");
    assert_eq!(reply["stopReason"], "stop", "{reply}");
    assert_eq!(reply["provider"], "ext-stream");
    assert_eq!(reply["api"], "ext-stream-api");
    assert_eq!(reply["usage"]["input"], 7);
    assert_eq!(reply["usage"]["totalTokens"], 10);
    // The extension got the key it registered; stdout shows it redacted.
    let text = reply["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("streamed: hello stream ("), "{text}");
    assert!(!text.contains("stream-key-0815"), "{text}");

    // An abort reaches the extension's stream at once.
    pi.command("p2", "prompt", json!({"message": "STREAM-HANG now"}));
    // The extension started its text block: the stream is open.
    pi.records_until_event("message_update");
    let abort = pi.command("a", "abort", json!({}));
    assert_eq!(abort["success"], true, "{abort}");
    let cancelled = notice(&mut pi, "cancelled ");
    assert!(cancelled.starts_with('s'), "{cancelled}");
    pi.wait_for_event("agent_end");
    assert!(fake.requests().is_empty());
    for index in 0..pi.records().len() {
        assert!(
            !pi.raw_line(index).contains("stream-key-0815"),
            "{}",
            pi.raw_line(index)
        );
    }
}

#[test]
fn providers_in_the_register_line_count_for_the_start_up_model() {
    let fake = FakeProvider::start(vec![]);
    // `--provider ext-boot --model booter`: a provider only the extension knows.
    let setup = with_extensions(
        Setup::new(&fake, "ext-boot", "booter"),
        &["v2_providers.py"],
    )
    .file("boot-providers", "");
    let mut pi = Pi::spawn(&setup);
    // The malformed one is refused, as register_provider refuses it.
    let error = pi.wait_for_event("extension_error");
    assert_eq!(error["event"], "register_provider", "{error}");
    assert!(
        error["extensionPath"]
            .as_str()
            .is_some_and(|p| p.ends_with("v2_providers.py")),
        "{error}"
    );
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["data"]["model"]["provider"], "ext-boot", "{state}");
    assert_eq!(state["data"]["model"]["id"], "booter", "{state}");
    // The extension streams it (the provider was mapped to it at start).
    pi.command("p", "prompt", json!({"message": "hello boot"}));
    let end = pi.wait_for_event("agent_end");
    let reply = end["messages"].as_array().and_then(|m| m.last()).cloned();
    let reply = reply.expect("a reply");
    assert_eq!(reply["api"], "ext-boot-api", "{reply}");
    let text = reply["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("streamed: hello boot ("), "{text}");
    assert!(fake.requests().is_empty());
}
