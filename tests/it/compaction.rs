//! Compaction (FACTS.md §10, §12.1; seed `compact`, `compaction_start`/`compaction_end`,
//! `summarization_retry_*`, `get_session_stats`, `agent_settled`): manual `compact` and its
//! errors, the threshold trigger after a run, overflow recovery (and giving up after one try),
//! summary requests retried after a transient failure, `abort` during a compaction, and what
//! `get_state` / `get_session_stats` report around one.
//!
//! The model (`fixtures/models_small_window.json`) has a 4000-token window; settings reserve
//! 1000 tokens and keep 200 recent ones. Every scenario starts with the same two turns: a long
//! first exchange (~300 + ~300 estimated tokens) that falls before the cut, and a ~260-token
//! second question with a short answer that stays. Markers (ALPHA…ECHO) show which text went
//! where.
//!
//! Reference: fails at the seed-only parts (`estimatedTokensAfter`, `usage`, `agent_settled`,
//! `willRetry` on agent_end, `summarization_retry_*`, `get_entries`, abort of a compaction).

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, RecordedRequest, Reply, fixture};
use crate::sse;
use crate::support::{
    GAP, Pi, Setup, assert_keys, check_transcript, expect_transcript, flow, message_text,
};

const SECOND_ANSWER: &str = "DELTA-MARKER short answer.";
const SUMMARY: &str = "## Goal\nExercise compaction in the tests.";
const WRAPPER_START: &str =
    "The conversation history before this point was compacted into the following summary:";
const OVERFLOW_GAVE_UP: &str = "Context overflow recovery failed after one compact-and-retry attempt. Try reducing context or switching to a larger-context model.";

fn first_question() -> String {
    format!("ALPHA-MARKER first question. {}", "alpha ".repeat(200))
}

fn first_answer() -> String {
    format!("BRAVO-MARKER first answer. {}", "bravo ".repeat(200))
}

fn second_question() -> String {
    format!("CHARLIE-MARKER second question. {}", "charlie ".repeat(125))
}

fn small_window(fake: &FakeProvider) -> Setup {
    Setup::new(fake, "fake-anthropic", "fake-claude-small")
        .models_json(&fixture("models_small_window.json"))
        .settings(json!({
            "compaction": {"reserveTokens": 1000, "keepRecentTokens": 200},
            "retry": {"baseDelayMs": 20}
        }))
}

/// The replies of the two opening turns; `second` answers the second question.
fn opening(second: Reply) -> Vec<Reply> {
    vec![Reply::sse(sse::anthropic_text(&[&first_answer()])), second]
}

fn short_second_answer() -> Reply {
    Reply::sse(sse::anthropic_text(&[SECOND_ANSWER]))
}

fn summary_reply() -> Reply {
    Reply::sse(sse::anthropic_text(&[SUMMARY]))
}

/// Sends a prompt and consumes everything up to `agent_settled`.
#[track_caller]
fn prompt_and_settle(pi: &mut Pi, id: &str, text: &str) -> Vec<Value> {
    pi.send(json!({"id": id, "type": "prompt", "message": text}));
    let records = pi.records_until_event("agent_settled");
    let response = pi.response_for(id);
    assert_eq!(response["success"], true, "{response}");
    records
}

/// Runs both opening prompts; returns the second run's records.
#[track_caller]
fn run_opening(pi: &mut Pi) -> Vec<Value> {
    prompt_and_settle(pi, "p1", &first_question());
    prompt_and_settle(pi, "p2", &second_question())
}

