//! The agent loop, on the main thread: the single owner of every piece of mutable state — the
//! phase, the steering and follow-up queues, the message list, the session log, config and model.
//! Workers own only their I/O and report back over channels.
//!
//! Shape: `run` = `next_incoming` (one `select_biased!`, stdin first so `abort` and `steer` beat a
//! flood of deltas) → `handle` (one exhaustive match) → named methods. A failed turn is an event
//! (an assistant message with `stopReason:"error"`), never a `?` out of the loop.
//!
//! Blocking calls and how they end: the select wakes on stdin input or its closing, signals, the
//! writer's closed notice, extension events, RPC bash output, the current provider stream's (or
//! summary requests') events, the current tool batch's events, a stream's idle timer and the
//! retry timer, MCP news, a reload's worker. Each channel's closing is its own `Incoming`
//! variant: only stdin's ends the loop; a worker channel that closes is logged and what waited on
//! it is failed. Sending a record blocks while stdout is full (bounded writer channel): a client
//! that stops reading pauses the agent, by design.
//!
//! Submodules own one concern each. The client's requests: `commands` (a dispatch table into
//! handlers), `session_commands`, `model_commands`, `bash_jobs` (RPC bash; the job's thread is
//! `bash_command`). The phases: `streaming`, `tool_batch` (a reply's tool calls),
//! `compaction_phase` (driving a compaction; what to summarize is `compaction`), `retry_wait`;
//! their data lives in `state`. Around the run: `queues` (steering and follow-up), `extending`
//! (extension hooks, events and actions), `mcp_servers`. This file keeps the loop and the run's
//! transitions: start, turn boundaries, end, settle, abort.
//!
//! How it ends: stdin closes, stdout closes, SIGTERM/SIGHUP/parent death, or an extension's
//! shutdown request once idle. A running run is aborted with its `agent_end` first, every shell
//! group is killed, extensions are shut down, the session is synced, and `run` returns the exit
//! code.

pub mod bash_command;
mod bash_jobs;
mod commands;
pub mod compaction;
mod compaction_hook;
mod compaction_phase;
pub mod convert;
pub mod draft;
mod extending;
mod extension_requests;
mod mcp_servers;
mod model_commands;
mod model_refresh;
pub mod pattern;
mod queues;
pub mod reload;
pub mod retry;
mod retry_wait;
mod session_commands;
mod startup_wait;
pub mod state;
mod streaming;
pub mod system_message;
mod tool_batch;
mod tree_navigation;
mod virtual_models;

use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, never, select_biased};
use serde_json::Value;

use crate::config::{Config, Model, ThinkingLevel};
use crate::messages::{AgentMessage, AssistantMessage, StopReason};
use crate::provider::{self, ProviderEvent};
use crate::rpc::events::{Event, Lifecycle};
use crate::rpc::protocol::Response;
use crate::rpc::stdin_reader::Input;
use crate::rpc::stdout_writer::WriterEvent;
use crate::rpc::{Profile, Record, SharedJson};
use crate::session::SessionLog;
use crate::tools::{self, ToolEvent};

use state::{Phase, Run, Runs};

/// A stream that delivers nothing for this long is abandoned as failed (default; settings
/// `retry.provider.timeoutMs` overrides it).
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Provider events buffered before the provider thread waits (backpressure to the socket).
const PROVIDER_CHANNEL_CAPACITY: usize = 256;

