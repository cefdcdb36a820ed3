//! pi's TypeScript extensions through the real binary (README.md, Extensions, "TypeScript
//! extensions"): pi-rs starts its Node host for them, which loads pi 1.6.0's own example
//! extensions, unchanged, from the installed package (`tests/install_reference.sh 1.6.0`, which
//! `.ci/run` installs). Each test checks what the extension visibly does: the request body at the
//! fake provider, the tool result, the dialog record, the session entry.
//!
//! Under `CI=true` a missing reference fails these tests; elsewhere they are skipped with a
//! printed reason.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::reference_clients::{Reference, reference};
use crate::sse;
use crate::support::{Pi, Setup, tool_result_block, tool_result_block_text};

/// Loading Node, the pi package and the extensions takes seconds on a loaded machine.
const WAIT: Duration = Duration::from_secs(90);

/// pi 1.6.0's package and Node, or None (a failure under CI=true).
fn pi_1_6() -> Option<Reference> {
    reference("1.6.0")
}

fn example(reference: &Reference, name: &str) -> String {
    reference
        .package
        .join("examples/extensions")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// `setup` with the host's Node and pi package named and the examples given with `-e`.
fn with_examples(reference: &Reference, mut setup: Setup, names: &[&str]) -> Setup {
    setup = setup
        .env("PI_RS_NODE", &reference.node.to_string_lossy())
        .env("PI_RS_PI_PACKAGE", &reference.package.to_string_lossy());
    for name in names {
        setup = setup.arg("-e").arg(&example(reference, name));
    }
    setup.wait_limit = Some(WAIT);
    setup
}

fn extension_errors(records: &[Value]) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r["type"] == "extension_error")
        .cloned()
        .collect()
}

/// hello.ts registers a tool; the model calls it; its result reaches the next request.
#[test]
fn a_typescript_tool_is_offered_and_runs() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("toolu_1", "hello", &[r#"{"name":"Ada"}"#])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["hello.ts"]);
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("p", "prompt", json!({"message": "greet Ada"}));
    assert_eq!(response["success"], true, "{response}");
    let records = pi.records_until_event("agent_end");
    assert!(extension_errors(&records).is_empty(), "{records:?}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"hello"), "{tools:?}");
    let hello = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "hello")
        .unwrap();
    assert_eq!(hello["input_schema"]["required"], json!(["name"]));
    let block = tool_result_block(&requests[1], "toolu_1");
    assert_eq!(tool_result_block_text(&block), "Hello, Ada!");
    let end = records
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool_execution_end");
    assert_eq!(end["result"]["details"], json!({"greeted": "Ada"}));
}

/// An extension of the tests' own: it writes to stdout (console.log, process.stdout.write) and
/// its `/where` command reports `process.execPath`, `process.argv` and what ctx says.
const NOISY: &str = r#"
console.log("noise from console.log");
process.stdout.write("noise from stdout.write\n");
export default function (pi) {
    console.info("noise at load");
    pi.registerCommand("where", {
        description: "Where am I",
        handler: async (_args, ctx) => {
            const seen = { execPath: process.execPath, argv: process.argv, hasUI: ctx.hasUI,
                mode: ctx.mode, custom: await ctx.ui.custom() };
            ctx.ui.notify(JSON.stringify(seen), "info");
        },
    });
}
"#;

/// One broken extension is one `load` error naming it; the others load and pi-rs keeps going.
/// Extensions' stdout goes to stderr; `process.execPath` leads back to pi-rs.
#[test]
fn a_broken_typescript_extension_is_reported_and_the_others_load() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["commands.ts"])
        .file(
            "broken.ts",
            "export default function (pi) { throw new Error('boom at load'); }\n",
        )
        .file("noisy.ts", NOISY)
        .arg("-e")
        .arg("broken.ts")
        .arg("-e")
        .arg("noisy.ts");
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("c", "get_commands", json!({}));
    assert_eq!(response["success"], true, "{response}");
    let names: Vec<&str> = response["data"]["commands"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(names.contains(&"commands"), "{names:?}");
    let error = pi.find(|r| r["type"] == "extension_error");
    assert_eq!(error["event"], "load");
    assert!(
        error["extensionPath"]
            .as_str()
            .is_some_and(|p| p.ends_with("broken.ts")),
        "{error}"
    );
    assert!(
        error["error"].as_str().unwrap().contains("boom at load"),
        "{error}"
    );
    let response = pi.command("w", "prompt", json!({"message": "/where"}));
    assert_eq!(response["success"], true, "{response}");
    let notice = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "notify");
    let seen: Value = serde_json::from_str(notice["message"].as_str().unwrap()).unwrap();
    let exe = std::fs::canonicalize(crate::support::binary()).unwrap();
    assert_eq!(seen["execPath"], exe.to_string_lossy().as_ref(), "{seen}");
    assert_eq!(seen["argv"], json!([exe.to_string_lossy()]), "{seen}");
    assert_eq!(seen["hasUI"], true);
    assert_eq!(seen["mode"], "rpc");
    assert!(
        seen.get("custom").is_none(),
        "custom() gives undefined: {seen}"
    );
    assert_eq!(
        extension_errors(pi.records()).len(),
        1,
        "{:?}",
        pi.records()
    );
    let stderr = pi.stderr_when(|s| s.contains("noise at load"));
    assert!(stderr.contains("noise from stdout.write"), "{stderr}");
}

