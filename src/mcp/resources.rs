//! The resource tools pi (and Codex) define: `list_mcp_resources`, `list_mcp_resource_templates`
//! and `read_mcp_resource`. A call runs on its own "tool-<callId>" thread: it sends requests to
//! the servers' connection threads and waits for their answers; an abort (the handle dropped)
//! cancels them. MCP Apps resources (`ui://`, `profile=mcp-app`) and icons are left out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::Sender;
use serde_json::{Map, Value, json};

use super::connection::{Command, Work};
use crate::child::CancelFlag;
use crate::messages::ToolSpec;
use crate::messages::{ContentBlock, TextContent, ToolCall};
use crate::tools::{ToolEvent, ToolEventKind, ToolHandle, ToolOutput};

pub const LIST_RESOURCES: &str = "list_mcp_resources";
pub const LIST_TEMPLATES: &str = "list_mcp_resource_templates";
pub const READ_RESOURCE: &str = "read_mcp_resource";

pub fn specs() -> Vec<ToolSpec> {
    let list_params = json!({"type": "object", "properties": {
        "server": {"type": "string", "description": "MCP server name. Omit to list every server with resources."},
        "cursor": {"type": "string", "description": "Opaque cursor from a previous call with the same server; omit for the first page."}
    }, "additionalProperties": false});
    vec![
        ToolSpec {
            name: LIST_RESOURCES.into(),
            description: "Lists resources provided by MCP servers. Resources allow servers to share data that provides context to language models, such as files, database schemas, or application-specific information. Prefer resources over web search when possible.".into(),
            parameters: list_params.clone(),
        },
        ToolSpec {
            name: LIST_TEMPLATES.into(),
            description: "Lists resource templates provided by MCP servers. Parameterized resource templates allow servers to share data that takes parameters and provides context to language models, such as files, database schemas, or application-specific information. Prefer resource templates over web search when possible.".into(),
            parameters: list_params,
        },
        ToolSpec {
            name: READ_RESOURCE.into(),
            description: "Read a specific resource from an MCP server given the server name and resource URI.".into(),
            parameters: json!({"type": "object", "properties": {
                "server": {"type": "string", "description": "MCP server name exactly as configured. Must match the 'server' field returned by list_mcp_resources."},
                "uri": {"type": "string", "description": "Resource URI to read. Must be one of the URIs returned by list_mcp_resources."}
            }, "required": ["server", "uri"], "additionalProperties": false}),
        },
    ]
}

type Servers = Vec<(String, Sender<Command>)>;

/// Runs a resource tool call on its own thread.
pub fn spawn(
    call: ToolCall,
    servers: Servers,
    keys: Arc<AtomicU64>,
    events: Sender<ToolEvent>,
) -> ToolHandle {
    let cancel = CancelFlag::default();
    let flag = cancel.clone();
    let call_id = call.id.clone();
    let thread_events = events.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("tool-{}", call.id))
        .spawn(move || {
            let asker = Asker {
                servers: &servers,
                keys: &keys,
                cancel: &flag,
            };
            let output = match run(&call.name, &call.arguments, &asker) {
                Ok(output) => output,
                Err(e) => ToolOutput::error(e),
            };
            let _ = thread_events.send(ToolEvent {
                call_id: call.id,
                kind: ToolEventKind::Finished(output),
            });
        });
    if let Err(e) = spawned {
        let _ = events.send(ToolEvent {
            call_id,
            kind: ToolEventKind::Finished(ToolOutput::error(format!(
                "Could not start tool thread: {e}"
            ))),
        });
    }
    ToolHandle::with_cancel_hook(cancel, Box::new(|| {}))
}

struct Asker<'a> {
    servers: &'a Servers,
    keys: &'a AtomicU64,
    cancel: &'a CancelFlag,
}

impl Asker<'_> {
    fn find(&self, name: &str) -> Result<&(String, Sender<Command>), String> {
        self.servers.iter().find(|(n, _)| n == name).ok_or_else(|| {
            let available: Vec<&str> = self.servers.iter().map(|(n, _)| n.as_str()).collect();
            match available.is_empty() {
                true => format!("MCP server \"{name}\" has no resources"),
                false => format!(
                    "MCP server \"{name}\" has no resources. Servers with resources: {}",
                    available.join(", ")
                ),
            }
        })
    }

    /// One request to one server; ends by its answer (the connection applies the timeout) or the abort.
    fn ask(
        &self,
        server: &Sender<Command>,
        method: &'static str,
        params: Option<Value>,
    ) -> Result<Value, String> {
        let key = self.keys.fetch_add(1, Ordering::SeqCst);
        let (reply, answer) = crossbeam_channel::bounded(1);
        server
            .send(Command::Work {
                key,
                work: Work::Request {
                    method,
                    params,
                    reply,
                },
            })
            .map_err(|_| "MCP server is not running".to_string())?;
        loop {
            match answer.recv_timeout(Duration::from_millis(20)) {
                Ok(result) => return result,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err("MCP connection closed".into());
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) if self.cancel.is_cancelled() => {
                    let _ = server.send(Command::Cancel { key });
                    return Err(crate::tools::ABORTED.into());
                }
                Err(_) => {}
            }
        }
    }

    /// Every page of a list.
    fn all(
        &self,
        server: &Sender<Command>,
        method: &'static str,
        key: &str,
    ) -> Result<Vec<Value>, String> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1000 {
            let page = self.ask(
                server,
                method,
                cursor.as_ref().map(|c| json!({"cursor": c})),
            )?;
            let Some(list) = page.get(key).and_then(Value::as_array) else {
                return Err(format!("Invalid MCP {method} result"));
            };
            items.extend(list.iter().cloned());
            match page
                .get("nextCursor")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
            {
                Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_string()),
                _ => return Ok(items),
            }
        }
        Ok(items)
    }
}

