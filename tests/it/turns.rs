//! Prompt turns: the event sequence a client sees and the requests that reach the provider.
//!
//! Against the reference (PI_TEST_BIN) every test here fails at its seed-only assertions, which
//! come last in each test so that everything before them is still checked: the prompt response
//! has no `data.disposition`, `message_update` still carries `message` and
//! `assistantMessageEvent.partial`, `agent_end` has no `willRetry`, and `agent_settled` never
//! comes (FACTS.md §0 items 2-5). Expected.

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{GAP, Pi, Setup, event_labels, events, expect_transcript};

/// The seed-only parts of a finished run, checked last so a reference run still exercises the
/// rest. `run` is everything from the prompt response through `agent_end`.
#[track_caller]
fn assert_seed_run_shape(pi: &mut Pi, prompt_id: &str, run: &[Value]) {
    let response = pi.response_for(prompt_id);
    assert_eq!(
        response,
        json!({"id": prompt_id, "type": "response", "command": "prompt", "success": true,
               "data": {"disposition": "started"}}),
    );
    for update in run.iter().filter(|r| r["type"] == "message_update") {
        assert!(
            update.get("message").is_none(),
            "message_update carries a cumulative message: {update}"
        );
        assert!(
            update["assistantMessageEvent"].get("partial").is_none(),
            "message_update carries assistantMessageEvent.partial: {update}"
        );
    }
    let agent_end = run.last().expect("run ends with agent_end");
    assert_eq!(agent_end["willRetry"], json!(false), "{agent_end}");
    let settled = pi.records_until_event("agent_settled");
    assert_eq!(
        event_labels(&events(&settled)),
        ["agent_settled"],
        "only agent_settled follows agent_end when nothing continues"
    );
    assert_eq!(
        settled.last(),
        Some(&json!({"type": "agent_settled", "aborted": false}))
    );
}

fn text_of_deltas(run: &[Value], delta_type: &str) -> String {
    run.iter()
        .filter(|r| {
            r["type"] == "message_update" && r["assistantMessageEvent"]["type"] == delta_type
        })
        .map(|r| {
            r["assistantMessageEvent"]["delta"]
                .as_str()
                .unwrap_or_default()
        })
        .collect()
}

/// Reference: fails only at the seed checks (disposition, message_update payload, willRetry,
/// agent_settled).
#[test]
fn text_prompt_streams_the_full_event_sequence() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("anthropic/text.sse")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Say hello"}));
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
            "message_update:text_start",
            "message_update:text_delta",
            "message_update:text_delta",
            "message_update:text_delta",
            "message_update:text_end",
            "message_end:assistant",
            "turn_end",
            "agent_end",
        ],
        "the prompt response comes before agent_start"
    );
    let [
        _response,
        system_end,
        user_start,
        _text_start,
        _first_delta,
        text_end,
        assistant_end,
        turn_end,
        agent_end,
    ] = expect_transcript(
        &run,
        &[
            json!({"type": "response", "command": "prompt", "id": "p1"}),
            json!(GAP),
            json!({"type": "message_end", "message": {"role": "system", "content": ""}}),
            json!({"type": "message_start", "message": {"role": "user"}}),
            json!(GAP),
            json!({"type": "message_update",
                       "assistantMessageEvent": {"type": "text_start", "contentIndex": 0}}),
            json!({"type": "message_update",
                       "assistantMessageEvent": {"type": "text_delta", "delta": "Hello"}}),
            json!(GAP),
            json!({"type": "message_update", "assistantMessageEvent": {"type": "text_end"}}),
            json!({"type": "message_end", "message": {"role": "assistant"}}),
            json!({"type": "turn_end"}),
            json!({"type": "agent_end"}),
        ],
    );
    let user = &user_start["message"];
    assert_eq!(
        user["content"],
        json!([{"type": "text", "text": "Say hello"}])
    );
    assert!(user["timestamp"].is_u64());

    assert_eq!(
        text_of_deltas(&run, "text_delta"),
        "Hello from the fake provider."
    );
    assert_eq!(
        text_end["assistantMessageEvent"]["content"],
        "Hello from the fake provider."
    );

    let assistant = &assistant_end["message"];
    assert_eq!(
        assistant["content"],
        json!([{"type": "text", "text": "Hello from the fake provider."}])
    );
    assert_eq!(assistant["api"], "anthropic-messages");
    assert_eq!(assistant["provider"], "fake-anthropic");
    assert_eq!(assistant["model"], "fake-claude");
    assert_eq!(assistant["stopReason"], "stop");
    assert_eq!(assistant["responseId"], "msg_01XFDUDYJgAACzvnptvVoYEL");
    assert_eq!(assistant["usage"]["input"], 1843);
    assert_eq!(assistant["usage"]["output"], 12);
    assert_eq!(assistant["usage"]["totalTokens"], 1855);
    assert!(assistant.get("errorMessage").is_none());
    assert_eq!(
        turn_end["message"], *assistant,
        "turn_end carries the assistant"
    );
    assert_eq!(turn_end["toolResults"], json!([]));
    // The run opens with the system message of pi 1.6.0: the prompt's sections and the tools.
    let system = &system_end["message"];
    let sections: Vec<&String> = system["sections"]
        .as_object()
        .expect("sections")
        .keys()
        .collect();
    assert_eq!(sections, ["preamble", "tools", "rules", "docs", "cwd"]);
    let tools: Vec<&str> = system["toolsAdded"]
        .as_array()
        .expect("toolsAdded")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(tools, ["read", "bash", "edit", "write"]);
    assert_eq!(agent_end["messages"], json!([system, user, assistant]));

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("test-key"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.body["model"], "fake-claude");
    assert_eq!(request.body["stream"], true);
    let last = request.messages().last().expect("one message");
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["text"], "Say hello");

    assert_seed_run_shape(&mut pi, "p1", &run);
    fake.finish();
}

