//! pi's TypeScript extensions through the real binary (README.md, Extensions, "TypeScript
//! extensions"): pi-rs starts its Node host for them, which loads pi 1.6.0's own example
//! extensions, unchanged, from the installed package (`tests/install_reference.sh 1.6.0`, which
//! `.ci/run` installs). Each test checks what the extension visibly does: the request body at the
//! fake provider, the tool result, the dialog record, the session entry.
//!
//! Under `CI=true` a missing reference fails these tests; elsewhere they are skipped with a
//! printed reason. The same scripts run against pi 1.6.0 itself with `PI_TEST_BIN=<its pi>`
//! (README says which tests differ there, and why).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::extensions_v2::{listed_ids, listed_router_auto, routed_replies, select_router_auto};
use crate::fake_provider::{FakeProvider, Reply};
use crate::reference_clients::{Reference, reference};
use crate::sse;
use crate::support::{Pi, Setup, command_names, tool_result_block, tool_result_block_text};

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

/// `setup` as `with_examples` makes it, with the extension `source` written to `name` in the
/// project and loaded with `-e`.
fn with_source(reference: &Reference, setup: Setup, name: &str, source: &str) -> Setup {
    with_examples(reference, setup, &[])
        .file(name, source)
        .arg("-e")
        .arg(name)
}

/// No `extension_error` record so far (the records are shown otherwise).
#[track_caller]
fn assert_no_extension_errors(pi: &Pi) {
    let errors = extension_errors(pi.records());
    assert!(errors.is_empty(), "{errors:?} in {:?}", pi.records());
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
    let tools = requests[0].tool_names();
    assert!(tools.iter().any(|t| t == "hello"), "{tools:?}");
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
    let names = command_names(&response);
    assert!(names.iter().any(|n| n == "commands"), "{names:?}");
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
        let names = command_names(&response);
        assert!(
            names.iter().any(|n| n == "hello"),
            "hello.sh still loads: {names:?}"
        );
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
        let has = command_names(&response).iter().any(|n| n == "session-name");
        assert_eq!(has, trusted, "{response}");
        let script_dir = pi.agent_dir().join("cache/ts-host");
        assert_eq!(script_dir.exists(), trusted, "{}", script_dir.display());
        assert_no_extension_errors(&pi);
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
    let names = requests[0].tool_names();
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
    assert_no_extension_errors(&pi);
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
    let mut setup = with_source(&reference, Setup::anthropic(&fake), "waiter.ts", WAITER);
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
    assert_no_extension_errors(&pi);
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
    assert_no_extension_errors(&pi);
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
    assert_no_extension_errors(&pi);
}

// ---- start-up, restart, sandbox, shutdown ------------------------------------------------------

/// An extension of the tests' own that finishes loading only once the test opens its gate (the
/// file `gate` in the working directory), then registers a tool and a command.
const GATED: &str = r#"
import { existsSync } from "node:fs";
import { Type } from "typebox";
export default async function (pi) {
    const until = Date.now() + 120000;
    while (!existsSync("gate") && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 50));
    }
    pi.registerTool({
        name: "gated",
        label: "Gated",
        description: "Registered once the gate opened",
        parameters: Type.Object({}),
        async execute() {
            return { content: [{ type: "text", text: "ok" }], details: {} };
        },
    });
    pi.registerCommand("gated", { description: "Registered once the gate opened", handler: async () => {} });
}
"#;

/// pi-rs answers at once while the host loads (`get_state`, `get_available_models`), while
/// `get_commands` and the first prompt wait for the extension's registrations: they are
/// answered only after the gate opened, and the prompt's request offers the extension's tool.
#[test]
fn commands_are_answered_while_the_host_loads_and_the_first_prompt_waits() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Hi."]))]);
    let setup = with_source(&reference, Setup::anthropic(&fake), "gated.ts", GATED);
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "c", "type": "get_commands"}));
    pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["success"], true, "{state}");
    let models = pi.command("m", "get_available_models", json!({}));
    assert_eq!(models["success"], true, "{models}");
    // The gate is closed: the extension cannot have registered yet.
    let waiting = |r: &Value| r["type"] == "response" && (r["id"] == "c" || r["id"] == "p");
    assert!(
        !pi.records().iter().any(waiting),
        "answered before the registrations: {:?}",
        pi.records()
    );
    assert!(fake.requests().is_empty());
    std::fs::write(pi.cwd().join("gate"), "").unwrap();
    let commands = pi.response_for("c");
    let has_gated = command_names(&commands).iter().any(|n| n == "gated");
    assert!(has_gated, "{commands}");
    let prompt = pi.response_for("p");
    assert_eq!(prompt["success"], true, "{prompt}");
    pi.records_until_event("agent_end");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0].tool_names().contains(&"gated".to_string()),
        "{:?}",
        requests[0].tool_names()
    );
    assert_no_extension_errors(&pi);
}

/// `abort` ends the wait for the host: the held prompt is answered with an error at once (no
/// request reaches the provider), and the extension still registers afterwards.
#[test]
fn abort_ends_the_wait_for_the_host() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_source(&reference, Setup::anthropic(&fake), "gated.ts", GATED);
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
    let abort = pi.command("a", "abort", json!({}));
    assert_eq!(abort["success"], true, "{abort}");
    let prompt = pi.response_for("p");
    assert_eq!(prompt["success"], false, "{prompt}");
    assert_eq!(
        prompt["error"], "Aborted before the prompt started",
        "{prompt}"
    );
    std::fs::write(pi.cwd().join("gate"), "").unwrap();
    let commands = pi.command("c", "get_commands", json!({}));
    let has_gated = command_names(&commands).iter().any(|n| n == "gated");
    assert!(has_gated, "{commands}");
    assert!(fake.requests().is_empty());
}

/// fixtures/extensions/crash_host.ts kills its host from its tool. The first crash ends that
/// tool call with an error and the host starts again (the extension loads a second time and its
/// tool is offered again); the second crash is one `extension_error`, and pi-rs keeps running.
#[test]
fn a_crashed_host_is_restarted_once_then_reported() {
    let Some(reference) = pi_1_6() else { return };
    let crash = |id: &str| {
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use(id, "crash", &["{}"])
                .finish("tool_use"),
        )
    };
    let fake = FakeProvider::start(vec![
        crash("toolu_1"),
        Reply::sse(sse::anthropic_text(&["First crash seen."])),
        crash("toolu_2"),
        Reply::sse(sse::anthropic_text(&["Second crash seen."])),
    ]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &[])
        .arg("-e")
        .arg(&crate::extensions::extension("crash_host.ts"));
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("p1", "prompt", json!({"message": "crash it"}));
    assert_eq!(response["success"], true, "{response}");
    pi.records_until_event("agent_end");
    assert!(
        extension_errors(pi.records()).is_empty(),
        "the first crash restarts quietly: {:?}",
        pi.records()
    );
    // The second prompt waits for the restarted host's registrations.
    let response = pi.command("p2", "prompt", json!({"message": "crash it again"}));
    assert_eq!(response["success"], true, "{response}");
    pi.records_until_event("agent_end");
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["success"], true, "{state}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    let first = tool_result_block_text(&tool_result_block(&requests[1], "toolu_1"));
    assert!(first.contains("restarting it"), "{first}");
    assert!(
        requests[2].tool_names().contains(&"crash".to_string()),
        "offered again after the restart: {:?}",
        requests[2].tool_names()
    );
    assert!(!requests[3].tool_names().contains(&"crash".to_string()));
    let errors = extension_errors(pi.records());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["event"], "exit", "{errors:?}");
    assert!(
        errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("exited again after its restart"),
        "{errors:?}"
    );
    let loads = std::fs::read_to_string(pi.cwd().join("host-loads.txt")).unwrap();
    assert_eq!(loads.lines().count(), 2, "{loads}");
}

/// An extension of the tests' own that tries to write outside the workspace while it loads and
/// names its command after what happened (`wrote-yes`, or `wrote-<error code>`).
const WRITES_OUTSIDE: &str = r#"
import { writeFileSync } from "node:fs";
export default function (pi) {
    let wrote = "yes";
    try {
        writeFileSync("../from-ts-host.txt", "x");
    } catch (err) {
        wrote = String(err.code).toLowerCase();
    }
    pi.registerCommand(`wrote-${wrote}`, { description: "What the write did", handler: async () => {} });
}
"#;

/// `sandbox.extensions` confines the TypeScript host as it confines executables: the host
/// still loads its extension, whose write outside the workspace is refused; unconfined, it
/// writes.
#[test]
fn sandbox_extensions_confines_the_typescript_host() {
    let Some(reference) = pi_1_6() else { return };
    if !crate::sandbox::landlock_or_skip("sandbox_extensions_confines_the_typescript_host") {
        return;
    }
    let run = |extensions: bool| {
        let workspace = crate::sandbox::workspace();
        let fake = FakeProvider::start(Vec::new());
        let settings = json!({"sandbox": {"mode": "workspace-write", "extensions": extensions}});
        let setup = with_examples(&reference, Setup::anthropic(&fake), &[])
            .settings(settings)
            .file("outside.ts", WRITES_OUTSIDE)
            .arg("-e")
            .arg("outside.ts");
        let setup = crate::sandbox::sandboxed(setup, &workspace);
        let mut pi = Pi::spawn_in(&workspace, &setup);
        let response = pi.command("c", "get_commands", json!({}));
        let names = command_names(&response);
        assert_no_extension_errors(&pi);
        pi.close_and_wait();
        let written = workspace.root().join("from-ts-host.txt").exists();
        (names, written)
    };
    let (names, written) = run(false);
    assert!(names.contains(&"wrote-yes".to_string()), "{names:?}");
    assert!(written);
    let (names, written) = run(true);
    assert!(names.contains(&"wrote-eacces".to_string()), "{names:?}");
    assert!(!written, "the confined host cannot write outside");
}