/// No Node (none named, none on PATH), a Node too old, no pi package: one clear `load` error
/// each, naming what to install; executable extensions still load.
#[test]
fn missing_node_old_node_and_missing_package_are_clear_errors() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let empty = crate::support::TempDir::new("no-node");
    let old_node = empty.path().join("node");
    std::fs::write(
        &old_node,
        format!(
            "#!/bin/sh\nexec {} --input-type=module --eval \"Object.defineProperty(process.versions, 'node', {{value: '20.11.0'}}); await import(process.argv[1])\" \"$@\"\n",
            reference.node.display()
        ),
    )
    .unwrap();
    make_executable(&old_node);
    let cases: Vec<(Setup, &str)> = vec![
        (
            Setup::anthropic(&fake).env("PATH", &empty.path().join("none").to_string_lossy()),
            "Node.js 22.19 or newer",
        ),
        (
            Setup::anthropic(&fake)
                .env("PI_RS_NODE", &old_node.to_string_lossy())
                .env("PI_RS_PI_PACKAGE", &reference.package.to_string_lossy()),
            "Node 20.11.0",
        ),
        (
            Setup::anthropic(&fake)
                .env("PI_RS_NODE", &reference.node.to_string_lossy())
                .env("PI_RS_PI_PACKAGE", &empty.path().to_string_lossy()),
            "is not the pi package",
        ),
        (
            Setup::anthropic(&fake)
                .env("PATH", &empty.path().join("none").to_string_lossy())
                .env("PI_RS_NODE", &reference.node.to_string_lossy()),
            "need the pi package: install it",
        ),
    ];
    for (setup, expected) in cases {
        let mut setup = setup
            .arg("-e")
            .arg(&example(&reference, "hello.ts"))
            .arg("-e")
            .arg(&crate::extensions::extension("hello.sh"));
        setup.wait_limit = Some(WAIT);
        let mut pi = Pi::spawn(&setup);
        let error = pi.find(|r| r["type"] == "extension_error");
        assert_eq!(error["event"], "load", "{error}");
        assert_eq!(
            error["extensionPath"],
            example(&reference, "hello.ts"),
            "{error}"
        );
        assert!(
            error["error"].as_str().unwrap().contains(expected),
            "{expected}: {error}"
        );
        let response = pi.command("c", "get_commands", json!({}));
        let names: Vec<&str> = response["data"]["commands"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert!(names.contains(&"hello"), "hello.sh still loads: {names:?}");
    }
}

fn make_executable(path: &PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An untrusted project's `.pi/extensions/*.ts` never load (as for executables); trusted, it
/// does. Without a TypeScript extension nothing of the host exists (no script written).
#[test]
fn project_typescript_extensions_load_only_in_a_trusted_project() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let source = std::fs::read_to_string(example(&reference, "session-name.ts")).unwrap();
    let base = with_examples(&reference, Setup::anthropic(&fake), &[])
        .file(".pi/extensions/session-name.ts", &source);
    for trusted in [false, true] {
        let setup = if trusted {
            base.clone().trust_project()
        } else {
            base.clone()
        };
        let mut pi = Pi::spawn(&setup);
        let response = pi.command("c", "get_commands", json!({}));
        let has = response["data"]["commands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "session-name");
        assert_eq!(has, trusted, "{response}");
        let script_dir = pi.agent_dir().join("cache/ts-host");
        assert_eq!(script_dir.exists(), trusted, "{}", script_dir.display());
        assert!(extension_errors(pi.records()).is_empty());
    }
}

// ---- M2: hooks, dialogs, commands, messages -----------------------------------------------------

/// The text of every user message of a recorded Anthropic request, in order.
fn user_texts(request: &crate::fake_provider::RecordedRequest) -> Vec<String> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(text) => text.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        })
        .filter(|t| !t.is_empty())
        .collect()
}

fn system_prompt(request: &crate::fake_provider::RecordedRequest) -> String {
    match &request.body["system"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// permission-gate.ts: a dangerous bash call opens pi's select dialog; "No" blocks it with
/// the extension's reason, and the command never runs.
#[test]
fn permission_gate_asks_and_blocks_a_dangerous_command() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_bash("toolu_1", "rm -rf victim")),
        Reply::sse(sse::anthropic_text(&["Understood."])),
    ]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["permission-gate.ts"])
        .file("victim/keep.txt", "keep");
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("p", "prompt", json!({"message": "clean up"}));
    assert_eq!(response["success"], true, "{response}");
    let dialog = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "select");
    assert!(
        dialog["title"]
            .as_str()
            .is_some_and(|t| t.contains("Dangerous command") && t.contains("rm -rf victim")),
        "{dialog}"
    );
    assert_eq!(dialog["options"], json!(["Yes", "No"]));
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "value": "No"}));
    pi.wait_for_event("agent_end");
    let requests = fake.requests();
    let block = tool_result_block(&requests[1], "toolu_1");
    assert_eq!(tool_result_block_text(&block), "Blocked by user");
    assert!(pi.cwd().join("victim/keep.txt").exists());
}

/// commands.ts and session-name.ts: `/session-name <name>` names the session (the session
/// file's `session_info` entry, get_state) and notifies; the extension's commands are listed.
#[test]
fn a_typescript_command_names_the_session() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_examples(
        &reference,
        Setup::anthropic(&fake).with_sessions(),
        &["session-name.ts"],
    );
    let mut pi = Pi::spawn(&setup);
    let response = pi.command(
        "p",
        "prompt",
        json!({"message": "/session-name Harbour map"}),
    );
    assert_eq!(response["success"], true, "{response}");
    let notice = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "notify");
    assert_eq!(notice["message"], "Session named: Harbour map");
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["data"]["sessionName"], "Harbour map", "{state}");
    let response = pi.command("p2", "prompt", json!({"message": "/session-name"}));
    assert_eq!(response["success"], true, "{response}");
    let notice = pi.find(|r| {
        r["type"] == "extension_ui_request"
            && r["method"] == "notify"
            && r["message"] == "Session: Harbour map"
    });
    assert_eq!(notice["notifyType"], "info");
    assert!(fake.requests().is_empty());
}

