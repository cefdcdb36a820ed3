//! `pi --mode acp` through the binary. The JSON-RPC transport is checked with raw lines (errors
//! and their ids, the process going on); everything else by an editor's side written with the
//! official SDK (`tests/clients/acp_client.mjs` on `@agentclientprotocol/sdk`, installed by
//! `tests/install_acp_sdk.sh`, run by the reference pi's Node 22), which also checks every line
//! pi-rs writes against the SDK's schemas. Against the fake provider on 127.0.0.1.
//!
//! Under `CI=true` a missing SDK or Node fails these tests; elsewhere they say why they skip.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::mcp::everything_server;
use crate::reference_clients::{missing, prepare, reference, repo_path, run_in};
use crate::sse::{AnthropicStream, anthropic_bash, anthropic_text};
use crate::support::{Workspace, binary, isolate_env};

const MODEL_ARGS: [&str; 4] = ["--provider", "fake-anthropic", "--model", "fake-claude"];

/// The SDK's folder and a Node that runs it, or None (a failure under CI=true).
fn sdk() -> Option<(PathBuf, PathBuf)> {
    let dir = repo_path("target/acp-sdk/node_modules/@agentclientprotocol/sdk");
    if !dir.join("dist/v1/stable/acp.js").exists() {
        missing(&format!(
            "the ACP SDK is not installed at {}: run tests/install_acp_sdk.sh",
            dir.display()
        ));
        return None;
    }
    let reference = reference("1.6.0")?;
    Some((dir, reference.node))
}

/// Runs one scenario of acp_client.mjs; returns what it printed (it must exit 0: every line
/// pi-rs wrote passed the SDK's schemas and the scenario finished).
fn scenario(
    name: &str,
    workspace: &Workspace,
    fake: &FakeProvider,
    settings: Value,
    env: &[(&str, String)],
) -> Option<Value> {
    let (sdk, node) = sdk()?;
    prepare(workspace, fake, settings);
    if let Some((_, models)) = env.iter().find(|(name, _)| *name == "MODELS_JSON") {
        std::fs::write(workspace.agent_dir().join("models.json"), models).unwrap();
    }
    let script = repo_path("tests/clients/acp_client.mjs");
    let mut vars = vec![
        ("ACP_SDK", sdk.to_string_lossy().into_owned()),
        ("PI_RS_BIN", binary().to_string_lossy().into_owned()),
        ("PI_ACP_SCENARIO", name.to_string()),
        ("PI_ACP_ARGS", json!(MODEL_ARGS).to_string()),
    ];
    vars.extend(env.iter().cloned());
    let (ok, stdout, stderr) = run_in(
        workspace,
        &node,
        &[&script.to_string_lossy()],
        &vars,
        Duration::from_secs(90),
    );
    let out: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!("no result from the client\nstdout:\n{stdout}\nstderr:\n{stderr}")
        });
    assert!(
        ok,
        "the ACP client failed: {}\nstderr:\n{stderr}",
        serde_json::to_string_pretty(&out["problems"]).unwrap()
    );
    assert_eq!(out["exitCode"], 0, "pi-rs's exit code; stderr:\n{stderr}");
    Some(out)
}

fn kinds(updates: &Value) -> Vec<String> {
    updates
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| u["sessionUpdate"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Raw JSON-RPC: every standard error with the right id, and the connection goes on.
#[test]
fn transport_errors_get_their_codes_and_ids_and_the_process_goes_on() {
    let workspace = Workspace::new();
    let mut command = Command::new(binary());
    command
        .args(["--mode", "acp"])
        .current_dir(workspace.cwd())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    isolate_env(&mut command, &workspace.agent_dir(), workspace.root());
    let mut child = command.spawn().expect("start pi --mode acp");
    let mut stdin = child.stdin.take().unwrap();
    let cwd = workspace.cwd().to_string_lossy().into_owned();
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":1}}"#.into(),
        "{not json".into(),
        "[]".into(),
        r#"{"jsonrpc":"1.0","id":"old","method":"initialize"}"#.into(),
        r#"{"jsonrpc":"2.0","id":"m","method":"no/such"}"#.into(),
        r#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}"#.into(),
        r#"{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"x","prompt":[]}}"#.into(),
        r#"{"jsonrpc":"2.0","method":"no/such/notification"}"#.into(),
        r#"{"jsonrpc":"2.0","id":99,"result":{}}"#.into(),
        r#"{"jsonrpc":"2.0","id":5,"method":"session/new","params":{"cwd":"relative"}}"#.into(),
        format!(r#"{{"jsonrpc":"2.0","id":6,"method":"session/list","params":{{"cwd":"{cwd}"}}}}"#),
    ];
    for line in &lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let replies: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).expect("a JSON line"))
        .collect();
    let status = child.wait().unwrap();
    assert!(status.success());
    let codes: Vec<(Value, Value)> = replies
        .iter()
        .map(|r| (r["id"].clone(), r["error"]["code"].clone()))
        .collect();
    assert_eq!(
        codes,
        vec![
            (json!(1), json!(-32600)), // before initialize
            (json!(2), Value::Null),
            (Value::Null, json!(-32700)),
            (Value::Null, json!(-32600)),
            (json!("old"), json!(-32600)),
            (json!("m"), json!(-32601)),
            (json!(3), json!(-32602)),
            (json!(4), json!(-32002)),
            (json!(5), json!(-32602)),
            (json!(6), Value::Null),
        ],
        "{replies:#?}"
    );
    assert_eq!(replies[1]["result"]["protocolVersion"], 1);
    assert_eq!(replies[9]["result"], json!({"sessions": []}));
    for reply in &replies {
        assert_eq!(reply["jsonrpc"], "2.0");
    }
}

