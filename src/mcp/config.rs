//! `mcp.json` as the newest pi reads it: `<agentDir>/mcp.json`, then — only when the project is
//! trusted — `<cwd>/.pi/mcp.json`, whose entries replace user entries of the same name; a project
//! entry without `command`, `url` or `type` overrides only `enabled`, `exposure` and
//! `toolExposure` of the user entry. Invalid entries are reported (pi's messages) and skipped.
//!
//! Values are resolved here, once: `${VAR}` in `env` and `headers` values, a whole-value
//! `!command` (run by `config::auth::run_command`), `~/` in `command`, `args` and `cwd`, and a
//! relative `cwd` against the session's directory. Resolved values that came from the
//! environment or a command are returned as secrets for redaction.
//!
//! Also the file edits of `pi mcp add|remove`: other content of the file is kept, and it is
//! written back with its own indentation (atomically: temp file + rename).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::naming;
use crate::glob::wildcard_match;

/// Per-request timeout unless the entry says otherwise (seconds in the file).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const OVERRIDE_KEYS: [&str; 3] = ["enabled", "exposure", "toolExposure"];
const EXPOSURES: [&str; 4] = ["codemode", "deferred", "direct", "hidden"];

/// How a server's tools reach the model (pi 1.6.0): `direct` tools are declared, `codemode` and
/// `deferred` ones are not (scripts call them; `tool_search` declares the ones it finds; the two
/// differ only in which of those tools is turned on for them), `hidden` ones are unreachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposure {
    Direct,
    Hidden,
    Codemode,
    Deferred,
}

impl Exposure {
    /// A file value; `codemode` is the default, and what the checks let through besides the
    /// four names (`codemode-deferred`) counts as `deferred`.
    fn parse(value: &str) -> Exposure {
        match value {
            "hidden" => Exposure::Hidden,
            "direct" => Exposure::Direct,
            "codemode" => Exposure::Codemode,
            _ => Exposure::Deferred,
        }
    }
    /// Declared to the model from the start.
    pub fn is_declared(self) -> bool {
        self == Exposure::Direct
    }
    /// Reached through `codemode` scripts or found by `tool_search`.
    pub fn is_indirect(self) -> bool {
        matches!(self, Exposure::Codemode | Exposure::Deferred)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: PathBuf,
    },
    Http {
        url: String,
        headers: Vec<(String, String)>,
        /// OAuth sign-in, for servers without an `Authorization` header or `auth` (pi 1.6.0's
        /// rule).
        oauth: Option<Box<super::oauth::Settings>>,
        /// `auth.provider`: a provider's credential is the bearer instead (pi 1.6.0).
        provider: Option<ProviderAuth>,
    },
}

/// An HTTP server's `"auth": {"provider": "<provider>"}` (pi 1.6.0, global mcp.json and
/// extensions only): the provider's credential, as a request to its models would use it, is sent
/// as `Authorization: Bearer`. It is read on every request (auth.json afresh, an expired
/// subscription login refreshed under pi's lock), so the provider's refreshes apply and MCP
/// keeps no copy.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderAuth {
    pub provider: String,
    pub agent_dir: PathBuf,
}

