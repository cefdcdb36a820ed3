//! (v2) Tree navigation from an extension (pi's `ctx.navigateTree`): the leaf moves to another
//! entry of the session, optionally leaving a `branch_summary` of the abandoned branch. The
//! `session_before_tree` hook comes first (it may cancel, give the summary, or change the
//! instructions and label); `session_tree` tells the extensions afterwards.
//!
//! With `summarize` and something to summarize, and no summary from a `session_before_tree`
//! answer, the current model writes it (pi 1.6.0's branch summarizer): one summary request on
//! the loop's select (`TreeSummary`), which `abort` drops; the navigation is answered when it
//! ends.

use std::time::Instant;

use crossbeam_channel::Receiver;
use serde_json::{Map, Value, json};

use super::Agent;
use super::compaction::{self, SummaryKind, SummaryRequest};
use super::draft::Draft;
use super::state::Phase;
use super::virtual_models::DirectRoute;
use crate::config::{Model, ThinkingLevel};
use crate::extensions::protocol::{HookKind, TreeTarget};
use crate::extensions::{ExtensionId, HookId};
use crate::messages::{AgentMessage, CompactionSummaryMessage, ContentBlock, StopReason};
use crate::provider::{self, ProviderEvent, RequestId, StreamHandle};
use crate::rpc::events::Event;
use crate::session::{EntryKind, SessionEntry};

/// The summary of an abandoned branch without messages (pi 1.6.0's text; no request is made).
const NO_CONTENT: &str = "No content to summarize";

/// Token room left for the reply when the branch is cut to fit (pi 1.6.0's default
/// `branchSummary.reserveTokens`; settings `branchSummary.reserveTokens` overrides it).
const DEFAULT_RESERVE_TOKENS: u64 = 16384;

/// The model's summary of the abandoned branch, under way.
pub struct TreeSummary {
    /// The request under way and its events (tuple order is drop order: the request goes
    /// before its channel); None while a retry waits.
    running: Option<(StreamHandle, Receiver<ProviderEvent>)>,
    draft: Draft,
    pub last_event: Instant,
    /// What is sent again when a transient failure is retried (the retry settings, as 1.6.0's
    /// `completeSummarization` does).
    request: provider::StreamRequest,
    /// The model that writes it (the routed one under a virtual selection).
    model: Model,
    attempts: u64,
    /// When the next attempt is due.
    pub retry_at: Option<Instant>,
    read_files: Vec<String>,
    modified_files: Vec<String>,
    /// The label the navigation ends with.
    label: Option<String>,
}

/// The branch_summary entry a navigation leaves: pi-rs's summary or a hook's.
struct BranchSummary {
    text: String,
    details: Option<Value>,
    /// The summary request's usage (a hook's answer may give one too, as 1.6.0 takes it).
    usage: Option<Value>,
    from_hook: bool,
}

impl TreeSummary {
    /// The events of the request under way (None while a retry waits).
    pub fn events(&self) -> Option<&Receiver<ProviderEvent>> {
        self.running.as_ref().map(|(_, events)| events)
    }
}

/// A navigation waiting for the `session_before_tree` hook.
pub struct PendingTree {
    pub hook: HookId,
    extension: ExtensionId,
    id: Option<String>,
    target: TreeTarget,
    old_leaf: Option<String>,
    /// The abandoned entries' ids, oldest first (a summary needs some).
    abandoned: Vec<String>,
    /// The model's summary, when it writes one.
    pub summary: Option<Box<TreeSummary>>,
    /// (v2) Under a virtual selection: the route the summary waits for, and how it is then
    /// written.
    pub route: Option<DirectRoute>,
    plan: Option<SummaryPlan>,
    /// (v2) The login of the provider that writes the summary, refreshed on a worker first.
    pub refresh: Option<Box<TreeLoginRefresh>>,
}

/// A branch summary waiting for its provider's login to be refreshed.
pub struct TreeLoginRefresh {
    pub refresh: crate::config::OAuthRefresh,
    /// The routed pair, under a virtual selection.
    dispatch: Option<(Model, ThinkingLevel)>,
    plan: SummaryPlan,
}

