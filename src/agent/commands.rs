//! The client's requests (`Input::Request`), answered on the agent thread: `handle_request` is a
//! dispatch table from each `Command` to its handler, in rust-analyzer's `handlers/` style. The
//! handlers for prompts, queues, state and the run live here; the session's (`new_session`,
//! `switch_session`, `fork`, …) in `session_commands`, the model's and thinking level's in
//! `model_commands`, `bash` in `bash_jobs`; `extension_ui_response` goes to `extending`.
//!
//! Each handler answers its request with exactly one response — at once, or later for the
//! commands whose work reports back (`prompt` after its hooks, `bash`, `compact`) — except
//! `extension_ui_response`, which is never answered (seed). Nothing here blocks: long work is
//! started and its phase or worker answers when it ends.

use std::collections::VecDeque;

use serde_json::{Value, json};

use super::queues::QueuedMessage;
use super::state::{self, Phase};
use super::{Agent, compaction, extending};
use crate::config::QueueMode;
use crate::messages::{AgentMessage, ImageContent, StopReason};
use crate::rpc::events::Event;
use crate::rpc::protocol::{Command, Request, StreamingBehavior};

impl Agent {
    pub(super) fn handle_request(&mut self, request: Request) {
        // What needs the extensions' registrations waits while one still registers.
        let Some(request) = self.hold_for_registrations(request) else {
            return;
        };
        let Request { id, command } = request;
        let id = id.as_ref();
        let name = command.name();
        match command {
            Command::Prompt {
                message,
                images,
                streaming_behavior,
            } => self.prompt(id, message, images, streaming_behavior),
            Command::Steer { message, images } => {
                self.steer_or_follow_up(id, name, StreamingBehavior::Steer, message, images)
            }
            Command::FollowUp { message, images } => {
                self.steer_or_follow_up(id, name, StreamingBehavior::FollowUp, message, images)
            }
            Command::Abort => self.abort(id),
            Command::ClearQueue => self.clear_queue(id),
            Command::GetState => self.get_state(id),
            Command::SetSandbox { mode, network } => self.set_sandbox(id, &mode, network),
            Command::GetMessages => self.get_messages(id),
            Command::SetModel { provider, model_id } => self.set_model(id, &provider, &model_id),
            Command::CycleModel => self.cycle_model(id),
            Command::GetAvailableModels => self.get_available_models(id),
            Command::SetThinkingLevel { level } => self.set_thinking_level(id, &level),
            Command::CycleThinkingLevel => self.cycle_thinking_level(id),
            Command::GetAvailableThinkingLevels => self.get_available_thinking_levels(id),
            Command::SetSteeringMode { mode } => self.set_queue_mode(id, name, true, &mode),
            Command::SetFollowUpMode { mode } => self.set_queue_mode(id, name, false, &mode),
            Command::SetAutoCompaction { enabled } => self.set_auto_compaction(id, enabled),
            Command::SetAutoRetry { enabled } => self.set_auto_retry(id, enabled),
            Command::AbortRetry => self.abort_retry(id),
            Command::GetLastAssistantText => self.get_last_assistant_text(id),
            Command::SetSessionName { name } => self.set_session_name(id, &name),
            Command::ExtensionUiResponse {
                id: ui_id,
                value,
                confirmed,
                cancelled,
            } => {
                // Unknown or expired ids are ignored (seed); no response record either way.
                self.deliver_ui_response(&ui_id, value, confirmed, cancelled);
            }
            Command::NewSession { parent_session } => {
                self.new_session(id, parent_session.as_deref())
            }
            Command::SwitchSession { session_path } => self.switch_session(id, &session_path),
            Command::Fork { entry_id } => self.fork(id, &entry_id),
            Command::Clone => self.clone_session(id),
            Command::GetForkMessages => self.get_fork_messages(id),
            Command::GetEntries { since } => self.get_entries(id, since.as_deref()),
            Command::GetTree => self.get_tree(id),
            Command::Bash {
                command,
                exclude_from_context,
            } => self.bash_command(id, command, exclude_from_context),
            Command::AbortBash => self.abort_bash(id),
            Command::Compact {
                custom_instructions,
            } => self.compact(id, custom_instructions.as_deref()),
            Command::GetSessionStats => self.get_session_stats(id),
            Command::GetMcpServers => self.get_mcp_servers(id),
            Command::GetCommands => self.get_commands(id),
            Command::ExportHtml { output_path } => self.export_html(id, output_path.as_deref()),
        }
    }

