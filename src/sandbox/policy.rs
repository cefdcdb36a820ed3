//! The sandbox policy: settings `sandbox` (user file, project file), `--sandbox <mode>` and
//! `set_sandbox` merged into one effective `Policy`, with paths made absolute and canonical.
//!
//! Merging only ever tightens from the project side: the project may raise the mode, turn the
//! network off, add denied paths, ask for `onUnsupported: fail` and sandboxed extensions; its
//! `writableRoots` are ignored (with a warning). The user's own choice (flag or command) sets the
//! base that the project tightens.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// How much the tools may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// No sandbox (today's behaviour).
    Off,
    /// Writes in the working directory, the temp folder and `writableRoots`.
    WorkspaceWrite,
    /// Writes only in the temp folder.
    ReadOnly,
}

impl Mode {
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "off" => Some(Mode::Off),
            "workspace-write" => Some(Mode::WorkspaceWrite),
            "read-only" => Some(Mode::ReadOnly),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::ReadOnly => "read-only",
        }
    }
    /// The valid spellings, for error texts.
    pub const NAMES: &'static str = "off, read-only, workspace-write";
}

/// What happens when the kernel cannot enforce the requested sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnUnsupported {
    /// Refuse to start tools.
    Fail,
    /// Run them unconfined, with a warning record.
    Warn,
}

/// One settings file's `sandbox` object, as written (unset fields are `None`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SandboxSettings {
    pub mode: Option<Mode>,
    pub network: Option<bool>,
    pub writable_roots: Vec<String>,
    pub read_deny: Vec<String>,
    pub on_unsupported: Option<OnUnsupported>,
    pub extensions: Option<bool>,
}

impl SandboxSettings {
    /// Parses a `sandbox` settings value. Bad values are reported and never loosen anything: an
    /// unknown mode counts as `read-only`, an unknown `onUnsupported` as `fail`.
    pub fn parse(value: Option<&Value>, scope: &str, warnings: &mut Vec<String>) -> Self {
        let mut settings = SandboxSettings::default();
        let Some(value) = value else {
            return settings;
        };
        let Some(object) = value.as_object() else {
            warnings.push(format!(
                "{scope} settings: sandbox must be an object; ignored"
            ));
            return settings;
        };
        let mut warn = |text: String| warnings.push(format!("{scope} settings: sandbox.{text}"));
        if let Some(mode) = object.get("mode") {
            settings.mode = match mode.as_str().and_then(Mode::parse) {
                Some(mode) => Some(mode),
                None => {
                    warn(format!(
                        "mode {mode} is not one of {}; using read-only",
                        Mode::NAMES
                    ));
                    Some(Mode::ReadOnly)
                }
            };
        }
        if let Some(network) = object.get("network") {
            settings.network = match network.as_bool() {
                Some(b) => Some(b),
                None => {
                    warn(format!("network {network} is not a boolean; using false"));
                    Some(false)
                }
            };
        }
        if let Some(on) = object.get("onUnsupported") {
            settings.on_unsupported = match on.as_str() {
                Some("fail") => Some(OnUnsupported::Fail),
                Some("warn") => Some(OnUnsupported::Warn),
                _ => {
                    warn(format!(
                        "onUnsupported {on} is not fail or warn; using fail"
                    ));
                    Some(OnUnsupported::Fail)
                }
            };
        }
        if let Some(extensions) = object.get("extensions") {
            settings.extensions = match extensions.as_bool() {
                Some(b) => Some(b),
                None => {
                    warn(format!(
                        "extensions {extensions} is not a boolean; using true"
                    ));
                    Some(true)
                }
            };
        }
        for (key, list) in [
            ("writableRoots", &mut settings.writable_roots),
            ("readDeny", &mut settings.read_deny),
        ] {
            match object.get(key) {
                None => {}
                Some(Value::Array(items)) => {
                    for item in items {
                        match item.as_str() {
                            Some(path) if !path.is_empty() => list.push(path.to_string()),
                            _ => warn(format!("{key} entry {item} is not a path; skipped")),
                        }
                    }
                }
                Some(other) => warn(format!("{key} {other} is not a list of paths; ignored")),
            }
        }
        settings
    }
}

/// The user's own choice at run time (`--sandbox`, `set_sandbox`): replaces the user file's
/// values, never the project's tightening.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UserOverride {
    pub mode: Option<Mode>,
    pub network: Option<bool>,
}

/// The effective sandbox for tools started from now on. Paths are absolute and canonical (as far
/// as they exist), so the kernel rules and the in-process checks agree on them.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub mode: Mode,
    pub network: bool,
    pub on_unsupported: OnUnsupported,
    /// Whether extension processes run inside the sandbox too.
    pub extensions: bool,
    pub cwd: PathBuf,
    /// Where writes are allowed (cwd, temp folder, writableRoots per mode); empty when off.
    pub writable_roots: Vec<PathBuf>,
    /// Where reads are denied (defaults plus settings).
    pub read_deny: Vec<PathBuf>,
    /// `<agentDir>/bin`: executables pi-rs puts on the shell's PATH stay usable inside a denied
    /// agent dir.
    pub agent_bin: PathBuf,
    /// More folders readable inside a denied path: the TypeScript host's script folder
    /// (`<agentDir>/cache/ts-host`) when `extensions` confines the host.
    pub also_readable: Vec<PathBuf>,
}

