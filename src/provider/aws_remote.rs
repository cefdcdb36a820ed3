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
//! run on the request's own HTTP agent, so its bounds and abort apply. A failure is a
//! `RemoteCredentialError`: the SDK's `NO_CREDENTIALS`, the source, and what went wrong.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::sigv4::{self, AwsCredentials, SigningRequest, SigningScope, uri_encode};
use super::token_cache::TokenCache;
use crate::config::aws::{self, AssumeRole, NO_CREDENTIALS, WebIdentity};
use crate::time::now_ms;

/// Answers larger than this are not read further.
const MAX_ANSWER: u64 = 64 * 1024;

/// Where credentials were being fetched from when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteSource {
    Container,
    AssumeRole,
    WebIdentity,
}

/// A credential fetch that failed. `Display`: `<NO_CREDENTIALS>: <origin>: <problem>`, e.g.
/// `…: web identity: InvalidIdentityToken: Token expired`.
#[derive(Debug)]
pub struct RemoteCredentialError {
    pub origin: RemoteSource,
    pub problem: RemoteProblem,
}

/// What went wrong fetching remote credentials.
#[derive(Debug)]
pub enum RemoteProblem {
    /// No answer (connection, TLS, timeout); shown as the provider's network error text.
    Network(ureq::Error),
    /// The answer's body could not be read.
    ReadBody(std::io::Error),
    /// A non-2xx answer: the status and the (trimmed) body.
    Status { status: u16, body: String },
    /// A non-2xx STS answer with its own `<Code>` and `<Message>`.
    Sts { code: String, message: String },
    /// `AWS_WEB_IDENTITY_TOKEN_FILE` could not be read.
    TokenFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The container endpoint's JSON has no keys.
    NoKeys,
    /// The STS answer has no `<Credentials>`.
    NoStsCredentials,
}

impl std::fmt::Display for RemoteSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RemoteSource::Container => "container credentials",
            RemoteSource::AssumeRole => "assume role",
            RemoteSource::WebIdentity => "web identity",
        })
    }
}

impl std::fmt::Display for RemoteCredentialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{NO_CREDENTIALS}: {}: {}", self.origin, self.problem)
    }
}

impl std::error::Error for RemoteCredentialError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.problem)
    }
}

impl std::fmt::Display for RemoteProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteProblem::Network(e) => {
                f.write_str(&super::error_text::network_error_message(e, false))
            }
            RemoteProblem::ReadBody(e) => e.fmt(f),
            RemoteProblem::Status { status, body } => write!(f, "{status} {body}"),
            RemoteProblem::Sts { code, message } => write!(f, "{code}: {message}"),
            RemoteProblem::TokenFile { path, source } => {
                write!(f, "{}: {source}", path.display())
            }
            RemoteProblem::NoKeys => f.write_str("no AccessKeyId/SecretAccessKey"),
            RemoteProblem::NoStsCredentials => f.write_str("no Credentials in the STS answer"),
        }
    }
}

impl std::error::Error for RemoteProblem {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RemoteProblem::Network(e) => Some(e),
            RemoteProblem::ReadBody(e) | RemoteProblem::TokenFile { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

/// Credentials from the container endpoint.
pub fn container_credentials(
    agent: &ureq::Agent,
    url: &str,
    authorization: Option<&str>,
    cache: &TokenCache,
) -> Result<AwsCredentials, RemoteCredentialError> {
    let failed = |problem| RemoteCredentialError {
        origin: RemoteSource::Container,
        problem,
    };
    let text = cached_or(cache, &format!("aws-container:{url}"), || {
        let mut get = crate::net::get(agent, url);
        if let Some(token) = authorization {
            get = get.header("authorization", token);
        }
        let text = answer(get.call())?;
        let expires = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|json| json["Expiration"].as_str().map(str::to_string));
        Ok((text, expires))
    })
    .map_err(failed)?;
    aws::credentials_from_json(&text)
        .map(redacted)
        .ok_or_else(|| failed(RemoteProblem::NoKeys))
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

/// STS's own explanation (`<Code>: <Message>`) when a refusal has one.
fn sts_error(problem: RemoteProblem) -> RemoteProblem {
    let RemoteProblem::Status { body, .. } = &problem else {
        return problem;
    };
    match (xml_text(body, "Code"), xml_text(body, "Message")) {
        (Some(code), Some(message)) => RemoteProblem::Sts { code, message },
        _ => problem,
    }
}

/// Credentials for a profile's role, from STS `AssumeRole` signed with the source keys.
pub fn assumed_role_credentials(
    agent: &ureq::Agent,
    role: &AssumeRole,
    region: &str,
    cache: &TokenCache,
) -> Result<AwsCredentials, RemoteCredentialError> {
    let url = sts_url(role.sts_endpoint.as_ref(), region);
    let key = format!(
        "aws-assume-role:{}:{}@{url}",
        role.role_arn, role.source.access_key_id
    );
    sts_exchange(cache, &key, RemoteSource::AssumeRole, || {
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
) -> Result<AwsCredentials, RemoteCredentialError> {
    let url = sts_url(identity.sts_endpoint.as_ref(), region);
    let key = format!("aws-web-identity:{}@{url}", identity.role_arn);
    sts_exchange(cache, &key, RemoteSource::WebIdentity, || {
        let token = std::fs::read_to_string(&identity.token_file).map_err(|source| {
            RemoteProblem::TokenFile {
                path: identity.token_file.clone(),
                source,
            }
        })?;
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
/// until the credentials expire). A failure is reported for `origin`.
fn sts_exchange(
    cache: &TokenCache,
    key: &str,
    origin: RemoteSource,
    send: impl FnOnce() -> Result<Result<ureq::http::Response<ureq::Body>, ureq::Error>, RemoteProblem>,
) -> Result<AwsCredentials, RemoteCredentialError> {
    let failed = |problem| RemoteCredentialError { origin, problem };
    let text = cached_or(cache, key, || {
        let text = answer(send()?).map_err(sts_error)?;
        let expires = xml_text(&text, "Expiration");
        Ok((text, expires))
    })
    .map_err(failed)?;
    sts_credentials(&text)
        .map(redacted)
        .ok_or_else(|| failed(RemoteProblem::NoStsCredentials))
}

/// The cached answer for `key`, else `fetch`'s (cached until its ISO-8601 expiry, if any).
fn cached_or(
    cache: &TokenCache,
    key: &str,
    fetch: impl FnOnce() -> Result<(String, Option<String>), RemoteProblem>,
) -> Result<String, RemoteProblem> {
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

/// The body of a 2xx answer; otherwise the status and body (or the network error).
fn answer(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<String, RemoteProblem> {
    let response = result.map_err(RemoteProblem::Network)?;
    let status = response.status().as_u16();
    let mut text = String::new();
    response
        .into_body()
        .into_reader()
        .take(MAX_ANSWER)
        .read_to_string(&mut text)
        .map_err(RemoteProblem::ReadBody)?;
    if (200..300).contains(&status) {
        Ok(text)
    } else {
        Err(RemoteProblem::Status {
            status,
            body: text.trim().to_string(),
        })
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
