//! The "extension-host" router thread: owns all host state (pending hooks, tool runs, command
//! runs, open dialogs and their deadlines) and turns extension lines into `ExtensionEvent`s.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, at, select};
use serde_json::Value;

use super::startup::*;
use super::*;
use crate::child::has_exited_without_reaping;
use crate::extensions::approval::ApprovalAnswer;
use crate::extensions::hooks::{HookChain, HookOutcome};
use crate::extensions::protocol::{
    self, DIALOG_METHODS, ExtensionMessage, HookKind, Registration, UiResponse,
};
use crate::rpc::events::Event;
use crate::tools::ToolOutput;

pub(super) enum Control {
    /// An event for the subscribers that speak at least `min_protocol`.
    Event {
        event: Value,
        min_protocol: u64,
    },
    /// An event for one extension (it subscribed; the agent checked).
    EventTo {
        extension: ExtensionId,
        event: Value,
    },
    StartHook {
        id: HookId,
        kind: HookKind,
        payload: Value,
        deadline: Duration,
        /// Where the outcome goes instead of the agent's channel (a provider thread's wait).
        reply: Option<Sender<HookOutcome>>,
    },
    RunTool {
        extension: ExtensionId,
        call_id: String,
        tool_name: String,
        args: Value,
    },
    CancelTool {
        call_id: String,
    },
    RunCommand {
        id: CommandRunId,
        extension: ExtensionId,
        name: String,
        args: String,
    },
    UiResponse {
        ui_id: String,
        response: UiResponse,
    },
    Approval {
        ui_id: String,
        deadline: Instant,
    },
    Shutdown {
        grace: Duration,
        /// The `session_shutdown` event: reason `quit` at exit, `reload` before a reload,
        /// `new` / `resume` / `fork`: Null, the extensions heard it before the change.
        event: Value,
        done: Sender<()>,
    },
    /// (v2) A model response the extension streams: `line` goes to it, its `stream_event`s
    /// with id `wire` to `reply` (dropped when the stream ends or the extension fails).
    StartStream {
        extension: ExtensionId,
        wire: String,
        line: String,
        reply: Sender<Value>,
    },
    /// (v2) Ask `extension` a `kind` request (`route`, `refresh_models`, `oauth_*`); the
    /// answer arrives as `ExtensionEvent::Answered`, or on `reply` when there is one.
    Ask {
        kind: &'static str,
        id: HookId,
        extension: ExtensionId,
        request: Value,
        deadline: Duration,
        reply: Option<Sender<Result<Value, String>>>,
    },
    /// (v2) The stream's reader is gone (abort): the extension is told `cancel_stream`.
    CancelStream {
        wire: String,
    },
    /// (v2) A partial result of an `execute_tool` request still running (`action_update`).
    Progress {
        extension: ExtensionId,
        id: String,
        partial: Value,
    },
    /// The agent's answer to a v2 request (`kind`: `query_result` / `action_result`).
    Answer {
        extension: ExtensionId,
        kind: &'static str,
        id: String,
        answer: Result<Value, String>,
    },
    /// The same, written already (`protocol::answer_line_json`).
    AnswerLine {
        extension: ExtensionId,
        kind: &'static str,
        line: String,
    },
}

/// What an extension's reader and writer threads report. `generation` tells a restarted host's
/// process from the one before (whose threads may still report after the restart).
pub(super) enum FromExtension {
    Line {
        index: usize,
        generation: u32,
        line: Vec<u8>,
    },
    TooLong {
        index: usize,
        generation: u32,
        len: usize,
    },
    Eof {
        index: usize,
        generation: u32,
    },
    WriteFailed {
        index: usize,
        generation: u32,
        error: String,
    },
}

impl FromExtension {
    pub(super) fn index(&self) -> usize {
        match self {
            FromExtension::Line { index, .. }
            | FromExtension::TooLong { index, .. }
            | FromExtension::Eof { index, .. }
            | FromExtension::WriteFailed { index, .. } => *index,
        }
    }

    fn generation(&self) -> u32 {
        match self {
            FromExtension::Line { generation, .. }
            | FromExtension::TooLong { generation, .. }
            | FromExtension::Eof { generation, .. }
            | FromExtension::WriteFailed { generation, .. } => *generation,
        }
    }
}

pub(super) struct RouterExtension {
    pub(super) path: String,
    pub(super) registration: Registration,
    pub(super) process: Option<Process>,
    pub(super) failed: bool,
    /// v2 requests handed to the agent and not answered yet (bounded by `MAX_IN_FLIGHT`).
    pub(super) in_flight: usize,
    /// Started, not registered yet: by when its `register` line must come (a deferred start or
    /// a restart).
    pub(super) registering: Option<Instant>,
    /// How to start it again after a crash (the TypeScript host, once).
    pub(super) restart: Option<Box<Restart>>,
    /// It was started again once already.
    pub(super) restarted: bool,
    /// Its process's generation (0, 1 after a restart): reports of an older one are dropped.
    pub(super) generation: u32,
}

