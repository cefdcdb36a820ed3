//! Extensions through the real binary (src/extensions/PROTOCOL.md, seed: extension UI
//! sub-protocol, `get_commands`): loading and discovery, extension commands, the four hooks,
//! extension tools, UI dialogs and notices, failures (crash, junk), event subscriptions and
//! shutdown.
//!
//! Fixtures live in `fixtures/extensions/`: `hello.sh` (a command), `full.py` (every hook, a
//! tool, dialogs), `recorder.py` (records events and its pid in files of the cwd; commands with
//! observable actions), `crash.sh`, `hang.sh`, `junk_event.sh`. Extensions write to files of the
//! cwd asynchronously, so file checks wait (bounded) for the awaited content.
//!
//! Not covered here: an extension that misses a hook deadline. The agent gives hooks 30 s
//! (`PROMPT_HOOK_DEADLINE` in src/agent/extending.rs, `TOOL_HOOK_DEADLINE` in
//! src/agent/tool_batch.rs) with no way to shorten it, which is too long for this suite; the
//! host's unit tests cover the deadline with short values.
//!
//! Reference: pi runs TypeScript extensions, not executables; none of these tests applies to it.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture_path};
use crate::sse;
use crate::support::{
    Pi, Setup, Workspace, command_names, message_text, process_alive, result_text,
    tool_result_block, tool_result_block_text, wait_for_file, wait_until_gone, write_executable,
};

/// Absolute path of an extension fixture.
pub fn extension(name: &str) -> String {
    fixture_path(&format!("extensions/{name}"))
        .to_string_lossy()
        .into_owned()
}

/// `setup` with `-e <fixture>` for each name.
pub fn with_extensions(mut setup: Setup, names: &[&str]) -> Setup {
    for name in names {
        setup = setup.arg("-e").arg(&extension(name));
    }
    setup
}

