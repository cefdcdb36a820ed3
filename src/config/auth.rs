//! Credentials: `auth.json` in the agent dir, provider environment variables, and the shared
//! config-value syntax used by auth.json keys and models.json `apiKey`/`headers`:
//! `!command` (run through `sh -c`, trimmed stdout, 10 s bound), else the value of the
//! environment variable of that name when set and non-empty, else the literal text.
//!
//! auth.json is created as `{}` (file mode 0600, directory 0700) when missing, like the reference.
//! OAuth entries (subscription logins) are read here; an expired or nearly expired one is refreshed
//! by `Config` through `oauth` before use, under pi's auth.json lock.
//!
//! The environment is captured once (`Env`) so lookups are consistent and tests can inject one.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::child::GroupChild;

/// How long a `!command` may run before it is killed and treated as failed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// A snapshot of environment variables.
#[derive(Clone, Debug, Default)]
pub struct Env {
    vars: HashMap<String, String>,
}

impl Env {
    pub fn from_process() -> Env {
        Env {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        }
    }

    #[cfg(test)]
    pub fn from_pairs<I: IntoIterator<Item = (S, S)>, S: Into<String>>(pairs: I) -> Env {
        Env {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value when set and non-empty (JS truthiness, as the reference tests it).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Every variable (name, value) with a non-empty value.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// This environment with `extra` on top (an auth.json entry's `env` object).
    pub fn overlaid<'a>(&self, extra: impl IntoIterator<Item = (&'a str, &'a str)>) -> Env {
        let mut env = self.clone();
        for (k, v) in extra {
            if !v.is_empty() {
                env.vars.insert(k.to_string(), v.to_string());
            }
        }
        env
    }

    pub fn home(&self) -> PathBuf {
        self.get("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"))
    }
}

/// Environment variables holding a provider's key, in priority order (pi-ai's table).
pub fn env_key_names(provider: &str) -> Option<&'static [&'static str]> {
    const TABLE: &[(&str, &[&str])] = &[
        ("github-copilot", &["COPILOT_GITHUB_TOKEN"]),
        // The OAuth token wins over the plain API key.
        ("anthropic", &["ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY"]),
        ("ant-ling", &["ANT_LING_API_KEY"]),
        // Qwen Token Plan: the per-plan variable first, then the region one both plans shared.
        (
            "qwen-token-plan",
            &["QWEN_TOKEN_PLAN_TEAM_API_KEY", "QWEN_TOKEN_PLAN_API_KEY"],
        ),
        (
            "qwen-token-plan-cn",
            &[
                "QWEN_TOKEN_PLAN_TEAM_CN_API_KEY",
                "QWEN_TOKEN_PLAN_CN_API_KEY",
            ],
        ),
        (
            "qwen-token-plan-individual",
            &[
                "QWEN_TOKEN_PLAN_INDIVIDUAL_API_KEY",
                "QWEN_TOKEN_PLAN_API_KEY",
            ],
        ),
        (
            "qwen-token-plan-individual-cn",
            &[
                "QWEN_TOKEN_PLAN_INDIVIDUAL_CN_API_KEY",
                "QWEN_TOKEN_PLAN_CN_API_KEY",
            ],
        ),
        ("openai", &["OPENAI_API_KEY"]),
        ("azure", &["AZURE_OPENAI_API_KEY"]),
        ("nvidia", &["NVIDIA_API_KEY"]),
        ("deepseek", &["DEEPSEEK_API_KEY"]),
        ("google", &["GEMINI_API_KEY"]),
        ("google-vertex", &["GOOGLE_CLOUD_API_KEY"]),
        ("groq", &["GROQ_API_KEY"]),
        ("cerebras", &["CEREBRAS_API_KEY"]),
        ("xai", &["XAI_API_KEY"]),
        ("typesafe", &["TYPESAFE_API_KEY"]),
        ("radius", &["RADIUS_API_KEY"]),
        ("openrouter", &["OPENROUTER_API_KEY"]),
        ("vercel-ai-gateway", &["AI_GATEWAY_API_KEY"]),
        ("zai", &["ZAI_API_KEY"]),
        ("zai-coding-cn", &["ZAI_CODING_CN_API_KEY"]),
        ("mistral", &["MISTRAL_API_KEY"]),
        ("minimax", &["MINIMAX_API_KEY"]),
        ("minimax-cn", &["MINIMAX_CN_API_KEY"]),
        ("moonshotai", &["MOONSHOT_API_KEY"]),
        ("moonshotai-cn", &["MOONSHOT_API_KEY"]),
        ("huggingface", &["HF_TOKEN"]),
        ("fireworks", &["FIREWORKS_API_KEY"]),
        ("together", &["TOGETHER_API_KEY"]),
        ("baseten", &["BASETEN_API_KEY"]),
        ("opencode", &["OPENCODE_API_KEY"]),
        ("opencode-go", &["OPENCODE_API_KEY"]),
        ("kimi-coding", &["KIMI_API_KEY"]),
        ("meta", &["META_API_KEY"]),
        ("cloudflare-workers-ai", &["CLOUDFLARE_API_KEY"]),
        ("cloudflare-ai-gateway", &["CLOUDFLARE_API_KEY"]),
        ("xiaomi", &["XIAOMI_API_KEY"]),
        ("xiaomi-token-plan-cn", &["XIAOMI_TOKEN_PLAN_CN_API_KEY"]),
        ("xiaomi-token-plan-ams", &["XIAOMI_TOKEN_PLAN_AMS_API_KEY"]),
        ("xiaomi-token-plan-sgp", &["XIAOMI_TOKEN_PLAN_SGP_API_KEY"]),
    ];
    TABLE
        .iter()
        .find(|(p, _)| *p == provider)
        .map(|(_, names)| *names)
}

