//! MCP servers extensions register (pi 1.6.0's `pi.registerMcpServer()`, protocol v2's
//! `register_mcp_server`) through the real binary: the v2 fixture registers the real everything
//! server (`target/mcp-servers`), which joins the MCP host beside mcp.json's servers, shows in
//! `get_mcp_servers` and `/mcp`, and offers its tools to the model; `unregister_mcp_server` and
//! the extension's exit close it; an mcp.json server of the same name takes precedence.
//!
//! Reference: pi runs TypeScript extensions, not executables; the semantics compared are those
//! of pi 1.6.0's `dist/core/mcp-servers.js` and `dist/extensions/mcp/index.js`.

use serde_json::{Value, json};

use crate::extensions::{extension, with_extensions};
use crate::extensions_v2::{ask, next_report};
use crate::fake_provider::{FakeProvider, Reply, fixture_path};
use crate::mcp::{declared_tools, everything_stdio, tool_call};
use crate::sse::anthropic_text;
use crate::support::{
    Pi, Setup, Workspace, is_reference, mcp_server, mcp_servers_until, next_notify, result_text,
    write_mcp_json,
};

#[test]
fn a_registered_server_connects_offers_its_tools_and_leaves_when_unregistered() {
    if is_reference() {
        return;
    }
    let Some(mut config) = everything_stdio() else {
        return;
    };
    let fake = FakeProvider::start(vec![
        tool_call(
            "toolu_1",
            "mcp__everything__echo",
            json!({"message": "from a registered server"}),
        ),
        Reply::sse(anthropic_text(&["Done."])),
        Reply::sse(anthropic_text(&["Without it."])),
    ]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    let path = extension("v2.py");
    config["exposure"] = json!("direct");
    config["description"] = json!("Everything, registered");
    let register =
        json!({"type": "register_mcp_server", "id": "r1", "name": "everything", "config": config});
    let answer = ask(&mut pi, &[register], "r1");
    assert_eq!(answer["result"], Value::Null, "{answer}");
    assert!(answer.get("error").is_none(), "{answer}");
    // pi's `mcp_servers_change` with every registration (pi's `RegisteredMcpServer`).
    let registered = json!([{"name": "everything", "config": config, "extensionPath": path}]);
    let change = next_report(&mut pi, "event ", |e| e["type"] == "mcp_servers_change");
    assert_eq!(change["servers"], registered, "{change}");
    let query = json!({"type": "query", "id": "q1", "query": "mcp_servers"});
    assert_eq!(ask(&mut pi, &[query], "q1")["result"], registered);

    let data = mcp_servers_until(&mut pi, |d| {
        mcp_server(d, "everything").is_some_and(|s| s["state"] == "connected")
    });
    let everything = mcp_server(&data, "everything").expect("listed");
    assert_eq!(everything["state"], "connected", "{data}");
    assert_eq!(everything["scope"], "extension", "{everything}");
    assert_eq!(everything["source"], path.as_str(), "{everything}");
    assert_eq!(everything["description"], "Everything, registered");
    pi.send(json!({"id": "m", "type": "prompt", "message": "/mcp"}));
    let (status, _) = next_notify(&mut pi, "everything: ");
    assert!(
        status.starts_with("everything: connected, ") && status.ends_with(" tools (direct)"),
        "{status}"
    );

    // Its tools reach the model, and a call goes to the server.
    pi.command("p1", "prompt", json!({"message": "echo"}));
    let end = pi.wait_for_event("tool_execution_end");
    assert_eq!(end["toolName"], "mcp__everything__echo");
    assert_eq!(end["isError"], false, "{end}");
    assert_eq!(
        result_text(&end["result"]),
        "Echo: from a registered server"
    );
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert!(declared_tools(&requests[0]).contains(&"mcp__everything__echo".to_string()));

    // Unregistered: closed, gone from get_mcp_servers, its tools no longer declared.
    let unregister = json!({"type": "unregister_mcp_server", "id": "u1", "name": "everything"});
    let answer = ask(&mut pi, &[unregister], "u1");
    assert_eq!(answer["result"], Value::Null, "{answer}");
    let change = next_report(&mut pi, "event ", |e| e["type"] == "mcp_servers_change");
    assert_eq!(change["servers"], json!([]));
    let data = pi.command("s", "get_mcp_servers", json!({}))["data"].clone();
    assert!(mcp_server(&data, "everything").is_none(), "{data}");
    pi.command("p2", "prompt", json!({"message": "again"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(3, pi.timeout());
    let declared = declared_tools(&requests[2]);
    assert!(
        !declared.iter().any(|t| t.contains("everything")),
        "{declared:?}"
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn mcp_json_takes_precedence_bad_registrations_are_refused_and_an_exit_removes_servers() {
    if is_reference() {
        return;
    }
    let Some(stdio) = everything_stdio() else {
        return;
    };
    let fake = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    write_mcp_json(&workspace, json!({"docs": stdio}));
    let mut pi = Pi::spawn_in(
        &workspace,
        &with_extensions(Setup::anthropic(&fake), &["v2.py"]),
    );
    let path = extension("v2.py");
    let lines = [
        json!({"type": "register_mcp_server", "id": "a", "name": "docs", "config": stdio}),
        json!({"type": "register_mcp_server", "id": "b", "name": "bad name", "config": stdio}),
        json!({"type": "register_mcp_server", "id": "c", "name": "x", "config": {"command": "srv", "env": {"T": "!cat key"}}}),
        json!({"type": "register_mcp_server", "id": "d", "name": "my-tools", "config": stdio}),
        json!({"type": "register_mcp_server", "id": "e", "name": "my_tools", "config": stdio}),
    ];
    assert_eq!(ask(&mut pi, &lines, "a")["result"], Value::Null);
    let bad = next_report(&mut pi, "answer ", |a| a["id"] == "b");
    assert_eq!(
        bad["error"],
        format!(
            "Invalid MCP server registered by extension \"{path}\": invalid server name \"bad name\" (use letters, digits, \"_\" and \"-\")"
        )
    );
    let command = next_report(&mut pi, "answer ", |a| a["id"] == "c");
    assert!(
        command["error"]
            .as_str()
            .is_some_and(|e| e.contains("`!command` values are not accepted")),
        "{command}"
    );
    assert_eq!(
        next_report(&mut pi, "answer ", |a| a["id"] == "d")["result"],
        Value::Null
    );
    let clash = next_report(&mut pi, "answer ", |a| a["id"] == "e");
    assert_eq!(
        clash["error"],
        "MCP server \"my_tools\" conflicts with registered server \"my-tools\""
    );

    // `docs` stays mcp.json's (named as an override); `my-tools` connects beside it.
    let data = mcp_servers_until(&mut pi, |d| {
        mcp_server(d, "my-tools").is_some_and(|s| s["state"] == "connected")
            && mcp_server(d, "docs").is_some_and(|s| s["state"] == "connected")
    });
    let names: Vec<&str> = data["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["docs", "my-tools"], "{data}");
    assert_eq!(mcp_server(&data, "docs").unwrap()["scope"], "global");
    let mcp_json = workspace.agent_dir().join("mcp.json");
    let overridden = format!(
        "\"docs\" registered by {path} is overridden by \"docs\" in {}",
        mcp_json.display()
    );
    assert_eq!(data["overridden"], json!([overridden]), "{data}");
    pi.send(json!({"id": "m", "type": "prompt", "message": "/mcp"}));
    let (status, _) = next_notify(&mut pi, "docs: ");
    assert!(
        status.ends_with(&format!("\noverridden: {overridden}")),
        "{status}"
    );

    // The extension fails (a line that is not protocol): its server closes.
    pi.send(json!({"id": "x", "type": "prompt", "message": "/send not json"}));
    pi.wait_for_event("extension_error");
    let data = mcp_servers_until(&mut pi, |d| mcp_server(d, "my-tools").is_none());
    assert!(mcp_server(&data, "my-tools").is_none(), "{data}");
    assert_eq!(data["overridden"], json!([]), "{data}");
    assert!(mcp_server(&data, "docs").is_some(), "{data}");
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn without_mcp_support_a_registration_is_an_extension_error_as_in_pi() {
    let fake = FakeProvider::start(vec![]);
    // v2.py not listening to `mcp_servers_change`: nothing connects MCP servers.
    let setup = with_extensions(Setup::anthropic(&fake), &["v2.py"])
        .arg("--no-mcp")
        .env("V2_NO_MCP_EVENTS", "1");
    let mut pi = Pi::spawn(&setup);
    let register = json!({"type": "register_mcp_server", "id": "r", "name": "jira", "config": {"url": "https://mcp.example.com/jira"}});
    pi.send(json!({"id": "x", "type": "prompt", "message": format!("/send {register}")}));
    let error = pi.wait_for_event("extension_error");
    assert_eq!(
        error,
        json!({"type": "extension_error", "extensionPath": extension("v2.py"), "event": "register_mcp_server",
            "error": "MCP server \"jira\" is registered, but no loaded extension connects MCP servers; another extension may have replaced the built-in MCP support"})
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

/// A server an extension registers after start-up is waited for as the startup connections
/// are (pi 1.6.0's `/mcp` waits for the servers it starts with, extensions' among them): `/mcp`
/// sent while it connects answers once it connected.
#[test]
fn mcp_commands_wait_for_a_registered_server_still_connecting() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    let config = json!({"command": fixture_path("mcp/fake_server.py").to_string_lossy(),
        "args": ["--slow-start", "3"], "exposure": "direct"});
    let register =
        json!({"type": "register_mcp_server", "id": "r1", "name": "slow", "config": config});
    assert_eq!(ask(&mut pi, &[register], "r1")["result"], Value::Null);
    let states = pi.command("s", "get_mcp_servers", json!({}));
    assert_eq!(states["data"]["servers"][0]["state"], "connecting");
    pi.send(json!({"id": "m", "type": "prompt", "message": "/mcp"}));
    let deadline = pi.deadline();
    let records = pi.recv_until(|r| r["id"] == "m", deadline);
    assert_eq!(records.last().unwrap()["data"]["disposition"], "handled");
    let notices: Vec<&str> = records
        .iter()
        .filter(|r| r["method"] == "notify")
        .filter_map(|r| r["message"].as_str())
        // v2.py's own report of `mcp_servers_change`.
        .filter(|m| !m.starts_with("event "))
        .collect();
    assert_eq!(
        notices,
        ["slow: connected, 9 tools (direct)"],
        "{records:?}"
    );
    pi.close_stdin();
    pi.wait_for_exit();
}
