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
//! Blocking calls and how they end: `start` waits for registrations at most `REGISTER_TIMEOUT`
//! (`TS_HOST_REGISTER_TIMEOUT` for the TypeScript host, unless it is deferred: then the router
//! takes its `register` line);
//! `shutdown` at most its grace period plus the kill; the router blocks in `select!` (woken by
//! control, extension lines, a deadline or the 500 ms child check) and in `send` to the agent's
//! channel (the agent always drains it). Readers end at EOF, which the group kill guarantees;
//! writers end when their queue's sender is dropped or the pipe breaks.
//!
//! Files: this one is the agent's handle (`ExtensionHost`) and the shared vocabulary; `startup`
//! spawns the children and runs the handshake; `router` is the router thread; `tests` drives the
//! fixture extensions.

mod router;
mod startup;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::{Map, Value};

use super::approval::ApprovalAnswer;
use super::hooks::HookOutcome;
use super::protocol::{self, Action, Handshake, HookKind, Registration, ToolDecl, UiResponse};
use super::{ExtensionOrigin, ExtensionSpec};
use crate::messages::ToolSpec;
use crate::rpc::events::Event;
use crate::tools::ToolOutput;
use router::*;
use startup::*;

/// How long `start` waits for every extension's `register` line.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);
/// The same for the TypeScript host (Node, the pi package and every TypeScript extension load
/// before it registers).
pub const TS_HOST_REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines queued for one extension's stdin before it counts as stuck.
pub const OUTBOUND_CAPACITY: usize = 1024;
/// The longest line accepted from an extension.
pub const MAX_LINE_BYTES: usize = 16 << 20;
/// v2 requests of one extension waiting for the agent; more are answered with an error.
pub const MAX_IN_FLIGHT: usize = 64;
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

/// Replaces the item named like `item`, or appends it (late registration keeps the order).
fn upsert_by_name<T>(items: &mut Vec<T>, item: T, name: impl Fn(&T) -> &String) {
    match items.iter().position(|i| name(i) == name(&item)) {
        Some(at) => items[at] = item,
        None => items.push(item),
    }
}

/// Removes the items named `wanted`; false when there was none.
fn remove_by_name<T>(items: &mut Vec<T>, wanted: &str, name: impl Fn(&T) -> &String) -> bool {
    let before = items.len();
    items.retain(|i| name(i) != wanted);
    items.len() != before
}

