//! One codemode script in its own QuickJS runtime on its own thread ("codemode-<callId>").
//!
//! Input: a `ScriptSpec` (the script, the callable tools, the host globals, the store snapshot,
//! the deadline). Output: `FromScript` events given to the caller's sink (on the worker thread):
//! output items and calls as the script makes them, then exactly one `Done`. The host answers calls with `Script::reply`. Nothing of
//! QuickJS exists until `start` is called, and it is gone when the thread ends.
//!
//! Limits: 256 MB of heap (QuickJS throws `InternalError: out of memory` inside the script), a
//! bounded stack, the output limits of the prelude, the deadline, and abort. Dropping the
//! `Script` raises its cancel flag and closes its reply channel: QuickJS's interrupt handler
//! stops running JavaScript at its next poll, and a worker waiting for a reply wakes up. A
//! script can neither block the host (every wait here is on the channel, bounded by the deadline
//! and the cancel flag) nor take the process down (the worker catches panics).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rquickjs::function::Rest;
use rquickjs::{Context, Ctx, Function, Object, Runtime, Value};

const PRELUDE: &str = include_str!("prelude.js");

/// The VM's heap (pi 1.6.0's limit).
pub const MEMORY_LIMIT_BYTES: usize = 256 * 1024 * 1024;
/// The JavaScript stack; the worker thread's own stack is larger, for the Rust frames around it.
const MAX_STACK_BYTES: usize = 2 * 1024 * 1024;
const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;
/// Promise jobs between two checks of the cancel flag and the deadline.
const JOBS_PER_CHECK: u32 = 64;

/// A tool as the script sees it: `tools[js_name]` and `tools[name]`, `ALL_TOOLS` lists
/// `{ name: js_name, description }`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScriptTool {
    pub name: String,
    #[serde(rename = "jsName")]
    pub js_name: String,
    pub description: String,
}

pub struct ScriptSpec {
    /// The script body (run as the body of an async function).
    pub code: String,
    pub tools: Vec<ScriptTool>,
    /// Host globals such as `searchTools` or `models.getModelsOfType`; their arguments arrive
    /// as a JSON array.
    pub globals: Vec<String>,
    /// `load()`'s values: key → JSON text.
    pub store: BTreeMap<String, String>,
    pub deadline: Option<Instant>,
    /// The deadline as the script set it, for the timeout message.
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum OutputItem {
    Text(String),
    Console(String),
    Image { data: String, mime_type: String },
}

#[derive(Clone, Debug, PartialEq)]
pub enum CallTarget {
    Tool,
    Global,
}

#[derive(Clone, Debug, PartialEq)]
pub enum FromScript {
    Output(OutputItem),
    Call {
        id: u64,
        target: CallTarget,
        name: String,
        /// The argument as JSON (globals: a JSON array of the arguments); None for undefined.
        args: Option<String>,
    },
    Done(Outcome),
}

/// How a script ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// `value`: the returned value as JSON (None: undefined); `writes`: `store()` writes,
    /// key → JSON text (None: deleted).
    Completed {
        value: Option<String>,
        writes: Vec<(String, Option<String>)>,
    },
    /// The script threw (or failed a limit of the prelude).
    Failed {
        name: Option<String>,
        message: String,
        stack: Option<String>,
    },
    TimedOut(String),
    Aborted(String),
    /// The sandbox itself failed (QuickJS could not start, the bridge was broken).
    Sandbox(String),
    /// No worker became free in time (or the wait was aborted): the script did not run.
    NotStarted(String),
}

/// Workers alive at once across the process (pi 1.6.0: 2; `PI_CODEMODE_MAX_WORKERS`, a
/// positive integer, read per script).
const DEFAULT_MAX_WORKERS: usize = 2;
/// How long a script waits for a free worker.
const WORKER_WAIT: Duration = Duration::from_secs(60);

fn max_workers() -> usize {
    std::env::var("PI_CODEMODE_MAX_WORKERS")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|n| n.fract() == 0.0 && *n > 0.0 && *n < 1e9)
        .map_or(DEFAULT_MAX_WORKERS, |n| n as usize)
}

/// The worker slots: how many are held, and the scripts waiting, in arrival order.
struct Slots {
    active: usize,
    waiting: std::collections::VecDeque<u64>,
    next_ticket: u64,
}

static SLOTS: std::sync::Mutex<Slots> = std::sync::Mutex::new(Slots {
    active: 0,
    waiting: std::collections::VecDeque::new(),
    next_ticket: 0,
});
static SLOT_FREED: std::sync::Condvar = std::sync::Condvar::new();

