//! A package folder's resources, as pi 1.6.0 finds them (`docs/packages.md`, "Create a package"):
//! the `pi` manifest of its `package.json` (`extensions`, `skills`, `prompts` arrays of paths and
//! globs relative to the root, with `!`/`+`/`-` entries filtering them) when it lists any
//! resource, else the conventional folders `extensions/`, `skills/`, `prompts/`. A settings
//! entry's filters then narrow what the package declares (`filter::apply`).
//!
//! Folders are walked as everywhere else in pi-rs: skills with the skill walk
//! (`resources::skills`), prompts as every `*.md` below, extensions with pi-rs's extension rules
//! (executables, `index*` of a subfolder, and `.ts`/`.js` modules, which are reported, not run).
//! Themes are not collected: pi-rs has no TUI to show them.
//!
//! Reads directories and `package.json`; writes nothing.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::filter;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Extensions,
    Skills,
    Prompts,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Extensions, Kind::Skills, Kind::Prompts];

    pub fn key(self) -> &'static str {
        match self {
            Kind::Extensions => "extensions",
            Kind::Skills => "skills",
            Kind::Prompts => "prompts",
        }
    }
}

/// The resource arrays of a `package.json`'s `pi` object (an array with a non-string is ignored,
/// as pi does); `None` without a `pi` object.
pub fn read_manifest(root: &Path) -> Option<Vec<(Kind, Vec<String>)>> {
    let text = std::fs::read_to_string(root.join("package.json")).ok()?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let value: Value = serde_json::from_str(text).ok()?;
    let pi = value.get("pi")?.as_object()?;
    Some(
        Kind::ALL
            .iter()
            .filter_map(|kind| {
                let entries = pi.get(kind.key())?.as_array()?;
                let strings: Option<Vec<String>> = entries
                    .iter()
                    .map(|e| e.as_str().map(String::from))
                    .collect();
                strings.map(|s| (*kind, s))
            })
            .collect(),
    )
}

fn manifest_entries(manifest: &Option<Vec<(Kind, Vec<String>)>>, kind: Kind) -> Option<&[String]> {
    manifest
        .as_ref()?
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, e)| e.as_slice())
}

/// Files of one kind under a folder.
pub fn files_in_dir(dir: &Path, kind: Kind) -> Vec<PathBuf> {
    match kind {
        Kind::Skills => crate::resources::skills::collect_skill_files(dir, true),
        Kind::Prompts => crate::resources::discovery::markdown_files_below(dir),
        Kind::Extensions => crate::extensions::entries_at(dir),
    }
}

/// Files named by paths: a file as is, a folder walked.
fn files_from_paths(paths: &[PathBuf], kind: Kind) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_file() {
            files.push(path.clone());
        } else if path.is_dir() {
            files.extend(files_in_dir(path, kind));
        }
    }
    files
}

/// The files a manifest array names (globs expanded, overrides not applied).
fn files_from_manifest(entries: &[String], root: &Path, kind: Kind) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for entry in entries.iter().filter(|e| !filter::is_override(e)) {
        if filter::has_glob(entry) {
            paths.extend(expand_glob(entry, root));
        } else {
            paths.push(crate::paths::normalize_lexically(&root.join(entry)));
        }
    }
    files_from_paths(&paths, kind)
}

/// The files a manifest array enables (its own `!`/`+`/`-` entries applied).
fn manifest_files(entries: &[String], root: &Path, kind: Kind) -> Vec<PathBuf> {
    let all = files_from_manifest(entries, root, kind);
    let overrides: Vec<String> = entries
        .iter()
        .filter(|e| filter::is_override(e))
        .cloned()
        .collect();
    filter::apply(&all, &overrides, root)
}

