//! Path handling shared by the tools (a model-given path becomes an absolute one in
//! `crate::paths`): the extra spellings `read` retries, Node-style file error texts, and the per-file lock that keeps edit
//! and write on the same file from interleaving.
//!
//! Input: raw path strings from tool arguments plus the session cwd. Output: absolute `PathBuf`s,
//! error strings, and `FileLock` guards that release on drop.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};

use crate::paths::{normalize_lexically, resolve_to_cwd};

/// Like `resolve_to_cwd`, but when the file does not exist also tries the spellings macOS uses in
/// screenshot names: a narrow no-break space before AM/PM and a curly apostrophe.
/// (The reference also tries the NFD form; without Unicode tables we skip that variant.)
pub fn resolve_read_path(raw: &str, cwd: &Path) -> PathBuf {
    let resolved = resolve_to_cwd(raw, cwd);
    if resolved.exists() {
        return resolved;
    }
    let text = resolved.to_string_lossy().to_string();
    let am_pm = am_pm_variant(&text);
    if am_pm != text && Path::new(&am_pm).exists() {
        return PathBuf::from(am_pm);
    }
    let curly = text.replace('\'', "\u{2019}");
    if curly != text && Path::new(&curly).exists() {
        return PathBuf::from(curly);
    }
    resolved
}

/// `/ (AM|PM)\./gi` → narrow NBSP before the marker.
fn am_pm_variant(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find(' ') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let marker = after.get(..3).unwrap_or("");
        let lower = marker.to_ascii_lowercase();
        if lower == "am." || lower == "pm." {
            out.push('\u{202F}');
            out.push_str(marker);
            rest = &after[3..];
        } else {
            out.push(' ');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The errno name and libuv message Node uses for an error, e.g. (`ENOENT`, `no such file or directory`).
pub fn errno_parts(error: &io::Error) -> (&'static str, String) {
    let message = |text: &str| text.to_string();
    match error.raw_os_error() {
        Some(libc::ENOENT) => ("ENOENT", message("no such file or directory")),
        Some(libc::EACCES) => ("EACCES", message("permission denied")),
        Some(libc::EPERM) => ("EPERM", message("operation not permitted")),
        Some(libc::EISDIR) => ("EISDIR", message("illegal operation on a directory")),
        Some(libc::ENOTDIR) => ("ENOTDIR", message("not a directory")),
        Some(libc::EEXIST) => ("EEXIST", message("file already exists")),
        Some(libc::ELOOP) => ("ELOOP", message("too many symbolic links encountered")),
        Some(libc::ENAMETOOLONG) => ("ENAMETOOLONG", message("name too long")),
        Some(libc::EROFS) => ("EROFS", message("read-only file system")),
        Some(libc::ENOSPC) => ("ENOSPC", message("no space left on device")),
        Some(libc::EBUSY) => ("EBUSY", message("resource busy or locked")),
        Some(libc::EMFILE) => ("EMFILE", message("too many open files")),
        Some(libc::EINVAL) => ("EINVAL", message("invalid argument")),
        Some(libc::EIO) => ("EIO", message("i/o error")),
        Some(libc::ETXTBSY) => ("ETXTBSY", message("text file is busy")),
        _ => ("UNKNOWN", error.to_string()),
    }
}

/// Node's fs error text: `ENOENT: no such file or directory, access '/abs/path'`.
pub fn node_fs_error(error: &io::Error, syscall: &str, path: &Path) -> String {
    let (code, message) = errno_parts(error);
    format!("{code}: {message}, {syscall} '{}'", path.display())
}

/// Node's text for errors without a path (reads through an open handle): `EISDIR: …, read`.
pub fn node_fs_error_no_path(error: &io::Error, syscall: &str) -> String {
    let (code, message) = errno_parts(error);
    format!("{code}: {message}, {syscall}")
}

struct LockTable {
    busy: Mutex<HashSet<PathBuf>>,
    released: Condvar,
}

fn lock_table() -> &'static LockTable {
    static TABLE: OnceLock<LockTable> = OnceLock::new();
    TABLE.get_or_init(|| LockTable {
        busy: Mutex::new(HashSet::new()),
        released: Condvar::new(),
    })
}

/// Holds the per-file mutation lock until dropped.
pub struct FileLock {
    key: PathBuf,
}

impl FileLock {
    /// Blocks until no other edit/write holds `path` (keyed by its real path when it exists).
    /// Holders only do a read-modify-write of one file, so the wait is short.
    pub fn acquire(path: &Path) -> FileLock {
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| normalize_lexically(path));
        let table = lock_table();
        let mut busy = table.busy.lock().unwrap_or_else(|p| p.into_inner());
        while busy.contains(&key) {
            busy = table.released.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        busy.insert(key.clone());
        FileLock { key }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let table = lock_table();
        let mut busy = table.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.remove(&self.key);
        table.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn am_pm_variant_inserts_narrow_nbsp() {
        assert_eq!(
            am_pm_variant("Shot 1.02.03 PM.png"),
            "Shot 1.02.03\u{202F}PM.png"
        );
        assert_eq!(am_pm_variant("a b"), "a b");
    }

    #[test]
    fn node_error_format() {
        let err = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(
            node_fs_error(&err, "access", Path::new("/x")),
            "ENOENT: no such file or directory, access '/x'"
        );
    }

    #[test]
    fn file_lock_serializes_same_path() {
        let path = std::env::temp_dir().join(format!("pi-rs-lock-test-{}", std::process::id()));
        let first = FileLock::acquire(&path);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let other = path.clone();
        let waiter = std::thread::spawn(move || {
            let _second = FileLock::acquire(&other);
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(50))
                .is_err()
        );
        drop(first);
        assert!(rx.recv_timeout(std::time::Duration::from_secs(5)).is_ok());
        waiter.join().unwrap();
    }
}
