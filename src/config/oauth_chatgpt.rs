//! "Sign in with ChatGPT" on the `openai` provider (pi 1.6.0's `ai:dist/auth/oauth/openai-chatgpt.js`):
//! the login's access token is sent to api.openai.com as the API key. `pi login openai` makes the
//! login (PKCE; a browser callback on 127.0.0.1:1455, or the redirect URL pasted; the installation's
//! `deviceId` from settings.json names the agent host), and pi-rs refreshes it with the client id
//! OpenAI issued. auth.json `openai`: `{type, access, refresh, expires, clientId, scopes}`,
//! `expires` three minutes early. The token endpoint can be pointed elsewhere with
//! `PI_OAUTH_OPENAI_TOKEN_URL`.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::oauth::{
    LoginUi, OAuthError, base64url, form_encode, now_ms_f64, oauth_entry, pkce, random_bytes,
    redacted,
};
use super::oauth_callback::{Arrived, Callback, Verdict, param, query_params, wait, without_query};
use crate::net;

pub const PROVIDER: &str = "openai";
pub const TOKEN_URL: &str = "https://auth.openai.com/api/accounts/oauth/token";
const RESOURCE: &str = "https://api.openai.com/v1";
const DIRECT_TOKEN_SCOPE: &str = "chatgpt.tokens.use.direct";
const AUTHORIZE_URL: &str = "https://auth.openai.com/api/accounts/authorize";
/// Every login registers a new client under this id; the callback names the issued one.
const DYNAMIC_CLIENT_ID: &str = "dynamic_agent_client";
const AGENT_NAME_HINT: &str = "Pi";
const CALLBACK_PORT: u16 = 1455;
const CALLBACK_PATH: &str = "/auth/callback";
const REDIRECT_URI: &str = "http://127.0.0.1:1455/auth/callback";
const SCOPE: &str = "openid profile email offline_access resource.invoke chatgpt.tokens.use.direct";
const LOGIN_TIMEOUT: Duration = Duration::from_secs(5 * 60);
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
    let token = request_token(
        agent,
        token_url,
        &[
            ("grant_type", "refresh_token"),
            ("client_id", client_id),
            ("refresh_token", refresh_token),
            ("resource", RESOURCE),
        ],
    )?;
    entry_from(&token, client_id)
}

/// A token request; the answer's JSON object.
fn request_token(
    agent: &ureq::Agent,
    token_url: &str,
    form: &[(&str, &str)],
) -> Result<Value, OAuthError> {
    let response = net::post(agent, token_url)
        .header("accept", "application/json")
        .header("content-type", "application/x-www-form-urlencoded")
        .send(form_encode(form).as_bytes())
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
            redacted(&text.chars().take(300).collect::<String>())
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
    Ok(token)
}

