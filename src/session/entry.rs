//! Session file lines as typed values: the header and the nine entry types of pi's version-3
//! format, plus `Unknown` for any other object. Input: one line of a file (or one parsed JSON
//! value). Output: JSON with pi's key order (base fields `type,id,parentId,timestamp` first;
//! `custom` and `custom_message` start `type,customType` and end with the base fields, as pi's
//! object literals do).
//!
//! A line read from a file must come back out unchanged. Reading deserializes a line straight
//! into the typed view (no `serde_json::Value`: a 100k-entry file would cost hundreds of MB of
//! maps), then serializes that view once to check it gives back the same bytes. It does for
//! the lines pi and pi-rs write, which then cost nothing more; any other line (extra fields, a
//! message our vocabulary cannot represent exactly, unusual key order or spacing) keeps its
//! text, which is what gets written back. The typed view always feeds the context. Lines that
//! do not fit the typed view at all take the slower `Value` route.

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

use crate::messages::{AgentMessage, UserContent};

#[derive(Clone, Debug)]
pub struct SessionEntry {
    /// Empty only for an `Unknown` line without a string id (such lines are never indexed).
    pub id: String,
    pub parent_id: Option<String>,
    /// ISO-8601 as written (pi: `Date.toISOString`).
    pub timestamp: String,
    pub kind: EntryKind,
    /// The line as read (without surrounding whitespace) when the typed form does not
    /// reproduce it byte for byte; None when it does, and for entries built in memory.
    line: Option<Box<str>>,
}

/// Two entries are equal when their typed views and their lines are.
impl PartialEq for SessionEntry {
    fn eq(&self, other: &SessionEntry) -> bool {
        self.id == other.id
            && self.parent_id == other.parent_id
            && self.timestamp == other.timestamp
            && self.kind == other.kind
            && self.to_line() == other.to_line()
    }
}

/// What reading one line of a file gave. Not boxed: it is moved straight into the entry list,
/// and a box would cost one allocation per line.
#[allow(clippy::large_enum_variant)]
pub(super) enum ReadLine {
    Entry(SessionEntry),
    /// A second session header (concatenated files): not an entry.
    Header,
    /// Not a JSON object.
    Invalid,
}

/// A message entry's message, held once: as JSON text (a slice of the file it was read from,
/// or the text the agent already serialized for stdout, shared with those records) or, for
/// entries built in memory by tests and migrations, typed. JSON text is typed each time it is asked
/// for and never cached: the agent keeps the one typed copy of the conversation (its context),
/// and a long session would otherwise hold every message twice.
#[derive(Clone, Debug)]
pub enum MessageBody {
    /// `None` when the message is not valid for our vocabulary (its line is kept, not in context).
    Typed(Option<Box<AgentMessage>>),
    /// Read from a file.
    Json(JsonText),
    /// Serialized by the agent (possibly in pieces).
    Shared(crate::rpc::SharedJson),
}

/// A slice of a shared text: a message inside the file buffer it was read from (all entries
/// of a file share that one buffer), or a whole serialized message.
#[derive(Clone, Debug)]
pub struct JsonText {
    text: std::sync::Arc<String>,
    start: usize,
    end: usize,
}

impl JsonText {
    pub fn as_str(&self) -> &str {
        self.text.get(self.start..self.end).unwrap_or_default()
    }

    /// `part` as a slice of `file` when it lies inside it, else a copy of its own.
    fn within(file: Option<&std::sync::Arc<String>>, part: &str) -> JsonText {
        let offset = (part.as_ptr() as usize).wrapping_sub(file.map_or(0, |f| f.as_ptr() as usize));
        match file {
            Some(file) if offset <= file.len() && part.len() <= file.len() - offset => JsonText {
                text: std::sync::Arc::clone(file),
                start: offset,
                end: offset + part.len(),
            },
            _ => JsonText {
                end: part.len(),
                text: std::sync::Arc::new(part.to_string()),
                start: 0,
            },
        }
    }
}

impl MessageBody {
    /// `None` when the message is not valid for our vocabulary (its line is kept, not in context).
    pub fn typed(message: Option<Box<AgentMessage>>) -> MessageBody {
        MessageBody::Typed(message)
    }

    pub fn shared(json: crate::rpc::SharedJson) -> MessageBody {
        MessageBody::Shared(json)
    }

