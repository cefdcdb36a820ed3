//! Provider faults (FACTS.md §4.6, §8; seed `agent_end.willRetry`, `auto_retry_*`,
//! `agent_settled`): a refused connection, a host that does not resolve, TLS spoken to a plain
//! HTTP port, response headers followed by silence, a body cut inside an event, an HTML page with
//! status 200, an event stream of garbage, and a very large stream. Each ends the run with an
//! assistant reply that says what failed (`stopReason:"error"`, `errorMessage` set; transient
//! failures retried), never a hang or a crash, and the process still answers `get_state`. Also:
//! pi-rs exits when its parent dies, and takes its tool's children with it.
//!
//! Retries are pinned per test: `{"retry":{"baseDelayMs":20,"maxRetries":1}}` where the retry
//! sequence is part of the check, `{"retry":{"enabled":false}}` where only the error matters.
//! Nothing here leaves 127.0.0.1: the unresolvable host uses the reserved `.invalid` TLD.
//!
//! Reference: fails at the seed-only parts (`willRetry`, `agent_settled`), and where it ends a
//! body without events (HTML, garbage) with an empty successful reply instead of an error.

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{
    Pi, Setup, Workspace, assistant_messages, process_alive, prompt_until, wait_for_tool_pid,
    wait_until_gone,
};

fn retry_once() -> Value {
    json!({"retry": {"baseDelayMs": 20, "maxRetries": 1}})
}

fn no_retry() -> Value {
    json!({"retry": {"enabled": false}})
}

/// A models.json with one anthropic-messages provider, `fault/fault-model`, at `base_url`.
fn fault_models(base_url: &str) -> String {
    json!({"providers": {"fault": {
        "baseUrl": base_url,
        "apiKey": "test-key",
        "api": "anthropic-messages",
        "models": [{
            "id": "fault-model", "name": "Fault Model", "reasoning": false, "input": ["text"],
            "cost": {"input": 1, "output": 5, "cacheRead": 0.1, "cacheWrite": 1.25},
            "contextWindow": 100000, "maxTokens": 4096
        }]
    }}})
    .to_string()
}

/// `fault/fault-model` pointed at `base_url` (the fake is only needed for the setup's defaults).
fn fault_setup(fake: &FakeProvider, base_url: &str) -> Setup {
    Setup::new(fake, "fault", "fault-model").models_json(&fault_models(base_url))
}

/// A 127.0.0.1 port nobody listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local_addr").port();
    drop(listener);
    port
}

