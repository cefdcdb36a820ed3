//! Built-in tools (read, write, edit, bash, grep, find, ls): their specs as offered to the model,
//! argument validation, and execution on a thread of their own ("tool-<callId>").
//!
//! Input: a `ToolCall` (raw model arguments) and a `ToolContext`. Output: `ToolEvent`s on the
//! agent's channel: zero or more cumulative `Update`s, then exactly one `Finished` — unless the
//! agent dropped the `ToolHandle` first (abort), which raises the cancel flag; bash then kills its
//! process group so grandchildren die and pipes close, and the thread's last send fails harmlessly.
//! Tool failures are data for the model (`is_error: true`), never a panic or an `Err` to the loop.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Sender;
use serde_json::Value;

use crate::messages::{ContentBlock, TextContent, ToolCall};
use crate::provider::ToolSpec;

/// The default active tool set.
pub const DEFAULT_TOOLS: [&str; 4] = ["read", "bash", "edit", "write"];
/// Every built-in tool, in pi's order.
pub const ALL_TOOLS: [&str; 7] = ["read", "bash", "edit", "write", "grep", "find", "ls"];

/// What a tool needs to know about where it runs.
#[derive(Clone, Debug)]
pub struct ToolContext {
    pub cwd: PathBuf,
    pub agent_dir: PathBuf,
    pub shell_path: Option<String>,
    pub shell_command_prefix: Option<String>,
    /// Whether the current model accepts images (read's image notice).
    pub model_supports_images: bool,
}

/// A tool result or a cumulative partial one.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    pub content: Vec<ContentBlock>,
    pub details: Option<Value>,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn text(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: vec![ContentBlock::Text(TextContent::new(&text.into()))],
            details: None,
            is_error: false,
        }
    }
    pub fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            is_error: true,
            ..ToolOutput::text(text)
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolEventKind {
    /// Cumulative partial result (replaces the previous one).
    Update(ToolOutput),
    Finished(ToolOutput),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolEvent {
    pub call_id: String,
    pub kind: ToolEventKind,
}

/// Set when the agent abandons a tool run.
#[derive(Clone, Debug, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Owns a running tool. Dropping it cancels the run.
pub struct ToolHandle {
    pub call_id: String,
    cancel: CancelFlag,
}

impl Drop for ToolHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Specs of the named built-in tools, in the given order; unknown names are skipped.
pub fn specs(names: &[String]) -> Vec<ToolSpec> {
    let _ = names;
    Vec::new()
}

/// Starts `call` on its own thread.
pub fn spawn_tool(call: ToolCall, context: ToolContext, events: Sender<ToolEvent>) -> ToolHandle {
    let cancel = CancelFlag::default();
    let call_id = call.id.clone();
    let flag = cancel.clone();
    let _ = std::thread::Builder::new()
        .name(format!("tool-{}", call.id))
        .spawn(move || {
            let _ = (&context, &flag);
            let output = ToolOutput::error(format!("Tool {} not found", call.name));
            let _ = events.send(ToolEvent {
                call_id: call.id,
                kind: ToolEventKind::Finished(output),
            });
        });
    ToolHandle { call_id, cancel }
}
