//! Extension protocol 2 through the real binary (README.md, Extensions, "Protocol 2"): extension
//! flags on the command line, tools that replace built-ins, queries, control actions, late
//! registration, terminating tool results and the v2 hooks and events.
//!
//! The fixture `fixtures/extensions/v2.py` relays: `/send <json lines>` makes it write those
//! lines to pi-rs, and it reports every answer and event it receives as a `notify` notice
//! ("answer <json>", "event <json>"), so each test reads what the extension saw from stdout.
//!
//! Reference: pi runs TypeScript extensions, not executables; none of these tests applies to it.

use serde_json::{Value, json};

use crate::extensions::with_extensions;
use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::sse;
use crate::support::{
    Pi, Setup, command_names, run_cli, tool_result_block, tool_result_block_text, wait_for_file,
};

/// The text of the next `notify` notice starting with `prefix`, without the prefix.
#[track_caller]
fn next_notice(pi: &mut Pi, prefix: &str) -> String {
    let deadline = pi.deadline();
    let prefix = prefix.to_string();
    let mut records = pi.recv_until(
        |r| {
            r["type"] == "extension_ui_request"
                && r["method"] == "notify"
                && r["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(&prefix))
        },
        deadline,
    );
    let record = records.pop().expect("the match");
    record["message"].as_str().unwrap_or_default()[prefix.len()..].to_string()
}

/// Makes v2.py send `lines` (its `/send` command); what comes of them is read from its reports.
#[track_caller]
fn relay(pi: &mut Pi, lines: &[Value]) {
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    pi.send(json!({"type": "prompt", "message": format!("/send {}", text.join("\n"))}));
}

/// Makes v2.py send `lines` and returns the answer to the request with id `id`.
#[track_caller]
pub fn ask(pi: &mut Pi, lines: &[Value], id: &str) -> Value {
    relay(pi, lines);
    next_answer(pi, id)
}

/// The next JSON report of v2.py after `prefix` that `wanted` accepts (earlier ones are skipped).
#[track_caller]
pub fn next_report(pi: &mut Pi, prefix: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    loop {
        let report: Value = serde_json::from_str(&next_notice(pi, prefix)).expect("json");
        if wanted(&report) {
            return report;
        }
    }
}

/// v2.py's answer to its request `id`.
#[track_caller]
fn next_answer(pi: &mut Pi, id: &str) -> Value {
    next_report(pi, "answer ", |answer| answer["id"] == id)
}

/// Makes v2.py ask for a session change (`line`, with id `id`), which restarts the extensions
/// (as pi 1.6.0 does): waits for the new process's `session_start` and returns the old one's
/// answer (read from stderr: the stopped process's notices may not reach stdout).
#[track_caller]
fn ask_for_session_change(pi: &mut Pi, line: Value, id: &str) -> Value {
    let reason = match line["type"].as_str() {
        Some("new_session") => "new",
        Some("switch_session") => "resume",
        _ => "fork",
    };
    relay(pi, &[line]);
    restarted(pi, reason);
    let answered = |s: &str| {
        stderr_events(s, "answer")
            .iter()
            .any(|(_, a)| a["id"] == id)
    };
    let stderr = pi.stderr_when(answered);
    let answers = stderr_events(&stderr, "answer");
    let (_, answer) = answers
        .into_iter()
        .rfind(|(_, a)| a["id"] == id)
        .unwrap_or_else(|| panic!("no answer {id}: {stderr}"));
    answer
}

/// Waits until the restarted v2.py heard `session_start` with `reason` (commands sent while
/// the extensions restart are answered, but `/send` needs the new process).
#[track_caller]
fn restarted(pi: &mut Pi, reason: &str) -> Value {
    let start = next_event(pi, "session_start");
    assert_eq!(start["reason"], reason, "{start}");
    start
}

// ---- 1. flags and tool overrides ---------------------------------------------------------------

#[test]
fn extension_flags_are_accepted_and_handed_to_the_extension() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2.py"])
        .arg("--plan")
        .arg("--level")
        .arg("high");
    let mut pi = Pi::spawn(&setup);
    let flags: Value = serde_json::from_str(&next_notice(&mut pi, "flags ")).expect("json");
    assert_eq!(flags, json!({"plan": true, "level": "high"}));
    let response = pi.command("s", "get_state", json!({}));
    assert_eq!(response["success"], true, "{response}");
}

#[test]
fn flags_nobody_registered_stop_the_run_as_pi_does() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2.py"]);
    let run = run_cli(&setup, &["--mode", "rpc", "--nope", "--other=1"], None);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("Error: Unknown options: --nope, --other"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    // A string flag without its value.
    let run = run_cli(&setup, &["--mode", "rpc", "--level"], None);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("Error: Extension flag \"--level\" requires a value"),
        "{}",
        run.stderr
    );
    // Without any extension, a flag is an unknown option.
    let run = run_cli(&Setup::anthropic(&fake), &["--mode", "rpc", "--plan"], None);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("Error: Unknown option: --plan"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_extension_tool_replaces_the_builtin_of_the_same_name() {
    let input = json!({"path": "notes.txt"}).to_string();
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("toolu_r", "read", &[&input])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Done."])),
    ]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2.py"]).file("notes.txt", "builtin");
    let mut pi = Pi::spawn(&setup);
    pi.command("p1", "prompt", json!({"message": "Read notes.txt"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    let reads: Vec<&Value> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter(|t| t["name"] == "read")
        .collect();
    assert_eq!(reads.len(), 1, "{:?}", requests[0].body["tools"]);
    assert_eq!(reads[0]["description"], "Reads a file, the v2 way");
    let block = tool_result_block(&requests[1], "toolu_r");
    assert_eq!(tool_result_block_text(&block), "v2 read notes.txt");
    fake.finish();
}

// ---- 2. version negotiation and queries -------------------------------------------------------

#[test]
fn queries_answer_what_pi_exposes_to_extensions() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Hi."]))]);
    let setup = with_extensions(Setup::anthropic(&fake).with_sessions(), &["v2.py"]).arg("--plan");
    let mut pi = Pi::spawn(&setup);
    pi.command("p1", "prompt", json!({"message": "Hello"}));
    pi.wait_for_event("agent_end");
    pi.command("n", "set_session_name", json!({"name": "queried"}));
    let q = |id: &str, query: &str| json!({"type": "query", "id": id, "query": query});

    let flags = ask(&mut pi, &[q("f", "flags")], "f");
    assert_eq!(
        flags["result"],
        json!({"plan": true, "level": "low"}),
        "{flags}"
    );
    let model = ask(&mut pi, &[q("m", "model")], "m");
    assert_eq!(model["result"]["model"]["id"], "fake-claude", "{model}");
    assert!(model["result"]["thinkingLevel"].is_string(), "{model}");
    let models = ask(&mut pi, &[q("r", "models")], "r");
    let available = models["result"]["available"].as_array().expect("available");
    assert!(
        available.iter().any(|m| m["id"] == "fake-claude"),
        "{models}"
    );
    assert!(models["result"]["all"].as_array().expect("all").len() >= available.len());

    let active = ask(&mut pi, &[q("a", "active_tools")], "a");
    assert_eq!(
        active["result"],
        json!(["read", "bash", "edit", "write", "finish", "one_at_a_time"]),
        "{active}"
    );
    let all = ask(&mut pi, &[q("t", "all_tools")], "t");
    let all = all["result"].as_array().expect("tools");
    let read = all.iter().find(|t| t["name"] == "read").expect("read");
    assert_eq!(read["description"], "Reads a file, the v2 way");
    assert_eq!(read["sourceInfo"]["source"], "cli", "{read}");
    let grep = all
        .iter()
        .find(|t| t["name"] == "grep")
        .expect("grep listed though inactive");
    assert_eq!(grep["sourceInfo"]["path"], "builtin:grep");

    let commands = ask(&mut pi, &[q("c", "commands")], "c");
    assert_eq!(commands["result"][0]["name"], "send", "{commands}");
    let usage = ask(&mut pi, &[q("u", "context_usage")], "u");
    assert!(
        usage["result"]["tokens"].as_u64().is_some_and(|t| t > 0),
        "{usage}"
    );
    let prompt = ask(&mut pi, &[q("s", "system_prompt")], "s");
    let request = &fake.requests()[0];
    assert_eq!(
        prompt["result"].as_str().expect("text"),
        crate::support::system_prompt_of(request)
    );

    let name = ask(&mut pi, &[q("sn", "session_name")], "sn");
    assert_eq!(name["result"], "queried");
    let trust = ask(&mut pi, &[q("tr", "trust")], "tr");
    // No project resources that need trust: trusted (pi's rule).
    assert_eq!(trust["result"], json!({"trusted": true}), "{trust}");
    let session = ask(&mut pi, &[q("se", "session")], "se");
    let state = pi.command("st", "get_state", json!({}));
    assert_eq!(session["result"]["sessionId"], state["data"]["sessionId"]);
    assert_eq!(
        session["result"]["sessionFile"],
        state["data"]["sessionFile"]
    );
    let leaf_id = session["result"]["leafId"]
        .as_str()
        .expect("leaf id")
        .to_string();

    let entries = ask(&mut pi, &[q("e", "entries")], "e");
    let entries = entries["result"].as_array().expect("entries").clone();
    assert!(
        entries.iter().any(|e| e["type"] == "message"),
        "{entries:?}"
    );
    let leaf = ask(&mut pi, &[q("l", "leaf")], "l");
    assert_eq!(leaf["result"]["id"], leaf_id.as_str());
    let branch = ask(&mut pi, &[q("b", "branch")], "b");
    let branch = branch["result"].as_array().expect("branch");
    assert_eq!(branch.last().expect("leaf")["id"], leaf_id.as_str());
    assert!(branch[0]["parentId"].is_null(), "{branch:?}");
    let first = entries[1]["id"].as_str().expect("id");
    let partial = ask(
        &mut pi,
        &[json!({"type": "query", "id": "b2", "query": "branch", "fromId": first})],
        "b2",
    );
    assert_eq!(
        partial["result"].as_array().expect("path").len(),
        2,
        "{partial}"
    );
    let one = ask(
        &mut pi,
        &[json!({"type": "query", "id": "e1", "query": "entry", "entryId": first})],
        "e1",
    );
    assert_eq!(one["result"], entries[1]);
    let idle = ask(&mut pi, &[q("i", "idle")], "i");
    assert_eq!(
        idle["result"],
        json!({"idle": true, "pendingMessages": false})
    );
    fake.finish();
}

#[test]
fn bad_queries_are_answered_with_errors_and_a_flood_is_answered() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    let unknown = ask(
        &mut pi,
        &[json!({"type": "query", "id": "x", "query": "secrets"})],
        "x",
    );
    assert!(
        unknown["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("unknown query \"secrets\"")),
        "{unknown}"
    );
    let missing = ask(
        &mut pi,
        &[json!({"type": "query", "id": "y", "query": "entry"})],
        "y",
    );
    assert_eq!(missing["error"], "entry: missing entryId");
    let dangling = ask(
        &mut pi,
        &[json!({"type": "query", "id": "z", "query": "branch", "fromId": "nope"})],
        "z",
    );
    assert_eq!(dangling["error"], "Entry not found: nope");

    // 300 queries at once: every one is answered (a result, or the in-flight bound's error),
    // and the extension keeps working.
    let flood: Vec<Value> = (0..300)
        .map(|n| json!({"type": "query", "id": format!("f{n}"), "query": "session_name"}))
        .collect();
    let last = ask(&mut pi, &flood, "f299");
    assert!(
        last.get("result").is_some() || last.get("error").is_some(),
        "{last}"
    );
    let after = ask(
        &mut pi,
        &[json!({"type": "query", "id": "ok", "query": "idle"})],
        "ok",
    );
    assert_eq!(after["result"]["idle"], true, "{after}");
    assert!(
        !pi.records().iter().any(|r| r["type"] == "extension_error"),
        "{:?}",
        pi.records()
    );
}

#[test]
fn a_protocol_1_extension_cannot_send_protocol_2_messages() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v1_asks.sh"]));
    let error = pi.find(|r| r["type"] == "extension_error");
    assert_eq!(error["event"], "protocol", "{error}");
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown message type \"query\"")),
        "{error}"
    );
}

// ---- 3. control actions -----------------------------------------------------------------------

#[test]
fn active_tools_model_and_thinking_level_are_set_by_the_extension() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Ok."]))]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    let set = ask(
        &mut pi,
        &[
            json!({"type": "set_active_tools", "id": "t", "names": ["grep", "read", "nope", "grep"]}),
        ],
        "t",
    );
    assert_eq!(set["result"], json!(["grep", "read"]), "{set}");
    let level = ask(
        &mut pi,
        &[json!({"type": "set_thinking_level", "id": "l", "level": "high"})],
        "l",
    );
    assert_eq!(level["result"], "high", "{level}");
    let bad = ask(
        &mut pi,
        &[json!({"type": "set_thinking_level", "id": "l2", "level": "loud"})],
        "l2",
    );
    assert_eq!(bad["error"], "Invalid thinking level: loud");
    pi.command("p1", "prompt", json!({"message": "Hello"}));
    pi.wait_for_event("agent_end");
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    let names: Vec<&str> = request.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["grep", "read"]);
    // As pi, the system prompt lists only the active tools (here: the request's system text).
    let system = request.body["system"].to_string();
    assert!(system.contains("- grep:"), "{system}");
    assert!(!system.contains("- bash:"), "{system}");
    assert!(!system.contains("- edit:"), "{system}");

    let unknown = ask(
        &mut pi,
        &[json!({"type": "set_model", "id": "m0", "provider": "x", "modelId": "y"})],
        "m0",
    );
    assert_eq!(unknown["error"], "Model not found: x/y");
    let model = ask(
        &mut pi,
        &[
            json!({"type": "set_model", "id": "m", "provider": "fake-openai", "modelId": "fake-gpt"}),
        ],
        "m",
    );
    assert_eq!(model["result"], true, "{model}");
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["data"]["model"]["id"], "fake-gpt", "{state}");
    assert_eq!(state["data"]["thinkingLevel"], "off", "{state}");
    // A bad field is answered with an error, an id-less one reported as extension_error.
    let missing = ask(&mut pi, &[json!({"type": "fork", "id": "f"})], "f");
    assert_eq!(missing["error"], "fork: missing entryId");
    fake.finish();
}

#[test]
fn abort_and_wait_for_idle_from_an_extension() {
    let fake = FakeProvider::start(vec![Reply::stall_after(
        sse::AnthropicStream::new()
            .text(&["Thinking about it"])
            .unfinished(),
    )]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    pi.command("p1", "prompt", json!({"message": "Hello"}));
    pi.wait_for_event("message_update");
    let idle = ask(
        &mut pi,
        &[json!({"type": "query", "id": "i", "query": "idle"})],
        "i",
    );
    assert_eq!(idle["result"]["idle"], false, "{idle}");
    // The wait is answered only after the abort ended the run.
    let lines = [
        json!({"type": "wait_for_idle", "id": "w"}),
        json!({"type": "abort", "id": "a"}),
    ];
    let waited = ask(&mut pi, &lines, "w");
    assert_eq!(waited["result"], Value::Null, "{waited}");
    let end = pi
        .records()
        .iter()
        .position(|r| r["type"] == "agent_end")
        .expect("agent_end before the idle answer");
    let answered = pi
        .records()
        .iter()
        .position(|r| {
            r["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("answer ") && m.contains("\"w\""))
        })
        .expect("the answer");
    assert!(end < answered, "agent_end {end}, answer {answered}");
    // Idle now: a wait is answered at once.
    let again = ask(
        &mut pi,
        &[json!({"type": "wait_for_idle", "id": "w2"})],
        "w2",
    );
    assert_eq!(again["result"], Value::Null);
}

