//! MCP servers through the real binary: a real stdio server and a real streamable-HTTP server
//! (`@modelcontextprotocol/server-everything` from npm, installed by
//! `tests/install_mcp_servers.sh`, HTTP bound to 127.0.0.1 by `fixtures/mcp/loopback.cjs`) used
//! by the model in a turn; and the failure cases on `fixtures/mcp/fake_server.py` (crash
//! mid-call, garbage lines, slow answers past `timeout`, progress, list_changed, huge results,
//! abort mid-call, a server that fails to start), resources, `--no-mcp`, `--tools`, `pi mcp`.
//!
//! Under `CI=true` a missing real server (npm install failed, no node) is a failure; elsewhere
//! those tests print why they skip.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture_path};
use crate::scripted_http::{HttpRequest, ScriptedHttp, rpc_answer};
use crate::sse::{AnthropicStream, anthropic_text};
use crate::support::{
    Pi, Setup, Workspace, is_reference, mcp_server, mcp_servers_until, next_notify,
    prerequisite_missing, result_text, tool_result_block, tool_result_block_text, wait_for_file,
    wait_until_gone, write_mcp_json,
};

/// pi 1.6.0's `get_commands` entry for its built-in `/mcp`, listed unless `--no-mcp`.
pub fn builtin_command() -> Value {
    json!({"name": "mcp", "description": "Manage MCP servers: sign in, reconnect, enable or disable, and change exposure",
        "source": "extension", "sourceInfo": {"path": "builtin:mcp", "source": "builtin", "scope": "temporary", "origin": "top-level"}})
}

