//! Subscription logins (`anthropic`, `github-copilot`, `openai-codex`) as pi-ai's
//! `utils/oauth/*.js` runs them: refreshing an access token with its refresh token, and the
//! headless logins of `pi login` (GitHub's device-code flow; a pasted authorization code for the
//! other two). Credentials live in `auth.json` in pi's format, written under pi's lock
//! (`auth_lock`), pretty-printed with two spaces like `JSON.stringify(data, null, 2)`, mode 0600.
//!
//! Endpoints are pi's; tests (and users of a gateway) point them elsewhere with
//! `PI_OAUTH_ANTHROPIC_TOKEN_URL`, `PI_OAUTH_OPENAI_CODEX_TOKEN_URL`, `PI_OAUTH_GITHUB_URL`
//! (device code and access token: `<url>/login/device/code`, `<url>/login/oauth/access_token`)
//! and `PI_OAUTH_GITHUB_API_URL` (Copilot token: `<url>/copilot_internal/v2/token`).
//!
//! Every request is bounded (10 s to connect, 30 s per read); the device-code poll ends when
//! GitHub's code expires.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde_json::{Map, Value, json};

use super::auth::Env;
use super::auth_lock;
use super::oauth_chatgpt;
use super::oauth_kimi;
use super::oauth_meta;
use super::oauth_openrouter;
use super::oauth_radius;
use super::oauth_xai;
use crate::net;

/// A login with less than this left is refreshed before use, built-in or an extension's (pi
/// 1.6.0's `DEFAULT_OAUTH_MINIMUM_VALIDITY_MS`); also the least `--min-expiry` asks for.
pub const REFRESH_MARGIN_MS: f64 = 5.0 * 60_000.0;
/// pi stores Anthropic and Copilot expiries 5 minutes early.
const EARLY_EXPIRY_MS: f64 = 5.0 * 60_000.0;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

const ANTHROPIC_CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";
const ANTHROPIC_AUTHORIZE_URL: &str = "https://claude.ai/oauth/authorize";
const ANTHROPIC_TOKEN_URL: &str = "https://platform.claude.com/v1/oauth/token";
const ANTHROPIC_REDIRECT_URI: &str = "http://localhost:53692/callback";
const ANTHROPIC_SCOPES: &str = "org:create_api_key user:profile user:inference user:sessions:claude_code user:mcp_servers user:file_upload";

const CODEX_CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";
const CODEX_AUTHORIZE_URL: &str = "https://auth.openai.com/oauth/authorize";
const CODEX_TOKEN_URL: &str = "https://auth.openai.com/oauth/token";
const CODEX_REDIRECT_URI: &str = "http://localhost:1455/auth/callback";
const CODEX_SCOPE: &str = "openid profile email offline_access";

/// Where the ChatGPT account id sits in a Codex access token's claims.
const CODEX_JWT_CLAIM_PATH: &str = "https://api.openai.com/auth";

/// GitHub Copilot's provider name: its login, and the requests whose host its token names.
pub const COPILOT_PROVIDER: &str = "github-copilot";
const COPILOT_CLIENT_ID: &str = "Iv1.b507a08c87ecfe98";
const COPILOT_HEADERS: &[(&str, &str)] = &[
    ("User-Agent", "GitHubCopilotChat/0.35.0"),
    ("Editor-Version", "vscode/1.107.0"),
    ("Editor-Plugin-Version", "copilot-chat/0.35.0"),
    ("Copilot-Integration-Id", "vscode-chat"),
];

/// The providers pi can log into with a subscription.
pub const PROVIDERS: &[&str] = &[
    "anthropic",
    "github-copilot",
    "openai-codex",
    "xai",
    oauth_kimi::PROVIDER,
    oauth_meta::PROVIDER,
    oauth_radius::PROVIDER,
    oauth_openrouter::PROVIDER,
    oauth_chatgpt::PROVIDER,
];

/// The Radius gateway's provider id and pi's default gateway (its MCP server lives there too).
pub const RADIUS_PROVIDER: &str = oauth_radius::PROVIDER;
pub const RADIUS_DEFAULT_URL: &str = oauth_radius::DEFAULT_URL;

/// Whether a subscription login of `provider` in auth.json is used (and refreshed).
pub fn is_used(provider: &str) -> bool {
    PROVIDERS.contains(&provider)
}

/// Where the token requests go.
#[derive(Clone, Debug)]
pub struct Endpoints {
    anthropic_token: String,
    codex_token: String,
    /// Overrides `https://<domain>` of the GitHub device flow.
    github: Option<String>,
    /// Overrides `https://api.<domain>` of the Copilot token request.
    github_api: Option<String>,
    /// xAI's authorization server (`PI_OAUTH_XAI_URL`).
    xai: String,
    /// Sign in with ChatGPT's token endpoint (`PI_OAUTH_OPENAI_TOKEN_URL`).
    chatgpt_token: String,
    /// Kimi Code's authorization server (pi's `KIMI_CODE_OAUTH_HOST` / `KIMI_OAUTH_HOST`).
    kimi: String,
    /// Meta's authorization server (`PI_OAUTH_META_URL`) and key-mint host
    /// (`PI_OAUTH_META_API_URL`).
    meta: String,
    meta_api: String,
    /// The Radius gateway (`PI_OAUTH_RADIUS_URL`).
    radius: String,
    /// OpenRouter (`PI_OAUTH_OPENROUTER_URL`).
    openrouter: String,
    /// Where browser sign-ins listen for their callback (pi's `PI_OAUTH_CALLBACK_HOST`).
    callback_host: String,
}

