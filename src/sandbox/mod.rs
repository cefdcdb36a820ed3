//! The tool sandbox: kernel confinement of tool threads and tool children, no helper binary.
//!
//! Input: the effective `Policy` (settings, `--sandbox`, `set_sandbox`; see `policy`). Output:
//! confined threads and children, clear "blocked by the sandbox: …" errors, and the `State`
//! that `get_state` reports.
//!
//! Two entry points, one per kind of tool:
//! - `enter_tool_thread`: called once where an in-process tool's thread starts (read, write,
//!   edit, grep, find, ls). It checks the call's path (for a clear error) and then confines the
//!   calling thread: Landlock confines only the thread that asks, so the agent thread and every
//!   other thread stay free. What the thread spawns (ripgrep, fd) inherits the confinement.
//! - `confine_child`: registers a `pre_exec` hook on a `Command` (the bash tool's shell, and
//!   extensions with `sandbox.extensions: true`). The ruleset and filter are built in the parent;
//!   between fork and exec the child only makes syscalls on memory prepared before the fork.
//!
//! Layers (which one enforces what is listed in `State` and in README "Sandbox"):
//! - Landlock (`landlock`, `rules`): filesystem writes outside the writable roots, reads of denied
//!   paths (pi-rs's own `/proc/<pid>` among them), device access, TCP connect/bind (ABI 4),
//!   signals and abstract unix sockets beyond the sandbox (ABI 6); its ptrace scope keeps a
//!   confined process from tracing or opening the memory and descriptors of any process outside.
//! - mount namespace (`mounts`, children only): the workspace's `.pi/` and `.agents/` read-only.
//! - seccomp (`seccomp`, `network: false` only): every socket that is not AF_UNIX, io_uring.
//! - no_new_privs: set-uid programs (sudo) gain nothing.
//! - capabilities (`caps`): root's capabilities that reach around Landlock are dropped.
//! - in-process (`check_call`): the tool's own path argument, symlinks and `..` resolved, so the
//!   model gets a clear error instead of EACCES; pi-rs's own `/proc/self` for in-process tools
//!   (the ptrace scope does not apply within one process).
//!
//! A tool keeps the confinement it started with: a thread's or process's Landlock domain can be
//! neither widened nor replaced from outside, so `set_sandbox` applies to tools started after it.

mod caps;
pub mod landlock;
pub mod mounts;
pub mod policy;
mod rules;
mod seccomp;

use std::io;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

pub use policy::{Mode, OnUnsupported, Policy};
use policy::{SandboxSettings, UserOverride};

/// The agent's view of the sandbox: both settings files, the user's override, and the policy in
/// effect (shared with each tool as it starts).
pub struct Sandbox {
    user: SandboxSettings,
    project: SandboxSettings,
    user_override: UserOverride,
    cwd: std::path::PathBuf,
    agent_dir: std::path::PathBuf,
    policy: Arc<Policy>,
}

impl Sandbox {
    /// From the settings files' `sandbox` values and `--sandbox`. Returns settings warnings.
    pub fn new(
        user: Option<&Value>,
        project: Option<&Value>,
        cli_mode: Option<Mode>,
        cwd: &Path,
        agent_dir: &Path,
    ) -> (Sandbox, Vec<String>) {
        let mut warnings = Vec::new();
        let user = SandboxSettings::parse(user, "global", &mut warnings);
        let project = SandboxSettings::parse(project, "project", &mut warnings);
        let user_override = UserOverride {
            mode: cli_mode,
            network: None,
        };
        let policy = policy::resolve(
            &user,
            &project,
            user_override,
            cwd,
            agent_dir,
            &mut warnings,
        );
        let sandbox = Sandbox {
            user,
            project,
            user_override,
            cwd: cwd.to_path_buf(),
            agent_dir: agent_dir.to_path_buf(),
            policy: Arc::new(policy),
        };
        (sandbox, warnings)
    }

