//! Extensions and model providers (protocol 2, issue 23 items 8 and 9).
//!
//! Provider hooks: `ProviderHooks` is what a provider thread holds (`provider::RequestHooks`)
//! when a protocol-2 extension registered `before_provider_headers` / `before_provider_request`
//! or subscribed to the `after_provider_response` / `provider_stream_event` events. The two hooks
//! are asked from the provider thread itself, through the host's router (`HookChannel`), so the
//! agent loop never waits for them; the thread's wait ends at the chain's outcome, at its own
//! bound (every asked extension's deadline, plus a margin), or at once when the request is
//! dropped (abort). The two events are notifications: sent, never waited for.
//!
//! What an extension sees follows pi 1.6.0: the headers hook gets the request's extra headers
//! (models.json / provider `headers`), never the headers pi-rs derives from the API key; the
//! payload hook the body as it would be sent.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, at, select};
use serde_json::{Map, Value, json};

use super::hooks::HookOutcome;
use super::host::{ExtensionHost, ExtensionId, HookChannel};
use super::protocol::HookKind;
use crate::config::Model;
use crate::messages::{StopReason, Usage};
use crate::provider::types::{
    BlockKind, Cancelled, ProviderError, RequestHooks, StreamEvent, StreamRequest,
};

/// Added to the extensions' deadlines before a provider thread stops waiting on its own (the
/// router normally answers first: a missed deadline fails the extension and ends its step).
const WAIT_MARGIN: Duration = Duration::from_secs(5);

/// The provider-side view of the extensions' provider hooks for one request.
#[derive(Debug)]
pub struct ProviderHooks {
    channel: HookChannel,
    deadline: Duration,
    /// How many extensions handle each waiting hook (0: not asked).
    headers: usize,
    payload: usize,
    response: bool,
    stream: bool,
}

/// The hooks a request carries, or None when no extension wants any. `loop_request`: a request of
/// the agent loop (every hook and event); otherwise (a compaction summary) only the headers hook,
/// as pi 1.6.0 applies only that one outside the loop.
pub fn request_hooks(
    host: &ExtensionHost,
    deadline: Duration,
    loop_request: bool,
) -> Option<Arc<dyn RequestHooks>> {
    let hooks = ProviderHooks {
        channel: host.hook_channel(),
        deadline,
        headers: host.hook_handlers(HookKind::BeforeProviderHeaders),
        payload: if loop_request {
            host.hook_handlers(HookKind::BeforeProviderRequest)
        } else {
            0
        },
        response: loop_request && host.wants_event_v2("after_provider_response"),
        stream: loop_request && host.wants_event_v2("provider_stream_event"),
    };
    let wanted = hooks.headers > 0 || hooks.payload > 0 || hooks.response || hooks.stream;
    wanted.then(|| Arc::new(hooks) as Arc<dyn RequestHooks>)
}

impl ProviderHooks {
    fn bound(&self, handlers: usize) -> Duration {
        self.deadline
            .saturating_mul(handlers.max(1) as u32)
            .saturating_add(WAIT_MARGIN)
    }

    /// Asks the hook and waits for its outcome: None when the wait hit its bound or the host is
    /// gone (the request goes on unchanged).
    fn ask(
        &self,
        kind: HookKind,
        payload: Value,
        handlers: usize,
        cancelled: &Receiver<()>,
    ) -> Result<Option<HookOutcome>, Cancelled> {
        let outcome = self.channel.ask(kind, payload, self.deadline);
        let bound = at(crate::deadline::after(self.bound(handlers)));
        select! {
            recv(outcome) -> outcome => Ok(outcome.ok()),
            // Nothing is ever sent on it: this is the request's handle being dropped.
            recv(cancelled) -> _ => Err(Cancelled),
            recv(bound) -> _ => {
                log::warn!("{}: no outcome within its bound; the request goes on unchanged",
                    kind.as_str());
                Ok(None)
            }
        }
    }
}

impl RequestHooks for ProviderHooks {
    fn wait_bound(&self) -> Duration {
        self.bound(self.headers.max(self.payload))
    }

    fn wants_headers(&self) -> bool {
        self.headers > 0
    }

