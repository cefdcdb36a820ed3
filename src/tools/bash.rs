//! The bash tool and the shell runner it shares with the RPC `bash` command.
//!
//! `run_shell` starts `<shell> -c <command>` in its own session and process group (stdin null, stdout and
//! stderr merged into one pipe so chunks keep their arrival order), streams output chunks and
//! periodic ticks to a callback, and ends when the shell exited and the pipe closed (or 100 ms
//! after exit when a background grandchild keeps the pipe open). Cancel or timeout SIGKILLs the
//! whole group. `OutputAccumulator` keeps a bounded rolling tail in memory and spills the output
//! to `pi-bash-<16 hex>.log` once it passes the limits: in a private folder of this process
//! (`$TMPDIR/pi-rs-<pid>-<hex>/`, mode 0700, files 0600), decoded and redacted (known
//! credentials never reach the disk; a key split across chunks is held back until it is whole),
//! capped at `MAX_SPILL_BYTES` (the tail is kept and the result says so), and removed at exit
//! when no session file can refer to it (`remove_spill_dir`).
//! The tool (`execute`) turns that into pi's throttled partial results and final text.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::truncate::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, Truncation, format_size, truncate_tail,
};
use super::{ToolContext, ToolOutput};
use crate::child::CancelFlag;
use crate::child::{LiveGroups, find_on_path, group_alive, kill_group};
use crate::js::js_number_string;

/// How often the runner wakes up to check cancel/timeout/exit when no output arrives.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// After the shell exits, how long to keep reading output still held by its descendants.
const EXIT_STDIO_GRACE: Duration = Duration::from_millis(100);
/// Bound on draining the pipe after the whole group is gone (EOF normally comes at once).
const EMPTY_GROUP_DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// Minimum spacing of the tool's partial results.
const UPDATE_THROTTLE: Duration = Duration::from_millis(100);

/// One shell command to run.
#[derive(Clone, Debug)]
pub struct ShellRequest<'a> {
    pub command: &'a str,
    pub cwd: &'a Path,
    /// settings `shellPath`.
    pub shell_path: Option<&'a str>,
    /// settings `shellCommandPrefix`, put on its own line before the command.
    pub command_prefix: Option<&'a str>,
    /// `<agentDir>/bin` is prepended to PATH.
    pub agent_dir: &'a Path,
    /// Seconds; `None` or ≤ 0 means no timeout.
    pub timeout: Option<f64>,
    /// The sandbox the shell enters between fork and exec (`None`: the client's own RPC bash).
    pub sandbox: Option<&'a crate::sandbox::Policy>,
    /// The session variables a tool call sets (`None`: the client's own RPC bash, which keeps
    /// the inherited environment as pi's does).
    pub session_env: Option<&'a [(&'static str, String)]>,
}