/// initialize, a session, a turn in which the model calls bash, a prompt with an image and
/// resources, the thinking level, a provider error shown as the prompt's error.
#[test]
fn a_turn_with_a_tool_call_streams_updates_and_maps_stop_reasons() {
    let fake = FakeProvider::start(vec![
        Reply::sse(anthropic_bash("toolu_1", "echo from-bash")),
        Reply::sse(anthropic_text(&["Ran ", "it."])),
        Reply::sse(anthropic_text(&["Seen."])),
        Reply::status(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is broken"}}"#,
            &[],
        ),
        Reply::sse(anthropic_text(&["Fixed."])),
    ]);
    let workspace = Workspace::new();
    let prompts = workspace.agent_dir().join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    std::fs::write(
        prompts.join("fix.md"),
        "---\ndescription: Fix something\n---\nPlease fix $ARGUMENTS",
    )
    .unwrap();
    let Some(out) = scenario("turn", &workspace, &fake, json!({}), &[]) else {
        return;
    };
    let caps = &out["init"]["agentCapabilities"];
    assert_eq!(out["init"]["protocolVersion"], 1);
    assert_eq!(caps["loadSession"], true);
    assert_eq!(caps["promptCapabilities"]["image"], true);
    assert_eq!(caps["promptCapabilities"]["embeddedContext"], true);
    assert_eq!(out["init"]["authMethods"][0]["id"], "pi-login");
    let options = out["session"]["configOptions"].as_array().unwrap();
    assert_eq!(options[0]["id"], "model");
    assert_eq!(options[0]["currentValue"], "fake-anthropic/fake-claude");
    assert_eq!(options[1]["id"], "thought_level");

    assert_eq!(out["first"]["stopReason"], "end_turn");
    assert_eq!(out["firstText"], "Ran it.");
    let updates = &out["firstUpdates"];
    let kinds = kinds(updates);
    let first_call = kinds.iter().position(|k| k == "tool_call").unwrap();
    let first_text = kinds
        .iter()
        .position(|k| k == "agent_message_chunk")
        .unwrap();
    assert!(first_call < first_text, "{kinds:?}");
    let call = &updates[first_call];
    assert_eq!(call["toolCallId"], "toolu_1");
    assert_eq!(call["kind"], "execute");
    let done = updates
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["status"] == "completed")
        .expect("a completed tool call");
    assert_eq!(done["toolCallId"], "toolu_1");
    assert!(done["content"].to_string().contains("from-bash"), "{done}");
    let with_input = updates
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["rawInput"]["command"] == "echo from-bash");
    assert!(with_input.is_some(), "{updates}");

    assert_eq!(out["second"]["stopReason"], "end_turn");
    assert_eq!(out["secondText"], "Seen.");
    let requests = fake.requests();
    let prompt = requests[2].messages().last().cloned().unwrap();
    let content = prompt["content"].to_string();
    assert!(content.contains("look at these"), "{content}");
    assert!(
        content.contains("[linked.txt](file:///tmp/linked.txt)"),
        "{content}"
    );
    assert!(
        content.contains("<file name=\\\"/tmp/embedded.txt\\\">\\nembedded body"),
        "{content}"
    );
    assert!(content.contains("\"image\""), "{content}");

    let levels = out["setLevel"]["configOptions"][1].clone();
    assert_eq!(levels["currentValue"], "high");
    assert_eq!(out["badLevel"]["code"], -32602, "{}", out["badLevel"]);
    assert_eq!(out["providerError"]["code"], -32603);
    assert!(
        out["providerError"]["message"]
            .as_str()
            .unwrap()
            .contains("prompt is broken"),
        "{}",
        out["providerError"]
    );
    assert_eq!(out["unknownSession"]["code"], -32002);
    // The template is offered and expands like over RPC.
    let all = out["allUpdates"].as_array().unwrap();
    let commands = all
        .iter()
        .find(|u| u["sessionUpdate"] == "available_commands_update")
        .expect("available_commands_update");
    assert!(
        commands["availableCommands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "fix" && c["description"] == "Fix something"),
        "{commands}"
    );
    assert_eq!(out["commandsPrompt"]["stopReason"], "end_turn");
    let expanded = fake.requests()[4].messages().last().cloned().unwrap();
    assert!(
        expanded.to_string().contains("Please fix the bug"),
        "{expanded}"
    );
    // Context use and cost after each prompt.
    let usage = all
        .iter()
        .find(|u| u["sessionUpdate"] == "usage_update")
        .expect("usage_update");
    assert_eq!(usage["size"], 200000);
    assert_eq!(usage["cost"]["currency"], "USD");
    fake.finish();
}

/// Two sessions in two folders prompted at once, both streams interleaved: each session's
/// updates are one whole reply, and each session file holds its own prompt and that reply.
#[test]
fn two_sessions_at_once_never_mix_their_updates() {
    let slow = |text: &str| {
        let parts: Vec<String> = (0..6).map(|i| format!("{text}-{i} ")).collect();
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        Reply::sse_slow(
            AnthropicStream::new().text(&parts).finish("end_turn"),
            Duration::from_millis(30),
        )
    };
    let fake = FakeProvider::start(vec![slow("one"), slow("two")]);
    let workspace = Workspace::new();
    let second = workspace.root().join("project-two");
    std::fs::create_dir_all(&second).unwrap();
    let env = [("PI_ACP_CWD2", second.to_string_lossy().into_owned())];
    let Some(out) = scenario("two", &workspace, &fake, json!({}), &env) else {
        return;
    };
    assert_eq!(out["stops"], json!(["end_turn", "end_turn"]));
    let whole = |word: &str| (0..6).map(|i| format!("{word}-{i} ")).collect::<String>();
    let (a, b) = (
        out["texts"]["a"].as_str().unwrap(),
        out["texts"]["b"].as_str().unwrap(),
    );
    let mut got = [a.to_string(), b.to_string()];
    got.sort();
    assert_eq!(got, [whole("one"), whole("two")], "{out}");
    // Each session's file: its own prompt, and the reply its client saw.
    for (key, prompt, dir) in [("a", "from A", workspace.cwd()), ("b", "from B", second)] {
        let session_id = out["sessions"][key].as_str().unwrap();
        let sessions = workspace.agent_dir().join("sessions");
        let file = find_session_file(&sessions, session_id)
            .unwrap_or_else(|| panic!("no session file for {session_id} ({})", dir.display()));
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.contains(prompt), "{text}");
        let seen = out["texts"][key].as_str().unwrap();
        assert!(text.contains(&json!(seen).to_string()), "{text}");
    }
    fake.finish();
}

