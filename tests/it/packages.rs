//! pi packages (settings `packages`, `pi install|remove|update|list|config`, `-e npm:`), driven
//! through the binary: local packages from `fixtures/packages/`, an npm package from a registry
//! served on 127.0.0.1 (the tarball is `npm pack` of the fixture), a git package from a local bare
//! repository (reached through a `url.<base>.insteadOf` rule in the test's `$HOME/.gitconfig`),
//! the failure cases, and settings written by pi 1.6.0 read by pi-rs and back.
//!
//! The `get_commands` items for packages were checked against pi 1.6.0 on the same setup (its
//! answers are the literals below: it reports the same `sourceInfo`; pi-rs adds `location`/`path`
//! and, for the executable extension, a command pi would not load).
//!
//! npm and git must be installed (they are in CI); the cross-checks with pi 1.6.0 need
//! `tests/install_reference.sh 1.6.0` (required under `CI=true`, skipped elsewhere).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_provider::fixture_path;
use crate::support::{Pi, Setup, Workspace, binary, isolate_env};

/// Copies a fixture folder (modes kept: the extension stays executable).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy target");
    for entry in std::fs::read_dir(from).expect("read fixture dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy fixture file");
        }
    }
}

/// A workspace with the fixture packages under `<root>/pkgs/`.
fn workspace_with_packages() -> Workspace {
    let workspace = Workspace::new();
    copy_dir(&fixture_path("packages"), &workspace.root().join("pkgs"));
    workspace
}

fn write_json(path: &Path, value: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

/// A setup whose model is never called (`get_commands` and startup only).
fn idle_setup() -> Setup {
    let mut setup = Setup::at("http://127.0.0.1:9", "fake-anthropic", "fake-claude");
    setup.wait_limit = Some(Duration::from_secs(120));
    setup
}

/// The commands, less the built-in `/mcp` pi 1.6.0 always lists (not these tests' subject).
fn commands(pi: &mut Pi) -> Vec<Value> {
    let response = pi.command("c1", "get_commands", json!({}));
    assert_eq!(response["success"], true, "{response}");
    let mut commands = response["data"]["commands"].as_array().unwrap().clone();
    commands.retain(|c| c["sourceInfo"]["path"] != "builtin:mcp");
    commands
}

/// `name → sourceInfo` of the commands.
fn source_infos(commands: &[Value]) -> Vec<(String, Value)> {
    commands
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["sourceInfo"].clone(),
            )
        })
        .collect()
}

