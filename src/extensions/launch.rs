//! Starting the extensions for a run: discovery from the command line and settings, and the host
//! with its handshake. The host also runs with no extension when approval rules (the policy the
//! caller built from settings, `ApprovalPolicy::from_settings`) may need to ask the client.
//!
//! Input: `-e` paths and the packages' extension files (`ExtensionFiles`), `--no-extensions`, the config, the session's id and file, the sandbox
//! policy, the approval policy. Output: `Launched` — everything the agent needs from extensions,
//! plus the `extension_error` records to send the client at start.

use std::path::PathBuf;

use crossbeam_channel::{Receiver, Sender};

use super::approval::ApprovalPolicy;
use super::{ExtensionEvent, ExtensionHost, ExtensionSources};
use crate::config::Config;
use crate::rpc::events::Event;
use crate::session::SessionLog;
use crate::source_info::SourceInfo;

/// The extensions of a run, started.
pub struct Launched {
    /// None when there is no extension and no approval rule.
    pub host: Option<ExtensionHost>,
    /// What the host reports to the agent (`never()` without a host).
    pub events: Receiver<ExtensionEvent>,
    /// The sending end of `events` (None without a host): a reload starts the new extensions
    /// on the same channel.
    pub events_tx: Option<Sender<ExtensionEvent>>,
    pub approvals: ApprovalPolicy,
    /// `extension_error` records for extensions that failed to load.
    pub startup_events: Vec<Event>,
    /// Command-line options no extension registered, or flags missing their value (pi's
    /// diagnostics: the run stops with these on stderr).
    pub flag_errors: Vec<String>,
}

/// A run's extension files besides those the settings' paths and the extension folders name:
/// `-e` paths, and the extension files of `-e` packages and of settings packages (the packages
/// module resolves those, each with its package as `sourceInfo`).
#[derive(Clone, Debug, Default)]
pub struct ExtensionFiles {
    pub cli: Vec<PathBuf>,
    pub cli_packages: Vec<(PathBuf, SourceInfo)>,
    pub packages: Vec<(PathBuf, SourceInfo)>,
}

/// `recipe`: the command line's part (kept for reloads). `wait_for_ts_host`: start-up needs the
/// TypeScript host's registrations (a `--model` only an extension's provider may have);
/// extension flags on the command line need them too.
pub fn launch(
    recipe: &Relaunch,
    wait_for_ts_host: bool,
    config: &Config,
    session: &SessionLog,
    sandbox: &crate::sandbox::Policy,
    approvals: ApprovalPolicy,
) -> Launched {
    let cli_flags = &recipe.cli_flags[..];
    let specs = discover_specs(recipe.files.clone(), recipe.no_extensions, config);
    if specs.is_empty() && !approvals.is_enabled() {
        return Launched {
            host: None,
            events: crossbeam_channel::never(),
            events_tx: None,
            approvals,
            startup_events: Vec::new(),
            flag_errors: check_flags(cli_flags, &[]),
        };
    }
    let (events_tx, events) = crossbeam_channel::bounded(256);
    let mut start = HostStart::new(specs, cli_flags, config, session, sandbox);
    start.defer_ts_host &= !wait_for_ts_host;
    let (host, startup_events) = start.run(&events_tx);
    let flag_errors = check_flags(cli_flags, &host.flags());
    let mut approvals = approvals;
    approvals.set_extension_tools(host.tools().into_iter().map(|t| t.decl.name));
    Launched {
        host: Some(host),
        events,
        events_tx: Some(events_tx),
        approvals,
        startup_events,
        flag_errors,
    }
}

/// (v2) Registers the providers of the extensions' `register` lines in `config`'s registry, as
/// `register_provider` does (before the start-up model is chosen, and after a reload). Returns
/// an `extension_error` (`event: "register_provider"`) for each refused one.
pub fn register_providers(host: &ExtensionHost, config: &mut Config) -> Vec<Event> {
    register_providers_of(host, config, None)
}

