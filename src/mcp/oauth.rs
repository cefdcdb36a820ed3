//! OAuth sign-in for streamable-HTTP MCP servers without an `Authorization` header (pi 1.6.0's
//! `docs/mcp.md` "Authenticate with OAuth"): discovery (RFC 9728 protected resource metadata, then
//! RFC 8414 / OpenID authorization server metadata, or `oauth.authServerMetadataUrl`), the client
//! identity (a configured `clientId`, a stored registration, pi's Client ID Metadata Document, or
//! dynamic registration, RFC 7591), authorization code + PKCE S256 with a loopback callback or a
//! pasted redirect URL, the `iss` check (RFC 9207), resource indicators (RFC 8707), and refresh.
//!
//! State lives where pi 1.6.0 keeps it, `<agentDir>/mcp-auth.json`: one object keyed by
//! `mcp__<server>|<url>`, each `{serverUrl, clientInformation?, tokens?, tokensExpireAt?,
//! codeVerifier?, oauthState?, discovery?}`, written as `JSON.stringify(states, null, 2)` plus a
//! newline, mode 0600, atomically, under pi's lock on the file (`config::auth_lock`). Refreshes
//! hold pi's per-server lock `mcp-auth-refresh-<hash>` so pi and pi-rs never spend one refresh
//! token twice. Connections never start a sign-in: they send the stored token, refresh it, and
//! otherwise report that `pi mcp login <server>` is needed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::config::{Resolver, ServerConfig, Transport};
use crate::config::oauth_callback::{Callback, Verdict, param, query_params, without_query};
use crate::config::{auth_lock, oauth as shared};

/// pi's Client ID Metadata Documents.
const DOCUMENTS: &str = "https://pi.dev/oauth";
/// Every request to the authorization server is bounded by this (pi: 15 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Access tokens this close to expiry are refreshed before they are sent (pi: 30 s).
const REFRESH_SKEW_MS: i64 = 30_000;
const DEFAULT_CALLBACK: &str = "http://127.0.0.1/callback";
/// `sign_in`'s error when neither the browser nor a pasted URL answered in time.
pub const TIMED_OUT: &str = "cancelled";
/// `sign_in`'s error when the user dismissed it (an empty pasted URL), in pi's words.
pub const SIGN_IN_CANCELLED: &str = "Sign-in cancelled.";

/// The `oauth` settings of one server, plus where its state is stored.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Settings {
    /// `<agentDir>` (the store and the refresh locks live there).
    pub agent_dir: PathBuf,
    pub server: String,
    /// The server URL as pi normalizes it (`String(new URL(url))`).
    pub url: String,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub client_name: Option<String>,
    /// `auto` (default), `dcr` or `cimd`.
    pub client_registration: String,
    pub callback_port: Option<u16>,
    pub callback_url: Option<String>,
    pub auth_server_metadata_url: Option<String>,
    pub scope: Option<String>,
}

/// Gives an HTTP server its credentials (pi 1.6.0's rules): `auth.provider` names a
/// provider whose credential is the bearer; otherwise a server without an `Authorization`
/// header gets OAuth settings.
pub fn attach(
    server: &mut ServerConfig,
    raw: &Map<String, Value>,
    agent_dir: &Path,
    r: &Resolver,
    secrets: &mut Vec<String>,
) {
    let name = server.name.clone();
    let Transport::Http {
        url,
        headers,
        oauth,
        provider,
    } = &mut server.transport
    else {
        return;
    };
    let auth_provider = raw
        .get("auth")
        .and_then(|a| a.get("provider"))
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    if let Some(name) = auth_provider {
        *provider = Some(super::config::ProviderAuth {
            provider: name.to_string(),
            agent_dir: agent_dir.to_path_buf(),
        });
        return;
    }
    if headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
    {
        return;
    }
    let config = raw.get("oauth").and_then(Value::as_object);
    let text = |key: &str| {
        config
            .and_then(|c| c.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let client_secret = text("clientSecret").map(|s| r.value(&s, secrets));
    if let Some(secret) = &client_secret {
        secrets.push(secret.clone());
    }
    *oauth = Some(Box::new(Settings {
        agent_dir: agent_dir.to_path_buf(),
        server: name,
        url: normalize_url(url),
        client_id: text("clientId"),
        client_secret,
        client_name: text("clientName"),
        client_registration: text("clientRegistration").unwrap_or_else(|| "auto".into()),
        callback_port: config
            .and_then(|c| c.get("callbackPort"))
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok()),
        callback_url: text("callbackUrl"),
        auth_server_metadata_url: text("authServerMetadataUrl"),
        scope: text("scope"),
    }));
}

/// pi 1.6.0's checks of an entry's `oauth` object; the first problem.
pub fn validate(value: Option<&Value>) -> Option<&'static str> {
    let value = value?;
    let Value::Object(o) = value else {
        return Some("oauth must be an object");
    };
    let not_string = |key: &str| o.get(key).is_some_and(|v| !v.is_string());
    if not_string("clientId") {
        return Some("oauth.clientId must be a string");
    }
    if not_string("clientSecret") {
        return Some("oauth.clientSecret must be a string");
    }
    let port = o.get("callbackPort");
    if port.is_some_and(|p| !p.as_u64().is_some_and(|p| (1..=65535).contains(&p))) {
        return Some("oauth.callbackPort must be a port number");
    }
    if let Some(url) = o.get("callbackUrl") {
        let loopback = url
            .as_str()
            .filter(|u| u.starts_with("http://") && is_loopback(u) && !u.contains(['?', '#']));
        let Some(url) = loopback else {
            return Some(
                "oauth.callbackUrl must be an http URI on localhost, 127.0.0.1, or [::1] without query or fragment",
            );
        };
        let url_port = url
            .parse::<ureq::http::Uri>()
            .ok()
            .and_then(|u| u.port_u16());
        if let (Some(a), Some(b)) = (url_port, port.and_then(Value::as_u64))
            && u64::from(a) != b
        {
            return Some("oauth.callbackUrl and oauth.callbackPort name different ports");
        }
    }
    if not_string("scope") {
        return Some("oauth.scope must be a string");
    }
    if o.get("clientName")
        .is_some_and(|v| v.as_str().is_none_or(|s| s.trim().is_empty()))
    {
        return Some("oauth.clientName must be a non-empty string");
    }
    match o.get("clientRegistration") {
        None => {}
        Some(v) if v == "auto" || v == "dcr" => {}
        Some(v) if v == "cimd" => {
            if o.contains_key("clientId") || o.contains_key("clientName") {
                return Some(
                    "oauth.clientRegistration \"cimd\" cannot be combined with oauth.clientId or oauth.clientName",
                );
            }
            if !is_document_callback(o.get("callbackUrl").and_then(Value::as_str)) {
                return Some(
                    "oauth.clientRegistration \"cimd\" requires oauth.callbackUrl on localhost or 127.0.0.1 with path /callback",
                );
            }
        }
        Some(_) => return Some("oauth.clientRegistration must be \"auto\", \"dcr\", or \"cimd\""),
    }
    if let Some(url) = o.get("authServerMetadataUrl")
        && !url.as_str().is_some_and(|u| {
            u.starts_with("https://") || (u.starts_with("http://") && is_loopback(u))
        })
    {
        return Some(
            "oauth.authServerMetadataUrl must be an https URL, or http on localhost, 127.0.0.1, or [::1]",
        );
    }
    None
}

