//! The package commands (pi 1.6.0 `docs/cli.md`, "Package commands"): `pi install <source> [-l]`,
//! `pi remove|uninstall <source> [-l]`, `pi update [source] [--extensions|--extension <source>]`,
//! `pi list`, `pi config [-l]`, each with `-a/--approve`, `-na/--no-approve` and `-h/--help`.
//! Output, errors and exit codes are pi's (without colours): progress and results on stdout,
//! errors on stderr, exit 1 on any failure. A failed install leaves settings untouched; settings
//! are written only after npm or git succeeded.
//!
//! pi-rs cannot update itself or refresh a model catalog (its catalog is built in): `pi update`
//! without a package target says so and exits 1. `pi config` has no interactive picker: it prints
//! the resources it would show with their state and exits 0, as pi's picker does when no one
//! answers it.
//!
//! Entry: [`run`], from `main` before anything else.

/// One line of the command's output on stdout, through `rpc::print_text` (stdout's one helper
/// outside the protocol writer).
macro_rules! say {
    () => {
        crate::rpc::print_text("\n")
    };
    ($($arg:tt)*) => {
        crate::rpc::print_text(&format!("{}\n", format_args!($($arg)*)))
    };
}

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::collect::Kind;
use super::install::{Installer, Output};
use super::source::{self, Source};
use super::{Context, Entry, Scope};
use crate::config::Config;
use crate::config::settings;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Command {
    Install,
    Remove,
    Update,
    List,
    Config,
}

/// What `pi update` was asked to do.
#[derive(Clone, Debug, PartialEq)]
enum UpdateTarget {
    SelfOnly,
    Models,
    Extensions(Option<String>),
    All,
}

#[derive(Debug, Default)]
struct Options {
    source: Option<String>,
    local: bool,
    trust: Option<bool>,
    help: bool,
    invalid_option: Option<String>,
    invalid_argument: Option<String>,
    missing_value: Option<String>,
    conflict: Option<String>,
    update: Option<UpdateTarget>,
    extensions_skipped_note: bool,
}

fn usage(command: Command) -> &'static str {
    match command {
        Command::Install => "pi install <source> [-l] [--approve|--no-approve]",
        Command::Remove => "pi remove <source> [-l] [--approve|--no-approve]",
        Command::Update => {
            "pi update [source|self|pi] [--self|--extensions|--models|--all] [--extension <source>] [--approve|--no-approve] [--force]"
        }
        Command::List => "pi list [--approve|--no-approve]",
        Command::Config => "pi config [-l] [--approve|--no-approve]",
    }
}

/// Runs the package command `word` (`install`, `remove`/`uninstall`, `update`, `list`, `config`;
/// the subcommands module dispatches only those) with the arguments after it; the exit code.
pub fn run(word: &str, rest: &[String]) -> u8 {
    let command = match word {
        "install" => Command::Install,
        "remove" | "uninstall" => Command::Remove,
        "update" => Command::Update,
        "list" => Command::List,
        _ => Command::Config,
    };
    run_command(command, rest)
}

