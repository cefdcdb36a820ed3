//! Google Application Default Credentials files, found as google-auth-library finds them: the
//! JSON file named by `GOOGLE_APPLICATION_CREDENTIALS`, else gcloud's
//! `~/.config/gcloud/application_default_credentials.json`, holding a service account
//! (`"type":"service_account"`: email, PKCS#8 key, key id, `token_uri`) or a gcloud user login
//! (`"type":"authorized_user"`: client id and secret, refresh token, `quota_project_id`). The
//! token endpoint is the file's `token_uri` when present, else Google's.
//!
//! Input: an `Env` snapshot and the file. Output: the parsed credentials or an `AdcError` (its
//! text is pi's), and the file's secrets for redaction. Exchanging them for access tokens is
//! `provider/google_auth.rs`'s job.

use std::path::PathBuf;

use serde_json::Value;

use super::auth::Env;

pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// google-auth-library's text when no credentials are found.
pub const NO_CREDENTIALS: &str = "Could not load the default credentials. Browse to https://cloud.google.com/docs/authentication/getting-started for more information.";

/// Why no usable ADC file was found. `Display` is the text the request fails with.
#[derive(Debug)]
pub enum AdcError {
    /// No file at the ADC path (or it cannot be read): google-auth-library's text.
    NotFound,
    /// The file is there but unusable; the text names the file after the problem.
    File {
        path: PathBuf,
        problem: AdcFileError,
    },
}

/// What is wrong with an ADC file's contents.
#[derive(Debug, PartialEq)]
pub enum AdcFileError {
    NotJson,
    NoType,
    MissingField(&'static str),
    /// A `type` pi-rs cannot use (external accounts, impersonation, …).
    UnsupportedType(String),
}

impl std::fmt::Display for AdcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdcError::NotFound => f.write_str(NO_CREDENTIALS),
            AdcError::File { path, problem } => write!(f, "{problem} ({})", path.display()),
        }
    }
}

impl std::error::Error for AdcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AdcError::NotFound => None,
            AdcError::File { problem, .. } => Some(problem),
        }
    }
}

impl std::fmt::Display for AdcFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdcFileError::NotJson => f.write_str("The Google credentials file is not JSON"),
            AdcFileError::NoType => f.write_str("The Google credentials file has no type"),
            AdcFileError::MissingField(name) => {
                write!(f, "The Google credentials file has no {name}")
            }
            AdcFileError::UnsupportedType(other) => write!(
                f,
                "Google credentials of type \"{other}\" are not supported by pi-rs (use a service account key or `gcloud auth application-default login`)"
            ),
        }
    }
}

impl std::error::Error for AdcFileError {}

/// What an ADC file holds (the kinds pi-rs can use).
#[derive(Clone, PartialEq)]
pub enum AdcCredentials {
    ServiceAccount {
        client_email: String,
        private_key_pem: String,
        private_key_id: Option<String>,
        token_uri: String,
    },
    AuthorizedUser {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
        quota_project_id: Option<String>,
    },
}

impl std::fmt::Debug for AdcCredentials {
    // Keys and tokens never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.cache_key())
    }
}

impl AdcCredentials {
    /// Names the credential for the cache without containing a secret.
    pub fn cache_key(&self) -> String {
        match self {
            AdcCredentials::ServiceAccount {
                client_email,
                token_uri,
                ..
            } => format!("service_account:{client_email}@{token_uri}"),
            AdcCredentials::AuthorizedUser {
                client_id,
                refresh_token,
                token_uri,
                ..
            } => {
                // A digest tells two logins of one client apart without keeping the token.
                let digest = ring::digest::digest(&ring::digest::SHA256, refresh_token.as_bytes());
                let short: String = digest.as_ref()[..8]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                format!("authorized_user:{client_id}:{short}@{token_uri}")
            }
        }
    }

    /// The project that quota and billing go to, when the file names one.
    pub fn quota_project(&self) -> Option<&str> {
        match self {
            AdcCredentials::AuthorizedUser {
                quota_project_id, ..
            } => quota_project_id.as_deref(),
            AdcCredentials::ServiceAccount { .. } => None,
        }
    }
}