impl Endpoints {
    pub fn from_env(env: &Env) -> Endpoints {
        let get = |name: &str| env.get(name).map(|v| v.trim_end_matches('/').to_string());
        Endpoints {
            anthropic_token: get("PI_OAUTH_ANTHROPIC_TOKEN_URL")
                .unwrap_or_else(|| ANTHROPIC_TOKEN_URL.into()),
            codex_token: get("PI_OAUTH_OPENAI_CODEX_TOKEN_URL")
                .unwrap_or_else(|| CODEX_TOKEN_URL.into()),
            github: get("PI_OAUTH_GITHUB_URL"),
            github_api: get("PI_OAUTH_GITHUB_API_URL"),
            xai: get("PI_OAUTH_XAI_URL").unwrap_or_else(|| oauth_xai::DEFAULT_URL.into()),
            chatgpt_token: get("PI_OAUTH_OPENAI_TOKEN_URL")
                .unwrap_or_else(|| oauth_chatgpt::TOKEN_URL.into()),
            kimi: get("KIMI_CODE_OAUTH_HOST")
                .filter(|h| !h.is_empty())
                .or_else(|| get("KIMI_OAUTH_HOST").filter(|h| !h.is_empty()))
                .unwrap_or_else(|| oauth_kimi::DEFAULT_URL.into()),
            meta: get("PI_OAUTH_META_URL").unwrap_or_else(|| oauth_meta::DEFAULT_URL.into()),
            meta_api: get("PI_OAUTH_META_API_URL")
                .unwrap_or_else(|| oauth_meta::DEFAULT_API_URL.into()),
            radius: get("PI_OAUTH_RADIUS_URL").unwrap_or_else(|| oauth_radius::DEFAULT_URL.into()),
            openrouter: get("PI_OAUTH_OPENROUTER_URL")
                .unwrap_or_else(|| oauth_openrouter::DEFAULT_URL.into()),
            callback_host: get("PI_OAUTH_CALLBACK_HOST")
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "127.0.0.1".into()),
        }
    }

    fn github(&self, domain: &str) -> String {
        self.github
            .clone()
            .unwrap_or_else(|| format!("https://{domain}"))
    }

    fn github_api(&self, domain: &str) -> String {
        self.github_api
            .clone()
            .unwrap_or_else(|| format!("https://api.{domain}"))
    }
}

/// A refresh or login that failed. `Display` is the reason shown on the terminal (`pi login`)
/// and inside the "login has expired" message a client sees.
#[derive(Debug)]
pub enum OAuthError {
    Lock(auth_lock::LockError),
    /// auth.json could not be read or is not a JSON object (`problem` says which).
    AuthFile {
        path: PathBuf,
        problem: String,
    },
    /// auth.json (or its directory) could not be written.
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    NoLogin(String),
    NoAccessToken,
    NoRefreshToken,
    /// A provider without a refresh flow.
    NoRefresh(String),
    /// A provider without a subscription login.
    NoSubscription(String),
    /// No response (connection, TLS, timeout).
    Request {
        url: String,
        source: ureq::Error,
    },
    ReadBody {
        url: String,
        source: std::io::Error,
    },
    Status {
        url: String,
        status: u16,
        snippet: String,
    },
    InvalidJson {
        url: String,
        source: serde_json::Error,
    },
    /// A token response without `access_token`/`refresh_token`/`expires_in` (the body).
    MissingTokenFields(String),
    /// GitHub's device flow ended with an error code (`error` plus `: description`).
    DeviceFlow(String),
    /// GitHub's device flow answered neither a token nor an error (the body).
    UnexpectedTokenResponse(String),
    DeviceFlowTimedOut {
        slowed_down: bool,
    },
    /// A fixed sentence from pi's flows ("Missing authorization code", "OAuth state mismatch",
    /// "Invalid Copilot token response fields", …).
    Flow(&'static str),
    /// The refresh worker ended without an answer (it panicked).
    WorkerGone,
    /// A whole sentence from a provider's flow, shown as is (xAI's).
    Message(String),
    /// (extensions) The provider's `getApiKey` (`oauth_api_key`) gave no key for the login.
    KeyDerivation {
        provider: String,
        reason: String,
    },
}

impl std::fmt::Display for OAuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OAuthError::Lock(e) => e.fmt(f),
            OAuthError::AuthFile { path, problem } => write!(f, "{}: {problem}", path.display()),
            OAuthError::Write { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
            OAuthError::CreateDir { path, source } => write!(f, "{}: {source}", path.display()),
            OAuthError::NoLogin(provider) => {
                write!(f, "no OAuth login for {provider} in auth.json")
            }
            OAuthError::NoAccessToken => f.write_str("the login has no access token"),
            OAuthError::NoRefreshToken => f.write_str("the login has no refresh token"),
            OAuthError::NoRefresh(provider) => write!(f, "{provider} has no OAuth refresh"),
            OAuthError::NoSubscription(provider) => write!(
                f,
                "{provider} has no subscription login; configure an API key (see `pi --help`)"
            ),
            OAuthError::Request { url, source } => write!(f, "{url}: {source}"),
            OAuthError::ReadBody { url, source } => write!(f, "{url}: {source}"),
            // Token endpoints' answers may carry tokens, old and new: redacted wherever shown.
            OAuthError::Status {
                url,
                status,
                snippet,
            } => write!(f, "HTTP {status} from {url}: {}", redacted(snippet)),
            OAuthError::InvalidJson { url, source } => {
                write!(f, "{url} returned invalid JSON: {source}")
            }
            OAuthError::MissingTokenFields(body) => {
                write!(f, "token response missing fields: {}", redacted(body))
            }
            OAuthError::DeviceFlow(error) => write!(f, "Device flow failed: {error}"),
            OAuthError::Message(sentence) => f.write_str(sentence),
            OAuthError::UnexpectedTokenResponse(body) => {
                write!(f, "unexpected access token response: {}", redacted(body))
            }
            OAuthError::DeviceFlowTimedOut { slowed_down: true } => f.write_str(
                "Device flow timed out after one or more slow_down responses. This is often caused by clock drift in WSL or VM environments. Please sync or restart the VM clock and try again.",
            ),
            OAuthError::DeviceFlowTimedOut { slowed_down: false } => {
                f.write_str("Device flow timed out")
            }
            OAuthError::Flow(text) => f.write_str(text),
            OAuthError::WorkerGone => f.write_str("the refresh ended without an answer"),
            OAuthError::KeyDerivation { provider, reason } => {
                write!(f, "OAuth auth derivation failed for {provider}: {reason}")
            }
        }
    }
}

