//! (v2) An extension's `reload` (pi's `ctx.reload()`) and a session change (new, resume, fork:
//! pi 1.6.0 replaces its runtime): the extensions, skills, prompt templates and context files
//! are loaded anew, as at start. The old extensions hear `session_shutdown` (reason `reload`,
//! or the change's) and are stopped; the new ones are started on the same event channel and
//! hear `session_start` with the same reason. A reload keeps the session, model, thinking level
//! and conversation. settings.json is read again first (pi 1.6.0's `reload` re-reads it, and its
//! session change builds a runtime that reads it anew): what the agent holds from it (queue
//! modes, auto-compaction and auto-retry, the stream and hook limits, the settings' skill and
//! prompt paths) is taken again; the trust decision stays.
//!
//! Blocking: none on the agent thread. Stopping the old extensions (their grace period plus the
//! host's bound) and starting the new ones (the registration timeout, as at start) run on worker
//! threads while the agent is in `Phase::Reloading`: commands are answered meanwhile, prompts
//! are queued as while a run goes, and `abort` ends the wait (see `abort_reload`).

use std::time::Duration;

use crossbeam_channel::Sender;
use serde_json::{Value, json};

use super::Agent;
use super::state::{Phase, ReloadStage, Reloaded, Reloading};
use crate::extensions::{ExtensionEvent, ExtensionId};

/// How long the old extensions get to exit after `session_shutdown` (as at exit).
const RELOAD_GRACE: Duration = Duration::from_millis(500);

/// What the agent needs to load the run's resources again: the command line's part of start-up.
#[derive(Default)]
pub struct ReloadInputs {
    pub extensions: crate::extensions::launch::Relaunch,
    /// The sending end of the extension event channel (None when no host runs).
    pub events_tx: Option<Sender<ExtensionEvent>>,
    pub resources: crate::resources::discovery::LoadOptions,
    pub prompt: PromptArgs,
}

/// The command line's system-prompt options (`--system-prompt`, `--append-system-prompt`,
/// `--no-context-files`).
#[derive(Clone, Debug, Default)]
pub struct PromptArgs {
    pub system_prompt: Option<String>,
    pub append: Vec<String>,
    pub no_context_files: bool,
}

impl Agent {
    /// `reload` from an extension: refused while a run or a compaction is going (pi's errors);
    /// otherwise answered (null) first — the asking extension is among those stopped — and done.
    pub(super) fn reload_for_extension(&mut self, extension: ExtensionId, id: Option<String>) {
        let refusal = if matches!(self.phase, Phase::Compacting(_)) {
            Some("Wait for compaction to finish before reloading.")
        } else if self.is_busy()
            || !self.extensions.session_changes.is_empty()
            || self.extensions.tree.is_some()
            || !self.extensions.user_bash.is_empty()
        {
            Some("Wait for the current response to finish before reloading.")
        } else if self.extensions.reload.events_tx.is_none() {
            Some("reload: no extension host")
        } else {
            None
        };
        if let Some(refusal) = refusal {
            self.answer_extension(extension, id, Err(refusal.to_string()));
            return;
        }
        self.answer_extension(extension, id, Ok(Value::Null));
        self.restart_extensions(
            crate::extensions::protocol::session_shutdown_event("reload"),
            json!({"type": "session_start", "reason": "reload"}),
        );
    }

    /// Whether a session change can restart the extensions (as pi 1.6.0 does): they run, and
    /// nothing else holds the agent's phase.
    pub(super) fn can_restart_extensions(&self) -> bool {
        self.extensions.host.is_some()
            && self.extensions.reload.events_tx.is_some()
            && matches!(self.phase, Phase::Idle)
    }

