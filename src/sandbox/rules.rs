//! From a `Policy` to the Landlock allow-list (`landlock::Plan`).
//!
//! Landlock only allows; it cannot deny a folder beneath an allowed one. So "read everything but
//! `~/.ssh`" is built as the tree minus the denied paths: walking from `/` towards each denied
//! path, every directory on the way gets only READ_DIR (its names can be listed), and each of its
//! other entries gets the full rights (symlinks get none: access through them is checked at
//! their target). The denied path itself gets no rule. Rules name inodes, so renaming a denied
//! folder does not make it readable.
//!
//! `/dev` is carved the same way: its entries are not readable except the harmless devices
//! (null, zero, full, random, urandom, tty, ptmx, pts, shm), so a root shell cannot read a raw
//! disk around the rules. In `/proc` only what describes the system is readable, no process's
//! entry: Landlock's ptrace scope refuses `fd/*` and `mem` of a process outside the domain, but
//! not `environ`, `maps` or `cmdline` — pi-rs's own, or the keys in another program's
//! environment. A child adds its own `/proc/<pid>` between fork and exec (see
//! `Ruleset::allow_own_proc`); the entries of its own children stay closed.
//!
//! The walk reads the directories at the time the ruleset is built (each tool start): entries
//! created later directly inside an ancestor of a denied path are not readable by that run.

use std::path::{Path, PathBuf};

use super::landlock::{
    self, IOCTL_DEV, NET_BIND_TCP, NET_CONNECT_TCP, Plan, READ_DIR, READ_FILE, READ_RIGHTS, Rule,
    SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL, WRITE_FILE, WRITE_RIGHTS,
};
use super::policy::{Mode, Policy};

/// Devices a confined process may use: (path, rights beyond reading).
const DEVICES: [(&str, u64); 9] = [
    ("/dev/null", WRITE_FILE | IOCTL_DEV),
    ("/dev/zero", WRITE_FILE | IOCTL_DEV),
    ("/dev/full", WRITE_FILE | IOCTL_DEV),
    ("/dev/random", IOCTL_DEV),
    ("/dev/urandom", IOCTL_DEV),
    ("/dev/tty", WRITE_FILE | IOCTL_DEV),
    ("/dev/ptmx", WRITE_FILE | IOCTL_DEV),
    ("/dev/pts", WRITE_FILE | IOCTL_DEV),
    ("/dev/shm", WRITE_RIGHTS),
];

/// The Landlock plan for `policy` on a kernel with `abi`.
pub fn plan(policy: &Policy, abi: u32) -> Plan {
    let mut plan = Plan {
        scoped: SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET,
        ..Plan::default()
    };
    if !policy.network {
        plan.handled_net = NET_BIND_TCP | NET_CONNECT_TCP;
    }
    if policy.mode == Mode::Off {
        return plan;
    }
    plan.handled_fs = landlock::fs_rights(abi);
    let denied = policy.read_deny.clone();
    let mut carved = denied.clone();
    carved.extend([PathBuf::from("/dev"), PathBuf::from("/proc")]);
    add_carved(&mut plan.rules, Path::new("/"), READ_RIGHTS, &carved);
    plan.rules.push(Rule {
        path: "/dev".into(),
        rights: READ_DIR,
    });
    add_proc_without_processes(&mut plan.rules, &denied);
    for (path, extra) in DEVICES {
        plan.rules.push(Rule {
            path: path.into(),
            rights: READ_FILE | READ_DIR | extra,
        });
    }
    for readable in std::iter::once(&policy.agent_bin).chain(&policy.also_readable) {
        if denied.iter().any(|d| readable.starts_with(d)) {
            plan.rules.push(Rule {
                path: readable.clone(),
                rights: READ_RIGHTS,
            });
        }
    }
    for root in &policy.writable_roots {
        add_carved(&mut plan.rules, root, READ_RIGHTS | WRITE_RIGHTS, &denied);
    }
    plan
}

/// `/proc` listable, its system entries readable, no process's entry (numeric names).
fn add_proc_without_processes(rules: &mut Vec<Rule>, denied: &[PathBuf]) {
    let proc = Path::new("/proc");
    if denied.iter().any(|d| proc.starts_with(d)) {
        return;
    }
    rules.push(Rule {
        path: proc.to_path_buf(),
        rights: READ_DIR,
    });
    let Ok(entries) = std::fs::read_dir(proc) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_process = name.as_encoded_bytes().iter().all(u8::is_ascii_digit);
        let is_symlink = entry.file_type().is_ok_and(|t| t.is_symlink());
        if is_process || is_symlink {
            continue;
        }
        add_carved(rules, &proc.join(name), READ_RIGHTS, denied);
    }
}

