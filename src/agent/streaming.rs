//! The `Streaming` phase: one LLM request for the conversation (`request_completion`), its
//! provider events folded into the draft reply and emitted as `message_update`s (merged while
//! the client lags behind), and the reply's close (`finish_stream`), which decides what follows:
//! the reply's tool calls, the next turn, or the run's end. A request that cannot even be made
//! (no credentials) fails the run without a stream, as pi does.
//!
//! Nothing here blocks but sending a record: the provider thread owns the HTTP request, and
//! dropping the stream's handle (leaving the phase) cancels it.

use std::time::Instant;

use super::draft::Draft;
use super::state::{AfterRefresh, Phase, Refreshing, Stream};
use super::{Agent, PROVIDER_CHANNEL_CAPACITY, convert, serialize_message};
use crate::config::ThinkingLevel;
use crate::extensions::protocol::HookKind;
use crate::messages::{
    AgentMessage, AssistantMessage, ContentBlock, StopReason, TextContent, ToolCall,
};
use crate::provider::{self, ProviderEvent, RequestId, StreamEvent, StreamRequest};
use crate::rpc::events::Event;
use serde_json::Value;

/// Merged deltas stop growing at this size: a full writer channel (1024 records) then holds
/// ~2 MB of text while the client stalls (8 KB records held ~14 MB of RSS).
const COALESCE_LIMIT: usize = 1024;

impl Agent {
    pub(super) fn check_credentials(&self) -> Result<(), String> {
        // (v2) A virtual selection: the model each request is routed to is checked then.
        if self.model.is_virtual() {
            return Ok(());
        }
        if self.model.is_placeholder() {
            return Err(format!(
                "No API key found for the selected model.\n\n{}",
                self.config.login_help()
            ));
        }
        if self.config.api_key(&self.model.provider).is_none() {
            if let Some(notice) = self.config.auth_notice(&self.model.provider) {
                return Err(notice);
            }
            return Err(format!(
                "No API key found for {}.\n\n{}",
                self.model.provider,
                self.config.login_help()
            ));
        }
        Ok(())
    }

    /// The parts of an LLM request that do not depend on what is asked; Err without a key.
    pub(super) fn base_request(&self) -> Result<StreamRequest, ()> {
        self.base_request_for(&self.model, self.thinking)
    }

    /// `base_request` for another model and level (a virtual selection's routed pair).
    pub(super) fn base_request_for(
        &self,
        model: &crate::config::Model,
        thinking: ThinkingLevel,
    ) -> Result<StreamRequest, ()> {
        let mut api_key = self.config.api_key(&model.provider).ok_or(())?;
        // (v2) A key an extension derives from a login is asked for at each request, as in 1.6.0.
        self.config.spend_oauth_key(&model.provider);
        if self.config.key_in_headers(&model.provider) {
            // The credential travels in `headers` (Authorization), never as an API key.
            api_key.clear();
        }
        Ok(StreamRequest {
            // After the key: a refreshed Copilot token may name another API host.
            model: self.config.request_model(model),
            api_key,
            headers: self.config.request_headers(model),
            system_prompt: self.run_system_prompt_text().to_string(),
            // Filled by `request_completion` (compaction sends messages of its own).
            messages: Vec::new(),
            history: None,
            tools: self.tools.specs.clone(),
            initial_tools: Vec::new(),
            strict_tools_refused: self.runs.strict_tools_refused,
            // Filled by `dispatch` from the transcript's declarations.
            strict_preferred: Vec::new(),
            strict_required: Vec::new(),
            grammar_tools: Vec::new(),
            thinking,
            thinking_budgets: [
                self.config.thinking_budget(ThinkingLevel::Minimal),
                self.config.thinking_budget(ThinkingLevel::Low),
                self.config.thinking_budget(ThinkingLevel::Medium),
                self.config.thinking_budget(ThinkingLevel::High),
            ],
            max_tokens: None,
            prompt_in_estimate: true,
            session_id: self.session.id().to_string(),
            idle_timeout: self.settings.idle_timeout,
            provider_retry: self.config.provider_retry(),
            hooks: self.provider_hooks(false),
        })
    }

    /// (v2) The extensions' provider hooks for a request (`loop_request`: of the agent loop,
    /// not a compaction summary), when any extension wants them.
    fn provider_hooks(
        &self,
        loop_request: bool,
    ) -> Option<std::sync::Arc<dyn provider::types::RequestHooks>> {
        let host = self.extensions.host.as_ref()?;
        crate::extensions::providers::request_hooks(
            host,
            self.extensions.hook_deadline,
            loop_request,
        )
    }

