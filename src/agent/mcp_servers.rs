//! The agent's side of MCP servers (the servers themselves are `crate::mcp`): their news
//! changes the tools offered to the model, the first prompt waits up to 10 s for servers whose
//! tools it declares (as pi), and startup problems reach the client once, as a notify record.

use std::time::Instant;

use super::Agent;
use super::state::{McpWait, Phase};
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
        let still_waiting = self.mcp.as_mut().is_some_and(|m| m.should_wait(indirect));
        if matches!(self.phase, Phase::WaitingForMcp(_)) && !still_waiting {
            self.end_mcp_wait();
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
        self.mcp
            .as_mut()
            .is_some_and(|m| m.deliver_ui_response(ui_id, value.and_then(Value::as_str)))
    }

    /// Builtins, extension tools and MCP tools, as the next request declares them and as
    /// scripts call them. A `codemode`/`deferred` MCP tool is declared once `tool_search` loaded
    /// it: on this branch's transcript, or since its last system message.
    pub(super) fn refresh_tool_specs(&mut self) {
        let recorded = super::system_message::declared_names(&self.messages);
        let loading = &self.tools.loading;
        let loaded =
            |name: &str| loading.iter().any(|n| n == name) || recorded.iter().any(|n| n == name);
        (self.tools.specs, self.tools.callable) = super::tool_batch::tool_sets(
            &self.tools.builtins,
            &self.tools.extension_tools,
            self.mcp.as_ref(),
            self.tools.active.as_ref(),
            &loaded,
        );
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
            self.phase = Phase::WaitingForMcp(Box::new(McpWait { messages, deadline }));
            return;
        }
        self.start_run(messages);
    }

    pub(super) fn end_mcp_wait(&mut self) {
        let Phase::WaitingForMcp(wait) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        if let Some(mcp) = self.mcp.as_mut() {
            mcp.end_wait();
            if !mcp.settled() {
                self.emit(Event::notify(
                    "MCP servers are still connecting; their tools become available once connected.",
                    "info",
                ));
            }
        }
        self.start_run(wait.messages);
    }

    /// Abort before the run started: nothing ran, nothing more will happen.
    pub(super) fn abort_mcp_wait(&mut self) {
        self.phase = Phase::Idle;
        if let Some(mcp) = self.mcp.as_mut() {
            mcp.end_wait();
        }
        self.settle();
    }
}
