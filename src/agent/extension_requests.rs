//! (v2) Extension requests the agent answers: queries about its state (`Query`) and control
//! actions (`ControlAction`). Each is answered at once on the agent thread with one
//! `query_result` / `action_result` (through the host), so an extension that asks during a hook
//! gets its answer while the agent waits for the hook — except `wait_for_idle`, answered once
//! nothing runs (checked after every input the loop handles).

use std::sync::Arc;

use serde_json::{Value, json};

use super::session_commands::{OpReply, SessionOp};
use super::state::{CompactionOrigin, Phase};
use super::{Agent, compaction};
use crate::config::ThinkingLevel;
use crate::config::models_json::ModelsAnswer;
use crate::extensions::ExtensionId;
use crate::extensions::approval::{ApprovalAnswer, Decision};
use crate::extensions::exec::ExecSpec;
use crate::extensions::host::Answerer;
use crate::extensions::protocol::{ControlAction, Query};
use crate::extensions::queries;
use crate::extensions::tool_run::{self, ToolRunSpec};
use crate::rpc::events::Event;

/// An extension's `exec` or `execute_tool` waiting for the client's approval.
pub struct PendingRun {
    pub ui_id: String,
    grant_key: String,
    extension: ExtensionId,
    id: String,
    run: Run,
}

/// What an extension asked to run.
enum Run {
    Exec(ExecSpec),
    Tool(ToolRunSpec),
}

impl Run {
    /// The tool and arguments the approval gate judges (and records), against the session's
    /// cwd: `exec` as a `bash` call of its command line; an `execute_tool` with a `cwd` of its
    /// own with its `path` taken from there (or that folder, for the tools that search one), so
    /// a `cwd` cannot make an outside path look inside.
    fn gated_call(&self, session_cwd: &std::path::Path) -> (&str, Value) {
        match self {
            Run::Exec(spec) => ("bash", json!({ "command": spec.display_line() })),
            Run::Tool(spec) => {
                let mut args = spec.args.clone();
                if let Some(dir) = &spec.cwd {
                    let base = session_cwd.join(dir);
                    let searches = matches!(spec.tool_name.as_str(), "grep" | "find" | "ls");
                    match args.get("path").and_then(Value::as_str) {
                        Some(path) if !path.starts_with('~') && !path.starts_with('@') => {
                            args["path"] = json!(base.join(path).to_string_lossy());
                        }
                        None if searches => args["path"] = json!(base.to_string_lossy()),
                        _ => {}
                    }
                }
                (spec.tool_name.as_str(), args)
            }
        }
    }
}

impl Agent {
    /// After the registry changed (an extension's provider): the current model as the registry
    /// now describes it (base URL, headers); a model that left the registry stays as it was.
    pub(super) fn refresh_current_model(&mut self) {
        if let Some(model) = self.config.find_model(&self.model.provider, &self.model.id) {
            self.model = model;
        }
    }

    pub(super) fn on_extension_query(&mut self, extension: ExtensionId, id: &str, query: Query) {
        let Some(host) = &self.extensions.host else {
            return;
        };
        match self.answer_query(extension, query) {
            Ok(QueryAnswer::Models(models)) => {
                answer_models(host.answerer(), extension, id, Arc::new(models));
            }
            Ok(QueryAnswer::Value(value)) => host.answer(extension, "query_result", id, Ok(value)),
            Err(error) => host.answer(extension, "query_result", id, Err(error)),
        }
    }

