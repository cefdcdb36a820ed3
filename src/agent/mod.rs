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
//! retry timer, MCP news. Each channel's closing is its own `Incoming` variant: only stdin's ends
//! the loop; a worker channel that closes is logged and what waited on it is failed. Sending a
//! record blocks while stdout is full (bounded writer channel): a client that stops reading
//! pauses the agent, by design.
//!
//! Submodules own one concern each: `tool_batch` (a reply's tool calls), `compaction_phase`
//! (driving a compaction; its data lives in `state` with the other phases), `extending`
//! (extension hooks, events and actions), `bash_command` (RPC bash).
//!
//! How it ends: stdin closes, stdout closes, SIGTERM/SIGHUP/parent death, or an extension's
//! shutdown request once idle. A running run is aborted with its `agent_end` first, every shell
//! group is killed, extensions are shut down, the session is synced, and `run` returns the exit
//! code.

pub mod bash_command;
pub mod compaction;
mod compaction_phase;
pub mod convert;
pub mod draft;
mod extending;
mod mcp_servers;
pub mod pattern;
pub mod retry;
pub mod state;
mod tool_batch;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, never, select_biased};
use serde_json::{Value, json};

use crate::config::{Config, Model, QueueMode, ThinkingLevel};
use crate::messages::{
    AgentMessage, AssistantMessage, ContentBlock, ImageContent, StopReason, TextContent, ToolCall,
    ToolSpec, UserMessage,
};
use crate::provider::{self, ProviderEvent, RequestId, StreamEvent, StreamRequest};
use crate::rpc::events::{Event, Lifecycle};
use crate::rpc::protocol::{Command, Request, Response, StreamingBehavior};
use crate::rpc::stdin_reader::Input;
use crate::rpc::stdout_writer::WriterEvent;
use crate::rpc::{Profile, Record, SharedJson};
use crate::session::SessionLog;
use crate::time::now_ms;
use crate::tools::{self, ToolContext, ToolEvent};

use draft::Draft;
use state::{Phase, QueuedMessage, RetryWait, Run, Stream};

/// A stream that delivers nothing for this long is abandoned as failed (default; settings
/// `retry.provider.timeoutMs` overrides it).
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long extensions get to answer a hook, unless settings `extensionHookTimeoutMs` says.
const DEFAULT_HOOK_DEADLINE: Duration = Duration::from_secs(30);
/// Merged deltas stop growing at this size: a full writer channel (1024 records) then holds
/// ~2 MB of text while the client stalls (8 KB records held ~14 MB of RSS).
const COALESCE_LIMIT: usize = 1024;
/// Provider events buffered before the provider thread waits (backpressure to the socket).
const PROVIDER_CHANNEL_CAPACITY: usize = 256;

/// Everything the agent is started with; built by main from the CLI and config.
pub struct AgentSetup {
    pub config: Config,
    pub session: SessionLog,
    pub model: Model,
    pub thinking: ThinkingLevel,
    pub tool_names: Vec<String>,
    pub system_prompt: String,
    /// `--models` / enabledModels: what cycle_model cycles through (empty: every available model).
    pub scoped_models: Vec<crate::config::ScopedModel>,
    /// The session's rebuilt context (computed once at startup).
    pub messages: Vec<AgentMessage>,
    /// Skills and prompt templates (expansion, get_commands).
    pub resources: crate::resources::discovery::Resources,
    /// Running extensions (also present, with none loaded, when the approval gate needs dialogs).
    pub extensions: Option<crate::extensions::ExtensionHost>,
    pub extension_events: Receiver<crate::extensions::ExtensionEvent>,
    pub approvals: crate::extensions::approval::ApprovalPolicy,
    /// The tool sandbox (settings, `--sandbox`; `set_sandbox` changes it).
    pub sandbox: crate::sandbox::Sandbox,
    /// Events to write first (extension load errors).
    pub startup_events: Vec<Event>,
    /// The protocol generation stdout speaks.
    pub profile: Profile,
    /// MCP servers (None with `--no-mcp`).
    pub mcp: Option<crate::mcp::McpHost>,
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
    /// The first prompt's wait for MCP servers is over.
    McpWaitOver,
}

struct BashJobState {
    job: u64,
    request_id: Option<Value>,
    command: String,
    cancel: crate::child::CancelFlag,
}

pub struct Agent {
    config: Config,
    session: SessionLog,
    /// The conversation as the model will see it (agent state; may differ from the session
    /// file, e.g. after a retry removed a failed reply).
    messages: Vec<AgentMessage>,
    /// The encoded start of `messages` for the next request (invalidated when they are replaced).
    request_cache: provider::request_cache::RequestCache,
    model: Model,
    thinking: ThinkingLevel,
    tool_names: Vec<String>,
    tool_specs: Vec<ToolSpec>,
    scoped_models: Vec<crate::config::ScopedModel>,
    resources: crate::resources::discovery::Resources,
    extensions: Option<crate::extensions::ExtensionHost>,
    extension_events: Receiver<crate::extensions::ExtensionEvent>,
    extension_tools: Vec<crate::extensions::ExtensionTool>,
    mcp: Option<crate::mcp::McpHost>,
    approvals: crate::extensions::approval::ApprovalPolicy,
    grants: crate::extensions::approval::SessionGrants,
    sandbox: crate::sandbox::Sandbox,
    /// Queued input waiting for the extensions' `input` hook.
    queue_inputs: Vec<state::QueueInput>,
    /// Extension commands run from `prompt`, answered `handled` when they finish.
    command_runs: Vec<(crate::extensions::CommandRunId, Option<Value>)>,
    /// Extension messages delivered with the next prompt.
    next_turn_messages: Vec<AgentMessage>,
    /// This prompt's system prompt when an extension replaced it (before_agent_start).
    run_system_prompt: Option<String>,
    /// An extension asked to shut down: exit once nothing runs.
    shutdown_requested: bool,
    startup_events: Vec<Event>,
    profile: Profile,
    /// An abort ended the work since the last `agent_settled` (its `aborted`).
    aborted_since_settled: bool,
    /// A stream that delivers nothing for this long fails (settings `retry.provider.timeoutMs`).
    idle_timeout: Duration,
    /// How long extensions get to answer a hook (settings `extensionHookTimeoutMs`, default 30 s).
    hook_deadline: Duration,
    system_prompt: String,
    steering: VecDeque<QueuedMessage>,
    follow_up: VecDeque<QueuedMessage>,
    steering_mode: QueueMode,
    follow_up_mode: QueueMode,
    auto_compaction: bool,
    auto_retry: bool,
    phase: Phase,
    /// Between `agent_start` and `agent_end`.
    run: Option<Run>,
    next_request: u64,
    /// Automatic retries made since the last successful reply (0 = not retrying).
    retry_attempt: u64,
    /// The server's `retry-after` for the latest failed request.
    retry_after: Option<Duration>,
    /// RPC `bash` commands in flight: (job, request id, command, cancel flag), oldest first.
    bash_jobs: Vec<BashJobState>,
    next_bash_job: u64,
    bash_events: Receiver<bash_command::BashEvent>,
    bash_sender: Sender<bash_command::BashEvent>,
    /// Bash results that finished while a run streamed: they join the context at the next prompt.
    pending_bash: Vec<AgentMessage>,
    /// An overflow compaction already ran for the current user message (pi retries once).
    overflow_recovery_attempted: bool,
    /// Usage of LLM calls outside the conversation (summaries), for get_session_stats.
    extra_usage: Vec<crate::messages::Usage>,
    stdin: Receiver<Input>,
    stdin_open: bool,
    writer_events: Receiver<WriterEvent>,
    signals: Receiver<i32>,
    /// Set by SIGTERM/SIGHUP: the loop ends and the exit code is 128 + signal.
    exit_signal: Option<i32>,
    out: Sender<Record>,
    stdout_open: bool,
}

