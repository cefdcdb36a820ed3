//! (v2) `exec`: a command an extension runs through pi-rs (pi's `pi.exec(command, args)`), so the
//! tool sandbox applies (the agent checks the approval gate before it gets here). No shell: the
//! program and its arguments as given, in its own process group, stdin null, the environment
//! scrubbed of secrets as for tools.
//!
//! Blocking: one "ext-exec" thread per command waits for it, bounded by the timeout (at most
//! `MAX_TIMEOUT`); output beyond `max_buffer` bytes (stdout and stderr together) stops it. At
//! exit every running command's group is killed (`kill_all`). The thread answers the extension
//! itself through the host's `Answerer`.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::ExtensionId;
use super::host::Answerer;
use crate::child::{GroupChild, LiveGroups};

/// The longest a command may run (also when the extension asks for more or for no limit).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Default `maxBuffer`: stdout and stderr together.
pub const DEFAULT_MAX_BUFFER: usize = 16 << 20;

static LIVE_EXECS: LiveGroups = LiveGroups::new();

/// Kills every command still running (pi-rs is exiting).
pub fn kill_all() {
    LIVE_EXECS.kill_all();
}

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecSpec {
    pub command: String,
    pub args: Vec<String>,
    /// Relative paths are taken from the session's working directory.
    pub cwd: Option<String>,
    pub timeout: Option<Duration>,
    pub max_buffer: Option<usize>,
}