fn run_command(command: Command, rest: &[String]) -> u8 {
    let options = parse(command, rest);
    if options.help {
        say!("{}", help(command));
        return 0;
    }
    if let Some(option) = &options.invalid_option {
        eprintln!("Unknown option {option} for \"{}\".", name(command));
        eprintln!("Use \"pi --help\" or \"{}\".", usage(command));
        return 1;
    }
    for (problem, text) in [
        (&options.missing_value, "Missing value for"),
        (&options.invalid_argument, "Unexpected argument"),
    ] {
        if let Some(value) = problem {
            eprintln!("{text} {value}.");
            eprintln!("Usage: {}", usage(command));
            return 1;
        }
    }
    if let Some(conflict) = &options.conflict {
        eprintln!("{conflict}");
        eprintln!("Usage: {}", usage(command));
        return 1;
    }
    if matches!(command, Command::Install | Command::Remove) && options.source.is_none() {
        eprintln!("Missing {} source.", name(command));
        eprintln!("Usage: {}", usage(command));
        return 1;
    }
    let Ok(cwd) = std::env::current_dir() else {
        eprintln!("Error: cannot read the working directory");
        return 1;
    };
    let agent_dir = crate::config::agent_dir_from_env();
    // `pi update` goes by the flags or a saved decision only, as pi does.
    let trust = match command {
        Command::Update => Some(
            options
                .trust
                .unwrap_or_else(|| crate::config::trust::saved(&agent_dir, &cwd) == Some(true)),
        ),
        _ => options.trust,
    };
    let config = Config::load(agent_dir.clone(), cwd.clone(), trust);
    let trusted = config.project_trusted();
    // npm and git get the tools' environment: credentials only when settings pass them through.
    crate::tools::env::set_passthrough(crate::tools::env::names_from_setting(
        config.setting("shellEnvPassthrough"),
    ));
    let writes_project = options.local && matches!(command, Command::Install | Command::Remove);
    if writes_project && !trusted {
        eprintln!("Project is not trusted. Use --approve to modify local package config.");
        return 1;
    }
    if command == Command::Config && options.local && !trusted {
        eprintln!("Project is not trusted. Use --approve to modify local resource config.");
        return 1;
    }
    let ctx = Context {
        installer: Installer {
            agent_dir: agent_dir.clone(),
            cwd: cwd.clone(),
            npm_command: super::npm_command(config.setting("npmCommand")),
            output: Output::Inherit,
        },
        home: crate::paths::home_dir(),
        project_trusted: trusted,
        offline: super::offline_from_env(),
    };
    let files = SettingsFiles::new(&agent_dir, &cwd, trusted);
    let result = match command {
        Command::Install => install(
            &ctx,
            &files,
            options.source.as_deref().unwrap_or_default(),
            options.local,
        ),
        Command::Remove => remove(
            &ctx,
            &files,
            options.source.as_deref().unwrap_or_default(),
            options.local,
        ),
        Command::List => {
            list(&ctx, &files);
            Ok(())
        }
        Command::Config => {
            show_config(&ctx, &files, options.local);
            Ok(())
        }
        Command::Update => update(&ctx, &files, &options),
    };
    match result {
        Ok(()) => 0,
        Err(message) if message == ALREADY_REPORTED => 1,
        Err(message) => {
            eprintln!("Error: {message}");
            1
        }
    }
}

fn name(command: Command) -> &'static str {
    match command {
        Command::Install => "install",
        Command::Remove => "remove",
        Command::Update => "update",
        Command::List => "list",
        Command::Config => "config",
    }
}

