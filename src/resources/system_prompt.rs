//! The system prompt, laid out as pi lays it out (FACTS §6), in pi-rs's own words: intro, the
//! active tools with their one-line summaries, guidelines, appended text, project context files,
//! then the date and working directory.

use std::path::Path;

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
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Howard Hinnant's days → (year, month, day) algorithm.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
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

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
