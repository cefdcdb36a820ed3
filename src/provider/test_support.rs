//! Small builders shared by the provider tests.

use std::time::Duration;

use super::retry;
use super::types::{HttpRequest, StreamRequest};
use crate::config::{Model, ThinkingLevel};
use crate::messages::{
    AgentMessage, AssistantMessage, ContentBlock, TextContent, ToolResultMessage, UserMessage,
};

pub fn model(api: &str, provider: &str, id: &str) -> Model {
    let mut m = Model::placeholder();
    m.api = api.into();
    m.provider = provider.into();
    m.id = id.into();
    m.name = id.into();
    m.input = vec!["text".into()];
    m.max_tokens = 32000;
    m.context_window = 200000;
    m
}

pub fn request(model: Model, messages: Vec<AgentMessage>) -> StreamRequest {
    StreamRequest {
        model,
        api_key: "KEY".into(),
        headers: Vec::new(),
        system_prompt: String::new(),
        messages,
        history: None,
        tools: Vec::new(),
        initial_tools: Vec::new(),
        strict_preferred: Vec::new(),
        strict_required: Vec::new(),
        strict_tools_refused: false,
        grammar_tools: Vec::new(),
        thinking: ThinkingLevel::Off,
        thinking_budgets: [None; 4],
        max_tokens: None,
        prompt_in_estimate: true,
        session_id: "session-1".into(),
        idle_timeout: Duration::from_secs(5),
        provider_retry: retry::ProviderRetry::default(),
        hooks: None,
    }
}

pub fn user(text: &str) -> AgentMessage {
    let mut u = UserMessage::new(text, vec![]);
    u.timestamp = 1;
    AgentMessage::User(u)
}

pub fn assistant(
    api: &str,
    provider: &str,
    model: &str,
    content: Vec<ContentBlock>,
) -> AssistantMessage {
    let mut a = AssistantMessage::empty(api, provider, model);
    a.content = content;
    a.timestamp = 2;
    a
}

pub fn tool_result(id: &str, name: &str, text: &str, is_error: bool) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: id.into(),
        tool_name: name.into(),
        content: vec![ContentBlock::Text(TextContent::new(text))],
        details: None,
        usage: None,
        is_error,
        timestamp: 3,
        extra: Default::default(),
    })
}

/// The value of a request header, its name matched without case.
pub fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}
