//! What the LLM sees of the agent's history (pi's `convertToLlm`, FACTS §7 first half): user,
//! assistant and tool-result messages pass through; a user `!` bash run becomes a user text that
//! shows the command and its output; custom messages become user messages with their content; a
//! compaction or branch summary becomes a user text wrapped in `<summary>` tags. Bash runs marked
//! `excludeFromContext` are left out. Consecutive user messages are not merged.
//!
//! Pure: messages in, messages out (each keeps its timestamp).

use serde_json::Map;

use crate::messages::{
    AgentMessage, BashExecutionMessage, ContentBlock, TextContent, UserContent, UserMessage,
};

const COMPACTION_SUMMARY_PREFIX: &str = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
const COMPACTION_SUMMARY_SUFFIX: &str = "\n</summary>";
const BRANCH_SUMMARY_PREFIX: &str =
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
const BRANCH_SUMMARY_SUFFIX: &str = "</summary>";

/// The messages to send, in order: only user, assistant and toolResult remain. System messages
/// are prompt state, sent as the request's prompt and tools (see `system_message`).
pub fn to_llm(messages: &[AgentMessage]) -> Vec<AgentMessage> {
    convert(messages, false)
}

/// `to_llm`, with `keep_system` the system messages too (for a model that takes them in place).
fn convert(messages: &[AgentMessage], keep_system: bool) -> Vec<AgentMessage> {
    messages
        .iter()
        .filter_map(|message| match message {
            AgentMessage::System(_) if keep_system => Some(message.clone()),
            AgentMessage::System(_) => None,
            AgentMessage::User(_) | AgentMessage::Assistant(_) | AgentMessage::ToolResult(_) => {
                Some(message.clone())
            }
            AgentMessage::BashExecution(bash) => {
                if bash.exclude_from_context == Some(true) {
                    return None;
                }
                Some(user_text(bash_execution_to_text(bash), bash.timestamp))
            }
            AgentMessage::Custom(custom) => {
                let content = match &custom.content {
                    UserContent::Text(text) => {
                        UserContent::Blocks(vec![ContentBlock::Text(TextContent::new(text))])
                    }
                    blocks => blocks.clone(),
                };
                Some(AgentMessage::User(UserMessage {
                    content,
                    timestamp: custom.timestamp,
                    extra: Map::new(),
                }))
            }
            AgentMessage::CompactionSummary(summary) => Some(user_text(
                format!(
                    "{COMPACTION_SUMMARY_PREFIX}{}{COMPACTION_SUMMARY_SUFFIX}",
                    summary.summary
                ),
                summary.timestamp,
            )),
            AgentMessage::BranchSummary(summary) => Some(user_text(
                format!(
                    "{BRANCH_SUMMARY_PREFIX}{}{BRANCH_SUMMARY_SUFFIX}",
                    summary.summary
                ),
                summary.timestamp,
            )),
        })
        .collect()
}

/// What a request sends of `messages`: `to_llm` (the system messages kept with `keep_system`),
/// and `without_images` when settings `images.blockImages` is on.
pub fn for_request(
    messages: &[AgentMessage],
    block_images: bool,
    keep_system: bool,
) -> Vec<AgentMessage> {
    match block_images {
        true => without_images(convert(messages, keep_system)),
        false => convert(messages, keep_system),
    }
}

/// pi's `bashExecutionToText`: the command, its output fenced (or `(no output)`), then why it
/// ended if not cleanly, then where the full output went if it was truncated.
pub fn bash_execution_to_text(bash: &BashExecutionMessage) -> String {
    let mut text = format!("Ran `{}`\n", bash.command);
    if bash.output.is_empty() {
        text.push_str("(no output)");
    } else {
        text.push_str(&format!("```\n{}\n```", bash.output));
    }
    if bash.cancelled {
        text.push_str("\n\n(command cancelled)");
    } else if let Some(code) = bash.exit_code.filter(|c| *c != 0) {
        text.push_str(&format!("\n\nCommand exited with code {code}"));
    }
    if bash.truncated
        && let Some(path) = bash.full_output_path.as_deref().filter(|p| !p.is_empty())
    {
        text.push_str(&format!("\n\n[Output truncated. Full output: {path}]"));
    }
    text
}

