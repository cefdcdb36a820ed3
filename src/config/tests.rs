//! Tests of `Config` as a whole: files in a temp agent dir, an injected environment.

use super::*;
use std::fs;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("pi-rs-config-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn write(&self, name: &str, text: &str) {
        let path = self.0.join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn load(dir: &TempDir, env: &[(&str, &str)]) -> Config {
    Config::load_with_env(
        dir.0.clone(),
        dir.0.join("project"),
        Env::from_pairs(env.iter().copied()),
        Some(true),
    )
}

const MOCK_MODELS: &str = r#"{
  "providers": {
    "mock": {
      "baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions", "apiKey": "MOCK_ENV",
      "headers": {"X-Static": "static-value", "X-From-Env": "HEADER_ENV"},
      "authHeader": true,
      "models": [{"id": "mock-1", "reasoning": true, "headers": {"X-Model": "!echo from-command"}}, {"id": "mock-2"}]
    }
  }
}"#;

#[test]
fn key_priority_runtime_auth_oauth_env_models_json() {
    let dir = TempDir::new("priority");
    let future = crate::time::now_ms() as f64 + 3_600_000.0;
    dir.write(
        "auth.json",
        &format!(
            r#"{{"openai": {{"type": "api_key", "key": "auth-openai-key"}},
                 "anthropic": {{"type": "oauth", "access": "oauth-access-token", "refresh": "r-token-123", "expires": {future}}},
                 "github-copilot": {{"type": "oauth", "access": "old-access", "refresh": "r", "expires": 1}},
                 "xai": {{"type": "api_key", "key": "!echo xai-from-cmd"}},
                 "groq": {{"type": "api_key", "key": "GROQ_INDIRECT"}}}}"#
        ),
    );
    dir.write("models.json", MOCK_MODELS);
    let env = [
        ("OPENAI_API_KEY", "env-openai-key"),
        ("ANTHROPIC_API_KEY", "env-anthropic"),
        ("COPILOT_GITHUB_TOKEN", "gh-env-token"),
        ("GROQ_INDIRECT", "groq-indirect-value"),
        ("MOCK_ENV", "mock-env-key"),
        ("HEADER_ENV", "header-from-env"),
        ("MISTRAL_API_KEY", "mistral-env-key"),
        // The expired Copilot login's refresh goes to a closed local port, never the internet.
        ("PI_OAUTH_GITHUB_API_URL", "http://127.0.0.1:1"),
    ];
    let mut c = load(&dir, &env);
    assert_eq!(c.api_key("openai").as_deref(), Some("auth-openai-key"));
    assert_eq!(
        c.api_key("anthropic").as_deref(),
        Some("oauth-access-token")
    );
    // An expired login whose refresh fails gives no key (as in pi: no fall back to the env
    // var) and a notice saying how to log in again.
    assert_eq!(c.api_key("github-copilot"), None);
    assert!(
        c.auth_notice("github-copilot")
            .unwrap()
            .contains("pi login github-copilot")
    );
    assert_eq!(c.auth_notice("anthropic"), None);
    assert_eq!(c.api_key("xai").as_deref(), Some("xai-from-cmd"));
    assert_eq!(c.api_key("groq").as_deref(), Some("groq-indirect-value"));
    assert_eq!(c.api_key("mistral").as_deref(), Some("mistral-env-key"));
    assert_eq!(c.api_key("mock").as_deref(), Some("mock-env-key"));
    assert_eq!(c.api_key("cerebras"), None);
    c.set_runtime_api_key("openai", "runtime-key-1".into());
    assert_eq!(c.api_key("openai").as_deref(), Some("runtime-key-1"));
    assert!(!c.has_auth("cerebras"));
    c.set_runtime_api_key("cerebras", "runtime-key-2".into());
    assert!(c.has_auth("cerebras"));

    // Request headers: catalog < provider < model; authHeader adds the bearer key.
    let mock1 = c.find_model("mock", "mock-1").unwrap().clone();
    let (key, headers) = c.request_auth(&mock1).unwrap();
    assert_eq!(key.as_deref(), Some("mock-env-key"));
    assert_eq!(
        headers,
        vec![
            ("X-Static".to_string(), "static-value".to_string()),
            ("X-From-Env".to_string(), "header-from-env".to_string()),
            ("X-Model".to_string(), "from-command".to_string()),
            (
                "Authorization".to_string(),
                "Bearer mock-env-key".to_string()
            ),
        ]
    );
    let copilot = c
        .all_models()
        .iter()
        .find(|m| m.provider == "github-copilot")
        .unwrap()
        .clone();
    assert!(
        c.request_headers(&copilot)
            .iter()
            .any(|(k, _)| k == "Copilot-Integration-Id")
    );

    let secrets = c.known_secrets();
    for s in [
        "auth-openai-key",
        "oauth-access-token",
        "r-token-123",
        "env-openai-key",
        "gh-env-token",
        "groq-indirect-value",
        "mock-env-key",
        "header-from-env",
        "xai-from-cmd",
        "runtime-key-1",
    ] {
        assert!(
            secrets.iter().any(|k| k == s),
            "{s} missing from {secrets:?}"
        );
    }
}