impl ProviderAuth {
    /// The credential now (None without one: the server's 401 then asks for a sign-in). It
    /// joins the redaction set before it is used.
    pub fn token(&self) -> Option<String> {
        let token = crate::config::provider_credential(&self.agent_dir, &self.provider)?;
        crate::redact::add_secret(&token);
        Some(token)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    pub timeout: Duration,
    pub enabled: bool,
    pub description: Option<String>,
    /// The file value as written (`codemode` when absent, as pi's default).
    pub exposure_name: String,
    pub exposure: Exposure,
    /// `toolExposure` in file order: (name or pattern, exposure name with aliases resolved).
    pub tool_exposure: Vec<(String, String)>,
    /// The file that defines it.
    pub source: PathBuf,
    /// Defined by the project's file (pi's `scope: "project"`).
    pub project: bool,
    /// The project file that overrides some of its fields, if any.
    pub override_source: Option<PathBuf>,
    /// Registered by an extension (`source` is its path; pi's scope `extension`). Its stdio
    /// server starts in the sandbox from the first start on (the extension may act on what the
    /// model did).
    pub registered: bool,
}

impl ServerConfig {
    /// A tool's exposure: an exact `toolExposure` key, else the first matching pattern, else the
    /// server's.
    pub fn tool_exposure(&self, tool: &str) -> Exposure {
        Exposure::parse(self.tool_exposure_name(tool))
    }
    /// The same, as the file names it (`codemode`, `deferred`, `direct`, `hidden`).
    pub fn tool_exposure_name(&self, tool: &str) -> &str {
        if let Some((_, e)) = self.tool_exposure.iter().find(|(k, _)| k == tool) {
            return e;
        }
        self.tool_exposure
            .iter()
            .find(|(k, _)| k.contains('*') && wildcard_match(k, tool, false))
            .map_or(&self.exposure_name, |(_, e)| e)
    }
    /// The exposures its tools can have, known before it connects: the server's and every
    /// `toolExposure` value.
    pub fn configured_exposures(&self) -> Vec<Exposure> {
        std::iter::once(self.exposure)
            .chain(self.tool_exposure.iter().map(|(_, e)| Exposure::parse(e)))
            .collect()
    }
    /// Whether some tools are declared to the model (the first prompt waits for these servers).
    pub fn has_declared_tools(&self) -> bool {
        self.configured_exposures().iter().any(|e| e.is_declared())
    }
    /// Whether some tools are reached through `codemode` or `tool_search`.
    pub fn has_indirect_tools(&self) -> bool {
        self.configured_exposures().iter().any(|e| e.is_indirect())
    }
    pub fn describe_transport(&self) -> String {
        match &self.transport {
            Transport::Http { url, .. } => url.clone(),
            Transport::Stdio { command, args, .. } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

#[derive(Debug, Default)]
pub struct McpConfig {
    pub servers: Vec<ServerConfig>,
    /// `<file>: <problem>` for every file or entry that was skipped.
    pub errors: Vec<String>,
    /// Resolved `${VAR}` / `!command` values, for redaction.
    pub secrets: Vec<String>,
    /// The top-level `autoEnableCodemode` (the project's value over the user's), when set:
    /// whether `codemode` is turned on for servers with `codemode` tools (default true).
    pub auto_enable_codemode: Option<bool>,
}

impl McpConfig {
    /// Adds servers given for one session (an ACP client's `mcpServers`): one named like a
    /// configured server replaces it.
    pub fn merge(&mut self, other: McpConfig) {
        for server in other.servers {
            self.servers.retain(|s| s.name != server.name);
            self.servers.push(server);
        }
        self.errors.extend(other.errors);
        self.secrets.extend(other.secrets);
    }
}

/// Where values come from: the environment and commands (swapped out in tests).
pub struct Resolver<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub command: &'a dyn Fn(&str) -> Option<String>,
    pub home: PathBuf,
    pub cwd: PathBuf,
}

impl Resolver<'_> {
    fn expand_tilde(&self, value: &str) -> String {
        match value.strip_prefix("~/") {
            Some(rest) => self.home.join(rest).to_string_lossy().into_owned(),
            None => value.to_string(),
        }
    }

    /// `!command` (the whole value) or `${VAR}` references; secrets collects what was resolved.
    pub(super) fn value(&self, raw: &str, secrets: &mut Vec<String>) -> String {
        if let Some(command) = raw.strip_prefix('!') {
            let out = (self.command)(command).unwrap_or_default();
            secrets.push(out.clone());
            return out;
        }
        let mut out = String::new();
        let mut rest = raw;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            match after.find('}') {
                Some(end) => {
                    let value = (self.env)(&after[..end]).unwrap_or_default();
                    secrets.push(value.clone());
                    out.push_str(&value);
                    rest = &after[end + 1..];
                }
                None => {
                    out.push_str(&rest[start..]);
                    rest = "";
                }
            }
        }
        out.push_str(rest);
        out
    }
}

/// The production resolver: the process environment, `sh -c` commands, `$HOME`.
pub fn system_resolver(cwd: &Path) -> Resolver<'static> {
    Resolver {
        env: &|name| std::env::var(name).ok(),
        command: &crate::config::auth::run_command,
        home: crate::paths::home_dir(),
        cwd: cwd.to_path_buf(),
    }
}

/// The user's file.
pub fn user_path(agent_dir: &Path) -> PathBuf {
    agent_dir.join("mcp.json")
}

/// The project's file.
pub fn project_path(cwd: &Path) -> PathBuf {
    cwd.join(".pi").join("mcp.json")
}

struct Entry {
    name: String,
    raw: Map<String, Value>,
    source: PathBuf,
    project: bool,
    override_source: Option<PathBuf>,
}

/// Reads the user file and, when `project_trusted`, the project file.
pub fn load(agent_dir: &Path, cwd: &Path, project_trusted: bool, resolver: &Resolver) -> McpConfig {
    let mut entries: Vec<Entry> = Vec::new();
    let mut errors = Vec::new();
    let mut auto_enable_codemode = None;
    read_file(
        &user_path(agent_dir),
        false,
        &mut entries,
        &mut errors,
        &mut auto_enable_codemode,
    );
    if project_trusted {
        read_file(
            &project_path(cwd),
            true,
            &mut entries,
            &mut errors,
            &mut auto_enable_codemode,
        );
    }
    let mut config = McpConfig {
        errors,
        auto_enable_codemode,
        ..McpConfig::default()
    };
    for entry in entries {
        match resolve(&entry, resolver, &mut config.secrets).map(|mut server| {
            super::oauth::attach(
                &mut server,
                &entry.raw,
                agent_dir,
                resolver,
                &mut config.secrets,
            );
            server
        }) {
            Ok(server) => config.servers.push(server),
            Err(e) => config
                .errors
                .push(format!("{}: {e}", entry.source.display())),
        }
    }
    // Short values (`1`, `on`) would redact too much; real credentials are longer.
    config.secrets.retain(|s| s.len() >= 6);
    config
}