/// An extension of the tests' own that starts a long `sleep` in the host's process group and
/// writes its pid to `sleeper.pid`.
const SPAWNS_A_SLEEPER: &str = r#"
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
export default function (pi) {
    const child = spawn("sleep", ["300"], { stdio: "ignore" });
    writeFileSync("sleeper.pid", String(child.pid));
    pi.registerCommand("sleeper", { description: "Started a sleep", handler: async () => {} });
}
"#;

/// At exit pi-rs ends the host's whole process group: the host's children die with it.
#[test]
fn shutdown_ends_the_hosts_whole_process_group() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(Vec::new());
    let setup = with_source(
        &reference,
        Setup::anthropic(&fake),
        "sleeper.ts",
        SPAWNS_A_SLEEPER,
    );
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("c", "get_commands", json!({}));
    assert!(
        command_names(&response).iter().any(|n| n == "sleeper"),
        "{response}"
    );
    let pid: i32 = std::fs::read_to_string(pi.cwd().join("sleeper.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(crate::support::process_alive(pid));
    let status = pi.close_and_wait();
    assert!(status.success(), "{status}");
    assert!(
        crate::support::wait_until_gone(pid, Duration::from_secs(30)),
        "the host's child {pid} outlived pi-rs"
    );
}

// ---- prompts, rpc-demo, the model registry, settings, providers, subagents ----------------

/// prompt-customizer.ts changes `systemPromptOptions` in place: its `tool_guidance` section,
/// built from the selected tools, reaches the request's system prompt.
#[test]
fn prompt_customizer_adds_a_section_from_the_prompt_options() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Fine."]))]);
    let setup = with_examples(
        &reference,
        Setup::anthropic(&fake),
        &["prompt-customizer.ts"],
    );
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "hello"}));
    let records = pi.records_until_event("agent_end");
    assert!(extension_errors(&records).is_empty(), "{records:?}");
    let system = system_prompt(&fake.requests()[0]);
    assert!(system.contains("<tool_guidance>"), "{system}");
    assert!(
        system.contains("- Use `read` for file contents; it supports text and images."),
        "{system}"
    );
    assert!(
        system.contains("- Use `bash` for file operations such as `ls`, `find`, and `grep`."),
        "{system}"
    );
}

fn ui_request(pi: &mut Pi, method: &str, field: &str, value: &str) -> Value {
    pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == method && r[field] == value)
}

/// rpc-demo.ts: title, widget and status at start; the status follows the turns; a dangerous
/// bash call opens its select dialog ("Block" blocks it); `/rpc-input`, `/rpc-editor` and
/// `/rpc-prefill` drive the input and editor dialogs and the editor text.
#[test]
fn rpc_demo_drives_every_dialog_and_notice() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_bash("toolu_1", "sudo rm -rf victim")),
        Reply::sse(sse::anthropic_text(&["Left alone."])),
    ]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["rpc-demo.ts"])
        .file("victim/keep.txt", "keep");
    let mut pi = Pi::spawn(&setup);
    let widget = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "setWidget");
    assert_eq!(widget["widgetKey"], "rpc-demo");
    assert_eq!(
        widget["widgetLines"],
        json!(["--- RPC Extension UI Demo ---", "Loaded and ready."])
    );
    ui_request(&mut pi, "setTitle", "title", "pi RPC Demo");
    ui_request(&mut pi, "setStatus", "statusText", "Turns: 0");
    pi.command("p", "prompt", json!({"message": "clean up"}));
    let dialog = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "select");
    assert_eq!(dialog["title"], "Dangerous command: sudo rm -rf victim");
    assert_eq!(dialog["options"], json!(["Allow", "Block"]));
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "value": "Block"}));
    ui_request(&mut pi, "notify", "message", "Command blocked by user");
    pi.wait_for_event("agent_end");
    ui_request(&mut pi, "setStatus", "statusText", "Turn 2 done");
    let block = tool_result_block(&fake.requests()[1], "toolu_1");
    assert_eq!(tool_result_block_text(&block), "Blocked by user");
    assert!(pi.cwd().join("victim/keep.txt").exists());

    // A command's prompt is answered once the command ends, here after its dialog.
    pi.send(json!({"type": "prompt", "id": "i", "message": "/rpc-input"}));
    let input = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "input");
    assert_eq!(input["title"], "Enter a value");
    assert_eq!(input["placeholder"], "type something...");
    pi.send(json!({"type": "extension_ui_response", "id": input["id"], "value": "forty-two"}));
    ui_request(&mut pi, "notify", "message", "You entered: forty-two");
    assert_eq!(pi.response_for("i")["success"], true);

    pi.send(json!({"type": "prompt", "id": "e", "message": "/rpc-editor"}));
    let editor = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "editor");
    assert_eq!(editor["title"], "Edit some text");
    assert_eq!(editor["prefill"], "Line 1\nLine 2\nLine 3");
    pi.send(json!({"type": "extension_ui_response", "id": editor["id"], "value": "a\nb"}));
    ui_request(&mut pi, "notify", "message", "Editor submitted (2 lines)");
    assert_eq!(pi.response_for("e")["success"], true);

    pi.command("f", "prompt", json!({"message": "/rpc-prefill"}));
    ui_request(
        &mut pi,
        "set_editor_text",
        "text",
        "This text was set by the rpc-demo extension.",
    );
    ui_request(&mut pi, "notify", "message", "Editor prefilled");
    assert_no_extension_errors(&pi);
}

/// One Google streaming reply (`streamGenerateContent?alt=sse`) with `text`.
fn google_text(text: &str) -> String {
    let chunk = json!({
        "candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 7, "totalTokenCount": 47},
    });
    format!("data: {chunk}\n\n")
}

/// custom-compaction.ts: at `session_before_compact` it finds google/gemini-2.5-flash in
/// `ctx.modelRegistry` and summarizes with `modelRegistry.complete()` (pi-ai in the host, with
/// the key pi-rs resolved); its summary becomes the compaction entry.
#[test]
fn custom_compaction_summarizes_with_a_model_of_the_registry() {
    let Some(reference) = pi_1_6() else { return };
    let long = |word: &str| format!("{word} {}", "filler ".repeat(200));
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&[&long("first answer")])),
        Reply::sse(sse::anthropic_text(&[&long("second answer")])),
        Reply::sse(google_text("## Goal\nCUSTOM SUMMARY FROM GEMINI")),
    ]);
    let models = crate::fake_provider::fixture("models_small_window.json").replacen(
        "\"providers\": {",
        "\"providers\": {\n    \"google\": {\"baseUrl\": \"__BASE_URL__\", \"apiKey\": \"google-key-for-tests\"},",
        1,
    );
    let setup = Setup::new(&fake, "fake-anthropic", "fake-claude-small")
        .models_json(&models)
        .with_sessions()
        .settings(json!({"compaction": {"reserveTokens": 1000, "keepRecentTokens": 200}}));
    let mut pi = Pi::spawn(&with_examples(&reference, setup, &["custom-compaction.ts"]));
    for (id, text) in [
        ("p1", long("first question")),
        ("p2", long("second question")),
    ] {
        pi.command(id, "prompt", json!({"message": text}));
        pi.wait_for_event("agent_settled");
    }
    pi.send(json!({"type": "compact", "id": "c"}));
    let response = pi.response_for("c");
    assert_eq!(response["success"], true, "{response}");
    assert_eq!(
        response["data"]["summary"], "## Goal\nCUSTOM SUMMARY FROM GEMINI",
        "{response}"
    );
    ui_request(
        &mut pi,
        "notify",
        "message",
        "Custom compaction extension triggered",
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "no request of pi-rs's own summarizer");
    let summary = &requests[2];
    assert!(
        summary.path.contains("gemini-2.5-flash"),
        "{}",
        summary.path
    );
    let key = summary.header("x-goog-api-key").unwrap_or_default();
    assert!(
        key == "google-key-for-tests" || summary.path.contains("key=google-key-for-tests"),
        "the key pi-rs resolved: {:?} {}",
        summary.headers,
        summary.path
    );
    let asked = summary.body.to_string();
    assert!(
        asked.contains("You are a conversation summarizer"),
        "{asked}"
    );
    assert!(asked.contains("first question"), "{asked}");
    assert_no_extension_errors(&pi);
}

