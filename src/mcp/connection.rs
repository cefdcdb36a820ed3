//! One server connection: the thread "mcp-<server>". It owns the transport, the JSON-RPC ids and
//! every request in flight; the agent reaches it only through `Command`s and hears back through
//! `McpEvent`s (state, tools) and the reply channel each request carries (tool events for
//! `tools/call`, a plain result otherwise).
//!
//! Lifecycle: `initialize` (protocol version negotiated; versions pi accepts), then
//! `notifications/initialized`, then `tools/list` (all pages) when the server has tools; then
//! ready. Work that arrives earlier waits in a queue. A failed connect is reported once with the
//! stdio server's stderr tail; HTTP attempts that failed transiently (network, 408, 429, 5xx) are
//! retried after 250 ms and 1 s, as pi does. A dropped connection fails what is in flight and
//! reconnects on the next request. `notifications/tools/list_changed` refreshes the tool list;
//! `notifications/progress` for a call resets its timeout and becomes a tool update;
//! `notifications/message` goes to `mcp.log`; the server's `ping` and `roots/list` are answered.
//!
//! Blocking: one `select!` over commands, the transport's inbound messages and the earliest
//! deadline (request timeouts, connect retries). Cancelling a request (`Command::Cancel`, or its
//! timeout) sends `notifications/cancelled`. The thread ends when the agent drops its command
//! sender; the transport is closed then (stdio: stdin, SIGTERM, SIGKILL to the group).

use crate::js::js_number_string;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, never, select};
use serde_json::{Value, json};

use super::config::{ServerConfig, Transport as TransportConfig};
use super::jsonrpc::{self, Incoming};
use super::transport::{self, Failure, Inbound, InboundKind, Transport};
use crate::tools::{ToolEvent, ToolEventKind, ToolOutput};

const CONNECT_RETRY_DELAYS: [Duration; 2] = [Duration::from_millis(250), Duration::from_secs(1)];
const MAX_LIST_PAGES: usize = 1000;
/// pi's error for requests whose connection ended.
const CONNECTION_CLOSED: &str = "MCP connection closed";

/// A request from the agent (or a resource tool's thread).
pub enum Work {
    CallTool {
        tool: String,
        arguments: Value,
        call_id: String,
        events: Sender<ToolEvent>,
        /// Whether resource links can be read (`read_mcp_resource` exists).
        readable: bool,
    },
    Request {
        method: &'static str,
        params: Option<Value>,
        reply: Sender<Result<Value, String>>,
    },
}

