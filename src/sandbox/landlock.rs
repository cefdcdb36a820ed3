//! Landlock through raw syscalls (no helper, no crate): ABI detection, the access-right bits each
//! ABI knows, and a ruleset built from a list of `(path, rights)` rules.
//!
//! A ruleset is created in the calling thread and turned into a domain by `restrict_self` on the
//! thread (or child, between fork and exec) that is to be confined; it never touches other threads.
//! Rights the running kernel does not know are masked off, so one rule list serves every ABI.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

// Filesystem rights (include/uapi/linux/landlock.h).
pub const EXECUTE: u64 = 1 << 0;
pub const WRITE_FILE: u64 = 1 << 1;
pub const READ_FILE: u64 = 1 << 2;
pub const READ_DIR: u64 = 1 << 3;
pub const REMOVE_DIR: u64 = 1 << 4;
pub const REMOVE_FILE: u64 = 1 << 5;
#[cfg_attr(not(test), allow(dead_code))]
pub const MAKE_CHAR: u64 = 1 << 6;
pub const MAKE_DIR: u64 = 1 << 7;
pub const MAKE_REG: u64 = 1 << 8;
pub const MAKE_SOCK: u64 = 1 << 9;
pub const MAKE_FIFO: u64 = 1 << 10;
#[cfg_attr(not(test), allow(dead_code))]
pub const MAKE_BLOCK: u64 = 1 << 11;
pub const MAKE_SYM: u64 = 1 << 12;
/// ABI 2: link or rename into another directory.
pub const REFER: u64 = 1 << 13;
/// ABI 3: truncate(2), ftruncate(2), open(O_TRUNC).
pub const TRUNCATE: u64 = 1 << 14;
/// ABI 5: ioctl(2) on character and block devices.
pub const IOCTL_DEV: u64 = 1 << 15;

// Network rights (ABI 4).
pub const NET_BIND_TCP: u64 = 1 << 0;
pub const NET_CONNECT_TCP: u64 = 1 << 1;

// Scopes (ABI 6).
pub const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
pub const SCOPE_SIGNAL: u64 = 1 << 1;

/// Rights that make sense on a file that is not a directory (the kernel refuses the others).
pub const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
/// Reading and running what is there.
pub const READ_RIGHTS: u64 = EXECUTE | READ_FILE | READ_DIR;
/// Changing files and directories. Device nodes are never made (MAKE_CHAR / MAKE_BLOCK stay
/// denied), so a root shell cannot mknod its way to a raw disk.
pub const WRITE_RIGHTS: u64 = WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_SYM
    | REFER
    | TRUNCATE;

const CREATE_RULESET_VERSION: u32 = 1 << 0;
const RULE_PATH_BENEATH: libc::c_int = 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Environment knob: use at most this Landlock ABI (0 = behave as on a kernel without Landlock).
/// For trying the older-kernel paths on a new kernel; documented in README "Sandbox".
pub const ABI_LIMIT_ENV: &str = "PI_SANDBOX_LANDLOCK_ABI_LIMIT";

/// The kernel's Landlock ABI (0: no Landlock), capped by `PI_SANDBOX_LANDLOCK_ABI_LIMIT`.
pub fn abi() -> u32 {
    static ABI: OnceLock<u32> = OnceLock::new();
    *ABI.get_or_init(|| {
        let kernel = kernel_abi();
        match std::env::var(ABI_LIMIT_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
        {
            Some(limit) => kernel.min(limit),
            None => kernel,
        }
    })
}

/// The ABI the kernel reports, without any cap.
pub fn kernel_abi() -> u32 {
    // SAFETY: the version query takes no attribute pointer.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(version).unwrap_or(0)
}

/// Every filesystem right the given ABI knows.
pub fn fs_rights(abi: u32) -> u64 {
    let mut rights = 0;
    if abi >= 1 {
        rights |= (MAKE_SYM << 1) - 1;
    }
    if abi >= 2 {
        rights |= REFER;
    }
    if abi >= 3 {
        rights |= TRUNCATE;
    }
    if abi >= 5 {
        rights |= IOCTL_DEV;
    }
    rights
}

/// One allow rule: `rights` on `path` and everything beneath it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub path: PathBuf,
    pub rights: u64,
}

/// What a ruleset handles (denies unless a rule allows) and what it allows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub handled_fs: u64,
    pub handled_net: u64,
    pub scoped: u64,
    pub rules: Vec<Rule>,
}

/// A created ruleset, ready for `restrict_self`. Closing it (drop) does not undo a domain.
pub struct Ruleset {
    fd: OwnedFd,
}

impl Ruleset {
    /// Creates the ruleset and adds every rule. A rule whose path cannot be opened (gone since
    /// the plan was made) is skipped: a missing path grants nothing.
    pub fn create(plan: &Plan, abi: u32) -> io::Result<Ruleset> {
        let attr = RulesetAttr {
            handled_access_fs: plan.handled_fs,
            handled_access_net: if abi >= 4 { plan.handled_net } else { 0 },
            scoped: if abi >= 6 { plan.scoped } else { 0 },
        };
        // Older kernels refuse a bigger struct only when the extra words are non-zero; pass the
        // size the ABI knows anyway.
        let size = match abi {
            0..=3 => 8,
            4 | 5 => 16,
            _ => std::mem::size_of::<RulesetAttr>(),
        };
        // SAFETY: `attr` lives across the call and `size` does not exceed it.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                size,
                0u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us (O_CLOEXEC).
        let ruleset = Ruleset {
            fd: unsafe { OwnedFd::from_raw_fd(fd as RawFd) },
        };
        for rule in &plan.rules {
            ruleset.add(rule, plan.handled_fs)?;
        }
        Ok(ruleset)
    }

