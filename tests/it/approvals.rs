//! The approval gate (settings `approvals`, end of src/extensions/PROTOCOL.md) through the real
//! binary: rules that allow or deny, `ask` answered through an `extension_ui_request` select
//! ("Allow once", "Allow for this session", "Deny"), an unanswered ask that times out, and the
//! custom session entries that record each decision.
//!
//! Reference: pi has no approval gate; none of these tests applies to it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, RecordedRequest, Reply};
use crate::sse;
use crate::support::{
    Pi, Setup, read_jsonl, result_text, tool_result_block, tool_result_block_text,
};

/// The model's replies: one bash call per command (one turn each), then a text answer.
fn bash_calls_then_text(commands: &[&str]) -> Vec<Reply> {
    let mut script: Vec<Reply> = commands
        .iter()
        .enumerate()
        .map(|(i, command)| Reply::sse(sse::anthropic_bash(&format!("toolu_{}", i + 1), command)))
        .collect();
    script.push(Reply::sse(sse::anthropic_text(&["Done."])));
    script
}

fn setup(fake: &FakeProvider, approvals: Value) -> Setup {
    Setup::anthropic(fake)
        .with_sessions()
        .settings(json!({ "approvals": approvals }))
}

/// Sends a prompt and returns at its first `tool_execution_end` or approval dialog, whichever
/// comes first (sequential).
fn next_tool_step(pi: &mut Pi) -> Value {
    let deadline = pi.deadline();
    let mut records = pi.recv_until(
        |r| {
            r["type"] == "tool_execution_end"
                || (r["type"] == "extension_ui_request" && r["method"] == "select")
        },
        deadline,
    );
    records.pop().expect("the match")
}

/// The `approval` custom entries of the (single) session file, after the process ended.
#[track_caller]
fn approval_entries(pi: &mut Pi) -> Vec<Value> {
    assert!(pi.close_and_wait().success());
    let files = pi.workspace().jsonl_files();
    assert_eq!(files.len(), 1, "one session file: {files:?}");
    read_jsonl(&files[0])
        .into_iter()
        .filter(|e| e["type"] == "custom" && e["customType"] == "approval")
        .map(|e| e["data"].clone())
        .collect()
}

fn decision(command: &str, decision: &str) -> Value {
    json!({"tool": "bash", "args": {"command": command}, "decision": decision})
}

fn select_count(pi: &Pi) -> usize {
    pi.records()
        .iter()
        .filter(|r| r["type"] == "extension_ui_request" && r["method"] == "select")
        .count()
}

fn second_request(fake: &FakeProvider, pi: &Pi) -> RecordedRequest {
    fake.wait_for_requests(2, pi.timeout())[1].clone()
}

#[test]
fn a_rule_that_allows_runs_the_call_without_asking() {
    let fake = FakeProvider::start(bash_calls_then_text(&["echo allowed"]));
    let approvals = json!({"default": "ask",
        "rules": [{"tool": "bash", "command": "echo *", "action": "allow"}]});
    let mut pi = Pi::spawn(&setup(&fake, approvals));
    pi.command("p1", "prompt", json!({"message": "Go"}));
    let end = next_tool_step(&mut pi);
    assert_eq!(end["type"], "tool_execution_end", "no dialog: {end}");
    assert_eq!(end["isError"], false);
    assert_eq!(result_text(&end["result"]).trim(), "allowed");
    pi.wait_for_event("agent_end");
    assert_eq!(select_count(&pi), 0);
    fake.finish();
}

/// The gate records every decision (the brief and the commit that added it say "every
/// decision saved as a custom entry"), including a rule's plain allow.
#[test]
fn a_rule_that_allows_is_recorded_in_the_session() {
    let fake = FakeProvider::start(bash_calls_then_text(&["echo allowed"]));
    let approvals = json!({"rules": [{"tool": "bash", "command": "echo *", "action": "allow"}]});
    let mut pi = Pi::spawn(&setup(&fake, approvals));
    pi.command("p1", "prompt", json!({"message": "Go"}));
    pi.wait_for_event("agent_end");
    let entries = approval_entries(&mut pi);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["tool"], "bash");
    assert_eq!(entries[0]["args"], json!({"command": "echo allowed"}));
    fake.finish();
}

#[test]
fn a_rule_that_denies_answers_the_model_with_its_reason() {
    let fake = FakeProvider::start(bash_calls_then_text(&["git push origin main"]));
    let approvals = json!({"rules": [
        {"tool": "bash", "command": "git push*", "action": "deny",
         "reason": "Pushing is not allowed"}]});
    let mut pi = Pi::spawn(&setup(&fake, approvals));
    pi.command("p1", "prompt", json!({"message": "Push it"}));
    let end = next_tool_step(&mut pi);
    assert_eq!(end["type"], "tool_execution_end", "no dialog: {end}");
    assert_eq!(end["isError"], true);
    assert_eq!(result_text(&end["result"]), "Pushing is not allowed");
    pi.wait_for_event("agent_end");
    let block = tool_result_block(&second_request(&fake, &pi), "toolu_1");
    assert_eq!(tool_result_block_text(&block), "Pushing is not allowed");
    assert_eq!(block["is_error"], true);
    assert_eq!(
        approval_entries(&mut pi),
        [decision("git push origin main", "denied by rule")]
    );
    fake.finish();
}

