//! Security round 3 (issue 29): what an attacker found in the sandbox, MCP, credentials and
//! long-lived state, each through the binary. The round-2 cases are in `security.rs`,
//! `sandbox.rs` and `secrets.rs`.

use std::sync::atomic::{AtomicI32, Ordering};

use serde_json::json;

use crate::fake_provider::{FakeProvider, Reply};
use crate::security::{tool_calls_replies, tool_end};
use crate::sse;
use crate::support::{Pi, Setup, Workspace, file_mode, is_root, open_pty, write_mcp_json};

// ---- item 1: tool children have no controlling terminal ---------------------------------------

/// The pseudo-terminal's slave side the next `as_terminal_session` hook makes pi-rs's controlling
/// terminal (one test uses it).
static TERMINAL_SLAVE: AtomicI32 = AtomicI32::new(-1);

/// Between fork and exec: pi-rs leads a session whose controlling terminal is the test's
/// pseudo-terminal, as when a user starts it from a shell.
fn as_terminal_session() -> std::io::Result<()> {
    // SAFETY: plain syscalls between fork and exec on an fd the parent opened.
    unsafe {
        if libc::setsid() < 0
            || libc::ioctl(TERMINAL_SLAVE.load(Ordering::SeqCst), libc::TIOCSCTTY, 0) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whatever the terminal's output side holds now (the echo of injected input shows up here).
fn drain_master(master: i32) -> String {
    let mut collected = Vec::new();
    let mut buffer = [0u8; 4096];
    // SAFETY: non-blocking reads into a stack buffer.
    unsafe {
        let flags = libc::fcntl(master, libc::F_GETFL);
        libc::fcntl(master, libc::F_SETFL, flags | libc::O_NONBLOCK);
        loop {
            let n = libc::read(master, buffer.as_mut_ptr().cast(), buffer.len());
            if n <= 0 {
                break;
            }
            collected.extend_from_slice(&buffer[..n as usize]);
        }
    }
    String::from_utf8_lossy(&collected).into_owned()
}

/// pi-rs started from a terminal: the model's shell tries to type `echo PWNED` into that
/// terminal with `TIOCSTI`, through `/dev/tty` and through the terminal's own name, and to make
/// the terminal its own (`TIOCSCTTY` with steal). Every attempt fails (no controlling terminal in
/// the tool's new session; no CAP_SYS_ADMIN for a root pi-rs's children) and nothing reaches the
/// terminal's input.
#[test]
fn a_tool_shell_cannot_type_into_pi_rs_terminal() {
    let (master, slave, slave_path) = open_pty();
    TERMINAL_SLAVE.store(slave, Ordering::SeqCst);
    let script = format!(
        r#"python3 - <<'EOF'
import os, fcntl, termios
for path in ['/dev/tty', '{slave_path}']:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as e:
        print(path, 'open-failed', e.errno)
        continue
    try:
        fcntl.ioctl(fd, termios.TIOCSCTTY, 1)
        print(path, 'stolen')
    except OSError as e:
        print(path, 'steal-failed', e.errno)
    try:
        for c in b'echo PWNED\n':
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        print(path, 'injected')
    except OSError as e:
        print(path, 'inject-failed', e.errno)
print('end')
EOF"#
    );
    let fake = FakeProvider::start(tool_calls_replies(&[(
        "t1",
        "bash",
        json!({ "command": script }),
    )]));
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).pre_exec(as_terminal_session));
    // SAFETY: pi-rs holds its own copy.
    unsafe { libc::close(slave) };
    // Control: pi-rs really has the terminal (field 7 of stat, tty_nr, is not 0).
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pi.pid())).unwrap();
    let tty_nr = stat.rsplit(')').next().unwrap().split_whitespace().nth(4);
    assert_ne!(
        tty_nr,
        Some("0"),
        "pi-rs has no controlling terminal: {stat}"
    );
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let text = tool_end(&pi, "t1")["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("end"), "the script ran: {text}");
    assert!(text.contains("/dev/tty open-failed"), "{text}");
    assert!(!text.contains("injected"), "{text}");
    assert!(!text.contains("stolen"), "{text}");
    let typed = drain_master(master);
    assert!(
        !typed.contains("PWNED"),
        "typed into the terminal: {typed:?}"
    );
    // SAFETY: our fd.
    unsafe { libc::close(master) };
}

// ---- item 5: a root pi-rs's tool children lose CAP_SYS_PTRACE -----------------------------------