#[test]
fn auth_json_without_key_does_not_fall_through() {
    let dir = TempDir::new("nofall");
    dir.write(
        "auth.json",
        r#"{"openai": {"type": "api_key", "key": "!exit 1"}}"#,
    );
    let c = load(&dir, &[("OPENAI_API_KEY", "env-key-value")]);
    assert_eq!(c.api_key("openai"), None);
    assert!(c.has_auth("openai"), "availability never runs commands");
}

#[test]
fn available_models_and_initial_model() {
    let dir = TempDir::new("available");
    dir.write("models.json", MOCK_MODELS);
    let c = load(&dir, &[]);
    let available = c.available_models();
    assert_eq!(
        available.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        vec!["mock-1", "mock-2"]
    );
    assert_eq!(c.initial_model().unwrap().id, "mock-1");
    let r = c
        .resolve_cli_model(Some("mock"), "zzz", false, None)
        .unwrap();
    assert_eq!(
        r.warning.as_deref(),
        Some("Model \"zzz\" not found for provider \"mock\". Using custom model id.")
    );
    assert_eq!(r.model.base_url, "http://127.0.0.1:9/v1");

    let empty = TempDir::new("available-none");
    let c = load(&empty, &[]);
    assert!(c.available_models().is_empty());
    assert!(c.initial_model().is_none());
    assert!(
        c.list_models(None)
            .starts_with("No models available. Use /login")
    );
    // auth.json was created.
    assert_eq!(fs::read_to_string(empty.0.join("auth.json")).unwrap(), "{}");
}

#[test]
fn compaction_model_overrides() {
    let dir = TempDir::new("compaction-overrides");
    dir.write(
        "settings.json",
        r#"{"compaction": {"reserveTokens": 1000, "modelOverrides": {
            "p/big.1": {"reserveTokens": 50000, "keepRecentTokens": 7},
            "p/bad": {"reserveTokens": -1, "keepRecentTokens": "x"}}}}"#,
    );
    let c = load(&dir, &[]);
    let model = |id: &str| Model {
        provider: "p".into(),
        id: id.into(),
        ..Model::placeholder()
    };
    assert_eq!(c.compaction_reserve_tokens(&model("big.1")), Ok(50000));
    assert_eq!(c.compaction_keep_recent_tokens(&model("big.1")), Ok(7));
    // pi 1.6.0 fails the compaction on a value that is not a non-negative integer.
    assert_eq!(
        c.compaction_reserve_tokens(&model("bad")),
        Err("Invalid compaction.modelOverrides[\"p/bad\"].reserveTokens setting: -1. Expected a non-negative safe integer.".into())
    );
    assert_eq!(
        c.compaction_keep_recent_tokens(&model("bad")),
        Err("Invalid compaction.modelOverrides[\"p/bad\"].keepRecentTokens setting: x. Expected a non-negative safe integer.".into())
    );
    assert_eq!(c.compaction_reserve_tokens(&model("other")), Ok(1000));
    dir.write(
        "settings.json",
        r#"{"compaction": {"keepRecentTokens": 2.5, "modelOverrides": {"p/list": [1, 2]}}}"#,
    );
    let c = load(&dir, &[]);
    assert_eq!(
        c.compaction_reserve_tokens(&model("list")),
        Err(
            "Invalid compaction.modelOverrides[\"p/list\"] setting: 1,2. Expected an object."
                .into()
        )
    );
    assert_eq!(
        c.compaction_keep_recent_tokens(&model("other")),
        Err("Invalid compaction.keepRecentTokens setting: 2.5. Expected a non-negative safe integer.".into())
    );
    assert_eq!(c.compaction_reserve_tokens(&model("other")), Ok(16384));
}