/// The request's system prompt as one string (Anthropic sends text blocks).
fn system_prompt(request: &crate::fake_provider::RecordedRequest) -> String {
    match &request.body["system"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn prompt_response(id: &str, disposition: &str) -> Value {
    json!({"id": id, "type": "response", "command": "prompt", "success": true,
           "data": {"disposition": disposition}})
}

/// The next `extension_ui_request` with this method (sequential).
#[track_caller]
fn next_ui_request(pi: &mut Pi, method: &str) -> Value {
    let deadline = pi.deadline();
    let mut records = pi.recv_until(
        |r| r["type"] == "extension_ui_request" && r["method"] == method,
        deadline,
    );
    records.pop().expect("the match")
}

/// The pids extensions announced with a `notify` "pid <n> ..." at hello, once `count` did.
#[track_caller]
fn announced_pids(pi: &mut Pi, count: usize) -> Vec<Vec<i32>> {
    let deadline = std::time::Instant::now() + pi.timeout();
    loop {
        let found: Vec<Vec<i32>> = pi
            .records()
            .iter()
            .filter(|r| r["type"] == "extension_ui_request" && r["method"] == "notify")
            .filter_map(|r| {
                r["message"]
                    .as_str()?
                    .strip_prefix("pid ")
                    .map(str::to_string)
            })
            .map(|rest| rest.split(' ').filter_map(|p| p.parse().ok()).collect())
            .collect();
        if found.len() >= count {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {} pid notices arrived",
            found.len()
        );
        pi.drain_for(Duration::from_millis(50));
    }
}

fn errors(pi: &Pi) -> Vec<Value> {
    pi.records()
        .iter()
        .filter(|r| r["type"] == "extension_error")
        .cloned()
        .collect()
}

fn one_text_reply(text: &str) -> Vec<Reply> {
    vec![Reply::sse(sse::anthropic_text(&[text]))]
}

// ---- loading ----------------------------------------------------------------------------------

#[test]
fn cli_extension_commands_come_first_in_get_commands() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(Setup::anthropic(&fake).trust_project(), &["hello.sh"])
        .file(".pi/prompts/review.md", "Review the code");
    let mut pi = Pi::spawn(&setup);
    let response = pi.command("c1", "get_commands", json!({}));
    assert_eq!(response["success"], true, "{response}");
    let commands = response["data"]["commands"].as_array().expect("commands");
    assert_eq!(commands.len(), 3, "{response}");
    assert_eq!(commands[0]["name"], "hello");
    assert_eq!(
        commands[0]["description"],
        "Greet someone from a shell extension"
    );
    assert_eq!(commands[0]["source"], "extension");
    assert_eq!(commands[0]["sourceInfo"]["path"], extension("hello.sh"));
    // pi 1.6.0's built-in `/mcp` after the extensions' commands.
    assert_eq!(commands[1]["name"], "mcp");
    assert_eq!(commands[2]["name"], "review");
    assert_eq!(commands[2]["source"], "prompt");
    assert!(errors(&pi).is_empty(), "{:?}", errors(&pi));
    fake.finish();
}

#[test]
fn relative_cli_paths_are_taken_from_the_cwd() {
    let fake = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    write_executable(
        &workspace.cwd().join("exts/hello.sh"),
        &std::fs::read_to_string(extension("hello.sh")).expect("fixture"),
    );
    let setup = Setup::anthropic(&fake).arg("-e").arg("exts/hello.sh");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let response = pi.command("c1", "get_commands", json!({}));
    let commands = response["data"]["commands"].as_array().expect("commands");
    assert_eq!(commands[0]["name"], "hello", "{response}");
    let expected: PathBuf = workspace.cwd().join("exts/hello.sh");
    assert_eq!(
        commands[0]["sourceInfo"]["path"],
        expected.to_string_lossy().as_ref()
    );
    fake.finish();
}

#[test]
fn a_typescript_extension_without_node_is_a_load_error_and_the_others_still_run() {
    let fake = FakeProvider::start(one_text_reply("Still here."));
    let setup = Setup::anthropic(&fake)
        .env("PI_RS_NODE", "/nonexistent/node")
        .file("ext.ts", "export default function (pi) {}\n")
        .arg("-e")
        .arg("ext.ts");
    let setup = with_extensions(setup, &["hello.sh"]);
    let mut pi = Pi::spawn(&setup);
    let error = pi.find(|r| r["type"] == "extension_error");
    let ts_path = pi.cwd().join("ext.ts");
    assert_eq!(error["extensionPath"], ts_path.to_string_lossy().as_ref());
    assert_eq!(error["event"], "load");
    let text = error["error"].as_str().unwrap_or_default();
    assert!(
        text.contains("/nonexistent/node") && text.contains("Node.js 22.19"),
        "the error should name the Node it needs: {text}"
    );
    let commands = pi.command("c1", "get_commands", json!({}));
    assert_eq!(commands["data"]["commands"][0]["name"], "hello");
    let response = pi.command("p1", "prompt", json!({"message": "hi"}));
    assert_eq!(response, prompt_response("p1", "started"));
    pi.wait_for_event("agent_end");
    assert_eq!(errors(&pi).len(), 1, "{:?}", errors(&pi));
    fake.finish();
}

#[test]
fn a_file_without_the_executable_bit_is_a_load_error() {
    let fake = FakeProvider::start(vec![]);
    let setup = Setup::anthropic(&fake)
        .file(
            "plain.sh",
            "#!/bin/sh\necho '{\"type\":\"register\",\"protocol\":1}'\n",
        )
        .arg("-e")
        .arg("plain.sh");
    let mut pi = Pi::spawn(&setup);
    let error = pi.find(|r| r["type"] == "extension_error");
    assert_eq!(
        error["extensionPath"],
        pi.cwd().join("plain.sh").to_string_lossy().as_ref()
    );
    assert_eq!(error["event"], "load");
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("executable")),
        "{error}"
    );
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["success"], true);
    fake.finish();
}

/// A workspace with `recorder.py` in `<cwd>/.pi/extensions/`, `hello.sh` in
/// `<agentDir>/extensions/`, and files that are not extensions next to them.
fn discovery_workspace() -> Workspace {
    let workspace = Workspace::new();
    let fixture = |name: &str| std::fs::read_to_string(extension(name)).expect("fixture");
    write_executable(
        &workspace.cwd().join(".pi/extensions/recorder.py"),
        &fixture("recorder.py"),
    );
    write_executable(
        &workspace.agent_dir().join("extensions/hello.sh"),
        &fixture("hello.sh"),
    );
    std::fs::write(
        workspace.agent_dir().join("extensions/README.md"),
        "not an extension",
    )
    .expect("readme");
    write_executable(
        &workspace.agent_dir().join("extensions/.hidden.sh"),
        "#!/bin/sh\nexit 1\n",
    );
    workspace
}

#[test]
fn extensions_are_discovered_in_the_project_and_agent_dirs() {
    let fake = FakeProvider::start(vec![]);
    let workspace = discovery_workspace();
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake).trust_project());
    let response = pi.command("c1", "get_commands", json!({}));
    // Project extensions load before the user's.
    assert_eq!(
        command_names(&response),
        [
            "follow", "later", "fail", "quit", "note", "ask", "hello", "mcp"
        ],
        "{response}"
    );
    let commands = response["data"]["commands"].as_array().expect("commands");
    assert_eq!(commands[0]["sourceInfo"]["scope"], "project");
    assert_eq!(commands[6]["sourceInfo"]["scope"], "user");
    assert!(errors(&pi).is_empty(), "{:?}", errors(&pi));
    fake.finish();
}

