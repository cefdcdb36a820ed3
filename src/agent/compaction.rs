//! Compaction (FACTS §10): replacing the older part of a long conversation with a model-written
//! summary. This module is the pure half: it decides whether to compact, picks what to summarize
//! and what to keep, writes the summarization requests, and assembles the result, the session
//! entry's fields, the wire JSON and the events. The agent loop drives it and does the I/O (the
//! 1–2 provider calls, the session append, the context rebuild).
//!
//! Sequence the loop runs (see also `CompactionReason` and `Trigger`):
//! 1. `start_event(reason)`.
//! 2. `prepare(&session.branch(), settings)` → `Preparation` (or `PrepareError`).
//! 3. `preparation.summary_requests(custom_instructions)` → 1 or 2 `SummaryRequest`s, each sent
//!    as a tool-less `StreamRequest`; `SummaryRequest::reply_text` reads each reply.
//! 4. `preparation.finish(&texts)` → `CompactionResult`; append it to the session
//!    (`append_compaction` with the summary, first kept entry, tokens before, details, the
//!    summed usage, `fromHook: false` and the replayed system message),
//!    rebuild the messages from the session.
//! 5. `end_event(reason, Some(result.to_json(usage)), false, will_retry, None)`.
//!
//! Nothing here blocks, spawns or touches files.

mod estimate;
mod prompts;
mod serialize;
mod stats;

use std::fmt;

use serde_json::{Map, Value, json};

#[allow(unused_imports)]
pub use estimate::{
    ContextEstimate, estimate_context_tokens, estimate_tokens, reliable_usage, should_compact,
    usage_context_tokens,
};
#[allow(unused_imports)]
pub use prompts::{
    BRANCH_PREAMBLE, BRANCH_PROMPT, INITIAL_PROMPT, SYSTEM_PROMPT, TURN_PREFIX_PROMPT,
    UPDATE_PROMPT,
};
#[allow(unused_imports)]
pub use serialize::{
    FileOps, TOOL_RESULT_MAX_CHARS, format_file_lists, serialize_conversation, truncate_for_summary,
};
#[allow(unused_imports)]
pub use stats::{
    Totals, awaiting_usage_after_compaction, context_usage, session_stats, session_totals,
};

use super::convert::to_llm;
use super::retry::is_context_overflow;
use crate::config::Model;
use crate::messages::{
    AgentMessage, AssistantMessage, BranchSummaryMessage, CompactionSummaryMessage, StopReason,
    Usage, UserMessage, joined_text,
};
use crate::provider::StreamRequest;
use crate::rpc::events::Event;
use crate::session::{EntryKind, SessionEntry, context_message};

/// Placed between the history summary and the turn-prefix summary of a split turn.
pub const SPLIT_TURN_SEPARATOR: &str = "\n\n---\n\n**Turn Context (split turn):**\n\n";
/// The history summary of a split turn when everything before the turn was already summarized.
pub const NO_PRIOR_HISTORY: &str = "No prior history.";
/// The error of a compaction that was aborted (manual response; never in an event).
pub const CANCELLED: &str = "Compaction cancelled";
/// `compaction_end.errorMessage` when an overflow comes back right after an overflow compaction.
pub const OVERFLOW_GAVE_UP: &str = "Context overflow recovery failed after one compact-and-retry attempt. Try reducing context or switching to a larger-context model.";

/// settings.json `compaction.reserveTokens` / `compaction.keepRecentTokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionSettings {
    pub reserve_tokens: u64,
    pub keep_recent_tokens: u64,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            reserve_tokens: 16384,
            keep_recent_tokens: 20000,
        }
    }
}

/// Why a compaction runs: the `reason` of both events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactionReason {
    /// The `compact` command.
    Manual,
    /// The context passed `contextWindow − reserveTokens`.
    Threshold,
    /// The provider rejected the request as too long; a retry follows a success.
    Overflow,
}

impl CompactionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionReason::Manual => "manual",
            CompactionReason::Threshold => "threshold",
            CompactionReason::Overflow => "overflow",
        }
    }

    /// `compaction_end.errorMessage` for a failure whose own message is `raw` (the manual
    /// response's error is `raw` itself).
    pub fn failure_message(self, raw: &str) -> String {
        match self {
            CompactionReason::Manual => format!("Compaction failed: {raw}"),
            CompactionReason::Threshold => format!("Auto-compaction failed: {raw}"),
            CompactionReason::Overflow => format!("Context overflow recovery failed: {raw}"),
        }
    }
}