    fn answer_query(&self, extension: ExtensionId, query: Query) -> Result<QueryAnswer, String> {
        let session = &self.session;
        let entry_value = |id: &str| session.entry(id).map(|e| e.to_value());
        Ok(QueryAnswer::Value(match query {
            Query::Flags => match &self.extensions.host {
                Some(host) => Value::Object(host.flag_values(extension)),
                None => json!({}),
            },
            Query::Model => json!({
                "model": serde_json::to_value(&self.model).unwrap_or(Value::Null),
                "thinkingLevel": self.thinking.as_str(),
            }),
            Query::Models => return Ok(QueryAnswer::Models(self.config.models_for_answer())),
            Query::ActiveTools => json!(
                self.tools
                    .specs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
            ),
            Query::AllTools => {
                let host = self.extensions.host.as_ref();
                let mcp_specs = self
                    .mcp
                    .as_ref()
                    .map(|m| m.tool_specs())
                    .unwrap_or_default();
                json!(queries::all_tools(
                    &self.tools.extension_tools,
                    |tool| host.map_or(Value::Null, |h| h.source_info(tool.extension)),
                    &mcp_specs,
                ))
            }
            Query::Commands => json!(self.commands_list()),
            Query::ContextUsage => compaction::context_usage(
                &session.branch(),
                &self.messages,
                self.usage_limits_model().context_window,
            )
            .unwrap_or(Value::Null),
            Query::SystemPrompt => json!(self.run_system_prompt_text()),
            Query::Session => json!({
                "sessionId": session.id(),
                "sessionFile": session.file_path().map(|p| p.to_string_lossy()),
                "sessionDir": session.session_dir().map(|p| p.to_string_lossy()),
                "cwd": session.cwd().to_string_lossy(),
                "sessionName": session.name(),
                "leafId": session.leaf_id(),
                "header": session.header().to_value(),
            }),
            Query::SessionName => json!(session.name()),
            Query::Trust => json!({ "trusted": self.config.project_trusted() }),
            Query::Entries => json!(
                session
                    .entries()
                    .iter()
                    .map(|e| e.to_value())
                    .collect::<Vec<_>>()
            ),
            Query::Branch { from } => match from {
                None => json!(
                    session
                        .branch()
                        .iter()
                        .map(|e| e.to_value())
                        .collect::<Vec<_>>()
                ),
                Some(from) => {
                    let entries: Vec<Value> =
                        session.entries().iter().map(|e| e.to_value()).collect();
                    json!(queries::branch_to(&entries, &from)?)
                }
            },
            Query::Entry { id } => entry_value(&id).unwrap_or(Value::Null),
            Query::Leaf => session
                .leaf_id()
                .and_then(entry_value)
                .unwrap_or(Value::Null),
            Query::McpServers => self.extensions.mcp_servers.to_json(),
            Query::Settings => Value::Object(self.config.all_settings().clone()),
            Query::Auth { provider, model_id } => self.auth_answer(&provider, model_id)?,
            Query::Idle => json!({
                "idle": !self.is_busy(),
                "pendingMessages": !self.queues.steering.is_empty() || !self.queues.follow_up.is_empty(),
            }),
        }))
    }
}

/// A query's answer: a value, or the `models` answer, written off the agent thread.
enum QueryAnswer {
    Value(Value),
    /// Every model (its JSON text written once per list) and which are available.
    Models(ModelsAnswer),
}

/// Sends the `models` answer (`{"all", "available"}`, about 950 KB with the built-in catalog)
/// from a thread of its own: the model list and its text are built there the first time and
/// reused after, so the agent loop only checks which providers have credentials. Written in
/// place when no thread can start.
fn answer_models(answerer: Answerer, extension: ExtensionId, id: &str, models: Arc<ModelsAnswer>) {
    let id = id.to_string();
    let send = {
        let (answerer, id, models) = (answerer.clone(), id.clone(), models.clone());
        move || answerer.answer_json(extension, "query_result", &id, &models.write())
    };
    if let Err(e) = std::thread::Builder::new()
        .name("models-answer".into())
        .spawn(send)
    {
        log::warn!("cannot start a thread for the models answer: {e}");
        answerer.answer_json(extension, "query_result", &id, &models.write());
    }
}

impl Agent {
    /// The `auth` query: the key pi-rs resolved (a secret: it goes to the asking extension only,
    /// never to a log), with a model's request headers when one is named.
    fn auth_answer(&self, provider: &str, model_id: Option<String>) -> Result<Value, String> {
        let Some(id) = model_id else {
            return Ok(json!({ "apiKey": self.config.api_key(provider) }));
        };
        let model = self
            .config
            .find_model(provider, &id)
            .ok_or_else(|| format!("Model not found: {provider}/{id}"))?;
        let (api_key, headers) = self.config.request_auth(&model)?;
        let headers: serde_json::Map<String, Value> = headers
            .into_iter()
            .map(|(name, value)| (name, Value::String(value)))
            .collect();
        Ok(json!({ "apiKey": api_key, "headers": headers }))
    }

