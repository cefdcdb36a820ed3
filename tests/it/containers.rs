//! The static binary in an empty root: what a `FROM scratch` container gives pi-rs.
//!
//! `tests/static_build.sh` builds the fully static binary (README "Containers") and `.ci/run`
//! passes its path in `PI_STATIC_BIN`. The test copies it into a fresh folder that holds only
//! `/pi`, the config folder `/agent` (models.json pointing at the fake provider by a host name)
//! and `/etc/hosts` naming that host, then runs it there with `unshare -r -m chroot` (an
//! unprivileged user + mount namespace: no root needed, the loopback network is shared). No
//! shell, no libc, no CA files, no /proc, /dev or /tmp inside.
//!
//! Without `PI_STATIC_BIN` or a working `unshare` the test is skipped with a printed reason;
//! under `CI=true` either is a failure.
//!
//! Reference: not applicable (pi needs Node and its package tree).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{Pi, Setup, Workspace, is_reference, prerequisite_missing};

/// The host name the chrooted process resolves through its own `/etc/hosts`.
const PROVIDER_HOST: &str = "provider.pi-test";

/// The static binary to test, or why there is none.
fn static_binary() -> Result<PathBuf, String> {
    let path = std::env::var_os("PI_STATIC_BIN")
        .filter(|p| !p.is_empty())
        .ok_or("PI_STATIC_BIN is not set (build it with tests/static_build.sh)")?;
    let path = PathBuf::from(path);
    if !path.is_file() {
        return Err(format!("PI_STATIC_BIN={} is not a file", path.display()));
    }
    Ok(path)
}

fn unshare_works() -> Result<(), String> {
    let status = Command::new("unshare")
        .args(["-r", "-m", "true"])
        .status()
        .map_err(|e| format!("cannot run unshare: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`unshare -r -m true` failed ({status}): no user namespaces here"
        ))
    }
}

/// True when the ELF file has no `PT_INTERP` program header: the kernel runs it without a
/// dynamic loader, so it needs nothing from the root it runs in.
fn has_no_interpreter(path: &Path) -> bool {
    const PT_INTERP: u32 = 3;
    let bytes = std::fs::read(path).expect("read static binary");
    assert_eq!(
        &bytes[..4],
        b"\x7fELF",
        "{} is not an ELF file",
        path.display()
    );
    assert_eq!(bytes[4], 2, "expected a 64-bit ELF");
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) != PT_INTERP
    })
}

/// Starts `/pi` chrooted into `workspace`'s root, which holds only the binary, `/agent` and
/// `/etc/hosts` (the workspace's empty `work/` is left unused: the process starts in `/`).
fn spawn_chrooted(workspace: &Workspace, binary: &Path, fake: &FakeProvider) -> Pi {
    let root = workspace.root();
    std::fs::copy(binary, root.join("pi")).expect("copy the static binary");
    std::fs::create_dir_all(root.join("etc")).expect("create etc");
    std::fs::write(
        root.join("etc/hosts"),
        format!("127.0.0.1 {PROVIDER_HOST}\n"),
    )
    .expect("write etc/hosts");
    let port = fake.base_url().rsplit(':').next().unwrap().to_string();
    let mut setup = Setup::anthropic(fake)
        .env("PI_CODING_AGENT_DIR", "/agent")
        .env("HOME", "/")
        .wrapped_in(&["unshare", "-r", "-m", "chroot", &root.to_string_lossy()]);
    setup.base_url = format!("http://{PROVIDER_HOST}:{port}");
    setup.binary = Some(PathBuf::from("/pi"));
    let pi = Pi::spawn_in(workspace, &setup);
    let entries: Vec<String> = std::fs::read_dir(root)
        .expect("list root")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        entries
            .iter()
            .all(|e| ["pi", "agent", "etc", "work"].contains(&e.as_str())),
        "the root holds more than the binary, its config and /etc/hosts: {entries:?}"
    );
    pi
}

#[test]
fn static_binary_runs_a_turn_in_an_empty_root_and_reports_the_missing_shell() {
    if is_reference() {
        return;
    }
    let binary = match static_binary() {
        Ok(binary) => binary,
        Err(reason) => return prerequisite_missing(&reason),
    };
    if let Err(reason) = unshare_works() {
        return prerequisite_missing(&reason);
    }
    assert!(
        has_no_interpreter(&binary),
        "{} asks for a dynamic loader: not a static build",
        binary.display()
    );

    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_bash("toolu_noshell", "echo hi")),
        Reply::sse(sse::anthropic_text(&["No shell here."])),
    ]);
    let workspace = Workspace::new();
    let mut pi = spawn_chrooted(&workspace, &binary, &fake);

    let state = pi.request(json!({"id": "s1", "type": "get_state"}));
    assert_eq!(state["success"], json!(true), "{state}");
    assert_eq!(state["data"]["model"]["id"], "fake-claude", "{state}");

    pi.send(json!({"id": "p1", "type": "prompt", "message": "Run echo hi"}));
    let run = pi.records_until_event("agent_end");
    let end = run
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("the bash call ends");
    assert_eq!(end["isError"], json!(true), "{end}");
    let text = end["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("ENOENT") && text.contains("There is no shell here"),
        "the tool error should say the shell is missing: {text:?}"
    );
    let last = run
        .iter()
        .rev()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .expect("a final assistant message");
    assert_eq!(last["message"]["stopReason"], "stop", "{last}");
    assert_eq!(
        last["message"]["content"][0]["text"], "No shell here.",
        "{last}"
    );

    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(
        requests[0].header("host"),
        Some(
            format!(
                "{PROVIDER_HOST}:{}",
                fake.base_url().rsplit(':').next().unwrap()
            )
            .as_str()
        ),
        "the request went to the host named in /etc/hosts"
    );
    let status = pi.close_and_wait();
    assert!(status.success(), "exit: {status}");
    fake.finish();
}
