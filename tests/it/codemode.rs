//! The `codemode` tool through the real binary: the model (the scripted fake provider) sends a
//! JavaScript script; its nested calls reach built-in tools and the fake MCP server
//! (`fixtures/mcp/fake_server.py`) through the same pipeline as direct calls, visible as
//! `tool_execution_*` records with `parentToolCallId`; only the script's output reaches the
//! model. Limits and hostile scripts end the script with pi 1.6.0's errors, never the process.

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, check_tool_pairing, fixture_path};
use crate::sse::{AnthropicStream, anthropic_text};
use crate::support::{
    Pi, Setup, Workspace, is_reference, result_text, tool_result_block, tool_result_block_text,
    wait_for_file,
};

/// A reply with one codemode call per `(id, code)`.
fn scripts(calls: &[(&str, &str)]) -> Reply {
    let mut stream = AnthropicStream::new();
    for (id, code) in calls {
        stream = stream.tool_use(id, "codemode", &[&json!({ "code": code }).to_string()]);
    }
    Reply::sse(stream.finish("tool_use"))
}

/// codemode on through settings `defaultTools: ["+codemode"]`, the fake MCP server connected.
fn spawn_with_fake_server(fake: &FakeProvider) -> (Pi, std::path::PathBuf) {
    let workspace = Workspace::new();
    let log = workspace.root().join("fake-mcp.jsonl");
    let servers = json!({"mcpServers": {"fake": {
        "command": fixture_path("mcp/fake_server.py").to_string_lossy(),
        "env": {"FAKE_MCP_LOG": log.to_string_lossy()},
        "exposure": "direct",
    }}});
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        serde_json::to_string(&servers).unwrap(),
    )
    .unwrap();
    let setup = Setup::anthropic(fake).settings(json!({"defaultTools": ["+codemode"]}));
    (Pi::spawn_in(&workspace, &setup), log)
}