/// Without any sandbox, the model's shell of a root pi-rs (the usual container case) tries to read
/// pi-rs's environment and to write a forged record into its stdout through `/proc/$PPID`: both
/// are refused (no CAP_SYS_PTRACE nor CAP_PERFMON, so the non-dumpable mark holds for root too), and neither
/// CAP_SYS_PTRACE nor CAP_SYS_ADMIN is left in the shell's bounding or effective set. The control:
/// the client's own RPC `bash` command, run by the same pi-rs, still reads that environment as
/// root (the probe works).
#[test]
fn a_root_pi_rs_tool_shell_cannot_open_pi_rs_proc_entries_without_a_sandbox() {
    let probe = "tr '\\0' '\\n' < /proc/$PPID/environ | grep PI_HARDENING_MARKER; \
                 echo '{\"type\":\"forged_record\"}' > /proc/$PPID/fd/1; \
                 grep -E '^Cap(Eff|Bnd)' /proc/$$/status; echo end";
    let fake = FakeProvider::start(tool_calls_replies(&[(
        "t1",
        "bash",
        json!({ "command": probe }),
    )]));
    let setup = Setup::anthropic(&fake).env("PI_HARDENING_MARKER", "marker-value-29");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let text = tool_end(&pi, "t1")["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("end"), "{text}");
    assert!(!text.contains("marker-value-29"), "environ read: {text}");
    assert!(
        text.matches("Permission denied").count() >= 2,
        "both opens refused: {text}"
    );
    assert!(
        !pi.records().iter().any(|r| r["type"] == "forged_record"),
        "a forged record reached stdout"
    );
    for set in ["CapEff:", "CapBnd:"] {
        let mask = text
            .lines()
            .find_map(|l| l.strip_prefix(set))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {set} line: {text}"));
        assert_eq!(mask & (1 << 19 | 1 << 21 | 1 << 38), 0, "{set} {mask:x}");
    }
    if is_root() {
        let response = pi.request(json!({"id": "b1", "type": "bash",
            "command": "tr '\\0' '\\n' < /proc/$PPID/environ | grep -c PI_HARDENING_MARKER"}));
        assert_eq!(
            response["data"]["output"].as_str().map(str::trim),
            Some("1"),
            "the control: the client's command reads it as root: {response}"
        );
    } else {
        println!("note: not root; the root-only control is skipped");
    }
}

// ---- item 11: session files are private -------------------------------------------------------

/// A session file holds the whole conversation: a new one is 0600 in folders created 0700 (as
/// OpenSSH treats private files, whatever the umask); a file that already exists keeps its
/// mode, also when a torn tail makes pi-rs rewrite it.
#[test]
fn session_files_are_created_private_and_existing_modes_are_kept() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["one"])),
        Reply::sse(sse::anthropic_text(&["two"])),
    ]);
    let workspace = Workspace::new();
    let setup = Setup::anthropic(&fake).with_sessions();
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "hello"}));
    pi.wait_for_event("agent_settled");
    pi.close_and_wait();
    let files = workspace.jsonl_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let file = files[0].clone();
    assert_eq!(file_mode(&file), 0o600, "{}", file.display());
    let folder = workspace.default_session_dir();
    assert_eq!(file.parent(), Some(folder.as_path()));
    assert_eq!(file_mode(&folder), 0o700, "{}", folder.display());
    assert_eq!(file_mode(folder.parent().unwrap()), 0o700, "sessions/");

    // An existing file's mode is the user's choice: kept through a repair and appends.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(r#"{"type":"message","id":"torn","#);
    std::fs::write(&file, text).unwrap();
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .arg("--session")
        .arg(&file.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p2", "type": "prompt", "message": "again"}));
    pi.wait_for_event("agent_settled");
    pi.close_and_wait();
    assert!(pi.stderr_text().contains("torn"), "{}", pi.stderr_text());
    assert!(
        std::fs::read_to_string(&file).unwrap().contains("again"),
        "resumed in the same file"
    );
    assert_eq!(file_mode(&file), 0o640);
}

// ---- items 8, 13: MCP spill files and mcp.log ---------------------------------------------------

const MCP_KEY: &str = "sk-hardening-MCP-SECRET-0123456789";

/// A models.json whose fake key is `key` (so it joins the redaction set at start).
fn models_with_key(key: &str) -> String {
    crate::fake_provider::fixture("models.json").replace("\"test-key\"", &format!("\"{key}\""))
}

fn write_fake_mcp_server(workspace: &Workspace, args: &[&str]) {
    let entry = json!({
        "command": crate::fake_provider::fixture_path("mcp/fake_server.py").to_string_lossy(),
        "args": args,
    });
    write_mcp_json(workspace, json!({"fake": entry}));
}

/// An MCP result over 20 KB that carries a known key is spilled like bash output: into the
/// process's private folder (0700), as a 0600 file, redacted, and removed at exit when no session
/// file refers to it. Before, it went to `$TMPDIR/pi-mcp-*.txt` unredacted and stayed.
#[test]
fn long_mcp_results_are_spilled_privately_redacted_and_removed_at_exit() {
    let fake = FakeProvider::start(tool_calls_replies(&[(
        "c1",
        "mcp__fake__huge",
        json!({"size": 30000, "text": MCP_KEY}),
    )]));
    let workspace = Workspace::new();
    write_fake_mcp_server(&workspace, &[]);
    let setup = Setup::anthropic(&fake).models_json(&models_with_key(MCP_KEY));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let end = tool_end(&pi, "c1").clone();
    let path = std::path::PathBuf::from(
        end["result"]["details"]["fullOutputPath"]
            .as_str()
            .unwrap_or_else(|| panic!("no fullOutputPath: {end}")),
    );
    let folder = path.parent().unwrap().to_path_buf();
    assert!(
        folder
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("pi-rs-")),
        "in the private spill folder: {}",
        path.display()
    );
    assert_eq!(file_mode(&folder), 0o700);
    assert_eq!(file_mode(&path), 0o600);
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(!saved.contains(MCP_KEY), "the key reached the disk");
    assert!(saved.starts_with("HEAD[redacted]"), "{}", &saved[..40]);
    pi.close_and_wait();
    assert!(!path.exists(), "left behind: {}", path.display());
    assert!(!folder.exists(), "left behind: {}", folder.display());
}

// ---- item 9: a stale auth.json.lock never stalls the agent ------------------------------------

/// CPU time (user + system, in clock ticks) `pid` has used so far.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // After the name: state is field 3, utime 14, stime 15 (1-based over the whole line).
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// An expired Anthropic login in `workspace` and a stale `auth.json.lock` of `lock_kind` ("file"
/// or "non-empty folder", untouched for an hour) that pi's lock cannot take over; the setup
/// refreshes at `tokens`.
fn stale_lock_and_expired_login(
    workspace: &Workspace,
    lock_kind: &str,
    provider: &FakeProvider,
    tokens: &FakeProvider,
) -> Setup {
    expired_anthropic_login(workspace, "refresh-1");
    let lock = workspace.agent_dir().join("auth.json.lock");
    if lock_kind == "file" {
        std::fs::write(&lock, "x").unwrap();
    } else {
        std::fs::create_dir(&lock).unwrap();
        std::fs::write(lock.join("junk"), "x").unwrap();
    }
    let status = std::process::Command::new("touch")
        .args(["-d", "1 hour ago"])
        .arg(&lock)
        .status()
        .unwrap();
    assert!(status.success());
    oauth_setup(provider, tokens)
}

