//! `pi --mode acp`: the Agent Client Protocol (v1: JSON-RPC 2.0 over stdio, one message per
//! line), a second front door beside `rpc` on the same agent core (README "ACP").
//!
//! Threads: "stdin-reader" frames and parses the client's messages (`wire`); the router (this
//! file, on the main thread) answers `initialize`, `session/list` and the errors itself, starts a
//! session per `session/new` / `session/load` (`session`: an agent thread and a driver thread
//! each, with their own session file), routes each session's requests by `sessionId`, and sends
//! the sessions' requests to the client (permission dialogs; the tools' `fs/*` and `terminal/*`,
//! `client`) under its own ids, routing the replies back; "stdout-writer" (rpc's) writes every
//! record. Nothing is started for ACP unless `--mode acp` is given.
//!
//! How it ends: stdin closes, stdout closes, or a signal; every session is closed (its run
//! aborted, its session file synced) and joined, then the writer is flushed. Exit code 0, or
//! 128 + the signal.

mod client;
mod session;
mod translate;
mod wire;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crossbeam_channel::{Receiver, Sender, select};
use serde_json::{Value, json};

use crate::agent::AgentSetup;
use crate::mcp::config::McpConfig;
use crate::rpc::Record;
use crate::rpc::stdout_writer::{self, WriterEvent};
use session::{Command, Open, OutgoingRequest, Reply, ToRouter};
use wire::{Incoming, RpcError};

/// What a session's agent is built from.
pub struct Start<'a> {
    pub cwd: &'a Path,
    /// A saved session's file (`session/load`, `session/resume`); None for a new session.
    pub session_file: Option<&'a str>,
    /// The client's `mcpServers`, joined to the configured ones for this session.
    pub mcp: McpConfig,
}

/// Builds a session's agent; `Err` is the reason, for the client.
pub type StartSession<'a> = &'a dyn Fn(Start) -> Result<AgentSetup, String>;

/// What `main` gives ACP: how to build a session's agent, where a directory's sessions are, and
/// the process's signals.
pub struct Host<'a> {
    pub start: StartSession<'a>,
    /// The directory holding the sessions of `cwd`.
    pub session_dir: &'a dyn Fn(&Path) -> PathBuf,
    pub signals: Receiver<i32>,
}

/// Runs the connection until stdin or stdout closes or a signal comes; returns the exit code.
pub fn run(host: Host) -> u8 {
    let (writer_events_tx, writer_events) = crossbeam_channel::bounded(1);
    let writer = match stdout_writer::spawn(
        Box::new(std::io::stdout()),
        writer_events_tx,
        stdout_writer::CHANNEL_CAPACITY,
    ) {
        Ok(writer) => writer,
        Err(e) => {
            eprintln!("Error: cannot start the stdout writer: {e}");
            return 1;
        }
    };
    let (stdin_tx, stdin) = crossbeam_channel::bounded(64);
    crate::rpc::stdin_reader::spawn_framed(Box::new(std::io::stdin()), stdin_tx, wire::parse);
    let (requests_tx, requests) = crossbeam_channel::unbounded();
    let mut router = Router {
        host: &host,
        out: writer.records.clone(),
        requests_tx,
        sessions: HashMap::new(),
        closing: Vec::new(),
        pending: HashMap::new(),
        next_request: 0,
        client_capabilities: Value::Null,
        initialized: false,
        folders: Vec::new(),
    };
    let code = loop {
        select! {
            recv(stdin) -> message => match message {
                Ok(message) => router.message(message),
                Err(_) => break 0,
            },
            recv(requests) -> message => match message {
                Ok(ToRouter::Request(request)) => router.send_request(request),
                Ok(ToRouter::Withdraw { tag, written }) => {
                    router.withdraw(&tag);
                    if let Some(written) = written {
                        let _ = written.send(());
                    }
                }
                Err(_) => {}
            },
            recv(writer_events) -> event => {
                if matches!(event, Ok(WriterEvent::Closed)) {
                    break 0;
                }
            }
            recv(host.signals) -> signal => {
                if let Ok(signal) = signal {
                    break 128 + signal as u8;
                }
            }
        }
    };
    router.close_all();
    // Every session has stopped: what they left running goes before stdout closes.
    crate::agent::kill_leftover_children();
    drop(router);
    drop(writer.records);
    if writer.thread.join().is_err() {
        log::error!("the stdout writer panicked");
    }
    code
}

