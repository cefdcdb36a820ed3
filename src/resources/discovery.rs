//! Finding skills and prompt templates (FACTS §13.1) and what the rest of pi-rs does with them:
//! [`load_resources`] walks the places pi looks, in pi's precedence order (first wins on a name
//! collision; losers become warnings); [`expand_input`] turns `/skill:name args` and
//! `/template args` message texts into what the model receives; [`commands_json`] lists both as
//! `get_commands` items. Loading happens once per call; nothing is cached or watched.
//!
//! Precedence: project settings paths (`.pi/settings.json` `skills`/`prompts`), project
//! auto-discovery (`<cwd>/.pi/skills`, `.agents/skills` of cwd and each ancestor up to the git
//! root, `<cwd>/.pi/prompts`), user settings paths, user auto-discovery (`<agentDir>/skills`,
//! `$HOME/.agents/skills`, `<agentDir>/prompts`), then `--skill` / `--prompt-template` paths.
//! `--no-skills` / `--no-prompt-templates` drop everything but the CLI paths.
//!
//! Then the files of pi packages (the packages module resolves them; they arrive in
//! `LoadOptions` with their `sourceInfo`).
//!
//! Simplifications (documented, not hidden): settings entries that are patterns (`!x`, `+x`,
//! `-x`, globs) are ignored instead of filtering the discovered files. Ignore files are read as pi reads them
//! (`crate::ignore`, `IgnoreStyle::PiResources`).

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value, json};

use super::files::{SourceInfo, read_dir_sorted};
use super::prompt_templates::{
    PromptTemplate, expand_template, load_template_from_file, load_templates_from_dir,
};
use super::skills::{
    ExpansionError, Skill, SkillOrigin, collect_skill_files, expand_skill_command,
    load_skill_from_file,
};
use crate::ignore::{IgnoreRules, IgnoreStyle, PI_RESOURCE_FILES};

/// Everything [`load_resources`] needs; the lead fills it from the CLI and settings.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub cwd: PathBuf,
    pub agent_dir: PathBuf,
    /// `$HOME` (for `~` and `$HOME/.agents/skills`).
    pub home: PathBuf,
    /// `skills` / `prompts` of `<cwd>/.pi/settings.json` (relative entries resolve against `<cwd>/.pi`).
    pub project_settings_skills: Vec<String>,
    pub project_settings_prompts: Vec<String>,
    /// `skills` / `prompts` of `<agentDir>/settings.json` (relative entries resolve against the agent dir).
    pub user_settings_skills: Vec<String>,
    pub user_settings_prompts: Vec<String>,
    /// `--skill` / `--prompt-template` values, in order (relative to cwd).
    pub cli_skills: Vec<String>,
    pub cli_prompt_templates: Vec<String>,
    pub no_skills: bool,
    pub no_prompt_templates: bool,
    /// The project is not trusted: `<cwd>/.pi/skills|prompts` and project `.agents/skills` are
    /// not discovered (see `config::trust`).
    pub skip_project: bool,
    /// Skill and prompt files of pi packages (resolved by the packages module), with their `sourceInfo`; they
    /// rank after every settings path and discovered file.
    pub package_skills: Vec<(PathBuf, SourceInfo)>,
    pub package_prompts: Vec<(PathBuf, SourceInfo)>,
}

/// The loaded skills and templates, deduplicated by name, in precedence order.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    pub skills: Vec<Skill>,
    pub templates: Vec<PromptTemplate>,
    /// Human-readable problems (unreadable files, spec violations, name collisions) for the log.
    pub warnings: Vec<String>,
}

/// One discovered file with how it was found.
#[derive(Debug, Clone)]
struct Found {
    path: PathBuf,
    meta: Meta,
}

#[derive(Debug, Clone)]
struct Meta {
    source: String,
    scope: String,
    /// "top-level" or "package".
    origin: String,
    base_dir: Option<PathBuf>,
}

impl Meta {
    /// pi's `resourcePrecedenceRank`: project settings, project auto, user settings, user auto,
    /// packages.
    fn rank(&self) -> u8 {
        if self.origin == "package" {
            return 4;
        }
        let scope_base = if self.scope == "project" { 0 } else { 2 };
        scope_base + u8::from(self.source != "local")
    }