/// The `compaction_start` event.
pub fn start_event(reason: CompactionReason) -> Event {
    Event::CompactionStart {
        reason: reason.as_str(),
    }
}

/// The `compaction_end` event (`result` omitted when there is none).
pub fn end_event(
    reason: CompactionReason,
    result: Option<Value>,
    aborted: bool,
    will_retry: bool,
    error_message: Option<&str>,
) -> Event {
    Event::CompactionEnd {
        reason: reason.as_str(),
        result,
        aborted,
        will_retry,
        error_message: error_message.map(str::to_string),
    }
}

// ---- when ------------------------------------------------------------------------------------

/// What an assistant reply calls for (pi's `_checkCompaction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Nothing,
    /// Remove the failed reply from the messages (it stays in the session), set the
    /// overflow-attempted flag, compact with reason overflow; on success `willRetry:true` and
    /// the run continues 100 ms later without a new user message.
    Overflow,
    /// A second overflow before any non-error reply: emit only
    /// `end_event(Overflow, None, false, false, Some(OVERFLOW_GAVE_UP))`, no start event.
    OverflowGaveUp,
    /// Compact with reason threshold (`willRetry:false`); continue 100 ms later only if
    /// steering/follow-up messages are queued.
    Threshold,
}

/// The inputs of the decision. Run it after `agent_end` when no retry started (with
/// `include_aborted: false`), and before each new prompt on the last assistant message
/// (`include_aborted: true`). The loop clears `overflow_recovery_attempted` when a user message
/// starts and when a reply ends without error.
pub struct TriggerCheck<'a> {
    /// settings `compaction.enabled` (auto-compaction).
    pub enabled: bool,
    pub assistant: &'a AssistantMessage,
    pub include_aborted: bool,
    pub model: &'a Model,
    /// The agent's current messages.
    pub messages: &'a [AgentMessage],
    /// `session.branch()`.
    pub branch: &'a [&'a SessionEntry],
    pub reserve_tokens: u64,
    pub overflow_recovery_attempted: bool,
}

impl TriggerCheck<'_> {
    pub fn decide(&self) -> Trigger {
        if !self.enabled {
            return Trigger::Nothing;
        }
        let reply = self.assistant;
        if !self.include_aborted && reply.stop_reason == StopReason::Aborted {
            return Trigger::Nothing;
        }
        let has_model = !self.model.is_placeholder();
        let context_window = if has_model {
            self.model.context_window
        } else {
            0
        };
        let same_model =
            has_model && reply.provider == self.model.provider && reply.model == self.model.id;
        // A reply from before the latest compaction describes the old context.
        let compaction_ms =
            latest_compaction(self.branch).map(|e| crate::time::ms_from_iso(&e.timestamp));
        if let Some(compaction_ms) = compaction_ms
                        // Strictly older: the reply that retries an overflow can share the compaction's
            // millisecond.
            && compaction_ms.is_some_and(|ms| reply.timestamp < ms)
        {
            return Trigger::Nothing;
        }
        if same_model && is_context_overflow(reply, context_window) {
            return if self.overflow_recovery_attempted {
                Trigger::OverflowGaveUp
            } else {
                Trigger::Overflow
            };
        }
        let context_tokens = if reply.stop_reason == StopReason::Error {
            // A failed reply reports no usage: estimate from the last completed one, provided
            // it is newer than the latest compaction.
            let estimate = estimate_context_tokens(self.messages);
            let Some(index) = estimate.last_usage_index else {
                return Trigger::Nothing;
            };
            if let (Some(Some(ms)), AgentMessage::Assistant(source)) =
                (compaction_ms, &self.messages[index])
                && source.timestamp <= ms
            {
                return Trigger::Nothing;
            }
            estimate.tokens
        } else {
            usage_context_tokens(&reply.usage)
        };
        if should_compact(context_tokens, context_window, self.reserve_tokens) {
            Trigger::Threshold
        } else {
            Trigger::Nothing
        }
    }
}

fn latest_compaction<'a>(branch: &[&'a SessionEntry]) -> Option<&'a SessionEntry> {
    branch
        .iter()
        .rev()
        .find(|e| matches!(e.kind, EntryKind::Compaction { .. }))
        .copied()
}

// ---- what ------------------------------------------------------------------------------------

/// Why there is nothing to compact; the Display text is the `compact` error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrepareError {
    /// The branch ends with a compaction.
    AlreadyCompacted,
    /// The branch is empty.
    NothingToCompact,
}

