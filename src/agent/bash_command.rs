//! The RPC `bash` command (FACTS §11 + seed): a user-run shell command on its own thread
//! ("bash-<n>"), sharing the bash tool's runner (own process group, stdout+stderr merged). Output
//! is sanitized (ANSI escapes and control characters removed, CR dropped), streamed to the agent
//! as deltas for `bash_execution_update`, kept as a bounded rolling tail, and spilled in full to
//! `$TMPDIR/pi-bash-<hex>.log` once it passes 50 KB, or at the end when the result is truncated
//! by lines. The final result is tail-truncated to 2000 lines / 50 KB like pi.
//!
//! How it ends: the shell exits (and its pipe closes), or the agent raises the cancel flag
//! (`abort_bash`, shutdown), which kills the whole process group.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use crossbeam_channel::Sender;

use crate::child::CancelFlag;
use crate::ids::random_hex16;
use crate::tools::bash::{ShellEvent, ShellOutcome, ShellRequest, run_shell};
use crate::tools::truncate::{DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, truncate_tail};

/// Sanitized output kept in memory for the final result (pi keeps a 100 KB rolling buffer).
const ROLLING_BYTES: usize = 100 * 1024;

/// What a job reports; `job` tells concurrent jobs apart.
#[derive(Debug)]
pub struct BashEvent {
    pub job: u64,
    pub kind: BashEventKind,
}

#[derive(Debug)]
pub enum BashEventKind {
    Delta(String),
    Finished(BashResult),
}

#[derive(Clone, Debug, PartialEq)]
pub struct BashResult {
    pub output: String,
    /// None when cancelled or killed by a signal.
    pub exit_code: Option<i32>,
    pub cancelled: bool,
    pub truncated: bool,
    pub full_output_path: Option<String>,
}

/// Everything the job needs, moved into its thread.
pub struct BashJob {
    pub job: u64,
    pub command: String,
    pub cwd: PathBuf,
    pub agent_dir: PathBuf,
    pub shell_path: Option<String>,
    pub shell_command_prefix: Option<String>,
}

pub fn spawn(job: BashJob, cancel: CancelFlag, events: Sender<BashEvent>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("bash-{}", job.job))
        .spawn(move || run(job, &cancel, &events))
        .map(|_| ())
}

fn run(job: BashJob, cancel: &CancelFlag, events: &Sender<BashEvent>) {
    let request = ShellRequest {
        command: &job.command,
        cwd: &job.cwd,
        shell_path: job.shell_path.as_deref(),
        command_prefix: job.shell_command_prefix.as_deref(),
        agent_dir: &job.agent_dir,
        timeout: None,
        // The client's own command, as typed by the user: not a tool call, not sandboxed.
        sandbox: None,
        session_env: None,
    };
    let mut sanitizer = Sanitizer::default();
    let mut collected = Collected::default();
    let mut on_event = |event: ShellEvent| {
        if let ShellEvent::Output(bytes) = event {
            let text = sanitizer.push(bytes);
            collected.add(bytes.len(), &text);
            if !text.is_empty() {
                let _ = events.send(BashEvent {
                    job: job.job,
                    kind: BashEventKind::Delta(text),
                });
            }
        }
    };
    let outcome = run_shell(&request, cancel, &mut on_event);
    let tail = sanitizer.finish();
    if !tail.is_empty() {
        collected.add(0, &tail);
        let _ = events.send(BashEvent {
            job: job.job,
            kind: BashEventKind::Delta(tail),
        });
    }
    let result = match outcome {
        Ok(outcome) => collected.result(outcome),
        Err(error) => BashResult {
            output: error,
            exit_code: None,
            cancelled: false,
            truncated: false,
            full_output_path: None,
        },
    };
    let _ = events.send(BashEvent {
        job: job.job,
        kind: BashEventKind::Finished(result),
    });
}

/// The rolling tail and the spill file.
#[derive(Default)]
struct Collected {
    raw_bytes: usize,
    tail: String,
    spill: Option<(PathBuf, Option<File>)>,
}

impl Collected {
    fn add(&mut self, raw: usize, text: &str) {
        self.raw_bytes += raw;
        self.tail.push_str(text);
        if self.spill.is_none() && self.raw_bytes > DEFAULT_MAX_BYTES {
            self.start_spill();
        } else if let Some((_, Some(file))) = self.spill.as_mut()
            && file.write_all(text.as_bytes()).is_err()
        {
            log::warn!("bash output spill file: write failed");
        }
        if self.tail.len() > ROLLING_BYTES * 2 {
            let mut cut = self.tail.len() - ROLLING_BYTES;
            while !self.tail.is_char_boundary(cut) {
                cut += 1;
            }
            self.tail.drain(..cut);
        }
    }

    /// Opens the spill file with everything so far. The tail still holds it all: spilling starts
    /// at 50 KB, long before the rolling tail drops anything.
    fn start_spill(&mut self) {
        let path = std::env::temp_dir().join(format!("pi-bash-{}.log", random_hex16()));
        let mut file = File::create(&path).ok();
        if let Some(f) = file.as_mut()
            && f.write_all(self.tail.as_bytes()).is_err()
        {
            file = None;
        }
        self.spill = Some((path, file));
    }