/// The run-level events (agent_end reduced to its willRetry flag), for retry sequences.
fn retry_flow(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .filter_map(|r| match r["type"].as_str() {
            Some("agent_end") => Some(json!({"type": "agent_end", "willRetry": r["willRetry"]})),
            Some("auto_retry_start" | "auto_retry_end" | "agent_settled") => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// The reply failed and says why.
#[track_caller]
fn assert_error_reply(reply: &Value) -> String {
    assert_eq!(reply["stopReason"], "error", "{reply}");
    let message = reply["errorMessage"].as_str().unwrap_or_default();
    assert!(
        !message.trim().is_empty(),
        "an error reply must say what went wrong: {reply}"
    );
    message.to_string()
}

/// One failed reply, not retried, then the run settled.
#[track_caller]
fn assert_single_error(records: &[Value]) -> String {
    let replies = assistant_messages(records);
    assert_eq!(replies.len(), 1, "{replies:?}");
    let error = assert_error_reply(&replies[0]);
    assert_eq!(
        retry_flow(records),
        [
            json!({"type": "agent_end", "willRetry": false}),
            json!({"type": "agent_settled", "aborted": false})
        ]
    );
    error
}

/// Two failed replies: the first retried once after 20 ms, the second final.
#[track_caller]
fn assert_retried_once_then_failed(records: &[Value]) {
    let replies = assistant_messages(records);
    assert_eq!(replies.len(), 2, "{replies:?}");
    let first = assert_error_reply(&replies[0]);
    let last = assert_error_reply(&replies[1]);
    assert_eq!(
        retry_flow(records),
        [
            json!({"type": "agent_end", "willRetry": true}),
            json!({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 1, "delayMs": 20,
                   "errorMessage": first}),
            json!({"type": "agent_end", "willRetry": false}),
            json!({"type": "auto_retry_end", "success": false, "attempt": 1, "finalError": last}),
            json!({"type": "agent_settled", "aborted": false}),
        ]
    );
}

/// The process is alive, idle, and did not panic.
#[track_caller]
fn assert_still_answers(pi: &mut Pi, id: &str) {
    let state = pi.command(id, "get_state", json!({}));
    assert_eq!(state["success"], true, "{state}");
    assert_eq!(state["data"]["isStreaming"], false, "{state}");
    let stderr = pi.stderr_raw();
    assert!(!stderr.contains("panicked"), "pi panicked:\n{stderr}");
}

#[test]
fn connection_refused_is_retried_then_fails_clearly() {
    let fake = FakeProvider::start(Vec::new());
    let base_url = format!("http://127.0.0.1:{}", closed_port());
    let setup = fault_setup(&fake, &base_url).settings(retry_once());
    let mut pi = Pi::spawn(&setup);
    let records = prompt_until(&mut pi, "p1", "Hi", "agent_settled");
    assert_retried_once_then_failed(&records);
    assert_still_answers(&mut pi, "s1");
    fake.finish();
}

/// `.invalid` never resolves (RFC 2606), so this needs no network and reaches none.
#[test]
fn unresolvable_host_fails_clearly() {
    let fake = FakeProvider::start(Vec::new());
    let setup = fault_setup(&fake, "http://pi-rs-fault-test.invalid:9").settings(no_retry());
    let mut pi = Pi::spawn(&setup);
    let records = prompt_until(&mut pi, "p1", "Hi", "agent_settled");
    assert_single_error(&records);
    assert_still_answers(&mut pi, "s1");
    fake.finish();
}

/// `https://` pointed at the fake's plain-HTTP port: the handshake gets a plain-text 400.
#[test]
fn tls_to_a_plain_http_port_fails_clearly() {
    let fake = FakeProvider::start(Vec::new());
    let base_url = fake.base_url().replacen("http://", "https://", 1);
    let setup = fault_setup(&fake, &base_url).settings(no_retry());
    let mut pi = Pi::spawn(&setup);
    let records = prompt_until(&mut pi, "p1", "Hi", "agent_settled");
    assert_single_error(&records);
    assert_eq!(
        fake.tls_handshakes_refused(),
        1,
        "the request did not reach the fake as a TLS handshake"
    );
    assert!(fake.requests().is_empty());
    assert_still_answers(&mut pi, "s1");
    fake.finish();
}

/// Headers, then nothing. The agent's idle timeout is a fixed 300 s (`STREAM_IDLE_TIMEOUT` in
/// src/agent/mod.rs, no setting or variable shortens it), so this checks the way out a client
/// has: `abort` ends the silent request at once and closes its connection.
#[test]
fn headers_then_silence_is_ended_promptly_by_abort() {
    let fake = FakeProvider::start(vec![Reply::stall_after("")]);
    let setup = Setup::anthropic(&fake).settings(no_retry());
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let deadline = pi.deadline();
    pi.recv_until(
        |r| r["type"] == "message_start" && r["message"]["role"] == "assistant",
        deadline,
    );
    let asked = Instant::now();
    pi.send(json!({"id": "a1", "type": "abort"}));
    let response = pi.response_for("a1");
    let took = asked.elapsed();
    assert_eq!(response["success"], true, "{response}");
    assert!(took < Duration::from_secs(2), "abort took {took:?}");
    let records = pi.records_until_event("agent_settled");
    let reply = assistant_messages(&records)
        .pop()
        .expect("the reply is closed");
    assert_eq!(reply["stopReason"], "aborted", "{reply}");
    fake.wait_for_stalls_closed_by_client(1, pi.timeout());
    assert_still_answers(&mut pi, "s1");
    fake.finish();
}

/// Some text, then a body that ends (cleanly, as chunked encoding goes) inside an event.
#[test]
fn body_ending_inside_an_event_fails_clearly() {
    let mut body = sse::AnthropicStream::new().text(&["Partial "]).unfinished();
    body.push_str(
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_del",
    );
    let fake = FakeProvider::start(vec![Reply::sse(body)]);
    let setup = Setup::anthropic(&fake).settings(no_retry());
    let mut pi = Pi::spawn(&setup);
    let records = prompt_until(&mut pi, "p1", "Hi", "agent_settled");
    assert_single_error(&records);
    assert_still_answers(&mut pi, "s1");
    fake.finish();
}

/// The connection drops inside an event: a transient failure, retried; the retry succeeds.
#[test]
fn connection_dropped_inside_an_event_is_retried() {
    let mut prefix = sse::AnthropicStream::new().text(&["Partial "]).unfinished();
    prefix.push_str("event: content_block_delta\ndata: {\"type\":\"content_bl");
    let fake = FakeProvider::start(vec![
        Reply::stall_after(prefix),
        Reply::sse(sse::anthropic_text(&["Whole answer."])),
    ]);
    let setup = Setup::anthropic(&fake).settings(retry_once());
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let deadline = pi.deadline();
    pi.recv_until(
        |r| r["assistantMessageEvent"]["delta"] == "Partial ",
        deadline,
    );
    fake.release_stalls();
    let records = pi.records_until_event("agent_settled");
    let replies = assistant_messages(&records);
    assert_eq!(replies.len(), 2, "{replies:?}");
    let error = assert_error_reply(&replies[0]);
    assert_eq!(replies[1]["stopReason"], "stop", "{}", replies[1]);
    assert_eq!(
        retry_flow(&records),
        [
            json!({"type": "agent_end", "willRetry": true}),
            json!({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 1, "delayMs": 20,
                   "errorMessage": error}),
            json!({"type": "auto_retry_end", "success": true, "attempt": 1}),
            json!({"type": "agent_end", "willRetry": false}),
            json!({"type": "agent_settled", "aborted": false}),
        ]
    );
    assert_still_answers(&mut pi, "s1");
    fake.finish();
}

/// A captive portal or misconfigured proxy: status 200, an HTML page.
fn check_html_page_with_status_200(api: &str) {
    let html = "<!DOCTYPE html>\n<html><head><title>Welcome</title></head>\n<body><h1>Welcome to nginx!</h1></body></html>\n";
    let fake = FakeProvider::start(vec![Reply::status(
        200,
        html,
        &[("content-type", "text/html; charset=utf-8")],
    )]);
    let setup = match api {
        "anthropic" => Setup::anthropic(&fake),
        _ => Setup::openai(&fake),
    }
    .settings(no_retry());
    let mut pi = Pi::spawn(&setup);
    let records = prompt_until(&mut pi, "p1", "Hi", "agent_settled");
    let replies = assistant_messages(&records);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        replies[0]["stopReason"], "error",
        "an HTML page is not a model reply: {}",
        replies[0]
    );
    assert_single_error(&records);
    assert_still_answers(&mut pi, "s1");
    fake.finish();
}

#[test]
fn html_page_with_status_200_fails_clearly_anthropic() {
    check_html_page_with_status_200("anthropic");
}

#[test]
fn html_page_with_status_200_fails_clearly_openai() {
    check_html_page_with_status_200("openai");
}

/// `text/event-stream` whose lines are junk: no known event, a data line that is not JSON.
fn check_garbage_event_stream(api: &str) {
    let garbage = "this is not an event stream\nfoo bar baz\n\nwhat: ever\n\u{7f}\u{1}\n\ndata: {definitely not json\n\n";
    let fake = FakeProvider::start(vec![Reply::sse(garbage)]);
    let setup = match api {
        "anthropic" => Setup::anthropic(&fake),
        _ => Setup::openai(&fake),
    }
    .settings(no_retry());
    let mut pi = Pi::spawn(&setup);
    let records = prompt_until(&mut pi, "p1", "Hi", "agent_settled");
    let replies = assistant_messages(&records);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        replies[0]["stopReason"], "error",
        "garbage is not a model reply: {}",
        replies[0]
    );
    assert_single_error(&records);
    assert_still_answers(&mut pi, "s1");
    fake.finish();
}

#[test]
fn garbage_event_stream_fails_clearly_anthropic() {
    check_garbage_event_stream("anthropic");
}

#[test]
fn garbage_event_stream_fails_clearly_openai() {
    check_garbage_event_stream("openai");
}

/// 20 MB of text in 20 000 deltas: the reply completes, whole and in order (memory is not
/// measured here).
#[test]
fn twenty_megabytes_of_text_deltas_complete() {
    let parts: Vec<String> = (0..20_000)
        .map(|i| format!("{i:08}{}", "x".repeat(992)))
        .collect();
    let expected: String = parts.concat();
    let part_refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&part_refs))]);
    let setup = Setup::anthropic(&fake).settings(no_retry());
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Say a lot"}));
    // Far more data than any other scenario: allow several ordinary deadlines.
    let deadline = Instant::now() + pi.timeout() * 6;
    let records = pi.recv_until(|r| r["type"] == "agent_settled", deadline);
    let reply = assistant_messages(&records).pop().expect("the reply");
    assert_eq!(
        reply["stopReason"], "stop",
        "errorMessage: {}",
        reply["errorMessage"]
    );
    let text = reply["content"][0]["text"].as_str().unwrap_or_default();
    assert_eq!(text.len(), expected.len());
    assert!(text == expected, "the text arrived altered or out of order");
    assert_eq!(reply["content"].as_array().map(Vec::len), Some(1));
    assert_still_answers(&mut pi, "s1");
    fake.finish();
}