/// What starting the TypeScript host again needs.
pub(super) struct Restart {
    pub(super) spec: ExtensionSpec,
    pub(super) cwd: String,
    pub(super) sandbox: Option<crate::sandbox::Policy>,
    /// Its `hello` line, sent again.
    pub(super) hello: String,
    pub(super) to_router: Sender<FromExtension>,
}

impl RouterExtension {
    /// Running and registered: it can take tool runs and commands.
    fn is_ready(&self) -> bool {
        !self.failed && self.registering.is_none()
    }
}

impl Drop for RouterExtension {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill_and_reap();
        }
    }
}

pub(super) struct HookRun {
    pub(super) chain: HookChain,
    /// Extensions still to ask, in load order.
    pub(super) remaining: VecDeque<usize>,
    pub(super) step: Option<HookStep>,
    pub(super) step_timeout: Duration,
    /// The outcome's receiver when it is not the agent (`Control::StartHook::reply`).
    pub(super) reply: Option<Sender<HookOutcome>>,
}

pub(super) struct HookStep {
    pub(super) extension: usize,
    pub(super) wire_id: String,
    pub(super) deadline: Instant,
}

pub(super) struct ToolRun {
    pub(super) extension: usize,
    pub(super) call_id: String,
}

pub(super) struct CommandRun {
    pub(super) extension: usize,
    pub(super) id: CommandRunId,
    pub(super) name: String,
}

pub(super) enum DialogOwner {
    Extension {
        extension: usize,
        local_id: String,
        method: String,
    },
    Approval,
}

pub(super) struct Dialog {
    pub(super) owner: DialogOwner,
    pub(super) deadline: Option<Instant>,
}

pub(super) struct Router {
    pub(super) extensions: Vec<RouterExtension>,
    pub(super) alive: Arc<Vec<AtomicBool>>,
    pub(super) events: Sender<ExtensionEvent>,
    pub(super) hooks: HashMap<HookId, HookRun>,
    /// Keyed by wire id ("t<n>").
    pub(super) tools: HashMap<String, ToolRun>,
    /// Keyed by wire id ("c<n>").
    pub(super) commands: HashMap<String, CommandRun>,
    /// Keyed by the client-facing UI id.
    pub(super) dialogs: HashMap<String, Dialog>,
    pub(super) next_wire: u64,
    pub(super) last_child_check: Instant,
    /// (v2) Responses extensions stream, by wire id: (extension, where the events go).
    pub(super) streams: HashMap<String, (usize, Sender<Value>)>,
    /// (v2) Requests of one extension (`route`, `refresh_models`) waiting for their answer,
    /// by wire id.
    pub(super) routes: HashMap<String, RouteWait>,
}

pub(super) struct RouteWait {
    pub(super) extension: usize,
    pub(super) id: HookId,
    pub(super) kind: &'static str,
    pub(super) deadline: Instant,
    pub(super) timeout: Duration,
    /// Where the answer goes when not to the agent (`HookChannel::ask_extension`).
    pub(super) reply: Option<Sender<Result<Value, String>>>,
}

impl Router {
    pub(super) fn run(
        mut self,
        control: Receiver<Control>,
        from: Receiver<FromExtension>,
        backlog: Vec<FromExtension>,
    ) {
        for message in backlog {
            self.on_extension_input(message);
        }
        loop {
            let wake = self.next_deadline();
            select! {
                recv(control) -> message => match message {
                    Ok(Control::Shutdown { grace, event, done }) => {
                        self.shutdown(grace, &event);
                        let _ = done.send(());
                        return;
                    }
                    Ok(message) => self.control(message),
                    Err(_) => {
                        self.shutdown(Duration::ZERO, &protocol::session_shutdown_event("quit"));
                        return;
                    }
                },
                recv(from) -> message => {
                    if let Ok(message) = message {
                        self.on_extension_input(message);
                    }
                }
                recv(at(wake)) -> _ => {}
            }
            self.expire(Instant::now());
        }
    }

    fn emit(&self, event: ExtensionEvent) {
        let _ = self.events.send(event);
    }

    fn wire_id(&mut self, prefix: char) -> String {
        self.next_wire += 1;
        format!("{prefix}{}", self.next_wire)
    }