#[test]
fn settings_getters_and_setters() {
    let dir = TempDir::new("settings");
    dir.write(
        "settings.json",
        r#"{"queueMode": "all", "retry": {"maxDelayMs": 7000, "maxRetries": 5}, "compaction": {"keepRecentTokens": 100},
            "defaultThinkingLevel": "high", "sessionDir": "~/sessions", "enabledModels": ["a", "b*"],
            "thinkingBudgets": {"low": 1000}, "images": {"blockImages": true}, "shellPath": "/bin/bash",
            "defaultProvider": "openai", "defaultModel": "gpt-5.4",
            "modelThinkingLevels": {"openai/gpt-5.4": "low", "openai/bad": "loud"}}"#,
    );
    dir.write(
        "project/.pi/settings.json",
        r#"{"compaction": {"reserveTokens": 999}}"#,
    );
    let mut c = load(&dir, &[("HOME", "/home/u")]);
    assert_eq!(c.steering_mode(), QueueMode::All);
    assert_eq!(c.follow_up_mode(), QueueMode::OneAtATime);
    assert_eq!(c.retry_max_retries(), 5);
    assert_eq!(c.retry_base_delay_ms(), 2000);
    assert_eq!(c.provider_max_retry_delay_ms(), 7000);
    let model = c.available_models().into_iter().next();
    let placeholder = crate::config::Model::placeholder();
    let model = model.as_ref().unwrap_or(&placeholder);
    assert_eq!(c.compaction_reserve_tokens(model), Ok(999));
    assert_eq!(c.compaction_keep_recent_tokens(model), Ok(100));
    assert!(c.compaction_enabled());
    assert_eq!(c.default_thinking_level(), Some(ThinkingLevel::High));
    assert_eq!(c.session_dir(), Some(PathBuf::from("/home/u/sessions")));
    assert_eq!(
        c.enabled_models(),
        Some(vec!["a".to_string(), "b*".to_string()])
    );
    assert_eq!(c.thinking_budget(ThinkingLevel::Low), Some(1000));
    assert_eq!(c.thinking_budget(ThinkingLevel::High), None);
    assert!(c.block_images());
    assert_eq!(c.shell_path().as_deref(), Some("/bin/bash"));
    assert_eq!(
        c.setting("retry.provider.maxRetryDelayMs"),
        Some(&Value::from(7000))
    );

    assert_eq!(
        c.model_thinking_level("openai", "gpt-5.4"),
        Some(ThinkingLevel::Low)
    );
    assert_eq!(c.model_thinking_level("openai", "bad"), None);
    assert_eq!(c.model_thinking_level("openai", "other"), None);

    c.set_compaction_enabled(false);
    c.set_follow_up_mode("all");
    assert_eq!(c.follow_up_mode(), QueueMode::All);
    assert!(!c.compaction_enabled());
    assert!(crate::disk::flush(std::time::Duration::from_secs(10)));
    let written: Value =
        serde_json::from_str(&fs::read_to_string(dir.0.join("settings.json")).unwrap()).unwrap();
    // Only the modified keys changed; the migrated legacy keys are written in their new form.
    assert_eq!(written["defaultProvider"], "openai");
    assert_eq!(written["modelThinkingLevels"]["openai/gpt-5.4"], "low");
    assert_eq!(written["defaultModel"], "gpt-5.4");
    assert_eq!(
        written["compaction"],
        serde_json::json!({"keepRecentTokens": 100, "enabled": false})
    );
    assert_eq!(written["steeringMode"], "all");
    assert_eq!(written["followUpMode"], "all");
    assert!(written.get("queueMode").is_none());
    assert_eq!(c.default_model(), Some("gpt-5.4"));
    assert_eq!(
        c.initial_model().unwrap().id,
        "gpt-5.4",
        "saved default wins without auth"
    );
}

