//! Automatic retry of transient provider failures (FACTS.md §4.6, §4.7, seed `agent_settled`,
//! `agent_end.willRetry`, `abort_retry`). Settings keep the backoff short
//! (`retry.baseDelayMs` 50) so the tests stay fast.
//!
//! Reference: fails at the seed-only parts (`willRetry`, `agent_settled`); the 429 test also
//! fails there because 0.73.1 leaves `retry-after` to the SDK's own hidden retries.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::sse;
use crate::support::{GAP, Pi, Setup, check_transcript, flow};

/// Asserts that nothing at all is emitted after the records seen so far: a `get_state` sent now
/// is answered with no event before its response.
#[track_caller]
fn assert_quiet(pi: &mut Pi, id: &str) {
    let deadline = pi.deadline();
    pi.send(json!({"id": id, "type": "get_state"}));
    let records = pi.recv_until(|r| r["type"] == "response" && r["id"] == id, deadline);
    assert_eq!(
        records.len(),
        1,
        "nothing may follow agent_settled: {records:?}"
    );
    assert_eq!(records[0]["data"]["isStreaming"], false);
}

/// 529 then success: the failed run's agent_end says willRetry, auto_retry_start carries the
/// attempt, limit, delay and error; the retry run has no user message; auto_retry_end{success}
/// sits between the good reply's message_end and its turn_end; one agent_settled at the very end.
#[test]
fn overloaded_529_is_retried_then_succeeds() {
    let body = fixture("anthropic/error_529.json");
    let fake = FakeProvider::start(vec![
        Reply::status(529, body.clone(), &[]),
        Reply::sse(sse::anthropic_text(&["Recovered."])),
    ]);
    let setup = Setup::anthropic(&fake).settings(json!({"retry": {"baseDelayMs": 50}}));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let records = pi.records_until_event("agent_settled");
    assert_eq!(
        flow(&records),
        [
            "agent_start",
            "turn_start",
            "message_start:system",
            "message_end:system",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
            "auto_retry_start",
            "entry_appended",
            "agent_start",
            "turn_start",
            "message_start:assistant",
            "message_end:assistant",
            "auto_retry_end",
            "turn_end",
            "agent_end",
            "agent_settled",
        ]
    );
    let error_text = format!("529 {body}");
    let failed = &records
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .expect("failed reply")["message"];
    assert_eq!(failed["stopReason"], "error");
    assert_eq!(failed["errorMessage"], error_text.as_str());
    check_transcript(
        &records,
        &[
            json!(GAP),
            json!({"type": "agent_end", "willRetry": true}),
            json!(GAP),
            json!({"type": "agent_end", "willRetry": false}),
            json!(GAP),
        ],
    );
    let start = records
        .iter()
        .find(|r| r["type"] == "auto_retry_start")
        .expect("auto_retry_start");
    assert_eq!(
        *start,
        json!({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 50,
               "errorMessage": error_text})
    );
    // pi 1.6.0 leaves the failed attempt out of the context for good: a context_edit of its
    // entry (the session's entry before it), without replacement.
    let edit = &records
        .iter()
        .find(|r| r["type"] == "entry_appended")
        .expect("entry_appended")["entry"];
    assert_eq!(edit["type"], "context_edit", "{edit}");
    assert_eq!(edit["targetId"], edit["parentId"], "{edit}");
    assert_eq!(edit["replacement"], Value::Null);
    let keys: Vec<&String> = edit.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "type",
            "id",
            "parentId",
            "timestamp",
            "targetId",
            "replacement"
        ]
    );
    let end = records
        .iter()
        .find(|r| r["type"] == "auto_retry_end")
        .expect("auto_retry_end");
    assert_eq!(
        *end,
        json!({"type": "auto_retry_end", "success": true, "attempt": 1})
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].messages(),
        requests[0].messages(),
        "the failed reply is not part of the retried request"
    );
    assert!(
        requests[1].received_at - requests[0].received_at >= Duration::from_millis(50),
        "the backoff delay is honoured"
    );
    assert_quiet(&mut pi, "after");
    fake.finish();
}

