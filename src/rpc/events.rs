//! Session event records for stdout, in pi's shapes and key order (FACTS §2.4, seed event list).
//! `message_update` carries only the delta event (seed): no cumulative `message`, no `partial`.

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::messages::{AgentMessage, ContentBlock, ToolCall};

fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

pub fn agent_start() -> Value {
    json!({"type": "agent_start"})
}

pub fn agent_settled() -> Value {
    json!({"type": "agent_settled"})
}

pub fn turn_start() -> Value {
    json!({"type": "turn_start"})
}

pub fn message_start(message: &AgentMessage) -> Value {
    json!({"type": "message_start", "message": to_value(message)})
}

/// The kinds of streaming update, as `assistantMessageEvent.type` names them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BlockFamily {
    Text,
    Thinking,
    ToolCall,
}

impl BlockFamily {
    fn prefix(self) -> &'static str {
        match self {
            BlockFamily::Text => "text",
            BlockFamily::Thinking => "thinking",
            BlockFamily::ToolCall => "toolcall",
        }
    }
}

pub fn update_start(family: BlockFamily, index: usize) -> Value {
    message_update(json!({"type": format!("{}_start", family.prefix()), "contentIndex": index}))
}

/// The hottest record: written straight into one string (no JSON value, no map), as
/// `{"type":"message_update","assistantMessageEvent":{"type":"<family>_delta","contentIndex":N,"delta":"…"}}`.
pub fn update_delta(family: BlockFamily, index: usize, delta: &str) -> super::Record {
    let escaped = serde_json::to_string(delta).unwrap_or_else(|_| "\"\"".into());
    let mut line = String::with_capacity(escaped.len() + 96);
    line.push_str(r#"{"type":"message_update","assistantMessageEvent":{"type":""#);
    line.push_str(family.prefix());
    line.push_str(r#"_delta","contentIndex":"#);
    line.push_str(&index.to_string());
    line.push_str(r#","delta":"#);
    line.push_str(&escaped);
    line.push_str("}}");
    // One part: extensions that subscribed still see the record's type.
    super::Record::Parts(vec![super::Part::Text(line)])
}

/// `text_end`/`thinking_end` carry the block's full text; `toolcall_end` the parsed call.
pub fn update_end(index: usize, block: &ContentBlock) -> super::Record {
    let (kind, text) = match block {
        ContentBlock::Text(t) => ("text_end", &t.text),
        ContentBlock::Thinking(t) => ("thinking_end", &t.thinking),
        ContentBlock::ToolCall(_) => {
            // The whole content block, `type` included, as pi sends it.
            let event =
                json!({"type": "toolcall_end", "contentIndex": index, "toolCall": to_value(block)});
            return message_update(event).into();
        }
        ContentBlock::Image(_) => {
            return message_update(json!({"type": "image_end", "contentIndex": index})).into();
        }
    };
    // The block's whole text: written once into an exactly sized line (a JSON value plus the
    // writer's buffer would hold a long reply three more times).
    let mut line = Vec::with_capacity(text.len() + text.len() / 16 + 128);
    line.extend_from_slice(br#"{"type":"message_update","assistantMessageEvent":{"type":""#);
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(br#"","contentIndex":"#);
    line.extend_from_slice(index.to_string().as_bytes());
    line.extend_from_slice(br#","content":"#);
    if serde_json::to_writer(&mut line, text).is_err() {
        line.extend_from_slice(b"\"\"");
    }
    line.extend_from_slice(b"}}");
    let line = String::from_utf8(line).unwrap_or_default();
    super::Record::Parts(vec![super::Part::Text(line)])
}

fn message_update(event: Value) -> Value {
    json!({"type": "message_update", "assistantMessageEvent": event})
}

pub fn tool_execution_start(call: &ToolCall) -> Value {
    json!({"type": "tool_execution_start", "toolCallId": call.id, "toolName": call.name, "args": call.arguments})
}

/// `{content, details?}` as tool events carry results.
pub fn tool_result_value(content: &[ContentBlock], details: Option<&Value>) -> Value {
    let mut result = Map::new();
    result.insert("content".into(), to_value(&content));
    if let Some(details) = details {
        result.insert("details".into(), details.clone());
    }
    Value::Object(result)
}

pub fn tool_execution_update(call: &ToolCall, partial_result: Value) -> Value {
    json!({"type": "tool_execution_update", "toolCallId": call.id, "toolName": call.name,
           "args": call.arguments, "partialResult": partial_result})
}

pub fn tool_execution_end(call: &ToolCall, result: Value, is_error: bool) -> Value {
    json!({"type": "tool_execution_end", "toolCallId": call.id, "toolName": call.name,
           "result": result, "isError": is_error})
}

pub fn queue_update<'a>(
    steering: impl Iterator<Item = &'a str>,
    follow_up: impl Iterator<Item = &'a str>,
) -> Value {
    let steering: Vec<&str> = steering.collect();
    let follow_up: Vec<&str> = follow_up.collect();
    json!({"type": "queue_update", "steering": steering, "followUp": follow_up})
}

/// A notice for the client, in the shape pi uses for its startup diagnostics (an
/// `extension_ui_request` with `method:"notify"`; no answer expected). `level`: `info`,
/// `warning` or `error`.
pub fn notify(message: &str, level: &str) -> Value {
    json!({"type": "extension_ui_request", "id": crate::extensions::host::fresh_uuid(), "method": "notify",
        "message": message, "notifyType": level})
}

pub fn thinking_level_changed(level: &str) -> Value {
    json!({"type": "thinking_level_changed", "level": level})
}

pub fn session_info_changed(name: &str) -> Value {
    json!({"type": "session_info_changed", "name": name})
}

pub fn auto_retry_start(
    attempt: u64,
    max_attempts: u64,
    delay_ms: u64,
    error_message: &str,
) -> Value {
    json!({"type": "auto_retry_start", "attempt": attempt, "maxAttempts": max_attempts,
           "delayMs": delay_ms, "errorMessage": error_message})
}

pub fn auto_retry_end(success: bool, attempt: u64, final_error: Option<&str>) -> Value {
    let mut record = json!({"type": "auto_retry_end", "success": success, "attempt": attempt});
    if let Some(error) = final_error {
        record["finalError"] = json!(error);
    }
    record
}

/// One chunk of an RPC `bash` command's output, tagged with that command's id (seed).
pub fn bash_execution_update(id: Option<&Value>, delta: &str) -> Value {
    let mut record = Map::new();
    record.insert("type".into(), json!("bash_execution_update"));
    if let Some(id) = id {
        record.insert("id".into(), id.clone());
    }
    record.insert("delta".into(), json!(delta));
    Value::Object(record)
}

// ---- records sharing a serialized message -----------------------------------------------------

use super::{Part, Record, SharedJson};

fn text(s: &str) -> Part {
    Part::Text(s.to_string())
}

/// `{"type":"message_start","message":<json>}` around a shared message.
pub fn message_start_shared(message: &SharedJson) -> Record {
    Record::Parts(vec![
        text(r#"{"type":"message_start","message":"#),
        Part::Shared(message.clone()),
        text("}"),
    ])
}

pub fn message_end_shared(message: &SharedJson) -> Record {
    Record::Parts(vec![
        text(r#"{"type":"message_end","message":"#),
        Part::Shared(message.clone()),
        text("}"),
    ])
}

fn json_array(parts: &mut Vec<Part>, items: &[SharedJson]) {
    parts.push(text("["));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            parts.push(text(","));
        }
        parts.push(Part::Shared(item.clone()));
    }
    parts.push(text("]"));
}

pub fn turn_end_shared(message: &SharedJson, tool_results: &[SharedJson]) -> Record {
    let mut parts = vec![
        text(r#"{"type":"turn_end","message":"#),
        Part::Shared(message.clone()),
    ];
    parts.push(text(r#","toolResults":"#));
    json_array(&mut parts, tool_results);
    parts.push(text("}"));
    Record::Parts(parts)
}

pub fn agent_end_shared(messages: &[SharedJson], will_retry: bool) -> Record {
    let mut parts = vec![text(r#"{"type":"agent_end","messages":"#)];
    json_array(&mut parts, messages);
    parts.push(text(if will_retry {
        r#","willRetry":true}"#
    } else {
        r#","willRetry":false}"#
    }));
    Record::Parts(parts)
}

/// A warning for the client that no extension sent (project resources skipped for want of
/// trust). It takes pi's `extension_ui_request` notice shape (`method:"notify"`,
/// `notifyType:"warning"`), which pi clients already show; a notice needs no answer.
pub fn warning_notice(message: &str) -> Value {
    json!({"type": "extension_ui_request", "id": crate::extensions::host::fresh_uuid(),
           "method": "notify", "message": message, "notifyType": "warning"})
}
