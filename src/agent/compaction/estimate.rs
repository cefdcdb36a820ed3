//! Token arithmetic for compaction (FACTS §10.4): the chars/4 estimate of one message, the
//! context size of a message list (the last trustworthy usage report plus estimates of what came
//! after it) and the threshold test. Pure functions over the shared message vocabulary.
//!
//! Character counts are JavaScript string lengths (UTF-16 code units), as in pi, so the numbers
//! match the reference for any text, not only ASCII.

use crate::js::js_len;
use crate::messages::{AgentMessage, ContentBlock, StopReason, Usage, UserContent};
use serde_json::Value;

/// pi's `estimateTokens`: ceil(chars / 4) over what the message would put into the context.
/// User: text only (images are free); assistant: text, thinking, tool name and JSON arguments;
/// tool result and custom: text plus a flat weight per image; bash run: command and output;
/// summaries: the summary text.
pub fn estimate_tokens(message: &AgentMessage) -> u64 {
    let chars = match message {
        AgentMessage::User(user) => match &user.content {
            UserContent::Text(text) => js_len(text),
            UserContent::Blocks(blocks) => blocks
                .iter()
                .map(|block| match block {
                    ContentBlock::Text(t) => js_len(&t.text),
                    _ => 0,
                })
                .sum(),
        },
        AgentMessage::Assistant(assistant) => assistant
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::Text(t) => js_len(&t.text),
                ContentBlock::Thinking(t) => js_len(&t.thinking),
                ContentBlock::ToolCall(call) => {
                    js_len(&call.name) + js_len(&call.arguments.to_string())
                }
                ContentBlock::Image(_) => 0,
            })
            .sum(),
        AgentMessage::ToolResult(result) => crate::messages::estimated_chars(&result.content),
        AgentMessage::Custom(custom) => match &custom.content {
            UserContent::Text(text) => js_len(text),
            UserContent::Blocks(blocks) => crate::messages::estimated_chars(blocks),
        },
        AgentMessage::BashExecution(bash) => js_len(&bash.command) + js_len(&bash.output),
        AgentMessage::CompactionSummary(summary) => js_len(&summary.summary),
        AgentMessage::BranchSummary(summary) => js_len(&summary.summary),
        // The prompt text, its sections and the declared tools as JSON (pi 1.6.0).
        AgentMessage::System(system) => {
            let sections: u64 = system
                .sections
                .iter()
                .flatten()
                .filter_map(|(_, text)| text.as_str())
                .map(js_len)
                .sum();
            let tools = system
                .tools_added
                .as_ref()
                .map_or(0, |tools| js_len(&Value::from(tools.clone()).to_string()));
            js_len(&system.content.text()) + sections + tools
        }
    };
    chars.div_ceil(4)
}

/// pi's `calculateContextTokens`: the reported total, or the sum of the four counters when the
/// provider left the total at 0.
pub fn usage_context_tokens(usage: &Usage) -> u64 {
    if usage.total_tokens > 0 {
        usage.total_tokens
    } else {
        usage.input + usage.output + usage.cache_read + usage.cache_write
    }
}

/// The usage of an assistant reply that completed (aborted and failed replies report nothing
/// reliable).
pub fn reliable_usage(message: &AgentMessage) -> Option<&Usage> {
    match message {
        AgentMessage::Assistant(a)
            if a.stop_reason != StopReason::Aborted && a.stop_reason != StopReason::Error =>
        {
            Some(&a.usage)
        }
        _ => None,
    }
}

/// How big a message list is as context, and where the figure comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContextEstimate {
    /// `usage_tokens + trailing_tokens`.
    pub tokens: u64,
    /// Context size the last completed reply reported (0 without one).
    pub usage_tokens: u64,
    /// Estimates of the messages after that reply (of all messages without one).
    pub trailing_tokens: u64,
    /// Index of that reply in the list.
    pub last_usage_index: Option<usize>,
}

/// pi's `estimateContextTokens`.
pub fn estimate_context_tokens(messages: &[AgentMessage]) -> ContextEstimate {
    let last = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| reliable_usage(m).map(|usage| (i, usage)));
    match last {
        None => {
            let estimated = messages.iter().map(estimate_tokens).sum();
            ContextEstimate {
                tokens: estimated,
                usage_tokens: 0,
                trailing_tokens: estimated,
                last_usage_index: None,
            }
        }
        Some((index, usage)) => {
            let usage_tokens = usage_context_tokens(usage);
            let trailing_tokens = messages[index + 1..].iter().map(estimate_tokens).sum();
            ContextEstimate {
                tokens: usage_tokens + trailing_tokens,
                usage_tokens,
                trailing_tokens,
                last_usage_index: Some(index),
            }
        }
    }
}

