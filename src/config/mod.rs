//! Configuration: the agent dir (`$PI_CODING_AGENT_DIR`, default `~/.pi/agent`), settings
//! (global + project `.pi/settings.json`), the model registry (built-in catalog + `models.json`),
//! credentials (`--api-key`, `auth.json`, provider env vars, `models.json` apiKey) and model
//! pattern resolution. Everything here is loaded once at startup and owned by the agent thread;
//! setters persist to the global settings file atomically (temp file + rename).
//!
//! Input: files and environment. Output: values and `Diagnostic`s (warnings/errors for stderr).
//! Nothing here blocks except file reads, the optional `!command` key resolution (10 s bound)
//! and the refresh of an expired subscription login (`oauth`; bounded HTTP under pi's lock).

pub mod auth;
pub mod auth_lock;
pub mod aws;
pub mod google_adc;
pub mod jsonc;
pub mod matching;
pub mod model;
pub mod models_json;
pub mod models_store;
pub mod oauth;
pub mod oauth_callback;
mod oauth_chatgpt;
mod oauth_device;
mod oauth_kimi;
mod oauth_meta;
mod oauth_openrouter;
mod oauth_radius;
mod oauth_xai;
pub mod registry;
pub mod resolve;
pub mod settings;
pub mod start_model;
pub mod trust;

pub use model::{Model, ModelCost, ThinkingLevel};
pub use resolve::{ModelError, ScopedModel};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use auth::{AuthFile, Credential, Env, ValueResolver};
use registry::{ModelSource, Registry};
use settings::Settings;

use crate::paths::{expand_tilde, home_dir};

/// `retry.provider.*` as one request needs them.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderRetry {
    /// Extra attempts after the first (`retry.provider.maxRetries`, default 0).
    pub max_retries: u32,
    /// The longest server-requested wait honoured (`retry.provider.maxRetryDelayMs`, default
    /// 60 s); `None` = no limit (the setting is 0). A longer request fails the request at once.
    pub max_server_delay: Option<Duration>,
}

impl Default for ProviderRetry {
    fn default() -> ProviderRetry {
        ProviderRetry {
            max_retries: 0,
            max_server_delay: Some(Duration::from_secs(60)),
        }
    }
}

/// A startup message for stderr, as pi prints `Warning: …` / `Error: …`.
#[derive(Clone, Debug, PartialEq)]
pub enum Diagnostic {
    Warning(String),
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

/// `$PI_CODING_AGENT_SESSION_DIR` with `~` expanded, when set and non-empty. Precedence is
/// `--session-dir` > this > settings `sessionDir` (the caller applies it).
pub fn session_dir_from_env() -> Option<PathBuf> {
    match std::env::var("PI_CODING_AGENT_SESSION_DIR") {
        Ok(dir) if !dir.is_empty() => Some(expand_tilde(&dir, &home_dir())),
        _ => None,
    }
}

/// The login help paragraph of "No API key found" / "No models available" messages, pointing at
/// the provider and model docs in `docs_dir`.
pub fn login_help(docs_dir: &Path) -> String {
    format!(
        "Use /login to log into a provider via OAuth or API key. See:\n  {}\n  {}",
        docs_dir.join("providers.md").display(),
        docs_dir.join("models.md").display()
    )
}

/// Default docs dir: `docs/` of pi's package folder (`$PI_PACKAGE_DIR`, else the executable's
/// folder).
fn default_docs_dir(env: &Env) -> PathBuf {
    crate::paths::package_dir(env.get("PI_PACKAGE_DIR"), &env.home()).join("docs")
}

/// What a request to a model needs: the API key (if any) and extra headers, in order.
pub type RequestAuth = (Option<String>, Vec<(String, String)>);

pub struct Config {
    pub agent_dir: PathBuf,
    pub cwd: PathBuf,
    /// Whether the project's `.pi/` resources load (and what was skipped).
    pub project_trust: trust::ProjectTrust,
    /// `--approve` / `--no-approve`: it decides for every directory the process works in.
    trust_override: Option<bool>,
    pub diagnostics: Vec<Diagnostic>,
    env: Env,
    settings: Settings,
    registry: Registry,
    auth: AuthFile,
    resolver: ValueResolver,
    runtime_api_keys: HashMap<String, String>,
    /// Credentials resolved elsewhere (MCP `env`/`headers` values), redacted like the others.
    extra_secrets: Vec<String>,
    docs_dir: PathBuf,
    /// Token endpoints of the subscription logins.
    oauth_endpoints: oauth::Endpoints,
    /// Logins refreshed by this process (auth.json as loaded still holds the old tokens).
    oauth_fresh: Mutex<HashMap<String, oauth::Fresh>>,
    /// (extensions) Providers whose derived key (`getApiKey`) a model request has used: the next
    /// request asks for it again, as pi 1.6.0 calls `getApiKey` for every request.
    oauth_keys_spent: Mutex<std::collections::HashSet<String>>,
    /// The last failed refresh per provider: when, and the message for the user.
    oauth_failures: Mutex<HashMap<String, (Instant, String)>>,
    /// (extensions) Providers registered with `oauth`: who refreshes their logins.
    extension_oauth: HashMap<String, std::sync::Arc<dyn oauth::Renewer>>,
}

/// The credential a request to `provider`'s models would use now (`Config::api_key`: auth.json
/// read afresh, an expired subscription login refreshed under pi's lock, the provider's key
/// variable, models.json `apiKey`), for an MCP server's `auth.provider` (pi 1.6.0 reads the
/// provider's key on every MCP request). Project settings play no part in credentials, so none
/// are read. `--api-key` is the agent's own and does not count.
///
/// Each call reads auth.json and models.json's size and time; the configuration is loaded again
/// only when one of them changed since the last call for this agent dir (`credential_config`).
pub fn provider_credential(agent_dir: &Path, provider: &str) -> Option<String> {
    credential_config(agent_dir)
        .api_key(provider)
        .filter(|key| !key.is_empty())
}

/// A configuration loaded for `provider_credential`, with what it was loaded from.
struct CredentialSource {
    agent_dir: PathBuf,
    stamp: CredentialStamp,
    config: std::sync::Arc<Config>,
}

/// auth.json's bytes (compared whole: two writes within one clock tick keep the time) and
/// models.json's size and modification time.
#[derive(PartialEq)]
struct CredentialStamp {
    auth: Option<Vec<u8>>,
    models_json: Option<(u64, Option<std::time::SystemTime>)>,
}

impl CredentialStamp {
    fn read(agent_dir: &Path) -> CredentialStamp {
        let models_json = std::fs::metadata(agent_dir.join("models.json"))
            .ok()
            .map(|m| (m.len(), m.modified().ok()));
        CredentialStamp {
            auth: std::fs::read(agent_dir.join("auth.json")).ok(),
            models_json,
        }
    }
}

/// The configuration for `agent_dir`'s credentials: the one loaded before while auth.json and
/// models.json are unchanged (its refreshed logins and failed refreshes are remembered as the
/// agent's are), else loaded afresh. The shared copy is used outside the lock, so one server's
/// slow `!command` or refresh does not hold up another's.
fn credential_config(agent_dir: &Path) -> std::sync::Arc<Config> {
    static SOURCES: Mutex<Vec<CredentialSource>> = Mutex::new(Vec::new());
    let stamp = CredentialStamp::read(agent_dir);
    if let Some(source) = lock(&SOURCES)
        .iter()
        .find(|s| s.agent_dir == agent_dir && s.stamp == stamp)
    {
        return source.config.clone();
    }
    let config = std::sync::Arc::new(Config::load(
        agent_dir.to_path_buf(),
        agent_dir.to_path_buf(),
        Some(false),
    ));
    // Stamped as read before loading: a file changed meanwhile (or auth.json created by the
    // load) makes the next call load again, never keeps a stale copy.
    let mut sources = lock(&SOURCES);
    sources.retain(|s| s.agent_dir != agent_dir);
    sources.push(CredentialSource {
        agent_dir: agent_dir.to_path_buf(),
        stamp,
        config: config.clone(),
    });
    config
}

/// A failed refresh is not retried sooner than this (a prompt asks for the key twice).
const REFRESH_RETRY_AFTER: Duration = Duration::from_secs(10);

/// The login must be refreshed before its token is used.
struct NeedsRefresh;

/// A subscription login being refreshed on a worker thread (`Config::start_oauth_refresh`).
/// Dropping it cancels the worker's wait for the auth.json lock.
pub struct OAuthRefresh {
    pub provider: String,
    pub result: crossbeam_channel::Receiver<Result<oauth::Fresh, oauth::OAuthError>>,
    cancel: crate::child::CancelFlag,
}

impl Drop for OAuthRefresh {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Config {
    /// Loads settings, models and credentials. Never fails: problems become diagnostics.
    /// `trust_override` is `--approve` / `--no-approve`: project settings load only once the
    /// project is trusted (see `trust`).
    pub fn load(agent_dir: PathBuf, cwd: PathBuf, trust_override: Option<bool>) -> Config {
        Config::load_with_env(agent_dir, cwd, Env::from_process(), trust_override)
    }

