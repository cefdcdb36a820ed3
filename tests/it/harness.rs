//! The harness's own tests: the fake provider's tool-pairing check and SSE framing, and the SSE
//! body generators the other tests script replies with. (They live here, not beside the code,
//! because the bench compiles `fake_provider.rs` and `sse.rs` too.)

use serde_json::{Value, json};

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use crate::fake_provider::{FakeProvider, check_tool_pairing, split_sse_events};
use crate::sse::{anthropic_text, openai_bash};
use crate::support::{GAP, check_transcript, expect_transcript, matches_pattern};

#[test]
fn pairing_accepts_anthropic_and_openai_histories() {
    let anthropic = [
        json!({"role":"user","content":"hi"}),
        json!({"role":"assistant","content":[{"type":"tool_use","id":"a","name":"bash","input":{}}]}),
        json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"x"}]}),
    ];
    assert!(check_tool_pairing(&anthropic).is_empty());
    let openai = [
        json!({"role":"user","content":"hi"}),
        json!({"role":"assistant","content":null,"tool_calls":[{"id":"a"},{"id":"b"}]}),
        json!({"role":"tool","tool_call_id":"a","content":"x"}),
        json!({"role":"tool","tool_call_id":"b","content":"y"}),
    ];
    assert!(check_tool_pairing(&openai).is_empty());
}

#[test]
fn pairing_reports_missing_duplicate_and_orphan_results() {
    let messages = [
        json!({"role":"assistant","tool_calls":[{"id":"a"},{"id":"b"}]}),
        json!({"role":"tool","tool_call_id":"a"}),
        json!({"role":"tool","tool_call_id":"a"}),
        json!({"role":"tool","tool_call_id":"zzz"}),
    ];
    let problems = check_tool_pairing(&messages);
    assert_eq!(problems.len(), 3, "{problems:?}");
}

#[test]
fn sse_events_split_on_blank_lines() {
    let events = split_sse_events("event: a\ndata: 1\n\nevent: b\ndata: 2\n\n");
    assert_eq!(events, ["event: a\ndata: 1\n\n", "event: b\ndata: 2\n\n"]);
}

#[test]
fn anthropic_generator_produces_parseable_events() {
    let body = anthropic_text(&["Hel", "lo"]);
    let events = split_sse_events(&body);
    let names: Vec<&str> = events
        .iter()
        .map(|e| e.lines().next().unwrap().trim_start_matches("event: "))
        .collect();
    assert_eq!(
        names,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for event in &events {
        let data = event.lines().nth(1).unwrap().trim_start_matches("data: ");
        serde_json::from_str::<Value>(data).unwrap();
    }
}

#[test]
fn openai_generator_ends_with_usage_and_done() {
    let body = openai_bash("call_1", "echo hi");
    let events = split_sse_events(&body);
    assert_eq!(events.last().unwrap(), "data: [DONE]\n\n");
    let usage: Value =
        serde_json::from_str(events[events.len() - 2].trim_start_matches("data: ").trim()).unwrap();
    assert!(usage["usage"]["total_tokens"].is_u64());
}

/// A request after the script ran out, or with a body that is not JSON, is a recorded problem
/// (which `take_failures` hands over instead of `Drop` panicking).
#[test]
fn unscripted_and_malformed_requests_are_recorded_problems() {
    let fake = FakeProvider::start(Vec::new());
    let address = fake.base_url();
    let address = address.trim_start_matches("http://");
    let address = address.split('/').next().unwrap();
    let mut stream = TcpStream::connect(address).unwrap();
    let body = "not json";
    write!(
        stream,
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    fake.wait_for_requests(1, Duration::from_secs(10));
    let failures = fake.take_failures();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(
        failures[0].contains("request #1 POST /v1/messages"),
        "{failures:?}"
    );
    assert!(
        failures[1].contains("unscripted request #1"),
        "{failures:?}"
    );
    assert!(fake.take_failures().is_empty());
}

/// The transcript check: gaps, partial objects, `[..]` and `{...}`, and that it fails.
#[test]
fn transcript_check_matches_in_order_with_gaps() {
    let records = [
        json!({"type": "response", "command": "prompt", "id": "p1", "success": true}),
        json!({"type": "agent_start"}),
        json!({"type": "message_end", "message": {"role": "assistant", "errorMessage": "429 slow down"}}),
        json!({"type": "agent_end", "willRetry": false, "messages": [1, 2]}),
    ];
    let [response, end] = expect_transcript(
        &records,
        &[
            json!({"type": "response", "id": "p1"}),
            json!(GAP),
            json!({"type": "agent_end", "messages": [1, "{...}"]}),
        ],
    );
    assert_eq!(*response, records[0]);
    assert_eq!(*end, records[3]);
    check_transcript(
        &records,
        &[
            json!(GAP),
            json!({"message": {"errorMessage": "429 [..]"}}),
            json!(GAP),
        ],
    );
    assert!(matches_pattern(&json!("a-b-c"), &json!("a[..]c")));
    assert!(!matches_pattern(&json!("a-b-c"), &json!("b[..]")));
    assert!(!matches_pattern(&json!({"a": 1}), &json!({"b": "{...}"})));
    assert!(!matches_pattern(&json!([1, 2]), &json!([1])));

    let fails = |steps: Vec<Value>| {
        let records = records.clone();
        std::panic::catch_unwind(move || {
            check_transcript(&records, &steps);
        })
        .is_err()
    };
    // Without a trailing gap the last step must match the last record.
    assert!(fails(vec![
        json!({"type": "response"}),
        json!(GAP),
        json!({"type": "agent_start"})
    ]));
    // Without a leading gap the first step must match the first record.
    assert!(fails(vec![json!({"type": "agent_start"}), json!(GAP)]));
    // Order matters.
    assert!(fails(vec![
        json!(GAP),
        json!({"type": "agent_end"}),
        json!({"type": "agent_start"}),
        json!(GAP)
    ]));
    assert!(fails(vec![
        json!(GAP),
        json!({"type": "agent_end", "willRetry": true})
    ]));
}
