//! `abort` mid-stream and mid-tool (FACTS.md §4.5, §2.2): the run ends with `agent_end` before
//! the abort response, the partial reply is kept as "aborted", running shells die with their
//! whole process group, and the conversation goes on cleanly at the next prompt.
//!
//! Reference: fails at the seed-only parts (`agent_settled`, prompt `disposition`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{
    Pi, Setup, message_text, process_alive, result_text, wait_for_tool_pid, wait_until_gone,
};

#[track_caller]
fn assert_abort_answers_after_agent_end(pi: &mut Pi, abort_id: &str, agent_end: &Value) {
    let response = pi.response_for(abort_id);
    assert_eq!(
        response,
        json!({"id": abort_id, "type": "response", "command": "abort", "success": true})
    );
    let response_index = pi.index_of(&response).expect("indexed");
    let end_index = pi.index_of(agent_end).expect("indexed");
    assert!(
        response_index > end_index,
        "the abort response ({response_index}) must follow agent_end ({end_index})"
    );
}

/// Waits for the running prompt's first text delta, then aborts; see [`abort_now`].
#[track_caller]
fn abort_after_first_delta(pi: &mut Pi) -> (Vec<Value>, Value) {
    let deadline = pi.deadline();
    pi.recv_until(
        |r| r["assistantMessageEvent"]["type"] == "text_delta",
        deadline,
    );
    abort_now(pi)
}

/// Sends `abort` (id `a1`); the records through the run's `agent_end`, and that `agent_end`.
#[track_caller]
fn abort_now(pi: &mut Pi) -> (Vec<Value>, Value) {
    pi.send(json!({"id": "a1", "type": "abort"}));
    let rest = pi.records_until_event("agent_end");
    let agent_end = rest.last().expect("agent_end").clone();
    (rest, agent_end)
}

/// A slowly streamed reply is aborted after its first delta: the partial text is kept with
/// stopReason "aborted", nothing more streams, and the next prompt works without the aborted
/// reply in its context.
#[test]
fn abort_mid_stream_keeps_partial_text_and_the_next_prompt_works() {
    let parts: Vec<String> = (0..40).map(|i| format!("w{i} ")).collect();
    let part_refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let full: String = parts.concat();
    let fake = FakeProvider::start(vec![
        Reply::sse_slow(sse::anthropic_text(&part_refs), Duration::from_millis(100)),
        Reply::sse(sse::anthropic_text(&["Fresh answer."])),
    ]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Talk slowly"}));
    let (rest, agent_end) = abort_after_first_delta(&mut pi);
    let labels: Vec<String> = crate::support::event_labels(&rest)
        .into_iter()
        .filter(|l| !l.starts_with("message_update:"))
        .collect();
    assert_eq!(
        labels,
        ["message_end:assistant", "turn_end", "agent_end"],
        "abort ends the turn and the run at once"
    );
    let assistant = &rest[rest.len() - 3]["message"];
    assert_eq!(assistant["stopReason"], "aborted", "{assistant}");
    let partial = assistant["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        !partial.is_empty() && full.starts_with(partial) && partial.len() < full.len(),
        "partial text {partial:?} must be a proper prefix of the reply"
    );
    assert_eq!(agent_end["willRetry"], false, "an abort is never retried");
    assert_abort_answers_after_agent_end(&mut pi, "a1", &agent_end);
    let settled = pi.records_until_event("agent_settled");
    assert!(
        settled.iter().all(|r| r["type"] != "message_update"),
        "nothing streams after the abort: {settled:?}"
    );

    pi.send(json!({"id": "p2", "type": "prompt", "message": "Next question"}));
    let run = pi.records_until_event("agent_end");
    let answer = &run
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("assistant")["message"];
    assert_eq!(answer["stopReason"], "stop");
    assert_eq!(
        answer["content"],
        json!([{"type": "text", "text": "Fresh answer."}])
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let history: Vec<(String, String)> = requests[1]
        .messages()
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or("?").into(), message_text(m)))
        .collect();
    assert_eq!(
        history,
        [
            ("user".to_string(), "Talk slowly".to_string()),
            ("user".to_string(), "Next question".to_string())
        ],
        "an aborted reply is dropped from the context"
    );
    pi.wait_for_event("agent_settled");
    fake.finish();
}

/// Aborting a held stream really cancels the HTTP request: the client closes the connection.
#[test]
fn abort_mid_stream_closes_the_provider_connection() {
    let prefix = sse::AnthropicStream::new().text(&["Some"]).unfinished();
    let fake = FakeProvider::start(vec![Reply::stall_after(prefix)]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Talk"}));
    let (_, agent_end) = abort_after_first_delta(&mut pi);
    assert_abort_answers_after_agent_end(&mut pi, "a1", &agent_end);
    fake.wait_for_stalls_closed_by_client(1, pi.timeout());
    pi.wait_for_event("agent_settled");
    fake.finish();
}

/// Abort while a bash tool waits on a background child: the tool ends as an error with pi's
/// "Command aborted" notice, the grandchild dies with the group, the abort response follows
/// agent_end, and the next request carries the aborted call paired with its result.
#[test]
fn abort_mid_tool_kills_the_process_group_and_pairs_the_call() {
    let command = "sleep 100 & echo \"started $!\"; wait";
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_bash("toolu_sleepy", command)),
        Reply::sse(sse::anthropic_text(&["Moving on."])),
    ]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Sleep a while"}));
    let sleeper = wait_for_tool_pid(&mut pi, "started");
    assert!(process_alive(sleeper), "the background sleep runs");

    let (rest, agent_end) = abort_now(&mut pi);
    let end = rest
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool_execution_end");
    assert_eq!(end["toolCallId"], "toolu_sleepy");
    assert_eq!(end["isError"], true, "{end}");
    let text = result_text(&end["result"]);
    assert!(text.contains("started"), "partial output kept: {text:?}");
    assert!(text.ends_with("Command aborted"), "{text:?}");
    let tool_result = rest
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "toolResult")
        .expect("the toolResult message");
    assert_eq!(tool_result["message"]["isError"], true);
    assert_eq!(agent_end["willRetry"], false);
    assert_abort_answers_after_agent_end(&mut pi, "a1", &agent_end);
    assert!(
        wait_until_gone(sleeper, pi.timeout()),
        "background sleep {sleeper} survived the abort"
    );
    pi.wait_for_event("agent_settled");

    pi.send(json!({"id": "p2", "type": "prompt", "message": "Go on"}));
    let run = pi.records_until_event("agent_end");
    let answer = &run
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("assistant")["message"];
    assert_eq!(answer["stopReason"], "stop");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let history = requests[1].messages();
    let tool_use = history
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .find(|b| b["type"] == "tool_use")
        .expect("the aborted call is in the history");
    assert_eq!(tool_use["id"], "toolu_sleepy");
    let result = history
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .find(|b| b["type"] == "tool_result")
        .expect("the aborted call has a result");
    assert_eq!(result["tool_use_id"], "toolu_sleepy");
    assert_eq!(result["is_error"], true);
    assert_eq!(
        message_text(history.last().expect("last")),
        "Go on",
        "the new prompt comes last"
    );
    pi.wait_for_event("agent_settled");
    // The fake also checked that every call in every request has exactly one result.
    fake.finish();
}
