//! Real clients drive the real binary: each reference pi's own `RpcClient` (the class TypeScript
//! integrations import from the package) runs through every public method it has — pi 1.6.0's
//! against the default profile, pi 0.73.1's against `--rpc-profile legacy` — and a Python client
//! written from nothing but the seed's "Minimal client" section does a turn with a tool call.
//!
//! The reference packages and their Node 22 come from `tests/install_reference.sh` (which `.ci/run`
//! calls before `cargo test`); the tests only look them up (`--check`, no network). When they are
//! missing the tests fail under `CI=true` and are skipped with a printed reason elsewhere; so is
//! the Python test without `python3`.
//!
//! The scripts: `tests/clients/rpc_client_every_method.mjs` (the scenario and its checks),
//! `tests/clients/exec_pi_rs.mjs` (the `cliPath` the client runs with `node`, which starts the
//! binary under test), `tests/clients/minimal_client.py`.
//!
//! Against the references themselves (`PI_TEST_BIN`): the 1.6.0 scenario passes on pi 1.6.0; the
//! 0.73.1 scenario passes on pi 0.73.1 once `--rpc-profile legacy` is left out (0.73.1 rejects the
//! flag), which is how its legacy checks were validated.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::sse;
use crate::support::{Workspace, binary, isolate_env};

/// An installed reference, as `tests/install_reference.sh --check` describes it.
pub(crate) struct Reference {
    pub(crate) node: PathBuf,
    pub(crate) package: PathBuf,
}

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Under `CI=true` a missing prerequisite fails the test; elsewhere the test is skipped.
fn missing(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} (CI=true: the client tests must run; .ci/run installs what they need)");
    }
    eprintln!("SKIPPED: {what}");
}