fn info(path: &Path, source: &str, scope: &str, base: &Path) -> Value {
    json!({"path": path.to_string_lossy(), "source": source, "scope": scope, "origin": "package",
        "baseDir": base.to_string_lossy()})
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `program args` in the workspace's cwd with its isolated environment plus `env`.
fn run_in(workspace: &Workspace, program: &[PathBuf], args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(&program[0]);
    command.args(&program[1..]).args(args);
    command.current_dir(workspace.cwd());
    isolate_env(&mut command, &workspace.agent_dir(), workspace.root());
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("run the binary");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn pi_rs(workspace: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_in(workspace, &[binary()], args, env)
}

fn settings_text(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// npm and git see no registry but ours and never ask anything.
fn tool_env(registry: &str, workspace: &Workspace) -> Vec<(String, String)> {
    let cache = workspace.root().join("npm-cache");
    vec![
        ("npm_config_registry".into(), registry.into()),
        ("npm_config_update_notifier".into(), "false".into()),
        (
            "npm_config_cache".into(),
            cache.to_string_lossy().into_owned(),
        ),
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
    ]
}

fn env_refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

// ---------------------------------------------------------------------------------------------
// Local packages.

/// pi 1.6.0 on this setup answers exactly these `sourceInfo`s for the prompts and skills.
#[test]
fn package_resources_load_with_their_package_as_source() {
    let workspace = workspace_with_packages();
    let pkgs = workspace.root().join("pkgs");
    let setup = idle_setup().settings(json!({"packages": [
        {"source": "../pkgs/demo", "skills": ["!beta"],
         "prompts": ["+prompts/review.md", "-prompts/other.md"]},
        "../pkgs/manifest"
    ]}));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let found = source_infos(&commands(&mut pi));
    let demo = pkgs.join("demo");
    let manifest = pkgs.join("manifest");
    assert_eq!(
        found,
        vec![
            (
                "demo".to_string(),
                info(
                    &demo.join("extensions/demo.sh"),
                    "../pkgs/demo",
                    "user",
                    &demo
                )
            ),
            (
                "review".to_string(),
                info(
                    &demo.join("prompts/review.md"),
                    "../pkgs/demo",
                    "user",
                    &demo
                )
            ),
            (
                "plan".to_string(),
                info(
                    &manifest.join("res/prompts/plan.md"),
                    "../pkgs/manifest",
                    "user",
                    &manifest
                )
            ),
            (
                "skill:alpha".to_string(),
                info(
                    &demo.join("skills/alpha/SKILL.md"),
                    "../pkgs/demo",
                    "user",
                    &demo
                )
            ),
            (
                "skill:gamma".to_string(),
                info(
                    &manifest.join("res/skills/gamma/SKILL.md"),
                    "../pkgs/manifest",
                    "user",
                    &manifest
                )
            ),
        ],
        "{}",
        pi.stderr_text()
    );
    // The manifest's TypeScript extension is reported as a `.ts` extension is.
    let error = pi.find(|r| r["type"] == "extension_error");
    assert_eq!(
        (error["extensionPath"].as_str(), error["event"].as_str()),
        (
            Some(manifest.join("src/index.ts").to_string_lossy().as_ref()),
            Some("load")
        )
    );
    pi.close_and_wait();
}

#[test]
fn project_packages_load_only_after_trust_and_replace_the_user_entry() {
    let workspace = workspace_with_packages();
    write_json(
        &workspace.cwd().join(".pi/settings.json"),
        &json!({"packages": [{"source": "../../pkgs/demo", "skills": [],
            "prompts": ["prompts/other.md"], "extensions": []}]}),
    );
    let setup = idle_setup().settings(json!({"packages": ["../pkgs/demo"]}));
    let names = |pi: &mut Pi| -> Vec<String> {
        commands(pi)
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    // Untrusted: only the user's entry.
    let mut pi = Pi::spawn_in(&workspace, &setup);
    assert_eq!(
        names(&mut pi),
        ["demo", "other", "review", "skill:alpha", "skill:beta"]
    );
    pi.close_and_wait();
    // Trusted: the project's entry replaces it, with its filters and scope.
    let mut pi = Pi::spawn_in(&workspace, &setup.clone().trust_project());
    let found = commands(&mut pi);
    assert_eq!(found.len(), 1, "{found:?}");
    let demo = workspace.root().join("pkgs/demo");
    assert_eq!(
        found[0]["sourceInfo"],
        info(
            &demo.join("prompts/other.md"),
            "../../pkgs/demo",
            "project",
            &demo
        )
    );
    pi.close_and_wait();
}

#[test]
fn install_list_and_remove_a_local_package() {
    let workspace = workspace_with_packages();
    let user_settings = workspace.agent_dir().join("settings.json");
    let run = pi_rs(&workspace, &["install", "../pkgs/demo"], &[]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "Installing ../pkgs/demo...\nInstalled ../pkgs/demo\n"),
        "{}",
        run.stderr
    );
    let written: Value = serde_json::from_str(&settings_text(&user_settings).unwrap()).unwrap();
    assert_eq!(written, json!({"packages": ["../pkgs/demo"]}));
    // Again: nothing changes.
    assert_eq!(pi_rs(&workspace, &["install", "../pkgs/demo"], &[]).code, 0);
    let list = pi_rs(&workspace, &["list"], &[]);
    let demo = workspace.root().join("pkgs/demo");
    assert_eq!(
        list.stdout,
        format!("User packages:\n  ../pkgs/demo\n    {}\n", demo.display())
    );

    // A project install needs trust; an untrusted one changes nothing.
    std::fs::create_dir_all(workspace.cwd().join(".pi")).unwrap();
    std::fs::write(workspace.cwd().join(".pi/settings.json"), "{}").unwrap();
    let refused = pi_rs(&workspace, &["install", "../pkgs/demo", "-l"], &[]);
    assert_eq!(refused.code, 1);
    assert_eq!(
        refused.stderr,
        "Project is not trusted. Use --approve to modify local package config.\n"
    );
    let local = pi_rs(&workspace, &["install", "../pkgs/demo", "-l", "-a"], &[]);
    assert_eq!(local.code, 0, "{}", local.stderr);
    assert_eq!(
        settings_text(&workspace.cwd().join(".pi/settings.json")).unwrap(),
        "{\n  \"packages\": [\n    \"../../pkgs/demo\"\n  ]\n}"
    );
    let both = pi_rs(&workspace, &["list", "-a"], &[]);
    assert_eq!(
        both.stdout,
        format!(
            "User packages:\n  ../pkgs/demo\n    {0}\n\nProject packages:\n  ../../pkgs/demo\n    {0}\n",
            demo.display()
        )
    );

    // Bad sources: one error, settings untouched.
    let before = settings_text(&user_settings);
    let missing = pi_rs(&workspace, &["install", "./nowhere"], &[]);
    assert_eq!(missing.code, 1);
    assert_eq!(
        missing.stderr,
        format!(
            "Error: Path does not exist: {}\n",
            workspace.cwd().join("nowhere").display()
        )
    );
    let unknown = pi_rs(&workspace, &["remove", "../pkgs/manifest"], &[]);
    assert_eq!(unknown.code, 1);
    assert_eq!(
        unknown.stderr,
        "No matching package found for ../pkgs/manifest\n"
    );
    let no_source = pi_rs(&workspace, &["install"], &[]);
    assert_eq!(
        (no_source.code, no_source.stderr.as_str()),
        (
            1,
            "Missing install source.\nUsage: pi install <source> [-l] [--approve|--no-approve]\n"
        )
    );
    assert_eq!(settings_text(&user_settings), before);

    let removed = pi_rs(&workspace, &["remove", "../pkgs/demo"], &[]);
    assert_eq!(
        (removed.code, removed.stdout.as_str()),
        (0, "Removing ../pkgs/demo...\nRemoved ../pkgs/demo\n")
    );
    let written: Value = serde_json::from_str(&settings_text(&user_settings).unwrap()).unwrap();
    assert_eq!(written, json!({"packages": []}));
    assert_eq!(
        pi_rs(&workspace, &["list", "-na"], &[]).stdout,
        "No packages installed.\n"
    );
}

#[test]
fn config_without_a_terminal_lists_the_resources_and_their_state() {
    let workspace = workspace_with_packages();
    write_json(
        &workspace.agent_dir().join("settings.json"),
        &json!({"packages": [{"source": "../pkgs/demo", "skills": ["!beta"]}]}),
    );
    let run = pi_rs(&workspace, &["config"], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("[x] skills/alpha/SKILL.md")
            && run.stdout.contains("[ ] skills/beta/SKILL.md")
            && run.stdout.contains("[x] prompts/review.md"),
        "{}",
        run.stdout
    );
    let local = pi_rs(&workspace, &["config", "-l", "-na"], &[]);
    assert_eq!(local.code, 1);
}

// ---------------------------------------------------------------------------------------------
// npm.

/// A registry on 127.0.0.1 serving one package: its packument and the tarball `npm pack` made
/// of `fixtures/packages/demo`. Records the paths asked for.
struct Registry {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Registry {
    fn start(tarball: Vec<u8>) -> Registry {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind registry");
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let base = url.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).map_or(true, |n| n == 0) || header == "\r\n" {
                        break;
                    }
                }
                let path = request_line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("")
                    .to_string();
                seen.lock().unwrap().push(path.clone());
                let (status, body): (&str, Vec<u8>) = if path.ends_with(".tgz") {
                    ("200 OK", tarball.clone())
                } else if path.trim_matches('/') == "pi-rs-demo-pkg" {
                    let packument = json!({"name": "pi-rs-demo-pkg",
                        "dist-tags": {"latest": "1.0.0"},
                        "versions": {"1.0.0": {"name": "pi-rs-demo-pkg", "version": "1.0.0",
                            "peerDependencies": {"@earendil-works/pi-coding-agent": "*"},
                            "dist": {"tarball":
                                format!("{base}pi-rs-demo-pkg/-/pi-rs-demo-pkg-1.0.0.tgz")}}}});
                    ("200 OK", packument.to_string().into_bytes())
                } else {
                    ("404 Not Found", b"{}".to_vec())
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
                let mut rest = Vec::new();
                let _ = stream.set_read_timeout(Some(Duration::from_millis(10)));
                let _ = reader.read_to_end(&mut rest);
            }
        });
        Registry { url, requests }
    }

    fn tarball_downloads(&self) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.ends_with(".tgz"))
            .count()
    }
}