/// Everything the agent is started with; built by main from the CLI and config.
pub struct AgentSetup {
    pub config: Config,
    pub session: SessionLog,
    pub model: Model,
    pub thinking: ThinkingLevel,
    pub tool_names: Vec<String>,
    /// Which extension tools `--tools` / `--exclude-tools` leave (`tools::selection`).
    pub tool_filter: crate::tools::selection::ToolFilter,
    /// `Selection::restore_with`: the transcript's tools replace the defaults.
    pub restore_tools_with: Option<Vec<String>>,
    pub system_prompt: crate::resources::system_prompt::SystemPrompt,
    /// `--models` / enabledModels: what cycle_model cycles through (empty: every available model).
    pub scoped_models: Vec<crate::config::ScopedModel>,
    /// The session's rebuilt context (computed once at startup).
    pub messages: Vec<AgentMessage>,
    /// Skills and prompt templates (expansion, get_commands).
    pub resources: crate::resources::discovery::Resources,
    /// Running extensions (also present, with none loaded, when the approval gate needs dialogs).
    pub extensions: Option<crate::extensions::ExtensionHost>,
    pub extension_events: Receiver<crate::extensions::ExtensionEvent>,
    /// What an extension's `reload` loads again.
    pub reload: reload::ReloadInputs,
    pub approvals: crate::extensions::approval::ApprovalPolicy,
    /// The tool sandbox (settings, `--sandbox`; `set_sandbox` changes it).
    pub sandbox: crate::sandbox::Sandbox,
    /// Events to write first (extension load errors).
    pub startup_events: Vec<Event>,
    /// The protocol generation stdout speaks.
    pub profile: Profile,
    /// MCP servers (None with `--no-mcp`).
    pub mcp: Option<crate::mcp::McpHost>,
    /// The front door's client, when it reads, writes or runs for the built-in tools (ACP).
    pub client: Option<std::sync::Arc<dyn crate::tools::client::Client>>,
}

/// The loop's channel ends.
pub struct Channels {
    pub stdin: Receiver<Input>,
    pub writer_events: Receiver<WriterEvent>,
    /// SIGTERM / SIGHUP numbers from the signals thread.
    pub signals: Receiver<i32>,
    pub out: Sender<Record>,
}

/// One thing the loop reacts to.
///
/// Each channel's disconnect has its own variant: only stdin's closing ends the loop; a worker
/// channel that closes is logged and stops being read, and what waited on it is failed.
enum Incoming {
    Input(Input),
    StdinClosed,
    StdoutClosed,
    Signal(i32),
    /// The signals thread is gone (it could not start): run on without signal handling.
    SignalsGone,
    Provider(ProviderEvent),
    /// The stream's thread ended without a terminal event (it panicked).
    ProviderGone,
    StreamIdle,
    Tool(ToolEvent),
    /// The tool batch's channel closed (it holds a sender, so its state is broken).
    ToolsGone,
    RetryDue,
    Bash(bash_command::BashEvent),
    /// The RPC bash channel closed (the agent holds a sender, so its state is broken).
    BashGone,
    Extension(crate::extensions::ExtensionEvent),
    /// The extension host's channel closed (no host, or its router ended).
    ExtensionsGone,
    Mcp(crate::mcp::connection::McpEvent),
    /// The MCP host's event channel closed.
    McpGone,
    /// A start-up wait ran out (`startup_wait`).
    StartupWaitOver,
    /// A login refresh's worker answered (or died: an error).
    OAuthRefreshed(Result<crate::config::oauth::Fresh, crate::config::oauth::OAuthError>),
    /// A prompt's images, scaled (`None`: the worker died).
    ImagesScaled(Option<(String, Vec<crate::messages::ImageContent>)>),
    /// A reload's worker is done (`None`: it died).
    Reloaded(Option<state::Reloaded>),
    /// A queued message's images are ready (`None`: the worker died or took too long).
    QueuedImages(Option<(String, Vec<crate::messages::ImageContent>)>),
    /// (v2) An event of a branch summary's request (`None`: its stream ended without one or
    /// went idle).
    TreeSummary(Option<ProviderEvent>),
    /// (v2) The retry delay of a branch summary ran out.
    TreeSummaryRetryDue,
    /// (v2) The login refresh a branch summary waits for answered (or its worker died).
    TreeLoginRefreshed(Result<crate::config::oauth::Fresh, crate::config::oauth::OAuthError>),
}

/// Kills every child group still running anywhere in the process (tool shells, RPC bash,
/// extensions' `exec` commands, stdio MCP servers): the process is about to exit and must leave
/// none behind. Only a mode's end calls it, after its agents have stopped; never one agent's end,
/// since the lists are process-wide and an ACP connection runs several agents at once.
pub fn kill_leftover_children() {
    tools::bash::kill_all_shells();
    crate::extensions::exec::kill_all();
    crate::mcp::transport::kill_all();
}

