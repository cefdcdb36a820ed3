//! AWS credentials and region for Bedrock, resolved as pi's Bedrock provider (the AWS SDK's
//! default chain) resolves them:
//!
//! - auth: `AWS_BEARER_TOKEN_BEDROCK` (a Bedrock API key, sent as a bearer token) unless
//!   `AWS_BEDROCK_SKIP_AUTH=1`; with `AWS_BEDROCK_SKIP_AUTH=1`, dummy keys (for proxies that do
//!   their own auth); else SigV4 with, in order: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`
//!   (+ `AWS_SESSION_TOKEN`) — skipped when `AWS_PROFILE` is set, as the SDK skips them — then the
//!   profile (`AWS_PROFILE`, default `default`) from the shared files `~/.aws/credentials`
//!   (`AWS_SHARED_CREDENTIALS_FILE`) and `~/.aws/config` (`AWS_CONFIG_FILE`, sections
//!   `[profile name]`), static keys or `credential_process`.
//!   Then a web identity token (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, EKS IRSA) or the
//!   container credentials endpoint (ECS task roles, EKS Pod Identity), exchanged/fetched by the
//!   provider at request time (`provider/aws_remote.rs`).
//! - region: `AWS_REGION`, `AWS_DEFAULT_REGION`, else the region of a standard
//!   `bedrock-runtime.<region>.amazonaws.com` base URL when no profile is set, else `us-east-1`
//!   without a profile, else the profile's `region`.
//!
//! A profile's `role_arn` (with `source_profile` or `credential_source = Environment`) is assumed
//! through STS at request time. Not supported (an error names what is missing): SSO profiles, MFA
//! roles, chains of roles, EC2 instance metadata credentials.
//!
//! Input: an `Env` snapshot and the shared files. Output: values or an `AwsCredentialError`, whose
//! text is the SDK's (`Could not load credentials from any providers`, with pi-rs's reason after a
//! colon). The only blocking call is `credential_process`, bounded by `auth::COMMAND_TIMEOUT`.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;

use super::auth::{Env, run_command};

/// Access key, secret and, for temporary credentials, the session token.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for AwsCredentials {
    // The secret parts never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// How a Bedrock request authenticates.
#[derive(Clone, Debug, PartialEq)]
pub enum BedrockAuth {
    Bearer(String),
    SigV4(AwsCredentials),
    /// SigV4 with credentials fetched from the container credentials endpoint (ECS task roles,
    /// EKS Pod Identity) at request time.
    Container {
        url: String,
        authorization: Option<String>,
    },
    /// SigV4 with credentials from STS `AssumeRoleWithWebIdentity` (EKS IRSA and other OIDC
    /// federations) at request time.
    WebIdentity(WebIdentity),
    /// SigV4 with credentials from STS `AssumeRole`, signed with the source profile's keys.
    AssumeRole(AssumeRole),
}

/// A profile's `role_arn` with its source credentials.
#[derive(Clone, Debug, PartialEq)]
pub struct AssumeRole {
    pub role_arn: String,
    pub session_name: String,
    pub external_id: Option<String>,
    pub source: AwsCredentials,
    /// `AWS_ENDPOINT_URL_STS`, else the regional STS endpoint.
    pub sts_endpoint: Option<String>,
}

/// `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` (+ `AWS_ROLE_SESSION_NAME`).
#[derive(Clone, Debug, PartialEq)]
pub struct WebIdentity {
    pub role_arn: String,
    pub session_name: String,
    pub token_file: PathBuf,
    /// `AWS_ENDPOINT_URL_STS`, else the regional STS endpoint.
    pub sts_endpoint: Option<String>,
}

/// What the SDK reports when the chain finds nothing.
pub const NO_CREDENTIALS: &str = "Could not load credentials from any providers";

/// Why the credential chain (or the region) could not be resolved. `Display` is the text the
/// request fails with: `NO_CREDENTIALS`, alone or followed by `: <reason>`.
#[derive(Debug)]
pub enum AwsCredentialError {
    /// Nothing in the chain.
    NoCredentials,
    /// The profile uses a kind pi-rs does not support (`what`: "an MFA role (mfa_serial)", …).
    UnsupportedProfile {
        profile: String,
        what: String,
    },
    SourceProfileWithoutKeys(String),
    EnvironmentSourceWithoutKeys,
    /// `AWS_CONTAINER_CREDENTIALS_FULL_URI` names a remote plain-http host.
    ContainerHostNotAllowed,
    ContainerTokenFile(std::io::Error),
    CredentialProcessFailed,
    CredentialProcessOutput,
    /// A profile is set and has no `region`.
    NoRegion,
}