    /// `load` with an explicit environment snapshot (tests, embedding).
    pub fn load_with_env(
        agent_dir: PathBuf,
        cwd: PathBuf,
        env: Env,
        trust_override: Option<bool>,
    ) -> Config {
        let mut diagnostics = Vec::new();
        // `defaultProjectTrust` is a global setting: read before the project file may load.
        let (global_only, _) = Settings::load(&agent_dir, None);
        let project_trust = trust::resolve(
            &agent_dir,
            &cwd,
            &env.home(),
            trust_override,
            global_only.get("defaultProjectTrust"),
        );
        let project_cwd = project_trust.trusted.then_some(cwd.as_path());
        let (settings, errors) = Settings::load(&agent_dir, project_cwd);
        for (scope, error) in errors {
            diagnostics.push(Diagnostic::Warning(format!(
                "(runtime creation, {scope} settings) {error}"
            )));
        }
        diagnostics.extend(
            settings
                .numeric_warnings()
                .into_iter()
                .map(Diagnostic::Warning),
        );
        let (auth, auth_problem) = AuthFile::load(&agent_dir);
        if let Some(problem) = auth_problem {
            diagnostics.push(Diagnostic::Warning(format!("auth.json: {problem}")));
        }
        let registry = Registry::load(&agent_dir.join("models.json"));
        if let Some(error) = &registry.load_error {
            // The reference keeps this quiet in RPC mode; a warning never stops startup.
            diagnostics.push(Diagnostic::Warning(format!(
                "errors loading models.json:\n{error}"
            )));
        }
        if let Some(error) = &registry.store_error {
            diagnostics.push(Diagnostic::Warning(error.clone()));
        }
        Config {
            agent_dir,
            trust_override,
            cwd,
            project_trust,
            diagnostics,
            docs_dir: default_docs_dir(&env),
            oauth_endpoints: oauth::Endpoints::from_env(&env),
            env,
            settings,
            registry,
            auth,
            resolver: ValueResolver::default(),
            runtime_api_keys: HashMap::new(),
            oauth_fresh: Mutex::new(HashMap::new()),
            oauth_keys_spent: Mutex::new(Default::default()),
            oauth_failures: Mutex::new(HashMap::new()),
            extension_oauth: HashMap::new(),
            extra_secrets: Vec::new(),
        }
    }

    // ---- models -------------------------------------------------------------------------

    /// Every known model (catalog, then models.json additions), registry order.
    pub fn all_models(&self) -> &[Model] {
        self.registry.models()
    }

    /// Models whose provider has credentials configured (pi's "available"), in registry order;
    /// only those providers' catalog rows are read.
    pub fn available_models(&self) -> Vec<Model> {
        self.registry.models_of(&|provider| self.has_auth(provider))
    }

    /// For the extensions' `models` query: what writes its answer on another thread (the list's
    /// JSON text, written once per list, or a copy of the registry to build it from) and which
    /// providers have credentials now (`available_models`' test, each provider checked once).
    pub fn models_for_answer(&self) -> models_json::ModelsAnswer {
        let source = match self.registry.list_json_ready() {
            Some(list) => models_json::ListSource::Ready(list),
            None => models_json::ListSource::Build(Box::new(self.registry.clone())),
        };
        let providers = match &source {
            models_json::ListSource::Ready(list) => {
                let mut names: Vec<String> = Vec::new();
                for model in list.models() {
                    if names.last() != Some(&model.provider) && !names.contains(&model.provider) {
                        names.push(model.provider.clone());
                    }
                }
                names
            }
            models_json::ListSource::Build(registry) => registry.list_providers(),
        };
        let has_auth = providers
            .into_iter()
            .map(|p| {
                let auth = self.has_auth(&p);
                (p, auth)
            })
            .collect();
        models_json::ModelsAnswer { source, has_auth }
    }