impl Policy {
    /// The policy that confines nothing.
    #[cfg(test)]
    pub fn off(cwd: &Path, agent_dir: &Path) -> Policy {
        resolve(
            &SandboxSettings::default(),
            &SandboxSettings::default(),
            UserOverride::default(),
            cwd,
            agent_dir,
            &mut Vec::new(),
        )
    }

    /// Whether any confinement applies (a filesystem mode, or the network cut on its own).
    pub fn is_active(&self) -> bool {
        self.mode != Mode::Off || !self.network
    }
}

/// Merges user settings, project settings and the user's override into the effective policy.
pub fn resolve(
    user: &SandboxSettings,
    project: &SandboxSettings,
    user_override: UserOverride,
    cwd: &Path,
    agent_dir: &Path,
    warnings: &mut Vec<String>,
) -> Policy {
    let base_mode = user_override.mode.or(user.mode).unwrap_or(Mode::Off);
    let mode = base_mode.max(project.mode.unwrap_or(Mode::Off));
    let network =
        user_override.network.or(user.network).unwrap_or(true) && project.network.unwrap_or(true);
    let on_unsupported = match (user.on_unsupported, project.on_unsupported) {
        (Some(OnUnsupported::Warn), None | Some(OnUnsupported::Warn)) => OnUnsupported::Warn,
        _ => OnUnsupported::Fail,
    };
    let extensions = user.extensions.unwrap_or(false) || project.extensions.unwrap_or(false);
    if !project.writable_roots.is_empty() {
        warnings.push(
            "project settings: sandbox.writableRoots ignored (a project may tighten the sandbox, \
             never widen it)"
                .to_string(),
        );
    }
    let home = crate::paths::home_dir();
    let absolute = |raw: &str| canonical(&crate::paths::expand_tilde(raw, &home), cwd);
    let cwd_canonical = canonical(cwd, cwd);
    let mut writable_roots = Vec::new();
    if mode != Mode::Off {
        if mode == Mode::WorkspaceWrite {
            writable_roots.push(cwd_canonical.clone());
            writable_roots.extend(user.writable_roots.iter().map(|p| absolute(p)));
        }
        writable_roots.push(temp_folder());
    }
    let mut read_deny = vec![
        canonical(agent_dir, cwd),
        home.join(".ssh"),
        home.join(".aws"),
        home.join(".config/gcloud"),
    ];
    read_deny.extend(credential_files(&home).into_iter().filter(|p| p.exists()));
    read_deny = read_deny.iter().map(|p| canonical(p, cwd)).collect();
    read_deny.dedup();
    // pi-rs's own /proc entry: its environment, command line, memory map.
    read_deny.push(PathBuf::from(format!("/proc/{}", std::process::id())));
    for raw in user.read_deny.iter().chain(&project.read_deny) {
        let path = absolute(raw);
        if !read_deny.contains(&path) {
            read_deny.push(path);
        }
    }
    Policy {
        mode,
        network,
        on_unsupported,
        extensions,
        cwd: cwd_canonical,
        writable_roots,
        read_deny,
        agent_bin: canonical(&agent_dir.join("bin"), cwd),
        also_readable: Vec::new(),
    }
}

/// Credential files and folders beyond the agent dir, `~/.ssh`, `~/.aws` and `~/.config/gcloud`:
/// the other clouds' and tools' default places, and every file or folder the environment names
/// as holding credentials (`KUBECONFIG` is a list). The caller keeps those that exist.
fn credential_files(home: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [".azure", ".kube", ".docker/config.json", ".netrc"]
        .iter()
        .map(|p| home.join(p))
        .collect();
    let named = [
        "GOOGLE_APPLICATION_CREDENTIALS",
        "CLOUDSDK_CONFIG",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AZURE_CONFIG_DIR",
        "AZURE_CLIENT_CERTIFICATE_PATH",
        "AZURE_FEDERATED_TOKEN_FILE",
        "DOCKER_CONFIG",
        "NETRC",
    ];
    for name in named {
        if let Some(value) = std::env::var_os(name).filter(|v| !v.is_empty()) {
            out.push(crate::paths::expand_tilde(&value.to_string_lossy(), home));
        }
    }
    if let Some(list) = std::env::var_os("KUBECONFIG") {
        out.extend(std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()));
    }
    out
}

/// The temp folder writes are allowed in: `$TMPDIR` (canonical), or /tmp when that is unset or
/// the filesystem root.
pub fn temp_folder() -> PathBuf {
    let temp = canonical(&std::env::temp_dir(), Path::new("/"));
    if temp == Path::new("/") {
        PathBuf::from("/tmp")
    } else {
        temp
    }
}

