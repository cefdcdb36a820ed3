//! The agent's side of extensions (the host is `crate::extensions`): the prompt pipeline with the
//! `input` and `before_agent_start` hooks, extension commands, the extension events the loop
//! receives (hook results, tool updates, actions, dialogs, errors) and the UI answers routed back.
//! Tool-call hooks and the approval gate live with the tool batch (`tool_batch`).

use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::{Value, json};

use super::queues::{QueueInput, QueuedMessage};
use super::state::{CompactionOrigin, Phase, PrepStage, PromptFrom, PromptPrep};
use super::{Agent, compaction};
use crate::extensions::hooks::{HookOutcome, InjectedMessage, InputOutcome};
use crate::extensions::protocol::{Action, Delivery, HookKind, UiResponse};
use crate::extensions::{CommandRunId, ExtensionEvent};
use crate::messages::{AgentMessage, CustomMessage, ImageContent, UserContent, UserMessage};
use crate::rpc::events::Event;
use crate::rpc::protocol::{Response, StreamingBehavior};
use crate::time::now_ms;

/// How long extensions get to answer a hook, unless settings `extensionHookTimeoutMs` says.
const DEFAULT_HOOK_DEADLINE: Duration = Duration::from_secs(30);

/// A `/name args` prompt, split.
pub fn split_command(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix('/')?;
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    (!name.is_empty()).then_some((name, args.trim()))
}

/// The running extensions and the agent's dealings with them.
pub struct Extensions {
    /// Running extensions (also present, with none loaded, when the approval gate needs dialogs).
    pub host: Option<crate::extensions::ExtensionHost>,
    pub events: Receiver<ExtensionEvent>,
    /// Extension commands run from `prompt`, answered `handled` when they finish.
    pub command_runs: Vec<(CommandRunId, Option<Value>)>,
    /// Extension messages delivered with the next prompt.
    pub next_turn_messages: Vec<AgentMessage>,
    /// This prompt's system prompt when an extension replaced it (before_agent_start).
    pub run_system_prompt: Option<String>,
    /// (v2) This prompt's system prompt built from the options `before_agent_start` changed.
    pub run_prompt: Option<crate::resources::system_prompt::SystemPrompt>,
    /// An extension asked to shut down: exit once nothing runs.
    pub shutdown_requested: bool,
    /// How long extensions get to answer a hook (settings `extensionHookTimeoutMs`, default 30 s).
    pub hook_deadline: Duration,
    /// (v2) Session changes waiting for the `session_before_*` hook.
    pub session_changes: Vec<(
        crate::extensions::HookId,
        super::session_commands::SessionOp,
        super::session_commands::OpReply,
    )>,
    /// (v2) `exec` and `execute_tool` requests waiting for the client's approval.
    pub pending_runs: Vec<super::extension_requests::PendingRun>,
    /// (v2) `exec` and `execute_tool` requests running (abort and `cancel_request` end them).
    pub runs: crate::extensions::tool_run::Runs,
    /// (v2) The `context` hook the next model request waits for.
    pub context_hook: Option<crate::extensions::HookId>,
    /// (v2) `wait_for_idle` requests, answered once the agent is idle.
    pub idle_waiters: Vec<(crate::extensions::ExtensionId, String)>,
    /// (v2) Providers an extension registered with `streamSimple: true`: it streams their
    /// responses itself.
    pub stream_providers: std::collections::HashMap<String, crate::extensions::ExtensionId>,
    /// (v2) What `reload` loads again.
    pub reload: super::reload::ReloadInputs,
    /// The `session_shutdown` / `session_start` pair of a session change whose answer is on
    /// its way: the extensions are restarted with them once it is sent.
    pub restart: Option<(serde_json::Value, serde_json::Value)>,
    /// (v2) A `navigate_tree` waiting for the `session_before_tree` hook.
    pub tree: Option<super::tree_navigation::PendingTree>,
    /// (v2) RPC `bash` commands waiting for the `user_bash` hook.
    pub user_bash: Vec<super::bash_jobs::UserBash>,
    /// (v2) The `resources_discover` hook whose answer adds skill and prompt paths.
    pub discover_hook: Option<crate::extensions::HookId>,
    /// (v2) MCP servers extensions registered (`register_mcp_server`).
    pub mcp_servers: crate::mcp::registered::Registry,
    /// (v2) Registered servers already reported as unconnected (no MCP host: `--no-mcp`).
    pub unconnected_mcp: Vec<String>,
    /// (v2) `mcp_servers_change` is due (`send_mcp_servers_change`).
    pub mcp_servers_change: bool,
    /// The `session_start` the extensions heard last (`startup_wait::on_registered`).
    pub session_start: Value,
    /// A start-up wait for registrations ran out: requests no longer wait for them.
    pub wait_ran_out: bool,
    /// (v2) Virtual models, by (provider, id), and the extension that routes them.
    pub virtual_models: std::collections::HashMap<(String, String), crate::extensions::ExtensionId>,
    /// (v2) `refresh_models` requests waiting for their answers.
    pub model_refreshes: Vec<super::model_refresh::PendingRefresh>,
    /// (v2) Providers registered with `oauth.modifyModels`: who adapts their models and the
    /// registration (with its models) the login adapts.
    pub modified_providers:
        std::collections::HashMap<String, (crate::extensions::ExtensionId, Value)>,
    /// (v2) The route the next model request waits for (a virtual selection).
    pub route: Option<super::virtual_models::PendingRoute>,
    /// (v2) The physical model and level the next request was routed to, while its `context`
    /// hook runs.
    pub routed: Option<(crate::config::Model, crate::config::ThinkingLevel)>,
}