/// An expired subscription login and a stale `auth.json.lock` that pi's lock cannot take over
/// (a file, then a non-empty folder, both untouched for an hour): the prompt's refresh waits on
/// a worker, bounded and without spinning, while the agent answers commands; `abort` ends the
/// wait at once (the prompt fails with a clear error) and SIGTERM ends the process. Before, the
/// agent thread spun at 100 % CPU forever and ignored all three.
#[test]
fn a_stale_auth_lock_with_an_expired_login_never_stalls_the_agent() {
    for lock_kind in ["file", "non-empty folder"] {
        let tokens = FakeProvider::start_auth_server(vec![]);
        let provider = FakeProvider::start(vec![]);
        let workspace = Workspace::new();
        let setup = stale_lock_and_expired_login(&workspace, lock_kind, &provider, &tokens);
        let mut pi = Pi::spawn_in(&workspace, &setup);
        pi.send(json!({"id": "p1", "type": "prompt", "message": "hi"}));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let before = cpu_ticks(pi.pid());
        pi.send(json!({"id": "s1", "type": "get_state"}));
        let soon = std::time::Instant::now() + std::time::Duration::from_secs(3);
        let seen = pi.recv_until(|r| r["id"] == "s1", soon);
        assert!(
            seen.last().is_some_and(|r| r["id"] == "s1"),
            "{lock_kind}: get_state unanswered during the refresh wait"
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
        let used = cpu_ticks(pi.pid()) - before;
        assert!(used < 30, "{lock_kind}: {used} ticks of CPU while waiting");
        pi.send(json!({"id": "a1", "type": "abort"}));
        let soon = std::time::Instant::now() + std::time::Duration::from_secs(3);
        let seen = pi.recv_until(|r| r["id"] == "p1", soon);
        let response = seen.last().cloned().unwrap_or_default();
        assert_eq!(
            response["id"], "p1",
            "{lock_kind}: abort did not end the wait"
        );
        assert_eq!(response["success"], false, "{response}");
        assert!(tokens.requests().is_empty(), "no refresh without the lock");
        pi.send(json!({"id": "p2", "type": "prompt", "message": "again"}));
        std::thread::sleep(std::time::Duration::from_millis(300));
        pi.signal(libc::SIGTERM);
        let started = std::time::Instant::now();
        let status = pi.wait_for_exit();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{lock_kind}: SIGTERM took {:?}",
            started.elapsed()
        );
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.code() == Some(143) || status.signal() == Some(libc::SIGTERM),
            "{lock_kind}: {status:?}"
        );
    }
}

/// The same stale lock when a `compact` command needs the login: the refresh waits on a worker,
/// so `get_state` is answered meanwhile and `abort` ends the compaction at once (the command
/// fails as cancelled, `compaction_end` says aborted). Before, the compaction refreshed on the
/// agent thread, deaf to both for up to 30 s.
#[test]
fn a_compaction_waiting_for_a_login_refresh_is_aborted_at_once() {
    let tokens = FakeProvider::start_auth_server(vec![]);
    let provider = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    let setup = stale_lock_and_expired_login(&workspace, "non-empty folder", &provider, &tokens);
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "c1", "type": "compact"}));
    std::thread::sleep(std::time::Duration::from_millis(300));
    pi.send(json!({"id": "s1", "type": "get_state"}));
    let soon = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let seen = pi.recv_until(|r| r["id"] == "s1", soon);
    assert!(
        seen.last().is_some_and(|r| r["id"] == "s1"),
        "get_state unanswered while the compaction waits for the login"
    );
    pi.send(json!({"id": "a1", "type": "abort"}));
    let soon = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let seen = pi.recv_until(|r| r["id"] == "c1", soon);
    let response = seen.last().cloned().unwrap_or_default();
    assert_eq!(response["id"], "c1", "abort did not end the compaction");
    assert_eq!(response["success"], false, "{response}");
    let end = pi
        .records()
        .iter()
        .find(|r| r["type"] == "compaction_end")
        .cloned()
        .unwrap_or_default();
    assert_eq!(end["aborted"], true, "{end}");
    assert!(tokens.requests().is_empty(), "no refresh without the lock");
    pi.close_and_wait();
}

// ---- item 7: redaction misses ------------------------------------------------------------------

/// The model writes the key inside tool-call arguments with `\u` escapes, split across deltas
/// (`\u00` in one piece, `73` in the next): a client that joins the `toolcall_delta`s and parses
/// them must not get the key. pi-rs writes the escapes out as the characters they stand for
/// (the same JSON value) so the key is seen — and redacted — whole.
#[test]
fn a_key_spelled_with_unicode_escapes_across_toolcall_deltas_is_redacted() {
    const KEY: &str = "sk-hardening-ESCAPED-0123456789";
    let escaped: String = KEY
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let arguments = format!(r#"{{"command":"echo {escaped} > /dev/null"}}"#);
    let pieces: Vec<String> = arguments
        .as_bytes()
        .chunks(5)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("t1", "bash", &pieces)
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = Setup::anthropic(&fake).models_json(&models_with_key(KEY));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let joined: String = pi
        .records()
        .iter()
        .filter(|r| r["assistantMessageEvent"]["type"] == "toolcall_delta")
        .map(|r| {
            r["assistantMessageEvent"]["delta"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let parsed: serde_json::Value =
        serde_json::from_str(&joined).unwrap_or_else(|e| panic!("{e}: {joined}"));
    let command = parsed["command"].as_str().unwrap();
    assert!(
        !command.contains(KEY),
        "the client completes the key: {command}"
    );
    assert!(command.contains("[redacted]"), "{command}");
    for (index, line) in (0..pi.records().len()).map(|i| (i, pi.raw_line(i))) {
        assert!(!line.contains(KEY), "record {index}: {line}");
    }
}

/// Values that are credentials by where they come from, though pi-rs never resolved them as a
/// key: a literal `env` value and a header of mcp.json (what `pi mcp add --env/--header`
/// writes), a token in a server URL's query, the password in `HTTPS_PROXY`, and the value of a
/// variable withheld from children by its name. The model repeats each one; stdout shows none.
#[test]
fn config_and_environment_credentials_join_the_redaction_set() {
    let values = [
        "mcp-literal-env-0123456789",
        "hdr-literal-0123456789",
        "url-query-token-0123456789",
        "proxy-PASS-0123456789",
        "tok-env-named-0123456789",
    ];
    let text = values.join(" | ");
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&[&text]))]);
    let workspace = Workspace::new();
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        json!({"mcpServers": {
            "local": {"command": "/bin/true", "env": {"SERVICE_API_KEY": values[0]}},
            "remote": {"url": format!("http://127.0.0.1:9/mcp?token={}&v=2", values[2]),
                       "headers": {"Authorization": format!("Bearer {}", values[1])}},
        }})
        .to_string(),
    )
    .unwrap();
    let setup = Setup::anthropic(&fake)
        .env(
            "HTTPS_PROXY",
            &format!("http://someone:{}@127.0.0.1:9", values[3]),
        )
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("MY_SERVICE_TOKEN", values[4]);
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let end = pi
        .records()
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .cloned()
        .expect("a reply");
    let shown = end["message"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(shown.matches("[redacted]").count(), values.len(), "{shown}");
    for index in 0..pi.records().len() {
        for value in values {
            assert!(!pi.raw_line(index).contains(value), "{value} on stdout");
        }
    }
}

