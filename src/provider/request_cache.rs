//! The encoded start of the conversation, kept between requests so a turn pays only for what is
//! new (issue 18: per-turn CPU grew ~20 µs per retained turn, converting and serializing the
//! whole history every time).
//!
//! Between compactions the conversation only grows. It is cut at *boundaries*: a user message
//! right after a finished assistant reply with text and no tool calls. At a boundary nothing
//! carries over from one side to the other in any wire API's conversion (no pending tool calls,
//! no merged results, no trailing cache marker), so the messages before it encode, on their own,
//! to exactly the elements the whole conversation would start with. The agent's
//! `RequestCache` keeps those elements serialized (`EncodedHistory`), extends them at each new
//! boundary, and hands the provider thread only the messages after the last boundary; the
//! provider splices the kept bytes in front of them (`splice`).
//!
//! Invalidation: the cache is keyed by everything the message encoding reads (model with its
//! api/provider/compat, API key, thinking level, which tools go strict); the agent calls
//! `invalidate` whenever its message list is replaced or shortened (compaction, branch
//! navigation, session switch, an overflow retry dropping the failed reply), and the first and
//! last cached messages are compared on every use as a second guard.
//!
//! What a request reads from the whole history besides its elements travels as `HistoryFacts`
//! (`history.rs`, below both this cache and the request builders, so the arrows run one way),
//! computed once per kept message: whether there was tool traffic (OpenAI Chat Completions then
//! sends `tools: []`), whether there were images (Copilot's vision header) and the running sums of
//! the input's size estimate (the output cap is fitted into the context window after the whole
//! conversation's estimate, so a kept start must still count; the cap itself is a top-level field,
//! never in the kept bytes). Wire APIs that use
//! the cache: Anthropic Messages (Copilot included; with `compat.supportsMidConvoEffort` every
//! request ends with an effort marker, which the kept part leaves out and the new part's encoding
//! brings) and OpenAI Chat Completions (its system prompt stays the first element: the history
//! goes right after it). The others get the whole
//! list as before: OpenAI Responses rewrites a tool call's id by the provider of the *last*
//! message holding that id, so a later turn can change how an earlier one encodes. So does a
//! model whose tool declarations go in place (`transcript_tools`): where they go depends on the
//! conversation's later system messages.
//!
//! Anthropic message threads (`anthropic_threads`) cut a continue from the spliced body, after
//! this cache has done its part, so a thread sees the same bytes with or without it.
//!
//! Pure data and functions, on the agent thread (`prepare`) and the provider thread (`splice`).
//!
//! Test hook: `PI_TEST_NO_REQUEST_CACHE=1` turns the cache off, so a test can compare the bodies
//! sent with and without it.

use std::sync::Arc;

use serde_json::Value;

use super::StreamRequest;
use super::history::{EncodedHistory, HistoryFacts};
use crate::config::{Model, ThinkingLevel};
use crate::messages::{AgentMessage, ContentBlock, StopReason, UserContent};

/// What the cached encoding depends on besides the messages (no Debug: it holds the key).
#[derive(Clone, PartialEq)]
struct Key {
    model: Model,
    api_key: String,
    thinking: ThinkingLevel,
    /// Anthropic's native tool changes encode the history by them.
    initial_tools: Vec<crate::messages::ToolSpec>,
    /// Which tools in-place declarations send strict.
    strict_preferred: Vec<String>,
    strict_required: Vec<String>,
    strict_tools_refused: bool,
}

#[derive(Default)]
pub struct RequestCache {
    key: Option<Key>,
    /// Source messages covered by `bytes` (a prefix of the agent's list, ending before a
    /// boundary).
    source_len: usize,
    /// The first and the last covered source message: checked on every use.
    first: Option<Fingerprint>,
    last: Option<Fingerprint>,
    bytes: Arc<String>,
    facts: HistoryFacts,
}

/// The array of the request body that holds the conversation, for the wire APIs that cache.
fn history_key(model: &Model) -> Option<&'static str> {
    match model.api.as_str() {
        "anthropic-messages" | "openai-completions" => Some("messages"),
        _ => None,
    }
}