/// How long an extension has to answer a hook (settings `extensionHookTimeoutMs`).
pub(super) fn hook_deadline(config: &crate::config::Config) -> Duration {
    config
        .setting("extensionHookTimeoutMs")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_HOOK_DEADLINE, Duration::from_millis)
}

impl Extensions {
    /// The branch summary a `navigate_tree` waits for, if any.
    pub fn tree_summary(&self) -> Option<&super::tree_navigation::TreeSummary> {
        self.tree.as_ref()?.summary.as_deref()
    }

    pub fn tree_summary_mut(&mut self) -> Option<&mut super::tree_navigation::TreeSummary> {
        self.tree.as_mut()?.summary.as_deref_mut()
    }

    pub fn new(
        host: Option<crate::extensions::ExtensionHost>,
        events: Receiver<ExtensionEvent>,
        reload: super::reload::ReloadInputs,
        config: &crate::config::Config,
    ) -> Extensions {
        let hook_deadline = hook_deadline(config);
        // (v2) Providers of the `register` lines (main registered them) the extensions stream.
        let stream_providers = host
            .as_ref()
            .map(|host| crate::extensions::launch::streamed_providers(host, config))
            .unwrap_or_default()
            .into_iter()
            .collect();
        let virtual_models = host
            .as_ref()
            .map(|host| crate::extensions::launch::virtual_model_owners(host, config))
            .unwrap_or_default()
            .into_iter()
            .collect();
        Extensions {
            host,
            events,
            command_runs: Vec::new(),
            next_turn_messages: Vec::new(),
            run_system_prompt: None,
            run_prompt: None,
            shutdown_requested: false,
            hook_deadline,
            idle_waiters: Vec::new(),
            context_hook: None,
            virtual_models,
            route: None,
            routed: None,
            model_refreshes: Vec::new(),
            modified_providers: Default::default(),
            pending_runs: Vec::new(),
            runs: Default::default(),
            session_changes: Vec::new(),
            stream_providers,
            reload,
            restart: None,
            tree: None,
            user_bash: Vec::new(),
            discover_hook: None,
            mcp_servers: Default::default(),
            unconnected_mcp: Vec::new(),
            mcp_servers_change: false,
            session_start: json!({"type": "session_start", "reason": "startup"}),
            wait_ran_out: false,
        }
    }
}

impl Agent {
    /// `/name args` naming an extension command runs it at once — even during a run — and the
    /// prompt is answered `handled` when it finishes. Returns false when it is no such command.
    pub(super) fn try_extension_command(&mut self, id: Option<&Value>, text: &str) -> bool {
        let Some((name, args)) = split_command(text) else {
            return false;
        };
        let Some(host) = &self.extensions.host else {
            return false;
        };
        let Some(run) = host.run_command(name, args) else {
            return false;
        };
        self.extensions.command_runs.push((run, id.cloned()));
        true
    }

