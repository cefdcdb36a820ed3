//! OpenRouter's sign-in, as pi 1.6.0 runs it (`ai:dist/auth/oauth/openrouter.js`): PKCE with a
//! one-shot loopback callback on a free port (a random path stands in for `state`, which
//! OpenRouter does not send), raced with a pasted code or redirect URL; the code is exchanged for
//! a permanent API key. auth.json holds `{type, access: key, refresh: "", expires:
//! Number.MAX_SAFE_INTEGER}`; there is nothing to refresh. OpenRouter (`https://openrouter.ai`:
//! `/auth`, `/api/v1/auth/keys`) can be pointed elsewhere with `PI_OAUTH_OPENROUTER_URL`; the
//! callback binds `PI_OAUTH_CALLBACK_HOST` (default 127.0.0.1), as in pi.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::oauth::{
    LoginUi, OAuthError, form_encode, oauth_entry, parse_authorization_input, pkce,
};
use super::oauth_callback::{self, Arrived, Callback, Verdict, param, query_params};
use super::oauth_device;

pub const PROVIDER: &str = "openrouter";
pub const DEFAULT_URL: &str = "https://openrouter.ai";
const LOGIN_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// JavaScript's `Number.MAX_SAFE_INTEGER`: a key that does not expire.
const NEVER_MS: u64 = 9_007_199_254_740_991;

fn message(text: impl Into<String>) -> OAuthError {
    OAuthError::Message(text.into())
}

/// pi's `errorDetail`: `error_description`, `message`, `error` or `error.message`.
fn detail(body: &Value) -> Option<&str> {
    ["error_description", "message", "error"]
        .iter()
        .find_map(|k| body[*k].as_str())
        .or_else(|| body["error"]["message"].as_str())
}

/// `pi login openrouter`.
pub fn login(
    agent: &ureq::Agent,
    base: &str,
    callback_host: &str,
    ui: &mut dyn LoginUi,
) -> Result<Map<String, Value>, OAuthError> {
    let (verifier, challenge) = pkce()?;
    crate::redact::add_secret(&verifier);
    let path = format!("/oauth/callback/{}", crate::ids::uuid_v4());
    let callback = Callback::listen(callback_host, 0, vec![path.clone()], |target| {
        let params = query_params(target);
        if let Some(error) = param(&params, "error") {
            let description = param(&params, "error_description").unwrap_or(error);
            return Verdict::Settle(
                400,
                format!("OpenRouter authorization failed.\n\n{description}"),
                Err(format!("OpenRouter authorization failed: {description}")),
            );
        }
        match param(&params, "code") {
            Some(code) => Verdict::Settle(
                200,
                "Signed in to OpenRouter. You may now close this page.".into(),
                Ok(code),
            ),
            None => Verdict::Reply(400, "Missing authorization code.".into()),
        }
    })
    .map_err(OAuthError::Message)?;
    let shown_host = if callback_host.contains(':') {
        format!("[{callback_host}]")
    } else {
        callback_host.to_string()
    };
    let redirect = format!("http://{shown_host}:{}{path}", callback.port);
    let url = format!(
        "{base}/auth?{}",
        form_encode(&[
            ("callback_url", &redirect),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ])
    );
    ui.show(&format!(
        "Listening for OpenRouter OAuth callback on {redirect}"
    ));
    ui.show(&format!("Open this URL to sign in:\n  {url}"));
    ui.show("Complete sign-in in your browser. If the browser is on another machine, paste the final redirect URL here.");
    let pasted = ui.pasted(&format!(
        "Complete sign-in in your browser, or paste the authorization code / redirect URL here ({redirect}): "
    ));
    let code = match oauth_callback::wait(&callback, &pasted, LOGIN_TIMEOUT) {
        Some(Arrived::Callback(result)) => result.map_err(message)?,
        Some(Arrived::Pasted(input)) => parse_authorization_input(&input)
            .0
            .filter(|c| !c.is_empty())
            .ok_or(OAuthError::Flow("Missing authorization code"))?,
        None => return Err(message("OpenRouter sign-in timed out")),
    };
    drop(callback);
    crate::redact::add_secret(&code);
    ui.show("Exchanging authorization code for an API key...");
    exchange(agent, base, &code, &verifier)
}

fn exchange(
    agent: &ureq::Agent,
    base: &str,
    code: &str,
    verifier: &str,
) -> Result<Map<String, Value>, OAuthError> {
    let body = json!({"code": code, "code_verifier": verifier, "code_challenge_method": "S256"});
    let answer = oauth_device::post(
        agent,
        &format!("{base}/api/v1/auth/keys"),
        "application/json",
        &body.to_string(),
        &[],
    )?;
    let parsed = answer.json.clone().unwrap_or(Value::Null);
    if answer.ok() && answer.json.is_none() && serde_json::from_str::<Value>(&answer.text).is_err()
    {
        return Err(message("OpenRouter OAuth returned invalid JSON"));
    }
    if !answer.ok() {
        let shown = detail(&parsed)
            .map(|d| format!(": {}", super::oauth::redacted(d)))
            .unwrap_or_default();
        return Err(message(format!(
            "OpenRouter OAuth key exchange failed (HTTP {}){shown}",
            answer.status
        )));
    }
    let key = answer
        .str("key")
        .ok_or_else(|| message("OpenRouter OAuth response carries no \"key\""))?;
    Ok(oauth_entry(&[
        ("access", json!(key)),
        ("refresh", json!("")),
        ("expires", json!(NEVER_MS)),
    ]))
}
