//! Compaction tests. The `testdata` fixtures and the expected values were produced by running the
//! reference's own functions (pi 0.73.1 `serializeConversation`, `estimateTokens`,
//! `estimateContextTokens`, `prepareCompaction`, `computeFileLists`, `formatFileOperations`) on
//! the same inputs: `node src/agent/compaction/testdata/reference.mjs` regenerates both files.

use crate::js::js_len;
use serde_json::{Value, json};

use super::test_support::*;
use super::*;
use crate::config::ThinkingLevel;
use crate::messages::Cost;

fn fixtures() -> Value {
    serde_json::from_str(include_str!("testdata/fixtures.json")).unwrap()
}

fn expected() -> Value {
    serde_json::from_str(include_str!("testdata/expected.json")).unwrap()
}

fn fixture_messages() -> Vec<AgentMessage> {
    serde_json::from_value(fixtures()["messages"].clone()).unwrap()
}

fn fixture_session(name: &str) -> (Vec<SessionEntry>, u64) {
    let session = &fixtures()["sessions"][name];
    let entries = session["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| SessionEntry::from_value(v.clone()))
        .collect();
    (entries, session["keepRecentTokens"].as_u64().unwrap())
}

fn settings(keep_recent_tokens: u64) -> CompactionSettings {
    CompactionSettings {
        reserve_tokens: 16384,
        keep_recent_tokens,
    }
}

fn prepared(name: &str) -> Preparation {
    let (entries, keep) = fixture_session(name);
    let branch: Vec<&SessionEntry> = entries.iter().collect();
    prepare(&branch, settings(keep)).unwrap()
}

fn roles(messages: &[AgentMessage]) -> Value {
    messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap()["role"].clone())
        .collect()
}

#[test]
fn serialization_matches_the_reference_byte_for_byte() {
    let text = serialize_conversation(&to_llm(&fixture_messages()));
    assert_eq!(text, expected()["serialized"].as_str().unwrap());
}

#[test]
fn estimates_match_the_reference() {
    let messages = fixture_messages();
    let ours: Vec<u64> = messages.iter().map(estimate_tokens).collect();
    assert_eq!(json!(ours), expected()["estimates"]);
    let context = estimate_context_tokens(&messages);
    let want = &expected()["context"];
    assert_eq!(context.tokens, want["tokens"].as_u64().unwrap());
    assert_eq!(context.usage_tokens, want["usageTokens"].as_u64().unwrap());
    assert_eq!(
        context.trailing_tokens,
        want["trailingTokens"].as_u64().unwrap()
    );
    assert_eq!(
        context.last_usage_index,
        want["lastUsageIndex"].as_u64().map(|i| i as usize)
    );
}

#[test]
fn preparation_matches_the_reference_for_every_session() {
    let expected = expected();
    let sessions = expected["sessions"].as_object().unwrap();
    assert!(sessions.len() >= 15);
    for (name, want) in sessions {
        let (entries, keep) = fixture_session(name);
        let branch: Vec<&SessionEntry> = entries.iter().collect();
        let result = prepare(&branch, settings(keep));
        if want.is_null() {
            assert!(result.is_err(), "{name}: expected no preparation");
            continue;
        }
        // Where pi would summarize nothing, pi-rs reports "Nothing to compact" instead.
        let nothing = want["summarizeRoles"].as_array().is_some_and(Vec::is_empty)
            && want["prefixRoles"].as_array().is_some_and(Vec::is_empty);
        if nothing {
            assert_eq!(result.err(), Some(PrepareError::NothingToCompact), "{name}");
            continue;
        }
        let prep = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        let (read, modified) = prep.file_ops.lists();
        let ours = json!({
            "firstKeptEntryId": prep.first_kept_entry_id,
            "isSplitTurn": prep.is_split_turn,
            "tokensBefore": prep.tokens_before,
            "previousSummary": prep.previous_summary,
            "summarizeRoles": roles(&prep.messages_to_summarize),
            "prefixRoles": roles(&prep.turn_prefix_messages),
            "summarized": serialize_conversation(&to_llm(&prep.messages_to_summarize)),
            "prefix": serialize_conversation(&to_llm(&prep.turn_prefix_messages)),
            "readFiles": read,
            "modifiedFiles": modified,
            "fileBlock": format_file_lists(&read, &modified),
        });
        assert_eq!(&ours, want, "session {name}");
    }
}

