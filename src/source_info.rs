//! pi's `sourceInfo`: where a command's, skill's, prompt's or extension's file came from. A leaf,
//! so resources, extensions and packages can all name it without importing one another.

use serde_json::{Map, Value, json};

/// pi's `sourceInfo` of a command: where its file came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceInfo {
    pub path: String,
    /// "auto" (discovered), "local" (settings or explicit path), "cli".
    pub source: String,
    /// "user", "project" or "temporary".
    pub scope: String,
    /// "top-level", or "package" for a pi package's resources.
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
