//! The model record and thinking levels: the `Model` object clients see in get_state, set_model,
//! get_available_models (pi's key order), and the level vocabulary with pi's supported-level and
//! clamping rules (`ai:dist/models.js :: getSupportedThinkingLevels, clampThinkingLevel`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::js::js_number;
use crate::messages::Usage;

/// A model's prices in dollars per million tokens (`cost` in the catalog and models.json).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelCost {
    #[serde(default, serialize_with = "js_number")]
    pub input: f64,
    #[serde(default, serialize_with = "js_number")]
    pub output: f64,
    #[serde(rename = "cacheRead", default, serialize_with = "js_number")]
    pub cache_read: f64,
    #[serde(rename = "cacheWrite", default, serialize_with = "js_number")]
    pub cache_write: f64,
    /// Request-wide price tiers (`cost.tiers`): the one with the highest `inputTokensAbove` below
    /// the request's input tokens prices the whole request.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tiers: Option<Vec<CostTier>>,
}

/// One `cost.tiers` entry: the prices used when a request's input exceeds `inputTokensAbove`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CostTier {
    #[serde(rename = "inputTokensAbove", serialize_with = "js_number")]
    pub input_tokens_above: f64,
    #[serde(default, serialize_with = "js_number")]
    pub input: f64,
    #[serde(default, serialize_with = "js_number")]
    pub output: f64,
    #[serde(rename = "cacheRead", default, serialize_with = "js_number")]
    pub cache_read: f64,
    #[serde(rename = "cacheWrite", default, serialize_with = "js_number")]
    pub cache_write: f64,
}

impl ModelCost {
    /// Fills `usage.cost` from these per-million-token prices (pi-ai's calculateCost): the
    /// matching tier's rates when the request's input (fresh + cache read + cache write) is above
    /// a tier's threshold, else the base rates.
    pub fn apply_to(&self, usage: &mut Usage) {
        let input_tokens = (usage.input + usage.cache_read + usage.cache_write) as f64;
        let mut rates = [self.input, self.output, self.cache_read, self.cache_write];
        let mut matched = -1.0;
        for tier in self.tiers.iter().flatten() {
            if input_tokens > tier.input_tokens_above && tier.input_tokens_above > matched {
                rates = [tier.input, tier.output, tier.cache_read, tier.cache_write];
                matched = tier.input_tokens_above;
            }
        }
        let [input, output, cache_read, cache_write] = rates;
        usage.cost.input = input / 1e6 * usage.input as f64;
        usage.cost.output = output / 1e6 * usage.output as f64;
        usage.cost.cache_read = cache_read / 1e6 * usage.cache_read as f64;
        // One-hour cache writes cost twice the input price (pi 1.6.0, Anthropic's rule).
        let long_write = usage.cache_write_1h.unwrap_or(0).min(usage.cache_write);
        let short_write = usage.cache_write - long_write;
        usage.cost.cache_write =
            (cache_write * short_write as f64 + input * 2.0 * long_write as f64) / 1e6;
        usage.cost.total =
            usage.cost.input + usage.cost.output + usage.cost.cache_read + usage.cost.cache_write;
        usage.cost.total_from_provider = Some(false);
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub id: String,
    pub name: String,
    pub api: String,
    pub provider: String,
    #[serde(rename = "baseUrl")]
    pub base_url: String,
    pub reasoning: bool,
    /// Level → provider value; `null` removes a level (e.g. gpt-5.4 has no "off").
    #[serde(
        rename = "thinkingLevelMap",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub thinking_level_map: Option<Map<String, Value>>,
    pub input: Vec<String>,
    pub cost: ModelCost,
    #[serde(rename = "contextWindow")]
    pub context_window: u64,
    #[serde(rename = "maxTokens")]
    pub max_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub headers: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub compat: Option<Map<String, Value>>,
    /// Every other field of the model as the reference's catalog (or models.json) has it, in its
    /// order: `inputLimits`, `promptCache`, `type`, radius's `lab`/`enabled`/`providers`/`free`.
    #[serde(flatten, default)]
    pub extra: Map<String, Value>,
}

/// The `api` of a virtual model's catalog entry (pi 1.6.0): requests for it are routed first.
pub const VIRTUAL_MODEL_API: &str = "pi-virtual";

impl Model {
    /// A virtual model (an extension routes each of its requests to a physical model).
    pub fn is_virtual(&self) -> bool {
        self.api == VIRTUAL_MODEL_API
    }