fn read_file(
    path: &Path,
    project: bool,
    entries: &mut Vec<Entry>,
    errors: &mut Vec<String>,
    auto_enable_codemode: &mut Option<bool>,
) {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => return errors.push(format!("{}: {e}", path.display())),
    };
    let parsed: Value = match serde_json::from_str(text.trim_start_matches('\u{feff}')) {
        Ok(v) => v,
        Err(e) => return errors.push(format!("{}: {e}", path.display())),
    };
    match parsed.get("autoEnableCodemode") {
        Some(Value::Bool(value)) => *auto_enable_codemode = Some(*value),
        Some(_) => errors.push(format!(
            "{}: autoEnableCodemode must be a boolean",
            path.display()
        )),
        None => {}
    }
    let servers = match (&parsed, parsed.get("mcpServers")) {
        (Value::Object(_), None) => return,
        (Value::Object(_), Some(Value::Object(servers))) => servers.clone(),
        _ => {
            return errors.push(format!(
                "{}: expected an object with an \"mcpServers\" object",
                path.display()
            ));
        }
    };
    for (name, value) in servers {
        let fail =
            |errors: &mut Vec<String>, e: String| errors.push(format!("{}: {e}", path.display()));
        if project
            && let Value::Object(map) = &value
            && is_override(map)
        {
            let Some(base) = entries.iter().position(|e| e.name == name) else {
                fail(
                    errors,
                    format!(
                        "server \"{name}\" needs \"command\" or \"url\", or a global server to override"
                    ),
                );
                continue;
            };
            if map.keys().any(|k| !OVERRIDE_KEYS.contains(&k.as_str())) {
                fail(
                    errors,
                    format!(
                        "server \"{name}\": an override can only set {}",
                        OVERRIDE_KEYS.join(", ")
                    ),
                );
                continue;
            }
            let mut merged = entries[base].raw.clone();
            merged.extend(map.clone());
            if let Err(e) = validate(&name, &Value::Object(merged.clone())) {
                fail(errors, e);
                continue;
            }
            entries[base].raw = merged;
            entries[base].override_source = Some(path.to_path_buf());
            continue;
        }
        if let Err(e) = validate(&name, &value) {
            fail(errors, e);
            continue;
        }
        let clash = entries
            .iter()
            .find(|e| e.name != name && naming::namespace(&e.name) == naming::namespace(&name));
        if let Some(other) = clash {
            fail(
                errors,
                format!("server \"{name}\" conflicts with \"{}\"", other.name),
            );
            continue;
        }
        // A repository must not pick where a provider's credential goes.
        if project && value.get("auth").is_some() && value.get("url").is_some() {
            fail(
                errors,
                format!("server \"{name}\": auth is only allowed in the global mcp.json"),
            );
            continue;
        }
        let Value::Object(raw) = value else { continue };
        let entry = Entry {
            name: name.clone(),
            raw,
            source: path.to_path_buf(),
            project,
            override_source: None,
        };
        match entries.iter().position(|e| e.name == name) {
            Some(at) => entries[at] = entry,
            None => entries.push(entry),
        }
    }
}

/// No `command`, `url` or `type`: it overrides a server defined elsewhere.
fn is_override(entry: &Map<String, Value>) -> bool {
    !["command", "url", "type"]
        .iter()
        .any(|k| entry.contains_key(*k))
}

fn string_map(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|m| m.values().all(Value::is_string))
}