/// The extension tools a `--tools` / `--exclude-tools` filter leaves.
pub fn offered(
    mut tools: Vec<ExtensionTool>,
    filter: &crate::tools::selection::ToolFilter,
) -> Vec<ExtensionTool> {
    tools.retain(|t| filter.allows(&t.decl.name));
    tools
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
    HookResult { id: HookId, outcome: HookOutcome },
    /// A cumulative partial result of an extension tool.
    ToolUpdate {
        call_id: String,
        partial: ToolOutput,
    },
    ToolFinished {
        call_id: String,
        output: ToolOutput,
        /// (v2) The result asked to end the run (`result.terminate`).
        terminate: bool,
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
    UiRequest { event: Event },
    /// The answer (or timeout) of a dialog opened with `ask_approval`.
    ApprovalAnswered {
        ui_id: String,
        answer: ApprovalAnswer,
    },
    /// Write `error.event()` to stdout.
    Error(ExtensionError),
    /// The extension is gone for good (after a failure).
    Exited { extension: ExtensionId },
    /// A deferred extension (the TypeScript host) registered: pass it to `registered`, then
    /// offer its tools and commands.
    Registered {
        extension: ExtensionId,
        registration: Registration,
    },
    /// The TypeScript host crashed and is started again (once): pass it to `restarting`; its
    /// work was resolved with errors, and a `Registered` (or an error and `Exited`) follows.
    Restarting { extension: ExtensionId },
    /// (v2) A control request; when `id` is Some, answer it with
    /// `answer(extension, "action_result", id, …)`.
    Control {
        extension: ExtensionId,
        id: Option<String>,
        action: protocol::ControlAction,
    },
    /// (v2) The answer to `ask` (`Ok`: the extension's result object, unchecked).
    Answered {
        id: HookId,
        result: Result<Value, String>,
    },
    /// (v2) A query; answer it with `answer(extension, "query_result", id, …)`.
    Query {
        extension: ExtensionId,
        id: String,
        query: protocol::Query,
    },
}

/// (v2) Answers requests from any thread (a worker that finishes an extension's `exec`).
#[derive(Clone)]
pub struct Answerer {
    control: Sender<Control>,
}

impl Answerer {
    pub fn answer(
        &self,
        extension: ExtensionId,
        kind: &'static str,
        id: &str,
        answer: Result<Value, String>,
    ) {
        let _ = self.control.send(Control::Answer {
            extension,
            kind,
            id: id.to_string(),
            answer,
        });
    }
}

impl Answerer {
    /// (v2) Answers with a `result` already written as JSON text (a large answer built off the
    /// agent thread: the line is written here, not on the router thread).
    pub fn answer_json(&self, extension: ExtensionId, kind: &'static str, id: &str, result: &str) {
        let _ = self.control.send(Control::AnswerLine {
            extension,
            kind,
            line: protocol::answer_line_json(kind, id, result),
        });
    }

    /// (v2) A cumulative partial result of a running `execute_tool` (`action_update`); dropped
    /// when the extension does not keep up with its input.
    pub fn progress(&self, extension: ExtensionId, id: &str, partial: Value) {
        let _ = self.control.send(Control::Progress {
            extension,
            id: id.to_string(),
            partial,
        });
    }
}

/// (v2) Asks hooks and sends events from a thread that is not the agent (a provider thread):
/// outcomes come back on a channel of the caller's own, not as `HookResult`s.
#[derive(Clone)]
pub struct HookChannel {
    control: Sender<Control>,
    /// Shared with the host: hook ids stay unique.
    next_id: Arc<AtomicU64>,
}

impl std::fmt::Debug for HookChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookChannel")
    }
}

impl HookChannel {
    /// Starts the hook chain; its one outcome arrives on the returned receiver (disconnected
    /// without an outcome only when the host is gone).
    pub fn ask(
        &self,
        kind: HookKind,
        payload: Value,
        deadline: Duration,
    ) -> crossbeam_channel::Receiver<HookOutcome> {
        let (reply, outcome) = crossbeam_channel::bounded(1);
        let id = HookId(self.next_id.fetch_add(1, Ordering::SeqCst));
        let _ = self.control.send(Control::StartHook {
            id,
            kind,
            payload,
            deadline,
            reply: Some(reply),
        });
        outcome
    }

    /// (v2) Asks `extension` a `kind` request (`oauth_refresh`), as `ExtensionHost::ask` does;
    /// its one outcome (the answer, an error answer, or an error when `deadline` passes or the
    /// extension fails first) arrives on the returned receiver, which disconnects without one
    /// only when the host is gone.
    pub fn ask_extension(
        &self,
        kind: &'static str,
        extension: ExtensionId,
        request: Value,
        deadline: Duration,
    ) -> crossbeam_channel::Receiver<Result<Value, String>> {
        let (reply, outcome) = crossbeam_channel::bounded(1);
        let id = HookId(self.next_id.fetch_add(1, Ordering::SeqCst));
        let _ = self.control.send(Control::Ask {
            kind,
            id,
            extension,
            request,
            deadline,
            reply: Some(reply),
        });
        outcome
    }

