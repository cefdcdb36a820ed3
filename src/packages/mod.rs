//! pi packages (pi 1.6.0 `docs/packages.md`): folders or npm/git packages that bring extensions,
//! skills and prompt templates as one unit, declared in settings `packages` and installed with
//! `pi install` (`cli`).
//!
//! This file reads the `packages` entries of both settings files (string form, or an object with
//! `source` and per-kind filters `extensions`/`skills`/`prompts`, and `autoload: false`), orders
//! and deduplicates them as pi does (project entries first and only when the project is trusted;
//! a project entry replaces the user's entry of the same package, or with `autoload: false` is a
//! filter delta over it; identity is the npm name, the git host/path, the resolved path), installs
//! npm and git packages that are missing (`install`; a failure is a warning and the package is
//! skipped, tried again next start; nothing is installed with `PI_OFFLINE`), and collects each
//! package's files (`collect`, `filter`). The result feeds the skill, prompt and extension loaders,
//! which rank package resources after every top-level one; each keeps its package as `sourceInfo`
//! (`source` = the entry's source, `origin: "package"`, `baseDir` = the package folder).
//!
//! `-e npm:…` / `-e git:…` sources resolve here too, in the `temporary` scope under
//! `<agentDir>/tmp/extensions/`.

pub mod cli;
pub mod collect;
pub mod filter;
pub mod install;
pub mod source;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::resources::files::SourceInfo;
use collect::Kind;
use install::Installer;
use source::Source;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    User,
    Project,
    Temporary,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
            Scope::Temporary => "temporary",
        }
    }
}

/// One `packages` entry of a settings file.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub source: String,
    pub scope: Scope,
    /// The object form (`pi list` calls it filtered).
    pub object: bool,
    /// Per kind (`Kind::ALL` order): `None` when the key is absent.
    pub filters: [Option<Vec<String>>; 3],
    /// `autoload: false`.
    pub autoload_off: bool,
}

impl Entry {
    fn filter(&self, kind: Kind) -> Option<&Vec<String>> {
        let index = Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.filters[index].as_ref()
    }
}

/// The entries of a settings `packages` value; malformed items are skipped.
pub fn entries(value: Option<&Value>, scope: Scope) -> Vec<Entry> {
    let Some(items) = value.and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| match item {
            Value::String(source) => Some(Entry {
                source: source.clone(),
                scope,
                object: false,
                filters: [None, None, None],
                autoload_off: false,
            }),
            Value::Object(object) => {
                let source = object.get("source")?.as_str()?.to_string();
                let list = |kind: Kind| {
                    object.get(kind.key())?.as_array().map(|items| {
                        items
                            .iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                };
                Some(Entry {
                    source,
                    scope,
                    object: true,
                    filters: [
                        list(Kind::Extensions),
                        list(Kind::Skills),
                        list(Kind::Prompts),
                    ],
                    autoload_off: object.get("autoload") == Some(&Value::Bool(false)),
                })
            }
            _ => None,
        })
        .collect()
}

/// One resource of a package.
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    pub path: PathBuf,
    pub enabled: bool,
    /// The entry's source string, as written in settings (or given to `-e`).
    pub source: String,
    pub scope: Scope,
    pub base_dir: PathBuf,
}

impl Resource {
    pub fn source_info(&self) -> SourceInfo {
        SourceInfo {
            path: self.path.to_string_lossy().into_owned(),
            source: self.source.clone(),
            scope: self.scope.as_str().to_string(),
            origin: "package".to_string(),
            base_dir: Some(self.base_dir.to_string_lossy().into_owned()),
        }
    }
}

/// A package that could not be installed at start.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub source: String,
    pub scope: Scope,
    pub message: String,
}

impl Failure {
    /// pi's `formatPackageInstallWarning`.
    pub fn warning(&self) -> String {
        let hint = match self.scope {
            Scope::Temporary => "Check the source and try again.".to_string(),
            Scope::Project => format!(
                "Run \"pi remove {} --local\" to remove it from settings.json.",
                self.source
            ),
            Scope::User => format!(
                "Run \"pi remove {}\" to remove it from settings.json.",
                self.source
            ),
        };
        format!(
            "Extension package \"{}\": failed to install ({}). {hint}",
            self.source, self.message
        )
    }
}

/// Every package resource found, enabled or not (the loaders take the enabled ones).
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub extensions: Vec<Resource>,
    pub skills: Vec<Resource>,
    pub prompts: Vec<Resource>,
    pub failures: Vec<Failure>,
}