    pub(super) fn on_extension_control(
        &mut self,
        extension: ExtensionId,
        id: Option<String>,
        action: ControlAction,
    ) {
        if let ControlAction::Exec(spec) = action {
            self.start_request(extension, id, Run::Exec(spec));
            return;
        }
        if let ControlAction::ExecuteTool(spec) = action {
            self.start_request(extension, id, Run::Tool(spec));
            return;
        }
        if let ControlAction::Reload = action {
            self.reload_for_extension(extension, id);
            return;
        }
        if let ControlAction::NavigateTree(target) = action {
            self.navigate_tree(extension, id, target);
            return;
        }
        let op = match &action {
            ControlAction::NewSession { parent_session } => Some(SessionOp::New {
                parent_session: parent_session.clone(),
            }),
            ControlAction::SwitchSession { session_path } => Some(SessionOp::Switch {
                session_path: session_path.clone(),
            }),
            ControlAction::Fork { entry_id } => Some(SessionOp::Fork {
                entry_id: entry_id.clone(),
            }),
            _ => None,
        };
        if let Some(op) = op {
            self.change_session(op, OpReply::Extension { extension, id });
            return;
        }
        if let ControlAction::WaitForIdle = action
            && self.is_busy()
        {
            if let Some(id) = id {
                self.extensions.idle_waiters.push((extension, id));
            }
            return;
        }
        let answer = self.control(extension, action);
        self.answer_extension(extension, id, answer);
        self.send_mcp_servers_change();
    }

    /// Answers a control request (`action_result`); without an id a failure is an
    /// `extension_error`.
    pub(super) fn answer_extension(
        &mut self,
        extension: ExtensionId,
        id: Option<String>,
        answer: Result<Value, String>,
    ) {
        if let Some(id) = id
            && let Some(host) = &self.extensions.host
        {
            host.answer(extension, "action_result", &id, answer);
        } else if let Err(error) = answer {
            self.emit(Event::ExtensionError {
                extension_path: self.extension_path(extension),
                event: "extension".into(),
                error,
            });
        }
    }

    /// `exec` and `execute_tool`: through the approval gate (`exec` as a `bash` call of its
    /// command line), then run in the tool sandbox on a thread of its own, which answers the
    /// extension.
    fn start_request(&mut self, extension: ExtensionId, id: Option<String>, run: Run) {
        let kind = match run {
            Run::Exec(_) => "exec",
            Run::Tool(_) => "execute_tool",
        };
        let Some(id) = id else {
            self.emit(Event::ExtensionError {
                extension_path: self.extension_path(extension),
                event: "extension".into(),
                error: format!("{kind} needs an id (its answer carries the output)"),
            });
            return;
        };
        let (tool, args) = run.gated_call(&self.config.cwd);
        let decision =
            self.tools
                .approvals
                .decide(tool, &args, &self.config.cwd, &self.tools.grants);
        match decision {
            Decision::Allow => {
                if self.tools.approvals.is_enabled() {
                    self.record_approval(tool, &args, "allowed by rule");
                }
                self.run_request(extension, id, run);
            }
            Decision::Deny { reason } => {
                self.record_approval(tool, &args, "denied by rule");
                self.answer_denied(extension, &id, &run, reason);
            }
            Decision::Ask {
                title,
                message,
                grant_key,
            } => {
                let Some(host) = &self.extensions.host else {
                    return;
                };
                let timeout = self.tools.approvals.ask_timeout();
                let (ui_id, record) = host.ask_approval(&title, &message, timeout);
                self.extensions.pending_runs.push(PendingRun {
                    ui_id,
                    grant_key,
                    extension,
                    id,
                    run,
                });
                self.emit(record);
            }
        }
    }

    /// A denied `exec` fails (as before); a denied `execute_tool` answers an error result, as
    /// the model sees a denied call.
    fn answer_denied(&self, extension: ExtensionId, id: &str, run: &Run, reason: String) {
        let Some(host) = &self.extensions.host else {
            return;
        };
        let answer = match run {
            Run::Exec(_) => Err(reason),
            Run::Tool(_) => Ok(tool_run::result_value(&crate::tools::ToolOutput::error(
                reason,
            ))),
        };
        host.answer(extension, "action_result", id, answer);
    }

    fn run_request(&mut self, extension: ExtensionId, id: String, run: Run) {
        let Some(host) = &self.extensions.host else {
            return;
        };
        let Some(guard) = self.extensions.runs.begin(extension, &id) else {
            host.answer(
                extension,
                "action_result",
                &id,
                Err(format!("a request with id {id:?} is still running")),
            );
            return;
        };
        match run {
            Run::Exec(spec) => crate::extensions::exec::start(
                spec,
                self.config.cwd.clone(),
                self.tools.sandbox.policy(),
                guard,
                host.answerer(),
                extension,
                id,
            ),
            Run::Tool(spec) => tool_run::start(
                spec,
                self.tool_context(),
                guard,
                host.answerer(),
                extension,
                id,
            ),
        }
    }

