//! AWS credentials that come over the network, as the SDK's default chain gets them after the
//! environment and the shared files:
//!
//! - web identity (EKS IRSA, other OIDC federations): the token in `AWS_WEB_IDENTITY_TOKEN_FILE`
//!   is exchanged at STS (`AssumeRoleWithWebIdentity`, unsigned, regional endpoint or
//!   `AWS_ENDPOINT_URL_STS`) for temporary credentials;
//! - the container credentials endpoint (ECS task roles, EKS Pod Identity): a GET with the
//!   optional authorization token, answering JSON.
//!
//! Both are cached until five minutes before their `Expiration` (`token_cache.rs`; the cached
//! text is the endpoint's answer, keyed by the endpoint and role, never by a secret). The calls
//! run on the request's own HTTP agent, so its bounds and abort apply.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::sigv4::{AwsCredentials, uri_encode};
use super::token_cache::TokenCache;
use crate::config::aws::{self, NO_CREDENTIALS, WebIdentity};
use crate::messages::now_ms;

/// Answers larger than this are not read further.
const MAX_ANSWER: u64 = 64 * 1024;

/// Credentials from the container endpoint.
pub fn container_credentials(
    agent: &ureq::Agent,
    url: &str,
    authorization: Option<&str>,
    cache: &TokenCache,
) -> Result<AwsCredentials, String> {
    let failed = |detail: String| format!("{NO_CREDENTIALS}: container credentials: {detail}");
    let text = cached_or(cache, &format!("aws-container:{url}"), || {
        let mut get = agent.get(url);
        if let Some(token) = authorization {
            get = get.header("authorization", token);
        }
        let text = answer(get.call()).map_err(failed)?;
        let expires = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|json| json["Expiration"].as_str().map(str::to_string));
        Ok((text, expires))
    })?;
    aws::credentials_from_json(&text).ok_or_else(|| failed("no AccessKeyId/SecretAccessKey".into()))
}

/// Credentials for the role, from STS in exchange for the web identity token.
pub fn web_identity_credentials(
    agent: &ureq::Agent,
    identity: &WebIdentity,
    region: &str,
    cache: &TokenCache,
) -> Result<AwsCredentials, String> {
    let failed = |detail: String| format!("{NO_CREDENTIALS}: web identity: {detail}");
    let url = identity.sts_endpoint.clone().unwrap_or_else(|| {
        let suffix = if region.starts_with("cn-") { ".cn" } else { "" };
        format!("https://sts.{region}.amazonaws.com{suffix}")
    });
    let key = format!("aws-web-identity:{}@{url}", identity.role_arn);
    let text = cached_or(cache, &key, || {
        let token = std::fs::read_to_string(&identity.token_file)
            .map_err(|e| failed(format!("{}: {e}", identity.token_file.display())))?;
        let form = format!(
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn={}&RoleSessionName={}&WebIdentityToken={}",
            uri_encode(identity.role_arn.as_bytes()),
            uri_encode(identity.session_name.as_bytes()),
            uri_encode(token.as_bytes())
        );
        let post = agent
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded");
        let text = answer(post.send(form.as_bytes())).map_err(|detail| {
            // STS explains itself in <Error><Code/><Message/></Error>.
            match (xml_text(&detail, "Code"), xml_text(&detail, "Message")) {
                (Some(code), Some(message)) => failed(format!("{code}: {message}")),
                _ => failed(detail),
            }
        })?;
        let expires = xml_text(&text, "Expiration");
        Ok((text, expires))
    })?;
    let field = |name: &str| xml_text(&text, name);
    match (field("AccessKeyId"), field("SecretAccessKey")) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(AwsCredentials {
            access_key_id,
            secret_access_key,
            session_token: field("SessionToken"),
        }),
        _ => Err(failed("no Credentials in the STS answer".into())),
    }
}

/// The cached answer for `key`, else `fetch`'s (cached until its ISO-8601 expiry, if any).
fn cached_or(
    cache: &TokenCache,
    key: &str,
    fetch: impl FnOnce() -> Result<(String, Option<String>), String>,
) -> Result<String, String> {
    if let Some(text) = cache.get(key, Instant::now()) {
        return Ok(text);
    }
    let (text, expires) = fetch()?;
    let lifetime = expires
        .as_deref()
        .and_then(crate::session::ms_from_iso)
        .map(|at| Duration::from_millis(at.saturating_sub(now_ms()).max(0) as u64))
        .unwrap_or(Duration::ZERO);
    cache.put(key, text.clone(), lifetime, Instant::now());
    Ok(text)
}

/// The body of a 2xx answer; otherwise `<status> <body>` (or the network error's text).
fn answer(result: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<String, String> {
    let response = result.map_err(|e| super::network_error_message(&e, false))?;
    let status = response.status().as_u16();
    let mut text = String::new();
    response
        .into_body()
        .into_reader()
        .take(MAX_ANSWER)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if (200..300).contains(&status) {
        Ok(text)
    } else {
        Err(format!("{status} {}", text.trim()))
    }
}

/// The text of the first `<name>…</name>` element (STS answers are small, flat XML).
fn xml_text(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    let raw = xml[start..end].trim();
    Some(
        raw.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sts_answers_parse() {
        let ok = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
            <AccessKeyId>ASIAWEB</AccessKeyId><SecretAccessKey>s/e+c&amp;r</SecretAccessKey>\
            <SessionToken>tok</SessionToken><Expiration>2030-01-01T00:00:00Z</Expiration>\
            </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
        assert_eq!(xml_text(ok, "AccessKeyId").as_deref(), Some("ASIAWEB"));
        assert_eq!(xml_text(ok, "SecretAccessKey").as_deref(), Some("s/e+c&r"));
        assert_eq!(xml_text(ok, "Missing"), None);
        let error = "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>\
            <Message>Token expired</Message></Error></ErrorResponse>";
        assert_eq!(
            xml_text(error, "Code").as_deref(),
            Some("InvalidIdentityToken")
        );
    }

    #[test]
    fn answers_are_cached_until_their_expiry() {
        let cache = TokenCache::default();
        let mut calls = 0;
        let far = crate::session::iso_from_ms(now_ms() + 3_600_000);
        for _ in 0..2 {
            let text = cached_or(&cache, "k", || {
                calls += 1;
                Ok(("answer".into(), Some(far.clone())))
            })
            .unwrap();
            assert_eq!(text, "answer");
        }
        assert_eq!(calls, 1);
        // Without an expiry nothing is kept.
        let mut calls = 0;
        for _ in 0..2 {
            cached_or(&cache, "k2", || {
                calls += 1;
                Ok(("answer".into(), None))
            })
            .unwrap();
        }
        assert_eq!(calls, 2);
    }
}
