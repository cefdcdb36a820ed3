//! Installing, updating and removing npm and git packages with the user's own `npm` and `git`,
//! in pi 1.6.0's places: `<agentDir>/npm/` (a private npm project, `node_modules/<name>`) and
//! `<agentDir>/git/<host>/<path>/` for personal packages, `<cwd>/.pi/npm|git/` for project ones,
//! `<agentDir>/tmp/extensions/` for `-e` sources. pi and pi-rs on one machine share them.
//!
//! Arguments are pi's: `npm install <spec> --prefix <root> --legacy-peer-deps --no-audit
//! --no-fund` (peer installs suppressed, so the host packages pi provides are not installed),
//! `git clone <repo> <dir>` then `git checkout <ref>` and, with a `package.json`, `npm install
//! --omit=dev --legacy-peer-deps --no-audit --no-fund` in the clone. Like pi, npm runs the
//! packages' lifecycle scripts. Settings `npmCommand` (an argv array) replaces `npm`.
//!
//! Children get pi-rs's environment without credentials (`tools::env::scrub`), stdin closed,
//! their output on the terminal for the package commands and on stderr during a session start
//! (stdout is the protocol's), and at most [`COMMAND_LIMIT`]; their process group is killed
//! past it. A failed clone leaves no folder behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Scope;
use super::source::{GitSource, NpmSource};

/// How long one npm or git command may run.
const COMMAND_LIMIT: Duration = Duration::from_secs(600);

/// Where a child's stdout goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The terminal (`pi install`).
    Inherit,
    /// pi-rs's stderr (a session start: stdout carries records).
    Stderr,
}

#[derive(Clone, Debug)]
pub struct Installer {
    pub agent_dir: PathBuf,
    pub cwd: PathBuf,
    /// Settings `npmCommand` (empty: `npm`).
    pub npm_command: Vec<String>,
    pub output: Output,
}

impl Installer {
    fn npm_root(&self, scope: Scope) -> PathBuf {
        match scope {
            Scope::Temporary => self.temporary_dir("npm", "", None),
            Scope::Project => self.cwd.join(".pi").join("npm"),
            Scope::User => self.agent_dir.join("npm"),
        }
    }

    pub fn npm_path(&self, npm: &NpmSource, scope: Scope) -> PathBuf {
        self.npm_root(scope).join("node_modules").join(&npm.name)
    }

    fn git_root(&self, scope: Scope) -> Option<PathBuf> {
        match scope {
            Scope::Temporary => None,
            Scope::Project => Some(self.cwd.join(".pi").join("git")),
            Scope::User => Some(self.agent_dir.join("git")),
        }
    }

    pub fn git_path(&self, git: &GitSource, scope: Scope) -> PathBuf {
        match self.git_root(scope) {
            Some(root) => root.join(&git.host).join(&git.path),
            None => self.temporary_dir(
                &format!("git-{}", git.host),
                &git.path,
                git.git_ref.as_deref(),
            ),
        }
    }

