//! The client's session requests: replacing the session (`new_session`, `switch_session`, `fork`,
//! `clone`), naming it, reading it (`get_fork_messages`, `get_entries`, `get_tree`) and exporting
//! it (`export_html`). Each is answered at once with one response; a replacement aborts a running
//! run first and hands the old session's memory back to the system.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::Agent;
use crate::extensions::protocol::HookKind;
use crate::extensions::{ExtensionId, HookId};
use crate::rpc::events::Event;
use crate::rpc::protocol::Response;
use crate::session::SessionLog;

/// A session change waiting for the extensions' `session_before_*` hook.
pub enum SessionOp {
    New { parent_session: Option<String> },
    Switch { session_path: String },
    Fork { entry_id: String },
    Clone,
}

/// Who gets the answer of a session change.
pub enum OpReply {
    Client {
        id: Option<Value>,
        command: &'static str,
    },
    Extension {
        extension: ExtensionId,
        id: Option<String>,
    },
}

impl OpReply {
    fn client(id: Option<&Value>, command: &'static str) -> OpReply {
        OpReply::Client {
            id: id.cloned(),
            command,
        }
    }
}

impl Agent {
    pub(super) fn new_session(&mut self, id: Option<&Value>, parent_session: Option<&str>) {
        let op = SessionOp::New {
            parent_session: parent_session.map(String::from),
        };
        self.change_session(op, OpReply::client(id, "new_session"));
    }

    pub(super) fn switch_session(&mut self, id: Option<&Value>, session_path: &str) {
        let op = SessionOp::Switch {
            session_path: session_path.to_string(),
        };
        self.change_session(op, OpReply::client(id, "switch_session"));
    }

    pub(super) fn fork(&mut self, id: Option<&Value>, entry_id: &str) {
        let op = SessionOp::Fork {
            entry_id: entry_id.to_string(),
        };
        self.change_session(op, OpReply::client(id, "fork"));
    }

    pub(super) fn clone_session(&mut self, id: Option<&Value>) {
        self.change_session(SessionOp::Clone, OpReply::client(id, "clone"));
    }

    /// A session change from the client or an extension: v2 extensions' `session_before_switch`
    /// / `session_before_fork` hook first (any may cancel it), then the change and its answer.
    pub(super) fn change_session(&mut self, op: SessionOp, reply: OpReply) {
        let (kind, payload) = match &op {
            SessionOp::New { .. } => (HookKind::SessionBeforeSwitch, json!({"reason": "new"})),
            SessionOp::Switch { session_path } => (
                HookKind::SessionBeforeSwitch,
                json!({"reason": "resume", "targetSessionFile": session_path}),
            ),
            SessionOp::Fork { entry_id } => (
                HookKind::SessionBeforeFork,
                json!({"entryId": entry_id, "position": "before"}),
            ),
            SessionOp::Clone => (
                HookKind::SessionBeforeFork,
                json!({"entryId": self.session.leaf_id(), "position": "at"}),
            ),
        };
        let deadline = self.extensions.hook_deadline;
        let hook = self
            .extensions
            .host
            .as_ref()
            .and_then(|host| host.start_hook(kind, payload, deadline));
        match hook {
            Some(hook) => self.extensions.session_changes.push((hook, op, reply)),
            None => self.finish_session_change(op, reply, false),
        }
    }

    /// The hook answered for a waiting session change. False when none waited for it.
    pub(super) fn on_session_change_hook(&mut self, hook: HookId, cancel: bool) -> bool {
        let Some(position) = self
            .extensions
            .session_changes
            .iter()
            .position(|(h, _, _)| *h == hook)
        else {
            return false;
        };
        let (_, op, reply) = self.extensions.session_changes.remove(position);
        self.finish_session_change(op, reply, cancel);
        true
    }

    fn finish_session_change(&mut self, op: SessionOp, reply: OpReply, cancel: bool) {
        let result = if cancel {
            Ok(json!({ "cancelled": true }))
        } else {
            match op {
                SessionOp::New { parent_session } => {
                    self.open_new_session(parent_session.as_deref())
                }
                SessionOp::Switch { session_path } => self.open_other_session(&session_path),
                SessionOp::Fork { entry_id } => self.fork_at(&entry_id),
                SessionOp::Clone => self.clone_at_leaf(),
            }
        };
        let changed = !cancel && result.is_ok();
        match reply {
            OpReply::Client { id, command } => self.respond_result(id.as_ref(), command, result),
            OpReply::Extension { extension, id } => self.answer_extension(extension, id, result),
        }
        if let Some((shutdown, start)) = self.extensions.restart.take() {
            // Settings are read again with the new extensions' start.
            self.restart_extensions(shutdown, start);
        } else if changed {
            // pi 1.6.0's new runtime reads settings anew, extensions or not.
            self.reload_settings(false);
        }
    }