    /// A login refresh ended (or its worker died): record it, then go on with what waited.
    pub(super) fn on_oauth_refreshed(
        &mut self,
        result: Result<crate::config::oauth::Fresh, crate::config::oauth::OAuthError>,
    ) {
        let Phase::Refreshing(refreshing) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let Refreshing { refresh, then } = *refreshing;
        self.config.finish_oauth_refresh(&refresh.provider, result);
        match then {
            AfterRefresh::Prompt {
                id,
                message,
                images,
            } => self.start_prompt(id.as_ref(), message, images),
            AfterRefresh::Request => self.request_completion(),
            AfterRefresh::Compaction {
                reason,
                origin,
                custom_instructions,
            } => self.begin_compaction(reason, origin, custom_instructions.as_deref()),
            AfterRefresh::Dispatch {
                model,
                thinking,
                replacement,
            } => {
                if self.runs.current.as_ref().is_some_and(|run| !run.aborted) {
                    self.dispatch(*model, thinking, replacement);
                }
            }
            AfterRefresh::Summaries {
                compaction,
                custom_instructions,
            } => self.spawn_summaries(*compaction, custom_instructions.as_deref()),
        }
    }

    /// `abort` while a login is refreshed: the worker's lock wait is cancelled; a prompt is
    /// answered with an error, a run ends.
    pub(super) fn abort_refresh(&mut self) {
        let Phase::Refreshing(refreshing) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        match refreshing.then {
            AfterRefresh::Prompt { id, .. } => {
                self.respond_error(id.as_ref(), "prompt", "Aborted before the prompt started")
            }
            AfterRefresh::Request => self.end_run(),
            AfterRefresh::Compaction { reason, origin, .. } => {
                self.compaction_aborted(reason, origin)
            }
            AfterRefresh::Dispatch { .. } => self.end_run(),
            AfterRefresh::Summaries { compaction, .. } => {
                let super::state::Compaction {
                    reason,
                    origin,
                    usages,
                    ..
                } = *compaction;
                self.extra_usage.extend(usages);
                self.compaction_aborted(reason, origin)
            }
        }
    }

    pub(super) fn credentials_error(&self) -> String {
        self.credentials_error_for(&self.model.provider)
    }

    /// `credentials_error` for another provider (the one a virtual selection was routed to).
    pub(super) fn credentials_error_for(&self, provider: &str) -> String {
        // A subscription login that could not be refreshed says how to log in again.
        self.config
            .auth_notice(provider)
            .unwrap_or_else(|| format!("No API key for provider: {provider}"))
    }

    /// The next model request of the run: (v2) under a virtual selection the route first (as
    /// 1.6.0's `prepareRequest`, before its `context` hook), then v2 extensions' `context` hook
    /// (it may replace the messages this request sends), then the request.
    pub(super) fn request_completion(&mut self) {
        // A login that expired during the run is refreshed on a worker; the request follows.
        if let Some(refresh) = self.config.start_oauth_refresh(&self.model.provider) {
            let then = AfterRefresh::Request;
            self.phase = Phase::Refreshing(Box::new(Refreshing { refresh, then }));
            return;
        }
        // A retry's failed reply is reported to a router once, with the next request.
        let failed = self.runs.failed_response.take();
        if self.model.is_virtual() {
            self.route_request(failed);
            return;
        }
        self.ask_context_hook();
    }

    /// The `context` hook of the request about to be sent (to `extensions.routed` when a virtual
    /// selection was routed), or the request at once when no extension handles it.
    pub(super) fn ask_context_hook(&mut self) {
        let hook = self.extensions.host.as_ref().and_then(|host| {
            if !host.handles_hook(HookKind::Context) {
                return None;
            }
            let messages = serde_json::to_value(&self.messages).unwrap_or(Value::Null);
            let payload = serde_json::json!({ "messages": messages });
            host.start_hook(HookKind::Context, payload, self.extensions.hook_deadline)
        });
        match hook {
            Some(hook) => self.extensions.context_hook = Some(hook),
            None => self.send_request(None),
        }
    }