/// How many elements of the conversation array come before the history (Chat Completions' system
/// prompt).
fn leading_elements(request: &StreamRequest) -> usize {
    match request.model.api.as_str() {
        "openai-completions" => usize::from(!request.system_prompt.is_empty()),
        _ => 0,
    }
}

impl RequestCache {
    /// Forgets everything (the message list was replaced or shortened).
    pub fn invalidate(&mut self) {
        *self = RequestCache::default();
    }

    /// Fills `request.messages` from `source` (the agent's messages; `to_llm` converts a slice
    /// of them for the LLM, message by message) and returns the encoded history to splice in
    /// front of them, or `None` with the whole converted list in `request.messages`.
    pub fn prepare(
        &mut self,
        request: &mut StreamRequest,
        source: &[AgentMessage],
        to_llm: &dyn Fn(&[AgentMessage]) -> Vec<AgentMessage>,
    ) -> Option<EncodedHistory> {
        // In-place tool declarations depend on every system message of the conversation.
        let in_place_tools = super::transcript_tools::in_place_tools(&request.model);
        let Some(array) = history_key(&request.model)
            .filter(|_| enabled() && in_place_tools == super::transcript_tools::InPlaceTools::None)
        else {
            self.invalidate();
            request.messages = to_llm(source);
            return None;
        };
        let key = Key {
            model: request.model.clone(),
            api_key: request.api_key.clone(),
            thinking: request.thinking,
            initial_tools: request.initial_tools.clone(),
            strict_preferred: request.strict_preferred.clone(),
            strict_required: request.strict_required.clone(),
            strict_tools_refused: request.strict_tools_refused,
        };
        let still_valid = self.key.as_ref() == Some(&key)
            && self.source_len <= source.len()
            && (self.source_len == 0
                || (self.first == source.first().map(fingerprint)
                    && self.last == source.get(self.source_len - 1).map(fingerprint)));
        if !still_valid {
            self.invalidate();
            self.key = Some(key);
        }
        // The new messages, converted, each with the index of the source message it came from.
        let mut llm = Vec::new();
        let mut origin = Vec::new();
        for (index, message) in source.iter().enumerate().skip(self.source_len) {
            for converted in to_llm(std::slice::from_ref(message)) {
                llm.push(converted);
                origin.push(index);
            }
        }
        let boundary = (1..llm.len())
            .rev()
            .find(|&j| is_boundary(&llm[j - 1], &llm[j]));
        if let Some(j) = boundary {
            let segment: Vec<AgentMessage> = llm.drain(..j).collect();
            let facts = self.facts.then(&segment);
            match encode(request, segment, array) {
                Some(encoded) => {
                    let bytes = Arc::make_mut(&mut self.bytes);
                    if !bytes.is_empty() && !encoded.is_empty() {
                        bytes.push(',');
                    }
                    bytes.push_str(&encoded);
                    self.facts = facts;
                    if self.source_len == 0 {
                        self.first = source.first().map(fingerprint);
                    }
                    self.source_len = origin[j];
                    self.last = Some(fingerprint(&source[self.source_len - 1]));
                }
                None => {
                    self.invalidate();
                    request.messages = to_llm(source);
                    return None;
                }
            }
        }
        if self.source_len == 0 || !self_contained(&llm) {
            // Nothing kept yet, or the new messages need the old ones to encode.
            request.messages = if self.source_len == 0 {
                llm
            } else {
                to_llm(source)
            };
            return None;
        }
        request.messages = llm;
        Some(EncodedHistory {
            bytes: Arc::clone(&self.bytes),
            facts: self.facts,
        })
    }
}

fn enabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    !*OFF.get_or_init(|| std::env::var_os("PI_TEST_NO_REQUEST_CACHE").is_some_and(|v| v == "1"))
}