/// `npm pack` of the demo fixture, as bytes.
fn packed_demo(workspace: &Workspace) -> Vec<u8> {
    let out = workspace.root().join("packed");
    std::fs::create_dir_all(&out).unwrap();
    let status = Command::new("npm")
        .args(["pack", "--silent", "--pack-destination"])
        .arg(&out)
        .arg(fixture_path("packages/demo"))
        .env("npm_config_update_notifier", "false")
        .env("npm_config_cache", workspace.root().join("npm-cache"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("npm must be installed for the package tests");
    assert!(status.success(), "npm pack failed");
    std::fs::read(out.join("pi-rs-demo-pkg-1.0.0.tgz")).expect("packed tarball")
}

#[test]
fn npm_package_installs_from_a_registry_and_loads() {
    let workspace = workspace_with_packages();
    let registry = Registry::start(packed_demo(&workspace));
    let env = tool_env(&registry.url, &workspace);
    let run = pi_rs(
        &workspace,
        &["install", "npm:pi-rs-demo-pkg"],
        &env_refs(&env),
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.starts_with("Installing npm:pi-rs-demo-pkg...\n"));
    assert!(run.stdout.ends_with("Installed npm:pi-rs-demo-pkg\n"));
    let npm_root = workspace.agent_dir().join("npm");
    let installed = npm_root.join("node_modules/pi-rs-demo-pkg");
    assert!(installed.join("skills/alpha/SKILL.md").is_file());
    // Peer installs are suppressed: the host package pi provides is not installed.
    assert!(!npm_root.join("node_modules/@earendil-works").exists());
    // Nothing was written in the project (only the agent dir holds the install).
    assert_eq!(std::fs::read_dir(workspace.cwd()).unwrap().count(), 0);
    // pi's private npm project, which npm then records the dependency in.
    let project: Value =
        serde_json::from_str(&std::fs::read_to_string(npm_root.join("package.json")).unwrap())
            .unwrap();
    assert_eq!(
        project,
        json!({"name": "pi-extensions", "private": true,
            "dependencies": {"pi-rs-demo-pkg": "^1.0.0"}})
    );
    assert_eq!(
        pi_rs(&workspace, &["list"], &[]).stdout,
        format!(
            "User packages:\n  npm:pi-rs-demo-pkg\n    {}\n",
            installed.display()
        )
    );

    let mut pi = Pi::spawn_in(&workspace, &idle_setup());
    let found = source_infos(&commands(&mut pi));
    assert!(
        found.contains(&(
            "skill:alpha".to_string(),
            info(
                &installed.join("skills/alpha/SKILL.md"),
                "npm:pi-rs-demo-pkg",
                "user",
                &installed
            )
        )),
        "{found:?}"
    );
    pi.close_and_wait();

    // Up to date: the registry says 1.0.0 is the latest.
    let mut no_offline = env.clone();
    no_offline.push(("PI_OFFLINE".into(), "0".into()));
    let update = pi_rs(
        &workspace,
        &["update", "--extensions"],
        &env_refs(&no_offline),
    );
    assert_eq!(
        (update.code, update.stdout.as_str()),
        (0, "Packages are already up to date\n"),
        "{}",
        update.stderr
    );

    let removed = pi_rs(
        &workspace,
        &["remove", "npm:pi-rs-demo-pkg"],
        &env_refs(&env),
    );
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    assert!(!installed.exists());
    assert_eq!(
        pi_rs(&workspace, &["list"], &[]).stdout,
        "No packages installed.\n"
    );
}

#[test]
fn dash_e_npm_package_is_cached_for_later_runs() {
    let workspace = workspace_with_packages();
    let registry = Registry::start(packed_demo(&workspace));
    let mut env = tool_env(&registry.url, &workspace);
    env.push(("PI_OFFLINE".into(), "0".into()));
    let mut setup = idle_setup().arg("-e").arg("npm:pi-rs-demo-pkg");
    for (name, value) in &env {
        setup = setup.env(name, value);
    }
    for run in 0..2 {
        let mut pi = Pi::spawn_in(&workspace, &setup);
        let found = source_infos(&commands(&mut pi));
        let of = |name: &str| {
            found
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, info)| info.clone())
                .unwrap_or_else(|| panic!("run {run}: no {name} in {found:?}"))
        };
        // pi 1.6.0's answers: the prompt keeps its package, the skill is reported as "cli".
        let review = of("review");
        let base = PathBuf::from(review["baseDir"].as_str().unwrap());
        assert_eq!(
            review,
            info(
                &base.join("prompts/review.md"),
                "npm:pi-rs-demo-pkg",
                "temporary",
                &base
            )
        );
        let hashed = workspace
            .agent_dir()
            .join("tmp/extensions/npm/f35b2129/node_modules/pi-rs-demo-pkg");
        assert_eq!(base, hashed, "pi's cache folder");
        assert_eq!(
            of("skill:alpha"),
            json!({"path": hashed.join("skills/alpha/SKILL.md").to_string_lossy(),
                "source": "cli", "scope": "temporary", "origin": "top-level"})
        );
        pi.close_and_wait();
    }
    // The second run found the cached copy current: one download in all.
    assert_eq!(registry.tarball_downloads(), 1);
    // Nothing was written to settings.
    assert!(!workspace.agent_dir().join("settings.json").exists());
}