// ---- URLs ----------------------------------------------------------------------------------------

/// `scheme://authority` and the path (with `/` for none) of an http(s) URL.
fn split_url(url: &str) -> Option<(String, String)> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let authority = uri.authority()?.as_str().to_ascii_lowercase();
    let path = match uri.path() {
        "" => "/".to_string(),
        p => p.to_string(),
    };
    Some((format!("{scheme}://{authority}"), path))
}

/// What `String(new URL(url))` gives for the URLs pi-rs accepts: a bare origin gets its `/`, and
/// the scheme and host are lower case.
pub fn normalize_url(url: &str) -> String {
    let Some((origin, _)) = split_url(url) else {
        return url.to_string();
    };
    let rest = url.split_once("://").map_or("", |(_, r)| r);
    let after_host = rest.find(['/', '?', '#']).map_or("", |i| &rest[i..]);
    match after_host.starts_with('/') {
        true => format!("{origin}{after_host}"),
        false => format!("{origin}/{after_host}"),
    }
}

fn is_loopback(url: &str) -> bool {
    let Ok(uri) = url.parse::<ureq::http::Uri>() else {
        return false;
    };
    matches!(
        uri.host(),
        Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
    )
}

/// Credentials only go to https endpoints, or to loopback ones (pi's `secureEndpoint`).
fn secure(url: &str) -> Result<&str, String> {
    match url.starts_with("https://") || (url.starts_with("http://") && is_loopback(url)) {
        true => Ok(url),
        false => Err(format!(
            "Refusing to send OAuth credentials to non-HTTPS endpoint {url}"
        )),
    }
}

/// The query parameters of a URL, decoded.
/// 12 characters naming a server URL in server-specific callback paths (pi's `callbackId`).
fn callback_id(url: &str) -> String {
    let url = normalize_url(url.split('#').next().unwrap_or(url));
    let digest = ring::digest::digest(&ring::digest::SHA256, url.as_bytes());
    shared::base64url(&digest.as_ref()[..9])
}

// ---- the store ---------------------------------------------------------------------------------

impl Settings {
    fn store_path(&self) -> PathBuf {
        self.agent_dir.join("mcp-auth.json")
    }
    /// `mcp__<server>|<url>`, and the key older versions used (the URL alone).
    fn keys(&self) -> (String, String) {
        (
            format!("{}|{}", super::naming::namespace(&self.server), self.url),
            self.url.clone(),
        )
    }

