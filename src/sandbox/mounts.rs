//! The mount layer: pi-rs's own configuration in the workspace (`.pi/`, `.agents/`) is read-only
//! to a sandboxed child and everything it starts, although the workspace around it is writable.
//!
//! Why mounts: a trusted project's next start runs what `.pi/` holds (extensions, MCP servers)
//! outside the sandbox, so the model must not write there. Landlock only allows, and a right on a
//! folder reaches its whole tree, so it cannot carve a read-only hole into a writable workspace.
//! bubblewrap and Codex do it with a read-only bind mount in a mount namespace of the child's own;
//! so does pi-rs, between fork and exec, before Landlock (the two intersect).
//!
//! What the child does (all of it prepared in the parent, so the hook only makes syscalls):
//! 1. a new mount namespace: `unshare(CLONE_NEWNS)` when it may (root with CAP_SYS_ADMIN), else
//!    a new user namespace with it, mapping only its own uid and gid (so files keep their owner);
//! 2. every mount private, so nothing propagates back to pi-rs's namespace;
//! 3. each folder between a writable root and the workspace bound onto itself (a mount point
//!    cannot be renamed: `mv ws ws2; mkdir -p ws/.pi` fails with EBUSY);
//! 4. `.pi` and `.agents` bound onto themselves and remounted read-only (EROFS for every write,
//!    `mv .pi .x` and `rmdir .pi` fail with EBUSY, a hard link into or out of them with EXDEV).
//!
//! Then the capability layer drops CAP_SYS_ADMIN and Landlock forbids mount and umount, so
//! nothing the child runs can take the mounts away; a nested namespace only gets them locked.
//!
//! A missing `.pi`/`.agents` would be created by the model, so the parent creates it empty first
//! (as bubblewrap creates a missing mount point); it is left in place (git does not track empty
//! folders, pi does not count a bare `.pi` as a project resource), because removing it while a
//! process the model left behind still lives would detach the mount there. A symlinked `.pi` is
//! refused: a mount lands on the link's target, and the link itself could be swapped.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::Policy;

/// pi's configuration in the workspace that a later start loads (and may run). `AGENTS.md` is a
/// context file and stays writable, as in pi.
pub const PROTECTED: [&str; 2] = [".pi", ".agents"];

/// Environment knob: behave as on a system without user or mount namespaces (to try that path
/// where they exist). Documented in README "Sandbox".
pub const NO_NAMESPACES_ENV: &str = "PI_SANDBOX_NO_NAMESPACES";

/// What a child mounts, prepared before the fork.
pub struct Plan {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Bound onto themselves (cannot be renamed away).
    pinned: Vec<CString>,
    /// Bound onto themselves read-only.
    read_only: Vec<CString>,
}

/// The mounts `policy` needs for a child: `Ok(None)` when the workspace is not writable (mode
/// `off`, or `read-only` with the cwd outside the temp folder). Creates a missing `.pi`/`.agents`
/// empty. `Err` is the reason the child may not run.
pub fn plan(policy: &Policy) -> Result<Option<Plan>, String> {
    let cwd = &policy.cwd;
    if !policy.writable_roots.iter().any(|r| cwd.starts_with(r)) {
        return Ok(None);
    }
    let mut read_only = Vec::new();
    for name in PROTECTED {
        let path = cwd.join(name);
        ensure_folder(&path)?;
        read_only.push(path);
    }
    let pinned: Vec<PathBuf> = cwd
        .ancestors()
        .filter(|a| {
            policy
                .writable_roots
                .iter()
                .any(|r| a.starts_with(r) && *a != r.as_path())
        })
        .map(Path::to_path_buf)
        .collect();
    // Outermost first, so each inner bind lands on the outer one.
    let pinned = pinned
        .into_iter()
        .rev()
        .map(c_path)
        .collect::<Result<_, _>>()?;
    let read_only = read_only
        .into_iter()
        .map(c_path)
        .collect::<Result<_, _>>()?;
    Ok(Some(Plan::new(pinned, read_only)))
}

