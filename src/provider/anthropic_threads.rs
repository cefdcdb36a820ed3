//! Anthropic message threads (pi 1.6.0, `compat.supportsMessageThreads`; on by default for a
//! base URL on api.anthropic.com). A session's request opens a thread (`thread: {type:"create"}`);
//! the server keeps its conversation, so the next request of the session that starts with that
//! same conversation plus the reply sends only what is new, without `system` and `tools`, as
//! `thread: {type:"continue", previous_message_id: <the reply's id>}`.
//!
//! What a continue builds on is checked by a hash of the fixed request settings (endpoint, model,
//! system, tools, thinking, output config, tool choice, betas, fallbacks) and of the messages the
//! server holds, normalized so that moving cache markers and a string vs one-text-block content
//! do not count. Any difference sends the whole conversation as a new thread: a mismatch costs
//! only the cache, never a wrong conversation. Each reply is continued at most once.
//!
//! A rejection about the thread (never a started stream) is sent again once, in full: as a new
//! thread when the old one cannot be continued (expired, raced, settings changed), or without
//! `thread` when the endpoint cannot use threads, which turns them off for the session. Either
//! way the reply records an `anthropic_thread_fallback` diagnostic.
//!
//! State lives per session id for the process (at most `MAX_SESSIONS`, oldest dropped first).
//! Works on the final body bytes (after the request cache's splice and extensions' payload
//! hooks), on the provider thread.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use serde_json::{Map, Value, json};

use super::types::{HttpRequest, StreamEvent, StreamRequest};
use crate::config::Model;
use crate::messages::{
    AgentMessage, AssistantMessage, ContentBlock, StopReason, TextContent, ThinkingContent,
    ToolCall,
};

/// The beta every request of a session that may use threads sends.
pub(crate) const MESSAGE_THREADS_BETA: &str = "message-threads-2026-08-12";
/// Sessions whose thread state is kept; the least recently updated one goes first.
const MAX_SESSIONS: usize = 10_000;
/// Rejections of a `continue` that a new thread fixes.
const NEW_THREAD_ERRORS: [&str; 4] = [
    "thread_not_found",
    "thread_already_continued",
    "thread_continue_in_flight",
    "thread_fingerprint_mismatch",
];

/// Where a session's next request can continue, or off after the endpoint rejected threads.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Off,
    At {
        prefix_count: usize,
        prefix_hash: u64,
        reply_id: String,
    },
}

/// Session id → state, in update order (oldest first), at most `cap` sessions.
struct States {
    entries: Vec<(String, State)>,
    cap: usize,
}

impl States {
    /// The session's state; a continue point is taken out (each reply is continued once, and a
    /// concurrent request of the session does not try it too).
    fn take(&mut self, session: &str) -> Option<State> {
        let position = self.entries.iter().position(|(id, _)| id == session)?;
        match &self.entries[position].1 {
            State::Off => Some(State::Off),
            State::At { .. } => Some(self.entries.remove(position).1),
        }
    }

    fn set(&mut self, session: &str, state: State) {
        self.entries.retain(|(id, _)| id != session);
        self.entries.push((session.to_string(), state));
        if self.entries.len() > self.cap {
            self.entries.remove(0);
        }
    }
}

static STATES: Mutex<States> = Mutex::new(States {
    entries: Vec::new(),
    cap: MAX_SESSIONS,
});

fn take_state(session: &str) -> Option<State> {
    STATES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take(session)
}

fn set_state(session: &str, state: State) {
    STATES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .set(session, state);
}

/// Whether `request` may use threads: Anthropic Messages, the model's `supportsMessageThreads`
/// (default: a base URL on api.anthropic.com), and a session id.
pub(crate) fn applies(request: &StreamRequest) -> bool {
    let model = &request.model;
    model.api == "anthropic-messages"
        && !request.session_id.is_empty()
        && model
            .compat_bool("supportsMessageThreads")
            .unwrap_or_else(|| model.base_url.contains("api.anthropic.com"))
}

/// Which thread a request was sent on.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sent {
    Create,
    Continue,
}