impl Resolved {
    fn list(&mut self, kind: Kind) -> &mut Vec<Resource> {
        match kind {
            Kind::Extensions => &mut self.extensions,
            Kind::Skills => &mut self.skills,
            Kind::Prompts => &mut self.prompts,
        }
    }

    /// First wins: a path already listed keeps its package and state.
    fn add(&mut self, kind: Kind, path: PathBuf, enabled: bool, meta: &Meta) {
        let list = self.list(kind);
        if !list.iter().any(|r| r.path == path) {
            list.push(Resource {
                path,
                enabled,
                source: meta.source.clone(),
                scope: meta.scope,
                base_dir: meta.base_dir.clone(),
            });
        }
    }

    /// The enabled resources of one kind.
    pub fn enabled(&self, kind: Kind) -> Vec<Resource> {
        let list = match kind {
            Kind::Extensions => &self.extensions,
            Kind::Skills => &self.skills,
            Kind::Prompts => &self.prompts,
        };
        list.iter().filter(|r| r.enabled).cloned().collect()
    }
}

struct Meta {
    source: String,
    scope: Scope,
    base_dir: PathBuf,
}

/// What resolution needs to know about the machine.
#[derive(Clone, Debug)]
pub struct Context {
    pub installer: Installer,
    pub home: PathBuf,
    pub project_trusted: bool,
    /// `PI_OFFLINE`: missing packages are skipped, nothing is installed or refreshed.
    pub offline: bool,
}

/// pi's `isOfflineModeEnabled`.
pub fn offline_from_env() -> bool {
    std::env::var("PI_OFFLINE")
        .is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("yes"))
}

