//! The system prompt, laid out as pi 1.6.0 lays it out, in pi-rs's own words: named sections in a
//! fixed order — `preamble` (the intro, or the custom prompt), `tools` (the active tools with
//! their one-line summaries), `rules` (guidelines), `docs` (where pi's documentation lives),
//! `addendum` (appended text), `project_context` (context files), `skills`, `cwd` — each but the
//! preamble wrapped in `<name>…</name>`, and rendered joined by blank lines; a custom prompt
//! replaces the preamble, tools, rules and docs. The sections are what the transcript's system
//! message carries (`agent::system_message`). `for_run` gathers a run's parts (flags, SYSTEM.md
//! and APPEND_SYSTEM.md, context files, tool summaries, skills); `build` lays them out. The
//! `docs` section names README.md, `docs/` and `examples/` of pi's package folder
//! (`paths::package_dir`: `$PI_PACKAGE_DIR`, else the executable's folder), as pi 1.6.0 does.
//!
//! `PromptOptions` is the same input in pi 1.6.0's structured form (`BuildSystemPromptOptions`,
//! what `before_agent_start.systemPromptOptions` carries to extensions): `for_run` gathers the
//! options and `from_options` lays them out, so an extension's changed options build the prompt
//! the same way. Custom `sections` follow `cwd` (one named like a built-in section takes its
//! place); `promptGuidelines` join the rules after the tools' own.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::extensions::ExtensionTool;

/// One active tool as the prompt lists it.
pub struct ToolLine<'a> {
    pub name: &'a str,
    pub snippet: Option<&'a str>,
    pub guidelines: &'a [&'a str],
}

pub struct PromptInputs<'a> {
    /// `--system-prompt` / SYSTEM.md text replacing the default body.
    pub custom: Option<&'a str>,
    pub tools: &'a [ToolLine<'a>],
    pub append: &'a [String],
    /// (absolute path, content) of each context file, outermost first.
    pub context_files: &'a [(String, String)],
    /// The skills section's text, when skills are offered.
    pub skills: Option<&'a str>,
    pub cwd: &'a Path,
    /// Rules beyond the tools' own (`promptGuidelines`).
    pub guidelines: &'a [String],
    /// Custom sections (name, body), after `cwd`; a built-in name replaces that section.
    pub sections: &'a [(String, String)],
    /// pi's package folder, which the `docs` section points into.
    pub package_dir: &'a Path,
}

/// pi 1.6.0's `BuildSystemPromptOptions`: the structured input of a system prompt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_prompt: Option<String>,
    /// The whole prompt, as is (the agent sends it instead of the built one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_system_prompt: Option<String>,
    #[serde(default)]
    pub selected_tools: Vec<String>,
    #[serde(default)]
    pub hidden_tools: Vec<String>,
    #[serde(default)]
    pub tool_snippets: Map<String, Value>,
    #[serde(default)]
    pub tool_guidelines: Map<String, Value>,
    #[serde(default)]
    pub prompt_guidelines: Vec<String>,
    #[serde(default)]
    pub append_system_prompt: String,
    /// Custom sections by tag name (empty text: left out).
    #[serde(default)]
    pub sections: Map<String, Value>,
    pub cwd: String,
    #[serde(default)]
    pub context_files: Vec<ContextFile>,
    #[serde(default)]
    pub skills: Vec<PromptSkill>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextFile {
    pub path: String,
    pub content: String,
}

/// A loaded skill as the options carry it (pi's `Skill` without its `sourceInfo`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptSkill {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub file_path: String,
    #[serde(default)]
    pub base_dir: String,
    #[serde(default)]
    pub disable_model_invocation: bool,
}

impl PromptOptions {
    /// pi's check of custom section names: `[a-z][a-z0-9_-]*`, never `preamble`.
    pub fn check(&self) -> Result<(), String> {
        for name in self.sections.keys() {
            let mut chars = name.chars();
            let valid = chars.next().is_some_and(|c| c.is_ascii_lowercase())
                && chars
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
                && name != "preamble";
            if !valid {
                return Err(format!("Invalid system prompt section name: {name}"));
            }
        }
        Ok(())
    }
}