/// Reference: fails only at the seed checks.
#[test]
fn openai_text_prompt_reaches_chat_completions() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai/text.sse")]);
    let mut pi = Pi::spawn(&Setup::openai(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Say hello"}));
    let run = pi.records_until_event("agent_end");

    let assistant = &run
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("assistant message_end")["message"];
    assert_eq!(
        assistant["content"],
        json!([{"type": "text", "text": "Hello from the fake provider."}])
    );
    assert_eq!(assistant["api"], "openai-completions");
    assert_eq!(assistant["stopReason"], "stop");
    assert_eq!(assistant["usage"]["input"], 1843);
    assert_eq!(assistant["usage"]["output"], 12);
    assert_eq!(
        text_of_deltas(&run, "text_delta"),
        "Hello from the fake provider."
    );

    let request = &fake.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer test-key"));
    assert_eq!(request.body["model"], "fake-gpt");
    assert_eq!(request.body["stream"], true);
    assert_eq!(
        request.body["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(request.messages()[0]["role"], "system");

    assert_seed_run_shape(&mut pi, "p1", &run);
    fake.finish();
}

/// Reference: fails only at the seed checks.
#[test]
fn thinking_then_text_keeps_the_signature() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("anthropic/thinking_text.sse")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Hi"}));
    let run = pi.records_until_event("agent_end");
    let updates: Vec<String> = event_labels(&run)
        .into_iter()
        .filter(|l| l.starts_with("message_update:"))
        .collect();
    assert_eq!(
        updates,
        [
            "message_update:thinking_start",
            "message_update:thinking_delta",
            "message_update:thinking_delta",
            "message_update:thinking_end",
            "message_update:text_start",
            "message_update:text_delta",
            "message_update:text_delta",
            "message_update:text_end",
        ]
    );
    assert_eq!(
        text_of_deltas(&run, "thinking_delta"),
        "The user greets me. A short answer fits."
    );
    let assistant = &run
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("assistant message_end")["message"];
    let content = assistant["content"].as_array().expect("content");
    assert_eq!(content.len(), 2);
    assert_eq!(content[0]["type"], "thinking");
    assert_eq!(
        content[0]["thinking"],
        "The user greets me. A short answer fits."
    );
    assert!(
        content[0]["thinkingSignature"]
            .as_str()
            .is_some_and(|s| s.starts_with("EqQBCgIYAhIM"))
    );
    assert_eq!(content[1], json!({"type": "text", "text": "Hi there!"}));
    // Thinking at the default level ("medium") on a reasoning model.
    assert_eq!(fake.requests()[0].body["thinking"]["type"], "enabled");

    assert_seed_run_shape(&mut pi, "p1", &run);
    fake.finish();
}

/// Reference: fails only at the seed checks.
#[test]
fn bash_tool_call_result_goes_back_to_the_provider() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("anthropic/tool_bash.sse"),
        Reply::sse(sse::anthropic_text(&["It printed hi."])),
    ]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Run echo hi"}));
    let run = pi.records_until_event("agent_end");
    let call_id = "toolu_01A09q90qw90lq917835lq9";

    let labels: Vec<String> = event_labels(&run)
        .into_iter()
        .filter(|l| !l.starts_with("message_update:") && l != "tool_execution_update")
        .collect();
    assert_eq!(
        labels,
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
            "tool_execution_start",
            "tool_execution_end",
            "message_start:toolResult",
            "message_end:toolResult",
            "turn_end",
            "turn_start",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
        ]
    );
    let toolcall_end = run
        .iter()
        .find(|r| r["assistantMessageEvent"]["type"] == "toolcall_end")
        .expect("toolcall_end");
    assert_eq!(
        toolcall_end["assistantMessageEvent"]["toolCall"],
        json!({"type": "toolCall", "id": call_id, "name": "bash", "arguments": {"command": "echo hi"}})
    );
    let first_assistant = &run
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .expect("assistant")["message"];
    assert_eq!(first_assistant["stopReason"], "toolUse");
    let start = run
        .iter()
        .find(|r| r["type"] == "tool_execution_start")
        .expect("start");
    assert_eq!(
        *start,
        json!({"type": "tool_execution_start", "toolCallId": call_id, "toolName": "bash",
               "args": {"command": "echo hi"}})
    );
    let end = run
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("end");
    assert_eq!(end["toolCallId"], call_id);
    assert_eq!(end["isError"], false);
    assert_eq!(
        end["result"]["content"],
        json!([{"type": "text", "text": "hi\n"}])
    );
    let tool_result = &run
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "toolResult")
        .expect("toolResult")["message"];
    assert_eq!(tool_result["toolCallId"], call_id);
    assert_eq!(tool_result["toolName"], "bash");
    assert_eq!(
        tool_result["content"],
        json!([{"type": "text", "text": "hi\n"}])
    );
    assert_eq!(tool_result["isError"], false);

    // The second request carries the call and its result (the fake also checks the pairing).
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let history = requests[1].messages();
    let n = history.len();
    assert!(n >= 3, "history: {history:?}");
    assert_eq!(history[n - 2]["role"], "assistant");
    let tool_use = history[n - 2]["content"]
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "tool_use"))
        .expect("tool_use block");
    assert_eq!(tool_use["id"], call_id);
    assert_eq!(tool_use["name"], "bash");
    assert_eq!(tool_use["input"], json!({"command": "echo hi"}));
    assert_eq!(history[n - 1]["role"], "user");
    let result_block = &history[n - 1]["content"][0];
    assert_eq!(result_block["type"], "tool_result");
    assert_eq!(result_block["tool_use_id"], call_id);
    assert_eq!(result_block["content"], "hi\n");
    assert_eq!(result_block["is_error"], false);

    assert_seed_run_shape(&mut pi, "p1", &run);
    fake.finish();
}

