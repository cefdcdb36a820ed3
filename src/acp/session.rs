//! One ACP session: an `agent::Agent` on its own thread ("acp-agent") and a driver thread
//! ("acp-session") between it and the connection. The driver feeds the agent pi's own commands
//! (as the print driver does) and turns the agent's records into `session/update`s, the replies
//! to the client's requests, and `session/request_permission` requests for the agent's dialogs.
//! Nothing in `agent` learns ACP names.
//!
//! A `session/prompt` while one runs steers it (pi's steering message): once the agent takes it
//! in, the running prompt is answered `end_turn` and the new one owns the rest of the run (see
//! `Driver::steer`). One that arrives after a cancel waits for the run to stop. `session/cancel` aborts the run and answers open permission requests for the
//! agent as cancelled. Blocking calls and their bounds: the driver's `select!` over the router's
//! commands, the agent's records and the client's replies; `call` waits for the agent's answer at
//! most `CALL_TIMEOUT`.
//!
//! How it ends: `Close` (or the router dropping its sender) closes the agent's input; the agent
//! aborts what runs, syncs its session file and ends; the driver drains its records, joins it and
//! answers the close.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, select};
use serde_json::{Value, json};

use super::client::Editor;
use super::translate;
use super::wire::{self, INTERNAL_ERROR, RpcError};
use crate::agent::{self, AgentSetup};
use crate::extensions::approval::ASK_OPTIONS;
use crate::rpc::Record;
use crate::rpc::protocol::{Command as AgentCommand, Request};
use crate::rpc::stdin_reader::Input;

/// How long a cancel waits for the router to queue its `$/cancel_request` notices (it answers
/// at once unless stdout is stalled).
const WITHDRAW_WAIT: Duration = Duration::from_secs(1);

/// How long the driver waits for the agent to answer one of its own queries.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What the router asks of a session.
#[derive(Debug)]
pub enum Command {
    /// Answer the request that opened the session.
    Opened {
        id: Value,
        how: Open,
    },
    Prompt {
        id: Value,
        params: Value,
    },
    Cancel,
    SetConfigOption {
        id: Value,
        params: Value,
    },
    Close {
        id: Option<Value>,
    },
}

/// What the client said it can show (`initialize`'s `clientCapabilities.session`): updates it
/// did not advertise are not sent.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientSide {
    /// `notice` updates (retries, extensions' notifications).
    pub notices: bool,
    /// `compaction_update`s.
    pub compaction: bool,
    /// `elicitation/create` forms (`clientCapabilities.elicitation.form`).
    pub elicitation: bool,
    /// `fs/*` and `terminal/*` for the tools.
    pub offers: super::client::Offers,
}

/// How a session was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// `session/new`: the answer names the new session.
    New,
    /// `session/load`: the history is replayed before the answer.
    Load,
    /// `session/resume`: the saved session goes on, nothing replayed.
    Resume,
}

/// What a session asks of the router.
pub enum ToRouter {
    /// Send a request to the client.
    Request(OutgoingRequest),
    /// The request sent with this tag is moot (its turn was cancelled): tell the client
    /// (`$/cancel_request`) and drop its answer. `written`, when given, hears once the notice
    /// is queued for stdout, so a session can make it precede the answer that ends its turn.
    Withdraw {
        tag: String,
        written: Option<Sender<()>>,
    },
}

/// A request to the client, its answer sent back on `reply`.
pub struct OutgoingRequest {
    pub method: &'static str,
    pub params: Value,
    pub tag: String,
    pub reply: Sender<Reply>,
}

/// The client's answer to an `OutgoingRequest`.
pub struct Reply {
    pub tag: String,
    pub outcome: Result<Value, Value>,
}

/// The router's handle on a running session.
pub struct Handle {
    pub commands: Sender<Command>,
    pub thread: JoinHandle<()>,
    pub cwd: PathBuf,
}

