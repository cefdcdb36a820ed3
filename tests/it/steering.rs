//! Steering and follow-up queues (FACTS.md §4.4, seed `steer` / `follow_up` / `prompt` with
//! `streamingBehavior`): where queued messages are delivered, in which order, what `queue_update`
//! says, and what the provider receives next.
//!
//! Sequencing without sleeps: a tool call runs a bash loop that waits for a "gate" file in the cwd,
//! so the test queues its messages while the tool provably runs and then creates the file; a
//! `Reply::hold` stream keeps a turn mid-stream until the test releases it.
//!
//! Reference: every test fails at its seed-only parts (prompt `disposition`, `agent_settled`).

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, RecordedRequest, Reply};
use crate::sse;
use crate::support::{GATED_COMMAND, Pi, Setup, flow, message_text, open_gate};

/// Whether a request message is an Anthropic user message holding tool results.
fn is_tool_result_message(message: &Value) -> bool {
    message["role"] == "user"
        && message["content"]
            .as_array()
            .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"))
}

/// The last `n` messages of a request as (role, text) pairs; tool results read "<tool_result>".
fn tail(request: &RecordedRequest, n: usize) -> Vec<(String, String)> {
    let messages = request.messages();
    messages[messages.len().saturating_sub(n)..]
        .iter()
        .map(|m| {
            let text = if is_tool_result_message(m) {
                "<tool_result>".to_string()
            } else {
                message_text(m)
            };
            (m["role"].as_str().unwrap_or("?").to_string(), text)
        })
        .collect()
}

fn pair(role: &str, text: &str) -> (String, String) {
    (role.to_string(), text.to_string())
}

fn queue_updates(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r["type"] == "queue_update")
        .cloned()
        .collect()
}

fn queue(steering: &[&str], follow_up: &[&str]) -> Value {
    json!({"type": "queue_update", "steering": steering, "followUp": follow_up})
}

/// Sends a steer/follow_up and checks it is answered `queued` (pi 0.99.0), preceded by the
/// `queue_update` that lists the queues afterwards.
#[track_caller]
fn enqueue(pi: &mut Pi, id: &str, ty: &str, text: &str, expected_queue: Value) {
    let response = pi.command(id, ty, json!({"message": text}));
    assert_eq!(
        response,
        json!({"id": id, "type": "response", "command": ty, "success": true,
               "data": {"disposition": "queued"}})
    );
    let response_index = pi.index_of(&response).expect("indexed");
    let update = pi.records()[..response_index]
        .iter()
        .rfind(|r| r["type"] == "queue_update")
        .cloned()
        .expect("a queue_update before the response");
    assert_eq!(
        update, expected_queue,
        "queue_update before {id}'s response"
    );
}

#[track_caller]
fn pending_count(pi: &mut Pi, id: &str) -> Value {
    pi.command(id, "get_state", json!({}))["data"]["pendingMessageCount"].clone()
}

/// Starts a prompt whose first reply is a gated bash call and waits until the tool runs.
fn start_gated_run(pi: &mut Pi) {
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Run the slow thing"}));
    pi.wait_for_event("tool_execution_start");
}

fn gated_script(rest: Vec<Reply>) -> Vec<Reply> {
    let mut script = vec![Reply::sse(sse::anthropic_bash("toolu_gate", GATED_COMMAND))];
    script.extend(rest);
    script
}

/// Default mode (one-at-a-time): two steers sent during a tool call are delivered one per turn,
/// each after the tool results and before the next LLM call.
#[test]
fn steering_one_at_a_time_delivers_one_message_per_turn_after_the_tool_results() {
    let fake = FakeProvider::start(gated_script(vec![
        Reply::sse(sse::anthropic_text(&["Ack one."])),
        Reply::sse(sse::anthropic_text(&["Ack two."])),
    ]));
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    start_gated_run(&mut pi);
    enqueue(
        &mut pi,
        "s1",
        "steer",
        "First steer",
        queue(&["First steer"], &[]),
    );
    enqueue(
        &mut pi,
        "s2",
        "steer",
        "Second steer",
        queue(&["First steer", "Second steer"], &[]),
    );
    let state = pi.command("g1", "get_state", json!({}));
    assert_eq!(state["data"]["pendingMessageCount"], 2, "{state}");
    assert_eq!(state["data"]["isStreaming"], true, "{state}");
    assert_eq!(
        fake.requests().len(),
        1,
        "nothing delivered while the tool runs"
    );

    open_gate(&pi);
    let run = pi.records_until_event("agent_end");
    assert_eq!(
        flow(&run),
        [
            "queue_update",
            "queue_update",
            "tool_execution_end",
            "message_start:toolResult",
            "message_end:toolResult",
            "turn_end",
            "turn_start",
            "queue_update",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "turn_start",
            "queue_update",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
        ]
    );
    let updates = queue_updates(&run);
    assert_eq!(updates[2], queue(&["Second steer"], &[]));
    assert_eq!(updates[3], queue(&[], &[]));
    let users: Vec<&Value> = run
        .iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "user")
        .map(|r| &r["message"]["content"])
        .collect();
    assert_eq!(
        users,
        [
            &json!([{"type": "text", "text": "First steer"}]),
            &json!([{"type": "text", "text": "Second steer"}])
        ]
    );

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        tail(&requests[1], 2),
        [pair("user", "<tool_result>"), pair("user", "First steer")],
        "the first steer follows the tool result in the next request"
    );
    assert_eq!(
        tail(&requests[2], 2),
        [pair("assistant", "Ack one."), pair("user", "Second steer")]
    );
    assert_eq!(pending_count(&mut pi, "g2"), 0);
    pi.wait_for_event("agent_settled");
    fake.finish();
}