/// Reference: fails only at the seed checks.
#[test]
fn parallel_tool_calls_report_results_in_call_order() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("openai/tool_parallel.sse"),
        Reply::sse(sse::openai_text(&["Done."])),
    ]);
    let mut pi = Pi::spawn(&Setup::openai(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Run both"}));
    let run = pi.records_until_event("agent_end");
    let ids = [
        "call_3fTWmB8tq9yZ1cE4RkP7hLxN",
        "call_9KzQv2XwJ5nL8mR3tY6uB1pS",
    ];

    let starts: Vec<&Value> = run
        .iter()
        .filter(|r| r["type"] == "tool_execution_start")
        .map(|r| &r["toolCallId"])
        .collect();
    assert_eq!(starts, ids);
    let results: Vec<(&Value, &Value)> = run
        .iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "toolResult")
        .map(|r| {
            (
                &r["message"]["toolCallId"],
                &r["message"]["content"][0]["text"],
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            (&json!(ids[0]), &json!("one\n")),
            (&json!(ids[1]), &json!("two\n"))
        ]
    );
    let first_turn_end = run
        .iter()
        .find(|r| r["type"] == "turn_end")
        .expect("turn_end");
    assert_eq!(
        first_turn_end["toolResults"].as_array().map(Vec::len),
        Some(2)
    );

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let tool_messages: Vec<(&Value, &Value)> = requests[1]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (&m["tool_call_id"], &m["content"]))
        .collect();
    assert_eq!(
        tool_messages,
        [
            (&json!(ids[0]), &json!("one\n")),
            (&json!(ids[1]), &json!("two\n"))
        ]
    );

    assert_seed_run_shape(&mut pi, "p1", &run);
    fake.finish();
}