/// Settings `npmCommand`: an argv array of strings.
pub fn npm_command(setting: Option<&Value>) -> Vec<String> {
    setting
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

impl Context {
    /// The folder a scope's relative paths resolve against.
    pub fn base_dir(&self, scope: Scope) -> PathBuf {
        match scope {
            Scope::User => self.installer.agent_dir.clone(),
            Scope::Project => self.installer.cwd.join(".pi"),
            Scope::Temporary => self.installer.cwd.clone(),
        }
    }

    pub fn identity(&self, source: &str, scope: Scope) -> String {
        source::identity(source, &self.base_dir(scope), &self.home)
    }

    /// Where an entry's package is on disk, if it is there.
    pub fn installed_path(&self, source: &str, scope: Scope) -> Option<PathBuf> {
        let path = match source::parse(source) {
            Source::Npm(npm) => self.installer.npm_path(&npm, scope),
            Source::Git(git) => self.installer.git_path(&git, scope),
            Source::Local(path) => source::resolve_local(&path, &self.base_dir(scope), &self.home),
        };
        path.exists().then_some(path)
    }

    /// pi's `dedupePackages` over project entries then user entries.
    fn dedupe(&self, entries: Vec<Entry>) -> Vec<Entry> {
        let mut result: Vec<Entry> = Vec::new();
        let mut seen: Vec<(String, usize)> = Vec::new();
        for entry in entries {
            let identity = self.identity(&entry.source, entry.scope);
            match seen.iter().find(|(id, _)| *id == identity).map(|(_, i)| *i) {
                None => {
                    seen.push((identity, result.len()));
                    result.push(entry);
                }
                Some(index) => {
                    let existing = &result[index];
                    if existing.scope == Scope::Project && entry.scope == Scope::User {
                        if existing.autoload_off {
                            result.push(entry);
                        }
                    } else if entry.scope == Scope::Project {
                        result[index] = entry;
                    }
                }
            }
        }
        result
    }

    /// The configured packages' resources: project entries (when trusted) then the user's.
    pub fn resolve_configured(&self, user: &[Entry], project: &[Entry]) -> Resolved {
        let mut all: Vec<Entry> = Vec::new();
        if self.project_trusted {
            all.extend(project.iter().cloned());
        }
        all.extend(user.iter().cloned());
        let entries = self.dedupe(all);
        let mut resolved = Resolved::default();
        self.resolve_entries(&entries, &mut resolved);
        resolved
    }

    /// `-e` sources that are packages (npm, git), in the temporary scope.
    pub fn resolve_temporary(&self, sources: &[String]) -> Resolved {
        let entries: Vec<Entry> = sources
            .iter()
            .map(|source| Entry {
                source: source.clone(),
                scope: Scope::Temporary,
                object: false,
                filters: [None, None, None],
                autoload_off: false,
            })
            .collect();
        let mut resolved = Resolved::default();
        self.resolve_entries(&entries, &mut resolved);
        resolved
    }

    fn resolve_entries(&self, entries: &[Entry], out: &mut Resolved) {
        for entry in entries {
            // A project entry with `autoload: false` filters the user's copy of the package.
            let base = (entry.scope == Scope::Project && entry.autoload_off)
                .then(|| {
                    let identity = self.identity(&entry.source, Scope::Project);
                    entries.iter().find(|e| {
                        e.scope == Scope::User && self.identity(&e.source, Scope::User) == identity
                    })
                })
                .flatten();
            let (source, scope) = match base {
                Some(user) => (user.source.as_str(), Scope::User),
                None => (entry.source.as_str(), entry.scope),
            };
            let filter = entry.object.then_some(entry);
            let meta = |base_dir: PathBuf| Meta {
                source: entry.source.clone(),
                scope: entry.scope,
                base_dir,
            };
            let root = match source::parse(source) {
                Source::Local(path) => {
                    let path = source::resolve_local(&path, &self.base_dir(scope), &self.home);
                    if path.is_file() {
                        let parent = path.parent().unwrap_or(Path::new("/")).to_path_buf();
                        out.add(Kind::Extensions, path, true, &meta(parent));
                    } else if path.is_dir()
                        && !collect_package(&path, filter, &meta(path.clone()), out)
                    {
                        for file in crate::extensions::entries_at(&path) {
                            out.add(Kind::Extensions, file, true, &meta(path.clone()));
                        }
                    }
                    continue;
                }
                Source::Npm(npm) => {
                    let path = self.installer.npm_path(&npm, scope);
                    let current = Installer::installed_version(&path)
                        .is_some_and(|installed| version_satisfies(&npm, &installed));
                    if !current && !self.install_missing(source, scope, out) {
                        continue;
                    }
                    if current && scope == Scope::Temporary {
                        self.refresh_temporary_npm(&npm, &path);
                    }
                    path
                }
                Source::Git(git) => {
                    let path = self.installer.git_path(&git, scope);
                    if !path.exists() {
                        if !self.install_missing(source, scope, out) {
                            continue;
                        }
                    } else if scope == Scope::Temporary && !self.offline {
                        self.refresh_temporary_git(&git, &path);
                    }
                    path
                }
            };
            collect_package(&root, filter, &meta(root.clone()), out);
        }
    }

    /// Installs a missing package; false (and a failure, unless offline) when it is not there.
    fn install_missing(&self, source: &str, scope: Scope, out: &mut Resolved) -> bool {
        if self.offline {
            return false;
        }
        match self.install(source, scope) {
            Ok(()) => true,
            Err(message) => {
                out.failures.push(Failure {
                    source: source.to_string(),
                    scope,
                    message,
                });
                false
            }
        }
    }

    /// Installs an npm or git source in a scope (a local path needs nothing).
    pub fn install(&self, source: &str, scope: Scope) -> Result<(), String> {
        if scope == Scope::Temporary {
            ensure_private_dir(&self.installer.agent_dir.join("tmp").join("extensions"))?;
        }
        match source::parse(source) {
            Source::Npm(npm) => self.installer.install_npm(&[npm.spec], scope),
            Source::Git(git) => self.installer.install_git(&git, scope),
            Source::Local(_) => Ok(()),
        }
    }

    /// pi re-installs an unpinned `-e npm:` package when the registry has a newer version.
    fn refresh_temporary_npm(&self, npm: &source::NpmSource, path: &Path) {
        if self.offline || npm.pinned {
            return;
        }
        let Some(installed) = Installer::installed_version(path) else {
            return;
        };
        let query = if npm.version.is_some() {
            &npm.spec
        } else {
            &npm.name
        };
        let Ok(latest) = self.installer.latest_npm_version(query) else {
            return;
        };
        if version_greater(&latest, &installed) {
            let spec = match &npm.version {
                Some(_) => npm.spec.clone(),
                None => format!("{}@latest", npm.name),
            };
            if let Err(e) = self.installer.install_npm(&[spec], Scope::Temporary) {
                log::warn!("keeping the cached {}: {e}", npm.name);
            }
        }
    }

    /// pi fetches a cached `-e git:` checkout and resets it to the remote branch or ref, unless
    /// the ref is a commit hash already checked out.
    fn refresh_temporary_git(&self, git: &source::GitSource, path: &Path) {
        if let Some(git_ref) = &git.git_ref {
            let is_hash =
                (7..=64).contains(&git_ref.len()) && git_ref.bytes().all(|b| b.is_ascii_hexdigit());
            if is_hash
                && self
                    .installer
                    .git_head(path)
                    .is_some_and(|head| head.to_lowercase().starts_with(&git_ref.to_lowercase()))
            {
                return;
            }
        }
        if let Err(e) = self.installer.update_git(git, Scope::Temporary) {
            log::warn!("keeping the cached {}: {e}", git.repo);
        }
    }
}

/// The packages of one run: those in settings and those given with `-e`.
#[derive(Clone, Debug, Default)]
pub struct RunPackages {
    pub configured: Resolved,
    pub temporary: Resolved,
    /// The `-e` values that are not package sources (extension paths).
    pub extension_paths: Vec<String>,
}

/// Whether an `-e` value names an npm or git package rather than a path (a folder laid out as a
/// package is one too: `for_run` looks at it).
pub fn is_package_source(value: &str) -> bool {
    !matches!(source::parse(value), Source::Local(_))
}

/// Resolves (installing what is missing) the settings packages and the `-e` package sources of
/// a run. Packages that could not be installed are skipped; their warnings are returned.
pub fn for_run(
    config: &crate::config::Config,
    cli_extensions: &[String],
) -> (RunPackages, Vec<String>) {
    let ctx = Context {
        installer: Installer {
            agent_dir: config.agent_dir.clone(),
            cwd: config.cwd.clone(),
            npm_command: npm_command(config.setting("npmCommand")),
            output: install::Output::Stderr,
        },
        home: crate::paths::home_dir(),
        project_trusted: config.project_trusted(),
        offline: offline_from_env(),
    };
    let user = entries(config.scoped_setting(false, "packages"), Scope::User);
    let project = entries(config.scoped_setting(true, "packages"), Scope::Project);
    let configured = ctx.resolve_configured(&user, &project);
    // npm and git sources, and folders laid out as packages (named by their absolute path, as
    // pi 1.6.0 names them), are temporary packages; everything else stays an extension path.
    let mut package_sources = Vec::new();
    let mut extension_paths = Vec::new();
    for value in cli_extensions {
        if is_package_source(value) {
            package_sources.push(value.clone());
            continue;
        }
        let path = source::resolve_local(value, &config.cwd, &ctx.home);
        if path.is_dir() && collect::unfiltered(&path).is_some() {
            package_sources.push(path.to_string_lossy().into_owned());
        } else {
            extension_paths.push(value.clone());
        }
    }
    let temporary = ctx.resolve_temporary(&package_sources);
    let warnings = configured
        .failures
        .iter()
        .chain(&temporary.failures)
        .map(Failure::warning)
        .collect();
    let run = RunPackages {
        configured,
        temporary,
        extension_paths,
    };
    (run, warnings)
}

impl RunPackages {
    /// Enabled resources of a kind as (path, `sourceInfo`): the configured packages' then the
    /// `-e` packages'.
    /// The run's extension files: `-e` paths, then those of `-e` packages and settings packages.
    pub fn extension_files(&self) -> crate::extensions::launch::ExtensionFiles {
        crate::extensions::launch::ExtensionFiles {
            cli: self.extension_paths.iter().map(PathBuf::from).collect(),
            cli_packages: self.with_source_info(Kind::Extensions, true),
            packages: self.with_source_info(Kind::Extensions, false),
        }
    }

    pub fn with_source_info(&self, kind: Kind, temporary: bool) -> Vec<(PathBuf, SourceInfo)> {
        let resolved = if temporary {
            &self.temporary
        } else {
            &self.configured
        };
        resolved
            .enabled(kind)
            .into_iter()
            .map(|r| (r.path.clone(), r.source_info()))
            .collect()
    }

    /// Skills or prompts of every package, configured ones first. pi 1.6.0 reports the skills
    /// of `-e` packages as `{source: "cli", scope: "temporary", origin: "top-level"}` without a
    /// `baseDir` (their prompts keep the package); so does pi-rs.
    pub fn resources(&self, kind: Kind) -> Vec<(PathBuf, SourceInfo)> {
        let mut all = self.with_source_info(kind, false);
        let temporary = self.with_source_info(kind, true).into_iter();
        all.extend(temporary.map(|(path, info)| match kind {
            Kind::Skills => {
                let info = SourceInfo {
                    source: "cli".into(),
                    origin: "top-level".into(),
                    base_dir: None,
                    ..info
                };
                (path, info)
            }
            _ => (path, info),
        }));
        all
    }
}

/// `<agentDir>/tmp/extensions` is private to the user (0700), as pi makes it.
fn ensure_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot protect {}: {e}", dir.display()))
}

