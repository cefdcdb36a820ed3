//! How the process ends (FACTS.md §2.6 and the pi-rs target): stdin EOF, SIGTERM, SIGHUP and a
//! client that closes stdout. A running run is aborted with its `agent_end` first, the exit code
//! is 0 / 143 / 129 / 0, nothing panics, and no shell child outlives the process.
//!
//! Reference: 0.73.1 exits on stdin EOF without aborting or emitting anything (FACTS §16), so
//! the EOF tests fail there by design.

use std::os::unix::process::ExitStatusExt;

use serde_json::json;

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{Pi, Setup, process_alive, wait_for_tool_pid, wait_until_gone};

const SLEEPER: &str = "sleep 300 & echo \"started $!\"; wait";

/// A pi whose run sits in a bash tool call with a backgrounded `sleep 300`; returns its pid.
fn pi_with_sleeper() -> (FakeProvider, Pi, i32) {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_bash(
        "toolu_sleeper",
        SLEEPER,
    ))]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Start a sleeper"}));
    let pid = wait_for_tool_pid(&mut pi, "started");
    assert!(process_alive(pid));
    (fake, pi, pid)
}

#[track_caller]
fn assert_no_panic(pi: &Pi) {
    let stderr = pi.stderr_raw();
    assert!(
        !stderr.contains("panicked"),
        "pi panicked on the way out:\n{stderr}"
    );
}

#[track_caller]
fn assert_gone(pid: i32, pi: &Pi) {
    assert!(
        wait_until_gone(pid, pi.timeout()),
        "the tool's background child {pid} outlived pi"
    );
}

/// stdin closes mid-stream: the reply is closed as aborted, agent_end is written, exit 0.
#[test]
fn stdin_eof_mid_stream_aborts_the_run_and_exits_zero() {
    let prefix = sse::AnthropicStream::new().text(&["Half"]).unfinished();
    let fake = FakeProvider::start(vec![Reply::stall_after(prefix)]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Talk"}));
    let deadline = pi.deadline();
    pi.recv_until(|r| r["assistantMessageEvent"]["delta"] == "Half", deadline);
    pi.close_stdin();
    let rest = pi.records_until_event("agent_end");
    let assistant = &rest
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("assistant message_end")["message"];
    assert_eq!(assistant["stopReason"], "aborted", "{assistant}");
    assert_eq!(
        assistant["content"],
        json!([{"type": "text", "text": "Half"}])
    );
    let status = pi.wait_for_exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_no_panic(&pi);
    fake.release_stalls();
    fake.finish();
}

/// stdin closes while a tool runs: agent_end, exit 0, and the tool's grandchild is gone.
#[test]
fn stdin_eof_mid_tool_kills_children_and_exits_zero() {
    let (fake, mut pi, sleeper) = pi_with_sleeper();
    pi.close_stdin();
    let rest = pi.records_until_event("agent_end");
    assert!(
        rest.iter().any(|r| r["type"] == "tool_execution_end"),
        "the tool call is closed before agent_end: {rest:?}"
    );
    let status = pi.wait_for_exit();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_no_panic(&pi);
    assert_gone(sleeper, &pi);
    fake.finish();
}

/// SIGTERM: agent_end first, exit code 143, no surviving child.
#[test]
fn sigterm_ends_the_run_and_exits_143() {
    signal_ends_the_run(libc::SIGTERM, 143);
}

/// SIGHUP: agent_end first, exit code 129, no surviving child.
#[test]
fn sighup_ends_the_run_and_exits_129() {
    signal_ends_the_run(libc::SIGHUP, 129);
}

/// `signal` during a tool run: agent_end first, then exit with `code`, no surviving child.
#[track_caller]
fn signal_ends_the_run(signal: i32, code: i32) {
    let (fake, mut pi, sleeper) = pi_with_sleeper();
    pi.signal(signal);
    pi.records_until_event("agent_end");
    let status = pi.wait_for_exit();
    assert_eq!(
        status.code(),
        Some(code),
        "{status:?} (signal {:?})",
        status.signal()
    );
    assert_no_panic(&pi);
    assert_gone(sleeper, &pi);
    fake.finish();
}

/// SIGTERM while idle: exit 143 at once, nothing emitted.
#[test]
fn sigterm_while_idle_exits_143() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.command("s1", "get_state", json!({}));
    pi.signal(libc::SIGTERM);
    let status = pi.wait_for_exit();
    assert_eq!(status.code(), Some(143), "{status:?}");
    pi.drain_until_stdout_closes();
    assert_eq!(pi.records().len(), 1, "{:?}", pi.records());
    assert_no_panic(&pi);
    fake.finish();
}

/// The client closes stdout while idle: the next write fails and pi exits 0 without a panic.
#[test]
fn stdout_closed_while_idle_exits_zero() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.command("s1", "get_state", json!({}));
    pi.close_stdout();
    pi.try_send(json!({"id": "s2", "type": "get_state"}));
    let status = pi.wait_for_exit();
    assert_eq!(
        status.code(),
        Some(0),
        "{status:?} (signal {:?})",
        status.signal()
    );
    assert_no_panic(&pi);
    fake.finish();
}

/// The client closes stdout while a tool runs: exit 0, no panic, the tool's child is gone.
#[test]
fn stdout_closed_mid_tool_exits_zero_and_kills_children() {
    let (fake, mut pi, sleeper) = pi_with_sleeper();
    pi.close_stdout();
    // Something to write: pi notices the closed pipe on its next record.
    pi.try_send(json!({"id": "s2", "type": "get_state"}));
    let status = pi.wait_for_exit();
    assert_eq!(
        status.code(),
        Some(0),
        "{status:?} (signal {:?})",
        status.signal()
    );
    assert_no_panic(&pi);
    assert_gone(sleeper, &pi);
    fake.finish();
}