/// The agent's state, in named parts. The core — the session, the conversation, config and the
/// model — stays at the top; each part is owned by the file that acts on it.
pub struct Agent {
    /// Where the loop is; a phase owns the workers it waits for.
    phase: Phase,
    /// The run in flight and what carries from one run to the next.
    runs: Runs,
    session: SessionLog,
    /// The conversation as the model will see it (agent state; may differ from the session
    /// file, e.g. after a retry removed a failed reply).
    messages: Vec<AgentMessage>,
    /// The encoded start of `messages` for the next request (invalidated when they are replaced).
    request_cache: provider::request_cache::RequestCache,
    /// Usage of LLM calls outside the conversation (summaries), for get_session_stats.
    extra_usage: Vec<crate::messages::Usage>,
    config: Config,
    model: Model,
    thinking: ThinkingLevel,
    system_prompt: crate::resources::system_prompt::SystemPrompt,
    /// Skills and prompt templates (expansion, get_commands).
    resources: crate::resources::discovery::Resources,
    /// What the client switches over RPC and the limits runs use.
    settings: Settings,
    /// Steering and follow-up messages waiting for their drain point.
    queues: queues::Queues,
    /// What the model is offered and what a call must pass.
    tools: tool_batch::Toolbox,
    /// The extensions, what they asked for and what they started.
    extensions: extending::Extensions,
    /// MCP servers (None with `--no-mcp`).
    mcp: Option<crate::mcp::McpHost>,
    /// RPC `bash` commands in flight and their results waiting for the next prompt.
    bash: bash_jobs::BashJobs,
    /// stdin, stdout, signals: the loop's ends and whether they are open.
    io: Io,
}

/// Settings the client switches over RPC (beyond the model) and the limits runs use.
struct Settings {
    /// `--models` / enabledModels: what cycle_model cycles through (empty: every available model).
    scoped_models: Vec<crate::config::ScopedModel>,
    auto_compaction: bool,
    auto_retry: bool,
    /// A stream that delivers nothing for this long fails (settings `retry.provider.timeoutMs`).
    idle_timeout: Duration,
}

/// The loop's ends towards the client and the process: what is read, where records go and in
/// which protocol generation, and which ends are still open.
struct Io {
    stdin: Receiver<Input>,
    stdin_open: bool,
    writer_events: Receiver<WriterEvent>,
    out: Sender<Record>,
    stdout_open: bool,
    /// The protocol generation stdout speaks.
    profile: Profile,
    /// Events to write first (extension load errors).
    startup_events: Vec<Event>,
    signals: Receiver<i32>,
    /// Set by SIGTERM/SIGHUP: the loop ends and the exit code is 128 + signal.
    exit_signal: Option<i32>,
}

/// How long a silent stream may last (settings `retry.provider.timeoutMs`).
fn idle_timeout(config: &crate::config::Config) -> Duration {
    config
        .provider_timeout_ms()
        .map_or(STREAM_IDLE_TIMEOUT, Duration::from_millis)
}

impl Agent {
    pub fn new(setup: AgentSetup, channels: Channels) -> Agent {
        let idle_timeout = idle_timeout(&setup.config);
        let mut tools = tool_batch::Toolbox::new(
            setup.tool_names,
            setup.tool_filter,
            setup.extensions.as_ref(),
            setup.approvals,
            setup.sandbox,
        );
        tools.client = setup.client;
        tools.restore_with = setup.restore_tools_with;
        let extensions = extending::Extensions::new(
            setup.extensions,
            setup.extension_events,
            setup.reload,
            &setup.config,
        );
        let settings = Settings {
            scoped_models: setup.scoped_models,
            auto_compaction: setup.config.compaction_enabled(),
            auto_retry: setup.config.retry_enabled(),
            idle_timeout,
        };
        let mut agent = Agent {
            phase: Phase::Idle,
            runs: Runs::default(),
            session: setup.session,
            messages: setup.messages,
            request_cache: Default::default(),
            extra_usage: Vec::new(),
            queues: queues::Queues::new(&setup.config),
            config: setup.config,
            model: setup.model,
            thinking: setup.thinking,
            system_prompt: setup.system_prompt,
            resources: setup.resources,
            settings,
            tools,
            extensions,
            mcp: setup.mcp,
            bash: bash_jobs::BashJobs::new(),
            io: Io {
                stdin: channels.stdin,
                stdin_open: true,
                writer_events: channels.writer_events,
                out: channels.out,
                stdout_open: true,
                profile: setup.profile,
                startup_events: setup.startup_events,
                signals: channels.signals,
                exit_signal: None,
            },
        };
        agent.refresh_tool_specs();
        agent.restore_session_tools();
        // (v2) Providers of the `register` lines whose models their extension refreshes.
        agent.refresh_registered_providers(None);
        agent
    }