/// pi's checks and messages for one entry.
pub fn validate(name: &str, raw: &Value) -> Result<(), String> {
    if !naming::is_valid_server_name(name) {
        return Err(format!(
            "invalid server name \"{name}\" (use letters, digits, \"_\" and \"-\")"
        ));
    }
    let Value::Object(entry) = raw else {
        return Err(format!("server \"{name}\" must be an object"));
    };
    let bad = |e: &str| Err(format!("server \"{name}\": {e}"));
    if entry.get("enabled").is_some_and(|v| !v.is_boolean()) {
        return bad("enabled must be a boolean");
    }
    if entry.get("description").is_some_and(|v| !v.is_string()) {
        return bad("description must be a string");
    }
    if entry
        .get("timeout")
        .is_some_and(|v| !v.as_f64().is_some_and(|t| t > 0.0))
    {
        return bad("timeout must be a positive number of seconds");
    }
    let kind = entry.get("type").and_then(Value::as_str);
    if kind == Some("sse") {
        return bad("legacy SSE transport is not supported; use the streamable HTTP URL");
    }
    let url = entry.get("url").and_then(Value::as_str);
    let command = entry.get("command").and_then(Value::as_str);
    let mut http_url = None;
    if let Some(url) = url
        && matches!(kind, None | Some("http") | Some("streamable-http"))
    {
        http_url = Some(url);
        if !(url.starts_with("http://") || url.starts_with("https://"))
            || url.parse::<ureq::http::Uri>().is_err()
        {
            return bad("url must be an http or https URL");
        }
        if entry.get("headers").is_some_and(|h| !string_map(h)) {
            return bad("headers must map names to strings");
        }
        if let Some(problem) = super::oauth::validate(entry.get("oauth")) {
            return bad(problem);
        }
    } else if command.is_some() && matches!(kind, None | Some("stdio")) {
        if entry.get("args").is_some_and(|a| {
            !a.as_array()
                .is_some_and(|items| items.iter().all(Value::is_string))
        }) {
            return bad("args must be an array of strings");
        }
        if entry.get("env").is_some_and(|e| !string_map(e)) {
            return bad("env must map names to strings");
        }
        if entry.get("cwd").is_some_and(|c| !c.is_string()) {
            return bad("cwd must be a string");
        }
    } else {
        return Err(format!(
            "server \"{name}\" needs either \"command\" (stdio) or \"url\" (streamable HTTP)"
        ));
    }
    let exposures = EXPOSURES.map(|e| format!("\"{e}\"")).join(", ");
    let is_exposure = |v: &Value| {
        v.as_str()
            .is_some_and(|s| EXPOSURES.contains(&s) || s == "codemode-deferred")
    };
    if entry.get("exposure").is_some_and(|v| !is_exposure(v)) {
        return bad(&format!("exposure must be one of {exposures}"));
    }
    if let Some(map) = entry.get("toolExposure") {
        let Value::Object(map) = map else {
            return bad("toolExposure must map tool names to exposures");
        };
        if let Some((tool, _)) = map.iter().find(|(_, v)| !is_exposure(v)) {
            return bad(&format!(
                "toolExposure \"{tool}\" must be one of {exposures}"
            ));
        }
    }
    if let (Some(url), Some(auth)) = (http_url, entry.get("auth")) {
        return check_auth(auth, url).map_or(Ok(()), bad);
    }
    Ok(())
}

/// pi 1.6.0's checks of an HTTP server's `auth` (its credential goes to `url`).
fn check_auth(auth: &Value, url: &str) -> Option<&'static str> {
    let provider = auth.get("provider").and_then(Value::as_str);
    if !auth.is_object() || provider.is_none_or(str::is_empty) {
        return Some("auth.provider must be a provider name");
    }
    let uri = url.parse::<ureq::http::Uri>().ok()?;
    let host = uri.host().unwrap_or("").to_ascii_lowercase();
    let https = uri.scheme_str() == Some("https");
    if !https && !["localhost", "127.0.0.1", "[::1]"].contains(&host.as_str()) {
        return Some("auth requires an https URL, or http on localhost, 127.0.0.1, or [::1]");
    }
    None
}

/// An HTTP server's credentials as written in mcp.json (`pi mcp add --header` writes them
/// literally): every header value (the token after a scheme word such as `Bearer `), the
/// credential-like query parameters and the password of the URL.
fn literal_secrets(url: &str, headers: &[(String, String)], secrets: &mut Vec<String>) {
    for (_, value) in headers {
        match value.split_once(' ') {
            // `Bearer <token>`: the scheme word stays readable.
            Some((_, token)) => secrets.push(token.trim().to_string()),
            None => secrets.push(value.clone()),
        }
    }
    secrets.extend(
        crate::redact::url_query_secrets(url)
            .into_iter()
            .chain(crate::redact::url_password(url))
            .map(str::to_string),
    );
}