    fn add(&self, rule: &Rule, handled: u64) -> io::Result<()> {
        let Some(target) = open_path(&rule.path) else {
            return Ok(());
        };
        let mut rights = rule.rights & handled;
        if !target.is_dir {
            rights &= FILE_RIGHTS;
        }
        if rights == 0 {
            return Ok(());
        }
        let attr = PathBeneathAttr {
            allowed_access: rights,
            parent_fd: target.fd.as_raw_fd(),
        };
        // SAFETY: `attr` and the descriptor live across the call.
        let result = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.fd.as_raw_fd(),
                RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0u32,
            )
        };
        if result < 0 {
            let error = io::Error::last_os_error();
            return Err(io::Error::new(
                error.kind(),
                format!("landlock rule for {}: {error}", rule.path.display()),
            ));
        }
        Ok(())
    }

    /// Between fork and exec: `rights` on the calling process's own `/proc/<pid>`, which did not
    /// exist when the rules were listed. Async-signal-safe: open, add_rule, close.
    pub fn allow_own_proc(&self, rights: u64) -> io::Result<()> {
        // SAFETY: a static NUL-terminated path; the descriptor is closed below.
        let fd = unsafe { libc::open(c"/proc/self".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let attr = PathBeneathAttr {
            allowed_access: rights,
            parent_fd: fd,
        };
        // SAFETY: `attr` and both descriptors live across the call.
        let result = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.fd.as_raw_fd(),
                RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0u32,
            )
        };
        let error = io::Error::last_os_error();
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        if result < 0 {
            return Err(error);
        }
        Ok(())
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

struct OpenedPath {
    fd: OwnedFd,
    is_dir: bool,
}

/// `open(O_PATH | O_NOFOLLOW)`: a rule names the inode at that path, never a symlink's target
/// (a symlink planted among the allowed entries must not carry rights into a denied folder).
fn open_path(path: &Path) -> Option<OpenedPath> {
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path; the result is checked.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor we own from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fstat fills `stat`, which is plain data.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return None;
    }
    Some(OpenedPath {
        fd,
        is_dir: stat.st_mode & libc::S_IFMT == libc::S_IFDIR,
    })
}

/// Confines the calling thread (or the child between fork and exec) with `ruleset_fd`.
/// Async-signal-safe: one syscall, no allocation.
pub fn restrict_self(ruleset_fd: RawFd) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor the caller owns.
    let result = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset_fd, 0u32) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_grow_with_the_abi() {
        assert_eq!(fs_rights(0), 0);
        assert_eq!(fs_rights(1), 0x1fff);
        assert_eq!(fs_rights(2), 0x3fff);
        assert_eq!(fs_rights(3), 0x7fff);
        assert_eq!(fs_rights(4), 0x7fff);
        assert_eq!(fs_rights(5), 0xffff);
        assert_eq!(fs_rights(7), 0xffff);
        assert_eq!(READ_RIGHTS & WRITE_RIGHTS, 0);
        assert_eq!(WRITE_RIGHTS & (MAKE_CHAR | MAKE_BLOCK), 0);
    }

    #[test]
    fn a_confined_thread_cannot_write_outside_its_rules() {
        let abi = abi();
        if abi == 0 {
            eprintln!("SKIP: the kernel has no Landlock");
            return;
        }
        let dir = std::env::temp_dir().join(format!(
            "pi-rs-landlock-{}",
            crate::tools::bash::random_hex16()
        ));
        std::fs::create_dir_all(dir.join("ok")).unwrap();
        let ok = dir.join("ok");
        let outside = dir.join("outside.txt");
        let plan = Plan {
            handled_fs: fs_rights(abi),
            rules: vec![
                Rule {
                    path: "/".into(),
                    rights: READ_RIGHTS,
                },
                Rule {
                    path: ok.clone(),
                    rights: WRITE_RIGHTS,
                },
            ],
            ..Plan::default()
        };
        let (inside_result, outside_result) = std::thread::spawn(move || {
            let ruleset = Ruleset::create(&plan, abi).unwrap();
            // SAFETY: prctl on the calling thread only.
            assert_eq!(
                unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) },
                0
            );
            restrict_self(ruleset.raw_fd()).unwrap();
            (
                std::fs::write(ok.join("a.txt"), "x").map_err(|e| e.raw_os_error()),
                std::fs::write(&outside, "x").map_err(|e| e.raw_os_error()),
            )
        })
        .join()
        .unwrap();
        assert_eq!(inside_result, Ok(()));
        assert_eq!(outside_result, Err(Some(libc::EACCES)));
        // This (unconfined) thread still writes anywhere.
        std::fs::write(dir.join("outside.txt"), "x").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