/// `rights` beneath `root`, except beneath the `denied` paths (see the module doc).
fn add_carved(rules: &mut Vec<Rule>, root: &Path, rights: u64, denied: &[PathBuf]) {
    if denied.iter().any(|d| root.starts_with(d)) {
        return;
    }
    let inside: Vec<&PathBuf> = denied.iter().filter(|d| d.starts_with(root)).collect();
    if inside.is_empty() {
        rules.push(Rule {
            path: root.to_path_buf(),
            rights,
        });
        return;
    }
    rules.push(Rule {
        path: root.to_path_buf(),
        rights: rights & READ_DIR,
    });
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() {
            continue;
        }
        let child = root.join(entry.file_name());
        if inside.iter().any(|d| d.starts_with(&child)) {
            if kind.is_dir() {
                add_carved(rules, &child, rights, denied);
            }
            continue;
        }
        rules.push(Rule {
            path: child,
            rights,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::policy::{OnUnsupported, temp_folder};

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = temp_folder().join(format!("pi-rs-rules-{tag}-{}", crate::ids::random_hex16()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn policy(mode: Mode, cwd: &Path, deny: Vec<PathBuf>) -> Policy {
        Policy {
            mode,
            network: true,
            on_unsupported: OnUnsupported::Fail,
            extensions: false,
            cwd: cwd.to_path_buf(),
            writable_roots: vec![cwd.to_path_buf()],
            read_deny: deny,
            agent_bin: cwd.join("agent/bin"),
            also_readable: Vec::new(),
        }
    }

    #[test]
    fn a_denied_folder_is_carved_out_of_its_parents() {
        let dir = temp_dir("carve");
        for sub in ["a/secret/inner", "a/open", "b"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join("a/file.txt"), "x").unwrap();
        std::os::unix::fs::symlink(dir.join("a/secret"), dir.join("a/link")).unwrap();
        let secret = dir.join("a/secret");
        let mut rules = Vec::new();
        add_carved(&mut rules, &dir, READ_RIGHTS, std::slice::from_ref(&secret));
        let rights = |p: &Path| rules.iter().find(|r| r.path == p).map(|r| r.rights);
        assert_eq!(rights(&dir), Some(READ_DIR));
        assert_eq!(rights(&dir.join("a")), Some(READ_DIR));
        assert_eq!(rights(&dir.join("b")), Some(READ_RIGHTS));
        assert_eq!(rights(&dir.join("a/open")), Some(READ_RIGHTS));
        assert_eq!(rights(&dir.join("a/file.txt")), Some(READ_RIGHTS));
        assert_eq!(rights(&secret), None);
        assert_eq!(rights(&dir.join("a/secret/inner")), None);
        assert_eq!(rights(&dir.join("a/link")), None, "symlinks carry no rules");
        // A root inside a denied path gets nothing at all.
        let mut rules = Vec::new();
        add_carved(&mut rules, &secret.join("inner"), READ_RIGHTS, &[secret]);
        assert!(rules.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plans_per_mode_and_abi() {
        let dir = temp_dir("plan");
        let off = Policy {
            network: false,
            ..policy(Mode::Off, &dir, Vec::new())
        };
        let plan = plan(&off, 7);
        assert_eq!(plan.handled_fs, 0);
        assert_eq!(plan.handled_net, NET_BIND_TCP | NET_CONNECT_TCP);
        assert!(plan.rules.is_empty());

        let ws = policy(Mode::WorkspaceWrite, &dir, vec![PathBuf::from("/proc/1")]);
        let plan = super::plan(&ws, 3);
        assert_eq!(plan.handled_fs, landlock::fs_rights(3));
        assert_eq!(plan.handled_net, 0);
        let writable = plan
            .rules
            .iter()
            .find(|r| r.path == dir && r.rights & WRITE_FILE != 0);
        assert!(writable.is_some());
        // /dev is listed but only the harmless devices are readable; /proc is readable.
        assert!(
            plan.rules
                .iter()
                .any(|r| r.path == Path::new("/dev") && r.rights == READ_DIR)
        );
        assert!(!plan.rules.iter().any(|r| r.path == Path::new("/dev/sda")));
        assert!(
            plan.rules
                .iter()
                .any(|r| r.path == Path::new("/proc") && r.rights == READ_DIR)
        );
        assert!(
            plan.rules
                .iter()
                .any(|r| r.path == Path::new("/proc/meminfo") && r.rights == READ_RIGHTS)
        );
        assert!(!plan.rules.iter().any(|r| r.path == Path::new("/proc/1")));
        let own = PathBuf::from(format!("/proc/{}", std::process::id()));
        assert!(!plan.rules.iter().any(|r| r.path == own));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
