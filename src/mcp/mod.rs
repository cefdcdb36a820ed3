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
pub mod login;
pub mod naming;
pub mod oauth;
pub mod registered;
pub mod resources;
pub mod transport;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::{Value, json};

use crate::messages::ToolCall;
use crate::messages::ToolSpec;
use crate::tools::{ToolEvent, ToolHandle};
use config::{Exposure, McpConfig, ServerConfig};
use connection::{Command, McpEvent, McpEventKind, Work};

pub use connection::DEFAULT_STARTUP_WAIT;

pub use crate::tools::selection::ToolFilter;

/// Whether a tool name is an MCP tool: a server's (`mcp__<server>__<tool>`) or a resource tool.
pub fn is_mcp_tool_name(name: &str) -> bool {
    name.starts_with("mcp__")
        || [
            resources::LIST_RESOURCES,
            resources::LIST_TEMPLATES,
            resources::READ_RESOURCE,
        ]
        .contains(&name)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Disabled,
    Connecting,
    Connected,
    Failed,
    /// An OAuth server waits for a sign-in (pi's `needs-auth`).
    NeedsSignIn,
    Disconnected,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Disabled => "disabled",
            Status::Connecting => "connecting",
            Status::Connected => "connected",
            Status::Failed => "failed",
            Status::NeedsSignIn => "needs-auth",
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
    /// The extension's registration it was started from (registered servers only).
    registration: Option<registered::Registration>,
    /// Unregistered: its connection is closed, it is no longer shown, and news from its
    /// thread is dropped (the slot stays so the other servers' indexes do not move).
    removed: bool,
}

/// Characters of the `mcp_servers` section, and of one server's summary in it (pi 1.6.0's).
const MAX_SERVERS_SECTION_CHARS: usize = 4096;
const MAX_SERVER_DESCRIPTION_CHARS: usize = 250;

/// The `mcp_servers` section from (namespace, `codemode` or `tool_search`, summary) per server,
/// in order: pi 1.6.0's intro line for the ways used, then one line a server. Summaries shrink
/// to fit 4,096 characters; when the bare lines do not fit, the last servers are counted in a
/// closing line instead.
fn render_servers_section(servers: &[(String, &str, String)]) -> String {
    let mut intro = "MCP servers whose tools are not declared to you.".to_string();
    if servers.iter().any(|(_, reach, _)| *reach == "codemode") {
        intro.push_str(" Call the tools of `codemode` servers from codemode scripts.");
    }
    if servers.iter().any(|(_, reach, _)| *reach == "tool_search") {
        intro.push_str(" Load the tools of `tool_search` servers with `tool_search`.");
    }
    let heads: Vec<String> = servers
        .iter()
        .map(|(namespace, reach, _)| format!("- {namespace} ({reach})"))
        .collect();
    let omitted = |count: usize| -> Vec<String> {
        match count {
            0 => Vec::new(),
            1 => vec!["- … 1 more server; find their tools with searchTools()".to_string()],
            n => vec![format!(
                "- … {n} more servers; find their tools with searchTools()"
            )],
        }
    };
    let chars = |text: &str| text.encode_utf16().count();
    let size = |kept: usize| {
        let mut lines = vec![intro.clone()];
        lines.extend(heads[..kept].iter().cloned());
        lines.extend(omitted(servers.len() - kept));
        chars(&lines.join("\n"))
    };
    let mut kept = servers.len();
    while kept > 0 && size(kept) > MAX_SERVERS_SECTION_CHARS {
        kept -= 1;
    }
    // Each summary also takes a ": " separator.
    let per_server = MAX_SERVERS_SECTION_CHARS
        .saturating_sub(size(kept))
        .checked_div(kept)
        .map_or(0, |n| n.saturating_sub(2).min(MAX_SERVER_DESCRIPTION_CHARS));
    let mut lines = vec![intro.clone()];
    for (head, (_, _, summary)) in heads.iter().zip(servers).take(kept) {
        let summary = if per_server > 0 {
            shorten(summary, per_server)
        } else {
            String::new()
        };
        lines.push(if summary.is_empty() {
            head.clone()
        } else {
            format!("{head}: {summary}")
        });
    }
    lines.extend(omitted(servers.len() - kept));
    lines.join("\n")
}

/// `text` within `max` UTF-16 units, cut with `…` when longer.
fn shorten(text: &str, max: usize) -> String {
    if text.encode_utf16().count() <= max {
        return text.to_string();
    }
    if max <= 1 {
        return String::new();
    }
    let mut head = String::new();
    let mut units = 0;
    for c in text.chars() {
        units += c.len_utf16();
        if units > max - 1 {
            break;
        }
        head.push(c);
    }
    format!("{}…", head.trim_end())
}

/// One tool the model can call.
#[derive(Clone, Debug)]
struct McpTool {
    name: String,
    server: usize,
    tool: String,
    spec: ToolSpec,
    /// The tool's own `outputSchema`, when it declares one.
    output_schema: Option<Value>,
    exposure: Exposure,
}

/// What the host has for the client, in order: notices, the dialog asking for a pasted
/// redirect URL, and the `handled` answers of `/mcp` prompts whose command finished.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    Notify(String, &'static str),
    /// An `extension_ui_request` with `method:"input"`.
    Input {
        id: String,
        title: String,
        placeholder: String,
    },
    /// The prompt that ran `/mcp …` (its id) is answered `handled`.
    Handled(Option<Value>),
    /// An `extension_ui_request` with `method:"select"`.
    Select {
        id: String,
        title: String,
        options: Vec<String>,
    },
}

/// The server a subcommand acts on: the one, or ask the user among these.
enum Picked {
    One(usize),
    Ask(Vec<usize>),
}

