//! The model registry: the built-in catalog (`catalog.tsv`, generated from the reference's pi-ai
//! package by `tests/gen_catalog.mjs`, embedded at build time) plus `models.json` customisations:
//! provider-level `baseUrl`/`compat` overrides, per-model `modelOverrides`, new or replacing
//! models, and the per-provider request settings (`apiKey`, `headers`, `authHeader`).
//!
//! models.json is JSON with comments and trailing commas. Any schema or consistency problem makes
//! the whole file count as absent (the built-in models stay usable) and is returned as a message.
//!
//! Lookups read only the catalog rows they need (the build script indexes them by provider); the
//! full list is built on first need. `ModelSource` is what `--model` resolution (`resolve.rs`)
//! reads through.
//!
//! Also holds the two fixed tables of the reference: the default model id per provider.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use serde_json::{Map, Value};

use super::jsonc::strip_jsonc;
use super::model::{Model, ModelCost};
use super::models_json::ListJson;
use super::models_store::ModelsStore;

/// Provider → preferred model id, in the priority order used to pick the initial model.
pub const DEFAULT_MODEL_PER_PROVIDER: &[(&str, &str)] = &[
    ("amazon-bedrock", "us.anthropic.claude-opus-5-5"),
    ("ant-ling", "Ring-2.6-1T"),
    ("anthropic", "claude-opus-5-5"),
    ("openai", "gpt-6.2-sol"),
    ("azure", "gpt-6.2-sol"),
    ("openai-codex", "gpt-6.2-sol"),
    ("radius", "balanced"),
    ("nvidia", "nvidia/nemotron-3.5-super-vl-120b-a12b"),
    ("deepseek", "deepseek-v4-pro"),
    ("google", "gemini-4-argon"),
    ("google-vertex", "gemini-4-argon"),
    ("github-copilot", "gpt-6.1-sol"),
    ("openrouter", "moonshotai/kimi-k2.7-code"),
    ("vercel-ai-gateway", "zai/glm-5.3"),
    ("xai", "grok-4.7"),
    ("groq", "openai/gpt-oss-120b"),
    ("cerebras", "gpt-oss-120b"),
    ("zai", "glm-5.3"),
    ("zai-coding-cn", "glm-5.3"),
    ("mistral", "devstral-medium-latest"),
    ("minimax", "MiniMax-M3"),
    ("minimax-cn", "MiniMax-M3"),
    ("moonshotai", "kimi-k2.7-code"),
    ("moonshotai-cn", "kimi-k2.7-code"),
    ("huggingface", "moonshotai/Kimi-K2.7-Code"),
    ("fireworks", "accounts/fireworks/models/kimi-k3"),
    ("together", "moonshotai/Kimi-K3"),
    ("baseten", "zai-org/GLM-5.3"),
    ("opencode", "kimi-k2.7-code"),
    ("opencode-go", "kimi-k3.1-pro"),
    ("kimi-coding", "kimi-for-coding"),
    ("meta", "muse-spark-1.3"),
    ("cloudflare-workers-ai", "@cf/moonshotai/kimi-k2.7-code"),
    (
        "cloudflare-ai-gateway",
        "workers-ai/@cf/moonshotai/kimi-k2.7-code",
    ),
    ("qwen-token-plan", "qwen3.8-max"),
    ("qwen-token-plan-cn", "qwen3.8-max"),
    ("qwen-token-plan-individual", "qwen3.8-max"),
    ("qwen-token-plan-individual-cn", "qwen3.8-max"),
    ("xiaomi", "mimo-v2.6-pro"),
    ("xiaomi-token-plan-cn", "mimo-v2.6-pro"),
    ("xiaomi-token-plan-ams", "mimo-v2.6-pro"),
    ("xiaomi-token-plan-sgp", "mimo-v2.6-pro"),
];

pub fn default_model_for(provider: &str) -> Option<&'static str> {
    DEFAULT_MODEL_PER_PROVIDER
        .iter()
        .find(|(p, _)| *p == provider)
        .map(|(_, id)| *id)
}

/// The built-in catalog: one model per line, TAB-separated (format in `tests/gen_catalog.mjs`).
/// Rows are read with splits when a lookup needs them, never all at start-up.
const CATALOG: &str = include_str!("catalog.tsv");

// `CATALOG_PROVIDERS`: each provider's rows, indexed at build time.
include!(concat!(env!("OUT_DIR"), "/catalog_providers.rs"));

/// The built-in models in registry order. The catalog is part of the binary and the build checks
/// its shape, so a bad row is a build defect (the unit tests read every row); it is logged and
/// skipped rather than a panic. (The registry reads them through `Registry::models`.)
#[cfg(test)]
pub fn builtin_models() -> Vec<Model> {
    parse_rows(CATALOG)
}

fn parse_rows(rows: &str) -> Vec<Model> {
    rows.lines()
        .filter_map(|line| {
            let model = catalog_row(line);
            if model.is_none() {
                log::error!("built-in model catalog: row {line:?} does not parse");
            }
            model
        })
        .collect()
}

/// The catalog rows of one provider (exact name), empty for a provider the catalog lacks.
fn provider_rows(provider: &str) -> &'static str {
    CATALOG_PROVIDERS
        .iter()
        .find(|(name, _, _)| *name == provider)
        .map_or("", |&(_, start, end)| &CATALOG[start..end])
}

/// 1.6.0's built-in provider without catalog rows yet (its models can only come from
/// models-store.json); in 1.6.0's provider order it follows `together`.
const PROVIDER_WITHOUT_ROWS: (&str, &str) = ("typesafe", "together");

fn is_builtin_provider(provider: &str) -> bool {
    provider == PROVIDER_WITHOUT_ROWS.0
        || CATALOG_PROVIDERS
            .iter()
            .any(|(name, _, _)| *name == provider)
}

fn is_builtin_model(provider: &str, id: &str) -> bool {
    provider_rows(provider)
        .lines()
        .any(|line| line.split('\t').nth(1) == Some(id))
}

/// `api` and `baseUrl` of the provider's first built-in model: what its models.json models
/// inherit.
fn builtin_defaults(provider: &str) -> Option<(String, String)> {
    let first = provider_rows(provider).lines().next()?;
    let mut fields = first.split('\t').skip(3);
    Some((fields.next()?.to_string(), fields.next()?.to_string()))
}

fn catalog_row(line: &str) -> Option<Model> {
    let mut fields = line.split('\t');
    let mut text = || fields.next();
    let (provider, id, name, api, base_url) = (text()?, text()?, text()?, text()?, text()?);
    let reasoning = match text()? {
        "1" => true,
        "0" => false,
        _ => return None,
    };
    let input = text()?.split(',').map(str::to_string).collect();
    let mut cost = [0.0; 4];
    for slot in &mut cost {
        *slot = text()?.parse().ok()?;
    }
    let context_window = text()?.parse().ok()?;
    let max_tokens = text()?.parse().ok()?;
    let thinking_level_map = optional_json(text()?)?;
    let headers = optional_json(text()?)?;
    let compat = optional_json(text()?)?;
    let tiers = optional_json(text()?)?;
    let extra = optional_json(text()?)?.unwrap_or_default();
    if fields.next().is_some() {
        return None;
    }
    Some(Model {
        provider: provider.to_string(),
        id: id.to_string(),
        name: name.to_string(),
        api: api.to_string(),
        base_url: base_url.to_string(),
        reasoning,
        input,
        cost: ModelCost {
            input: cost[0],
            output: cost[1],
            cache_read: cost[2],
            cache_write: cost[3],
            tiers,
        },
        context_window,
        max_tokens,
        thinking_level_map,
        headers,
        compat,
        extra,
    })
}

/// A catalog JSON field: empty is absent, anything else must parse.
fn optional_json<T: serde::de::DeserializeOwned>(field: &str) -> Option<Option<T>> {
    match field {
        "" => Some(None),
        json => serde_json::from_str(json).ok().map(Some),
    }
}

/// Request settings of a models.json provider (kept only when one of them is set).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProviderRequestConfig {
    pub api_key: Option<String>,
    pub headers: Option<Map<String, Value>>,
    pub auth_header: bool,
}

