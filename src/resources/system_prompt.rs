//! The system prompt, laid out as pi 1.6.0 lays it out, in pi-rs's own words: named sections in a
//! fixed order — `preamble` (the intro, or the custom prompt), `tools` (the active tools with
//! their one-line summaries), `rules` (guidelines), `addendum` (appended text), `project_context`
//! (context files), `skills`, `cwd` — each but the preamble wrapped in `<name>…</name>`, and
//! rendered joined by blank lines. The sections are what the transcript's system message carries
//! (`agent::system_message`). `for_run` gathers a run's parts (flags, SYSTEM.md and
//! APPEND_SYSTEM.md, context files, tool summaries, skills); `build` lays them out. pi 1.6.0's
//! `docs` section points at the documentation installed with pi; pi-rs installs none, so it has
//! no such section.

use std::path::Path;

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
}

/// A system prompt as its named sections, in order, and their rendering.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SystemPrompt {
    sections: Vec<(String, String)>,
    text: String,
}

impl SystemPrompt {
    pub fn from_sections(sections: Vec<(String, String)>) -> SystemPrompt {
        let text = sections
            .iter()
            .map(|(_, text)| text.as_str())
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n");
        SystemPrompt { sections, text }
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
        match (position, text) {
            (Some(index), Some(text)) => sections[index].1 = text,
            (None, Some(text)) => sections.push((name.to_string(), text)),
            (Some(index), None) => {
                sections.remove(index);
            }
            (None, None) => {}
        }
        SystemPrompt::from_sections(sections)
    }

    /// This prompt with its working-directory section naming `cwd`: a session switched to
    /// another directory moves the agent there.
    pub fn with_cwd(&self, cwd: &Path) -> SystemPrompt {
        let mut sections = self.sections.clone();
        match sections.iter_mut().find(|(name, _)| name == "cwd") {
            Some(section) => section.1 = cwd_section(cwd),
            None => sections.push(("cwd".to_string(), cwd_section(cwd))),
        }
        SystemPrompt::from_sections(sections)
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
            add("rules", rules(inputs.tools));
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

/// The guideline bullets: how to explore files when only bash can, each tool's own guidelines,
/// then two general ones; trimmed, empty and repeated lines dropped.
fn rules(tools: &[ToolLine]) -> String {
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
    let cwd = sources.cwd;
    let custom = match sources.system_prompt {
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
    let extension_guidelines: Vec<Vec<&str>> = extension_tools
        .iter()
        .map(|t| {
            t.decl
                .prompt_guidelines
                .iter()
                .map(String::as_str)
                .collect()
        })
        .collect();
    // An extension tool named like a builtin replaces it (its own snippet, not the builtin's).
    let mut tool_lines: Vec<ToolLine> = tool_names
        .iter()
        .filter(|name| !extension_tools.iter().any(|t| t.decl.name == **name))
        .map(|name| {
            let (snippet, guidelines) = match crate::tools::prompt_info(name) {
                Some((snippet, guidelines)) => (Some(snippet), guidelines),
                None => (None, &[][..]),
            };
            ToolLine {
                name,
                snippet,
                guidelines,
            }
        })
        .collect();
    tool_lines.extend(extension_tools.iter().zip(&extension_guidelines).map(
        |(tool, guidelines)| ToolLine {
            name: &tool.decl.name,
            snippet: tool.decl.prompt_snippet.as_deref(),
            guidelines,
        },
    ));
    // Skills are offered only when the model can read their files: with `read`, else with
    // `bash` (pi 1.6.0).
    let reader = ["read", "bash"]
        .into_iter()
        .find(|reader| tool_names.iter().any(|t| t == reader));
    let skills =
        reader.and_then(|reader| super::skills::skills_prompt_block(&loaded.skills, reader));
    build(&PromptInputs {
        custom: custom.as_deref(),
        tools: &tool_lines,
        append: &append,
        context_files: &context_files,
        skills: skills.as_deref(),
        cwd,
    })
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
        });
        let names: Vec<&str> = prompt.sections().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "preamble",
                "tools",
                "rules",
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
    fn a_custom_prompt_replaces_preamble_tools_and_rules() {
        let prompt = build(&PromptInputs {
            custom: Some("Be a test double."),
            tools: &[],
            append: &[],
            context_files: &[],
            skills: None,
            cwd: Path::new("/p"),
        });
        assert_eq!(prompt.text(), "Be a test double.\n\n<cwd>\n/p\n</cwd>");
    }
}