/// How the branch summary is asked for (the request's or the hook's instructions) and the label
/// the navigation ends with.
struct SummaryPlan {
    instructions: Option<String>,
    replace: Option<bool>,
    label: Option<String>,
}

/// pi 1.6.0's `prepareBranchEntries`: the messages of the abandoned entries, newest first until
/// `budget` tokens (0: no limit; a summary entry that overflows still goes in while under 90 %
/// of it), in order; and the files the branch read and modified (tool calls, and the lists of
/// earlier generated summaries).
fn branch_messages(
    entries: &[&SessionEntry],
    budget: u64,
) -> (Vec<AgentMessage>, compaction::FileOps) {
    let mut files = compaction::FileOps::default();
    for entry in entries {
        if let EntryKind::BranchSummary {
            details: Some(details),
            from_hook,
            ..
        } = &entry.kind
            && *from_hook != Some(true)
        {
            files.add_from_details(details);
        }
    }
    // Context edits hide or replace the messages they target, the latest per target (1.6.0).
    let edits = crate::session::ContextEdits::among(entries.iter().copied());
    let mut messages = Vec::new();
    let mut total = 0;
    for entry in entries.iter().rev() {
        let message = match &entry.kind {
            EntryKind::Compaction {
                summary,
                tokens_before,
                ..
            } => Some(AgentMessage::CompactionSummary(CompactionSummaryMessage {
                summary: summary.clone(),
                tokens_before: *tokens_before,
                timestamp: crate::time::ms_from_iso(&entry.timestamp).unwrap_or(0),
            })),
            EntryKind::Message(_) | EntryKind::CustomMessage { .. } => edits
                .project(entry)
                .filter(|m| !matches!(m, AgentMessage::ToolResult(_))),
            _ => crate::session::context_message(entry),
        };
        let Some(message) = message else {
            continue;
        };
        files.add_from_message(&message);
        let tokens = compaction::estimate_tokens(&message);
        if budget > 0 && total + tokens > budget {
            let summary = matches!(
                entry.kind,
                EntryKind::Compaction { .. } | EntryKind::BranchSummary { .. }
            );
            if summary && (total as f64) < budget as f64 * 0.9 {
                messages.push(message);
            }
            break;
        }
        total += tokens;
        messages.push(message);
    }
    messages.reverse();
    (messages, files)
}

/// pi's `collectEntriesForBranchSummary`: the entries from the old leaf back to the deepest
/// entry both paths share (exclusive), oldest first, and that shared entry's id.
fn entries_to_summarize(
    entries: &[Value],
    old_leaf: Option<&str>,
    target: &str,
) -> (Vec<Value>, Option<String>) {
    let Some(old_leaf) = old_leaf else {
        return (Vec::new(), None);
    };
    let path = |from: &str| -> Vec<&Value> {
        let by_id = |id: &str| entries.iter().find(|e| e["id"] == id);
        let mut path = Vec::new();
        let mut current = by_id(from);
        while let Some(entry) = current {
            if path.len() > entries.len() {
                break; // a cycle in a damaged file
            }
            path.push(entry);
            current = entry["parentId"].as_str().and_then(by_id);
        }
        path
    };
    let old_path = path(old_leaf);
    let common = path(target)
        .into_iter()
        .find(|e| old_path.iter().any(|o| o["id"] == e["id"]))
        .and_then(|e| e["id"].as_str().map(String::from));
    let mut abandoned: Vec<Value> = old_path
        .into_iter()
        .take_while(|e| e["id"].as_str() != common.as_deref())
        .cloned()
        .collect();
    abandoned.reverse();
    (abandoned, common)
}

impl Agent {
    pub(super) fn navigate_tree(
        &mut self,
        extension: ExtensionId,
        id: Option<String>,
        target: TreeTarget,
    ) {
        let answer = self.start_navigation(extension, id.clone(), target);
        if let Some(answer) = answer {
            self.answer_extension(extension, id, answer);
        }
    }