    /// The `context` hook answered: send the request (with the extensions' messages, if they
    /// replaced them). A late answer (the run ended or was aborted meanwhile) is dropped.
    pub(super) fn on_context_hook(&mut self, replacement: Option<Value>) {
        let waiting = matches!(self.phase, Phase::Idle)
            && self.runs.current.as_ref().is_some_and(|run| !run.aborted);
        if !waiting {
            return;
        }
        let messages = match replacement.map(serde_json::from_value::<Vec<AgentMessage>>) {
            None => None,
            Some(Ok(messages)) => Some(messages),
            Some(Err(e)) => {
                self.emit(Event::ExtensionError {
                    extension_path: "context".into(),
                    event: "context".into(),
                    error: format!("bad answer: the messages are not agent messages: {e}"),
                });
                None
            }
        };
        self.send_request(messages);
    }

    fn send_request(&mut self, replacement: Option<Vec<AgentMessage>>) {
        let Some((model, thinking)) = self.extensions.routed.take() else {
            return self.dispatch(self.model.clone(), self.thinking, replacement);
        };
        // (v2) The routed provider's login, refreshed first when it expired (as the selection's).
        if let Some(refresh) = self.config.start_oauth_refresh(&model.provider) {
            let then = AfterRefresh::Dispatch {
                model: Box::new(model),
                thinking,
                replacement,
            };
            self.phase = Phase::Refreshing(Box::new(Refreshing { refresh, then }));
            return;
        }
        self.dispatch(model, thinking, replacement);
    }

    /// Sends the request to `model` at `thinking` (the selection, or the pair a virtual model
    /// was routed to: the reply records it).
    pub(super) fn dispatch(
        &mut self,
        model: crate::config::Model,
        thinking: ThinkingLevel,
        replacement: Option<Vec<AgentMessage>>,
    ) {
        let Ok(mut request) = self.base_request_for(&model, thinking) else {
            let message = self.credentials_error_for(&model.provider);
            self.fail_before_stream(message);
            return;
        };
        request.hooks = self.provider_hooks(true);
        let block_images = self.config.block_images();
        // pi-messages sends pi's transcript as it is, its system messages in place.
        let pi_messages = request.model.api == "pi-messages";
        // (v2) A provider an extension streams itself gets the whole conversation every time.
        let served_by = self
            .extensions
            .stream_providers
            .get(&request.model.provider)
            .copied()
            .zip(self.extensions.host.as_ref().map(|h| h.hook_channel()));
        // A model that takes system messages mid-conversation gets the transcript's first one as
        // the prompt and the later ones in place (pi 1.6.0); a forced prompt (an extension's
        // `before_agent_start`) is sent whole at the head, as 1.6.0 projects it.
        let messages = replacement.as_deref().unwrap_or(&self.messages);
        let in_place = !pi_messages
            && served_by.is_none()
            && self.extensions.run_system_prompt.is_none()
            && provider::request::sends_mid_convo_system_messages(&request.model);
        let source = match messages.first() {
            Some(AgentMessage::System(head)) if in_place => {
                request.system_prompt = head.prompt_text();
                request.initial_tools = head.added_tools();
                &messages[1..]
            }
            _ => {
                // Otherwise the prompt is the transcript's replayed state (a section added later
                // comes last, as 1.6.0 replays it), unless an extension forced one.
                let replayed = super::system_message::replay(messages);
                if let Some(state) =
                    replayed.filter(|_| self.extensions.run_system_prompt.is_none())
                {
                    request.system_prompt = state.prompt_text();
                }
                // The prompt sent then stands for the transcript's only system message, which
                // declares the current tools (1.6.0's forced prompt does): for a model that takes
                // tool changes in place, the first ones.
                if !pi_messages
                    && served_by.is_none()
                    && provider::request::sends_mid_convo_system_messages(&request.model)
                {
                    request.initial_tools = request.tools.clone();
                }
                messages
            }
        };
        let samplings = super::system_message::Samplings {
            builtins: &self.tools.builtins,
            extension_tools: &self.tools.extension_tools,
        };
        request.strict_preferred =
            super::system_message::strict_preferred(messages, &request.tools, samplings);
        request.strict_required =
            super::system_message::strict_required(messages, &request.tools, samplings);
        // Only a model that takes grammar tools reads them (no per-request cost elsewhere).
        if request.model.compat_bool("supportsOpenAIGrammarTools") == Some(true) {
            request.grammar_tools =
                super::system_message::grammar_tools(messages, &request.tools, samplings);
        }
        let keep_system = pi_messages || source.len() < messages.len();
        let to_llm =
            |messages: &[AgentMessage]| convert::for_request(messages, block_images, keep_system);
        request.history = match &replacement {
            // This request only: the cache keeps describing the agent's own messages.
            Some(_) => {
                request.messages = to_llm(source);
                None
            }
            None if served_by.is_some() => {
                request.messages = to_llm(source);
                None
            }
            None => self.request_cache.prepare(&mut request, source, &to_llm),
        };
        let provider_thinking_level = provider::request::provider_thinking_level(&request);
        self.runs.next_request += 1;
        let req = RequestId(self.runs.next_request);
        let (sender, events) = crossbeam_channel::bounded(PROVIDER_CHANNEL_CAPACITY);
        let handle = match served_by {
            Some((extension, channel)) => {
                let payload = crate::extensions::providers::stream_request(&request);
                provider::spawn_served(req, sender, move |send, cancelled| {
                    crate::extensions::providers::serve_stream(
                        &channel, extension, &payload, send, cancelled,
                    )
                })
            }
            None => provider::spawn_stream(req, request, sender),
        };
        let mut draft = Draft::new(&model, self.io.profile);
        draft.set_provider_thinking_level(provider_thinking_level);
        self.phase = Phase::Streaming(Box::new(Stream {
            handle,
            events,
            draft,
            thinking,
            last_event: Instant::now(),
            sent_at: Instant::now(),
            lookahead: None,
            model,
            replacement,
        }));
    }