    /// The policy for a tool starting now.
    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy)
    }

    /// `set_sandbox`: the user's new choice; the project's tightening still applies on top.
    /// Tools already running keep the sandbox they started with.
    pub fn set(&mut self, mode: Mode, network: Option<bool>) -> &Policy {
        self.user_override = UserOverride {
            mode: Some(mode),
            network: network.or(self.user_override.network),
        };
        let policy = policy::resolve(
            &self.user,
            &self.project,
            self.user_override,
            &self.cwd,
            &self.agent_dir,
            &mut Vec::new(),
        );
        self.policy = Arc::new(policy);
        &self.policy
    }
}

/// What the running kernel offers, detected once.
#[derive(Clone, Copy, Debug)]
pub struct Support {
    /// Landlock ABI in use (0: none), after `PI_SANDBOX_LANDLOCK_ABI_LIMIT`.
    pub abi: u32,
    pub seccomp: bool,
}

pub fn support() -> Support {
    Support {
        abi: landlock::abi(),
        seccomp: seccomp::available(),
    }
}

/// Why the kernel cannot enforce `policy`'s core promise, if it cannot.
pub fn unsupported_reason(policy: &Policy, support: Support) -> Option<String> {
    if policy.mode != Mode::Off && support.abi == 0 {
        return Some(format!(
            "sandbox mode {} needs Landlock, which this kernel does not offer",
            policy.mode.as_str()
        ));
    }
    if !policy.network && support.abi < 4 && !support.seccomp {
        return Some(
            "network: false needs Landlock ABI 4 or seccomp, and this kernel offers neither"
                .to_string(),
        );
    }
    None
}

/// Why a tool or a child may not run under the sandbox. `Display` is the tool error (or
/// `extension_error`) text the model and the client see; every one starts "blocked by the
/// sandbox: ".
#[derive(Debug)]
pub enum Blocked {
    /// The kernel cannot enforce the policy and `sandbox.onUnsupported` is "fail".
    Unsupported(String),
    Ruleset(io::Error),
    /// Entering the confinement on the tool's thread failed.
    Confine(io::Error),
    /// The call's path is outside what the policy allows (the whole sentence).
    Path(String),
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocked::Unsupported(reason) => write!(
                f,
                "blocked by the sandbox: {reason} (sandbox.onUnsupported is \"fail\")"
            ),
            Blocked::Ruleset(e) => {
                write!(f, "blocked by the sandbox: cannot build the ruleset: {e}")
            }
            Blocked::Confine(e) => {
                write!(f, "blocked by the sandbox: cannot confine the tool: {e}")
            }
            Blocked::Path(sentence) => f.write_str(sentence),
        }
    }
}

impl std::error::Error for Blocked {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Blocked::Ruleset(e) | Blocked::Confine(e) => Some(e),
            Blocked::Unsupported(_) | Blocked::Path(_) => None,
        }
    }
}

/// Everything a thread or child needs to confine itself, built before it does.
struct Confinement {
    ruleset: Option<landlock::Ruleset>,
    /// Rights a child gets on its own `/proc/<pid>` (added between fork and exec; 0: none).
    own_proc_rights: u64,
    filter: Option<seccomp::Filter>,
    /// A child's read-only `.pi`/`.agents` (see `mounts`).
    mounts: Option<mounts::Plan>,
}