#[test]
fn no_extensions_turns_discovery_off_but_keeps_cli_paths() {
    let fake = FakeProvider::start(vec![]);
    let workspace = discovery_workspace();
    let setup = with_extensions(Setup::anthropic(&fake).arg("--no-extensions"), &["full.py"]);
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let response = pi.command("c1", "get_commands", json!({}));
    assert_eq!(
        command_names(&response),
        ["actions", "ui", "bye", "mcp"],
        "{response}"
    );
    // The discovered recorder never ran.
    pi.close_and_wait();
    assert!(!workspace.cwd().join("recorder.pid").exists());
    fake.finish();
}

// ---- commands ---------------------------------------------------------------------------------

#[test]
fn an_extension_command_runs_and_the_prompt_is_handled() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["hello.sh"]));
    let response = pi.command("p1", "prompt", json!({"message": "/hello Ada"}));
    assert_eq!(response, prompt_response("p1", "handled"));
    let notice = pi.find(|r| {
        r["type"] == "extension_ui_request"
            && r["method"] == "notify"
            && r["message"] == "Hello, Ada!"
    });
    assert_eq!(notice["notifyType"], "info");
    assert!(notice["id"].as_str().is_some_and(|id| !id.is_empty()));
    // The command's notice comes before its prompt is answered.
    assert!(pi.index_of(&notice) < pi.index_of(&response));
    assert!(
        pi.drain_for(Duration::from_millis(200))
            .iter()
            .all(|r| r["type"] != "agent_start")
    );
    fake.finish(); // no request reached the model
}

#[test]
fn a_command_sending_a_user_message_starts_a_run() {
    let fake = FakeProvider::start(one_text_reply("Why did the crab cross?"));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["recorder.py"]));
    let response = pi.command("p1", "prompt", json!({"message": "/follow Tell me a joke"}));
    assert_eq!(response, prompt_response("p1", "handled"));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    let last = requests[0].messages().last().expect("a message").clone();
    assert_eq!(last["role"], "user");
    assert_eq!(message_text(&last), "Tell me a joke");
    fake.finish();
}

/// pi's `sendUserMessage` is a prompt of its own, not an RPC command: the client sees no
/// `response` for it (only its own prompt's `handled`).
#[test]
fn an_extension_user_message_produces_no_response_record() {
    let fake = FakeProvider::start(one_text_reply("Ok."));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["recorder.py"]));
    pi.command("p1", "prompt", json!({"message": "/follow Hello"}));
    pi.wait_for_event("agent_end");
    pi.drain_for(Duration::from_millis(100));
    let responses: Vec<&Value> = pi
        .records()
        .iter()
        .filter(|r| r["type"] == "response")
        .collect();
    assert_eq!(
        responses,
        [&prompt_response("p1", "handled")],
        "only the client's prompt is answered"
    );
    fake.finish();
}

/// `deliverAs` only matters while a run is going: when idle, a follow-up message starts a run
/// (pi's sendUserMessage → prompt, whose streamingBehavior is ignored when not streaming).
#[test]
fn a_follow_up_user_message_while_idle_starts_a_run() {
    let fake = FakeProvider::start(one_text_reply("Later is now."));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["recorder.py"]));
    let response = pi.command("p1", "prompt", json!({"message": "/later Do it later"}));
    assert_eq!(response, prompt_response("p1", "handled"));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    assert_eq!(
        message_text(requests[0].messages().last().expect("a message")),
        "Do it later"
    );
    fake.finish();
}

/// An extension's user message passes the `input` hook with `source: "extension"` (the client's
/// prompts say `"rpc"`; PROTOCOL.md, hook table).
#[test]
fn an_extension_user_message_reaches_the_input_hook_as_an_extension_input() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["One."])),
        Reply::sse(sse::anthropic_text(&["Two."])),
    ]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["recorder.py"]));
    pi.command("p1", "prompt", json!({"message": "typed by the client"}));
    pi.wait_for_event("agent_end");
    pi.command(
        "p2",
        "prompt",
        json!({"message": "/follow sent by the extension"}),
    );
    pi.wait_for_event("agent_end");
    let inputs = wait_for_file(&pi.cwd().join("recorder-inputs.log"), pi.timeout(), |t| {
        t.lines().count() >= 2
    });
    assert_eq!(
        inputs.lines().collect::<Vec<_>>(),
        ["rpc typed by the client", "extension sent by the extension"]
    );
    fake.finish();
}