impl std::fmt::Display for AwsCredentialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AwsCredentialError::NoCredentials => f.write_str(NO_CREDENTIALS),
            AwsCredentialError::UnsupportedProfile { profile, what } => write!(
                f,
                "{NO_CREDENTIALS}: profile \"{profile}\" uses {what}, which pi-rs does not support; export AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN (e.g. from `aws configure export-credentials`)"
            ),
            AwsCredentialError::SourceProfileWithoutKeys(source) => {
                write!(
                    f,
                    "{NO_CREDENTIALS}: source_profile \"{source}\" has no keys"
                )
            }
            AwsCredentialError::EnvironmentSourceWithoutKeys => write!(
                f,
                "{NO_CREDENTIALS}: credential_source Environment without keys"
            ),
            AwsCredentialError::ContainerHostNotAllowed => write!(
                f,
                "{NO_CREDENTIALS}: AWS_CONTAINER_CREDENTIALS_FULL_URI must be https or a loopback/container host"
            ),
            AwsCredentialError::ContainerTokenFile(e) => write!(
                f,
                "{NO_CREDENTIALS}: cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE: {e}"
            ),
            AwsCredentialError::CredentialProcessFailed => {
                write!(f, "{NO_CREDENTIALS}: credential_process failed")
            }
            AwsCredentialError::CredentialProcessOutput => write!(
                f,
                "{NO_CREDENTIALS}: credential_process printed no AccessKeyId/SecretAccessKey JSON"
            ),
            AwsCredentialError::NoRegion => f.write_str("Region is missing"),
        }
    }
}

impl std::error::Error for AwsCredentialError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AwsCredentialError::ContainerTokenFile(e) => Some(e),
            _ => None,
        }
    }
}

pub fn bedrock_auth(env: &Env) -> Result<BedrockAuth, AwsCredentialError> {
    let skip_auth = env.get("AWS_BEDROCK_SKIP_AUTH") == Some("1");
    if !skip_auth && let Some(token) = env.get("AWS_BEARER_TOKEN_BEDROCK") {
        return Ok(BedrockAuth::Bearer(token.to_string()));
    }
    if skip_auth {
        return Ok(BedrockAuth::SigV4(AwsCredentials {
            access_key_id: "dummy-access-key".into(),
            secret_access_key: "dummy-secret-key".into(),
            session_token: None,
        }));
    }
    if let Some(role) = profile_role(env)? {
        return Ok(BedrockAuth::AssumeRole(role));
    }
    match credentials(env) {
        // The SDK's order after the profile: web identity token file, then the container.
        Err(AwsCredentialError::NoCredentials) => {
            if let (Some(token_file), Some(role_arn)) = (
                env.get("AWS_WEB_IDENTITY_TOKEN_FILE"),
                env.get("AWS_ROLE_ARN"),
            ) {
                return Ok(BedrockAuth::WebIdentity(WebIdentity {
                    role_arn: role_arn.into(),
                    session_name: env
                        .get("AWS_ROLE_SESSION_NAME")
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("aws-sdk-js-session-{}", crate::time::now_ms())),
                    token_file: PathBuf::from(token_file),
                    sts_endpoint: env.get("AWS_ENDPOINT_URL_STS").map(str::to_string),
                }));
            }
            container_endpoint(env).unwrap_or(Err(AwsCredentialError::NoCredentials))
        }
        other => other.map(BedrockAuth::SigV4),
    }
}

