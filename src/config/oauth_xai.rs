//! xAI's subscription login (SuperGrok or X Premium), as pi 1.6.0 runs it
//! (`ai:dist/auth/oauth/xai.js`): an RFC 8628 device code at `auth.x.ai`, polled until the user
//! confirms, and a refresh-token grant. The access token is the provider's API key (a bearer for
//! xAI's OpenAI-compatible API); the auth.json entry is `{type, access, refresh, expires}` with
//! `expires` five minutes before the token's end. The server (`https://auth.x.ai`) can be pointed
//! elsewhere with `PI_OAUTH_XAI_URL` (tests, gateways).

use serde_json::{Map, Value, json};

use super::oauth::{LoginUi, OAuthError, now_ms_f64, oauth_entry};
use super::oauth_device::{self, Poll};

pub const PROVIDER: &str = "xai";
pub const DEFAULT_URL: &str = "https://auth.x.ai";
const CLIENT_ID: &str = "b1a00492-073a-47ea-816f-4c329264a828";
const SCOPE: &str = "openid profile email offline_access grok-cli:access api:access";
const REFRESH_SKEW_MS: f64 = 5.0 * 60_000.0;
const DEFAULT_LIFETIME_S: f64 = 3600.0;

/// A form POST's status and JSON object body (`{}` when the body is JSON but not an object).
fn post(agent: &ureq::Agent, url: &str, form: &[(&str, &str)]) -> Result<(u16, Value), OAuthError> {
    let answer = oauth_device::post_form(agent, url, form)?;
    match (
        answer.json,
        serde_json::from_str::<Value>(&answer.text).is_ok(),
    ) {
        (Some(body), _) => Ok((answer.status, body)),
        (None, true) => Ok((answer.status, json!({}))),
        (None, false) => Err(OAuthError::Message(format!(
            "xAI OAuth returned invalid JSON (HTTP {})",
            answer.status
        ))),
    }
}

/// `xAI OAuth <action> failed (HTTP <status>)[: error[: description]]`.
fn failure(action: &str, status: u16, body: &Value) -> OAuthError {
    let detail: Vec<&str> = ["error", "error_description"]
        .iter()
        .filter_map(|k| body[*k].as_str().filter(|s| !s.is_empty()))
        .collect();
    let detail = if detail.is_empty() {
        String::new()
    } else {
        format!(": {}", detail.join(": "))
    };
    OAuthError::Message(format!("xAI OAuth {action} failed (HTTP {status}){detail}"))
}

fn invalid(field: &str) -> OAuthError {
    OAuthError::Message(format!("Invalid xAI OAuth response field: {field}"))
}

fn required<'a>(body: &'a Value, field: &str) -> Result<&'a str, OAuthError> {
    body[field]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid(field))
}

fn positive(body: &Value, field: &str) -> Result<f64, OAuthError> {
    body[field]
        .as_f64()
        .filter(|n| n.is_finite() && *n > 0.0)
        .ok_or_else(|| invalid(field))
}

/// The verification address is shown to the user to open: https only.
fn https_uri(raw: &str) -> Result<&str, OAuthError> {
    if raw.starts_with("https://") && raw.len() > "https://".len() {
        Ok(raw)
    } else {
        Err(OAuthError::Message(
            "Untrusted verification URI in xAI OAuth response".into(),
        ))
    }
}

/// The auth.json entry for a token response (`previous` refresh token kept when xAI does not
/// rotate it).
fn entry(body: &Value, previous: Option<&str>) -> Result<Map<String, Value>, OAuthError> {
    let access = required(body, "access_token")?;
    let refresh = match (body.get("refresh_token"), previous) {
        (None, Some(previous)) => previous,
        _ => required(body, "refresh_token")?,
    };
    let lifetime = match body.get("expires_in") {
        None => DEFAULT_LIFETIME_S,
        Some(_) => positive(body, "expires_in")?,
    };
    Ok(oauth_entry(&[
        ("access", json!(access)),
        ("refresh", json!(refresh)),
        (
            "expires",
            json!(now_ms_f64() + lifetime * 1000.0 - REFRESH_SKEW_MS),
        ),
    ]))
}