#[test]
fn sessions_are_created_forked_and_switched_by_the_extension() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Hi."]))]);
    let setup = with_extensions(Setup::anthropic(&fake).with_sessions(), &["v2.py"]);
    let mut pi = Pi::spawn(&setup);
    pi.command("p1", "prompt", json!({"message": "First question"}));
    pi.wait_for_event("agent_end");
    let first = pi.command("s1", "get_state", json!({}));
    let first_file = first["data"]["sessionFile"]
        .as_str()
        .expect("file")
        .to_string();
    let entries = ask(
        &mut pi,
        &[json!({"type": "query", "id": "e", "query": "entries"})],
        "e",
    );
    let user_entry = entries["result"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["type"] == "message" && e["message"]["role"] == "user")
        .expect("user entry")["id"]
        .as_str()
        .expect("id")
        .to_string();

    let created = ask_for_session_change(&mut pi, json!({"type": "new_session", "id": "n"}), "n");
    assert_eq!(created["result"], json!({"cancelled": false}), "{created}");
    let state = pi.command("s2", "get_state", json!({}));
    assert_ne!(state["data"]["sessionId"], first["data"]["sessionId"]);
    assert_eq!(state["data"]["messageCount"], 0);

    let back = ask_for_session_change(
        &mut pi,
        json!({"type": "switch_session", "id": "sw", "sessionPath": first_file}),
        "sw",
    );
    assert_eq!(back["result"], json!({"cancelled": false}), "{back}");
    let state = pi.command("s3", "get_state", json!({}));
    assert_eq!(state["data"]["sessionId"], first["data"]["sessionId"]);

    let forked = ask_for_session_change(
        &mut pi,
        json!({"type": "fork", "id": "f", "entryId": user_entry}),
        "f",
    );
    assert_eq!(
        forked["result"],
        json!({"text": "First question", "cancelled": false})
    );
    let state = pi.command("s4", "get_state", json!({}));
    assert_ne!(state["data"]["sessionId"], first["data"]["sessionId"]);
    fake.finish();
}

#[test]
fn compaction_with_custom_instructions_from_the_extension() {
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
    let mut pi = Pi::spawn(&with_extensions(setup, &["v2.py"]));
    for (id, text) in [
        ("p1", long("first question")),
        ("p2", long("second question")),
    ] {
        pi.command(id, "prompt", json!({"message": text}));
        pi.wait_for_event("agent_settled");
    }
    let started = ask(
        &mut pi,
        &[json!({"type": "compact", "id": "c", "customInstructions": "FOCUS-ON-XYZ"})],
        "c",
    );
    assert_eq!(started["result"], json!({"started": true}), "{started}");
    // The compaction runs while the answer goes round through v2.py: its compaction_end may
    // come before the answer's notice, which `ask` has consumed, so it is looked up in the whole
    // log (the two prompts' compactions, if any, are not "manual").
    let end = pi.find(|r| r["type"] == "compaction_end" && r["reason"] == "manual");
    assert_eq!(end["aborted"], false, "{end}");
    assert_eq!(end["reason"], "manual", "{end}");
    let compacted = next_event(&mut pi, "session_compact");
    // pi's meaning: an extension gave the compaction (here pi-rs summarized).
    assert_eq!(compacted["fromExtension"], false, "{compacted}");
    assert_eq!(compacted["reason"], "manual", "{compacted}");
    assert_eq!(
        compacted["compactionEntry"]["type"], "compaction",
        "{compacted}"
    );
    let requests = fake.requests();
    assert!(
        requests[2..]
            .iter()
            .any(|r| r.body.to_string().contains("FOCUS-ON-XYZ")),
        "{:?}",
        requests.len()
    );
}

#[test]
fn user_messages_expand_templates_and_need_a_delivery_while_busy() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["Greeted."])),
        Reply::stall_after(sse::AnthropicStream::new().text(&["Busy"]).unfinished()),
    ]);
    let setup = with_extensions(Setup::anthropic(&fake).trust_project(), &["v2.py"])
        .file(".pi/prompts/greet.md", "Please greet $1 warmly.");
    let mut pi = Pi::spawn(&setup);
    let send = json!({"type": "send_user_message", "content": "/greet Ada",
                      "expandPromptTemplates": true});
    relay(&mut pi, &[send]);
    pi.wait_for_event("agent_end");
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    assert!(
        request.body["messages"]
            .to_string()
            .contains("Please greet Ada warmly."),
        "{}",
        request.body["messages"]
    );
    pi.command("p2", "prompt", json!({"message": "Go on"}));
    pi.wait_for_event("message_update");
    let send = json!({"type": "send_user_message", "content": "now!"});
    relay(&mut pi, &[send]);
    let error = pi.find(|r| r["type"] == "extension_error");
    assert_eq!(error["event"], "send_user_message", "{error}");
    assert!(
        error["error"]
            .as_str()
            .unwrap_or_default()
            .contains("deliverAs")
    );
}

// ---- 4. late registration and removal ---------------------------------------------------------

#[test]
fn tools_and_commands_registered_and_removed_after_start() {
    let input = json!({"path": "x"}).to_string();
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use("toolu_l", "late_tool", &[&input])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Used it."])),
        Reply::sse(sse::anthropic_text(&["Without it."])),
    ]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    let tool = json!({"name": "late_tool", "description": "Arrived late",
                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}});
    let command = json!({"name": "late", "description": "A late command"});
    let lines = [
        json!({"type": "register_tool", "id": "rt", "tool": tool}),
        json!({"type": "register_command", "id": "rc", "command": command}),
    ];
    let registered = ask(&mut pi, &lines, "rc");
    assert_eq!(registered["result"], Value::Null, "{registered}");
    let commands = pi.command("c1", "get_commands", json!({}));
    let names = command_names(&commands);
    assert_eq!(names[..2], ["send", "late"], "{commands}");
    let done = pi.command("p0", "prompt", json!({"message": "/late"}));
    assert_eq!(done["data"]["disposition"], "handled", "{done}");

    pi.command("p1", "prompt", json!({"message": "Use the late tool"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    let offered = |request: &crate::fake_provider::RecordedRequest| -> Vec<String> {
        request.body["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str().map(String::from))
            .collect()
    };
    assert!(offered(&requests[0]).contains(&"late_tool".to_string()));
    let block = tool_result_block(&requests[1], "toolu_l");
    assert_eq!(tool_result_block_text(&block), "v2 late_tool x");

    let lines = [
        json!({"type": "unregister_tool", "id": "ut", "name": "late_tool"}),
        json!({"type": "unregister_tool", "id": "ut2", "name": "late_tool"}),
    ];
    let again = ask(&mut pi, &lines, "ut2");
    assert_eq!(again["result"], false, "{again}");
    let gone = ask(
        &mut pi,
        &[json!({"type": "unregister_command", "id": "uc", "name": "late"})],
        "uc",
    );
    assert_eq!(gone["result"], true, "{gone}");
    let commands = pi.command("c2", "get_commands", json!({}));
    assert!(!commands.to_string().contains("\"late\""), "{commands}");
    pi.command("p2", "prompt", json!({"message": "Again"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(3, pi.timeout());
    assert!(!offered(&requests[2]).contains(&"late_tool".to_string()));
    let bad = ask(
        &mut pi,
        &[json!({"type": "register_tool", "id": "b", "tool": {"description": "no name"}})],
        "b",
    );
    assert_eq!(bad["error"], "register_tool: missing name", "{bad}");
    fake.finish();
}

// ---- 5. terminating results and executionMode --------------------------------------------------

#[test]
fn a_terminating_tool_result_ends_the_run_without_a_follow_up_call() {
    let input = json!({"answer": "42"}).to_string();
    let fake = FakeProvider::start(vec![Reply::sse(
        sse::AnthropicStream::new()
            .tool_use("toolu_f", "finish", &[&input])
            .finish("tool_use"),
    )]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    pi.command("p1", "prompt", json!({"message": "Answer"}));
    let records = pi.records_until_event("agent_settled");
    let end = records
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool end");
    assert_eq!(end["result"]["content"][0]["text"], "v2 finish ", "{end}");
    assert_eq!(
        records.iter().filter(|r| r["type"] == "turn_start").count(),
        1,
        "one turn only"
    );
    // The script has one reply: a follow-up request would have failed the fake.
    fake.finish();
}

#[test]
fn a_blocked_call_can_end_the_run_and_sequential_tools_run_alone() {
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use(
                    "toolu_b",
                    "bash",
                    &[&json!({"command": "sleep 0.4; echo slow"}).to_string()],
                )
                .tool_use("toolu_s", "one_at_a_time", &["{}"])
                .finish("tool_use"),
        ),
        Reply::sse(sse::anthropic_text(&["Both ran."])),
        Reply::sse(
            sse::AnthropicStream::new()
                .tool_use(
                    "toolu_x",
                    "bash",
                    &[&json!({"command": "echo STOP"}).to_string()],
                )
                .finish("tool_use"),
        ),
    ]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    pi.command("p1", "prompt", json!({"message": "Run both"}));
    let records = pi.records_until_event("agent_settled");
    let ends: Vec<&str> = records
        .iter()
        .filter(|r| r["type"] == "tool_execution_end")
        .filter_map(|r| r["toolCallId"].as_str())
        .collect();
    // In parallel the quick extension tool would end first; sequential keeps the call order.
    assert_eq!(ends, ["toolu_b", "toolu_s"]);
    let starts: Vec<usize> = ["toolu_b", "toolu_s"]
        .iter()
        .map(|id| {
            records
                .iter()
                .position(|r| r["type"] == "tool_execution_end" && r["toolCallId"] == *id)
                .expect("end")
        })
        .collect();
    assert!(starts[0] < starts[1]);

    // A tool_call hook that blocks with terminate: the run ends after this batch.
    pi.command("p2", "prompt", json!({"message": "Stop"}));
    let records = pi.records_until_event("agent_settled");
    let end = records
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool end");
    assert_eq!(
        end["result"]["content"][0]["text"], "stopped by v2.py",
        "{end}"
    );
    assert_eq!(end["isError"], true);
    fake.finish();
}

// ---- 6./7. session lifecycle and selection events ---------------------------------------------

/// The next event v2.py reported, of this type.
#[track_caller]
fn next_event(pi: &mut Pi, event_type: &str) -> Value {
    next_report(pi, "event ", |event| event["type"] == event_type)
}

#[test]
fn model_thinking_and_session_changes_reach_v2_extensions() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(Setup::anthropic(&fake).with_sessions(), &["v2.py"]);
    let mut pi = Pi::spawn(&setup);
    let start = next_event(&mut pi, "session_start");
    assert_eq!(start["reason"], "startup");

    pi.command(
        "m",
        "set_model",
        json!({"provider": "fake-openai", "modelId": "fake-gpt"}),
    );
    let selected = next_event(&mut pi, "model_select");
    assert_eq!(selected["source"], "set");
    assert_eq!(selected["model"]["id"], "fake-gpt");
    assert_eq!(selected["previousModel"]["id"], "fake-claude");
    let level = next_event(&mut pi, "thinking_level_select");
    assert_eq!(level["level"], "off", "{level}");
    assert!(level["previousLevel"].is_string(), "{level}");

    let before = pi.command("s1", "get_state", json!({}));
    pi.command("n", "new_session", json!({}));
    let after = pi.command("s2", "get_state", json!({}));
    // As pi 1.6.0: the extension hears session_shutdown "new" and is stopped; a new process
    // (fresh state) hears session_start "new".
    let start = restarted(&mut pi, "new");
    assert_eq!(start["previousSessionFile"], before["data"]["sessionFile"]);
    // The new process's stderr line may come after its notice on stdout: wait for both.
    let stderr = pi.stderr_when(|s| {
        !stderr_events(s, "session_shutdown").is_empty()
            && stderr_events(s, "session_start").len() >= 2
    });
    let shutdowns = stderr_events(&stderr, "session_shutdown");
    assert_eq!(
        shutdowns.len(),
        1,
        "one session_shutdown, not a second for the stop: {stderr}"
    );
    assert_eq!(shutdowns[0].1["reason"], "new");
    assert_eq!(
        shutdowns[0].1["targetSessionFile"],
        after["data"]["sessionFile"]
    );
    let starts = stderr_events(&stderr, "session_start");
    let reasons: Vec<&Value> = starts.iter().map(|(_, e)| &e["reason"]).collect();
    assert_eq!(reasons, ["startup", "new"], "{stderr}");
    assert_eq!(starts[0].0, shutdowns[0].0, "the old process stopped");
    assert_ne!(starts[1].0, starts[0].0, "a new process started");
    // At exit the new process (and only it) hears session_shutdown "quit".
    assert!(pi.close_and_wait().success());
    let stderr = pi.stderr_when(|s| stderr_events(s, "session_shutdown").len() == 2);
    let shutdowns = stderr_events(&stderr, "session_shutdown");
    assert_eq!(shutdowns.len(), 2, "{stderr}");
    assert_eq!(shutdowns[1].1["reason"], "quit");
    assert_eq!(shutdowns[1].0, starts[1].0);
}

#[test]
fn the_context_hook_rewrites_the_messages_of_one_request() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Rewritten."]))]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    pi.command("p1", "prompt", json!({"message": "REWRITE-CONTEXT please"}));
    pi.wait_for_event("agent_end");
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    let sent = request.body["messages"].to_string();
    assert!(sent.contains("rewritten by v2.py"), "{sent}");
    assert!(!sent.contains("REWRITE-CONTEXT"), "{sent}");
    // The conversation itself keeps the prompt.
    let messages = pi.command("m", "get_messages", json!({}));
    assert!(messages.to_string().contains("REWRITE-CONTEXT please"));
    fake.finish();
}

#[test]
fn exec_runs_through_the_approval_gate() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2.py"]).settings(json!({
        "approvals": {"rules": [
            {"tool": "bash", "command": "rm *", "action": "deny", "reason": "No rm here"},
            {"tool": "bash", "command": "echo *", "action": "ask"}
        ]}
    }));
    let mut pi = Pi::spawn(&setup);
    // No shell: the program and its arguments as given (a `sh -c` line would be asked about).
    let plain =
        json!({"type": "exec", "id": "x1", "command": "printf", "args": ["%s-%s", "a b", "c"]});
    let done = ask(&mut pi, &[plain], "x1");
    assert_eq!(
        done["result"],
        json!({"stdout": "a b-c", "stderr": "", "code": 0, "killed": false, "truncated": false}),
        "{done}"
    );
    let failing =
        json!({"type": "exec", "id": "x0", "command": "ls", "args": ["no-such-dir-here"]});
    let failed = ask(&mut pi, &[failing], "x0");
    assert_ne!(failed["result"]["code"], 0, "{failed}");
    assert!(
        failed["result"]["stderr"]
            .as_str()
            .is_some_and(|e| e.contains("no-such-dir-here")),
        "{failed}"
    );
    let denied = ask(
        &mut pi,
        &[json!({"type": "exec", "id": "x2", "command": "rm", "args": ["-rf", "build"]})],
        "x2",
    );
    assert_eq!(denied["error"], "No rm here", "{denied}");

    let asked = json!({"type": "exec", "id": "x3", "command": "echo", "args": ["hello there"]});
    relay(&mut pi, &[asked]);
    allow_once(&mut pi, "echo 'hello there'");
    let answer = next_answer(&mut pi, "x3");
    assert_eq!(answer["result"]["stdout"], "hello there\n", "{answer}");
    let no_id = json!({"type": "exec", "command": "true"});
    relay(&mut pi, &[no_id]);
    let error = pi.find(|r| r["type"] == "extension_error");
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("exec needs an id")),
        "{error}"
    );
}

#[test]
fn session_before_hooks_can_cancel_a_session_change() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Hi."]))]);
    let setup = with_extensions(Setup::anthropic(&fake).with_sessions(), &["v2.py"]);
    let mut pi = Pi::spawn(&setup);
    pi.command("p1", "prompt", json!({"message": "First"}));
    pi.wait_for_event("agent_end");
    let before = pi.command("s0", "get_state", json!({}));

    let locked = pi.command(
        "sw",
        "switch_session",
        json!({"sessionPath": "/tmp/locked.jsonl"}),
    );
    assert_eq!(locked["success"], true, "{locked}");
    assert_eq!(locked["data"], json!({"cancelled": true}), "{locked}");
    let cloned = pi.command("c", "clone", json!({}));
    assert_eq!(cloned["data"], json!({"cancelled": true}), "{cloned}");
    let same = pi.command("s1", "get_state", json!({}));
    assert_eq!(same["data"]["sessionId"], before["data"]["sessionId"]);

    let messages = pi.command("fm", "get_fork_messages", json!({}));
    let entry = messages["data"]["messages"][0]["entryId"].clone();
    let forked = pi.command("f", "fork", json!({"entryId": entry}));
    assert_eq!(
        forked["data"],
        json!({"text": "First", "cancelled": false}),
        "{forked}"
    );
    restarted(&mut pi, "fork");
    // The extension's own request goes through the same hook.
    let created = ask_for_session_change(&mut pi, json!({"type": "new_session", "id": "n"}), "n");
    assert_eq!(created["result"], json!({"cancelled": false}), "{created}");
    let after = pi.command("s2", "get_state", json!({}));
    assert_ne!(after["data"]["sessionId"], before["data"]["sessionId"]);
    fake.finish();
}