impl fmt::Display for PrepareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PrepareError::AlreadyCompacted => "Already compacted",
            PrepareError::NothingToCompact => "Nothing to compact (session too small)",
        })
    }
}

impl std::error::Error for PrepareError {}

/// What a compaction will summarize and keep (pi's `prepareCompaction` result).
#[derive(Clone, Debug, PartialEq)]
pub struct Preparation {
    /// The entry the rebuilt context starts from after the summary.
    pub first_kept_entry_id: String,
    /// Complete turns before the cut (from the previous compaction's kept boundary on).
    pub messages_to_summarize: Vec<AgentMessage>,
    /// The start of a turn cut in the middle (empty unless `is_split_turn`).
    pub turn_prefix_messages: Vec<AgentMessage>,
    pub is_split_turn: bool,
    /// Estimated size of the context before compaction.
    pub tokens_before: u64,
    /// The latest compaction's summary on the branch, if any.
    pub previous_summary: Option<String>,
    pub file_ops: FileOps,
    pub settings: CompactionSettings,
    /// Context messages from the first kept entry to the end of the branch: what follows the
    /// summary once the context is rebuilt.
    pub kept_messages: Vec<AgentMessage>,
}

/// Picks the cut for the branch `branch` (root first, as `SessionLog::branch` returns it).
pub fn prepare(
    branch: &[&SessionEntry],
    settings: CompactionSettings,
) -> Result<Preparation, PrepareError> {
    let Some(last) = branch.last() else {
        return Err(PrepareError::NothingToCompact);
    };
    if last.type_name() == "compaction" {
        return Err(PrepareError::AlreadyCompacted);
    }
    let previous = branch
        .iter()
        .rposition(|e| matches!(e.kind, EntryKind::Compaction { .. }));
    let mut previous_summary = None;
    let mut file_ops = FileOps::default();
    let mut boundary_start = 0;
    if let Some(at) = previous
        && let EntryKind::Compaction {
            summary,
            first_kept_entry_id,
            details,
            from_hook,
            ..
        } = &branch[at].kind
    {
        previous_summary = Some(summary.clone());
        // File lists carry over only from compactions pi itself wrote.
        if from_hook != &Some(true)
            && let Some(details) = details
        {
            file_ops.add_from_details(details);
        }
        boundary_start = branch
            .iter()
            .position(|e| e.id == *first_kept_entry_id)
            .unwrap_or(at + 1);
    }
    let tokens_before = estimate_context_tokens(&context_messages(branch)).tokens;
    let cut = find_cut_point(
        branch,
        boundary_start,
        branch.len(),
        settings.keep_recent_tokens,
    );
    let Some(first_kept) = branch
        .get(cut.first_kept_index)
        .filter(|e| !e.id.is_empty())
    else {
        return Err(PrepareError::NothingToCompact);
    };
    let history_end = match cut.turn_start_index {
        Some(turn_start) if cut.is_split_turn => turn_start,
        _ => cut.first_kept_index,
    };
    let summarizable = |range: std::ops::Range<usize>| -> Vec<AgentMessage> {
        branch[range]
            .iter()
            .filter_map(|e| summarizable_message(e))
            .collect()
    };
    let messages_to_summarize = summarizable(boundary_start..history_end.max(boundary_start));
    let turn_prefix_messages = if cut.is_split_turn {
        summarizable(history_end..cut.first_kept_index)
    } else {
        Vec::new()
    };
    // Nothing older than the kept part: a summary would say nothing (pi would still ask for one).
    if messages_to_summarize.is_empty() && turn_prefix_messages.is_empty() {
        return Err(PrepareError::NothingToCompact);
    }
    messages_to_summarize
        .iter()
        .chain(&turn_prefix_messages)
        .for_each(|m| file_ops.add_from_message(m));
    let kept_messages = branch[cut.first_kept_index..]
        .iter()
        .filter_map(|e| context_message(e))
        .filter(|m| !matches!(m, AgentMessage::System(_)))
        .collect();
    Ok(Preparation {
        first_kept_entry_id: first_kept.id.clone(),
        messages_to_summarize,
        turn_prefix_messages,
        is_split_turn: cut.is_split_turn,
        tokens_before,
        previous_summary,
        file_ops,
        settings,
        kept_messages,
    })
}

/// Where the kept part starts (pi's `findCutPoint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutPoint {
    pub first_kept_index: usize,
    /// The entry that starts the turn the cut falls in, when the cut is not at a user message.
    pub turn_start_index: Option<usize>,
    pub is_split_turn: bool,
}

