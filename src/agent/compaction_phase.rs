//! Driving a compaction from the agent loop (FACTS §10.1, seed events): the `compact` command,
//! the threshold check after a run and before a prompt, and overflow recovery. The pure parts
//! (what to cut, the prompts, the result) are `compaction`; this file owns the phase: one or two
//! summary requests streaming in parallel on one channel, transient failures retried with the
//! retry settings (`summarization_retry_*` events, timer in the loop's select), abort, and what
//! happens afterwards (answer the command, continue the prompt, retry the run, or settle).

use super::compaction::{self, CompactionReason, CompactionSettings, Trigger, TriggerCheck};
use super::draft::Draft;
use super::state::{
    AfterRefresh, Compaction, CompactionOrigin, Phase, PromptFrom, Refreshing, Slot,
};
use super::{Agent, PROVIDER_CHANNEL_CAPACITY, retry};
use crate::messages::{AgentMessage, AssistantMessage, StopReason};
use crate::provider::{self, ProviderEvent, RequestId, StreamEvent};
use crate::rpc::Profile;
use crate::rpc::events::{self, Event};
use crate::session::SessionEntry;

impl Agent {
    /// Err: pi 1.6.0's text for a bad token setting (the compaction fails with it).
    fn compaction_settings(&self) -> Result<CompactionSettings, String> {
        Ok(CompactionSettings {
            reserve_tokens: self.config.compaction_reserve_tokens(&self.model)?,
            keep_recent_tokens: self.config.compaction_keep_recent_tokens(&self.model)?,
        })
    }

    /// pi's `_checkCompaction` for the latest reply.
    pub(super) fn compaction_trigger(
        &self,
        reply: &AssistantMessage,
        include_aborted: bool,
    ) -> Trigger {
        // A bad token setting fails a compaction when one is asked for; it triggers none.
        let reserve_tokens = match self.config.compaction_reserve_tokens(&self.model) {
            Ok(tokens) => tokens,
            Err(e) => {
                log::warn!("{e}");
                return Trigger::Nothing;
            }
        };
        let limits = self.limits_model(reply);
        let model = limits.as_ref();
        let check = |branch: &[&SessionEntry]| {
            TriggerCheck {
                enabled: self.settings.auto_compaction,
                assistant: reply,
                include_aborted,
                model,
                messages: &self.messages,
                branch,
                reserve_tokens,
                overflow_recovery_attempted: self.runs.overflow_recovery_attempted,
            }
            .decide()
        };
        // The branch is a walk over the whole session (the largest per-turn cost in a long
        // one), and its latest compaction can only turn a trigger into `Nothing`: without a
        // trigger there is no need to look.
        match check(&[]) {
            Trigger::Nothing => Trigger::Nothing,
            _ => check(&self.session.branch()),
        }
    }

    /// (v2) pi 1.6.0 checks the context against the window of the model each request of a
    /// virtual selection is routed to, and compacts first (threshold) when it passes it and there
    /// is something to compact.
    pub(super) fn request_needs_compaction(&self, model: &crate::config::Model) -> bool {
        if !self.settings.auto_compaction || model.context_window == 0 {
            return false;
        }
        let Ok(settings) = self.compaction_settings() else {
            return false;
        };
        let passes = |tokens| {
            compaction::should_compact(tokens, model.context_window, settings.reserve_tokens)
        };
        // The cheap check first: the branch is a walk over the whole session.
        if !passes(compaction::estimate_context_tokens(&self.messages).tokens) {
            return false;
        }
        let branch = self.session.branch();
        // Usage from before the latest compaction describes the old context: estimate then.
        if compaction::awaiting_usage_after_compaction(&branch)
            && !passes(self.messages.iter().map(compaction::estimate_tokens).sum())
        {
            return false;
        }
        compaction::prepare(&branch, settings).is_ok()
    }

    /// Starts a compaction; every path ends in `finish_compaction` (possibly at once).
    pub(super) fn start_compaction(
        &mut self,
        reason: CompactionReason,
        origin: CompactionOrigin,
        custom_instructions: Option<&str>,
    ) {
        let will_retry = reason == CompactionReason::Overflow;
        if will_retry {
            self.runs.overflow_recovery_attempted = true;
            if matches!(self.messages.last(), Some(AgentMessage::Assistant(a)) if a.stop_reason == StopReason::Error)
            {
                self.messages.pop();
            }
        }
        self.emit(compaction::start_event(reason));
        self.begin_compaction(reason, origin, custom_instructions);
    }

