//! What the resource loaders (discovery, skills, prompt templates) share about files: where a
//! resource came from (`SourceInfo`), directory listings in Node's order, and the ignore files
//! met while walking a tree. Its own module so the loaders do not import one another in a circle.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// pi's `sourceInfo` of a command: where its file came from.
#[derive(Debug, Clone, Default, PartialEq)]
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

// ---------------------------------------------------------------------------------------------
// Ignore files.

/// Rules from `.gitignore`, `.ignore` and `.fdignore` files met while walking down from a root.
/// Patterns of a nested ignore file are prefixed with its directory, as pi does.
#[derive(Debug, Default)]
pub(crate) struct IgnoreRules {
    rules: Vec<IgnoreRule>,
}

#[derive(Debug)]
struct IgnoreRule {
    negated: bool,
    dir_only: bool,
    /// Contains a `/` (other than a trailing one): matched against the whole relative path.
    anchored: bool,
    glob: String,
}

impl IgnoreRules {
    pub(crate) fn add_dir(&mut self, dir: &Path, root: &Path) {
        let prefix = match dir.strip_prefix(root) {
            Ok(rel) if !rel.as_os_str().is_empty() => format!("{}/", rel.to_string_lossy()),
            _ => String::new(),
        };
        for file in [".gitignore", ".ignore", ".fdignore"] {
            let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
                continue;
            };
            for line in text.lines() {
                if let Some(rule) = IgnoreRule::parse(line, &prefix) {
                    self.rules.push(rule);
                }
            }
        }
    }

    /// Whether `relative` (a path below the root, `/`-separated) is ignored; the last matching
    /// rule decides.
    pub(crate) fn ignores(&self, relative: &str, is_dir: bool) -> bool {
        let mut ignored = false;
        for rule in &self.rules {
            if rule.matches(relative, is_dir) {
                ignored = !rule.negated;
            }
        }
        ignored
    }
}

impl IgnoreRule {
    fn parse(line: &str, prefix: &str) -> Option<IgnoreRule> {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            return None;
        }
        let mut pattern = trimmed;
        let negated = pattern.starts_with('!');
        if negated {
            pattern = &pattern[1..];
        }
        let dir_only = pattern.ends_with('/');
        let pattern = pattern.trim_end_matches('/');
        let leading_slash = pattern.starts_with('/');
        let pattern = pattern.trim_start_matches('/');
        if pattern.is_empty() {
            return None;
        }
        let anchored = leading_slash || pattern.contains('/') || !prefix.is_empty();
        Some(IgnoreRule {
            negated,
            dir_only,
            anchored,
            glob: format!("{prefix}{pattern}"),
        })
    }

    fn matches(&self, relative: &str, is_dir: bool) -> bool {
        if self.dir_only && !is_dir {
            return false;
        }
        if self.anchored {
            glob_match(self.glob.as_bytes(), relative.as_bytes())
        } else {
            let name = relative.rsplit('/').next().unwrap_or(relative);
            glob_match(self.glob.as_bytes(), name.as_bytes())
        }
    }
}

/// Glob matching with `*` and `?` (not crossing `/`), `**` (crossing it) and `[…]` classes.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    if pattern.is_empty() {
        return text.is_empty();
    }
    match pattern[0] {
        b'*' if pattern.get(1) == Some(&b'*') => {
            let rest = &pattern[2..];
            let rest = rest.strip_prefix(b"/").unwrap_or(rest);
            (0..=text.len()).any(|i| glob_match(rest, &text[i..]))
        }
        b'*' => {
            let rest = &pattern[1..];
            for i in 0..=text.len() {
                if glob_match(rest, &text[i..]) {
                    return true;
                }
                if i < text.len() && text[i] == b'/' {
                    return false;
                }
            }
            false
        }
        b'?' => !text.is_empty() && text[0] != b'/' && glob_match(&pattern[1..], &text[1..]),
        b'[' => match pattern.iter().position(|&b| b == b']') {
            Some(close) if close > 1 && !text.is_empty() => {
                let class = &pattern[1..close];
                let (negate, class) = match class.first() {
                    Some(b'!') | Some(b'^') => (true, &class[1..]),
                    _ => (false, class),
                };
                let c = text[0];
                let mut hit = false;
                let mut k = 0;
                while k < class.len() {
                    if k + 2 < class.len() && class[k + 1] == b'-' {
                        hit |= class[k] <= c && c <= class[k + 2];
                        k += 3;
                    } else {
                        hit |= class[k] == c;
                        k += 1;
                    }
                }
                hit != negate && glob_match(&pattern[close + 1..], &text[1..])
            }
            _ => !text.is_empty() && text[0] == b'[' && glob_match(&pattern[1..], &text[1..]),
        },
        c => !text.is_empty() && text[0] == c && glob_match(&pattern[1..], &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignore_rules() {
        let mut rules = IgnoreRules::default();
        for (line, prefix) in [
            ("*.tmp", ""),
            ("build/", ""),
            ("/top.md", ""),
            ("keep.md", "sub/"),
            ("!important.tmp", ""),
            ("docs/**/x.md", ""),
        ] {
            if let Some(rule) = IgnoreRule::parse(line, prefix) {
                rules.rules.push(rule);
            }
        }
        assert!(rules.ignores("a/b.tmp", false));
        assert!(!rules.ignores("a/important.tmp", false));
        assert!(rules.ignores("x/build", true));
        assert!(!rules.ignores("x/build", false));
        assert!(rules.ignores("top.md", false));
        assert!(!rules.ignores("a/top.md", false));
        assert!(rules.ignores("sub/keep.md", false));
        assert!(!rules.ignores("sub/deeper/keep.md", false));
        assert!(rules.ignores("docs/a/b/x.md", false));
        assert!(rules.ignores("docs/x.md", false));
        assert!(glob_match(b"[a-c]?.md", b"bx.md"));
        assert!(!glob_match(b"*.md", b"a/b.md"));
    }
}
