//! The provider vocabulary: what the agent hands a provider thread (`StreamRequest`), what a wire
//! API module builds from it (`HttpRequest`), and what comes back (`ProviderEvent`: provider-neutral
//! `StreamEvent`s, `ProviderError`). The wire API modules and the thread (`mod.rs`) import it from
//! here; nothing in it knows a wire format.

use std::time::Duration;

use serde_json::Value;

use super::retry::ProviderRetry;
use crate::config::{Model, ThinkingLevel};
use crate::messages::{AgentMessage, StopReason, ToolSpec, Usage};

/// A tool's grammar constrained sampling as declared: its grammar variants and its parameters
/// (the one required string property carries the raw input).
#[derive(Clone, Debug, PartialEq)]
pub struct GrammarTool {
    pub name: String,
    /// `variants.openai_lark`.
    pub lark: Option<String>,
    /// `variants.openai_regex`.
    pub regex: Option<String>,
    pub parameters: Value,
}

/// A request counter value; events of an abandoned request are recognised by it and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId(pub u64);

/// Everything a provider thread needs; moved into the thread.
#[derive(Clone, Debug)]
pub struct StreamRequest {
    pub model: Model,
    pub api_key: String,
    /// Extra headers (models.json), already resolved.
    pub headers: Vec<(String, String)>,
    pub system_prompt: String,
    /// Already converted for the LLM (FACTS §7): only user, assistant and toolResult messages,
    /// and the later system messages for a model that takes them in place
    /// (`request::sends_mid_convo_system_messages`). With `history`, only the messages after it.
    pub messages: Vec<AgentMessage>,
    /// The conversation's start, already encoded for this wire API (`request_cache`).
    pub history: Option<super::history::EncodedHistory>,
    pub tools: Vec<ToolSpec>,
    /// The tools the transcript's first system message declares, when the later ones go in place
    /// (`request::sends_mid_convo_system_messages`; with a forced prompt, the current tools):
    /// where later tool changes go in the conversation, the first set is declared by itself
    /// (Anthropic's native tool changes, `transcript_tools`; pi 1.6.0).
    pub initial_tools: Vec<ToolSpec>,
    /// The tools that prefer strict JSON-schema sampling (pi 1.6.0's `constrainedSampling`
    /// `strict: "prefer"`: pi's own read/bash/edit/write), sent strict where the API allows.
    pub strict_preferred: Vec<String>,
    /// The tools that require it (`strict: "require"`, an extension's declaration): sent strict,
    /// or the request fails with the reason (`request::required_strict_failure`).
    pub strict_required: Vec<String>,
    /// Claude refused this session's strict tools for its limits (pi 1.6.0's
    /// `hasExceededStrictToolLimits`): on Anthropic and Bedrock the tools that prefer strict
    /// sampling go non-strict.
    pub strict_tools_refused: bool,
    /// The tools the transcript declares with grammar constrained sampling (pi 1.6.0's
    /// `constrainedSampling` `type: "grammar"`: `codemode`), sent as OpenAI custom tools where the
    /// model's compat has `supportsOpenAIGrammarTools` (`request::grammar_tools`).
    pub grammar_tools: Vec<GrammarTool>,
    pub thinking: ThinkingLevel,
    /// settings `thinkingBudgets` for minimal/low/medium/high, where set.
    pub thinking_budgets: [Option<u64>; 4],
    /// The caller's output token cap; `None` → the model's `maxTokens`. Either is fitted into the
    /// context window (`request::context_clamped_max_tokens`).
    pub max_tokens: Option<u64>,
    /// The system prompt and tools count in the input's estimate for that fitting: pi 1.6.0's
    /// agent context holds them as its first message, a summary call's context does not.
    pub prompt_in_estimate: bool,
    pub session_id: String,
    /// A read that delivers nothing for this long fails the request.
    pub idle_timeout: Duration,
    /// Silent retries of a request that fails before its stream opens (`retry.provider.*`).
    pub provider_retry: ProviderRetry,
    /// Observers of the HTTP exchange (extensions' provider hooks), when any are registered.
    pub hooks: Option<std::sync::Arc<dyn RequestHooks>>,
}

/// A request was cancelled (its handle dropped) while the provider thread waited on a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cancelled;

/// What the provider thread asks before and tells during an HTTP exchange (extensions' provider
/// hooks, which the extensions module implements). The waiting calls end by their own bound or when
/// `cancelled` disconnects (the request's handle was dropped: an abort reaches the thread at once).
pub trait RequestHooks: Send + Sync + std::fmt::Debug {
    /// How long one waiting call may take at most (the agent's idle timer is paused for it).
    fn wait_bound(&self) -> Duration;
    /// Whether `headers` would ask anyone (otherwise the thread does not call it).
    fn wants_headers(&self) -> bool;
    /// The request's extra headers (not the ones carrying the API key) → a patch for the final
    /// request's headers: a name set to a value, or removed (None). Once per request.
    fn headers(
        &self,
        headers: &[(String, String)],
        cancelled: &crossbeam_channel::Receiver<()>,
    ) -> Result<Vec<(String, Option<String>)>, Cancelled>;
    fn wants_payload(&self) -> bool;
    /// The request body as built → a replacement, or None to keep it. Once per request.
    fn payload(
        &self,
        payload: Value,
        cancelled: &crossbeam_channel::Receiver<()>,
    ) -> Result<Option<Value>, Cancelled>;
    /// A success status arrived, before the body is read (notification: never waits).
    fn response(&self, model: &Model, status: u16, headers: Value);
    /// Whether `stream_event` is wanted (the decoder then keeps each parsed event's value).
    fn wants_stream_events(&self) -> bool;
    /// One parsed provider event, before it is normalized (notification: never waits).
    fn stream_event(&self, model: &Model, data: Value);
}

