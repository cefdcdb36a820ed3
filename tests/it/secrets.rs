//! Credentials stay out of the protocol stream and out of child environments: a key echoed back
//! by the model or printed by a tool is `[redacted]` on stdout, and the shells pi starts do not
//! inherit provider key variables.
//!
//! Reference: 0.73.1 redacts nothing and passes its environment through, so these fail there by
//! design (pi-rs hardening).

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::sse;
use crate::support::{Pi, Setup};

const SECRET: &str = "sk-test-SECRET123";

/// The model says the key and has a tool print it: stdout never shows it (but the provider did
/// receive it as the credential).
#[test]
fn api_key_is_redacted_from_every_stdout_record() {
    let first = sse::AnthropicStream::new()
        .text(&[&format!("The key is {SECRET}.")])
        .tool_use(
            "toolu_leak",
            "bash",
            &[&json!({"command": format!("echo {SECRET}")}).to_string()],
        )
        .finish("tool_use");
    let fake = FakeProvider::start(vec![
        Reply::sse(first),
        Reply::sse(sse::anthropic_text(&[&format!("Again: {SECRET}")])),
    ]);
    let models = fixture("models.json").replace("\"test-key\"", &format!("\"{SECRET}\""));
    let setup = Setup::anthropic(&fake).models_json(&models);
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Leak it"}));
    pi.wait_for_event("agent_settled");
    pi.command("g1", "get_messages", json!({}));
    pi.command("g2", "get_state", json!({}));
    pi.command("b1", "bash", json!({"command": format!("echo {SECRET}")}));

    let requests = fake.requests();
    assert_eq!(
        requests[0].header("x-api-key"),
        Some(SECRET),
        "the key is really used"
    );
    for index in 0..pi.records().len() {
        let line = pi.raw_line(index);
        assert!(
            !line.contains(SECRET),
            "record {index} leaks the key: {line}"
        );
    }
    let redacted = |pred: &dyn Fn(&Value) -> bool| {
        (0..pi.records().len())
            .filter(|&i| pred(&pi.records()[i]))
            .any(|i| pi.raw_line(i).contains("[redacted]"))
    };
    assert!(redacted(
        &|r| r["assistantMessageEvent"]["type"] == "text_delta"
    ));
    assert!(redacted(&|r| r["type"] == "tool_execution_end"));
    assert!(redacted(&|r| r["type"] == "agent_end"));
    assert!(redacted(&|r| r["id"] == "g1"));
    assert!(redacted(&|r| r["id"] == "b1"));
    let end = pi
        .records()
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool end")
        .clone();
    assert_eq!(end["result"]["content"][0]["text"], "[redacted]\n");
    fake.finish();
}

fn env_of(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect()
}

/// `env` run by the bash tool and by RPC bash shows neither ANTHROPIC_API_KEY nor OPENAI_API_KEY
/// although both are set in pi's environment. Checked on the provider side too, where nothing
/// is redacted.
#[test]
fn shells_do_not_inherit_provider_keys() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_bash("toolu_env", "env")),
        Reply::sse(sse::anthropic_text(&["Seen."])),
    ]);
    let setup = Setup::anthropic(&fake)
        .env("ANTHROPIC_API_KEY", "sk-env-anthropic-456")
        .env("OPENAI_API_KEY", "sk-env-openai-789")
        .env("PI_IT_MARKER", "visible");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Show env"}));
    pi.wait_for_event("agent_settled");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let result = requests[1]
        .messages()
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .find(|b| b["type"] == "tool_result")
        .expect("tool result")["content"]
        .clone();
    let text = match &result {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let names = env_of(&text);
    assert!(names.contains(&"PI_IT_MARKER"), "env ran: {text}");
    assert!(!names.contains(&"ANTHROPIC_API_KEY"), "{text}");
    assert!(!names.contains(&"OPENAI_API_KEY"), "{text}");
    assert!(!text.contains("sk-env-"), "{text}");

    let response = pi.command("b1", "bash", json!({"command": "env"}));
    let output = response["data"]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let names = env_of(&output);
    assert!(names.contains(&"PI_IT_MARKER"), "{output}");
    assert!(!names.contains(&"ANTHROPIC_API_KEY"), "{output}");
    assert!(!names.contains(&"OPENAI_API_KEY"), "{output}");
    fake.finish();
}