impl Agent {
    pub fn new(setup: AgentSetup, channels: Channels) -> Agent {
        let idle_timeout = setup
            .config
            .provider_timeout_ms()
            .map_or(STREAM_IDLE_TIMEOUT, Duration::from_millis);
        let hook_deadline = setup
            .config
            .setting("extensionHookTimeoutMs")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_HOOK_DEADLINE, Duration::from_millis);
        let extension_tools = setup
            .extensions
            .as_ref()
            .map(|h| h.tools())
            .unwrap_or_default();
        let tool_specs = all_tool_specs(&setup.tool_names, &extension_tools, setup.mcp.as_ref());
        let (bash_sender, bash_events) = crossbeam_channel::bounded(PROVIDER_CHANNEL_CAPACITY);
        Agent {
            steering_mode: setup.config.steering_mode(),
            follow_up_mode: setup.config.follow_up_mode(),
            auto_compaction: setup.config.compaction_enabled(),
            auto_retry: setup.config.retry_enabled(),
            messages: setup.messages,
            request_cache: Default::default(),
            config: setup.config,
            session: setup.session,
            model: setup.model,
            thinking: setup.thinking,
            tool_names: setup.tool_names,
            tool_specs,
            scoped_models: setup.scoped_models,
            resources: setup.resources,
            extensions: setup.extensions,
            extension_events: setup.extension_events,
            extension_tools,
            mcp: setup.mcp,
            approvals: setup.approvals,
            grants: Default::default(),
            sandbox: setup.sandbox,
            command_runs: Vec::new(),
            queue_inputs: Vec::new(),
            next_turn_messages: Vec::new(),
            run_system_prompt: None,
            shutdown_requested: false,
            startup_events: setup.startup_events,
            profile: setup.profile,
            aborted_since_settled: false,
            idle_timeout,
            hook_deadline,
            system_prompt: setup.system_prompt,
            steering: VecDeque::new(),
            follow_up: VecDeque::new(),
            phase: Phase::Idle,
            run: None,
            next_request: 0,
            retry_attempt: 0,
            retry_after: None,
            bash_jobs: Vec::new(),
            next_bash_job: 0,
            bash_events,
            bash_sender,
            pending_bash: Vec::new(),
            overflow_recovery_attempted: false,
            extra_usage: Vec::new(),
            stdin: channels.stdin,
            stdin_open: true,
            writer_events: channels.writer_events,
            signals: channels.signals,
            exit_signal: None,
            out: channels.out,
            stdout_open: true,
        }
    }

    /// Runs until stdin or stdout closes; returns the process exit code.
    pub fn run(mut self) -> i32 {
        for event in std::mem::take(&mut self.startup_events) {
            self.emit(event);
        }
        self.emit_mcp_notices();
        self.emit(Event::Lifecycle(Lifecycle::SessionStart));
        while self.stdin_open
            && self.stdout_open
            && self.exit_signal.is_none()
            // An extension's shutdown waits for the current command and run (seed).
            && (!self.shutdown_requested || self.is_busy() || !self.command_runs.is_empty())
        {
            let incoming = self.next_incoming();
            self.handle(incoming);
        }
        if self.is_busy() {
            self.abort_run();
        }
        // Every shell we started (tools and RPC bash) dies with its process group, now: the
        // process is about to exit and must leave no children behind.
        for job in &self.bash_jobs {
            job.cancel.cancel();
        }
        tools::bash::kill_all_shells();
        if let Some(host) = self.extensions.take() {
            host.shutdown(Duration::from_millis(500));
        }
        if let Some(mcp) = self.mcp.take() {
            mcp.shutdown(Duration::from_millis(500));
        }
        crate::mcp::transport::kill_all();
        if let Err(e) = self.session.sync() {
            log::error!("session sync at shutdown failed: {e}");
        }
        // The one place the agent waits for the disk: nothing queued may be lost at exit.
        if !crate::disk::flush(Duration::from_secs(30)) {
            log::error!("session and settings writes still pending after 30 s; exiting anyway");
        }
        self.exit_signal.map_or(0, |signal| 128 + signal)
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
            Phase::Streaming(stream) => {
                (&stream.events, Some(stream.last_event + self.idle_timeout))
            }
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
        let mcp_wait = match &self.phase {
            Phase::WaitingForMcp(wait) => crossbeam_channel::at(wait.deadline),
            _ => never(),
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
            recv(self.stdin) -> input => match input {
                Ok(input) => Incoming::Input(input),
                Err(_) => Incoming::StdinClosed,
            },
            recv(self.signals) -> signal => match signal {
                Ok(signal) => Incoming::Signal(signal),
                Err(_) => Incoming::SignalsGone,
            },
            recv(self.writer_events) -> _ => Incoming::StdoutClosed,
            recv(self.extension_events) -> event => match event {
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
            recv(self.bash_events) -> event => match event {
                Ok(event) => Incoming::Bash(event),
                Err(_) => Incoming::BashGone,
            },
            recv(mcp_events) -> event => match event {
                Ok(event) => Incoming::Mcp(event),
                Err(_) => Incoming::McpGone,
            },
            recv(mcp_wait) -> _ => Incoming::McpWaitOver,
            recv(idle_timer) -> _ => Incoming::StreamIdle,
            recv(retry_timer) -> _ => Incoming::RetryDue,
        }
    }

    fn handle(&mut self, incoming: Incoming) {
        match incoming {
            Incoming::Input(Input::Request(request)) => self.handle_request(request),
            Incoming::Input(Input::Rejected(rejected)) => self.respond(rejected.to_response()),
            Incoming::StdinClosed => self.stdin_open = false,
            Incoming::StdoutClosed => self.stdout_open = false,
            Incoming::Signal(signal) => self.exit_signal = Some(signal),
            Incoming::SignalsGone => {
                // main.rs only warns when the signals thread cannot start: run on without it.
                log::warn!("no signals thread: SIGTERM/SIGHUP are not turned into an orderly exit");
                self.signals = never();
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
                self.idle_timeout.as_secs()
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
            Incoming::ExtensionsGone => self.extension_events = never(),
            Incoming::Mcp(event) => self.on_mcp_event(event),
            Incoming::McpGone => {
                log::error!("the MCP servers' event channel closed; MCP news is no longer read");
                if let Some(mcp) = &mut self.mcp {
                    mcp.events_gone();
                }
            }
            Incoming::McpWaitOver => self.end_mcp_wait(),
        }
    }

    /// Sends an event to the extensions that subscribed and, in this profile's shape, to the
    /// writer. Blocks while the writer's channel is full.
    fn emit(&mut self, event: Event) {
        if let Some(host) = &self.extensions {
            notify_extensions(host, &event);
        }
        if event.is_for_stdout()
            && let Some(record) = event.to_record(self.profile)
        {
            self.send(record);
        }
    }

    fn respond(&mut self, response: Response) {
        let record = response.into_record(self.profile);
        self.send(record);
    }

    fn send(&mut self, record: Record) {
        if self.stdout_open && self.out.send(record).is_err() {
            self.stdout_open = false;
        }
    }

    fn respond_ok(&mut self, id: Option<&Value>, command: &str, data: Option<Value>) {
        self.respond(Response::ok(id, command, data));
    }

    fn respond_error(&mut self, id: Option<&Value>, command: &str, error: &str) {
        self.respond(Response::error(id, command, error));
    }

    // ---- commands ----------------------------------------------------------------------------

    fn handle_request(&mut self, request: Request) {
        let Request { id, command } = request;
        let id = id.as_ref();
        let name = command.name();
        match command {
            Command::Prompt {
                message,
                images,
                streaming_behavior,
            } => {
                if !self.try_extension_command(id, &message) && !self.try_mcp_command(id, &message)
                {
                    self.prompt(id, message, images, streaming_behavior)
                }
            }
            Command::Steer { message, .. } if self.is_extension_command(&message) => {
                self.respond_error(id, name, &cannot_queue(&message));
            }
            Command::FollowUp { message, .. } if self.is_extension_command(&message) => {
                self.respond_error(id, name, &cannot_queue(&message));
            }
            Command::Steer { message, images } => {
                self.queue_input(id, name, StreamingBehavior::Steer, message, images)
            }
            Command::FollowUp { message, images } => {
                self.queue_input(id, name, StreamingBehavior::FollowUp, message, images)
            }
            Command::Abort => {
                if self.is_busy() {
                    self.abort_run();
                }
                self.respond_ok(id, name, None);
            }
            Command::ClearQueue => {
                let data = self.clear_queues();
                self.respond_ok(id, name, Some(data));
            }
            Command::GetState => {
                let state = self.state_json();
                self.respond_ok(id, name, Some(state));
            }
            Command::SetSandbox { mode, network } => self.set_sandbox(id, &mode, network),
            Command::GetMessages => {
                let messages = serde_json::to_value(&self.messages).unwrap_or(Value::Null);
                self.respond_ok(id, name, Some(json!({ "messages": messages })));
            }
            Command::SetModel { provider, model_id } => {
                self.set_model_command(id, &provider, &model_id)
            }
            Command::CycleModel => self.cycle_model(id),
            Command::GetAvailableModels => {
                let models = self.config.available_models();
                self.respond_ok(id, name, Some(json!({ "models": models })));
            }
            Command::SetThinkingLevel { level } => {
                let requested = ThinkingLevel::parse(&level);
                let level = match requested {
                    Some(level) => self.model.clamp_thinking_level(level),
                    // pi: unknown strings become the first supported level.
                    None => self.model.supported_thinking_levels()[0],
                };
                self.set_thinking_level(level, true);
                self.respond_ok(id, name, None);
            }
            Command::CycleThinkingLevel => {
                if !self.model.reasoning {
                    self.respond_ok(id, name, Some(Value::Null));
                    return;
                }
                let levels = self.model.supported_thinking_levels();
                let position = levels.iter().position(|l| *l == self.thinking);
                let next = levels[position.map_or(0, |p| (p + 1) % levels.len())];
                self.set_thinking_level(next, true);
                self.respond_ok(id, name, Some(json!({ "level": next.as_str() })));
            }
            Command::GetAvailableThinkingLevels => {
                let levels: Vec<&str> = self
                    .model
                    .supported_thinking_levels()
                    .iter()
                    .map(|l| l.as_str())
                    .collect();
                self.respond_ok(id, name, Some(json!({ "levels": levels })));
            }
            Command::SetSteeringMode { mode } => match parse_queue_mode(&mode) {
                Some(parsed) => {
                    self.steering_mode = parsed;
                    self.config.set_steering_mode(parsed.as_str());
                    self.respond_ok(id, name, None);
                }
                None => self.respond_error(id, name, &invalid_mode(&mode)),
            },
            Command::SetFollowUpMode { mode } => match parse_queue_mode(&mode) {
                Some(parsed) => {
                    self.follow_up_mode = parsed;
                    self.config.set_follow_up_mode(parsed.as_str());
                    self.respond_ok(id, name, None);
                }
                None => self.respond_error(id, name, &invalid_mode(&mode)),
            },
            Command::SetAutoCompaction { enabled } => {
                self.auto_compaction = enabled;
                self.config.set_compaction_enabled(enabled);
                self.respond_ok(id, name, None);
            }
            Command::SetAutoRetry { enabled } => {
                self.auto_retry = enabled;
                self.config.set_retry_enabled(enabled);
                self.respond_ok(id, name, None);
            }
            Command::AbortRetry => {
                if matches!(self.phase, Phase::RetryWait(_)) {
                    self.cancel_retry();
                }
                self.respond_ok(id, name, None);
            }
            Command::GetLastAssistantText => {
                let text = self.last_assistant_text();
                self.respond_ok(id, name, Some(json!({ "text": text })));
            }
            Command::SetSessionName { name: session_name } => {
                let trimmed = session_name.trim();
                if trimmed.is_empty() {
                    self.respond_error(id, name, "Session name cannot be empty");
                    return;
                }
                if let Err(e) = self.session.append_session_info(trimmed) {
                    self.respond_error(id, name, &format!("Could not save the session name: {e}"));
                    return;
                }
                self.emit(Event::SessionInfoChanged {
                    name: trimmed.to_string(),
                });
                self.respond_ok(id, name, None);
            }
            Command::ExtensionUiResponse {
                id: ui_id,
                value,
                confirmed,
                cancelled,
            } => {
                // Unknown or expired ids are ignored (seed); no response record either way.
                self.deliver_ui_response(&ui_id, value, confirmed, cancelled);
            }
            Command::NewSession { parent_session } => {
                let created = match self.session.session_dir() {
                    Some(dir) => SessionLog::create_with_parent(
                        dir,
                        &self.config.cwd,
                        parent_session.as_deref(),
                    ),
                    None => Ok(SessionLog::in_memory(&self.config.cwd)),
                };
                match created {
                    Ok(log) => {
                        self.replace_session(log, true);
                        self.respond_ok(id, name, Some(json!({ "cancelled": false })));
                    }
                    Err(e) => self.respond_error(id, name, &e.to_string()),
                }
            }
            Command::SwitchSession { session_path } => {
                // Relative to where pi-rs was started, as pi resolves it (the process never
                // changes directory; only the agent's working directory moves).
                let path = PathBuf::from(&session_path);
                let dir = self.session.session_dir().map(|d| d.to_path_buf());
                match SessionLog::open(&path, dir.as_deref(), &self.config.cwd) {
                    Ok((log, warnings)) => {
                        if let Some(error) = log.missing_cwd_error(&self.config.cwd) {
                            self.respond_error(id, name, &error);
                            return;
                        }
                        for warning in warnings {
                            log::warn!("{}: {warning}", path.display());
                        }
                        let session_cwd = log.cwd().to_path_buf();
                        self.replace_session(log, false);
                        self.move_to(session_cwd);
                        self.respond_ok(id, name, Some(json!({ "cancelled": false })));
                    }
                    Err(e) => self.respond_error(id, name, &e.to_string()),
                }
            }
            Command::Fork { entry_id } => match self.session.fork(&entry_id) {
                Ok((log, text)) => {
                    self.replace_session(log, false);
                    self.respond_ok(id, name, Some(json!({ "text": text, "cancelled": false })));
                }
                Err(e) => self.respond_error(id, name, &e.to_string()),
            },
            Command::Clone => match self.session.clone_at_leaf() {
                Ok(log) => {
                    self.replace_session(log, false);
                    self.respond_ok(id, name, Some(json!({ "cancelled": false })));
                }
                Err(e) => self.respond_error(id, name, &e.to_string()),
            },
            Command::GetForkMessages => {
                let messages: Vec<Value> = self
                    .session
                    .fork_messages()
                    .into_iter()
                    .map(|m| json!({ "entryId": m.entry_id, "text": m.text }))
                    .collect();
                self.respond_ok(id, name, Some(json!({ "messages": messages })));
            }
            Command::GetEntries { since } => {
                // Written from the entries without a JSON value per entry (sessions get long).
                match self.session.entries_since_json(since.as_deref()) {
                    Ok(entries) => {
                        let leaf = self.session.leaf_id();
                        self.respond(Response::entries(id, &entries, leaf));
                    }
                    Err(e) => self.respond_error(id, name, &e.to_string()),
                }
            }
            Command::GetTree => {
                // Built as text: a long session is a deep tree that serde_json would recurse into.
                let session = &self.session;
                let response = Response::tree(id, session.leaf_id(), |before, after| {
                    session.tree_json_between(before, after)
                });
                self.respond(response);
            }
            Command::Bash { command } => self.start_bash(id, command),
            Command::AbortBash => {
                if let Some(job) = self.bash_jobs.last() {
                    job.cancel.cancel();
                }
                self.respond_ok(id, name, None);
            }
            Command::Compact {
                custom_instructions,
            } => {
                if matches!(self.phase, Phase::Compacting(_)) {
                    self.respond_error(id, name, "Compaction already in progress");
                    return;
                }
                if self.is_busy() {
                    self.abort_run();
                }
                let origin = state::CompactionOrigin::Command { id: id.cloned() };
                self.start_compaction(
                    compaction::CompactionReason::Manual,
                    origin,
                    custom_instructions.as_deref(),
                );
            }
            Command::GetSessionStats => {
                let stats = compaction::session_stats(
                    &self.session,
                    &self.messages,
                    &self.extra_usage,
                    &self.model,
                );
                self.respond_ok(id, name, Some(stats));
            }
            Command::GetMcpServers => {
                let data = match &self.mcp {
                    Some(mcp) => mcp.status(),
                    None => json!({"servers": [], "errors": []}),
                };
                self.respond_ok(id, name, Some(data));
            }
            Command::GetCommands => {
                // Extension commands first, then prompt templates and skills (pi's order).
                let mut commands: Vec<Value> = self
                    .extensions
                    .as_ref()
                    .map(|host| {
                        host.commands()
                            .iter()
                            .map(|c| c.get_commands_item())
                            .collect()
                    })
                    .unwrap_or_default();
                if self.mcp.as_ref().is_some_and(|m| m.is_configured()) {
                    commands.push(crate::mcp::command_item());
                }
                commands.extend(crate::resources::discovery::commands_json(&self.resources));
                self.respond_ok(id, name, Some(json!({ "commands": commands })));
            }
            Command::ExportHtml { output_path } => match self.export_html(output_path.as_deref()) {
                Ok(path) => self.respond_ok(id, name, Some(json!({ "path": path }))),
                Err(e) => self.respond_error(id, name, &e),
            },
        }
    }

    /// Swaps in another session (new, switch, fork, clone). A running run is aborted first — it
    /// must not keep working unseen on the old session. The conversation, model and thinking
    /// level come from the new session's active branch.
    fn replace_session(&mut self, log: SessionLog, fresh: bool) {
        if self.is_busy() {
            self.abort_run();
        }
        if let Err(e) = self.session.sync() {
            log::error!("session sync failed: {e}");
        }
        self.session = log;
        let context = self.session.context();
        self.messages = context.messages;
        self.request_cache.invalidate();
        // The old session and conversation are gone: hand their memory back to the system
        // (glibc otherwise keeps the freed heap, and RSS stays at the old session's plateau).
        return_freed_memory();
        if let Some((provider, id)) = &context.model
            && let Some(model) = self
                .config
                .find_model(provider, id)
                .filter(|m| self.config.has_auth(&m.provider))
        {
            self.model = model.clone();
        }
        if let Some(level) = context.thinking_level {
            self.thinking = self.model.clamp_thinking_level(level);
        }
        if fresh {
            if !self.model.is_placeholder()
                && let Err(e) = self
                    .session
                    .append_model_change(&self.model.provider, &self.model.id)
            {
                log::error!("could not record the model: {e}");
            }
            if let Err(e) = self.session.append_thinking_level_change(self.thinking) {
                log::error!("could not record the thinking level: {e}");
            }
        }
        if !self.steering.is_empty() || !self.follow_up.is_empty() {
            self.steering.clear();
            self.follow_up.clear();
            self.emit_queue_update();
        }
    }

    /// A switched-to session runs in its own directory, as in pi: tools, `bash`, approvals, new
    /// sessions and the prompt's working-directory line follow. Settings, context files, skills,
    /// templates and extensions stay those loaded at startup (pi reloads them; see README).
    fn move_to(&mut self, cwd: PathBuf) {
        if cwd == self.config.cwd {
            return;
        }
        log::info!("working directory is now {}", cwd.display());
        self.system_prompt = crate::resources::system_prompt::with_cwd(&self.system_prompt, &cwd);
        self.config.cwd = cwd;
    }

    fn start_bash(&mut self, id: Option<&Value>, command: String) {
        self.next_bash_job += 1;
        let cancel = crate::child::CancelFlag::default();
        let job = bash_command::BashJob {
            job: self.next_bash_job,
            command: command.clone(),
            cwd: self.config.cwd.clone(),
            agent_dir: self.config.agent_dir.clone(),
            shell_path: self.config.shell_path(),
            shell_command_prefix: self.config.shell_command_prefix(),
        };
        match bash_command::spawn(job, cancel.clone(), self.bash_sender.clone()) {
            Ok(()) => self.bash_jobs.push(BashJobState {
                job: self.next_bash_job,
                request_id: id.cloned(),
                command,
                cancel,
            }),
            Err(e) => self.respond_error(id, "bash", &format!("Cannot start the command: {e}")),
        }
    }

    /// The RPC bash channel closed, so no job in flight can report: each one is cancelled and
    /// answered with an error, and later jobs get a fresh channel.
    fn on_bash_gone(&mut self) {
        log::error!(
            "the RPC bash channel closed; failing {} job(s) in flight",
            self.bash_jobs.len()
        );
        (self.bash_sender, self.bash_events) =
            crossbeam_channel::bounded(PROVIDER_CHANNEL_CAPACITY);
        for job in std::mem::take(&mut self.bash_jobs) {
            job.cancel.cancel();
            self.respond_error(
                job.request_id.as_ref(),
                "bash",
                "The command's thread ended without a result",
            );
        }
    }

    fn on_bash_event(&mut self, event: bash_command::BashEvent) {
        let Some(position) = self.bash_jobs.iter().position(|j| j.job == event.job) else {
            return;
        };
        match event.kind {
            bash_command::BashEventKind::Delta(delta) => {
                let id = self.bash_jobs[position].request_id.clone();
                self.emit(Event::BashExecutionUpdate { id, delta });
            }
            bash_command::BashEventKind::Finished(result) => {
                let job = self.bash_jobs.remove(position);
                let message = AgentMessage::BashExecution(crate::messages::BashExecutionMessage {
                    command: job.command,
                    output: result.output.clone(),
                    exit_code: result.exit_code,
                    cancelled: result.cancelled,
                    truncated: result.truncated,
                    full_output_path: result.full_output_path.clone(),
                    timestamp: now_ms(),
                    exclude_from_context: None,
                });
                if self.is_busy() {
                    // pi holds it until the next prompt, so a streaming turn's context is stable.
                    self.pending_bash.push(message);
                } else {
                    let json = serialize_message(&message);
                    self.record_message(&message, &json);
                    self.messages.push(message);
                }
                let mut data = serde_json::Map::new();
                data.insert("output".into(), json!(result.output));
                if let Some(code) = result.exit_code {
                    data.insert("exitCode".into(), json!(code));
                }
                data.insert("cancelled".into(), json!(result.cancelled));
                data.insert("truncated".into(), json!(result.truncated));
                if let Some(path) = result.full_output_path {
                    data.insert("fullOutputPath".into(), json!(path));
                }
                self.respond_ok(job.request_id.as_ref(), "bash", Some(Value::Object(data)));
            }
        }
    }

    /// `/skill:name args` and `/template args` expansion; a skill that cannot be read is reported
    /// and the text goes on unchanged.
    fn expand(&mut self, text: String) -> String {
        match crate::resources::discovery::expand_input(&text, &self.resources) {
            Ok(expanded) => expanded,
            Err(e) => {
                self.emit(Event::ExtensionError {
                    extension_path: e.path,
                    event: "skill_expansion".into(),
                    error: e.message,
                });
                text
            }
        }
    }

    /// `export_html`: the saved session as one self-contained page.
    fn export_html(&self, output: Option<&str>) -> Result<String, String> {
        let Some(file) = self.session.file_path() else {
            return Err("Cannot export in-memory session to HTML".into());
        };
        if !self.session.is_on_disk() {
            return Err("Nothing to export yet - start a conversation first".into());
        }
        let output = match output {
            Some(path) => path.to_string(),
            None => crate::export::default_output_name(file),
        };
        let input = crate::export::ExportInput {
            header: self.session.header().to_value().clone(),
            entries: self.session.entries_since(None).unwrap_or_default(),
            leaf_id: self.session.leaf_id().map(str::to_string),
            system_prompt: self.system_prompt.clone(),
            tools: self
                .tool_specs
                .iter()
                .map(|t| (t.name.clone(), t.description.clone(), t.parameters.clone()))
                .collect(),
            redactions: self.session.redactions(),
        };
        crate::export::export_to_file(&input, &self.config.cwd.join(&output))
            .map_err(|e| e.to_string())?;
        Ok(output)
    }

    fn state_json(&self) -> Value {
        let mut state = serde_json::Map::new();
        state.insert(
            "model".into(),
            serde_json::to_value(&self.model).unwrap_or(Value::Null),
        );
        state.insert("thinkingLevel".into(), json!(self.thinking.as_str()));
        state.insert("isStreaming".into(), json!(self.is_busy()));
        state.insert(
            "isCompacting".into(),
            json!(matches!(self.phase, Phase::Compacting(_))),
        );
        state.insert("steeringMode".into(), json!(self.steering_mode.as_str()));
        state.insert("followUpMode".into(), json!(self.follow_up_mode.as_str()));
        if let Some(path) = self.session.file_path() {
            state.insert("sessionFile".into(), json!(path.to_string_lossy()));
        }
        state.insert("sessionId".into(), json!(self.session.id()));
        if let Some(name) = self.session.name() {
            state.insert("sessionName".into(), json!(name));
        }
        state.insert("autoCompactionEnabled".into(), json!(self.auto_compaction));
        state.insert("messageCount".into(), json!(self.messages.len()));
        state.insert(
            "pendingMessageCount".into(),
            json!(self.steering.len() + self.follow_up.len()),
        );
        // Only when a sandbox is set, so get_state stays pi's exact shape by default.
        if self.sandbox.policy().is_active() {
            state.insert("sandbox".into(), self.sandbox_state());
        }
        Value::Object(state)
    }

    fn sandbox_state(&self) -> Value {
        let state = crate::sandbox::state(&self.sandbox.policy(), crate::sandbox::support());
        serde_json::to_value(state).unwrap_or(Value::Null)
    }

    /// `set_sandbox`: applies to tools started from now on (running ones keep theirs).
    fn set_sandbox(&mut self, id: Option<&Value>, mode: &str, network: Option<bool>) {
        let Some(parsed) = crate::sandbox::Mode::parse(mode) else {
            let error = format!(
                "Invalid sandbox mode \"{mode}\". Valid values: {}",
                crate::sandbox::Mode::NAMES
            );
            self.respond_error(id, "set_sandbox", &error);
            return;
        };
        let policy = self.sandbox.set(parsed, network).clone();
        let state = self.sandbox_state();
        self.respond_ok(id, "set_sandbox", Some(json!({ "sandbox": state })));
        if let Some(warning) =
            crate::sandbox::unenforced_warning(&policy, crate::sandbox::support())
        {
            self.emit(Event::notify(&warning, "warning"));
        }
    }

    fn last_assistant_text(&self) -> Option<String> {
        self.messages.iter().rev().find_map(|m| match m {
            AgentMessage::Assistant(a)
                if a.stop_reason == StopReason::Aborted && a.content.is_empty() =>
            {
                None
            }
            AgentMessage::Assistant(a) => {
                let text = a.text().trim().to_string();
                Some(text).filter(|t| !t.is_empty())
            }
            _ => None,
        })
    }

    // ---- model and thinking -------------------------------------------------------------------

    fn set_model_command(&mut self, id: Option<&Value>, provider: &str, model_id: &str) {
        let found = self
            .config
            .available_models()
            .into_iter()
            .find(|m| m.provider == provider && m.id == model_id);
        match found {
            Some(model) => {
                self.switch_model(model.clone());
                let data = serde_json::to_value(&model).unwrap_or(Value::Null);
                self.respond_ok(id, "set_model", Some(data));
            }
            None => self.respond_error(
                id,
                "set_model",
                &format!("Model not found: {provider}/{model_id}"),
            ),
        }
    }

    fn cycle_model(&mut self, id: Option<&Value>) {
        let is_scoped = !self.scoped_models.is_empty();
        let candidates: Vec<(Model, Option<ThinkingLevel>)> = if is_scoped {
            self.scoped_models
                .iter()
                .map(|s| (s.model.clone(), s.thinking))
                .collect()
        } else {
            self.config
                .available_models()
                .into_iter()
                .map(|m| (m, None))
                .collect()
        };
        if candidates.len() <= 1 {
            self.respond_ok(id, "cycle_model", Some(Value::Null));
            return;
        }
        let current = candidates
            .iter()
            .position(|(m, _)| m.provider == self.model.provider && m.id == self.model.id);
        let (next, level) = candidates[current.map_or(0, |p| (p + 1) % candidates.len())].clone();
        self.switch_model(next);
        if let Some(level) = level {
            let level = self.model.clamp_thinking_level(level);
            self.set_thinking_level(level, false);
        }
        let data = json!({
            "model": serde_json::to_value(&self.model).unwrap_or(Value::Null),
            "thinkingLevel": self.thinking.as_str(),
            "isScoped": is_scoped,
        });
        self.respond_ok(id, "cycle_model", Some(data));
    }

    /// Switches model: persisted as the default, recorded in the session, thinking re-clamped
    /// (kept if the old model reasons, else the default level).
    fn switch_model(&mut self, model: Model) {
        let wanted = if self.model.reasoning {
            self.thinking
        } else {
            self.config
                .default_thinking_level()
                .unwrap_or(ThinkingLevel::Medium)
        };
        self.model = model;
        self.config
            .set_default_model(&self.model.provider, &self.model.id);
        if let Err(e) = self
            .session
            .append_model_change(&self.model.provider, &self.model.id)
        {
            log::error!("could not record the model change: {e}");
        }
        let level = self.model.clamp_thinking_level(wanted);
        self.set_thinking_level(level, false);
    }

    /// Applies an effective thinking-level change: session entry, event, settings default.
    fn set_thinking_level(&mut self, level: ThinkingLevel, persist_default: bool) {
        if level == self.thinking {
            return;
        }
        self.thinking = level;
        if let Err(e) = self.session.append_thinking_level_change(level) {
            log::error!("could not record the thinking level change: {e}");
        }
        if persist_default && (self.model.reasoning || level != ThinkingLevel::Off) {
            self.config.set_default_thinking_level(level);
        }
        self.emit(Event::ThinkingLevelChanged {
            level: level.as_str().into(),
        });
    }

    // ---- prompts and queues -------------------------------------------------------------------

    fn prompt(
        &mut self,
        id: Option<&Value>,
        message: String,
        images: Vec<ImageContent>,
        behavior: Option<StreamingBehavior>,
    ) {
        if self.is_busy() {
            match behavior {
                Some(behavior) => self.queue_input(id, "prompt", behavior, message, images),
                None => self.respond_error(
                    id,
                    "prompt",
                    "Agent is already processing. Specify streamingBehavior ('steer' or 'followUp') to queue the message.",
                ),
            }
            return;
        }
        if let Err(error) = self.check_credentials() {
            self.respond_error(id, "prompt", &error);
            return;
        }
        // Extensions' input hook, expansion, a compaction if needed, then the run.
        self.prepare_prompt(state::PromptFrom::Client(id.cloned()), message, images);
    }

    /// A run that continues the conversation without a new prompt (retry, overflow recovery,
    /// queued messages after a compaction).
    fn continue_run(&mut self) {
        self.run = Some(Run::default());
        self.emit(Event::AgentStart);
        self.emit(Event::TurnStart);
        if self.deliver_queued(true) == 0 {
            self.deliver_queued(false);
        }
        self.request_completion();
    }

    /// Nothing more will happen by itself.
    fn settle(&mut self) {
        let aborted = std::mem::take(&mut self.aborted_since_settled);
        self.emit(Event::AgentSettled { aborted });
    }

    fn check_credentials(&self) -> Result<(), String> {
        if self.model.is_placeholder() {
            return Err(format!(
                "No API key found for the selected model.\n\n{}",
                login_help()
            ));
        }
        if self.config.api_key(&self.model.provider).is_none() {
            if let Some(notice) = self.config.auth_notice(&self.model.provider) {
                return Err(notice);
            }
            return Err(format!(
                "No API key found for {}.\n\n{}",
                self.model.provider,
                login_help()
            ));
        }
        Ok(())
    }

    fn enqueue(&mut self, behavior: StreamingBehavior, text: String, images: Vec<ImageContent>) {
        let message = AgentMessage::User(UserMessage::new(&text, images));
        let queued = QueuedMessage { text, message };
        match behavior {
            StreamingBehavior::Steer => self.steering.push_back(queued),
            StreamingBehavior::FollowUp => self.follow_up.push_back(queued),
        }
        self.emit_queue_update();
    }

    /// `clear_queue`: both queues emptied (announced by a `queue_update`, as pi does even when
    /// they were empty); answers the texts so a client can put them back in its editor.
    fn clear_queues(&mut self) -> Value {
        let texts = |queue: &mut VecDeque<QueuedMessage>| -> Vec<String> {
            queue.drain(..).map(|q| q.text).collect()
        };
        let steering = texts(&mut self.steering);
        let follow_up = texts(&mut self.follow_up);
        self.emit_queue_update();
        json!({ "steering": steering, "followUp": follow_up })
    }

    fn emit_queue_update(&mut self) {
        let event = Event::QueueUpdate {
            steering: self.steering.iter().map(|q| q.text.clone()).collect(),
            follow_up: self.follow_up.iter().map(|q| q.text.clone()).collect(),
        };
        self.emit(event);
    }

    /// Delivers queued messages at a drain point: all of them or one, per the queue's mode. Each
    /// is announced by a `queue_update` just before its `message_start`. Returns how many.
    fn deliver_queued(&mut self, steering: bool) -> usize {
        let (queue, mode) = if steering {
            (&mut self.steering, self.steering_mode)
        } else {
            (&mut self.follow_up, self.follow_up_mode)
        };
        let count = match mode {
            QueueMode::All => queue.len(),
            QueueMode::OneAtATime => queue.len().min(1),
        };
        for _ in 0..count {
            let queue = if steering {
                &mut self.steering
            } else {
                &mut self.follow_up
            };
            let Some(item) = queue.pop_front() else { break };
            self.emit_queue_update();
            self.add_message(item.message);
        }
        count
    }

    // ---- the run ------------------------------------------------------------------------------

    fn start_run(&mut self, prompt_messages: Vec<AgentMessage>) {
        // An abort that ended without settling (a prompt dropped while its hook ran) is over.
        self.aborted_since_settled = false;
        self.run = Some(Run::default());
        self.emit(Event::AgentStart);
        self.emit(Event::TurnStart);
        for message in prompt_messages {
            self.add_message(message);
        }
        // Steering queued while idle joins the first turn, right after the prompt.
        self.deliver_queued(true);
        self.request_completion();
    }

    /// Emits `message_start`/`message_end` for a complete message and records it everywhere.
    /// Returns the message serialized (shared by every record that carries it).
    fn add_message(&mut self, message: AgentMessage) -> SharedJson {
        if matches!(message, AgentMessage::User(_)) {
            self.overflow_recovery_attempted = false;
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
        if let Some(run) = self.run.as_mut() {
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

    /// The parts of an LLM request that do not depend on what is asked; Err without a key.
    fn base_request(&self) -> Result<StreamRequest, ()> {
        let api_key = self.config.api_key(&self.model.provider).ok_or(())?;
        Ok(StreamRequest {
            // After the key: a refreshed Copilot token may name another API host.
            model: self.config.request_model(&self.model),
            api_key,
            headers: self.config.request_headers(&self.model),
            system_prompt: self
                .run_system_prompt
                .clone()
                .unwrap_or_else(|| self.system_prompt.clone()),
            // Filled by `request_completion` (compaction sends messages of its own).
            messages: Vec::new(),
            history: None,
            tools: self.tool_specs.clone(),
            thinking: self.thinking,
            thinking_budgets: [
                self.config.thinking_budget(ThinkingLevel::Minimal),
                self.config.thinking_budget(ThinkingLevel::Low),
                self.config.thinking_budget(ThinkingLevel::Medium),
                self.config.thinking_budget(ThinkingLevel::High),
            ],
            max_tokens: None,
            session_id: self.session.id().to_string(),
            idle_timeout: self.idle_timeout,
            provider_retry: self.config.provider_retry(),
        })
    }

    fn credentials_error(&self) -> String {
        // A subscription login that could not be refreshed says how to log in again.
        self.config
            .auth_notice(&self.model.provider)
            .unwrap_or_else(|| format!("No API key for provider: {}", self.model.provider))
    }

    fn request_completion(&mut self) {
        let Ok(mut request) = self.base_request() else {
            let message = self.credentials_error();
            self.fail_before_stream(message);
            return;
        };
        let block_images = self.config.block_images();
        let to_llm = |messages: &[AgentMessage]| convert::for_request(messages, block_images);
        request.history = self
            .request_cache
            .prepare(&mut request, &self.messages, &to_llm);
        self.next_request += 1;
        let req = RequestId(self.next_request);
        let (sender, events) = crossbeam_channel::bounded(PROVIDER_CHANNEL_CAPACITY);
        let handle = provider::spawn_stream(req, request, sender);
        self.phase = Phase::Streaming(Box::new(Stream {
            handle,
            events,
            draft: Draft::new(&self.model, self.profile),
            last_event: Instant::now(),
            lookahead: None,
        }));
    }

    /// pi's failure path when a request cannot even be made: only `agent_end` with an empty
    /// error reply (FACTS §4.1), kept in agent state but not persisted.
    fn fail_before_stream(&mut self, error: String) {
        let mut failure =
            AssistantMessage::empty(&self.model.api, &self.model.provider, &self.model.id);
        failure.content = vec![ContentBlock::Text(TextContent::new(""))];
        failure.stop_reason = StopReason::Error;
        failure.error_message = Some(error);
        let failure = AgentMessage::Assistant(failure);
        let json = serialize_message(&failure);
        if let Some(run) = self.run.as_mut() {
            run.messages.push(json);
            run.last_reply = Some(self.messages.len());
        }
        self.messages.push(failure);
        self.end_run();
    }

    fn on_provider_event(&mut self, event: ProviderEvent) {
        let Phase::Streaming(stream) = &mut self.phase else {
            log::debug!(
                "provider event for request {} after its stream ended",
                event.req.0
            );
            return;
        };
        if stream.handle.req != event.req {
            log::debug!("stale provider event for request {}", event.req.0);
            return;
        }
        stream.last_event = Instant::now();
        let event: Option<Event> = match event.event {
            StreamEvent::Retrying { delay } => {
                // The provider waits silently; the stream is not idle until that wait is over.
                stream.last_event += delay;
                None
            }
            StreamEvent::Opened => (!stream.draft.started).then(|| stream.draft.start_event()),
            StreamEvent::Meta {
                response_id,
                response_model,
            } => {
                stream.draft.set_meta(response_id, response_model);
                None
            }
            StreamEvent::BlockStart { index, kind } => {
                let start = (!stream.draft.started).then(|| stream.draft.start_event());
                if let Some(start) = start {
                    self.emit(start);
                }
                let Phase::Streaming(stream) = &mut self.phase else {
                    return;
                };
                Some(stream.draft.block_start(index, kind))
            }
            StreamEvent::Delta { index, mut delta } => {
                // While the client lags behind (stdout backlog), deltas that piled up go out as
                // one update: the same text in fewer records. A client that keeps up sees every
                // provider delta as its own record.
                let capacity = self.out.capacity().unwrap_or(1);
                let lagging = self.out.len() > capacity / 2;
                while lagging && delta.len() < COALESCE_LIMIT {
                    match stream.events.try_recv() {
                        Ok(ProviderEvent {
                            req,
                            event:
                                StreamEvent::Delta {
                                    index: next,
                                    delta: more,
                                },
                        }) if req == stream.handle.req && next == index => delta.push_str(&more),
                        Ok(other) => {
                            stream.lookahead = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                stream.draft.delta(index, delta)
            }
            StreamEvent::BlockEnd { index, signature } => {
                if let Some(held) = stream.draft.flush_held(index) {
                    self.emit(held);
                }
                let Phase::Streaming(stream) = &mut self.phase else {
                    return;
                };
                stream.draft.block_end(index, signature)
            }
            StreamEvent::Usage(usage) => {
                stream.draft.set_usage(usage);
                None
            }
            StreamEvent::Done {
                stop_reason,
                error_message,
            } => {
                self.finish_stream(stop_reason, error_message);
                return;
            }
            StreamEvent::Failed(error) => {
                self.retry_after = error.retry_after;
                self.finish_stream(StopReason::Error, Some(error.message));
                return;
            }
        };
        if let Some(event) = event {
            self.emit(event);
        }
    }

    fn fail_stream(&mut self, error: String) {
        if matches!(self.phase, Phase::Streaming(_)) {
            self.finish_stream(StopReason::Error, Some(error));
        }
    }

    /// Closes the streamed reply (dropping the request handle) and decides what follows.
    fn finish_stream(&mut self, stop_reason: StopReason, error_message: Option<String>) {
        let Phase::Streaming(stream) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let Stream {
            handle,
            events,
            mut draft,
            ..
        } = *stream;
        drop(handle);
        drop(events);
        if !draft.started {
            let start = draft.start_event();
            self.emit(start);
        }
        // Blocks the stream left open: their held tails still go out as deltas (before an
        // abort closes them).
        for held in draft.flush_all_held() {
            self.emit(held);
        }
        if stop_reason == StopReason::Aborted {
            for close in draft.close_open_blocks(error_message.as_deref()) {
                self.emit(close);
            }
        }
        let (message, json) = draft.finish_serialized(stop_reason, error_message);
        self.record_message(&message, &json);
        self.emit(Event::MessageEnd {
            message: json.clone(),
        });
        let AgentMessage::Assistant(assistant) = &message else {
            unreachable!("built as an assistant message above")
        };
        let stop_reason = assistant.stop_reason;
        let calls: Vec<ToolCall> = assistant.tool_calls().cloned().collect();
        self.messages.push(message);
        if stop_reason != StopReason::Error {
            self.overflow_recovery_attempted = false;
        }
        if stop_reason != StopReason::Error && self.retry_attempt > 0 {
            let attempt = std::mem::take(&mut self.retry_attempt);
            self.emit(Event::AutoRetryEnd {
                success: true,
                attempt,
                final_error: None,
            });
        }

        let aborted = self.run.as_ref().is_some_and(|r| r.aborted);
        match stop_reason {
            StopReason::Error | StopReason::Aborted => {
                self.emit(Event::TurnEnd {
                    message: json.clone(),
                    tool_results: Vec::new(),
                });
                self.end_run();
            }
            _ if aborted => {
                self.emit(Event::TurnEnd {
                    message: json.clone(),
                    tool_results: Vec::new(),
                });
                self.end_run();
            }
            _ if !calls.is_empty() => self.start_tools(json, calls),
            _ => {
                self.emit(Event::TurnEnd {
                    message: json.clone(),
                    tool_results: Vec::new(),
                });
                self.after_turn(false);
            }
        }
    }

    fn tool_context(&self) -> ToolContext {
        ToolContext {
            cwd: self.config.cwd.clone(),
            agent_dir: self.config.agent_dir.clone(),
            shell_path: self.config.shell_path(),
            shell_command_prefix: self.config.shell_command_prefix(),
            model_supports_images: self.model.supports_images(),
            sandbox: self.sandbox.policy(),
        }
    }

    /// After `turn_end`: steering first, then another turn for tool results, then follow-ups;
    /// otherwise the run ends.
    fn after_turn(&mut self, had_tool_calls: bool) {
        if self.run.as_ref().is_some_and(|r| r.aborted) {
            self.end_run();
            return;
        }
        if !self.steering.is_empty() {
            self.emit(Event::TurnStart);
            self.deliver_queued(true);
            self.request_completion();
        } else if had_tool_calls {
            self.emit(Event::TurnStart);
            self.request_completion();
        } else if !self.follow_up.is_empty() {
            self.emit(Event::TurnStart);
            self.deliver_queued(false);
            self.request_completion();
        } else {
            self.end_run();
        }
    }

    /// Closes the run with `agent_end`, then either schedules an automatic retry or settles.
    fn end_run(&mut self) {
        let Some(run) = self.run.take() else { return };
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
                let attempt = std::mem::take(&mut self.retry_attempt);
                self.emit(Event::AutoRetryEnd {
                    success: false,
                    attempt,
                    final_error: Some(final_error),
                });
            }
        }
        if self.retry_attempt > 0 {
            // The chain ended some other way (abort, a non-transient error): close it.
            let attempt = std::mem::take(&mut self.retry_attempt);
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
            compaction::Trigger::Overflow => self.start_compaction(
                compaction::CompactionReason::Overflow,
                state::CompactionOrigin::AfterRun,
                None,
            ),
            compaction::Trigger::Threshold => self.start_compaction(
                compaction::CompactionReason::Threshold,
                state::CompactionOrigin::AfterRun,
                None,
            ),
        }
    }

    fn is_busy(&self) -> bool {
        self.run.is_some()
            || matches!(
                self.phase,
                Phase::RetryWait(_)
                    | Phase::Compacting(_)
                    | Phase::Preparing(_)
                    | Phase::WaitingForMcp(_)
            )
    }

    /// `Ok(Some(delay))` to retry, `Ok(None)` when the failure is not retried at all, `Err(text)`
    /// when retries are exhausted (or the server asks for a longer wait than allowed).
    fn plan_retry(&mut self, failed: &AssistantMessage) -> Result<Option<Duration>, String> {
        if !self.auto_retry || !retry::is_retryable(failed, self.model.context_window) {
            return Ok(None);
        }
        let error = failed.error_message.clone().unwrap_or_default();
        let attempt = self.retry_attempt + 1;
        if attempt > self.config.retry_max_retries() {
            return if self.retry_attempt > 0 {
                Err(error)
            } else {
                Ok(None)
            };
        }
        let mut delay = retry::backoff_delay(self.config.retry_base_delay_ms(), attempt);
        if let Some(asked) = self.retry_after.take() {
            let limit = Duration::from_millis(self.config.provider_max_retry_delay_ms());
            if asked > limit {
                return Err(format!(
                    "{error} (the provider asked to retry after {} s, more than retry.provider.maxRetryDelayMs allows: {} s)",
                    asked.as_secs(),
                    limit.as_secs()
                ));
            }
            delay = delay.max(asked);
        }
        Ok(Some(delay))
    }

    /// The failed reply leaves the agent's context (it stays in the session file), and the
    /// retry waits in the loop's select, where `abort` and `abort_retry` cancel it at once.
    fn schedule_retry(&mut self, delay: Duration, failed: &AssistantMessage) {
        self.retry_attempt += 1;
        if matches!(self.messages.last(), Some(AgentMessage::Assistant(_))) {
            self.messages.pop();
        }
        let error = failed.error_message.as_deref().unwrap_or("Unknown error");
        self.emit(Event::AutoRetryStart {
            attempt: self.retry_attempt,
            max_attempts: self.config.retry_max_retries(),
            delay_ms: delay.as_millis() as u64,
            error_message: error.to_string(),
        });
        self.phase = Phase::RetryWait(RetryWait {
            deadline: crate::deadline::after(delay),
        });
    }

    /// The delay ran out: continue the conversation with a new run (no new user message).
    fn retry_now(&mut self) {
        if !matches!(self.phase, Phase::RetryWait(_)) {
            return;
        }
        self.phase = Phase::Idle;
        self.continue_run();
    }

    fn cancel_retry(&mut self) {
        self.phase = Phase::Idle;
        let attempt = std::mem::take(&mut self.retry_attempt);
        self.emit(Event::AutoRetryEnd {
            success: false,
            attempt,
            final_error: Some("Retry cancelled".into()),
        });
        self.settle();
    }

    /// Stops the run now: the streaming reply is closed as aborted, running tools are cancelled
    /// (their group killed) with "aborted" results, and the run ends with its `agent_end`. Queued
    /// steering and follow-ups survive, as in pi.
    fn abort_run(&mut self) {
        self.aborted_since_settled = true;
        if let Some(run) = self.run.as_mut() {
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
            Phase::WaitingForMcp(_) => self.abort_mcp_wait(),
            Phase::Idle => self.end_run(),
        }
    }
}

/// What the model is offered: builtins, then extension tools, then MCP tools.
fn all_tool_specs(
    builtins: &[String],
    extension_tools: &[crate::extensions::ExtensionTool],
    mcp: Option<&crate::mcp::McpHost>,
) -> Vec<ToolSpec> {
    let mut specs = tools::specs(builtins);
    specs.extend(extension_tools.iter().map(|t| t.spec()));
    if let Some(mcp) = mcp {
        let taken: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        specs.extend(
            mcp.tool_specs()
                .into_iter()
                .filter(|s| !taken.contains(&s.name)),
        );
    }
    specs
}

/// A message serialized once for every record that carries it.
/// Gives freed heap pages back to the kernel (glibc keeps them by default); a no-op elsewhere.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases glibc's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn serialize_message(message: &AgentMessage) -> SharedJson {
    crate::rpc::shared::message(message, &[])
}

fn parse_queue_mode(mode: &str) -> Option<QueueMode> {
    match mode {
        "all" => Some(QueueMode::All),
        "one-at-a-time" => Some(QueueMode::OneAtATime),
        _ => None,
    }
}

fn invalid_mode(mode: &str) -> String {
    format!("Invalid mode \"{mode}\": expected \"all\" or \"one-at-a-time\"")
}

/// Session events go to the extensions that subscribed; dialogs and extension errors do not.
fn notify_extensions(host: &crate::extensions::ExtensionHost, event: &Event) {
    if event.is_session_event()
        && host.wants_event(event.kind())
        && let Some(value) = event.to_extension_value()
    {
        host.notify_event(&value);
    }
}

fn cannot_queue(text: &str) -> String {
    let name = extending::split_command(text).map_or(text, |(name, _)| name);
    format!(
        "Extension command \"/{name}\" cannot be queued. Use prompt() or execute the command when not streaming."
    )
}

/// Where credentials come from, appended to "no API key" errors.
pub fn login_help() -> String {
    let agent_dir = crate::config::agent_dir_from_env();
    format!(
        "Set the provider's API key environment variable (e.g. ANTHROPIC_API_KEY, OPENAI_API_KEY), \
         add it to {}/auth.json, or configure the provider in {}/models.json.",
        agent_dir.display(),
        agent_dir.display()
    )
}

#[cfg(test)]
mod tests;