/// Starts the session's agent and driver; the driver's first command should be `Opened`.
pub fn spawn(
    session_id: String,
    mut setup: AgentSetup,
    client: ClientSide,
    out: Sender<Record>,
    requests: Sender<ToRouter>,
) -> std::io::Result<Handle> {
    let cwd = setup.session.cwd().to_path_buf();
    let editor = Arc::new(Editor::new(
        session_id.clone(),
        client.offers,
        requests.clone(),
    ));
    setup.client = Some(editor.clone());
    let (input_tx, input) = crossbeam_channel::bounded(64);
    let (records_tx, records) = crossbeam_channel::bounded(setup.profile.writer_capacity());
    let (commands_tx, commands) = crossbeam_channel::unbounded();
    let agent = std::thread::Builder::new()
        .name("acp-agent".into())
        .spawn(move || {
            let channels = agent::Channels {
                stdin: input,
                // Stdout belongs to the connection's writer; the router ends the sessions when
                // it closes, and the process's signals go to the router.
                writer_events: crossbeam_channel::never(),
                signals: crossbeam_channel::never(),
                out: records_tx,
            };
            agent::Agent::new(setup, channels).run();
        })?;
    let (replies_tx, replies) = crossbeam_channel::unbounded();
    let driver = Driver {
        session_id,
        client,
        editor,
        terminals_shown: Vec::new(),
        compactions: 0,
        cwd: cwd.clone(),
        agent_in: Some(input_tx),
        records,
        commands,
        replies_tx,
        replies,
        out,
        requests,
        next_call: 0,
        prompt: None,
        steering: VecDeque::new(),
        queued: VecDeque::new(),
        last_reply: None,
        cancelled: false,
        tools: HashMap::new(),
        unfinished: Vec::new(),
        asked: Vec::new(),
        dialogs: HashMap::new(),
        config_changed: false,
        usage_due: false,
        shown: None,
    };
    let thread = std::thread::Builder::new()
        .name("acp-session".into())
        .spawn(move || driver.run(agent))?;
    Ok(Handle {
        commands: commands_tx,
        thread,
        cwd,
    })
}

/// A `session/prompt` that arrived while another ran: sent to the agent as a steering message.
struct Steer {
    /// The client's request, answered when the run that took it in ends.
    id: Value,
    /// The agent's id for the `prompt` command.
    agent_id: String,
    /// The text as the agent lists it in `queue_update`.
    text: String,
    /// Seen in the agent's steering queue: it was queued, so its absence means it was delivered.
    queued: bool,
}

/// An agent dialog waiting for the client's answer.
enum Dialog {
    /// The approval gate's ask (answers are `ASK_OPTIONS`).
    Approval,
    Confirm,
    Select(Vec<String>),
    /// An extension's `input` or `editor` dialog, asked as a one-field elicitation form.
    Text,
}

struct Driver {
    session_id: String,
    client: ClientSide,
    /// The tools' editor side: what edits changed, the terminals bash runs in.
    editor: Arc<Editor>,
    /// Calls whose terminal the client was shown.
    terminals_shown: Vec<String>,
    /// Compactions so far (their ids).
    compactions: u64,
    cwd: PathBuf,
    /// The agent's input; None once closed.
    agent_in: Option<Sender<Input>>,
    records: Receiver<Record>,
    commands: Receiver<Command>,
    replies_tx: Sender<Reply>,
    replies: Receiver<Reply>,
    out: Sender<Record>,
    requests: Sender<ToRouter>,
    next_call: u64,
    /// The running prompt's request id and the agent-side id of its `prompt` command.
    prompt: Option<(Value, String)>,
    /// Prompts sent while one ran, as pi's steering messages, not yet delivered into the run.
    steering: VecDeque<Steer>,
    queued: VecDeque<(Value, Value)>,
    /// The run's last assistant message.
    last_reply: Option<Value>,
    cancelled: bool,
    /// Calls the model named: id → (tool name, arguments).
    tools: HashMap<String, (String, Value)>,
    /// Calls named and not finished, in the order the model named them.
    unfinished: Vec<String>,
    /// Unfinished calls a permission request was sent for.
    asked: Vec<String>,
    /// Open dialogs by the agent's ui id.
    dialogs: HashMap<String, Dialog>,
    /// The model or thinking level changed: a `config_option_update` is due.
    config_changed: bool,
    /// A prompt ended: a `usage_update` is due (and a look at the model and level).
    usage_due: bool,
    /// The model and thinking level the client was last shown (`shown_key`).
    shown: Option<(Value, Value)>,
}

/// What the config options show of `get_state` data: the model and the thinking level.
fn shown_key(state: &Value) -> (Value, Value) {
    (
        json!([state["model"]["provider"], state["model"]["id"]]),
        state["thinkingLevel"].clone(),
    )
}

impl Driver {
    fn run(mut self, agent: JoinHandle<()>) {
        loop {
            select! {
                recv(self.commands) -> command => match command {
                    Ok(Command::Close { id }) => {
                        self.close(agent, id);
                        return;
                    }
                    Ok(command) => self.command(command),
                    Err(_) => {
                        self.close(agent, None);
                        return;
                    }
                },
                recv(self.records) -> record => match record {
                    Ok(record) => self.record(record),
                    Err(_) => {
                        // The agent ended on its own (an extension's shutdown).
                        self.finish_prompt_with(Err(RpcError::new(INTERNAL_ERROR, "the session ended")));
                        let _ = agent.join();
                        return;
                    }
                },
                recv(self.replies) -> reply => {
                    if let Ok(reply) = reply {
                        self.reply(reply);
                    }
                }
            }
            self.options_update();
        }
    }