/// A held worker slot, given back when the worker ends.
struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        slots.active = slots.active.saturating_sub(1);
        SLOT_FREED.notify_all();
    }
}

/// Takes a place in the line for a worker slot (in the caller's order, before its thread runs).
fn queue_for_slot() -> u64 {
    let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    let ticket = slots.next_ticket;
    slots.next_ticket += 1;
    slots.waiting.push_back(ticket);
    ticket
}

/// Leaves the line without a slot.
fn leave_queue(ticket: u64) {
    let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    slots.waiting.retain(|t| *t != ticket);
    SLOT_FREED.notify_all();
}

/// Waits, with `ticket`, in arrival order, for a free worker slot: until `started` + 60 s or the script's
/// deadline, whichever is first, or the cancel flag. The error is the result's (pi 1.6.0's).
fn reserve_slot(
    ticket: u64,
    cancel: &AtomicBool,
    started: Instant,
    spec: &ScriptSpec,
) -> Result<Slot, String> {
    let wait_until = match spec.deadline {
        Some(deadline) => deadline.min(started + WORKER_WAIT),
        None => started + WORKER_WAIT,
    };
    let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if slots.waiting.front() == Some(&ticket) && slots.active < max_workers() {
            slots.waiting.pop_front();
            slots.active += 1;
            // The next in line may fit too.
            SLOT_FREED.notify_all();
            return Ok(Slot);
        }
        let now = Instant::now();
        let failure = if cancel.load(Ordering::SeqCst) {
            Some("Script aborted: Execution aborted".to_string())
        } else if now >= wait_until {
            Some(match spec.timeout_ms {
                Some(ms) if Duration::from_millis(ms) <= WORKER_WAIT => format!(
                    "Script timed out: Execution timed out after {ms} ms while waiting for a free codemode worker"
                ),
                _ => format!(
                    "No codemode worker became free within {} seconds. All {} workers, shared by every session in this process, are held by other scripts. Retry after they finish.",
                    WORKER_WAIT.as_secs(),
                    max_workers()
                ),
            })
        } else {
            None
        };
        if let Some(failure) = failure {
            drop(slots);
            leave_queue(ticket);
            return Err(failure);
        }
        // Short waits: the cancel flag has no way to wake this one.
        let wait = (wait_until - now).min(Duration::from_millis(50));
        slots = SLOT_FREED
            .wait_timeout(slots, wait)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Where a script's events go; called on the script's worker thread.
pub type Sink = Box<dyn Fn(FromScript) + Send>;

/// A running script. Dropping it stops the script.
pub struct Script {
    replies: Option<Sender<Reply>>,
    cancel: Arc<AtomicBool>,
}

struct Reply {
    id: u64,
    ok: bool,
    /// ok: the value as JSON (None: undefined); else the error message.
    payload: Option<String>,
}

impl Script {
    /// Answers call `id`: `Ok(json)` resolves it (None: undefined), `Err(text)` rejects it with
    /// an `Error` carrying the text.
    pub fn reply(&self, id: u64, result: Result<Option<String>, String>) {
        let reply = match result {
            Ok(payload) => Reply {
                id,
                ok: true,
                payload,
            },
            Err(message) => Reply {
                id,
                ok: false,
                payload: Some(message),
            },
        };
        if let Some(replies) = &self.replies {
            let _ = replies.send(reply);
        }
    }

    /// Stops the script now; its `Done` says `Aborted(reason)`.
    pub fn abort(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
        self.replies = None;
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Starts the script on its own thread, once a worker slot is free (at most
/// `PI_CODEMODE_MAX_WORKERS`, default 2, alive in the process; a script waits up to 60 s or
/// its deadline, in arrival order).
pub fn start(label: &str, spec: ScriptSpec, sink: Sink) -> Result<Script, String> {
    let started = Instant::now();
    let ticket = queue_for_slot();
    let (replies, reply_rx) = crossbeam_channel::unbounded();
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("codemode-{label}"))
        .stack_size(THREAD_STACK_BYTES)
        .spawn(move || {
            let sink: Rc<Sink> = Rc::new(sink);
            let slot = match reserve_slot(ticket, &flag, started, &spec) {
                Ok(slot) => slot,
                Err(error) => {
                    sink(FromScript::Done(Outcome::NotStarted(error)));
                    return;
                }
            };
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run(spec, &sink, &reply_rx, &flag)
            }));
            drop(slot);
            let outcome =
                outcome.unwrap_or_else(|_| Outcome::Sandbox("the script's worker failed".into()));
            sink(FromScript::Done(outcome));
        });
    if let Err(e) = spawned {
        leave_queue(ticket);
        return Err(format!("could not start the script's worker: {e}"));
    }
    Ok(Script {
        replies: Some(replies),
        cancel,
    })
}