/// Built-in models plus models.json, ready for lookups.
///
/// The full list (1698 built-ins) is built on its first use only: start-up resolves its model from
/// one provider's rows (`provider_models`, `find`, the id index for `with_id`), which is all
/// `--provider`/`--model`, a saved default or a resumed session need; the models with credentials
/// (`models_of`) read only those providers' rows. Every lookup answers as it would on the full
/// list.
/// Cloned (with its list shared) to build the extensions' `models` answer on another thread.
#[derive(Clone, Default)]
pub struct Registry {
    /// models.json's `providers` (validated; empty when there is no file or it was ignored):
    /// their `baseUrl`/`compat`/`modelOverrides` apply to built-in rows as they are read.
    providers: Map<String, Value>,
    /// models.json's own models in file order; each replaces a built-in or an earlier one with
    /// its (provider, id), or is appended.
    custom: Vec<Model>,
    /// Every model in registry order, once something needs them all; shared with every other
    /// registry built from the same inputs (`shared_list`).
    all: OnceLock<Arc<[Model]>>,
    /// That list's JSON text for the extensions' `models` query, once one asks (`list_json`);
    /// shared with this registry's clones, so one built on another thread is kept here.
    list_json: Arc<OnceLock<Arc<ListJson>>>,
    pub provider_configs: HashMap<String, ProviderRequestConfig>,
    /// models.json per-model headers, keyed by (provider, model id).
    pub model_headers: HashMap<(String, String), Map<String, Value>>,
    /// Why models.json was ignored, if it was.
    pub load_error: Option<String>,
    /// models.json's `providers` as the file has them: what extensions' registrations apply over.
    file_providers: Map<String, Value>,
    /// Providers registered by extensions (pi's `registerProvider`), in registration order; the
    /// fields each gives replace the file's for that provider.
    extension_providers: Vec<(String, Value)>,
    /// Providers whose models an extension registration replaced: their built-in rows are hidden.
    replaced: std::collections::HashSet<String>,
    /// pi 1.6.0's refreshed catalogs (`models-store.json`), applied to the built-in rows before
    /// models.json's overrides, as 1.6.0 composes them.
    store: ModelsStore,
    /// Why models-store.json was ignored, if it was.
    pub store_error: Option<String>,
    /// Virtual models extensions registered (pi 1.6.0 `registerVirtualModel`), in registration
    /// order; each hides a physical model with its provider and id.
    virtual_models: Vec<Model>,
}

