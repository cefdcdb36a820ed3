//! The agent's side of MCP servers (the servers themselves are `crate::mcp`): their news
//! changes the tools offered to the model, the first prompt waits up to 10 s for servers whose
//! tools it declares (as pi), and startup problems reach the client once, as a notify record.

use std::time::Instant;

use super::Agent;
use super::state::{AfterStartupWait, Phase, StartupWait};
use crate::extensions::ExtensionId;
use crate::mcp::Notice;
use crate::messages::AgentMessage;
use crate::rpc::events::Event;
use serde_json::{Value, json};

impl Agent {
    pub(super) fn on_mcp_event(&mut self, event: crate::mcp::connection::McpEvent) {
        let Some(mcp) = self.mcp.as_mut() else { return };
        if mcp.on_event(event) {
            self.refresh_tool_specs();
        }
        self.emit_mcp_notices();
        let indirect = self.reaches_indirect_tools();
        let waits_for_mcp = matches!(&self.phase, Phase::StartupWait(w) if matches!(w.then, AfterStartupWait::Run(_)));
        if waits_for_mcp && !self.mcp.as_mut().is_some_and(|m| m.should_wait(indirect)) {
            self.end_startup_wait();
        }
    }

    /// Writes what the MCP host has for the client (startup report, command outcomes, the
    /// sign-in's dialog, `/mcp` prompts' `handled` answers) in order.
    pub(super) fn emit_mcp_notices(&mut self) {
        let notices = self
            .mcp
            .as_mut()
            .map(|m| m.take_notices())
            .unwrap_or_default();
        for notice in notices {
            match notice {
                Notice::Notify(text, level) => self.emit(Event::notify(&text, level)),
                Notice::Input {
                    id,
                    title,
                    placeholder,
                } => {
                    let mut fields = serde_json::Map::new();
                    fields.insert("title".into(), json!(title));
                    fields.insert("placeholder".into(), json!(placeholder));
                    self.emit(Event::ExtensionUiRequest {
                        id,
                        method: "input".into(),
                        fields,
                    });
                }
                Notice::Select { id, title, options } => {
                    let mut fields = serde_json::Map::new();
                    fields.insert("title".into(), json!(title));
                    fields.insert("options".into(), json!(options));
                    self.emit(Event::ExtensionUiRequest {
                        id,
                        method: "select".into(),
                        fields,
                    });
                }
                Notice::Handled(prompt) => self.respond_ok(
                    prompt.as_ref(),
                    "prompt",
                    Some(json!({ "disposition": "handled" })),
                ),
            }
        }
    }

    /// `/mcp …` typed as a prompt (pi's command outside its TUI): the outcome is a notice, then
    /// the prompt is answered `handled` (after the sign-in or reconnect it started, as pi).
    /// Returns false when it is not `/mcp` or MCP is off.
    pub(super) fn try_mcp_command(&mut self, id: Option<&serde_json::Value>, text: &str) -> bool {
        let Some(("mcp", args)) = super::extending::split_command(text) else {
            return false;
        };
        let Some(mcp) = self.mcp.as_mut() else {
            return false;
        };
        mcp.command(args, id.cloned());
        self.emit_mcp_notices();
        true
    }

    /// The client answered a dialog; true when it was the MCP sign-in's.
    pub(super) fn deliver_mcp_ui_response(&mut self, ui_id: &str, value: Option<&Value>) -> bool {
        let delivered = self
            .mcp
            .as_mut()
            .is_some_and(|m| m.deliver_ui_response(ui_id, value.and_then(Value::as_str)));
        // A chosen server's command may have started or ended at once.
        self.emit_mcp_notices();
        delivered
    }

    /// (v2) `register_mcp_server`: pi's checks (the error answers the extension), then the
    /// server connects and extensions hear `mcp_servers_change`.
    pub(super) fn register_mcp_server(
        &mut self,
        extension: ExtensionId,
        name: &str,
        config: &Value,
    ) -> Result<Value, String> {
        let path = self.extension_path(extension);
        self.extensions.mcp_servers.register(name, config, &path)?;
        self.mcp_servers_changed(true);
        Ok(Value::Null)
    }

    /// (v2) `unregister_mcp_server`: only the extension's own registration is removed.
    pub(super) fn unregister_mcp_server(&mut self, extension: ExtensionId, name: &str) {
        let path = self.extension_path(extension);
        if self.extensions.mcp_servers.unregister(name, &path) {
            self.mcp_servers_changed(true);
        }
    }

    /// An extension exited: the servers it registered close.
    pub(super) fn drop_mcp_servers_of(&mut self, extension: ExtensionId) {
        let path = self.extension_path(extension);
        if self.extensions.mcp_servers.remove_extension(&path) {
            self.mcp_servers_changed(true);
            self.send_mcp_servers_change();
        }
    }