// ---- systemPromptOptions in before_agent_start ------------------------------------------------

#[test]
fn before_agent_start_sees_and_changes_the_system_prompt_options() {
    let reply = || Reply::sse(sse::AnthropicStream::new().text(&["Ok"]).finish("end_turn"));
    let fake = FakeProvider::start(vec![reply(), reply(), reply()]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    pi.command("p1", "prompt", json!({"message": "PROMPT-OPTIONS please"}));
    let options: Value = serde_json::from_str(&next_notice(&mut pi, "options ")).expect("json");
    let cwd = pi.cwd().to_string_lossy().into_owned();
    assert_eq!(options["cwd"], cwd.as_str(), "{options}");
    let selected = options["selectedTools"].to_string();
    assert!(
        selected.contains("\"bash\"") && selected.contains("\"read\""),
        "{options}"
    );
    assert!(options["toolSnippets"]["bash"].is_string(), "{options}");
    assert_eq!(options["sections"], json!({}), "{options}");
    assert_eq!(options["promptGuidelines"], json!([]), "{options}");
    assert!(options["contextFiles"].is_array() && options["skills"].is_array());
    pi.wait_for_event("agent_end");

    // The run's prompt is built from the changed options; bash is no longer offered.
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    let system = request.body["system"].to_string();
    assert!(
        system.contains("<team>\\nTeam rules from v2.py\\n</team>"),
        "{system}"
    );
    assert!(system.contains("- Answer in haiku"), "{system}");
    assert!(!system.contains("- bash:"), "{system}");
    let tools = request.body["tools"].to_string();
    assert!(
        !tools.contains("\"bash\"") && tools.contains("\"edit\""),
        "{tools}"
    );
    // The transcript's system message carries the section.
    let patches: Vec<Value> = pi
        .records()
        .iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "system")
        .map(|r| r["message"]["sections"].clone())
        .collect();
    assert_eq!(
        patches[0]["team"], "<team>\nTeam rules from v2.py\n</team>",
        "{patches:?}"
    );

    // The next run has the agent's own prompt again (the section is dropped); the tool
    // selection stays, as after set_active_tools.
    pi.command("p2", "prompt", json!({"message": "Hello"}));
    pi.wait_for_event("agent_end");
    let request = &fake.wait_for_requests(2, pi.timeout())[1];
    let system = request.body["system"].to_string();
    assert!(!system.contains("Team rules"), "{system}");
    assert!(!request.body["tools"].to_string().contains("\"bash\""));
    let patches: Vec<Value> = pi
        .records()
        .iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "system")
        .map(|r| r["message"]["sections"].clone())
        .collect();
    assert_eq!(patches.len(), 2, "{patches:?}");
    assert_eq!(patches[1]["team"], Value::Null, "{patches:?}");
    assert!(
        patches[1]
            .as_object()
            .is_some_and(|p| p.contains_key("team"))
    );

    // A section name pi refuses is an extension_error; the run goes on with the agent's prompt.
    pi.command(
        "p3",
        "prompt",
        json!({"message": "PROMPT-OPTIONS BAD-SECTION"}),
    );
    let error = pi.wait_for_event("extension_error");
    assert_eq!(
        error["error"], "systemPromptOptions: Invalid system prompt section name: Bad Name",
        "{error}"
    );
    // The run goes on: its request is answered before the fake provider is checked.
    pi.wait_for_event("agent_end");
    fake.finish();
}

// ---- 6. reload (ext-session) -------------------------------------------------------------------

/// The lines v2.py wrote on stderr about `event_type` events (or answers, `"answer"`):
/// `(pid, event)`.
fn stderr_events(stderr: &str, event_type: &str) -> Vec<(String, Value)> {
    stderr
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("v2.py[")?;
            let (pid, json) = rest.split_once("] event ").or_else(|| {
                let (pid, json) = rest.split_once("] answer ")?;
                (event_type == "answer").then_some((pid, json))
            })?;
            let event: Value = serde_json::from_str(json).ok()?;
            if event_type == "answer" {
                return event.get("id").is_some().then(|| (pid.to_string(), event));
            }
            let event: Value = serde_json::from_str(json).ok()?;
            (event["type"] == event_type).then(|| (pid.to_string(), event))
        })
        .collect()
}

#[test]
fn reload_restarts_the_extensions_and_loads_resources_anew() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(
        Setup::anthropic(&fake).trust_project(),
        &["v2.py", "recorder.py"],
    )
    .arg("--plan");
    let mut pi = Pi::spawn(&setup);
    assert_eq!(next_event(&mut pi, "session_start")["reason"], "startup");
    let q = |id: &str| json!({"type": "query", "id": id, "query": "system_prompt"});
    let prompt = ask(&mut pi, &[q("sp1")], "sp1");
    assert!(!prompt["result"].to_string().contains("RELOADED-RULE"));
    // Resources that appear after the start are seen only after a reload.
    std::fs::create_dir_all(pi.cwd().join(".pi/prompts")).unwrap();
    std::fs::write(pi.cwd().join(".pi/prompts/late.md"), "A late template").unwrap();
    std::fs::write(pi.cwd().join("AGENTS.md"), "RELOADED-RULE: be brief").unwrap();
    // resources_discover (after the reload) adds this folder's templates.
    std::fs::create_dir_all(pi.cwd().join("ext-prompts")).unwrap();
    std::fs::write(
        pi.cwd().join("ext-prompts/discovered.md"),
        "From an extension",
    )
    .unwrap();
    let names = |pi: &mut Pi, id: &str| command_names(&pi.command(id, "get_commands", json!({})));
    assert!(!names(&mut pi, "c1").contains(&"late".to_string()));

    // The asking process is stopped right after the answer: its notices may not reach stdout.
    let reload = json!({"type": "reload", "id": "r"});
    relay(&mut pi, &[reload]);
    // The new process gets the command line's flags again and hears session_start "reload".
    let flags: Value = serde_json::from_str(&next_notice(&mut pi, "flags ")).expect("json");
    assert_eq!(flags, json!({"plan": true}));
    assert_eq!(next_event(&mut pi, "session_start")["reason"], "reload");
    // The new process's stderr line may come after its notice on stdout: wait for both.
    let stderr = pi.stderr_when(|s| {
        !stderr_events(s, "session_shutdown").is_empty()
            && stderr_events(s, "session_start").len() >= 2
    });
    let shutdowns = stderr_events(&stderr, "session_shutdown");
    let starts = stderr_events(&stderr, "session_start");
    assert_eq!(shutdowns.len(), 1, "{stderr}");
    assert_eq!(shutdowns[0].1["reason"], "reload");
    assert_eq!(starts.len(), 2, "{stderr}");
    assert_eq!(starts[0].0, shutdowns[0].0, "the old process stopped");
    assert_ne!(starts[1].0, starts[0].0, "a new process started");
    let answers = stderr_events(&stderr, "answer");
    let answer = answers
        .iter()
        .find(|(_, a)| a["id"] == "r")
        .expect("answered");
    assert_eq!(
        answer.1,
        json!({"type": "action_result", "id": "r", "result": null})
    );

    let prompt = ask(&mut pi, &[q("sp2")], "sp2");
    assert!(
        prompt["result"].to_string().contains("RELOADED-RULE"),
        "{prompt}"
    );
    // pi-rs asked resources_discover right after session_start, and v2.py answers in order: its
    // hook_result came before the query just answered, so the discovered paths are loaded.
    let after = names(&mut pi, "c2");
    assert!(after.contains(&"late".to_string()), "{after:?}");
    assert!(after.contains(&"discovered".to_string()), "{after:?}");
    // A protocol-1 extension is restarted too.
    let log = pi.cwd().join("recorder-events.log");
    let text = wait_for_file(&log, pi.timeout(), |t| {
        t.matches("session_start").count() == 2
    });
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["session_start", "session_shutdown", "eof", "session_start"]
    );
    // At exit the new process hears session_shutdown "quit".
    assert!(pi.close_and_wait().success());
    let stderr = pi.stderr_when(|s| stderr_events(s, "session_shutdown").len() == 2);
    let shutdowns = stderr_events(&stderr, "session_shutdown");
    assert_eq!(shutdowns.len(), 2, "{stderr}");
    assert_eq!(shutdowns[1].1["reason"], "quit");
    assert_eq!(shutdowns[1].0, starts[1].0);
    fake.finish();
}

/// `get_state`'s queue modes and auto-compaction: what the agent takes from settings.json.
fn settings_state(pi: &mut Pi, id: &str) -> Value {
    let state = pi.command(id, "get_state", json!({}));
    json!({
        "steeringMode": state["data"]["steeringMode"],
        "followUpMode": state["data"]["followUpMode"],
        "autoCompactionEnabled": state["data"]["autoCompactionEnabled"],
    })
}

/// pi 1.6.0's `reload` reads settings.json again (a file that no longer parses keeps its
/// settings; built-ins `defaultTools` adds are offered, dropped ones stay), and so does the new
/// runtime of a session change (where such a file counts as empty); until then the settings
/// read at start hold.
#[test]
fn reload_and_a_session_change_read_settings_anew() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(
        Setup::anthropic(&fake)
            .trust_project()
            .settings(json!({"steeringMode": "one-at-a-time"})),
        &["v2.py"],
    );
    let mut pi = Pi::spawn(&setup);
    assert_eq!(next_event(&mut pi, "session_start")["reason"], "startup");
    let at_start = json!({"steeringMode": "one-at-a-time", "followUpMode": "one-at-a-time",
                          "autoCompactionEnabled": true});
    assert_eq!(settings_state(&mut pi, "g1"), at_start);
    let global = pi.agent_dir().join("settings.json");
    std::fs::write(
        &global,
        json!({"steeringMode": "all", "compaction": {"enabled": false},
               "defaultTools": ["read", "bash", "edit", "grep"]})
        .to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(pi.cwd().join(".pi")).unwrap();
    std::fs::write(
        pi.cwd().join(".pi/settings.json"),
        json!({"followUpMode": "all"}).to_string(),
    )
    .unwrap();
    assert_eq!(settings_state(&mut pi, "g2"), at_start);
    // The built-ins offered (v2.py's own tools follow them).
    let builtins = |pi: &mut Pi, id: &str| -> Vec<String> {
        let query = json!({"type": "query", "id": id, "query": "active_tools"});
        let names = ask(pi, &[query], id)["result"].clone();
        serde_json::from_value::<Vec<String>>(names)
            .unwrap()
            .into_iter()
            .filter(|n| {
                ["read", "bash", "edit", "write", "grep", "find", "ls"].contains(&n.as_str())
            })
            .collect()
    };
    assert_eq!(builtins(&mut pi, "t1"), ["read", "bash", "edit", "write"]);

    let reload = json!({"type": "reload", "id": "r"});
    pi.send(json!({"type": "prompt", "message": format!("/send {reload}")}));
    assert_eq!(next_event(&mut pi, "session_start")["reason"], "reload");
    let reread = json!({"steeringMode": "all", "followUpMode": "all",
                        "autoCompactionEnabled": false});
    assert_eq!(settings_state(&mut pi, "g3"), reread);
    // The extensions see them too.
    let query = json!({"type": "query", "id": "s", "query": "settings"});
    let seen = ask(&mut pi, &[query], "s");
    assert_eq!(seen["result"]["steeringMode"], "all", "{seen}");
    assert_eq!(seen["result"]["followUpMode"], "all", "{seen}");
    assert_eq!(
        builtins(&mut pi, "t2"),
        ["read", "bash", "edit", "write", "grep"]
    );

    // A global file that no longer parses: a reload keeps what it had.
    std::fs::write(&global, "{not json").unwrap();
    let reload = json!({"type": "reload", "id": "r2"});
    pi.send(json!({"type": "prompt", "message": format!("/send {reload}")}));
    assert_eq!(next_event(&mut pi, "session_start")["reason"], "reload");
    assert_eq!(settings_state(&mut pi, "g4"), reread);
    // A session change reads it as empty, as pi's new runtime; the project file still counts.
    let changed = pi.command("n", "new_session", json!({}));
    assert_eq!(changed["success"], true, "{changed}");
    assert_eq!(next_event(&mut pi, "session_start")["reason"], "new");
    assert_eq!(
        settings_state(&mut pi, "g5"),
        json!({"steeringMode": "one-at-a-time", "followUpMode": "all",
               "autoCompactionEnabled": true})
    );
    fake.finish();
}

/// Without extensions too, a session change reads settings.json again (a file that no longer
/// parses counts as empty). Passes against pi 1.6.0 too.
#[test]
fn a_session_change_without_extensions_reads_settings_anew() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).settings(json!({"followUpMode": "all"})));
    let state = pi.command("g1", "get_state", json!({}));
    assert_eq!(state["data"]["followUpMode"], "all", "{state}");
    let global = pi.agent_dir().join("settings.json");
    std::fs::write(&global, json!({"steeringMode": "all"}).to_string()).unwrap();
    let changed = pi.command("n1", "new_session", json!({}));
    assert_eq!(changed["success"], true, "{changed}");
    let state = pi.command("g2", "get_state", json!({}));
    assert_eq!(state["data"]["followUpMode"], "one-at-a-time", "{state}");
    assert_eq!(state["data"]["steeringMode"], "all", "{state}");
    std::fs::write(&global, "{not json").unwrap();
    let changed = pi.command("n2", "new_session", json!({}));
    assert_eq!(changed["success"], true, "{changed}");
    let state = pi.command("g3", "get_state", json!({}));
    assert_eq!(state["data"]["steeringMode"], "one-at-a-time", "{state}");
    fake.finish();
}

/// Starts pi-rs with v2.py and has it reload with a new v2.py that waits for the test's word
/// ("go-register") before registering; returns once the new process waits.
fn reload_with_a_slow_extension() -> (FakeProvider, Pi) {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    assert_eq!(next_event(&mut pi, "session_start")["reason"], "startup");
    std::fs::write(pi.cwd().join("slow-register"), "").unwrap();
    let reload = json!({"type": "reload", "id": "r"});
    relay(&mut pi, &[reload]);
    let stderr = pi.stderr_when(|s| s.contains("waiting to register"));
    assert!(stderr.contains("waiting to register"), "{stderr}");
    (fake, pi)
}

#[test]
fn commands_are_answered_while_a_reload_starts_the_extensions() {
    let (fake, mut pi) = reload_with_a_slow_extension();
    // The new extension has not registered: the agent still answers, busy.
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["success"], true, "{state}");
    assert_eq!(state["data"]["isStreaming"], true, "{state}");
    let prompt = pi.command("p", "prompt", json!({"message": "Hello"}));
    assert_eq!(prompt["success"], false, "{prompt}");
    // Registered after the agent answered (past no registration timeout): it is the new host's.
    std::fs::write(pi.cwd().join("go-register"), "").unwrap();
    assert_eq!(next_event(&mut pi, "session_start")["reason"], "reload");
    let state = pi.command("s2", "get_state", json!({}));
    assert_eq!(state["data"]["isStreaming"], false, "{state}");
    let answer = ask(
        &mut pi,
        &[json!({"type": "query", "id": "i", "query": "idle"})],
        "i",
    );
    assert_eq!(answer["result"]["idle"], true, "{answer}");
    fake.finish();
}

#[test]
fn abort_ends_a_reload_and_the_run_goes_on_without_extensions() {
    let (fake, mut pi) = reload_with_a_slow_extension();
    let aborted = pi.command("a", "abort", json!({}));
    assert_eq!(aborted["success"], true, "{aborted}");
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["data"]["isStreaming"], false, "{state}");
    // The extension that registers after the abort is stopped, not adopted: its process ends,
    // it never hears session_start and its command is not offered.
    let stderr = pi.stderr_raw();
    let pid = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("v2.py[")?
                .strip_suffix("] waiting to register")
        })
        .expect("the new process's pid")
        .to_string();
    std::fs::write(pi.cwd().join("go-register"), "").unwrap();
    let proc_dir = std::path::Path::new("/proc").join(&pid);
    let deadline = std::time::Instant::now() + pi.timeout();
    while proc_dir.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!proc_dir.exists(), "the new process still runs");
    let stderr = pi.stderr_raw();
    assert_eq!(stderr_events(&stderr, "session_start").len(), 1, "{stderr}");
    let commands = pi.command("c", "get_commands", json!({}));
    let names = commands["data"]["commands"].to_string();
    assert!(!names.contains("\"send\""), "{commands}");
    fake.finish();
}

