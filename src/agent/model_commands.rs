//! The client's model and thinking-level requests (`set_model`, `cycle_model`,
//! `get_available_models`, `set_thinking_level`, `cycle_thinking_level`,
//! `get_available_thinking_levels`), each answered at once, and the two changes they share:
//! `switch_model` and `change_thinking_level` (recorded in the session, persisted as the default
//! in settings, announced by an event).

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
                self.switch_model(model.clone(), "set");
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
        let is_scoped = !self.settings.scoped_models.is_empty();
        let candidates: Vec<(Model, Option<ThinkingLevel>)> = if is_scoped {
            self.settings
                .scoped_models
                .iter()
                .map(|s| (s.model.clone(), s.thinking))
                .collect()
        } else {
            self.config
                .available_models()
                .into_iter()
                .map(|m| (m, None))
                .collect()
        };
        if candidates.len() <= 1 {
            self.respond_ok(id, "cycle_model", Some(Value::Null));
            return;
        }
        let current = candidates
            .iter()
            .position(|(m, _)| m.provider == self.model.provider && m.id == self.model.id);
        let (next, level) = candidates[current.map_or(0, |p| (p + 1) % candidates.len())].clone();
        self.switch_model(next, "cycle");
        if let Some(level) = level {
            let level = self.model.clamp_thinking_level(level);
            self.change_thinking_level(level, false);
        }
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
        self.change_thinking_level(level, true);
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
        self.change_thinking_level(next, true);
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

    /// Switches model: persisted as the default, recorded in the session, thinking re-clamped
    /// (kept if the old model reasons, else the default level).
    pub(super) fn switch_model(&mut self, model: Model, source: &str) {
        let previous = serde_json::to_value(&self.model).unwrap_or(Value::Null);
        let wanted = if self.model.reasoning {
            self.thinking
        } else {
            self.config
                .default_thinking_level()
                .unwrap_or(ThinkingLevel::Medium)
        };
        self.model = model;
        // (v2) Extensions hear of it (pi's `model_select`; `source`: "set" or "cycle").
        self.notify_extensions_of(json!({
            "type": "model_select",
            "model": serde_json::to_value(&self.model).unwrap_or(Value::Null),
            "previousModel": previous,
            "source": source,
        }));
        self.config
            .set_default_model(&self.model.provider, &self.model.id);
        if let Err(e) = self
            .session
            .append_model_change(&self.model.provider, &self.model.id)
        {
            log::error!("could not record the model change: {e}");
        }
        let level = self.model.clamp_thinking_level(wanted);
        self.change_thinking_level(level, false);
    }

    /// Applies an effective thinking-level change: session entry, event, settings default.
    pub(super) fn change_thinking_level(&mut self, level: ThinkingLevel, persist_default: bool) {
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
        if persist_default && (self.model.reasoning || level != ThinkingLevel::Off) {
            self.config.set_default_thinking_level(level);
        }
        self.emit(Event::ThinkingLevelChanged {
            level: level.as_str().into(),
        });
    }
}