    fn control(&mut self, message: Control) {
        match message {
            Control::Event {
                event,
                min_protocol,
            } => {
                let event_type = event.get("type").and_then(Value::as_str).unwrap_or("");
                let line = protocol::event_line(&event);
                for index in 0..self.extensions.len() {
                    let extension = &self.extensions[index];
                    if !extension.failed
                        && extension.registration.protocol >= min_protocol
                        && extension.registration.wants_event(event_type)
                    {
                        self.send(index, line.clone(), event_type);
                    }
                }
            }
            Control::EventTo { extension, event } => {
                let event_type = event.get("type").and_then(Value::as_str).unwrap_or("");
                self.send(extension.0, protocol::event_line(&event), event_type);
            }
            Control::StartHook {
                id,
                kind,
                payload,
                deadline,
                reply,
            } => {
                let remaining = (0..self.extensions.len())
                    .filter(|i| {
                        let e = &self.extensions[*i];
                        !e.failed && e.registration.handles(kind)
                    })
                    .collect();
                let run = HookRun {
                    chain: HookChain::new(kind, payload),
                    remaining,
                    step: None,
                    step_timeout: deadline,
                    reply,
                };
                self.advance_hook(id, run);
            }
            Control::RunTool {
                extension,
                call_id,
                tool_name,
                args,
            } => {
                let index = extension.0;
                if self.extensions.get(index).is_none_or(|e| !e.is_ready()) {
                    let path = self.path(index);
                    self.emit(ExtensionEvent::ToolFinished {
                        call_id,
                        output: ToolOutput::error(format!(
                            "Extension {path} is not running; {tool_name} cannot run"
                        )),
                        terminate: false,
                    });
                    return;
                }
                let wire = self.wire_id('t');
                let line = protocol::run_tool_line(&wire, &tool_name, &call_id, &args);
                self.tools.insert(
                    wire,
                    ToolRun {
                        extension: index,
                        call_id,
                    },
                );
                // A failed send resolves the run through `fail`.
                self.send(index, line, "tool");
            }
            Control::CancelTool { call_id } => {
                let wire = self
                    .tools
                    .iter()
                    .find(|(_, run)| run.call_id == call_id)
                    .map(|(wire, run)| (wire.clone(), run.extension));
                if let Some((wire, index)) = wire {
                    self.tools.remove(&wire);
                    self.send(index, protocol::cancel_tool_line(&wire), "tool");
                }
            }
            Control::RunCommand {
                id,
                extension,
                name,
                args,
            } => {
                let index = extension.0;
                if self.extensions.get(index).is_none_or(|e| !e.is_ready()) {
                    self.emit(ExtensionEvent::CommandFinished {
                        id,
                        name,
                        error: Some("the extension is not running".into()),
                    });
                    return;
                }
                let wire = self.wire_id('c');
                let line = protocol::run_command_line(&wire, &name, &args);
                self.commands.insert(
                    wire,
                    CommandRun {
                        extension: index,
                        id,
                        name,
                    },
                );
                self.send(index, line, "command");
            }
            Control::UiResponse { ui_id, response } => {
                let Some(dialog) = self.dialogs.remove(&ui_id) else {
                    return;
                };
                self.resolve_dialog(ui_id, dialog, &response, false);
            }
            Control::Approval { ui_id, deadline } => {
                self.dialogs.insert(
                    ui_id,
                    Dialog {
                        owner: DialogOwner::Approval,
                        deadline: Some(deadline),
                    },
                );
            }
            Control::Answer {
                extension,
                kind,
                id,
                answer,
            } => {
                self.send_answer(extension, kind, protocol::answer_line(kind, &id, &answer));
            }
            Control::AnswerLine {
                extension,
                kind,
                line,
            } => self.send_answer(extension, kind, line),
            Control::Progress {
                extension,
                id,
                partial,
            } => {
                // Optional: a slow reader loses updates, not its connection (the answer follows).
                let writer = self
                    .extensions
                    .get(extension.0)
                    .and_then(|e| e.process.as_ref().filter(|_| !e.failed).map(|p| &p.writer));
                if let Some(writer) = writer {
                    let _ = writer.try_send(protocol::action_update_line(&id, &partial));
                }
            }
            Control::Shutdown { .. } => {}
            Control::StartStream {
                extension,
                wire,
                line,
                reply,
            } => {
                // A failed extension: `reply` is dropped here, the reader sees the stream end.
                if self.send(extension.0, line, "stream") {
                    self.streams.insert(wire, (extension.0, reply));
                }
            }
            Control::Ask {
                kind,
                id,
                extension,
                request,
                deadline,
                reply,
            } => {
                let wire = self.wire_id('r');
                let ms = deadline.as_millis() as u64;
                let line = protocol::request_line(kind, &wire, ms, &request);
                if self.send(extension.0, line, kind) {
                    self.routes.insert(
                        wire,
                        RouteWait {
                            extension: extension.0,
                            id,
                            kind,
                            deadline: crate::deadline::after(deadline),
                            timeout: deadline,
                            reply,
                        },
                    );
                } else {
                    let path = self.path(extension.0);
                    let result = Err(format!("the extension {path} is not running"));
                    match reply {
                        Some(reply) => {
                            let _ = reply.try_send(result);
                        }
                        None => self.emit(ExtensionEvent::Answered { id, result }),
                    }
                }
            }
            Control::CancelStream { wire } => {
                if let Some((index, _)) = self.streams.remove(&wire) {
                    self.send(index, protocol::cancel_stream_line(&wire), "stream");
                }
            }
        }
    }

