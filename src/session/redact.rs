//! Credential redaction for what the session writes to disk (session lines, and the export
//! page's embedded data): every known secret becomes `[redacted]`.
//!
//! Input: the secret values (API keys, tokens) and serialized JSON text. Output: the same JSON
//! with each secret replaced. Matching happens on the JSON text, on the secret's JSON-escaped
//! form, and only where the match starts a token (not right after an escaping backslash), so the
//! result is always JSON again and means the original with the secret cut out. The process-wide
//! default list is set once at startup and taken by every session log created afterwards;
//! secrets learned later (a refreshed OAuth token) join every list at once through
//! [`add_secret`].

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// What a secret is replaced with (the same marker as on stdout).
pub const REDACTED: &str = "[redacted]";

/// Secrets in the form they take inside a JSON string. Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct Redactions {
    escaped: Arc<[String]>,
}

impl Redactions {
    pub fn new(secrets: Vec<String>) -> Redactions {
        let mut escaped: Vec<String> = secrets
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| {
                let quoted = serde_json::to_string(s).ok()?;
                Some(quoted[1..quoted.len() - 1].to_string())
            })
            .collect();
        // Longest first: a secret that contains another is replaced whole.
        escaped.sort_by_key(|s| std::cmp::Reverse(s.len()));
        escaped.dedup();
        Redactions {
            escaped: escaped.into(),
        }
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.escaped.is_empty()
    }

    /// `json` with every secret (and every secret added later) replaced by `[redacted]`;
    /// borrowed when nothing matched.
    pub fn apply<'a>(&self, json: &'a str) -> Cow<'a, str> {
        let mut text = Cow::Borrowed(json);
        for secret in self.escaped.iter() {
            if let Some(replaced) = replace_tokens(&text, secret) {
                text = Cow::Owned(replaced);
            }
        }
        if LATE_COUNT.load(Ordering::Acquire) > 0 {
            for secret in late_secrets_escaped() {
                if let Some(replaced) = replace_tokens(&text, &secret) {
                    text = Cow::Owned(replaced);
                }
            }
        }
        text
    }
}

/// Replaces `secret` in `json` where it is not preceded by an odd run of backslashes (there its
/// first character belongs to an escape, so the decoded string does not hold the secret).
fn replace_tokens(json: &str, secret: &str) -> Option<String> {
    let finder = memchr::memmem::Finder::new(secret.as_bytes());
    let bytes = json.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = finder.find(&bytes[from..]) {
        let at = from + found;
        let backslashes = bytes[..at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 1 {
            from = at + 1;
            continue;
        }
        let buffer = out.get_or_insert_with(|| String::with_capacity(json.len()));
        buffer.push_str(&json[copied..at]);
        buffer.push_str(REDACTED);
        copied = at + secret.len();
        from = copied;
    }
    let mut buffer = out?;
    buffer.push_str(&json[copied..]);
    Some(buffer)
}

static PROCESS_DEFAULT: OnceLock<Redactions> = OnceLock::new();
/// Secrets learned after startup, and how many there are (read without the lock).
static LATE: RwLock<Vec<String>> = RwLock::new(Vec::new());
static LATE_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Adds a secret learned after startup (a refreshed OAuth token) to every redaction list: session
/// files and exports from now on, and stdout (the writer polls [`late_secrets_since`]).
pub fn add_secret(secret: &str) {
    if secret.len() < 6 {
        return;
    }
    let mut late = LATE.write().unwrap_or_else(|e| e.into_inner());
    if !late.iter().any(|s| s == secret) {
        late.push(secret.to_string());
        LATE_COUNT.store(late.len(), Ordering::Release);
    }
}

/// The secrets added after the first `seen` ones (cheap when there are none).
pub fn late_secrets_since(seen: usize) -> Vec<String> {
    if LATE_COUNT.load(Ordering::Acquire) <= seen {
        return Vec::new();
    }
    let late = LATE.read().unwrap_or_else(|e| e.into_inner());
    late.get(seen..).map(<[String]>::to_vec).unwrap_or_default()
}

fn late_secrets_escaped() -> Vec<String> {
    late_secrets_since(0)
        .iter()
        .filter_map(|s| {
            let quoted = serde_json::to_string(s).ok()?;
            Some(quoted[1..quoted.len() - 1].to_string())
        })
        .collect()
}

/// Sets the list every session log created from now on starts with (call once, at startup,
/// with `Config::known_secrets()`). A second call is ignored.
pub fn set_default_redactions(secrets: Vec<String>) {
    let _ = PROCESS_DEFAULT.set(Redactions::new(secrets));
}

/// The process-wide list (empty until set).
pub fn default_redactions() -> Redactions {
    PROCESS_DEFAULT.get().cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn secrets_are_replaced_and_the_json_stays_valid() {
        let redactions = Redactions::new(vec!["sk-test-SECRET123".into(), "ab\"cd\\ef".into()]);
        let value =
            json!({"a": "key sk-test-SECRET123, again sk-test-SECRET123", "b": "x ab\"cd\\ef y"});
        let text = value.to_string();
        let out = redactions.apply(&text);
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            back,
            json!({"a": "key [redacted], again [redacted]", "b": "x [redacted] y"})
        );
        assert!(matches!(redactions.apply("{\"x\":1}"), Cow::Borrowed(_)));
    }

    /// A secret whose first letter follows a backslash is an escape there, not the secret.
    #[test]
    fn escapes_are_never_split() {
        let redactions = Redactions::new(vec!["nabcdefg".into()]);
        let text = json!({"t": "line\nabcdefg and nabcdefg"}).to_string();
        let out = redactions.apply(&text);
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back, json!({"t": "line\nabcdefg and [redacted]"}));
    }

    #[test]
    fn empty_list_changes_nothing() {
        let redactions = Redactions::new(vec![String::new()]);
        assert!(redactions.is_empty());
        assert_eq!(redactions.apply("{\"k\":\"v\"}"), "{\"k\":\"v\"}");
    }
}