/// Whether an installed version still fits the entry: an exact version must be it; a range or tag
/// is taken as satisfied (pi-rs does not evaluate npm ranges).
fn version_satisfies(npm: &source::NpmSource, installed: &str) -> bool {
    match &npm.version {
        Some(version) if npm.pinned => {
            let wanted = version.trim_start_matches(['v', '=']);
            wanted == installed
        }
        _ => true,
    }
}

/// `a > b` for `x.y.z[-pre]` versions (a pre-release is below its release).
pub fn version_greater(a: &str, b: &str) -> bool {
    let parse = |v: &str| {
        let v = v.trim().trim_start_matches(['v', '=']);
        let v = v.split('+').next().unwrap_or(v);
        let (core, pre) = match v.split_once('-') {
            Some((core, pre)) => (core, Some(pre.to_string())),
            None => (v, None),
        };
        let numbers: Vec<u64> = core.split('.').map(|n| n.parse().unwrap_or(0)).collect();
        (numbers, pre)
    };
    let (a_core, a_pre) = parse(a);
    let (b_core, b_pre) = parse(b);
    match a_core.cmp(&b_core) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => match (a_pre, b_pre) {
            (None, Some(_)) => true,
            (Some(a), Some(b)) => a > b,
            _ => false,
        },
    }
}