    /// The message typed: borrowed when it is held typed, parsed from its text otherwise.
    /// `None` when it does not fit our vocabulary.
    pub fn get(&self) -> Option<std::borrow::Cow<'_, AgentMessage>> {
        match self {
            MessageBody::Typed(typed) => typed.as_deref().map(std::borrow::Cow::Borrowed),
            MessageBody::Json(json) => serde_json::from_str::<AgentMessage>(json.as_str())
                .ok()
                .map(std::borrow::Cow::Owned),
            MessageBody::Shared(json) => json
                .parse::<AgentMessage>()
                .ok()
                .map(std::borrow::Cow::Owned),
        }
    }

    /// The message's `role`, without typing it (ours and pi's start with `{"role":"`).
    pub fn has_role(&self, role: &str) -> bool {
        match self {
            MessageBody::Typed(typed) => typed.as_deref().is_some_and(|m| m.role() == role),
            MessageBody::Json(json) => {
                let text = json.as_str();
                match text.strip_prefix(r#"{"role":""#) {
                    Some(rest) => rest.strip_prefix(role).is_some_and(|r| r.starts_with('"')),
                    None => role_of(text) == Some(role.to_string()),
                }
            }
            MessageBody::Shared(json) if json.starts_with(r#"{"role":""#) => {
                json.starts_with(&format!(r#"{{"role":"{role}""#))
            }
            MessageBody::Shared(json) => role_of(&json.text()) == Some(role.to_string()),
        }
    }

    pub fn is_assistant(&self) -> bool {
        self.has_role("assistant")
    }

    /// A `role:"system"` message (pi 1.6.0's prompt state).
    pub fn is_system(&self) -> bool {
        self.has_role("system")
    }

    /// Appends the JSON text to `out`; false (nothing written) when the message is typed.
    fn write_text(&self, out: &mut Vec<u8>) -> bool {
        match self {
            MessageBody::Json(json) => out.extend_from_slice(json.as_str().as_bytes()),
            MessageBody::Shared(json) => json
                .pieces()
                .for_each(|piece| out.extend_from_slice(piece.as_bytes())),
            MessageBody::Typed(_) => return false,
        }
        true
    }
}

/// The `role` of a message written in an unusual way (parsed; rare).
fn role_of(text: &str) -> Option<String> {
    let value = serde_json::from_str::<Value>(text).ok()?;
    value.get("role")?.as_str().map(str::to_string)
}

impl PartialEq for MessageBody {
    fn eq(&self, other: &MessageBody) -> bool {
        self.get() == other.get()
    }
}

impl Serialize for MessageBody {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MessageBody::Typed(typed) => typed.serialize(serializer),
            MessageBody::Json(json) => {
                // Written as the very text read (validated, not copied).
                let raw: &serde_json::value::RawValue =
                    serde_json::from_str(json.as_str()).map_err(serde::ser::Error::custom)?;
                raw.serialize(serializer)
            }
            MessageBody::Shared(json) => {
                // Written as the very text stdout got (validated; joined when in pieces).
                let text = json.text();
                let raw: &serde_json::value::RawValue =
                    serde_json::from_str(&text).map_err(serde::ser::Error::custom)?;
                raw.serialize(serializer)
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum EntryKind {
    Message(MessageBody),
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
        /// The summary requests' usage, summed (pi 1.6.0); an extension's compaction may give
        /// one.
        usage: Option<Value>,
        from_hook: Option<bool>,
        /// The transcript's system messages replayed at compaction time (pi 1.6.0): the
        /// compacted context starts with it.
        system_message: Option<Value>,
    },
    BranchSummary {
        from_id: String,
        summary: String,
        details: Option<Value>,
        /// The summary request's usage, when pi wrote the summary (1.6.0).
        usage: Option<Value>,
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
            line: None,
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

    /// A message entry's message, typed (parsed from its text each time: see [`MessageBody`]).
    pub fn message(&self) -> Option<std::borrow::Cow<'_, AgentMessage>> {
        match &self.kind {
            EntryKind::Message(message) => message.get(),
            _ => None,
        }
    }

    /// True for a message entry whose message has role `assistant` (also when we could not type
    /// it): the trigger of the first write.
    pub fn is_assistant_message(&self) -> bool {
        match &self.kind {
            EntryKind::Message(MessageBody::Typed(None)) => {
                self.to_value()["message"]["role"].as_str() == Some("assistant")
            }
            EntryKind::Message(message) => message.is_assistant(),
            _ => false,
        }
    }

    /// Reads one parsed line (not the header). Never fails: what does not fit becomes `Unknown`.
    pub fn from_value(value: Value) -> SessionEntry {
        let text = value.to_string();
        let mut entry = match typed_from_value(&value) {
            Some(entry) => entry,
            None => unknown_entry(value),
        };
        entry.keep_line_unless_reproduced(&text, &mut Vec::new());
        entry
    }

    /// Reads one line of a session file (not the first header), without surrounding
    /// whitespace. `scratch` is a buffer reused from line to line. When `text` lies inside
    /// `file` (the whole file's text), a message keeps a slice of that buffer instead of a copy.
    pub(super) fn read_line(
        text: &str,
        scratch: &mut Vec<u8>,
        file: Option<&std::sync::Arc<String>>,
    ) -> ReadLine {
        // A struct deserializes from a JSON array too; a line must be an object.
        if !text.starts_with('{') {
            return ReadLine::Invalid;
        }
        // Fast route: straight into the typed fields, a message as its text. Anything it does
        // not accept (a field of an unexpected type or shape, a duplicate key, a missing field,
        // an unknown type) takes the `Value` route, which decides exactly as `from_value` does.
        // So does a line with a raw CR: a message's text goes to clients as it is, and a CR
        // would split their lines.
        let fast = match serde_json::from_str::<LineFields>(text) {
            _ if memchr::memchr(b'\r', text.as_bytes()).is_some() => None,
            Ok(fields) if fields.kind.as_deref() == Some("session") => return ReadLine::Header,
            Ok(fields) => typed_from_fields(fields, file),
            Err(_) => None,
        };
        let mut entry = match fast {
            Some(entry) => entry,
            None => {
                let value: Value = match serde_json::from_str(text) {
                    Ok(value @ Value::Object(_)) => value,
                    _ => return ReadLine::Invalid,
                };
                if value.get("type").and_then(Value::as_str) == Some("session") {
                    return ReadLine::Header;
                }
                match typed_from_value(&value) {
                    Some(entry) => entry,
                    None => unknown_entry(value),
                }
            }
        };
        entry.keep_line_unless_reproduced(text, scratch);
        ReadLine::Entry(entry)
    }

    /// Keeps `text` as the entry's line unless the typed form serializes to exactly it.
    fn keep_line_unless_reproduced(&mut self, text: &str, scratch: &mut Vec<u8>) {
        scratch.clear();
        self.write_typed(scratch);
        let reproduced = scratch == text.as_bytes();
        self.line = (!reproduced).then(|| text.into());
    }

    /// The entry as JSON (the line as read, or the typed form in pi's key order).
    pub fn to_value(&self) -> Value {
        if let Some(line) = &self.line
            && let Ok(value) = serde_json::from_str(line)
        {
            return value;
        }
        self.typed_value()
    }

    /// One file line, without the newline.
    pub fn to_line(&self) -> String {
        match &self.line {
            Some(line) => line.to_string(),
            None => {
                let mut out = Vec::new();
                self.write_typed(&mut out);
                // Always UTF-8: serde_json's output and message text that was UTF-8.
                String::from_utf8(out).unwrap_or_default()
            }
        }
    }

    /// Appends [`SessionEntry::to_line`] to `out`.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        match &self.line {
            Some(line) => out.extend_from_slice(line.as_bytes()),
            None => self.write_typed(out),
        }
    }

    /// Appends the typed form to `out`. A message held as text is copied in as it is: it was
    /// checked when read or written by serde_json, so it is not parsed again.
    fn write_typed(&self, out: &mut Vec<u8>) {
        // Cannot fail: every map key is a string and the output is memory.
        if let EntryKind::Message(body @ (MessageBody::Json(_) | MessageBody::Shared(_))) =
            &self.kind
        {
            out.extend_from_slice(br#"{"type":"message","id":"#);
            let _ = serde_json::to_writer(&mut *out, &self.id);
            out.extend_from_slice(br#","parentId":"#);
            let _ = serde_json::to_writer(&mut *out, &self.parent_id);
            out.extend_from_slice(br#","timestamp":"#);
            let _ = serde_json::to_writer(&mut *out, &self.timestamp);
            out.extend_from_slice(br#","message":"#);
            body.write_text(out);
            out.push(b'}');
            return;
        }
        let _ = serde_json::to_writer(out, &Typed(self));
    }

    /// Appends the entry as compact JSON to `out`: the typed form (a message's text as read,
    /// which never holds a raw CR), or a kept line re-serialized rather than copied: it may
    /// have spacing (a raw CR would split a client's lines) or spellings serde_json writes
    /// differently; such lines are rare, so the parse costs little.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match &self.line {
            Some(_) => {
                let _ = serde_json::to_writer(out, &self.to_value());
            }
            None => self.write_line(out),
        }
    }

    /// The typed form as JSON, in pi's key order.
    fn typed_value(&self) -> Value {
        serde_json::to_value(Typed(self)).unwrap_or(Value::Null)
    }
}

/// An entry's typed form, serialized in pi's key order: `type,id,parentId,timestamp`, then the
/// type's fields; `custom` and `custom_message` put the base fields last. Absent optional
/// fields are left out (JSON.stringify drops `undefined`).
struct Typed<'a>(&'a SessionEntry);

impl Serialize for Typed<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        fn base<M: SerializeMap>(map: &mut M, entry: &SessionEntry) -> Result<(), M::Error> {
            map.serialize_entry("id", &entry.id)?;
            map.serialize_entry("parentId", &entry.parent_id)?;
            map.serialize_entry("timestamp", &entry.timestamp)
        }
        fn some<M: SerializeMap, T: Serialize>(
            map: &mut M,
            key: &str,
            value: &Option<T>,
        ) -> Result<(), M::Error> {
            match value {
                Some(value) => map.serialize_entry(key, value),
                None => Ok(()),
            }
        }
        let entry = self.0;
        let map = match &entry.kind {
            EntryKind::Unknown(value) => return value.serialize(serializer),
            EntryKind::Custom { custom_type, data } => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", "custom")?;
                map.serialize_entry("customType", custom_type)?;
                some(&mut map, "data", data)?;
                base(&mut map, entry)?;
                map
            }
            EntryKind::CustomMessage {
                custom_type,
                content,
                display,
                details,
            } => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", "custom_message")?;
                map.serialize_entry("customType", custom_type)?;
                map.serialize_entry("content", content)?;
                map.serialize_entry("display", display)?;
                some(&mut map, "details", details)?;
                base(&mut map, entry)?;
                map
            }
            kind => {
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("type", entry.type_name())?;
                base(&mut map, entry)?;
                match kind {
                    EntryKind::Message(message) => map.serialize_entry("message", message)?,
                    EntryKind::ThinkingLevelChange { thinking_level } => {
                        map.serialize_entry("thinkingLevel", thinking_level)?
                    }
                    EntryKind::ModelChange { provider, model_id } => {
                        map.serialize_entry("provider", provider)?;
                        map.serialize_entry("modelId", model_id)?;
                    }
                    EntryKind::Compaction {
                        summary,
                        first_kept_entry_id,
                        tokens_before,
                        details,
                        usage,
                        from_hook,
                        system_message,
                    } => {
                        map.serialize_entry("summary", summary)?;
                        map.serialize_entry("firstKeptEntryId", first_kept_entry_id)?;
                        map.serialize_entry("tokensBefore", tokens_before)?;
                        some(&mut map, "details", details)?;
                        some(&mut map, "usage", usage)?;
                        some(&mut map, "fromHook", from_hook)?;
                        some(&mut map, "systemMessage", system_message)?;
                    }
                    EntryKind::BranchSummary {
                        from_id,
                        summary,
                        details,
                        usage,
                        from_hook,
                    } => {
                        map.serialize_entry("fromId", from_id)?;
                        map.serialize_entry("summary", summary)?;
                        some(&mut map, "details", details)?;
                        some(&mut map, "usage", usage)?;
                        some(&mut map, "fromHook", from_hook)?;
                    }
                    EntryKind::Label { target_id, label } => {
                        map.serialize_entry("targetId", target_id)?;
                        some(&mut map, "label", label)?;
                    }
                    EntryKind::SessionInfo { name } => some(&mut map, "name", name)?,
                    // Handled above.
                    EntryKind::Unknown(_)
                    | EntryKind::Custom { .. }
                    | EntryKind::CustomMessage { .. } => {}
                }
                map
            }
        };
        map.end()
    }
}

