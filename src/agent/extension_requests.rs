//! (v2) Extension requests the agent answers: queries about its state (`Query`). Each is
//! answered at once on the agent thread with one `query_result` (through the host), so an
//! extension that asks during a hook gets its answer while the agent waits for the hook.

use serde_json::{Value, json};

use super::{Agent, compaction};
use crate::extensions::ExtensionId;
use crate::extensions::protocol::Query;
use crate::extensions::queries;

impl Agent {
    pub(super) fn on_extension_query(&mut self, extension: ExtensionId, id: &str, query: Query) {
        let answer = self.answer_query(extension, query);
        if let Some(host) = &self.extensions.host {
            host.answer(extension, "query_result", id, answer);
        }
    }

    fn answer_query(&self, extension: ExtensionId, query: Query) -> Result<Value, String> {
        let session = &self.session;
        let entry_value = |id: &str| session.entry(id).map(|e| e.to_value());
        Ok(match query {
            Query::Flags => match &self.extensions.host {
                Some(host) => Value::Object(host.flag_values(extension)),
                None => json!({}),
            },
            Query::Model => json!({
                "model": serde_json::to_value(&self.model).unwrap_or(Value::Null),
                "thinkingLevel": self.thinking.as_str(),
            }),
            Query::Models => json!({
                "all": self.config.all_models(),
                "available": self.config.available_models(),
            }),
            Query::ActiveTools => json!(
                self.tools
                    .specs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
            ),
            Query::AllTools => {
                let host = self.extensions.host.as_ref();
                let mcp_specs = self
                    .mcp
                    .as_ref()
                    .map(|m| m.tool_specs())
                    .unwrap_or_default();
                json!(queries::all_tools(
                    &self.tools.extension_tools,
                    |tool| host.map_or(Value::Null, |h| h.source_info(tool.extension)),
                    &mcp_specs,
                ))
            }
            Query::Commands => json!(self.commands_list()),
            Query::ContextUsage => compaction::context_usage(
                &session.branch(),
                &self.messages,
                self.model.context_window,
            )
            .unwrap_or(Value::Null),
            Query::SystemPrompt => json!(
                self.extensions
                    .run_system_prompt
                    .as_deref()
                    .unwrap_or(&self.system_prompt)
            ),
            Query::Session => json!({
                "sessionId": session.id(),
                "sessionFile": session.file_path().map(|p| p.to_string_lossy()),
                "sessionDir": session.session_dir().map(|p| p.to_string_lossy()),
                "cwd": session.cwd().to_string_lossy(),
                "sessionName": session.name(),
                "leafId": session.leaf_id(),
                "header": session.header().to_value(),
            }),
            Query::SessionName => json!(session.name()),
            Query::Trust => json!({ "trusted": self.config.project_trusted() }),
            Query::Entries => json!(
                session
                    .entries()
                    .iter()
                    .map(|e| e.to_value())
                    .collect::<Vec<_>>()
            ),
            Query::Branch { from } => match from {
                None => json!(
                    session
                        .branch()
                        .iter()
                        .map(|e| e.to_value())
                        .collect::<Vec<_>>()
                ),
                Some(from) => {
                    let entries: Vec<Value> =
                        session.entries().iter().map(|e| e.to_value()).collect();
                    json!(queries::branch_to(&entries, &from)?)
                }
            },
            Query::Entry { id } => entry_value(&id).unwrap_or(Value::Null),
            Query::Leaf => session
                .leaf_id()
                .and_then(entry_value)
                .unwrap_or(Value::Null),
            Query::Idle => json!({
                "idle": !self.is_busy(),
                "pendingMessages": !self.queues.steering.is_empty() || !self.queues.follow_up.is_empty(),
            }),
        })
    }
}
