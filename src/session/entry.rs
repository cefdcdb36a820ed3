//! Session file lines as typed values: the header and the nine entry types of pi's version-3
//! format, plus `Unknown` for any other object. Input: one parsed JSON line. Output: JSON with
//! pi's key order (base fields `type,id,parentId,timestamp` first; `custom` and `custom_message`
//! start `type,customType` and end with the base fields, as pi's object literals do).
//!
//! A line read from a file must come back out unchanged. When the typed form would serialize
//! differently (extra fields, a message our vocabulary cannot represent exactly, unusual key
//! order), the original JSON is kept and written instead; the typed view is still used for the
//! context.

use serde_json::{Map, Value, json};

use crate::messages::{AgentMessage, UserContent};

#[derive(Clone, Debug, PartialEq)]
pub struct SessionEntry {
    /// Empty only for an `Unknown` line without a string id (such lines are never indexed).
    pub id: String,
    pub parent_id: Option<String>,
    /// ISO-8601 as written (pi: `Date.toISOString`).
    pub timestamp: String,
    pub kind: EntryKind,
    /// The line exactly as read, when the typed form would not reproduce it.
    verbatim: Option<Value>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum EntryKind {
    /// `None` when the message is not valid for our vocabulary (kept verbatim, not in context).
    Message(Option<Box<AgentMessage>>),
    ThinkingLevelChange {
        thinking_level: String,
    },
    ModelChange {
        provider: String,
        model_id: String,
    },
    Compaction {
        summary: String,
        first_kept_entry_id: String,
        tokens_before: u64,
        details: Option<Value>,
        from_hook: Option<bool>,
    },
    BranchSummary {
        from_id: String,
        summary: String,
        details: Option<Value>,
        from_hook: Option<bool>,
    },
    Custom {
        custom_type: String,
        data: Option<Value>,
    },
    CustomMessage {
        custom_type: String,
        content: UserContent,
        display: bool,
        details: Option<Value>,
    },
    Label {
        target_id: String,
        label: Option<String>,
    },
    SessionInfo {
        name: Option<String>,
    },
    /// Any other line (a newer pi's entry type, or a known type with missing fields); the whole
    /// object, written back as is.
    Unknown(Value),
}

impl SessionEntry {
    /// A new entry as pi-rs appends it.
    pub fn new(
        id: String,
        parent_id: Option<String>,
        timestamp: String,
        kind: EntryKind,
    ) -> SessionEntry {
        SessionEntry {
            id,
            parent_id,
            timestamp,
            kind,
            verbatim: None,
        }
    }

