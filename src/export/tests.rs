//! Tests of the HTML export: a branched sample session (the reference-written fixtures plus crafted
//! entries of every kind), checked for self-containment, escaping, data completeness, file
//! writing, and — when `chromium` is installed — that the page actually renders.

use super::*;
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MAIN_FIXTURE: &str = include_str!("../../fixtures/sessions/reference-main.jsonl");
const FORK_FIXTURE: &str = include_str!("../../fixtures/sessions/reference-fork.jsonl");
const XSS: &str = "look: </script><script>alert(1)</script> <!-- & \u{2028} done";

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("pi-rs-export-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn entry(kind: &str, id: &str, parent: &str, ts: &str, mut fields: Value) -> Value {
    let mut map = Map::new();
    map.insert("type".into(), json!(kind));
    map.insert("id".into(), json!(id));
    map.insert("parentId".into(), json!(parent));
    map.insert(
        "timestamp".into(),
        json!(format!("2026-11-29T15:{ts}.000Z")),
    );
    if let Some(extra) = fields.as_object_mut() {
        map.append(extra);
    }
    Value::Object(map)
}

fn message(id: &str, parent: &str, ts: &str, message: Value) -> Value {
    entry("message", id, parent, ts, json!({ "message": message }))
}

fn assistant(content: Value, stop: &str) -> Value {
    json!({
        "role": "assistant", "content": content, "api": "anthropic-messages",
        "provider": "anthropic", "model": "claude-sonnet-4-5",
        "usage": {"input": 2410, "output": 312, "cacheRead": 1800, "cacheWrite": 0, "totalTokens": 4522,
                  "cost": {"input": 0.0072, "output": 0.0047, "cacheRead": 0.0005, "cacheWrite": 0, "total": 0.0124}},
        "stopReason": stop, "timestamp": 1795964800000_i64
    })
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1795964800000_i64})
}

fn tool_result(call: &str, name: &str, text: &str, is_error: bool, details: Value) -> Value {
    json!({"role": "toolResult", "toolCallId": call, "toolName": name,
           "content": [{"type": "text", "text": text}], "details": details,
           "isError": is_error, "timestamp": 1795964800000_i64})
}