/// `register_providers` for one extension's (`only`), or every extension's.
pub fn register_providers_of(
    host: &ExtensionHost,
    config: &mut Config,
    only: Option<super::ExtensionId>,
) -> Vec<Event> {
    let mut errors = Vec::new();
    for (extension, decl) in host.providers() {
        if only.is_some_and(|only| only != extension) {
            continue;
        }
        let (registered, _) = super::providers::without_refresh(&decl.config);
        let result = super::providers::check_oauth(&decl.config)
            .and_then(|_| config.register_provider(&decl.name, &registered));
        let renewer = super::providers::oauth_renewer(host, extension, &decl.config, config);
        if result.is_ok() {
            config.set_provider_oauth(&decl.name, renewer);
        }
        if let Err(error) = result {
            errors.push(Event::ExtensionError {
                extension_path: host
                    .extension_path(extension)
                    .unwrap_or_default()
                    .to_string(),
                event: "register_provider".into(),
                error,
            });
        }
    }
    for (extension, decl) in host.virtual_models() {
        if only.is_some_and(|only| only != extension) {
            continue;
        }
        let entry = super::providers::virtual_model_entry(&decl);
        if let Err(error) = config.register_virtual_model(entry) {
            errors.push(Event::ExtensionError {
                extension_path: host
                    .extension_path(extension)
                    .unwrap_or_default()
                    .to_string(),
                event: "register_virtual_model".into(),
                error,
            });
        }
    }
    errors
}

/// (v2) The providers of the `register` lines that `register_providers` took and whose
/// extension refreshes or adapts their models.
pub fn refreshed_providers(host: &ExtensionHost, config: &Config) -> Vec<RefreshedProvider> {
    host.providers()
        .into_iter()
        .filter_map(|(extension, decl)| {
            let (registered, refresh_models) = super::providers::without_refresh(&decl.config);
            let modify_models = super::providers::check_oauth(&decl.config)
                .ok()
                .flatten()
                .is_some_and(|oauth| oauth.modify_models);
            ((refresh_models || modify_models) && config.is_extension_provider(&decl.name)).then(
                || RefreshedProvider {
                    extension,
                    name: decl.name,
                    config: registered,
                    refresh_models,
                    modify_models,
                },
            )
        })
        .collect()
}

/// (v2) A registered provider whose models its extension refreshes (`refreshModels: true`) or
/// adapts to the stored login (`oauth.modifyModels: true`).
pub struct RefreshedProvider {
    pub extension: super::ExtensionId,
    pub name: String,
    /// The registration as registered (without `refreshModels` and `oauth`).
    pub config: serde_json::Value,
    pub refresh_models: bool,
    pub modify_models: bool,
}

/// (v2) The virtual models of the `register` lines that `register_providers` took, and the
/// extension that routes each (the last registration of a provider and id wins).
pub fn virtual_model_owners(
    host: &ExtensionHost,
    config: &Config,
) -> Vec<((String, String), super::ExtensionId)> {
    host.virtual_models()
        .into_iter()
        .filter(|(_, decl)| {
            config
                .find_model(&decl.provider, &decl.id)
                .is_some_and(|m| m.is_virtual())
        })
        .map(|(extension, decl)| ((decl.provider, decl.id), extension))
        .collect()
}

/// (v2) The providers of the `register` lines that the extensions stream themselves
/// (`streamSimple: true`) and that `register_providers` took.
pub fn streamed_providers(
    host: &ExtensionHost,
    config: &Config,
) -> Vec<(String, super::ExtensionId)> {
    host.providers()
        .into_iter()
        .filter(|(_, decl)| {
            decl.config
                .get("streamSimple")
                .and_then(serde_json::Value::as_bool)
                == Some(true)
                && config.is_extension_provider(&decl.name)
        })
        .map(|(extension, decl)| (decl.name, extension))
        .collect()
}

/// What starting the extensions again needs (v2 `reload`): the command line's part of
/// `launch`'s input; settings and the session are read anew.
#[derive(Clone, Debug, Default)]
pub struct Relaunch {
    pub files: ExtensionFiles,
    pub cli_flags: Vec<(String, serde_json::Value)>,
    pub no_extensions: bool,
}

/// Discovers the extensions again (a reload) and prepares their start. The flags were checked at
/// start; a flag nobody registers any more is ignored, as pi keeps its old values.
pub fn relaunch(
    recipe: &Relaunch,
    config: &Config,
    session: &SessionLog,
    sandbox: &crate::sandbox::Policy,
) -> HostStart {
    let specs = discover_specs(recipe.files.clone(), recipe.no_extensions, config);
    let mut start = HostStart::new(specs, &recipe.cli_flags, config, session, sandbox);
    // The flags were checked at start.
    start.defer_ts_host = true;
    start
}