/// send-user-message.ts: `/ask <text>` sends a user message that starts a run.
#[test]
fn a_typescript_command_sends_a_user_message() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Answer."]))]);
    let setup = with_examples(
        &reference,
        Setup::anthropic(&fake),
        &["send-user-message.ts"],
    );
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("p", "prompt", json!({"message": "/ask What is 2+2?"}));
    assert_eq!(response["success"], true, "{response}");
    pi.wait_for_event("agent_end");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(user_texts(&requests[0]), ["What is 2+2?"]);
}

/// input-transform.ts: `?quick x` reaches the model rewritten; `ping` is handled (a notice, no
/// request).
#[test]
fn input_transform_rewrites_and_handles_prompts() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Short."]))]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["input-transform.ts"]);
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("p", "prompt", json!({"message": "ping"}));
    assert_eq!(response["success"], true, "{response}");
    let notice = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "notify");
    assert_eq!(notice["message"], "pong");
    let response = pi.command(
        "q",
        "prompt",
        json!({"message": "?quick why is the sky blue"}),
    );
    assert_eq!(response["success"], true, "{response}");
    pi.wait_for_event("agent_end");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "ping made no request");
    assert_eq!(
        user_texts(&requests[0]),
        ["Respond briefly in 1-2 sentences: why is the sky blue"]
    );
}

/// pirate.ts: `/pirate` turns pirate mode on; the next request's system prompt carries it.
#[test]
fn pirate_changes_the_system_prompt_after_its_command() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["Hello."])),
        Reply::sse(sse::anthropic_text(&["Arrr."])),
    ]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["pirate.ts"]);
    let mut pi = Pi::spawn(&setup);
    pi.command("a", "prompt", json!({"message": "hi"}));
    pi.wait_for_event("agent_end");
    pi.command("b", "prompt", json!({"message": "/pirate"}));
    pi.find(|r| {
        r["type"] == "extension_ui_request" && r["message"] == "Arrr! Pirate mode enabled!"
    });
    pi.command("c", "prompt", json!({"message": "hi again"}));
    pi.wait_for_event("agent_end");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(!system_prompt(&requests[0]).contains("PIRATE MODE"));
    let second = system_prompt(&requests[1]);
    assert!(
        second.contains("IMPORTANT: You are now in PIRATE MODE"),
        "{second}"
    );
    assert!(second.starts_with(&system_prompt(&requests[0])[..40]));
}

// ---- M3: late tools, tool overrides, provider payloads, compaction --------------------------------

fn tool_names(request: &crate::fake_provider::RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// dynamic-tools.ts: `echo_session` is registered at `session_start`, `/add-echo-tool shout`
/// adds another; both are offered and run.
#[test]
fn tools_registered_later_are_offered_and_run() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("toolu_1", "shout", &[r#"{"message":"hey"}"#])
                .tool_use("toolu_2", "echo_session", &[r#"{"message":"there"}"#])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["dynamic-tools.ts"]);
    let mut pi = Pi::spawn(&setup);
    pi.find(|r| {
        r["type"] == "extension_ui_request"
            && r["message"] == "Registered dynamic tool: echo_session"
    });
    pi.command("a", "prompt", json!({"message": "/add-echo-tool shout"}));
    pi.find(|r| {
        r["type"] == "extension_ui_request" && r["message"] == "Registered dynamic tool: shout"
    });
    pi.command("p", "prompt", json!({"message": "echo"}));
    pi.wait_for_event("agent_end");
    let requests = fake.requests();
    let names = tool_names(&requests[0]);
    assert!(
        names.contains(&"shout".to_string()) && names.contains(&"echo_session".to_string()),
        "{names:?}"
    );
    assert_eq!(
        tool_result_block_text(&tool_result_block(&requests[1], "toolu_1")),
        "[shout] hey"
    );
    assert_eq!(
        tool_result_block_text(&tool_result_block(&requests[1], "toolu_2")),
        "[session] there"
    );
}

/// tool-override.ts: its `read` replaces the built-in (one `read` in the request, the
/// extension's description) and refuses `.env`.
#[test]
fn a_typescript_tool_overrides_a_built_in() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("toolu_1", "read", &[r#"{"path":".env"}"#])
                .tool_use("toolu_2", "read", &[r#"{"path":"notes.txt"}"#])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["tool-override.ts"])
        .file(".env", "SECRET=1")
        .file("notes.txt", "plain notes");
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "read them"}));
    pi.wait_for_event("agent_end");
    let requests = fake.requests();
    let reads: Vec<&Value> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "read")
        .collect();
    assert_eq!(reads.len(), 1);
    assert!(
        reads[0]["description"]
            .as_str()
            .unwrap()
            .contains("access logging")
    );
    let denied = tool_result_block_text(&tool_result_block(&requests[1], "toolu_1"));
    assert!(denied.starts_with("Access denied: \".env\""), "{denied}");
    let read = tool_result_block_text(&tool_result_block(&requests[1], "toolu_2"));
    assert!(read.contains("plain notes"), "{read}");
    let log = std::fs::read_to_string(pi.agent_dir().join("read-access.log")).unwrap_or_default();
    assert!(log.contains("BLOCKED") && log.contains("ALLOWED"), "{log}");
}

/// provider-payload.ts: every request body and response status lands in `.pi/provider-payload.log`.
#[test]
fn provider_payload_logs_each_request_body() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Logged."]))]);
    let setup = with_examples(
        &reference,
        Setup::anthropic(&fake),
        &["provider-payload.ts"],
    )
    .file(".pi/keep", "");
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "log me"}));
    pi.wait_for_event("agent_end");
    let log =
        crate::support::wait_for_file(&pi.cwd().join(".pi/provider-payload.log"), WAIT, |l| {
            l.contains("[200]")
        });
    let request = &fake.requests()[0];
    let first: Value = serde_json::from_str(log.split("\n\n").next().unwrap()).expect("json");
    assert_eq!(first, request.body);
    assert!(log.contains("[200] {"), "{log}");
    assert!(extension_errors(pi.records()).is_empty());
}