/// items 13, 14: a server that lists `echo` twice and logs the key it was handed. The model sees
/// one `mcp__fake__echo` (two tools with one name make the provider refuse every request), a
/// warning names the duplicate, and `mcp.log` is 0600 with the key redacted.
#[test]
fn mcp_duplicate_tools_are_dropped_and_mcp_log_is_private_and_redacted() {
    let fake = FakeProvider::start(tool_calls_replies(&[(
        "c1",
        "mcp__fake__echo",
        json!({"text": "hi", "log": MCP_KEY}),
    )]));
    let workspace = Workspace::new();
    write_fake_mcp_server(&workspace, &["--duplicate"]);
    let setup = Setup::anthropic(&fake).models_json(&models_with_key(MCP_KEY));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let requests = fake.requests();
    let declared: Vec<String> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.contains("echo"))
        .map(String::from)
        .collect();
    assert_eq!(declared, ["mcp__fake__echo"]);
    let end = tool_end(&pi, "c1");
    assert_eq!(end["result"]["content"][0]["text"], "echo: hi", "{end}");
    let stderr = pi.stderr_text();
    assert!(
        stderr.contains("lists the tool \"echo\" more than once"),
        "{stderr}"
    );
    pi.close_and_wait();
    let log = workspace.agent_dir().join("mcp.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(MCP_KEY), "{text}");
    assert!(text.contains("echoing [redacted]"), "{text}");
    assert_eq!(file_mode(&log), 0o600);
}

// ---- item 15: OAuth refresh answers never leak tokens -----------------------------------------

fn expired_anthropic_login(workspace: &Workspace, refresh: &str) {
    std::fs::write(
        workspace.agent_dir().join("auth.json"),
        json!({"anthropic": {"type": "oauth", "refresh": refresh,
            "access": "sk-ant-oat01-OLD-expired", "expires": 1000}})
        .to_string(),
    )
    .unwrap();
}

fn oauth_setup(provider: &FakeProvider, tokens: &FakeProvider) -> Setup {
    Setup::new(provider, "anthropic", "claude-sonnet-4-5")
        .models_json(r#"{"providers": {"anthropic": {"baseUrl": "__BASE_URL__"}}}"#)
        .env(
            "PI_OAUTH_ANTHROPIC_TOKEN_URL",
            &format!("{}/token", tokens.base_url()),
        )
}

/// A token endpoint that refuses and echoes the old refresh token: the error (prompt response and
/// stderr) says why without the token. A `200` without `expires_in`: as pi 1.6.0, the new tokens
/// are used (and written with `"expires": null`), and neither reaches stdout or stderr.
#[test]
fn oauth_refresh_answers_are_redacted_and_a_missing_expiry_is_accepted() {
    const OLD_REFRESH: &str = "refresh-OLD-hardening-0123456789";
    let tokens = FakeProvider::start_auth_server(vec![Reply::status(
        400,
        json!({"error": "invalid_grant", "refresh_token": OLD_REFRESH}).to_string(),
        &[("content-type", "application/json")],
    )]);
    let provider = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    expired_anthropic_login(&workspace, OLD_REFRESH);
    let mut pi = Pi::spawn_in(&workspace, &oauth_setup(&provider, &tokens));
    let response = pi.request(json!({"id": "p", "type": "prompt", "message": "hi"}));
    assert_eq!(response["success"], false, "{response}");
    assert!(
        response["error"].as_str().unwrap().contains("HTTP 400"),
        "{response}"
    );
    pi.close_and_wait();
    let stderr = pi.stderr_text();
    assert!(stderr.contains("invalid_grant"), "{stderr}");
    assert!(!stderr.contains(OLD_REFRESH), "{stderr}");
    for index in 0..pi.records().len() {
        assert!(!pi.raw_line(index).contains(OLD_REFRESH));
    }

    const NEW_ACCESS: &str = "sk-ant-oat01-NEW-hardening-0123456789";
    const NEW_REFRESH: &str = "refresh-NEW-hardening-0123456789";
    let tokens = FakeProvider::start_auth_server(vec![Reply::status(
        200,
        json!({"access_token": NEW_ACCESS, "refresh_token": NEW_REFRESH}).to_string(),
        &[("content-type", "application/json")],
    )]);
    let provider = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["ok"]))]);
    let workspace = Workspace::new();
    expired_anthropic_login(&workspace, OLD_REFRESH);
    let mut pi = Pi::spawn_in(&workspace, &oauth_setup(&provider, &tokens));
    pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
    pi.wait_for_event("agent_settled");
    pi.close_and_wait();
    let sent = provider.requests();
    assert_eq!(
        sent.first().and_then(|r| r.header("authorization")),
        Some(format!("Bearer {NEW_ACCESS}").as_str()),
        "{}",
        pi.stderr_text()
    );
    let auth: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workspace.agent_dir().join("auth.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(auth["anthropic"]["access"], NEW_ACCESS);
    assert_eq!(auth["anthropic"]["expires"], serde_json::Value::Null);
    let stderr = pi.stderr_text();
    for token in [NEW_ACCESS, NEW_REFRESH] {
        assert!(!stderr.contains(token), "{stderr}");
        for index in 0..pi.records().len() {
            assert!(!pi.raw_line(index).contains(token));
        }
    }
}

