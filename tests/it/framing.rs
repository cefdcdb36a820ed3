//! Stdin framing under stress (FACTS.md §2, seed "Framing"): huge records, CRLF, many records in
//! one write, one record dribbled byte by byte.
//!
//! Reference: the 70 MB record is a seed/pi-rs limit (64 MiB); the reference has none and would
//! try to parse it.

use std::time::Instant;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{Pi, Setup, message_text};

/// A 10 MB prompt is accepted as one record and reaches the provider intact.
///
/// The run writes the 10 MB text back several times (user message_start/end, agent_end); a
/// debug build takes seconds per copy, so this one wait gets six times the usual deadline.
#[test]
fn ten_megabyte_prompt_reaches_the_provider() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Big."]))]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let message: String = "0123456789abcdef".repeat(10 * 1024 * 1024 / 16);
    pi.send(json!({"id": "big", "type": "prompt", "message": message}));
    let response = pi.response_for("big");
    assert_eq!(response["success"], true, "{response}");
    let deadline = Instant::now() + pi.timeout() * 6;
    pi.recv_until(|r| r["type"] == "agent_settled", deadline);
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let last = requests[0].messages().last().expect("a message").clone();
    let text = message_text(&last);
    assert_eq!(text.len(), message.len());
    assert!(text == message, "the 10 MB text arrived changed");
    fake.finish();
}

/// A 70 MB record is over the limit: one parse error, and the process keeps answering.
#[test]
fn seventy_megabyte_record_is_rejected_and_the_process_goes_on() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let mut line = Vec::with_capacity(70 * 1024 * 1024 + 64);
    line.extend_from_slice(b"{\"id\":\"huge\",\"type\":\"prompt\",\"message\":\"");
    line.resize(70 * 1024 * 1024, b'x');
    line.extend_from_slice(b"\"}\n");
    pi.send_raw(&line);
    drop(line);
    pi.send(json!({"id": "after", "type": "get_state"}));
    let response = pi.response_for("after");
    assert_eq!(response["success"], true);
    let index = pi.index_of(&response).expect("indexed");
    let before: Vec<&Value> = pi.records()[..index].iter().collect();
    assert_eq!(before.len(), 1, "exactly one record before: {before:?}");
    let error = before[0];
    assert_eq!(error["type"], "response");
    assert_eq!(error["command"], "parse");
    assert_eq!(error["success"], false);
    assert!(error.get("id").is_none(), "{error}");
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Failed to parse command: ")),
        "{error}"
    );
    assert!(fake.requests().is_empty(), "the huge prompt never ran");
    fake.finish();
}

/// CRLF on every record, a prompt included: no parse errors, and the prompt text has no CR.
#[test]
fn crlf_everywhere_is_accepted() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Ok."]))]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let lines = [
        r#"{"id":"c1","type":"get_state"}"#,
        r#"{"id":"c2","type":"set_steering_mode","mode":"all"}"#,
        r#"{"id":"c3","type":"prompt","message":"Hello over CRLF"}"#,
    ];
    let mut bytes = Vec::new();
    for line in lines {
        bytes.extend_from_slice(line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
    }
    pi.send_raw(&bytes);
    for id in ["c1", "c2", "c3"] {
        let response = pi.response_for(id);
        assert_eq!(response["success"], true, "{response}");
    }
    pi.wait_for_event("agent_settled");
    pi.send_raw(b"{\"id\":\"c4\",\"type\":\"get_state\"}\r\n");
    assert_eq!(pi.response_for("c4")["data"]["steeringMode"], "all");
    assert!(pi.records().iter().all(|r| r["command"] != "parse"));
    let request = &fake.requests()[0];
    assert_eq!(
        message_text(request.messages().last().expect("message")),
        "Hello over CRLF"
    );
    fake.finish();
}

/// A hundred records in one write are all answered, in order.
#[test]
fn many_records_in_one_write_are_all_answered_in_order() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let mut bytes = Vec::new();
    for n in 0..100 {
        bytes.extend_from_slice(
            format!("{{\"id\":\"r{n}\",\"type\":\"get_messages\"}}\n").as_bytes(),
        );
    }
    pi.send_raw(&bytes);
    pi.response_for("r99");
    let ids: Vec<&str> = pi
        .records()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    let expected: Vec<String> = (0..100).map(|n| format!("r{n}")).collect();
    assert_eq!(ids, expected);
    assert!(pi.records().iter().all(|r| r["success"] == true));
    fake.finish();
}