/// The last assistant `message_end` message in `records`.
#[track_caller]
fn last_reply(records: &[Value]) -> Value {
    records
        .iter()
        .rfind(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .unwrap_or_else(|| panic!("no assistant reply in {records:?}"))["message"]
        .clone()
}

/// The one `record` of type `ty` in `records`.
#[track_caller]
fn only(records: &[Value], ty: &str) -> Value {
    let found: Vec<&Value> = records.iter().filter(|r| r["type"] == ty).collect();
    assert_eq!(found.len(), 1, "expected one {ty}: {records:?}");
    found[0].clone()
}

/// Sends `compact` and returns (its response, the records from the command to the response).
#[track_caller]
fn compact(pi: &mut Pi, id: &str, fields: Value) -> (Value, Vec<Value>) {
    let start = pi.records().len();
    let response = pi.command(id, "compact", fields);
    let end = pi.index_of(&response).expect("the response is in the log");
    (response, pi.records()[start..end].to_vec())
}

/// All text of a request's messages, for "is this anywhere" checks.
fn all_text(request: &RecordedRequest) -> String {
    request
        .messages()
        .iter()
        .map(message_text)
        .collect::<Vec<_>>()
        .join("\n")
}

fn system_text(request: &RecordedRequest) -> String {
    match &request.body["system"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// A summarization request: the summarizer's own system prompt, no tools, one user message
/// holding the serialized conversation (old turns only), output capped as pi 1.6.0 caps it.
#[track_caller]
fn assert_summary_request(summary: &RecordedRequest, agent_turn: &RecordedRequest) {
    let tools = &summary.body["tools"];
    assert!(
        tools.as_array().is_none_or(Vec::is_empty),
        "the summary request offers tools: {tools}"
    );
    assert_ne!(
        system_text(summary),
        system_text(agent_turn),
        "the summary request uses the coding agent's system prompt"
    );
    assert!(!system_text(summary).trim().is_empty());
    let messages = summary.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["role"], "user");
    let text = message_text(&messages[0]);
    assert!(text.contains("<conversation>"), "{text}");
    assert!(
        text.contains("[User]: ALPHA-MARKER first question."),
        "{text}"
    );
    assert!(
        text.contains("[Assistant]: BRAVO-MARKER first answer."),
        "{text}"
    );
    assert!(
        !text.contains("CHARLIE-MARKER") && !text.contains("DELTA-MARKER"),
        "kept messages were summarized too: {text}"
    );
    assert_eq!(
        summary.body["max_tokens"],
        summary_output_cap(&text),
        "the model's output limit fitted to the window (pi 1.6.0)"
    );
}

/// pi 1.6.0's summary output cap for the small-window model (contextWindow 4000, maxTokens
/// 1024): its output limit fitted into the window left after the prompt (pi-ai's
/// `clampMaxTokensToContext`: 3.5 UTF-16 units a token, a 4096-token margin here), at least 1.
fn summary_output_cap(prompt: &str) -> i64 {
    let input = (prompt.encode_utf16().count() as f64 / 3.5).ceil() as i64;
    let margin = 4096_i64.max((input as f64 * 0.15).ceil() as i64);
    let mut room = 4000 - input - margin;
    if room < 32768 {
        room = 32768_i64.min(4000 - input - 4096);
    }
    1024_i64.min(room.max(1))
}

/// The summary as the next request carries it, in place of the old turns.
fn wrapped_summary(summary: &str) -> String {
    format!("{WRAPPER_START}\n\n<summary>\n{summary}\n</summary>")
}

/// The request after a compaction: the summary wrapper first, the kept turn, none of the old.
#[track_caller]
fn assert_compacted_context(request: &RecordedRequest) {
    let messages = request.messages();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(message_text(&messages[0]), wrapped_summary(SUMMARY));
    let text = all_text(request);
    assert!(
        !text.contains("ALPHA-MARKER") && !text.contains("BRAVO-MARKER"),
        "compacted turns are still sent: {text}"
    );
    assert!(
        message_text(&messages[1]).contains("CHARLIE-MARKER"),
        "the kept question follows the summary: {messages:?}"
    );
}

/// The compact result / compaction_end.result shape.
#[track_caller]
fn assert_result_shape(result: &Value, tokens_before: &Value) {
    assert_keys(
        result,
        &[
            "summary",
            "firstKeptEntryId",
            "tokensBefore",
            "estimatedTokensAfter",
            "usage",
            "details",
        ],
    );
    assert_eq!(result["summary"], SUMMARY);
    assert!(
        result["firstKeptEntryId"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{result}"
    );
    assert_eq!(&result["tokensBefore"], tokens_before, "{result}");
    assert!(result["estimatedTokensAfter"].is_u64(), "{result}");
    assert_keys(
        &result["usage"],
        &[
            "input",
            "output",
            "cacheRead",
            "cacheWrite",
            "totalTokens",
            "cost",
            // pi 1.6.0: Anthropic's one-hour cache writes, after the cost.
            "cacheWrite1h",
        ],
    );
    assert_eq!(result["usage"]["input"], 100, "the summary call's usage");
    assert_eq!(
        result["details"],
        json!({"readFiles": [], "modifiedFiles": []})
    );
}

/// The prompt state across a compaction (pi 1.6.0): the first run's system message is the only
/// one (the second run changes nothing); the compaction entry keeps the replayed state as its
/// `systemMessage` (keys in 1.6.0's order) and the summary request's `usage`, the compacted
/// context starts with it, and the next run adds no system message because nothing changed.
#[test]
fn compaction_keeps_the_prompt_state_in_its_entry() {
    let mut script = opening(short_second_answer());
    script.push(summary_reply());
    script.push(Reply::sse(sse::anthropic_text(&["Third answer."])));
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake).with_sessions());
    prompt_and_settle(&mut pi, "p0", &first_question());
    let first = crate::support::state(&mut pi, "s0");
    let file = std::path::PathBuf::from(first["sessionFile"].as_str().expect("a session file"));
    let systems = |records: &[Value]| -> Vec<Value> {
        records
            .iter()
            .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "system")
            .map(|r| r["message"].clone())
            .collect()
    };
    let opening_system = pi.command("m0", "get_messages", json!({}))["data"]["messages"][0].clone();
    assert_eq!(opening_system["role"], "system", "{opening_system}");
    let second_run = prompt_and_settle(&mut pi, "p1", &second_question());
    assert_eq!(systems(&second_run), Vec::<Value>::new());

    let (response, _) = compact(&mut pi, "c1", json!({}));
    assert_eq!(response["success"], true, "{response}");
    let entries = crate::support::read_jsonl(&file);
    let entry = entries
        .iter()
        .find(|e| e["type"] == "compaction")
        .expect("a compaction entry");
    // pi 1.6.0's entry, in its key order, with the summary request's usage.
    let entry_keys: Vec<&String> = entry.as_object().expect("entry").keys().collect();
    assert_eq!(
        entry_keys,
        [
            "type",
            "id",
            "parentId",
            "timestamp",
            "summary",
            "firstKeptEntryId",
            "tokensBefore",
            "details",
            "usage",
            "fromHook",
            "systemMessage"
        ]
    );
    assert_eq!(entry["usage"], response["data"]["usage"], "{entry}");
    assert_eq!(entry["usage"]["input"], 100, "{entry}");
    let snapshot = &entry["systemMessage"];
    let keys: Vec<&String> = snapshot
        .as_object()
        .expect("systemMessage")
        .keys()
        .collect();
    assert_eq!(
        keys,
        ["role", "content", "sections", "toolsAdded", "timestamp"]
    );
    assert_eq!(snapshot["sections"], opening_system["sections"]);
    assert_eq!(snapshot["toolsAdded"], opening_system["toolsAdded"]);
    let messages = pi.command("m1", "get_messages", json!({}))["data"]["messages"].clone();
    assert_eq!(
        messages[0], *snapshot,
        "the compacted context starts with it"
    );
    assert_eq!(messages[1]["role"], "compactionSummary");

    let third_run = prompt_and_settle(&mut pi, "p2", "A third question");
    assert_eq!(systems(&third_run), Vec::<Value>::new());
    fake.finish();
}