/// What a package declares of one kind: its manifest array, or its conventional folder.
pub fn declared(root: &Path, kind: Kind) -> Vec<PathBuf> {
    let manifest = read_manifest(root);
    match manifest_entries(&manifest, kind) {
        Some(entries) if !entries.is_empty() => manifest_files(entries, root, kind),
        _ => {
            let dir = root.join(kind.key());
            if dir.is_dir() {
                files_in_dir(&dir, kind)
            } else {
                Vec::new()
            }
        }
    }
}

/// A package's files of each kind with their state, without a settings filter: the manifest when
/// it lists any resource, else the conventional folders. `None` when it has neither (a folder
/// given as a local package is then itself one extension).
pub fn unfiltered(root: &Path) -> Option<Vec<(Kind, Vec<PathBuf>)>> {
    let manifest = read_manifest(root);
    if manifest.as_ref().is_some_and(|m| !m.is_empty()) {
        return Some(
            Kind::ALL
                .iter()
                .map(|kind| {
                    let files = manifest_entries(&manifest, *kind)
                        .map(|e| manifest_files(e, root, *kind))
                        .unwrap_or_default();
                    (*kind, files)
                })
                .collect(),
        );
    }
    let mut any = false;
    let out = Kind::ALL
        .iter()
        .map(|kind| {
            let dir = root.join(kind.key());
            any |= dir.is_dir();
            let files = if dir.is_dir() {
                files_in_dir(&dir, *kind)
            } else {
                Vec::new()
            };
            (*kind, files)
        })
        .collect();
    // pi also counts a `themes/` folder as a package folder.
    (any || root.join("themes").is_dir()).then_some(out)
}

/// Node's `globSync(pattern, {cwd: root})` as pi uses it: matching files and folders, none
/// through a dot-named segment, sorted. `node_modules` is entered only when the pattern names it.
fn expand_glob(pattern: &str, root: &Path) -> Vec<PathBuf> {
    let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
    let glob = crate::glob::Glob::new(
        pattern,
        crate::glob::GlobOptions {
            ignore_case: false,
            braces: crate::glob::Braces::Lists,
        },
    );
    let enter_node_modules = pattern.contains("node_modules");
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), String::new(), 0usize)];
    while let Some((dir, prefix, depth)) = stack.pop() {
        if depth > 16 || found.len() > 10_000 {
            break;
        }
        for (name, path) in crate::resources::files::read_dir_sorted(&dir) {
            if name.starts_with('.') || (name == "node_modules" && !enter_node_modules) {
                continue;
            }
            let relative = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            if glob.matches(&relative) {
                found.push(path.clone());
            }
            let is_real_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
            if is_real_dir {
                stack.push((path, relative, depth + 1));
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::temp_dir;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn manifest_globs_and_exclusions_or_conventional_folders() {
        let root = temp_dir("pkg-collect");
        write(&root.join("res/prompts/a.md"), "a");
        write(&root.join("res/prompts/b.md"), "b");
        write(&root.join("res/prompts/.hidden/c.md"), "c");
        write(
            &root.join("prompts/ignored.md"),
            "conventional, ignored with a manifest",
        );
        write(
            &root.join("package.json"),
            r#"{"name":"x","pi":{"prompts":["./res/prompts/*.md","!b.md"],"skills":[1]}}"#,
        );
        let prompts = declared(&root, Kind::Prompts);
        assert_eq!(prompts, vec![root.join("res/prompts/a.md")]);
        // `skills` holds a non-string: ignored, so the conventional folder counts (none here).
        assert!(declared(&root, Kind::Skills).is_empty());

        let plain = temp_dir("pkg-collect-plain");
        write(&plain.join("prompts/x.md"), "x");
        write(&plain.join("prompts/sub/y.md"), "y");
        let found = unfiltered(&plain).unwrap();
        assert_eq!(
            found[2].1,
            vec![plain.join("prompts/sub/y.md"), plain.join("prompts/x.md")]
        );
        let empty = temp_dir("pkg-collect-empty");
        assert!(unfiltered(&empty).is_none());
        for dir in [root, plain, empty] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