/// The threshold rule: more context than the window minus the room kept for the reply. Signed,
/// as in pi: a window smaller than the reserve (or 0, unknown) always says yes.
pub fn should_compact(context_tokens: u64, context_window: u64, reserve_tokens: u64) -> bool {
    i128::from(context_tokens) > i128::from(context_window) - i128::from(reserve_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::compaction::test_support::*;
    use crate::messages::{BashExecutionMessage, CompactionSummaryMessage, ImageContent};
    use serde_json::json;

    #[test]
    fn user_counts_text_only() {
        let mut message = user("a".repeat(9).as_str());
        if let AgentMessage::User(u) = &mut message
            && let UserContent::Blocks(blocks) = &mut u.content
        {
            blocks.push(ContentBlock::Image(ImageContent {
                data: "x".repeat(1000),
                mime_type: "image/png".into(),
            }));
        }
        assert_eq!(estimate_tokens(&message), 3);
        assert_eq!(estimate_tokens(&user_string("abcd")), 1);
        assert_eq!(estimate_tokens(&user("")), 0);
    }

    #[test]
    fn assistant_counts_text_thinking_and_calls() {
        let message = assistant_msg(vec![
            text("hello"),
            thinking("hmm"),
            tool_call("c1", "read", json!({"path": "a.rs"})),
        ]);
        // 5 + 3 + 4 + len(`{"path":"a.rs"}`) = 12 + 15 = 27 → 7
        assert_eq!(estimate_tokens(&message), 7);
    }

    #[test]
    fn tool_result_images_weigh_4800_chars() {
        let mut message = tool_result("c1", "read", "abcd");
        if let AgentMessage::ToolResult(r) = &mut message {
            r.content.push(ContentBlock::Image(ImageContent {
                data: String::new(),
                mime_type: "image/png".into(),
            }));
        }
        assert_eq!(estimate_tokens(&message), 1201);
    }

    #[test]
    fn bash_and_summaries() {
        let bash = AgentMessage::BashExecution(BashExecutionMessage {
            command: "ls".into(),
            output: "a\nb".into(),
            exit_code: Some(0),
            cancelled: false,
            truncated: false,
            full_output_path: None,
            timestamp: 1,
            exclude_from_context: None,
        });
        assert_eq!(estimate_tokens(&bash), 2);
        let summary = AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: "x".repeat(17),
            tokens_before: 5,
            timestamp: 1,
        });
        assert_eq!(estimate_tokens(&summary), 5);
    }

    #[test]
    fn lengths_are_utf16_units() {
        // "é" is one unit, "😀" two: 3 units → 1 token; 5 units → 2 tokens.
        assert_eq!(js_len("é😀"), 3);
        assert_eq!(estimate_tokens(&user("é😀😀")), 2);
    }

    #[test]
    fn context_estimate_uses_last_reliable_usage() {
        // FACTS §10.4: usage 120 then a 16-char user message → 120 + 4 = 124.
        let mut reply = assistant_msg(vec![text("hi")]);
        set_usage(&mut reply, 100, 20, 0);
        let messages = vec![user("first"), reply, user(&"x".repeat(16))];
        let estimate = estimate_context_tokens(&messages);
        assert_eq!(
            estimate,
            ContextEstimate {
                tokens: 124,
                usage_tokens: 120,
                trailing_tokens: 4,
                last_usage_index: Some(1),
            }
        );
    }

    #[test]
    fn context_estimate_skips_failed_replies_and_sums_without_usage() {
        let mut good = assistant_msg(vec![text("ok")]);
        set_usage(&mut good, 50, 10, 0);
        let mut failed = assistant_msg(vec![text("abcdefgh")]);
        set_usage(&mut failed, 999, 999, 0);
        set_stop(&mut failed, StopReason::Error);
        let messages = vec![good, failed.clone(), user("abcd")];
        let estimate = estimate_context_tokens(&messages);
        assert_eq!(estimate.last_usage_index, Some(0));
        assert_eq!(estimate.tokens, 60 + 2 + 1);

        let no_usage = vec![user("abcd"), failed];
        let estimate = estimate_context_tokens(&no_usage);
        assert_eq!(estimate.last_usage_index, None);
        assert_eq!(estimate.tokens, 1 + 2);
    }

    #[test]
    fn total_falls_back_to_the_sum_of_counters() {
        let mut usage = Usage {
            input: 10,
            output: 5,
            cache_read: 3,
            cache_write: 2,
            ..Usage::default()
        };
        assert_eq!(usage_context_tokens(&usage), 20);
        usage.total_tokens = 7;
        assert_eq!(usage_context_tokens(&usage), 7);
    }

    #[test]
    fn threshold_is_strict_and_signed() {
        assert!(!should_compact(200_000 - 16_384, 200_000, 16_384));
        assert!(should_compact(200_000 - 16_383, 200_000, 16_384));
        assert!(should_compact(0, 0, 16_384));
        assert!(should_compact(0, 1000, 16_384));
    }
}