/// The ADC file's path (it may not exist).
pub fn adc_path(env: &Env) -> PathBuf {
    match env.get("GOOGLE_APPLICATION_CREDENTIALS") {
        Some(path) => PathBuf::from(path),
        None => env
            .home()
            .join(".config/gcloud/application_default_credentials.json"),
    }
}

pub fn load(env: &Env) -> Result<AdcCredentials, AdcError> {
    let path = adc_path(env);
    let text = std::fs::read_to_string(&path).map_err(|_| AdcError::NotFound)?;
    parse(&text).map_err(|problem| AdcError::File { path, problem })
}

pub(crate) fn parse(text: &str) -> Result<AdcCredentials, AdcFileError> {
    let json: Value = serde_json::from_str(text).map_err(|_| AdcFileError::NotJson)?;
    let field = |name: &str| {
        json.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let required = |name: &'static str| field(name).ok_or(AdcFileError::MissingField(name));
    let token_uri = field("token_uri").unwrap_or_else(|| DEFAULT_TOKEN_URI.to_string());
    match json.get("type").and_then(Value::as_str) {
        Some("service_account") => Ok(AdcCredentials::ServiceAccount {
            client_email: required("client_email")?,
            private_key_pem: required("private_key")?,
            private_key_id: field("private_key_id"),
            token_uri,
        }),
        Some("authorized_user") => Ok(AdcCredentials::AuthorizedUser {
            client_id: required("client_id")?,
            client_secret: required("client_secret")?,
            refresh_token: required("refresh_token")?,
            token_uri,
            quota_project_id: field("quota_project_id"),
        }),
        Some(other) => Err(AdcFileError::UnsupportedType(other.to_string())),
        None => Err(AdcFileError::NoType),
    }
}

/// The secrets in the ADC file, when there is one (for redaction).
pub fn file_secrets(env: &Env) -> Vec<String> {
    match load(env) {
        Ok(AdcCredentials::ServiceAccount {
            private_key_pem, ..
        }) => vec![private_key_pem],
        Ok(AdcCredentials::AuthorizedUser {
            client_secret,
            refresh_token,
            ..
        }) => vec![client_secret, refresh_token],
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_files_parse_and_name_their_problems() {
        let user = parse(
            r#"{"type":"authorized_user","client_id":"cid","client_secret":"cs","refresh_token":"1//rt","quota_project_id":"billing"}"#,
        )
        .unwrap();
        assert_eq!(user.quota_project(), Some("billing"));
        match &user {
            AdcCredentials::AuthorizedUser { token_uri, .. } => {
                assert_eq!(token_uri, DEFAULT_TOKEN_URI)
            }
            other => panic!("{other:?}"),
        }
        // The cache key and Debug never hold the refresh token or the key.
        assert!(!format!("{user:?}").contains("1//rt"));
        assert!(!format!("{:?}", sa()).contains("PRIVATE"));
        assert!(
            parse(r#"{"type":"external_account"}"#)
                .unwrap_err()
                .to_string()
                .contains("not supported")
        );
        assert_eq!(
            parse(r#"{"type":"service_account","client_email":"a"}"#)
                .unwrap_err()
                .to_string(),
            "The Google credentials file has no private_key"
        );
        let env = Env::from_pairs([("HOME", "/nonexistent-home")]);
        assert_eq!(load(&env).unwrap_err().to_string(), NO_CREDENTIALS);
        assert_eq!(
            adc_path(&env),
            PathBuf::from("/nonexistent-home/.config/gcloud/application_default_credentials.json")
        );
    }

    fn sa() -> AdcCredentials {
        parse(r#"{"type":"service_account","client_email":"sa@p","private_key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----","token_uri":"http://t"}"#).unwrap()
    }

    #[test]
    fn the_files_secrets_are_listed_for_redaction() {
        let dir = std::env::temp_dir().join(format!("pi-rs-adc-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("adc.json");
        std::fs::write(
            &file,
            r#"{"type":"authorized_user","client_id":"c","client_secret":"adc-client-secret","refresh_token":"1//adc-refresh"}"#,
        )
        .unwrap();
        let env = Env::from_pairs([("GOOGLE_APPLICATION_CREDENTIALS", file.to_str().unwrap())]);
        assert_eq!(
            file_secrets(&env),
            vec![
                "adc-client-secret".to_string(),
                "1//adc-refresh".to_string()
            ]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