/// The `tool_execution_end` of the call `id`.
fn end_of(records: &[Value], id: &str) -> Value {
    records
        .iter()
        .find(|r| r["type"] == "tool_execution_end" && r["toolCallId"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no tool_execution_end for {id}"))
}

#[test]
fn a_parallel_script_with_a_failing_call_in_all_settled() {
    if is_reference() {
        return;
    }
    let code = r#"const results = await Promise.allSettled([
  tools.mcp__fake__echo({ text: "one" }),
  tools.mcp__fake__echo({ text: "two" }),
  tools.read({ path: "missing.txt" }),
]);
console.log("settled", results.length);
text(results.map((r) => r.status === "fulfilled" ? r.value.content[0].text : "failed: " + r.reason.message).join("\n"));
return { calls: results.length };"#;
    let fake = FakeProvider::start(vec![
        scripts(&[("cm1", code)]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let (mut pi, _log) = spawn_with_fake_server(&fake);
    pi.command("1", "prompt", json!({"message": "echo twice"}));
    let records = pi.records_until_event("agent_end");
    let nested: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "tool_execution_start" && r["parentToolCallId"] == "cm1")
        .collect();
    let mut ids: Vec<&str> = nested
        .iter()
        .map(|r| r["toolCallId"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["cm1/1", "cm1/2", "cm1/3"], "{nested:?}");
    let read_end = records
        .iter()
        .find(|r| {
            r["type"] == "tool_execution_end"
                && r["toolName"] == "read"
                && r["parentToolCallId"] == "cm1"
        })
        .expect("the nested read ends");
    assert_eq!(read_end["isError"], true);
    let end = end_of(&records, "cm1");
    assert_eq!(end["isError"], false, "{end}");
    assert!(end.get("parentToolCallId").is_none());
    let text = result_text(&end["result"]);
    assert!(text.starts_with("Script completed\nWall time "), "{text}");
    assert!(
        text.contains("==> text 1/2 <==\necho: one\necho: two\nfailed: "),
        "{text}"
    );
    assert!(text.contains("missing.txt"), "{text}");
    assert!(text.contains("==> text 2/2 <==\n{\"calls\":3}"), "{text}");
    assert!(
        text.ends_with("<console_output>\nsettled 3\n</console_output>"),
        "{text}"
    );
    let calls = end["result"]["details"]["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls
            .iter()
            .any(|c| c["name"] == "read" && c["status"] == "error")
    );
    assert_eq!(calls.iter().filter(|c| c["status"] == "ok").count(), 2);

    let requests = fake.wait_for_requests(2, pi.timeout());
    let declared = &requests[0].body["tools"];
    let codemode = declared
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "codemode")
        .expect("codemode is declared");
    assert_eq!(
        codemode["input_schema"]["properties"]["code"]["description"],
        "Raw JavaScript source."
    );
    let read = declared
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "read")
        .unwrap();
    assert!(
        read["description"]
            .as_str()
            .unwrap()
            .ends_with("\n\nCodemode: `tools.read(args)` resolves to `string | { data: string; mimeType: string; note: string; type: \"image\"; }`."),
        "{read}"
    );
    // Only the script's result reaches the model: one tool result, for the codemode call.
    assert!(check_tool_pairing(requests[1].messages()).is_empty());
    let message = records
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "toolResult")
        .expect("the codemode result message");
    let nested = &message["message"]["nestedCalls"];
    assert_eq!(nested["complete"], true, "{nested}");
    let read = nested["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "read")
        .expect("the read call is recorded");
    assert_eq!(read["arguments"], json!({"path": "missing.txt"}));
    assert_eq!(read["status"], "error");
    let block = tool_result_block(&requests[1], "cm1");
    assert!(tool_result_block_text(&block).contains("echo: two"));
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn limits_and_hostile_scripts_end_the_script_not_the_process() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![
        scripts(&[
            ("loop", "// @options: {\"timeout_ms\": 500}\nfor (;;) {}"),
            (
                "memory",
                "const keep = []; for (;;) keep.push(new Array(1e6).fill(1.5));",
            ),
            ("texts", "for (let i = 0; i < 1e6; i++) text(String(i));"),
            (
                "long",
                "// @options: {\"max_output_tokens\": 10}\ntext(\"a\".repeat(500) + \"z\".repeat(500));",
            ),
            ("options", "text(1);\n// @options: {}"),
            ("stall", "await new Promise(() => {});"),
            ("nested", "await tools.codemode({ code: 'text(1)' });"),
        ]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let (mut pi, _log) = spawn_with_fake_server(&fake);
    pi.command("1", "prompt", json!({"message": "be hostile"}));
    let records = pi.records_until_event("agent_end");
    let text_of = |id: &str| {
        let end = end_of(&records, id);
        assert_eq!(end["isError"], id != "long", "{end}");
        result_text(&end["result"])
    };
    let looped = text_of("loop");
    assert!(looped.starts_with("Script failed\n"), "{looped}");
    assert!(
        looped.contains("Script error:\nScript timed out: Execution timed out after 500 ms\n\nNo tool calls were made."),
        "{looped}"
    );
    let memory = text_of("memory");
    assert!(memory.contains("out of memory"), "{memory}");
    let texts = text_of("texts");
    assert!(
        texts.contains("RangeError: script output exceeded the limit of 16777216 characters or 100000 text(), image(), and console calls."),
        "{}",
        &texts[texts.len().saturating_sub(600)..]
    );
    assert!(
        texts.contains("Warning: truncated output"),
        "the output is cut"
    );
    let long = end_of(&records, "long");
    let long_text = result_text(&long["result"]);
    assert!(
        long_text.contains(&format!(
            "{}…240 tokens truncated…{}",
            "a".repeat(20),
            "z".repeat(20)
        )),
        "{long_text}"
    );
    let path = long["result"]["details"]["fullOutputPath"]
        .as_str()
        .expect("a spill file");
    assert_eq!(
        std::fs::read_to_string(path).unwrap(),
        format!("{}{}", "a".repeat(500), "z".repeat(500))
    );
    assert_eq!(
        text_of("options"),
        "The // @options: line must be the first line of the input; found one on line 2"
    );
    assert!(text_of("stall").contains("The script is waiting on a promise that can never settle"));
    assert!(
        text_of("nested").contains("tools.codemode does not exist."),
        "scripts cannot start other scripts"
    );
    // The process is fine: the next command answers.
    let state = pi.command("2", "get_state", json!({}));
    assert_eq!(state["success"], true);
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn abort_mid_script_stops_the_script_and_its_calls() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![scripts(&[
        ("slow", "await tools.mcp__fake__slow({}); text('never');"),
        ("busy", "for (;;) {}"),
    ])]);
    let (mut pi, log) = spawn_with_fake_server(&fake);
    pi.command("1", "prompt", json!({"message": "go"}));
    pi.find(|r| r["type"] == "tool_execution_start" && r["parentToolCallId"] == "slow");
    wait_for_file(&log, pi.timeout(), |t| t.contains("\"tools/call\""));
    pi.command("2", "abort", json!({}));
    let records = pi.records_until_event("agent_end");
    for id in ["slow", "busy", "slow/1"] {
        let end = end_of(&records, id);
        assert_eq!(end["isError"], true, "{end}");
    }
    assert_eq!(end_of(&records, "slow/1")["parentToolCallId"], "slow");
    wait_for_file(&log, pi.timeout(), |t| {
        t.contains("notifications/cancelled")
    });
    let state = pi.command("3", "get_state", json!({}));
    assert_eq!(state["data"]["isStreaming"], false, "{state}");
    pi.close_stdin();
    pi.wait_for_exit();
}

/// The `text` of the codemode result of call `id`.
fn script_text(records: &[Value], id: &str) -> String {
    result_text(&end_of(records, id)["result"])
}

#[test]
fn store_and_load_across_calls_and_branches_and_discovery_globals() {
    if is_reference() {
        return;
    }
    let discover = r#"const found = await searchTools("echo text back");
const ns = await describeNamespace("fake");
const none = await describeTool("no_such_tool");
text([load("n"), found[0].name, ns.name, ns.tools.includes("mcp__fake__echo"), none === undefined,
  ALL_TOOLS.some((t) => t.name === "mcp__fake__echo")].join(" "));"#;
    let fake = FakeProvider::start(vec![
        scripts(&[(
            "s1",
            "store('n', 1); store('gone', 2); store('gone', undefined); text(load('n'));",
        )]),
        scripts(&[("s2", "store('n', 99); throw new Error('no');")]),
        scripts(&[("s3", discover)]),
        Reply::sse(anthropic_text(&["first done"])),
        scripts(&[("s4", "store('n', load('n') + 1);")]),
        Reply::sse(anthropic_text(&["second done"])),
        scripts(&[("s5", "text(load('n'));")]),
        Reply::sse(anthropic_text(&["third done"])),
    ]);
    let workspace = Workspace::new();
    let servers = json!({"mcpServers": {"fake": {
        "command": fixture_path("mcp/fake_server.py").to_string_lossy(),
        "exposure": "direct",
    }}});
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        serde_json::to_string(&servers).unwrap(),
    )
    .unwrap();
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .settings(json!({"defaultTools": ["+codemode"]}));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "first"}));
    let records = pi.records_until_event("agent_end");
    assert!(script_text(&records, "s1").ends_with("Output:\n1"));
    assert!(script_text(&records, "s2").contains("Script error:\nError: no"));
    assert!(
        script_text(&records, "s3")
            .ends_with("Output:\n1 mcp__fake__echo mcp__fake true true true"),
        "{}",
        script_text(&records, "s3")
    );
    pi.command("2", "prompt", json!({"message": "second"}));
    pi.records_until_event("agent_end");

    let state = pi.command("3", "get_state", json!({}));
    let file = state["data"]["sessionFile"].as_str().unwrap().to_string();
    let entries = crate::support::read_jsonl(std::path::Path::new(&file));
    let stores: Vec<&Value> = entries
        .iter()
        .filter(|e| e["type"] == "custom" && e["customType"] == "codemode-store")
        .collect();
    assert_eq!(
        stores.len(),
        2,
        "only successful scripts that wrote: {stores:?}"
    );
    assert_eq!(
        stores[0]["data"],
        json!({"set": {"n": 1}, "delete": ["gone"]})
    );
    assert_eq!(stores[1]["data"], json!({"set": {"n": 2}, "delete": []}));

    // A branch from before the second prompt sees only the first script's value.
    let second_user = entries
        .iter()
        .find(|e| e["message"]["role"] == "user" && e["message"]["content"][0]["text"] == "second")
        .unwrap();
    let forked = pi.command("4", "fork", json!({"entryId": second_user["id"]}));
    assert_eq!(forked["success"], true, "{forked}");
    pi.command("5", "prompt", json!({"message": "again"}));
    let records = pi.records_until_event("agent_end");
    assert!(
        script_text(&records, "s5").ends_with("Output:\n1"),
        "{}",
        script_text(&records, "s5")
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

/// `workspace` with the fake MCP server with `exposure` (none: the default), and settings
/// `settings`.
fn setup_with_exposure(
    workspace: &Workspace,
    fake: &FakeProvider,
    exposure: Option<&str>,
    settings: Value,
) -> Setup {
    let mut server = json!({
        "command": fixture_path("mcp/fake_server.py").to_string_lossy(),
        "description": "Fake tools for tests\nsecond line",
    });
    if let Some(exposure) = exposure {
        server["exposure"] = json!(exposure);
    }
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        serde_json::to_string(&json!({"mcpServers": {"fake": server}})).unwrap(),
    )
    .unwrap();
    Setup::anthropic(fake).with_sessions().settings(settings)
}