    fn respond_result(&mut self, id: Option<&Value>, command: &str, result: Result<Value, String>) {
        match result {
            Ok(data) => self.respond_ok(id, command, Some(data)),
            Err(error) => self.respond_error(id, command, &error),
        }
    }

    /// A fresh session (`new_session`; an extension's `new_session`): its answer data.
    pub(super) fn open_new_session(
        &mut self,
        parent_session: Option<&str>,
    ) -> Result<Value, String> {
        let created = match self.session.session_dir() {
            Some(dir) => SessionLog::create_with_parent(dir, &self.config.cwd, parent_session),
            None => Ok(SessionLog::in_memory(&self.config.cwd)),
        };
        let log = created.map_err(|e| e.to_string())?;
        self.replace_session(log, true, "new");
        Ok(json!({ "cancelled": false }))
    }

    /// Another session file (`switch_session`), run in its own directory.
    pub(super) fn open_other_session(&mut self, session_path: &str) -> Result<Value, String> {
        // Relative to where pi-rs was started, as pi resolves it (the process never
        // changes directory; only the agent's working directory moves).
        let path = PathBuf::from(session_path);
        let dir = self.session.session_dir().map(|d| d.to_path_buf());
        let (log, warnings) =
            SessionLog::open(&path, dir.as_deref(), &self.config.cwd).map_err(|e| e.to_string())?;
        if let Some(error) = log.missing_cwd_error(&self.config.cwd) {
            return Err(error);
        }
        for warning in warnings {
            log::warn!("{}: {warning}", path.display());
        }
        let session_cwd = log.cwd().to_path_buf();
        self.replace_session(log, false, "resume");
        self.move_to(session_cwd);
        Ok(json!({ "cancelled": false }))
    }

    /// A new session holding the branch up to `entry_id`'s parent (`fork`).
    pub(super) fn fork_at(&mut self, entry_id: &str) -> Result<Value, String> {
        let (log, text) = self.session.fork(entry_id).map_err(|e| e.to_string())?;
        self.replace_session(log, false, "fork");
        Ok(json!({ "text": text, "cancelled": false }))
    }

    /// A copy of the session up to its leaf (`clone`).
    fn clone_at_leaf(&mut self) -> Result<Value, String> {
        let log = self.session.clone_at_leaf().map_err(|e| e.to_string())?;
        self.replace_session(log, false, "fork");
        Ok(json!({ "cancelled": false }))
    }

    pub(super) fn set_session_name(&mut self, id: Option<&Value>, session_name: &str) {
        let trimmed = session_name.trim();
        if trimmed.is_empty() {
            self.respond_error(id, "set_session_name", "Session name cannot be empty");
            return;
        }
        if let Err(e) = self.session.append_session_info(trimmed) {
            let error = format!("Could not save the session name: {e}");
            self.respond_error(id, "set_session_name", &error);
            return;
        }
        self.emit(Event::SessionInfoChanged {
            name: trimmed.to_string(),
        });
        self.respond_ok(id, "set_session_name", None);
    }

    pub(super) fn get_fork_messages(&mut self, id: Option<&Value>) {
        let messages: Vec<Value> = self
            .session
            .fork_messages()
            .into_iter()
            .map(|m| json!({ "entryId": m.entry_id, "text": m.text }))
            .collect();
        self.respond_ok(
            id,
            "get_fork_messages",
            Some(json!({ "messages": messages })),
        );
    }

    pub(super) fn get_entries(&mut self, id: Option<&Value>, since: Option<&str>) {
        // Written from the entries without a JSON value per entry (sessions get long).
        match self.session.entries_since_json(since) {
            Ok(entries) => {
                let leaf = self.session.leaf_id();
                self.respond(Response::entries(id, &entries, leaf));
            }
            Err(e) => self.respond_error(id, "get_entries", &e.to_string()),
        }
    }

    pub(super) fn get_tree(&mut self, id: Option<&Value>) {
        // Built as text: a long session is a deep tree that serde_json would recurse into.
        let session = &self.session;
        let response = Response::tree(id, session.leaf_id(), |before, after| {
            session.tree_json_between(before, after)
        });
        self.respond(response);
    }

    pub(super) fn export_html(&mut self, id: Option<&Value>, output_path: Option<&str>) {
        match self.write_html_export(output_path) {
            Ok(path) => self.respond_ok(id, "export_html", Some(json!({ "path": path }))),
            Err(e) => self.respond_error(id, "export_html", &e),
        }
    }