    /// Checks and starts a navigation; Some(answer) when it ends at once.
    fn start_navigation(
        &mut self,
        extension: ExtensionId,
        id: Option<String>,
        target: TreeTarget,
    ) -> Option<Result<Value, String>> {
        if matches!(self.phase, Phase::Compacting(_)) || self.extensions.tree.is_some() {
            return Some(Err("Wait for the current compaction or tree navigation to finish before navigating the session tree.".into()));
        }
        if self.is_busy() {
            return Some(Err(
                "Wait for the current response to finish before navigating the session tree."
                    .into(),
            ));
        }
        let old_leaf = self.session.leaf_id().map(String::from);
        if old_leaf.as_deref() == Some(target.target_id.as_str()) {
            return Some(Ok(json!({ "cancelled": false })));
        }
        if target.summarize && self.model.is_placeholder() {
            return Some(Err("No model available for summarization".into()));
        }
        if self.session.entry(&target.target_id).is_none() {
            return Some(Err(format!("Entry {} not found", target.target_id)));
        }
        let entries: Vec<Value> = self
            .session
            .entries()
            .iter()
            .map(|e| e.to_value())
            .collect();
        let (abandoned, common) =
            entries_to_summarize(&entries, old_leaf.as_deref(), &target.target_id);
        let preparation = json!({
            "targetId": target.target_id,
            "oldLeafId": old_leaf,
            "commonAncestorId": common,
            "entriesToSummarize": abandoned,
            "userWantsSummary": target.summarize,
            "customInstructions": target.custom_instructions,
            "replaceInstructions": target.replace_instructions,
            "label": target.label,
        });
        let pending = PendingTree {
            hook: HookId(0),
            extension,
            id,
            target,
            old_leaf,
            abandoned: abandoned
                .iter()
                .filter_map(|e| e["id"].as_str().map(String::from))
                .collect(),
            summary: None,
            route: None,
            plan: None,
            refresh: None,
        };
        let deadline = self.extensions.hook_deadline;
        let hook = self.extensions.host.as_ref().and_then(|host| {
            host.start_hook(
                HookKind::SessionBeforeTree,
                json!({ "preparation": preparation }),
                deadline,
            )
        });
        match hook {
            Some(hook) => {
                self.extensions.tree = Some(PendingTree { hook, ..pending });
                None
            }
            None => {
                let (extension, id) = (pending.extension, pending.id.clone());
                if let Some(answer) = self.finish_navigation(pending, false, Map::new()) {
                    self.answer_extension(extension, id, answer);
                }
                None
            }
        }
    }

    /// The `session_before_tree` hook answered. False when no navigation waited for it.
    pub(super) fn on_tree_hook(
        &mut self,
        hook: HookId,
        cancel: bool,
        answer: Map<String, Value>,
    ) -> bool {
        if self.extensions.tree.as_ref().map(|t| t.hook) != Some(hook) {
            return false;
        }
        let Some(pending) = self.extensions.tree.take() else {
            return false;
        };
        let (extension, id) = (pending.extension, pending.id.clone());
        if let Some(result) = self.finish_navigation(pending, cancel, answer) {
            self.answer_extension(extension, id, result);
        }
        true
    }

    /// Ends the navigation (Some: its answer), or starts the model's summary of the branch
    /// (None: answered when the summary ends).
    fn finish_navigation(
        &mut self,
        pending: PendingTree,
        cancel: bool,
        answer: Map<String, Value>,
    ) -> Option<Result<Value, String>> {
        if cancel {
            return Some(Ok(json!({ "cancelled": true })));
        }
        if self.is_busy() {
            return Some(Err(
                "Wait for the current response to finish before navigating the session tree."
                    .into(),
            ));
        }
        let target = &pending.target;
        // The hook's instructions override the request's (pi 1.6.0).
        let text_field = |key: &str, fallback: &Option<String>| match answer.get(key) {
            Some(value) => value.as_str().map(String::from),
            None => fallback.clone(),
        };
        let label = text_field("label", &target.label);
        let summary = answer
            .get("summary")
            .filter(|_| target.summarize)
            .map(|s| BranchSummary {
                text: s["summary"].as_str().unwrap_or_default().to_string(),
                details: s.get("details").filter(|d| !d.is_null()).cloned(),
                usage: s.get("usage").filter(|u| !u.is_null()).cloned(),
                from_hook: true,
            });
        if target.summarize && !pending.abandoned.is_empty() && summary.is_none() {
            let instructions = text_field("customInstructions", &target.custom_instructions);
            let replace = match answer.get("replaceInstructions") {
                Some(value) => value.as_bool(),
                None => target.replace_instructions,
            };
            let plan = SummaryPlan {
                instructions,
                replace,
                label,
            };
            // (v2) A virtual selection's router picks the model first (`reason: "direct"`).
            if self.model.is_virtual() {
                return match self.ask_direct_route() {
                    Ok(route) => {
                        self.extensions.tree = Some(PendingTree {
                            route: Some(route),
                            plan: Some(plan),
                            ..pending
                        });
                        None
                    }
                    Err(error) => Some(Err(error)),
                };
            }
            return self.summarize_after_login(pending, plan, None);
        }
        Some(self.move_leaf(&pending, label, summary))
    }