/// One request of a session that uses threads: what was sent, and the reply as it streams.
pub(crate) struct ThreadTurn {
    session: String,
    /// The whole request as built (all messages, `system`, `tools`).
    params: Map<String, Value>,
    settings: String,
    /// `None`: sent without a thread (off for the session).
    sent: Option<Sent>,
    fallback_done: bool,
    reply: AssistantMessage,
    /// Tool-call arguments as they stream, by content index.
    arguments: HashMap<usize, String>,
    model: Model,
    oauth: bool,
}

impl ThreadTurn {
    /// Prepares `body` (the request's final bytes) for the session's thread: a continue when the
    /// state allows it, else a new thread; unchanged when threads are off for the session.
    /// `None` when threads do not apply or the body is not a JSON object.
    pub(crate) fn prepare(
        request: &StreamRequest,
        http: &HttpRequest,
        oauth: bool,
        body: &mut Vec<u8>,
    ) -> Option<ThreadTurn> {
        if !applies(request) {
            return None;
        }
        let Ok(Value::Object(params)) = serde_json::from_slice::<Value>(body) else {
            return None;
        };
        let model = &request.model;
        let mut turn = ThreadTurn {
            session: request.session_id.clone(),
            settings: settings_of(&http.url, &model.provider, &http.headers, &params),
            params,
            sent: None,
            fallback_done: false,
            reply: AssistantMessage::empty(&model.api, &model.provider, &model.id),
            arguments: HashMap::new(),
            model: model.clone(),
            oauth,
        };
        let state = take_state(&turn.session);
        if state == Some(State::Off) {
            return Some(turn);
        }
        let messages = turn.messages();
        let continued = match state {
            Some(State::At {
                prefix_count,
                prefix_hash,
                reply_id,
            }) if messages.len() > prefix_count
                && prefix_hash_of(&turn.settings, &messages[..prefix_count]) == prefix_hash =>
            {
                let mut rest = turn.params.clone();
                rest.shift_remove("system");
                rest.shift_remove("tools");
                rest.insert(
                    "messages".into(),
                    Value::Array(messages[prefix_count..].to_vec()),
                );
                rest.insert(
                    "thread".into(),
                    json!({"type": "continue", "previous_message_id": reply_id}),
                );
                Some(rest)
            }
            _ => None,
        };
        *body = match continued {
            Some(rest) => {
                turn.sent = Some(Sent::Continue);
                serde_json::to_vec(&rest).ok()?
            }
            None => turn.create_body()?,
        };
        Some(turn)
    }

    fn messages(&self) -> Vec<Value> {
        match self.params.get("messages") {
            Some(Value::Array(list)) => list.clone(),
            _ => Vec::new(),
        }
    }

    fn create_body(&mut self) -> Option<Vec<u8>> {
        self.sent = Some(Sent::Create);
        let mut params = self.params.clone();
        params.insert("thread".into(), json!({"type": "create"}));
        serde_json::to_vec(&params).ok()
    }

    /// A request that failed before streaming (`status`, the error's `error.details.error_code`,
    /// the error text): the body to send instead and the diagnostic to record, when the failure
    /// is about the thread. At most once per request.
    pub(crate) fn on_rejection(
        &mut self,
        status: Option<u16>,
        error_code: Option<&str>,
        message: &str,
    ) -> Option<(Vec<u8>, Value)> {
        if self.sent.is_none() || self.fallback_done {
            return None;
        }
        let status = status?;
        let start_new = error_code.is_some_and(|code| NEW_THREAD_ERRORS.contains(&code));
        // The endpoint cannot use threads: it says so, or it rejects the unknown `thread` field.
        let unsupported = error_code == Some("thread_unsupported_request")
            || (error_code.is_none() && status == 400 && message.contains("thread"));
        if !start_new && !unsupported {
            return None;
        }
        self.fallback_done = true;
        let reason = error_code.map_or_else(|| status.to_string(), str::to_string);
        let diagnostic = json!({"type": "anthropic_thread_fallback",
            "timestamp": crate::time::now_ms(), "error": {"message": message},
            "details": {"reason": reason}});
        let body = if start_new {
            self.create_body()?
        } else {
            self.sent = None;
            set_state(&self.session, State::Off);
            serde_json::to_vec(&self.params).ok()?
        };
        Some((body, diagnostic))
    }