    pub fn type_name(&self) -> &str {
        match &self.kind {
            EntryKind::Message(_) => "message",
            EntryKind::ThinkingLevelChange { .. } => "thinking_level_change",
            EntryKind::ModelChange { .. } => "model_change",
            EntryKind::Compaction { .. } => "compaction",
            EntryKind::BranchSummary { .. } => "branch_summary",
            EntryKind::Custom { .. } => "custom",
            EntryKind::CustomMessage { .. } => "custom_message",
            EntryKind::Label { .. } => "label",
            EntryKind::SessionInfo { .. } => "session_info",
            EntryKind::Unknown(value) => value.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    pub fn message(&self) -> Option<&AgentMessage> {
        match &self.kind {
            EntryKind::Message(message) => message.as_deref(),
            _ => None,
        }
    }

    /// True for a message entry whose message has role `assistant` (also when we could not type
    /// it): the trigger of the first write.
    pub fn is_assistant_message(&self) -> bool {
        match &self.kind {
            EntryKind::Message(Some(message)) => matches!(**message, AgentMessage::Assistant(_)),
            EntryKind::Message(None) => {
                self.verbatim
                    .as_ref()
                    .and_then(|v| v["message"]["role"].as_str())
                    == Some("assistant")
            }
            _ => false,
        }
    }

    /// Reads one parsed line (not the header). Never fails: what does not fit becomes `Unknown`.
    pub fn from_value(value: Value) -> SessionEntry {
        let typed = typed_from_value(&value);
        match typed {
            Some(entry) if same_json(&entry.to_value(), &value) => entry,
            Some(mut entry) => {
                entry.verbatim = Some(value);
                entry
            }
            None => SessionEntry {
                id: value
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                parent_id: value
                    .get("parentId")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                timestamp: value
                    .get("timestamp")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                kind: EntryKind::Unknown(value),
                verbatim: None,
            },
        }
    }

    /// The entry as JSON, in pi's key order (or exactly as read).
    pub fn to_value(&self) -> Value {
        if let Some(original) = &self.verbatim {
            return original.clone();
        }
        let mut out = Map::new();
        let base = |out: &mut Map<String, Value>| {
            out.insert("id".into(), json!(self.id));
            out.insert("parentId".into(), json!(self.parent_id));
            out.insert("timestamp".into(), json!(self.timestamp));
        };
        match &self.kind {
            EntryKind::Unknown(value) => return value.clone(),
            EntryKind::Custom { custom_type, data } => {
                out.insert("type".into(), json!("custom"));
                out.insert("customType".into(), json!(custom_type));
                insert_some(&mut out, "data", data.clone());
                base(&mut out);
            }
            EntryKind::CustomMessage {
                custom_type,
                content,
                display,
                details,
            } => {
                out.insert("type".into(), json!("custom_message"));
                out.insert("customType".into(), json!(custom_type));
                out.insert("content".into(), json!(content));
                out.insert("display".into(), json!(display));
                insert_some(&mut out, "details", details.clone());
                base(&mut out);
            }
            kind => {
                out.insert("type".into(), json!(self.type_name()));
                base(&mut out);
                match kind {
                    EntryKind::Message(message) => {
                        out.insert("message".into(), json!(message));
                    }
                    EntryKind::ThinkingLevelChange { thinking_level } => {
                        out.insert("thinkingLevel".into(), json!(thinking_level));
                    }
                    EntryKind::ModelChange { provider, model_id } => {
                        out.insert("provider".into(), json!(provider));
                        out.insert("modelId".into(), json!(model_id));
                    }
                    EntryKind::Compaction {
                        summary,
                        first_kept_entry_id,
                        tokens_before,
                        details,
                        from_hook,
                    } => {
                        out.insert("summary".into(), json!(summary));
                        out.insert("firstKeptEntryId".into(), json!(first_kept_entry_id));
                        out.insert("tokensBefore".into(), json!(tokens_before));
                        insert_some(&mut out, "details", details.clone());
                        insert_some(&mut out, "fromHook", from_hook.map(Value::Bool));
                    }
                    EntryKind::BranchSummary {
                        from_id,
                        summary,
                        details,
                        from_hook,
                    } => {
                        out.insert("fromId".into(), json!(from_id));
                        out.insert("summary".into(), json!(summary));
                        insert_some(&mut out, "details", details.clone());
                        insert_some(&mut out, "fromHook", from_hook.map(Value::Bool));
                    }
                    EntryKind::Label { target_id, label } => {
                        out.insert("targetId".into(), json!(target_id));
                        insert_some(&mut out, "label", label.clone().map(Value::String));
                    }
                    EntryKind::SessionInfo { name } => {
                        insert_some(&mut out, "name", name.clone().map(Value::String));
                    }
                    // Handled in the outer match.
                    EntryKind::Unknown(_)
                    | EntryKind::Custom { .. }
                    | EntryKind::CustomMessage { .. } => {}
                }
            }
        }
        Value::Object(out)
    }

    /// One file line, without the newline.
    pub fn to_line(&self) -> String {
        self.to_value().to_string()
    }
}

/// Equality that also compares key order (serde_json's `==` on maps ignores it), since the
/// bytes we write back must be the bytes we read.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b.iter())
                    .all(|((ka, va), (kb, vb))| ka == kb && same_json(va, vb))
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_json(x, y))
        }
        _ => a == b,
    }
}

