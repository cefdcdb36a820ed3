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
use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{Pi, Setup, run_cli, tool_result_block, tool_result_block_text};

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
