//! Drives one `pi --mode rpc` process over stdio for a test.
//!
//! `Pi::spawn(&Setup)` makes a private temp dir (agent dir, cwd, HOME; removed on drop), writes
//! `models.json` from `fixtures/models.json` pointing the `fake-anthropic` and `fake-openai`
//! providers at a `FakeProvider`, an optional `settings.json`, and starts the binary with
//! `--mode rpc --no-session --provider <p> --model <m>` (`Setup::with_sessions()` drops
//! `--no-session`) in a scrubbed environment (an allowlist:
//! no proxies, no provider keys, no user config). A reader thread splits stdout on LF only and
//! forwards each line; another collects stderr for failure reports. Every stdout record is kept,
//! in order, for assertions after the fact. The temp dir is a `Workspace`: `Pi::spawn_in` starts
//! another process in the same one (restarts for `--continue`/`--session`), and its helpers find
//! the session files a process left behind.
//!
//! Which binary: `env!("CARGO_BIN_EXE_pi")`, unless `PI_TEST_BIN` names another executable.
//! Running the suite against the reference (TypeScript pi 0.73.1) checks the harness and the
//! fixtures, and shows which assertions are seed-only:
//!
//! ```text
//! ref=$(../shared/tools/reference-pi)      # installs once, prints the executable
//! PI_TEST_BIN=$ref cargo test --test it -- --test-threads=2
//! ```
//!
//! The reference starts in about 5 s and lacks the seed's protocol additions (FACTS.md §0), so
//! some tests fail against it by design; each test names those at its top. Deadlines are 10 s
//! per wait for pi-rs and 30 s for the reference (`PI_TEST_TIMEOUT_SECS` overrides both).
//! `PI_TEST_TRACE=1` echoes every stdout record to stderr; `PI_TEST_KEEP=1` keeps the temp dir.
//!
//! Beyond commands and records: `signal`, `close_stdin`, `close_stdout` (the reader drops its end
//! of the pipe, as a client that goes away), `wait_for_exit`, `agent_settings`; `run_cli` runs a
//! one-shot print/JSON-mode process in the same prepared dir layout; `process_alive` /
//! `wait_until_gone` check that children really died.
//!
//! Assertions on what came out: `expect_transcript` / `check_transcript` match a run's records
//! (or a session file's lines) against a sequence of record patterns with `GAP`s, and hand back
//! the matched records by name; `flow` / `event_labels` give the sequence as short labels. The
//! scenario helpers the test files share live at the end of this file, one home each.
//!
//! Ends: `Drop` closes stdin, waits for the exit (bounded), kills the process if it lingers, and
//! prints stderr plus the last records when the test is failing.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ChildStdout;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, fixture};

/// Environment variables passed through to the child; everything else is dropped.
pub const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "RUST_BACKTRACE",
    "RUST_LOG",
];

/// True when the suite runs against another executable (the reference) via `PI_TEST_BIN`.
pub fn is_reference() -> bool {
    std::env::var_os("PI_TEST_BIN").is_some_and(|v| !v.is_empty())
}

/// The executable under test: pi-rs, or `PI_TEST_BIN`.
pub fn binary() -> PathBuf {
    match std::env::var_os("PI_TEST_BIN") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_pi")),
    }
}

/// The per-wait deadline used by every helper.
pub fn default_timeout() -> Duration {
    if let Some(secs) = std::env::var("PI_TEST_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return Duration::from_secs(secs);
    }
    if is_reference() {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(10)
    }
}

/// What to start: provider/model (from `fixtures/models.json`), settings, extra args, files.
#[derive(Clone, Debug)]
pub struct Setup {
    pub base_url: String,
    pub provider: String,
    pub model: String,
    pub settings: Option<Value>,
    pub extra_args: Vec<String>,
    /// Files created in the cwd before start: (relative path, contents).
    pub files: Vec<(String, String)>,
    /// Extra environment for the child (after scrubbing).
    pub env: Vec<(String, String)>,
    /// Keep sessions on (omit `--no-session`): files go to the agent dir unless the args say
    /// otherwise.
    pub sessions: bool,
    /// Run this executable instead of the default one (differential checks that start pi-rs
    /// and the reference in one scenario).
    pub binary: Option<PathBuf>,
    /// Replaces `fixtures/models.json` (`__BASE_URL__` is still substituted).
    pub models_json: Option<String>,
    /// Starts this program with these leading arguments instead, the binary's path and its
    /// arguments following them (e.g. an intermediate `sh -c` parent).
    pub wrapper: Vec<String>,
    /// Runs in the child between fork and exec (signal dispositions, resource limits).
    pub pre_exec: Option<fn() -> std::io::Result<()>>,
    /// Writes a `trust.json` that trusts the workspace (see `trust_project`).
    pub trust_project: bool,
    /// How long waits on this run may take, when a scenario needs longer than
    /// `default_timeout()` (work whose duration depends on the machine's load).
    pub wait_limit: Option<Duration>,
}

impl Setup {
    /// `fake-anthropic/fake-claude` (api anthropic-messages, reasoning model).
    pub fn anthropic(fake: &FakeProvider) -> Setup {
        Setup::new(fake, "fake-anthropic", "fake-claude")
    }

    /// `fake-openai/fake-gpt` (api openai-completions, no reasoning).
    pub fn openai(fake: &FakeProvider) -> Setup {
        Setup::new(fake, "fake-openai", "fake-gpt")
    }

    pub fn new(fake: &FakeProvider, provider: &str, model: &str) -> Setup {
        Setup::at(&fake.base_url(), provider, model)
    }

    /// `provider`/`model` with `fixtures/models.json` pointed at `base_url` (a server that is
    /// not a `FakeProvider`, or none at all).
    pub fn at(base_url: &str, provider: &str, model: &str) -> Setup {
        Setup {
            base_url: base_url.to_string(),
            provider: provider.into(),
            model: model.into(),
            settings: None,
            extra_args: Vec::new(),
            files: Vec::new(),
            env: Vec::new(),
            sessions: false,
            binary: None,
            models_json: None,
            wrapper: Vec::new(),
            pre_exec: None,
            trust_project: false,
            wait_limit: None,
        }
    }