/// `pi login xai`: the device code, the address and code shown, then polling until confirmed.
pub fn login(
    agent: &ureq::Agent,
    base: &str,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let (status, device) = post(
        agent,
        &format!("{base}/oauth2/device/code"),
        &[
            ("client_id", CLIENT_ID),
            ("scope", SCOPE),
            ("referrer", "pi"),
        ],
    )?;
    if !(200..300).contains(&status) {
        return Err(failure("device authorization", status, &device));
    }
    let device_code = required(&device, "device_code")?;
    let user_code = required(&device, "user_code")?;
    let uri = https_uri(required(&device, "verification_uri")?)?;
    let complete = match device["verification_uri_complete"].as_str() {
        Some(c) if !c.is_empty() => Some(https_uri(c)?),
        _ => None,
    };
    let expires_in = positive(&device, "expires_in")?;
    ui.show(&format!(
        "Open {} and enter code: {user_code}",
        complete.unwrap_or(uri)
    ));
    ui.show("Waiting for xAI to confirm the login...");
    let interval = oauth_device::positive(&device["interval"]);
    oauth_device::poll(interval, Some(expires_in), true, || {
        let (status, body) = post(
            agent,
            &format!("{base}/oauth2/token"),
            &[
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ("client_id", CLIENT_ID),
                ("device_code", device_code),
            ],
        )?;
        if (200..300).contains(&status) {
            return entry(&body, None).map(Poll::Complete);
        }
        Ok(match body["error"].as_str() {
            Some("authorization_pending") => Poll::Pending,
            Some("slow_down") => Poll::SlowDown(oauth_device::positive(&body["interval"])),
            Some("access_denied" | "authorization_denied") => {
                Poll::Failed("xAI device authorization was denied".into())
            }
            Some("expired_token") => Poll::Failed("xAI device code expired".into()),
            _ => return Err(failure("device token polling", status, &body)),
        })
    })
}

/// The refresh-token grant; the new entry.
pub fn refresh(
    agent: &ureq::Agent,
    base: &str,
    refresh_token: &str,
) -> Result<Map<String, Value>, OAuthError> {
    let (status, body) = post(
        agent,
        &format!("{base}/oauth2/token"),
        &[
            ("grant_type", "refresh_token"),
            ("client_id", CLIENT_ID),
            ("refresh_token", refresh_token),
        ],
    )?;
    if !(200..300).contains(&status) {
        return Err(failure("token refresh", status, &body));
    }
    entry(&body, Some(refresh_token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_responses_become_pis_entry() {
        let e = entry(
            &json!({"access_token": "a", "refresh_token": "r", "expires_in": 600}),
            None,
        )
        .unwrap();
        let keys: Vec<&str> = e.keys().map(String::as_str).collect();
        assert_eq!(keys, ["type", "access", "refresh", "expires"]);
        let expires = e["expires"].as_f64().unwrap();
        let expected = now_ms_f64() + 300_000.0;
        assert!(
            (expires - expected).abs() < 5_000.0,
            "{expires} vs {expected}"
        );
        let kept = entry(&json!({"access_token": "a2"}), Some("r1")).unwrap();
        assert_eq!(kept["refresh"], "r1");
        assert_eq!(
            entry(&json!({"access_token": "a"}), None)
                .unwrap_err()
                .to_string(),
            "Invalid xAI OAuth response field: refresh_token"
        );
        assert_eq!(
            failure(
                "token refresh",
                400,
                &json!({"error": "invalid_grant", "error_description": "revoked"})
            )
            .to_string(),
            "xAI OAuth token refresh failed (HTTP 400): invalid_grant: revoked"
        );
        assert!(https_uri("http://evil").is_err());
    }
}