/// Manual compact: events before the response, the result shape, the summary request, the
/// kept entry, and the next prompt's context; get_session_stats before, right after and after
/// the next reply.
#[test]
fn manual_compact_summarizes_the_old_turns() {
    let mut script = opening(short_second_answer());
    script.push(summary_reply());
    script.push(Reply::sse(sse::anthropic_text(&[
        "ECHO-MARKER third answer.",
    ])));
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    let second_run = run_opening(&mut pi);
    let second_usage = last_reply(&second_run)["usage"].clone();

    let before = pi.command("st0", "get_session_stats", json!({}));
    let tokens = second_usage["totalTokens"].as_u64().expect("totalTokens");
    assert_eq!(
        before["data"]["contextUsage"],
        json!({"tokens": tokens, "contextWindow": 4000,
               "percent": tokens as f64 / 4000.0 * 100.0})
    );

    let (response, records) = compact(&mut pi, "c1", json!({}));
    assert_eq!(response["success"], true, "{response}");
    assert_keys(&response, &["id", "type", "command", "success", "data"]);
    assert_eq!(
        flow(&records),
        ["compaction_start", "compaction_end"],
        "{records:?}"
    );
    let [start] = expect_transcript(&records, &[json!({"type": "compaction_start"}), json!(GAP)]);
    assert_eq!(
        *start,
        json!({"type": "compaction_start", "reason": "manual"})
    );
    let end = only(&records, "compaction_end");
    assert_keys(&end, &["type", "reason", "result", "aborted", "willRetry"]);
    assert_eq!(end["reason"], "manual");
    assert_eq!(end["aborted"], false);
    assert_eq!(end["willRetry"], false);
    let data = &response["data"];
    assert_eq!(end["result"], *data);
    assert_result_shape(data, &second_usage["totalTokens"]);

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_summary_request(&requests[2], &requests[1]);

    // The first kept entry is the second question.
    let entries = pi.command("e1", "get_entries", json!({}));
    let kept = entries["data"]["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["id"] == data["firstKeptEntryId"])
        .unwrap_or_else(|| panic!("firstKeptEntryId not among the entries: {entries}"));
    assert_eq!(kept["type"], "message", "{kept}");
    assert_eq!(kept["message"]["role"], "user", "{kept}");
    assert!(message_text(&kept["message"]).contains("CHARLIE-MARKER"));

    // Right after: sizes unknown until a new reply reports usage; counts over the new context;
    // totals over the whole session, the summary call included.
    let after = pi.command("st1", "get_session_stats", json!({}));
    let stats = &after["data"];
    assert_keys(
        stats,
        &[
            "sessionId",
            "userMessages",
            "assistantMessages",
            "toolCalls",
            "toolResults",
            "totalMessages",
            "tokens",
            "cost",
            "contextUsage",
        ],
    );
    assert_eq!(
        stats["contextUsage"],
        json!({"tokens": null, "contextWindow": 4000, "percent": null})
    );
    assert_eq!(stats["userMessages"], 1, "{stats}");
    assert_eq!(stats["assistantMessages"], 1, "{stats}");
    assert_eq!(
        stats["totalMessages"], 4,
        "the system message (pi 1.6.0) + summary + kept question + answer: {stats}"
    );
    assert_eq!(stats["toolCalls"], 0);
    assert_eq!(stats["toolResults"], 0);
    let replies: Vec<Value> = pi
        .records()
        .iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .map(|r| r["message"]["usage"].clone())
        .chain(std::iter::once(data["usage"].clone()))
        .collect();
    let sum = |field: &str| -> u64 { replies.iter().filter_map(|u| u[field].as_u64()).sum() };
    assert_eq!(
        stats["tokens"],
        json!({"input": sum("input"), "output": sum("output"), "cacheRead": sum("cacheRead"),
               "cacheWrite": sum("cacheWrite"),
               "total": sum("input") + sum("output") + sum("cacheRead") + sum("cacheWrite")})
    );
    assert_eq!(
        stats["tokens"]["input"], 300,
        "two replies and the summary call"
    );
    let cost: f64 = replies
        .iter()
        .filter_map(|u| u["cost"]["total"].as_f64())
        .sum();
    let reported = stats["cost"].as_f64().expect("cost");
    assert!((reported - cost).abs() < 1e-12, "{reported} vs {cost}");

    let third = prompt_and_settle(&mut pi, "p3", "ECHO-MARKER third question");
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    assert_compacted_context(&requests[3]);
    let last = requests[3].messages().last().expect("messages").clone();
    assert!(message_text(&last).contains("ECHO-MARKER third question"));
    let third_tokens = last_reply(&third)["usage"]["totalTokens"].clone();
    let stats = pi.command("st2", "get_session_stats", json!({}));
    assert_eq!(stats["data"]["contextUsage"]["tokens"], third_tokens);
    fake.finish();
}

#[test]
fn compact_custom_instructions_reach_the_summary_request() {
    let mut script = opening(short_second_answer());
    script.push(summary_reply());
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    run_opening(&mut pi);
    let (response, _) = compact(
        &mut pi,
        "c1",
        json!({"customInstructions": "Focus on the ZULU-FOCUS decisions"}),
    );
    assert_eq!(response["success"], true, "{response}");
    let requests = fake.requests();
    assert_summary_request(&requests[2], &requests[1]);
    let text = message_text(&requests[2].messages()[0]);
    assert!(
        text.contains("Focus on the ZULU-FOCUS decisions"),
        "custom instructions missing: {text}"
    );
    fake.finish();
}

/// A session without messages has nothing to compact: the command fails without asking the
/// provider for a summary of nothing. (0.73.1 does send that request, because the session's
/// opening model/thinking entries give the cut a place to land.)
#[test]
fn compact_on_an_empty_session_is_nothing_to_compact() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&small_window(&fake));
    let (response, records) = compact(&mut pi, "c0", json!({}));
    assert_eq!(
        response,
        json!({"id": "c0", "type": "response", "command": "compact", "success": false,
               "error": "Nothing to compact (session too small)"})
    );
    assert_eq!(
        records,
        [
            json!({"type": "compaction_start", "reason": "manual"}),
            json!({"type": "compaction_end", "reason": "manual", "aborted": false,
                   "willRetry": false,
                   "errorMessage": "Compaction failed: Nothing to compact (session too small)"}),
        ]
    );
    assert!(fake.requests().is_empty(), "a summary was requested");
    fake.finish();
}