    fn result(mut self, outcome: ShellOutcome) -> BashResult {
        let truncation = truncate_tail(&self.tail, DEFAULT_MAX_LINES, DEFAULT_MAX_BYTES);
        // Truncated by lines while under the byte limit: nothing spilled yet, but the full output
        // must still be reachable (pi spills whenever the result is truncated).
        if truncation.truncated && self.spill.is_none() {
            self.start_spill();
        }
        let (exit_code, cancelled) = match outcome {
            ShellOutcome::Exited(code) => (code, false),
            ShellOutcome::TimedOut | ShellOutcome::Aborted => (None, true),
        };
        let full_output_path = self
            .spill
            .map(|(path, _)| path.to_string_lossy().into_owned());
        BashResult {
            output: truncation.content,
            exit_code,
            cancelled,
            truncated: truncation.truncated,
            full_output_path,
        }
    }
}

/// Streaming output sanitizer: UTF-8 decoding across chunk boundaries, ANSI escape sequences
/// removed (also when split across chunks), control characters other than TAB and LF removed,
/// CR dropped, and U+FFF9..U+FFFB removed.
#[derive(Default)]
pub struct Sanitizer {
    pending: Vec<u8>,
}

impl Sanitizer {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let (text, keep) = sanitize(&self.pending, false);
        self.pending.drain(..self.pending.len() - keep);
        text
    }

    pub fn finish(&mut self) -> String {
        let (text, _) = sanitize(&self.pending, true);
        self.pending.clear();
        text
    }
}

/// Returns the sanitized text and how many trailing bytes to keep for the next chunk (an
/// incomplete UTF-8 character or escape sequence), unless `at_end`.
fn sanitize(bytes: &[u8], at_end: bool) -> (String, usize) {
    let decoded = match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(e) if e.error_len().is_none() && !at_end => {
            let valid = e.valid_up_to();
            let (text, keep) = sanitize(&bytes[..valid], at_end);
            return (text, keep + bytes.len() - valid);
        }
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    };
    let chars: Vec<char> = decoded.chars().collect();
    let mut out = String::with_capacity(decoded.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\u{1b}' {
            match escape_len(&chars[i..]) {
                Some(len) => {
                    i += len;
                    continue;
                }
                None if !at_end => {
                    let keep: usize = chars[i..].iter().map(|c| c.len_utf8()).sum();
                    return (out, keep);
                }
                None => break,
            }
        }
        let dropped = c == '\r'
            || ('\u{fff9}'..='\u{fffb}').contains(&c)
            || (c.is_control() && c != '\t' && c != '\n');
        if !dropped {
            out.push(c);
        }
        i += 1;
    }
    (out, 0)
}

/// Length of the escape sequence starting at `chars[0]` (ESC), or None if it is incomplete.
fn escape_len(chars: &[char]) -> Option<usize> {
    match chars.get(1)? {
        // CSI: ESC [ parameters/intermediates, then a final byte in @..~
        '[' => chars[2..]
            .iter()
            .position(|c| ('@'..='~').contains(c))
            .map(|p| p + 3),
        // OSC: ESC ] ... terminated by BEL or ESC \
        ']' => {
            let rest = &chars[2..];
            rest.iter().enumerate().find_map(|(p, c)| match c {
                '\u{7}' => Some(p + 3),
                '\u{1b}' if rest.get(p + 1) == Some(&'\\') => Some(p + 4),
                _ => None,
            })
        }
        // Two-character sequences (ESC c, ESC =, charset selection ESC ( B takes three).
        '(' | ')' => chars.get(2).map(|_| 3),
        _ => Some(2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_escapes_and_controls_across_chunk_boundaries() {
        let input = "\u{1b}[31mred\u{1b}[0m\r\nnext\u{7}\tok \u{1b}]0;title\u{7}é\u{fffa}\n";
        let whole = Sanitizer::default().push(input.as_bytes());
        assert_eq!(whole, "red\nnext\tok é\n");
        for cut in 0..input.len() {
            let mut s = Sanitizer::default();
            let mut out = s.push(&input.as_bytes()[..cut]);
            out.push_str(&s.push(&input.as_bytes()[cut..]));
            out.push_str(&s.finish());
            assert_eq!(out, whole, "cut at {cut}");
        }
    }

    #[test]
    fn runs_a_command_and_reports_deltas_then_the_result() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let job = BashJob {
            job: 1,
            command: "printf 'a\\033[1mb\\n'; exit 3".into(),
            cwd: std::env::temp_dir(),
            agent_dir: std::env::temp_dir(),
            shell_path: None,
            shell_command_prefix: None,
        };
        spawn(job, CancelFlag::default(), tx).unwrap();
        let mut deltas = String::new();
        let result = loop {
            match rx.recv().unwrap().kind {
                BashEventKind::Delta(d) => deltas.push_str(&d),
                BashEventKind::Finished(result) => break result,
            }
        };
        assert_eq!(deltas, "ab\n");
        assert_eq!(result.output, "ab\n");
        assert_eq!(result.exit_code, Some(3));
        assert!(!result.cancelled && !result.truncated);
    }
}
