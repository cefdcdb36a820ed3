//! The conversation as plain text for the summarizer (pi's `serializeConversation`, FACTS §10.5)
//! and the file bookkeeping that rides along with every summary (which paths were read, written
//! or edited by tool calls; `<read-files>` / `<modified-files>` blocks).
//!
//! Turning the history into labelled text, rather than sending it as chat turns, keeps the
//! summarizing model from carrying on the conversation. Input: messages already converted for
//! the LLM (`convert::to_llm`): user, assistant and toolResult. Output: one string, byte-equal to
//! the reference's for the same messages.

use crate::js::js_compare;
use std::collections::BTreeSet;

use serde_json::Value;

use crate::messages::{AgentMessage, ContentBlock, joined_text};

/// Longest tool output kept in the text, in JavaScript characters (UTF-16 units).
pub const TOOL_RESULT_MAX_CHARS: usize = 2000;

/// `[User]: …`, `[Assistant thinking]: …`, `[Assistant]: …`, `[Assistant tool calls]: …` and
/// `[Tool result]: …` paragraphs, separated by blank lines. Empty user and tool texts are left
/// out; other roles (not produced by `to_llm`) are ignored.
pub fn serialize_conversation(messages: &[AgentMessage]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for message in messages {
        match message {
            AgentMessage::User(user) => {
                let text = user.content.text();
                if !text.is_empty() {
                    parts.push(format!("[User]: {text}"));
                }
            }
            AgentMessage::Assistant(assistant) => {
                let mut texts = Vec::new();
                let mut thoughts = Vec::new();
                let mut calls = Vec::new();
                for block in &assistant.content {
                    match block {
                        ContentBlock::Text(t) => texts.push(t.text.as_str()),
                        ContentBlock::Thinking(t) => thoughts.push(t.thinking.as_str()),
                        ContentBlock::ToolCall(call) => calls.push(format!(
                            "{}({})",
                            call.name,
                            call_arguments(&call.arguments)
                        )),
                        ContentBlock::Image(_) => {}
                    }
                }
                if !thoughts.is_empty() {
                    parts.push(format!("[Assistant thinking]: {}", thoughts.join("\n")));
                }
                if !texts.is_empty() {
                    parts.push(format!("[Assistant]: {}", texts.join("\n")));
                }
                if !calls.is_empty() {
                    parts.push(format!("[Assistant tool calls]: {}", calls.join("; ")));
                }
            }
            AgentMessage::ToolResult(result) => {
                let text = joined_text(&result.content, "");
                if !text.is_empty() {
                    parts.push(format!(
                        "[Tool result]: {}",
                        truncate_for_summary(&text, TOOL_RESULT_MAX_CHARS)
                    ));
                }
            }
            _ => {}
        }
    }
    parts.join("\n\n")
}

/// `k=<JSON of v>` pairs joined by `, ` (JavaScript's `Object.entries` of the arguments; an
/// array lists its indexes, anything else has no entries).
fn call_arguments(arguments: &Value) -> String {
    match arguments {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{i}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    }
}

/// The first `max` UTF-16 units of `text`, then a notice of how many were left out. A cut that
/// would split a surrogate pair keeps the pair out (JavaScript would keep half of it).
pub fn truncate_for_summary(text: &str, max: usize) -> String {
    let total = text.encode_utf16().count();
    if total <= max {
        return text.to_string();
    }
    let mut units = 0;
    let mut end = 0;
    for (index, ch) in text.char_indices() {
        if units + ch.len_utf16() > max {
            break;
        }
        units += ch.len_utf16();
        end = index + ch.len_utf8();
    }
    format!(
        "{}\n\n[... {} more characters truncated]",
        &text[..end],
        total - max
    )
}

/// Paths touched by `read`, `write` and `edit` tool calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileOps {
    pub read: BTreeSet<String>,
    pub written: BTreeSet<String>,
    pub edited: BTreeSet<String>,
}

impl FileOps {
    /// Adds the paths of an assistant's tool calls (other messages add nothing).
    pub fn add_from_message(&mut self, message: &AgentMessage) {
        let AgentMessage::Assistant(assistant) = message else {
            return;
        };
        for call in assistant.tool_calls() {
            let Some(path) = call.arguments.get("path").and_then(Value::as_str) else {
                continue;
            };
            if path.is_empty() {
                continue;
            }
            let set = match call.name.as_str() {
                "read" => &mut self.read,
                "write" => &mut self.written,
                "edit" => &mut self.edited,
                _ => continue,
            };
            set.insert(path.to_string());
        }
    }

    /// Adds the lists a previous summary recorded in its `details` (`readFiles` count as read,
    /// `modifiedFiles` as edited). Non-string items are skipped.
    pub fn add_from_details(&mut self, details: &Value) {
        let strings = |key: &str| -> Vec<String> {
            details
                .get(key)
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        self.read.extend(strings("readFiles"));
        self.edited.extend(strings("modifiedFiles"));
    }

    /// (files only read, files written or edited), each sorted as JavaScript sorts strings.
    pub fn lists(&self) -> (Vec<String>, Vec<String>) {
        let modified: BTreeSet<&String> = self.written.iter().chain(&self.edited).collect();
        let mut read_only: Vec<String> = self
            .read
            .iter()
            .filter(|path| !modified.contains(path))
            .cloned()
            .collect();
        let mut modified: Vec<String> = modified.into_iter().cloned().collect();
        read_only.sort_by(|a, b| js_compare(a, b));
        modified.sort_by(|a, b| js_compare(a, b));
        (read_only, modified)
    }
}

/// The blocks appended to a summary: `\n\n<read-files>\n…\n</read-files>` and/or
/// `\n\n<modified-files>\n…\n</modified-files>`; empty when both lists are.
pub fn format_file_lists(read_files: &[String], modified_files: &[String]) -> String {
    let mut sections = Vec::new();
    if !read_files.is_empty() {
        sections.push(format!(
            "<read-files>\n{}\n</read-files>",
            read_files.join("\n")
        ));
    }
    if !modified_files.is_empty() {
        sections.push(format!(
            "<modified-files>\n{}\n</modified-files>",
            modified_files.join("\n")
        ));
    }
    if sections.is_empty() {
        return String::new();
    }
    format!("\n\n{}", sections.join("\n\n"))
}
