//! Kimi Code's subscription login, as pi 1.6.0 runs it (`ai:dist/auth/oauth/kimi-coding.js`): an
//! RFC 8628 device code at `auth.kimi.com` (JSON answers), and a refresh-token grant retried on
//! 429 and 5xx. The access token is the bearer of `api.kimi.com/coding`; the auth.json entry is
//! `{type, access, refresh, expires}` with `expires` the token's real end. The server can be
//! pointed elsewhere with pi's own `KIMI_CODE_OAUTH_HOST` (or `KIMI_OAUTH_HOST`).

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::oauth::{LoginUi, OAuthError, now_ms_f64, oauth_entry, redacted};
use super::oauth_device::{self, Answer, Poll};

pub const PROVIDER: &str = "kimi-coding";
pub const DEFAULT_URL: &str = "https://auth.kimi.com";
const CLIENT_ID: &str = "17e5f671-d194-4dfb-9706-5516cb48c098";
const DEFAULT_INTERVAL_S: f64 = 5.0;
const DEFAULT_EXPIRY_S: f64 = 15.0 * 60.0;
const REFRESH_RETRIES: u32 = 3;

fn message(text: impl Into<String>) -> OAuthError {
    OAuthError::Message(text.into())
}

/// `: <text>` when the body has any (redacted: token answers are shown).
fn with_text(answer: &Answer) -> String {
    if answer.text.is_empty() {
        String::new()
    } else {
        format!(": {}", redacted(&answer.text))
    }
}

/// The auth.json entry of a token answer (`operation`: `poll` or `refresh`).
fn entry(answer: &Answer, operation: &str) -> Result<Map<String, Value>, OAuthError> {
    let body = answer.json.clone().unwrap_or(Value::Null);
    let access = answer.str("access_token");
    let refresh = answer.str("refresh_token");
    let expires_in = oauth_device::positive(&body["expires_in"]);
    let (Some(access), Some(refresh), Some(expires_in)) = (access, refresh, expires_in) else {
        return Err(message(format!(
            "Kimi Code token {operation} response missing fields: {}",
            redacted(&answer.shown())
        )));
    };
    Ok(oauth_entry(&[
        ("access", json!(access)),
        ("refresh", json!(refresh)),
        ("expires", json!(now_ms_f64() + expires_in * 1000.0)),
    ]))
}

/// `pi login kimi-coding`: the device code, the address and code shown, then polling.
pub fn login(
    agent: &ureq::Agent,
    base: &str,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let device = oauth_device::post_form(
        agent,
        &format!("{base}/api/oauth/device_authorization"),
        &[("client_id", CLIENT_ID)],
    )?;
    if !device.ok() {
        return Err(message(format!(
            "Kimi Code device authorization failed with status {}{}",
            device.status,
            with_text(&device)
        )));
    }
    let body = device.json.clone().unwrap_or(Value::Null);
    let uri = oauth_device::trusted_http_url(body["verification_uri"].as_str());
    let complete = oauth_device::trusted_http_url(body["verification_uri_complete"].as_str());
    let (Some(device_code), Some(user_code), Some(_), Some(complete)) = (
        body["device_code"].as_str(),
        body["user_code"].as_str(),
        uri,
        complete,
    ) else {
        return Err(message(format!(
            "Invalid Kimi Code device authorization response: {}",
            redacted(&device.shown())
        )));
    };
    let interval = oauth_device::positive(&body["interval"]).unwrap_or(DEFAULT_INTERVAL_S);
    let expires = oauth_device::positive(&body["expires_in"]).unwrap_or(DEFAULT_EXPIRY_S);
    ui.show(&format!("Open {complete} and enter code: {user_code}"));
    ui.show("Waiting for Kimi Code to confirm the login...");
    oauth_device::poll(Some(interval), Some(expires), true, || {
        let answer = oauth_device::post_form(
            agent,
            &format!("{base}/api/oauth/token"),
            &[
                ("client_id", CLIENT_ID),
                ("device_code", device_code),
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
            ],
        )?;
        if answer.status >= 500 {
            return Ok(Poll::Failed(format!(
                "Kimi Code device token request failed with status {}{}",
                answer.status,
                with_text(&answer)
            )));
        }
        if answer.ok() && answer.str("access_token").is_some() {
            return Ok(match entry(&answer, "poll") {
                Ok(entry) => Poll::Complete(entry),
                Err(e) => Poll::Failed(e.to_string()),
            });
        }
        let body = answer.json.clone().unwrap_or(Value::Null);
        Ok(match body["error"].as_str() {
            Some("authorization_pending") => Poll::Pending,
            Some("slow_down") => Poll::SlowDown(oauth_device::positive(&body["interval"])),
            Some("expired_token") => {
                Poll::Failed("Kimi Code device authorization expired. Please restart login.".into())
            }
            Some("access_denied") => Poll::Failed("Kimi Code login was denied.".into()),
            error => {
                let detail = match error {
                    Some(error) => {
                        let description = body["error_description"]
                            .as_str()
                            .map(|d| format!(": {d}"))
                            .unwrap_or_default();
                        format!(": {error}{description}")
                    }
                    None => String::new(),
                };
                Poll::Failed(format!(
                    "Kimi Code device token request failed (status {}){detail}",
                    answer.status
                ))
            }
        })
    })
}