/// The reference's main session and its fork merged into one tree (they share their first
/// entries, so this branches at `48a5d170`), continued by crafted entries of every kind: the
/// active branch runs to `c0ffee13`, a second crafted branch (with a branch summary) hangs off
/// `c0ffee05`.
fn sample_input() -> ExportInput {
    let mut lines = MAIN_FIXTURE.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let mut entries: Vec<Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    for line in FORK_FIXTURE.lines().skip(1) {
        let value: Value = serde_json::from_str(line).unwrap();
        if !entries.iter().any(|e| e["id"] == value["id"]) {
            entries.push(value);
        }
    }

    let markdown = "## Plan\n\nThe bug is in `parse_args`: it **drops** the last flag when *no* value follows.\n\n\
        1. Reproduce with `pi --model`\n2. Fix the loop\n   - keep `i < len`\n   - add a test\n3. Run `cargo test`\n\n\
        ```rust\nfn parse_args(args: &[String]) -> Vec<Flag> {\n    let mut i = 0;\n    while i < args.len() {\n        i += 1;\n    }\n    Vec::new()\n}\n```\n\n\
        > Note: flags after `--` are positional.\n\n\
        | flag | kind |\n|------|:----:|\n| `--model` | value |\n| `--print` | switch |\n\n\
        See [the docs](https://example.com/docs) or <https://example.org>. ~~Old idea~~ dropped.\n\n\
        Edge cases: snake_case_name stays, 2 * 3 * 4 = 24, <b>not bold</b>, [bad](javascript:alert(1)), \
        ![pic](https://example.com/x.png), **unclosed";

    let crafted = vec![
        message(
            "c0ffee01",
            "32ac918c",
            "06:00",
            user("Why does `pi --model` crash? Fix it please."),
        ),
        message(
            "c0ffee02",
            "c0ffee01",
            "06:05",
            assistant(
                json!([
                    {"type": "thinking", "thinking": "The user wants a fix. Let me **run** the tests first, then look at `cli.rs`."},
                    {"type": "text", "text": "Let me look at the failing test first."},
                    {"type": "toolCall", "id": "toolu_01", "name": "bash", "arguments": {"command": "cargo test cli::tests 2>&1 | tail -5", "timeout": 60}},
                    {"type": "toolCall", "id": "toolu_02", "name": "edit", "arguments": {"path": "/tmp/tmpj4cp4ao1/work/src/cli.rs", "edits": [{"oldText": "while i + 1 < len {", "newText": "while i < len {"}]}}
                ]),
                "toolUse",
            ),
        ),
        message(
            "c0ffee03",
            "c0ffee02",
            "06:09",
            tool_result(
                "toolu_01",
                "bash",
                "running 3 tests\ntest cli::tests::model_flag ... FAILED\n\nfailures:\n    cli::tests::model_flag\n\ntest result: FAILED. 2 passed; 1 failed",
                false,
                json!({}),
            ),
        ),
        message(
            "c0ffee04",
            "c0ffee03",
            "06:10",
            tool_result(
                "toolu_02",
                "edit",
                "Successfully replaced 1 block(s) in src/cli.rs.",
                false,
                json!({"diff": "  40     let len = args.len();\n- 41     while i + 1 < len {\n+ 41     while i < len {\n  42         match args[i].as_str() {", "firstChangedLine": 41}),
            ),
        ),
        message(
            "c0ffee05",
            "c0ffee04",
            "06:20",
            assistant(json!([{"type": "text", "text": markdown}]), "stop"),
        ),
        message(
            "c0ffee06",
            "c0ffee05",
            "06:30",
            json!({"role": "bashExecution", "command": "git diff --stat", "output": " src/cli.rs | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)", "exitCode": 0, "cancelled": false, "truncated": false, "timestamp": 1795964830000_i64}),
        ),
        entry(
            "label",
            "c0ffee07",
            "c0ffee06",
            "06:31",
            json!({"targetId": "c0ffee05", "label": "the fix"}),
        ),
        entry(
            "custom_message",
            "c0ffee08",
            "c0ffee07",
            "06:32",
            json!({"customType": "reminder", "content": "Remember to update the *changelog*.", "display": true}),
        ),
        entry(
            "model_change",
            "c0ffee09",
            "c0ffee08",
            "06:33",
            json!({"provider": "openai", "modelId": "gpt-5"}),
        ),
        entry(
            "thinking_level_change",
            "c0ffee10",
            "c0ffee09",
            "06:34",
            json!({"thinkingLevel": "high"}),
        ),
        message("c0ffee11", "c0ffee10", "06:40", user(XSS)),
        entry(
            "custom",
            "c0ffee12",
            "c0ffee11",
            "06:41",
            json!({"customType": "todo-state", "data": {"open": 2}}),
        ),
        message("c0ffee13", "c0ffee12", "06:45", {
            let mut m = assistant(json!([]), "error");
            m["errorMessage"] =
                json!("429 rate_limit_error: Number of requests has exceeded your rate limit");
            m
        }),
        // A second crafted branch, left earlier with a summary.
        entry(
            "branch_summary",
            "beef0001",
            "c0ffee05",
            "07:00",
            json!({"fromId": "c0ffee13", "summary": "Tried to **retry** after the rate limit; gave up.", "fromHook": false}),
        ),
        message(
            "beef0002",
            "beef0001",
            "07:01",
            user("Read the config file instead."),
        ),
        message(
            "beef0003",
            "beef0002",
            "07:02",
            assistant(
                json!([
                    {"type": "toolCall", "id": "toolu_03", "name": "read", "arguments": {"path": "missing.toml", "offset": 10, "limit": 20}}
                ]),
                "toolUse",
            ),
        ),
        message(
            "beef0004",
            "beef0003",
            "07:03",
            tool_result(
                "toolu_03",
                "read",
                "ENOENT: no such file or directory, access '/tmp/tmpj4cp4ao1/work/missing.toml'",
                true,
                json!(null),
            ),
        ),
    ];
    entries.extend(crafted);

    let tools = vec![
        (
            "read".to_string(),
            "Read a file's contents. Text output is cut to 2000 lines or 50KB.".to_string(),
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Path to the file (relative or absolute)"},
                "offset": {"type": "number", "description": "Line to start from (1-indexed)"},
                "limit": {"type": "number", "description": "How many lines to read"}},
                "required": ["path"]}),
        ),
        (
            "bash".to_string(),
            "Run a shell command in the working directory.".to_string(),
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The command"},
                "timeout": {"type": "number", "description": "Seconds before it is killed"}},
                "required": ["command"]}),
        ),
        (
            "edit".to_string(),
            "Replace exact text in a file.".to_string(),
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "edits": {"type": "array", "items": {"type": "object"}, "description": "Replacements"}},
                "required": ["path", "edits"]}),
        ),
    ];

    ExportInput {
        header,
        entries,
        leaf_id: Some("c0ffee13".to_string()),
        system_prompt: "You are an expert coding assistant.\n\nAvailable tools:\n- read\n- bash\n- edit\n\n<tags> & such stay text."
            .to_string(),
        tools,
        redactions: Default::default(),
    }
}