/// Absolute (relative to `base`), `..` folded, symlinks of the longest existing prefix resolved:
/// the name the kernel will see for the inode.
pub fn canonical(path: &Path, base: &Path) -> PathBuf {
    let absolute = crate::paths::normalize_lexically(&base.join(path));
    let mut existing = absolute.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_owned()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return absolute,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> (SandboxSettings, Vec<String>) {
        let mut warnings = Vec::new();
        let settings = SandboxSettings::parse(Some(&value), "global", &mut warnings);
        (settings, warnings)
    }

    #[test]
    fn bad_values_fail_closed() {
        let (settings, warnings) = parse(json!({
            "mode": "readonly", "network": "no", "onUnsupported": 1, "extensions": "yes",
            "writableRoots": "/x", "readDeny": ["/a", 3]
        }));
        assert_eq!(settings.mode, Some(Mode::ReadOnly));
        assert_eq!(settings.network, Some(false));
        assert_eq!(settings.on_unsupported, Some(OnUnsupported::Fail));
        assert_eq!(settings.extensions, Some(true));
        assert!(settings.writable_roots.is_empty());
        assert_eq!(settings.read_deny, vec!["/a".to_string()]);
        assert_eq!(warnings.len(), 6, "{warnings:?}");
        let (_, warnings) = parse(json!("read-only"));
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn the_project_tightens_but_never_loosens() {
        let cwd = std::env::temp_dir();
        let agent = cwd.join("agent");
        let user = parse(
            json!({"mode":"workspace-write","network":false,"onUnsupported":"warn",
            "writableRoots":["/opt/cache"]}),
        )
        .0;
        let loosening = parse(json!({"mode":"off","network":true,"onUnsupported":"warn",
            "writableRoots":["/"], "extensions": false}))
        .0;
        let mut warnings = Vec::new();
        let policy = resolve(
            &user,
            &loosening,
            UserOverride::default(),
            &cwd,
            &agent,
            &mut warnings,
        );
        assert_eq!(policy.mode, Mode::WorkspaceWrite);
        assert!(!policy.network);
        assert_eq!(policy.on_unsupported, OnUnsupported::Warn);
        assert!(!policy.writable_roots.contains(&PathBuf::from("/")));
        assert!(policy.writable_roots.contains(&PathBuf::from("/opt/cache")));
        assert_eq!(warnings.len(), 1);

        let tightening = parse(json!({"mode":"read-only","onUnsupported":"fail",
            "readDeny":["secrets"], "extensions": true}))
        .0;
        let policy = resolve(
            &user,
            &tightening,
            UserOverride::default(),
            &cwd,
            &agent,
            &mut Vec::new(),
        );
        assert_eq!(policy.mode, Mode::ReadOnly);
        assert_eq!(policy.on_unsupported, OnUnsupported::Fail);
        assert!(policy.extensions);
        assert!(
            policy
                .read_deny
                .contains(&canonical(Path::new("secrets"), &cwd))
        );
        // Read-only: only the temp folder is writable.
        assert_eq!(policy.writable_roots, vec![temp_folder()]);

        // The user's own override replaces the user file but not the project's tightening.
        let over = UserOverride {
            mode: Some(Mode::Off),
            network: Some(true),
        };
        let policy = resolve(&user, &tightening, over, &cwd, &agent, &mut Vec::new());
        assert_eq!(policy.mode, Mode::ReadOnly);
        let policy = resolve(
            &user,
            &SandboxSettings::default(),
            over,
            &cwd,
            &agent,
            &mut Vec::new(),
        );
        assert_eq!(policy.mode, Mode::Off);
        assert!(policy.network);
        assert!(!policy.is_active());
    }

    #[test]
    fn defaults_deny_the_agent_dir_keys_and_own_proc() {
        let cwd = std::env::temp_dir();
        let policy = Policy::off(&cwd, &cwd.join("agent-dir"));
        let home = crate::paths::home_dir();
        assert!(
            policy
                .read_deny
                .contains(&canonical(&home.join(".ssh"), &cwd))
        );
        assert!(
            policy
                .read_deny
                .contains(&PathBuf::from(format!("/proc/{}", std::process::id())))
        );
        assert!(
            policy
                .read_deny
                .contains(&canonical(&cwd.join("agent-dir"), &cwd))
        );
        assert!(policy.writable_roots.is_empty());
    }

    #[test]
    fn canonical_resolves_symlinked_parents_of_missing_files() {
        let dir = canonical(&std::env::temp_dir(), Path::new("/"))
            .join(format!("pi-rs-canon-{}", crate::ids::random_hex16()));
        std::fs::create_dir_all(dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        assert_eq!(
            canonical(Path::new("link/../link/new/file"), &dir),
            dir.join("real/new/file")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