    /// pi's `getTemporaryDir`: `tmp/extensions/<prefix>/<sha256(prefix-suffix[@ref])[..8]>/<suffix>`.
    fn temporary_dir(&self, prefix: &str, suffix: &str, git_ref: Option<&str>) -> PathBuf {
        let key = match git_ref {
            Some(r) => format!("{prefix}-{suffix}@{r}"),
            None => format!("{prefix}-{suffix}"),
        };
        let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
        let hash: String = digest.as_ref()[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = self
            .agent_dir
            .join("tmp")
            .join("extensions")
            .join(prefix)
            .join(hash);
        if suffix.is_empty() {
            dir
        } else {
            dir.join(suffix)
        }
    }

    /// The `version` of an installed package's `package.json`.
    pub fn installed_version(dir: &Path) -> Option<String> {
        let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
        let value: serde_json::Value =
            serde_json::from_str(text.strip_prefix('\u{feff}').unwrap_or(&text)).ok()?;
        value.get("version")?.as_str().map(String::from)
    }

    fn npm(&self) -> Result<(String, Vec<String>), String> {
        match self.npm_command.split_first() {
            None => Ok(("npm".into(), Vec::new())),
            Some((command, _)) if command.is_empty() => {
                Err("Invalid npmCommand: first array entry must be a non-empty command".into())
            }
            Some((command, args)) => Ok((command.clone(), args.to_vec())),
        }
    }

    fn run_npm(&self, args: &[String], cwd: Option<&Path>) -> Result<(), String> {
        let (command, mut full) = self.npm()?;
        full.extend(args.iter().cloned());
        self.run(&command, &full, cwd)
    }

    /// `npm install <specs> --prefix <root> --legacy-peer-deps --no-audit --no-fund`.
    pub fn install_npm(&self, specs: &[String], scope: Scope) -> Result<(), String> {
        let root = self.npm_root(scope);
        ensure_npm_project(&root)?;
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        let mut args = vec!["install".to_string()];
        args.extend(specs.iter().cloned());
        args.extend(
            [
                "--prefix",
                &root.to_string_lossy(),
                "--legacy-peer-deps",
                "--no-audit",
                "--no-fund",
            ]
            .map(String::from),
        );
        self.run_npm(&args, None)
    }

    pub fn uninstall_npm(&self, npm: &NpmSource, scope: Scope) -> Result<(), String> {
        let root = self.npm_root(scope);
        if !root.exists() {
            return Ok(());
        }
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        let args = [
            "uninstall",
            &npm.name,
            "--prefix",
            &root.to_string_lossy(),
            "--legacy-peer-deps",
            "--no-audit",
            "--no-fund",
        ]
        .map(String::from);
        self.run_npm(&args, None)
    }

    /// Clones (or, when the clone exists, brings it to the configured ref or the remote branch).
    pub fn install_git(&self, git: &GitSource, scope: Scope) -> Result<(), String> {
        let target = self.git_path(git, scope);
        if target.exists() {
            return self.update_git(git, scope);
        }
        if let Some(root) = self.git_root(scope) {
            ensure_git_ignore(&root)?;
        }
        let parent = target.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        let _ = std::fs::remove_file(update_marker(&target));
        let result = (|| {
            let target_text = target.to_string_lossy().into_owned();
            self.run(
                "git",
                &["clone".into(), git.repo.clone(), target_text],
                None,
            )?;
            if let Some(git_ref) = &git.git_ref {
                self.run("git", &["checkout".into(), git_ref.clone()], Some(&target))?;
            }
            if target.join("package.json").exists() {
                self.run_npm(&git_dependency_args(), Some(&target))?;
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&target);
            prune_empty_parents(&target, self.git_root(scope).as_deref());
        }
        result
    }

    /// pi's `updateGit`: fetch the configured ref (or the upstream branch) and reset to it,
    /// then clean and reinstall dependencies when the commit changed.
    pub fn update_git(&self, git: &GitSource, scope: Scope) -> Result<(), String> {
        let target = self.git_path(git, scope);
        if !target.exists() {
            return self.install_git(git, scope);
        }
        let (fetch, reference): (Vec<String>, String) = match &git.git_ref {
            Some(git_ref) => (
                vec!["fetch".into(), "origin".into(), git_ref.clone()],
                "FETCH_HEAD".into(),
            ),
            None => match self.capture(
                "git",
                &["rev-parse", "--abbrev-ref", "@{upstream}"],
                &target,
            ) {
                Ok(upstream) if upstream.starts_with("origin/") && upstream.len() > 7 => {
                    let branch = &upstream[7..];
                    (
                        vec![
                            "fetch".into(),
                            "--prune".into(),
                            "--no-tags".into(),
                            "origin".into(),
                            format!("+refs/heads/{branch}:refs/remotes/origin/{branch}"),
                        ],
                        "@{upstream}".into(),
                    )
                }
                // No upstream (a tag or commit was checked out): the remote's default branch.
                _ => {
                    let _ = self.capture("git", &["remote", "set-head", "origin", "-a"], &target);
                    let head = self
                        .capture(
                            "git",
                            &["symbolic-ref", "refs/remotes/origin/HEAD"],
                            &target,
                        )
                        .unwrap_or_default();
                    let refspec = match head.strip_prefix("refs/remotes/origin/") {
                        Some(branch) if !branch.is_empty() => {
                            format!("+refs/heads/{branch}:refs/remotes/origin/{branch}")
                        }
                        _ => "+HEAD:refs/remotes/origin/HEAD".to_string(),
                    };
                    (
                        vec![
                            "fetch".into(),
                            "--prune".into(),
                            "--no-tags".into(),
                            "origin".into(),
                            refspec,
                        ],
                        "origin/HEAD".into(),
                    )
                }
            },
        };
        self.run("git", &fetch, Some(&target))?;
        let local = self.capture("git", &["rev-parse", "HEAD"], &target)?;
        let commit = format!("{reference}^{{commit}}");
        let wanted = self.capture("git", &["rev-parse", &commit], &target)?;
        let marker = update_marker(&target);
        if local == wanted && !marker.exists() {
            return Ok(());
        }
        if local != wanted {
            std::fs::write(&marker, "")
                .map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
            self.run(
                "git",
                &["reset".into(), "--hard".into(), commit.clone()],
                Some(&target),
            )?;
        }
        self.run("git", &["clean".into(), "-fdx".into()], Some(&target))?;
        if target.join("package.json").exists() {
            self.run_npm(&git_dependency_args(), Some(&target))?;
        }
        let _ = std::fs::remove_file(&marker);
        Ok(())
    }

    pub fn git_head(&self, dir: &Path) -> Option<String> {
        self.capture("git", &["rev-parse", "HEAD"], dir).ok()
    }

    pub fn remove_git(&self, git: &GitSource, scope: Scope) {
        let target = self.git_path(git, scope);
        let _ = std::fs::remove_dir_all(&target);
        let _ = std::fs::remove_file(update_marker(&target));
        prune_empty_parents(&target, self.git_root(scope).as_deref());
    }

    /// The newest version npm reports for `spec` (`npm view <spec> version --json`).
    pub fn latest_npm_version(&self, spec: &str) -> Result<String, String> {
        let (command, mut args) = self.npm()?;
        args.extend(["view", spec, "version", "--json"].map(String::from));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = self.capture(&command, &refs, &self.cwd)?;
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::String(v)) => Ok(v),
            Ok(serde_json::Value::Array(list)) => list
                .iter()
                .filter_map(|v| v.as_str())
                .next_back()
                .map(String::from)
                .ok_or_else(|| "Unexpected response from npm view".into()),
            _ => Err("Unexpected response from npm view".into()),
        }
    }