fn resolve(entry: &Entry, r: &Resolver, secrets: &mut Vec<String>) -> Result<ServerConfig, String> {
    let raw = &entry.raw;
    let text = |key: &str| raw.get(key).and_then(Value::as_str).map(str::to_string);
    let pairs = |key: &str, secrets: &mut Vec<String>| -> Vec<(String, String)> {
        raw.get(key)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), r.value(v.as_str().unwrap_or(""), secrets)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let transport = match text("url") {
        Some(url) if raw.get("type").and_then(Value::as_str) != Some("stdio") => {
            let headers = pairs("headers", secrets);
            literal_secrets(&url, &headers, secrets);
            Transport::Http {
                url,
                headers,
                oauth: None,
                provider: None,
            }
        }
        _ => Transport::Stdio {
            command: r.expand_tilde(&text("command").unwrap_or_default()),
            args: raw
                .get("args")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(|s| r.expand_tilde(s))
                        .collect()
                })
                .unwrap_or_default(),
            env: {
                let env = pairs("env", secrets);
                // Literal values (`pi mcp add --env`) of credential-named variables.
                secrets.extend(
                    env.iter()
                        .filter(|(name, value)| crate::redact::is_secret_value_of(name, value))
                        .map(|(_, value)| value.clone()),
                );
                env
            },
            cwd: match text("cwd") {
                Some(dir) => r.cwd.join(r.expand_tilde(&dir)),
                None => r.cwd.clone(),
            },
        },
    };
    let exposure_name = match text("exposure").as_deref() {
        Some("codemode-deferred") | None => "codemode".to_string(),
        Some(other) => other.to_string(),
    };
    Ok(ServerConfig {
        name: entry.name.clone(),
        transport,
        timeout: raw
            .get("timeout")
            .and_then(Value::as_f64)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64),
        enabled: raw.get("enabled").and_then(Value::as_bool).unwrap_or(true),
        description: text("description").filter(|d| !d.trim().is_empty()),
        exposure: Exposure::parse(&exposure_name),
        exposure_name,
        tool_exposure: raw
            .get("toolExposure")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        let name = match v.as_str().unwrap_or("codemode") {
                            "codemode-deferred" => "codemode",
                            other => other,
                        };
                        (k.clone(), name.to_string())
                    })
                    .collect()
            })
            .unwrap_or_default(),
        source: entry.source.clone(),
        project: entry.project,
        override_source: entry.override_source.clone(),
        registered: false,
    })
}

/// A server an extension registered (`registered::Registration`), resolved as an mcp.json entry
/// is (`${VAR}`, `~/`, a relative `cwd`, OAuth settings); the resolved values are added to
/// `secrets`. The registry checked the entry already.
pub fn resolve_registered(
    registration: &super::registered::Registration,
    agent_dir: &Path,
    resolver: &Resolver,
    secrets: &mut Vec<String>,
) -> Result<ServerConfig, String> {
    let Value::Object(raw) = &registration.config else {
        return Err(format!(
            "server \"{}\" must be an object",
            registration.name
        ));
    };
    let entry = Entry {
        name: registration.name.clone(),
        raw: raw.clone(),
        source: PathBuf::from(&registration.extension_path),
        project: false,
        override_source: None,
    };
    let mut found = Vec::new();
    let mut server = resolve(&entry, resolver, &mut found)?;
    super::oauth::attach(&mut server, raw, agent_dir, resolver, &mut found);
    server.registered = true;
    secrets.extend(found.into_iter().filter(|s| s.len() >= 6));
    Ok(server)
}

// ---- edits (`pi mcp add|remove`) -----------------------------------------------------------------

/// An mcp.json that `pi mcp add|remove` could not edit (`Display`: `<path>: <problem>`).
#[derive(Debug)]
pub enum EditError {
    /// Reading the file, creating its folder or writing it back.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// Not an object, or `mcpServers` is not one.
    Shape(PathBuf),
    Encode(serde_json::Error),
}

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EditError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            EditError::Parse { path, source } => write!(f, "{}: {source}", path.display()),
            EditError::Shape(path) => write!(
                f,
                "{}: expected an object with an \"mcpServers\" object",
                path.display()
            ),
            EditError::Encode(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for EditError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EditError::Io { source, .. } => Some(source),
            EditError::Parse { source, .. } | EditError::Encode(source) => Some(source),
            EditError::Shape(_) => None,
        }
    }
}