impl Registry {
    /// Builds the registry; `models_json` is the path of models.json (missing file = none).
    pub fn load(models_json: &Path) -> Registry {
        let text = match fs::read(models_json) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                let mut r = Registry::from_models_json(None);
                r.load_error = Some(format!(
                    "Failed to load models.json: {e}\n\nFile: {}",
                    models_json.display()
                ));
                return r;
            }
        };
        let mut registry = Registry::from_models_json(text.as_deref());
        if let Some(err) = registry.load_error.take() {
            registry.load_error = Some(format!("{err}\n\nFile: {}", models_json.display()));
        }
        if let Some(dir) = models_json.parent() {
            (registry.store, registry.store_error) = ModelsStore::load(dir, is_builtin_provider);
        }
        registry
    }

    /// The registry with a models-store.json (tests).
    #[cfg(test)]
    fn with_store(mut self, text: &str) -> Registry {
        self.store = ModelsStore::parse(text, is_builtin_provider).expect("store parses");
        self
    }

    /// Builds the registry from models.json text (None = no file).
    pub fn from_models_json(text: Option<&str>) -> Registry {
        let mut registry = Registry::default();
        let Some(text) = text else {
            return registry;
        };
        match parse_models_json(text) {
            Ok(providers) => {
                registry.file_providers = providers.clone();
                registry.apply(providers);
            }
            Err(e) => registry.load_error = Some(e),
        }
        registry
    }

    /// Registers (or replaces) a provider for an extension, as pi's `registerProvider` does with
    /// the legacy config form: `models` replace every model of that provider (built-ins
    /// included); without them, `baseUrl` / `headers` / `apiKey` / `api` override the provider's
    /// and its models stay. Checked like a models.json entry, except that `apiKey` is optional.
    pub fn register_provider(&mut self, name: &str, config: &Value) -> Result<(), String> {
        if name.is_empty() || name.contains('/') {
            return Err(format!(
                "register_provider: {name:?} is not a provider name"
            ));
        }
        let mut providers = Map::new();
        providers.insert(name.to_string(), config.clone());
        let root = serde_json::json!({ "providers": providers });
        let mut errors = Vec::new();
        check_schema(&root, &mut errors);
        if let Some((path, message)) = errors.first() {
            return Err(format!("register_provider: {path}: {message}"));
        }
        check_consistency(&providers).map_err(|e| format!("register_provider: {e}"))?;
        match self.extension_providers.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = config.clone(),
            None => self
                .extension_providers
                .push((name.to_string(), config.clone())),
        }
        self.rebuild();
        Ok(())
    }

    /// Whether an extension registered this provider.
    pub fn is_extension_provider(&self, name: &str) -> bool {
        self.extension_providers.iter().any(|(n, _)| n == name)
    }

    /// Removes an extension's provider registration (pi's `unregisterProvider`): the provider's
    /// built-in or models.json state comes back. False when it was not registered.
    pub fn unregister_provider(&mut self, name: &str) -> bool {
        let before = self.extension_providers.len();
        self.extension_providers.retain(|(n, _)| n != name);
        let removed = self.extension_providers.len() != before;
        if removed {
            self.rebuild();
        }
        removed
    }

    /// The request settings and models again, from the file's providers and the registrations.
    fn rebuild(&mut self) {
        let mut merged = self.file_providers.clone();
        self.replaced.clear();
        for (name, config) in &self.extension_providers {
            let entry = merged
                .entry(name.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if let (Some(entry), Some(config)) = (entry.as_object_mut(), config.as_object()) {
                for (key, value) in config {
                    entry.insert(key.clone(), value.clone());
                }
            }
            if config
                .get("models")
                .and_then(Value::as_array)
                .is_some_and(|m| !m.is_empty())
            {
                self.replaced.insert(name.clone());
            }
        }
        self.provider_configs.clear();
        self.model_headers.clear();
        self.forget_list();
        self.apply(merged);
    }

    /// Every model in registry order: the built-ins (with models.json's overrides), models.json
    /// models replacing theirs in place, the other models.json models after them.
    pub fn models(&self) -> &[Model] {
        self.list()
    }

    /// The full list and its JSON text (written on first use, by whoever uses it first), kept
    /// until the list changes.
    pub fn list_json(&self) -> Arc<ListJson> {
        self.list_json
            .get_or_init(|| Arc::new(ListJson::new(self.list().clone())))
            .clone()
    }

    /// `list_json` when it is written already.
    pub fn list_json_ready(&self) -> Option<Arc<ListJson>> {
        self.list_json.get().cloned()
    }

    /// Every provider a model of the full list can have, found without building it (each one
    /// the build would consider, catalog, models.json, extensions and virtual models alike).
    pub fn list_providers(&self) -> Vec<String> {
        let names = std::cell::RefCell::new(Vec::<String>::new());
        self.build(&|provider| {
            let mut names = names.borrow_mut();
            if !names.iter().any(|n| n == provider) {
                names.push(provider.to_string());
            }
            false
        });
        names.into_inner()
    }

    /// models.json's providers that pi-rs applies (validated), each with the `name` the file
    /// gives it, in file order.
    pub fn file_provider_names(&self) -> Vec<(String, Option<String>)> {
        self.providers
            .iter()
            .map(|(id, config)| {
                let name = config
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                (id.clone(), name)
            })
            .collect()
    }

    /// The list changed (a provider or virtual model registered or removed): built again on use.
    fn forget_list(&mut self) {
        self.all = OnceLock::new();
        self.list_json = Arc::default();
    }

    fn list(&self) -> &Arc<[Model]> {
        self.all.get_or_init(|| {
            let inputs = ListInputs {
                file_providers: self.file_providers.clone(),
                extension_providers: self.extension_providers.clone(),
                store: self.store.clone(),
                virtual_models: self.virtual_models.clone(),
            };
            shared_list(inputs, || self.build(&|_| true))
        })
    }

    /// The models of the providers `keep` accepts, in registry order: [`Registry::models`]
    /// filtered, reading only those providers' catalog rows unless the full list is built
    /// already.
    pub fn models_of(&self, keep: &dyn Fn(&str) -> bool) -> Vec<Model> {
        match self.all.get() {
            Some(all) => all.iter().filter(|m| keep(&m.provider)).cloned().collect(),
            None => self.build(keep),
        }
    }

    /// The models of the providers `keep` accepts, built from their rows. Every step works per
    /// provider (store overlay, models.json overrides, a custom model replacing the one with its
    /// key), so leaving a provider out leaves the others' models and order as the full list has
    /// them.
    fn build(&self, keep: &dyn Fn(&str) -> bool) -> Vec<Model> {
        let mut builtins = Vec::new();
        for &(provider, start, end) in CATALOG_PROVIDERS {
            if keep(provider) {
                builtins.extend(self.store.apply(provider, parse_rows(&CATALOG[start..end])));
            }
            let without_rows = PROVIDER_WITHOUT_ROWS.0;
            if provider == PROVIDER_WITHOUT_ROWS.1 && keep(without_rows) {
                builtins.extend(self.store.apply(without_rows, Vec::new()));
            }
        }
        self.with_custom(self.configured(builtins), keep)
    }

    /// One provider's built-in models (models-store.json applied, models.json not yet).
    fn provider_builtins(&self, provider: &str) -> Vec<Model> {
        self.store
            .apply(provider, parse_rows(provider_rows(provider)))
    }

    /// The first model with this provider and id in registry order.
    pub fn find(&self, provider: &str, id: &str) -> Option<Model> {
        if let Some(model) = self
            .virtual_models
            .iter()
            .find(|m| m.provider == provider && m.id == id)
        {
            return Some(model.clone());
        }
        if let Some(all) = self.all.get() {
            return all
                .iter()
                .find(|m| m.provider == provider && m.id == id)
                .cloned();
        }
        // A models.json model with that key takes the built-in's place (the last one wins).
        if let Some(custom) = self
            .custom
            .iter()
            .rev()
            .find(|m| m.provider == provider && m.id == id)
        {
            return Some(custom.clone());
        }
        if !self.store.is_empty() {
            let builtins = self.provider_builtins(provider);
            let found = builtins.into_iter().find(|m| m.id == id)?;
            return self.configured(vec![found]).pop();
        }
        let line = provider_rows(provider)
            .lines()
            .find(|line| line.split('\t').nth(1) == Some(id))?;
        self.configured(parse_rows(line)).pop()
    }

    /// Built-in models with models.json's provider-level and per-model overrides applied; the
    /// providers whose models an extension's registration replaced are left out.
    fn configured(&self, mut models: Vec<Model>) -> Vec<Model> {
        if !self.replaced.is_empty() {
            models.retain(|m| !self.replaced.contains(&m.provider));
        }
        if self.providers.is_empty() {
            return models;
        }
        for m in &mut models {
            let Some(config) = self.providers.get(&m.provider) else {
                continue;
            };
            let base_url = config.get("baseUrl").and_then(Value::as_str);
            let compat = config.get("compat").and_then(Value::as_object);
            if base_url.is_some() || compat.is_some() {
                if let Some(url) = base_url {
                    m.base_url = url.to_string();
                }
                m.compat = merge_compat(m.compat.take(), compat);
            }
            if let Some(o) = config.get("modelOverrides").and_then(|o| o.get(&m.id)) {
                apply_model_override(m, o);
            }
        }
        models
    }

    /// `models` with models.json's models (of the providers `keep` accepts) put in: in place of
    /// the model with their key, else appended.
    fn with_custom(&self, mut models: Vec<Model>, keep: &dyn Fn(&str) -> bool) -> Vec<Model> {
        let custom = self.custom.iter().filter(|m| keep(&m.provider));
        for model in custom {
            match models
                .iter()
                .position(|m| m.provider == model.provider && m.id == model.id)
            {
                Some(i) => models[i] = model.clone(),
                None => models.push(model.clone()),
            }
        }
        for model in self.virtual_models.iter().filter(|m| keep(&m.provider)) {
            models.retain(|m| !(m.provider == model.provider && m.id == model.id));
            models.push(model.clone());
        }
        models
    }

    /// (extensions) Adds or replaces a virtual model; refused when a physical model of that
    /// provider has its id (pi 1.6.0's error).
    pub fn register_virtual_model(&mut self, model: Model) -> Result<(), String> {
        if self
            .find(&model.provider, &model.id)
            .is_some_and(|existing| !existing.is_virtual())
        {
            return Err(format!(
                "Virtual model {}/{} conflicts with a physical model.",
                model.provider, model.id
            ));
        }
        self.virtual_models
            .retain(|m| !(m.provider == model.provider && m.id == model.id));
        self.virtual_models.push(model);
        self.forget_list();
        Ok(())
    }

    /// (extensions) Removes a virtual model; false when there was none.
    pub fn unregister_virtual_model(&mut self, provider: &str, id: &str) -> bool {
        let before = self.virtual_models.len();
        self.virtual_models
            .retain(|m| !(m.provider == provider && m.id == id));
        let removed = self.virtual_models.len() != before;
        if removed {
            self.forget_list();
        }
        removed
    }

    /// Whether the provider lists only virtual models (it then needs no credentials).
    pub fn is_virtual_only_provider(&self, provider: &str) -> bool {
        self.virtual_models.iter().any(|m| m.provider == provider)
            && self.provider_models(provider).iter().all(Model::is_virtual)
    }

    fn apply(&mut self, providers: Map<String, Value>) {
        let mut custom = Vec::new();
        for (provider, config) in &providers {
            let str_field = |k: &str| config.get(k).and_then(Value::as_str).map(str::to_string);
            let headers = config.get("headers").and_then(Value::as_object).cloned();
            let auth_header = config
                .get("authHeader")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let api_key = str_field("apiKey");
            if api_key.is_some() || headers.is_some() || auth_header {
                self.provider_configs.insert(
                    provider.clone(),
                    ProviderRequestConfig {
                        api_key,
                        headers,
                        auth_header,
                    },
                );
            }
            if let Some(Value::Object(overrides)) = config.get("modelOverrides") {
                for (model_id, o) in overrides {
                    self.store_model_headers(provider, model_id, o.get("headers"));
                }
            }
            let models = config.get("models").and_then(Value::as_array);
            let Some(models) = models.filter(|m| !m.is_empty()) else {
                continue;
            };
            let defaults = builtin_defaults(provider);
            for def in models {
                let id = def
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let get = |k: &str| def.get(k).and_then(Value::as_str).map(str::to_string);
                let Some(api) = get("api")
                    .or_else(|| str_field("api"))
                    .or_else(|| defaults.as_ref().map(|d| d.0.clone()))
                else {
                    continue;
                };
                let Some(base_url) = get("baseUrl")
                    .or_else(|| str_field("baseUrl"))
                    .or_else(|| defaults.as_ref().map(|d| d.1.clone()))
                else {
                    continue;
                };
                self.store_model_headers(provider, &id, def.get("headers"));
                let compat = merge_compat(
                    config.get("compat").and_then(Value::as_object).cloned(),
                    def.get("compat").and_then(Value::as_object),
                );
                let cost = def.get("cost").map(|c| ModelCost {
                    input: c.get("input").and_then(Value::as_f64).unwrap_or(0.0),
                    output: c.get("output").and_then(Value::as_f64).unwrap_or(0.0),
                    cache_read: c.get("cacheRead").and_then(Value::as_f64).unwrap_or(0.0),
                    cache_write: c.get("cacheWrite").and_then(Value::as_f64).unwrap_or(0.0),
                    tiers: cost_tiers(c),
                });
                custom.push(Model {
                    name: get("name").unwrap_or_else(|| id.clone()),
                    id,
                    api,
                    provider: provider.clone(),
                    base_url,
                    reasoning: def
                        .get("reasoning")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    thinking_level_map: def
                        .get("thinkingLevelMap")
                        .and_then(Value::as_object)
                        .cloned(),
                    input: match def.get("input").and_then(Value::as_array) {
                        Some(list) => list
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect(),
                        None => vec!["text".to_string()],
                    },
                    cost: cost.unwrap_or_default(),
                    context_window: def
                        .get("contextWindow")
                        .and_then(as_count)
                        .unwrap_or(128000),
                    max_tokens: def.get("maxTokens").and_then(as_count).unwrap_or(16384),
                    headers: None,
                    compat,
                    extra: extra_fields(def),
                });
            }
        }
        self.custom = custom;
        self.providers = providers;
    }

    fn store_model_headers(&mut self, provider: &str, model_id: &str, headers: Option<&Value>) {
        let key = (provider.to_string(), model_id.to_string());
        match headers.and_then(Value::as_object).filter(|h| !h.is_empty()) {
            Some(h) => {
                self.model_headers.insert(key, h.clone());
            }
            None => {
                self.model_headers.remove(&key);
            }
        }
    }
}