    /// Runs `change` on the whole file's states under pi's lock; writes when it returns true.
    fn with_states<T>(
        &self,
        change: impl FnOnce(&mut Map<String, Value>) -> (T, bool),
    ) -> Result<T, String> {
        let path = self.store_path();
        std::fs::create_dir_all(&self.agent_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.agent_dir.display()))?;
        // The wait is bounded (auth_lock); these run on a connection's or a command's thread,
        // never the agent's, so nothing needs to cancel it.
        let _lock = auth_lock::lock(&path, &Default::default()).map_err(|e| e.to_string())?;
        let mut states = match std::fs::read_to_string(&path) {
            Ok(text) if text.trim().is_empty() => Map::new(),
            Ok(text) => match serde_json::from_str(&text) {
                Ok(Value::Object(map)) => map,
                Ok(_) => Map::new(),
                Err(e) => return Err(format!("{}: {e}", path.display())),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let (result, write) = change(&mut states);
        if write {
            let text = serde_json::to_string_pretty(&states).map_err(|e| e.to_string())? + "\n";
            shared::write_private(&path, &text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        Ok(result)
    }

    /// The server's state (taking over one stored under the legacy key); state stored for
    /// another URL is ignored so credentials never cross servers.
    pub fn load(&self) -> Result<Map<String, Value>, String> {
        // Most HTTP servers never sign in: no file, no lock.
        if !self.store_path().exists() {
            return Ok(self.own(None));
        }
        let (key, legacy) = self.keys();
        let state = self.with_states(|states| {
            if !states.contains_key(&key)
                && let Some(old) = states.shift_remove(&legacy)
            {
                states.insert(key.clone(), old);
                return (states.get(&key).cloned(), true);
            }
            (states.get(&key).cloned(), false)
        })?;
        Ok(self.own(state))
    }

    fn own(&self, state: Option<Value>) -> Map<String, Value> {
        let mut state = match state {
            Some(Value::Object(map))
                if map.get("serverUrl").and_then(Value::as_str) == Some(&self.url) =>
            {
                map
            }
            _ => Map::new(),
        };
        state.insert("serverUrl".into(), json!(self.url));
        register_secrets(&state);
        state
    }

    /// Changes the server's state under the lock.
    fn update(&self, change: impl FnOnce(&mut Map<String, Value>)) -> Result<(), String> {
        let (key, _) = self.keys();
        self.with_states(|states| {
            let mut state = self.own(states.get(&key).cloned());
            change(&mut state);
            register_secrets(&state);
            states.insert(key.clone(), Value::Object(state));
            ((), true)
        })
    }

    /// Deletes the stored credentials (`pi mcp logout`); false when there were none.
    pub fn remove(&self) -> Result<bool, String> {
        if !self.store_path().exists() {
            return Ok(false);
        }
        let (key, legacy) = self.keys();
        self.with_states(|states| {
            let removed =
                states.shift_remove(&key).is_some() || states.shift_remove(&legacy).is_some();
            (removed, removed)
        })
    }

    /// Runs `f` holding pi's refresh lock of this server.
    fn with_refresh_lock<T>(&self, f: impl FnOnce() -> T) -> Result<T, String> {
        let (key, _) = self.keys();
        let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
        let hash: String = digest
            .as_ref()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        std::fs::create_dir_all(&self.agent_dir).map_err(|e| e.to_string())?;
        let file = self.agent_dir.join(format!("mcp-auth-refresh-{hash}"));
        let _lock = auth_lock::lock(&file, &Default::default()).map_err(|e| e.to_string())?;
        Ok(f())
    }
}

/// Tokens, secrets and codes join the redaction set as soon as they are read or received.
fn register_secrets(state: &Map<String, Value>) {
    let mut found = Vec::new();
    for (section, fields) in [
        ("tokens", &["access_token", "refresh_token", "id_token"][..]),
        ("clientInformation", &["client_secret"][..]),
    ] {
        for field in fields {
            if let Some(v) = state
                .get(section)
                .and_then(|s| s.get(*field))
                .and_then(Value::as_str)
            {
                found.push(v.to_string());
            }
        }
    }
    if let Some(v) = state.get("codeVerifier").and_then(Value::as_str) {
        found.push(v.to_string());
    }
    if !found.is_empty() {
        crate::redact::register_secrets(found);
    }
}

// ---- HTTP ----------------------------------------------------------------------------------------

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(REQUEST_TIMEOUT))
        .max_redirects(0)
        .build()
        .into()
}

fn read_body(response: ureq::http::Response<ureq::Body>) -> (u16, String) {
    let status = response.status().as_u16();
    let mut text = String::new();
    let mut body = response.into_body();
    let _ = body.as_reader().take(1024 * 1024).read_to_string(&mut text);
    (status, text)
}

/// GET a metadata document: the status and the JSON body when it is 2xx.
fn get_metadata(url: &str) -> Result<(u16, Option<Value>), String> {
    let response = agent()
        .get(url)
        .header("Accept", "application/json")
        .header(
            "MCP-Protocol-Version",
            super::jsonrpc::LATEST_PROTOCOL_VERSION,
        )
        .call()
        .map_err(|e| format!("cannot load {url}: {e}"))?;
    let (status, text) = read_body(response);
    let value = (200..300)
        .contains(&status)
        .then(|| serde_json::from_str(&text).ok())
        .flatten();
    Ok((status, value))
}

/// 4xx and 502 mean "not here": discovery tries the next URL.
fn is_miss(status: u16) -> bool {
    (400..500).contains(&status) || status == 502
}

/// POST to the token endpoint; OAuth errors are reported whatever the status.
fn token_request(
    endpoint: &str,
    client: &Map<String, Value>,
    auth_methods: &[String],
    mut params: Vec<(String, String)>,
    resource: Option<&str>,
) -> Result<Map<String, Value>, String> {
    let endpoint = secure(endpoint)?;
    if let Some(resource) = resource {
        params.push(("resource".into(), resource.into()));
    }
    let id = client
        .get("client_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    let secret = client.get("client_secret").and_then(Value::as_str);
    let hinted = client
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str);
    let method = match hinted {
        Some(m)
            if ["client_secret_basic", "client_secret_post", "none"].contains(&m)
                && (auth_methods.is_empty() || auth_methods.iter().any(|s| s == m)) =>
        {
            m
        }
        _ if auth_methods.is_empty() => match secret {
            Some(_) => "client_secret_basic",
            None => "none",
        },
        _ if secret.is_some() && auth_methods.iter().any(|m| m == "client_secret_basic") => {
            "client_secret_basic"
        }
        _ if secret.is_some() && auth_methods.iter().any(|m| m == "client_secret_post") => {
            "client_secret_post"
        }
        _ if auth_methods.iter().any(|m| m == "none") => "none",
        _ => match secret {
            Some(_) => "client_secret_post",
            None => "none",
        },
    };
    let mut request = agent()
        .post(endpoint)
        .header("Accept", "application/json")
        .header("Content-Type", "application/x-www-form-urlencoded");
    if method == "client_secret_basic" {
        use base64::Engine;
        let basic = base64::engine::general_purpose::STANDARD
            .encode(format!("{id}:{}", secret.unwrap_or("")));
        request = request.header("Authorization", format!("Basic {basic}"));
    } else {
        params.push(("client_id".into(), id.into()));
        if let (Some(secret), "client_secret_post") = (secret, method) {
            params.push(("client_secret".into(), secret.into()));
        }
    }
    let pairs: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let response = request
        .send(shared::form_encode(&pairs).as_bytes())
        .map_err(|e| format!("token request to {endpoint} failed: {e}"))?;
    let (status, text) = read_body(response);
    let value: Option<Value> = serde_json::from_str(&text).ok();
    if let Some(error) = value
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(Value::as_str)
    {
        let description = value
            .as_ref()
            .and_then(|v| v.get("error_description"))
            .and_then(Value::as_str)
            .unwrap_or(error);
        return Err(format!("OAuth error {error}: {description}"));
    }
    if !(200..300).contains(&status) {
        return Err(format!("OAuth error server_error: HTTP {status}"));
    }
    parse_tokens(value)
}

/// pi's `parseOAuthTokens`: the fields it keeps, in its order.
fn parse_tokens(value: Option<Value>) -> Result<Map<String, Value>, String> {
    let Some(Value::Object(input)) = value else {
        return Err("Invalid OAuth token response".into());
    };
    let text = |key: &str| {
        input
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let mut tokens = Map::new();
    tokens.insert(
        "access_token".into(),
        json!(text("access_token").ok_or("Invalid access_token")?),
    );
    tokens.insert(
        "token_type".into(),
        json!(text("token_type").ok_or("Invalid token_type")?),
    );
    match input.get("expires_in") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(v) => {
            let n = v
                .as_f64()
                .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                .filter(|n: &f64| n.is_finite())
                .ok_or("Invalid expires_in")?;
            tokens.insert("expires_in".into(), json!(n));
        }
    }
    for key in ["scope", "refresh_token", "id_token"] {
        if let Some(v) = text(key) {
            tokens.insert(key.into(), json!(v));
        }
    }
    crate::redact::register_secrets(
        ["access_token", "refresh_token", "id_token"]
            .iter()
            .filter_map(|k| tokens.get(*k).and_then(Value::as_str))
            .map(str::to_string),
    );
    Ok(tokens)
}

// ---- discovery -----------------------------------------------------------------------------------

/// A server's `WWW-Authenticate` challenge (`Bearer resource_metadata="…", scope="…", error="…"`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    pub error: Option<String>,
}

