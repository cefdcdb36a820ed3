//! Access tokens for Google Application Default Credentials (`config/google_adc.rs` finds and
//! parses the file), as google-auth-library gets them:
//!
//! - a service account: an RS256-signed JWT (`iss` = the account, `scope` = cloud-platform,
//!   `aud` = the token endpoint, one hour) is exchanged at the token endpoint
//!   (`grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`);
//! - a gcloud user login: the refresh token is exchanged (`grant_type=refresh_token` with the
//!   client id and secret).
//!
//! Tokens are cached process-wide until five minutes before they expire (`token_cache.rs`). RSA
//! signing uses `ring` (already in the build through rustls).
//!
//! Blocking calls: the token exchange, on the request's own HTTP agent (so abort and the idle
//! timeout bound it like the provider request itself). A failure is a `GoogleAuthError`, whose
//! text is the assistant error.

use std::io::Read;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::{Value, json};

use super::sigv4::uri_encode;
use super::token_cache::TokenCache;
use crate::config::google_adc::AdcCredentials;

const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
const JWT_LIFETIME_SECS: u64 = 3600;
/// Token responses larger than this are not read further.
const MAX_TOKEN_RESPONSE: u64 = 64 * 1024;

/// Why no access token could be had. `Display` is the text the request fails with.
#[derive(Debug)]
pub enum GoogleAuthError {
    /// An assertion was asked for credentials that are not a service account.
    NotServiceAccount,
    KeyNotPem,
    KeyUnusable(ring::error::KeyRejected),
    Sign,
    /// No answer from the token endpoint (connection, TLS, timeout).
    Request(ureq::Error),
    /// The answer broke off while being read.
    ReadBody(ureq::Error),
    /// A non-2xx answer without an OAuth `error`: the status and the (trimmed) body.
    Status {
        status: u16,
        body: String,
    },
    /// A non-2xx answer with an OAuth `error` (and maybe its `error_description`).
    Refused {
        error: String,
        description: String,
    },
    NoAccessToken,
}

impl std::fmt::Display for GoogleAuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const FAILED: &str = "Could not get a Google access token";
        match self {
            GoogleAuthError::NotServiceAccount => f.write_str("not a service account"),
            GoogleAuthError::KeyNotPem => f.write_str("The service account private_key is not PEM"),
            GoogleAuthError::KeyUnusable(e) => write!(
                f,
                "The service account private_key is not a usable RSA key: {e}"
            ),
            GoogleAuthError::Sign => f.write_str("Could not sign the service account JWT"),
            GoogleAuthError::Request(e) => {
                f.write_str(&super::error_text::network_error_message(e, false))
            }
            GoogleAuthError::ReadBody(e) => {
                f.write_str(&super::error_text::network_error_message(e, true))
            }
            GoogleAuthError::Status { status, body } => write!(f, "{FAILED}: {status} {body}"),
            // google-auth-library shows the OAuth error and its description.
            GoogleAuthError::Refused { error, description } if description.is_empty() => {
                write!(f, "{FAILED}: {error}")
            }
            GoogleAuthError::Refused { error, description } => {
                write!(f, "{FAILED}: {error}: {description}")
            }
            GoogleAuthError::NoAccessToken => {
                write!(f, "{FAILED}: no access_token in the answer")
            }
        }
    }
}

impl std::error::Error for GoogleAuthError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // ring's `KeyRejected` is an `Error` only with its `std` feature, which the build may lack.
        match self {
            GoogleAuthError::Request(e) | GoogleAuthError::ReadBody(e) => Some(e),
            _ => None,
        }
    }
}

