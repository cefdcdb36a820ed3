//! The RPC wire format, and the only place that knows it: stdin commands parsed into `Command`,
//! and the response records written back. Event records are built by `rpc::events`.
//!
//! Parsing is strict about what a command needs and forgiving about the rest: unknown fields are
//! ignored, a missing or mistyped field is a clear error naming it, and the request `id` is echoed
//! with its JSON type on every response — unknown commands included.

use serde_json::{Map, Value, json};

use crate::messages::ImageContent;

/// A parsed stdin record.
#[derive(Debug, PartialEq)]
pub struct Request {
    pub id: Option<Value>,
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamingBehavior {
    Steer,
    FollowUp,
}

#[derive(Debug, PartialEq)]
pub enum Command {
    Prompt {
        message: String,
        images: Vec<ImageContent>,
        streaming_behavior: Option<StreamingBehavior>,
    },
    Steer {
        message: String,
        images: Vec<ImageContent>,
    },
    FollowUp {
        message: String,
        images: Vec<ImageContent>,
    },
    Abort,
    /// Empties both queues and answers their texts (pi 0.84.4).
    ClearQueue,
    NewSession {
        parent_session: Option<String>,
    },
    GetState,
    GetMessages,
    SetModel {
        provider: String,
        model_id: String,
    },
    CycleModel,
    GetAvailableModels,
    SetThinkingLevel {
        level: String,
    },
    CycleThinkingLevel,
    GetAvailableThinkingLevels,
    SetSteeringMode {
        mode: String,
    },
    SetFollowUpMode {
        mode: String,
    },
    /// pi-rs: the tool sandbox for tools started from now on (README "Sandbox").
    SetSandbox {
        mode: String,
        network: Option<bool>,
    },
    Compact {
        custom_instructions: Option<String>,
    },
    SetAutoCompaction {
        enabled: bool,
    },
    SetAutoRetry {
        enabled: bool,
    },
    AbortRetry,
    Bash {
        command: String,
        /// pi 1.6.0: the output is kept in the session but never sent to the model.
        exclude_from_context: Option<bool>,
    },
    AbortBash,
    GetSessionStats,
    ExportHtml {
        output_path: Option<String>,
    },
    SwitchSession {
        session_path: String,
    },
    Fork {
        entry_id: String,
    },
    Clone,
    GetForkMessages,
    GetEntries {
        since: Option<String>,
    },
    GetTree,
    GetLastAssistantText,
    SetSessionName {
        name: String,
    },
    GetCommands,
    /// pi-rs: MCP servers with their state, tool counts and errors.
    GetMcpServers,
    /// An answer to an `extension_ui_request`; produces no response record.
    ExtensionUiResponse {
        id: String,
        value: Option<Value>,
        confirmed: Option<bool>,
        cancelled: bool,
    },
}

/// A stdin record that could not become a `Request`; answered with `success:false`.
#[derive(Debug, PartialEq)]
pub struct Rejected {
    pub id: Option<Value>,
    /// The `command` field of the error response: the record's `type`, or "parse".
    pub command: String,
    pub error: String,
}

impl Rejected {
    pub fn to_response(&self) -> Response {
        Response::error(self.id.as_ref(), &self.command, &self.error)
    }
}

/// Parses one framed record.
pub fn parse_record(bytes: &[u8]) -> Result<Request, Rejected> {
    let parse_error = |error: String| Rejected {
        id: None,
        command: "parse".into(),
        error,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        parse_error(format!(
            "Failed to parse command: invalid UTF-8 at byte {}",
            e.valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(parse_error(
            "Failed to parse command: Unexpected end of JSON input".into(),
        ));
    }
    let value: Value = super::jsonl::parse_value(text).map_err(|e| Rejected {
        // An object serde refuses as a whole (nesting past its limit, `1e9999`) still names
        // its request: the error echoes that id.
        id: top_level_id(text),
        ..parse_error(format!("Failed to parse command: {e}"))
    })?;
    let Value::Object(object) = value else {
        let kind = json_kind(&value);
        return Err(parse_error(format!(
            "Failed to parse command: expected a JSON object, got {kind}"
        )));
    };
    parse_command(object)
}

/// The `id` member of the top-level object in `text` (a string or a number), found by scanning
/// without building the document: strings are skipped whole, nesting is only counted.
fn top_level_id(text: &str) -> Option<Value> {
    let bytes = text.as_bytes();
    let (mut depth, mut at) = (0usize, 0usize);
    let mut expect_key = false;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                let start = at;
                at += 1;
                while at < bytes.len() && bytes[at] != b'"' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
                at += 1;
                let is_id = depth == 1 && expect_key && text.get(start..at) == Some("\"id\"");
                expect_key = false;
                if is_id {
                    let rest = text.get(at..)?.trim_start().strip_prefix(':')?;
                    let value = serde_json::Deserializer::from_str(rest)
                        .into_iter::<Value>()
                        .next()?
                        .ok()?;
                    return matches!(value, Value::String(_) | Value::Number(_)).then_some(value);
                }
                continue;
            }
            b'{' => {
                depth += 1;
                expect_key = depth == 1;
            }
            b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' => expect_key = depth == 1,
            _ => {}
        }
        at += 1;
    }
    None
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_command(object: Map<String, Value>) -> Result<Request, Rejected> {
    let id = object.get("id").cloned();
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(other) => {
            return Err(Rejected {
                id,
                command: "parse".into(),
                error: format!(
                    "Invalid command: \"type\" must be a string, got {}",
                    json_kind(other)
                ),
            });
        }
        None => {
            return Err(Rejected {
                id,
                command: "parse".into(),
                error: "Invalid command: missing \"type\" field".into(),
            });
        }
    };
    let fields = Fields {
        object: &object,
        command: &kind,
    };
    let command = match kind.as_str() {
        "prompt" => Command::Prompt {
            message: fields.string("message")?,
            images: fields.images()?,
            streaming_behavior: match fields.opt_string("streamingBehavior")?.as_deref() {
                None => None,
                Some("steer") => Some(StreamingBehavior::Steer),
                Some("followUp") => Some(StreamingBehavior::FollowUp),
                Some(other) => {
                    return Err(fields.error(format!(
                        "Invalid streamingBehavior \"{other}\": expected \"steer\" or \"followUp\""
                    )));
                }
            },
        },
        "steer" => Command::Steer {
            message: fields.string("message")?,
            images: fields.images()?,
        },
        "follow_up" => Command::FollowUp {
            message: fields.string("message")?,
            images: fields.images()?,
        },
        "abort" => Command::Abort,
        "clear_queue" => Command::ClearQueue,
        "new_session" => Command::NewSession {
            parent_session: fields.opt_string("parentSession")?,
        },
        "get_state" => Command::GetState,
        "get_messages" => Command::GetMessages,
        "set_model" => Command::SetModel {
            provider: fields.string("provider")?,
            model_id: fields.string("modelId")?,
        },
        "cycle_model" => Command::CycleModel,
        "get_available_models" => Command::GetAvailableModels,
        "set_thinking_level" => Command::SetThinkingLevel {
            level: fields.string("level")?,
        },
        "cycle_thinking_level" => Command::CycleThinkingLevel,
        "get_available_thinking_levels" => Command::GetAvailableThinkingLevels,
        "set_steering_mode" => Command::SetSteeringMode {
            mode: fields.string("mode")?,
        },
        "set_follow_up_mode" => Command::SetFollowUpMode {
            mode: fields.string("mode")?,
        },
        "set_sandbox" => Command::SetSandbox {
            mode: fields.string("mode")?,
            network: fields.opt_bool("network")?,
        },
        "compact" => Command::Compact {
            custom_instructions: fields.opt_string("customInstructions")?,
        },
        "set_auto_compaction" => Command::SetAutoCompaction {
            enabled: fields.bool("enabled")?,
        },
        "set_auto_retry" => Command::SetAutoRetry {
            enabled: fields.bool("enabled")?,
        },
        "abort_retry" => Command::AbortRetry,
        "bash" => Command::Bash {
            command: fields.string("command")?,
            exclude_from_context: fields.opt_bool("excludeFromContext")?,
        },
        "abort_bash" => Command::AbortBash,
        "get_session_stats" => Command::GetSessionStats,
        "export_html" => Command::ExportHtml {
            output_path: fields.opt_string("outputPath")?,
        },
        "switch_session" => Command::SwitchSession {
            session_path: fields.string("sessionPath")?,
        },
        "fork" => Command::Fork {
            entry_id: fields.string("entryId")?,
        },
        "clone" => Command::Clone,
        "get_fork_messages" => Command::GetForkMessages,
        "get_entries" => Command::GetEntries {
            since: fields.opt_string("since")?,
        },
        "get_tree" => Command::GetTree,
        "get_last_assistant_text" => Command::GetLastAssistantText,
        "set_session_name" => Command::SetSessionName {
            name: fields.string("name")?,
        },
        "get_commands" => Command::GetCommands,
        "get_mcp_servers" => Command::GetMcpServers,
        "extension_ui_response" => Command::ExtensionUiResponse {
            id: fields.string("id")?,
            value: object.get("value").cloned(),
            confirmed: object.get("confirmed").and_then(Value::as_bool),
            cancelled: object
                .get("cancelled")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
        other => {
            return Err(Rejected {
                id,
                command: other.to_string(),
                error: format!("Unknown command: {other}"),
            });
        }
    };
    Ok(Request { id, command })
}

/// Field access with errors that name the command and the field.
struct Fields<'a> {
    object: &'a Map<String, Value>,
    command: &'a str,
}