/// Why the script must stop, if it must: the deadline or abort.
#[derive(Clone)]
struct Stop {
    cancel: Arc<AtomicBool>,
    deadline: Option<Instant>,
    timeout_ms: Option<u64>,
}

impl Stop {
    fn reason(&self) -> Option<Outcome> {
        if self.cancel.load(Ordering::SeqCst) {
            return Some(Outcome::Aborted("Execution aborted".into()));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            let ms = self.timeout_ms.unwrap_or_default();
            return Some(Outcome::TimedOut(format!(
                "Execution timed out after {ms} ms"
            )));
        }
        None
    }
}

fn run(
    spec: ScriptSpec,
    events: &Rc<Sink>,
    replies: &Receiver<Reply>,
    cancel: &Arc<AtomicBool>,
) -> Outcome {
    let stop = Stop {
        cancel: cancel.clone(),
        deadline: spec.deadline,
        timeout_ms: spec.timeout_ms,
    };
    let runtime = match Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return Outcome::Sandbox(format!("QuickJS could not start: {e}")),
    };
    runtime.set_memory_limit(MEMORY_LIMIT_BYTES);
    runtime.set_max_stack_size(MAX_STACK_BYTES);
    let poll = stop.clone();
    runtime.set_interrupt_handler(Some(Box::new(move || poll.reason().is_some())));
    let context = match Context::full(&runtime) {
        Ok(context) => context,
        Err(e) => return Outcome::Sandbox(format!("QuickJS could not start: {e}")),
    };
    let done: Rc<Cell<Option<Outcome>>> = Rc::new(Cell::new(None));
    let outcome = context.with(|ctx| {
        let result = drive(&ctx, &spec, events, replies, &stop, &done);
        match result {
            Ok(()) => done.take().unwrap_or_else(|| {
                stop.reason()
                    .unwrap_or_else(|| Outcome::Sandbox("the script ended without a result".into()))
            }),
            Err(problem) => done
                .take()
                .or_else(|| stop.reason())
                .unwrap_or(Outcome::Sandbox(problem)),
        }
    });
    drop(context);
    drop(runtime);
    outcome
}

/// Evaluates the prelude and the script, then answers the script's calls until it is done.
fn drive<'js>(
    ctx: &Ctx<'js>,
    spec: &ScriptSpec,
    events: &Rc<Sink>,
    replies: &Receiver<Reply>,
    stop: &Stop,
    done: &Rc<Cell<Option<Outcome>>>,
) -> Result<(), String> {
    let bridge = {
        let events = events.clone();
        let done = done.clone();
        Function::new(ctx.clone(), move |args: Rest<Value<'js>>| {
            bridge_message(&args.0, &events, &done);
        })
        .map_err(|e| format!("bridge: {e}"))?
    };
    let factory: Function = ctx
        .eval(PRELUDE)
        .map_err(|e| describe_error(ctx, e, "the prelude"))?;
    let tools_json = serde_json::to_string(&spec.tools).unwrap_or_else(|_| "[]".into());
    let globals_json = serde_json::to_string(&spec.globals).unwrap_or_else(|_| "[]".into());
    let store_json = serde_json::to_string(&spec.store).unwrap_or_else(|_| "{}".into());
    let api: Object = factory
        .call((bridge, tools_json, globals_json, store_json))
        .map_err(|e| describe_error(ctx, e, "the prelude"))?;
    let settle: Function = api.get("settle").map_err(|e| e.to_string())?;
    let run: Function = api.get("run").map_err(|e| e.to_string())?;
    let stalled: Function = api.get("stalled").map_err(|e| e.to_string())?;

    let source = format!("(async (tools, console) => {{{}\n}})", spec.code);
    let body: Function = match ctx.eval(source) {
        Ok(body) => body,
        Err(rquickjs::Error::Exception) => {
            let thrown = ctx.catch();
            done.set(Some(
                stop.reason()
                    .unwrap_or_else(|| failed_from_value(ctx, thrown)),
            ));
            return Ok(());
        }
        Err(e) => return Err(e.to_string()),
    };
    if let Err(e) = run.call::<_, ()>((body,)) {
        return Err(describe_error(ctx, e, "the script"));
    }
    loop {
        drain_jobs(ctx, stop)?;
        if let Some(outcome) = done.take() {
            done.set(Some(outcome));
            return Ok(());
        }
        let is_stalled: bool = stalled.call(()).map_err(|e| e.to_string())?;
        if is_stalled {
            return Ok(());
        }
        let reply = wait_for_reply(replies, stop)?;
        let payload = match reply.payload {
            Some(text) => Value::from_string(
                rquickjs::String::from_str(ctx.clone(), &text).map_err(|e| e.to_string())?,
            ),
            None => Value::new_undefined(ctx.clone()),
        };
        settle
            .call::<_, ()>((reply.id.to_string(), reply.ok, payload))
            .map_err(|e| describe_error(ctx, e, "a result"))?;
    }
}