impl Confinement {
    /// `Ok(None)`: nothing to confine (sandbox off, or unsupported with `onUnsupported: warn`,
    /// which the agent reported as a warning record: then the tools run unconfined).
    fn prepare(policy: &Policy, for_child: bool) -> Result<Option<Confinement>, Blocked> {
        if !policy.is_active() {
            return Ok(None);
        }
        let support = support();
        if let Some(reason) = unsupported_reason(policy, support) {
            return match policy.on_unsupported {
                OnUnsupported::Fail => Err(Blocked::Unsupported(reason.to_string())),
                OnUnsupported::Warn => Ok(None),
            };
        }
        let mut ruleset = None;
        let mut own_proc_rights = 0;
        if support.abi > 0 {
            let started = std::time::Instant::now();
            let plan = rules::plan(policy, support.abi);
            let handles_something = plan.handled_fs != 0
                || (support.abi >= 4 && plan.handled_net != 0)
                || (support.abi >= 6 && plan.scoped != 0);
            if handles_something {
                let created =
                    landlock::Ruleset::create(&plan, support.abi).map_err(Blocked::Ruleset)?;
                log::debug!(
                    "sandbox: {} Landlock rules built in {:?}",
                    plan.rules.len(),
                    started.elapsed()
                );
                ruleset = Some(created);
                if for_child {
                    own_proc_rights = plan.handled_fs & landlock::READ_RIGHTS;
                }
            }
        }
        let filter = match policy.network || !support.seccomp {
            true => None,
            false => seccomp::network_filter(),
        };
        let mounts = match for_child {
            true => child_mounts(policy)?,
            false => None,
        };
        Ok(Some(Confinement {
            ruleset,
            own_proc_rights,
            filter,
            mounts,
        }))
    }

    /// no_new_privs, the dangerous capabilities dropped, the Landlock domain, the seccomp filter —
    /// on the calling thread.
    /// Async-signal-safe (used between fork and exec): syscalls only, no allocation.
    fn enter(&self) -> io::Result<()> {
        // First, while root may still mount; the capability drop and Landlock then keep the
        // mounts in place.
        if let Some(mounts) = &self.mounts {
            mounts.enter()?;
        }
        // SAFETY: prctl on the calling thread only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        caps::drop_dangerous()?;
        if let Some(ruleset) = &self.ruleset {
            if self.own_proc_rights != 0 {
                // A child's own /proc entry did not exist when the rules were made.
                ruleset.allow_own_proc(self.own_proc_rights)?;
            }
            landlock::restrict_self(ruleset.raw_fd())?;
        }
        if let Some(filter) = &self.filter {
            filter.install()?;
        }
        Ok(())
    }
}

/// The mounts a child needs, or why it may not run. Without namespaces `onUnsupported` decides:
/// `fail` refuses the child, `warn` runs it without them (Landlock still applies) and logs why.
fn child_mounts(policy: &Policy) -> Result<Option<mounts::Plan>, Blocked> {
    if policy.mode == Mode::Off {
        return Ok(None);
    }
    let plan =
        mounts::plan(policy).map_err(|e| Blocked::Path(format!("blocked by the sandbox: {e}")))?;
    let Some(plan) = plan else {
        return Ok(None);
    };
    match mounts::available() {
        Ok(()) => Ok(Some(plan)),
        Err(why) => match policy.on_unsupported {
            OnUnsupported::Fail => Err(Blocked::Unsupported(namespace_gap(&why))),
            OnUnsupported::Warn => {
                log::warn!(
                    "sandbox: {}; the child runs without that",
                    namespace_gap(&why)
                );
                Ok(None)
            }
        },
    }
}

/// Why `.pi`/`.agents` cannot be kept read-only for children, in words.
fn namespace_gap(why: &str) -> String {
    format!(
        "keeping the workspace's .pi/ and .agents/ read-only for the shell needs a mount \
         namespace, which this system refuses ({why})"
    )
}

/// Where an in-process tool's thread starts: checks the call's path, then confines this thread.
/// `Err` is the tool's error result; the tool must not run.
pub fn enter_tool_thread(
    policy: &Policy,
    tool: &str,
    args: &Value,
    cwd: &Path,
) -> Result<(), Blocked> {
    let Some(confinement) = Confinement::prepare(policy, false)? else {
        return Ok(());
    };
    check_call(policy, tool, args, cwd).map_err(Blocked::Path)?;
    confinement.enter().map_err(Blocked::Confine)
}

/// Makes `command`'s child confine itself between fork and exec. `Err`: the command must not run.
pub fn confine_child(command: &mut Command, policy: &Policy) -> Result<(), Blocked> {
    use std::os::unix::process::CommandExt;
    let Some(confinement) = Confinement::prepare(policy, true)? else {
        return Ok(());
    };
    // SAFETY: `enter` only makes syscalls on memory prepared before the fork (no allocation, no
    // locks), which is what a pre_exec hook may do.
    unsafe {
        command.pre_exec(move || confinement.enter());
    }
    Ok(())
}