    /// Starts a response `extension` streams (`request`: the `stream_request` fields); returns
    /// the stream's wire id and where its events arrive (at most `capacity` unread; the channel
    /// disconnects after `done`/`error`, when the extension fails, or when the reader is slow).
    pub fn stream(
        &self,
        extension: ExtensionId,
        request: &Value,
        capacity: usize,
    ) -> (String, crossbeam_channel::Receiver<Value>) {
        let wire = format!("s{}", self.next_id.fetch_add(1, Ordering::SeqCst));
        let (reply, events) = crossbeam_channel::bounded(capacity);
        let _ = self.control.send(Control::StartStream {
            extension,
            line: protocol::stream_request_line(&wire, request),
            wire: wire.clone(),
            reply,
        });
        (wire, events)
    }

    /// The reader of a stream is gone (abort): the extension is told `cancel_stream`.
    pub fn cancel_stream(&self, wire: &str) {
        let _ = self.control.send(Control::CancelStream {
            wire: wire.to_string(),
        });
    }

    /// An event for the protocol-2 extensions subscribed to its `type`.
    pub fn event_v2(&self, event: Value) {
        let _ = self.control.send(Control::Event {
            event,
            min_protocol: 2,
        });
    }
}

/// The agent's handle on the running extensions. Dropping it kills them all at once.
pub struct ExtensionHost {
    control: Sender<Control>,
    extensions: Vec<Loaded>,
    alive: Arc<Vec<AtomicBool>>,
    next_id: Arc<AtomicU64>,
    /// The command line's extension flags, as given (`hello.flags`).
    flag_values: Map<String, Value>,
    router: Option<JoinHandle<()>>,
}

struct Loaded {
    path: String,
    registration: Registration,
    /// pi's `sourceInfo` of the extension's commands and tools.
    source_info: Value,
    /// Started, its `register` line not in yet (the TypeScript host loading, or restarting).
    registering: bool,
}