    fn source_info(&self, path: &str) -> SourceInfo {
        SourceInfo {
            path: path.to_string(),
            source: self.source.clone(),
            scope: self.scope.clone(),
            origin: self.origin.clone(),
            base_dir: self
                .base_dir
                .as_ref()
                .map(|b| b.to_string_lossy().into_owned()),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Skills,
    Prompts,
}

/// Loads skills and prompt templates from every place pi looks.
pub fn load_resources(options: &LoadOptions) -> Resources {
    let mut warnings = Vec::new();
    let skills_found = discover(options, Kind::Skills);
    let prompts_found = discover(options, Kind::Prompts);
    let skills = load_skills(options, &skills_found, &mut warnings);
    let templates = load_prompts(options, &prompts_found, &mut warnings);
    Resources {
        skills,
        templates,
        warnings,
    }
}

/// Settings entries and auto-discovered files of one kind, sorted by precedence and deduplicated
/// by real path (pi's `DefaultPackageManager.resolve`).
fn discover(options: &LoadOptions, kind: Kind) -> Vec<Found> {
    let project_base = options.cwd.join(".pi");
    let user_base = options.agent_dir.clone();
    let (project_entries, user_entries) = match kind {
        Kind::Skills => (
            &options.project_settings_skills,
            &options.user_settings_skills,
        ),
        Kind::Prompts => (
            &options.project_settings_prompts,
            &options.user_settings_prompts,
        ),
    };
    let local = |scope: &str| Meta {
        source: "local".into(),
        scope: scope.into(),
        origin: "top-level".into(),
        base_dir: None,
    };
    let auto = |scope: &str, base: &Path| Meta {
        source: "auto".into(),
        scope: scope.into(),
        origin: "top-level".into(),
        base_dir: Some(base.to_path_buf()),
    };
    let mut found: Vec<Found> = Vec::new();
    let mut add = |paths: Vec<PathBuf>, meta: Meta| {
        for path in paths {
            if !found.iter().any(|f| f.path == path) {
                found.push(Found {
                    path,
                    meta: meta.clone(),
                });
            }
        }
    };
    add(
        settings_files(project_entries, &project_base, &options.home, kind),
        local("project"),
    );
    add(
        settings_files(user_entries, &user_base, &options.home, kind),
        local("user"),
    );
    let user_agents_skills = options.home.join(".agents").join("skills");
    match kind {
        Kind::Skills => {
            if !options.skip_project {
                let mut project = collect_skill_files(&project_base.join("skills"), true);
                for dir in ancestor_agents_skill_dirs(&options.cwd) {
                    if normalize(&dir) != normalize(&user_agents_skills) {
                        project.extend(collect_skill_files(&dir, false));
                    }
                }
                add(project, auto("project", &project_base));
            }
            let mut user = collect_skill_files(&user_base.join("skills"), true);
            user.extend(collect_skill_files(&user_agents_skills, false));
            add(user, auto("user", &user_base));
        }
        Kind::Prompts => {
            if !options.skip_project {
                add(
                    collect_prompt_files(&project_base.join("prompts")),
                    auto("project", &project_base),
                );
            }
            add(
                collect_prompt_files(&user_base.join("prompts")),
                auto("user", &user_base),
            );
        }
    }
    let packages = match kind {
        Kind::Skills => &options.package_skills,
        Kind::Prompts => &options.package_prompts,
    };
    for (path, info) in packages {
        add(
            vec![path.clone()],
            Meta {
                source: info.source.clone(),
                scope: info.scope.clone(),
                origin: info.origin.clone(),
                base_dir: info.base_dir.as_ref().map(PathBuf::from),
            },
        );
    }
    found.sort_by_key(|f| f.meta.rank());
    let mut seen = HashSet::new();
    found.retain(|f| seen.insert(canonical(&f.path)));
    found
}

/// pi's `isPattern`: settings entries that filter rather than name a path.
fn is_pattern(entry: &str) -> bool {
    entry.starts_with(['!', '+', '-']) || entry.contains(['*', '?'])
}

/// The files named by plain settings entries: a file as is, a directory walked (skills: the skill
/// walk; prompts: every `*.md` below it, recursively).
fn settings_files(entries: &[String], base: &Path, home: &Path, kind: Kind) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in entries.iter().filter(|e| !is_pattern(e)) {
        let path = resolve_user_path(entry, base, home);
        if path.is_file() {
            files.push(path);
        } else if path.is_dir() {
            match kind {
                Kind::Skills => files.extend(collect_skill_files(&path, true)),
                Kind::Prompts => files.extend(markdown_files_below(&path)),
            }
        }
    }
    files
}

/// Every `*.md` below a folder, depth first in name order (a package's prompts folder).
pub(crate) fn markdown_files_below(dir: &Path) -> Vec<PathBuf> {
    let mut rules = IgnoreRules::new(IgnoreStyle::PiResources);
    let mut files = Vec::new();
    collect_markdown_recursive(dir, dir, &mut rules, &mut files);
    files
}

fn collect_markdown_recursive(
    dir: &Path,
    root: &Path,
    rules: &mut IgnoreRules,
    files: &mut Vec<PathBuf>,
) {
    rules.add_dir(dir, root, PI_RESOURCE_FILES);
    for (name, path) in read_dir_sorted(dir) {
        if name.starts_with('.') || name == "node_modules" {
            continue;
        }
        let relative = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        let is_dir = path.is_dir();
        if rules.ignores(&relative, is_dir) {
            continue;
        }
        if is_dir {
            collect_markdown_recursive(&path, root, rules, files);
        } else if path.is_file() && name.ends_with(".md") {
            files.push(path);
        }
    }
}

/// `*.md` files directly in an auto-discovered prompts directory.
fn collect_prompt_files(dir: &Path) -> Vec<PathBuf> {
    let mut rules = IgnoreRules::new(IgnoreStyle::PiResources);
    rules.add_dir(dir, dir, PI_RESOURCE_FILES);
    read_dir_sorted(dir)
        .into_iter()
        .filter(|(name, path)| {
            !name.starts_with('.')
                && name != "node_modules"
                && !rules.ignores(name, false)
                && name.ends_with(".md")
                && path.is_file()
        })
        .map(|(_, path)| path)
        .collect()
}

/// `<dir>/.agents/skills` for cwd and each ancestor, stopping at the git root (or `/`).
fn ancestor_agents_skill_dirs(cwd: &Path) -> Vec<PathBuf> {
    let start = normalize(cwd);
    let git_root = start.ancestors().find(|d| d.join(".git").exists());
    let mut dirs = Vec::new();
    for dir in start.ancestors() {
        dirs.push(dir.join(".agents").join("skills"));
        if Some(dir) == git_root {
            break;
        }
    }
    dirs
}

/// pi's `resolveSkillPath`-style order: a list of file paths from discovery, then CLI paths.
fn merged_paths(
    found: &[Found],
    disabled: bool,
    cli: &[String],
    options: &LoadOptions,
) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    if !disabled {
        paths.extend(found.iter().map(|f| f.path.clone()));
    }
    paths.extend(
        cli.iter()
            .map(|p| resolve_user_path(p, &options.cwd, &options.home)),
    );
    let mut seen = HashSet::new();
    paths.retain(|p| seen.insert(canonical(p)));
    paths
}

