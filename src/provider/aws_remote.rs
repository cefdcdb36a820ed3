//! AWS credentials that come over the network, as the SDK's default chain gets them after the
//! environment and the shared files:
//!
//! - web identity (EKS IRSA, other OIDC federations): the token in `AWS_WEB_IDENTITY_TOKEN_FILE`
//!   is exchanged at STS (`AssumeRoleWithWebIdentity`, unsigned, regional endpoint or
//!   `AWS_ENDPOINT_URL_STS`) for temporary credentials;
//! - a profile's `role_arn`: STS `AssumeRole`, signed (SigV4, service `sts`) with the source
//!   profile's keys;
//! - the container credentials endpoint (ECS task roles, EKS Pod Identity): a GET with the
//!   optional authorization token, answering JSON.
//!
//! Both are cached until five minutes before their `Expiration` (`token_cache.rs`; the cached
//! text is the endpoint's answer, keyed by the endpoint and role, never by a secret). The calls
//! run on the request's own HTTP agent, so its bounds and abort apply.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::sigv4::{self, AwsCredentials, SigningRequest, SigningScope, uri_encode};
use super::token_cache::TokenCache;
use crate::config::aws::{self, AssumeRole, NO_CREDENTIALS, WebIdentity};
use crate::time::now_ms;

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
        let mut get = crate::net::get(agent, url);
        if let Some(token) = authorization {
            get = get.header("authorization", token);
        }
        let text = answer(get.call()).map_err(failed)?;
        let expires = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|json| json["Expiration"].as_str().map(str::to_string));
        Ok((text, expires))
    })?;
    aws::credentials_from_json(&text)
        .map(redacted)
        .ok_or_else(|| failed("no AccessKeyId/SecretAccessKey".into()))
}

/// Credentials fetched at request time join the redaction set as soon as they are known.
fn redacted(credentials: AwsCredentials) -> AwsCredentials {
    crate::redact::add_secret(&credentials.secret_access_key);
    if let Some(token) = &credentials.session_token {
        crate::redact::add_secret(token);
    }
    credentials
}

/// The regional STS endpoint, unless `AWS_ENDPOINT_URL_STS` named one.
fn sts_url(configured: Option<&String>, region: &str) -> String {
    configured.cloned().unwrap_or_else(|| {
        let suffix = if region.starts_with("cn-") { ".cn" } else { "" };
        format!("https://sts.{region}.amazonaws.com{suffix}")
    })
}

/// `<Credentials>` of an STS answer.
fn sts_credentials(text: &str) -> Option<AwsCredentials> {
    Some(AwsCredentials {
        access_key_id: xml_text(text, "AccessKeyId")?,
        secret_access_key: xml_text(text, "SecretAccessKey")?,
        session_token: xml_text(text, "SessionToken"),
    })
}

/// STS's own explanation (`<Code>: <Message>`) when the answer has one.
fn sts_error(detail: String) -> String {
    match (xml_text(&detail, "Code"), xml_text(&detail, "Message")) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        _ => detail,
    }
}

/// Credentials for a profile's role, from STS `AssumeRole` signed with the source keys.
pub fn assumed_role_credentials(
    agent: &ureq::Agent,
    role: &AssumeRole,
    region: &str,
    cache: &TokenCache,
) -> Result<AwsCredentials, String> {
    let failed = |detail: String| format!("{NO_CREDENTIALS}: assume role: {detail}");
    let url = sts_url(role.sts_endpoint.as_ref(), region);
    let key = format!(
        "aws-assume-role:{}:{}@{url}",
        role.role_arn, role.source.access_key_id
    );
    sts_exchange(cache, &key, &failed, || {
        let mut form = format!(
            "Action=AssumeRole&Version=2011-06-15&RoleArn={}&RoleSessionName={}",
            uri_encode(role.role_arn.as_bytes()),
            uri_encode(role.session_name.as_bytes())
        );
        if let Some(external_id) = &role.external_id {
            form.push_str(&format!(
                "&ExternalId={}",
                uri_encode(external_id.as_bytes())
            ));
        }
        let after_scheme = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
        let (host, path) = match after_scheme.find('/') {
            Some(at) => (&after_scheme[..at], &after_scheme[at..]),
            None => (after_scheme, "/"),
        };
        let headers = vec![(
            "content-type".to_string(),
            "application/x-www-form-urlencoded".to_string(),
        )];
        let signed = sigv4::sign(
            &SigningRequest {
                method: "POST",
                host,
                path,
                query: "",
                headers: &headers,
                body: form.as_bytes(),
            },
            &role.source,
            &SigningScope {
                region,
                service: "sts",
                amz_date: &sigv4::amz_date(now_ms()),
                content_sha256_header: true,
            },
        );
        let mut post = crate::net::post(agent, &url);
        for (name, value) in headers.iter().chain(signed.iter()) {
            post = post.header(name.as_str(), value.as_str());
        }
        Ok(post.send(form.as_bytes()))
    })
}

/// Credentials for the role, from STS in exchange for the web identity token.
pub fn web_identity_credentials(
    agent: &ureq::Agent,
    identity: &WebIdentity,
    region: &str,
    cache: &TokenCache,
) -> Result<AwsCredentials, String> {
    let failed = |detail: String| format!("{NO_CREDENTIALS}: web identity: {detail}");
    let url = sts_url(identity.sts_endpoint.as_ref(), region);
    let key = format!("aws-web-identity:{}@{url}", identity.role_arn);
    sts_exchange(cache, &key, &failed, || {
        let token = std::fs::read_to_string(&identity.token_file)
            .map_err(|e| failed(format!("{}: {e}", identity.token_file.display())))?;
        let form = format!(
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn={}&RoleSessionName={}&WebIdentityToken={}",
            uri_encode(identity.role_arn.as_bytes()),
            uri_encode(identity.session_name.as_bytes()),
            uri_encode(token.as_bytes())
        );
        let post = crate::net::post(agent, &url)
            .header("content-type", "application/x-www-form-urlencoded");
        Ok(post.send(form.as_bytes()))
    })
}

/// Credentials from an STS answer: the cached one for `key`, else the one `send` gets (cached
/// until the credentials expire). `failed` words a failure for the caller's credential source.
fn sts_exchange(
    cache: &TokenCache,
    key: &str,
    failed: &dyn Fn(String) -> String,
    send: impl FnOnce() -> Result<Result<ureq::http::Response<ureq::Body>, ureq::Error>, String>,
) -> Result<AwsCredentials, String> {
    let text = cached_or(cache, key, || {
        let text = answer(send()?).map_err(|d| failed(sts_error(d)))?;
        let expires = xml_text(&text, "Expiration");
        Ok((text, expires))
    })?;
    sts_credentials(&text)
        .map(redacted)
        .ok_or_else(|| failed("no Credentials in the STS answer".into()))
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
        .and_then(crate::time::ms_from_iso)
        .map(|at| Duration::from_millis(at.saturating_sub(now_ms()).max(0) as u64))
        .unwrap_or(Duration::ZERO);
    cache.put(key, text.clone(), lifetime, Instant::now());
    Ok(text)
}

/// The body of a 2xx answer; otherwise `<status> <body>` (or the network error's text).
fn answer(result: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<String, String> {
    let response = result.map_err(|e| super::error_text::network_error_message(&e, false))?;
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
        let far = crate::time::iso_from_ms(now_ms() + 3_600_000);
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