// ---- item 16: left from earlier rounds --------------------------------------------------------

/// Records serde cannot take though they are objects with an id (nesting past its depth limit, a
/// number beyond f64) still get their id echoed in the parse error; an unknown thinking level
/// is refused and changes nothing.
#[test]
fn parse_errors_keep_the_id_and_unknown_thinking_levels_are_refused() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let deep = format!(
        r#"{{"type":"get_state","x":{}{},"id":"deep"}}"#,
        "[".repeat(300),
        "]".repeat(300)
    );
    pi.send_raw(format!("{deep}\n").as_bytes());
    let response = pi.response_for("deep");
    assert_eq!(response["success"], false, "{response}");
    assert_eq!(response["command"], "parse", "{response}");
    pi.send_raw(b"{\"id\":7,\"type\":\"get_state\",\"x\":1e9999}\n");
    let soon = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let seen = pi.recv_until(|r| r["id"] == 7, soon);
    let response = seen.last().unwrap();
    assert_eq!(response["success"], false, "{response}");
    let before = pi.command("s1", "get_state", json!({}))["data"]["thinkingLevel"].clone();
    let response = pi.command("t1", "set_thinking_level", json!({"level": "ultra"}));
    assert_eq!(response["success"], false, "{response}");
    assert!(
        response["error"].as_str().unwrap().contains("ultra"),
        "{response}"
    );
    let after = pi.command("s2", "get_state", json!({}))["data"]["thinkingLevel"].clone();
    assert_eq!(before, after);
}

/// `read /proc/kmsg` (a file that blocks until the kernel logs something) and a FIFO in the
/// workspace end at once with an error instead of holding the tool until abort.
#[test]
fn reading_files_that_never_end_fails_at_once() {
    let workspace = Workspace::new();
    let fifo = workspace.cwd().join("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let fake = FakeProvider::start(tool_calls_replies(&[
        ("r1", "read", json!({"path": "/proc/kmsg"})),
        ("r2", "read", json!({"path": fifo.to_string_lossy()})),
    ]));
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    let soon = std::time::Instant::now() + std::time::Duration::from_secs(10);
    pi.recv_until(|r| r["type"] == "agent_settled", soon);
    for id in ["r1", "r2"] {
        let end = tool_end(&pi, id);
        assert_eq!(end["isError"], true, "{end}");
    }
}

// ---- item 4: credential files named by the environment and the usual folders are denied -------

/// Under `workspace-write`, the shell reads none of the credential files the environment names
/// (`GOOGLE_APPLICATION_CREDENTIALS`, `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`, every
/// `KUBECONFIG` entry, `DOCKER_CONFIG`, `AZURE_CONFIG_DIR`) nor the default ones (`~/.kube`,
/// `~/.azure`, `~/.docker/config.json`, `~/.netrc`); a plain file beside them stays readable.
#[test]
fn credential_files_named_by_the_environment_are_denied_in_the_sandbox() {
    let workspace = Workspace::new();
    let root = workspace.root().to_path_buf();
    let files = [
        "env/sa.json",
        "env/aws-credentials",
        "env/aws-config",
        "env/kube-a",
        "env/kube-b",
        "env/docker/config.json",
        "env/azure/msal_token_cache.json",
        ".kube/config",
        ".azure/accessTokens.json",
        ".docker/config.json",
        ".netrc",
        "env/plain.txt",
    ];
    for file in files {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("SECRET-IN-{file}\n")).unwrap();
    }
    let at = |relative: &str| root.join(relative).to_string_lossy().into_owned();
    let command = files
        .iter()
        .map(|f| format!("cat '{}' 2>&1 | tail -c 60", at(f)))
        .collect::<Vec<_>>()
        .join("; ");
    let fake = FakeProvider::start(tool_calls_replies(&[(
        "t1",
        "bash",
        json!({ "command": command }),
    )]));
    let setup = Setup::anthropic(&fake)
        .settings(json!({"sandbox": {"mode": "workspace-write"}}))
        .env("GOOGLE_APPLICATION_CREDENTIALS", &at("env/sa.json"))
        .env("AWS_SHARED_CREDENTIALS_FILE", &at("env/aws-credentials"))
        .env("AWS_CONFIG_FILE", &at("env/aws-config"))
        .env(
            "KUBECONFIG",
            &format!("{}:{}", at("env/kube-a"), at("env/kube-b")),
        )
        .env("DOCKER_CONFIG", &at("env/docker"))
        .env("AZURE_CONFIG_DIR", &at("env/azure"));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let text = tool_end(&pi, "t1")["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        text.contains("SECRET-IN-env/plain.txt"),
        "the control file is readable: {text}"
    );
    for file in &files[..files.len() - 1] {
        assert!(
            !text.contains(&format!("SECRET-IN-{file}")),
            "{file} was read: {text}"
        );
    }
    assert_eq!(
        text.matches("Permission denied").count(),
        files.len() - 1,
        "{text}"
    );
}

// ---- item 10: the legacy profile's stdout is bounded -------------------------------------------

