//! Skills (FACTS §13.2): markdown instruction files the model may read on demand. Owns reading
//! one skill file (frontmatter `name`, `description`, `disable-model-invocation`), walking a
//! skills directory (a directory holding `SKILL.md` is one skill; loose `*.md` files count only at
//! the top of a pi skills dir), the `<available_skills>` block of the system prompt, and the
//! `/skill:name args` expansion. Discovery order and collisions live in `discovery.rs`.

use std::fmt;
use std::path::{Path, PathBuf};

use super::files::{SourceInfo, read_dir_sorted};
use super::frontmatter::{YamlValue, parse_frontmatter, strip_frontmatter};
use crate::ignore::{IgnoreRules, IgnoreStyle, PI_RESOURCE_FILES};
use crate::js::js_trim;

const MAX_NAME_LENGTH: usize = 64;
const MAX_DESCRIPTION_LENGTH: usize = 1024;

/// One loaded skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// Absolute path of the skill's markdown file (`…/SKILL.md` or a loose `*.md`).
    pub file_path: String,
    /// The directory holding that file; relative references in the skill resolve against it.
    pub base_dir: String,
    /// `disable-model-invocation: true`: usable as `/skill:name`, hidden from the system prompt.
    pub disable_model_invocation: bool,
    pub source_info: SourceInfo,
}

/// Where a skill came from when nothing better is known (pi's `createSkillSourceInfo`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SkillOrigin {
    User,
    Project,
    Path,
}

/// Reads one skill file. `None` when it is unreadable, its frontmatter is rejected, or it has no
/// description; spec violations that still load (name rules, long description) are warnings.
pub(crate) fn load_skill_from_file(
    path: &Path,
    origin: SkillOrigin,
    warnings: &mut Vec<String>,
) -> Option<Skill> {
    let file_path = path.to_string_lossy().into_owned();
    let warn = |warnings: &mut Vec<String>, message: String| {
        warnings.push(format!("{file_path}: {message}"));
    };
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            warn(warnings, e.to_string());
            return None;
        }
    };
    let frontmatter = match parse_frontmatter(&text) {
        Ok(parsed) => parsed.frontmatter,
        Err(e) => {
            warn(warnings, e.to_string());
            return None;
        }
    };
    let skill_dir = path.parent().unwrap_or(Path::new("/"));
    let parent_name = skill_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let description = match frontmatter.get("description") {
        None | Some(YamlValue::Null) | Some(YamlValue::Bool(false)) => None,
        Some(YamlValue::String(s)) => Some(s.clone()),
        // pi calls `.trim()` on it and fails: the file is skipped.
        Some(_) => {
            warn(warnings, "description is not a string".into());
            return None;
        }
    };
    match &description {
        Some(d) if !js_trim(d).is_empty() => {
            let length = d.encode_utf16().count();
            if length > MAX_DESCRIPTION_LENGTH {
                warn(
                    warnings,
                    format!("description exceeds {MAX_DESCRIPTION_LENGTH} characters ({length})"),
                );
            }
        }
        _ => warn(warnings, "description is required".into()),
    }
    let name = match frontmatter.get("name") {
        Some(YamlValue::String(s)) if !s.is_empty() => s.clone(),
        None
        | Some(YamlValue::Null)
        | Some(YamlValue::Bool(false))
        | Some(YamlValue::String(_)) => parent_name.clone(),
        Some(_) => {
            warn(warnings, "name is not a string".into());
            return None;
        }
    };
    for problem in name_problems(&name, &parent_name) {
        warn(warnings, problem);
    }
    let description = description.filter(|d| !js_trim(d).is_empty())?;
    let base_dir = skill_dir.to_string_lossy().into_owned();
    let source_info = match origin {
        SkillOrigin::User => SourceInfo::synthetic(&file_path, "local", Some("user"), &base_dir),
        SkillOrigin::Project => {
            SourceInfo::synthetic(&file_path, "local", Some("project"), &base_dir)
        }
        SkillOrigin::Path => SourceInfo::synthetic(&file_path, "local", None, &base_dir),
    };
    Some(Skill {
        name,
        description,
        file_path,
        base_dir,
        disable_model_invocation: frontmatter.is_true("disable-model-invocation"),
        source_info,
    })
}

/// Agent Skills naming rules; breaking them only produces warnings.
fn name_problems(name: &str, parent_name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if name != parent_name {
        problems.push(format!(
            "name \"{name}\" does not match parent directory \"{parent_name}\""
        ));
    }
    let length = name.encode_utf16().count();
    if length > MAX_NAME_LENGTH {
        problems.push(format!(
            "name exceeds {MAX_NAME_LENGTH} characters ({length})"
        ));
    }
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        problems.push(
            "name contains invalid characters (must be lowercase a-z, 0-9, hyphens only)".into(),
        );
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push("name must not start or end with a hyphen".into());
    }
    if name.contains("--") {
        problems.push("name must not contain consecutive hyphens".into());
    }
    problems
}