impl ExtensionHost {
    /// Starts every extension, sends each `hello`, and waits (at most `REGISTER_TIMEOUT`) for
    /// their `register` lines. Extensions that cannot start, refuse the handshake or are JS/TS
    /// modules are left out and described in the returned errors (event `"load"`); the others
    /// run. `events` receives every `ExtensionEvent` from now on. With `defer_ts_host`, the
    /// TypeScript host is not waited for: it registers later (one `Registered` event, within
    /// `TS_HOST_REGISTER_TIMEOUT`, or a `load` error and `Exited`), and `is_registering` says
    /// so meanwhile.
    pub fn start(
        specs: Vec<ExtensionSpec>,
        handshake: &Handshake,
        sandbox: Option<&crate::sandbox::Policy>,
        events: Sender<ExtensionEvent>,
        defer_ts_host: bool,
    ) -> (ExtensionHost, Vec<ExtensionError>) {
        let (from_tx, from_rx) = crossbeam_channel::bounded::<FromExtension>(256);
        let mut restarts: HashMap<usize, Restart> = HashMap::new();
        let mut errors = Vec::new();
        let mut slots: Vec<Slot> = Vec::new();
        for (index, spec) in specs.iter().enumerate() {
            let path = spec.path.to_string_lossy().into_owned();
            let load_error = |error: String| ExtensionError {
                extension_path: path.clone(),
                event: "load".into(),
                error,
            };
            let process = match check_loadable(spec) {
                Err(error) => Err(error),
                Ok(()) => {
                    spawn_extension((index, 0), spec, &handshake.cwd, sandbox, from_tx.clone())
                }
            };
            let process = match process {
                Ok(process) => {
                    let hello = protocol::hello_line(handshake, &path);
                    let _ = process.writer.try_send(hello.clone());
                    if let ExtensionOrigin::TsHost(_) = spec.origin {
                        restarts.insert(
                            index,
                            Restart {
                                spec: spec.clone(),
                                cwd: handshake.cwd.clone(),
                                sandbox: sandbox.cloned(),
                                hello,
                                to_router: from_tx.clone(),
                            },
                        );
                    }
                    Some(process)
                }
                Err(error) => {
                    errors.push(load_error(error));
                    None
                }
            };
            let deferred = defer_ts_host && process.is_some() && restarts.contains_key(&index);
            slots.push(Slot {
                path,
                spec: spec.clone(),
                process,
                registration: None,
                deferred,
            });
        }
        drop(from_tx);
        let started = Instant::now();
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
                source_info: slot.spec.source_info(),
                registering: slot.deferred && slot.process.is_some(),
            })
            .collect();
        let (control_tx, control_rx) = crossbeam_channel::unbounded();
        let router_state = Router {
            extensions: slots
                .into_iter()
                .enumerate()
                .map(|(index, slot)| RouterExtension {
                    failed: slot.process.is_none(),
                    in_flight: 0,
                    registering: (slot.deferred && slot.process.is_some())
                        .then(|| started + register_timeout(&slot.spec)),
                    restart: restarts.remove(&index).map(Box::new),
                    restarted: false,
                    generation: 0,
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
            streams: HashMap::new(),
            routes: HashMap::new(),
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
            next_id: Arc::new(AtomicU64::new(1)),
            flag_values: handshake.flag_values.clone(),
            router,
        };
        (host, errors)
    }

    /// The live extensions' slash commands, in load order (pi's `get_commands` lists them
    /// first); names registered by several get `:1`, `:2`… in load order (pi's rule).
    pub fn commands(&self) -> Vec<ExtensionCommand> {
        let mut all = Vec::new();
        for (index, loaded) in self.live() {
            for command in &loaded.registration.commands {
                all.push(ExtensionCommand {
                    name: command.name.clone(),
                    registered_name: command.name.clone(),
                    description: command.description.clone(),
                    extension: ExtensionId(index),
                    source_info: loaded.source_info.clone(),
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

    /// (v2) Adds or replaces one of an extension's tools (late registration).
    pub fn register_tool(&mut self, extension: ExtensionId, decl: ToolDecl) {
        if let Some(loaded) = self.extensions.get_mut(extension.0) {
            upsert_by_name(&mut loaded.registration.tools, decl, |t| &t.name);
        }
    }

    /// (v2) Removes one of an extension's tools; false when it had none of that name.
    pub fn unregister_tool(&mut self, extension: ExtensionId, name: &str) -> bool {
        self.extensions
            .get_mut(extension.0)
            .is_some_and(|loaded| remove_by_name(&mut loaded.registration.tools, name, |t| &t.name))
    }

    /// (v2) Adds or replaces one of an extension's commands.
    pub fn register_command(&mut self, extension: ExtensionId, decl: protocol::CommandDecl) {
        if let Some(loaded) = self.extensions.get_mut(extension.0) {
            upsert_by_name(&mut loaded.registration.commands, decl, |c| &c.name);
        }
    }

    /// (v2) Removes one of an extension's commands; false when it had none of that name.
    pub fn unregister_command(&mut self, extension: ExtensionId, name: &str) -> bool {
        self.extensions.get_mut(extension.0).is_some_and(|loaded| {
            remove_by_name(&mut loaded.registration.commands, name, |c| &c.name)
        })
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

    /// The protocol version an extension registered with (0 when it is unknown).
    pub fn protocol(&self, extension: ExtensionId) -> u64 {
        self.extensions
            .get(extension.0)
            .map_or(0, |l| l.registration.protocol)
    }

    /// pi's `sourceInfo` for an extension's tools and commands.
    pub fn source_info(&self, extension: ExtensionId) -> Value {
        self.extensions
            .get(extension.0)
            .map_or(Value::Null, |l| l.source_info.clone())
    }

    /// The command-line flags the live extensions registered, in load order.
    pub fn flags(&self) -> Vec<protocol::FlagDecl> {
        self.live()
            .flat_map(|(_, loaded)| loaded.registration.flags.iter().cloned())
            .collect()
    }

    /// (v2) The providers the live extensions registered in their `register` line, in load
    /// order.
    pub fn providers(&self) -> Vec<(ExtensionId, protocol::ProviderDecl)> {
        self.each_registered(|registration| &registration.providers)
    }

    /// (v2) The virtual models of the `register` lines, in load order.
    pub fn virtual_models(&self) -> Vec<(ExtensionId, protocol::VirtualModelDecl)> {
        self.each_registered(|registration| &registration.virtual_models)
    }

    /// One list of the live extensions' `register` lines, each item with its extension, in load
    /// order.
    fn each_registered<T: Clone>(
        &self,
        list: impl Fn(&protocol::Registration) -> &Vec<T>,
    ) -> Vec<(ExtensionId, T)> {
        self.live()
            .flat_map(|(index, loaded)| {
                list(&loaded.registration)
                    .iter()
                    .map(move |item| (ExtensionId(index), item.clone()))
            })
            .collect()
    }

    /// The registrations, by `ExtensionId` (empty for extensions that failed to load).
    #[cfg(test)]
    pub fn registration(&self, extension: ExtensionId) -> Option<&Registration> {
        self.extensions.get(extension.0).map(|l| &l.registration)
    }

    pub fn extension_path(&self, extension: ExtensionId) -> Option<&str> {
        self.extensions.get(extension.0).map(|l| l.path.as_str())
    }

    pub fn is_alive(&self, extension: ExtensionId) -> bool {
        self.alive
            .get(extension.0)
            .is_some_and(|a| a.load(Ordering::SeqCst))
    }

    /// Whether an extension started and has not registered yet (the TypeScript host loading):
    /// what needs its registrations waits (`Agent`'s start-up wait).
    pub fn is_registering(&self) -> bool {
        self.extensions.iter().any(|l| l.registering)
    }

    /// A `Registered` event: the extension's registrations are in place.
    pub fn registered(&mut self, extension: ExtensionId, registration: Registration) {
        if let Some(loaded) = self.extensions.get_mut(extension.0) {
            loaded.registration = registration;
            loaded.registering = false;
        }
    }

    /// A `Restarting` event: its registrations are gone until it registers again.
    pub fn restarting(&mut self, extension: ExtensionId) {
        if let Some(loaded) = self.extensions.get_mut(extension.0) {
            loaded.registration = Registration::default();
            loaded.registering = true;
        }
    }

    /// An `Exited` event: nothing more to wait for from it.
    pub fn exited(&mut self, extension: ExtensionId) {
        if let Some(loaded) = self.extensions.get_mut(extension.0) {
            loaded.registering = false;
        }
    }

    /// An event for one extension only, when it subscribed to its `type` (`session_start` to
    /// an extension that registered late).
    pub fn notify_one(&self, extension: ExtensionId, event: &Value) {
        let wanted = self.is_alive(extension)
            && self.extensions.get(extension.0).is_some_and(|l| {
                event
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| l.registration.wants_event(t))
            });
        if wanted {
            let _ = self.control.send(Control::EventTo {
                extension,
                event: event.clone(),
            });
        }
    }

    /// Whether any live extension handles the hook (so the agent can skip the round trip).
    pub fn handles_hook(&self, kind: HookKind) -> bool {
        self.live()
            .any(|(_, loaded)| loaded.registration.handles(kind))
    }

    /// (v2) How many live extensions handle the hook.
    pub fn hook_handlers(&self, kind: HookKind) -> usize {
        self.live()
            .filter(|(_, loaded)| loaded.registration.handles(kind))
            .count()
    }

    /// (v2) Whether a live protocol-2 extension subscribed to events of this `type`.
    pub fn wants_event_v2(&self, event_type: &str) -> bool {
        self.live().any(|(_, loaded)| {
            loaded.registration.protocol >= 2 && loaded.registration.wants_event(event_type)
        })
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
            let _ = self.control.send(Control::Event {
                event: event.clone(),
                min_protocol: 0,
            });
        }
    }

    /// (v2) An event only protocol-2 extensions get (model and thinking-level selection, the
    /// session_shutdown / session_start pair around a session change).
    pub fn notify_event_v2(&self, event: &Value) {
        let Some(event_type) = event.get("type").and_then(Value::as_str) else {
            return;
        };
        if self.live().any(|(_, loaded)| {
            loaded.registration.protocol >= 2 && loaded.registration.wants_event(event_type)
        }) {
            let _ = self.control.send(Control::Event {
                event: event.clone(),
                min_protocol: 2,
            });
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
            reply: None,
        });
        Some(id)
    }

    /// (v2) Asks `extension` a `kind` request (`route`: the route of one request made with its
    /// virtual model; `refresh_models`: its provider's models). Exactly one `Answered` with the
    /// returned id arrives: the answer, an error answer, or an error when `deadline` passes or
    /// the extension fails first.
    pub fn ask(
        &self,
        kind: &'static str,
        extension: ExtensionId,
        request: Value,
        deadline: Duration,
    ) -> HookId {
        let id = HookId(self.next_id.fetch_add(1, Ordering::SeqCst));
        let _ = self.control.send(Control::Ask {
            kind,
            id,
            extension,
            request,
            deadline,
            reply: None,
        });
        id
    }

    /// (v2) A handle for another thread (a provider thread) to ask hooks and send v2 events.
    pub fn hook_channel(&self) -> HookChannel {
        HookChannel {
            control: self.control.clone(),
            next_id: self.next_id.clone(),
        }
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
        let command = self.commands().into_iter().find(|c| c.name == name)?;
        let id = CommandRunId(self.next_id.fetch_add(1, Ordering::SeqCst));
        let _ = self.control.send(Control::RunCommand {
            id,
            extension: command.extension,
            name: command.registered_name.clone(),
            args: args.to_string(),
        });
        Some(id)
    }

    /// (v2) Answers a request of `extension` (`kind`: `query_result` / `action_result`).
    pub fn answer(
        &self,
        extension: ExtensionId,
        kind: &'static str,
        id: &str,
        answer: Result<Value, String>,
    ) {
        self.answerer().answer(extension, kind, id, answer);
    }

    /// (v2) A handle that answers requests from another thread.
    pub fn answerer(&self) -> Answerer {
        Answerer {
            control: self.control.clone(),
        }
    }

    /// The values of an extension's flags: those given on the command line (typed as registered:
    /// a boolean flag is true), else the registered defaults.
    pub fn flag_values(&self, extension: ExtensionId) -> Map<String, Value> {
        let mut values = Map::new();
        let Some(loaded) = self.extensions.get(extension.0) else {
            return values;
        };
        for flag in &loaded.registration.flags {
            let given = self.flag_values.get(&flag.name);
            let value = match (given, flag.kind.as_str()) {
                (Some(_), "boolean") => Some(Value::Bool(true)),
                (Some(value), _) => Some(value.clone()),
                (None, _) => flag.default.clone(),
            };
            if let Some(value) = value {
                values.insert(flag.name.clone(), value);
            }
        }
        values
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
        let ui_id = crate::ids::uuid_v4();
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
        self.stop(grace, protocol::session_shutdown_event("quit"));
    }

    /// (v2 `reload`, session changes) Ends every extension as `shutdown` does, with this
    /// `session_shutdown` event (reason `reload`, `new`, `resume` or `fork`); the caller starts
    /// the new ones.
    pub fn shutdown_for_restart(mut self, grace: Duration, event: Value) {
        self.stop(grace, event);
    }

    fn stop(&mut self, grace: Duration, event: Value) {
        let Some(router) = self.router.take() else {
            return;
        };
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        if self
            .control
            .send(Control::Shutdown {
                grace,
                event,
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
        self.stop(Duration::ZERO, protocol::session_shutdown_event("quit"));
    }
}

#[cfg(test)]
mod tests;
