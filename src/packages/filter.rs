//! Which of a package's files load, under pi 1.6.0's filter entries (a manifest's arrays and the
//! object form of a `packages` entry): a plain glob includes, `!glob` excludes, `+path` includes
//! one exact path back, `-path` excludes one exact path whatever else says. Globs are minimatch's
//! (case-sensitive, `{a,b}` lists) through `crate::glob`; a glob or exact path is tried against
//! the file's path relative to the package root, its name and its absolute path, and for a
//! `SKILL.md` also against its folder (so `!beta` drops the skill `beta/`).
//!
//! Pure: paths in, a subset out.

use std::path::{Path, PathBuf};

use crate::glob::{Braces, Glob, GlobOptions};

const MINIMATCH: GlobOptions = GlobOptions {
    ignore_case: false,
    braces: Braces::Lists,
};

/// `!x`, `+x`, `-x`.
pub fn is_override(entry: &str) -> bool {
    entry.starts_with(['!', '+', '-'])
}

pub fn has_glob(entry: &str) -> bool {
    entry.contains(['*', '?'])
}

/// The texts a pattern is tried against: relative path, name, absolute path; for a skill file
/// also its folder's.
fn candidates(file: &Path, root: &Path, with_name: bool) -> Vec<String> {
    let text = |p: &Path| p.to_string_lossy().into_owned();
    let relative = |p: &Path| text(p.strip_prefix(root).unwrap_or(p));
    let mut out = vec![relative(file)];
    if with_name {
        out.push(
            file.file_name()
                .map(|n| text(Path::new(n)))
                .unwrap_or_default(),
        );
    }
    out.push(text(file));
    if file.file_name().is_some_and(|n| n == "SKILL.md")
        && let Some(dir) = file.parent()
    {
        out.push(relative(dir));
        if with_name {
            out.push(
                dir.file_name()
                    .map(|n| text(Path::new(n)))
                    .unwrap_or_default(),
            );
        }
        out.push(text(dir));
    }
    out
}

fn matches_glob(file: &Path, patterns: &[&str], root: &Path) -> bool {
    let texts = candidates(file, root, true);
    patterns.iter().any(|pattern| {
        let glob = Glob::new(pattern.trim(), MINIMATCH);
        texts.iter().any(|t| glob.matches(t))
    })
}

fn matches_exact(file: &Path, patterns: &[&str], root: &Path) -> bool {
    let texts = candidates(file, root, false);
    patterns.iter().any(|pattern| {
        let pattern = pattern.trim();
        let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
        let pattern = pattern.trim_end_matches('/');
        texts.iter().any(|t| t == pattern)
    })
}

/// pi's `applyPatterns`: includes (all when none), then `!` excludes, `+` exact includes back,
/// `-` exact excludes. Returns the enabled files in `all`'s order.
pub fn apply(all: &[PathBuf], patterns: &[String], root: &Path) -> Vec<PathBuf> {
    let pick = |prefix: char| -> Vec<&str> {
        patterns
            .iter()
            .filter_map(|p| p.strip_prefix(prefix))
            .collect()
    };
    let (force_in, force_out, excludes) = (pick('+'), pick('-'), pick('!'));
    let includes: Vec<&str> = patterns
        .iter()
        .filter(|p| !is_override(p))
        .map(String::as_str)
        .collect();
    all.iter()
        .filter(|file| {
            let mut on = includes.is_empty() || matches_glob(file, &includes, root);
            if on && !excludes.is_empty() && matches_glob(file, &excludes, root) {
                on = false;
            }
            if !on && !force_in.is_empty() && matches_exact(file, &force_in, root) {
                on = true;
            }
            if on && !force_out.is_empty() && matches_exact(file, &force_out, root) {
                on = false;
            }
            on
        })
        .cloned()
        .collect()
}

/// pi's `applyAutoloadDisabledPatterns` (a project entry with `autoload: false` over the user's
/// entry): only the files a pattern names get a state, the last pattern that names one decides.
pub fn apply_delta(all: &[PathBuf], patterns: &[String], root: &Path) -> Vec<(PathBuf, bool)> {
    let mut states: Vec<(PathBuf, bool)> = Vec::new();
    for pattern in patterns {
        let target = pattern.strip_prefix(['+', '-', '!']).unwrap_or(pattern);
        let enabled = !pattern.starts_with(['-', '!']);
        let exact = pattern.starts_with(['+', '-']);
        for file in all {
            let hit = if exact {
                matches_exact(file, &[target], root)
            } else {
                matches_glob(file, &[target], root)
            };
            if hit {
                match states.iter_mut().find(|(f, _)| f == file) {
                    Some(state) => state.1 = enabled,
                    None => states.push((file.clone(), enabled)),
                }
            }
        }
    }
    states
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(root: &Path, names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(|n| root.join(n)).collect()
    }

    fn names(root: &Path, paths: &[PathBuf]) -> Vec<String> {
        paths
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn includes_excludes_and_exact_overrides() {
        let root = Path::new("/pkg");
        let all = files(
            root,
            &[
                "prompts/review.md",
                "prompts/other.md",
                "skills/alpha/SKILL.md",
                "skills/beta/SKILL.md",
            ],
        );
        let on = |patterns: &[&str]| {
            let patterns: Vec<String> = patterns.iter().map(|s| s.to_string()).collect();
            names(root, &apply(&all, &patterns, root))
        };
        assert_eq!(on(&[]).len(), 4);
        assert_eq!(
            on(&["prompts/*.md"]),
            ["prompts/review.md", "prompts/other.md"]
        );
        assert_eq!(on(&["!beta"]).len(), 3, "a skill's folder name matches");
        assert_eq!(
            on(&["prompts/*.md", "!other.md", "+prompts/other.md"]),
            ["prompts/review.md", "prompts/other.md"]
        );
        assert_eq!(
            on(&["+./prompts/review.md", "-prompts/review.md", "!*.md"]),
            Vec::<String>::new()
        );
        assert_eq!(
            on(&["-skills/alpha"]),
            [
                "prompts/review.md",
                "prompts/other.md",
                "skills/beta/SKILL.md"
            ]
        );
    }

    #[test]
    fn delta_states_only_named_files() {
        let root = Path::new("/pkg");
        let all = files(root, &["a.md", "b.md"]);
        let patterns = vec!["!*.md".to_string(), "+b.md".to_string()];
        let states = apply_delta(&all, &patterns, root);
        assert_eq!(
            states,
            vec![(root.join("a.md"), false), (root.join("b.md"), true)]
        );
    }
}
