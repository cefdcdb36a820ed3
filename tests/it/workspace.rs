//! What the workspace puts in front of the model (FACTS.md §6, §13, §12.2): the system prompt
//! in pi 1.6.0's sections (context files, custom and appended prompts, the tool list, the skills
//! block, the cwd; 1.6.0 has no date line), the session variables of the bash tool, `/skill:` and prompt-template expansion in prompt / steer / follow_up, `get_commands`,
//! and HTML export over RPC and from the CLI.
//!
//! Every assertion about the prompt reads the request body the fake provider received, so it
//! checks what the model really sees. Skills and templates come from `fixtures/workspace/`,
//! copied into the test's `<cwd>/.pi/`.
//!
//! Reference: the wording of the default prompt body and the tool snippets are pi-rs's own, so
//! only their structure is asserted. Seed-only parts: get_commands `location`/`path` (0.73.1 has
//! `sourceInfo` only); the reference embeds the export's session data as base64, so the
//! "conversation text in the page" checks fail there by design.

use std::path::Path;

use serde_json::json;

use crate::fake_provider::{FakeProvider, RecordedRequest, Reply, fixture, fixture_path};
use crate::sse;
use crate::support::{
    GATED_COMMAND, Pi, Setup, Workspace, is_reference, message_text, open_gate, read_jsonl,
    run_cli, system_prompt_of, text_reply,
};

/// The workspace fixtures as `Setup` files: two skills and one prompt template under `.pi/`.
fn with_workspace_fixtures(setup: Setup) -> Setup {
    setup
        .trust_project()
        .file(
            ".pi/skills/review/SKILL.md",
            &fixture("workspace/skills/review/SKILL.md"),
        )
        .file(
            ".pi/skills/secret/SKILL.md",
            &fixture("workspace/skills/secret/SKILL.md"),
        )
        .file(".pi/prompts/fix.md", &fixture("workspace/prompts/fix.md"))
}

/// Starts pi in `workspace`, sends one prompt, waits for the run to end and returns the request
/// the fake received for it (the fake's latest).
#[track_caller]
fn prompt_once(
    fake: &FakeProvider,
    workspace: &Workspace,
    setup: &Setup,
    text: &str,
) -> RecordedRequest {
    let before = fake.requests().len();
    let mut pi = Pi::spawn_in(workspace, setup);
    let response = pi.command("p1", "prompt", json!({"message": text}));
    assert_eq!(response["success"], true, "{response}");
    pi.wait_for_event("agent_end");
    pi.close_and_wait();
    let requests = fake.requests();
    assert_eq!(requests.len(), before + 1, "one request per prompt");
    requests.last().expect("a request").clone()
}

fn final_message_text(request: &RecordedRequest) -> String {
    let last = request.messages().last().expect("a message");
    assert_eq!(last["role"], "user", "{last}");
    message_text(last)
}

/// The `- name: snippet` lines of the prompt's `<tools>` section, as names (`(none)` kept as is).
fn listed_tools(prompt: &str) -> Vec<String> {
    let start = prompt
        .find("<tools>\n")
        .unwrap_or_else(|| panic!("no tool list in:\n{prompt}"))
        + "<tools>\n".len();
    let section = &prompt[start..];
    let section = &section[..section.find("\n\n").unwrap_or(section.len())];
    section
        .lines()
        .map(|line| match line.strip_prefix("- ") {
            Some(item) => item.split(':').next().unwrap_or_default().to_string(),
            None => line.to_string(),
        })
        .collect()
}

/// The first line of the `project_context` section (pi-rs's words).
const CONTEXT_HEADING: &str = "Instructions and guidelines from this project's context files:";

/// The section every system prompt ends with (pi 1.6.0's `cwd` section).
fn cwd_tail(cwd: &Path) -> String {
    format!("\n\n<cwd>\n{}\n</cwd>", cwd.display())
}