/// The legacy profile repeats the message so far in every update: a 200 KB `write` argument
/// streamed in 1,000 pieces wrote ~200 MB. Past 4 KB an update now waits until it brings at
/// least an eighth of the message's size, so stdout stays a small multiple of the reply, and the
/// joined deltas and the final arguments are whole.
#[test]
fn legacy_profile_updates_are_bounded_for_a_long_tool_call() {
    let content: String = (0..200_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let arguments = json!({"path": "big.txt", "content": content}).to_string();
    let pieces: Vec<String> = arguments
        .as_bytes()
        .chunks(200)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("w1", "write", &pieces)
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = Setup::anthropic(&fake).arg("--rpc-profile").arg("legacy");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_end");
    let written: usize = (0..pi.records().len()).map(|i| pi.raw_line(i).len()).sum();
    println!("legacy stdout: {written} bytes");
    assert!(written < 20_000_000, "{written} bytes of stdout");
    let joined: String = pi
        .records()
        .iter()
        .filter(|r| r["assistantMessageEvent"]["type"] == "toolcall_delta")
        .map(|r| {
            r["assistantMessageEvent"]["delta"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(joined, arguments);
    let on_disk = std::fs::read_to_string(pi.cwd().join("big.txt")).unwrap();
    assert_eq!(on_disk.len(), 200_000);
}

// ---- item 6: a resumed session's cwd does not widen the sandbox --------------------------------

/// A session file (anyone may hand one over) whose header names another folder as its cwd: under
/// `workspace-write` that folder does not become writable unless it is the start directory, is
/// inside it, or is a trusted project; the start directory stays the writable root, with a
/// warning.
#[test]
fn a_resumed_sessions_cwd_outside_the_start_directory_is_not_made_writable() {
    let workspace = Workspace::new();
    let elsewhere = workspace.root().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let elsewhere = std::fs::canonicalize(&elsewhere).unwrap();
    let session = workspace.root().join("handed-over.jsonl");
    std::fs::write(
        &session,
        format!(
            "{}\n",
            json!({"type": "session", "version": 3, "id": "01a227d7-0998-7348-9937-69658d923f8e",
                "timestamp": "2026-11-29T15:05:33.849Z", "cwd": elsewhere.to_string_lossy()})
        ),
    )
    .unwrap();
    let start = std::fs::canonicalize(workspace.cwd()).unwrap();
    let command = format!(
        "touch '{}/PWNED' 2>&1; touch '{}/ok' 2>&1; echo end",
        elsewhere.display(),
        start.display()
    );
    let fake = FakeProvider::start(tool_calls_replies(&[(
        "t1",
        "bash",
        json!({ "command": command }),
    )]));
    // The temp folder is writable in the sandbox: the workspace's own, not /tmp around it.
    let temp = workspace.root().join("tmp");
    std::fs::create_dir_all(&temp).unwrap();
    let setup = Setup::anthropic(&fake)
        .settings(json!({"sandbox": {"mode": "workspace-write"}}))
        .env("TMPDIR", &temp.to_string_lossy())
        .with_sessions()
        .arg("--session")
        .arg(&session.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let text = tool_end(&pi, "t1")["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("end"), "{text}");
    assert!(!elsewhere.join("PWNED").exists(), "{text}");
    assert!(
        start.join("ok").exists(),
        "the start directory stays writable: {text}"
    );
    let stderr = pi.stderr_text();
    assert!(stderr.contains("writable root"), "{stderr}");
}

// ---- item 3: an MCP server restarted after the model acted runs in the sandbox ----------------

/// Under `workspace-write`, a stdio server is started unsandboxed (trusted configuration, before
/// the model did anything); once it quits (the model can make it) and is started again, that
/// start may load code the model wrote (`python3 -m srv` reads the cwd), so it runs in the
/// sandbox. The server's wrapper appends to a file outside the workspace on every start: only
/// the first start's line is there, and the restarted server still answers.
#[test]
fn a_restarted_mcp_server_runs_in_the_sandbox() {
    let workspace = Workspace::new();
    let temp = workspace.root().join("tmp");
    std::fs::create_dir_all(&temp).unwrap();
    let starts = workspace.root().join("outside-starts.txt");
    let script = format!(
        "echo started >> '{}'; exec python3 '{}'",
        starts.display(),
        crate::fake_provider::fixture_path("mcp/fake_server.py").display()
    );
    write_mcp_json(
        &workspace,
        json!({"fake": {"command": "sh", "args": ["-c", script]}}),
    );
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("c1", "mcp__fake__crash", &["{}"])
                .finish("tool_use"),
        ),
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("c2", "mcp__fake__echo", &[r#"{"text":"again"}"#])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = Setup::anthropic(&fake)
        .settings(json!({"sandbox": {"mode": "workspace-write"}}))
        .env("TMPDIR", &temp.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let end = tool_end(&pi, "c2");
    assert_eq!(end["result"]["content"][0]["text"], "echo: again", "{end}");
    let lines = std::fs::read_to_string(&starts).unwrap();
    assert_eq!(
        lines, "started\n",
        "the restart wrote outside the workspace"
    );
}

// ---- item 12: what a denied folder still shows -------------------------------------------------

/// README says what holds: inside the sandbox a denied folder's file names stay listable
/// (Landlock's list right on a parent reaches the whole tree below it), its files' contents do
/// not.
#[test]
fn a_denied_folder_lists_its_names_but_not_its_contents() {
    let workspace = Workspace::new();
    let ssh = workspace.root().join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), "PRIVATE-KEY-CONTENT\n").unwrap();
    let command = format!(
        "ls '{dir}'; cat '{dir}/id_ed25519' 2>&1; echo end",
        dir = ssh.display()
    );
    let fake = FakeProvider::start(tool_calls_replies(&[(
        "t1",
        "bash",
        json!({ "command": command }),
    )]));
    let setup = Setup::anthropic(&fake).settings(json!({"sandbox": {"mode": "workspace-write"}}));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let text = tool_end(&pi, "t1")["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(text.contains("id_ed25519\n"), "names are listed: {text}");
    assert!(text.contains("Permission denied"), "{text}");
    assert!(!text.contains("PRIVATE-KEY-CONTENT"), "{text}");
}

// ---- item 2 (part): the file tools cannot write the workspace's own pi configuration ----------

/// Under a sandbox mode, `write`/`edit` refuse `.pi/` and `.agents/` in the workspace (a trusted
/// project's next start would run what they hold outside the sandbox); other workspace files
/// stay writable. (The shell is not held back: README says so.)
#[test]
fn sandboxed_file_tools_cannot_write_the_workspace_pi_configuration() {
    let fake = FakeProvider::start(tool_calls_replies(&[
        (
            "w1",
            "write",
            json!({"path": ".pi/extensions/x.sh", "content": "#!/bin/sh\ntouch PWNED\n"}),
        ),
        (
            "w2",
            "write",
            json!({"path": ".agents/skills/x/SKILL.md", "content": "x"}),
        ),
        (
            "w3",
            "write",
            json!({"path": "notes.txt", "content": "fine"}),
        ),
    ]));
    let workspace = Workspace::new();
    let temp = workspace.root().join("tmp");
    std::fs::create_dir_all(&temp).unwrap();
    let setup = Setup::anthropic(&fake)
        .settings(json!({"sandbox": {"mode": "workspace-write"}}))
        .env("TMPDIR", &temp.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    for id in ["w1", "w2"] {
        let end = tool_end(&pi, id);
        assert_eq!(end["isError"], true, "{end}");
        let text = end["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("blocked by the sandbox"), "{text}");
    }
    assert!(!workspace.cwd().join(".pi/extensions/x.sh").exists());
    assert_eq!(tool_end(&pi, "w3")["isError"], false);
    assert!(workspace.cwd().join("notes.txt").exists());
}

// ---- item 2: the shell cannot write the workspace's own pi configuration ---------------------

/// Whether this system lets a process make a mount namespace of its own, the way pi-rs's
/// sandboxed children do (root directly, anyone else through a user namespace): tried in a
/// forked child of the test.
fn namespaces_allowed() -> bool {
    // SAFETY: the child only calls unshare and _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = unsafe { libc::unshare(libc::CLONE_NEWNS) } == 0
            || unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } == 0;
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// Every way the model's shell might plant code that a trusted project's next start runs outside
/// the sandbox, then the controls: other workspace files, new folders, the temp folder.
const PLANT: &str = "mkdir -p .pi/extensions; echo 'touch PWNED' > .pi/extensions/x.sh; echo a=$?
echo '{}' > .pi/mcp.json; echo b=$?
mkdir -p .agents/skills/x; echo c=$?
echo x >> .agents/kept.md; echo d=$?
mv .pi .x; echo e=$?
rmdir .pi; echo f=$?
mv .agents .y; echo g=$?
ln .agents/kept.md hard; echo h=$?
(sh -c 'sleep 0; echo z > .pi/late.json'); echo i=$?
echo fine > notes.txt; echo k=$?
mkdir -p src/deep && echo y > src/deep/f.rs; echo l=$?
echo t > \"$TMPDIR/t.txt\"; echo m=$?
";

/// Under `workspace-write`, the model's shell (and what it starts) cannot create or change the
/// workspace's `.pi/` and `.agents/`, whether they existed or not, nor rename them away or
/// hard-link out of them; the write tool is refused too. Writes elsewhere in the workspace and
/// in the temp folder still work. Where this system allows no mount namespace, pi-rs refuses to
/// start the shell and says why instead.
#[test]
fn a_sandboxed_shell_cannot_write_the_workspace_pi_configuration() {
    let workspace = Workspace::new();
    let cwd = workspace.cwd();
    // `.agents` exists with a file; `.pi` does not.
    std::fs::create_dir_all(cwd.join(".agents")).unwrap();
    std::fs::write(cwd.join(".agents/kept.md"), "kept\n").unwrap();
    let temp = workspace.root().join("tmp");
    std::fs::create_dir_all(&temp).unwrap();
    let fake = FakeProvider::start(tool_calls_replies(&[
        ("b1", "bash", json!({ "command": PLANT })),
        (
            "w1",
            "write",
            json!({"path": ".pi/extensions/y.sh", "content": "touch PWNED\n"}),
        ),
    ]));
    let setup = Setup::anthropic(&fake)
        .settings(json!({"sandbox": {"mode": "workspace-write"}}))
        .env("TMPDIR", &temp.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let state = pi.command("s1", "get_state", json!({}));
    let layer = state["data"]["sandbox"]["layers"]["mountNamespace"].clone();
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let text = tool_end(&pi, "b1")["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let write = tool_end(&pi, "w1");
    assert_eq!(write["isError"], true, "{write}");
    assert!(!cwd.join(".pi/extensions/y.sh").exists());
    if !namespaces_allowed() {
        assert_eq!(tool_end(&pi, "b1")["isError"], true, "{text}");
        assert!(
            text.contains(
                "blocked by the sandbox: keeping the workspace's .pi/ and .agents/ read-only"
            ),
            "{text}"
        );
        assert!(!cwd.join("notes.txt").exists());
        assert_eq!(layer, json!([]), "{state}");
        return;
    }
    assert_eq!(
        layer,
        json!(["the workspace's .pi/ and .agents/ (children)"]),
        "{state}"
    );
    for refused in ["a", "b", "c", "d", "e", "f", "g", "h", "i"] {
        assert!(
            !text.lines().any(|l| l == format!("{refused}=0")),
            "{refused}: {text}"
        );
    }
    for works in ["k", "l", "m"] {
        assert!(
            text.lines().any(|l| l == format!("{works}=0")),
            "{works}: {text}"
        );
    }
    assert!(text.contains("Read-only file system"), "{text}");
    assert!(!cwd.join(".pi/extensions").exists(), "{text}");
    assert!(!cwd.join(".pi/mcp.json").exists());
    assert!(!cwd.join(".pi/late.json").exists());
    assert!(!cwd.join(".agents/skills").exists());
    assert!(!cwd.join("hard").exists());
    assert!(!cwd.join(".x").exists() && !cwd.join(".y").exists());
    assert_eq!(
        std::fs::read_to_string(cwd.join(".agents/kept.md")).unwrap(),
        "kept\n"
    );
    // The missing `.pi` was made an empty folder.
    assert!(cwd.join(".pi").is_dir());
    assert!(cwd.join("notes.txt").exists(), "{text}");
    assert!(cwd.join("src/deep/f.rs").exists());
    assert!(temp.join("t.txt").exists());
}

/// Where the system allows no mount namespace (forced here with `PI_SANDBOX_NO_NAMESPACES`, the
/// knob README names), the default `onUnsupported: "fail"` refuses the shell with the reason and
/// `get_state` lists the gap; `warn` runs it (Landlock still confines it) and the workspace
/// stays writable. Either way the write tool keeps refusing `.pi/`.
#[test]
fn without_namespaces_the_shell_is_refused_unless_on_unsupported_is_warn() {
    for on_unsupported in ["fail", "warn"] {
        let workspace = Workspace::new();
        let fake = FakeProvider::start(tool_calls_replies(&[
            (
                "b1",
                "bash",
                json!({"command": "echo fine > notes.txt; echo k=$?"}),
            ),
            (
                "w1",
                "write",
                json!({"path": ".pi/mcp.json", "content": "{}"}),
            ),
        ]));
        let setup = Setup::anthropic(&fake)
            .settings(
                json!({"sandbox": {"mode": "workspace-write", "onUnsupported": on_unsupported}}),
            )
            .env("PI_SANDBOX_NO_NAMESPACES", "1");
        let mut pi = Pi::spawn_in(&workspace, &setup);
        let state = pi.command("s1", "get_state", json!({}));
        let gaps = state["data"]["sandbox"]["notEnforced"].to_string();
        assert!(
            gaps.contains(".pi/ and .agents/ read-only")
                && gaps.contains("PI_SANDBOX_NO_NAMESPACES"),
            "{state}"
        );
        assert_eq!(
            state["data"]["sandbox"]["layers"]["mountNamespace"],
            json!([])
        );
        pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
        pi.wait_for_event("agent_settled");
        let bash = tool_end(&pi, "b1");
        let text = bash["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(tool_end(&pi, "w1")["isError"], true);
        if on_unsupported == "fail" {
            assert_eq!(bash["isError"], true, "{bash}");
            assert!(text.starts_with("blocked by the sandbox: keeping the workspace's .pi/ and .agents/ read-only for the shell needs a mount namespace"), "{text}");
            assert!(
                text.ends_with("(sandbox.onUnsupported is \"fail\")"),
                "{text}"
            );
            assert!(!workspace.cwd().join("notes.txt").exists());
        } else {
            assert!(text.contains("k=0"), "{text}");
            assert!(workspace.cwd().join("notes.txt").exists());
        }
    }
}

/// The workspace inside a wider writable root (here the temp folder; the agent dir and home are
/// elsewhere so nothing denied sits in it): the model's shell cannot rename the workspace away
/// to make a fresh one with its own `.pi/` (`mv ws ws2; mkdir -p ws/.pi`), because pi-rs binds
/// the workspace onto itself and a mount point cannot be renamed. The control: in the same
/// wider root, a folder of the model's own renames.
#[test]
fn a_sandboxed_shell_cannot_rename_the_workspace_away() {
    let workspace = Workspace::new();
    let outside = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("hardening-outside-{}", std::process::id()));
    let agent = outside.join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::create_dir_all(outside.join("home")).unwrap();
    std::fs::remove_dir(workspace.agent_dir()).unwrap();
    std::os::unix::fs::symlink(&agent, workspace.agent_dir()).unwrap();
    let command = "cd .. && mkdir mine && mv mine mine2; echo n=$?
mv work work.moved; echo j=$?
mkdir -p work/.pi/extensions 2>/dev/null && echo planted > work/.pi/extensions/x.sh; echo p=$?";
    let fake = FakeProvider::start(tool_calls_replies(&[(
        "b1",
        "bash",
        json!({ "command": command }),
    )]));
    let setup = Setup::anthropic(&fake)
        .settings(json!({"sandbox": {"mode": "workspace-write"}}))
        .env("TMPDIR", &workspace.root().to_string_lossy())
        .env("HOME", &outside.join("home").to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let text = tool_end(&pi, "b1")["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let _ = std::fs::remove_dir_all(&outside);
    if !namespaces_allowed() {
        assert!(text.contains("needs a mount namespace"), "{text}");
        return;
    }
    assert!(text.contains("n=0"), "the wider root is writable: {text}");
    assert!(text.contains("Device or resource busy"), "{text}");
    assert!(!text.contains("j=0"), "{text}");
    assert!(!workspace.root().join("work.moved").exists(), "{text}");
    assert!(!workspace.cwd().join(".pi/extensions").exists(), "{text}");
}

/// A workspace whose `.pi` is a symbolic link (to `config/pi` in the workspace): a mount would
/// land on the target and the link itself could be swapped, so the sandboxed shell is refused
/// with the reason, and the write tool refuses the link's target as pi's own configuration.
#[test]
fn a_symlinked_pi_folder_refuses_the_sandboxed_shell() {
    let workspace = Workspace::new();
    let cwd = workspace.cwd();
    std::fs::create_dir_all(cwd.join("config/pi")).unwrap();
    std::os::unix::fs::symlink("config/pi", cwd.join(".pi")).unwrap();
    let fake = FakeProvider::start(tool_calls_replies(&[
        (
            "b1",
            "bash",
            json!({"command": "echo x > config/pi/mcp.json"}),
        ),
        (
            "w1",
            "write",
            json!({"path": "config/pi/mcp.json", "content": "{}"}),
        ),
    ]));
    let setup = Setup::anthropic(&fake).settings(json!({"sandbox": {"mode": "workspace-write"}}));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "go"}));
    pi.wait_for_event("agent_settled");
    let bash = tool_end(&pi, "b1");
    assert_eq!(bash["isError"], true, "{bash}");
    let text = bash["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("blocked by the sandbox: ") && text.contains(".pi is a symbolic link"),
        "{text}"
    );
    let write = tool_end(&pi, "w1");
    assert_eq!(write["isError"], true, "{write}");
    assert!(!cwd.join("config/pi/mcp.json").exists());
}