#[test]
fn nothing_to_prepare_wording() {
    let (entries, keep) = fixture_session("alreadyCompacted");
    let branch: Vec<&SessionEntry> = entries.iter().collect();
    let error = prepare(&branch, settings(keep)).unwrap_err();
    assert_eq!(error.to_string(), "Already compacted");
    let error = prepare(&[], settings(keep)).unwrap_err();
    assert_eq!(error.to_string(), "Nothing to compact (session too small)");
}

#[test]
fn tiny_session_keeps_everything_so_there_is_nothing_to_compact() {
    // pi would ask for a summary of an empty conversation here; pi-rs says there is nothing to do.
    let (entries, keep) = fixture_session("tiny");
    let branch: Vec<&SessionEntry> = entries.iter().collect();
    assert_eq!(
        prepare(&branch, settings(keep)).err(),
        Some(PrepareError::NothingToCompact)
    );
}

#[test]
fn tool_results_are_never_the_cut() {
    for name in ["turns", "splitTurn", "previousCompaction", "bashAndCustom"] {
        let (entries, keep) = fixture_session(name);
        let branch: Vec<&SessionEntry> = entries.iter().collect();
        for budget in [1, 10, 100, keep, 1000, 5000] {
            let cut = find_cut_point(&branch, 0, branch.len(), budget);
            assert!(
                !matches!(
                    branch[cut.first_kept_index].message().as_deref(),
                    Some(AgentMessage::ToolResult(_))
                ),
                "{name} budget {budget}"
            );
        }
    }
}

#[test]
fn history_request_layout_and_budget() {
    let prep = prepared("turnsBudgetOnToolResult");
    let requests = prep.summary_requests(Some("Focus on the parser"));
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.kind, SummaryKind::History);
    assert_eq!(request.system_prompt, SYSTEM_PROMPT);
    let conversation = serialize_conversation(&to_llm(&prep.messages_to_summarize));
    assert_eq!(
        request.user_text,
        format!(
            "<conversation>\n{conversation}\n</conversation>\n\n{INITIAL_PROMPT}\n\nAdditional focus: Focus on the parser"
        )
    );
    // Empty instructions add nothing.
    let plain = prep.summary_requests(Some(""));
    assert!(plain[0].user_text.ends_with(INITIAL_PROMPT));
}

#[test]
fn previous_summary_selects_the_update_prompt() {
    let prep = prepared("previousCompaction");
    let requests = prep.summary_requests(None);
    assert_eq!(requests.len(), 2);
    let history = &requests[0];
    let conversation = serialize_conversation(&to_llm(&prep.messages_to_summarize));
    assert_eq!(
        history.user_text,
        format!(
            "<conversation>\n{conversation}\n</conversation>\n\n<previous-summary>\n## Goal\nOld summary\n</previous-summary>\n\n{UPDATE_PROMPT}"
        )
    );
    let prefix = &requests[1];
    assert_eq!(prefix.kind, SummaryKind::TurnPrefix);
    let conversation = serialize_conversation(&to_llm(&prep.turn_prefix_messages));
    assert_eq!(
        prefix.user_text,
        format!("<conversation>\n{conversation}\n</conversation>\n\n{TURN_PREFIX_PROMPT}")
    );
}

#[test]
fn split_turn_without_history_asks_only_for_the_prefix() {
    let prep = prepared("splitTurn");
    let requests = prep.summary_requests(Some("ignored by the prefix"));
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].kind, SummaryKind::TurnPrefix);
    assert!(!requests[0].user_text.contains("Additional focus"));
    let result = prep.finish(&["PREFIX".to_string()]);
    assert_eq!(
        result.summary,
        "No prior history.\n\n---\n\n**Turn Context (split turn):**\n\nPREFIX\n\n<read-files>\nbig1.rs\n</read-files>\n\n<modified-files>\nout.rs\n</modified-files>"
    );
    assert_eq!(result.first_kept_entry_id, "e6");
    assert_eq!(result.tokens_before, 3010);
    assert_eq!(
        result.details,
        json!({"readFiles": ["big1.rs"], "modifiedFiles": ["out.rs"]})
    );
}