/// A subcommand waiting for the user to choose its server.
struct Choice {
    dialog: String,
    action: String,
    candidates: Vec<usize>,
    prompt: Option<Value>,
}

/// A resource tool call waiting for servers still connecting (pi's resource tools wait for
/// every server). `cancel` is set when the call is dropped (abort); `running` holds the started
/// call's handle, so dropping the outer handle later cancels it.
struct DeferredCall {
    call: ToolCall,
    events: Sender<ToolEvent>,
    cancel: crate::child::CancelFlag,
    running: Arc<std::sync::Mutex<Option<ToolHandle>>>,
}

/// A `/mcp login` in progress (one at a time).
struct Login {
    server: usize,
    /// The prompt that asked for it; answered when the sign-in and the reconnect are done.
    prompt: Option<Value>,
    /// The client's dialog for a pasted redirect URL, once shown.
    dialog: Option<String>,
    pasted: Sender<String>,
    /// Signed in; the server is reconnecting with the new tokens.
    reconnecting: bool,
}

pub struct McpHost {
    servers: Vec<Server>,
    events: Receiver<McpEvent>,
    /// Kept so the channel stays open with no server threads (the agent's select must not see
    /// it disconnect); sign-in threads report on it.
    events_tx: Sender<McpEvent>,
    agent_dir: PathBuf,
    login: Option<Login>,
    /// A `/mcp login|logout|reconnect` without a name, waiting for the `select` answer.
    choice: Option<Choice>,
    deferred: Vec<DeferredCall>,
    tools: Vec<McpTool>,
    filter: ToolFilter,
    config_errors: Vec<String>,
    next_key: Arc<AtomicU64>,
    /// The first prompt waited for servers with declared tools (once per process, as pi).
    waited: bool,
    /// Startup problems were reported to the client.
    reported: bool,
    /// `autoEnableCodemode` of the files (default true).
    auto_enable_codemode: bool,
    /// Servers `/mcp reconnect` is reconnecting, with the prompt that asked (their outcome
    /// becomes a notice, then the prompt's answer).
    reconnecting: Vec<(usize, Option<Value>)>,
    /// What the client gets, taken by the agent after each event and command.
    notices: Vec<Notice>,
    /// Where servers registered later start: the session's directory and the sandbox.
    cwd: PathBuf,
    sandbox: Option<std::sync::Arc<crate::sandbox::Policy>>,
    /// pi's `overridden` lines: registrations an mcp.json server of the same name replaces.
    overridden: Vec<String>,
    /// Servers registered after the startup report: their problems are reported once they
    /// have all connected or failed (as pi reports the servers it connected).
    late: Vec<usize>,
    /// `/mcp` commands typed while the startup connections, or those of servers registered
    /// later, were still going (pi's command waits for them; bounded by each connection's own
    /// timeouts), with their prompts.
    queued: Vec<(String, Option<Value>)>,
}

impl McpHost {
    /// Starts a connection thread for every enabled server.
    /// `reconnect_sandbox`: the sandbox restarted stdio servers run in (the one pi-rs started
    /// with; `None` when it is off).
    pub fn start(
        config: McpConfig,
        filter: ToolFilter,
        cwd: PathBuf,
        agent_dir: PathBuf,
        reconnect_sandbox: Option<std::sync::Arc<crate::sandbox::Policy>>,
    ) -> McpHost {
        let (events_tx, events) = crossbeam_channel::unbounded();
        let auto_enable_codemode = config.auto_enable_codemode.unwrap_or(true);
        let mut host = McpHost {
            servers: Vec::new(),
            events,
            events_tx,
            agent_dir,
            login: None,
            choice: None,
            deferred: Vec::new(),
            tools: Vec::new(),
            filter,
            config_errors: config.errors,
            next_key: Arc::new(AtomicU64::new(1)),
            waited: false,
            reported: false,
            auto_enable_codemode,
            reconnecting: Vec::new(),
            notices: Vec::new(),
            cwd,
            sandbox: reconnect_sandbox,
            overridden: Vec::new(),
            late: Vec::new(),
            queued: Vec::new(),
        };
        for server in config.servers {
            if let Err(e) = host.add_server(server, None) {
                host.config_errors.push(e);
            }
        }
        // With nothing to connect (only invalid or disabled entries) the report is due now.
        if let Some(report) = host.take_startup_report() {
            host.notices.push(Notice::Notify(report, "warning"));
        }
        host
    }

    /// Adds a server and starts its connection thread when it is enabled (the error names the
    /// server when the thread cannot start).
    fn add_server(
        &mut self,
        config: ServerConfig,
        registration: Option<registered::Registration>,
    ) -> Result<usize, String> {
        let index = self.servers.len();
        let mut entry = Server {
            status: Status::Disabled,
            commands: None,
            thread: None,
            tools: Vec::new(),
            has_resources: false,
            instructions: None,
            protocol_version: None,
            error: None,
            registration,
            removed: false,
            config,
        };
        let mut failure = None;
        if entry.config.enabled {
            let spawned = connection::spawn(
                index,
                entry.config.clone(),
                self.cwd.clone(),
                self.agent_dir.clone(),
                self.sandbox.clone(),
                self.events_tx.clone(),
            );
            match spawned {
                Ok((commands, thread)) => {
                    entry.status = Status::Connecting;
                    entry.commands = Some(commands);
                    entry.thread = Some(thread);
                }
                Err(e) => {
                    failure = Some(format!(
                        "{}: cannot start its thread: {e}",
                        entry.config.name
                    ))
                }
            }
        }
        self.servers.push(entry);
        failure.map_or(Ok(index), Err)
    }