/// The active profile's `role_arn`, when the chain gets that far (environment keys without
/// `AWS_PROFILE` win), with the keys of its `source_profile` or, for
/// `credential_source = Environment`, of the environment.
fn profile_role(env: &Env) -> Result<Option<AssumeRole>, AwsCredentialError> {
    let env_keys =
        env.get("AWS_ACCESS_KEY_ID").is_some() && env.get("AWS_SECRET_ACCESS_KEY").is_some();
    if env.get("AWS_PROFILE").is_none() && env_keys {
        return Ok(None);
    }
    let name = profile_name(env);
    let profile = profile(env, &name);
    let Some(role_arn) = profile.get("role_arn") else {
        return Ok(None);
    };
    let unsupported = |what: &str| {
        Err(AwsCredentialError::UnsupportedProfile {
            profile: name.clone(),
            what: what.to_string(),
        })
    };
    if profile.contains_key("mfa_serial") {
        return unsupported("an MFA role (mfa_serial)");
    }
    let source = match (
        profile.get("source_profile"),
        profile.get("credential_source"),
    ) {
        (Some(source), _) => {
            let source_profile = self::profile(env, source);
            match (
                source_profile.get("aws_access_key_id"),
                source_profile.get("aws_secret_access_key"),
                source_profile.get("credential_process"),
            ) {
                _ if source_profile.contains_key("role_arn") && source != &name => {
                    return unsupported("a chain of roles (source_profile with its own role_arn)");
                }
                (Some(id), Some(secret), _) => AwsCredentials {
                    access_key_id: id.clone(),
                    secret_access_key: secret.clone(),
                    session_token: source_profile.get("aws_session_token").cloned(),
                },
                (_, _, Some(command)) => credential_process(command)?,
                _ => {
                    return Err(AwsCredentialError::SourceProfileWithoutKeys(source.clone()));
                }
            }
        }
        (None, Some(source)) if source == "Environment" => match (
            env.get("AWS_ACCESS_KEY_ID"),
            env.get("AWS_SECRET_ACCESS_KEY"),
        ) {
            (Some(id), Some(secret)) => AwsCredentials {
                access_key_id: id.into(),
                secret_access_key: secret.into(),
                session_token: env.get("AWS_SESSION_TOKEN").map(str::to_string),
            },
            _ => return Err(AwsCredentialError::EnvironmentSourceWithoutKeys),
        },
        (None, Some(other)) => return unsupported(&format!("credential_source {other}")),
        (None, None) => return unsupported("role_arn without source_profile"),
    };
    Ok(Some(AssumeRole {
        role_arn: role_arn.clone(),
        session_name: profile
            .get("role_session_name")
            .cloned()
            .unwrap_or_else(|| format!("aws-sdk-js-{}", crate::time::now_ms())),
        external_id: profile.get("external_id").cloned(),
        source,
        sts_endpoint: env.get("AWS_ENDPOINT_URL_STS").map(str::to_string),
    }))
}

/// The container credentials endpoint, as the SDK finds it: `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`
/// on ECS's link-local host, else `AWS_CONTAINER_CREDENTIALS_FULL_URI` (loopback, the ECS/EKS
/// link-local hosts, or https); the authorization from `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`
/// or `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
fn container_endpoint(env: &Env) -> Option<Result<BedrockAuth, AwsCredentialError>> {
    let url = if let Some(relative) = env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
        format!("http://169.254.170.2{relative}")
    } else {
        let full = env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")?;
        let host = full
            .split_once("://")
            .map_or("", |(_, rest)| rest.split(['/', '?']).next().unwrap_or(""));
        let host = host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        let allowed = full.starts_with("https://")
            || [
                "127.0.0.1",
                "localhost",
                "[::1]",
                "169.254.170.2",
                "169.254.170.23",
                "[fd00:ec2::23]",
            ]
            .contains(&host)
            || host.starts_with("127.");
        if !allowed {
            return Some(Err(AwsCredentialError::ContainerHostNotAllowed));
        }
        full.to_string()
    };
    let authorization = match env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(token) => Some(token.trim().to_string()),
            Err(e) => return Some(Err(AwsCredentialError::ContainerTokenFile(e))),
        },
        None => env
            .get("AWS_CONTAINER_AUTHORIZATION_TOKEN")
            .map(str::to_string),
    };
    Some(Ok(BedrockAuth::Container { url, authorization }))
}

/// The JSON the container endpoint (and `credential_process`) answers with.
pub fn credentials_from_json(text: &str) -> Option<AwsCredentials> {
    let json: Value = serde_json::from_str(text).ok()?;
    let field = |name: &str| json.get(name).and_then(Value::as_str).map(str::to_string);
    Some(AwsCredentials {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        // credential_process says SessionToken; the container endpoint says Token.
        session_token: field("SessionToken").or_else(|| field("Token")),
    })
}