    /// What is due once the record at hand is handled (reading it asks the agent, which must not
    /// happen inside another wait for it): a model or thinking-level change the client did not
    /// make itself; the context use and cost after a prompt.
    fn options_update(&mut self) {
        // The model or level changed without a word to the client (an extension's `setModel`,
        // a cycle): seen by comparing with what the client was last shown.
        if self.usage_due
            && let Some(state) = self.call(AgentCommand::GetState)
            && self.shown.as_ref() != Some(&shown_key(&state))
        {
            self.config_changed = true;
        }
        if std::mem::take(&mut self.config_changed) {
            let options = self.config_options();
            self.send_update(
                json!({"sessionUpdate": "config_option_update", "configOptions": options}),
            );
        }
        if std::mem::take(&mut self.usage_due)
            && let Some(stats) = self.call(AgentCommand::GetSessionStats)
            && let Some(update) = translate::usage_update(&stats)
        {
            self.send_update(update);
        }
    }

    fn send_update(&self, update: Value) {
        let _ = self
            .out
            .send(wire::session_update(&self.session_id, update));
    }

    fn respond(&self, id: &Value, result: Result<Value, RpcError>) {
        let record = match result {
            Ok(value) => wire::response(id, value),
            Err(error) => wire::failure(id, &error),
        };
        let _ = self.out.send(record);
    }

    /// Sends a command to the agent under a new id; returns the id.
    fn send_agent(&mut self, command: AgentCommand) -> Option<String> {
        self.next_call += 1;
        let id = format!("acp-{}", self.next_call);
        let request = Request {
            id: Some(json!(id)),
            command,
        };
        let agent_in = self.agent_in.as_ref()?;
        agent_in.send(Input::Request(request)).ok()?;
        Some(id)
    }

    /// Sends a command and waits for its response's `data` (records that come first are handled
    /// as usual). None when the agent refused, is gone, or took longer than `CALL_TIMEOUT`.
    fn call(&mut self, command: AgentCommand) -> Option<Value> {
        self.call_for_error(command).ok()
    }

    /// `call`, with why it failed: the agent's error text, or that it is gone or silent.
    fn call_for_error(&mut self, command: AgentCommand) -> Result<Value, RpcError> {
        let gone = || RpcError::new(INTERNAL_ERROR, "the session has ended");
        let id = self.send_agent(command).ok_or_else(gone)?;
        let deadline = std::time::Instant::now() + CALL_TIMEOUT;
        loop {
            let record = self.records.recv_deadline(deadline).map_err(|e| match e {
                crossbeam_channel::RecvTimeoutError::Timeout => {
                    RpcError::new(INTERNAL_ERROR, "the agent did not answer")
                }
                crossbeam_channel::RecvTimeoutError::Disconnected => gone(),
            })?;
            let Some(value) = record.to_value() else {
                continue;
            };
            if value["type"] == "response" && value["id"] == id.as_str() {
                if value["success"] != true {
                    let error = value["error"].as_str().unwrap_or("refused");
                    return Err(RpcError::params(format!("Invalid params: {error}")));
                }
                return Ok(value.get("data").cloned().unwrap_or(Value::Null));
            }
            self.event(value);
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Opened { id, how } => {
                if how == Open::Load {
                    let messages = self.call(AgentCommand::GetMessages).unwrap_or(Value::Null);
                    for update in
                        translate::replay(&messages["messages"], &self.cwd, self.client.compaction)
                    {
                        self.send_update(update);
                    }
                }
                let options = self.config_options();
                let mut result = json!({"configOptions": options});
                if how == Open::New {
                    result["sessionId"] = json!(self.session_id);
                }
                self.respond(&id, Ok(result));
                // Templates, skills and extension commands, typed as `/name args`.
                if let Some(commands) = self.call(AgentCommand::GetCommands) {
                    self.send_update(translate::available_commands(&commands));
                }
            }
            Command::Prompt { id, params } if self.prompt.is_some() && !self.cancelled => {
                self.steer(id, &params);
            }
            Command::Prompt { id, params } => {
                self.queued.push_back((id, params));
                self.start_next_prompt();
            }
            Command::Cancel => self.cancel(),
            Command::SetConfigOption { id, params } => {
                let result = self.set_config_option(&params);
                self.respond(&id, result);
            }
            Command::Close { .. } => {}
        }
    }