/// A model's `compaction.modelOverrides` entry that is not a non-negative integer fails a
/// manual compaction, and a prompt that follows a reply, with pi 1.6.0's text (nothing is
/// summarized or sent). Reference: passes against 1.6.0.
#[test]
fn a_bad_model_override_fails_the_compaction_as_pi_does() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&[&first_answer()]))]);
    let setup = small_window(&fake).settings(json!({
        "compaction": {"reserveTokens": 1000, "keepRecentTokens": 200,
            "modelOverrides": {"fake-anthropic/fake-claude-small": {"reserveTokens": "lots"}}},
        "retry": {"baseDelayMs": 20}
    }));
    let mut pi = Pi::spawn(&setup);
    prompt_and_settle(&mut pi, "p1", &first_question());
    let error = "Invalid compaction.modelOverrides[\"fake-anthropic/fake-claude-small\"].reserveTokens setting: lots. Expected a non-negative safe integer.";
    let response = pi.command("p2", "prompt", json!({"message": second_question()}));
    assert_eq!(
        response,
        json!({"id": "p2", "type": "response", "command": "prompt", "success": false,
               "error": error})
    );
    let (response, records) = compact(&mut pi, "c0", json!({}));
    assert_eq!(
        response,
        json!({"id": "c0", "type": "response", "command": "compact", "success": false,
               "error": error})
    );
    assert_eq!(
        records,
        [
            json!({"type": "compaction_start", "reason": "manual"}),
            json!({"type": "compaction_end", "reason": "manual", "aborted": false,
                   "willRetry": false, "errorMessage": format!("Compaction failed: {error}")}),
        ]
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "no summary or second turn was requested"
    );
    fake.finish();
}