    /// `/name args` sent by an extension (v2 `expandPromptTemplates`): runs the command; nobody
    /// waits for a response. Returns false when it is no extension command.
    fn run_command_for_extension(&mut self, text: &str) -> bool {
        let Some((name, args)) = split_command(text) else {
            return false;
        };
        self.extensions
            .host
            .as_ref()
            .and_then(|host| host.run_command(name, args))
            .is_some()
    }

    /// Whether `text` is an extension command (steer/follow_up refuse those).
    pub(super) fn is_extension_command(&self, text: &str) -> bool {
        let Some((name, _)) = split_command(text) else {
            return false;
        };
        self.extensions
            .host
            .as_ref()
            .is_some_and(|host| host.commands().iter().any(|c| c.name == name))
    }

    /// An accepted idle prompt: the `input` hook first, then expansion and the rest.
    pub(super) fn prepare_prompt(
        &mut self,
        from: PromptFrom,
        text: String,
        images: Vec<ImageContent>,
    ) {
        let mut payload = json!({ "text": text, "source": from.source() });
        if !images.is_empty() {
            payload["images"] = serde_json::to_value(&images).unwrap_or(Value::Null);
        }
        let hook = self.start_prompt_hook(HookKind::Input, payload);
        match hook {
            Some(hook) => {
                let prep = PromptPrep {
                    from,
                    text,
                    images,
                    hook,
                    stage: PrepStage::Input,
                };
                self.phase = Phase::Preparing(Box::new(prep));
            }
            None => self.after_input(from, text, images),
        }
    }

    /// `steer`, `follow_up` and a `prompt` queued during a run: the `input` hook first (pi
    /// 0.86.0), then expansion and the queue; answered `queued`, or `handled` when an extension
    /// took the input.
    pub(super) fn queue_input(
        &mut self,
        id: Option<&Value>,
        command: &'static str,
        behavior: StreamingBehavior,
        text: String,
        images: Vec<ImageContent>,
    ) {
        let mut payload = json!({ "text": text, "source": "rpc" });
        if !images.is_empty() {
            payload["images"] = serde_json::to_value(&images).unwrap_or(Value::Null);
        }
        match self.start_prompt_hook(HookKind::Input, payload) {
            Some(hook) => self.queues.inputs.push(QueueInput {
                hook,
                id: id.cloned(),
                command,
                behavior,
                text,
                images,
            }),
            None => self.enqueue_input(id, command, behavior, text, images),
        }
    }

    fn enqueue_input(
        &mut self,
        id: Option<&Value>,
        command: &'static str,
        behavior: StreamingBehavior,
        text: String,
        images: Vec<ImageContent>,
    ) {
        let text = self.expand(text);
        self.enqueue(behavior, text, images);
        self.respond(Response::disposition(id, command, "queued"));
    }

    /// The `input` hook answered for a queued input.
    fn on_queue_input_hook(&mut self, input: QueueInput, outcome: HookOutcome) {
        let QueueInput {
            id,
            command,
            behavior,
            text,
            images,
            ..
        } = input;
        match outcome {
            HookOutcome::Input(InputOutcome::Handled) => {
                self.respond(Response::disposition(id.as_ref(), command, "handled"))
            }
            HookOutcome::Input(InputOutcome::Transform {
                text,
                images: new_images,
            }) => {
                let images = match new_images {
                    Some(value) => serde_json::from_value(value).unwrap_or(images),
                    None => images,
                };
                self.enqueue_input(id.as_ref(), command, behavior, text, images)
            }
            _ => self.enqueue_input(id.as_ref(), command, behavior, text, images),
        }
    }

    fn start_prompt_hook(
        &self,
        kind: HookKind,
        payload: Value,
    ) -> Option<crate::extensions::HookId> {
        let deadline = self.extensions.hook_deadline;
        self.extensions
            .host
            .as_ref()
            .and_then(|host| host.start_hook(kind, payload, deadline))
    }