/// The SigV4 credential chain (environment, then the profile).
pub fn credentials(env: &Env) -> Result<AwsCredentials, AwsCredentialError> {
    if env.get("AWS_PROFILE").is_none()
        && let (Some(id), Some(secret)) = (
            env.get("AWS_ACCESS_KEY_ID"),
            env.get("AWS_SECRET_ACCESS_KEY"),
        )
    {
        return Ok(AwsCredentials {
            access_key_id: id.into(),
            secret_access_key: secret.into(),
            session_token: env.get("AWS_SESSION_TOKEN").map(str::to_string),
        });
    }
    let name = profile_name(env);
    let profile = profile(env, &name);
    if let (Some(id), Some(secret)) = (
        profile.get("aws_access_key_id"),
        profile.get("aws_secret_access_key"),
    ) {
        return Ok(AwsCredentials {
            access_key_id: id.clone(),
            secret_access_key: secret.clone(),
            session_token: profile.get("aws_session_token").cloned(),
        });
    }
    if let Some(command) = profile.get("credential_process") {
        return credential_process(command);
    }
    for (key, what) in [
        ("sso_session", "SSO"),
        ("sso_start_url", "SSO"),
        ("web_identity_token_file", "web identity"),
    ] {
        if profile.contains_key(key) {
            return Err(AwsCredentialError::UnsupportedProfile {
                profile: name,
                what: format!("{what} credentials"),
            });
        }
    }
    Err(AwsCredentialError::NoCredentials)
}

/// The region the request is signed for and sent to. `endpoint_region` is the region of a
/// standard Bedrock runtime base URL.
pub fn region(env: &Env, endpoint_region: Option<&str>) -> Result<String, AwsCredentialError> {
    if let Some(region) = configured_region(env) {
        return Ok(region.to_string());
    }
    let has_profile = env.get("AWS_PROFILE").is_some();
    if !has_profile {
        return Ok(endpoint_region.unwrap_or("us-east-1").to_string());
    }
    profile(env, &profile_name(env))
        .get("region")
        .cloned()
        .ok_or(AwsCredentialError::NoRegion)
}

/// `AWS_REGION`, else `AWS_DEFAULT_REGION`.
pub fn configured_region(env: &Env) -> Option<&str> {
    env.get("AWS_REGION")
        .or_else(|| env.get("AWS_DEFAULT_REGION"))
}

fn profile_name(env: &Env) -> String {
    env.get("AWS_PROFILE").unwrap_or("default").to_string()
}

/// The profile's keys from both shared files; the credentials file wins over the config file.
fn profile(env: &Env, name: &str) -> HashMap<String, String> {
    let aws_dir = env.home().join(".aws");
    let file = |var: &str, default: &str| -> PathBuf {
        env.get(var)
            .map(PathBuf::from)
            .unwrap_or_else(|| aws_dir.join(default))
    };
    let read = |path: PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    let config_section = if name == "default" {
        "default".to_string()
    } else {
        format!("profile {name}")
    };
    let mut merged = ini_section(&read(file("AWS_CONFIG_FILE", "config")), &config_section);
    if name == "default" && merged.is_empty() {
        merged = ini_section(&read(file("AWS_CONFIG_FILE", "config")), "profile default");
    }
    merged.extend(ini_section(
        &read(file("AWS_SHARED_CREDENTIALS_FILE", "credentials")),
        name,
    ));
    merged
}

/// `key = value` lines of one `[section]` (comments `#`/`;`, keys lower-cased, values trimmed).
fn ini_section(text: &str, wanted: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
            inside = section == wanted;
            continue;
        }
        if inside && let Some((key, value)) = line.split_once('=') {
            out.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    out
}

/// Runs the profile's `credential_process` and reads its JSON (`Version` 1).
fn credential_process(command: &str) -> Result<AwsCredentials, AwsCredentialError> {
    let output = run_command(command).ok_or(AwsCredentialError::CredentialProcessFailed)?;
    credentials_from_json(&output).ok_or(AwsCredentialError::CredentialProcessOutput)
}

