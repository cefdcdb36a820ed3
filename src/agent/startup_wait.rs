//! The start-up wait (`Phase::StartupWait`), one mechanism for what is still starting when the
//! first prompt comes:
//! - the TypeScript extensions: their Node host registers late (`ExtensionHost::is_registering`),
//!   while reads (`get_state`, `get_available_models`, `get_messages`, …), `abort`, dialog
//!   answers and queue settings are answered at once. The other requests — a prompt, a session
//!   change, `get_commands`, anything that may ask the extensions' hooks or name their commands
//!   and tools, as under pi, which loads its extensions before it reads a command — are held,
//!   in order, and handled once no extension registers any more (it registered, or failed: the host's own bound,
//!   `TS_HOST_REGISTER_TIMEOUT`), or when the wait's deadline passes;
//! - MCP servers whose tools the first run declares (`mcp_servers::start_run_after_mcp`): the
//!   run starts once they connected or failed, at most `mcp::DEFAULT_STARTUP_WAIT`.
//!
//! The deadline is the agent loop's timer (`Incoming::StartupWaitOver`); `abort` ends the wait.
//! Also here: what a late registration changes (`Registered`, and `Restarting` when the host
//! crashed once and is started again).

use std::time::Instant;

use serde_json::Value;

use super::Agent;
use super::state::{AfterStartupWait, Phase, StartupWait};
use crate::extensions::protocol::{HookKind, Registration};
use crate::extensions::{ExtensionId, TS_HOST_REGISTER_TIMEOUT};
use crate::rpc::protocol::{Command, Request};

impl Agent {
    /// Holds a request that needs the extensions' registrations while an extension registers
    /// (None: held); reads, aborts and dialog answers pass, and every request once the wait ran
    /// out.
    pub(super) fn hold_for_registrations(&mut self, request: Request) -> Option<Request> {
        if !needs_registrations(&request.command) {
            return Some(request);
        }
        if let Phase::StartupWait(wait) = &mut self.phase
            && let AfterStartupWait::Requests(held) = &mut wait.then
        {
            held.push(request);
            return None;
        }
        let registering = self
            .extensions
            .host
            .as_ref()
            .is_some_and(|h| h.is_registering());
        if !matches!(self.phase, Phase::Idle) || !registering || self.extensions.wait_ran_out {
            return Some(request);
        }
        self.phase = Phase::StartupWait(Box::new(StartupWait {
            then: AfterStartupWait::Requests(vec![request]),
            deadline: Instant::now() + TS_HOST_REGISTER_TIMEOUT,
        }));
        None
    }

    /// Ends a wait for registrations once no extension registers any more.
    fn check_registration_wait(&mut self) {
        let waits = matches!(&self.phase, Phase::StartupWait(w) if matches!(w.then, AfterStartupWait::Requests(_)));
        let registering = self
            .extensions
            .host
            .as_ref()
            .is_some_and(|h| h.is_registering());
        if waits && !registering {
            self.end_startup_wait();
        }
    }

    /// The wait is over (what it waited for is there, or its deadline passed): what waited
    /// goes on.
    pub(super) fn end_startup_wait(&mut self) {
        let Phase::StartupWait(wait) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        match wait.then {
            AfterStartupWait::Run(messages) => self.end_mcp_wait(messages),
            AfterStartupWait::Requests(held) => {
                let registering = self
                    .extensions
                    .host
                    .as_ref()
                    .is_some_and(|h| h.is_registering());
                if registering {
                    // Ran out: nothing waits for the registrations again.
                    self.extensions.wait_ran_out = true;
                    log::warn!("extensions still registering; the prompt goes on without them");
                }
                for request in held {
                    self.handle_request(request);
                }
            }
        }
    }

    /// `abort` (or the end of input) during the wait: a waiting run ends; each held request is
    /// answered with an error, and none runs.
    pub(super) fn abort_startup_wait(&mut self) {
        let Phase::StartupWait(wait) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        match wait.then {
            AfterStartupWait::Run(_) => self.abort_mcp_wait(),
            AfterStartupWait::Requests(held) => {
                for request in held {
                    let error = match request.command {
                        Command::Prompt { .. } => "Aborted before the prompt started",
                        _ => "Aborted before it started",
                    };
                    self.respond_error(request.id.as_ref(), request.command.name(), error);
                }
            }
        }
    }

    /// A late registration (the TypeScript host loaded, or loaded again after a crash): its
    /// providers (asked for their models when it refreshes them), virtual models, tools and
    /// commands count from now on; it hears the session's `session_start`
    /// and `resources_discover`, as the extensions that registered at start did.
    pub(super) fn on_registered(&mut self, extension: ExtensionId, registration: Registration) {
        let Some(host) = self.extensions.host.as_mut() else {
            return;
        };
        let discovers = registration.handles(HookKind::ResourcesDiscover);
        host.registered(extension, registration);
        let errors = crate::extensions::launch::register_providers_of(
            host,
            &mut self.config,
            Some(extension),
        );
        self.extensions.stream_providers =
            crate::extensions::launch::streamed_providers(host, &self.config)
                .into_iter()
                .collect();
        // Its virtual models are routed by it (others' registrations stay theirs).
        let owned = crate::extensions::launch::virtual_model_owners(host, &self.config)
            .into_iter()
            .filter(|(_, owner)| *owner == extension);
        self.extensions.virtual_models.extend(owned);
        host.notify_one(extension, &self.extensions.session_start);
        self.refresh_current_model();
        self.refresh_registered_providers(Some(extension));
        for error in errors {
            self.emit(error);
        }
        self.refresh_extension_tools();
        self.rebuild_system_prompt();
        if discovers {
            let reason = match self.extensions.session_start["reason"].as_str() {
                Some("reload") => "reload",
                _ => "startup",
            };
            self.discover_resources(reason);
        }
        self.check_registration_wait();
    }

    /// The TypeScript host crashed and starts again: its tools and commands are gone until it
    /// registers again.
    pub(super) fn on_restarting(&mut self, extension: ExtensionId) {
        if let Some(host) = self.extensions.host.as_mut() {
            host.restarting(extension);
        }
        self.refresh_extension_tools();
        self.rebuild_system_prompt();
    }

    /// An extension is gone: nothing waits for its registration any more.
    pub(super) fn on_extension_exited(&mut self, extension: ExtensionId) {
        if let Some(host) = self.extensions.host.as_mut() {
            host.exited(extension);
        }
        self.check_registration_wait();
    }

    /// The `session_start` the extensions heard last (one that registers late hears it too).
    pub(super) fn remember_session_start(&mut self, event: &Value) {
        self.extensions.session_start = event.clone();
    }
}

/// Whether a request waits for the extensions' registrations (see the module's doc): all but
/// reads, aborts, dialog answers and queue settings, which pi-rs answers while they load.
fn needs_registrations(command: &Command) -> bool {
    !matches!(
        command,
        Command::GetState
            | Command::GetMessages
            | Command::GetAvailableModels
            | Command::GetAvailableThinkingLevels
            | Command::GetSessionStats
            | Command::GetLastAssistantText
            | Command::GetEntries { .. }
            | Command::GetTree
            | Command::GetForkMessages
            | Command::GetMcpServers
            | Command::ExportHtml { .. }
            | Command::Abort
            | Command::AbortRetry
            | Command::AbortBash
            | Command::ClearQueue
            | Command::ExtensionUiResponse { .. }
            | Command::SetSteeringMode { .. }
            | Command::SetFollowUpMode { .. }
            | Command::SetAutoCompaction { .. }
            | Command::SetAutoRetry { .. }
    )
}