/// Where a run's prompt text comes from besides the tools: the command line and the project.
pub struct RunSources<'a> {
    /// `--system-prompt` (text or a file).
    pub system_prompt: Option<&'a str>,
    /// `--append-system-prompt` values (text or files).
    pub append: &'a [String],
    pub no_context_files: bool,
    pub cwd: &'a Path,
    pub agent_dir: &'a Path,
    pub project_trusted: bool,
    /// settings `codemode.mode: "only"`: while `codemode` is active the tools scripts call are
    /// not declared, so the prompt leaves them and their guidelines out (pi 1.6.0's
    /// `hiddenTools`).
    pub codemode_only: bool,
}

/// A system prompt as its named sections, in order, and their rendering.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SystemPrompt {
    sections: Vec<(String, String)>,
    text: String,
    /// What it was built from (`for_run`, `from_options`).
    options: Option<Box<PromptOptions>>,
}

impl SystemPrompt {
    pub fn from_sections(sections: Vec<(String, String)>) -> SystemPrompt {
        let text = sections
            .iter()
            .map(|(_, text)| text.as_str())
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n");
        SystemPrompt {
            sections,
            text,
            options: None,
        }
    }

    /// The structured input it was built from (none for a prompt made of bare sections).
    pub fn options(&self) -> Option<&PromptOptions> {
        self.options.as_deref()
    }

    /// The prompt as the model reads it: the sections joined by blank lines.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// (name, text) of each section, in order.
    pub fn sections(&self) -> &[(String, String)] {
        &self.sections
    }

    /// This prompt with the section `name` set to `text` (appended when new), or without it.
    pub fn with_section(&self, name: &str, text: Option<String>) -> SystemPrompt {
        let mut sections = self.sections.clone();
        let position = sections.iter().position(|(n, _)| n == name);
        // The options (what `before_agent_start` sees and may rebuild from) carry the section's
        // body as a custom section, as pi 1.6.0's do.
        let mut options = self.options.clone();
        if let Some(options) = options.as_deref_mut() {
            match &text {
                Some(text) => {
                    let body = text
                        .strip_prefix(&format!("<{name}>\n"))
                        .and_then(|t| t.strip_suffix(&format!("\n</{name}>")))
                        .unwrap_or(text);
                    options.sections.insert(name.to_string(), body.into());
                }
                None => {
                    options.sections.remove(name);
                }
            }
        }
        match (position, text) {
            (Some(index), Some(text)) => sections[index].1 = text,
            (None, Some(text)) => sections.push((name.to_string(), text)),
            (Some(index), None) => {
                sections.remove(index);
            }
            (None, None) => {}
        }
        let mut changed = SystemPrompt::from_sections(sections);
        changed.options = options;
        changed
    }

    /// This prompt with its working-directory section naming `cwd`: a session switched to
    /// another directory moves the agent there.
    pub fn with_cwd(&self, cwd: &Path) -> SystemPrompt {
        let mut sections = self.sections.clone();
        match sections.iter_mut().find(|(name, _)| name == "cwd") {
            Some(section) => section.1 = cwd_section(cwd),
            None => sections.push(("cwd".to_string(), cwd_section(cwd))),
        }
        let mut moved = SystemPrompt::from_sections(sections);
        moved.options = self.options.clone().map(|mut options| {
            options.cwd = cwd_text(cwd);
            options
        });
        moved
    }
}

pub fn build(inputs: &PromptInputs) -> SystemPrompt {
    let mut sections: Vec<(String, String)> = Vec::new();
    let mut add = |name: &str, body: String| {
        let text = if name == "preamble" {
            body
        } else {
            format!("<{name}>\n{body}\n</{name}>")
        };
        sections.push((name.to_string(), text));
    };
    match inputs.custom {
        Some(custom) => add("preamble", custom.to_string()),
        None => {
            add(
                "preamble",
                "You are an expert coding assistant working inside pi, a coding agent harness: you \
                 help users with their software projects by reading files, running commands and \
                 changing code."
                    .to_string(),
            );
            add("tools", tool_list(inputs.tools));
            add("rules", rules(inputs.tools, inputs.guidelines));
            add("docs", docs(inputs.package_dir));
        }
    }
    if !inputs.append.is_empty() {
        add("addendum", inputs.append.join("\n\n"));
    }
    if !inputs.context_files.is_empty() {
        let mut parts =
            vec!["Instructions and guidelines from this project's context files:".to_string()];
        parts.extend(inputs.context_files.iter().map(|(path, content)| {
            format!("<project_instructions path=\"{path}\">\n{content}\n</project_instructions>")
        }));
        add("project_context", parts.join("\n\n"));
    }
    if let Some(skills) = inputs.skills.map(str::trim).filter(|s| !s.is_empty()) {
        add("skills", skills.to_string());
    }
    add("cwd", cwd_text(inputs.cwd));
    for (name, body) in inputs.sections.iter().filter(|(_, b)| !b.is_empty()) {
        let text = format!("<{name}>\n{body}\n</{name}>");
        match sections.iter_mut().find(|(n, _)| n == name) {
            Some(section) => section.1 = text,
            None => sections.push((name.clone(), text)),
        }
    }
    SystemPrompt::from_sections(sections)
}

