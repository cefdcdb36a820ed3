//! Anthropic workload identity federation, as pi 1.6.0 uses it (pi-ai hands the `ANTHROPIC_*`
//! variables to the Anthropic SDK, which exchanges the token): when nothing else authenticates the
//! `anthropic` provider (no auth.json entry, `ANTHROPIC_AUTH_TOKEN`, `ANTHROPIC_OAUTH_TOKEN` or
//! `ANTHROPIC_API_KEY`) and `ANTHROPIC_FEDERATION_RULE_ID`, `ANTHROPIC_ORGANIZATION_ID` and
//! `ANTHROPIC_IDENTITY_TOKEN_FILE` are set, the identity token (the file, read at each exchange so
//! a rotated token is picked up) is exchanged with RFC 7523's jwt-bearer grant at
//! `<baseUrl>/v1/oauth/token` for a short-lived access token, sent as `Authorization: Bearer`
//! with the `oauth-2025-04-20` beta. `ANTHROPIC_SERVICE_ACCOUNT_ID` and `ANTHROPIC_WORKSPACE_ID`
//! go into the exchange when set.
//!
//! Tokens are cached process-wide (`token_cache.rs`, keyed by the configuration, never the
//! secret): reused while more than two minutes are left; in the last two minutes a new exchange
//! is tried and, when it fails, the old token serves until its last 30 seconds; a 401 from the API
//! drops the token and the request is sent once more with a new one (the SDK's policy). The
//! identity token and access tokens join the redaction lists; neither is logged.
//!
//! Blocking calls: the file read and the exchange, on the request's own HTTP agent (abort and the
//! idle bound cut them like the request itself).

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::token_cache::{self, TokenCache};
use super::types::{HttpRequest, StreamRequest};
use crate::config::auth::{AMBIENT_CREDENTIALS, Env};

pub const FEDERATION_RULE_ID: &str = "ANTHROPIC_FEDERATION_RULE_ID";
pub const ORGANIZATION_ID: &str = "ANTHROPIC_ORGANIZATION_ID";
pub const IDENTITY_TOKEN_FILE: &str = "ANTHROPIC_IDENTITY_TOKEN_FILE";
const SERVICE_ACCOUNT_ID: &str = "ANTHROPIC_SERVICE_ACCOUNT_ID";
const WORKSPACE_ID: &str = "ANTHROPIC_WORKSPACE_ID";

const TOKEN_PATH: &str = "/v1/oauth/token";
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// On API requests made with the exchanged token.
const OAUTH_BETA: &str = "oauth-2025-04-20";
/// On the exchange only.
const FEDERATION_BETA: &str = "oidc-federation-2026-04-01";
/// The SDK's client user agent, which names the exchange.
const USER_AGENT: &str = "Anthropic/JS 0.129.0";
/// The token endpoint's assertion limit.
const MAX_ASSERTION: usize = 16 * 1024;
const MAX_RESPONSE: u64 = 1024 * 1024;
/// Reused with more than this left.
const ADVISORY: Duration = Duration::from_secs(120);
/// Never used with less than this left.
const MANDATORY: Duration = Duration::from_secs(30);

/// The federation settings the environment names, when all three required ones are set.
#[derive(Debug, Clone, PartialEq)]
pub struct Federation {
    rule_id: String,
    organization_id: String,
    token_file: String,
    service_account_id: Option<String>,
    workspace_id: Option<String>,
}

impl Federation {
    pub fn from_env(env: &Env) -> Option<Federation> {
        let get = |name: &str| env.get(name).map(str::to_string);
        Some(Federation {
            rule_id: get(FEDERATION_RULE_ID)?,
            organization_id: get(ORGANIZATION_ID)?,
            token_file: get(IDENTITY_TOKEN_FILE)?,
            service_account_id: get(SERVICE_ACCOUNT_ID),
            workspace_id: get(WORKSPACE_ID),
        })
    }

    /// Names the configuration for the cache (ids and a path: no secret).
    fn cache_key(&self, base_url: &str) -> String {
        format!(
            "anthropic-federation:{base_url}|{}|{}|{}|{}|{}",
            self.rule_id,
            self.organization_id,
            self.token_file,
            self.service_account_id.as_deref().unwrap_or(""),
            self.workspace_id.as_deref().unwrap_or("")
        )
    }
}