/// Marker value for providers authenticated by ambient cloud credentials (no key to send).
pub const AMBIENT_CREDENTIALS: &str = "<authenticated>";

/// The provider key from the environment (pi-ai's getEnvApiKey), including the ambient-credential
/// checks for Vertex (ADC file + project + location), Bedrock (profile, keys, tokens, roles) and
/// Anthropic's workload identity federation (rule, organization and identity token file).
pub fn env_api_key(env: &Env, provider: &str) -> Option<String> {
    if let Some(names) = env_key_names(provider)
        && let Some(value) = names.iter().find_map(|n| env.get(n))
    {
        return Some(value.to_string());
    }
    match provider {
        "google-vertex" => {
            let credentials = match env.get("GOOGLE_APPLICATION_CREDENTIALS") {
                Some(path) => Path::new(path).exists(),
                None => env
                    .home()
                    .join(".config/gcloud/application_default_credentials.json")
                    .exists(),
            };
            let project = env
                .get("GOOGLE_CLOUD_PROJECT")
                .or_else(|| env.get("GCLOUD_PROJECT"))
                .is_some();
            let location = env.get("GOOGLE_CLOUD_LOCATION").is_some();
            (credentials && project && location).then(|| AMBIENT_CREDENTIALS.to_string())
        }
        // Workload identity federation (pi 1.6.0, through the Anthropic SDK): last in line, the
        // token is exchanged per request (`provider::anthropic_federation`).
        "anthropic" => [
            "ANTHROPIC_FEDERATION_RULE_ID",
            "ANTHROPIC_ORGANIZATION_ID",
            "ANTHROPIC_IDENTITY_TOKEN_FILE",
        ]
        .iter()
        .all(|name| env.get(name).is_some())
        .then(|| AMBIENT_CREDENTIALS.to_string()),
        "amazon-bedrock" => {
            let any = env.get("AWS_PROFILE").is_some()
                || (env.get("AWS_ACCESS_KEY_ID").is_some()
                    && env.get("AWS_SECRET_ACCESS_KEY").is_some())
                || env.get("AWS_BEARER_TOKEN_BEDROCK").is_some()
                || env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
                || env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
                || env.get("AWS_WEB_IDENTITY_TOKEN_FILE").is_some();
            any.then(|| AMBIENT_CREDENTIALS.to_string())
        }
        _ => None,
    }
}

/// Environment variables whose values are secrets even though they are not the provider key
/// itself (used only for redaction).
pub const EXTRA_SECRET_ENV_VARS: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_SESSION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    ANTHROPIC_AUTH_TOKEN,
    "TYPESAFE_API_KEY",
];

/// Anthropic's bearer token variable: pi 1.6.0 sends it as `Authorization: Bearer …` instead of
/// an API key, ahead of `ANTHROPIC_OAUTH_TOKEN` and `ANTHROPIC_API_KEY`.
pub const ANTHROPIC_AUTH_TOKEN: &str = "ANTHROPIC_AUTH_TOKEN";

