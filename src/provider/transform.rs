//! Provider-independent history clean-up before a request (pi-ai `transformMessages`, FACTS §7):
//! images become placeholder text for models without vision, thinking written by another
//! model/provider/API becomes plain text (redacted thinking is dropped), foreign tool-call ids are
//! normalised by the caller's rule (results follow their calls), failed/aborted assistant turns are
//! dropped, and every tool call left without a result gets a synthetic error result.
//!
//! Pure: messages in, messages out.

use std::collections::{HashMap, HashSet};

use crate::config::Model;
use crate::messages::{
    AgentMessage, AssistantMessage, ContentBlock, StopReason, TextContent, ToolCall,
    ToolResultMessage, UserContent,
};
use crate::time::now_ms;

const USER_IMAGE_PLACEHOLDER: &str = "(image omitted: model does not support images)";
const TOOL_IMAGE_PLACEHOLDER: &str = "(tool image omitted: model does not support images)";
/// The text of a result synthesized for a tool call that never got one.
pub const NO_RESULT_TEXT: &str = "No result provided";

/// The characters tool-call ids may hold on most APIs: `[A-Za-z0-9_-]`, anything else becomes `_`;
/// at most `max` of them.
pub fn id_chars(id: &str, max: usize) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect()
}

/// `normalize_tool_call_id` rewrites ids of tool calls made by another model (provider rules).
pub fn transform_messages(
    messages: &[AgentMessage],
    model: &Model,
    normalize_tool_call_id: &dyn Fn(&str) -> String,
) -> Vec<AgentMessage> {
    let vision = model.supports_images();
    let mut id_map: HashMap<String, String> = HashMap::new();

    // First pass: images, thinking, tool-call ids.
    let mut transformed = Vec::with_capacity(messages.len());
    for message in messages {
        let message = match message {
            AgentMessage::User(user) => {
                let mut user = user.clone();
                if !vision && let UserContent::Blocks(blocks) = &user.content {
                    user.content =
                        UserContent::Blocks(replace_images(blocks, USER_IMAGE_PLACEHOLDER));
                }
                AgentMessage::User(user)
            }
            AgentMessage::ToolResult(result) => {
                let mut result = result.clone();
                if !vision {
                    result.content = replace_images(&result.content, TOOL_IMAGE_PLACEHOLDER);
                }
                if let Some(new_id) = id_map.get(&result.tool_call_id) {
                    result.tool_call_id = new_id.clone();
                }
                AgentMessage::ToolResult(result)
            }
            AgentMessage::Assistant(assistant) => AgentMessage::Assistant(transform_assistant(
                assistant,
                model,
                normalize_tool_call_id,
                &mut id_map,
            )),
            other => other.clone(),
        };
        transformed.push(message);
    }

    // Second pass: drop failed turns, synthesize missing tool results.
    let mut result = Vec::with_capacity(transformed.len());
    let mut pending_calls: Vec<ToolCall> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    // A system message between a tool call and its results waits until after them (pi 1.6.0:
    // system messages are transparent to the tool-call accounting).
    let mut held: Vec<AgentMessage> = Vec::new();
    for message in transformed {
        match message {
            AgentMessage::Assistant(assistant) => {
                flush_missing_results(&mut result, &mut pending_calls, &mut answered, &mut held);
                if matches!(
                    assistant.stop_reason,
                    StopReason::Error | StopReason::Aborted
                ) {
                    continue;
                }
                let calls: Vec<ToolCall> = assistant.tool_calls().cloned().collect();
                if !calls.is_empty() {
                    pending_calls = calls;
                    answered.clear();
                }
                result.push(AgentMessage::Assistant(assistant));
            }
            AgentMessage::ToolResult(tool_result) => {
                answered.insert(tool_result.tool_call_id.clone());
                result.push(AgentMessage::ToolResult(tool_result));
            }
            AgentMessage::User(user) => {
                flush_missing_results(&mut result, &mut pending_calls, &mut answered, &mut held);
                result.push(AgentMessage::User(user));
            }
            AgentMessage::System(system) if !pending_calls.is_empty() => {
                held.push(AgentMessage::System(system))
            }
            other => result.push(other),
        }
    }
    flush_missing_results(&mut result, &mut pending_calls, &mut answered, &mut held);
    result
}