/// The in-process layer: the path a file tool is about to use, resolved the way the tool resolves
/// it (cwd, `~`, `@`, `..`) and then through symlinks, against the policy. Also called on its own
/// for tools whose reading and writing an ACP client does (Landlock cannot see those), whatever
/// the kernel supports.
pub fn check_call(policy: &Policy, tool: &str, args: &Value, cwd: &Path) -> Result<(), String> {
    if policy.mode == Mode::Off {
        return Ok(());
    }
    let raw = args.get("path").and_then(Value::as_str);
    let (writes, raw) = match (tool, raw) {
        ("write" | "edit", Some(raw)) => (true, raw),
        ("read", Some(raw)) => (false, raw),
        ("grep" | "find" | "ls", raw) => (false, raw.unwrap_or(".")),
        _ => return Ok(()),
    };
    let lexical = crate::paths::resolve_to_cwd(raw, cwd);
    let real = policy::canonical(&lexical, Path::new("/"));
    let shown = if real == lexical {
        lexical.display().to_string()
    } else {
        format!("{} (resolves to {})", lexical.display(), real.display())
    };
    if policy.read_deny.iter().any(|d| real.starts_with(d)) {
        let what = if writes { "write to" } else { "read of" };
        return Err(format!(
            "blocked by the sandbox: {what} a denied path: {shown}"
        ));
    }
    // pi's own configuration in the workspace: what a trusted project's next start runs
    // outside the sandbox (children are held back by `mounts`). A symlinked `.pi` is protected
    // at its target too.
    if writes
        && mounts::PROTECTED.iter().any(|own| {
            let named = policy.cwd.join(own);
            real.starts_with(&named)
                || lexical.starts_with(&named)
                || real.starts_with(policy::canonical(&named, Path::new("/")))
        })
    {
        return Err(format!(
            "blocked by the sandbox: write to pi's own configuration in the workspace: {shown}"
        ));
    }
    if writes && !policy.writable_roots.iter().any(|r| real.starts_with(r)) {
        let what = match policy.mode {
            Mode::ReadOnly => "write in read-only mode",
            _ => "write outside the workspace",
        };
        return Err(format!("blocked by the sandbox: {what}: {shown}"));
    }
    Ok(())
}

/// The effective sandbox as `get_state` reports it (`sandbox` field).
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct State {
    pub mode: &'static str,
    pub network: bool,
    /// False when the kernel cannot enforce the mode and `onUnsupported` is `warn`.
    pub enforced: bool,
    /// Landlock ABI in use (0: none).
    pub landlock_abi: u32,
    pub layers: Layers,
    /// Gaps on this kernel, in words.
    pub not_enforced: Vec<String>,
    pub writable_roots: Vec<String>,
    pub read_deny: Vec<String>,
    pub on_unsupported: &'static str,
    pub extensions: bool,
}

/// What each layer enforces right now (empty: the layer is not used).
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Layers {
    pub landlock: Vec<&'static str>,
    pub seccomp: Vec<&'static str>,
    pub no_new_privs: bool,
    /// Root's capabilities that reach around the sandbox (modules, raw I/O, mount, ptrace, …)
    /// are dropped.
    pub capabilities_dropped: bool,
    /// What the children's own mount namespace keeps read-only (see `mounts`).
    pub mount_namespace: Vec<&'static str>,
    pub in_process: Vec<&'static str>,
}

