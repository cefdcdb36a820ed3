//! The tool sandbox through the real binary: the model (scripted by the fake provider) tries to
//! write outside the workspace with write/edit, bash and a grandchild, read denied paths, reach
//! pi-rs's own `/proc` entries from bash as root, connect to a listener on 127.0.0.1 with
//! `network: false`, escape through symlinks and `..`; a tool started before `set_sandbox` keeps
//! its sandbox; abort still kills the sandboxed group; `onUnsupported` fails or warns.
//!
//! Every test that needs Landlock prints `SKIP` (and asserts nothing) on a kernel without it; the
//! `onUnsupported` test runs everywhere (it caps the ABI pi-rs uses to 0). The workspace lives in
//! the system temp folder, so each run gets its own `TMPDIR` inside the workspace: the parent
//! folder of the cwd is then really "outside".
//!
//! Reference: pi has no sandbox; every test here fails there by design.

use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{
    Pi, Setup, Workspace, end_text, is_root, process_alive, tool_ends, tool_reply, tool_script,
    wait_for_tool_pid, wait_until_gone,
};

/// The kernel's Landlock ABI (0: none).
fn landlock_abi() -> i64 {
    // SAFETY: the version query takes no attribute pointer.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    version.max(0)
}

/// False (after printing SKIP) when the kernel cannot run the test.
pub fn landlock_or_skip(test: &str) -> bool {
    if landlock_abi() == 0 {
        println!("SKIP {test}: this kernel has no Landlock");
        eprintln!("SKIP {test}: this kernel has no Landlock");
        return false;
    }
    true
}

/// A workspace whose temp folder is its own `tmp/` (so `..` of the cwd is outside everything).
pub fn workspace() -> Workspace {
    let workspace = Workspace::new();
    std::fs::create_dir_all(workspace.root().join("tmp")).unwrap();
    workspace
}

pub fn sandboxed(setup: Setup, workspace: &Workspace) -> Setup {
    setup.env("TMPDIR", &workspace.root().join("tmp").to_string_lossy())
}