// ---------------------------------------------------------------------------------------------
// Context files, custom and appended prompts, the date line.

/// AGENTS.md of the agent dir, then one file per directory from the root down to the cwd (the
/// first of AGENTS.md / CLAUDE.md there), with absolute paths and contents, in the
/// `project_context` section right before the cwd; `--no-context-files` drops the section.
#[test]
fn context_files_are_listed_in_order_with_paths_and_contents() {
    let fake = FakeProvider::start(vec![text_reply("One."), text_reply("Two.")]);
    let workspace = Workspace::new();
    let agent_file = workspace.agent_dir().join("AGENTS.md");
    let parent_file = workspace.root().join("CLAUDE.md");
    let cwd_file = workspace.cwd().join("AGENTS.md");
    std::fs::write(&agent_file, "Global rule: be careful.\n").unwrap();
    std::fs::write(&parent_file, "Parent rule: use tabs.").unwrap();
    std::fs::write(&cwd_file, "Project rule: run the tests.\n").unwrap();
    std::fs::write(
        workspace.cwd().join("CLAUDE.md"),
        "Shadowed: AGENTS.md wins here.",
    )
    .unwrap();
    let setup = Setup::anthropic(&fake);

    let request = prompt_once(&fake, &workspace, &setup, "Hi");
    let prompt = system_prompt_of(&request);
    let expected_section = format!(
        "\n\n<project_context>\n{CONTEXT_HEADING}\n\n\
         <project_instructions path=\"{}\">\nGlobal rule: be careful.\n\n</project_instructions>\n\n\
         <project_instructions path=\"{}\">\nParent rule: use tabs.\n</project_instructions>\n\n\
         <project_instructions path=\"{}\">\nProject rule: run the tests.\n\n</project_instructions>\n\
         </project_context>{}",
        agent_file.display(),
        parent_file.display(),
        cwd_file.display(),
        cwd_tail(&workspace.cwd())
    );
    assert!(
        prompt.ends_with(&expected_section),
        "the project_context section, then the cwd:\n{prompt}"
    );
    assert!(!prompt.contains("Shadowed"), "{prompt}");

    let request = prompt_once(
        &fake,
        &workspace,
        &setup.clone().arg("--no-context-files"),
        "Hi",
    );
    let prompt = system_prompt_of(&request);
    assert!(!prompt.contains("<project_context>"), "{prompt}");
    assert!(!prompt.contains("rule:"), "{prompt}");
    fake.finish();
}

/// `.pi/SYSTEM.md` replaces the default preamble, tool list and rules: context files and the cwd
/// still follow.
#[test]
fn project_system_md_replaces_the_body() {
    let fake = FakeProvider::start(vec![text_reply("Done.")]);
    let workspace = Workspace::new();
    let setup = Setup::anthropic(&fake)
        .trust_project()
        .file(".pi/SYSTEM.md", "You are a careful test double.")
        .file("AGENTS.md", "Context stays.");
    let request = prompt_once(&fake, &workspace, &setup, "Hi");
    let prompt = system_prompt_of(&request);
    let expected = format!(
        "You are a careful test double.\n\n<project_context>\n{CONTEXT_HEADING}\n\n\
         <project_instructions path=\"{}\">\nContext stays.\n</project_instructions>\n\
         </project_context>{}",
        workspace.cwd().join("AGENTS.md").display(),
        cwd_tail(&workspace.cwd())
    );
    assert_eq!(prompt, expected);
    fake.finish();
}

