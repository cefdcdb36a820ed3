//! Every idle command's response shape, side events and errors (FACTS.md §2.1-§2.3, §1.10, seed):
//! model and thinking selection, queue modes, persisted toggles, last assistant text, session
//! name, messages.
//!
//! Reference: `get_last_assistant_text` answers `{}` instead of the seed's `{"text":null}`, and
//! invalid queue modes are accepted (FACTS §2.3) — those assertions fail there by design.

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::sse;
use crate::support::{Pi, Setup, assert_keys, state};

/// Sends a command and returns (the events since the last call, before its response; the
/// response). Responses to other commands are skipped.
#[track_caller]
fn command_with_events(pi: &mut Pi, id: &str, ty: &str, fields: Value) -> (Vec<Value>, Value) {
    let mut command = json!({"id": id, "type": ty});
    for (key, value) in fields.as_object().expect("fields object") {
        command[key] = value.clone();
    }
    pi.send(command);
    let deadline = pi.deadline();
    let mut records = pi.recv_until(|r| r["type"] == "response" && r["id"] == id, deadline);
    let response = records.pop().expect("the response");
    records.retain(|r| r["type"] != "response");
    (records, response)
}

fn ok(id: &str, command: &str) -> Value {
    json!({"id": id, "type": "response", "command": command, "success": true})
}

fn ok_with(id: &str, command: &str, data: Value) -> Value {
    json!({"id": id, "type": "response", "command": command, "success": true, "data": data})
}

fn error(id: &str, command: &str, message: &str) -> Value {
    json!({"id": id, "type": "response", "command": command, "success": false, "error": message})
}

fn thinking_changed(level: &str) -> Value {
    json!({"type": "thinking_level_changed", "level": level})
}

fn claude_plain(fake: &FakeProvider) -> Value {
    json!({
        "id": "fake-claude-plain", "name": "Fake Claude Plain", "api": "anthropic-messages",
        "provider": "fake-anthropic", "baseUrl": fake.base_url(), "reasoning": false,
        "input": ["text"],
        "cost": {"input": 1, "output": 5, "cacheRead": 0.1, "cacheWrite": 1.25},
        "contextWindow": 100000, "maxTokens": 8192
    })
}

/// set_model answers the full model; a change of effective thinking level is announced first,
/// and without settings the level is kept (clamped) across models, as pi 1.6.0; an unknown model
/// is `Model not found: <provider>/<id>`; the choice is the session's, never written to
/// settings.json.
#[test]
fn set_model_returns_the_model_and_announces_thinking_changes() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));

    let (events, response) = command_with_events(
        &mut pi,
        "m1",
        "set_model",
        json!({"provider": "fake-anthropic", "modelId": "fake-claude-plain"}),
    );
    assert_eq!(response, ok_with("m1", "set_model", claude_plain(&fake)));
    assert_eq!(
        events,
        [thinking_changed("off")],
        "medium → off on a plain model"
    );
    assert_eq!(state(&mut pi, "s1")["thinkingLevel"], "off");

    let (events, response) = command_with_events(
        &mut pi,
        "m2",
        "set_model",
        json!({"provider": "fake-anthropic", "modelId": "fake-claude"}),
    );
    assert_eq!(response["data"]["id"], "fake-claude");
    assert!(
        events.is_empty(),
        "back on a reasoning model the level stays off: {events:?}"
    );
    assert_eq!(state(&mut pi, "s1b")["thinkingLevel"], "off");

    let (events, response) = command_with_events(
        &mut pi,
        "m3",
        "set_model",
        json!({"provider": "fake-openai", "modelId": "fake-gpt-reasoning"}),
    );
    assert_eq!(response["data"]["id"], "fake-gpt-reasoning");
    assert_eq!(
        response["data"]["baseUrl"],
        format!("{}/v1", fake.base_url())
    );
    assert!(events.is_empty(), "same level, no event: {events:?}");

    let (events, response) = command_with_events(
        &mut pi,
        "m4",
        "set_model",
        json!({"provider": "nope", "modelId": "nothing"}),
    );
    assert_eq!(
        response,
        error("m4", "set_model", "Model not found: nope/nothing")
    );
    assert!(events.is_empty());
    let (_, response) = command_with_events(
        &mut pi,
        "m5",
        "set_model",
        json!({"provider": "fake-openai", "modelId": "fake-claude"}),
    );
    assert_eq!(
        response,
        error(
            "m5",
            "set_model",
            "Model not found: fake-openai/fake-claude"
        ),
        "a model id under the wrong provider is not found"
    );
    let current = state(&mut pi, "s2");
    assert_eq!(
        current["model"]["id"], "fake-gpt-reasoning",
        "a failure changes nothing"
    );

    assert_eq!(pi.agent_settings(), Value::Null, "no settings.json written");
    fake.finish();
}

