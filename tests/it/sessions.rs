//! Sessions (issue 3): session files on disk in pi's format, every session command, branching,
//! resuming in a restarted process, interop with files written by the reference pi, and damage
//! (torn tails, unwritable directories, SIGKILL mid-stream).
//!
//! Against the reference (PI_TEST_BIN) the following fail by design: anything calling
//! `get_entries`/`get_tree` (seed-only commands, FACTS.md §0.1), the test that expects a session
//! replacement to abort the active run (0.73.1 lets it run on unseen, FACTS.md §9.5),
//! `--no-session` + `new_session` (0.73.1 writes a file into the cwd, FACTS.md §9.7), the torn
//! tail (0.73.1 neither repairs nor warns, and glues its next entry onto the torn line) and the
//! session dir lost mid-session (0.73.1 silently never writes the file). Each test names its
//! expectation at its top.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::sse;
use crate::support::{
    Pi, Setup, Workspace, expect_transcript, is_reference, last_user_text, prompt, read_jsonl,
    session_file, state, text_reply,
};

// ---------------------------------------------------------------------------------------------
// Helpers

#[track_caller]
fn ok_data(pi: &mut Pi, id: &str, ty: &str, fields: Value) -> Value {
    let response = pi.command(id, ty, fields);
    assert_eq!(response["success"], true, "{ty}: {response}");
    response.get("data").cloned().unwrap_or(Value::Null)
}

#[track_caller]
fn messages(pi: &mut Pi, id: &str) -> Vec<Value> {
    ok_data(pi, id, "get_messages", json!({}))["messages"]
        .as_array()
        .expect("messages array")
        .clone()
}

/// `role:text` per message (text blocks joined; tool calls as `call:<name>`).
fn summary(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap_or("?");
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .map(|b| match b["type"].as_str() {
                        Some("text") => b["text"].as_str().unwrap_or("").to_string(),
                        Some("toolCall") => format!("call:{}", b["name"].as_str().unwrap_or("")),
                        _ => String::new(),
                    })
                    .collect::<Vec<_>>()
                    .join(""),
                _ => m["summary"]
                    .as_str()
                    .map(|_| "<summary>")
                    .unwrap_or("")
                    .to_string(),
            };
            format!("{role}:{text}")
        })
        .collect()
}

/// The entries (header excluded) of a session file, every line checked to parse.
#[track_caller]
fn file_entries(path: &Path) -> Vec<Value> {
    let lines = read_jsonl(path);
    assert!(!lines.is_empty(), "{} is empty", path.display());
    assert_eq!(lines[0]["type"], "session", "first line is the header");
    lines[1..].to_vec()
}

/// Checks the tree invariants of a file's entries: unique 8-hex ids (or longer fallbacks),
/// parents that exist earlier in the file, one root.
#[track_caller]
fn assert_well_formed(entries: &[Value]) {
    let mut seen = std::collections::HashSet::new();
    let mut roots = 0;
    for entry in entries {
        let id = entry["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id: {entry}"));
        assert!(
            id.len() >= 8 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-'),
            "id {id:?}"
        );
        match entry["parentId"].as_str() {
            Some(parent) => assert!(seen.contains(parent), "parent {parent} of {id} not earlier"),
            None => {
                assert!(entry["parentId"].is_null(), "{entry}");
                roots += 1;
            }
        }
        assert!(seen.insert(id.to_string()), "duplicate id {id}");
        assert!(
            entry["timestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{entry}"
        );
    }
    assert_eq!(roots, 1, "exactly one root");
}

/// The `message` objects of the path from the root to `leaf`.
fn branch_messages(entries: &[Value], leaf: &str) -> Vec<Value> {
    let mut path = Vec::new();
    let mut current = Some(leaf.to_string());
    while let Some(id) = current {
        let entry = entries
            .iter()
            .find(|e| e["id"] == id.as_str())
            .expect("entry on the path");
        path.push(entry.clone());
        current = entry["parentId"].as_str().map(str::to_string);
    }
    path.reverse();
    path.into_iter()
        .filter(|e| e["type"] == "message")
        .map(|e| e["message"].clone())
        .collect()
}

/// A reference fixture with its header cwd pointed at `cwd` (pi refuses to resume a session
/// whose stored cwd is gone).
fn reference_fixture(name: &str, cwd: &Path) -> String {
    let text = fixture(&format!("sessions/{name}"));
    let header: Value = serde_json::from_str(text.lines().next().expect("a header")).unwrap();
    text.replacen(
        &format!("\"cwd\":{}", header["cwd"]),
        &format!("\"cwd\":{}", json!(cwd.to_string_lossy())),
        1,
    )
}

/// Consumes records up to the next streamed text delta (from the sequential cursor on, so an
/// earlier run's deltas do not count).
#[track_caller]
fn wait_for_text_delta(pi: &mut Pi) {
    let deadline = pi.deadline();
    pi.recv_until(
        |r| r["type"] == "message_update" && r["assistantMessageEvent"]["type"] == "text_delta",
        deadline,
    );
}

fn openai_reply(text: &str) -> Reply {
    Reply::sse(sse::openai_text(&[text]))
}

// ---------------------------------------------------------------------------------------------
// Files and commands

/// Reference: passes.
#[test]
fn session_file_is_written_lazily_in_the_default_dir() {
    let fake = FakeProvider::start(vec![text_reply("Hi there")]);
    let setup = Setup::anthropic(&fake).with_sessions();
    let workspace = Workspace::new();
    let mut pi = Pi::spawn_in(&workspace, &setup);

    let file = session_file(&mut pi, "s1");
    let data = state(&mut pi, "s2");
    assert_eq!(
        file.parent(),
        Some(workspace.default_session_dir().as_path())
    );
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let session_id = data["sessionId"].as_str().unwrap();
    assert!(name.ends_with(&format!("_{session_id}.jsonl")), "{name}");
    assert!(
        workspace.default_session_dir().is_dir(),
        "the directory exists from the start"
    );
    assert!(
        !file.exists(),
        "nothing is written before an assistant message"
    );

    prompt(&mut pi, "p1", "Hello");
    let lines = read_jsonl(&file);
    let [header, _, _, _, _, last] = expect_transcript(
        &lines,
        &[
            json!({"type": "session", "version": 3, "id": session_id,
                   "cwd": pi.cwd().to_string_lossy()}),
            json!({"type": "model_change", "provider": "fake-anthropic",
                   "modelId": "fake-claude"}),
            json!({"type": "thinking_level_change", "thinkingLevel": "medium"}),
            json!({"type": "message", "message": {"role": "system", "content": ""}}),
            json!({"type": "message"}),
            json!({"type": "message"}),
        ],
    );
    assert_eq!(
        header
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["type", "version", "id", "timestamp", "cwd"]
    );
    let entries = &lines[1..];
    assert_well_formed(entries);
    assert_eq!(
        branch_messages(entries, last["id"].as_str().unwrap()),
        messages(&mut pi, "m1"),
        "the file's branch is exactly the agent's conversation"
    );
    assert_eq!(workspace.jsonl_files(), [file]);
    fake.finish();
}

