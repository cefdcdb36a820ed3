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

impl Agent {
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
                let message = AgentMessage::BashExecution(crate::messages::BashExecutionMessage {
                    command: job.command,
                    output: result.output.clone(),
                    exit_code: result.exit_code,
                    cancelled: result.cancelled,
                    truncated: result.truncated,
                    full_output_path: result.full_output_path.clone(),
                    timestamp: now_ms(),
                    exclude_from_context: job.exclude_from_context,
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
                self.respond_ok(job.request_id.as_ref(), "bash", Some(Value::Object(data)));
            }
        }
    }
}
