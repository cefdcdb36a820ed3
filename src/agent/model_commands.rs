//! The client's model and thinking-level requests (`set_model`, `cycle_model`,
//! `get_available_models`, `set_thinking_level`, `cycle_thinking_level`,
//! `get_available_thinking_levels`), each answered at once, and the two changes they share:
//! `switch_model` and `change_thinking_level`. As pi 1.6.0 (since 0.84.3) both are the session's
//! own: recorded as session entries (`model_change`, `thinking_level_change`), announced by an
//! event, never written to the global settings.

use serde_json::{Value, json};

use super::Agent;
use crate::config::{Model, ThinkingLevel};
use crate::rpc::events::Event;

impl Agent {
    pub(super) fn set_model(&mut self, id: Option<&Value>, provider: &str, model_id: &str) {
        let found = self
            .config
            .available_models()
            .into_iter()
            .find(|m| m.provider == provider && m.id == model_id);
        match found {
            Some(model) => {
                self.switch_model(model.clone(), None, "set");
                let data = serde_json::to_value(&model).unwrap_or(Value::Null);
                self.respond_ok(id, "set_model", Some(data));
            }
            None => self.respond_error(
                id,
                "set_model",
                &format!("Model not found: {provider}/{model_id}"),
            ),
        }
    }

    pub(super) fn cycle_model(&mut self, id: Option<&Value>) {
        let available = self.config.available_models();
        let is_scoped = !self.settings.scoped_models.is_empty();
        let candidates: Vec<(Model, Option<ThinkingLevel>)> = if is_scoped {
            // Only the scoped models that are still available, as pi.
            self.settings
                .scoped_models
                .iter()
                .filter(|s| {
                    available
                        .iter()
                        .any(|m| m.provider == s.model.provider && m.id == s.model.id)
                })
                .map(|s| (s.model.clone(), s.thinking))
                .collect()
        } else {
            available.into_iter().map(|m| (m, None)).collect()
        };
        let current = candidates
            .iter()
            .position(|(m, _)| m.provider == self.model.provider && m.id == self.model.id);
        // pi: the first when the current model is not among them; nothing to do with one.
        let next = match (current, candidates.len()) {
            (_, 0) | (Some(_), 1) => None,
            (None, _) => Some(0),
            (Some(p), n) => Some((p + 1) % n),
        };
        let Some(next) = next else {
            self.respond_ok(id, "cycle_model", Some(Value::Null));
            return;
        };
        let (model, level) = candidates[next].clone();
        self.switch_model(model, level, "cycle");
        let data = json!({
            "model": serde_json::to_value(&self.model).unwrap_or(Value::Null),
            "thinkingLevel": self.thinking.as_str(),
            "isScoped": is_scoped,
        });
        self.respond_ok(id, "cycle_model", Some(data));
    }

    pub(super) fn get_available_models(&mut self, id: Option<&Value>) {
        let models = self.config.available_models();
        self.respond_ok(
            id,
            "get_available_models",
            Some(json!({ "models": models })),
        );
    }

    pub(super) fn set_thinking_level(&mut self, id: Option<&Value>, level: &str) {
        // Stricter than pi (which takes an unknown string as the first supported level): a
        // level that does not exist is refused and changes nothing.
        let Some(level) = ThinkingLevel::parse(level) else {
            let known: Vec<&str> = ThinkingLevel::ALL.iter().map(|l| l.as_str()).collect();
            let error = format!(
                "Invalid thinking level \"{level}\": expected one of {}",
                known.join(", ")
            );
            self.respond_error(id, "set_thinking_level", &error);
            return;
        };
        let level = self.model.clamp_thinking_level(level);
        self.change_thinking_level(level);
        self.respond_ok(id, "set_thinking_level", None);
    }

    pub(super) fn cycle_thinking_level(&mut self, id: Option<&Value>) {
        if !self.model.reasoning {
            self.respond_ok(id, "cycle_thinking_level", Some(Value::Null));
            return;
        }
        let levels = self.model.supported_thinking_levels();
        let position = levels.iter().position(|l| *l == self.thinking);
        let next = levels[position.map_or(0, |p| (p + 1) % levels.len())];
        self.change_thinking_level(next);
        let data = json!({ "level": next.as_str() });
        self.respond_ok(id, "cycle_thinking_level", Some(data));
    }

    pub(super) fn get_available_thinking_levels(&mut self, id: Option<&Value>) {
        let levels: Vec<&str> = self
            .model
            .supported_thinking_levels()
            .iter()
            .map(|l| l.as_str())
            .collect();
        let data = json!({ "levels": levels });
        self.respond_ok(id, "get_available_thinking_levels", Some(data));
    }

    /// Switches model: recorded in the session, then the thinking level pi 1.6.0 picks for the
    /// new model — `explicit` (a scoped model's own level), else the settings'
    /// `modelThinkingLevels["provider/id"]`, else `defaultThinkingLevel`, else the current
    /// level — clamped to what the new model supports (an event only when it changes).
    /// (v2) Extensions hear of it as pi's `model_select` (`source`: "set" or "cycle").
    pub(super) fn switch_model(
        &mut self,
        model: Model,
        explicit: Option<ThinkingLevel>,
        source: &str,
    ) {
        let previous = serde_json::to_value(&self.model).unwrap_or(Value::Null);
        let wanted = explicit
            .or_else(|| self.config.model_thinking_level(&model.provider, &model.id))
            .or_else(|| self.config.default_thinking_level())
            .unwrap_or(self.thinking);
        self.model = model;
        self.notify_extensions_of(json!({
            "type": "model_select",
            "model": serde_json::to_value(&self.model).unwrap_or(Value::Null),
            "previousModel": previous,
            "source": source,
        }));
        if let Err(e) = self
            .session
            .append_model_change(&self.model.provider, &self.model.id)
        {
            log::error!("could not record the model change: {e}");
        }
        let level = self.model.clamp_thinking_level(wanted);
        self.change_thinking_level(level);
    }

    /// Applies an effective thinking-level change: session entry and event; nothing when the
    /// level is the current one.
    pub(super) fn change_thinking_level(&mut self, level: ThinkingLevel) {
        if level == self.thinking {
            return;
        }
        self.notify_extensions_of(json!({
            "type": "thinking_level_select",
            "level": level.as_str(),
            "previousLevel": self.thinking.as_str(),
        }));
        self.thinking = level;
        if let Err(e) = self.session.append_thinking_level_change(level) {
            log::error!("could not record the thinking level change: {e}");
        }
        self.emit(Event::ThinkingLevelChanged {
            level: level.as_str().into(),
        });
    }
}