fn load_skills(options: &LoadOptions, found: &[Found], warnings: &mut Vec<String>) -> Vec<Skill> {
    let paths = merged_paths(found, options.no_skills, &options.cli_skills, options);
    let metadata: HashMap<&Path, &Meta> =
        found.iter().map(|f| (f.path.as_path(), &f.meta)).collect();
    let user_dir = options.agent_dir.join("skills");
    let project_dir = options.cwd.join(".pi").join("skills");
    let mut skills: Vec<Skill> = Vec::new();
    let mut real_paths: HashSet<PathBuf> = HashSet::new();
    let mut collisions = Vec::new();
    for path in paths {
        let display = path.display().to_string();
        if !path.exists() {
            warnings.push(format!("{display}: skill path does not exist"));
            continue;
        }
        // Only used when discovery has no record of the file (explicit CLI paths).
        let origin = if path.starts_with(&user_dir) {
            SkillOrigin::User
        } else if path.starts_with(&project_dir) {
            SkillOrigin::Project
        } else {
            SkillOrigin::Path
        };
        let loaded: Vec<Skill> = if path.is_dir() {
            collect_skill_files(&path, true)
                .iter()
                .filter_map(|file| load_skill_from_file(file, origin, warnings))
                .collect()
        } else if path.is_file() && display.ends_with(".md") {
            load_skill_from_file(&path, origin, warnings)
                .into_iter()
                .collect()
        } else {
            warnings.push(format!("{display}: skill path is not a markdown file"));
            continue;
        };
        for mut skill in loaded {
            let real = canonical(Path::new(&skill.file_path));
            if real_paths.contains(&real) {
                continue; // the same file reached twice (symlink): silently skipped
            }
            if let Some(winner) = skills.iter().find(|s| s.name == skill.name) {
                collisions.push(format!(
                    "{}: name \"{}\" collision (kept {})",
                    skill.file_path, skill.name, winner.file_path
                ));
                continue;
            }
            if let Some(meta) = metadata.get(Path::new(&skill.file_path)) {
                skill.source_info = meta.source_info(&skill.file_path);
            }
            real_paths.insert(real);
            skills.push(skill);
        }
    }
    warnings.extend(collisions);
    skills
}