    // ---- prompts, queues, abort ---------------------------------------------------------------

    /// An extension command or `/mcp` runs at once; otherwise an idle agent prepares a run and a
    /// busy one queues the prompt as its `streamingBehavior` says.
    fn prompt(
        &mut self,
        id: Option<&Value>,
        message: String,
        images: Vec<ImageContent>,
        behavior: Option<StreamingBehavior>,
    ) {
        if self.try_extension_command(id, &message) || self.try_mcp_command(id, &message) {
            return;
        }
        if self.is_busy() {
            match behavior {
                Some(behavior) => self.queue_input(id, "prompt", behavior, message, images),
                None => self.respond_error(
                    id,
                    "prompt",
                    "Agent is already processing. Specify streamingBehavior ('steer' or 'followUp') to queue the message.",
                ),
            }
            return;
        }
        // An expired login is refreshed on a worker first; the prompt goes on when it is done.
        if let Some(refresh) = self.config.start_oauth_refresh(&self.model.provider) {
            let then = state::AfterRefresh::Prompt {
                id: id.cloned(),
                message,
                images,
            };
            self.phase = Phase::Refreshing(Box::new(state::Refreshing { refresh, then }));
            return;
        }
        self.start_prompt(id, message, images);
    }

    /// A prompt whose credentials are known: answered with an error without a key, else run.
    pub(super) fn start_prompt(
        &mut self,
        id: Option<&Value>,
        message: String,
        images: Vec<ImageContent>,
    ) {
        if let Err(error) = self.check_credentials() {
            self.respond_error(id, "prompt", &error);
            return;
        }
        // Extensions' input hook, expansion, a compaction if needed, then the run.
        self.prepare_prompt(state::PromptFrom::Client(id.cloned()), message, images);
    }

    /// `steer` and `follow_up`: queued (after the extensions' `input` hook); an extension command
    /// cannot be queued.
    fn steer_or_follow_up(
        &mut self,
        id: Option<&Value>,
        name: &'static str,
        behavior: StreamingBehavior,
        message: String,
        images: Vec<ImageContent>,
    ) {
        if self.is_extension_command(&message) {
            self.respond_error(id, name, &cannot_queue(&message));
        } else {
            self.queue_input(id, name, behavior, message, images)
        }
    }

    fn abort(&mut self, id: Option<&Value>) {
        // Also while idle: an extension command's `exec` or `execute_tool` may be running.
        self.extensions.runs.cancel_all();
        if self.is_busy() {
            self.abort_run();
        }
        self.abort_tree_summary();
        self.respond_ok(id, "abort", None);
    }

    /// `clear_queue`: both queues emptied (announced by a `queue_update`, as pi does even when
    /// they were empty); answers the texts so a client can put them back in its editor.
    fn clear_queue(&mut self, id: Option<&Value>) {
        let texts = |queue: &mut VecDeque<QueuedMessage>| -> Vec<String> {
            queue.drain(..).map(|q| q.text).collect()
        };
        let steering = texts(&mut self.queues.steering);
        let follow_up = texts(&mut self.queues.follow_up);
        self.emit_queue_update();
        let data = json!({ "steering": steering, "followUp": follow_up });
        self.respond_ok(id, "clear_queue", Some(data));
    }

