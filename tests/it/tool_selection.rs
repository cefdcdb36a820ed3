//! Tool selection as pi 1.6.0 makes it, seen in the tools the first request declares: `--tools`
//! plain names or `*` patterns replace the set, `+name` / `-name` adjust `defaultTools` (user,
//! then project settings), `--exclude-tools` / `-xt` applies last; a mixed list is an error; a
//! name matching no tool is ignored (pi-rs also warns once on stderr).

use serde_json::json;

use crate::fake_provider::FakeProvider;
use crate::support::{Setup, is_reference, run_cli, text_reply};

/// The tool names the one request of `pi -p hi <args>` declares, and the run's stderr.
fn declared(setup: impl Fn(&FakeProvider) -> Setup, args: &[&str]) -> (Vec<String>, String) {
    let fake = FakeProvider::start(vec![text_reply("ok")]);
    let mut words = args.to_vec();
    words.extend(["-p", "hi"]);
    let run = run_cli(&setup(&fake), &words, None);
    assert!(run.status.success(), "{args:?}: {}", run.stderr);
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "{args:?}");
    let names = requests[0].body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    fake.finish();
    (names, run.stderr)
}

/// Sorted, and only pi-rs's seven built-in tools (pi 1.6.0 also has codemode, powershell and
/// tool_search, which `*` picks up there).
fn sorted(mut names: Vec<String>) -> Vec<String> {
    const BUILTINS: [&str; 7] = ["read", "bash", "edit", "write", "grep", "find", "ls"];
    names.retain(|n| BUILTINS.contains(&n.as_str()));
    names.sort();
    names
}

#[test]
fn tools_flags_replace_adjust_and_exclude() {
    let plain = |fake: &FakeProvider| Setup::anthropic(fake);
    let cases: [(&[&str], &[&str]); 9] = [
        (&[], &["bash", "edit", "read", "write"]),
        (&["--tools", "grep,read"], &["grep", "read"]),
        (
            &["--tools", "+grep,-write"],
            &["bash", "edit", "grep", "read"],
        ),
        (&["-t", "-read,-bash,-edit,-write"], &[]),
        (
            &["--tools", "*"],
            &["bash", "edit", "find", "grep", "ls", "read", "write"],
        ),
        (&["--tools", "f*,l*"], &["find", "ls"]),
        (&["--exclude-tools", "bash,e*"], &["read", "write"]),
        (
            &["--tools", "*", "-xt", "read,write,bash,edit"],
            &["find", "grep", "ls"],
        ),
        (&["-nt", "--tools", "+grep"], &["grep"]),
    ];
    for (args, expected) in cases {
        let (names, _) = declared(plain, args);
        assert_eq!(sorted(names), expected, "{args:?}");
    }
}