/// An extension of the tests' own: `/registry` reports what `pi.getSettings()` and
/// `ctx.modelRegistry` say (credentials only as comparisons, never as text).
const REGISTRY_READER: &str = r#"
export default function (pi) {
    pi.registerCommand("registry", {
        description: "Report the settings and the model registry",
        handler: async (_args, ctx) => {
            const registry = ctx.modelRegistry;
            const model = registry.find("fake-anthropic", "fake-claude");
            const auth = await registry.getApiKeyAndHeaders(model);
            const settings = pi.getSettings();
            settings.tsMarker = "changed by the extension";
            const seen = {
                marker: pi.getSettings().tsMarker,
                nested: pi.getSettings().compaction,
                found: model && `${model.provider}/${model.id} ${model.api} ${model.contextWindow}`,
                missing: registry.find("nobody", "nothing") === undefined,
                many: registry.getAll().length > 100,
                available: registry.getAvailable().some((m) => m.provider === "fake-anthropic" && m.id === "fake-claude"),
                openaiAvailable: registry.getAvailable().some((m) => m.provider === "openai"),
                configured: registry.hasConfiguredAuth(model),
                authOk: auth.ok,
                keyIsTheConfiguredOne: auth.apiKey === "test-key",
                providerKey: (await registry.getApiKeyForProvider("fake-anthropic")) === "test-key",
            };
            ctx.ui.notify(JSON.stringify(seen), "info");
        },
    });
}
"#;

/// `pi.getSettings()` is a copy of the merged settings; `ctx.modelRegistry` is pi-rs's registry
/// (every model, the available ones, `find`) and its credentials come from pi-rs's resolver.
#[test]
fn settings_and_the_model_registry_reach_typescript_extensions() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &[])
        .settings(
            json!({"tsMarker": "from settings.json", "compaction": {"keepRecentTokens": 1234}}),
        )
        .file("registry.ts", REGISTRY_READER)
        .arg("-e")
        .arg("registry.ts");
    let mut pi = Pi::spawn(&setup);
    pi.command("r", "prompt", json!({"message": "/registry"}));
    let notice = pi.find(|r| r["type"] == "extension_ui_request" && r["method"] == "notify");
    let seen: Value = serde_json::from_str(notice["message"].as_str().unwrap()).unwrap();
    assert_eq!(
        seen,
        json!({
            "marker": "from settings.json",
            "nested": {"keepRecentTokens": 1234},
            "found": "fake-anthropic/fake-claude anthropic-messages 200000",
            "missing": true,
            "many": true,
            "available": true,
            "openaiAvailable": false,
            "configured": true,
            "authOk": true,
            "keyIsTheConfiguredOne": true,
            "providerKey": true,
        })
    );
    assert_no_extension_errors(&pi);
}

/// An extension of the tests' own registering two providers as pi's docs show: one on a wire
/// API pi-rs speaks, one that streams itself (through pi-ai's Anthropic implementation, as
/// 1.6.0's custom-provider-gitlab-duo does). `__BASE_URL__` is the fake provider.
const PROVIDERS: &str = r#"
import { anthropicMessagesApi } from "@earendil-works/pi-ai/compat";

const model = (id, name) => ({
    id, name, reasoning: false, input: ["text"],
    cost: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0 }, contextWindow: 100000, maxTokens: 4096,
});

export default function (pi) {
    pi.registerProvider("ts-gateway", {
        baseUrl: "__BASE_URL__",
        apiKey: "$TS_GATEWAY_KEY",
        api: "anthropic-messages",
        models: [model("gw-1", "Gateway One")],
    });
    pi.registerProvider("ts-streamer", {
        baseUrl: "__BASE_URL__",
        apiKey: "$TS_STREAMER_KEY",
        api: "ts-streamer-api",
        models: [model("st-1", "Streamer One")],
        streamSimple: (m, context, options) =>
            anthropicMessagesApi().streamSimple({ ...m, api: "anthropic-messages" }, context, options),
    });
    // After start-up: a provider registered and removed from commands.
    pi.registerCommand("add-late", {
        description: "Register ts-late",
        handler: async (_args, ctx) => {
            pi.registerProvider("ts-late", {
                baseUrl: "__BASE_URL__",
                apiKey: "$TS_LATE_KEY",
                api: "anthropic-messages",
                models: [model("late-1", "Late One")],
            });
        },
    });
    pi.registerCommand("drop-late", {
        description: "Unregister ts-late",
        handler: async (_args, ctx) => {
            await ctx.modelRegistry.refresh();
            ctx.ui.notify(`before: ${ctx.modelRegistry.find("ts-late", "late-1")?.name}`, "info");
            pi.unregisterProvider("ts-late");
        },
    });
}
"#;

/// `pi.registerProvider` from TypeScript: the models join pi-rs's registry (the start-up model
/// can name them; 1.6.0's custom-provider-anthropic example's models are listed too); a
/// provider on `anthropic-messages` is requested by pi-rs itself, one with a `streamSimple`
/// function through the host; both requests reach the fake provider with their keys.
#[test]
fn providers_registered_from_typescript_serve_requests() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["From the gateway."])),
        Reply::sse(sse::anthropic_text(&["From the streamer."])),
        Reply::sse(sse::anthropic_text(&["From the late one."])),
    ]);
    let extension = PROVIDERS.replace("__BASE_URL__", &fake.base_url());
    let setup = with_examples(
        &reference,
        Setup::new(&fake, "ts-gateway", "gw-1"),
        &["custom-provider-anthropic"],
    )
    .env("TS_GATEWAY_KEY", "gateway-key-1")
    .env("TS_STREAMER_KEY", "streamer-key-2")
    .env("CUSTOM_ANTHROPIC_API_KEY", "custom-key-3")
    .env("TS_LATE_KEY", "late-key-4")
    .file("providers.ts", &extension)
    .arg("-e")
    .arg("providers.ts");
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("m", "get_available_models", json!({}));
    let listed: Vec<String> = response["data"]["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| {
            format!(
                "{}/{} {}",
                m["provider"].as_str().unwrap(),
                m["id"].as_str().unwrap(),
                m["name"].as_str().unwrap()
            )
        })
        .collect();
    for expected in [
        "ts-gateway/gw-1 Gateway One",
        "ts-streamer/st-1 Streamer One",
        "custom-anthropic/claude-sonnet-4-5 Claude Sonnet 4.5 (Custom)",
    ] {
        assert!(
            listed.iter().any(|l| l == expected),
            "{expected}: {listed:?}"
        );
    }
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["data"]["model"]["provider"], "ts-gateway", "{state}");

    pi.command("p1", "prompt", json!({"message": "through the gateway"}));
    pi.wait_for_event("agent_end");
    let response = pi.command(
        "sm",
        "set_model",
        json!({"provider": "ts-streamer", "modelId": "st-1"}),
    );
    assert_eq!(response["success"], true, "{response}");
    pi.command("p2", "prompt", json!({"message": "through the streamer"}));
    let records = pi.records_until_event("agent_end");
    let last = records
        .iter()
        .rev()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .expect("the reply");
    assert_eq!(
        last["message"]["content"][0]["text"], "From the streamer.",
        "{last}"
    );
    assert_eq!(last["message"]["provider"], "ts-streamer");

    // Registered from a command (v2's register_provider), then removed.
    assert_eq!(
        pi.command("a", "prompt", json!({"message": "/add-late"}))["success"],
        true
    );
    let response = pi.command(
        "sl",
        "set_model",
        json!({"provider": "ts-late", "modelId": "late-1"}),
    );
    assert_eq!(response["success"], true, "{response}");
    pi.command("p3", "prompt", json!({"message": "through the late one"}));
    pi.wait_for_event("agent_end");
    pi.command("d", "prompt", json!({"message": "/drop-late"}));
    ui_request(&mut pi, "notify", "message", "before: Late One");
    let response = pi.command("m2", "get_available_models", json!({}));
    let providers: Vec<&str> = response["data"]["models"]
        .as_array()
        .expect("models")
        .iter()
        .filter_map(|m| m["provider"].as_str())
        .collect();
    assert!(!providers.contains(&"ts-late"), "{providers:?}");
    assert!(providers.contains(&"ts-gateway"), "{providers:?}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].body["model"], "late-1");
    assert_eq!(requests[2].header("x-api-key"), Some("late-key-4"));
    assert_eq!(requests[0].body["model"], "gw-1");
    assert_eq!(requests[0].header("x-api-key"), Some("gateway-key-1"));
    assert_eq!(user_texts(&requests[0]), ["through the gateway"]);
    assert_eq!(requests[1].body["model"], "st-1");
    assert_eq!(requests[1].header("x-api-key"), Some("streamer-key-2"));
    assert_eq!(
        user_texts(&requests[1]),
        ["through the gateway", "through the streamer"]
    );
    assert_eq!(system_prompt(&requests[1]), system_prompt(&requests[0]));
    assert_no_extension_errors(&pi);
}

/// subagent/index.ts: its `subagent` tool starts `process.execPath --mode json -p …` — pi-rs, not the
/// host — with the agent's prompt; the child's answer is the tool's result.
#[test]
fn the_subagent_example_runs_pi_rs_as_its_subagent() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use(
                    "toolu_1",
                    "subagent",
                    &[r#"{"agent":"echo","task":"say the word"}"#],
                )
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["CHILD-ANSWER"])),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    // Installed as its README says: the folder's index.ts (the folder itself is a package
    // whose prompts pi loads, without this extension).
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["subagent/index.ts"]);
    let mut pi = Pi::spawn(&setup);
    let agents = pi.agent_dir().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("echo.md"),
        "---\nname: echo\ndescription: Repeats its task\n---\n\nYou are the echo agent.\n",
    )
    .unwrap();
    pi.command("p", "prompt", json!({"message": "delegate"}));
    let records = pi.records_until_event("agent_end");
    assert!(extension_errors(&records).is_empty(), "{records:?}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "parent, child, parent");
    let child = &requests[1];
    assert_eq!(user_texts(child), ["Task: say the word"]);
    assert!(
        system_prompt(child).contains("You are the echo agent."),
        "{}",
        system_prompt(child)
    );
    let block = tool_result_block(&requests[2], "toolu_1");
    assert!(
        tool_result_block_text(&block).contains("CHILD-ANSWER"),
        "{block}"
    );
}