    /// The cwd's `.pi/` resources are the test's own, so the project is trusted: a saved
    /// decision in `<agentDir>/trust.json` for the workspace, in pi 1.6.0's format (without a
    /// decision pi and pi-rs skip them; 0.73.1 ignores the file, and would refuse `--approve`).
    pub fn trust_project(mut self) -> Self {
        self.trust_project = true;
        self
    }

    /// No `--provider`/`--model` flags (a resumed session's model then counts): the models
    /// stay those of the fake provider.
    pub fn without_model_flags(mut self) -> Self {
        self.provider.clear();
        self.model.clear();
        self
    }

    /// Sessions on: `--no-session` is not passed.
    pub fn with_sessions(mut self) -> Self {
        self.sessions = true;
        self
    }

    /// Global `settings.json` contents.
    pub fn settings(mut self, settings: Value) -> Self {
        self.settings = Some(settings);
        self
    }

    pub fn arg(mut self, arg: &str) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    pub fn file(mut self, relative: &str, contents: &str) -> Self {
        self.files.push((relative.into(), contents.into()));
        self
    }

    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Uses `text` as the agent dir's `models.json` instead of the fixture.
    pub fn models_json(mut self, text: &str) -> Self {
        self.models_json = Some(text.into());
        self
    }

    /// Runs `hook` in the child just before exec (e.g. to ignore SIGXFSZ).
    pub fn pre_exec(mut self, hook: fn() -> std::io::Result<()>) -> Self {
        self.pre_exec = Some(hook);
        self
    }

    /// Runs `wrapper[0]` with the rest of `wrapper`, then the binary's path and its usual
    /// arguments: `Pi::pid()` and `kill()` then address the wrapper, not pi.
    pub fn wrapped_in(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(|s| s.to_string()).collect();
        self
    }
}

/// Creates the agent dir, cwd and files for `setup` under `dir` and returns the command to run
/// the binary there (scrubbed environment, no arguments yet, stdio not configured).
fn prepare(setup: &Setup, workspace: &Workspace) -> Command {
    let agent_dir = workspace.agent_dir();
    let cwd = workspace.cwd();
    let models = setup
        .models_json
        .clone()
        .unwrap_or_else(|| fixture("models.json"))
        .replace("__BASE_URL__", &setup.base_url);
    std::fs::write(agent_dir.join("models.json"), models).expect("write models.json");
    if let Some(settings) = &setup.settings {
        let text = serde_json::to_string_pretty(settings).expect("settings json");
        std::fs::write(agent_dir.join("settings.json"), text).expect("write settings.json");
    }
    if setup.trust_project {
        // The whole workspace, so a session's own folder elsewhere in it is trusted too.
        let root = std::fs::canonicalize(workspace.root()).expect("canonical workspace");
        let trust = json!({ root.to_string_lossy(): true });
        let text = serde_json::to_string_pretty(&trust).expect("trust json") + "\n";
        std::fs::write(agent_dir.join("trust.json"), text).expect("write trust.json");
    }
    for (relative, contents) in &setup.files {
        let path = cwd.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create file parent");
        }
        std::fs::write(&path, contents).expect("write setup file");
    }

    let program = setup.binary.clone().unwrap_or_else(binary);
    let mut command = match setup.wrapper.split_first() {
        Some((wrapper, leading)) => {
            let mut command = Command::new(wrapper);
            command.args(leading).arg(program);
            command
        }
        None => Command::new(program),
    };
    command.current_dir(&cwd);
    isolate_env(&mut command, &agent_dir, workspace.root());
    command.envs(setup.env.iter().map(|(k, v)| (k, v)));
    command
}

/// The child's environment: only [`ENV_ALLOWLIST`] of ours, then `agent_dir` as the agent dir,
/// `home` as `HOME`, and `PI_OFFLINE=1`.
pub fn isolate_env(command: &mut Command, agent_dir: &Path, home: &Path) {
    scrub_env(command);
    command
        .env("PI_CODING_AGENT_DIR", agent_dir)
        .env("PI_OFFLINE", "1")
        .env("HOME", home);
}

/// Clears the child's environment but for [`ENV_ALLOWLIST`] of ours.
pub fn scrub_env(command: &mut Command) {
    command.env_clear();
    for name in ENV_ALLOWLIST {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
}

/// A temp dir removed on drop (kept with `PI_TEST_KEEP=1`).
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "pi-it-{label}-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("PI_TEST_KEEP").is_some() {
            eprintln!("kept temp dir {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The private directory of one or more consecutive processes: `agent/` (the agent dir),
/// `work/` (the cwd) and HOME. Cloning shares it; the last clone dropped removes it. Restarting
/// a process in the same workspace is how `--continue` and `--session` scenarios run.
#[derive(Clone)]
pub struct Workspace {
    dir: Arc<TempDir>,
}

impl Default for Workspace {
    fn default() -> Workspace {
        Workspace::new()
    }
}

impl Workspace {
    pub fn new() -> Workspace {
        let dir = TempDir::new("rpc");
        std::fs::create_dir_all(dir.path().join("agent")).expect("create agent dir");
        std::fs::create_dir_all(dir.path().join("work")).expect("create cwd");
        Workspace { dir: Arc::new(dir) }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn agent_dir(&self) -> PathBuf {
        self.dir.path().join("agent")
    }

    pub fn cwd(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// pi's default session directory for this cwd:
    /// `<agentDir>/sessions/--<cwd without its leading /, with / replaced by ->--/`.
    pub fn default_session_dir(&self) -> PathBuf {
        let cwd = self.cwd().to_string_lossy().into_owned();
        let encoded = cwd.trim_start_matches('/').replace(['/', '\\', ':'], "-");
        self.agent_dir()
            .join("sessions")
            .join(format!("--{encoded}--"))
    }

    /// Every `*.jsonl` file anywhere in the workspace, sorted.
    pub fn jsonl_files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|x| x == "jsonl") {
                    out.push(path);
                }
            }
        }
        let mut out = Vec::new();
        walk(self.root(), &mut out);
        out.sort();
        out
    }
}

