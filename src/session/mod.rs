//! The session log: pi's session file format (version 3), an append-only JSONL tree of entries
//! with `id`/`parentId`, owned by the agent thread. With `--no-session` it lives in memory only.
//!
//! Input: entries to append. Output: the rebuilt context (messages, thinking level, model) and the
//! entries/tree for clients. Writing is lazy like pi's: nothing reaches disk before the first
//! assistant message; then each entry is one `write` of a complete line.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::config::ThinkingLevel;
use crate::messages::AgentMessage;

/// Failure to persist an entry (disk full, read-only dir, …). The entry stays in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionError(pub String);

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the active branch says the conversation is.
#[derive(Clone, Debug, Default)]
pub struct SessionContext {
    pub messages: Vec<AgentMessage>,
    pub thinking_level: Option<ThinkingLevel>,
    /// (provider, model id) of the last model_change or assistant message.
    pub model: Option<(String, String)>,
}

pub struct SessionLog {
    id: String,
    cwd: PathBuf,
    file: Option<PathBuf>,
    entries: Vec<Value>,
    next: u64,
}

impl SessionLog {
    /// A session that never touches the disk (`--no-session`).
    pub fn in_memory(cwd: &Path) -> SessionLog {
        SessionLog {
            id: "00000000-0000-7000-8000-000000000000".into(),
            cwd: cwd.to_path_buf(),
            file: None,
            entries: Vec::new(),
            next: 0,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    pub fn file_path(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    pub fn leaf_id(&self) -> Option<&str> {
        self.entries.last().and_then(|e| e["id"].as_str())
    }

    fn append(&mut self, mut entry: Value) -> Result<String, SessionError> {
        self.next += 1;
        let id = format!("{:08x}", self.next);
        entry["id"] = json!(id);
        entry["parentId"] = json!(self.leaf_id());
        self.entries.push(entry);
        Ok(id)
    }

    pub fn append_message(&mut self, message: &AgentMessage) -> Result<String, SessionError> {
        self.append(json!({"type": "message", "message": message}))
    }

    pub fn append_model_change(
        &mut self,
        provider: &str,
        model_id: &str,
    ) -> Result<String, SessionError> {
        self.append(json!({"type": "model_change", "provider": provider, "modelId": model_id}))
    }

    pub fn append_thinking_level_change(
        &mut self,
        level: ThinkingLevel,
    ) -> Result<String, SessionError> {
        self.append(json!({"type": "thinking_level_change", "thinkingLevel": level.as_str()}))
    }

    pub fn append_session_info(&mut self, name: &str) -> Result<String, SessionError> {
        self.append(json!({"type": "session_info", "name": name}))
    }

    /// The current session name (latest session_info in file order), if any.
    pub fn name(&self) -> Option<String> {
        self.entries
            .iter()
            .rev()
            .find(|e| e["type"] == "session_info")
            .and_then(|e| e["name"].as_str())
            .filter(|n| !n.is_empty())
            .map(str::to_string)
    }

    pub fn context(&self) -> SessionContext {
        SessionContext::default()
    }

    /// Makes everything written so far durable (fsync); called at agent_end and shutdown.
    pub fn sync(&mut self) -> Result<(), SessionError> {
        Ok(())
    }
}