/// `--system-prompt` wins over `.pi/SYSTEM.md`; `--append-system-prompt` entries (text, or a
/// file's contents when the value names one) follow it joined by blank lines, replacing
/// `.pi/APPEND_SYSTEM.md`. Without CLI appends, APPEND_SYSTEM.md is appended.
#[test]
fn cli_system_prompt_and_appends_as_text_and_files() {
    let fake = FakeProvider::start(vec![
        text_reply("One."),
        text_reply("Two."),
        text_reply("Three."),
    ]);
    let workspace = Workspace::new();
    let base = Setup::anthropic(&fake)
        .trust_project()
        .file(".pi/SYSTEM.md", "Project system prompt.")
        .file(".pi/APPEND_SYSTEM.md", "Project append.")
        .file("extra.md", "Appended from a file.")
        .file("custom.txt", "Custom prompt from a file.");
    let cwd = workspace.cwd();

    let setup = base
        .clone()
        .arg("--system-prompt")
        .arg("Custom prompt text.")
        .arg("--append-system-prompt")
        .arg("First append.")
        .arg("--append-system-prompt")
        .arg("extra.md");
    let prompt = system_prompt_of(&prompt_once(&fake, &workspace, &setup, "Hi"));
    assert_eq!(
        prompt,
        format!(
            "Custom prompt text.\n\n<addendum>\nFirst append.\n\nAppended from a file.\n\
             </addendum>{}",
            cwd_tail(&cwd)
        )
    );

    let setup = base.clone().arg("--system-prompt").arg("custom.txt");
    let prompt = system_prompt_of(&prompt_once(&fake, &workspace, &setup, "Hi"));
    assert_eq!(
        prompt,
        format!(
            "Custom prompt from a file.\n\n<addendum>\nProject append.\n</addendum>{}",
            cwd_tail(&cwd)
        )
    );

    let prompt = system_prompt_of(&prompt_once(&fake, &workspace, &base, "Hi"));
    assert_eq!(
        prompt,
        format!(
            "Project system prompt.\n\n<addendum>\nProject append.\n</addendum>{}",
            cwd_tail(&cwd)
        )
    );
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// The tool list.

/// Default tools, `--tools read,grep` and `--no-tools` (`(none)`), as listed in the system prompt
/// (OpenAI: the leading system message) and as sent in the request's `tools`.
#[test]
fn tool_list_follows_the_active_tools() {
    let reply = || Reply::sse(sse::openai_text(&["Ok."]));
    let fake = FakeProvider::start(vec![reply(), reply(), reply()]);
    let workspace = Workspace::new();
    let setup = Setup::openai(&fake);
    let request_tools = |request: &RecordedRequest| -> Vec<String> {
        request.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .map(|t| t["function"]["name"].as_str().unwrap_or("?").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };

    let request = prompt_once(&fake, &workspace, &setup, "Hi");
    assert_eq!(request.messages()[0]["role"], "system", "{}", request.body);
    let prompt = system_prompt_of(&request);
    assert_eq!(listed_tools(&prompt), ["read", "bash", "edit", "write"]);
    assert_eq!(request_tools(&request), ["read", "bash", "edit", "write"]);

    let request = prompt_once(
        &fake,
        &workspace,
        &setup.clone().arg("--tools").arg("read,grep"),
        "Hi",
    );
    let prompt = system_prompt_of(&request);
    assert_eq!(listed_tools(&prompt), ["read", "grep"]);
    assert_eq!(request_tools(&request), ["read", "grep"]);
    assert!(
        !prompt.contains("- bash:"),
        "no bash without bash: {prompt}"
    );

    let request = prompt_once(&fake, &workspace, &setup.clone().arg("--no-tools"), "Hi");
    let prompt = system_prompt_of(&request);
    assert_eq!(listed_tools(&prompt), ["(none)"]);
    assert_eq!(request_tools(&request), Vec::<String>::new());
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// Skills.

/// A project skill appears in `<available_skills>` (XML-escaped, absolute location) in the
/// `skills` section, after the context files and before the cwd; a `disable-model-invocation` skill is hidden there but still
/// expands on `/skill:secret`; `/skill:review args` reaches the model as the exact `<skill>`
/// element followed by the trimmed args.
#[test]
fn skills_are_offered_and_expanded() {
    let fake = FakeProvider::start(vec![text_reply("Reviewed."), text_reply("Secret done.")]);
    let setup = with_workspace_fixtures(Setup::anthropic(&fake)).file("AGENTS.md", "Ctx.");
    let mut pi = Pi::spawn(&setup);
    let cwd = pi.cwd();
    let skill_dir = cwd.join(".pi/skills/review");
    let skill_file = skill_dir.join("SKILL.md");

    pi.command(
        "p1",
        "prompt",
        json!({"message": "/skill:review   please check main.rs  "}),
    );
    pi.wait_for_event("agent_end");
    let request = &fake.requests()[0];
    let prompt = system_prompt_of(request);
    let block = format!(
        "<available_skills>\n  <skill>\n    <name>review</name>\n    \
         <description>Reviews code &amp; &lt;diffs&gt; for &quot;risky&quot; changes</description>\n    \
         <location>{}</location>\n  </skill>\n</available_skills>\n</skills>{}",
        skill_file.display(),
        cwd_tail(&cwd)
    );
    assert!(prompt.contains(&block), "skills block:\n{prompt}");
    assert!(
        prompt.find("<project_context>") < prompt.find("<skills>"),
        "skills come after the context files:\n{prompt}"
    );
    assert!(!prompt.contains("secret"), "hidden skill listed:\n{prompt}");
    assert_eq!(
        final_message_text(request),
        format!(
            "<skill name=\"review\" location=\"{}\">\nReferences are relative to {}.\n\n\
             # Reviewing\n\nRead checklist.md next to this file, then go through the diff hunk \
             by hunk.\n</skill>\n\nplease check main.rs",
            skill_file.display(),
            skill_dir.display()
        )
    );

    pi.command("p2", "prompt", json!({"message": "/skill:secret"}));
    pi.wait_for_event("agent_end");
    let secret_dir = cwd.join(".pi/skills/secret");
    assert_eq!(
        final_message_text(&fake.requests()[1]),
        format!(
            "<skill name=\"secret\" location=\"{}\">\nReferences are relative to {}.\n\n\
             Do the secret thing.\n</skill>",
            secret_dir.join("SKILL.md").display(),
            secret_dir.display()
        )
    );
    fake.finish();
}

/// `--no-skills`: no block, and `/skill:review` stays literal text.
#[test]
fn no_skills_drops_the_block_and_the_expansion() {
    let fake = FakeProvider::start(vec![text_reply("Literal.")]);
    let workspace = Workspace::new();
    let setup = with_workspace_fixtures(Setup::anthropic(&fake)).arg("--no-skills");
    let request = prompt_once(&fake, &workspace, &setup, "/skill:review now");
    assert!(
        !system_prompt_of(&request).contains("<available_skills>"),
        "{}",
        system_prompt_of(&request)
    );
    assert_eq!(final_message_text(&request), "/skill:review now");
    fake.finish();
}

/// Skills are offered only when the model can read their files (pi 1.6.0): with `read`, else
/// with `bash` (the hint then names bash); `--no-tools` or a tool list with neither leaves the
/// section out, while the expansion itself still works.
#[test]
fn skills_section_needs_a_tool_that_reads() {
    let fake = FakeProvider::start(vec![
        text_reply("One."),
        text_reply("Two."),
        text_reply("Three."),
    ]);
    let workspace = Workspace::new();
    let setup = with_workspace_fixtures(Setup::anthropic(&fake));

    let request = prompt_once(&fake, &workspace, &setup.clone().arg("--no-tools"), "Hi");
    assert!(
        !system_prompt_of(&request).contains("<skills>"),
        "--no-tools:\n{}",
        system_prompt_of(&request)
    );
    let request = prompt_once(
        &fake,
        &workspace,
        &setup.clone().arg("--tools").arg("grep,ls"),
        "Hi",
    );
    assert!(
        !system_prompt_of(&request).contains("<skills>"),
        "--tools grep,ls:\n{}",
        system_prompt_of(&request)
    );
    let request = prompt_once(
        &fake,
        &workspace,
        &setup.clone().arg("--tools").arg("grep,bash"),
        "Hi",
    );
    let prompt = system_prompt_of(&request);
    let skills = &prompt[prompt.find("<skills>\n").expect("a skills section")..];
    assert!(skills.contains("with bash"), "{skills}");
    assert!(!skills.contains("read tool"), "{skills}");
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// Prompt templates.

const FIX_EXPANDED: &str = "Fix a.ts because too slow now.\nAll: a.ts too slow now";

/// `/fix a.ts "too slow" now` reaches the model expanded; an unknown `/x` stays literal.
#[test]
fn prompt_templates_expand_in_prompt_and_unknown_commands_stay_literal() {
    let fake = FakeProvider::start(vec![text_reply("Fixed."), text_reply("Literal.")]);
    let setup = with_workspace_fixtures(Setup::anthropic(&fake));
    let mut pi = Pi::spawn(&setup);
    pi.command(
        "p1",
        "prompt",
        json!({"message": "/fix a.ts \"too slow\" now"}),
    );
    pi.wait_for_event("agent_end");
    assert_eq!(final_message_text(&fake.requests()[0]), FIX_EXPANDED);

    pi.command("p2", "prompt", json!({"message": "/x keep me as I am"}));
    pi.wait_for_event("agent_end");
    assert_eq!(
        final_message_text(&fake.requests()[1]),
        "/x keep me as I am"
    );
    fake.finish();
}

/// pi 1.6.0's argument rules reach the model: an apostrophe inside a word, `${N:-default}`,
/// `${@:-default}`, an unclosed quote kept as text, a tab after the name.
#[test]
fn prompt_template_arguments_split_as_pi_1_6() {
    let fake = FakeProvider::start(vec![
        text_reply("one"),
        text_reply("two"),
        text_reply("three"),
    ]);
    let setup = with_workspace_fixtures(Setup::anthropic(&fake)).file(
        ".pi/prompts/ask.md",
        "Ask ${1:-nobody} about ${@:-nothing}; second: ${2:-none}",
    );
    let mut pi = Pi::spawn(&setup);
    for (n, message) in ["/ask don't 'panic now", "/ask", "/ask\tAnn \"\" x"]
        .into_iter()
        .enumerate()
    {
        pi.command(&format!("p{n}"), "prompt", json!({"message": message}));
        pi.wait_for_event("agent_end");
    }
    let requests = fake.requests();
    let texts: Vec<String> = requests.iter().map(final_message_text).collect();
    assert_eq!(
        texts,
        [
            "Ask don't about don't 'panic now; second: 'panic",
            "Ask nobody about nothing; second: none",
            "Ask Ann about Ann  x; second: none",
        ]
    );
    fake.finish();
}

/// steer and follow_up expand templates (and skills) too: the steered text reaches the request
/// after the tool result, the follow-up the request after that.
#[test]
fn prompt_templates_expand_in_steer_and_follow_up() {
    let fake = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_bash("toolu_gate", GATED_COMMAND)),
        text_reply("Steered."),
        text_reply("Followed up."),
    ]);
    let setup = with_workspace_fixtures(Setup::anthropic(&fake));
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Run the slow thing"}));
    pi.wait_for_event("tool_execution_start");
    let steer = pi.command("s1", "steer", json!({"message": "/fix b.ts quick"}));
    assert_eq!(steer["success"], true, "{steer}");
    let follow = pi.command(
        "f1",
        "follow_up",
        json!({"message": "/fix c.ts 'much later' please"}),
    );
    assert_eq!(follow["success"], true, "{follow}");
    open_gate(&pi);
    let deadline = pi.deadline();
    pi.recv_until(
        |r| r["type"] == "agent_end" && fake.requests().len() >= 3,
        deadline,
    );
    let requests = fake.wait_for_requests(3, pi.timeout());
    assert_eq!(
        final_message_text(&requests[1]),
        "Fix b.ts because quick.\nAll: b.ts quick"
    );
    assert_eq!(
        final_message_text(&requests[2]),
        "Fix c.ts because much later please.\nAll: c.ts much later please"
    );
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// get_commands.

/// Templates first, then skills (hidden ones included), each with name, description, source, the
/// seed's `location`/`path` and 0.73.1's `sourceInfo`.
#[test]
fn get_commands_lists_templates_then_skills() {
    let fake = FakeProvider::start(Vec::new());
    let mut pi = Pi::spawn(&with_workspace_fixtures(Setup::anthropic(&fake)));
    let cwd = pi.cwd();
    let response = pi.command("c1", "get_commands", json!({}));
    assert_eq!(response["success"], true, "{response}");
    let path = |relative: &str| cwd.join(relative).display().to_string();
    // Auto-discovered project resources share the `<cwd>/.pi` base dir (checked on 0.73.1).
    let base_dir = path(".pi");
    let expected = json!([
        // pi 1.6.0's built-in `/mcp` comes first (always listed unless `--no-mcp`).
        crate::mcp::builtin_command(),
        {"name": "fix", "description": "Fix a file for a reason", "source": "prompt",
         "location": "project", "path": path(".pi/prompts/fix.md"),
         "sourceInfo": {"path": path(".pi/prompts/fix.md"), "source": "auto", "scope": "project",
                        "origin": "top-level", "baseDir": base_dir}},
        {"name": "skill:review",
         "description": "Reviews code & <diffs> for \"risky\" changes", "source": "skill",
         "location": "project", "path": path(".pi/skills/review/SKILL.md"),
         "sourceInfo": {"path": path(".pi/skills/review/SKILL.md"), "source": "auto",
                        "scope": "project", "origin": "top-level", "baseDir": base_dir}},
        {"name": "skill:secret", "description": "Only for explicit use", "source": "skill",
         "location": "project", "path": path(".pi/skills/secret/SKILL.md"),
         "sourceInfo": {"path": path(".pi/skills/secret/SKILL.md"), "source": "auto",
                        "scope": "project", "origin": "top-level", "baseDir": base_dir}},
    ]);
    assert_eq!(response["data"]["commands"], expected);
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// export_html.

/// The checks every exported page must pass: a whole HTML document that loads nothing from the
/// network (no `src=`/`href=` to http(s), no remote stylesheets or imports).
#[track_caller]
fn assert_self_contained_html(html: &str) {
    assert!(
        html.trim_start().starts_with("<!DOCTYPE html>"),
        "{}",
        &html[..html.len().min(200)]
    );
    assert!(html.trim_end().ends_with("</html>"));
    let lower = html.to_ascii_lowercase();
    for tag in ["<script", "<link", "<img", "<iframe"] {
        for (at, _) in lower.match_indices(tag) {
            let end = lower[at..].find('>').map_or(lower.len(), |e| at + e);
            let element = &lower[at..end];
            assert!(
                !element.contains("http://") && !element.contains("https://"),
                "remote resource: {element}"
            );
            if tag == "<script" {
                assert!(!element.contains(" src="), "external script: {element}");
            }
        }
    }
    assert!(!lower.contains("@import url(http"), "remote CSS import");
}

/// Sessions on: before the first reply there is nothing to export; after a turn the default
/// file `pi-session-<session basename>.html` appears in the cwd; `outputPath` is honoured and
/// returned as given.
#[test]
fn export_html_writes_a_self_contained_page() {
    let fake = FakeProvider::start(vec![text_reply("Exported answer text.")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).with_sessions());
    let early = pi.command("e1", "export_html", json!({}));
    assert_eq!(
        early,
        json!({"id": "e1", "type": "response", "command": "export_html", "success": false,
               "error": "Nothing to export yet - start a conversation first"})
    );

    pi.command(
        "p1",
        "prompt",
        json!({"message": "Please export this question"}),
    );
    pi.wait_for_event("agent_end");
    let session_files = pi.workspace().jsonl_files();
    assert_eq!(session_files.len(), 1, "{session_files:?}");
    let stem = session_files[0]
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();

    let response = pi.command("e2", "export_html", json!({}));
    let expected_name = format!("pi-session-{stem}.html");
    assert_eq!(
        response,
        json!({"id": "e2", "type": "response", "command": "export_html", "success": true,
               "data": {"path": expected_name}})
    );
    let html = std::fs::read_to_string(pi.cwd().join(&expected_name))
        .expect("the page is in the process cwd");
    assert_self_contained_html(&html);
    if !is_reference() {
        assert!(html.contains("Please export this question"), "user text");
        assert!(html.contains("Exported answer text."), "assistant text");
    }

    let custom = pi.workspace().root().join("custom-export.html");
    let custom_str = custom.display().to_string();
    let response = pi.command("e3", "export_html", json!({"outputPath": custom_str}));
    assert_eq!(response["data"], json!({"path": custom_str}), "{response}");
    let html = std::fs::read_to_string(&custom).expect("the page at outputPath");
    assert_self_contained_html(&html);
    assert!(is_reference() || html.contains("Exported answer text."));

    let relative = pi.command("e4", "export_html", json!({"outputPath": "rel.html"}));
    assert_eq!(relative["data"], json!({"path": "rel.html"}), "{relative}");
    assert!(
        pi.cwd().join("rel.html").is_file(),
        "relative to the process cwd"
    );
    fake.finish();
}

/// `--no-session`: nothing on disk, so nothing to export.
#[test]
fn export_html_without_a_session_file_fails() {
    let fake = FakeProvider::start(vec![text_reply("Hi.")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.command("p1", "prompt", json!({"message": "Hello"}));
    pi.wait_for_event("agent_end");
    let response = pi.command("e1", "export_html", json!({}));
    assert_eq!(
        response,
        json!({"id": "e1", "type": "response", "command": "export_html", "success": false,
               "error": "Cannot export in-memory session to HTML"})
    );
    fake.finish();
}

/// `pi --export <session.jsonl> [out.html]` writes the page (relative to the cwd) and reports
/// `Exported to: <path>` on stderr, stdout staying empty (0.73.1 sends its console.log there, as
/// checked by running it); without an output name the page is `pi-session-<basename>.html`.
#[test]
fn cli_export_writes_the_page_and_reports_it() {
    let fake = FakeProvider::start(Vec::new());
    let session = fixture_path("sessions/reference-main.jsonl");
    let session_str = session.display().to_string();
    assert!(!read_jsonl(&session).is_empty());

    let run = run_cli(
        &Setup::anthropic(&fake),
        &["--export", &session_str, "out.html"],
        None,
    );
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    let html = std::fs::read_to_string(run.cwd().join("out.html")).expect("out.html written");
    assert_self_contained_html(&html);
    assert!(
        is_reference()
            || (html.contains("hello there") && html.contains("I listed the directory."))
    );
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains("Exported to: out.html\n"),
        "stderr: {}",
        run.stderr
    );

    let run = run_cli(&Setup::anthropic(&fake), &["--export", &session_str], None);
    assert_eq!(run.status.code(), Some(0), "stderr: {}", run.stderr);
    assert!(
        run.cwd().join("pi-session-reference-main.html").is_file(),
        "default name in the cwd"
    );
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr
            .contains("Exported to: pi-session-reference-main.html\n"),
        "stderr: {}",
        run.stderr
    );
    fake.finish();
}

// ---------------------------------------------------------------------------------------------
// What pi 1.6.0 adds around the prompt: AGENTS.override.md and the session variables.

/// `AGENTS.override.md` is a folder's context file ahead of its AGENTS.md and CLAUDE.md (pi
/// 1.6.0); a folder without one keeps its AGENTS.md.
#[test]
fn agents_override_md_wins_in_its_folder() {
    let fake = FakeProvider::start(vec![text_reply("Done.")]);
    let workspace = Workspace::new();
    std::fs::write(workspace.root().join("AGENTS.md"), "Parent rule.").unwrap();
    let setup = Setup::anthropic(&fake)
        .file("AGENTS.md", "Plain rule: shadowed.")
        .file("AGENTS.override.md", "Override rule.");
    let request = prompt_once(&fake, &workspace, &setup, "Hi");
    let prompt = system_prompt_of(&request);
    assert!(prompt.contains("Override rule."), "{prompt}");
    assert!(prompt.contains("Parent rule."), "{prompt}");
    assert!(!prompt.contains("shadowed"), "{prompt}");
    let override_path = workspace.cwd().join("AGENTS.override.md");
    assert!(
        prompt.contains(&override_path.display().to_string()),
        "{prompt}"
    );
    fake.finish();
}

/// The bash tool's commands see `PI_SESSION_ID`, `PI_SESSION_FILE`, `PI_PROVIDER`, `PI_MODEL` and
/// `PI_REASONING_LEVEL` as they are when the command starts (pi 1.6.0), replacing inherited
/// ones; `--no-session` has no file, so `PI_SESSION_FILE` is unset there, not inherited. The
/// client's own RPC `bash` keeps the inherited environment, as 1.6.0's does.
#[test]
fn bash_tool_sees_the_session_variables() {
    const COMMAND: &str = "env | grep -E '^PI_(SESSION_|PROVIDER|MODEL|REASONING)' | sort";
    let workspace = Workspace::new();
    let fake = FakeProvider::start(crate::support::tool_script(&[(
        "bash",
        json!({"command": COMMAND}),
    )]));
    let setup = Setup::anthropic(&fake)
        .with_sessions()
        .env("PI_SESSION_ID", "inherited-id")
        .env("PI_SESSION_FILE", "/inherited/file")
        .env("PI_MODEL", "inherited-model");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let response = pi.command("t", "set_thinking_level", json!({"level": "high"}));
    assert_eq!(response["success"], true, "{response}");
    let run = crate::support::prompt(&mut pi, "p1", "Show the environment");
    let state = crate::support::state(&mut pi, "s1");
    let ends = crate::support::tool_ends(run, 1);
    let expected = format!(
        "PI_MODEL=fake-claude\nPI_PROVIDER=fake-anthropic\nPI_REASONING_LEVEL=high\n\
         PI_SESSION_FILE={}\nPI_SESSION_ID={}\n",
        state["sessionFile"].as_str().expect("a session file"),
        state["sessionId"].as_str().expect("a session id"),
    );
    assert_eq!(crate::support::end_text(&ends[0]), expected);
    let rpc = pi.command("b1", "bash", json!({"command": COMMAND}));
    assert_eq!(rpc["success"], true, "{rpc}");
    assert_eq!(
        rpc["data"]["output"],
        "PI_MODEL=inherited-model\nPI_SESSION_FILE=/inherited/file\nPI_SESSION_ID=inherited-id\n"
    );
    pi.close_and_wait();
    fake.finish();

    let fake = FakeProvider::start(crate::support::tool_script(&[(
        "bash",
        json!({"command": COMMAND}),
    )]));
    let setup = Setup::anthropic(&fake).env("PI_SESSION_FILE", "/inherited/file");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let run = crate::support::prompt(&mut pi, "p1", "Show the environment");
    let id = crate::support::state(&mut pi, "s1")["sessionId"]
        .as_str()
        .expect("a session id")
        .to_string();
    let ends = crate::support::tool_ends(run, 1);
    let text = crate::support::end_text(&ends[0]);
    assert!(!text.contains("PI_SESSION_FILE"), "{text}");
    assert!(text.contains(&format!("PI_SESSION_ID={id}\n")), "{text}");
    pi.close_and_wait();
    fake.finish();
}