    /// The servers extensions registered are now `registrations` (pi's `mcp_servers_change`):
    /// new ones connect right away; unregistered ones, and re-registered ones with another
    /// config, are closed (the latter start again). A name an mcp.json server has (by
    /// namespace) is not connected: `/mcp` and `get_mcp_servers` name the override. Returns
    /// whether the tool table changed; resolved credential values are added to `secrets`.
    pub fn set_registered(
        &mut self,
        registrations: &[registered::Registration],
        secrets: &mut Vec<String>,
    ) -> bool {
        let mut overridden = Vec::new();
        let mut wanted = Vec::new();
        for registration in registrations {
            let namespace = naming::namespace(&registration.name);
            let configured = self.servers.iter().find(|s| {
                !s.removed
                    && s.registration.is_none()
                    && naming::namespace(&s.config.name) == namespace
            });
            match configured {
                Some(server) => overridden.push(format!(
                    "\"{}\" registered by {} is overridden by \"{}\" in {}",
                    registration.name,
                    registration.extension_path,
                    server.config.name,
                    server.config.source.display()
                )),
                None => wanted.push(registration),
            }
        }
        self.overridden = overridden;
        for index in 0..self.servers.len() {
            let server = &self.servers[index];
            let keep = server
                .registration
                .as_ref()
                .is_some_and(|r| wanted.contains(&r));
            if !server.removed && server.registration.is_some() && !keep {
                self.remove(index);
            }
        }
        let resolver = config::system_resolver(&self.cwd);
        for registration in wanted {
            if self
                .servers
                .iter()
                .any(|s| !s.removed && s.registration.as_ref() == Some(registration))
            {
                continue;
            }
            let resolved =
                config::resolve_registered(registration, &self.agent_dir, &resolver, secrets);
            let added = resolved.and_then(|c| self.add_server(c, Some(registration.clone())));
            match added {
                Ok(index) if self.reported => self.late.push(index),
                Ok(_) => {}
                Err(e) => self
                    .notices
                    .push(Notice::Notify(format!("MCP failed to load: {e}"), "error")),
            }
        }
        let changed = self.rebuild_tools();
        if self.settled() {
            self.start_deferred();
        }
        // The last startup connection may have been unregistered.
        self.after_startup();
        changed
    }

    /// Closes server `index` for good (unregistered): its thread ends when its command sender
    /// drops; a sign-in or reconnect waiting for it ends.
    fn remove(&mut self, index: usize) {
        let server = &mut self.servers[index];
        server.removed = true;
        server.commands = None;
        server.status = Status::Disabled;
        server.tools.clear();
        server.has_resources = false;
        if let Some(login) = self.login.take_if(|l| l.server == index) {
            self.notices
                .push(Notice::Notify(oauth::SIGN_IN_CANCELLED.into(), "info"));
            self.notices.push(Notice::Handled(login.prompt));
        }
        if let Some(at) = self.reconnecting.iter().position(|(i, _)| *i == index) {
            let (_, prompt) = self.reconnecting.remove(at);
            self.notices.push(Notice::Handled(prompt));
        }
        self.late.retain(|i| *i != index);
    }

    /// The servers still configured or registered, with their indexes.
    fn live(&self) -> impl Iterator<Item = (usize, &Server)> {
        self.servers.iter().enumerate().filter(|(_, s)| !s.removed)
    }

    pub fn events(&self) -> &Receiver<McpEvent> {
        &self.events
    }

    /// The event channel closed (the host holds a sender, so its state is broken): stop
    /// reading it, so the agent's select does not wake on it again.
    pub fn events_gone(&mut self) {
        self.events = crossbeam_channel::never();
    }

    /// Applies a server's news; returns true when the tool table changed.
    pub fn on_event(&mut self, event: McpEvent) -> bool {
        let index = event.server;
        if self.servers.get(index).is_none_or(|s| s.removed) {
            return false;
        }
        if let McpEventKind::SignIn(news) = event.kind {
            self.on_sign_in(index, news);
            return false;
        }
        let settles = matches!(
            event.kind,
            McpEventKind::Connected { .. } | McpEventKind::Failed(_) | McpEventKind::NeedsSignIn(_)
        );
        let changed = self.apply(event);
        if settles {
            self.settle_commands(index);
        }
        if self.settled() {
            self.start_deferred();
        }
        self.after_startup();
        changed
    }

    /// Once the startup connections have all connected or failed: their report; once the
    /// servers registered since have too: theirs. Then the `/mcp` commands that waited.
    fn after_startup(&mut self) {
        if let Some(report) = self.take_startup_report() {
            self.notices.push(Notice::Notify(report, "warning"));
        }
        if let Some(report) = self.take_late_report() {
            self.notices.push(Notice::Notify(report, "warning"));
        }
        if self.commands_may_run() {
            for (args, prompt) in std::mem::take(&mut self.queued) {
                self.command(&args, prompt);
            }
        }
    }

    /// Whether `/mcp` runs now: the startup connections have each connected or failed, and so
    /// have the connections of servers extensions registered since (pi 1.6.0's `/mcp` waits for
    /// the servers it starts with, extensions' among them; pi-rs's extensions register theirs
    /// after start-up).
    fn commands_may_run(&self) -> bool {
        self.reported
            && !self
                .late
                .iter()
                .any(|i| self.servers[*i].status == Status::Connecting)
    }