    /// After `input`: skill/template expansion (of the client's text only, as pi), then a
    /// compaction if the context is near full, then the prompt is answered and the run prepared.
    pub(super) fn after_input(
        &mut self,
        from: PromptFrom,
        text: String,
        images: Vec<ImageContent>,
    ) {
        let text = match from {
            PromptFrom::Client(_) => self.expand(text),
            PromptFrom::Extension => text,
        };
        let last_reply = self
            .messages
            .iter()
            .rev()
            .find_map(AgentMessage::as_assistant)
            .map(|a| a.clone_without_content());
        if let Some(reply) = last_reply {
            // pi 1.6.0 reads the compaction settings before a prompt that follows a reply; a
            // bad token setting fails the prompt with its text.
            let bad_setting = self
                .config
                .compaction_reserve_tokens(&self.model)
                .and(self.config.compaction_keep_recent_tokens(&self.model))
                .err();
            if let Some(error) = bad_setting {
                match &from {
                    PromptFrom::Client(id) => self.respond_error(id.as_ref(), "prompt", &error),
                    PromptFrom::Extension => log::warn!("{error}"),
                }
                return;
            }
            let reason = match self.compaction_trigger(&reply, true) {
                compaction::Trigger::Threshold => Some(compaction::CompactionReason::Threshold),
                compaction::Trigger::Overflow => Some(compaction::CompactionReason::Overflow),
                compaction::Trigger::Nothing | compaction::Trigger::OverflowGaveUp => None,
            };
            if let Some(reason) = reason {
                let origin = CompactionOrigin::BeforePrompt {
                    from,
                    message: text,
                    images,
                };
                self.start_compaction(reason, origin, None);
                return;
            }
        }
        self.begin_prompt(from, text, images);
    }

    /// The client's prompt is answered `started` (an extension's message gets no response);
    /// `before_agent_start` may still add messages or replace this run's system prompt.
    pub(super) fn begin_prompt(
        &mut self,
        from: PromptFrom,
        text: String,
        images: Vec<ImageContent>,
    ) {
        if let PromptFrom::Client(id) = &from {
            self.respond(Response::disposition(id.as_ref(), "prompt", "started"));
        }
        for held in std::mem::take(&mut self.bash.pending) {
            let json = super::serialize_message(&held);
            self.record_message(&held, &json);
            self.messages.push(held);
        }
        let mut payload = json!({ "prompt": text, "systemPrompt": self.system_prompt.text() });
        if let Some(options) = self.system_prompt.options() {
            payload["systemPromptOptions"] = serde_json::to_value(options).unwrap_or(Value::Null);
        }
        if !images.is_empty() {
            payload["images"] = serde_json::to_value(&images).unwrap_or(Value::Null);
        }
        match self.start_prompt_hook(HookKind::BeforeAgentStart, payload) {
            Some(hook) => {
                let prep = PromptPrep {
                    from: PromptFrom::Extension,
                    text,
                    images,
                    hook,
                    stage: PrepStage::BeforeStart,
                };
                self.phase = Phase::Preparing(Box::new(prep));
            }
            None => self.start_prompt_run(text, images, Vec::new(), None),
        }
    }

    /// (v2) The `systemPromptOptions` the extensions left: a changed tool selection becomes the
    /// active tools (as `set_active_tools`), and the run's prompt is built from the options
    /// (its transcript patch names the changed sections). Returns the run's forced prompt: the
    /// answer's `systemPrompt`, else the options' `forceSystemPrompt`. Options that do not
    /// parse are an `extension_error` and change nothing.
    fn apply_prompt_options(
        &mut self,
        options: Option<Value>,
        forced: Option<String>,
    ) -> Option<String> {
        self.extensions.run_prompt = None;
        let Some(options) = options else {
            return forced;
        };
        let parsed =
            serde_json::from_value::<crate::resources::system_prompt::PromptOptions>(options)
                .map_err(|e| e.to_string())
                .and_then(|options| options.check().map(|()| options));
        let mut options = match parsed {
            Ok(options) => options,
            Err(error) => {
                self.emit(Event::ExtensionError {
                    extension_path: "before_agent_start".into(),
                    event: "before_agent_start".into(),
                    error: format!("systemPromptOptions: {error}"),
                });
                return forced;
            }
        };
        let selected = self.system_prompt.options().map(|o| &o.selected_tools);
        if selected != Some(&options.selected_tools) {
            self.set_active_tools(&options.selected_tools);
            if let Some(now) = self.system_prompt.options() {
                options.selected_tools = now.selected_tools.clone();
            }
        }
        let forced = forced.or(options.force_system_prompt.take());
        self.extensions.run_prompt = Some(crate::resources::system_prompt::from_options(options));
        forced
    }