/// Reads a JSONL file, asserting that it ends with LF and that every line is a JSON object.
#[track_caller]
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{} does not end with a newline:\n{text}",
        path.display()
    );
    text.lines()
        .enumerate()
        .map(|(index, line)| {
            let value: Value = serde_json::from_str(line).unwrap_or_else(|err| {
                panic!(
                    "{} line {} is not JSON ({err}): {line:?}",
                    path.display(),
                    index + 1
                )
            });
            assert!(
                value.is_object(),
                "{} line {}: {line}",
                path.display(),
                index + 1
            );
            value
        })
        .collect()
}

/// One line of the child's stdout.
enum Line {
    Text(String),
    /// Bytes that were not UTF-8: always a protocol violation.
    Binary(Vec<u8>),
}

pub struct Pi {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Line>,
    stdout_closed: bool,
    /// Every record received, in order, and its raw line (same index).
    records: Vec<Value>,
    raw: Vec<String>,
    /// Records before this index were consumed by sequential waits.
    cursor: usize,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Disconnects when the stderr reader has read to EOF.
    stderr_eof: Receiver<()>,
    timeout: Duration,
    trace: bool,
    exit_status: Option<ExitStatus>,
    workspace: Workspace,
    /// Asks the stdout reader to drop its end of the pipe (`close_stdout`).
    close_stdout: Arc<AtomicBool>,
}

impl Pi {
    /// Starts the binary for `setup`; panics if it cannot be started.
    pub fn spawn(setup: &Setup) -> Pi {
        Pi::spawn_in(&Workspace::new(), setup)
    }