#[test]
fn broken_files_become_warnings() {
    let dir = TempDir::new("broken");
    dir.write("settings.json", "{ nope");
    dir.write(
        "models.json",
        r#"{"providers": {"x": {"models": [{"id": "a"}]}}}"#,
    );
    let c = load(&dir, &[]);
    let warnings: Vec<&str> = c
        .diagnostics
        .iter()
        .map(|Diagnostic::Warning(w)| w.as_str())
        .collect();
    assert!(
        warnings[0].starts_with("(runtime creation, global settings) "),
        "{warnings:?}"
    );
    assert!(
        warnings[1]
            .starts_with("errors loading models.json:\nFailed to load models.json: Provider x:")
    );
    assert!(warnings[1].ends_with(&format!("File: {}", dir.0.join("models.json").display())));
    assert_eq!(c.all_models().len(), 1698);
}

#[test]
fn extension_providers_replace_models_override_fields_and_come_undone() {
    let dir = TempDir::new("ext-providers");
    dir.write("models.json", MOCK_MODELS);
    let mut config = load(&dir, &[("PROXY_KEY", "proxy-key-value-1")]);
    let anthropic_before = config
        .all_models()
        .iter()
        .filter(|m| m.provider == "anthropic")
        .count();
    assert!(anthropic_before > 1);
    let models = serde_json::json!([{"id": "only-one", "name": "Only one"}]);
    let replace = serde_json::json!({"baseUrl": "http://127.0.0.1:9", "apiKey": "$PROXY_KEY",
        "api": "anthropic-messages", "models": models});
    config.register_provider("anthropic", &replace).unwrap();
    let ids: Vec<&str> = config
        .all_models()
        .iter()
        .filter(|m| m.provider == "anthropic")
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["only-one"]);
    assert!(config.find_model("anthropic", "claude-opus-5-5").is_none());
    assert_eq!(
        config.api_key("anthropic").as_deref(),
        Some("proxy-key-value-1")
    );
    assert!(
        config
            .known_secrets()
            .contains(&"proxy-key-value-1".to_string())
    );
    // Headers only: models.json's provider keeps its models and key.
    let headers = serde_json::json!({"headers": {"X-Team": "t"}});
    config.register_provider("mock", &headers).unwrap();
    let mock = config
        .all_models()
        .iter()
        .find(|m| m.provider == "mock")
        .cloned();
    let mock = mock.expect("mock models stay");
    let (_, request_headers) = config.request_auth(&mock).unwrap();
    assert!(request_headers.contains(&("X-Team".into(), "t".into())));
    // Commands and bad shapes are refused and change nothing.
    let command = serde_json::json!({"apiKey": "!echo hi", "baseUrl": "http://x"});
    assert!(config.register_provider("cmd", &command).is_err());
    assert!(config.register_provider("a/b", &headers).is_err());
    assert!(
        config
            .register_provider("x", &serde_json::json!({}))
            .is_err()
    );
    // Undone: the built-ins come back.
    assert!(config.unregister_provider("anthropic"));
    assert!(!config.unregister_provider("anthropic"));
    let anthropic_after = config
        .all_models()
        .iter()
        .filter(|m| m.provider == "anthropic")
        .count();
    assert_eq!(anthropic_after, anthropic_before);
}