impl Plan {
    fn new(pinned: Vec<CString>, read_only: Vec<CString>) -> Plan {
        // SAFETY: no arguments, no side effects.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Plan {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            pinned,
            read_only,
        }
    }

    /// Enters a new mount namespace and makes the mounts. Async-signal-safe (used between fork
    /// and exec): syscalls on memory prepared before the fork.
    pub fn enter(&self) -> io::Result<()> {
        // SAFETY: unshare of the calling (single-threaded, just forked) process.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            // SAFETY: as above.
            if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // pi-rs is not dumpable, which makes its /proc/self files root's: dumpable for
            // the moment of the writes (a sandboxed process still cannot trace it: Landlock's
            // scope), then not again until exec.
            // SAFETY: prctl on the calling process.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
            // "deny" is needed before an unprivileged gid_map; missing on old kernels.
            let _ = write_file(c"/proc/self/setgroups", b"deny");
            let maps = write_file(c"/proc/self/uid_map", &self.uid_map)
                .and_then(|()| write_file(c"/proc/self/gid_map", &self.gid_map));
            // SAFETY: as above.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
            maps?;
        }
        mount(None, c"/", libc::MS_REC | libc::MS_PRIVATE)?;
        for path in &self.pinned {
            mount(Some(path), path, libc::MS_BIND | libc::MS_REC)?;
        }
        for path in &self.read_only {
            mount(Some(path), path, libc::MS_BIND | libc::MS_REC)?;
            // A remount must keep the flags the mount already has (the kernel refuses to clear
            // them in a user namespace).
            // SAFETY: statvfs fills the zeroed struct; `path` is a valid C string.
            let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
            for (st, ms) in [
                (libc::ST_NOSUID, libc::MS_NOSUID),
                (libc::ST_NODEV, libc::MS_NODEV),
                (libc::ST_NOEXEC, libc::MS_NOEXEC),
                (libc::ST_NOATIME, libc::MS_NOATIME),
                (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
                (libc::ST_RELATIME, libc::MS_RELATIME),
            ] {
                if stat.f_flag & st != 0 {
                    flags |= ms;
                }
            }
            mount(None, path, flags)?;
        }
        // The working folder was entered before the mounts: entered again by name, relative
        // paths go through them (else `.pi` would be looked up below a pinned folder's mount).
        let mut cwd = [0u8; libc::PATH_MAX as usize];
        // SAFETY: getcwd writes at most `cwd.len()` bytes, NUL included; chdir reads them.
        unsafe {
            if libc::getcwd(cwd.as_mut_ptr().cast(), cwd.len()).is_null()
                || libc::chdir(cwd.as_ptr().cast()) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Whether this system lets a child make the mounts (user namespaces may be turned off, or
/// refused by a security module): tried once, in a forked child, on the temp folder. `Err` says
/// why not.
pub fn available() -> Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE.get_or_init(probe).clone()
}

fn probe() -> Result<(), String> {
    if std::env::var_os(NO_NAMESPACES_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        return Err(format!("{NO_NAMESPACES_ENV} is set"));
    }
    let temp = c_path(super::policy::temp_folder())?;
    let plan = Plan::new(Vec::new(), vec![temp]);
    // SAFETY: the child only runs `enter` (async-signal-safe) and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = match plan.enter() {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(255).clamp(1, 255),
        };
        // SAFETY: leaves the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return Err(format!("waitpid: {}", io::Error::last_os_error()));
        }
    }
    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
        Some(0) => Ok(()),
        Some(code) => Err(io::Error::from_raw_os_error(code).to_string()),
        None => Err(format!("the probe ended with status {status}")),
    }
}

/// `path` as an existing folder (or file) that is not a symlink: created empty when missing.
fn ensure_folder(path: &Path) -> Result<(), String> {
    if let Err(e) = std::fs::create_dir(path)
        && e.kind() != io::ErrorKind::AlreadyExists
    {
        return Err(format!("cannot create {}: {e}", path.display()));
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(format!(
            "{} is a symbolic link, so it cannot be kept read-only for the shell (a mount lands \
             on the link's target, and the link itself could be replaced); make it a real folder",
            path.display()
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn c_path(path: PathBuf) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{} holds a NUL byte", path.display()))
}

fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: open/write/close on a valid C string and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let result = match usize::try_from(written) {
            Ok(n) if n == bytes.len() => Ok(()),
            _ => Err(io::Error::last_os_error()),
        };
        libc::close(fd);
        result
    }
}

fn mount(
    source: Option<&CString>,
    target: &std::ffi::CStr,
    flags: libc::c_ulong,
) -> io::Result<()> {
    let source = source.map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: valid C strings or null, no filesystem type or data.
    let done = unsafe {
        libc::mount(
            source,
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}