    /// Starts the binary in an existing workspace (e.g. after a previous process there ended).
    pub fn spawn_in(workspace: &Workspace, setup: &Setup) -> Pi {
        let program = setup.binary.clone().unwrap_or_else(binary);
        let mut command = prepare(setup, workspace);
        command
            .args(["--mode", "rpc"])
            .args(if setup.sessions {
                &[][..]
            } else {
                &["--no-session"][..]
            })
            .args(if setup.provider.is_empty() {
                Vec::new()
            } else {
                vec!["--provider", &setup.provider, "--model", &setup.model]
            })
            .args(&setup.extra_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(hook) = setup.pre_exec {
            use std::os::unix::process::CommandExt;
            // SAFETY: the hooks are plain async-signal-safe syscalls (signal, setrlimit).
            unsafe { command.pre_exec(hook) };
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", program.display()));

        let stdout = child.stdout.take().expect("stdout piped");
        let (line_tx, lines) = crossbeam_channel::unbounded();
        let close_stdout = Arc::new(AtomicBool::new(false));
        let close_requested = Arc::clone(&close_stdout);
        thread::Builder::new()
            .name("pi-stdout".into())
            .spawn(move || read_stdout_lines(stdout, &line_tx, &close_requested))
            .expect("spawn stdout reader");

        let mut stderr_pipe = child.stderr.take().expect("stderr piped");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stderr_sink = Arc::clone(&stderr);
        let (eof_tx, stderr_eof) = crossbeam_channel::bounded::<()>(0);
        thread::Builder::new()
            .name("pi-stderr".into())
            .spawn(move || {
                let _eof = eof_tx;
                let mut chunk = [0u8; 8192];
                while let Ok(n) = stderr_pipe.read(&mut chunk) {
                    if n == 0 {
                        return;
                    }
                    if let Ok(mut sink) = stderr_sink.lock() {
                        sink.extend_from_slice(&chunk[..n]);
                    }
                }
            })
            .expect("spawn stderr reader");

        Pi {
            stdin: child.stdin.take(),
            child,
            lines,
            stdout_closed: false,
            records: Vec::new(),
            raw: Vec::new(),
            cursor: 0,
            stderr,
            stderr_eof,
            timeout: setup.wait_limit.unwrap_or_else(default_timeout),
            trace: std::env::var_os("PI_TEST_TRACE").is_some(),
            exit_status: None,
            workspace: workspace.clone(),
            close_stdout,
        }
    }

    /// The working directory the process runs in.
    pub fn cwd(&self) -> PathBuf {
        self.workspace.cwd()
    }

    /// The agent dir (`PI_CODING_AGENT_DIR`).
    pub fn agent_dir(&self) -> PathBuf {
        self.workspace.agent_dir()
    }

    /// The workspace, to start another process in it later.
    pub fn workspace(&self) -> Workspace {
        self.workspace.clone()
    }

    /// SIGKILL: no chance to flush or clean up. Waits for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        if let Ok(status) = self.child.wait() {
            self.exit_status = Some(status);
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `now + timeout()`.
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// Sends one command as a JSON line.
    #[track_caller]
    pub fn send(&mut self, command: Value) {
        let mut line = serde_json::to_vec(&command).expect("serialize command");
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Writes bytes to stdin as they are (no LF added).
    #[track_caller]
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|err| panic!("write to pi stdin: {err}\n{}", self.stderr_text()));
    }

    /// Sends `command` (which must carry a string `id`) and returns its response.
    #[track_caller]
    pub fn request(&mut self, command: Value) -> Value {
        let id = command["id"]
            .as_str()
            .expect("request() needs a string id")
            .to_string();
        self.send(command);
        self.response_for(&id)
    }

    /// Sends `{"id":id,"type":ty}` plus `fields` and returns the response.
    #[track_caller]
    pub fn command(&mut self, id: &str, ty: &str, fields: Value) -> Value {
        let mut command = json!({"id": id, "type": ty});
        if let (Some(target), Some(extra)) = (command.as_object_mut(), fields.as_object()) {
            for (key, value) in extra {
                target.insert(key.clone(), value.clone());
            }
        }
        self.send(command);
        self.response_for(id)
    }

    /// Receives one more record into the log; false on deadline or closed stdout.
    fn pull(&mut self, deadline: Instant) -> bool {
        if self.stdout_closed {
            return false;
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(wait) {
            Ok(Line::Text(text)) => {
                let value = serde_json::from_str::<Value>(&text).unwrap_or_else(|err| {
                    panic!(
                        "stdout carried a line that is not JSON ({err}): {text:?}\n{}",
                        self.stderr_text()
                    )
                });
                if self.trace {
                    eprintln!("pi> {text}");
                }
                self.records.push(value);
                self.raw.push(text);
                true
            }
            Ok(Line::Binary(bytes)) => {
                panic!("stdout carried a line that is not UTF-8: {bytes:?}")
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => {
                self.stdout_closed = true;
                false
            }
        }
    }

    /// Consumes records from the cursor until one matches `pred`; returns the consumed records
    /// (the match last). Panics at `deadline` or when stdout closes first.
    #[track_caller]
    pub fn recv_until(&mut self, pred: impl Fn(&Value) -> bool, deadline: Instant) -> Vec<Value> {
        let start = self.cursor;
        let mut scan = self.cursor;
        loop {
            while scan < self.records.len() {
                if pred(&self.records[scan]) {
                    self.cursor = scan + 1;
                    return self.records[start..=scan].to_vec();
                }
                scan += 1;
            }
            if !self.pull(deadline) {
                let why = if self.stdout_closed {
                    "stdout closed"
                } else {
                    "deadline passed"
                };
                panic!(
                    "{why} before the awaited record; records since the last match:\n{}\n{}",
                    self.describe(start),
                    self.stderr_text()
                );
            }
        }
    }

    /// Sequentially waits for the next event of type `ty` and returns it.
    #[track_caller]
    pub fn wait_for_event(&mut self, ty: &str) -> Value {
        let deadline = self.deadline();
        let mut consumed = self.recv_until(|r| r["type"] == ty, deadline);
        consumed.pop().expect("recv_until returns the match")
    }

    /// Sequentially consumes records up to and including the next one of type `ty`.
    #[track_caller]
    pub fn records_until_event(&mut self, ty: &str) -> Vec<Value> {
        let deadline = self.deadline();
        self.recv_until(|r| r["type"] == ty, deadline)
    }

    /// The response carrying `id`, wherever it is in the log (does not move the cursor:
    /// responses and events may interleave in any order).
    #[track_caller]
    pub fn response_for(&mut self, id: &str) -> Value {
        let is_it = |r: &Value| r["type"] == "response" && r["id"] == id;
        let deadline = self.deadline();
        let mut scan = 0;
        loop {
            while scan < self.records.len() {
                if is_it(&self.records[scan]) {
                    return self.records[scan].clone();
                }
                scan += 1;
            }
            if !self.pull(deadline) {
                panic!(
                    "no response with id {id:?} before the deadline; all records:\n{}\n{}",
                    self.describe(0),
                    self.stderr_text()
                );
            }
        }
    }

    /// The first record anywhere in the log matching `pred`, waiting for it if needed.
    #[track_caller]
    pub fn find(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = self.deadline();
        let mut scan = 0;
        loop {
            while scan < self.records.len() {
                if pred(&self.records[scan]) {
                    return self.records[scan].clone();
                }
                scan += 1;
            }
            if !self.pull(deadline) {
                panic!(
                    "no matching record before the deadline; all records:\n{}\n{}",
                    self.describe(0),
                    self.stderr_text()
                );
            }
        }
    }

    /// Collects whatever arrives within `window` (for "nothing else happens" checks only).
    pub fn drain_for(&mut self, window: Duration) -> Vec<Value> {
        let start = self.records.len();
        let deadline = Instant::now() + window;
        while self.pull(deadline) {}
        self.records[start..].to_vec()
    }

    /// Every record received so far.
    pub fn records(&self) -> &[Value] {
        &self.records
    }

    /// The raw stdout line of `records()[index]`.
    pub fn raw_line(&self, index: usize) -> &str {
        &self.raw[index]
    }

    /// The index of `record` in `records()` (first equal record).
    pub fn index_of(&self, record: &Value) -> Option<usize> {
        self.records.iter().position(|r| r == record)
    }

    /// Raw stderr once `done` holds for it (or the wait's deadline passed): messages another
    /// thread of pi wrote before a record may still be on their way through the harness.
    pub fn stderr_when(&self, done: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + self.timeout;
        loop {
            let stderr = self.stderr_raw();
            if done(&stderr) || Instant::now() >= until {
                return stderr;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr_text(&self) -> String {
        let bytes = self.stderr.lock().map(|b| b.clone()).unwrap_or_default();
        format!(
            "--- pi stderr ---\n{}\n--- end stderr ---",
            String::from_utf8_lossy(&bytes)
        )
    }

    fn describe(&self, from: usize) -> String {
        let mut out = String::new();
        for (index, raw) in self.raw.iter().enumerate().skip(from) {
            let shown: String = raw.chars().take(400).collect();
            out.push_str(&format!("  [{index}] {shown}\n"));
        }
        if out.is_empty() {
            out.push_str("  (none)\n");
        }
        out
    }

    /// Closes stdin and waits for the exit; panics if the process outlives the deadline.
    #[track_caller]
    pub fn close_and_wait(&mut self) -> ExitStatus {
        drop(self.stdin.take());
        let deadline = self.deadline();
        match self.wait_until(deadline) {
            Some(status) => status,
            None => panic!(
                "pi did not exit within {:?} after stdin closed\n{}",
                self.timeout,
                self.stderr_text()
            ),
        }
    }

    fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        if let Some(status) = self.exit_status {
            return Some(status);
        }
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.exit_status = Some(status);
                    // What pi wrote to stderr before exiting may not be read yet (a loaded
                    // machine, a quick exit): wait for the reader's EOF, bounded, since a child
                    // of pi may still hold the pipe.
                    let _ = self.stderr_eof.recv_timeout(Duration::from_secs(2));
                    return Some(status);
                }
                Ok(None) if Instant::now() < deadline => {
                    // Polling an exit has no event to wait on in std; this bounds the wait.
                    thread::sleep(Duration::from_millis(10));
                }
                _ => return None,
            }
        }
    }
}

/// The stdout reader: splits on LF only (U+2028/U+2029 are ordinary characters inside records)
/// and forwards each line. It waits in `poll` with a short tick so that `close_requested` can make
/// it drop the pipe's read end (a client that stops reading and closes its side).
fn read_stdout_lines(
    mut stdout: ChildStdout,
    lines: &crossbeam_channel::Sender<Line>,
    close_requested: &AtomicBool,
) {
    let fd = stdout.as_raw_fd();
    let mut pending: Vec<u8> = Vec::new();
    let mut searched = 0;
    let mut chunk = vec![0u8; 256 * 1024];
    loop {
        if close_requested.load(Ordering::SeqCst) {
            return; // drops `stdout`: the child's next write gets EPIPE
        }
        let mut poll_fd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut poll_fd, 1, 50) };
        if ready == 0 {
            continue;
        }
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
        let n = match stdout.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        while let Some(offset) = memchr::memchr(b'\n', &pending[searched..]) {
            let end = searched + offset;
            let line = pending[start..end].to_vec();
            start = end + 1;
            searched = start;
            let line = match String::from_utf8(line) {
                Ok(text) => Line::Text(text),
                Err(err) => Line::Binary(err.into_bytes()),
            };
            if lines.send(line).is_err() {
                return;
            }
        }
        pending.drain(..start);
        // A long record arrives in many chunks: never rescan what has no LF.
        searched = pending.len();
    }
    if !pending.is_empty() {
        let line = match String::from_utf8(pending) {
            Ok(text) => Line::Text(text),
            Err(err) => Line::Binary(err.into_bytes()),
        };
        let _ = lines.send(line);
    }
}