/// The everything server's entry point, or why it is not there (a failure under CI=true).
pub fn everything_server() -> Option<(PathBuf, PathBuf)> {
    let entry = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "target/mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    let node = Command::new("sh")
        .args(["-c", "command -v node"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    match (node, entry.exists()) {
        (Some(node), true) => Some((node, entry)),
        (node, found) => {
            let why = format!(
                "MCP everything server not available (node: {node:?}, {} exists: {found}); run tests/install_mcp_servers.sh",
                entry.display()
            );
            prerequisite_missing(&why);
            None
        }
    }
}

/// The everything server's stdio entry (`command`, `args`), or None as `everything_server`.
pub fn everything_stdio() -> Option<Value> {
    let (node, entry) = everything_server()?;
    Some(json!({"command": node.to_string_lossy(), "args": [entry.to_string_lossy(), "stdio"]}))
}

fn fake_server(workspace: &Workspace, extra: Value) -> (Value, PathBuf) {
    let log = workspace.root().join("fake-mcp.jsonl");
    let mut entry = json!({
        "command": fixture_path("mcp/fake_server.py").to_string_lossy(),
        "env": {"FAKE_MCP_LOG": log.to_string_lossy()},
    });
    if let (Value::Object(entry), Value::Object(extra)) = (&mut entry, extra) {
        entry.extend(extra);
    }
    (entry, log)
}

/// A reply that calls one tool.
pub fn tool_call(id: &str, name: &str, args: Value) -> Reply {
    Reply::sse(
        AnthropicStream::new()
            .tool_use(id, name, &[&args.to_string()])
            .finish("tool_use"),
    )
}

pub fn declared_tools(request: &crate::fake_provider::RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn tool_end(pi: &mut Pi) -> Value {
    pi.wait_for_event("tool_execution_end")
}

fn log_messages(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn real_stdio_server_is_used_by_the_model() {
    if is_reference() {
        return;
    }
    let Some(everything) = everything_stdio() else {
        return;
    };
    let fake = FakeProvider::start(vec![
        tool_call(
            "toolu_1",
            "mcp__everything__echo",
            json!({"message": "hello from pi-rs"}),
        ),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    write_mcp_json(&workspace, json!({"everything": everything}));
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    pi.command("1", "prompt", json!({"message": "echo something"}));
    let end = tool_end(&mut pi);
    assert_eq!(end["toolName"], "mcp__everything__echo");
    assert_eq!(end["isError"], false, "{end}");
    assert_eq!(result_text(&end["result"]), "Echo: hello from pi-rs");
    assert_eq!(
        end["result"]["details"],
        json!({"server": "everything", "tool": "echo"})
    );
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    let declared = declared_tools(&requests[0]);
    for name in [
        "mcp__everything__echo",
        "mcp__everything__get_sum",
        "list_mcp_resources",
        "read_mcp_resource",
    ] {
        assert!(
            declared.contains(&name.to_string()),
            "{name} in {declared:?}"
        );
    }
    let block = tool_result_block(&requests[1], "toolu_1");
    assert_eq!(tool_result_block_text(&block), "Echo: hello from pi-rs");
    let servers = pi.command("2", "get_mcp_servers", json!({}));
    let server = &servers["data"]["servers"][0];
    assert_eq!(server["state"], "connected", "{servers}");
    assert_eq!(server["transport"], "stdio");
    assert!(server["toolCount"].as_u64().unwrap() >= 10, "{server}");
    assert_eq!(server["protocolVersion"], "2025-11-25");
    pi.close_stdin();
    pi.wait_for_exit();
}

/// The everything server in streamable HTTP mode on 127.0.0.1, port chosen by the OS.
struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    fn start(node: &Path, entry: &Path) -> HttpServer {
        let mut child = Command::new(node)
            .arg("--require")
            .arg(fixture_path("mcp/loopback.cjs"))
            .arg(entry)
            .arg("streamableHttp")
            .env("PORT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the everything server");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("PI_TEST_LISTENING ") {
                    let _ = tx.send(port.trim().parse::<u16>().unwrap());
                }
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server listens");
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn real_streamable_http_server_is_used_by_the_model() {
    if is_reference() {
        return;
    }
    let Some((node, entry)) = everything_server() else {
        return;
    };
    let server = HttpServer::start(&node, &entry);
    let fake = FakeProvider::start(vec![
        tool_call("toolu_1", "mcp__remote__get_sum", json!({"a": 2, "b": 40})),
        tool_call(
            "toolu_2",
            "read_mcp_resource",
            json!({"server": "remote", "uri": "demo://resource/static/document/architecture.md"}),
        ),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    write_mcp_json(
        &workspace,
        json!({"remote": {"type": "streamable-http", "url": format!("http://127.0.0.1:{}/mcp", server.port), "headers": {"X-Test": "1"}}}),
    );
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    pi.command("1", "prompt", json!({"message": "add"}));
    let end = tool_end(&mut pi);
    assert_eq!(end["toolName"], "mcp__remote__get_sum");
    assert_eq!(
        result_text(&end["result"]),
        "The sum of 2 and 40 is 42.",
        "{end}"
    );
    let end = tool_end(&mut pi);
    assert_eq!(end["toolName"], "read_mcp_resource");
    assert_eq!(end["isError"], false, "{end}");
    assert!(!result_text(&end["result"]).is_empty());
    pi.wait_for_event("agent_end");
    let servers = pi.command("2", "get_mcp_servers", json!({}));
    assert_eq!(servers["data"]["servers"][0]["transport"], "http");
    assert_eq!(servers["data"]["servers"][0]["state"], "connected");
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn fake_server_failures_crash_garbage_timeout_progress_and_huge_results() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![
        tool_call("c1", "mcp__fake__garbage", json!({})),
        tool_call("c2", "mcp__fake__crash", json!({})),
        tool_call("c3", "mcp__fake__echo", json!({"text": "back again"})),
        tool_call("c4", "mcp__timer__slow", json!({})),
        tool_call("c5", "mcp__timer__progress", json!({"seconds": 6})),
        tool_call("c6", "mcp__fake__huge", json!({"size": 100000})),
        tool_call("c7", "mcp__fake__grow", json!({})),
        // Held until pi-rs has the grown tool list (see below).
        Reply::hold(
            &AnthropicStream::new()
                .tool_use("c8", "mcp__fake__mixed", &["{}"])
                .finish("tool_use"),
            "mcp__fake__mixed",
        ),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    // Every request's bound, `initialize` included, is the server's `timeout`: the server that
    // crashes and is restarted gets a generous one (a python start can take seconds on a loaded
    // machine); the timeout cases run on a second copy whose bound is short enough to wait out,
    // still far above its start-up and its 0.3 s progress spacing.
    let (entry, _) = fake_server(&workspace, json!({"timeout": 60}));
    let log = workspace.root().join("timer-mcp.jsonl");
    let (timer, _) = fake_server(
        &workspace,
        json!({"timeout": 4, "env": {"FAKE_MCP_LOG": log.to_string_lossy()}}),
    );
    write_mcp_json(&workspace, json!({"fake": entry, "timer": timer}));
    let mut setup = Setup::anthropic(&fake);
    setup.wait_limit = Some(Duration::from_secs(60));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "go"}));

    // Lines that are not JSON are skipped; the answer still arrives.
    let end = tool_end(&mut pi);
    assert_eq!(result_text(&end["result"]), "after garbage", "{end}");
    // A crash mid-call fails the call with the server's last stderr words.
    let end = tool_end(&mut pi);
    assert_eq!(end["isError"], true);
    let text = result_text(&end["result"]);
    assert!(
        text.starts_with("MCP connection closed\n") && text.contains("crashing on purpose"),
        "{text}"
    );
    // The next call reconnects.
    let end = tool_end(&mut pi);
    assert_eq!(result_text(&end["result"]), "echo: back again", "{end}");
    // An answer slower than `timeout` is an error, and the server is told.
    let end = tool_end(&mut pi);
    assert_eq!(
        result_text(&end["result"]),
        "MCP request timed out after 4000ms"
    );
    // Progress notifications reset the timeout (the call outlasts it) and show as updates.
    let records = pi.records_until_event("tool_execution_end");
    let update = records
        .iter()
        .find(|r| r["type"] == "tool_execution_update")
        .expect("a progress update");
    assert!(
        result_text(&update["partialResult"]).starts_with("step "),
        "{update}"
    );
    let end = records.last().unwrap();
    assert!(
        result_text(&end["result"]).starts_with("done after"),
        "{end}"
    );
    // Huge results are cut in the middle; the full text is in a private file.
    let end = tool_end(&mut pi);
    let text = result_text(&end["result"]);
    assert!(text.contains("HEAD") && text.contains("TAIL") && text.contains(" chars truncated…"));
    assert!(text.len() < 21 * 1024, "{}", text.len());
    let path = end["result"]["details"]["fullOutputPath"]
        .as_str()
        .expect("fullOutputPath");
    assert_eq!(std::fs::read_to_string(path).unwrap().len(), 100_008);
    std::fs::remove_file(path).unwrap();
    // list_changed: later requests declare the new tool. pi-rs fetches the list (two pages)
    // while the run goes on, so when it has it is a race with the run: the next reply is held
    // until pi-rs reports the new tool, and the request after that call must declare it.
    tool_end(&mut pi);
    fake.wait_for_requests(8, pi.timeout());
    let has_added = |data: &Value| {
        mcp_server(data, "fake")
            .and_then(|s| s["tools"].as_array())
            .is_some_and(|tools| tools.contains(&json!("mcp__fake__added")))
    };
    let grown = mcp_servers_until(&mut pi, has_added);
    assert!(has_added(&grown), "{grown}");
    fake.release_stalls();
    let end = tool_end(&mut pi);
    assert_eq!(end["isError"], true);
    assert_eq!(
        result_text(&end["result"]),
        "it failed[Resource fake://doc \"doc\". Read it with read_mcp_resource (server \"fake\")]"
    );
    // As pi 1.6.0: the result also carries the whole `CallToolResult` and `isError`.
    assert_eq!(
        end["result"]["structuredContent"],
        json!({"content": [{"type": "text", "text": "it failed"},
            {"type": "resource_link", "uri": "fake://doc", "name": "doc"}], "isError": true})
    );
    assert_eq!(end["result"]["isError"], true);
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(9, pi.timeout());
    assert!(!declared_tools(&requests[6]).contains(&"mcp__fake__added".to_string()));
    // The refreshed list arrives soon after the call's answer (as in pi, not before it).
    assert!(declared_tools(&requests[8]).contains(&"mcp__fake__added".to_string()));
    let cancelled: Vec<Value> = log_messages(&log)
        .into_iter()
        .filter(|m| m["method"] == "notifications/cancelled")
        .collect();
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    assert_eq!(cancelled[0]["params"]["reason"], "Request timed out");
    let mcp_log = std::fs::read_to_string(workspace.agent_dir().join("mcp.log")).unwrap();
    assert!(
        mcp_log.contains(" [fake] info fake: call echo\n"),
        "{mcp_log}"
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn abort_mid_call_cancels_on_the_server_and_exit_stops_it() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![tool_call("c1", "mcp__fake__slow", json!({}))]);
    let workspace = Workspace::new();
    let (entry, log) = fake_server(&workspace, json!({}));
    write_mcp_json(&workspace, json!({"fake": entry}));
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    pi.command("1", "prompt", json!({"message": "go"}));
    pi.wait_for_event("tool_execution_start");
    wait_for_file(&log, pi.timeout(), |t| t.contains("\"tools/call\""));
    pi.command("2", "abort", json!({}));
    let end = tool_end(&mut pi);
    assert_eq!(end["isError"], true);
    pi.wait_for_event("agent_end");
    let text = wait_for_file(&log, pi.timeout(), |t| {
        t.contains("notifications/cancelled")
    });
    let cancelled: Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|m| m["method"] == "notifications/cancelled")
        .unwrap();
    let call_id = log_messages(&log)
        .into_iter()
        .find(|m| m["method"] == "tools/call")
        .unwrap()["id"]
        .clone();
    assert_eq!(
        cancelled["params"],
        json!({"requestId": call_id, "reason": "Aborted"})
    );
    let pid = log_messages(&log)[0]["pid"].as_i64().unwrap() as i32;
    pi.close_stdin();
    pi.wait_for_exit();
    assert!(
        wait_until_gone(pid, Duration::from_secs(5)),
        "the server outlived pi"
    );
}

#[test]
fn startup_problems_are_reported_once_and_listed() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    let (good, _) = fake_server(&workspace, json!({}));
    write_mcp_json(
        &workspace,
        json!({
            "bad": {"command": fixture_path("mcp/fake_server.py").to_string_lossy(), "args": ["--fail-init"]},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
            "off": {"command": "does-not-exist", "enabled": false},
            "fake": good,
        }),
    );
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    let deadline = pi.deadline();
    let notice = pi
        .recv_until(
            |r| r["type"] == "extension_ui_request" && r["method"] == "notify",
            deadline,
        )
        .pop()
        .unwrap();
    let message = notice["message"].as_str().unwrap();
    assert!(
        message.starts_with("MCP servers need attention:\n  config: "),
        "{message}"
    );
    assert!(message.contains(
        "server \"legacy\": legacy SSE transport is not supported; use the streamable HTTP URL"
    ));
    assert!(message.contains("\n  bad: failed: "), "{message}");
    assert_eq!(notice["notifyType"], "warning");
    let servers = pi.command("1", "get_mcp_servers", json!({}));
    let list = servers["data"]["servers"].as_array().unwrap();
    let states: Vec<(&str, &str)> = list
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("bad", "failed"),
            ("off", "disabled"),
            ("fake", "connected")
        ]
    );
    assert!(
        list[0]["error"]
            .as_str()
            .unwrap()
            .contains("missing configuration FAKE_CONFIG"),
        "{}",
        list[0]
    );
    assert_eq!(list[2]["toolCount"], 9);
    assert_eq!(list[2]["description"], "Fake server for tests");

    // `/mcp` prints the status as pi's command does outside its TUI; `reconnect` connects again.
    let answer = pi.command("2", "prompt", json!({"message": "/mcp"}));
    assert_eq!(answer["data"]["disposition"], "handled");
    let deadline = pi.deadline();
    let status = pi
        .recv_until(
            |r| r["type"] == "extension_ui_request" && r["method"] == "notify",
            deadline,
        )
        .pop()
        .unwrap();
    let text = status["message"].as_str().unwrap();
    assert!(text.starts_with("bad: failed (direct)\n    MCP connection closed\n    fake server: missing configuration FAKE_CONFIG\noff: disabled (direct)\nfake: connected, 9 tools (direct)\nconfig error: "), "{text}");
    pi.command("3", "prompt", json!({"message": "/mcp reconnect fake"}));
    let deadline = pi.deadline();
    let notices: Vec<String> = pi
        .recv_until(
            |r| {
                r["type"] == "extension_ui_request"
                    && r["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("Reconnected"))
            },
            deadline,
        )
        .iter()
        .filter(|r| r["method"] == "notify")
        .map(|r| r["message"].as_str().unwrap().to_string())
        .collect();
    // As pi: the outcome only, then the prompt's answer.
    assert_eq!(
        notices,
        ["Reconnected to MCP server \"fake\" (connected · 9 tools · resources)."]
    );
    let commands = pi.command("4", "get_commands", json!({}));
    assert_eq!(commands["data"]["commands"][0]["name"], "mcp");
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn tools_filter_no_mcp_and_resource_tools() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![
        tool_call("c1", "list_mcp_resources", json!({})),
        tool_call(
            "c2",
            "read_mcp_resource",
            json!({"server": "fake", "uri": "fake://doc"}),
        ),
        tool_call(
            "c3",
            "list_mcp_resource_templates",
            json!({"server": "nope"}),
        ),
        Reply::sse(anthropic_text(&["Done."])),
        Reply::sse(anthropic_text(&["Filtered."])),
        Reply::sse(anthropic_text(&["Built-ins only."])),
        Reply::sse(anthropic_text(&["Excluded."])),
        Reply::sse(anthropic_text(&["None."])),
    ]);
    let workspace = Workspace::new();
    let (entry, _) = fake_server(
        &workspace,
        json!({"toolExposure": {"crash": "hidden", "g*": "hidden"}}),
    );
    write_mcp_json(&workspace, json!({"fake": entry}));
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    pi.command("1", "prompt", json!({"message": "resources"}));
    let end = tool_end(&mut pi);
    let listed: Value = serde_json::from_str(&result_text(&end["result"])).unwrap();
    assert_eq!(
        listed,
        json!({"resources": [{"server": "fake", "uri": "fake://doc", "name": "doc", "mimeType": "text/plain"}]})
    );
    let end = tool_end(&mut pi);
    assert_eq!(result_text(&end["result"]), "the doc text");
    let end = tool_end(&mut pi);
    assert_eq!(
        result_text(&end["result"]),
        "MCP server \"nope\" has no resources. Servers with resources: fake"
    );
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    let declared = declared_tools(&requests[0]);
    assert!(declared.contains(&"mcp__fake__echo".to_string()));
    assert!(
        !declared.contains(&"mcp__fake__crash".to_string())
            && !declared.contains(&"mcp__fake__garbage".to_string())
    );
    pi.close_stdin();
    pi.wait_for_exit();

    let setup = Setup::anthropic(&fake)
        .arg("--tools")
        .arg("read,mcp__fake__ec*");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "filtered"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(5, pi.timeout());
    assert_eq!(declared_tools(&requests[4]), ["read", "mcp__fake__echo"]);
    pi.close_stdin();
    pi.wait_for_exit();

    // pi 1.6.0: a `--tools` list without an `mcp__` entry declares no (direct) MCP tool.
    let setup = Setup::anthropic(&fake).arg("--tools").arg("read,write");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "built-ins"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(6, pi.timeout());
    assert_eq!(declared_tools(&requests[5]), ["read", "write"]);
    pi.close_stdin();
    pi.wait_for_exit();

    // `--exclude-tools` takes MCP tools out too, patterns included.
    let setup = Setup::anthropic(&fake).arg("-xt").arg("mcp__fake__e*,bash");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "excluded"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(7, pi.timeout());
    let declared = declared_tools(&requests[6]);
    assert!(
        !declared.contains(&"mcp__fake__echo".to_string())
            && !declared.contains(&"bash".to_string()),
        "{declared:?}"
    );
    assert!(
        declared.contains(&"mcp__fake__slow".to_string()) && declared.contains(&"read".to_string()),
        "{declared:?}"
    );
    pi.close_stdin();
    pi.wait_for_exit();

    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake).arg("--no-mcp"));
    pi.command("1", "prompt", json!({"message": "none"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(8, pi.timeout());
    assert!(
        declared_tools(&requests[7])
            .iter()
            .all(|t| !t.contains("mcp"))
    );
    let servers = pi.command("2", "get_mcp_servers", json!({}));
    assert_eq!(servers["data"], json!({"servers": [], "errors": []}));
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn pi_mcp_add_list_remove_edit_mcp_json() {
    if is_reference() {
        return;
    }
    let workspace = Workspace::new();
    let run = |args: &[&str]| {
        Command::new(crate::support::binary())
            .arg("mcp")
            .args(args)
            .current_dir(workspace.cwd())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PI_CODING_AGENT_DIR", workspace.agent_dir())
            .env("HOME", workspace.root())
            .output()
            .unwrap()
    };
    let path = workspace.agent_dir().join("mcp.json");
    std::fs::write(&path, "{\n    \"keep\": true\n}\n").unwrap();
    let server = fixture_path("mcp/fake_server.py");
    let out = run(&[
        "add",
        "fake",
        "--env",
        "A=b",
        "--",
        server.to_str().unwrap(),
        "--x",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&[
        "add",
        "web",
        "--url",
        "http://127.0.0.1:9/mcp",
        "--bearer-token-env-var",
        "WEB_TOKEN",
    ]);
    assert!(out.status.success());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with("{\n    \"keep\": true,\n    \"mcpServers\": {\n        \"fake\""),
        "{text}"
    );
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        parsed["mcpServers"]["fake"],
        json!({"command": server.to_str().unwrap(), "args": ["--x"], "env": {"A": "b"}})
    );
    assert_eq!(
        parsed["mcpServers"]["web"],
        json!({"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${WEB_TOKEN}"}})
    );
    // `web` cannot connect: list says so and exits 1 (pi's format).
    let out = run(&["list"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let expected = format!(
        "fake: connected, 9 tools (codemode, global)\n  {} --x\n  tools: echo, crash, garbage, slow, progress, huge, grow, mixed, picture\n  offers resources\nweb: failed (codemode, global)\n  http://127.0.0.1:9/mcp\n  MCP HTTP request failed: ",
        server.display()
    );
    assert!(stdout.starts_with(&expected), "{stdout}");
    let out = run(&["remove", "web"]);
    assert!(out.status.success());
    let out = run(&["list", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["servers"][0]["name"], "fake");
    assert_eq!(listed["servers"][0]["scope"], "global");
    assert_eq!(listed["servers"][0]["state"], "connected");
    assert_eq!(listed["servers"][0]["resources"], true);
    let out = run(&["remove", "web"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "No global MCP server named \"web\" in {}.\n",
            path.display()
        )
    );
    let out = run(&["add", "old", "--url", "http://x/sse", "--description"]);
    assert_eq!(out.status.code(), Some(1));
    let _ = Instant::now();
}

#[test]
fn http_retries_transient_statuses_renews_a_forgotten_session_and_redacts_header_secrets() {
    if is_reference() {
        return;
    }
    let server = ScriptedHttp::start(Box::new(|request, before| {
        let count = |m: &str| before.iter().filter(|r| r.rpc_method() == m).count();
        match (request.method.as_str(), request.rpc_method()) {
            ("GET", _) => (405, vec![], String::new()),
            ("DELETE", _) => (200, vec![], String::new()),
            // The first attempt meets an overloaded server.
            (_, "initialize") if count("initialize") == 0 => (503, vec![], "busy".into()),
            (_, "initialize") => {
                let session = format!("s{}", count("initialize"));
                let result = json!({"protocolVersion": "2025-03-26", "capabilities": {"tools": {}}, "serverInfo": {"name": "scripted", "version": "1"}});
                rpc_answer(request, result, &session)
            }
            (_, "tools/list") => rpc_answer(
                request,
                json!({"tools": [{"name": "whoami", "inputSchema": {}}]}),
                "",
            ),
            // The first call finds its session forgotten.
            (_, "tools/call") if count("tools/call") == 0 => {
                (404, vec![], "no such session".into())
            }
            (_, "tools/call") => {
                let text = format!(
                    "{} on {}",
                    request.header("authorization").unwrap_or(""),
                    request.header("mcp-session-id").unwrap_or("")
                );
                rpc_answer(
                    request,
                    json!({"content": [{"type": "text", "text": text}]}),
                    "",
                )
            }
            _ => (202, vec![], String::new()),
        }
    }));
    let fake = FakeProvider::start(vec![
        tool_call("c1", "mcp__scripted__whoami", json!({})),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    write_mcp_json(
        &workspace,
        json!({"scripted": {"url": format!("http://127.0.0.1:{}/mcp", server.port), "headers": {"Authorization": "Bearer ${MCP_TEST_TOKEN}"}}}),
    );
    let setup = Setup::anthropic(&fake).env("MCP_TEST_TOKEN", "tok-9f8e7d6c5b4a");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "who"}));
    let end = tool_end(&mut pi);
    assert_eq!(
        result_text(&end["result"]),
        "Bearer [redacted] on s2",
        "{end}"
    );
    pi.wait_for_event("agent_end");
    let requests = server.requests();
    let methods: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {}", r.method, r.rpc_method()))
        .collect();
    let initializes = methods.iter().filter(|m| m.ends_with("initialize")).count();
    assert_eq!(initializes, 3, "{methods:?}");
    let call = requests
        .iter()
        .rfind(|r| r.rpc_method() == "tools/call")
        .unwrap();
    assert_eq!(
        call.header("authorization"),
        Some("Bearer tok-9f8e7d6c5b4a")
    );
    assert_eq!(call.header("mcp-protocol-version"), Some("2025-03-26"));
    assert_eq!(
        call.header("accept"),
        Some("application/json, text/event-stream")
    );
    // The server's own event stream was asked for (it offers none: 405).
    let get = requests
        .iter()
        .find(|r| r.method == "GET")
        .expect("a GET for the event stream");
    assert_eq!(get.header("accept"), Some("text/event-stream"));
    pi.close_stdin();
    pi.wait_for_exit();
    // The session ends with a DELETE.
    let ended = |r: &HttpRequest| r.method == "DELETE" && r.header("mcp-session-id") == Some("s2");
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until && !server.requests().iter().any(ended) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        server.requests().iter().any(ended),
        "no DELETE of the session"
    );
}

#[test]
fn http_401_is_a_clear_error_naming_the_server() {
    if is_reference() {
        return;
    }
    let server = ScriptedHttp::start(Box::new(|_, _| {
        (
            401,
            vec![("WWW-Authenticate".into(), "Bearer".into())],
            String::new(),
        )
    }));
    let fake = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    write_mcp_json(
        &workspace,
        json!({"locked": {"url": format!("http://127.0.0.1:{}/mcp", server.port), "headers": {"Authorization": "Bearer wrong"}}}),
    );
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    let deadline = pi.deadline();
    let notice = pi
        .recv_until(
            |r| r["type"] == "extension_ui_request" && r["method"] == "notify",
            deadline,
        )
        .pop()
        .unwrap();
    assert_eq!(
        notice["message"],
        "MCP servers need attention:\n  locked: failed: MCP server \"locked\" requires authentication (HTTP 401): check the Authorization header in mcp.json\nRun /mcp to fix."
    );
    // Not transient: one attempt.
    assert_eq!(server.requests().len(), 1);
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn the_first_prompt_waits_for_a_slow_server_with_declared_tools() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![Reply::sse(anthropic_text(&["Hi."]))]);
    let workspace = Workspace::new();
    let (entry, _) = fake_server(&workspace, json!({"args": ["--slow-start", "1.5"]}));
    write_mcp_json(&workspace, json!({"slow": entry}));
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    // Sent at once: the server is still asleep.
    let state = pi.command("1", "prompt", json!({"message": "hello"}));
    assert_eq!(state["data"]["disposition"], "started");
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    assert!(
        declared_tools(&requests[0]).contains(&"mcp__slow__echo".to_string()),
        "{:?}",
        declared_tools(&requests[0])
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn the_resource_tools_wait_for_servers_still_connecting() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![
        tool_call("c1", "list_mcp_resources", json!({})),
        Reply::sse(anthropic_text(&["Listed."])),
    ]);
    let workspace = Workspace::new();
    let (fast, _) = fake_server(&workspace, json!({}));
    let (slow, _) = fake_server(&workspace, json!({"args": ["--slow-start", "4"]}));
    write_mcp_json(&workspace, json!({"fast": fast, "slow": slow}));
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    // The first prompt's wait is cut short, so the next one runs while `slow` still starts.
    pi.command("1", "prompt", json!({"message": "hello"}));
    pi.command("2", "abort", json!({}));
    pi.wait_for_event("agent_settled");
    let until = Instant::now() + pi.timeout();
    let mut states = Value::Null;
    while Instant::now() < until {
        let id = format!("s{}", pi.records().len());
        states = pi.command(&id, "get_mcp_servers", json!({}))["data"]["servers"].clone();
        if states[0]["state"] == "connected" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(states[0]["state"], "connected", "{states}");
    assert_eq!(states[1]["state"], "connecting", "{states}");
    pi.command("3", "prompt", json!({"message": "resources"}));
    // As pi: the call waits for `slow` and lists the resources of both.
    let end = tool_end(&mut pi);
    let listed: Value = serde_json::from_str(&result_text(&end["result"])).unwrap();
    let servers: Vec<&str> = listed["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["server"].as_str().unwrap())
        .collect();
    assert_eq!(servers, ["fast", "slow"], "{listed}");
    pi.wait_for_event("agent_end");
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn abort_while_the_first_prompt_waits_for_servers_ends_quietly() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![Reply::sse(anthropic_text(&["Later."]))]);
    let workspace = Workspace::new();
    let (entry, _) = fake_server(&workspace, json!({"args": ["--slow-start", "3"]}));
    write_mcp_json(&workspace, json!({"slow": entry}));
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    pi.command("1", "prompt", json!({"message": "hello"}));
    let state = pi.command("2", "get_state", json!({}));
    assert_eq!(state["data"]["isStreaming"], true, "{state}");
    pi.command("3", "abort", json!({}));
    pi.wait_for_event("agent_settled");
    // Nothing was asked of the model; the next prompt runs (no second wait).
    assert!(fake.requests().is_empty());
    pi.command("4", "prompt", json!({"message": "again"}));
    pi.wait_for_event("agent_end");
    assert_eq!(fake.wait_for_requests(1, pi.timeout()).len(), 1);
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn the_approval_gate_applies_to_mcp_tools() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![
        tool_call("c1", "mcp__fake__echo", json!({"text": "secret plan"})),
        Reply::sse(anthropic_text(&["Denied."])),
    ]);
    let workspace = Workspace::new();
    let (entry, log) = fake_server(&workspace, json!({}));
    write_mcp_json(&workspace, json!({"fake": entry}));
    let settings = json!({"approvals": {"rules": [{"tool": "mcp__fake__*", "action": "deny", "reason": "No MCP calls here"}]}});
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake).settings(settings));
    pi.command("1", "prompt", json!({"message": "go"}));
    let end = tool_end(&mut pi);
    assert_eq!(end["isError"], true);
    assert!(
        result_text(&end["result"]).contains("No MCP calls here"),
        "{end}"
    );
    pi.wait_for_event("agent_end");
    assert!(
        log_messages(&log)
            .iter()
            .all(|m| m["method"] != "tools/call")
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn a_config_with_only_invalid_entries_is_reported_at_startup() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    write_mcp_json(
        &workspace,
        json!({"old": {"type": "sse", "url": "http://127.0.0.1:1/sse"}}),
    );
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    let deadline = pi.deadline();
    let notice = pi
        .recv_until(
            |r| r["type"] == "extension_ui_request" && r["method"] == "notify",
            deadline,
        )
        .pop()
        .unwrap();
    let path = workspace.agent_dir().join("mcp.json");
    assert_eq!(
        notice["message"],
        format!(
            "MCP servers need attention:\n  config: {}: server \"old\": legacy SSE transport is not supported; use the streamable HTTP URL\nRun /mcp to fix.",
            path.display()
        )
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn mcp_commands_wait_for_servers_still_connecting() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    let (entry, _) = fake_server(&workspace, json!({"args": ["--slow-start", "3"]}));
    write_mcp_json(&workspace, json!({"slow": entry}));
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    // Too many words: the usage at once, as pi (the server is still asleep).
    pi.send(json!({"id": "1", "type": "prompt", "message": "/mcp login a b"}));
    let deadline = pi.deadline();
    let records = pi.recv_until(|r| r["id"] == "1", deadline);
    assert!(
        records.iter().any(|r| r["method"] == "notify"
            && r["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Usage"))),
        "{records:?}"
    );
    let states = pi.command("s", "get_mcp_servers", json!({}));
    assert_eq!(states["data"]["servers"][0]["state"], "connecting");
    // `/mcp` waits until the server connected, then tells its state.
    pi.send(json!({"id": "2", "type": "prompt", "message": "/mcp"}));
    let deadline = pi.deadline();
    let records = pi.recv_until(|r| r["id"] == "2", deadline);
    assert_eq!(records.last().unwrap()["data"]["disposition"], "handled");
    let notices: Vec<&str> = records
        .iter()
        .filter(|r| r["method"] == "notify")
        .filter_map(|r| r["message"].as_str())
        .collect();
    assert_eq!(
        notices,
        ["slow: connected, 9 tools (direct)"],
        "{records:?}"
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

/// A streamable-HTTP server that answers only requests with a bearer (a 401 without one); its
/// one tool, `whoami`, echoes the `Authorization` header it got.
fn bearer_server() -> ScriptedHttp {
    ScriptedHttp::start(Box::new(|request, _| {
        let Some(authorization) = request
            .header("authorization")
            .filter(|a| a.starts_with("Bearer "))
        else {
            return (
                401,
                vec![("WWW-Authenticate".into(), "Bearer".into())],
                String::new(),
            );
        };
        match (request.method.as_str(), request.rpc_method()) {
            ("GET", _) => (405, vec![], String::new()),
            ("DELETE", _) => (200, vec![], String::new()),
            (_, "initialize") => {
                let result = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "keyed", "version": "1"}});
                rpc_answer(request, result, "s1")
            }
            (_, "tools/list") => rpc_answer(
                request,
                json!({"tools": [{"name": "whoami", "inputSchema": {"type": "object"}}]}),
                "",
            ),
            (_, "tools/call") => rpc_answer(
                request,
                json!({"content": [{"type": "text", "text": authorization}]}),
                "",
            ),
            _ => (202, vec![], String::new()),
        }
    }))
}

/// The `Authorization` headers of the server's requests of JSON-RPC `method`.
fn bearers(server: &ScriptedHttp, method: &str) -> Vec<String> {
    server
        .requests()
        .iter()
        .filter(|r| r.rpc_method() == method)
        .map(|r| r.header("authorization").unwrap_or("none").to_string())
        .collect()
}

/// pi 1.6.0's `"auth": {"provider": "<provider>"}`: the provider's credential is the server's
/// bearer, read for each request (a changed key is used by the next call), redacted; without
/// one the server needs a sign-in, which names the provider's `/login`, and `/mcp login` is not
/// for it (pi's texts). Passes against pi 1.6.0 too (there the tool result is not redacted).
#[test]
fn auth_provider_sends_the_providers_credential_read_on_each_request() {
    let server = bearer_server();
    let fake = FakeProvider::start(vec![
        tool_call("c1", "mcp__keyed__whoami", json!({})),
        Reply::sse(anthropic_text(&["One."])),
        tool_call("c2", "mcp__keyed__whoami", json!({})),
        Reply::sse(anthropic_text(&["Two."])),
        tool_call("c3", "mcp__keyed__whoami", json!({})),
        Reply::sse(anthropic_text(&["Three."])),
    ]);
    let workspace = Workspace::new();
    let auth = workspace.agent_dir().join("auth.json");
    let (first, second) = ("sk-mcp-first-4f3e2d1c", "sk-mcp-second-9a8b7c6d");
    let key = |key: &str| json!({"openai": {"type": "api_key", "key": key}}).to_string();
    std::fs::write(&auth, key(first)).unwrap();
    let url = format!("http://127.0.0.1:{}/mcp", server.port);
    write_mcp_json(
        &workspace,
        json!({"keyed": {"url": url, "auth": {"provider": "openai"}}}),
    );
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    let shown = |token: &str| match is_reference() {
        true => format!("Bearer {token}"),
        false => "Bearer [redacted]".to_string(),
    };
    pi.command("1", "prompt", json!({"message": "who"}));
    let end = tool_end(&mut pi);
    assert_eq!(result_text(&end["result"]), shown(first), "{end}");
    pi.wait_for_event("agent_end");
    // Another key (a refresh, a new /login): the next request sends it.
    std::fs::write(&auth, key(second)).unwrap();
    pi.command("2", "prompt", json!({"message": "again"}));
    let end = tool_end(&mut pi);
    assert_eq!(result_text(&end["result"]), shown(second), "{end}");
    pi.wait_for_event("agent_end");
    assert_eq!(bearers(&server, "initialize")[0], format!("Bearer {first}"));
    assert_eq!(
        bearers(&server, "tools/call"),
        [format!("Bearer {first}"), format!("Bearer {second}")]
    );

    // No credential: the call is refused, and the server waits for the provider's own login.
    std::fs::write(&auth, "{}").unwrap();
    let needs_login = "MCP server \"keyed\" requires sign-in. Run /login openai to sign in.";
    pi.command("3", "prompt", json!({"message": "once more"}));
    let end = tool_end(&mut pi);
    assert_eq!(end["isError"], true, "{end}");
    assert_eq!(result_text(&end["result"]), needs_login, "{end}");
    pi.wait_for_event("agent_end");
    pi.send(json!({"id": "s", "type": "prompt", "message": "/mcp"}));
    assert_eq!(
        next_notify(&mut pi, "keyed: ").0,
        "keyed: needs sign-in, run /mcp login keyed (direct)"
    );
    pi.send(json!({"id": "r", "type": "prompt", "message": "/mcp reconnect keyed"}));
    assert_eq!(
        next_notify(&mut pi, "MCP server"),
        (needs_login.into(), "error".into())
    );
    assert_eq!(pi.response_for("r")["data"]["disposition"], "handled");
    pi.send(json!({"id": "l", "type": "prompt", "message": "/mcp login keyed"}));
    assert_eq!(
        next_notify(&mut pi, "No enabled"),
        (
            "No enabled MCP server uses OAuth. Only HTTP servers without an Authorization header do.".into(),
            "error".into()
        )
    );
    assert_eq!(bearers(&server, "initialize").last().unwrap(), "none");
    if !is_reference() {
        // The key never reached stdout or the log.
        let stdout: String = pi.records().iter().map(|r| r.to_string()).collect();
        assert!(!stdout.contains(first) && !stdout.contains(second));
        let stderr = pi.stderr_text();
        assert!(!stderr.contains(first) && !stderr.contains(second));
    }
    pi.close_stdin();
    pi.wait_for_exit();
}

/// `pi mcp` for a server with `auth.provider`, as pi 1.6.0 prints it: `list` names the
/// provider's `/login` (and `authProvider` in `--json`), `login` and `logout` point to
/// `pi auth`, and an `auth` that would send the credential over plain HTTP is refused. Passes
/// against pi 1.6.0 too.
#[test]
fn pi_mcp_names_the_providers_login_for_an_auth_provider_server() {
    let server = bearer_server();
    let workspace = Workspace::new();
    let url = format!("http://127.0.0.1:{}/mcp", server.port);
    write_mcp_json(
        &workspace,
        json!({
            "keyed": {"url": url, "auth": {"provider": "radius"}},
            "plain": {"url": "http://mcp.example.com/mcp", "auth": {"provider": "radius"}}
        }),
    );
    let pi_mcp = |args: &[&str]| {
        Command::new(crate::support::binary())
            .arg("mcp")
            .args(args)
            .current_dir(workspace.cwd())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PI_CODING_AGENT_DIR", workspace.agent_dir())
            .env("HOME", workspace.root())
            .env("PI_OFFLINE", "1")
            .output()
            .unwrap()
    };
    let file = workspace.agent_dir().join("mcp.json");
    let out = pi_mcp(&["list"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "keyed: needs sign-in (direct, global)\n  {url}\n  sign in with: /login radius in pi\nconfig error: {}: server \"plain\": auth requires an https URL, or http on localhost, 127.0.0.1, or [::1]\n",
            file.display()
        )
    );
    let out = pi_mcp(&["list", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["servers"][0],
        json!({"name": "keyed", "scope": "global", "source": file.to_string_lossy(), "enabled": true,
            "exposure": "direct", "transport": url, "authProvider": "radius", "state": "needs-auth", "tools": []})
    );
    for command in ["login", "logout"] {
        let out = pi_mcp(&[command, "keyed"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!(
                "MCP server \"keyed\" uses the credentials of provider \"radius\". Run \"pi auth {command} radius\"."
            )),
            "{out:?}"
        );
    }
    // No request carried a credential (there is none).
    assert!(bearers(&server, "initialize").iter().all(|b| b == "none"));
}

/// An expired subscription login of the provider is refreshed (under pi's lock, written back)
/// before the MCP request, as the provider's own requests refresh it; the fresh token is the
/// bearer, and `pi mcp list` uses it too. pi-rs only: the token endpoint is pointed at
/// 127.0.0.1 with pi-rs's `PI_OAUTH_RADIUS_URL`.
#[test]
fn auth_provider_refreshes_an_expired_login_before_the_request() {
    if is_reference() {
        return;
    }
    let server = bearer_server();
    let token = |access: &str, refresh: &str| {
        Reply::status(
            200,
            json!({"access_token": access, "refresh_token": refresh, "expires_in": 3600, "scope": "gateway offline_access"}).to_string(),
            &[("content-type", "application/json")],
        )
    };
    let gateway =
        FakeProvider::start_auth_server(vec![token("radius-access-2", "radius-refresh-2")]);
    let workspace = Workspace::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let auth = workspace.agent_dir().join("auth.json");
    std::fs::write(
        &auth,
        json!({"radius": {"type": "oauth", "access": "radius-access-1", "refresh": "radius-refresh-1",
            "expires": now - 1000.0, "scope": "gateway offline_access"}})
        .to_string(),
    )
    .unwrap();
    let url = format!("http://127.0.0.1:{}/mcp", server.port);
    write_mcp_json(
        &workspace,
        json!({"keyed": {"url": url, "auth": {"provider": "radius"}}}),
    );
    let fake = FakeProvider::start(vec![]);
    let setup = Setup::anthropic(&fake).env("PI_OAUTH_RADIUS_URL", &gateway.base_url());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let data = crate::support::mcp_servers_until(&mut pi, |d| {
        crate::support::mcp_server(d, "keyed").is_some_and(|s| s["state"] != "connecting")
    });
    let keyed = crate::support::mcp_server(&data, "keyed").unwrap();
    assert_eq!(keyed["state"], "connected", "{data}");
    assert_eq!(keyed["tools"], json!(["mcp__keyed__whoami"]));
    let refreshes = gateway.requests();
    assert_eq!(refreshes.len(), 1);
    assert_eq!(refreshes[0].path, "/v1/oauth/token");
    assert!(
        bearers(&server, "initialize")
            .iter()
            .all(|b| b == "Bearer radius-access-2")
    );
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&auth).unwrap()).unwrap();
    assert_eq!(stored["radius"]["refresh"], "radius-refresh-2");
    pi.close_stdin();
    pi.wait_for_exit();
    let stdout: String = pi.records().iter().map(|r| r.to_string()).collect();
    assert!(!stdout.contains("radius-access-2"));
}