impl std::error::Error for OAuthError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OAuthError::Lock(e) => Some(e),
            OAuthError::Write { source, .. }
            | OAuthError::CreateDir { source, .. }
            | OAuthError::ReadBody { source, .. } => Some(source),
            OAuthError::Request { source, .. } => Some(source),
            OAuthError::InvalidJson { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A token endpoint's answer with every token in it redacted: the ones it names
/// (`access_token`, `refresh_token`, `id_token`, `token`, `device_code`) join the process-wide
/// set first, the known ones (the login's own) are in it already.
pub(crate) fn redacted(body: &str) -> String {
    if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(body) {
        let named = [
            "access_token",
            "refresh_token",
            "id_token",
            "token",
            "device_code",
        ];
        crate::redact::register_secrets(
            named
                .iter()
                .filter_map(|name| fields.get(*name).and_then(Value::as_str))
                .map(str::to_string),
        );
    }
    crate::redact::default_redactions()
        .apply_text(body)
        .into_owned()
}

impl From<auth_lock::LockError> for OAuthError {
    fn from(e: auth_lock::LockError) -> OAuthError {
        OAuthError::Lock(e)
    }
}

/// True when a token with this expiry should be refreshed before use.
pub fn needs_refresh(expires_ms: Option<f64>) -> bool {
    expires_ms.is_none_or(|e| now_ms_f64() + REFRESH_MARGIN_MS >= e)
}

/// A usable login after a refresh (or after finding that another process refreshed it).
#[derive(Clone, Debug, PartialEq)]
pub struct Fresh {
    pub access: String,
    pub refresh: Option<String>,
    pub expires_ms: f64,
    /// (extensions) The key the provider's `getApiKey` derived from this login; None: `access`
    /// is the key.
    pub key: Option<String>,
}

impl Fresh {
    /// What requests send as the provider's key.
    pub fn api_key(&self) -> &str {
        self.key.as_deref().unwrap_or(&self.access)
    }
}

/// Refreshes `provider`'s login in `<agent_dir>/auth.json` under pi's lock: re-reads the file
/// (another pi may have refreshed it meanwhile: then that token is used), else asks the token
/// endpoint and writes the new credentials back in pi's format.
/// `cancel` ends the wait for the lock (the agent's abort, shutdown).
pub fn refresh_locked(
    agent_dir: &Path,
    provider: &str,
    endpoints: &Endpoints,
    cancel: &crate::child::CancelFlag,
) -> Result<Fresh, OAuthError> {
    refresh_locked_within(agent_dir, provider, endpoints, REFRESH_MARGIN_MS, cancel)
}

/// `refresh_locked` for a token that must stay valid `margin_ms` more (pi 1.6.0's
/// `auth print-bearer-token --min-expiry`).
pub fn refresh_locked_within(
    agent_dir: &Path,
    provider: &str,
    endpoints: &Endpoints,
    margin_ms: f64,
    cancel: &crate::child::CancelFlag,
) -> Result<Fresh, OAuthError> {
    let agent = net::agent(CONNECT_TIMEOUT, READ_TIMEOUT);
    refresh_locked_by(agent_dir, provider, margin_ms, cancel, &|entry| {
        refresh_entry(provider, entry, endpoints, &agent)
    })
}

/// (extensions) A provider's own token refresh (pi's `oauth.refreshToken` of a provider an
/// extension registers): the stored credential in, the new one (its `access`, `refresh`,
/// `expires` and any fields of its own) or the reason it failed out.
pub trait Renewer: Send + Sync {
    fn renew(
        &self,
        provider: &str,
        credential: &Map<String, Value>,
        cancel: &crate::child::CancelFlag,
    ) -> Result<Map<String, Value>, String>;

    /// Whether the provider's key is derived from the login (pi's `oauth.getApiKey`) rather than
    /// being its `access` token.
    fn derives_key(&self) -> bool {
        false
    }

    /// The key for a login (`derives_key`), or the reason there is none.
    fn api_key(&self, provider: &str, _credential: &Map<String, Value>) -> Result<String, String> {
        Err(format!("{provider} derives no key from its login"))
    }
}

/// `refresh_locked` with `renewer` in place of a built-in token endpoint. The answer is stored
/// as pi 1.6.0 stores it (`{...credential, type: "oauth"}`); one without a non-empty `access`,
/// a string `refresh` and a numeric `expires` is refused and nothing is written. When the
/// renewer `derives_key`, the key comes from the login (refreshed or not) after the lock is
/// released.
pub fn refresh_locked_with(
    agent_dir: &Path,
    provider: &str,
    renewer: &dyn Renewer,
    cancel: &crate::child::CancelFlag,
) -> Result<Fresh, OAuthError> {
    let renew = |entry: &Entry| renewed_entry(renewer, provider, entry, cancel);
    let (mut fresh, entry) =
        refresh_locked_entry(agent_dir, provider, REFRESH_MARGIN_MS, cancel, &renew)?;
    if renewer.derives_key() {
        let derived = renewer.api_key(provider, &entry);
        fresh.key = Some(derived.map_err(|reason| OAuthError::KeyDerivation {
            provider: provider.to_string(),
            reason,
        })?);
    }
    Ok(fresh)
}

/// The renewer's new credential for `entry`, checked and typed as pi 1.6.0 stores it.
fn renewed_entry(
    renewer: &dyn Renewer,
    provider: &str,
    entry: &Entry,
    cancel: &crate::child::CancelFlag,
) -> Result<Entry, OAuthError> {
    let mut renewed = renewer.renew(provider, entry, cancel).map_err(|reason| {
        OAuthError::Message(format!("OAuth refresh failed for {provider}: {reason}"))
    })?;
    let valid = renewed
        .get("access")
        .and_then(Value::as_str)
        .is_some_and(|a| !a.is_empty())
        && renewed.get("refresh").is_some_and(Value::is_string)
        && renewed
            .get("expires")
            .and_then(Value::as_f64)
            .is_some_and(f64::is_finite);
    if !valid {
        return Err(OAuthError::Message(format!(
            "OAuth refresh failed for {provider}: the credential needs a non-empty string access, a string refresh and a numeric expires"
        )));
    }
    renewed.insert("type".into(), Value::String("oauth".into()));
    Ok(renewed)
}

/// One provider's auth.json entry.
type Entry = Map<String, Value>;

/// The locked part of every refresh: re-reads auth.json under pi's lock (another pi may have
/// refreshed the login meanwhile: then that token is used), else `renew`s the entry and writes
/// the new one back in pi's format.
fn refresh_locked_by(
    agent_dir: &Path,
    provider: &str,
    margin_ms: f64,
    cancel: &crate::child::CancelFlag,
    renew: &dyn Fn(&Entry) -> Result<Entry, OAuthError>,
) -> Result<Fresh, OAuthError> {
    refresh_locked_entry(agent_dir, provider, margin_ms, cancel, renew).map(|(fresh, _)| fresh)
}

/// `refresh_locked_by`, also returning the login's auth.json entry as it now is.
fn refresh_locked_entry(
    agent_dir: &Path,
    provider: &str,
    margin_ms: f64,
    cancel: &crate::child::CancelFlag,
    renew: &dyn Fn(&Entry) -> Result<Entry, OAuthError>,
) -> Result<(Fresh, Entry), OAuthError> {
    let path = agent_dir.join("auth.json");
    let _lock = auth_lock::lock(&path, cancel)?;
    let mut data = read_auth(&path)?;
    let entry = data
        .get(provider)
        .and_then(Value::as_object)
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("oauth"))
        .cloned()
        .ok_or_else(|| OAuthError::NoLogin(provider.to_string()))?;
    let expires = entry.get("expires").and_then(Value::as_f64);
    if expires.is_some_and(|e| now_ms_f64() + margin_ms < e) {
        return Ok((fresh_from(&entry)?, entry));
    }
    let renewed = renew(&entry)?;
    let mut result = fresh_from(&renewed)?;
    if renewed.get("expires") == Some(&Value::Null) {
        // No expiry given (see `anthropic_entry`): good for this process, as in pi 1.6.0.
        result.expires_ms = f64::INFINITY;
    }
    data.insert(provider.to_string(), Value::Object(renewed.clone()));
    write_auth(&path, &data).map_err(|source| OAuthError::Write {
        path: path.clone(),
        source,
    })?;
    Ok((result, renewed))
}