/// Whether `request` is authenticated by federation: the `anthropic` provider whose key is the
/// ambient-credentials marker (`auth::env_api_key` found the three variables and nothing else).
pub fn applies(request: &StreamRequest) -> bool {
    request.model.provider == "anthropic" && request.api_key == AMBIENT_CREDENTIALS
}

/// Puts the access token on a built Anthropic request (`fresh`: the API refused the last one, so
/// a new exchange is made whatever the cache holds).
pub fn authorize(
    http: &mut HttpRequest,
    request: &StreamRequest,
    agent: &ureq::Agent,
    fresh: bool,
) -> Result<(), String> {
    let env = Env::from_process();
    let federation = Federation::from_env(&env)
        .ok_or_else(|| format!("No API key for provider: {}", request.model.provider))?;
    let base = request.model.base_url.trim_end_matches('/');
    let token = access_token(&federation, base, agent, token_cache::shared(), fresh)?;
    http.headers.retain(|(name, _)| {
        !name.eq_ignore_ascii_case("x-api-key") && !name.eq_ignore_ascii_case("authorization")
    });
    match http
        .headers
        .iter_mut()
        .find(|(name, _)| name.eq_ignore_ascii_case("anthropic-beta"))
    {
        Some((_, betas)) if betas.split(',').any(|b| b.trim() == OAUTH_BETA) => {}
        Some((_, betas)) => betas.push_str(&format!(",{OAUTH_BETA}")),
        None => http
            .headers
            .push(("anthropic-beta".into(), OAUTH_BETA.into())),
    }
    http.headers
        .push(("authorization".into(), format!("Bearer {token}")));
    Ok(())
}

/// A cached or newly exchanged access token.
fn access_token(
    federation: &Federation,
    base: &str,
    agent: &ureq::Agent,
    cache: &TokenCache,
    fresh: bool,
) -> Result<String, String> {
    let key = federation.cache_key(base);
    let now = Instant::now();
    if fresh {
        cache.forget(&key);
    } else if let Some(token) = cache.get_within(&key, now, ADVISORY) {
        return Ok(token);
    }
    match exchange(federation, base, agent) {
        Ok((token, lifetime)) => {
            cache.put(&key, token.clone(), lifetime, now);
            Ok(token)
        }
        Err(e) => match cache.get_within(&key, Instant::now(), MANDATORY) {
            Some(stale) => {
                log::warn!("anthropic: renewing the federated access token failed: {e}");
                Ok(stale)
            }
            None => Err(e),
        },
    }
}

/// One jwt-bearer exchange: the access token and its lifetime.
fn exchange(
    federation: &Federation,
    base: &str,
    agent: &ureq::Agent,
) -> Result<(String, Duration), String> {
    require_secure(base)?;
    let path = &federation.token_file;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("Failed to read identity token file at {path}: {e}"))?;
    let assertion = text.trim();
    if assertion.is_empty() {
        return Err(format!("Identity token file at {path} is empty"));
    }
    crate::redact::add_secret(assertion);
    if assertion.len() > MAX_ASSERTION {
        return Err(format!(
            "Identity token is {} KiB, exceeds the 16 KiB assertion limit",
            assertion.len().div_ceil(1024)
        ));
    }
    let mut body = Map::new();
    body.insert("grant_type".into(), json!(GRANT_TYPE));
    body.insert("assertion".into(), json!(assertion));
    body.insert("federation_rule_id".into(), json!(federation.rule_id));
    body.insert("organization_id".into(), json!(federation.organization_id));
    if let Some(id) = &federation.service_account_id {
        body.insert("service_account_id".into(), json!(id));
    }
    if let Some(id) = &federation.workspace_id {
        body.insert("workspace_id".into(), json!(id));
    }
    let url = format!("{base}{TOKEN_PATH}");
    let response = crate::net::post(agent, &url)
        .header("Content-Type", "application/json")
        .header("anthropic-beta", &format!("{OAUTH_BETA},{FEDERATION_BETA}"))
        .header("User-Agent", USER_AGENT)
        .send(Value::Object(body).to_string().as_bytes())
        .map_err(|e| format!("Failed to reach token endpoint {url}: {e}"))?;
    let status = response.status().as_u16();
    let request_id = response
        .headers()
        .get("request-id")
        .and_then(|v| v.to_str().ok())
        .map(|id| format!(" (request-id {id})"))
        .unwrap_or_default();
    let mut text = String::new();
    response
        .into_body()
        .into_reader()
        .take(MAX_RESPONSE)
        .read_to_string(&mut text)
        .map_err(|e| format!("Failed to read the token endpoint's answer: {e}"))?;
    if !(200..300).contains(&status) {
        let hint = match (status, &federation.workspace_id) {
            (401, None) => {
                " Ensure your federation rule matches your identity token. If your federation rule is scoped to multiple workspaces, set the ANTHROPIC_WORKSPACE_ID environment variable, the 'workspace_id' config key, or the `workspaceId` option. View your authentication events in the Workload identity page of Claude Console for more details."
            }
            (401, Some(_)) => {
                " Ensure your federation rule matches your identity token. View your authentication events in the Workload identity page of Claude Console for more details."
            }
            _ => "",
        };
        return Err(format!(
            "Token exchange failed with status {status}{request_id}: {}{hint}",
            error_body(&text)
        ));
    }
    let data: Value = serde_json::from_str(&text)
        .map_err(|_| format!("Token endpoint returned non-JSON response (status {status})"))?;
    let Some(token) = data["access_token"].as_str().filter(|t| !t.is_empty()) else {
        return Err(format!(
            "Token endpoint response missing access_token: {}",
            error_body(&text)
        ));
    };
    crate::redact::add_secret(token);
    if let Some(kind) = data["token_type"].as_str()
        && !kind.is_empty()
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(format!(
            "Token endpoint response: unsupported token_type \"{kind}\" (want Bearer)"
        ));
    }
    let expires_in = match &data["expires_in"] {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|n| n.is_finite())
    .ok_or_else(|| {
        format!(
            "Token endpoint response missing required fields: {}",
            error_body(&text)
        )
    })?;
    Ok((
        token.to_string(),
        Duration::from_secs_f64(expires_in.max(0.0)),
    ))
}