/// Reference: fails at the get_entries/get_tree checks (seed-only commands).
#[test]
fn entries_tree_and_fork_messages_describe_the_file() {
    let fake = FakeProvider::start(vec![text_reply("one"), text_reply("two")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).with_sessions());
    prompt(&mut pi, "p1", "first");
    prompt(&mut pi, "p2", "second");
    let file = session_file(&mut pi, "s1");
    let on_disk = file_entries(&file);

    let fork_messages = ok_data(&mut pi, "f1", "get_fork_messages", json!({}));
    let users: Vec<&Value> = on_disk
        .iter()
        .filter(|e| e["message"]["role"] == "user")
        .collect();
    assert_eq!(
        fork_messages,
        json!({"messages": [
            {"entryId": users[0]["id"], "text": "first"},
            {"entryId": users[1]["id"], "text": "second"},
        ]})
    );

    let data = ok_data(&mut pi, "e1", "get_entries", json!({}));
    assert_eq!(
        data["entries"],
        json!(on_disk),
        "entries as written, in order"
    );
    let leaf = on_disk.last().unwrap()["id"].clone();
    assert_eq!(data["leafId"], leaf);

    let data = ok_data(&mut pi, "t1", "get_tree", json!({}));
    assert_eq!(data["leafId"], leaf);
    // A linear session: one root, each node one child, the entries in order.
    let mut node = &data["tree"];
    let mut walked = Vec::new();
    loop {
        let nodes = node.as_array().expect("node list");
        if nodes.is_empty() {
            break;
        }
        assert_eq!(nodes.len(), 1, "{node}");
        walked.push(nodes[0]["entry"].clone());
        node = &nodes[0]["children"];
    }
    assert_eq!(walked, on_disk);
    fake.finish();
}

/// Reference: passes.
#[test]
fn set_session_name_is_trimmed_persisted_and_reported() {
    let fake = FakeProvider::start(vec![text_reply("ok")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).with_sessions());
    assert!(state(&mut pi, "s0").get("sessionName").is_none());
    let response = pi.command("n0", "set_session_name", json!({"name": "   "}));
    assert_eq!(response["success"], false);
    assert_eq!(response["error"], "Session name cannot be empty");

    let response = pi.command("n1", "set_session_name", json!({"name": "  My work  "}));
    assert_eq!(
        response,
        json!({"id": "n1", "type": "response", "command": "set_session_name", "success": true})
    );
    pi.find(|r| r["type"] == "session_info_changed" && r["name"] == "My work");
    assert_eq!(state(&mut pi, "s1")["sessionName"], "My work");

    prompt(&mut pi, "p1", "hello");
    let file = session_file(&mut pi, "s2");
    let info: Vec<Value> = file_entries(&file)
        .into_iter()
        .filter(|e| e["type"] == "session_info")
        .collect();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0]["name"], "My work");
    fake.finish();
}

/// Reference: passes.
#[test]
fn new_session_starts_an_empty_session_with_its_parent() {
    let fake = FakeProvider::start(vec![text_reply("one"), text_reply("two")]);
    let workspace = Workspace::new();
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake).with_sessions());
    prompt(&mut pi, "p1", "first");
    let first = state(&mut pi, "s1");
    let first_file = first["sessionFile"].as_str().unwrap().to_string();

    let data = ok_data(
        &mut pi,
        "n1",
        "new_session",
        json!({"parentSession": first_file}),
    );
    assert_eq!(data, json!({"cancelled": false}));
    let second = state(&mut pi, "s2");
    assert_ne!(second["sessionId"], first["sessionId"]);
    assert_ne!(second["sessionFile"], first["sessionFile"]);
    assert_eq!(second["messageCount"], 0);
    assert!(messages(&mut pi, "m1").is_empty());
    let second_file = PathBuf::from(second["sessionFile"].as_str().unwrap());
    assert_eq!(
        second_file.parent(),
        Some(workspace.default_session_dir().as_path())
    );
    assert!(!second_file.exists(), "lazy again");

    prompt(&mut pi, "p2", "again");
    // The model saw only the new conversation.
    let requests = fake.requests();
    assert_eq!(requests[1].messages().len(), 1, "{:?}", requests[1].body);
    let lines = read_jsonl(&second_file);
    assert_eq!(lines[0]["parentSession"], json!(first_file));
    assert_eq!(lines[0]["id"], second["sessionId"]);
    assert_well_formed(&lines[1..]);
    assert_eq!(
        summary(&branch_messages(
            &lines[1..],
            lines.last().unwrap()["id"].as_str().unwrap()
        )),
        ["system:", "user:again", "assistant:two"]
    );
    // The first file is untouched by the second session.
    assert_eq!(file_entries(Path::new(&first_file)).len(), 5);
    fake.finish();
}

/// Reference: passes up to the get_tree check (seed-only command).
#[test]
fn fork_copies_the_path_and_the_new_branch_grows_beside_the_old_one() {
    let fake = FakeProvider::start(vec![
        text_reply("one"),
        text_reply("two"),
        text_reply("two again"),
    ]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).with_sessions());
    prompt(&mut pi, "p1", "first");
    prompt(&mut pi, "p2", "second");
    let original = session_file(&mut pi, "s1");
    let original_entries = file_entries(&original);
    let second_user = original_entries
        .iter()
        .find(|e| e["message"]["role"] == "user" && e["message"]["content"][0]["text"] == "second")
        .expect("second user entry")
        .clone();

    let response = pi.command("f0", "fork", json!({"entryId": "nope"}));
    assert_eq!(response["success"], false);
    assert_eq!(response["error"], "Invalid entry ID for forking");
    let assistant_id = original_entries.last().unwrap()["id"].clone();
    let response = pi.command("f1", "fork", json!({"entryId": assistant_id}));
    assert_eq!(response["error"], "Invalid entry ID for forking");

    let data = ok_data(&mut pi, "f2", "fork", json!({"entryId": second_user["id"]}));
    assert_eq!(data, json!({"text": "second", "cancelled": false}));
    let forked = session_file(&mut pi, "s2");
    assert_ne!(forked, original);
    assert_eq!(
        summary(&messages(&mut pi, "m1")),
        ["system:", "user:first", "assistant:one"]
    );

    prompt(&mut pi, "p3", "second, differently");
    let lines = read_jsonl(&forked);
    assert_eq!(lines[0]["parentSession"], json!(original.to_string_lossy()));
    let entries = &lines[1..];
    assert_well_formed(entries);
    // The copied prefix keeps its ids; the new branch hangs off the same parent as the old one.
    let prefix_len = original_entries
        .iter()
        .position(|e| e["id"] == second_user["id"])
        .unwrap();
    assert_eq!(entries[..prefix_len], original_entries[..prefix_len]);
    assert_eq!(entries[prefix_len]["parentId"], second_user["parentId"]);
    assert_ne!(entries[prefix_len]["id"], second_user["id"]);
    assert_eq!(
        summary(&messages(&mut pi, "m2")),
        [
            "system:",
            "user:first",
            "assistant:one",
            "user:second, differently",
            "assistant:two again"
        ]
    );
    // The original file still holds the old branch.
    assert_eq!(file_entries(&original), original_entries);

    // Both branches in one tree: the original's entries plus the fork's new ones appended, as
    // pi's own tree navigation would leave them. Opened with switch_session.
    let merged = pi.cwd().join("merged.jsonl");
    let mut text = std::fs::read_to_string(&original).unwrap();
    for entry in &entries[prefix_len..] {
        text.push_str(&format!("{entry}\n"));
    }
    std::fs::write(&merged, text).unwrap();
    let data = ok_data(
        &mut pi,
        "w1",
        "switch_session",
        json!({"sessionPath": merged.to_string_lossy()}),
    );
    assert_eq!(data, json!({"cancelled": false}));
    assert_eq!(
        summary(&messages(&mut pi, "m3")),
        [
            "system:",
            "user:first",
            "assistant:one",
            "user:second, differently",
            "assistant:two again"
        ],
        "the leaf is the last entry in file order"
    );
    let fork_messages = ok_data(&mut pi, "f3", "get_fork_messages", json!({}));
    let texts: Vec<&str> = fork_messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        ["first", "second", "second, differently"],
        "all branches"
    );

    let data = ok_data(&mut pi, "t1", "get_tree", json!({}));
    let branch_point = find_node(&data["tree"], second_user["parentId"].as_str().unwrap())
        .expect("branch point in tree");
    let children: Vec<&str> = branch_point["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c["entry"]["message"]["content"][0]["text"]
                .as_str()
                .unwrap_or("")
        })
        .collect();
    assert_eq!(children, ["second", "second, differently"], "oldest first");
    fake.finish();
}