    /// Stops the old extensions on a worker (they hear `shutdown`, unless it is Null); `on_reload_step` goes on
    /// when it is done, and the new ones hear `start`. A reload and a session change (pi
    /// 1.6.0's runtime replacement) both come here. When the phase is taken (a session change
    /// raced with something else), the running extensions hear both events and keep running.
    pub(super) fn restart_extensions(&mut self, shutdown: Value, start_event: Value) {
        if !self.can_restart_extensions() {
            // (Null: the extensions heard `session_shutdown` already.)
            if !shutdown.is_null() {
                self.notify_extensions_of(shutdown);
            }
            self.notify_extensions_of(start_event);
            return;
        }
        let Some(host) = self.extensions.host.take() else {
            return;
        };
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let spawned = std::thread::Builder::new()
            .name("extension-reload-stop".into())
            .spawn(move || {
                host.shutdown_for_restart(RELOAD_GRACE, shutdown);
                let _ = done_tx.send(Reloaded::Stopped);
            });
        if let Err(e) = spawned {
            // The host went down with the closure: the reload goes on as if it had stopped.
            log::error!("could not start the reload's worker: {e}");
            self.after_old_extensions_stopped();
            self.start_new_extensions(start_event);
            return;
        }
        let stage = ReloadStage::Stopping;
        self.phase = Phase::Reloading(Box::new(Reloading {
            stage,
            start_event,
            done,
        }));
    }

    /// The reload's worker reported (`None`: it died without a word).
    pub(super) fn on_reload_step(&mut self, step: Option<Reloaded>) {
        let Phase::Reloading(reloading) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        match (reloading.stage, step) {
            (ReloadStage::Stopping, _) => {
                self.after_old_extensions_stopped();
                self.start_new_extensions(reloading.start_event);
            }
            (ReloadStage::Starting, Some(Reloaded::Started(host, mut errors))) => {
                // (v2) The new `register` lines' providers, as at start.
                errors.extend(crate::extensions::launch::register_providers(
                    &host,
                    &mut self.config,
                ));
                self.extensions.stream_providers =
                    crate::extensions::launch::streamed_providers(&host, &self.config)
                        .into_iter()
                        .collect();
                self.extensions.virtual_models =
                    crate::extensions::launch::virtual_model_owners(&host, &self.config)
                        .into_iter()
                        .collect();
                self.extensions.host = Some(host);
                self.refresh_current_model();
                self.refresh_registered_providers(None);
                for error in errors {
                    self.emit(error);
                }
                self.refresh_extension_tools();
                self.rebuild_system_prompt();
                self.notify_all_extensions(&reloading.start_event);
                self.remember_session_start(&reloading.start_event);
                // pi asks `resources_discover` with `reload` after a reload, else `startup`.
                let reason = if reloading.start_event["reason"] == "reload" {
                    "reload"
                } else {
                    "startup"
                };
                self.discover_resources(reason);
                self.after_reload();
            }
            (ReloadStage::Starting, _) => {
                log::error!("the reload's worker died: no extension runs");
                self.without_extensions();
                self.after_reload();
            }
        }
    }

    /// `abort` during a reload: the agent does not wait for it. Extensions still stopping stop;
    /// those starting are stopped once started (the worker's report finds no reader). The run
    /// goes on without extensions and with the resources it had.
    pub(super) fn abort_reload(&mut self) {
        let Phase::Reloading(reloading) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        if reloading.stage == ReloadStage::Stopping {
            self.after_old_extensions_stopped();
        }
        log::warn!("reload aborted: no extension runs until the next start");
        self.without_extensions();
    }

    /// What the old extensions said before they stopped is handled now, while no host runs:
    /// their ids (hooks, commands) must not meet the new host's.
    fn after_old_extensions_stopped(&mut self) {
        let pending: Vec<ExtensionEvent> = self.extensions.events.try_iter().collect();
        for event in pending {
            self.on_extension_event(event);
        }
        // Commands of the old extensions that never said `command_done` end as handled.
        for (_, id) in std::mem::take(&mut self.extensions.command_runs) {
            self.respond(crate::rpc::protocol::Response::disposition(
                id.as_ref(),
                "prompt",
                "handled",
            ));
        }
        self.extensions.idle_waiters.clear();
        self.drop_virtual_models();
        self.extensions.pending_runs.clear();
        // The old extensions' runs end; the new ones (the same ids again) start a fresh table.
        self.extensions.runs.cancel_all();
        self.extensions.runs = Default::default();
        // Registrations are not kept (as in pi): the new extensions register again.
        if self.extensions.mcp_servers.clear() {
            self.mcp_servers_changed(false);
        }
    }