    /// The saved session as one self-contained page; returns the path written.
    fn write_html_export(&self, output: Option<&str>) -> Result<String, String> {
        let Some(file) = self.session.file_path() else {
            return Err("Cannot export in-memory session to HTML".into());
        };
        if !self.session.is_on_disk() {
            return Err("Nothing to export yet - start a conversation first".into());
        }
        let output = match output {
            Some(path) => path.to_string(),
            None => crate::export::default_output_name(file),
        };
        let input = crate::export::ExportInput {
            header: self.session.header().to_value().clone(),
            entries: self.session.entries_since(None).unwrap_or_default(),
            leaf_id: self.session.leaf_id().map(str::to_string),
            system_prompt: self.system_prompt.text().to_string(),
            tools: self
                .tools
                .specs
                .iter()
                .map(|t| (t.name.clone(), t.description.clone(), t.parameters.clone()))
                .collect(),
            redactions: self.session.redactions(),
        };
        crate::export::export_to_file(&input, &self.config.cwd.join(&output))
            .map_err(|e| e.to_string())?;
        Ok(output)
    }

    /// Swaps in another session (new, switch, fork, clone). A running run is aborted first — it
    /// must not keep working unseen on the old session. The conversation, model and thinking
    /// level come from the new session's active branch.
    /// Replaces the session; extensions hear `session_shutdown` (with `targetSessionFile`), are
    /// restarted (see `restart_extensions`), and the new ones hear `session_start` (with
    /// `previousSessionFile`), `reason` being new, resume or fork.
    fn replace_session(&mut self, log: SessionLog, fresh: bool, reason: &str) {
        if self.is_busy() {
            self.abort_run();
        }
        let file = |log: &SessionLog| log.file_path().map(|p| p.to_string_lossy().into_owned());
        let previous_file = file(&self.session);
        let shutdown = json!({
            "type": "session_shutdown",
            "reason": reason,
            "targetSessionFile": file(&log),
        });
        // As pi 1.6.0: the extensions hear `session_shutdown` before the change is made, and
        // are stopped and started anew after the answer (which may be for one of them; the
        // stop sends no second event); without a restart they hear both events.
        let restart = self.can_restart_extensions();
        if restart {
            self.notify_all_extensions(&shutdown);
        } else {
            self.notify_extensions_of(shutdown.clone());
        }
        if let Err(e) = self.session.sync() {
            log::error!("session sync failed: {e}");
        }
        self.session = log;
        let mut context = self.session.context();
        context.resolve_virtual_selection(|provider, id| {
            self.config
                .find_model(provider, id)
                .is_some_and(|m| m.is_virtual())
        });
        self.messages = context.messages;
        self.request_cache.invalidate();
        // A refusal of strict tools was this session's (pi 1.6.0 forgets it with the session).
        self.runs.strict_tools_refused = false;
        self.restore_session_tools();
        // The old session and conversation are gone: hand their memory back to the system
        // (glibc otherwise keeps the freed heap, and RSS stays at the old session's plateau).
        return_freed_memory();
        if let Some((provider, id)) = &context.model
            && let Some(model) = self
                .config
                .find_model(provider, id)
                .filter(|m| self.config.has_auth(&m.provider))
        {
            self.model = model.clone();
        }
        if let Some(level) = context.thinking_level {
            self.thinking = self.model.clamp_thinking_level(level);
        }
        if fresh {
            if !self.model.is_placeholder()
                && let Err(e) = self
                    .session
                    .append_model_change(&self.model.provider, &self.model.id)
            {
                log::error!("could not record the model: {e}");
            }
            if let Err(e) = self.session.append_thinking_level_change(self.thinking) {
                log::error!("could not record the thinking level: {e}");
            }
        }
        if !self.queues.steering.is_empty() || !self.queues.follow_up.is_empty() {
            self.queues.steering.clear();
            self.queues.follow_up.clear();
            self.emit_queue_update();
        }
        let start = json!({
            "type": "session_start",
            "reason": reason,
            "previousSessionFile": previous_file,
        });
        if restart {
            self.extensions.restart = Some((Value::Null, start));
        } else {
            self.notify_extensions_of(start);
        }
    }

    /// A switched-to session runs in its own directory, as in pi: tools, `bash`, approvals, new
    /// sessions and the prompt's working-directory line follow. The new directory's trust is
    /// decided for it; settings are read again and the restarted extensions, context files,
    /// skills and templates are loaded for the new directory under that decision.
    /// The decision is made again even in the same directory: trust.json may have changed, and
    /// pi's new runtime reads it again.
    fn move_to(&mut self, cwd: PathBuf) {
        if cwd != self.config.cwd {
            log::info!("working directory is now {}", cwd.display());
            self.system_prompt = self.system_prompt.with_cwd(&cwd);
        }
        self.config.enter_directory(cwd);
    }
}

/// Gives freed heap pages back to the kernel (glibc keeps them by default); a no-op elsewhere.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases glibc's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