/// As in pi (`sendUserMessage` → `prompt` with `expandPromptTemplates: false`), an extension's
/// user message is not expanded as a prompt template or skill.
#[test]
fn an_extension_user_message_is_not_expanded() {
    let fake = FakeProvider::start(one_text_reply("Literal."));
    let setup = with_extensions(Setup::anthropic(&fake).trust_project(), &["recorder.py"])
        .file(".pi/prompts/review.md", "Review the code carefully");
    let mut pi = Pi::spawn(&setup);
    pi.command("p1", "prompt", json!({"message": "/follow /review"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    assert_eq!(
        message_text(requests[0].messages().last().expect("message")),
        "/review"
    );
    fake.finish();
}

/// full.py's /actions sends every action; the session name is the one observable at once (the
/// action arrives before the command's `command_done`, so before the prompt is answered).
#[test]
fn a_command_can_name_the_session() {
    // /actions also sends a user message that may start a run: one reply is there for it, and
    // `finish()` is not called because whether it is used depends on delivery details tested
    // elsewhere.
    let fake = FakeProvider::start(one_text_reply("Hello back."));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    let response = pi.command("p1", "prompt", json!({"message": "/actions now"}));
    assert_eq!(response, prompt_response("p1", "handled"));
    // The command's actions reach pi-rs after the prompt is acknowledged (as in pi, the prompt
    // response does not wait for the command): wait for the announcement, then ask.
    let changed = pi.find(|r| r["type"] == "session_info_changed");
    assert_eq!(changed["name"], "named by full.py", "{changed}");
    let state = pi.command("g1", "get_state", json!({}));
    assert_eq!(state["data"]["sessionName"], "named by full.py", "{state}");
    // The custom entry it appended is announced with the entry itself (pi 1.x).
    let appended = pi.find(|r| r["type"] == "entry_appended");
    let entry = &appended["entry"];
    assert_eq!(entry["type"], "custom", "{appended}");
    assert_eq!(entry["customType"], "full-py-state");
    assert_eq!(entry["data"], json!({"count": 1}));
    assert!(entry["id"].is_string(), "{appended}");
    // The command's user message was handled before these records (the extension sent it
    // first): if it started a run, let that run end, so no request is cut off mid-body when the
    // test ends and pi-rs is killed.
    let state = pi.command("g2", "get_state", json!({}));
    if state["data"]["isStreaming"] == true {
        pi.wait_for_event("agent_end");
    }
}

#[test]
fn a_failing_command_is_reported_as_a_command_error() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["recorder.py"]));
    let response = pi.command("p1", "prompt", json!({"message": "/fail"}));
    assert_eq!(response, prompt_response("p1", "handled"));
    let error = pi.find(|r| r["type"] == "extension_error");
    assert_eq!(
        error,
        json!({"type": "extension_error", "extensionPath": "command:fail", "event": "command",
               "error": "recorder: /fail always fails"})
    );
    // The extension keeps running: its commands are still offered.
    let commands = pi.command("c1", "get_commands", json!({}));
    assert_eq!(commands["data"]["commands"][2]["name"], "fail");
    fake.finish();
}

#[test]
fn extension_commands_cannot_be_queued() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["hello.sh"]));
    let expected = "Extension command \"/hello\" cannot be queued. Use prompt() or execute the command when not streaming.";
    for (id, ty) in [("s1", "steer"), ("f1", "follow_up")] {
        let response = pi.command(id, ty, json!({"message": "/hello Ada"}));
        assert_eq!(
            response,
            json!({"id": id, "type": "response", "command": ty, "success": false,
                   "error": expected})
        );
    }
    let state = pi.command("g1", "get_state", json!({}));
    assert_eq!(state["data"]["pendingMessageCount"], 0);
    fake.finish();
}

/// A command runs at once even while the agent streams (seed: extension commands in `prompt`).
#[test]
fn an_extension_command_runs_during_a_run() {
    let body = sse::anthropic_text(&["Part one. ", "Part two."]);
    let fake = FakeProvider::start(vec![Reply::hold(&body, "Part two.")]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["hello.sh"]));
    pi.command("p1", "prompt", json!({"message": "Go"}));
    pi.wait_for_event("message_update");
    let response = pi.command("p2", "prompt", json!({"message": "/hello Bo"}));
    assert_eq!(response, prompt_response("p2", "handled"));
    pi.find(|r| r["type"] == "extension_ui_request" && r["message"] == "Hello, Bo!");
    let agent_ended = pi.records().iter().any(|r| r["type"] == "agent_end");
    assert!(
        !agent_ended,
        "the command ran while the run was still streaming"
    );
    fake.release_stalls();
    pi.wait_for_event("agent_end");
    fake.finish();
}

// ---- hooks ------------------------------------------------------------------------------------

/// A bash call of the model, then a text answer.
fn bash_then_text(command: &str) -> Vec<Reply> {
    vec![
        Reply::sse(sse::anthropic_bash("toolu_1", command)),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]
}