impl Pi {
    /// The child's process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to the child.
    pub fn signal(&self, signal: i32) {
        // SAFETY: plain kill(2) on our own child's pid.
        let result = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(result, 0, "kill({}, {signal}) failed", self.pid());
    }

    /// Sends a command, tolerating a process that already went away; false if the write failed.
    pub fn try_send(&mut self, command: Value) -> bool {
        let mut line = serde_json::to_vec(&command).expect("serialize command");
        line.push(b'\n');
        match self.stdin.as_mut() {
            Some(stdin) => stdin.write_all(&line).and_then(|()| stdin.flush()).is_ok(),
            None => false,
        }
    }

    /// Closes stdin without waiting for anything.
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Closes our end of the child's stdout (after taking in whatever was already read) and
    /// waits until the reader thread has let go of it.
    #[track_caller]
    pub fn close_stdout(&mut self) {
        self.close_stdout.store(true, Ordering::SeqCst);
        let deadline = self.deadline();
        while self.pull(deadline) {}
        assert!(
            self.stdout_closed,
            "the stdout reader did not stop before the deadline"
        );
    }

    /// Waits for the process to exit (stdin stays as it is); panics at the deadline.
    #[track_caller]
    pub fn wait_for_exit(&mut self) -> ExitStatus {
        let deadline = self.deadline();
        match self.wait_until(deadline) {
            Some(status) => status,
            None => panic!(
                "pi did not exit within {:?}\n{}",
                self.timeout,
                self.stderr_text()
            ),
        }
    }

    /// Takes in every remaining stdout line until the pipe closes (after an exit).
    #[track_caller]
    pub fn drain_until_stdout_closes(&mut self) {
        let deadline = self.deadline();
        while self.pull(deadline) {}
        assert!(self.stdout_closed, "stdout still open at the deadline");
    }

    /// The agent dir's `settings.json`, parsed (`Value::Null` if it does not exist).
    pub fn agent_settings(&self) -> Value {
        match std::fs::read_to_string(self.agent_dir().join("settings.json")) {
            Ok(text) => serde_json::from_str(&text)
                .unwrap_or_else(|err| panic!("settings.json is not JSON ({err}): {text}")),
            Err(_) => Value::Null,
        }
    }