/// A host start, prepared where the config and session are (discovery reads settings and
/// folders) and run on any thread: its handshakes wait up to the registration timeout, so a
/// reload runs it on a worker.
pub struct HostStart {
    specs: Vec<super::ExtensionSpec>,
    handshake: super::protocol::Handshake,
    /// Extensions are trusted code the user installed: confined only with `sandbox.extensions`.
    confine: Option<crate::sandbox::Policy>,
    /// Load errors found while preparing (TypeScript modules with no host to run them).
    errors: Vec<super::ExtensionError>,
    /// The TypeScript host registers later (`ExtensionHost::start`): always, unless
    /// the command line has extension flags, which are checked against the registrations.
    defer_ts_host: bool,
}

impl HostStart {
    fn new(
        specs: Vec<super::ExtensionSpec>,
        cli_flags: &[(String, serde_json::Value)],
        config: &Config,
        session: &SessionLog,
        sandbox: &crate::sandbox::Policy,
    ) -> HostStart {
        let handshake = super::protocol::Handshake {
            cwd: config.cwd.to_string_lossy().into_owned(),
            session_id: session.id().to_string(),
            session_file: session
                .file_path()
                .map(|p| p.to_string_lossy().into_owned()),
            flag_values: cli_flags.iter().cloned().collect(),
        };
        // The TypeScript modules go to one Node host (or each gets a load error saying why not).
        let (specs, errors) = super::ts_host::gather(specs, config);
        HostStart {
            specs,
            handshake,
            errors,
            confine: sandbox.extensions.then(|| sandbox.clone()),
            defer_ts_host: cli_flags.is_empty(),
        }
    }

    /// Starts the extensions (blocks for their handshakes), reporting on `events`.
    pub fn run(self, events: &Sender<ExtensionEvent>) -> (ExtensionHost, Vec<Event>) {
        let (host, start_errors) = ExtensionHost::start(
            self.specs,
            &self.handshake,
            self.confine.as_ref(),
            events.clone(),
            self.defer_ts_host,
        );
        let mut errors = self.errors;
        errors.extend(start_errors);
        (host, errors.iter().map(|e| e.event()).collect())
    }
}

fn discover_specs(
    files: ExtensionFiles,
    no_extensions: bool,
    config: &Config,
) -> Vec<super::ExtensionSpec> {
    let paths = |project: bool| {
        config
            .scoped_list(project, "extensions")
            .into_iter()
            .map(PathBuf::from)
            .collect()
    };
    super::discover(&ExtensionSources {
        cli: files.cli,
        cli_packages: files.cli_packages,
        packages: files.packages,
        project_settings: paths(true),
        user_settings: paths(false),
        cwd: config.cwd.clone(),
        agent_dir: config.agent_dir.clone(),
        no_extensions,
        skip_project: !config.project_trust.trusted,
    })
}

/// pi's check of the kept `--name [value]` options once extensions registered their flags: a
/// name nobody registered is an unknown option; a string flag needs a value.
pub fn check_flags(
    given: &[(String, serde_json::Value)],
    registered: &[super::protocol::FlagDecl],
) -> Vec<String> {
    let mut errors = Vec::new();
    let mut unknown = Vec::new();
    for (name, value) in given {
        match registered.iter().find(|f| f.name == *name) {
            None => unknown.push(format!("--{name}")),
            Some(flag) if flag.kind != "boolean" && !value.is_string() => {
                errors.push(format!("Extension flag \"--{name}\" requires a value"))
            }
            Some(_) => {}
        }
    }
    if !unknown.is_empty() {
        let plural = if unknown.len() == 1 { "" } else { "s" };
        errors.push(format!("Unknown option{plural}: {}", unknown.join(", ")));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extensions::protocol::FlagDecl;
    use serde_json::{Value, json};

    fn flag(name: &str, kind: &str) -> FlagDecl {
        FlagDecl {
            name: name.into(),
            description: None,
            kind: kind.into(),
            default: None,
        }
    }

    #[test]
    fn flags_are_checked_as_pi_checks_them() {
        let registered = [flag("plan", "boolean"), flag("level", "string")];
        let given = |pairs: &[(&str, Value)]| -> Vec<(String, Value)> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect()
        };
        assert!(
            check_flags(
                &given(&[("plan", json!("x")), ("level", json!("hi"))]),
                &registered
            )
            .is_empty()
        );
        assert_eq!(
            check_flags(&given(&[("level", json!(true))]), &registered),
            ["Extension flag \"--level\" requires a value"]
        );
        assert_eq!(
            check_flags(
                &given(&[("x", json!(true)), ("y", json!("1"))]),
                &registered
            ),
            ["Unknown options: --x, --y"]
        );
        assert_eq!(
            check_flags(&given(&[("x", json!(true))]), &[]),
            ["Unknown option: --x"]
        );
    }
}