/// Enough of a message to tell it from another without keeping a copy: its role, timestamp and
/// the sizes of its content.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fingerprint {
    role: std::mem::Discriminant<AgentMessage>,
    timestamp: i64,
    size: usize,
}

fn fingerprint(message: &AgentMessage) -> Fingerprint {
    let blocks = |content: &[ContentBlock]| -> usize {
        content
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => t.text.len(),
                ContentBlock::Thinking(t) => t.thinking.len() + 1,
                ContentBlock::ToolCall(c) => c.id.len() + c.name.len() + 2,
                ContentBlock::Image(i) => i.data.len() + 3,
            } + 1)
            .sum()
    };
    let (timestamp, size) = match message {
        AgentMessage::User(m) => (
            m.timestamp,
            match &m.content {
                UserContent::Text(t) => t.len(),
                UserContent::Blocks(b) => blocks(b),
            },
        ),
        AgentMessage::Assistant(m) => (m.timestamp, blocks(&m.content)),
        AgentMessage::ToolResult(m) => (m.timestamp, blocks(&m.content)),
        AgentMessage::BashExecution(m) => (m.timestamp, m.output.len()),
        AgentMessage::Custom(m) => (m.timestamp, 0),
        AgentMessage::CompactionSummary(m) => (m.timestamp, m.summary.len()),
        AgentMessage::BranchSummary(m) => (m.timestamp, m.summary.len()),
        AgentMessage::System(m) => (m.timestamp, m.sections.as_ref().map_or(0, |s| s.len())),
    };
    Fingerprint {
        role: std::mem::discriminant(message),
        timestamp,
        size,
    }
}

/// `previous` → `next` is a boundary: a finished reply with text and no tool calls, then a user
/// message with text (OpenRouter's cache marker goes on the last text of the conversation: it
/// must fall after the boundary).
fn is_boundary(previous: &AgentMessage, next: &AgentMessage) -> bool {
    let (AgentMessage::Assistant(reply), AgentMessage::User(user)) = (previous, next) else {
        return false;
    };
    let user_text = match &user.content {
        UserContent::Text(text) => !text.is_empty(),
        UserContent::Blocks(blocks) => blocks.iter().any(|b| matches!(b, ContentBlock::Text(_))),
    };
    user_text
        && !matches!(reply.stop_reason, StopReason::Error | StopReason::Aborted)
        && reply.tool_calls().next().is_none()
        && reply
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text(t) if !t.text.trim().is_empty()))
}

/// Every tool result answers a call among `messages` (a result for a call before the boundary
/// would need the old messages' id rewrites).
fn self_contained(messages: &[AgentMessage]) -> bool {
    messages.iter().all(|message| match message {
        AgentMessage::ToolResult(result) => messages.iter().any(|m| {
            m.as_assistant()
                .is_some_and(|a| a.tool_calls().any(|c| c.id == result.tool_call_id))
        }),
        _ => true,
    })
}

/// The wire elements `messages` encode to on their own, serialized and comma-joined, without the
/// elements every request ends with whatever its messages (Anthropic's closing effort marker with
/// `compat.supportsMidConvoEffort`): the request's own encoding brings those after the history.
fn encode(request: &StreamRequest, messages: Vec<AgentMessage>, array: &str) -> Option<String> {
    if !self_contained(&messages) {
        return None;
    }
    let mut probe = request.clone();
    probe.tools = Vec::new();
    probe.messages = Vec::new();
    // `splice` puts the history first, so what an empty conversation encodes to must close every
    // request: the segment's elements have to end with it.
    let closing = elements(&probe, array)?;
    probe.messages = messages;
    let mut items = elements(&probe, array)?;
    let kept = items.len().checked_sub(closing.len())?;
    if items[kept..] != closing[..] {
        return None;
    }
    items.truncate(kept);
    let mut out = String::new();
    for (i, element) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(element).ok()?);
    }
    Some(out)
}