/// Runs one prompt in which the model makes each call in turn; returns each call's
/// `tool_execution_end` and the running pi.
fn run_calls(
    workspace: &Workspace,
    settings: Value,
    extra: &[&str],
    calls: &[(&str, Value)],
) -> (Pi, Vec<Value>) {
    let fake = FakeProvider::start(tool_script(calls));
    let mut setup = sandboxed(Setup::anthropic(&fake).settings(settings), workspace)
        .arg("--tools")
        .arg("read,bash,edit,write,grep,find,ls");
    for arg in extra {
        setup = setup.arg(arg);
    }
    let mut pi = Pi::spawn_in(workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Go"}));
    let ends = tool_ends(pi.records_until_event("agent_end"), calls.len());
    fake.finish();
    (pi, ends)
}

#[track_caller]
fn assert_blocked(end: &Value, expected: &str) {
    assert_eq!(end["isError"], true, "{end}");
    assert_eq!(end_text(end), expected, "{end}");
}

fn workspace_write() -> Value {
    json!({"sandbox": {"mode": "workspace-write"}})
}

#[test]
fn writes_outside_the_workspace_are_blocked_for_tools_bash_and_grandchildren() {
    if !landlock_or_skip("writes_outside_the_workspace") {
        return;
    }
    let workspace = workspace();
    let root = workspace.root().to_path_buf();
    std::fs::write(root.join("existing.txt"), "old text\n").unwrap();
    let outside = root.join("outside.txt");
    let (_pi, ends) = run_calls(
        &workspace,
        workspace_write(),
        &[],
        &[
            ("write", json!({"path": outside, "content": "x"})),
            (
                "edit",
                json!({"path": "../existing.txt", "edits": [{"oldText": "old", "newText": "new"}]}),
            ),
            ("write", json!({"path": "inside.txt", "content": "fine"})),
            (
                "edit",
                json!({"path": "inside.txt", "edits": [{"oldText": "fine", "newText": "good"}]}),
            ),
            (
                "bash",
                json!({"command": "echo x > ../bash.txt; echo rc=$?; echo y > in-bash.txt; echo t > \"$TMPDIR/t.txt\"; echo done"}),
            ),
            (
                "bash",
                json!({"command": "sh -c 'sh -c \"echo x > ../grandchild.txt\"'; (setsid sh -c 'echo x > ../detached.txt' &); sleep 0.3; echo end"}),
            ),
        ],
    );
    assert_blocked(
        &ends[0],
        &format!(
            "blocked by the sandbox: write outside the workspace: {}",
            outside.display()
        ),
    );
    assert_blocked(
        &ends[1],
        &format!(
            "blocked by the sandbox: write outside the workspace: {}",
            root.join("existing.txt").display()
        ),
    );
    assert_eq!(ends[2]["isError"], false, "{}", ends[2]);
    assert_eq!(ends[3]["isError"], false, "{}", ends[3]);
    let bash = end_text(&ends[4]);
    assert!(bash.contains("Permission denied"), "{bash}");
    assert!(bash.contains("rc=1") && bash.contains("done"), "{bash}");
    assert!(end_text(&ends[5]).contains("end"), "{}", ends[5]);

    assert!(!outside.exists());
    assert_eq!(
        std::fs::read_to_string(root.join("existing.txt")).unwrap(),
        "old text\n"
    );
    for name in ["bash.txt", "grandchild.txt", "detached.txt"] {
        assert!(!root.join(name).exists(), "{name} was written outside");
    }
    assert_eq!(
        std::fs::read_to_string(workspace.cwd().join("inside.txt")).unwrap(),
        "good"
    );
    assert!(workspace.cwd().join("in-bash.txt").exists());
    assert!(
        root.join("tmp/t.txt").exists(),
        "the temp folder is writable"
    );
}

#[test]
fn read_only_mode_blocks_writes_in_the_workspace_too() {
    if !landlock_or_skip("read_only_mode") {
        return;
    }
    let workspace = workspace();
    std::fs::write(workspace.cwd().join("a.txt"), "keep\n").unwrap();
    let (_pi, ends) = run_calls(
        &workspace,
        json!({}),
        &["--sandbox", "read-only"],
        &[
            ("write", json!({"path": "b.txt", "content": "x"})),
            ("read", json!({"path": "a.txt"})),
            (
                "bash",
                json!({"command": "cat a.txt; rm a.txt; echo x > c.txt; echo t > \"$TMPDIR/t.txt\" && echo tmp-ok; cat <(echo procsub-ok); sh -c 'echo to-stderr > /dev/stderr' 2>&1"}),
            ),
            ("grep", json!({"pattern": "keep"})),
            ("find", json!({"pattern": "*.txt"})),
            ("ls", json!({})),
        ],
    );
    assert_blocked(
        &ends[0],
        &format!(
            "blocked by the sandbox: write in read-only mode: {}",
            workspace.cwd().join("b.txt").display()
        ),
    );
    assert_eq!(end_text(&ends[1]), "keep\n");
    let bash = end_text(&ends[2]);
    assert!(bash.starts_with("keep\n"), "{bash}");
    assert!(bash.contains("tmp-ok"), "{bash}");
    // /dev/fd and /dev/stderr still work in grandchildren (pipes are not paths Landlock checks).
    assert!(
        bash.contains("procsub-ok") && bash.contains("to-stderr"),
        "{bash}"
    );
    // The confined tool threads (and ripgrep/fd they start) still read the workspace.
    assert!(end_text(&ends[3]).contains("a.txt:1: keep"), "{}", ends[3]);
    assert_eq!(end_text(&ends[4]), "a.txt", "{}", ends[4]);
    assert!(end_text(&ends[5]).contains("a.txt"), "{}", ends[5]);
    assert!(workspace.cwd().join("a.txt").exists());
    assert!(!workspace.cwd().join("c.txt").exists());
}

#[test]
fn denied_paths_are_unreadable_by_tools_and_bash() {
    if !landlock_or_skip("denied_paths") {
        return;
    }
    let workspace = workspace();
    let root = workspace.root().to_path_buf(); // HOME
    std::fs::create_dir_all(root.join(".ssh")).unwrap();
    std::fs::write(root.join(".ssh/id_rsa"), "PRIVATE-KEY-TEXT").unwrap();
    std::fs::write(workspace.agent_dir().join("auth.json"), "AUTH-JSON-TEXT").unwrap();
    std::fs::create_dir_all(workspace.cwd().join("vault")).unwrap();
    std::fs::write(workspace.cwd().join("vault/s.txt"), "VAULT-TEXT").unwrap();
    std::fs::write(workspace.cwd().join("open.txt"), "OPEN-TEXT").unwrap();
    let settings = json!({"sandbox": {"mode": "workspace-write", "readDeny": ["vault"]}});
    let auth = workspace.agent_dir().join("auth.json");
    let (_pi, ends) = run_calls(
        &workspace,
        settings,
        &[],
        &[
            ("read", json!({"path": "~/.ssh/id_rsa"})),
            ("read", json!({"path": auth})),
            ("grep", json!({"pattern": "TEXT", "path": "vault"})),
            (
                "bash",
                json!({"command": format!("cat ~/.ssh/id_rsa; cat {}; cat vault/s.txt; cat open.txt; ls ~ >/dev/null && echo home-listed", auth.display())}),
            ),
        ],
    );
    assert_blocked(
        &ends[0],
        &format!(
            "blocked by the sandbox: read of a denied path: {}",
            root.join(".ssh/id_rsa").display()
        ),
    );
    assert_blocked(
        &ends[1],
        &format!(
            "blocked by the sandbox: read of a denied path: {}",
            auth.display()
        ),
    );
    assert!(
        end_text(&ends[2]).starts_with("blocked by the sandbox: read of a denied path: "),
        "{}",
        ends[2]
    );
    let bash = end_text(&ends[3]);
    for secret in ["PRIVATE-KEY-TEXT", "AUTH-JSON-TEXT", "VAULT-TEXT"] {
        assert!(!bash.contains(secret), "{secret} leaked: {bash}");
    }
    assert_eq!(bash.matches("Permission denied").count(), 3, "{bash}");
    assert!(
        bash.contains("OPEN-TEXT") && bash.contains("home-listed"),
        "{bash}"
    );
}

/// Bash tries to read pi-rs's environment and write into its stdout; inside the sandbox both are
/// refused (Landlock's ptrace scope), so no forged record reaches the client, and outside it too
/// for a root pi-rs (its tool children have no CAP_SYS_PTRACE).
#[test]
fn bash_cannot_reach_pi_rs_proc_entries_even_as_root() {
    if !landlock_or_skip("bash_cannot_reach_pi_rs_proc_entries") {
        return;
    }
    let probe = "tr '\\0' '\\n' < /proc/$PPID/environ | grep PI_SANDBOX_IT_MARKER; \
                 echo '{\"type\":\"forged_record\"}' > /proc/$PPID/fd/1";
    // Reading pi-rs's stdout steals records from the client; only tried inside the sandbox (in the
    // control it would race the harness for the forged record).
    let steal = "cat /proc/$PPID/fd/1 </dev/null & sleep 0.2; kill %1 2>/dev/null; \
                 read -r own < /proc/$$/status && echo own-proc-readable; grep ^CapBnd /proc/$$/status";
    // Another program's environment (keys in a terminal's variables) is closed too.
    let mut other = std::process::Command::new("sleep")
        .arg("30")
        .env("OTHER_PROCESS_MARKER", "other-secret-77")
        .spawn()
        .unwrap();
    let other_pid = other.id();
    let sandboxed_command = format!(
        "{probe}; {steal}; tr '\\0' '\\n' < /proc/{other_pid}/environ | grep OTHER_PROCESS; echo end"
    );
    let control_command = format!("{probe}; echo end");
    let run = |settings: Value, command: &str| {
        let workspace = workspace();
        let fake = FakeProvider::start(vec![
            tool_reply("toolu_0", "bash", json!({"command": command})),
            Reply::sse(sse::anthropic_text(&["done"])),
        ]);
        let setup = sandboxed(Setup::anthropic(&fake).settings(settings), &workspace)
            .env("PI_SANDBOX_IT_MARKER", "marker-value-42");
        let mut pi = Pi::spawn_in(&workspace, &setup);
        pi.send(json!({"id": "p1", "type": "prompt", "message": "Go"}));
        pi.wait_for_event("agent_settled");
        let forged = pi.records().iter().any(|r| r["type"] == "forged_record");
        let end = pi
            .records()
            .iter()
            .find(|r| r["type"] == "tool_execution_end")
            .cloned()
            .expect("tool end");
        fake.finish();
        (end_text(&end), forged)
    };
    let (sandboxed_output, forged) = run(workspace_write(), &sandboxed_command);
    let _ = other.kill();
    let _ = other.wait();
    assert!(
        !sandboxed_output.contains("other-secret-77"),
        "{sandboxed_output}"
    );
    assert!(
        !forged,
        "a forged record reached stdout: {sandboxed_output}"
    );
    assert!(
        !sandboxed_output.contains("marker-value-42"),
        "{sandboxed_output}"
    );
    assert!(
        sandboxed_output.matches("Permission denied").count() >= 4,
        "{sandboxed_output}"
    );
    assert!(
        sandboxed_output.contains("own-proc-readable"),
        "the shell reads its own /proc entry: {sandboxed_output}"
    );
    if is_root() {
        // Root's capabilities that reach around the sandbox are gone (CAP_SYS_MODULE = 16).
        let bounding = sandboxed_output
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no CapBnd line: {sandboxed_output}"));
        assert_eq!(bounding & (1 << 16), 0, "{sandboxed_output}");
        // Without the sandbox, root's tool shell is refused too: it runs without CAP_SYS_PTRACE
        // (issue 29 item 5; the control that the probe works is the client's own `bash` in
        // `hardening::a_root_pi_rs_tool_shell_cannot_open_pi_rs_proc_entries_without_a_sandbox`).
        let (open_output, forged) = run(json!({}), &control_command);
        assert!(!open_output.contains("marker-value-42"), "{open_output}");
        assert!(!forged, "{open_output}");
    } else {
        println!("note: not root; the unsandboxed control is skipped");
    }
}

/// Accepts for `window` and reports whether anything connected.
fn connected_within(listener: &TcpListener, window: Duration) -> bool {
    listener.set_nonblocking(true).unwrap();
    let deadline = std::time::Instant::now() + window;
    while std::time::Instant::now() < deadline {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut buf = [0u8; 16];
            let _ = stream.read(&mut buf);
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn network_case(settings: Value, env: &[(&str, &str)]) -> (String, bool) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let command = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port} && echo tcp-connected); \
         (echo x > /dev/udp/127.0.0.1/{udp_port} && echo udp-sent); \
         python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2); print(\"py-connected\")' 2>&1 | tail -1; \
         echo end"
    );
    let workspace = workspace();
    let mut script = vec![tool_reply("toolu_0", "bash", json!({"command": command}))];
    script.push(Reply::sse(sse::anthropic_text(&["done"])));
    let fake = FakeProvider::start(script);
    let mut setup = sandboxed(Setup::anthropic(&fake).settings(settings), &workspace);
    for (name, value) in env {
        setup = setup.env(name, value);
    }
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Go"}));
    pi.wait_for_event("agent_settled");
    let end = pi
        .records()
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .cloned()
        .expect("tool end");
    let connected = connected_within(&listener, Duration::from_millis(300));
    fake.finish();
    (end_text(&end), connected)
}