#[test]
fn split_turn_with_history_joins_both_summaries() {
    let prep = prepared("previousCompaction");
    let result = prep.finish(&["HISTORY".to_string(), "PREFIX".to_string()]);
    assert_eq!(
        result.summary,
        "HISTORY\n\n---\n\n**Turn Context (split turn):**\n\nPREFIX\n\n<read-files>\nold.rs\n</read-files>\n\n<modified-files>\nkept.rs\nmod.rs\n</modified-files>"
    );
}

#[test]
fn split_turn_with_an_empty_prefix_is_a_plain_summary() {
    let prep = prepared("cutAtCustomMessage");
    assert!(prep.is_split_turn && prep.turn_prefix_messages.is_empty());
    let requests = prep.summary_requests(None);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].kind, SummaryKind::History);
    assert_eq!(prep.finish(&["S".to_string()]).summary, "S");
}

#[test]
fn result_json_follows_the_seed() {
    let prep = prepared("turnsBudgetOnToolResult");
    let result = prep.finish(&["## Goal\nFix it".to_string()]);
    // Rebuilt context: the summary message, then the kept entries from e5 on.
    let summary_tokens = js_len(&result.summary).div_ceil(4);
    let kept: u64 = prep.kept_messages.iter().map(estimate_tokens).sum();
    assert_eq!(result.estimated_tokens_after, summary_tokens + kept);
    assert_eq!(prep.kept_messages.len(), 6);
    let usage = sum_usage(&[
        Usage {
            input: 100,
            output: 10,
            total_tokens: 110,
            cost: Cost {
                input: 0.5,
                output: 0.25,
                total: 0.75,
                ..Cost::default()
            },
            ..Usage::default()
        },
        Usage {
            input: 50,
            output: 5,
            total_tokens: 55,
            cost: Cost {
                input: 0.5,
                total: 0.5,
                ..Cost::default()
            },
            ..Usage::default()
        },
    ]);
    let value = result.to_json(Some(&usage));
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "summary",
            "firstKeptEntryId",
            "tokensBefore",
            "estimatedTokensAfter",
            "usage",
            "details"
        ]
    );
    assert_eq!(
        value["usage"].to_string(),
        r#"{"input":150,"output":15,"cacheRead":0,"cacheWrite":0,"totalTokens":165,"cost":{"input":1,"output":0.25,"cacheRead":0,"cacheWrite":0,"total":1.25,"totalFromProvider":false}}"#
    );
    assert_eq!(
        value["details"],
        json!({"readFiles": ["a.rs"], "modifiedFiles": []})
    );
    assert!(result.to_json(None).get("usage").is_none());
}

#[test]
fn events_have_the_wire_shape() {
    assert_eq!(
        start_event(CompactionReason::Threshold)
            .to_extension_value()
            .unwrap()
            .to_string(),
        r#"{"type":"compaction_start","reason":"threshold"}"#
    );
    assert_eq!(
        end_event(
            CompactionReason::Overflow,
            None,
            false,
            false,
            Some(OVERFLOW_GAVE_UP)
        )
        .to_extension_value()
        .unwrap()
        .to_string(),
        format!(
            r#"{{"type":"compaction_end","reason":"overflow","aborted":false,"willRetry":false,"errorMessage":"{OVERFLOW_GAVE_UP}"}}"#
        )
    );
    assert_eq!(
        end_event(
            CompactionReason::Manual,
            Some(json!({"x": 1})),
            false,
            true,
            None
        )
        .to_extension_value()
        .unwrap()
        .to_string(),
        r#"{"type":"compaction_end","reason":"manual","result":{"x":1},"aborted":false,"willRetry":true}"#
    );
    assert_eq!(
        CompactionReason::Manual.failure_message("Summarization failed: boom"),
        "Compaction failed: Summarization failed: boom"
    );
    assert_eq!(
        CompactionReason::Threshold.failure_message("x"),
        "Auto-compaction failed: x"
    );
    assert_eq!(
        CompactionReason::Overflow.failure_message("x"),
        "Context overflow recovery failed: x"
    );
}

#[test]
fn reply_text_and_failures() {
    let prep = prepared("previousCompaction");
    let requests = prep.summary_requests(None);
    let AgentMessage::Assistant(mut reply) =
        assistant_msg(vec![thinking("t"), text("one"), text("two")])
    else {
        unreachable!()
    };
    assert_eq!(requests[0].reply_text(&reply).unwrap(), "one\ntwo");
    reply.stop_reason = StopReason::Error;
    reply.error_message = Some("429 quota".into());
    assert_eq!(
        requests[0].reply_text(&reply).unwrap_err(),
        "Summarization failed: 429 quota"
    );
    reply.error_message = None;
    assert_eq!(
        requests[1].reply_text(&reply).unwrap_err(),
        "Turn prefix summarization failed: Unknown error"
    );
}