impl Work {
    fn fail(self, error: String) {
        match self {
            Work::CallTool {
                call_id, events, ..
            } => {
                let _ = events.send(ToolEvent {
                    call_id,
                    kind: ToolEventKind::Finished(ToolOutput::error(error)),
                });
            }
            Work::Request { reply, .. } => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

pub enum Command {
    /// `key` names the work for a later `Cancel` (unique per process).
    Work {
        key: u64,
        work: Work,
    },
    Cancel {
        key: u64,
    },
    /// Drop the connection (failing what is in flight) and connect again (`/mcp reconnect`).
    Reconnect,
    /// Connect again if the server waits for a sign-in and its stored tokens changed since
    /// (a sign-in done elsewhere, such as `pi mcp login` run by the agent); sent when a prompt
    /// starts.
    PickUpSignIn,
}

#[derive(Clone, Debug, PartialEq)]
pub enum McpEventKind {
    Connecting,
    Connected {
        tools: Vec<Value>,
        has_resources: bool,
        instructions: Option<String>,
        protocol_version: String,
    },
    ToolsChanged(Vec<Value>),
    /// Connecting failed (the message names the cause, stderr tail included).
    Failed(String),
    /// The OAuth server rejected the connection and a refresh did not help: it waits for a
    /// sign-in (`/mcp login`, `pi mcp login`).
    NeedsSignIn(String),
    /// News of a `/mcp login` thread (not a connection's).
    SignIn(super::login::SignInNews),
    /// A working connection dropped; the next request reconnects.
    Disconnected(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct McpEvent {
    pub server: usize,
    pub kind: McpEventKind,
}

enum Purpose {
    Initialize,
    ListTools {
        refresh: bool,
        tools: Vec<Value>,
        cursors: HashSet<String>,
    },
    /// `retried`: a read-only request already retried once after a transient HTTP failure, or
    /// any request resent on a new session after the server forgot the old one.
    Work {
        key: u64,
        work: Work,
        retried: bool,
    },
}

struct Pending {
    purpose: Purpose,
    deadline: Instant,
}

#[derive(PartialEq)]
enum State {
    Down,
    Connecting,
    Ready,
}

pub struct Connection {
    index: usize,
    config: ServerConfig,
    cwd: PathBuf,
    log_path: PathBuf,
    events: Sender<McpEvent>,
    commands: Receiver<Command>,
    inbound_tx: Sender<Inbound>,
    inbound: Receiver<Inbound>,
    generation: u64,
    /// The sandbox a restarted stdio server runs in (`None`: the sandbox is off).
    reconnect_sandbox: Option<std::sync::Arc<crate::sandbox::Policy>>,
    transport: Option<Box<dyn Transport>>,
    state: State,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    /// Work waiting for the connection: (key, work, retried).
    queued: VecDeque<(u64, Work, bool)>,
    /// Read-only requests waiting to be sent again after a transient failure (pi waits 250 ms).
    delayed: Vec<(Instant, u64, Work)>,
    /// Failed transient attempts of the current connect; the time of the next one.
    attempt: usize,
    retry_at: Option<Instant>,
    has_resources: bool,
    instructions: Option<String>,
    protocol_version: String,
    /// The stored tokens (as JSON text) when the server last asked for a sign-in.
    tokens_at_sign_in: Option<String>,
}

/// Starts the connection thread; it connects at once.
pub fn spawn(
    index: usize,
    config: ServerConfig,
    cwd: PathBuf,
    agent_dir: PathBuf,
    reconnect_sandbox: Option<std::sync::Arc<crate::sandbox::Policy>>,
    events: Sender<McpEvent>,
) -> std::io::Result<(Sender<Command>, std::thread::JoinHandle<()>)> {
    let (command_tx, commands) = crossbeam_channel::unbounded();
    let (inbound_tx, inbound) = crossbeam_channel::bounded(256);
    let name = format!("mcp-{}", config.name);
    let connection = Connection {
        index,
        config,
        cwd,
        log_path: agent_dir.join("mcp.log"),
        events,
        commands,
        inbound_tx,
        inbound,
        generation: 0,
        reconnect_sandbox,
        transport: None,
        state: State::Down,
        next_id: 1,
        pending: HashMap::new(),
        queued: VecDeque::new(),
        delayed: Vec::new(),
        attempt: 0,
        retry_at: None,
        has_resources: false,
        instructions: None,
        protocol_version: String::new(),
        tokens_at_sign_in: None,
    };
    let thread = std::thread::Builder::new()
        .name(name)
        .spawn(move || connection.run())?;
    Ok((command_tx, thread))
}

impl Connection {
    fn run(mut self) {
        self.connect();
        loop {
            let deadline = self
                .pending
                .values()
                .map(|p| p.deadline)
                .chain(self.retry_at)
                .chain(self.delayed.iter().map(|(at, _, _)| *at))
                .min();
            let timer = match deadline {
                Some(at) => crossbeam_channel::at(at),
                None => never(),
            };
            select! {
                recv(self.commands) -> command => match command {
                    Ok(command) => self.on_command(command),
                    Err(_) => break,
                },
                recv(self.inbound) -> inbound => {
                    if let Ok(inbound) = inbound && inbound.generation == self.generation {
                        self.on_inbound(inbound.kind);
                    }
                },
                recv(timer) -> _ => self.on_deadline(),
            }
        }
        if let Some(mut transport) = self.transport.take() {
            transport.close();
        }
    }

    fn emit(&self, kind: McpEventKind) {
        let _ = self.events.send(McpEvent {
            server: self.index,
            kind,
        });
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    // ---- connecting ------------------------------------------------------------------------

    fn connect(&mut self) {
        self.retry_at = None;
        self.generation += 1;
        self.state = State::Connecting;
        self.emit(McpEventKind::Connecting);
        // The first start is the user's configuration, before the model did anything; a later
        // one may load code the model wrote since (a script in the workspace), so it runs in
        // the sandbox pi-rs started with.
        // A server an extension registered runs in it from the start.
        let sandbox = self
            .reconnect_sandbox
            .as_deref()
            .filter(|_| self.generation > 1 || self.config.registered);
        let opened = transport::open(
            &self.config.name,
            &self.config.transport,
            self.config.timeout,
            self.generation,
            sandbox,
            self.inbound_tx.clone(),
        );
        match opened {
            Ok(transport) => self.transport = Some(transport),
            Err(e) => return self.connect_failed(e.to_string(), Failure::Other),
        }
        let params = json!({
            "protocolVersion": jsonrpc::LATEST_PROTOCOL_VERSION,
            "capabilities": {"roots": {}},
            "clientInfo": {"name": "pi", "version": env!("CARGO_PKG_VERSION")},
        });
        self.request("initialize", Some(params), Purpose::Initialize);
    }

    fn connect_failed(&mut self, error: String, kind: Failure) {
        let stderr = self.close_transport();
        let is_http = matches!(self.config.transport, TransportConfig::Http { .. });
        if kind == Failure::Transient && is_http && self.attempt < CONNECT_RETRY_DELAYS.len() {
            self.retry_at = Some(Instant::now() + CONNECT_RETRY_DELAYS[self.attempt]);
            self.attempt += 1;
            self.state = State::Connecting;
            return;
        }
        self.attempt = 0;
        self.state = State::Down;
        let error = match stderr.is_empty() {
            true => error,
            false => format!("{error}\n{stderr}"),
        };
        log::warn!("MCP server {} failed to connect: {error}", self.name());
        // A sign-in is needed: pi's message says which (it names the server already).
        let message = match kind {
            Failure::SignIn => error.clone(),
            _ => format!("MCP server \"{}\" failed to connect: {error}", self.name()),
        };
        for (_, work, _) in std::mem::take(&mut self.queued) {
            work.fail(message.clone());
        }
        if kind == Failure::SignIn {
            self.tokens_at_sign_in = Some(self.stored_tokens());
            return self.emit(McpEventKind::NeedsSignIn(error));
        }
        self.emit(McpEventKind::Failed(error));
    }

    /// The server's stored OAuth tokens as JSON text (`null` when none or not an OAuth server).
    fn stored_tokens(&self) -> String {
        let TransportConfig::Http {
            oauth: Some(settings),
            ..
        } = &self.config.transport
        else {
            return "null".into();
        };
        let tokens = settings.load().ok().and_then(|s| s.get("tokens").cloned());
        tokens.unwrap_or(Value::Null).to_string()
    }

    /// Closes the transport and forgets its handshake and refresh requests (their answers can no
    /// longer come; their deadlines must not fire later). Requests of work in flight are the
    /// caller's to fail. Returns the stderr tail.
    fn close_transport(&mut self) -> String {
        self.pending
            .retain(|_, p| matches!(p.purpose, Purpose::Work { .. }));
        let stderr = self
            .transport
            .as_ref()
            .map(|t| t.stderr_tail())
            .unwrap_or_default();
        if let Some(mut transport) = self.transport.take() {
            transport.close();
        }
        self.generation += 1;
        stderr
    }

    fn ready(&mut self, tools: Vec<Value>) {
        self.state = State::Ready;
        self.attempt = 0;
        self.tokens_at_sign_in = None;
        self.emit(McpEventKind::Connected {
            tools,
            has_resources: self.has_resources,
            instructions: self.instructions.clone(),
            protocol_version: self.protocol_version.clone(),
        });
        while let Some((key, work, retried)) = self.queued.pop_front() {
            self.start_work(key, work, retried);
        }
    }

    /// The transport ended. Requests in flight fail with pi's "MCP connection closed" (plus the
    /// stdio server's stderr tail); the server shows as disconnected until the next request.
    fn dropped(&mut self) {
        let stderr = self.close_transport();
        let with_tail = |reason: &str| match stderr.is_empty() {
            true => reason.to_string(),
            false => format!("{reason}\n{stderr}"),
        };
        if self.state == State::Connecting {
            return self.connect_failed(with_tail(CONNECTION_CLOSED), Failure::Other);
        }
        self.state = State::Down;
        for (_, pending) in std::mem::take(&mut self.pending) {
            if let Purpose::Work { work, .. } = pending.purpose {
                work.fail(with_tail(CONNECTION_CLOSED));
            }
        }
        self.emit(McpEventKind::Disconnected(with_tail("Connection closed")));
    }

    // ---- requests --------------------------------------------------------------------------

    fn send(&mut self, message: &Value) -> Result<(), transport::TransportError> {
        match &mut self.transport {
            Some(transport) => transport.send(message),
            None => Err(transport::TransportError::Closed),
        }
    }

    fn request(&mut self, method: &str, params: Option<Value>, purpose: Purpose) {
        let id = self.next_id;
        self.next_id += 1;
        let params = match (&purpose, params) {
            // Progress notifications for a call carry its id as their token.
            (
                Purpose::Work {
                    work: Work::CallTool { .. },
                    ..
                },
                Some(mut params),
            ) => {
                params["_meta"] = json!({"progressToken": id});
                Some(params)
            }
            (_, params) => params,
        };
        let message = jsonrpc::request(id, method, params);
        self.pending.insert(
            id,
            Pending {
                purpose,
                deadline: Instant::now() + self.config.timeout,
            },
        );
        if let Err(e) = self.send(&message) {
            self.on_send_failed(Some(id), e.to_string(), Failure::Other);
        }
    }

    fn start_work(&mut self, key: u64, work: Work, retried: bool) {
        let (method, params) = match &work {
            Work::CallTool {
                tool, arguments, ..
            } => (
                "tools/call",
                Some(json!({"name": tool, "arguments": arguments})),
            ),
            Work::Request { method, params, .. } => (*method, params.clone()),
        };
        self.request(method, params, Purpose::Work { key, work, retried });
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Work { key, work } => self.enqueue(key, work, false),
            Command::Reconnect => {
                self.close_transport();
                for (_, pending) in std::mem::take(&mut self.pending) {
                    if let Purpose::Work { work, .. } = pending.purpose {
                        work.fail(CONNECTION_CLOSED.into());
                    }
                }
                self.attempt = 0;
                self.connect();
            }
            Command::PickUpSignIn => {
                let waiting = self.state == State::Down && self.tokens_at_sign_in.is_some();
                if waiting && self.tokens_at_sign_in.as_deref() != Some(&self.stored_tokens()) {
                    self.tokens_at_sign_in = None;
                    self.attempt = 0;
                    self.connect();
                }
            }
            Command::Cancel { key } => {
                self.queued.retain(|(k, _, _)| *k != key);
                self.delayed.retain(|(_, k, _)| *k != key);
                let found = self
                    .pending
                    .iter()
                    .find(|(_, p)| matches!(p.purpose, Purpose::Work { key: k, .. } if k == key))
                    .map(|(id, _)| *id);
                if let Some(id) = found {
                    self.pending.remove(&id);
                    self.cancel_on_server(id, "Aborted");
                }
            }
        }
    }

    fn enqueue(&mut self, key: u64, work: Work, retried: bool) {
        match self.state {
            State::Ready => self.start_work(key, work, retried),
            State::Connecting => self.queued.push_back((key, work, retried)),
            State::Down => {
                self.queued.push_back((key, work, retried));
                self.connect();
            }
        }
    }

    fn cancel_on_server(&mut self, id: u64, reason: &str) {
        let notice = jsonrpc::notification(
            "notifications/cancelled",
            Some(json!({"requestId": id, "reason": reason})),
        );
        let _ = self.send(&notice);
    }

    fn on_deadline(&mut self) {
        let now = Instant::now();
        if self.retry_at.is_some_and(|at| at <= now) {
            self.connect();
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.delayed)
            .into_iter()
            .partition(|(at, _, _)| *at <= now);
        self.delayed = later;
        for (_, key, work) in due {
            self.enqueue(key, work, true);
        }
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        let ms = self.config.timeout.as_millis();
        for id in expired {
            let Some(pending) = self.pending.remove(&id) else {
                continue;
            };
            let error = format!("MCP request timed out after {ms}ms");
            match pending.purpose {
                Purpose::Initialize => return self.connect_failed(error, Failure::Other),
                Purpose::ListTools { refresh: false, .. } => {
                    self.cancel_on_server(id, "Request timed out");
                    return self.connect_failed(error, Failure::Other);
                }
                Purpose::ListTools { refresh: true, .. } => {
                    self.cancel_on_server(id, "Request timed out")
                }
                Purpose::Work { work, .. } => {
                    self.cancel_on_server(id, "Request timed out");
                    work.fail(error);
                }
            }
        }
    }

    // ---- what the server sends -------------------------------------------------------------

    fn on_inbound(&mut self, kind: InboundKind) {
        match kind {
            InboundKind::Message(message) => match jsonrpc::classify(message) {
                Ok(Incoming::Response { id, outcome }) => self.on_response(id, outcome),
                Ok(Incoming::Request { id, method, params }) => {
                    self.on_server_request(id, &method, &params)
                }
                Ok(Incoming::Notification { method, params }) => {
                    self.on_notification(&method, &params)
                }
                Err(e) => log::warn!("MCP server {}: invalid message: {e}", self.name()),
            },
            InboundKind::Garbage(line) => {
                log::warn!(
                    "MCP server {} wrote a line that is not JSON-RPC: {line}",
                    self.name()
                )
            }
            InboundKind::SendFailed { id, error, kind } => self.on_send_failed(id, error, kind),
            InboundKind::Closed => self.dropped(),
        }
    }

    fn on_send_failed(&mut self, id: Option<u64>, error: String, kind: Failure) {
        let error = match kind {
            Failure::Auth | Failure::SignIn => format!("MCP server \"{}\" {error}", self.name()),
            _ => error,
        };
        let transient = kind == Failure::Transient;
        let Some(pending) = id.and_then(|id| self.pending.remove(&id)) else {
            if self.state == State::Connecting && id.is_none() {
                return self.connect_failed(error, kind);
            }
            return;
        };
        match pending.purpose {
            Purpose::Initialize | Purpose::ListTools { refresh: false, .. } => {
                self.connect_failed(error, kind)
            }
            Purpose::ListTools { refresh: true, .. } => {
                log::warn!(
                    "MCP server {}: failed to refresh tools: {error}",
                    self.name()
                )
            }
            // The server forgot the session, so it did not run the request: once more, on a
            // new session. Other requests of the old session cannot be answered any more.
            Purpose::Work {
                key,
                work,
                retried: false,
            } if kind == Failure::SessionExpired => {
                self.close_transport();
                self.state = State::Down;
                for (_, other) in std::mem::take(&mut self.pending) {
                    if let Purpose::Work { work, .. } = other.purpose {
                        work.fail("MCP session expired".into());
                    }
                }
                self.enqueue(key, work, true);
            }
            // Reading is retried once after a transient failure; tool calls are not (they may
            // have run).
            Purpose::Work {
                key,
                work: work @ Work::Request { .. },
                retried: false,
            } if transient => {
                self.delayed
                    .push((Instant::now() + CONNECT_RETRY_DELAYS[0], key, work));
            }
            // The credentials are no longer taken (a refresh did not cure it): the server waits
            // for a sign-in, as pi marks it, and what was in flight fails the same way.
            Purpose::Work { work, .. } if kind == Failure::SignIn => {
                work.fail(error.clone());
                self.close_transport();
                for (_, other) in std::mem::take(&mut self.pending) {
                    if let Purpose::Work { work, .. } = other.purpose {
                        work.fail(error.clone());
                    }
                }
                self.state = State::Down;
                self.tokens_at_sign_in = Some(self.stored_tokens());
                self.emit(McpEventKind::NeedsSignIn(error));
            }
            Purpose::Work { work, .. } => work.fail(error),
        }
    }

    fn on_response(&mut self, id: u64, outcome: Result<Value, String>) {
        let Some(pending) = self.pending.remove(&id) else {
            log::debug!("MCP server {}: answer to unknown request {id}", self.name());
            return;
        };
        match pending.purpose {
            Purpose::Initialize => match outcome {
                Ok(result) => self.on_initialized(result),
                Err(e) => self.connect_failed(e, Failure::Other),
            },
            Purpose::ListTools {
                refresh,
                tools,
                cursors,
            } => match outcome {
                Ok(page) => self.on_tools_page(refresh, tools, cursors, page),
                Err(e) if refresh => {
                    log::warn!("MCP server {}: failed to refresh tools: {e}", self.name())
                }
                Err(e) => self.connect_failed(e, Failure::Other),
            },
            Purpose::Work { work, .. } => match (work, outcome) {
                (
                    Work::CallTool {
                        tool,
                        call_id,
                        events,
                        readable,
                        ..
                    },
                    outcome,
                ) => {
                    let output = match outcome {
                        Ok(mut result) if result.is_object() => {
                            let output = super::content::call_result(
                                &self.config.name,
                                &tool,
                                &result,
                                readable,
                            );
                            // Scripts' view of it in pi: the whole result without `_meta`.
                            if let Some(fields) = result.as_object_mut() {
                                fields.remove("_meta");
                            }
                            let _ = events.send(ToolEvent {
                                call_id: call_id.clone(),
                                kind: ToolEventKind::Structured(result),
                            });
                            output
                        }
                        Ok(_) => ToolOutput::error("Invalid MCP tools/call result"),
                        Err(e) => ToolOutput::error(e),
                    };
                    let _ = events.send(ToolEvent {
                        call_id,
                        kind: ToolEventKind::Finished(output),
                    });
                }
                (Work::Request { reply, .. }, outcome) => {
                    let _ = reply.send(outcome);
                }
            },
        }
    }

    fn on_initialized(&mut self, result: Value) {
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !jsonrpc::SUPPORTED_PROTOCOL_VERSIONS.contains(&version) {
            let error = match version.is_empty() {
                true => "Invalid MCP initialize result".to_string(),
                false => format!("MCP server selected unsupported protocol version {version}"),
            };
            return self.connect_failed(error, Failure::Other);
        }
        self.protocol_version = version.to_string();
        let capabilities = result.get("capabilities").cloned().unwrap_or(Value::Null);
        self.has_resources = capabilities.get("resources").is_some();
        self.instructions = result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from);
        if let Some(transport) = &mut self.transport {
            transport.set_protocol_version(version);
        }
        let initialized = jsonrpc::notification("notifications/initialized", None);
        if let Err(e) = self.send(&initialized) {
            return self.connect_failed(e.to_string(), Failure::Other);
        }
        match capabilities.get("tools").is_some() {
            true => self.list_tools(false, Vec::new(), HashSet::new(), None),
            // Servers without the tools capability (resources only) do not answer tools/list.
            false => self.ready(Vec::new()),
        }
    }

    fn list_tools(
        &mut self,
        refresh: bool,
        tools: Vec<Value>,
        cursors: HashSet<String>,
        cursor: Option<String>,
    ) {
        let params = cursor.map(|c| json!({"cursor": c}));
        self.request(
            "tools/list",
            params,
            Purpose::ListTools {
                refresh,
                tools,
                cursors,
            },
        );
    }

    fn on_tools_page(
        &mut self,
        refresh: bool,
        mut tools: Vec<Value>,
        mut cursors: HashSet<String>,
        page: Value,
    ) {
        let fail = |this: &mut Connection, error: String| match refresh {
            true => log::warn!("MCP server {}: {error}", this.name()),
            false => this.connect_failed(error, Failure::Other),
        };
        let Some(items) = page.get("tools").and_then(Value::as_array) else {
            return fail(self, "Invalid MCP tools/list result".into());
        };
        tools.extend(
            items
                .iter()
                .filter(|t| {
                    t.get("name").is_some_and(Value::is_string)
                        && t.get("inputSchema").is_some_and(Value::is_object)
                })
                .cloned(),
        );
        // Some servers end pagination with null or "" instead of omitting the cursor.
        match page
            .get("nextCursor")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
        {
            Some(cursor) if cursors.contains(cursor) => fail(
                self,
                format!("MCP tools/list returned duplicate cursor: {cursor}"),
            ),
            Some(_) if cursors.len() >= MAX_LIST_PAGES => fail(
                self,
                format!("MCP tools/list exceeded {MAX_LIST_PAGES} pages"),
            ),
            Some(cursor) => {
                cursors.insert(cursor.to_string());
                self.list_tools(refresh, tools, cursors, Some(cursor.to_string()))
            }
            None => {
                let tools = self.without_duplicates(tools);
                match refresh {
                    true => self.emit(McpEventKind::ToolsChanged(tools)),
                    false => self.ready(tools),
                }
            }
        }
    }

    /// A tool listed twice would become two tools with one name, which providers refuse (every
    /// request fails): the first of each name is kept, with a warning.
    fn without_duplicates(&self, tools: Vec<Value>) -> Vec<Value> {
        let mut seen = HashSet::new();
        tools
            .into_iter()
            .filter(|tool| {
                let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
                let first = seen.insert(name.to_string());
                if !first {
                    log::warn!(
                        "MCP server {}: tools/list lists the tool \"{name}\" more than once; the first one is used",
                        self.name()
                    );
                }
                first
            })
            .collect()
    }

    fn on_server_request(&mut self, id: Value, method: &str, _params: &Value) {
        let answer = match method {
            "ping" => jsonrpc::result(id, json!({})),
            "roots/list" => {
                let name = self
                    .cwd
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let uri = format!("file://{}", self.cwd.display());
                jsonrpc::result(id, json!({"roots": [{"uri": uri, "name": name}]}))
            }
            other => jsonrpc::error(
                id,
                jsonrpc::METHOD_NOT_FOUND,
                &format!("Method not found: {other}"),
            ),
        };
        let _ = self.send(&answer);
    }

    fn on_notification(&mut self, method: &str, params: &Value) {
        match method {
            "notifications/progress" => self.on_progress(params),
            "notifications/tools/list_changed" if self.state == State::Ready => {
                self.list_tools(true, Vec::new(), HashSet::new(), None)
            }
            "notifications/message" => {
                super::log::append(&self.log_path, &self.config.name, params)
            }
            _ => {}
        }
    }

    fn on_progress(&mut self, params: &Value) {
        let Some(token) = params.get("progressToken").and_then(Value::as_u64) else {
            return;
        };
        let Some(progress) = params.get("progress").and_then(Value::as_f64) else {
            return;
        };
        let Some(pending) = self.pending.get_mut(&token) else {
            return;
        };
        pending.deadline = Instant::now() + self.config.timeout;
        if let Purpose::Work {
            work:
                Work::CallTool {
                    tool,
                    call_id,
                    events,
                    ..
                },
            ..
        } = &pending.purpose
        {
            let text = match params.get("message").and_then(Value::as_str) {
                Some(message) => message.to_string(),
                None => {
                    let total = params
                        .get("total")
                        .and_then(Value::as_f64)
                        .map(|t| format!("/{}", js_number_string(t)))
                        .unwrap_or_default();
                    format!("Progress {}{total}", js_number_string(progress))
                }
            };
            let mut update = ToolOutput::text(text);
            update.details = Some(json!({"server": self.config.name, "tool": tool}));
            let _ = events.send(ToolEvent {
                call_id: call_id.clone(),
                kind: ToolEventKind::Update(update),
            });
        }
    }
}

/// How long the first prompt waits for servers whose tools it declares.
pub const DEFAULT_STARTUP_WAIT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::config::{Exposure, ServerConfig, Transport as TransportConfig};

    fn server(command: &str, args: &[&str], timeout: Duration) -> ServerConfig {
        ServerConfig {
            name: "t".into(),
            transport: TransportConfig::Stdio {
                command: command.into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                env: Vec::new(),
                cwd: std::env::temp_dir(),
            },
            timeout,
            enabled: true,
            description: None,
            exposure_name: "direct".into(),
            exposure: Exposure::Direct,
            tool_exposure: Vec::new(),
            source: PathBuf::from("mcp.json"),
            project: false,
            override_source: None,
            registered: false,
        }
    }

    fn events_for(config: ServerConfig, wait: Duration) -> Vec<McpEventKind> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (commands, thread) = spawn(
            0,
            config,
            std::env::temp_dir(),
            std::env::temp_dir(),
            None,
            tx,
        )
        .unwrap();
        let until = Instant::now() + wait;
        let mut kinds = Vec::new();
        while let Ok(event) = rx.recv_deadline(until) {
            kinds.push(event.kind);
        }
        drop(commands);
        thread.join().unwrap();
        kinds
    }

    #[test]
    fn a_server_that_dies_during_the_handshake_fails_once() {
        let kinds = events_for(
            server(
                "sh",
                &["-c", "echo gone >&2; exit 1"],
                Duration::from_millis(300),
            ),
            Duration::from_millis(1200),
        );
        assert_eq!(kinds.len(), 2, "{kinds:?}");
        assert_eq!(kinds[0], McpEventKind::Connecting);
        assert_eq!(
            kinds[1],
            McpEventKind::Failed("MCP connection closed\ngone".into())
        );
    }

    #[test]
    fn a_silent_server_times_out_and_a_missing_one_fails_at_once() {
        let kinds = events_for(
            server("sleep", &["5"], Duration::from_millis(300)),
            Duration::from_millis(1200),
        );
        assert_eq!(
            kinds,
            [
                McpEventKind::Connecting,
                McpEventKind::Failed("MCP request timed out after 300ms".into())
            ]
        );
        let kinds = events_for(
            server("/nonexistent/mcp-server", &[], Duration::from_secs(5)),
            Duration::from_millis(300),
        );
        assert!(
            matches!(&kinds[1], McpEventKind::Failed(e) if e.starts_with("cannot start /nonexistent/mcp-server: ")),
            "{kinds:?}"
        );
    }
}
