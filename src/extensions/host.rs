//! The extension host: starts every extension as a child process in its own process group,
//! performs the handshake, and then lets the agent drive it without ever blocking.
//!
//! Threads: per extension "ext-in-<n>" (writes queued lines to its stdin; a bounded queue, so a
//! full queue marks the extension failed instead of stalling anyone) and "ext-out-<n>" (frames
//! its stdout into lines); one "extension-host" router that owns all host state — pending hooks,
//! tool runs, command runs, open dialogs and their deadlines — and turns extension lines into
//! `ExtensionEvent`s on the agent's channel. The agent's calls are messages on an unbounded
//! control channel: they return at once. Deadlines are the router's own timers (`select!` with
//! `at(next_deadline)`), so the agent needs no timer for extensions: every hook ends in exactly
//! one `HookResult`, every tool run in one `ToolFinished`, every command in one
//! `CommandFinished`, every approval dialog in one `ApprovalAnswered`.
//!
//! Failure: a crash, an answer missing its deadline, a line that is not protocol, a full input
//! queue or a dead pipe fails that extension: one `Error` event (the agent emits it as
//! `extension_error`), its process group is killed, its pending work resolves with the defaults
//! (hooks: see `hooks`; tools: an error result; commands: an error), then `Exited`.
//!
//! Blocking calls and how they end: `start` waits for registrations at most `REGISTER_TIMEOUT`;
//! `shutdown` at most its grace period plus the kill; the router blocks in `select!` (woken by
//! control, extension lines, a deadline or the 500 ms child check) and in `send` to the agent's
//! channel (the agent always drains it). Readers end at EOF, which the group kill guarantees;
//! writers end when their queue's sender is dropped or the pipe breaks.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, at, select};
use serde_json::{Map, Value};

use super::approval::ApprovalAnswer;
use super::hooks::{HookChain, HookOutcome};
use super::protocol::{
    self, Action, DIALOG_METHODS, ExtensionMessage, Handshake, HookKind, PROTOCOL_VERSION,
    Registration, ToolDecl, UiResponse,
};
use super::{ExtensionSpec, is_executable_file, is_script_module};
use crate::provider::ToolSpec;
use crate::rpc::events::{Event, Lifecycle};
use crate::rpc::jsonl::{Frame, Framer};
use crate::tools::ToolOutput;

/// How long `start` waits for every extension's `register` line.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines queued for one extension's stdin before it counts as stuck.
pub const OUTBOUND_CAPACITY: usize = 1024;
/// The longest line accepted from an extension.
pub const MAX_LINE_BYTES: usize = 16 << 20;
/// How often the router checks whether a child exited while its stdout stays open.
const CHILD_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// An extension, by load order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExtensionId(pub usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HookId(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommandRunId(pub u64);

/// An `extension_error` record's content.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtensionError {
    pub extension_path: String,
    pub event: String,
    pub error: String,
}

impl ExtensionError {
    /// The `extension_error` event for stdout.
    pub fn event(&self) -> Event {
        Event::ExtensionError {
            extension_path: self.extension_path.clone(),
            event: self.event.clone(),
            error: self.error.clone(),
        }
    }
}

/// A slash command offered by an extension.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtensionCommand {
    /// The invocation name: the registered one, with `:<n>` appended when several extensions
    /// register the same name (pi's rule).
    pub name: String,
    pub registered_name: String,
    pub description: Option<String>,
    pub extension: ExtensionId,
    pub source_info: Value,
}

impl ExtensionCommand {
    /// The `get_commands` item: `{name, description?, source:"extension", sourceInfo}`.
    pub fn get_commands_item(&self) -> Value {
        let mut item = Map::new();
        item.insert("name".into(), self.name.clone().into());
        if let Some(description) = &self.description {
            item.insert("description".into(), description.clone().into());
        }
        item.insert("source".into(), "extension".into());
        item.insert("sourceInfo".into(), self.source_info.clone());
        Value::Object(item)
    }
}

/// A tool offered by an extension.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtensionTool {
    pub extension: ExtensionId,
    pub decl: ToolDecl,
}

impl ExtensionTool {
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.decl.name.clone(),
            description: self.decl.description.clone(),
            parameters: self.decl.parameters.clone(),
        }
    }
}

/// What the host reports to the agent.
#[derive(Clone, Debug, PartialEq)]
pub enum ExtensionEvent {
    /// The combined answer to `start_hook` (always exactly one per `HookId`).
    HookResult {
        id: HookId,
        outcome: HookOutcome,
    },
    /// A cumulative partial result of an extension tool.
    ToolUpdate {
        call_id: String,
        partial: ToolOutput,
    },
    ToolFinished {
        call_id: String,
        output: ToolOutput,
    },
    /// A command ended; `error` is Some when it failed (emit `extension_error` with
    /// `extensionPath:"command:<name>"`, `event:"command"`).
    CommandFinished {
        id: CommandRunId,
        name: String,
        error: Option<String>,
    },
    Action {
        extension: ExtensionId,
        action: Action,
    },
    /// An `extension_ui_request` (`Event::ExtensionUiRequest`), complete with a fresh id: write
    /// it to stdout as is. Dialog answers come back through `deliver_ui_response`.
    UiRequest {
        event: Event,
    },
    /// The answer (or timeout) of a dialog opened with `ask_approval`.
    ApprovalAnswered {
        ui_id: String,
        answer: ApprovalAnswer,
    },
    /// Write `error.event()` to stdout.
    Error(ExtensionError),
    /// The extension is gone for good (after a failure).
    Exited {
        extension: ExtensionId,
    },
}

/// The agent's handle on the running extensions. Dropping it kills them all at once.
pub struct ExtensionHost {
    control: Sender<Control>,
    extensions: Vec<Loaded>,
    alive: Arc<Vec<AtomicBool>>,
    next_id: AtomicU64,
    commands: Vec<ExtensionCommand>,
    router: Option<JoinHandle<()>>,
}

struct Loaded {
    #[cfg_attr(not(test), allow(dead_code))] // read by tests through extension_path
    path: String,
    registration: Registration,
}