    /// The model with this provider and id (read from that provider's rows alone).
    pub fn find_model(&self, provider: &str, id: &str) -> Option<Model> {
        self.registry.find(provider, id)
    }

    /// `--provider`/`--model` resolution (FACTS §1.9).
    pub fn resolve_cli_model(
        &self,
        provider: Option<&str>,
        pattern: &str,
        inline_api_key: bool,
        cli_thinking: Option<&str>,
    ) -> Result<ResolvedModel, resolve::ModelError> {
        let usable = |provider: &str| self.has_auth(provider);
        resolve::resolve_cli_model(
            &self.registry,
            &resolve::CliModelRequest {
                provider,
                pattern,
                usable: &usable,
                inline_api_key,
                cli_thinking,
            },
        )
    }

    /// `--models` / settings `enabledModels` resolution against the models with auth. Returns the
    /// scoped models in pattern order and the warnings to print.
    pub fn resolve_model_scope(&self, patterns: &[String]) -> (Vec<ScopedModel>, Vec<Diagnostic>) {
        resolve::resolve_model_scope(&self.available_models(), patterns)
    }

    /// The model to start with when no `--model` was given (FACTS §1.8 steps 4–7, no session).
    pub fn initial_model(&self) -> Option<Model> {
        // Neither step builds the full model list: the saved default is one lookup, and the
        // available models are those of the providers with credentials.
        resolve::initial_model(
            &|provider, id| self.registry.find(provider, id),
            &|| self.available_models(),
            self.settings.get_str("defaultProvider"),
            self.settings.get_str("defaultModel"),
        )
    }

    /// The `--list-models [search]` table, exactly as the reference prints it (ends with `\n`).
    pub fn list_models(&self, search: Option<&str>) -> String {
        let no_models = format!("No models available. {}", self.login_help());
        resolve::list_models(&self.available_models(), search, &no_models)
    }

    // ---- credentials ----------------------------------------------------------------------

    /// `--api-key`: a runtime key for one provider, never persisted.
    pub fn set_runtime_api_key(&mut self, provider: &str, key: String) {
        // Redacted from the moment it is known (the session header may be written next).
        crate::redact::register_secrets([key.clone()]);
        self.runtime_api_keys.insert(provider.to_string(), key);
    }

    /// Whether `provider` is a provider pi-rs knows (the catalog's, models.json's, a key
    /// variable's or a subscription login's), for `pi auth`.
    pub fn is_known_provider(&self, provider: &str) -> bool {
        !self.registry.provider_models(provider).is_empty()
            || auth::env_key_names(provider).is_some()
            || oauth::PROVIDERS.contains(&provider)
            || self.registry.provider_configs.contains_key(provider)
    }

    /// The type of the provider's auth.json entry (`api_key`, `oauth`), if it has one.
    pub fn stored_credential_type(&self, provider: &str) -> Option<&'static str> {
        match self.auth.get(provider)? {
            Credential::ApiKey(_) => Some("api_key"),
            Credential::OAuth { .. } => Some("oauth"),
            Credential::Other => None,
        }
    }

    /// A subscription login's stored access token, as it is (no refresh).
    pub fn stored_oauth_access(&self, provider: &str) -> Option<String> {
        match self.auth.get(provider)? {
            Credential::OAuth { access, .. } => Some(access).filter(|a| !a.is_empty()),
            _ => None,
        }
    }

    /// The providers auth.json has an entry for, in file order.
    pub fn stored_providers(&self) -> Vec<String> {
        self.auth.providers().map(str::to_string).collect()
    }

    /// A subscription login's access token that stays valid `min_validity_ms` more, refreshed
    /// under pi's lock when it would not (`pi auth print-bearer-token --min-expiry`).
    pub fn oauth_token_valid_for(&self, provider: &str, min_validity_ms: f64) -> Option<String> {
        let Some(Credential::OAuth {
            access, expires_ms, ..
        }) = self.auth.get(provider)
        else {
            return None;
        };
        // pi 1.6.0 asks for at least its usual five minutes, whatever `--min-expiry` says.
        let margin = min_validity_ms.max(oauth::REFRESH_MARGIN_MS);
        if expires_ms.is_some_and(|e| crate::time::now_ms() as f64 + margin < e) {
            return Some(access);
        }
        // A command on the terminal: the lock wait is bounded, nothing cancels it.
        let cancel = crate::child::CancelFlag::default();
        let refreshed = oauth::refresh_locked_within(
            &self.agent_dir,
            provider,
            &self.oauth_endpoints,
            margin,
            &cancel,
        );
        match refreshed {
            Ok(fresh) => Some(fresh.access),
            Err(reason) => {
                log::warn!("refreshing the {provider} login failed: {reason}");
                None
            }
        }
    }

    /// A variable as a provider's credential sees it (pi 1.6.0's provider env): the `env` object
    /// of its auth.json entry, else the process environment.
    pub fn provider_env(&self, provider: &str, name: &str) -> Option<String> {
        self.auth
            .env_value(provider, name)
            .or_else(|| self.env.get(name))
            .map(str::to_string)
    }

    /// Any credential configured for the provider, checked without running `!command`s. A
    /// Cloudflare key counts only with the ids its endpoint needs (`CLOUDFLARE_ACCOUNT_ID`, and
    /// `CLOUDFLARE_GATEWAY_ID` for the AI Gateway), as in pi 1.6.0.
    pub fn has_auth(&self, provider: &str) -> bool {
        if !cloudflare_ids(provider)
            .iter()
            .all(|name| self.provider_env(provider, name).is_some())
        {
            return false;
        }
        self.runtime_api_keys.contains_key(provider)
            || self.registry.is_virtual_only_provider(provider)
            || self.auth.has(provider)
            || self.env_bearer_token(provider).is_some()
            || auth::env_api_key(&self.env, provider).is_some()
            || self
                .registry
                .provider_configs
                .get(provider)
                .and_then(|c| c.api_key.as_deref())
                .is_some_and(|key| auth::config_value_configured(&self.env, key))
    }