impl ExecSpec {
    /// The command as one line, for the approval gate and its dialog (arguments quoted when
    /// they need it).
    pub fn display_line(&self) -> String {
        let quote = |word: &str| {
            let plain = !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
            if plain {
                word.to_string()
            } else {
                format!("'{}'", word.replace('\'', "'\\''"))
            }
        };
        std::iter::once(self.command.as_str())
            .chain(self.args.iter().map(String::as_str))
            .map(quote)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Starts the command on its own thread; the answer goes to `extension`'s request `id`.
/// `guard` (from `tool_run::Runs::begin`) carries the flag that abort and `cancel_request` raise.
pub fn start(
    spec: ExecSpec,
    cwd: std::path::PathBuf,
    sandbox: Arc<crate::sandbox::Policy>,
    guard: super::tool_run::RunGuard,
    answerer: Answerer,
    extension: ExtensionId,
    id: String,
) {
    let thread_answerer = answerer.clone();
    let thread_id = id.clone();
    let spawned = std::thread::Builder::new()
        .name("ext-exec".into())
        .spawn(move || {
            let result = run(&spec, &cwd, &sandbox, guard.cancel_flag());
            thread_answerer.answer(extension, "action_result", &thread_id, result);
            drop(guard);
        });
    if let Err(e) = spawned {
        answerer.answer(
            extension,
            "action_result",
            &id,
            Err(format!("cannot start a thread for exec: {e}")),
        );
    }
}

fn run(
    spec: &ExecSpec,
    cwd: &std::path::Path,
    sandbox: &crate::sandbox::Policy,
    cancel: &crate::child::CancelFlag,
) -> Result<Value, String> {
    let dir = spec.cwd.as_ref().map_or(cwd.to_path_buf(), |d| cwd.join(d));
    let mut command = Command::new(&spec.command);
    crate::tools::env::scrub(&mut command);
    command
        .args(&spec.args)
        .current_dir(&dir)
        .envs(crate::tools::env::CHILD_MARKERS)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::sandbox::confine_child(&mut command, sandbox).map_err(|e| e.to_string())?;
    let mut child =
        GroupChild::spawn(&mut command).map_err(|e| format!("{}: {e}", spec.command))?;
    let pgid = child.pgid();
    LIVE_EXECS.insert(pgid);
    let limit = spec.max_buffer.unwrap_or(DEFAULT_MAX_BUFFER);
    let used = Arc::new(AtomicUsize::new(0));
    let collect = |pipe: Option<Box<dyn Read + Send>>, used: Arc<AtomicUsize>| {
        std::thread::Builder::new()
            .name("ext-exec-out".into())
            .spawn(move || {
                let mut kept = Vec::new();
                let mut truncated = false;
                let Some(mut pipe) = pipe else {
                    return (kept, truncated);
                };
                let mut buffer = [0u8; 8192];
                loop {
                    match pipe.read(&mut buffer) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let before = used.fetch_add(n, Ordering::SeqCst);
                            let room = limit.saturating_sub(before).min(n);
                            kept.extend_from_slice(&buffer[..room]);
                            if room < n {
                                truncated = true;
                                break;
                            }
                        }
                    }
                }
                (kept, truncated)
            })
    };
    let stdout = child
        .pipes()
        .stdout
        .take()
        .map(|p| Box::new(p) as Box<dyn Read + Send>);
    let stderr = child
        .pipes()
        .stderr
        .take()
        .map(|p| Box::new(p) as Box<dyn Read + Send>);
    let out_thread = collect(stdout, used.clone());
    let err_thread = collect(stderr, used.clone());
    let deadline = Instant::now() + spec.timeout.unwrap_or(MAX_TIMEOUT).min(MAX_TIMEOUT);
    let mut killed = false;
    let status = loop {
        if child.has_exited() {
            // The whole group goes (a background grandchild would keep the pipes open), while
            // the unreaped leader still holds the group id: after the reap the id may be reused
            // by a stranger's process on a busy machine, and this kill would hit it.
            crate::child::kill_group(pgid);
            break child.wait().ok();
        }
        if Instant::now() >= deadline
            || used.load(Ordering::SeqCst) > limit
            || cancel.is_cancelled()
        {
            killed = true;
            child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    LIVE_EXECS.remove(pgid);
    let join = |t: std::io::Result<std::thread::JoinHandle<(Vec<u8>, bool)>>| {
        t.ok().and_then(|t| t.join().ok()).unwrap_or_default()
    };
    let (out, out_cut) = join(out_thread);
    let (err, err_cut) = join(err_thread);
    let truncated = out_cut || err_cut;
    use std::os::unix::process::ExitStatusExt;
    let code = match status {
        Some(status) => status
            .code()
            .or_else(|| status.signal().map(|s| 128 + s))
            .unwrap_or(1),
        None => 137,
    };
    Ok(json!({
        "stdout": String::from_utf8_lossy(&out),
        "stderr": String::from_utf8_lossy(&err),
        "code": code,
        "killed": killed || truncated,
        "truncated": truncated,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str, args: &[&str]) -> ExecSpec {
        ExecSpec {
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            cwd: None,
            // Generous: the commands meant to finish do so at once, but on a loaded machine
            // starting one can take seconds, and the timeout would turn it into a kill (137).
            timeout: Some(Duration::from_secs(120)),
            max_buffer: None,
        }
    }

    #[test]
    fn runs_without_a_shell_and_reports_like_pi() {
        let cwd = std::env::temp_dir();
        let policy = crate::sandbox::Policy::off(&cwd, &cwd);
        let never = crate::child::CancelFlag::default();
        let done = run(
            &spec("sh", &["-c", "echo out; echo err >&2; exit 3"]),
            &cwd,
            &policy,
            &never,
        )
        .unwrap();
        assert_eq!(done["stdout"], "out\n");
        assert_eq!(done["stderr"], "err\n");
        assert_eq!(done["code"], 3);
        assert_eq!(done["killed"], false);
        let mut slow = spec("sleep", &["5"]);
        slow.timeout = Some(Duration::from_millis(100));
        let killed = run(&slow, &cwd, &policy, &never).unwrap();
        assert_eq!(killed["killed"], true);
        assert_eq!(killed["code"], 137);
        let mut big = spec("sh", &["-c", "yes | head -c 100000"]);
        big.max_buffer = Some(1000);
        let cut = run(&big, &cwd, &policy, &never).unwrap();
        assert_eq!(cut["truncated"], true);
        assert_eq!(cut["stdout"].as_str().unwrap().len(), 1000);
        assert!(run(&spec("/nonexistent/x", &[]), &cwd, &policy, &never).is_err());
        let cancelled = crate::child::CancelFlag::default();
        cancelled.cancel();
        let ended = run(&spec("sleep", &["30"]), &cwd, &policy, &cancelled).unwrap();
        assert_eq!(ended["killed"], true);
        assert_eq!(
            spec("git", &["commit", "-m", "it's"]).display_line(),
            "git commit -m 'it'\\''s'"
        );
    }
}
