//! (v2) Virtual models (pi 1.6.0 `docs/virtual-models.md`): a selectable model whose every
//! request an extension routes to a physical model.
//!
//! Selection and dispatch stay apart, as in 1.6.0: the selection (the virtual model and level)
//! is the agent's model and thinking level, recorded by `model_change` / `thinking_level_change`
//! and shown by `get_state`; each request asks the registering extension (`route`) for the
//! physical pair, which the request uses and its assistant message records (`provider`, `api`,
//! `model`, `thinkingLevel`). Router state the extension returns is stored on the session branch
//! as a `custom` entry of type `pi.virtual-model-state` (`{provider, modelId, state}`) and given
//! back with later requests. The wait for the route is one more step before the request, like
//! the `context` hook: the agent answers commands meanwhile, an abort ends it, and the router's
//! deadline (the hook deadline) bounds it.

use serde_json::{Value, json};

use super::Agent;
use crate::config::{Model, ThinkingLevel};
use crate::extensions::protocol::VirtualModelDecl;
use crate::extensions::{ExtensionId, HookId};
use crate::messages::{AgentMessage, AssistantMessage, ContentBlock, StopReason, TextContent};
use crate::rpc::events::Event;

/// The custom entry type that stores router state on the session branch (pi 1.6.0).
pub const STATE_ENTRY: &str = "pi.virtual-model-state";

/// A summary request waiting for its route (`reason: "direct"`).
pub struct DirectRoute {
    pub id: HookId,
    /// The virtual model it was asked for.
    model: Model,
}

/// A request waiting for its route.
pub struct PendingRoute {
    pub id: HookId,
    /// The virtual model it was asked for.
    pub model: Model,
    /// The router state the request was asked with (Null: none).
    pub state: Value,
}

impl Agent {
    /// `register_virtual_model`: into the registry, routed by `extension` from now on.
    pub(super) fn register_virtual_model(
        &mut self,
        extension: ExtensionId,
        decl: &VirtualModelDecl,
    ) -> Result<Value, String> {
        self.config
            .register_virtual_model(crate::extensions::providers::virtual_model_entry(decl))?;
        let key = (decl.provider.clone(), decl.id.clone());
        self.extensions.virtual_models.insert(key, extension);
        self.refresh_current_model();
        Ok(Value::Null)
    }

    /// `unregister_virtual_model`: whether it was registered (by any extension).
    pub(super) fn unregister_virtual_model(&mut self, provider: &str, id: &str) -> Value {
        let removed = self.config.unregister_virtual_model(provider, id);
        self.extensions
            .virtual_models
            .remove(&(provider.to_string(), id.to_string()));
        json!(removed)
    }

    /// The extensions are gone (reload, session change): their virtual models go too (the new
    /// ones register again, as pi rebuilds its runtime).
    pub(super) fn drop_virtual_models(&mut self) {
        for ((provider, id), _) in std::mem::take(&mut self.extensions.virtual_models) {
            self.config.unregister_virtual_model(&provider, &id);
        }
    }

    /// A request of the current (virtual) model: ask its extension for the route. Answered by
    /// `on_routed`.
    pub(super) fn route_request(&mut self, failed: Option<AssistantMessage>) {
        let key = (self.model.provider.clone(), self.model.id.clone());
        let owner = self.extensions.virtual_models.get(&key).copied();
        let (Some(owner), Some(host)) = (owner, self.extensions.host.as_ref()) else {
            let error = format!(
                "Virtual model {}/{} is not registered.",
                self.model.provider, self.model.id
            );
            let model = self.model.clone();
            self.fail_routing(&model, error);
            return;
        };
        let messages = &self.messages;
        // Only messages the user wrote start a turn (pi 1.6.0).
        let last_reply = messages
            .iter()
            .rposition(|m| matches!(m, AgentMessage::Assistant(_)));
        let user_turn = messages[last_reply.map_or(0, |i| i + 1)..]
            .iter()
            .any(|m| matches!(m, AgentMessage::User(_)));
        let reason = match (&failed, user_turn) {
            (Some(_), _) => "retry",
            (None, true) => "user",
            (None, false) => "continuation",
        };
        let state = self.router_state(&self.model.provider, &self.model.id);
        let mut request = self.route_payload(reason, messages);
        if let Some(failed) = &failed
            && let Some(model) = self.physical_model(&failed.provider, &failed.model)
        {
            request.insert(
                "failed".into(),
                json!({"model": model, "thinkingLevel": failed.thinking_level, "message": failed}),
            );
        }
        if !state.is_null() {
            request.insert("state".into(), state.clone());
        }
        request.insert("messages".into(), json!(messages));
        let deadline = self.extensions.hook_deadline;
        let id = host.ask("route", owner, Value::Object(request), deadline);
        self.extensions.route = Some(PendingRoute {
            id,
            model: self.model.clone(),
            state,
        });
    }

