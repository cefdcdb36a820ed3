//! The `get_session_stats` answer (FACTS §12.1 with the seed's totals): message counts over the
//! current agent messages, token and cost totals over everything the session spent, and how full
//! the context window is.
//!
//! Totals follow the seed, not 0.73.1: every assistant reply in the session log (all branches,
//! including replies later removed from the context by a retry or a compaction), usage reported
//! by tool results, and the summarization calls the caller passes in (they are not messages, so
//! the log does not hold them). Input: the log, the agent's messages, those extra usages and the
//! model. Output: the JSON `data` object in the seed's key order.

use crate::js::number_value;
use serde_json::{Map, Value, json};

use super::estimate::{estimate_context_tokens, reliable_usage, usage_context_tokens};
use crate::config::Model;
use crate::messages::{AgentMessage, Usage};
use crate::session::{EntryKind, SessionEntry, SessionLog};

/// Token and cost sums.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub cost: f64,
}

impl Totals {
    pub fn add(&mut self, usage: &Usage) {
        self.input += usage.input;
        self.output += usage.output;
        self.cache_read += usage.cache_read;
        self.cache_write += usage.cache_write;
        self.cost += usage.cost.total;
    }

    pub fn total_tokens(&self) -> u64 {
        self.input + self.output + self.cache_read + self.cache_write
    }
}

/// The `data` of a `get_session_stats` response.
pub fn session_stats(
    session: &SessionLog,
    messages: &[AgentMessage],
    extra_usage: &[Usage],
    model: &Model,
) -> Value {
    let count = |keep: fn(&AgentMessage) -> bool| messages.iter().filter(|m| keep(m)).count();
    let tool_calls: usize = messages
        .iter()
        .filter_map(AgentMessage::as_assistant)
        .map(|a| a.tool_calls().count())
        .sum();
    let totals = session_totals(session.entries(), extra_usage);

    let mut out = Map::new();
    if let Some(file) = session.file_path() {
        out.insert("sessionFile".into(), json!(file.to_string_lossy()));
    }
    out.insert("sessionId".into(), json!(session.id()));
    out.insert(
        "userMessages".into(),
        json!(count(|m| matches!(m, AgentMessage::User(_)))),
    );
    out.insert(
        "assistantMessages".into(),
        json!(count(|m| matches!(m, AgentMessage::Assistant(_)))),
    );
    out.insert("toolCalls".into(), json!(tool_calls));
    out.insert(
        "toolResults".into(),
        json!(count(|m| matches!(m, AgentMessage::ToolResult(_)))),
    );
    out.insert("totalMessages".into(), json!(messages.len()));
    out.insert(
        "tokens".into(),
        json!({
            "input": totals.input,
            "output": totals.output,
            "cacheRead": totals.cache_read,
            "cacheWrite": totals.cache_write,
            "total": totals.total_tokens(),
        }),
    );
    out.insert("cost".into(), number_value(totals.cost));
    if !model.is_placeholder()
        && let Some(usage) = context_usage(&session.branch(), messages, model.context_window)
    {
        out.insert("contextUsage".into(), usage);
    }
    Value::Object(out)
}

/// Sums over every message entry of the log plus the extra usages.
pub fn session_totals(entries: &[SessionEntry], extra_usage: &[Usage]) -> Totals {
    let mut totals = Totals::default();
    for entry in entries {
        match entry.message().as_deref() {
            Some(AgentMessage::Assistant(a)) => totals.add(&a.usage),
            Some(AgentMessage::ToolResult(r)) => {
                if let Some(usage) = &r.usage {
                    totals.add(usage);
                }
            }
            _ => {}
        }
    }
    extra_usage.iter().for_each(|u| totals.add(u));
    totals
}

/// `{tokens, contextWindow, percent}`; None for an unknown window (0). Right after a compaction,
/// until a completed reply with a usage report follows it on the branch, the size is unknown:
/// `tokens` and `percent` are null (the kept replies' reports describe the old, larger context).
pub fn context_usage(
    branch: &[&SessionEntry],
    messages: &[AgentMessage],
    context_window: u64,
) -> Option<Value> {
    if context_window == 0 {
        return None;
    }
    if awaiting_usage_after_compaction(branch) {
        return Some(json!({"tokens": null, "contextWindow": context_window, "percent": null}));
    }
    let tokens = estimate_context_tokens(messages).tokens;
    let percent = tokens as f64 / context_window as f64 * 100.0;
    Some(json!({
        "tokens": tokens,
        "contextWindow": context_window,
        "percent": number_value(percent),
    }))
}