    /// Raw stderr so far.
    pub fn stderr_raw(&self) -> String {
        let bytes = self.stderr.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Whether the tests run as root (some cases differ for root, e.g. capabilities).
pub fn is_root() -> bool {
    // SAFETY: no arguments, no side effects.
    unsafe { libc::geteuid() == 0 }
}

/// A file's permission bits (set-id and sticky included).
pub fn file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Writes the agent dir's `mcp.json` with these `mcpServers`, `direct` unless an entry sets
/// `exposure`.
pub fn write_mcp_json(workspace: &Workspace, mut servers: Value) {
    // The model calls these servers' tools itself: `direct` exposure unless the entry says
    // otherwise (pi 1.6.0's default, `codemode`, declares none of them).
    for entry in servers
        .as_object_mut()
        .into_iter()
        .flat_map(|s| s.values_mut())
    {
        if let Some(entry) = entry.as_object_mut() {
            entry
                .entry("exposure")
                .or_insert_with(|| Value::String("direct".into()));
        }
    }
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        serde_json::to_string_pretty(&json!({"mcpServers": servers})).unwrap(),
    )
    .unwrap();
}

/// Polls `get_mcp_servers` (pi-rs only) until `wanted` accepts its `data`, or the session's
/// timeout passes; returns the last `data`.
#[track_caller]
pub fn mcp_servers_until(pi: &mut Pi, wanted: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + pi.timeout();
    loop {
        let id = format!("mcp-servers-{}", pi.records().len());
        let data = pi.command(&id, "get_mcp_servers", json!({}))["data"].clone();
        if wanted(&data) || Instant::now() > until {
            return data;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The command names of a `get_commands` response, in its order.
#[track_caller]
pub fn command_names(response: &Value) -> Vec<String> {
    response["data"]["commands"]
        .as_array()
        .unwrap_or_else(|| panic!("no commands: {response}"))
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// The entry of server `name` in a `get_mcp_servers` answer's `data`.
pub fn mcp_server<'a>(data: &'a Value, name: &str) -> Option<&'a Value> {
    data["servers"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
}

/// The next `notify` whose message starts with `prefix` (records before it are consumed):
/// its message and `notifyType`.
#[track_caller]
pub fn next_notify(pi: &mut Pi, prefix: &str) -> (String, String) {
    let deadline = pi.deadline();
    let records = pi.recv_until(
        |r| {
            r["type"] == "extension_ui_request"
                && r["method"] == "notify"
                && r["message"].as_str().is_some_and(|m| m.starts_with(prefix))
        },
        deadline,
    );
    let notice = records.last().expect("a notify record");
    let text = |key: &str| notice[key].as_str().unwrap_or_default().to_string();
    (text("message"), text("notifyType"))
}

/// A `/mcp login` over RPC, once it started for `server`, up to pi's dialog for a pasted
/// redirect URL: the authorization URL from the `Sign in to MCP server …` notify, and the
/// `input` dialog.
#[track_caller]
pub fn mcp_sign_in_dialog(pi: &mut Pi, server: &str) -> (String, Value) {
    let shown = format!("Sign in to MCP server \"{server}\" in your browser:\n");
    let (text, level) = next_notify(pi, &shown);
    assert_eq!(level, "info");
    let url = text.strip_prefix(&shown).expect("the prefix").to_string();
    let deadline = pi.deadline();
    let dialog = pi
        .recv_until(|r| r["method"] == "input", deadline)
        .pop()
        .expect("the sign-in dialog");
    (url, dialog)
}

/// Whether `pid` is a live process (a zombie counts as dead: it only waits to be reaped).
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

/// Waits until `pid` is gone; false if it is still alive after `timeout`.
pub fn wait_until_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !process_alive(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        // A process ending has no event we can wait on from here; poll with a bound.
        thread::sleep(Duration::from_millis(10));
    }
}

/// The result of a one-shot run (print or JSON mode).
pub struct CliRun {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub workspace: Workspace,
}

impl CliRun {
    pub fn cwd(&self) -> PathBuf {
        self.workspace.cwd()
    }

    /// stdout as JSON lines (JSON mode), each of which must parse.
    #[track_caller]
    pub fn stdout_records(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }
}

/// Runs the binary once with `args` (after `--provider <p> --model <m> --no-session`) in a
/// prepared dir, feeding `stdin` (closed right after; `None` = an empty pipe). Kills it and
/// panics if it outlives the deadline.
#[track_caller]
pub fn run_cli(setup: &Setup, args: &[&str], stdin: Option<&[u8]>) -> CliRun {
    let mut words = vec![
        "--provider",
        &setup.provider,
        "--model",
        &setup.model,
        "--no-session",
    ];
    words.extend(setup.extra_args.iter().map(String::as_str));
    words.extend(args);
    run_words(setup, &words, stdin)
}

/// Runs the binary once with exactly `args` (no provider, model or session flags: the first
/// word is the user's) in a prepared dir, otherwise as [`run_cli`].
#[track_caller]
pub fn run_words(setup: &Setup, args: &[&str], stdin: Option<&[u8]>) -> CliRun {
    let workspace = Workspace::new();
    let mut command = prepare(setup, &workspace);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", binary().display()));
    let mut input = child.stdin.take().expect("stdin piped");
    let bytes = stdin.map(<[u8]>::to_vec).unwrap_or_default();
    let writer = thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let mut out_pipe = child.stdout.take().expect("stdout piped");
    let mut err_pipe = child.stderr.take().expect("stderr piped");
    let out_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out_pipe.read_to_end(&mut buf);
        buf
    });
    let err_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err_pipe.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + default_timeout();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let err = err_reader.join().unwrap_or_default();
                panic!(
                    "pi {args:?} did not exit before the deadline; stderr:\n{}",
                    String::from_utf8_lossy(&err)
                );
            }
        }
    };
    let _ = writer.join();
    let stdout = String::from_utf8(out_reader.join().unwrap_or_default()).expect("stdout is UTF-8");
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    CliRun {
        status,
        stdout,
        stderr,
        workspace,
    }
}

impl Drop for Pi {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        if self.wait_until(deadline).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            if !thread::panicking() {
                eprintln!("pi did not exit within 5 s of stdin closing; killed it");
            }
        }
        if thread::panicking() {
            let from = self.raw.len().saturating_sub(40);
            eprintln!(
                "--- last pi records ---\n{}{}",
                self.describe(from),
                self.stderr_text()
            );
        }
    }
}

/// `records` without responses (events only).
pub fn events(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r["type"] != "response")
        .cloned()
        .collect()
}

/// A gap in [`expect_transcript`] steps: any number of records (none included).
pub const GAP: &str = "..";

/// Checks that `records` are exactly the sequence `steps` describes and returns the records the
/// non-gap steps matched, in order (so `let [response, assistant_end] = expect_transcript(..)`
/// names them instead of indexing the transcript). A step is a pattern record, or `json!(GAP)`
/// for any number of records; without a leading or trailing gap the pattern must match from the
/// first or to the last record. Patterns match like rust-analyzer's and cargo's expectations: an
/// object pattern lists only the fields that matter (each matched recursively), an array matches
/// element by element, a string containing `[..]` matches any text in its place, `"{...}"`
/// matches any value that is present; everything else must be equal. Panics with the transcript
/// and the step that could not match.
#[track_caller]
pub fn expect_transcript<'a, const N: usize>(
    records: &'a [Value],
    steps: &[Value],
) -> [&'a Value; N] {
    let wanted = steps.iter().filter(|step| !is_gap(step)).count();
    assert_eq!(
        wanted, N,
        "expect_transcript: {wanted} non-gap steps but {N} records asked for"
    );
    check_transcript(records, steps)
        .try_into()
        .expect("one record per non-gap step")
}

