//! The agent's side of MCP servers (the servers themselves are `crate::mcp`): their news
//! changes the tools offered to the model, the first prompt waits up to 10 s for servers whose
//! tools it declares (as pi), and startup problems reach the client once, as a notify record.

use std::time::Instant;

use super::Agent;
use super::state::{McpWait, Phase};
use crate::messages::AgentMessage;
use crate::rpc::events::Event;

impl Agent {
    pub(super) fn on_mcp_event(&mut self, event: crate::mcp::connection::McpEvent) {
        let Some(mcp) = self.mcp.as_mut() else { return };
        if mcp.on_event(event) {
            self.refresh_tool_specs();
        }
        self.emit_mcp_notices();
        let still_waiting = self.mcp.as_mut().is_some_and(|m| m.should_wait());
        if matches!(self.phase, Phase::WaitingForMcp(_)) && !still_waiting {
            self.end_mcp_wait();
        }
    }

    /// Writes the MCP notices waiting (startup report, reconnect outcomes) as notify records.
    pub(super) fn emit_mcp_notices(&mut self) {
        let notices = self
            .mcp
            .as_mut()
            .map(|m| m.take_notices())
            .unwrap_or_default();
        for (text, level) in notices {
            self.emit(Event::notify(&text, level));
        }
    }

    /// `/mcp …` typed as a prompt: answered `handled`, the outcome is a notice (as pi's command
    /// outside its TUI). Returns false when it is not `/mcp`, MCP is off or mcp.json configures nothing.
    pub(super) fn try_mcp_command(&mut self, id: Option<&serde_json::Value>, text: &str) -> bool {
        let Some(("mcp", args)) = super::extending::split_command(text) else {
            return false;
        };
        let Some(mcp) = self.mcp.as_mut().filter(|m| m.is_configured()) else {
            return false;
        };
        let (notice, level) = mcp.command(args);
        self.respond_ok(
            id,
            "prompt",
            Some(serde_json::json!({ "disposition": "handled" })),
        );
        self.emit(Event::notify(&notice, level));
        true
    }

    /// Builtins, extension tools and MCP tools, as the next request declares them.
    pub(super) fn refresh_tool_specs(&mut self) {
        self.tools.specs = super::tool_batch::all_tool_specs(
            &self.tools.builtins,
            &self.tools.extension_tools,
            self.mcp.as_ref(),
        );
        if let Some(names) = &self.tools.active {
            self.tools.specs.retain(|s| names.contains(&s.name));
        }
    }

    /// Starts the run, unless the first prompt must wait for MCP servers first.
    pub(super) fn start_run_after_mcp(&mut self, messages: Vec<AgentMessage>) {
        if self.mcp.as_mut().is_some_and(|m| m.should_wait()) {
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