fn elements(request: &StreamRequest, array: &str) -> Option<Vec<Value>> {
    let body = match request.model.api.as_str() {
        "anthropic-messages" => super::anthropic::build_request(request).body,
        // Without the system prompt and cache markers: the elements of the messages alone.
        "openai-completions" => {
            return Some(super::openai_completions::conversation_elements(request));
        }
        _ => return None,
    };
    match body {
        Value::Object(mut map) => match map.remove(array)? {
            Value::Array(items) => Some(items),
            _ => None,
        },
        _ => None,
    }
}

/// The request body serialized with `history` in front of the elements `body` holds in its
/// conversation array. `None` when the body does not have the expected shape (the request must
/// then fail: sent without its history it would be a different conversation).
pub fn splice(request: &StreamRequest, body: &Value, history: &EncodedHistory) -> Option<Vec<u8>> {
    let array = history_key(&request.model)?;
    if history.bytes.is_empty() {
        return serde_json::to_vec(body).ok();
    }
    // The history goes after the elements every request starts with (a system prompt).
    let mut body = body.clone();
    let items = body.get_mut(array)?.as_array_mut()?;
    let at = leading_elements(request);
    if items.len() < at {
        return None;
    }
    let marker = Value::String(marker());
    items.insert(at, marker.clone());
    let serialized = serde_json::to_string(&body).ok()?;
    let needle = serde_json::to_string(&marker).ok()?;
    let at = serialized.find(&needle)?;
    if serialized[at + needle.len()..].contains(&needle) {
        return None;
    }
    let mut out = Vec::with_capacity(serialized.len() + history.bytes.len());
    out.extend_from_slice(&serialized.as_bytes()[..at]);
    out.extend_from_slice(history.bytes.as_bytes());
    out.extend_from_slice(&serialized.as_bytes()[at + needle.len()..]);
    Some(out)
}