#[test]
fn reload_is_refused_while_a_run_is_going() {
    let fake = FakeProvider::start(vec![Reply::stall_after(
        sse::AnthropicStream::new().text(&["Busy"]).unfinished(),
    )]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    pi.command("p1", "prompt", json!({"message": "Hello"}));
    pi.wait_for_event("message_update");
    let answer = ask(&mut pi, &[json!({"type": "reload", "id": "r"})], "r");
    assert_eq!(
        answer["error"], "Wait for the current response to finish before reloading.",
        "{answer}"
    );
    // The extension still runs: it answers a query.
    let idle = ask(
        &mut pi,
        &[json!({"type": "query", "id": "i", "query": "idle"})],
        "i",
    );
    assert_eq!(idle["result"]["idle"], false, "{idle}");
}

// ---- 7. tree navigation (ext-session) ----------------------------------------------------------

/// Every `event_type` event v2.py reported so far (in order; also those an `ask` skipped).
fn events_seen(pi: &Pi, event_type: &str) -> Vec<Value> {
    pi.records()
        .iter()
        .filter_map(|r| r["message"].as_str()?.strip_prefix("event "))
        .filter_map(|text| serde_json::from_str::<Value>(text).ok())
        .filter(|event| event["type"] == event_type)
        .collect()
}

#[test]
fn navigate_tree_moves_the_leaf_through_the_session_before_tree_hook() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["A1"])),
        Reply::sse(sse::anthropic_text(&["A2"])),
        // The branch summary pi-rs asks for after the malformed answer ("BAD").
        Reply::status(400, fixture("anthropic/error_400.json"), &[]),
    ]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    pi.command("p1", "prompt", json!({"message": "First"}));
    pi.wait_for_event("agent_end");
    pi.command("p2", "prompt", json!({"message": "Second"}));
    pi.wait_for_event("agent_end");
    let entries = ask(
        &mut pi,
        &[json!({"type": "query", "id": "e", "query": "entries"})],
        "e",
    );
    let id_of = |role: &str, nth: usize| -> String {
        entries["result"]
            .as_array()
            .expect("entries")
            .iter()
            .filter(|e| e["type"] == "message" && e["message"]["role"] == role)
            .nth(nth)
            .expect("entry")["id"]
            .as_str()
            .expect("id")
            .to_string()
    };
    let (a1, u2, a2) = (
        id_of("assistant", 0),
        id_of("user", 1),
        id_of("assistant", 1),
    );
    let nav = |id: &str, target: &str, extra: Value| {
        let mut line = json!({"type": "navigate_tree", "id": id, "targetId": target});
        line.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        line
    };
    let leaf = |pi: &mut Pi, id: &str| -> Value {
        ask(
            pi,
            &[json!({"type": "query", "id": id, "query": "leaf"})],
            id,
        )["result"]["id"]
            .clone()
    };

    // A user message is re-entered from its parent.
    let moved = ask(&mut pi, &[nav("n1", &u2, json!({}))], "n1");
    assert_eq!(moved["result"], json!({"cancelled": false}), "{moved}");
    let trees = events_seen(&pi, "session_tree");
    assert_eq!(trees.len(), 1, "{trees:?}");
    let tree = &trees[0];
    assert_eq!(tree["newLeafId"], a1.as_str(), "{tree}");
    assert_eq!(tree["oldLeafId"], a2.as_str(), "{tree}");
    assert!(tree.get("summaryEntry").is_none(), "{tree}");
    let roles = |pi: &mut Pi, id: &str| -> Vec<String> {
        let messages = pi.command(id, "get_messages", json!({}));
        messages["data"]["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["role"].as_str().unwrap_or_default().to_string())
            .filter(|role| role != "system")
            .collect()
    };
    assert_eq!(roles(&mut pi, "m1"), ["user", "assistant"]);

    // The hook cancels; a bad answer counts as none; errors change nothing.
    let cancelled = ask(
        &mut pi,
        &[nav("n2", &a2, json!({"customInstructions": "CANCEL"}))],
        "n2",
    );
    assert_eq!(
        cancelled["result"],
        json!({"cancelled": true}),
        "{cancelled}"
    );
    let missing = ask(&mut pi, &[nav("n3", "nope", json!({}))], "n3");
    assert_eq!(missing["error"], "Entry nope not found", "{missing}");
    let bad = ask(
        &mut pi,
        &[nav(
            "n4",
            &id_of("user", 0),
            json!({"summarize": true, "customInstructions": "BAD"}),
        )],
        "n4",
    );
    // Without a summary from the hook, the model is asked; its failure fails the navigation.
    assert!(
        bad["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Branch summarization failed: ")),
        "{bad}"
    );
    assert_eq!(fake.wait_for_requests(3, pi.timeout()).len(), 3);
    assert!(
        pi.records()
            .iter()
            .any(|r| r["type"] == "extension_error" && r["event"] == "session_before_tree"),
        "the malformed answer is reported"
    );
    assert_eq!(leaf(&mut pi, "l1"), a1.as_str());

    // Back to the second reply, then to the first with the extension's summary.
    ask(&mut pi, &[nav("n5", &a2, json!({}))], "n5");
    assert_eq!(leaf(&mut pi, "l2"), a2.as_str());
    let summarized = ask(
        &mut pi,
        &[nav(
            "n6",
            &a1,
            json!({"summarize": true, "customInstructions": "SUMMARY"}),
        )],
        "n6",
    );
    assert_eq!(
        summarized["result"],
        json!({"cancelled": false}),
        "{summarized}"
    );
    let trees = events_seen(&pi, "session_tree");
    assert_eq!(
        trees.len(),
        3,
        "one per navigation that happened: {trees:?}"
    );
    let tree = &trees[2];
    let summary = &tree["summaryEntry"];
    assert_eq!(summary["type"], "branch_summary", "{tree}");
    assert_eq!(summary["summary"], "summary by v2.py of 2 entries");
    assert_eq!(summary["parentId"], a1.as_str());
    assert_eq!(summary["fromHook"], true);
    assert_eq!(summary["details"], json!({"by": "v2.py"}));
    assert_eq!(tree["fromExtension"], true);
    assert_eq!(roles(&mut pi, "m2"), ["user", "assistant", "branchSummary"]);
    // The label is on the summary entry.
    let label = ask(
        &mut pi,
        &[json!({"type": "query", "id": "lf", "query": "leaf"})],
        "lf",
    );
    assert_eq!(label["result"]["type"], "label", "{label}");
    assert_eq!(label["result"]["targetId"], summary["id"]);
    assert_eq!(label["result"]["label"], "from-v2");
    fake.finish();
}

// ---- 8. session_before_compact (ext-session) ---------------------------------------------------

fn small_window_with_v2(fake: &FakeProvider) -> Setup {
    let setup = Setup::new(fake, "fake-anthropic", "fake-claude-small")
        .models_json(&crate::fake_provider::fixture("models_small_window.json"))
        .settings(json!({
            "compaction": {"reserveTokens": 1000, "keepRecentTokens": 200},
            "retry": {"baseDelayMs": 20}
        }));
    with_extensions(setup, &["v2.py"])
}

fn long_text(word: &str) -> String {
    format!("{word} {}", "filler ".repeat(200))
}

#[test]
fn session_before_compact_cancels_or_gives_the_summary_of_a_manual_compaction() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&[&long_text("first answer")])),
        Reply::sse(sse::anthropic_text(&[&long_text("second answer")])),
    ]);
    let mut pi = Pi::spawn(&small_window_with_v2(&fake));
    for (id, text) in [
        ("p1", long_text("first question")),
        ("p2", long_text("second question")),
    ] {
        pi.command(id, "prompt", json!({"message": text}));
        pi.wait_for_event("agent_settled");
    }
    let cancelled = pi.command(
        "c1",
        "compact",
        json!({"customInstructions": "CANCEL-COMPACT"}),
    );
    assert_eq!(cancelled["success"], false, "{cancelled}");
    assert_eq!(cancelled["error"], "Compaction cancelled", "{cancelled}");
    let end = pi.wait_for_event("compaction_end");
    assert_eq!(end["aborted"], true, "{end}");
    assert!(end.get("errorMessage").is_none(), "{end}");
    let failed = next_event(&mut pi, "session_compact_failed");
    assert_eq!(failed["reason"], "manual", "{failed}");

    // The extension's own compaction: saved as given, no summary request.
    let custom = pi.command(
        "c2",
        "compact",
        json!({"customInstructions": "CUSTOM-COMPACT"}),
    );
    assert_eq!(custom["success"], true, "{custom}");
    let summary = custom["data"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.starts_with("custom manual summary by v2.py"),
        "{custom}"
    );
    let compacted = next_event(&mut pi, "session_compact");
    assert_eq!(compacted["fromExtension"], true, "{compacted}");
    assert_eq!(
        compacted["compactionEntry"]["fromHook"], true,
        "{compacted}"
    );
    assert_eq!(compacted["compactionEntry"]["summary"], summary);
    assert_eq!(
        compacted["compactionEntry"]["details"],
        json!({"by": "v2.py"})
    );
    assert!(custom["data"]["estimatedTokensAfter"].as_u64().unwrap_or(0) > 0);
    // No summary request went to the model.
    assert_eq!(fake.requests().len(), 2);
    let messages = pi.command("m", "get_messages", json!({}));
    assert!(
        messages
            .to_string()
            .contains("custom manual summary by v2.py")
    );
    fake.finish();
}

#[test]
fn a_bad_first_kept_entry_is_refused_and_pi_rs_summarizes() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&[&long_text("first answer")])),
        Reply::sse(sse::anthropic_text(&[&long_text("second answer")])),
        Reply::sse(sse::anthropic_text(&["## Goal\nSummarized by the model."])),
        Reply::sse(sse::anthropic_text(&["## Turn prefix\nSummarized."])),
    ]);
    let mut pi = Pi::spawn(&small_window_with_v2(&fake));
    for (id, text) in [
        ("p1", long_text("first question")),
        ("p2", long_text("second question")),
    ] {
        pi.command(id, "prompt", json!({"message": text}));
        pi.wait_for_event("agent_settled");
    }
    let compacted = pi.command("c", "compact", json!({"customInstructions": "BAD-FIRST"}));
    assert_eq!(compacted["success"], true, "{compacted}");
    let summary = compacted["data"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("Summarized by the model."), "{compacted}");
    let error = pi
        .records()
        .iter()
        .find(|r| r["type"] == "extension_error" && r["event"] == "session_before_compact")
        .cloned()
        .expect("the refused answer is reported");
    assert!(
        error["error"].as_str().unwrap_or_default().contains("nope"),
        "{error}"
    );
    fake.finish();
}

#[test]
fn threshold_and_overflow_compactions_use_the_extension_summary() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&[&long_text("first answer")])),
        Reply::sse(
            sse::AnthropicStream::new()
                .input_tokens(3500)
                .text(&["second answer"])
                .finish("end_turn"),
        ),
        Reply::sse(sse::anthropic_text(&[&long_text("third answer")])),
        Reply::status(
            400,
            crate::fake_provider::fixture("anthropic/error_prompt_too_long.json"),
            &[],
        ),
        Reply::sse(sse::anthropic_text(&["Recovered answer."])),
    ]);
    let mut pi = Pi::spawn(&small_window_with_v2(&fake));
    pi.command(
        "p1",
        "prompt",
        json!({"message": long_text("first question")}),
    );
    pi.wait_for_event("agent_settled");
    pi.command(
        "p2",
        "prompt",
        json!({"message": long_text("second question")}),
    );
    let end = pi.wait_for_event("compaction_end");
    assert_eq!(end["reason"], "threshold", "{end}");
    let summary = end["result"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.starts_with("custom threshold summary by v2.py"),
        "{end}"
    );
    pi.wait_for_event("agent_settled");
    assert_eq!(fake.requests().len(), 2, "no summary request");

    pi.command(
        "p3",
        "prompt",
        json!({"message": long_text("third question")}),
    );
    pi.wait_for_event("agent_settled");
    pi.command("p4", "prompt", json!({"message": "fourth question"}));
    let end = pi.wait_for_event("compaction_end");
    assert_eq!(end["reason"], "overflow", "{end}");
    assert_eq!(end["willRetry"], true, "{end}");
    assert!(
        end["result"]["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("custom overflow summary by v2.py")),
        "{end}"
    );
    pi.wait_for_event("agent_settled");
    let requests = fake.wait_for_requests(5, pi.timeout());
    assert!(
        requests[4]
            .body
            .to_string()
            .contains("custom overflow summary by v2.py"),
        "the retried run starts from the extension's summary"
    );
    fake.finish();
}

// ---- 9. user_bash (ext-session) ----------------------------------------------------------------

#[test]
fn user_bash_answers_blocks_or_lets_the_rpc_bash_command_run() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    let answered = pi.command("b1", "bash", json!({"command": "remote: ls"}));
    assert_eq!(answered["success"], true, "{answered}");
    let output = answered["data"]["output"].as_str().unwrap_or_default();
    assert!(output.starts_with("v2 ran remote: ls in "), "{answered}");
    assert_eq!(answered["data"]["exitCode"], 0);
    let messages = pi.command("m", "get_messages", json!({}));
    let recorded = messages["data"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "bashExecution")
        .cloned()
        .expect("the answered command joins the conversation");
    assert_eq!(recorded["command"], "remote: ls");
    assert_eq!(recorded["output"], output);

    // A failed extension blocks the command (pi: user_bash errors never fall through).
    let blocked = pi.command(
        "b2",
        "bash",
        json!({"command": "echo FORBIDDEN > made.txt"}),
    );
    assert_eq!(blocked["success"], false, "{blocked}");
    assert!(
        blocked["error"]
            .as_str()
            .is_some_and(|e| e.contains("no FORBIDDEN commands")),
        "{blocked}"
    );
    assert!(!pi.cwd().join("made.txt").exists());
    // No answer from the hook: the command runs here.
    let local = pi.command("b3", "bash", json!({"command": "echo local"}));
    assert_eq!(local["data"]["output"], "local\n", "{local}");
}

/// The router fixture's next `route` report.
#[track_caller]
fn next_route(pi: &mut Pi) -> Value {
    next_report(pi, "route ", |_| true)
}

#[test]
fn a_virtual_model_is_selected_and_each_request_is_routed_by_the_extension() {
    let fake = FakeProvider::start(routed_replies());
    let setup = Setup::anthropic(&fake).with_sessions();
    let mut pi = Pi::spawn(&with_extensions(setup, &["router.py"]));
    let registered = next_report(&mut pi, "answer ", |a| a["id"] == "vm");
    assert_eq!(registered["result"], Value::Null, "{registered}");
    listed_router_auto(&mut pi);
    // Registering a physical model's id is refused, as pi 1.6.0 does.
    let clash = ask(
        &mut pi,
        &[json!({"type": "register_virtual_model", "id": "c",
                 "model": {"provider": "fake-anthropic", "id": "fake-claude"}})],
        "c",
    );
    assert_eq!(
        clash["error"], "Virtual model fake-anthropic/fake-claude conflicts with a physical model.",
        "{clash}"
    );

    // Selection: the virtual model and its levels.
    select_router_auto(&mut pi);

    // Dispatch: a user turn, then a tool follow-up that stays on the routed model.
    pi.command("p1", "prompt", json!({"message": "Run it"}));
    let first = next_route(&mut pi);
    assert_eq!(
        first,
        json!({"reason": "user", "model": "auto", "thinkingLevel": "low", "state": null,
               "previous": null, "failed": null})
    );
    let second = next_route(&mut pi);
    assert_eq!(
        second,
        json!({"reason": "continuation", "model": "auto", "thinkingLevel": "low",
               "state": {"turns": 1},
               "previous": {"model": "fake-claude-plain", "thinkingLevel": "off"}, "failed": null})
    );
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(requests[0].body["model"], "fake-claude-plain");
    assert_eq!(requests[1].body["model"], "fake-claude-plain");
    assert!(
        requests[0].body.get("thinking").is_none(),
        "{}",
        requests[0].body
    );
    let state = pi.command("s1", "get_state", json!({}));
    assert_eq!(state["data"]["model"]["id"], "auto", "{state}");
    assert_eq!(state["data"]["thinkingLevel"], "low", "{state}");

    // A high selection goes to the reasoning model at high.
    pi.command("tl2", "set_thinking_level", json!({"level": "high"}));
    pi.command("p2", "prompt", json!({"message": "Think hard"}));
    let third = next_route(&mut pi);
    assert_eq!(third["reason"], "user", "{third}");
    assert_eq!(third["state"], json!({"turns": 1}), "{third}");
    assert_eq!(third["previous"]["model"], "fake-claude-plain", "{third}");
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(3, pi.timeout());
    assert_eq!(requests[2].body["model"], "fake-claude");
    assert!(
        requests[2].body.get("thinking").is_some(),
        "{}",
        requests[2].body
    );

    // The session records the selection in model_change / thinking_level_change, the dispatch
    // in each assistant message, and the router state as pi 1.6.0's custom entry.
    let path = crate::support::session_file(&mut pi, "sf");
    let entries = crate::support::read_jsonl(&path);
    let selection: Vec<String> = entries
        .iter()
        .filter_map(|e| match e["type"].as_str() {
            Some("model_change") => Some(format!(
                "model {}/{}",
                e["provider"].as_str()?,
                e["modelId"].as_str()?
            )),
            Some("thinking_level_change") => {
                Some(format!("level {}", e["thinkingLevel"].as_str()?))
            }
            _ => None,
        })
        .collect();
    // (The start-up selection first; medium is clamped to the virtual model's levels: high.)
    assert_eq!(
        selection,
        [
            "model fake-anthropic/fake-claude",
            "level medium",
            "model router/auto",
            "level high",
            "level low",
            "level high"
        ],
        "{entries:?}"
    );
    let dispatch: Vec<String> = entries
        .iter()
        .filter(|e| e["type"] == "message" && e["message"]["role"] == "assistant")
        .map(|e| {
            let m = &e["message"];
            format!(
                "{} {} {} {}",
                m["provider"], m["api"], m["model"], m["thinkingLevel"]
            )
        })
        .collect();
    assert_eq!(
        dispatch,
        [
            r#""fake-anthropic" "anthropic-messages" "fake-claude-plain" "off""#,
            r#""fake-anthropic" "anthropic-messages" "fake-claude-plain" "off""#,
            r#""fake-anthropic" "anthropic-messages" "fake-claude" "high""#,
        ]
    );
    let states: Vec<&Value> = entries
        .iter()
        .filter(|e| e["type"] == "custom" && e["customType"] == "pi.virtual-model-state")
        .map(|e| &e["data"])
        .collect();
    assert_eq!(
        states,
        [
            &json!({"provider": "router", "modelId": "auto", "state": {"turns": 1}}),
            &json!({"provider": "router", "modelId": "auto", "state": {"turns": 2}}),
        ]
    );
    fake.finish();
}