#[test]
fn ask_and_allow_once_runs_the_call() {
    let fake = FakeProvider::start(bash_calls_then_text(&["echo asked"]));
    let approvals = json!({"tools": {"bash": "ask"}, "timeoutSeconds": 10});
    let mut pi = Pi::spawn(&setup(&fake, approvals));
    pi.command("p1", "prompt", json!({"message": "Go"}));
    let dialog = next_tool_step(&mut pi);
    assert_eq!(dialog["type"], "extension_ui_request", "{dialog}");
    assert_eq!(
        dialog["options"],
        json!(["Allow once", "Allow for this session", "Deny"])
    );
    assert_eq!(dialog["timeout"], 10_000);
    let title = dialog["title"].as_str().unwrap_or_default();
    assert!(
        title.contains("bash") && title.contains("echo asked"),
        "{title}"
    );
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "value": "Allow once"}));
    let end = pi.wait_for_event("tool_execution_end");
    assert_eq!(end["isError"], false, "{end}");
    assert_eq!(result_text(&end["result"]).trim(), "asked");
    pi.wait_for_event("agent_end");
    assert_eq!(
        approval_entries(&mut pi),
        [decision("echo asked", "allowed once")]
    );
    fake.finish();
}

#[test]
fn ask_and_deny_refuses_the_call() {
    let fake = FakeProvider::start(bash_calls_then_text(&["echo refused"]));
    let approvals = json!({"tools": {"bash": "ask"}});
    let mut pi = Pi::spawn(&setup(&fake, approvals));
    pi.command("p1", "prompt", json!({"message": "Go"}));
    let dialog = next_tool_step(&mut pi);
    assert_eq!(dialog["timeout"], 60_000, "the default timeout: {dialog}");
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "value": "Deny"}));
    let end = pi.wait_for_event("tool_execution_end");
    assert_eq!(end["isError"], true, "{end}");
    assert_eq!(result_text(&end["result"]), "The user denied running bash");
    pi.wait_for_event("agent_end");
    assert_eq!(
        approval_entries(&mut pi),
        [decision("echo refused", "denied by the user")]
    );
    fake.finish();
}

#[test]
fn an_unanswered_ask_times_out_and_denies() {
    let fake = FakeProvider::start(bash_calls_then_text(&["echo too-late"]));
    let approvals = json!({"tools": {"bash": "ask"}, "timeoutSeconds": 0.3});
    let mut pi = Pi::spawn(&setup(&fake, approvals));
    pi.command("p1", "prompt", json!({"message": "Go"}));
    let dialog = next_tool_step(&mut pi);
    assert_eq!(dialog["timeout"], 300, "{dialog}");
    let end = pi.wait_for_event("tool_execution_end");
    assert_eq!(end["isError"], true, "{end}");
    assert_eq!(
        result_text(&end["result"]),
        "The user did not approve bash in time; the call was denied"
    );
    pi.wait_for_event("agent_end");
    // A late answer is ignored.
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "value": "Allow once"}));
    assert!(
        pi.drain_for(Duration::from_millis(200))
            .iter()
            .all(|r| r["type"] != "tool_execution_end")
    );
    assert_eq!(
        approval_entries(&mut pi),
        [decision("echo too-late", "denied (no answer in time)")]
    );
    fake.finish();
}

#[test]
fn allow_for_this_session_lets_later_identical_calls_run_without_a_dialog() {
    let fake = FakeProvider::start(bash_calls_then_text(&["echo again", "echo again"]));
    let approvals = json!({"tools": {"bash": "ask"}});
    let mut pi = Pi::spawn(&setup(&fake, approvals));
    pi.command("p1", "prompt", json!({"message": "Go"}));
    let dialog = next_tool_step(&mut pi);
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"],
                   "value": "Allow for this session"}));
    let first = pi.wait_for_event("tool_execution_end");
    assert_eq!(first["isError"], false, "{first}");
    let second = next_tool_step(&mut pi);
    assert_eq!(
        second["type"], "tool_execution_end",
        "no second dialog: {second}"
    );
    assert_eq!(second["toolCallId"], "toolu_2");
    assert_eq!(second["isError"], false, "{second}");
    assert_eq!(result_text(&second["result"]).trim(), "again");
    pi.wait_for_event("agent_end");
    assert_eq!(select_count(&pi), 1);
    let entries = approval_entries(&mut pi);
    assert_eq!(
        entries.first(),
        Some(&decision("echo again", "allowed for this session")),
        "{entries:?}"
    );
    fake.finish();
}
