//! (v2) `execute_tool`: an extension runs one of pi-rs's built-in tools (pi's `ctx.executeTool`
//! and the tools of its factories, `createBashTool` …, as the TypeScript host routes them), so the
//! approval gate (checked by the agent before it gets here), the tool sandbox, redaction and
//! abort apply as to a call of the model. No `tool_call` / `tool_result` hooks and no
//! `tool_execution_*` records: the extension's own tool call is the one the client sees.
//!
//! Blocking: one "ext-tool" thread per run waits for the tool's events, bounded by the run's
//! timeout (at most `exec::MAX_TIMEOUT`), polling its cancel flag; it answers the extension
//! itself through the host's `Answerer` (cumulative partial results as `action_update`, then one
//! `action_result`). `Runs` holds the cancel flags of the runs (and `exec`s) in flight, by
//! extension and request id, so abort and `cancel_request` reach them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::ExtensionId;
use super::host::Answerer;
use crate::child::CancelFlag;
use crate::messages::ToolCall;
use crate::tools::{self, ToolContext, ToolEvent, ToolEventKind, ToolOutput};

/// How often a run's partial results reach the extension at most.
const UPDATE_INTERVAL: Duration = Duration::from_millis(100);

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRunSpec {
    /// A built-in tool (`tools::ALL_TOOLS`; the parser refuses other names).
    pub tool_name: String,
    /// The tool's arguments (an object; the tool validates them as a model call's).
    pub args: Value,
    /// Relative paths are taken from the session's working directory.
    pub cwd: Option<String>,
    pub timeout: Option<Duration>,
}

/// The extension requests running now (`execute_tool`, `exec`), by extension and request id.
#[derive(Clone, Debug, Default)]
pub struct Runs(Arc<Mutex<Vec<(ExtensionId, String, CancelFlag)>>>);

impl Runs {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(ExtensionId, String, CancelFlag)>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a run; None when this extension has one with that id running already.
    pub fn begin(&self, extension: ExtensionId, id: &str) -> Option<RunGuard> {
        let mut runs = self.lock();
        if runs.iter().any(|(e, i, _)| *e == extension && i == id) {
            return None;
        }
        let cancel = CancelFlag::default();
        runs.push((extension, id.to_string(), cancel.clone()));
        Some(RunGuard {
            runs: self.clone(),
            extension,
            id: id.to_string(),
            cancel,
        })
    }

    /// `cancel_request`: only the extension's own run of that id. Returns whether one ran.
    pub fn cancel(&self, extension: ExtensionId, id: &str) -> bool {
        let runs = self.lock();
        let found = runs.iter().find(|(e, i, _)| *e == extension && i == id);
        found.inspect(|(_, _, flag)| flag.cancel()).is_some()
    }

    /// Abort: every run in flight ends.
    pub fn cancel_all(&self) {
        self.lock().iter().for_each(|(_, _, flag)| flag.cancel());
    }