/// A provider whose `streamSimple` never finishes on its own: it opens its reply, and `abort`
/// reaches its `options.signal` (v2's `cancel_stream`), which it records in a file before it
/// ends the stream as pi's providers do (pi 1.6.0's abort waits for that end; pi-rs does not).
const HANGING_PROVIDER: &str = r#"
import { writeFileSync } from "node:fs";
import { createAssistantMessageEventStream } from "@earendil-works/pi-ai/compat";

export default function (pi) {
    pi.registerProvider("ts-hang", {
        baseUrl: "http://127.0.0.1:9",
        apiKey: "hang-key-5",
        api: "ts-hang-api",
        models: [{ id: "hang-1", name: "Hang", reasoning: false, input: ["text"],
            cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 1000, maxTokens: 100 }],
        streamSimple: (model, _context, options) => {
            const stream = createAssistantMessageEventStream();
            const partial = { role: "assistant", content: [{ type: "text", text: "" }], api: model.api,
                provider: model.provider, model: model.id, stopReason: "stop", timestamp: Date.now(),
                usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0,
                    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } } };
            stream.push({ type: "start", partial });
            stream.push({ type: "text_start", contentIndex: 0, partial });
            stream.push({ type: "text_delta", contentIndex: 0, delta: "thinking it over", partial });
            // As pi's providers do: an aborted signal ends the stream with an "aborted" error.
            options.signal.addEventListener("abort", () => {
                writeFileSync("stream-aborted.txt", `key ${options.apiKey === "hang-key-5"}`);
                const error = { ...partial, stopReason: "aborted", errorMessage: "Request was aborted" };
                stream.push({ type: "error", reason: "aborted", error });
                stream.end();
            });
            return stream;
        },
    });
}
"#;

/// `abort` during a reply a TypeScript `streamSimple` streams: pi-rs stops reading, the run
/// ends as aborted, and the function's signal is aborted.
#[test]
fn abort_reaches_a_typescript_providers_stream() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_source(
        &reference,
        Setup::new(&fake, "ts-hang", "hang-1"),
        "hang.ts",
        HANGING_PROVIDER,
    );
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "take your time"}));
    pi.find(|r| {
        r["type"] == "message_update" && r["assistantMessageEvent"]["delta"] == "thinking it over"
    });
    assert_eq!(pi.command("a", "abort", json!({}))["success"], true);
    let records = pi.records_until_event("agent_end");
    let last = records
        .iter()
        .rev()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .expect("the reply");
    assert_eq!(last["message"]["stopReason"], "aborted", "{last}");
    let seen = crate::support::wait_for_file(&pi.cwd().join("stream-aborted.txt"), WAIT, |t| {
        !t.is_empty()
    });
    assert_eq!(seen, "key true");
    assert!(fake.requests().is_empty());
    assert_no_extension_errors(&pi);
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
    assert_no_extension_errors(&pi);
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

// ---- virtual models and refreshed providers (protocol 2) ------------------------------------------

/// A router of the tests' own, written as pi 1.6.0's docs/virtual-models.md shows (the TypeScript
/// equivalent of fixtures/extensions/router.py): `router/auto` (levels low and high) sends a user
/// turn to fake-claude at high when high is selected, else to fake-claude-plain at medium, counts
/// user turns in its state, and keeps follow-ups on the model that handled the turn. It reports
/// each request as a notice "route <json>" and throws when the last user text says ROUTE-ERROR.
/// `/add-late` registers `router/late` from a command; `/drop-late` removes it.
const ROUTER: &str = r#"
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

const pair = (value) => (value ? { model: value.model.id, thinkingLevel: value.thinkingLevel ?? null } : null);

function lastUserText(messages): string {
    const users = messages.filter((m) => m.role === "user");
    const content = users.length > 0 ? users[users.length - 1].content : "";
    return typeof content === "string" ? content : content.map((b) => b.text ?? "").join("");
}

export default function (pi: ExtensionAPI) {
    pi.registerVirtualModel<{ turns: number }>({
        provider: "router",
        id: "auto",
        name: "Auto",
        thinkingLevels: ["low", "high"],
        contextWindow: 50000,
        route(request, ctx) {
            const seen = { reason: request.reason, model: request.model.id, thinkingLevel: request.thinkingLevel,
                state: request.state ?? null, previous: pair(request.previous) };
            ctx.ui.notify(`route ${JSON.stringify(seen)}`, "info");
            if (lastUserText(request.messages).includes("ROUTE-ERROR")) throw new Error("router exploded");
            const sticky = request.failed ?? request.previous;
            if (request.reason !== "user" && sticky) {
                return { model: sticky.model, thinkingLevel: sticky.thinkingLevel ?? "medium" };
            }
            const high = request.thinkingLevel === "high";
            const model = ctx.modelRegistry.find("fake-anthropic", high ? "fake-claude" : "fake-claude-plain")!;
            return { model, thinkingLevel: high ? "high" : "medium", state: { turns: (request.state?.turns ?? 0) + 1 } };
        },
    });
    // Not a thinking level: refused on its own, the other registrations stand.
    pi.registerVirtualModel({ provider: "router", id: "bad", name: "Bad", thinkingLevels: ["loud"], route: () => undefined });
    pi.registerCommand("add-late", {
        description: "Register router/late",
        handler: async (_args, ctx) => {
            pi.registerVirtualModel({
                provider: "router",
                id: "late",
                name: "Late",
                route: () => ({ model: ctx.modelRegistry.find("fake-anthropic", "fake-claude-plain")!, thinkingLevel: "off" }),
            });
        },
    });
    pi.registerCommand("drop-late", {
        description: "Remove router/late",
        handler: async () => pi.unregisterVirtualModel("router", "late"),
    });
}
"#;

/// The next "route <json>" notice of ROUTER.
fn next_ts_route(pi: &mut Pi) -> Value {
    crate::extensions_v2::next_report(pi, "route ", |_| true)
}

/// pi.registerVirtualModel: the model is listed and selectable; each request of the agent loop is
/// routed by the definition's `route()` (user turn, tool follow-up, a high selection), the fake
/// provider sees the routed model, the router state comes back; a throwing route() ends the turn
/// with its error; a virtual model registered from a command comes and goes.
#[test]
fn a_typescript_virtual_model_routes_each_request() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(routed_replies());
    let setup = with_source(&reference, Setup::anthropic(&fake), "router.ts", ROUTER);
    let mut pi = Pi::spawn(&setup);
    // get_commands waits for the host's registration (reads are answered at once).
    assert_eq!(pi.command("c", "get_commands", json!({}))["success"], true);
    listed_router_auto(&mut pi);
    if !crate::support::is_reference() {
        let bad = pi.find(|r| r["type"] == "extension_error");
        assert_eq!(bad["event"], "register_virtual_model", "{bad}");
        assert!(
            bad["extensionPath"]
                .as_str()
                .is_some_and(|p| p.ends_with("router.ts")),
            "{bad}"
        );
    }

    select_router_auto(&mut pi);

    pi.command("p1", "prompt", json!({"message": "Run it"}));
    let first = next_ts_route(&mut pi);
    assert_eq!(
        first,
        json!({"reason": "user", "model": "auto", "thinkingLevel": "low", "state": null,
               "previous": null})
    );
    let second = next_ts_route(&mut pi);
    assert_eq!(
        second,
        json!({"reason": "continuation", "model": "auto", "thinkingLevel": "low",
               "state": {"turns": 1},
               "previous": {"model": "fake-claude-plain", "thinkingLevel": "off"}})
    );
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(requests[0].body["model"], "fake-claude-plain");
    assert_eq!(requests[1].body["model"], "fake-claude-plain");
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["data"]["model"]["id"], "auto", "{state}");

    // A high selection goes to the reasoning model, with thinking.
    pi.command("tl2", "set_thinking_level", json!({"level": "high"}));
    pi.command("p2", "prompt", json!({"message": "Think hard"}));
    let third = next_ts_route(&mut pi);
    assert_eq!(third["reason"], "user", "{third}");
    assert_eq!(third["state"], json!({"turns": 1}), "{third}");
    let end = pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(3, pi.timeout());
    assert_eq!(requests[2].body["model"], "fake-claude");
    assert!(
        requests[2].body.get("thinking").is_some(),
        "{}",
        requests[2].body
    );
    let reply = end["messages"].as_array().and_then(|m| m.last()).cloned();
    let reply = reply.unwrap_or_default();
    assert_eq!(reply["model"], "fake-claude", "{end}");
    assert_eq!(reply["thinkingLevel"], "high", "{reply}");

    // A throwing route() ends the turn with an error response naming the virtual model.
    pi.command("p3", "prompt", json!({"message": "ROUTE-ERROR now"}));
    let deadline = pi.deadline();
    let records = pi.recv_until(
        |r| r["type"] == "message_end" && r["message"]["role"] == "assistant",
        deadline,
    );
    let failed = records.last().expect("the match")["message"].clone();
    assert_eq!(failed["stopReason"], "error", "{failed}");
    assert_eq!(failed["model"], "auto", "{failed}");
    assert!(
        failed["errorMessage"]
            .as_str()
            .is_some_and(|e| e.contains("router exploded")),
        "{failed}"
    );
    pi.wait_for_event("agent_end");
    assert_eq!(fake.requests().len(), 3, "a failed route sends nothing");

    // Registered from a command (register_virtual_model), then removed.
    pi.command("a", "prompt", json!({"message": "/add-late"}));
    let ids = crate::extensions_v2::models_once_listed(&mut pi, "router", "late");
    assert!(ids.contains(&"auto".to_string()), "{ids:?}");
    pi.command("d", "prompt", json!({"message": "/drop-late"}));
    let deadline = pi.deadline();
    for attempt in 0.. {
        if !listed_ids(&mut pi, &format!("l{attempt}"), "router").contains(&"late".into()) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "router/late stays");
        std::thread::sleep(Duration::from_millis(50));
    }
    let errors = extension_errors(pi.records());
    assert!(
        errors
            .iter()
            .all(|e| e["event"] == "register_virtual_model"),
        "{errors:?}"
    );
}