    /// Starts the model's summary of the branch (with `dispatch`, the pair a virtual selection
    /// was routed to); Some(answer) when it cannot start.
    fn summarize_branch(
        &mut self,
        pending: PendingTree,
        plan: &SummaryPlan,
        dispatch: Option<(Model, ThinkingLevel)>,
    ) -> Option<Result<Value, String>> {
        match self.start_branch_summary(&pending, plan, dispatch) {
            Ok(Some(summary)) => {
                self.extensions.tree = Some(PendingTree {
                    summary: Some(Box::new(summary)),
                    ..pending
                });
                None
            }
            // No message to summarize: pi 1.6.0's fixed text, without a request.
            Ok(None) => {
                let summary = BranchSummary {
                    text: NO_CONTENT.into(),
                    details: Some(json!({"readFiles": [], "modifiedFiles": []})),
                    usage: None,
                    from_hook: false,
                };
                Some(self.move_leaf(&pending, plan.label.clone(), Some(summary)))
            }
            Err(error) => Some(Err(error)),
        }
    }

    /// The router answered the branch summary's route: summarize with that model, or fail the
    /// navigation with the routing error.
    pub(super) fn on_branch_summary_routed(&mut self, result: Result<Value, String>) {
        let Some(mut pending) = self.extensions.tree.take() else {
            return;
        };
        let (Some(route), Some(plan)) = (pending.route.take(), pending.plan.take()) else {
            self.extensions.tree = Some(pending);
            return;
        };
        let (extension, id) = (pending.extension, pending.id.clone());
        let answer = match self.direct_route_result(&route, result) {
            // A run started meanwhile: the leaf must not move under it.
            Ok(_) if self.is_busy() => Some(Err(
                "Wait for the current response to finish before navigating the session tree."
                    .into(),
            )),
            Ok(pair) => self.summarize_after_login(pending, plan, Some(pair)),
            Err(error) => Some(Err(error)),
        };
        if let Some(answer) = answer {
            self.answer_extension(extension, id, answer);
        }
    }

    /// `summarize_branch`, once the login of the provider that writes the summary (the routed
    /// one with `dispatch`) is refreshed on a worker when it must be (expired, or a key its
    /// extension derives for each request, as a compaction's).
    fn summarize_after_login(
        &mut self,
        mut pending: PendingTree,
        plan: SummaryPlan,
        dispatch: Option<(Model, ThinkingLevel)>,
    ) -> Option<Result<Value, String>> {
        let provider = dispatch
            .as_ref()
            .map_or(&self.model.provider, |(model, _)| &model.provider);
        match self.config.start_oauth_refresh(provider) {
            Some(refresh) => {
                pending.refresh = Some(Box::new(TreeLoginRefresh {
                    refresh,
                    dispatch,
                    plan,
                }));
                self.extensions.tree = Some(pending);
                None
            }
            None => self.summarize_branch(pending, &plan, dispatch),
        }
    }