fn transform_assistant(
    assistant: &AssistantMessage,
    model: &Model,
    normalize_tool_call_id: &dyn Fn(&str) -> String,
    id_map: &mut HashMap<String, String>,
) -> AssistantMessage {
    let same_model = assistant.provider == model.provider
        && assistant.api == model.api
        && assistant.model == model.id;
    let mut content = Vec::with_capacity(assistant.content.len());
    for block in &assistant.content {
        match block {
            ContentBlock::Thinking(thinking) => {
                // Redacted thinking is opaque and only meaningful to the model that wrote it.
                if thinking.redacted == Some(true) {
                    if same_model {
                        content.push(block.clone());
                    }
                    continue;
                }
                let signed = thinking
                    .thinking_signature
                    .as_deref()
                    .is_some_and(|s| !s.is_empty());
                if same_model && signed {
                    content.push(block.clone());
                    continue;
                }
                if thinking.thinking.trim().is_empty() {
                    continue;
                }
                if same_model {
                    content.push(block.clone());
                } else {
                    content.push(ContentBlock::Text(TextContent::new(&thinking.thinking)));
                }
            }
            ContentBlock::Text(text) => {
                if same_model {
                    content.push(block.clone());
                } else {
                    content.push(ContentBlock::Text(TextContent::new(&text.text)));
                }
            }
            ContentBlock::ToolCall(call) => {
                let mut call = call.clone();
                if !same_model {
                    call.thought_signature = None;
                    let normalized = normalize_tool_call_id(&call.id);
                    if normalized != call.id {
                        id_map.insert(call.id.clone(), normalized.clone());
                        call.id = normalized;
                    }
                }
                content.push(ContentBlock::ToolCall(call));
            }
            ContentBlock::Image(_) => content.push(block.clone()),
        }
    }
    AssistantMessage {
        content,
        ..assistant.clone()
    }
}

/// Runs of images collapse into one placeholder; a placeholder text already there absorbs the
/// images that follow it.
fn replace_images(blocks: &[ContentBlock], placeholder: &str) -> Vec<ContentBlock> {
    let mut out = Vec::with_capacity(blocks.len());
    let mut previous_was_placeholder = false;
    for block in blocks {
        if let ContentBlock::Image(_) = block {
            if !previous_was_placeholder {
                out.push(ContentBlock::Text(TextContent::new(placeholder)));
            }
            previous_was_placeholder = true;
            continue;
        }
        previous_was_placeholder = matches!(block, ContentBlock::Text(t) if t.text == placeholder);
        out.push(block.clone());
    }
    out
}