/// Runs one prompt against full.py whose model reply is a bash call; returns the
/// `tool_execution_end` record and the second request.
fn run_bash_through_full(command: &str) -> (Value, crate::fake_provider::RecordedRequest) {
    let fake = FakeProvider::start(bash_then_text(command));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    pi.command("p1", "prompt", json!({"message": "Run it"}));
    let end = pi.wait_for_event("tool_execution_end");
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert!(errors(&pi).is_empty(), "{:?}", errors(&pi));
    fake.finish();
    (end, requests[1].clone())
}

#[test]
fn a_tool_call_hook_blocks_the_call_with_its_reason() {
    let (end, request) = run_bash_through_full("rm -rf build");
    assert_eq!(end["isError"], true, "{end}");
    assert_eq!(result_text(&end["result"]), "full.py blocks rm -rf");
    let block = tool_result_block(&request, "toolu_1");
    assert_eq!(tool_result_block_text(&block), "full.py blocks rm -rf");
    assert_eq!(block["is_error"], true, "{block}");
}

#[test]
fn a_tool_call_hook_rewrites_the_arguments() {
    let (end, request) = run_bash_through_full("echo REWRITE_ME");
    assert_eq!(end["isError"], false, "{end}");
    let text = result_text(&end["result"]);
    assert_eq!(
        text.trim(),
        "rewritten",
        "what ran is the rewritten command"
    );
    let block = tool_result_block(&request, "toolu_1");
    assert_eq!(tool_result_block_text(&block).trim(), "rewritten");
}

#[test]
fn a_tool_result_hook_patches_the_result() {
    let (end, request) = run_bash_through_full("echo SECRET");
    assert_eq!(
        end["result"],
        json!({"content": [{"type": "text", "text": "[redacted]"}], "details": {"redacted": true}})
    );
    assert_eq!(end["isError"], false);
    let block = tool_result_block(&request, "toolu_1");
    assert_eq!(tool_result_block_text(&block), "[redacted]");
}

#[test]
fn an_input_hook_transforms_the_prompt() {
    let fake = FakeProvider::start(one_text_reply("4."));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    let response = pi.command("p1", "prompt", json!({"message": "?quick what is 2+2"}));
    assert_eq!(response, prompt_response("p1", "started"));
    let user = pi.find(|r| r["type"] == "message_start" && r["message"]["role"] == "user");
    assert_eq!(
        message_text(&user["message"]),
        "Answer briefly: what is 2+2"
    );
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    assert_eq!(
        message_text(requests[0].messages().last().expect("message")),
        "Answer briefly: what is 2+2"
    );
    fake.finish();
}

#[test]
fn an_input_hook_can_handle_the_prompt() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    let response = pi.command("p1", "prompt", json!({"message": "ping"}));
    assert_eq!(response, prompt_response("p1", "handled"));
    pi.find(|r| r["type"] == "extension_ui_request" && r["message"] == "pong");
    let later = pi.drain_for(Duration::from_millis(200));
    assert!(
        pi.records()
            .iter()
            .chain(&later)
            .all(|r| r["type"] != "agent_start"),
        "no run starts"
    );
    fake.finish(); // and nothing reached the model
}

