//! The agent's side of the RPC `bash` command (the job itself runs in `bash_command`): the jobs
//! in flight, their output as `bash_execution_update` events, and each result, which answers the
//! request and joins the conversation (at once when idle, at the next prompt during a run, as
//! pi does). A channel that closes under running jobs fails them and is replaced.

use crossbeam_channel::{Receiver, Sender};
use serde_json::{Value, json};

use super::{Agent, PROVIDER_CHANNEL_CAPACITY, bash_command, serialize_message};
use crate::messages::AgentMessage;
use crate::rpc::events::Event;
use crate::time::now_ms;

/// The RPC `bash` commands in flight, oldest first, and their channel.
pub struct BashJobs {
    pub jobs: Vec<BashJobState>,
    next_job: u64,
    pub events: Receiver<bash_command::BashEvent>,
    pub sender: Sender<bash_command::BashEvent>,
    /// Results that finished while a run streamed: they join the context at the next prompt.
    pub pending: Vec<AgentMessage>,
}

impl BashJobs {
    pub fn new() -> BashJobs {
        let (sender, events) = crossbeam_channel::bounded(PROVIDER_CHANNEL_CAPACITY);
        BashJobs {
            jobs: Vec::new(),
            next_job: 0,
            events,
            sender,
            pending: Vec::new(),
        }
    }
}

/// One job: its id, the request it answers, the command (for the conversation) and its cancel
/// flag.
pub struct BashJobState {
    job: u64,
    request_id: Option<Value>,
    command: String,
    /// `excludeFromContext` of the request: kept on the message, which the model then never sees.
    exclude_from_context: Option<bool>,
    pub cancel: crate::child::CancelFlag,
}

/// (v2) An RPC `bash` command waiting for the extensions' `user_bash` hook.
pub struct UserBash {
    hook: crate::extensions::HookId,
    request_id: Option<Value>,
    command: String,
    exclude_from_context: Option<bool>,
}

impl Agent {
    /// The RPC `bash` command: v2 extensions' `user_bash` hook first (pi's RPC mode), which may
    /// answer it instead (a `result`) or block it (a failed extension); else it runs.
    pub(super) fn bash_command(
        &mut self,
        id: Option<&Value>,
        command: String,
        exclude_from_context: Option<bool>,
    ) {
        let payload = json!({
            "command": command,
            "excludeFromContext": exclude_from_context.unwrap_or(false),
            "cwd": self.config.cwd.to_string_lossy(),
        });
        let deadline = self.extensions.hook_deadline;
        let hook = self.extensions.host.as_ref().and_then(|host| {
            host.start_hook(
                crate::extensions::protocol::HookKind::UserBash,
                payload,
                deadline,
            )
        });
        match hook {
            Some(hook) => self.extensions.user_bash.push(UserBash {
                hook,
                request_id: id.cloned(),
                command,
                exclude_from_context,
            }),
            None => self.start_bash(id, command, exclude_from_context),
        }
    }

    /// The `user_bash` hook answered. False when no command waited for it.
    pub(super) fn on_user_bash_hook(
        &mut self,
        hook: crate::extensions::HookId,
        outcome: Result<Option<Value>, String>,
    ) -> bool {
        let Some(position) = self
            .extensions
            .user_bash
            .iter()
            .position(|b| b.hook == hook)
        else {
            return false;
        };
        let waiting = self.extensions.user_bash.remove(position);
        let id = waiting.request_id.as_ref();
        match outcome {
            Err(error) => self.respond_error(id, "bash", &error),
            Ok(None) => self.start_bash(id, waiting.command, waiting.exclude_from_context),
            Ok(Some(answer)) => {
                let result = bash_command::BashResult {
                    output: answer["output"].as_str().unwrap_or_default().to_string(),
                    exit_code: answer["exitCode"].as_i64().map(|c| c as i32),
                    cancelled: answer["cancelled"].as_bool().unwrap_or(false),
                    truncated: answer["truncated"].as_bool().unwrap_or(false),
                    full_output_path: None,
                };
                self.finish_bash(
                    waiting.request_id,
                    waiting.command,
                    waiting.exclude_from_context,
                    result,
                );
            }
        }
        true
    }