/// Runs queued promise jobs until none is left, checking for a stop now and then.
fn drain_jobs(ctx: &Ctx<'_>, stop: &Stop) -> Result<(), String> {
    let mut count = 0u32;
    while ctx.execute_pending_job() {
        count += 1;
        if count.is_multiple_of(JOBS_PER_CHECK) && stop.reason().is_some() {
            return Err("stopped".into());
        }
    }
    if stop.reason().is_some() {
        return Err("stopped".into());
    }
    Ok(())
}

/// Blocks until the host answers a call, the deadline passes or the script is aborted.
fn wait_for_reply(replies: &Receiver<Reply>, stop: &Stop) -> Result<Reply, String> {
    loop {
        if stop.reason().is_some() {
            return Err("stopped".into());
        }
        let wait = stop
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(3600))
            .min(Duration::from_millis(250));
        match replies.recv_timeout(wait) {
            Ok(reply) => return Ok(reply),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => {
                stop.cancel.store(true, Ordering::SeqCst);
                return Err("stopped".into());
            }
        }
    }
}

fn string_of(value: Option<&Value<'_>>) -> Option<String> {
    value?.as_string()?.to_string().ok()
}

/// One message from the prelude. Malformed messages end the script as a sandbox failure.
fn bridge_message(args: &[Value<'_>], events: &Rc<Sink>, done: &Rc<Cell<Option<Outcome>>>) {
    let text = |i: usize| string_of(args.get(i));
    let broken = |what: &str| {
        Outcome::Sandbox(format!(
            "Sandbox bridge broken: {what}. The script may have modified built-ins such as a prototype's toJSON."
        ))
    };
    let kind = text(0).unwrap_or_default();
    match kind.as_str() {
        "call" | "global" => {
            let (Some(id), Some(name)) = (text(1).and_then(|id| id.parse().ok()), text(2)) else {
                done.set(Some(broken("a malformed call")));
                return;
            };
            let target = if kind == "call" {
                CallTarget::Tool
            } else {
                CallTarget::Global
            };
            events(FromScript::Call {
                id,
                target,
                name,
                args: text(3),
            });
        }
        "output" => {
            let item = match (text(1).as_deref(), text(2), text(3)) {
                (Some("text"), Some(t), _) => OutputItem::Text(t),
                (Some("console"), Some(t), _) => OutputItem::Console(t),
                (Some("image"), Some(data), Some(mime_type)) => {
                    OutputItem::Image { data, mime_type }
                }
                _ => {
                    done.set(Some(broken("a malformed output item")));
                    return;
                }
            };
            events(FromScript::Output(item));
        }
        "done" => {
            let previous = done.take();
            if previous.is_some() {
                done.set(previous);
                return;
            }
            let outcome = if text(1).as_deref() == Some("ok") {
                match parse_writes(text(3).as_deref()) {
                    Some(writes) => Outcome::Completed {
                        value: text(2),
                        writes,
                    },
                    None => broken("store writes are malformed"),
                }
            } else {
                parse_failure(text(2).as_deref())
                    .unwrap_or_else(|| broken("script error is malformed"))
            };
            done.set(Some(outcome));
        }
        _ => done.set(Some(broken("unknown message from the worker"))),
    }
}

fn parse_writes(json: Option<&str>) -> Option<Vec<(String, Option<String>)>> {
    let entries: Vec<Vec<serde_json::Value>> = serde_json::from_str(json?).ok()?;
    entries
        .into_iter()
        .map(|entry| match entry.as_slice() {
            [serde_json::Value::String(key)] => Some((key.clone(), None)),
            [
                serde_json::Value::String(key),
                serde_json::Value::String(value),
            ] => {
                serde_json::from_str::<serde_json::Value>(value).ok()?;
                Some((key.clone(), Some(value.clone())))
            }
            _ => None,
        })
        .collect()
}

fn parse_failure(json: Option<&str>) -> Option<Outcome> {
    let value: serde_json::Value = serde_json::from_str(json?).ok()?;
    let field = |key: &str| value.get(key).and_then(|v| v.as_str()).map(str::to_string);
    Some(Outcome::Failed {
        name: field("name"),
        message: field("message")?,
        stack: field("stack"),
    })
}

/// A syntax error or another exception thrown outside the prelude's reach.
fn failed_from_value<'js>(ctx: &Ctx<'js>, thrown: Value<'js>) -> Outcome {
    let Some(object) = thrown.as_object() else {
        let message = thrown
            .as_string()
            .and_then(|s| s.to_string().ok())
            .unwrap_or_else(|| "The script threw a value that cannot be described".into());
        return Outcome::Failed {
            name: None,
            message,
            stack: None,
        };
    };
    let _ = ctx;
    let name: Option<String> = object.get("name").ok();
    let message: String = object.get("message").unwrap_or_default();
    let frames: Option<String> = object.get("stack").ok();
    let head = match &name {
        Some(name) if !message.is_empty() => format!("{name}: {message}"),
        Some(name) => name.clone(),
        None => message.clone(),
    };
    let stack = match frames.map(|f| f.trim_end().to_string()) {
        Some(frames) if !frames.is_empty() => format!("{head}\n{frames}"),
        _ => head,
    };
    Outcome::Failed {
        name,
        message,
        stack: Some(stack),
    }
}