    /// Claude refused the request's strict tools for its limits: the same request goes again
    /// with the tools that prefer strict sampling non-strict, as they stay for the rest of the
    /// session (pi 1.6.0). The reply records why and keeps its start (timestamp, `durationMs`).
    fn send_without_strict_tools(&mut self, diagnostic: serde_json::Value) {
        let Phase::Streaming(stream) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let Stream {
            handle,
            events,
            mut draft,
            thinking,
            sent_at,
            model,
            replacement,
            ..
        } = *stream;
        drop(handle);
        drop(events);
        self.runs.strict_tools_refused = true;
        self.dispatch(model, thinking, replacement);
        if let Phase::Streaming(stream) = &mut self.phase {
            draft.add_diagnostic(diagnostic);
            stream.draft = draft;
            stream.sent_at = sent_at;
        }
    }

    /// pi's failure path when a request cannot even be made: only `agent_end` with an empty
    /// error reply (FACTS §4.1), kept in agent state but not persisted.
    pub(super) fn fail_before_stream(&mut self, error: String) {
        let mut failure =
            AssistantMessage::empty(&self.model.api, &self.model.provider, &self.model.id);
        failure.content = vec![ContentBlock::Text(TextContent::new(""))];
        failure.stop_reason = StopReason::Error;
        failure.error_message = Some(error);
        let failure = AgentMessage::Assistant(failure);
        let json = serialize_message(&failure);
        if let Some(run) = self.runs.current.as_mut() {
            run.messages.push(json);
            run.last_reply = Some(self.messages.len());
        }
        self.messages.push(failure);
        self.end_run();
    }