/// `deferred` exposure (pi 1.6.0 `docs/mcp.md`): the server's tools are not declared; the
/// `mcp_servers` section names the server, `tool_search` is turned on and declares what it finds
/// for the next request through a system message (`toolsAdded`), after which the model calls
/// the tool directly. A tool not loaded yet is not callable by the model. The loaded tool stays
/// declared when the session is opened again (`switch_session`). Passes against pi 1.6.0.
#[test]
fn deferred_tools_are_found_with_tool_search_then_called_directly() {
    let search = AnthropicStream::new()
        .tool_use(
            "ts1",
            "tool_search",
            &[&json!({"query": "echo"}).to_string()],
        )
        .tool_use(
            "early",
            "mcp__fake__echo",
            &[&json!({"text": "no"}).to_string()],
        )
        .finish("tool_use");
    let echo = AnthropicStream::new()
        .tool_use(
            "e1",
            "mcp__fake__echo",
            &[&json!({"text": "hi"}).to_string()],
        )
        .tool_use("bad", "tool_search", &[&json!({"query": " "}).to_string()])
        .finish("tool_use");
    let fake = FakeProvider::start(vec![
        Reply::sse(search),
        Reply::sse(echo),
        Reply::sse(anthropic_text(&["Done."])),
        Reply::sse(anthropic_text(&["Again."])),
    ]);
    let workspace = Workspace::new();
    let setup = setup_with_exposure(&workspace, &fake, Some("deferred"), json!({}));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "find echo"}));
    let records = pi.records_until_event("agent_end");
    let search_end = end_of(&records, "ts1");
    assert_eq!(
        search_end["result"],
        json!({"content": [{"type": "text", "text": "Loaded 1 tool. They are available from your next call:\n- mcp__fake__echo: fake echo"}],
               "details": {"loaded": ["mcp__fake__echo"]}})
    );
    let early = end_of(&records, "early");
    assert_eq!(early["isError"], true, "not declared yet: {early}");
    assert_eq!(result_text(&end_of(&records, "e1")["result"]), "echo: hi");
    let bad = end_of(&records, "bad");
    assert_eq!(bad["isError"], true);
    assert_eq!(result_text(&bad["result"]), "query must not be empty");
    let systems: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "system")
        .map(|r| &r["message"])
        .collect();
    assert_eq!(systems.len(), 2, "{systems:?}");
    assert_eq!(
        systems[0]["sections"]["mcp_servers"],
        "<mcp_servers>\nMCP servers whose tools are not declared to you. Load the tools of `tool_search` servers with `tool_search`.\n- mcp__fake (tool_search): Fake tools for tests\n</mcp_servers>"
    );
    let first_tools: Vec<&str> = systems[0]["toolsAdded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(first_tools.contains(&"tool_search"), "{first_tools:?}");
    assert!(!first_tools.iter().any(|t| t.starts_with("mcp__")));
    assert!(systems[1].get("sections").is_none(), "{}", systems[1]);
    assert_eq!(
        systems[1]["toolsAdded"],
        json!([{"name": "mcp__fake__echo", "description": "fake echo", "parameters": {"type": "object",
            "properties": {"text": {"type": "string"}, "seconds": {"type": "number"}, "size": {"type": "number"}}}}])
    );
    let requests = fake.wait_for_requests(3, pi.timeout());
    let first = requests[0].tool_names();
    assert!(first.contains(&"tool_search".to_string()), "{first:?}");
    assert!(!first.iter().any(|t| t.starts_with("mcp__")), "{first:?}");
    assert!(
        requests[1]
            .tool_names()
            .contains(&"mcp__fake__echo".to_string())
    );
    let system = requests[0].body["system"].to_string();
    assert!(system.contains("- mcp__fake (tool_search): Fake tools for tests"));

    // Resumed by a new process, the branch still declares the loaded tool and adds no system
    // message, as pi 1.6.0's docs say ("Tools loaded by `tool_search` are recorded in the
    // transcript and remain declared on that branch"). pi 1.6.0 itself declares it removed on
    // the next prompt (after `switch_session` too): its MCP tools register inactive.
    let state = pi.command("2", "get_state", json!({}));
    let file = state["data"]["sessionFile"].as_str().unwrap().to_string();
    pi.close_stdin();
    pi.wait_for_exit();
    let mut pi = Pi::spawn_in(&workspace, &setup.arg("--session").arg(&file));
    pi.command("4", "prompt", json!({"message": "again"}));
    let records = pi.records_until_event("agent_end");
    let changes: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "system")
        .map(|r| &r["message"])
        .collect();
    let requests = fake.wait_for_requests(4, pi.timeout());
    let kept = requests[3]
        .tool_names()
        .contains(&"mcp__fake__echo".to_string());
    if is_reference() {
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(
            changes[0]["toolsRemoved"],
            json!([{"name": "mcp__fake__echo"}])
        );
        assert!(!kept);
    } else {
        assert!(changes.is_empty(), "nothing changed: {changes:?}");
        assert!(kept);
    }
    pi.close_stdin();
    pi.wait_for_exit();
}