#[test]
fn missing_npm_or_git_is_one_error_and_settings_stay_untouched() {
    let workspace = workspace_with_packages();
    let empty_path = workspace.root().join("no-tools");
    std::fs::create_dir_all(&empty_path).unwrap();
    let path = empty_path.to_string_lossy().into_owned();
    let npm = pi_rs(&workspace, &["install", "npm:anything"], &[("PATH", &path)]);
    assert_eq!(
        (npm.code, npm.stderr.as_str()),
        (1, "Error: spawn npm ENOENT\n")
    );
    let git = pi_rs(
        &workspace,
        &["install", "git:example.test/owner/repo"],
        &[("PATH", &path)],
    );
    assert_eq!(
        (git.code, git.stderr.as_str()),
        (1, "Error: spawn git ENOENT\n")
    );
    assert!(!workspace.agent_dir().join("settings.json").exists());
    assert!(
        !workspace
            .agent_dir()
            .join("git/example.test/owner/repo")
            .exists()
    );
}

/// Settings `npmCommand` replaces npm; a failing install is pi's one error line, settings keep
/// what they had.
#[test]
fn failing_npm_install_names_the_command_and_leaves_settings_alone() {
    let workspace = workspace_with_packages();
    let fake_npm = workspace.root().join("fake-npm");
    std::fs::write(&fake_npm, "#!/bin/sh\necho \"$@\" > \"$0.args\"\nexit 3\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake_npm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let settings =
        json!({"npmCommand": [fake_npm.to_string_lossy()], "packages": ["../pkgs/demo"]});
    write_json(&workspace.agent_dir().join("settings.json"), &settings);
    let before = settings_text(&workspace.agent_dir().join("settings.json"));
    let run = pi_rs(&workspace, &["install", "npm:@scope/tools@1.2.3"], &[]);
    let root = workspace.agent_dir().join("npm");
    let args = format!(
        "install @scope/tools@1.2.3 --prefix {} --legacy-peer-deps --no-audit --no-fund",
        root.display()
    );
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr,
        format!("Error: {} {args} failed with code 3\n", fake_npm.display())
    );
    assert_eq!(
        std::fs::read_to_string(workspace.root().join("fake-npm.args")).unwrap(),
        format!("{args}\n")
    );
    assert_eq!(
        settings_text(&workspace.agent_dir().join("settings.json")),
        before
    );
}

