//! The editor's side of the tools (`tools::client::Client` for one ACP session): `fs/read_text_file`
//! and `fs/write_text_file` when the client advertised `fs.readTextFile` / `fs.writeTextFile`,
//! `terminal/*` for bash when it advertised `terminal`; and what each edit or write changed, kept
//! for the session's driver to show as a whole-file diff.
//!
//! The calls come from the tool threads: each sends its request through the router (which gives
//! it the connection's next id) and waits for the answer on a channel of its own, at most
//! `DEADLINE`, and no longer than the call's cancel flag stays down; a request given up is
//! withdrawn (`$/cancel_request`) and its late answer dropped. A terminal lives until its tool call
//! has been shown finished: the driver releases it then (`release`), or when the session closes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{Value, json};

use super::session::{OutgoingRequest, Reply, ToRouter};
use crate::child::CancelFlag;
use crate::tools::bash::{ShellEvent, ShellOutcome};
use crate::tools::client::{Client, TerminalCommand};

/// The longest wait for the client's answer to one request (a command's run is not one request:
/// it is polled).
const DEADLINE: Duration = Duration::from_secs(30);

/// `DEADLINE`, or `PI_TEST_ACP_CLIENT_DEADLINE_MS` (a test hook: a silent client is given up on
/// without a 30 s wait).
fn deadline() -> Duration {
    static DEADLINE_SET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *DEADLINE_SET.get_or_init(|| {
        std::env::var("PI_TEST_ACP_CLIENT_DEADLINE_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(DEADLINE, Duration::from_millis)
    })
}
/// How often a waiting tool thread looks at its cancel flag.
const SLICE: Duration = Duration::from_millis(50);
/// How often a running command's output is asked for.
const OUTPUT_POLL: Duration = Duration::from_millis(200);
/// How long a killed command may take to report its exit.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// The output a client keeps per terminal (it drops the oldest beyond it).
const OUTPUT_BYTE_LIMIT: u64 = 4 * 1024 * 1024;

/// What the client offered (`initialize`'s `clientCapabilities`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Offers {
    pub read: bool,
    pub write: bool,
    pub terminal: bool,
}

impl Offers {
    pub fn from_capabilities(capabilities: &Value) -> Offers {
        Offers {
            read: capabilities["fs"]["readTextFile"] == true,
            write: capabilities["fs"]["writeTextFile"] == true,
            terminal: capabilities["terminal"] == true,
        }
    }
}

/// One file an edit or write changed: its whole text before (None: a new file) and after.
#[derive(Debug)]
pub struct Change {
    pub path: PathBuf,
    pub old: Option<String>,
    pub new: String,
}

/// The editor for one session's tools.
#[derive(Debug)]
pub struct Editor {
    session_id: String,
    offers: Offers,
    requests: Sender<ToRouter>,
    next: AtomicU64,
    tracked: Mutex<Tracked>,
}

#[derive(Debug, Default)]
struct Tracked {
    /// By tool call.
    changes: HashMap<String, Change>,
    /// By tool call: its terminal's id.
    terminals: HashMap<String, String>,
}

/// Why a request got no answer to use.
enum Failed {
    Cancelled,
    Error(String),
}

impl From<Failed> for String {
    fn from(failed: Failed) -> String {
        match failed {
            Failed::Cancelled => crate::tools::ABORTED.to_string(),
            Failed::Error(message) => message,
        }
    }
}

impl Editor {
    pub fn new(session_id: String, offers: Offers, requests: Sender<ToRouter>) -> Editor {
        Editor {
            session_id,
            offers,
            requests,
            next: AtomicU64::new(0),
            tracked: Mutex::default(),
        }
    }