    pub(super) fn start_bash(
        &mut self,
        id: Option<&Value>,
        command: String,
        exclude_from_context: Option<bool>,
    ) {
        self.bash.next_job += 1;
        let cancel = crate::child::CancelFlag::default();
        let job = bash_command::BashJob {
            job: self.bash.next_job,
            command: command.clone(),
            cwd: self.config.cwd.clone(),
            agent_dir: self.config.agent_dir.clone(),
            shell_path: self.config.shell_path(),
            shell_command_prefix: self.config.shell_command_prefix(),
        };
        match bash_command::spawn(job, cancel.clone(), self.bash.sender.clone()) {
            Ok(()) => self.bash.jobs.push(BashJobState {
                job: self.bash.next_job,
                request_id: id.cloned(),
                command,
                exclude_from_context,
                cancel,
            }),
            Err(e) => self.respond_error(id, "bash", &format!("Cannot start the command: {e}")),
        }
    }

    /// The RPC bash channel closed, so no job in flight can report: each one is cancelled and
    /// answered with an error, and later jobs get a fresh channel.
    pub(super) fn on_bash_gone(&mut self) {
        log::error!(
            "the RPC bash channel closed; failing {} job(s) in flight",
            self.bash.jobs.len()
        );
        (self.bash.sender, self.bash.events) =
            crossbeam_channel::bounded(PROVIDER_CHANNEL_CAPACITY);
        for job in std::mem::take(&mut self.bash.jobs) {
            job.cancel.cancel();
            self.respond_error(
                job.request_id.as_ref(),
                "bash",
                "The command's thread ended without a result",
            );
        }
    }

    pub(super) fn on_bash_event(&mut self, event: bash_command::BashEvent) {
        let Some(position) = self.bash.jobs.iter().position(|j| j.job == event.job) else {
            return;
        };
        match event.kind {
            bash_command::BashEventKind::Delta(delta) => {
                let id = self.bash.jobs[position].request_id.clone();
                self.emit(Event::BashExecutionUpdate { id, delta });
            }
            bash_command::BashEventKind::Finished(result) => {
                let job = self.bash.jobs.remove(position);
                self.finish_bash(
                    job.request_id,
                    job.command,
                    job.exclude_from_context,
                    result,
                );
            }
        }
    }

    /// A finished command (run, or answered by an extension): the conversation gets its
    /// message (at once when idle, at the next prompt during a run) and the request its answer.
    fn finish_bash(
        &mut self,
        request_id: Option<Value>,
        command: String,
        exclude_from_context: Option<bool>,
        result: bash_command::BashResult,
    ) {
        let message = AgentMessage::BashExecution(crate::messages::BashExecutionMessage {
            command,
            output: result.output.clone(),
            exit_code: result.exit_code,
            cancelled: result.cancelled,
            truncated: result.truncated,
            full_output_path: result.full_output_path.clone(),
            timestamp: now_ms(),
            exclude_from_context,
        });
        if self.is_busy() {
            // pi holds it until the next prompt, so a streaming turn's context is stable.
            self.bash.pending.push(message);
        } else {
            let json = serialize_message(&message);
            self.record_message(&message, &json);
            self.messages.push(message);
        }
        let mut data = serde_json::Map::new();
        data.insert("output".into(), json!(result.output));
        if let Some(code) = result.exit_code {
            data.insert("exitCode".into(), json!(code));
        }
        data.insert("cancelled".into(), json!(result.cancelled));
        data.insert("truncated".into(), json!(result.truncated));
        if let Some(path) = result.full_output_path {
            data.insert("fullOutputPath".into(), json!(path));
        }
        self.respond_ok(request_id.as_ref(), "bash", Some(Value::Object(data)));
    }
}