    /// The key for a provider: runtime > auth.json api_key > auth.json OAuth token (unexpired)
    /// > env var > models.json apiKey. May run a `!command` (bounded, 10 s).
    pub fn api_key(&self, provider: &str) -> Option<String> {
        if let Some(key) = self.stored_api_key(provider) {
            return key;
        }
        let config_key = self
            .registry
            .provider_configs
            .get(provider)?
            .api_key
            .as_deref()?;
        self.resolver.resolve_uncached(&self.env, config_key)
    }

    /// Runtime, auth.json and env sources. `Some(None)` means a source decided "no key" and
    /// lower sources must not be consulted (the reference stops at an auth.json api_key entry
    /// whose value does not resolve, and at OAuth entries of unknown providers).
    fn stored_api_key(&self, provider: &str) -> Option<Option<String>> {
        if let Some(key) = self
            .runtime_api_keys
            .get(provider)
            .filter(|k| !k.is_empty())
        {
            return Some(Some(key.clone()));
        }
        match self.auth.get(provider) {
            Some(Credential::ApiKey(key)) => {
                // The entry's own `env` comes first for the variables its key names.
                let env = self.env.overlaid(self.auth.env_object(provider));
                return Some(self.resolver.resolve(&env, &key));
            }
            Some(Credential::OAuth {
                access, expires_ms, ..
            }) => {
                if !self.uses_oauth(provider) {
                    return Some(None);
                }
                return Some(self.oauth_access(provider, access, expires_ms));
            }
            Some(Credential::Other) | None => {}
        }
        if let Some(token) = self.env_bearer_token(provider) {
            return Some(Some(token));
        }
        auth::env_api_key(&self.env, provider).map(Some)
    }

    /// `ANTHROPIC_AUTH_TOKEN`, when it is what authenticates Anthropic requests: set, and no
    /// runtime key or auth.json entry decides first (pi 1.6.0's Anthropic key resolution).
    fn env_bearer_token(&self, provider: &str) -> Option<String> {
        if provider != "anthropic"
            || self.runtime_api_keys.contains_key(provider)
            || self.auth.has(provider)
        {
            return None;
        }
        self.env.get(auth::ANTHROPIC_AUTH_TOKEN).map(str::to_string)
    }

    /// Whether the provider's requests carry their credential in a header of their own
    /// (`request_auth`'s `Authorization: Bearer` of `ANTHROPIC_AUTH_TOKEN`) and no API key.
    pub fn key_in_headers(&self, provider: &str) -> bool {
        self.env_bearer_token(provider).is_some()
    }

    /// A subscription login's access token, refreshed (under pi's auth.json lock) when expired or
    /// about to expire. A failed refresh yields no key, as in pi, and leaves a notice saying how
    /// to log in again; the new tokens join the redaction lists at once. The agent refreshes on a
    /// worker first (`start_oauth_refresh`), so this refreshes itself only for callers that did
    /// not (bounded by the lock's and the token endpoint's limits).
    fn oauth_access(
        &self,
        provider: &str,
        access: String,
        expires_ms: Option<f64>,
    ) -> Option<String> {
        match self.oauth_cached(provider, access, expires_ms, false) {
            Ok(key) => key,
            Err(NeedsRefresh) => {
                let cancel = crate::child::CancelFlag::default();
                let result = match self.extension_oauth.get(provider) {
                    Some(renewer) => oauth::refresh_locked_with(
                        &self.agent_dir,
                        provider,
                        renewer.as_ref(),
                        &cancel,
                    ),
                    None => oauth::refresh_locked(
                        &self.agent_dir,
                        provider,
                        &self.oauth_endpoints,
                        &cancel,
                    ),
                };
                self.finish_oauth_refresh(provider, result)
            }
        }
    }

    /// The token when no refresh is needed (`Ok(None)`: the last refresh failed moments ago).
    /// `for_request`: a model request is about to be built, so a derived key a request has
    /// used already is asked for again.
    fn oauth_cached(
        &self,
        provider: &str,
        access: String,
        expires_ms: Option<f64>,
        for_request: bool,
    ) -> Result<Option<String>, NeedsRefresh> {
        // A key the extension derives from the login is asked for like a refresh (on the worker).
        let derives = self
            .extension_oauth
            .get(provider)
            .is_some_and(|renewer| renewer.derives_key());
        let spent = for_request && derives && lock(&self.oauth_keys_spent).contains(provider);
        let fresh = lock(&self.oauth_fresh).get(provider).cloned();
        if let Some(fresh) = &fresh
            && !oauth::needs_refresh(Some(fresh.expires_ms))
            && !spent
        {
            return Ok(Some(fresh.api_key().to_string()));
        }
        if !derives && !oauth::needs_refresh(expires_ms) && !access.is_empty() && fresh.is_none() {
            return Ok(Some(access));
        }
        if let Some((at, _)) = lock(&self.oauth_failures).get(provider)
            && at.elapsed() < REFRESH_RETRY_AFTER
        {
            return Ok(None);
        }
        Err(NeedsRefresh)
    }

    /// Starts refreshing `provider`'s subscription login on a worker thread when the next
    /// `api_key` would have to (an expired login that is the key's source); `None` when not.
    /// The agent waits for the result in its loop, so commands, `abort` and signals are served
    /// meanwhile; dropping the handle cancels the wait for the lock.
    pub fn start_oauth_refresh(&self, provider: &str) -> Option<OAuthRefresh> {
        if self
            .runtime_api_keys
            .get(provider)
            .is_some_and(|k| !k.is_empty())
            || !self.uses_oauth(provider)
        {
            return None;
        }
        let Some(Credential::OAuth {
            access, expires_ms, ..
        }) = self.auth.get(provider)
        else {
            return None;
        };
        self.oauth_cached(provider, access, expires_ms, true)
            .err()?;
        let (sender, result) = crossbeam_channel::bounded(1);
        let cancel = crate::child::CancelFlag::default();
        let (agent_dir, endpoints) = (self.agent_dir.clone(), self.oauth_endpoints.clone());
        let (name, watched) = (provider.to_string(), cancel.clone());
        let renewer = self.extension_oauth.get(provider).cloned();
        let spawned = std::thread::Builder::new()
            .name(format!("oauth-refresh-{provider}"))
            .spawn(move || {
                let result = match renewer {
                    Some(renewer) => {
                        oauth::refresh_locked_with(&agent_dir, &name, renewer.as_ref(), &watched)
                    }
                    None => oauth::refresh_locked(&agent_dir, &name, &endpoints, &watched),
                };
                let _ = sender.send(result);
            });
        if let Err(e) = spawned {
            log::warn!("cannot start the {provider} login refresh: {e}");
            return None;
        }
        Some(OAuthRefresh {
            provider: provider.to_string(),
            result,
            cancel,
        })
    }

