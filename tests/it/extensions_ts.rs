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

/// One broken extension is one `load` error naming it; the others load and pi-rs keeps going.
#[test]
fn a_broken_typescript_extension_is_reported_and_the_others_load() {
    let Some(reference) = pi_1_6() else { return };
    let fake = FakeProvider::start(vec![]);
    let setup = with_examples(&reference, Setup::anthropic(&fake), &["commands.ts"])
        .file(
            "broken.ts",
            "export default function (pi) { throw new Error('boom at load'); }\n",
        )
        .arg("-e")
        .arg("broken.ts");
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
    let state = pi.command("s", "get_state", json!({}));
    assert_eq!(state["success"], true);
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