impl Fields<'_> {
    fn error(&self, error: String) -> Rejected {
        Rejected {
            id: self.object.get("id").cloned(),
            command: self.command.to_string(),
            error,
        }
    }

    fn string(&self, name: &str) -> Result<String, Rejected> {
        match self.object.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            None | Some(Value::Null) => {
                Err(self.error(format!("Missing required field \"{name}\" (a string)")))
            }
            Some(other) => Err(self.error(format!(
                "Field \"{name}\" must be a string, got {}",
                json_kind(other)
            ))),
        }
    }

    fn opt_string(&self, name: &str) -> Result<Option<String>, Rejected> {
        match self.object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.error(format!(
                "Field \"{name}\" must be a string, got {}",
                json_kind(other)
            ))),
        }
    }

    fn opt_bool(&self, name: &str) -> Result<Option<bool>, Rejected> {
        match self.object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.bool(name).map(Some),
        }
    }

    fn bool(&self, name: &str) -> Result<bool, Rejected> {
        match self.object.get(name) {
            Some(Value::Bool(b)) => Ok(*b),
            None | Some(Value::Null) => {
                Err(self.error(format!("Missing required field \"{name}\" (a boolean)")))
            }
            Some(other) => Err(self.error(format!(
                "Field \"{name}\" must be a boolean, got {}",
                json_kind(other)
            ))),
        }
    }

    fn images(&self) -> Result<Vec<ImageContent>, Rejected> {
        let items = match self.object.get("images") {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(items)) => items,
            Some(other) => {
                return Err(self.error(format!(
                    "Field \"images\" must be an array, got {}",
                    json_kind(other)
                )));
            }
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let data = item.get("data").and_then(Value::as_str);
                let mime = item.get("mimeType").and_then(Value::as_str);
                match (data, mime) {
                    (Some(data), Some(mime)) => {
                        Ok(ImageContent { data: data.to_string(), mime_type: mime.to_string() })
                    }
                    _ => Err(self.error(format!(
                        "Invalid images[{i}]: expected {{\"type\":\"image\",\"data\":<base64>,\"mimeType\":<string>}}"
                    ))),
                }
            })
            .collect()
    }
}