#[test]
fn before_agent_start_injects_a_message_and_replaces_the_system_prompt_for_one_prompt() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["Brief."])),
        Reply::sse(sse::anthropic_text(&["Normal."])),
    ]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    let response = pi.command("p1", "prompt", json!({"message": "please inject"}));
    assert_eq!(response, prompt_response("p1", "started"));
    pi.wait_for_event("agent_end");
    pi.command("p2", "prompt", json!({"message": "plain prompt"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());

    let messages = requests[0].messages();
    let n = messages.len();
    assert!(n >= 2, "{messages:?}");
    assert_eq!(message_text(&messages[n - 2]), "please inject");
    assert_eq!(messages[n - 1]["role"], "user");
    assert_eq!(message_text(&messages[n - 1]), "Injected context");

    let replaced = system_prompt(&requests[0]);
    let normal = system_prompt(&requests[1]);
    assert!(replaced.ends_with("\nBe brief."), "{replaced}");
    assert_eq!(replaced, format!("{normal}\nBe brief."));

    // The injected message is part of the conversation, after the prompt.
    let custom = pi.find(|r| r["type"] == "message_end" && r["message"]["role"] == "custom");
    assert_eq!(custom["message"]["customType"], "full-py");
    fake.finish();
}

/// A prompt `before_agent_start` forces stands for the transcript's only system message, which
/// declares the current tools (pi 1.6.0's projection): where a model takes every tool in the
/// input (`supportsAdditionalTools`), they lead it, before the forced prompt.
#[test]
fn a_forced_prompt_declares_the_current_tools_where_tools_go_in_the_input() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
    let models = json!({"providers": {"fr": {"baseUrl": "__BASE_URL__/v1",
        "api": "openai-responses", "apiKey": "fr-key-123456",
        "models": [{"id": "fr-model", "input": ["text"],
            "compat": {"supportsMidConvoSystemMessages": true,
                "supportsAdditionalTools": true}}]}}});
    let setup = Setup::new(&fake, "fr", "fr-model").models_json(&models.to_string());
    let mut pi = Pi::spawn(&with_extensions(setup, &["full.py"]));
    pi.command("p1", "prompt", json!({"message": "please inject"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    let body = &requests[0].body;
    assert!(body.get("tools").is_none(), "{body}");
    let input = body["input"].as_array().unwrap();
    assert_eq!(input[0]["type"], "additional_tools", "{body}");
    let declared = input[0]["tools"].as_array().unwrap();
    assert!(declared.iter().any(|t| t["name"] == "read"), "{body}");
    let prompt = input[1]["content"].as_str().unwrap_or_default();
    assert!(prompt.ends_with("\nBe brief."), "{body}");
    fake.finish();
}

// ---- extension tools --------------------------------------------------------------------------

#[test]
fn the_model_calls_an_extension_tool() {
    let input = json!({"text": "one two three"}).to_string();
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("toolu_wc", "word_count", &[&input])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Three words."])),
    ]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    pi.command("p1", "prompt", json!({"message": "Count: one two three"}));
    let start = pi.wait_for_event("tool_execution_start");
    assert_eq!(start["toolName"], "word_count");
    let update = pi.wait_for_event("tool_execution_update");
    assert_eq!(update["toolCallId"], "toolu_wc");
    assert_eq!(
        update["partialResult"],
        json!({"content": [{"type": "text", "text": "counting..."}]})
    );
    let mut end = pi.wait_for_event("tool_execution_end");
    // How long the tool ran (pi 1.1.0).
    let duration = end.as_object_mut().unwrap().remove("durationMs");
    assert!(duration.is_some_and(|d| d.is_u64()), "{end}");
    assert_eq!(
        end,
        json!({"type": "tool_execution_end", "toolCallId": "toolu_wc", "toolName": "word_count",
               "result": {"content": [{"type": "text", "text": "3 words"}], "details": {"words": 3}},
               "isError": false})
    );
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    let tool = requests[0].body["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == "word_count"))
        .cloned()
        .unwrap_or_else(|| panic!("word_count not offered: {:?}", requests[0].tool_names()));
    assert_eq!(tool["description"], "Counts the words of a text");
    assert_eq!(tool["input_schema"]["properties"]["text"]["type"], "string");
    let block = tool_result_block(&requests[1], "toolu_wc");
    assert_eq!(tool_result_block_text(&block), "3 words");
    fake.finish();
}

// ---- UI ---------------------------------------------------------------------------------------

#[test]
fn dialogs_are_forwarded_and_answers_reach_the_extension() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "/ui"}));

    let select = next_ui_request(&mut pi, "select");
    let select_id = select["id"].as_str().expect("id").to_string();
    assert_ne!(
        select_id, "q1",
        "the client sees a fresh id, not the extension's"
    );
    assert_eq!(select["title"], "Pick one");
    assert_eq!(select["options"], json!(["red", "green"]));
    assert_eq!(select["timeout"], 5000);
    pi.send(json!({"type": "extension_ui_response", "id": select_id, "value": "green"}));

    let input = next_ui_request(&mut pi, "input");
    assert_eq!(input["title"], "Your name?");
    assert_eq!(input["placeholder"], "name");
    assert_ne!(input["id"], select["id"]);
    pi.send(json!({"type": "extension_ui_response", "id": input["id"], "cancelled": true}));

    let editor = next_ui_request(&mut pi, "editor");
    assert_eq!(editor["prefill"], "line 1\nline 2");
    pi.send(json!({"type": "extension_ui_response", "id": editor["id"], "value": "edited"}));

    let notify = next_ui_request(&mut pi, "notify");
    assert_eq!(notify["message"], "picked green, name None, edited edited");
    let status = next_ui_request(&mut pi, "setStatus");
    assert_eq!(status["statusKey"], "full");
    assert_eq!(status["statusText"], "ui done");
    let widget = next_ui_request(&mut pi, "setWidget");
    assert_eq!(widget["widgetKey"], "full");
    assert_eq!(widget["widgetLines"], json!(["one", "two"]));
    let title = next_ui_request(&mut pi, "setTitle");
    assert_eq!(title["title"], "pi - full.py");
    let editor_text = next_ui_request(&mut pi, "set_editor_text");
    assert_eq!(editor_text["text"], "prefilled");
    assert_eq!(pi.response_for("p1"), prompt_response("p1", "handled"));

    let ids: std::collections::HashSet<String> = pi
        .records()
        .iter()
        .filter(|r| r["type"] == "extension_ui_request")
        .filter_map(|r| r["id"].as_str().map(str::to_string))
        .collect();
    let count = pi
        .records()
        .iter()
        .filter(|r| r["type"] == "extension_ui_request")
        .count();
    assert_eq!(ids.len(), count, "every request has its own id");
    fake.finish();
}