impl ExtensionHost {
    /// Starts every extension, sends each `hello`, and waits (at most `REGISTER_TIMEOUT`) for
    /// their `register` lines. Extensions that cannot start, refuse the handshake or are JS/TS
    /// modules are left out and described in the returned errors (event `"load"`); the others
    /// run. `events` receives every `ExtensionEvent` from now on.
    pub fn start(
        specs: Vec<ExtensionSpec>,
        handshake: &Handshake,
        sandbox: Option<&crate::sandbox::Policy>,
        events: Sender<ExtensionEvent>,
    ) -> (ExtensionHost, Vec<ExtensionError>) {
        let (from_tx, from_rx) = crossbeam_channel::bounded::<FromExtension>(256);
        let mut errors = Vec::new();
        let mut slots: Vec<Slot> = Vec::new();
        for (index, spec) in specs.iter().enumerate() {
            let path = spec.path.to_string_lossy().into_owned();
            let load_error = |error: String| ExtensionError {
                extension_path: path.clone(),
                event: "load".into(),
                error,
            };
            let process = match check_loadable(&spec.path) {
                Err(error) => Err(error),
                Ok(()) => {
                    spawn_extension(index, &spec.path, &handshake.cwd, sandbox, from_tx.clone())
                }
            };
            let process = match process {
                Ok(process) => {
                    let hello = protocol::hello_line(handshake, &path);
                    let _ = process.writer.try_send(hello);
                    Some(process)
                }
                Err(error) => {
                    errors.push(load_error(error));
                    None
                }
            };
            slots.push(Slot {
                path,
                spec: spec.clone(),
                process,
                registration: None,
            });
        }
        drop(from_tx);
        let backlog = wait_for_registrations(&mut slots, &from_rx, &mut errors);

        let alive: Vec<AtomicBool> = slots
            .iter()
            .map(|s| AtomicBool::new(s.process.is_some()))
            .collect();
        let alive = Arc::new(alive);
        let extensions: Vec<Loaded> = slots
            .iter()
            .map(|slot| Loaded {
                path: slot.path.clone(),
                registration: slot.registration.clone().unwrap_or_default(),
            })
            .collect();
        let commands = command_list(&slots);
        let (control_tx, control_rx) = crossbeam_channel::unbounded();
        let router_state = Router {
            extensions: slots
                .into_iter()
                .map(|slot| RouterExtension {
                    failed: slot.process.is_none(),
                    process: slot.process,
                    path: slot.path,
                    registration: slot.registration.unwrap_or_default(),
                })
                .collect(),
            alive: alive.clone(),
            events,
            hooks: HashMap::new(),
            tools: HashMap::new(),
            commands: HashMap::new(),
            dialogs: HashMap::new(),
            next_wire: 0,
            last_child_check: Instant::now(),
        };
        let router = std::thread::Builder::new()
            .name("extension-host".into())
            .spawn(move || router_state.run(control_rx, from_rx, backlog));
        let router = match router {
            Ok(router) => Some(router),
            Err(e) => {
                // Without the router nothing can be driven; the children were moved into it
                // and died with the closure (Drop of RouterExtension kills them).
                errors.push(ExtensionError {
                    extension_path: String::new(),
                    event: "load".into(),
                    error: format!("cannot start the extension host thread: {e}"),
                });
                for flag in alive.iter() {
                    flag.store(false, Ordering::SeqCst);
                }
                None
            }
        };
        let host = ExtensionHost {
            control: control_tx,
            extensions,
            alive,
            next_id: AtomicU64::new(1),
            commands,
            router,
        };
        (host, errors)
    }

    /// The extensions' slash commands, in load order (pi's `get_commands` lists them first).
    pub fn commands(&self) -> Vec<ExtensionCommand> {
        self.commands
            .iter()
            .filter(|c| self.is_alive(c.extension))
            .cloned()
            .collect()
    }

    /// The extensions' tools, in load order; a name already taken by an earlier extension is
    /// skipped (the lead decides how they mix with built-ins).
    pub fn tools(&self) -> Vec<ExtensionTool> {
        let mut seen = std::collections::HashSet::new();
        let mut tools = Vec::new();
        for (index, loaded) in self.extensions.iter().enumerate() {
            if !self.is_alive(ExtensionId(index)) {
                continue;
            }
            for decl in &loaded.registration.tools {
                if seen.insert(decl.name.clone()) {
                    tools.push(ExtensionTool {
                        extension: ExtensionId(index),
                        decl: decl.clone(),
                    });
                }
            }
        }
        tools
    }

    /// The registrations, by `ExtensionId` (empty for extensions that failed to load).
    #[cfg(test)]
    pub fn registration(&self, extension: ExtensionId) -> Option<&Registration> {
        self.extensions.get(extension.0).map(|l| &l.registration)
    }

    #[cfg(test)]
    pub fn extension_path(&self, extension: ExtensionId) -> Option<&str> {
        self.extensions.get(extension.0).map(|l| l.path.as_str())
    }

    pub fn is_alive(&self, extension: ExtensionId) -> bool {
        self.alive
            .get(extension.0)
            .is_some_and(|a| a.load(Ordering::SeqCst))
    }

    /// Whether any live extension handles the hook (so the agent can skip the round trip).
    pub fn handles_hook(&self, kind: HookKind) -> bool {
        self.live()
            .any(|(_, loaded)| loaded.registration.handles(kind))
    }

    /// Whether any live extension subscribed to events of this `type` (checked before the agent
    /// builds a value for a record it holds in serialized form).
    pub fn wants_event(&self, event_type: &str) -> bool {
        self.live()
            .any(|(_, loaded)| loaded.registration.wants_event(event_type))
    }

    /// Passes a record the agent emitted (or `session_start`, model/thinking changes…) to the
    /// extensions subscribed to its `type`. Never blocks; cheap when nobody subscribed.
    pub fn notify_event(&self, event: &Value) {
        let Some(event_type) = event.get("type").and_then(Value::as_str) else {
            return;
        };
        if self
            .live()
            .any(|(_, loaded)| loaded.registration.wants_event(event_type))
        {
            let _ = self.control.send(Control::Event(event.clone()));
        }
    }

    /// Asks every live extension that handles `kind`, in load order, with `deadline` for each
    /// answer. None when nobody handles it (proceed with the default at once); otherwise one
    /// `HookResult` with this id arrives later.
    pub fn start_hook(&self, kind: HookKind, payload: Value, deadline: Duration) -> Option<HookId> {
        if !self.handles_hook(kind) {
            return None;
        }
        let id = HookId(self.next_id.fetch_add(1, Ordering::SeqCst));
        let _ = self.control.send(Control::StartHook {
            id,
            kind,
            payload,
            deadline,
        });
        Some(id)
    }