    /// (extensions) A model request to `provider` is built with its key: a key derived from the
    /// login (`getApiKey`) is asked for again before the next request (`start_oauth_refresh`).
    pub fn spend_oauth_key(&self, provider: &str) {
        if self
            .extension_oauth
            .get(provider)
            .is_some_and(|renewer| renewer.derives_key())
        {
            lock(&self.oauth_keys_spent).insert(provider.to_string());
        }
    }

    /// Records a refresh's outcome (from `start_oauth_refresh`'s worker or done in place); the
    /// new access token, or `None` after a failure.
    pub fn finish_oauth_refresh(
        &self,
        provider: &str,
        result: Result<oauth::Fresh, oauth::OAuthError>,
    ) -> Option<String> {
        match result {
            Ok(fresh) => {
                crate::redact::add_secret(&fresh.access);
                for secret in fresh.refresh.iter().chain(&fresh.key) {
                    crate::redact::add_secret(secret);
                }
                lock(&self.oauth_failures).remove(provider);
                lock(&self.oauth_keys_spent).remove(provider);
                let key = fresh.api_key().to_string();
                lock(&self.oauth_fresh).insert(provider.to_string(), fresh);
                Some(key)
            }
            Err(reason) => {
                log::warn!("refreshing the {provider} login failed: {reason}");
                // A key the extension refused to derive this time is no longer the key.
                if matches!(reason, oauth::OAuthError::KeyDerivation { .. }) {
                    lock(&self.oauth_fresh).remove(provider);
                }
                let message = refresh_failed_message(provider, &reason);
                lock(&self.oauth_failures).insert(provider.to_string(), (Instant::now(), message));
                None
            }
        }
    }

    /// The model as a request sees it: with a GitHub Copilot subscription login, Copilot models go
    /// to the API host named in the (possibly just refreshed) Copilot token, as pi's
    /// `modifyModels` does; Cloudflare models get their account and gateway ids in the URL (a
    /// placeholder without a value stays as it is, as in pi 1.6.0).
    pub fn request_model(&self, model: &Model) -> Model {
        let mut model = model.clone();
        for name in cloudflare_ids(&model.provider) {
            let placeholder = format!("{{{name}}}");
            if model.base_url.contains(&placeholder)
                && let Some(value) = self.provider_env(&model.provider, name)
            {
                model.base_url = model.base_url.replace(&placeholder, &value);
            }
        }
        if model.provider == oauth::COPILOT_PROVIDER
            && let Some(Credential::OAuth { access, .. }) = self.auth.get(&model.provider)
        {
            let token = lock(&self.oauth_fresh)
                .get(&model.provider)
                .map_or(access, |fresh| fresh.access.clone());
            let enterprise = self
                .auth
                .field(&model.provider, "enterpriseUrl")
                .filter(|d| !d.is_empty());
            model.base_url = oauth::copilot_base_url(&token, enterprise);
        }
        model
    }

    /// Key and headers for a request to `model`, as the reference computes them: catalog headers,
    /// then models.json provider headers, then models.json model headers (values resolved like
    /// keys, commands re-run), plus `Authorization: Bearer <key>` when the provider sets
    /// `authHeader`. Errors carry the reference's wording.
    pub fn request_auth(&self, model: &Model) -> Result<RequestAuth, String> {
        let provider_config = self.registry.provider_configs.get(&model.provider);
        let api_key = match self.stored_api_key(&model.provider) {
            Some(key) => key,
            None => match provider_config.and_then(|c| c.api_key.as_deref()) {
                Some(config) => Some(self.resolver.resolve_or_error(
                    &self.env,
                    config,
                    &format!("API key for provider \"{}\"", model.provider),
                )?),
                None => None,
            },
        };
        let mut headers: Vec<(String, String)> = Vec::new();
        let mut put = |name: &str, value: String| match headers.iter_mut().find(|(n, _)| n == name)
        {
            Some(slot) => slot.1 = value,
            None => headers.push((name.to_string(), value)),
        };
        if let Some(token) = self.env_bearer_token(&model.provider) {
            put("Authorization", format!("Bearer {token}"));
        }
        for (name, value) in model.headers.iter().flatten() {
            if let Some(v) = value.as_str() {
                put(name, v.to_string());
            }
        }
        if let Some(h) = provider_config.and_then(|c| c.headers.as_ref()) {
            for (name, value) in h {
                let v = self.resolver.resolve_or_error(
                    &self.env,
                    value.as_str().unwrap_or_default(),
                    &format!("provider \"{}\" header \"{name}\"", model.provider),
                )?;
                put(name, v);
            }
        }
        let key = (model.provider.clone(), model.id.clone());
        if let Some(h) = self.registry.model_headers.get(&key) {
            for (name, value) in h {
                let v = self.resolver.resolve_or_error(
                    &self.env,
                    value.as_str().unwrap_or_default(),
                    &format!(
                        "model \"{}/{}\" header \"{name}\"",
                        model.provider, model.id
                    ),
                )?;
                put(name, v);
            }
        }
        if provider_config.is_some_and(|c| c.auth_header) {
            let Some(key) = &api_key else {
                return Err(format!("No API key found for \"{}\"", model.provider));
            };
            put("Authorization", format!("Bearer {key}"));
        }
        Ok((api_key, headers))
    }

    /// Extra request headers for a model (models.json `headers`, resolved; `authHeader`).
    /// Resolution failures are logged and yield no headers; use `request_auth` for the error.
    pub fn request_headers(&self, model: &Model) -> Vec<(String, String)> {
        match self.request_auth(model) {
            Ok((_, headers)) => headers,
            Err(e) => {
                log::warn!("request headers for {}/{}: {e}", model.provider, model.id);
                Vec::new()
            }
        }
    }