/// trigger-compact.ts: `/trigger-compact` compacts; its notices say started and completed.
#[test]
fn trigger_compact_compacts_and_hears_the_end() {
    let Some(reference) = pi_1_6() else { return };
    let long = |word: &str| format!("{word} {}", "filler ".repeat(200));
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&[&long("first answer")])),
        Reply::sse(sse::anthropic_text(&[&long("second answer")])),
        Reply::sse(sse::anthropic_text(&["## Goal\nSummarized."])),
        Reply::sse(sse::anthropic_text(&["## Turn prefix\nSummarized."])),
    ]);
    let setup = Setup::new(&fake, "fake-anthropic", "fake-claude-small")
        .models_json(&crate::fake_provider::fixture("models_small_window.json"))
        .settings(json!({"compaction": {"reserveTokens": 1000, "keepRecentTokens": 200}}));
    let mut pi = Pi::spawn(&with_examples(&reference, setup, &["trigger-compact.ts"]));
    for (id, text) in [
        ("p1", long("first question")),
        ("p2", long("second question")),
    ] {
        pi.command(id, "prompt", json!({"message": text}));
        pi.wait_for_event("agent_settled");
    }
    pi.command(
        "c",
        "prompt",
        json!({"message": "/trigger-compact KEEP-NAMES"}),
    );
    pi.find(|r| r["type"] == "extension_ui_request" && r["message"] == "Compaction started");
    let end = pi.wait_for_event("compaction_end");
    assert_eq!(end["aborted"], false, "{end}");
    assert!(end.get("errorMessage").is_none(), "{end}");
    pi.find(|r| r["type"] == "extension_ui_request" && r["message"] == "Compaction completed");
    let requests = fake.requests();
    assert!(
        requests[2..]
            .iter()
            .any(|r| r.body.to_string().contains("KEEP-NAMES"))
    );
}

/// todo.ts: its tool keeps state in tool-result details; a second pi-rs continuing the session
/// rebuilds it at `session_start` from `ctx.sessionManager.getBranch()`.
#[test]
fn todo_state_comes_back_from_the_session() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use(
                    "toolu_1",
                    "todo",
                    &[r#"{"action":"add","text":"buy milk"}"#],
                )
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Added."])),
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("toolu_2", "todo", &[r#"{"action":"add","text":"eggs"}"#])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Added too."])),
    ]);
    let setup = with_examples(
        &reference,
        Setup::anthropic(&fake).with_sessions(),
        &["todo.ts"],
    );
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "remember milk"}));
    pi.wait_for_event("agent_end");
    let workspace = pi.workspace();
    pi.close_and_wait();
    let mut again = Pi::spawn_in(&workspace, &setup.clone().arg("--continue"));
    again.command("p", "prompt", json!({"message": "and eggs"}));
    again.wait_for_event("agent_end");
    let requests = fake.requests();
    assert_eq!(
        tool_result_block_text(&tool_result_block(&requests[1], "toolu_1")),
        "Added todo #1: buy milk"
    );
    assert_eq!(
        tool_result_block_text(&tool_result_block(&requests[3], "toolu_2")),
        "Added todo #2: eggs"
    );
}

/// An extension of the tests' own: `wait_for_abort` resolves only when its signal aborts, and
/// says so in a file.
const WAITER: &str = r#"
import { writeFileSync } from "node:fs";
import { join } from "node:path";
export default function (pi) {
    pi.registerTool({
        name: "wait_for_abort",
        label: "Wait",
        description: "Waits until aborted",
        parameters: { type: "object", properties: {} },
        async execute(_id, _params, signal, _onUpdate, ctx) {
            if (!signal.aborted) {
                await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
            }
            writeFileSync(join(ctx.cwd, "aborted.txt"), "aborted");
            return { content: [{ type: "text", text: "stopped" }], details: {} };
        },
    });
}
"#;

/// `abort` reaches a running TypeScript tool through its AbortSignal.
#[test]
fn abort_reaches_a_running_typescript_tool() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(
        sse::AnthropicStream::new()
            .tool_use("toolu_1", "wait_for_abort", &["{}"])
            .finish("tool_use"),
    )]);
    let mut setup = with_examples(&reference, Setup::anthropic(&fake), &[])
        .file("waiter.ts", WAITER)
        .arg("-e")
        .arg("waiter.ts");
    setup.wait_limit = Some(WAIT);
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "wait"}));
    pi.wait_for_event("tool_execution_start");
    let response = pi.command("a", "abort", json!({}));
    assert_eq!(response["success"], true, "{response}");
    pi.wait_for_event("agent_end");
    let marker =
        crate::support::wait_for_file(&pi.cwd().join("aborted.txt"), WAIT, |t| t == "aborted");
    assert_eq!(marker, "aborted");
}

