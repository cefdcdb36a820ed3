//! Extensions: executables (any language) that pi-rs starts as child processes and talks to in
//! JSONL over their stdin/stdout (README.md, Extensions). pi loads TypeScript modules in-process; pi-rs has
//! no JavaScript engine, so the `.ts`/`.js` extensions of a run all go to one Node process that
//! pi-rs starts as a protocol-2 extension (`ts_host`).
//!
//! This file owns discovery: which files are extensions, in which order (`-e` paths, `-e`
//! packages' extensions, project settings paths, user settings paths, `<cwd>/.pi/extensions/`,
//! `<agentDir>/extensions/`, settings packages' extensions (the packages module finds those); the
//! first occurrence of a file wins). `launch` starts them for a run (and checks command-line
//! flags), `host` owns the processes, `protocol` the wire format (v1 and v2), `hooks` how several
//! extensions' answers combine, `queries` the pure parts of v2 query answers (the agent side is
//! `agent::extension_requests`), `approval` the built-in approval gate.
//!
//! Input: paths. Output: `ExtensionSpec`s for `ExtensionHost::start`. Discovery only reads
//! directories; it never runs anything.

pub mod approval;
pub mod exec;
pub mod hooks;
pub mod host;
pub mod launch;
pub mod protocol;
pub mod providers;
pub mod queries;
pub mod shell_split;
pub mod tool_run;
pub mod ts_host;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

// The agent loop names these once it drives the host (the lead's integration).
#[allow(unused_imports)]
pub use host::{
    CommandRunId, ExtensionCommand, ExtensionError, ExtensionEvent, ExtensionHost, ExtensionId,
    ExtensionTool, HookId, TS_HOST_REGISTER_TIMEOUT, offered,
};

/// Where an extension path came from (it decides `sourceInfo` in `get_commands`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtensionOrigin {
    /// `-e/--extension`.
    Cli,
    /// `extensions` in `<cwd>/.pi/settings.json`.
    ProjectSettings,
    /// `extensions` in `<agentDir>/settings.json`.
    UserSettings,
    /// Found in `<cwd>/.pi/extensions/`.
    Project { base_dir: PathBuf },
    /// Found in `<agentDir>/extensions/`.
    User { base_dir: PathBuf },
    /// From a package (settings `packages`, or `-e npm:…`/`-e git:…`): its `sourceInfo`.
    Package(crate::source_info::SourceInfo),
    /// The Node host of the run's TypeScript extensions (`ts_host`), started as `node <script>`.
    TsHost(Box<ts_host::TsHostLaunch>),
}

/// One extension to start.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtensionSpec {
    pub path: PathBuf,
    pub origin: ExtensionOrigin,
}

impl ExtensionSpec {
    /// pi's `sourceInfo` object for this extension's commands.
    pub fn source_info(&self) -> Value {
        let path = self.path.to_string_lossy();
        match &self.origin {
            ExtensionOrigin::Cli => {
                json!({"path": path, "source": "cli", "scope": "temporary", "origin": "top-level"})
            }
            ExtensionOrigin::ProjectSettings => {
                json!({"path": path, "source": "local", "scope": "project", "origin": "top-level"})
            }
            ExtensionOrigin::UserSettings => {
                json!({"path": path, "source": "local", "scope": "user", "origin": "top-level"})
            }
            ExtensionOrigin::Project { base_dir } => json!({"path": path, "source": "auto",
                "scope": "project", "origin": "top-level", "baseDir": base_dir.to_string_lossy()}),
            ExtensionOrigin::User { base_dir } => json!({"path": path, "source": "auto",
                "scope": "user", "origin": "top-level", "baseDir": base_dir.to_string_lossy()}),
            ExtensionOrigin::Package(info) => info.to_json(),
            ExtensionOrigin::TsHost(_) => {
                json!({"path": path, "source": "typescript", "scope": "temporary", "origin": "top-level"})
            }
        }
    }
}

