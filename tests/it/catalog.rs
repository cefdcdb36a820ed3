//! The built-in catalog as pi 1.6.0 offers it: `get_available_models` with keys set and the model
//! each single key starts with, compared with 1.6.0's own answers (`fixtures/models/`, written by
//! `tests/gen_model_fixtures.sh` from the installed reference).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::support::{Pi, Setup, Workspace, assistant_messages, binary, isolate_env, run_words};

/// Starts pi-rs in RPC mode without `--provider`/`--model` (the catalog decides), with only
/// `env` as credentials and `auth_json` as auth.json; sends `command` and returns its response
/// data.
fn rpc_data(env: &[(&str, &str)], auth_json: Option<&str>, command: &str) -> Value {
    rpc_data_with(env, auth_json, &[], command)
}

/// `rpc_data` with more arguments (`--model …`).
fn rpc_data_with(
    env: &[(&str, &str)],
    auth_json: Option<&str>,
    args: &[&str],
    command: &str,
) -> Value {
    let workspace = Workspace::new();
    if let Some(text) = auth_json {
        std::fs::write(workspace.agent_dir().join("auth.json"), text).expect("write auth.json");
    }
    let mut cmd = Command::new(binary());
    cmd.current_dir(workspace.cwd());
    isolate_env(&mut cmd, &workspace.agent_dir(), workspace.root());
    cmd.envs(env.iter().copied())
        .args(["--mode", "rpc", "--no-session"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("start pi-rs");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{}", json!({"type": command, "id": "1"})).expect("send");
    drop(stdin);
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut data = Value::Null;
    for line in stdout.lines() {
        let record: Value = serde_json::from_str(&line.expect("line")).expect("json record");
        if record["type"] == "response" && record["id"] == "1" {
            assert_eq!(record["success"], true, "{record}");
            data = record["data"].clone();
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    data
}

/// Every field of every model, as 1.6.0 sends them (key order aside), with an Anthropic and a
/// Radius key: prices, tiers, limits, prompt-cache lifetimes, radius's own fields.
#[test]
fn available_models_with_two_keys_are_pi_1_6_0s() {
    let expected: Value =
        serde_json::from_str(&fixture("models/available_two_keys.json")).expect("fixture");
    let data = rpc_data(
        &[("ANTHROPIC_API_KEY", "k"), ("RADIUS_API_KEY", "k")],
        None,
        "get_available_models",
    );
    let got = data["models"].as_array().expect("models");
    let expected = expected.as_array().expect("fixture list");
    assert_eq!(got.len(), expected.len());
    for (got, expected) in got.iter().zip(expected) {
        assert_eq!(got, expected);
    }
}

/// With a key for every provider (and Cloudflare's ids, a Codex login, ambient AWS and Vertex
/// credentials): the same 1698 models in the same order, with the same limits and costs.
#[test]
fn available_models_with_every_key_are_pi_1_6_0s() {
    let mut env: Vec<(String, String)> = default_keys()
        .into_iter()
        .map(|(name, _, _)| (name, "k".to_string()))
        .collect();
    for (name, value) in [
        ("CLOUDFLARE_ACCOUNT_ID", "acc"),
        ("CLOUDFLARE_GATEWAY_ID", "gw"),
        ("AWS_ACCESS_KEY_ID", "a"),
        ("AWS_SECRET_ACCESS_KEY", "b"),
        ("GOOGLE_CLOUD_PROJECT", "p"),
        ("GOOGLE_CLOUD_LOCATION", "l"),
        // Stands in for ~/.config/gcloud/application_default_credentials.json: it exists, which
        // is all the availability check asks.
        ("GOOGLE_APPLICATION_CREDENTIALS", "/dev/null"),
    ] {
        env.push((name.to_string(), value.to_string()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let codex = r#"{"openai-codex":{"type":"oauth","access":"a","refresh":"r","expires":9999999999999,"accountId":"acc"}}"#;
    let data = rpc_data(&env, Some(codex), "get_available_models");
    let got: Vec<String> = data["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| {
            format!(
                "{}\t{}\t{}\t{}\t{}",
                m["provider"].as_str().unwrap(),
                m["id"].as_str().unwrap(),
                m["contextWindow"],
                m["maxTokens"],
                sorted(&m["cost"])
            )
        })
        .collect();
    let expected: Vec<String> = fixture("models/available_all_keys.tsv")
        .lines()
        .map(|line| {
            let (head, cost) = line.rsplit_once('\t').expect("cost column");
            format!("{head}\t{}", sorted(&serde_json::from_str(cost).unwrap()))
        })
        .collect();
    assert_eq!(got.len(), 1698);
    assert_eq!(got.len(), expected.len());
    for (got, expected) in got.iter().zip(&expected) {
        assert_eq!(got, expected);
    }
}

/// A value as compact JSON with object keys sorted.
fn sorted(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", json!(k), sorted(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(sorted).collect();
            format!("[{}]", items.join(","))
        }
        // Numbers compare as values: 1.6.0's fixture went through Python's float printing.
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
            Some(f) => format!("{f}"),
            None => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// `default_per_key.tsv`: each key variable and the provider/model 1.6.0 starts with.
fn default_keys() -> Vec<(String, String, String)> {
    fixture("models/default_per_key.tsv")
        .lines()
        .map(|line| {
            let mut f = line.split('\t').map(str::to_string);
            (f.next().unwrap(), f.next().unwrap(), f.next().unwrap())
        })
        .collect()
}

/// With one key set, pi-rs starts with the model 1.6.0 starts with (the placeholder where 1.6.0
/// has none: a Cloudflare key without its account id, typesafe's empty catalog).
#[test]
fn the_default_model_of_each_key_is_pi_1_6_0s() {
    let keys = default_keys();
    assert_eq!(keys.len(), 41);
    for (name, provider, id) in keys {
        let data = rpc_data(&[(name.as_str(), "k")], None, "get_state");
        assert_eq!(
            (
                data["model"]["provider"].as_str().unwrap_or("-"),
                data["model"]["id"].as_str().unwrap_or("-")
            ),
            (provider.as_str(), id.as_str()),
            "{name}"
        );
    }
}

/// A pi-ai model as pi.dev's catalog (and so models-store.json) holds it.
fn stored_model(provider: &str, id: &str, name: &str, base_url: &str, max_tokens: u64) -> Value {
    json!({"id": id, "name": name, "api": "anthropic-messages", "provider": provider,
           "baseUrl": base_url, "reasoning": true, "input": ["text", "image"],
           "cost": {"input": 1, "output": 2, "cacheRead": 0.1, "cacheWrite": 1.25},
           "contextWindow": 500000, "maxTokens": max_tokens})
}

/// models-store.json (what `pi update --models` and 1.6.0's periodic refresh write beside
/// models.json): a pi.dev catalog newer than the built-in data adds its models and replaces the
/// built-ins with their ids; an older one changes nothing. The new model resolves with its
/// stored entry by bare id and is the one the request goes to. Passes against pi 1.6.0 too.
#[test]
fn models_store_json_brings_new_models_without_a_new_build() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("anthropic/text.sse")]);
    let workspace = Workspace::new();
    let newer = 1_895_000_000_000_u64;
    let store = json!({
        "anthropic": {"lastModified": newer, "checkedAt": newer, "models": [
            stored_model("anthropic", "claude-opus-9", "Claude Opus 9", &fake.base_url(), 64000),
            stored_model("anthropic", "claude-opus-5-5", "Claude Opus 5.5 (refreshed)", "https://x", 1000),
            {"type": "image", "id": "an-image-model", "provider": "anthropic"},
        ]},
        "openai": {"lastModified": 1000, "models": [
            stored_model("openai", "gpt-from-an-old-store", "old", "https://x", 1),
        ]},
    });
    std::fs::write(
        workspace.agent_dir().join("models-store.json"),
        serde_json::to_string_pretty(&store).unwrap(),
    )
    .unwrap();
    let setup = Setup::new(&fake, "anthropic", "claude-opus-9")
        .env("ANTHROPIC_API_KEY", "sk-ant-store-test")
        .env("OPENAI_API_KEY", "sk-openai-store-test");
    let mut pi = Pi::spawn_in(&workspace, &setup);

    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["data"]["model"]["name"], "Claude Opus 9");
    assert_eq!(state["data"]["model"]["contextWindow"], 500000);

    let listed = pi.command("m", "get_available_models", json!({}));
    let models = listed["data"]["models"].as_array().expect("models");
    let find = |provider: &str, id: &str| {
        models
            .iter()
            .find(|m| m["provider"] == provider && m["id"] == id)
            .cloned()
    };
    assert_eq!(
        find("anthropic", "claude-opus-5-5").expect("replaced")["name"],
        "Claude Opus 5.5 (refreshed)"
    );
    let anthropic: Vec<&str> = models
        .iter()
        .filter(|m| m["provider"] == "anthropic")
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(anthropic.last(), Some(&"claude-opus-9"), "appended");
    assert!(find("anthropic", "an-image-model").is_none());
    assert!(find("openai", "gpt-from-an-old-store").is_none());
    assert!(find("openai", "gpt-6.2-sol").is_some());

    let set = pi.command(
        "set",
        "set_model",
        json!({"provider": "anthropic", "modelId": "claude-opus-9"}),
    );
    assert_eq!(set["data"]["name"], "Claude Opus 9", "{set}");
    pi.send(json!({"id": "p", "type": "prompt", "message": "Say hello"}));
    let run = pi.records_until_event("agent_end");
    assert_eq!(assistant_messages(&run)[0]["stopReason"], "stop");
    let request = fake.requests().remove(0);
    assert_eq!(request.body["model"], "claude-opus-9");
    assert_eq!(request.header("x-api-key"), Some("sk-ant-store-test"));
}

/// A bare id several providers have: the one authenticated provider's model, else 1.6.0's
/// ambiguity error (exit 1, nothing on stdout). Passes against pi 1.6.0 too.
#[test]
fn a_bare_id_on_several_providers_is_chosen_by_credentials_or_refused() {
    let keys = [("GEMINI_API_KEY", "g-key"), ("OPENCODE_API_KEY", "o-key")];
    let mut env: Vec<(&str, &str)> = keys.to_vec();
    let start = |env: &[(&str, &str)], model: &str| {
        let mut setup = Setup::at("http://127.0.0.1:9", "unused", "unused");
        for (name, value) in env {
            setup = setup.env(name, value);
        }
        run_words(
            &setup,
            &["--mode", "rpc", "--no-session", "--model", model],
            None,
        )
    };
    let run = start(&env, "gemini-3.7-flash");
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr.trim_end(),
        "Error: Model \"gemini-3.7-flash\" is ambiguous across providers: \
         google-vertex/gemini-3.7-flash, google/gemini-3.7-flash, opencode/gemini-3.7-flash. More \
         than one matching provider is authenticated. Use --provider or provider/model."
    );
    env.retain(|(name, _)| *name == "OPENCODE_API_KEY");
    let data = rpc_data_with(&env, None, &["--model", "gemini-3.7-flash"], "get_state");
    assert_eq!(
        (&data["model"]["provider"], &data["model"]["id"]),
        (&json!("opencode"), &json!("gemini-3.7-flash"))
    );
}

/// A Codex id the catalog lacks (`openai-codex/gpt-5.2`) is 1.6.0's custom model id: everything
/// but the id and name, compat included, comes from the provider's default model (`gpt-6.2-sol`),
/// with `--provider`/`--model` and as `provider/id`. Passes against pi 1.6.0 too.
#[test]
fn a_codex_id_not_in_the_catalog_takes_the_default_models_settings() {
    let login = r#"{"openai-codex": {"type": "oauth", "access": "a", "refresh": "r",
        "expires": 9999999999999, "accountId": "acct"}}"#;
    let sol = rpc_data_with(
        &[],
        Some(login),
        &["--model", "openai-codex/gpt-6.2-sol"],
        "get_state",
    )["model"]
        .clone();
    assert!(sol["compat"]["supportsMidConvoEffort"] == true, "{sol}");
    for args in [
        &["--provider", "openai-codex", "--model", "gpt-5.2"][..],
        &["--model", "openai-codex/gpt-5.2"][..],
    ] {
        let model = rpc_data_with(&[], Some(login), args, "get_state")["model"].clone();
        let mut expected = sol.clone();
        expected["id"] = json!("gpt-5.2");
        expected["name"] = json!("gpt-5.2");
        assert_eq!(model, expected, "{args:?}");
    }
}
