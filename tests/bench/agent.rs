//! One measured `pi --mode rpc` process, driven from the bench's own thread.
//!
//! `Agent::spawn` prepares a private temp dir (agent dir with `models.json` pointing at a fake
//! provider, a cwd, HOME), scrubs the environment (the integration harness's allowlist, plus
//! `PI_OFFLINE=1`) and starts the binary. Unlike the test harness, stdout is read on the caller's
//! thread with `poll(2)` and a deadline, so the bench decides when *not* to read (the stall
//! figure) and counts every byte. Records are decoded into the few fields the bench needs;
//! nothing here panics on what the process writes: every failure is an `Err(String)` that ends up
//! as "n/a (reason)" in the table.
//!
//! `/proc/<pid>` helpers read RSS (VmRSS, VmHWM) and CPU time (utime+stime) while the process is
//! alive. Ends: `Drop` closes stdin and waits (bounded, reading and discarding stdout so a
//! process blocked on a full pipe can finish), then kills the process if it is still there.

use std::borrow::Cow;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::fake_provider::fixture;
use crate::support::{TempDir, isolate_env};

/// How much of stderr is kept for failure reasons.
const STDERR_TAIL: usize = 4096;

/// What to start and where.
pub struct SpawnOptions<'a> {
    pub binary: &'a Path,
    pub base_url: String,
    /// Extra arguments after `--provider fake-anthropic --model fake-claude`.
    pub extra_args: Vec<String>,
    /// Contents of a session file to open with `--session` (otherwise `--no-session`);
    /// `"__CWD__"` in it becomes the run's cwd.
    pub session_file: Option<String>,
    /// Files created in the cwd before the start: (relative path, contents).
    pub files: Vec<(String, Vec<u8>)>,
    /// Files created in the agent dir before the start (`mcp.json`, `settings.json`).
    pub agent_files: Vec<(String, Vec<u8>)>,
    /// Reads give up (and the run is reported n/a) once the process's RSS passes this, so a
    /// process that buffers without bound cannot take the machine down.
    pub rss_cap_kb: u64,
    /// Without `session_file`: keep sessions on (files in the agent dir) instead of
    /// `--no-session`.
    pub sessions: bool,
    /// Extra environment (after scrubbing), e.g. test hooks.
    pub env: Vec<(&'static str, String)>,
    /// Replaces the fixture's provider key (`test-key`): a key under 8 bytes or a dummy such as
    /// `ollama` leaves pi-rs's redaction set empty.
    pub api_key: Option<&'a str>,
    /// Replaces everything after the program (`--mode rpc`, the session and model options):
    /// another front door (`--mode acp`) or an adapter (`node pi-acp`). The agent dir's
    /// settings name the fake model as the default (an adapter passes no model options).
    pub front: Option<Vec<String>>,
}

impl<'a> SpawnOptions<'a> {
    /// A plain RPC run of `binary` against the fake at `base_url`: no extra arguments, files or
    /// environment, `--no-session`, the fixture's key.
    pub fn plain(binary: &'a Path, base_url: String, rss_cap_kb: u64) -> SpawnOptions<'a> {
        SpawnOptions {
            binary,
            base_url,
            extra_args: Vec::new(),
            session_file: None,
            files: Vec::new(),
            agent_files: Vec::new(),
            rss_cap_kb,
            sessions: false,
            env: Vec::new(),
            api_key: None,
            front: None,
        }
    }
}

/// The fields of one stdout record the bench looks at.
#[derive(Debug, Default)]
pub struct Record {
    pub kind: String,
    pub id: Option<String>,
    pub command: Option<String>,
    pub success: Option<bool>,
    pub error: Option<String>,
    /// `assistantMessageEvent.type` of a `message_update`.
    pub event_kind: Option<String>,
    /// `assistantMessageEvent.delta` of a `message_update`.
    pub delta: Option<String>,
}

#[derive(Deserialize)]
struct RawRecord<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    id: Option<String>,
    command: Option<String>,
    success: Option<bool>,
    error: Option<String>,
    #[serde(rename = "assistantMessageEvent")]
    event: Option<RawEvent>,
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(rename = "type")]
    kind: Option<String>,
    delta: Option<String>,
}