fn user_text(text: String, timestamp: i64) -> AgentMessage {
    AgentMessage::User(UserMessage {
        content: UserContent::Blocks(vec![ContentBlock::Text(TextContent::new(&text))]),
        timestamp,
        extra: Map::new(),
    })
}

/// Text that replaces images when settings `images.blockImages` is on.
pub const IMAGES_BLOCKED: &str = "Image reading is disabled.";

/// settings `images.blockImages`: every image becomes a note (consecutive notes collapse), so no
/// image reaches the provider.
pub fn without_images(messages: Vec<AgentMessage>) -> Vec<AgentMessage> {
    fn strip(blocks: Vec<ContentBlock>) -> Vec<ContentBlock> {
        let mut out: Vec<ContentBlock> = Vec::with_capacity(blocks.len());
        for block in blocks {
            match block {
                ContentBlock::Image(_) => {
                    let repeated = matches!(out.last(), Some(ContentBlock::Text(t)) if t.text == IMAGES_BLOCKED);
                    if !repeated {
                        out.push(ContentBlock::Text(TextContent::new(IMAGES_BLOCKED)));
                    }
                }
                other => out.push(other),
            }
        }
        out
    }
    messages
        .into_iter()
        .map(|message| match message {
            AgentMessage::User(mut user) => {
                if let UserContent::Blocks(blocks) = user.content {
                    user.content = UserContent::Blocks(strip(blocks));
                }
                AgentMessage::User(user)
            }
            AgentMessage::ToolResult(mut result) => {
                result.content = strip(result.content);
                AgentMessage::ToolResult(result)
            }
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{BranchSummaryMessage, CompactionSummaryMessage, CustomMessage};
    use serde_json::json;

    fn bash(output: &str, exit_code: Option<i32>, cancelled: bool) -> BashExecutionMessage {
        BashExecutionMessage {
            command: "ls".into(),
            output: output.into(),
            exit_code,
            cancelled,
            truncated: false,
            full_output_path: None,
            timestamp: 10,
            exclude_from_context: None,
        }
    }

    #[test]
    fn bash_runs_render_like_pi() {
        assert_eq!(
            bash_execution_to_text(&bash("a\n", Some(0), false)),
            "Ran `ls`\n```\na\n\n```"
        );
        assert_eq!(
            bash_execution_to_text(&bash("", Some(2), false)),
            "Ran `ls`\n(no output)\n\nCommand exited with code 2"
        );
        let mut b = bash("x", None, true);
        b.truncated = true;
        b.full_output_path = Some("/tmp/out.log".into());
        assert_eq!(
            bash_execution_to_text(&b),
            "Ran `ls`\n```\nx\n```\n\n(command cancelled)\n\n[Output truncated. Full output: /tmp/out.log]"
        );
    }

    #[test]
    fn converts_every_kind_and_drops_excluded_runs() {
        let mut excluded = bash("x", Some(0), false);
        excluded.exclude_from_context = Some(true);
        let messages = vec![
            AgentMessage::BashExecution(bash("", Some(0), false)),
            AgentMessage::BashExecution(excluded),
            AgentMessage::Custom(CustomMessage {
                custom_type: "note".into(),
                content: UserContent::Text("hello".into()),
                display: true,
                details: None,
                timestamp: 11,
            }),
            AgentMessage::CompactionSummary(CompactionSummaryMessage {
                summary: "S1".into(),
                tokens_before: 5,
                timestamp: 12,
            }),
            AgentMessage::BranchSummary(BranchSummaryMessage {
                summary: "S2".into(),
                from_id: "abc".into(),
                timestamp: 13,
            }),
        ];
        let out = serde_json::to_value(to_llm(&messages)).unwrap();
        assert_eq!(
            out,
            json!([
                {"role":"user","content":[{"type":"text","text":"Ran `ls`\n(no output)"}],"timestamp":10},
                {"role":"user","content":[{"type":"text","text":"hello"}],"timestamp":11},
                {"role":"user","content":[{"type":"text","text":
                    "The conversation history before this point was compacted into the following summary:\n\n<summary>\nS1\n</summary>"}],"timestamp":12},
                {"role":"user","content":[{"type":"text","text":
                    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\nS2</summary>"}],"timestamp":13}
            ])
        );
    }
}
