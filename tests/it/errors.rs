//! Bad input on stdin and provider failures: each becomes a record, and the process goes on.
//!
//! Parse errors are matched on the interface part only (`Failed to parse command: `): the rest
//! is the JSON parser's own wording (V8's in the reference, serde_json's in pi-rs).
//! Reference failures (expected) are named on each test.

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::sse;
use crate::support::{GAP, Pi, Setup, assert_keys, check_transcript, event_labels};

/// A process whose fake provider has an empty script: any request would be a failure.
fn idle_pi() -> (FakeProvider, Pi) {
    let fake = FakeProvider::start(Vec::new());
    let pi = Pi::spawn(&Setup::anthropic(&fake));
    (fake, pi)
}

/// Sends `bytes` (a complete line), then a `get_state` probe, and returns the records that
/// arrived before the probe's response. The probe proves the process survived the line.
#[track_caller]
fn records_for_line(pi: &mut Pi, bytes: &[u8], probe_id: &str) -> Vec<Value> {
    pi.send_raw(bytes);
    pi.send(json!({"id": probe_id, "type": "get_state"}));
    let deadline = pi.deadline();
    let mut records = pi.recv_until(|r| r["type"] == "response" && r["id"] == probe_id, deadline);
    let probe = records.pop().expect("probe response");
    assert_eq!(probe["success"], true, "{probe}");
    records
}

#[track_caller]
fn assert_one_parse_error(records: &[Value], line: &str) {
    assert_eq!(
        records.len(),
        1,
        "{line}: expected one parse error, got {records:?}"
    );
    let error = &records[0];
    assert_keys(error, &["type", "command", "success", "error"]);
    assert_eq!(error["type"], "response", "{line}");
    assert_eq!(error["command"], "parse", "{line}");
    assert_eq!(error["success"], false, "{line}");
    let message = error["error"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Failed to parse command: "),
        "{line}: error {message:?}"
    );
}

/// Reference: passes.
#[test]
fn not_json_gets_a_parse_error_and_the_process_goes_on() {
    let (fake, mut pi) = idle_pi();
    let records = records_for_line(&mut pi, b"not json\n", "after");
    assert_one_parse_error(&records, "not json");
    fake.finish();
}

/// Reference: fails. `null` crashes it (TypeError, exit 1) and `[]`/`42`/`"x"` get
/// `{"type":"response","success":false,"error":"Unknown command: undefined"}` without a
/// `command` key (FACTS.md §2.1, §16). The target treats every non-object as a parse error.
#[test]
fn json_that_is_not_an_object_gets_a_parse_error() {
    let (fake, mut pi) = idle_pi();
    for (index, line) in ["[]", "42", "\"get_state\"", "null"].iter().enumerate() {
        let records = records_for_line(
            &mut pi,
            format!("{line}\n").as_bytes(),
            &format!("after-{index}"),
        );
        assert_one_parse_error(&records, line);
    }
    fake.finish();
}

/// Reference: passes (`Unexpected end of JSON input`).
#[test]
fn empty_line_gets_a_parse_error() {
    let (fake, mut pi) = idle_pi();
    let records = records_for_line(&mut pi, b"\n", "after");
    assert_one_parse_error(&records, "<empty>");
    fake.finish();
}

/// Reference: passes (its UTF-8 decoder turns the bytes into U+FFFD, which JSON.parse rejects).
#[test]
fn invalid_utf8_line_gets_a_parse_error() {
    let (fake, mut pi) = idle_pi();
    let records = records_for_line(&mut pi, b"\xff\xfe{\"type\":\"get_state\"}\n", "after");
    assert_one_parse_error(&records, "invalid UTF-8");
    fake.finish();
}

/// Reference: fails. It answers unknown commands without echoing the id (FACTS.md §2.1, §15.3);
/// the seed says every command's response carries its id.
#[test]
fn unknown_command_is_an_error_that_echoes_the_id() {
    let (fake, mut pi) = idle_pi();
    pi.send(json!({"id": "u1", "type": "nope"}));
    let deadline = pi.deadline();
    let records = pi.recv_until(|r| r["type"] == "response", deadline);
    assert_eq!(
        records.last(),
        Some(
            &json!({"id": "u1", "type": "response", "command": "nope", "success": false,
                     "error": "Unknown command: nope"})
        )
    );
    fake.finish();
}

/// Reference: passes.
#[test]
fn crlf_line_is_one_command() {
    let (fake, mut pi) = idle_pi();
    pi.send_raw(b"{\"id\":\"crlf\",\"type\":\"get_state\"}\r\n");
    let response = pi.response_for("crlf");
    assert_eq!(response["success"], true, "{response}");
    let before: Vec<&Value> = pi
        .records()
        .iter()
        .filter(|r| r["command"] == "parse")
        .collect();
    assert!(
        before.is_empty(),
        "a CR must not leave a parse error: {before:?}"
    );
    fake.finish();
}

