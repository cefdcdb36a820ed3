//! The words pi 1.6.0 reserves as the first argument (`install`, `remove`/`uninstall`, `update`,
//! `list`, `config`, `auth`) are commands, never a prompt: with a model and a key at hand they
//! make no model request, check their usage as 1.6.0 does (same stderr, same exit code) and,
//! where pi-rs does not have the command yet, say so and exit 1.

use serde_json::json;

use crate::fake_provider::FakeProvider;
use crate::support::{Setup, is_reference, run_words};

/// A setup whose default model is the fake's, so a prompt would reach it.
fn with_default_model(fake: &FakeProvider) -> Setup {
    Setup::anthropic(fake).settings(json!({
        "defaultProvider": "fake-anthropic",
        "defaultModel": "fake-claude"
    }))
}

/// Bad usage: pi 1.6.0's messages and exit codes, byte for byte (checked against pi 1.6.0 with
/// `PI_TEST_BIN`).
#[test]
fn reserved_words_answer_usage_errors_as_pi() {
    let install = "pi install <source> [-l] [--approve|--no-approve]";
    let update = "pi update [source|self|pi] [--self|--extensions|--models|--all] \
                  [--extension <source>] [--approve|--no-approve] [--force]";
    let config = "pi config [-l] [--approve|--no-approve]";
    let cases: Vec<(&[&str], String)> = vec![
        (
            &["install"],
            format!("Missing install source.\nUsage: {install}\n"),
        ),
        (
            &["install", "npm:a", "npm:b"],
            format!("Unexpected argument npm:b.\nUsage: {install}\n"),
        ),
        (
            &["install", "--frob", "npm:a"],
            format!("Unknown option --frob for \"install\".\nUse \"pi --help\" or \"{install}\".\n"),
        ),
        (
            &["uninstall"],
            "Missing remove source.\nUsage: pi remove <source> [-l] [--approve|--no-approve]\n"
                .to_string(),
        ),
        (
            &["list", "-l"],
            "Unknown option -l for \"list\".\nUse \"pi --help\" or \"pi list [--approve|--no-approve]\".\n"
                .to_string(),
        ),
        (
            &["update", "--all", "--self"],
            format!(
                "--all cannot be combined with --self, --extensions, --models, or --extension\n\
                 Usage: {update}\n"
            ),
        ),
        (
            &["update", "--extension"],
            format!("Missing value for --extension.\nUsage: {update}\n"),
        ),
        (
            &["config", "write a poem"],
            format!("Unexpected argument write a poem.\nUsage: {config}\n"),
        ),
        (
            &["auth", "explain"],
            "Error: Unknown auth command \"explain\". Use \"pi auth login\", \"pi auth logout\", \
             \"pi auth print-api-key\", \"pi auth print-bearer-token\", or \"pi auth check\".\n"
                .to_string(),
        ),
        (
            &["auth", "print-api-key", "--json"],
            "Error: --json is only supported by auth check\n".to_string(),
        ),
    ];
    let fake = FakeProvider::start(Vec::new());
    for (args, stderr) in cases {
        let run = run_words(&with_default_model(&fake), args, Some(b"and say hi"));
        assert_eq!(run.status.code(), Some(1), "{args:?}: {}", run.stderr);
        assert_eq!(run.stderr, stderr, "{args:?}");
        assert_eq!(run.stdout, "", "{args:?}");
    }
    assert_eq!(fake.requests().len(), 0, "no model request");
    fake.finish();
}

/// Right usage of the reserved words runs the command (packages, auth), never a session: no
/// model request, whatever the words after it say. Cases that need no network.
#[test]
fn reserved_words_with_right_usage_never_reach_the_model() {
    if is_reference() {
        // pi 1.6.0's `pi update` updates pi itself from the registry.
        return;
    }
    let fake = FakeProvider::start(Vec::new());
    let cases: [(&[&str], i32); 8] = [
        (&["install", "./no-such-package"], 1),
        (&["remove", "npm:foo"], 1),
        (&["uninstall", "npm:foo", "-l"], 1),
        (&["update"], 1),
        (&["list"], 0),
        (&["config"], 0),
        (&["auth", "check", "--provider", "fake-anthropic"], 0),
        (
            &["auth", "print-api-key", "--provider", "fake-anthropic"],
            0,
        ),
    ];
    for (args, code) in cases {
        let run = run_words(&with_default_model(&fake), args, Some(b"hello"));
        assert_eq!(
            run.status.code(),
            Some(code),
            "{args:?}: {}{}",
            run.stdout,
            run.stderr
        );
        assert!(
            !run.stdout.contains("message_end"),
            "{args:?}: {}",
            run.stdout
        );
    }
    let help = run_words(&with_default_model(&fake), &["install", "--help"], None);
    assert_eq!(help.status.code(), Some(0));
    assert!(
        help.stdout.starts_with("Usage:\n  pi install <source>"),
        "{}",
        help.stdout
    );
    let auth = run_words(&with_default_model(&fake), &["auth"], None);
    assert_eq!(auth.status.code(), Some(0));
    assert!(auth.stdout.contains("pi auth check"), "{}", auth.stdout);
    assert_eq!(fake.requests().len(), 0, "no model request");
    fake.finish();
}