fn fresh_from(entry: &Map<String, Value>) -> Result<Fresh, OAuthError> {
    let access = entry
        .get("access")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .ok_or(OAuthError::NoAccessToken)?;
    Ok(Fresh {
        access: access.to_string(),
        refresh: entry
            .get("refresh")
            .and_then(Value::as_str)
            .map(str::to_string),
        expires_ms: entry.get("expires").and_then(Value::as_f64).unwrap_or(0.0),
        key: None,
    })
}

/// One provider's refresh request; the new auth.json entry in pi's key order.
fn refresh_entry(
    provider: &str,
    entry: &Map<String, Value>,
    endpoints: &Endpoints,
    agent: &ureq::Agent,
) -> Result<Map<String, Value>, OAuthError> {
    if provider == oauth_openrouter::PROVIDER {
        // A permanent key: pi's refresh gives the credential back as it is.
        return Ok(entry.clone());
    }
    let refresh = entry
        .get("refresh")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .ok_or(OAuthError::NoRefreshToken)?;
    match provider {
        "anthropic" => {
            let body = json!({"grant_type": "refresh_token", "client_id": ANTHROPIC_CLIENT_ID,
                "refresh_token": refresh});
            let tokens = post_json(agent, &endpoints.anthropic_token, &body)?;
            anthropic_entry(&tokens)
        }
        "openai-codex" => {
            let form = [
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh),
                ("client_id", CODEX_CLIENT_ID),
            ];
            let tokens = post_form(agent, &endpoints.codex_token, &form)?;
            codex_entry(&tokens)
        }
        "github-copilot" => {
            let enterprise = entry
                .get("enterpriseUrl")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty());
            copilot_entry(agent, endpoints, refresh, enterprise)
        }
        oauth_xai::PROVIDER => oauth_xai::refresh(agent, &endpoints.xai, refresh),
        oauth_kimi::PROVIDER => oauth_kimi::refresh(agent, &endpoints.kimi, refresh),
        oauth_meta::PROVIDER => oauth_meta::mint(agent, &endpoints.meta_api, refresh),
        oauth_radius::PROVIDER => oauth_radius::refresh(agent, &endpoints.radius, refresh),
        oauth_chatgpt::PROVIDER => {
            oauth_chatgpt::refresh(agent, &endpoints.chatgpt_token, entry, refresh)
        }
        other => Err(OAuthError::NoRefresh(other.to_string())),
    }
}

/// pi 1.6.0 takes Anthropic's answer without checking `expires_in`: a missing one makes the
/// expiry NaN, written as `"expires": null` (the token is used, and refreshed at the next start).
fn anthropic_entry(tokens: &Value) -> Result<Map<String, Value>, OAuthError> {
    let (access, refresh) = access_and_refresh(tokens)?;
    let expires = match tokens.get("expires_in").and_then(Value::as_f64) {
        Some(seconds) => json!(now_ms_f64() + seconds * 1000.0 - EARLY_EXPIRY_MS),
        None => Value::Null,
    };
    Ok(oauth_entry(&[
        ("refresh", json!(refresh)),
        ("access", json!(access)),
        ("expires", expires),
    ]))
}

fn codex_entry(tokens: &Value) -> Result<Map<String, Value>, OAuthError> {
    let (access, refresh, expires_in) = token_fields(tokens)?;
    let account = codex_account_id(&access)
        .ok_or(OAuthError::Flow("Failed to extract accountId from token"))?;
    Ok(oauth_entry(&[
        ("access", json!(access)),
        ("refresh", json!(refresh)),
        ("expires", json!(now_ms_f64() + expires_in * 1000.0)),
        ("accountId", json!(account)),
    ]))
}

/// The Copilot token for a GitHub token (`refresh`); the entry keeps the GitHub token.
fn copilot_entry(
    agent: &ureq::Agent,
    endpoints: &Endpoints,
    github_token: &str,
    enterprise: Option<&str>,
) -> Result<Map<String, Value>, OAuthError> {
    let url = format!(
        "{}/copilot_internal/v2/token",
        endpoints.github_api(enterprise.unwrap_or("github.com"))
    );
    let mut request = net::get(agent, &url)
        .header("Accept", "application/json")
        .header("Authorization", &format!("Bearer {github_token}"));
    for (name, value) in COPILOT_HEADERS {
        request = request.header(*name, *value);
    }
    let response = request.call().map_err(|source| OAuthError::Request {
        url: url.clone(),
        source,
    })?;
    let raw = read_json(response, &url)?;
    let token = raw["token"].as_str().filter(|t| !t.is_empty());
    let expires_at = raw["expires_at"].as_f64();
    let (Some(token), Some(expires_at)) = (token, expires_at) else {
        return Err(OAuthError::Flow("Invalid Copilot token response fields"));
    };
    let mut fields = vec![
        ("refresh", json!(github_token)),
        ("access", json!(token)),
        ("expires", json!(expires_at * 1000.0 - EARLY_EXPIRY_MS)),
    ];
    if let Some(domain) = enterprise {
        fields.push(("enterpriseUrl", json!(domain)));
    }
    Ok(oauth_entry(&fields))
}