/// The models whose id is `id`, without case.
fn with_id(id: &str, models: &[Model]) -> Vec<Model> {
    let lower = id.to_lowercase();
    models
        .iter()
        .filter(|m| m.id.to_lowercase() == lower)
        .cloned()
        .collect()
}

/// The models `--model` resolution reads (auth is not required): one provider's when the
/// provider is known, every model only when the pattern names none (the registry builds its
/// full list lazily, so start-up with `--provider` never does).
pub trait ModelSource {
    /// Every model, registry order.
    fn all(&self) -> &[Model];
    /// One provider's models (exact name), registry order.
    fn provider_models(&self, provider: &str) -> Vec<Model>;
    /// The provider name matching `name` without case, spelled as the last model in registry
    /// order spells it.
    fn provider_spelling(&self, name: &str) -> Option<String>;
    /// Every model whose id is `id` without case, registry order.
    fn with_id(&self, id: &str) -> Vec<Model>;
    /// The providers with models, registry order.
    fn provider_names(&self) -> Vec<String>;
    fn has_models(&self) -> bool;
}

impl ModelSource for [Model] {
    fn all(&self) -> &[Model] {
        self
    }
    fn provider_models(&self, provider: &str) -> Vec<Model> {
        self.iter()
            .filter(|m| m.provider == provider)
            .cloned()
            .collect()
    }
    fn provider_spelling(&self, name: &str) -> Option<String> {
        let lower = name.to_lowercase();
        self.iter()
            .rev()
            .find(|m| m.provider.to_lowercase() == lower)
            .map(|m| m.provider.clone())
    }
    fn with_id(&self, id: &str) -> Vec<Model> {
        with_id(id, self)
    }
    fn provider_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for m in self {
            if !names.contains(&m.provider) {
                names.push(m.provider.clone());
            }
        }
        names
    }
    fn has_models(&self) -> bool {
        !self.is_empty()
    }
}

/// What a registry's full list is built from (the catalog aside, which is compiled in): equal
/// inputs build equal lists.
#[derive(PartialEq)]
struct ListInputs {
    file_providers: Map<String, Value>,
    extension_providers: Vec<(String, Value)>,
    store: ModelsStore,
    virtual_models: Vec<Model>,
}

/// The full list for `inputs`, shared by every registry built from equal inputs while one of
/// them holds it: `pi --mode acp` loads the configuration for each session, and the list (1698
/// built-ins parsed, about 5.8 MB) was built once per session. Held weakly here, so the last
/// registry to drop it frees it.
fn shared_list(inputs: ListInputs, build: impl FnOnce() -> Vec<Model>) -> Arc<[Model]> {
    type Lists = Vec<(ListInputs, Weak<[Model]>)>;
    static LISTS: Mutex<Lists> = Mutex::new(Vec::new());
    // Held while building: a second registry with the same inputs waits and shares the result.
    let mut lists = LISTS.lock().unwrap_or_else(|e| e.into_inner());
    lists.retain(|(_, list)| list.strong_count() > 0);
    if let Some(list) = lists
        .iter()
        .find(|(have, _)| *have == inputs)
        .and_then(|(_, list)| list.upgrade())
    {
        return list;
    }
    let list: Arc<[Model]> = build().into();
    lists.push((inputs, Arc::downgrade(&list)));
    list
}

/// `--model` resolution reads the registry without building the full list when it can.
impl ModelSource for Registry {
    fn all(&self) -> &[Model] {
        self.models()
    }

    /// The models of one provider (exact name), in registry order: the full list filtered,
    /// without building it.
    fn provider_models(&self, provider: &str) -> Vec<Model> {
        if let Some(all) = self.all.get() {
            return all
                .iter()
                .filter(|m| m.provider == provider)
                .cloned()
                .collect();
        }
        self.with_custom(self.configured(self.provider_builtins(provider)), &|p| {
            p == provider
        })
    }

    /// The spelling of a provider name, matched without case, that the last model in registry
    /// order carries (as the reference's provider map, built in that order, keeps it).
    fn provider_spelling(&self, name: &str) -> Option<String> {
        let lower = name.to_lowercase();
        let appended = self
            .custom
            .iter()
            .rev()
            .filter(|m| !is_builtin_model(&m.provider, &m.id))
            .find(|m| m.provider.to_lowercase() == lower)
            .map(|m| m.provider.clone());
        let virtual_provider = || {
            self.virtual_models
                .iter()
                .rev()
                .find(|m| m.provider.to_lowercase() == lower)
                .map(|m| m.provider.clone())
        };
        appended
            .or_else(virtual_provider)
            .or_else(|| {
                CATALOG_PROVIDERS
                    .iter()
                    .rev()
                    .find(|(provider, _, _)| provider.to_lowercase() == lower)
                    .map(|(provider, _, _)| provider.to_string())
            })
            .or_else(|| {
                let typesafe = PROVIDER_WITHOUT_ROWS.0;
                (lower == typesafe && self.store.has_provider(typesafe))
                    .then(|| typesafe.to_string())
            })
    }

    /// A scan of the build script's lowercased id index; only the matches are read in full.
    fn with_id(&self, id: &str) -> Vec<Model> {
        if self.all.get().is_some() || !self.store.is_empty() || !self.virtual_models.is_empty() {
            return with_id(id, self.models());
        }
        let lower = id.to_lowercase();
        let mut found: Vec<Model> = CATALOG_LOWER_IDS
            .split_terminator('\n')
            .zip(CATALOG_ROW_STARTS.windows(2))
            .filter(|(row_id, _)| *row_id == lower)
            .filter_map(|(_, range)| {
                let row = &CATALOG[range[0] as usize..range[1] as usize];
                let mut fields = row.split('\t');
                let (provider, row_id) = (fields.next()?, fields.next()?);
                // In that place: the built-in, or the models.json model replacing it.
                self.find(provider, row_id)
            })
            .collect();
        // Appended models.json models come after every built-in.
        found.extend(
            self.with_custom(Vec::new(), &|_| true)
                .into_iter()
                .filter(|m| m.id.to_lowercase() == lower && !is_builtin_model(&m.provider, &m.id)),
        );
        found
    }

    fn provider_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for &(provider, _, _) in CATALOG_PROVIDERS {
            names.push(provider.to_string());
            let (without_rows, after) = PROVIDER_WITHOUT_ROWS;
            if provider == after && self.store.has_provider(without_rows) {
                names.push(without_rows.to_string());
            }
        }
        for m in &self.custom {
            if !names.contains(&m.provider) {
                names.push(m.provider.clone());
            }
        }
        names
    }

    /// Whether any model is known (the catalog, or models.json's).
    fn has_models(&self) -> bool {
        !CATALOG.is_empty() || !self.custom.is_empty() || !self.store.is_empty()
    }
}