fn cwd_text(cwd: &Path) -> String {
    cwd.to_string_lossy().replace('\\', "/")
}

fn cwd_section(cwd: &Path) -> String {
    format!("<cwd>\n{}\n</cwd>", cwd_text(cwd))
}

/// The `- name: snippet` lines of the tools that have a snippet (`(none)` without any), then
/// the hint that there may be more.
fn tool_list(tools: &[ToolLine]) -> String {
    let listed: Vec<String> = tools
        .iter()
        .filter_map(|t| t.snippet.map(|s| format!("- {}: {s}", t.name)))
        .collect();
    let list = if listed.is_empty() {
        "(none)".to_string()
    } else {
        listed.join("\n")
    };
    format!("{list}\n\nThe project may offer further tools beyond these.")
}

/// Where pi's documentation is and when to read it (pi 1.6.0's facts, pi-rs's words).
fn docs(package_dir: &Path) -> String {
    let at = |name: &str| package_dir.join(name).to_string_lossy().into_owned();
    [
        "pi's documentation (read it only when the user asks about pi itself: the harness, its SDK, extensions, themes, skills or the TUI):".to_string(),
        format!("- Main documentation: {}", at("README.md")),
        format!("- Further docs: {}", at("docs")),
        format!("- Examples: {} (extensions, custom tools, SDK)", at("examples")),
        "- In pi's docs and examples, docs/... paths lie under the further docs and examples/... paths under the examples, not under the working directory".to_string(),
        "- Where to look: extensions (docs/extensions.md, examples/extensions/), themes (docs/themes.md), skills (docs/skills.md), prompt templates (docs/prompt-templates.md), TUI components (docs/tui.md), keybindings (docs/keybindings.md), SDK integrations (docs/sdk.md), custom providers (docs/custom-provider.md), adding models (docs/models.md), packages (docs/packages.md), environment variables (docs/environment-variables.md), MCP servers (docs/mcp.md), codemode scripts and non-LLM models such as classifiers and image models (docs/codemode.md)".to_string(),
        "- Before changing the harness, read the docs and examples that concern the change in full, and follow their cross-references.".to_string(),
    ]
    .join("\n")
}

