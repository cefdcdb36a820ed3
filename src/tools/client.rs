//! Work a front door's client does for the built-in tools when it offers to (ACP's `fs/*` and
//! `terminal/*`: the editor reads its buffers, saved or not, takes the writes into them, and runs
//! bash in its own terminal). The tools keep every rule of their own — the path guard, the
//! sandbox's path check, the file lock, the output limits and texts — and only the reading,
//! writing or running is done by the client. Without a client (RPC, print mode) nothing changes.
//!
//! The client also hears what an edit or write changed (`file_changed`), from the text the tool
//! itself read and wrote, so an editor's diff never comes from a re-read of the file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::bash::{ShellEvent, ShellOutcome};
use crate::child::CancelFlag;

/// A command for the client's terminal: `program args…` in `cwd`, with `env` set.
#[derive(Clone, Debug)]
pub struct TerminalCommand {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// Killed after this long (the bash tool's `timeout`).
    pub timeout: Option<Duration>,
}

/// What a client does for the tools. Every call is bounded: by the client's answer, a deadline
/// of the implementation's, or `cancel` (the call is then withdrawn and `Err` or
/// `ShellOutcome::Aborted` returned).
pub trait Client: Send + Sync + std::fmt::Debug {
    /// `read` and `edit` get a text file's contents from the client.
    fn reads_files(&self) -> bool;
    /// `write` and `edit` hand the new contents to the client.
    fn writes_files(&self) -> bool;
    /// `bash` runs in the client's terminal.
    fn runs_commands(&self) -> bool;
    /// The text of the file at `path` (absolute) as the client has it.
    fn read_text_file(&self, path: &Path, cancel: &CancelFlag) -> Result<String, String>;
    /// Replaces the file at `path` (absolute) with `content`.
    fn write_text_file(
        &self,
        path: &Path,
        content: &str,
        cancel: &CancelFlag,
    ) -> Result<(), String>;
    /// Runs `command` for the tool call `call_id`, reporting output as it comes (not necessarily
    /// in the chunks the program wrote) and ticks; returns how it ended.
    fn run_command(
        &self,
        call_id: &str,
        command: &TerminalCommand,
        cancel: &CancelFlag,
        on_event: &mut dyn FnMut(ShellEvent),
    ) -> Result<ShellOutcome, String>;
    /// The tool call `call_id` changed `path` from `old` (None: the file was new) to `new`.
    fn file_changed(&self, call_id: &str, path: &Path, old: Option<&str>, new: &str);
}

/// Files larger than this are not sent whole in a diff (the caller shows less).
pub const MAX_DIFF_BYTES: usize = 1024 * 1024;

/// A file's text before a write replaces it, for the diff: the client's (its buffer) when it
/// reads files, else the disk's. None when there is none (a new file), it is not text, or it is
/// larger than `MAX_DIFF_BYTES`.
pub fn old_text(client: &dyn Client, path: &Path, cancel: &CancelFlag) -> Option<String> {
    let text = if client.reads_files() {
        client.read_text_file(path, cancel).ok()?
    } else {
        let metadata = std::fs::metadata(path).ok()?;
        if !metadata.is_file() || metadata.len() > MAX_DIFF_BYTES as u64 {
            return None;
        }
        String::from_utf8(std::fs::read(path).ok()?).ok()?
    };
    (text.len() <= MAX_DIFF_BYTES).then_some(text)
}
