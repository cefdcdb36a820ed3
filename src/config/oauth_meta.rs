//! Meta's Model API login (Muse subscription), as pi 1.6.0 runs it (`ai:dist/auth/oauth/meta.js`):
//! an RFC 8628 device code at `auth.meta.com` gives an identity token, which is exchanged for a
//! Model API key at Muse Code's key-mint endpoint (a key lives about a day). auth.json keeps the
//! identity token as `refresh` and the key as `access` (`{type, refresh, access, expires}`), so a
//! "refresh" mints a new key; a 401/403 there means the session is over. The servers can be
//! pointed elsewhere with `PI_OAUTH_META_URL` (`/oidc/device/…` under it) and
//! `PI_OAUTH_META_API_URL` (`/muse-code/key` under it).

use serde_json::{Map, Value, json};

use super::oauth::{LoginUi, OAuthError, now_ms_f64, oauth_entry, redacted};
use super::oauth_device::{self, Answer, Poll};

pub const PROVIDER: &str = "meta";
pub const DEFAULT_URL: &str = "https://auth.meta.com";
pub const DEFAULT_API_URL: &str = "https://api.meta.ai";
/// Muse Code CLI's client id.
const CLIENT_ID: &str = "1031625952748946";
const KEY_LIFETIME_MS: f64 = 24.0 * 60.0 * 60.0 * 1000.0;

fn message(text: impl Into<String>) -> OAuthError {
    OAuthError::Message(text.into())
}

/// pi's `errorDetail`: `: <first of error_description, detail, message, error>`.
fn detail(answer: &Answer) -> String {
    let Some(body) = &answer.json else {
        return String::new();
    };
    ["error_description", "detail", "message", "error"]
        .iter()
        .find_map(|k| body[*k].as_str().map(str::trim).filter(|v| !v.is_empty()))
        .map(|v| format!(": {v}"))
        .unwrap_or_default()
}

/// `pi login meta`: the device code, polling for the identity token, then the key minted.
pub fn login(
    agent: &ureq::Agent,
    base: &str,
    api: &str,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let device = oauth_device::post_form(
        agent,
        &format!("{base}/oidc/device/authorization/"),
        &[("client_id", CLIENT_ID)],
    )?;
    if !device.ok() {
        return Err(message(format!(
            "Meta device authorization failed with status {}{}",
            device.status,
            detail(&device)
        )));
    }
    let body = device.json.clone().unwrap_or(Value::Null);
    let uri = oauth_device::trusted_http_url(body["verification_uri_complete"].as_str())
        .or_else(|| oauth_device::trusted_http_url(body["verification_uri"].as_str()));
    let (Some(device_code), Some(user_code), Some(uri)) =
        (device.str("device_code"), device.str("user_code"), uri)
    else {
        return Err(message(format!(
            "Invalid Meta device authorization response: {}",
            redacted(&device.shown())
        )));
    };
    ui.show(&format!("Open {uri} and enter code: {user_code}"));
    ui.show("Waiting for Meta to confirm the login...");
    let interval = oauth_device::positive(&body["interval"]);
    let expires = oauth_device::positive(&body["expires_in"]);
    let identity = oauth_device::poll(interval, expires, true, || {
        let answer = oauth_device::post_form(
            agent,
            &format!("{base}/oidc/device/token/"),
            &[
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ("device_code", device_code),
                ("client_id", CLIENT_ID),
            ],
        )?;
        if answer.ok()
            && let Some(token) = answer.str("access_token")
        {
            return Ok(Poll::Complete(token.to_string()));
        }
        let body = answer.json.clone().unwrap_or(Value::Null);
        Ok(match body["error"].as_str() {
            Some("authorization_pending") => Poll::Pending,
            Some("slow_down") => Poll::SlowDown(oauth_device::positive(&body["interval"])),
            Some("access_denied") => Poll::Failed("Meta login was denied.".into()),
            Some("expired_token") => {
                Poll::Failed("Meta device authorization expired. Please restart login.".into())
            }
            _ => Poll::Failed(format!(
                "Meta device token request failed with status {}{}",
                answer.status,
                detail(&answer)
            )),
        })
    })?;
    crate::redact::add_secret(&identity);
    ui.show("Enabling Meta Model API access...");
    mint(agent, api, &identity)
}

/// Exchanges the identity token for a Model API key; the new entry. Also the "refresh".
pub fn mint(
    agent: &ureq::Agent,
    api: &str,
    identity: &str,
) -> Result<Map<String, Value>, OAuthError> {
    let answer = oauth_device::post(
        agent,
        &format!("{api}/muse-code/key"),
        "application/json",
        "{}",
        &[
            ("Authorization", &format!("Bearer {identity}")),
            ("x-api-version", "1.0.0"),
        ],
    )?;
    if matches!(answer.status, 401 | 403) {
        return Err(message(format!(
            "Meta session expired (status {}). Run `/login meta` to sign in again.{}",
            answer.status,
            detail(&answer)
        )));
    }
    if !answer.ok() {
        return Err(message(format!(
            "Meta API key mint failed with status {}{}",
            answer.status,
            detail(&answer)
        )));
    }
    let Some(key) = answer.str("api_key") else {
        let action = answer
            .json
            .as_ref()
            .and_then(|b| oauth_device::trusted_http_url(b["action_url"].as_str()))
            .map(|url| format!(" Complete setup at {url}"))
            .unwrap_or_default();
        return Err(message(format!("Meta did not issue an API key.{action}")));
    };
    Ok(oauth_entry(&[
        ("refresh", json!(identity)),
        ("access", json!(key)),
        ("expires", json!(now_ms_f64() + KEY_LIFETIME_MS)),
    ]))
}