#[test]
fn network_false_blocks_connecting_to_a_local_listener() {
    if !landlock_or_skip("network_false") {
        return;
    }
    let closed = json!({"sandbox": {"mode": "workspace-write", "network": false}});
    let (output, connected) = network_case(closed.clone(), &[]);
    assert!(!connected, "{output}");
    assert!(
        !output.contains("tcp-connected") && !output.contains("udp-sent"),
        "{output}"
    );
    assert!(!output.contains("py-connected"), "{output}");
    assert!(output.contains("end"), "{output}");
    // Below ABI 4 Landlock has no network rules: seccomp alone refuses the sockets.
    let (output, connected) = network_case(closed, &[("PI_SANDBOX_LANDLOCK_ABI_LIMIT", "3")]);
    assert!(!connected && !output.contains("tcp-connected"), "{output}");
    // The control: with the network on, the same command connects.
    let (output, connected) = network_case(workspace_write(), &[]);
    assert!(connected && output.contains("tcp-connected"), "{output}");
}

#[test]
fn symlink_and_dotdot_escapes_are_blocked() {
    if !landlock_or_skip("symlink_and_dotdot_escapes") {
        return;
    }
    let workspace = workspace();
    let root = workspace.root().to_path_buf();
    let cwd = workspace.cwd();
    std::fs::create_dir_all(root.join("elsewhere")).unwrap();
    std::fs::create_dir_all(root.join(".ssh")).unwrap();
    std::fs::write(root.join(".ssh/id_rsa"), "PRIVATE-KEY-TEXT").unwrap();
    std::os::unix::fs::symlink(root.join("elsewhere"), cwd.join("out-link")).unwrap();
    std::os::unix::fs::symlink(root.join(".ssh"), cwd.join("keys")).unwrap();
    let (_pi, ends) = run_calls(
        &workspace,
        workspace_write(),
        &[],
        &[
            ("write", json!({"path": "out-link/x.txt", "content": "x"})),
            (
                "write",
                json!({"path": "sub/../../escape.txt", "content": "x"}),
            ),
            ("read", json!({"path": "keys/id_rsa"})),
            (
                "bash",
                json!({"command": "echo x > out-link/y.txt; cd .. && echo x > escape2.txt; cd - >/dev/null; cat keys/id_rsa; ln -s ../.ssh/id_rsa l && cat l; echo end"}),
            ),
        ],
    );
    assert_blocked(
        &ends[0],
        &format!(
            "blocked by the sandbox: write outside the workspace: {} (resolves to {})",
            cwd.join("out-link/x.txt").display(),
            root.join("elsewhere/x.txt").display()
        ),
    );
    assert_blocked(
        &ends[1],
        &format!(
            "blocked by the sandbox: write outside the workspace: {}",
            root.join("escape.txt").display()
        ),
    );
    assert_blocked(
        &ends[2],
        &format!(
            "blocked by the sandbox: read of a denied path: {} (resolves to {})",
            cwd.join("keys/id_rsa").display(),
            root.join(".ssh/id_rsa").display()
        ),
    );
    let bash = end_text(&ends[3]);
    assert!(!bash.contains("PRIVATE-KEY-TEXT"), "{bash}");
    assert!(bash.contains("end"), "{bash}");
    assert!(!root.join("elsewhere/x.txt").exists());
    assert!(!root.join("elsewhere/y.txt").exists());
    assert!(!root.join("escape.txt").exists() && !root.join("escape2.txt").exists());
}