    /// Runs an extension tool. Updates and the result arrive keyed by `call_id`.
    pub fn run_tool(&self, extension: ExtensionId, call_id: &str, tool_name: &str, args: &Value) {
        let _ = self.control.send(Control::RunTool {
            extension,
            call_id: call_id.to_string(),
            tool_name: tool_name.to_string(),
            args: args.clone(),
        });
    }

    /// Abandons a tool run (abort): the extension is told `cancel_tool`; no result follows.
    pub fn cancel_tool(&self, call_id: &str) {
        let _ = self.control.send(Control::CancelTool {
            call_id: call_id.to_string(),
        });
    }

    /// Runs `/name args`. None when no live extension has that command.
    pub fn run_command(&self, name: &str, args: &str) -> Option<CommandRunId> {
        let command = self
            .commands
            .iter()
            .find(|c| c.name == name && self.is_alive(c.extension))?;
        let id = CommandRunId(self.next_id.fetch_add(1, Ordering::SeqCst));
        let _ = self.control.send(Control::RunCommand {
            id,
            extension: command.extension,
            name: command.registered_name.clone(),
            args: args.to_string(),
        });
        Some(id)
    }

    /// Routes a client's `extension_ui_response`; unknown or expired ids are ignored.
    pub fn deliver_ui_response(&self, ui_id: &str, response: UiResponse) {
        let _ = self.control.send(Control::UiResponse {
            ui_id: ui_id.to_string(),
            response,
        });
    }

    /// Opens an approval dialog (approval gate `Ask`): returns its id and the
    /// `extension_ui_request` record to write; one `ApprovalAnswered` follows (a timeout denies).
    pub fn ask_approval(&self, title: &str, message: &str, timeout: Duration) -> (String, Event) {
        let ui_id = fresh_uuid();
        let record = super::approval::ask_request(&ui_id, title, message, timeout);
        let _ = self.control.send(Control::Approval {
            ui_id: ui_id.clone(),
            deadline: crate::deadline::after(timeout),
        });
        (ui_id, record)
    }

    /// Ends every extension: `session_shutdown` (reason "quit") to subscribers, stdin closed,
    /// then after `grace` (or as soon as all exited) their process groups are killed and reaped.
    pub fn shutdown(mut self, grace: Duration) {
        self.stop(grace);
    }

    fn stop(&mut self, grace: Duration) {
        let Some(router) = self.router.take() else {
            return;
        };
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        if self
            .control
            .send(Control::Shutdown {
                grace,
                done: done_tx,
            })
            .is_ok()
            && done_rx.recv_timeout(grace + Duration::from_secs(5)).is_ok()
        {
            let _ = router.join();
        }
    }

    fn live(&self) -> impl Iterator<Item = (usize, &Loaded)> {
        self.extensions
            .iter()
            .enumerate()
            .filter(|(index, _)| self.is_alive(ExtensionId(*index)))
    }
}

impl Drop for ExtensionHost {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}

// ---- startup ----

struct Slot {
    path: String,
    spec: ExtensionSpec,
    process: Option<Process>,
    registration: Option<Registration>,
}

/// A running child and its stdin queue.
struct Process {
    child: Child,
    pgid: i32,
    writer: Sender<String>,
}

impl Process {
    /// SIGKILLs the whole group, then reaps the leader. The leader is reaped only after the
    /// kill, so its pid (= the group id) cannot have been reused by then.
    fn kill_and_reap(&mut self) -> Option<std::process::ExitStatus> {
        kill_group(self.pgid);
        self.child.wait().ok()
    }
}

fn check_loadable(path: &std::path::Path) -> Result<(), String> {
    if is_script_module(path) {
        return Err(
            "pi-rs runs extensions as executables speaking JSONL on stdin/stdout \
                    (see the Extensions section of the pi-rs README); JavaScript/TypeScript modules cannot be loaded"
                .into(),
        );
    }
    if !path.exists() {
        return Err(format!("not found: {}", path.display()));
    }
    if !is_executable_file(path) {
        return Err(
            "not an executable file (pi-rs runs extensions as executables; chmod +x it)".into(),
        );
    }
    Ok(())
}

fn spawn_extension(
    index: usize,
    path: &std::path::Path,
    cwd: &str,
    sandbox: Option<&crate::sandbox::Policy>,
    to_router: Sender<FromExtension>,
) -> Result<Process, String> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(path);
    command
        .current_dir(cwd)
        .env("PI_EXTENSION_PROTOCOL", PROTOCOL_VERSION.to_string())
        .envs(crate::tools::env::CHILD_MARKERS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0);
    if let Some(policy) = sandbox {
        crate::sandbox::confine_child(&mut command, policy)?;
    }
    let mut child = command.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let pgid = child.id() as i32;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        kill_group(pgid);
        let _ = child.wait();
        return Err("cannot start: no pipes".into());
    };
    let (writer, queue) = crossbeam_channel::bounded::<String>(OUTBOUND_CAPACITY);
    let writer_report = to_router.clone();
    let spawned_writer = std::thread::Builder::new()
        .name(format!("ext-in-{index}"))
        .spawn(move || write_lines(index, stdin, queue, writer_report));
    let spawned_reader = spawned_writer.and_then(|_| {
        std::thread::Builder::new()
            .name(format!("ext-out-{index}"))
            .spawn(move || read_lines(index, stdout, to_router))
    });
    if let Err(e) = spawned_reader {
        kill_group(pgid);
        let _ = child.wait();
        return Err(format!("cannot start its threads: {e}"));
    }
    Ok(Process {
        child,
        pgid,
        writer,
    })
}

/// Thread "ext-in-<n>": queued lines → the child's stdin. Ends when the queue's sender is
/// dropped (closing stdin, which tells the extension to exit) or the pipe breaks.
fn write_lines(
    index: usize,
    mut stdin: std::process::ChildStdin,
    queue: Receiver<String>,
    report: Sender<FromExtension>,
) {
    for line in queue {
        let written = stdin
            .write_all(line.as_bytes())
            .and_then(|_| stdin.write_all(b"\n"))
            .and_then(|_| stdin.flush());
        if let Err(e) = written {
            let _ = report.send(FromExtension::WriteFailed {
                index,
                error: e.to_string(),
            });
            return;
        }
    }
}