    /// Loads the resources again and starts the new extensions on a worker (their handshakes
    /// take up to the registration timeout).
    fn start_new_extensions(&mut self, start_event: Value) {
        if start_event["reason"] == "reload" {
            let defaults = self.default_tools();
            self.reload_settings(true);
            self.activate_added_default_tools(defaults);
        } else {
            self.reload_settings(false);
        }
        let inputs = &mut self.extensions.reload.resources;
        inputs.cwd = self.config.cwd.clone();
        inputs.skip_project = !self.config.project_trusted();
        self.resources = crate::resources::discovery::load_resources(inputs);

        let Some(events) = self.extensions.reload.events_tx.clone() else {
            self.without_extensions();
            return;
        };
        let start = crate::extensions::launch::relaunch(
            &self.extensions.reload.extensions,
            &self.config,
            &self.session,
            &self.tools.sandbox.policy(),
        );
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let spawned = std::thread::Builder::new()
            .name("extension-reload-start".into())
            .spawn(move || {
                // Nobody reads when the reload was aborted: the host is dropped, which stops it.
                let (host, errors) = start.run(&events);
                let _ = done_tx.send(Reloaded::Started(host, errors));
            });
        match spawned {
            Ok(_) => {
                let stage = ReloadStage::Starting;
                self.phase = Phase::Reloading(Box::new(Reloading {
                    stage,
                    start_event,
                    done,
                }));
            }
            Err(e) => {
                log::error!("could not start the reload's worker: {e}");
                self.without_extensions();
            }
        }
    }

    /// settings.json again, and what the agent took from it at start. `keep_broken`: a file
    /// that does not parse keeps its settings (a `reload`; a session change reads it as empty).
    pub(super) fn reload_settings(&mut self, keep_broken: bool) {
        self.config.reload_settings(keep_broken);
        self.queues.steering_mode = self.config.steering_mode();
        self.queues.follow_up_mode = self.config.follow_up_mode();
        self.settings.auto_compaction = self.config.compaction_enabled();
        self.settings.auto_retry = self.config.retry_enabled();
        self.settings.idle_timeout = super::idle_timeout(&self.config);
        self.extensions.hook_deadline = super::extending::hook_deadline(&self.config);
        let inputs = &mut self.extensions.reload.resources;
        inputs.project_settings_skills = self.config.scoped_list(true, "skills");
        inputs.project_settings_prompts = self.config.scoped_list(true, "prompts");
        inputs.user_settings_skills = self.config.scoped_list(false, "skills");
        inputs.user_settings_prompts = self.config.scoped_list(false, "prompts");
    }

    /// The built-ins settings `defaultTools` chooses with the command line's `+name` / `-name`
    /// entries; None when the command line chose the tools.
    fn default_tools(&self) -> Option<Vec<String>> {
        use crate::tools::selection;
        let modifiers = self.tools.restore_with.as_ref()?;
        let defaults = selection::default_tools(
            self.config.scoped_setting(false, "defaultTools"),
            self.config.scoped_setting(true, "defaultTools"),
        )
        .unwrap_or_else(|| crate::tools::DEFAULT_TOOLS.map(String::from).to_vec());
        Some(selection::apply_modifiers(&defaults, modifiers))
    }

    /// pi 1.6.0's `reload`: the built-ins a changed `defaultTools` adds are offered; the ones it
    /// drops stay, and so do tools turned off during the session unless it adds them anew.
    fn activate_added_default_tools(&mut self, before: Option<Vec<String>>) {
        let (Some(before), Some(after)) = (before, self.default_tools()) else {
            return;
        };
        let added: Vec<String> = after
            .into_iter()
            .filter(|name| !before.contains(name))
            .filter(|name| crate::tools::selection::is_builtin(name))
            .filter(|name| self.tools.filter.allows(name))
            .collect();
        if added.is_empty() {
            return;
        }
        for name in added {
            self.tools.withdrawn.retain(|n| *n != name);
            if let Some(active) = self.tools.active.as_mut().filter(|a| !a.contains(&name)) {
                active.push(name.clone());
            }
            if !self.tools.builtins.contains(&name) {
                self.tools.builtins.push(name);
            }
        }
        self.refresh_tool_specs();
        self.rebuild_system_prompt();
    }