/// True when the branch has a compaction and the newest completed reply after it (if any)
/// reports no context size.
pub fn awaiting_usage_after_compaction(branch: &[&SessionEntry]) -> bool {
    let Some(compaction_at) = branch
        .iter()
        .rposition(|e| matches!(e.kind, EntryKind::Compaction { .. }))
    else {
        return false;
    };
    let newest_reply = branch[compaction_at + 1..]
        .iter()
        .rev()
        .filter_map(|e| e.message())
        .find_map(|m| reliable_usage(&m).map(usage_context_tokens));
    newest_reply.is_none_or(|tokens| tokens == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::compaction::test_support::*;
    use crate::messages::{Cost, StopReason};
    use std::path::Path;

    fn model(window: u64) -> Model {
        let mut m = Model::placeholder();
        m.provider = "p".into();
        m.id = "m".into();
        m.api = "openai-completions".into();
        m.context_window = window;
        m
    }

    fn priced(mut message: AgentMessage, input: u64, output: u64, cost: f64) -> AgentMessage {
        set_usage(&mut message, input, output, 0);
        if let AgentMessage::Assistant(a) = &mut message {
            a.usage.cost.total = cost;
        }
        message
    }

    #[test]
    fn counts_totals_and_context_usage() {
        let mut log = SessionLog::in_memory(Path::new("/tmp"));
        let reply = priced(
            assistant_msg(vec![
                text("x"),
                tool_call("c1", "read", serde_json::json!({"path": "a"})),
                tool_call("c2", "ls", serde_json::json!({})),
            ]),
            100,
            20,
            0.25,
        );
        let mut failed = priced(assistant_msg(vec![]), 7, 0, 0.5);
        set_stop(&mut failed, StopReason::Error);
        let messages = vec![
            user("hello"),
            reply,
            tool_result("c1", "read", "abcd"),
            tool_result("c2", "ls", "abcd"),
        ];
        // The failed reply was removed from the context by a retry but stays in the log.
        log.append_message(&messages[0]).unwrap();
        log.append_message(&failed).unwrap();
        for m in &messages[1..] {
            log.append_message(m).unwrap();
        }
        let compaction_usage = Usage {
            input: 1000,
            output: 100,
            total_tokens: 1100,
            cost: Cost {
                total: 0.125,
                ..Cost::default()
            },
            ..Usage::default()
        };
        let stats = session_stats(&log, &messages, &[compaction_usage], &model(1000));
        let expected = json!({
            "sessionId": log.id(),
            "userMessages": 1,
            "assistantMessages": 1,
            "toolCalls": 2,
            "toolResults": 2,
            "totalMessages": 4,
            "tokens": {"input": 1107, "output": 120, "cacheRead": 0, "cacheWrite": 0, "total": 1227},
            "cost": 0.875,
            "contextUsage": {"tokens": 122, "contextWindow": 1000, "percent": 12.2},
        });
        assert_eq!(stats.to_string(), expected.to_string());
    }

    #[test]
    fn context_usage_is_omitted_without_a_window_or_model() {
        let log = SessionLog::in_memory(Path::new("/tmp"));
        let stats = session_stats(&log, &[], &[], &model(0));
        assert!(stats.get("contextUsage").is_none());
        let stats = session_stats(&log, &[], &[], &Model::placeholder());
        assert!(stats.get("contextUsage").is_none());
        assert_eq!(stats["cost"], json!(0));
        assert_eq!(stats["tokens"]["total"], json!(0));
    }

    #[test]
    fn context_usage_is_null_after_compaction_until_a_new_report() {
        let mut log = SessionLog::in_memory(Path::new("/tmp"));
        let first = log.append_message(&user("hi")).unwrap();
        log.append_message(&priced(assistant_msg(vec![text("a")]), 50, 5, 0.0))
            .unwrap();
        log.append_compaction(crate::session::NewCompaction {
            summary: "S",
            first_kept_entry_id: &first,
            tokens_before: 55,
            details: None,
            usage: None,
            from_hook: Some(false),
            system_message: None,
        })
        .unwrap();
        let messages = log.context().messages;
        let usage = context_usage(&log.branch(), &messages, 200).unwrap();
        assert_eq!(
            usage.to_string(),
            r#"{"tokens":null,"contextWindow":200,"percent":null}"#
        );
        // An aborted reply does not count; a completed one does.
        let mut aborted = priced(assistant_msg(vec![text("b")]), 80, 5, 0.0);
        set_stop(&mut aborted, StopReason::Aborted);
        log.append_message(&aborted).unwrap();
        assert!(awaiting_usage_after_compaction(&log.branch()));
        log.append_message(&priced(assistant_msg(vec![text("c")]), 90, 10, 0.0))
            .unwrap();
        let messages = log.context().messages;
        let usage = context_usage(&log.branch(), &messages, 200).unwrap();
        assert_eq!(
            usage.to_string(),
            r#"{"tokens":100,"contextWindow":200,"percent":50}"#
        );
    }
}
