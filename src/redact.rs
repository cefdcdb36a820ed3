//! Credential redaction, one home for the whole process: the redaction set every output takes
//! its secrets from (stdout, session files, exports, tool results before they are stored or sent
//! to the model). A credential joins the set the moment it is resolved (`register_secrets`:
//! startup keys, `--api-key`, `!command` results, header values), so no process state sees a
//! resolved key unredacted.
//!
//! Redaction works on decoded JSON string values: a line that may hold a secret (its JSON-escaped
//! form occurs in the text) is parsed, every string value except structural fields (`provider`,
//! `model`, `api`, ids, types, roles) has each secret replaced by `[redacted]`, and the value is
//! encoded again, so the result is always valid JSON and never splits an escape. Text that is not
//! JSON (a fragment) falls back to replacing whole escaped tokens. Lines without a candidate are
//! passed through untouched (borrowed).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde_json::Value;

/// What a secret is replaced with (the same marker everywhere).
pub const REDACTED: &str = "[redacted]";

/// Values shorter than this are never treated as secrets: real API keys and tokens are long
/// (20+ characters), while short values are words (`ollama`, `local`) that occur in ordinary text
/// and would be mangled everywhere they appear, protecting nothing.
const MIN_SECRET_LEN: usize = 8;

/// Well-known dummy keys local servers accept; redacting them corrupts prompts and data.
const PLACEHOLDER_KEYS: [&str; 14] = [
    "ollama",
    "lm-studio",
    "lmstudio",
    "sk-no-key-required",
    "no-key-required",
    "not-needed",
    "placeholder",
    "changeme",
    "your-api-key",
    "your_api_key",
    "api-key-here",
    "dummy-key",
    "<authenticated>",
    "none",
];

/// JSON keys whose string values are structure, never secrets: changing them would change what
/// the record means (the provider a message came from, an entry's id) and a reload would differ.
const STRUCTURAL_KEYS: [&str; 11] = [
    "type",
    "role",
    "provider",
    "model",
    "api",
    "id",
    "parentId",
    "toolCallId",
    "toolName",
    "stopReason",
    "customType",
];

/// Whether `secret` is worth redacting (see `MIN_SECRET_LEN`, `PLACEHOLDER_KEYS`).
pub fn is_redactable(secret: &str) -> bool {
    let trimmed = secret.trim();
    trimmed.len() >= MIN_SECRET_LEN
        && !PLACEHOLDER_KEYS
            .iter()
            .any(|p| p.eq_ignore_ascii_case(trimmed))
}

/// A set of secrets, raw and in the form they take inside a JSON string. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Redactions {
    raw: Arc<[String]>,
    escaped: Arc<[String]>,
}