/// The SDK's `redactSensitive`: of a JSON object only the RFC 6749 error fields, other text cut
/// to 2000 characters.
fn error_body(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => {
            let kept: Map<String, Value> = fields
                .into_iter()
                .filter(|(k, _)| matches!(k.as_str(), "error" | "error_description" | "error_uri"))
                .collect();
            Value::Object(kept).to_string()
        }
        _ => text.chars().take(2000).collect(),
    }
}

/// Credentials go over https only, or plain http to this machine.
fn require_secure(base: &str) -> Result<(), String> {
    if base.starts_with("https://") {
        return Ok(());
    }
    let host = base
        .strip_prefix("http://")
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""))
        .map(|authority| {
            let host = authority.rsplit('@').next().unwrap_or(authority);
            match host.strip_prefix('[') {
                Some(v6) => v6.split(']').next().unwrap_or("").to_string(),
                None => host.split(':').next().unwrap_or("").to_ascii_lowercase(),
            }
        });
    match host.as_deref() {
        Some("localhost" | "127.0.0.1" | "::1") => Ok(()),
        _ => Err(format!(
            "Refusing to send credential over non-https token endpoint \"{base}\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_three_required_variables_make_a_federation() {
        let full = Env::from_pairs([
            (FEDERATION_RULE_ID, "fdrl_1"),
            (ORGANIZATION_ID, "org-1"),
            (IDENTITY_TOKEN_FILE, "/run/token"),
            (WORKSPACE_ID, "wrkspc_1"),
        ]);
        let federation = Federation::from_env(&full).unwrap();
        assert_eq!(federation.workspace_id.as_deref(), Some("wrkspc_1"));
        assert_eq!(federation.service_account_id, None);
        let partial = Env::from_pairs([(FEDERATION_RULE_ID, "fdrl_1"), (ORGANIZATION_ID, "o")]);
        assert_eq!(Federation::from_env(&partial), None);
    }

    #[test]
    fn credentials_go_over_https_or_to_this_machine() {
        assert!(require_secure("https://api.anthropic.com").is_ok());
        assert!(require_secure("http://127.0.0.1:8080").is_ok());
        assert!(require_secure("http://localhost/x").is_ok());
        assert!(require_secure("http://[::1]:9").is_ok());
        assert_eq!(
            require_secure("http://example.com").unwrap_err(),
            "Refusing to send credential over non-https token endpoint \"http://example.com\""
        );
    }

    #[test]
    fn error_bodies_keep_only_the_oauth_error_fields() {
        assert_eq!(
            error_body(r#"{"error":"invalid_grant","access_token":"x","error_description":"d"}"#),
            r#"{"error":"invalid_grant","error_description":"d"}"#
        );
    }
}
