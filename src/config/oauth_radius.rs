//! The Radius gateway's login, as pi 1.6.0 runs it (`ai:dist/auth/oauth/radius.js`), with its two
//! methods: "Sign in with browser" (the default: the authorization endpoint read from
//! `<gateway>/v1/oauth`, PKCE, the browser's callback on 127.0.0.1:1456 `/oauth/callback`, the
//! code exchanged while the browser waits) and "Sign in with device code" (`--no-browser`: an
//! RFC 8628 device code at `<gateway>/v1/oauth/device`). Tokens come from
//! `<gateway>/v1/oauth/token` (also the refresh grant). The access token is the gateway's API
//! key; auth.json holds `{type, access, refresh, expires, scope}` with `expires` a minute early.
//! The gateway is pi's `https://radius.pi.dev`, or `PI_OAUTH_RADIUS_URL`.
//!
//! Right after a login 1.6.0 also refreshes the account's catalog (`refresh_catalog`): the
//! gateway's `/v1/config`, stored in `models-store.json`, from then on Radius's model list.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::oauth::{LoginUi, OAuthError, form_encode, now_ms_f64, oauth_entry, pkce, redacted};
use super::oauth_callback::{Callback, Verdict, param, query_params};
use super::oauth_device::{self, Answer, Poll};
use crate::net;

pub const PROVIDER: &str = "radius";
pub const DEFAULT_URL: &str = "https://radius.pi.dev";
const CLIENT_ID: &str = "pi-gateway";
const SCOPE: &str = "gateway offline_access";
const EXPIRY_SKEW_MS: f64 = 60_000.0;
const CALLBACK_HOST: &str = "127.0.0.1";
const CALLBACK_PORT: u16 = 1456;
const CALLBACK_PATH: &str = "/oauth/callback";
const REDIRECT_URI: &str = "http://127.0.0.1:1456/oauth/callback";
/// 1.6.0 gives up the catalog refresh after a login at 15 s.
const CATALOG_TIMEOUT: Duration = Duration::from_secs(15);
/// A catalog larger than this is refused (the gateway's is a few hundred KB at most).
const CATALOG_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// pi waits for the browser until Ctrl+C; pi-rs bounds the wait.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// 1.6.0's label of the method `--no-browser` picks (the browser one is the default).
const DEVICE_CODE_LABEL: &str = "Sign in with device code (when signing in from another device)";

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

/// The catalog refresh 1.6.0's `pi auth login` runs after a Radius login: `GET
/// <gateway>/v1/config` with the new access token, its models (those with 1.6.0's required
/// fields, as its `sanitizeRadiusGatewayConfig` keeps them) given `api: "pi-messages"`, the
/// provider and the config's `baseUrl`, stored as `radius: {models, checkedAt}` in
/// `<agent_dir>/models-store.json`, where they replace the built-in Radius list (`models_store`).
/// The number of models stored; the error as 1.6.0 words it.
pub fn refresh_catalog(
    agent: &ureq::Agent,
    gateway: &str,
    access: &str,
    agent_dir: &std::path::Path,
) -> Result<usize, String> {
    let url = format!("{gateway}/v1/config");
    let response = net::get(agent, &url)
        .header("accept", "application/json")
        .header("authorization", &format!("Bearer {access}"))
        .config()
        .timeout_global(Some(CATALOG_TIMEOUT))
        .build()
        .call()
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(response.into_body().into_reader(), CATALOG_MAX_BYTES),
        &mut text,
    )
    .map_err(|e| e.to_string())?;
    if !(200..300).contains(&status) {
        let body: String = text.trim().chars().take(512).collect();
        return Err(format!(
            "Could not load Radius config from {gateway}: {status}: {}",
            redacted(&body)
        ));
    }
    let invalid = || format!("Invalid Radius config from {gateway}");
    let config: Value = serde_json::from_str(&text).map_err(|_| invalid())?;
    let (Some(base_url), Some(models)) = (config["baseUrl"].as_str(), config["models"].as_array())
    else {
        return Err(invalid());
    };
    let models: Vec<Value> = models
        .iter()
        .filter(|m| is_gateway_model(m))
        .map(|m| {
            let mut model = m.as_object().cloned().unwrap_or_default();
            model.insert("api".into(), json!("pi-messages"));
            model.insert("provider".into(), json!(PROVIDER));
            model.insert("baseUrl".into(), json!(base_url));
            Value::Object(model)
        })
        .collect();
    let count = models.len();
    let entry = json!({"models": models, "checkedAt": crate::time::now_ms()});
    super::models_store::write_entry(agent_dir, PROVIDER, entry)?;
    Ok(count)
}