    /// The router answered (or failed): store new state, then send the request to the physical
    /// model; a failed route ends the run with an error response. Err(the result back) when
    /// `id` is not the route waited for (another request's answer, or an abort ended the wait).
    pub(super) fn on_routed(
        &mut self,
        id: HookId,
        result: Result<Value, String>,
    ) -> Result<(), Result<Value, String>> {
        if self.extensions.route.as_ref().is_none_or(|r| r.id != id) {
            return self.on_direct_routed(id, result);
        }
        let Some(pending) = self.extensions.route.take() else {
            return Err(result);
        };
        let waiting = self.runs.current.as_ref().is_some_and(|run| !run.aborted);
        if !waiting {
            return Ok(());
        }
        let name = format!(
            "Virtual model {}/{}",
            pending.model.provider, pending.model.id
        );
        match self.check_route(&name, result) {
            Ok((model, level, state)) => {
                if let Some(state) = state.filter(|s| is_new_state(s, &pending.state)) {
                    self.store_router_state(&pending.model, state);
                }
                if self.request_needs_compaction(&model) {
                    let origin = super::state::CompactionOrigin::BeforeRoutedRequest {
                        model: Box::new(model),
                        thinking: level,
                    };
                    self.start_compaction(
                        super::compaction::CompactionReason::Threshold,
                        origin,
                        None,
                    );
                    return Ok(());
                }
                self.extensions.routed = Some((model, level));
                self.ask_context_hook();
            }
            Err(error) => self.fail_routing(&pending.model, error),
        }
        Ok(())
    }

    /// The fields every route request has: the selection, why, and the latest physical answer.
    fn route_payload(
        &self,
        reason: &str,
        messages: &[AgentMessage],
    ) -> serde_json::Map<String, Value> {
        let mut request = serde_json::Map::new();
        request.insert("model".into(), json!(self.model));
        request.insert("thinkingLevel".into(), json!(self.thinking.as_str()));
        request.insert("reason".into(), json!(reason));
        if let Some(previous) = self.previous_response(messages) {
            request.insert("previous".into(), previous);
        }
        request
    }

    /// A summary request (compaction, a branch summary) of the current (virtual) selection asks
    /// its router once, with `reason: "direct"`, no router state and the conversation (pi 1.6.0's
    /// `_getSummarizationRequestAuth`). Err: nobody routes the model any more.
    pub(super) fn ask_direct_route(&self) -> Result<DirectRoute, String> {
        let key = (self.model.provider.clone(), self.model.id.clone());
        let owner = self.extensions.virtual_models.get(&key).copied();
        let (Some(owner), Some(host)) = (owner, self.extensions.host.as_ref()) else {
            return Err(format!(
                "Virtual model {}/{} is not registered.",
                self.model.provider, self.model.id
            ));
        };
        let mut request = self.route_payload("direct", &self.messages);
        request.insert("messages".into(), json!(self.messages));
        let deadline = self.extensions.hook_deadline;
        let id = host.ask("route", owner, Value::Object(request), deadline);
        Ok(DirectRoute {
            id,
            model: self.model.clone(),
        })
    }

    /// The physical pair a direct route answered; state it returns is ignored, as 1.6.0 does.
    pub(super) fn direct_route_result(
        &self,
        route: &DirectRoute,
        result: Result<Value, String>,
    ) -> Result<(Model, ThinkingLevel), String> {
        let name = format!("Virtual model {}/{}", route.model.provider, route.model.id);
        self.check_route(&name, result)
            .map(|(model, level, _state)| (model, level))
    }

    /// An answer that may be a summary request's route; Err(the result back) when nothing
    /// waits for `id` (an abort dropped the request, or it is another kind of answer).
    fn on_direct_routed(
        &mut self,
        id: HookId,
        result: Result<Value, String>,
    ) -> Result<(), Result<Value, String>> {
        let compaction = matches!(&self.phase, super::state::Phase::Compacting(c)
            if c.route.as_ref().is_some_and(|(r, _)| r.id == id));
        if compaction {
            self.on_compaction_routed(result);
            return Ok(());
        }
        let tree = self
            .extensions
            .tree
            .as_ref()
            .and_then(|t| t.route.as_ref())
            .is_some_and(|r| r.id == id);
        if tree {
            self.on_branch_summary_routed(result);
            return Ok(());
        }
        Err(result)
    }

    /// A route that failed ends the run with an error response naming the virtual model, as
    /// 1.6.0 does (`message_start` / `message_end` / `turn_end`, recorded in the session).
    fn fail_routing(&mut self, model: &Model, error: String) {
        let mut failure = AssistantMessage::empty(&model.api, &model.provider, &model.id);
        failure.content = vec![ContentBlock::Text(TextContent::new(""))];
        failure.stop_reason = StopReason::Error;
        failure.error_message = Some(error);
        let message = AgentMessage::Assistant(failure);
        let json = super::serialize_message(&message);
        self.emit(Event::MessageStart {
            message: json.clone(),
        });
        self.record_message(&message, &json);
        self.emit(Event::MessageEnd {
            message: json.clone(),
        });
        self.messages.push(message);
        self.emit(Event::TurnEnd {
            message: json,
            tool_results: Vec::new(),
        });
        self.end_run();
    }