/// models.json's `cost.tiers` (validated by the schema check), if any.
fn cost_tiers(cost: &Value) -> Option<Vec<super::model::CostTier>> {
    serde_json::from_value(cost.get("tiers")?.clone()).ok()
}

fn as_count(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f > 0.0)
            .map(|f| f as u64)
    })
}

/// Shallow merge of compat objects; the two routing sub-objects are merged one more level.
fn merge_compat(
    base: Option<Map<String, Value>>,
    over: Option<&Map<String, Value>>,
) -> Option<Map<String, Value>> {
    let Some(over) = over else {
        return base;
    };
    let mut merged = base.clone().unwrap_or_default();
    for (k, v) in over {
        merged.insert(k.clone(), v.clone());
    }
    for key in ["openRouterRouting", "vercelGatewayRouting"] {
        let b = base
            .as_ref()
            .and_then(|b| b.get(key))
            .and_then(Value::as_object);
        let o = over.get(key).and_then(Value::as_object);
        if b.is_some() || o.is_some() {
            let mut inner = b.cloned().unwrap_or_default();
            for (k, v) in o.into_iter().flatten() {
                inner.insert(k.clone(), v.clone());
            }
            merged.insert(key.to_string(), Value::Object(inner));
        }
    }
    Some(merged)
}

fn apply_model_override(m: &mut Model, o: &Value) {
    if let Some(name) = o.get("name").and_then(Value::as_str) {
        m.name = name.to_string();
    }
    if let Some(r) = o.get("reasoning").and_then(Value::as_bool) {
        m.reasoning = r;
    }
    if let Some(map) = o.get("thinkingLevelMap").and_then(Value::as_object) {
        let mut merged = m.thinking_level_map.take().unwrap_or_default();
        for (k, v) in map {
            merged.insert(k.clone(), v.clone());
        }
        m.thinking_level_map = Some(merged);
    }
    if let Some(input) = o.get("input").and_then(Value::as_array) {
        m.input = input
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
    }
    if let Some(n) = o.get("contextWindow").and_then(as_count) {
        m.context_window = n;
    }
    if let Some(n) = o.get("maxTokens").and_then(as_count) {
        m.max_tokens = n;
    }
    if let Some(cost) = o.get("cost").and_then(Value::as_object) {
        let pick = |k: &str, old: f64| cost.get(k).and_then(Value::as_f64).unwrap_or(old);
        m.cost = ModelCost {
            input: pick("input", m.cost.input),
            output: pick("output", m.cost.output),
            cache_read: pick("cacheRead", m.cost.cache_read),
            cache_write: pick("cacheWrite", m.cost.cache_write),
            tiers: match cost.get("tiers") {
                Some(_) => cost_tiers(&Value::Object(cost.clone())),
                None => m.cost.tiers.take(),
            },
        };
    }
    m.compat = merge_compat(m.compat.take(), o.get("compat").and_then(Value::as_object));
    // samplingParams merge key by key; samplingParamsByThinkingLevel level by level.
    for key in ["samplingParams", "samplingParamsByThinkingLevel"] {
        let Some(over) = o.get(key).and_then(Value::as_object) else {
            continue;
        };
        let mut merged = m
            .extra
            .get(key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (k, v) in over {
            let value = match (key, merged.get(k).and_then(Value::as_object), v.as_object()) {
                ("samplingParamsByThinkingLevel", Some(old), Some(new)) => {
                    let mut level = old.clone();
                    level.extend(new.clone());
                    Value::Object(level)
                }
                _ => v.clone(),
            };
            merged.insert(k.clone(), value);
        }
        m.extra.insert(key.to_string(), Value::Object(merged));
    }
    if let Some(limits) = o.get("inputLimits").filter(|v| v.is_object()) {
        m.extra.insert("inputLimits".to_string(), limits.clone());
    }
}

/// A models.json model's `samplingParams`, `samplingParamsByThinkingLevel` (pi 1.6.0) and
/// `inputLimits`, kept with the model's other fields: they reach get_available_models, the
/// request bodies and image scaling.
fn extra_fields(def: &Value) -> Map<String, Value> {
    [
        "samplingParams",
        "samplingParamsByThinkingLevel",
        "inputLimits",
    ]
    .into_iter()
    .filter_map(|key| {
        let value = def.get(key).filter(|v| v.is_object())?;
        Some((key.to_string(), value.clone()))
    })
    .collect()
}

// ---- parsing and validation ---------------------------------------------------------------------

/// Parses and validates models.json text; returns the `providers` object.
fn parse_models_json(text: &str) -> Result<Map<String, Value>, String> {
    let value: Value = serde_json::from_str(&strip_jsonc(text))
        .map_err(|e| format!("Failed to parse models.json: {e}"))?;
    let mut errors = Vec::new();
    check_schema(&value, &mut errors);
    if !errors.is_empty() {
        let list: Vec<String> = errors
            .iter()
            .map(|(path, msg)| format!("  - {path}: {msg}"))
            .collect();
        return Err(format!("Invalid models.json schema:\n{}", list.join("\n")));
    }
    let providers = value
        .get("providers")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    check_consistency(&providers).map_err(|e| format!("Failed to load models.json: {e}"))?;
    Ok(providers)
}

type Errors = Vec<(String, String)>;

fn check_schema(root: &Value, errors: &mut Errors) {
    let Some(root) = expect_object(root, "root", errors) else {
        return;
    };
    let Some(providers) = root.get("providers") else {
        errors.push((
            "providers".into(),
            "must have required property 'providers'".into(),
        ));
        return;
    };
    let Some(providers) = expect_object(providers, "providers", errors) else {
        return;
    };
    for (name, config) in providers {
        let path = format!("providers.{name}");
        let Some(config) = expect_object(config, &path, errors) else {
            continue;
        };
        for key in ["name", "baseUrl", "apiKey", "api"] {
            check_nonempty_string(config.get(key), &format!("{path}.{key}"), errors);
        }
        check_string_record(config.get("headers"), &format!("{path}.headers"), errors);
        check_compat(config.get("compat"), &format!("{path}.compat"), errors);
        if let Some(v) = config.get("authHeader")
            && !v.is_boolean()
        {
            errors.push((format!("{path}.authHeader"), "must be boolean".into()));
        }
        if let Some(models) = config.get("models") {
            match models.as_array() {
                Some(list) => {
                    for (i, def) in list.iter().enumerate() {
                        check_model_def(def, &format!("{path}.models.{i}"), true, errors);
                    }
                }
                None => errors.push((format!("{path}.models"), "must be array".into())),
            }
        }
        if let Some(overrides) = config.get("modelOverrides")
            && let Some(map) = expect_object(overrides, &format!("{path}.modelOverrides"), errors)
        {
            for (id, o) in map {
                check_model_def(o, &format!("{path}.modelOverrides.{id}"), false, errors);
            }
        }
    }
}

/// A model definition (`full`) or a per-model override.
fn check_model_def(def: &Value, path: &str, full: bool, errors: &mut Errors) {
    let Some(def) = expect_object(def, path, errors) else {
        return;
    };
    if full {
        match def.get("id") {
            None => errors.push((
                format!("{path}.id"),
                "must have required property 'id'".into(),
            )),
            Some(v) => check_nonempty_string(Some(v), &format!("{path}.id"), errors),
        }
        check_nonempty_string(def.get("api"), &format!("{path}.api"), errors);
        check_nonempty_string(def.get("baseUrl"), &format!("{path}.baseUrl"), errors);
    }
    check_nonempty_string(def.get("name"), &format!("{path}.name"), errors);
    if let Some(v) = def.get("reasoning")
        && !v.is_boolean()
    {
        errors.push((format!("{path}.reasoning"), "must be boolean".into()));
    }
    if let Some(map) = def.get("thinkingLevelMap")
        && let Some(map) = expect_object(map, &format!("{path}.thinkingLevelMap"), errors)
    {
        for (level, v) in map {
            if !(v.is_string() || v.is_null()) {
                errors.push((
                    format!("{path}.thinkingLevelMap.{level}"),
                    "must be string or null".into(),
                ));
            }
        }
    }
    if let Some(input) = def.get("input") {
        match input.as_array() {
            Some(list) => {
                for (i, v) in list.iter().enumerate() {
                    if !matches!(v.as_str(), Some("text") | Some("image")) {
                        errors.push((
                            format!("{path}.input.{i}"),
                            "must be \"text\" or \"image\"".into(),
                        ));
                    }
                }
            }
            None => errors.push((format!("{path}.input"), "must be array".into())),
        }
    }
    if let Some(cost) = def.get("cost")
        && let Some(cost) = expect_object(cost, &format!("{path}.cost"), errors)
    {
        for key in ["input", "output", "cacheRead", "cacheWrite"] {
            match cost.get(key) {
                Some(v) if !v.is_number() => {
                    errors.push((format!("{path}.cost.{key}"), "must be number".into()))
                }
                None if full => errors.push((
                    format!("{path}.cost.{key}"),
                    format!("must have required property '{key}'"),
                )),
                _ => {}
            }
        }
    }
    for key in ["contextWindow", "maxTokens"] {
        if let Some(v) = def.get(key)
            && !v.is_number()
        {
            errors.push((format!("{path}.{key}"), "must be number".into()));
        }
    }
    check_string_record(def.get("headers"), &format!("{path}.headers"), errors);
    check_compat(def.get("compat"), &format!("{path}.compat"), errors);
    check_optional_object(
        def.get("samplingParams"),
        &format!("{path}.samplingParams"),
        errors,
    );
    if let Some(levels) = def.get("samplingParamsByThinkingLevel")
        && let Some(levels) = expect_object(
            levels,
            &format!("{path}.samplingParamsByThinkingLevel"),
            errors,
        )
    {
        for (level, params) in levels {
            expect_object(
                params,
                &format!("{path}.samplingParamsByThinkingLevel.{level}"),
                errors,
            );
        }
    }
}

fn expect_object<'a>(
    v: &'a Value,
    path: &str,
    errors: &mut Errors,
) -> Option<&'a Map<String, Value>> {
    let obj = v.as_object();
    if obj.is_none() {
        errors.push((path.to_string(), "must be object".into()));
    }
    obj
}