/// Describes `policy` on this kernel.
pub fn state(policy: &Policy, support: Support) -> State {
    let active = policy.is_active();
    let fs = policy.mode != Mode::Off;
    let abi = support.abi;
    let unsupported = unsupported_reason(policy, support);
    let mut landlock = Vec::new();
    let mut not_enforced = Vec::new();
    let enforcing = active && unsupported.is_none();
    if enforcing && abi > 0 {
        if fs {
            landlock.extend([
                "filesystem writes",
                "reads of denied paths",
                "device access",
            ]);
            landlock.push("pi-rs's /proc/<pid>");
            if abi < 2 {
                not_enforced
                    .push("renames and links across folders are all denied (ABI < 2)".into());
            }
            if abi < 3 {
                not_enforced.push("truncate(2) outside the writable roots (ABI < 3)".into());
            }
            if abi < 5 {
                not_enforced.push("ioctl on devices (ABI < 5)".into());
            }
        }
        if !policy.network && abi >= 4 {
            landlock.push("TCP connect and bind");
        }
        if abi >= 6 {
            landlock.push("signals and abstract unix sockets beyond the sandbox");
        } else {
            not_enforced
                .push("signals and abstract unix sockets beyond the sandbox (ABI < 6)".into());
        }
    }
    let mut seccomp_layer = Vec::new();
    if enforcing && !policy.network {
        if support.seccomp {
            seccomp_layer.extend(["sockets other than AF_UNIX", "io_uring"]);
        } else {
            not_enforced.push("UDP and other non-TCP sockets (no seccomp)".into());
        }
    }
    if let Some(reason) = &unsupported {
        not_enforced.insert(0, reason.clone());
    }
    let mut mount_namespace = Vec::new();
    if enforcing
        && fs
        && policy
            .writable_roots
            .iter()
            .any(|r| policy.cwd.starts_with(r))
    {
        match mounts::available() {
            Ok(()) => mount_namespace.push("the workspace's .pi/ and .agents/ (children)"),
            Err(why) => not_enforced.push(namespace_gap(&why)),
        }
    }
    let in_process = if fs && enforcing {
        vec![
            "tool path arguments (clear errors)",
            "pi-rs's /proc/self for in-process tools",
        ]
    } else {
        Vec::new()
    };
    let shown = |paths: &[std::path::PathBuf]| {
        paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    };
    State {
        mode: policy.mode.as_str(),
        network: policy.network,
        enforced: !active || unsupported.is_none(),
        landlock_abi: abi,
        layers: Layers {
            landlock,
            seccomp: seccomp_layer,
            no_new_privs: enforcing,
            capabilities_dropped: enforcing,
            mount_namespace,
            in_process,
        },
        not_enforced,
        writable_roots: shown(&policy.writable_roots),
        read_deny: if fs {
            shown(&policy.read_deny)
        } else {
            Vec::new()
        },
        on_unsupported: match policy.on_unsupported {
            OnUnsupported::Fail => "fail",
            OnUnsupported::Warn => "warn",
        },
        extensions: policy.extensions,
    }
}

