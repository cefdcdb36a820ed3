//! Credentials and config values as pi 1.6.0 reads them: `$NAME`/`${NAME}` templates with `$$`
//! and `$!` escapes in models.json and auth.json, auth.json's `env` object, and
//! `ANTHROPIC_AUTH_TOKEN` sent as a bearer. Each scenario passes against pi 1.6.0 too
//! (`PI_TEST_BIN=<pi 1.6.0> cargo test --test it config_values::`).

use serde_json::json;

use crate::fake_provider::{FakeProvider, Reply};
use crate::support::{Pi, Setup, Workspace, assistant_messages};

/// One prompt; returns the request the fake saw.
fn one_turn(pi: &mut Pi, fake: &FakeProvider) -> crate::fake_provider::RecordedRequest {
    pi.send(json!({"id": "p", "type": "prompt", "message": "Say hello"}));
    let run = pi.records_until_event("agent_end");
    let messages = assistant_messages(&run);
    assert_eq!(messages[0]["stopReason"], "stop", "{}", messages[0]);
    fake.requests().remove(0)
}

#[test]
fn models_json_keys_and_headers_are_templates() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai/text.sse")]);
    let models = r#"{"providers": {"tpl": {
        "baseUrl": "__BASE_URL__/v1", "api": "openai-completions",
        "apiKey": "sk-${TPL_KEY}-$TPL_SUFFIX",
        "headers": {"X-Escaped": "$$TPL_KEY and $!", "X-Joined": "a${TPL_SUFFIX}b", "X-Literal": "cost $5"},
        "models": [{"id": "tpl-model"}]}}}"#;
    let setup = Setup::new(&fake, "tpl", "tpl-model")
        .models_json(models)
        .env("TPL_KEY", "secret123456")
        .env("TPL_SUFFIX", "zz");
    let mut pi = Pi::spawn(&setup);
    let request = one_turn(&mut pi, &fake);
    assert_eq!(
        request.header("authorization"),
        Some("Bearer sk-secret123456-zz")
    );
    assert_eq!(request.header("x-escaped"), Some("$TPL_KEY and !"));
    assert_eq!(request.header("x-joined"), Some("azzb"));
    assert_eq!(request.header("x-literal"), Some("cost $5"));
}

/// A key naming an unset variable leaves the provider without credentials: no model of it is
/// available, and asking for it fails before any request.
#[test]
fn a_key_naming_an_unset_variable_is_no_key() {
    let fake = FakeProvider::start(Vec::new());
    let models = r#"{"providers": {"tpl": {
        "baseUrl": "__BASE_URL__/v1", "api": "openai-completions", "apiKey": "$TPL_UNSET_KEY",
        "models": [{"id": "tpl-model"}]}}}"#;
    let setup = Setup::new(&fake, "tpl", "tpl-model").models_json(models);
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("m", "get_available_models", json!({}));
    assert_eq!(response["data"]["models"], json!([]));
    assert!(fake.requests().is_empty());
}

/// auth.json's `key` is a template too, and the entry's `env` object comes before the
/// environment for the variables it names.
#[test]
fn auth_json_keys_read_the_entrys_env_first() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai/text.sse")]);
    let workspace = Workspace::new();
    std::fs::write(
        workspace.agent_dir().join("auth.json"),
        r#"{"fake-openai": {"type": "api_key", "key": "$ENTRY_KEY", "env": {"ENTRY_KEY": "from-the-entry-123"}}}"#,
    )
    .unwrap();
    let models = r#"{"providers": {"fake-openai": {
        "baseUrl": "__BASE_URL__/v1", "api": "openai-completions", "apiKey": "unused-config-key",
        "models": [{"id": "fake-gpt"}]}}}"#;
    let setup = Setup::new(&fake, "fake-openai", "fake-gpt")
        .models_json(models)
        .env("ENTRY_KEY", "from-the-environment");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let request = one_turn(&mut pi, &fake);
    assert_eq!(
        request.header("authorization"),
        Some("Bearer from-the-entry-123")
    );
}

/// `ANTHROPIC_AUTH_TOKEN` wins over the API key variables and travels as a bearer, without an
/// `x-api-key`.
#[test]
fn anthropic_auth_token_is_sent_as_a_bearer() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("anthropic/text.sse")]);
    let setup = Setup::new(&fake, "anthropic", "claude-sonnet-4-5")
        .models_json(r#"{"providers": {"anthropic": {"baseUrl": "__BASE_URL__"}}}"#)
        .env("ANTHROPIC_AUTH_TOKEN", "bearer-token-123456")
        .env("ANTHROPIC_API_KEY", "sk-ant-api-key-123456");
    let mut pi = Pi::spawn(&setup);
    let request = one_turn(&mut pi, &fake);
    assert_eq!(
        request.header("authorization"),
        Some("Bearer bearer-token-123456")
    );
    assert_eq!(request.header("x-api-key"), None);
}

/// models.json `samplingParams` and `samplingParamsByThinkingLevel` (of the clamped level) are
/// written over the body last; `cost.tiers` price the whole request by its input size.
#[test]
fn sampling_params_reach_the_body_and_cost_tiers_price_the_turn() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai/text.sse")]);
    let models = r#"{"providers": {"tpl": {
        "baseUrl": "__BASE_URL__/v1", "api": "openai-completions", "apiKey": "sk-sampling-123456",
        "models": [{"id": "tpl-model", "reasoning": true,
            "samplingParams": {"temperature": 0.3, "top_k": 20, "stream": true},
            "samplingParamsByThinkingLevel": {"high": {"temperature": 0.9, "min_p": 0.05}},
            "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0,
                     "tiers": [{"inputTokensAbove": 1000, "input": 10, "output": 20, "cacheRead": 0, "cacheWrite": 0},
                               {"inputTokensAbove": 100000, "input": 99, "output": 99, "cacheRead": 0, "cacheWrite": 0}]}}]}}}"#;
    let setup = Setup::new(&fake, "tpl", "tpl-model")
        .models_json(models)
        .arg("--thinking")
        .arg("high");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "Say hello"}));
    let run = pi.records_until_event("agent_end");
    let message = assistant_messages(&run).remove(0);
    assert_eq!(message["stopReason"], "stop", "{message}");
    let request = fake.requests().remove(0);
    assert_eq!(request.body["temperature"], 0.9);
    assert_eq!(request.body["top_k"], 20);
    assert_eq!(request.body["min_p"], 0.05);
    // 1843 input tokens are above the first tier's 1000: $10 / M for all of them.
    let cost = &message["usage"]["cost"];
    assert!(
        (cost["input"].as_f64().unwrap() - 0.01843).abs() < 1e-12,
        "{cost}"
    );
    assert!(
        (cost["output"].as_f64().unwrap() - 0.00024).abs() < 1e-12,
        "{cost}"
    );
}