/// A branch that ends with a compaction is "Already compacted", reported in compaction_end too.
#[test]
fn compact_twice_is_already_compacted() {
    let mut script = opening(short_second_answer());
    script.push(summary_reply());
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    run_opening(&mut pi);
    let (response, _) = compact(&mut pi, "c1", json!({}));
    assert_eq!(response["success"], true, "{response}");
    let (response, records) = compact(&mut pi, "c2", json!({}));
    assert_eq!(
        response,
        json!({"id": "c2", "type": "response", "command": "compact", "success": false,
               "error": "Already compacted"})
    );
    assert_eq!(
        records,
        [
            json!({"type": "compaction_start", "reason": "manual"}),
            json!({"type": "compaction_end", "reason": "manual", "aborted": false,
                   "willRetry": false, "errorMessage": "Compaction failed: Already compacted"}),
        ]
    );
    assert_eq!(fake.requests().len(), 3);
    fake.finish();
}

/// A reply whose usage passes contextWindow − reserveTokens (3500 + 1 > 3000): the compaction
/// runs after agent_end, and agent_settled comes only after compaction_end. Nothing follows.
#[test]
fn threshold_compaction_runs_after_the_run_before_settling() {
    let big = Reply::sse(
        sse::AnthropicStream::new()
            .input_tokens(3500)
            .text(&[SECOND_ANSWER])
            .finish("end_turn"),
    );
    let mut script = opening(big);
    script.push(summary_reply());
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    let records = run_opening(&mut pi);
    let labels = flow(&records);
    assert_eq!(
        labels[labels.len() - 5..],
        [
            "turn_end",
            "agent_end",
            "compaction_start",
            "compaction_end",
            "agent_settled"
        ],
        "{labels:?}"
    );
    assert_eq!(only(&records, "agent_end")["willRetry"], false);
    assert_eq!(
        only(&records, "compaction_start"),
        json!({"type": "compaction_start", "reason": "threshold"})
    );
    let end = only(&records, "compaction_end");
    assert_keys(&end, &["type", "reason", "result", "aborted", "willRetry"]);
    assert_eq!(end["reason"], "threshold");
    assert_eq!(end["aborted"], false);
    assert_eq!(end["willRetry"], false);
    let tokens_before = last_reply(&records)["usage"]["totalTokens"].clone();
    assert_eq!(tokens_before, 3501);
    assert_result_shape(&end["result"], &tokens_before);
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_summary_request(&requests[2], &requests[1]);
    // No continuation (nothing was queued): the process is quiet and idle.
    let later = pi.drain_for(std::time::Duration::from_millis(400));
    assert!(later.is_empty(), "activity after agent_settled: {later:?}");
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["data"]["isStreaming"], false);
    assert_eq!(state["data"]["isCompacting"], false);
    fake.finish();
}

