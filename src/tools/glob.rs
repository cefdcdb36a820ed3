//! A small glob matcher and directory walker for the grep/find fallbacks used when `rg`/`fd` are
//! not installed.
//!
//! Globs: `*` (within one path segment), `**` (any number of segments), `?`, `[abc]`, `[!a-z]`,
//! `{a,b}`. The walker visits a tree depth-first in name order, skips `.git` and `node_modules`,
//! and honors simple `.gitignore` rules (no negation) in every directory it enters. It stops
//! early when the cancel flag is raised.

use std::path::{Path, PathBuf};

use super::CancelFlag;

/// Expands `{a,b}` alternatives (nested too) into plain patterns.
pub fn expand_braces(pattern: &str) -> Vec<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let Some(open) = chars.iter().position(|c| *c == '{') else {
        return vec![pattern.to_string()];
    };
    let mut depth = 0;
    let mut close = None;
    let mut commas = Vec::new();
    for (index, ch) in chars.iter().enumerate().skip(open) {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(index);
                    break;
                }
            }
            ',' if depth == 1 => commas.push(index),
            _ => {}
        }
    }
    let Some(close) = close else {
        return vec![pattern.to_string()];
    };
    let head: String = chars[..open].iter().collect();
    let tail: String = chars[close + 1..].iter().collect();
    let mut bounds = vec![open];
    bounds.extend(&commas);
    bounds.push(close);
    let mut out = Vec::new();
    for window in bounds.windows(2) {
        let middle: String = chars[window[0] + 1..window[1]].iter().collect();
        out.extend(expand_braces(&format!("{head}{middle}{tail}")));
    }
    out
}

/// Whether `text` (a `/`-separated path or a name) matches `pattern`.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    expand_braces(pattern).iter().any(|p| {
        let p: Vec<char> = p.chars().collect();
        match_from(&p, &text)
    })
}

fn match_from(pattern: &[char], text: &[char]) -> bool {
    if pattern.is_empty() {
        return text.is_empty();
    }
    if pattern.starts_with(&['*', '*']) {
        let rest = &pattern[2..];
        if rest.is_empty() {
            return true;
        }
        if rest[0] == '/' {
            // `**/` matches zero or more whole segments.
            let after = &rest[1..];
            if match_from(after, text) {
                return true;
            }
            return (0..text.len()).any(|i| text[i] == '/' && match_from(after, &text[i + 1..]));
        }
        return (0..=text.len()).any(|i| match_from(rest, &text[i..]));
    }
    match pattern[0] {
        '*' => (0..=text.len())
            .take_while(|&i| i == 0 || text[i - 1] != '/')
            .any(|i| match_from(&pattern[1..], &text[i..])),
        '?' => !text.is_empty() && text[0] != '/' && match_from(&pattern[1..], &text[1..]),
        '[' => match class_match(pattern, text.first().copied()) {
            Some((true, used)) => match_from(&pattern[used..], &text[1..]),
            Some((false, _)) => false,
            None => !text.is_empty() && text[0] == '[' && match_from(&pattern[1..], &text[1..]),
        },
        '\\' if pattern.len() > 1 => {
            !text.is_empty() && text[0] == pattern[1] && match_from(&pattern[2..], &text[1..])
        }
        literal => !text.is_empty() && text[0] == literal && match_from(&pattern[1..], &text[1..]),
    }
}

/// Matches a `[...]` class at the start of `pattern`; returns (matched, pattern chars used), or
/// `None` when the bracket is not closed (then it is a literal `[`).
fn class_match(pattern: &[char], ch: Option<char>) -> Option<(bool, usize)> {
    let mut index = 1;
    let negated = matches!(pattern.get(1), Some('!') | Some('^'));
    if negated {
        index += 1;
    }
    let mut matched = false;
    let mut first = true;
    while index < pattern.len() {
        let c = pattern[index];
        if c == ']' && !first {
            let Some(ch) = ch.filter(|c| *c != '/') else {
                return Some((false, index + 1));
            };
            let _ = ch;
            return Some((matched != negated, index + 1));
        }
        first = false;
        if index + 2 < pattern.len() && pattern[index + 1] == '-' && pattern[index + 2] != ']' {
            if let Some(ch) = ch
                && c <= ch
                && ch <= pattern[index + 2]
            {
                matched = true;
            }
            index += 3;
        } else {
            if ch == Some(c) {
                matched = true;
            }
            index += 1;
        }
    }
    None
}

