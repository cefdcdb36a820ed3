//! The agent's phase, the data each phase owns, and the run bookkeeping (`Runs`): plain data, no
//! I/O. A worker handle lives only inside the phase that owns it, so leaving a phase (a
//! `mem::replace` to `Idle`) drops — and so cancels — its workers.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use serde_json::Value;

use super::compaction::{CompactionReason, Preparation, SummaryRequest};
use super::draft::Draft;
use crate::extensions::HookId;
use crate::messages::{AgentMessage, ImageContent, ToolCall, Usage};
use crate::provider::{ProviderEvent, StreamHandle};
use crate::rpc::SharedJson;
use crate::tools::{ToolEvent, ToolHandle, ToolOutput};

pub enum Phase {
    Idle,
    /// One LLM request is streaming the assistant reply.
    Streaming(Box<Stream>),
    /// The reply's tool calls are running, one thread each.
    RunningTools(Box<ToolBatch>),
    /// Between a failed run and its automatic retry; the timer lives in the loop's select.
    RetryWait(RetryWait),
    /// Summarizing the older conversation (manual, threshold or overflow).
    Compacting(Box<Compaction>),
    /// An accepted prompt waiting for an extension hook (`input`, `before_agent_start`).
    Preparing(Box<PromptPrep>),
    /// The first prompt waits for what is still starting (see `startup_wait`): the TypeScript
    /// extensions' registrations, MCP servers whose tools its run declares.
    StartupWait(Box<StartupWait>),
    /// A subscription login is refreshed on a worker before a prompt or a request uses it.
    Refreshing(Box<Refreshing>),
    /// A prompt's images are being scaled to the model's limits on a worker thread.
    ScalingImages(Box<ImageWork>),
    /// A drain point waits for a queued message's images (made ready on a worker) before it
    /// delivers that message and the ones after it.
    DeliveringQueued(Box<QueuedDelivery>),
    /// (v2) An extension's `reload`: the old extensions stop, then the new ones start, each on
    /// a worker thread.
    Reloading(Box<Reloading>),
}