    fn command(&self, program: &str, args: &[String], cwd: Option<&Path>) -> Command {
        let mut command = Command::new(program);
        command.args(args).current_dir(cwd.unwrap_or(&self.cwd));
        crate::tools::env::scrub(&mut command);
        command.env("GIT_TERMINAL_PROMPT", "0");
        command.stdin(Stdio::null());
        command
    }

    /// Runs a command with its output shown; `<program> <args> failed with code N` on failure.
    fn run(&self, program: &str, args: &[String], cwd: Option<&Path>) -> Result<(), String> {
        let mut command = self.command(program, args, cwd);
        if self.output == Output::Stderr {
            use std::os::fd::AsFd;
            if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
                command.stdout(Stdio::from(fd));
            }
        }
        let mut child =
            crate::child::GroupChild::spawn(&mut command).map_err(|e| spawn_error(program, &e))?;
        let deadline = Instant::now() + COMMAND_LIMIT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    let code = status
                        .code()
                        .map_or_else(|| "null".to_string(), |c| c.to_string());
                    return Err(format!(
                        "{program} {} failed with code {code}",
                        args.join(" ")
                    ));
                }
                Ok(None) if Instant::now() >= deadline => {
                    child.kill();
                    return Err(format!(
                        "{program} {} timed out after {} s",
                        args.join(" "),
                        COMMAND_LIMIT.as_secs()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(25)),
                Err(e) => return Err(format!("{program}: {e}")),
            }
        }
    }

    /// Runs a command for its trimmed stdout (pi's `runCommandCapture`, bounded to 10 s).
    fn capture(&self, program: &str, args: &[&str], cwd: &Path) -> Result<String, String> {
        let owned: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let mut command = self.command(program, &owned, Some(cwd));
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child =
            crate::child::GroupChild::spawn(&mut command).map_err(|e| spawn_error(program, &e))?;
        let (stdout, stderr) = (child.pipes().stdout.take(), child.pipes().stderr.take());
        let read = |pipe: Option<std::process::ChildStdout>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut pipe) = pipe {
                    use std::io::Read;
                    let _ = (&mut pipe).take(1 << 20).read_to_string(&mut text);
                }
                text
            })
        };
        let out = read(stdout);
        let err = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = stderr {
                use std::io::Read;
                let _ = (&mut pipe).take(1 << 20).read_to_string(&mut text);
            }
            text
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    child.kill();
                    return Err(format!(
                        "{program} {} timed out after 10000ms",
                        args.join(" ")
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("{program}: {e}")),
            }
        };
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        if status.success() {
            Ok(stdout.trim().to_string())
        } else {
            Err(format!(
                "{program} {} failed with code {}: {}",
                args.join(" "),
                status.code().unwrap_or(-1),
                if stderr.is_empty() { &stdout } else { &stderr }
            ))
        }
    }
}