/// Walks back from the newest entry adding message estimates until `keep_recent_tokens` is
/// reached, then cuts at the first valid cut point at or after that entry (the oldest cut point
/// when the budget is never reached), then moves the cut back over non-message entries so
/// settings changes stay with the messages they precede. Only `start..end` is considered.
pub fn find_cut_point(
    entries: &[&SessionEntry],
    start: usize,
    end: usize,
    keep_recent_tokens: u64,
) -> CutPoint {
    let cut_points: Vec<usize> = (start..end).filter(|&i| is_cut_point(entries[i])).collect();
    let Some(&oldest) = cut_points.first() else {
        return CutPoint {
            first_kept_index: start,
            turn_start_index: None,
            is_split_turn: false,
        };
    };
    let mut cut = oldest;
    let mut accumulated = 0;
    for i in (start..end).rev() {
        if entries[i].type_name() != "message" {
            continue;
        }
        accumulated += entries[i].message().map_or(0, |m| estimate_tokens(&m));
        if accumulated >= keep_recent_tokens {
            if let Some(&at_or_after) = cut_points.iter().find(|&&c| c >= i) {
                cut = at_or_after;
            }
            break;
        }
    }
    while cut > start {
        let previous = entries[cut - 1].type_name();
        if previous == "compaction" || previous == "message" {
            break;
        }
        cut -= 1;
    }
    let at_user = matches!(
        entries[cut].message().as_deref(),
        Some(AgentMessage::User(_))
    );
    let turn_start_index = if at_user {
        None
    } else {
        (start..=cut).rev().find(|&i| starts_turn(entries[i]))
    };
    CutPoint {
        first_kept_index: cut,
        turn_start_index,
        is_split_turn: !at_user && turn_start_index.is_some(),
    }
}

/// Everything but tool results (which must stay right after their call), system messages
/// (prompt state, carried by the compaction entry) and non-message entries; branch summaries and
/// custom messages count as messages.
fn is_cut_point(entry: &SessionEntry) -> bool {
    match &entry.kind {
        EntryKind::Message(message) => message
            .get()
            .is_some_and(|m| !matches!(*m, AgentMessage::ToolResult(_) | AgentMessage::System(_))),
        EntryKind::BranchSummary { .. } | EntryKind::CustomMessage { .. } => true,
        _ => false,
    }
}

/// User input opens a turn: a user message, a `!` bash run, a branch summary, a custom message.
fn starts_turn(entry: &SessionEntry) -> bool {
    match &entry.kind {
        EntryKind::Message(message) => matches!(
            message.get().as_deref(),
            Some(AgentMessage::User(_) | AgentMessage::BashExecution(_))
        ),
        EntryKind::BranchSummary { .. } | EntryKind::CustomMessage { .. } => true,
        _ => false,
    }
}

/// What the summarizer is shown of an entry: its message, custom message or branch summary;
/// compactions are left out (their summary travels as the previous summary), and so are system
/// messages (prompt state, which the compaction entry carries; pi 1.6.0).
fn summarizable_message(entry: &SessionEntry) -> Option<AgentMessage> {
    match &entry.kind {
        EntryKind::Message(message) if message.is_system() => None,
        EntryKind::BranchSummary {
            from_id, summary, ..
        } => Some(AgentMessage::BranchSummary(BranchSummaryMessage {
            summary: summary.clone(),
            from_id: from_id.clone(),
            timestamp: crate::time::ms_from_iso(&entry.timestamp).unwrap_or(0),
        })),
        _ => context_message(entry),
    }
}

/// The context a branch yields (the session's rebuild, for `tokensBefore`): with a compaction on
/// the branch, its summary, the entries it kept, then what came after it.
pub fn context_messages(branch: &[&SessionEntry]) -> Vec<AgentMessage> {
    let Some(at) = branch
        .iter()
        .rposition(|e| matches!(e.kind, EntryKind::Compaction { .. }))
    else {
        return branch.iter().filter_map(|e| context_message(e)).collect();
    };
    let mut messages = Vec::new();
    if let EntryKind::Compaction {
        summary,
        first_kept_entry_id,
        tokens_before,
        ..
    } = &branch[at].kind
    {
        messages.push(AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: summary.clone(),
            tokens_before: *tokens_before,
            timestamp: crate::time::ms_from_iso(&branch[at].timestamp).unwrap_or(0),
        }));
        if let Some(kept_from) = branch[..at]
            .iter()
            .position(|e| e.id == *first_kept_entry_id)
        {
            messages.extend(
                branch[kept_from..at]
                    .iter()
                    .filter_map(|e| context_message(e)),
            );
        }
    }
    messages.extend(branch[at + 1..].iter().filter_map(|e| context_message(e)));
    messages
}

