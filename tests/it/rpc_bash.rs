//! The RPC `bash` command (FACTS.md §11, §7, seed `bash_execution_update`): streamed output
//! tagged with the request id, the final response shape, cancellation, truncation with a full
//! output file, and how the result reaches the next prompt.
//!
//! Reference: 0.73.1 streams nothing (`bash_execution_update` is seed-only), so the streaming
//! assertions fail there by design.

use std::path::Path;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{Pi, Setup, assert_keys, message_text, wait_for_file};

/// The concatenated deltas of `bash_execution_update` records carrying `id`.
fn streamed(records: &[Value], id: &str) -> String {
    records
        .iter()
        .filter(|r| r["type"] == "bash_execution_update" && r["id"] == id)
        .filter_map(|r| r["delta"].as_str())
        .collect()
}

/// Output streams as bash_execution_update{id, delta}; the response carries the final result.
#[test]
fn bash_streams_output_then_answers_with_the_result() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "b1", "type": "bash", "command": "echo one; echo two >&2; echo three"}));
    let deadline = pi.deadline();
    let records = pi.recv_until(|r| r["type"] == "response" && r["id"] == "b1", deadline);
    let response = records.last().expect("response").clone();
    assert_eq!(
        response,
        json!({"id": "b1", "type": "response", "command": "bash", "success": true,
               "data": {"output": "one\ntwo\nthree\n", "exitCode": 0, "cancelled": false,
                        "truncated": false}})
    );
    assert_keys(
        &response["data"],
        &["output", "exitCode", "cancelled", "truncated"],
    );
    let updates: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "bash_execution_update")
        .collect();
    assert!(!updates.is_empty(), "output is streamed");
    for update in &updates {
        assert_eq!(update["id"], "b1", "{update}");
        assert_keys(update, &["type", "id", "delta"]);
    }
    assert_eq!(streamed(&records, "b1"), "one\ntwo\nthree\n");
    fake.finish();
}

/// A non-zero exit is still a successful command, with its exit code.
#[test]
fn bash_nonzero_exit_is_success_with_the_code() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let response =
        pi.request(json!({"id": "b1", "type": "bash", "command": "echo failing; exit 3"}));
    assert_eq!(
        response["data"],
        json!({"output": "failing\n", "exitCode": 3, "cancelled": false, "truncated": false})
    );
    assert_eq!(response["success"], true);
    fake.finish();
}

/// abort_bash kills the running command: `cancelled:true` and no exitCode; get_state is answered
/// while the command runs.
#[test]
fn abort_bash_cancels_and_state_is_answered_meanwhile() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "b1", "type": "bash", "command": "echo started; sleep 100; echo never"}));
    let deadline = pi.deadline();
    pi.recv_until(
        |r| {
            r["type"] == "bash_execution_update"
                && streamed(std::slice::from_ref(r), "b1").contains("started")
        },
        deadline,
    );
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["success"], true);
    assert_eq!(
        state["data"]["isStreaming"], false,
        "an RPC bash is not a run"
    );
    let response = pi.request(json!({"id": "k1", "type": "abort_bash"}));
    assert_eq!(
        response,
        json!({"id": "k1", "type": "response", "command": "abort_bash", "success": true})
    );
    let result = pi.response_for("b1");
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(
        result["data"],
        json!({"output": "started\n", "cancelled": true, "truncated": false})
    );
    fake.finish();
}

/// 5 MB of output: the response is truncated and names a file holding everything; every byte
/// was also streamed, so the deltas add up to the file.
#[test]
fn large_output_is_truncated_with_a_full_output_file_and_fully_streamed() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    // 50 000 lines of 99 characters plus LF = 5 000 000 bytes.
    let command = format!("yes {} | head -n 50000", "a".repeat(99));
    pi.send(json!({"id": "big", "type": "bash", "command": command}));
    let deadline = std::time::Instant::now() + pi.timeout() * 3;
    let records = pi.recv_until(|r| r["type"] == "response" && r["id"] == "big", deadline);
    let response = records.last().expect("response");
    let data = &response["data"];
    assert_eq!(data["exitCode"], 0, "{}", data["exitCode"]);
    assert_eq!(data["cancelled"], false);
    assert_eq!(data["truncated"], true);
    assert_keys(
        data,
        &[
            "output",
            "exitCode",
            "cancelled",
            "truncated",
            "fullOutputPath",
        ],
    );
    let output = data["output"].as_str().expect("output");
    assert!(
        output.len() <= 50 * 1024,
        "output is {} bytes",
        output.len()
    );
    assert!(output.ends_with(&format!("{}\n", "a".repeat(99))));
    let path = data["fullOutputPath"].as_str().expect("fullOutputPath");
    let file = std::fs::read_to_string(path).expect("the full output file exists");
    let _ = std::fs::remove_file(path);
    assert_eq!(file.len(), 5_000_000, "the file holds everything");
    assert!(file.ends_with(output), "the output is the file's tail");
    let deltas = streamed(&records, "big");
    assert_eq!(deltas.len(), file.len(), "every delta arrived");
    assert!(deltas == file, "the deltas add up to the file");
    fake.finish();
}