pub fn parse_challenge(header: &str) -> Challenge {
    let scheme = header
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if scheme != "bearer" && scheme != "dpop" {
        return Challenge::default();
    }
    let field = |name: &str| -> Option<String> {
        let lower = header.to_ascii_lowercase();
        let mut from = 0;
        while let Some(i) = lower[from..].find(&format!("{name}=")) {
            let at = from + i;
            from = at + name.len() + 1;
            if at > 0 && !matches!(header.as_bytes()[at - 1], b',' | b' ' | b'\t') {
                continue;
            }
            let rest = &header[from..];
            let value = match rest.strip_prefix('"') {
                Some(quoted) => quoted.split('"').next().unwrap_or(""),
                None => rest.split([',', ' ', '\t']).next().unwrap_or(""),
            };
            return (!value.is_empty()).then(|| value.to_string());
        }
        None
    };
    Challenge {
        resource_metadata: field("resource_metadata").filter(|u| split_url(u).is_some()),
        scope: field("scope"),
        error: field("error"),
    }
}

/// What discovery found: the authorization server, its metadata, and the protected resource.
struct Discovered {
    metadata: Map<String, Value>,
    resource_metadata: Option<Map<String, Value>>,
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn check_metadata(value: Option<Value>) -> Result<Map<String, Value>, String> {
    let Some(Value::Object(map)) = value else {
        return Err("Invalid authorization server metadata".into());
    };
    for key in ["issuer", "authorization_endpoint", "token_endpoint"] {
        if map
            .get(key)
            .and_then(Value::as_str)
            .and_then(split_url)
            .is_none()
        {
            return Err(format!("Invalid authorization server metadata: {key}"));
        }
    }
    if !map
        .get("response_types_supported")
        .is_some_and(Value::is_array)
    {
        return Err("Invalid response_types_supported".into());
    }
    Ok(map)
}

fn discover(settings: &Settings, challenge: &Challenge) -> Result<Discovered, String> {
    let (origin, path) = split_url(&settings.url).ok_or("invalid MCP server URL")?;
    let suffix = path.trim_end_matches('/');
    let resource_metadata = {
        let first = challenge
            .resource_metadata
            .clone()
            .unwrap_or_else(|| format!("{origin}/.well-known/oauth-protected-resource{suffix}"));
        let (mut status, mut value) = get_metadata(&first)?;
        if challenge.resource_metadata.is_none() && !suffix.is_empty() && is_miss(status) {
            (status, value) =
                get_metadata(&format!("{origin}/.well-known/oauth-protected-resource"))?;
        }
        let _ = status;
        match value {
            Some(Value::Object(map))
                if map
                    .get("resource")
                    .and_then(Value::as_str)
                    .is_some_and(|u| split_url(u).is_some()) =>
            {
                Some(map)
            }
            _ => None,
        }
    };
    if let Some(url) = &settings.auth_server_metadata_url {
        let (status, value) = get_metadata(secure(url)?)?;
        if !(200..300).contains(&status) {
            return Err(format!(
                "HTTP {status} loading authorization server metadata from {url}"
            ));
        }
        return Ok(Discovered {
            metadata: check_metadata(value)?,
            resource_metadata,
        });
    }
    let issuer = resource_metadata
        .as_ref()
        .and_then(|m| strings(m.get("authorization_servers")).into_iter().next())
        .unwrap_or_else(|| format!("{origin}/"));
    let (as_origin, as_path) = split_url(&issuer).ok_or("invalid authorization server URL")?;
    let as_suffix = as_path.trim_end_matches('/');
    let mut candidates = vec![
        format!("{as_origin}/.well-known/oauth-authorization-server{as_suffix}"),
        format!("{as_origin}/.well-known/openid-configuration{as_suffix}"),
    ];
    if !as_suffix.is_empty() {
        candidates.push(format!(
            "{as_origin}{as_suffix}/.well-known/openid-configuration"
        ));
    }
    for url in candidates {
        let (status, value) = get_metadata(&url)?;
        if !(200..300).contains(&status) {
            if is_miss(status) {
                continue;
            }
            return Err(format!(
                "HTTP {status} loading authorization server metadata from {url}"
            ));
        }
        let metadata = check_metadata(value)?;
        let found = metadata["issuer"].as_str().unwrap_or("");
        if found.trim_end_matches('/') != issuer.trim_end_matches('/') {
            return Err(format!(
                "OAuth issuer mismatch: expected {issuer}, received {found}"
            ));
        }
        return Ok(Discovered {
            metadata,
            resource_metadata,
        });
    }
    Err(format!(
        "no authorization server metadata found for {issuer}; set oauth.authServerMetadataUrl"
    ))
}

impl Discovered {
    fn field(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).and_then(Value::as_str)
    }
    fn list(&self, key: &str) -> Vec<String> {
        strings(self.metadata.get(key))
    }
    /// The resource indicator (RFC 8707): the protected resource, which must contain the server.
    fn resource(&self, server_url: &str) -> Result<Option<String>, String> {
        let Some(resource) = self
            .resource_metadata
            .as_ref()
            .and_then(|m| m.get("resource"))
            .and_then(Value::as_str)
        else {
            return Ok(None);
        };
        let mismatch =
            || format!("Protected resource {resource} does not match MCP server {server_url}");
        let (ro, rp) = split_url(resource).ok_or_else(mismatch)?;
        let (so, sp) = split_url(server_url).ok_or_else(mismatch)?;
        let slash = |p: String| match p.ends_with('/') {
            true => p,
            false => p + "/",
        };
        if ro != so || !slash(sp).starts_with(&slash(rp)) {
            return Err(mismatch());
        }
        Ok(Some(resource.to_string()))
    }
    fn scope(&self, settings_scope: Option<&str>) -> Option<String> {
        settings_scope
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .or_else(|| {
                let scopes = strings(
                    self.resource_metadata
                        .as_ref()
                        .and_then(|m| m.get("scopes_supported")),
                );
                (!scopes.is_empty()).then(|| scopes.join(" "))
            })
    }
}