/// protected-paths.ts: a write to `.env` is blocked with its reason and a warning notice; a
/// write elsewhere goes through.
#[test]
fn protected_paths_blocks_writes_to_protected_files() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("toolu_1", "write", &[r#"{"path":".env","content":"X=1"}"#])
                .tool_use(
                    "toolu_2",
                    "write",
                    &[r#"{"path":"ok.txt","content":"fine"}"#],
                )
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["protected-paths.ts"]);
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "write"}));
    let notice = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "notify");
    assert_eq!(notice["message"], "Blocked write to protected path: .env");
    assert_eq!(notice["notifyType"], "warning");
    pi.wait_for_event("agent_end");
    let requests = fake.requests();
    assert_eq!(
        tool_result_block_text(&tool_result_block(&requests[1], "toolu_1")),
        "Path \".env\" is protected"
    );
    assert!(!pi.cwd().join(".env").exists());
    assert_eq!(
        std::fs::read_to_string(pi.cwd().join("ok.txt")).unwrap(),
        "fine"
    );
}

/// structured-output.ts: its terminating tool result ends the run without a follow-up request;
/// the details arrive whole.
#[test]
fn structured_output_terminates_the_turn() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(
        sse::AnthropicStream::new()
            .tool_use(
                "toolu_1",
                "structured_output",
                &[r#"{"headline":"Plan","summary":"Short.","actionItems":["a","b"]}"#],
            )
            .finish("tool_use"),
    )]);
    let setup = with_examples(
        &reference,
        Setup::anthropic(&fake),
        &["structured-output.ts"],
    );
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "summarize"}));
    let records = pi.records_until_event("agent_end");
    let end = records
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool_execution_end");
    assert_eq!(
        end["result"]["details"],
        json!({"headline": "Plan", "summary": "Short.", "actionItems": ["a", "b"]})
    );
    assert_eq!(
        end["result"]["content"][0]["text"],
        "Saved structured output: Plan"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "no follow-up request after terminate"
    );
}

/// confirm-destructive.ts: `new_session` asks pi's confirm dialog first; "no" cancels it (the
/// response says so, a notice too), "yes" lets it happen.
#[test]
fn confirm_destructive_asks_before_a_new_session() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_examples(
        &reference,
        Setup::anthropic(&fake),
        &["confirm-destructive.ts"],
    );
    let mut pi = Pi::spawn(&setup);
    for confirmed in [false, true] {
        let id = format!("n{confirmed}");
        pi.send(json!({"type": "new_session", "id": id}));
        let deadline = pi.deadline();
        let dialog = pi
            .recv_until(
                |r| r["type"] == "extension_ui_request" && r["title"] == "Clear session?",
                deadline,
            )
            .pop()
            .expect("the dialog");
        pi.send(
            json!({"type": "extension_ui_response", "id": dialog["id"], "confirmed": confirmed}),
        );
        let response = pi.response_for(&id);
        assert_eq!(response["success"], true, "{response}");
        assert_eq!(response["data"]["cancelled"], !confirmed, "{response}");
        let notices = pi
            .records()
            .iter()
            .filter(|r| r["type"] == "extension_ui_request" && r["message"] == "Clear cancelled")
            .count();
        assert_eq!(notices, 1, "one notice, for the cancelled one");
    }
}

// ---- M4: labels, shutdown, timed dialogs -----------------------------------------------------------

/// bookmark.ts: `/bookmark <label>` labels the last assistant message (a `label` entry in the
/// session file aimed at it); `/unbookmark` finds it through `getLabel` and clears it.
#[test]
fn bookmark_labels_the_last_assistant_message() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Noted."]))]);
    let setup = with_examples(
        &reference,
        Setup::anthropic(&fake).with_sessions(),
        &["bookmark.ts"],
    );
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "remember this"}));
    pi.wait_for_event("agent_end");
    pi.command("b", "prompt", json!({"message": "/bookmark harbour"}));
    pi.find(|r| r["type"] == "extension_ui_request" && r["message"] == "Bookmarked as: harbour");
    pi.command("u", "prompt", json!({"message": "/unbookmark"}));
    pi.find(|r| r["type"] == "extension_ui_request" && r["message"] == "Removed bookmark: harbour");
    let workspace = pi.workspace();
    pi.close_and_wait();
    let files = workspace.jsonl_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let entries = crate::support::read_jsonl(&files[0]);
    let assistant = entries
        .iter()
        .find(|e| e["type"] == "message" && e["message"]["role"] == "assistant")
        .expect("assistant entry");
    let labels: Vec<&Value> = entries.iter().filter(|e| e["type"] == "label").collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert_eq!(labels[0]["targetId"], assistant["id"]);
    assert_eq!(labels[0]["label"], "harbour");
    assert_eq!(labels[1]["targetId"], assistant["id"]);
    assert!(labels[1]["label"].is_null(), "{}", labels[1]);
}

/// shutdown-command.ts: `/quit` ends pi-rs cleanly (exit 0), as `ctx.shutdown()` does in pi.
#[test]
fn a_typescript_command_shuts_pi_down() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_examples(
        &reference,
        Setup::anthropic(&fake),
        &["shutdown-command.ts"],
    );
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("q", "prompt", json!({"message": "/quit"}));
    assert_eq!(response["success"], true, "{response}");
    let status = pi.wait_for_exit();
    assert!(status.success(), "{status:?}");
    assert!(fake.requests().is_empty());
}