    /// The compaction after its start event. A subscription login that needs a refresh is
    /// refreshed on a worker first (`abort` reaches it at once), then this runs again.
    pub(super) fn begin_compaction(
        &mut self,
        reason: CompactionReason,
        origin: CompactionOrigin,
        custom_instructions: Option<&str>,
    ) {
        if let Some(refresh) = self.config.start_oauth_refresh(&self.model.provider) {
            let then = AfterRefresh::Compaction {
                reason,
                origin,
                custom_instructions: custom_instructions.map(str::to_string),
            };
            self.phase = Phase::Refreshing(Box::new(Refreshing { refresh, then }));
            return;
        }
        let will_retry = reason == CompactionReason::Overflow;
        let manual = matches!(
            origin,
            CompactionOrigin::Command { .. } | CompactionOrigin::Extension
        );
        // Either failure to start (no credentials, nothing to compact) ends the compaction the
        // same way: its end event, and a manual one reports the error. (v2) A virtual
        // selection's credentials are those of the model the summary is routed to, checked then.
        let credentials = match self.model.is_virtual() {
            true => Ok(()),
            false => self
                .base_request()
                .map(drop)
                .map_err(|()| self.credentials_error()),
        };
        let started = credentials.and_then(|()| {
            self.compaction_settings().and_then(|settings| {
                compaction::prepare(&self.session.branch(), settings).map_err(|e| e.to_string())
            })
        });
        let preparation = match started {
            Ok(started) => started,
            Err(error) => {
                let message = manual.then(|| reason.failure_message(&error));
                self.emit(compaction::end_event(
                    reason,
                    None,
                    false,
                    false,
                    message.as_deref(),
                ));
                return self.after_compaction(origin, false, manual.then_some(error));
            }
        };
        let (sender, events) = crossbeam_channel::bounded(PROVIDER_CHANNEL_CAPACITY);
        let mut compaction = Compaction {
            reason,
            will_retry,
            origin,
            slots: Vec::new(),
            sender,
            events,
            retry_at: None,
            usages: Vec::new(),
            preparation,
            before_hook: None,
            route: None,
            dispatch: None,
        };
        // (v2) Extensions may cancel it or give the summary first.
        if let Some(hook) = self.ask_before_compact(&compaction, custom_instructions) {
            compaction.before_hook = Some(hook);
            self.phase = Phase::Compacting(Box::new(compaction));
            return;
        }
        self.spawn_summaries(compaction, custom_instructions);
    }

    /// The summary requests of a prepared compaction, started; the phase is `Compacting`. (v2)
    /// Under a virtual selection the router is asked first (`reason: "direct"`, pi 1.6.0), and
    /// the summaries go to the model it answers.
    pub(super) fn spawn_summaries(
        &mut self,
        mut compaction: Compaction,
        custom_instructions: Option<&str>,
    ) {
        if self.model.is_virtual() && compaction.dispatch.is_none() {
            let asked = self.ask_direct_route();
            self.phase = Phase::Compacting(Box::new(compaction));
            match asked {
                Ok(route) => {
                    if let Phase::Compacting(compaction) = &mut self.phase {
                        compaction.route = Some((route, custom_instructions.map(String::from)));
                    }
                }
                Err(error) => self.fail_compaction(error),
            }
            return;
        }
        // The routed provider's login, refreshed first when it expired (as the selection's).
        if let Some((model, _)) = &compaction.dispatch
            && let Some(refresh) = self.config.start_oauth_refresh(&model.provider)
        {
            let then = AfterRefresh::Summaries {
                compaction: Box::new(compaction),
                custom_instructions: custom_instructions.map(String::from),
            };
            self.phase = Phase::Refreshing(Box::new(Refreshing { refresh, then }));
            return;
        }
        let base = match self.summary_base(compaction.dispatch.as_ref()) {
            Ok(base) => base,
            Err(error) => {
                self.phase = Phase::Compacting(Box::new(compaction));
                return self.fail_compaction(error);
            }
        };
        let base = &base;
        for request in compaction.preparation.summary_requests(custom_instructions) {
            compaction.slots.push(Slot {
                request,
                running: None,
                text: None,
                attempts: 0,
            });
        }
        for index in 0..compaction.slots.len() {
            self.spawn_summary(&mut compaction, index, base);
        }
        self.phase = Phase::Compacting(Box::new(compaction));
    }