    /// No extension runs: their tools are no longer offered.
    fn without_extensions(&mut self) {
        self.tools.extension_tools.clear();
        self.tools.approvals.set_extension_tools(std::iter::empty());
        self.refresh_tool_specs();
        self.rebuild_system_prompt();
    }

    /// Messages queued while the reload ran (a prompt with `streamingBehavior`) start a run.
    fn after_reload(&mut self) {
        if !self.queues.steering.is_empty() || !self.queues.follow_up.is_empty() {
            self.continue_run();
        }
    }

    /// (v2) `resources_discover` after `session_start` (`startup` / `reload`): the extensions'
    /// skill and prompt paths are loaded besides the run's own (when the answer comes).
    pub(super) fn discover_resources(&mut self, reason: &str) {
        let payload = json!({"cwd": self.config.cwd.to_string_lossy(), "reason": reason});
        let deadline = self.extensions.hook_deadline;
        self.extensions.discover_hook = self.extensions.host.as_ref().and_then(|host| {
            host.start_hook(
                crate::extensions::protocol::HookKind::ResourcesDiscover,
                payload,
                deadline,
            )
        });
    }

    /// The `resources_discover` answer: skills and prompt templates are loaded again with the
    /// extensions' paths (relative ones from the working directory, as `--skill`), and the system
    /// prompt rebuilt. False when no discovery waited for this hook.
    pub(super) fn on_resources_discovered(
        &mut self,
        hook: crate::extensions::HookId,
        skill_paths: &[String],
        prompt_paths: &[String],
    ) -> bool {
        if self.extensions.discover_hook != Some(hook) {
            return false;
        }
        self.extensions.discover_hook = None;
        if skill_paths.is_empty() && prompt_paths.is_empty() {
            return true;
        }
        let mut options = self.extensions.reload.resources.clone();
        options.cwd = self.config.cwd.clone();
        options.skip_project = !self.config.project_trusted();
        options.cli_skills.extend(skill_paths.iter().cloned());
        options
            .cli_prompt_templates
            .extend(prompt_paths.iter().cloned());
        self.resources = crate::resources::discovery::load_resources(&options);
        self.rebuild_system_prompt();
        true
    }

    /// The system prompt from the loaded resources, the active built-ins and the offered
    /// extension tools (start-up's recipe): after a reload, `set_active_tools` and late tool
    /// registration (pi rebuilds it whenever the active tools change).
    pub(super) fn rebuild_system_prompt(&mut self) {
        let args = &self.extensions.reload.prompt;
        let sources = crate::resources::system_prompt::RunSources {
            system_prompt: args.system_prompt.as_deref(),
            append: &args.append,
            no_context_files: args.no_context_files,
            cwd: &self.config.cwd,
            agent_dir: &self.config.agent_dir,
            project_trusted: self.config.project_trusted(),
            codemode_only: self.config.codemode_presentation().only,
        };
        // Extension tools outside an extension's `set_active_tools` are not offered: not listed.
        let extension_tools: Vec<crate::extensions::ExtensionTool> = self
            .tools
            .extension_tools
            .iter()
            .filter(|t| self.tools.is_active(&t.decl.name))
            .cloned()
            .collect();
        self.system_prompt = crate::resources::system_prompt::for_run(
            &sources,
            &self.tools.builtins,
            &extension_tools,
            &self.resources,
        );
        self.request_cache.invalidate();
    }

    /// An event every subscribed extension gets, whatever its protocol (`session_start`).
    pub(super) fn notify_all_extensions(&self, event: &Value) {
        if let Some(host) = &self.extensions.host {
            host.notify_event(event);
        }
    }
}