impl Redactions {
    pub fn new(secrets: Vec<String>) -> Redactions {
        let mut raw: Vec<String> = secrets.into_iter().filter(|s| is_redactable(s)).collect();
        // Longest first: a secret that contains another is replaced whole.
        raw.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        raw.dedup();
        let escaped = raw
            .iter()
            .filter_map(|s| {
                let quoted = serde_json::to_string(s).ok()?;
                Some(quoted[1..quoted.len() - 1].to_string())
            })
            .collect::<Vec<_>>();
        Redactions {
            raw: raw.into(),
            escaped: escaped.into(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The raw secrets, longest first.
    pub fn secrets(&self) -> &[String] {
        &self.raw
    }

    /// Where a stream of text may be cut so that no secret is completed across the cut: before
    /// the longest tail that begins a known secret (at most longest secret − 1 bytes), but past
    /// any secret held whole that the cut would split (it goes out whole and is redacted there).
    pub fn streaming_cut(&self, text: &str) -> usize {
        let mut cut = text.len() - secret_prefix_tail(text, &self.raw);
        loop {
            let mut moved = cut;
            for secret in self.raw.iter() {
                for (start, _) in text.match_indices(secret.as_str()) {
                    if start < moved && start + secret.len() > moved {
                        moved = start + secret.len();
                    }
                }
            }
            if moved == cut {
                return cut;
            }
            cut = moved;
        }
    }

    /// Whether `json` text may hold a secret.
    pub fn may_contain(&self, json: &[u8]) -> bool {
        self.escaped
            .iter()
            .any(|s| memchr::memmem::find(json, s.as_bytes()).is_some())
    }

    /// A plain (decoded) string with every secret replaced; borrowed when nothing matched.
    pub fn apply_text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in self.raw.iter() {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }

    /// Every string value of `value` redacted in place, structural fields excepted.
    pub fn apply_value(&self, value: &mut Value) -> bool {
        let mut changed = false;
        let mut stack: Vec<&mut Value> = vec![value];
        while let Some(node) = stack.pop() {
            match node {
                Value::String(text) => {
                    if let Cow::Owned(new) = self.apply_text(text) {
                        *text = new;
                        changed = true;
                    }
                }
                Value::Array(items) => stack.extend(items.iter_mut()),
                Value::Object(map) => {
                    for (key, child) in map.iter_mut() {
                        if !(child.is_string() && STRUCTURAL_KEYS.contains(&key.as_str())) {
                            stack.push(child);
                        }
                    }
                }
                _ => {}
            }
        }
        changed
    }

    /// One JSON text (or JSONL: line by line) with every secret replaced; borrowed when nothing
    /// matched.
    pub fn apply<'a>(&self, json: &'a str) -> Cow<'a, str> {
        if self.is_empty() || !self.may_contain(json.as_bytes()) {
            return Cow::Borrowed(json);
        }
        if let Ok(mut value) = serde_json::from_str::<Value>(json) {
            if !self.apply_value(&mut value) {
                return Cow::Borrowed(json);
            }
            let mut out = value.to_string();
            if json.ends_with('\n') {
                out.push('\n');
            }
            return Cow::Owned(out);
        }
        if json.trim_end().contains('\n') {
            let mut out = String::with_capacity(json.len());
            for line in json.split_inclusive('\n') {
                let (body, end) = match line.strip_suffix('\n') {
                    Some(body) => (body, "\n"),
                    None => (line, ""),
                };
                out.push_str(&self.apply(body));
                out.push_str(end);
            }
            return Cow::Owned(out);
        }
        // A fragment (not a whole JSON value): whole escaped tokens only.
        let mut text = Cow::Borrowed(json);
        for secret in self.escaped.iter() {
            if let Some(replaced) = replace_tokens(&text, secret) {
                text = Cow::Owned(replaced);
            }
        }
        text
    }
}

/// The length of the longest tail of `text` that is a proper beginning of one of `secrets`.
fn secret_prefix_tail(text: &str, secrets: &[String]) -> usize {
    let Some(&last) = text.as_bytes().last() else {
        return 0;
    };
    let mut longest = 0;
    for secret in secrets {
        let bytes = secret.as_bytes();
        for k in (longest + 1..bytes.len().min(text.len() + 1)).rev() {
            if bytes[k - 1] == last && secret.is_char_boundary(k) && text.ends_with(&secret[..k]) {
                longest = k;
                break;
            }
        }
    }
    longest
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

/// Whether a variable, header or query parameter named `name` holds a credential by its name:
/// `*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*CREDENTIAL*`, `AWS_*`,
/// `GOOGLE_APPLICATION_CREDENTIALS` (any case). The one rule for what children do not inherit and
/// whose values join the redaction set.
pub fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"]
        .iter()
        .any(|word| upper.contains(word))
        || upper.starts_with("AWS_")
        || upper == "GOOGLE_APPLICATION_CREDENTIALS"
}

/// Whether the value of the credential-named variable `name` is a secret itself: not a path
/// (`*_FILE`, `*_PATH`, `*_DIR`, or a value starting with `/` or `~`), not AWS's region, profile
/// or endpoint settings. Redacting those would mangle ordinary text and protect nothing.
pub fn is_secret_value_of(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let describes = ["_FILE", "_PATH", "_DIR", "_URI", "_REGION", "_PROFILE"]
        .iter()
        .any(|suffix| upper.ends_with(suffix))
        || upper.starts_with("AWS_ENDPOINT_URL")
        || matches!(
            upper.as_str(),
            "AWS_SDK_LOAD_CONFIG" | "AWS_EC2_METADATA_DISABLED"
        );
    is_credential_name(name) && !describes && !value.starts_with(['/', '~'])
}

/// The password of a URL's user info (`scheme://user:password@host`), as written.
pub fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let (user_info, _) = authority.rsplit_once('@')?;
    let (_, password) = user_info.split_once(':')?;
    Some(password).filter(|p| !p.is_empty())
}

/// The values of a URL's query parameters whose names are credential-like (`?token=…`,
/// `api_key=…`, `access_token=…`, `sig=…`), as written.
pub fn url_query_secrets(url: &str) -> Vec<&str> {
    let Some((_, query)) = url.split_once('?') else {
        return Vec::new();
    };
    let query = query.split('#').next().unwrap_or(query);
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(name, value)| {
            !value.is_empty()
                && (is_credential_name(name)
                    || ["auth", "sig", "signature", "code", "apikey"]
                        .contains(&name.to_ascii_lowercase().as_str()))
        })
        .map(|(_, value)| value)
        .collect()
}