/// JSON.stringify drops `undefined` members; our `None` is that.
fn insert_some(out: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        out.insert(key.to_string(), value);
    }
}

fn typed_from_value(value: &Value) -> Option<SessionEntry> {
    let object = value.as_object()?;
    let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_string);
    let optional = |key: &str| object.get(key).cloned();
    let id = text("id")?;
    let parent_id = match object.get("parentId")? {
        Value::Null => None,
        Value::String(parent) => Some(parent.clone()),
        _ => return None,
    };
    let timestamp = text("timestamp")?;
    let kind = match object.get("type")?.as_str()? {
        "message" => {
            let message = object.get("message")?;
            EntryKind::Message(serde_json::from_value(message.clone()).ok().map(Box::new))
        }
        "thinking_level_change" => EntryKind::ThinkingLevelChange {
            thinking_level: text("thinkingLevel")?,
        },
        "model_change" => EntryKind::ModelChange {
            provider: text("provider")?,
            model_id: text("modelId")?,
        },
        "compaction" => EntryKind::Compaction {
            summary: text("summary")?,
            first_kept_entry_id: text("firstKeptEntryId")?,
            tokens_before: object.get("tokensBefore")?.as_u64()?,
            details: optional("details"),
            from_hook: match object.get("fromHook") {
                None => None,
                Some(flag) => Some(flag.as_bool()?),
            },
        },
        "branch_summary" => EntryKind::BranchSummary {
            from_id: text("fromId")?,
            summary: text("summary")?,
            details: optional("details"),
            from_hook: match object.get("fromHook") {
                None => None,
                Some(flag) => Some(flag.as_bool()?),
            },
        },
        "custom" => EntryKind::Custom {
            custom_type: text("customType")?,
            data: optional("data"),
        },
        "custom_message" => EntryKind::CustomMessage {
            custom_type: text("customType")?,
            content: serde_json::from_value(object.get("content")?.clone()).ok()?,
            display: object.get("display")?.as_bool()?,
            details: optional("details"),
        },
        "label" => EntryKind::Label {
            target_id: text("targetId")?,
            label: match object.get("label") {
                None => None,
                Some(label) => Some(label.as_str()?.to_string()),
            },
        },
        "session_info" => EntryKind::SessionInfo {
            name: match object.get("name") {
                None => None,
                Some(name) => Some(name.as_str()?.to_string()),
            },
        },
        _ => return None,
    };
    Some(SessionEntry {
        id,
        parent_id,
        timestamp,
        kind,
        verbatim: None,
    })
}

/// The first line of a session file. Kept as the JSON read (or built), so unknown header fields
/// survive a rewrite.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionHeader {
    value: Value,
}

impl SessionHeader {
    pub const CURRENT_VERSION: u64 = 3;

    pub fn new(
        id: &str,
        timestamp: &str,
        cwd: &str,
        parent_session: Option<&str>,
    ) -> SessionHeader {
        let mut value = json!({
            "type": "session",
            "version": SessionHeader::CURRENT_VERSION,
            "id": id,
            "timestamp": timestamp,
            "cwd": cwd,
        });
        if let Some(parent) = parent_session {
            value["parentSession"] = json!(parent);
        }
        SessionHeader { value }
    }

    /// A header is an object with `type: "session"` and a string `id` (pi's validity test).
    pub fn from_value(value: Value) -> Option<SessionHeader> {
        let valid = value.get("type").and_then(Value::as_str) == Some("session")
            && value.get("id").is_some_and(Value::is_string);
        valid.then_some(SessionHeader { value })
    }

    pub fn id(&self) -> &str {
        self.value["id"].as_str().unwrap_or("")
    }

    pub fn cwd(&self) -> Option<&str> {
        self.value.get("cwd").and_then(Value::as_str)
    }

    pub fn timestamp(&self) -> Option<&str> {
        self.value.get("timestamp").and_then(Value::as_str)
    }