    /// `set_steering_mode` (`steering`) or `set_follow_up_mode`.
    fn set_queue_mode(&mut self, id: Option<&Value>, name: &str, steering: bool, mode: &str) {
        let Some(parsed) = parse_queue_mode(mode) else {
            self.respond_error(id, name, &invalid_mode(mode));
            return;
        };
        if steering {
            self.queues.steering_mode = parsed;
            self.config.set_steering_mode(parsed.as_str());
        } else {
            self.queues.follow_up_mode = parsed;
            self.config.set_follow_up_mode(parsed.as_str());
        }
        self.respond_ok(id, name, None);
    }

    fn set_auto_compaction(&mut self, id: Option<&Value>, enabled: bool) {
        self.settings.auto_compaction = enabled;
        self.config.set_compaction_enabled(enabled);
        self.respond_ok(id, "set_auto_compaction", None);
    }

    fn set_auto_retry(&mut self, id: Option<&Value>, enabled: bool) {
        self.settings.auto_retry = enabled;
        self.config.set_retry_enabled(enabled);
        self.respond_ok(id, "set_auto_retry", None);
    }

    fn abort_retry(&mut self, id: Option<&Value>) {
        if matches!(self.phase, Phase::RetryWait(_)) {
            self.cancel_retry();
        }
        self.respond_ok(id, "abort_retry", None);
    }

    /// `compact`: a running run is aborted first; answered when the compaction ends.
    fn compact(&mut self, id: Option<&Value>, custom_instructions: Option<&str>) {
        if matches!(self.phase, Phase::Compacting(_)) {
            self.respond_error(id, "compact", "Compaction already in progress");
            return;
        }
        if self.is_busy() {
            self.abort_run();
        }
        let origin = state::CompactionOrigin::Command { id: id.cloned() };
        self.start_compaction(
            compaction::CompactionReason::Manual,
            origin,
            custom_instructions,
        );
    }

    fn abort_bash(&mut self, id: Option<&Value>) {
        if let Some(job) = self.bash.jobs.last() {
            job.cancel.cancel();
        }
        self.respond_ok(id, "abort_bash", None);
    }

    // ---- what the agent knows -----------------------------------------------------------------

    fn get_state(&mut self, id: Option<&Value>) {
        let state = self.state_json();
        self.respond_ok(id, "get_state", Some(state));
    }

    fn state_json(&self) -> Value {
        let mut state = serde_json::Map::new();
        state.insert(
            "model".into(),
            serde_json::to_value(&self.model).unwrap_or(Value::Null),
        );
        state.insert("thinkingLevel".into(), json!(self.thinking.as_str()));
        state.insert("isStreaming".into(), json!(self.is_busy()));
        state.insert(
            "isCompacting".into(),
            json!(matches!(self.phase, Phase::Compacting(_))),
        );
        state.insert(
            "steeringMode".into(),
            json!(self.queues.steering_mode.as_str()),
        );
        state.insert(
            "followUpMode".into(),
            json!(self.queues.follow_up_mode.as_str()),
        );
        if let Some(path) = self.session.file_path() {
            state.insert("sessionFile".into(), json!(path.to_string_lossy()));
        }
        state.insert("sessionId".into(), json!(self.session.id()));
        if let Some(name) = self.session.name() {
            state.insert("sessionName".into(), json!(name));
        }
        state.insert(
            "autoCompactionEnabled".into(),
            json!(self.settings.auto_compaction),
        );
        state.insert("messageCount".into(), json!(self.messages.len()));
        state.insert(
            "pendingMessageCount".into(),
            json!(self.queues.steering.len() + self.queues.follow_up.len()),
        );
        // Only when a sandbox is set, so get_state stays pi's exact shape by default.
        if self.tools.sandbox.policy().is_active() {
            state.insert("sandbox".into(), self.sandbox_state());
        }
        Value::Object(state)
    }

    fn sandbox_state(&self) -> Value {
        let state = crate::sandbox::state(&self.tools.sandbox.policy(), crate::sandbox::support());
        serde_json::to_value(state).unwrap_or(Value::Null)
    }