/// [`expect_transcript`] for any number of steps: the matched records as a `Vec`.
#[track_caller]
pub fn check_transcript<'a>(records: &'a [Value], steps: &[Value]) -> Vec<&'a Value> {
    let mut matched = Vec::new();
    if !match_steps(records, steps, &mut matched) {
        let mut furthest = 0;
        furthest_step(records, steps, 0, &mut furthest);
        panic!(
            "transcript does not match at step #{furthest} {}\nsteps:\n{}\nrecords:\n{}",
            steps
                .get(furthest)
                .map(Value::to_string)
                .unwrap_or_default(),
            steps
                .iter()
                .enumerate()
                .map(|(i, step)| format!("  #{i} {step}"))
                .collect::<Vec<_>>()
                .join("\n"),
            records
                .iter()
                .enumerate()
                .map(|(i, record)| format!("  [{i}] {record}"))
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
    matched
}

fn is_gap(step: &Value) -> bool {
    step.as_str() == Some(GAP)
}

fn match_steps<'a>(records: &'a [Value], steps: &[Value], matched: &mut Vec<&'a Value>) -> bool {
    let Some((step, rest)) = steps.split_first() else {
        return records.is_empty();
    };
    if is_gap(step) {
        return (0..=records.len()).any(|skip| match_steps(&records[skip..], rest, matched));
    }
    let Some((record, later)) = records.split_first() else {
        return false;
    };
    if !matches_pattern(record, step) {
        return false;
    }
    matched.push(record);
    if match_steps(later, rest, matched) {
        return true;
    }
    matched.pop();
    false
}

/// How many steps can be matched at best, for the failure message.
fn furthest_step(records: &[Value], steps: &[Value], done: usize, furthest: &mut usize) {
    *furthest = (*furthest).max(done);
    let Some((step, rest)) = steps.split_first() else {
        return;
    };
    if is_gap(step) {
        for skip in 0..=records.len() {
            furthest_step(&records[skip..], rest, done + 1, furthest);
        }
    } else if let Some((record, later)) = records.split_first()
        && matches_pattern(record, step)
    {
        furthest_step(later, rest, done + 1, furthest);
    }
}

/// Whether `actual` matches `pattern` (see [`expect_transcript`]).
pub fn matches_pattern(actual: &Value, pattern: &Value) -> bool {
    match (pattern, actual) {
        (Value::String(p), _) if p == "{...}" => true,
        (Value::String(p), Value::String(a)) if p.contains("[..]") => wildcard_text(p, a),
        (Value::Object(p), Value::Object(a)) => p
            .iter()
            .all(|(key, p)| a.get(key).is_some_and(|a| matches_pattern(a, p))),
        (Value::Array(p), Value::Array(a)) => {
            p.len() == a.len() && p.iter().zip(a).all(|(p, a)| matches_pattern(a, p))
        }
        _ => pattern == actual,
    }
}

/// `text` matches `pattern` where each `[..]` stands for any run of characters.
fn wildcard_text(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// Short labels for an event sequence: `message_start:user`, `message_update:text_delta`, ...
pub fn event_labels(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            let ty = r["type"].as_str().unwrap_or("<no type>");
            match ty {
                "message_start" | "message_end" => {
                    format!("{ty}:{}", r["message"]["role"].as_str().unwrap_or("?"))
                }
                "message_update" => format!(
                    "{ty}:{}",
                    r["assistantMessageEvent"]["type"].as_str().unwrap_or("?")
                ),
                "response" => format!("{ty}:{}", r["command"].as_str().unwrap_or("?")),
                _ => ty.to_string(),
            }
        })
        .collect()
}

/// Asserts that `actual` has exactly the keys of `expected`, in that order.
#[track_caller]
pub fn assert_keys(actual: &Value, expected: &[&str]) {
    let keys: Vec<&str> = actual
        .as_object()
        .unwrap_or_else(|| panic!("expected an object, got {actual}"))
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, expected, "keys of {actual}");
}

/// Writes `contents` to `path` with mode 0755 (an executable extension), creating its parents.
#[track_caller]
pub fn write_executable(path: &Path, contents: &str) {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create parent dir");
    }
    std::fs::write(path, contents)
        .unwrap_or_else(|err| panic!("cannot write {}: {err}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|err| panic!("cannot chmod {}: {err}", path.display()));
}

/// Waits until the text file at `path` satisfies `done` (a child process writes it) and returns
/// its contents; panics with what it holds after `timeout`.
#[track_caller]
pub fn wait_for_file(path: &Path, timeout: Duration, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if done(&text) {
            return text;
        }
        if Instant::now() >= deadline {
            panic!(
                "{} never reached the awaited state; it holds:\n{text}",
                path.display()
            );
        }
        // Another process writes the file; there is no event to wait on, so poll with a bound.
        thread::sleep(Duration::from_millis(20));
    }
}

