//! pi 1.6.0's `models-store.json` (beside models.json in the agent dir): the provider catalogs
//! pi refreshed from pi.dev (`pi update --models`, or its periodic refresh) and from the Radius
//! gateway, so new models arrive without a new build. pi-rs reads it, and writes one entry only
//! where 1.6.0 does outside its model refresh: Radius's catalog right after `pi login radius`
//! (`write_entry`); `pi auth login --api-key` leaves an empty file as 1.6.0 does (`ensure_file`).
//!
//! The file is `{ "<provider>": { "models": [<pi-ai model>…], "lastModified": <ms>, "checkedAt":
//! <ms>, "etag": … } }`. How an entry applies, as 1.6.0 applies it
//! (`coding-agent:dist/core/remote-catalog-provider.js`, `ai:dist/providers/radius.js`):
//! - a built-in provider's pi.dev catalog overlays the built-in models when its `lastModified` is
//!   newer than the built-in data (`BUILTIN_GENERATED_AT_MS`): a stored model replaces the
//!   built-in with its id in place, the others come after the provider's built-ins;
//! - `openrouter`'s entry is the user's personalised list: it replaces the built-ins when it
//!   holds any model;
//! - `radius`'s entry is the gateway's catalog: present, it replaces the shipped baseline.
//!
//! Only models whose `provider` is the entry's key and whose `type` is chat (or absent) count.
//! A model that does not read as a pi-ai model is skipped with a log line; a file that is not
//! JSON counts as absent (1.6.0's refresh fails for every provider then, leaving the built-ins).

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::model::Model;

// `BUILTIN_GENERATED_AT_MS`: when 1.6.0's built-in model data was generated
// (`ai:dist/providers/data/.manifest.json`'s `generatedAt`), written by `tests/gen_catalog.mjs`
// with the catalog: a stored pi.dev catalog overlays the built-ins only when it is newer.
include!(concat!(env!("OUT_DIR"), "/catalog_generated_at.rs"));

/// How one provider's stored catalog combines with its built-in models.
#[derive(Debug, Clone, PartialEq)]
enum Stored {
    Overlay(Vec<Model>),
    Replace(Vec<Model>),
}

/// The entries of models-store.json that change a provider's models.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelsStore {
    entries: HashMap<String, Stored>,
}

/// The file in `dir`.
fn path(dir: &Path) -> std::path::PathBuf {
    dir.join("models-store.json")
}