    fn config_options(&mut self) -> Value {
        let state = self.call(AgentCommand::GetState).unwrap_or(Value::Null);
        self.shown = Some(shown_key(&state));
        let models = self
            .call(AgentCommand::GetAvailableModels)
            .unwrap_or(Value::Null);
        let levels = self
            .call(AgentCommand::GetAvailableThinkingLevels)
            .unwrap_or(Value::Null);
        translate::config_options(&state, &models, &levels)
    }

    fn set_config_option(&mut self, params: &Value) -> Result<Value, RpcError> {
        let params = wire::params_object(params)?;
        let config = wire::required_str(params, "configId")?;
        let value = wire::required_str(params, "value")?.to_string();
        let offered = self.config_options();
        let known = offered
            .as_array()
            .into_iter()
            .flatten()
            .find(|option| option["id"] == config)
            .ok_or_else(|| {
                RpcError::params(format!(
                    "Invalid params: unknown config option \"{config}\""
                ))
            })?;
        if !known["options"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|option| option["value"] == value.as_str())
        {
            return Err(RpcError::params(format!(
                "Invalid params: \"{value}\" is not a value of {config}"
            )));
        }
        let command = match config {
            "model" => {
                let Some((provider, model)) = value.split_once('/') else {
                    return Err(RpcError::params(format!(
                        "Invalid params: unknown model \"{value}\""
                    )));
                };
                AgentCommand::SetModel {
                    provider: provider.to_string(),
                    model_id: model.to_string(),
                }
            }
            "thought_level" => AgentCommand::SetThinkingLevel {
                level: value.clone(),
            },
            other => {
                return Err(RpcError::params(format!(
                    "Invalid params: unknown config option \"{other}\""
                )));
            }
        };
        self.call_for_error(command)?;
        // The answer carries the new options.
        self.config_changed = false;
        Ok(json!({"configOptions": self.config_options()}))
    }

    fn start_next_prompt(&mut self) {
        if self.prompt.is_some() {
            return;
        }
        while let Some((id, params)) = self.queued.pop_front() {
            let (message, images) = match translate::prompt_input(&params["prompt"]) {
                Ok(input) => input,
                Err(error) => {
                    self.respond(&id, Err(error));
                    continue;
                }
            };
            self.last_reply = None;
            self.cancelled = false;
            let command = AgentCommand::Prompt {
                message,
                images,
                streaming_behavior: None,
            };
            match self.send_agent(command) {
                Some(agent_id) => {
                    self.prompt = Some((id, agent_id));
                    return;
                }
                None => self.respond(
                    &id,
                    Err(RpcError::new(INTERNAL_ERROR, "the session has ended")),
                ),
            }
        }
    }

    /// A prompt while one runs steers the run (as the Claude Code adapter does with its SDK's
    /// input stream): it goes to the agent as pi's steering message, delivered after the running
    /// turn's tool calls. Once it is delivered the running prompt is answered `end_turn` and this
    /// one owns the rest of the run.
    fn steer(&mut self, id: Value, params: &Value) {
        let (message, images) = match translate::prompt_input(&params["prompt"]) {
            Ok(input) => input,
            Err(error) => return self.respond(&id, Err(error)),
        };
        let command = AgentCommand::Prompt {
            message: message.clone(),
            images,
            streaming_behavior: Some(crate::rpc::protocol::StreamingBehavior::Steer),
        };
        match self.send_agent(command) {
            Some(agent_id) => self.steering.push_back(Steer {
                id,
                agent_id,
                text: message,
                queued: false,
            }),
            None => self.respond(
                &id,
                Err(RpcError::new(INTERNAL_ERROR, "the session has ended")),
            ),
        }
    }

    /// The agent's steering queue as it now stands: steering prompts that were in it and left
    /// it were delivered into the run, in order.
    fn steering_changed(&mut self, queue: &[Value]) {
        let listed = |text: &str| queue.iter().any(|t| t == text);
        for steer in &mut self.steering {
            steer.queued |= listed(&steer.text);
        }
        while self
            .steering
            .front()
            .is_some_and(|steer| steer.queued && !listed(&steer.text))
        {
            let Some(steer) = self.steering.pop_front() else {
                break;
            };
            if let Some((id, _)) = self.prompt.replace((steer.id, steer.agent_id)) {
                self.respond(&id, Ok(json!({"stopReason": "end_turn"})));
            }
        }
    }

    /// Answers steering prompts the run never took in with `result`; the agent's queue is
    /// emptied so they do not join a later run.
    fn drop_steering(&mut self, result: &Result<Value, RpcError>) {
        if self.steering.is_empty() {
            return;
        }
        for steer in std::mem::take(&mut self.steering) {
            self.respond(&steer.id, result.clone());
        }
        let _ = self.send_agent(AgentCommand::ClearQueue);
    }