    /// The router answered a compaction's summary route: summarize with that model, or fail.
    pub(super) fn on_compaction_routed(&mut self, result: Result<serde_json::Value, String>) {
        let Phase::Compacting(mut compaction) = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return;
        };
        let Some((route, instructions)) = compaction.route.take() else {
            self.phase = Phase::Compacting(compaction);
            return;
        };
        match self.direct_route_result(&route, result) {
            Ok(pair) => {
                compaction.dispatch = Some(pair);
                self.spawn_summaries(*compaction, instructions.as_deref());
            }
            Err(error) => {
                self.phase = Phase::Compacting(compaction);
                self.fail_compaction(error);
            }
        }
    }

    /// The request a summary is built on: the routed pair's (`dispatch`), else the selection's.
    pub(super) fn summary_base(
        &self,
        dispatch: Option<&(crate::config::Model, crate::config::ThinkingLevel)>,
    ) -> Result<provider::StreamRequest, String> {
        match dispatch {
            Some((model, level)) => self
                .base_request_for(model, *level)
                .map_err(|()| self.credentials_error_for(&model.provider)),
            None => self.base_request().map_err(|()| self.credentials_error()),
        }
    }

    fn spawn_summary(
        &mut self,
        compaction: &mut Compaction,
        index: usize,
        base: &provider::StreamRequest,
    ) {
        self.runs.next_request += 1;
        let req = RequestId(self.runs.next_request);
        let model = match &compaction.dispatch {
            Some((model, _)) => model,
            None => &self.model,
        };
        let draft = Draft::new(model, Profile::Default);
        let slot = &mut compaction.slots[index];
        let request = slot.request.clone().into_stream_request(base.clone());
        let handle = provider::spawn_stream(req, request, compaction.sender.clone());
        slot.running = Some((handle, draft));
    }

    pub(super) fn on_compaction_event(&mut self, event: ProviderEvent) {
        let Phase::Compacting(compaction) = &mut self.phase else {
            return;
        };
        let Some(index) = compaction
            .slots
            .iter()
            .position(|s| s.running.as_ref().is_some_and(|(h, _)| h.req == event.req))
        else {
            return;
        };
        let (_, draft) = compaction.slots[index]
            .running
            .as_mut()
            .expect("found running above");
        // The summary is not streamed to the client: only the finished text matters.
        let finished = fold_summary_event(draft, event.event);
        if let Some((stop_reason, error_message)) = finished {
            let (_, draft) = compaction.slots[index]
                .running
                .take()
                .expect("found running above");
            let reply = draft.finish(stop_reason, error_message);
            self.on_summary_reply(index, reply);
        }
    }

    fn on_summary_reply(&mut self, index: usize, reply: AssistantMessage) {
        let Phase::Compacting(compaction) = &mut self.phase else {
            return;
        };
        compaction.usages.push(reply.usage.clone());
        let slot = &mut compaction.slots[index];
        let outcome = slot.request.reply_text(&reply);
        let retried = slot.attempts > 0;
        match outcome {
            Ok(text) => {
                slot.text = Some(text);
                if retried {
                    self.emit(Event::SummarizationRetryFinished);
                }
                self.complete_compaction_if_done();
            }
            Err(error) => {
                let max = self.config.retry_max_retries();
                let Phase::Compacting(compaction) = &mut self.phase else {
                    return;
                };
                let window = match &compaction.dispatch {
                    Some((model, _)) => model.context_window,
                    None => self.model.context_window,
                };
                let slot = &mut compaction.slots[index];
                let transient = self.settings.auto_retry && retry::is_retryable(&reply, window);
                if transient && slot.attempts < max {
                    slot.attempts += 1;
                    let attempt = slot.attempts;
                    let delay = retry::backoff_delay(self.config.retry_base_delay_ms(), attempt);
                    compaction.retry_at = Some((index, crate::deadline::after(delay)));
                    let raw = reply.error_message.unwrap_or_default();
                    self.emit(Event::SummarizationRetryScheduled {
                        attempt,
                        max_attempts: max,
                        delay_ms: delay.as_millis() as u64,
                        error_message: raw,
                    });
                } else {
                    if retried {
                        self.emit(Event::SummarizationRetryFinished);
                    }
                    self.fail_compaction(error);
                }
            }
        }
    }

    /// The retry delay of a summary request ran out.
    pub(super) fn retry_summary(&mut self) {
        let Phase::Compacting(mut compaction) = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return;
        };
        let Some((index, _)) = compaction.retry_at.take() else {
            self.phase = Phase::Compacting(compaction);
            return;
        };
        self.emit(Event::SummarizationRetryAttemptStart {
            source: "compaction",
            reason: Some(compaction.reason.as_str()),
        });
        match self.summary_base(compaction.dispatch.as_ref()) {
            Ok(base) => {
                self.spawn_summary(&mut compaction, index, &base);
                self.phase = Phase::Compacting(compaction);
            }
            Err(error) => {
                self.phase = Phase::Compacting(compaction);
                self.fail_compaction(error);
            }
        }
    }

    fn complete_compaction_if_done(&mut self) {
        let done =
            matches!(&self.phase, Phase::Compacting(c) if c.slots.iter().all(|s| s.text.is_some()));
        if !done {
            return;
        }
        let Phase::Compacting(compaction) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let Compaction {
            reason,
            will_retry,
            origin,
            preparation,
            slots,
            usages,
            ..
        } = *compaction;
        let texts: Vec<String> = slots.into_iter().filter_map(|s| s.text).collect();
        let result = preparation.finish(&texts);
        self.save_compaction(reason, will_retry, origin, result, usages, false);
    }

    /// Saves a finished compaction (summarized by pi-rs, or given by an extension's
    /// `session_before_compact` answer: `from_extension`), rebuilds the context, and ends the
    /// phase with its end event and answer.
    pub(super) fn save_compaction(
        &mut self,
        reason: CompactionReason,
        will_retry: bool,
        origin: CompactionOrigin,
        mut result: compaction::CompactionResult,
        usages: Vec<crate::messages::Usage>,
        from_extension: bool,
    ) {
        // The prompt state so far travels in the entry (pi 1.6.0), stamped with its time.
        let system =
            super::system_message::compaction_snapshot(&self.messages, crate::time::now_ms());
        let usage = compaction::sum_usage(&usages);
        // The entry records the summary requests' usage (pi 1.6.0), an extension's its own.
        let entry_usage = match from_extension {
            true => result.extension_usage.clone(),
            false => Some(serde_json::json!(usage)),
        };
        match self
            .session
            .append_compaction(crate::session::NewCompaction {
                summary: &result.summary,
                first_kept_entry_id: &result.first_kept_entry_id,
                tokens_before: result.tokens_before,
                details: Some(result.details.clone()).filter(|d| !d.is_null()),
                usage: entry_usage,
                from_hook: Some(from_extension),
                system_message: system,
            }) {
            // (v2) Extensions hear of the saved compaction (pi's `session_compact`).
            Ok(entry_id) => {
                let entry = self.session.entry(&entry_id).map(|e| e.to_value());
                self.notify_extensions_of(serde_json::json!({
                    "type": "session_compact",
                    "compactionEntry": entry,
                    "fromExtension": from_extension,
                    "reason": reason.as_str(),
                    "willRetry": will_retry,
                }));
            }
            Err(e) => log::error!("could not save the compaction: {e}"),
        }
        self.messages = self.session.context().messages;
        self.request_cache.invalidate();
        if from_extension {
            result.estimated_tokens_after = compaction::estimated_tokens_after(&self.messages);
        }
        self.extra_usage.extend(usages);
        let result_json = result.to_json(Some(&usage));
        self.emit(compaction::end_event(
            reason,
            Some(result_json.clone()),
            false,
            will_retry,
            None,
        ));
        if let CompactionOrigin::Command { id } = &origin {
            let legacy = self.io.profile == Profile::Legacy;
            let data = events::compaction_result(&result_json, legacy);
            self.respond_ok(id.as_ref(), "compact", Some(data));
        }
        self.after_compaction(origin, will_retry, None);
    }

    /// Ends the `Compacting` phase without a result (its requests dropped); the summary calls'
    /// usage still counts. Returns why it ran and who waits for it.
    fn leave_compaction(&mut self) -> Option<(CompactionReason, CompactionOrigin)> {
        let Phase::Compacting(compaction) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return None;
        };
        let Compaction {
            reason,
            origin,
            usages,
            ..
        } = *compaction;
        self.extra_usage.extend(usages);
        Some((reason, origin))
    }

    fn fail_compaction(&mut self, error: String) {
        let Some((reason, origin)) = self.leave_compaction() else {
            return;
        };
        self.emit(compaction::end_event(
            reason,
            None,
            false,
            false,
            Some(&reason.failure_message(&error)),
        ));
        self.after_compaction(origin, false, Some(error));
    }

    /// `abort` during a compaction: requests dropped, nothing saved.
    pub(super) fn abort_compaction(&mut self) {
        let Some((reason, origin)) = self.leave_compaction() else {
            return;
        };
        self.compaction_aborted(reason, origin);
    }

    /// The end of an aborted compaction: its end event, then what its origin needs.
    pub(super) fn compaction_aborted(
        &mut self,
        reason: CompactionReason,
        origin: CompactionOrigin,
    ) {
        self.emit(compaction::end_event(reason, None, true, false, None));
        match origin {
            CompactionOrigin::Command { id } => {
                self.respond_error(id.as_ref(), "compact", compaction::CANCELLED)
            }
            CompactionOrigin::Extension => {}
            CompactionOrigin::BeforePrompt {
                from: PromptFrom::Client(id),
                ..
            } => self.respond_error(
                id.as_ref(),
                "prompt",
                "Aborted while compacting before the prompt",
            ),
            CompactionOrigin::BeforePrompt {
                from: PromptFrom::Extension,
                ..
            } => {}
            CompactionOrigin::AfterRun => self.settle(),
            // The run was aborted: it ends here.
            CompactionOrigin::BeforeRoutedRequest { .. }
            | CompactionOrigin::BeforeNextTurn { .. } => self.end_run(),
        }
    }

    /// What follows a compaction: the command's error, the waiting prompt, or the run's
    /// continuation (the overflow retry, queued messages) — otherwise the chain settles.
    pub(super) fn after_compaction(
        &mut self,
        origin: CompactionOrigin,
        retry_run: bool,
        error: Option<String>,
    ) {
        self.phase = Phase::Idle;
        match origin {
            CompactionOrigin::Command { id } => {
                if let Some(error) = error {
                    self.respond_error(id.as_ref(), "compact", &error);
                }
            }
            CompactionOrigin::Extension => {
                if let Some(error) = error {
                    self.emit(Event::ExtensionError {
                        extension_path: "compact".into(),
                        event: "compact".into(),
                        error,
                    });
                }
            }
            CompactionOrigin::BeforePrompt {
                from,
                message,
                images,
            } => self.begin_prompt(from, message, images),
            CompactionOrigin::BeforeRoutedRequest { model, thinking } => {
                if self.runs.current.as_ref().is_none_or(|run| run.aborted) {
                    return self.end_run();
                }
                // The route stands (pi 1.6.0); the `context` hook sees the compacted context.
                self.extensions.routed = Some((*model, thinking));
                self.ask_context_hook();
            }
            // A failed compaction does not stop the run (pi 1.6.0 goes on with the context).
            CompactionOrigin::BeforeNextTurn { had_tool_calls } => {
                if self.runs.current.as_ref().is_none_or(|run| run.aborted) {
                    return self.end_run();
                }
                self.start_next_turn(had_tool_calls);
            }
            CompactionOrigin::AfterRun => {
                if retry_run
                    || !self.queues.steering.is_empty()
                    || !self.queues.follow_up.is_empty()
                {
                    self.continue_run();
                } else {
                    self.settle();
                }
            }
        }
    }
}