    /// Runs until stdin or stdout closes; returns the process exit code.
    pub fn run(mut self) -> i32 {
        for event in std::mem::take(&mut self.io.startup_events) {
            self.emit(event);
        }
        self.emit_mcp_notices();
        self.emit(Event::Lifecycle(Lifecycle::SessionStart));
        self.discover_resources("startup");
        while self.io.stdin_open
            && self.io.stdout_open
            && self.io.exit_signal.is_none()
            // An extension's shutdown waits for the current command and run (seed).
            && (!self.extensions.shutdown_requested || self.is_busy() || !self.extensions.command_runs.is_empty())
        {
            let incoming = self.next_incoming();
            self.handle(incoming);
            self.answer_idle_waiters();
        }
        if self.is_busy() {
            self.abort_run();
        }
        // What this agent started ends with it: its RPC bash commands and its extensions'
        // `exec` commands die with their process groups. (The process-wide lists are for the
        // process's exit, `kill_leftover_children`: an ACP connection runs several agents.)
        for job in &self.bash.jobs {
            job.cancel.cancel();
        }
        self.extensions.runs.cancel_all();
        if let Some(host) = self.extensions.host.take() {
            host.shutdown(Duration::from_millis(500));
        }
        if let Some(mcp) = self.mcp.take() {
            mcp.shutdown(Duration::from_millis(500));
        }
        if let Err(e) = self.session.sync() {
            log::error!("session sync at shutdown failed: {e}");
        }
        // The one place the agent waits for the disk: nothing queued may be lost at exit.
        if !crate::disk::flush(Duration::from_secs(30)) {
            log::error!("session and settings writes still pending after 30 s; exiting anyway");
        }
        self.io.exit_signal.map_or(0, |signal| 128 + signal)
    }