/// Thread "ext-out-<n>": the child's stdout → framed lines. Ends at EOF (exit or group kill) or
/// when the router is gone.
fn read_lines(
    index: usize,
    mut stdout: std::process::ChildStdout,
    to_router: Sender<FromExtension>,
) {
    let mut framer = Framer::new(MAX_LINE_BYTES);
    let mut buffer = vec![0u8; 64 * 1024];
    let mut frames = Vec::new();
    loop {
        let read = match stdout.read(&mut buffer) {
            Ok(0) => {
                framer.finish(&mut frames);
                0
            }
            Ok(n) => {
                framer.push(&buffer[..n], &mut frames);
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        for frame in frames.drain(..) {
            let message = match frame {
                Frame::Record(line) if line.iter().all(u8::is_ascii_whitespace) => continue,
                Frame::Record(line) => FromExtension::Line { index, line },
                Frame::TooLong { len } => FromExtension::TooLong { index, len },
            };
            if to_router.send(message).is_err() {
                return;
            }
        }
        if read == 0 {
            let _ = to_router.send(FromExtension::Eof { index });
            return;
        }
    }
}

/// Reads until every started extension registered or failed, or the timeout. Lines that follow
/// a registration early are kept for the router, in order.
fn wait_for_registrations(
    slots: &mut [Slot],
    from: &Receiver<FromExtension>,
    errors: &mut Vec<ExtensionError>,
) -> Vec<FromExtension> {
    let deadline = Instant::now() + REGISTER_TIMEOUT;
    let mut backlog = Vec::new();
    let pending = |slots: &[Slot]| {
        slots
            .iter()
            .any(|s| s.process.is_some() && s.registration.is_none())
    };
    let fail = |slot: &mut Slot, error: String, errors: &mut Vec<ExtensionError>| {
        if let Some(mut process) = slot.process.take() {
            process.kill_and_reap();
        }
        errors.push(ExtensionError {
            extension_path: slot.path.clone(),
            event: "load".into(),
            error,
        });
    };
    while pending(slots) {
        let message = match from.recv_deadline(deadline) {
            Ok(message) => message,
            Err(_) => break,
        };
        let index = message.index();
        let Some(slot) = slots.get_mut(index) else {
            continue;
        };
        if slot.process.is_none() {
            continue;
        }
        if slot.registration.is_some() {
            backlog.push(message);
            continue;
        }
        match message {
            FromExtension::Line { line, .. } => match protocol::parse_line(&line) {
                Ok(ExtensionMessage::Register {
                    protocol: version,
                    registration,
                }) if version == PROTOCOL_VERSION => slot.registration = Some(registration),
                Ok(ExtensionMessage::Register {
                    protocol: version, ..
                }) => fail(
                    slot,
                    format!("speaks protocol {version}; pi-rs speaks {PROTOCOL_VERSION}"),
                    errors,
                ),
                Ok(_) => fail(
                    slot,
                    "the first line must be a register message".into(),
                    errors,
                ),
                Err(e) => fail(slot, format!("invalid register line: {e}"), errors),
            },
            FromExtension::TooLong { len, .. } => {
                fail(slot, format!("a line of {len} bytes is too long"), errors)
            }
            FromExtension::Eof { .. } => {
                let status = slot
                    .process
                    .take()
                    .and_then(|mut p| p.kill_and_reap())
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "unknown status".into());
                fail(
                    slot,
                    format!("exited before registering ({status})"),
                    errors,
                )
            }
            FromExtension::WriteFailed { error, .. } => {
                fail(slot, format!("cannot write to it: {error}"), errors)
            }
        }
    }
    for slot in slots.iter_mut() {
        if slot.process.is_some() && slot.registration.is_none() {
            let seconds = REGISTER_TIMEOUT.as_secs();
            fail(slot, format!("no register line within {seconds} s"), errors);
        }
    }
    backlog
}

/// Commands of the loaded extensions; names registered by several get `:1`, `:2`… in load order.
fn command_list(slots: &[Slot]) -> Vec<ExtensionCommand> {
    let mut all = Vec::new();
    for (index, slot) in slots.iter().enumerate() {
        let Some(registration) = slot
            .registration
            .as_ref()
            .filter(|_| slot.process.is_some())
        else {
            continue;
        };
        for command in &registration.commands {
            all.push(ExtensionCommand {
                name: command.name.clone(),
                registered_name: command.name.clone(),
                description: command.description.clone(),
                extension: ExtensionId(index),
                source_info: slot.spec.source_info(),
            });
        }
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    for command in &all {
        *counts.entry(command.name.clone()).or_default() += 1;
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for command in &mut all {
        if counts[&command.registered_name] > 1 {
            let n = seen.entry(command.registered_name.clone()).or_default();
            *n += 1;
            command.name = format!("{}:{n}", command.registered_name);
        }
    }
    all
}

// ---- the router ----

enum Control {
    Event(Value),
    StartHook {
        id: HookId,
        kind: HookKind,
        payload: Value,
        deadline: Duration,
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
        done: Sender<()>,
    },
}

enum FromExtension {
    Line { index: usize, line: Vec<u8> },
    TooLong { index: usize, len: usize },
    Eof { index: usize },
    WriteFailed { index: usize, error: String },
}

impl FromExtension {
    fn index(&self) -> usize {
        match self {
            FromExtension::Line { index, .. }
            | FromExtension::TooLong { index, .. }
            | FromExtension::Eof { index }
            | FromExtension::WriteFailed { index, .. } => *index,
        }
    }
}

struct RouterExtension {
    path: String,
    registration: Registration,
    process: Option<Process>,
    failed: bool,
}

impl Drop for RouterExtension {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill_and_reap();
        }
    }
}

struct HookRun {
    chain: HookChain,
    /// Extensions still to ask, in load order.
    remaining: VecDeque<usize>,
    step: Option<HookStep>,
    step_timeout: Duration,
}

struct HookStep {
    extension: usize,
    wire_id: String,
    deadline: Instant,
}

struct ToolRun {
    extension: usize,
    call_id: String,
}

struct CommandRun {
    extension: usize,
    id: CommandRunId,
    name: String,
}

enum DialogOwner {
    Extension {
        extension: usize,
        local_id: String,
        method: String,
    },
    Approval,
}

struct Dialog {
    owner: DialogOwner,
    deadline: Option<Instant>,
}

struct Router {
    extensions: Vec<RouterExtension>,
    alive: Arc<Vec<AtomicBool>>,
    events: Sender<ExtensionEvent>,
    hooks: HashMap<HookId, HookRun>,
    /// Keyed by wire id ("t<n>").
    tools: HashMap<String, ToolRun>,
    /// Keyed by wire id ("c<n>").
    commands: HashMap<String, CommandRun>,
    /// Keyed by the client-facing UI id.
    dialogs: HashMap<String, Dialog>,
    next_wire: u64,
    last_child_check: Instant,
}

impl Router {
    fn run(
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
                    Ok(Control::Shutdown { grace, done }) => {
                        self.shutdown(grace);
                        let _ = done.send(());
                        return;
                    }
                    Ok(message) => self.control(message),
                    Err(_) => {
                        self.shutdown(Duration::ZERO);
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
            Control::Event(event) => {
                let event_type = event.get("type").and_then(Value::as_str).unwrap_or("");
                let line = protocol::event_line(&event);
                for index in 0..self.extensions.len() {
                    let extension = &self.extensions[index];
                    if !extension.failed && extension.registration.wants_event(event_type) {
                        self.send(index, line.clone(), event_type);
                    }
                }
            }
            Control::StartHook {
                id,
                kind,
                payload,
                deadline,
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
            Control::Shutdown { .. } => {}
        }
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
        self.emit(ExtensionEvent::HookResult {
            id,
            outcome: run.chain.finish(),
        });
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
        match message {
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
            ExtensionMessage::ToolResult { id, output } => {
                if self.tools.get(&id).is_some_and(|r| r.extension == index)
                    && let Some(run) = self.tools.remove(&id)
                {
                    self.emit(ExtensionEvent::ToolFinished {
                        call_id: run.call_id,
                        output,
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
            ExtensionMessage::Action(action) => self.emit(ExtensionEvent::Action {
                extension: ExtensionId(index),
                action,
            }),
            ExtensionMessage::Ui {
                id,
                method,
                request,
            } => {
                let ui_id = fresh_uuid();
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
            ExtensionMessage::Error { error } => self.emit(ExtensionEvent::Error(ExtensionError {
                extension_path: self.path(index),
                event: "extension".into(),
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
    fn shutdown(&mut self, grace: Duration) {
        let event = Event::Lifecycle(Lifecycle::SessionShutdown).to_extension_value();
        let line = protocol::event_line(&event.unwrap_or_default());
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

/// Whether the child has exited, leaving it unreaped (a zombie keeps its pid and group id
/// reserved, so the later group kill cannot hit a stranger).
fn has_exited_without_reaping(pid: u32) -> bool {
    // SAFETY: waitid writes only into the zeroed siginfo we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let result = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        result == 0 && info.si_pid() != 0
    }
}

fn kill_group(pgid: i32) {
    if pgid <= 0 {
        return;
    }
    // SAFETY: plain syscalls on a group we created; an already empty group just fails.
    unsafe {
        if libc::killpg(pgid, libc::SIGKILL) != 0 {
            libc::kill(pgid, libc::SIGKILL);
        }
    }
}

/// A random version-4 UUID string for UI request ids (pi uses `crypto.randomUUID()`).
pub fn fresh_uuid() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut halves = [0u64; 2];
    for half in &mut halves {
        // RandomState is seeded randomly per process; the counter and clock make each call unique.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        *half = hasher.finish();
    }
    let bytes: u128 = (u128::from(halves[0]) << 64) | u128::from(halves[1]);
    // Version 4, variant 10xx.
    let bytes = (bytes & !(0xF << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let hex = format!("{bytes:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    use crate::extensions::ExtensionOrigin;
    use crate::extensions::hooks::{InputOutcome, ToolCallOutcome};

    const WAIT: Duration = Duration::from_secs(10);

    fn fixture(name: &str) -> ExtensionSpec {
        ExtensionSpec {
            path: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/extensions")
                .join(name),
            origin: ExtensionOrigin::Cli,
        }
    }

    fn handshake() -> Handshake {
        Handshake {
            cwd: env!("CARGO_MANIFEST_DIR").into(),
            session_id: "test-session".into(),
            session_file: None,
            flag_values: Map::new(),
        }
    }

    struct Started {
        host: ExtensionHost,
        errors: Vec<ExtensionError>,
        events: Receiver<ExtensionEvent>,
        /// Pids the extensions announced ("pid <n> [<n>…]" notices), by extension.
        pids: HashMap<usize, Vec<i32>>,
    }

    fn start(names: &[&str]) -> Started {
        let (tx, events) = crossbeam_channel::unbounded();
        let (host, errors) = ExtensionHost::start(
            names.iter().map(|n| fixture(n)).collect(),
            &handshake(),
            None,
            tx,
        );
        let mut started = Started {
            host,
            errors,
            events,
            pids: HashMap::new(),
        };
        // Every fixture announces its pid(s) first; collect them (in load order).
        let live = (0..names.len())
            .filter(|i| started.host.is_alive(ExtensionId(*i)))
            .count();
        let mut order = Vec::new();
        while order.len() < live {
            let event = started.next();
            let ExtensionEvent::UiRequest { event: ui } = &event else {
                panic!("expected a pid notice, got {event:?}");
            };
            let record = ui.to_extension_value().unwrap();
            let message = record["message"].as_str().unwrap_or_default();
            let pids: Vec<i32> = message
                .strip_prefix("pid ")
                .unwrap_or_else(|| panic!("not a pid notice: {record}"))
                .split(' ')
                .map(|p| p.parse().unwrap())
                .collect();
            order.push(pids);
        }
        // Notices from different extensions may interleave: match them by process group.
        for pids in order {
            let index = (0..names.len())
                .find(|i| {
                    started.host.is_alive(ExtensionId(*i))
                        && !started.pids.contains_key(i)
                        && pid_matches(&started, *i, pids[0])
                })
                .unwrap_or_else(|| panic!("no extension has pid {}", pids[0]));
            started.pids.insert(index, pids);
        }
        started
    }

    /// Whether extension `index`'s process is `pid` (its /proc cmdline names its fixture).
    fn pid_matches(started: &Started, index: usize, pid: i32) -> bool {
        let path = started
            .host
            .extension_path(ExtensionId(index))
            .unwrap_or_default();
        let name = std::path::Path::new(path)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(&name))
            .unwrap_or(false)
    }

    impl Started {
        fn next(&self) -> ExtensionEvent {
            self.events
                .recv_timeout(WAIT)
                .expect("no extension event in time")
        }

        /// The next event that is not a UI request of `skip` methods.
        fn next_where(&self, pred: impl Fn(&ExtensionEvent) -> bool) -> ExtensionEvent {
            loop {
                let event = self.next();
                if pred(&event) {
                    return event;
                }
            }
        }

        fn hook(&self, kind: HookKind, payload: Value) -> HookOutcome {
            let id = self
                .host
                .start_hook(kind, payload, Duration::from_secs(5))
                .expect("someone handles the hook");
            match self.next() {
                ExtensionEvent::HookResult { id: got, outcome } if got == id => outcome,
                other => panic!("expected the hook result, got {other:?}"),
            }
        }
    }

    /// Gone, or a zombie (the container's init may not reap orphans).
    fn process_gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    fn assert_gone(pids: &[i32]) {
        let deadline = Instant::now() + Duration::from_secs(5);
        for pid in pids {
            while !process_gone(*pid) {
                assert!(Instant::now() < deadline, "process {pid} is still running");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    #[test]
    fn load_errors_for_modules_non_executables_and_missing_files() {
        let dir = std::env::temp_dir().join(format!("pi-rs-ext-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ext.ts"), "export default () => {}").unwrap();
        std::fs::write(dir.join("plain.sh"), "#!/bin/sh\n").unwrap();
        let specs = ["ext.ts", "plain.sh", "missing.sh"]
            .iter()
            .map(|n| ExtensionSpec {
                path: dir.join(n),
                origin: ExtensionOrigin::Cli,
            })
            .chain([fixture("hello.sh")])
            .collect();
        let (tx, events) = crossbeam_channel::unbounded();
        let (host, errors) = ExtensionHost::start(specs, &handshake(), None, tx);
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors.iter().all(|e| e.event == "load"));
        assert!(
            errors[0].error.contains("executables"),
            "{}",
            errors[0].error
        );
        assert!(
            errors[1].error.contains("not an executable"),
            "{}",
            errors[1].error
        );
        assert!(errors[2].error.contains("not found"), "{}", errors[2].error);
        assert_eq!(
            errors[0].event().to_extension_value().unwrap()["extensionPath"],
            dir.join("ext.ts").to_string_lossy().as_ref()
        );
        // The rest goes on: hello.sh runs.
        assert_eq!(host.commands().len(), 1);
        assert!(host.is_alive(ExtensionId(3)));
        assert!(!host.is_alive(ExtensionId(0)));
        host.shutdown(Duration::from_millis(500));
        drop(events);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn shell_extension_runs_its_command_and_hears_events() {
        let started = start(&["hello.sh"]);
        assert!(started.errors.is_empty(), "{:?}", started.errors);
        let commands = started.host.commands();
        assert_eq!(commands.len(), 1);
        assert_eq!(
            commands[0].get_commands_item()["sourceInfo"]["source"],
            "cli"
        );
        assert_eq!(commands[0].get_commands_item()["source"], "extension");
        assert!(started.host.run_command("nope", "").is_none());
        let id = started.host.run_command("hello", "Ada").unwrap();
        let ExtensionEvent::UiRequest { event: ui } = started.next() else {
            panic!()
        };
        let record = ui.to_extension_value().unwrap();
        assert_eq!(record["method"], "notify");
        assert_eq!(record["message"], "Hello, Ada!");
        assert_eq!(record["type"], "extension_ui_request");
        assert_eq!(record["id"].as_str().unwrap().len(), 36);
        assert_eq!(
            started.next(),
            ExtensionEvent::CommandFinished {
                id,
                name: "hello".into(),
                error: None
            }
        );
        // Not subscribed: nothing is sent. Subscribed: the status notice follows.
        started.host.notify_event(&json!({"type": "agent_start"}));
        started
            .host
            .notify_event(&json!({"type": "agent_end", "messages": []}));
        let ExtensionEvent::UiRequest { event: ui } = started.next() else {
            panic!()
        };
        let record = ui.to_extension_value().unwrap();
        assert_eq!(record["method"], "setStatus");
        assert_eq!(record["statusText"], "runs: 1");
        let pids = started.pids[&0].clone();
        started.host.shutdown(Duration::from_secs(2));
        assert_gone(&pids);
    }

    #[test]
    fn python_extension_hooks_change_what_happens() {
        let started = start(&["full.py"]);
        assert!(started.errors.is_empty(), "{:?}", started.errors);
        let call = |command: &str| json!({"toolName": "bash", "toolCallId": "call-1", "input": {"command": command}});
        assert_eq!(
            started.hook(HookKind::ToolCall, call("rm -rf /")),
            HookOutcome::ToolCall(ToolCallOutcome::Block {
                reason: "full.py blocks rm -rf".into()
            })
        );
        assert_eq!(
            started.hook(HookKind::ToolCall, call("ls")),
            HookOutcome::ToolCall(ToolCallOutcome::Allow { args: None })
        );
        assert_eq!(
            started.hook(HookKind::ToolCall, call("REWRITE_ME")),
            HookOutcome::ToolCall(ToolCallOutcome::Allow {
                args: Some(json!({"command": "echo rewritten"}))
            })
        );
        // A dialog inside a hook: the confirm reaches the client, its answer decides.
        let id = started
            .host
            .start_hook(
                HookKind::ToolCall,
                call("CONFIRM make"),
                Duration::from_secs(5),
            )
            .unwrap();
        let ExtensionEvent::UiRequest { event: ui } = started.next() else {
            panic!()
        };
        let record = ui.to_extension_value().unwrap();
        assert_eq!(record["method"], "confirm");
        assert_eq!(record["message"], "CONFIRM make");
        let ui_id = record["id"].as_str().unwrap();
        started.host.deliver_ui_response(
            ui_id,
            UiResponse {
                confirmed: Some(true),
                ..UiResponse::default()
            },
        );
        assert_eq!(
            started.next(),
            ExtensionEvent::HookResult {
                id,
                outcome: HookOutcome::ToolCall(ToolCallOutcome::Allow { args: None })
            }
        );
        // A dialog that times out answers with the default (not confirmed).
        let id = started
            .host
            .start_hook(
                HookKind::ToolCall,
                call("CONFIRM FAST"),
                Duration::from_secs(5),
            )
            .unwrap();
        assert!(matches!(started.next(), ExtensionEvent::UiRequest { .. }));
        assert_eq!(
            started.next(),
            ExtensionEvent::HookResult {
                id,
                outcome: HookOutcome::ToolCall(ToolCallOutcome::Block {
                    reason: "not confirmed".into()
                })
            }
        );
        let HookOutcome::ToolResult(patch) = started.hook(
            HookKind::ToolResult,
            json!({"toolName":"read","toolCallId":"c","input":{},
                   "content":[{"type":"text","text":"the SECRET"}],"isError":false}),
        ) else {
            panic!()
        };
        assert_eq!(patch.details, Some(json!({"redacted": true})));
        assert_eq!(patch.content.map(|c| c.len()), Some(1));
        assert_eq!(
            started.hook(HookKind::Input, json!({"text":"?quick why","source":"rpc"})),
            HookOutcome::Input(InputOutcome::Transform {
                text: "Answer briefly: why".into(),
                images: None
            })
        );
        let id = started
            .host
            .start_hook(HookKind::Input, json!({"text":"ping","source":"rpc"}), WAIT)
            .unwrap();
        let ExtensionEvent::UiRequest { event: ui } = started.next() else {
            panic!()
        };
        let record = ui.to_extension_value().unwrap();
        assert_eq!(record["message"], "pong");
        assert_eq!(
            started.next(),
            ExtensionEvent::HookResult {
                id,
                outcome: HookOutcome::Input(InputOutcome::Handled)
            }
        );
        let HookOutcome::BeforeAgentStart(outcome) = started.hook(
            HookKind::BeforeAgentStart,
            json!({"prompt":"please inject","systemPrompt":"base"}),
        ) else {
            panic!()
        };
        assert_eq!(outcome.system_prompt.as_deref(), Some("base\nBe brief."));
        assert_eq!(outcome.messages[0].custom_type, "full-py");
        let pids = started.pids[&0].clone();
        started.host.shutdown(Duration::from_secs(2));
        assert_gone(&pids);
    }

    #[test]
    fn python_extension_tools_commands_actions_and_dialogs() {
        let started = start(&["full.py"]);
        let tools = started.host.tools();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].spec().name, "word_count");
        assert_eq!(tools[0].extension, ExtensionId(0));
        let flags = &started.host.registration(ExtensionId(0)).unwrap().flags;
        assert_eq!(flags[0].name, "shout");

        started.host.run_tool(
            ExtensionId(0),
            "call-7",
            "word_count",
            &json!({"text": "one two three"}),
        );
        let ExtensionEvent::ToolUpdate { call_id, partial } = started.next() else {
            panic!()
        };
        assert_eq!(call_id, "call-7");
        assert_eq!(partial, ToolOutput::text("counting..."));
        let ExtensionEvent::ToolFinished { call_id, output } = started.next() else {
            panic!()
        };
        assert_eq!(call_id, "call-7");
        assert_eq!(output.content, ToolOutput::text("3 words").content);
        assert_eq!(output.details, Some(json!({"words": 3})));

        let id = started.host.run_command("actions", "now").unwrap();
        let mut actions = Vec::new();
        loop {
            match started.next() {
                ExtensionEvent::Action { extension, action } => {
                    assert_eq!(extension, ExtensionId(0));
                    actions.push(action);
                }
                ExtensionEvent::CommandFinished {
                    id: done, error, ..
                } => {
                    assert_eq!(done, id);
                    assert_eq!(error, None);
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(actions.len(), 5, "{actions:?}");
        assert!(
            matches!(&actions[0], Action::SendUserMessage { content, .. } if content == "Hello from /actions now")
        );
        assert!(
            matches!(&actions[3], Action::SetSessionName { name } if name == "named by full.py")
        );

        let id = started.host.run_command("ui", "").unwrap();
        for (method, answer) in [
            ("select", json!("green")),
            ("input", json!("Ada")),
            ("editor", json!("edited")),
        ] {
            let ExtensionEvent::UiRequest { event: ui } = started.next() else {
                panic!()
            };
            let record = ui.to_extension_value().unwrap();
            assert_eq!(record["method"], method);
            started.host.deliver_ui_response(
                record["id"].as_str().unwrap(),
                UiResponse {
                    value: Some(answer),
                    ..UiResponse::default()
                },
            );
        }
        let mut notices = Vec::new();
        let error = loop {
            match started.next() {
                ExtensionEvent::UiRequest { event } => {
                    notices.push(event.to_extension_value().unwrap())
                }
                ExtensionEvent::CommandFinished {
                    id: done, error, ..
                } if done == id => break error,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(error, None);
        let methods: Vec<&str> = notices
            .iter()
            .map(|r| r["method"].as_str().unwrap())
            .collect();
        assert_eq!(
            methods,
            [
                "notify",
                "setStatus",
                "setWidget",
                "setTitle",
                "set_editor_text"
            ]
        );
        assert_eq!(
            notices[0]["message"],
            "picked green, name Ada, edited edited"
        );

        started.host.run_command("bye", "").unwrap();
        assert!(matches!(
            started.next(),
            ExtensionEvent::Action {
                action: Action::Shutdown,
                ..
            }
        ));
        started.host.shutdown(Duration::from_secs(2));
    }

    #[test]
    fn same_hook_in_two_extensions_chains_and_commands_get_suffixes() {
        let started = start(&["full.py", "full.py"]);
        let names: Vec<String> = started
            .host
            .commands()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            names,
            ["actions:1", "ui:1", "bye:1", "actions:2", "ui:2", "bye:2"]
        );
        // The second extension sees the first one's rewrite and keeps it.
        assert_eq!(
            started.hook(
                HookKind::ToolCall,
                json!({"toolName":"bash","toolCallId":"c","input":{"command":"REWRITE_ME"}})
            ),
            HookOutcome::ToolCall(ToolCallOutcome::Allow {
                args: Some(json!({"command": "echo rewritten"}))
            })
        );
        let HookOutcome::BeforeAgentStart(outcome) = started.hook(
            HookKind::BeforeAgentStart,
            json!({"prompt":"inject","systemPrompt":"base"}),
        ) else {
            panic!()
        };
        assert_eq!(outcome.messages.len(), 2);
        assert_eq!(
            outcome.system_prompt.as_deref(),
            Some("base\nBe brief.\nBe brief.")
        );
        started.host.shutdown(Duration::from_secs(2));
    }

    #[test]
    fn a_hung_extension_misses_its_deadline_and_is_stopped() {
        let started = start(&["hang.sh", "full.py"]);
        let hang_pids = started.pids[&0].clone();
        assert_eq!(hang_pids.len(), 2, "shell and its background sleep");
        let id = started
            .host
            .start_hook(
                HookKind::ToolCall,
                json!({"toolName":"bash","toolCallId":"c","input":{"command":"ls"}}),
                Duration::from_millis(300),
            )
            .unwrap();
        let ExtensionEvent::Error(error) = started.next() else {
            panic!()
        };
        assert_eq!(error.event, "tool_call");
        assert_eq!(error.error, "no answer to tool_call within 300 ms");
        assert!(error.extension_path.ends_with("hang.sh"));
        // Fail-safe: the call is blocked.
        assert_eq!(
            started.next(),
            ExtensionEvent::HookResult {
                id,
                outcome: HookOutcome::ToolCall(ToolCallOutcome::Block {
                    reason:
                        "Extension failed, blocking execution: no answer to tool_call within 300 ms"
                            .into()
                })
            }
        );
        assert_eq!(
            started.next(),
            ExtensionEvent::Exited {
                extension: ExtensionId(0)
            }
        );
        assert_gone(&hang_pids);
        assert!(!started.host.is_alive(ExtensionId(0)));
        // The others go on; the next hook no longer waits for the hung one.
        assert_eq!(
            started.hook(HookKind::Input, json!({"text":"hi","source":"rpc"})),
            HookOutcome::Input(InputOutcome::Continue)
        );
        let full_pids = started.pids[&1].clone();
        started.host.shutdown(Duration::from_secs(2));
        assert_gone(&full_pids);
    }

    #[test]
    fn a_crash_is_reported_and_pending_work_gets_defaults() {
        let started = start(&["crash.sh"]);
        let pids = started.pids[&0].clone();
        started
            .host
            .run_tool(ExtensionId(0), "call-1", "crash_tool", &json!({}));
        let ExtensionEvent::Error(error) = started.next() else {
            panic!()
        };
        assert_eq!(error.event, "exit");
        assert!(
            error.error.contains("exited unexpectedly"),
            "{}",
            error.error
        );
        assert!(error.error.contains('3'), "{}", error.error);
        let ExtensionEvent::ToolFinished { call_id, output } = started.next() else {
            panic!()
        };
        assert_eq!(call_id, "call-1");
        assert!(output.is_error);
        assert!(matches!(started.next(), ExtensionEvent::Exited { .. }));
        assert_gone(&pids);
        // Nobody handles tool_call any more; a tool of the dead extension fails at once.
        assert!(!started.host.handles_hook(HookKind::ToolCall));
        assert!(started.host.tools().is_empty());
        started
            .host
            .run_tool(ExtensionId(0), "call-2", "crash_tool", &json!({}));
        let ExtensionEvent::ToolFinished { output, .. } = started.next() else {
            panic!()
        };
        assert!(output.is_error);
        started.host.shutdown(Duration::ZERO);
    }

    #[test]
    fn a_crash_during_a_hook_blocks_the_tool_call() {
        let started = start(&["crash.sh"]);
        let id = started
            .host
            .start_hook(
                HookKind::ToolCall,
                json!({"toolName":"bash","input":{}}),
                WAIT,
            )
            .unwrap();
        let event = started.next_where(|e| matches!(e, ExtensionEvent::HookResult { .. }));
        let ExtensionEvent::HookResult { id: got, outcome } = event else {
            panic!()
        };
        assert_eq!(got, id);
        assert!(matches!(
            outcome,
            HookOutcome::ToolCall(ToolCallOutcome::Block { reason }) if reason.starts_with("Extension failed, blocking execution: exited unexpectedly")
        ));
    }

    #[test]
    fn junk_output_stops_the_extension() {
        let started = start(&["junk.sh"]);
        let pids = started.pids[&0].clone();
        assert!(started.host.handles_hook(HookKind::Input));
        started.host.notify_event(&json!({"type": "agent_start"}));
        let ExtensionEvent::Error(error) = started.next() else {
            panic!()
        };
        assert_eq!(error.event, "protocol");
        assert!(error.error.contains("malformed output"), "{}", error.error);
        assert!(error.error.contains("this is not json"), "{}", error.error);
        assert!(matches!(started.next(), ExtensionEvent::Exited { .. }));
        assert!(!started.host.handles_hook(HookKind::Input));
        assert!(
            started
                .host
                .start_hook(HookKind::Input, json!({"text": "x"}), WAIT)
                .is_none()
        );
        assert_gone(&pids);
    }

    #[test]
    fn approval_dialogs_answer_or_deny_on_timeout() {
        let (tx, events) = crossbeam_channel::unbounded();
        let (host, errors) = ExtensionHost::start(Vec::new(), &handshake(), None, tx);
        assert!(errors.is_empty());
        let (ui_id, ui) = host.ask_approval("Allow bash?", "rm x", Duration::from_millis(100));
        let record = ui.to_extension_value().unwrap();
        assert_eq!(record["id"], ui_id.as_str());
        assert_eq!(record["timeout"], 100);
        assert_eq!(
            events.recv_timeout(WAIT).unwrap(),
            ExtensionEvent::ApprovalAnswered {
                ui_id: ui_id.clone(),
                answer: ApprovalAnswer::Deny { timed_out: true }
            }
        );
        // A late answer is ignored.
        host.deliver_ui_response(&ui_id, UiResponse::default());
        let (ui_id, _) = host.ask_approval("Allow bash?", "make", WAIT);
        host.deliver_ui_response(
            &ui_id,
            UiResponse {
                value: Some(json!("Allow for this session")),
                ..UiResponse::default()
            },
        );
        assert_eq!(
            events.recv_timeout(WAIT).unwrap(),
            ExtensionEvent::ApprovalAnswered {
                ui_id,
                answer: ApprovalAnswer::AllowForSession
            }
        );
        assert!(events.try_recv().is_err());
        host.shutdown(Duration::ZERO);
    }

    #[test]
    fn shutdown_leaves_no_process_behind() {
        let started = start(&["hello.sh", "full.py", "hang.sh"]);
        let pids: Vec<i32> = started.pids.values().flatten().copied().collect();
        assert_eq!(pids.len(), 4);
        let begun = Instant::now();
        started.host.shutdown(Duration::from_millis(500));
        // hang.sh ignores its closed stdin: it is killed when the grace period ends.
        assert!(begun.elapsed() < Duration::from_secs(3));
        assert_gone(&pids);
    }

    #[test]
    fn dropping_the_host_kills_everything() {
        let started = start(&["hang.sh"]);
        let pids = started.pids[&0].clone();
        drop(started.host);
        assert_gone(&pids);
    }

    #[test]
    fn fresh_ids_look_like_uuids_and_differ() {
        let a = fresh_uuid();
        let b = fresh_uuid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    }
}