/// What a successful response carries in `data`.
#[derive(Debug, PartialEq)]
pub enum ResponseData {
    None,
    Value(Value),
    /// `{"disposition":…}` of `prompt`, `steer`, `follow_up` (pi 0.99.0; none in legacy).
    Disposition(&'static str),
    /// The whole line, already written (long data built as text: a session's tree, entries).
    Line(String),
}

/// One `response` record: `{"id"?, "type":"response", "command", "success", "data"?|"error"}`.
#[derive(Debug, PartialEq)]
pub struct Response {
    pub id: Option<Value>,
    pub command: String,
    pub outcome: Result<ResponseData, String>,
}

impl Response {
    pub fn ok(id: Option<&Value>, command: &str, data: Option<Value>) -> Response {
        Response {
            id: id.cloned(),
            command: command.to_string(),
            outcome: Ok(data.map_or(ResponseData::None, ResponseData::Value)),
        }
    }

    pub fn error(id: Option<&Value>, command: &str, error: &str) -> Response {
        Response {
            id: id.cloned(),
            command: command.to_string(),
            outcome: Err(error.to_string()),
        }
    }

    /// `data: {"disposition": …}` (`started`, `queued`, `handled`).
    pub fn disposition(id: Option<&Value>, command: &str, disposition: &'static str) -> Response {
        Response {
            id: id.cloned(),
            command: command.to_string(),
            outcome: Ok(ResponseData::Disposition(disposition)),
        }
    }

    /// `get_entries`: `data: {"entries", "leafId"}`, the entries already a JSON array (written
    /// from the session without a JSON value per entry).
    pub fn entries(id: Option<&Value>, entries_json: &str, leaf_id: Option<&str>) -> Response {
        let leaf = serde_json::to_string(&leaf_id).unwrap_or_default();
        Response::ok_text(id, "get_entries", |prefix, suffix| {
            format!("{prefix}{{\"entries\":{entries_json},\"leafId\":{leaf}}}{suffix}")
        })
    }