    /// The registrations changed: the MCP host connects and closes servers to match, and
    /// (`notify`) protocol-2 extensions hear pi's `mcp_servers_change` with every registration.
    /// Without an MCP host (`--no-mcp`) and no extension listening, each registration is
    /// reported once as an `extension_error`, as pi reports registrations nothing connects.
    pub(super) fn mcp_servers_changed(&mut self, notify: bool) {
        let registrations = self.extensions.mcp_servers.list().to_vec();
        if let Some(mcp) = self.mcp.as_mut() {
            let mut secrets = Vec::new();
            let changed = mcp.set_registered(&registrations, &mut secrets);
            self.config.add_known_secrets(&secrets);
            if changed {
                self.refresh_tool_specs();
            }
            self.emit_mcp_notices();
        } else if !self
            .extensions
            .host
            .as_ref()
            .is_some_and(|h| h.wants_event_v2("mcp_servers_change"))
        {
            for registration in registrations {
                if self.extensions.unconnected_mcp.contains(&registration.name) {
                    continue;
                }
                self.extensions
                    .unconnected_mcp
                    .push(registration.name.clone());
                self.emit(Event::ExtensionError {
                    extension_path: registration.extension_path,
                    event: "register_mcp_server".into(),
                    error: format!(
                        "MCP server \"{}\" is registered, but no loaded extension connects MCP servers; another extension may have replaced the built-in MCP support",
                        registration.name
                    ),
                });
            }
        }
        self.extensions.mcp_servers_change |= notify;
    }

    /// Sends a pending `mcp_servers_change` (after the answer to the request that caused it:
    /// in pi the registration returns before handlers run).
    pub(super) fn send_mcp_servers_change(&mut self) {
        if std::mem::take(&mut self.extensions.mcp_servers_change) {
            let servers = self.extensions.mcp_servers.to_json();
            self.notify_extensions_of(json!({"type": "mcp_servers_change", "servers": servers}));
        }
    }

    /// Builtins, extension tools and MCP tools, as the next request declares them and as
    /// scripts call them. A `codemode`/`deferred` MCP tool is declared once `tool_search` loaded
    /// it: on this branch's transcript, or since its last system message.
    pub(super) fn refresh_tool_specs(&mut self) {
        let recorded = super::system_message::declared_names(&self.messages);
        let loading = &self.tools.loading;
        let loaded =
            |name: &str| loading.iter().any(|n| n == name) || recorded.iter().any(|n| n == name);
        let tools = &self.tools;
        let (specs, callable) = super::tool_batch::tool_sets(
            &tools.builtins,
            &tools.extension_tools,
            self.mcp.as_ref(),
            &|name| tools.is_active(name),
            &loaded,
            self.config.codemode_presentation(),
        );
        (self.tools.specs, self.tools.callable) = (specs, callable);
    }

    /// The system prompt's `mcp_servers` section as the servers are now (a prompt's start
    /// declares it when it changed, pi 1.6.0's rule).
    pub(super) fn refresh_mcp_section(&mut self) {
        let section = self
            .mcp
            .as_ref()
            .and_then(|m| m.servers_section())
            .map(|text| format!("<mcp_servers>\n{text}\n</mcp_servers>"));
        let prompt = self.system_prompt.with_section("mcp_servers", section);
        if prompt != self.system_prompt {
            self.system_prompt = prompt;
            self.request_cache.invalidate();
        }
    }

    /// Whether `codemode` or `tool_search` is offered (they reach the tools not declared).
    pub(super) fn reaches_indirect_tools(&self) -> bool {
        self.tools.builtins.iter().any(|name| {
            name == crate::tools::codemode::TOOL_NAME
                || name == crate::tools::tool_search::TOOL_NAME
        })
    }

    /// Starts the run, unless the first prompt must wait for MCP servers first.
    pub(super) fn start_run_after_mcp(&mut self, messages: Vec<AgentMessage>) {
        if let Some(mcp) = &self.mcp {
            mcp.pick_up_sign_ins();
        }
        let indirect = self.reaches_indirect_tools();
        if self.mcp.as_mut().is_some_and(|m| m.should_wait(indirect)) {
            let deadline = Instant::now() + crate::mcp::DEFAULT_STARTUP_WAIT;
            let then = AfterStartupWait::Run(messages);
            self.phase = Phase::StartupWait(Box::new(StartupWait { then, deadline }));
            return;
        }
        self.start_run(messages);
    }

    /// The first prompt's run stops waiting for MCP servers (`startup_wait`).
    pub(super) fn end_mcp_wait(&mut self, messages: Vec<AgentMessage>) {
        if let Some(mcp) = self.mcp.as_mut() {
            mcp.end_wait();
            if !mcp.settled() {
                self.emit(Event::notify(
                    "MCP servers are still connecting; their tools become available once connected.",
                    "info",
                ));
            }
        }
        self.start_run(messages);
    }

    /// Abort before the run started: nothing ran, nothing more will happen.
    pub(super) fn abort_mcp_wait(&mut self) {
        if let Some(mcp) = self.mcp.as_mut() {
            mcp.end_wait();
        }
        self.settle();
    }
}