/// An entry for a line that has no typed form: the whole object, base fields copied out.
fn unknown_entry(value: Value) -> SessionEntry {
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
    SessionEntry {
        id: text("id").unwrap_or_default(),
        parent_id: text("parentId"),
        timestamp: text("timestamp").unwrap_or_default(),
        line: None,
        kind: EntryKind::Unknown(value),
    }
}

/// Equality that also compares key order (serde_json's `==` on maps ignores it).
#[cfg(test)]
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
            EntryKind::Message(MessageBody::typed(
                serde_json::from_value(message.clone()).ok().map(Box::new),
            ))
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
            usage: optional("usage"),
            from_hook: match object.get("fromHook") {
                None => None,
                Some(flag) => Some(flag.as_bool()?),
            },
            system_message: optional("systemMessage"),
        },
        "branch_summary" => EntryKind::BranchSummary {
            from_id: text("fromId")?,
            summary: text("summary")?,
            details: optional("details"),
            usage: optional("usage"),
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
        line: None,
    })
}

/// The fields of any typed line, for the fast route of [`SessionEntry::read_line`]. Every field
/// is `Some` exactly when the key is present, and present means well-typed (a `null` where a
/// string belongs fails the whole line over to the `Value` route). Unknown keys are skipped.
#[derive(Deserialize)]
struct LineFields<'a> {
    #[serde(rename = "type", borrow, default, deserialize_with = "present")]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, deserialize_with = "present")]
    id: Option<String>,
    #[serde(rename = "parentId", default, deserialize_with = "present")]
    parent_id: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    timestamp: Option<String>,
    #[serde(borrow, default, deserialize_with = "present")]
    message: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "thinkingLevel", default, deserialize_with = "present")]
    thinking_level: Option<String>,
    #[serde(default, deserialize_with = "present")]
    provider: Option<String>,
    #[serde(rename = "modelId", default, deserialize_with = "present")]
    model_id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    summary: Option<String>,
    #[serde(rename = "firstKeptEntryId", default, deserialize_with = "present")]
    first_kept_entry_id: Option<String>,
    #[serde(rename = "tokensBefore", default, deserialize_with = "present")]
    tokens_before: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    details: Option<Value>,
    #[serde(rename = "fromHook", default, deserialize_with = "present")]
    from_hook: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    usage: Option<Value>,
    #[serde(rename = "systemMessage", default, deserialize_with = "present")]
    system_message: Option<Value>,
    #[serde(rename = "fromId", default, deserialize_with = "present")]
    from_id: Option<String>,
    #[serde(rename = "customType", default, deserialize_with = "present")]
    custom_type: Option<String>,
    #[serde(default, deserialize_with = "present")]
    data: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    content: Option<UserContent>,
    #[serde(default, deserialize_with = "present")]
    display: Option<bool>,
    #[serde(rename = "targetId", default, deserialize_with = "present")]
    target_id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    label: Option<String>,
    #[serde(default, deserialize_with = "present")]
    name: Option<String>,
}