/// SIGKILLs the listed pids on drop if they are still alive: a failing test must not leave
/// pi or a `sleep 300` behind (they are not the test's children once their parent is gone).
struct KillOnDrop(Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if pid > 0 && process_alive(pid) {
                // SAFETY: kill(2) on a pid this test started (directly or through pi).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// Waits for `path` to hold a pid (the shell writes it right after starting pi).
fn read_pid_file(path: &Path, timeout: Duration) -> i32 {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never got a pid",
            path.display()
        );
        // The shell writing a file has no event to wait on; poll with a bound.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// pi runs under an intermediate `sh` (its stdin, a pipe the test keeps open, passed through
/// fd 3 since a background job's stdin is otherwise /dev/null). SIGKILL on the shell: pi must
/// exit on its own (PR_SET_PDEATHSIG) and its bash tool's backgrounded `sleep 300` must die
/// with it — even though stdin never closes.
#[test]
fn parent_death_ends_pi_and_its_tool_children() {
    let sleeper_command = "sleep 300 & echo \"started $!\"; wait";
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_bash(
        "toolu_sleeper",
        sleeper_command,
    ))]);
    let workspace = Workspace::new();
    let script = "exec 3<&0; \"$@\" <&3 3<&- & echo $! > pi.pid; wait";
    let setup = Setup::anthropic(&fake).wrapped_in(&["sh", "-c", script, "sh"]);
    let mut parent = Pi::spawn_in(&workspace, &setup);
    let pi_pid = read_pid_file(&workspace.cwd().join("pi.pid"), parent.timeout());
    let mut cleanup = KillOnDrop(vec![pi_pid]);
    assert_ne!(pi_pid, parent.pid());
    parent.send(json!({"id": "p1", "type": "prompt", "message": "Start a sleeper"}));
    let sleeper = wait_for_tool_pid(&mut parent, "started");
    cleanup.0.push(sleeper);
    assert!(process_alive(pi_pid) && process_alive(sleeper));

    parent.kill();
    assert!(
        wait_until_gone(pi_pid, parent.timeout()),
        "pi ({pi_pid}) outlived its parent\n{}",
        parent.stderr_text()
    );
    assert!(
        wait_until_gone(sleeper, parent.timeout()),
        "the tool's background child {sleeper} outlived pi"
    );
    let stderr = parent.stderr_raw();
    assert!(!stderr.contains("panicked"), "pi panicked:\n{stderr}");
    fake.finish();
}