    pub fn parent_session(&self) -> Option<&str> {
        self.value.get("parentSession").and_then(Value::as_str)
    }

    /// Missing version means version 1 (pi's rule).
    pub fn version(&self) -> u64 {
        self.value
            .get("version")
            .and_then(Value::as_u64)
            .unwrap_or(1)
    }

    pub fn set_version(&mut self, version: u64) {
        self.value["version"] = json!(version);
    }

    pub fn to_value(&self) -> &Value {
        &self.value
    }

    pub fn to_line(&self) -> String {
        self.value.to_string()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Lines shaped exactly as pi 0.73.1 writes them (key order from its object literals).
    pub(crate) const REFERENCE_LINES: &[&str] = &[
        r#"{"type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"2026-01-02T03:04:05.678Z","message":{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":1767323045678}}"#,
        r#"{"type":"message","id":"b2c3d4e5","parentId":"a1b2c3d4","timestamp":"2026-01-02T03:04:06.000Z","message":{"role":"assistant","content":[{"type":"thinking","thinking":"hm","thinkingSignature":"sig"},{"type":"text","text":"yo"},{"type":"toolCall","id":"call_1","name":"read","arguments":{"path":"a.txt"}}],"api":"openai-completions","provider":"mock","model":"m1","usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"input":0.00003,"output":0.000075,"cacheRead":0,"cacheWrite":0,"total":0.000105}},"stopReason":"toolUse","timestamp":1767323046000,"responseId":"resp-1"}}"#,
        r#"{"type":"message","id":"c3d4e5f6","parentId":"b2c3d4e5","timestamp":"2026-01-02T03:04:06.100Z","message":{"role":"toolResult","toolCallId":"call_1","toolName":"read","content":[{"type":"text","text":"file"}],"isError":false,"timestamp":1767323046100}}"#,
        r#"{"type":"message","id":"c3d4e5f7","parentId":"c3d4e5f6","timestamp":"2026-01-02T03:04:06.200Z","message":{"role":"bashExecution","command":"ls","output":"a\n","exitCode":0,"cancelled":false,"truncated":false,"timestamp":1767323046200}}"#,
        r#"{"type":"thinking_level_change","id":"d4e5f6a7","parentId":"c3d4e5f7","timestamp":"2026-01-02T03:04:07.000Z","thinkingLevel":"high"}"#,
        r#"{"type":"model_change","id":"e5f6a7b8","parentId":"d4e5f6a7","timestamp":"2026-01-02T03:04:08.000Z","provider":"openai","modelId":"gpt-4o"}"#,
        r#"{"type":"compaction","id":"f6a7b8c9","parentId":"e5f6a7b8","timestamp":"2026-01-02T03:04:09.000Z","summary":"sum","firstKeptEntryId":"c3d4e5f6","tokensBefore":5000,"details":{"readFiles":["a.txt"],"modifiedFiles":[]},"fromHook":false}"#,
        r#"{"type":"branch_summary","id":"a7b8c9d0","parentId":"f6a7b8c9","timestamp":"2026-01-02T03:04:10.000Z","fromId":"root","summary":"left","details":{"readFiles":[],"modifiedFiles":[]},"fromHook":false}"#,
        r#"{"type":"custom","customType":"ext","data":{"count":42},"id":"b8c9d0e1","parentId":"a7b8c9d0","timestamp":"2026-01-02T03:04:11.000Z"}"#,
        r#"{"type":"custom","customType":"ext","id":"b8c9d0e2","parentId":"b8c9d0e1","timestamp":"2026-01-02T03:04:11.500Z"}"#,
        r#"{"type":"custom_message","customType":"ext","content":"Injected","display":true,"details":{"k":1},"id":"c9d0e1f2","parentId":"b8c9d0e2","timestamp":"2026-01-02T03:04:12.000Z"}"#,
        r#"{"type":"custom_message","customType":"ext","content":[{"type":"text","text":"x"}],"display":false,"id":"c9d0e1f3","parentId":"c9d0e1f2","timestamp":"2026-01-02T03:04:12.500Z"}"#,
        r#"{"type":"label","id":"d0e1f2a3","parentId":"c9d0e1f3","timestamp":"2026-01-02T03:04:13.000Z","targetId":"a1b2c3d4","label":"checkpoint"}"#,
        r#"{"type":"label","id":"d0e1f2a4","parentId":"d0e1f2a3","timestamp":"2026-01-02T03:04:13.500Z","targetId":"a1b2c3d4"}"#,
        r#"{"type":"session_info","id":"e1f2a3b4","parentId":"d0e1f2a4","timestamp":"2026-01-02T03:04:14.000Z","name":"My work"}"#,
    ];

    #[test]
    fn reference_lines_are_typed_and_reserialize_byte_identically() {
        for line in REFERENCE_LINES {
            let value: Value = serde_json::from_str(line).unwrap();
            let entry = SessionEntry::from_value(value);
            assert!(!matches!(entry.kind, EntryKind::Unknown(_)), "{line}");
            assert!(
                entry.verbatim.is_none(),
                "typed form should reproduce {line}"
            );
            assert_eq!(entry.to_line(), *line);
        }
    }

    #[test]
    fn unusual_lines_round_trip_verbatim() {
        let lines = [
            // Unknown type from a newer pi.
            r#"{"type":"future_thing","id":"0000aaaa","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","x":[1,2]}"#,
            // Known type with an extra field.
            r#"{"type":"model_change","id":"0000aaab","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","provider":"p","modelId":"m","extra":1}"#,
            // Message our vocabulary cannot hold (unknown role) and one with an odd block field.
            r#"{"type":"message","id":"0000aaac","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"alien","content":"?"}}"#,
            r#"{"type":"message","id":"0000aaad","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":[{"type":"text","text":"a","cache":true}],"timestamp":1}}"#,
            // Known type with a missing field and a custom entry with explicit null data.
            r#"{"type":"compaction","id":"0000aaae","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","summary":"s"}"#,
            r#"{"type":"custom","customType":"c","data":null,"id":"0000aaaf","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z"}"#,
            // Key order different from pi's.
            r#"{"id":"0000aab0","type":"session_info","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","name":"n"}"#,
        ];
        for line in lines {
            let entry = SessionEntry::from_value(serde_json::from_str(line).unwrap());
            assert_eq!(entry.to_line(), line);
        }
        let alien = SessionEntry::from_value(serde_json::from_str(lines[2]).unwrap());
        assert!(matches!(alien.kind, EntryKind::Message(None)));
        assert_eq!(alien.id, "0000aaac");
        let odd_block = SessionEntry::from_value(serde_json::from_str(lines[3]).unwrap());
        assert!(
            odd_block.message().is_some(),
            "lossy but readable messages still feed the context"
        );
    }

    #[test]
    fn header_round_trips_and_reports_version() {
        let line = r#"{"type":"session","version":3,"id":"019b7ca9-8f2e-7000-8000-000000000000","timestamp":"2026-01-02T03:04:05.678Z","cwd":"/w","parentSession":"/s/a.jsonl"}"#;
        let header = SessionHeader::from_value(serde_json::from_str(line).unwrap()).unwrap();
        assert_eq!(header.to_line(), line);
        assert_eq!(header.version(), 3);
        assert_eq!(header.parent_session(), Some("/s/a.jsonl"));
        let built = SessionHeader::new(
            "019b7ca9-8f2e-7000-8000-000000000000",
            "2026-01-02T03:04:05.678Z",
            "/w",
            Some("/s/a.jsonl"),
        );
        assert_eq!(built.to_line(), line);
        let v1 = SessionHeader::from_value(json!({"type":"session","id":"x"})).unwrap();
        assert_eq!(v1.version(), 1);
        assert!(SessionHeader::from_value(json!({"type":"session","id":5})).is_none());
    }
}