/// npm runs with the tools' environment: a credential-looking variable reaches it only when
/// settings `shellEnvPassthrough` names it.
#[test]
fn npm_gets_no_credentials_unless_passed_through() {
    let workspace = workspace_with_packages();
    let fake_npm = workspace.root().join("fake-npm");
    std::fs::write(
        &fake_npm,
        "#!/bin/sh\nprintf '%s' \"${NPM_TOKEN-unset}\" > \"$0.token\"\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake_npm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let token_seen = || std::fs::read_to_string(workspace.root().join("fake-npm.token")).unwrap();
    let env = [("NPM_TOKEN", "npm_secret_value_123")];
    write_json(
        &workspace.agent_dir().join("settings.json"),
        &json!({"npmCommand": [fake_npm.to_string_lossy()]}),
    );
    assert_eq!(pi_rs(&workspace, &["install", "npm:x"], &env).code, 1);
    assert_eq!(token_seen(), "unset");
    write_json(
        &workspace.agent_dir().join("settings.json"),
        &json!({"npmCommand": [fake_npm.to_string_lossy()], "shellEnvPassthrough": ["NPM_TOKEN"]}),
    );
    assert_eq!(pi_rs(&workspace, &["install", "npm:x"], &env).code, 1);
    assert_eq!(token_seen(), "npm_secret_value_123");
}

// ---------------------------------------------------------------------------------------------
// git.

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args([
            "-c",
            "user.name=pi-rs tests",
            "-c",
            "user.email=tests@example.test",
        ])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("git must be installed for the package tests");
    assert!(status.success(), "git {args:?} failed in {}", dir.display());
}

/// `<root>/remote/owner/demo`, a bare repository of the demo fixture with tag `v1`, reached
/// as `https://example.test/owner/demo` through `$HOME/.gitconfig`.
fn bare_demo_repository(workspace: &Workspace) -> PathBuf {
    let work = workspace.root().join("demo-work");
    copy_dir(&fixture_path("packages/demo"), &work);
    git(&work, &["init", "-q"]);
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "demo"]);
    git(&work, &["tag", "v1"]);
    let bare = workspace.root().join("remote/owner/demo");
    std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
    git(
        workspace.root(),
        &[
            "clone",
            "-q",
            "--bare",
            &work.to_string_lossy(),
            &bare.to_string_lossy(),
        ],
    );
    let remote = workspace.root().join("remote");
    std::fs::write(
        workspace.root().join(".gitconfig"),
        format!(
            "[url \"file://{}/\"]\n\tinsteadOf = https://example.test/\n",
            remote.display()
        ),
    )
    .unwrap();
    work
}