    fn headers(
        &self,
        headers: &[(String, String)],
        cancelled: &Receiver<()>,
    ) -> Result<Vec<(String, Option<String>)>, Cancelled> {
        // `Authorization` may carry a key pi-rs resolved (`authHeader`, a bearer token): never
        // shown; an answer may still set or remove it.
        let shown: Map<String, Value> = headers
            .iter()
            .filter(|(name, _)| !name.eq_ignore_ascii_case("authorization"))
            .map(|(name, value)| (name.clone(), Value::String(value.clone())))
            .collect();
        let payload = json!({ "headers": shown });
        Ok(
            match self.ask(
                HookKind::BeforeProviderHeaders,
                payload,
                self.headers,
                cancelled,
            )? {
                Some(HookOutcome::ProviderHeaders(patch)) => patch,
                _ => Vec::new(),
            },
        )
    }

    fn wants_payload(&self) -> bool {
        self.payload > 0
    }

    fn payload(
        &self,
        payload: Value,
        cancelled: &Receiver<()>,
    ) -> Result<Option<Value>, Cancelled> {
        let payload = json!({ "payload": payload });
        Ok(
            match self.ask(
                HookKind::BeforeProviderRequest,
                payload,
                self.payload,
                cancelled,
            )? {
                Some(HookOutcome::ProviderPayload(replacement)) => replacement,
                _ => None,
            },
        )
    }

    fn response(&self, _model: &Model, status: u16, headers: Value) {
        if self.response {
            self.channel.event_v2(json!({
                "type": "after_provider_response",
                "status": status,
                "headers": headers,
            }));
        }
    }

    fn wants_stream_events(&self) -> bool {
        self.stream
    }

    fn stream_event(&self, model: &Model, data: Value) {
        if self.stream {
            self.channel.event_v2(json!({
                "type": "provider_stream_event",
                "data": data,
                "provider": model.provider,
                "api": model.api,
                "model": model.id,
            }));
        }
    }
}

// ---- providers whose models the extension refreshes (`refreshModels: true`) -------------------

/// A `register_provider` config without pi-rs's `refreshModels: true` (pi's `refreshModels`
/// function: the extension answers `refresh_models` requests) and without `oauth` (see
/// `oauth_renewer`), and whether it had `refreshModels: true`.
pub fn without_refresh(config: &Value) -> (Value, bool) {
    let mut config = config.clone();
    let object = config.as_object_mut();
    let refresh = object.and_then(|c| {
        c.remove("oauth");
        c.remove("refreshModels")
    });
    (config, refresh.is_some_and(|v| v == Value::Bool(true)))
}

// ---- providers whose logins the extension refreshes (`oauth: {name?}`) ----------------------

/// pi 1.6.0 gives a provider's `oauth.refreshToken` this long (`DEFAULT_OAUTH_REFRESH_TIMEOUT_MS`).
const OAUTH_REFRESH_DEADLINE: Duration = Duration::from_secs(15);

/// A `register_provider` config's `oauth` (pi's OAuth functions; over JSONL `{name?,
/// getApiKey?, modifyModels?}`: the registering extension answers `oauth_refresh`, and
/// `oauth_api_key` / `oauth_modify_models` when those are `true`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OAuthDecl {
    pub get_api_key: bool,
    pub modify_models: bool,
}

/// Checks a `register_provider` config's `oauth`. Ok(None) without one.
pub fn check_oauth(config: &Value) -> Result<Option<OAuthDecl>, String> {
    const SHAPE: &str = "register_provider: oauth must be an object {name?: string, getApiKey?: boolean, modifyModels?: boolean}";
    let oauth = match config.get("oauth") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(oauth)) => oauth,
        Some(_) => return Err(SHAPE.into()),
    };
    let flag = |name: &str| match oauth.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(value)) => Ok(*value),
        Some(_) => Err(SHAPE.to_string()),
    };
    if !oauth.get("name").is_none_or(Value::is_string) {
        return Err(SHAPE.into());
    }
    Ok(Some(OAuthDecl {
        get_api_key: flag("getApiKey")?,
        modify_models: flag("modifyModels")?,
    }))
}

/// The refresher of a provider registered with `oauth` by `extension` (None without `oauth`):
/// asks the extension `oauth_refresh` with the stored credential, within 15 s as pi 1.6.0 (less
/// when the setting `extensionHookTimeoutMs` is less).
pub fn oauth_renewer(
    host: &ExtensionHost,
    extension: ExtensionId,
    registration: &Value,
    config: &crate::config::Config,
) -> Option<Arc<dyn crate::config::oauth::Renewer>> {
    let decl = check_oauth(registration).ok()??;
    Some(Arc::new(ExtensionOAuth {
        channel: host.hook_channel(),
        extension,
        deadline: oauth_deadline(config),
        derives_key: decl.get_api_key,
    }))
}