/// Sessions share the provider connections, and a cancel ends only its own request: A's stream
/// stalls and B's is held open, each on its own connection; A's cancel closes A's connection (the
/// fake sees it) while B's stream goes on and completes; A's next request then reuses B's
/// connection from the shared pool.
#[test]
fn sessions_share_connections_and_a_cancel_ends_only_its_own_request() {
    if sdk().is_none() {
        return;
    }
    let fake = FakeProvider::start(vec![
        Reply::stall_after(AnthropicStream::new().text(&["Stalled"]).unfinished()),
        Reply::hold(&anthropic_text(&["B first ", "B rest"]), "B rest"),
        Reply::sse(anthropic_text(&["A again"])),
    ]);
    let workspace = Workspace::new();
    let out = std::thread::scope(|scope| {
        let client = scope.spawn(|| scenario("pool", &workspace, &fake, json!({}), &[]));
        // B is released only once A's connection was closed by pi-rs (A's cancel).
        fake.wait_for_stalls_closed_by_client(1, Duration::from_secs(60));
        fake.release_stalls();
        client.join().unwrap().unwrap()
    });
    assert_eq!(out["a"]["stopReason"], "cancelled", "{out}");
    assert_eq!(out["b"]["stopReason"], "end_turn", "{out}");
    assert_eq!(out["bText"], "B first B rest");
    assert_eq!(out["again"]["stopReason"], "end_turn");
    assert_eq!(out["againText"], "A again");
    let requests = fake.requests();
    let connections: Vec<usize> = requests.iter().map(|r| r.connection).collect();
    assert_eq!(connections.len(), 3);
    assert_ne!(
        connections[0], connections[1],
        "two streams at once: {connections:?}"
    );
    assert_eq!(
        connections[2], connections[1],
        "A's next request reuses B's pooled connection: {connections:?}"
    );
    fake.finish();
}

/// Ten sessions that each ran a turn: after the first, each adds well under 2 MB of anonymous
/// memory (before the sessions shared the parsed model catalog, each added about 6.5 MB).
#[test]
fn each_further_session_costs_little_memory() {
    const SESSIONS: usize = 10;
    let fake = FakeProvider::start(
        (0..SESSIONS)
            .map(|_| Reply::sse(anthropic_text(&["Hello."])))
            .collect(),
    );
    let workspace = Workspace::new();
    prepare(&workspace, &fake, json!({}));
    let mut command = Command::new(binary());
    command
        .args(["--mode", "acp"])
        .args(MODEL_ARGS)
        .current_dir(workspace.cwd())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    isolate_env(&mut command, &workspace.agent_dir(), workspace.root());
    let mut child = command.spawn().expect("start pi --mode acp");
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let (lines_tx, lines) = crossbeam_channel::unbounded();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut next_id = 0;
    let mut call = |method: &str, params: Value| -> Value {
        next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params});
        writeln!(stdin, "{request}").unwrap();
        loop {
            let line = lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no answer to {method}"));
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == next_id && message["method"].is_null() {
                assert!(message["error"].is_null(), "{message}");
                return message["result"].clone();
            }
        }
    };
    let anon_kb = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    call("initialize", json!({"protocolVersion": 1}));
    let cwd = workspace.cwd().to_string_lossy().into_owned();
    let mut after_first = 0;
    for n in 0..SESSIONS {
        let session = call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        let prompt =
            json!({"sessionId": session["sessionId"], "prompt": [{"type": "text", "text": "hi"}]});
        assert_eq!(call("session/prompt", prompt)["stopReason"], "end_turn");
        if n == 0 {
            after_first = anon_kb();
        }
    }
    let per_session = anon_kb().saturating_sub(after_first) / (SESSIONS as u64 - 1);
    assert!(
        per_session < 2048,
        "each further session added {per_session} kB of anonymous memory"
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
    fake.finish();
}

/// `session/delete` (offered as `sessionCapabilities.delete`): refused while the session is open,
/// then its file is removed and it leaves `session/list`; a second delete finds nothing.
#[test]
fn a_closed_session_can_be_deleted() {
    let fake = FakeProvider::start(vec![Reply::sse(anthropic_text(&["Kept."]))]);
    let workspace = Workspace::new();
    let Some(out) = scenario("delete", &workspace, &fake, json!({}), &[]) else {
        return;
    };
    assert_eq!(
        out["init"]["agentCapabilities"]["sessionCapabilities"]["delete"],
        json!({})
    );
    let id = out["id"].as_str().unwrap();
    assert_eq!(out["whileOpen"]["code"], -32602, "{out}");
    assert_eq!(out["before"], json!([id]));
    assert_eq!(out["deleted"], json!({}));
    assert_eq!(out["after"], json!([]));
    // Written as -32002 (no such session), which the SDK, as ACP recommends, takes as success.
    assert_eq!(out["againWritten"]["error"]["code"], -32002, "{out}");
    assert_eq!(out["again"], Value::Null);
    let sessions = workspace.agent_dir().join("sessions");
    assert_eq!(find_session_file(&sessions, id), None, "the file is gone");
    fake.finish();
}