    fn next_incoming(&mut self) -> Incoming {
        if let Phase::Streaming(stream) = &mut self.phase
            && let Some(event) = stream.lookahead.take()
        {
            return Incoming::Provider(event);
        }
        let no_provider: Receiver<ProviderEvent> = never();
        let no_tools: Receiver<ToolEvent> = never();
        let (provider_events, idle_deadline) = match &self.phase {
            Phase::Streaming(stream) => (
                &stream.events,
                Some(stream.last_event + self.settings.idle_timeout),
            ),
            Phase::Compacting(compaction) => (&compaction.events, None),
            _ => (&no_provider, None),
        };
        let tool_events = match &self.phase {
            Phase::RunningTools(batch) => &batch.events,
            _ => &no_tools,
        };
        let idle_timer = match idle_deadline {
            Some(deadline) => crossbeam_channel::at(deadline),
            None => never(),
        };
        let no_mcp = never();
        let mcp_events = self.mcp.as_ref().map_or(&no_mcp, |m| m.events());
        let startup_wait = match &self.phase {
            Phase::StartupWait(wait) => crossbeam_channel::at(wait.deadline),
            _ => never(),
        };
        let no_refresh = never();
        let refresh_result = match &self.phase {
            Phase::Refreshing(refreshing) => &refreshing.refresh.result,
            _ => &no_refresh,
        };
        let no_images = never();
        let images = match &self.phase {
            Phase::ScalingImages(work) => &work.result,
            _ => &no_images,
        };
        let (queued_images, queued_images_overdue) = match &self.phase {
            Phase::DeliveringQueued(delivery) => {
                (&delivery.result, crossbeam_channel::at(delivery.deadline))
            }
            _ => (&no_images, never()),
        };
        let no_reload = never();
        let reloaded = match &self.phase {
            Phase::Reloading(reloading) => &reloading.done,
            _ => &no_reload,
        };
        // The new extensions' events wait until their host is in place.
        let no_extension_events = never();
        let extension_events = match &self.phase {
            Phase::Reloading(r) if r.stage == state::ReloadStage::Starting => &no_extension_events,
            _ => &self.extensions.events,
        };
        // (v2) A branch summary `navigate_tree` waits for, and its idle timer.
        let tree_summary = self.extensions.tree_summary();
        let (tree_events, tree_idle) = match tree_summary.and_then(|s| s.events().map(|e| (s, e))) {
            Some((summary, events)) => (
                events,
                crossbeam_channel::at(summary.last_event + self.settings.idle_timeout),
            ),
            None => (&no_provider, never()),
        };
        let tree_refresh = match self
            .extensions
            .tree
            .as_ref()
            .and_then(|t| t.refresh.as_ref())
        {
            Some(waiting) => &waiting.refresh.result,
            None => &no_refresh,
        };
        let tree_retry = match tree_summary.and_then(|s| s.retry_at) {
            Some(deadline) => crossbeam_channel::at(deadline),
            None => never(),
        };
        let retry_timer = match &self.phase {
            Phase::RetryWait(wait) => crossbeam_channel::at(wait.deadline),
            Phase::Compacting(compaction) => match compaction.retry_at {
                Some((_, deadline)) => crossbeam_channel::at(deadline),
                None => never(),
            },
            _ => never(),
        };
        select_biased! {
            recv(self.io.stdin) -> input => match input {
                Ok(input) => Incoming::Input(input),
                Err(_) => Incoming::StdinClosed,
            },
            recv(self.io.signals) -> signal => match signal {
                Ok(signal) => Incoming::Signal(signal),
                Err(_) => Incoming::SignalsGone,
            },
            recv(self.io.writer_events) -> _ => Incoming::StdoutClosed,
            recv(extension_events) -> event => match event {
                Ok(event) => Incoming::Extension(event),
                Err(_) => Incoming::ExtensionsGone,
            },
            recv(provider_events) -> event => match event {
                Ok(event) => Incoming::Provider(event),
                Err(_) => Incoming::ProviderGone,
            },
            recv(tool_events) -> event => match event {
                Ok(event) => Incoming::Tool(event),
                Err(_) => Incoming::ToolsGone,
            },
            recv(self.bash.events) -> event => match event {
                Ok(event) => Incoming::Bash(event),
                Err(_) => Incoming::BashGone,
            },
            recv(mcp_events) -> event => match event {
                Ok(event) => Incoming::Mcp(event),
                Err(_) => Incoming::McpGone,
            },
            recv(startup_wait) -> _ => Incoming::StartupWaitOver,
            recv(tree_events) -> event => Incoming::TreeSummary(event.ok()),
            recv(tree_idle) -> _ => Incoming::TreeSummary(None),
            recv(tree_retry) -> _ => Incoming::TreeSummaryRetryDue,
            recv(tree_refresh) -> result => Incoming::TreeLoginRefreshed(result.unwrap_or_else(|_| {
                Err(crate::config::oauth::OAuthError::WorkerGone)
            })),
            recv(images) -> scaled => Incoming::ImagesScaled(scaled.ok()),
            recv(queued_images) -> ready => Incoming::QueuedImages(ready.ok()),
            recv(queued_images_overdue) -> _ => Incoming::QueuedImages(None),
            recv(reloaded) -> step => Incoming::Reloaded(step.ok()),
            recv(idle_timer) -> _ => Incoming::StreamIdle,
            recv(retry_timer) -> _ => Incoming::RetryDue,
            recv(refresh_result) -> result => Incoming::OAuthRefreshed(result.unwrap_or_else(|_| {
                Err(crate::config::oauth::OAuthError::WorkerGone)
            })),
        }
    }