/// Reference: passes. U+2028/U+2029 are plain characters inside JSON strings, not line breaks,
/// on input and on output (written raw, not escaped).
#[test]
fn line_separators_inside_strings_are_not_record_breaks() {
    let (fake, mut pi) = idle_pi();
    let id = "a\u{2028}b\u{2029}c";
    pi.send_raw(format!("{{\"id\":\"{id}\",\"type\":\"get_state\"}}\n").as_bytes());
    let response = pi.response_for(id);
    assert_eq!(response["success"], true);
    let index = pi.index_of(&response).expect("indexed");
    assert!(pi.raw_line(index).contains(id), "{}", pi.raw_line(index));
    assert!(pi.records().iter().all(|r| r["command"] != "parse"));
    fake.finish();
}

/// Reference: fails only at the seed checks (agent_end.willRetry, agent_settled).
#[test]
fn http_400_ends_the_run_with_the_providers_error_text() {
    for (api, expected) in [
        (
            "anthropic",
            format!("400 {}", fixture("anthropic/error_400.json")),
        ),
        // pi 1.6.0: the status and the body's error object.
        (
            "openai",
            format!(
                "400: {}",
                serde_json::from_str::<Value>(&fixture("openai/error_400.json")).unwrap()["error"]
            ),
        ),
    ] {
        let body = fixture(&format!("{api}/error_400.json"));
        let fake = FakeProvider::start(vec![Reply::status(400, body, &[])]);
        let setup = match api {
            "anthropic" => Setup::anthropic(&fake),
            _ => Setup::openai(&fake),
        };
        let mut pi = Pi::spawn(&setup);
        pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
        let run = pi.records_until_event("agent_end");
        assert_eq!(
            event_labels(&run),
            [
                "response:prompt",
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
            ],
            "{api}"
        );
        check_transcript(
            &run,
            &[
                json!(GAP),
                json!({"type": "message_end", "message": {"role": "assistant",
                       "stopReason": "error", "errorMessage": expected}}),
                json!({"type": "turn_end", "toolResults": []}),
                json!({"type": "agent_end", "willRetry": false}),
            ],
        );
        assert_eq!(fake.requests().len(), 1, "{api}: a 400 is not retried");
        pi.wait_for_event("agent_settled");
        fake.finish();
    }
}

/// An Anthropic `event: error` mid-stream (overloaded) is retried after the configured delay and
/// the retry succeeds.
/// Reference: fails only at the seed checks (agent_end.willRetry, agent_settled).
#[test]
fn overloaded_stream_error_is_retried() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("anthropic/error_overloaded.sse"),
        Reply::sse(sse::anthropic_text(&["Recovered."])),
    ]);
    let setup = Setup::anthropic(&fake).settings(json!({"retry": {"baseDelayMs": 10}}));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let first_run = pi.records_until_event("agent_end");
    let failed = &first_run
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("assistant")["message"];
    assert_eq!(failed["stopReason"], "error");
    let error_text =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert_eq!(failed["errorMessage"], error_text);

    let retry_start = pi.wait_for_event("auto_retry_start");
    assert_eq!(
        retry_start,
        json!({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 10,
               "errorMessage": error_text})
    );
    let second_run = pi.records_until_event("agent_end");
    // pi 1.6.0: the failed attempt's context_edit comes first.
    check_transcript(
        &second_run,
        &[
            json!({"type": "entry_appended", "entry": {"type": "context_edit"}}),
            json!({"type": "agent_start"}),
            json!(GAP),
        ],
    );
    let labels = event_labels(&second_run);
    assert!(
        !labels.contains(&"message_start:user".to_string()),
        "a retry sends no new user message: {labels:?}"
    );
    let retry_end = second_run
        .iter()
        .find(|r| r["type"] == "auto_retry_end")
        .expect("auto_retry_end");
    assert_eq!(
        *retry_end,
        json!({"type": "auto_retry_end", "success": true, "attempt": 1})
    );
    let recovered = &second_run
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("assistant")["message"];
    assert_eq!(
        recovered["content"],
        json!([{"type": "text", "text": "Recovered."}])
    );
    assert_eq!(fake.requests().len(), 2);

    assert_eq!(first_run.last().expect("agent_end")["willRetry"], true);
    assert_eq!(second_run.last().expect("agent_end")["willRetry"], false);
    pi.wait_for_event("agent_settled");
    fake.finish();
}

/// A prompt for a provider without credentials is refused with pi's text: the provider's name
/// and pi's login help, which points at the package's docs (`$PI_PACKAGE_DIR/docs`).
#[test]
fn prompt_without_credentials_is_refused_with_pis_login_help() {
    let fake = FakeProvider::start(Vec::new());
    let setup = Setup::at(&fake.base_url(), "anthropic", "claude-sonnet-4-5")
        .env("PI_PACKAGE_DIR", "/opt/pi-package");
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("p", "prompt", json!({"message": "hi"}));
    assert_eq!(response["success"], false, "{response}");
    assert_eq!(
        response["error"],
        "No API key found for anthropic.\n\nUse /login to log into a provider via OAuth or API \
         key. See:\n  /opt/pi-package/docs/providers.md\n  /opt/pi-package/docs/models.md"
    );
    assert!(fake.requests().is_empty());
}