/// The default exposure is `codemode` (pi 1.6.0): the MCP tools are not declared, `codemode`
/// is turned on for them and a script calls them; the section says so. With
/// `autoEnableCodemode: false` nothing reaches them and the client is warned once. Passes
/// against pi 1.6.0.
#[test]
fn mcp_tools_default_to_codemode_and_scripts_reach_them() {
    let fake = FakeProvider::start(vec![
        scripts(&[(
            "cm1",
            "const r = await tools.mcp__fake__echo({ text: 'x' }); text(r.content[0].text);",
        )]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    let setup = setup_with_exposure(&workspace, &fake, None, json!({}));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "echo"}));
    let records = pi.records_until_event("agent_end");
    let text = script_text(&records, "cm1");
    assert!(text.ends_with("Output:\necho: x"), "{text}");
    let requests = fake.wait_for_requests(2, pi.timeout());
    let names = requests[0].tool_names();
    assert!(names.contains(&"codemode".to_string()), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|t| t.starts_with("mcp__") || t == "tool_search")
    );
    assert!(requests[0].body["system"].to_string().contains(
        "MCP servers whose tools are not declared to you. Call the tools of `codemode` servers from codemode scripts.\\n- mcp__fake (codemode): Fake tools for tests"
    ));
    pi.close_stdin();
    pi.wait_for_exit();

    let fake = FakeProvider::start(vec![Reply::sse(anthropic_text(&["Done."]))]);
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        serde_json::to_string(
            &json!({"autoEnableCodemode": false, "mcpServers": {"fake": {
            "command": fixture_path("mcp/fake_server.py").to_string_lossy()}}}),
        )
        .unwrap(),
    )
    .unwrap();
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    let warning = pi.find(|r| {
        r["method"] == "notify"
            && r["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("MCP tools are only reachable"))
    });
    assert_eq!(
        warning["message"],
        "MCP tools are only reachable from the codemode or tool_search tool, but neither is active (autoEnableCodemode is false); they cannot be called."
    );
    assert_eq!(warning["notifyType"], "warning");
    pi.command("1", "prompt", json!({"message": "hi"}));
    pi.records_until_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    let names = requests[0].tool_names();
    assert!(
        !names
            .iter()
            .any(|t| t.starts_with("mcp__") || t == "codemode"),
        "{names:?}"
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

/// A session pi 1.6.0 wrote (`fixtures/sessions/reference-1.6.0-codemode.jsonl`: a script that
/// stored `k = 41`, then `tool_search` loaded `mcp__fake__echo`) continues in pi-rs: the script
/// store is read back and the loaded tool stays declared.
#[test]
fn a_session_pi_1_6_0_wrote_with_codemode_and_tool_search_continues() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![
        scripts(&[("s2", "text(load('k') + 1);")]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    let text = crate::fake_provider::fixture("sessions/reference-1.6.0-codemode.jsonl");
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let text = text.replacen(
        &format!("\"cwd\":{}", header["cwd"]),
        &format!("\"cwd\":{}", json!(workspace.cwd().to_string_lossy())),
        1,
    );
    let file = workspace.root().join("from-1.6.0.jsonl");
    std::fs::write(&file, text).unwrap();
    let setup = setup_with_exposure(
        &workspace,
        &fake,
        Some("deferred"),
        json!({"defaultTools": ["+codemode"]}),
    )
    .arg("--session")
    .arg(&file.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "again"}));
    let records = pi.records_until_event("agent_end");
    let out = script_text(&records, "s2");
    assert!(out.ends_with("Output:\n42"), "{out}");
    // pi-rs words its built-in tools its own way, so their declarations are replaced; the
    // loaded tool is never dropped.
    for change in records
        .iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "system")
    {
        let names = |key: &str| -> Vec<Value> {
            change["message"][key]
                .as_array()
                .map(|tools| tools.iter().map(|t| t["name"].clone()).collect())
                .unwrap_or_default()
        };
        let echo = json!("mcp__fake__echo");
        assert!(
            !names("toolsRemoved").contains(&echo) || names("toolsAdded").contains(&echo),
            "{change}"
        );
    }
    let requests = fake.wait_for_requests(1, pi.timeout());
    let names = requests[0].tool_names();
    for name in ["codemode", "tool_search", "mcp__fake__echo"] {
        assert!(names.contains(&name.to_string()), "{name} in {names:?}");
    }
    pi.close_stdin();
    pi.wait_for_exit();
}

/// `codemode.mode: "only"` (pi 1.6.0 `docs/settings.md`): only `codemode` is declared; the
/// built-in tools are listed in its description under `Nested tools:` (with their guidelines)
/// and scripts still call them. With `codemode.inlineBudget: 0` no tool section fits.
#[test]
fn mode_only_declares_codemode_alone_and_scripts_reach_the_hidden_tools() {
    let fake = FakeProvider::start(vec![
        scripts(&[(
            "only1",
            "const r = await tools.bash({ command: 'echo from-bash' }); text(r.output.trim());",
        )]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    let setup = Setup::anthropic(&fake).settings(json!({
        "defaultTools": ["read", "bash", "codemode"],
        "codemode": {"mode": "only"},
    }));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "run"}));
    let records = pi.records_until_event("agent_end");
    let text = script_text(&records, "only1");
    assert!(text.ends_with("Output:\nfrom-bash"), "{text}");
    let nested = records
        .iter()
        .find(|r| r["type"] == "tool_execution_start" && r["toolName"] == "bash")
        .expect("the script's bash call is shown");
    assert_eq!(nested["parentToolCallId"], "only1");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(requests[0].tool_names(), ["codemode"]);
    let tools = requests[0].body["tools"].as_array().unwrap();
    let description = tools[0]["description"].as_str().unwrap();
    assert!(
        description.contains("\n\nNested tools:\n\n### `read`\n"),
        "{description}"
    );
    assert!(description.contains("\n\n### `bash`\n"), "{description}");
    assert!(description.contains("- Use read to look at files rather than cat or sed."));
    assert!(!description.contains("Codemode: `tools."));
    pi.close_stdin();
    pi.wait_for_exit();

    let fake = FakeProvider::start(vec![Reply::sse(anthropic_text(&["Done."]))]);
    let setup = Setup::anthropic(&fake).settings(json!({
        "defaultTools": ["read", "codemode"],
        "codemode": {"mode": "only", "inlineBudget": 0},
    }));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "hi"}));
    pi.records_until_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    assert_eq!(requests[0].tool_names(), ["codemode"]);
    let description = requests[0].body["tools"][0]["description"]
        .as_str()
        .unwrap();
    assert!(description.ends_with("\n\nNested tools:"), "{description}");
    pi.close_stdin();
    pi.wait_for_exit();
}