/// The system prompt a provider request carried: Anthropic `system` text blocks joined, or the
/// content of the OpenAI `system`/`developer` message at the head of `messages`. Empty if none.
pub fn system_prompt_of(request: &crate::fake_provider::RecordedRequest) -> String {
    let text_of = |value: &Value| match value {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    };
    if !request.body["system"].is_null() {
        return text_of(&request.body["system"]);
    }
    request
        .messages()
        .first()
        .filter(|m| m["role"] == "system" || m["role"] == "developer")
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Scenario helpers shared by the test files (one home each).

/// Event labels without the streaming noise (`message_update:*`, responses, tool progress):
/// the order of what happened, for sequence assertions.
pub fn flow(records: &[Value]) -> Vec<String> {
    event_labels(records)
        .into_iter()
        .filter(|l| {
            !l.starts_with("message_update:")
                && !l.starts_with("response:")
                && l != "tool_execution_update"
        })
        .collect()
}

/// The assistant `message_end` records' messages of `run`, in order.
pub fn assistant_messages(run: &[Value]) -> Vec<Value> {
    run.iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .map(|r| r["message"].clone())
        .collect()
}

/// Sends a prompt, consumes records through its `agent_end` and returns them; the prompt must
/// have been accepted.
#[track_caller]
pub fn prompt(pi: &mut Pi, id: &str, text: &str) -> Vec<Value> {
    prompt_until(pi, id, text, "agent_end")
}

/// [`prompt`], consuming records through the first `event` (e.g. `agent_settled`).
#[track_caller]
pub fn prompt_until(pi: &mut Pi, id: &str, text: &str, event: &str) -> Vec<Value> {
    pi.send(json!({"id": id, "type": "prompt", "message": text}));
    let run = pi.records_until_event(event);
    let response = pi.response_for(id);
    assert_eq!(response["success"], true, "{response}");
    run
}

/// A script that answers with one tool call per `(tool, args)` (ids `toolu_0`, `toolu_1`, …), one
/// reply each, then the text "done".
pub fn tool_script(calls: &[(&str, Value)]) -> Vec<crate::fake_provider::Reply> {
    let mut script: Vec<_> = calls
        .iter()
        .enumerate()
        .map(|(n, (tool, args))| tool_reply(&format!("toolu_{n}"), tool, args.clone()))
        .collect();
    script.push(text_reply("done"));
    script
}

/// The `tool_execution_end` records of a run, asserting there is one per scripted call.
#[track_caller]
pub fn tool_ends(run: Vec<Value>, calls: usize) -> Vec<Value> {
    let ends: Vec<Value> = run
        .into_iter()
        .filter(|r| r["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends.len(), calls, "one result per call: {ends:?}");
    ends
}

/// get_state's data (asserted successful). `id` must be unique within the test.
#[track_caller]
pub fn state(pi: &mut Pi, id: &str) -> Value {
    let response = pi.command(id, "get_state", json!({}));
    assert_eq!(response["success"], true, "get_state: {response}");
    response["data"].clone()
}

/// A ChatGPT subscription's access token: a JWT whose claims carry the account id (clients read
/// the claims and check no signature).
pub fn codex_token(account: &str) -> String {
    use base64::Engine;
    let claims = json!({"https://api.openai.com/auth": {"chatgpt_account_id": account}});
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("eyJhbGciOiJub25lIn0.{payload}.sig")
}

/// The session file get_state names.
#[track_caller]
pub fn session_file(pi: &mut Pi, id: &str) -> PathBuf {
    let data = state(pi, id);
    PathBuf::from(
        data["sessionFile"]
            .as_str()
            .unwrap_or_else(|| panic!("get_state has no sessionFile: {data}")),
    )
}

/// One Anthropic reply that says `text`.
pub fn text_reply(text: &str) -> crate::fake_provider::Reply {
    crate::fake_provider::Reply::sse(crate::sse::anthropic_text(&[text]))
}

/// One Anthropic reply that calls `tool` with `args`.
pub fn tool_reply(id: &str, tool: &str, args: Value) -> crate::fake_provider::Reply {
    crate::fake_provider::Reply::sse(
        crate::sse::AnthropicStream::new()
            .tool_use(id, tool, &[&args.to_string()])
            .finish("tool_use"),
    )
}

/// The first text block of a `tool_execution_end` record's result ("" when there is none).
pub fn end_text(end: &Value) -> String {
    end["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The text blocks of a tool result (`{content:[...]}`) joined.
pub fn result_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// The text of the last user message in a provider request (either API shape), wherever it
/// stands among the request's messages.
pub fn last_user_text(request: &crate::fake_provider::RecordedRequest) -> String {
    let last = request
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .cloned()
        .unwrap_or(Value::Null);
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The text of a request message: a string content, or its text blocks joined.
pub fn message_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect(),
        _ => String::new(),
    }
}

/// The Anthropic `tool_result` block answering `tool_use_id` in a request, if any.
pub fn tool_result_block(request: &crate::fake_provider::RecordedRequest, id: &str) -> Value {
    request
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no tool_result for {id} in {:?}", request.body))
}

/// The text of an Anthropic `tool_result` block (string content or text blocks).
pub fn tool_result_block_text(block: &Value) -> String {
    match &block["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// A tool declaration's shape: `value` serialized in its key order, every `description` as `D`
/// (pi-rs words its tools its own way; the keys, their order and the schemas are what must be
/// pi 1.6.0's).
pub fn tool_shape(value: &Value) -> String {
    fn shape(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, v)| {
                        let v = if key == "description" {
                            json!("D")
                        } else {
                            shape(v)
                        };
                        (key.clone(), v)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
            other => other.clone(),
        }
    }
    shape(value).to_string()
}

/// The number after `marker` in `text` (e.g. a pid a command printed).
pub fn number_after(text: &str, marker: &str) -> Option<i32> {
    let start = text.find(marker)? + marker.len();
    let digits: String = text[start..]
        .chars()
        .skip_while(|c| c.is_whitespace())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Waits for a bash tool update whose output contains `marker` and returns the pid printed
/// after it.
#[track_caller]
pub fn wait_for_tool_pid(pi: &mut Pi, marker: &str) -> i32 {
    let deadline = pi.deadline();
    let records = pi.recv_until(
        |r| {
            r["type"] == "tool_execution_update"
                && result_text(&r["partialResult"]).contains(marker)
        },
        deadline,
    );
    let update = records.last().expect("the update");
    number_after(&result_text(&update["partialResult"]), marker)
        .unwrap_or_else(|| panic!("no pid after {marker:?} in {update}"))
}

/// A shell command that blocks until the test creates `gate` in the cwd.
pub const GATED_COMMAND: &str = "while [ ! -e gate ]; do sleep 0.02; done; echo released";

/// Lets a gated tool call finish.
pub fn open_gate(pi: &Pi) {
    std::fs::write(pi.cwd().join("gate"), "").expect("create gate file");
}

/// A prerequisite a test needs is missing: under `CI=true` that is a failure (CI installs every
/// prerequisite, so a skip would hide a test that never ran); elsewhere the test is skipped with
/// the reason printed.
#[track_caller]
pub fn prerequisite_missing(reason: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true and a prerequisite is missing: {reason}");
    }
    eprintln!("skipped: {reason}");
}

/// Whether the tool a test needs is installed (see `prerequisite_missing` for when it is not).
#[track_caller]
pub fn require(tool: &str, found: bool) -> bool {
    if !found {
        prerequisite_missing(&format!("{tool} is not installed"));
    }
    found
}

/// `tool` on PATH (or in /usr/sbin, /usr/bin, where a distribution's daemons live).
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

/// Runs the `openssl` CLI in `dir`; its stderr is in the failure message.
#[track_caller]
pub fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A pseudo-terminal: (master fd, slave fd, slave path).
pub fn open_pty() -> (i32, i32, String) {
    // SAFETY: the usual posix_openpt sequence; the buffer outlives ptsname_r.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .into_owned();
        let slave = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(slave >= 0, "open {path}");
        (master, slave, path)
    }
}