/// `defaultTools`: plain names replace the default four, `+name` / `-name` adjust them; a
/// project list of modifiers adjusts the user's, a plain one replaces it; `--tools` modifiers
/// apply on top.
#[test]
fn default_tools_settings_user_then_project() {
    let layered = |fake: &FakeProvider| {
        Setup::anthropic(fake)
            .settings(json!({"defaultTools": ["+grep", "-write"]}))
            .file(".pi/settings.json", r#"{"defaultTools": ["-bash", "+ls"]}"#)
            .trust_project()
    };
    let (names, _) = declared(layered, &[]);
    assert_eq!(sorted(names), ["edit", "grep", "ls", "read"]);
    let (names, _) = declared(layered, &["--tools", "+find,-grep"]);
    assert_eq!(sorted(names), ["edit", "find", "ls", "read"]);
    let (names, _) = declared(layered, &["--tools", "write"]);
    assert_eq!(names, ["write"], "plain names replace the settings' set");

    let replaced = |fake: &FakeProvider| {
        Setup::anthropic(fake)
            .settings(json!({"defaultTools": ["+grep"]}))
            .file(".pi/settings.json", r#"{"defaultTools": ["find", "+ls"]}"#)
            .trust_project()
    };
    let (names, _) = declared(replaced, &[]);
    assert_eq!(sorted(names), ["find", "ls"]);
}

/// A list mixing names and modifiers, or a modifier with a pattern, is refused with pi's error
/// and exit 1, before any request.
#[test]
fn mixed_tool_lists_are_errors() {
    let cases = [
        (
            "read,+grep",
            "Error: --tools: tool names cannot be mixed with +name or -name entries",
        ),
        (
            "+gr*",
            "Error: --tools: +name and -name entries take exact tool names, not patterns: +gr*",
        ),
    ];
    for (list, message) in cases {
        let fake = FakeProvider::start(Vec::new());
        let run = run_cli(
            &Setup::anthropic(&fake),
            &["--tools", list, "-p", "hi"],
            None,
        );
        assert_eq!(run.status.code(), Some(1), "{list}: {}", run.stderr);
        assert!(run.stderr.contains(message), "{list}: {}", run.stderr);
        assert!(fake.requests().is_empty());
        fake.finish();
    }
}

/// A name matching no tool is ignored (the rest of the list stands); pi-rs says so once on
/// stderr.
#[test]
fn unknown_tool_names_are_ignored_with_one_warning() {
    let plain = |fake: &FakeProvider| Setup::anthropic(fake);
    let (names, stderr) = declared(plain, &["--tools", "read,nosuch", "-xt", "ghost"]);
    assert_eq!(names, ["read"]);
    if !is_reference() {
        let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("nosuch")).collect();
        assert_eq!(
            warnings,
            ["Warning: no tool is named nosuch, ghost; ignored"],
            "{stderr}"
        );
    }
    let (names, _) = declared(plain, &["--tools", "+nosuch,-write"]);
    assert_eq!(sorted(names), ["bash", "edit", "read"]);
}

/// A resumed session offers the tools its transcript declares (its system messages), not the
/// defaults; `+name` / `-name` adjust that set; an explicit list replaces it. pi 1.6.0 then
/// records no tool change for the unchanged set (no new system message).
#[test]
fn a_resumed_session_restores_the_transcripts_tools() {
    let fake = FakeProvider::start(vec![
        text_reply("one"),
        text_reply("two"),
        text_reply("three"),
        text_reply("four"),
    ]);
    let workspace = crate::support::Workspace::new();
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .arg("--tools")
        .arg("read,grep");
    let mut pi = crate::support::Pi::spawn_in(&workspace, &setup);
    crate::support::prompt(&mut pi, "p1", "first");
    let file = crate::support::session_file(&mut pi, "s1");
    pi.close_and_wait();

    let resume = |extra: &[&str]| {
        let mut setup = Setup::anthropic(&fake)
            .with_sessions()
            .arg("--session")
            .arg(&file.to_string_lossy());
        for arg in extra {
            setup = setup.arg(arg);
        }
        let mut pi = crate::support::Pi::spawn_in(&workspace, &setup);
        let run = crate::support::prompt(&mut pi, "p", "again");
        pi.close_and_wait();
        run.iter()
            .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "system")
            .map(|r| r["message"].clone())
            .collect::<Vec<_>>()
    };
    let names = |n: usize| -> Vec<String> {
        fake.requests()[n].body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(sorted(names(0)), ["grep", "read"]);

    // Resumed with the defaults: the transcript's tools, and nothing new to record.
    let systems = resume(&[]);
    assert_eq!(sorted(names(1)), ["grep", "read"]);
    assert!(systems.is_empty(), "{systems:?}");

    // `+bash,-grep` adjusts the restored set; the change is recorded.
    let systems = resume(&["--tools", "+bash,-grep"]);
    assert_eq!(sorted(names(2)), ["bash", "read"]);
    assert_eq!(systems.len(), 1, "{systems:?}");
    let added: Vec<&str> = systems[0]["toolsAdded"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(added, ["bash"]);
    assert_eq!(
        systems[0]["toolsRemoved"][0]["name"], "grep",
        "{}",
        systems[0]
    );

    // A plain list replaces it.
    resume(&["--tools", "ls"]);
    assert_eq!(sorted(names(3)), ["ls"]);
    fake.finish();
}