#[test]
fn a_failed_route_ends_the_run_with_an_error_and_sends_nothing() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["router.py"]));
    next_report(&mut pi, "answer ", |a| a["id"] == "vm");
    pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "auto"}),
    );
    for (text, error) in [
        ("ROUTE-ERROR now", "router exploded"),
        (
            "ROUTE-NOWHERE now",
            "Virtual model router/auto routed to router/auto, which is not a physical model.",
        ),
    ] {
        pi.command("p", "prompt", json!({"message": text}));
        // As pi 1.6.0: an error response naming the virtual model, recorded, then the end.
        let deadline = pi.deadline();
        let records = pi.recv_until(
            |r| r["type"] == "message_end" && r["message"]["role"] == "assistant",
            deadline,
        );
        let reply = records.last().expect("the match")["message"].clone();
        let named = (&reply["api"], &reply["provider"], &reply["model"]);
        assert_eq!(
            named,
            (&json!("pi-virtual"), &json!("router"), &json!("auto"))
        );
        assert_eq!(reply["stopReason"], "error", "{reply}");
        assert_eq!(reply["errorMessage"], error, "{reply}");
        let end = pi.wait_for_event("agent_end");
        assert_eq!(
            end["messages"].as_array().and_then(|m| m.last()),
            Some(&reply)
        );
    }
    // After the extension's registration is removed, the selection cannot be routed.
    let removed = ask(
        &mut pi,
        &[
            json!({"type": "unregister_virtual_model", "id": "u", "provider": "router", "modelId": "auto"}),
        ],
        "u",
    );
    assert_eq!(removed["result"], true, "{removed}");
    pi.command("p3", "prompt", json!({"message": "hello"}));
    let end = pi.wait_for_event("agent_end");
    assert!(
        end.to_string()
            .contains("Virtual model router/auto is not registered."),
        "{end}"
    );
    assert!(fake.requests().is_empty());
    fake.finish();
}

#[test]
fn a_virtual_model_of_the_register_line_can_be_the_start_up_model() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Booted."]))]);
    let setup = Setup::new(&fake, "router", "boot");
    let mut pi = Pi::spawn(&with_extensions(setup, &["router.py"]));
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["data"]["model"]["provider"], "router", "{state}");
    assert_eq!(state["data"]["model"]["id"], "boot", "{state}");
    assert_eq!(state["data"]["thinkingLevel"], "off", "{state}");
    pi.command("p", "prompt", json!({"message": "Start"}));
    let route = next_route(&mut pi);
    assert_eq!(route["model"], "boot", "{route}");
    assert_eq!(route["reason"], "user", "{route}");
    let end = pi.wait_for_event("agent_end");
    let reply = end["messages"].as_array().and_then(|m| m.last()).cloned();
    let reply = reply.unwrap_or_default();
    assert_eq!(reply["model"], "fake-claude-plain", "{end}");
    assert_eq!(
        fake.wait_for_requests(1, pi.timeout())[0].body["model"],
        "fake-claude-plain"
    );
    fake.finish();
}

#[test]
fn session_shutdown_is_heard_before_the_session_change_is_answered() {
    let fake = FakeProvider::start(vec![]);
    let setup = with_extensions(Setup::anthropic(&fake).with_sessions(), &["v2.py"]);
    let mut pi = Pi::spawn(&setup);
    next_event(&mut pi, "session_start");
    let answer = ask_for_session_change(&mut pi, json!({"type": "new_session", "id": "n1"}), "n1");
    assert_eq!(answer["result"], json!({"cancelled": false}), "{answer}");
    // pi 1.6.0 emits session_shutdown before it replaces the session: the old process hears it
    // before the answer to its own request, once.
    let stderr = pi.stderr_text();
    let old: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            (l.contains("] event ") && l.contains("\"type\": \"session_shutdown\""))
                || (l.contains("] answer ") && l.contains("\"id\": \"n1\""))
        })
        .collect();
    assert_eq!(old.len(), 2, "{stderr}");
    assert!(old[0].contains("session_shutdown"), "{stderr}");
    assert!(old[0].contains("\"reason\": \"new\""), "{stderr}");
    assert!(old[1].contains("answer"), "{stderr}");
    fake.finish();
}

#[test]
fn navigate_tree_summarizes_the_abandoned_branch_with_the_model() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["A1"])),
        Reply::sse(sse::anthropic_bash("call_1", "echo hi")),
        Reply::sse(sse::anthropic_text(&["A2"])),
        Reply::sse(sse::anthropic_text(&["## Goal\nSay hi"])),
    ]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    pi.command("p1", "prompt", json!({"message": "First"}));
    pi.wait_for_event("agent_end");
    pi.command("p2", "prompt", json!({"message": "Second, run echo"}));
    pi.wait_for_event("agent_end");
    let entries = ask(
        &mut pi,
        &[json!({"type": "query", "id": "e", "query": "entries"})],
        "e",
    );
    let a1 = entries["result"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["type"] == "message" && e["message"]["role"] == "assistant")
        .expect("the first reply")["id"]
        .clone();
    let line = json!({"type": "navigate_tree", "id": "n", "targetId": a1, "summarize": true,
                      "customInstructions": "Focus on the shell", "label": "explored"});
    let answer = ask(&mut pi, &[line], "n");
    assert_eq!(answer["result"], json!({"cancelled": false}), "{answer}");
    // The summary request: the abandoned branch (without tool results) and the instructions.
    let request = &fake.wait_for_requests(4, pi.timeout())[3];
    let text = request.body["messages"].to_string();
    assert!(text.contains("Second, run echo"), "{text}");
    assert!(
        text.contains("Additional focus: Focus on the shell"),
        "{text}"
    );
    assert!(
        !text.contains("First"),
        "the shared part is not summarized: {text}"
    );
    assert!(request.body.get("tools").is_none(), "{}", request.body);
    let trees = events_seen(&pi, "session_tree");
    let tree = trees.last().expect("session_tree");
    let summary = &tree["summaryEntry"];
    assert_eq!(summary["type"], "branch_summary", "{tree}");
    assert_eq!(summary["fromHook"], false, "{tree}");
    assert_eq!(tree["fromExtension"], false, "{tree}");
    assert_eq!(summary["parentId"], a1, "{tree}");
    assert_eq!(
        summary["details"],
        json!({"readFiles": [], "modifiedFiles": []}),
        "{tree}"
    );
    let text = summary["summary"].as_str().expect("summary");
    assert!(text.ends_with("## Goal\nSay hi"), "{text}");
    assert!(
        text.len() > "## Goal\nSay hi".len(),
        "a preamble comes first: {text}"
    );
    // The conversation now ends with the summary; the label is on it.
    let messages = pi.command("m", "get_messages", json!({}));
    let roles: Vec<&str> = messages["data"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .filter(|role| *role != "system")
        .collect();
    assert_eq!(roles, ["user", "assistant", "branchSummary"]);
    let leaf = ask(
        &mut pi,
        &[json!({"type": "query", "id": "l", "query": "leaf"})],
        "l",
    );
    assert_eq!(leaf["result"]["type"], "label", "{leaf}");
    assert_eq!(leaf["result"]["label"], "explored", "{leaf}");
    fake.finish();
}

#[test]
fn abort_ends_a_branch_summary_and_the_leaf_stays() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["A1"])),
        Reply::sse(sse::anthropic_text(&["A2"])),
        Reply::stall_after(""),
    ]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    for (id, text) in [("p1", "First"), ("p2", "Second")] {
        pi.command(id, "prompt", json!({"message": text}));
        pi.wait_for_event("agent_end");
    }
    let entries = ask(
        &mut pi,
        &[json!({"type": "query", "id": "e", "query": "entries"})],
        "e",
    );
    let replies: Vec<Value> = entries["result"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["type"] == "message" && e["message"]["role"] == "assistant")
        .map(|e| e["id"].clone())
        .collect();
    let line =
        json!({"type": "navigate_tree", "id": "n", "targetId": replies[0], "summarize": true});
    relay(&mut pi, &[line]);
    fake.wait_for_requests(3, pi.timeout());
    pi.command("a", "abort", json!({}));
    let answer = next_answer(&mut pi, "n");
    assert_eq!(
        answer["result"],
        json!({"cancelled": true, "aborted": true}),
        "{answer}"
    );
    let leaf = ask(
        &mut pi,
        &[json!({"type": "query", "id": "l", "query": "leaf"})],
        "l",
    );
    assert_eq!(leaf["result"]["id"], replies[1], "{leaf}");
    fake.finish();
}

/// The ids `get_available_models` (asked with request id `id`) lists for `provider`.
#[track_caller]
pub fn listed_ids(pi: &mut Pi, id: &str, provider: &str) -> Vec<String> {
    let models = pi.command(id, "get_available_models", json!({}));
    models["data"]["models"]
        .as_array()
        .expect("models")
        .iter()
        .filter(|m| m["provider"] == provider)
        .filter_map(|m| m["id"].as_str().map(String::from))
        .collect()
}

/// The virtual model router/auto as `get_available_models` lists it, checked as both router
/// fixtures (router.py, extensions_ts's router.ts) register it.
#[track_caller]
pub fn listed_router_auto(pi: &mut Pi) -> Value {
    let models = pi.command("am", "get_available_models", json!({}));
    let listed = models["data"]["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["provider"] == "router" && m["id"] == "auto")
        .cloned()
        .unwrap_or_else(|| panic!("router/auto is listed (it needs no key): {models}"));
    assert_eq!(listed["api"], "pi-virtual", "{listed}");
    assert_eq!(listed["contextWindow"], 50000, "{listed}");
    listed
}

/// Selects router/auto at thinking level low; both must succeed.
#[track_caller]
pub fn select_router_auto(pi: &mut Pi) {
    let set = pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "auto"}),
    );
    assert_eq!(set["success"], true, "{set}");
    let level = pi.command("tl", "set_thinking_level", json!({"level": "low"}));
    assert_eq!(level["success"], true, "{level}");
}

/// The replies of the routing tests: a bash call and the answer after it (the user turn and
/// its tool follow-up), then the answer to a high selection.
pub fn routed_replies() -> Vec<Reply> {
    vec![
        Reply::sse(sse::anthropic_bash("call_1", "echo routed")),
        Reply::sse(sse::anthropic_text(&["Done."])),
        Reply::sse(sse::anthropic_text(&["Thought hard."])),
    ]
}

/// The ids of `provider`'s models `get_available_models` lists once they include `wanted`
/// (the refresh is answered while commands are served: asked again until then).
#[track_caller]
pub fn models_once_listed(pi: &mut Pi, provider: &str, wanted: &str) -> Vec<String> {
    let deadline = pi.deadline();
    for attempt in 0.. {
        let ids = listed_ids(pi, &format!("am{attempt}"), provider);
        if ids.iter().any(|id| id == wanted) {
            return ids;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{wanted} never listed: {ids:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unreachable!()
}

#[test]
fn a_provider_s_models_are_refreshed_by_its_extension() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Fresh."]))]);
    let setup = Setup::anthropic(&fake).env("ROUTER_DYN_URL", &fake.base_url());
    let mut pi = Pi::spawn(&with_extensions(setup, &["router.py"]));
    // The register line's provider is asked once at start; the answer replaces its models.
    let asked = next_report(&mut pi, "refresh ", |_| true);
    assert_eq!(asked["provider"], "dyn", "{asked}");
    assert!(asked["allowNetwork"].is_boolean(), "{asked}");
    let ids = models_once_listed(&mut pi, "dyn", "dyn-fresh-1");
    assert_eq!(ids, ["dyn-fresh-1", "dyn-fresh-2"]);
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

    // A provider registered later with refreshModels is asked right after its registration.
    let config = json!({"baseUrl": fake.base_url(), "apiKey": "dyn-key",
                        "api": "anthropic-messages", "refreshModels": true});
    // (It is asked before the registration is answered.)
    let line = json!({"type": "register_provider", "id": "r", "name": "late", "config": config});
    relay(&mut pi, &[line]);
    let asked = next_report(&mut pi, "refresh ", |_| true);
    assert_eq!(asked["provider"], "late", "{asked}");
    let registered = next_answer(&mut pi, "r");
    assert_eq!(registered["result"], Value::Null, "{registered}");
    let ids = models_once_listed(&mut pi, "late", "late-fresh-1");
    assert_eq!(ids, ["late-fresh-1", "late-fresh-2"]);
    fake.finish();
}

// ---- providers with a login the extension refreshes (`oauth`) ----------------------------------

/// A workspace whose auth.json holds an expired login of oauth.py's provider `corp`.
fn expired_corp_login() -> crate::support::Workspace {
    let workspace = crate::support::Workspace::new();
    let auth = json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0",
                               "access": "corp-access-0", "expires": 1000}});
    std::fs::write(workspace.agent_dir().join("auth.json"), auth.to_string()).unwrap();
    workspace
}