    /// Answers the running prompt and starts the next one.
    fn finish_prompt_with(&mut self, result: Result<Value, RpcError>) {
        if let Some((id, _)) = self.prompt.take() {
            self.respond(&id, result);
            self.usage_due = true;
        }
        self.tools.clear();
        self.unfinished.clear();
        self.asked.clear();
        self.start_next_prompt();
    }

    fn cancel(&mut self) {
        if self.prompt.is_none() {
            return;
        }
        self.cancelled = true;
        // The abort first: a dialog answered before it would let the run go on to its next
        // request.
        let _ = self.send_agent(AgentCommand::Abort);
        // The client learns of each withdrawn request before the prompt's answer: the notices
        // are the router's to write, the answer is this thread's, so wait (briefly) until the
        // router has queued them.
        let (written_tx, written) = crossbeam_channel::bounded(self.dialogs.len());
        let mut withdrawn = 0;
        for (ui_id, _) in std::mem::take(&mut self.dialogs) {
            let notice = ToRouter::Withdraw {
                tag: ui_id.clone(),
                written: Some(written_tx.clone()),
            };
            if self.requests.send(notice).is_ok() {
                withdrawn += 1;
            }
            self.answer_dialog(ui_id, None, None, true);
        }
        let deadline = std::time::Instant::now() + WITHDRAW_WAIT;
        for _ in 0..withdrawn {
            if written.recv_deadline(deadline).is_err() {
                break;
            }
        }
        self.editor.kill_all();
    }

    fn close(mut self, agent: JoinHandle<()>, id: Option<Value>) {
        self.cancelled = true;
        self.agent_in = None;
        self.editor.release_all();
        // The agent aborts what runs and ends; what it still says is not for the client.
        for _ in self.records.iter() {}
        let _ = agent.join();
        for steer in std::mem::take(&mut self.steering) {
            self.respond(&steer.id, Ok(json!({"stopReason": "cancelled"})));
        }
        self.finish_prompt_with(Ok(json!({"stopReason": "cancelled"})));
        for (id, _) in std::mem::take(&mut self.queued) {
            self.respond(&id, Ok(json!({"stopReason": "cancelled"})));
        }
        if let Some(id) = id {
            self.respond(&id, Ok(json!({})));
        }
    }

    fn record(&mut self, record: Record) {
        if let Some(value) = record.to_value() {
            self.event(value);
        }
    }