/// The places to look, as the lead's config code knows them.
#[derive(Clone, Debug, Default)]
pub struct ExtensionSources {
    /// `-e` paths as given (relative ones are taken from the cwd).
    pub cli: Vec<PathBuf>,
    /// Project settings `extensions` entries (relative to `<cwd>/.pi`).
    pub project_settings: Vec<PathBuf>,
    /// User settings `extensions` entries (relative to the agent dir).
    pub user_settings: Vec<PathBuf>,
    pub cwd: PathBuf,
    pub agent_dir: PathBuf,
    /// `--no-extensions`: only the `-e` paths are used.
    pub no_extensions: bool,
    /// The project is not trusted: neither `<cwd>/.pi/extensions/` nor project settings paths.
    pub skip_project: bool,
    /// Extensions of `-e` package sources (right after the `-e` paths) and of settings
    /// `packages` (last; not with `--no-extensions`), with their `sourceInfo`.
    pub cli_packages: Vec<(PathBuf, crate::source_info::SourceInfo)>,
    pub packages: Vec<(PathBuf, crate::source_info::SourceInfo)>,
}

/// File name endings of JavaScript/TypeScript modules (loaded by the Node host, `ts_host`).
const SCRIPT_MODULE_ENDINGS: [&str; 6] = [".ts", ".js", ".mjs", ".cjs", ".mts", ".cts"];

pub fn is_script_module(path: &Path) -> bool {
    let name = path.to_string_lossy();
    SCRIPT_MODULE_ENDINGS.iter().any(|end| name.ends_with(end))
}

/// Every extension to start, in load order, without duplicates.
pub fn discover(sources: &ExtensionSources) -> Vec<ExtensionSpec> {
    let mut found = Vec::new();
    let home = crate::paths::home_dir();
    let expand = |path: &Path, base: &Path| {
        base.join(crate::paths::expand_tilde(&path.to_string_lossy(), &home))
    };
    for path in &sources.cli {
        add_path(
            &expand(path, &sources.cwd),
            ExtensionOrigin::Cli,
            &mut found,
        );
    }
    for (path, info) in &sources.cli_packages {
        found.push(ExtensionSpec {
            path: path.clone(),
            origin: ExtensionOrigin::Package(info.clone()),
        });
    }
    if !sources.no_extensions {
        let project_base = sources.cwd.join(".pi");
        let project_settings: &[PathBuf] = if sources.skip_project {
            &[]
        } else {
            &sources.project_settings
        };
        for path in project_settings {
            add_path(
                &expand(path, &project_base),
                ExtensionOrigin::ProjectSettings,
                &mut found,
            );
        }
        for path in &sources.user_settings {
            add_path(
                &expand(path, &sources.agent_dir),
                ExtensionOrigin::UserSettings,
                &mut found,
            );
        }
        if !sources.skip_project {
            scan_dir(
                &project_base.join("extensions"),
                &ExtensionOrigin::Project {
                    base_dir: project_base.clone(),
                },
                &mut found,
            );
        }
        scan_dir(
            &sources.agent_dir.join("extensions"),
            &ExtensionOrigin::User {
                base_dir: sources.agent_dir.clone(),
            },
            &mut found,
        );
        for (path, info) in &sources.packages {
            found.push(ExtensionSpec {
                path: path.clone(),
                origin: ExtensionOrigin::Package(info.clone()),
            });
        }
    }
    let mut seen = HashSet::new();
    found.retain(|spec: &ExtensionSpec| {
        seen.insert(std::fs::canonicalize(&spec.path).unwrap_or_else(|_| spec.path.clone()))
    });
    found
}

/// The extensions a path provides, by the rules of an explicit path (`add_path`): a package's
/// `extensions/` folder, or a package folder that declares nothing else.
pub fn entries_at(path: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    add_path(path, ExtensionOrigin::Cli, &mut found);
    found.into_iter().map(|spec| spec.path).collect()
}