// ---- config values -------------------------------------------------------------------------------

/// Resolves config values; caches `!command` results for the process lifetime (auth.json keys)
/// and remembers every resolved value so it can be redacted later.
#[derive(Default)]
pub struct ValueResolver {
    command_cache: Mutex<HashMap<String, Option<String>>>,
    resolved: Mutex<Vec<String>>,
}

impl ValueResolver {
    /// Cached resolution (auth.json `key`).
    pub fn resolve(&self, env: &Env, config: &str) -> Option<String> {
        let value = if let Some(command) = config.strip_prefix('!') {
            let mut cache = lock(&self.command_cache);
            if let Some(hit) = cache.get(config) {
                hit.clone()
            } else {
                let result = run_command(command);
                cache.insert(config.to_string(), result.clone());
                result
            }
        } else {
            resolve_template(env, config).ok()
        };
        self.remember(value.as_deref());
        value
    }

    /// Uncached resolution (models.json `apiKey` and `headers`): commands run every time.
    pub fn resolve_uncached(&self, env: &Env, config: &str) -> Option<String> {
        let value = match config.strip_prefix('!') {
            Some(command) => run_command(command),
            None => resolve_template(env, config).ok(),
        };
        self.remember(value.as_deref());
        value
    }

    /// Like `resolve_uncached`, with the reference's error text when nothing comes out.
    pub fn resolve_or_error(
        &self,
        env: &Env,
        config: &str,
        description: &str,
    ) -> Result<String, String> {
        match self.resolve_uncached(env, config) {
            Some(v) => Ok(v),
            None => match config.strip_prefix('!') {
                Some(command) => Err(format!(
                    "Failed to resolve {description} from shell command: {command}"
                )),
                None => match resolve_template(env, config) {
                    Err(missing) if missing.len() == 1 => Err(format!(
                        "Failed to resolve {description} from environment variable: {}",
                        missing[0]
                    )),
                    Err(missing) if !missing.is_empty() => Err(format!(
                        "Failed to resolve {description} from environment variables: {}",
                        missing.join(", ")
                    )),
                    _ => Err(format!("Failed to resolve {description}")),
                },
            },
        }
    }

    fn remember(&self, value: Option<&str>) {
        if let Some(v) = value {
            // Every resolved credential joins the redaction set at once, in any process state.
            crate::redact::register_secrets([v.to_string()]);
            let mut resolved = lock(&self.resolved);
            if !resolved.iter().any(|r| r == v) {
                resolved.push(v.to_string());
            }
        }
    }

    /// Every value resolved so far.
    pub fn resolved_values(&self) -> Vec<String> {
        lock(&self.resolved).clone()
    }
}

/// One piece of a config value (pi 1.6.0's template syntax).
#[derive(Debug, PartialEq)]
enum Part<'a> {
    Literal(String),
    Var(&'a str),
}

/// Splits a (non-command) config value: `$NAME` and `${NAME}` name environment variables, `$$`
/// is a literal `$` and `$!` a literal `!`; anything else is literal text (a `$` not followed by
/// a name, an unclosed `${`, a `${…}` that is not a name).
fn template_parts(config: &str) -> Vec<Part<'_>> {
    fn literal(parts: &mut Vec<Part<'_>>, text: &str) {
        if text.is_empty() {
            return;
        }
        match parts.last_mut() {
            Some(Part::Literal(previous)) => previous.push_str(text),
            _ => parts.push(Part::Literal(text.to_string())),
        }
    }
    let name_len = |s: &str| {
        let bytes = s.as_bytes();
        if !bytes
            .first()
            .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        {
            return 0;
        }
        bytes
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count()
    };
    let mut parts = Vec::new();
    let mut rest = config;
    while let Some(dollar) = rest.find('$') {
        literal(&mut parts, &rest[..dollar]);
        let after = &rest[dollar + 1..];
        if after.starts_with('$') || after.starts_with('!') {
            literal(&mut parts, &after[..1]);
            rest = &after[1..];
        } else if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) if end > 0 && name_len(&braced[..end]) == end => {
                    parts.push(Part::Var(&braced[..end]));
                    rest = &braced[end + 1..];
                }
                Some(end) => {
                    literal(&mut parts, &rest[dollar..dollar + end + 3]);
                    rest = &braced[end + 1..];
                }
                None => {
                    literal(&mut parts, "$");
                    rest = after;
                }
            }
        } else {
            match name_len(after) {
                0 => {
                    literal(&mut parts, "$");
                    rest = after;
                }
                n => {
                    parts.push(Part::Var(&after[..n]));
                    rest = &after[n..];
                }
            }
        }
    }
    literal(&mut parts, rest);
    parts
}