#[test]
fn an_expired_login_is_refreshed_by_the_extension_that_registered_the_provider() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["Refreshed."])),
        Reply::sse(sse::anthropic_text(&["Again."])),
    ]);
    let workspace = expired_corp_login();
    let setup = Setup::at(&fake.base_url(), "corp", "corp-1")
        .env("OAUTH_URL", &fake.base_url())
        .env("OAUTH_REFRESH", "corp-refresh-0");
    let mut pi = Pi::spawn_in(&workspace, &with_extensions(setup, &["oauth.py"]));
    pi.command("p", "prompt", json!({"message": "Hi"}));
    // The extension gets the stored credential, before the request.
    let asked = next_report(&mut pi, "oauth ", |_| true);
    assert_eq!(
        asked,
        json!({"provider": "corp", "refreshMatches": true,
               "fields": ["access", "expires", "refresh", "type"]})
    );
    // The new access token never reaches stdout (it joined the redaction list when stored).
    let leak = next_notice(&mut pi, "leak ");
    assert!(!leak.contains("corp-access-1"), "{leak}");
    pi.wait_for_event("agent_end");
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    assert_eq!(request.header("x-api-key"), Some("corp-access-1"));
    // Stored as pi 1.6.0 stores it: the answer with `type: "oauth"`, mode 0600.
    let path = workspace.agent_dir().join("auth.json");
    let stored: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let corp = &stored["corp"];
    assert_eq!(corp["type"], "oauth", "{stored}");
    assert_eq!(corp["access"], "corp-access-1", "{stored}");
    assert_eq!(corp["refresh"], "corp-refresh-1", "{stored}");
    assert_eq!(corp["accountId"], "acme", "{stored}");
    assert!(
        corp["expires"].as_f64().is_some_and(|e| e > 1e12),
        "{stored}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // The refreshed token serves the next prompt without another refresh.
    pi.command("p2", "prompt", json!({"message": "Again"}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(requests[1].header("x-api-key"), Some("corp-access-1"));
    fake.finish();
}

#[test]
fn an_extension_that_never_answers_the_refresh_fails_the_prompt_within_the_deadline() {
    let fake = FakeProvider::start(vec![]);
    let workspace = expired_corp_login();
    // This time the provider comes from a `register_provider` action after start.
    let setup = Setup::anthropic(&fake)
        .env("OAUTH_URL", &fake.base_url())
        .env("OAUTH_SILENT", "1")
        .env("OAUTH_LATE", "1")
        .settings(json!({"extensionHookTimeoutMs": 1000}));
    let mut pi = Pi::spawn_in(&workspace, &with_extensions(setup, &["oauth.py"]));
    let registered = next_answer(&mut pi, "reg");
    assert_eq!(registered["result"], Value::Null, "{registered}");
    let set = pi.command(
        "sm",
        "set_model",
        json!({"provider": "corp", "modelId": "corp-1"}),
    );
    assert_eq!(set["success"], true, "{set}");
    pi.send(json!({"id": "p", "type": "prompt", "message": "Hi"}));
    next_report(&mut pi, "oauth ", |_| true);
    let deadline = pi.deadline();
    let response = pi
        .recv_until(|r| r["type"] == "response" && r["id"] == "p", deadline)
        .pop()
        .expect("the prompt's response");
    assert_eq!(response["success"], false, "{response}");
    let error = response["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("OAuth refresh failed for corp: no answer to oauth_refresh within 1000 ms"),
        "{error}"
    );
    // Nothing was stored, and no request went out.
    let stored = std::fs::read_to_string(workspace.agent_dir().join("auth.json")).unwrap();
    assert!(stored.contains("corp-access-0"), "{stored}");
    assert!(fake.requests().is_empty());
}

fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
}

/// The name `get_available_models` gives `provider`/`id`, once it is `wanted`.
#[track_caller]
fn model_once_named(pi: &mut Pi, provider: &str, id: &str, wanted: &str) -> Value {
    let deadline = pi.deadline();
    for attempt in 0.. {
        let models = pi.command(&format!("mn{attempt}"), "get_available_models", json!({}));
        let model = models["data"]["models"]
            .as_array()
            .expect("models")
            .iter()
            .find(|m| m["provider"] == provider && m["id"] == id)
            .cloned()
            .unwrap_or(Value::Null);
        if model["name"] == wanted {
            return model;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{provider}/{id} never named {wanted}: {model}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unreachable!()
}

/// The key a request was given is not the next request's: when the extension refuses the next
/// one, that prompt fails with the reason (the earlier key is not used).
#[test]
fn a_key_refused_after_an_earlier_one_fails_the_next_prompt() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Keyed."]))]);
    let workspace = crate::support::Workspace::new();
    let auth = json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0",
                               "access": "corp-access-0", "expires": now_ms() + 3_600_000.0}});
    std::fs::write(workspace.agent_dir().join("auth.json"), auth.to_string()).unwrap();
    let setup = Setup::at(&fake.base_url(), "corp", "corp-1")
        .env("OAUTH_URL", &fake.base_url())
        .env("OAUTH_KEY", "fail-later");
    let mut pi = Pi::spawn_in(&workspace, &with_extensions(setup, &["oauth.py"]));
    pi.command("p1", "prompt", json!({"message": "Hi"}));
    pi.wait_for_event("agent_end");
    pi.send(json!({"id": "p2", "type": "prompt", "message": "Again"}));
    let deadline = pi.deadline();
    let response = pi
        .recv_until(|r| r["type"] == "response" && r["id"] == "p2", deadline)
        .pop()
        .expect("the prompt's response");
    assert_eq!(response["success"], false, "{response}");
    let error = response["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("OAuth auth derivation failed for corp: no key for this login"),
        "{error}"
    );
    assert_eq!(fake.requests().len(), 1);
    fake.finish();
}

/// A branch summary asks for its key too (`oauth_api_key` before its request, as for every
/// model request), on the refresh worker.
#[test]
fn a_branch_summary_asks_for_the_login_s_key() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["First answer."])),
        Reply::sse(sse::anthropic_text(&["## Goal\nExplored"])),
    ]);
    let workspace = crate::support::Workspace::new();
    let auth = json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0",
                               "access": "corp-access-0", "expires": now_ms() + 3_600_000.0}});
    std::fs::write(workspace.agent_dir().join("auth.json"), auth.to_string()).unwrap();
    let setup = Setup::at(&fake.base_url(), "corp", "corp-1")
        .env("OAUTH_URL", &fake.base_url())
        .env("OAUTH_KEY", "1");
    let mut pi = Pi::spawn_in(
        &workspace,
        &with_extensions(setup, &["oauth.py", "router.py"]),
    );
    next_report(&mut pi, "answer ", |a| a["id"] == "vm");
    let line = navigate_to_the_first_prompt(&mut pi);
    pi.send(json!({"type": "prompt", "message": format!("/send {line}")}));
    assert_eq!(next_report(&mut pi, "apikey ", |_| true)["access"], 0);
    let answer = next_answer(&mut pi, "n");
    assert_eq!(answer["result"]["cancelled"], false, "{answer}");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(
        requests[1].header("x-api-key"),
        Some("corp-key-corp-access-0")
    );
    fake.finish();
}

/// As pi 1.6.0 refreshes every provider's models when a provider or virtual model is
/// registered or unregistered, `oauth_modify_models` is asked again then, with the login stored
/// now (here another account's) and the registration's own models as the base.
#[test]
fn a_login_s_models_are_adapted_again_after_a_later_registration() {
    let fake = FakeProvider::start(vec![]);
    let workspace = crate::support::Workspace::new();
    let login = |account: &str| {
        json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0", "access": "corp-access-0",
                        "expires": now_ms() + 3_600_000.0, "endpoint": fake.base_url(),
                        "accountId": account}})
    };
    let auth = workspace.agent_dir().join("auth.json");
    std::fs::write(&auth, login("acme").to_string()).unwrap();
    let setup = Setup::at(&fake.base_url(), "corp", "corp-1").env("OAUTH_MODIFY", "1");
    let mut pi = Pi::spawn_in(
        &workspace,
        &with_extensions(setup, &["oauth.py", "router.py"]),
    );
    next_report(&mut pi, "answer ", |a| a["id"] == "vm");
    model_once_named(&mut pi, "corp", "corp-1", "Corp 1 for acme");

    std::fs::write(&auth, login("globex").to_string()).unwrap();
    let line = json!({"type": "unregister_virtual_model", "id": "u", "provider": "router",
                      "modelId": "auto"});
    pi.send(json!({"type": "prompt", "message": format!("/send {line}")}));
    // Not "Corp 1 for acme for globex": the registration's models are adapted, not the last ones.
    model_once_named(&mut pi, "corp", "corp-1", "Corp 1 for globex");
    fake.finish();
}

/// pi 1.6.0's `oauth.getApiKey` and `oauth.modifyModels` over JSONL (`oauth_api_key`,
/// `oauth_modify_models`), and its five-minute refresh margin: the login's models are adapted at
/// start, a login with four minutes left is refreshed before the request, and the key the
/// request sends is the one the extension derived from the new login.
#[test]
fn a_login_s_key_and_models_come_from_the_extension_that_registered_the_provider() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["Keyed."])),
        Reply::sse(sse::anthropic_text(&["Again."])),
    ]);
    let workspace = crate::support::Workspace::new();
    let auth = json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0",
                               "access": "corp-access-0", "expires": now_ms() + 4.0 * 60_000.0,
                               "endpoint": fake.base_url(), "accountId": "acme"}});
    std::fs::write(workspace.agent_dir().join("auth.json"), auth.to_string()).unwrap();
    // The registration's own base URL goes nowhere: only the adapted models reach the server.
    let setup = Setup::at("http://127.0.0.1:9", "corp", "corp-1")
        .env("OAUTH_KEY", "1")
        .env("OAUTH_MODIFY", "1")
        .env("OAUTH_REFRESH", "corp-refresh-0");
    let mut pi = Pi::spawn_in(&workspace, &with_extensions(setup, &["oauth.py"]));
    let asked = next_report(&mut pi, "modify ", |_| true);
    assert_eq!(
        asked,
        json!({"provider": "corp", "ids": ["corp-1"],
               "fields": ["access", "accountId", "endpoint", "expires", "refresh", "type"]})
    );
    let model = model_once_named(&mut pi, "corp", "corp-1", "Corp 1 for acme");
    assert_eq!(model["baseUrl"], fake.base_url(), "{model}");

    pi.command("p", "prompt", json!({"message": "Hi"}));
    next_report(&mut pi, "oauth ", |_| true);
    let keyed = next_report(&mut pi, "apikey ", |_| true);
    assert_eq!(keyed, json!({"provider": "corp", "access": 1}));
    // The derived key never reaches stdout (it joined the redaction list with the answer).
    let leak = next_notice(&mut pi, "leak ");
    assert_eq!(leak, "[redacted]");
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(1, pi.timeout());
    assert_eq!(
        requests[0].header("x-api-key"),
        Some("corp-key-corp-access-1")
    );
    // The key is asked for at each request, as 1.6.0 calls `getApiKey` per request.
    pi.command("p2", "prompt", json!({"message": "Again"}));
    let keyed = next_report(&mut pi, "apikey ", |_| true);
    assert_eq!(keyed, json!({"provider": "corp", "access": 1}));
    pi.wait_for_event("agent_end");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(
        requests[1].header("x-api-key"),
        Some("corp-key-corp-access-1")
    );
    fake.finish();
}

#[test]
fn an_extension_that_gives_no_key_for_the_login_fails_the_prompt_with_its_reason() {
    // An error answer, and an answer of the wrong type.
    for (mode, reason) in [
        ("fail", "no key for this login"),
        ("wrong", "was answered with oauth_refresh_result"),
    ] {
        let fake = FakeProvider::start(vec![]);
        let workspace = crate::support::Workspace::new();
        let auth = json!({"corp": {"type": "oauth", "refresh": "corp-refresh-0",
                                   "access": "corp-access-0", "expires": now_ms() + 3_600_000.0}});
        std::fs::write(workspace.agent_dir().join("auth.json"), auth.to_string()).unwrap();
        let setup = Setup::at(&fake.base_url(), "corp", "corp-1")
            .env("OAUTH_URL", &fake.base_url())
            .env("OAUTH_KEY", mode);
        let mut pi = Pi::spawn_in(&workspace, &with_extensions(setup, &["oauth.py"]));
        pi.send(json!({"id": "p", "type": "prompt", "message": "Hi"}));
        // A valid login is not refreshed; its key is asked for.
        let keyed = next_report(&mut pi, "apikey ", |_| true);
        assert_eq!(keyed["access"], 0, "{keyed}");
        let deadline = pi.deadline();
        let response = pi
            .recv_until(|r| r["type"] == "response" && r["id"] == "p", deadline)
            .pop()
            .expect("the prompt's response");
        assert_eq!(response["success"], false, "{response}");
        let error = response["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with("OAuth auth derivation failed for corp: ") && error.contains(reason),
            "{error}"
        );
        assert!(fake.requests().is_empty());
    }
}

// ---- execute_tool: built-in tools for extensions (issue 24 item 3) --------------------------------

/// The text of an `execute_tool` result (its text blocks joined).
fn result_text(answer: &Value) -> String {
    answer["result"]["content"]
        .as_array()
        .map(|blocks| blocks.iter().filter_map(|b| b["text"].as_str()).collect())
        .unwrap_or_default()
}

/// Answers the next approval dialog (whose title names `what`) with "Allow once".
#[track_caller]
fn allow_once(pi: &mut Pi, what: &str) {
    answer_gate(pi, what, "Allow once");
}

/// Answers the approval gate's next dialog, whose title must mention `what`, with `choice`.
#[track_caller]
fn answer_gate(pi: &mut Pi, what: &str, choice: &str) {
    let deadline = pi.deadline();
    let dialog = pi
        .recv_until(
            |r| r["type"] == "extension_ui_request" && r["method"] == "select",
            deadline,
        )
        .pop()
        .expect("dialog");
    assert!(
        dialog["title"].as_str().is_some_and(|t| t.contains(what)),
        "{dialog}"
    );
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "value": choice}));
}

