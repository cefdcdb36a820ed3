//! MCP servers as a component of pi-rs: the agent's side (`McpHost`) and one connection thread
//! per server (`connection`). The agent owns the host; the host owns each server's command
//! sender and thread handle, and the table of tools the model sees. Everything the servers say
//! arrives as `McpEvent`s on one channel the agent's loop selects on.
//!
//! A call to `mcp__<server>__<tool>` runs in the agent's tool batch like any other tool (approval
//! gate, extension hooks, session log): `spawn_call` hands it to the server's thread, whose reply
//! comes back on the batch's tool channel; dropping the returned `ToolHandle` (abort) cancels it
//! on the server (`notifications/cancelled`). The resource tools run on a "tool-<callId>" thread
//! that asks the servers and waits for their answers (or the abort).
//!
//! Ends: `shutdown` drops every command sender (each thread closes its transport and ends) and
//! joins the threads; stdio servers still alive at exit are killed with their process groups.

pub mod cli;
pub mod config;
pub mod connection;
pub mod content;
pub mod jsonrpc;
pub mod log;
pub mod naming;
pub mod resources;
pub mod transport;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::{Value, json};

use crate::messages::ToolCall;
use crate::provider::ToolSpec;
use crate::tools::{ToolEvent, ToolHandle};
use config::{Exposure, McpConfig, ServerConfig};
use connection::{Command, McpEvent, McpEventKind, Work};

pub use connection::DEFAULT_STARTUP_WAIT;

/// Which MCP tools `--tools` / `--no-tools` leave (pi's rule: `--tools` filters MCP tools only
/// once one of its entries starts with `mcp__`; the resource tools count as MCP tools).
#[derive(Clone, Debug, Default)]
pub struct ToolFilter {
    none: bool,
    patterns: Option<Vec<String>>,
}

impl ToolFilter {
    pub fn from_cli(tools: Option<&[String]>, no_tools: bool) -> ToolFilter {
        let patterns = tools
            .filter(|list| list.iter().any(|t| t.starts_with("mcp__")))
            .map(<[String]>::to_vec);
        ToolFilter {
            none: no_tools,
            patterns,
        }
    }
    pub fn allows(&self, name: &str) -> bool {
        !self.none
            && self
                .patterns
                .as_ref()
                .is_none_or(|patterns| patterns.iter().any(|p| naming::pattern_matches(p, name)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Disabled,
    Connecting,
    Connected,
    Failed,
    Disconnected,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Disabled => "disabled",
            Status::Connecting => "connecting",
            Status::Connected => "connected",
            Status::Failed => "failed",
            Status::Disconnected => "disconnected",
        }
    }
}

struct Server {
    config: ServerConfig,
    commands: Option<Sender<Command>>,
    thread: Option<std::thread::JoinHandle<()>>,
    status: Status,
    /// The server's tools as it listed them (kept while disconnected: calls reconnect).
    tools: Vec<Value>,
    has_resources: bool,
    instructions: Option<String>,
    protocol_version: Option<String>,
    error: Option<String>,
}

/// One tool the model can call.
#[derive(Clone, Debug)]
struct McpTool {
    name: String,
    server: usize,
    tool: String,
    spec: ToolSpec,
}

pub struct McpHost {
    servers: Vec<Server>,
    events: Receiver<McpEvent>,
    tools: Vec<McpTool>,
    filter: ToolFilter,
    config_errors: Vec<String>,
    next_key: Arc<AtomicU64>,
    /// The first prompt waited for servers with declared tools (once per process, as pi).
    waited: bool,
    /// Startup problems were reported to the client.
    reported: bool,
}

impl McpHost {
    /// Starts a connection thread for every enabled server.
    pub fn start(
        config: McpConfig,
        filter: ToolFilter,
        cwd: PathBuf,
        agent_dir: PathBuf,
    ) -> McpHost {
        let (events_tx, events) = crossbeam_channel::unbounded();
        let mut servers = Vec::new();
        let mut config_errors = config.errors;
        for (index, server) in config.servers.into_iter().enumerate() {
            let mut entry = Server {
                status: Status::Disabled,
                commands: None,
                thread: None,
                tools: Vec::new(),
                has_resources: false,
                instructions: None,
                protocol_version: None,
                error: None,
                config: server,
            };
            if entry.config.enabled {
                let spawned = connection::spawn(
                    index,
                    entry.config.clone(),
                    cwd.clone(),
                    agent_dir.clone(),
                    events_tx.clone(),
                );
                match spawned {
                    Ok((commands, thread)) => {
                        entry.status = Status::Connecting;
                        entry.commands = Some(commands);
                        entry.thread = Some(thread);
                    }
                    Err(e) => config_errors.push(format!(
                        "{}: cannot start its thread: {e}",
                        entry.config.name
                    )),
                }
            }
            servers.push(entry);
        }
        McpHost {
            servers,
            events,
            tools: Vec::new(),
            filter,
            config_errors,
            next_key: Arc::new(AtomicU64::new(1)),
            waited: false,
            reported: false,
        }
    }