fn find_node<'a>(nodes: &'a Value, id: &str) -> Option<&'a Value> {
    let mut stack: Vec<&Value> = nodes.as_array()?.iter().collect();
    while let Some(node) = stack.pop() {
        if node["entry"]["id"] == id {
            return Some(node);
        }
        stack.extend(node["children"].as_array()?.iter());
    }
    None
}

/// Reference: passes.
#[test]
fn clone_copies_the_active_branch_and_keeps_the_leaf() {
    let fake = FakeProvider::start(vec![text_reply("one"), text_reply("two")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).with_sessions());
    prompt(&mut pi, "p1", "first");
    let original = session_file(&mut pi, "s1");
    let before = file_entries(&original);
    let data = ok_data(&mut pi, "c1", "clone", json!({}));
    assert_eq!(data, json!({"cancelled": false}));
    let cloned = session_file(&mut pi, "s2");
    assert_ne!(cloned, original);
    assert_eq!(cloned.parent(), original.parent());
    let lines = read_jsonl(&cloned);
    assert_eq!(lines[0]["parentSession"], json!(original.to_string_lossy()));
    assert_eq!(lines[1..], before[..], "same entries, same ids");
    assert_eq!(
        summary(&messages(&mut pi, "m1")),
        ["system:", "user:first", "assistant:one"]
    );
    prompt(&mut pi, "p2", "more");
    let after = file_entries(&cloned);
    assert_eq!(
        after[before.len()]["parentId"],
        before.last().unwrap()["id"]
    );
    assert_eq!(file_entries(&original), before, "original untouched");
    fake.finish();
}