    /// The summary's login refresh ended (or its worker died): record it, then write the
    /// summary (without a key it fails as any summary would).
    pub(super) fn on_tree_login_refreshed(
        &mut self,
        result: Result<crate::config::oauth::Fresh, crate::config::oauth::OAuthError>,
    ) {
        let Some(mut pending) = self.extensions.tree.take() else {
            return;
        };
        let Some(waiting) = pending.refresh.take() else {
            self.extensions.tree = Some(pending);
            return;
        };
        let TreeLoginRefresh {
            refresh,
            dispatch,
            plan,
        } = *waiting;
        self.config.finish_oauth_refresh(&refresh.provider, result);
        let (extension, id) = (pending.extension, pending.id.clone());
        let answer = if self.is_busy() {
            Some(Err(
                "Wait for the current response to finish before navigating the session tree."
                    .into(),
            ))
        } else {
            self.summarize_branch(pending, &plan, dispatch)
        };
        if let Some(answer) = answer {
            self.answer_extension(extension, id, answer);
        }
    }

    /// The summary request for the abandoned branch, sent (None: the branch has no message).
    fn start_branch_summary(
        &mut self,
        pending: &PendingTree,
        plan: &SummaryPlan,
        dispatch: Option<(Model, ThinkingLevel)>,
    ) -> Result<Option<TreeSummary>, String> {
        let base = self.summary_base(dispatch.as_ref())?;
        let model = dispatch.map_or_else(|| self.model.clone(), |(model, _)| model);
        let entries: Vec<&SessionEntry> = pending
            .abandoned
            .iter()
            .filter_map(|id| self.session.entry(id))
            .collect();
        let reserve = self
            .config
            .setting("branchSummary.reserveTokens")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_RESERVE_TOKENS);
        let window = match model.context_window {
            0 => 128_000,
            window => window,
        };
        let (messages, files) = branch_messages(&entries, window.saturating_sub(reserve));
        if messages.is_empty() {
            return Ok(None);
        }
        let (read_files, modified_files) = files.lists();
        let instructions = plan.instructions.clone();
        let prompt = match (instructions.filter(|i| !i.is_empty()), plan.replace) {
            (Some(instructions), Some(true)) => instructions,
            (Some(instructions), _) => {
                format!(
                    "{}\n\nAdditional focus: {instructions}",
                    compaction::BRANCH_PROMPT
                )
            }
            (None, _) => compaction::BRANCH_PROMPT.to_string(),
        };
        let request = SummaryRequest {
            kind: SummaryKind::History,
            system_prompt: compaction::SYSTEM_PROMPT.to_string(),
            user_text: format!("{}{prompt}", compaction::conversation_block(&messages)),
        }
        .into_stream_request(base);
        Ok(Some(TreeSummary {
            running: Some(self.send_tree_summary(&request)),
            draft: Draft::new(&model, crate::rpc::Profile::Default),
            last_event: Instant::now(),
            request,
            model,
            attempts: 0,
            retry_at: None,
            read_files,
            modified_files,
            label: plan.label.clone(),
        }))
    }

    fn send_tree_summary(
        &mut self,
        request: &provider::StreamRequest,
    ) -> (StreamHandle, Receiver<ProviderEvent>) {
        self.runs.next_request += 1;
        let req = RequestId(self.runs.next_request);
        let (sender, events) = crossbeam_channel::bounded(super::PROVIDER_CHANNEL_CAPACITY);
        (provider::spawn_stream(req, request.clone(), sender), events)
    }

    /// The retry delay of the branch summary ran out: the request goes again.
    pub(super) fn retry_tree_summary(&mut self) {
        let Some(request) = self
            .extensions
            .tree_summary()
            .filter(|s| s.retry_at.is_some())
            .map(|s| s.request.clone())
        else {
            return;
        };
        self.emit(Event::SummarizationRetryAttemptStart {
            source: "branchSummary",
            reason: None,
        });
        let running = self.send_tree_summary(&request);
        if let Some(summary) = self.extensions.tree_summary_mut() {
            summary.retry_at = None;
            summary.last_event = Instant::now();
            summary.draft = Draft::new(&summary.model, crate::rpc::Profile::Default);
            summary.running = Some(running);
        }
    }

    /// An event of the branch summary's request (`None`: its stream ended without one, or went
    /// idle for too long).
    pub(super) fn on_tree_summary_event(&mut self, event: Option<ProviderEvent>) {
        let Some(summary) = self.extensions.tree_summary_mut() else {
            return;
        };
        let Some((handle, _)) = &summary.running else {
            return;
        };
        summary.last_event = Instant::now();
        let finished = match event {
            Some(event) if event.req != handle.req => return,
            Some(event) => {
                super::compaction_phase::fold_summary_event(&mut summary.draft, event.event)
            }
            None => Some((
                StopReason::Error,
                Some("the summary request ended without an answer".into()),
            )),
        };
        let Some((stop_reason, error_message)) = finished else {
            return;
        };
        summary.running = None;
        let draft = std::mem::replace(
            &mut summary.draft,
            Draft::new(&summary.model, crate::rpc::Profile::Default),
        );
        let reply = draft.finish(stop_reason, error_message);
        self.extra_usage.push(reply.usage.clone());
        if self.schedule_tree_summary_retry(&reply) {
            return;
        }
        let Some(mut pending) = self.extensions.tree.take() else {
            return;
        };
        let Some(summary) = pending.summary.take() else {
            return;
        };
        if summary.attempts > 0 {
            self.emit(Event::SummarizationRetryFinished);
        }
        let TreeSummary {
            read_files,
            modified_files,
            label,
            ..
        } = *summary;
        let result = match reply.stop_reason {
            StopReason::Aborted => Ok(json!({ "cancelled": true, "aborted": true })),
            StopReason::Error => Err(format!(
                "Branch summarization failed: {}",
                reply.error_message.as_deref().filter(|m| !m.is_empty()).unwrap_or("Unknown error")
            )),
            StopReason::Length => Err("Branch summarization failed: generation hit the token cap and the summary is incomplete".into()),
            _ if reply.content.iter().any(|b| matches!(b, ContentBlock::ToolCall(_))) => {
                Err("Branch summarization attempted to call a tool".into())
            }
            // A run started meanwhile: the leaf must not move under it.
            _ if self.is_busy() => Err(
                "Wait for the current response to finish before navigating the session tree."
                    .into(),
            ),
            _ => {
                let text = crate::messages::joined_text(&reply.content, "\n");
                let mut summary = format!("{}{text}", compaction::BRANCH_PREAMBLE);
                summary.push_str(&compaction::format_file_lists(&read_files, &modified_files));
                let details = json!({"readFiles": read_files, "modifiedFiles": modified_files});
                let summary = BranchSummary {
                    text: summary,
                    details: Some(details),
                    usage: Some(json!(reply.usage)),
                    from_hook: false,
                };
                self.move_leaf(&pending, label, Some(summary))
            }
        };
        let (extension, id) = (pending.extension, pending.id.clone());
        self.answer_extension(extension, id, result);
    }

    /// A transient failure of the branch summary is retried with the retry settings (true: a
    /// retry is scheduled, `summarization_retry_scheduled` said so).
    fn schedule_tree_summary_retry(&mut self, reply: &crate::messages::AssistantMessage) -> bool {
        let max = self.config.retry_max_retries();
        let base_delay = self.config.retry_base_delay_ms();
        let auto_retry = self.settings.auto_retry;
        let Some(summary) = self.extensions.tree_summary_mut() else {
            return false;
        };
        let transient =
            auto_retry && super::retry::is_retryable(reply, summary.model.context_window);
        if !transient || summary.attempts >= max {
            return false;
        }
        summary.attempts += 1;
        let attempt = summary.attempts;
        let delay = super::retry::backoff_delay(base_delay, attempt);
        summary.retry_at = Some(crate::deadline::after(delay));
        self.emit(Event::SummarizationRetryScheduled {
            attempt,
            max_attempts: max,
            delay_ms: delay.as_millis() as u64,
            error_message: reply.error_message.clone().unwrap_or_default(),
        });
        true
    }

    /// `abort` while the branch is summarized (or its route or login refresh awaited): the
    /// request (or the refresh's wait for the lock) is dropped and the navigation
    /// answered `{cancelled: true, aborted: true}` (pi 1.6.0).
    pub(super) fn abort_tree_summary(&mut self) {
        if self
            .extensions
            .tree
            .as_ref()
            .is_none_or(|t| t.summary.is_none() && t.route.is_none() && t.refresh.is_none())
        {
            return;
        }
        if let Some(pending) = self.extensions.tree.take() {
            let (extension, id) = (pending.extension, pending.id.clone());
            // A retry under way ends unfinished (1.6.0's `onRetryFinished`).
            if pending.summary.as_ref().is_some_and(|s| s.attempts > 0) {
                self.emit(Event::SummarizationRetryFinished);
            }
            drop(pending);
            let cancelled = json!({ "cancelled": true, "aborted": true });
            self.answer_extension(extension, id, Ok(cancelled));
        }
    }

    /// Moves the leaf (with a summary entry) and tells the extensions `session_tree`.
    fn move_leaf(
        &mut self,
        pending: &PendingTree,
        label: Option<String>,
        summary: Option<BranchSummary>,
    ) -> Result<Value, String> {
        let target = &pending.target;
        let Some(entry) = self.session.entry(&target.target_id) else {
            return Err(format!("Entry {} not found", target.target_id));
        };
        let value = entry.to_value();
        // A user or custom message is re-entered from its parent (pi puts its text in the
        // editor); any other entry becomes the leaf.
        let from_parent = (value["type"] == "message" && value["message"]["role"] == "user")
            || value["type"] == "custom_message";
        let new_leaf = if from_parent {
            entry.parent_id.clone()
        } else {
            Some(entry.id.clone())
        };
        let from_hook = summary.as_ref().map(|s| s.from_hook);
        let summary_entry = match summary {
            Some(summary) => {
                let summary_id = self
                    .session
                    .branch_with_summary(
                        new_leaf.as_deref(),
                        &summary.text,
                        summary.details,
                        summary.usage,
                        Some(summary.from_hook),
                    )
                    .map_err(|e| e.to_string())?;
                if let Some(label) = &label {
                    self.session
                        .append_label(&summary_id, Some(label))
                        .map_err(|e| e.to_string())?;
                }
                self.session.entry(&summary_id).map(|e| e.to_value())
            }
            None => {
                match &new_leaf {
                    Some(leaf) => self.session.set_leaf(leaf).map_err(|e| e.to_string())?,
                    None => self.session.reset_leaf(),
                }
                if let Some(label) = &label {
                    self.session
                        .append_label(&target.target_id, Some(label))
                        .map_err(|e| e.to_string())?;
                }
                None
            }
        };
        self.messages = self.session.context().messages;
        self.request_cache.invalidate();
        // pi 1.6.0: the branch's own tool loadout, whatever the command line chose.
        self.restore_tools_from_transcript(&[]);
        let mut event = json!({
            "type": "session_tree",
            "newLeafId": self.session.leaf_id(),
            "oldLeafId": pending.old_leaf,
        });
        if let Some(entry) = summary_entry {
            event["summaryEntry"] = entry;
            event["fromExtension"] = json!(from_hook);
        }
        self.notify_extensions_of(event);
        Ok(json!({ "cancelled": false }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abandoned_branch_runs_from_the_old_leaf_to_the_shared_entry() {
        // a ─ b ─ c (old leaf)
        //      └─ d (target)
        let entries = vec![
            json!({"id": "a", "parentId": null}),
            json!({"id": "b", "parentId": "a"}),
            json!({"id": "c", "parentId": "b"}),
            json!({"id": "d", "parentId": "b"}),
        ];
        let (abandoned, common) = entries_to_summarize(&entries, Some("c"), "d");
        assert_eq!(abandoned, vec![entries[2].clone()]);
        assert_eq!(common.as_deref(), Some("b"));
        // Back to an ancestor: everything after it is abandoned, oldest first.
        let (abandoned, common) = entries_to_summarize(&entries, Some("c"), "a");
        assert_eq!(abandoned, vec![entries[1].clone(), entries[2].clone()]);
        assert_eq!(common.as_deref(), Some("a"));
        assert_eq!(entries_to_summarize(&entries, None, "a"), (vec![], None));
    }
}