    pub fn events(&self) -> &Receiver<McpEvent> {
        &self.events
    }

    /// Applies a server's news; returns true when the tool table changed.
    pub fn on_event(&mut self, event: McpEvent) -> bool {
        let Some(server) = self.servers.get_mut(event.server) else {
            return false;
        };
        match event.kind {
            McpEventKind::Connecting => {
                if server.status != Status::Disconnected && server.status != Status::Failed {
                    server.status = Status::Connecting;
                }
                false
            }
            McpEventKind::Connected {
                tools,
                has_resources,
                instructions,
                protocol_version,
            } => {
                server.status = Status::Connected;
                server.tools = tools;
                server.has_resources = has_resources;
                server.instructions = instructions;
                server.protocol_version = Some(protocol_version);
                server.error = None;
                self.rebuild_tools()
            }
            McpEventKind::ToolsChanged(tools) => {
                server.tools = tools;
                self.rebuild_tools()
            }
            McpEventKind::Failed(error) => {
                server.status = Status::Failed;
                server.error = Some(error);
                false
            }
            McpEventKind::Disconnected(error) => {
                server.status = Status::Disconnected;
                server.error = Some(error);
                false
            }
        }
    }

    /// Names every declared tool (pi's naming: all tools whose sanitized names collide get the
    /// hash suffix, so which one keeps the plain name does not depend on list order).
    fn rebuild_tools(&mut self) -> bool {
        let mut tools: Vec<McpTool> = Vec::new();
        for (index, server) in self.servers.iter().enumerate() {
            let name = &server.config.name;
            let plain: Vec<String> = server
                .tools
                .iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str))
                .map(|t| naming::plain_tool_name(name, t))
                .collect();
            for tool in &server.tools {
                let Some(tool_name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                if !server.config.tool_exposure(tool_name).is_declared() {
                    continue;
                }
                let taken = |candidate: &str| {
                    tools.iter().any(|t| t.name == candidate)
                        || plain.iter().filter(|p| *p == candidate).count() > 1
                };
                let model_name = naming::tool_name(name, tool_name, &taken);
                if !self.filter.allows(&model_name) {
                    continue;
                }
                tools.push(McpTool {
                    spec: tool_spec(name, tool_name, tool, model_name.clone()),
                    name: model_name,
                    server: index,
                    tool: tool_name.to_string(),
                });
            }
        }
        let changed = tools
            .iter()
            .map(|t| &t.spec)
            .ne(self.tools.iter().map(|t| &t.spec));
        self.tools = tools;
        changed
    }