/// Three 500s with maxRetries 2: two retries, then auto_retry_end{success:false} with the last
/// error, after the final agent_end (willRetry false), then agent_settled.
#[test]
fn retries_are_exhausted_after_max_retries() {
    let body = fixture("anthropic/error_500.json");
    let fake = FakeProvider::start(vec![
        Reply::status(500, body.clone(), &[]),
        Reply::status(500, body.clone(), &[]),
        Reply::status(500, body.clone(), &[]),
    ]);
    let setup =
        Setup::anthropic(&fake).settings(json!({"retry": {"baseDelayMs": 50, "maxRetries": 2}}));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let records = pi.records_until_event("agent_settled");
    let error_text = format!("500 {body}");
    let retry_events: Vec<&Value> = records
        .iter()
        .filter(|r| {
            matches!(
                r["type"].as_str(),
                Some("agent_end" | "auto_retry_start" | "auto_retry_end" | "agent_settled")
            )
        })
        .collect();
    let shapes: Vec<Value> = retry_events
        .iter()
        .map(|r| match r["type"].as_str() {
            Some("agent_end") => json!({"type": "agent_end", "willRetry": r["willRetry"]}),
            _ => (*r).clone(),
        })
        .collect();
    assert_eq!(
        shapes,
        [
            json!({"type": "agent_end", "willRetry": true}),
            json!({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 2, "delayMs": 50,
                   "errorMessage": error_text}),
            json!({"type": "agent_end", "willRetry": true}),
            json!({"type": "auto_retry_start", "attempt": 2, "maxAttempts": 2, "delayMs": 100,
                   "errorMessage": error_text}),
            json!({"type": "agent_end", "willRetry": false}),
            json!({"type": "auto_retry_end", "success": false, "attempt": 2,
                   "finalError": error_text}),
            json!({"type": "agent_settled", "aborted": false}),
        ]
    );
    assert_eq!(fake.requests().len(), 3);
    assert_quiet(&mut pi, "after");
    fake.finish();
}

/// A 429 whose retry-after (1 s) exceeds the backoff (50 ms): the wait is at least the server's.
#[test]
fn retry_after_header_sets_the_minimum_delay() {
    let body = fixture("anthropic/error_429.json");
    let fake = FakeProvider::start(vec![
        Reply::status(429, body, &[("retry-after", "1")]),
        Reply::sse(sse::anthropic_text(&["Finally."])),
    ]);
    let setup = Setup::anthropic(&fake).settings(json!({"retry": {"baseDelayMs": 50}}));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let start = pi.wait_for_event("auto_retry_start");
    let delay = start["delayMs"].as_u64().expect("delayMs");
    assert!(
        delay >= 1000,
        "delayMs {delay} ignores retry-after: {start}"
    );
    let records = pi.records_until_event("agent_settled");
    assert!(
        records
            .iter()
            .any(|r| *r == json!({"type": "auto_retry_end", "success": true, "attempt": 1}))
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let waited = requests[1].received_at - requests[0].received_at;
    assert!(
        waited >= Duration::from_millis(1000),
        "the retry came after {waited:?}, before retry-after allowed"
    );
    fake.finish();
}

/// abort_retry during the backoff: auto_retry_end{success:false, finalError:"Retry cancelled"},
/// agent_settled, and no retry afterwards.
#[test]
fn abort_retry_cancels_the_pending_retry() {
    let fake = FakeProvider::start(vec![Reply::status(
        529,
        fixture("anthropic/error_529.json"),
        &[],
    )]);
    let setup = Setup::anthropic(&fake).settings(json!({"retry": {"baseDelayMs": 1000}}));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let start = pi.wait_for_event("auto_retry_start");
    assert_eq!(start["delayMs"], 1000);
    let response = pi.request(json!({"id": "r1", "type": "abort_retry"}));
    assert_eq!(
        response,
        json!({"id": "r1", "type": "response", "command": "abort_retry", "success": true})
    );
    let records = pi.records_until_event("agent_settled");
    assert_eq!(
        flow(&records),
        ["entry_appended", "auto_retry_end", "agent_settled"],
        "{records:?}"
    );
    let end = records
        .iter()
        .find(|r| r["type"] == "auto_retry_end")
        .expect("auto_retry_end");
    assert_eq!(
        *end,
        json!({"type": "auto_retry_end", "success": false, "attempt": 1,
               "finalError": "Retry cancelled"})
    );
    // Outlast the cancelled delay: no new run may start.
    let later = pi.drain_for(Duration::from_millis(1500));
    assert!(later.is_empty(), "activity after abort_retry: {later:?}");
    assert_eq!(fake.requests().len(), 1);
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["data"]["isStreaming"], false);
    fake.finish();
}

/// The connection drops mid-stream (after some text): the reply fails with a retryable network
/// error, the retry succeeds, and the partial reply is not in the retried request.
#[test]
fn stream_cut_midway_is_retried() {
    let prefix = sse::AnthropicStream::new()
        .text(&["Partial ", "text"])
        .unfinished();
    let fake = FakeProvider::start(vec![
        Reply::stall_after(prefix),
        Reply::sse(sse::anthropic_text(&["Whole answer."])),
    ]);
    let setup = Setup::anthropic(&fake).settings(json!({"retry": {"baseDelayMs": 50}}));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let deadline = pi.deadline();
    // "text" ends in "t", the start of the fixture key "test-key": that byte is held back until
    // more text shows it is not the key (a key is never completed across delta records).
    pi.recv_until(
        |r| {
            r["assistantMessageEvent"]["delta"]
                .as_str()
                .is_some_and(|d| d.starts_with("tex"))
        },
        deadline,
    );
    fake.release_stalls();
    let first = pi.records_until_event("agent_end");
    let failed = &first
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("failed reply")["message"];
    assert_eq!(failed["stopReason"], "error", "{failed}");
    assert_eq!(first.last().expect("agent_end")["willRetry"], true);
    let start = pi.wait_for_event("auto_retry_start");
    assert_eq!(start["attempt"], 1);
    assert_eq!(start["errorMessage"], failed["errorMessage"]);
    let second = pi.records_until_event("agent_settled");
    let answer = &second
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("answer")["message"];
    assert_eq!(
        answer["content"],
        json!([{"type": "text", "text": "Whole answer."}])
    );
    assert!(
        second
            .iter()
            .any(|r| *r == json!({"type": "auto_retry_end", "success": true, "attempt": 1}))
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].messages(), requests[0].messages());
    fake.finish();
}