/// A present key, including `null` for types that accept it (serde's plain `Option` would turn
/// a present `null` into "absent").
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// The typed entry, with the same requirements per type as [`typed_from_value`]; None when
/// one is not met (the caller then asks `typed_from_value`, which decides).
fn typed_from_fields(
    fields: LineFields,
    file: Option<&std::sync::Arc<String>>,
) -> Option<SessionEntry> {
    let kind = match fields.kind?.as_ref() {
        "message" => EntryKind::Message(MessageBody::Json(JsonText::within(
            file,
            fields.message?.get(),
        ))),
        "thinking_level_change" => EntryKind::ThinkingLevelChange {
            thinking_level: fields.thinking_level?,
        },
        "model_change" => EntryKind::ModelChange {
            provider: fields.provider?,
            model_id: fields.model_id?,
        },
        "compaction" => EntryKind::Compaction {
            summary: fields.summary?,
            first_kept_entry_id: fields.first_kept_entry_id?,
            tokens_before: fields.tokens_before?,
            details: fields.details,
            usage: fields.usage,
            from_hook: fields.from_hook,
            system_message: fields.system_message,
        },
        "branch_summary" => EntryKind::BranchSummary {
            from_id: fields.from_id?,
            summary: fields.summary?,
            details: fields.details,
            usage: fields.usage,
            from_hook: fields.from_hook,
        },
        "custom" => EntryKind::Custom {
            custom_type: fields.custom_type?,
            data: fields.data,
        },
        "custom_message" => EntryKind::CustomMessage {
            custom_type: fields.custom_type?,
            content: fields.content?,
            display: fields.display?,
            details: fields.details,
        },
        "label" => EntryKind::Label {
            target_id: fields.target_id?,
            label: fields.label,
        },
        "session_info" => EntryKind::SessionInfo { name: fields.name },
        _ => return None,
    };
    Some(SessionEntry {
        id: fields.id?,
        parent_id: fields.parent_id?,
        timestamp: fields.timestamp?,
        kind,
        line: None,
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

    #[cfg(test)]
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

    pub fn set_id(&mut self, id: &str) {
        self.value["id"] = json!(id);
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
            assert!(entry.line.is_none(), "typed form should reproduce {line}");
            assert_eq!(entry.to_line(), *line);
        }
    }

    /// Lines the typed form does not reproduce, or cannot hold.
    pub(crate) const UNUSUAL_LINES: &[&str] = &[
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

    #[test]
    fn unusual_lines_round_trip_verbatim() {
        let lines = UNUSUAL_LINES;
        for &line in lines {
            let entry = SessionEntry::from_value(serde_json::from_str(line).unwrap());
            assert_eq!(entry.to_line(), line);
        }
        let alien = SessionEntry::from_value(serde_json::from_str(lines[2]).unwrap());
        assert!(matches!(&alien.kind, EntryKind::Message(m) if m.get().is_none()));
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

    /// `read_line` on `text` as the only content of a file.
    fn read(text: &str) -> ReadLine {
        SessionEntry::read_line(text, &mut Vec::new(), None)
    }

    #[test]
    fn reading_a_line_gives_what_parsing_it_to_a_value_gives() {
        let more = [
            // Present nulls where a value is required, and a message that does not type.
            r#"{"type":"label","id":"0000aac0","parentId":null,"timestamp":"t","targetId":"x","label":null}"#,
            r#"{"type":"session_info","id":"0000aac1","parentId":null,"timestamp":"t","name":null}"#,
            r#"{"type":"compaction","id":"0000aac2","parentId":null,"timestamp":"t","summary":"s","firstKeptEntryId":"a","tokensBefore":5.0,"details":null,"fromHook":null}"#,
            r#"{"type":"branch_summary","id":"0000aac3","parentId":null,"timestamp":"t","fromId":"root","summary":"s","details":null}"#,
            r#"{"type":"custom","customType":"c","data":null,"id":"0000aac4","parentId":null,"timestamp":"t"}"#,
            r#"{"type":"message","id":"0000aac5","timestamp":"t","message":{"role":"user","content":"no parent","timestamp":1}}"#,
            r#"{"type":"message","id":"0000aac6","parentId":5,"timestamp":"t","message":{"role":"user","content":"odd parent","timestamp":1}}"#,
            r#"{"type":"message","id":"0000aac7","parentId":null,"timestamp":"t","message":{"role":"assistant","content":"not blocks"}}"#,
            // Duplicate key (the last one wins, as in a parsed value) and spaces between tokens.
            r#"{"type":"model_change","id":"0000aac8","parentId":null,"timestamp":"t","provider":"a","provider":"b","modelId":"m"}"#,
            r#"{ "type": "session_info", "id": "0000aac9", "parentId": null, "timestamp": "t", "name": "spaced" }"#,
            r#"{"type":42,"id":"0000aaca","parentId":null,"timestamp":"t"}"#,
        ];
        let all = REFERENCE_LINES.iter().chain(UNUSUAL_LINES).chain(&more);
        for &line in all {
            let value: Value = serde_json::from_str(line).unwrap();
            let parsed = SessionEntry::from_value(value.clone());
            let ReadLine::Entry(read) = read(line) else {
                panic!("not read as an entry: {line}");
            };
            assert_eq!(read.id, parsed.id, "{line}");
            assert_eq!(read.parent_id, parsed.parent_id, "{line}");
            assert_eq!(read.timestamp, parsed.timestamp, "{line}");
            assert_eq!(read.kind, parsed.kind, "{line}");
            assert_eq!(read.to_line(), line, "the line comes back as read");
            assert_eq!(read.to_value(), value, "{line}");
            assert!(
                same_json(&read.to_value(), &value),
                "key order kept: {line}"
            );
            assert_eq!(
                read.is_assistant_message(),
                parsed.is_assistant_message(),
                "{line}"
            );
        }
        assert!(matches!(read(r#"["message","x"]"#), ReadLine::Invalid));
        assert!(matches!(read("12"), ReadLine::Invalid));
        assert!(matches!(read(r#"{"type":"message""#), ReadLine::Invalid));
        assert!(matches!(
            read(r#"{"type":"session","version":3,"id":"x","timestamp":"t","cwd":"/"}"#),
            ReadLine::Header
        ));
        let ReadLine::Entry(alien) = read(UNUSUAL_LINES[2]) else {
            panic!("alien message not read");
        };
        assert!(matches!(&alien.kind, EntryKind::Message(m) if m.get().is_none()));
    }

    #[test]
    fn a_message_read_from_a_file_is_a_slice_of_that_files_text() {
        let file = std::sync::Arc::new(format!("{}\n", REFERENCE_LINES[1]));
        let line = file.trim_end();
        let ReadLine::Entry(entry) = SessionEntry::read_line(line, &mut Vec::new(), Some(&file))
        else {
            panic!("not read");
        };
        let EntryKind::Message(MessageBody::Json(json)) = &entry.kind else {
            panic!("message not held as text");
        };
        assert!(
            std::sync::Arc::ptr_eq(&json.text, &file),
            "no copy of the text"
        );
        assert!(line[json.start..json.end].starts_with(r#"{"role":"assistant""#));
        assert!(entry.line.is_none());
        assert_eq!(entry.to_line(), line);
        assert!(entry.is_assistant_message());
        assert!(matches!(
            entry.message().as_deref(),
            Some(AgentMessage::Assistant(_))
        ));
        // Text that is not inside the given file is copied.
        let ReadLine::Entry(copied) =
            SessionEntry::read_line(REFERENCE_LINES[0], &mut Vec::new(), Some(&file))
        else {
            panic!("not read");
        };
        let EntryKind::Message(MessageBody::Json(json)) = &copied.kind else {
            panic!("message not held as text");
        };
        assert!(!std::sync::Arc::ptr_eq(&json.text, &file));
        assert_eq!(copied.to_line(), REFERENCE_LINES[0]);
        // A raw CR (legal JSON whitespace) must never reach a client: such lines are kept and
        // re-serialized for the wire.
        let with_cr = REFERENCE_LINES[0].replace(r#""message":{"#, "\"message\":\r{");
        let ReadLine::Entry(cr) = read(&with_cr) else {
            panic!("not read");
        };
        let mut wire = Vec::new();
        cr.write_json(&mut wire);
        assert_eq!(wire, REFERENCE_LINES[0].as_bytes());
        assert_eq!(cr.to_line(), with_cr, "the file keeps the line as read");
    }

    #[test]
    fn roles_are_read_without_typing_and_with_it_when_written_otherwise() {
        let body = |json: &str| MessageBody::shared(crate::rpc::SharedJson::from(json));
        assert!(body(r#"{"role":"assistant","content":[]}"#).is_assistant());
        assert!(!body(r#"{"role":"assistantX","content":[]}"#).is_assistant());
        assert!(body(r#"{ "role" : "assistant" }"#).is_assistant());
        assert!(body(r#"{"content":[],"role":"user"}"#).has_role("user"));
        assert!(!body(r#"{"role":"user"}"#).has_role("assistant"));
    }

    #[test]
    fn wire_json_is_the_typed_form_or_the_kept_line_reserialized() {
        let ReadLine::Entry(entry) = read(REFERENCE_LINES[1]) else {
            panic!("not read");
        };
        assert!(
            entry.line.is_none(),
            "pi's lines need no copy of their text"
        );
        let mut out = Vec::new();
        entry.write_json(&mut out);
        assert_eq!(out, REFERENCE_LINES[1].as_bytes());
        let spaced = "{\"type\": \"session_info\",\"id\":\"0000aab1\",\"parentId\":null,\r\"timestamp\":\"t\",\"name\":\"a \\\" b\"}";
        let ReadLine::Entry(entry) = read(spaced) else {
            panic!("not read");
        };
        let mut out = Vec::new();
        entry.write_json(&mut out);
        let compact = r#"{"type":"session_info","id":"0000aab1","parentId":null,"timestamp":"t","name":"a \" b"}"#;
        assert_eq!(String::from_utf8(out).unwrap(), compact);
        assert_eq!(entry.to_line(), spaced, "the file keeps the line as read");
    }
}