#[test]
fn a_confirm_answer_decides_a_tool_call_hook() {
    let fake = FakeProvider::start(bash_then_text("echo CONFIRM"));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    pi.command("p1", "prompt", json!({"message": "Run it"}));
    let confirm = next_ui_request(&mut pi, "confirm");
    assert_eq!(confirm["title"], "Run this command?");
    assert_eq!(confirm["message"], "echo CONFIRM");
    assert_eq!(confirm["timeout"], 5000);
    pi.send(json!({"type": "extension_ui_response", "id": confirm["id"], "confirmed": true}));
    let end = pi.wait_for_event("tool_execution_end");
    assert_eq!(end["isError"], false, "{end}");
    assert_eq!(result_text(&end["result"]).trim(), "CONFIRM");
    pi.wait_for_event("agent_end");
    fake.finish();
}

#[test]
fn an_unanswered_dialog_with_a_timeout_resolves_to_the_default() {
    let fake = FakeProvider::start(bash_then_text("echo CONFIRM FAST"));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    pi.command("p1", "prompt", json!({"message": "Run it"}));
    let confirm = next_ui_request(&mut pi, "confirm");
    assert_eq!(confirm["timeout"], 200);
    // No answer: after 200 ms the extension gets confirmed:false and blocks the call.
    let end = pi.wait_for_event("tool_execution_end");
    assert_eq!(end["isError"], true, "{end}");
    assert_eq!(result_text(&end["result"]), "not confirmed");
    pi.wait_for_event("agent_end");
    // A late answer changes nothing.
    pi.send(json!({"type": "extension_ui_response", "id": confirm["id"], "confirmed": true}));
    assert_eq!(pi.command("g1", "get_state", json!({}))["success"], true);
    fake.finish();
}

#[test]
fn a_cancelled_confirm_reaches_the_extension_as_not_confirmed() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["recorder.py"]));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "/ask"}));
    let confirm = next_ui_request(&mut pi, "confirm");
    assert!(confirm.get("timeout").is_none(), "{confirm}");
    pi.send(json!({"type": "extension_ui_response", "id": confirm["id"], "cancelled": true}));
    let notify = next_ui_request(&mut pi, "notify");
    assert_eq!(notify["message"], "confirmed=False cancelled=True");
    assert_eq!(pi.response_for("p1"), prompt_response("p1", "handled"));
    fake.finish();
}

#[test]
fn a_ui_response_with_an_unknown_id_is_ignored() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["recorder.py"]));
    pi.send(json!({"type": "extension_ui_response", "id": "no-such-dialog", "value": "x"}));
    let quiet = pi.drain_for(Duration::from_millis(300));
    assert!(
        quiet.iter().all(|r| r["type"] != "response"),
        "no response record: {quiet:?}"
    );
    let state = pi.command("g1", "get_state", json!({}));
    assert_eq!(state["success"], true);
    // The extension still works.
    let response = pi.command("p1", "prompt", json!({"message": "/fail"}));
    assert_eq!(response, prompt_response("p1", "handled"));
    fake.finish();
}

// ---- failures ---------------------------------------------------------------------------------

#[test]
fn a_crashing_extension_is_reported_and_the_agent_goes_on() {
    let fake = FakeProvider::start(bash_then_text("echo hi"));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["crash.sh"]));
    let pid = announced_pids(&mut pi, 1)[0][0];
    pi.command("p1", "prompt", json!({"message": "Run it"}));
    let end = pi.wait_for_event("tool_execution_end");
    pi.wait_for_event("agent_end");
    let error = pi.find(|r| r["type"] == "extension_error");
    assert_eq!(error["extensionPath"], extension("crash.sh"));
    assert!(
        ["exit", "tool_call"].contains(&error["event"].as_str().unwrap_or_default()),
        "{error}"
    );
    // tool_call fails safe: the call is blocked.
    assert_eq!(end["isError"], true, "{end}");
    assert!(
        result_text(&end["result"]).starts_with("Extension failed, blocking execution: "),
        "{end}"
    );
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert!(requests[0].tool_names().contains(&"crash_tool".to_string()));
    assert!(
        !requests[1].tool_names().contains(&"crash_tool".to_string()),
        "a dead extension's tools are no longer offered"
    );
    assert!(wait_until_gone(pid, Duration::from_secs(5)));
    fake.finish();
}