/// The refresh-token grant, retried up to three times (1, 2, 4 s apart) on no answer, 429 or 5xx.
pub fn refresh(
    agent: &ureq::Agent,
    base: &str,
    refresh_token: &str,
) -> Result<Map<String, Value>, OAuthError> {
    let url = format!("{base}/api/oauth/token");
    let mut last = None;
    for attempt in 0..=REFRESH_RETRIES {
        if attempt > 0 {
            std::thread::sleep(Duration::from_secs(1 << (attempt - 1)));
        }
        let answer = match oauth_device::post_form(
            agent,
            &url,
            &[
                ("client_id", CLIENT_ID),
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh_token),
            ],
        ) {
            Ok(answer) => answer,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        if answer.ok() {
            return entry(&answer, "refresh");
        }
        let body = answer.json.clone().unwrap_or(Value::Null);
        if matches!(answer.status, 401 | 403) || body["error"] == "invalid_grant" {
            let description = body["error_description"]
                .as_str()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            return Err(message(format!(
                "Kimi Code token refresh unauthorized (status {}){description}",
                answer.status
            )));
        }
        if (answer.status == 429 || answer.status >= 500) && attempt < REFRESH_RETRIES {
            last = Some(message(format!(
                "Kimi Code token refresh failed with status {}",
                answer.status
            )));
            continue;
        }
        return Err(message(format!(
            "Kimi Code token refresh failed with status {}: {}",
            answer.status,
            redacted(&answer.shown())
        )));
    }
    Err(last.unwrap_or_else(|| message("Kimi Code token refresh failed")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: Value) -> Answer {
        Answer {
            status,
            text: body.to_string(),
            json: Some(body),
        }
    }

    #[test]
    fn token_answers_become_pis_entry() {
        let e = entry(
            &answer(
                200,
                json!({"access_token": "a", "refresh_token": "r", "expires_in": 60}),
            ),
            "poll",
        )
        .unwrap();
        let keys: Vec<&str> = e.keys().map(String::as_str).collect();
        assert_eq!(keys, ["type", "access", "refresh", "expires"]);
        let expires = e["expires"].as_f64().unwrap();
        assert!((expires - (now_ms_f64() + 60_000.0)).abs() < 5_000.0);
        assert_eq!(
            entry(&answer(200, json!({"access_token": "a"})), "refresh")
                .unwrap_err()
                .to_string(),
            r#"Kimi Code token refresh response missing fields: {"access_token":"a"}"#
        );
    }
}