/// Mode "all": every queued steer is delivered at the first drain point, in one turn.
#[test]
fn steering_all_delivers_every_message_at_the_next_drain_point() {
    let fake = FakeProvider::start(gated_script(vec![Reply::sse(sse::anthropic_text(&[
        "Ack both.",
    ]))]));
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let response = pi.command("m1", "set_steering_mode", json!({"mode": "all"}));
    assert_eq!(
        response,
        json!({"id": "m1", "type": "response", "command": "set_steering_mode", "success": true})
    );
    start_gated_run(&mut pi);
    enqueue(
        &mut pi,
        "s1",
        "steer",
        "First steer",
        queue(&["First steer"], &[]),
    );
    enqueue(
        &mut pi,
        "s2",
        "steer",
        "Second steer",
        queue(&["First steer", "Second steer"], &[]),
    );
    open_gate(&pi);
    let run = pi.records_until_event("agent_end");
    assert_eq!(
        flow(&run),
        [
            "queue_update",
            "queue_update",
            "tool_execution_end",
            "message_start:toolResult",
            "message_end:toolResult",
            "turn_end",
            "turn_start",
            "queue_update",
            "message_start:user",
            "message_end:user",
            "queue_update",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
        ]
    );
    let updates = queue_updates(&run);
    assert_eq!(updates[2], queue(&["Second steer"], &[]));
    assert_eq!(updates[3], queue(&[], &[]));
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        tail(&requests[1], 3),
        [
            pair("user", "<tool_result>"),
            pair("user", "First steer"),
            pair("user", "Second steer")
        ]
    );
    pi.wait_for_event("agent_settled");
    fake.finish();
}