/// Reference: passes.
#[test]
fn switch_session_moves_between_files_and_binds_missing_paths() {
    let fake = FakeProvider::start(vec![text_reply("one"), text_reply("two")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).with_sessions());
    prompt(&mut pi, "p1", "first");
    let first = state(&mut pi, "s1");

    let target = pi.cwd().join("elsewhere/new.jsonl");
    let data = ok_data(
        &mut pi,
        "w1",
        "switch_session",
        json!({"sessionPath": target.to_string_lossy()}),
    );
    assert_eq!(data, json!({"cancelled": false}));
    let second = state(&mut pi, "s2");
    assert_eq!(second["sessionFile"], json!(target.to_string_lossy()));
    assert_ne!(second["sessionId"], first["sessionId"]);
    assert!(messages(&mut pi, "m1").is_empty());
    assert!(target.parent().unwrap().is_dir(), "directory created");
    prompt(&mut pi, "p2", "second");
    let lines = read_jsonl(&target);
    assert_eq!(lines[0]["id"], second["sessionId"]);

    ok_data(
        &mut pi,
        "w2",
        "switch_session",
        json!({"sessionPath": first["sessionFile"]}),
    );
    let back = state(&mut pi, "s3");
    assert_eq!(back["sessionId"], first["sessionId"]);
    assert_eq!(back["sessionFile"], first["sessionFile"]);
    assert_eq!(
        summary(&messages(&mut pi, "m2")),
        ["system:", "user:first", "assistant:one"]
    );
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// Restarts

/// Reference: passes.
#[test]
fn continue_in_a_restarted_process_keeps_context_and_name() {
    let fake = FakeProvider::start(vec![text_reply("Noted: 42"), text_reply("It was 42")]);
    let setup = Setup::anthropic(&fake).with_sessions();
    let workspace = Workspace::new();
    let mut pi = Pi::spawn_in(&workspace, &setup);
    prompt(&mut pi, "p1", "Remember 42");
    ok_data(
        &mut pi,
        "n1",
        "set_session_name",
        json!({"name": "numbers"}),
    );
    let before = state(&mut pi, "s1");
    let before_messages = messages(&mut pi, "m1");
    let file = PathBuf::from(before["sessionFile"].as_str().unwrap());
    let before_entries = file_entries(&file);
    assert!(pi.close_and_wait().success());

    let mut pi = Pi::spawn_in(&workspace, &setup.clone().arg("--continue"));
    let after = state(&mut pi, "s2");
    assert_eq!(after["sessionFile"], before["sessionFile"]);
    assert_eq!(after["sessionId"], before["sessionId"]);
    assert_eq!(after["sessionName"], "numbers");
    assert_eq!(after["messageCount"], 3);
    assert_eq!(messages(&mut pi, "m2"), before_messages);
    assert_eq!(
        file_entries(&file),
        before_entries,
        "resuming with the same model and level appends nothing"
    );

    prompt(&mut pi, "p2", "What was it?");
    let requests = fake.requests();
    let history = requests[1].messages();
    assert_eq!(history.len(), 3, "{:?}", requests[1].body);
    assert_eq!(last_user_text(&requests[1]), "What was it?");
    assert!(history[1].to_string().contains("Noted: 42"));
    let entries = file_entries(&file);
    assert_well_formed(&entries);
    assert_eq!(entries[..before_entries.len()], before_entries[..]);
    assert_eq!(
        entries[before_entries.len()]["parentId"],
        before_entries.last().unwrap()["id"]
    );
    assert_eq!(workspace.jsonl_files(), [file], "no second file");
    fake.finish();
}

/// Reference: fails (get_entries is seed-only).
#[test]
fn get_entries_ids_are_durable_cursors_across_restarts() {
    let fake = FakeProvider::start(vec![text_reply("one"), text_reply("two")]);
    let setup = Setup::anthropic(&fake).with_sessions();
    let workspace = Workspace::new();
    let mut pi = Pi::spawn_in(&workspace, &setup);

    let empty = ok_data(&mut pi, "e0", "get_entries", json!({}));
    assert_eq!(
        empty["leafId"], empty["entries"][1]["id"],
        "model + level entries"
    );
    prompt(&mut pi, "p1", "first");
    let seen = ok_data(&mut pi, "e1", "get_entries", json!({}));
    let cursor = seen["leafId"].as_str().unwrap().to_string();
    assert_eq!(
        seen["entries"].as_array().unwrap().last().unwrap()["id"],
        cursor
    );
    let nothing_new = ok_data(&mut pi, "e2", "get_entries", json!({"since": cursor}));
    assert_eq!(nothing_new, json!({"entries": [], "leafId": cursor}));
    let file = session_file(&mut pi, "s1");
    assert!(pi.close_and_wait().success());

    let mut pi = Pi::spawn_in(
        &workspace,
        &setup.clone().arg("--session").arg(&file.to_string_lossy()),
    );
    let nothing_new = ok_data(&mut pi, "e3", "get_entries", json!({"since": cursor}));
    assert_eq!(nothing_new, json!({"entries": [], "leafId": cursor}));
    prompt(&mut pi, "p2", "second");
    let fresh = ok_data(&mut pi, "e4", "get_entries", json!({"since": cursor}));
    let fresh_entries = fresh["entries"].as_array().unwrap();
    assert_eq!(
        summary(
            &fresh_entries
                .iter()
                .map(|e| e["message"].clone())
                .collect::<Vec<_>>()
        ),
        ["user:second", "assistant:two"]
    );
    assert_eq!(fresh_entries[0]["parentId"], json!(cursor));
    assert_eq!(fresh["leafId"], fresh_entries[1]["id"]);
    let all = ok_data(&mut pi, "e5", "get_entries", json!({}));
    assert_eq!(all["entries"], json!(file_entries(&file)));

    let response = pi.command("e6", "get_entries", json!({"since": "0000beef"}));
    assert_eq!(response["success"], false, "{response}");
    assert!(response["error"].as_str().is_some_and(|e| !e.is_empty()));
    fake.finish();
}

/// Reference: passes.
#[test]
fn session_id_prefix_and_fork_flag_select_a_stored_session() {
    let fake = FakeProvider::start(vec![text_reply("one"), text_reply("two"), text_reply("3")]);
    let setup = Setup::anthropic(&fake).with_sessions();
    let workspace = Workspace::new();
    let mut pi = Pi::spawn_in(&workspace, &setup);
    prompt(&mut pi, "p1", "first");
    let first = state(&mut pi, "s1");
    let file = PathBuf::from(first["sessionFile"].as_str().unwrap());
    let entries = file_entries(&file);
    assert!(pi.close_and_wait().success());

    // A prefix of the session id, looked up in this project's session dir.
    let prefix = &first["sessionId"].as_str().unwrap()[..13];
    let mut pi = Pi::spawn_in(&workspace, &setup.clone().arg("--session").arg(prefix));
    let resumed = state(&mut pi, "s2");
    assert_eq!(resumed["sessionFile"], first["sessionFile"]);
    prompt(&mut pi, "p2", "second");
    let entries = file_entries(&file).len().max(entries.len());
    assert!(pi.close_and_wait().success());

    // --fork: a copy with a new id and file, pointing back at the source.
    let mut pi = Pi::spawn_in(
        &workspace,
        &setup.clone().arg("--fork").arg(&file.to_string_lossy()),
    );
    let forked = state(&mut pi, "s3");
    assert_ne!(forked["sessionId"], first["sessionId"]);
    assert_ne!(forked["sessionFile"], first["sessionFile"]);
    assert_eq!(
        summary(&messages(&mut pi, "m1")),
        [
            "system:",
            "user:first",
            "assistant:one",
            "user:second",
            "assistant:two"
        ]
    );
    prompt(&mut pi, "p3", "third");
    let forked_file = PathBuf::from(forked["sessionFile"].as_str().unwrap());
    let lines = read_jsonl(&forked_file);
    assert_eq!(lines[0]["parentSession"], json!(file.to_string_lossy()));
    assert_well_formed(&lines[1..]);
    assert_eq!(
        file_entries(&file).len(),
        entries,
        "the source is untouched"
    );

    let mut missing = Pi::spawn_in(&workspace, &setup.clone().arg("--session").arg("ffffffff"));
    assert_eq!(missing.close_and_wait().code(), Some(1));
    assert!(
        missing
            .stderr_text()
            .contains("No session found matching 'ffffffff'"),
        "{}",
        missing.stderr_text()
    );
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// Interop with files the reference wrote

/// Reference: fails at the get_entries/get_tree checks only.
#[test]
fn reference_session_opens_with_its_branch_tree_and_name_then_continues() {
    let fake = FakeProvider::start(vec![openai_reply("continued")]);
    let workspace = Workspace::new();
    let original = reference_fixture("reference-main.jsonl", &workspace.cwd());
    let file = workspace.cwd().join("reference-main.jsonl");
    std::fs::write(&file, &original).unwrap();
    let file_lines = read_jsonl(&file);
    let entries = file_lines[1..].to_vec();
    let leaf = entries.last().unwrap()["id"].as_str().unwrap().to_string();

    let setup = Setup::openai(&fake)
        .with_sessions()
        .arg("--session")
        .arg(&file.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let data = state(&mut pi, "s1");
    assert_eq!(data["sessionFile"], json!(file.to_string_lossy()));
    assert_eq!(data["sessionId"], file_lines[0]["id"]);
    assert_eq!(data["sessionName"], "Fixture session");

    // The compaction on the branch: its summary, then the entries from firstKeptEntryId on.
    let got = messages(&mut pi, "m1");
    let compaction = entries.iter().find(|e| e["type"] == "compaction").unwrap();
    assert_eq!(got[0]["role"], "compactionSummary");
    assert_eq!(got[0]["summary"], compaction["summary"]);
    assert_eq!(got[0]["tokensBefore"], compaction["tokensBefore"]);
    let kept: Vec<Value> = branch_messages(&entries, &leaf)
        .into_iter()
        .skip_while(|m| m["content"][0]["text"] != "echo: third question")
        .collect();
    assert_eq!(
        got[1..],
        kept[..],
        "messages exactly as the reference wrote them"
    );

    prompt(&mut pi, "p1", "fourth question");
    let request = fake.requests().remove(0);
    let history = request.messages();
    assert_eq!(last_user_text(&request), "fourth question");
    let flat = serde_json::to_string(history).unwrap();
    assert!(
        flat.contains("Fixture summary of the earlier conversation."),
        "{flat}"
    );
    assert!(flat.contains("echo: after compaction"), "{flat}");
    assert!(!flat.contains("hello there"), "compacted away: {flat}");

    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with(&original),
        "the reference's bytes are kept as they were"
    );
    let after = file_entries(&file);
    assert_well_formed(&after);
    let mut added = &after[entries.len()..];
    assert_eq!(
        added[0]["parentId"],
        json!(leaf),
        "appended after the reference's leaf"
    );
    // pi-rs records the switch to the command line's model when resuming; 0.73.1 does not
    // (it only adds a thinking entry when the branch has none). Either keeps the file valid.
    if added[0]["type"] == "model_change" {
        assert_eq!(added[0]["provider"], "fake-openai");
        assert_eq!(added[0]["modelId"], "fake-gpt");
        added = &added[1..];
    }
    let types: Vec<&str> = added.iter().map(|e| e["type"].as_str().unwrap()).collect();
    // The reference file (0.73.1) has no system message: the first run adds one (pi 1.6.0).
    assert_eq!(types, ["message", "message", "message"], "{added:?}");
    assert_eq!(
        summary(
            &added
                .iter()
                .map(|e| e["message"].clone())
                .collect::<Vec<_>>()
        ),
        ["system:", "user:fourth question", "assistant:continued"]
    );

    // Seed-only views last.
    let data = ok_data(&mut pi, "e1", "get_entries", json!({}));
    assert_eq!(data["entries"], json!(after));
    let data = ok_data(&mut pi, "t1", "get_tree", json!({}));
    let tree = data["tree"].as_array().unwrap();
    assert_eq!(tree.len(), 1);
    assert_eq!(tree[0]["entry"], entries[0]);
    assert_eq!(data["leafId"], after.last().unwrap()["id"]);
    fake.finish();
}

/// A file pi 1.6.0 wrote (`tests/session_fixtures/generate.py --v1.6.0`): its system message
/// and its compaction's `systemMessage` are read back; the compacted context starts with the
/// compaction's replayed prompt state, the kept entries' own system messages left out; the next
/// run patches what pi-rs's prompt and tools change (the docs section in pi-rs's words, the tool
/// declarations replaced) and the provider gets pi-rs's prompt.
#[test]
fn reference_1_6_0_session_with_system_messages_opens_and_continues() {
    let fake = FakeProvider::start(vec![openai_reply("continued")]);
    let workspace = Workspace::new();
    let original = reference_fixture("reference-1.6.0-main.jsonl", &workspace.cwd());
    let file = workspace.cwd().join("reference-1.6.0-main.jsonl");
    std::fs::write(&file, &original).unwrap();
    let entries = read_jsonl(&file)[1..].to_vec();
    let compaction = entries.iter().find(|e| e["type"] == "compaction").unwrap();
    let setup = Setup::openai(&fake)
        .with_sessions()
        .arg("--session")
        .arg(&file.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let got = messages(&mut pi, "m1");
    assert_eq!(
        got[0], compaction["systemMessage"],
        "the replayed state leads"
    );
    assert!(got[0]["sections"]["docs"].is_string(), "{}", got[0]);
    assert_eq!(got[1]["role"], "compactionSummary");
    assert_eq!(
        got.iter().filter(|m| m["role"] == "system").count(),
        1,
        "{got:?}"
    );

    let run = prompt(&mut pi, "p1", "fourth question");
    let system = &run
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "system")
        .expect("a system message patching the prompt")["message"];
    assert_eq!(system["content"], "");
    // pi-rs's docs section (its own words, its package folder) patches 1.6.0's.
    assert!(
        system["sections"]["docs"]
            .as_str()
            .is_some_and(|d| d.starts_with("<docs>\npi's documentation")),
        "{system}"
    );
    // The fixture's prompt names the directory it was made in; this one runs elsewhere.
    assert_eq!(
        system["sections"]["cwd"],
        format!("<cwd>\n{}\n</cwd>", workspace.cwd().display())
    );
    let names = |key: &str| -> Vec<String> {
        system[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key}: {system}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(names("toolsRemoved"), ["read", "bash", "edit", "write"]);
    assert_eq!(names("toolsAdded"), ["read", "bash", "edit", "write"]);
    let request = fake.requests().remove(0);
    let prompt_text = crate::support::system_prompt_of(&request);
    assert_eq!(
        prompt_text,
        [
            system["sections"]["preamble"].as_str().unwrap(),
            system["sections"]["tools"].as_str().unwrap(),
            system["sections"]["rules"].as_str().unwrap(),
            system["sections"]["docs"].as_str().unwrap(),
            system["sections"]["cwd"].as_str().unwrap(),
        ]
        .join("\n\n"),
        "the request carries the replayed prompt"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with(&original), "1.6.0's bytes are kept");
    let added: Vec<Value> = file_entries(&file)[entries.len()..]
        .iter()
        .filter(|e| e["type"] == "message")
        .map(|e| e["message"].clone())
        .collect();
    assert_eq!(
        summary(&added),
        ["system:", "user:fourth question", "assistant:continued"]
    );
    fake.finish();
}

/// Reference: passes.
#[test]
fn reference_fork_opens_and_continues() {
    let fake = FakeProvider::start(vec![openai_reply("fine")]);
    let workspace = Workspace::new();
    let original = reference_fixture("reference-fork.jsonl", &workspace.cwd());
    let file = workspace.cwd().join("fork.jsonl");
    std::fs::write(&file, &original).unwrap();
    let entries = file_entries(&file);
    let setup = Setup::openai(&fake)
        .with_sessions()
        .arg("--session")
        .arg(&file.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let got = messages(&mut pi, "m1");
    assert_eq!(
        got,
        branch_messages(&entries, entries.last().unwrap()["id"].as_str().unwrap())
    );
    assert_eq!(
        summary(&got),
        [
            "user:hello there",
            "assistant:echo: hello there",
            "user:forked question",
            "assistant:echo: forked question"
        ]
    );
    assert!(state(&mut pi, "s1").get("sessionName").is_none());
    prompt(&mut pi, "p1", "and now?");
    let lines = read_jsonl(&file);
    assert!(lines[0]["parentSession"].is_string(), "header kept");
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .starts_with(&original)
    );
    assert_well_formed(&lines[1..]);
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// Damage

/// Reference: fails (0.73.1 skips the torn line silently and appends after it without a
/// newline, gluing its next entry onto the garbage).
#[test]
fn torn_tail_is_repaired_with_a_warning() {
    let fake = FakeProvider::start(vec![openai_reply("repaired")]);
    let workspace = Workspace::new();
    let original = reference_fixture("reference-main.jsonl", &workspace.cwd());
    let file = workspace.cwd().join("torn.jsonl");
    let torn = r#"{"type":"message","id":"deadbeef","parentId":"32ac918c","timestamp":"2026-11-29T15:05:35.000Z","message":{"role":"user","content":[{"type":"text","text":"half a li"#;
    std::fs::write(&file, format!("{original}{torn}")).unwrap();
    let setup = Setup::openai(&fake)
        .with_sessions()
        .arg("--session")
        .arg(&file.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    assert_eq!(state(&mut pi, "s1")["sessionName"], "Fixture session");
    // The torn line is cut off on open; what follows the reference's bytes is pi-rs's own
    // complete lines (the model_change of resuming with another model).
    let repaired = std::fs::read_to_string(&file).unwrap();
    assert!(repaired.starts_with(&original), "{repaired}");
    assert!(!repaired.contains("deadbeef"), "{repaired}");
    read_jsonl(&file);
    let stderr = pi.stderr_text();
    assert!(
        stderr.contains("torn") && stderr.contains(&*file.to_string_lossy()),
        "a warning names the file: {stderr}"
    );
    assert_eq!(
        stderr.matches("dropped a torn").count(),
        1,
        "reported once: {stderr}"
    );
    prompt(&mut pi, "p1", "still there?");
    let entries = file_entries(&file);
    assert_well_formed(&entries);
    assert!(!entries.iter().any(|e| e["id"] == "deadbeef"));
    assert_eq!(
        summary(&[entries.last().unwrap()["message"].clone()]),
        ["assistant:repaired"]
    );
    fake.finish();
}

/// Reference: passes (its message is an uncaught ENOTDIR with a Node stack trace, exit code 1).
#[test]
fn unusable_session_dir_at_startup_is_a_clear_error() {
    let fake = FakeProvider::start(Vec::new());
    let workspace = Workspace::new();
    std::fs::write(workspace.cwd().join("blocker"), "a regular file").unwrap();
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .arg("--session-dir")
        .arg("blocker/sessions");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let status = pi.close_and_wait();
    assert_eq!(status.code(), Some(1));
    let stderr = pi.stderr_text();
    assert!(
        stderr.contains("Error: ") && stderr.contains("blocker/sessions"),
        "{stderr}"
    );
    fake.finish();
}

/// Reference: fails (0.73.1 says nothing and never writes that session, even after the directory
/// is usable again; here the failure is logged, the session stays in memory, and the next append
/// writes the whole file).
#[test]
fn session_dir_lost_mid_session_is_reported_and_recovered() {
    let fake = FakeProvider::start(vec![text_reply("one"), text_reply("two")]);
    let workspace = Workspace::new();
    let dir = workspace.cwd().join("sessions");
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .arg("--session-dir")
        .arg(&dir.to_string_lossy());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let file = session_file(&mut pi, "s1");
    assert_eq!(file.parent(), Some(dir.as_path()));
    // Replace the (still empty) directory by a regular file: nothing can be created in it.
    std::fs::remove_dir(&dir).unwrap();
    std::fs::write(&dir, "in the way").unwrap();

    prompt(&mut pi, "p1", "first");
    // Written by the disk-writer thread before agent_end reached stdout; the harness's stderr
    // reader may still be catching up on a busy machine.
    let reported = |stderr: &str| {
        stderr.contains(&*dir.to_string_lossy()) && stderr.to_lowercase().contains("session")
    };
    let until = std::time::Instant::now() + pi.timeout();
    while !reported(&pi.stderr_raw()) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stderr = pi.stderr_text();
    assert!(
        reported(&stderr),
        "the failure is reported on stderr: {stderr}"
    );
    let data = state(&mut pi, "s2");
    assert_eq!(data["sessionFile"], json!(file.to_string_lossy()));
    assert_eq!(data["messageCount"], 3);

    // The directory comes back: the next append writes everything kept in memory.
    std::fs::remove_file(&dir).unwrap();
    prompt(&mut pi, "p2", "second");
    let entries = file_entries(&file);
    assert_well_formed(&entries);
    assert_eq!(
        summary(&branch_messages(
            &entries,
            entries.last().unwrap()["id"].as_str().unwrap()
        )),
        [
            "system:",
            "user:first",
            "assistant:one",
            "user:second",
            "assistant:two"
        ]
    );

    // switch_session into an unusable place fails cleanly and keeps the current session.
    std::fs::write(workspace.cwd().join("plain"), "x").unwrap();
    let response = pi.command(
        "w1",
        "switch_session",
        json!({"sessionPath": workspace.cwd().join("plain/s.jsonl").to_string_lossy()}),
    );
    assert_eq!(response["success"], false, "{response}");
    assert!(
        response["error"]
            .as_str()
            .is_some_and(|e| e.contains("plain")),
        "{response}"
    );
    assert_eq!(
        state(&mut pi, "s3")["sessionFile"],
        json!(file.to_string_lossy())
    );
    fake.finish();
}

/// Reference: passes.
#[test]
fn sigkill_mid_stream_leaves_a_file_that_reloads_consistently() {
    let slow = sse::AnthropicStream::new()
        .text(&["one ", "two ", "three ", "four ", "five ", "six ", "seven "])
        .finish("end_turn");
    let fake = FakeProvider::start(vec![
        text_reply("first answer"),
        Reply::sse_slow(slow, Duration::from_millis(300)),
        text_reply("after the crash"),
    ]);
    let setup = Setup::anthropic(&fake).with_sessions();
    let workspace = Workspace::new();
    let mut pi = Pi::spawn_in(&workspace, &setup);
    prompt(&mut pi, "p1", "first");
    let file = session_file(&mut pi, "s1");
    pi.send(json!({"id": "p2", "type": "prompt", "message": "count slowly"}));
    wait_for_text_delta(&mut pi);
    pi.kill();

    let entries = file_entries(&file);
    assert_well_formed(&entries);
    let leaf = entries.last().unwrap()["id"].as_str().unwrap().to_string();
    let on_disk = branch_messages(&entries, &leaf);
    assert_eq!(
        summary(&on_disk),
        [
            "system:",
            "user:first",
            "assistant:first answer",
            "user:count slowly"
        ],
        "the streaming reply was never appended"
    );

    let mut pi = Pi::spawn_in(&workspace, &setup.clone().arg("--continue"));
    assert_eq!(session_file(&mut pi, "s2"), file);
    assert_eq!(messages(&mut pi, "m1"), on_disk);
    prompt(&mut pi, "p3", "are you back?");
    let after = file_entries(&file);
    assert_well_formed(&after);
    assert_eq!(after[..entries.len()], entries[..]);
    assert_eq!(after[entries.len()]["parentId"], json!(leaf));
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// --no-session and session replacement during a run

/// Reference: fails (0.73.1's new_session under --no-session writes `<timestamp>_<id>.jsonl`
/// into the cwd, FACTS.md §9.7).
#[test]
fn no_session_writes_no_file_anywhere() {
    let fake = FakeProvider::start(vec![text_reply("one"), text_reply("two"), text_reply("3")]);
    let workspace = Workspace::new();
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    prompt(&mut pi, "p1", "first");
    ok_data(
        &mut pi,
        "n0",
        "set_session_name",
        json!({"name": "memory only"}),
    );
    ok_data(&mut pi, "c1", "clone", json!({}));
    assert!(state(&mut pi, "s0").get("sessionFile").is_none());
    ok_data(&mut pi, "n1", "new_session", json!({}));
    assert!(state(&mut pi, "s1").get("sessionFile").is_none());
    prompt(&mut pi, "p2", "second");
    let forks = ok_data(&mut pi, "f1", "get_fork_messages", json!({}));
    let entry_id = forks["messages"][0]["entryId"].clone();
    assert_eq!(
        ok_data(&mut pi, "f2", "fork", json!({"entryId": entry_id})),
        json!({"text": "second", "cancelled": false})
    );
    prompt(&mut pi, "p3", "third");
    assert!(state(&mut pi, "s2").get("sessionFile").is_none());
    assert!(pi.close_and_wait().success());
    assert_eq!(workspace.jsonl_files(), Vec::<PathBuf>::new());
    assert!(
        !workspace.agent_dir().join("sessions").exists(),
        "no session directory either"
    );
    fake.finish();
}

/// Reference: fails (0.73.1 replaces the session without aborting; the old run continues
/// unseen, FACTS.md §9.5).
#[test]
fn replacing_the_session_aborts_the_active_run_first() {
    let partial = sse::AnthropicStream::new()
        .text(&["Working on it"])
        .unfinished();
    let fake = FakeProvider::start(vec![Reply::stall_after(partial)]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).with_sessions());
    let first = session_file(&mut pi, "s0");
    pi.send(json!({"id": "p1", "type": "prompt", "message": "take your time"}));
    wait_for_text_delta(&mut pi);
    pi.send(json!({"id": "n1", "type": "new_session"}));
    let deadline = pi.deadline();
    let records = pi.recv_until(|r| r["type"] == "response" && r["id"] == "n1", deadline);
    let end = records
        .iter()
        .position(|r| r["type"] == "agent_end")
        .unwrap_or_else(|| panic!("no agent_end before the new_session response: {records:?}"));
    let last = records[end]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["stopReason"], "aborted");
    assert_eq!(records.last().unwrap()["data"], json!({"cancelled": false}));

    let data = state(&mut pi, "s1");
    assert_eq!(data["isStreaming"], false);
    assert_eq!(data["messageCount"], 0);
    assert_ne!(data["sessionFile"], json!(first.to_string_lossy()));
    // The aborted reply is an assistant message: the old session was written with it.
    let entries = file_entries(&first);
    let leaf = entries.last().unwrap()["id"].as_str().unwrap().to_string();
    let old = branch_messages(&entries, &leaf);
    assert_eq!(old.last().unwrap()["stopReason"], "aborted");
    drop(pi);
    if !is_reference() {
        assert_eq!(fake.stalls_closed_by_client(), 1);
    }
    fake.finish();
}

/// Reference: fails (as above: 0.73.1 keeps the old run going unseen).
#[test]
fn replacing_the_session_during_a_tool_call_aborts_it_and_keeps_the_old_file_paired() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_bash("toolu_1", "sleep 30"))]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).with_sessions());
    let first = session_file(&mut pi, "s0");
    pi.send(json!({"id": "p1", "type": "prompt", "message": "sleep a while"}));
    pi.records_until_event("tool_execution_start");
    pi.send(json!({"id": "c1", "type": "switch_session",
                   "sessionPath": pi.cwd().join("other.jsonl").to_string_lossy()}));
    let deadline = pi.deadline();
    let records = pi.recv_until(|r| r["type"] == "response" && r["id"] == "c1", deadline);
    let labels: Vec<String> = records
        .iter()
        .map(|r| r["type"].as_str().unwrap_or("").to_string())
        .collect();
    let end = labels.iter().position(|t| t == "agent_end");
    assert!(end.is_some(), "agent_end before the response: {labels:?}");
    assert_eq!(records.last().unwrap()["success"], true);
    assert_eq!(messages(&mut pi, "m1"), Vec::<Value>::new());

    // The old file: the tool call has exactly one (aborted) result.
    let entries = file_entries(&first);
    assert_well_formed(&entries);
    let leaf = entries.last().unwrap()["id"].as_str().unwrap().to_string();
    let old = branch_messages(&entries, &leaf);
    let roles: Vec<&str> = old.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "toolResult"],
        "{old:?}"
    );
    assert_eq!(old[3]["toolCallId"], "toolu_1");
    assert_eq!(old[3]["isError"], true);
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// A stored session's working directory