    /// Server `index` connected or failed: the `/mcp reconnect` or `/mcp login` waiting for
    /// it reports the outcome and answers its prompt.
    fn settle_commands(&mut self, index: usize) {
        let server = &self.servers[index];
        let error = server.error.as_deref().unwrap_or("");
        if let Some(at) = self.reconnecting.iter().position(|(i, _)| *i == index) {
            let (_, prompt) = self.reconnecting.remove(at);
            let notice = match server.status {
                Status::Connected => Notice::Notify(
                    format!(
                        "Reconnected to MCP server \"{}\" ({}).",
                        server.config.name,
                        describe_state(server)
                    ),
                    "info",
                ),
                // pi's sign-in message, which names the server.
                Status::NeedsSignIn => Notice::Notify(error.to_string(), "error"),
                _ => Notice::Notify(
                    format!(
                        "MCP server \"{}\" failed to connect: {error}",
                        server.config.name
                    ),
                    "error",
                ),
            };
            self.notices.push(notice);
            self.notices.push(Notice::Handled(prompt));
        }
        if let Some(login) = self.login.take_if(|l| l.server == index && l.reconnecting) {
            let notice = match server.status {
                Status::Connected => Notice::Notify(
                    format!(
                        "Signed in to MCP server \"{}\" ({} tools).",
                        server.config.name,
                        server.tools.len()
                    ),
                    "info",
                ),
                Status::NeedsSignIn => Notice::Notify(
                    format!(
                        "Signed in, but MCP server \"{}\" still rejects the credentials",
                        server.config.name
                    ),
                    "error",
                ),
                _ => Notice::Notify(format!("Signed in, but {error}"), "error"),
            };
            self.notices.push(notice);
            self.notices.push(Notice::Handled(login.prompt));
        }
    }

    /// News of the `/mcp login` thread: show the URL and ask for a pasted redirect URL, or
    /// reconnect with the new tokens, or report why not.
    fn on_sign_in(&mut self, index: usize, news: login::SignInNews) {
        let Some(login) = self.login.as_mut().filter(|l| l.server == index) else {
            return;
        };
        let name = self.servers[index].config.name.clone();
        match news {
            login::SignInNews::Url(url) => {
                login::open_browser(&url);
                self.notices.push(Notice::Notify(
                    format!("Sign in to MCP server \"{name}\" in your browser:\n{url}"),
                    "info",
                ));
                let id = crate::ids::uuid_v4();
                login.dialog = Some(id.clone());
                self.notices.push(Notice::Input {
                    id,
                    title: format!(
                        "Waiting for sign-in to \"{name}\". If the browser cannot reach this machine, paste the URL it was redirected to."
                    ),
                    placeholder: "http://127.0.0.1:.../callback?code=...".into(),
                });
            }
            login::SignInNews::Done(Ok(())) => {
                // The dialog is moot now; like pi, nothing tells the client.
                login.dialog = None;
                login.reconnecting = true;
                let server = &mut self.servers[index];
                match &server.commands {
                    Some(commands) if commands.send(Command::Reconnect).is_ok() => {
                        server.status = Status::Connecting;
                    }
                    _ => {
                        let prompt = self.login.take().and_then(|l| l.prompt);
                        self.notices.push(Notice::Notify(
                            format!("Signed in, but MCP server \"{name}\" is not running"),
                            "error",
                        ));
                        self.notices.push(Notice::Handled(prompt));
                    }
                }
            }
            login::SignInNews::Done(Err(error)) => {
                let prompt = self.login.take().and_then(|l| l.prompt);
                self.notices.push(match error.as_str() {
                    oauth::SIGN_IN_CANCELLED => Notice::Notify(error, "info"),
                    _ => Notice::Notify(format!("Sign-in failed: {error}"), "error"),
                });
                self.notices.push(Notice::Handled(prompt));
            }
        }
    }

    /// The client answered a dialog; true when it was the server choice's or the sign-in's (a
    /// pasted redirect URL, or cancelled: an empty answer).
    pub fn deliver_ui_response(&mut self, id: &str, value: Option<&str>) -> bool {
        if let Some(choice) = self.choice.take_if(|c| c.dialog == id) {
            self.on_choice(choice, value);
            return true;
        }
        let Some(login) = self
            .login
            .as_mut()
            .filter(|l| l.dialog.as_deref() == Some(id))
        else {
            return false;
        };
        login.dialog = None;
        let _ = login.pasted.send(value.unwrap_or("").to_string());
        true
    }

    /// A prompt starts: servers waiting for a sign-in connect again if one was done elsewhere
    /// meanwhile (`pi mcp login` in a shell, or run by the agent), as pi does at turn start.
    pub fn pick_up_sign_ins(&self) {
        for server in &self.servers {
            if server.status == Status::NeedsSignIn
                && let Some(commands) = &server.commands
            {
                let _ = commands.send(Command::PickUpSignIn);
            }
        }
    }

    /// What the client gets since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    /// `/mcp`, `/mcp login|logout|reconnect [server]` (pi's command outside its TUI), run from
    /// the prompt `prompt`; the outcome is in `take_notices`, the prompt's `handled` answer last
    /// (once a sign-in or reconnect is over).
    /// As pi, every form but one with too many words first waits for the startup connections
    /// and those of servers extensions registered (until each has connected or failed; their
    /// report comes first).
    pub fn command(&mut self, args: &str, prompt: Option<Value>) {
        let words: Vec<&str> = args.split_whitespace().collect();
        if words.len() <= 2 && !self.commands_may_run() {
            self.queued.push((args.to_string(), prompt));
            return;
        }
        let notice = match words[..] {
            [] => Some(Notice::Notify(self.status_text(), "info")),
            [action @ ("login" | "logout" | "reconnect"), ref rest @ ..] if rest.len() <= 1 => {
                match self.pick(action, rest.first().copied()) {
                    Err(notice) => Some(notice),
                    Ok(Picked::One(index)) => return self.act(action, index, prompt),
                    Ok(Picked::Ask(candidates)) => {
                        let id = crate::ids::uuid_v4();
                        let options = candidates
                            .iter()
                            .map(|i| self.servers[*i].config.name.clone())
                            .collect();
                        self.notices.push(Notice::Select {
                            id: id.clone(),
                            title: "MCP server".into(),
                            options,
                        });
                        self.choice = Some(Choice {
                            dialog: id,
                            action: action.to_string(),
                            candidates,
                            prompt,
                        });
                        return;
                    }
                }
            }
            _ => Some(Notice::Notify(MCP_USAGE.into(), "warning")),
        };
        if let Some(notice) = notice {
            self.notices.push(notice);
            self.notices.push(Notice::Handled(prompt));
        }
    }