// ---- the client identity --------------------------------------------------------------------------

/// Whether `callbackUrl` suits pi's Client ID Metadata Documents (`/callback` on loopback).
fn is_document_callback(callback_url: Option<&str>) -> bool {
    let Some(url) = callback_url else { return true };
    url.parse::<ureq::http::Uri>()
        .is_ok_and(|u| u.host() != Some("[::1]") && u.path() == "/callback")
}

/// pi's `offersClientMetadataDocument`.
fn offers_document(settings: &Settings) -> bool {
    match settings.client_registration.as_str() {
        "auto" => {
            settings.client_id.is_none()
                && settings.client_name.is_none()
                && is_document_callback(settings.callback_url.as_deref())
        }
        mode => mode == "cimd",
    }
}

/// The document to use (client id, redirect URI), when the authorization server takes documents
/// from public clients. Without `iss` in authorization responses, both are server-specific.
fn document(
    settings: &Settings,
    discovered: &Discovered,
    redirect: &str,
) -> Result<Option<(String, String)>, String> {
    let supported = discovered
        .metadata
        .get("client_id_metadata_document_supported")
        .and_then(Value::as_bool)
        == Some(true)
        && discovered
            .list("token_endpoint_auth_methods_supported")
            .iter()
            .any(|m| m == "none");
    if !supported {
        if settings.client_registration == "cimd" {
            return Err("The authorization server does not support Client ID Metadata Documents for public clients; remove oauth.clientRegistration \"cimd\"".into());
        }
        return Ok(None);
    }
    let iss = discovered
        .metadata
        .get("authorization_response_iss_parameter_supported")
        .and_then(Value::as_bool)
        == Some(true);
    if iss {
        return Ok(Some((format!("{DOCUMENTS}/client.json"), redirect.into())));
    }
    let id = callback_id(&settings.url);
    Ok(Some((
        format!("{DOCUMENTS}/{id}/client.json"),
        format!("{}/{id}", redirect.trim_end_matches('/')),
    )))
}

fn configured_client(settings: &Settings) -> Option<Map<String, Value>> {
    let id = settings.client_id.as_ref()?;
    let mut client = Map::new();
    client.insert("client_id".into(), json!(id));
    if let Some(secret) = &settings.client_secret {
        client.insert("client_secret".into(), json!(secret));
    }
    Some(client)
}

fn registered_redirects(state: &Map<String, Value>) -> Vec<String> {
    strings(
        state
            .get("clientInformation")
            .and_then(|c| c.get("redirect_uris")),
    )
}

/// Dynamic client registration (RFC 7591) with pi's client metadata.
fn register(
    settings: &Settings,
    discovered: &Discovered,
    redirect: &str,
    scope: Option<&str>,
) -> Result<Map<String, Value>, String> {
    let endpoint = discovered
        .field("registration_endpoint")
        .ok_or("Authorization server does not support dynamic client registration")?;
    let mut body = json!({
        "client_name": settings.client_name.as_deref().unwrap_or("pi"),
        "redirect_uris": [redirect],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": if settings.client_secret.is_some() { "client_secret_post" } else { "none" },
        "application_type": if is_loopback(redirect) || !redirect.starts_with("http") { "native" } else { "web" },
    });
    if let Some(scope) = scope {
        body["scope"] = json!(scope);
    }
    let response = agent()
        .post(endpoint)
        .header("Accept", "application/json")
        .header("Content-Type", "application/json")
        .send(body.to_string().as_bytes())
        .map_err(|e| format!("client registration at {endpoint} failed: {e}"))?;
    let (status, text) = read_body(response);
    if !(200..300).contains(&status) {
        return Err(format!(
            "OAuth dynamic client registration failed with status {status}: {text}"
        ));
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(mut client))
            if client
                .get("client_id")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty()) =>
        {
            if !client.get("redirect_uris").is_some_and(Value::is_array) {
                client.insert("redirect_uris".into(), json!([]));
            }
            if let Some(secret) = client.get("client_secret").and_then(Value::as_str) {
                crate::redact::register_secrets([secret.to_string()]);
            }
            Ok(client)
        }
        _ => Err("Invalid OAuth client registration response".into()),
    }
}

// ---- tokens for connections ----------------------------------------------------------------------

/// The discovery stored with the state, or a fresh one (stored for next time).
fn discovery_for(settings: &Settings, challenge: &Challenge) -> Result<Discovered, String> {
    if settings.auth_server_metadata_url.is_none()
        && let Ok(state) = settings.load()
        && let Some(Value::Object(d)) = state.get("discovery")
        && let Some(Value::Object(metadata)) = d.get("authorizationServerMetadata")
    {
        return Ok(Discovered {
            metadata: metadata.clone(),
            resource_metadata: d
                .get("resourceMetadata")
                .and_then(Value::as_object)
                .cloned(),
        });
    }
    let discovered = discover(settings, challenge)?;
    if settings.auth_server_metadata_url.is_none() {
        let mut saved = Map::new();
        saved.insert(
            "authorizationServerUrl".into(),
            json!(discovered.field("issuer")),
        );
        saved.insert(
            "authorizationServerMetadata".into(),
            Value::Object(discovered.metadata.clone()),
        );
        if let Some(r) = &discovered.resource_metadata {
            saved.insert("resourceMetadata".into(), Value::Object(r.clone()));
        }
        settings.update(|s| {
            s.insert("discovery".into(), Value::Object(saved));
        })?;
    }
    Ok(discovered)
}

fn save_tokens(
    settings: &Settings,
    mut tokens: Map<String, Value>,
    scope: Option<&str>,
) -> Result<(), String> {
    if !tokens.contains_key("scope")
        && let Some(scope) = scope
    {
        tokens.insert("scope".into(), json!(scope));
    }
    let expires = tokens
        .get("expires_in")
        .and_then(Value::as_f64)
        .map(|s| crate::time::now_ms() + (s * 1000.0) as i64);
    settings.update(|state| {
        state.insert("tokens".into(), Value::Object(tokens));
        match expires {
            Some(at) => state.insert("tokensExpireAt".into(), json!(at)),
            None => state.shift_remove("tokensExpireAt"),
        };
    })
}

