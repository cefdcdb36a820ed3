//! "Sign in with ChatGPT" on the `openai` provider (pi 1.6.0's `ai:dist/auth/oauth/openai-chatgpt.js`):
//! the login's access token is sent to api.openai.com as the API key. pi-rs uses and refreshes a
//! login pi 1.6.0 made (auth.json `openai`: `{type, access, refresh, expires, clientId, scopes}`,
//! `expires` three minutes early); the login itself (a browser callback on port 1455) is not in
//! pi-rs yet. The token endpoint can be pointed elsewhere with `PI_OAUTH_OPENAI_TOKEN_URL`.

use std::io::Read;

use serde_json::{Map, Value, json};

use super::oauth::{OAuthError, form_encode, now_ms_f64, oauth_entry};
use crate::net;

pub const PROVIDER: &str = "openai";
pub const TOKEN_URL: &str = "https://auth.openai.com/api/accounts/oauth/token";
const RESOURCE: &str = "https://api.openai.com/v1";
const DIRECT_TOKEN_SCOPE: &str = "chatgpt.tokens.use.direct";
const EXPIRY_MARGIN_MS: f64 = 3.0 * 60_000.0;

fn message(text: impl Into<String>) -> OAuthError {
    OAuthError::Message(text.into())
}

/// The refresh grant with the client id the login was issued; the new entry.
pub fn refresh(
    agent: &ureq::Agent,
    token_url: &str,
    entry: &Map<String, Value>,
    refresh_token: &str,
) -> Result<Map<String, Value>, OAuthError> {
    let client_id = entry
        .get("clientId")
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| {
            message(
                "Stored OpenAI OAuth credential does not contain an issued client ID; reconnect ChatGPT",
            )
        })?;
    let form = [
        ("grant_type", "refresh_token"),
        ("client_id", client_id),
        ("refresh_token", refresh_token),
        ("resource", RESOURCE),
    ];
    let response = net::post(agent, token_url)
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded")
        .send(form_encode(&form).as_bytes())
        .map_err(|source| OAuthError::Request {
            url: token_url.to_string(),
            source,
        })?;
    let status = response.status();
    let mut text = String::new();
    response
        .into_body()
        .into_reader()
        .take(1024 * 1024)
        .read_to_string(&mut text)
        .map_err(|source| OAuthError::ReadBody {
            url: token_url.to_string(),
            source,
        })?;
    if !status.is_success() {
        let shown = if text.is_empty() {
            status.canonical_reason().unwrap_or_default().to_string()
        } else {
            text.chars().take(300).collect()
        };
        return Err(message(format!(
            "OpenAI OAuth token request failed ({}): {shown}",
            status.as_u16()
        )));
    }
    let token: Value = serde_json::from_str(&text).map_err(|source| OAuthError::InvalidJson {
        url: token_url.to_string(),
        source,
    })?;
    if !token.is_object() {
        return Err(message("OpenAI OAuth token response must be an object"));
    }
    entry_from(&token, client_id)
}

fn entry_from(token: &Value, client_id: &str) -> Result<Map<String, Value>, OAuthError> {
    let field = |name: &str| {
        token[name]
            .as_str()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| message(format!("OpenAI OAuth token response has invalid {name}")))
    };
    let (access, refresh, scope) = (
        field("access_token")?,
        field("refresh_token")?,
        field("scope")?,
    );
    let expires_in = token["expires_in"]
        .as_f64()
        .filter(|n| n.is_finite() && *n > 0.0)
        .ok_or_else(|| message("OpenAI OAuth token response has invalid expires_in"))?;
    let scopes: Vec<&str> = scope.split_whitespace().collect();
    if !scopes.contains(&DIRECT_TOKEN_SCOPE) {
        return Err(message(format!(
            "OpenAI OAuth grant did not include {DIRECT_TOKEN_SCOPE}"
        )));
    }
    Ok(oauth_entry(&[
        ("access", json!(access)),
        ("refresh", json!(refresh)),
        (
            "expires",
            json!(now_ms_f64() + expires_in * 1000.0 - EXPIRY_MARGIN_MS),
        ),
        ("clientId", json!(client_id)),
        ("scopes", json!(scopes)),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_responses_need_the_direct_scope() {
        let ok = json!({"access_token": "a", "refresh_token": "r", "expires_in": 3600,
            "scope": "openid chatgpt.tokens.use.direct"});
        let e = entry_from(&ok, "client-1").unwrap();
        let keys: Vec<&str> = e.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["type", "access", "refresh", "expires", "clientId", "scopes"]
        );
        assert_eq!(e["scopes"], json!(["openid", "chatgpt.tokens.use.direct"]));
        let mut narrow = ok.clone();
        narrow["scope"] = json!("openid");
        assert_eq!(
            entry_from(&narrow, "c").unwrap_err().to_string(),
            "OpenAI OAuth grant did not include chatgpt.tokens.use.direct"
        );
    }
}