/// pi's `parsePackageCommand` / `handleConfigCommand` argument rules.
fn parse(command: Command, rest: &[String]) -> Options {
    let mut options = Options::default();
    let (mut self_flag, mut extensions_flag, mut models_flag, mut all_flag) =
        (false, false, false, false);
    let mut extension_source: Option<String> = None;
    let is_update = command == Command::Update;
    let mut index = 0;
    while index < rest.len() {
        let arg = rest[index].as_str();
        index += 1;
        let mut flag = |allowed: bool, set: &mut bool| {
            if allowed {
                *set = true;
            } else if options.invalid_option.is_none() {
                options.invalid_option = Some(arg.to_string());
            }
        };
        match arg {
            "-h" | "--help" => options.help = true,
            "-l" | "--local" => {
                let allowed = matches!(
                    command,
                    Command::Install | Command::Remove | Command::Config
                );
                flag(allowed, &mut options.local);
            }
            "--self" => flag(is_update, &mut self_flag),
            "--extensions" => flag(is_update, &mut extensions_flag),
            "--models" => flag(is_update, &mut models_flag),
            "--all" => flag(is_update, &mut all_flag),
            "--force" => {
                let mut ignored = false;
                flag(is_update, &mut ignored);
            }
            "-a" | "--approve" => options.trust = Some(true),
            "-na" | "--no-approve" => options.trust = Some(false),
            "--extension" if is_update => match rest.get(index) {
                Some(value) if !value.starts_with('-') => {
                    index += 1;
                    if extension_source.is_some() {
                        options
                            .conflict
                            .get_or_insert("--extension can only be provided once".into());
                    } else {
                        extension_source = Some(value.clone());
                    }
                }
                _ => {
                    options.missing_value.get_or_insert(arg.to_string());
                }
            },
            _ if arg.starts_with('-') => {
                options.invalid_option.get_or_insert(arg.to_string());
            }
            _ if command == Command::Config => {
                options.invalid_argument.get_or_insert(arg.to_string());
            }
            _ if options.source.is_none() => options.source = Some(arg.to_string()),
            _ => {
                options.invalid_argument.get_or_insert(arg.to_string());
            }
        }
    }
    if !is_update {
        return options;
    }
    let mut conflict = |text: &str| {
        options.conflict.get_or_insert(text.to_string());
    };
    if all_flag && (self_flag || extensions_flag || models_flag || extension_source.is_some()) {
        conflict("--all cannot be combined with --self, --extensions, --models, or --extension");
    }
    if all_flag && options.source.is_some() {
        conflict("--all cannot be combined with a positional source");
    }
    let target = if models_flag {
        if self_flag || extensions_flag || all_flag || extension_source.is_some() {
            conflict(
                "--models cannot be combined with --self, --extensions, --all, or --extension",
            );
        }
        if options.source.is_some() {
            conflict("--models cannot be combined with a positional source");
        }
        UpdateTarget::Models
    } else if let Some(source) = extension_source {
        if self_flag || extensions_flag || all_flag {
            conflict("--extension cannot be combined with --self, --extensions, or --all");
        }
        if options.source.is_some() {
            conflict("--extension cannot be combined with a positional source");
        }
        UpdateTarget::Extensions(Some(source))
    } else if let Some(source) = options.source.clone() {
        if source == "self" || source == "pi" {
            if extensions_flag {
                UpdateTarget::All
            } else {
                UpdateTarget::SelfOnly
            }
        } else {
            if extensions_flag || self_flag || all_flag {
                conflict(
                    "positional update targets cannot be combined with --self, --extensions, or --all",
                );
            }
            UpdateTarget::Extensions(Some(source))
        }
    } else if all_flag || (self_flag && extensions_flag) {
        UpdateTarget::All
    } else if self_flag {
        UpdateTarget::SelfOnly
    } else if extensions_flag {
        UpdateTarget::Extensions(None)
    } else {
        options.extensions_skipped_note = true;
        UpdateTarget::SelfOnly
    };
    options.update = Some(target);
    options
}

/// The two settings files and their `packages` entries as they are on disk now.
struct SettingsFiles {
    user_path: PathBuf,
    project_path: PathBuf,
    trusted: bool,
}

impl SettingsFiles {
    fn new(agent_dir: &Path, cwd: &Path, trusted: bool) -> SettingsFiles {
        SettingsFiles {
            user_path: agent_dir.join("settings.json"),
            project_path: cwd.join(".pi").join("settings.json"),
            trusted,
        }
    }

    fn path(&self, scope: Scope) -> &Path {
        match scope {
            Scope::Project => &self.project_path,
            _ => &self.user_path,
        }
    }