/// Folds one event of a summary request into its draft; Some(how it ended) at its end. The
/// summary is not streamed to the client (compaction and branch summaries alike).
pub(super) fn fold_summary_event(
    draft: &mut Draft,
    event: StreamEvent,
) -> Option<(StopReason, Option<String>)> {
    match event {
        StreamEvent::Opened
        | StreamEvent::Meta { .. }
        | StreamEvent::Diagnostic(_)
        | StreamEvent::Retrying { .. }
        | StreamEvent::Waiting { .. } => None,
        StreamEvent::BlockStart { index, kind } => {
            draft.block_start(index, kind);
            None
        }
        StreamEvent::Delta { index, delta } => {
            draft.delta(index, delta);
            None
        }
        StreamEvent::BlockEnd { index, signature } => {
            draft.block_end(index, signature);
            None
        }
        StreamEvent::ThinkingRedacted { index, redacted } => {
            draft.set_redacted(index, redacted);
            None
        }
        StreamEvent::Usage(usage) => {
            draft.set_usage(usage);
            None
        }
        StreamEvent::PricedUsage(usage) => {
            draft.set_priced_usage(usage);
            None
        }
        StreamEvent::CostMultiplier(multiplier) => {
            draft.multiply_cost(multiplier);
            None
        }
        StreamEvent::RawStopReason(reason) => {
            draft.set_raw_stop_reason(reason);
            None
        }
        StreamEvent::EndTurn(end_turn) => {
            draft.set_end_turn(end_turn);
            None
        }
        StreamEvent::Done {
            stop_reason,
            error_message,
        } => Some((stop_reason, error_message)),
        // A summary request declares no tools; were it refused for strict tools, it just fails.
        StreamEvent::Failed(error) | StreamEvent::StrictToolsRefused { error, .. } => {
            Some((StopReason::Error, Some(error.message)))
        }
    }
}
