//! Behaviour tests of `SessionLog`: lazy writing, failing appends, reopening, branching, views,
//! forks and scale.

use std::fs;

use serde_json::{Value, json};

use super::*;
use crate::messages::{AssistantMessage, ContentBlock, TextContent, UserMessage};
use crate::test_support::temp_dir;

fn user(text: &str) -> AgentMessage {
    let mut message = UserMessage::new(text, vec![]);
    message.timestamp = 1_767_323_045_678;
    AgentMessage::User(message)
}

fn assistant(text: &str) -> AgentMessage {
    let mut message = AssistantMessage::empty("openai-completions", "mock", "m1");
    message.content = vec![ContentBlock::Text(TextContent::new(text))];
    message.timestamp = 1_767_323_046_000;
    AgentMessage::Assistant(message)
}

/// Waits until the disk threads did everything queued so far.
fn settled() {
    assert!(crate::disk::flush(std::time::Duration::from_secs(10)));
}

/// The most recent write failure of `log`, once the disk threads are done.
fn write_error(log: &SessionLog) -> Option<String> {
    settled();
    lock_written(&log.disk.written).last_error.clone()
}

fn lines(path: &Path) -> Vec<Value> {
    settled();
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn texts(context: &SessionContext) -> Vec<String> {
    context
        .messages
        .iter()
        .map(|m| match m {
            AgentMessage::User(u) => format!("user:{}", u.content.text()),
            AgentMessage::Assistant(a) => format!("assistant:{}", a.text()),
            AgentMessage::CompactionSummary(c) => format!("compaction:{}", c.summary),
            AgentMessage::BranchSummary(b) => format!("branch:{}", b.summary),
            AgentMessage::Custom(c) => format!("custom:{}", c.content.text()),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn nothing_is_written_before_the_first_assistant_message() {
    let dir = temp_dir("lazy");
    let mut log = SessionLog::create(&dir, Path::new("/w")).unwrap();
    let path = log.file_path().unwrap().to_path_buf();
    assert!(
        path.file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with(&format!("_{}.jsonl", log.id()))
    );
    log.append_model_change("mock", "m1").unwrap();
    log.append_thinking_level_change(ThinkingLevel::Off)
        .unwrap();
    log.append_message(&user("hi")).unwrap();
    log.sync().unwrap();
    assert!(!path.exists(), "lazy: no file yet");
    log.append_message(&assistant("hello")).unwrap();
    let on_disk = lines(&path);
    assert_eq!(on_disk.len(), 5);
    assert_eq!(on_disk[0]["type"], "session");
    assert_eq!(on_disk[0]["version"], 3);
    assert_eq!(on_disk[0]["id"], log.id());
    assert_eq!(on_disk[0]["cwd"], "/w");
    assert_eq!(on_disk[1]["parentId"], Value::Null);
    assert_eq!(on_disk[2]["parentId"], on_disk[1]["id"]);
    log.append_message(&user("more")).unwrap();
    assert_eq!(lines(&path).len(), 6, "later entries go out one line each");
    let header_keys: Vec<&String> = on_disk[0].as_object().unwrap().keys().collect();
    assert_eq!(header_keys, ["type", "version", "id", "timestamp", "cwd"]);
    settled();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn in_memory_sessions_never_write() {
    let mut log = SessionLog::in_memory(Path::new("/w"));
    log.append_message(&user("hi")).unwrap();
    log.append_message(&assistant("yo")).unwrap();
    log.sync().unwrap();
    assert!(log.file_path().is_none());
    assert_eq!(log.id().len(), 36);
    assert_eq!(texts(&log.context()), ["user:hi", "assistant:yo"]);
}

#[test]
fn failed_append_keeps_entry_and_is_retried() {
    let dir = temp_dir("retry");
    let mut log = SessionLog::create(&dir, Path::new("/w")).unwrap();
    log.append_message(&user("hi")).unwrap();
    log.append_message(&assistant("hello")).unwrap();
    let path = log.file_path().unwrap().to_path_buf();
    settled();
    let before = fs::read(&path).unwrap();

    file::fail_next_append(&path, 17);
    log.append_message(&user("lost?")).unwrap();
    let error = write_error(&log).expect("the failure is recorded");
    assert!(error.contains("injected"), "{error}");
    assert_eq!(fs::read(&path).unwrap(), before, "nothing half-written");
    assert_eq!(texts(&log.context()).len(), 3, "entry kept in memory");

    log.sync().unwrap();
    let on_disk = lines(&path);
    assert_eq!(on_disk.len(), 4);
    assert_eq!(on_disk[3]["message"]["content"][0]["text"], "lost?");
    let (reopened, warnings) = SessionLog::open(&path, None, Path::new("/elsewhere")).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(texts(&reopened.context()), texts(&log.context()));
    settled();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn first_write_failure_is_reported_and_retried() {
    let dir = temp_dir("firstfail");
    // A regular file where the session directory should be: creation fails even for root.
    let blocker = dir.join("blocker");
    fs::write(&blocker, "x").unwrap();
    let (mut log, _) = SessionLog::open(&dir.join("s.jsonl"), None, Path::new("/w")).unwrap();
    log.file = Some(blocker.join("s.jsonl"));
    log.append_message(&user("hi")).unwrap();
    log.append_message(&assistant("a")).unwrap();
    log.sync().unwrap();
    assert!(write_error(&log).is_some_and(|e| e.contains("blocker")));
    fs::remove_file(&blocker).unwrap();
    log.sync().unwrap();
    assert_eq!(lines(&blocker.join("s.jsonl")).len(), 3);
    settled();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_deleted_file_is_rewritten_from_memory() {
    let dir = temp_dir("deleted");
    let mut log = SessionLog::create(&dir, Path::new("/w")).unwrap();
    log.append_message(&user("hi")).unwrap();
    log.append_message(&assistant("hello")).unwrap();
    let path = log.file_path().unwrap().to_path_buf();
    settled();
    fs::remove_file(&path).unwrap();
    log.append_message(&user("again")).unwrap();
    // The writer finds the file gone; the next append or sync writes it again from memory.
    settled();
    log.sync().unwrap();
    assert_eq!(lines(&path).len(), 4);
    settled();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn open_missing_empty_and_torn_files() {
    let dir = temp_dir("open");
    let path = dir.join("sub/explicit.jsonl");
    let (mut log, warnings) = SessionLog::open(&path, None, Path::new("/cwd")).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(log.file_path(), Some(path.as_path()));
    assert_eq!(log.cwd(), Path::new("/cwd"));
    log.append_message(&user("hi")).unwrap();
    log.append_message(&assistant("hello")).unwrap();
    let id = log.id().to_string();

    // Torn last line (a crash mid-write of some other program): dropped, file repaired.
    let mut content = {
        settled();
        fs::read_to_string(&path)
    }
    .unwrap();
    content.push_str(r#"{"type":"message","id":"#);
    fs::write(&path, &content).unwrap();
    let (mut log, warnings) = SessionLog::open(&path, None, Path::new("/other")).unwrap();
    assert_eq!(warnings.len(), 1);
    assert_eq!(log.id(), id);
    assert_eq!(log.cwd(), Path::new("/cwd"));
    assert_eq!(texts(&log.context()), ["user:hi", "assistant:hello"]);
    log.append_message(&user("next")).unwrap();
    assert_eq!(lines(&path).len(), 4, "appends after the repair are clean");

    // Our own torn first write: replaced by a fresh session.
    fs::write(&path, r#"{"type":"session","vers"#).unwrap();
    let (mut log, _) = SessionLog::open(&path, None, Path::new("/cwd")).unwrap();
    log.append_message(&assistant("x")).unwrap();
    assert_eq!(lines(&path).len(), 2);
    settled();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn branching_context_and_compaction() {
    let mut log = SessionLog::in_memory(Path::new("/w"));
    log.append_thinking_level_change(ThinkingLevel::High)
        .unwrap();
    let u1 = log.append_message(&user("one")).unwrap();
    log.append_message(&assistant("r1")).unwrap();
    let u2 = log.append_message(&user("two")).unwrap();
    let a2 = log.append_message(&assistant("r2")).unwrap();
    let context = log.context();
    assert_eq!(context.thinking_level, Some(ThinkingLevel::High));
    assert_eq!(context.model, Some(("mock".into(), "m1".into())));

    // Branch from the first answer: the second exchange leaves the context.
    log.set_leaf(&log.entries()[2].id.clone()).unwrap();
    log.append_message(&user("two-b")).unwrap();
    assert_eq!(
        texts(&log.context()),
        ["user:one", "assistant:r1", "user:two-b"]
    );
    assert!(log.set_leaf("nope").is_err());

    // Back on the first branch, compact keeping from u2.
    log.set_leaf(&a2).unwrap();
    log.append_compaction(crate::session::NewCompaction {
        summary: "summary",
        first_kept_entry_id: &u2,
        tokens_before: 1234,
        details: None,
        usage: None,
        from_hook: Some(false),
        system_message: None,
    })
    .unwrap();
    log.append_model_change("openai", "gpt").unwrap();
    log.append_message(&user("three")).unwrap();
    let context = log.context();
    assert_eq!(
        texts(&context),
        [
            "compaction:summary",
            "user:two",
            "assistant:r2",
            "user:three"
        ]
    );
    assert_eq!(context.model, Some(("openai".into(), "gpt".into())));

    // Branch summary and custom message are context; custom entries are not.
    let left = log.leaf_id().unwrap().to_string();
    log.branch_with_summary(Some(&u1), "went left", None, None, Some(false))
        .unwrap();
    log.append_custom("ext", Some(json!({"a": 1}))).unwrap();
    log.append_custom_message("ext", UserContent::Text("note".into()), true, None)
        .unwrap();
    assert_eq!(
        texts(&log.context()),
        ["user:one", "branch:went left", "custom:note"]
    );
    let summary = log
        .entry(log.entries()[log.entries().len() - 3].id.as_str())
        .unwrap()
        .to_value();
    assert_eq!(
        summary["fromId"],
        json!(left),
        "the leaf left behind (pi 1.6.0)"
    );
    assert_eq!(summary["parentId"], json!(u1));

    log.reset_leaf();
    assert!(log.context().messages.is_empty());
    assert_eq!(log.branch().len(), 0);
}

#[test]
fn entries_since_is_a_cursor_in_append_order() {
    let mut log = SessionLog::in_memory(Path::new("/w"));
    assert_eq!(log.entries_since(None).unwrap(), Vec::<Value>::new());
    let a = log.append_message(&user("a")).unwrap();
    let b = log.append_message(&assistant("b")).unwrap();
    log.set_leaf(&a).unwrap();
    let c = log.append_message(&user("c")).unwrap();
    let ids = |values: Vec<Value>| {
        values
            .iter()
            .map(|v| v["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(log.entries_since(None).unwrap()),
        [a.clone(), b.clone(), c.clone()]
    );
    assert_eq!(
        ids(log.entries_since(Some(&a)).unwrap()),
        [b.clone(), c.clone()],
        "other branches included"
    );
    assert!(log.entries_since(Some(&c)).unwrap().is_empty());
    assert_eq!(
        log.entries_since(Some("zzz")).unwrap_err().to_string(),
        "Entry zzz not found"
    );
    for since in [None, Some(a.as_str()), Some(c.as_str())] {
        let values = log.entries_since(since).unwrap();
        let json = log.entries_since_json(since).unwrap();
        assert_eq!(json, serde_json::to_string(&values).unwrap());
    }
    assert_eq!(
        log.entries_since_json(Some("zzz")).unwrap_err().to_string(),
        "Entry zzz not found"
    );
    assert_eq!(log.leaf_id(), Some(c.as_str()));
}

#[test]
fn tree_with_branches_labels_and_orphans() {
    let dir = temp_dir("tree");
    let path = dir.join("t.jsonl");
    let header = r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;
    let entry = |id: &str, parent: Option<&str>, second: u32| {
        json!({"type":"custom","customType":"t","id":id,"parentId":parent,"timestamp":format!("2026-01-01T00:00:{second:02}.000Z")}).to_string()
    };
    let content = [
        header.to_string(),
        entry("r", None, 1),
        entry("late", Some("r"), 9),
        entry("early", Some("r"), 2),
        entry("orphan", Some("missing"), 3),
        entry("selfie", Some("selfie"), 4),
        r#"{"type":"label","id":"l1","parentId":"early","timestamp":"2026-01-01T00:00:05.000Z","targetId":"r","label":"start"}"#.into(),
        r#"{"type":"label","id":"l2","parentId":"l1","timestamp":"2026-01-01T00:00:06.000Z","targetId":"late","label":"x"}"#.into(),
        r#"{"type":"label","id":"l3","parentId":"l2","timestamp":"2026-01-01T00:00:07.000Z","targetId":"late"}"#.into(),
    ]
    .join("\n")
        + "\n";
    fs::write(&path, content).unwrap();
    let (log, _) = SessionLog::open(&path, None, Path::new("/w")).unwrap();
    let tree = log.tree();
    let root_ids: Vec<&str> = tree
        .iter()
        .map(|n| n["entry"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(root_ids, ["r", "orphan", "selfie"]);
    let children: Vec<&str> = tree[0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["entry"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(children, ["early", "late"], "sorted by timestamp");
    assert_eq!(tree[0]["label"], "start");
    assert_eq!(tree[0]["labelTimestamp"], "2026-01-01T00:00:05.000Z");
    assert!(
        tree[0]["children"][1].get("label").is_none(),
        "cleared label"
    );
    assert_eq!(
        tree[0]["children"][0]["children"][0]["entry"]["id"], "l1",
        "label entries are nodes too"
    );
    let keys: Vec<&String> = tree[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["entry", "children", "label", "labelTimestamp"]);
    assert_eq!(log.tree_json(), serde_json::to_string(&tree).unwrap());
    assert_eq!(log.leaf_id(), Some("l3"));
    settled();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn session_name_is_latest_in_file_order() {
    let mut log = SessionLog::in_memory(Path::new("/w"));
    assert_eq!(log.name(), None);
    let first = log.append_session_info("  first  ").unwrap();
    assert_eq!(log.name().as_deref(), Some("first"));
    assert_eq!(log.entry(&first).unwrap().to_value()["name"], "first");
    log.append_session_info("second").unwrap();
    log.set_leaf(&first).unwrap();
    assert_eq!(log.name().as_deref(), Some("second"), "any branch counts");
    log.append_session_info("   ").unwrap();
    assert_eq!(log.name(), None, "empty clears");
}

#[test]
fn fork_and_clone_copy_the_path_with_ids_and_labels() {
    let dir = temp_dir("fork");
    let mut log = SessionLog::create(&dir, Path::new("/w")).unwrap();
    let u1 = log.append_message(&user("one")).unwrap();
    let a1 = log.append_message(&assistant("r1")).unwrap();
    let u2 = log.append_message(&user("two")).unwrap();
    log.append_message(&assistant("r2")).unwrap();
    log.append_label(&u1, Some("first")).unwrap();
    log.append_label(&u2, Some("second")).unwrap();
    assert_eq!(
        log.append_label("nope", Some("x")).unwrap_err().to_string(),
        "Entry nope not found"
    );
    let original_path = log.file_path().unwrap().to_path_buf();

    assert_eq!(
        log.fork_messages(),
        [
            ForkMessage {
                entry_id: u1.clone(),
                text: "one".into()
            },
            ForkMessage {
                entry_id: u2.clone(),
                text: "two".into()
            }
        ]
    );

    let (forked, text) = log.fork(&u2).unwrap();
    assert_eq!(text, "two");
    assert_ne!(forked.id(), log.id());
    assert_eq!(
        forked.parent_session(),
        Some(original_path.to_string_lossy().as_ref())
    );
    let ids: Vec<&str> = forked.entries().iter().map(|e| e.id.as_str()).collect();
    assert_eq!(&ids[..2], [u1.as_str(), a1.as_str()]);
    assert_eq!(
        ids.len(),
        3,
        "u1, a1 and one re-created label (u2 not on the path)"
    );
    assert_eq!(forked.label(&u1).unwrap().text, "first");
    assert_eq!(forked.leaf_id(), Some(ids[2]));
    assert_eq!(texts(&forked.context()), ["user:one", "assistant:r1"]);
    let fork_path = forked.file_path().unwrap();
    assert_eq!(fork_path.parent(), Some(dir.as_path()));
    assert_eq!(
        lines(fork_path).len(),
        4,
        "written at once: it holds an assistant message"
    );

    // Forking the first message: empty session pointing at the original.
    let (empty, text) = log.fork(&u1).unwrap();
    assert_eq!(text, "one");
    assert!(empty.entries().is_empty());
    assert!(empty.parent_session().is_some());
    assert!(!empty.file_path().unwrap().exists());
    assert_eq!(
        log.fork(&a1).unwrap_err().to_string(),
        "Invalid entry ID for forking"
    );
    assert_eq!(
        log.fork("zz").unwrap_err().to_string(),
        "Invalid entry ID for forking"
    );

    let clone = log.clone_at_leaf().unwrap();
    assert_eq!(texts(&clone.context()), texts(&log.context()));
    assert_eq!(clone.label(&u2).unwrap().text, "second");
    let labels: Vec<String> = clone
        .entries()
        .iter()
        .filter(|e| e.type_name() == "label")
        .map(|e| e.to_value()["targetId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        labels,
        [u1.clone(), u2.clone()],
        "labels re-created in the order first set"
    );
    assert_eq!(
        log.fork_at("zz").unwrap_err().to_string(),
        "Entry zz not found"
    );

    // In memory: no parentSession, no file.
    let mut memory = SessionLog::in_memory(Path::new("/w"));
    memory.append_message(&user("m")).unwrap();
    let cloned = memory.clone_at_leaf().unwrap();
    assert!(cloned.file_path().is_none() && cloned.parent_session().is_none());
    assert!(
        SessionLog::in_memory(Path::new("/w"))
            .clone_at_leaf()
            .is_err()
    );
    settled();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn reference_shaped_file_round_trips_byte_identically_through_a_rewrite() {
    let dir = temp_dir("roundtrip");
    let path = dir.join("r.jsonl");
    let header = r#"{"type":"session","version":3,"id":"019b7ca9-8f2e-7000-8000-000000000000","timestamp":"2026-01-02T03:04:05.678Z","cwd":"/w"}"#;
    let mut content = format!("{header}\n");
    for line in super::entry::tests::REFERENCE_LINES {
        content.push_str(line);
        content.push('\n');
    }
    fs::write(&path, &content).unwrap();
    let (log, warnings) = SessionLog::open(&path, None, Path::new("/w")).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(file::whole_file(log.header(), log.entries()), content);
    assert_eq!(log.name().as_deref(), Some("My work"));
    // Context: compaction keeps from c3d4e5f6, then branch summary and custom messages follow.
    let context = log.context();
    assert_eq!(context.thinking_level, Some(ThinkingLevel::High));
    assert_eq!(context.model, Some(("openai".into(), "gpt-4o".into())));
    let roles: Vec<String> = context
        .messages
        .iter()
        .map(|m| {
            serde_json::to_value(m).unwrap()["role"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        roles,
        [
            "compactionSummary",
            "toolResult",
            "bashExecution",
            "branchSummary",
            "custom",
            "custom"
        ]
    );
    settled();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn hundred_thousand_entries_load_and_build_the_tree() {
    let dir = temp_dir("scale");
    let mut log = SessionLog::create(&dir, Path::new("/w")).unwrap();
    log.append_message(&user("start")).unwrap();
    log.append_message(&assistant("ok")).unwrap();
    // Buffer the rest in memory, then write once (appending 100k lines one by one would test the
    // disk, not us).
    let path = log.file_path().unwrap().to_path_buf();
    log.file = None;
    for i in 0..99_998u32 {
        if i % 1000 == 999 {
            // A side branch every 1000 entries.
            let leaf = log.leaf_id().unwrap().to_string();
            let parent = log.entry(&leaf).unwrap().parent_id.clone().unwrap();
            log.set_leaf(&parent).unwrap();
        }
        log.append_custom("n", Some(json!(i))).unwrap();
    }
    log.file = Some(path.clone());
    log.write_whole_file(&path, true).unwrap();

    let (loaded, warnings) = SessionLog::open(&path, None, Path::new("/w")).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(loaded.entries().len(), 100_000);
    assert_eq!(loaded.context().messages.len(), 2);
    let tree = loaded.tree_json();
    assert!(tree.starts_with("[{\"entry\":"));
    let shape = tree::shape(&loaded.entries, &loaded.by_id);
    assert_eq!(shape.roots.len(), 1);
    assert_eq!(
        loaded
            .entries_since(Some(loaded.entries()[99_990].id.as_str()))
            .unwrap()
            .len(),
        9
    );
    assert!(loaded.branch().len() > 99_000);
    settled();
    fs::remove_dir_all(dir).unwrap();
}

/// Files written by the reference pi 0.73.1 (tests/session_fixtures/generate.py): a conversation
/// with a tool call, a name, a compaction, and a fork of it.
const REFERENCE_MAIN: &str = include_str!("../../fixtures/sessions/reference-main.jsonl");
const REFERENCE_FORK: &str = include_str!("../../fixtures/sessions/reference-fork.jsonl");

/// A file pi 1.6.0 wrote (`generate.py --v1.6.0`): its system messages and the compaction's
/// `systemMessage` are typed, the file re-serializes byte for byte, and the compacted context
/// starts with the replayed prompt state.
const REFERENCE_160_MAIN: &str = include_str!("../../fixtures/sessions/reference-1.6.0-main.jsonl");

#[test]
fn a_pi_1_6_0_session_keeps_its_system_messages() {
    let dir = temp_dir("fixtures-160");
    let path = dir.join("main.jsonl");
    fs::write(&path, REFERENCE_160_MAIN).unwrap();
    let (log, warnings) = SessionLog::open(&path, None, Path::new("/x")).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(
        file::whole_file(log.header(), log.entries()),
        REFERENCE_160_MAIN,
        "byte-identical re-serialization"
    );
    assert!(
        log.entries()
            .iter()
            .all(|e| !matches!(e.kind, entry::EntryKind::Unknown(_))),
        "every entry is typed"
    );
    let context = log.context();
    let AgentMessage::System(system) = &context.messages[0] else {
        panic!("{:?}", context.messages[0]);
    };
    let sections = system.sections.as_ref().expect("sections");
    assert!(sections.contains_key("preamble") && sections.contains_key("cwd"));
    assert_eq!(system.tools_added.as_ref().map(Vec::len), Some(4));
    assert!(matches!(
        context.messages[1],
        AgentMessage::CompactionSummary(_)
    ));
    assert_eq!(
        context
            .messages
            .iter()
            .filter(|m| matches!(m, AgentMessage::System(_)))
            .count(),
        1
    );
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn reference_written_sessions_load_with_the_same_context_tree_and_name() {
    let dir = temp_dir("fixtures");
    let main_path = dir.join("main.jsonl");
    fs::write(&main_path, REFERENCE_MAIN).unwrap();
    let (mut main, warnings) = SessionLog::open(&main_path, None, Path::new("/x")).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(
        {
            settled();
            fs::read_to_string(&main_path)
        }
        .unwrap(),
        REFERENCE_MAIN,
        "opening does not touch the file"
    );
    assert_eq!(
        file::whole_file(main.header(), main.entries()),
        REFERENCE_MAIN,
        "byte-identical re-serialization"
    );
    assert_eq!(main.name().as_deref(), Some("Fixture session"));
    assert_eq!(main.leaf_id(), Some("32ac918c"));
    let context = main.context();
    assert_eq!(
        texts(&context),
        [
            "compaction:\n\n---\n\n**Turn Context (split turn):**\n\n## Goal\nFixture summary of the earlier conversation.",
            "assistant:echo: third question",
            "user:after compaction",
            "assistant:echo: after compaction"
        ]
    );
    assert_eq!(context.thinking_level, Some(ThinkingLevel::Off));
    assert_eq!(context.model, Some(("mock".into(), "mock-1".into())));
    let tree = main.tree();
    assert_eq!(tree.len(), 1);
    assert_eq!(tree[0]["entry"]["type"], "model_change");
    assert_eq!(main.tree_json(), serde_json::to_string(&tree).unwrap());
    assert_eq!(
        main.tree_json_between("{\"tree\":", "}"),
        format!("{{\"tree\":{}}}", main.tree_json())
    );
    assert_eq!(
        main.entries_since_json(None).unwrap(),
        serde_json::to_string(&main.entries_since(None).unwrap()).unwrap()
    );
    let forkable: Vec<String> = main.fork_messages().into_iter().map(|m| m.text).collect();
    assert_eq!(
        forkable,
        [
            "hello there",
            "please use a tool",
            "third question",
            "after compaction"
        ]
    );

    // What the reference's fork produced, we produce too (modulo new ids and times).
    let (ours, text) = main.fork("c223dc0d").unwrap();
    assert_eq!(text, "please use a tool");
    let fork_path = dir.join("fork.jsonl");
    fs::write(&fork_path, REFERENCE_FORK).unwrap();
    let (theirs, _) = SessionLog::open(&fork_path, None, Path::new("/x")).unwrap();
    assert!(
        theirs
            .parent_session()
            .unwrap()
            .ends_with("_01a227d7-0998-7348-9937-69658d923f8e.jsonl")
    );
    let copied: Vec<Value> = theirs.entries()[..4]
        .iter()
        .map(SessionEntry::to_value)
        .collect();
    assert_eq!(ours.entries_since(None).unwrap(), copied);
    assert_eq!(
        texts(&theirs.context()),
        [
            "user:hello there",
            "assistant:echo: hello there",
            "user:forked question",
            "assistant:echo: forked question"
        ]
    );

    // Appending to a reference file keeps it a valid reference file.
    main.append_message(&user("from pi-rs")).unwrap();
    let reread = {
        settled();
        fs::read_to_string(&main_path)
    }
    .unwrap();
    assert!(reread.starts_with(REFERENCE_MAIN));
    let last: Value = serde_json::from_str(reread.lines().last().unwrap()).unwrap();
    assert_eq!(last["parentId"], "32ac918c");
    settled();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn lines_the_typed_form_does_not_reproduce_survive_load_rewrite_and_the_wire() {
    let dir = temp_dir("odd-lines");
    let path = dir.join("odd.jsonl");
    let header = r#"{"type":"session","version":3,"id":"019b7ca9-8f2e-7000-8000-000000000000","timestamp":"2026-01-02T03:04:05.678Z","cwd":"/w"}"#;
    let mut content = format!("{header}\n");
    let extra = [
        // Escapes and number spellings serde_json would write differently, and spacing.
        r#"{"type":"custom","customType":"c","data":{"s":"caf\u00e9 \/ x","n":1e5,"f":1.50},"id":"0000aab2","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z"}"#,
        r#"{"type": "session_info", "id": "0000aab3", "parentId": "0000aab2", "timestamp": "2026-01-01T00:00:01.000Z", "name": "spaced"}"#,
    ];
    let lines = super::entry::tests::REFERENCE_LINES
        .iter()
        .chain(super::entry::tests::UNUSUAL_LINES)
        .chain(&extra);
    for line in lines {
        content.push_str(line);
        content.push('\n');
    }
    fs::write(&path, &content).unwrap();
    let (log, warnings) = SessionLog::open(&path, None, Path::new("/w")).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        {
            settled();
            fs::read_to_string(&path)
        }
        .unwrap(),
        content,
        "not rewritten"
    );
    assert_eq!(file::whole_file(log.header(), log.entries()), content);
    assert_eq!(log.name().as_deref(), Some("spaced"));
    let tree = log.tree();
    assert_eq!(log.tree_json(), serde_json::to_string(&tree).unwrap());
    let entries = log.entries_since(None).unwrap();
    assert_eq!(
        log.entries_since_json(None).unwrap(),
        serde_json::to_string(&entries).unwrap()
    );
    assert_eq!(entries[entries.len() - 2]["data"]["s"], "café / x");
    // A CRLF copy of the file reads the same; its lines lose only the CR.
    fs::write(&path, content.replace('\n', "\r\n")).unwrap();
    let (crlf, warnings) = SessionLog::open(&path, None, Path::new("/w")).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(crlf.entries(), log.entries());
    settled();
    fs::remove_dir_all(dir).unwrap();
}

/// Secrets given to the log never reach its file (first whole-file write, later appends, forks);
/// memory keeps the real text.
#[test]
fn secrets_are_redacted_in_the_file_but_not_in_memory() {
    const SECRET: &str = "sk-test-SECRET123";
    let dir = temp_dir("redact");
    let mut log = SessionLog::create(&dir, Path::new("/w")).unwrap();
    log.set_redactions(vec![SECRET.to_string()]);
    let path = log.file_path().unwrap().to_path_buf();
    log.append_message(&user(&format!("my key is {SECRET}")))
        .unwrap();
    log.append_message(&assistant(&format!("{SECRET}!")))
        .unwrap();
    log.append_message(&user(&format!("again {SECRET}")))
        .unwrap();
    let text = {
        settled();
        fs::read_to_string(&path)
    }
    .unwrap();
    assert!(!text.contains(SECRET), "{text}");
    let on_disk = lines(&path);
    assert_eq!(
        on_disk[1]["message"]["content"][0]["text"],
        "my key is [redacted]"
    );
    assert_eq!(
        on_disk[3]["message"]["content"][0]["text"],
        "again [redacted]"
    );
    assert_eq!(
        texts(&log.context())[0],
        format!("user:my key is {SECRET}"),
        "memory keeps the original"
    );
    let fork = log.clone_at_leaf().unwrap();
    let forked = {
        settled();
        fs::read_to_string(fork.file_path().unwrap())
    }
    .unwrap();
    assert!(!forked.contains(SECRET) && forked.contains("[redacted]"));
    settled();
    fs::remove_dir_all(dir).unwrap();
}