/// A string no request holds: NULs around a random token.
fn marker() -> String {
    static MARKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MARKER
        .get_or_init(|| format!("\u{0}pi-rs-history-{}\u{0}", crate::ids::uuid_v4()))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{TextContent, ToolCall};
    use crate::provider::test_support::{assistant, model, request, tool_result, user};
    use serde_json::json;

    fn text(t: &str) -> ContentBlock {
        ContentBlock::Text(TextContent::new(t))
    }

    fn reply(content: Vec<ContentBlock>, stop: StopReason, at: i64) -> AgentMessage {
        let mut a = assistant("anthropic-messages", "anthropic", "claude", content);
        a.stop_reason = stop;
        a.timestamp = at;
        AgentMessage::Assistant(a)
    }

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolCall(ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: json!({"command": "ls"}),
            thought_signature: None,
        })
    }

    /// A request as sent: its body and its headers.
    type Sent = (String, Vec<(String, String)>);

    /// The wire request `request` is built into (the APIs that cache).
    fn build(request: &StreamRequest) -> super::super::types::HttpRequest {
        match request.model.api.as_str() {
            "anthropic-messages" => super::super::anthropic::build_request(request),
            "openai-completions" => super::super::openai_completions::build_request(request),
            other => panic!("{other} does not cache"),
        }
    }

    /// The body and headers as sent with the cache (spliced) and without it (the whole list
    /// encoded).
    fn sent_and_expected(
        cache: &mut RequestCache,
        model: &Model,
        system_prompt: &str,
        messages: &[AgentMessage],
    ) -> (Sent, Sent) {
        let to_llm = |m: &[AgentMessage]| m.to_vec();
        let mut whole = request(model.clone(), messages.to_vec());
        whole.system_prompt = system_prompt.into();
        let expected = build(&whole);
        let expected = (
            serde_json::to_string(&expected.body).unwrap(),
            expected.headers,
        );
        let mut cached = whole.clone();
        cached.history = cache.prepare(&mut cached, messages, &to_llm);
        let http = build(&cached);
        let body = match &cached.history {
            Some(history) => {
                String::from_utf8(splice(&cached, &http.body, history).unwrap()).unwrap()
            }
            None => serde_json::to_string(&http.body).unwrap(),
        };
        ((body, http.headers), expected)
    }

    /// The body as sent with the cache and without it.
    fn bodies(
        cache: &mut RequestCache,
        model: &Model,
        messages: &[AgentMessage],
    ) -> (String, String) {
        let ((sent, _), (expected, _)) = sent_and_expected(cache, model, "SYS", messages);
        (sent, expected)
    }

    #[test]
    fn every_step_of_a_growing_conversation_sends_the_same_body_as_without_the_cache() {
        let model = model("anthropic-messages", "anthropic", "claude");
        let steps: Vec<AgentMessage> = vec![
            user("first"),
            reply(vec![call("c1")], StopReason::ToolUse, 10),
            tool_result("c1", "bash", "out", false),
            reply(vec![text("done")], StopReason::Stop, 11),
            user("second"),
            reply(vec![text("")], StopReason::Stop, 12),
            user("third (after an empty reply: no boundary)"),
            reply(vec![text("failed")], StopReason::Error, 13),
            user("fourth (after a failed reply: no boundary)"),
            reply(vec![text("ok")], StopReason::Stop, 14),
            user("fifth"),
            reply(vec![call("c2"), call("c3")], StopReason::ToolUse, 15),
            tool_result("c2", "bash", "a", false),
            tool_result("c3", "bash", "b", true),
            reply(vec![text("both ran")], StopReason::Stop, 16),
            user("sixth"),
        ];
        // Through Copilot too: its headers (initiator, vision) are compared with the body.
        let mut copilot = model.clone();
        copilot.provider = crate::config::oauth::COPILOT_PROVIDER.into();
        for model in [model, copilot] {
            let mut cache = RequestCache::default();
            let mut used = 0;
            for end in 1..=steps.len() {
                let (sent, expected) = sent_and_expected(&mut cache, &model, "SYS", &steps[..end]);
                assert_eq!(sent, expected, "{} after {end} messages", model.provider);
                used += usize::from(cache.source_len > 0);
            }
            assert!(used > 0, "the cache was never used");
            assert_eq!(cache.source_len, steps.len() - 1);
        }
    }

    /// With `compat.supportsMidConvoEffort` every Anthropic request ends with an effort marker
    /// and each earlier reply of the provider gets one before it: the kept history leaves the
    /// closing marker out, so the bodies stay those of the whole list and the cache is used.
    #[test]
    fn mid_conversation_effort_markers_keep_the_cache_exact() {
        let mut model = model("anthropic-messages", "anthropic", "claude");
        model.compat = json!({"supportsMidConvoEffort": true}).as_object().cloned();
        let with_level = |message: AgentMessage, level: &str| match message {
            AgentMessage::Assistant(mut a) => {
                a.provider_thinking_level = Some(level.into());
                AgentMessage::Assistant(a)
            }
            other => other,
        };
        let steps: Vec<AgentMessage> = vec![
            user("first"),
            with_level(reply(vec![call("c1")], StopReason::ToolUse, 10), "high"),
            tool_result("c1", "bash", "out", false),
            with_level(reply(vec![text("done")], StopReason::Stop, 11), "high"),
            user("second"),
            with_level(reply(vec![text("ok")], StopReason::Stop, 12), "low"),
            user("third"),
            reply(vec![text("unmarked")], StopReason::Stop, 13),
            user("fourth"),
        ];
        let mut cache = RequestCache::default();
        let mut used = 0;
        for end in 1..=steps.len() {
            let (sent, expected) = bodies(&mut cache, &model, &steps[..end]);
            assert_eq!(sent, expected, "after {end} messages");
            used += usize::from(cache.source_len > 0);
        }
        assert!(used > 0, "the cache was never used");
        assert_eq!(cache.source_len, steps.len() - 1);
        let (sent, _) = bodies(&mut cache, &model, &steps);
        assert_eq!(
            sent.matches(r#""output_config":{"effort":"#).count(),
            5,
            "{sent}"
        );
    }

    #[test]
    fn a_replaced_history_or_another_model_is_encoded_afresh() {
        let anthropic = model("anthropic-messages", "anthropic", "claude");
        let first = vec![
            user("a"),
            reply(vec![text("b")], StopReason::Stop, 10),
            user("c"),
            reply(vec![text("d")], StopReason::Stop, 11),
            user("e"),
        ];
        let mut cache = RequestCache::default();
        let (sent, expected) = bodies(&mut cache, &anthropic, &first);
        assert_eq!(sent, expected);
        assert!(cache.source_len > 0);
        // Another history of the same length (a branch switch the agent did not announce).
        let mut other = first.clone();
        other[3] = reply(vec![text("D, elsewhere")], StopReason::Stop, 21);
        let (sent, expected) = bodies(&mut cache, &anthropic, &other);
        assert_eq!(sent, expected);
        // A shorter one (compaction).
        let (sent, expected) = bodies(&mut cache, &anthropic, &other[2..]);
        assert_eq!(sent, expected);
        // Another model of the same API: thinking and ids are transformed differently.
        let mut thinking = first.clone();
        thinking[1] = reply(
            vec![
                ContentBlock::Thinking(crate::messages::ThinkingContent {
                    thinking: "hm".into(),
                    thinking_signature: Some("sig".into()),
                    redacted: None,
                }),
                text("b"),
            ],
            StopReason::Stop,
            10,
        );
        let (sent, expected) = bodies(&mut cache, &anthropic, &thinking);
        assert_eq!(sent, expected);
        let other_model = model("anthropic-messages", "anthropic", "claude-2");
        let (sent, expected) = bodies(&mut cache, &other_model, &thinking);
        assert_eq!(sent, expected);
        assert!(sent.contains(r#"{"type":"text","text":"hm"}"#), "{sent}");
        // An API that does not cache gets the whole list.
        let responses = model("openai-responses", "openai", "gpt");
        let mut request = request(responses, Vec::new());
        assert_eq!(cache.prepare(&mut request, &first, &|m| m.to_vec()), None);
        assert_eq!(request.messages, first);
        // Nor does a conversation whose tool declarations go in place (they depend on every
        // later system message).
        let mut kimi = model("openai-completions", "moonshotai", "kimi");
        kimi.compat = json!({"supportsMidConvoSystemMessages": true,
            "supportsMidConvoToolAdditions": true})
        .as_object()
        .cloned();
        let mut request = super::super::test_support::request(kimi, Vec::new());
        assert_eq!(cache.prepare(&mut request, &first, &|m| m.to_vec()), None);
        assert_eq!(request.messages, first);
        assert_eq!(cache.source_len, 0);
    }

    fn by(model: &Model, content: Vec<ContentBlock>, stop: StopReason, at: i64) -> AgentMessage {
        let mut a = assistant(&model.api, &model.provider, &model.id, content);
        a.stop_reason = stop;
        a.timestamp = at;
        AgentMessage::Assistant(a)
    }

    fn image(data: &str) -> ContentBlock {
        ContentBlock::Image(crate::messages::ImageContent {
            data: data.into(),
            mime_type: "image/png".into(),
        })
    }

    fn user_blocks(content: Vec<ContentBlock>, at: i64) -> AgentMessage {
        let mut u = crate::messages::UserMessage::new("", Vec::new());
        u.content = UserContent::Blocks(content);
        u.timestamp = at;
        AgentMessage::User(u)
    }

    fn thinking(text: &str, signature: &str) -> ContentBlock {
        ContentBlock::Thinking(crate::messages::ThinkingContent {
            thinking: text.into(),
            thinking_signature: Some(signature.into()),
            redacted: None,
        })
    }

    fn completions_model(provider: &str, id: &str, base_url: &str, compat: Value) -> Model {
        let mut m = model("openai-completions", provider, id);
        m.base_url = base_url.into();
        m.reasoning = true;
        m.input = vec!["text".into(), "image".into()];
        m.compat = compat.as_object().cloned();
        m
    }

    /// The Chat Completions servers whose quirks touch the history: plain OpenAI, OpenRouter's
    /// Anthropic models (cache markers on the last text), one wanting a bridge after tool results
    /// and thinking as text, DeepSeek (reasoning_content on every reply), Copilot (headers), and
    /// a model without vision (image placeholders).
    fn completions_models() -> Vec<Model> {
        let mut no_vision =
            completions_model("mock", "text-only", "http://127.0.0.1:9/v1", json!(null));
        no_vision.input = vec!["text".into()];
        vec![
            completions_model("openai", "gpt", "https://api.openai.com/v1", json!(null)),
            completions_model(
                "openrouter",
                "anthropic/claude",
                "https://openrouter.ai/api/v1",
                json!(null),
            ),
            completions_model(
                "mock",
                "quirky",
                "http://127.0.0.1:9/v1",
                json!({"requiresAssistantAfterToolResult": true, "requiresToolResultName": true,
                    "requiresThinkingAsText": true}),
            ),
            completions_model(
                "deepseek",
                "deepseek-chat",
                "https://api.deepseek.com",
                json!(null),
            ),
            completions_model(
                crate::config::oauth::COPILOT_PROVIDER,
                "gpt-4.1",
                "https://api.githubcopilot.com",
                json!(null),
            ),
            no_vision,
        ]
    }

    /// A conversation written by `writer` (and once by another model): tool round trips with
    /// thinking, images in a tool result and from the user, a Responses-style call id, replies
    /// that are not boundaries (empty, failed, before an image-only prompt).
    fn completions_conversation(writer: &Model) -> Vec<AgentMessage> {
        let claude = model("anthropic-messages", "anthropic", "claude");
        let mut shot = tool_result("c1", "read", "", false);
        if let AgentMessage::ToolResult(r) = &mut shot {
            r.content = vec![image("SHOT")];
        }
        vec![
            user("first"),
            by(
                writer,
                vec![
                    thinking("plan", "reasoning_content"),
                    text("reading"),
                    call("c1"),
                ],
                StopReason::ToolUse,
                10,
            ),
            shot,
            by(writer, vec![text("saw it")], StopReason::Stop, 11),
            user_blocks(vec![text("look"), image("PIC")], 12),
            by(writer, vec![text("a picture")], StopReason::Stop, 13),
            user("third"),
            by(
                &claude,
                vec![thinking("other model", "sig"), text("from claude")],
                StopReason::Stop,
                14,
            ),
            user("fourth"),
            by(writer, vec![call("call_x|item_y")], StopReason::ToolUse, 15),
            tool_result("call_x|item_y", "bash", "ran", false),
            by(writer, vec![text("")], StopReason::Stop, 16),
            user("fifth (after an empty reply)"),
            by(writer, vec![text("failed")], StopReason::Error, 17),
            user("sixth (after a failed reply)"),
            by(writer, vec![text("ok")], StopReason::Stop, 18),
            user_blocks(vec![image("ONLY")], 19),
            by(writer, vec![text("an image")], StopReason::Stop, 20),
            user("eighth"),
            by(writer, vec![call("c9")], StopReason::ToolUse, 21),
            tool_result("c9", "bash", "nine", false),
            by(
                writer,
                vec![thinking("done", "reasoning_content"), text("done")],
                StopReason::Stop,
                22,
            ),
            user("ninth"),
        ]
    }

    #[test]
    fn a_growing_chat_completions_conversation_sends_the_same_request_as_without_the_cache() {
        for model in completions_models() {
            for system_prompt in ["SYS", ""] {
                let steps = completions_conversation(&model);
                let mut cache = RequestCache::default();
                let mut used = 0;
                for end in 1..=steps.len() {
                    let (sent, expected) =
                        sent_and_expected(&mut cache, &model, system_prompt, &steps[..end]);
                    assert_eq!(sent, expected, "{} after {end} messages", model.id);
                    used += usize::from(cache.source_len > 0);
                }
                assert!(used > 0, "{}: the cache was never used", model.id);
                // The kept start holds the tool traffic and the images: the last request sends
                // `tools` and Copilot's vision header although its new messages have neither.
                assert_eq!(cache.source_len, steps.len() - 1, "{}", model.id);
                assert!(
                    cache.facts.tool_traffic && cache.facts.images,
                    "{}",
                    model.id
                );
            }
        }
        // A model that wants `tools: []` with tool traffic in the history (pi 1.6.0 sends it only
        // on `requiresToolsWithToolHistory`).
        let mut copilot = completions_models()[4].clone();
        copilot
            .compat
            .get_or_insert_with(Default::default)
            .insert("requiresToolsWithToolHistory".into(), true.into());
        let copilot = &copilot;
        let steps = completions_conversation(copilot);
        let mut cache = RequestCache::default();
        let _ = sent_and_expected(&mut cache, copilot, "SYS", &steps[..steps.len() - 1]);
        let ((body, headers), _) = sent_and_expected(&mut cache, copilot, "SYS", &steps);
        assert!(body.contains(r#""tools":[]"#), "{body}");
        assert!(
            headers.contains(&("Copilot-Vision-Request".into(), "true".into())),
            "{headers:?}"
        );
    }

    /// The output cap is fitted into the context window after the whole conversation's estimate
    /// (`request::context_clamped_max_tokens`): with a start kept, the cap is still the one the
    /// whole list gives, whether the kept part or the new one holds the last reported usage.
    #[test]
    fn the_output_cap_counts_the_kept_start() {
        let long = "x".repeat(20_000);
        let with_usage = |message: AgentMessage, total: u64| match message {
            AgentMessage::Assistant(mut a) => {
                a.usage.total_tokens = total;
                AgentMessage::Assistant(a)
            }
            other => other,
        };
        let steps: Vec<AgentMessage> = vec![
            user(&long),
            reply(vec![text(&long)], StopReason::Stop, 10),
            user(&long),
            with_usage(reply(vec![text("ok")], StopReason::Stop, 11), 15_000),
            user(&long),
            reply(vec![text(&long)], StopReason::Stop, 12),
            user(&long),
            with_usage(reply(vec![text("fine")], StopReason::Stop, 13), 30_000),
            user("last"),
        ];
        for api in ["anthropic-messages", "openai-completions"] {
            let mut small = model(api, "p", "m");
            small.context_window = 50_000;
            small.max_tokens = 40_000;
            let mut cache = RequestCache::default();
            let mut caps = Vec::new();
            for end in 1..=steps.len() {
                let (sent, expected) = bodies(&mut cache, &small, &steps[..end]);
                assert_eq!(sent, expected, "{api} after {end} messages");
                let body: Value = serde_json::from_str(&sent).unwrap();
                let cap = ["max_tokens", "max_completion_tokens"]
                    .iter()
                    .find_map(|k| body[*k].as_u64())
                    .unwrap();
                caps.push(cap);
            }
            assert!(cache.source_len > 0, "{api}: the cache was never used");
            // The window binds: the cap shrinks as the conversation grows, and a reply's
            // reported usage replaces the estimate of what came before it.
            assert!(caps[1..].iter().all(|c| *c < 40_000), "{api}: {caps:?}");
            assert_eq!(caps[8], 50_000 - 30_000 - 4096 - 2, "{api}: {caps:?}");
        }
    }

    #[test]
    fn switching_models_and_apis_mid_conversation_keeps_the_requests_exact() {
        let models: Vec<Model> = completions_models()
            .into_iter()
            .chain([model("anthropic-messages", "anthropic", "claude")])
            .collect();
        let openai = &models[0];
        let steps = completions_conversation(openai);
        let mut cache = RequestCache::default();
        for end in 1..=steps.len() {
            // A different model every few turns, back and forth, one cache throughout.
            let model = &models[(end / 3) % models.len()];
            let (sent, expected) = sent_and_expected(&mut cache, model, "SYS", &steps[..end]);
            assert_eq!(sent, expected, "{} after {end} messages", model.id);
        }
    }
}
