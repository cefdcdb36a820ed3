//! The conversation vocabulary shared by the agent, the session log, the providers and the wire:
//! agent messages (user, assistant, tool result, bash execution, custom, summaries), their content
//! blocks, token usage, and the tools offered to the model (`ToolSpec`, made by `tools/`, `mcp/`
//! and extensions, sent by `provider/`). Field names and key order are pi's (`ai:dist/types.d.ts`,
//! `dist/core/messages.js`), so a message serializes the same in an RPC record and in a session
//! file, and messages written by the reference deserialize here.
//!
//! Unknown extra fields on a message are kept in `extra` so a session written by a newer pi
//! round-trips without losing data.

use crate::js::js_number;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::time::now_ms;

mod tagged;

/// Read by [`tagged`] (the `role` first, as written), written by serde's derive.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "role")]
pub enum AgentMessage {
    #[serde(rename = "user")]
    User(UserMessage),
    #[serde(rename = "assistant")]
    Assistant(AssistantMessage),
    #[serde(rename = "toolResult")]
    ToolResult(ToolResultMessage),
    #[serde(rename = "bashExecution")]
    BashExecution(BashExecutionMessage),
    #[serde(rename = "custom")]
    Custom(CustomMessage),
    #[serde(rename = "compactionSummary")]
    CompactionSummary(CompactionSummaryMessage),
    #[serde(rename = "branchSummary")]
    BranchSummary(BranchSummaryMessage),
    #[serde(rename = "system")]
    System(SystemMessage),
}

impl<'de> Deserialize<'de> for AgentMessage {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        tagged::deserialize(deserializer)
    }
}

impl tagged::Tagged for AgentMessage {
    const TAG: &'static str = "role";
    const EXPECTING: &'static str = "a message object";

    fn variant<'de, D: serde::Deserializer<'de>>(tag: &str, rest: D) -> Result<Self, D::Error> {
        Ok(match tag {
            "user" => AgentMessage::User(UserMessage::deserialize(rest)?),
            "assistant" => AgentMessage::Assistant(AssistantMessage::deserialize(rest)?),
            "toolResult" => AgentMessage::ToolResult(ToolResultMessage::deserialize(rest)?),
            "bashExecution" => {
                AgentMessage::BashExecution(BashExecutionMessage::deserialize(rest)?)
            }
            "custom" => AgentMessage::Custom(CustomMessage::deserialize(rest)?),
            "compactionSummary" => {
                AgentMessage::CompactionSummary(CompactionSummaryMessage::deserialize(rest)?)
            }
            "branchSummary" => {
                AgentMessage::BranchSummary(BranchSummaryMessage::deserialize(rest)?)
            }
            "system" => AgentMessage::System(SystemMessage::deserialize(rest)?),
            other => {
                return Err(serde::de::Error::unknown_variant(
                    other,
                    &[
                        "user",
                        "assistant",
                        "toolResult",
                        "bashExecution",
                        "custom",
                        "compactionSummary",
                        "branchSummary",
                        "system",
                    ],
                ));
            }
        })
    }
}

impl AgentMessage {
    /// The `role` the message is written with.
    pub fn role(&self) -> &'static str {
        match self {
            AgentMessage::User(_) => "user",
            AgentMessage::Assistant(_) => "assistant",
            AgentMessage::ToolResult(_) => "toolResult",
            AgentMessage::BashExecution(_) => "bashExecution",
            AgentMessage::Custom(_) => "custom",
            AgentMessage::CompactionSummary(_) => "compactionSummary",
            AgentMessage::BranchSummary(_) => "branchSummary",
            AgentMessage::System(_) => "system",
        }
    }

    pub fn as_assistant(&self) -> Option<&AssistantMessage> {
        match self {
            AgentMessage::Assistant(a) => Some(a),
            _ => None,
        }
    }
}

/// User content is an array of blocks when pi-rs or RPC creates it; files from elsewhere may hold
/// a plain string.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum UserContent {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

impl<'de> Deserialize<'de> for UserContent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        tagged::user_content(deserializer)
    }
}