/// The skill files under `dir`, in pi's order: a `SKILL.md` in `dir` is the only result; else
/// loose `*.md` files of the top directory (when `root_markdown`, i.e. a pi skills dir) and the
/// skills of each subdirectory, in name order. Dot-entries, `node_modules` and paths matched by
/// `.gitignore`/`.ignore`/`.fdignore` rules are skipped.
pub(crate) fn collect_skill_files(dir: &Path, root_markdown: bool) -> Vec<PathBuf> {
    let mut rules = IgnoreRules::new(IgnoreStyle::PiResources);
    let mut files = Vec::new();
    collect_skill_files_inner(dir, dir, root_markdown, &mut rules, &mut files);
    files
}

fn collect_skill_files_inner(
    dir: &Path,
    root: &Path,
    root_markdown: bool,
    rules: &mut IgnoreRules,
    files: &mut Vec<PathBuf>,
) {
    if !dir.exists() {
        return;
    }
    rules.add_dir(dir, root, PI_RESOURCE_FILES);
    let entries = read_dir_sorted(dir);
    let skill_file = dir.join("SKILL.md");
    if entries.iter().any(|(name, _)| name == "SKILL.md")
        && skill_file.is_file()
        && !rules.ignores(&relative_posix(root, &skill_file), false)
    {
        files.push(skill_file);
        return;
    }
    for (name, path) in entries {
        if name.starts_with('.') || name == "node_modules" {
            continue;
        }
        // Follows symlinks; a broken link is neither and is skipped.
        let is_dir = path.is_dir();
        let is_file = path.is_file();
        let relative = relative_posix(root, &path);
        if is_dir {
            if !rules.ignores(&relative, true) {
                collect_skill_files_inner(&path, root, false, rules, files);
            }
        } else if is_file
            && root_markdown
            && dir == root
            && name.ends_with(".md")
            && !rules.ignores(&relative, false)
        {
            files.push(path);
        }
    }
}