/// A tool-calling reply whose usage passes the threshold: the context is compacted before the
/// run's next response (pi 1.6.0's check before the next turn), within the run — no agent_end
/// between the tool result and the compaction — and the next request gets the compacted
/// context; the run then ends without compacting again. Passes against pi 1.6.0 too.
#[test]
fn threshold_compaction_runs_before_the_next_response_within_a_run() {
    let big_tool_call = Reply::sse(
        sse::AnthropicStream::new()
            .input_tokens(3500)
            .tool_use(
                "toolu_echo",
                "bash",
                &[&json!({"command": "echo ECHO-MARKER"}).to_string()],
            )
            .finish("tool_use"),
    );
    let mut script = opening(big_tool_call);
    script.push(summary_reply());
    script.push(short_second_answer());
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    let records = run_opening(&mut pi);
    let labels = flow(&records);
    let start = labels
        .iter()
        .position(|l| l == "compaction_start")
        .unwrap_or_else(|| panic!("no compaction: {labels:?}"));
    assert_eq!(
        labels[start - 2..start + 3],
        [
            "message_end:toolResult",
            "turn_end",
            "compaction_start",
            "compaction_end",
            "turn_start"
        ],
        "{labels:?}"
    );
    assert_eq!(
        labels.iter().filter(|l| *l == "agent_end").count(),
        1,
        "{labels:?}"
    );
    assert_eq!(labels.last().map(String::as_str), Some("agent_settled"));
    assert_eq!(
        labels.iter().filter(|l| *l == "compaction_start").count(),
        1,
        "compacted again after the run: {labels:?}"
    );
    assert_eq!(
        only(&records, "compaction_start"),
        json!({"type": "compaction_start", "reason": "threshold"})
    );
    let end = only(&records, "compaction_end");
    assert_eq!(end["willRetry"], false);
    assert_eq!(end["aborted"], false);
    // The reply's usage and the tool result after it.
    let tokens_before = end["result"]["tokensBefore"].as_u64().unwrap_or_default();
    assert!(tokens_before > 3500, "{end}");
    let requests = fake.wait_for_requests(4, pi.timeout());
    assert_eq!(requests.len(), 4);
    assert_summary_request(&requests[2], &requests[1]);
    assert_compacted_context(&requests[3]);
    assert!(
        requests[3].body.to_string().contains("ECHO-MARKER"),
        "the tool call and its result follow the summary"
    );
    fake.finish();
}

