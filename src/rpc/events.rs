//! Every session event pi-rs writes, as one typed `Event`, and the only code that turns one into
//! a stdout record. The agent and the extension host build `Event`s; `Event::to_record` writes
//! them in pi's shapes and key order (FACTS §2.4, seed event list) for the chosen
//! [`Profile`](super::Profile):
//!
//! - `Default` (the newest pi, 1.6.0): `message_update` carries `usage` and only the delta event;
//!   `toolcall_start` names the call; `tool_execution_end` has `durationMs`; `agent_settled` has
//!   `aborted`.
//! - `Legacy` (pi ≤ 0.83, checked against 0.73.1's output): `message_update` also carries the
//!   cumulative `message` and `assistantMessageEvent.partial` (one serialized snapshot, written
//!   twice); events and fields 0.73.1 never sent are left out (`to_record` answers `None`).
//!
//! Long messages are serialized once (`SharedJson`) and shared by every record carrying them.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{Part, Profile, Record, SharedJson, json_string};
use crate::messages::{ContentBlock, ToolCall};

fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
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

/// `message_update.assistantMessageEvent`, without the legacy `partial`.
#[derive(Clone, Debug, PartialEq)]
pub enum AssistantEvent {
    /// `<family>_start`; a tool call's start names it (`id`, `toolName`: pi 0.84.3).
    Start {
        family: BlockFamily,
        index: usize,
        tool: Option<(String, String)>,
    },
    Delta {
        family: BlockFamily,
        index: usize,
        delta: String,
    },
    /// `text_end`/`thinking_end` with the block's whole text (a JSON string, serialized once).
    /// `contentSignature` and `redacted` are the wire event's own, which pi 1.6.0 passes on only
    /// for the `pi-messages` API (`None`: left out).
    TextEnd {
        family: BlockFamily,
        index: usize,
        content: SharedJson,
        content_signature: Option<String>,
        redacted: Option<bool>,
    },
    /// `toolcall_end` with the whole content block, `type` included, as pi sends it.
    ToolCallEnd {
        index: usize,
        tool_call: Value,
    },
    ImageEnd {
        index: usize,
    },
}

impl AssistantEvent {
    /// The end event of `block` at `index`.
    pub fn end(index: usize, block: &ContentBlock) -> AssistantEvent {
        match block {
            ContentBlock::Text(t) => AssistantEvent::TextEnd {
                family: BlockFamily::Text,
                index,
                content: json_string(&t.text),
                content_signature: None,
                redacted: None,
            },
            ContentBlock::Thinking(t) => AssistantEvent::TextEnd {
                family: BlockFamily::Thinking,
                index,
                content: json_string(&t.thinking),
                content_signature: None,
                redacted: None,
            },
            ContentBlock::ToolCall(_) => AssistantEvent::ToolCallEnd {
                index,
                tool_call: to_value(block),
            },
            ContentBlock::Image(_) => AssistantEvent::ImageEnd { index },
        }
    }