#[test]
fn execute_tool_runs_builtins_under_the_gate_sandbox_redaction_and_abort() {
    const KEY: &str = "sk-ant-exectool-0123456789abcdef";
    let workspace = crate::support::Workspace::new();
    std::fs::create_dir_all(workspace.root().join("tmp")).unwrap();
    std::fs::write(
        workspace.agent_dir().join("auth.json"),
        json!({"fake-anthropic": {"type": "api_key", "key": KEY}}).to_string(),
    )
    .unwrap();
    std::fs::write(workspace.cwd().join("notes.txt"), "first line\n").unwrap();
    std::fs::write(workspace.cwd().join("leak.txt"), format!("key={KEY}\n")).unwrap();
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Hi."]))]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2.py"])
        .env("TMPDIR", &workspace.root().join("tmp").to_string_lossy())
        .settings(json!({
            "sandbox": {"mode": "workspace-write"},
            "approvals": {"rules": [
                {"tool": "bash", "command": "rm *", "action": "deny", "reason": "No rm here"},
                {"tool": "write", "path": "asked/*", "action": "ask"}
            ]}
        }));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    // The key is known once a request used it.
    pi.command("p1", "prompt", json!({"message": "hi"}));
    pi.wait_for_event("agent_end");

    let read = json!({"type": "execute_tool", "id": "t1", "toolName": "read", "args": {"path": "notes.txt"}});
    let done = ask(&mut pi, &[read], "t1");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(result_text(&done), "first line\n", "{done}");

    // Redaction: the key a tool read never reaches the extension.
    let leak = json!({"type": "execute_tool", "id": "t2", "toolName": "read", "args": {"path": "leak.txt"}});
    let redacted = ask(&mut pi, &[leak], "t2");
    assert!(!redacted.to_string().contains(KEY), "{redacted}");
    assert!(result_text(&redacted).contains("[redacted]"), "{redacted}");

    // The sandbox: a write outside the workspace is blocked, inside it is fine.
    let outside = workspace.root().join("outside.txt");
    let write_out = json!({"type": "execute_tool", "id": "t3", "toolName": "write",
        "args": {"path": outside, "content": "x"}});
    relay(&mut pi, &[write_out]);
    allow_once(&mut pi, "outside.txt");
    let blocked = next_answer(&mut pi, "t3");
    assert_eq!(blocked["result"]["isError"], true, "{blocked}");
    assert!(
        result_text(&blocked).contains("blocked by the sandbox"),
        "{blocked}"
    );
    assert!(!outside.exists());
    let bash_out = json!({"type": "execute_tool", "id": "t4", "toolName": "bash",
        "args": {"command": "echo x > ../bash-out.txt; echo rc=$?"}});
    let confined = ask(&mut pi, &[bash_out], "t4");
    assert!(result_text(&confined).contains("rc=1"), "{confined}");
    assert!(!workspace.root().join("bash-out.txt").exists());

    // The approval gate: a rule denies (an error result, as the model gets), a rule asks.
    let rm = json!({"type": "execute_tool", "id": "t5", "toolName": "bash", "args": {"command": "rm -rf build"}});
    let denied = ask(&mut pi, &[rm], "t5");
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert_eq!(result_text(&denied), "No rm here", "{denied}");
    let asked = json!({"type": "execute_tool", "id": "t6", "toolName": "write",
        "args": {"path": "asked/a.txt", "content": "written"}});
    relay(&mut pi, &[asked]);
    allow_once(&mut pi, "asked/a.txt");
    let allowed = next_answer(&mut pi, "t6");
    assert_eq!(allowed["result"]["isError"], false, "{allowed}");
    assert_eq!(
        std::fs::read_to_string(workspace.cwd().join("asked/a.txt")).unwrap(),
        "written"
    );

    // A cwd of its own does not make an outside path look inside to the gate.
    let elsewhere = json!({"type": "execute_tool", "id": "t6b", "toolName": "write", "cwd": "..",
        "args": {"path": "gate-out.txt", "content": "x"}});
    relay(&mut pi, &[elsewhere]);
    answer_gate(
        &mut pi,
        "gate-out.txt (outside the working directory)",
        "Deny",
    );
    let refused = next_answer(&mut pi, "t6b");
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(!workspace.root().join("gate-out.txt").exists());

    // Partial results stream as action_update before the answer.
    let streaming = json!({"type": "execute_tool", "id": "t7", "toolName": "bash",
        "args": {"command": "echo one; sleep 2; echo two"}});
    relay(&mut pi, &[streaming]);
    let update = next_report(&mut pi, "update ", |u| {
        u["id"] == "t7" && u["partialResult"].to_string().contains("one")
    });
    assert_eq!(update["partialResult"]["isError"], false, "{update}");
    let finished = next_answer(&mut pi, "t7");
    assert_eq!(result_text(&finished), "one\ntwo\n", "{finished}");

    // Abort ends a running tool, also while the agent is idle; so does the extension's own
    // cancel_request, and the request's timeout.
    let slow = json!({"type": "execute_tool", "id": "t8", "toolName": "bash", "args": {"command": "sleep 60"}});
    relay(&mut pi, &[slow]);
    let update = next_report(&mut pi, "update ", |u| u["id"] == "t8");
    assert_eq!(update["partialResult"]["isError"], false);
    pi.command("a", "abort", json!({}));
    let aborted = next_answer(&mut pi, "t8");
    assert_eq!(aborted["result"]["isError"], true, "{aborted}");
    assert_eq!(result_text(&aborted), "Command aborted", "{aborted}");
    let slow = json!({"type": "execute_tool", "id": "t9", "toolName": "bash", "args": {"command": "sleep 60"}});
    relay(&mut pi, &[slow]);
    next_report(&mut pi, "update ", |u| u["id"] == "t9");
    let forged = json!({"type": "cancel_request", "id": "c0", "requestId": "t1"});
    let cancel = json!({"type": "cancel_request", "id": "c1", "requestId": "t9"});
    assert_eq!(ask(&mut pi, &[forged], "c0")["result"], false);
    assert_eq!(ask(&mut pi, &[cancel], "c1")["result"], true);
    let cancelled = next_answer(&mut pi, "t9");
    assert_eq!(result_text(&cancelled), "Command aborted", "{cancelled}");
    let timed = json!({"type": "execute_tool", "id": "t10", "toolName": "bash",
        "args": {"command": "sleep 60"}, "timeout": 500});
    let timed_out = ask(&mut pi, &[timed], "t10");
    assert!(
        result_text(&timed_out).contains("timeout (500 ms)"),
        "{timed_out}"
    );

    // An id that is still running is refused; the run it names goes on until cancelled.
    let first = json!({"type": "execute_tool", "id": "d1", "toolName": "bash", "args": {"command": "sleep 60"}});
    let refused = ask(&mut pi, &[first.clone(), first], "d1");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("still running")),
        "{refused}"
    );
    let cancel = json!({"type": "cancel_request", "id": "c2", "requestId": "d1"});
    assert_eq!(ask(&mut pi, &[cancel], "c2")["result"], true);
    let ended = next_answer(&mut pi, "d1");
    assert_eq!(result_text(&ended), "Command aborted", "{ended}");

    // Bad requests: clear errors, nothing runs.
    let unknown = json!({"type": "execute_tool", "id": "e1", "toolName": "codemode", "args": {}});
    let error = ask(&mut pi, &[unknown], "e1");
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown tool \"codemode\"")),
        "{error}"
    );
    let bad_args =
        json!({"type": "execute_tool", "id": "e2", "toolName": "bash", "args": "rm -rf /"});
    let error = ask(&mut pi, &[bad_args], "e2");
    assert_eq!(
        error["error"], "execute_tool: args must be an object",
        "{error}"
    );
    let invalid =
        json!({"type": "execute_tool", "id": "e3", "toolName": "write", "args": {"path": 5}});
    let error = ask(&mut pi, &[invalid], "e3");
    assert_eq!(error["result"]["isError"], true, "{error}");
    let huge =
        json!({"type": "execute_tool", "id": "e4", "toolName": "x".repeat(200_000), "args": {}});
    let error = ask(&mut pi, &[huge], "e4");
    assert!(
        error["error"].as_str().is_some_and(|e| e.len() < 400),
        "{error}"
    );
    let response = pi.command("s", "get_state", json!({}));
    assert_eq!(response["success"], true, "{response}");
}

/// `fixtures/extensions/audited_bash.py` replaces `bash` with a tool that runs pi-rs's own bash
/// through `execute_tool`: the model's calls reach it, the gate's rules still apply, its
/// streaming reaches the client, and abort kills the command.
#[test]
fn an_extension_tool_wrapping_the_builtin_bash_stays_under_the_gate_and_abort() {
    let fake = FakeProvider::start(vec![
        crate::support::tool_reply("toolu_1", "bash", json!({"command": "echo audited"})),
        crate::support::tool_reply("toolu_2", "bash", json!({"command": "rm -rf build"})),
        crate::support::tool_reply(
            "toolu_3",
            "bash",
            json!({"command": "echo started $$; sleep 60"}),
        ),
        crate::support::text_reply("done"),
    ]);
    let setup = with_extensions(Setup::anthropic(&fake), &["audited_bash.py"]).settings(json!({
        "approvals": {"rules": [
            {"tool": "bash", "command": "rm *", "action": "deny", "reason": "No rm here"}
        ]}
    }));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Go"}));
    let pid = crate::support::wait_for_tool_pid(&mut pi, "started ");
    pi.command("a", "abort", json!({}));
    pi.records_until_event("agent_end");
    let run = pi.records();
    let ends: Vec<&Value> = run
        .iter()
        .filter(|r| r["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends.len(), 3, "{ends:?}");
    let text = |end: &Value| crate::support::end_text(end);
    assert_eq!(text(ends[0]), "audited\n", "{}", ends[0]);
    assert_eq!(ends[0]["result"]["details"]["audited"], true, "{}", ends[0]);
    assert_eq!(ends[1]["isError"], true, "{}", ends[1]);
    assert_eq!(text(ends[1]), "No rm here", "{}", ends[1]);
    assert_eq!(ends[2]["isError"], true, "{}", ends[2]);
    assert!(
        crate::support::wait_until_gone(pid, std::time::Duration::from_secs(20)),
        "abort killed the command"
    );
    let stderr = pi.stderr_when(|s| s.contains("audited_bash: echo started"));
    assert!(stderr.contains("audited_bash: echo audited"), "{stderr}");
}

/// A switched-to session's directory gets its own trust decision, as pi 1.6.0 decides it per
/// directory: the start directory's trust.json entry does not cover another repository, so its
/// `.pi/settings.json` and `.pi/prompts/` stay unread when the restarted extensions and
/// resources load there, until trust.json trusts that directory too.
#[test]
fn a_switched_to_sessions_directory_gets_its_own_trust_decision() {
    let fake = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn(&with_extensions(Setup::anthropic(&fake), &["v2.py"]));
    assert_eq!(next_event(&mut pi, "session_start")["reason"], "startup");
    let start = std::fs::canonicalize(pi.cwd()).unwrap();
    let trust_file = pi.agent_dir().join("trust.json");
    std::fs::write(
        &trust_file,
        json!({start.to_string_lossy(): true}).to_string(),
    )
    .unwrap();
    let root = pi.workspace().root().to_path_buf();
    let other = root.join("other-repo");
    std::fs::create_dir_all(other.join(".pi/prompts")).unwrap();
    std::fs::write(
        other.join(".pi/settings.json"),
        r#"{"followUpMode": "all"}"#,
    )
    .unwrap();
    std::fs::write(other.join(".pi/prompts/planted.md"), "Planted template").unwrap();
    let session_file = |name: &str| {
        let file = root.join(format!("stored/{name}.jsonl"));
        let header = json!({"type": "session", "version": 3,
                            "id": format!("01a227d7-0000-7000-8000-0000000000{name}"),
                            "timestamp": "2026-11-29T15:05:34.023Z",
                            "cwd": other.to_string_lossy()});
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, format!("{header}\n")).unwrap();
        file
    };
    let has_planted = |pi: &mut Pi, id: &str| {
        let commands = pi.command(id, "get_commands", json!({}));
        commands["data"]["commands"]
            .as_array()
            .expect("commands")
            .iter()
            .any(|c| c["name"] == "planted")
    };
    let switch = |pi: &mut Pi, id: &str, file: &std::path::Path| {
        let switched = pi.command(id, "switch_session", json!({"sessionPath": file}));
        assert_eq!(switched["success"], true, "{switched}");
        assert_eq!(next_event(pi, "session_start")["reason"], "resume");
    };

    switch(&mut pi, "w1", &session_file("a1"));
    let state = pi.command("g1", "get_state", json!({}));
    assert_eq!(state["data"]["followUpMode"], "one-at-a-time", "{state}");
    assert!(
        !has_planted(&mut pi, "c1"),
        "an untrusted repository's template loaded"
    );
    let trust = ask(
        &mut pi,
        &[json!({"type": "query", "id": "q1", "query": "trust"})],
        "q1",
    );
    assert_eq!(trust["result"]["trusted"], false, "{trust}");

    // Trusted by its own trust.json entry, the next switch there loads its `.pi/`.
    let other_key = std::fs::canonicalize(&other).unwrap();
    let both = json!({start.to_string_lossy(): true, other_key.to_string_lossy(): true});
    std::fs::write(&trust_file, both.to_string()).unwrap();
    switch(&mut pi, "w2", &session_file("a2"));
    let state = pi.command("g2", "get_state", json!({}));
    assert_eq!(state["data"]["followUpMode"], "all", "{state}");
    assert!(
        has_planted(&mut pi, "c2"),
        "a trusted repository's template is offered"
    );
    fake.finish();
}

// ---- virtual models: summaries, limits, resuming ------------------------------------------------

/// `router.py` with sessions, `router/auto` selected at `low` (its registration awaited).
fn routed_session(fake: &FakeProvider, settings: Value) -> Pi {
    let setup = Setup::anthropic(fake).with_sessions().settings(settings);
    let mut pi = Pi::spawn(&with_extensions(setup, &["router.py"]));
    next_report(&mut pi, "answer ", |a| a["id"] == "vm");
    let set = pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "auto"}),
    );
    assert_eq!(set["success"], true, "{set}");
    pi.command("tl", "set_thinking_level", json!({"level": "low"}));
    pi
}

/// A router state is stored whenever the router answers one (pi 1.6.0 compares objects by
/// identity, so an equal object is a new state): a user turn answered with a copy of the current
/// state stores it again.
#[test]
fn a_router_state_equal_to_the_current_one_is_stored_again() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["A1"])),
        Reply::sse(sse::anthropic_text(&["A2"])),
    ]);
    let mut pi = routed_session(&fake, json!({}));
    pi.command("p1", "prompt", json!({"message": "First"}));
    pi.wait_for_event("agent_end");
    pi.command("p2", "prompt", json!({"message": "Second STATE-SAME"}));
    let second = pi.records_until_event("agent_end");
    let appended: Vec<&Value> = second
        .iter()
        .filter(|r| r["type"] == "entry_appended")
        .map(|r| &r["entry"]["data"]["state"])
        .collect();
    assert_eq!(appended, [&json!({"turns": 1})]);
    let path = crate::support::session_file(&mut pi, "sf");
    let states: Vec<Value> = crate::support::read_jsonl(&path)
        .into_iter()
        .filter(|e| e["type"] == "custom" && e["customType"] == "pi.virtual-model-state")
        .map(|e| e["data"]["state"].clone())
        .collect();
    assert_eq!(states, [json!({"turns": 1}), json!({"turns": 1})]);
    fake.finish();
}

/// A summary request under a virtual selection — the `compact` command and an extension's
/// `navigate_tree` with `summarize` — asks the router once with `reason: "direct"` (no router
/// state; what it returns is not stored) and goes to the model it answers, as pi 1.6.0 does. The
/// branch summary entry records the request's usage.
#[test]
fn summaries_under_a_virtual_selection_are_routed_direct() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&[&long_text("first answer")])),
        Reply::sse(sse::anthropic_text(&["A2"])),
        Reply::sse(sse::anthropic_text(&["## Goal\nCompacted"])),
        Reply::sse(sse::anthropic_text(&["## Goal\nExplored"])),
    ]);
    let settings = json!({"compaction": {"keepRecentTokens": 200}});
    let mut pi = routed_session(&fake, settings);
    pi.command("p1", "prompt", json!({"message": long_text("First")}));
    assert_eq!(next_route(&mut pi)["reason"], "user");
    pi.wait_for_event("agent_end");
    pi.command("p2", "prompt", json!({"message": "Second"}));
    assert_eq!(next_route(&mut pi)["reason"], "user");
    pi.wait_for_event("agent_end");

    let compacted = pi.command("c", "compact", json!({}));
    let direct = json!({"reason": "direct", "model": "auto", "thinkingLevel": "low",
                        "state": null, "failed": null,
                        "previous": {"model": "fake-claude-plain", "thinkingLevel": "off"}});
    assert_eq!(next_route(&mut pi), direct);
    assert_eq!(compacted["success"], true, "{compacted}");
    assert!(
        compacted["data"]["summary"]
            .as_str()
            .is_some_and(|s| s.ends_with("## Goal\nCompacted")),
        "{compacted}"
    );
    let requests = fake.wait_for_requests(3, pi.timeout());
    assert_eq!(requests[2].body["model"], "fake-claude-plain");
    assert!(
        requests[2].body.to_string().contains("First"),
        "the summary request: {}",
        requests[2].body
    );

    let entries = ask(
        &mut pi,
        &[json!({"type": "query", "id": "e", "query": "entries"})],
        "e",
    );
    let a1 = entries["result"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["type"] == "message" && e["message"]["role"] == "assistant")
        .expect("the first reply")["id"]
        .clone();
    let line = json!({"type": "navigate_tree", "id": "n", "targetId": a1, "summarize": true});
    pi.send(json!({"type": "prompt", "message": format!("/send {line}")}));
    assert_eq!(next_route(&mut pi), direct);
    let answer = next_answer(&mut pi, "n");
    assert_eq!(answer["result"], json!({"cancelled": false}), "{answer}");
    let requests = fake.wait_for_requests(4, pi.timeout());
    assert_eq!(requests[3].body["model"], "fake-claude-plain");

    let path = crate::support::session_file(&mut pi, "sf");
    let entries = crate::support::read_jsonl(&path);
    let summary = entries
        .iter()
        .find(|e| e["type"] == "branch_summary")
        .expect("a branch summary");
    assert!(
        summary["summary"]
            .as_str()
            .is_some_and(|s| s.contains("## Goal\nExplored")),
        "{summary}"
    );
    assert_eq!(summary["usage"]["input"], 100, "{summary}");
    assert_eq!(summary["usage"]["output"], 1, "{summary}");
    // Only the user turns' state is stored: a direct route's is ignored.
    let states: Vec<&Value> = entries
        .iter()
        .filter(|e| e["type"] == "custom" && e["customType"] == "pi.virtual-model-state")
        .map(|e| &e["data"]["state"])
        .collect();
    assert_eq!(states, [&json!({"turns": 1}), &json!({"turns": 2})]);
    // A router that cannot be asked fails the summary with the routing error.
    let removed = ask(
        &mut pi,
        &[
            json!({"type": "unregister_virtual_model", "id": "u", "provider": "router", "modelId": "auto"}),
        ],
        "u",
    );
    assert_eq!(removed["result"], true, "{removed}");
    let failed = pi.command("c2", "compact", json!({}));
    assert_eq!(failed["success"], false, "{failed}");
    assert_eq!(
        failed["error"], "Virtual model router/auto is not registered.",
        "{failed}"
    );
    fake.finish();
}