impl Record {
    /// Decodes one line. Deeply nested records (a long session's `get_tree`) exceed serde_json's
    /// recursion limit, so a failed parse falls back to reading the top-level keys from the head
    /// of the line, where pi writes them.
    pub fn parse(line: &[u8]) -> Result<Record, String> {
        match serde_json::from_slice::<RawRecord>(line) {
            Ok(raw) => Ok(Record {
                kind: raw.kind.map(Cow::into_owned).unwrap_or_default(),
                id: raw.id,
                command: raw.command,
                success: raw.success,
                error: raw.error,
                event_kind: raw.event.as_ref().and_then(|e| e.kind.clone()),
                delta: raw.event.and_then(|e| e.delta),
            }),
            Err(err) if err.to_string().contains("recursion limit") => Ok(Record::from_head(line)),
            Err(err) => {
                let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
                Err(format!("stdout line is not a JSON record ({err}): {shown}"))
            }
        }
    }

    fn from_head(line: &[u8]) -> Record {
        let head = String::from_utf8_lossy(&line[..line.len().min(1024)]).into_owned();
        let string_field = |key: &str| {
            let marker = format!("\"{key}\":\"");
            let start = head.find(&marker)? + marker.len();
            let end = head[start..].find('"')? + start;
            Some(head[start..end].to_string())
        };
        let success = if head.contains("\"success\":true") {
            Some(true)
        } else if head.contains("\"success\":false") {
            Some(false)
        } else {
            None
        };
        Record {
            kind: string_field("type").unwrap_or_default(),
            id: string_field("id"),
            command: string_field("command"),
            success,
            error: string_field("error"),
            event_kind: None,
            delta: None,
        }
    }

    pub fn is_response_to(&self, id: &str) -> bool {
        self.kind == "response" && self.id.as_deref() == Some(id)
    }
}

/// What a record visitor wants next.
pub enum Flow {
    Continue,
    Stop,
}

pub struct Agent {
    child: Child,
    pub pid: u32,
    /// The run's working directory.
    pub cwd: std::path::PathBuf,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    /// Bytes read from stdout and not yet returned as lines; lines start at `pending_start`.
    pending: Vec<u8>,
    pending_start: usize,
    stdout_eof: bool,
    /// Every stdout byte read so far.
    pub stdout_bytes: u64,
    stderr: Arc<Mutex<Vec<u8>>>,
    rss_cap_kb: u64,
    rss_checked_at: Instant,
    /// Taken just before the spawn.
    pub spawned_at: Instant,
    /// Kept for its drop (removes the temp dir after the process is gone).
    _dir: TempDir,
}