    /// The event's fields after `{"type":…,"contentIndex":N`, appended to `line` (no closing
    /// brace); a block's whole text goes to `parts` as its shared literal, with what `line` held
    /// before it. `legacy` leaves out what 0.73.1 never sent.
    fn write_fields(&self, parts: &mut Vec<Part>, line: &mut String, legacy: bool) {
        let (kind, index) = match self {
            AssistantEvent::Start { family, index, .. } => ((family.prefix(), "_start"), *index),
            AssistantEvent::Delta { family, index, .. } => ((family.prefix(), "_delta"), *index),
            AssistantEvent::TextEnd { family, index, .. } => ((family.prefix(), "_end"), *index),
            AssistantEvent::ToolCallEnd { index, .. } => (("toolcall", "_end"), *index),
            AssistantEvent::ImageEnd { index } => (("image", "_end"), *index),
        };
        line.push_str(r#"{"type":""#);
        line.push_str(kind.0);
        line.push_str(kind.1);
        line.push_str(r#"","contentIndex":"#);
        line.push_str(&index.to_string());
        match self {
            AssistantEvent::Start {
                tool: Some((id, name)),
                ..
            } if !legacy => {
                line.push_str(r#","id":"#);
                line.push_str(&Value::from(id.as_str()).to_string());
                line.push_str(r#","toolName":"#);
                line.push_str(&Value::from(name.as_str()).to_string());
            }
            AssistantEvent::Delta { delta, .. } => {
                line.push_str(r#","delta":"#);
                line.push_str(&serde_json::to_string(delta).unwrap_or_else(|_| "\"\"".into()));
            }
            AssistantEvent::TextEnd {
                content,
                content_signature,
                redacted,
                ..
            } => {
                line.push_str(r#","content":"#);
                parts.push(Part::Text(std::mem::take(line)));
                parts.push(Part::Shared(content.clone()));
                if let Some(signature) = content_signature.as_deref().filter(|_| !legacy) {
                    line.push_str(r#","contentSignature":"#);
                    line.push_str(&Value::from(signature).to_string());
                }
                if let Some(redacted) = redacted.filter(|_| !legacy) {
                    line.push_str(r#","redacted":"#);
                    line.push_str(if redacted { "true" } else { "false" });
                }
            }
            AssistantEvent::ToolCallEnd { tool_call, .. } => {
                line.push_str(r#","toolCall":"#);
                line.push_str(&tool_call.to_string());
            }
            _ => {}
        }
    }
}

/// One `message_update`.
#[derive(Clone, Debug, PartialEq)]
pub struct MessageUpdate {
    pub event: AssistantEvent,
    /// The reply's latest cumulative usage (pi 0.84.2), serialized once per change and shared
    /// by the updates that follow.
    pub usage: SharedJson,
    /// Legacy profile only: the whole message so far, serialized once for this record and
    /// written as both `assistantMessageEvent.partial` and `message`.
    pub snapshot: Option<SharedJson>,
}

/// Lifecycle notices extensions get (never written to stdout).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lifecycle {
    SessionStart,
}

/// Every session event pi-rs emits.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    AgentStart,
    AgentEnd {
        messages: Vec<SharedJson>,
        will_retry: bool,
    },
    /// Nothing more will happen by itself (pi 0.84; `aborted` since 1.1.0).
    AgentSettled {
        aborted: bool,
    },
    TurnStart,
    TurnEnd {
        message: SharedJson,
        tool_results: Vec<SharedJson>,
    },
    MessageStart {
        message: SharedJson,
    },
    MessageUpdate(Box<MessageUpdate>),
    MessageEnd {
        message: SharedJson,
    },
    /// `parent`: the `codemode` call whose script made this call (`parentToolCallId`).
    ToolExecutionStart {
        call: ToolCall,
        parent: Option<String>,
    },
    ToolExecutionUpdate {
        call: ToolCall,
        partial_result: Value,
        parent: Option<String>,
    },
    ToolExecutionEnd {
        call: ToolCall,
        parent: Option<String>,
        result: Value,
        is_error: bool,
        /// How long the tool ran (pi 1.1.0); `None` when it did not run.
        duration_ms: Option<u64>,
    },
    QueueUpdate {
        steering: Vec<String>,
        follow_up: Vec<String>,
    },
    ThinkingLevelChanged {
        level: String,
    },
    /// An extension appended a custom session entry (pi 1.x; not in 0.73.1).
    EntryAppended {
        entry: Value,
    },
    SessionInfoChanged {
        name: String,
    },
    AutoRetryStart {
        attempt: u64,
        max_attempts: u64,
        delay_ms: u64,
        error_message: String,
    },
    AutoRetryEnd {
        success: bool,
        attempt: u64,
        final_error: Option<String>,
    },
    CompactionStart {
        reason: &'static str,
    },
    CompactionEnd {
        reason: &'static str,
        result: Option<Value>,
        aborted: bool,
        will_retry: bool,
        error_message: Option<String>,
    },
    SummarizationRetryScheduled {
        attempt: u64,
        max_attempts: u64,
        delay_ms: u64,
        error_message: String,
    },
    /// `source`: "compaction" (with its `reason`) or "branchSummary".
    SummarizationRetryAttemptStart {
        source: &'static str,
        reason: Option<&'static str>,
    },
    SummarizationRetryFinished,
    /// One chunk of an RPC `bash` command's output, tagged with that command's id (seed).
    BashExecutionUpdate {
        id: Option<Value>,
        delta: String,
    },
    ExtensionError {
        extension_path: String,
        event: String,
        error: String,
    },
    /// A dialog or notice for the client: `fields` in pi's order, without `type`, `id`, `method`.
    ExtensionUiRequest {
        id: String,
        method: String,
        fields: Map<String, Value>,
    },
    /// Only for extensions (`session_start`/`session_shutdown`).
    Lifecycle(Lifecycle),
}

impl Event {
    /// The record's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::AgentStart => "agent_start",
            Event::AgentEnd { .. } => "agent_end",
            Event::AgentSettled { .. } => "agent_settled",
            Event::TurnStart => "turn_start",
            Event::TurnEnd { .. } => "turn_end",
            Event::MessageStart { .. } => "message_start",
            Event::MessageUpdate(_) => "message_update",
            Event::MessageEnd { .. } => "message_end",
            Event::ToolExecutionStart { .. } => "tool_execution_start",
            Event::ToolExecutionUpdate { .. } => "tool_execution_update",
            Event::ToolExecutionEnd { .. } => "tool_execution_end",
            Event::QueueUpdate { .. } => "queue_update",
            Event::ThinkingLevelChanged { .. } => "thinking_level_changed",
            Event::EntryAppended { .. } => "entry_appended",
            Event::SessionInfoChanged { .. } => "session_info_changed",
            Event::AutoRetryStart { .. } => "auto_retry_start",
            Event::AutoRetryEnd { .. } => "auto_retry_end",
            Event::CompactionStart { .. } => "compaction_start",
            Event::CompactionEnd { .. } => "compaction_end",
            Event::SummarizationRetryScheduled { .. } => "summarization_retry_scheduled",
            Event::SummarizationRetryAttemptStart { .. } => "summarization_retry_attempt_start",
            Event::SummarizationRetryFinished => "summarization_retry_finished",
            Event::BashExecutionUpdate { .. } => "bash_execution_update",
            Event::ExtensionError { .. } => "extension_error",
            Event::ExtensionUiRequest { .. } => "extension_ui_request",
            Event::Lifecycle(Lifecycle::SessionStart) => "session_start",
        }
    }

    /// A notice for the client, in the shape pi uses for its startup diagnostics (an
    /// `extension_ui_request` with `method:"notify"`; no answer expected). `level`: `info`,
    /// `warning` or `error`.
    pub fn notify(message: &str, level: &str) -> Event {
        let mut fields = Map::new();
        fields.insert("message".into(), json!(message));
        fields.insert("notifyType".into(), json!(level));
        Event::ExtensionUiRequest {
            id: crate::ids::uuid_v4(),
            method: "notify".into(),
            fields,
        }
    }

    /// Whether extensions that subscribed get this event: session events do; the client's
    /// dialogs and extension failures do not.
    pub fn is_session_event(&self) -> bool {
        !matches!(
            self,
            Event::ExtensionError { .. } | Event::ExtensionUiRequest { .. }
        )
    }

    /// Whether stdout gets it (lifecycle notices are for extensions only).
    pub fn is_for_stdout(&self) -> bool {
        !matches!(self, Event::Lifecycle(_))
    }

    /// The record in `profile`'s shape; `None` when that profile never sends this event
    /// (`agent_settled` in legacy becomes the unwritten `Record::Settled` marker).
    pub fn to_record(&self, profile: Profile) -> Option<Record> {
        let legacy = profile == Profile::Legacy;
        let record = match self {
            Event::AgentSettled { .. } if legacy => Record::Settled,
            Event::BashExecutionUpdate { .. }
            | Event::EntryAppended { .. }
            | Event::SummarizationRetryScheduled { .. }
            | Event::SummarizationRetryAttemptStart { .. }
            | Event::SummarizationRetryFinished
                if legacy =>
            {
                return None;
            }
            // pi ≤ 0.83 had no system messages in the conversation.
            Event::MessageStart { message } | Event::MessageEnd { message }
                if legacy && message.is_system_message() =>
            {
                return None;
            }
            Event::AgentStart | Event::TurnStart | Event::SummarizationRetryFinished => {
                json!({ "type": self.kind() }).into()
            }
            Event::AgentSettled { aborted } => {
                json!({"type": "agent_settled", "aborted": aborted}).into()
            }
            Event::AgentEnd {
                messages,
                will_retry,
            } => {
                let mut parts = vec![text(r#"{"type":"agent_end","messages":"#)];
                if legacy {
                    let conversation: Vec<SharedJson> = messages
                        .iter()
                        .filter(|m| !m.is_system_message())
                        .cloned()
                        .collect();
                    json_array(&mut parts, &conversation);
                } else {
                    json_array(&mut parts, messages);
                }
                parts.push(text(match (legacy, will_retry) {
                    (true, _) => "}",
                    (false, true) => r#","willRetry":true}"#,
                    (false, false) => r#","willRetry":false}"#,
                }));
                Record::Parts(parts)
            }
            Event::TurnEnd {
                message,
                tool_results,
            } => {
                let mut parts = vec![
                    text(r#"{"type":"turn_end","message":"#),
                    Part::Shared(message.clone()),
                    text(r#","toolResults":"#),
                ];
                json_array(&mut parts, tool_results);
                parts.push(text("}"));
                Record::Parts(parts)
            }
            Event::MessageStart { message } | Event::MessageEnd { message } => Record::Parts(vec![
                Part::Text(format!(r#"{{"type":"{}","message":"#, self.kind())),
                Part::Shared(message.clone()),
                text("}"),
            ]),
            Event::MessageUpdate(update) => message_update(update, legacy),
            Event::ToolExecutionStart { call, parent } => {
                let mut record = json!({"type": "tool_execution_start",
                    "toolCallId": call.id, "toolName": call.name, "args": call.arguments});
                if let Some(parent) = parent {
                    record["parentToolCallId"] = json!(parent);
                }
                record.into()
            }
            Event::ToolExecutionUpdate {
                call,
                partial_result,
                parent,
            } => {
                let mut record = json!({"type": "tool_execution_update", "toolCallId": call.id,
                    "toolName": call.name, "args": call.arguments, "partialResult": partial_result});
                if let Some(parent) = parent {
                    record["parentToolCallId"] = json!(parent);
                }
                record.into()
            }
            Event::ToolExecutionEnd {
                call,
                parent,
                result,
                is_error,
                duration_ms,
            } => {
                let mut record = json!({"type": "tool_execution_end", "toolCallId": call.id,
                    "toolName": call.name, "result": result, "isError": is_error});
                if let Some(ms) = duration_ms.filter(|_| !legacy) {
                    record["durationMs"] = json!(ms);
                }
                if let Some(parent) = parent {
                    record["parentToolCallId"] = json!(parent);
                }
                record.into()
            }
            Event::QueueUpdate {
                steering,
                follow_up,
            } => {
                json!({"type": "queue_update", "steering": steering, "followUp": follow_up}).into()
            }
            Event::ThinkingLevelChanged { level } => {
                json!({"type": "thinking_level_changed", "level": level}).into()
            }
            Event::EntryAppended { entry } => {
                json!({"type": "entry_appended", "entry": entry}).into()
            }
            Event::SessionInfoChanged { name } => {
                json!({"type": "session_info_changed", "name": name}).into()
            }
            Event::AutoRetryStart {
                attempt,
                max_attempts,
                delay_ms,
                error_message,
            } => json!({"type": "auto_retry_start", "attempt": attempt,
                "maxAttempts": max_attempts, "delayMs": delay_ms, "errorMessage": error_message})
            .into(),
            Event::AutoRetryEnd {
                success,
                attempt,
                final_error,
            } => {
                let mut record =
                    json!({"type": "auto_retry_end", "success": success, "attempt": attempt});
                if let Some(error) = final_error {
                    record["finalError"] = json!(error);
                }
                record.into()
            }
            Event::CompactionStart { reason } => {
                json!({"type": "compaction_start", "reason": reason}).into()
            }
            Event::CompactionEnd {
                reason,
                result,
                aborted,
                will_retry,
                error_message,
            } => {
                // A missing result is omitted, never null (FACTS §2.4).
                let mut out = Map::new();
                out.insert("type".into(), json!("compaction_end"));
                out.insert("reason".into(), json!(reason));
                if let Some(result) = result {
                    out.insert("result".into(), compaction_result(result, legacy));
                }
                out.insert("aborted".into(), json!(aborted));
                out.insert("willRetry".into(), json!(will_retry));
                if let Some(message) = error_message {
                    out.insert("errorMessage".into(), json!(message));
                }
                Value::Object(out).into()
            }
            Event::SummarizationRetryScheduled {
                attempt,
                max_attempts,
                delay_ms,
                error_message,
            } => json!({"type": "summarization_retry_scheduled", "attempt": attempt,
                "maxAttempts": max_attempts, "delayMs": delay_ms, "errorMessage": error_message})
            .into(),
            Event::SummarizationRetryAttemptStart { source, reason } => {
                let mut record =
                    json!({"type": "summarization_retry_attempt_start", "source": source});
                if let Some(reason) = reason {
                    record["reason"] = json!(reason);
                }
                record.into()
            }
            Event::BashExecutionUpdate { id, delta } => {
                let mut record = Map::new();
                record.insert("type".into(), json!("bash_execution_update"));
                if let Some(id) = id {
                    record.insert("id".into(), id.clone());
                }
                record.insert("delta".into(), json!(delta));
                Value::Object(record).into()
            }
            Event::ExtensionError {
                extension_path,
                event,
                error,
            } => json!({"type": "extension_error", "extensionPath": extension_path,
                "event": event, "error": error})
            .into(),
            Event::ExtensionUiRequest { id, method, fields } => {
                let mut record = Map::new();
                record.insert("type".into(), json!("extension_ui_request"));
                record.insert("id".into(), json!(id));
                record.insert("method".into(), json!(method));
                record.extend(fields.clone());
                Value::Object(record).into()
            }
            Event::Lifecycle(lifecycle) => {
                let reason = match lifecycle {
                    Lifecycle::SessionStart => "startup",
                };
                json!({"type": self.kind(), "reason": reason}).into()
            }
        };
        Some(record)
    }

    /// The record as extensions get it in their `event` message: always the default profile
    /// (the extension protocol is pi-rs's own, not a pi client's).
    pub fn to_extension_value(&self) -> Option<Value> {
        self.to_record(Profile::Default)?.to_value()
    }
}

/// `compaction_end.result` / the `compact` response data: 0.73.1 had neither
/// `estimatedTokensAfter` nor `usage`.
pub fn compaction_result(result: &Value, legacy: bool) -> Value {
    let mut result = result.clone();
    if legacy && let Some(object) = result.as_object_mut() {
        object.remove("estimatedTokensAfter");
        object.remove("usage");
    }
    result
}

/// Default: `{"type":"message_update","usage":{…},"assistantMessageEvent":{…}}`, written
/// straight into one string (the hottest record). Legacy:
/// `{"type":"message_update","assistantMessageEvent":{…,"partial":<snapshot>},"message":<snapshot>}`.
fn message_update(update: &MessageUpdate, legacy: bool) -> Record {
    let mut parts = Vec::new();
    // Sized for the delta (escapes included, mostly), so a queued record holds no slack.
    let delta = match &update.event {
        AssistantEvent::Delta { delta, .. } => delta.len() + delta.len() / 8,
        _ => 0,
    };
    let mut line = String::with_capacity(160 + update.usage.byte_len() + delta);
    line.push_str(r#"{"type":"message_update","#);
    if !legacy {
        line.push_str(r#""usage":"#);
        line.extend(update.usage.pieces());
        line.push(',');
    }
    line.push_str(r#""assistantMessageEvent":"#);
    update.event.write_fields(&mut parts, &mut line, legacy);
    match (&update.snapshot, legacy) {
        (Some(snapshot), true) => {
            line.push_str(r#","partial":"#);
            parts.extend([
                Part::Text(line),
                Part::Shared(snapshot.clone()),
                text(r#"},"message":"#),
                Part::Shared(snapshot.clone()),
                text("}"),
            ]);
        }
        _ => {
            line.push_str("}}");
            parts.push(Part::Text(line));
        }
    }
    Record::Parts(parts)
}

fn text(s: &str) -> Part {
    Part::Text(s.to_string())
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

/// `{content, details?}` as tool events carry results.
pub fn tool_result_value(content: &[ContentBlock], details: Option<&Value>) -> Value {
    let mut result = Map::new();
    result.insert("content".into(), to_value(&content));
    if let Some(details) = details {
        result.insert("details".into(), details.clone());
    }
    Value::Object(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Usage;

    fn line(event: &Event, profile: Profile) -> Option<String> {
        let record = event.to_record(profile)?;
        Some(match record {
            Record::Json(value) => value.to_string(),
            Record::Raw(text) => text,
            Record::Parts(parts) => parts.iter().flat_map(Part::pieces).collect(),
            Record::Settled => return None,
        })
    }

    fn update(event: AssistantEvent, snapshot: Option<&str>) -> Event {
        Event::MessageUpdate(Box::new(MessageUpdate {
            event,
            usage: crate::rpc::shared_json(&Usage::default(), 128),
            snapshot: snapshot.map(SharedJson::from),
        }))
    }

    #[test]
    fn default_updates_carry_usage_and_the_tool_calls_name() {
        let start = update(
            AssistantEvent::Start {
                family: BlockFamily::ToolCall,
                index: 1,
                tool: Some(("call_1".into(), "bash".into())),
            },
            None,
        );
        let text = line(&start, Profile::Default).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value["assistantMessageEvent"],
            json!({"type":"toolcall_start","contentIndex":1,"id":"call_1","toolName":"bash"})
        );
        assert_eq!(value["usage"]["totalTokens"], 0);
        assert!(text.starts_with(r#"{"type":"message_update","usage":{"#));
    }

    #[test]
    fn legacy_updates_carry_the_snapshot_twice_and_no_usage() {
        let delta = update(
            AssistantEvent::Delta {
                family: BlockFamily::Text,
                index: 0,
                delta: "lo".into(),
            },
            Some(r#"{"role":"assistant","content":[{"type":"text","text":"Hello"}]}"#),
        );
        let text = line(&delta, Profile::Legacy).unwrap();
        assert_eq!(
            text,
            r#"{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"lo","partial":{"role":"assistant","content":[{"type":"text","text":"Hello"}]}},"message":{"role":"assistant","content":[{"type":"text","text":"Hello"}]}}"#
        );
    }

    #[test]
    fn legacy_leaves_out_what_0_73_1_never_sent() {
        assert!(matches!(
            Event::AgentSettled { aborted: false }.to_record(Profile::Legacy),
            Some(Record::Settled)
        ));
        let bash = Event::BashExecutionUpdate {
            id: None,
            delta: "x".into(),
        };
        assert_eq!(line(&bash, Profile::Legacy), None);
        let end = Event::AgentEnd {
            messages: vec![],
            will_retry: false,
        };
        assert_eq!(
            line(&end, Profile::Legacy).unwrap(),
            r#"{"type":"agent_end","messages":[]}"#
        );
        assert_eq!(
            line(&end, Profile::Default).unwrap(),
            r#"{"type":"agent_end","messages":[],"willRetry":false}"#
        );
        assert_eq!(
            line(&Event::AgentSettled { aborted: true }, Profile::Default).unwrap(),
            r#"{"type":"agent_settled","aborted":true}"#
        );
    }
}
