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
//! api/provider/compat, API key, thinking level); the agent calls `invalidate` whenever its
//! message list is replaced or shortened (compaction, branch navigation, session switch, an
//! overflow retry dropping the failed reply), and the first and last cached messages are compared
//! on every use as a second guard. Only wire APIs whose request reads nothing else from the
//! whole history use it (Anthropic Messages, not through Copilot, whose headers look at every
//! message); the others get the whole list as before.
//!
//! Pure data and functions, on the agent thread (`prepare`) and the provider thread (`splice`).
//!
//! Test hook: `PI_TEST_NO_REQUEST_CACHE=1` turns the cache off, so a test can compare the bodies
//! sent with and without it.

use std::sync::Arc;

use serde_json::Value;

use super::StreamRequest;
use crate::config::{Model, ThinkingLevel};
use crate::messages::{AgentMessage, ContentBlock, StopReason};

/// The serialized wire elements of the conversation's start, comma-joined, for one request.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedHistory {
    bytes: Arc<String>,
}

/// What the cached encoding depends on besides the messages (no Debug: it holds the key).
#[derive(Clone, PartialEq)]
struct Key {
    model: Model,
    api_key: String,
    thinking: ThinkingLevel,
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
}

/// The array of the request body that holds the conversation, for the wire APIs that cache.
fn history_key(model: &Model) -> Option<&'static str> {
    match model.api.as_str() {
        "anthropic-messages" if model.provider != crate::config::oauth::COPILOT_PROVIDER => {
            Some("messages")
        }
        _ => None,
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
        let Some(array) = history_key(&request.model).filter(|_| enabled()) else {
            self.invalidate();
            request.messages = to_llm(source);
            return None;
        };
        let key = Key {
            model: request.model.clone(),
            api_key: request.api_key.clone(),
            thinking: request.thinking,
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
            match encode(request, segment, array) {
                Some(encoded) => {
                    let bytes = Arc::make_mut(&mut self.bytes);
                    if !bytes.is_empty() && !encoded.is_empty() {
                        bytes.push(',');
                    }
                    bytes.push_str(&encoded);
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
                crate::messages::UserContent::Text(t) => t.len(),
                crate::messages::UserContent::Blocks(b) => blocks(b),
            },
        ),
        AgentMessage::Assistant(m) => (m.timestamp, blocks(&m.content)),
        AgentMessage::ToolResult(m) => (m.timestamp, blocks(&m.content)),
        AgentMessage::BashExecution(m) => (m.timestamp, m.output.len()),
        AgentMessage::Custom(m) => (m.timestamp, 0),
        AgentMessage::CompactionSummary(m) => (m.timestamp, m.summary.len()),
        AgentMessage::BranchSummary(m) => (m.timestamp, m.summary.len()),
    };
    Fingerprint {
        role: std::mem::discriminant(message),
        timestamp,
        size,
    }
}

/// `previous` → `next` is a boundary: a finished reply with text and no tool calls, then a user
/// message.
fn is_boundary(previous: &AgentMessage, next: &AgentMessage) -> bool {
    let (AgentMessage::Assistant(reply), AgentMessage::User(_)) = (previous, next) else {
        return false;
    };
    !matches!(reply.stop_reason, StopReason::Error | StopReason::Aborted)
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

/// The wire elements `messages` encode to on their own, serialized and comma-joined.
fn encode(request: &StreamRequest, messages: Vec<AgentMessage>, array: &str) -> Option<String> {
    if !self_contained(&messages) {
        return None;
    }
    let mut probe = request.clone();
    probe.tools = Vec::new();
    probe.messages = Vec::new();
    // `splice` puts the history first: no API that caches starts every request with elements
    // of its own.
    if !elements(&probe, array)?.is_empty() {
        return None;
    }
    probe.messages = messages;
    let mut out = String::new();
    for (i, element) in elements(&probe, array)?.iter().enumerate() {
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
pub fn splice(model: &Model, body: &Value, history: &EncodedHistory) -> Option<Vec<u8>> {
    let array = history_key(model)?;
    if history.bytes.is_empty() {
        return serde_json::to_vec(body).ok();
    }
    // The APIs that cache have no elements every request starts with: the history goes first.
    let mut body = body.clone();
    let items = body.get_mut(array)?.as_array_mut()?;
    let marker = Value::String(marker());
    items.insert(0, marker.clone());
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

    /// The body as sent with the cache (spliced) and without it (the whole list encoded).
    fn bodies(
        cache: &mut RequestCache,
        model: &Model,
        messages: &[AgentMessage],
    ) -> (String, String) {
        let to_llm = |m: &[AgentMessage]| m.to_vec();
        let mut whole = request(model.clone(), messages.to_vec());
        whole.system_prompt = "SYS".into();
        let expected =
            serde_json::to_string(&super::super::anthropic::build_request(&whole).body).unwrap();
        let mut cached = whole.clone();
        cached.history = cache.prepare(&mut cached, messages, &to_llm);
        let http = super::super::anthropic::build_request(&cached);
        let sent = match &cached.history {
            Some(history) => {
                String::from_utf8(splice(model, &http.body, history).unwrap()).unwrap()
            }
            None => serde_json::to_string(&http.body).unwrap(),
        };
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
        let mut cache = RequestCache::default();
        let mut used = 0;
        for end in 1..=steps.len() {
            let (sent, expected) = bodies(&mut cache, &model, &steps[..end]);
            assert_eq!(sent, expected, "after {end} messages");
            used += usize::from(cache.source_len > 0);
        }
        assert!(used > 0, "the cache was never used");
        assert_eq!(cache.source_len, steps.len() - 1);
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
        let openai = model("openai-completions", "openai", "gpt");
        let mut request = request(openai, Vec::new());
        assert_eq!(cache.prepare(&mut request, &first, &|m| m.to_vec()), None);
        assert_eq!(request.messages, first);
    }
}
