//! What pi 1.6.0's device-code logins (xAI, Kimi Code, Meta, Radius) share
//! (`ai:dist/auth/oauth/device-code.js`): RFC 8628 polling — 5 s without an `interval`, at
//! least 1 s, 5 s more per `slow_down` unless the server names the new interval, until the code
//! expires — and the form POST whose status and JSON body the flows judge.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::oauth::{OAuthError, form_encode};
use crate::net;

const DEFAULT_INTERVAL_MS: f64 = 5000.0;
const MINIMUM_INTERVAL_MS: f64 = 1000.0;
const SLOW_DOWN_STEP_MS: f64 = 5000.0;
/// pi polls without end when the server names no expiry; pi-rs stops after 30 minutes.
const UNNAMED_EXPIRY: Duration = Duration::from_secs(30 * 60);

/// One poll's outcome.
pub enum Poll<T> {
    Complete(T),
    Pending,
    /// Slow down, to the interval the server names (seconds) if it names one.
    SlowDown(Option<f64>),
    /// A whole sentence ending the login.
    Failed(String),
}

/// A positive finite number, as pi's flows accept `interval` and `expires_in`.
pub fn positive(value: &Value) -> Option<f64> {
    value.as_f64().filter(|n| n.is_finite() && *n > 0.0)
}

/// Polls `step` every interval (after a first wait when `wait_first`) until it completes, fails,
/// or the code expires (`expires_s`).
pub fn poll<T>(
    interval_s: Option<f64>,
    expires_s: Option<f64>,
    wait_first: bool,
    mut step: impl FnMut() -> Result<Poll<T>, OAuthError>,
) -> Result<T, OAuthError> {
    let deadline =
        Instant::now() + expires_s.map_or(UNNAMED_EXPIRY, |s| Duration::from_secs_f64(s.max(0.0)));
    let mut interval_ms = interval_s
        .map_or(DEFAULT_INTERVAL_MS, |s| (s * 1000.0).floor())
        .max(MINIMUM_INTERVAL_MS);
    let wait = |interval_ms: f64| {
        let remaining = deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(Duration::from_millis(interval_ms as u64).min(remaining));
    };
    if wait_first {
        wait(interval_ms);
    }
    let mut slowed_down = false;
    while Instant::now() < deadline {
        match step()? {
            Poll::Complete(value) => return Ok(value),
            Poll::Failed(message) => return Err(OAuthError::Message(message)),
            Poll::Pending => {}
            Poll::SlowDown(named) => {
                slowed_down = true;
                interval_ms = match named.filter(|s| s.is_finite() && *s > 0.0) {
                    Some(s) => (s * 1000.0).floor(),
                    None => interval_ms + SLOW_DOWN_STEP_MS,
                }
                .max(MINIMUM_INTERVAL_MS);
            }
        }
        if Instant::now() >= deadline {
            break;
        }
        wait(interval_ms);
    }
    Err(OAuthError::DeviceFlowTimedOut { slowed_down })
}

/// An answer: the status, the JSON body when it is an object, and the body's text.
pub struct Answer {
    pub status: u16,
    pub json: Option<Value>,
    pub text: String,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// A string field of the JSON body, when it is a non-empty string.
    pub fn str(&self, field: &str) -> Option<&str> {
        self.json.as_ref()?[field]
            .as_str()
            .filter(|s| !s.is_empty())
    }

    /// The JSON body as pi's `JSON.stringify(json)` shows it in messages (`null` when none).
    pub fn shown(&self) -> String {
        self.json
            .as_ref()
            .map_or_else(|| "null".to_string(), Value::to_string)
    }
}

/// POSTs `body` (already encoded, with its content type) with `Accept: application/json` and the
/// extra headers; the answer of any status (1 MB at most).
pub fn post(
    agent: &ureq::Agent,
    url: &str,
    content_type: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Result<Answer, OAuthError> {
    let mut request = net::post(agent, url)
        .header("Accept", "application/json")
        .header("Content-Type", content_type);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request
        .send(body.as_bytes())
        .map_err(|source| OAuthError::Request {
            url: url.to_string(),
            source,
        })?;
    let (status, text) = super::oauth::read_text(response, url)?;
    let json = serde_json::from_str::<Value>(&text)
        .ok()
        .filter(Value::is_object);
    Ok(Answer { status, json, text })
}

/// A form POST (`application/x-www-form-urlencoded`).
pub fn post_form(
    agent: &ureq::Agent,
    url: &str,
    form: &[(&str, &str)],
) -> Result<Answer, OAuthError> {
    post(
        agent,
        url,
        "application/x-www-form-urlencoded",
        &form_encode(form),
        &[],
    )
}

/// pi's `trustedHttpUrl`: an `http:` or `https:` address a login may show to open, else `None`.
pub fn trusted_http_url(value: Option<&str>) -> Option<String> {
    let value = value?;
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let clean = !value.chars().any(|c| c.is_control() || c.is_whitespace());
    if host.is_empty() || !clean {
        return None;
    }
    // `new URL(value).href`: a bare host gets its `/` path.
    let scheme = &value[..value.len() - rest.len()];
    let after = &rest[host.len()..];
    let slash = if after.starts_with('/') { "" } else { "/" };
    Some(format!("{scheme}{host}{slash}{after}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_follows_rfc_8628_as_pi() {
        let mut calls = 0;
        let started = Instant::now();
        let value = poll(Some(0.001), Some(30.0), false, || {
            calls += 1;
            Ok(match calls {
                1 => Poll::Pending,
                2 => Poll::SlowDown(Some(1.0)),
                _ => Poll::Complete(calls),
            })
        })
        .unwrap();
        assert_eq!(value, 3);
        // At least 1 s between polls, even when the server asks for less.
        assert!(started.elapsed() >= Duration::from_millis(2000));
        let failed = poll::<()>(None, Some(5.0), false, || Ok(Poll::Failed("denied".into())));
        assert_eq!(failed.unwrap_err().to_string(), "denied");
        let expired = poll::<()>(Some(1.0), Some(0.0), true, || Ok(Poll::Pending));
        assert_eq!(expired.unwrap_err().to_string(), "Device flow timed out");
    }

    #[test]
    fn only_web_addresses_are_trusted() {
        assert_eq!(
            trusted_http_url(Some("https://a.example/device?c=1")).as_deref(),
            Some("https://a.example/device?c=1")
        );
        assert_eq!(
            trusted_http_url(Some("http://a.example?c=1")).as_deref(),
            Some("http://a.example/?c=1")
        );
        assert_eq!(trusted_http_url(Some("file:///etc/passwd")), None);
        assert_eq!(trusted_http_url(Some("https://")), None);
        assert_eq!(trusted_http_url(Some("https://a b")), None);
        assert_eq!(trusted_http_url(None), None);
    }
}