    /// The client answered an `exec`'s or `execute_tool`'s approval dialog. False when no
    /// request waited for it.
    pub(super) fn on_run_approval(&mut self, ui_id: &str, answer: ApprovalAnswer) -> bool {
        let Some(position) = self
            .extensions
            .pending_runs
            .iter()
            .position(|p| p.ui_id == ui_id)
        else {
            return false;
        };
        let pending = self.extensions.pending_runs.remove(position);
        let (tool, args) = pending.run.gated_call(&self.config.cwd);
        let tool = tool.to_string();
        match answer {
            ApprovalAnswer::AllowOnce | ApprovalAnswer::AllowForSession => {
                if answer == ApprovalAnswer::AllowForSession {
                    self.tools.grants.grant(&pending.grant_key);
                }
                self.record_approval(&tool, &args, "allowed by the user");
                self.run_request(pending.extension, pending.id, pending.run);
            }
            ApprovalAnswer::Deny { .. } => {
                self.record_approval(&tool, &args, "denied by the user");
                let what = match pending.run {
                    Run::Exec(_) => "exec",
                    Run::Tool(_) => tool.as_str(),
                };
                let reason = answer
                    .denial_reason(what)
                    .unwrap_or_else(|| "Denied".into());
                self.answer_denied(pending.extension, &pending.id, &pending.run, reason);
            }
        }
        true
    }

    /// Answers the `wait_for_idle` requests once nothing runs (checked after every input).
    pub(super) fn answer_idle_waiters(&mut self) {
        if self.extensions.idle_waiters.is_empty() || self.is_busy() {
            return;
        }
        let waiters = std::mem::take(&mut self.extensions.idle_waiters);
        if let Some(host) = &self.extensions.host {
            for (extension, id) in waiters {
                host.answer(extension, "action_result", &id, Ok(Value::Null));
            }
        }
    }

    /// An event only v2 extensions get (never written to stdout): `model_select`,
    /// `thinking_level_select`, `session_start` / `session_shutdown` around a session change.
    pub(super) fn notify_extensions_of(&self, event: Value) {
        if let Some(host) = &self.extensions.host {
            host.notify_event_v2(&event);
        }
    }

    pub(super) fn extension_path(&self, extension: ExtensionId) -> String {
        self.extensions
            .host
            .as_ref()
            .and_then(|h| h.source_info(extension)["path"].as_str().map(String::from))
            .unwrap_or_default()
    }