/// A shell started in read-only mode keeps it after `set_sandbox` turns the sandbox off; the
/// next tool gets the new mode. `get_state` reports the change.
#[test]
fn a_tool_started_before_a_mode_change_keeps_its_sandbox() {
    if !landlock_or_skip("a_tool_started_before_a_mode_change") {
        return;
    }
    let workspace = workspace();
    let fake = FakeProvider::start(vec![
        tool_reply(
            "toolu_0",
            "bash",
            json!({"command": "echo started $$; sleep 1; echo x > before.txt; echo rc=$?"}),
        ),
        tool_reply(
            "toolu_1",
            "bash",
            json!({"command": "echo y > after.txt; echo rc=$?"}),
        ),
        Reply::sse(sse::anthropic_text(&["done"])),
    ]);
    let setup = sandboxed(Setup::anthropic(&fake), &workspace)
        .arg("--sandbox")
        .arg("read-only");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["data"]["sandbox"]["mode"], "read-only", "{state}");
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Go"}));
    wait_for_tool_pid(&mut pi, "started");
    let changed = pi.command("m1", "set_sandbox", json!({"mode": "off"}));
    assert_eq!(changed["success"], true, "{changed}");
    assert_eq!(changed["data"]["sandbox"]["mode"], "off", "{changed}");
    let run = pi.records_until_event("agent_end");
    let ends: Vec<&Value> = run
        .iter()
        .filter(|r| r["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends.len(), 2, "{run:?}");
    assert!(end_text(ends[0]).contains("rc=1"), "{}", ends[0]);
    assert!(end_text(ends[1]).contains("rc=0"), "{}", ends[1]);
    assert!(!workspace.cwd().join("before.txt").exists());
    assert!(workspace.cwd().join("after.txt").exists());
    let state = pi.command("s2", "get_state", json!({}));
    assert_eq!(
        state["data"].get("sandbox"),
        None,
        "off: pi's shape: {state}"
    );
    let bad = pi.command("m2", "set_sandbox", json!({"mode": "loose"}));
    assert_eq!(bad["success"], false);
    assert_eq!(
        bad["error"],
        "Invalid sandbox mode \"loose\". Valid values: off, read-only, workspace-write"
    );
    fake.finish();
}

#[test]
fn get_state_reports_the_effective_sandbox_and_the_project_only_tightens() {
    let workspace = workspace();
    std::fs::create_dir_all(workspace.cwd().join(".pi")).unwrap();
    std::fs::write(
        workspace.cwd().join(".pi/settings.json"),
        r#"{"sandbox": {"mode": "off", "network": false, "writableRoots": ["/"], "readDeny": ["private"]}}"#,
    )
    .unwrap();
    let fake = FakeProvider::start(Vec::new());
    let settings = json!({"sandbox": {"mode": "workspace-write", "writableRoots": ["/opt/cache"]}});
    let setup = sandboxed(Setup::anthropic(&fake).settings(settings), &workspace).trust_project();
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let state = pi.command("s1", "get_state", json!({}));
    let sandbox = &state["data"]["sandbox"];
    assert_eq!(sandbox["mode"], "workspace-write", "{sandbox}");
    assert_eq!(sandbox["network"], false, "{sandbox}");
    assert_eq!(sandbox["landlockAbi"], landlock_abi(), "{sandbox}");
    assert_eq!(sandbox["enforced"], landlock_abi() > 0, "{sandbox}");
    assert_eq!(sandbox["onUnsupported"], "fail");
    let roots: Vec<&str> = sandbox["writableRoots"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!roots.contains(&"/"), "{sandbox}");
    assert!(roots.contains(&"/opt/cache"), "{sandbox}");
    let deny = sandbox["readDeny"].to_string();
    assert!(
        deny.contains("/work/private") && deny.contains(".ssh"),
        "{sandbox}"
    );
    if landlock_abi() >= 6 {
        let landlock = sandbox["layers"]["landlock"].to_string();
        assert!(landlock.contains("filesystem writes"), "{sandbox}");
        assert!(landlock.contains("TCP connect and bind"), "{sandbox}");
        assert_eq!(sandbox["layers"]["noNewPrivs"], true);
    }
    assert!(pi.stderr_text().contains("writableRoots ignored"));
    fake.finish();
}

#[test]
fn abort_of_a_sandboxed_run_kills_the_whole_group() {
    if !landlock_or_skip("abort_of_a_sandboxed_run") {
        return;
    }
    let workspace = workspace();
    let fake = FakeProvider::start(vec![
        tool_reply(
            "toolu_0",
            "bash",
            json!({"command": "sleep 100 & echo started $!; wait"}),
        ),
        Reply::sse(sse::anthropic_text(&["done"])),
    ]);
    let setup = sandboxed(
        Setup::anthropic(&fake).settings(workspace_write()),
        &workspace,
    );
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Go"}));
    let pid = wait_for_tool_pid(&mut pi, "started");
    assert!(process_alive(pid));
    pi.send(json!({"id": "a1", "type": "abort"}));
    pi.wait_for_event("agent_end");
    assert!(
        wait_until_gone(pid, Duration::from_secs(3)),
        "grandchild {pid} survived"
    );
}

/// On a kernel without Landlock (here: the ABI capped to 0), `fail` refuses every tool and
/// `warn` runs it unconfined after a warning notice. Runs on every kernel.
#[test]
fn on_unsupported_fails_by_default_and_warns_when_asked() {
    let outside_of = |w: &Workspace| w.root().join("outside.txt");
    let run = |on_unsupported: Option<&str>| {
        let workspace = workspace();
        let mut sandbox = json!({"mode": "workspace-write"});
        if let Some(value) = on_unsupported {
            sandbox["onUnsupported"] = json!(value);
        }
        let outside = outside_of(&workspace);
        let fake = FakeProvider::start(vec![
            tool_reply("toolu_0", "write", json!({"path": outside, "content": "x"})),
            tool_reply("toolu_1", "bash", json!({"command": "echo ran"})),
            Reply::sse(sse::anthropic_text(&["done"])),
        ]);
        let setup = sandboxed(
            Setup::anthropic(&fake).settings(json!({ "sandbox": sandbox })),
            &workspace,
        )
        .env("PI_SANDBOX_LANDLOCK_ABI_LIMIT", "0");
        let mut pi = Pi::spawn_in(&workspace, &setup);
        pi.send(json!({"id": "p1", "type": "prompt", "message": "Go"}));
        pi.wait_for_event("agent_settled");
        let records = pi.records().to_vec();
        fake.finish();
        (records, outside.exists())
    };
    let reason = "blocked by the sandbox: sandbox mode workspace-write needs Landlock, which this \
                  kernel does not offer (sandbox.onUnsupported is \"fail\")";
    let (records, written) = run(None);
    let ends: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends.len(), 2);
    for end in &ends {
        assert_blocked(end, reason);
    }
    assert!(!written);
    let is_warning =
        |r: &&Value| r["type"] == "extension_ui_request" && r["notifyType"] == "warning";
    assert!(!records.iter().any(|r| is_warning(&r)));

    let (records, written) = run(Some("warn"));
    let warning = records.iter().find(is_warning).expect("a warning notice");
    assert!(
        warning["message"].as_str().unwrap().starts_with(
            "the sandbox is not enforced: sandbox mode workspace-write needs Landlock"
        ),
        "{warning}"
    );
    assert!(written, "warn runs the tool unconfined");
    let ran = records
        .iter()
        .filter(|r| r["type"] == "tool_execution_end")
        .any(|r| end_text(r).contains("ran"));
    assert!(ran);
}