fn load_prompts(
    options: &LoadOptions,
    found: &[Found],
    warnings: &mut Vec<String>,
) -> Vec<PromptTemplate> {
    let paths = merged_paths(
        found,
        options.no_prompt_templates,
        &options.cli_prompt_templates,
        options,
    );
    let metadata: HashMap<&Path, &Meta> =
        found.iter().map(|f| (f.path.as_path(), &f.meta)).collect();
    let user_dir = options.agent_dir.join("prompts");
    let project_dir = options.cwd.join(".pi").join("prompts");
    let source_info_for = |file: &Path| -> SourceInfo {
        let path = file.to_string_lossy();
        if let Some(meta) = metadata.get(file) {
            return meta.source_info(&path);
        }
        let (scope, base) = if file.starts_with(&user_dir) {
            (Some("user"), user_dir.clone())
        } else if file.starts_with(&project_dir) {
            (Some("project"), project_dir.clone())
        } else {
            (None, file.parent().unwrap_or(Path::new("/")).to_path_buf())
        };
        SourceInfo::synthetic(&path, "local", scope, &base.to_string_lossy())
    };
    let mut all: Vec<PromptTemplate> = Vec::new();
    for path in paths {
        if !path.exists() {
            if options
                .cli_prompt_templates
                .iter()
                .any(|p| resolve_user_path(p, &options.cwd, &options.home) == path)
            {
                warnings.push(format!(
                    "{}: Prompt template path does not exist",
                    path.display()
                ));
            }
            continue;
        }
        if path.is_dir() {
            all.extend(load_templates_from_dir(&path, &source_info_for, warnings));
        } else if path.is_file() && path.to_string_lossy().ends_with(".md") {
            match load_template_from_file(&path, source_info_for(&path)) {
                Ok(t) => all.push(t),
                Err(e) => warnings.push(format!("{}: {e}", path.display())),
            }
        }
    }
    let mut templates: Vec<PromptTemplate> = Vec::new();
    for template in all {
        if let Some(winner) = templates.iter().find(|t| t.name == template.name) {
            warnings.push(format!(
                "{}: name \"/{}\" collision (kept {})",
                template.file_path, template.name, winner.file_path
            ));
            continue;
        }
        templates.push(template);
    }
    templates
}

/// What a prompt / steer / follow_up text becomes: `/skill:name args` expanded first, then
/// `/template args`. Anything else (including unknown `/x`) is returned unchanged. On error the
/// caller reports it (`extension_error`, event "skill_expansion") and uses the original text.
pub fn expand_input(text: &str, resources: &Resources) -> Result<String, ExpansionError> {
    let text = expand_skill_command(text, &resources.skills)?;
    Ok(expand_template(&text, &resources.templates))
}

/// `get_commands` items for templates then skills (extension commands, added by the caller, go
/// before them). Each item carries the seed's `location`/`path` and pi 0.73.1's `sourceInfo`.
pub fn commands_json(resources: &Resources) -> Vec<Value> {
    let item = |name: String, description: &str, source: &str, info: &SourceInfo, path: &str| {
        let mut object = Map::new();
        object.insert("name".into(), json!(name));
        object.insert("description".into(), json!(description));
        object.insert("source".into(), json!(source));
        object.insert("location".into(), json!(info.location()));
        object.insert("path".into(), json!(path));
        object.insert("sourceInfo".into(), info.to_json());
        Value::Object(object)
    };
    let templates = resources.templates.iter().map(|t| {
        item(
            t.name.clone(),
            &t.description,
            "prompt",
            &t.source_info,
            &t.file_path,
        )
    });
    let skills = resources.skills.iter().map(|s| {
        item(
            format!("skill:{}", s.name),
            &s.description,
            "skill",
            &s.source_info,
            &s.file_path,
        )
    });
    templates.chain(skills).collect()
}

// ---------------------------------------------------------------------------------------------
// Paths and directory listing.