impl StreamRequest {
    /// What the request reads from its whole conversation (its messages and the kept start).
    pub fn history_facts(&self) -> super::history::HistoryFacts {
        super::history::HistoryFacts::of_conversation(&self.messages, self.history.as_ref())
    }
}

/// What a block starts as.
#[derive(Clone, Debug, PartialEq)]
pub enum BlockKind {
    Text,
    Thinking { redacted: bool },
    ToolCall { id: String, name: String },
}

/// Provider-neutral stream events. `index` is the content index in the assistant message, assigned
/// by the API module in order of appearance (blocks are started in index order).
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// Response headers arrived with a success status: the assistant message starts.
    Opened,
    /// Response id / model as the provider reports them.
    Meta {
        response_id: Option<String>,
        response_model: Option<String>,
    },
    /// A note for the reply's `diagnostics` (pi 1.6.0: what the provider changed or fell back
    /// to, e.g. the input transformations it reports).
    Diagnostic(serde_json::Value),
    BlockStart {
        index: usize,
        kind: BlockKind,
    },
    /// Text, thinking or tool-call argument JSON, by the block's kind.
    Delta {
        index: usize,
        delta: String,
    },
    /// The block is complete. `signature` is the text/thinking signature or the thought signature
    /// of a tool call; for redacted thinking it carries the opaque data.
    BlockEnd {
        index: usize,
        signature: Option<String>,
    },
    /// A thinking block's `redacted` flag as the provider states it at the block's end
    /// (pi-messages' `thinking_end`); comes right before that block's `BlockEnd`.
    ThinkingRedacted {
        index: usize,
        redacted: bool,
    },
    /// Token counts so far (replaces earlier ones; cost is filled by the agent from the model,
    /// except a total the provider billed, marked `totalFromProvider: true`).
    Usage(Usage),
    /// Token counts with the cost the provider computed itself (pi-messages): kept as they are.
    PricedUsage(Usage),
    /// The priced usage's cost is multiplied by this (the service tier OpenAI served the reply
    /// at, pi 1.6.0's `applyServiceTierPricing`); comes after the usage.
    CostMultiplier(f64),
    /// The stop reason in the provider's own words (pi 1.6.0's `rawStopReason`).
    RawStopReason(String),
    /// Whether the model ended its turn (ChatGPT Codex's `end_turn`, pi 1.6.0's `endTurn`).
    EndTurn(bool),
    /// The stream finished. An `Error` stop reason carries the provider's message.
    Done {
        stop_reason: StopReason,
        error_message: Option<String>,
    },
    /// The request failed (HTTP status, network, malformed stream). Ends the stream.
    Failed(ProviderError),
    /// Claude refused the request's strict tools for its limits, before any output (pi 1.6.0's
    /// strict-tool fallback): the agent sends it again with `strict_tools_refused` and records
    /// `diagnostic` on the reply. `error` is the failure it would otherwise end with. Ends the
    /// stream.
    StrictToolsRefused {
        diagnostic: serde_json::Value,
        error: ProviderError,
    },
    /// A provider-level retry (`retry.provider.maxRetries`) waits this long before sending the
    /// request again; nothing for the client, but the idle timeout starts after the wait.
    Retrying {
        delay: Duration,
    },
    /// The thread waits (at most this long) for extensions' provider hooks before the request
    /// goes out; like `Retrying`, the idle timeout starts after the wait.
    Waiting {
        up_to: Duration,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProviderEvent {
    pub req: RequestId,
    pub event: StreamEvent,
}

/// A failed request, with the text pi would put in `errorMessage`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderError {
    pub message: String,
    /// From `retry-after` / `retry-after-ms`, when the server sent one.
    pub retry_after: Option<Duration>,
}

/// The text pi stores as the `thinking` of a redacted thinking block (the opaque payload travels in
/// `BlockEnd::signature`).
pub const REDACTED_THINKING_TEXT: &str = "[Reasoning redacted]";

/// An HTTP request as a wire API module builds it.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpRequest {
    pub url: String,
    /// Header names as written; later entries never repeat an earlier name (case-insensitively).
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

/// How long prompt caches should live (`PI_CACHE_RETENTION=long` → `Long`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheRetention {
    Short,
    Long,
}

pub(crate) fn cache_retention_from_env() -> CacheRetention {
    match std::env::var("PI_CACHE_RETENTION") {
        Ok(v) if v == "long" => CacheRetention::Long,
        _ => CacheRetention::Short,
    }
}