pub(crate) fn oauth_entry(fields: &[(&str, Value)]) -> Map<String, Value> {
    let mut entry = Map::new();
    entry.insert("type".into(), json!("oauth"));
    for (name, value) in fields {
        entry.insert(name.to_string(), value.clone());
    }
    entry
}

fn token_fields(tokens: &Value) -> Result<(String, String, f64), OAuthError> {
    let (access, refresh) = access_and_refresh(tokens)?;
    let expires_in = tokens["expires_in"]
        .as_f64()
        .ok_or_else(|| OAuthError::MissingTokenFields(tokens.to_string()))?;
    Ok((access, refresh, expires_in))
}

fn access_and_refresh(tokens: &Value) -> Result<(String, String), OAuthError> {
    let access = tokens["access_token"].as_str().filter(|s| !s.is_empty());
    let refresh = tokens["refresh_token"].as_str().filter(|s| !s.is_empty());
    match (access, refresh) {
        (Some(a), Some(r)) => Ok((a.to_string(), r.to_string())),
        _ => Err(OAuthError::MissingTokenFields(tokens.to_string())),
    }
}

fn post_json(agent: &ureq::Agent, url: &str, body: &Value) -> Result<Value, OAuthError> {
    let response = net::post(agent, url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .send(body.to_string().as_bytes())
        .map_err(|source| OAuthError::Request {
            url: url.to_string(),
            source,
        })?;
    read_json(response, url)
}

fn post_form(agent: &ureq::Agent, url: &str, form: &[(&str, &str)]) -> Result<Value, OAuthError> {
    post_form_with(agent, url, form, &[])
}

fn post_form_with(
    agent: &ureq::Agent,
    url: &str,
    form: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> Result<Value, OAuthError> {
    let mut request = net::post(agent, url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Accept", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request
        .send(form_encode(form).as_bytes())
        .map_err(|source| OAuthError::Request {
            url: url.to_string(),
            source,
        })?;
    read_json(response, url)
}

/// A response's status and body text (at most 1 MiB): the one read every sign-in flow uses.
pub(super) fn read_text(
    response: ureq::http::Response<ureq::Body>,
    url: &str,
) -> Result<(u16, String), OAuthError> {
    let status = response.status().as_u16();
    let mut text = String::new();
    response
        .into_body()
        .into_reader()
        .take(1024 * 1024)
        .read_to_string(&mut text)
        .map_err(|source| OAuthError::ReadBody {
            url: url.to_string(),
            source,
        })?;
    Ok((status, text))
}

/// The JSON body of a 2xx response; otherwise the status and the body's start.
fn read_json(response: ureq::http::Response<ureq::Body>, url: &str) -> Result<Value, OAuthError> {
    let (status, text) = read_text(response, url)?;
    if !(200..300).contains(&status) {
        return Err(OAuthError::Status {
            url: url.to_string(),
            status,
            snippet: text.trim().chars().take(300).collect(),
        });
    }
    serde_json::from_str(&text).map_err(|source| OAuthError::InvalidJson {
        url: url.to_string(),
        source,
    })
}

/// `application/x-www-form-urlencoded`, as `URLSearchParams` writes it.
pub fn form_encode(pairs: &[(&str, &str)]) -> String {
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                    (b as char).to_string()
                }
                b' ' => "+".to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

// ---- what a login's token says ----------------------------------------------------------------

/// pi's `getGitHubCopilotBaseUrl`: the token's `proxy-ep=proxy.<host>` as `https://api.<host>`,
/// else the enterprise's `https://copilot-api.<domain>`, else the individual endpoint.
pub fn copilot_base_url(token: &str, enterprise_domain: Option<&str>) -> String {
    let from_token = token
        .split(';')
        .find_map(|part| part.trim().strip_prefix("proxy-ep="))
        .filter(|host| !host.is_empty());
    if let Some(host) = from_token {
        let api_host = host
            .strip_prefix("proxy.")
            .map_or(host.to_string(), |rest| format!("api.{rest}"));
        return format!("https://{api_host}");
    }
    match enterprise_domain {
        Some(domain) => format!("https://copilot-api.{domain}"),
        None => "https://api.individual.githubcopilot.com".to_string(),
    }
}

/// The ChatGPT account id in an access token's claims (`None` when it is not such a JWT).
pub fn codex_account_id(token: &str) -> Option<String> {
    let claims = jwt_claims(token)?;
    claims[CODEX_JWT_CLAIM_PATH]["chatgpt_account_id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_string)
}

/// The payload of a JWT, decoded without checking its signature (only the token's owner reads it).
fn jwt_claims(token: &str) -> Option<Value> {
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return None;
    }
    let payload = parts[1].trim_end_matches('=');
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(payload))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

// ---- auth.json ---------------------------------------------------------------------------------

fn read_auth(path: &Path) -> Result<Map<String, Value>, OAuthError> {
    let problem = |problem: String| OAuthError::AuthFile {
        path: path.to_path_buf(),
        problem,
    };
    match fs::read(path) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(Map::new()),
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(problem("expected a JSON object".into())),
            Err(e) => Err(problem(e.to_string())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Map::new()),
        Err(e) => Err(problem(e.to_string())),
    }
}

/// `provider`'s OAuth login as auth.json holds it now (read without the lock, as pi reads).
pub fn stored_login(agent_dir: &Path, provider: &str) -> Option<Map<String, Value>> {
    read_auth(&agent_dir.join("auth.json"))
        .ok()?
        .get(provider)
        .and_then(Value::as_object)
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("oauth"))
        .cloned()
}

/// pi's `JSON.stringify(data, null, 2)`, mode 0600, replaced atomically.
fn write_auth(path: &Path, data: &Map<String, Value>) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(data).map_err(std::io::Error::other)?;
    write_private(path, &text)
}