/// Reference: fails at the seed check that message_update lines stay small (it repeats the
/// whole message in every delta).
#[test]
fn long_reply_streams_every_delta_and_stays_linear() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("anthropic/long.sse")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Count"}));
    let run = pi.records_until_event("agent_end");
    let expected: String = (0..300).map(|i| format!("word{i} ")).collect();
    assert_eq!(
        run.iter()
            .filter(|r| r["assistantMessageEvent"]["type"] == "text_delta")
            .count(),
        300
    );
    assert_eq!(text_of_deltas(&run, "text_delta"), expected);
    let assistant = &run
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("message_end")["message"];
    assert_eq!(assistant["content"][0]["text"], expected.as_str());

    let first = pi.index_of(&run[0]).expect("indexed");
    let longest_update = (first..first + run.len())
        // *_end events carry the whole block by design (seed); deltas must stay small.
        .filter(|&i| pi.records()[i]["assistantMessageEvent"]["type"] == "text_delta")
        .map(|i| pi.raw_line(i).len())
        .max()
        .unwrap_or(0);
    assert!(
        longest_update < 1000,
        "a text_delta line is {longest_update} bytes: updates must carry deltas, not snapshots"
    );
    assert_seed_run_shape(&mut pi, "p1", &run);
    fake.finish();
}

/// Reference: fails only at the seed checks.
#[test]
fn max_tokens_stop_maps_to_length_on_both_apis() {
    for (api, fixture) in [
        ("anthropic", "anthropic/max_tokens.sse"),
        ("openai", "openai/max_tokens.sse"),
    ] {
        let fake = FakeProvider::start(vec![Reply::sse_fixture(fixture)]);
        let setup = match api {
            "anthropic" => Setup::anthropic(&fake),
            _ => Setup::openai(&fake),
        };
        let mut pi = Pi::spawn(&setup);
        pi.send(json!({"id": "p1", "type": "prompt", "message": "Go on"}));
        let run = pi.records_until_event("agent_end");
        let assistant = &run
            .iter()
            .rfind(|r| r["type"] == "message_end")
            .expect("message_end")["message"];
        assert_eq!(assistant["stopReason"], "length", "{api}");
        assert_eq!(
            assistant["content"],
            json!([{"type": "text", "text": "This answer is cut off because"}]),
            "{api}"
        );
        assert_eq!(
            fake.requests().len(),
            1,
            "{api}: a length stop is not retried"
        );
        assert_seed_run_shape(&mut pi, "p1", &run);
        fake.finish();
    }
}

/// Abort while the provider holds the stream open: the partial assistant ends as "aborted", and
/// the abort response comes after that run's agent_end.
/// Reference: fails only at the seed checks (agent_settled).
#[test]
fn abort_mid_stream_keeps_the_partial_text() {
    let prefix = sse::AnthropicStream::new()
        .text(&["Partial", " answer"])
        .unfinished();
    // Cut inside the text block: drop its content_block_stop.
    let prefix = prefix[..prefix
        .rfind("event: content_block_stop")
        .expect("block stop")]
        .to_string();
    let fake = FakeProvider::start(vec![Reply::stall_after(prefix)]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Talk"}));
    let deadline = pi.deadline();
    pi.recv_until(
        |r| {
            r["assistantMessageEvent"]["type"] == "text_delta"
                && r["assistantMessageEvent"]["delta"] == " answer"
        },
        deadline,
    );
    pi.send(json!({"id": "a1", "type": "abort"}));
    let rest = pi.records_until_event("agent_end");
    let assistant = &rest
        .iter()
        .rfind(|r| r["type"] == "message_end")
        .expect("assistant message_end")["message"];
    assert_eq!(assistant["stopReason"], "aborted");
    assert_eq!(
        assistant["content"],
        json!([{"type": "text", "text": "Partial answer"}])
    );
    // The wording depends on where the abort lands; the reference says "This operation was
    // aborted" mid-read and "Request was aborted" between reads.
    let message = assistant["errorMessage"].as_str().unwrap_or_default();
    assert!(
        [
            "Request was aborted",
            "Request was aborted.",
            "This operation was aborted"
        ]
        .contains(&message),
        "{assistant}"
    );
    let response = pi.response_for("a1");
    assert_eq!(
        response,
        json!({"id": "a1", "type": "response", "command": "abort", "success": true})
    );
    let response_index = pi.index_of(&response).expect("indexed");
    let end_index = pi
        .index_of(rest.last().expect("agent_end"))
        .expect("indexed");
    assert!(response_index > end_index, "abort answers after agent_end");

    pi.wait_for_event("agent_settled");
    fake.release_stalls();
    fake.finish();
}