/// A session file whose header says it belongs to `cwd`, with one user/assistant exchange.
fn session_in(path: &Path, cwd: &Path) {
    let lines = [
        json!({"type": "session", "version": 3, "id": "01a227d7-0000-7000-8000-00000000c0de",
               "timestamp": "2026-11-29T15:05:34.023Z", "cwd": cwd.to_string_lossy()}),
        json!({"type": "message", "id": "aaaa0001", "parentId": null,
               "timestamp": "2026-11-29T15:05:35.000Z",
               "message": {"role": "user", "content": [{"type": "text", "text": "earlier"}],
                           "timestamp": 1}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::create_dir_all(path.parent().expect("parent")).expect("session dir");
    std::fs::write(path, text).expect("write session");
}

/// `pwd` as the RPC `bash` command sees it.
#[track_caller]
fn bash_pwd(pi: &mut Pi, id: &str) -> String {
    let data = ok_data(pi, id, "bash", json!({"command": "pwd"}));
    data["output"].as_str().unwrap_or("").trim().to_string()
}

fn stored_cwd_error(cwd: &Path, file: &Path, current: &Path) -> String {
    format!(
        "Stored session working directory does not exist: {}\nSession file: {}\nCurrent working directory: {}",
        cwd.display(),
        file.display(),
        current.display()
    )
}

/// `--session` opens a session in the directory it was recorded in (pi builds its runtime from
/// the header's `cwd`): shell commands run there and the model is told so. `--continue` takes
/// the newest session of the startup directory's session folder and stays in the startup
/// directory, whatever the header says (both references). The project's settings need trust
/// (a `trust.json` decision), as in pi 1.6.0.
#[test]
fn a_resumed_session_runs_in_its_stored_working_directory() {
    let fake = FakeProvider::start(vec![text_reply("there")]);
    let setup = Setup::anthropic(&fake).with_sessions().trust_project();
    let workspace = Workspace::new();
    let project = workspace.root().join("project");
    // The project's own settings apply, not the start directory's.
    std::fs::create_dir_all(project.join(".pi")).expect("project dir");
    std::fs::write(
        project.join(".pi/settings.json"),
        r#"{"steeringMode": "all"}"#,
    )
    .expect("project settings");
    let file = workspace.root().join("stored/other.jsonl");
    session_in(&file, &project);

    let mut pi = Pi::spawn_in(
        &workspace,
        &setup.clone().arg("--session").arg(&file.to_string_lossy()),
    );
    assert_eq!(bash_pwd(&mut pi, "b1"), project.to_string_lossy());
    assert_eq!(state(&mut pi, "s0")["steeringMode"], "all");
    prompt(&mut pi, "p1", "where are we?");
    let system = crate::support::system_prompt_of(&fake.requests()[0]);
    assert!(
        system.contains(&*project.to_string_lossy())
            && !system.contains(&*workspace.cwd().to_string_lossy()),
        "the prompt names the session's directory: {system}"
    );
    drop(pi);

    // --continue: a session recorded elsewhere (a file moved in by hand, its directory gone)
    // is continued here, not refused.
    let moved = workspace.default_session_dir().join("moved.jsonl");
    session_in(&moved, &workspace.root().join("gone"));
    let mut pi = Pi::spawn_in(&workspace, &setup.clone().arg("--continue"));
    assert_eq!(
        state(&mut pi, "s1")["sessionFile"],
        json!(moved.to_string_lossy())
    );
    assert_eq!(bash_pwd(&mut pi, "b2"), workspace.cwd().to_string_lossy());
    fake.finish();
}

/// A session whose recorded directory is gone is refused with pi's message: by `--session` (on
/// stderr, exit 1) and by `switch_session` (an error response; the current session and directory
/// stay). A `switch_session` to a session whose directory exists moves there. Reference: passes.
#[test]
fn a_session_whose_working_directory_is_gone_is_refused() {
    let fake = FakeProvider::start(Vec::new());
    let setup = Setup::anthropic(&fake).with_sessions();
    let workspace = Workspace::new();
    let gone = workspace.root().join("deleted-project");
    let file = workspace.root().join("stored/orphan.jsonl");
    session_in(&file, &gone);
    let expected = stored_cwd_error(&gone, &file, &workspace.cwd());

    let mut pi = Pi::spawn_in(
        &workspace,
        &setup.clone().arg("--session").arg(&file.to_string_lossy()),
    );
    assert_eq!(pi.wait_for_exit().code(), Some(1));
    assert!(pi.stderr_text().contains(&expected), "{}", pi.stderr_text());
    drop(pi);

    // switch_session: refused, nothing changes; a session whose directory exists moves there.
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let before = state(&mut pi, "s1");
    let response = pi.command(
        "w1",
        "switch_session",
        json!({"sessionPath": file.to_string_lossy()}),
    );
    assert_eq!(response["success"], false, "{response}");
    assert_eq!(response["error"], json!(expected));
    assert_eq!(state(&mut pi, "s2")["sessionFile"], before["sessionFile"]);
    assert_eq!(bash_pwd(&mut pi, "b1"), workspace.cwd().to_string_lossy());

    let project = workspace.root().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let other = workspace.root().join("stored/other.jsonl");
    session_in(&other, &project);
    ok_data(
        &mut pi,
        "w2",
        "switch_session",
        json!({"sessionPath": other.to_string_lossy()}),
    );
    assert_eq!(bash_pwd(&mut pi, "b2"), project.to_string_lossy());
    fake.finish();
}

/// `--session-id <id>` as pi 1.6.0: a new session with that id (said on stderr) whose file is
/// named for it, the same session again on the next start, `--fork … --session-id` naming the
/// copy (refused when the id is taken), `--no-session` keeping the id in memory; an invalid id
/// or one combined with `--continue` is an error (exit 1).
#[test]
fn session_id_creates_reopens_and_names_forks() {
    let fake = FakeProvider::start(vec![text_reply("First"), text_reply("Second")]);
    let workspace = Workspace::new();
    let base = Setup::anthropic(&fake).with_sessions();

    let mut pi = Pi::spawn_in(&workspace, &base.clone().arg("--session-id").arg("work-1"));
    assert_eq!(state(&mut pi, "s1")["sessionId"], "work-1");
    prompt(&mut pi, "p1", "Hello");
    let file = session_file(&mut pi, "s2");
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.ends_with("_work-1.jsonl"), "{name}");
    assert_eq!(read_jsonl(&file)[0]["id"], "work-1");
    let stderr = pi.stderr_raw();
    assert!(
        stderr.contains(
            "Warning: No project session found with id 'work-1'; creating a new session with that id."
        ),
        "{stderr}"
    );
    pi.close_and_wait();

    let mut pi = Pi::spawn_in(&workspace, &base.clone().arg("--session-id").arg("work-1"));
    assert_eq!(session_file(&mut pi, "s1"), file, "the same session again");
    // (pi 1.6.0 also lists its leading system message)
    let conversation = |pi: &mut Pi| {
        let all = messages(pi, "m1");
        all.iter().filter(|m| m["role"] != "system").count()
    };
    assert_eq!(conversation(&mut pi), 2);
    assert!(!pi.stderr_raw().contains("No project session"));
    pi.close_and_wait();

    let forked = base
        .clone()
        .arg("--fork")
        .arg("work-1")
        .arg("--session-id")
        .arg("copy-1");
    let mut pi = Pi::spawn_in(&workspace, &forked);
    assert_eq!(state(&mut pi, "s1")["sessionId"], "copy-1");
    assert_eq!(conversation(&mut pi), 2, "the fork holds the messages");
    prompt(&mut pi, "p1", "Again");
    pi.close_and_wait();

    let mut memory = Pi::spawn_in(
        &workspace,
        &Setup::anthropic(&fake).arg("--session-id").arg("mem.1"),
    );
    assert_eq!(state(&mut memory, "s1")["sessionId"], "mem.1");
    memory.close_and_wait();

    let refused: [(&[&str], &str); 3] = [
        (
            &["--fork", "work-1", "--session-id", "copy-1"],
            "Session already exists with id 'copy-1'",
        ),
        (
            &["--session-id", "-bad"],
            "Session id must be non-empty, contain only alphanumeric characters, '-', '_', and '.', and start and end with an alphanumeric character",
        ),
        (
            &["--session-id", "x", "--continue"],
            "--session-id cannot be combined with --continue",
        ),
    ];
    for (args, message) in refused {
        let mut setup = base.clone();
        for arg in args {
            setup = setup.arg(arg);
        }
        let mut pi = Pi::spawn_in(&workspace, &setup);
        let status = pi.wait_for_exit();
        assert_eq!(status.code(), Some(1), "{args:?}");
        assert!(
            pi.stderr_raw().contains(message),
            "{args:?}: {}",
            pi.stderr_raw()
        );
    }
    fake.finish();
}

/// pi 1.6.0's `context_edit` entries in a session file: the latest edit of a target (by
/// `targetId`) leaves it out of the model's context (`replacement: null`) or replaces its
/// content; the raw entries and the edits stay in the file. Reference: passes against 1.6.0.
#[test]
fn context_edits_in_a_session_file_shape_what_the_model_sees() {
    let fake = FakeProvider::start(vec![
        text_reply("one"),
        text_reply("two"),
        text_reply("three"),
        text_reply("four"),
    ]);
    let setup = Setup::anthropic(&fake).with_sessions();
    let workspace = Workspace::new();
    let mut pi = Pi::spawn_in(&workspace, &setup);
    for (n, text) in ["first", "second", "third"].iter().enumerate() {
        prompt(&mut pi, &format!("p{n}"), text);
    }
    let file = session_file(&mut pi, "s1");
    assert!(pi.close_and_wait().success());

    let entries = file_entries(&file);
    let id_of = |role: &str, text: &str| -> String {
        entries
            .iter()
            .find(|e| {
                e["message"]["role"] == role && summary(&[e["message"].clone()])[0].ends_with(text)
            })
            .unwrap_or_else(|| panic!("no {role} entry saying {text}"))["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let edits = [
        (id_of("user", "first"), Value::Null),
        (id_of("assistant", "one"), Value::Null),
        (
            id_of("user", "second"),
            json!({"content": "second, first try"}),
        ),
        (
            id_of("user", "second"),
            json!({"content": "second, edited"}),
        ),
        (
            id_of("assistant", "two"),
            json!({"content": [{"type": "text", "text": "two, edited"}]}),
        ),
    ];
    let mut parent = entries.last().unwrap()["id"].as_str().unwrap().to_string();
    let mut text = std::fs::read_to_string(&file).unwrap();
    for (n, (target, replacement)) in edits.iter().enumerate() {
        let id = format!("ce0000{n:02}");
        let line = json!({"type": "context_edit", "id": id, "parentId": parent,
            "timestamp": format!("2026-12-02T00:00:0{n}.000Z"), "targetId": target,
            "replacement": replacement});
        text.push_str(&format!("{line}\n"));
        parent = id;
    }
    std::fs::write(&file, text).unwrap();

    let mut pi = Pi::spawn_in(
        &workspace,
        &setup.clone().arg("--session").arg(&file.to_string_lossy()),
    );
    prompt(&mut pi, "p4", "fourth");
    let requests = fake.requests();
    assert_eq!(
        summary(requests[3].messages()),
        [
            "user:second, edited",
            "assistant:two, edited",
            "user:third",
            "assistant:three",
            "user:fourth"
        ]
    );
    assert!(pi.close_and_wait().success());
    let after = file_entries(&file);
    assert_eq!(
        after.iter().filter(|e| e["type"] == "context_edit").count(),
        5,
        "the edits stay in the file"
    );
    assert!(
        after.iter().any(|e| e["message"]["role"] == "user"
            && summary(&[e["message"].clone()])[0] == "user:first")
    );
    fake.finish();
}