/// A model change takes `modelThinkingLevels["provider/id"]`, else `defaultThinkingLevel`,
/// clamped to the new model, as pi 1.6.0; set_model, set_thinking_level, cycle_model and
/// cycle_thinking_level leave settings.json as it was; the changes are session entries.
#[test]
fn model_and_thinking_changes_stay_in_the_session() {
    let settings = json!({
        "defaultThinkingLevel": "low",
        "modelThinkingLevels": {"fake-openai/fake-gpt-reasoning": "minimal"},
        "steeringMode": "all"
    });
    let fake = FakeProvider::start(vec![crate::support::text_reply("done")]);
    let mut pi = Pi::spawn(
        &Setup::anthropic(&fake)
            .settings(settings.clone())
            .with_sessions(),
    );
    assert_eq!(state(&mut pi, "s0")["thinkingLevel"], "low");
    let (events, _) = command_with_events(
        &mut pi,
        "t1",
        "set_thinking_level",
        json!({"level": "high"}),
    );
    assert_eq!(events, [thinking_changed("high")]);
    let (events, _) = command_with_events(
        &mut pi,
        "m1",
        "set_model",
        json!({"provider": "fake-openai", "modelId": "fake-gpt-reasoning"}),
    );
    assert_eq!(events, [thinking_changed("minimal")], "the per-model level");
    let (events, _) = command_with_events(
        &mut pi,
        "m2",
        "set_model",
        json!({"provider": "fake-anthropic", "modelId": "fake-claude"}),
    );
    assert_eq!(events, [thinking_changed("low")], "the default level");
    let (events, _) = command_with_events(&mut pi, "c1", "cycle_thinking_level", json!({}));
    assert_eq!(events, [thinking_changed("medium")]);
    let (events, response) = command_with_events(&mut pi, "c2", "cycle_model", json!({}));
    assert_eq!(response["data"]["model"]["id"], "fake-claude-plain");
    assert_eq!(events, [thinking_changed("off")]);
    assert_eq!(pi.agent_settings(), settings, "settings.json untouched");

    let response = pi.command("p1", "prompt", json!({"message": "hi"}));
    assert_eq!(response["success"], true, "{response}");
    pi.wait_for_event("agent_end");
    let path = crate::support::session_file(&mut pi, "s1");
    let entries = crate::support::read_jsonl(&path);
    let changes: Vec<String> = entries
        .iter()
        .filter_map(|e| match e["type"].as_str() {
            Some("model_change") => Some(format!("model {}", e["modelId"].as_str()?)),
            Some("thinking_level_change") => {
                Some(format!("thinking {}", e["thinkingLevel"].as_str()?))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        changes,
        [
            "model fake-claude",
            "thinking low",
            "thinking high",
            "model fake-gpt-reasoning",
            "thinking minimal",
            "model fake-claude",
            "thinking low",
            "thinking medium",
            "model fake-claude-plain",
            "thinking off",
        ],
        "{entries:?}"
    );
    assert_eq!(pi.agent_settings(), settings, "settings.json untouched");
    fake.finish();
}

/// cycle_model walks the available models in order and wraps; its data is
/// `{model, thinkingLevel, isScoped}`.
#[test]
fn cycle_model_walks_the_available_models() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let (events, response) = command_with_events(&mut pi, "c1", "cycle_model", json!({}));
    assert_eq!(
        response,
        ok_with(
            "c1",
            "cycle_model",
            json!({"model": claude_plain(&fake), "thinkingLevel": "off", "isScoped": false})
        )
    );
    assert_keys(&response["data"], &["model", "thinkingLevel", "isScoped"]);
    assert_eq!(events, [thinking_changed("off")]);
    let mut seen = Vec::new();
    for n in 2..=4 {
        let response = pi.command(&format!("c{n}"), "cycle_model", json!({}));
        seen.push(format!(
            "{}/{}:{}",
            response["data"]["model"]["provider"]
                .as_str()
                .unwrap_or("?"),
            response["data"]["model"]["id"].as_str().unwrap_or("?"),
            response["data"]["thinkingLevel"].as_str().unwrap_or("?")
        ));
    }
    assert_eq!(
        seen,
        [
            "fake-openai/fake-gpt:off",
            "fake-openai/fake-gpt-reasoning:off",
            "fake-anthropic/fake-claude:off",
        ]
    );
    fake.finish();
}

/// Every available model is a full Model object with the documented keys, in order.
#[test]
fn get_available_models_returns_full_model_objects() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let response = pi.command("a1", "get_available_models", json!({}));
    assert_keys(&response, &["id", "type", "command", "success", "data"]);
    let models = response["data"]["models"].as_array().expect("models");
    assert_eq!(models.len(), 4);
    for model in models {
        assert_keys(
            model,
            &[
                "id",
                "name",
                "api",
                "provider",
                "baseUrl",
                "reasoning",
                "input",
                "cost",
                "contextWindow",
                "maxTokens",
            ],
        );
    }
    assert_eq!(models[1], claude_plain(&fake));
    fake.finish();
}