/// One `.gitignore` rule.
#[derive(Clone, Debug)]
struct IgnoreRule {
    /// Directory holding the .gitignore.
    base: PathBuf,
    pattern: String,
    anchored: bool,
    dir_only: bool,
}

fn load_gitignore(dir: &Path) -> Vec<IgnoreRule> {
    let Ok(text) = std::fs::read_to_string(dir.join(".gitignore")) else {
        return Vec::new();
    };
    text.lines()
        .map(str::trim_end)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with('!'))
        .map(|line| {
            let dir_only = line.ends_with('/');
            let trimmed = line.trim_end_matches('/');
            let anchored = trimmed.contains('/');
            IgnoreRule {
                base: dir.to_path_buf(),
                pattern: trimmed.trim_start_matches('/').to_string(),
                anchored,
                dir_only,
            }
        })
        .collect()
}

fn is_ignored(rules: &[IgnoreRule], path: &Path, is_dir: bool) -> bool {
    rules.iter().any(|rule| {
        if rule.dir_only && !is_dir {
            return false;
        }
        let Ok(relative) = path.strip_prefix(&rule.base) else {
            return false;
        };
        let relative = relative.to_string_lossy();
        if rule.anchored {
            glob_match(&rule.pattern, &relative)
        } else {
            let name = relative.rsplit('/').next().unwrap_or(&relative);
            glob_match(&rule.pattern, name)
        }
    })
}

/// Walks `root` (hidden entries included), calling `visit(path, is_dir)` for every entry below it
/// until `visit` returns false or `cancel` is raised. Symlinked directories are not followed.
pub fn walk(root: &Path, cancel: &CancelFlag, visit: &mut dyn FnMut(&Path, bool) -> bool) {
    let mut rules = Vec::new();
    walk_dir(root, &mut rules, cancel, visit);
}

fn walk_dir(
    dir: &Path,
    rules: &mut Vec<IgnoreRule>,
    cancel: &CancelFlag,
    visit: &mut dyn FnMut(&Path, bool) -> bool,
) -> bool {
    let added = load_gitignore(dir);
    let added_count = added.len();
    rules.extend(added);
    let mut entries: Vec<(PathBuf, bool)> = match std::fs::read_dir(dir) {
        Ok(read) => read
            .filter_map(Result::ok)
            .map(|entry| {
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                (entry.path(), is_dir)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    entries.sort();
    let mut keep_going = true;
    for (path, is_dir) in entries {
        if cancel.is_cancelled() {
            keep_going = false;
            break;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if is_dir && (name == ".git" || name == "node_modules") {
            continue;
        }
        if is_ignored(rules, &path, is_dir) {
            continue;
        }
        if !visit(&path, is_dir) || (is_dir && !walk_dir(&path, rules, cancel, visit)) {
            keep_going = false;
            break;
        }
    }
    rules.truncate(rules.len() - added_count);
    keep_going
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*.rs", "main.rs"));
        assert!(!glob_match("*.rs", "src/main.rs"));
        assert!(glob_match("**/*.rs", "main.rs"));
        assert!(glob_match("**/*.rs", "src/a/main.rs"));
        assert!(glob_match("src/**/*.spec.ts", "src/a/b/x.spec.ts"));
        assert!(glob_match("src/**/*.spec.ts", "src/x.spec.ts"));
        assert!(glob_match("*.{ts,js}", "a.js"));
        assert!(glob_match("file?.[ch]", "file1.h"));
        assert!(!glob_match("file?.[!ch]", "file1.h"));
        assert!(glob_match("[a-c]*", "banana"));
        assert!(glob_match("**", "any/thing"));
        assert!(!glob_match("a*", "b"));
    }

    #[test]
    fn walk_honors_gitignore_and_skips_git() {
        let root = std::env::temp_dir().join(format!("pi-rs-glob-{}", crate::ids::random_hex16()));
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("build")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join(".gitignore"), "build/\n*.log\n").unwrap();
        std::fs::write(root.join("build/out.txt"), "").unwrap();
        std::fs::write(root.join("src/a.rs"), "").unwrap();
        std::fs::write(root.join("src/x.log"), "").unwrap();
        std::fs::write(root.join(".git/config"), "").unwrap();
        let mut seen = Vec::new();
        walk(&root, &CancelFlag::default(), &mut |path, _| {
            seen.push(
                path.strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .to_string(),
            );
            true
        });
        assert_eq!(seen, [".gitignore", "src", "src/a.rs"]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