    /// The raw `packages` array of a scope's file (empty when absent or untrusted).
    fn raw(&self, scope: Scope) -> Result<Vec<Value>, String> {
        if scope == Scope::Project && !self.trusted {
            return Ok(Vec::new());
        }
        let map = settings::load_file(self.path(scope))
            .map_err(|e| format!("{}: {e}", self.path(scope).display()))?;
        Ok(map
            .get("packages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    }

    fn entries(&self, scope: Scope) -> Vec<Entry> {
        let raw = self.raw(scope).unwrap_or_default();
        super::entries(Some(&Value::Array(raw)), scope)
    }

    fn write(&self, scope: Scope, packages: Vec<Value>) -> Result<(), String> {
        settings::write_key_now(self.path(scope), "packages", Value::Array(packages))
    }
}

fn entry_source(value: &Value) -> Option<&str> {
    match value {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("source").and_then(Value::as_str),
        _ => None,
    }
}

/// pi's `getSourceMatchKeyForInput`: a local path given on the command line is from the cwd.
fn input_key(ctx: &Context, input: &str) -> String {
    match source::parse(input) {
        Source::Local(path) => format!(
            "local:{}",
            source::resolve_local(&path, &ctx.installer.cwd, &ctx.home).display()
        ),
        _ => ctx.identity(input, Scope::Temporary),
    }
}

/// What settings store for a source: a local path relative to the scope's folder.
fn settings_form(ctx: &Context, input: &str, scope: Scope) -> String {
    match source::parse(input) {
        Source::Local(path) => {
            let absolute = source::resolve_local(&path, &ctx.installer.cwd, &ctx.home);
            let relative = relative_path(&ctx.base_dir(scope), &absolute);
            if relative.is_empty() {
                ".".to_string()
            } else {
                relative
            }
        }
        _ => input.to_string(),
    }
}

/// Node's `path.relative(from, to)` for absolute, normalized paths.
fn relative_path(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

fn scope_of(local: bool) -> Scope {
    if local { Scope::Project } else { Scope::User }
}

fn install(ctx: &Context, files: &SettingsFiles, input: &str, local: bool) -> Result<(), String> {
    let scope = scope_of(local);
    say!("Installing {input}...");
    // Read first: a settings file that does not parse stops the install before npm or git run.
    let mut packages = files.raw(scope)?;
    if let Source::Local(path) = source::parse(input) {
        let resolved = source::resolve_local(&path, &ctx.installer.cwd, &ctx.home);
        if !resolved.exists() {
            return Err(format!("Path does not exist: {}", resolved.display()));
        }
    } else {
        ctx.install(input, scope)?;
    }
    let key = input_key(ctx, input);
    let normalized = settings_form(ctx, input, scope);
    let position = packages
        .iter()
        .position(|existing| entry_source(existing).is_some_and(|s| ctx.identity(s, scope) == key));
    let changed = match position {
        Some(index) if entry_source(&packages[index]) == Some(normalized.as_str()) => false,
        Some(index) => {
            match &mut packages[index] {
                Value::Object(object) => {
                    object.insert("source".into(), Value::String(normalized));
                }
                other => *other = Value::String(normalized),
            }
            true
        }
        None => {
            packages.push(Value::String(normalized));
            true
        }
    };
    if changed {
        files.write(scope, packages)?;
    }
    say!("Installed {input}");
    Ok(())
}

fn remove(ctx: &Context, files: &SettingsFiles, input: &str, local: bool) -> Result<(), String> {
    let scope = scope_of(local);
    say!("Removing {input}...");
    let packages = files.raw(scope)?;
    match source::parse(input) {
        Source::Npm(npm) => ctx.installer.uninstall_npm(&npm, scope)?,
        Source::Git(git) => ctx.installer.remove_git(&git, scope),
        Source::Local(_) => {}
    }
    let key = input_key(ctx, input);
    let kept: Vec<Value> = packages
        .iter()
        .filter(|existing| entry_source(existing).is_none_or(|s| ctx.identity(s, scope) != key))
        .cloned()
        .collect();
    if kept.len() == packages.len() {
        eprintln!("No matching package found for {input}");
        return Err(ALREADY_REPORTED.into());
    }
    files.write(scope, kept)?;
    say!("Removed {input}");
    Ok(())
}

/// The error of a command that already said what went wrong: exit 1 without an `Error:` line.
const ALREADY_REPORTED: &str = "\u{0}";

fn list(ctx: &Context, files: &SettingsFiles) {
    let user = files.entries(Scope::User);
    let project = files.entries(Scope::Project);
    if user.is_empty() && project.is_empty() {
        say!("No packages installed.");
        return;
    }
    let show = |entry: &Entry| {
        if entry.object {
            say!("  {} (filtered)", entry.source);
        } else {
            say!("  {}", entry.source);
        }
        if let Some(path) = ctx.installed_path(&entry.source, entry.scope) {
            say!("    {}", path.display());
        }
    };
    if !user.is_empty() {
        say!("User packages:");
        user.iter().for_each(show);
    }
    if !project.is_empty() {
        if !user.is_empty() {
            say!();
        }
        say!("Project packages:");
        project.iter().for_each(show);
    }
}

/// `pi config` without a terminal: the package resources it would offer, with their state.
fn show_config(ctx: &Context, files: &SettingsFiles, local: bool) {
    let offline = Context {
        offline: true,
        ..ctx.clone()
    };
    let user = files.entries(Scope::User);
    let project = files.entries(Scope::Project);
    let resolved = offline.resolve_configured(&user, &project);
    if local {
        say!("Project Local Resources");
        say!(".pi/settings.json");
    } else {
        say!("Global Resources");
        say!("~/.pi/agent/settings.json");
    }
    let mut sources: Vec<(String, Scope)> = Vec::new();
    for kind in Kind::ALL {
        for resource in match kind {
            Kind::Extensions => &resolved.extensions,
            Kind::Skills => &resolved.skills,
            Kind::Prompts => &resolved.prompts,
        } {
            if !sources.contains(&(resource.source.clone(), resource.scope)) {
                sources.push((resource.source.clone(), resource.scope));
            }
        }
    }
    for (source, scope) in sources {
        say!();
        say!("  {source} ({})", scope.as_str());
        for kind in Kind::ALL {
            let list = match kind {
                Kind::Extensions => &resolved.extensions,
                Kind::Skills => &resolved.skills,
                Kind::Prompts => &resolved.prompts,
            };
            let items: Vec<_> = list
                .iter()
                .filter(|r| r.source == source && r.scope == scope)
                .collect();
            if items.is_empty() {
                continue;
            }
            say!("    {}", capitalized(kind.key()));
            for item in items {
                let mark = if item.enabled { "[x]" } else { "[ ]" };
                let shown = item.path.strip_prefix(&item.base_dir).unwrap_or(&item.path);
                say!("      {mark} {}", shown.display());
            }
        }
    }
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().collect::<String>() + chars.as_str())
        .unwrap_or_default()
}

fn update(ctx: &Context, files: &SettingsFiles, options: &Options) -> Result<(), String> {
    let target = options.update.clone().unwrap_or(UpdateTarget::SelfOnly);
    if options.extensions_skipped_note {
        say!("Extensions are skipped. Run pi update --extensions to update extensions.");
    }
    match &target {
        UpdateTarget::Models => {
            return Err(
                "pi-rs does not fetch model catalogs: it reads the ones pi 1.6.0's `pi update --models` writes to models-store.json"
                    .into(),
            );
        }
        UpdateTarget::Extensions(source) => update_packages(ctx, files, source.as_deref())?,
        UpdateTarget::All => update_packages(ctx, files, None)?,
        UpdateTarget::SelfOnly => {}
    }
    if matches!(target, UpdateTarget::SelfOnly | UpdateTarget::All) {
        eprintln!("error: pi cannot self-update this installation.");
        eprintln!("pi-rs is a single executable: build or download a newer one to update it.");
        return Err(ALREADY_REPORTED.into());
    }
    Ok(())
}

fn update_packages(ctx: &Context, files: &SettingsFiles, only: Option<&str>) -> Result<(), String> {
    let mut entries = files.entries(Scope::User);
    entries.extend(files.entries(Scope::Project));
    let identity = only.map(|s| ctx.identity(s, Scope::Temporary));
    let selected: Vec<&Entry> = entries
        .iter()
        .filter(|e| {
            identity
                .as_ref()
                .is_none_or(|id| ctx.identity(&e.source, e.scope) == *id)
        })
        .collect();
    if let Some(source) = only
        && selected.is_empty()
    {
        return Err(no_match_message(source, &entries));
    }
    if ctx.offline {
        say!("Skipped package updates (offline mode)");
        return Ok(());
    }
    let mut updated: Vec<String> = Vec::new();
    let mut warnings = 0;
    for entry in selected {
        let scope_note = if entry.scope == Scope::Project {
            " (project)"
        } else {
            ""
        };
        match source::parse(&entry.source) {
            Source::Npm(npm) if !npm.pinned => {
                let path = ctx.installer.npm_path(&npm, entry.scope);
                let before = Installer::installed_version(&path);
                let query = if npm.version.is_some() {
                    &npm.spec
                } else {
                    &npm.name
                };
                let latest = ctx.installer.latest_npm_version(query).ok();
                let wanted = match (&before, &latest) {
                    (Some(before), Some(latest)) => super::version_greater(latest, before),
                    _ => true,
                };
                if !wanted {
                    continue;
                }
                say!("Updating {}...", entry.source);
                let spec = match &npm.version {
                    Some(_) => npm.spec.clone(),
                    None => format!("{}@latest", npm.name),
                };
                ctx.installer.install_npm(&[spec], entry.scope)?;
                let after = Installer::installed_version(&path);
                if after != before {
                    updated.push(format!(
                        "{}{scope_note} {} -> {}",
                        entry.source,
                        before.as_deref().unwrap_or("(none)"),
                        after.as_deref().unwrap_or("(none)")
                    ));
                } else if let (Some(before), Some(latest)) = (&before, &latest) {
                    warnings += 1;
                    say!(
                        "{} is still {before} (registry reports {latest}); npm registry metadata may be stale, try again in a few minutes",
                        entry.source
                    );
                }
            }
            Source::Git(git) => {
                say!("Updating {}...", entry.source);
                let path = ctx.installer.git_path(&git, entry.scope);
                let before = ctx.installer.git_head(&path);
                ctx.installer.update_git(&git, entry.scope)?;
                let after = ctx.installer.git_head(&path);
                if before != after {
                    let short = |h: &Option<String>| {
                        h.as_deref()
                            .map_or("(none)".to_string(), |h| h.chars().take(7).collect())
                    };
                    updated.push(format!(
                        "{}{scope_note} {} -> {}",
                        entry.source,
                        short(&before),
                        short(&after)
                    ));
                }
            }
            _ => {}
        }
    }
    if updated.is_empty() && warnings > 0 {
        match only {
            Some(source) => say!("{source} was not updated, see the warnings above"),
            None => say!("No packages were updated, see the warnings above"),
        }
    } else if updated.is_empty() {
        match only {
            Some(source) => say!("{source} is already up to date"),
            None => say!("Packages are already up to date"),
        }
    } else {
        let count = updated.len();
        say!(
            "Updated {count} package{}:",
            if count == 1 { "" } else { "s" }
        );
        for line in updated {
            say!("  {line}");
        }
    }
    Ok(())
}

/// pi's `buildNoMatchingPackageMessage`, with its "Did you mean" for a bare name.
fn no_match_message(input: &str, entries: &[Entry]) -> String {
    let trimmed = input.trim();
    let suggestion = entries
        .iter()
        .find_map(|entry| match source::parse(&entry.source) {
            Source::Npm(npm) if trimmed == npm.name || trimmed == npm.spec => Some(&entry.source),
            Source::Git(git) => {
                let short = format!("{}/{}", git.host, git.path);
                let with_ref = git.git_ref.as_ref().map(|r| format!("{short}@{r}"));
                (trimmed == short || with_ref.as_deref() == Some(trimmed)).then_some(&entry.source)
            }
            _ => None,
        });
    match suggestion {
        Some(s) => format!("No matching package found for {input}. Did you mean {s}?"),
        None => format!("No matching package found for {input}"),
    }
}

fn help(command: Command) -> String {
    match command {
        Command::Install => format!(
            "Usage:\n  {}\n\nInstall a package and add it to settings.\n\nOptions:\n  -l, --local       Install project-locally (.pi/settings.json)\n  -a, --approve     Trust project-local files for this command\n  -na, --no-approve Ignore project-local files for this command\n\nExamples:\n  pi install npm:@foo/bar\n  pi install git:github.com/user/repo\n  pi install git:git@github.com:user/repo\n  pi install https://github.com/user/repo\n  pi install ssh://git@github.com/user/repo\n  pi install ./local/path\n",
            usage(command)
        ),
        Command::Remove => format!(
            "Usage:\n  {}\n\nRemove a package and its source from settings.\nAlias: pi uninstall <source> [-l]\n\nOptions:\n  -l, --local       Remove from project settings (.pi/settings.json)\n  -a, --approve     Trust project-local files for this command\n  -na, --no-approve Ignore project-local files for this command\n\nExamples:\n  pi remove npm:@foo/bar\n  pi uninstall npm:@foo/bar\n",
            usage(command)
        ),
        Command::Update => format!(
            "Usage:\n  {}\n\nUpdate installed packages (pi-rs cannot update itself or its built-in model catalog).\n\nOptions:\n  --extensions            Update installed packages only\n  --extension <source>    Update one package only\n  -a, --approve           Trust project-local files for this command\n  -na, --no-approve       Ignore project-local files for this command\n\nShort forms:\n  pi update --extensions    Update all packages\n  pi update <source>        Update one package\n",
            usage(command)
        ),
        Command::List => format!(
            "Usage:\n  {}\n\nList installed packages from user and project settings.\n\nOptions:\n  -a, --approve      Trust project-local files for this command\n  -na, --no-approve  Ignore project-local files for this command\n",
            usage(command)
        ),
        Command::Config => format!(
            "Usage:\n  {}\n\nShow which package resources load (pi-rs has no interactive picker: edit the\n`packages` entries of settings.json to enable or disable them).\n\nOptions:\n  -l, --local       Show project overrides (.pi/settings.json)\n  -a, --approve     Trust project-local files for this command with -l\n  -na, --no-approve Ignore project-local files for this command with -l\n",
            usage(command)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn update_targets_and_conflicts() {
        let target = |args: &[&str]| parse(Command::Update, &words(args)).update;
        assert_eq!(target(&[]), Some(UpdateTarget::SelfOnly));
        assert_eq!(
            target(&["--extensions"]),
            Some(UpdateTarget::Extensions(None))
        );
        assert_eq!(
            target(&["npm:x"]),
            Some(UpdateTarget::Extensions(Some("npm:x".into())))
        );
        assert_eq!(
            target(&["--extension", "npm:x"]),
            Some(UpdateTarget::Extensions(Some("npm:x".into())))
        );
        assert_eq!(target(&["pi", "--extensions"]), Some(UpdateTarget::All));
        let conflicting = parse(Command::Update, &words(&["--all", "npm:x"]));
        assert_eq!(
            conflicting.conflict.as_deref(),
            Some("--all cannot be combined with a positional source")
        );
        let missing = parse(Command::Update, &words(&["--extension"]));
        assert_eq!(missing.missing_value.as_deref(), Some("--extension"));
        let local_list = parse(Command::List, &words(&["-l"]));
        assert_eq!(local_list.invalid_option.as_deref(), Some("-l"));
    }

    #[test]
    fn relative_forms() {
        assert_eq!(
            relative_path(Path::new("/a/agent"), Path::new("/a/pkg")),
            "../pkg"
        );
        assert_eq!(relative_path(Path::new("/a"), Path::new("/a")), "");
    }
}