    /// The extension is gone: its runs end.
    pub fn cancel_of(&self, extension: ExtensionId) {
        self.lock()
            .iter()
            .filter(|(e, _, _)| *e == extension)
            .for_each(|(_, _, flag)| flag.cancel());
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A registered run; dropping it (when the run has answered) unregisters it.
#[derive(Debug)]
pub struct RunGuard {
    runs: Runs,
    extension: ExtensionId,
    id: String,
    cancel: CancelFlag,
}

impl RunGuard {
    pub fn cancel_flag(&self) -> &CancelFlag {
        &self.cancel
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let mut runs = self.runs.lock();
        runs.retain(|(e, i, _)| !(*e == self.extension && *i == self.id));
    }
}

/// The answer's shape: `{content, details?, isError}` (the model's tool result, redacted).
pub fn result_value(output: &ToolOutput) -> Value {
    let mut value = crate::rpc::events::tool_result_value(&output.content, output.details.as_ref());
    value["isError"] = json!(output.is_error);
    value
}

/// Starts the run on its own thread; partial results and the answer go to `extension`'s
/// request `id`. `guard` (from `Runs::begin`) carries the cancel flag.
pub fn start(
    spec: ToolRunSpec,
    context: ToolContext,
    guard: RunGuard,
    answerer: Answerer,
    extension: ExtensionId,
    id: String,
) {
    let thread_answerer = answerer.clone();
    let thread_id = id.clone();
    let spawned = std::thread::Builder::new()
        .name("ext-tool".into())
        .spawn(move || {
            let progress = |partial: &ToolOutput| {
                thread_answerer.progress(extension, &thread_id, result_value(partial));
            };
            let output = run(&spec, context, guard.cancel_flag(), &thread_id, &progress);
            thread_answerer.answer(
                extension,
                "action_result",
                &thread_id,
                Ok(result_value(&output)),
            );
            drop(guard);
        });
    if let Err(e) = spawned {
        answerer.answer(
            extension,
            "action_result",
            &id,
            Err(format!("cannot start a thread for execute_tool: {e}")),
        );
    }
}

/// Runs the tool to its end, its timeout or a cancel; every output is redacted.
fn run(
    spec: &ToolRunSpec,
    mut context: ToolContext,
    cancel: &CancelFlag,
    id: &str,
    progress: &dyn Fn(&ToolOutput),
) -> ToolOutput {
    if let Some(dir) = &spec.cwd {
        context.cwd = context.cwd.join(dir);
    }
    let timeout = spec
        .timeout
        .unwrap_or(super::exec::MAX_TIMEOUT)
        .min(super::exec::MAX_TIMEOUT);
    let deadline = Instant::now() + timeout;
    let (sender, events) = crossbeam_channel::bounded(64);
    let call = ToolCall {
        id: format!("ext-{id}"),
        name: spec.tool_name.clone(),
        arguments: spec.args.clone(),
        thought_signature: None,
    };
    let handle = tools::spawn_tool(call, context, sender);
    let mut partial: Option<ToolOutput> = None;
    let mut sent_at: Option<Instant> = None;
    let mut unsent = false;
    let mut output = loop {
        if cancel.is_cancelled() {
            break tools::aborted_output(&spec.tool_name, partial.as_ref());
        }
        let now = Instant::now();
        if now >= deadline {
            let mut out = tools::aborted_output(&spec.tool_name, partial.as_ref());
            let notice = format!(
                "{} did not finish within the request's timeout ({} ms)",
                spec.tool_name,
                timeout.as_millis()
            );
            out.content = vec![crate::messages::ContentBlock::Text(
                crate::messages::TextContent::new(&notice),
            )];
            break out;
        }
        let wait = (deadline - now).min(Duration::from_millis(50));
        match events.recv_timeout(wait) {
            Ok(ToolEvent {
                kind: ToolEventKind::Finished(output),
                ..
            }) => break output,
            Ok(ToolEvent {
                kind: ToolEventKind::Update(mut update),
                ..
            }) => {
                update.redact();
                partial = Some(update);
                unsent = true;
            }
            Ok(_) | Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                break ToolOutput::error("The tool's thread ended without a result");
            }
        }
        // The newest partial result, at most every UPDATE_INTERVAL.
        if let Some(update) = partial.as_ref().filter(|_| unsent)
            && sent_at.is_none_or(|at| at.elapsed() >= UPDATE_INTERVAL)
        {
            progress(update);
            sent_at = Some(Instant::now());
            unsent = false;
        }
    };
    // A tool still running is cancelled (bash kills its process group).
    drop(handle);
    output.redact();
    output
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(cwd: &std::path::Path) -> ToolContext {
        ToolContext {
            cwd: cwd.to_path_buf(),
            agent_dir: cwd.to_path_buf(),
            shell_path: None,
            shell_command_prefix: None,
            model_supports_images: false,
            sandbox: Arc::new(crate::sandbox::Policy::off(cwd, cwd)),
            session_env: Vec::new(),
            image_resize: None,
            client: None,
            call_id: String::new(),
        }
    }

    fn spec(tool: &str, args: Value) -> ToolRunSpec {
        ToolRunSpec {
            tool_name: tool.into(),
            args,
            cwd: None,
            timeout: Some(Duration::from_secs(120)),
        }
    }

    #[test]
    fn runs_a_builtin_and_ends_it_on_cancel_or_timeout() {
        let dir = crate::test_support::temp_dir("tool-run");
        std::fs::write(dir.join("a.txt"), "hello\n").unwrap();
        let cancel = CancelFlag::default();
        let done = run(
            &spec("read", json!({"path": "a.txt"})),
            context(&dir),
            &cancel,
            "1",
            &|_| {},
        );
        assert!(!done.is_error);
        assert_eq!(result_value(&done)["content"][0]["text"], "hello\n");
        assert_eq!(result_value(&done)["isError"], false);

        let invalid = run(
            &spec("read", json!({"nope": 1})),
            context(&dir),
            &cancel,
            "2",
            &|_| {},
        );
        assert!(invalid.is_error);

        let mut slow = spec("bash", json!({"command": "sleep 30"}));
        slow.timeout = Some(Duration::from_millis(300));
        let started = Instant::now();
        let timed_out = run(&slow, context(&dir), &cancel, "3", &|_| {});
        assert!(timed_out.is_error);
        assert!(
            result_value(&timed_out)["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("timeout")
        );
        assert!(started.elapsed() < Duration::from_secs(25));

        let runs = Runs::default();
        let guard = runs.begin(ExtensionId(0), "r").unwrap();
        assert!(runs.begin(ExtensionId(0), "r").is_none());
        assert!(!runs.cancel(ExtensionId(1), "r"), "another extension's id");
        assert!(runs.cancel(ExtensionId(0), "r"));
        let aborted = run(
            &spec("bash", json!({"command": "sleep 30"})),
            context(&dir),
            guard.cancel_flag(),
            "r",
            &|_| {},
        );
        assert!(aborted.is_error);
        assert!(
            result_value(&aborted)["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("aborted")
        );
        drop(guard);
        assert_eq!(runs.len(), 0);
    }
}