pub(crate) fn reference(version: &str) -> Option<Reference> {
    let output = Command::new("bash")
        .arg(repo_path("tests/install_reference.sh"))
        .args(["--check", version])
        .output()
        .expect("run tests/install_reference.sh");
    if !output.status.success() {
        missing(&format!(
            "reference pi {version} is not installed: run tests/install_reference.sh {version} ({})",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("install_reference.sh printed no {name}=: {text}"))
    };
    Some(Reference {
        node: field("node"),
        package: field("package"),
    })
}

/// Writes models.json for the fake provider into the workspace's agent dir, plus settings.
fn prepare(workspace: &Workspace, fake: &FakeProvider, settings: serde_json::Value) {
    let models = fixture("models.json").replace("__BASE_URL__", &fake.base_url());
    std::fs::write(workspace.agent_dir().join("models.json"), models).expect("models.json");
    std::fs::write(
        workspace.agent_dir().join("settings.json"),
        settings.to_string(),
    )
    .expect("settings.json");
}

/// Runs `program args` in the workspace's cwd with the suite's scrubbed environment plus `env`;
/// kills it after `limit`. Returns (success, stdout, stderr).
fn run_in(
    workspace: &Workspace,
    program: &Path,
    args: &[&str],
    env: &[(&str, String)],
    limit: Duration,
) -> (bool, String, String) {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(workspace.cwd())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    isolate_env(&mut command, &workspace.agent_dir(), workspace.root());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    let mut out_pipe = child.stdout.take().expect("stdout");
    let mut err_pipe = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out_pipe.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err_pipe.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    match status {
        Some(status) => (status.success(), stdout, stderr),
        None => panic!(
            "{} did not finish within {limit:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            program.display()
        ),
    }
}

/// The fake provider's script for `rpc_client_every_method.mjs` (see its header).
fn every_method_script() -> Vec<Reply> {
    let gated = |gate: &str| format!("while [ ! -e {gate} ]; do sleep 0.02; done; echo released");
    vec![
        Reply::sse(sse::anthropic_bash("toolu_01", "echo tool-output")),
        Reply::sse(sse::anthropic_text(&["Tool said ", "tool-output."])),
        Reply::sse(sse::anthropic_bash("toolu_02", &gated("gate-1"))),
        Reply::sse(sse::anthropic_text(&["Steered."])),
        Reply::sse(sse::anthropic_text(&["Followed up."])),
        Reply::sse(sse::anthropic_bash("toolu_03", &gated("gate-2"))),
        Reply::sse(sse::anthropic_text(&[
            "## Goal\nSummary of the client test.",
        ])),
    ]
}

/// One client generation against one profile: the script must exit 0 and the fake provider's
/// script must be used up exactly.
fn drive_every_method(version: &str, profile: &str, extra_args: &[&str]) {
    let Some(reference) = reference(version) else {
        return;
    };
    let fake = FakeProvider::start(every_method_script());
    let workspace = Workspace::new();
    // keepRecentTokens 1: `compact` has something to summarize in a short session.
    prepare(
        &workspace,
        &fake,
        serde_json::json!({"compaction": {"keepRecentTokens": 1}}),
    );
    let node_dir = reference.node.parent().expect("node's folder");
    let path = format!(
        "{}:{}",
        node_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let client = reference.package.join("dist/modes/rpc/rpc-client.js");
    let args = serde_json::to_string(extra_args).expect("args");
    let script = repo_path("tests/clients/rpc_client_every_method.mjs");
    let (ok, stdout, stderr) = run_in(
        &workspace,
        &reference.node,
        &[&script.to_string_lossy()],
        &[
            // RpcClient runs `node` from PATH: the reference's own Node 22.
            ("PATH", path),
            ("PI_RS_BIN", binary().to_string_lossy().into_owned()),
            ("PI_CLIENT_MODULE", client.to_string_lossy().into_owned()),
            ("PI_CLIENT_PROVIDER", "fake-anthropic".into()),
            ("PI_CLIENT_MODEL", "fake-claude".into()),
            ("PI_CLIENT_ARGS", args),
            ("PI_CLIENT_PROFILE", profile.into()),
        ],
        Duration::from_secs(120),
    );
    assert!(
        ok,
        "pi {version}'s RpcClient ({profile} profile) failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("RpcClient methods"), "{stdout}");
    fake.finish();
}

/// pi 1.6.0's RpcClient, every method, against the default (newest) profile.
#[test]
fn rpc_client_of_pi_1_6_0_drives_every_method_in_the_default_profile() {
    drive_every_method("1.6.0", "default", &[]);
}

/// pi 0.73.1's RpcClient, every method, against `--rpc-profile legacy`.
#[test]
fn rpc_client_of_pi_0_73_1_drives_every_method_in_the_legacy_profile() {
    drive_every_method("0.73.1", "legacy", &["--rpc-profile", "legacy"]);
}

/// The seed's minimal Python client (LF-split binary reads, text deltas printed, stop at
/// agent_settled) gets a full turn in which the model calls a tool: it prints the final text and
/// exits; the tool's output reached the model.
#[test]
fn minimal_python_client_from_the_seed_does_a_turn_with_a_tool_call() {
    let Some(python) = python3() else {
        missing("python3 is not installed");
        return;
    };
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_bash("toolu_py", "echo from-the-tool")),
        Reply::sse(sse::anthropic_text(&["The tool said ", "from-the-tool."])),
    ]);
    let workspace = Workspace::new();
    prepare(&workspace, &fake, serde_json::json!({}));
    let script = repo_path("tests/clients/minimal_client.py");
    let bin = binary();
    let (ok, stdout, stderr) = run_in(
        &workspace,
        &python,
        &[
            &script.to_string_lossy(),
            &bin.to_string_lossy(),
            "--provider",
            "fake-anthropic",
            "--model",
            "fake-claude",
        ],
        &[],
        Duration::from_secs(60),
    );
    assert!(
        ok,
        "the minimal client failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(
        stdout, "The tool said from-the-tool.\n",
        "stderr:\n{stderr}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let tool_result = requests[1].messages().last().cloned().unwrap_or_default();
    assert!(
        tool_result.to_string().contains("from-the-tool"),
        "the tool's output reached the model: {tool_result}"
    );
    fake.finish();
}

/// The real `python3` executable (not a version-manager shim, which needs the user's HOME).
fn python3() -> Option<PathBuf> {
    let output = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = String::from_utf8(output.stdout).ok()?;
    let path = PathBuf::from(path.trim());
    (output.status.success() && path.is_file()).then_some(path)
}