/// Sets `provider`'s entry of `<dir>/models-store.json` under the file's lock (proper-lockfile's
/// `<file>.lock`, as 1.6.0's store takes it), keeping the other entries; written as 1.6.0 writes
/// it (two-space JSON, mode 0600, replaced atomically). A file that is not a JSON object is an
/// error and stays as it is.
pub fn write_entry(dir: &Path, provider: &str, entry: Value) -> Result<(), String> {
    let path = path(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _lock = super::auth_lock::lock(&path, &crate::child::CancelFlag::default())
        .map_err(|e| e.to_string())?;
    let mut data = match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().is_empty() => serde_json::Map::new(),
        Ok(text) => match serde_json::from_str(text.trim_start_matches('\u{feff}')) {
            Ok(Value::Object(map)) => map,
            _ => return Err(format!("{}: not a JSON object", path.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Map::new(),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    data.insert(provider.to_string(), entry);
    let text = serde_json::to_string_pretty(&data).map_err(|e| e.to_string())?;
    super::oauth::write_private(&path, &text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Creates `<dir>/models-store.json` holding `{}` when it does not exist, as 1.6.0's model
/// runtime leaves it after `pi auth login` (its store file is created on first use, mode 0600).
pub fn ensure_file(dir: &Path) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = path(dir);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut file) => file
            .write_all(b"{}")
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

impl ModelsStore {
    /// Reads `<dir>/models-store.json`; a missing file is an empty store. The second value is
    /// why the file was ignored, if it was.
    pub fn load(dir: &Path, is_builtin: fn(&str) -> bool) -> (ModelsStore, Option<String>) {
        let path = path(dir);
        match std::fs::read(&path) {
            Ok(bytes) => match ModelsStore::parse(&String::from_utf8_lossy(&bytes), is_builtin) {
                Ok(store) => (store, None),
                Err(e) => (
                    ModelsStore::default(),
                    Some(format!("{}: {e}; its models are ignored", path.display())),
                ),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (ModelsStore::default(), None),
            Err(e) => (
                ModelsStore::default(),
                Some(format!("{}: {e}; its models are ignored", path.display())),
            ),
        }
    }

    /// The store from the file's text (`is_builtin` says which providers have a pi.dev catalog).
    pub fn parse(text: &str, is_builtin: fn(&str) -> bool) -> Result<ModelsStore, String> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        if text.trim().is_empty() {
            return Ok(ModelsStore::default());
        }
        let root: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Value::Object(root) = root else {
            return Err("not a JSON object".into());
        };
        let mut entries = HashMap::new();
        for (provider, entry) in root {
            let models = chat_models(&provider, &entry);
            let stored = match provider.as_str() {
                "radius" => Stored::Replace(models),
                "openrouter" if !models.is_empty() => Stored::Replace(models),
                "openrouter" => continue,
                _ if is_builtin(&provider) => {
                    let newer = entry
                        .get("lastModified")
                        .and_then(Value::as_f64)
                        .is_some_and(|t| t > BUILTIN_GENERATED_AT_MS);
                    if !newer || models.is_empty() {
                        continue;
                    }
                    Stored::Overlay(models)
                }
                _ => continue,
            };
            entries.insert(provider, stored);
        }
        Ok(ModelsStore { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the store gives `provider` models (a built-in provider without catalog rows may
    /// get its first ones here).
    pub fn has_provider(&self, provider: &str) -> bool {
        match self.entries.get(provider) {
            Some(Stored::Overlay(models) | Stored::Replace(models)) => !models.is_empty(),
            None => false,
        }
    }

    /// The provider's models: its built-in ones (`builtins`, catalog order) with its stored
    /// catalog applied.
    pub fn apply(&self, provider: &str, mut builtins: Vec<Model>) -> Vec<Model> {
        match self.entries.get(provider) {
            None => builtins,
            Some(Stored::Replace(models)) => models.clone(),
            Some(Stored::Overlay(models)) => {
                for model in models {
                    match builtins.iter().position(|m| m.id == model.id) {
                        Some(i) => builtins[i] = model.clone(),
                        None => builtins.push(model.clone()),
                    }
                }
                builtins
            }
        }
    }
}

/// The entry's chat models of that provider, in file order; a later model with the same id
/// replaces an earlier one in its place (1.6.0 merges them by id).
fn chat_models(provider: &str, entry: &Value) -> Vec<Model> {
    let mut models: Vec<Model> = Vec::new();
    let list = entry.get("models").and_then(Value::as_array);
    for value in list.into_iter().flatten() {
        if value.get("provider").and_then(Value::as_str) != Some(provider) {
            continue;
        }
        match value.get("type") {
            None | Some(Value::Null) => {}
            Some(t) if t == "chat" => {}
            Some(_) => continue,
        }
        match serde_json::from_value::<Model>(value.clone()) {
            Ok(model) => match models.iter().position(|m| m.id == model.id) {
                Some(i) => models[i] = model,
                None => models.push(model),
            },
            Err(e) => log::warn!(
                "models-store.json: a {provider} model ({}) is skipped: {e}",
                value.get("id").and_then(Value::as_str).unwrap_or("no id")
            ),
        }
    }
    models
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn builtin(provider: &str) -> bool {
        ["anthropic", "openai", "openrouter", "radius"].contains(&provider)
    }

    fn model(provider: &str, id: &str, name: &str) -> Value {
        json!({"id": id, "name": name, "api": "anthropic-messages", "provider": provider,
               "baseUrl": "https://example.test", "reasoning": true, "input": ["text"],
               "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0},
               "contextWindow": 1000, "maxTokens": 100})
    }

    fn base(ids: &[&str]) -> Vec<Model> {
        ids.iter()
            .map(|id| serde_json::from_value(model("anthropic", id, "built-in")).unwrap())
            .collect()
    }

    #[test]
    fn a_newer_catalog_overlays_in_place_and_appends() {
        let newer = BUILTIN_GENERATED_AT_MS + 1.0;
        let text = json!({
            "anthropic": {"lastModified": newer, "models": [
                model("anthropic", "b", "stored b"),
                model("anthropic", "new", "stored new"),
                model("openai", "elsewhere", "x"),
                {"type": "image", "id": "img", "provider": "anthropic"},
                {"id": "broken", "provider": "anthropic"},
            ]},
            "openai": {"lastModified": BUILTIN_GENERATED_AT_MS, "models": [model("openai", "old", "x")]},
            "not-a-provider": {"lastModified": newer, "models": [model("not-a-provider", "x", "x")]},
        })
        .to_string();
        let store = ModelsStore::parse(&text, builtin).unwrap();
        let merged = store.apply("anthropic", base(&["a", "b", "c"]));
        let names: Vec<(&str, &str)> = merged
            .iter()
            .map(|m| (m.id.as_str(), m.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("a", "built-in"),
                ("b", "stored b"),
                ("c", "built-in"),
                ("new", "stored new")
            ]
        );
        assert_eq!(store.apply("openai", base(&["a"])).len(), 1, "not newer");
        assert!(!store.has_provider("not-a-provider"));
    }

    #[test]
    fn openrouter_and_radius_replace_their_lists() {
        let text = json!({
            "openrouter": {"models": [model("openrouter", "mine", "x")], "checkedAt": 1},
            "radius": {"models": [], "checkedAt": 1},
        })
        .to_string();
        let store = ModelsStore::parse(&text, builtin).unwrap();
        let ids: Vec<String> = store
            .apply("openrouter", base(&["a", "b"]))
            .into_iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(ids, ["mine"]);
        assert!(store.apply("radius", base(&["balanced"])).is_empty());
        let empty = ModelsStore::parse(r#"{"openrouter": {"models": []}}"#, builtin).unwrap();
        assert_eq!(empty.apply("openrouter", base(&["a"])).len(), 1);
        assert!(ModelsStore::parse("[1]", builtin).is_err());
        assert!(ModelsStore::parse("\u{feff}", builtin).unwrap().is_empty());
    }
}