    /// Follows the reply as it streams; a clean end records where the next request can continue.
    pub(crate) fn observe(&mut self, event: &StreamEvent) {
        let content = &mut self.reply.content;
        match event {
            StreamEvent::Meta {
                response_id,
                response_model,
            } => {
                if response_id.is_some() {
                    self.reply.response_id.clone_from(response_id);
                }
                if response_model.is_some() {
                    self.reply.response_model.clone_from(response_model);
                }
            }
            StreamEvent::BlockStart { index, kind } => {
                use super::types::BlockKind;
                let block = match kind {
                    BlockKind::Text => ContentBlock::Text(TextContent::new("")),
                    BlockKind::Thinking { redacted } => ContentBlock::Thinking(ThinkingContent {
                        thinking: String::new(),
                        thinking_signature: None,
                        redacted: redacted.then_some(true),
                    }),
                    BlockKind::ToolCall { id, name } => {
                        self.arguments.insert(*index, String::new());
                        ContentBlock::ToolCall(ToolCall {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: Value::Object(Map::new()),
                            thought_signature: None,
                        })
                    }
                };
                content.push(block);
            }
            StreamEvent::Delta { index, delta } => match content.get_mut(*index) {
                Some(ContentBlock::Text(t)) => t.text.push_str(delta),
                Some(ContentBlock::Thinking(t)) => t.thinking.push_str(delta),
                Some(ContentBlock::ToolCall(_)) => {
                    if let Some(raw) = self.arguments.get_mut(index) {
                        raw.push_str(delta);
                    }
                }
                _ => {}
            },
            StreamEvent::BlockEnd { index, signature } => match content.get_mut(*index) {
                Some(ContentBlock::Thinking(t)) => t.thinking_signature.clone_from(signature),
                Some(ContentBlock::ToolCall(call)) => {
                    let raw = self.arguments.remove(index).unwrap_or_default();
                    call.arguments = super::partial_json::parse_tool_arguments(&raw);
                }
                _ => {}
            },
            StreamEvent::Done { stop_reason, .. }
                if !matches!(stop_reason, StopReason::Error | StopReason::Aborted) =>
            {
                self.record(*stop_reason);
            }
            _ => {}
        }
    }

    /// Records the session's next continue point after the reply to a thread request: the
    /// request's messages plus the reply as the next request will send it. A fallback model's
    /// reply (`responseModel`) is not kept by the server, so it cannot be continued.
    fn record(&mut self, stop_reason: StopReason) {
        if self.sent.is_none() || self.reply.response_model.is_some() {
            return;
        }
        let Some(reply_id) = self.reply.response_id.clone() else {
            return;
        };
        self.reply.stop_reason = stop_reason;
        let reply = AgentMessage::Assistant(self.reply.clone());
        let mut prefix = self.messages();
        prefix.extend(super::anthropic::reply_messages(
            &reply,
            &self.model,
            self.oauth,
        ));
        set_state(
            &self.session,
            State::At {
                prefix_count: prefix.len(),
                prefix_hash: prefix_hash_of(&self.settings, &prefix),
                reply_id,
            },
        );
    }
}

/// The request settings a thread keeps fixed, as sent: a continue omits `system` and `tools`,
/// so only this check notices a change to them.
fn settings_of(
    url: &str,
    provider: &str,
    headers: &[(String, String)],
    params: &Map<String, Value>,
) -> String {
    let betas = headers
        .iter()
        .rev()
        .find(|(name, _)| name.eq_ignore_ascii_case("anthropic-beta"))
        .map(|(_, value)| value.as_str());
    let field = |key: &str| params.get(key).cloned().unwrap_or(Value::Null);
    json!([
        provider,
        url,
        field("model"),
        field("system"),
        field("tools"),
        field("thinking"),
        field("output_config"),
        field("tool_choice"),
        betas,
        field("fallbacks"),
    ])
    .to_string()
}

/// The hash of the settings and `messages`, normalized: no cache markers (they move to the newest
/// message), and string content as one text block (the form the marker needs).
fn prefix_hash_of(settings: &str, messages: &[Value]) -> u64 {
    let normalized: Vec<Value> = messages.iter().map(normalize).collect();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    settings.hash(&mut hasher);
    Value::Array(normalized).to_string().hash(&mut hasher);
    hasher.finish()
}

fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| key.as_str() != "cache_control")
                .map(|(key, value)| match (key.as_str(), value) {
                    ("content", Value::String(text)) => {
                        (key.clone(), json!([{"type": "text", "text": text}]))
                    }
                    _ => (key.clone(), normalize(value)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::anthropic::build_request_with;
    use super::super::test_support::{model, request, user};
    use super::super::types::{BlockKind, CacheRetention};
    use super::*;

    fn threaded(session: &str, messages: Vec<AgentMessage>) -> StreamRequest {
        let mut m = model("anthropic-messages", "anthropic", "claude-x");
        m.base_url = "https://api.anthropic.com".into();
        let mut r = request(m, messages);
        r.session_id = session.into();
        r.system_prompt = "SYS".into();
        r
    }

    /// The body the turn sends, after `prepare`.
    fn prepared(r: &StreamRequest) -> (Option<ThreadTurn>, Value) {
        let http = build_request_with(r, CacheRetention::Short);
        let mut body = serde_json::to_vec(&http.body).unwrap();
        let turn = ThreadTurn::prepare(r, &http, false, &mut body);
        (turn, serde_json::from_slice(&body).unwrap())
    }

    fn reply(turn: &mut ThreadTurn, id: &str, text: &str) {
        for event in [
            StreamEvent::Meta {
                response_id: Some(id.into()),
                response_model: None,
            },
            StreamEvent::BlockStart {
                index: 0,
                kind: BlockKind::Text,
            },
            StreamEvent::Delta {
                index: 0,
                delta: text.into(),
            },
            StreamEvent::BlockEnd {
                index: 0,
                signature: None,
            },
            StreamEvent::Done {
                stop_reason: StopReason::Stop,
                error_message: None,
            },
        ] {
            turn.observe(&event);
        }
    }

    fn answered(text: &str) -> AgentMessage {
        let mut a = AssistantMessage::empty("anthropic-messages", "anthropic", "claude-x");
        a.content = vec![ContentBlock::Text(TextContent::new(text))];
        AgentMessage::Assistant(a)
    }

    #[test]
    fn a_session_continues_its_thread_with_only_the_new_messages() {
        let (turn, body) = prepared(&threaded("s-continue", vec![user("one")]));
        let mut turn = turn.expect("threads apply");
        assert_eq!(body["thread"], json!({"type": "create"}));
        assert!(body.get("system").is_some());
        reply(&mut turn, "msg_a", "Hi");

        let history = vec![user("one"), answered("Hi"), user("two")];
        let (_, body) = prepared(&threaded("s-continue", history.clone()));
        assert_eq!(
            body["thread"],
            json!({"type": "continue", "previous_message_id": "msg_a"})
        );
        assert!(body.get("system").is_none() && body.get("tools").is_none());
        assert_eq!(body["messages"].as_array().unwrap().len(), 1);
        assert_eq!(body["messages"][0]["content"][0]["text"], "two");
        // Each reply is continued once: the same request again opens a new thread.
        let (_, body) = prepared(&threaded("s-continue", history));
        assert_eq!(body["thread"], json!({"type": "create"}));
    }

    #[test]
    fn a_changed_prefix_or_setting_opens_a_new_thread() {
        let (turn, _) = prepared(&threaded("s-changed", vec![user("one")]));
        reply(&mut turn.unwrap(), "msg_b", "Hi");
        // The reply in the history differs from what the server holds.
        let edited = vec![user("one"), answered("Hello"), user("two")];
        let (_, body) = prepared(&threaded("s-changed", edited));
        assert_eq!(body["thread"], json!({"type": "create"}));

        let (turn, _) = prepared(&threaded("s-changed-2", vec![user("one")]));
        reply(&mut turn.unwrap(), "msg_c", "Hi");
        let mut r = threaded(
            "s-changed-2",
            vec![user("one"), answered("Hi"), user("two")],
        );
        r.system_prompt = "OTHER".into();
        let (_, body) = prepared(&r);
        assert_eq!(body["thread"], json!({"type": "create"}));
    }

    #[test]
    fn fallback_and_error_replies_are_not_continued() {
        let (turn, _) = prepared(&threaded("s-fallback", vec![user("one")]));
        let mut turn = turn.unwrap();
        turn.observe(&StreamEvent::Meta {
            response_id: Some("msg_d".into()),
            response_model: Some("claude-fb".into()),
        });
        reply(&mut turn, "msg_d", "Hi");
        let (_, body) = prepared(&threaded(
            "s-fallback",
            vec![user("one"), answered("Hi"), user("two")],
        ));
        assert_eq!(body["thread"], json!({"type": "create"}));
    }

    #[test]
    fn rejections_start_a_new_thread_or_turn_threads_off() {
        let (turn, _) = prepared(&threaded("s-reject", vec![user("one")]));
        let mut turn = turn.unwrap();
        // Not about the thread: passed on.
        assert!(
            turn.on_rejection(Some(400), None, "400 prompt is too long")
                .is_none()
        );
        assert!(
            turn.on_rejection(Some(400), Some("invalid_model"), "400 thread x")
                .is_none()
        );
        let (body, diagnostic) = turn
            .on_rejection(Some(404), Some("thread_not_found"), "404 gone")
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["thread"], json!({"type": "create"}));
        assert_eq!(diagnostic["type"], "anthropic_thread_fallback");
        assert_eq!(diagnostic["error"], json!({"message": "404 gone"}));
        assert_eq!(diagnostic["details"], json!({"reason": "thread_not_found"}));
        // Once per request.
        assert!(
            turn.on_rejection(Some(404), Some("thread_not_found"), "404 gone")
                .is_none()
        );

        let (turn, _) = prepared(&threaded("s-reject", vec![user("one")]));
        let (body, diagnostic) = turn
            .unwrap()
            .on_rejection(
                Some(400),
                None,
                "400 thread: Extra inputs are not permitted",
            )
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert!(body.get("thread").is_none());
        assert_eq!(diagnostic["details"], json!({"reason": "400"}));
        // Off for the session: the body goes as built, with nothing to fall back from.
        let (turn, body) = prepared(&threaded("s-reject", vec![user("one")]));
        assert!(body.get("thread").is_none());
        assert!(
            turn.unwrap()
                .on_rejection(Some(400), Some("thread_unsupported_request"), "400 x")
                .is_none()
        );
    }

    #[test]
    fn threads_need_the_endpoint_or_the_key_and_a_session() {
        let mut r = threaded("s-applies", vec![user("one")]);
        assert!(applies(&r));
        r.model.base_url = "https://proxy.example".into();
        assert!(!applies(&r));
        r.model.compat = json!({"supportsMessageThreads": true}).as_object().cloned();
        assert!(applies(&r));
        r.session_id = String::new();
        assert!(!applies(&r));
        let mut r = threaded("s-applies", vec![user("one")]);
        r.model.compat = json!({"supportsMessageThreads": false})
            .as_object()
            .cloned();
        assert!(!applies(&r));
        assert!(prepared(&r).0.is_none());
    }

    #[test]
    fn markers_and_string_content_do_not_change_the_hash() {
        let marked = json!([{"role": "user", "content": [{"type": "text", "text": "hi",
            "cache_control": {"type": "ephemeral"}}]}]);
        let plain = json!([{"role": "user", "content": "hi"}]);
        let other = json!([{"role": "user", "content": "ho"}]);
        let hash = |v: &Value| prefix_hash_of("s", v.as_array().unwrap());
        assert_eq!(hash(&marked), hash(&plain));
        assert_ne!(hash(&plain), hash(&other));
        assert_ne!(prefix_hash_of("s", &[]), prefix_hash_of("t", &[]));
    }

    #[test]
    fn the_state_keeps_at_most_the_newest_sessions() {
        let mut states = States {
            entries: Vec::new(),
            cap: 2,
        };
        let at = State::At {
            prefix_count: 1,
            prefix_hash: 7,
            reply_id: "m".into(),
        };
        states.set("a", State::Off);
        states.set("b", at.clone());
        states.set("a", State::Off);
        states.set("c", State::Off);
        // "b" was updated least recently.
        assert_eq!(states.take("b"), None);
        assert_eq!(states.take("a"), Some(State::Off));
        assert_eq!(states.take("a"), Some(State::Off));
        states.set("d", at.clone());
        assert_eq!(states.take("d"), Some(at));
        assert_eq!(states.take("d"), None);
    }
}