/// pi-ai's clampMaxTokensToContext, with its own numbers.
#[test]
fn stream_request_has_no_tools_and_the_budget() {
    let prep = prepared("turns");
    let request = prep.summary_requests(None).remove(0);
    let mut model = Model::placeholder();
    model.provider = "p".into();
    let base = StreamRequest {
        model: model.clone(),
        api_key: "k".into(),
        headers: Vec::new(),
        system_prompt: "agent prompt".into(),
        messages: vec![user("old")],
        history: None,
        tools: crate::tools::specs(&["read".to_string()]),
        initial_tools: Vec::new(),
        strict_preferred: Vec::new(),
        strict_required: Vec::new(),
        strict_tools_refused: false,
        grammar_tools: Vec::new(),
        thinking: ThinkingLevel::High,
        thinking_budgets: [Some(1); 4],
        max_tokens: None,
        prompt_in_estimate: true,
        session_id: "s".into(),
        idle_timeout: std::time::Duration::from_secs(1),
        provider_retry: Default::default(),
        hooks: None,
    };
    let user_text = request.user_text.clone();
    let stream = request.clone().into_stream_request(base);
    assert_eq!(stream.system_prompt, SYSTEM_PROMPT);
    assert!(stream.tools.is_empty());
    // The model's output limit fitted to the window after the prompt alone (pi 1.6.0).
    assert_eq!(stream.max_tokens, None);
    assert!(!stream.prompt_in_estimate);
    assert_eq!(stream.thinking, ThinkingLevel::Off);
    assert_eq!(stream.session_id, "");
    assert_eq!(stream.thinking_budgets, [None; 4]);
    match &stream.messages[..] {
        [AgentMessage::User(u)] => assert_eq!(u.content.text(), user_text),
        other => panic!("{other:?}"),
    }
    model.reasoning = true;
    let mut base = stream.clone();
    base.model = model;
    base.thinking = ThinkingLevel::High;
    assert_eq!(
        request.into_stream_request(base).thinking,
        ThinkingLevel::High
    );
}

fn model_with_window(window: u64) -> Model {
    let mut m = Model::placeholder();
    m.provider = "p".into();
    m.id = "m".into();
    m.api = "openai-completions".into();
    m.context_window = window;
    m
}

fn reply(input: u64, stop: StopReason, timestamp: i64) -> AssistantMessage {
    let mut message = assistant_msg(vec![text("r")]);
    set_usage(&mut message, input, 0, 0);
    set_stop(&mut message, stop);
    let AgentMessage::Assistant(mut a) = message else {
        unreachable!()
    };
    a.timestamp = timestamp;
    a
}

fn decide(
    assistant: &AssistantMessage,
    messages: &[AgentMessage],
    branch: &[&SessionEntry],
    attempted: bool,
    include_aborted: bool,
) -> Trigger {
    let model = model_with_window(1000);
    TriggerCheck {
        enabled: true,
        assistant,
        include_aborted,
        model: &model,
        messages,
        branch,
        reserve_tokens: 100,
        overflow_recovery_attempted: attempted,
    }
    .decide()
}

#[test]
fn threshold_and_overflow_decisions() {
    let big = reply(901, StopReason::Stop, 5);
    let small = reply(900, StopReason::Stop, 5);
    assert_eq!(decide(&big, &[], &[], false, false), Trigger::Threshold);
    assert_eq!(decide(&small, &[], &[], false, false), Trigger::Nothing);

    let mut overflow = reply(0, StopReason::Error, 5);
    overflow.error_message = Some("400 prompt is too long: 1200 tokens".into());
    assert_eq!(decide(&overflow, &[], &[], false, false), Trigger::Overflow);
    assert_eq!(
        decide(&overflow, &[], &[], true, false),
        Trigger::OverflowGaveUp
    );
    // From another model: not this model's overflow.
    let mut other = overflow.clone();
    other.model = "other".into();
    assert_eq!(decide(&other, &[], &[], false, false), Trigger::Nothing);

    let aborted = reply(950, StopReason::Aborted, 5);
    assert_eq!(decide(&aborted, &[], &[], false, false), Trigger::Nothing);
    assert_eq!(decide(&aborted, &[], &[], false, true), Trigger::Threshold);

    let model = model_with_window(1000);
    let disabled = TriggerCheck {
        enabled: false,
        assistant: &big,
        include_aborted: false,
        model: &model,
        messages: &[],
        branch: &[],
        reserve_tokens: 100,
        overflow_recovery_attempted: false,
    };
    assert_eq!(disabled.decide(), Trigger::Nothing);
}