/// The deadline of the `oauth_*` requests: pi 1.6.0's refresh timeout, 15 s, or the setting
/// `extensionHookTimeoutMs` when that is less.
pub fn oauth_deadline(config: &crate::config::Config) -> Duration {
    config
        .setting("extensionHookTimeoutMs")
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
        .map_or(OAUTH_REFRESH_DEADLINE, |d| d.min(OAUTH_REFRESH_DEADLINE))
}

struct ExtensionOAuth {
    channel: HookChannel,
    extension: ExtensionId,
    deadline: Duration,
    /// `oauth.getApiKey: true`: the key is asked with `oauth_api_key`.
    derives_key: bool,
}

impl ExtensionOAuth {
    /// Asks the extension `kind` and waits for the answer (the router's deadline, else this
    /// wait's own bound).
    fn ask(&self, kind: &'static str, request: Value) -> Result<Value, String> {
        let outcome = self
            .channel
            .ask_extension(kind, self.extension, request, self.deadline);
        let bound = at(crate::deadline::after(self.deadline + WAIT_MARGIN));
        select! {
            recv(outcome) -> answer => answer.unwrap_or_else(|_| Err("the extensions are gone".into())),
            recv(bound) -> _ => Err(format!("no answer to {kind} within {} ms",
                self.deadline.as_millis())),
        }
    }
}

impl crate::config::oauth::Renewer for ExtensionOAuth {
    /// Waits for the answer on the refresh worker. As in pi 1.6.0, an abort does not end a
    /// refresh once asked (the extension may have rotated the refresh token already): the wait
    /// ends at the answer, the router's deadline, or its own bound.
    fn renew(
        &self,
        provider: &str,
        credential: &Map<String, Value>,
        _cancel: &crate::child::CancelFlag,
    ) -> Result<Map<String, Value>, String> {
        let request = json!({ "provider": provider, "credential": credential });
        match self.ask("oauth_refresh", request)? {
            Value::Object(credential) => Ok(credential),
            _ => Err("oauth_refresh_result.result must be an object".into()),
        }
    }

    fn derives_key(&self) -> bool {
        self.derives_key
    }

    /// pi's `oauth.getApiKey(credential)`: `oauth_api_key`, answered `{apiKey}`.
    fn api_key(&self, provider: &str, credential: &Map<String, Value>) -> Result<String, String> {
        let request = json!({ "provider": provider, "credential": credential });
        let answer = self.ask("oauth_api_key", request)?;
        match answer.get("apiKey") {
            Some(Value::String(key)) if !key.is_empty() => Ok(key.clone()),
            _ => Err("oauth_api_key_result.result.apiKey must be a non-empty string".into()),
        }
    }
}

// ---- virtual models (pi 1.6.0 `registerVirtualModel`; routed in src/agent/virtual_models.rs) ----

/// The catalog entry of a virtual model (pi 1.6.0's `createVirtualModel`).
pub fn virtual_model_entry(decl: &super::protocol::VirtualModelDecl) -> Model {
    let levels = &decl.thinking_levels;
    let map: serde_json::Map<String, Value> = crate::config::ThinkingLevel::ALL
        .iter()
        .map(|level| {
            let name = level.as_str();
            let value = if levels.iter().any(|l| l == name) {
                Value::String(name.into())
            } else {
                Value::Null
            };
            (name.to_string(), value)
        })
        .collect();
    Model {
        id: decl.id.clone(),
        name: decl.name.clone(),
        api: crate::config::model::VIRTUAL_MODEL_API.into(),
        provider: decl.provider.clone(),
        base_url: String::new(),
        reasoning: levels.iter().any(|l| l != "off"),
        thinking_level_map: Some(map),
        input: decl
            .input
            .clone()
            .unwrap_or_else(|| vec!["text".into(), "image".into()]),
        cost: Default::default(),
        context_window: decl.context_window.unwrap_or(0),
        max_tokens: decl.max_tokens.unwrap_or(0),
        headers: None,
        compat: None,
        extra: Default::default(),
    }
}

// ---- providers that stream themselves (`register_provider` with `streamSimple: true`) -----------

/// Events of one extension-streamed response waiting for the provider thread.
const STREAM_CAPACITY: usize = 1024;