/// A router as 1.6.0's docs show (a user turn at `high` goes to fake-claude, else to
/// fake-claude-plain), which also answers summary requests (`direct`: the model that
/// answered last, with a state pi must ignore), and `/back`, which navigates back to the first
/// reply with a summary (`ctx.navigateTree`).
const SUMMARY_ROUTER: &str = r#"
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

const pair = (value) => (value ? { model: value.model.id, thinkingLevel: value.thinkingLevel ?? null } : null);

export default function (pi: ExtensionAPI) {
    pi.registerVirtualModel<{ turns?: number; direct?: boolean }>({
        provider: "router",
        id: "auto",
        name: "Auto",
        thinkingLevels: ["low", "high"],
        contextWindow: 50000,
        route(request, ctx) {
            const seen = { reason: request.reason, model: request.model.id, thinkingLevel: request.thinkingLevel,
                state: request.state ?? null, previous: pair(request.previous) };
            ctx.ui.notify(`route ${JSON.stringify(seen)}`, "info");
            const sticky = request.failed ?? request.previous;
            if (request.reason !== "user" && sticky) {
                const state = request.reason === "direct" ? { direct: true } : undefined;
                return { model: sticky.model, thinkingLevel: sticky.thinkingLevel ?? "medium", state };
            }
            const high = request.thinkingLevel === "high";
            const model = ctx.modelRegistry.find("fake-anthropic", high ? "fake-claude" : "fake-claude-plain")!;
            return { model, thinkingLevel: high ? "high" : "medium", state: { turns: (request.state?.turns ?? 0) + 1 } };
        },
    });
    pi.registerCommand("back", {
        description: "Back to the first reply, with a summary",
        handler: async (_args, ctx) => {
            const first = ctx.sessionManager.getBranch().find((e) => e.type === "message" && e.message.role === "assistant");
            const result = await ctx.navigateTree(first!.id, { summarize: true });
            ctx.ui.notify(`navigated ${JSON.stringify(result)}`, "info");
        },
    });
}
"#;

/// Summaries under a virtual selection (pi 1.6.0's `reason: "direct"`): `compact` and a
/// command's `ctx.navigateTree` with `summarize` ask the router once, without router state,
/// and go to the model it answers; the state it returns is not stored; the branch summary entry
/// records the request's usage.
#[test]
fn a_typescript_router_routes_summaries_direct() {
    let Some(reference) = pi_1_6() else { return };
    let filler = format!("First {}", "filler ".repeat(200));
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&[&format!(
            "first answer {}",
            "filler ".repeat(200)
        )])),
        Reply::sse(sse::anthropic_text(&["A2"])),
        Reply::sse(sse::anthropic_text(&["## Goal\nCompacted"])),
        Reply::sse(sse::anthropic_text(&["## Goal\nExplored"])),
    ]);
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .settings(json!({"compaction": {"keepRecentTokens": 200}}));
    let setup = with_examples(&reference, setup, &[])
        .file("router.ts", SUMMARY_ROUTER)
        .arg("-e")
        .arg("router.ts");
    let mut pi = Pi::spawn(&setup);
    assert_eq!(pi.command("c", "get_commands", json!({}))["success"], true);
    let set = pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "auto"}),
    );
    assert_eq!(set["success"], true, "{set}");
    pi.command("tl", "set_thinking_level", json!({"level": "low"}));
    for (id, text) in [("p1", filler.as_str()), ("p2", "Second")] {
        pi.command(id, "prompt", json!({"message": text}));
        assert_eq!(next_ts_route(&mut pi)["reason"], "user");
        pi.wait_for_event("agent_end");
    }
    let direct = json!({"reason": "direct", "model": "auto", "thinkingLevel": "low", "state": null,
                        "previous": {"model": "fake-claude-plain", "thinkingLevel": "off"}});

    let compacted = pi.command("k", "compact", json!({}));
    assert_eq!(next_ts_route(&mut pi), direct);
    assert_eq!(compacted["success"], true, "{compacted}");
    assert!(
        compacted["data"]["summary"]
            .as_str()
            .is_some_and(|s| s.ends_with("## Goal\nCompacted")),
        "{compacted}"
    );
    assert_eq!(
        fake.wait_for_requests(3, pi.timeout())[2].body["model"],
        "fake-claude-plain"
    );

    pi.command("b", "prompt", json!({"message": "/back"}));
    assert_eq!(next_ts_route(&mut pi), direct);
    let navigated = crate::extensions_v2::next_report(&mut pi, "navigated ", |_| true);
    assert_eq!(navigated["cancelled"], false, "{navigated}");
    assert_eq!(
        fake.wait_for_requests(4, pi.timeout())[3].body["model"],
        "fake-claude-plain"
    );
    let path = crate::support::session_file(&mut pi, "sf");
    let entries = crate::support::read_jsonl(&path);
    let summary = entries
        .iter()
        .find(|e| e["type"] == "branch_summary")
        .expect("a branch summary");
    assert_eq!(summary["usage"]["input"], 100, "{summary}");
    assert_eq!(summary["usage"]["totalTokens"], 101, "{summary}");
    let states: Vec<&Value> = entries
        .iter()
        .filter(|e| e["type"] == "custom" && e["customType"] == "pi.virtual-model-state")
        .map(|e| &e["data"]["state"])
        .collect();
    assert_eq!(states, [&json!({"turns": 1}), &json!({"turns": 2})]);
}

/// Under a virtual selection the threshold goes by the window of the model that answered
/// (fake-claude-plain: 100000; the virtual model's is 50000): 60000 tokens compact nothing, 90000
/// do, routed direct.
#[test]
fn a_typescript_router_s_threshold_goes_by_the_routed_model() {
    let Some(reference) = pi_1_6() else { return };
    let big = |tokens, text: &str| {
        Reply::sse(
            sse::AnthropicStream::new()
                .input_tokens(tokens)
                .text(&[text])
                .finish("end_turn"),
        )
    };
    let fake = FakeProvider::start(vec![
        big(60000, &format!("first answer {}", "filler ".repeat(200))),
        big(90000, "A2"),
        Reply::sse(sse::anthropic_text(&["## Goal\nCompacted"])),
    ]);
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .settings(json!({"compaction": {"keepRecentTokens": 200}}));
    let setup = with_examples(&reference, setup, &[])
        .file("router.ts", SUMMARY_ROUTER)
        .arg("-e")
        .arg("router.ts");
    let mut pi = Pi::spawn(&setup);
    assert_eq!(pi.command("c", "get_commands", json!({}))["success"], true);
    pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "auto"}),
    );
    pi.command("tl", "set_thinking_level", json!({"level": "low"}));
    let window = |pi: &mut Pi, id: &str| {
        pi.command(id, "get_session_stats", json!({}))["data"]["contextUsage"]["contextWindow"]
            .clone()
    };
    assert_eq!(window(&mut pi, "st1"), 50000);
    pi.command(
        "p1",
        "prompt",
        json!({"message": format!("First {}", "filler ".repeat(200))}),
    );
    let records = pi.recv_until(|r| r["type"] == "agent_end", pi.deadline());
    assert_eq!(window(&mut pi, "st2"), 100000);
    assert!(
        records.iter().all(|r| r["type"] != "compaction_start"),
        "{records:?}"
    );
    pi.command("p2", "prompt", json!({"message": "Second"}));
    let records = pi.recv_until(|r| r["type"] == "compaction_end", pi.deadline());
    let start = records
        .iter()
        .find(|r| r["type"] == "compaction_start")
        .expect("compaction_start");
    assert_eq!(start["reason"], "threshold", "{records:?}");
    let end = records.last().expect("compaction_end");
    assert!(
        end["result"]["summary"]
            .as_str()
            .is_some_and(|s| s.ends_with("## Goal\nCompacted")),
        "{end}"
    );
    assert_eq!(
        fake.wait_for_requests(3, pi.timeout())[2].body["model"],
        "fake-claude-plain"
    );
}