/// Extensions run outside the sandbox unless `sandbox.extensions` is true.
#[test]
fn extensions_are_confined_only_when_asked() {
    if !landlock_or_skip("extensions_are_confined_only_when_asked") {
        return;
    }
    let run = |extensions: bool| {
        let workspace = workspace();
        let script = workspace.cwd().join("ext.sh");
        std::fs::write(
            &script,
            "#!/bin/sh\necho x > ../from-extension.txt 2>/dev/null\n\
             echo '{\"type\":\"register\",\"protocol\":1}'\nwhile read -r line; do :; done\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let fake = FakeProvider::start(Vec::new());
        let settings = json!({"sandbox": {"mode": "workspace-write", "extensions": extensions}});
        let setup = sandboxed(Setup::anthropic(&fake).settings(settings), &workspace)
            .arg("-e")
            .arg(&script.to_string_lossy());
        let mut pi = Pi::spawn_in(&workspace, &setup);
        let state = pi.command("s1", "get_state", json!({}));
        assert_eq!(state["data"]["sandbox"]["extensions"], extensions);
        pi.close_and_wait();
        fake.finish();
        workspace.root().join("from-extension.txt").exists()
    };
    assert!(run(false), "an unconfined extension writes where it likes");
    assert!(!run(true), "a confined extension cannot write outside");
}

/// The approval gate still asks inside the sandbox, and "Allow for this session" allows the tool,
/// never more than the sandbox does.
#[test]
fn allow_for_this_session_never_widens_the_sandbox() {
    if !landlock_or_skip("allow_for_this_session_never_widens_the_sandbox") {
        return;
    }
    let workspace = workspace();
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_bash(
            "toolu_1",
            "echo x > ../first.txt; echo one",
        )),
        Reply::sse(sse::anthropic_bash(
            "toolu_2",
            "echo x > ../second.txt; echo two",
        )),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let settings = json!({"sandbox": {"mode": "workspace-write"},
                          "approvals": {"tools": {"bash": "ask"}}});
    let setup = sandboxed(Setup::anthropic(&fake).settings(settings), &workspace);
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Go"}));
    let dialog = pi.wait_for_event("extension_ui_request");
    assert_eq!(dialog["method"], "select", "{dialog}");
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"],
                   "value": "Allow for this session"}));
    let run = pi.records_until_event("agent_end");
    let ends: Vec<&Value> = run
        .iter()
        .filter(|r| r["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends.len(), 2, "{run:?}");
    assert!(
        !run.iter().any(|r| r["type"] == "extension_ui_request"),
        "one dialog only"
    );
    for (end, word) in ends.iter().zip(["one", "two"]) {
        let output = end_text(end);
        assert!(
            output.contains("Permission denied") && output.contains(word),
            "{output}"
        );
    }
    assert!(!workspace.root().join("first.txt").exists());
    assert!(!workspace.root().join("second.txt").exists());
    fake.finish();
}