/// What the runner reports while the command runs.
pub enum ShellEvent<'a> {
    /// Raw bytes from stdout or stderr, in arrival order.
    Output(&'a [u8]),
    /// Nothing arrived for a poll interval (lets callers flush throttled updates).
    Tick,
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShellOutcome {
    /// Exit code (128 + the signal's number when a signal not sent by us ended the shell);
    /// `None` when it could not be read.
    Exited(Option<i32>),
    TimedOut,
    Aborted,
}

/// Shell process groups still running (tool calls and RPC bash).
static LIVE_SHELLS: LiveGroups = LiveGroups::new();

/// SIGKILLs every shell process group still running (for process shutdown).
pub fn kill_all_shells() {
    LIVE_SHELLS.kill_all();
}

/// The shell to use: settings `shellPath` (must exist), else /bin/bash, else bash on PATH, else sh.
pub fn resolve_shell(custom: Option<&str>) -> Result<String, String> {
    if let Some(path) = custom.filter(|p| !p.is_empty()) {
        if Path::new(path).exists() {
            return Ok(path.to_string());
        }
        return Err(format!("Custom shell path not found: {path}"));
    }
    if Path::new("/bin/bash").exists() {
        return Ok("/bin/bash".to_string());
    }
    if let Some(found) = find_on_path("bash") {
        return Ok(found.to_string_lossy().to_string());
    }
    Ok("sh".to_string())
}

/// PATH with `<agentDir>/bin` in front (unless already listed).
pub fn shell_path_env(agent_dir: &Path) -> String {
    let bin = agent_dir.join("bin").to_string_lossy().to_string();
    let current = std::env::var("PATH").unwrap_or_default();
    if current.split(':').any(|entry| entry == bin) {
        return current;
    }
    if current.is_empty() {
        bin
    } else {
        format!("{bin}:{current}")
    }
}

/// The shell and the text it runs with `-c` (the prefix on a line of its own before the
/// command); `Err` when the shell or the working directory is missing.
fn shell_invocation(request: &ShellRequest) -> Result<(String, String), String> {
    let shell = resolve_shell(request.shell_path)?;
    if !request.cwd.exists() {
        return Err(format!(
            "Working directory does not exist: {}\nCannot execute bash commands.",
            request.cwd.display()
        ));
    }
    let full_command = match request.command_prefix.filter(|p| !p.is_empty()) {
        Some(prefix) => format!("{prefix}\n{}", request.command),
        None => request.command.to_string(),
    };
    Ok((shell, full_command))
}

/// The client's terminal, when it runs commands for the tools and no sandbox is on (pi-rs
/// cannot confine a process the editor starts, so a sandboxed shell stays pi-rs's own).
fn in_client_terminal(
    client: &dyn super::client::Client,
    request: &ShellRequest,
    context: &ToolContext,
    cancel: &CancelFlag,
    on_event: &mut dyn FnMut(ShellEvent),
) -> Result<ShellOutcome, String> {
    let (shell, full_command) = shell_invocation(request)?;
    let mut env: Vec<(String, String)> = context
        .session_env
        .iter()
        .map(|(name, value)| (name.to_string(), value.clone()))
        .collect();
    env.push(("PATH".to_string(), shell_path_env(&context.agent_dir)));
    let command = super::client::TerminalCommand {
        program: shell,
        args: vec!["-c".to_string(), full_command],
        env,
        cwd: context.cwd.clone(),
        timeout: request
            .timeout
            .filter(|t| *t > 0.0)
            .and_then(|t| Duration::try_from_secs_f64(t).ok()),
    };
    client.run_command(&context.call_id, &command, cancel, on_event)
}

/// Runs one command to completion (see the module doc). Errors are the texts the tool reports:
/// missing custom shell, missing cwd, spawn failure.
pub fn run_shell(
    request: &ShellRequest,
    cancel: &CancelFlag,
    on_event: &mut dyn FnMut(ShellEvent),
) -> Result<ShellOutcome, String> {
    let (shell, full_command) = shell_invocation(request)?;
    let (reader, writer) = std::io::pipe().map_err(|e| format!("spawn {shell} failed: {e}"))?;
    let writer_for_stderr = writer
        .try_clone()
        .map_err(|e| format!("spawn {shell} failed: {e}"))?;
    let mut command = Command::new(&shell);
    super::env::scrub(&mut command);
    if let Some(values) = request.session_env {
        super::env::set_session_vars(&mut command, values);
    }
    command
        .arg("-c")
        .arg(&full_command)
        .current_dir(request.cwd)
        .env("PATH", shell_path_env(request.agent_dir))
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_for_stderr);
    // The client's own command keeps root's capabilities; a tool call's shell does not.
    let origin = match request.sandbox {
        Some(_) => crate::child::Origin::Agent,
        None => crate::child::Origin::Client,
    };
    if let Some(policy) = request.sandbox {
        crate::sandbox::confine_child(&mut command, policy).map_err(|e| e.to_string())?;
    }
    crate::child::isolate(&mut command, origin);
    let spawned = command.spawn();
    // The Command still owns our copies of the pipe's write end; drop them so EOF can happen.
    drop(command);
    let mut child = spawned.map_err(|e| {
        let (code, _) = super::path::errno_parts(&e);
        // pi's text first; then, when nothing was found at all (a scratch container), say so.
        if e.kind() == std::io::ErrorKind::NotFound && shell == "sh" {
            format!(
                "spawn {shell} {code}\nThere is no shell here: neither /bin/bash nor bash or sh on \
                 PATH. Install one or set shellPath in settings.json."
            )
        } else {
            format!("spawn {shell} {code}")
        }
    })?;
    let pgid = child.id() as i32;
    LIVE_SHELLS.insert(pgid);

    let (chunk_tx, chunk_rx) = crossbeam_channel::bounded::<Vec<u8>>(16);
    let reader_thread = std::thread::Builder::new()
        .name("bash-output".to_string())
        .spawn(move || {
            let mut reader = reader;
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                match reader.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(n) => {
                        if chunk_tx.send(buffer[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        });
    if reader_thread.is_err() {
        kill_group(pgid);
        let _ = child.wait();
        LIVE_SHELLS.remove(pgid);
        return Err("Failed to start the output reader thread".to_string());
    }

    // A model-chosen timeout (1e300, NaN) is clamped, never a panic that leaves the shell running.
    let deadline = request
        .timeout
        .and_then(crate::deadline::seconds)
        .map(crate::deadline::after);
    let mut pipe_closed = false;
    let mut killed = false;
    let mut timed_out = false;
    let mut exit: Option<(Option<i32>, Instant)> = None;
    let mut last_output = Instant::now();
    loop {
        if pipe_closed {
            std::thread::sleep(POLL_INTERVAL);
        } else {
            match chunk_rx.recv_timeout(POLL_INTERVAL) {
                Ok(chunk) => {
                    last_output = Instant::now();
                    on_event(ShellEvent::Output(&chunk))
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => on_event(ShellEvent::Tick),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => pipe_closed = true,
            }
        }
        if !killed && cancel.is_cancelled() {
            kill_group(pgid);
            killed = true;
        }
        if !killed && deadline.is_some_and(|d| Instant::now() >= d) {
            kill_group(pgid);
            killed = true;
            timed_out = true;
        }
        if exit.is_none() {
            match child.try_wait() {
                // A shell a signal ended gets the shell's convention, 128 + the signal (pi 1.6.0).
                Ok(Some(status)) => {
                    use std::os::unix::process::ExitStatusExt;
                    let code = status.code().or_else(|| status.signal().map(|s| 128 + s));
                    exit = Some((code, Instant::now()))
                }
                Ok(None) => {}
                Err(_) => exit = Some((None, Instant::now())),
            }
        }
        // Output still flowing after the exit counts as activity: the grace runs from the later
        // of the two, bounded overall.
        if let Some((_, exited_at)) = exit
            && (pipe_closed
                || exited_at.max(last_output).elapsed() >= stdio_grace(pgid)
                || exited_at.elapsed() >= EMPTY_GROUP_DRAIN_LIMIT)
        {
            break;
        }
    }
    LIVE_SHELLS.remove(pgid);
    // Dropping the receiver ends the reader thread at its next chunk if descendants still write.
    drop(chunk_rx);
    if cancel.is_cancelled() {
        return Ok(ShellOutcome::Aborted);
    }
    if timed_out {
        return Ok(ShellOutcome::TimedOut);
    }
    Ok(ShellOutcome::Exited(exit.and_then(|(code, _)| code)))
}

/// How long to keep reading after the shell exited. While a background descendant still lives in
/// the group it may hold the pipe open forever, so pi's short grace applies; once the group is
/// empty nobody can write any more, and the remaining bytes are read to EOF (a busy machine may
/// not have scheduled our reader yet — cutting it short would lose output).
fn stdio_grace(pgid: i32) -> Duration {
    if group_alive(pgid) {
        EXIT_STDIO_GRACE
    } else {
        EMPTY_GROUP_DRAIN_LIMIT
    }
}

/// Streaming output with bounded memory: decoded rolling tail for display, counters for the
/// totals, raw bytes spilled to a temp file once the limits are passed.
pub struct OutputAccumulator {
    max_lines: usize,
    max_bytes: usize,
    max_rolling_bytes: usize,
    temp_prefix: &'static str,
    pending_utf8: Vec<u8>,
    /// Decoded output not yet spilled (before the limits are passed).
    unspilled: String,
    /// Spilled text held back so no secret is cut in two (see `crate::redact`).
    spill_carry: String,
    spill_bytes: u64,
    /// Bytes dropped from the head of the spill file to keep it under `max_spill_bytes`.
    spill_dropped: u64,
    max_spill_bytes: u64,
    tail_text: String,
    tail_starts_at_line_boundary: bool,
    total_raw_bytes: usize,
    total_decoded_bytes: usize,
    total_lines: usize,
    current_line_bytes: usize,
    finished: bool,
    temp_path: Option<PathBuf>,
    temp_file: Option<File>,
}

/// One view of the accumulated output.
pub struct OutputSnapshot {
    pub content: String,
    pub truncation: Truncation,
    pub full_output_path: Option<PathBuf>,
    /// Bytes cut from the head of the file at `full_output_path` (it keeps the tail).
    pub full_output_dropped: u64,
}

impl OutputAccumulator {
    pub fn new(temp_prefix: &'static str) -> OutputAccumulator {
        OutputAccumulator::with_limits(temp_prefix, DEFAULT_MAX_LINES, DEFAULT_MAX_BYTES)
    }

    pub fn with_limits(
        temp_prefix: &'static str,
        max_lines: usize,
        max_bytes: usize,
    ) -> OutputAccumulator {
        OutputAccumulator {
            max_lines,
            max_bytes,
            max_rolling_bytes: (max_bytes * 2).max(1),
            temp_prefix,
            pending_utf8: Vec::new(),
            unspilled: String::new(),
            spill_carry: String::new(),
            spill_bytes: 0,
            spill_dropped: 0,
            max_spill_bytes: MAX_SPILL_BYTES,
            tail_text: String::new(),
            tail_starts_at_line_boundary: true,
            total_raw_bytes: 0,
            total_decoded_bytes: 0,
            total_lines: 1,
            current_line_bytes: 0,
            finished: false,
            temp_path: None,
            temp_file: None,
        }
    }

    pub fn append(&mut self, data: &[u8]) {
        if self.finished {
            return;
        }
        self.total_raw_bytes += data.len();
        let text = self.decode(data);
        self.append_decoded(&text);
        if self.temp_file.is_some() || self.should_use_temp_file() {
            self.ensure_temp_file();
            self.write_temp(&text);
        } else {
            self.unspilled.push_str(&text);
        }
    }

    /// Flushes the decoder; the output may not grow afterwards.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        if !self.pending_utf8.is_empty() {
            self.pending_utf8.clear();
            self.append_decoded("\u{FFFD}");
            if self.temp_file.is_some() {
                self.write_temp("\u{FFFD}");
            } else {
                self.unspilled.push('\u{FFFD}');
            }
        }
        if self.should_use_temp_file() {
            self.ensure_temp_file();
        }
    }

    pub fn snapshot(&mut self, persist_if_truncated: bool) -> OutputSnapshot {
        let tail = truncate_tail(self.snapshot_text(), self.max_lines, self.max_bytes);
        let truncated =
            self.total_lines > self.max_lines || self.total_decoded_bytes > self.max_bytes;
        let truncated_by = if truncated {
            tail.truncated_by
                .or(Some(if self.total_decoded_bytes > self.max_bytes {
                    super::truncate::TruncatedBy::Bytes
                } else {
                    super::truncate::TruncatedBy::Lines
                }))
        } else {
            None
        };
        let truncation = Truncation {
            truncated,
            truncated_by,
            total_lines: self.total_lines,
            total_bytes: self.total_decoded_bytes,
            max_lines: self.max_lines,
            max_bytes: self.max_bytes,
            ..tail
        };
        if persist_if_truncated && truncation.truncated {
            self.ensure_temp_file();
        }
        OutputSnapshot {
            content: truncation.content.clone(),
            truncation,
            full_output_path: self.temp_path.clone(),
            full_output_dropped: self.spill_dropped,
        }
    }

    /// Bytes of the last (possibly unfinished) line.
    pub fn last_line_bytes(&self) -> usize {
        self.current_line_bytes
    }

    /// Closes the temp file (everything written, the held-back tail too).
    pub fn close_temp_file(&mut self) {
        let rest = std::mem::take(&mut self.spill_carry);
        self.write_redacted(&rest);
        if let Some(mut file) = self.temp_file.take() {
            let _ = file.flush();
        }
    }

    /// The output for programmatic callers (a codemode script's `bash` value, pi 1.6.0): whole
    /// up to `max_bytes`, else its first and last halves around `[... N bytes omitted ...]`; the
    /// flag says it was cut. Read after `close_temp_file`; what the spill file holds is redacted.
    pub fn full_output(&self, max_bytes: usize) -> (String, bool) {
        let Some(path) = &self.temp_path else {
            if self.should_use_temp_file() {
                // No spill file could be made: only the tail is left.
                return (self.tail_text.clone(), true);
            }
            return (self.unspilled.clone(), false);
        };
        let read = || -> std::io::Result<(String, bool)> {
            use std::os::unix::fs::FileExt;
            let file = File::open(path)?;
            let size = file.metadata()?.len();
            let cut = size > max_bytes as u64 || self.spill_dropped > 0;
            if !cut {
                let mut text = String::new();
                (&file).read_to_string(&mut text)?;
                return Ok((text, false));
            }
            let head_bytes = (max_bytes / 2).min(size as usize);
            let tail_bytes = (max_bytes - max_bytes / 2).min(size as usize - head_bytes);
            let mut head = vec![0u8; head_bytes];
            let mut tail = vec![0u8; tail_bytes];
            file.read_exact_at(&mut head, 0)?;
            file.read_exact_at(&mut tail, size - tail_bytes as u64)?;
            let head_end = match std::str::from_utf8(&head) {
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                _ => head.len(),
            };
            let tail_start = tail
                .iter()
                .position(|b| b & 0xc0 != 0x80)
                .unwrap_or(tail.len());
            let omitted = size + self.spill_dropped - head_bytes as u64 - tail_bytes as u64;
            Ok((
                format!(
                    "{}\n\n[... {omitted} bytes omitted ...]\n\n{}",
                    String::from_utf8_lossy(&head[..head_end]),
                    String::from_utf8_lossy(&tail[tail_start..])
                ),
                true,
            ))
        };
        read().unwrap_or_else(|e| {
            log::warn!("could not read the bash output back: {e}");
            (self.tail_text.clone(), true)
        })
    }

    /// Streaming UTF-8 decode: invalid sequences become U+FFFD, an incomplete sequence at the end
    /// of a chunk waits for the next one.
    fn decode(&mut self, data: &[u8]) -> String {
        let mut bytes = std::mem::take(&mut self.pending_utf8);
        bytes.extend_from_slice(data);
        let mut out = String::with_capacity(bytes.len());
        let mut rest: &[u8] = &bytes;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.push_str(valid);
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match error.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &after[bad..];
                        }
                        None => {
                            self.pending_utf8 = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    fn append_decoded(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.total_decoded_bytes += text.len();
        self.tail_text.push_str(text);
        if self.tail_text.len() > self.max_rolling_bytes * 2 {
            self.trim_tail();
        }
        match text.rfind('\n') {
            None => self.current_line_bytes += text.len(),
            Some(last) => {
                self.total_lines += memchr::memchr_iter(b'\n', text.as_bytes()).count();
                self.current_line_bytes = text.len() - last - 1;
            }
        }
    }

    fn trim_tail(&mut self) {
        let len = self.tail_text.len();
        if len <= self.max_rolling_bytes {
            return;
        }
        let mut start = len - self.max_rolling_bytes;
        while !self.tail_text.is_char_boundary(start) {
            start += 1;
        }
        if start > 0 {
            self.tail_starts_at_line_boundary = self.tail_text.as_bytes()[start - 1] == b'\n';
        }
        self.tail_text.drain(..start);
    }

    fn snapshot_text(&self) -> &str {
        if self.tail_starts_at_line_boundary {
            return &self.tail_text;
        }
        match self.tail_text.find('\n') {
            Some(first) => &self.tail_text[first + 1..],
            None => &self.tail_text,
        }
    }

    fn should_use_temp_file(&self) -> bool {
        self.total_raw_bytes > self.max_bytes
            || self.total_decoded_bytes > self.max_bytes
            || self.total_lines > self.max_lines
    }

    fn ensure_temp_file(&mut self) {
        if self.temp_path.is_some() {
            return;
        }
        match create_spill_file(self.temp_prefix, ".log") {
            Ok((path, file)) => {
                self.temp_file = Some(file);
                self.temp_path = Some(path);
            }
            Err(e) => {
                log::warn!("could not create a spill file: {e}");
                return;
            }
        }
        let earlier = std::mem::take(&mut self.unspilled);
        self.write_temp(&earlier);
    }

    /// Spills `text`, holding back a tail that could begin a known credential.
    fn write_temp(&mut self, text: &str) {
        if self.temp_file.is_none() {
            return;
        }
        let known = crate::redact::default_redactions();
        self.spill_carry.push_str(text);
        let cut = known.streaming_cut(&self.spill_carry);
        let rest = self.spill_carry.split_off(cut);
        let ready = std::mem::replace(&mut self.spill_carry, rest);
        self.write_redacted(&ready);
    }

    fn write_redacted(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let known = crate::redact::default_redactions();
        let clean = known.apply_text(text);
        let Some(file) = self.temp_file.as_mut() else {
            return;
        };
        if let Err(e) = file.write_all(clean.as_bytes()) {
            log::warn!("writing bash output to its temp file failed: {e}");
            self.temp_file = None;
            return;
        }
        self.spill_bytes += clean.len() as u64;
        if self.spill_bytes > self.max_spill_bytes {
            self.keep_spill_tail();
        }
    }

    /// Cuts the spill file down to its last half of `max_spill_bytes` (from a line start),
    /// moving the kept half to the front in small chunks: holding it in memory would cost the
    /// process half the cap (32 MB) at every trim.
    fn keep_spill_tail(&mut self) {
        use std::io::{Seek, SeekFrom};
        use std::os::unix::fs::FileExt;
        let Some(file) = self.temp_file.as_mut() else {
            return;
        };
        let cut = self.spill_bytes - self.max_spill_bytes / 2;
        let mut chunk = vec![0u8; 64 * 1024];
        let result = (|| -> std::io::Result<u64> {
            let start = first_line_start(file, cut, &mut chunk)?.unwrap_or(cut);
            let (mut read, mut written) = (start, 0u64);
            loop {
                let n = file.read_at(&mut chunk, read)?;
                if n == 0 {
                    break;
                }
                file.write_all_at(&chunk[..n], written)?;
                read += n as u64;
                written += n as u64;
            }
            file.set_len(written)?;
            file.seek(SeekFrom::Start(written))?;
            Ok(written)
        })();
        match result {
            Ok(kept) => {
                self.spill_dropped += self.spill_bytes - kept;
                self.spill_bytes = kept;
            }
            Err(e) => {
                log::warn!("trimming the bash output file failed: {e}");
                self.temp_file = None;
            }
        }
    }
}

/// The offset just past the first LF at or after `from`, or None when there is none.
fn first_line_start(
    file: &std::fs::File,
    mut from: u64,
    chunk: &mut [u8],
) -> std::io::Result<Option<u64>> {
    use std::os::unix::fs::FileExt;
    loop {
        let n = file.read_at(chunk, from)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(i) = memchr::memchr(b'\n', &chunk[..n]) {
            return Ok(Some(from + i as u64 + 1));
        }
        from += n as u64;
    }
}

/// The largest a spill file grows; beyond it only the tail is kept.
const MAX_SPILL_BYTES: u64 = 64 * 1024 * 1024;

static SPILL_DIR: OnceLock<Option<PathBuf>> = OnceLock::new();

/// This process's private folder for spill files, created (0700) on first use.
fn spill_dir() -> Option<&'static Path> {
    SPILL_DIR
        .get_or_init(|| {
            use std::os::unix::fs::DirBuilderExt;
            let dir = std::env::temp_dir().join(format!(
                "pi-rs-{}-{}",
                std::process::id(),
                crate::ids::random_hex16()
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => Some(dir),
                Err(e) => {
                    log::warn!("cannot create {}: {e}", dir.display());
                    None
                }
            }
        })
        .as_deref()
}

/// A new spill file `<prefix>-<16 hex><extension>` (mode 0600) in this process's private spill
/// folder, open for reading and writing. Bash output and long MCP results go there; what is
/// written to it must be redacted first.
pub fn create_spill_file(
    prefix: &str,
    extension: &str,
) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = spill_dir().ok_or_else(|| std::io::Error::other("no private spill folder"))?;
    let path = dir.join(format!(
        "{prefix}-{}{extension}",
        crate::ids::random_hex16()
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    Ok((path, file))
}

/// Removes the spill folder and its files (at exit, when no session file refers to them).
pub fn remove_spill_dir() {
    if let Some(Some(dir)) = SPILL_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The `details` of a partial result: `{truncation?, fullOutputPath?}`.
fn update_details(snapshot: &OutputSnapshot) -> Value {
    let mut details = Map::new();
    if snapshot.truncation.truncated {
        details.insert("truncation".to_string(), snapshot.truncation.to_json());
    }
    if let Some(path) = &snapshot.full_output_path {
        details.insert(
            "fullOutputPath".to_string(),
            Value::from(path.to_string_lossy().to_string()),
        );
    }
    Value::Object(details)
}

/// Final text (+ details when truncated) for a snapshot; `empty_text` stands in for no output.
fn format_output(
    snapshot: &OutputSnapshot,
    last_line_bytes: usize,
    empty_text: &str,
) -> (String, Option<Value>) {
    let truncation = &snapshot.truncation;
    let mut text = if snapshot.content.is_empty() {
        empty_text.to_string()
    } else {
        snapshot.content.clone()
    };
    if !truncation.truncated {
        return (text, None);
    }
    let path = snapshot
        .full_output_path
        .as_ref()
        .map(|p| p.to_string_lossy().to_string())
        .unwrap_or_default();
    let details = json!({"truncation": truncation.to_json(), "fullOutputPath": path});
    let path = if snapshot.full_output_dropped > 0 {
        format!(
            "{path} (its first {} were dropped to bound its size)",
            format_size(snapshot.full_output_dropped as usize)
        )
    } else {
        path
    };
    let start_line = truncation.total_lines - truncation.output_lines + 1;
    let end_line = truncation.total_lines;
    if truncation.last_line_partial {
        text.push_str(&format!(
            "\n\n[Showing last {} of line {end_line} (line is {}). Full output: {path}]",
            format_size(truncation.output_bytes),
            format_size(last_line_bytes)
        ));
    } else if truncation.truncated_by == Some(super::truncate::TruncatedBy::Lines) {
        text.push_str(&format!(
            "\n\n[Showing lines {start_line}-{end_line} of {}. Full output: {path}]",
            truncation.total_lines
        ));
    } else {
        text.push_str(&format!(
            "\n\n[Showing lines {start_line}-{end_line} of {} ({} limit). Full output: {path}]",
            truncation.total_lines,
            format_size(DEFAULT_MAX_BYTES)
        ));
    }
    (text, Some(details))
}

fn append_status(text: &str, status: &str) -> String {
    if text.is_empty() {
        status.to_string()
    } else {
        format!("{text}\n\n{status}")
    }
}

/// The bash tool. `emit` receives the partial results; the return value is the final one and,
/// when the command ran to its exit, the structured value scripts get (pi 1.6.0's
/// `{output, truncated, full_output_path?, exit_code, wall_time_seconds}`).
pub fn execute(
    args: &Value,
    context: &ToolContext,
    cancel: &CancelFlag,
    emit: &mut dyn FnMut(ToolOutput),
) -> (ToolOutput, Option<Value>) {
    let command = args
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let timeout = args.get("timeout").and_then(Value::as_f64);
    let request = ShellRequest {
        command,
        cwd: &context.cwd,
        shell_path: context.shell_path.as_deref(),
        command_prefix: context.shell_command_prefix.as_deref(),
        agent_dir: &context.agent_dir,
        timeout,
        sandbox: Some(&context.sandbox),
        session_env: Some(&context.session_env),
    };
    let mut output = OutputAccumulator::new("pi-bash");
    emit(ToolOutput {
        content: Vec::new(),
        details: None,
        is_error: false,
    });
    let mut dirty = false;
    let mut last_update: Option<Instant> = None;
    let mut emit_update =
        |output: &mut OutputAccumulator, dirty: &mut bool, last: &mut Option<Instant>| {
            if !*dirty {
                return;
            }
            *dirty = false;
            let snapshot = output.snapshot(true);
            let mut partial = ToolOutput::text(snapshot.content.clone());
            partial.details = Some(update_details(&snapshot));
            emit(partial);
            // The interval runs from the end of a delivery: however long the snapshot or the
            // receiver took (a loaded machine), two deliveries are never closer than it.
            *last = Some(Instant::now());
        };
    let mut on_event = |event: ShellEvent| {
        match event {
            ShellEvent::Output(bytes) => {
                output.append(bytes);
                dirty = true;
            }
            ShellEvent::Tick => {}
        }
        if dirty && last_update.is_none_or(|at| at.elapsed() >= UPDATE_THROTTLE) {
            emit_update(&mut output, &mut dirty, &mut last_update);
        }
    };
    let started = Instant::now();
    let client = context.client.as_deref();
    let result = match client.filter(|c| c.runs_commands() && !context.sandbox.is_active()) {
        Some(client) => in_client_terminal(client, &request, context, cancel, &mut on_event),
        None => run_shell(&request, cancel, &mut on_event),
    };
    output.finish();
    emit_update(&mut output, &mut dirty, &mut last_update);
    let snapshot = output.snapshot(true);
    output.close_temp_file();
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(message) => return (ToolOutput::error(message), None),
    };
    let last_line_bytes = output.last_line_bytes();
    match outcome {
        ShellOutcome::Aborted => {
            let (text, _) = format_output(&snapshot, last_line_bytes, "");
            (
                ToolOutput::error(append_status(&text, "Command aborted")),
                None,
            )
        }
        ShellOutcome::TimedOut => {
            let (text, _) = format_output(&snapshot, last_line_bytes, "");
            let seconds = js_number_string(timeout.unwrap_or(0.0));
            let status = format!("Command timed out after {seconds} seconds");
            (ToolOutput::error(append_status(&text, &status)), None)
        }
        ShellOutcome::Exited(code) => {
            let (text, details) = format_output(&snapshot, last_line_bytes, "(no output)");
            // No exit code could be read: scripts get the text.
            let structured = code.map(|code| {
                let (full, truncated) = output.full_output(STRUCTURED_OUTPUT_MAX_BYTES);
                let mut value = json!({"output": full, "truncated": truncated});
                if truncated && let Some(path) = &snapshot.full_output_path {
                    value["full_output_path"] = json!(path.to_string_lossy());
                }
                value["exit_code"] = json!(code);
                let tenths = (started.elapsed().as_secs_f64() * 10.0).round();
                value["wall_time_seconds"] = match tenths as u64 % 10 {
                    0 => json!(tenths as u64 / 10),
                    _ => json!(tenths / 10.0),
                };
                value
            });
            let output = match code {
                Some(code) if code != 0 => ToolOutput {
                    details,
                    is_error: true,
                    ..ToolOutput::text(append_status(
                        &text,
                        &format!("Command exited with code {code}"),
                    ))
                },
                _ => ToolOutput {
                    details,
                    ..ToolOutput::text(text)
                },
            };
            (output, structured)
        }
    }
}

/// The most `output` a script's `bash` value holds (pi 1.6.0: 1 MiB).
const STRUCTURED_OUTPUT_MAX_BYTES: usize = 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::temp_dir;
    use crate::tools::{ToolEvent, ToolEventKind, spawn_tool};

    fn run(command: &str, ctx: &ToolContext) -> (ToolOutput, Vec<ToolOutput>) {
        let mut updates = Vec::new();
        let (out, _) = execute(
            &json!({"command": command}),
            ctx,
            &CancelFlag::default(),
            &mut |u| updates.push(u),
        );
        (out, updates)
    }

    #[test]
    fn output_exit_codes_and_merging() {
        let dir = temp_dir("basic");
        let ctx = ToolContext::for_test(&dir);
        let (out, updates) = run("echo a; echo b >&2; echo c", &ctx);
        assert_eq!(out.first_text(), "a\nb\nc\n");
        assert!(!out.is_error);
        assert_eq!(out.details, None);
        assert_eq!(
            updates[0],
            ToolOutput {
                content: Vec::new(),
                details: None,
                is_error: false
            }
        );
        assert_eq!(
            updates.last().map(ToolOutput::first_text),
            Some("a\nb\nc\n".to_string())
        );
        assert_eq!(updates.last().unwrap().details, Some(json!({})));
        // Same text as the reference: the command's newline is kept before the status.
        let (out, _) = run("echo hi; exit 3", &ctx);
        assert!(out.is_error);
        assert_eq!(out.first_text(), "hi\n\n\nCommand exited with code 3");
        let (out, _) = run("true", &ctx);
        assert_eq!(out.first_text(), "(no output)");
        let (out, _) = run("exit 4", &ctx);
        assert_eq!(
            out.first_text(),
            "(no output)\n\nCommand exited with code 4"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn prefix_path_cwd_and_shell_errors() {
        let dir = temp_dir("env");
        let ctx = ToolContext {
            shell_command_prefix: Some("GREETING=hello".to_string()),
            ..ToolContext::for_test(&dir)
        };
        let (out, _) = run("echo $GREETING; pwd; echo $PATH", &ctx);
        let expected_bin = dir.join("bin").to_string_lossy().to_string();
        let lines: Vec<String> = out.first_text().lines().map(str::to_string).collect();
        assert_eq!(lines[0], "hello");
        assert_eq!(lines[1], dir.to_string_lossy());
        assert!(lines[2].starts_with(&format!("{expected_bin}:")));
        let missing = ToolContext {
            cwd: dir.join("gone"),
            ..ToolContext::for_test(&dir)
        };
        let (out, _) = run("echo x", &missing);
        assert_eq!(
            out.first_text(),
            format!(
                "Working directory does not exist: {}\nCannot execute bash commands.",
                dir.join("gone").display()
            )
        );
        let bad_shell = ToolContext {
            shell_path: Some("/no/such/shell".to_string()),
            ..ToolContext::for_test(&dir)
        };
        let (out, _) = run("echo x", &bad_shell);
        assert_eq!(
            out.first_text(),
            "Custom shell path not found: /no/such/shell"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn timeout_kills_and_reports() {
        let dir = temp_dir("timeout");
        let started = Instant::now();
        let (out, _) = execute(
            &json!({"command":"echo before; sleep 30","timeout":0.3}),
            &ToolContext::for_test(&dir),
            &CancelFlag::default(),
            &mut |_| {},
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(out.is_error);
        assert_eq!(
            out.first_text(),
            "before\n\n\nCommand timed out after 0.3 seconds"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tail_truncation_and_spill_file() {
        let dir = temp_dir("trunc");
        let (out, _) = run("seq 1 3000", &ToolContext::for_test(&dir));
        let body = out.first_text();
        let notice = body.rsplit("\n\n").next().unwrap().to_string();
        let details = out.details.clone().unwrap();
        let path = details["fullOutputPath"].as_str().unwrap().to_string();
        // Reference: "[Showing lines 1002-3001 of 3001. Full output: …]".
        assert_eq!(
            notice,
            format!("[Showing lines 1002-3001 of 3001. Full output: {path}]")
        );
        assert!(body.starts_with("1002\n"));
        assert_eq!(details["truncation"]["truncatedBy"], "lines");
        let expected: String = (1..=3000).map(|i| format!("{i}\n")).collect();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
        std::fs::remove_file(&path).unwrap();

        // One 3 MB line then a short one: the long line is dropped by bytes.
        let (out, _) = run(
            "head -c 3000000 /dev/zero | tr '\\0' a; echo; echo tail",
            &ToolContext::for_test(&dir),
        );
        let body = out.first_text();
        let path = out.details.as_ref().unwrap()["fullOutputPath"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            body,
            format!("tail\n\n\n[Showing lines 2-3 of 3 (50.0KB limit). Full output: {path}]")
        );
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn huge_single_line_keeps_memory_bounded() {
        let dir = temp_dir("huge");
        let (out, _) = run(
            "head -c 20000000 /dev/zero | tr '\\0' a",
            &ToolContext::for_test(&dir),
        );
        let body = out.first_text();
        let path = out.details.as_ref().unwrap()["fullOutputPath"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(body.ends_with(&format!(
            "\n\n[Showing last 50.0KB of line 1 (line is 19.1MB). Full output: {path}]"
        )));
        assert_eq!(
            body.len(),
            51200 + body.rsplit("\n\n").next().unwrap().len() + 2
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 20_000_000);
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn accumulator_decodes_split_utf8_and_bounds_memory() {
        let mut acc = OutputAccumulator::with_limits("pi-rs-test", 10, 100);
        let bytes = "é".as_bytes();
        acc.append(&bytes[..1]);
        acc.append(&bytes[1..]);
        acc.append(&[0xFF, b'\n']);
        acc.finish();
        let snap = acc.snapshot(false);
        assert_eq!(snap.content, "é\u{FFFD}\n");
        let mut acc = OutputAccumulator::with_limits("pi-rs-test", 2000, 100);
        for _ in 0..10_000 {
            acc.append(b"0123456789\n");
        }
        assert!(acc.tail_text.len() <= 400);
        let snap = acc.snapshot(true);
        assert_eq!(snap.truncation.total_lines, 10_001);
        let path = snap.full_output_path.unwrap();
        acc.close_temp_file();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 110_000);
        std::fs::remove_file(&path).unwrap();
    }

    fn process_alive(pid: i32) -> bool {
        // A zombie waiting for its (container) reaper is dead for our purposes.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z'),
            Err(_) => false,
        }
    }

    #[test]
    fn dropping_the_handle_kills_the_process_group() {
        let dir = temp_dir("abort");
        let (tx, rx) = crossbeam_channel::unbounded::<ToolEvent>();
        let call = crate::messages::ToolCall {
            id: "call-abort".to_string(),
            name: "bash".to_string(),
            arguments: json!({"command":"sleep 100 & echo started $!; wait"}),
            thought_signature: None,
        };
        let handle = spawn_tool(call, ToolContext::for_test(&dir), tx);
        let mut grandchild = None;
        while grandchild.is_none() {
            let event = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("bash produced output");
            if let ToolEventKind::Update(update) = event.kind {
                grandchild = update
                    .first_text()
                    .trim()
                    .strip_prefix("started ")
                    .and_then(|p| p.parse::<i32>().ok());
            }
        }
        let pid = grandchild.unwrap();
        assert!(process_alive(pid));
        drop(handle);
        let finished = loop {
            let event = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("bash finished");
            if let ToolEventKind::Finished(output) = event.kind {
                break output;
            }
        };
        assert!(finished.is_error);
        assert_eq!(
            finished.first_text(),
            format!("started {pid}\n\n\nCommand aborted")
        );
        let deadline = Instant::now() + Duration::from_secs(3);
        while process_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!process_alive(pid), "grandchild {pid} survived the abort");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The spill file is private, redacted and bounded (the tail is kept and the result says so).
    #[test]
    fn spill_files_are_private_redacted_and_capped() {
        use std::os::unix::fs::PermissionsExt;
        crate::redact::register_secrets(["sk-spill-SECRET-0123456789".to_string()]);
        let mut acc = OutputAccumulator::with_limits("pi-bash", 10, 100);
        acc.max_spill_bytes = 4000;
        for i in 0..2000 {
            // The key arrives split over two chunks.
            acc.append(format!("line {i} sk-spill-SEC").as_bytes());
            acc.append(b"RET-0123456789\n");
        }
        acc.finish();
        let snap = acc.snapshot(true);
        acc.close_temp_file();
        let path = snap.full_output_path.unwrap();
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        let file_mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!((dir_mode & 0o777, file_mode & 0o777), (0o700, 0o600));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("sk-spill-SECRET"), "{text}");
        assert!(text.contains("line 1999 [redacted]\n"));
        assert!(text.len() <= 4000 + 64, "{}", text.len());
        assert!(text.starts_with("line "), "cut at a line start");
        assert!(snap.full_output_dropped > 0 || acc.spill_dropped > 0);
        let (shown, _) = format_output(&acc.snapshot(true), 0, "");
        assert!(shown.contains("were dropped to bound its size"), "{shown}");
        let _ = std::fs::remove_file(&path);
    }

    /// Trimming moves the kept half in chunks smaller than it: the file keeps exactly a run of
    /// whole lines ending with the last one, in order.
    #[test]
    fn spill_trim_keeps_an_ordered_run_of_whole_lines() {
        let mut acc = OutputAccumulator::with_limits("pi-bash", 10, 100);
        acc.max_spill_bytes = 400_000;
        for i in 0..60_000 {
            acc.append(format!("line {i:06}\n").as_bytes());
        }
        acc.finish();
        let snap = acc.snapshot(true);
        acc.close_temp_file();
        let path = snap.full_output_path.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let numbers: Vec<usize> = text
            .lines()
            .map(|l| l.strip_prefix("line ").unwrap().parse().unwrap())
            .collect();
        assert_eq!(*numbers.last().unwrap(), 59_999);
        assert!(
            numbers.windows(2).all(|w| w[1] == w[0] + 1),
            "a gap or reorder"
        );
        assert!(
            text.len() <= 400_000 && text.len() > 100_000,
            "{}",
            text.len()
        );
        assert_eq!(acc.spill_dropped + text.len() as u64, 60_000 * 12);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn updates_are_throttled_and_cumulative() {
        let dir = temp_dir("throttle");
        let mut stamps: Vec<(Instant, ToolOutput)> = Vec::new();
        let started = Instant::now();
        let (out, _) = execute(
            &json!({"command":"for i in $(seq 1 30); do echo $i; sleep 0.02; done"}),
            &ToolContext::for_test(&dir),
            &CancelFlag::default(),
            &mut |u| stamps.push((Instant::now(), u)),
        );
        let expected: String = (1..=30).map(|i| format!("{i}\n")).collect();
        assert_eq!(out.first_text(), expected);
        assert!(stamps[0].1.content.is_empty());
        let snapshots = &stamps[1..];
        // ~0.6 s of output (longer on a loaded machine) at ≥100 ms spacing: at most one snapshot
        // per 100 ms of the run, plus the first and the final flush.
        let ceiling = (started.elapsed().as_millis() / 100) as usize + 2;
        assert!(
            snapshots.len() >= 2 && snapshots.len() <= ceiling,
            "{} updates in {:?}",
            snapshots.len(),
            started.elapsed()
        );
        // All but the final flush are ≥100 ms apart as the receiver sees them: the interval is
        // counted from the end of the previous delivery, so scheduling delays cannot shorten it.
        for pair in snapshots[..snapshots.len() - 1].windows(2) {
            let gap = pair[1].0 - pair[0].0;
            assert!(gap >= UPDATE_THROTTLE, "{gap:?}");
        }
        // Cumulative: each snapshot extends the previous one; the last equals the final text.
        for pair in snapshots.windows(2) {
            assert!(pair[1].1.first_text().starts_with(&pair[0].1.first_text()));
        }
        assert_eq!(snapshots.last().unwrap().1.first_text(), expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn background_child_holding_the_pipe_does_not_block() {
        let dir = temp_dir("bg");
        let started = Instant::now();
        let (out, _) = run("sleep 3 & echo done", &ToolContext::for_test(&dir));
        assert_eq!(out.first_text(), "done\n");
        assert!(started.elapsed() < Duration::from_secs(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