/// Replaces a credentials file atomically (a temporary file renamed over it), mode 0600.
pub(crate) fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let temp = path.with_extension(format!("json.tmp-{}", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    fs::rename(&temp, path)
}

/// Radius's catalog fetched with a new login's access token and stored (pi 1.6.0 refreshes it
/// right after `pi auth login radius`); the number of models.
pub fn refresh_radius_catalog(
    endpoints: &Endpoints,
    access: &str,
    agent_dir: &Path,
) -> Result<usize, String> {
    let agent = net::agent(CONNECT_TIMEOUT, READ_TIMEOUT);
    oauth_radius::refresh_catalog(&agent, &endpoints.radius, access, agent_dir)
}

/// Stores a login (`pi login`) under the lock.
pub fn store_login(
    agent_dir: &Path,
    provider: &str,
    entry: Map<String, Value>,
) -> Result<(), OAuthError> {
    fs::create_dir_all(agent_dir).map_err(|source| OAuthError::CreateDir {
        path: agent_dir.to_path_buf(),
        source,
    })?;
    let path = agent_dir.join("auth.json");
    // `pi login`/`pi logout` on a terminal: bounded, and Ctrl-C ends it.
    let _lock = auth_lock::lock(&path, &crate::child::CancelFlag::default())?;
    let mut data = read_auth(&path)?;
    data.insert(provider.to_string(), Value::Object(entry));
    write_auth(&path, &data).map_err(|source| OAuthError::Write { path, source })
}

/// Removes a provider's credentials (`pi logout`) under the lock; false when there were none.
pub fn remove_login(agent_dir: &Path, provider: &str) -> Result<bool, OAuthError> {
    let path = agent_dir.join("auth.json");
    if !path.exists() {
        return Ok(false);
    }
    // `pi login`/`pi logout` on a terminal: bounded, and Ctrl-C ends it.
    let _lock = auth_lock::lock(&path, &crate::child::CancelFlag::default())?;
    let mut data = read_auth(&path)?;
    if data.shift_remove(provider).is_none() {
        return Ok(false);
    }
    write_auth(&path, &data).map_err(|source| OAuthError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(true)
}

// ---- headless login ----------------------------------------------------------------------------

/// How a login talks to the person at the terminal.
pub trait LoginUi {
    /// Shows a line of instructions.
    fn show(&mut self, text: &str);
    /// Asks for one line (the pasted code); `None` at end of input.
    fn ask(&mut self, prompt: &str) -> Option<String>;
    /// Asks for one line without waiting for it (a browser sign-in races it with its callback):
    /// the line arrives on the channel, which closes at end of input.
    fn pasted(&mut self, prompt: &str) -> crossbeam_channel::Receiver<String>;
}

/// Runs `provider`'s login and returns its auth.json entry. `enterprise`: a GitHub Enterprise
/// domain for Copilot. `browser` false (`--no-browser`): a provider with another method than the
/// browser sign-in (Radius: the device code) uses it.
pub fn login(
    provider: &str,
    enterprise: Option<&str>,
    browser: bool,
    endpoints: &Endpoints,
    agent_dir: &Path,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let agent = net::agent(CONNECT_TIMEOUT, READ_TIMEOUT);
    match provider {
        "github-copilot" => login_copilot(&agent, endpoints, enterprise, ui),
        "anthropic" => login_anthropic(&agent, endpoints, ui),
        "openai-codex" => login_codex(&agent, endpoints, ui),
        oauth_xai::PROVIDER => oauth_xai::login(&agent, &endpoints.xai, ui),
        oauth_kimi::PROVIDER => oauth_kimi::login(&agent, &endpoints.kimi, ui),
        oauth_meta::PROVIDER => oauth_meta::login(&agent, &endpoints.meta, &endpoints.meta_api, ui),
        oauth_radius::PROVIDER => oauth_radius::login(&agent, &endpoints.radius, browser, ui),
        oauth_openrouter::PROVIDER => {
            oauth_openrouter::login(&agent, &endpoints.openrouter, &endpoints.callback_host, ui)
        }
        oauth_chatgpt::PROVIDER => oauth_chatgpt::login(
            &agent,
            &endpoints.chatgpt_token,
            &endpoints.callback_host,
            agent_dir,
            ui,
        ),
        other => Err(OAuthError::NoSubscription(other.to_string())),
    }
}

fn login_copilot(
    agent: &ureq::Agent,
    endpoints: &Endpoints,
    enterprise: Option<&str>,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let domain = match enterprise {
        Some(input) => Some(
            normalize_domain(input)
                .ok_or(OAuthError::Flow("Invalid GitHub Enterprise URL/domain"))?,
        ),
        None => None,
    };
    let github = endpoints.github(domain.as_deref().unwrap_or("github.com"));
    let agent_header = [("User-Agent", "GitHubCopilotChat/0.35.0")];
    let device = post_form_with(
        agent,
        &format!("{github}/login/device/code"),
        &[("client_id", COPILOT_CLIENT_ID), ("scope", "read:user")],
        &agent_header,
    )?;
    let (Some(device_code), Some(user_code), Some(uri), Some(interval), Some(expires_in)) = (
        device["device_code"].as_str(),
        device["user_code"].as_str(),
        device["verification_uri"].as_str(),
        device["interval"].as_f64(),
        device["expires_in"].as_f64(),
    ) else {
        return Err(OAuthError::Flow("Invalid device code response fields"));
    };
    ui.show(&format!("Open {uri} and enter code: {user_code}"));
    ui.show("Waiting for GitHub to confirm the login...");

    let deadline = std::time::Instant::now() + Duration::from_secs_f64(expires_in.max(0.0));
    let mut interval_ms = (interval * 1000.0).max(1000.0);
    let mut multiplier = 1.2;
    let mut slowed_down = false;
    let github_token = loop {
        let remaining = deadline.saturating_duration_since(std::time::Instant::now());
        if remaining.is_zero() {
            return Err(OAuthError::DeviceFlowTimedOut { slowed_down });
        }
        std::thread::sleep(
            Duration::from_millis((interval_ms * multiplier).ceil() as u64).min(remaining),
        );
        let raw = post_form_with(
            agent,
            &format!("{github}/login/oauth/access_token"),
            &[
                ("client_id", COPILOT_CLIENT_ID),
                ("device_code", device_code),
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
            ],
            &agent_header,
        )?;
        if let Some(token) = raw["access_token"].as_str() {
            break token.to_string();
        }
        match raw["error"].as_str() {
            Some("authorization_pending") => {}
            Some("slow_down") => {
                slowed_down = true;
                interval_ms = match raw["interval"].as_f64() {
                    Some(i) if i > 0.0 => i * 1000.0,
                    _ => (interval_ms + 5000.0).max(1000.0),
                };
                multiplier = 1.4;
            }
            Some(error) => {
                let description = raw["error_description"]
                    .as_str()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default();
                return Err(OAuthError::DeviceFlow(format!("{error}{description}")));
            }
            None => return Err(OAuthError::UnexpectedTokenResponse(raw.to_string())),
        }
    };
    copilot_entry(agent, endpoints, &github_token, domain.as_deref())
}

/// pi's `normalizeDomain`: the host of a URL or bare domain.
fn normalize_domain(input: &str) -> Option<String> {
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return None;
    }
    let rest = trimmed.split_once("://").map_or(trimmed, |(_, r)| r);
    let host = rest.split(['/', '?', '#']).next()?.rsplit('@').next()?;
    let host = host.split(':').next()?.to_ascii_lowercase();
    (!host.is_empty() && !host.contains(char::is_whitespace)).then_some(host)
}

/// PKCE verifier and S256 challenge (32 random bytes, base64url).
pub(crate) fn pkce() -> Result<(String, String), OAuthError> {
    let verifier = base64url(&random_bytes::<32>()?);
    let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
    Ok((verifier, base64url(digest.as_ref())))
}

pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], OAuthError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| OAuthError::Flow("no system randomness"))?;
    Ok(bytes)
}