/// Resuming a session whose selection is a virtual model: it holds while the extension
/// registers it, else the model that answered last (not the default model) is restored.
#[test]
fn a_typescript_router_s_selection_is_resumed_or_falls_back() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["A1"]))]);
    let plain = with_examples(&reference, Setup::anthropic(&fake).with_sessions(), &[]);
    let routed = plain
        .clone()
        .file("router.ts", SUMMARY_ROUTER)
        .arg("-e")
        .arg("router.ts");
    let mut pi = Pi::spawn(&routed);
    let workspace = pi.workspace();
    assert_eq!(pi.command("c", "get_commands", json!({}))["success"], true);
    pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "auto"}),
    );
    pi.command("tl", "set_thinking_level", json!({"level": "low"}));
    pi.command("p1", "prompt", json!({"message": "First"}));
    pi.wait_for_event("agent_end");
    assert!(pi.close_and_wait().success());

    let model_of = |setup: Setup| {
        let mut pi = Pi::spawn_in(&workspace, &setup.without_model_flags().arg("--continue"));
        assert_eq!(pi.command("c", "get_commands", json!({}))["success"], true);
        let state = pi.command("s", "get_state", json!({}));
        let model = &state["data"]["model"];
        let named = format!("{}/{}", model["provider"], model["id"]).replace('"', "");
        assert!(pi.close_and_wait().success());
        named
    };
    assert_eq!(model_of(routed.clone()), "router/auto");
    assert_eq!(model_of(plain), "fake-anthropic/fake-claude-plain");
}

/// pi 1.6.0's branch summarizer: a transient failure is retried with the retry settings
/// (`summarization_retry_*`, `source: "branchSummary"`), a `context_edit` of the branch shapes
/// what is summarized, and the entry records the usage.
#[test]
fn a_typescript_branch_summary_is_retried_and_follows_context_edits() {
    let Some(reference) = pi_1_6() else { return };
    let overloaded = crate::fake_provider::fixture("anthropic/error_529.json");
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["A1"])),
        Reply::sse(sse::anthropic_text(&["A2"])),
        Reply::status(529, overloaded.clone(), &[]),
        Reply::sse(sse::anthropic_text(&["## Goal\nRetried"])),
    ]);
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .settings(json!({"retry": {"baseDelayMs": 20}}));
    let setup = with_examples(&reference, setup, &[])
        .file("router.ts", SUMMARY_ROUTER)
        .arg("-e")
        .arg("router.ts");
    let mut pi = Pi::spawn(&setup);
    let workspace = pi.workspace();
    for (id, text) in [("p1", "First"), ("p2", "Second SECRET")] {
        pi.command(id, "prompt", json!({"message": text}));
        pi.wait_for_event("agent_end");
    }
    let file = crate::support::session_file(&mut pi, "sf");
    assert!(pi.close_and_wait().success());
    let entries = crate::support::read_jsonl(&file);
    let second = entries
        .iter()
        .filter(|e| e["type"] == "message" && e["message"]["role"] == "user")
        .nth(1)
        .expect("the second question")["id"]
        .clone();
    let edit = json!({"type": "context_edit", "id": "ce000001",
        "parentId": entries.last().expect("entries")["id"],
        "timestamp": "2026-12-02T00:00:01.000Z", "targetId": second,
        "replacement": {"content": "Second, edited"}});
    let mut text = std::fs::read_to_string(&file).expect("the session file");
    text.push_str(&format!("{edit}\n"));
    std::fs::write(&file, text).expect("write the session file");

    let resumed = setup.arg("--session").arg(&file.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &resumed);
    pi.command("b", "prompt", json!({"message": "/back"}));
    let navigated = crate::extensions_v2::next_report(&mut pi, "navigated ", |_| true);
    assert_eq!(navigated["cancelled"], false, "{navigated}");
    let requests = fake.wait_for_requests(4, pi.timeout());
    let summarized = requests[3].body["messages"].to_string();
    assert!(summarized.contains("Second, edited"), "{summarized}");
    assert!(!summarized.contains("SECRET"), "{summarized}");
    let retries: Vec<Value> = pi
        .records()
        .iter()
        .filter(|r| {
            r["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("summarization_retry"))
        })
        .cloned()
        .collect();
    assert_eq!(
        retries,
        [
            json!({"type": "summarization_retry_scheduled", "attempt": 1, "maxAttempts": 3,
                   "delayMs": 20, "errorMessage": format!("529 {overloaded}")}),
            json!({"type": "summarization_retry_attempt_start", "source": "branchSummary"}),
            json!({"type": "summarization_retry_finished"}),
        ]
    );
    let path = crate::support::session_file(&mut pi, "sf2");
    let summary = crate::support::read_jsonl(&path)
        .into_iter()
        .find(|e| e["type"] == "branch_summary")
        .expect("a branch summary");
    assert_eq!(summary["usage"]["input"], 100, "{summary}");
    assert_eq!(
        summary["fromId"], "ce000001",
        "the leaf left behind: {summary}"
    );
}

/// A branch without messages (only a thinking level change) is summarized as "No content to
/// summarize", without a request.
#[test]
fn a_typescript_branch_without_messages_is_summarized_without_a_request() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["A1"]))]);
    let setup = with_examples(&reference, Setup::anthropic(&fake).with_sessions(), &[])
        .file("router.ts", SUMMARY_ROUTER)
        .arg("-e")
        .arg("router.ts");
    let mut pi = Pi::spawn(&setup);
    pi.command("p1", "prompt", json!({"message": "First"}));
    pi.wait_for_event("agent_end");
    pi.command("tl", "set_thinking_level", json!({"level": "high"}));
    pi.command("b", "prompt", json!({"message": "/back"}));
    let navigated = crate::extensions_v2::next_report(&mut pi, "navigated ", |_| true);
    assert_eq!(navigated["cancelled"], false, "{navigated}");
    let path = crate::support::session_file(&mut pi, "sf");
    let summary = crate::support::read_jsonl(&path)
        .into_iter()
        .find(|e| e["type"] == "branch_summary")
        .expect("a branch summary");
    assert_eq!(summary["summary"], "No content to summarize", "{summary}");
    assert_eq!(
        summary["details"],
        json!({"readFiles": [], "modifiedFiles": []}),
        "{summary}"
    );
    assert!(summary.get("usage").is_none(), "{summary}");
    assert_eq!(fake.requests().len(), 1, "no summary request");
}

/// A reply of fake-claude (window 200000) at 90000 tokens compacts nothing after the run, but
/// the next user turn, routed to fake-claude-plain (100000), is compacted first (its summary
/// routed direct) and then sent as routed.
#[test]
fn a_typescript_routed_request_to_a_smaller_window_is_compacted_first() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .input_tokens(90000)
                .text(&[&format!("first answer {}", "filler ".repeat(200))])
                .finish("end_turn"),
        ),
        Reply::sse(sse::anthropic_text(&["## Goal\nCompacted"])),
        Reply::sse(sse::anthropic_text(&["A2"])),
    ]);
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .settings(json!({"compaction": {"keepRecentTokens": 200}}));
    let setup = with_examples(&reference, setup, &[])
        .file("router.ts", SUMMARY_ROUTER)
        .arg("-e")
        .arg("router.ts");
    let mut pi = Pi::spawn(&setup);
    assert_eq!(pi.command("c", "get_commands", json!({}))["success"], true);
    pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "auto"}),
    );
    pi.command("th", "set_thinking_level", json!({"level": "high"}));
    pi.command(
        "p1",
        "prompt",
        json!({"message": format!("First {}", "filler ".repeat(200))}),
    );
    let records = pi.recv_until(|r| r["type"] == "agent_end", pi.deadline());
    assert!(
        records.iter().all(|r| r["type"] != "compaction_start"),
        "{records:?}"
    );
    pi.command("tl", "set_thinking_level", json!({"level": "low"}));
    pi.command("p2", "prompt", json!({"message": "Second"}));
    assert_eq!(next_ts_route(&mut pi)["reason"], "user");
    let direct = next_ts_route(&mut pi);
    assert_eq!(direct["reason"], "direct", "{direct}");
    let records = pi.recv_until(|r| r["type"] == "agent_end", pi.deadline());
    let end = records
        .iter()
        .find(|r| r["type"] == "compaction_end")
        .unwrap_or_else(|| panic!("no compaction: {records:?}"));
    assert_eq!(end["reason"], "threshold", "{end}");
    let requests = fake.wait_for_requests(3, pi.timeout());
    assert_eq!(requests[1].body["model"], "fake-claude");
    assert_eq!(requests[2].body["model"], "fake-claude-plain");
    assert!(
        requests[2].body["messages"]
            .to_string()
            .contains("## Goal\\nCompacted"),
        "the request after the compaction: {}",
        requests[2].body
    );
}

/// Providers of the tests' own whose `refreshModels` (pi 1.6.0's registerProvider config) returns
/// the models: `dyn` (registered while loading, one model `dyn-initial`), `broken` (its
/// refreshModels throws) and, from `/add-late`, `late`. Each refreshed list is
/// `<provider>-fresh-1` and `<provider>-fresh-2`.
const REFRESHED: &str = r#"
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

const model = (id) => ({
    id, name: id, reasoning: false, input: ["text"],
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 100000, maxTokens: 4096,
});

const provider = (name) => ({
    baseUrl: "__BASE_URL__",
    apiKey: "dyn-key",
    api: "anthropic-messages",
    models: [model(`${name}-initial`)],
    async refreshModels({ signal }) {
        if (signal.aborted) throw new Error("aborted");
        return [model(`${name}-fresh-1`), model(`${name}-fresh-2`)];
    },
});