    /// The answer's physical model (with credentials), its clamped level and new state.
    fn check_route(
        &self,
        name: &str,
        result: Result<Value, String>,
    ) -> Result<(Model, ThinkingLevel, Option<Value>), String> {
        // An error answer is the router's own error (pi 1.6.0: what `route()` threw).
        let answer = result?;
        let target = answer.get("model");
        let field = |key: &str| target.and_then(|t| t.get(key)).and_then(Value::as_str);
        let (Some(provider), Some(id)) = (field("provider"), field("id")) else {
            return Err(format!(
                "{name}: the route's model must be {{provider, id}}"
            ));
        };
        let routed = format!("{name} routed to {provider}/{id}");
        let model = self
            .physical_model(provider, id)
            .ok_or_else(|| format!("{routed}, which is not a physical model."))?;
        if !self.config.has_auth(provider) {
            return Err(format!("{routed}, which has no credentials."));
        }
        let level = match answer.get("thinkingLevel") {
            None | Some(Value::Null) => ThinkingLevel::Off,
            Some(level) => level
                .as_str()
                .and_then(ThinkingLevel::parse)
                .ok_or_else(|| format!("{name}: the route's thinking level {level} is unknown"))?,
        };
        let level = model.clamp_thinking_level(level);
        let state = answer.get("state").filter(|s| !s.is_null()).cloned();
        Ok((model, level, state))
    }

    fn physical_model(&self, provider: &str, id: &str) -> Option<Model> {
        self.config
            .find_model(provider, id)
            .filter(|m| !m.is_virtual())
    }

    /// The model whose limits (context window) apply to `reply`: under a virtual selection the
    /// physical model that wrote it, else (or when none did) the selection (pi 1.6.0's
    /// `_modelForMessage(message) ?? model`).
    pub(super) fn limits_model(&self, reply: &AssistantMessage) -> std::borrow::Cow<'_, Model> {
        if self.model.is_virtual()
            && let Some(model) = self.physical_model(&reply.provider, &reply.model)
        {
            return std::borrow::Cow::Owned(model);
        }
        std::borrow::Cow::Borrowed(&self.model)
    }

    /// The model whose limits the context usage shows: under a virtual selection the physical
    /// model of the latest successful response, if any (pi 1.6.0's `routedModel`).
    pub(super) fn usage_limits_model(&self) -> std::borrow::Cow<'_, Model> {
        if self.model.is_virtual()
            && let Some(latest) = latest_response(&self.messages)
            && let Some(model) = self.physical_model(&latest.provider, &latest.model)
        {
            return std::borrow::Cow::Owned(model);
        }
        std::borrow::Cow::Borrowed(&self.model)
    }

    /// `previous`: the physical model and level of the latest successful response.
    fn previous_response(&self, messages: &[AgentMessage]) -> Option<Value> {
        let latest = latest_response(messages)?;
        let model = self.physical_model(&latest.provider, &latest.model)?;
        Some(json!({"model": model, "thinkingLevel": latest.thinking_level}))
    }

    /// The router state the session branch stores for this virtual model (Null: none).
    fn router_state(&self, provider: &str, id: &str) -> Value {
        self.session
            .branch()
            .iter()
            .rev()
            .map(|entry| entry.to_value())
            .find(|entry| {
                entry["type"] == "custom"
                    && entry["customType"] == STATE_ENTRY
                    && entry["data"]["provider"] == provider
                    && entry["data"]["modelId"] == id
            })
            .map(|entry| entry["data"]["state"].clone())
            .unwrap_or(Value::Null)
    }

    /// Stores new router state on the branch (announced by `entry_appended`, as 1.6.0 does).
    fn store_router_state(&mut self, model: &Model, state: Value) {
        let data = json!({"provider": model.provider, "modelId": model.id, "state": state});
        match self.session.append_custom(STATE_ENTRY, Some(data)) {
            Ok(id) => {
                if let Some(entry) = self.session.entry(&id).map(|e| e.to_value()) {
                    self.emit(Event::EntryAppended { entry });
                }
            }
            Err(e) => log::error!("could not store the router state: {e}"),
        }
    }
}

/// The latest successful response (not failed, not aborted: its model is physical).
fn latest_response(messages: &[AgentMessage]) -> Option<&AssistantMessage> {
    messages.iter().rev().find_map(|m| match m {
        AgentMessage::Assistant(a)
            if !matches!(a.stop_reason, StopReason::Error | StopReason::Aborted) =>
        {
            Some(a)
        }
        _ => None,
    })
}

/// Whether a router's answered `state` is stored: as pi 1.6.0 compares it with the current one
/// (`!==`), an object or array is always a new state, a string, number or boolean only when its
/// value differs. (`null` and no `state` keep the current one: `check_route` drops them.)
fn is_new_state(answered: &Value, current: &Value) -> bool {
    answered.is_object() || answered.is_array() || answered != current
}
