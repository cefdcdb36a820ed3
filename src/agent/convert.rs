//! Placeholder until the provider branch lands its convertToLlm port.
use crate::messages::AgentMessage;

pub fn to_llm(messages: &[AgentMessage]) -> Vec<AgentMessage> {
    messages
        .iter()
        .filter(|m| {
            matches!(
                m,
                AgentMessage::User(_) | AgentMessage::Assistant(_) | AgentMessage::ToolResult(_)
            )
        })
        .cloned()
        .collect()
}