    fn start_prompt_run(
        &mut self,
        text: String,
        images: Vec<ImageContent>,
        injected: Vec<InjectedMessage>,
        system_prompt: Option<String>,
    ) {
        self.extensions.run_system_prompt = system_prompt;
        let mut rest: Vec<AgentMessage> = injected.into_iter().map(custom_message).collect();
        rest.extend(std::mem::take(&mut self.extensions.next_turn_messages));
        if images.is_empty() {
            self.start_with_prompt(&text, images, rest);
            return;
        }
        // Decoding and scaling take a while for large images: a worker does it, the loop waits
        // in ScalingImages (abort still works).
        match self.scale_images(&text, &images) {
            Some(result) => {
                self.phase = Phase::ScalingImages(Box::new(super::state::ImageWork {
                    result,
                    text,
                    images,
                    rest,
                }))
            }
            None => self.start_with_prompt(&text, images, rest),
        }
    }

    fn start_with_prompt(
        &mut self,
        text: &str,
        images: Vec<ImageContent>,
        rest: Vec<AgentMessage>,
    ) {
        let mut messages = vec![AgentMessage::User(UserMessage::new(text, images))];
        messages.extend(rest);
        self.start_run_after_mcp(messages);
    }

    /// The prompt's images are scaled (`Some`), or the worker died (`None`: sent as they came).
    pub(super) fn on_images_scaled(&mut self, scaled: Option<(String, Vec<ImageContent>)>) {
        let Phase::ScalingImages(work) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let super::state::ImageWork {
            text: original,
            images: unscaled,
            rest,
            ..
        } = *work;
        let (text, images) = scaled.unwrap_or_else(|| {
            log::error!("the image worker ended without a result; images go unscaled");
            (original, unscaled)
        });
        self.start_with_prompt(&text, images, rest);
    }

    /// Abort while the images are scaled: the prompt is dropped, as before its run started.
    pub(super) fn abort_scaling(&mut self) {
        self.phase = Phase::Idle;
        self.settle();
    }

    fn on_prompt_hook(&mut self, outcome: HookOutcome) {
        let Phase::Preparing(prep) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let PromptPrep {
            from,
            text,
            images,
            stage,
            ..
        } = *prep;
        match (stage, outcome) {
            (PrepStage::Input, HookOutcome::Input(InputOutcome::Handled)) => {
                if let PromptFrom::Client(id) = &from {
                    self.respond(Response::disposition(id.as_ref(), "prompt", "handled"));
                }
            }
            (
                PrepStage::Input,
                HookOutcome::Input(InputOutcome::Transform {
                    text,
                    images: new_images,
                }),
            ) => {
                let images = match new_images {
                    Some(value) => serde_json::from_value(value).unwrap_or(images),
                    None => images,
                };
                self.after_input(from, text, images);
            }
            (PrepStage::Input, _) => self.after_input(from, text, images),
            (PrepStage::BeforeStart, HookOutcome::BeforeAgentStart(outcome)) => {
                let forced =
                    self.apply_prompt_options(outcome.system_prompt_options, outcome.system_prompt);
                self.start_prompt_run(text, images, outcome.messages, forced)
            }
            (PrepStage::BeforeStart, _) => self.start_prompt_run(text, images, Vec::new(), None),
        }
    }

    /// Abort while a prompt waits for a hook: the prompt is dropped (answered if it was not yet).
    pub(super) fn abort_preparing(&mut self) {
        let Phase::Preparing(prep) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        match (&prep.stage, &prep.from) {
            (PrepStage::Input, PromptFrom::Client(id)) => {
                self.respond_error(id.as_ref(), "prompt", "Aborted before the prompt started")
            }
            (PrepStage::Input, PromptFrom::Extension) => {}
            (PrepStage::BeforeStart, _) => self.settle(),
        }
    }