/// One record written a byte at a time (each flushed) is one command.
#[test]
fn record_split_byte_by_byte_is_one_command() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let line = "{\"id\":\"slow\",\"type\":\"set_session_name\",\"name\":\"Bytes \u{00e9}\u{20ac}\u{1f600}\"}\n";
    for byte in line.as_bytes() {
        pi.send_raw(&[*byte]);
    }
    let response = pi.response_for("slow");
    assert_eq!(response["success"], true, "{response}");
    pi.send(json!({"id": "st", "type": "get_state"}));
    assert_eq!(
        pi.response_for("st")["data"]["sessionName"],
        "Bytes \u{00e9}\u{20ac}\u{1f600}",
        "multi-byte characters split across writes survive"
    );
    assert!(pi.records().iter().all(|r| r["command"] != "parse"));
    fake.finish();
}

/// The hostile-input fuzz through the real process (the in-process test in `src/rpc` runs 10⁶
/// records through framer and parser; this one checks the whole path): seeded records —
/// truncated JSON, deep nesting, huge numbers, lone surrogates, invalid UTF-8, NUL bytes, giant
/// strings, CR/LF mixes — written in random chunk sizes. Every line gets exactly one response,
/// and the process still answers `get_state` afterwards. `PI_FUZZ_PROCESS_RECORDS` sizes it.
#[test]
fn hostile_records_each_get_one_response_and_the_process_survives() {
    let count: usize = std::env::var("PI_FUZZ_PROCESS_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let mut seed: u64 = 0x5eed_f00d;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n.max(1)
    };
    // Commands that answer with one response and start nothing.
    let valid = [
        r#"{"type":"get_state"}"#,
        r#"{"id":1,"type":"get_messages"}"#,
        r#"{"id":"x","type":"get_available_thinking_levels"}"#,
        r#"{"id":null,"type":"nope"}"#,
        r#"{"type":"get_last_assistant_text"}"#,
    ];
    let mut stream = Vec::new();
    for _ in 0..count {
        let base = valid[next(valid.len() as u64) as usize].as_bytes().to_vec();
        let mut record = match next(10) {
            0..=2 => base,
            3 => base[..next(base.len() as u64) as usize].to_vec(),
            4 => "[".repeat(1 + next(300) as usize).into_bytes(),
            5 => format!(
                r#"{{"id":{}{},"type":"get_state"}}"#,
                next(u64::MAX),
                "9".repeat(next(300) as usize)
            )
            .into_bytes(),
            6 => br#"{"type":"nope","x":"\ud800 lone \udfff"}"#.to_vec(),
            7 => {
                let mut v = base;
                let at = next(v.len() as u64) as usize;
                v.insert(at, [0xff, 0xfe, 0xc3, 0x00][next(4) as usize]);
                v
            }
            8 => format!(
                r#"{{"type":"nope","s":"{}"}}"#,
                "y".repeat(next(100_000) as usize)
            )
            .into_bytes(),
            _ => (0..next(64)).map(|_| (next(255) + 1) as u8).collect(),
        };
        record.retain(|b| *b != b'\n');
        stream.extend(record);
        if next(8) == 0 {
            stream.push(b'\r');
        }
        stream.push(b'\n');
    }
    let mut at = 0;
    while at < stream.len() {
        let take = (1 + next(64 * 1024) as usize).min(stream.len() - at);
        pi.send_raw(&stream[at..at + take]);
        at += take;
    }
    pi.send(json!({"id": "after-fuzz", "type": "get_state"}));
    let deadline = Instant::now() + pi.timeout() * 12;
    let records = pi.recv_until(|r| r["id"] == "after-fuzz", deadline);
    let state = records.last().expect("the get_state response");
    assert_eq!(state["success"], true, "{state}");
    let responses = records.iter().filter(|r| r["type"] == "response").count();
    assert_eq!(responses, count + 1, "exactly one response per line");
    assert!(
        records.iter().all(|r| r["type"] == "response"),
        "no events for idle commands"
    );
    fake.finish();
}