/// pi's `collectPackageResources`: with an object entry its filters, else the manifest or the
/// conventional folders. False when a filterless folder declares nothing.
fn collect_package(root: &Path, filter: Option<&Entry>, meta: &Meta, out: &mut Resolved) -> bool {
    if let Some(entry) = filter {
        for kind in Kind::ALL {
            let patterns = entry.filter(kind);
            if entry.autoload_off {
                let all = collect::declared(root, kind);
                for (file, enabled) in filter::apply_delta(&all, patterns.map_or(&[], |p| p), root)
                {
                    out.add(kind, file, enabled, meta);
                }
                continue;
            }
            let all = collect::declared(root, kind);
            let enabled = match patterns {
                Some(patterns) if patterns.is_empty() => Vec::new(),
                Some(patterns) => filter::apply(&all, patterns, root),
                None => all.clone(),
            };
            for file in all {
                let on = enabled.contains(&file);
                out.add(kind, file, on, meta);
            }
        }
        return true;
    }
    let Some(found) = collect::unfiltered(root) else {
        return false;
    };
    for (kind, files) in found {
        for file in files {
            out.add(kind, file, true, meta);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::temp_dir;
    use serde_json::json;

    fn context(root: &Path) -> Context {
        Context {
            installer: Installer {
                agent_dir: root.join("agent"),
                cwd: root.join("work"),
                npm_command: Vec::new(),
                output: install::Output::Stderr,
            },
            home: root.join("home"),
            project_trusted: true,
            offline: true,
        }
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn project_entry_replaces_user_entry_and_autoload_false_is_a_delta() {
        let root = temp_dir("pkg-scope");
        let pkg = root.join("pkg");
        write(&pkg.join("prompts/a.md"), "a");
        write(&pkg.join("prompts/b.md"), "b");
        let ctx = context(&root);
        let user = entries(Some(&json!(["../pkg"])), Scope::User);
        let replace = entries(
            Some(&json!([{"source": "../../pkg", "prompts": ["a.md"]}])),
            Scope::Project,
        );
        let resolved = ctx.resolve_configured(&user, &replace);
        let on: Vec<_> = resolved.enabled(Kind::Prompts);
        assert_eq!(on.len(), 1);
        assert_eq!(on[0].scope, Scope::Project);
        assert_eq!(on[0].source, "../../pkg");

        let delta = entries(
            Some(
                &json!([{"source": "../../pkg", "autoload": false, "prompts": ["-prompts/b.md"]}]),
            ),
            Scope::Project,
        );
        let resolved = ctx.resolve_configured(&user, &delta);
        let on: Vec<_> = resolved.enabled(Kind::Prompts);
        assert_eq!(on.len(), 1, "{resolved:?}");
        assert_eq!(on[0].path, pkg.join("prompts/a.md"));
        assert_eq!(on[0].scope, Scope::User);

        let untrusted = Context {
            project_trusted: false,
            ..ctx.clone()
        };
        assert_eq!(
            untrusted
                .resolve_configured(&user, &replace)
                .enabled(Kind::Prompts)
                .len(),
            2
        );
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn versions() {
        assert!(version_greater("1.10.0", "1.9.9"));
        assert!(version_greater("1.0.0", "1.0.0-rc.1"));
        assert!(!version_greater("1.0.0", "1.0.0"));
    }
}