/// A follow-up sent during a tool call waits until the agent would stop: the tool results get
/// their own LLM call first, then the follow-up starts another turn (same run).
#[test]
fn follow_up_is_delivered_only_when_the_agent_would_stop() {
    let fake = FakeProvider::start(gated_script(vec![
        Reply::sse(sse::anthropic_text(&["Tool looked fine."])),
        Reply::sse(sse::anthropic_text(&["Ack follow-up."])),
    ]));
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    start_gated_run(&mut pi);
    enqueue(
        &mut pi,
        "f1",
        "follow_up",
        "Later please",
        queue(&[], &["Later please"]),
    );
    assert_eq!(pending_count(&mut pi, "g1"), 1);
    open_gate(&pi);
    let run = pi.records_until_event("agent_end");
    assert_eq!(
        flow(&run),
        [
            "queue_update",
            "tool_execution_end",
            "message_start:toolResult",
            "message_end:toolResult",
            "turn_end",
            "turn_start",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "turn_start",
            "queue_update",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
        ]
    );
    assert_eq!(queue_updates(&run)[1], queue(&[], &[]));
    assert_eq!(
        run.iter().filter(|r| r["type"] == "agent_start").count(),
        0,
        "one run: no second agent_start"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(tail(&requests[1], 1), [pair("user", "<tool_result>")]);
    assert_eq!(
        tail(&requests[2], 2),
        [
            pair("assistant", "Tool looked fine."),
            pair("user", "Later please")
        ]
    );
    pi.wait_for_event("agent_settled");
    fake.finish();
}

/// Two follow-ups: "one-at-a-time" gives each its own turn, "all" delivers both together.
#[test]
fn follow_up_modes_deliver_one_or_all() {
    for mode in ["one-at-a-time", "all"] {
        let mut rest = vec![
            Reply::sse(sse::anthropic_text(&["Tool done."])),
            Reply::sse(sse::anthropic_text(&["Ack A."])),
        ];
        if mode == "one-at-a-time" {
            rest.push(Reply::sse(sse::anthropic_text(&["Ack B."])));
        }
        let fake = FakeProvider::start(gated_script(rest));
        let mut pi = Pi::spawn(&Setup::anthropic(&fake));
        let response = pi.command("m1", "set_follow_up_mode", json!({"mode": mode}));
        assert_eq!(response["success"], true, "{response}");
        start_gated_run(&mut pi);
        enqueue(
            &mut pi,
            "f1",
            "follow_up",
            "Follow A",
            queue(&[], &["Follow A"]),
        );
        enqueue(
            &mut pi,
            "f2",
            "follow_up",
            "Follow B",
            queue(&[], &["Follow A", "Follow B"]),
        );
        open_gate(&pi);
        let run = pi.records_until_event("agent_end");
        let requests = fake.requests();
        if mode == "one-at-a-time" {
            assert_eq!(requests.len(), 4, "{mode}");
            assert_eq!(
                tail(&requests[2], 2),
                [pair("assistant", "Tool done."), pair("user", "Follow A")],
                "{mode}"
            );
            assert_eq!(
                tail(&requests[3], 2),
                [pair("assistant", "Ack A."), pair("user", "Follow B")],
                "{mode}"
            );
            let updates = queue_updates(&run);
            assert_eq!(updates[2], queue(&[], &["Follow B"]), "{mode}");
            assert_eq!(updates[3], queue(&[], &[]), "{mode}");
        } else {
            assert_eq!(requests.len(), 3, "{mode}");
            assert_eq!(
                tail(&requests[2], 3),
                [
                    pair("assistant", "Tool done."),
                    pair("user", "Follow A"),
                    pair("user", "Follow B")
                ],
                "{mode}"
            );
        }
        pi.wait_for_event("agent_settled");
        fake.finish();
    }
}

/// A follow-up queued before a steer still waits: steering is delivered first.
#[test]
fn steering_beats_follow_up() {
    let fake = FakeProvider::start(gated_script(vec![
        Reply::sse(sse::anthropic_text(&["After steer."])),
        Reply::sse(sse::anthropic_text(&["After follow-up."])),
    ]));
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    start_gated_run(&mut pi);
    enqueue(
        &mut pi,
        "f1",
        "follow_up",
        "The follow-up",
        queue(&[], &["The follow-up"]),
    );
    enqueue(
        &mut pi,
        "s1",
        "steer",
        "The steer",
        queue(&["The steer"], &["The follow-up"]),
    );
    assert_eq!(pending_count(&mut pi, "g1"), 2);
    open_gate(&pi);
    let run = pi.records_until_event("agent_end");
    let updates = queue_updates(&run);
    assert_eq!(
        updates[2..],
        [queue(&[], &["The follow-up"]), queue(&[], &[])]
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        tail(&requests[1], 2),
        [pair("user", "<tool_result>"), pair("user", "The steer")]
    );
    assert!(
        !requests[1]
            .messages()
            .iter()
            .any(|m| message_text(m) == "The follow-up"),
        "the follow-up must wait"
    );
    assert_eq!(
        tail(&requests[2], 2),
        [
            pair("assistant", "After steer."),
            pair("user", "The follow-up")
        ]
    );
    pi.wait_for_event("agent_settled");
    fake.finish();
}

/// Steering sent while idle waits and joins the next prompt's first turn right after the prompt
/// (no extra turn); a follow-up sent while idle runs after that prompt's run would stop.
#[test]
fn messages_queued_while_idle_join_the_next_prompt() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["First answer."])),
        Reply::sse(sse::anthropic_text(&["Second answer."])),
    ]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    enqueue(
        &mut pi,
        "s1",
        "steer",
        "Idle steer",
        queue(&["Idle steer"], &[]),
    );
    enqueue(
        &mut pi,
        "f1",
        "follow_up",
        "Idle follow-up",
        queue(&["Idle steer"], &["Idle follow-up"]),
    );
    assert_eq!(pending_count(&mut pi, "g1"), 2);
    assert!(fake.requests().is_empty(), "queueing alone starts nothing");
    pi.send(json!({"id": "p1", "type": "prompt", "message": "The prompt"}));
    let run = pi.records_until_event("agent_end");
    assert_eq!(
        flow(&run),
        [
            "queue_update",
            "queue_update",
            "agent_start",
            "turn_start",
            "message_start:system",
            "message_end:system",
            "message_start:user",
            "message_end:user",
            "queue_update",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "turn_start",
            "queue_update",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
        ]
    );
    let updates = queue_updates(&run);
    assert_eq!(updates[2], queue(&[], &["Idle follow-up"]));
    assert_eq!(updates[3], queue(&[], &[]));
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        tail(&requests[0], 2),
        [pair("user", "The prompt"), pair("user", "Idle steer")]
    );
    assert_eq!(
        tail(&requests[1], 2),
        [
            pair("assistant", "First answer."),
            pair("user", "Idle follow-up")
        ]
    );
    pi.wait_for_event("agent_settled");
    fake.finish();
}