    /// `get_tree`: `data: {"tree", "leafId"}`; `write_tree(before, after)` returns the whole
    /// line, `before + tree + after` (a deep tree is written without recursion).
    pub fn tree(
        id: Option<&Value>,
        leaf_id: Option<&str>,
        write_tree: impl FnOnce(&str, &str) -> String,
    ) -> Response {
        let leaf = serde_json::to_string(&leaf_id).unwrap_or_default();
        Response::ok_text(id, "get_tree", |prefix, suffix| {
            let before = format!("{prefix}{{\"tree\":");
            let after = format!(",\"leafId\":{leaf}}}{suffix}");
            write_tree(&before, &after)
        })
    }

    /// A success whose `data` is written as text: `write(prefix, suffix)` returns the whole line,
    /// `prefix + data + suffix` (long data built without a JSON value, or any recursion).
    fn ok_text(
        id: Option<&Value>,
        command: &str,
        write: impl FnOnce(&str, &str) -> String,
    ) -> Response {
        let head = serde_json::to_string(&envelope(id, command, true)).unwrap_or_default();
        let prefix = format!("{},\"data\":", head.strip_suffix('}').unwrap_or(&head));
        Response {
            id: id.cloned(),
            command: command.to_string(),
            outcome: Ok(ResponseData::Line(write(&prefix, "}"))),
        }
    }

    /// [`Response::to_record`], moving a pre-serialized line (tens of MB for a long session's
    /// `get_tree`) into the record instead of copying it.
    pub fn into_record(self, profile: super::Profile) -> super::Record {
        match self.outcome {
            Ok(ResponseData::Line(line)) => super::Record::Raw(line),
            outcome => Response { outcome, ..self }.to_record(profile),
        }
    }

    /// The record in `profile`'s shape (legacy: no `disposition`, which 0.73.1 never sent).
    pub fn to_record(&self, profile: super::Profile) -> super::Record {
        let mut record = envelope(self.id.as_ref(), &self.command, self.outcome.is_ok());
        match &self.outcome {
            Ok(ResponseData::None) => {}
            Ok(ResponseData::Value(data)) => {
                record.insert("data".into(), data.clone());
            }
            Ok(ResponseData::Disposition(_)) if profile == super::Profile::Legacy => {}
            Ok(ResponseData::Disposition(disposition)) => {
                record.insert("data".into(), json!({ "disposition": disposition }));
            }
            Ok(ResponseData::Line(line)) => return super::Record::Raw(line.clone()),
            Err(error) => {
                record.insert("error".into(), json!(error));
            }
        }
        super::Record::from(Value::Object(record))
    }
}

/// `{"id"?, "type":"response", "command", "success"}` — pi's key order.
fn envelope(id: Option<&Value>, command: &str, success: bool) -> Map<String, Value> {
    let mut record = Map::new();
    if let Some(id) = id {
        record.insert("id".into(), id.clone());
    }
    record.insert("type".into(), json!("response"));
    record.insert("command".into(), json!(command));
    record.insert("success".into(), json!(success));
    record
}

impl Command {
    /// The command's wire name, as echoed in its response.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Prompt { .. } => "prompt",
            Command::Steer { .. } => "steer",
            Command::FollowUp { .. } => "follow_up",
            Command::Abort => "abort",
            Command::ClearQueue => "clear_queue",
            Command::NewSession { .. } => "new_session",
            Command::GetState => "get_state",
            Command::GetMessages => "get_messages",
            Command::SetModel { .. } => "set_model",
            Command::CycleModel => "cycle_model",
            Command::GetAvailableModels => "get_available_models",
            Command::SetThinkingLevel { .. } => "set_thinking_level",
            Command::CycleThinkingLevel => "cycle_thinking_level",
            Command::GetAvailableThinkingLevels => "get_available_thinking_levels",
            Command::SetSteeringMode { .. } => "set_steering_mode",
            Command::SetSandbox { .. } => "set_sandbox",
            Command::SetFollowUpMode { .. } => "set_follow_up_mode",
            Command::Compact { .. } => "compact",
            Command::SetAutoCompaction { .. } => "set_auto_compaction",
            Command::SetAutoRetry { .. } => "set_auto_retry",
            Command::AbortRetry => "abort_retry",
            Command::Bash { .. } => "bash",
            Command::AbortBash => "abort_bash",
            Command::GetSessionStats => "get_session_stats",
            Command::ExportHtml { .. } => "export_html",
            Command::SwitchSession { .. } => "switch_session",
            Command::Fork { .. } => "fork",
            Command::Clone => "clone",
            Command::GetForkMessages => "get_fork_messages",
            Command::GetEntries { .. } => "get_entries",
            Command::GetTree => "get_tree",
            Command::GetLastAssistantText => "get_last_assistant_text",
            Command::SetSessionName { .. } => "set_session_name",
            Command::GetCommands => "get_commands",
            Command::GetMcpServers => "get_mcp_servers",
            Command::ExtensionUiResponse { .. } => "extension_ui_response",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(line: &str) -> Value {
        let response = parse_record(line.as_bytes()).unwrap_err().to_response();
        response
            .to_record(crate::rpc::Profile::Default)
            .to_value()
            .unwrap()
    }