    /// A v2 request for the agent: handed on with the extension's id, unless too many of this
    /// extension's requests wait already (then answered with an error at once).
    fn request(&mut self, index: usize, kind: &'static str, id: String, event: ExtensionEvent) {
        let Some(extension) = self.extensions.get_mut(index) else {
            return;
        };
        if extension.in_flight >= MAX_IN_FLIGHT {
            let error = Err(format!(
                "too many requests in flight (at most {MAX_IN_FLIGHT}); wait for the answers"
            ));
            self.send(index, protocol::answer_line(kind, &id, &error), kind);
            return;
        }
        extension.in_flight += 1;
        self.emit(event);
    }

    fn resolve_dialog(
        &mut self,
        ui_id: String,
        dialog: Dialog,
        response: &UiResponse,
        timed_out: bool,
    ) {
        match dialog.owner {
            DialogOwner::Approval => {
                let answer = ApprovalAnswer::from_selection(
                    response.value.as_ref(),
                    response.cancelled,
                    timed_out,
                );
                self.emit(ExtensionEvent::ApprovalAnswered { ui_id, answer });
            }
            DialogOwner::Extension {
                extension,
                local_id,
                method,
            } => {
                let line = protocol::ui_response_line(&local_id, &method, response, timed_out);
                self.send(extension, line, "ui");
                // Time spent in the dialog does not count against a hook it was opened from.
                let now = Instant::now();
                for run in self.hooks.values_mut() {
                    if let Some(step) = run.step.as_mut().filter(|s| s.extension == extension) {
                        step.deadline = now + run.step_timeout;
                    }
                }
            }
        }
    }

    /// Asks the next extension of the chain, or reports the outcome when the chain is done.
    fn advance_hook(&mut self, id: HookId, mut run: HookRun) {
        loop {
            if run.chain.is_settled() {
                break;
            }
            let Some(index) = run.remaining.pop_front() else {
                break;
            };
            // Failed, or restarting (not registered again yet): skipped.
            if !self.extensions[index].is_ready() {
                continue;
            }
            let wire = self.wire_id('h');
            let kind = run.chain.kind();
            let timeout_ms = run.step_timeout.as_millis() as u64;
            let line = protocol::hook_line(&wire, kind, timeout_ms, &run.chain.payload());
            if self.send(index, line, kind.as_str()) {
                run.step = Some(HookStep {
                    extension: index,
                    wire_id: wire,
                    deadline: crate::deadline::after(run.step_timeout),
                });
                self.hooks.insert(id, run);
                return;
            }
            run.chain.apply_failure("its input could not be written");
        }
        let outcome = run.chain.finish();
        match run.reply {
            // A waiter that gave up (abort) is gone: nothing to tell.
            Some(reply) => {
                let _ = reply.send(outcome);
            }
            None => self.emit(ExtensionEvent::HookResult { id, outcome }),
        }
    }

    /// Sends the agent's answer to one of the extension's requests, which is no longer in flight.
    fn send_answer(&mut self, extension: ExtensionId, kind: &str, line: String) {
        if let Some(loaded) = self.extensions.get_mut(extension.0) {
            loaded.in_flight = loaded.in_flight.saturating_sub(1);
        }
        self.send(extension.0, line, kind);
    }

