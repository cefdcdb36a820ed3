//! The Radius gateway's login, as pi 1.6.0 runs its "Sign in with device code" method
//! (`ai:dist/auth/oauth/radius.js`): an RFC 8628 device code at `<gateway>/v1/oauth/device`,
//! tokens from `<gateway>/v1/oauth/token` (also the refresh grant). The access token is the
//! gateway's API key; auth.json holds `{type, access, refresh, expires, scope}` with `expires` a
//! minute early. The gateway is pi's `https://radius.pi.dev`, or `PI_OAUTH_RADIUS_URL`.

use serde_json::{Map, Value, json};

use super::oauth::{LoginUi, OAuthError, now_ms_f64, oauth_entry, redacted};
use super::oauth_device::{self, Answer, Poll};

pub const PROVIDER: &str = "radius";
pub const DEFAULT_URL: &str = "https://radius.pi.dev";
const CLIENT_ID: &str = "pi-gateway";
const SCOPE: &str = "gateway offline_access";
const EXPIRY_SKEW_MS: f64 = 60_000.0;

/// pi's `OAuthResponseError`: `<what>: <error>[: <description>]`, or the description (the body
/// when it is not JSON), or the status.
fn response_error(answer: &Answer, what: &str) -> (Option<String>, OAuthError) {
    let (error, description) = match &answer.json {
        Some(body) => (
            body["error"].as_str().map(str::to_string),
            body["error_description"].as_str().map(str::to_string),
        ),
        None if answer.text.is_empty() => (None, None),
        None => (None, Some(redacted(&answer.text))),
    };
    let detail = match (&error, description) {
        (Some(e), Some(d)) => format!("{e}: {d}"),
        (Some(e), None) => e.clone(),
        (None, Some(d)) if !d.is_empty() => d,
        _ => answer.status.to_string(),
    };
    (error, OAuthError::Message(format!("{what}: {detail}")))
}

/// A token request; the new entry, or the OAuth error code with the failure.
fn token(
    agent: &ureq::Agent,
    gateway: &str,
    form: &[(&str, &str)],
) -> Result<Map<String, Value>, (Option<String>, OAuthError)> {
    let answer = oauth_device::post_form(agent, &format!("{gateway}/v1/oauth/token"), form)
        .map_err(|e| (None, e))?;
    if !answer.ok() {
        return Err(response_error(&answer, "Radius OAuth token request failed"));
    }
    let body = answer.json.clone().unwrap_or(Value::Null);
    let (Some(access), Some(expires_in)) =
        (answer.str("access_token"), body["expires_in"].as_f64())
    else {
        return Err((
            None,
            OAuthError::MissingTokenFields(answer.text.chars().take(300).collect()),
        ));
    };
    let mut fields = vec![
        ("access", json!(access)),
        ("refresh", body["refresh_token"].clone()),
        (
            "expires",
            json!(now_ms_f64() + expires_in * 1000.0 - EXPIRY_SKEW_MS),
        ),
    ];
    if body["scope"].is_string() {
        fields.push(("scope", body["scope"].clone()));
    }
    // `JSON.stringify` leaves out what the gateway did not send.
    fields.retain(|(_, v)| !v.is_null());
    Ok(oauth_entry(&fields))
}

/// `pi login radius`: the device code, the address and code shown, then polling.
pub fn login(
    agent: &ureq::Agent,
    gateway: &str,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let device = oauth_device::post_form(
        agent,
        &format!("{gateway}/v1/oauth/device"),
        &[("client_id", CLIENT_ID), ("scope", SCOPE)],
    )?;
    if !device.ok() {
        return Err(response_error(&device, "Radius OAuth device authorization failed").1);
    }
    let body = device.json.clone().unwrap_or(Value::Null);
    let expires = oauth_device::positive(&body["expires_in"]);
    let (Some(device_code), Some(user_code), Some(uri), Some(expires)) = (
        device.str("device_code"),
        device.str("user_code"),
        device.str("verification_uri"),
        expires,
    ) else {
        return Err(OAuthError::Message(
            "Radius OAuth device authorization response is missing required fields".into(),
        ));
    };
    let uri = oauth_device::trusted_http_url(Some(uri)).ok_or_else(|| {
        OAuthError::Message(
            "Untrusted verification_uri in Radius OAuth device authorization response".into(),
        )
    })?;
    ui.show(&format!("Open {uri} and enter code: {user_code}"));
    ui.show("Waiting for Radius to confirm the login...");
    let interval = oauth_device::positive(&body["interval"]);
    oauth_device::poll(interval, Some(expires), false, || {
        let form = [
            ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
            ("client_id", CLIENT_ID),
            ("device_code", device_code),
        ];
        match token(agent, gateway, &form) {
            Ok(entry) => Ok(Poll::Complete(entry)),
            Err((code, failure)) => match code.as_deref() {
                Some("authorization_pending") => Ok(Poll::Pending),
                Some("slow_down") => Ok(Poll::SlowDown(None)),
                Some("expired_token") => Ok(Poll::Failed("Device authorization expired.".into())),
                Some("access_denied") => {
                    Ok(Poll::Failed("Device authorization was denied.".into()))
                }
                _ => Err(failure),
            },
        }
    })
}

/// The refresh-token grant; the new entry.
pub fn refresh(
    agent: &ureq::Agent,
    gateway: &str,
    refresh_token: &str,
) -> Result<Map<String, Value>, OAuthError> {
    let form = [
        ("grant_type", "refresh_token"),
        ("client_id", CLIENT_ID),
        ("refresh_token", refresh_token),
    ];
    token(agent, gateway, &form).map_err(|(_, e)| e)
}