/// Results for the calls left unanswered, then the system messages held behind them.
fn flush_missing_results(
    result: &mut Vec<AgentMessage>,
    pending_calls: &mut Vec<ToolCall>,
    answered: &mut HashSet<String>,
    held: &mut Vec<AgentMessage>,
) {
    for call in pending_calls.drain(..) {
        if !answered.contains(&call.id) {
            result.push(AgentMessage::ToolResult(ToolResultMessage {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                content: vec![ContentBlock::Text(TextContent::new(NO_RESULT_TEXT))],
                details: None,
                usage: None,
                is_error: true,
                timestamp: now_ms(),
                extra: Default::default(),
            }));
        }
    }
    answered.clear();
    result.append(held);
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assistant, model, tool_result, user};
    use super::*;
    use crate::messages::{ImageContent, ThinkingContent, UserMessage};
    use serde_json::json;

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolCall(ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: json!({}),
            thought_signature: Some("ts".into()),
        })
    }

    fn thinking(text: &str, sig: Option<&str>, redacted: bool) -> ContentBlock {
        ContentBlock::Thinking(ThinkingContent {
            thinking: text.into(),
            thinking_signature: sig.map(str::to_string),
            redacted: redacted.then_some(true),
        })
    }

    fn summary(messages: &[AgentMessage]) -> Vec<String> {
        messages
            .iter()
            .map(|m| match m {
                AgentMessage::User(u) => format!("user:{}", u.content.text()),
                AgentMessage::Assistant(a) => format!("assistant:{}", a.content.len()),
                AgentMessage::ToolResult(r) => {
                    let text: Vec<String> = r
                        .content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) => Some(t.text.clone()),
                            _ => None,
                        })
                        .collect();
                    format!("result:{}:{}:{}", r.tool_call_id, r.is_error, text.join(""))
                }
                _ => "other".into(),
            })
            .collect()
    }

    #[test]
    fn drops_failed_turns_and_synthesizes_missing_results() {
        let m = model("anthropic-messages", "anthropic", "claude");
        let mut first = assistant(
            "anthropic-messages",
            "anthropic",
            "claude",
            vec![call("a"), call("b")],
        );
        first.stop_reason = StopReason::ToolUse;
        let mut failed = assistant("anthropic-messages", "anthropic", "claude", vec![call("c")]);
        failed.stop_reason = StopReason::Error;
        let mut last = assistant("anthropic-messages", "anthropic", "claude", vec![call("d")]);
        last.stop_reason = StopReason::ToolUse;
        let messages = vec![
            user("go"),
            AgentMessage::Assistant(first),
            tool_result("a", "read", "A", false),
            user("interrupt"),
            AgentMessage::Assistant(failed),
            AgentMessage::Assistant(last),
        ];
        let out = transform_messages(&messages, &m, &|id| id.to_string());
        assert_eq!(
            summary(&out),
            vec![
                "user:go",
                "assistant:2",
                "result:a:false:A",
                "result:b:true:No result provided",
                "user:interrupt",
                "assistant:1",
                "result:d:true:No result provided",
            ]
        );
    }

    #[test]
    fn foreign_thinking_becomes_text_and_ids_are_normalised() {
        let m = model("openai-completions", "openai", "gpt");
        let a = assistant(
            "anthropic-messages",
            "anthropic",
            "claude",
            vec![
                thinking("deep", Some("SIG"), false),
                thinking("secret", Some("X"), true),
                thinking("  ", None, false),
                call("call|item"),
            ],
        );
        let messages = vec![
            AgentMessage::Assistant(a),
            tool_result("call|item", "read", "ok", false),
        ];
        let out = transform_messages(&messages, &m, &|id| id.replace('|', "_"));
        let AgentMessage::Assistant(a) = &out[0] else {
            panic!()
        };
        assert_eq!(a.content.len(), 2);
        assert_eq!(a.content[0], ContentBlock::Text(TextContent::new("deep")));
        let ContentBlock::ToolCall(c) = &a.content[1] else {
            panic!()
        };
        assert_eq!(c.id, "call_item");
        assert_eq!(c.thought_signature, None);
        assert_eq!(summary(&out[1..]), vec!["result:call_item:false:ok"]);

        // The same model keeps signed thinking, redacted thinking and its own ids.
        let same = model("anthropic-messages", "anthropic", "claude");
        let out = transform_messages(&messages, &same, &|id| id.replace('|', "_"));
        let AgentMessage::Assistant(a) = &out[0] else {
            panic!()
        };
        assert_eq!(a.content.len(), 3);
        assert_eq!(summary(&out[1..]), vec!["result:call|item:false:ok"]);
    }

    #[test]
    fn images_become_placeholders_without_vision() {
        let image = || {
            ContentBlock::Image(ImageContent {
                data: "AAAA".into(),
                mime_type: "image/png".into(),
            })
        };
        let mut m = model("openai-completions", "openai", "gpt");
        let messages = vec![AgentMessage::User(UserMessage {
            content: UserContent::Blocks(vec![
                ContentBlock::Text(TextContent::new("look")),
                image(),
                image(),
            ]),
            timestamp: 1,
            extra: Default::default(),
        })];
        let out = transform_messages(&messages, &m, &|id| id.to_string());
        let AgentMessage::User(u) = &out[0] else {
            panic!()
        };
        assert_eq!(
            u.content,
            UserContent::Blocks(vec![
                ContentBlock::Text(TextContent::new("look")),
                ContentBlock::Text(TextContent::new(USER_IMAGE_PLACEHOLDER)),
            ])
        );
        m.input = vec!["text".into(), "image".into()];
        let out = transform_messages(&messages, &m, &|id| id.to_string());
        assert_eq!(out, messages);
    }

    /// A system message between a tool call and its results waits until after them, the
    /// synthetic result of an unanswered call included (pi 1.6.0).
    #[test]
    fn system_messages_wait_behind_pending_tool_results() {
        let m = model("anthropic-messages", "anthropic", "claude");
        let mut calling = assistant(
            "anthropic-messages",
            "anthropic",
            "claude",
            vec![call("a"), call("b")],
        );
        calling.stop_reason = StopReason::ToolUse;
        let system = AgentMessage::System(crate::messages::SystemMessage {
            content: UserContent::Text("note".into()),
            sections: None,
            timestamp: 1,
            tools_added: None,
            tools_removed: None,
            extra: Default::default(),
        });
        let messages = vec![
            user("go"),
            system.clone(),
            AgentMessage::Assistant(calling),
            system.clone(),
            tool_result("a", "read", "A", false),
            user("next"),
        ];
        let out = transform_messages(&messages, &m, &|id| id.to_string());
        assert_eq!(
            summary(&out),
            [
                "user:go",
                "other",
                "assistant:2",
                "result:a:false:A",
                &format!("result:b:true:{NO_RESULT_TEXT}"),
                "other",
                "user:next"
            ]
        );
    }
}