/// A gateway model with the fields 1.6.0 requires (`isRadiusGatewayModel`).
fn is_gateway_model(model: &Value) -> bool {
    model["id"].is_string()
        && model["name"].is_string()
        && model["reasoning"].is_boolean()
        && model["input"].is_array()
        && model["cost"].is_object()
        && model["contextWindow"].is_number()
        && model["maxTokens"].is_number()
}

/// `pi login radius`: the browser sign-in, or with `browser` false the device code.
pub fn login(
    agent: &ureq::Agent,
    gateway: &str,
    browser: bool,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    if browser {
        let endpoint = authorization_endpoint(agent, gateway)?;
        login_with_browser(agent, gateway, &endpoint, ui)
    } else {
        ui.show(&format!("Sign in to Radius: {DEVICE_CODE_LABEL}"));
        login_with_device_code(agent, gateway, ui)
    }
}

/// The gateway's OAuth discovery (`GET <gateway>/v1/oauth`): its browser authorization endpoint.
fn authorization_endpoint(agent: &ureq::Agent, gateway: &str) -> Result<String, OAuthError> {
    let url = format!("{gateway}/v1/oauth");
    let response = net::get(agent, &url)
        .header("accept", "application/json")
        .call()
        .map_err(|source| OAuthError::Request {
            url: url.clone(),
            source,
        })?;
    let (status, text) = super::oauth::read_text(response, &url)?;
    if !(200..300).contains(&status) {
        return Err(OAuthError::Message(format!(
            "Could not load Radius OAuth config from {gateway}: {status} {}",
            redacted(&text.chars().take(300).collect::<String>())
        )));
    }
    let discovery: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    oauth_device::trusted_http_url(discovery["authorizationEndpoint"].as_str())
        .ok_or_else(|| OAuthError::Message(format!("Invalid Radius OAuth config from {gateway}")))
}

/// "Sign in with browser": the callback server answers the browser only after the code has been
/// exchanged, with the result (as 1.6.0's callback server does).
fn login_with_browser(
    agent: &ureq::Agent,
    gateway: &str,
    endpoint: &str,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let (verifier, challenge) = pkce()?;
    let state = crate::ids::uuid_v4();
    crate::redact::register_secrets([verifier.clone()]);
    let (exchange_agent, exchange_gateway, expected) =
        (agent.clone(), gateway.to_string(), state.clone());
    let callback = Callback::listen(
        CALLBACK_HOST,
        CALLBACK_PORT,
        vec![CALLBACK_PATH.to_string()],
        move |target| {
            let params = query_params(target);
            if param(&params, "state").as_deref() != Some(expected.as_str()) {
                return Verdict::Reply(400, "State mismatch.".into());
            }
            if let Some(error) = param(&params, "error") {
                let description = param(&params, "error_description").unwrap_or(error);
                return Verdict::Settle(
                    400,
                    format!("Radius authorization failed.\n\n{description}"),
                    Err(format!("Radius authorization failed: {description}")),
                );
            }
            let Some(code) = param(&params, "code") else {
                return Verdict::Reply(400, "Missing authorization code.".into());
            };
            crate::redact::add_secret(&code);
            let form = [
                ("grant_type", "authorization_code"),
                ("client_id", CLIENT_ID),
                ("redirect_uri", REDIRECT_URI),
                ("code", code.as_str()),
                ("code_verifier", verifier.as_str()),
            ];
            match token(&exchange_agent, &exchange_gateway, &form) {
                Ok(entry) => Verdict::Settle(
                    200,
                    "Signed in to Radius. You may now close this page.".into(),
                    Ok(entry),
                ),
                Err((_, failure)) => Verdict::Settle(
                    502,
                    format!("Radius sign-in failed.\n\n{failure}"),
                    Err(failure.to_string()),
                ),
            }
        },
    )
    .map_err(OAuthError::Message)?;
    let url = format!(
        "{endpoint}{}{}",
        if endpoint.contains('?') { "&" } else { "?" },
        form_encode(&[
            ("response_type", "code"),
            ("client_id", CLIENT_ID),
            ("redirect_uri", REDIRECT_URI),
            ("scope", SCOPE),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("handoff", "url"),
            ("state", &state),
        ])
    );
    ui.show(&format!("Listening for OAuth callback on {REDIRECT_URI}"));
    ui.show(&format!("Open this URL to sign in:\n  {url}"));
    ui.show("Continue in your browser.");
    ui.show(&format!(
        "To use \"{DEVICE_CODE_LABEL}\" instead, run \"pi auth login {PROVIDER} --no-browser\""
    ));
    match callback.results.recv_timeout(BROWSER_TIMEOUT) {
        Ok(result) => result.map_err(OAuthError::Message),
        Err(_) => Err(OAuthError::Message("Radius sign-in timed out".into())),
    }
}

/// "Sign in with device code": the address and code shown, then polling.
fn login_with_device_code(
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
    ui.show("Waiting for authentication...");
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