/// Refreshes the stored tokens with the stored (or configured) client, holding the refresh lock.
/// `stale` is the access token that expired or was rejected: tokens that changed meanwhile
/// (another process refreshed, or the user signed in) are kept. Ok(false) when a sign-in is needed.
pub fn refresh(
    settings: &Settings,
    stale: Option<&str>,
    challenge: &Challenge,
) -> Result<bool, String> {
    settings.with_refresh_lock(|| {
        let state = settings.load()?;
        let tokens = state.get("tokens").and_then(Value::as_object);
        let current = tokens
            .and_then(|t| t.get("access_token"))
            .and_then(Value::as_str);
        if current.is_some() && current != stale {
            return Ok(true);
        }
        let Some(refresh_token) = tokens
            .and_then(|t| t.get("refresh_token"))
            .and_then(Value::as_str)
        else {
            return Ok(false);
        };
        let discovered = discovery_for(settings, challenge)?;
        let client = match configured_client(settings).or_else(|| {
            state
                .get("clientInformation")
                .and_then(Value::as_object)
                .cloned()
        }) {
            Some(client) => client,
            None => match document(settings, &discovered, DEFAULT_CALLBACK) {
                Ok(Some((id, _))) => Map::from_iter([("client_id".to_string(), json!(id))]),
                _ => return Ok(false),
            },
        };
        let token_endpoint = discovered.field("token_endpoint").unwrap_or("");
        let result = token_request(
            token_endpoint,
            &client,
            &discovered.list("token_endpoint_auth_methods_supported"),
            vec![
                ("grant_type".into(), "refresh_token".into()),
                ("refresh_token".into(), refresh_token.into()),
            ],
            discovered.resource(&settings.url)?.as_deref(),
        );
        match result {
            Ok(mut fresh) => {
                if !fresh.contains_key("refresh_token") {
                    fresh.insert("refresh_token".into(), json!(refresh_token));
                }
                let scope = tokens.and_then(|t| t.get("scope")).and_then(Value::as_str);
                save_tokens(settings, fresh, scope)?;
                Ok(true)
            }
            Err(e) if e.starts_with("OAuth error invalid_grant") => {
                settings.update(|s| {
                    s.shift_remove("tokens");
                    s.shift_remove("tokensExpireAt");
                })?;
                Ok(false)
            }
            Err(e) => {
                log::warn!("MCP server {}: token refresh failed: {e}", settings.server);
                Ok(false)
            }
        }
    })?
}

/// The access token to send: the stored one, refreshed first when it is about to expire.
pub fn bearer(settings: &Settings) -> Option<String> {
    let state = settings.load().ok()?;
    let tokens = state.get("tokens")?;
    let token = tokens.get("access_token")?.as_str()?.to_string();
    let expired = state
        .get("tokensExpireAt")
        .and_then(Value::as_f64)
        .is_some_and(|at| at as i64 - REFRESH_SKEW_MS <= crate::time::now_ms());
    if !expired || tokens.get("refresh_token").is_none() {
        return Some(token);
    }
    // Failures fall through: the request goes with the old token and a 401 decides.
    let _ = refresh(settings, Some(&token), &Challenge::default());
    let state = settings.load().ok()?;
    state
        .get("tokens")?
        .get("access_token")?
        .as_str()
        .map(str::to_string)
}

// ---- sign-in ---------------------------------------------------------------------------------

/// An authorization response: from the callback or a pasted redirect URL.
#[derive(Debug)]
struct Response {
    code: String,
    state: String,
    iss: Option<String>,
}

/// Where the authorization response comes from and how the user is told (the CLI's side).
pub trait SignInUi {
    fn show_url(&mut self, url: &str);
}

/// The MCP sign-in's verdict on a callback request: the response for `expected`, or an error.
fn judge_callback(target: &str, expected: &str) -> Verdict<Result<Response, String>> {
    let params = query_params(target);
    if param(&params, "state").as_deref() != Some(expected) {
        return Verdict::Reply(400, "Invalid or expired OAuth state".into());
    }
    if let Some(error) = param(&params, "error") {
        let description = param(&params, "error_description").unwrap_or(error);
        return Verdict::Settle(
            200,
            format!("Authorization failed. You may close this window.\n\n{description}"),
            Err(description),
        );
    }
    let Some(code) = param(&params, "code") else {
        return Verdict::Settle(
            400,
            "Missing authorization code".into(),
            Err("OAuth callback did not include an authorization code".into()),
        );
    };
    crate::redact::register_secrets([code.clone()]);
    Verdict::Settle(
        200,
        "Authorization complete. You may close this window.".into(),
        Ok(Response {
            code,
            state: expected.to_string(),
            iss: param(&params, "iss"),
        }),
    )
}

/// The callback server of one sign-in.
fn listen(
    bind: &str,
    port: u16,
    paths: Vec<String>,
    state: String,
) -> Result<Callback<Result<Response, String>>, String> {
    Callback::listen(bind, port, paths, move |target| {
        judge_callback(target, &state)
    })
}

/// pi's `responseFromRedirectUrl`: a redirect URL pasted from the browser's address bar.
fn pasted_response(input: &str, redirect: &str, expected: &str) -> Result<Response, String> {
    let input = input.trim();
    let (Some((origin, path)), Some((want_origin, want_path))) =
        (split_url(input), split_url(redirect))
    else {
        return Err("Expected the full redirect URL from the browser address bar".into());
    };
    if origin != want_origin || without_query(&path) != without_query(&want_path) {
        return Err("The redirect URL does not match this sign-in's redirect URI".into());
    }
    let params = query_params(input);
    if let Some(error) = param(&params, "error") {
        return Err(param(&params, "error_description").unwrap_or(error));
    }
    if param(&params, "state").as_deref() != Some(expected) {
        return Err("The redirect URL belongs to a different sign-in".into());
    }
    let code =
        param(&params, "code").ok_or("The redirect URL does not contain an authorization code")?;
    crate::redact::register_secrets([code.clone()]);
    Ok(Response {
        code,
        state: expected.into(),
        iss: param(&params, "iss"),
    })
}