/// `retry.provider.maxRetries` (pi ≥ 0.76, default 0): with it at 2 and auto-retry off, a
/// transient 500 is retried inside the provider client, silently — one run, no `auto_retry_*`,
/// no error message — and the reply is the second request's. Both references do the same.
#[test]
fn provider_level_retry_answers_a_transient_500_silently() {
    let fake = FakeProvider::start(vec![
        Reply::status(500, fixture("anthropic/error_500.json"), &[]),
        Reply::sse(sse::anthropic_text(&["Second time lucky."])),
    ]);
    let setup = Setup::anthropic(&fake)
        .settings(json!({"retry": {"enabled": false, "provider": {"maxRetries": 2}}}));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let records = pi.records_until_event("agent_end");
    let labels = flow(&records);
    assert!(
        !labels.iter().any(|l| l.starts_with("auto_retry")),
        "provider retries are silent: {labels:?}"
    );
    assert_eq!(
        labels
            .iter()
            .filter(|l| l.as_str() == "message_end:assistant")
            .count(),
        1,
        "{labels:?}"
    );
    let reply = records
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .expect("assistant message_end");
    assert_eq!(reply["message"]["stopReason"], "stop", "{reply}");
    assert_eq!(reply["message"]["content"][0]["text"], "Second time lucky.");
    assert_eq!(fake.requests().len(), 2);
    fake.finish();
}

/// A provider-level retry waits for the server's `retry-after`; `abort` during that wait ends
/// the run at once, no second request is ever sent, and no provider thread is left sleeping.
#[test]
fn abort_ends_a_provider_level_retry_wait_at_once() {
    let fake = FakeProvider::start(vec![
        Reply::status(
            503,
            fixture("anthropic/error_500.json"),
            &[("retry-after", "30")],
        ),
        Reply::sse(sse::anthropic_text(&["Never sent."])),
    ]);
    let setup = Setup::anthropic(&fake)
        .settings(json!({"retry": {"enabled": false, "provider": {"maxRetries": 1}}}));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    fake.wait_for_requests(1, pi.timeout());
    assert!(
        !pi.drain_for(Duration::from_millis(300))
            .iter()
            .any(|r| r["type"] == "agent_end"),
        "the run waits for the retry"
    );
    pi.send(json!({"id": "a1", "type": "abort"}));
    let records = pi.records_until_event("agent_end");
    let end = records.last().expect("agent_end");
    let last = end["messages"].as_array().and_then(|m| m.last()).cloned();
    assert_eq!(
        last.map(|m| m["stopReason"].clone()),
        Some(json!("aborted")),
        "{end}"
    );
    if !crate::support::is_reference() {
        assert!(
            wait_for_no_provider_thread(pi.pid(), pi.timeout()),
            "a provider thread outlived the aborted run"
        );
    }
    assert_eq!(fake.requests().len(), 1, "no retry after abort");
    assert!(fake.remaining_replies() == 1);
}

/// Whether every `provider-<n>` thread of `pid` is gone within `timeout` (Linux `/proc`).
fn wait_for_no_provider_thread(pid: i32, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc task list");
        let alive = tasks.flatten().any(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.starts_with("provider-"))
        });
        if !alive {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A provider-level retry's wait is not silence: with `retry.provider.timeoutMs` (the idle
/// timeout) shorter than the server's `retry-after`, the retried request still answers.
#[test]
fn provider_level_retry_wait_does_not_count_as_an_idle_stream() {
    let fake = FakeProvider::start(vec![
        Reply::status(
            429,
            fixture("anthropic/error_429.json"),
            &[("retry-after", "1")],
        ),
        Reply::sse(sse::anthropic_text(&["After the wait."])),
    ]);
    let setup = Setup::anthropic(&fake).settings(json!({"retry": {
        "enabled": false,
        "provider": {"maxRetries": 1, "timeoutMs": 400},
    }}));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let records = pi.records_until_event("agent_end");
    let reply = records
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .expect("assistant message_end");
    assert_eq!(reply["message"]["stopReason"], "stop", "{reply}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].received_at - requests[0].received_at >= Duration::from_millis(1000));
    fake.finish();
}