/// `seq 1 5000`: 23 893 bytes (under the 50 KB limit) but 5000 lines (over the 2000-line limit).
/// The result is truncated by lines, and pi (0.73.1 and 1.6.0) still names a file holding all of
/// it: a spill happens whenever the result is truncated, not only past the byte limit.
#[test]
fn output_truncated_by_lines_only_still_has_a_full_output_file() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let response = pi.command("seq", "bash", json!({"command": "seq 1 5000"}));
    let data = &response["data"];
    assert_eq!(data["truncated"], true, "{data}");
    let output = data["output"].as_str().expect("output");
    assert!(
        output.trim_end().ends_with("4999\n5000"),
        "the tail is kept"
    );
    assert!(!output.starts_with("1\n"), "the head is cut");
    let path = data["fullOutputPath"]
        .as_str()
        .expect("a fullOutputPath although only lines were cut");
    let expected: String = (1..=5000).map(|n| format!("{n}\n")).collect();
    // pi writes the file asynchronously, after its response; pi-rs before it.
    let file = wait_for_file(Path::new(path), pi.timeout(), |text| {
        text.len() >= expected.len()
    });
    let _ = std::fs::remove_file(path);
    assert!(file == expected, "the file holds all 5000 lines");
    fake.finish();
}

/// RPC bash results join the context at the next prompt, each as its own user message in the
/// FACTS §7 layout, before the prompt.
#[test]
fn bash_results_reach_the_next_prompt_as_user_messages() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Seen."]))]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.request(json!({"id": "b1", "type": "bash", "command": "echo hi"}));
    pi.request(json!({"id": "b2", "type": "bash", "command": "echo oops; exit 2"}));
    pi.request(json!({"id": "b3", "type": "bash", "command": "true"}));
    let messages = pi.command("g1", "get_messages", json!({}))["data"]["messages"].clone();
    let roles: Vec<&Value> = messages
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| &m["role"])
        .collect();
    assert_eq!(roles, ["bashExecution", "bashExecution", "bashExecution"]);
    assert_eq!(messages[0]["command"], "echo hi");
    assert_eq!(messages[0]["output"], "hi\n");
    assert_eq!(messages[0]["exitCode"], 0);
    assert!(
        messages[0].get("fullOutputPath").is_none(),
        "{}",
        messages[0]
    );
    assert_eq!(fake.requests().len(), 0, "bash alone calls no model");

    pi.send(json!({"id": "p1", "type": "prompt", "message": "What happened?"}));
    pi.wait_for_event("agent_settled");
    let requests = fake.requests();
    let texts: Vec<(String, String)> = requests[0]
        .messages()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("?").to_string(),
                message_text(m),
            )
        })
        .collect();
    let user = |text: &str| ("user".to_string(), text.to_string());
    assert_eq!(
        texts,
        [
            user("Ran `echo hi`\n```\nhi\n\n```"),
            user("Ran `echo oops; exit 2`\n```\noops\n\n```\n\nCommand exited with code 2"),
            user("Ran `true`\n(no output)"),
            user("What happened?"),
        ]
    );
    fake.finish();
}

/// pi 1.6.0's `excludeFromContext`: the bash result is kept in the conversation (and session)
/// with `excludeFromContext: true` but never reaches the model; without it the field is absent.
#[test]
fn bash_exclude_from_context_keeps_the_output_from_the_model() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Seen."]))]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let response = pi.request(
        json!({"id": "b1", "type": "bash", "command": "echo private", "excludeFromContext": true}),
    );
    assert_eq!(response["data"]["output"], "private\n", "{response}");
    pi.request(json!({"id": "b2", "type": "bash", "command": "echo shared"}));
    if !crate::support::is_reference() {
        // Stricter than pi (README): a mistyped field is an error.
        let bad = pi.request(
            json!({"id": "b3", "type": "bash", "command": "true", "excludeFromContext": "yes"}),
        );
        assert_eq!(bad["success"], false, "{bad}");
    }
    let messages = pi.command("g1", "get_messages", json!({}))["data"]["messages"].clone();
    let bash: Vec<&Value> = messages
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "bashExecution")
        .collect();
    assert_eq!(bash.len(), 2);
    assert_eq!(bash[0]["excludeFromContext"], true);
    assert!(bash[1].get("excludeFromContext").is_none(), "{}", bash[1]);

    pi.send(json!({"id": "p1", "type": "prompt", "message": "What happened?"}));
    pi.wait_for_event("agent_settled");
    let texts: Vec<String> = fake.requests()[0]
        .messages()
        .iter()
        .map(message_text)
        .collect();
    assert_eq!(
        texts,
        ["Ran `echo shared`\n```\nshared\n\n```", "What happened?"]
    );
    fake.finish();
}