#[test]
fn git_package_installs_from_a_bare_repository_and_updates() {
    let workspace = workspace_with_packages();
    let work = bare_demo_repository(&workspace);
    let env = tool_env("http://127.0.0.1:9/", &workspace);
    let pinned = pi_rs(
        &workspace,
        &["install", "git:example.test/owner/demo@v1"],
        &env_refs(&env),
    );
    assert_eq!(pinned.code, 0, "{}\n{}", pinned.stdout, pinned.stderr);
    let clone = workspace.agent_dir().join("git/example.test/owner/demo");
    assert!(clone.join("skills/alpha/SKILL.md").is_file());
    assert_eq!(std::fs::read_dir(workspace.cwd()).unwrap().count(), 0);
    assert_eq!(
        std::fs::read_to_string(workspace.agent_dir().join("git/.gitignore")).unwrap(),
        "*\n!.gitignore\n"
    );
    let mut pi = Pi::spawn_in(&workspace, &idle_setup());
    let found = source_infos(&commands(&mut pi));
    assert!(
        found.contains(&(
            "skill:beta".to_string(),
            info(
                &clone.join("skills/beta/SKILL.md"),
                "git:example.test/owner/demo@v1",
                "user",
                &clone
            )
        )),
        "{found:?}"
    );
    pi.close_and_wait();

    // The unpinned source follows the remote branch: a new commit is an update.
    let unpinned = "git:example.test/owner/demo";
    let again = pi_rs(&workspace, &["install", unpinned], &env_refs(&env));
    assert_eq!(again.code, 0, "{}", again.stderr);
    let written: Value =
        serde_json::from_str(&settings_text(&workspace.agent_dir().join("settings.json")).unwrap())
            .unwrap();
    assert_eq!(
        written,
        json!({"packages": [unpinned]}),
        "same identity: replaced"
    );
    std::fs::write(
        work.join("prompts/new.md"),
        "---\ndescription: New prompt\n---\nNew\n",
    )
    .unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "new prompt"]);
    let bare = workspace.root().join("remote/owner/demo");
    git(&work, &["push", "-q", &bare.to_string_lossy(), "main"]);
    let mut online = env.clone();
    online.push(("PI_OFFLINE".into(), "0".into()));
    let update = pi_rs(&workspace, &["update", "--extensions"], &env_refs(&online));
    assert_eq!(update.code, 0, "{}\n{}", update.stdout, update.stderr);
    assert!(
        update
            .stdout
            .contains(&format!("Updated 1 package:\n  {unpinned} ")),
        "{}",
        update.stdout
    );
    assert!(clone.join("prompts/new.md").is_file());
    let unchanged = pi_rs(&workspace, &["update", unpinned], &env_refs(&online));
    assert_eq!(
        unchanged.stdout,
        format!("Updating {unpinned}...\n{unpinned} is already up to date\n")
    );
    let removed = pi_rs(&workspace, &["remove", unpinned], &env_refs(&env));
    assert_eq!(removed.code, 0);
    assert!(!workspace.agent_dir().join("git/example.test").exists());
}

/// pi 1.6.0's answer for `-e <folder laid out as a package>`: the folder's absolute path is the
/// source; its skills are reported as "cli" (as for every `-e` package).
#[test]
fn dash_e_folder_package_loads_its_resources() {
    let workspace = workspace_with_packages();
    let demo = workspace.root().join("pkgs/demo");
    let setup = idle_setup().arg("-e").arg("../pkgs/demo");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let found = source_infos(&commands(&mut pi));
    let source = demo.to_string_lossy();
    assert_eq!(
        found,
        vec![
            (
                "demo".to_string(),
                info(
                    &demo.join("extensions/demo.sh"),
                    &source,
                    "temporary",
                    &demo
                )
            ),
            (
                "other".to_string(),
                info(&demo.join("prompts/other.md"), &source, "temporary", &demo)
            ),
            (
                "review".to_string(),
                info(&demo.join("prompts/review.md"), &source, "temporary", &demo)
            ),
            (
                "skill:alpha".to_string(),
                json!({"path": demo.join("skills/alpha/SKILL.md").to_string_lossy(),
                    "source": "cli", "scope": "temporary", "origin": "top-level"})
            ),
            (
                "skill:beta".to_string(),
                json!({"path": demo.join("skills/beta/SKILL.md").to_string_lossy(),
                    "source": "cli", "scope": "temporary", "origin": "top-level"})
            ),
        ],
        "{}",
        pi.stderr_text()
    );
    pi.close_and_wait();
}

#[test]
fn dash_e_git_package_is_cloned_into_the_cache() {
    let workspace = workspace_with_packages();
    bare_demo_repository(&workspace);
    let mut setup = idle_setup()
        .arg("-e")
        .arg("git:example.test/owner/demo@v1")
        .env("PI_OFFLINE", "0");
    for (name, value) in tool_env("http://127.0.0.1:9/", &workspace) {
        setup = setup.env(&name, &value);
    }
    // pi's folder: tmp/extensions/git-<host>/<sha256("git-<host>-<path>@<ref>")[..8]>/<path>.
    let cached = workspace
        .agent_dir()
        .join("tmp/extensions/git-example.test/4408631b/owner/demo");
    for run in 0..2 {
        let mut pi = Pi::spawn_in(&workspace, &setup);
        let found = source_infos(&commands(&mut pi));
        assert!(
            found.contains(&(
                "review".to_string(),
                info(
                    &cached.join("prompts/review.md"),
                    "git:example.test/owner/demo@v1",
                    "temporary",
                    &cached
                )
            )),
            "run {run}: {found:?}\n{}",
            pi.stderr_text()
        );
        pi.close_and_wait();
    }
    assert!(!workspace.agent_dir().join("settings.json").exists());
}