/// A `compat` object, with the keys below checked as 1.6.0's schema checks them (its texts, in its
/// order); other keys pass as they are.
fn check_compat(v: Option<&Value>, path: &str, errors: &mut Errors) {
    let Some(compat) = v.and_then(|v| expect_object(v, path, errors)) else {
        return;
    };
    let boolean = |key: &str, errors: &mut Errors| {
        if compat.get(key).is_some_and(|v| !v.is_boolean()) {
            errors.push((format!("{path}.{key}"), "must be boolean".into()));
        }
    };
    boolean("supportsFinishReason", errors);
    boolean("supportsExplicitPromptCacheMode", errors);
    boolean("supportsMaxOutputTokens", errors);
    boolean("allowEmptySignature", errors);
    boolean("supportsMessageThreads", errors);
    if let Some(list) = compat.get("allowedFallbackModels") {
        check_fallback_models(list, &format!("{path}.allowedFallbackModels"), errors);
    }
    if let Some(v) = compat.get("imageInput")
        && !matches!(v.as_str(), Some("assets" | "images" | "state-image-urls"))
    {
        // One failed branch per allowed value, then the union's own error.
        let path = format!("{path}.imageInput");
        for _ in 0..3 {
            if !v.is_string() {
                errors.push((path.clone(), "must be string".into()));
            }
            errors.push((path.clone(), "must be equal to constant".into()));
        }
        errors.push((path, "must match a schema in anyOf".into()));
    }
    boolean("sendImageOptInHeader", errors);
}

/// `compat.allowedFallbackModels`: at most 3 `{provider, model, cost}` (non-empty strings, a
/// model cost).
fn check_fallback_models(list: &Value, path: &str, errors: &mut Errors) {
    let Some(list) = list.as_array() else {
        errors.push((path.to_string(), "must be array".into()));
        return;
    };
    for (i, entry) in list.iter().enumerate() {
        let path = format!("{path}.{i}");
        let Some(entry) = expect_object(entry, &path, errors) else {
            continue;
        };
        check_required(entry, &["provider", "model", "cost"], &path, errors);
        check_nonempty_string(entry.get("provider"), &format!("{path}.provider"), errors);
        check_nonempty_string(entry.get("model"), &format!("{path}.model"), errors);
        if let Some(cost) = entry.get("cost") {
            let path = format!("{path}.cost");
            if let Some(cost) = expect_object(cost, &path, errors) {
                let keys = ["input", "output", "cacheRead", "cacheWrite"];
                check_required(cost, &keys, &path, errors);
                for key in keys {
                    if cost.get(key).is_some_and(|v| !v.is_number()) {
                        errors.push((format!("{path}.{key}"), "must be number".into()));
                    }
                }
            }
        }
    }
    if list.len() > 3 {
        errors.push((path.to_string(), "must not have more than 3 items".into()));
    }
}

/// The schema's one error for missing properties: at the first, naming all of them.
fn check_required(object: &Map<String, Value>, keys: &[&str], path: &str, errors: &mut Errors) {
    let missing: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|key| !object.contains_key(*key))
        .collect();
    if let Some(first) = missing.first() {
        errors.push((
            format!("{path}.{first}"),
            format!("must have required properties {}", missing.join(", ")),
        ));
    }
}

fn check_optional_object(v: Option<&Value>, path: &str, errors: &mut Errors) {
    if let Some(v) = v {
        expect_object(v, path, errors);
    }
}

fn check_nonempty_string(v: Option<&Value>, path: &str, errors: &mut Errors) {
    match v {
        None => {}
        Some(Value::String(s)) if s.is_empty() => errors.push((
            path.to_string(),
            "must not have fewer than 1 characters".into(),
        )),
        Some(Value::String(_)) => {}
        Some(_) => errors.push((path.to_string(), "must be string".into())),
    }
}

fn check_string_record(v: Option<&Value>, path: &str, errors: &mut Errors) {
    if let Some(v) = v
        && let Some(map) = expect_object(v, path, errors)
    {
        for (k, v) in map {
            if !v.is_string() {
                errors.push((format!("{path}.{k}"), "must be string".into()));
            }
        }
    }
}