/// This installation's device id: settings.json's `deviceId`, made (a random UUID) and saved
/// there when missing, as 1.6.0's `getOrCreateDeviceId`.
fn device_id(agent_dir: &Path) -> Result<String, OAuthError> {
    let path = agent_dir.join("settings.json");
    let stored = std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| super::settings::parse_settings_text(&text).ok())
        .and_then(|s| {
            s.get("deviceId")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
    let id = match stored {
        Some(id) => id,
        None => {
            let id = crate::ids::uuid_v4();
            std::fs::create_dir_all(agent_dir).map_err(|source| OAuthError::CreateDir {
                path: agent_dir.to_path_buf(),
                source,
            })?;
            super::settings::write_key_now(&path, "deviceId", json!(id))
                .map_err(OAuthError::Message)?;
            id
        }
    };
    let is_uuid = id.len() == 36
        && id.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if !is_uuid {
        return Err(message(
            "Sign in with ChatGPT requires a device ID (UUID) for this installation",
        ));
    }
    Ok(format!("urn:uuid:{}", id.to_ascii_lowercase()))
}

/// The code and issued client id of an authorization response (the callback's query or a
/// pasted redirect URL), or why it is not one.
fn authorization_result(target: &str, expected_state: &str) -> Result<(String, String), String> {
    let params = query_params(target);
    let code = param(&params, "code").ok_or("Missing authorization code")?;
    let state = param(&params, "state").ok_or("Missing OAuth state")?;
    if state != expected_state {
        return Err("OAuth state mismatch".into());
    }
    let client_id = param(&params, "client_id")
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .ok_or("OpenAI OAuth registration callback did not contain an issued client ID")?;
    Ok((code, client_id))
}

/// A pasted redirect URL: it must be this login's redirect URI.
fn pasted_result(input: &str, expected_state: &str) -> Result<(String, String), String> {
    let input = input.trim();
    if !input.contains("://") {
        return Err("Paste the full callback URL from the browser".into());
    }
    if without_query(input) != REDIRECT_URI {
        return Err(format!(
            "The pasted callback URL must start with {REDIRECT_URI}"
        ));
    }
    if let Some(error) = param(&query_params(input), "error") {
        return Err(format!("ChatGPT authorization failed: {error}"));
    }
    authorization_result(input, expected_state)
}

/// `pi login openai`: Sign in with ChatGPT (PKCE; the callback on 127.0.0.1:1455 raced with a
/// pasted redirect URL), the code exchanged for tokens with the client id OpenAI issued.
pub fn login(
    agent: &ureq::Agent,
    token_url: &str,
    callback_host: &str,
    agent_dir: &Path,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let host_id = device_id(agent_dir)?;
    let (verifier, challenge) = pkce()?;
    let state = base64url(&random_bytes::<32>()?);
    let nonce = base64url(&random_bytes::<32>()?);
    crate::redact::register_secrets([verifier.clone(), state.clone()]);
    let expected = state.clone();
    let callback = Callback::listen(
        callback_host,
        CALLBACK_PORT,
        vec![CALLBACK_PATH.to_string()],
        move |target| {
            if let Some(error) = param(&query_params(target), "error") {
                return Verdict::Settle(
                    400,
                    format!("ChatGPT was not connected.\n\nError: {error}"),
                    Err(format!("ChatGPT authorization failed: {error}")),
                );
            }
            match authorization_result(target, &expected) {
                Ok(result) => Verdict::Settle(
                    200,
                    "ChatGPT authentication completed. You can close this window.".into(),
                    Ok(result),
                ),
                Err(reason) => Verdict::Reply(400, reason),
            }
        },
    )
    .map_err(|e| {
        message(if e.contains("in use") {
            format!("Port {CALLBACK_PORT} is in use, probably by an unfinished login in another pi session or by the Codex CLI. Cancel that login and try again.")
        } else {
            e
        })
    })?;
    let url = format!(
        "{AUTHORIZE_URL}?{}",
        form_encode(&[
            ("client_id", DYNAMIC_CLIENT_ID),
            ("agent_name_hint", AGENT_NAME_HINT),
            ("ext_agent_host_id", &host_id),
            ("response_type", "code"),
            ("redirect_uri", REDIRECT_URI),
            ("resource", RESOURCE),
            ("scope", SCOPE),
            ("state", &state),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("nonce", &nonce),
        ])
    );
    ui.show(&format!("Open this URL to sign in:\n  {url}"));
    ui.show("Complete sign-in in your browser. If the callback does not complete, paste the final redirect URL here.");
    let pasted = ui.pasted(&format!(
        "Complete login in your browser, or paste the final redirect URL here ({REDIRECT_URI}): "
    ));
    let (code, client_id) = match wait(&callback, &pasted, LOGIN_TIMEOUT) {
        Some(Arrived::Callback(result)) => result.map_err(message)?,
        Some(Arrived::Pasted(input)) => pasted_result(&input, &state).map_err(message)?,
        None => return Err(message("ChatGPT sign-in timed out")),
    };
    drop(callback);
    crate::redact::add_secret(&code);
    ui.show("Exchanging authorization code for tokens...");
    let token = request_token(
        agent,
        token_url,
        &[
            ("grant_type", "authorization_code"),
            ("client_id", &client_id),
            ("code", &code),
            ("code_verifier", &verifier),
            ("redirect_uri", REDIRECT_URI),
            ("resource", RESOURCE),
        ],
    )?;
    // Not read, but part of the answer's contract in 1.6.0.
    if token["id_token"]
        .as_str()
        .is_none_or(|t| t.trim().is_empty())
    {
        return Err(message(
            "OpenAI OAuth token response did not contain an ID token",
        ));
    }
    entry_from(&token, &client_id)
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