/// `text` (JSON source, possibly cut anywhere) with every `\uXXXX` escape that stands for an
/// ordinary character written as that character, and `\/` as `/` — the same JSON, so a key
/// spelled with escapes becomes visible to redaction. Escapes of quotes, backslashes, control
/// characters and lone surrogates stay. Returns the rewritten text of the longest prefix that
/// ends outside an escape, and that prefix's length in `text` (the rest is an escape still being
/// written).
pub fn plain_json_escapes(text: &str) -> (String, usize) {
    let bytes = text.as_bytes();
    let hex = |from: usize| -> Option<u32> {
        let digits = text.get(from..from + 4)?;
        digits
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
            .then(|| u32::from_str_radix(digits, 16).ok())?
    };
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut at) = (0, 0);
    while let Some(found) = memchr::memchr(b'\\', &bytes[at..]) {
        let start = at + found;
        let Some(&kind) = bytes.get(start + 1) else {
            out.push_str(&text[copied..start]);
            return (out, start);
        };
        match kind {
            b'/' => {
                out.push_str(&text[copied..start]);
                out.push('/');
                (copied, at) = (start + 2, start + 2);
            }
            b'u' => {
                if bytes.len() < start + 6 {
                    out.push_str(&text[copied..start]);
                    return (out, start);
                }
                let Some(unit) = hex(start + 2) else {
                    at = start + 2;
                    continue;
                };
                let (decoded, end) = if (0xD800..0xDC00).contains(&unit) {
                    // A pair needs its low half: wait for it while it may still come.
                    let low_start = start + 6;
                    let tail = &text[low_start..];
                    if tail.len() < 6 && "\\u".starts_with(&tail[..tail.len().min(2)]) {
                        let digits_ok = tail
                            .get(2..)
                            .is_none_or(|d| d.bytes().all(|b| b.is_ascii_hexdigit()));
                        if digits_ok {
                            out.push_str(&text[copied..start]);
                            return (out, start);
                        }
                    }
                    match (text.get(low_start..low_start + 2), hex(low_start + 2)) {
                        (Some("\\u"), Some(low)) if (0xDC00..0xE000).contains(&low) => (
                            char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)),
                            low_start + 6,
                        ),
                        _ => (None, start + 6),
                    }
                } else {
                    (char::from_u32(unit), start + 6)
                };
                match decoded {
                    Some(c) if !c.is_control() && c != '"' && c != '\\' => {
                        out.push_str(&text[copied..start]);
                        out.push(c);
                        copied = end;
                    }
                    _ => {}
                }
                at = end;
            }
            _ => at = start + 2,
        }
    }
    out.push_str(&text[copied..]);
    (out, text.len())
}

/// Where `text` (JSON source starting outside an escape) may be cut without splitting an
/// escape: `cut` itself, or the start of the escape it falls in.
pub fn escape_safe_cut(text: &str, cut: usize) -> usize {
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(found) = memchr::memchr(b'\\', &bytes[at..cut.min(bytes.len())]) {
        let start = at + found;
        let length = if bytes.get(start + 1) == Some(&b'u') {
            6
        } else {
            2
        };
        if cut < start + length {
            return start;
        }
        at = start + length;
    }
    cut
}

/// The process-wide set and a generation counter bumped on every change (readers cache).
static REGISTRY: RwLock<Option<Redactions>> = RwLock::new(None);
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Adds resolved credentials to the process-wide set (values not worth redacting are skipped).
pub fn register_secrets(secrets: impl IntoIterator<Item = String>) {
    let new: Vec<String> = secrets.into_iter().filter(|s| is_redactable(s)).collect();
    if new.is_empty() {
        return;
    }
    let mut guard = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    let mut all: Vec<String> = guard.as_ref().map(|r| r.raw.to_vec()).unwrap_or_default();
    let before = all.len();
    for secret in new {
        if !all.contains(&secret) {
            all.push(secret);
        }
    }
    if all.len() != before {
        *guard = Some(Redactions::new(all));
        GENERATION.fetch_add(1, Ordering::Release);
    }
}

/// One credential learned after startup (a refreshed OAuth token).
pub fn add_secret(secret: &str) {
    register_secrets([secret.to_string()]);
}

/// Startup's list (kept as a name for callers that set the initial keys).
pub fn set_default_redactions(secrets: Vec<String>) {
    register_secrets(secrets);
}

/// The process-wide set as it is now.
pub fn default_redactions() -> Redactions {
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default()
}

/// Changes whenever the set changes: a reader re-fetches `default_redactions` when it differs.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn plain_json_escapes_write_ordinary_characters_and_wait_for_cut_escapes() {
        assert_eq!(
            plain_json_escapes(r#"{"a":"\u0073k\/x \" \\u0041 \u000a \ud83d\ude00 \ud800!"}"#),
            (
                r#"{"a":"sk/x \" \\u0041 \u000a 😀 \ud800!"}"#.to_string(),
                57
            )
        );
        for cut in [
            "ab\\",
            "ab\\u00",
            "ab\\ud83d",
            "ab\\ud83d\\",
            "ab\\ud83d\\ude0",
        ] {
            assert_eq!(plain_json_escapes(cut), ("ab".to_string(), 2), "{cut}");
        }
        assert_eq!(escape_safe_cut("a\\u0001b", 4), 1);
        assert_eq!(escape_safe_cut("a\\u0001b", 7), 7);
        assert_eq!(escape_safe_cut("a\\\\b", 2), 1);
        assert_eq!(url_password("http://user:pa:ss@host:8080/x"), Some("pa:ss"));
        assert_eq!(url_password("http://host/x@y"), None);
        assert_eq!(
            url_query_secrets("https://h/mcp?token=abc&v=2&api_key=def&sig=ghi#f"),
            ["abc", "def", "ghi"]
        );
        assert!(is_secret_value_of("MY_SERVICE_TOKEN", "tok-1234567"));
        assert!(!is_secret_value_of("AWS_REGION", "us-east-1"));
        assert!(!is_secret_value_of(
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "/var/run/t"
        ));
        assert!(!is_secret_value_of("HOME", "whatever-long"));
    }

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
