//! The system prompt, laid out as pi lays it out (FACTS §6), in pi-rs's own words: intro, the
//! active tools with their one-line summaries, guidelines, appended text, project context files,
//! then the date and working directory. `for_run` gathers a run's parts (flags, SYSTEM.md and
//! APPEND_SYSTEM.md, context files, tool summaries, skills); `build` lays them out.

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
    /// The skills block (already starting with its blank lines), when skills are offered.
    pub skills_block: Option<&'a str>,
    pub date: &'a str,
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

pub fn build(inputs: &PromptInputs) -> String {
    let mut prompt = match inputs.custom {
        Some(custom) => custom.to_string(),
        None => default_body(inputs.tools),
    };
    if !inputs.append.is_empty() {
        prompt.push_str("\n\n");
        prompt.push_str(&inputs.append.join("\n\n"));
    }
    if !inputs.context_files.is_empty() {
        prompt
            .push_str("\n\n# Project Context\n\nProject-specific instructions and guidelines:\n\n");
        for (path, content) in inputs.context_files {
            prompt.push_str(&format!("## {path}\n\n{content}\n\n"));
        }
    }
    if let Some(block) = inputs.skills_block {
        prompt.push_str(block);
    }
    prompt.push_str(&format!("\nCurrent date: {}", inputs.date));
    prompt.push_str(&cwd_line(inputs.cwd));
    prompt
}

const CWD_LINE: &str = "\nCurrent working directory: ";

fn cwd_line(cwd: &Path) -> String {
    format!("{CWD_LINE}{}", cwd.to_string_lossy().replace('\\', "/"))
}

/// `prompt` (as `build` made it) with its closing working-directory line naming `cwd` instead:
/// a session switched to another directory moves the agent there.
pub fn with_cwd(prompt: &str, cwd: &Path) -> String {
    let body = prompt.rfind(CWD_LINE).map_or(prompt, |at| &prompt[..at]);
    format!("{body}{}", cwd_line(cwd))
}

fn default_body(tools: &[ToolLine]) -> String {
    let mut body = String::from(
        "You are an expert coding assistant working inside pi, a coding agent harness. You help \
         users with their software projects by reading files, running commands, editing code and \
         writing new files.",
    );
    body.push_str("\n\nAvailable tools:\n");
    let listed: Vec<String> = tools
        .iter()
        .filter_map(|t| t.snippet.map(|s| format!("- {}: {s}", t.name)))
        .collect();
    if listed.is_empty() {
        body.push_str("(none)");
    } else {
        body.push_str(&listed.join("\n"));
    }
    body.push_str(
        "\n\nOther custom tools may also be available, depending on the project.\n\nGuidelines:\n",
    );
    let names: Vec<&str> = tools.iter().map(|t| t.name).collect();
    let mut guidelines: Vec<String> = Vec::new();
    let has = |n: &str| names.contains(&n);
    if has("bash") && !(has("grep") || has("find") || has("ls")) {
        guidelines.push("Use bash for file operations such as ls, rg and find".into());
    } else if has("bash") {
        guidelines.push(
            "Prefer the grep, find and ls tools over bash for exploring files: they are faster and \
             respect .gitignore"
                .into(),
        );
    }
    for tool in tools {
        for line in tool.guidelines {
            if !guidelines.iter().any(|g| g == line) {
                guidelines.push(line.to_string());
            }
        }
    }
    guidelines.push("Keep your answers concise".into());
    guidelines.push("Show file paths clearly when you work with files".into());
    let lines: Vec<String> = guidelines.iter().map(|g| format!("- {g}")).collect();
    body.push_str(&lines.join("\n"));
    body
}

/// Today's LOCAL date as YYYY-MM-DD, as pi formats `new Date()` with local getters (TZ and
/// /etc/localtime decide); falls back to the UTC date if the C library cannot convert.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let now = secs as libc::time_t;
    // SAFETY: localtime_r only writes into `local` (glibc and musl read TZ on first use).
    let converted = unsafe {
        let mut local: libc::tm = std::mem::zeroed();
        (!libc::localtime_r(&now, &mut local).is_null()).then_some(local)
    };
    if let Some(local) = converted {
        return format!(
            "{:04}-{:02}-{:02}",
            i64::from(local.tm_year) + 1900,
            local.tm_mon + 1,
            local.tm_mday
        );
    }
    let (y, m, d) = crate::time::civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The system prompt of a run: `--system-prompt` or SYSTEM.md (project ones only when trusted),
/// `--append-system-prompt` or APPEND_SYSTEM.md, context files (unless `--no-context-files`),
/// the active built-in and extension tools, and the skills when `read` is active.
pub fn for_run(
    sources: &RunSources,
    tool_names: &[String],
    extension_tools: &[ExtensionTool],
    loaded: &super::discovery::Resources,
) -> String {
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
    // Skills are offered only when the model can read them (`read` active), as pi does.
    let skills_block = tool_names
        .iter()
        .any(|t| t == "read")
        .then(|| super::skills::skills_prompt_block(&loaded.skills))
        .flatten();
    let date = today();
    build(&PromptInputs {
        custom: custom.as_deref(),
        tools: &tool_lines,
        append: &append,
        context_files: &context_files,
        skills_block: skills_block.as_deref(),
        date: &date,
        cwd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_pis_sections_in_order() {
        let tools = [
            ToolLine {
                name: "read",
                snippet: Some("Read file contents"),
                guidelines: &["Use read to look at files"],
            },
            ToolLine {
                name: "bash",
                snippet: Some("Run shell commands"),
                guidelines: &[],
            },
        ];
        let context = [("/p/AGENTS.md".to_string(), "be nice".to_string())];
        let prompt = build(&PromptInputs {
            custom: None,
            tools: &tools,
            append: &["extra".to_string()],
            context_files: &context,
            skills_block: None,
            date: "2026-01-02",
            cwd: Path::new("/p"),
        });
        let order = [
            "Available tools:\n- read: Read file contents\n- bash: Run shell commands",
            "Guidelines:",
            "- Use bash for file operations",
            "- Use read to look at files",
            "\n\nextra",
            "# Project Context",
            "## /p/AGENTS.md\n\nbe nice",
            "\nCurrent date: 2026-01-02",
            "\nCurrent working directory: /p",
        ];
        let mut at = 0;
        for part in order {
            let found = prompt[at..]
                .find(part)
                .unwrap_or_else(|| panic!("{part:?} missing after {at} in {prompt}"));
            at += found + part.len();
        }
        assert!(prompt.ends_with("Current working directory: /p"));
        let moved = with_cwd(&prompt, Path::new("/q"));
        assert_eq!(
            moved,
            format!(
                "{}/q",
                prompt
                    .strip_suffix("/p")
                    .expect("the cwd closes the prompt")
            )
        );
    }
}