#[test]
fn a_package_that_fails_to_install_at_start_is_warned_about_and_skipped() {
    let workspace = workspace_with_packages();
    let mut setup = idle_setup().settings(json!({"packages": [
        "git:example.test/owner/missing", "../pkgs/manifest"
    ]}));
    for (name, value) in tool_env("http://127.0.0.1:9/", &workspace) {
        setup = setup.env(&name, &value);
    }
    // A `.gitconfig` pointing example.test at a folder without that repository.
    std::fs::create_dir_all(workspace.root().join("remote")).unwrap();
    std::fs::write(
        workspace.root().join(".gitconfig"),
        format!(
            "[url \"file://{}/\"]\n\tinsteadOf = https://example.test/\n",
            workspace.root().join("remote").display()
        ),
    )
    .unwrap();
    let setup = setup.env("PI_OFFLINE", "0");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let names: Vec<String> = commands(&mut pi)
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["plan", "skill:gamma"]);
    let clone = workspace.agent_dir().join("git/example.test/owner/missing");
    let expected = format!(
        "Warning: Extension package \"git:example.test/owner/missing\": failed to install (git clone https://example.test/owner/missing {} failed with code 128). Run \"pi remove git:example.test/owner/missing\" to remove it from settings.json.",
        clone.display()
    );
    pi.close_and_wait();
    assert!(pi.stderr_text().contains(&expected), "{}", pi.stderr_text());
    assert!(!clone.exists(), "a failed clone leaves nothing behind");
}

// ---------------------------------------------------------------------------------------------
// pi 1.6.0 and pi-rs on one machine.

#[test]
fn settings_written_by_pi_1_6_0_and_by_pi_rs_list_the_same() {
    let Some(reference) = crate::reference_clients::reference("1.6.0") else {
        return;
    };
    let pi_js = [
        reference.node.clone(),
        reference.package.join("dist/cli.js"),
    ];
    let workspace = workspace_with_packages();
    std::fs::create_dir_all(workspace.cwd().join(".pi")).unwrap();
    std::fs::write(workspace.cwd().join(".pi/settings.json"), "{}").unwrap();
    // pi installs, pi-rs lists.
    for args in [
        &["install", "../pkgs/demo"][..],
        &["install", "../pkgs/manifest", "-l", "-a"][..],
    ] {
        let run = run_in(&workspace, &pi_js, args, &[]);
        assert_eq!(run.code, 0, "pi 1.6.0 {args:?}: {}", run.stderr);
    }
    let theirs = run_in(&workspace, &pi_js, &["list", "-a"], &[]);
    let ours = pi_rs(&workspace, &["list", "-a"], &[]);
    assert_eq!(ours.stdout, theirs.stdout);
    assert!(ours.stdout.contains("Project packages:"));
    // pi-rs removes and installs, pi lists.
    for args in [
        &["remove", "../pkgs/demo"][..],
        &["install", "../pkgs/manifest"][..],
        &["install", "../pkgs/demo", "-l", "-a"][..],
    ] {
        let run = pi_rs(&workspace, args, &[]);
        assert_eq!(run.code, 0, "pi-rs {args:?}: {}", run.stderr);
    }
    let theirs = run_in(&workspace, &pi_js, &["list", "-a"], &[]);
    let ours = pi_rs(&workspace, &["list", "-a"], &[]);
    assert_eq!(theirs.stdout, ours.stdout);
    assert!(theirs.stdout.contains("  ../pkgs/manifest\n"));
}

