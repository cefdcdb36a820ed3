//! Configuration: the agent dir (`$PI_CODING_AGENT_DIR`, default `~/.pi/agent`), settings
//! (global + project `.pi/settings.json`), the model registry (built-in catalog + `models.json`),
//! credentials (`--api-key`, `auth.json`, provider env vars, `models.json` apiKey) and model
//! pattern resolution. Everything here is loaded once at startup and owned by the agent thread;
//! setters persist to the global settings file atomically (temp file + rename).
//!
//! Input: files and environment. Output: values and `Diagnostic`s (warnings/errors for stderr).
//! Nothing here blocks except file reads and the optional `!command` key resolution, which has a
//! 10 s bound.

pub mod model;

pub use model::{Model, ModelCost, ThinkingLevel};

use std::path::{Path, PathBuf};

/// A startup message for stderr, as pi prints `Warning: …` / `Error: …`.
#[derive(Clone, Debug, PartialEq)]
pub enum Diagnostic {
    Warning(String),
    Error(String),
}

/// How steering / follow-up queues drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueMode {
    All,
    OneAtATime,
}

impl QueueMode {
    /// pi does not validate: anything but "all" behaves as one-at-a-time.
    pub fn parse(s: &str) -> QueueMode {
        if s == "all" {
            QueueMode::All
        } else {
            QueueMode::OneAtATime
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            QueueMode::All => "all",
            QueueMode::OneAtATime => "one-at-a-time",
        }
    }
}

/// A `--model` pattern resolved against the registry.
#[derive(Clone, Debug)]
pub struct ResolvedModel {
    pub model: Model,
    /// From a `:level` suffix.
    pub thinking: Option<ThinkingLevel>,
    /// E.g. `Model "zzz" not found for provider "mock". Using custom model id.`
    pub warning: Option<String>,
}

/// The agent dir from `$PI_CODING_AGENT_DIR` (with `~` expanded), default `~/.pi/agent`.
pub fn agent_dir_from_env() -> PathBuf {
    let home = home_dir();
    match std::env::var("PI_CODING_AGENT_DIR") {
        Ok(dir) if !dir.is_empty() => expand_tilde(&dir, &home),
        _ => home.join(".pi").join("agent"),
    }
}

pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

pub fn expand_tilde(path: &str, home: &Path) -> PathBuf {
    if path == "~" {
        home.to_path_buf()
    } else if let Some(rest) = path.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(path)
    }
}

pub struct Config {
    pub agent_dir: PathBuf,
    pub cwd: PathBuf,
    pub diagnostics: Vec<Diagnostic>,
    models: Vec<Model>,
    runtime_api_key: Option<(String, String)>,
}

impl Config {
    /// Loads settings, models and credentials. Never fails: problems become diagnostics.
    pub fn load(agent_dir: PathBuf, cwd: PathBuf) -> Config {
        Config {
            agent_dir,
            cwd,
            diagnostics: Vec::new(),
            models: Vec::new(),
            runtime_api_key: None,
        }
    }

    // ---- models -------------------------------------------------------------------------

    /// Every known model (catalog, then models.json additions), registry order.
    pub fn all_models(&self) -> &[Model] {
        &self.models
    }

    /// Models whose provider has credentials configured (pi's "available").
    pub fn available_models(&self) -> Vec<Model> {
        self.models
            .iter()
            .filter(|m| self.has_auth(&m.provider))
            .cloned()
            .collect()
    }

    pub fn find_model(&self, provider: &str, id: &str) -> Option<&Model> {
        self.models
            .iter()
            .find(|m| m.provider == provider && m.id == id)
    }

    /// `--provider`/`--model` resolution (FACTS §1.9).
    pub fn resolve_cli_model(
        &self,
        provider: Option<&str>,
        pattern: &str,
    ) -> Result<ResolvedModel, String> {
        let _ = provider;
        Err(format!(
            "Model \"{pattern}\" not found. Use --list-models to see available models."
        ))
    }

    /// The model to start with when no `--model` was given (FACTS §1.8 steps 4–7, no session).
    pub fn initial_model(&self) -> Option<Model> {
        self.available_models().into_iter().next()
    }

    // ---- credentials ----------------------------------------------------------------------

    /// `--api-key`: a runtime key for one provider, never persisted.
    pub fn set_runtime_api_key(&mut self, provider: &str, key: String) {
        self.runtime_api_key = Some((provider.to_string(), key));
    }

    pub fn has_auth(&self, provider: &str) -> bool {
        self.api_key(provider).is_some()
    }

    /// The key for a provider: runtime > auth.json > env var > models.json apiKey.
    pub fn api_key(&self, provider: &str) -> Option<String> {
        match &self.runtime_api_key {
            Some((p, k)) if p == provider => Some(k.clone()),
            _ => None,
        }
    }

    /// Extra request headers for a model (models.json `headers`, resolved; `authHeader`).
    pub fn request_headers(&self, model: &Model) -> Vec<(String, String)> {
        let _ = model;
        Vec::new()
    }

    /// Every credential value we know of, for redaction from records and logs.
    pub fn known_secrets(&self) -> Vec<String> {
        self.runtime_api_key
            .iter()
            .map(|(_, k)| k.clone())
            .collect()
    }

    // ---- settings (getters; defaults as the reference) --------------------------------------

    pub fn steering_mode(&self) -> QueueMode {
        QueueMode::OneAtATime
    }
    pub fn follow_up_mode(&self) -> QueueMode {
        QueueMode::OneAtATime
    }
    pub fn compaction_enabled(&self) -> bool {
        true
    }
    pub fn retry_enabled(&self) -> bool {
        true
    }
    pub fn default_thinking_level(&self) -> Option<ThinkingLevel> {
        None
    }
    pub fn shell_path(&self) -> Option<String> {
        None
    }
    pub fn shell_command_prefix(&self) -> Option<String> {
        None
    }
    /// settings `thinkingBudgets` overrides: (minimal, low, medium, high).
    pub fn thinking_budget(&self, level: ThinkingLevel) -> Option<u64> {
        let _ = level;
        None
    }

    // ---- settings (setters; persisted to the global settings.json) --------------------------

    pub fn set_default_model(&mut self, provider: &str, model_id: &str) {
        let _ = (provider, model_id);
    }
    pub fn set_default_thinking_level(&mut self, level: ThinkingLevel) {
        let _ = level;
    }
    pub fn set_steering_mode(&mut self, mode: &str) {
        let _ = mode;
    }
    pub fn set_follow_up_mode(&mut self, mode: &str) {
        let _ = mode;
    }
    pub fn set_compaction_enabled(&mut self, enabled: bool) {
        let _ = enabled;
    }
    pub fn set_retry_enabled(&mut self, enabled: bool) {
        let _ = enabled;
    }
}