/// The guideline bullets: how to explore files when only bash can, each tool's own guidelines,
/// then two general ones; trimmed, empty and repeated lines dropped.
fn rules(tools: &[ToolLine], extra: &[String]) -> String {
    let has = |n: &str| tools.iter().any(|t| t.name == n);
    let mut rules: Vec<String> = Vec::new();
    let mut add = |rule: &str| {
        let rule = rule.trim();
        if !rule.is_empty() && !rules.iter().any(|r| r == rule) {
            rules.push(rule.to_string());
        }
    };
    if has("bash") && !(has("grep") || has("find") || has("ls")) {
        add("Use bash for file operations such as ls, rg and find");
    }
    for tool in tools {
        for line in tool.guidelines {
            add(line);
        }
    }
    for line in extra {
        add(line);
    }
    add("Keep your answers concise");
    add("Show file paths clearly when you work with files");
    rules
        .iter()
        .map(|r| format!("- {r}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The system prompt of a run: `--system-prompt` or SYSTEM.md (project ones only when trusted),
/// `--append-system-prompt` or APPEND_SYSTEM.md, context files (unless `--no-context-files`),
/// the active built-in and extension tools, and the skills when `read` is active.
pub fn for_run(
    sources: &RunSources,
    tool_names: &[String],
    extension_tools: &[ExtensionTool],
    loaded: &super::discovery::Resources,
) -> SystemPrompt {
    from_options(options_for_run(
        sources,
        tool_names,
        extension_tools,
        loaded,
    ))
}

/// A run's prompt input in pi's structured form (see `for_run`).
pub fn options_for_run(
    sources: &RunSources,
    tool_names: &[String],
    extension_tools: &[ExtensionTool],
    loaded: &super::discovery::Resources,
) -> PromptOptions {
    let cwd = sources.cwd;
    let custom_prompt = match sources.system_prompt {
        Some(value) => Some(super::text_or_file(value, cwd)),
        None => super::discover_prompt_file(
            "SYSTEM.md",
            cwd,
            sources.agent_dir,
            sources.project_trusted,
        ),
    };
    let append: Vec<String> = if sources.append.is_empty() {
        super::discover_prompt_file(
            "APPEND_SYSTEM.md",
            cwd,
            sources.agent_dir,
            sources.project_trusted,
        )
        .into_iter()
        .collect()
    } else {
        sources
            .append
            .iter()
            .map(|v| super::text_or_file(v, cwd))
            .collect()
    };
    let context_files = if sources.no_context_files {
        Vec::new()
    } else {
        super::context_files(cwd, sources.agent_dir)
    };
    let mut options = PromptOptions {
        custom_prompt,
        append_system_prompt: append.join("\n\n"),
        cwd: cwd_text(cwd),
        context_files: context_files
            .into_iter()
            .map(|(path, content)| ContextFile { path, content })
            .collect(),
        skills: loaded
            .skills
            .iter()
            .map(|skill| PromptSkill {
                name: skill.name.clone(),
                description: skill.description.clone(),
                file_path: skill.file_path.clone(),
                base_dir: skill.base_dir.clone(),
                disable_model_invocation: skill.disable_model_invocation,
            })
            .collect(),
        ..PromptOptions::default()
    };
    // An extension tool named like a builtin replaces it (its own snippet, not the builtin's).
    for name in tool_names
        .iter()
        .filter(|name| !extension_tools.iter().any(|t| t.decl.name == **name))
    {
        options.selected_tools.push(name.clone());
        if let Some((snippet, guidelines)) = crate::tools::prompt_info(name) {
            options.tool_snippets.insert(name.clone(), snippet.into());
            options
                .tool_guidelines
                .insert(name.clone(), guidelines.to_vec().into());
        }
    }
    for tool in extension_tools {
        let name = &tool.decl.name;
        options.selected_tools.push(name.clone());
        if let Some(snippet) = &tool.decl.prompt_snippet {
            options
                .tool_snippets
                .insert(name.clone(), snippet.clone().into());
        }
        if !tool.decl.prompt_guidelines.is_empty() {
            let guidelines = tool.decl.prompt_guidelines.clone();
            options
                .tool_guidelines
                .insert(name.clone(), guidelines.into());
        }
    }
    let codemode = crate::tools::codemode::TOOL_NAME;
    if sources.codemode_only && options.selected_tools.iter().any(|t| t == codemode) {
        options.hidden_tools = options
            .selected_tools
            .iter()
            .filter(|t| *t != codemode && *t != crate::tools::tool_search::TOOL_NAME)
            .cloned()
            .collect();
    }
    options
}

/// The prompt `options` describe (their `forceSystemPrompt` aside: the caller sends that text
/// instead). Custom sections with invalid names are left out (`PromptOptions::check` names
/// them).
pub fn from_options(options: PromptOptions) -> SystemPrompt {
    let hidden = |name: &String| options.hidden_tools.contains(name);
    let declared: Vec<&String> = options
        .selected_tools
        .iter()
        .filter(|n| !hidden(n))
        .collect();
    let guidelines: Vec<Vec<&str>> = declared
        .iter()
        .map(|name| match options.tool_guidelines.get(name.as_str()) {
            Some(Value::Array(lines)) => lines.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        })
        .collect();
    let tool_lines: Vec<ToolLine> = declared
        .iter()
        .zip(&guidelines)
        .map(|(name, guidelines)| ToolLine {
            name,
            snippet: options
                .tool_snippets
                .get(name.as_str())
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty()),
            guidelines,
        })
        .collect();
    // Skills are offered only when the model can read their files: with `read`, else with
    // `bash` (pi 1.6.0).
    let reader = ["read", "bash"]
        .into_iter()
        .find(|reader| declared.iter().any(|t| t == reader));
    let skills: Vec<super::skills::Skill> = options
        .skills
        .iter()
        .map(|skill| super::skills::Skill {
            name: skill.name.clone(),
            description: skill.description.clone(),
            file_path: skill.file_path.clone(),
            base_dir: skill.base_dir.clone(),
            disable_model_invocation: skill.disable_model_invocation,
            source_info: Default::default(),
        })
        .collect();
    let skills = reader.and_then(|reader| super::skills::skills_prompt_block(&skills, reader));
    let append: Vec<String> = Some(options.append_system_prompt.clone())
        .filter(|a| !a.is_empty())
        .into_iter()
        .collect();
    let context_files: Vec<(String, String)> = options
        .context_files
        .iter()
        .map(|f| (f.path.clone(), f.content.clone()))
        .collect();
    let custom_sections: Vec<(String, String)> = if options.check().is_ok() {
        options
            .sections
            .iter()
            .filter_map(|(name, body)| Some((name.clone(), body.as_str()?.to_string())))
            .collect()
    } else {
        Vec::new()
    };
    let package_dir = crate::paths::package_dir(
        std::env::var("PI_PACKAGE_DIR").ok().as_deref(),
        &crate::paths::home_dir(),
    );
    let mut prompt = build(&PromptInputs {
        package_dir: &package_dir,
        custom: options.custom_prompt.as_deref().filter(|c| !c.is_empty()),
        tools: &tool_lines,
        append: &append,
        context_files: &context_files,
        skills: skills.as_deref(),
        cwd: Path::new(&options.cwd),
        guidelines: &options.prompt_guidelines,
        sections: &custom_sections,
    });
    prompt.options = Some(Box::new(options));
    prompt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_the_sections_of_pi_1_6_in_order() {
        let tools = [
            ToolLine {
                name: "read",
                snippet: Some("Read file contents"),
                guidelines: &["Use read to look at files", " Use read to look at files "],
            },
            ToolLine {
                name: "bash",
                snippet: Some("Run shell commands"),
                guidelines: &[],
            },
            ToolLine {
                name: "quiet",
                snippet: None,
                guidelines: &[],
            },
        ];
        let context = [("/p/AGENTS.md".to_string(), "be nice".to_string())];
        let prompt = build(&PromptInputs {
            custom: None,
            tools: &tools,
            append: &["extra".to_string(), "more".to_string()],
            context_files: &context,
            skills: Some("\n\nSkill list"),
            cwd: Path::new("/p"),
            guidelines: &[],
            sections: &[],
            package_dir: Path::new("/opt/pi"),
        });
        let names: Vec<&str> = prompt.sections().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "preamble",
                "tools",
                "rules",
                "docs",
                "addendum",
                "project_context",
                "skills",
                "cwd"
            ]
        );
        let section = |name: &str| {
            prompt
                .sections()
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.clone())
                .unwrap()
        };
        assert!(
            section("tools")
                .starts_with("<tools>\n- read: Read file contents\n- bash: Run shell commands\n\n")
        );
        assert_eq!(
            section("rules"),
            "<rules>\n- Use bash for file operations such as ls, rg and find\n\
             - Use read to look at files\n- Keep your answers concise\n\
             - Show file paths clearly when you work with files\n</rules>"
        );
        assert_eq!(
            section("addendum"),
            "<addendum>\nextra\n\nmore\n</addendum>"
        );
        // pi 1.6.0's docs section: the package folder's README.md, docs/ and examples/.
        let docs = section("docs");
        assert!(
            docs.starts_with("<docs>\npi's documentation (read it only when"),
            "{docs}"
        );
        for line in [
            "- Main documentation: /opt/pi/README.md",
            "- Further docs: /opt/pi/docs",
            "- Examples: /opt/pi/examples (extensions, custom tools, SDK)",
        ] {
            assert!(docs.lines().any(|l| l == line), "{line}: {docs}");
        }
        assert!(docs.contains("MCP servers (docs/mcp.md)"), "{docs}");
        assert!(section("project_context").ends_with(
            "\n\n<project_instructions path=\"/p/AGENTS.md\">\nbe nice\n</project_instructions>\n\
             </project_context>"
        ));
        assert_eq!(section("skills"), "<skills>\nSkill list\n</skills>");
        assert_eq!(section("cwd"), "<cwd>\n/p\n</cwd>");
        let joined: Vec<String> = prompt.sections().iter().map(|(_, t)| t.clone()).collect();
        assert_eq!(prompt.text(), joined.join("\n\n"));
        assert!(prompt.text().ends_with("\n\n<cwd>\n/p\n</cwd>"));
        let moved = prompt.with_cwd(Path::new("/q"));
        assert_eq!(
            moved.text(),
            format!(
                "{}/q\n</cwd>",
                prompt.text().strip_suffix("/p\n</cwd>").unwrap()
            )
        );
    }

    #[test]
    fn a_section_set_later_keeps_the_options_and_joins_their_sections() {
        let options = PromptOptions {
            selected_tools: vec!["read".into()],
            cwd: "/p".into(),
            ..PromptOptions::default()
        };
        let prompt = from_options(options).with_section(
            "mcp_servers",
            Some("<mcp_servers>\nMCP servers\n</mcp_servers>".into()),
        );
        assert!(
            prompt
                .text()
                .ends_with("<mcp_servers>\nMCP servers\n</mcp_servers>")
        );
        let options = prompt.options().expect("the options survive a new section");
        assert_eq!(options.sections["mcp_servers"], "MCP servers");
        let rebuilt = from_options(options.clone());
        assert_eq!(rebuilt.text(), prompt.text());
        let removed = prompt.with_section("mcp_servers", None);
        assert!(
            !removed
                .options()
                .unwrap()
                .sections
                .contains_key("mcp_servers")
        );
        assert!(!removed.text().contains("mcp_servers"));
    }

    #[test]
    fn options_build_the_prompt_with_sections_guidelines_and_hidden_tools() {
        let mut options = PromptOptions {
            selected_tools: vec!["read".into(), "bash".into(), "secret".into()],
            hidden_tools: vec!["secret".into()],
            cwd: "/p".into(),
            prompt_guidelines: vec!["Answer in haiku".into()],
            append_system_prompt: "extra".into(),
            ..PromptOptions::default()
        };
        for name in ["read", "bash", "secret"] {
            options
                .tool_snippets
                .insert(name.into(), format!("{name} things").into());
        }
        options.sections.insert("team".into(), "Team rules".into());
        options
            .sections
            .insert("addendum".into(), "replaced".into());
        options.sections.insert("empty".into(), "".into());
        let prompt = from_options(options.clone());
        let names: Vec<&str> = prompt.sections().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "preamble", "tools", "rules", "docs", "addendum", "cwd", "team"
            ]
        );
        let text = prompt.text();
        assert!(
            text.contains("- read: read things\n- bash: bash things\n"),
            "{text}"
        );
        assert!(!text.contains("secret"), "{text}");
        assert!(
            text.contains("- Answer in haiku\n- Keep your answers concise"),
            "{text}"
        );
        assert!(text.contains("<addendum>\nreplaced\n</addendum>"), "{text}");
        assert!(
            text.ends_with("</cwd>\n\n<team>\nTeam rules\n</team>"),
            "{text}"
        );
        assert_eq!(prompt.options(), Some(&options));

        options.sections.insert("Bad Name".into(), "x".into());
        assert_eq!(
            options.check(),
            Err("Invalid system prompt section name: Bad Name".into())
        );
        options.sections.clear();
        options.sections.insert("preamble".into(), "x".into());
        assert!(options.check().is_err());
    }

    #[test]
    fn a_custom_prompt_replaces_preamble_tools_and_rules() {
        let prompt = build(&PromptInputs {
            custom: Some("Be a test double."),
            tools: &[],
            append: &[],
            context_files: &[],
            skills: None,
            cwd: Path::new("/p"),
            guidelines: &[],
            sections: &[],
            package_dir: Path::new("/opt/pi"),
        });
        assert_eq!(prompt.text(), "Be a test double.\n\n<cwd>\n/p\n</cwd>");
    }
}