/// An explicit path: a file is itself (even if missing — start reports it), a directory is its
/// `index*` entry or, without one, every extension inside.
fn add_path(path: &Path, origin: ExtensionOrigin, found: &mut Vec<ExtensionSpec>) {
    if path.is_dir() {
        match index_entry(path) {
            Some(index) => found.push(ExtensionSpec {
                path: index,
                origin,
            }),
            None => scan_dir(path, &origin, found),
        }
    } else {
        found.push(ExtensionSpec {
            path: path.to_path_buf(),
            origin,
        });
    }
}

/// A discovery directory: its executable files and JS/TS modules (to report them), and each
/// subdirectory's `index*` entry, sorted by name. Hidden entries and other files are skipped.
fn scan_dir(dir: &Path, origin: &ExtensionOrigin, found: &mut Vec<ExtensionSpec>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    paths.sort();
    for path in paths {
        let candidate = if path.is_dir() {
            index_entry(&path)
        } else if crate::child::is_executable(&path) || is_script_module(&path) {
            Some(path)
        } else {
            None
        };
        if let Some(path) = candidate {
            found.push(ExtensionSpec {
                path,
                origin: origin.clone(),
            });
        }
    }
}

/// `<dir>/index` or `<dir>/index.<anything>` that is executable (or a JS/TS module).
fn index_entry(dir: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_stem().is_some_and(|s| s == "index")
                && (crate::child::is_executable(p) || is_script_module(p))
        })
        .collect();
    candidates.sort();
    // An executable index beats a JS/TS one.
    candidates.sort_by_key(|p| !crate::child::is_executable(p));
    candidates.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::temp_dir;
    use std::os::unix::fs::PermissionsExt;

    fn write(path: &Path, executable: bool) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        let mode = if executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn discovery_order_kinds_and_no_extensions() {
        let root = temp_dir("order");
        let cwd = root.join("project");
        let agent_dir = root.join("agent");
        write(&cwd.join(".pi/extensions/b.sh"), true);
        write(&cwd.join(".pi/extensions/a.ts"), false);
        write(&cwd.join(".pi/extensions/README.md"), false);
        write(&cwd.join(".pi/extensions/.hidden"), true);
        write(&cwd.join(".pi/extensions/tool/index.py"), true);
        write(&cwd.join(".pi/extensions/tool/helper.py"), true);
        write(&agent_dir.join("extensions/user.sh"), true);
        write(&root.join("explicit.sh"), true);
        let sources = ExtensionSources {
            cli: vec![
                root.join("explicit.sh"),
                PathBuf::from(".pi/extensions/b.sh"),
            ],
            project_settings: vec![],
            user_settings: vec![],
            cwd: cwd.clone(),
            agent_dir: agent_dir.clone(),
            no_extensions: false,
            skip_project: false,
            cli_packages: Vec::new(),
            packages: Vec::new(),
        };
        let found = discover(&sources);
        let names: Vec<String> = found
            .iter()
            .map(|s| {
                s.path
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(
            names,
            [
                "explicit.sh",
                "project/.pi/extensions/b.sh",
                "project/.pi/extensions/a.ts",
                "project/.pi/extensions/tool/index.py",
                "agent/extensions/user.sh"
            ]
        );
        assert_eq!(found[1].origin, ExtensionOrigin::Cli);
        assert_eq!(found[2].source_info()["scope"], "project");
        let only_cli = discover(&ExtensionSources {
            no_extensions: true,
            ..sources.clone()
        });
        assert_eq!(only_cli.len(), 2);
        let untrusted = discover(&ExtensionSources {
            skip_project: true,
            ..sources.clone()
        });
        assert!(
            untrusted
                .iter()
                .all(|s| !s.path.starts_with(cwd.join(".pi/extensions"))
                    || s.origin == ExtensionOrigin::Cli)
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