/// A context-overflow error (Anthropic 400 `prompt is too long`): not retried as such, but
/// compacted (reason overflow, willRetry) and the run continues without a new user message.
#[test]
fn overflow_is_compacted_and_the_run_retried() {
    let mut script = opening(Reply::status(
        400,
        fixture("anthropic/error_prompt_too_long.json"),
        &[],
    ));
    script.push(summary_reply());
    script.push(Reply::sse(sse::anthropic_text(&["Recovered answer."])));
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    let records = run_opening(&mut pi);
    assert_eq!(
        flow(&records),
        [
            "agent_start",
            "turn_start",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
            "entry_appended",
            "compaction_start",
            "compaction_end",
            "agent_start",
            "turn_start",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
            "agent_settled",
        ]
    );
    let failed = &records
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .expect("the failed reply")["message"];
    assert_eq!(failed["stopReason"], "error");
    // pi 1.6.0 leaves the attempt that overflowed out of the context for good before it
    // compacts: a context_edit of the failed reply's entry (the leaf), without replacement.
    let edit = &only(&records, "entry_appended")["entry"];
    assert_keys(
        edit,
        &[
            "type",
            "id",
            "parentId",
            "timestamp",
            "targetId",
            "replacement",
        ],
    );
    assert_eq!(edit["type"], "context_edit", "{edit}");
    assert_eq!(edit["targetId"], edit["parentId"], "{edit}");
    assert_eq!(edit["replacement"], Value::Null);
    assert!(
        failed["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("prompt is too long")),
        "{failed}"
    );
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
    assert_eq!(
        only(&records, "compaction_start"),
        json!({"type": "compaction_start", "reason": "overflow"})
    );
    let end = only(&records, "compaction_end");
    assert_eq!(end["reason"], "overflow");
    assert_eq!(end["aborted"], false);
    assert_eq!(end["willRetry"], true);
    assert_eq!(end["result"]["summary"], SUMMARY);
    assert!(
        !records.iter().any(|r| r["type"] == "auto_retry_start"),
        "an overflow is not an ordinary retry"
    );
    assert_eq!(
        last_reply(&records)["content"],
        json!([{"type": "text", "text": "Recovered answer."}])
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    assert_summary_request(&requests[2], &requests[1]);
    assert_compacted_context(&requests[3]);
    assert_eq!(
        requests[3].messages().len(),
        2,
        "summary and the kept question only (no failed reply): {:?}",
        requests[3].messages()
    );
    fake.finish();
}

/// A second overflow right after the recovery: give up with the fixed message, no new
/// compaction.
#[test]
fn overflow_twice_gives_up() {
    let too_long = || Reply::status(400, fixture("anthropic/error_prompt_too_long.json"), &[]);
    let mut script = opening(too_long());
    script.push(summary_reply());
    script.push(too_long());
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    let records = run_opening(&mut pi);
    let labels = flow(&records);
    assert_eq!(
        labels[labels.len() - 10..],
        [
            "compaction_start",
            "compaction_end",
            "agent_start",
            "turn_start",
            "message_start:assistant",
            "message_end:assistant",
            "turn_end",
            "agent_end",
            "compaction_end",
            "agent_settled",
        ][..],
        "{labels:?}"
    );
    let ends: Vec<Value> = records
        .iter()
        .filter(|r| r["type"] == "compaction_end")
        .cloned()
        .collect();
    let [_, gave_up] = expect_transcript(
        &ends,
        &[json!({"willRetry": true}), json!("{...}"), json!(GAP)],
    );
    assert_eq!(
        *gave_up,
        json!({"type": "compaction_end", "reason": "overflow", "aborted": false,
               "willRetry": false, "errorMessage": OVERFLOW_GAVE_UP})
    );
    let agent_ends: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "agent_end")
        .collect();
    assert_eq!(agent_ends.last().expect("agent_end")["willRetry"], false);
    assert_eq!(fake.requests().len(), 4);
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["data"]["isStreaming"], false);
    fake.finish();
}