    /// Queues a line for an extension; a full queue or a gone writer fails the extension.
    fn send(&mut self, index: usize, line: String, event: &str) -> bool {
        let Some(extension) = self.extensions.get(index) else {
            return false;
        };
        let Some(process) = extension.process.as_ref().filter(|_| !extension.failed) else {
            return false;
        };
        match process.writer.try_send(line) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.fail(
                    index,
                    event,
                    format!("it stopped reading its input ({OUTBOUND_CAPACITY} lines queued)"),
                );
                false
            }
            Err(TrySendError::Disconnected(_)) => {
                self.fail(index, event, "its input pipe is closed".into());
                false
            }
        }
    }

    /// The one outcome of an `Ask`: to its own channel (never blocking: the channel holds it),
    /// else to the agent.
    fn answer_route(&mut self, wait: RouteWait, result: Result<Value, String>) {
        let secrets: &[&str] = match wait.kind {
            "oauth_refresh" => &["access", "refresh"],
            "oauth_api_key" => &["apiKey"],
            _ => &[],
        };
        if let Ok(Value::Object(answer)) = &result {
            // New tokens and keys are secrets before the extension's next line is read (it may
            // echo them).
            crate::redact::register_secrets(
                secrets
                    .iter()
                    .filter_map(|name| answer.get(*name)?.as_str().map(str::to_string)),
            );
        }
        match wait.reply {
            Some(reply) => {
                let _ = reply.try_send(result);
            }
            None => self.emit(ExtensionEvent::Answered {
                id: wait.id,
                result,
            }),
        }
    }

    fn path(&self, index: usize) -> String {
        self.extensions
            .get(index)
            .map(|e| e.path.clone())
            .unwrap_or_default()
    }

    fn on_extension_input(&mut self, message: FromExtension) {
        let index = message.index();
        if self
            .extensions
            .get(index)
            .is_none_or(|e| e.failed || e.generation != message.generation())
        {
            return;
        }
        if self.extensions[index].registering.is_some() {
            self.on_registering_input(index, message);
            return;
        }
        match message {
            FromExtension::Line { line, .. } => match protocol::parse_line(&line) {
                Ok(message) => self.extension_message(index, message),
                Err(e) => self.fail(index, "protocol", format!("malformed output: {e}")),
            },
            FromExtension::TooLong { len, .. } => self.fail(
                index,
                "protocol",
                format!("malformed output: a line of {len} bytes is too long"),
            ),
            FromExtension::Eof { .. } => self.reap_and_exit(index),
            FromExtension::WriteFailed { error, .. } => {
                self.fail(index, "protocol", format!("cannot write to it: {error}"))
            }
        }
    }

    /// The end of an extension's stdout: its process is reaped, then `exited` decides. Taken out
    /// first, so `fail` does not signal the group of a reaped leader again.
    fn reap_and_exit(&mut self, index: usize) {
        let status = self.extensions[index]
            .process
            .take()
            .and_then(|mut p| p.kill_and_reap());
        let shown = status.map_or("unknown status".into(), |s| s.to_string());
        self.exited(index, &shown);
    }

    /// An extension's process ended (already reaped): before its first registration a load
    /// error; the TypeScript host's first exit after it registered restarts it; else an `exit`
    /// failure.
    fn exited(&mut self, index: usize, status: &str) {
        let extension = &self.extensions[index];
        if extension.registering.is_some() && !extension.restarted {
            self.fail(
                index,
                "load",
                format!("exited before registering ({status})"),
            );
        } else if !self.restart(index, status) {
            self.fail(index, "exit", self.exit_error(index, status));
        }
    }

    /// Why an extension that exited is gone: a restarted TypeScript host says it is off for good.
    fn exit_error(&self, index: usize, status: &str) -> String {
        match self.extensions[index].restarted {
            true => format!(
                "the TypeScript extension host exited again after its restart ({status}); \
                 TypeScript extensions are off until pi-rs starts again"
            ),
            false => format!("exited unexpectedly ({status})"),
        }
    }

    /// Input from an extension that has not registered yet: its first line must be `register`.
    fn on_registering_input(&mut self, index: usize, message: FromExtension) {
        match message {
            FromExtension::Line { line, .. } => match parse_register(&line) {
                Ok(registration) => {
                    let extension = &mut self.extensions[index];
                    extension.registering = None;
                    extension.registration = registration.clone();
                    if let Some(flag) = self.alive.get(index) {
                        flag.store(true, Ordering::SeqCst);
                    }
                    self.emit(ExtensionEvent::Registered {
                        extension: ExtensionId(index),
                        registration,
                    });
                }
                Err(error) => self.fail(index, "load", error),
            },
            FromExtension::TooLong { len, .. } => {
                self.fail(index, "load", format!("a line of {len} bytes is too long"))
            }
            FromExtension::Eof { .. } => self.reap_and_exit(index),
            // Its end decides (the end of its stdout, or the registration deadline).
            FromExtension::WriteFailed { error, .. } => {
                log::debug!("{}: cannot write to it: {error}", self.path(index))
            }
        }
    }

    /// The TypeScript host's first crash: its work ends with errors, it starts again and
    /// registers anew (`Restarting`, then `Registered`). False when it has no restart left.
    fn restart(&mut self, index: usize, status: &str) -> bool {
        let Some(restart) = self.extensions[index].restart.take() else {
            return false;
        };
        let path = self.path(index);
        let error = format!("the TypeScript extension host exited ({status}); restarting it");
        log::warn!("extension {path}: {error}");
        if let Some(flag) = self.alive.get(index) {
            flag.store(false, Ordering::SeqCst);
        }
        self.resolve_work(index, &error);
        let extension = &mut self.extensions[index];
        extension.registration = Registration::default();
        extension.in_flight = 0;
        extension.restarted = true;
        extension.generation += 1;
        let generation = extension.generation;
        self.emit(ExtensionEvent::Restarting {
            extension: ExtensionId(index),
        });
        let sandbox = restart.sandbox.as_ref();
        match spawn_extension(
            (index, generation),
            &restart.spec,
            &restart.cwd,
            sandbox,
            restart.to_router,
        ) {
            Ok(process) => {
                let _ = process.writer.try_send(restart.hello);
                let extension = &mut self.extensions[index];
                extension.process = Some(process);
                extension.registering = Some(Instant::now() + register_timeout(&restart.spec));
            }
            Err(e) => self.fail(index, "exit", format!("{error}, but it cannot start: {e}")),
        }
        true
    }

    fn extension_message(&mut self, index: usize, message: ExtensionMessage) {
        if message.needs_v2() && self.extensions[index].registration.protocol < 2 {
            let kind = message.type_name();
            self.fail(
                index,
                "protocol",
                format!("malformed output: unknown message type {kind:?} (protocol 2 only)"),
            );
            return;
        }
        match message {
            ExtensionMessage::Control { id, action } => match (action, id) {
                (Ok(action), Some(id)) => {
                    let event = ExtensionEvent::Control {
                        extension: ExtensionId(index),
                        id: Some(id.clone()),
                        action,
                    };
                    self.request(index, "action_result", id, event);
                }
                (Ok(action), None) => self.emit(ExtensionEvent::Control {
                    extension: ExtensionId(index),
                    id: None,
                    action,
                }),
                (Err(error), Some(id)) => {
                    let line = protocol::answer_line("action_result", &id, &Err(error));
                    self.send(index, line, "action");
                }
                (Err(error), None) => self.emit(ExtensionEvent::Error(ExtensionError {
                    extension_path: self.path(index),
                    event: "extension".into(),
                    error,
                })),
            },
            ExtensionMessage::Query { id, query } => match query {
                Ok(query) => {
                    let event = ExtensionEvent::Query {
                        extension: ExtensionId(index),
                        id: id.clone(),
                        query,
                    };
                    self.request(index, "query_result", id, event);
                }
                Err(error) => {
                    let line = protocol::answer_line("query_result", &id, &Err(error));
                    self.send(index, line, "query");
                }
            },
            ExtensionMessage::Register { .. } => self.emit(ExtensionEvent::Error(ExtensionError {
                extension_path: self.path(index),
                event: "protocol".into(),
                error: "register was sent twice; the second one is ignored".into(),
            })),
            ExtensionMessage::HookResult { id: wire, result } => {
                let found = self.hooks.iter().find_map(|(id, run)| {
                    run.step
                        .as_ref()
                        .filter(|s| s.extension == index && s.wire_id == wire)
                        .map(|_| *id)
                });
                let Some(id) = found else {
                    log::debug!(
                        "late or unknown hook answer {wire} from {}",
                        self.path(index)
                    );
                    return;
                };
                let Some(mut run) = self.hooks.remove(&id) else {
                    return;
                };
                run.step = None;
                let hook = run.chain.kind().as_str();
                let problem = match result {
                    Ok(answer) => run
                        .chain
                        .apply(&answer)
                        .err()
                        .map(|e| format!("bad answer: {e}")),
                    Err(error) => Some(error),
                };
                if let Some(error) = problem {
                    self.emit(ExtensionEvent::Error(ExtensionError {
                        extension_path: self.path(index),
                        event: hook.into(),
                        error: error.clone(),
                    }));
                    run.chain.apply_failure(&error);
                }
                self.advance_hook(id, run);
            }
            ExtensionMessage::ToolUpdate { id, partial } => {
                if let Some(run) = self.tools.get(&id).filter(|r| r.extension == index) {
                    let call_id = run.call_id.clone();
                    self.emit(ExtensionEvent::ToolUpdate { call_id, partial });
                }
            }
            ExtensionMessage::ToolResult {
                id,
                output,
                terminate,
            } => {
                if self.tools.get(&id).is_some_and(|r| r.extension == index)
                    && let Some(run) = self.tools.remove(&id)
                {
                    self.emit(ExtensionEvent::ToolFinished {
                        call_id: run.call_id,
                        output,
                        terminate,
                    });
                }
            }
            ExtensionMessage::CommandDone { id, error } => {
                if self.commands.get(&id).is_some_and(|r| r.extension == index)
                    && let Some(run) = self.commands.remove(&id)
                {
                    self.emit(ExtensionEvent::CommandFinished {
                        id: run.id,
                        name: run.name,
                        error,
                    });
                }
            }
            ExtensionMessage::StreamEvent { id, event } => {
                let Some((owner, reply)) = self.streams.get(&id) else {
                    log::debug!("stream event for unknown stream {id}");
                    return;
                };
                if *owner != index {
                    return;
                }
                let terminal = matches!(
                    event.get("type").and_then(Value::as_str),
                    Some("done" | "error")
                );
                // A reader that cannot keep up (or is gone) ends the stream: never block here.
                if reply.try_send(event).is_err() || terminal {
                    self.streams.remove(&id);
                }
            }
            ExtensionMessage::RequestResult {
                id,
                request,
                result,
            } => {
                if self.routes.get(&id).is_some_and(|r| r.extension == index)
                    && let Some(wait) = self.routes.remove(&id)
                {
                    // An answer of the wrong type is refused, not taken for the right one.
                    let result = if request == wait.kind {
                        result
                    } else {
                        Err(format!(
                            "{} {id} was answered with {request}_result",
                            wait.kind
                        ))
                    };
                    self.answer_route(wait, result);
                } else {
                    log::debug!(
                        "late or unknown route answer {id} from {}",
                        self.path(index)
                    );
                }
            }
            ExtensionMessage::Action(action) => self.emit(ExtensionEvent::Action {
                extension: ExtensionId(index),
                action,
            }),
            ExtensionMessage::Ui {
                id,
                method,
                request,
            } => {
                let ui_id = crate::ids::uuid_v4();
                if let Some(local_id) = id.filter(|_| DIALOG_METHODS.contains(&method.as_str())) {
                    let deadline = request
                        .get("timeout")
                        .and_then(Value::as_u64)
                        .map(|ms| crate::deadline::after(Duration::from_millis(ms)));
                    self.dialogs.insert(
                        ui_id.clone(),
                        Dialog {
                            owner: DialogOwner::Extension {
                                extension: index,
                                local_id,
                                method: method.clone(),
                            },
                            deadline,
                        },
                    );
                }
                self.emit(ExtensionEvent::UiRequest {
                    event: Event::ExtensionUiRequest {
                        id: ui_id,
                        method,
                        fields: request,
                    },
                });
            }
            ExtensionMessage::Error {
                error,
                extension_path,
                event,
            } => self.emit(ExtensionEvent::Error(ExtensionError {
                extension_path: extension_path.unwrap_or_else(|| self.path(index)),
                event: event.unwrap_or_else(|| "extension".into()),
                error,
            })),
        }
    }

    /// Takes an extension out of service and resolves everything that waited on it.
    fn fail(&mut self, index: usize, event: &str, error: String) {
        let Some(extension) = self.extensions.get_mut(index) else {
            return;
        };
        if extension.failed {
            return;
        }
        extension.failed = true;
        if let Some(flag) = self.alive.get(index) {
            flag.store(false, Ordering::SeqCst);
        }
        if let Some(mut process) = extension.process.take() {
            process.kill_and_reap();
        }
        extension.registering = None;
        let path = extension.path.clone();
        log::warn!("extension {path} failed ({event}): {error}");
        self.emit(ExtensionEvent::Error(ExtensionError {
            extension_path: path.clone(),
            event: event.into(),
            error: error.clone(),
        }));
        self.resolve_work(index, &error);
        self.emit(ExtensionEvent::Exited {
            extension: ExtensionId(index),
        });
    }

    /// Ends what waited on an extension that stopped: hook steps take their failure default,
    /// tool runs and commands end with `error`, its streams and dialogs are dropped.
    fn resolve_work(&mut self, index: usize, error: &str) {
        let path = self.path(index);
        let waiting: Vec<HookId> = self
            .hooks
            .iter()
            .filter(|(_, run)| run.step.as_ref().is_some_and(|s| s.extension == index))
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            if let Some(mut run) = self.hooks.remove(&id) {
                run.step = None;
                run.chain.apply_failure(error);
                self.advance_hook(id, run);
            }
        }
        let tools: Vec<String> = self
            .tools
            .iter()
            .filter(|(_, run)| run.extension == index)
            .map(|(wire, _)| wire.clone())
            .collect();
        for wire in tools {
            if let Some(run) = self.tools.remove(&wire) {
                self.emit(ExtensionEvent::ToolFinished {
                    call_id: run.call_id,
                    output: ToolOutput::error(format!("Extension {path} failed: {error}")),
                    terminate: false,
                });
            }
        }
        let commands: Vec<String> = self
            .commands
            .iter()
            .filter(|(_, run)| run.extension == index)
            .map(|(wire, _)| wire.clone())
            .collect();
        for wire in commands {
            if let Some(run) = self.commands.remove(&wire) {
                self.emit(ExtensionEvent::CommandFinished {
                    id: run.id,
                    name: run.name,
                    error: Some(format!("the extension failed: {error}")),
                });
            }
        }
        self.streams.retain(|_, (owner, _)| *owner != index);
        let routes: Vec<String> = self
            .routes
            .iter()
            .filter(|(_, wait)| wait.extension == index)
            .map(|(wire, _)| wire.clone())
            .collect();
        for wire in routes {
            if let Some(wait) = self.routes.remove(&wire) {
                self.answer_route(wait, Err(format!("the extension failed: {error}")));
            }
        }
        self.dialogs.retain(|_, dialog| {
            !matches!(dialog.owner, DialogOwner::Extension { extension, .. } if extension == index)
        });
    }

    fn has_open_dialog(&self, index: usize) -> bool {
        self.dialogs.values().any(
            |d| matches!(d.owner, DialogOwner::Extension { extension, .. } if extension == index),
        )
    }

    fn next_deadline(&self) -> Instant {
        let mut wake = self.last_child_check + CHILD_CHECK_INTERVAL;
        for extension in self.extensions.iter().filter(|e| !e.failed) {
            if let Some(by) = extension.registering {
                wake = wake.min(by);
            }
        }
        for run in self.hooks.values() {
            if let Some(step) = &run.step
                && !self.has_open_dialog(step.extension)
            {
                wake = wake.min(step.deadline);
            }
        }
        for dialog in self.dialogs.values() {
            if let Some(deadline) = dialog.deadline {
                wake = wake.min(deadline);
            }
        }
        for wait in self.routes.values() {
            wake = wake.min(wait.deadline);
        }
        wake
    }

    fn expire(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .dialogs
            .iter()
            .filter(|(_, d)| d.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for ui_id in expired {
            if let Some(dialog) = self.dialogs.remove(&ui_id) {
                self.resolve_dialog(ui_id, dialog, &UiResponse::default(), true);
            }
        }
        let late: Vec<(usize, &'static str, String)> = self
            .hooks
            .values()
            .filter_map(|run| {
                let step = run.step.as_ref()?;
                (step.deadline <= now && !self.has_open_dialog(step.extension)).then(|| {
                    let hook = run.chain.kind().as_str();
                    let ms = run.step_timeout.as_millis();
                    let error = format!("no answer to {hook} within {ms} ms");
                    (step.extension, hook, error)
                })
            })
            .collect();
        for (index, hook, error) in late {
            self.fail(index, hook, error);
        }
        let unregistered: Vec<usize> = (0..self.extensions.len())
            .filter(|i| {
                let extension = &self.extensions[*i];
                !extension.failed && extension.registering.is_some_and(|by| by <= now)
            })
            .collect();
        for index in unregistered {
            let seconds = TS_HOST_REGISTER_TIMEOUT.as_secs();
            self.fail(
                index,
                "load",
                format!("no register line within {seconds} s"),
            );
        }
        // An extension that misses a request's deadline fails that request only (an error).
        let late: Vec<String> = self
            .routes
            .iter()
            .filter(|(_, wait)| wait.deadline <= now)
            .map(|(wire, _)| wire.clone())
            .collect();
        for wire in late {
            if let Some(wait) = self.routes.remove(&wire) {
                let ms = wait.timeout.as_millis();
                let result = Err(format!("no answer to {} within {ms} ms", wait.kind));
                self.answer_route(wait, result);
            }
        }
        if now >= self.last_child_check + CHILD_CHECK_INTERVAL {
            self.last_child_check = now;
            self.check_children();
        }
    }

    /// Notices a child that exited while something else (a grandchild) keeps its stdout open.
    fn check_children(&mut self) {
        let exited: Vec<usize> = (0..self.extensions.len())
            .filter(|i| {
                let extension = &self.extensions[*i];
                !extension.failed
                    && extension
                        .process
                        .as_ref()
                        .is_some_and(|p| has_exited_without_reaping(p.child.id()))
            })
            .collect();
        for index in exited {
            // Taken out first, so `fail` does not signal the group of a reaped leader again.
            let status = self.extensions[index]
                .process
                .take()
                .and_then(|mut p| p.kill_and_reap());
            let shown = status.map_or("unknown status".into(), |s| s.to_string());
            self.exited(index, &shown);
        }
    }

    /// `session_shutdown` to subscribers (unless `event` is Null), stdin closed, a grace
    /// period, then the group kill.
    fn shutdown(&mut self, grace: Duration, event: &Value) {
        let line = protocol::event_line(event);
        for index in 0..self.extensions.len() {
            let extension = &self.extensions[index];
            // Null: they heard it before (a session change tells them before it is made).
            if !event.is_null()
                && !extension.failed
                && extension.registration.wants_event("session_shutdown")
            {
                self.send(index, line.clone(), "session_shutdown");
            }
        }
        let mut running: Vec<Process> = self
            .extensions
            .iter_mut()
            .filter_map(|e| e.process.take())
            .collect();
        for process in &mut running {
            // Replacing the queue's sender drops ours: the writer drains its queue, then ends and
            // closes the child's stdin — the extension's cue to exit.
            let (closed, _) = crossbeam_channel::bounded(0);
            process.writer = closed;
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline
            && running
                .iter()
                .any(|p| !has_exited_without_reaping(p.child.id()))
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        for process in &mut running {
            process.kill_and_reap();
        }
        for (index, extension) in self.extensions.iter_mut().enumerate() {
            extension.failed = true;
            if let Some(flag) = self.alive.get(index) {
                flag.store(false, Ordering::SeqCst);
            }
        }
    }
}