/// The reference's checks beyond the schema; the first failure wins. pi 1.6.0 needs no `apiKey`
/// for custom models (0.73.1 did): without one the provider's key comes from auth.json or the
/// environment, and its models are unavailable until it has one.
fn check_consistency(providers: &Map<String, Value>) -> Result<(), String> {
    for (name, config) in providers {
        let is_builtin = is_builtin_provider(name);
        let has = |k: &str| config.get(k).is_some_and(|v| !v.is_null());
        let models = config
            .get("models")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let has_overrides = config
            .get("modelOverrides")
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty());
        if models.is_empty() {
            if !has("baseUrl") && !has("headers") && !has("compat") && !has_overrides {
                return Err(format!(
                    "Provider {name}: must specify \"baseUrl\", \"headers\", \"compat\", \"modelOverrides\", or \"models\"."
                ));
            }
        } else if !is_builtin && !has("baseUrl") {
            return Err(format!(
                "Provider {name}: \"baseUrl\" is required when defining custom models."
            ));
        }
        for def in models {
            let id = def.get("id").and_then(Value::as_str).unwrap_or_default();
            if !has("api") && def.get("api").is_none() && !is_builtin {
                return Err(format!(
                    "Provider {name}, model {id}: no \"api\" specified. Set at provider or model level."
                ));
            }
            if id.is_empty() {
                return Err(format!("Provider {name}: model missing \"id\""));
            }
            for (key, label) in [
                ("contextWindow", "contextWindow"),
                ("maxTokens", "maxTokens"),
            ] {
                if def
                    .get(key)
                    .and_then(Value::as_f64)
                    .is_some_and(|n| n <= 0.0)
                {
                    return Err(format!("Provider {name}, model {id}: invalid {label}"));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn registries_with_the_same_inputs_share_one_full_list() {
        let text = r#"{"providers": {"local": {"baseUrl": "http://127.0.0.1:1", "apiKey": "k",
            "api": "openai-completions", "models": [{"id": "m1"}]}}}"#;
        let a = Registry::from_models_json(Some(text));
        let b = Registry::from_models_json(Some(text));
        assert!(std::ptr::eq(a.models(), b.models()), "built once, shared");
        let mut c = Registry::from_models_json(Some(text));
        c.register_provider("local", &json!({"baseUrl": "http://127.0.0.1:2"}))
            .unwrap();
        assert!(
            !std::ptr::eq(a.models(), c.models()),
            "other inputs, own list"
        );
        assert_eq!(
            c.find("local", "m1").unwrap().base_url,
            "http://127.0.0.1:2"
        );
        assert_eq!(
            a.find("local", "m1").unwrap().base_url,
            "http://127.0.0.1:1"
        );
    }

    #[test]
    fn catalog_has_every_reference_model_in_order() {
        let models = builtin_models();
        // pi 1.6.0's catalog: 1698 chat models of 42 providers (typesafe, the 43rd, has none).
        assert_eq!(models.len(), 1698);
        assert_eq!(CATALOG.lines().count(), 1698, "every row parses");
        assert_eq!(CATALOG_PROVIDERS.len(), 42);
        // Costs are the reference's doubles exactly (as JavaScript prints them).
        let micro = models
            .iter()
            .find(|m| m.id == "apac.amazon.nova-micro-v1:0")
            .unwrap();
        assert_eq!(micro.cost.cache_read.to_string(), "0.00925");
        // The fields 1.6.0 added: price tiers, input limits, prompt-cache lifetimes, radius's.
        let haiku = models
            .iter()
            .find(|m| m.provider == "amazon-bedrock" && m.id == "anthropic.claude-haiku-5-5")
            .unwrap();
        let tier = &haiku.cost.tiers.as_ref().unwrap()[0];
        assert_eq!((tier.input_tokens_above, tier.input), (100000.0, 0.55));
        let fable = models
            .iter()
            .find(|m| m.provider == "anthropic" && m.id == "claude-fable-5")
            .unwrap();
        assert_eq!(
            fable.extra["promptCache"],
            json!({"short": 300, "long": 3600})
        );
        assert_eq!(fable.extra["inputLimits"]["maxRequestBytes"], 33554432);
        assert_eq!(fable.extra["type"], "chat");
        let balanced = models.iter().find(|m| m.provider == "radius").unwrap();
        assert_eq!(balanced.api, "pi-messages");
        assert_eq!(balanced.extra["lab"], "Moonshot AI");
        assert!(catalog_row("a\tb").is_none());
        assert_eq!(models[0].provider, "amazon-bedrock");
        assert_eq!(models[0].id, "amazon.nova-2-lite-v1:0");
        let gpt = models
            .iter()
            .find(|m| m.provider == "openai" && m.id == "gpt-5.4")
            .unwrap();
        assert_eq!(
            gpt.thinking_level_map.as_ref().unwrap()["minimal"],
            Value::Null
        );
        let copilot = models
            .iter()
            .find(|m| m.provider == "github-copilot")
            .unwrap();
        assert!(
            copilot
                .headers
                .as_ref()
                .unwrap()
                .contains_key("Editor-Version")
        );
        // Every provider with a default model id has that model in the catalog.
        for (provider, id) in DEFAULT_MODEL_PER_PROVIDER {
            assert!(
                models
                    .iter()
                    .any(|m| m.provider == *provider && m.id == *id),
                "{provider}/{id}"
            );
        }
    }

    #[test]
    fn custom_models_get_defaults_and_replace_builtins() {
        let text = r#"{
          // local server
          "providers": {
            "mock": {"baseUrl": "http://127.0.0.1:1/v1", "apiKey": "MOCK_KEY", "api": "openai-completions",
                     "headers": {"X-A": "1"}, "authHeader": true,
                     "models": [{"id": "m1", "headers": {"X-B": "2"}}, {"id": "m2", "reasoning": true, "input": ["text", "image"]},]},
            "openai": {"models": [{"id": "gpt-5.4", "name": "Mine"}], "modelOverrides": {"gpt-4o": {"name": "Four", "cost": {"input": 9}}}},
            "anthropic": {"baseUrl": "http://proxy", "compat": {"x": true}},
          }
        }"#;
        let r = Registry::from_models_json(Some(text));
        assert_eq!(r.load_error, None);
        let m1 = r.models().iter().find(|m| m.id == "m1").unwrap();
        let wire = serde_json::to_value(m1).unwrap();
        assert_eq!(
            wire,
            json!({"id":"m1","name":"m1","api":"openai-completions","provider":"mock","baseUrl":"http://127.0.0.1:1/v1",
                   "reasoning":false,"input":["text"],"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0},
                   "contextWindow":128000,"maxTokens":16384})
        );
        assert_eq!(
            r.models().last().unwrap().id,
            "m2",
            "new models are appended in file order"
        );
        let mine = r
            .models()
            .iter()
            .position(|m| m.provider == "openai" && m.id == "gpt-5.4")
            .unwrap();
        assert_eq!(r.models()[mine].name, "Mine");
        assert_eq!(
            r.models()[mine].api,
            "openai-responses",
            "api inherited from the provider's first built-in"
        );
        assert!(
            r.models()[mine].thinking_level_map.is_none(),
            "replacement is a fresh definition"
        );
        let four = r
            .models()
            .iter()
            .find(|m| m.provider == "openai" && m.id == "gpt-4o")
            .unwrap();
        assert_eq!((four.name.as_str(), four.cost.input), ("Four", 9.0));
        assert!(four.cost.output > 0.0);
        let claude = r
            .models()
            .iter()
            .find(|m| m.provider == "anthropic")
            .unwrap();
        assert_eq!(claude.base_url, "http://proxy");
        assert_eq!(claude.compat.as_ref().unwrap()["x"], true);
        let cfg = &r.provider_configs["mock"];
        assert_eq!(cfg.api_key.as_deref(), Some("MOCK_KEY"));
        assert!(cfg.auth_header);
        assert_eq!(
            r.model_headers[&("mock".to_string(), "m1".to_string())]["X-B"],
            "2"
        );
    }

    #[test]
    fn lookups_without_the_full_list_answer_as_the_full_list() {
        let text = r#"{"providers": {
            "mock": {"baseUrl": "http://127.0.0.1:1/v1", "apiKey": "K", "api": "openai-completions",
                     "models": [{"id": "m1"}, {"id": "m2"}, {"id": "m1", "name": "again"}]},
            "Mock": {"baseUrl": "http://127.0.0.1:2/v1", "apiKey": "K", "api": "openai-completions",
                     "models": [{"id": "m3"}]},
            "OpenAI": {"baseUrl": "http://127.0.0.1:3/v1", "apiKey": "K", "api": "openai-completions",
                     "models": [{"id": "o1"}]},
            "openai": {"models": [{"id": "gpt-5.4", "name": "Mine"}], "modelOverrides": {"gpt-4o": {"name": "Four"}}},
            "anthropic": {"baseUrl": "http://proxy", "compat": {"x": true}}
        }}"#;
        for text in [None, Some(text)] {
            let full = Registry::from_models_json(text);
            let lazy = Registry::from_models_json(text);
            assert_eq!(full.load_error, None);
            let all = full.models();
            let mut names: Vec<String> = all.iter().map(|m| m.provider.clone()).collect();
            names.dedup();
            names.extend(["MOCK", "openAI", "Anthropic", "nope"].map(String::from));
            for name in &names {
                let expected: Vec<Model> = all
                    .iter()
                    .filter(|m| &m.provider == name)
                    .cloned()
                    .collect();
                assert_eq!(lazy.provider_models(name), expected, "{name}");
                assert_eq!(
                    lazy.provider_spelling(name),
                    all.provider_spelling(name),
                    "{name}"
                );
            }
            for m in all {
                let first = all
                    .iter()
                    .find(|x| x.provider == m.provider && x.id == m.id);
                assert_eq!(lazy.find(&m.provider, &m.id).as_ref(), first);
            }
            assert_eq!(lazy.find("anthropic", "no-such-model"), None);
            for m in all.iter().step_by(7).chain(all.iter().rev().take(6)) {
                for id in [m.id.clone(), m.id.to_uppercase()] {
                    assert_eq!(lazy.with_id(&id), all.with_id(&id), "{id}");
                }
            }
            assert_eq!(lazy.with_id("no-such-model"), Vec::new());
            let providers = lazy.provider_names();
            assert_eq!(providers, all.provider_names());
            assert_models_of_filter(&lazy, all);
            assert!(lazy.all.get().is_none(), "none of that built the full list");
            assert_models_of_filter(&full, all);
        }
    }

    /// `models_of` is the full list filtered by provider, whether or not that list is built.
    fn assert_models_of_filter(registry: &Registry, all: &[Model]) {
        let sets: [&[&str]; 5] = [
            &[],
            &["mock"],
            &["openai", "anthropic", "Mock"],
            &["typesafe", "anthropic", "OpenAI", "google"],
            &["amazon-bedrock", "xiaomi-token-plan-sgp", "mock", "nope"],
        ];
        for set in sets {
            let keep = |provider: &str| set.contains(&provider);
            let expected: Vec<Model> = all
                .iter()
                .filter(|m| set.contains(&m.provider.as_str()))
                .cloned()
                .collect();
            assert_eq!(registry.models_of(&keep), expected, "{set:?}");
        }
        let everything = registry.models_of(&|_| true);
        assert_eq!(everything, all);
    }

    /// models-store.json's models answer every lookup as the full list has them, typesafe's
    /// first models included.
    #[test]
    fn lookups_with_a_models_store_answer_as_the_full_list() {
        let model = |provider: &str, id: &str| {
            serde_json::json!({"id": id, "name": id, "api": "openai-completions",
                "provider": provider, "baseUrl": "https://x", "reasoning": false,
                "input": ["text"], "cost": {"input": 1, "output": 1, "cacheRead": 0,
                "cacheWrite": 0}, "contextWindow": 1000, "maxTokens": 100})
        };
        let newer = super::super::models_store::BUILTIN_GENERATED_AT_MS + 1.0;
        let store = serde_json::json!({
            "anthropic": {"lastModified": newer, "models": [model("anthropic", "claude-new")]},
            "typesafe": {"lastModified": newer, "models": [model("typesafe", "ts-1")]},
        })
        .to_string();
        let lazy = Registry::from_models_json(None).with_store(&store);
        let full = Registry::from_models_json(None).with_store(&store);
        let all = full.models();
        assert_eq!(all.len(), 1700);
        let ids: Vec<&str> = all
            .iter()
            .filter(|m| m.provider == "typesafe")
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(ids, ["ts-1"]);
        assert_eq!(
            lazy.find("anthropic", "claude-new").unwrap().name,
            "claude-new"
        );
        assert_eq!(
            lazy.provider_models("anthropic"),
            all.provider_models("anthropic")
        );
        assert_eq!(
            lazy.provider_spelling("TypeSafe").as_deref(),
            Some("typesafe")
        );
        assert_eq!(lazy.with_id("CLAUDE-NEW"), all.with_id("claude-new"));
        assert_eq!(lazy.provider_names(), all.provider_names());
        assert_models_of_filter(&lazy, all);
        assert_models_of_filter(&full, all);
    }

    /// The compat keys pi-rs checks, with pi 1.6.0's schema texts (captured from its validator).
    #[test]
    fn compat_keys_are_checked_as_pi_checks_them() {
        let error_of = |compat: &str| {
            let text = format!(
                r#"{{"providers": {{"x": {{"baseUrl": "http://h", "api": "anthropic-messages",
                "apiKey": "k", "models": [{{"id": "m", "compat": {compat}}}]}}}}}}"#
            );
            let r = Registry::from_models_json(Some(&text));
            r.load_error.map(|e| {
                let list = e
                    .strip_prefix("Invalid models.json schema:\n")
                    .unwrap_or(&e);
                list.replace("providers.x.models.0.compat.", "")
            })
        };
        let valid = r#"{"supportsMessageThreads": true, "imageInput": "assets",
            "allowedFallbackModels": [{"provider": "p", "model": "m", "extra": 1,
                "cost": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0}}]}"#;
        assert_eq!(error_of(valid), None);
        assert_eq!(
            error_of(
                r#"{"sendImageOptInHeader": "x", "supportsMaxOutputTokens": "x",
                "supportsExplicitPromptCacheMode": 0}"#
            )
            .as_deref(),
            Some(
                "  - supportsExplicitPromptCacheMode: must be boolean\n  - supportsMaxOutputTokens: must be boolean\n  - sendImageOptInHeader: must be boolean"
            )
        );
        assert_eq!(
            error_of(r#"{"imageInput": "foo"}"#).as_deref(),
            Some(
                "  - imageInput: must be equal to constant\n  - imageInput: must be equal to constant\n  - imageInput: must be equal to constant\n  - imageInput: must match a schema in anyOf"
            )
        );
        assert_eq!(
            error_of(r#"{"allowedFallbackModels": [{"model": "m", "cost": 5}, 2, 3, 4]}"#)
                .as_deref(),
            Some(
                "  - allowedFallbackModels.0.provider: must have required properties provider\n  - allowedFallbackModels.0.cost: must be object\n  - allowedFallbackModels.1: must be object\n  - allowedFallbackModels.2: must be object\n  - allowedFallbackModels.3: must be object\n  - allowedFallbackModels: must not have more than 3 items"
            )
        );
        assert_eq!(
            error_of(
                r#"{"allowedFallbackModels": [{"provider": 1, "model": "",
                "cost": {"input": "a"}}]}"#
            )
            .as_deref(),
            Some(
                "  - allowedFallbackModels.0.provider: must be string\n  - allowedFallbackModels.0.model: must not have fewer than 1 characters\n  - allowedFallbackModels.0.cost.output: must have required properties output, cacheRead, cacheWrite\n  - allowedFallbackModels.0.cost.input: must be number"
            )
        );
    }

    #[test]
    fn errors_drop_the_file_but_keep_builtins() {
        let r =
            Registry::from_models_json(Some(r#"{"providers": {"x": {"models": [{"id": "a"}]}}}"#));
        assert_eq!(
            r.load_error.as_deref(),
            Some(
                "Failed to load models.json: Provider x: \"baseUrl\" is required when defining custom models."
            )
        );
        assert_eq!(r.models().len(), 1698);
        // pi 1.6.0 needs no `apiKey` for custom models (0.73.1 refused the file).
        let r = Registry::from_models_json(Some(
            r#"{"providers": {"x": {"baseUrl": "http://h/v1", "api": "openai-completions", "models": [{"id": "a"}]}}}"#,
        ));
        assert_eq!(r.load_error, None);
        assert_eq!(r.models().len(), 1699);
        let r = Registry::from_models_json(Some(r#"{"providers": {"x": {}}}"#));
        assert!(r.load_error.unwrap().contains("must specify \"baseUrl\""));
        let r = Registry::from_models_json(Some(
            r#"{"providers": {"x": {"baseUrl": 5, "apiKey": "", "authHeader": "y"}}}"#,
        ));
        assert_eq!(
            r.load_error.as_deref(),
            Some(
                "Invalid models.json schema:\n  - providers.x.baseUrl: must be string\n  - providers.x.apiKey: must not have fewer than 1 characters\n  - providers.x.authHeader: must be boolean"
            )
        );
        let r = Registry::from_models_json(Some("{ nope"));
        assert!(
            r.load_error
                .unwrap()
                .starts_with("Failed to parse models.json: ")
        );
        let r = Registry::from_models_json(Some(
            r#"{"providers": {"y": {"baseUrl": "u", "apiKey": "k", "models": [{"id": "a"}]}}}"#,
        ));
        assert_eq!(
            r.load_error.as_deref(),
            Some(
                "Failed to load models.json: Provider y, model a: no \"api\" specified. Set at provider or model level."
            )
        );
    }
}