/// A non-command config value with its variables filled in; the names of the unset ones
/// otherwise. pi 0.73.1's bare variable name (`"MY_KEY"`, literal text for pi 1.6.0) is still read
/// from the environment when that variable is set, with a warning naming the new syntax: as
/// literal text it could only fail at the provider.
fn resolve_template(env: &Env, config: &str) -> Result<String, Vec<String>> {
    let parts = template_parts(config);
    if let [Part::Literal(text)] = parts.as_slice()
        && is_env_name(text)
        && let Some(value) = env.get(text)
    {
        warn_bare_name(text);
        return Ok(value.to_string());
    }
    let mut out = String::new();
    let mut missing: Vec<String> = Vec::new();
    for part in &parts {
        match part {
            Part::Literal(text) => out.push_str(text),
            Part::Var(name) => match env.get(name) {
                Some(value) => out.push_str(value),
                None if !missing.iter().any(|m| m == name) => missing.push(name.to_string()),
                None => {}
            },
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    }
}

/// A non-command config value's result, without remembering it (redaction lists).
pub fn resolve_plain(env: &Env, config: &str) -> Option<String> {
    resolve_template(env, config).ok()
}

/// Whether every variable a (non-command) config value names is set (pi 1.6.0's
/// `isConfigValueConfigured`; commands count as configured).
pub fn config_value_configured(env: &Env, config: &str) -> bool {
    config.starts_with('!') || resolve_template(env, config).is_ok()
}

fn is_env_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes
        .first()
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// Once per name and process.
fn warn_bare_name(name: &str) {
    static WARNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut warned = lock(&WARNED);
    if !warned.iter().any(|w| w == name) {
        warned.push(name.to_string());
        log::warn!(
            "the config value \"{name}\" is read from the environment variable {name}, as pi 0.73.1 did; pi 1.6.0 takes it as literal text: write \"${name}\" (or \"${{{name}}}\")"
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `sh -c command` with stdin and stderr closed, bounded by `COMMAND_TIMEOUT`. Returns the
/// trimmed stdout when the command succeeds with non-empty output.
pub fn run_command(command: &str) -> Option<String> {
    run_command_with_timeout(command, COMMAND_TIMEOUT)
}

pub fn run_command_with_timeout(command: &str, timeout: Duration) -> Option<String> {
    // Own process group, so a timeout can kill grandchildren holding stdout open.
    let mut child = GroupChild::spawn(
        Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    )
    .map_err(|e| log::warn!("cannot run config command: {e}"))
    .ok()?;
    let mut stdout = child.pipes().stdout.take()?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    let deadline = Instant::now() + timeout;
    let Ok(output) = rx.recv_deadline(deadline) else {
        // Dropping the child kills its group and reaps it.
        log::warn!("config command timed out after {} s", timeout.as_secs());
        return None;
    };
    // stdout is closed; the shell is exiting. Still bound the wait (a drop kills and reaps).
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => break None,
        }
    };
    if !status?.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output).trim().to_string();
    (!text.is_empty()).then_some(text)
}

// ---- auth.json -----------------------------------------------------------------------------------

/// One auth.json entry.
#[derive(Clone, Debug, PartialEq)]
pub enum Credential {
    ApiKey(String),
    OAuth {
        access: String,
        refresh: Option<String>,
        expires_ms: Option<f64>,
    },
    /// An entry of another or malformed type: it still counts as "configured".
    Other,
}

pub struct AuthFile {
    entries: Map<String, Value>,
}

impl AuthFile {
    /// Loads `<agent_dir>/auth.json`, creating it (and the dir) when missing. A broken file
    /// counts as empty and yields an error message.
    pub fn load(agent_dir: &Path) -> (AuthFile, Option<String>) {
        let path = agent_dir.join("auth.json");
        let mut problem = None;
        if let Err(e) = ensure_auth_file(agent_dir, &path) {
            problem = Some(format!("cannot create {}: {e}", path.display()));
        }
        let entries = match fs::read(&path) {
            Ok(bytes) if bytes.is_empty() => Map::new(),
            Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(Value::Object(map)) => map,
                Ok(_) => {
                    problem = Some(format!("{}: expected a JSON object", path.display()));
                    Map::new()
                }
                Err(e) => {
                    problem = Some(format!("{}: {e}", path.display()));
                    Map::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
            Err(e) => {
                problem = Some(format!("{}: {e}", path.display()));
                Map::new()
            }
        };
        (AuthFile { entries }, problem)
    }

    /// True when auth.json has any (truthy) entry for the provider.
    pub fn has(&self, provider: &str) -> bool {
        self.entries
            .get(provider)
            .is_some_and(|v| !matches!(v, Value::Null | Value::Bool(false)))
    }

    pub fn get(&self, provider: &str) -> Option<Credential> {
        let entry = self.entries.get(provider)?;
        let kind = entry.get("type").and_then(Value::as_str);
        Some(match kind {
            Some("api_key") => match entry.get("key").and_then(Value::as_str) {
                Some(key) => Credential::ApiKey(key.to_string()),
                None => Credential::Other,
            },
            Some("oauth") => Credential::OAuth {
                access: entry
                    .get("access")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                refresh: entry
                    .get("refresh")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                expires_ms: entry.get("expires").and_then(Value::as_f64),
            },
            _ => Credential::Other,
        })
    }

    /// The entry's `env` object: the variables its credential carries (pi 1.6.0).
    pub fn env_object(&self, provider: &str) -> Vec<(&str, &str)> {
        let Some(Value::Object(env)) = self.entries.get(provider).and_then(|e| e.get("env")) else {
            return Vec::new();
        };
        env.iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
            .collect()
    }

    /// A variable of the entry's `env` object (pi 1.6.0: values a credential carries besides its
    /// key, e.g. Cloudflare's account id), when set and non-empty.
    pub fn env_value(&self, provider: &str, name: &str) -> Option<&str> {
        let value = self
            .entries
            .get(provider)?
            .get("env")?
            .get(name)?
            .as_str()?;
        (!value.is_empty()).then_some(value)
    }

    /// A string field of a provider's entry (e.g. a Copilot login's `enterpriseUrl`).
    pub fn field(&self, provider: &str, name: &str) -> Option<&str> {
        self.entries.get(provider)?.get(name)?.as_str()
    }

    pub fn providers(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }
}

fn ensure_auth_file(dir: &Path, path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    crate::disk::create_private_dir_all(dir)?;
    if !path.exists() {
        fs::write(path, "{}")?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_keys_follow_the_table() {
        let env = Env::from_pairs([
            ("ANTHROPIC_API_KEY", "plain"),
            ("ANTHROPIC_OAUTH_TOKEN", "oauth"),
            ("GH_TOKEN", "gh"),
            ("COPILOT_GITHUB_TOKEN", "copilot"),
            ("QWEN_TOKEN_PLAN_API_KEY", "shared"),
            ("OPENAI_API_KEY", ""),
        ]);
        assert_eq!(env_api_key(&env, "anthropic").as_deref(), Some("oauth"));
        // pi 1.6.0 reads Copilot's own variable only (GH_TOKEN is not a Copilot key there).
        assert_eq!(
            env_api_key(&env, "github-copilot").as_deref(),
            Some("copilot")
        );
        // Qwen Token Plan: the plan's variable, else the region's shared one.
        assert_eq!(
            env_api_key(&env, "qwen-token-plan-individual").as_deref(),
            Some("shared")
        );
        assert_eq!(env_api_key(&env, "qwen-token-plan-cn"), None);
        assert_eq!(
            env_api_key(&env, "openai"),
            None,
            "empty values do not count"
        );
        assert_eq!(env_api_key(&env, "nope"), None);
        let aws = Env::from_pairs([("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "b")]);
        assert_eq!(
            env_api_key(&aws, "amazon-bedrock").as_deref(),
            Some(AMBIENT_CREDENTIALS)
        );
        assert_eq!(
            env_api_key(
                &Env::from_pairs([("AWS_ACCESS_KEY_ID", "a")]),
                "amazon-bedrock"
            ),
            None
        );
        assert_eq!(
            env_key_names("moonshotai-cn"),
            Some(&["MOONSHOT_API_KEY"][..])
        );
    }

    #[test]
    fn config_values_resolve_command_env_or_literal() {
        let env = Env::from_pairs([("MY_KEY", "from-env")]);
        let r = ValueResolver::default();
        assert_eq!(r.resolve(&env, "MY_KEY").as_deref(), Some("from-env"));
        assert_eq!(
            r.resolve(&env, "literal-key").as_deref(),
            Some("literal-key")
        );
        assert_eq!(
            r.resolve(&env, "!printf '  hello \\n'").as_deref(),
            Some("hello")
        );
        assert_eq!(r.resolve(&env, "!exit 3"), None);
        assert_eq!(r.resolve(&env, "!true"), None, "empty output is no value");
        assert_eq!(
            r.resolve_or_error(&env, "!false", "API key for provider \"x\"")
                .unwrap_err(),
            "Failed to resolve API key for provider \"x\" from shell command: false"
        );
        assert!(r.resolved_values().contains(&"hello".to_string()));
    }

    #[test]
    fn templates_read_variables_and_escapes_as_pi_1_6_0() {
        let env = Env::from_pairs([("A", "1"), ("B_2", "two"), ("EMPTY", "")]);
        let r = ValueResolver::default();
        let cases = [
            ("$A", Some("1")),
            ("${A}", Some("1")),
            ("x-$A-${B_2}y", Some("x-1-twoy")),
            ("$$A", Some("$A")),
            ("$!A", Some("!A")),
            ("cost $", Some("cost $")),
            ("$-x", Some("$-x")),
            ("${not a name}", Some("${not a name}")),
            ("${A", Some("${A")),
            ("$MISSING", None),
            ("$EMPTY", None),
            ("sk-plain", Some("sk-plain")),
            // 0.73.1's bare name: still the variable when it is set, else literal.
            ("B_2", Some("two")),
            ("NOT_SET", Some("NOT_SET")),
        ];
        for (config, expected) in cases {
            assert_eq!(r.resolve(&env, config).as_deref(), expected, "{config}");
        }
        assert_eq!(
            r.resolve_or_error(&env, "$X-${Y}-$X", "API key for provider \"p\"")
                .unwrap_err(),
            "Failed to resolve API key for provider \"p\" from environment variables: X, Y"
        );
        assert_eq!(
            r.resolve_or_error(&env, "${X}", "d").unwrap_err(),
            "Failed to resolve d from environment variable: X"
        );
        assert!(config_value_configured(&env, "$A"));
        assert!(!config_value_configured(&env, "Bearer $MISSING"));
        assert!(config_value_configured(&env, "!anything"));
        let overlaid = env.overlaid([("MISSING", "now")]);
        assert_eq!(r.resolve(&overlaid, "$MISSING").as_deref(), Some("now"));
    }

    #[test]
    fn cached_commands_run_once() {
        let dir = std::env::temp_dir().join(format!("pi-rs-auth-cache-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let counter = dir.join("count");
        let cmd = format!("!echo x >> '{}'; echo key", counter.display());
        let r = ValueResolver::default();
        let env = Env::default();
        assert_eq!(r.resolve(&env, &cmd).as_deref(), Some("key"));
        assert_eq!(r.resolve(&env, &cmd).as_deref(), Some("key"));
        assert_eq!(fs::read_to_string(&counter).unwrap().lines().count(), 1);
        r.resolve_uncached(&env, &cmd);
        assert_eq!(fs::read_to_string(&counter).unwrap().lines().count(), 2);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn commands_are_bounded_even_with_lingering_children() {
        let start = Instant::now();
        let out = run_command_with_timeout(
            "sleep 30 & echo partial; sleep 30",
            Duration::from_millis(300),
        );
        assert_eq!(out, None);
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn auth_file_is_created_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir()
            .join(format!("pi-rs-auth-create-{}", std::process::id()))
            .join("agent");
        let _ = fs::remove_dir_all(dir.parent().unwrap());
        let (_auth, problem) = AuthFile::load(&dir);
        assert_eq!(problem, None);
        let path = dir.join("auth.json");
        assert_eq!(fs::read_to_string(&path).unwrap(), "{}");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let _ = fs::remove_dir_all(dir.parent().unwrap());
    }
}