    fn tracked(&self) -> std::sync::MutexGuard<'_, Tracked> {
        self.tracked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the call `call_id` changed, once (the driver shows it as the call's diff).
    pub fn take_change(&self, call_id: &str) -> Option<Change> {
        self.tracked().changes.remove(call_id)
    }

    /// The terminal the call `call_id` runs in.
    pub fn terminal(&self, call_id: &str) -> Option<String> {
        self.tracked().terminals.get(call_id).cloned()
    }

    /// Releases the call's terminal (after its last update was sent); the answer is not waited for.
    pub fn release(&self, call_id: &str) {
        let terminal = self.tracked().terminals.remove(call_id);
        if let Some(terminal) = terminal {
            self.release_terminal(terminal);
        }
    }

    /// Kills the commands of every terminal still held (the turn is cancelled: the kill goes out
    /// before the release that follows the calls' last updates).
    pub fn kill_all(&self) {
        let terminals: Vec<String> = self.tracked().terminals.values().cloned().collect();
        for terminal in terminals {
            let _ = self.send("terminal/kill", json!({"terminalId": terminal}));
        }
    }

    /// Releases every terminal still held (the session closes).
    pub fn release_all(&self) {
        let terminals: Vec<String> = self.tracked().terminals.drain().map(|(_, t)| t).collect();
        for terminal in terminals {
            self.release_terminal(terminal);
        }
    }

    fn release_terminal(&self, terminal: String) {
        let _ = self.send("terminal/release", json!({"terminalId": terminal}));
    }

    /// Sends a request (the session's id added); its answer comes on the returned channel.
    fn send(
        &self,
        method: &'static str,
        mut params: Value,
    ) -> Result<(String, Receiver<Reply>), Failed> {
        params["sessionId"] = json!(self.session_id);
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let tag = format!("client:{}:{n}", self.session_id);
        let (reply, answer) = crossbeam_channel::bounded(1);
        let request = OutgoingRequest {
            method,
            params,
            tag: tag.clone(),
            reply,
        };
        self.requests
            .send(ToRouter::Request(request))
            .map_err(|_| Failed::Error("the connection to the editor is closed".into()))?;
        Ok((tag, answer))
    }

    /// Waits for the answer to `tag` until `DEADLINE` or a cancel; gives it up then.
    fn wait(
        &self,
        method: &str,
        tag: &str,
        answer: &Receiver<Reply>,
        cancel: Option<&CancelFlag>,
    ) -> Result<Value, Failed> {
        let limit = deadline();
        let deadline = Instant::now() + limit;
        loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(SLICE);
            match answer.recv_timeout(slice) {
                Ok(reply) => {
                    return reply.outcome.map_err(|error| {
                        let message = error["message"].as_str().unwrap_or("failed");
                        Failed::Error(format!("The editor could not {}: {message}", verb(method)))
                    });
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Failed::Error(
                        "the connection to the editor is closed".into(),
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if cancel.is_some_and(CancelFlag::is_cancelled) {
                self.withdraw(tag);
                return Err(Failed::Cancelled);
            }
            if Instant::now() >= deadline {
                self.withdraw(tag);
                return Err(Failed::Error(format!(
                    "The editor did not answer {method} within {} s",
                    crate::js::js_number_string(limit.as_secs_f64())
                )));
            }
        }
    }

    fn withdraw(&self, tag: &str) {
        let _ = self.requests.send(ToRouter::Withdraw {
            tag: tag.to_string(),
            written: None,
        });
    }

    fn call(
        &self,
        method: &'static str,
        params: Value,
        cancel: Option<&CancelFlag>,
    ) -> Result<Value, Failed> {
        let (tag, answer) = self.send(method, params)?;
        self.wait(method, &tag, &answer, cancel)
    }

    /// Kills the terminal and waits (a little) for the exit the pending `wait_for_exit` reports.
    fn stop(&self, terminal: &Value, wait_tag: &str, wait: &Receiver<Reply>) {
        let _ = self.call("terminal/kill", terminal.clone(), None);
        if wait.recv_timeout(KILL_GRACE).is_err() {
            self.withdraw(wait_tag);
        }
    }
}

/// "read <path>" etc. for error texts.
fn verb(method: &str) -> &'static str {
    match method {
        "fs/read_text_file" => "read the file",
        "fs/write_text_file" => "write the file",
        "terminal/create" => "start the command",
        _ => "run the command",
    }
}

impl Client for Editor {
    fn reads_files(&self) -> bool {
        self.offers.read
    }

    fn writes_files(&self) -> bool {
        self.offers.write
    }

    fn runs_commands(&self) -> bool {
        self.offers.terminal
    }

    fn read_text_file(&self, path: &Path, cancel: &CancelFlag) -> Result<String, String> {
        let params = json!({"path": path.to_string_lossy()});
        let result = self.call("fs/read_text_file", params, Some(cancel))?;
        result["content"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| "The editor sent no file content".to_string())
    }

    fn write_text_file(
        &self,
        path: &Path,
        content: &str,
        cancel: &CancelFlag,
    ) -> Result<(), String> {
        let params = json!({"path": path.to_string_lossy(), "content": content});
        self.call("fs/write_text_file", params, Some(cancel))?;
        Ok(())
    }

    fn run_command(
        &self,
        call_id: &str,
        command: &TerminalCommand,
        cancel: &CancelFlag,
        on_event: &mut dyn FnMut(ShellEvent),
    ) -> Result<ShellOutcome, String> {
        let env: Vec<Value> = command
            .env
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        let params = json!({"command": command.program, "args": command.args, "env": env,
            "cwd": command.cwd.to_string_lossy(), "outputByteLimit": OUTPUT_BYTE_LIMIT});
        let created = match self.call("terminal/create", params, Some(cancel)) {
            Ok(created) => created,
            Err(Failed::Cancelled) => return Ok(ShellOutcome::Aborted),
            Err(Failed::Error(message)) => return Err(message),
        };
        let terminal_id = created["terminalId"]
            .as_str()
            .ok_or("The editor sent no terminal id")?
            .to_string();
        self.tracked()
            .terminals
            .insert(call_id.to_string(), terminal_id.clone());
        let terminal = json!({"terminalId": terminal_id});
        let (wait_tag, wait) = self.send("terminal/wait_for_exit", terminal.clone())?;
        let started = Instant::now();
        let mut seen = SeenOutput::default();
        let mut polled = Instant::now();
        let outcome = loop {
            match wait.recv_timeout(SLICE) {
                Ok(reply) => match reply.outcome {
                    Ok(status) => break exit_outcome(&status),
                    Err(error) => {
                        let message = error["message"].as_str().unwrap_or("failed");
                        return Err(format!("The editor could not run the command: {message}"));
                    }
                },
                Err(RecvTimeoutError::Disconnected) => {
                    return Err("the connection to the editor is closed".into());
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if cancel.is_cancelled() {
                self.stop(&terminal, &wait_tag, &wait);
                break ShellOutcome::Aborted;
            }
            if command.timeout.is_some_and(|t| started.elapsed() >= t) {
                self.stop(&terminal, &wait_tag, &wait);
                break ShellOutcome::TimedOut;
            }
            if polled.elapsed() >= OUTPUT_POLL {
                polled = Instant::now();
                match self.call("terminal/output", terminal.clone(), Some(cancel)) {
                    Ok(output) => seen.feed(&output, on_event),
                    Err(Failed::Cancelled) => continue,
                    Err(Failed::Error(message)) => log::warn!("acp: {message}"),
                }
            }
            on_event(ShellEvent::Tick);
        };
        // Everything the command wrote up to its end.
        if let Ok(output) = self.call("terminal/output", terminal, None) {
            seen.feed(&output, on_event);
        }
        Ok(outcome)
    }

    fn file_changed(&self, call_id: &str, path: &Path, old: Option<&str>, new: &str) {
        let change = Change {
            path: path.to_path_buf(),
            old: old.map(str::to_string),
            new: new.to_string(),
        };
        self.tracked().changes.insert(call_id.to_string(), change);
    }
}

/// `terminal/wait_for_exit`'s answer as the shell runner's outcome.
fn exit_outcome(status: &Value) -> ShellOutcome {
    match status["exitCode"].as_u64() {
        Some(code) => ShellOutcome::Exited(Some(i32::try_from(code).unwrap_or(i32::MAX))),
        None => ShellOutcome::Exited(None),
    }
}

/// Turns `terminal/output`'s whole-output answers into the new part of each.
#[derive(Default)]
struct SeenOutput {
    last: String,
}

/// How much of the previous output is looked for in a truncated one.
const OVERLAP: usize = 4096;

impl SeenOutput {
    fn feed(&mut self, answer: &Value, on_event: &mut dyn FnMut(ShellEvent)) {
        let Some(output) = answer["output"].as_str() else {
            return;
        };
        let new = self.new_part(output, answer["truncated"] == true);
        if !new.is_empty() {
            on_event(ShellEvent::Output(new.as_bytes()));
        }
        self.last = output.to_string();
    }

    /// What `output` adds to the previous answer. The client drops the oldest output beyond its
    /// limit, so a truncated answer is matched by the previous answer's tail.
    fn new_part<'a>(&self, output: &'a str, truncated: bool) -> &'a str {
        if let Some(rest) = output.strip_prefix(self.last.as_str()) {
            return rest;
        }
        if !truncated || self.last.is_empty() {
            return output;
        }
        let mut from = self.last.len().saturating_sub(OVERLAP);
        while !self.last.is_char_boundary(from) {
            from += 1;
        }
        if from > 0 {
            let tail = &self.last[from..];
            return match output.rfind(tail) {
                Some(at) => &output[at + tail.len()..],
                None => output,
            };
        }
        // A short previous answer: the longest of its ends that starts the new one.
        (1..self.last.len())
            .filter(|k| self.last.is_char_boundary(*k))
            .find_map(|k| output.strip_prefix(&self.last[k..]))
            .unwrap_or(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_output_is_what_the_answer_adds() {
        let mut seen = SeenOutput::default();
        assert_eq!(seen.new_part("ab", false), "ab");
        seen.last = "ab".into();
        assert_eq!(seen.new_part("abcd", false), "cd");
        // The client dropped "a": the tail of what was seen marks the new part.
        assert_eq!(seen.new_part("bcde", true), "cde");
        seen.last = "xyz".into();
        assert_eq!(seen.new_part("123", true), "123");
    }

    #[test]
    fn offers_follow_the_capabilities() {
        let offers = Offers::from_capabilities(
            &json!({"fs": {"readTextFile": true, "writeTextFile": false}, "terminal": true}),
        );
        assert!(offers.read && !offers.write && offers.terminal);
        let none = Offers::from_capabilities(&Value::Null);
        assert!(!none.read && !none.write && !none.terminal);
    }

    #[test]
    fn exit_status_maps() {
        assert_eq!(
            exit_outcome(&json!({"exitCode": 3, "signal": null})),
            ShellOutcome::Exited(Some(3))
        );
        assert_eq!(
            exit_outcome(&json!({"exitCode": null, "signal": "SIGKILL"})),
            ShellOutcome::Exited(None)
        );
    }
}
