//! Print (`-p`) and JSON (`--mode json`) modes (FACTS.md §14): one-shot runs that print the
//! final text or the event stream, with piped stdin and `@file` arguments joined into the first
//! message.
//!
//! Reference: the JSON-mode event assertions that rely on seed-only events (`agent_settled`) are
//! not made; these tests should pass against 0.73.1.

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::sse;
use crate::support::{Setup, TempDir, message_text, run_cli};

/// `pi -p "msg"` prints the reply's text and a newline, and exits 0.
#[test]
fn print_mode_prints_the_final_text() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&[
        "Printed ", "answer.",
    ]))]);
    let run = run_cli(&Setup::anthropic(&fake), &["-p", "Say it"], None);
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout, "Printed answer.\n");
    let request = &fake.requests()[0];
    assert_eq!(
        message_text(request.messages().last().expect("message")),
        "Say it"
    );
    fake.finish();
}

/// A provider error: nothing useful on stdout, the error on stderr, exit 1.
#[test]
fn print_mode_provider_error_exits_one_with_the_error_on_stderr() {
    let body = fixture("anthropic/error_400.json");
    let fake = FakeProvider::start(vec![Reply::status(400, body.clone(), &[])]);
    let run = run_cli(&Setup::anthropic(&fake), &["-p", "Fail please"], None);
    assert_eq!(run.status.code(), Some(1), "stdout: {}", run.stdout);
    assert!(
        run.stderr.contains(&format!("400 {body}")),
        "stderr: {}",
        run.stderr
    );
    assert!(
        !run.stdout.contains("400"),
        "the error goes to stderr only: {}",
        run.stdout
    );
    fake.finish();
}

/// `--mode json`: the session header first, then the session events as JSON lines (no
/// responses).
#[test]
fn json_mode_writes_the_header_then_events() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Json answer."]))]);
    let run = run_cli(&Setup::anthropic(&fake), &["--mode", "json", "Hello"], None);
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let records = run.stdout_records();
    let header = &records[0];
    assert_eq!(header["type"], "session", "{header}");
    assert!(
        header["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{header}"
    );
    assert_eq!(
        header["cwd"].as_str(),
        Some(run.cwd().to_string_lossy().as_ref()),
        "{header}"
    );
    let types: Vec<&str> = records[1..]
        .iter()
        .map(|r| r["type"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(types.first(), Some(&"agent_start"), "{types:?}");
    assert!(types.contains(&"agent_end"), "{types:?}");
    assert!(!types.contains(&"response"), "{types:?}");
    let end = records
        .iter()
        .find(|r| r["type"] == "agent_end")
        .expect("agent_end");
    // The run opens with the system message (pi 1.6.0), then the prompt and the answer.
    assert_eq!(end["messages"][0]["role"], "system");
    assert_eq!(end["messages"][2]["content"][0]["text"], "Json answer.");
    fake.finish();
}

/// Piped stdin, then `@file` contents, then the CLI message form the first message.
#[test]
fn piped_stdin_and_file_argument_join_the_first_message() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Got it."]))]);
    let setup = Setup::anthropic(&fake).file("notes.txt", "file body line");
    let run = run_cli(
        &setup,
        &["-p", "@notes.txt", "and the question"],
        Some(b"piped text\n"),
    );
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout, "Got it.\n");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let text = message_text(requests[0].messages().last().expect("message"));
    let stdin_at = text.find("piped text").expect("stdin text");
    let file_at = text.find("file body line").expect("file text");
    let question_at = text.find("and the question").expect("the message");
    assert!(
        stdin_at < file_at && file_at < question_at,
        "order: stdin, file, message: {text:?}"
    );
    assert!(text.contains("notes.txt"), "the file is named: {text:?}");
    fake.finish();
}

/// An `@file` image is sniffed by its bytes as the read tool sniffs (pi uses one detector for
/// both) and sent as an image block; the text names the file.
#[test]
fn file_argument_image_is_sent_as_an_image_block() {
    use base64::Engine;
    // A 1x1 PNG.
    const PNG: &[u8] = &[
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F,
        0x15, 0xC4, 0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00,
        0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49,
        0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
    ];
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["A pixel."]))]);
    let dir = TempDir::new("print-image");
    let image = dir.path().join("pixel.png");
    std::fs::write(&image, PNG).expect("write the image");
    let setup = Setup::anthropic(&fake);
    let argument = format!("@{}", image.display());
    let run = run_cli(&setup, &["-p", &argument, "what is it?"], None);
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let requests = fake.requests();
    let message = requests[0].messages().last().expect("message").clone();
    let blocks = message["content"].as_array().expect("content blocks");
    let image_block = blocks
        .iter()
        .find(|b| b["type"] == "image")
        .unwrap_or_else(|| panic!("no image block: {message}"));
    assert_eq!(image_block["source"]["media_type"], "image/png");
    assert_eq!(
        image_block["source"]["data"],
        base64::engine::general_purpose::STANDARD.encode(PNG)
    );
    assert!(message_text(&message).contains("pixel.png"), "{message}");
    fake.finish();
}

/// `pi --version` prints the pi version whose protocol pi-rs implements, bare and on stdout, as
/// pi 1.6.0 does (0.73.1 printed it on stderr): version-gating clients read it. pi-rs's own
/// version is on `--version --verbose`'s second line and in `--help`.
#[test]
fn version_is_the_implemented_pi_version_bare_on_stdout() {
    let fake = FakeProvider::start(vec![]);
    let setup = Setup::anthropic(&fake);
    let run = run_cli(&setup, &["--version"], None);
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout, "1.6.0\n");
    assert_eq!(run.stderr, "");
    if crate::support::is_reference() {
        return;
    }
    let verbose = run_cli(&setup, &["--version", "--verbose"], None);
    let lines: Vec<&str> = verbose.stdout.lines().collect();
    assert_eq!(lines[0], "1.6.0", "{}", verbose.stdout);
    assert!(
        lines[1].starts_with(&format!("pi-rs {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        verbose.stdout
    );
    let help = run_cli(&setup, &["--help"], None);
    assert!(
        help.stdout
            .starts_with(&format!("pi-rs {} ", env!("CARGO_PKG_VERSION"))),
        "{}",
        help.stdout
    );
    fake.finish();
}

/// `--mode json` speaks the chosen profile too: legacy updates carry the message so far, and the
/// run still ends although legacy has no `agent_settled` to wait for.
#[test]
fn json_mode_in_the_legacy_profile_ends_and_carries_cumulative_updates() {
    let fake = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&["Old", " style."]))]);
    let setup = Setup::anthropic(&fake).env("PI_RPC_PROFILE", "legacy");
    let run = run_cli(&setup, &["--mode", "json", "Hello"], None);
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let records = run.stdout_records();
    let last_update = records
        .iter()
        .rfind(|r| r["type"] == "message_update")
        .expect("message_update");
    assert_eq!(last_update["message"]["content"][0]["text"], "Old style.");
    assert!(records.iter().all(|r| r["type"] != "agent_settled"));
    assert_eq!(records.last().unwrap()["type"], "agent_end");
    fake.finish();
}