    pub(super) fn on_provider_event(&mut self, event: ProviderEvent) {
        let Phase::Streaming(stream) = &mut self.phase else {
            log::debug!(
                "provider event for request {} after its stream ended",
                event.req.0
            );
            return;
        };
        if stream.handle.req != event.req {
            log::debug!("stale provider event for request {}", event.req.0);
            return;
        }
        stream.last_event = Instant::now();
        let event: Option<Event> = match event.event {
            StreamEvent::Retrying { delay } | StreamEvent::Waiting { up_to: delay } => {
                // The provider waits silently; the stream is not idle until that wait is over.
                stream.last_event += delay;
                None
            }
            StreamEvent::Opened => (!stream.draft.started).then(|| stream.draft.start_event()),
            StreamEvent::Meta {
                response_id,
                response_model,
            } => {
                stream.draft.set_meta(response_id, response_model);
                None
            }
            StreamEvent::Diagnostic(diagnostic) => {
                stream.draft.add_diagnostic(diagnostic);
                None
            }
            StreamEvent::BlockStart { index, kind } => {
                let start = (!stream.draft.started).then(|| stream.draft.start_event());
                if let Some(start) = start {
                    self.emit(start);
                }
                let Phase::Streaming(stream) = &mut self.phase else {
                    return;
                };
                Some(stream.draft.block_start(index, kind))
            }
            StreamEvent::Delta { index, mut delta } => {
                // While the client lags behind (stdout backlog), deltas that piled up go out as
                // one update: the same text in fewer records. A client that keeps up sees every
                // provider delta as its own record.
                let capacity = self.io.out.capacity().unwrap_or(1);
                let lagging = self.io.out.len() > capacity / 2;
                while lagging && delta.len() < COALESCE_LIMIT {
                    match stream.events.try_recv() {
                        Ok(ProviderEvent {
                            req,
                            event:
                                StreamEvent::Delta {
                                    index: next,
                                    delta: more,
                                },
                        }) if req == stream.handle.req && next == index => delta.push_str(&more),
                        Ok(other) => {
                            stream.lookahead = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                stream.draft.delta(index, delta)
            }
            StreamEvent::BlockEnd { index, signature } => {
                if let Some(held) = stream.draft.flush_held(index) {
                    self.emit(held);
                }
                let Phase::Streaming(stream) = &mut self.phase else {
                    return;
                };
                stream.draft.block_end(index, signature)
            }
            StreamEvent::ThinkingRedacted { index, redacted } => {
                stream.draft.set_redacted(index, redacted);
                None
            }
            StreamEvent::Usage(usage) => {
                stream.draft.set_usage(usage);
                None
            }
            StreamEvent::PricedUsage(usage) => {
                stream.draft.set_priced_usage(usage);
                None
            }
            StreamEvent::CostMultiplier(multiplier) => {
                stream.draft.multiply_cost(multiplier);
                None
            }
            StreamEvent::RawStopReason(reason) => {
                stream.draft.set_raw_stop_reason(reason);
                None
            }
            StreamEvent::EndTurn(end_turn) => {
                stream.draft.set_end_turn(end_turn);
                None
            }
            StreamEvent::Done {
                stop_reason,
                error_message,
            } => {
                self.finish_stream(stop_reason, error_message);
                return;
            }
            StreamEvent::Failed(error) => {
                self.runs.retry_after = error.retry_after;
                self.finish_stream(StopReason::Error, Some(error.message));
                return;
            }
            StreamEvent::StrictToolsRefused { diagnostic, .. } => {
                self.send_without_strict_tools(diagnostic);
                return;
            }
        };
        if let Some(event) = event {
            self.emit(event);
        }
    }

    pub(super) fn fail_stream(&mut self, error: String) {
        if matches!(self.phase, Phase::Streaming(_)) {
            self.finish_stream(StopReason::Error, Some(error));
        }
    }

    /// Closes the streamed reply (dropping the request handle) and decides what follows.
    pub(super) fn finish_stream(&mut self, stop_reason: StopReason, error_message: Option<String>) {
        let Phase::Streaming(stream) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let Stream {
            handle,
            events,
            mut draft,
            sent_at,
            thinking,
            ..
        } = *stream;
        drop(handle);
        drop(events);
        // pi 1.6.0 times each finished reply and records the level its request asked for.
        draft.set_timing(sent_at.elapsed(), thinking);
        if !draft.started {
            let start = draft.start_event();
            self.emit(start);
        }
        // Blocks the stream left open: their held tails still go out as deltas (before an
        // abort closes them).
        for held in draft.flush_all_held() {
            self.emit(held);
        }
        if stop_reason == StopReason::Aborted {
            for close in draft.close_open_blocks(error_message.as_deref()) {
                self.emit(close);
            }
        }
        let (message, json) = draft.finish_serialized(stop_reason, error_message);
        self.record_message(&message, &json);
        self.emit(Event::MessageEnd {
            message: json.clone(),
        });
        let AgentMessage::Assistant(assistant) = &message else {
            unreachable!("built as an assistant message above")
        };
        let stop_reason = assistant.stop_reason;
        let calls: Vec<ToolCall> = assistant.tool_calls().cloned().collect();
        self.messages.push(message);
        if stop_reason != StopReason::Error {
            self.runs.overflow_recovery_attempted = false;
        }
        if stop_reason != StopReason::Error && self.runs.retry_attempt > 0 {
            let attempt = std::mem::take(&mut self.runs.retry_attempt);
            self.emit(Event::AutoRetryEnd {
                success: true,
                attempt,
                final_error: None,
            });
        }

        let aborted = self.runs.current.as_ref().is_some_and(|r| r.aborted);
        match stop_reason {
            StopReason::Error | StopReason::Aborted => {
                self.emit(Event::TurnEnd {
                    message: json.clone(),
                    tool_results: Vec::new(),
                });
                self.end_run();
            }
            _ if aborted => {
                self.emit(Event::TurnEnd {
                    message: json.clone(),
                    tool_results: Vec::new(),
                });
                self.end_run();
            }
            _ if !calls.is_empty() => self.start_tools(json, calls),
            _ => {
                self.emit(Event::TurnEnd {
                    message: json.clone(),
                    tool_results: Vec::new(),
                });
                self.after_turn(false);
            }
        }
    }
}