    /// Servers that offer resources to the model (enabled, not hidden, connected once).
    fn resource_servers(&self) -> Vec<(String, Sender<Command>)> {
        let mut servers: Vec<(String, Sender<Command>)> = self
            .servers
            .iter()
            .filter(|s| s.has_resources && s.config.exposure != Exposure::Hidden)
            .filter_map(|s| Some((s.config.name.clone(), s.commands.clone()?)))
            .collect();
        servers.sort_by(|a, b| a.0.cmp(&b.0));
        servers
    }

    fn resource_tools_offered(&self) -> bool {
        !self.resource_servers().is_empty()
    }

    /// What the model is offered: the servers' declared tools, then the resource tools.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.tools.iter().map(|t| t.spec.clone()).collect();
        if self.resource_tools_offered() {
            specs.extend(
                resources::specs()
                    .into_iter()
                    .filter(|s| self.filter.allows(&s.name)),
            );
        }
        specs
    }

    pub fn has_tool(&self, name: &str) -> bool {
        self.tool_specs().iter().any(|s| s.name == name)
    }

    /// Starts a call of one of `tool_specs`' tools; results arrive on `events`.
    pub fn spawn_call(&self, call: ToolCall, events: Sender<ToolEvent>) -> ToolHandle {
        let key = self.next_key.fetch_add(1, Ordering::SeqCst);
        if let Some(tool) = self.tools.iter().find(|t| t.name == call.name) {
            let server = &self.servers[tool.server];
            let readable = self.resource_tools_offered();
            let work = Work::CallTool {
                tool: tool.tool.clone(),
                arguments: match call.arguments {
                    Value::Object(_) => call.arguments.clone(),
                    _ => json!({}),
                },
                call_id: call.id.clone(),
                events: events.clone(),
                readable,
            };
            let cancel = crate::tools::CancelFlag::default();
            return match &server.commands {
                Some(commands) if commands.send(Command::Work { key, work }).is_ok() => {
                    let commands = commands.clone();
                    ToolHandle::with_cancel_hook(
                        cancel,
                        Box::new(move || {
                            let _ = commands.send(Command::Cancel { key });
                        }),
                    )
                }
                _ => {
                    let _ = events.send(ToolEvent {
                        call_id: call.id,
                        kind: crate::tools::ToolEventKind::Finished(
                            crate::tools::ToolOutput::error(format!(
                                "MCP server \"{}\" is not running",
                                server.config.name
                            )),
                        ),
                    });
                    ToolHandle::with_cancel_hook(cancel, Box::new(|| {}))
                }
            };
        }
        resources::spawn(call, self.resource_servers(), self.next_key.clone(), events)
    }

    /// Whether the first prompt should wait: a server with declared tools is still connecting.
    pub fn should_wait(&mut self) -> bool {
        if self.waited {
            return false;
        }
        let connecting = self
            .servers
            .iter()
            .any(|s| s.status == Status::Connecting && s.config.has_declared_tools());
        if !connecting {
            self.waited = true;
        }
        connecting
    }

    pub fn end_wait(&mut self) {
        self.waited = true;
    }

    /// Every enabled server has connected or failed once.
    pub fn settled(&self) -> bool {
        self.servers.iter().all(|s| s.status != Status::Connecting)
    }

    /// The one startup report (pi's text), once: config errors and failed servers.
    pub fn take_startup_report(&mut self) -> Option<String> {
        if self.reported || !self.settled() {
            return None;
        }
        self.reported = true;
        let mut lines: Vec<String> = self
            .config_errors
            .iter()
            .map(|e| format!("config: {e}"))
            .collect();
        for server in &self.servers {
            if server.status == Status::Failed {
                let first = server
                    .error
                    .as_deref()
                    .unwrap_or("unknown error")
                    .lines()
                    .next()
                    .unwrap_or("");
                lines.push(format!("{}: failed: {first}", server.config.name));
            }
        }
        if lines.is_empty() {
            return None;
        }
        let body: Vec<String> = lines.iter().map(|l| format!("  {l}")).collect();
        Some(format!(
            "MCP servers need attention:\n{}\nSend get_mcp_servers for details.",
            body.join("\n")
        ))
    }

    /// The `get_mcp_servers` answer: every configured server with its state, and config errors.
    pub fn status(&self) -> Value {
        let servers: Vec<Value> = self
            .servers
            .iter()
            .enumerate()
            .map(|(index, s)| {
                let mut entry = json!({
                    "name": s.config.name,
                    "state": s.status.as_str(),
                    "transport": match s.config.transport { config::Transport::Stdio { .. } => "stdio", config::Transport::Http { .. } => "http" },
                    "target": s.config.describe_transport(),
                    "source": s.config.source.display().to_string(),
                    "enabled": s.config.enabled,
                    "exposure": s.config.exposure_name,
                    "toolCount": s.tools.len(),
                    "tools": self.tools.iter().filter(|t| t.server == index).map(|t| t.name.clone()).collect::<Vec<_>>(),
                    "hasResources": s.has_resources,
                });
                if let Some(version) = &s.protocol_version {
                    entry["protocolVersion"] = json!(version);
                }
                if let Some(description) = s.config.description.as_ref().or(s.instructions.as_ref()) {
                    entry["description"] = json!(description.lines().next().unwrap_or(""));
                }
                if let Some(error) = &s.error {
                    entry["error"] = json!(error);
                }
                entry
            })
            .collect();
        json!({"servers": servers, "errors": self.config_errors})
    }

    /// Ends every connection; waits up to `grace` for the threads.
    pub fn shutdown(mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        for server in &mut self.servers {
            server.commands = None;
        }
        for server in &mut self.servers {
            if let Some(thread) = server.thread.take() {
                while !thread.is_finished() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if thread.is_finished() {
                    let _ = thread.join();
                }
            }
        }
    }
}