/// A reload's worker and what it reports.
pub struct Reloading {
    pub stage: ReloadStage,
    /// The `session_start` the new extensions hear (reason `reload`, `new`, `resume`, `fork`).
    pub start_event: serde_json::Value,
    /// The worker's one report (it disconnects without one only if it died).
    pub done: Receiver<Reloaded>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadStage {
    /// The old extensions hear `session_shutdown` and get their grace period; their last
    /// events are still read.
    Stopping,
    /// The new extensions are started and registering; their events wait until the new host
    /// is in place.
    Starting,
}

pub enum Reloaded {
    Stopped,
    Started(
        crate::extensions::ExtensionHost,
        Vec<crate::rpc::events::Event>,
    ),
}

/// A login refresh in flight and what waits for it.
pub struct Refreshing {
    pub refresh: crate::config::OAuthRefresh,
    pub then: AfterRefresh,
}

pub enum AfterRefresh {
    /// A client's prompt, answered once the key is known.
    Prompt {
        id: Option<Value>,
        message: String,
        images: Vec<ImageContent>,
    },
    /// The run's next LLM request.
    Request,
    /// A compaction whose start event is out: its summary requests need the key.
    Compaction {
        reason: super::compaction::CompactionReason,
        origin: CompactionOrigin,
        custom_instructions: Option<String>,
    },
    /// (v2) A request a virtual selection was routed to another provider's login.
    Dispatch {
        model: Box<crate::config::Model>,
        thinking: crate::config::ThinkingLevel,
        replacement: Option<Vec<AgentMessage>>,
    },
    /// (v2) A compaction's summaries, routed to another provider's login.
    Summaries {
        compaction: Box<Compaction>,
        custom_instructions: Option<String>,
    },
}

/// A prompt waiting for its images (pi 1.6.0 scales them before the run starts).
pub struct ImageWork {
    /// The prompt's text (with the notes) and images, once scaled.
    pub result: Receiver<(String, Vec<ImageContent>)>,
    /// The prompt as it came, sent as is if the worker dies.
    pub text: String,
    pub images: Vec<ImageContent>,
    /// The messages that follow the prompt into the run (extension-injected, next-turn ones).
    pub rest: Vec<AgentMessage>,
}

/// A drain point in the middle of delivering queued messages (pi 1.6.0 prepares their images
/// asynchronously): the message at the queue's front waits for its image worker; the agent
/// serves commands meanwhile. When the worker answers (or the bound passes: the message then
/// goes as it came) that message and the rest of the drain are delivered, in order, and the
/// request follows.
pub struct QueuedDelivery {
    /// The steering queue (else the follow-up queue).
    pub steering: bool,
    /// How many messages this drain still delivers, the waiting one included.
    pub left: usize,
    /// The waiting message's worker.
    pub result: Receiver<(String, Vec<ImageContent>)>,
    pub deadline: Instant,
}

pub struct StartupWait {
    pub then: AfterStartupWait,
    pub deadline: Instant,
}

/// What goes on when a start-up wait ends.
pub enum AfterStartupWait {
    /// The first prompt's run, once the MCP servers whose tools it declares connected (up to
    /// `mcp::DEFAULT_STARTUP_WAIT`).
    Run(Vec<AgentMessage>),
    /// The client's requests that need the extensions' registrations (a prompt, a session
    /// change, `get_commands`, …), in order, once no extension is registering any more (up to
    /// `extensions::TS_HOST_REGISTER_TIMEOUT`).
    Requests(Vec<crate::rpc::protocol::Request>),
}

/// A prompt between its arrival and its run, while extensions look at it.
pub struct PromptPrep {
    pub from: PromptFrom,
    pub text: String,
    pub images: Vec<ImageContent>,
    pub hook: HookId,
    pub stage: PrepStage,
}

/// Who sent a prompt: the client (answered, with its request id) or an extension (no response,
/// no template expansion, `source:"extension"` in the input hook).
#[derive(Clone, Debug, PartialEq)]
pub enum PromptFrom {
    Client(Option<serde_json::Value>),
    Extension,
}

impl PromptFrom {
    pub fn source(&self) -> &'static str {
        match self {
            PromptFrom::Client(_) => "rpc",
            PromptFrom::Extension => "extension",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrepStage {
    /// `input`: may transform the text or handle the prompt (no run).
    Input,
    /// `before_agent_start`: may inject messages or replace this run's system prompt. The prompt
    /// was already answered.
    BeforeStart,
}

pub struct RetryWait {
    pub deadline: Instant,
}

pub struct Stream {
    /// Field order is drop order: the handle (request) goes before its channel.
    pub handle: StreamHandle,
    pub events: Receiver<ProviderEvent>,
    pub draft: Draft,
    /// The level the request asked for (the reply records it).
    pub thinking: crate::config::ThinkingLevel,
    /// For the idle timeout.
    pub last_event: Instant,
    /// When the request was sent: the reply's `durationMs` counts from here.
    pub sent_at: Instant,
    /// An event read ahead while merging deltas, handled next.
    pub lookahead: Option<ProviderEvent>,
    /// What the request was dispatched with (the model it went to, the messages an extension's
    /// `context` put in place of the conversation), to send it again without strict tools.
    pub model: crate::config::Model,
    pub replacement: Option<Vec<crate::messages::AgentMessage>>,
}

pub struct ToolBatch {
    /// The reply whose calls these are, as `turn_end` will carry it.
    pub assistant: SharedJson,
    /// One slot per call, in the reply's order.
    pub calls: Vec<CallSlot>,
    /// For builtin tools started later (after an approval or a hook). Tool threads catch their
    /// own panics, so every started call reports back; the channel need not disconnect.
    pub sender: Sender<ToolEvent>,
    /// Still starting the calls: do not finish the batch yet.
    pub starting: bool,
    /// A call's tool has `executionMode: "sequential"` (v2): the calls run one after another.
    pub sequential: bool,
    pub events: Receiver<ToolEvent>,
    /// The tools the reply's request declared: what the model's calls may name, even after a
    /// `tool_search` of the same reply loaded more.
    pub declared: Vec<String>,
}

/// One tool call of a batch and everything the batch knows about it.
pub struct CallSlot {
    pub call: ToolCall,
    /// The arguments the call runs with (an extension may rewrite them).
    pub args: serde_json::Value,
    /// `None` once the call finished; dropping a handle cancels its call.
    pub handle: Option<ToolHandle>,
    pub result: Option<ToolOutput>,
    /// The latest cumulative update (kept for an aborted call's result).
    pub partial: Option<ToolOutput>,
    /// What the call waits for before or after running (approval, extension hooks).
    pub wait: Option<CallWait>,
    /// Executed by an extension (cancelled through the host on abort).
    pub by_extension: bool,
    /// When the call began executing (`tool_execution_end.durationMs`); `None` if it never ran.
    pub started: Option<std::time::Instant>,
    /// (v2) Its result asked to end the run: with every call of the batch terminating, no
    /// follow-up model call is made.
    pub terminate: bool,
    /// Passed the approval gate and hooks are under way or done (sequential batches start one
    /// call at a time).
    pub gated: bool,
    /// Its result's images are ready for the model as they are: a built-in tool's (`read`
    /// scales its own), unless the `tool_result` hook replaced the content.
    pub images_ready: bool,
    /// An MCP call's whole result (`structuredContent` of `tool_execution_end`).
    pub structured: Option<serde_json::Value>,
    /// A call a `codemode` script made: the script's slot, the script's id for the call, and
    /// the call's record in the script's `details.calls`. Nested calls get no tool result message.
    pub parent: Option<NestedOf>,
    /// A running `codemode` script (this slot is the `codemode` call).
    pub script: Option<Box<crate::tools::codemode::ScriptRun>>,
    /// The script's `nestedCalls` record, for its tool result message.
    pub nested_calls: Option<serde_json::Value>,
}

#[derive(Clone, Copy, Debug)]
pub struct NestedOf {
    pub slot: usize,
    pub script_call: u64,
    pub record: usize,
}

impl CallSlot {
    pub fn new(call: ToolCall) -> CallSlot {
        CallSlot {
            args: call.arguments.clone(),
            call,
            handle: None,
            result: None,
            partial: None,
            wait: None,
            by_extension: false,
            started: None,
            terminate: false,
            gated: false,
            images_ready: false,
            structured: None,
            parent: None,
            script: None,
            nested_calls: None,
        }
    }
}

/// A tool call paused on something outside the tool itself.
pub enum CallWait {
    /// The approval gate asked the client (`grant_key` for "allow for this session").
    Approval { ui_id: String, grant_key: String },
    /// Extensions' `tool_call` hook: may block or rewrite the call.
    CallHook(HookId),
    /// Extensions' `tool_result` hook on the finished output.
    ResultHook(HookId, ToolOutput),
    /// The final result's images are being scaled (`ToolEventKind::ImagesReady` brings it).
    Images,
}

impl ToolBatch {
    /// The first unfinished call with this id (ids are unique in practice; this tolerates repeats).
    pub fn position_of(&self, call_id: &str) -> Option<usize> {
        self.calls
            .iter()
            .position(|slot| slot.call.id == call_id && slot.result.is_none())
    }
}

/// One agent run: from `agent_start` to `agent_end`.
#[derive(Default)]
pub struct Run {
    /// Everything the run produced, serialized once, for `agent_end.messages`.
    pub messages: Vec<SharedJson>,
    /// Index in the agent's messages of the run's latest reply.
    pub last_reply: Option<usize>,
    pub aborted: bool,
}

/// The run in flight and what carries from one run to the next.
#[derive(Default)]
pub struct Runs {
    /// Between `agent_start` and `agent_end`.
    pub current: Option<Run>,
    /// The last provider request's id (conversation and summary requests alike).
    pub next_request: u64,
    /// Automatic retries made since the last successful reply (0 = not retrying).
    pub retry_attempt: u64,
    /// The server's `retry-after` for the latest failed request.
    pub retry_after: Option<Duration>,
    /// An overflow compaction already ran for the current user message (pi retries once).
    pub overflow_recovery_attempted: bool,
    /// An abort ended the work since the last `agent_settled` (its `aborted`).
    pub aborted_since_settled: bool,
    /// (v2) The reply an automatic retry replaces, for a virtual model's router (`failed`).
    pub failed_response: Option<crate::messages::AssistantMessage>,
    /// Claude refused this session's strict tools for its limits: its later requests send the
    /// tools that prefer strict sampling non-strict at once (pi 1.6.0, until the session is
    /// replaced).
    pub strict_tools_refused: bool,
}

// ---- compaction ------------------------------------------------------------------------------

/// What started the compaction, which decides what happens when it ends.
pub enum CompactionOrigin {
    /// The `compact` command: answered at the end.
    Command { id: Option<Value> },
    /// An extension's `compact` (v2): answered when it started; the end is the
    /// `compaction_end` event (a failure is also reported as an `extension_error`).
    Extension,
    /// After a run ended: then retry the run (overflow), continue with queued messages, or settle.
    AfterRun,
    /// Before a prompt (threshold): then the prompt goes ahead.
    BeforePrompt {
        from: PromptFrom,
        message: String,
        images: Vec<ImageContent>,
    },
    /// Before the next turn of a run whose context passes the selection's threshold (pi 1.6.0's
    /// check before the next response): then that turn (`had_tool_calls`: the last one called
    /// tools) goes ahead, on the compacted context.
    BeforeNextTurn { had_tool_calls: bool },
    /// (v2) Before a routed request whose model's window the context passes (threshold): then
    /// the request (its `context` hook first) goes to that model as routed.
    BeforeRoutedRequest {
        model: Box<crate::config::Model>,
        thinking: crate::config::ThinkingLevel,
    },
}

pub struct Compaction {
    pub(super) reason: CompactionReason,
    pub(super) will_retry: bool,
    pub(super) origin: CompactionOrigin,
    pub(super) preparation: Preparation,
    pub(super) slots: Vec<Slot>,
    pub(super) sender: Sender<ProviderEvent>,
    pub events: Receiver<ProviderEvent>,
    /// A summary request waiting to be retried: (slot, when).
    pub retry_at: Option<(usize, Instant)>,
    pub(super) usages: Vec<Usage>,
    /// (v2) Waiting for the extensions' `session_before_compact` hook before summarizing.
    pub(super) before_hook: Option<super::compaction_hook::BeforeCompact>,
    /// (v2) Under a virtual selection: the route the summaries wait for (with the custom
    /// instructions they are then written with)…
    pub(super) route: Option<(super::virtual_models::DirectRoute, Option<String>)>,
    /// …and the physical model and level it answered, which every attempt then uses.
    pub(super) dispatch: Option<(crate::config::Model, crate::config::ThinkingLevel)>,
}

pub struct Slot {
    pub(super) request: SummaryRequest,
    /// The running request, or None when finished or waiting to retry.
    pub(super) running: Option<(StreamHandle, Draft)>,
    pub(super) text: Option<String>,
    pub(super) attempts: u64,
}