/// bash's `timeout` with the command in the editor's terminal: when it passes, the terminal gets
/// `terminal/kill` (its process ends by the kill), the call fails with pi's timeout text and the
/// output so far, the terminal is released, and the turn goes on.
#[test]
fn a_bash_timeout_kills_the_editors_terminal() {
    let input = json!({"command": "echo started; sleep 30; echo never", "timeout": 3}).to_string();
    let fake = FakeProvider::start(vec![
        Reply::sse(
            AnthropicStream::new()
                .tool_use("toolu_slow", "bash", &[&input])
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Gave up on it."])),
    ]);
    let workspace = Workspace::new();
    let Some(out) = scenario("terminalTimeout", &workspace, &fake, json!({}), &[]) else {
        return;
    };
    assert_eq!(out["prompt"]["stopReason"], "end_turn", "{out}");
    assert_eq!(out["text"], "Gave up on it.");
    let log: Vec<&str> = out["editorLog"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let kill = log.iter().position(|m| *m == "terminal/kill");
    let release = log.iter().position(|m| *m == "terminal/release");
    assert!(
        log.first() == Some(&"terminal/create") && kill.is_some() && release > kill,
        "{log:?}"
    );
    let terminal = &out["terminals"][0];
    assert_eq!(terminal["released"], true);
    assert_eq!(terminal["exitStatus"]["signal"], "SIGKILL", "{out}");
    let finished = out["updates"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|u| u["toolCallId"] == "toolu_slow" && u["status"].is_string())
        .unwrap();
    assert_eq!(finished["status"], "failed", "{finished}");
    let shown = finished.to_string();
    assert!(shown.contains("started"), "{shown}");
    assert!(
        shown.contains("Command timed out after 3 seconds"),
        "{shown}"
    );
    assert!(!shown.contains("never"), "{shown}");
    // The model got the same text.
    let second = &fake.requests()[1];
    assert!(
        second
            .raw_body
            .windows(33)
            .any(|w| w == b"Command timed out after 3 seconds"),
        "the tool result the model saw"
    );
    fake.finish();
}

/// A `session/prompt` while one runs steers the run: it reaches the model after the running
/// turn's tool result (one run, no second one), the first prompt is answered `end_turn` once it
/// is taken in, and the second when the run ends.
#[test]
fn a_prompt_while_one_runs_steers_it() {
    let wait = "for i in $(seq 1 600); do [ -e go ] && break; sleep 0.1; done; echo waited";
    let fake = FakeProvider::start(vec![
        Reply::sse(anthropic_bash("toolu_wait", wait)),
        Reply::sse(anthropic_text(&["Checked the tests too."])),
    ]);
    let workspace = Workspace::new();
    let Some(out) = scenario("steer", &workspace, &fake, json!({}), &[]) else {
        return;
    };
    assert_eq!(out["a"]["stopReason"], "end_turn", "{out}");
    assert_eq!(out["b"]["stopReason"], "end_turn", "{out}");
    assert_eq!(out["order"], json!(["a", "b"]));
    assert_eq!(out["text"], "Checked the tests too.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "one run");
    let messages = requests[1].messages();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user", "{messages:?}");
    assert!(
        last.to_string().contains("also check the tests"),
        "the steering message follows the tool result: {last}"
    );
    assert!(
        messages[messages.len() - 2].to_string().contains("waited")
            || last.to_string().contains("waited"),
        "{messages:?}"
    );
    fake.finish();
}

fn find_session_file(root: &std::path::Path, session_id: &str) -> Option<PathBuf> {
    for dir in std::fs::read_dir(root).ok()?.flatten() {
        for file in std::fs::read_dir(dir.path()).ok()?.flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            if name.ends_with(&format!("_{session_id}.jsonl")) {
                return Some(file.path());
            }
        }
    }
    None
}

/// session/cancel while a tool runs: the prompt ends `cancelled` (not after the tool's 30 s), and
/// the session takes the next prompt.
#[test]
fn cancel_ends_the_prompt_as_cancelled_and_the_session_goes_on() {
    let fake = FakeProvider::start(vec![
        Reply::sse(anthropic_bash("toolu_block", "sleep 30; echo never")),
        Reply::sse(anthropic_text(&["Back."])),
    ]);
    let workspace = Workspace::new();
    let Some(out) = scenario("cancel", &workspace, &fake, json!({}), &[]) else {
        return;
    };
    assert_eq!(out["cancelled"]["stopReason"], "cancelled", "{out}");
    assert_eq!(out["after"]["stopReason"], "end_turn");
    assert_eq!(out["afterText"], "Back.");
    fake.finish();
}

/// The approval gate's ask becomes session/request_permission: "allow always" runs the call and
/// is remembered (the same call later is not asked), "reject" refuses it.
#[test]
fn approval_asks_become_permission_requests() {
    let fake = FakeProvider::start(vec![
        Reply::sse(anthropic_bash("toolu_a", "echo allowed")),
        Reply::sse(anthropic_bash("toolu_b", "echo allowed")),
        Reply::sse(anthropic_text(&["Both ran."])),
        Reply::sse(anthropic_bash("toolu_c", "echo refused")),
        Reply::sse(anthropic_text(&["Refused."])),
    ]);
    let workspace = Workspace::new();
    let settings = json!({"approvals": {"tools": {"bash": "ask"}, "timeoutSeconds": 20}});
    let Some(out) = scenario("permission", &workspace, &fake, settings, &[]) else {
        return;
    };
    assert_eq!(out["first"]["stopReason"], "end_turn");
    assert_eq!(out["askedAfterFirst"], 1, "{out}");
    let permissions = out["permissions"].as_array().unwrap();
    assert_eq!(permissions.len(), 2, "{out}");
    assert_eq!(permissions[0]["toolCall"]["toolCallId"], "toolu_a");
    let kinds: Vec<&str> = permissions[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    assert_eq!(permissions[1]["toolCall"]["toolCallId"], "toolu_c");
    let statuses: Vec<(String, String)> = out["toolUpdates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["status"] == "completed" || u["status"] == "failed")
        .map(|u| {
            (
                u["toolCallId"].as_str().unwrap().to_string(),
                u["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("toolu_a".to_string(), "completed".to_string()),
            ("toolu_b".to_string(), "completed".to_string()),
            ("toolu_c".to_string(), "failed".to_string()),
        ]
    );
    fake.finish();
}

/// session/cancel while a permission request is open: the prompt ends `cancelled`, the agent
/// withdraws the request (`$/cancel_request`, the client's handler sees its abort signal) and the
/// tool never runs.
#[test]
fn cancel_withdraws_an_open_permission_request() {
    let fake = FakeProvider::start(vec![Reply::sse(anthropic_bash(
        "toolu_ask",
        "touch ran-anyway",
    ))]);
    let workspace = Workspace::new();
    let settings = json!({"approvals": {"tools": {"bash": "ask"}, "timeoutSeconds": 30}});
    let Some(out) = scenario("cancelAsk", &workspace, &fake, settings, &[]) else {
        return;
    };
    assert_eq!(out["prompt"]["stopReason"], "cancelled", "{out}");
    assert_eq!(out["permissions"], 1);
    assert_eq!(out["withdrawn"], json!([1]), "{out}");
    assert_eq!(out["permissionAborted"], true);
    assert!(!workspace.cwd().join("ran-anyway").exists());
    fake.finish();
}

/// A session with a write is closed, listed, loaded with its history replayed (the user's text,
/// the tool call with its arguments and diff, the reply), prompted again with that history, then
/// closed and resumed without a replay.
#[test]
fn sessions_close_list_and_load_with_their_history_replayed() {
    let write = json!({"path": "notes.txt", "content": "hello notes\n"}).to_string();
    let fake = FakeProvider::start(vec![
        Reply::sse(
            AnthropicStream::new()
                .tool_use("toolu_w", "write", &[&write])
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Wrote it."])),
        Reply::sse(anthropic_text(&["Still here."])),
    ]);
    let workspace = Workspace::new();
    let Some(out) = scenario("load", &workspace, &fake, json!({}), &[]) else {
        return;
    };
    assert_eq!(
        out["init"]["agentCapabilities"]["sessionCapabilities"],
        json!({"list": {}, "close": {}, "resume": {}, "delete": {}})
    );
    let id = out["sessionId"].as_str().unwrap();
    let live_diff = out["live"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["status"] == "completed")
        .map(|u| u["content"][0].clone())
        .unwrap();
    let path = workspace.cwd().join("notes.txt");
    assert_eq!(
        live_diff,
        json!({"type": "diff", "path": path.to_string_lossy(), "oldText": null, "newText": "hello notes\n"})
    );
    assert_eq!(out["close"], json!({}));
    assert_eq!(out["closedPrompt"]["code"], -32002);
    let listed: Vec<&str> = out["list"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [id]);
    assert_eq!(
        out["list"]["sessions"][0]["cwd"],
        workspace.cwd().to_string_lossy().as_ref()
    );
    // (The first prompt's usage_update may land after the client's reset: not part of it.)
    let replay: Vec<Value> = out["replay"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] != "usage_update")
        .cloned()
        .collect();
    let replay = &Value::Array(replay);
    assert_eq!(
        kinds(replay),
        [
            "user_message_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk"
        ],
        "{replay}"
    );
    assert_eq!(replay[0]["content"]["text"], "write it");
    assert_eq!(replay[1]["rawInput"]["path"], "notes.txt");
    assert_eq!(replay[2]["content"][0], live_diff);
    assert_eq!(replay[3]["content"]["text"], "Wrote it.");
    assert_eq!(out["again"]["stopReason"], "end_turn");
    assert_eq!(out["againText"], "Still here.");
    let requests = fake.requests();
    assert_eq!(
        requests[2].messages().len(),
        5,
        "the loaded history reached the model"
    );
    assert_eq!(out["missing"]["code"], -32002);
    // Only an exact id of this directory's sessions opens one.
    assert_eq!(out["prefix"]["code"], -32002);
    assert_eq!(out["pathLike"]["code"], -32002);
    assert_eq!(
        out["loadOpen"]["code"], -32600,
        "an open session is not loaded twice"
    );
    assert_eq!(out["resume"]["configOptions"][0]["id"], "model");
    assert_eq!(out["resumeReplayed"], 0);
    fake.finish();
}

/// A real MCP server (the everything server over stdio) passed by the client in session/new:
/// the model calls its echo tool; an SSE server is refused with invalid params.
#[test]
fn the_clients_mcp_server_serves_the_session() {
    let Some((node, entry)) = everything_server() else {
        return;
    };
    let fake = FakeProvider::start(vec![
        Reply::sse(
            AnthropicStream::new()
                .tool_use(
                    "toolu_m",
                    "mcp__everything__echo",
                    &[r#"{"message":"hello from acp"}"#],
                )
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Echoed."])),
    ]);
    let workspace = Workspace::new();
    let server = json!({"name": "everything", "command": node.to_string_lossy(),
        "args": [entry.to_string_lossy(), "stdio"],
        "env": [{"name": "ACP_TEST_TOKEN", "value": "acp-secret-value-123"}]});
    let env = [("PI_ACP_MCP", server.to_string())];
    let Some(out) = scenario("mcp", &workspace, &fake, json!({}), &env) else {
        return;
    };
    assert_eq!(out["prompt"]["stopReason"], "end_turn");
    let done = out["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["status"] == "completed")
        .cloned()
        .unwrap_or_else(|| panic!("no completed call: {out}"));
    assert_eq!(done["toolCallId"], "toolu_m");
    assert!(
        done["content"].to_string().contains("Echo: hello from acp"),
        "{done}"
    );
    let declared = fake.requests()[0].body["tools"].to_string();
    assert!(declared.contains("mcp__everything__echo"), "{declared}");
    assert_eq!(out["badServer"]["code"], -32602);
    fake.finish();
}

/// A client that shows notices and compactions sees a threshold compaction (in progress, then
/// completed with its summary) and a retried request as a warning notice.
#[test]
fn compactions_and_retries_are_shown_to_a_client_that_shows_them() {
    let summary = "## Goal\nExercise compaction over ACP.";
    let fake = FakeProvider::start(vec![
        Reply::sse(anthropic_text(&[&format!(
            "First answer. {}",
            "bravo ".repeat(200)
        )])),
        Reply::sse(
            AnthropicStream::new()
                .input_tokens(3500)
                .text(&["Second answer."])
                .finish("end_turn"),
        ),
        Reply::sse(anthropic_text(&[summary])),
        Reply::status(
            529,
            fixture("anthropic/error_529.json"),
            &[("retry-after", "0")],
        ),
        Reply::sse(anthropic_text(&["After the retry."])),
    ]);
    let workspace = Workspace::new();
    let models = fixture("models_small_window.json").replace("__BASE_URL__", &fake.base_url());
    let settings = json!({"compaction": {"reserveTokens": 1000, "keepRecentTokens": 200},
        "retry": {"baseDelayMs": 20}});
    let env = [
        ("MODELS_JSON", models),
        (
            "PI_ACP_ARGS",
            json!([
                "--provider",
                "fake-anthropic",
                "--model",
                "fake-claude-small"
            ])
            .to_string(),
        ),
    ];
    let Some(out) = scenario("state", &workspace, &fake, settings, &env) else {
        return;
    };
    assert_eq!(out["stops"], json!(["end_turn", "end_turn", "end_turn"]));
    let all = out["allUpdates"].as_array().unwrap();
    let compactions: Vec<&Value> = all
        .iter()
        .filter(|u| u["sessionUpdate"] == "compaction_update")
        .collect();
    assert_eq!(compactions.len(), 2, "{all:?}");
    assert_eq!(compactions[0]["status"], "in_progress");
    assert_eq!(compactions[1]["status"], "completed");
    assert_eq!(
        compactions[0]["compactionId"],
        compactions[1]["compactionId"]
    );
    let text = compactions[1]["summary"][0]["text"].as_str().unwrap();
    assert!(text.contains(summary), "{text}");
    let notice = all
        .iter()
        .find(|u| u["sessionUpdate"] == "notice")
        .expect("a retry notice");
    assert_eq!(notice["severity"], "warning");
    assert!(
        notice["title"].as_str().unwrap().contains("attempt 1"),
        "{notice}"
    );
    // session/load after the compaction: its summary first, then what came after.
    let replay: Vec<&Value> = out["replay"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] != "usage_update")
        .collect();
    assert_eq!(
        replay[0]["sessionUpdate"], "compaction_update",
        "{replay:?}"
    );
    assert_eq!(replay[0]["status"], "completed");
    let replayed = replay[0]["summary"][0]["text"].as_str().unwrap();
    assert!(replayed.contains(summary), "{replayed}");
    assert!(
        replay
            .iter()
            .any(|u| u["content"]["text"] == "After the retry."),
        "{replay:?}"
    );
    fake.finish();
}

/// The pi-acp route keeps working: pi-acp 0.0.34 (npm) in front of `pi --mode rpc` does a turn
/// with a tool call for the same SDK client (the model from settings: pi-acp passes no flags).
#[test]
fn the_pi_acp_adapter_in_front_of_rpc_mode_still_works() {
    let adapter = repo_path("target/acp-sdk/node_modules/pi-acp/dist/index.js");
    if !adapter.exists() {
        missing("pi-acp is not installed: run tests/install_acp_sdk.sh");
        return;
    }
    let fake = FakeProvider::start(vec![
        Reply::sse(anthropic_bash("toolu_r", "echo via-rpc")),
        Reply::sse(anthropic_text(&["Done via ", "rpc."])),
    ]);
    let workspace = Workspace::new();
    let settings = json!({"defaultProvider": "fake-anthropic", "defaultModel": "fake-claude"});
    let env = [("PI_ACP_ADAPTER", adapter.to_string_lossy().into_owned())];
    let Some(out) = scenario("route", &workspace, &fake, settings, &env) else {
        return;
    };
    assert_eq!(out["prompt"]["stopReason"], "end_turn", "{out}");
    // (pi-acp puts a line break before the text that follows a tool call.)
    assert_eq!(out["text"].as_str().unwrap().trim(), "Done via rpc.");
    let kinds = out["kinds"].to_string();
    assert!(kinds.contains("tool_call"), "{kinds}");
    fake.finish();
}

/// An extension's dialogs (fixtures/extensions/full.py's `/ui`): its select becomes a permission
/// request with one option per choice, its input and editor dialogs elicitation forms (the
/// client offers them), its notify a notice; the command's prompt ends without a model turn.
#[test]
fn extension_dialogs_become_permission_requests_and_elicitation_forms() {
    let fake = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    let extension = crate::fake_provider::fixture_path("extensions/full.py");
    let args = json!([
        "--provider",
        "fake-anthropic",
        "--model",
        "fake-claude",
        "-e",
        extension.to_string_lossy()
    ]);
    let env = [("PI_ACP_ARGS", args.to_string())];
    let Some(out) = scenario("dialogs", &workspace, &fake, json!({}), &env) else {
        return;
    };
    assert_eq!(out["prompt"]["stopReason"], "end_turn", "{out}");
    let choices: Vec<&str> = out["permissions"][0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(choices, ["red", "green"]);
    let forms = out["elicitations"].as_array().unwrap();
    assert_eq!(forms.len(), 2, "{out}");
    assert_eq!(forms[0]["message"], "Your name?");
    assert_eq!(forms[0]["mode"], "form");
    assert_eq!(
        forms[1]["requestedSchema"]["properties"]["value"]["default"],
        "line 1\nline 2"
    );
    let titles: Vec<&str> = out["notices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["title"].as_str().unwrap())
        .collect();
    assert!(
        titles.contains(&"picked green, name Ada, edited edited text"),
        "{titles:?}"
    );
    fake.finish();
}

/// A client that offers `fs/*` and `terminal/*`: read sees the editor's unsaved buffer, edit
/// and write land in the editor (not on disk) and their diffs are the whole files as the tools
/// read and wrote them, bash runs in the editor's terminal (shown in the tool call, released once
/// the call is shown finished), and a cancel kills that terminal's command.
#[test]
fn an_editor_that_reads_writes_and_runs_does_it_for_the_tools() {
    let tool = |id: &str, name: &str, args: Value| {
        Reply::sse(
            AnthropicStream::new()
                .tool_use(id, name, &[&args.to_string()])
                .finish("tool_use"),
        )
    };
    let fake = FakeProvider::start(vec![
        tool("toolu_r", "read", json!({"path": "notes.txt"})),
        Reply::sse(anthropic_text(&["Read."])),
        tool(
            "toolu_e",
            "edit",
            json!({"path": "notes.txt", "edits": [{"oldText": "unsaved", "newText": "edited"}]}),
        ),
        Reply::sse(anthropic_text(&["Edited."])),
        tool(
            "toolu_w",
            "write",
            json!({"path": "new.txt", "content": "fresh\n"}),
        ),
        Reply::sse(anthropic_text(&["Wrote."])),
        Reply::sse(anthropic_bash("toolu_b", "echo from-terminal; exit 3")),
        Reply::sse(anthropic_text(&["Ran."])),
        Reply::sse(anthropic_bash("toolu_block", "sleep 30; echo never")),
    ]);
    let workspace = Workspace::new();
    let notes = workspace.cwd().join("notes.txt");
    std::fs::write(&notes, "saved on disk\n").unwrap();
    let notes_path = notes.to_string_lossy().into_owned();
    let buffers = json!({ notes_path.clone(): "unsaved buffer text\n" }).to_string();
    let Some(out) = scenario(
        "editor",
        &workspace,
        &fake,
        json!({}),
        &[("PI_ACP_BUFFERS", buffers)],
    ) else {
        return;
    };
    assert_eq!(
        out["stops"],
        json!(["end_turn", "end_turn", "end_turn", "end_turn"])
    );
    assert_eq!(out["cancelled"]["stopReason"], "cancelled", "{out}");
    let requests = fake.requests();
    let result_of = |i: usize| requests[i].messages().last().unwrap().to_string();
    // read: the unsaved buffer, not the disk.
    assert!(
        result_of(1).contains("unsaved buffer text"),
        "{}",
        result_of(1)
    );
    // edit and write: into the editor; the disk keeps what was saved.
    assert_eq!(out["buffers"][&notes_path], "edited buffer text\n");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "saved on disk\n");
    let new_path = workspace.cwd().join("new.txt");
    assert_eq!(
        out["buffers"][new_path.to_string_lossy().as_ref()],
        "fresh\n"
    );
    assert!(!new_path.exists());
    let updates = out["updates"].as_array().unwrap();
    let finished = |id: &str| {
        updates
            .iter()
            .find(|u| {
                u["toolCallId"] == id && u["status"].is_string() && u["rawOutput"].is_object()
            })
            .unwrap_or_else(|| panic!("no final update of {id}: {updates:?}"))
            .clone()
    };
    assert_eq!(
        finished("toolu_e")["content"][0],
        json!({"type": "diff", "path": notes_path, "oldText": "unsaved buffer text\n",
            "newText": "edited buffer text\n"})
    );
    assert_eq!(
        finished("toolu_w")["content"][0],
        json!({"type": "diff", "path": new_path.to_string_lossy(), "oldText": null,
            "newText": "fresh\n"})
    );
    // bash: in the editor's terminal, with pi's result text for the model.
    let log = out["editorLog"].as_array().unwrap();
    let create = log
        .iter()
        .find(|e| e["method"] == "terminal/create")
        .expect("terminal/create");
    assert_eq!(create["args"][1], "echo from-terminal; exit 3");
    assert_eq!(create["cwd"], workspace.cwd().to_string_lossy().as_ref());
    assert!(
        create["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "PI_SESSION_ID"),
        "{create}"
    );
    let bash_result = result_of(7);
    assert!(
        bash_result.contains("from-terminal") && bash_result.contains("Command exited with code 3"),
        "{bash_result}"
    );
    let bash_done = finished("toolu_b");
    assert_eq!(bash_done["status"], "failed");
    assert!(
        updates.iter().any(|u| u["toolCallId"] == "toolu_b"
            && u["content"][0] == json!({"type": "terminal", "terminalId": "term-1"})),
        "{updates:?}"
    );
    let methods: Vec<(&str, &str)> = log
        .iter()
        .filter(|e| e["terminalId"].is_string())
        .map(|e| {
            (
                e["method"].as_str().unwrap(),
                e["terminalId"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(methods.contains(&("terminal/wait_for_exit", "term-1")));
    assert!(
        methods.contains(&("terminal/kill", "term-2")),
        "{methods:?}"
    );
    let released = |id: &str| {
        let at = |m: &str| methods.iter().position(|e| *e == (m, id));
        at("terminal/release").is_some_and(|r| at("terminal/create") < Some(r))
    };
    assert!(released("term-1") && released("term-2"), "{methods:?}");
    assert_eq!(out["terminals"][0]["exitStatus"]["exitCode"], 3);
    assert_eq!(out["terminals"][1]["exitStatus"]["signal"], "SIGKILL");
    fake.finish();
}

/// An extension's `setModel` (here through v2.py's `/send`) reaches the client as a
/// `config_option_update` with the new model.
#[test]
fn a_model_an_extension_sets_is_shown_to_the_client() {
    let fake = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    let extension = crate::fake_provider::fixture_path("extensions/v2.py");
    let mut args = json!(MODEL_ARGS);
    args.as_array_mut()
        .unwrap()
        .extend([json!("-e"), json!(extension.to_string_lossy())]);
    // The level stays "off": only the model changes (no thinking_level_changed to go by).
    args.as_array_mut()
        .unwrap()
        .extend([json!("--thinking"), json!("off")]);
    let set =
        json!({"type": "set_model", "id": "m", "provider": "fake-openai", "modelId": "fake-gpt"});
    let env = [
        ("PI_ACP_ARGS", args.to_string()),
        ("PI_ACP_PROMPT", format!("/send {set}")),
    ];
    let Some(out) = scenario("modelChange", &workspace, &fake, json!({}), &env) else {
        return;
    };
    assert_eq!(out["prompt"]["stopReason"], "end_turn", "{out}");
    let update = out["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["sessionUpdate"] == "config_option_update")
        .unwrap_or_else(|| panic!("no config_option_update: {out}"))
        .clone();
    assert_eq!(
        update["configOptions"][0]["currentValue"],
        "fake-openai/fake-gpt"
    );
    assert_eq!(update["configOptions"][1]["currentValue"], "off");
    fake.finish();
}

/// A client that never answers a request is given up on at the deadline (shortened here by
/// `PI_TEST_ACP_CLIENT_DEADLINE_MS`): the tool fails with why, the request is withdrawn, and
/// the turn goes on.
#[test]
fn a_silent_editor_is_given_up_on_at_the_deadline() {
    let read = json!({"path": "notes.txt"}).to_string();
    let fake = FakeProvider::start(vec![
        Reply::sse(
            AnthropicStream::new()
                .tool_use("toolu_r", "read", &[&read])
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Gave up."])),
    ]);
    let workspace = Workspace::new();
    let env = [("PI_TEST_ACP_CLIENT_DEADLINE_MS", "500".to_string())];
    let Some(out) = scenario("silentEditor", &workspace, &fake, json!({}), &env) else {
        return;
    };
    assert_eq!(out["prompt"]["stopReason"], "end_turn", "{out}");
    let result = fake.requests()[1].messages().last().unwrap().to_string();
    assert!(
        result.contains("The editor did not answer fs/read_text_file within 0.5 s"),
        "{result}"
    );
    assert_eq!(out["editorLog"][0]["withdrawn"], true, "{out}");
    assert_eq!(out["withdrawn"].as_array().unwrap().len(), 1, "{out}");
    fake.finish();
}

/// With a sandbox on, the editor's offers do not take the tools out of it: a write the sandbox
/// refuses never reaches fs/write_text_file, and bash runs in pi-rs's confined shell, not the
/// editor's terminal (pi-rs cannot confine a process the editor starts).
#[test]
fn a_sandbox_keeps_the_tools_inside_it_whatever_the_editor_offers() {
    // pi's own configuration in the workspace: refused in every sandbox mode (the workspace is
    // in the temp folder, which read-only mode leaves writable).
    let write = json!({"path": ".pi/settings.json", "content": "{}"}).to_string();
    let fake = FakeProvider::start(vec![
        Reply::sse(
            AnthropicStream::new()
                .tool_use("toolu_w", "write", &[&write])
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Refused."])),
        Reply::sse(anthropic_bash("toolu_b", "echo from-local-shell")),
        Reply::sse(anthropic_text(&["Ran."])),
    ]);
    let workspace = Workspace::new();
    let mut args = json!(MODEL_ARGS);
    args.as_array_mut()
        .unwrap()
        .extend([json!("--sandbox"), json!("read-only")]);
    let env = [("PI_ACP_ARGS", args.to_string())];
    let Some(out) = scenario("sandboxedEditor", &workspace, &fake, json!({}), &env) else {
        return;
    };
    assert_eq!(out["stops"], json!(["end_turn", "end_turn"]), "{out}");
    let requests = fake.requests();
    let refused = requests[1].messages().last().unwrap().to_string();
    assert!(refused.contains("blocked by the sandbox"), "{refused}");
    let ran = requests[3].messages().last().unwrap().to_string();
    assert!(ran.contains("from-local-shell"), "{ran}");
    let methods: Vec<&str> = out["editorLog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert!(!methods.contains(&"fs/write_text_file"), "{methods:?}");
    assert!(!methods.contains(&"terminal/create"), "{methods:?}");
    assert!(!workspace.cwd().join(".pi/settings.json").exists());
    fake.finish();
}