fn string_arg(args: &Value, key: &str) -> Result<Option<String>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string()).filter(|s| !s.is_empty())),
        Some(_) => Err(format!("{key} must be a string")),
    }
}

fn is_app(item: &Value) -> bool {
    let uri = item
        .get("uri")
        .or(item.get("uriTemplate"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mime = item
        .get("mimeType")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    uri.starts_with("ui://") || mime.replace([' ', '"'], "").contains(";profile=mcp-app")
}

fn listed(server: &str, item: &Value, name_from: &str) -> Value {
    let mut out = Map::new();
    out.insert("server".into(), json!(server));
    if let Value::Object(map) = item {
        for (k, v) in map {
            if k != "_meta" && k != "icons" {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if !out.contains_key("name") {
        let fallback = item.get(name_from).cloned().unwrap_or(Value::Null);
        out.insert("name".into(), fallback);
    }
    Value::Object(out)
}

fn json_result(tool: &str, server: Option<&str>, payload: Value) -> ToolOutput {
    let text = ContentBlock::Text(TextContent::new(&payload.to_string()));
    let (content, path) = super::content::limit(vec![text]);
    let mut details = json!({"server": server.unwrap_or(""), "tool": tool});
    if let Some(path) = path {
        details["fullOutputPath"] = json!(path);
    }
    ToolOutput {
        content,
        details: Some(details),
        is_error: false,
    }
}

fn run(tool: &str, args: &Value, asker: &Asker) -> Result<ToolOutput, String> {
    let (method, key, name_from) = match tool {
        LIST_RESOURCES => ("resources/list", "resources", "uri"),
        LIST_TEMPLATES => (
            "resources/templates/list",
            "resourceTemplates",
            "uriTemplate",
        ),
        READ_RESOURCE => return read(args, asker),
        other => return Err(format!("Tool {other} not found")),
    };
    let server = string_arg(args, "server")?;
    let cursor = string_arg(args, "cursor")?;
    if let Some(name) = server {
        let (name, commands) = asker.find(&name)?;
        let page = asker.ask(commands, method, cursor.map(|c| json!({"cursor": c})))?;
        let items: Vec<Value> = page
            .get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("Invalid MCP {method} result"))?
            .iter()
            .filter(|i| !is_app(i))
            .map(|i| listed(name, i, name_from))
            .collect();
        let mut payload = json!({"server": name, key: items});
        if let Some(next) = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
        {
            payload["nextCursor"] = json!(next);
        }
        return Ok(json_result(tool, Some(name), payload));
    }
    if cursor.is_some() {
        return Err("cursor can only be used when a server is specified".into());
    }
    let mut items = Vec::new();
    let mut errors = Vec::new();
    for (name, commands) in asker.servers {
        match asker.all(commands, method, key) {
            Ok(list) => items.extend(
                list.iter()
                    .filter(|i| !is_app(i))
                    .map(|i| listed(name, i, name_from)),
            ),
            Err(e) if e == crate::tools::ABORTED => return Err(e),
            Err(e) => errors.push(json!({"server": name, "error": e})),
        }
    }
    let mut payload = json!({key: items});
    if !errors.is_empty() {
        payload["errors"] = json!(errors);
    }
    Ok(json_result(tool, None, payload))
}

fn read(args: &Value, asker: &Asker) -> Result<ToolOutput, String> {
    let server = string_arg(args, "server")?.ok_or("server must be provided")?;
    let uri = string_arg(args, "uri")?.ok_or("uri must be provided")?;
    let (name, commands) = asker.find(&server)?;
    let result = asker.ask(commands, "resources/read", Some(json!({"uri": uri})))?;
    let contents = result
        .get("contents")
        .and_then(Value::as_array)
        .ok_or("Invalid MCP resources/read result")?;
    let mut blocks = Vec::new();
    for item in contents {
        if contents.len() > 1 {
            let item_uri = item.get("uri").and_then(Value::as_str).unwrap_or("");
            blocks.push(ContentBlock::Text(TextContent::new(&format!(
                "{item_uri}:"
            ))));
        }
        blocks.push(super::content::resource_contents(item));
    }
    if blocks.is_empty() {
        blocks.push(ContentBlock::Text(TextContent::new(&format!(
            "Resource {uri} is empty."
        ))));
    }
    let (content, path) = super::content::limit(blocks);
    let mut details = json!({"server": name, "tool": READ_RESOURCE});
    if let Some(path) = path {
        details["fullOutputPath"] = json!(path);
    }
    Ok(ToolOutput {
        content,
        details: Some(details),
        is_error: false,
    })
}