/// What `sign_in` did.
#[derive(Debug, PartialEq)]
pub enum SignedIn {
    /// The stored refresh token was enough.
    Refreshed,
    /// The browser step completed.
    Authorized,
}

/// `pi mcp login` and `/mcp login`: refreshes the stored tokens when it can, else runs the
/// authorization code flow with PKCE against a loopback callback, or a redirect URL pasted on
/// `pasted` (an empty one cancels), for at most `timeout`.
pub fn sign_in(
    settings: &Settings,
    challenge: &Challenge,
    ui: &mut dyn SignInUi,
    pasted: crossbeam_channel::Receiver<String>,
    timeout: Duration,
) -> Result<SignedIn, String> {
    let deadline = std::time::Instant::now() + timeout;
    let step_up = challenge.error.as_deref() == Some("insufficient_scope");
    if !step_up {
        let stale = settings
            .load()?
            .get("tokens")
            .and_then(|t| t.get("access_token"))
            .and_then(Value::as_str)
            .map(str::to_string);
        if stale.is_some() && refresh(settings, stale.as_deref(), challenge)? {
            return Ok(SignedIn::Refreshed);
        }
    }
    // The loopback redirect URI: callbackUrl / callbackPort, else the stored client's port.
    let configured = settings
        .callback_url
        .clone()
        .unwrap_or_else(|| DEFAULT_CALLBACK.into());
    let (_, callback_path) =
        split_url(&configured).ok_or("oauth.callbackUrl must be an http URL")?;
    let configured_port = configured
        .parse::<ureq::http::Uri>()
        .ok()
        .and_then(|u| u.port_u16())
        .or(settings.callback_port);
    let stored = settings.load()?;
    let registered_port = registered_redirects(&stored)
        .first()
        .and_then(|u| u.parse::<ureq::http::Uri>().ok())
        .and_then(|u| u.port_u16());
    let discovered = discover(settings, challenge)?;
    let offers = offers_document(settings);
    let state_value: String = shared::random_bytes::<32>()
        .map_err(|e| e.to_string())?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut paths = vec![callback_path.clone()];
    if offers {
        paths.push(format!(
            "{}/{}",
            callback_path.trim_end_matches('/'),
            callback_id(&settings.url)
        ));
    }
    // The redirect names the configured host (`localhost` is served on 127.0.0.1, as pi does).
    let host = configured
        .parse::<ureq::http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_string))
        .unwrap_or_else(|| "127.0.0.1".into());
    let bind = match host.as_str() {
        "[::1]" | "::1" => "::1",
        _ => "127.0.0.1",
    };
    let callback = match listen(
        bind,
        configured_port.or(registered_port).unwrap_or(0),
        paths.clone(),
        state_value.clone(),
    ) {
        Ok(c) => c,
        // A configured port is required; the stored client's port is only preferred.
        Err(_) if configured_port.is_none() && registered_port.is_some() => {
            listen(bind, 0, paths, state_value.clone())?
        }
        Err(e) => return Err(e),
    };
    let redirect = match &settings.callback_url {
        Some(url)
            if url
                .parse::<ureq::http::Uri>()
                .is_ok_and(|u| u.port().is_some()) =>
        {
            url.clone()
        }
        _ => format!("http://{host}:{}{callback_path}", callback.port),
    };
    // A registered client cannot use another redirect URI; its tokens go with it.
    let keep_client = settings.client_id.is_some()
        || match stored.get("clientInformation") {
            Some(_) => {
                settings.client_registration != "cimd"
                    && registered_redirects(&stored).contains(&redirect)
            }
            None => offers,
        };
    settings.update(|s| {
        s.shift_remove("oauthState");
        if !keep_client {
            s.shift_remove("clientInformation");
            s.shift_remove("tokens");
            s.shift_remove("tokensExpireAt");
        }
    })?;
    let stored = settings.load()?;
    let resource = discovered.resource(&settings.url)?;
    let mut scope = discovered.scope(settings.scope.as_deref());
    if let Some(extra) = &challenge.scope {
        let mut all: Vec<String> = Vec::new();
        let granted = match step_up {
            true => stored
                .get("tokens")
                .and_then(|t| t.get("scope"))
                .and_then(Value::as_str)
                .unwrap_or(""),
            false => "",
        };
        for s in [settings.scope.as_deref().unwrap_or(""), granted, extra]
            .iter()
            .flat_map(|s| s.split_whitespace())
        {
            if !all.iter().any(|a| a == s) {
                all.push(s.to_string());
            }
        }
        scope = (!all.is_empty()).then(|| all.join(" "));
    }
    // The client: configured, stored, pi's document, or a new registration.
    let mut redirect_uri = redirect.clone();
    let client = match configured_client(settings).or_else(|| {
        stored
            .get("clientInformation")
            .and_then(Value::as_object)
            .cloned()
    }) {
        Some(client) => client,
        None => {
            let doc = match offers {
                true => document(settings, &discovered, &redirect)?,
                false => None,
            };
            match doc {
                Some((id, doc_redirect)) => {
                    redirect_uri = doc_redirect;
                    Map::from_iter([("client_id".to_string(), json!(id))])
                }
                None => {
                    let client = register(settings, &discovered, &redirect, scope.as_deref())?;
                    settings.update(|s| {
                        s.insert("clientInformation".into(), Value::Object(client.clone()));
                    })?;
                    client
                }
            }
        }
    };
    // The authorization request.
    if !discovered
        .list("response_types_supported")
        .iter()
        .any(|t| t == "code")
    {
        return Err("Authorization server does not support authorization codes".into());
    }
    let methods = discovered.list("code_challenge_methods_supported");
    if discovered
        .metadata
        .contains_key("code_challenge_methods_supported")
        && !methods.iter().any(|m| m == "S256")
    {
        return Err("Authorization server does not support PKCE S256".into());
    }
    let (verifier, code_challenge) = shared::pkce().map_err(|e| e.to_string())?;
    crate::redact::register_secrets([verifier.clone()]);
    let client_id = client
        .get("client_id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut params: Vec<(&str, &str)> = vec![
        ("response_type", "code"),
        ("client_id", &client_id),
        ("code_challenge", &code_challenge),
        ("code_challenge_method", "S256"),
        ("redirect_uri", &redirect_uri),
        ("state", &state_value),
    ];
    if let Some(scope) = &scope {
        params.push(("scope", scope));
        if scope.split_whitespace().any(|s| s == "offline_access") {
            params.push(("prompt", "consent"));
        }
    }
    if let Some(resource) = &resource {
        params.push(("resource", resource));
    }
    let endpoint = discovered.field("authorization_endpoint").unwrap_or("");
    let separator = if endpoint.contains('?') { '&' } else { '?' };
    let authorization_url = format!("{endpoint}{separator}{}", shared::form_encode(&params));
    settings.update(|s| {
        s.insert("codeVerifier".into(), json!(verifier));
        s.insert("oauthState".into(), json!(state_value));
    })?;
    ui.show_url(&authorization_url);
    // The response: the callback or a pasted URL, whichever comes first.
    let response = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(TIMED_OUT.into());
        }
        crossbeam_channel::select! {
            recv(callback.results) -> r => match r {
                Ok(r) => break r?,
                Err(_) => return Err("OAuth callback server closed".into()),
            },
            recv(pasted) -> line => match line {
                Ok(line) if line.trim().is_empty() => return Err(SIGN_IN_CANCELLED.into()),
                Ok(line) => break pasted_response(&line, &redirect_uri, &state_value)?,
                Err(_) => std::thread::sleep(left.min(Duration::from_millis(100))),
            },
            default(left) => return Err(TIMED_OUT.into()),
        }
    };
    drop(callback);
    if settings.load()?.get("oauthState").and_then(Value::as_str) != Some(&response.state) {
        return Err("Another sign-in to this MCP server started since; sign in again".into());
    }
    // RFC 9207: a code from another authorization server is never sent to this one.
    let issuer = discovered.field("issuer").unwrap_or("").to_string();
    let iss_supported = discovered
        .metadata
        .get("authorization_response_iss_parameter_supported")
        .and_then(Value::as_bool)
        == Some(true);
    if (response.iss.is_some() || iss_supported) && response.iss.as_deref() != Some(&issuer) {
        return Err(format!(
            "OAuth issuer mismatch: expected {issuer}, received {}",
            response.iss.as_deref().unwrap_or("undefined")
        ));
    }
    let tokens = token_request(
        discovered.field("token_endpoint").unwrap_or(""),
        &client,
        &discovered.list("token_endpoint_auth_methods_supported"),
        vec![
            ("grant_type".into(), "authorization_code".into()),
            ("code".into(), response.code.clone()),
            ("code_verifier".into(), verifier),
            ("redirect_uri".into(), redirect_uri.clone()),
        ],
        resource.as_deref(),
    )?;
    save_tokens(settings, tokens, scope.as_deref())?;
    Ok(SignedIn::Authorized)
}