/// set_thinking_level clamps a known level silently, announces effective changes only; an
/// unknown level is refused (stricter than pi, which takes it as the first supported level:
/// `hardening::parse_errors_keep_the_id_and_unknown_thinking_levels_are_refused`).
#[test]
fn set_thinking_level_clamps_and_announces_changes() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let cases = [
        ("minimal", "minimal", true),
        ("minimal", "minimal", false),
        ("xhigh", "high", true),
        ("max", "high", false),
        ("off", "off", true),
        ("medium", "medium", true),
        ("off", "off", true),
    ];
    for (n, (asked, effective, announced)) in cases.into_iter().enumerate() {
        let id = format!("t{n}");
        let (events, response) =
            command_with_events(&mut pi, &id, "set_thinking_level", json!({"level": asked}));
        assert_eq!(response, ok(&id, "set_thinking_level"), "{asked}");
        let expected: Vec<Value> = if announced {
            vec![thinking_changed(effective)]
        } else {
            Vec::new()
        };
        assert_eq!(events, expected, "{asked}");
        assert_eq!(
            state(&mut pi, &format!("s{n}"))["thinkingLevel"],
            effective,
            "{asked}"
        );
    }

    let fake2 = FakeProvider::start(Vec::new());
    let mut plain = Pi::spawn(&Setup::openai(&fake2));
    let (events, response) = command_with_events(
        &mut plain,
        "t1",
        "set_thinking_level",
        json!({"level": "high"}),
    );
    assert_eq!(response, ok("t1", "set_thinking_level"));
    assert!(events.is_empty(), "a plain model stays off: {events:?}");
    assert_eq!(state(&mut plain, "s1")["thinkingLevel"], "off");
    fake.finish();
    fake2.finish();
}

/// cycle_thinking_level: next supported level with wrap-around; `data: null` on a plain model.
#[test]
fn cycle_thinking_level_wraps_and_is_null_without_reasoning() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let mut seen = Vec::new();
    for n in 0..4 {
        let id = format!("c{n}");
        let (events, response) =
            command_with_events(&mut pi, &id, "cycle_thinking_level", json!({}));
        let level = response["data"]["level"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        assert_eq!(
            response,
            ok_with(&id, "cycle_thinking_level", json!({"level": level}))
        );
        assert_eq!(events, [thinking_changed(&level)]);
        seen.push(level);
    }
    assert_eq!(seen, ["high", "off", "minimal", "low"]);

    let fake2 = FakeProvider::start(Vec::new());
    let mut plain = Pi::spawn(&Setup::openai(&fake2));
    let (events, response) =
        command_with_events(&mut plain, "c1", "cycle_thinking_level", json!({}));
    assert_eq!(response, ok_with("c1", "cycle_thinking_level", Value::Null));
    assert_keys(&response, &["id", "type", "command", "success", "data"]);
    assert!(events.is_empty());
    fake.finish();
    fake2.finish();
}

/// Queue modes: valid modes apply and persist; anything else is an error and changes nothing.
#[test]
fn queue_modes_validate_apply_and_persist() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    for (command, key) in [
        ("set_steering_mode", "steeringMode"),
        ("set_follow_up_mode", "followUpMode"),
    ] {
        let response = pi.command(&format!("{command}-1"), command, json!({"mode": "all"}));
        assert_eq!(response, ok(&format!("{command}-1"), command));
        assert_eq!(state(&mut pi, &format!("{command}-s1"))[key], "all");
        assert_eq!(pi.agent_settings()[key], "all", "{command} persists");

        let id = format!("{command}-2");
        let response = pi.command(&id, command, json!({"mode": "sometimes"}));
        assert_keys(&response, &["id", "type", "command", "success", "error"]);
        assert_eq!(response["success"], false, "{response}");
        assert!(
            response["error"]
                .as_str()
                .is_some_and(|e| e.contains("sometimes")),
            "the error names the bad mode: {response}"
        );
        assert_eq!(
            state(&mut pi, &format!("{command}-s2"))[key],
            "all",
            "an invalid mode changes nothing"
        );
        assert_eq!(pi.agent_settings()[key], "all");

        let response = pi.command(
            &format!("{command}-3"),
            command,
            json!({"mode": "one-at-a-time"}),
        );
        assert_eq!(response["success"], true);
        assert_eq!(
            state(&mut pi, &format!("{command}-s3"))[key],
            "one-at-a-time"
        );
        assert_eq!(pi.agent_settings()[key], "one-at-a-time");
    }
    fake.finish();
}