impl UserContent {
    /// All text of the content, text blocks joined without separator.
    pub fn text(&self) -> String {
        match self {
            UserContent::Text(t) => t.clone(),
            UserContent::Blocks(blocks) => joined_text(blocks, ""),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    pub content: UserContent,
    pub timestamp: i64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl UserMessage {
    /// A user message as RPC builds it: one text block, then the images as given.
    pub fn new(text: &str, images: Vec<ImageContent>) -> UserMessage {
        let mut blocks = vec![ContentBlock::Text(TextContent::new(text))];
        blocks.extend(images.into_iter().map(ContentBlock::Image));
        UserMessage {
            content: UserContent::Blocks(blocks),
            timestamp: now_ms(),
            extra: Map::new(),
        }
    }
}

/// Read by [`tagged`] (the `type` first, as written), written by serde's derive.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum ContentBlock {
    #[serde(rename = "text")]
    Text(TextContent),
    #[serde(rename = "thinking")]
    Thinking(ThinkingContent),
    #[serde(rename = "toolCall")]
    ToolCall(ToolCall),
    #[serde(rename = "image")]
    Image(ImageContent),
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        tagged::deserialize(deserializer)
    }
}

impl tagged::Tagged for ContentBlock {
    const TAG: &'static str = "type";
    const EXPECTING: &'static str = "a content block object";