    /// When the provider's subscription login could not be refreshed: a message telling the user
    /// how to log in again.
    pub fn auth_notice(&self, provider: &str) -> Option<String> {
        lock(&self.oauth_failures)
            .get(provider)
            .map(|(_, message)| message.clone())
    }

    /// The login help paragraph used in "No API key found" / "No model selected" messages.
    pub fn login_help(&self) -> String {
        login_help(&self.docs_dir)
    }

    /// Every credential value we know of, for redaction from records and logs: runtime keys,
    /// auth.json keys (literal or env-resolved; command results once they have run), OAuth tokens,
    /// provider env vars, models.json keys and resolved header values. Values shorter than 6
    /// characters are left out.
    pub fn known_secrets(&self) -> Vec<String> {
        let mut out: Vec<String> = self.runtime_api_keys.values().cloned().collect();
        for provider in self.auth.providers() {
            match self.auth.get(provider) {
                Some(Credential::ApiKey(key)) if !key.starts_with('!') => {
                    let env = self.env.overlaid(self.auth.env_object(provider));
                    out.extend(auth::resolve_plain(&env, &key));
                }
                Some(Credential::OAuth {
                    access, refresh, ..
                }) => {
                    out.push(access);
                    out.extend(refresh);
                }
                _ => {}
            }
        }
        for (provider, _) in registry::DEFAULT_MODEL_PER_PROVIDER {
            for name in auth::env_key_names(provider).unwrap_or(&[]) {
                out.extend(self.env.get(name).map(str::to_string));
            }
        }
        for name in auth::EXTRA_SECRET_ENV_VARS {
            out.extend(self.env.get(name).map(str::to_string));
        }
        // Variables withheld from children by their name hold credentials by the same token
        // (paths and AWS's region/profile settings excepted), and so does a proxy URL's password.
        for (name, value) in self.env.vars() {
            if crate::redact::is_secret_value_of(name, value) {
                out.push(value.to_string());
            }
            if name.to_ascii_lowercase().ends_with("_proxy")
                && let Some(password) = crate::redact::url_password(value)
            {
                out.push(password.to_string());
            }
        }
        out.extend(aws::profile_secrets(&self.env));
        out.extend(google_adc::file_secrets(&self.env));
        for config in self.registry.provider_configs.values() {
            if let Some(key) = config.api_key.as_deref().filter(|k| !k.starts_with('!')) {
                out.extend(auth::resolve_plain(&self.env, key));
            }
        }
        out.extend(self.resolver.resolved_values());
        out.extend(self.extra_secrets.iter().cloned());
        out.retain(|s| crate::redact::is_redactable(s) && s != auth::AMBIENT_CREDENTIALS);
        let mut unique: Vec<String> = Vec::new();
        for s in out {
            if !unique.contains(&s) {
                unique.push(s);
            }
        }
        unique
    }

    /// Adds resolved credential values (MCP server `env`/`headers`) to `known_secrets` and to
    /// the process-wide redaction set.
    pub fn add_known_secrets(&mut self, secrets: &[String]) {
        crate::redact::register_secrets(secrets.iter().cloned());
        self.extra_secrets.extend(secrets.iter().cloned());
    }

    /// (extensions) Registers a provider (`Registry::register_provider`). Stricter than pi:
    /// `!command` values (`apiKey`, `headers`) are refused, since the command would run outside
    /// the extension's sandbox; `$VAR` values resolve as in models.json. The resolved key and
    /// header values join the known secrets (redacted from records and logs).
    pub fn register_provider(&mut self, name: &str, config: &Value) -> Result<(), String> {
        let header_values = config
            .get("headers")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|h| h.values());
        let values: Vec<&str> = config
            .get("apiKey")
            .into_iter()
            .chain(header_values)
            .filter_map(Value::as_str)
            .collect();
        if values.iter().any(|v| v.starts_with('!')) {
            return Err(
                "register_provider: `!command` values are not accepted from extensions; pass the value itself or `$VARIABLE`"
                    .into(),
            );
        }
        self.registry.register_provider(name, config)?;
        let secrets: Vec<String> = values
            .iter()
            .filter_map(|v| auth::resolve_plain(&self.env, v))
            .filter(|s| crate::redact::is_redactable(s))
            .collect();
        self.add_known_secrets(&secrets);
        Ok(())
    }

    /// (extensions) The physical models provider `name` would have with the registration
    /// `config` (the base an `oauth.modifyModels` adapts), the registry left as it is.
    pub fn models_registered_with(&self, name: &str, config: &Value) -> Result<Vec<Model>, String> {
        let mut registry = self.registry.clone();
        registry.register_provider(name, config)?;
        Ok(registry
            .models()
            .iter()
            .filter(|m| m.provider == name && !m.is_virtual())
            .cloned()
            .collect())
    }

    /// (extensions) Adds or replaces a virtual model (`Registry::register_virtual_model`).
    pub fn register_virtual_model(&mut self, model: Model) -> Result<(), String> {
        self.registry.register_virtual_model(model)
    }

    /// (extensions) Removes a virtual model; false when there was none.
    pub fn unregister_virtual_model(&mut self, provider: &str, id: &str) -> bool {
        self.registry.unregister_virtual_model(provider, id)
    }

    /// (extensions) Whether an extension registered this provider.
    pub fn is_extension_provider(&self, name: &str) -> bool {
        self.registry.is_extension_provider(name)
    }

    /// (extensions) Removes a provider an extension registered; false when there was none.
    pub fn unregister_provider(&mut self, name: &str) -> bool {
        self.set_provider_oauth(name, None);
        self.registry.unregister_provider(name)
    }

    /// (extensions) Who refreshes the stored login of a provider an extension registered with
    /// `oauth` (pi's `oauth.refreshToken`); None: the registration has no `oauth`.
    pub fn set_provider_oauth(
        &mut self,
        name: &str,
        renewer: Option<std::sync::Arc<dyn oauth::Renewer>>,
    ) {
        // A key derived by the previous registration's `getApiKey` is not this one's.
        if lock(&self.oauth_fresh)
            .get(name)
            .is_some_and(|fresh| fresh.key.is_some())
        {
            lock(&self.oauth_fresh).remove(name);
        }
        match renewer {
            Some(renewer) => {
                self.extension_oauth.insert(name.to_string(), renewer);
            }
            None => {
                self.extension_oauth.remove(name);
            }
        }
    }