/// Serves a request of a provider the extension streams itself, on the request's thread (see
/// `provider::spawn_served`): the `stream_request` goes out, each `stream_event` is turned into
/// pi-rs's stream events, and the stream ends with exactly one `Done` or `Failed`. A dropped
/// handle (abort) ends it at once and tells the extension `cancel_stream`; a silent extension is
/// ended by the agent's idle timeout (which drops the handle).
pub fn serve_stream(
    channel: &HookChannel,
    extension: ExtensionId,
    request: &Value,
    send: &dyn Fn(StreamEvent) -> bool,
    cancelled: &Receiver<()>,
) {
    let (wire, events) = channel.stream(extension, request, STREAM_CAPACITY);
    let mut state = StreamState::default();
    loop {
        select! {
            recv(events) -> event => {
                let produced = match event {
                    Ok(event) => state.convert(&event),
                    Err(_) => vec![failed(
                        "The extension stopped streaming before the response ended".into(),
                    )],
                };
                for event in produced {
                    let end = matches!(event, StreamEvent::Done { .. } | StreamEvent::Failed(_));
                    if !send(event) {
                        channel.cancel_stream(&wire);
                        return;
                    }
                    if end {
                        return;
                    }
                }
            }
            recv(cancelled) -> _ => {
                channel.cancel_stream(&wire);
                return;
            }
        }
    }
}

/// The `stream_request` fields for a request: `model` (as `get_state` shows it), `context`
/// (`systemPrompt`, `messages` as `get_messages` shows them, `tools`) and `options` (`apiKey`,
/// `headers`, `thinkingLevel`, `maxTokens`, `sessionId`).
pub fn stream_request(request: &StreamRequest) -> Value {
    let headers: Map<String, Value> = request
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), Value::String(value.clone())))
        .collect();
    let tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
        .collect();
    json!({
        "model": request.model,
        "context": {
            "systemPrompt": request.system_prompt,
            "messages": request.messages,
            "tools": tools,
        },
        "options": {
            "apiKey": request.api_key,
            "headers": headers,
            "thinkingLevel": request.thinking.as_str(),
            // pi-rs's cap (pi-ai fits a given cap into the window again, to the same value).
            "maxTokens": crate::provider::request::context_clamped_max_tokens(request),
            "sessionId": request.session_id,
        },
    })
}

fn failed(message: String) -> StreamEvent {
    StreamEvent::Failed(ProviderError {
        message,
        retry_after: None,
    })
}

/// The stream so far: whether it opened, and the content index pi-rs gave each of the
/// extension's `contentIndex` values (in order of their start).
#[derive(Default)]
struct StreamState {
    opened: bool,
    indexes: Vec<(u64, usize)>,
}

impl StreamState {
    /// One `stream_event` → pi-rs's stream events; a malformed event fails the stream.
    fn convert(&mut self, event: &Value) -> Vec<StreamEvent> {
        match self.try_convert(event) {
            Ok(events) => events,
            Err(error) => vec![failed(format!(
                "Bad stream event from the extension: {error}"
            ))],
        }
    }

