//! What surrounds the agent: the system prompt (FACTS §6) and the files that feed it — a custom
//! prompt (`--system-prompt`, `.pi/SYSTEM.md`, `<agentDir>/SYSTEM.md`), appended text
//! (`--append-system-prompt`, `APPEND_SYSTEM.md`) and context files (AGENTS.md / CLAUDE.md from
//! the agent dir and from the filesystem root down to the working directory).

pub mod discovery;
pub mod files;
pub mod frontmatter;
pub mod prompt_templates;
pub mod skills;
pub mod system_prompt;

use std::path::{Path, PathBuf};

/// A prompt input that names an existing file is read; anything else is the text itself.
pub fn text_or_file(value: &str, cwd: &Path) -> String {
    let path = cwd.join(value);
    if path.is_file()
        && let Ok(text) = std::fs::read_to_string(&path)
    {
        return text;
    }
    value.to_string()
}

/// The first existing of `<cwd>/.pi/<name>` (only for a trusted project), `<agentDir>/<name>`.
pub fn discover_prompt_file(
    name: &str,
    cwd: &Path,
    agent_dir: &Path,
    project_trusted: bool,
) -> Option<String> {
    let project = project_trusted.then(|| cwd.join(".pi").join(name));
    project
        .into_iter()
        .chain([agent_dir.join(name)])
        .find_map(|p| std::fs::read_to_string(p).ok())
}

/// The first of these in a folder is its context file (`AGENTS.override.md` first, as pi 1.6.0).
const CONTEXT_FILE_NAMES: [&str; 5] = [
    "AGENTS.override.md",
    "AGENTS.md",
    "AGENTS.MD",
    "CLAUDE.md",
    "CLAUDE.MD",
];

/// Context files as (absolute path, content): the agent dir's first, then one per directory from
/// the root down to `cwd`, each directory contributing the first name that exists.
pub fn context_files(cwd: &Path, agent_dir: &Path) -> Vec<(String, String)> {
    let mut dirs: Vec<PathBuf> = vec![agent_dir.to_path_buf()];
    let mut ancestors: Vec<&Path> = cwd.ancestors().collect();
    ancestors.reverse();
    dirs.extend(ancestors.into_iter().map(Path::to_path_buf));
    let mut found: Vec<(String, String)> = Vec::new();
    for dir in dirs {
        for name in CONTEXT_FILE_NAMES {
            let path = dir.join(name);
            let Ok(content) = std::fs::read_to_string(&path) else {
                continue;
            };
            let path = path.to_string_lossy().into_owned();
            if !found.iter().any(|(p, _)| *p == path) {
                found.push((path, content));
            }
            break;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_files_come_from_agent_dir_then_root_to_cwd() {
        let base = std::env::temp_dir().join(format!("pi-rs-ctx-{}", std::process::id()));
        let agent = base.join("agent");
        let project = base.join("project");
        let sub = project.join("sub");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(agent.join("AGENTS.md"), "global").unwrap();
        std::fs::write(project.join("CLAUDE.md"), "project").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "sub").unwrap();
        std::fs::write(sub.join("CLAUDE.md"), "ignored: AGENTS.md wins").unwrap();
        let files = context_files(&sub, &agent);
        let contents: Vec<&str> = files.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(contents, vec!["global", "project", "sub"]);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