/// `bash` and `read` resolve to pi 1.6.0's structured values in scripts: `bash` to
/// `{output, truncated, full_output_path?, exit_code, wall_time_seconds}` (also for a non-zero
/// exit, whose call is still an error record; `output` holds up to 1 MiB, its first and last
/// halves around an omission marker past that), `read` to the text, or for an image to an image
/// block `image()` shows. Direct `tool_execution_end` records carry the value as
/// `structuredContent`, and the declared tools' descriptions name the shapes. Passes against pi
/// 1.6.0.
#[test]
fn bash_and_read_resolve_to_structured_values_in_scripts() {
    let code = r#"const ok = await tools.bash({ command: "echo hi" });
const bad = await tools.bash({ command: "echo oops; exit 3" });
const big = await tools.bash({ command: "seq 1 300000" });
const file = await tools.read({ path: "note.txt" });
const img = await tools.read({ path: "dot.png" });
text(JSON.stringify({
  ok: [ok.output, ok.exit_code, ok.truncated, typeof ok.wall_time_seconds, "full_output_path" in ok],
  bad: [bad.output, bad.exit_code, bad.truncated],
  big: [big.truncated, typeof big.full_output_path, big.output.length > 1000000, big.output.length <= 1048576 + 64,
    big.output.startsWith("1\n2\n"), big.output.endsWith("299999\n300000\n"), /\n\n\[\.\.\. \d+ bytes omitted \.\.\.\]\n\n/.test(big.output)],
  file,
  img: [img.type, img.mimeType, img.note, img.data.length > 0],
}));
image(img);"#;
    let fake = FakeProvider::start(vec![
        scripts(&[("st1", code)]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    std::fs::write(workspace.cwd().join("note.txt"), "line one\nline two\n").unwrap();
    std::fs::write(workspace.cwd().join("dot.png"), crate::images::png(4, 3)).unwrap();
    let setup = Setup::anthropic(&fake).settings(json!({
        "defaultTools": ["read", "bash", "codemode"],
    }));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "run"}));
    let records = pi.records_until_event("agent_end");
    let text = script_text(&records, "st1");
    let json_start = text.find("{\"ok\"").unwrap_or_else(|| panic!("{text}"));
    let json_end = text[json_start..]
        .find('\n')
        .map_or(text.len(), |i| json_start + i);
    let values: Value = serde_json::from_str(&text[json_start..json_end]).unwrap();
    assert_eq!(
        values,
        json!({
            "ok": ["hi\n", 0, false, "number", false],
            "bad": ["oops\n", 3, false],
            "big": [true, "string", true, true, true, true, true],
            "file": "line one\nline two\n",
            "img": ["image", "image/png", "Read image file [image/png]", true],
        }),
        "{text}"
    );
    assert!(text.contains("[Image saved to "), "{text}");
    // The nested calls' records carry the structured value; the failed one is still an error.
    let nested: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "tool_execution_end" && r["parentToolCallId"] == "st1")
        .collect();
    let bad = nested
        .iter()
        .find(|r| r["result"]["structuredContent"]["exit_code"] == 3)
        .expect("the failing bash call carries its value");
    assert_eq!(bad["isError"], true);
    assert_eq!(
        result_text(&bad["result"]),
        "oops\n\n\nCommand exited with code 3"
    );
    let read = nested
        .iter()
        .find(|r| r["toolName"] == "read" && r["result"]["structuredContent"].is_string())
        .expect("the text read carries its value");
    assert_eq!(read["result"]["structuredContent"], "line one\nline two\n");
    let requests = fake.wait_for_requests(2, pi.timeout());
    let bash = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "bash")
        .unwrap();
    assert!(
        bash["description"].as_str().unwrap().ends_with(
            "\n\nCodemode: `tools.bash(args)` resolves to `{ output, truncated, full_output_path?, exit_code, wall_time_seconds }`."
        ),
        "{bash}"
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

/// The `codemode` listing, `ALL_TOOLS` and `describeTool()` show a tool as pi 1.6.0 does: its
/// description, then its TypeScript declaration generated from the JSON Schemas (the MCP tool's
/// arguments as a sorted object type, its result as the `CallToolResult` type). Passes against
/// pi 1.6.0.
#[test]
fn tools_are_described_with_typescript_declarations() {
    let fake = FakeProvider::start(vec![
        scripts(&[(
            "ts1",
            r#"const d = await describeTool("mcp__fake__echo");
text(d);
text(ALL_TOOLS.find((t) => t.name === "mcp__fake__echo").description === d);"#,
        )]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    let setup = setup_with_exposure(
        &workspace,
        &fake,
        Some("direct"),
        json!({"defaultTools": ["read", "codemode"], "codemode": {"mode": "only"}}),
    );
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "describe"}));
    let records = pi.records_until_event("agent_end");
    let sample = "fake echo\n\ncodemode tool declaration:\n```ts\ndeclare const tools: { mcp__fake__echo(args: { seconds?: number; size?: number; text?: string; }): Promise<{ content: Array<{ data?: string; mimeType?: string; text?: string; type: \"text\" | \"image\" | \"audio\" | \"resource_link\" | \"resource\"; [key: string]: unknown; }>; isError?: boolean; structuredContent?: unknown; [key: string]: unknown; }>; };\n```";
    let text = script_text(&records, "ts1");
    assert!(
        text.ends_with(&format!(
            "Output:\n==> text 1/2 <==\n{sample}\n==> text 2/2 <==\ntrue"
        )),
        "{text}"
    );
    let requests = fake.wait_for_requests(2, pi.timeout());
    let tools = requests[0].body["tools"].as_array().unwrap();
    let codemode = tools.iter().find(|t| t["name"] == "codemode").unwrap();
    let description = codemode["description"].as_str().unwrap();
    assert!(
        description.contains(&format!("\n\n### `mcp__fake__echo`\n{sample}")),
        "{description}"
    );
    assert!(
        description.contains(
            "codemode tool declaration:\n```ts\ndeclare const tools: { read(args: {\n  // "
        ),
        "{description}"
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

/// The `models` global (pi 1.6.0 `docs/codemode.md`, "Models"): the catalog by type (chat
/// models listed without their headers; pi-rs has no image or classifier models), and
/// `classify()` / `generateImages()` failing with 1.6.0's errors for a model that is not of their
/// type and for a missing one. The description names `models`. Passes against pi 1.6.0.
#[test]
fn the_models_global_lists_the_catalog_and_refuses_what_it_cannot_run() {
    let code = r#"const chat = await models.getModelsOfType("chat", "fake-anthropic");
const images = await models.getModelsOfType("image", "fake-anthropic");
const one = await models.getModelOfType("chat", "fake-anthropic", "fake-claude");
const none = await models.getModelOfType("classifier", "fake-anthropic", "fake-claude");
const failed = await Promise.allSettled([
  models.classify(one, { state: {}, questions: {} }),
  models.generateImages(undefined, { input: [] }),
  models.getModelsOfType("llm"),
  models.getModelOfType("chat", "fake-anthropic/fake-claude"),
]);
text(JSON.stringify({
  chat: chat.some((m) => m.id === "fake-claude" && m.provider === "fake-anthropic"),
  images,
  one: [one.provider, one.id, "headers" in one],
  none: none === undefined,
  errors: failed.map((r) => r.status === "rejected" ? r.reason.message : "resolved"),
}));"#;
    let fake = FakeProvider::start(vec![
        scripts(&[("m1", code)]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    let setup = Setup::anthropic(&fake).settings(json!({"defaultTools": ["read", "codemode"]}));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "models"}));
    let records = pi.records_until_event("agent_end");
    let text = script_text(&records, "m1");
    let json_start = text.find("{\"chat\"").unwrap_or_else(|| panic!("{text}"));
    let values: Value = serde_json::from_str(&text[json_start..]).unwrap();
    assert_eq!(
        values,
        json!({
            "chat": true,
            "images": [],
            "one": ["fake-anthropic", "fake-claude", false],
            "none": true,
            "errors": [
                "\"fake-anthropic/fake-claude\" is a chat model, not a classifier model. List the classifier models you can use with models.getAvailableOfType(\"classifier\").",
                "models.generateImages() expects an image model as its first argument, got null. models.getModelOfType() returns undefined for an unknown provider or id. List the image models you can use with models.getAvailableOfType(\"image\").",
                "Unknown model type \"llm\". Use \"chat\", \"image\", or \"classifier\".",
                "models.getModelOfType(type, provider, id) expects three strings, got (a string, a string). The provider and the id are separate arguments, for example models.getModelOfType(\"classifier\", \"typesafe\", \"jev-latest\").",
            ],
        }),
        "{text}"
    );
    let requests = fake.wait_for_requests(2, pi.timeout());
    let codemode = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "codemode")
        .unwrap();
    let description = codemode["description"].as_str().unwrap();
    let line = description
        .lines()
        .find(|l| l.starts_with("- `models`: "))
        .unwrap_or_else(|| panic!("{description}"));
    assert!(
        line.starts_with("- `models`: classifiers and image generation. Read /")
            && line.ends_with("/codemode.md first."),
        "{line}"
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

/// `codemode.mode: "only"`: the system prompt lists the declared tools alone, `codemode`, with
/// its guideline; the tools scripts call and their guidelines are left out (pi 1.6.0's
/// `hiddenTools`). Passes against pi 1.6.0.
#[test]
fn mode_only_leaves_the_hidden_tools_out_of_the_system_prompt() {
    let fake = FakeProvider::start(vec![Reply::sse(anthropic_text(&["Done."]))]);
    let workspace = Workspace::new();
    let setup = setup_with_exposure(
        &workspace,
        &fake,
        None,
        json!({
            "defaultTools": ["read", "bash", "edit", "codemode"],
            "codemode": {"mode": "only"},
        }),
    );
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "hi"}));
    pi.records_until_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    let system: String = requests[0].body["system"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap_or(""))
        .collect();
    let tools = &system[system.find("<tools>\n").unwrap()..system.find("</tools>").unwrap()];
    assert!(
        tools.starts_with("<tools>\n- codemode: Run JavaScript that calls other tools\n\n"),
        "{tools}"
    );
    let rules = &system[system.find("<rules>\n").unwrap()..system.find("</rules>").unwrap()];
    assert!(
        rules.starts_with("<rules>\n- Use codemode to batch independent tool calls (Promise.allSettled), chain them, or filter large output, instead of many separate calls.\n"),
        "{rules}"
    );
    assert_eq!(rules.lines().count(), 4, "{rules}");
    pi.close_stdin();
    pi.wait_for_exit();
}

/// `PI_CODEMODE_MAX_WORKERS` (pi 1.6.0 `docs/codemode.md`, "Limits"): with one worker, a second
/// script waits for it; one whose `timeout_ms` passes while it waits fails without running, with
/// 1.6.0's result. Passes against pi 1.6.0.
#[test]
fn scripts_wait_for_a_free_worker_and_time_out_waiting() {
    let fake = FakeProvider::start(vec![
        scripts(&[
            (
                "w1",
                r#"await tools.bash({ command: "sleep 2" }); text("first");"#,
            ),
            (
                "w2",
                "// @options: {\"timeout_ms\": 500}\ntext(\"second\");",
            ),
        ]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    let setup = Setup::anthropic(&fake)
        .settings(json!({"defaultTools": ["bash", "codemode"]}))
        .env("PI_CODEMODE_MAX_WORKERS", "1");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "two scripts"}));
    let records = pi.records_until_event("agent_end");
    assert!(script_text(&records, "w1").ends_with("Output:\nfirst"));
    let waited = end_of(&records, "w2");
    assert_eq!(waited["isError"], true, "{waited}");
    let content = waited["result"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{waited}");
    assert!(
        content[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Script failed\nWall time "),
        "{waited}"
    );
    assert_eq!(
        content[1]["text"],
        "Script error:\nScript timed out: Execution timed out after 500 ms while waiting for a free codemode worker\n\nThe script did not start."
    );
    assert_eq!(waited["result"]["details"], json!({"calls": []}));
    pi.close_stdin();
    pi.wait_for_exit();
}

/// A shell a signal ended reports 128 + the signal's number as its exit code (pi 1.6.0's
/// convention): a script's `bash` value has `exit_code` 137 after `kill -9 $$`, and the call
/// is an error record. Passes against pi 1.6.0.
#[test]
fn a_shell_a_signal_ended_reports_128_plus_the_signal() {
    let fake = FakeProvider::start(vec![
        scripts(&[(
            "k1",
            r#"const r = await tools.bash({ command: "kill -9 $$" }); text(JSON.stringify([r.exit_code, r.output, r.truncated]));"#,
        )]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let workspace = Workspace::new();
    let setup = Setup::anthropic(&fake).settings(json!({"defaultTools": ["bash", "codemode"]}));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "kill"}));
    let records = pi.records_until_event("agent_end");
    assert!(
        script_text(&records, "k1").ends_with("Output:\n[137,\"\",false]"),
        "{}",
        script_text(&records, "k1")
    );
    let nested = records
        .iter()
        .find(|r| r["type"] == "tool_execution_end" && r["parentToolCallId"] == "k1")
        .expect("the nested bash call ends");
    assert_eq!(nested["isError"], true);
    assert_eq!(
        result_text(&nested["result"]),
        "(no output)\n\nCommand exited with code 137"
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

/// The reverse of the test above: a session pi-rs wrote with a codemode script that stored
/// `k = 41` continues in pi 1.6.0, whose script reads the store back (pi-rs writes 1.6.0's
/// `codemode-store` custom entries).
#[test]
fn a_session_pi_rs_wrote_with_codemode_continues_in_pi_1_6_0() {
    if is_reference() {
        return;
    }
    let Some(reference) = crate::reference_clients::reference("1.6.0") else {
        return;
    };
    let settings = json!({"defaultTools": ["+codemode"]});
    let workspace = Workspace::new();
    let fake = FakeProvider::start(vec![
        scripts(&[("s1", "store('k', 41); text('stored');")]),
        Reply::sse(anthropic_text(&["Stored."])),
    ]);
    let setup = setup_with_exposure(&workspace, &fake, Some("codemode"), settings.clone());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("1", "prompt", json!({"message": "store it"}));
    let records = pi.records_until_event("agent_end");
    assert!(
        script_text(&records, "s1").contains("stored"),
        "{records:?}"
    );
    let state = pi.command("s", "get_state", json!({}));
    let file = state["data"]["sessionFile"].as_str().unwrap().to_string();
    pi.close_stdin();
    pi.wait_for_exit();

    let fake = FakeProvider::start(vec![
        scripts(&[("s2", "text(load('k') + 1);")]),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let node = reference.node.to_string_lossy().into_owned();
    let mut setup = setup_with_exposure(&workspace, &fake, Some("codemode"), settings)
        .wrapped_in(&[&node])
        .arg("--session")
        .arg(&file);
    setup.binary = Some(reference.package.join("dist/cli.js"));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("2", "prompt", json!({"message": "again"}));
    let records = pi.records_until_event("agent_end");
    let out = script_text(&records, "s2");
    assert!(out.ends_with("Output:\n42"), "{out}");
    pi.close_stdin();
    pi.wait_for_exit();
}

/// A Responses stream with one `custom_tool_call` of `name` (`call_id`, item `ctc_id`) whose raw
/// input streams in `pieces`; the finished item and `custom_tool_call_input.done` carry it whole.
fn responses_custom_call(call_id: &str, ctc_id: &str, name: &str, pieces: &[&str]) -> String {
    let input: String = pieces.concat();
    let item = |status: &str, input: &str| {
        json!({"id": ctc_id, "type": "custom_tool_call", "status": status, "call_id": call_id,
            "name": name, "input": input})
    };
    let mut events = vec![
        json!({"type": "response.created", "sequence_number": 0,
            "response": {"id": "resp_g1", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
            "item": item("in_progress", "")}),
    ];
    for piece in pieces {
        events.push(json!({"type": "response.custom_tool_call_input.delta",
            "sequence_number": events.len(), "item_id": ctc_id, "output_index": 0,
            "delta": piece}));
    }
    events.push(json!({"type": "response.custom_tool_call_input.done",
        "sequence_number": events.len(), "item_id": ctc_id, "output_index": 0, "input": input}));
    events.push(
        json!({"type": "response.output_item.done", "sequence_number": events.len(),
        "output_index": 0, "item": item("completed", &input)}),
    );
    events.push(
        json!({"type": "response.completed", "sequence_number": events.len(),
        "response": {"id": "resp_g1", "status": "completed",
            "output": [item("completed", &input)],
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 120}}}),
    );
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// A models.json provider `gt` on the OpenAI Responses API with one model whose compat is
/// `compat`, and `codemode` on next to `read`.
fn grammar_setup(fake: &FakeProvider, compat: Value) -> Setup {
    let models = json!({"providers": {"gt": {"baseUrl": "__BASE_URL__", "api": "openai-responses",
        "apiKey": "gt-key-123456",
        "models": [{"id": "gt-model", "input": ["text"], "compat": compat}]}}});
    Setup::new(fake, "gt", "gt-model")
        .models_json(&models.to_string())
        .settings(json!({"defaultTools": ["read", "codemode"]}))
}

/// The grammar-tool form (pi 1.6.0, a model whose compat has `supportsOpenAIGrammarTools`):
/// `codemode` is declared to OpenAI Responses as a custom tool with its Lark grammar, the model
/// streams the script as a `custom_tool_call`'s raw input, the script runs, and the next request
/// replays the call and its result as `custom_tool_call` / `custom_tool_call_output` items.
/// Without the compat key the function tool with a `code` string stays. Passes against 1.6.0.
#[test]
fn grammar_models_get_codemode_as_a_custom_tool_with_raw_input() {
    let pieces = [
        "const n = 1 + 2;\n",
        "text(\"sum=\" + n);\n",
        "console.log(\"tab\\there\");",
    ];
    let script: String = pieces.concat();
    let fake = FakeProvider::start(vec![
        Reply::sse(responses_custom_call(
            "call_g1", "ctc_g1", "codemode", &pieces,
        )),
        Reply::sse_fixture("openai-responses/text.sse"),
    ]);
    let setup = grammar_setup(&fake, json!({"supportsOpenAIGrammarTools": true}));
    let mut pi = Pi::spawn(&setup);
    pi.command("1", "prompt", json!({"message": "add"}));
    let records = pi.records_until_event("agent_end");
    let start = records
        .iter()
        .find(|r| r["type"] == "tool_execution_start" && r["toolCallId"] == "call_g1|ctc_g1")
        .expect("the custom call runs as a codemode call");
    assert_eq!(start["toolName"], "codemode");
    assert_eq!(start["args"], json!({"code": script}));
    let text = script_text(&records, "call_g1|ctc_g1");
    assert!(text.contains("sum=3"), "{text}");
    assert!(text.contains("tab\there"), "{text}");
    let requests = fake.wait_for_requests(2, pi.timeout());
    pi.close_stdin();
    pi.wait_for_exit();

    let tools = requests[0].body["tools"].as_array().unwrap();
    let codemode = tools.iter().find(|t| t["name"] == "codemode").unwrap();
    assert_eq!(codemode["type"], "custom", "{codemode}");
    assert_eq!(codemode["format"]["type"], "grammar");
    assert_eq!(codemode["format"]["syntax"], "lark");
    let grammar = codemode["format"]["definition"].as_str().unwrap();
    assert!(grammar.contains("start:"), "{grammar}");
    assert!(codemode.get("parameters").is_none(), "{codemode}");
    let read = tools.iter().find(|t| t["name"] == "read").unwrap();
    assert_eq!(read["type"], "function");

    let input = requests[1].body["input"].as_array().unwrap();
    let call = input
        .iter()
        .find(|i| i["type"] == "custom_tool_call")
        .expect("the call replays as a custom tool call");
    assert_eq!(
        call,
        &json!({"type": "custom_tool_call", "id": "ctc_g1", "call_id": "call_g1",
            "name": "codemode", "input": script})
    );
    let output = input
        .iter()
        .find(|i| i["type"] == "custom_tool_call_output")
        .expect("its result replays as a custom tool call output");
    assert_eq!(output["call_id"], "call_g1");
    assert!(
        output["output"].as_str().unwrap().contains("sum=3"),
        "{output}"
    );
    assert!(!input.iter().any(|i| i["type"] == "function_call_output"));

    // Without the compat key: the function tool, whose arguments are JSON.
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
    let mut pi = Pi::spawn(&grammar_setup(&fake, json!({})));
    pi.command("1", "prompt", json!({"message": "hi"}));
    pi.records_until_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    let tools = requests[0].body["tools"].as_array().unwrap();
    let codemode = tools.iter().find(|t| t["name"] == "codemode").unwrap();
    assert_eq!(codemode["type"], "function", "{codemode}");
    assert_eq!(codemode["parameters"]["required"], json!(["code"]));
    pi.close_stdin();
    pi.wait_for_exit();
}

/// The same on OpenAI Chat Completions (pi 1.6.0): `codemode` is a `custom` tool with its
/// grammar, a streamed `custom` tool call's input is the script, and the next request replays
/// the call as a `custom` tool call with its raw input (its result stays a `tool` message).
/// Passes against 1.6.0.
#[test]
fn grammar_models_on_chat_completions_stream_and_replay_custom_calls() {
    let pieces = ["text(\"chat \" + ", "(2 * 21));"];
    let script: String = pieces.concat();
    let mut stream = String::new();
    let mut chunk = |delta: Value, finish: Value| {
        let chunk = json!({"id": "chatcmpl-g", "object": "chat.completion.chunk", "created": 1,
            "model": "gt-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        stream.push_str(&format!("data: {chunk}\n\n"));
    };
    chunk(
        json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_c1", "type": "custom",
            "custom": {"name": "codemode", "input": ""}}]}),
        Value::Null,
    );
    for piece in pieces {
        chunk(
            json!({"tool_calls": [{"index": 0, "custom": {"input": piece}}]}),
            Value::Null,
        );
    }
    chunk(json!({}), json!("tool_calls"));
    stream.push_str("data: [DONE]\n\n");
    let fake = FakeProvider::start(vec![
        Reply::sse(stream),
        Reply::sse(crate::sse::openai_text(&["Done."])),
    ]);
    let models = json!({"providers": {"gt": {"baseUrl": "__BASE_URL__", "api": "openai-completions",
        "apiKey": "gt-key-123456",
        "models": [{"id": "gt-model", "input": ["text"],
            "compat": {"supportsOpenAIGrammarTools": true}}]}}});
    let setup = Setup::new(&fake, "gt", "gt-model")
        .models_json(&models.to_string())
        .settings(json!({"defaultTools": ["read", "codemode"]}));
    let mut pi = Pi::spawn(&setup);
    pi.command("1", "prompt", json!({"message": "multiply"}));
    let records = pi.records_until_event("agent_end");
    let text = script_text(&records, "call_c1");
    assert!(text.contains("chat 42"), "{text}");
    let requests = fake.wait_for_requests(2, pi.timeout());
    pi.close_stdin();
    pi.wait_for_exit();

    let tools = requests[0].body["tools"].as_array().unwrap();
    let codemode = tools
        .iter()
        .find(|t| t["type"] == "custom")
        .expect("codemode is a custom tool");
    assert_eq!(codemode["custom"]["name"], "codemode");
    assert_eq!(codemode["custom"]["format"]["type"], "grammar");
    assert_eq!(codemode["custom"]["format"]["grammar"]["syntax"], "lark");
    assert!(
        codemode["custom"]["format"]["grammar"]["definition"]
            .as_str()
            .unwrap()
            .contains("start:")
    );
    let messages = requests[1].messages();
    let call = messages
        .iter()
        .find_map(|m| m["tool_calls"].as_array())
        .expect("the call replays");
    assert_eq!(
        call,
        &vec![json!({"id": "call_c1", "type": "custom",
            "custom": {"name": "codemode", "input": script}})]
    );
    let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["tool_call_id"], "call_c1");
}