fn describe_error(ctx: &Ctx<'_>, error: rquickjs::Error, during: &str) -> String {
    if let rquickjs::Error::Exception = error {
        let thrown = ctx.catch();
        if let Some(object) = thrown.as_object() {
            let message: String = object.get("message").unwrap_or_default();
            return format!("{during} failed: {message}");
        }
    }
    format!("{during} failed: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(code: &str) -> ScriptSpec {
        ScriptSpec {
            code: code.to_string(),
            tools: vec![ScriptTool {
                name: "echo-tool".into(),
                js_name: "echo_tool".into(),
                description: "echoes".into(),
            }],
            globals: vec!["searchTools".into()],
            store: BTreeMap::new(),
            deadline: None,
            timeout_ms: None,
        }
    }

    fn channel_sink() -> (Sink, Receiver<FromScript>) {
        let (sender, events) = crossbeam_channel::unbounded();
        let sink: Sink = Box::new(move |event| {
            let _ = sender.send(event);
        });
        (sink, events)
    }

    /// Runs a script, answering every tool call with its arguments (or rejecting when the
    /// arguments say `fail`), and returns its output and outcome.
    fn run_script(spec: ScriptSpec) -> (Vec<OutputItem>, Outcome) {
        let (sink, events) = channel_sink();
        let script = start("test", spec, sink).expect("started");
        let mut output = Vec::new();
        loop {
            let event = events
                .recv_timeout(Duration::from_secs(60))
                .expect("the script ends");
            match event {
                FromScript::Output(item) => output.push(item),
                FromScript::Call { id, args, .. } => {
                    let args = args.unwrap_or_default();
                    if args.contains("fail") {
                        script.reply(id, Err("it failed".into()));
                    } else {
                        script.reply(id, Ok(Some(args)));
                    }
                }
                FromScript::Done(outcome) => return (output, outcome),
            }
        }
    }

    #[test]
    fn calls_in_parallel_output_and_return() {
        let (output, outcome) = run_script(spec(
            r#"const r = await Promise.allSettled([tools.echo_tool({a: 1}), tools["echo-tool"]({fail: true})]);
               text(r[0].value.a); console.log("x", {b: 2}, r[1].reason.message); return {done: true};"#,
        ));
        assert_eq!(
            output,
            vec![
                OutputItem::Text("1".into()),
                OutputItem::Console("x {\"b\":2} it failed".into())
            ]
        );
        assert_eq!(
            outcome,
            Outcome::Completed {
                value: Some("{\"done\":true}".into()),
                writes: vec![]
            }
        );
    }

    #[test]
    fn store_load_and_exit() {
        let mut with_store = spec(
            r#"text(load("a")); store("b", [1]); store("a", undefined); exit(); text("never");"#,
        );
        with_store.store.insert("a".into(), "\"old\"".into());
        let (output, outcome) = run_script(with_store);
        assert_eq!(output, vec![OutputItem::Text("old".into())]);
        assert_eq!(
            outcome,
            Outcome::Completed {
                value: None,
                writes: vec![("b".into(), Some("[1]".into())), ("a".into(), None)]
            }
        );
    }

    #[test]
    fn errors_syntax_stall_and_unknown_tool() {
        let (_, outcome) = run_script(spec("throw new TypeError('bad')"));
        assert!(
            matches!(&outcome, Outcome::Failed { name: Some(n), message, .. } if n == "TypeError" && message == "bad"),
            "{outcome:?}"
        );
        let (_, outcome) = run_script(spec("this is not javascript"));
        assert!(
            matches!(&outcome, Outcome::Failed { name: Some(n), .. } if n == "SyntaxError"),
            "{outcome:?}"
        );
        let (_, outcome) = run_script(spec("await new Promise(() => {})"));
        assert!(
            matches!(&outcome, Outcome::Failed { message, .. } if message.contains("can never settle")),
            "{outcome:?}"
        );
        let (_, outcome) = run_script(spec("await tools.echo({})"));
        assert!(
            matches!(&outcome, Outcome::Failed { message, .. } if message.starts_with("tools.echo does not exist. Did you mean tools.echo_tool?")),
            "{outcome:?}"
        );
    }

    #[test]
    fn no_host_access() {
        let (output, _) = run_script(spec(
            "text([typeof require, typeof process, typeof setTimeout, typeof fetch, typeof std, typeof os].join())",
        ));
        assert_eq!(
            output,
            vec![OutputItem::Text(
                "undefined,undefined,undefined,undefined,undefined,undefined".into()
            )]
        );
    }

    #[test]
    fn endless_loop_times_out() {
        let mut endless = spec("for (;;) {}");
        endless.deadline = Some(Instant::now() + Duration::from_millis(300));
        endless.timeout_ms = Some(300);
        let (_, outcome) = run_script(endless);
        assert_eq!(
            outcome,
            Outcome::TimedOut("Execution timed out after 300 ms".into())
        );
        let mut waiting = spec("for (;;) { await null; }");
        waiting.deadline = Some(Instant::now() + Duration::from_millis(300));
        waiting.timeout_ms = Some(300);
        assert!(matches!(run_script(waiting).1, Outcome::TimedOut(_)));
    }

    #[test]
    fn huge_allocation_is_out_of_memory() {
        let (_, outcome) = run_script(spec(
            "const a = []; for (;;) a.push(new Array(1e6).fill(1.5));",
        ));
        assert!(
            matches!(&outcome, Outcome::Failed { message, .. } if message.contains("out of memory")),
            "{outcome:?}"
        );
        let (_, outcome) = run_script(spec("function f() { return f() + 1; } f();"));
        assert!(
            matches!(&outcome, Outcome::Failed { name: Some(n), .. } if n == "RangeError" || n == "InternalError"),
            "{outcome:?}"
        );
    }

    #[test]
    fn output_limit_ends_the_script() {
        let (output, outcome) = run_script(spec(
            "for (let i = 0; i < 1e6; i++) { try { text(''); } catch (e) {} } text('after');",
        ));
        assert_eq!(output.len(), 100_000);
        assert!(
            matches!(&outcome, Outcome::Failed { message, .. } if message.starts_with("script output exceeded the limit of 16777216 characters or 100000")),
            "{outcome:?}"
        );
    }

    #[test]
    fn abort_stops_a_busy_script() {
        let (sink, events) = channel_sink();
        let mut script = start("abort", spec("for (;;) {}"), sink).expect("started");
        std::thread::sleep(Duration::from_millis(100));
        script.abort();
        let done = events
            .recv_timeout(Duration::from_secs(30))
            .expect("the script ends");
        assert_eq!(
            done,
            FromScript::Done(Outcome::Aborted("Execution aborted".into()))
        );
    }

    #[test]
    fn image_checks_its_data() {
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
        let (output, _) = run_script(spec(&format!(
            "image({{type: 'image', data: '{png}', mimeType: 'image/png'}}); try {{ image('https://x/y.png'); }} catch (e) {{ text(e.message); }}"
        )));
        assert_eq!(
            output,
            vec![
                OutputItem::Image {
                    data: png.into(),
                    mime_type: "image/png".into()
                },
                OutputItem::Text(
                    "remote image URLs are not supported in tool outputs. Pass a base64 data URI instead".into()
                )
            ]
        );
    }
}