export default function (pi: ExtensionAPI) {
    pi.registerProvider("dyn", provider("dyn"));
    pi.registerProvider("broken", {
        ...provider("broken"),
        async refreshModels() {
            throw new Error("catalog down");
        },
    });
    pi.registerCommand("add-late", {
        description: "Register the provider late",
        handler: async () => pi.registerProvider("late", provider("late")),
    });
}
"#;

/// A provider's `refreshModels` function: pi-rs asks the host (`refresh_models`) right after the
/// registration, at start and from a command; the returned models replace the registration's and
/// a request for one reaches the fake provider with the registration's key. A throwing
/// refreshModels leaves the provider's models as they were and, under pi-rs, is an
/// `extension_error`.
#[test]
fn a_typescript_provider_s_refresh_models_replaces_its_models() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Fresh."]))]);
    let extension = REFRESHED.replace("__BASE_URL__", &fake.base_url());
    let setup = with_source(
        &reference,
        Setup::anthropic(&fake),
        "refreshed.ts",
        &extension,
    );
    let mut pi = Pi::spawn(&setup);
    let ids = crate::extensions_v2::models_once_listed(&mut pi, "dyn", "dyn-fresh-1");
    assert_eq!(ids, ["dyn-fresh-1", "dyn-fresh-2"]);
    // pi 1.6.0 reports a failed refresh nowhere (neither a record nor stderr); pi-rs says so.
    if !crate::support::is_reference() {
        let error = pi.find(|r| r["type"] == "extension_error" && r["event"] == "refresh_models");
        assert!(
            error["error"]
                .as_str()
                .is_some_and(|e| e.contains("catalog down")),
            "{error}"
        );
    }
    assert_eq!(listed_ids(&mut pi, "b", "broken"), ["broken-initial"]);

    let set = pi.command(
        "sm",
        "set_model",
        json!({"provider": "dyn", "modelId": "dyn-fresh-2"}),
    );
    assert_eq!(set["success"], true, "{set}");
    pi.command("p", "prompt", json!({"message": "Hi"}));
    pi.wait_for_event("agent_end");
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    assert_eq!(request.body["model"], "dyn-fresh-2");
    assert_eq!(request.header("x-api-key"), Some("dyn-key"));

    pi.command("a", "prompt", json!({"message": "/add-late"}));
    let ids = crate::extensions_v2::models_once_listed(&mut pi, "late", "late-fresh-1");
    assert_eq!(ids, ["late-fresh-1", "late-fresh-2"]);
}

/// A provider with an `oauth.refreshToken` function (pi's login support for extension providers).
const CORP_OAUTH: &str = r#"
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

export default function (pi: ExtensionAPI) {
    pi.registerProvider("corp", {
        baseUrl: "__BASE_URL__",
        api: "anthropic-messages",
        models: [{
            id: "corp-1", name: "Corp 1", reasoning: false, input: ["text"],
            cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 100000, maxTokens: 4096,
        }],
        oauth: {
            name: "Corp SSO",
            async login() {
                throw new Error("not used here");
            },
            async refreshToken(credentials, signal) {
                signal.throwIfAborted();
                if (credentials.refresh !== "corp-refresh-0") throw new Error("wrong refresh token");
                return { ...credentials, access: "corp-access-1", refresh: "corp-refresh-1", expires: Date.now() + 3600000 };
            },
            getApiKey: (credentials) => credentials.access,
        },
    });
}
"#;

/// An expired login of a provider a TypeScript extension registered with `oauth` is refreshed by
/// the extension's `refreshToken` (protocol 2's `oauth_refresh`) before the request: the request
/// carries the new access token and auth.json holds the new login, as pi stores it.
#[test]
fn a_typescript_provider_s_expired_login_is_refreshed_by_its_oauth_refresh_token() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Signed in."]))]);
    let workspace = crate::support::Workspace::new();
    let auth = json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0",
                               "access": "corp-access-0", "expires": 1000}});
    let auth_path = workspace.agent_dir().join("auth.json");
    std::fs::write(&auth_path, auth.to_string()).unwrap();
    let extension = CORP_OAUTH.replace("__BASE_URL__", &fake.base_url());
    let setup = with_source(
        &reference,
        Setup::at(&fake.base_url(), "corp", "corp-1"),
        "corp.ts",
        &extension,
    );
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("p", "prompt", json!({"message": "Hi"}));
    let records = pi.records_until_event("agent_end");
    assert!(extension_errors(&records).is_empty(), "{records:?}");
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    assert_eq!(request.header("x-api-key"), Some("corp-access-1"));
    let stored: Value = serde_json::from_slice(&std::fs::read(&auth_path).unwrap()).unwrap();
    assert_eq!(stored["corp"]["type"], "oauth", "{stored}");
    assert_eq!(stored["corp"]["access"], "corp-access-1", "{stored}");
    assert_eq!(stored["corp"]["refresh"], "corp-refresh-1", "{stored}");
}

/// A provider whose `oauth` also has `getApiKey` and `modifyModels`.
const CORP_OAUTH_KEYED: &str = r#"
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

export default function (pi: ExtensionAPI) {
    pi.registerProvider("corp", {
        baseUrl: "http://127.0.0.1:9",
        api: "anthropic-messages",
        models: [{
            id: "corp-1", name: "Corp 1", reasoning: false, input: ["text"],
            cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 100000, maxTokens: 4096,
        }],
        oauth: {
            name: "Corp SSO",
            async login() {
                throw new Error("not used here");
            },
            async refreshToken(credentials) {
                return { ...credentials, access: "corp-access-1", refresh: "corp-refresh-1", expires: Date.now() + 3600000 };
            },
            getApiKey: (credentials) => `corp-key-${credentials.access}`,
            modifyModels: (models, credentials) =>
                models.map((model) => ({ ...model, baseUrl: credentials.endpoint, name: `${model.name} for ${credentials.accountId}` })),
        },
    });
}
"#;