    fn control(&mut self, extension: ExtensionId, action: ControlAction) -> Result<Value, String> {
        match action {
            ControlAction::RegisterTool(decl) => {
                if let Some(host) = self.extensions.host.as_mut() {
                    host.register_tool(extension, decl);
                }
                self.refresh_extension_tools();
                self.rebuild_system_prompt();
                Ok(Value::Null)
            }
            ControlAction::UnregisterTool { name } => {
                let removed = self
                    .extensions
                    .host
                    .as_mut()
                    .is_some_and(|host| host.unregister_tool(extension, &name));
                self.refresh_extension_tools();
                self.rebuild_system_prompt();
                Ok(json!(removed))
            }
            ControlAction::RegisterCommand(decl) => {
                if let Some(host) = self.extensions.host.as_mut() {
                    host.register_command(extension, decl);
                }
                Ok(Value::Null)
            }
            ControlAction::RegisterProvider { name, config } => {
                let oauth = crate::extensions::providers::check_oauth(&config)?;
                let renewer = self.extensions.host.as_ref().and_then(|host| {
                    crate::extensions::providers::oauth_renewer(
                        host,
                        extension,
                        &config,
                        &self.config,
                    )
                });
                let (config, refresh) = crate::extensions::providers::without_refresh(&config);
                self.config.register_provider(&name, &config)?;
                self.config.set_provider_oauth(&name, renewer);
                let modify = oauth.is_some_and(|oauth| oauth.modify_models);
                if !modify {
                    self.extensions.modified_providers.remove(&name);
                }
                self.refresh_registered(extension, &name, config.clone(), refresh, modify);
                self.remodify_providers(Some(&name));
                if config.get("streamSimple").and_then(Value::as_bool) == Some(true) {
                    self.extensions.stream_providers.insert(name, extension);
                } else {
                    self.extensions.stream_providers.remove(&name);
                }
                self.refresh_current_model();
                Ok(Value::Null)
            }
            ControlAction::RegisterVirtualModel(decl) => {
                let registered = self.register_virtual_model(extension, &decl)?;
                self.remodify_providers(None);
                Ok(registered)
            }
            ControlAction::UnregisterVirtualModel { provider, model_id } => {
                let removed = self.unregister_virtual_model(&provider, &model_id);
                if removed == Value::Bool(true) {
                    self.remodify_providers(None);
                }
                Ok(removed)
            }
            ControlAction::UnregisterProvider { name } => {
                let removed = self.config.unregister_provider(&name);
                self.extensions.stream_providers.remove(&name);
                self.extensions.modified_providers.remove(&name);
                self.refresh_current_model();
                if removed {
                    self.remodify_providers(None);
                }
                Ok(json!(removed))
            }
            ControlAction::UnregisterCommand { name } => {
                Ok(json!(self.extensions.host.as_mut().is_some_and(|host| {
                    host.unregister_command(extension, &name)
                })))
            }
            ControlAction::SetActiveTools { names } => Ok(json!(self.set_active_tools(&names))),
            ControlAction::SetModel { provider, model_id } => {
                let model = self
                    .config
                    .find_model(&provider, &model_id)
                    .ok_or_else(|| format!("Model not found: {provider}/{model_id}"))?;
                if !self.config.has_auth(&model.provider) {
                    return Ok(json!(false));
                }
                self.switch_model(model, None, "set");
                Ok(json!(true))
            }
            ControlAction::SetThinkingLevel { level } => {
                let parsed = ThinkingLevel::parse(&level)
                    .ok_or_else(|| format!("Invalid thinking level: {level}"))?;
                let level = self.model.clamp_thinking_level(parsed);
                self.change_thinking_level(level);
                Ok(json!(self.thinking.as_str()))
            }
            ControlAction::Compact {
                custom_instructions,
            } => {
                if matches!(self.phase, Phase::Compacting(_)) {
                    return Err("Compaction already in progress".into());
                }
                if self.is_busy() {
                    self.abort_run();
                }
                self.start_compaction(
                    compaction::CompactionReason::Manual,
                    CompactionOrigin::Extension,
                    custom_instructions.as_deref(),
                );
                Ok(json!({ "started": true }))
            }
            ControlAction::CancelRequest { request_id } => {
                Ok(json!(self.extensions.runs.cancel(extension, &request_id)))
            }
            ControlAction::Abort => {
                self.extensions.runs.cancel_all();
                if self.is_busy() {
                    self.abort_run();
                }
                self.abort_tree_summary();
                Ok(Value::Null)
            }
            // Handled by `on_extension_control` (they wait for a hook or a worker).
            ControlAction::NewSession { .. }
            | ControlAction::Fork { .. }
            | ControlAction::SwitchSession { .. }
            | ControlAction::Exec(_)
            | ControlAction::ExecuteTool(_)
            | ControlAction::Reload
            | ControlAction::NavigateTree(_)
            | ControlAction::WaitForIdle => Ok(Value::Null),
            ControlAction::RegisterMcpServer { name, config } => {
                self.register_mcp_server(extension, &name, &config)
            }
            ControlAction::UnregisterMcpServer { name } => {
                self.unregister_mcp_server(extension, &name);
                Ok(Value::Null)
            }
        }
    }
}

impl Agent {
    /// (v2 `set_active_tools`, a `before_agent_start` answer's `selectedTools`) The known names,
    /// in order and once each, become the active tools; returns the tools now offered.
    pub(super) fn set_active_tools(&mut self, names: &[String]) -> Vec<String> {
        let mcp_specs = self
            .mcp
            .as_ref()
            .map(|m| m.tool_specs())
            .unwrap_or_default();
        let known = |name: &String| {
            crate::tools::ALL_TOOLS.contains(&name.as_str())
                || self
                    .tools
                    .extension_tools
                    .iter()
                    .any(|t| t.decl.name == *name)
                || mcp_specs.iter().any(|s| s.name == *name)
        };
        let mut active: Vec<String> = Vec::new();
        for name in names.iter().filter(|n| known(n)) {
            if !active.contains(name) {
                active.push(name.clone());
            }
        }
        self.tools.builtins = active
            .iter()
            .filter(|n| crate::tools::selection::is_builtin(n))
            .cloned()
            .collect();
        self.tools.active = Some(active);
        self.refresh_tool_specs();
        self.rebuild_system_prompt();
        self.tools.specs.iter().map(|s| s.name.clone()).collect()
    }

    /// The system prompt the current (or next) request sends: an extension's replacement for
    /// this run, the run's prompt from changed options, or the agent's.
    pub(super) fn run_system_prompt_text(&self) -> &str {
        match (
            &self.extensions.run_system_prompt,
            &self.extensions.run_prompt,
        ) {
            (Some(forced), _) => forced,
            (None, Some(prompt)) => prompt.text(),
            (None, None) => self.system_prompt.text(),
        }
    }
}