    fn handle(&mut self, incoming: Incoming) {
        match incoming {
            Incoming::Input(Input::Request(request)) => self.handle_request(request),
            Incoming::Input(Input::Rejected(rejected)) => self.respond(rejected.to_response()),
            Incoming::StdinClosed => self.io.stdin_open = false,
            Incoming::StdoutClosed => self.io.stdout_open = false,
            Incoming::Signal(signal) => self.io.exit_signal = Some(signal),
            Incoming::SignalsGone => {
                // main.rs only warns when the signals thread cannot start: run on without it.
                log::warn!("no signals thread: SIGTERM/SIGHUP are not turned into an orderly exit");
                self.io.signals = never();
            }
            Incoming::Provider(event) if matches!(self.phase, Phase::Compacting(_)) => {
                self.on_compaction_event(event)
            }
            Incoming::Provider(event) => self.on_provider_event(event),
            Incoming::ProviderGone => {
                self.fail_stream("Provider stream ended unexpectedly (connection error)".into())
            }
            Incoming::StreamIdle => self.fail_stream(format!(
                "Request timed out: no data from the provider for {} seconds",
                self.settings.idle_timeout.as_secs()
            )),
            Incoming::Tool(event) => self.on_tool_event(event),
            Incoming::ToolsGone => self.on_tools_gone(),
            Incoming::RetryDue if matches!(self.phase, Phase::Compacting(_)) => {
                self.retry_summary()
            }
            Incoming::RetryDue => self.retry_now(),
            Incoming::Bash(event) => self.on_bash_event(event),
            Incoming::BashGone => self.on_bash_gone(),
            Incoming::Extension(event) => self.on_extension_event(event),
            Incoming::TreeSummary(event) => self.on_tree_summary_event(event),
            Incoming::TreeSummaryRetryDue => self.retry_tree_summary(),
            Incoming::TreeLoginRefreshed(result) => self.on_tree_login_refreshed(result),
            Incoming::ExtensionsGone => self.extensions.events = never(),
            Incoming::Mcp(event) => self.on_mcp_event(event),
            Incoming::McpGone => {
                log::error!("the MCP servers' event channel closed; MCP news is no longer read");
                if let Some(mcp) = &mut self.mcp {
                    mcp.events_gone();
                }
            }
            Incoming::StartupWaitOver => self.end_startup_wait(),
            Incoming::OAuthRefreshed(result) => self.on_oauth_refreshed(result),
            Incoming::ImagesScaled(scaled) => self.on_images_scaled(scaled),
            Incoming::QueuedImages(ready) => self.on_queued_images(ready),
            Incoming::Reloaded(step) => self.on_reload_step(step),
        }
    }

    /// Sends an event to the extensions that subscribed and, in this profile's shape, to the
    /// writer. Blocks while the writer's channel is full.
    fn emit(&mut self, event: Event) {
        if let Some(host) = &self.extensions.host {
            extending::notify_extensions(host, &event);
        }
        if event.is_for_stdout()
            && let Some(record) = event.to_record(self.io.profile)
        {
            self.send(record);
        }
    }

    fn respond(&mut self, response: Response) {
        let record = response.into_record(self.io.profile);
        self.send(record);
    }

    fn send(&mut self, record: Record) {
        if self.io.stdout_open && self.io.out.send(record).is_err() {
            self.io.stdout_open = false;
        }
    }

    fn respond_ok(&mut self, id: Option<&Value>, command: &str, data: Option<Value>) {
        self.respond(Response::ok(id, command, data));
    }

    fn respond_error(&mut self, id: Option<&Value>, command: &str, error: &str) {
        self.respond(Response::error(id, command, error));
    }

    // ---- the run ------------------------------------------------------------------------------

    /// A run that continues the conversation without a new prompt (retry, overflow recovery,
    /// queued messages after a compaction).
    fn continue_run(&mut self) {
        self.runs.current = Some(Run::default());
        self.emit(Event::AgentStart);
        self.emit(Event::TurnStart);
        if self.deliver_queued(true) == 0 {
            self.deliver_queued(false);
        }
        self.request_after_delivery();
    }

    /// Nothing more will happen by itself.
    fn settle(&mut self) {
        let aborted = std::mem::take(&mut self.runs.aborted_since_settled);
        self.emit(Event::AgentSettled { aborted });
    }

    fn start_run(&mut self, prompt_messages: Vec<AgentMessage>) {
        // An abort that ended without settling (a prompt dropped while its hook ran) is over.
        self.runs.aborted_since_settled = false;
        self.runs.current = Some(Run::default());
        self.emit(Event::AgentStart);
        self.emit(Event::TurnStart);
        // The transcript learns the prompt and tools this run uses, when they changed (pi 1.6.0).
        self.refresh_mcp_section();
        self.declare_changes();
        for message in prompt_messages {
            self.add_message(message);
        }
        // Steering queued while idle joins the first turn, right after the prompt.
        self.deliver_queued(true);
        self.request_after_delivery();
    }