/// Node's wording when a program cannot be started (`spawn npm ENOENT`).
fn spawn_error(program: &str, error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => format!("spawn {program} ENOENT"),
        std::io::ErrorKind::PermissionDenied => format!("spawn {program} EACCES"),
        _ => format!("spawn {program}: {error}"),
    }
}

/// pi's dependency install inside a git package (npm flavour).
fn git_dependency_args() -> Vec<String> {
    [
        "install",
        "--omit=dev",
        "--legacy-peer-deps",
        "--no-audit",
        "--no-fund",
    ]
    .map(String::from)
    .to_vec()
}

fn update_marker(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target
        .parent()
        .unwrap_or(Path::new("/"))
        .join(format!(".{name}.pi-update-incomplete"))
}

/// pi's private npm project: `package.json` `{"name":"pi-extensions","private":true}` and a
/// `.gitignore` that ignores everything.
fn ensure_npm_project(root: &Path) -> Result<(), String> {
    ensure_git_ignore(root)?;
    let package_json = root.join("package.json");
    if !package_json.exists() {
        std::fs::write(
            &package_json,
            "{\n  \"name\": \"pi-extensions\",\n  \"private\": true\n}",
        )
        .map_err(|e| format!("cannot write {}: {e}", package_json.display()))?;
    }
    Ok(())
}

fn ensure_git_ignore(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(&ignore, "*\n!.gitignore\n")
            .map_err(|e| format!("cannot write {}: {e}", ignore.display()))?;
    }
    Ok(())
}

/// Removes the empty folders left between `target` and `root` (not `root` itself).
fn prune_empty_parents(target: &Path, root: Option<&Path>) {
    let Some(root) = root else { return };
    let mut current = target.parent();
    while let Some(dir) = current {
        if !dir.starts_with(root) || dir == root {
            break;
        }
        if dir.exists() && std::fs::remove_dir(dir).is_err() {
            break;
        }
        current = dir.parent();
    }
}