/// Now in Unix milliseconds as OAuth's `expires` holds it (a JSON number).
pub(crate) fn now_ms_f64() -> f64 {
    crate::time::now_ms() as f64
}

pub(crate) fn base64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// pi's `parseAuthorizationInput`: a redirect URL, `code#state`, a query string, or the code.
pub(crate) fn parse_authorization_input(input: &str) -> (Option<String>, Option<String>) {
    let value = input.trim();
    if value.is_empty() {
        return (None, None);
    }
    let query = |q: &str| {
        let mut code = None;
        let mut state = None;
        for pair in q.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = form_decode(v);
            match k {
                "code" if code.is_none() => code = Some(v),
                "state" if state.is_none() => state = Some(v),
                _ => {}
            }
        }
        (code, state)
    };
    if value.contains("://") {
        let q = value.split_once('?').map_or("", |(_, q)| q);
        return query(q.split('#').next().unwrap_or(""));
    }
    if let Some((code, state)) = value.split_once('#') {
        return (Some(code.to_string()), Some(state.to_string()));
    }
    if value.contains("code=") {
        return query(value);
    }
    (Some(value.to_string()), None)
}

/// `application/x-www-form-urlencoded` decoding of one value (`+` is a space).
pub(crate) fn form_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn login_anthropic(
    agent: &ureq::Agent,
    endpoints: &Endpoints,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let (verifier, challenge) = pkce()?;
    let params = form_encode(&[
        ("code", "true"),
        ("client_id", ANTHROPIC_CLIENT_ID),
        ("response_type", "code"),
        ("redirect_uri", ANTHROPIC_REDIRECT_URI),
        ("scope", ANTHROPIC_SCOPES),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("state", &verifier),
    ]);
    ui.show(&format!(
        "Open this URL in a browser and log in:\n{ANTHROPIC_AUTHORIZE_URL}?{params}"
    ));
    let input = ui
        .ask("Paste the authorization code or full redirect URL: ")
        .ok_or(OAuthError::Flow("Missing authorization code"))?;
    let (code, state) = parse_authorization_input(&input);
    if state.as_deref().is_some_and(|s| s != verifier) {
        return Err(OAuthError::Flow("OAuth state mismatch"));
    }
    let code = code
        .filter(|c| !c.is_empty())
        .ok_or(OAuthError::Flow("Missing authorization code"))?;
    let state = state.unwrap_or_else(|| verifier.clone());
    let body = json!({"grant_type": "authorization_code", "client_id": ANTHROPIC_CLIENT_ID,
        "code": code, "state": state, "redirect_uri": ANTHROPIC_REDIRECT_URI,
        "code_verifier": verifier});
    let tokens = post_json(agent, &endpoints.anthropic_token, &body)?;
    anthropic_entry(&tokens)
}