    /// One of the agent's records, translated.
    fn event(&mut self, record: Value) {
        match record["type"].as_str().unwrap_or_default() {
            "message_update" => self.message_update(&record["assistantMessageEvent"]),
            "message_end" if record["message"]["role"] == "assistant" => {
                self.last_reply = Some(record["message"].clone());
            }
            "tool_execution_start" => {
                let id = record["toolCallId"].as_str().unwrap_or_default();
                if !self.tools.contains_key(id) {
                    let name = record["toolName"].as_str().unwrap_or_default();
                    self.tools
                        .insert(id.to_string(), (name.to_string(), record["args"].clone()));
                    self.unfinished.push(id.to_string());
                    self.send_update(translate::tool_call(
                        id,
                        name,
                        &record["args"],
                        "in_progress",
                        &self.cwd,
                    ));
                } else {
                    self.send_update(json!({"sessionUpdate": "tool_call_update",
                        "toolCallId": id, "status": "in_progress"}));
                }
            }
            "tool_execution_update" => {
                let id = record["toolCallId"].as_str().unwrap_or_default();
                if let Some(terminal) = self.editor.terminal(id) {
                    // The client shows the command's output in its own terminal.
                    if !self.terminals_shown.iter().any(|shown| shown == id) {
                        self.terminals_shown.push(id.to_string());
                        self.send_update(json!({"sessionUpdate": "tool_call_update",
                            "toolCallId": id,
                            "content": [{"type": "terminal", "terminalId": terminal}]}));
                    }
                    return;
                }
                let content = translate::content_blocks(&record["partialResult"]["content"]);
                self.send_update(json!({"sessionUpdate": "tool_call_update",
                    "toolCallId": id, "content": content}));
            }
            "tool_execution_end" => {
                let id = record["toolCallId"].as_str().unwrap_or_default();
                let is_error = record["isError"].as_bool().unwrap_or(false);
                let name = record["toolName"].as_str().unwrap_or_default();
                let args = self
                    .tools
                    .get(id)
                    .map(|(_, args)| args.clone())
                    .unwrap_or(Value::Null);
                let result = &record["result"];
                let terminal = self.editor.terminal(id);
                let content = match (self.editor.take_change(id), &terminal) {
                    // The whole file, as the tool itself read and wrote it.
                    (Some(change), _) => translate::change_content(
                        &change.path,
                        change.old.as_deref(),
                        &change.new,
                        result,
                    ),
                    (None, Some(terminal)) => {
                        let mut content = vec![json!({"type": "terminal", "terminalId": terminal})];
                        if !self.terminals_shown.iter().any(|shown| shown == id) {
                            // Never shown live: the result's text too.
                            content.extend(translate::content_blocks(&result["content"]));
                        }
                        Value::Array(content)
                    }
                    (None, None) => {
                        translate::tool_content(name, &args, result, is_error, &self.cwd)
                    }
                };
                self.unfinished.retain(|other| other != id);
                self.asked.retain(|other| other != id);
                self.send_update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": id,
                    "status": if is_error { "failed" } else { "completed" },
                    "content": content, "rawOutput": result}),
                );
                if terminal.is_some() {
                    // Shown finished: the client may let the terminal go.
                    self.editor.release(id);
                    self.terminals_shown.retain(|shown| shown != id);
                }
            }
            // Told once the record at hand is handled (`options_update`): reading the options
            // asks the agent, which must not happen inside another wait for it.
            "thinking_level_changed" => self.config_changed = true,
            "session_info_changed" => self.send_update(
                json!({"sessionUpdate": "session_info_update", "title": record["name"]}),
            ),
            "extension_ui_request" if record["method"] == "notify" => {
                let level = record["notifyType"].as_str().unwrap_or("info");
                let message = record["message"].as_str().unwrap_or_default();
                self.notice(level, message);
            }
            "extension_ui_request" => self.dialog(&record),
            "auto_retry_start" => {
                let title = format!(
                    "Retrying in {} s (attempt {} of {}): {}",
                    record["delayMs"].as_u64().unwrap_or(0).div_ceil(1000),
                    record["attempt"],
                    record["maxAttempts"],
                    record["errorMessage"]
                        .as_str()
                        .unwrap_or("the request failed")
                );
                self.notice("warning", &title);
            }
            "auto_retry_end" if record["success"] == false => {
                let error = record["finalError"]
                    .as_str()
                    .unwrap_or("the request failed");
                self.notice("error", &format!("Gave up retrying: {error}"));
            }
            "compaction_start" if self.client.compaction => {
                self.compactions += 1;
                self.send_update(json!({"sessionUpdate": "compaction_update",
                    "compactionId": format!("compaction-{}", self.compactions),
                    "status": "in_progress"}));
            }
            "compaction_end" if self.client.compaction => {
                let mut update = json!({"sessionUpdate": "compaction_update",
                    "compactionId": format!("compaction-{}", self.compactions)});
                if record["aborted"] == true {
                    update["status"] = json!("cancelled");
                } else if let Some(summary) = record["result"]["summary"].as_str() {
                    update["status"] = json!("completed");
                    update["summary"] = json!([{"type": "text", "text": summary}]);
                } else {
                    update["status"] = json!("failed");
                    update["error"] = record["errorMessage"].clone();
                }
                self.send_update(update);
            }
            "queue_update" => {
                let queue = record["steering"].as_array().cloned().unwrap_or_default();
                self.steering_changed(&queue);
            }
            "response"
                if self
                    .steering
                    .iter()
                    .any(|steer| record["id"] == steer.agent_id.as_str()) =>
            {
                let refused = record["success"] != true;
                if refused || record["data"]["disposition"] == "handled" {
                    let Some(at) = self
                        .steering
                        .iter()
                        .position(|steer| record["id"] == steer.agent_id.as_str())
                    else {
                        return;
                    };
                    let Some(steer) = self.steering.remove(at) else {
                        return;
                    };
                    let result = if refused {
                        let error = record["error"].as_str().unwrap_or("the prompt was refused");
                        Err(RpcError::new(INTERNAL_ERROR, error))
                    } else {
                        // An extension command took it at once: nothing is queued.
                        Ok(json!({"stopReason": "end_turn"}))
                    };
                    self.respond(&steer.id, result);
                }
            }
            "response" => {
                let is_prompt = self
                    .prompt
                    .as_ref()
                    .is_some_and(|(_, agent_id)| record["id"] == agent_id.as_str());
                if is_prompt && record["success"] != true {
                    let error = record["error"].as_str().unwrap_or("the prompt was refused");
                    self.finish_prompt_with(Err(RpcError::new(INTERNAL_ERROR, error)));
                } else if is_prompt && record["data"]["disposition"] == "handled" {
                    // An extension command, an input hook or `/mcp` took it: no run follows.
                    self.finish_prompt_with(Ok(json!({"stopReason": "end_turn"})));
                }
            }
            "agent_settled" if self.prompt.is_some() => {
                let aborted = self.cancelled || record["aborted"] == true;
                let result = translate::stop_reason(self.last_reply.as_ref(), aborted)
                    .map(|stop| json!({"stopReason": stop}))
                    .map_err(|error| RpcError::new(INTERNAL_ERROR, error));
                let dropped = if aborted {
                    Ok(json!({"stopReason": "cancelled"}))
                } else {
                    result.clone()
                };
                self.drop_steering(&dropped);
                self.finish_prompt_with(result);
            }
            _ => {}
        }
    }

    /// A `notice` (first line the title, the rest its description), when the client shows them.
    fn notice(&self, level: &str, text: &str) {
        let mut lines = text.trim().splitn(2, '\n');
        let title = lines.next().unwrap_or_default();
        if !self.client.notices || title.is_empty() {
            return;
        }
        let severity = match level {
            "warning" | "error" => level,
            _ => "info",
        };
        let mut update = json!({"sessionUpdate": "notice", "severity": severity, "title": title});
        if let Some(description) = lines.next() {
            update["description"] = json!(description);
        }
        self.send_update(update);
    }

    fn message_update(&mut self, event: &Value) {
        match event["type"].as_str().unwrap_or_default() {
            "text_delta" => self.send_update(translate::chunk(
                "agent_message_chunk",
                event["delta"].as_str().unwrap_or_default(),
            )),
            "thinking_delta" => self.send_update(translate::chunk(
                "agent_thought_chunk",
                event["delta"].as_str().unwrap_or_default(),
            )),
            "toolcall_start" => {
                let id = event["id"].as_str().unwrap_or_default();
                let name = event["toolName"].as_str().unwrap_or_default();
                if id.is_empty() {
                    return;
                }
                self.tools
                    .insert(id.to_string(), (name.to_string(), Value::Null));
                self.unfinished.push(id.to_string());
                self.send_update(json!({"sessionUpdate": "tool_call", "toolCallId": id,
                    "title": name, "kind": translate::tool_kind(name), "status": "pending"}));
            }
            "toolcall_end" => {
                let call = &event["toolCall"];
                let id = call["id"].as_str().unwrap_or_default();
                let name = call["name"].as_str().unwrap_or_default();
                let args = &call["arguments"];
                let announced = self.tools.contains_key(id);
                self.tools
                    .insert(id.to_string(), (name.to_string(), args.clone()));
                if announced {
                    self.send_update(json!({"sessionUpdate": "tool_call_update",
                        "toolCallId": id, "title": translate::tool_title(name, args),
                        "rawInput": args,
                        "locations": translate::tool_locations(name, args, &self.cwd)}));
                } else {
                    self.unfinished.push(id.to_string());
                    self.send_update(translate::tool_call(id, name, args, "pending", &self.cwd));
                }
            }
            _ => {}
        }
    }

    /// An agent dialog: the approval gate's ask and extensions' confirm and select become
    /// `session/request_permission`; text dialogs an elicitation form where the client offers
    /// one, else they are answered as cancelled.
    fn dialog(&mut self, record: &Value) {
        let Some(ui_id) = record["id"].as_str().map(str::to_string) else {
            return;
        };
        let method = record["method"].as_str().unwrap_or_default();
        let title = record["title"].as_str().unwrap_or_default().to_string();
        let (dialog, options) = match method {
            "select" => {
                let choices: Vec<String> = record["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|o| o.as_str().map(str::to_string))
                    .collect();
                if choices == ASK_OPTIONS {
                    let options = json!([
                        {"optionId": "allow_once", "name": ASK_OPTIONS[0], "kind": "allow_once"},
                        {"optionId": "allow_always", "name": ASK_OPTIONS[1], "kind": "allow_always"},
                        {"optionId": "reject_once", "name": ASK_OPTIONS[2], "kind": "reject_once"},
                    ]);
                    (Dialog::Approval, options)
                } else {
                    let options: Vec<Value> = choices
                        .iter()
                        .enumerate()
                        .map(|(i, c)| json!({"optionId": i.to_string(), "name": c, "kind": "allow_once"}))
                        .collect();
                    (Dialog::Select(choices), Value::Array(options))
                }
            }
            "confirm" => {
                let options = json!([
                    {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
                    {"optionId": "no", "name": "No", "kind": "reject_once"},
                ]);
                (Dialog::Confirm, options)
            }
            "input" | "editor" if self.client.elicitation => {
                self.text_dialog(ui_id, record);
                return;
            }
            "input" | "editor" => {
                self.answer_dialog(ui_id, None, None, true);
                return;
            }
            _ => return,
        };
        let message = record["message"].as_str().unwrap_or_default();
        let title = if message.is_empty() {
            title
        } else {
            format!("{title}\n{message}")
        };
        // The call being asked about: the first unfinished call of the tool the title names
        // ("Allow <tool>?") not asked about yet.
        let asked_tool = title
            .strip_prefix("Allow ")
            .and_then(|rest| rest.split('?').next())
            .unwrap_or_default();
        let tool_call_id = self
            .unfinished
            .iter()
            .find(|id| {
                !self.asked.contains(*id)
                    && self
                        .tools
                        .get(*id)
                        .is_some_and(|(name, _)| name == asked_tool)
            })
            .cloned();
        if let Some(id) = &tool_call_id {
            self.asked.push(id.clone());
        }
        let tool_call_id = tool_call_id.unwrap_or_else(|| ui_id.clone());
        let params = json!({"sessionId": self.session_id, "options": options,
            "toolCall": {"toolCallId": tool_call_id, "title": title}});
        self.dialogs.insert(ui_id.clone(), dialog);
        let request = OutgoingRequest {
            method: "session/request_permission",
            params,
            tag: ui_id.clone(),
            reply: self.replies_tx.clone(),
        };
        if self.requests.send(ToRouter::Request(request)).is_err() {
            self.dialogs.remove(&ui_id);
            self.answer_dialog(ui_id, None, None, true);
        }
    }

    /// An `input` / `editor` dialog as `elicitation/create`: one string field, the dialog's
    /// title as the message, its prefill as the default.
    fn text_dialog(&mut self, ui_id: String, record: &Value) {
        let title = record["title"].as_str().unwrap_or("Input");
        let mut field = json!({"type": "string", "title": title});
        if let Some(prefill) = record["prefill"].as_str() {
            field["default"] = json!(prefill);
        }
        let params = json!({"sessionId": self.session_id, "mode": "form", "message": title,
            "requestedSchema": {"type": "object", "properties": {"value": field},
                "required": ["value"]}});
        self.dialogs.insert(ui_id.clone(), Dialog::Text);
        let request = OutgoingRequest {
            method: "elicitation/create",
            params,
            tag: ui_id.clone(),
            reply: self.replies_tx.clone(),
        };
        if self.requests.send(ToRouter::Request(request)).is_err() {
            self.dialogs.remove(&ui_id);
            self.answer_dialog(ui_id, None, None, true);
        }
    }

    fn reply(&mut self, reply: Reply) {
        let Some(dialog) = self.dialogs.remove(&reply.tag) else {
            return;
        };
        if let Dialog::Text = dialog {
            let accepted = reply
                .outcome
                .ok()
                .filter(|result| result["action"] == "accept")
                .and_then(|result| result["content"]["value"].as_str().map(str::to_string));
            match accepted {
                Some(text) => self.answer_dialog(reply.tag, Some(json!(text)), None, false),
                None => self.answer_dialog(reply.tag, None, None, true),
            }
            return;
        }
        let selected = reply.outcome.ok().and_then(|result| {
            (result["outcome"]["outcome"] == "selected")
                .then(|| result["outcome"]["optionId"].as_str().map(str::to_string))
                .flatten()
        });
        let Some(option) = selected else {
            self.answer_dialog(reply.tag, None, None, true);
            return;
        };
        match dialog {
            Dialog::Approval => {
                let answer = match option.as_str() {
                    "allow_once" => ASK_OPTIONS[0],
                    "allow_always" => ASK_OPTIONS[1],
                    _ => ASK_OPTIONS[2],
                };
                self.answer_dialog(reply.tag, Some(json!(answer)), None, false);
            }
            Dialog::Confirm => {
                self.answer_dialog(reply.tag, None, Some(option == "yes"), false);
            }
            Dialog::Select(choices) => {
                let chosen = option.parse::<usize>().ok().and_then(|i| choices.get(i));
                match chosen {
                    Some(choice) => {
                        let value = Some(json!(choice));
                        self.answer_dialog(reply.tag, value, None, false);
                    }
                    None => self.answer_dialog(reply.tag, None, None, true),
                }
            }
            Dialog::Text => {}
        }
    }

    fn answer_dialog(
        &mut self,
        ui_id: String,
        value: Option<Value>,
        confirmed: Option<bool>,
        cancelled: bool,
    ) {
        let command = AgentCommand::ExtensionUiResponse {
            id: ui_id,
            value,
            confirmed,
            cancelled,
        };
        if let Some(agent_in) = &self.agent_in {
            let _ = agent_in.send(Input::Request(Request { id: None, command }));
        }
    }
}
