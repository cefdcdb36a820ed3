//! Path rules shared across modules: the home directory, `~` expansion, lexical normalization
//! (Node's `path.resolve` without touching the disk), and how a model-given path becomes an
//! absolute one, and pi's package folder. Pure functions of their inputs, `$HOME` and the
//! executable's path; nothing here reads the file system.

use std::path::{Component, Path, PathBuf};

/// `$HOME`, or `/` when it is unset.
pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// `~` and `~/…` against `home`; any other path as given.
pub fn expand_tilde(path: &str, home: &Path) -> PathBuf {
    if path == "~" {
        home.to_path_buf()
    } else if let Some(rest) = path.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(path)
    }
}

/// pi's package folder (its README.md, `docs/`, `examples/`), as pi 1.6.0 finds it for a
/// single-binary install: `$PI_PACKAGE_DIR` (`pi_package_dir`, `~` expanded) when set, else the
/// folder of the executable.
pub fn package_dir(pi_package_dir: Option<&str>, home: &Path) -> PathBuf {
    match pi_package_dir.filter(|d| !d.is_empty()) {
        Some(dir) => normalize_lexically(&expand_tilde(dir, home)),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .unwrap_or_default(),
    }
}

/// Unicode spaces models sometimes put into paths; each becomes a plain space.
fn is_unicode_space(ch: char) -> bool {
    matches!(
        ch,
        '\u{00A0}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

/// Strips one leading `@`, turns Unicode spaces into spaces and expands `~` / `~/`.
pub fn expand_path(raw: &str) -> String {
    let without_at = raw.strip_prefix('@').unwrap_or(raw);
    let normalized: String = without_at
        .chars()
        .map(|c| if is_unicode_space(c) { ' ' } else { c })
        .collect();
    if normalized == "~" {
        return home_dir().to_string_lossy().into_owned();
    }
    if let Some(rest) = normalized.strip_prefix("~/") {
        return format!("{}/{}", home_dir().to_string_lossy(), rest);
    }
    normalized
}

/// Lexical `path.resolve(base, p)`: `.` and `..` are folded, symlinks are not looked at.
pub fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => out = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
        }
    }
    out
}

/// Resolves a model-given path against the session cwd (absolute paths are kept).
pub fn resolve_to_cwd(raw: &str, cwd: &Path) -> PathBuf {
    let expanded = expand_path(raw);
    let path = Path::new(&expanded);
    if path.is_absolute() {
        normalize_lexically(path)
    } else {
        normalize_lexically(&cwd.join(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_expand_and_resolve() {
        let cwd = Path::new("/work/proj");
        assert_eq!(
            resolve_to_cwd("@src/a.rs", cwd),
            PathBuf::from("/work/proj/src/a.rs")
        );
        assert_eq!(resolve_to_cwd("../x/./y", cwd), PathBuf::from("/work/x/y"));
        assert_eq!(resolve_to_cwd("/abs/p", cwd), PathBuf::from("/abs/p"));
        assert_eq!(expand_path("a\u{00A0}b\u{3000}c"), "a b c");
        let home = home_dir().to_string_lossy().into_owned();
        assert_eq!(expand_path("~"), home);
        assert_eq!(expand_path("~/f"), format!("{home}/f"));
    }

    #[test]
    fn tilde_expansion() {
        let home = Path::new("/h");
        assert_eq!(expand_tilde("~", home), PathBuf::from("/h"));
        assert_eq!(expand_tilde("~/x/y", home), PathBuf::from("/h/x/y"));
        assert_eq!(expand_tilde("~x", home), PathBuf::from("~x"));
        assert_eq!(expand_tilde("rel/p", home), PathBuf::from("rel/p"));
    }
}