impl Agent {
    pub fn spawn(options: &SpawnOptions) -> Result<Agent, String> {
        let dir = TempDir::new("bench");
        let agent_dir = dir.path().join("agent");
        let cwd = dir.path().join("work");
        let prepare = || -> std::io::Result<()> {
            std::fs::create_dir_all(&agent_dir)?;
            std::fs::create_dir_all(&cwd)?;
            let mut models = fixture("models.json").replace("__BASE_URL__", &options.base_url);
            if let Some(key) = options.api_key {
                models = models.replace("\"test-key\"", &serde_json::Value::from(key).to_string());
            }
            std::fs::write(agent_dir.join("models.json"), models)?;
            if options.front.is_some() {
                let settings =
                    r#"{"defaultProvider":"fake-anthropic","defaultModel":"fake-claude"}"#;
                std::fs::write(agent_dir.join("settings.json"), settings)?;
            }
            for (relative, contents) in &options.files {
                std::fs::write(cwd.join(relative), contents)?;
            }
            for (relative, contents) in &options.agent_files {
                std::fs::write(agent_dir.join(relative), contents)?;
            }
            if let Some(contents) = &options.session_file {
                let cwd_json = serde_json::Value::from(cwd.display().to_string()).to_string();
                let contents = contents.replacen("\"__CWD__\"", &cwd_json, 1);
                std::fs::write(dir.path().join("session.jsonl"), contents)?;
            }
            Ok(())
        };
        prepare().map_err(|err| format!("cannot prepare the temp dir: {err}"))?;

        let mut command = Command::new(options.binary);
        if let Some(front) = &options.front {
            command.args(front);
        } else {
            command.args(["--mode", "rpc"]);
            match &options.session_file {
                Some(_) => command
                    .arg("--session")
                    .arg(dir.path().join("session.jsonl")),
                None if options.sessions => &mut command,
                None => command.arg("--no-session"),
            };
            command
                .args(["--provider", "fake-anthropic", "--model", "fake-claude"])
                .args(&options.extra_args);
        }
        command.current_dir(&cwd);
        isolate_env(&mut command, &agent_dir, dir.path());
        command
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let spawned_at = Instant::now();
        let mut child = command
            .spawn()
            .map_err(|err| format!("cannot start {}: {err}", options.binary.display()))?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("stdout was not piped")?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let sink = Arc::clone(&stderr);
            // Keeps only the tail: the reference can be chatty, and only the end explains a failure.
            let _ = thread::Builder::new()
                .name("bench-stderr".into())
                .spawn(move || {
                    let mut chunk = [0u8; 8192];
                    while let Ok(n) = pipe.read(&mut chunk) {
                        if n == 0 {
                            return;
                        }
                        if let Ok(mut tail) = sink.lock() {
                            tail.extend_from_slice(&chunk[..n]);
                            if tail.len() > 2 * STDERR_TAIL {
                                let cut = tail.len() - STDERR_TAIL;
                                tail.drain(..cut);
                            }
                        }
                    }
                });
        }
        Ok(Agent {
            child,
            pid,
            cwd,
            stdin,
            stdout,
            pending: Vec::new(),
            pending_start: 0,
            stdout_eof: false,
            stdout_bytes: 0,
            stderr,
            rss_cap_kb: options.rss_cap_kb,
            rss_checked_at: spawned_at,
            spawned_at,
            _dir: dir,
        })
    }

    /// The most telling part of stderr for a failure reason: the last line that mentions an
    /// error (Node prints its stack after the message), else the last non-empty line.
    pub fn stderr_tail(&self) -> String {
        let bytes = self.stderr.lock().map(|b| b.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if std::env::var_os("PI_BENCH_VERBOSE").is_some() {
            eprintln!("--- stderr of pid {} ---\n{text}\n--- end ---", self.pid);
        }
        let is_message = |line: &&&str| {
            !line.starts_with("at ")
                && (line.contains("Error:") || line.contains("FATAL") || line.contains("error:"))
        };
        lines
            .iter()
            .rev()
            .find(is_message)
            .or(lines.last())
            .map(|line| line.to_string())
            .unwrap_or_default()
    }

    /// Adds the stderr tail and the exit status (if any) to a failure reason.
    pub fn explain(&mut self, reason: &str) -> String {
        let mut out = reason.to_string();
        if let Ok(Some(status)) = self.child.try_wait() {
            out.push_str(&format!("; process ended: {status}"));
        }
        let tail = self.stderr_tail();
        if !tail.is_empty() {
            let tail: String = tail.chars().take(300).collect();
            out.push_str(&format!("; stderr: {tail}"));
        }
        out
    }

    pub fn send(&mut self, command: &serde_json::Value) -> Result<(), String> {
        use std::io::Write;
        let stdin = self.stdin.as_mut().ok_or("stdin already closed")?;
        let mut line = command.to_string().into_bytes();
        line.push(b'\n');
        stdin
            .write_all(&line)
            .and_then(|()| stdin.flush())
            .map_err(|err| format!("write to stdin: {err}"))
            .map_err(|reason| self.explain(&reason))
    }

    /// Reads until one full line is available; `Ok(None)` at EOF. Gives up at `deadline` or when
    /// the total stdout passes `byte_cap`.
    pub fn read_line(
        &mut self,
        deadline: Instant,
        byte_cap: u64,
    ) -> Result<Option<Vec<u8>>, String> {
        // Bytes before `searched` hold no newline: each read is searched once, so a 35 MB line
        // arriving in 64 KB pipe reads costs one pass, not one pass per read (which made the
        // harness, not the agent, the bulk of a long session's get_tree figure).
        let mut searched = self.pending_start;
        loop {
            if let Some(offset) = memchr::memchr(b'\n', &self.pending[searched..]) {
                let end = searched + offset;
                let line = self.pending[self.pending_start..end].to_vec();
                self.pending_start = end + 1;
                return Ok(Some(line));
            }
            searched = self.pending.len();
            if self.stdout_eof {
                return Ok(None);
            }
            if self.stdout_bytes > byte_cap {
                return Err(format!(
                    "stdout passed the cap of {} MB",
                    byte_cap / (1024 * 1024)
                ));
            }
            self.check_rss_cap()?;
            // Drop consumed bytes before growing the buffer.
            if self.pending_start > 0 {
                self.pending.drain(..self.pending_start);
                searched -= self.pending_start;
                self.pending_start = 0;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err("deadline passed while waiting for stdout".into());
            }
            if !self.wait_readable(deadline - now)? {
                continue;
            }
            let old_len = self.pending.len();
            self.pending.resize(old_len + 1024 * 1024, 0);
            match self.stdout.read(&mut self.pending[old_len..]) {
                Ok(0) => {
                    self.pending.truncate(old_len);
                    self.stdout_eof = true;
                }
                Ok(n) => {
                    self.pending.truncate(old_len + n);
                    self.stdout_bytes += n as u64;
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {
                    self.pending.truncate(old_len);
                }
                Err(err) => {
                    self.pending.truncate(old_len);
                    return Err(format!("read stdout: {err}"));
                }
            }
        }
    }

    /// `Err` once VmRSS passes the cap; reads /proc at most every 50 ms.
    pub fn check_rss_cap(&mut self) -> Result<(), String> {
        if self.rss_checked_at.elapsed() < Duration::from_millis(50) {
            return Ok(());
        }
        self.rss_checked_at = Instant::now();
        match self.rss_kb() {
            Some(kb) if kb > self.rss_cap_kb => Err(format!(
                "RSS reached {} MB, past the cap of {} MB (PI_BENCH_RSS_CAP_MB)",
                kb / 1024,
                self.rss_cap_kb / 1024
            )),
            _ => Ok(()),
        }
    }

    /// Sleeps for `pause` without reading stdout, watching the RSS cap.
    pub fn pause_reading(&mut self, pause: Duration) -> Result<(), String> {
        let until = Instant::now() + pause;
        while Instant::now() < until {
            thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
            self.check_rss_cap()?;
        }
        Ok(())
    }

    /// `poll(2)` on stdout; true when a read will not block.
    fn wait_readable(&self, wait: Duration) -> Result<bool, String> {
        let mut fd = libc::pollfd {
            fd: self.stdout.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = wait.as_millis().clamp(1, 1000) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut fd, 1, millis) };
        if ready < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(format!("poll stdout: {err}"));
        }
        Ok(ready > 0)
    }

    /// Hands every record to `visit` until it says `Stop`; fails on EOF, deadline or cap.
    pub fn pump(
        &mut self,
        deadline: Instant,
        byte_cap: u64,
        mut visit: impl FnMut(&Record, usize) -> Flow,
    ) -> Result<(), String> {
        loop {
            let line = match self.read_line(deadline, byte_cap) {
                Ok(Some(line)) => line,
                Ok(None) => return Err(self.explain("stdout closed before the awaited record")),
                Err(reason) => return Err(self.explain(&reason)),
            };
            let record = Record::parse(&line)?;
            if let Flow::Stop = visit(&record, line.len()) {
                return Ok(());
            }
        }
    }

    /// Sends `{"id":id,"type":ty}` and waits for its response; `Err` for `success:false` too.
    pub fn request(&mut self, id: &str, ty: &str, deadline: Instant) -> Result<(), String> {
        self.send(&serde_json::json!({"id": id, "type": ty}))?;
        let mut outcome = Ok(());
        self.pump(deadline, u64::MAX, |record, _| {
            // The reference answers an unknown command without its id.
            let unknown_without_id = record.kind == "response"
                && record.id.is_none()
                && record.command.as_deref() == Some(ty)
                && record.success == Some(false);
            if !record.is_response_to(id) && !unknown_without_id {
                return Flow::Continue;
            }
            if record.success != Some(true) {
                outcome = Err(format!(
                    "{} answered success:false: {}",
                    record.command.as_deref().unwrap_or(id),
                    record.error.as_deref().unwrap_or("(no error text)")
                ));
            }
            Flow::Stop
        })?;
        outcome
    }

    /// Closes stdin and waits for the exit; returns the time from close to exit.
    pub fn close_and_time_exit(&mut self, deadline: Instant) -> Result<Duration, String> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Err(format!(
                "the process had already ended ({status}) before stdin closed"
            ));
        }
        drop(self.stdin.take());
        let closed_at = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return Ok(closed_at.elapsed()),
                Ok(None) if Instant::now() < deadline => {
                    self.discard_stdout();
                    // std has no exit event to wait on; a short poll keeps the error below 0.2 ms.
                    thread::sleep(Duration::from_micros(200));
                }
                Ok(None) => {
                    return Err(self.explain("no exit before the deadline after stdin closed"));
                }
                Err(err) => return Err(format!("wait: {err}")),
            }
        }
    }

    /// Reads whatever stdout holds right now, so a writer blocked on the pipe can go on.
    fn discard_stdout(&mut self) {
        let mut chunk = vec![0u8; 64 * 1024];
        while !self.stdout_eof && matches!(self.wait_readable(Duration::from_millis(1)), Ok(true)) {
            match self.stdout.read(&mut chunk) {
                Ok(0) | Err(_) => self.stdout_eof = true,
                Ok(n) => self.stdout_bytes += n as u64,
            }
        }
    }

    /// Ends the process now (for runs that gave up).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn rss_kb(&self) -> Option<u64> {
        proc_status_kb(self.pid, "VmRSS")
    }

    /// The anonymous part of the RSS (heap, stacks, dirtied data): what the process alone costs.
    pub fn rss_anon_kb(&self) -> Option<u64> {
        proc_status_kb(self.pid, "RssAnon")
    }

    pub fn peak_rss_kb(&self) -> Option<u64> {
        proc_status_kb(self.pid, "VmHWM")
    }

    pub fn threads_cpu_time(&self) -> Option<Duration> {
        proc_threads_cpu_time(self.pid)
    }

    pub fn cpu_time(&self) -> Option<Duration> {
        proc_cpu_time(self.pid)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() < deadline => {
                    self.discard_stdout();
                    thread::sleep(Duration::from_millis(5));
                }
                Ok(None) => break,
            }
        }
        eprintln!(
            "bench: pid {} did not exit within 5 s of stdin closing; killing it",
            self.pid
        );
        self.kill();
    }
}