/// The text inside `<script id="session-data" …>…</script>` and the page without it.
fn split_data_block(html: &str) -> (String, String) {
    let open = r#"<script id="session-data" type="application/json">"#;
    let start = html.find(open).expect("data block") + open.len();
    let len = html[start..].find("</script>").expect("data block end");
    let data = html[start..start + len].to_string();
    let rest = format!("{}{}", &html[..start], &html[start + len..]);
    (data, rest)
}

#[test]
fn page_loads_nothing_from_the_network() {
    let html = render_html(&sample_input());
    let (_, page) = split_data_block(&html);
    let lower = page.to_ascii_lowercase();
    for needle in [
        "http://", "https://", "//cdn", "@import", "url(", "<link", "src=", "<iframe", "<object",
        "<embed",
    ] {
        assert!(!lower.contains(needle), "page template contains {needle:?}");
    }
    assert_eq!(
        lower.matches("<script").count(),
        2,
        "only the data block and the inline script"
    );
    assert_eq!(lower.matches("<style").count(), 1);
}

#[test]
fn session_text_cannot_break_out_of_the_data_block() {
    let input = sample_input();
    let html = render_html(&input);
    assert!(!html.contains("<script>alert(1)"));
    assert_eq!(html.matches("</script>").count(), 2);
    let (data, _) = split_data_block(&html);
    for bad in ['<', '>', '&', '\u{2028}', '\u{2029}'] {
        assert!(!data.contains(bad), "data block holds a raw {bad:?}");
    }
    // The escapes are plain JSON: parsing gives back the original text.
    let parsed: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(parsed["entries"], Value::Array(input.entries.clone()));
    assert!(data.contains("\\u003c/script\\u003e\\u003cscript\\u003ealert(1)"));
}

#[test]
fn data_blob_holds_every_branch_in_reference_shape() {
    let input = sample_input();
    let (data, _) = split_data_block(&render_html(&input));
    let parsed: Value = serde_json::from_str(&data).unwrap();
    let keys: Vec<&str> = parsed
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(
        keys,
        ["header", "entries", "leafId", "systemPrompt", "tools"]
    );
    let ids: Vec<&str> = parsed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    // One entry from each of the four branches: reference main, reference fork, active, side.
    for id in ["32ac918c", "7bd5a348", "c0ffee13", "beef0004"] {
        assert!(ids.contains(&id), "missing {id}");
    }
    assert_eq!(ids.len(), input.entries.len());
    assert_eq!(parsed["leafId"], "c0ffee13");
    assert_eq!(parsed["header"], input.header);
    assert_eq!(parsed["systemPrompt"], input.system_prompt.as_str());
    let tool_keys: Vec<&str> = parsed["tools"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(tool_keys, ["name", "description", "parameters"]);
    assert_eq!(parsed["tools"][1]["name"], "bash");

    let empty = ExportInput::default();
    let (data, _) = split_data_block(&render_html(&empty));
    let parsed: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(parsed["leafId"], Value::Null);
    assert_eq!(parsed["entries"], json!([]));
}

#[test]
fn placeholders_inside_session_text_stay_literal() {
    let input = ExportInput {
        system_prompt: "{{SCRIPT}} and {{STYLE}} {{".to_string(),
        ..ExportInput::default()
    };
    let html = render_html(&input);
    let (data, _) = split_data_block(&html);
    assert!(data.contains("{{SCRIPT}} and {{STYLE}} {{"));
    assert_eq!(html.matches("'use strict'").count(), 1);
}

#[test]
fn template_assets_cannot_close_their_own_tags() {
    let css = TEMPLATE_CSS.to_ascii_lowercase();
    let js = TEMPLATE_JS.to_ascii_lowercase();
    assert!(!css.contains("</style"));
    assert!(!js.contains("</script") && !js.contains("<!--"));
    assert!(
        !js.contains("innerhtml")
            && !js.contains("outerhtml")
            && !js.contains("insertadjacenthtml")
    );
    assert!(!js.contains("document.write") && !js.contains("eval("));
}

#[test]
fn default_output_name_follows_node_basename() {
    let name = |p: &str| default_output_name(Path::new(p));
    assert_eq!(
        name("/s/2026-11-29T15-05-33-849Z_01a2.jsonl"),
        "pi-session-2026-11-29T15-05-33-849Z_01a2.html"
    );
    assert_eq!(name("rel/x.jsonl"), "pi-session-x.html");
    assert_eq!(name("x.JSONL"), "pi-session-x.JSONL.html");
    assert_eq!(name("x.jsonl.jsonl"), "pi-session-x.jsonl.html");
    assert_eq!(name("/s/.jsonl"), "pi-session-.jsonl.html");
    assert_eq!(name("/s/notes.txt"), "pi-session-notes.txt.html");
}

#[test]
fn export_writes_the_page_and_replaces_an_old_one() {
    let dir = TempDir::new("write");
    let input = sample_input();
    let target = dir.0.join("out.html");
    fs::write(&target, "old").unwrap();
    let path = export_to_file(&input, &target).unwrap();
    assert_eq!(path, target);
    assert_eq!(fs::read_to_string(&target).unwrap(), render_html(&input));
    let names: Vec<_> = fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["out.html"], "no temp file left behind");

    let missing = dir.0.join("no-such-dir").join("out.html");
    let err = export_to_file(&input, &missing).unwrap_err().to_string();
    assert!(err.starts_with("Failed to write "), "{err}");
    assert!(err.contains("no-such-dir"), "{err}");

    let err = export_to_file(&input, &dir.0).unwrap_err().to_string();
    assert!(err.starts_with("Failed to write "), "{err}");
    let names: Vec<_> = fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        ["out.html"],
        "no temp file left behind after a failure"
    );
}