#[test]
fn an_extension_printing_junk_is_stopped_and_the_run_completes() {
    let fake = FakeProvider::start(one_text_reply("Fine."));
    let mut pi = Pi::spawn(&with_extensions(
        Setup::anthropic(&fake),
        &["junk_event.sh"],
    ));
    let pid = announced_pids(&mut pi, 1)[0][0];
    let response = pi.command("p1", "prompt", json!({"message": "hi"}));
    assert_eq!(response, prompt_response("p1", "started"));
    let error = pi.find(|r| r["type"] == "extension_error");
    assert_eq!(error["extensionPath"], extension("junk_event.sh"));
    assert_eq!(error["event"], "protocol");
    pi.wait_for_event("agent_end");
    assert!(wait_until_gone(pid, Duration::from_secs(5)));
    fake.finish();
}

// ---- events and shutdown ----------------------------------------------------------------------

#[test]
fn subscribed_events_reach_the_extension() {
    let fake = FakeProvider::start(one_text_reply("Hi."));
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["recorder.py"]));
    pi.command("p1", "prompt", json!({"message": "hi"}));
    pi.wait_for_event("agent_end");
    let log = pi.cwd().join("recorder-events.log");
    let text = wait_for_file(&log, pi.timeout(), |t| t.contains("agent_end"));
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["session_start", "agent_start", "agent_end"]
    );
    let status = pi.close_and_wait();
    assert!(status.success());
    let text = wait_for_file(&log, pi.timeout(), |t| t.contains("eof"));
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "session_start",
            "agent_start",
            "agent_end",
            "session_shutdown",
            "eof"
        ]
    );
    fake.finish();
}

#[test]
fn a_shutdown_action_while_idle_ends_pi() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["recorder.py"]));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "/quit"}));
    let status = pi.wait_for_exit();
    assert_eq!(status.code(), Some(0));
    pi.drain_until_stdout_closes();
    // "pi-rs shuts down once the current command has been handled".
    assert!(
        pi.records().contains(&prompt_response("p1", "handled")),
        "the /quit prompt is answered before the exit"
    );
    fake.finish();
}

#[test]
fn stdin_eof_ends_every_extension_and_its_children() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(
        Setup::anthropic(&fake),
        &["hello.sh", "hang.sh", "recorder.py"],
    );
    let mut pi = Pi::spawn(&setup);
    let announced = announced_pids(&mut pi, 2);
    let mut pids: Vec<i32> = announced.into_iter().flatten().collect();
    let recorder = wait_for_file(&pi.cwd().join("recorder.pid"), pi.timeout(), |t| {
        t.ends_with('\n')
    });
    pids.push(recorder.trim().parse().expect("recorder pid"));
    assert_eq!(
        pids.len(),
        4,
        "hello, hang and its sleep, recorder: {pids:?}"
    );
    assert!(pids.iter().all(|p| process_alive(*p)));
    let status = pi.close_and_wait();
    assert!(status.success(), "{status:?}");
    for pid in pids {
        assert!(
            wait_until_gone(pid, Duration::from_secs(2)),
            "process {pid} outlived pi"
        );
    }
    fake.finish();
}

/// `steer` and `follow_up` go through the `input` hook like a prompt (pi 0.86.0): a transform
/// is what gets queued, a handled input is answered `handled` and never queued.
#[test]
fn steer_and_follow_up_go_through_the_input_hook() {
    let held = sse::AnthropicStream::new().text(&["Working"]).unfinished();
    let fake = FakeProvider::start(vec![Reply::stall_after(held)]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["full.py"]));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Work"}));
    let deadline = pi.deadline();
    pi.recv_until(|r| r["type"] == "message_update", deadline);

    let steer = pi.command("s1", "steer", json!({"message": "?quick stop"}));
    assert_eq!(steer["data"], json!({"disposition": "queued"}), "{steer}");
    let queue = pi.find(|r| r["type"] == "queue_update");
    assert_eq!(queue["steering"], json!(["Answer briefly: stop"]));

    let follow = pi.command("f1", "follow_up", json!({"message": "ping"}));
    assert_eq!(
        follow["data"],
        json!({"disposition": "handled"}),
        "{follow}"
    );
    pi.find(|r| r["type"] == "extension_ui_request" && r["message"] == "pong");
    let queued = pi.command(
        "q1",
        "prompt",
        json!({"message": "ping", "streamingBehavior": "followUp"}),
    );
    assert_eq!(
        queued["data"],
        json!({"disposition": "handled"}),
        "{queued}"
    );
    let updates: Vec<Value> = pi
        .records()
        .iter()
        .filter(|r| r["type"] == "queue_update")
        .cloned()
        .collect();
    assert_eq!(
        updates.len(),
        1,
        "handled input is never queued: {updates:?}"
    );

    pi.command("a1", "abort", json!({}));
    fake.release_stalls();
}