    /// `set_sandbox`: applies to tools started from now on (running ones keep theirs).
    fn set_sandbox(&mut self, id: Option<&Value>, mode: &str, network: Option<bool>) {
        let Some(parsed) = crate::sandbox::Mode::parse(mode) else {
            let error = format!(
                "Invalid sandbox mode \"{mode}\". Valid values: {}",
                crate::sandbox::Mode::NAMES
            );
            self.respond_error(id, "set_sandbox", &error);
            return;
        };
        let policy = self.tools.sandbox.set(parsed, network).clone();
        let state = self.sandbox_state();
        self.respond_ok(id, "set_sandbox", Some(json!({ "sandbox": state })));
        if let Some(warning) =
            crate::sandbox::unenforced_warning(&policy, crate::sandbox::support())
        {
            self.emit(Event::notify(&warning, "warning"));
        }
    }

    fn get_messages(&mut self, id: Option<&Value>) {
        // The legacy profile's clients (pi ≤ 0.83) know no system messages.
        let messages = if self.io.profile == crate::rpc::Profile::Legacy {
            let conversation: Vec<&AgentMessage> = self
                .messages
                .iter()
                .filter(|m| !matches!(m, AgentMessage::System(_)))
                .collect();
            serde_json::to_value(conversation)
        } else {
            serde_json::to_value(&self.messages)
        }
        .unwrap_or(Value::Null);
        self.respond_ok(id, "get_messages", Some(json!({ "messages": messages })));
    }

    fn get_last_assistant_text(&mut self, id: Option<&Value>) {
        let text = self.last_assistant_text();
        self.respond_ok(id, "get_last_assistant_text", Some(json!({ "text": text })));
    }

    fn last_assistant_text(&self) -> Option<String> {
        self.messages.iter().rev().find_map(|m| match m {
            AgentMessage::Assistant(a)
                if a.stop_reason == StopReason::Aborted && a.content.is_empty() =>
            {
                None
            }
            AgentMessage::Assistant(a) => {
                let text = a.text().trim().to_string();
                Some(text).filter(|t| !t.is_empty())
            }
            _ => None,
        })
    }

    fn get_session_stats(&mut self, id: Option<&Value>) {
        let stats = compaction::session_stats(
            &self.session,
            &self.messages,
            &self.extra_usage,
            &self.usage_limits_model(),
        );
        self.respond_ok(id, "get_session_stats", Some(stats));
    }

    fn get_mcp_servers(&mut self, id: Option<&Value>) {
        let data = match &self.mcp {
            Some(mcp) => mcp.status(),
            None => json!({"servers": [], "errors": []}),
        };
        self.respond_ok(id, "get_mcp_servers", Some(data));
    }

    fn get_commands(&mut self, id: Option<&Value>) {
        let commands = self.commands_list();
        self.respond_ok(id, "get_commands", Some(json!({ "commands": commands })));
    }

    /// Extension commands first, then `/mcp`, prompt templates and skills (pi's order).
    pub(super) fn commands_list(&self) -> Vec<Value> {
        let mut commands: Vec<Value> = self
            .extensions
            .host
            .as_ref()
            .map(|host| {
                host.commands()
                    .iter()
                    .map(|c| c.get_commands_item())
                    .collect()
            })
            .unwrap_or_default();
        // An extension's `/mcp` takes the built-in one's place (it runs first, too).
        let replaced = commands.iter().any(|c| c["name"] == "mcp");
        if self.mcp.is_some() && !replaced {
            commands.push(crate::mcp::command_item());
        }
        commands.extend(crate::resources::discovery::commands_json(&self.resources));
        commands
    }
}

fn parse_queue_mode(mode: &str) -> Option<QueueMode> {
    match mode {
        "all" => Some(QueueMode::All),
        "one-at-a-time" => Some(QueueMode::OneAtATime),
        _ => None,
    }
}

fn invalid_mode(mode: &str) -> String {
    format!("Invalid mode \"{mode}\": expected \"all\" or \"one-at-a-time\"")
}

fn cannot_queue(text: &str) -> String {
    let name = extending::split_command(text).map_or(text, |(name, _)| name);
    format!(
        "Extension command \"/{name}\" cannot be queued. Use prompt() or execute the command when not streaming."
    )
}