    fn try_convert(&mut self, event: &Value) -> Result<Vec<StreamEvent>, String> {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut out = Vec::new();
        if !self.opened && kind != "error" {
            self.opened = true;
            out.push(StreamEvent::Opened);
        }
        let text = |key: &str| -> Result<String, String> {
            event
                .get(key)
                .and_then(Value::as_str)
                .map(String::from)
                .ok_or_else(|| format!("{kind}: {key} must be a string"))
        };
        let wire_index = || -> Result<u64, String> {
            event
                .get("contentIndex")
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("{kind}: contentIndex must be a whole number"))
        };
        match kind {
            "start" => {}
            "text_start" | "thinking_start" | "toolcall_start" => {
                let wire = wire_index()?;
                if self.indexes.iter().any(|(w, _)| *w == wire) {
                    return Err(format!("{kind}: block {wire} was started before"));
                }
                let block = match kind {
                    "text_start" => BlockKind::Text,
                    "thinking_start" => BlockKind::Thinking { redacted: false },
                    _ => BlockKind::ToolCall {
                        id: text("id")?,
                        name: text("toolName")?,
                    },
                };
                let index = self.indexes.len();
                self.indexes.push((wire, index));
                out.push(StreamEvent::BlockStart { index, kind: block });
            }
            "text_delta" | "thinking_delta" | "toolcall_delta" => {
                let index = self.index(wire_index()?, kind)?;
                out.push(StreamEvent::Delta {
                    index,
                    delta: text("delta")?,
                });
            }
            "text_end" | "thinking_end" | "toolcall_end" => {
                let index = self.index(wire_index()?, kind)?;
                let signature = event
                    .get("signature")
                    .and_then(Value::as_str)
                    .map(String::from);
                out.push(StreamEvent::BlockEnd { index, signature });
            }
            "done" => {
                if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
                    let mut usage: Usage = serde_json::from_value(usage.clone())
                        .map_err(|e| format!("done: usage: {e}"))?;
                    if usage.total_tokens == 0 {
                        usage.total_tokens =
                            usage.input + usage.output + usage.cache_read + usage.cache_write;
                    }
                    out.push(StreamEvent::Usage(usage));
                }
                let stop_reason = match event.get("reason").and_then(Value::as_str) {
                    None | Some("stop") => StopReason::Stop,
                    Some("length") => StopReason::Length,
                    Some("toolUse") => StopReason::ToolUse,
                    Some(other) => return Err(format!("done: unknown reason {other:?}")),
                };
                out.push(StreamEvent::Done {
                    stop_reason,
                    error_message: None,
                });
            }
            "error" => {
                let message = event
                    .get("errorMessage")
                    .and_then(Value::as_str)
                    .unwrap_or("The extension's stream failed")
                    .to_string();
                if self.opened {
                    let aborted = event.get("reason").and_then(Value::as_str) == Some("aborted");
                    out.push(StreamEvent::Done {
                        stop_reason: if aborted {
                            StopReason::Aborted
                        } else {
                            StopReason::Error
                        },
                        error_message: Some(message),
                    });
                } else {
                    out.push(failed(message));
                }
            }
            other => return Err(format!("unknown event type {other:?}")),
        }
        Ok(out)
    }

    fn index(&self, wire: u64, kind: &str) -> Result<usize, String> {
        self.indexes
            .iter()
            .find(|(w, _)| *w == wire)
            .map(|(_, index)| *index)
            .ok_or_else(|| format!("{kind}: block {wire} was not started"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oauth_declarations_are_checked() {
        let decl = |oauth: Value| check_oauth(&json!({ "oauth": oauth }));
        assert_eq!(check_oauth(&json!({})), Ok(None));
        assert_eq!(decl(Value::Null), Ok(None));
        assert_eq!(decl(json!({"name": "SSO"})), Ok(Some(OAuthDecl::default())));
        assert_eq!(
            decl(json!({"getApiKey": true, "modifyModels": false})),
            Ok(Some(OAuthDecl {
                get_api_key: true,
                modify_models: false
            }))
        );
        for bad in [
            json!("SSO"),
            json!({"name": 1}),
            json!({"getApiKey": "yes"}),
            json!({"modifyModels": 1}),
        ] {
            let error = decl(bad.clone()).expect_err(&bad.to_string());
            assert!(error.contains("getApiKey?: boolean"), "{error}");
        }
    }

    #[test]
    fn stream_events_become_pi_rs_stream_events() {
        let mut state = StreamState::default();
        let events = [
            json!({"type": "start"}),
            json!({"type": "text_start", "contentIndex": 3}),
            json!({"type": "text_delta", "contentIndex": 3, "delta": "Hi"}),
            json!({"type": "toolcall_start", "contentIndex": 7, "id": "c1", "toolName": "read"}),
            json!({"type": "toolcall_delta", "contentIndex": 7, "delta": "{}"}),
            json!({"type": "toolcall_end", "contentIndex": 7}),
            json!({"type": "text_end", "contentIndex": 3}),
            json!({"type": "done", "reason": "toolUse", "usage": {"input": 5, "output": 2}}),
        ];
        let out: Vec<StreamEvent> = events.iter().flat_map(|e| state.convert(e)).collect();
        assert_eq!(out[0], StreamEvent::Opened);
        assert_eq!(
            out[1],
            StreamEvent::BlockStart {
                index: 0,
                kind: BlockKind::Text
            }
        );
        assert!(matches!(&out[3], StreamEvent::BlockStart { index: 1, .. }));
        assert_eq!(
            out[5],
            StreamEvent::BlockEnd {
                index: 1,
                signature: None
            }
        );
        assert!(matches!(&out[7], StreamEvent::Usage(u) if u.total_tokens == 7));
        assert!(matches!(
            &out[8],
            StreamEvent::Done {
                stop_reason: StopReason::ToolUse,
                ..
            }
        ));
        let mut bad = StreamState::default();
        let out = bad.convert(&json!({"type": "text_delta", "contentIndex": 0, "delta": "x"}));
        assert!(
            matches!(out.last(), Some(StreamEvent::Failed(e)) if e.message.contains("was not started"))
        );
        let mut early = StreamState::default();
        let out = early.convert(&json!({"type": "error", "errorMessage": "quota"}));
        assert_eq!(out, vec![failed("quota".into())]);
    }
}
