//! Starting the extensions for a run: discovery from the command line and settings, and the host
//! with its handshake. The host also runs with no extension when approval rules (the policy the
//! caller built from settings, `ApprovalPolicy::from_settings`) may need to ask the client.
//!
//! Input: `-e` paths and the packages' extensions (`crate::packages::RunPackages`), `--no-extensions`, the config, the session's id and file, the sandbox
//! policy, the approval policy. Output: `Launched` — everything the agent needs from extensions,
//! plus the `extension_error` records to send the client at start.

use std::path::PathBuf;

use crossbeam_channel::Receiver;

use super::approval::ApprovalPolicy;
use super::{ExtensionEvent, ExtensionHost, ExtensionSources};
use crate::config::Config;
use crate::rpc::events::Event;
use crate::session::SessionLog;

/// The extensions of a run, started.
pub struct Launched {
    /// None when there is no extension and no approval rule.
    pub host: Option<ExtensionHost>,
    /// What the host reports to the agent (`never()` without a host).
    pub events: Receiver<ExtensionEvent>,
    pub approvals: ApprovalPolicy,
    /// `extension_error` records for extensions that failed to load.
    pub startup_events: Vec<Event>,
}

pub fn launch(
    packages: &crate::packages::RunPackages,
    no_extensions: bool,
    config: &Config,
    session: &SessionLog,
    sandbox: &crate::sandbox::Policy,
    approvals: ApprovalPolicy,
) -> Launched {
    let paths = |project: bool| {
        config
            .scoped_list(project, "extensions")
            .into_iter()
            .map(PathBuf::from)
            .collect()
    };
    let specs = super::discover(&ExtensionSources {
        cli: packages.extension_paths.iter().map(PathBuf::from).collect(),
        cli_packages: packages.with_source_info(crate::packages::collect::Kind::Extensions, true),
        packages: packages.with_source_info(crate::packages::collect::Kind::Extensions, false),
        project_settings: paths(true),
        user_settings: paths(false),
        cwd: config.cwd.clone(),
        agent_dir: config.agent_dir.clone(),
        no_extensions,
        skip_project: !config.project_trust.trusted,
    });
    if specs.is_empty() && !approvals.is_enabled() {
        return Launched {
            host: None,
            events: crossbeam_channel::never(),
            approvals,
            startup_events: Vec::new(),
        };
    }
    let (events_tx, events) = crossbeam_channel::bounded(256);
    let handshake = super::protocol::Handshake {
        cwd: config.cwd.to_string_lossy().into_owned(),
        session_id: session.id().to_string(),
        session_file: session
            .file_path()
            .map(|p| p.to_string_lossy().into_owned()),
        flag_values: Default::default(),
    };
    // Extensions are trusted code the user installed: confined only with `sandbox.extensions`.
    let confine = sandbox.extensions.then_some(sandbox);
    let (host, errors) = ExtensionHost::start(specs, &handshake, confine, events_tx);
    let mut approvals = approvals;
    approvals.set_extension_tools(host.tools().into_iter().map(|t| t.decl.name));
    Launched {
        host: Some(host),
        events,
        approvals,
        startup_events: errors.iter().map(|e| e.event()).collect(),
    }
}