/// `oauth.modifyModels` adapts the provider's models to the stored login at start, and
/// `oauth.getApiKey` derives the request's key from the login, refreshed first because it has
/// less than five minutes left (protocol 2's `oauth_modify_models`, `oauth_refresh`,
/// `oauth_api_key`). Passes against pi 1.6.0 too.
#[test]
fn a_typescript_provider_s_login_gives_its_key_and_adapts_its_models() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Keyed."]))]);
    let workspace = crate::support::Workspace::new();
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 4 * 60_000;
    let auth = json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0", "access": "corp-access-0",
                               "expires": expires, "endpoint": fake.base_url(), "accountId": "acme"}});
    std::fs::write(workspace.agent_dir().join("auth.json"), auth.to_string()).unwrap();
    let setup = with_examples(
        &reference,
        Setup::at("http://127.0.0.1:9", "corp", "corp-1"),
        &[],
    )
    .file("corp.ts", CORP_OAUTH_KEYED)
    .arg("-e")
    .arg("corp.ts");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let deadline = pi.deadline();
    for attempt in 0.. {
        let models = pi.command(&format!("m{attempt}"), "get_available_models", json!({}));
        let corp = models["data"]["models"]
            .as_array()
            .and_then(|all| all.iter().find(|m| m["provider"] == "corp").cloned())
            .unwrap_or(Value::Null);
        if corp["name"] == "Corp 1 for acme" {
            assert_eq!(corp["baseUrl"], fake.base_url(), "{corp}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never adapted: {corp}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    pi.command("p", "prompt", json!({"message": "Hi"}));
    let records = pi.records_until_event("agent_end");
    assert!(extension_errors(&records).is_empty(), "{records:?}");
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    assert_eq!(request.header("x-api-key"), Some("corp-key-corp-access-1"));
}

/// A provider whose `oauth.modifyModels` names the models after the login's account, and a
/// command `/later` that registers another provider.
const CORP_OAUTH_LATER: &str = r#"
export default function (pi) {
    pi.registerProvider("corp", {
        baseUrl: "http://127.0.0.1:9",
        api: "anthropic-messages",
        models: [{
            id: "corp-1", name: "Corp 1", reasoning: false, input: ["text"],
            cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 100000, maxTokens: 4096,
        }],
        oauth: {
            name: "Corp SSO",
            async login() {
                throw new Error("not used here");
            },
            async refreshToken(credentials) {
                return credentials;
            },
            getApiKey: (credentials) => credentials.access,
            modifyModels: (models, credentials) =>
                models.map((model) => ({ ...model, name: `${model.name} for ${credentials.accountId}` })),
        },
    });
    pi.registerCommand("later", {
        description: "registers another provider",
        handler: async () => {
            pi.registerProvider("other", {
                baseUrl: "http://127.0.0.1:9", api: "anthropic-messages", apiKey: "other-key-123456",
                models: [{
                    id: "other-1", name: "Other 1", reasoning: false, input: ["text"],
                    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 100000, maxTokens: 4096,
                }],
            });
        },
    });
}
"#;

/// `oauth.modifyModels` is applied again, with the login stored now, when another provider is
/// registered (pi 1.6.0 refreshes every provider's models then). Passes against pi 1.6.0 too.
#[test]
fn a_typescript_provider_s_models_are_adapted_again_after_a_later_registration() {
    let Some(reference) = pi_1_6() else { return };
    let workspace = crate::support::Workspace::new();
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    let login = |account: &str| {
        json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0", "access": "corp-access-0",
                        "expires": expires, "accountId": account}})
    };
    let auth = workspace.agent_dir().join("auth.json");
    std::fs::write(&auth, login("acme").to_string()).unwrap();
    let setup = with_examples(
        &reference,
        Setup::at("http://127.0.0.1:9", "corp", "corp-1"),
        &[],
    )
    .file("corp.js", CORP_OAUTH_LATER)
    .arg("-e")
    .arg("corp.js");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let corp_named = |pi: &mut Pi, wanted: &str| {
        let deadline = pi.deadline();
        for attempt in 0.. {
            let models = pi.command(&format!("m{attempt}"), "get_available_models", json!({}));
            let corp = models["data"]["models"]
                .as_array()
                .and_then(|all| all.iter().find(|m| m["provider"] == "corp").cloned())
                .unwrap_or(Value::Null);
            if corp["name"] == wanted {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never {wanted}: {corp}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    corp_named(&mut pi, "Corp 1 for acme");
    std::fs::write(&auth, login("globex").to_string()).unwrap();
    pi.command("l", "prompt", json!({"message": "/later"}));
    corp_named(&mut pi, "Corp 1 for globex");
}

/// A provider whose `oauth.getApiKey` numbers the keys it gives.
const CORP_OAUTH_COUNTED: &str = r#"
export default function (pi) {
    let calls = 0;
    pi.registerProvider("corp", {
        baseUrl: "__BASE_URL__",
        api: "anthropic-messages",
        models: [{
            id: "corp-1", name: "Corp 1", reasoning: false, input: ["text"],
            cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 100000, maxTokens: 4096,
        }],
        oauth: {
            name: "Corp SSO",
            async login() {
                throw new Error("not used here");
            },
            async refreshToken(credentials) {
                return credentials;
            },
            getApiKey: (credentials) => `corp-key-${credentials.access}-${++calls}`,
        },
    });
}
"#;

/// `oauth.getApiKey` is asked for the key of every request, not once per login (protocol 2's
/// `oauth_api_key`). Passes against pi 1.6.0 too.
#[test]
fn a_typescript_provider_s_key_is_asked_for_at_each_request() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["One."])),
        Reply::sse(sse::anthropic_text(&["Two."])),
    ]);
    let workspace = crate::support::Workspace::new();
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    let auth = json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0",
                               "access": "corp-access-0", "expires": expires}});
    std::fs::write(workspace.agent_dir().join("auth.json"), auth.to_string()).unwrap();
    let extension = CORP_OAUTH_COUNTED.replace("__BASE_URL__", &fake.base_url());
    let setup = with_examples(
        &reference,
        Setup::at(&fake.base_url(), "corp", "corp-1"),
        &[],
    )
    .file("corp.js", &extension)
    .arg("-e")
    .arg("corp.js");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    for (id, message) in [("p1", "One"), ("p2", "Two")] {
        pi.command(id, "prompt", json!({"message": message}));
        let records = pi.records_until_event("agent_end");
        assert!(extension_errors(&records).is_empty(), "{records:?}");
    }
    let requests = fake.wait_for_requests(2, pi.timeout());
    let keys: Vec<&str> = requests
        .iter()
        .map(|r| r.header("x-api-key").unwrap_or_default())
        .collect();
    assert!(
        keys.iter()
            .all(|k| k.starts_with("corp-key-corp-access-0-")),
        "{keys:?}"
    );
    assert_ne!(
        keys[0], keys[1],
        "the second request reused the first one's key"
    );
}

/// An extension of the tests' own: `lookup` asks for strict JSON-schema sampling where the API
/// allows it.
const STRICT_TOOL: &str = r#"
export default function (pi) {
    pi.registerTool({
        name: "lookup",
        label: "Lookup",
        description: "Looks a word up",
        parameters: { type: "object", required: ["q"],
            properties: { q: { type: "string" }, n: { type: "number" } } },
        constrainedSampling: { type: "json_schema", strict: "prefer" },
        async execute() {
            return { content: [{ type: "text", text: "found" }], details: {} };
        },
    });
}
"#;

/// A TypeScript tool registered with `constrainedSampling` keeps it in its declaration (the
/// transcript's system message), and an API with strict tools (Anthropic's
/// `supportsStrictTools`) gets it strict, its optional parameter nullable, as pi 1.6.0 sends it.
#[test]
fn a_typescript_tool_can_ask_for_strict_sampling() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Done."]))]);
    let models = json!({"providers": {"st": {"baseUrl": "__BASE_URL__",
        "api": "anthropic-messages", "apiKey": "st-key-123456",
        "models": [{"id": "st-model", "input": ["text"],
            "compat": {"supportsStrictTools": true}}]}}});
    let setup = Setup::new(&fake, "st", "st-model").models_json(&models.to_string());
    let setup = with_examples(&reference, setup, &[])
        .file("strict.ts", STRICT_TOOL)
        .arg("-e")
        .arg("strict.ts");
    let mut pi = Pi::spawn(&setup);
    pi.command("p", "prompt", json!({"message": "look it up"}));
    let run = pi.wait_for_event("agent_end");
    let declared = run["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "system")
        .flat_map(|m| m["toolsAdded"].as_array().cloned().unwrap_or_default())
        .find(|t| t["name"] == "lookup")
        .expect("lookup declared");
    assert_eq!(
        declared["constrainedSampling"],
        json!({"type": "json_schema", "strict": "prefer"})
    );
    let requests = fake.requests();
    let lookup = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "lookup")
        .cloned()
        .expect("lookup offered");
    assert_eq!(lookup["strict"], true, "{lookup}");
    assert_eq!(
        lookup["input_schema"],
        json!({"type": "object", "required": ["q", "n"], "properties": {"q": {"type": "string"},
            "n": {"anyOf": [{"type": "number"}, {"type": "null"}]}},
            "additionalProperties": false}),
        "{lookup}"
    );
}

/// An extension of the tests' own: `need` requires strict JSON-schema sampling; its `minimum` is
/// a keyword Claude's strict mode rejects.
const REQUIRED_STRICT_TOOL: &str = r#"
export default function (pi) {
    pi.registerTool({
        name: "need",
        label: "Need",
        description: "Needs strict sampling",
        parameters: { type: "object", required: ["q"],
            properties: { q: { type: "string" }, n: { type: "number", minimum: 1 } } },
        constrainedSampling: { type: "json_schema", strict: "require" },
        async execute() {
            return { content: [{ type: "text", text: "done" }], details: {} };
        },
    });
}
"#;

/// A TypeScript tool that requires strict sampling (`strict: "require"`) goes strict where the
/// API has strict tools (Chat Completions' `supportsStrictMode`); where it has none (Gemini 2.5)
/// or its schema has no strict form there (Anthropic: `minimum`), the request fails before it is
/// sent, with pi 1.6.0's reason as the assistant error. Passes against pi 1.6.0 too.
#[test]
fn a_typescript_tool_that_requires_strict_sampling_is_strict_or_fails_the_request() {
    let Some(reference) = pi_1_6() else { return };
    let run = |api: &str, model: &str, compat: Value, fixture: &str| {
        let fake = FakeProvider::start(vec![Reply::sse_fixture(fixture)]);
        let models = json!({"providers": {"st": {"baseUrl": "__BASE_URL__/v1", "api": api,
            "apiKey": "st-key-123456",
            "models": [{"id": model, "input": ["text"], "compat": compat}]}}});
        let setup = Setup::new(&fake, "st", model).models_json(&models.to_string());
        let setup = with_examples(&reference, setup, &[])
            .file("need.ts", REQUIRED_STRICT_TOOL)
            .arg("-e")
            .arg("need.ts");
        let mut pi = Pi::spawn(&setup);
        pi.command("p", "prompt", json!({"message": "go"}));
        let end = pi.wait_for_event("agent_end");
        let message = end["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rfind(|m| m["role"] == "assistant")
            .cloned()
            .expect("an assistant message");
        (message, fake.requests())
    };
    let (message, requests) = run(
        "openai-completions",
        "st-model",
        json!({"supportsStrictMode": true}),
        "openai/text.sse",
    );
    assert_eq!(message["stopReason"], "stop", "{message}");
    let need = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "need")
        .cloned()
        .expect("need offered");
    assert_eq!(
        need["function"]["parameters"],
        json!({"type": "object", "required": ["q", "n"], "properties": {"q": {"type": "string"},
            "n": {"anyOf": [{"type": "number", "minimum": 1}, {"type": "null"}]}},
            "additionalProperties": false}),
        "{need}"
    );
    assert_eq!(need["function"]["strict"], true, "{need}");

    for (api, model, compat, reason) in [
        (
            "google-generative-ai",
            "gemini-2.5-flash",
            json!({}),
            "strict tools are unsupported",
        ),
        (
            "anthropic-messages",
            "st-model",
            json!({"supportsStrictTools": true}),
            "minimum: 1 is unsupported",
        ),
    ] {
        let (message, requests) = run(api, model, compat, "google/text.sse");
        assert_eq!(message["stopReason"], "error", "{message}");
        assert_eq!(
            message["errorMessage"],
            format!("Tool \"need\" requires JSON-schema constrained sampling, but {reason}."),
            "{api}"
        );
        assert!(requests.is_empty(), "{api}: {requests:?}");
    }
}