/// Whether the server takes the stored token: `None` when it answers `initialize`, else the
/// challenge of its 401.
pub fn probe(settings: &Settings) -> Result<Option<Challenge>, String> {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": super::jsonrpc::LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "pi", "version": env!("CARGO_PKG_VERSION")},
    }});
    let mut request = agent()
        .post(&settings.url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json");
    if let Some(token) = bearer(settings) {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let response = request
        .send(body.to_string().as_bytes())
        .map_err(|e| format!("MCP HTTP request failed: {e}"))?;
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(parse_challenge)
        .unwrap_or_default();
    match status {
        200..300 => Ok(None),
        401 => Ok(Some(challenge)),
        403 if challenge.error.as_deref() == Some("insufficient_scope") => Ok(Some(challenge)),
        _ => Err(format!("MCP HTTP request failed with status {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_like_pi() {
        let c = parse_challenge(
            r#"Bearer error="insufficient_scope", scope="a b", resource_metadata="https://x.test/.well-known/oauth-protected-resource/mcp""#,
        );
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scope.as_deref(), Some("a b"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://x.test/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(parse_challenge("Basic realm=x"), Challenge::default());
        assert_eq!(parse_challenge("Bearer scope=\"\"").scope, None);
    }

    #[test]
    fn urls_are_normalized_like_new_url() {
        assert_eq!(
            normalize_url("https://MCP.Example.com"),
            "https://mcp.example.com/"
        );
        assert_eq!(
            normalize_url("http://127.0.0.1:9/mcp?x=1"),
            "http://127.0.0.1:9/mcp?x=1"
        );
    }

    #[test]
    fn oauth_settings_are_checked_like_pi() {
        let check = |v: Value| validate(Some(&v));
        assert_eq!(check(json!({"clientId": "a", "callbackPort": 8765})), None);
        assert_eq!(check(json!([])), Some("oauth must be an object"));
        assert_eq!(
            check(json!({"callbackPort": 0})),
            Some("oauth.callbackPort must be a port number")
        );
        assert_eq!(
            check(json!({"clientRegistration": "cimd", "clientName": "x"})),
            Some(
                "oauth.clientRegistration \"cimd\" cannot be combined with oauth.clientId or oauth.clientName"
            )
        );
        assert_eq!(
            check(json!({"clientRegistration": "x"})),
            Some("oauth.clientRegistration must be \"auto\", \"dcr\", or \"cimd\"")
        );
        assert_eq!(
            check(json!({"callbackUrl": "http://127.0.0.1:1/callback", "callbackPort": 2})),
            Some("oauth.callbackUrl and oauth.callbackPort name different ports")
        );
        assert_eq!(
            check(json!({"authServerMetadataUrl": "http://example.com/x"})),
            Some(
                "oauth.authServerMetadataUrl must be an https URL, or http on localhost, 127.0.0.1, or [::1]"
            )
        );
    }

    #[test]
    fn document_selection_follows_pi() {
        let mut s = Settings {
            client_registration: "auto".into(),
            ..Settings::default()
        };
        assert!(offers_document(&s));
        s.client_name = Some("Claude Code".into());
        assert!(!offers_document(&s));
        s.client_registration = "cimd".into();
        assert!(offers_document(&s));
        s.client_registration = "auto".into();
        s.client_name = None;
        s.callback_url = Some("http://localhost:8080/cb".into());
        assert!(!offers_document(&s));
    }
}
