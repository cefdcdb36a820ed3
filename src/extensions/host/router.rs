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
        /// `new` / `resume` / `fork` (with `targetSessionFile`) before a session change.
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
}

pub(super) enum FromExtension {
    Line { index: usize, line: Vec<u8> },
    TooLong { index: usize, len: usize },
    Eof { index: usize },
    WriteFailed { index: usize, error: String },
}

impl FromExtension {
    pub(super) fn index(&self) -> usize {
        match self {
            FromExtension::Line { index, .. }
            | FromExtension::TooLong { index, .. }
            | FromExtension::Eof { index }
            | FromExtension::WriteFailed { index, .. } => *index,
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
                if self.extensions.get(index).is_none_or(|e| e.failed) {
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
                if self.extensions.get(index).is_none_or(|e| e.failed) {
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
                let index = extension.0;
                if let Some(extension) = self.extensions.get_mut(index) {
                    extension.in_flight = extension.in_flight.saturating_sub(1);
                }
                self.send(index, protocol::answer_line(kind, &id, &answer), kind);
            }
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
            if self.extensions[index].failed {
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

    fn path(&self, index: usize) -> String {
        self.extensions
            .get(index)
            .map(|e| e.path.clone())
            .unwrap_or_default()
    }

    fn on_extension_input(&mut self, message: FromExtension) {
        let index = message.index();
        if self.extensions.get(index).is_none_or(|e| e.failed) {
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
            FromExtension::Eof { .. } => {
                // Taken out first, so `fail` does not signal the group of a reaped leader again.
                let status = self.extensions[index]
                    .process
                    .take()
                    .and_then(|mut p| p.kill_and_reap());
                let shown = status.map_or("unknown status".into(), |s| s.to_string());
                self.fail(index, "exit", format!("exited unexpectedly ({shown})"));
            }
            FromExtension::WriteFailed { error, .. } => {
                self.fail(index, "protocol", format!("cannot write to it: {error}"))
            }
        }
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
        let path = extension.path.clone();
        log::warn!("extension {path} failed ({event}): {error}");
        self.emit(ExtensionEvent::Error(ExtensionError {
            extension_path: path.clone(),
            event: event.into(),
            error: error.clone(),
        }));
        let waiting: Vec<HookId> = self
            .hooks
            .iter()
            .filter(|(_, run)| run.step.as_ref().is_some_and(|s| s.extension == index))
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            if let Some(mut run) = self.hooks.remove(&id) {
                run.step = None;
                run.chain.apply_failure(&error);
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
        self.dialogs.retain(|_, dialog| {
            !matches!(dialog.owner, DialogOwner::Extension { extension, .. } if extension == index)
        });
        self.emit(ExtensionEvent::Exited {
            extension: ExtensionId(index),
        });
    }

    fn has_open_dialog(&self, index: usize) -> bool {
        self.dialogs.values().any(
            |d| matches!(d.owner, DialogOwner::Extension { extension, .. } if extension == index),
        )
    }

    fn next_deadline(&self) -> Instant {
        let mut wake = self.last_child_check + CHILD_CHECK_INTERVAL;
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
            self.fail(index, "exit", format!("exited unexpectedly ({shown})"));
        }
    }

    /// `session_shutdown` to subscribers, stdin closed, a grace period, then the group kill.
    fn shutdown(&mut self, grace: Duration, event: &Value) {
        let line = protocol::event_line(event);
        for index in 0..self.extensions.len() {
            let extension = &self.extensions[index];
            if !extension.failed && extension.registration.wants_event("session_shutdown") {
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