#[test]
fn provider_credential_loads_again_only_when_auth_json_or_models_json_changes() {
    let dir = TempDir::new("provider-credential");
    let auth = |key: &str| format!(r#"{{"cred-test": {{"type": "api_key", "key": "{key}"}}}}"#);
    dir.write("auth.json", &auth("sk-first"));
    let first = credential_config(&dir.0);
    assert_eq!(
        provider_credential(&dir.0, "cred-test").as_deref(),
        Some("sk-first")
    );
    // Unchanged files: the same configuration answers, nothing is loaded again.
    assert!(std::sync::Arc::ptr_eq(&first, &credential_config(&dir.0)));
    // A key of the same length written at once (the same modification time) is still seen.
    dir.write("auth.json", &auth("sk-other"));
    assert_eq!(
        provider_credential(&dir.0, "cred-test").as_deref(),
        Some("sk-other")
    );
    let second = credential_config(&dir.0);
    assert!(!std::sync::Arc::ptr_eq(&first, &second));
    // models.json changing loads again too (its `apiKey` is a source).
    dir.write(
        "models.json",
        r#"{"providers": {"file-keyed": {"baseUrl": "http://127.0.0.1:1", "apiKey": "sk-file", "api": "openai-completions", "models": [{"id": "m"}]}}}"#,
    );
    assert_eq!(
        provider_credential(&dir.0, "file-keyed").as_deref(),
        Some("sk-file")
    );
    assert!(!std::sync::Arc::ptr_eq(&second, &credential_config(&dir.0)));
    dir.write("auth.json", "{}");
    assert_eq!(provider_credential(&dir.0, "cred-test"), None);
}

#[test]
fn the_models_answer_is_all_and_available_models_written_once_per_list() {
    let dir = TempDir::new("models-answer");
    dir.write("models.json", MOCK_MODELS);
    let mut config = load(&dir, &[("ANTHROPIC_API_KEY", "sk-a"), ("MOCK_ENV", "k")]);
    let expected = |config: &Config| {
        serde_json::json!({"all": config.all_models(), "available": config.available_models()})
            .to_string()
    };
    // First asked: written from a copy of the registry, kept in the registry itself.
    let first = config.models_for_answer();
    assert!(matches!(first.source, models_json::ListSource::Build(_)));
    let text = first.write();
    let again = config.models_for_answer();
    assert!(matches!(again.source, models_json::ListSource::Ready(_)));
    assert_eq!(again.write(), text);
    assert_eq!(text, expected(&config));
    assert!(text.contains(r#""id":"mock-2""#));
    // A registered provider: its models join and the text is written again.
    let provider = serde_json::json!({"baseUrl": "http://127.0.0.1:9", "apiKey": "x",
        "api": "openai-completions", "models": [{"id": "late-1"}]});
    config.register_provider("late", &provider).unwrap();
    let after = config.models_for_answer();
    assert!(matches!(after.source, models_json::ListSource::Build(_)));
    let text = after.write();
    assert!(text.contains(r#""id":"late-1""#));
    assert_eq!(text, expected(&config));
}

#[test]
fn nothing_but_the_models_query_writes_the_models_text() {
    let dir = TempDir::new("models-text-unbuilt");
    let config = load(&dir, &[("ANTHROPIC_API_KEY", "sk-a")]);
    assert!(config.initial_model().is_some());
    assert!(!config.available_models().is_empty());
    assert!(config.all_models().len() > 1000);
    assert!(config.registry.list_json_ready().is_none());
    config.models_for_answer().write();
    assert!(config.registry.list_json_ready().is_some());
}