/// VmRSS of `pid` and every process under it (an adapter's agents are its children), in kB.
pub fn tree_rss_kb(pid: u32) -> Option<u64> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let after_name = &stat[stat.rfind(')').unwrap_or(0) + 1..];
        if let Some(parent) = after_name
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
        {
            parents.push((child, parent));
        }
    }
    let mut tree = vec![pid];
    let mut index = 0;
    while index < tree.len() {
        let parent = tree[index];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        index += 1;
    }
    let mut total = proc_status_kb(pid, "VmRSS")?;
    for child in &tree[1..] {
        total += proc_status_kb(*child, "VmRSS").unwrap_or(0);
    }
    Some(total)
}

/// A `kB` line of `/proc/<pid>/status` (VmRSS, VmHWM), in kB.
pub fn proc_status_kb(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        rest.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// Time on CPU of every live thread, from `/proc/<pid>/task/*/schedstat` (nanoseconds): fine
/// enough for spans as short as start-up, where `proc_cpu_time`'s clock ticks are 10 ms.
pub fn proc_threads_cpu_time(pid: u32) -> Option<Duration> {
    let mut nanos = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let text = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        nanos += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(nanos))
}

/// utime + stime of `/proc/<pid>/stat` (all threads of the process).
pub fn proc_cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after its closing paren are plain.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // fields[0] is field 3 (state), so utime (14) and stime (15) are at 11 and 12.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if per_second <= 0 {
        return None;
    }
    Some(Duration::from_secs_f64(ticks as f64 / per_second as f64))
}