/// Under a virtual selection, the threshold check goes by the context window of the physical
/// model that wrote the reply (fake-claude-plain: 100000), not the virtual model's (50000), as
/// pi 1.6.0 does: 60000 tokens compact nothing, 90000 do (routed direct).
#[test]
fn threshold_compaction_under_a_virtual_selection_uses_the_routed_model_s_window() {
    let big = |tokens, text: &str| {
        Reply::sse(
            sse::AnthropicStream::new()
                .input_tokens(tokens)
                .text(&[text])
                .finish("end_turn"),
        )
    };
    let fake = FakeProvider::start(vec![
        big(60000, &long_text("first answer")),
        big(90000, "A2"),
        Reply::sse(sse::anthropic_text(&["## Goal\nCompacted"])),
    ]);
    let settings = json!({"compaction": {"keepRecentTokens": 200}});
    let mut pi = routed_session(&fake, settings);
    // The context usage: the virtual model's window until a physical model answered.
    let window = |pi: &mut Pi, id: &str| {
        pi.command(id, "get_session_stats", json!({}))["data"]["contextUsage"]["contextWindow"]
            .clone()
    };
    assert_eq!(window(&mut pi, "st1"), 50000);
    pi.command("p1", "prompt", json!({"message": long_text("First")}));
    let records = pi.recv_until(|r| r["type"] == "agent_settled", pi.deadline());
    assert_eq!(window(&mut pi, "st2"), 100000);
    assert!(
        !crate::support::flow(&records).contains(&"compaction_start".to_string()),
        "{records:?}"
    );
    pi.command("p2", "prompt", json!({"message": "Second"}));
    let records = pi.recv_until(|r| r["type"] == "agent_settled", pi.deadline());
    let start = records
        .iter()
        .find(|r| r["type"] == "compaction_start")
        .unwrap_or_else(|| panic!("no compaction: {records:?}"));
    assert_eq!(start["reason"], "threshold");
    let end = records
        .iter()
        .find(|r| r["type"] == "compaction_end")
        .expect("compaction_end");
    assert!(
        end["result"]["summary"]
            .as_str()
            .is_some_and(|s| s.ends_with("## Goal\nCompacted")),
        "{end}"
    );
    let requests = fake.wait_for_requests(3, pi.timeout());
    assert_eq!(requests[2].body["model"], "fake-claude-plain");
    fake.finish();
}

/// Resuming a session whose selection is a virtual model: restored while it is registered (the
/// register line's `router/boot`), else the physical model that answered last — not the
/// default model — as pi 1.6.0's `getBranchSelection` does.
#[test]
fn a_resumed_virtual_selection_holds_or_falls_back_to_the_model_that_answered() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Booted."]))]);
    let setup = Setup::anthropic(&fake).with_sessions();
    let mut pi = Pi::spawn(&with_extensions(setup.clone(), &["router.py"]));
    let workspace = pi.workspace();
    let set = pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "boot"}),
    );
    assert_eq!(set["success"], true, "{set}");
    pi.command("p", "prompt", json!({"message": "Start"}));
    pi.wait_for_event("agent_end");
    let file = crate::support::session_file(&mut pi, "sf");
    assert!(pi.close_and_wait().success());
    let before = crate::support::read_jsonl(&file);

    let setup = setup.without_model_flags().arg("--continue");
    let resumed = with_extensions(setup.clone(), &["router.py"]);
    let mut pi = Pi::spawn_in(&workspace, &resumed);
    let state = pi.command("s", "get_state", json!({}));
    let model = &state["data"]["model"];
    assert_eq!(
        (&model["provider"], &model["id"]),
        (&json!("router"), &json!("boot"))
    );
    assert!(pi.close_and_wait().success());
    assert_eq!(
        crate::support::read_jsonl(&file),
        before,
        "the same selection: nothing recorded"
    );

    let mut pi = Pi::spawn_in(&workspace, &setup);
    let state = pi.command("s", "get_state", json!({}));
    let model = &state["data"]["model"];
    assert_eq!(
        (&model["provider"], &model["id"]),
        (&json!("fake-anthropic"), &json!("fake-claude-plain")),
        "{state}"
    );
    fake.finish();
}

/// pi 1.6.0's branch summarizer: a transient failure is retried with the retry settings
/// (`summarization_retry_*` with `source: "branchSummary"`), the branch's `context_edit` entries
/// shape the messages summarized, and the entry records the request's `usage`.
#[test]
fn a_branch_summary_is_retried_follows_context_edits_and_records_its_usage() {
    let overloaded = fixture("anthropic/error_529.json");
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["A1"])),
        Reply::sse(sse::anthropic_text(&["A2"])),
        Reply::status(529, overloaded.clone(), &[]),
        Reply::sse(sse::anthropic_text(&["## Goal\nRetried"])),
    ]);
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .settings(json!({"retry": {"baseDelayMs": 20}}));
    let setup = with_extensions(setup, &["v2.py"]);
    let mut pi = Pi::spawn(&setup);
    let workspace = pi.workspace();
    for (id, text) in [("p1", "First"), ("p2", "Second SECRET")] {
        pi.command(id, "prompt", json!({"message": text}));
        pi.wait_for_event("agent_end");
    }
    let file = crate::support::session_file(&mut pi, "sf");
    assert!(pi.close_and_wait().success());
    // The second question, edited after the fact (as 1.6.0 writes such entries).
    let entries = crate::support::read_jsonl(&file);
    let id_of = |role: &str, nth: usize| {
        entries
            .iter()
            .filter(|e| e["type"] == "message" && e["message"]["role"] == role)
            .nth(nth)
            .expect("the message")["id"]
            .clone()
    };
    let edit = json!({"type": "context_edit", "id": "ce000001",
        "parentId": entries.last().expect("entries")["id"],
        "timestamp": "2026-12-02T00:00:01.000Z", "targetId": id_of("user", 1),
        "replacement": {"content": "Second, edited"}});
    let mut text = std::fs::read_to_string(&file).expect("the session file");
    text.push_str(&format!("{edit}\n"));
    std::fs::write(&file, text).expect("write the session file");

    let mut pi = Pi::spawn_in(
        &workspace,
        &setup.arg("--session").arg(&file.to_string_lossy()),
    );
    let line = json!({"type": "navigate_tree", "id": "n", "targetId": id_of("assistant", 0),
                      "summarize": true});
    let answer = ask(&mut pi, &[line], "n");
    assert_eq!(answer["result"], json!({"cancelled": false}), "{answer}");
    let requests = fake.wait_for_requests(4, pi.timeout());
    assert_eq!(requests[3].body, requests[2].body, "the retry repeats it");
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
    assert!(
        summary["summary"]
            .as_str()
            .is_some_and(|s| s.contains("## Goal\nRetried")),
        "{summary}"
    );
    assert_eq!(summary["usage"]["input"], 100, "{summary}");
    assert_eq!(summary["usage"]["totalTokens"], 101, "{summary}");
    fake.finish();
}

/// pi 1.6.0 checks the context against the window of the model each request is routed to: a
/// reply of fake-claude (window 200000) at 90000 tokens compacts nothing after the run, but the
/// next user turn, routed to fake-claude-plain (100000), is compacted first (threshold; the
/// summary routed direct) and then sent to the model the router chose.
#[test]
fn a_request_routed_to_a_smaller_window_is_compacted_first() {
    let fake = FakeProvider::start(vec![
        Reply::sse(
            sse::AnthropicStream::new()
                .input_tokens(90000)
                .text(&[&long_text("first answer")])
                .finish("end_turn"),
        ),
        Reply::sse(sse::anthropic_text(&["## Goal\nCompacted"])),
        Reply::sse(sse::anthropic_text(&["A2"])),
    ]);
    let settings = json!({"compaction": {"keepRecentTokens": 200}});
    let mut pi = routed_session(&fake, settings);
    pi.command("th", "set_thinking_level", json!({"level": "high"}));
    pi.command("p1", "prompt", json!({"message": long_text("First")}));
    let records = pi.recv_until(|r| r["type"] == "agent_settled", pi.deadline());
    assert!(
        records.iter().all(|r| r["type"] != "compaction_start"),
        "{records:?}"
    );
    pi.command("tl2", "set_thinking_level", json!({"level": "low"}));
    pi.command("p2", "prompt", json!({"message": "Second"}));
    assert_eq!(next_route(&mut pi)["reason"], "user");
    let direct = next_route(&mut pi);
    assert_eq!(direct["reason"], "direct", "{direct}");
    let records = pi.recv_until(|r| r["type"] == "agent_settled", pi.deadline());
    let labels = crate::support::flow(&records);
    let at = |label: &str| {
        labels
            .iter()
            .position(|l| l == label)
            .unwrap_or_else(|| panic!("no {label}: {labels:?}"))
    };
    assert!(
        at("compaction_end") < at("message_start:assistant"),
        "{labels:?}"
    );
    let end = records
        .iter()
        .find(|r| r["type"] == "compaction_end")
        .expect("compaction_end");
    assert_eq!(end["reason"], "threshold", "{end}");
    assert!(
        end["result"]["summary"]
            .as_str()
            .is_some_and(|s| s.ends_with("## Goal\nCompacted")),
        "{end}"
    );
    let requests = fake.wait_for_requests(3, pi.timeout());
    // The summary goes where the direct route sent it (the model that answered last).
    assert_eq!(requests[1].body["model"], "fake-claude");
    assert_eq!(requests[2].body["model"], "fake-claude-plain");
    assert!(
        requests[2].body["messages"]
            .to_string()
            .contains("## Goal\\nCompacted"),
        "the request after the compaction: {}",
        requests[2].body
    );
    fake.finish();
}

/// `abort` ends a compaction that waits for its direct route (a router that never answers it):
/// the command answers `Compaction cancelled`, nothing is sent or saved.
#[test]
fn abort_ends_a_compaction_waiting_for_its_route() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&[&long_text(
        "first answer",
    )]))]);
    let settings = json!({"compaction": {"keepRecentTokens": 200}});
    let mut pi = routed_session(&fake, settings);
    pi.command(
        "p1",
        "prompt",
        json!({"message": long_text("First DIRECT-SILENT")}),
    );
    next_route(&mut pi);
    pi.wait_for_event("agent_end");
    pi.send(json!({"id": "c", "type": "compact"}));
    assert_eq!(next_route(&mut pi)["reason"], "direct");
    let aborted = pi.command("a", "abort", json!({}));
    assert_eq!(aborted["success"], true, "{aborted}");
    let deadline = pi.deadline();
    let records = pi.recv_until(|r| r["id"] == "c", deadline);
    let answer = records.last().expect("the compact answer");
    assert_eq!(answer["success"], false, "{answer}");
    assert_eq!(answer["error"], "Compaction cancelled", "{answer}");
    let end = records
        .iter()
        .find(|r| r["type"] == "compaction_end")
        .expect("compaction_end");
    assert_eq!(end["aborted"], true, "{end}");
    let entries = crate::support::read_jsonl(&crate::support::session_file(&mut pi, "sf"));
    assert!(entries.iter().all(|e| e["type"] != "compaction"));
    assert_eq!(fake.requests().len(), 1, "no summary request");
    fake.finish();
}

/// As in pi 1.6.0, a virtual selection's request is routed before the `context` hook runs: the
/// router sees the conversation as it is (here its ROUTE-ERROR, which the hook rewrites away),
/// and the hook's messages go to the routed model.
#[test]
fn a_request_is_routed_before_the_context_hook() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Rewritten."]))]);
    let setup = with_extensions(Setup::anthropic(&fake), &["v2.py", "router.py"]);
    let mut pi = Pi::spawn(&setup);
    next_report(&mut pi, "answer ", |a| a["id"] == "vm");
    pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "auto"}),
    );
    pi.command("tl", "set_thinking_level", json!({"level": "low"}));
    pi.command("p1", "prompt", json!({"message": "REWRITE-CONTEXT please"}));
    pi.wait_for_event("agent_end");
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    assert_eq!(request.body["model"], "fake-claude-plain");
    let sent = request.body["messages"].to_string();
    assert!(sent.contains("rewritten by v2.py"), "{sent}");
    pi.command(
        "p2",
        "prompt",
        json!({"message": "REWRITE-CONTEXT ROUTE-ERROR"}),
    );
    let end = pi.wait_for_event("agent_end");
    assert!(end.to_string().contains("router exploded"), "{end}");
    assert_eq!(fake.requests().len(), 1);
    fake.finish();
}

/// `oauth.py` and `router.py` in a workspace where `corp`'s login expired, `router/auto`
/// selected.
fn routed_to_an_expired_login(fake: &FakeProvider) -> Pi {
    routed_to_an_expired_login_with(fake, Setup::anthropic(fake))
}

/// `routed_to_an_expired_login` from `setup`.
fn routed_to_an_expired_login_with(fake: &FakeProvider, setup: Setup) -> Pi {
    let workspace = expired_corp_login();
    let setup = setup
        .env("OAUTH_URL", &fake.base_url())
        .env("OAUTH_REFRESH", "corp-refresh-0")
        .settings(json!({"compaction": {"keepRecentTokens": 200}}));
    let setup = with_extensions(setup, &["oauth.py", "router.py"]);
    let mut pi = Pi::spawn_in(&workspace, &setup);
    next_report(&mut pi, "answer ", |a| a["id"] == "vm");
    pi.command(
        "sm",
        "set_model",
        json!({"provider": "router", "modelId": "auto"}),
    );
    pi
}

/// The provider a request is routed to has an expired login (`oauth.py`'s `corp`): it is
/// refreshed before the request, as the selection's own would be.
#[test]
fn a_routed_provider_s_expired_login_is_refreshed_first() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Hi."]))]);
    let mut pi = routed_to_an_expired_login(&fake);
    pi.command("p", "prompt", json!({"message": "ROUTE-CORP hi"}));
    assert_eq!(next_report(&mut pi, "oauth ", |_| true)["provider"], "corp");
    pi.wait_for_event("agent_end");
    let request = &fake.wait_for_requests(1, pi.timeout())[0];
    assert_eq!(request.body["model"], "corp-1");
    assert_eq!(request.header("x-api-key"), Some("corp-access-1"));
    fake.finish();
}

/// And before a branch summary routed to it (an extension's `navigate_tree` with `summarize`):
/// refreshed on a worker, then the summary goes to the routed model with the new key. Meanwhile
/// the agent answers commands, and `abort` ends the navigation (a refresh that never answers).
#[test]
fn a_branch_summary_s_routed_provider_login_is_refreshed_first() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["First answer."])),
        Reply::sse(sse::anthropic_text(&["## Goal\nExplored"])),
    ]);
    let mut pi = routed_to_an_expired_login(&fake);
    let line = navigate_to_the_first_prompt(&mut pi);
    pi.send(json!({"type": "prompt", "message": format!("/send {line}")}));
    assert_eq!(next_report(&mut pi, "oauth ", |_| true)["provider"], "corp");
    let answer = next_answer(&mut pi, "n");
    assert_eq!(answer["result"]["cancelled"], false, "{answer}");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(requests[0].body["model"], "fake-claude");
    assert_eq!(requests[1].body["model"], "corp-1");
    assert_eq!(requests[1].header("x-api-key"), Some("corp-access-1"));
    fake.finish();

    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["First answer."]))]);
    let silent = Setup::anthropic(&fake).env("OAUTH_SILENT", "1");
    let mut pi = routed_to_an_expired_login_with(&fake, silent);
    let line = navigate_to_the_first_prompt(&mut pi);
    pi.send(json!({"type": "prompt", "message": format!("/send {line}")}));
    next_report(&mut pi, "oauth ", |_| true);
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["success"], true, "{state}");
    pi.command("a", "abort", json!({}));
    let answer = next_answer(&mut pi, "n");
    assert_eq!(
        answer["result"],
        json!({"cancelled": true, "aborted": true}),
        "{answer}"
    );
    assert_eq!(fake.requests().len(), 1, "no summary request");
    fake.finish();
}

/// Runs a first prompt (its summary routed to `corp` by `router.py`); the `navigate_tree` line
/// back to it, with a summary.
fn navigate_to_the_first_prompt(pi: &mut Pi) -> Value {
    pi.command("p", "prompt", json!({"message": "First DIRECT-CORP"}));
    pi.wait_for_event("agent_end");
    let entries = ask(
        pi,
        &[json!({"type": "query", "id": "e", "query": "entries"})],
        "e",
    );
    let first = entries["result"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["type"] == "message" && e["message"]["role"] == "user")
        .expect("the first prompt")["id"]
        .clone();
    json!({"type": "navigate_tree", "id": "n", "targetId": first, "summarize": true})
}

/// So is the login of the provider a summary is routed to (`direct`).
#[test]
fn a_summary_s_routed_provider_login_is_refreshed_first() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&[&long_text("first answer")])),
        Reply::sse(sse::anthropic_text(&["## Goal\nCompacted"])),
    ]);
    let mut pi = routed_to_an_expired_login(&fake);
    pi.command(
        "p",
        "prompt",
        json!({"message": long_text("First DIRECT-CORP")}),
    );
    pi.wait_for_event("agent_end");
    let compacted = pi.command("c", "compact", json!({}));
    assert_eq!(compacted["success"], true, "{compacted}");
    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(requests[0].body["model"], "fake-claude");
    assert_eq!(requests[1].body["model"], "corp-1");
    assert_eq!(requests[1].header("x-api-key"), Some("corp-access-1"));
    fake.finish();
}