fn login_codex(
    agent: &ureq::Agent,
    endpoints: &Endpoints,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let (verifier, challenge) = pkce()?;
    let state: String = random_bytes::<16>()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let params = form_encode(&[
        ("response_type", "code"),
        ("client_id", CODEX_CLIENT_ID),
        ("redirect_uri", CODEX_REDIRECT_URI),
        ("scope", CODEX_SCOPE),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("state", &state),
        ("id_token_add_organizations", "true"),
        ("codex_cli_simplified_flow", "true"),
        ("originator", "pi"),
    ]);
    ui.show(&format!(
        "Open this URL in a browser and log in:\n{CODEX_AUTHORIZE_URL}?{params}\n\
         The browser then fails to open {CODEX_REDIRECT_URI}: copy that address from the address bar."
    ));
    let input = ui
        .ask("Paste the authorization code (or full redirect URL): ")
        .ok_or(OAuthError::Flow("Missing authorization code"))?;
    let (code, pasted_state) = parse_authorization_input(&input);
    if pasted_state.as_deref().is_some_and(|s| s != state) {
        return Err(OAuthError::Flow("State mismatch"));
    }
    let code = code
        .filter(|c| !c.is_empty())
        .ok_or(OAuthError::Flow("Missing authorization code"))?;
    let tokens = post_form(
        agent,
        &endpoints.codex_token,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", CODEX_CLIENT_ID),
            ("code", &code),
            ("code_verifier", &verifier),
            ("redirect_uri", CODEX_REDIRECT_URI),
        ],
    )?;
    codex_entry(&tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copilot_base_url_follows_pi() {
        assert_eq!(
            copilot_base_url("tid=1;proxy-ep=proxy.business.githubcopilot.com;x=y", None),
            "https://api.business.githubcopilot.com"
        );
        assert_eq!(
            copilot_base_url("opaque", Some("corp.ghe.com")),
            "https://copilot-api.corp.ghe.com"
        );
        assert_eq!(
            copilot_base_url("opaque", None),
            "https://api.individual.githubcopilot.com"
        );
    }

    #[test]
    fn form_encoding_and_pasted_codes_follow_pi() {
        assert_eq!(
            form_encode(&[("scope", "a b:c/d"), ("x", "é")]),
            "scope=a+b%3Ac%2Fd&x=%C3%A9"
        );
        assert_eq!(
            parse_authorization_input("http://localhost:1455/auth/callback?code=abc&state=s1"),
            (Some("abc".into()), Some("s1".into()))
        );
        assert_eq!(
            parse_authorization_input(" code123#state9 "),
            (Some("code123".into()), Some("state9".into()))
        );
        assert_eq!(
            parse_authorization_input("code=a%2Bb&state=z"),
            (Some("a+b".into()), Some("z".into()))
        );
        assert_eq!(
            parse_authorization_input("plain"),
            (Some("plain".into()), None)
        );
        assert_eq!(
            normalize_domain("https://Corp.GHE.com/x"),
            Some("corp.ghe.com".into())
        );
        assert_eq!(normalize_domain("  "), None);
    }

    #[test]
    fn pkce_challenge_is_the_verifiers_sha256() {
        let (verifier, challenge) = pkce().unwrap();
        assert_eq!(verifier.len(), 43);
        let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
        assert_eq!(challenge, base64url(digest.as_ref()));
    }

    /// An extension's answer, as `Renewer::renew` returns it.
    struct Answer(Result<Value, String>);

    impl Renewer for Answer {
        fn renew(
            &self,
            _provider: &str,
            credential: &Map<String, Value>,
            _cancel: &crate::child::CancelFlag,
        ) -> Result<Map<String, Value>, String> {
            assert_eq!(credential["refresh"], "r0");
            let answer = self.0.clone()?;
            Ok(answer.as_object().cloned().unwrap())
        }
    }

    /// An extension with `getApiKey`: the key names the login's `access` and `id`.
    struct Keyed(Result<(), ()>);

    impl Renewer for Keyed {
        fn renew(
            &self,
            _provider: &str,
            _credential: &Map<String, Value>,
            _cancel: &crate::child::CancelFlag,
        ) -> Result<Map<String, Value>, String> {
            Err("unasked".into())
        }

        fn derives_key(&self) -> bool {
            true
        }

        fn api_key(&self, _provider: &str, login: &Map<String, Value>) -> Result<String, String> {
            self.0.map_err(|()| "no key".to_string())?;
            Ok(format!(
                "key-{}-{}",
                login["access"].as_str().unwrap(),
                login["id"]
            ))
        }
    }

    #[test]
    fn an_extension_s_refresh_is_checked_and_stored_like_pi() {
        let dir = std::env::temp_dir().join(format!("pi-rs-oauth-ext-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let stored = r#"{"corp":{"type":"oauth","refresh":"r0","access":"a0","expires":1}}"#;
        fs::write(dir.join("auth.json"), stored).unwrap();
        let cancel = crate::child::CancelFlag::default();
        let refused = [
            Answer(Err("down".into())),
            Answer(Ok(json!({"refresh": "r1", "expires": 5e12}))),
            Answer(Ok(json!({"access": "", "refresh": "r1", "expires": 5e12}))),
            Answer(Ok(json!({"access": "a1", "expires": 5e12}))),
            Answer(Ok(
                json!({"access": "a1", "refresh": "r1", "expires": "later"}),
            )),
        ];
        for answer in &refused {
            let error = refresh_locked_with(&dir, "corp", answer, &cancel).unwrap_err();
            assert!(
                error
                    .to_string()
                    .starts_with("OAuth refresh failed for corp: "),
                "{error}"
            );
            assert_eq!(fs::read_to_string(dir.join("auth.json")).unwrap(), stored);
        }
        // `{...answer, type: "oauth"}`: the answer's fields in its order, `type` last.
        let good = Answer(Ok(
            json!({"refresh": "r1", "access": "a1", "expires": 5e12, "id": 7}),
        ));
        let fresh = refresh_locked_with(&dir, "corp", &good, &cancel).unwrap();
        assert_eq!((fresh.access.as_str(), fresh.expires_ms), ("a1", 5e12));
        let written: Value =
            serde_json::from_str(&fs::read_to_string(dir.join("auth.json")).unwrap()).unwrap();
        let keys: Vec<&String> = written["corp"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["refresh", "access", "expires", "id", "type"]);
        assert_eq!(written["corp"]["type"], "oauth");
        // Not expired any more: the stored login is used without asking.
        let fresh = refresh_locked_with(&dir, "corp", &Answer(Err("unasked".into())), &cancel);
        assert_eq!(fresh.unwrap().access, "a1");
        // `getApiKey`: the key comes from the login as stored, or the derivation fails.
        let keyed = refresh_locked_with(&dir, "corp", &Keyed(Ok(())), &cancel).unwrap();
        assert_eq!((keyed.access.as_str(), keyed.api_key()), ("a1", "key-a1-7"));
        let error = refresh_locked_with(&dir, "corp", &Keyed(Err(())), &cancel).unwrap_err();
        assert_eq!(
            error.to_string(),
            "OAuth auth derivation failed for corp: no key"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn auth_json_is_written_like_pi() {
        let dir = std::env::temp_dir().join(format!("pi-rs-oauth-write-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("auth.json"),
            r#"{"openai":{"type":"api_key","key":"k"}}"#,
        )
        .unwrap();
        let entry = oauth_entry(&[
            ("refresh", json!("r")),
            ("access", json!("a")),
            ("expires", json!(5)),
        ]);
        store_login(&dir, "anthropic", entry).unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("auth.json")).unwrap(),
            "{\n  \"openai\": {\n    \"type\": \"api_key\",\n    \"key\": \"k\"\n  },\n  \"anthropic\": {\n    \"type\": \"oauth\",\n    \"refresh\": \"r\",\n    \"access\": \"a\",\n    \"expires\": 5\n  }\n}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.join("auth.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(remove_login(&dir, "anthropic").unwrap());
        assert!(!remove_login(&dir, "anthropic").unwrap());
        assert!(!dir.join("auth.json.lock").exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