    /// Before a request: what changed in the prompt or the tools (a server's section, tools
    /// `tool_search` loaded) becomes one system message, as pi 1.6.0 declares changes.
    fn declare_changes(&mut self) {
        self.refresh_tool_specs();
        if let Some(system) = system_message::patch(
            &self.messages,
            self.extensions
                .run_prompt
                .as_ref()
                .unwrap_or(&self.system_prompt),
            &self.tools.specs,
            system_message::Samplings {
                builtins: &self.tools.builtins,
                extension_tools: &self.tools.extension_tools,
            },
            crate::time::now_ms(),
        ) {
            self.add_message(AgentMessage::System(system));
        }
        // The transcript declares what was loading now.
        self.tools.loading.clear();
    }

    /// Emits `message_start`/`message_end` for a complete message and records it everywhere.
    /// Returns the message serialized (shared by every record that carries it).
    fn add_message(&mut self, message: AgentMessage) -> SharedJson {
        if matches!(message, AgentMessage::User(_)) {
            self.runs.overflow_recovery_attempted = false;
        }
        let json = serialize_message(&message);
        self.emit(Event::MessageStart {
            message: json.clone(),
        });
        self.record_message(&message, &json);
        self.emit(Event::MessageEnd {
            message: json.clone(),
        });
        self.messages.push(message);
        json
    }

    /// Appends to the run's messages and the session log (persisted on message_end, as pi).
    fn record_message(&mut self, message: &AgentMessage, json: &SharedJson) {
        if let Some(run) = self.runs.current.as_mut() {
            run.messages.push(json.clone());
            if matches!(message, AgentMessage::Assistant(_)) {
                run.last_reply = Some(self.messages.len());
            }
        }
        // Custom (extension) messages are custom_message entries in pi's format.
        let appended = match message {
            AgentMessage::Custom(custom) => self.session.append_custom_message(
                &custom.custom_type,
                custom.content.clone(),
                custom.display,
                custom.details.clone(),
            ),
            // The session keeps the text stdout got, shared rather than copied.
            _ => self.session.append_message_json(json.clone()),
        };
        if let Err(e) = appended {
            log::error!("could not append to the session: {e}");
        }
    }

    /// After `turn_end`: steering first, then another turn for tool results, then follow-ups;
    /// otherwise the run ends. Before another turn, a context past the threshold of the
    /// (physical) selection is compacted first, as pi 1.6.0 does before the next response; a
    /// virtual selection is checked against the routed model before its request instead.
    fn after_turn(&mut self, had_tool_calls: bool) {
        if self.runs.current.as_ref().is_some_and(|r| r.aborted) {
            self.end_run();
            return;
        }
        let next_turn =
            had_tool_calls || !self.queues.steering.is_empty() || !self.queues.follow_up.is_empty();
        if next_turn && !self.model.is_virtual() && self.request_needs_compaction(&self.model) {
            let origin = state::CompactionOrigin::BeforeNextTurn { had_tool_calls };
            self.start_compaction(compaction::CompactionReason::Threshold, origin, None);
            return;
        }
        self.start_next_turn(had_tool_calls);
    }

    /// The run's next turn (see `after_turn`), or its end when nothing is left to do.
    fn start_next_turn(&mut self, had_tool_calls: bool) {
        if !self.queues.steering.is_empty() {
            self.emit(Event::TurnStart);
            self.declare_changes();
            self.deliver_queued(true);
            self.request_after_delivery();
        } else if had_tool_calls {
            self.emit(Event::TurnStart);
            self.declare_changes();
            self.request_completion();
        } else if !self.queues.follow_up.is_empty() {
            self.emit(Event::TurnStart);
            self.deliver_queued(false);
            self.request_after_delivery();
        } else {
            self.end_run();
        }
    }