/// timed-confirm.ts: each dialog carries the extension's timeout, and one left unanswered
/// resolves as cancelled when it runs out (the extension's "timed out" notice).
#[test]
fn timed_dialogs_carry_their_timeout_and_run_out() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["timed-confirm.ts"]);
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("t", "prompt", json!({"message": "/timed"}));
    assert_eq!(response["success"], true, "{response}");
    let dialog = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "confirm");
    assert_eq!(dialog["title"], "Timed Confirmation");
    assert_eq!(dialog["timeout"], 5000, "{dialog}");
    pi.find(|r| r["type"] == "extension_ui_request" && r["message"] == "Cancelled or timed out");
    pi.command("s", "prompt", json!({"message": "/timed-select"}));
    let dialog = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "select");
    assert_eq!(
        dialog["options"],
        json!(["Option A", "Option B", "Option C"])
    );
    assert_eq!(dialog["timeout"], 10000, "{dialog}");
    pi.find(|r| {
        r["type"] == "extension_ui_request" && r["message"] == "Selection cancelled or timed out"
    });
    assert!(
        extension_errors(pi.records()).is_empty(),
        "{:?}",
        pi.records()
    );
}

/// fixtures/extensions/host_modules.ts imports a runtime value from each host module (today's
/// names and the legacy `@mariozechner/*`, `@sinclair/typebox`); the legacy names give the
/// same values, and a tool built with typebox and pi-ai's `StringEnum` reaches the model.
#[test]
fn every_host_module_gives_runtime_values() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Fine."]))]);
    let path = crate::fake_provider::fixture_path("extensions/host_modules.ts");
    let setup = with_examples(&reference, Setup::anthropic(&fake), &[])
        .arg("-e")
        .arg(&path.to_string_lossy());
    let mut pi = Pi::spawn(&setup);
    pi.command("m", "prompt", json!({"message": "/modules"}));
    let notice = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "notify");
    let report: Value = serde_json::from_str(notice["message"].as_str().unwrap()).unwrap();
    assert_eq!(
        report,
        json!({
            "pi-coding-agent": "function", "pi-ai": "function", "pi-tui": "function",
            "pi-agent-core": "function", "typebox": "function",
            "legacy-pi-coding-agent": true, "legacy-pi-ai": true, "legacy-pi-tui": true,
            "legacy-pi-agent-core": true, "legacy-typebox": "function",
        })
    );
    pi.command("p", "prompt", json!({"message": "pick"}));
    pi.wait_for_event("agent_end");
    let request = &fake.requests()[0];
    let pick = request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "pick")
        .expect("pick offered");
    assert_eq!(
        pick["input_schema"]["properties"]["colour"]["enum"],
        json!(["red", "green"])
    );
    assert!(
        extension_errors(pi.records()).is_empty(),
        "{:?}",
        pi.records()
    );
}

/// A second extension of the tests' own that speaks on pi's event bus.
const BUS_PEER: &str = r#"
export default function (pi) {
    pi.registerCommand("peer", {
        description: "Emit on the bus",
        handler: async (args) => {
            pi.events.emit("my:notification", { message: args.trim(), from: "peer" });
        },
    });
}
"#;

/// event-bus.ts and a peer share `pi.events` (one host for both): the example hears its own
/// `session_start` emission, its `/emit`, and the peer's `/peer`.
#[test]
fn two_typescript_extensions_share_the_event_bus() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["event-bus.ts"])
        .file("peer.ts", BUS_PEER)
        .arg("-e")
        .arg("peer.ts");
    let mut pi = Pi::spawn(&setup);
    pi.find(|r| {
        r["type"] == "extension_ui_request"
            && r["message"] == "Event from event-bus-example: Session started"
    });
    pi.command("e", "prompt", json!({"message": "/emit ahoy"}));
    pi.find(|r| {
        r["type"] == "extension_ui_request" && r["message"] == "Event from /emit command: ahoy"
    });
    pi.command("p", "prompt", json!({"message": "/peer across"}));
    pi.find(|r| r["type"] == "extension_ui_request" && r["message"] == "Event from peer: across");
    assert!(
        extension_errors(pi.records()).is_empty(),
        "{:?}",
        pi.records()
    );
}

// ---- pi's tool factories, ctx.executeTool and pi.exec run through pi-rs (issue 24 item 3) --------

/// A workspace whose temp folder is inside it (so the cwd's `..` is outside everything the
/// sandbox allows), with the sandbox on.
fn sandboxed_workspace(setup: Setup) -> (crate::support::Workspace, Setup) {
    let workspace = crate::support::Workspace::new();
    std::fs::create_dir_all(workspace.root().join("tmp")).unwrap();
    let setup = setup
        .env("TMPDIR", &workspace.root().join("tmp").to_string_lossy())
        .settings(json!({"sandbox": {"mode": "workspace-write"}}));
    (workspace, setup)
}

/// bash-spawn-hook.ts, unchanged: its `createBashTool` tool runs pi-rs's bash, so the spawn
/// hook's environment reaches the command, the sandbox confines it (pi 1.6.0, which has no
/// sandbox, writes the file), and abort kills it.
#[test]
fn a_factory_bash_tool_runs_in_pi_rs_sandbox_and_abort_kills_it() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        crate::support::tool_reply(
            "toolu_1",
            "bash",
            json!({"command": "echo hook=$PI_SPAWN_HOOK; echo x > ../spawn-out.txt; echo rc=$?"}),
        ),
        crate::support::tool_reply(
            "toolu_2",
            "bash",
            json!({"command": "echo started $$; sleep 60"}),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let (workspace, setup) = sandboxed_workspace(Setup::anthropic(&fake));
    let setup = with_examples(&reference, setup, &["bash-spawn-hook.ts"]);
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "run"}));
    let pid = crate::support::wait_for_tool_pid(&mut pi, "started ");
    pi.command("a", "abort", json!({}));
    pi.records_until_event("agent_end");
    let ends: Vec<Value> = pi
        .records()
        .iter()
        .filter(|r| r["type"] == "tool_execution_end")
        .cloned()
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    let first = crate::support::end_text(&ends[0]);
    assert!(first.contains("hook=1"), "the spawn hook's env: {first}");
    assert!(
        first.contains("rc=1"),
        "the sandbox refused the write: {first}"
    );
    assert!(!workspace.root().join("spawn-out.txt").exists());
    assert_eq!(ends[1]["isError"], true, "{}", ends[1]);
    assert!(
        crate::support::wait_until_gone(pid, WAIT),
        "abort killed the command"
    );
    assert!(
        extension_errors(pi.records()).is_empty(),
        "{:?}",
        pi.records()
    );
}

