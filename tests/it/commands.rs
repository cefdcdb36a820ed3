//! Quick commands answered while idle: state, models, thinking levels, id echo.
//! Reference failures (expected) are named on each test.

use serde_json::json;

use crate::fake_provider::FakeProvider;
use crate::support::{Pi, Setup, assert_keys};

/// Reference: passes.
#[test]
fn get_state_has_the_documented_shape() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let response = pi.command("s1", "get_state", json!({}));
    assert_keys(&response, &["id", "type", "command", "success", "data"]);
    assert_eq!(response["command"], "get_state");
    assert_eq!(response["success"], true);
    let data = &response["data"];
    // --no-session: no sessionFile; no name set: no sessionName.
    assert_keys(
        data,
        &[
            "model",
            "thinkingLevel",
            "isStreaming",
            "isCompacting",
            "steeringMode",
            "followUpMode",
            "sessionId",
            "autoCompactionEnabled",
            "messageCount",
            "pendingMessageCount",
        ],
    );
    assert_eq!(
        data["model"],
        json!({
            "id": "fake-claude", "name": "Fake Claude", "api": "anthropic-messages",
            "provider": "fake-anthropic", "baseUrl": fake.base_url(), "reasoning": true,
            "input": ["text", "image"],
            "cost": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75},
            "contextWindow": 200000, "maxTokens": 16384
        })
    );
    assert_eq!(data["thinkingLevel"], "medium");
    assert_eq!(data["isStreaming"], false);
    assert_eq!(data["isCompacting"], false);
    assert_eq!(data["steeringMode"], "one-at-a-time");
    assert_eq!(data["followUpMode"], "one-at-a-time");
    assert!(data["sessionId"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(data["autoCompactionEnabled"], true);
    assert_eq!(data["messageCount"], 0);
    assert_eq!(data["pendingMessageCount"], 0);
    fake.finish();
}

/// Reference: passes.
#[test]
fn non_reasoning_model_starts_with_thinking_off() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::openai(&fake));
    let data = pi.command("s1", "get_state", json!({}))["data"].clone();
    assert_eq!(data["model"]["id"], "fake-gpt");
    assert_eq!(data["model"]["baseUrl"], format!("{}/v1", fake.base_url()));
    assert_eq!(data["thinkingLevel"], "off");
    fake.finish();
}

/// Reference: passes.
#[test]
fn get_available_models_lists_the_configured_models_in_order() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let response = pi.command("m1", "get_available_models", json!({}));
    let ids: Vec<String> = response["data"]["models"]
        .as_array()
        .expect("models array")
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["provider"].as_str().unwrap(),
                m["id"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        ids,
        [
            "fake-anthropic/fake-claude",
            "fake-anthropic/fake-claude-plain",
            "fake-openai/fake-gpt",
            "fake-openai/fake-gpt-reasoning",
        ]
    );
    fake.finish();
}

/// Reference: passes. A numeric id comes back as a number.
#[test]
fn numeric_id_is_echoed_with_its_type() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": 7, "type": "get_messages"}));
    let deadline = pi.deadline();
    let records = pi.recv_until(|r| r["type"] == "response", deadline);
    assert_eq!(
        records.last(),
        Some(
            &json!({"id": 7, "type": "response", "command": "get_messages", "success": true,
                     "data": {"messages": []}})
        )
    );
    fake.finish();
}

/// Reference: fails (`Unknown command: get_available_thinking_levels`, seed-only command,
/// FACTS.md §0.1).
#[test]
fn get_available_thinking_levels_follows_the_model() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let response = pi.command("t1", "get_available_thinking_levels", json!({}));
    assert_eq!(
        response["data"],
        json!({"levels": ["off", "minimal", "low", "medium", "high"]})
    );
    let response = pi.command(
        "t2",
        "set_model",
        json!({"provider": "fake-openai", "modelId": "fake-gpt"}),
    );
    assert_eq!(response["success"], true, "{response}");
    let response = pi.command("t3", "get_available_thinking_levels", json!({}));
    assert_eq!(response["data"], json!({"levels": ["off"]}));
    fake.finish();
}
