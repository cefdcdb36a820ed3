//! The two protocol profiles (README "Protocol versions"): the default speaks the newest pi
//! (1.6.0), `legacy` (`--rpc-profile legacy`, `PI_RPC_PROFILE`, settings `rpcProfile`) speaks
//! what clients written against pi ≤ 0.83 read, checked against 0.73.1's real output.
//!
//! Reference: 0.73.1 passes the legacy tests that choose the profile by environment variable or
//! setting (it has no `--rpc-profile` flag); 1.6.0 passes `default_profile_has_the_newest_fields`.

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{Pi, Setup};

fn updates(records: &[Value]) -> Vec<&Value> {
    records
        .iter()
        .filter(|r| r["type"] == "message_update")
        .collect()
}

/// A text reply in the legacy profile: every update carries the whole message so far, as an
/// object, as `message` and as `assistantMessageEvent.partial`; nothing 0.73.1 never sent (no
/// system message either).
#[test]
fn legacy_message_update_carries_the_cumulative_message() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Hel", "lo"]))]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).env("PI_RPC_PROFILE", "legacy"));
    let response = pi.request(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    assert_eq!(
        response,
        json!({"id": "p1", "type": "response", "command": "prompt", "success": true})
    );
    let run = pi.records_until_event("agent_end");
    let updates = updates(&run);
    let texts: Vec<&str> = updates
        .iter()
        .map(|u| {
            let message = &u["message"];
            assert!(message.is_object(), "message is not an object: {u}");
            assert_eq!(message["role"], "assistant", "{u}");
            assert_eq!(u["assistantMessageEvent"]["partial"], *message, "{u}");
            assert!(u.get("usage").is_none(), "{u}");
            message["content"][0]["text"].as_str().unwrap_or_default()
        })
        .collect();
    // text_start, two deltas, text_end. 0.73.1 serialized its live object late, so its
    // snapshots can already hold later text; pi-rs's are taken at each update. Both are
    // prefixes of the final text.
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert!(texts.iter().all(|t| "Hello".starts_with(t)), "{texts:?}");
    assert_eq!(texts[3], "Hello");
    let agent_end = run.last().unwrap();
    assert!(agent_end.get("willRetry").is_none(), "{agent_end}");
    // 0.73.1 had no system messages: none in the events, agent_end or get_messages.
    assert!(
        run.iter().all(|r| r["message"]["role"] != "system"),
        "{run:?}"
    );
    let roles = |messages: &Value| -> Vec<String> {
        messages
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["role"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(roles(&agent_end["messages"]), ["user", "assistant"]);
    let got = pi.request(json!({"id": "m1", "type": "get_messages"}));
    assert_eq!(roles(&got["data"]["messages"]), ["user", "assistant"]);
    // agent_settled does not exist in 0.73.1: a state query answers next, nothing before it.
    let state = pi.request(json!({"id": "s1", "type": "get_state"}));
    assert_eq!(state["success"], true);
    assert!(
        pi.records().iter().all(|r| r["type"] != "agent_settled"),
        "legacy wrote agent_settled"
    );
    fake.finish();
}

/// A tool call streamed in the legacy profile: an editor's live preview reads the call's
/// arguments from `message.content` while they stream.
#[test]
fn legacy_updates_show_streamed_tool_call_arguments() {
    let stream = sse::AnthropicStream::new()
        .tool_use("toolu_1", "bash", &["{\"command\"", ": \"echo hi\"}"])
        .finish("tool_use");
    let fake = FakeProvider::start(vec![
        Reply::sse(stream),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = Setup::anthropic(&fake).settings(json!({"rpcProfile": "legacy"}));
    let mut pi = Pi::spawn(&setup);
    pi.request(json!({"id": "p1", "type": "prompt", "message": "Run it"}));
    let run = pi.records_until_event("agent_end");
    let start = updates(&run)
        .into_iter()
        .find(|u| u["assistantMessageEvent"]["type"] == "toolcall_start")
        .expect("toolcall_start")
        .clone();
    // 0.73.1's toolcall_start has no id/toolName: the call is in the message.
    assert!(
        start["assistantMessageEvent"].get("id").is_none(),
        "{start}"
    );
    assert_eq!(start["message"]["content"][0]["name"], "bash");
    let last_delta = updates(&run)
        .into_iter()
        .rfind(|u| u["assistantMessageEvent"]["type"] == "toolcall_delta")
        .expect("toolcall_delta")
        .clone();
    assert_eq!(
        last_delta["message"]["content"][0]["arguments"],
        json!({"command": "echo hi"})
    );
    // An open call also shows the raw JSON so far.
    let raw = "{\"command\": \"echo hi\"}";
    let partials: Vec<&str> = updates(&run)
        .into_iter()
        .filter_map(|u| u["message"]["content"][0]["partialJson"].as_str())
        .collect();
    assert!(!partials.is_empty(), "no partialJson");
    assert!(partials.iter().all(|p| raw.starts_with(p)), "{partials:?}");
    let end = run
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool_execution_end");
    assert!(end.get("durationMs").is_none(), "{end}");
    fake.finish();
}

/// The RPC bash command streams nothing in the legacy profile (0.73.1 had no
/// `bash_execution_update`); the command-line flag chooses the profile too.
#[test]
fn legacy_leaves_out_bash_execution_update() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).arg("--rpc-profile").arg("legacy"));
    let response = pi.request(json!({"id": "b1", "type": "bash", "command": "echo one"}));
    assert_eq!(response["data"]["output"], "one\n");
    assert!(
        pi.records()
            .iter()
            .all(|r| r["type"] != "bash_execution_update"),
        "{:?}",
        pi.records()
    );
    fake.finish();
}

/// The default profile: the newest pi's fields.
#[test]
fn default_profile_has_the_newest_fields() {
    let stream = sse::AnthropicStream::new()
        .tool_use("toolu_1", "bash", &["{\"command\": \"echo $AI_AGENT\"}"])
        .finish("tool_use");
    let fake = FakeProvider::start(vec![
        Reply::sse(stream),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.request(json!({"id": "p1", "type": "prompt", "message": "Run it"}));
    let run = pi.records_until_event("agent_end");
    let start = updates(&run)
        .into_iter()
        .find(|u| u["assistantMessageEvent"]["type"] == "toolcall_start")
        .expect("toolcall_start")
        .clone();
    assert_eq!(
        start["assistantMessageEvent"],
        json!({"type": "toolcall_start", "contentIndex": 0, "id": "toolu_1", "toolName": "bash"})
    );
    for update in updates(&run) {
        assert!(update["usage"]["totalTokens"].is_u64(), "{update}");
        assert!(update.get("message").is_none(), "{update}");
    }
    let end = run
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool_execution_end");
    assert!(end["durationMs"].is_u64(), "{end}");
    // Children know they run under an agent (pi 0.84.0).
    assert_eq!(end["result"]["content"][0]["text"], "pi\n", "{end}");
    let settled = pi.wait_for_event("agent_settled");
    assert_eq!(settled, json!({"type": "agent_settled", "aborted": false}));
    fake.finish();
}

/// A stream held with its text block open.
fn open_text_block() -> String {
    let unfinished = sse::AnthropicStream::new()
        .text(&["Some", " words"])
        .unfinished();
    let cut = unfinished
        .find("event: content_block_stop")
        .expect("a block stop");
    unfinished[..cut].to_string()
}

/// Abort closes the open block: a last `text_end` with the text so far, its partial saying
/// `stopReason:"aborted"`, before `message_end`; `agent_settled` says it was aborted.
#[test]
fn abort_closes_the_open_block() {
    for profile in ["default", "legacy"] {
        let fake = FakeProvider::start(vec![Reply::stall_after(open_text_block())]);
        let mut pi = Pi::spawn(&Setup::anthropic(&fake).arg("--rpc-profile").arg(profile));
        pi.send(json!({"id": "p1", "type": "prompt", "message": "Talk"}));
        let deadline = pi.deadline();
        pi.recv_until(
            |r| r["assistantMessageEvent"]["delta"] == " words",
            deadline,
        );
        pi.send(json!({"id": "a1", "type": "abort"}));
        let rest = pi.records_until_event("message_end");
        let close = &rest[rest.len() - 2];
        assert_eq!(close["type"], "message_update", "{profile}: {close}");
        let event = &close["assistantMessageEvent"];
        assert_eq!(event["type"], "text_end", "{profile}: {close}");
        assert_eq!(event["content"], "Some words", "{profile}");
        if profile == "legacy" {
            assert_eq!(event["partial"]["stopReason"], "aborted", "{close}");
            assert_eq!(event["partial"]["errorMessage"], "Request was aborted");
        } else {
            let settled = pi.wait_for_event("agent_settled");
            assert_eq!(settled, json!({"type": "agent_settled", "aborted": true}));
        }
        fake.wait_for_stalls_closed_by_client(1, pi.timeout());
        fake.finish();
    }
}

/// `steer` and `follow_up` answer with their disposition (pi 0.99.0); legacy leaves it out.
#[test]
fn steer_and_follow_up_answer_queued() {
    let fake = FakeProvider::start(vec![
        Reply::stall_after(open_text_block()),
        Reply::sse(sse::anthropic_text(&["Ok."])),
    ]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Talk"}));
    let deadline = pi.deadline();
    pi.recv_until(|r| r["type"] == "message_update", deadline);
    let steer = pi.request(json!({"id": "s1", "type": "steer", "message": "Wait"}));
    assert_eq!(steer["data"], json!({"disposition": "queued"}));
    let follow = pi.request(json!({"id": "f1", "type": "follow_up", "message": "Then"}));
    assert_eq!(follow["data"], json!({"disposition": "queued"}));
    pi.request(json!({"id": "a1", "type": "abort"}));
    fake.release_stalls();
}

/// A wrong `--rpc-profile` is refused at startup.
#[test]
fn unknown_profile_is_refused() {
    let fake = FakeProvider::start(vec![]);
    let run = crate::support::run_cli(
        &Setup::anthropic(&fake),
        &["--mode", "rpc", "--rpc-profile", "ancient"],
        Some(b""),
    );
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("Invalid --rpc-profile \"ancient\""),
        "{}",
        run.stderr
    );
}

/// Every block still open when an abort lands gets its end event, in content order, before
/// `message_end`: here an OpenAI-compatible reply with reasoning, text and a half-streamed tool
/// call (whose end carries the arguments parsed as far as they came).
#[test]
fn abort_closes_every_open_block_in_order() {
    let held = sse::OpenAiStream::new()
        .reasoning(&["Think"])
        .text(&["Say"])
        .tool_call("call_1", "bash", &["{\"command\": \"ec"])
        .unfinished();
    let fake = FakeProvider::start(vec![Reply::stall_after(held)]);
    let mut pi = Pi::spawn(&Setup::new(&fake, "fake-openai", "fake-gpt-reasoning"));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Go"}));
    let deadline = pi.deadline();
    pi.recv_until(
        |r| r["assistantMessageEvent"]["type"] == "toolcall_delta",
        deadline,
    );
    pi.send(json!({"id": "a1", "type": "abort"}));
    let rest = pi.records_until_event("message_end");
    let ends: Vec<(String, u64)> = pi
        .records()
        .iter()
        .filter_map(|r| {
            let event = &r["assistantMessageEvent"];
            let kind = event["type"].as_str()?;
            kind.ends_with("_end")
                .then(|| (kind.to_string(), event["contentIndex"].as_u64().unwrap()))
        })
        .collect();
    let starts = pi
        .records()
        .iter()
        .filter(|r| {
            r["assistantMessageEvent"]["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("_start"))
        })
        .count();
    assert_eq!(ends.len(), starts, "every started block ends: {ends:?}");
    let indexes: Vec<u64> = ends.iter().map(|(_, i)| *i).collect();
    assert!(indexes.windows(2).all(|w| w[0] < w[1]), "{ends:?}");
    let tool_end = pi
        .records()
        .iter()
        .find(|r| r["assistantMessageEvent"]["type"] == "toolcall_end")
        .expect("toolcall_end")
        .clone();
    assert_eq!(
        tool_end["assistantMessageEvent"]["toolCall"]["id"], "call_1",
        "{tool_end}"
    );
    let message_end = rest.last().unwrap();
    assert_eq!(message_end["message"]["stopReason"], "aborted");
    fake.wait_for_stalls_closed_by_client(1, pi.timeout());
    fake.finish();
}
