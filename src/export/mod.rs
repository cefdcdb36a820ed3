//! Session export to one self-contained HTML page (the `export_html` command).
//!
//! Input is an [`ExportInput`] the caller builds from the session log (header, every entry of every
//! branch, the active leaf, the system prompt and the tool list). [`render_html`] embeds that data
//! as a script-safe JSON blob into a fixed page whose inline CSS and JS (the `template.*` files
//! next to this one, compiled in) draw the session tree and the conversation in the browser; the
//! page loads nothing from the network. Known secrets (`ExportInput::redactions`) are replaced by
//! `[redacted]` in the embedded data. [`export_to_file`] writes the page atomically (temp file
//! in the target directory, then rename) and returns the path as given. [`export_session_file`]
//! is `pi --export`: a session file read from disk, exported. Nothing here keeps state.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

const TEMPLATE_HTML: &str = include_str!("template.html");
const TEMPLATE_CSS: &str = include_str!("template.css");
const TEMPLATE_JS: &str = include_str!("template.js");

/// Everything the page shows. `entries` are the raw session entries (all branches, file order);
/// `tools` are `(name, description, JSON-schema parameters)`.
#[derive(Clone, Debug, Default)]
pub struct ExportInput {
    pub header: Value,
    pub entries: Vec<Value>,
    pub leaf_id: Option<String>,
    pub system_prompt: String,
    pub tools: Vec<(String, String, Value)>,
    /// Secrets replaced by `[redacted]` in the page (the session log's own list).
    pub redactions: crate::redact::Redactions,
}

/// An export that failed; `Display` is the text the client (`export_html`) or the terminal
/// (`pi --export`) sees.
#[derive(Debug)]
pub enum ExportError {
    /// An output path without a file name.
    InvalidPath(PathBuf),
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `pi --export` of a session file that does not exist.
    NotFound(PathBuf),
    Session(crate::session::SessionError),
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportError::InvalidPath(path) => write!(f, "Invalid export path: {}", path.display()),
            ExportError::Write { path, source } => {
                write!(f, "Failed to write {}: {source}", path.display())
            }
            ExportError::NotFound(path) => write!(f, "File not found: {}", path.display()),
            ExportError::Session(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ExportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExportError::Write { source, .. } => Some(source),
            ExportError::Session(e) => Some(e),
            ExportError::InvalidPath(_) | ExportError::NotFound(_) => None,
        }
    }
}

/// `pi --export <session.jsonl> [out.html]`: the page for the session file at `session_path`
/// (taken from `cwd`, as is `output`), without a system prompt or tool list. Returns the output
/// path as given (or the default name); problems found while reading the session go to
/// `warnings`, one sentence each, also when the export then fails.
pub fn export_session_file(
    cwd: &Path,
    session_path: &str,
    output: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<String, ExportError> {
    let path = cwd.join(session_path);
    if !path.is_file() {
        return Err(ExportError::NotFound(path));
    }
    let (log, found) =
        crate::session::SessionLog::open(&path, None, cwd).map_err(ExportError::Session)?;
    warnings.extend(found);
    let output = output
        .map(String::from)
        .unwrap_or_else(|| default_output_name(&path));
    let input = ExportInput {
        header: log.header().to_value().clone(),
        entries: log.entries_since(None).unwrap_or_default(),
        leaf_id: log.leaf_id().map(str::to_string),
        system_prompt: String::new(),
        tools: Vec::new(),
        redactions: log.redactions(),
    };
    export_to_file(&input, &cwd.join(&output))?;
    Ok(output)
}

/// The whole HTML document for `input`.
pub fn render_html(input: &ExportInput) -> String {
    let json = session_data(input).to_string();
    let data = script_safe_json(&input.redactions.apply(&json));
    fill_template(
        TEMPLATE_HTML,
        &[
            ("STYLE", TEMPLATE_CSS),
            ("SESSION_DATA", &data),
            ("SCRIPT", TEMPLATE_JS),
        ],
    )
}

/// `pi-session-<session file name without a trailing .jsonl>.html`, like the reference's
/// `basename(file, ".jsonl")`: the suffix is case-sensitive and a file named exactly `.jsonl`
/// keeps its name.
pub fn default_output_name(session_file: &Path) -> String {
    let name = session_file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = match name.strip_suffix(".jsonl") {
        Some(stem) if !stem.is_empty() => stem.to_string(),
        _ => name,
    };
    format!("pi-session-{stem}.html")
}

/// Renders `input` and writes it to `output_path` (relative paths resolve against the process
/// cwd). The page first goes to a hidden temp file beside the target and is then renamed over
/// it, so a reader never sees half a page. Returns `output_path` unchanged.
pub fn export_to_file(input: &ExportInput, output_path: &Path) -> Result<PathBuf, ExportError> {
    let html = render_html(input);
    let file_name = output_path
        .file_name()
        .ok_or_else(|| ExportError::InvalidPath(output_path.to_path_buf()))?;
    let dir = match output_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let temp_path = dir.join(format!(
        ".{}.{}-{}.tmp",
        file_name.to_string_lossy(),
        std::process::id(),
        nanos
    ));
    let written = write_and_sync(&temp_path, html.as_bytes())
        .and_then(|()| fs::rename(&temp_path, output_path));
    if let Err(e) = written {
        // The temp file may or may not exist; either way it must not linger.
        let _ = fs::remove_file(&temp_path);
        return Err(ExportError::Write {
            path: output_path.to_path_buf(),
            source: e,
        });
    }
    Ok(output_path.to_path_buf())
}

fn write_and_sync(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// `{header, entries, leafId, systemPrompt, tools:[{name,description,parameters}]}` in the
/// reference's key order.
fn session_data(input: &ExportInput) -> Value {
    let tools = input
        .tools
        .iter()
        .map(|(name, description, parameters)| {
            let mut tool = Map::new();
            tool.insert("name".into(), Value::from(name.as_str()));
            tool.insert("description".into(), Value::from(description.as_str()));
            tool.insert("parameters".into(), parameters.clone());
            Value::Object(tool)
        })
        .collect();
    let mut data = Map::new();
    data.insert("header".into(), input.header.clone());
    data.insert("entries".into(), Value::Array(input.entries.clone()));
    data.insert(
        "leafId".into(),
        input
            .leaf_id
            .clone()
            .map(Value::from)
            .unwrap_or(Value::Null),
    );
    data.insert(
        "systemPrompt".into(),
        Value::from(input.system_prompt.as_str()),
    );
    data.insert("tools".into(), Value::Array(tools));
    Value::Object(data)
}

/// JSON text that can sit inside `<script type="application/json">`: `<`, `>` and `&` become
/// `\u003c`-style escapes (so no `</script>` or `<!--` can appear), and U+2028/U+2029 are escaped
/// too for old JS parsers. These characters only occur inside JSON strings, where the escapes mean
/// the same thing, so `JSON.parse` gives back the original data.
fn script_safe_json(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len() + raw.len() / 16);
    for c in raw.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            _ => out.push(c),
        }
    }
    out
}

/// Replaces each `{{NAME}}` of `template` in one left-to-right pass, so text inserted for one
/// placeholder (session data included) is never scanned for another.
fn fill_template(template: &str, values: &[(&str, &str)]) -> String {
    let extra: usize = values.iter().map(|(_, v)| v.len()).sum();
    let mut out = String::with_capacity(template.len() + extra);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let replaced = after.find("}}").and_then(|end| {
            let name = &after[..end];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v, end))
        });
        match replaced {
            Some((value, end)) => {
                out.push_str(value);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests;