    /// Whether a stored OAuth login of `provider` is used (and refreshed): a built-in
    /// subscription login, or an extension's provider registered with `oauth`.
    fn uses_oauth(&self, provider: &str) -> bool {
        oauth::is_used(provider) || self.extension_oauth.contains_key(provider)
    }

    /// Whether the project's own config (`.pi/mcp.json`, settings, extensions, …) may be used:
    /// the project-trust decision (`trust`).
    pub fn project_trusted(&self) -> bool {
        self.project_trust.trusted
    }

    /// Works in `cwd` from now on (a switched-to session's directory). Its project's trust is
    /// decided for it by the same rules as at start (`--approve`/`--no-approve`, trust.json,
    /// `defaultProjectTrust`), as pi 1.6.0's new runtime decides it per directory: the start
    /// directory's decision never lends trust to another repository's `.pi/`.
    pub fn enter_directory(&mut self, cwd: PathBuf) {
        self.project_trust = trust::resolve(
            &self.agent_dir,
            &cwd,
            &self.env.home(),
            self.trust_override,
            self.settings.scoped_value(false, "defaultProjectTrust"),
        );
        if let Some(warning) = self.project_trust.warning() {
            log::warn!("{warning}");
        }
        self.cwd = cwd;
    }

    // ---- settings (getters; defaults as the reference) --------------------------------------

    /// Reads settings.json again (global, and the project's when trusted; the trust decision
    /// stays): pi 1.6.0's `reload` (`keep_broken`: a file that does not parse keeps its
    /// previous settings) and the new runtime of its session changes (such a file counts as
    /// empty). Problems are logged.
    pub fn reload_settings(&mut self, keep_broken: bool) {
        let project_cwd = self.project_trust.trusted.then_some(self.cwd.as_path());
        for (scope, error) in self.settings.reload(project_cwd, keep_broken) {
            log::warn!("(reload, {scope} settings) {error}");
        }
        for warning in self.settings.numeric_warnings() {
            log::warn!("(reload) {warning}");
        }
    }

    /// Any merged setting by dotted path (`"retry.provider.timeoutMs"`).
    pub fn setting(&self, dotted_path: &str) -> Option<&Value> {
        self.settings.get(dotted_path)
    }

    /// Every merged setting (pi's `getSettings()`: global and project merged).
    pub fn all_settings(&self) -> &serde_json::Map<String, Value> {
        self.settings.merged()
    }

    /// A string list from the global (`project: false`) or project settings file alone.
    pub fn scoped_list(&self, project: bool, key: &str) -> Vec<String> {
        self.settings.scoped_list(project, key)
    }

    /// A top-level value from the global (`project: false`) or project settings file alone.
    pub fn scoped_setting(&self, project: bool, key: &str) -> Option<&Value> {
        self.settings.scoped_value(project, key)
    }