#[test]
fn failed_replies_use_the_estimate_and_respect_the_latest_compaction() {
    let mut failed = reply(0, StopReason::Error, 1_735_689_700_000);
    failed.error_message = Some("503 overloaded".into());
    let earlier = AgentMessage::Assistant(reply(950, StopReason::Stop, 1_735_689_600_000));
    let messages = vec![earlier, user("abcd")];
    assert_eq!(
        decide(&failed, &messages, &[], false, false),
        Trigger::Threshold
    );
    // No usage anywhere: nothing to go on.
    assert_eq!(
        decide(&failed, &[user("x")], &[], false, false),
        Trigger::Nothing
    );
    // A compaction newer than the usage source (2025-01-01T00:00:02Z = 1735689602000).
    let mut chain = Chain::new();
    chain.model_change();
    chain.message(user("x"));
    chain.push(EntryKind::Compaction {
        summary: "S".into(),
        first_kept_entry_id: "e1".into(),
        tokens_before: 1,
        details: None,
        usage: None,
        from_hook: Some(false),
        system_message: None,
    });
    let branch = chain.branch();
    assert_eq!(
        decide(&failed, &messages, &branch, false, false),
        Trigger::Nothing
    );
    // A reply older than the compaction is ignored entirely (a silent overflow included).
    let stale_overflow = reply(5000, StopReason::Stop, 1_735_689_601_999);
    assert_eq!(
        decide(&stale_overflow, &messages, &branch, false, false),
        Trigger::Nothing
    );
    let stale = reply(950, StopReason::Stop, 1_735_689_601_999);
    assert_eq!(
        decide(&stale, &messages, &branch, false, false),
        Trigger::Nothing
    );
    let fresh = reply(950, StopReason::Stop, 1_735_689_602_001);
    assert_eq!(
        decide(&fresh, &messages, &branch, false, false),
        Trigger::Threshold
    );
}

#[test]
fn file_lists_from_tool_calls_and_details() {
    let mut ops = FileOps::default();
    ops.add_from_message(&assistant_msg(vec![
        tool_call("1", "read", json!({"path": "b.rs"})),
        tool_call("2", "read", json!({"path": "a.rs"})),
        tool_call("3", "edit", json!({"path": "a.rs"})),
        tool_call("4", "write", json!({"path": "Z.rs"})),
        tool_call("5", "read", json!({"path": ""})),
        tool_call("6", "grep", json!({"path": "ignored"})),
        tool_call("7", "read", json!({"path": 5})),
    ]));
    ops.add_from_message(&user("not an assistant"));
    ops.add_from_details(&json!({"readFiles": ["c.rs", 3], "modifiedFiles": ["d.rs"]}));
    let (read, modified) = ops.lists();
    assert_eq!(read, ["b.rs", "c.rs"]);
    assert_eq!(modified, ["Z.rs", "a.rs", "d.rs"]);
    assert_eq!(
        format_file_lists(&read, &modified),
        "\n\n<read-files>\nb.rs\nc.rs\n</read-files>\n\n<modified-files>\nZ.rs\na.rs\nd.rs\n</modified-files>"
    );
    assert_eq!(format_file_lists(&[], &[]), "");
    assert_eq!(
        format_file_lists(&[], &modified[..1]),
        "\n\n<modified-files>\nZ.rs\n</modified-files>"
    );
}

#[test]
fn truncation_counts_utf16_units() {
    assert_eq!(truncate_for_summary("abc", 3), "abc");
    assert_eq!(
        truncate_for_summary("abcdef", 4),
        "abcd\n\n[... 2 more characters truncated]"
    );
    // The cut would split 😀 (2 units): it is left out whole; the count is JavaScript's.
    assert_eq!(
        truncate_for_summary("ab😀cd", 3),
        "ab\n\n[... 3 more characters truncated]"
    );
}