/// A valid access token: from the cache, else exchanged at the token endpoint now.
pub fn access_token(
    credentials: &AdcCredentials,
    agent: &ureq::Agent,
    cache: &TokenCache,
) -> Result<String, GoogleAuthError> {
    let key = credentials.cache_key();
    if let Some(token) = cache.get(&key, Instant::now()) {
        return Ok(token);
    }
    let (token_uri, form) = match credentials {
        AdcCredentials::ServiceAccount { token_uri, .. } => {
            let assertion = service_account_assertion(credentials, unix_secs())?;
            (
                token_uri,
                format!(
                    "grant_type={}&assertion={assertion}",
                    uri_encode(b"urn:ietf:params:oauth:grant-type:jwt-bearer")
                ),
            )
        }
        AdcCredentials::AuthorizedUser {
            client_id,
            client_secret,
            refresh_token,
            token_uri,
            ..
        } => (
            token_uri,
            format!(
                "grant_type=refresh_token&client_id={}&client_secret={}&refresh_token={}",
                uri_encode(client_id.as_bytes()),
                uri_encode(client_secret.as_bytes()),
                uri_encode(refresh_token.as_bytes())
            ),
        ),
    };
    let requested = Instant::now();
    let (token, lifetime) = exchange(agent, token_uri, &form)?;
    // A credential resolved now joins the redaction set now (stdout, session, logs).
    crate::redact::add_secret(&token);
    cache.put(&key, token.clone(), lifetime, requested);
    Ok(token)
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The signed JWT a service account presents (`header.claims.signature`, base64url).
fn service_account_assertion(
    credentials: &AdcCredentials,
    iat: u64,
) -> Result<String, GoogleAuthError> {
    let AdcCredentials::ServiceAccount {
        client_email,
        private_key_pem,
        private_key_id,
        token_uri,
    } = credentials
    else {
        return Err(GoogleAuthError::NotServiceAccount);
    };
    let mut header = json!({"alg": "RS256", "typ": "JWT"});
    if let Some(kid) = private_key_id {
        header["kid"] = json!(kid);
    }
    let claims = json!({
        "iss": client_email,
        "scope": SCOPE,
        "aud": token_uri,
        "exp": iat + JWT_LIFETIME_SECS,
        "iat": iat,
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let key = rsa_key(private_key_pem)?;
    let mut signature = vec![0u8; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signing_input.as_bytes(),
        &mut signature,
    )
    .map_err(|_| GoogleAuthError::Sign)?;
    Ok(format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signature)
    ))
}

/// The RSA key of a PEM `PRIVATE KEY` (PKCS#8, as Google issues them) or `RSA PRIVATE KEY`.
fn rsa_key(pem: &str) -> Result<RsaKeyPair, GoogleAuthError> {
    let pkcs1 = pem.contains("BEGIN RSA PRIVATE KEY");
    let body: String = pem
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let der = STANDARD
        .decode(body)
        .map_err(|_| GoogleAuthError::KeyNotPem)?;
    let key = if pkcs1 {
        RsaKeyPair::from_der(&der)
    } else {
        RsaKeyPair::from_pkcs8(&der)
    };
    key.map_err(GoogleAuthError::KeyUnusable)
}

/// POSTs the form; returns the access token and its lifetime.
fn exchange(
    agent: &ureq::Agent,
    url: &str,
    form: &str,
) -> Result<(String, Duration), GoogleAuthError> {
    let response = crate::net::post(agent, url)
        .header("content-type", "application/x-www-form-urlencoded")
        .send(form.as_bytes())
        .map_err(|e| {
            log::debug!("token endpoint {url}: {e}");
            GoogleAuthError::Request(e)
        })?;
    let status = response.status().as_u16();
    let mut text = Vec::new();
    let read = response
        .into_body()
        .into_reader()
        .take(MAX_TOKEN_RESPONSE)
        .read_to_end(&mut text);
    if let Err(e) = read {
        return Err(GoogleAuthError::ReadBody(ureq::Error::from(e)));
    }
    let json: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
    let text_field = |name: &str| json.get(name).and_then(Value::as_str).unwrap_or("");
    if !(200..300).contains(&status) {
        return Err(match text_field("error") {
            "" => GoogleAuthError::Status {
                status,
                body: String::from_utf8_lossy(&text).trim().to_string(),
            },
            error => GoogleAuthError::Refused {
                error: error.to_string(),
                description: text_field("error_description").to_string(),
            },
        });
    }
    let token = text_field("access_token");
    if token.is_empty() {
        return Err(GoogleAuthError::NoAccessToken);
    }
    let lifetime = json
        .get("expires_in")
        .and_then(Value::as_u64)
        .unwrap_or(3600);
    Ok((token.to_string(), Duration::from_secs(lifetime)))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::google_adc::parse;

    /// A throwaway RSA key made for this test only (PKCS#8, 2048 bit), never used anywhere else.
    const TEST_KEY: &str = include_str!("../../fixtures/google/test-only-service-account-key.pem");

    fn service_account() -> AdcCredentials {
        parse(
            &json!({"type": "service_account", "client_email": "sa@p.iam.gserviceaccount.com",
                "private_key": TEST_KEY, "private_key_id": "kid-1",
                "token_uri": "http://127.0.0.1:9/token"})
            .to_string(),
        )
        .unwrap()
    }

    #[test]
    fn service_account_jwt_is_rs256_over_pis_claims() {
        let jwt = service_account_assertion(&service_account(), 1_700_000_000).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode = |p: &str| -> Value {
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).unwrap()).unwrap()
        };
        assert_eq!(
            decode(parts[0]),
            json!({"alg": "RS256", "typ": "JWT", "kid": "kid-1"})
        );
        assert_eq!(
            decode(parts[1]),
            json!({"iss": "sa@p.iam.gserviceaccount.com", "scope": SCOPE,
                "aud": "http://127.0.0.1:9/token", "exp": 1_700_003_600u64, "iat": 1_700_000_000u64})
        );
        // The signature verifies with the key's public half.
        let key = rsa_key(TEST_KEY).unwrap();
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            key.public().as_ref(),
        );
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let signed = format!("{}.{}", parts[0], parts[1]);
        assert!(public.verify(signed.as_bytes(), &signature).is_ok());
        assert!(
            public
                .verify(format!("{signed}x").as_bytes(), &signature)
                .is_err()
        );
        assert!(rsa_key("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----").is_err());
    }
}