    pub(super) fn on_extension_event(&mut self, event: ExtensionEvent) {
        match event {
            ExtensionEvent::Answered { id, result } => {
                if let Err(result) = self.on_routed(id, result) {
                    self.on_models_refreshed(id, result);
                }
            }
            ExtensionEvent::HookResult { id, outcome } => {
                if let HookOutcome::SessionChange { cancel } = outcome
                    && self.on_session_change_hook(id, cancel)
                {
                    return;
                }
                if let HookOutcome::ResourcesDiscover {
                    skill_paths,
                    prompt_paths,
                } = &outcome
                    && self.on_resources_discovered(id, skill_paths, prompt_paths)
                {
                    return;
                }
                if let HookOutcome::UserBash(outcome) = &outcome
                    && self.on_user_bash_hook(id, outcome.clone())
                {
                    return;
                }
                if let HookOutcome::SessionPrepared { cancel, answer } = &outcome
                    && (self.on_before_compact_hook(id, *cancel, answer)
                        || self.on_tree_hook(id, *cancel, answer.clone()))
                {
                    return;
                }
                if self.extensions.context_hook == Some(id) {
                    self.extensions.context_hook = None;
                    let replacement = match outcome {
                        HookOutcome::Context(replacement) => replacement,
                        _ => None,
                    };
                    self.on_context_hook(replacement);
                    return;
                }
                let for_prompt = matches!(&self.phase, Phase::Preparing(prep) if prep.hook == id);
                let queued = self.queues.inputs.iter().position(|q| q.hook == id);
                if let Some(position) = queued {
                    let input = self.queues.inputs.remove(position);
                    self.on_queue_input_hook(input, outcome);
                } else if for_prompt {
                    self.on_prompt_hook(outcome);
                } else if !self.on_tool_hook(id, outcome) {
                    log::debug!("hook result {id:?} arrived after its step ended");
                }
            }
            ExtensionEvent::ToolUpdate { call_id, partial } => {
                if let Some(index) = self.extension_call(&call_id) {
                    self.on_tool_update(index, partial);
                }
            }
            ExtensionEvent::ToolFinished {
                call_id,
                output,
                terminate,
            } => {
                if let Some(index) = self.extension_call(&call_id) {
                    if let Phase::RunningTools(batch) = &mut self.phase {
                        batch.calls[index].terminate = terminate;
                    }
                    self.on_tool_finished(index, output);
                }
            }
            ExtensionEvent::CommandFinished { id, name, error } => {
                self.on_command_finished(id, &name, error)
            }
            ExtensionEvent::Action { extension, action } => self.on_action(extension, action),
            ExtensionEvent::UiRequest { event } => self.emit(event),
            ExtensionEvent::ApprovalAnswered { ui_id, answer } => {
                if !self.on_run_approval(&ui_id, answer) {
                    self.on_approval(&ui_id, answer)
                }
            }
            ExtensionEvent::Error(error) => {
                // A failed extension's tools must not reach the next request.
                self.emit(error.event());
                self.refresh_extension_tools();
            }
            ExtensionEvent::Exited { extension } => {
                self.extensions.runs.cancel_of(extension);
                self.refresh_extension_tools();
                self.drop_mcp_servers_of(extension);
                self.on_extension_exited(extension);
            }
            ExtensionEvent::Registered {
                extension,
                registration,
            } => self.on_registered(extension, registration),
            ExtensionEvent::Restarting { extension } => {
                self.extensions.runs.cancel_of(extension);
                self.on_restarting(extension);
            }
            ExtensionEvent::Query {
                extension,
                id,
                query,
            } => self.on_extension_query(extension, &id, query),
            ExtensionEvent::Control {
                extension,
                id,
                action,
            } => self.on_extension_control(extension, id, action),
        }
    }

    fn extension_call(&mut self, call_id: &str) -> Option<usize> {
        let Phase::RunningTools(batch) = &self.phase else {
            return None;
        };
        let index = batch.position_of(call_id)?;
        batch.calls[index].by_extension.then_some(index)
    }

