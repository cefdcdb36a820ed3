//! The in-process checks every file tool (read, write, edit, grep, find, ls) makes on a resolved
//! path before touching it. The model is untrusted: a path (or a repository symlink) may name
//! pi-rs's own stdin/stdout/stderr (`/dev/stdin`, `/proc/self/fd/0`, `/proc/<pid>/fd/1`), pi-rs's
//! own `/proc/<pid>/…` files (`environ` holds the keys), or a device, FIFO or socket that blocks or
//! never ends (`/dev/zero`, a FIFO in the repository). All are refused here, in one place; the
//! tool sandbox builds on this module.
//!
//! What this cannot stop: a shell run by `bash` opening `/proc/<pi-rs pid>/fd/1`. For a non-root
//! user, `mark_not_dumpable` closes that (the kernel then lets only root / CAP_SYS_PTRACE open
//! pi-rs's `/proc` entries); for root it is the sandbox's job.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What the tool is about to do with the path (a listing root may be a directory).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Access {
    Read,
    Write,
    /// grep/find/ls: the root of a walk.
    List,
}

/// Marks pi-rs non-dumpable, so children running as the same non-root user can neither open
/// `/proc/<pi-rs pid>/fd/*` nor read `/proc/<pi-rs pid>/environ`. Called once at startup.
pub fn mark_not_dumpable() {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc != 0 {
        log::warn!(
            "cannot mark pi-rs non-dumpable: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// `Ok` when a tool may use `path` (already made absolute by `paths::resolve_to_cwd`) for `access`;
/// otherwise the error text for the tool result.
pub fn check(path: &Path, access: Access) -> Result<(), String> {
    let shown = path.display();
    if let Some(own) = own_proc_entry(path) {
        return Err(format!(
            "Refusing to access {shown}: it is pi-rs's own process information ({})",
            own.display()
        ));
    }
    // stat follows every symlink, `/proc/*/fd/*` ones included, without opening (no blocking).
    let Ok(metadata) = std::fs::metadata(path) else {
        return Ok(()); // does not exist (yet): the tool's own error or a new file
    };
    if is_dev_null(&metadata) {
        return Ok(());
    }
    if let Some(stream) = own_stdio(&metadata) {
        return Err(format!(
            "Refusing to access {shown}: it is pi-rs's own {stream}"
        ));
    }
    let kind = metadata.file_type();
    let special = if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        None
    };
    if let Some(kind) = special {
        let verb = match access {
            Access::Write => "write to",
            Access::Read | Access::List => "read",
        };
        return Err(format!(
            "Refusing to {verb} {shown}: it is {kind}, not a regular file"
        ));
    }
    Ok(())
}

fn is_dev_null(metadata: &std::fs::Metadata) -> bool {
    metadata.file_type().is_char_device()
        && std::fs::metadata("/dev/null").is_ok_and(|null| null.rdev() == metadata.rdev())
}

/// Which of pi-rs's fds 0–2 the file is (same device and inode), if any.
fn own_stdio(metadata: &std::fs::Metadata) -> Option<&'static str> {
    const NAMES: [&str; 3] = ["standard input", "standard output", "standard error"];
    (0..3).find_map(|fd| {
        // SAFETY: fstat writes into the zeroed struct we own; an invalid fd just fails.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        let ok = unsafe { libc::fstat(fd, &mut stat) } == 0;
        (ok && stat.st_dev as u64 == metadata.dev() && stat.st_ino as u64 == metadata.ino())
            .then_some(NAMES[fd as usize])
    })
}

/// When `path` lies under pi-rs's own `/proc/<pid>` (through `/proc/self`, `/proc/thread-self`,
/// the pid, or the id of one of its threads): that directory.
fn own_proc_entry(path: &Path) -> Option<PathBuf> {
    let resolved = real_path(path);
    let mut parts = resolved.strip_prefix("/proc").ok()?.components();
    let first = parts.next()?.as_os_str().to_str()?;
    let id: u32 = first.parse().ok()?;
    let own = std::process::id();
    let ours = id == own || Path::new(&format!("/proc/self/task/{id}")).exists();
    ours.then(|| PathBuf::from(format!("/proc/{id}")))
}

/// The real path of the longest existing prefix of `path`, with the rest appended: `/proc/self`
/// becomes `/proc/<pid>`, a repository symlink its target, while a `/proc/<pid>/fd/0` whose
/// link target is not a path (`pipe:[…]`) keeps its spelling. The approval gate judges paths by
/// this too.
pub fn real_path(path: &Path) -> PathBuf {
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut prefix = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(prefix) {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (prefix.parent(), prefix.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                prefix = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stdio_proc_and_devices_are_refused() {
        for path in ["/proc/self/environ", "/proc/thread-self/environ"] {
            assert!(check(Path::new(path), Access::Read).is_err(), "{path}");
        }
        let own = format!("/proc/{}/cmdline", std::process::id());
        assert!(check(Path::new(&own), Access::Read).is_err());
        assert!(check(Path::new("/dev/zero"), Access::Read).is_err());
        assert!(check(Path::new("/dev/null"), Access::Read).is_ok());
        assert!(check(Path::new("/dev/null"), Access::Write).is_ok());
        assert!(check(Path::new("/proc/1/status"), Access::Read).is_ok());
        assert!(check(Path::new("/etc/hostname"), Access::Read).is_ok());
        assert!(check(Path::new("/nonexistent/file"), Access::Write).is_ok());
    }
}