/// The prompts and skills pi 1.6.0 and pi-rs list for the same settings, with their `sourceInfo`
/// (extension commands differ by design: pi runs `.ts`, pi-rs executables).
#[test]
fn get_commands_match_pi_1_6_0_for_the_same_packages() {
    let Some(reference) = crate::reference_clients::reference("1.6.0") else {
        return;
    };
    let workspace = workspace_with_packages();
    write_json(
        &workspace.agent_dir().join("settings.json"),
        &json!({"packages": [
            {"source": "../pkgs/demo", "skills": ["-skills/beta"], "prompts": ["!other.md"]},
            "../pkgs/manifest"
        ]}),
    );
    write_json(
        &workspace.cwd().join(".pi/settings.json"),
        &json!({"packages": [{"source": "../../pkgs/manifest", "autoload": false,
            "prompts": ["-res/prompts/plan.md"]}]}),
    );
    let root = std::fs::canonicalize(workspace.root()).unwrap();
    write_json(
        &workspace.agent_dir().join("trust.json"),
        &json!({root.to_string_lossy(): true}),
    );
    let listed = |program: &[PathBuf]| -> Vec<(String, Value)> {
        let mut command = Command::new(&program[0]);
        command
            .args(&program[1..])
            .args(["--mode", "rpc", "--no-session"])
            .current_dir(workspace.cwd())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        isolate_env(&mut command, &workspace.agent_dir(), workspace.root());
        let mut child = command.spawn().expect("start");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"{\"type\":\"get_commands\",\"id\":\"c1\"}\n")
            .unwrap();
        let output = child.wait_with_output().expect("wait");
        let text = String::from_utf8_lossy(&output.stdout);
        let response: Value = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|r| r["id"] == "c1")
            .unwrap_or_else(|| panic!("no get_commands response: {text}"));
        let commands = response["data"]["commands"].as_array().unwrap().clone();
        source_infos(&commands)
            .into_iter()
            .filter(|(name, _)| {
                commands
                    .iter()
                    .any(|c| c["name"] == name.as_str() && c["source"] != "extension")
            })
            .collect()
    };
    let theirs = listed(&[
        reference.node.clone(),
        reference.package.join("dist/cli.js"),
    ]);
    let ours = listed(&[binary()]);
    assert_eq!(ours, theirs);
    let names: Vec<&str> = ours.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["review", "skill:alpha", "skill:gamma"]);
}

// ---------------------------------------------------------------------------------------------
// One real package from the npm registry.

/// pi-prompt-template-model 0.12.2 from the npm registry, whose manifest was read before it was
/// chosen (`pi.extensions: ["./index.ts"]`, `pi.skills: ["./skills"]`, peer dependencies on pi's
/// own packages): installed by `pi install`, listed by `pi list`, its skill loaded with the package
/// as its source, its TypeScript extension reported (pi-rs has no TypeScript host yet). The one
/// test that reaches a registry, so it runs under `CI=true` (or `PI_TEST_NPM_REGISTRY=1`) only.
#[test]
fn a_real_pi_package_from_the_npm_registry_installs_and_loads() {
    let wanted = std::env::var("CI").as_deref() == Ok("true")
        || std::env::var_os("PI_TEST_NPM_REGISTRY").is_some();
    if !wanted {
        eprintln!("SKIPPED: the npm registry test runs under CI=true or PI_TEST_NPM_REGISTRY=1");
        return;
    }
    let workspace = Workspace::new();
    let cache = workspace.root().join("npm-cache");
    let mut env: Vec<(String, String)> = vec![
        ("npm_config_update_notifier".into(), "false".into()),
        (
            "npm_config_cache".into(),
            cache.to_string_lossy().into_owned(),
        ),
    ];
    // The machine's CA settings reach npm as they would in a user's shell.
    for name in ["NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR"] {
        if let Ok(value) = std::env::var(name) {
            env.push((name.into(), value));
        }
    }
    let source = "npm:pi-prompt-template-model@0.12.2";
    let run = pi_rs(&workspace, &["install", source], &env_refs(&env));
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let installed = workspace
        .agent_dir()
        .join("npm/node_modules/pi-prompt-template-model");
    assert!(
        installed
            .join("skills/prompt-template-authoring/SKILL.md")
            .is_file()
    );
    // Peer installs are suppressed: pi's own packages are the host's, never installed.
    assert!(
        !workspace
            .agent_dir()
            .join("npm/node_modules/@earendil-works")
            .exists()
    );
    assert_eq!(std::fs::read_dir(workspace.cwd()).unwrap().count(), 0);
    assert_eq!(
        pi_rs(&workspace, &["list"], &[]).stdout,
        format!("User packages:\n  {source}\n    {}\n", installed.display())
    );

    let mut pi = Pi::spawn_in(&workspace, &idle_setup());
    let found = source_infos(&commands(&mut pi));
    let skill = installed.join("skills/prompt-template-authoring/SKILL.md");
    assert!(
        found.contains(&(
            "skill:prompt-template-authoring".to_string(),
            info(&skill, source, "user", &installed)
        )),
        "{found:?}"
    );
    let index = installed.join("index.ts");
    assert!(
        pi.records().iter().any(|r| r["type"] == "extension_error"
            && r["extensionPath"] == index.to_string_lossy().as_ref()),
        "{:?}",
        pi.records()
    );
    pi.close_and_wait();

    let removed = pi_rs(&workspace, &["remove", source], &env_refs(&env));
    assert_eq!(removed.code, 0, "{}\n{}", removed.stdout, removed.stderr);
    assert_eq!(
        pi_rs(&workspace, &["list"], &[]).stdout,
        "No packages installed.\n"
    );
}