    /// A dead extension's tools are no longer offered; late registrations are (v2).
    pub(super) fn refresh_extension_tools(&mut self) {
        let Some(host) = &self.extensions.host else {
            return;
        };
        self.tools.extension_tools = crate::extensions::offered(host.tools(), &self.tools.filter);
        let names = self
            .tools
            .extension_tools
            .iter()
            .map(|t| t.decl.name.clone());
        self.tools.approvals.set_extension_tools(names);
        self.refresh_tool_specs();
    }

    fn on_command_finished(&mut self, run: CommandRunId, name: &str, error: Option<String>) {
        if let Some(error) = error {
            self.emit(Event::ExtensionError {
                extension_path: format!("command:{name}"),
                event: "command".into(),
                error,
            });
        }
        if let Some(position) = self
            .extensions
            .command_runs
            .iter()
            .position(|(r, _)| *r == run)
        {
            let (_, id) = self.extensions.command_runs.remove(position);
            self.respond(Response::disposition(id.as_ref(), "prompt", "handled"));
        }
    }

    fn on_action(&mut self, extension: crate::extensions::ExtensionId, action: Action) {
        let v2 = self
            .extensions
            .host
            .as_ref()
            .is_some_and(|h| h.protocol(extension) >= 2);
        match action {
            Action::SendUserMessage {
                content,
                deliver_as,
                expand,
            } => {
                let (text, images) = split_content(&content);
                // v2: `expandPromptTemplates` runs an extension command or expands templates.
                if v2 && expand && self.run_command_for_extension(&text) {
                    return;
                }
                let text = if v2 && expand {
                    self.expand(text)
                } else {
                    text
                };
                // v2, as pi: while a run is going a message needs steer or followUp.
                let refused =
                    v2 && self.is_busy() && matches!(deliver_as, None | Some(Delivery::Immediate));
                if refused {
                    let path = self.extension_path(extension);
                    self.emit(Event::ExtensionError {
                        extension_path: path,
                        event: "send_user_message".into(),
                        error: "Agent is busy: send_user_message needs deliverAs \"steer\" or \"followUp\" while a run is going".into(),
                    });
                    return;
                }
                match (self.is_busy(), deliver_as) {
                    // Idle: a message starts a run, whatever its delivery says (as pi).
                    (false, _) => self.prepare_prompt(PromptFrom::Extension, text, images),
                    (true, Some(Delivery::FollowUp)) => self.enqueue_message(
                        false,
                        text.clone(),
                        AgentMessage::User(UserMessage::new(&text, images)),
                    ),
                    _ => self.enqueue_message(
                        true,
                        text.clone(),
                        AgentMessage::User(UserMessage::new(&text, images)),
                    ),
                }
            }
            Action::SendMessage {
                custom_type,
                content,
                display,
                details,
                deliver_as,
                trigger_turn,
            } => {
                let message = custom_message(InjectedMessage {
                    custom_type,
                    content,
                    display,
                    details,
                });
                let text = match &message {
                    AgentMessage::Custom(c) => c.content.text(),
                    _ => String::new(),
                };
                match (self.is_busy(), deliver_as) {
                    (_, Some(Delivery::NextTurn)) => {
                        self.extensions.next_turn_messages.push(message)
                    }
                    (true, Some(Delivery::FollowUp)) => self.enqueue_message(false, text, message),
                    (true, _) => self.enqueue_message(true, text, message),
                    (false, _) if trigger_turn => self.start_run_without_prompt(message),
                    (false, _) => {
                        let json = super::serialize_message(&message);
                        self.emit(Event::MessageStart {
                            message: json.clone(),
                        });
                        self.record_message(&message, &json);
                        self.emit(Event::MessageEnd { message: json });
                        self.messages.push(message);
                    }
                }
            }
            Action::AppendEntry { custom_type, data } => {
                match self.session.append_custom(&custom_type, data) {
                    Ok(id) => {
                        if let Some(entry) = self.session.entry(&id).map(|e| e.to_value()) {
                            self.emit(Event::EntryAppended { entry });
                        }
                    }
                    Err(e) => log::error!("could not append the extension's entry: {e}"),
                }
            }
            Action::SetSessionName { name } => {
                let trimmed = name.trim().to_string();
                if !trimmed.is_empty() && self.session.append_session_info(&trimmed).is_ok() {
                    self.emit(Event::SessionInfoChanged { name: trimmed });
                }
            }
            Action::SetLabel { entry_id, label } => {
                if let Err(e) = self.session.append_label(&entry_id, label.as_deref()) {
                    log::warn!("extension label: {e}");
                }
            }
            Action::Shutdown => self.extensions.shutdown_requested = true,
        }
    }