    /// Runs `/mcp <action>` on server `index`; the prompt is answered when it is done.
    fn act(&mut self, action: &str, index: usize, prompt: Option<Value>) {
        let notice = match action {
            "login" => self.sign_in(index, prompt.clone()),
            "logout" => Some(self.sign_out(index)),
            _ => return self.reconnect(index, prompt),
        };
        if let Some(notice) = notice {
            self.notices.push(notice);
            self.notices.push(Notice::Handled(prompt));
        }
    }

    /// The answer to the `select` dialog of a subcommand without a server name: the chosen
    /// server gets the action; a cancelled dialog (or a name not offered) ends the command
    /// without a word, as pi.
    fn on_choice(&mut self, choice: Choice, value: Option<&str>) {
        let chosen = choice.candidates.into_iter().find(|i| {
            let server = &self.servers[*i];
            !server.removed && Some(server.config.name.as_str()) == value
        });
        match chosen {
            Some(index) => self.act(&choice.action, index, choice.prompt),
            None => self.notices.push(Notice::Handled(choice.prompt)),
        }
    }

    /// The server a subcommand acts on (pi's rules): the one named, else the only eligible one,
    /// else the only one that needs it (waits for a sign-in; failed or disconnected for
    /// `reconnect`), else the user chooses among the eligible ones (a `select` dialog, as pi).
    fn pick(&self, action: &str, name: Option<&str>) -> Result<Picked, Notice> {
        let signs_in = action != "reconnect";
        let eligible =
            |s: &Server| s.commands.is_some() && (!signs_in || oauth_settings(&s.config).is_some());
        let none = match signs_in {
            true => NO_OAUTH_SERVER,
            false => "No enabled MCP server to reconnect.",
        };
        if let Some(name) = name {
            let Some(index) = self
                .live()
                .find(|(_, s)| s.config.name == name)
                .map(|(i, _)| i)
            else {
                return Err(Notice::Notify(
                    format!("No MCP server named \"{name}\"."),
                    "error",
                ));
            };
            return match eligible(&self.servers[index]) {
                true => Ok(Picked::One(index)),
                false => Err(Notice::Notify(none.into(), "error")),
            };
        }
        let candidates: Vec<usize> = self
            .live()
            .filter(|(_, s)| eligible(s))
            .map(|(i, _)| i)
            .collect();
        let preferred: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|i| match self.servers[*i].status {
                Status::NeedsSignIn => signs_in,
                Status::Failed | Status::Disconnected => !signs_in,
                _ => false,
            })
            .collect();
        match (&candidates[..], &preferred[..]) {
            ([], _) => Err(Notice::Notify(none.into(), "info")),
            ([only], _) | (_, [only]) => Ok(Picked::One(*only)),
            _ => Ok(Picked::Ask(candidates)),
        }
    }

    /// `/mcp reconnect <server>`: the outcome is reported when the server settles.
    fn reconnect(&mut self, index: usize, prompt: Option<Value>) {
        if let Some(commands) = &self.servers[index].commands {
            let _ = commands.send(Command::Reconnect);
        }
        self.servers[index].status = Status::Connecting;
        self.reconnecting.push((index, prompt));
    }

    /// `/mcp logout <server>`: deletes the stored credentials; the connection closes and waits
    /// for a sign-in (it reconnects without them).
    fn sign_out(&mut self, index: usize) -> Notice {
        let name = &self.servers[index].config.name;
        let Some(settings) = oauth_settings(&self.servers[index].config) else {
            return Notice::Notify(NO_OAUTH_SERVER.into(), "error");
        };
        let removed = match settings.remove() {
            Ok(removed) => removed,
            Err(e) => return Notice::Notify(format!("Sign-out failed: {e}"), "error"),
        };
        if let Some(commands) = &self.servers[index].commands {
            let _ = commands.send(Command::Reconnect);
        }
        match removed {
            true => Notice::Notify(format!("Signed out of MCP server \"{name}\"."), "info"),
            false => Notice::Notify(
                format!("No stored credentials for MCP server \"{name}\"."),
                "info",
            ),
        }
    }

    /// `/mcp login <server>`: starts the sign-in thread (None), or says why not.
    fn sign_in(&mut self, index: usize, prompt: Option<Value>) -> Option<Notice> {
        let settings = oauth_settings(&self.servers[index].config)?.clone();
        if let Some(login) = &self.login {
            return Some(Notice::Notify(
                format!(
                    "A sign-in to MCP server \"{}\" is already in progress.",
                    self.servers[login.server].config.name
                ),
                "error",
            ));
        }
        match login::spawn(index, settings, self.events_tx.clone()) {
            Ok(pasted) => {
                self.login = Some(Login {
                    server: index,
                    prompt,
                    dialog: None,
                    pasted,
                    reconnecting: false,
                });
                None
            }
            Err(e) => Some(Notice::Notify(format!("Sign-in failed: {e}"), "error")),
        }
    }

    /// pi's `/mcp` status text outside its TUI.
    fn status_text(&self) -> String {
        if self.live().next().is_none()
            && self.config_errors.is_empty()
            && self.overridden.is_empty()
        {
            return format!(
                "No MCP servers configured. Add them to {} or .pi/mcp.json.",
                config::user_path(&self.agent_dir).display()
            );
        }
        let mut lines: Vec<String> = self
            .live()
            .map(|(_, s)| {
                let name = &s.config.name;
                let exposure = &s.config.exposure_name;
                let state = match s.status {
                    Status::NeedsSignIn => {
                        return format!(
                            "{name}: needs sign-in, run /mcp login {name} ({exposure})"
                        );
                    }
                    Status::Disconnected => "disconnected, reconnects on next call",
                    other => other.as_str(),
                };
                let tools = match s.status {
                    Status::Connected => format!(", {} tools", s.tools.len()),
                    _ => String::new(),
                };
                let error = match (&s.error, s.status) {
                    (Some(e), status) if status != Status::Connected => {
                        format!("\n    {}", e.split('\n').collect::<Vec<_>>().join("\n    "))
                    }
                    _ => String::new(),
                };
                format!("{name}: {state}{tools} ({exposure}){error}")
            })
            .collect();
        lines.extend(
            self.config_errors
                .iter()
                .map(|e| format!("config error: {e}")),
        );
        lines.extend(self.overridden.iter().map(|o| format!("overridden: {o}")));
        lines.join("\n")
    }

    fn apply(&mut self, event: McpEvent) -> bool {
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
            McpEventKind::NeedsSignIn(error) => {
                // Its tools are unavailable until a sign-in (calls would fail the same way).
                server.status = Status::NeedsSignIn;
                server.error = Some(error);
                server.tools.clear();
                server.has_resources = false;
                self.rebuild_tools()
            }
            McpEventKind::Disconnected(error) => {
                server.status = Status::Disconnected;
                server.error = Some(error);
                false
            }
            McpEventKind::SignIn(_) => false,
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
                let exposure = server.config.tool_exposure(tool_name);
                if exposure == Exposure::Hidden {
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
                    output_schema: tool.get("outputSchema").filter(|s| s.is_object()).cloned(),
                    name: model_name,
                    server: index,
                    tool: tool_name.to_string(),
                    exposure,
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

    /// Every tool scripts and the model can reach (not `hidden`): the servers' tools, then the
    /// resource tools.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        self.tools_with_exposure()
            .into_iter()
            .map(|(spec, _)| spec)
            .collect()
    }

    /// The same with each tool's exposure. The resource tools take the widest exposure of the
    /// servers they reach (`direct`, else `codemode`, else `deferred`), as pi 1.6.0.
    pub fn tools_with_exposure(&self) -> Vec<(ToolSpec, Exposure)> {
        let mut specs: Vec<(ToolSpec, Exposure)> = self
            .tools
            .iter()
            .map(|t| (t.spec.clone(), t.exposure))
            .collect();
        if self.resource_tools_offered() {
            let exposures: Vec<Exposure> = self
                .servers
                .iter()
                .filter(|s| s.has_resources && s.config.exposure != Exposure::Hidden)
                .map(|s| s.config.exposure)
                .collect();
            let exposure = [Exposure::Direct, Exposure::Codemode, Exposure::Deferred]
                .into_iter()
                .find(|e| exposures.contains(e))
                .unwrap_or(Exposure::Deferred);
            specs.extend(
                resources::specs()
                    .into_iter()
                    .filter(|s| self.filter.allows(&s.name))
                    .map(|s| (s, exposure)),
            );
        }
        specs
    }

    /// Which discovery tools the configured exposures of the enabled servers ask for
    /// (`codemode`, `tool_search`): known from the files, before any server connects.
    pub fn discovery_needs(&self) -> (bool, bool) {
        let exposures: Vec<Exposure> = self
            .servers
            .iter()
            .filter(|s| s.config.enabled)
            .flat_map(|s| s.config.configured_exposures())
            .collect();
        (
            exposures.contains(&Exposure::Codemode),
            exposures.contains(&Exposure::Deferred),
        )
    }

    /// The `mcp_servers` system prompt section (pi 1.6.0's text): every enabled server with
    /// `codemode` or `deferred` tools, how its tools are reached and its one-line summary (its
    /// `description`, else its instructions), within 4,096 characters; `None` without any.
    pub fn servers_section(&self) -> Option<String> {
        let mut listed: Vec<&Server> = self
            .servers
            .iter()
            .filter(|s| s.config.enabled && s.config.has_indirect_tools())
            .collect();
        if listed.is_empty() {
            return None;
        }
        listed.sort_by_key(|s| s.config.name.to_lowercase());
        let summaries: Vec<(String, &str, String)> = listed
            .iter()
            .map(|s| {
                let reach = if s
                    .config
                    .configured_exposures()
                    .contains(&Exposure::Codemode)
                {
                    "codemode"
                } else {
                    "tool_search"
                };
                let text = [s.config.description.as_deref(), s.instructions.as_deref()]
                    .into_iter()
                    .flatten()
                    .map(str::trim)
                    .find(|t| !t.is_empty())
                    .unwrap_or("");
                let summary = text.split('\n').next().unwrap_or("").trim().to_string();
                (naming::namespace(&s.config.name), reach, summary)
            })
            .collect();
        Some(render_servers_section(&summaries))
    }

    /// Turns on the tools that reach what the servers' exposures leave undeclared (pi 1.6.0):
    /// `codemode` for `codemode` tools unless `autoEnableCodemode` is false, `tool_search` for
    /// `deferred` ones, each where the tool selection allows it (`filter`). When neither is on
    /// while such tools exist, the client gets pi's one warning.
    pub fn turn_on_discovery(&mut self, tools: &mut Vec<String>) {
        use crate::tools::{codemode, tool_search};
        let (needs_codemode, needs_tool_search) = self.discovery_needs();
        if !needs_codemode && !needs_tool_search {
            return;
        }
        let mut turn_on = |name: &str, wanted: bool| {
            if wanted && self.filter.allows(name) && !tools.iter().any(|t| t == name) {
                tools.push(name.to_string());
            }
        };
        turn_on(
            codemode::TOOL_NAME,
            needs_codemode && self.auto_enable_codemode,
        );
        turn_on(tool_search::TOOL_NAME, needs_tool_search);
        if tools
            .iter()
            .any(|t| t == codemode::TOOL_NAME || t == tool_search::TOOL_NAME)
        {
            return;
        }
        let reason = if needs_codemode && !self.auto_enable_codemode {
            " (autoEnableCodemode is false)"
        } else {
            ""
        };
        self.notices.push(Notice::Notify(
            format!(
                "MCP tools are only reachable from the codemode or tool_search tool, but neither is active{reason}; they cannot be called."
            ),
            "warning",
        ));
    }

    /// The namespace of an MCP tool for codemode's discovery globals: `mcp__<server>`, with the
    /// server's name as alias, its configured description and its instructions.
    pub fn namespace_of(&self, name: &str) -> Option<crate::tools::codemode::search::Namespace> {
        let tool = self.tools.iter().find(|t| t.name == name)?;
        let server = self.servers.get(tool.server)?;
        let server_name = &server.config.name;
        Some(crate::tools::codemode::search::Namespace {
            name: naming::namespace(server_name),
            aliases: vec![server_name.clone()],
            description: server
                .config
                .description
                .as_ref()
                .map(|d| d.trim().to_string())
                .filter(|d| !d.is_empty()),
            instructions: server.instructions.clone(),
        })
    }

    /// What a script's call of the server tool `name` resolves to: its `CallToolResult`, typed
    /// with the tool's own output schema (pi 1.6.0). None for a name that is no server tool.
    pub fn output_schema_of(&self, name: &str) -> Option<Value> {
        let tool = self.tools.iter().find(|t| t.name == name)?;
        Some(crate::tools::codemode::declarations::mcp_result_schema(
            tool.output_schema.as_ref(),
        ))
    }

    pub fn has_tool(&self, name: &str) -> bool {
        self.tool_specs().iter().any(|s| s.name == name)
    }

    /// Starts a call of one of `tool_specs`' tools; results arrive on `events`.
    pub fn spawn_call(&mut self, call: ToolCall, events: Sender<ToolEvent>) -> ToolHandle {
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
            let cancel = crate::child::CancelFlag::default();
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
        if !self.settled() {
            let cancel = crate::child::CancelFlag::default();
            let running = Arc::new(std::sync::Mutex::new(None::<ToolHandle>));
            let slot = running.clone();
            self.deferred.push(DeferredCall {
                call,
                events,
                cancel: cancel.clone(),
                running,
            });
            return ToolHandle::with_cancel_hook(
                cancel,
                Box::new(move || {
                    drop(slot.lock().unwrap_or_else(|e| e.into_inner()).take());
                }),
            );
        }
        resources::spawn(call, self.resource_servers(), self.next_key.clone(), events)
    }

    /// Every server has connected or failed: the resource calls that waited run now, on the
    /// servers with resources as they are now.
    fn start_deferred(&mut self) {
        for deferred in std::mem::take(&mut self.deferred) {
            if deferred.cancel.is_cancelled() {
                continue;
            }
            let handle = resources::spawn(
                deferred.call,
                self.resource_servers(),
                self.next_key.clone(),
                deferred.events,
            );
            let mut running = deferred.running.lock().unwrap_or_else(|e| e.into_inner());
            // Dropped meanwhile: cancel what just started.
            match deferred.cancel.is_cancelled() {
                true => drop(handle),
                false => *running = Some(handle),
            }
        }
    }

    /// Whether the first prompt should wait: a server with declared tools is still connecting.
    /// `reach_indirect`: `codemode` or `tool_search` is offered, so servers with tools only
    /// they reach are waited for too (pi 1.6.0 waits for those when such a call starts).
    pub fn should_wait(&mut self, reach_indirect: bool) -> bool {
        if self.waited {
            return false;
        }
        let connecting = self.servers.iter().any(|s| {
            s.status == Status::Connecting
                && (s.config.has_declared_tools()
                    || (reach_indirect && s.config.has_indirect_tools()))
        });
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
    fn take_startup_report(&mut self) -> Option<String> {
        if self.reported || !self.settled() {
            return None;
        }
        self.reported = true;
        let mut lines: Vec<String> = self
            .config_errors
            .iter()
            .map(|e| format!("config: {e}"))
            .collect();
        lines.extend(self.servers.iter().filter_map(problem_line));
        attention(&lines)
    }

    /// The report for servers registered after the startup report, once they all connected or
    /// failed (pi's report of the servers it connected: their problems only).
    fn take_late_report(&mut self) -> Option<String> {
        let pending = |i: &usize| self.servers[*i].status == Status::Connecting;
        if self.late.is_empty() || self.late.iter().any(pending) {
            return None;
        }
        let lines: Vec<String> = std::mem::take(&mut self.late)
            .into_iter()
            .filter_map(|i| problem_line(&self.servers[i]))
            .collect();
        attention(&lines)
    }

    /// The `get_mcp_servers` answer: every configured server with its state, and config errors.
    pub fn status(&self) -> Value {
        let servers: Vec<Value> = self
            .live()
            .map(|(index, s)| {
                let mut entry = json!({
                    "name": s.config.name,
                    "scope": scope(&s.config),
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
        json!({"servers": servers, "errors": self.config_errors, "overridden": self.overridden})
    }

    /// `pi mcp list --json`'s report, in pi's shape: per server `name`, `scope`, `source`,
    /// `override`?, `enabled`, `exposure`, `transport`, `state`, `tools` (the server's names),
    /// `toolExposure`? (tools whose exposure differs), `resources`?, `error`?; then `errors`.
    pub fn list_report(&self) -> Value {
        let servers: Vec<Value> = self
            .live()
            .map(|(_, s)| {
                let mut report = json!({
                    "name": s.config.name,
                    "scope": scope(&s.config),
                    "source": s.config.source.display().to_string(),
                });
                if let Some(path) = &s.config.override_source {
                    report["override"] = json!(path.display().to_string());
                }
                report["enabled"] = json!(s.config.enabled);
                report["exposure"] = json!(s.config.exposure_name);
                report["transport"] = json!(s.config.describe_transport());
                if let config::Transport::Http {
                    provider: Some(auth),
                    ..
                } = &s.config.transport
                {
                    report["authProvider"] = json!(auth.provider);
                }
                report["state"] = json!(s.status.as_str());
                let names: Vec<&str> = s
                    .tools
                    .iter()
                    .filter_map(|t| t.get("name").and_then(Value::as_str))
                    .collect();
                report["tools"] = json!(names);
                let differing: serde_json::Map<String, Value> = names
                    .iter()
                    .map(|n| (n.to_string(), s.config.tool_exposure_name(n)))
                    .filter(|(_, e)| *e != s.config.exposure_name)
                    .map(|(n, e)| (n, json!(e)))
                    .collect();
                if !differing.is_empty() {
                    report["toolExposure"] = Value::Object(differing);
                }
                if s.has_resources {
                    report["resources"] = json!(true);
                }
                let has_error = !matches!(s.status, Status::Connected | Status::NeedsSignIn);
                if let Some(error) = s.error.as_ref().filter(|_| has_error) {
                    report["error"] = json!(error);
                }
                report
            })
            .collect();
        json!({"servers": servers, "errors": self.config_errors})
    }

    /// Ends every connection; waits up to `grace` for the threads and for stdio servers to
    /// exit after their stdin closed (the caller kills what is left: `transport::kill_all`).
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
        transport::wait_all_stopped(deadline);
    }
}

/// A server's line in pi's "need attention" report: it needs a sign-in or failed.
fn problem_line(server: &Server) -> Option<String> {
    let name = &server.config.name;
    match server.status {
        Status::NeedsSignIn => Some(format!("{name}: needs sign-in")),
        Status::Failed => {
            let error = server.error.as_deref().unwrap_or("unknown error");
            Some(format!(
                "{name}: failed: {}",
                error.lines().next().unwrap_or("")
            ))
        }
        _ => None,
    }
}

/// pi's report of startup problems (None when there are none).
fn attention(lines: &[String]) -> Option<String> {
    if lines.is_empty() {
        return None;
    }
    let body: Vec<String> = lines.iter().map(|l| format!("  {l}")).collect();
    Some(format!(
        "MCP servers need attention:\n{}\nRun /mcp to fix.",
        body.join("\n")
    ))
}

/// pi's scope of a server: `project`, `global`, or `extension` for a registered one.
fn scope(config: &ServerConfig) -> &'static str {
    match (config.registered, config.project) {
        (true, _) => "extension",
        (false, true) => "project",
        (false, false) => "global",
    }
}

/// The `/mcp` entry of `get_commands` (pi lists it as its built-in MCP extension's command).
pub fn command_item() -> Value {
    json!({"name": "mcp", "description": "Manage MCP servers: sign in, reconnect, enable or disable, and change exposure",
        "source": "extension", "sourceInfo": {"path": "builtin:mcp", "source": "builtin", "scope": "temporary", "origin": "top-level"}})
}

const NO_OAUTH_SERVER: &str =
    "No enabled MCP server uses OAuth. Only HTTP servers without an Authorization header do.";

/// A server's OAuth settings (HTTP servers without an `Authorization` header have them).
fn oauth_settings(config: &ServerConfig) -> Option<&oauth::Settings> {
    match &config.transport {
        config::Transport::Http { oauth, .. } => oauth.as_deref(),
        _ => None,
    }
}

const MCP_USAGE: &str =
    "Usage: /mcp, /mcp login [server], /mcp logout [server], /mcp reconnect [server]";

/// pi's short state: `connected · N tools · resources`, `failed: <first line>`, …
fn describe_state(server: &Server) -> String {
    match server.status {
        Status::Connected => format!(
            "connected · {} tool{}{}",
            server.tools.len(),
            if server.tools.len() == 1 { "" } else { "s" },
            if server.has_resources {
                " · resources"
            } else {
                ""
            }
        ),
        other => other.as_str().to_string(),
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
    fn the_servers_section_shrinks_summaries_then_counts_the_rest() {
        let section = render_servers_section(&[
            ("mcp__a".into(), "codemode", "Alpha tools".into()),
            ("mcp__b".into(), "tool_search", String::new()),
        ]);
        assert_eq!(
            section,
            "MCP servers whose tools are not declared to you. Call the tools of `codemode` servers from codemode scripts. Load the tools of `tool_search` servers with `tool_search`.\n- mcp__a (codemode): Alpha tools\n- mcp__b (tool_search)"
        );
        let many: Vec<(String, &str, String)> = (0..300)
            .map(|i| (format!("mcp__server_{i}"), "codemode", "x".repeat(300)))
            .collect();
        let section = render_servers_section(&many);
        assert!(section.encode_utf16().count() <= MAX_SERVERS_SECTION_CHARS);
        assert!(section.ends_with("more servers; find their tools with searchTools()"));
        let few: Vec<(String, &str, String)> = (0..3)
            .map(|i| (format!("mcp__s{i}"), "codemode", "y".repeat(400)))
            .collect();
        let section = render_servers_section(&few);
        assert!(
            section.contains(&format!(": {}…", "y".repeat(249))),
            "{section}"
        );
    }

    #[test]
    fn mcp_tool_names() {
        assert!(is_mcp_tool_name("mcp__a__b") && is_mcp_tool_name("read_mcp_resource"));
        assert!(!is_mcp_tool_name("read") && !is_mcp_tool_name("mcp_x"));
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