    /// `inputLimits` (images: `resize` bounds), from the catalog or models.json; `None` means
    /// pi's defaults.
    pub fn input_limits(&self) -> Option<&Value> {
        self.extra.get("inputLimits").filter(|v| v.is_object())
    }

    /// The placeholder pi keeps when no model is available (FACTS §1.1): get_state shows it and
    /// prompts fail with the no-API-key message.
    pub fn placeholder() -> Model {
        Model {
            id: "unknown".into(),
            name: "unknown".into(),
            api: "unknown".into(),
            provider: "unknown".into(),
            base_url: String::new(),
            reasoning: false,
            thinking_level_map: None,
            input: Vec::new(),
            cost: ModelCost::default(),
            context_window: 0,
            max_tokens: 0,
            headers: None,
            compat: None,
            extra: Map::new(),
        }
    }

    pub fn is_placeholder(&self) -> bool {
        self.provider == "unknown" && self.id == "unknown" && self.api == "unknown"
    }

    pub fn supports_images(&self) -> bool {
        self.input.iter().any(|i| i == "image")
    }

    /// A `compat` flag from models.json, if set.
    pub fn compat_bool(&self, key: &str) -> Option<bool> {
        self.compat.as_ref()?.get(key)?.as_bool()
    }

    pub fn compat_str(&self, key: &str) -> Option<&str> {
        self.compat.as_ref()?.get(key)?.as_str()
    }

    /// The levels this model accepts, in cycling order.
    pub fn supported_thinking_levels(&self) -> Vec<ThinkingLevel> {
        if !self.reasoning {
            return vec![ThinkingLevel::Off];
        }
        let map = self.thinking_level_map.as_ref();
        ThinkingLevel::ALL
            .iter()
            .copied()
            .filter(|level| {
                let entry = map.and_then(|m| m.get(level.as_str()));
                match level {
                    // Extended levels exist only when the model maps them.
                    ThinkingLevel::Xhigh | ThinkingLevel::Max => {
                        entry.is_some_and(|v| !v.is_null())
                    }
                    _ => !entry.is_some_and(Value::is_null),
                }
            })
            .collect()
    }

    /// Nearest supported level: the level itself, else the next one up, else the next one down.
    pub fn clamp_thinking_level(&self, level: ThinkingLevel) -> ThinkingLevel {
        let supported = self.supported_thinking_levels();
        if supported.contains(&level) {
            return level;
        }
        let rank = level.rank();
        if let Some(up) = supported.iter().find(|l| l.rank() > rank) {
            return *up;
        }
        supported
            .iter()
            .rev()
            .find(|l| l.rank() < rank)
            .copied()
            .unwrap_or(ThinkingLevel::Off)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingLevel {
    Off,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

impl ThinkingLevel {
    pub const ALL: [ThinkingLevel; 7] = [
        ThinkingLevel::Off,
        ThinkingLevel::Minimal,
        ThinkingLevel::Low,
        ThinkingLevel::Medium,
        ThinkingLevel::High,
        ThinkingLevel::Xhigh,
        ThinkingLevel::Max,
    ];

    pub fn parse(s: &str) -> Option<ThinkingLevel> {
        ThinkingLevel::ALL.iter().copied().find(|l| l.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ThinkingLevel::Off => "off",
            ThinkingLevel::Minimal => "minimal",
            ThinkingLevel::Low => "low",
            ThinkingLevel::Medium => "medium",
            ThinkingLevel::High => "high",
            ThinkingLevel::Xhigh => "xhigh",
            ThinkingLevel::Max => "max",
        }
    }

    fn rank(self) -> usize {
        ThinkingLevel::ALL
            .iter()
            .position(|l| *l == self)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reasoning_model(map: Value) -> Model {
        let mut m = Model::placeholder();
        m.reasoning = true;
        m.thinking_level_map = map.as_object().cloned();
        m
    }

    #[test]
    fn non_reasoning_models_only_have_off() {
        assert_eq!(
            Model::placeholder().supported_thinking_levels(),
            vec![ThinkingLevel::Off]
        );
    }

    #[test]
    fn null_entries_remove_levels_and_xhigh_needs_a_mapping() {
        let m = reasoning_model(json!({"off": null, "xhigh": "xhigh"}));
        use ThinkingLevel::*;
        assert_eq!(
            m.supported_thinking_levels(),
            vec![Minimal, Low, Medium, High, Xhigh]
        );
        let plain = reasoning_model(json!({}));
        assert_eq!(plain.clamp_thinking_level(Xhigh), High);
        assert_eq!(m.clamp_thinking_level(Off), Minimal);
    }
}