/// Trims, expands `~` (pi also turns `~name` into `$HOME/name`) and resolves against `base`.
fn resolve_user_path(input: &str, base: &Path, home: &Path) -> PathBuf {
    let trimmed = input.trim();
    let expanded = if trimmed == "~" {
        home.to_path_buf()
    } else if let Some(rest) = trimmed.strip_prefix("~/") {
        home.join(rest)
    } else if let Some(rest) = trimmed.strip_prefix('~') {
        home.join(rest)
    } else {
        base.join(trimmed)
    };
    normalize(&expanded)
}

/// Lexical normalisation like Node's `path.resolve` (`.` and `..` removed, no symlink lookups).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The real path when it can be resolved, else the path itself (pi's `canonicalizePath`).
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempTree(PathBuf);

    impl TempTree {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("pi-rs-disc-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempTree(normalize(&std::fs::canonicalize(&dir).unwrap()))
        }

        fn write(&self, rel: &str, text: &str) -> PathBuf {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            path
        }

        fn path(&self, rel: &str) -> String {
            self.0.join(rel).to_string_lossy().into_owned()
        }
    }

    impl Drop for TempTree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn skill_md(description: &str) -> String {
        format!("---\ndescription: {description}\n---\nBody of {description}\n")
    }

    fn options(t: &TempTree) -> LoadOptions {
        LoadOptions {
            cwd: t.0.join("repo/sub"),
            agent_dir: t.0.join("agent"),
            home: t.0.join("home"),
            ..LoadOptions::default()
        }
    }

    /// One tree with a skill named `dup` in every place, plus one unique skill per place.
    fn populated() -> TempTree {
        let t = TempTree::new("order");
        std::fs::create_dir_all(t.0.join("repo/.git")).unwrap();
        std::fs::create_dir_all(t.0.join("repo/sub")).unwrap();
        let places = [
            ("project-settings", "repo/sub/extra-skills"),
            ("project-pi", "repo/sub/.pi/skills"),
            ("project-agents", "repo/sub/.agents/skills"),
            ("repo-agents", "repo/.agents/skills"),
            ("above-git-root", ".agents/skills"),
            ("user-settings", "agent/my-skills"),
            ("user-pi", "agent/skills"),
            ("home-agents", "home/.agents/skills"),
            ("cli", "cli-skills"),
        ];
        for (tag, dir) in places {
            t.write(&format!("{dir}/dup/SKILL.md"), &skill_md(tag));
            t.write(&format!("{dir}/{tag}/SKILL.md"), &skill_md(tag));
        }
        t
    }

    #[test]
    fn skills_follow_pi_precedence_and_collisions_warn() {
        let t = populated();
        let mut o = options(&t);
        o.project_settings_skills = vec!["../extra-skills".into(), "!ignored-pattern".into()];
        o.user_settings_skills = vec!["my-skills".into()];
        o.cli_skills = vec![t.path("cli-skills")];
        let r = load_resources(&o);
        let names: Vec<&str> = r.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "dup",
                "project-settings",
                "project-pi",
                "project-agents",
                "repo-agents",
                "user-settings",
                "user-pi",
                "home-agents",
                "cli"
            ]
        );
        assert_eq!(r.skills[0].description, "project-settings");
        let collisions = r
            .warnings
            .iter()
            .filter(|w| w.contains("collision"))
            .count();
        assert_eq!(collisions, 7, "{:?}", r.warnings);
        let pi = &r.skills[2].source_info;
        assert_eq!((pi.source.as_str(), pi.scope.as_str()), ("auto", "project"));
        assert_eq!(
            pi.base_dir.as_deref(),
            Some(t.path("repo/sub/.pi").as_str())
        );
        let settings = &r.skills[1].source_info;
        assert_eq!(
            (
                settings.source.as_str(),
                settings.scope.as_str(),
                settings.base_dir.as_deref()
            ),
            ("local", "project", None)
        );
        let cli = &r.skills[8].source_info;
        assert_eq!(
            (cli.source.as_str(), cli.scope.as_str()),
            ("local", "temporary")
        );
        assert_eq!(
            cli.base_dir.as_deref(),
            Some(t.path("cli-skills/cli").as_str())
        );
    }

    #[test]
    fn disabling_discovery_keeps_explicit_paths() {
        let t = populated();
        let mut o = options(&t);
        o.no_skills = true;
        o.cli_skills = vec![t.path("cli-skills/cli/SKILL.md"), "~/missing".into()];
        let r = load_resources(&o);
        let names: Vec<&str> = r.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["cli"]);
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("missing") && w.contains("does not exist"))
        );
    }

    #[test]
    fn templates_follow_precedence_and_cli_comes_last() {
        let t = TempTree::new("prompts");
        std::fs::create_dir_all(t.0.join("repo/sub")).unwrap();
        t.write("agent/prompts/review.md", "user review");
        t.write(
            "agent/prompts/only-user.md",
            "---\ndescription: U\n---\nuser",
        );
        t.write("repo/sub/.pi/prompts/review.md", "project review");
        t.write("repo/sub/.pi/prompts/.hidden.md", "hidden");
        t.write("repo/sub/.pi/prompts/nested/deep.md", "not auto-discovered");
        t.write(
            "shared/prompts/deep/settings.md",
            "from settings, recursive",
        );
        let cli = t.write("cli/review.md", "cli review");
        let mut o = options(&t);
        o.user_settings_prompts = vec![t.path("shared/prompts")];
        o.cli_prompt_templates = vec![cli.to_string_lossy().into_owned()];
        let r = load_resources(&o);
        let names: Vec<(&str, &str)> = r
            .templates
            .iter()
            .map(|p| (p.name.as_str(), p.content.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("review", "project review"),
                ("settings", "from settings, recursive"),
                ("only-user", "user"),
            ]
        );
        assert_eq!(
            r.warnings
                .iter()
                .filter(|w| w.contains("collision"))
                .count(),
            2
        );
        o.no_prompt_templates = true;
        let r = load_resources(&o);
        assert_eq!(r.templates.len(), 1);
        assert_eq!(r.templates[0].content, "cli review");
        let info = &r.templates[0].source_info;
        assert_eq!(
            (info.source.as_str(), info.scope.as_str()),
            ("local", "temporary")
        );
        assert_eq!(info.base_dir.as_deref(), Some(t.path("cli").as_str()));
    }

    #[test]
    fn get_commands_items_carry_both_shapes() {
        let t = TempTree::new("commands");
        std::fs::create_dir_all(t.0.join("repo/sub")).unwrap();
        t.write(
            "repo/sub/.pi/prompts/fix-tests.md",
            "---\ndescription: Fix failing tests\n---\nFix",
        );
        t.write(
            "agent/skills/brave-search/SKILL.md",
            &skill_md("Web search"),
        );
        let r = load_resources(&options(&t));
        let commands = commands_json(&r);
        let expected = json!([
            {"name": "fix-tests", "description": "Fix failing tests", "source": "prompt",
             "location": "project", "path": t.path("repo/sub/.pi/prompts/fix-tests.md"),
             "sourceInfo": {"path": t.path("repo/sub/.pi/prompts/fix-tests.md"), "source": "auto",
                            "scope": "project", "origin": "top-level", "baseDir": t.path("repo/sub/.pi")}},
            {"name": "skill:brave-search", "description": "Web search", "source": "skill",
             "location": "user", "path": t.path("agent/skills/brave-search/SKILL.md"),
             "sourceInfo": {"path": t.path("agent/skills/brave-search/SKILL.md"), "source": "auto",
                            "scope": "user", "origin": "top-level", "baseDir": t.path("agent")}}
        ]);
        assert_eq!(Value::Array(commands.clone()), expected);
        let keys: Vec<&String> = commands[0].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "name",
                "description",
                "source",
                "location",
                "path",
                "sourceInfo"
            ]
        );
    }

    #[test]
    fn expand_input_runs_skills_then_templates() {
        let t = TempTree::new("expand");
        std::fs::create_dir_all(t.0.join("repo/sub")).unwrap();
        t.write("repo/sub/.pi/prompts/fix.md", "Fix $1: ${@:2}");
        t.write("agent/skills/s/SKILL.md", &skill_md("S"));
        let r = load_resources(&options(&t));
        assert_eq!(
            expand_input("/fix a.ts \"too slow\" now", &r).unwrap(),
            "Fix a.ts: too slow now"
        );
        assert!(
            expand_input("/skill:s go", &r)
                .unwrap()
                .starts_with("<skill name=\"s\"")
        );
        assert_eq!(expand_input("/nope x", &r).unwrap(), "/nope x");
        assert_eq!(expand_input("/skill:nope x", &r).unwrap(), "/skill:nope x");
    }
}