    #[test]
    fn parses_prompt_with_everything() {
        let req = parse_record(
            br#"{"id":7,"type":"prompt","message":"hi","images":[{"type":"image","data":"QQ==","mimeType":"image/png"}],"streamingBehavior":"followUp","extra":1}"#,
        )
        .unwrap();
        assert_eq!(req.id, Some(json!(7)));
        assert_eq!(
            req.command,
            Command::Prompt {
                message: "hi".into(),
                images: vec![ImageContent {
                    data: "QQ==".into(),
                    mime_type: "image/png".into()
                }],
                streaming_behavior: Some(StreamingBehavior::FollowUp),
            }
        );
    }

    #[test]
    fn malformed_records_are_parse_errors() {
        let r = rejected("not json");
        assert_eq!(r["command"], "parse");
        assert!(
            r["error"]
                .as_str()
                .unwrap()
                .starts_with("Failed to parse command: ")
        );
        assert_eq!(
            rejected("")["error"],
            "Failed to parse command: Unexpected end of JSON input"
        );
        assert_eq!(
            rejected("null")["error"],
            "Failed to parse command: expected a JSON object, got null"
        );
        assert_eq!(
            rejected("[]")["error"],
            "Failed to parse command: expected a JSON object, got an array"
        );
        let invalid = parse_record(b"{\"type\":\"get_state\xff\"}").unwrap_err();
        assert!(invalid.error.contains("invalid UTF-8"));
    }

    #[test]
    fn unknown_commands_echo_the_id_with_its_type() {
        assert_eq!(
            rejected(r#"{"id":{"n":1},"type":"nope"}"#),
            json!({"id":{"n":1},"type":"response","command":"nope","success":false,"error":"Unknown command: nope"})
        );
    }

    #[test]
    fn missing_and_mistyped_fields_name_the_field() {
        assert_eq!(
            rejected(r#"{"id":"a","type":"prompt"}"#),
            json!({"id":"a","type":"response","command":"prompt","success":false,"error":"Missing required field \"message\" (a string)"})
        );
        assert_eq!(
            rejected(r#"{"type":"set_auto_retry","enabled":"yes"}"#)["error"],
            "Field \"enabled\" must be a boolean, got a string"
        );
        assert_eq!(
            rejected(r#"{"id":1}"#)["error"],
            "Invalid command: missing \"type\" field"
        );
    }

    #[test]
    fn response_key_order_is_pis() {
        let line = |response: Response| match response.to_record(crate::rpc::Profile::Default) {
            crate::rpc::Record::Json(value) => value.to_string(),
            other => panic!("{other:?}"),
        };
        let ok = Response::ok(Some(&json!("1")), "get_state", Some(json!({})));
        assert_eq!(
            line(ok),
            r#"{"id":"1","type":"response","command":"get_state","success":true,"data":{}}"#
        );
        let err = Response::error(None, "set_model", "Model not found: a/b");
        assert_eq!(
            line(err),
            r#"{"type":"response","command":"set_model","success":false,"error":"Model not found: a/b"}"#
        );
    }

    #[test]
    fn dispositions_are_left_out_in_the_legacy_profile_and_text_data_is_spliced_once() {
        use crate::rpc::{Profile, Record};
        let queued = Response::disposition(Some(&json!(1)), "steer", "queued");
        assert_eq!(
            queued.to_record(Profile::Default).to_value().unwrap(),
            json!({"id":1,"type":"response","command":"steer","success":true,"data":{"disposition":"queued"}})
        );
        assert_eq!(
            queued.to_record(Profile::Legacy).to_value().unwrap(),
            json!({"id":1,"type":"response","command":"steer","success":true})
        );
        let tree = Response::tree(Some(&json!("t")), None, |before, after| {
            format!("{before}[]{after}")
        });
        let Record::Raw(line) = tree.to_record(Profile::Legacy) else {
            panic!("expected a raw line");
        };
        assert_eq!(
            line,
            r#"{"id":"t","type":"response","command":"get_tree","success":true,"data":{"tree":[],"leafId":null}}"#
        );
    }
}
