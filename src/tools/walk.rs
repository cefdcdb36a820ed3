//! The directory walker of the grep/find fallbacks used when `rg`/`fd` are not installed.
//!
//! It visits a tree depth-first in name order, skips `.git` and `node_modules`, and honors the
//! ignore files the real tool would read (`crate::ignore`, git's style: negation, nested files,
//! directory-only rules) in every directory it enters. It stops early when the cancel flag is
//! raised.

use std::path::{Path, PathBuf};

use crate::child::CancelFlag;
use crate::ignore::{IgnoreRules, IgnoreStyle};

/// Walks `root` (hidden entries included), calling `visit(path, is_dir)` for every entry below it
/// that the `ignore_files` (e.g. `crate::ignore::FD_FILES`) met on the way do not exclude, until
/// `visit` returns false or `cancel` is raised. Symlinked directories are not followed.
pub fn walk(
    root: &Path,
    ignore_files: &[&str],
    cancel: &CancelFlag,
    visit: &mut dyn FnMut(&Path, bool) -> bool,
) {
    let mut walker = Walker {
        root,
        ignore_files,
        rules: IgnoreRules::new(IgnoreStyle::Git),
        cancel,
        visit,
    };
    walker.walk_dir(root);
}

struct Walker<'a> {
    root: &'a Path,
    ignore_files: &'a [&'a str],
    rules: IgnoreRules,
    cancel: &'a CancelFlag,
    visit: &'a mut dyn FnMut(&Path, bool) -> bool,
}

impl Walker<'_> {
    /// False once the walk must stop.
    fn walk_dir(&mut self, dir: &Path) -> bool {
        let rules_before = self.rules.len();
        self.rules.add_dir(dir, self.root, self.ignore_files);
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
            if self.cancel.is_cancelled() {
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
            let relative = path.strip_prefix(self.root).unwrap_or(&path);
            if self.rules.ignores(&relative.to_string_lossy(), is_dir) {
                continue;
            }
            if !(self.visit)(&path, is_dir) || (is_dir && !self.walk_dir(&path)) {
                keep_going = false;
                break;
            }
        }
        self.rules.truncate(rules_before);
        keep_going
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ignore::FD_FILES;

    fn walked(root: &Path, files: &[&str]) -> Vec<String> {
        let mut seen = Vec::new();
        walk(root, files, &CancelFlag::default(), &mut |path, _| {
            let relative = path.strip_prefix(root).unwrap();
            seen.push(relative.to_string_lossy().to_string());
            true
        });
        seen
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
        assert_eq!(walked(&root, FD_FILES), [".gitignore", "src", "src/a.rs"]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// What `fd --hidden` (8.6, in a git checkout: pi passes `--no-require-git` so that it reads
    /// `.gitignore` anywhere) lists for the same tree: nested files apply below their directory,
    /// `!` re-includes, `.ignore`/`.fdignore` count, sibling rules do not leak.
    #[test]
    fn walk_reads_nested_ignore_files_like_fd() {
        let root = std::env::temp_dir().join(format!("pi-rs-glob-{}", crate::ids::random_hex16()));
        for dir in ["a/deep", "b"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join(".gitignore"), "*.log\n!keep.log\n").unwrap();
        std::fs::write(root.join(".fdignore"), "*.tmp\n").unwrap();
        std::fs::write(root.join("a/.ignore"), "*.md\n").unwrap();
        for file in [
            "a/x.md",
            "a/deep/y.md",
            "a/z.log",
            "a/keep.log",
            "b/x.md",
            "b/t.tmp",
        ] {
            std::fs::write(root.join(file), "").unwrap();
        }
        assert_eq!(
            walked(&root, FD_FILES),
            [
                ".fdignore",
                ".gitignore",
                "a",
                "a/.ignore",
                "a/deep",
                "a/keep.log",
                "b",
                "b/x.md"
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