/// An extension of the tests' own: its tool calls `ctx.executeTool`, `pi.exec` and a factory's
/// tool, and reports what each gave.
const ROUTED: &str = r#"
import { createReadTool } from "@earendil-works/pi-coding-agent";
export default function (pi) {
    pi.registerTool({
        name: "probe", label: "probe", description: "Probes the routed tools",
        parameters: { type: "object", properties: {} },
        async execute(_id, _params, _signal, _onUpdate, ctx) {
            const nested = await ctx.executeTool("write", { path: "../nested-out.txt", content: "x" });
            const inside = await ctx.executeTool("read", { path: "notes.txt" });
            const unknown = await ctx.executeTool("nope", {});
            const exec = await pi.exec("sh", ["-c", "echo x > ../exec-out.txt; echo rc=$?"]);
            const printf = await pi.exec("printf", ["%s", "hi"]);
            const missing = await pi.exec("/no/such/program", []);
            let thrown;
            try {
                await createReadTool(ctx.cwd).execute("r", { path: "missing.txt" });
            } catch (err) {
                thrown = err.message;
            }
            const leak = await createReadTool(ctx.cwd).execute("r", { path: "leak.txt" });
            const tools = ctx.tools.map((t) => t.name);
            const viaTools = await ctx.tools.find((t) => t.name === "read").execute("t", { path: "notes.txt" });
            const seen = { nested, inside, unknown, exec, printf, missing, thrown, leak, tools, viaTools };
            return { content: [{ type: "text", text: JSON.stringify(seen) }], details: {} };
        },
    });
}
"#;

/// `ctx.executeTool`, `pi.exec` and a factory's tool run in pi-rs: the sandbox blocks their
/// writes outside the workspace (under pi 1.6.0 both files would be written), their results keep
/// 1.6.0's shapes (`{toolCall, result, isError}`, `{stdout, stderr, code, killed, truncated}`,
/// a thrown error for a failed factory tool); what they return is redacted.
#[test]
fn execute_tool_and_exec_of_a_typescript_extension_run_in_pi_rs() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        crate::support::tool_reply("toolu_1", "probe", json!({})),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let (workspace, setup) = sandboxed_workspace(Setup::anthropic(&fake));
    std::fs::write(workspace.cwd().join("notes.txt"), "plain notes\n").unwrap();
    const KEY: &str = "sk-ant-tshost-0123456789abcdef";
    std::fs::write(
        workspace.agent_dir().join("auth.json"),
        json!({"fake-anthropic": {"type": "api_key", "key": KEY}}).to_string(),
    )
    .unwrap();
    std::fs::write(workspace.cwd().join("leak.txt"), format!("key={KEY}\n")).unwrap();
    std::fs::write(workspace.cwd().join("routed.ts"), ROUTED).unwrap();
    let setup = with_examples(&reference, setup, &[])
        .arg("-e")
        .arg("routed.ts");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("p", "prompt", json!({"message": "probe"}));
    let records = pi.records_until_event("agent_end");
    assert!(extension_errors(&records).is_empty(), "{records:?}");
    // (1.6.0 also records the nested calls, with their parent's id.)
    let end = records
        .iter()
        .find(|r| r["type"] == "tool_execution_end" && r["toolCallId"] == "toolu_1")
        .expect("tool_execution_end");
    let seen: Value =
        serde_json::from_str(&crate::support::end_text(end)).unwrap_or_else(|_| panic!("{end}"));
    assert_eq!(seen["nested"]["isError"], true, "{seen}");
    assert_eq!(seen["nested"]["toolCall"]["name"], "write", "{seen}");
    assert!(
        seen["nested"]["result"]
            .to_string()
            .contains("blocked by the sandbox"),
        "{seen}"
    );
    assert_eq!(seen["inside"]["isError"], false, "{seen}");
    assert!(seen["inside"]["durationMs"].is_u64(), "{seen}");
    assert!(
        seen["inside"]["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("plain notes"))
    );
    assert_eq!(seen["unknown"]["isError"], true, "{seen}");
    assert!(
        seen["exec"]["stderr"]
            .as_str()
            .is_some_and(|o| o.contains("Permission denied")),
        "{seen}"
    );
    assert_eq!(
        seen["printf"],
        json!({"stdout": "hi", "stderr": "", "code": 0, "killed": false, "truncated": false})
    );
    assert_eq!(seen["missing"]["code"], 1, "{seen}");
    assert!(
        seen["thrown"]
            .as_str()
            .is_some_and(|t| t.contains("missing.txt")),
        "{seen}"
    );
    // ctx.tools: the active tools, the built-ins running in pi-rs.
    let tools = seen["tools"].as_array().expect("tools");
    assert!(
        tools.contains(&json!("read")) && tools.contains(&json!("probe")),
        "{seen}"
    );
    assert_eq!(
        seen["viaTools"]["content"][0]["text"], "plain notes\n",
        "{seen}"
    );
    // The factory's read ran in pi-rs: the key it read is redacted (1.6.0 returns it as is).
    assert_eq!(
        seen["leak"]["content"][0]["text"], "key=[redacted]\n",
        "{seen}"
    );
    assert!(!end.to_string().contains(KEY));
    assert!(!workspace.root().join("nested-out.txt").exists());
    assert!(!workspace.root().join("exec-out.txt").exists());
}