/// Every secret the shared files hold for the active profile (for redaction).
pub fn profile_secrets(env: &Env) -> Vec<String> {
    let profile = profile(env, &profile_name(env));
    ["aws_secret_access_key", "aws_session_token"]
        .iter()
        .filter_map(|k| profile.get(*k).cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home_with(files: &[(&str, &str)]) -> (PathBuf, Vec<(String, String)>) {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pi-rs-aws-{}-{n}", std::process::id()));
        std::fs::create_dir_all(dir.join(".aws")).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(".aws").join(name), text).unwrap();
        }
        let home = vec![("HOME".to_string(), dir.display().to_string())];
        (dir, home)
    }

    fn env(base: &[(String, String)], extra: &[(&str, &str)]) -> Env {
        Env::from_pairs(
            base.iter()
                .cloned()
                .chain(extra.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
        )
    }

    const CREDENTIALS: &str = "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = default-secret\n\n[work]\n# a comment\naws_access_key_id=AKIDWORK\naws_secret_access_key=work-secret\naws_session_token = work-token\n";
    const CONFIG: &str = "[default]\nregion = eu-west-1\n\n[profile work]\nregion = ap-southeast-2\n\n[profile proc]\ncredential_process = printf '{\"Version\":1,\"AccessKeyId\":\"AKIDPROC\",\"SecretAccessKey\":\"proc-secret\",\"SessionToken\":\"proc-token\"}'\n\n[profile sso]\nsso_session = corp\n";

    #[test]
    fn environment_keys_then_profiles() {
        let (dir, home) = home_with(&[("credentials", CREDENTIALS), ("config", CONFIG)]);
        let keys = [
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
            ("AWS_SESSION_TOKEN", "env-token"),
        ];
        let c = credentials(&env(&home, &keys)).unwrap();
        assert_eq!(
            (c.access_key_id.as_str(), c.session_token.as_deref()),
            ("AKIDENV", Some("env-token"))
        );
        // AWS_PROFILE makes the SDK skip the environment keys.
        let mut with_profile = keys.to_vec();
        with_profile.push(("AWS_PROFILE", "work"));
        let c = credentials(&env(&home, &with_profile)).unwrap();
        assert_eq!(c.access_key_id, "AKIDWORK");
        assert_eq!(c.secret_access_key, "work-secret");
        assert_eq!(c.session_token.as_deref(), Some("work-token"));
        // No environment keys: the default profile.
        let c = credentials(&env(&home, &[])).unwrap();
        assert_eq!(c.access_key_id, "AKIDDEFAULT");
        assert_eq!(c.session_token, None);
        // credential_process.
        let c = credentials(&env(&home, &[("AWS_PROFILE", "proc")])).unwrap();
        assert_eq!(c.access_key_id, "AKIDPROC");
        assert_eq!(c.session_token.as_deref(), Some("proc-token"));
        // Unsupported kinds and missing profiles say so.
        let err = credentials(&env(&home, &[("AWS_PROFILE", "sso")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("SSO"), "{err}");
        assert_eq!(
            credentials(&env(&home, &[("AWS_PROFILE", "nope")]))
                .unwrap_err()
                .to_string(),
            NO_CREDENTIALS
        );
        assert_eq!(
            profile_secrets(&env(&home, &[("AWS_PROFILE", "work")])),
            vec!["work-secret".to_string(), "work-token".to_string()]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn profile_roles_name_their_source() {
        let credentials =
            "[base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = base-secret\n";
        let config = "[profile admin]\nrole_arn = arn:aws:iam::1:role/admin\nsource_profile = base\nrole_session_name = me\nexternal_id = ext\n\n[profile mfa]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = base\nmfa_serial = arn:aws:iam::1:mfa/me\n\n[profile envsource]\nrole_arn = arn:aws:iam::1:role/y\ncredential_source = Environment\n";
        let (dir, home) = home_with(&[("credentials", credentials), ("config", config)]);
        match bedrock_auth(&env(&home, &[("AWS_PROFILE", "admin")])) {
            Ok(BedrockAuth::AssumeRole(role)) => {
                assert_eq!(role.role_arn, "arn:aws:iam::1:role/admin");
                assert_eq!(role.session_name, "me");
                assert_eq!(role.external_id.as_deref(), Some("ext"));
                assert_eq!(role.source.access_key_id, "AKIDBASE");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            bedrock_auth(&env(&home, &[("AWS_PROFILE", "mfa")]))
                .unwrap_err()
                .to_string()
                .contains("MFA")
        );
        let envsource = [
            ("AWS_PROFILE", "envsource"),
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
        ];
        match bedrock_auth(&env(&home, &envsource)) {
            Ok(BedrockAuth::AssumeRole(role)) => assert_eq!(role.source.access_key_id, "AKIDENV"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bearer_token_and_skip_auth() {
        let (dir, home) = home_with(&[]);
        let bearer = [("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key")];
        assert_eq!(
            bedrock_auth(&env(&home, &bearer)).map_err(|e| e.to_string()),
            Ok(BedrockAuth::Bearer("bedrock-api-key".into()))
        );
        let skip = [
            ("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key"),
            ("AWS_BEDROCK_SKIP_AUTH", "1"),
        ];
        match bedrock_auth(&env(&home, &skip)) {
            Ok(BedrockAuth::SigV4(c)) => assert_eq!(c.access_key_id, "dummy-access-key"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            bedrock_auth(&env(&home, &[])).map_err(|e| e.to_string()),
            Err(NO_CREDENTIALS.to_string())
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn container_credentials_endpoint() {
        let (dir, home) = home_with(&[]);
        let relative = [(
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "/v2/credentials/abc",
        )];
        assert_eq!(
            bedrock_auth(&env(&home, &relative)).map_err(|e| e.to_string()),
            Ok(BedrockAuth::Container {
                url: "http://169.254.170.2/v2/credentials/abc".into(),
                authorization: None
            })
        );
        std::fs::write(dir.join("token"), "eks-token\n").unwrap();
        let token_file = dir.join("token").display().to_string();
        let full = [
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://169.254.170.23/v1/credentials",
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                token_file.as_str(),
            ),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored"),
        ];
        assert_eq!(
            bedrock_auth(&env(&home, &full)).map_err(|e| e.to_string()),
            Ok(BedrockAuth::Container {
                url: "http://169.254.170.23/v1/credentials".into(),
                authorization: Some("eks-token".into())
            })
        );
        let remote = [(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "http://example.com/creds",
        )];
        assert!(
            bedrock_auth(&env(&home, &remote))
                .unwrap_err()
                .to_string()
                .contains("loopback")
        );
        // Static keys come first in the chain.
        let both = [
            ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/x"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ];
        assert!(matches!(
            bedrock_auth(&env(&home, &both)),
            Ok(BedrockAuth::SigV4(_))
        ));
        let web = [
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
            ("AWS_ROLE_SESSION_NAME", "s"),
            ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/x"),
        ];
        assert_eq!(
            bedrock_auth(&env(&home, &web)).map_err(|e| e.to_string()),
            Ok(BedrockAuth::WebIdentity(WebIdentity {
                role_arn: "arn:aws:iam::1:role/r".into(),
                session_name: "s".into(),
                token_file: "/var/run/token".into(),
                sts_endpoint: None
            }))
        );
        assert_eq!(
            credentials_from_json(r#"{"AccessKeyId":"A","SecretAccessKey":"S","Token":"T","Expiration":"2030-01-01T00:00:00Z"}"#)
                .and_then(|c| c.session_token),
            Some("T".into())
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn region_resolution_follows_pi() {
        let (dir, home) = home_with(&[("config", CONFIG)]);
        let r =
            |extra: &[(&str, &str)], endpoint: Option<&str>| region(&env(&home, extra), endpoint);
        assert_eq!(
            r(&[("AWS_REGION", "eu-north-1")], Some("us-east-1")).unwrap(),
            "eu-north-1"
        );
        assert_eq!(
            r(&[("AWS_DEFAULT_REGION", "sa-east-1")], None).unwrap(),
            "sa-east-1"
        );
        assert_eq!(r(&[], Some("eu-central-1")).unwrap(), "eu-central-1");
        assert_eq!(r(&[], None).unwrap(), "us-east-1");
        // With a profile, the profile's region (not the catalog's endpoint).
        assert_eq!(
            r(&[("AWS_PROFILE", "work")], Some("us-east-1")).unwrap(),
            "ap-southeast-2"
        );
        assert_eq!(r(&[("AWS_PROFILE", "default")], None).unwrap(), "eu-west-1");
        assert_eq!(
            r(&[("AWS_PROFILE", "proc")], None).unwrap_err().to_string(),
            "Region is missing"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