// ---- how -------------------------------------------------------------------------------------

/// Which summary a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SummaryKind {
    /// The conversation before the cut (or before the split turn).
    History,
    /// The beginning of a split turn.
    TurnPrefix,
}

/// One summarization call: a system prompt and a single user text, no tools.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryRequest {
    pub kind: SummaryKind,
    pub system_prompt: String,
    pub user_text: String,
}

impl SummaryRequest {
    /// The provider request: `base` is the request the agent would send now (model, key,
    /// headers, thinking level, timeouts); its prompt, messages, tools and output cap are
    /// replaced. The output cap is the provider's (the model's limit fitted to the window), the
    /// system prompt left out of the input's estimate as pi 1.6.0 leaves it out of a summary
    /// call's context. Thinking stays on only for reasoning models (pi passes the session's level
    /// then).
    /// pi makes this call without the session id (no affinity headers, no prompt cache key) and
    /// without the settings' thinking budgets, so both are cleared.
    pub fn into_stream_request(self, mut base: StreamRequest) -> StreamRequest {
        base.system_prompt = self.system_prompt;
        base.messages = vec![AgentMessage::User(UserMessage::new(
            &self.user_text,
            vec![],
        ))];
        base.tools = Vec::new();
        base.prompt_in_estimate = false;
        base.session_id = String::new();
        base.thinking_budgets = [None; 4];
        if !base.model.reasoning {
            base.thinking = crate::config::ThinkingLevel::Off;
        }
        base
    }

    /// The summary a reply carries (its text blocks joined by newlines), or the failure message
    /// for a reply that ended in error. An aborted reply is the caller's cancellation.
    pub fn reply_text(&self, reply: &AssistantMessage) -> Result<String, String> {
        if reply.stop_reason == StopReason::Error {
            let reason = reply
                .error_message
                .as_deref()
                .filter(|m| !m.is_empty())
                .unwrap_or("Unknown error");
            return Err(match self.kind {
                SummaryKind::History => format!("Summarization failed: {reason}"),
                SummaryKind::TurnPrefix => format!("Turn prefix summarization failed: {reason}"),
            });
        }
        Ok(joined_text(&reply.content, "\n"))
    }
}

impl Preparation {
    /// True when the split turn's beginning gets its own summary.
    fn has_turn_prefix(&self) -> bool {
        self.is_split_turn && !self.turn_prefix_messages.is_empty()
    }

    /// True when the history is summarized by a call (not replaced by `No prior history.`).
    fn has_history_request(&self) -> bool {
        !self.has_turn_prefix() || !self.messages_to_summarize.is_empty()
    }

    /// The calls to make, history first. Both may run at the same time; the first failure fails
    /// the compaction. `custom_instructions` (the `compact` command's) shape the history summary.
    pub fn summary_requests(&self, custom_instructions: Option<&str>) -> Vec<SummaryRequest> {
        let mut requests = Vec::new();
        if self.has_history_request() {
            let previous = self.previous_summary.as_deref().filter(|s| !s.is_empty());
            let mut text = conversation_block(&self.messages_to_summarize);
            if let Some(previous) = previous {
                text.push_str(&format!(
                    "<previous-summary>\n{previous}\n</previous-summary>\n\n"
                ));
            }
            text.push_str(if previous.is_some() {
                UPDATE_PROMPT
            } else {
                INITIAL_PROMPT
            });
            if let Some(focus) = custom_instructions.filter(|s| !s.is_empty()) {
                text.push_str(&format!("\n\nAdditional focus: {focus}"));
            }
            requests.push(SummaryRequest {
                kind: SummaryKind::History,
                system_prompt: SYSTEM_PROMPT.to_string(),
                user_text: text,
            });
        }
        if self.has_turn_prefix() {
            let mut text = conversation_block(&self.turn_prefix_messages);
            text.push_str(TURN_PREFIX_PROMPT);
            requests.push(SummaryRequest {
                kind: SummaryKind::TurnPrefix,
                system_prompt: SYSTEM_PROMPT.to_string(),
                user_text: text,
            });
        }
        requests
    }