/// minimal-mode.ts, unchanged: it registers every built-in again from pi's
/// `create…ToolDefinition` factories (with its own renderers); the model's calls reach those
/// tools, which run pi-rs's built-ins: the sandbox refuses a write outside the workspace (pi
/// 1.6.0 writes it), a write inside and a read work.
#[test]
fn minimal_mode_tools_from_pi_definitions_run_pi_rs_builtins() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use(
                    "toolu_1",
                    "write",
                    &[r#"{"path":"../outside.txt","content":"x"}"#],
                )
                .tool_use(
                    "toolu_2",
                    "write",
                    &[r#"{"path":"inside.txt","content":"fine"}"#],
                )
                .tool_use("toolu_3", "ls", &["{}"])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let (workspace, setup) = sandboxed_workspace(Setup::anthropic(&fake));
    std::fs::write(workspace.cwd().join("before.txt"), "here\n").unwrap();
    let setup = with_examples(&reference, setup, &["minimal-mode.ts"])
        .arg("--tools")
        .arg("read,bash,edit,write,grep,find,ls");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("p", "prompt", json!({"message": "write"}));
    let records = pi.records_until_event("agent_end");
    assert!(extension_errors(&records).is_empty(), "{records:?}");
    let requests = fake.requests();
    // The extension's tools (pi's descriptions) replace pi-rs's, each offered once.
    let writes: Vec<&Value> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "write")
        .collect();
    assert_eq!(writes.len(), 1);
    assert!(
        writes[0]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Write content to a file.")),
        "{}",
        writes[0]
    );
    let outside = tool_result_block_text(&tool_result_block(&requests[1], "toolu_1"));
    assert!(outside.contains("blocked by the sandbox"), "{outside}");
    assert!(!workspace.root().join("outside.txt").exists());
    let inside = tool_result_block_text(&tool_result_block(&requests[1], "toolu_2"));
    assert!(inside.contains("inside.txt"), "{inside}");
    assert_eq!(
        std::fs::read_to_string(workspace.cwd().join("inside.txt")).unwrap(),
        "fine"
    );
    // (The calls run in parallel: ls sees the file that was there before.)
    let listing = tool_result_block_text(&tool_result_block(&requests[1], "toolu_3"));
    assert!(listing.contains("before.txt"), "{listing}");
}

/// bash-spawn-hook.ts, unchanged: pi-rs's approval gate judges the command its spawn hook made
/// (the hook adds `source ~/.profile`), which the model never wrote: a rule denying `source`
/// blocks the call (pi 1.6.0, which has no gate, runs it).
#[test]
fn the_gate_judges_the_command_a_spawn_hook_made() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        crate::support::tool_reply("toolu_1", "bash", json!({"command": "echo hi > made.txt"})),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["bash-spawn-hook.ts"])
        .settings(json!({"approvals": {"rules": [
            {"tool": "bash", "command": "source *", "action": "deny", "reason": "No profiles here"}
        ]}}));
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "run"}));
    let records = pi.records_until_event("agent_end");
    let end = records
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool_execution_end");
    assert_eq!(end["isError"], true, "{end}");
    assert!(
        crate::support::end_text(end).contains("No profiles here"),
        "{end}"
    );
    assert!(!pi.cwd().join("made.txt").exists());
}

/// dirty-repo-guard.ts, unchanged: its `pi.exec("git", ["status", "--porcelain"])` runs through
/// pi-rs. In a repository with an uncommitted file it asks before a new session (and the answer
/// "No" cancels it, as under 1.6.0); with an approval rule denying `git`, the command fails
/// (code 1, read by the example as "not a git repo") and the session changes without a dialog —
/// the gate applies to `pi.exec` (1.6.0 has none).
#[test]
fn dirty_repo_guard_runs_git_through_pi_rs_and_its_gate() {
    let Some(reference) = pi_1_6() else { return };
    for denied in [false, true] {
        let fake = FakeProvider::start(vec![]);
        let workspace = crate::support::Workspace::new();
        let git = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(workspace.cwd())
            .status()
            .expect("git");
        assert!(git.success());
        std::fs::write(workspace.cwd().join("draft.txt"), "uncommitted\n").unwrap();
        let mut setup = with_examples(
            &reference,
            Setup::anthropic(&fake),
            &["dirty-repo-guard.ts"],
        );
        if denied {
            setup = setup.settings(json!({"approvals": {"rules": [
                {"tool": "bash", "command": "git *", "action": "deny", "reason": "No git here"}
            ]}}));
        }
        let mut pi = Pi::spawn_in(&workspace, &setup);
        pi.send(json!({"type": "new_session", "id": "n"}));
        if !denied {
            let deadline = pi.deadline();
            let dialog = pi
                .recv_until(
                    |r| r["type"] == "extension_ui_request" && r["method"] == "select",
                    deadline,
                )
                .pop()
                .expect("the dialog");
            assert!(
                dialog["title"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("You have 1 uncommitted file(s).")),
                "{dialog}"
            );
            pi.send(json!({"type": "extension_ui_response", "id": dialog["id"],
                "value": "No, let me commit first"}));
        }
        let response = pi.response_for("n");
        assert_eq!(response["success"], true, "{response}");
        assert_eq!(response["data"]["cancelled"], !denied, "{response}");
        let dialogs = pi
            .records()
            .iter()
            .filter(|r| r["type"] == "extension_ui_request" && r["method"] == "select")
            .count();
        assert_eq!(dialogs, usize::from(!denied));
    }
}