/// Loads `page` in headless chromium and returns the DOM after the scripts ran, or None (with the
/// reason printed) when chromium is not installed. Under `CI=true` a missing chromium is a failure:
/// `.ci/run` installs it (`tests/install_chromium.sh`), so a skip there would hide a test that never
/// ran. Bounded: the browser is killed after 90 s.
fn chromium_dump_dom(page: &Path) -> Option<String> {
    let Some(chromium) = ["chromium", "chromium-browser"]
        .into_iter()
        .find_map(crate::child::find_on_path)
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "chromium is not on PATH under CI=true: tests/install_chromium.sh should have installed it"
        );
        eprintln!("chromium is not on PATH; skipping the headless rendering check");
        return None;
    };
    let profile = TempDir::new("chromium-profile");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.0.display()))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        out
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(reader.join().unwrap())
}

#[test]
fn page_renders_in_headless_chromium() {
    let dir = TempDir::new("chromium");
    let page = dir.0.join("session.html");
    export_to_file(&sample_input(), &page).unwrap();
    let Some(dom) = chromium_dump_dom(&page) else {
        return;
    };
    // The scripts are part of the dump; only the body before them is what the viewer drew.
    let dom = &dom[..dom.find("<script").expect("scripts in the dump")];
    assert!(
        dom.contains(r#"data-rendered="ok""#),
        "script did not finish"
    );
    assert!(!dom.contains("data-render-error"), "{dom}");
    // Messages of the active branch, rendered as text (the hostile one escaped, not executed).
    assert!(dom.contains("Why does <code>pi --model</code> crash?"));
    assert!(dom.contains("look: &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(dom.contains("<strong>drops</strong>"));
    assert!(dom.contains("429 rate_limit_error"));
    // Markdown edge cases: no intraword emphasis, raw HTML stays text, no script links, images
    // from the network become links instead of fetches.
    assert!(dom.contains("snake_case_name stays, 2 * 3 * 4 = 24, &lt;b&gt;not bold&lt;/b&gt;"));
    assert!(dom.contains("**unclosed"));
    assert!(!dom.contains("href=\"javascript"));
    assert!(!dom.contains("<img src=\"http"));
    assert!(dom.contains(r#"<a href="https://example.com/docs""#));
    // Other branches are listed in the tree.
    assert!(dom.contains("forked question"));
    assert!(dom.contains("Read the config file instead."));
    if let Some(out) = std::env::var_os("PI_RS_EXPORT_SAMPLE") {
        // Manual check: keep a copy of the sample page to look at in a browser.
        fs::copy(&page, out).unwrap();
    }
}

/// Known secrets never reach the page: the embedded data says `[redacted]` instead.
#[test]
fn secrets_are_redacted_from_the_page() {
    let mut input = sample_input();
    input.system_prompt = "key sk-test-SECRET123 here <b>".to_string();
    input
        .entries
        .push(serde_json::json!({"type": "custom", "data": {"k": "sk-test-SECRET123"}}));
    input.redactions = crate::redact::Redactions::new(vec!["sk-test-SECRET123".to_string()]);
    let html = render_html(&input);
    assert!(!html.contains("sk-test-SECRET123"));
    assert_eq!(html.matches("[redacted]").count(), 2, "both places");
    assert!(html.contains("key [redacted] here \\u003cb\\u003e"));
}