    /// Assembles the result from the texts of `summary_requests`, in the same order.
    pub fn finish(&self, summaries: &[String]) -> CompactionResult {
        let mut texts = summaries.iter().map(String::as_str);
        let mut summary = if self.has_turn_prefix() {
            let history = if self.has_history_request() {
                texts.next().unwrap_or("")
            } else {
                NO_PRIOR_HISTORY
            };
            let prefix = texts.next().unwrap_or("");
            format!("{history}{SPLIT_TURN_SEPARATOR}{prefix}")
        } else {
            texts.next().unwrap_or("").to_string()
        };
        let (read_files, modified_files) = self.file_ops.lists();
        summary.push_str(&format_file_lists(&read_files, &modified_files));
        let summary_message = AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: summary.clone(),
            tokens_before: self.tokens_before,
            timestamp: 0,
        });
        let estimated_tokens_after = estimated_tokens_after(
            &std::iter::once(summary_message)
                .chain(self.kept_messages.iter().cloned())
                .collect::<Vec<_>>(),
        );
        CompactionResult {
            summary,
            first_kept_entry_id: self.first_kept_entry_id.clone(),
            tokens_before: self.tokens_before,
            estimated_tokens_after,
            details: json!({"readFiles": read_files, "modifiedFiles": modified_files}),
            extension_usage: None,
        }
    }
}

/// `<conversation>\n…\n</conversation>\n\n` around the serialized messages.
pub(super) fn conversation_block(messages: &[AgentMessage]) -> String {
    format!(
        "<conversation>\n{}\n</conversation>\n\n",
        serialize_conversation(&to_llm(messages))
    )
}

/// The seed's `estimatedTokensAfter`: the chars/4 estimate of every message of the rebuilt
/// context. Usage reports are deliberately ignored: the kept replies report the size of the old,
/// uncompacted context.
pub fn estimated_tokens_after(rebuilt: &[AgentMessage]) -> u64 {
    rebuilt.iter().map(estimate_tokens).sum()
}

/// A finished compaction: the session entry's fields and the wire result.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionResult {
    pub summary: String,
    pub first_kept_entry_id: String,
    pub tokens_before: u64,
    pub estimated_tokens_after: u64,
    /// `{readFiles, modifiedFiles}`; stored as the entry's `details`.
    pub details: Value,
    /// The `usage` an extension's compaction gives (pi 1.6.0 stores it in the entry as it is).
    pub extension_usage: Option<Value>,
}

impl CompactionResult {
    /// `{summary, firstKeptEntryId, tokensBefore, estimatedTokensAfter, usage?, details}`: the
    /// `compact` response data and `compaction_end.result`. `usage` is the sum of the
    /// summarization calls (`sum_usage`).
    pub fn to_json(&self, usage: Option<&Usage>) -> Value {
        let mut out = Map::new();
        out.insert("summary".into(), json!(self.summary));
        out.insert("firstKeptEntryId".into(), json!(self.first_kept_entry_id));
        out.insert("tokensBefore".into(), json!(self.tokens_before));
        out.insert(
            "estimatedTokensAfter".into(),
            json!(self.estimated_tokens_after),
        );
        if let Some(usage) = usage {
            out.insert("usage".into(), json!(usage));
        }
        out.insert("details".into(), self.details.clone());
        Value::Object(out)
    }
}

/// The combined usage of several calls (counters and costs added).
pub fn sum_usage(usages: &[Usage]) -> Usage {
    // One call's usage is reported as it came (pi 1.6.0); a sum keeps the optional splits when
    // any part has them, and is the provider's bill only when every part is.
    if let [one] = usages {
        return one.clone();
    }
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    let mut sum = Usage::default();
    for (n, u) in usages.iter().enumerate() {
        sum.cache_write_1h = add(sum.cache_write_1h, u.cache_write_1h);
        sum.reasoning = add(sum.reasoning, u.reasoning);
        let billed = u.cost.total_from_provider == Some(true);
        sum.cost.total_from_provider =
            Some(billed && (n == 0 || sum.cost.total_from_provider == Some(true)));
        sum.input += u.input;
        sum.output += u.output;
        sum.cache_read += u.cache_read;
        sum.cache_write += u.cache_write;
        sum.total_tokens += u.total_tokens;
        sum.cost.input += u.cost.input;
        sum.cost.output += u.cost.output;
        sum.cost.cache_read += u.cost.cache_read;
        sum.cost.cache_write += u.cost.cache_write;
        sum.cost.total += u.cost.total;
    }
    sum
}

#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests;
