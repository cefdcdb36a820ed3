//! The one ignore-file matcher: the rules of `.gitignore`-style files met while walking down a
//! tree, asked whether a path below the root is ignored. Used by the resource loaders (skills,
//! prompt templates) and by the directory walker of the find/grep fallbacks.
//!
//! A line: blank lines and `#` comments are skipped (`\#` is a literal `#`); trailing whitespace
//! is dropped; `!` negates (`\!` is a literal `!`); a trailing `/` matches directories only; a
//! pattern with a `/` other than a trailing one (in git's style a leading one too) is matched
//! against the whole path relative to its file's directory, any other against the last
//! component. The last matching rule decides, so a deeper file's rules and a later line win.
//! Globs are [`crate::glob`]'s gitignore dialect.
//!
//! Where callers really differ, [`IgnoreStyle`] says which: git's own nesting (fd, rg: a nested
//! file's rules apply relative to its directory, case-sensitively) or pi's resource loader (a
//! nested file's patterns are prefixed with its directory and handed to the case-insensitive
//! `ignore` package, so an unanchored `x` in `sub/.gitignore` only matches `sub/x`).
//!
//! Reads the ignore files it is given; no other IO.

use std::path::Path;

use crate::glob::{Glob, GlobOptions};

/// The ignore files pi's resource loader reads in each directory (in this order).
pub const PI_RESOURCE_FILES: &[&str] = &[".gitignore", ".ignore", ".fdignore"];
/// The ignore files fd reads (pi's find tool runs fd with `--no-require-git`).
pub const FD_FILES: &[&str] = &[".gitignore", ".ignore", ".fdignore"];
/// The ignore files rg reads.
pub const RG_FILES: &[&str] = &[".gitignore", ".ignore", ".rgignore"];

/// How nested ignore files apply, and whether case matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IgnoreStyle {
    /// git, fd and rg: rules relative to their file's directory, case-sensitive.
    Git,
    /// pi's skills and prompt loaders: patterns prefixed with their file's directory relative to
    /// the root, matched case-insensitively (the `ignore` package's default).
    PiResources,
}

/// The rules met so far, in the order they were read.
#[derive(Debug)]
pub struct IgnoreRules {
    style: IgnoreStyle,
    rules: Vec<IgnoreRule>,
}

#[derive(Debug)]
struct IgnoreRule {
    /// The directory of the rule's file relative to the root, with a trailing `/` (or empty).
    base: String,
    negated: bool,
    dir_only: bool,
    /// Matched against the whole path below `base`, not only the last component.
    anchored: bool,
    glob: Glob,
}

impl IgnoreRules {
    pub fn new(style: IgnoreStyle) -> IgnoreRules {
        IgnoreRules {
            style,
            rules: Vec::new(),
        }
    }

    /// Reads `files` (those that exist) of `dir`, a directory at or below `root`.
    pub fn add_dir(&mut self, dir: &Path, root: &Path, files: &[&str]) {
        let relative_dir = match dir.strip_prefix(root) {
            Ok(relative) => relative.to_string_lossy().into_owned(),
            Err(_) => String::new(),
        };
        for file in files {
            if let Ok(text) = std::fs::read_to_string(dir.join(file)) {
                self.add_lines(&text, &relative_dir);
            }
        }
    }

    /// Adds the rules of one ignore file's text found in `relative_dir` (`""` for the root,
    /// else `/`-separated without a trailing `/`).
    pub fn add_lines(&mut self, text: &str, relative_dir: &str) {
        let prefix = if relative_dir.is_empty() {
            String::new()
        } else {
            format!("{relative_dir}/")
        };
        for line in text.lines() {
            if let Some(rule) = IgnoreRule::parse(line, &prefix, self.style) {
                self.rules.push(rule);
            }
        }
    }

    /// How many rules there are: a walker notes it before entering a directory and
    /// [`truncate`](Self::truncate)s back when it leaves.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Forgets the rules read after the first `len`.
    pub fn truncate(&mut self, len: usize) {
        self.rules.truncate(len);
    }