    fn variant<'de, D: serde::Deserializer<'de>>(tag: &str, rest: D) -> Result<Self, D::Error> {
        Ok(match tag {
            "text" => ContentBlock::Text(TextContent::deserialize(rest)?),
            "thinking" => ContentBlock::Thinking(ThinkingContent::deserialize(rest)?),
            "toolCall" => ContentBlock::ToolCall(ToolCall::deserialize(rest)?),
            "image" => ContentBlock::Image(ImageContent::deserialize(rest)?),
            other => {
                return Err(serde::de::Error::unknown_variant(
                    other,
                    &["text", "thinking", "toolCall", "image"],
                ));
            }
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextContent {
    pub text: String,
    #[serde(
        rename = "textSignature",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub text_signature: Option<String>,
}

impl TextContent {
    pub fn new(text: &str) -> TextContent {
        TextContent {
            text: text.to_string(),
            text_signature: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThinkingContent {
    pub thinking: String,
    #[serde(
        rename = "thinkingSignature",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub thinking_signature: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub redacted: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
    #[serde(
        rename = "thoughtSignature",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub thought_signature: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageContent {
    pub data: String,
    #[serde(rename = "mimeType")]
    pub mime_type: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    #[serde(rename = "stop")]
    Stop,
    #[serde(rename = "length")]
    Length,
    #[serde(rename = "toolUse")]
    ToolUse,
    #[serde(rename = "error")]
    Error,
    #[serde(rename = "aborted")]
    Aborted,
    /// A partial message still streaming (pi 0.83.0): `message_start` says so; never persisted.
    #[serde(rename = "pending")]
    Pending,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    #[serde(default, serialize_with = "js_number")]
    pub input: f64,
    #[serde(default, serialize_with = "js_number")]
    pub output: f64,
    #[serde(rename = "cacheRead", default, serialize_with = "js_number")]
    pub cache_read: f64,
    #[serde(rename = "cacheWrite", default, serialize_with = "js_number")]
    pub cache_write: f64,
    #[serde(default, serialize_with = "js_number")]
    pub total: f64,
    /// pi 1.6.0: `false` when `total` is the catalog estimate (every priced usage), `true` when
    /// it is what the provider billed (OpenRouter); absent when nothing priced it.
    #[serde(
        rename = "totalFromProvider",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub total_from_provider: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub output: u64,
    #[serde(rename = "cacheRead", default)]
    pub cache_read: u64,
    #[serde(rename = "cacheWrite", default)]
    pub cache_write: u64,
    /// Reasoning tokens, a part of `output`, where the API reports them (pi 1.6.0).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reasoning: Option<u64>,
    #[serde(rename = "totalTokens", default)]
    pub total_tokens: u64,
    #[serde(default)]
    pub cost: Cost,
    /// The part of `cacheWrite` written with one-hour retention (pi 1.6.0; Anthropic, Bedrock).
    #[serde(
        rename = "cacheWrite1h",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub cache_write_1h: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    #[serde(deserialize_with = "tagged::blocks")]
    pub content: Vec<ContentBlock>,
    pub api: String,
    pub provider: String,
    pub model: String,
    /// The effort the provider was told in the conversation (pi 1.6.0: Responses'
    /// `configuration_update`, with `compat.supportsMidConvoEffort`); replayed before this reply.
    #[serde(
        rename = "providerThinkingLevel",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub provider_thinking_level: Option<String>,
    pub usage: Usage,
    #[serde(rename = "stopReason")]
    pub stop_reason: StopReason,
    pub timestamp: i64,
    /// `diagnostics` whose first entry came before the response (a fallback's): pi 1.6.0 has
    /// them right after `timestamp`. Read back as `diagnostics`.
    #[serde(
        rename = "diagnostics",
        skip_serializing_if = "Option::is_none",
        skip_deserializing
    )]
    pub early_diagnostics: Option<Vec<Value>>,
    #[serde(
        rename = "responseId",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub response_id: Option<String>,
    #[serde(
        rename = "responseModel",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub response_model: Option<String>,
    /// Whether the model ended its turn (pi 1.6.0: ChatGPT Codex's `end_turn`).
    #[serde(rename = "endTurn", skip_serializing_if = "Option::is_none", default)]
    pub end_turn: Option<bool>,
    /// `diagnostics` whose first entry came once the response started but before its stop
    /// reason (OpenAI Responses' input transformations): where 1.6.0 inserts them. Read back as
    /// `diagnostics`.
    #[serde(
        rename = "diagnostics",
        skip_serializing_if = "Option::is_none",
        skip_deserializing
    )]
    pub mid_diagnostics: Option<Vec<Value>>,
    /// The stop reason as the provider worded it (pi 1.6.0).
    #[serde(
        rename = "rawStopReason",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub raw_stop_reason: Option<String>,
    /// What the provider reported it changed or fell back to (pi 1.6.0: `type`, `timestamp`,
    /// `error`, `details`), in arrival order: here when the first came after the stop reason,
    /// and before `errorMessage`, which 1.6.0 sets last.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub diagnostics: Option<Vec<Value>>,
    #[serde(
        rename = "errorMessage",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub error_message: Option<String>,
    /// Milliseconds from the request to the reply's end (pi 1.6.0), on finished replies only.
    #[serde(
        rename = "durationMs",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub duration_ms: Option<u64>,
    /// The thinking level the request asked for (pi 1.6.0), on finished replies only.
    #[serde(
        rename = "thinkingLevel",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub thinking_level: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AssistantMessage {
    /// The empty message a stream starts from (pi-ai: content [], zero usage, stopReason stop).
    pub fn empty(api: &str, provider: &str, model: &str) -> AssistantMessage {
        AssistantMessage {
            content: Vec::new(),
            api: api.to_string(),
            provider: provider.to_string(),
            model: model.to_string(),
            provider_thinking_level: None,
            usage: Usage::default(),
            stop_reason: StopReason::Stop,
            timestamp: now_ms(),
            early_diagnostics: None,
            mid_diagnostics: None,
            response_id: None,
            response_model: None,
            end_turn: None,
            raw_stop_reason: None,
            error_message: None,
            diagnostics: None,
            duration_ms: None,
            thinking_level: None,
            extra: Map::new(),
        }
    }

    /// Everything but the content blocks (which can be megabytes).
    pub fn clone_without_content(&self) -> AssistantMessage {
        AssistantMessage {
            content: Vec::new(),
            api: self.api.clone(),
            provider: self.provider.clone(),
            model: self.model.clone(),
            provider_thinking_level: self.provider_thinking_level.clone(),
            usage: self.usage.clone(),
            stop_reason: self.stop_reason,
            timestamp: self.timestamp,
            early_diagnostics: self.early_diagnostics.clone(),
            mid_diagnostics: self.mid_diagnostics.clone(),
            response_id: self.response_id.clone(),
            response_model: self.response_model.clone(),
            end_turn: self.end_turn,
            raw_stop_reason: self.raw_stop_reason.clone(),
            error_message: self.error_message.clone(),
            diagnostics: self.diagnostics.clone(),
            duration_ms: self.duration_ms,
            thinking_level: self.thinking_level.clone(),
            extra: self.extra.clone(),
        }
    }

    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolCall(c) => Some(c),
            _ => None,
        })
    }

    /// Text blocks joined (get_last_assistant_text, print mode).
    pub fn text(&self) -> String {
        joined_text(&self.content, "")
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResultMessage {
    #[serde(rename = "toolCallId")]
    pub tool_call_id: String,
    #[serde(rename = "toolName")]
    pub tool_name: String,
    #[serde(deserialize_with = "tagged::blocks")]
    pub content: Vec<ContentBlock>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub details: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage: Option<Usage>,
    #[serde(rename = "isError")]
    pub is_error: bool,
    pub timestamp: i64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BashExecutionMessage {
    pub command: String,
    pub output: String,
    #[serde(rename = "exitCode", skip_serializing_if = "Option::is_none", default)]
    pub exit_code: Option<i32>,
    pub cancelled: bool,
    pub truncated: bool,
    #[serde(
        rename = "fullOutputPath",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub full_output_path: Option<String>,
    pub timestamp: i64,
    #[serde(
        rename = "excludeFromContext",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub exclude_from_context: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CustomMessage {
    #[serde(rename = "customType")]
    pub custom_type: String,
    pub content: UserContent,
    pub display: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub details: Option<Value>,
    pub timestamp: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompactionSummaryMessage {
    pub summary: String,
    #[serde(rename = "tokensBefore")]
    pub tokens_before: u64,
    pub timestamp: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BranchSummaryMessage {
    pub summary: String,
    #[serde(rename = "fromId")]
    pub from_id: String,
    pub timestamp: i64,
}

/// Prompt state in the transcript (pi 1.6.0): `content` (a whole prompt, empty when the sections
/// carry it), the named `sections` it sets (a `null` removes one; later messages patch earlier
/// ones by name), and the tool declarations it adds and removes. Providers get the replayed
/// prompt and tools, or for a model that takes them the later messages in place (see
/// `agent::system_message`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SystemMessage {
    pub content: UserContent,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sections: Option<Map<String, Value>>,
    pub timestamp: i64,
    #[serde(
        rename = "toolsAdded",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub tools_added: Option<Vec<Value>>,
    #[serde(
        rename = "toolsRemoved",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub tools_removed: Option<Vec<Value>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SystemMessage {
    /// The tools this message declares, as the request carries them.
    pub fn added_tools(&self) -> Vec<ToolSpec> {
        self.tools_added
            .iter()
            .flatten()
            .map(ToolSpec::from_declaration)
            .collect()
    }

    /// The content's text (blocks joined by LF, as pi's `contentText`).
    fn content_text(&self) -> String {
        match &self.content {
            UserContent::Text(text) => text.clone(),
            UserContent::Blocks(blocks) => joined_text(blocks, "\n"),
        }
    }

    /// The whole prompt this message states: its content, then its sections in order, the
    /// non-empty parts joined by blank lines (pi 1.6.0's `getSystemMessageText`).
    pub fn prompt_text(&self) -> String {
        let mut parts = vec![self.content_text()];
        let sections = self.sections.iter().flatten();
        parts.extend(sections.filter_map(|(_, v)| v.as_str().map(str::to_string)));
        parts.retain(|part| !part.is_empty());
        parts.join("\n\n")
    }

    /// This message as a later, mid-conversation instruction: its content, then each section it
    /// changes framed by name (pi 1.6.0's `renderSystemMessageUpdate`); empty when it only
    /// changes tools.
    pub fn update_text(&self) -> String {
        let mut parts = Vec::new();
        let text = self.content_text();
        if !text.is_empty() {
            parts.push(text);
        }
        for (name, value) in self.sections.iter().flatten() {
            parts.push(match value.as_str() {
                None => format!("Removed system prompt section \"{name}\"."),
                Some(text) => format!("Updated system prompt section \"{name}\":\n\n{text}"),
            });
        }
        parts.join("\n\n")
    }
}

/// Characters an image is taken to weigh in pi's token estimates (1200 tokens at 4 a token).
pub const IMAGE_ESTIMATE_CHARS: u64 = 4800;

/// The characters pi's token estimates count in `blocks`: text in JavaScript lengths, an image
/// as `IMAGE_ESTIMATE_CHARS`, nothing else.
pub fn estimated_chars(blocks: &[ContentBlock]) -> u64 {
    blocks
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => crate::js::js_len(&t.text),
            ContentBlock::Image(_) => IMAGE_ESTIMATE_CHARS,
            _ => 0,
        })
        .sum()
}

/// The text blocks of `content` joined by `separator`; images and other blocks are left out.
pub fn joined_text(content: &[ContentBlock], separator: &str) -> String {
    let texts: Vec<&str> = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    texts.join(separator)
}

/// Whether `content` holds an image.
pub fn has_images(content: &[ContentBlock]) -> bool {
    content.iter().any(|b| matches!(b, ContentBlock::Image(_)))
}

/// A tool as offered to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema, `{"type":"object","properties":…,"required":[…]}`.
    pub parameters: Value,
}

impl ToolSpec {
    /// The tool a system message's `toolsAdded` entry declares (name, description, parameters).
    pub fn from_declaration(tool: &Value) -> ToolSpec {
        let text = |key: &str| tool[key].as_str().unwrap_or_default().to_string();
        ToolSpec {
            name: text("name"),
            description: text("description"),
            parameters: tool["parameters"].clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The leading prompt and a later update render as pi 1.6.0's `getSystemMessageText` and
    /// `renderSystemMessageUpdate` do.
    #[test]
    fn system_messages_render_as_a_prompt_and_as_an_update() {
        let mut sections = Map::new();
        sections.insert("preamble".into(), json!("Hello."));
        sections.insert("docs".into(), Value::Null);
        sections.insert("cwd".into(), json!("<cwd>\n/w\n</cwd>"));
        let message = SystemMessage {
            content: UserContent::Text("Base".into()),
            sections: Some(sections),
            timestamp: 0,
            tools_added: None,
            tools_removed: None,
            extra: Map::new(),
        };
        assert_eq!(message.prompt_text(), "Base\n\nHello.\n\n<cwd>\n/w\n</cwd>");
        assert_eq!(
            message.update_text(),
            "Base\n\nUpdated system prompt section \"preamble\":\n\nHello.\n\n\
             Removed system prompt section \"docs\".\n\n\
             Updated system prompt section \"cwd\":\n\n<cwd>\n/w\n</cwd>"
        );
        let tools_only = SystemMessage {
            content: UserContent::Text(String::new()),
            sections: None,
            ..message
        };
        assert_eq!(tools_only.update_text(), "");
        assert_eq!(tools_only.prompt_text(), "");
    }

    #[test]
    fn user_message_serializes_like_pi() {
        let mut m = UserMessage::new("hi", vec![]);
        m.timestamp = 5;
        let v = serde_json::to_string(&AgentMessage::User(m)).unwrap();
        assert_eq!(
            v,
            r#"{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":5}"#
        );
    }

    #[test]
    fn assistant_round_trips_with_unknown_fields() {
        let src = json!({"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a"}}],
            "api":"anthropic-messages","provider":"anthropic","model":"m",
            "usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},
            "stopReason":"toolUse","timestamp":7,"futureField":true});
        let m: AgentMessage = serde_json::from_value(src.clone()).unwrap();
        assert_eq!(serde_json::to_value(&m).unwrap(), src);
    }

    #[test]
    fn string_user_content_is_accepted() {
        let m: AgentMessage =
            serde_json::from_str(r#"{"role":"user","content":"hello","timestamp":1}"#).unwrap();
        match m {
            AgentMessage::User(u) => assert_eq!(u.content.text(), "hello"),
            other => panic!("{other:?}"),
        }
    }
}