    pub fn steering_mode(&self) -> QueueMode {
        QueueMode::parse(
            self.settings
                .get_str("steeringMode")
                .unwrap_or("one-at-a-time"),
        )
    }
    pub fn follow_up_mode(&self) -> QueueMode {
        QueueMode::parse(
            self.settings
                .get_str("followUpMode")
                .unwrap_or("one-at-a-time"),
        )
    }
    pub fn compaction_enabled(&self) -> bool {
        self.settings.get_bool("compaction.enabled").unwrap_or(true)
    }
    /// `compaction.reserveTokens` for `model`: its `compaction.modelOverrides["provider/id"]`
    /// value first (pi 1.6.0), default 16384. Err: 1.6.0's text for a value that is not a
    /// non-negative integer (it fails the compaction).
    pub fn compaction_reserve_tokens(&self, model: &Model) -> Result<u64, String> {
        self.compaction_tokens(model, "reserveTokens", 16384)
    }
    /// `compaction.keepRecentTokens` for `model`, as [`Config::compaction_reserve_tokens`];
    /// default 20000.
    pub fn compaction_keep_recent_tokens(&self, model: &Model) -> Result<u64, String> {
        self.compaction_tokens(model, "keepRecentTokens", 20000)
    }
    /// A compaction token setting as pi 1.6.0 resolves it: the model's override, else the
    /// ordinary setting, else `default`; each present value must be a non-negative safe
    /// integer (and an override entry an object). Values over 100 M tokens are clamped.
    fn compaction_tokens(&self, model: &Model, field: &str, default: u64) -> Result<u64, String> {
        fn tokens(value: &serde_json::Value) -> Option<u64> {
            const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;
            let f = value.as_f64()?;
            (f >= 0.0 && f.fract() == 0.0 && f <= MAX_SAFE_INTEGER).then_some(f as u64)
        }
        let invalid = |what: String, value: &serde_json::Value| {
            format!(
                "Invalid {what} setting: {}. Expected a non-negative safe integer.",
                crate::js::js_string(Some(value))
            )
        };
        let ordinary = match self.settings.get(&format!("compaction.{field}")) {
            None => None,
            Some(value) => {
                Some(tokens(value).ok_or_else(|| invalid(format!("compaction.{field}"), value))?)
            }
        };
        let key = format!("{}/{}", model.provider, model.id);
        let entry = self
            .settings
            .get("compaction.modelOverrides")
            .and_then(|overrides| overrides.get(&key));
        let over = match entry {
            None => None,
            Some(serde_json::Value::Object(entry)) => match entry.get(field) {
                None => None,
                Some(value) => Some(tokens(value).ok_or_else(|| {
                    invalid(
                        format!("compaction.modelOverrides[\"{key}\"].{field}"),
                        value,
                    )
                })?),
            },
            Some(other) => {
                return Err(format!(
                    "Invalid compaction.modelOverrides[\"{key}\"] setting: {}. Expected an object.",
                    crate::js::js_string(Some(other))
                ));
            }
        };
        Ok(over
            .or(ordinary)
            .map_or(default, |t| t.min(settings::MAX_TOKENS_SETTING)))
    }
    pub fn retry_enabled(&self) -> bool {
        self.settings.get_bool("retry.enabled").unwrap_or(true)
    }
    pub fn retry_max_retries(&self) -> u64 {
        self.settings.get_u64("retry.maxRetries").unwrap_or(3)
    }
    pub fn retry_base_delay_ms(&self) -> u64 {
        self.settings.get_u64("retry.baseDelayMs").unwrap_or(2000)
    }
    /// `retry.provider.maxRetryDelayMs` (default 60000; legacy `retry.maxDelayMs` migrated).
    pub fn provider_max_retry_delay_ms(&self) -> u64 {
        self.settings
            .get_u64("retry.provider.maxRetryDelayMs")
            .unwrap_or(60000)
    }
    /// `retry.provider.maxRetries` (default 0) and `maxRetryDelayMs` (0 = no limit): silent
    /// retries inside the provider client.
    pub fn provider_retry(&self) -> ProviderRetry {
        let max_delay = self.provider_max_retry_delay_ms();
        ProviderRetry {
            max_retries: self
                .settings
                .get_u64("retry.provider.maxRetries")
                .unwrap_or(0)
                .min(u64::from(u32::MAX)) as u32,
            max_server_delay: (max_delay > 0).then(|| Duration::from_millis(max_delay)),
        }
    }
    /// `retry.provider.timeoutMs`: unset means the provider's own default.
    pub fn provider_timeout_ms(&self) -> Option<u64> {
        self.settings.get_u64("retry.provider.timeoutMs")
    }
    pub fn default_provider(&self) -> Option<&str> {
        self.settings.get_str("defaultProvider")
    }
    pub fn default_model(&self) -> Option<&str> {
        self.settings.get_str("defaultModel")
    }
    /// settings `defaultThinkingLevel` when it names a valid level.
    pub fn default_thinking_level(&self) -> Option<ThinkingLevel> {
        self.settings
            .get_str("defaultThinkingLevel")
            .and_then(ThinkingLevel::parse)
    }
    /// settings `modelThinkingLevels["<provider>/<id>"]`: the level pi 1.6.0 takes when the
    /// session switches to that model.
    pub fn model_thinking_level(&self, provider: &str, model_id: &str) -> Option<ThinkingLevel> {
        self.settings
            .get("modelThinkingLevels")?
            .get(format!("{provider}/{model_id}"))?
            .as_str()
            .and_then(ThinkingLevel::parse)
    }
    pub fn shell_path(&self) -> Option<String> {
        self.settings.get_str("shellPath").map(str::to_string)
    }
    pub fn shell_command_prefix(&self) -> Option<String> {
        self.settings
            .get_str("shellCommandPrefix")
            .map(str::to_string)
    }
    /// settings `sessionDir` with `~`/`~/` expanded; a relative path stays relative (to the
    /// process cwd). Precedence over it: `--session-dir`, then `$PI_CODING_AGENT_SESSION_DIR`.
    pub fn session_dir(&self) -> Option<PathBuf> {
        let dir = self
            .settings
            .get_str("sessionDir")
            .filter(|d| !d.is_empty())?;
        Some(expand_tilde(dir, &self.env.home()))
    }
    /// settings `enabledModels` (same syntax as `--models`).
    pub fn enabled_models(&self) -> Option<Vec<String>> {
        let list = self.settings.get("enabledModels")?.as_array()?;
        Some(
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        )
    }
    /// settings `images.autoResize` (default true): images larger than the model takes are
    /// scaled down before they are sent.
    pub fn auto_resize_images(&self) -> bool {
        self.settings.get_bool("images.autoResize").unwrap_or(true)
    }
    /// settings `codemode.mode` (`only`, else pi 1.6.0's `on`) and `codemode.inlineBudget` (a
    /// number of at least 0, else 3000).
    pub fn codemode_presentation(&self) -> crate::tools::codemode::Presentation {
        let default = crate::tools::codemode::Presentation::default();
        crate::tools::codemode::Presentation {
            only: self.settings.get_str("codemode.mode") == Some("only"),
            inline_budget: self
                .settings
                .get("codemode.inlineBudget")
                .and_then(serde_json::Value::as_f64)
                .filter(|n| n.is_finite() && *n >= 0.0)
                .map_or(default.inline_budget, |n| n as usize),
            docs: self
                .docs_dir
                .join("codemode.md")
                .to_string_lossy()
                .into_owned(),
        }
    }
    /// settings `images.blockImages` (default false).
    pub fn block_images(&self) -> bool {
        self.settings
            .get_bool("images.blockImages")
            .unwrap_or(false)
    }
    /// settings `thinkingBudgets` overrides: (minimal, low, medium, high).
    pub fn thinking_budget(&self, level: ThinkingLevel) -> Option<u64> {
        self.settings
            .get_u64(&format!("thinkingBudgets.{}", level.as_str()))
    }

    // ---- settings (setters; persisted to the global settings.json) --------------------------

    pub fn set_steering_mode(&mut self, mode: &str) {
        self.settings
            .set_top("steeringMode", Value::String(mode.into()));
    }
    pub fn set_follow_up_mode(&mut self, mode: &str) {
        self.settings
            .set_top("followUpMode", Value::String(mode.into()));
    }
    pub fn set_compaction_enabled(&mut self, enabled: bool) {
        self.settings
            .set_nested("compaction", "enabled", Value::Bool(enabled));
    }
    pub fn set_retry_enabled(&mut self, enabled: bool) {
        self.settings
            .set_nested("retry", "enabled", Value::Bool(enabled));
    }
}

/// The ids a Cloudflare provider's endpoint needs besides the key (pi 1.6.0's cloudflare auth);
/// none for other providers.
fn cloudflare_ids(provider: &str) -> &'static [&'static str] {
    match provider {
        "cloudflare-workers-ai" => &["CLOUDFLARE_ACCOUNT_ID"],
        "cloudflare-ai-gateway" => &["CLOUDFLARE_ACCOUNT_ID", "CLOUDFLARE_GATEWAY_ID"],
        _ => &[],
    }
}

fn refresh_failed_message(provider: &str, reason: &oauth::OAuthError) -> String {
    if let oauth::OAuthError::KeyDerivation { .. } = reason {
        // The login itself is fine: the extension gave no key for it.
        return reason.to_string();
    }
    format!(
        "Your {provider} login has expired and could not be refreshed ({reason}). \
         Log in again with `pi login {provider}` (or `/login` in pi), or configure an API key."
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