/// The summary request fails once with 529: retried with the retry settings, announced by the
/// summarization_retry_* events, then the compaction completes.
#[test]
fn transient_summary_failure_is_retried() {
    let overloaded = fixture("anthropic/error_529.json");
    let mut script = opening(short_second_answer());
    script.push(Reply::status(529, overloaded.clone(), &[]));
    script.push(summary_reply());
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    run_opening(&mut pi);
    let (response, records) = compact(&mut pi, "c1", json!({}));
    assert_eq!(response["success"], true, "{response}");
    assert_eq!(response["data"]["summary"], SUMMARY);
    let events: Vec<Value> = records
        .iter()
        .filter(|r| r["type"] != "compaction_end")
        .cloned()
        .collect();
    assert_eq!(
        events,
        [
            json!({"type": "compaction_start", "reason": "manual"}),
            json!({"type": "summarization_retry_scheduled", "attempt": 1, "maxAttempts": 3,
                   "delayMs": 20, "errorMessage": format!("529 {overloaded}")}),
            json!({"type": "summarization_retry_attempt_start", "source": "compaction",
                   "reason": "manual"}),
            json!({"type": "summarization_retry_finished"}),
        ]
    );
    assert_eq!(
        records.last().expect("records")["type"],
        "compaction_end",
        "compaction_end comes last: {records:?}"
    );
    let end = only(&records, "compaction_end");
    assert_eq!(end["aborted"], false);
    assert_eq!(end["result"], response["data"]);
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(
        requests[3].body, requests[2].body,
        "the retry repeats the summary request"
    );
    fake.finish();
}

/// `abort` while the summary request hangs: compaction_end{aborted:true}, the command answers
/// `Compaction cancelled`, the request's connection is closed, nothing is changed.
#[test]
fn abort_during_compaction_cancels_it() {
    let mut script = opening(short_second_answer());
    script.push(Reply::stall_after(""));
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    run_opening(&mut pi);
    pi.send(json!({"id": "c1", "type": "compact"}));
    pi.wait_for_event("compaction_start");
    fake.wait_for_requests(3, pi.timeout());
    let abort = pi.command("a1", "abort", json!({}));
    assert_eq!(abort["success"], true, "{abort}");
    let response = pi.response_for("c1");
    assert_eq!(
        response,
        json!({"id": "c1", "type": "response", "command": "compact", "success": false,
               "error": "Compaction cancelled"})
    );
    let mut end = pi.wait_for_event("compaction_end");
    // The seed shows `result: null`, 0.73.1 omits the key: either says "no result".
    if end.get("result").is_some_and(Value::is_null) {
        end.as_object_mut().map(|o| o.remove("result"));
    }
    assert_eq!(
        end,
        json!({"type": "compaction_end", "reason": "manual", "aborted": true, "willRetry": false})
    );
    let records = pi.records();
    let end_at = records.iter().position(|r| r["type"] == "compaction_end");
    let response_at = records
        .iter()
        .position(|r| r["type"] == "response" && r["id"] == "c1");
    assert!(
        end_at < response_at,
        "compaction_end comes before the response"
    );
    fake.wait_for_stalls_closed_by_client(1, pi.timeout());
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["data"]["isCompacting"], false);
    assert_eq!(
        state["data"]["messageCount"], 5,
        "the conversation (system message, two questions, two answers) is untouched"
    );
    fake.finish();
}

/// get_state.isCompacting is true while a (held) summary request runs, false afterwards.
#[test]
fn is_compacting_is_true_during_a_compaction() {
    let mut script = opening(short_second_answer());
    script.push(Reply::hold(
        &sse::anthropic_text(&[SUMMARY]),
        "event: message_delta",
    ));
    let fake = FakeProvider::start(script);
    let mut pi = Pi::spawn(&small_window(&fake));
    run_opening(&mut pi);
    let state = pi.command("s0", "get_state", json!({}));
    assert_eq!(state["data"]["isCompacting"], false);
    pi.send(json!({"id": "c1", "type": "compact"}));
    pi.wait_for_event("compaction_start");
    fake.wait_for_requests(3, pi.timeout());
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["data"]["isCompacting"], true, "{state}");
    fake.release_stalls();
    let response = pi.response_for("c1");
    assert_eq!(response["success"], true, "{response}");
    let state = pi.command("s2", "get_state", json!({}));
    assert_eq!(state["data"]["isCompacting"], false, "{state}");
    assert_eq!(
        state["data"]["messageCount"], 4,
        "the system message (pi 1.6.0) + summary + kept question + answer"
    );
    fake.finish();
}
