//! What the resource loaders (discovery, skills, prompt templates) share about files: where a
//! resource came from (`SourceInfo`) and directory listings in Node's order (the ignore rules
//! they honor are `crate::ignore`'s, in pi's style). Its own module so the loaders do not import one
//! another in a circle.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// pi's `sourceInfo` of a command: where its file came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceInfo {
    pub path: String,
    /// "auto" (discovered), "local" (settings or explicit path), "cli".
    pub source: String,
    /// "user", "project" or "temporary".
    pub scope: String,
    /// Always "top-level" here ("package" is for settings packages, which we do not resolve).
    pub origin: String,
    pub base_dir: Option<String>,
}

impl SourceInfo {
    /// pi's `createSyntheticSourceInfo`: scope defaults to "temporary".
    pub(crate) fn synthetic(path: &str, source: &str, scope: Option<&str>, base_dir: &str) -> Self {
        SourceInfo {
            path: path.to_string(),
            source: source.to_string(),
            scope: scope.unwrap_or("temporary").to_string(),
            origin: "top-level".to_string(),
            base_dir: Some(base_dir.to_string()),
        }
    }

    /// `{path, source, scope, origin, baseDir?}` in pi's key order.
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        object.insert("path".into(), json!(self.path));
        object.insert("source".into(), json!(self.source));
        object.insert("scope".into(), json!(self.scope));
        object.insert("origin".into(), json!(self.origin));
        if let Some(base_dir) = &self.base_dir {
            object.insert("baseDir".into(), json!(base_dir));
        }
        Value::Object(object)
    }

    /// The seed protocol's `location`: "user", "project", or "path" for anything else.
    pub fn location(&self) -> &'static str {
        match self.scope.as_str() {
            "user" => "user",
            "project" => "project",
            _ => "path",
        }
    }
}

/// Directory entries as (name, path), sorted by name bytes: Node's `readdirSync` returns them
/// sorted, and the order decides collisions. Unreadable directories give nothing.
pub(crate) fn read_dir_sorted(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut entries: Vec<(String, PathBuf)> = read
        .filter_map(Result::ok)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    entries
}
