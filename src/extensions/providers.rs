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
use super::host::{ExtensionHost, HookChannel};
use super::protocol::HookKind;
use crate::config::Model;
use crate::provider::types::{Cancelled, RequestHooks};

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
        let shown: Map<String, Value> = headers
            .iter()
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