    /// A custom message that starts a run of its own (an extension's `triggerTurn`).
    fn start_run_without_prompt(&mut self, message: AgentMessage) {
        self.extensions.run_system_prompt = None;
        self.extensions.run_prompt = None;
        self.start_run(vec![message]);
    }

    fn enqueue_message(&mut self, steering: bool, text: String, message: AgentMessage) {
        let queued = QueuedMessage {
            text,
            message,
            images: None,
        };
        if steering {
            self.queues.steering.push_back(queued);
        } else {
            self.queues.follow_up.push_back(queued);
        }
        self.emit_queue_update();
    }

    /// An `extension_ui_response` from the client.
    pub(super) fn deliver_ui_response(
        &mut self,
        ui_id: &str,
        value: Option<Value>,
        confirmed: Option<bool>,
        cancelled: bool,
    ) {
        let pasted = value.as_ref().filter(|_| !cancelled);
        if self.deliver_mcp_ui_response(ui_id, pasted) {
            return;
        }
        if let Some(host) = &self.extensions.host {
            host.deliver_ui_response(
                ui_id,
                UiResponse {
                    value,
                    confirmed,
                    cancelled,
                },
            );
        }
    }

    /// `/skill:name args` and `/template args` expansion; a skill that cannot be read is reported
    /// and the text goes on unchanged.
    fn expand(&mut self, text: String) -> String {
        match crate::resources::discovery::expand_input(&text, &self.resources) {
            Ok(expanded) => expanded,
            Err(e) => {
                self.emit(Event::ExtensionError {
                    extension_path: e.path,
                    event: "skill_expansion".into(),
                    error: e.message,
                });
                text
            }
        }
    }
}

/// Session events go to the extensions that subscribed; dialogs and extension errors do not.
pub(super) fn notify_extensions(host: &crate::extensions::ExtensionHost, event: &Event) {
    if event.is_session_event()
        && host.wants_event(event.kind())
        && let Some(value) = event.to_extension_value()
    {
        host.notify_event(&value);
    }
}

/// An injected message as the conversation holds it.
fn custom_message(injected: InjectedMessage) -> AgentMessage {
    let content = match injected.content {
        Value::String(text) => UserContent::Text(text),
        other => serde_json::from_value(other.clone())
            .map(UserContent::Blocks)
            .unwrap_or_else(|_| UserContent::Text(other.to_string())),
    };
    AgentMessage::Custom(CustomMessage {
        custom_type: injected.custom_type,
        content,
        display: injected.display,
        details: injected.details,
        timestamp: now_ms(),
    })
}

/// Text and images of a message an extension sends (a string or content blocks).
fn split_content(content: &Value) -> (String, Vec<ImageContent>) {
    match content {
        Value::String(text) => (text.clone(), Vec::new()),
        Value::Array(blocks) => {
            let mut text = String::new();
            let mut images = Vec::new();
            for block in blocks {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => text.push_str(
                        block
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                    ),
                    Some("image") => {
                        if let Ok(image) = serde_json::from_value::<ImageContent>(block.clone()) {
                            images.push(image);
                        }
                    }
                    _ => {}
                }
            }
            (text, images)
        }
        other => (other.to_string(), Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_split_from_their_arguments() {
        assert_eq!(
            split_command("/hello Ada  Lovelace "),
            Some(("hello", "Ada  Lovelace"))
        );
        assert_eq!(split_command("/x"), Some(("x", "")));
        assert_eq!(split_command("hello"), None);
        assert_eq!(split_command("/ x"), None);
    }
}