/// A server tool as the model sees it (pi's description fallbacks and schema normalization:
/// parameters are an object schema with `properties`).
fn tool_spec(server: &str, tool_name: &str, tool: &Value, name: String) -> ToolSpec {
    let title = tool
        .get("title")
        .or_else(|| tool.get("annotations").and_then(|a| a.get("title")))
        .and_then(Value::as_str);
    let description = tool
        .get("description")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .or(title)
        .map(String::from)
        .unwrap_or_else(|| format!("MCP tool {tool_name} from server {server}"));
    let mut parameters = tool
        .get("inputSchema")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Value::Object(schema) = &mut parameters {
        schema.entry("type").or_insert(json!("object"));
        schema.entry("properties").or_insert(json!({}));
    }
    ToolSpec {
        name,
        description,
        parameters,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_filter_follows_pi() {
        let all = ToolFilter::from_cli(None, false);
        assert!(all.allows("mcp__a__b") && all.allows("read_mcp_resource"));
        let builtins_only = ToolFilter::from_cli(Some(&["read".into(), "bash".into()]), false);
        assert!(builtins_only.allows("mcp__a__b"));
        let radius = ToolFilter::from_cli(Some(&["read".into(), "mcp__radius__*".into()]), false);
        assert!(radius.allows("mcp__radius__ping") && !radius.allows("mcp__other__ping"));
        assert!(!radius.allows("list_mcp_resources"));
        assert!(!ToolFilter::from_cli(None, true).allows("mcp__a__b"));
    }

    #[test]
    fn specs_are_normalized() {
        let spec = tool_spec(
            "s",
            "t",
            &json!({"name": "t", "inputSchema": {"required": []}, "annotations": {"title": "T"}}),
            "mcp__s__t".into(),
        );
        assert_eq!(spec.description, "T");
        assert_eq!(
            spec.parameters,
            json!({"required": [], "type": "object", "properties": {}})
        );
        let spec = tool_spec(
            "s",
            "t",
            &json!({"name": "t", "inputSchema": {"type": "object"}}),
            "x".into(),
        );
        assert_eq!(spec.description, "MCP tool t from server s");
    }
}