/// The warning text for `onUnsupported: warn` on a kernel that cannot enforce `policy`.
pub fn unenforced_warning(policy: &Policy, support: Support) -> Option<String> {
    if !policy.is_active() || policy.on_unsupported != OnUnsupported::Warn {
        return None;
    }
    let reason = unsupported_reason(policy, support)?;
    Some(format!(
        "the sandbox is not enforced: {reason}; tools run without it (sandbox.onUnsupported is \"warn\")"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    fn workspace_policy(cwd: &Path) -> Policy {
        let user = SandboxSettings {
            mode: Some(Mode::WorkspaceWrite),
            ..SandboxSettings::default()
        };
        policy::resolve(
            &user,
            &SandboxSettings::default(),
            UserOverride::default(),
            cwd,
            &cwd.join("agent"),
            &mut Vec::new(),
        )
    }

    #[test]
    fn path_checks_name_the_reason_and_the_resolved_target() {
        let dir =
            policy::temp_folder().join(format!("pi-rs-sandbox-{}", crate::ids::random_hex16()));
        let cwd = dir.join("work");
        std::fs::create_dir_all(&cwd).unwrap();
        std::os::unix::fs::symlink("/etc", cwd.join("etc-link")).unwrap();
        let policy = workspace_policy(&cwd);
        let check = |tool: &str, args: Value| check_call(&policy, tool, &args, &cwd);
        assert_eq!(check("write", json!({"path":"a/b.txt"})), Ok(()));
        assert_eq!(
            check("write", json!({"path":"/etc/x"})),
            Err("blocked by the sandbox: write outside the workspace: /etc/x".into())
        );
        assert_eq!(
            check("edit", json!({"path":"etc-link/passwd"})),
            Err(format!(
                "blocked by the sandbox: write outside the workspace: {}/etc-link/passwd (resolves to /etc/passwd)",
                cwd.display()
            ))
        );
        let escaped = check(
            "write",
            json!({"path":"../../../../../../../../etc/up.txt"}),
        )
        .unwrap_err();
        assert!(escaped.contains("write outside the workspace"), "{escaped}");
        // The temp folder stays writable.
        let temp = policy::temp_folder().join("x.txt");
        assert_eq!(check("write", json!({"path": temp})), Ok(()));
        // Reads: only denied paths are refused.
        assert_eq!(check("read", json!({"path":"/etc/hostname"})), Ok(()));
        let ssh = crate::paths::home_dir().join(".ssh/id_rsa");
        let denied = check("read", json!({"path": ssh})).unwrap_err();
        assert!(denied.starts_with("blocked by the sandbox: read of a denied path: "));
        let own = check("read", json!({"path":"/proc/self/environ"})).unwrap_err();
        assert!(own.contains("read of a denied path"), "{own}");
        assert!(check("ls", json!({"path": cwd.join("agent")})).is_err());
        // pi's own configuration, also through a symlinked `.pi`.
        let own = check("write", json!({"path":".pi/mcp.json"})).unwrap_err();
        assert!(own.contains("pi's own configuration"), "{own}");
        std::fs::create_dir_all(cwd.join("config/pi")).unwrap();
        std::os::unix::fs::symlink("config/pi", cwd.join(".pi")).unwrap();
        let linked = check("write", json!({"path":"config/pi/mcp.json"})).unwrap_err();
        assert!(linked.contains("pi's own configuration"), "{linked}");
        assert_eq!(check("write", json!({"path":"config/other.json"})), Ok(()));
        // Other tools and a sandbox that is off are not checked here.
        assert_eq!(check("bash", json!({"command":"true"})), Ok(()));
        let off = Policy::off(&cwd, &cwd.join("agent"));
        assert_eq!(
            check_call(&off, "write", &json!({"path":"/etc/x"}), &cwd),
            Ok(())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn state_lists_layers_and_gaps_per_abi() {
        let cwd = PathBuf::from("/");
        let mut policy = workspace_policy(&cwd);
        policy.network = false;
        let full = state(
            &policy,
            Support {
                abi: 7,
                seccomp: true,
            },
        );
        assert!(full.enforced);
        assert!(full.layers.landlock.contains(&"TCP connect and bind"));
        assert_eq!(
            full.layers.seccomp,
            ["sockets other than AF_UNIX", "io_uring"]
        );
        assert!(full.not_enforced.is_empty(), "{:?}", full.not_enforced);
        let old = state(
            &policy,
            Support {
                abi: 3,
                seccomp: true,
            },
        );
        assert!(!old.layers.landlock.contains(&"TCP connect and bind"));
        assert!(old.enforced);
        assert_eq!(old.not_enforced.len(), 2);
        let none = state(
            &policy,
            Support {
                abi: 0,
                seccomp: false,
            },
        );
        assert!(!none.enforced);
        assert!(none.layers.landlock.is_empty());
        policy.on_unsupported = OnUnsupported::Warn;
        assert!(
            unenforced_warning(
                &policy,
                Support {
                    abi: 0,
                    seccomp: false
                }
            )
            .is_some()
        );
        assert!(
            unenforced_warning(
                &policy,
                Support {
                    abi: 7,
                    seccomp: true
                }
            )
            .is_none()
        );
        let off = state(
            &Policy::off(&cwd, &cwd),
            Support {
                abi: 7,
                seccomp: true,
            },
        );
        assert!(off.enforced && !off.layers.no_new_privs && off.layers.landlock.is_empty());
    }
}
