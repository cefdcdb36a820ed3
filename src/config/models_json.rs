//! The v2 `models` query's answer (`{"all": [...], "available": [...]}`, about 950 KB with the
//! built-in catalog) as JSON text, for the TypeScript host's `ctx.modelRegistry`. Each model's
//! text is written once per full list and reused by every later answer: the host asks at its
//! start and after each provider change, and only the availability differs between answers.
//! Nothing builds it unless an extension asks.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::model::Model;
use super::registry::Registry;

/// The `models` answer to write (`write`, on a thread other than the agent's).
pub struct ModelsAnswer {
    pub source: ListSource,
    /// Whether each provider of the list has credentials.
    pub has_auth: HashMap<String, bool>,
}

/// Where the list's text comes from.
pub enum ListSource {
    /// Written already.
    Ready(Arc<ListJson>),
    /// A copy of the agent's registry: the list and its text are built from it and kept in the
    /// agent's registry too (they share the cell).
    Build(Box<Registry>),
}

impl ModelsAnswer {
    pub fn write(&self) -> String {
        let list = match &self.source {
            ListSource::Ready(list) => list.clone(),
            ListSource::Build(registry) => registry.list_json(),
        };
        let available: Vec<bool> = list
            .models()
            .iter()
            .map(|m| self.has_auth.get(&m.provider).copied().unwrap_or(false))
            .collect();
        list.answer(&available)
    }
}

/// One full model list and, once first asked for, its models' JSON text.
pub struct ListJson {
    models: Arc<[Model]>,
    text: OnceLock<Rows>,
}

/// The models' texts joined by commas in list order, and where each one ends.
struct Rows {
    joined: String,
    ends: Vec<usize>,
}

impl ListJson {
    pub fn new(models: Arc<[Model]>) -> ListJson {
        ListJson {
            models,
            text: OnceLock::new(),
        }
    }

    /// The list, in registry order.
    pub fn models(&self) -> &[Model] {
        &self.models
    }

    fn rows(&self) -> &Rows {
        self.text.get_or_init(|| {
            let mut joined = String::new();
            let mut ends = Vec::with_capacity(self.models.len());
            for model in self.models.iter() {
                if !joined.is_empty() {
                    joined.push(',');
                }
                // A `Model` always serializes (plain fields, string-keyed maps).
                let text = serde_json::to_string(model).unwrap_or_else(|_| "null".into());
                joined.push_str(&text);
                ends.push(joined.len());
            }
            Rows { joined, ends }
        })
    }

    /// `{"all":[…],"available":[…]}` as `serde_json` writes the same value: every model, and
    /// those whose index `available` accepts (a mask in list order).
    pub fn answer(&self, available: &[bool]) -> String {
        let rows = self.rows();
        let mut out = String::with_capacity(2 * rows.joined.len() + 32);
        out.push_str("{\"all\":[");
        out.push_str(&rows.joined);
        out.push_str("],\"available\":[");
        let mut first = true;
        let mut start = 0;
        for (index, &end) in rows.ends.iter().enumerate() {
            if available.get(index).copied().unwrap_or(false) {
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(&rows.joined[start..end]);
            }
            // The next row starts after the comma.
            start = end + 1;
        }
        out.push_str("]}");
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The text is what the value built from the models would print, for the whole built-in
    /// catalog: every row, a few available, none available.
    #[test]
    fn the_answer_is_the_json_of_all_and_available_models() {
        let registry = Registry::from_models_json(Some(
            r#"{"providers": {"mine": {"baseUrl": "http://127.0.0.1:1", "apiKey": "k", "api": "openai-completions",
                "models": [{"id": "m1", "headers": {"X-A": "1"}}, {"id": "m2", "reasoning": true, "input": ["text", "image"]}]}}}"#,
        ));
        let list = registry.list_json();
        let models = registry.models();
        assert!(models.len() > 1000);
        let keep = |m: &Model| m.provider == "anthropic" || m.provider == "mine";
        let mask: Vec<bool> = models.iter().map(keep).collect();
        let available: Vec<&Model> = models.iter().filter(|m| keep(m)).collect();
        let expected = json!({"all": models, "available": available}).to_string();
        assert_eq!(list.answer(&mask), expected);
        // Written once, reused: the second answer (other availability) reads the same rows.
        let expected = json!({"all": models, "available": []}).to_string();
        assert_eq!(list.answer(&vec![false; models.len()]), expected);
        assert!(Arc::ptr_eq(&list, &registry.list_json()));
    }

    /// The providers found without building the list are every provider of the list: the
    /// catalog's, models.json's, an extension's and a virtual model's.
    #[test]
    fn every_provider_of_the_list_is_found_without_building_it() {
        let mut registry = Registry::from_models_json(Some(
            r#"{"providers": {"mine": {"baseUrl": "http://127.0.0.1:1", "apiKey": "k", "api": "openai-completions",
                "models": [{"id": "m1"}]}}}"#,
        ));
        let config = json!({"baseUrl": "http://127.0.0.1:1", "apiKey": "k",
            "api": "openai-completions", "models": [{"id": "e1"}]});
        registry.register_provider("ext", &config).unwrap();
        let virtual_model = Model {
            provider: "virt".into(),
            id: "v1".into(),
            ..registry.find("mine", "m1").unwrap()
        };
        registry.register_virtual_model(virtual_model).unwrap();
        let providers = registry.list_providers();
        for model in registry.models() {
            assert!(providers.contains(&model.provider), "{}", model.provider);
        }
        for name in ["anthropic", "mine", "ext", "virt"] {
            assert!(providers.iter().any(|p| p == name), "{name}");
        }
    }

    #[test]
    fn a_provider_registered_or_removed_builds_the_text_again() {
        let mut registry = Registry::from_models_json(None);
        let before = registry.list_json();
        let config = json!({"baseUrl": "http://127.0.0.1:1", "apiKey": "k",
            "api": "openai-completions", "models": [{"id": "late"}]});
        registry.register_provider("late", &config).unwrap();
        let after = registry.list_json();
        assert!(!Arc::ptr_eq(&before, &after));
        assert!(after.models().iter().any(|m| m.id == "late"));
        let all = |list: &ListJson| list.answer(&vec![false; list.models().len()]);
        assert!(all(&after).contains(r#""id":"late""#));
        assert!(registry.unregister_provider("late"));
        assert!(!all(&registry.list_json()).contains(r#""id":"late""#));
    }
}