/// set_auto_compaction / set_auto_retry apply at once and persist to the agent dir's
/// settings.json (other keys kept); with retry off a 529 ends the run without a retry.
#[test]
fn auto_compaction_and_auto_retry_toggles_persist_and_apply() {
    let fake = FakeProvider::start(vec![Reply::status(
        529,
        fixture("anthropic/error_529.json"),
        &[],
    )]);
    let setup = Setup::anthropic(&fake).settings(json!({"retry": {"baseDelayMs": 10}}));
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("c1", "set_auto_compaction", json!({"enabled": false}));
    assert_eq!(response, ok("c1", "set_auto_compaction"));
    assert_eq!(state(&mut pi, "s1")["autoCompactionEnabled"], false);
    assert_eq!(pi.agent_settings()["compaction"]["enabled"], false);

    let response = pi.command("r1", "set_auto_retry", json!({"enabled": false}));
    assert_eq!(response, ok("r1", "set_auto_retry"));
    let settings = pi.agent_settings();
    assert_eq!(settings["retry"]["enabled"], false, "{settings}");
    assert_eq!(
        settings["retry"]["baseDelayMs"], 10,
        "other keys are kept: {settings}"
    );
    assert_eq!(settings["compaction"]["enabled"], false, "{settings}");

    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let run = pi.records_until_event("agent_end");
    assert_eq!(run.last().expect("agent_end")["willRetry"], false);
    let settled = pi.records_until_event("agent_settled");
    assert!(
        settled.iter().all(|r| r["type"] != "auto_retry_start"),
        "{settled:?}"
    );
    assert_eq!(fake.requests().len(), 1);

    let response = pi.command("c2", "set_auto_compaction", json!({"enabled": true}));
    assert_eq!(response["success"], true);
    assert_eq!(state(&mut pi, "s2")["autoCompactionEnabled"], true);
    assert_eq!(pi.agent_settings()["compaction"]["enabled"], true);
    fake.finish();
}

/// get_last_assistant_text: `{"text":null}` before any reply, then the reply's text, trimmed.
#[test]
fn get_last_assistant_text_is_null_then_the_text() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&[
        "  Hello",
        " there.\n",
    ]))]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let response = pi.command("l1", "get_last_assistant_text", json!({}));
    assert_eq!(
        response,
        ok_with("l1", "get_last_assistant_text", json!({"text": null}))
    );
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    pi.wait_for_event("agent_settled");
    let response = pi.command("l2", "get_last_assistant_text", json!({}));
    assert_eq!(
        response,
        ok_with(
            "l2",
            "get_last_assistant_text",
            json!({"text": "Hello there."})
        )
    );
    fake.finish();
}

/// set_session_name: empty after trimming is refused; a name is trimmed, announced with
/// session_info_changed before the response, and shown by get_state.
#[test]
fn set_session_name_validates_and_announces() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let (events, response) =
        command_with_events(&mut pi, "n1", "set_session_name", json!({"name": "   "}));
    assert_eq!(
        response,
        error("n1", "set_session_name", "Session name cannot be empty")
    );
    assert!(events.is_empty());
    assert!(state(&mut pi, "s1").get("sessionName").is_none());

    let (events, response) = command_with_events(
        &mut pi,
        "n2",
        "set_session_name",
        json!({"name": "  My work "}),
    );
    assert_eq!(response, ok("n2", "set_session_name"));
    assert_eq!(
        events,
        [json!({"type": "session_info_changed", "name": "My work"})]
    );
    assert_eq!(state(&mut pi, "s2")["sessionName"], "My work");
    fake.finish();
}

/// get_messages after a turn returns the run's messages (as agent_end listed them, the system
/// message first); get_state counts them.
#[test]
fn get_messages_after_a_turn_matches_agent_end() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Answer."]))]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Question"}));
    let agent_end = pi.wait_for_event("agent_end");
    pi.wait_for_event("agent_settled");
    let response = pi.command("g1", "get_messages", json!({}));
    assert_keys(&response["data"], &["messages"]);
    let messages = response["data"]["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 3);
    assert_eq!(Value::Array(messages.clone()), agent_end["messages"]);
    // The leading system message of pi 1.6.0: the prompt in sections, the tools declared.
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[0]["content"], "");
    assert!(messages[0]["sections"]["preamble"].is_string());
    assert_eq!(messages[1]["role"], "user");
    assert_eq!(
        messages[1]["content"],
        json!([{"type": "text", "text": "Question"}])
    );
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(
        messages[2]["content"],
        json!([{"type": "text", "text": "Answer."}])
    );
    assert_eq!(state(&mut pi, "s1")["messageCount"], 3);
    fake.finish();
}