/// The user file's entry that makes the MCP server at `url` use the login of `provider` (pi
/// 1.6.0's `planRadiusMcpServer`, run after `pi login radius`): the valid server whose `url` is
/// `url` (trailing slashes aside) gets `auth: {provider}` and loses its `oauth` sign-in; without
/// one, a new `{url, auth}` entry named `radius`, or `radius-mcp`, `radius-mcp-2`, … when that
/// namespace is taken. `None` when that server already uses the login (or the file is unreadable:
/// then nothing is touched). The name and the entry.
pub fn plan_login_server(agent_dir: &Path, url: &str, provider: &str) -> Option<(String, Value)> {
    let path = user_path(agent_dir);
    let servers = match std::fs::read_to_string(&path) {
        Ok(text) => match serde_json::from_str::<Value>(text.trim_start_matches('\u{feff}')) {
            Ok(Value::Object(mut root)) => match root.remove("mcpServers") {
                Some(Value::Object(servers)) => servers,
                None => Map::new(),
                Some(_) => return None,
            },
            _ => return None,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
        Err(_) => return None,
    };
    let servers: Vec<(&String, &Value)> = servers
        .iter()
        .filter(|(name, value)| validate(name, value).is_ok())
        .collect();
    let trimmed = |u: &str| u.trim_end_matches('/').to_string();
    let existing = servers
        .iter()
        .find(|(_, value)| value["url"].as_str().map(trimmed) == Some(trimmed(url)));
    if let Some((_, value)) = existing
        && value["auth"]["provider"].as_str() == Some(provider)
    {
        return None;
    }
    let auth = serde_json::json!({"provider": provider});
    let (name, entry) = match existing {
        Some((name, Value::Object(config))) => {
            let mut config = config.clone();
            config.insert("auth".into(), auth);
            config.shift_remove("oauth");
            (name.to_string(), Value::Object(config))
        }
        _ => {
            let taken: Vec<String> = servers
                .iter()
                .map(|(name, _)| naming::namespace(name))
                .collect();
            let mut name = "radius".to_string();
            let mut suffix = 1;
            while taken.contains(&naming::namespace(&name)) {
                name = if suffix == 1 {
                    "radius-mcp".to_string()
                } else {
                    format!("radius-mcp-{suffix}")
                };
                suffix += 1;
            }
            (name, serde_json::json!({"url": url, "auth": auth}))
        }
    };
    Some((name, entry))
}

/// Adds or replaces `name` in the file at `path` (created when missing). Returns whether an
/// entry was replaced.
pub fn add_server(path: &Path, name: &str, entry: Value) -> Result<bool, EditError> {
    let mut replaced = false;
    edit(path, |servers| {
        replaced = servers.insert(name.to_string(), entry).is_some();
        true
    })?;
    Ok(replaced)
}

/// Removes `name` from the file at `path`. Returns false when the file does not define it.
pub fn remove_server(path: &Path, name: &str) -> Result<bool, EditError> {
    if !path.exists() {
        return Ok(false);
    }
    let mut removed = false;
    edit(path, |servers| {
        removed = servers.shift_remove(name).is_some();
        removed
    })?;
    Ok(removed)
}

fn edit(
    path: &Path,
    change: impl FnOnce(&mut Map<String, Value>) -> bool,
) -> Result<(), EditError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => Some(text.trim_start_matches('\u{feff}').to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(EditError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut parsed: Value = match &text {
        Some(text) => serde_json::from_str(text).map_err(|source| EditError::Parse {
            path: path.to_path_buf(),
            source,
        })?,
        None => Value::Object(Map::new()),
    };
    let shape_error = || EditError::Shape(path.to_path_buf());
    let Value::Object(root) = &mut parsed else {
        return Err(shape_error());
    };
    let servers = root
        .entry("mcpServers")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(servers) = servers else {
        return Err(shape_error());
    };
    if !change(servers) {
        return Ok(());
    }
    let indent = text
        .as_deref()
        .and_then(|t| {
            t.lines().find_map(|line| {
                let trimmed = line.trim_start_matches([' ', '\t']);
                (trimmed.len() < line.len() && !trimmed.is_empty())
                    .then(|| line[..line.len() - trimmed.len()].to_string())
            })
        })
        .unwrap_or_else(|| "  ".to_string());
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(&parsed, &mut serializer).map_err(EditError::Encode)?;
    out.push(b'\n');
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| EditError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let temp = path.with_extension(format!("json.tmp-{}", std::process::id()));
    std::fs::write(&temp, &out)
        .and_then(|_| std::fs::rename(&temp, path))
        .map_err(|source| {
            let _ = std::fs::remove_file(&temp);
            EditError::Io {
                path: path.to_path_buf(),
                source,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolver(cwd: &Path) -> Resolver<'static> {
        Resolver {
            env: &|name| (name == "TOKEN").then(|| "tok-secret-1".to_string()),
            command: &|cmd| (cmd == "echo hi").then(|| "from-command".to_string()),
            home: PathBuf::from("/home/u"),
            cwd: cwd.to_path_buf(),
        }
    }

    fn dirs(user: Value, project: Option<Value>) -> (PathBuf, PathBuf) {
        let root =
            std::env::temp_dir().join(format!("pi-rs-mcpcfg-{}", crate::ids::random_hex16()));
        let agent = root.join("agent");
        let cwd = root.join("proj");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::create_dir_all(cwd.join(".pi")).unwrap();
        std::fs::write(agent.join("mcp.json"), user.to_string()).unwrap();
        if let Some(p) = project {
            std::fs::write(cwd.join(".pi/mcp.json"), p.to_string()).unwrap();
        }
        (agent, cwd)
    }

    #[test]
    fn entries_resolve_values_and_report_invalid_ones() {
        let (agent, cwd) = dirs(
            json!({"mcpServers": {
                "fs": {"command": "~/bin/srv", "args": ["~/x", "y"], "env": {"K": "${TOKEN}", "C": "!echo hi", "P": "a${NOPE}b"}, "cwd": "sub", "timeout": 2.5},
                "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}, "exposure": "hidden", "toolExposure": {"search": "direct", "get_*": "hidden"}, "description": "Docs"},
                "old": {"type": "sse", "url": "https://x/sse"},
                "bad name": {"command": "x"},
                "neither": {"enabled": true},
                "badtimeout": {"command": "x", "timeout": 0},
                "off": {"command": "x", "enabled": false, "exposure": "codemode-deferred"},
                "dev_x": {"command": "x"},
                "dev-x": {"command": "y"}
            }}),
            None,
        );
        let config = load(&agent, &cwd, false, &resolver(&cwd));
        let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["fs", "docs", "off", "dev_x"]);
        let fs = &config.servers[0];
        assert_eq!(
            fs.transport,
            Transport::Stdio {
                command: "/home/u/bin/srv".into(),
                args: vec!["/home/u/x".into(), "y".into()],
                env: vec![
                    ("K".into(), "tok-secret-1".into()),
                    ("C".into(), "from-command".into()),
                    ("P".into(), "ab".into())
                ],
                cwd: cwd.join("sub"),
            }
        );
        assert_eq!(fs.timeout, Duration::from_millis(2500));
        assert_eq!(fs.exposure, Exposure::Codemode);
        assert!(fs.has_indirect_tools() && !fs.has_declared_tools());
        let docs = &config.servers[1];
        assert_eq!(docs.tool_exposure("search"), Exposure::Direct);
        assert_eq!(docs.tool_exposure("get_x"), Exposure::Hidden);
        assert_eq!(docs.tool_exposure("other"), Exposure::Hidden);
        assert!(docs.has_declared_tools());
        assert!(!config.servers[2].enabled);
        assert_eq!(config.servers[2].exposure_name, "codemode");
        let errors = config.errors.join("\n");
        for expected in [
            "server \"old\": legacy SSE transport is not supported; use the streamable HTTP URL",
            "invalid server name \"bad name\"",
            "server \"neither\" needs either \"command\" (stdio) or \"url\" (streamable HTTP)",
            "server \"badtimeout\": timeout must be a positive number of seconds",
            "server \"dev-x\" conflicts with \"dev_x\"",
        ] {
            assert!(errors.contains(expected), "{expected} in {errors}");
        }
        assert_eq!(
            config.secrets,
            [
                "tok-secret-1",
                "from-command",
                "tok-secret-1",
                "tok-secret-1"
            ]
        );
    }

    #[test]
    fn project_entries_replace_and_override_only_when_trusted() {
        let (agent, cwd) = dirs(
            json!({"mcpServers": {
                "a": {"command": "a", "env": {"K": "v"}},
                "b": {"command": "b"}
            }}),
            Some(json!({"mcpServers": {
                "a": {"enabled": false},
                "b": {"url": "http://127.0.0.1:1/mcp"},
                "c": {"command": "c"},
                "d": {"enabled": false},
                "a2": {"exposure": "direct", "env": {}}
            }})),
        );
        let untrusted = load(&agent, &cwd, false, &resolver(&cwd));
        assert_eq!(untrusted.servers.len(), 2);
        assert!(untrusted.servers[0].enabled);
        let trusted = load(&agent, &cwd, true, &resolver(&cwd));
        let names: Vec<&str> = trusted.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let a = &trusted.servers[0];
        assert!(!a.enabled);
        assert!(
            matches!(&a.transport, Transport::Stdio { env, .. } if env == &vec![("K".to_string(), "v".to_string())])
        );
        assert!(matches!(
            trusted.servers[1].transport,
            Transport::Http { .. }
        ));
        let errors = trusted.errors.join("\n");
        assert!(
            errors.contains(
                "server \"d\" needs \"command\" or \"url\", or a global server to override"
            )
        );
        assert!(
            errors.contains("server \"a2\" needs \"command\" or \"url\""),
            "{errors}"
        );
    }

    #[test]
    fn edits_keep_other_content_and_indentation() {
        let dir =
            std::env::temp_dir().join(format!("pi-rs-mcpedit-{}", crate::ids::random_hex16()));
        let path = dir.join("mcp.json");
        assert!(!add_server(&path, "x", json!({"command": "x"})).unwrap());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\n  \"mcpServers\": {\n    \"x\": {\n      \"command\": \"x\"\n    }\n  }\n}\n"
        );
        std::fs::write(
            &path,
            "{\n\t\"other\": 1,\n\t\"mcpServers\": {\"x\": {\"command\": \"x\"}}\n}",
        )
        .unwrap();
        assert!(add_server(&path, "x", json!({"url": "http://h/mcp"})).unwrap());
        assert!(add_server(&path, "y", json!({"command": "y"})).is_ok());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with(
                "{\n\t\"other\": 1,\n\t\"mcpServers\": {\n\t\t\"x\": {\n\t\t\t\"url\""
            ),
            "{text}"
        );
        assert!(remove_server(&path, "x").unwrap());
        assert!(!remove_server(&path, "x").unwrap());
        let parsed: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            parsed,
            json!({"other": 1, "mcpServers": {"y": {"command": "y"}}})
        );
        std::fs::write(&path, "[1]").unwrap();
        assert!(
            add_server(&path, "z", json!({}))
                .unwrap_err()
                .to_string()
                .contains("expected an object")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn auth_names_a_provider_for_https_or_loopback_servers_of_the_global_file_only() {
        let check = |entry: Value| validate("s", &entry).err();
        assert_eq!(
            check(json!({"url": "https://h/mcp", "auth": {"provider": "radius"}})),
            None
        );
        for url in [
            "http://localhost:9/mcp",
            "http://127.0.0.1:9/mcp",
            "http://[::1]:9/mcp",
        ] {
            assert_eq!(
                check(json!({"url": url, "auth": {"provider": "radius"}})),
                None,
                "{url}"
            );
        }
        let wrong_host =
            "server \"s\": auth requires an https URL, or http on localhost, 127.0.0.1, or [::1]";
        assert_eq!(
            check(json!({"url": "http://h.example/mcp", "auth": {"provider": "radius"}}))
                .as_deref(),
            Some(wrong_host)
        );
        let no_provider = "server \"s\": auth.provider must be a provider name";
        for auth in [
            json!({}),
            json!({"provider": ""}),
            json!("radius"),
            json!(null),
        ] {
            assert_eq!(
                check(json!({"url": "https://h/mcp", "auth": auth})).as_deref(),
                Some(no_provider)
            );
        }
        // pi checks `auth` of HTTP servers only.
        assert_eq!(check(json!({"command": "x", "auth": 1})), None);

        let (agent, cwd) = dirs(
            json!({"mcpServers": {"r": {"url": "https://h/mcp", "auth": {"provider": "radius"}}}}),
            Some(json!({"mcpServers": {
                "p": {"url": "https://p/mcp", "auth": {"provider": "radius"}},
                "r": {"enabled": false}
            }})),
        );
        let loaded = load(&agent, &cwd, true, &resolver(&cwd));
        let project = cwd.join(".pi/mcp.json");
        assert_eq!(
            loaded.errors,
            [format!(
                "{}: server \"p\": auth is only allowed in the global mcp.json",
                project.display()
            )]
        );
        let [r] = &loaded.servers[..] else {
            panic!("{:?}", loaded.servers)
        };
        assert!(!r.enabled);
        let Transport::Http {
            oauth, provider, ..
        } = &r.transport
        else {
            panic!("{r:?}")
        };
        assert!(oauth.is_none(), "auth turns OAuth off");
        assert_eq!(
            provider,
            &Some(ProviderAuth {
                provider: "radius".into(),
                agent_dir: agent.clone()
            })
        );
    }

    /// 1.6.0's plan after a Radius login: an existing server at the URL (slash aside) gets the
    /// login as its auth and loses its OAuth sign-in, keeping its other keys in place; one that
    /// already uses the login is left alone; an invalid entry neither matches nor takes a name.
    #[test]
    fn a_login_server_is_planned_as_pi_plans_it() {
        let dir = crate::test_support::temp_dir("mcp-login-plan");
        let url = "https://radius.pi.dev/mcp";
        let write = |text: &str| std::fs::write(user_path(&dir), text).unwrap();
        assert_eq!(
            plan_login_server(&dir, url, "radius"),
            Some((
                "radius".into(),
                json!({"url": url, "auth": {"provider": "radius"}})
            ))
        );
        write(
            r#"{"mcpServers": {"r": {"url": "https://radius.pi.dev/mcp/", "oauth": {"clientId": "x"},
                "headers": {"a": "b"}}}}"#,
        );
        assert_eq!(
            plan_login_server(&dir, url, "radius"),
            Some((
                "r".into(),
                json!({"url": "https://radius.pi.dev/mcp/", "headers": {"a": "b"},
                    "auth": {"provider": "radius"}})
            ))
        );
        write(
            r#"{"mcpServers": {"r": {"url": "https://radius.pi.dev/mcp", "auth": {"provider": "radius"}}}}"#,
        );
        assert_eq!(plan_login_server(&dir, url, "radius"), None);
        write(
            r#"{"mcpServers": {"radius": {"command": "x"}, "radius_mcp": {"command": "y"},
                "bad name!": {"url": "https://radius.pi.dev/mcp"}}}"#,
        );
        assert_eq!(
            plan_login_server(&dir, url, "radius").map(|(name, _)| name),
            Some("radius-mcp-2".into())
        );
        write("not json");
        assert_eq!(plan_login_server(&dir, url, "radius"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