struct Router<'a> {
    host: &'a Host<'a>,
    out: Sender<Record>,
    requests_tx: Sender<ToRouter>,
    sessions: HashMap<String, session::Handle>,
    /// Sessions closed by the client (id, thread), maybe still stopping.
    closing: Vec<(String, std::thread::JoinHandle<()>)>,
    /// Requests sent to the client: id → who waits for the answer, and its tag.
    pending: HashMap<u64, (Sender<Reply>, String)>,
    next_request: u64,
    /// What the client said it can do (`initialize`), kept for the sessions' delegation.
    client_capabilities: Value,
    initialized: bool,
    /// The folders whose sessions this connection opened or listed: where `session/delete`
    /// (which names no folder) looks for a session's file.
    folders: Vec<PathBuf>,
}

impl Router<'_> {
    fn message(&mut self, message: Incoming) {
        match message {
            Incoming::Request { id, method, params } => {
                if let Err(error) = self.request(&id, &method, params) {
                    let _ = self.out.send(wire::failure(&id, &error));
                }
            }
            Incoming::Notification { method, params } => self.notification(&method, &params),
            Incoming::Response { id, outcome } => {
                let waiting = id.as_u64().and_then(|n| self.pending.remove(&n));
                match waiting {
                    Some((reply, tag)) => {
                        let _ = reply.send(Reply { tag, outcome });
                    }
                    None => log::warn!("acp: a response to no request of ours (id {id})"),
                }
            }
            Incoming::Invalid { id, error } => {
                let _ = self.out.send(wire::failure(&id, &error));
            }
        }
    }

    /// Handles a request; an `Err` is the error response. Requests for a session are answered by
    /// its driver.
    fn request(&mut self, id: &Value, method: &str, params: Value) -> Result<(), RpcError> {
        if !self.initialized && method != "initialize" {
            // As the SDK's agents do: nothing before the handshake.
            return Err(RpcError::new(
                wire::INVALID_REQUEST,
                format!("Invalid request: {method} before initialize"),
            ));
        }
        match method {
            "initialize" => {
                let result = self.initialize(&params)?;
                self.initialized = true;
                let _ = self.out.send(wire::response(id, result));
            }
            "authenticate" => {
                let object = wire::params_object(&params)?;
                let method_id = wire::required_str(object, "methodId")?;
                if method_id != AUTH_METHOD_ID {
                    return Err(RpcError::params(format!(
                        "Invalid params: unknown auth method \"{method_id}\""
                    )));
                }
                // Credentials are read from auth.json (`pi login`) when a request needs them.
                let _ = self.out.send(wire::response(id, json!({})));
            }
            "session/new" => self.open(id, &params, Open::New)?,
            "session/load" => self.open(id, &params, Open::Load)?,
            "session/resume" => self.open(id, &params, Open::Resume)?,
            "session/list" => {
                let result = self.list(&params)?;
                let _ = self.out.send(wire::response(id, result));
            }
            "session/prompt" => self.route(
                &params,
                Command::Prompt {
                    id: id.clone(),
                    params: params.clone(),
                },
            )?,
            "session/set_config_option" => self.route(
                &params,
                Command::SetConfigOption {
                    id: id.clone(),
                    params: params.clone(),
                },
            )?,
            "session/delete" => {
                self.delete(&params)?;
                let _ = self.out.send(wire::response(id, json!({})));
            }
            "session/close" => {
                let session_id = session_id(&params)?;
                let Some(handle) = self.sessions.remove(&session_id) else {
                    return Err(unknown_session(&session_id));
                };
                let _ = handle.commands.send(Command::Close {
                    id: Some(id.clone()),
                });
                // The driver answers once the agent has stopped.
                self.closing.push((session_id, handle.thread));
            }
            other => {
                return Err(RpcError::new(
                    wire::METHOD_NOT_FOUND,
                    format!("Method not found: {other}"),
                ));
            }
        }
        Ok(())
    }

    fn notification(&mut self, method: &str, params: &Value) {
        match method {
            "session/cancel" => {
                if let Ok(session_id) = session_id(params)
                    && let Some(handle) = self.sessions.get(&session_id)
                {
                    let _ = handle.commands.send(Command::Cancel);
                }
            }
            // Unknown notifications (extensions' `_…` included) are ignored, as JSON-RPC says.
            other => log::debug!("acp: ignoring notification {other}"),
        }
    }

    fn initialize(&mut self, params: &Value) -> Result<Value, RpcError> {
        let object = wire::params_object(params)?;
        if !object.get("protocolVersion").is_some_and(Value::is_u64) {
            return Err(RpcError::params(
                "Invalid params: \"protocolVersion\" must be a number",
            ));
        }
        self.client_capabilities = object
            .get("clientCapabilities")
            .cloned()
            .unwrap_or(Value::Null);
        log::debug!("acp: client capabilities {}", self.client_capabilities);
        Ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": true, "sse": false},
                "sessionCapabilities": {"list": {}, "close": {}, "resume": {}, "delete": {}},
            },
            "authMethods": [{
                "id": AUTH_METHOD_ID,
                "name": "pi login",
                "description": "Run `pi login <provider>` in a terminal (subscriptions), or set the provider's API key in the environment or auth.json",
            }],
            "agentInfo": {"name": "pi-rs", "title": "pi", "version": env!("CARGO_PKG_VERSION")},
        }))
    }

    /// `session/new`, `session/load` and `session/resume`: builds the session's agent and starts
    /// it; its driver answers.
    fn open(&mut self, id: &Value, params: &Value, how: Open) -> Result<(), RpcError> {
        let object = wire::params_object(params)?;
        let cwd = Path::new(wire::required_str(object, "cwd")?);
        if !cwd.is_absolute() {
            return Err(RpcError::params(
                "Invalid params: \"cwd\" must be an absolute path",
            ));
        }
        if !cwd.is_dir() {
            return Err(RpcError::params(format!(
                "Invalid params: \"cwd\" is not a directory: {}",
                cwd.display()
            )));
        }
        let mcp = translate::mcp_servers(object.get("mcpServers").unwrap_or(&Value::Null), cwd)?;
        self.remember_folder(cwd);
        // A saved session is found by its exact id among the directory's sessions and opened by
        // its path: never by an id prefix or a path the client made up.
        let (wanted, file) = if how != Open::New {
            let session_id = wire::required_str(object, "sessionId")?;
            if self.sessions.contains_key(session_id) {
                return Err(RpcError::new(
                    wire::INVALID_REQUEST,
                    format!("Session {session_id} is already open on this connection"),
                ));
            }
            let dir = (self.host.session_dir)(cwd);
            let found = crate::session::list_sessions(&dir)
                .into_iter()
                .find(|(_, header, _)| header.id() == session_id)
                .map(|(path, _, _)| path.to_string_lossy().into_owned())
                .ok_or_else(|| unknown_session(session_id))?;
            (Some(session_id), Some(found))
        } else {
            (None, None)
        };
        let start = Start {
            cwd,
            session_file: file.as_deref(),
            mcp,
        };
        let setup =
            (self.host.start)(start).map_err(|error| RpcError::new(wire::INTERNAL_ERROR, error))?;
        let session_id = setup.session.id().to_string();
        if wanted.is_some_and(|wanted| wanted != session_id) {
            // The file changed under us: not the session asked for.
            return Err(unknown_session(wanted.unwrap_or_default()));
        }
        let session_caps = &self.client_capabilities["session"];
        let client = session::ClientSide {
            notices: session_caps["notices"].is_object(),
            compaction: session_caps["compaction"].is_object(),
            elicitation: self.client_capabilities["elicitation"]["form"].is_object(),
            offers: client::Offers::from_capabilities(&self.client_capabilities),
        };
        let handle = session::spawn(
            session_id.clone(),
            setup,
            client,
            self.out.clone(),
            self.requests_tx.clone(),
        )
        .map_err(|e| {
            RpcError::new(
                wire::INTERNAL_ERROR,
                format!("cannot start the session: {e}"),
            )
        })?;
        let _ = handle.commands.send(Command::Opened {
            id: id.clone(),
            how,
        });
        self.sessions.insert(session_id, handle);
        Ok(())
    }

    /// `session/list`: the saved sessions of `cwd` (required here: pi keeps sessions per
    /// directory), most recently active first.
    fn list(&mut self, params: &Value) -> Result<Value, RpcError> {
        let cwd = params
            .get("cwd")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::params("Invalid params: \"cwd\" must be a string"))?;
        let cwd = Path::new(cwd);
        self.remember_folder(cwd);
        let dir = (self.host.session_dir)(cwd);
        let sessions: Vec<Value> = crate::session::list_sessions(&dir)
            .into_iter()
            .map(|(_, header, activity)| {
                json!({
                    "sessionId": header.id(),
                    "cwd": header.cwd().map(str::to_string).unwrap_or_else(|| cwd.to_string_lossy().into_owned()),
                    "updatedAt": crate::time::iso_from_ms(activity),
                })
            })
            .collect();
        Ok(json!({"sessions": sessions}))
    }

    fn remember_folder(&mut self, cwd: &Path) {
        let dir = (self.host.session_dir)(cwd);
        if !self.folders.contains(&dir) {
            self.folders.push(dir);
        }
    }

    /// `session/delete`: removes a saved session's file. The session is found by its exact id
    /// among the sessions of the folders this connection listed or opened (the request names no
    /// folder); one open on this connection is refused (close it first), so no agent writes to
    /// a file that is gone.
    fn delete(&mut self, params: &Value) -> Result<(), RpcError> {
        let session_id = session_id(params)?;
        let stopping = self
            .closing
            .iter()
            .any(|(id, thread)| *id == session_id && !thread.is_finished());
        if self.sessions.contains_key(&session_id) || stopping {
            return Err(RpcError::params(format!(
                "Invalid params: session {session_id} is open on this connection: close it first"
            )));
        }
        // What a closed session queued for the disk (its last appends and sync) lands first, so
        // no late write brings the file back.
        if !crate::disk::flush(DELETE_FLUSH_BOUND) {
            return Err(RpcError::new(
                wire::INTERNAL_ERROR,
                "the session files are still being written: try again",
            ));
        }
        let path = self
            .folders
            .iter()
            .flat_map(|dir| crate::session::list_sessions(dir))
            .find(|(_, header, _)| header.id() == session_id)
            .map(|(path, _, _)| path)
            .ok_or_else(|| unknown_session(&session_id))?;
        std::fs::remove_file(&path).map_err(|e| {
            RpcError::new(
                wire::INTERNAL_ERROR,
                format!("cannot delete {}: {e}", path.display()),
            )
        })?;
        log::debug!("acp: deleted session {session_id} ({})", path.display());
        Ok(())
    }

    fn route(&mut self, params: &Value, command: Command) -> Result<(), RpcError> {
        let session_id = session_id(params)?;
        let Some(handle) = self.sessions.get(&session_id) else {
            return Err(unknown_session(&session_id));
        };
        if handle.commands.send(command).is_err() {
            self.sessions.remove(&session_id);
            return Err(unknown_session(&session_id));
        }
        Ok(())
    }

    /// A session's request to the client, under the connection's next id.
    fn send_request(&mut self, request: OutgoingRequest) {
        self.next_request += 1;
        let id = self.next_request;
        self.pending.insert(id, (request.reply, request.tag));
        let _ = self
            .out
            .send(wire::request(id, request.method, request.params));
    }

    /// Cancels the pending request sent with `tag`: `$/cancel_request` to the client; its
    /// answer, if one still comes, is dropped.
    fn withdraw(&mut self, tag: &str) {
        let Some(id) = self
            .pending
            .iter()
            .find_map(|(id, (_, pending_tag))| (pending_tag == tag).then_some(*id))
        else {
            return;
        };
        self.pending.remove(&id);
        let _ = self.out.send(wire::notification(
            "$/cancel_request",
            json!({"requestId": id}),
        ));
    }

    /// Closes every session and waits for each to stop (runs aborted, session files synced).
    fn close_all(&mut self) {
        let handles: Vec<session::Handle> = self.sessions.drain().map(|(_, h)| h).collect();
        for handle in &handles {
            let _ = handle.commands.send(Command::Close { id: None });
        }
        let threads = handles
            .into_iter()
            .map(|handle| {
                log::debug!("acp: closing the session in {}", handle.cwd.display());
                handle.thread
            })
            .chain(self.closing.drain(..).map(|(_, thread)| thread));
        for thread in threads {
            if thread.join().is_err() {
                log::error!("an ACP session thread panicked");
            }
        }
    }
}

/// How long `session/delete` waits for the disk writes queued before it.
const DELETE_FLUSH_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// The ACP protocol version pi-rs speaks.
const PROTOCOL_VERSION: u64 = 1;
/// The one auth method: credentials from `pi login` / the environment.
const AUTH_METHOD_ID: &str = "pi-login";

fn session_id(params: &Value) -> Result<String, RpcError> {
    let object = wire::params_object(params)?;
    Ok(wire::required_str(object, "sessionId")?.to_string())
}

fn unknown_session(session_id: &str) -> RpcError {
    RpcError::new(
        wire::RESOURCE_NOT_FOUND,
        format!("Session not found: {session_id}"),
    )
}