    /// Closes the run with `agent_end`, then either schedules an automatic retry or settles.
    fn end_run(&mut self) {
        self.extensions.context_hook = None;
        self.extensions.route = None;
        self.extensions.routed = None;
        let Some(run) = self.runs.current.take() else {
            return;
        };
        self.phase = Phase::Idle;
        // The run's latest reply, without its content (all the decisions below need).
        let last_reply = run
            .last_reply
            .and_then(|i| self.messages.get(i))
            .and_then(AgentMessage::as_assistant)
            .map(AssistantMessage::clone_without_content);
        let failed = match &last_reply {
            Some(last) if last.stop_reason == StopReason::Error && !run.aborted => {
                Some(last.clone())
            }
            _ => None,
        };
        let retry = match &failed {
            Some(failed) => self.plan_retry(failed),
            None => Ok(None),
        };
        // Without a retry, the context may need compacting (threshold) or overflowed (then a
        // compaction and one more try follow, so agent_end says willRetry).
        let trigger = match (&retry, &last_reply) {
            (Ok(None) | Err(_), Some(reply)) if !run.aborted => {
                self.compaction_trigger(reply, false)
            }
            _ => compaction::Trigger::Nothing,
        };
        let will_retry = matches!(retry, Ok(Some(_))) || trigger == compaction::Trigger::Overflow;
        self.emit(Event::AgentEnd {
            messages: run.messages,
            will_retry,
        });
        if let Err(e) = self.session.sync() {
            log::error!("session sync failed: {e}");
        }
        match retry {
            Ok(Some(delay)) => {
                let failed = failed.expect("a retry is planned only for a failed reply");
                self.schedule_retry(delay, &failed);
                return;
            }
            Ok(None) => {}
            Err(final_error) => {
                let attempt = std::mem::take(&mut self.runs.retry_attempt);
                self.emit(Event::AutoRetryEnd {
                    success: false,
                    attempt,
                    final_error: Some(final_error),
                });
            }
        }
        if self.runs.retry_attempt > 0 {
            // The chain ended some other way (abort, a non-transient error): close it.
            let attempt = std::mem::take(&mut self.runs.retry_attempt);
            let error = failed
                .and_then(|f| f.error_message)
                .unwrap_or_else(|| "Retry cancelled".into());
            self.emit(Event::AutoRetryEnd {
                success: false,
                attempt,
                final_error: Some(error),
            });
        }
        match trigger {
            compaction::Trigger::Nothing => self.settle(),
            compaction::Trigger::OverflowGaveUp => {
                let reason = compaction::CompactionReason::Overflow;
                let gave_up = Some(compaction::OVERFLOW_GAVE_UP);
                self.emit(compaction::end_event(reason, None, false, false, gave_up));
                self.settle();
            }
            compaction::Trigger::Overflow => {
                // As pi 1.6.0: the attempt that overflowed is left out of the context for good
                // before the compaction that recovers from it.
                self.omit_failed_attempt();
                self.start_compaction(
                    compaction::CompactionReason::Overflow,
                    state::CompactionOrigin::AfterRun,
                    None,
                )
            }
            compaction::Trigger::Threshold => self.start_compaction(
                compaction::CompactionReason::Threshold,
                state::CompactionOrigin::AfterRun,
                None,
            ),
        }
    }

    fn is_busy(&self) -> bool {
        self.runs.current.is_some()
            || matches!(
                self.phase,
                Phase::RetryWait(_)
                    | Phase::Compacting(_)
                    | Phase::Preparing(_)
                    | Phase::StartupWait(_)
                    | Phase::Refreshing(_)
                    | Phase::ScalingImages(_)
                    | Phase::DeliveringQueued(_)
                    | Phase::Reloading(_)
            )
    }

    /// Stops the run now: the streaming reply is closed as aborted, running tools are cancelled
    /// (their group killed) with "aborted" results, and the run ends with its `agent_end`. Queued
    /// steering and follow-ups survive, as in pi.
    fn abort_run(&mut self) {
        // Extensions' `exec` and `execute_tool` requests end with the run.
        self.extensions.runs.cancel_all();
        self.runs.aborted_since_settled = true;
        if let Some(run) = self.runs.current.as_mut() {
            run.aborted = true;
        }
        match &self.phase {
            Phase::Streaming(_) => {
                self.finish_stream(StopReason::Aborted, Some("Request was aborted".into()))
            }
            Phase::RunningTools(_) => self.abort_tools(),
            Phase::RetryWait(_) => self.cancel_retry(),
            Phase::Compacting(_) => self.abort_compaction(),
            Phase::Preparing(_) => self.abort_preparing(),
            Phase::StartupWait(_) => self.abort_startup_wait(),
            Phase::Refreshing(_) => self.abort_refresh(),
            Phase::ScalingImages(_) => self.abort_scaling(),
            Phase::DeliveringQueued(_) => self.abort_delivery(),
            Phase::Reloading(_) => self.abort_reload(),
            Phase::Idle => self.end_run(),
        }
    }
}

/// A message serialized once for every record that carries it.
fn serialize_message(message: &AgentMessage) -> SharedJson {
    crate::rpc::shared::message(message, &[])
}

#[cfg(test)]
mod tests;