fn relative_posix(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// The system-prompt block listing the skills the model may load (those not hidden by
/// `disable-model-invocation`), or `None` when there are none. The text starts with the blank
/// line that separates it from what precedes it, so it is appended as is.
/// The skills section's text; `reader` is the tool the model loads a skill's file with (`read`,
/// else `bash`, as pi 1.6.0 names it).
pub fn skills_prompt_block(skills: &[Skill], reader: &str) -> Option<String> {
    let visible: Vec<&Skill> = skills
        .iter()
        .filter(|s| !s.disable_model_invocation)
        .collect();
    if visible.is_empty() {
        return None;
    }
    let mut lines = vec![
        "The skills below hold focused instructions for particular kinds of tasks.".to_string(),
        if reader == "bash" {
            "When a task fits a skill's description, load that skill's file with bash first."
                .to_string()
        } else {
            "When a task fits a skill's description, load that skill's file with the read tool first."
                .to_string()
        },
        "Paths mentioned inside a skill file are relative to the skill's directory (the folder holding the file); turn them into absolute paths before using them in tool calls."
            .to_string(),
        String::new(),
        "<available_skills>".to_string(),
    ];
    for skill in visible {
        lines.push("  <skill>".into());
        lines.push(format!("    <name>{}</name>", escape_xml(&skill.name)));
        lines.push(format!(
            "    <description>{}</description>",
            escape_xml(&skill.description)
        ));
        lines.push(format!(
            "    <location>{}</location>",
            escape_xml(&skill.file_path)
        ));
        lines.push("  </skill>".into());
    }
    lines.push("</available_skills>".into());
    Some(lines.join("\n"))
}

fn escape_xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

/// A `/skill:name` whose file could not be read (or parsed) at expansion time. The caller emits
/// `extension_error{extensionPath: path, event: "skill_expansion", error: message}` and sends the
/// text unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpansionError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for ExpansionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for ExpansionError {}

/// Expands `/skill:<name> [args]` into the skill's body wrapped in a `<skill>` element; other
/// texts and unknown names come back unchanged.
pub fn expand_skill_command(text: &str, skills: &[Skill]) -> Result<String, ExpansionError> {
    let Some(rest) = text.strip_prefix("/skill:") else {
        return Ok(text.to_string());
    };
    let (name, args) = match rest.find(' ') {
        Some(space) => (&rest[..space], js_trim(&rest[space + 1..])),
        None => (rest, ""),
    };
    let Some(skill) = skills.iter().find(|s| s.name == name) else {
        return Ok(text.to_string());
    };
    let fail = |message: String| ExpansionError {
        path: skill.file_path.clone(),
        message,
    };
    let bytes =
        std::fs::read(&skill.file_path).map_err(|e| fail(node_read_error(&e, &skill.file_path)))?;
    let content = String::from_utf8_lossy(&bytes);
    let body = strip_frontmatter(&content).map_err(|e| fail(e.to_string()))?;
    let body = js_trim(&body);
    let block = format!(
        "<skill name=\"{}\" location=\"{}\">\nReferences are relative to {}.\n\n{}\n</skill>",
        skill.name, skill.file_path, skill.base_dir, body
    );
    Ok(if args.is_empty() {
        block
    } else {
        format!("{block}\n\n{args}")
    })
}

/// The message Node's `readFileSync` gives for the common failures, which clients see in the
/// `extension_error` event.
fn node_read_error(error: &std::io::Error, path: &str) -> String {
    match error.raw_os_error() {
        Some(libc::ENOENT) => format!("ENOENT: no such file or directory, open '{path}'"),
        Some(libc::EACCES) => format!("EACCES: permission denied, open '{path}'"),
        Some(libc::EISDIR) => "EISDIR: illegal operation on a directory, read".to_string(),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::temp_dir;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn skill(name: &str, description: &str, hidden: bool) -> Skill {
        Skill {
            name: name.into(),
            description: description.into(),
            file_path: format!("/s/{name}/SKILL.md"),
            base_dir: format!("/s/{name}"),
            disable_model_invocation: hidden,
            source_info: SourceInfo::default(),
        }
    }

    #[test]
    fn skill_dirs_stop_at_skill_md_and_take_loose_files_only_at_the_top() {
        let root = temp_dir("walk");
        write(&root.join("loose.md"), "x");
        write(&root.join("a/SKILL.md"), "x");
        write(&root.join("a/nested/SKILL.md"), "x");
        write(&root.join("a/other.md"), "x");
        write(&root.join("group/b/SKILL.md"), "x");
        write(&root.join("group/loose.md"), "x");
        write(&root.join(".hidden/SKILL.md"), "x");
        write(&root.join("node_modules/c/SKILL.md"), "x");
        write(&root.join("ignored/SKILL.md"), "x");
        write(&root.join(".gitignore"), "ignored/\n");
        let found: Vec<String> = collect_skill_files(&root, true)
            .iter()
            .map(|p| relative_posix(&root, p))
            .collect();
        assert_eq!(found, vec!["a/SKILL.md", "group/b/SKILL.md", "loose.md"]);
        let agents: Vec<String> = collect_skill_files(&root, false)
            .iter()
            .map(|p| relative_posix(&root, p))
            .collect();
        assert_eq!(agents, vec!["a/SKILL.md", "group/b/SKILL.md"]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn skill_file_rules() {
        let root = temp_dir("file");
        let mut warnings = Vec::new();
        write(
            &root.join("ok/SKILL.md"),
            "---\ndescription: Does things\ndisable-model-invocation: true\n---\nBody",
        );
        let s = load_skill_from_file(&root.join("ok/SKILL.md"), SkillOrigin::Path, &mut warnings)
            .unwrap();
        assert_eq!(s.name, "ok");
        assert!(s.disable_model_invocation);
        assert!(warnings.is_empty(), "{warnings:?}");
        write(
            &root.join("nodesc/SKILL.md"),
            "---\nname: nodesc\n---\nBody",
        );
        assert!(
            load_skill_from_file(
                &root.join("nodesc/SKILL.md"),
                SkillOrigin::Path,
                &mut warnings
            )
            .is_none()
        );
        assert!(warnings[0].ends_with("description is required"));
        warnings.clear();
        write(
            &root.join("Bad_Dir/SKILL.md"),
            "---\nname: Other\ndescription: d\n---\n",
        );
        let s = load_skill_from_file(
            &root.join("Bad_Dir/SKILL.md"),
            SkillOrigin::Path,
            &mut warnings,
        )
        .unwrap();
        assert_eq!(s.name, "Other");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        warnings.clear();
        write(
            &root.join("colon/SKILL.md"),
            "---\ndescription: use when: x\n---\n",
        );
        assert!(
            load_skill_from_file(
                &root.join("colon/SKILL.md"),
                SkillOrigin::Path,
                &mut warnings
            )
            .is_none()
        );
        assert_eq!(warnings.len(), 1);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn prompt_block_lists_visible_skills_escaped() {
        assert_eq!(
            skills_prompt_block(&[skill("h", "hidden", true)], "read"),
            None
        );
        let skills = [
            skill("a", "Tom & Jerry <\"x\"> 'y'", false),
            skill("h", "hidden", true),
        ];
        let block = skills_prompt_block(&skills, "read").unwrap();
        let lines: Vec<&str> = block.lines().collect();
        assert!(lines[0..3].iter().all(|l| !l.is_empty()));
        assert!(lines[1].contains("the read tool"), "{block}");
        let with_bash = skills_prompt_block(&skills, "bash").unwrap();
        assert!(with_bash.lines().nth(1).unwrap().contains("with bash"));
        assert_eq!(
            lines[3..].join("\n"),
            "\n<available_skills>\n  <skill>\n    <name>a</name>\n    <description>Tom &amp; Jerry &lt;&quot;x&quot;&gt; &apos;y&apos;</description>\n    <location>/s/a/SKILL.md</location>\n  </skill>\n</available_skills>"
        );
    }

    #[test]
    fn expansion_wraps_body_and_reports_read_errors() {
        let root = temp_dir("expand");
        write(
            &root.join("a/SKILL.md"),
            "---\ndescription: d\n---\n\n  Do it.\n\n",
        );
        let mut s = skill("a", "d", false);
        s.file_path = root.join("a/SKILL.md").to_string_lossy().into_owned();
        s.base_dir = root.join("a").to_string_lossy().into_owned();
        let skills = vec![s.clone()];
        let expected = format!(
            "<skill name=\"a\" location=\"{}\">\nReferences are relative to {}.\n\nDo it.\n</skill>",
            s.file_path, s.base_dir
        );
        assert_eq!(expand_skill_command("/skill:a", &skills).unwrap(), expected);
        assert_eq!(
            expand_skill_command("/skill:a   some  args  ", &skills).unwrap(),
            format!("{expected}\n\nsome  args")
        );
        assert_eq!(
            expand_skill_command("/skill:zz x", &skills).unwrap(),
            "/skill:zz x"
        );
        assert_eq!(expand_skill_command("hello", &skills).unwrap(), "hello");
        std::fs::remove_file(root.join("a/SKILL.md")).unwrap();
        let err = expand_skill_command("/skill:a", &skills).unwrap_err();
        assert_eq!(err.path, s.file_path);
        assert_eq!(
            err.message,
            format!("ENOENT: no such file or directory, open '{}'", s.file_path)
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
    /// Files and expected texts checked against pi 0.73.1's expansion run under Node (CRLF,
    /// no frontmatter, JavaScript-only whitespace such as NBSP/EM SPACE/BOM around the body).
    #[test]
    fn expansion_matches_pi_byte_for_byte() {
        let root = temp_dir("exact");
        write(
            &root.join("crlf/SKILL.md"),
            "---\r\ndescription: d\r\n---\r\n\r\n  Line one\r\n\r\nLine two  \r\n",
        );
        write(
            &root.join("nofm/SKILL.md"),
            "No frontmatter here\n\n  indented\n\n",
        );
        write(
            &root.join("uni/SKILL.md"),
            "---\ndescription: \"u\"\n---\n\u{a0}\u{2003}Unicode body \u{1f600}\n\u{feff}",
        );
        let skills: Vec<Skill> = ["crlf", "nofm", "uni"]
            .iter()
            .map(|n| Skill {
                name: n.to_string(),
                description: "d".into(),
                file_path: root.join(n).join("SKILL.md").to_string_lossy().into_owned(),
                base_dir: root.join(n).to_string_lossy().into_owned(),
                disable_model_invocation: false,
                source_info: SourceInfo::default(),
            })
            .collect();
        let head = |n: &str| {
            format!(
                "<skill name=\"{n}\" location=\"{}\">\nReferences are relative to {}.\n\n",
                root.join(n).join("SKILL.md").display(),
                root.join(n).display()
            )
        };
        let cases = [
            (
                "/skill:crlf",
                format!("{}Line one\n\nLine two\n</skill>", head("crlf")),
            ),
            (
                "/skill:crlf  my args \t ",
                format!("{}Line one\n\nLine two\n</skill>\n\nmy args", head("crlf")),
            ),
            (
                "/skill:nofm x",
                format!(
                    "{}No frontmatter here\n\n  indented\n</skill>\n\nx",
                    head("nofm")
                ),
            ),
            (
                "/skill:uni",
                format!("{}Unicode body \u{1f600}\n</skill>", head("uni")),
            ),
            ("/skill:", "/skill:".to_string()),
            ("/skill:crlf\targ", "/skill:crlf\targ".to_string()),
        ];
        for (input, expected) in cases {
            assert_eq!(
                expand_skill_command(input, &skills).unwrap(),
                expected,
                "{input:?}"
            );
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