/// While a turn streams: `prompt` with `streamingBehavior` is queued (disposition "queued",
/// queue_update first); without it the prompt is refused with pi's exact text. A steer queued
/// during a tool-less turn is delivered after that turn's `turn_end`, before the next LLM call.
#[test]
fn prompt_while_streaming_is_queued_or_refused() {
    let held = sse::anthropic_text(&["Long ", "answer."]);
    let fake = FakeProvider::start(vec![
        Reply::hold(&held, "event: content_block_stop"),
        Reply::sse(sse::anthropic_text(&["Ack steer."])),
        Reply::sse(sse::anthropic_text(&["Ack follow-up."])),
    ]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Talk at length"}));
    let deadline = pi.deadline();
    pi.recv_until(
        |r| r["assistantMessageEvent"]["delta"] == "answer.",
        deadline,
    );

    let queued = pi.request(
        json!({"id": "p2", "type": "prompt", "message": "Queued steer",
                                   "streamingBehavior": "steer"}),
    );
    assert_eq!(
        queued,
        json!({"id": "p2", "type": "response", "command": "prompt", "success": true,
               "data": {"disposition": "queued"}})
    );
    let index = pi.index_of(&queued).expect("indexed");
    assert_eq!(
        pi.records()[index - 1],
        queue(&["Queued steer"], &[]),
        "queue_update comes right before the response"
    );
    let queued = pi.request(
        json!({"id": "p3", "type": "prompt", "message": "Queued follow-up",
                                   "streamingBehavior": "followUp"}),
    );
    assert_eq!(queued["data"], json!({"disposition": "queued"}));
    let refused = pi.request(json!({"id": "p4", "type": "prompt", "message": "Refused"}));
    assert_eq!(
        refused,
        json!({"id": "p4", "type": "response", "command": "prompt", "success": false,
               "error": "Agent is already processing. Specify streamingBehavior ('steer' or 'followUp') to queue the message."})
    );
    assert_eq!(pending_count(&mut pi, "g1"), 2);

    fake.release_stalls();
    let run = pi.records_until_event("agent_end");
    let after_first: Vec<String> = flow(&run)
        .into_iter()
        .skip_while(|l| l != "message_end:assistant")
        .collect();
    assert_eq!(
        after_first,
        [
            "message_end:assistant",
            "turn_end",
            "turn_start",
            "queue_update",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "turn_start",
            "queue_update",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
        ]
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        tail(&requests[1], 2),
        [
            pair("assistant", "Long answer."),
            pair("user", "Queued steer")
        ]
    );
    assert_eq!(
        tail(&requests[2], 2),
        [
            pair("assistant", "Ack steer."),
            pair("user", "Queued follow-up")
        ]
    );
    assert!(
        requests
            .iter()
            .flat_map(|r| r.messages().iter())
            .all(|m| message_text(m) != "Refused"),
        "a refused prompt never reaches the provider"
    );
    pi.wait_for_event("agent_settled");
    fake.finish();
}

/// `clear_queue` (pi 0.84.4): both queues are emptied, a `queue_update` says so before the
/// response, and the response answers the removed texts (`data.steering` / `data.followUp`) so a
/// client can restore them; the run then goes on as if they were never sent.
#[test]
fn clear_queue_empties_both_queues_and_answers_their_texts() {
    let fake = FakeProvider::start(gated_script(vec![Reply::sse(sse::anthropic_text(&[
        "Done.",
    ]))]));
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    start_gated_run(&mut pi);
    enqueue(
        &mut pi,
        "s1",
        "steer",
        "Turn left",
        queue(&["Turn left"], &[]),
    );
    enqueue(
        &mut pi,
        "f1",
        "follow_up",
        "Then summarize",
        queue(&["Turn left"], &["Then summarize"]),
    );
    let response = pi.command("c1", "clear_queue", json!({}));
    assert_eq!(
        response,
        json!({"id": "c1", "type": "response", "command": "clear_queue", "success": true,
               "data": {"steering": ["Turn left"], "followUp": ["Then summarize"]}})
    );
    let response_index = pi.index_of(&response).expect("indexed");
    let update = pi.records()[..response_index]
        .iter()
        .rfind(|r| r["type"] == "queue_update")
        .cloned();
    assert_eq!(update, Some(queue(&[], &[])));
    assert_eq!(pending_count(&mut pi, "g1"), 0);

    // Cleared again: nothing left to answer.
    let again = pi.command("c2", "clear_queue", json!({}));
    assert_eq!(again["data"], json!({"steering": [], "followUp": []}));

    open_gate(&pi);
    pi.records_until_event("agent_end");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "no queued message delivered");
    assert_eq!(
        tail(&requests[1], 1),
        [pair("user", "<tool_result>")],
        "the cleared messages never reach the model"
    );
    fake.finish();
}