    /// Whether `relative` (a path below the root, `/`-separated) is ignored.
    pub fn ignores(&self, relative: &str, is_dir: bool) -> bool {
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
    fn parse(line: &str, prefix: &str, style: IgnoreStyle) -> Option<IgnoreRule> {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let (negated, pattern) = match line.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, line.strip_prefix("\\!").map_or(line, |_| &line[1..])),
        };
        let dir_only = pattern.ends_with('/');
        let pattern = pattern.trim_end_matches('/');
        let leading_slash = pattern.starts_with('/');
        let pattern = pattern.trim_start_matches('/');
        if pattern.is_empty() {
            return None;
        }
        let anchored = leading_slash || pattern.contains('/');
        Some(match style {
            IgnoreStyle::Git => IgnoreRule {
                base: prefix.to_string(),
                negated,
                dir_only,
                anchored,
                glob: Glob::new(pattern, GlobOptions::GITIGNORE),
            },
            // pi strips a leading `/` before the `ignore` package sees the line, so in the root's
            // own files `/x` is as unanchored as `x`; a nested file's prefix anchors everything.
            IgnoreStyle::PiResources => IgnoreRule {
                base: String::new(),
                negated,
                dir_only,
                anchored: pattern.contains('/') || !prefix.is_empty(),
                glob: Glob::new(
                    &format!("{prefix}{pattern}"),
                    GlobOptions::GITIGNORE.ignore_case(true),
                ),
            },
        })
    }

    fn matches(&self, relative: &str, is_dir: bool) -> bool {
        if self.dir_only && !is_dir {
            return false;
        }
        let Some(below) = relative.strip_prefix(self.base.as_str()) else {
            return false;
        };
        if self.anchored {
            self.glob.matches(below)
        } else {
            self.glob.matches(below.rsplit('/').next().unwrap_or(below))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(style: IgnoreStyle, files: &[(&str, &str)]) -> IgnoreRules {
        let mut rules = IgnoreRules::new(style);
        for (dir, text) in files {
            rules.add_lines(text, dir);
        }
        rules
    }

    /// Expectations from pi's loader (`prefixIgnorePattern` + the `ignore` package 7.0.17).
    #[test]
    fn pi_resource_rules() {
        let rules = rules(
            IgnoreStyle::PiResources,
            &[
                (
                    "",
                    "*.tmp\nbuild/\n/top.md\n!important.tmp\ndocs/**/x.md\n# c\n\\#hash\n  \nUpper/\n",
                ),
                ("sub", "keep.md\n"),
            ],
        );
        assert!(rules.ignores("a/b.tmp", false));
        assert!(!rules.ignores("a/important.tmp", false));
        assert!(rules.ignores("x/build", true));
        assert!(!rules.ignores("x/build", false));
        assert!(rules.ignores("top.md", false));
        assert!(rules.ignores("a/top.md", false));
        assert!(rules.ignores("sub/keep.md", false));
        assert!(!rules.ignores("sub/deeper/keep.md", false));
        assert!(rules.ignores("docs/a/b/x.md", false));
        assert!(rules.ignores("docs/x.md", false));
        assert!(!rules.ignores("docs/ax.md", false));
        assert!(rules.ignores("#hash", false));
        assert!(!rules.ignores("# c", false));
        // The `ignore` package ignores case.
        assert!(rules.ignores("upper", true));
        assert!(rules.ignores("A.TMP", false));
    }

    /// git's (and fd's, rg's) reading of nested files.
    #[test]
    fn git_rules() {
        let rules = rules(
            IgnoreStyle::Git,
            &[
                ("", "build/\n*.log\n!keep.log\n/root-only\n"),
                ("sub", "*.md\n!README.md\ndeep/x\n\\!bang\n"),
            ],
        );
        assert!(rules.ignores("build", true));
        assert!(rules.ignores("a/build", true));
        assert!(!rules.ignores("build", false));
        assert!(rules.ignores("src/x.log", false));
        assert!(!rules.ignores("src/keep.log", false));
        assert!(rules.ignores("root-only", false));
        assert!(!rules.ignores("a/root-only", false));
        assert!(rules.ignores("sub/a.md", false));
        assert!(rules.ignores("sub/deeper/a.md", false));
        assert!(!rules.ignores("sub/README.md", false));
        assert!(!rules.ignores("a.md", false));
        assert!(rules.ignores("sub/deep/x", false));
        assert!(!rules.ignores("sub/other/deep/x", false));
        assert!(rules.ignores("sub/!bang", false));
        assert!(!rules.ignores("A.LOG", false));
    }
}
