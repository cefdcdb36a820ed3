//! Provider streaming: one thread per LLM request ("provider-<n>"), a blocking ureq POST whose SSE
//! body is decoded by the wire API's module into provider-neutral `StreamEvent`s and sent to the
//! agent over a bounded channel (so a stalled client stalls the socket read, not memory).
//!
//! Only `provider/<api>.rs` knows a provider's format: it builds the request (url, headers, body)
//! and maps SSE events (Bedrock: binary event-stream frames) to `StreamEvent`s. This file owns the
//! thread, HTTP and error mapping.
//!
//! Blocking calls and their bounds: connecting (`CONNECT_TIMEOUT`), writing the request and every
//! socket read (`StreamRequest::idle_timeout`, ureq's per-read/per-write timeouts, so a silent
//! server ends the request with `Request timed out.`), and `send` on the bounded channel (ends when
//! the agent reads or drops the receiver). A credential fetch before the request (Vertex's token
//! exchange, AWS container credentials) runs on the same HTTP agent, under the same bounds and
//! abort; an AWS `credential_process` is bounded by `config::auth::COMMAND_TIMEOUT`.
//!
//! How it ends: the body reaches EOF or its terminal event (→ `Done`), or fails (→ `Failed`), or
//! the agent drops the `StreamHandle` (the next `send` fails and the thread returns; a read blocked
//! on a silent socket ends by the idle timeout). Nothing here waits on the agent.

pub mod anthropic;
pub mod aws_remote;
pub mod azure_responses;
pub mod bedrock;
#[cfg(test)]
mod catalog_coverage;
pub mod codex_responses;
pub mod copilot;
pub mod event_stream;
pub mod google;
pub mod google_auth;
pub mod mistral;
pub mod openai_completions;
pub mod openai_responses;
pub mod retry;
pub mod sigv4;
pub mod sse;
pub mod token_cache;
pub mod transform;
pub mod vertex;

use std::io::Read;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::Value;

use crate::config::{Model, ThinkingLevel};
use crate::messages::{AgentMessage, StopReason, Usage};

/// A request counter value; events of an abandoned request are recognised by it and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId(pub u64);

/// A tool as offered to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema, `{"type":"object","properties":…,"required":[…]}`.
    pub parameters: Value,
}

/// Everything a provider thread needs; moved into the thread.
#[derive(Clone, Debug)]
pub struct StreamRequest {
    pub model: Model,
    pub api_key: String,
    /// Extra headers (models.json), already resolved.
    pub headers: Vec<(String, String)>,
    pub system_prompt: String,
    /// Already converted for the LLM (FACTS §7): only user, assistant and toolResult messages.
    pub messages: Vec<AgentMessage>,
    pub tools: Vec<ToolSpec>,
    pub thinking: ThinkingLevel,
    /// settings `thinkingBudgets` for minimal/low/medium/high, where set.
    pub thinking_budgets: [Option<u64>; 4],
    /// Output token cap; `None` → min(model.maxTokens, 32000).
    pub max_tokens: Option<u64>,
    pub session_id: String,
    /// A read that delivers nothing for this long fails the request.
    pub idle_timeout: Duration,
    /// Silent retries of a request that fails before its stream opens (`retry.provider.*`).
    pub provider_retry: retry::ProviderRetry,
}

/// What a block starts as.
#[derive(Clone, Debug, PartialEq)]
pub enum BlockKind {
    Text,
    Thinking { redacted: bool },
    ToolCall { id: String, name: String },
}

/// Provider-neutral stream events. `index` is the content index in the assistant message, assigned
/// by the API module in order of appearance (blocks are started in index order).
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// Response headers arrived with a success status: the assistant message starts.
    Opened,
    /// Response id / model as the provider reports them.
    Meta {
        response_id: Option<String>,
        response_model: Option<String>,
    },
    BlockStart {
        index: usize,
        kind: BlockKind,
    },
    /// Text, thinking or tool-call argument JSON, by the block's kind.
    Delta {
        index: usize,
        delta: String,
    },
    /// The block is complete. `signature` is the text/thinking signature or the thought signature
    /// of a tool call; for redacted thinking it carries the opaque data.
    BlockEnd {
        index: usize,
        signature: Option<String>,
    },
    /// Token counts so far (replaces earlier ones; cost is filled by the agent from the model).
    Usage(Usage),
    /// The stream finished. An `Error` stop reason carries the provider's message.
    Done {
        stop_reason: StopReason,
        error_message: Option<String>,
    },
    /// The request failed (HTTP status, network, malformed stream). Ends the stream.
    Failed(ProviderError),
    /// A provider-level retry (`retry.provider.maxRetries`) waits this long before sending the
    /// request again; nothing for the client, but the idle timeout starts after the wait.
    Retrying {
        delay: Duration,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProviderEvent {
    pub req: RequestId,
    pub event: StreamEvent,
}

/// A failed request, with the text pi would put in `errorMessage`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderError {
    pub message: String,
    /// From `retry-after` / `retry-after-ms`, when the server sent one.
    pub retry_after: Option<Duration>,
}

/// The text pi stores as the `thinking` of a redacted thinking block (the opaque payload travels in
/// `BlockEnd::signature`).
pub const REDACTED_THINKING_TEXT: &str = "[Reasoning redacted]";

/// Owns a running request. Dropping it cancels the request: the HTTP agent is shut down, which
/// interrupts a read blocked on a silent server at once, the thread's next send fails, and a
/// provider-level retry wait ends (its channel disconnects).
pub struct StreamHandle {
    pub req: RequestId,
    http: Option<ureq::Agent>,
    _cancel: Sender<()>,
    _thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        if let Some(agent) = self.http.take() {
            agent.shutdown();
        }
    }
}

/// Starts `request` on its own thread; events arrive on `events` tagged with `req`: `Opened`, then
/// stream events, ending with exactly one `Done` or `Failed` (a `Failed` may come without `Opened`
/// when the request fails before a successful response).
pub fn spawn_stream(
    req: RequestId,
    request: StreamRequest,
    events: Sender<ProviderEvent>,
) -> StreamHandle {
    let agent = http_agent(request.idle_timeout);
    let thread_agent = agent.clone();
    // Nothing is ever sent: the handle's drop disconnects it, which wakes a retry wait.
    let (cancel, cancelled) = crossbeam_channel::bounded(0);
    let thread = std::thread::Builder::new()
        .name(format!("provider-{}", req.0))
        .spawn(move || run_stream(req, &request, &events, thread_agent, &cancelled))
        .ok();
    StreamHandle {
        req,
        http: Some(agent),
        _cancel: cancel,
        _thread: thread,
    }
}

/// One HTTP agent per request, so cancelling it (`Agent::shutdown`) touches nothing else. Trust
/// store and proxy choice: `crate::net`.
fn http_agent(idle: Duration) -> ureq::Agent {
    crate::net::agent(CONNECT_TIMEOUT.min(idle), idle)
}

/// An HTTP request as a wire API module builds it.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpRequest {
    pub url: String,
    /// Header names as written; later entries never repeat an earlier name (case-insensitively).
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

/// How long prompt caches should live (`PI_CACHE_RETENTION=long` → `Long`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheRetention {
    Short,
    Long,
}

pub(crate) fn cache_retention_from_env() -> CacheRetention {
    match std::env::var("PI_CACHE_RETENTION") {
        Ok(v) if v == "long" => CacheRetention::Long,
        _ => CacheRetention::Short,
    }
}

/// Connecting gets its own, shorter bound than reads: an unreachable host should fail fast.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Error bodies are read up to this size; the rest is dropped.
const MAX_ERROR_BODY: u64 = 1024 * 1024;
/// The socket is read in chunks of this size and each chunk goes straight to the SSE parser.
const READ_CHUNK: usize = 16 * 1024;

/// SDK wordings the retry classifier recognises (FACTS §4.6).
const CONNECTION_ERROR_TEXT: &str = "Connection error.";
const TIMEOUT_TEXT: &str = "Request timed out.";
/// What undici reports when the body stream breaks off (socket reset, truncated chunked body).
const TERMINATED_TEXT: &str = "terminated";

/// The wire API's decoder, chosen by `model.api`.
pub(crate) enum Decoder {
    Anthropic(anthropic::Decoder),
    OpenAiCompletions(openai_completions::Decoder),
    OpenAiResponses(openai_responses::Decoder),
    Google(google::Decoder),
    Mistral(mistral::Decoder),
    /// Binary event-stream frames, not SSE: fed by `on_bytes`.
    Bedrock(bedrock::Decoder),
}

impl Decoder {
    fn on_sse(&mut self, sse: &sse::SseEvent) -> Vec<StreamEvent> {
        match self {
            Decoder::Anthropic(d) => d.on_sse(sse),
            Decoder::OpenAiCompletions(d) => d.on_sse(sse),
            Decoder::OpenAiResponses(d) => d.on_sse(sse),
            Decoder::Google(d) => d.on_sse(sse),
            Decoder::Mistral(d) => d.on_sse(sse),
            Decoder::Bedrock(_) => Vec::new(),
        }
    }

    fn on_eof(&mut self) -> Vec<StreamEvent> {
        match self {
            Decoder::Anthropic(d) => d.on_eof(),
            Decoder::OpenAiCompletions(d) => d.on_eof(),
            Decoder::OpenAiResponses(d) => d.on_eof(),
            Decoder::Google(d) => d.on_eof(),
            Decoder::Mistral(d) => d.on_eof(),
            Decoder::Bedrock(d) => d.on_eof(),
        }
    }

    fn is_finished(&self) -> bool {
        match self {
            Decoder::Anthropic(d) => d.is_finished(),
            Decoder::OpenAiCompletions(d) => d.is_finished(),
            Decoder::OpenAiResponses(d) => d.is_finished(),
            Decoder::Google(d) => d.is_finished(),
            Decoder::Mistral(d) => d.is_finished(),
            Decoder::Bedrock(d) => d.is_finished(),
        }
    }

    fn error_message(&self, status: u16, body: &str) -> String {
        match self {
            Decoder::Anthropic(_) => anthropic_http_error_message(status, body),
            Decoder::OpenAiCompletions(_) => openai_http_error_message(status, body),
            Decoder::OpenAiResponses(d) => d.http_error_message(status, body),
            Decoder::Google(_) => google::http_error_message(status, body),
            Decoder::Mistral(_) => mistral::http_error_message(status, body),
            Decoder::Bedrock(_) => bedrock::http_error_message(status, body),
        }
    }
}

/// Test helper: `stream` pushed to the SSE parser in the given pieces, every event through the
/// decoder, then EOF — what `run_stream` does with a body, without HTTP.
#[cfg(test)]
pub(crate) fn decode_in_parts(mut decoder: Decoder, parts: &[&[u8]]) -> Vec<StreamEvent> {
    let mut parser = sse::SseParser::new();
    let mut out = Vec::new();
    for part in parts {
        parser.push(part).unwrap();
        while let Some(event) = parser.next_event() {
            out.extend(decoder.on_sse(&event));
        }
    }
    for event in parser.finish() {
        out.extend(decoder.on_sse(&event));
    }
    out.extend(decoder.on_eof());
    out
}

/// Test helper: the stream decoded whole, then split at every byte offset; all must agree.
#[cfg(test)]
pub(crate) fn assert_every_split_decodes_the_same(stream: &str, new: &dyn Fn() -> Decoder) {
    let bytes = stream.as_bytes();
    let whole = decode_in_parts(new(), &[bytes]);
    for at in 0..=bytes.len() {
        let split = decode_in_parts(new(), &[&bytes[..at], &bytes[at..]]);
        assert_eq!(split, whole, "split at {at}");
    }
}

fn run_stream(
    req: RequestId,
    request: &StreamRequest,
    events: &Sender<ProviderEvent>,
    agent: ureq::Agent,
    cancelled: &Receiver<()>,
) {
    // `false` means the agent dropped the receiver: stop at once.
    let send = |event: StreamEvent| events.send(ProviderEvent { req, event }).is_ok();
    let fail = |message: String, retry_after: Option<Duration>| {
        send(StreamEvent::Failed(ProviderError {
            message,
            retry_after,
        }))
    };

    let (http, mut decoder) = match request.model.api.as_str() {
        "anthropic-messages" => (
            anthropic::build_request(request),
            Decoder::Anthropic(anthropic::Decoder::new(request)),
        ),
        "openai-completions" => (
            openai_completions::build_request(request),
            Decoder::OpenAiCompletions(openai_completions::Decoder::new(request)),
        ),
        "openai-responses" => (
            openai_responses::build_request(request),
            Decoder::OpenAiResponses(openai_responses::Decoder::new(request)),
        ),
        "google-generative-ai" => (
            google::build_request(request),
            Decoder::Google(google::Decoder::new(request)),
        ),
        "mistral-conversations" => (
            mistral::build_request(request),
            Decoder::Mistral(mistral::Decoder::new(request)),
        ),
        api @ ("azure-openai-responses" | "openai-codex-responses") => {
            let built = if api == "azure-openai-responses" {
                azure_responses::build_request(request)
            } else {
                codex_responses::build_request(request)
            };
            match built {
                Ok(http) => (
                    http,
                    Decoder::OpenAiResponses(openai_responses::Decoder::new(request)),
                ),
                Err(message) => {
                    fail(message, None);
                    return;
                }
            }
        }
        // Wire APIs whose request needs credentials resolved (and maybe fetched) first.
        "bedrock-converse-stream" => match bedrock::build_request(request, &agent) {
            Ok(http) => (http, Decoder::Bedrock(bedrock::Decoder::new(request))),
            Err(message) => {
                fail(message, None);
                return;
            }
        },
        "google-vertex" => match vertex::build_request(request, &agent) {
            Ok(http) => (http, Decoder::Google(google::Decoder::new(request))),
            Err(message) => {
                fail(message, None);
                return;
            }
        },
        other => {
            fail(format!("No API provider registered for api: {other}"), None);
            return;
        }
    };

    let body = match serde_json::to_vec(&http.body) {
        Ok(body) => body,
        Err(e) => {
            fail(format!("Could not encode the request: {e}"), None);
            return;
        }
    };
    let mut retries_done = 0;
    let response = loop {
        let failure = match open_response(req, &agent, &http, &body, &decoder) {
            Ok(response) => break response,
            Err(failure) => failure,
        };
        let server_delay = failure.server_delay;
        let policy = &request.provider_retry;
        match retry::decide(policy, failure, retries_done, retry::clock_jitter()) {
            retry::Decision::Fail(message) => {
                fail(message, server_delay);
                return;
            }
            retry::Decision::RetryAfter(delay) => {
                log::debug!(
                    "provider-{}: retrying in {} ms (retry.provider.maxRetries)",
                    req.0,
                    delay.as_millis()
                );
                // Disconnected: the request was cancelled (abort) while waiting.
                if !send(StreamEvent::Retrying { delay })
                    || cancelled.recv_timeout(delay) != Err(RecvTimeoutError::Timeout)
                {
                    return;
                }
                retries_done += 1;
            }
        }
    };
    if !send(StreamEvent::Opened) {
        return;
    }

    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_string();
    let mut reader = response.into_body().into_reader();
    let mut parser = sse::SseParser::new();
    let mut buf = vec![0u8; READ_CHUNK];
    // A 2xx body without a single event (an HTML error page, a proxy's banner) is a failure,
    // not an empty reply; the body's start goes into the message to show what came instead.
    let mut saw_event = false;
    let mut body_start = String::new();
    loop {
        let n = match reader.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::debug!("provider-{}: body read failed: {e}", req.0);
                fail(network_error_message(&ureq::Error::from(e), true), None);
                return;
            }
        };
        let mut produced = Vec::new();
        if body_start.len() < 200 {
            body_start.push_str(&String::from_utf8_lossy(&buf[..n.min(200)]));
        }
        if n == 0 {
            for sse in parser.finish() {
                saw_event = true;
                produced.extend(decoder.on_sse(&sse));
            }
            if !saw_event {
                let snippet: String = body_start.trim().chars().take(200).collect();
                fail(
                    format!(
                        "The provider's response is not an event stream (content-type: {content_type}): {snippet}"
                    ),
                    None,
                );
                return;
            }
            produced.extend(decoder.on_eof());
        } else if let Decoder::Bedrock(bedrock) = &mut decoder {
            // Every byte is checked by the frame CRCs, so any body counts as a stream.
            saw_event = true;
            produced.extend(bedrock.on_bytes(&buf[..n]));
        } else {
            if let Err(e) = parser.push(&buf[..n]) {
                fail(e.to_string(), None);
                return;
            }
            while let Some(sse) = parser.next_event() {
                saw_event = true;
                produced.extend(decoder.on_sse(&sse));
                if decoder.is_finished() {
                    break;
                }
            }
        }
        for event in produced {
            if !send(event) {
                return;
            }
        }
        // A terminal event ends the request even if the server keeps the connection open.
        if n == 0 || decoder.is_finished() {
            return;
        }
    }
}

/// Sends the request once. A success status is the response to stream; anything else is an
/// early failure with what the retry policy needs (status, `x-should-retry`, server delay) and
/// the text the request ends with if it is not retried.
fn open_response(
    req: RequestId,
    agent: &ureq::Agent,
    http: &HttpRequest,
    body: &[u8],
    decoder: &Decoder,
) -> Result<ureq::http::Response<ureq::Body>, retry::EarlyFailure> {
    let mut builder = crate::net::post(agent, &http.url);
    for (name, value) in &http.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    log::debug!("provider-{}: POST {}", req.0, http.url);
    let response = match builder.send(body) {
        Ok(response) => response,
        Err(error) => {
            log::debug!("provider-{}: request failed: {error}", req.0);
            return Err(retry::EarlyFailure {
                status: None,
                should_retry: None,
                server_delay: None,
                message: network_error_message(&error, false),
            });
        }
    };
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(response);
    }
    let server_delay = retry_after(response.headers());
    let should_retry = match response.headers().get("x-should-retry") {
        Some(v) if v == "true" => Some(true),
        Some(v) if v == "false" => Some(false),
        _ => None,
    };
    let mut text = Vec::new();
    let read = response
        .into_body()
        .into_reader()
        .take(MAX_ERROR_BODY)
        .read_to_end(&mut text);
    if let Err(e) = read {
        log::debug!("provider-{}: error body unreadable: {e}", req.0);
    }
    let text = String::from_utf8_lossy(&text);
    Err(retry::EarlyFailure {
        status: Some(status),
        should_retry,
        server_delay,
        message: decoder.error_message(status, &text),
    })
}

/// Words the agent's retry classifier knows, as the SDKs phrase them. `mid_stream`: the response
/// had started, so a broken connection reads as undici's `terminated`.
fn network_error_message(error: &ureq::Error, mid_stream: bool) -> String {
    use std::io::ErrorKind;
    let timed_out = match error {
        ureq::Error::Timeout(_) => true,
        ureq::Error::Io(e) => matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock),
        _ => false,
    };
    if timed_out {
        TIMEOUT_TEXT.to_string()
    } else if mid_stream {
        TERMINATED_TEXT.to_string()
    } else {
        CONNECTION_ERROR_TEXT.to_string()
    }
}

/// `retry-after-ms` (milliseconds) wins over `retry-after` (seconds, or an HTTP date: the time left
/// until then, zero when it has passed).
fn retry_after(headers: &ureq::http::HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    let number = |name: &str| -> Option<f64> {
        let value = text(name)?.parse::<f64>().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    // A server's header is untrusted: huge values are clamped, not a panic.
    if let Some(ms) = number("retry-after-ms") {
        return Some(crate::deadline::seconds(ms / 1000.0).unwrap_or_default());
    }
    if let Some(seconds) = number("retry-after") {
        return Some(crate::deadline::seconds(seconds).unwrap_or_default());
    }
    let until = retry::parse_http_date(text("retry-after")?)?;
    Some(
        until
            .duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// JavaScript truthiness of a parsed JSON value.
fn json_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// The SDKs' `APIError.makeMessage(status, error, message)`.
fn sdk_error_message(status: Option<u16>, error: Option<&Value>, message: Option<&str>) -> String {
    let from_error = error
        .filter(|e| json_truthy(e))
        .map(|e| match e.get("message") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            Some(m) if json_truthy(m) => m.to_string(),
            _ => e.to_string(),
        });
    let msg = from_error.or_else(|| message.filter(|m| !m.is_empty()).map(str::to_string));
    match (status, msg) {
        (Some(status), Some(msg)) => format!("{status} {msg}"),
        (Some(status), None) => format!("{status} status code (no body)"),
        (None, Some(msg)) => msg,
        (None, None) => "(no status code or body)".to_string(),
    }
}

/// Anthropic SDK: the whole JSON body is the error (so pi shows `<status> <JSON>` for Anthropic's
/// `{"type":"error","error":{…}}`); a body that is not JSON is shown as text.
pub fn anthropic_http_error_message(status: u16, body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(json) if json_truthy(&json) => sdk_error_message(Some(status), Some(&json), None),
        _ => sdk_error_message(Some(status), None, Some(body)),
    }
}

/// OpenAI SDK: the `error` member of a JSON body is the error (`<status> <error.message>`);
/// OpenRouter's `error.metadata.raw` is appended on its own line, as pi does.
pub fn openai_http_error_message(status: u16, body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(json) if json_truthy(&json) => {
            let error = json.get("error");
            let mut message = sdk_error_message(Some(status), error, None);
            if let Some(raw) = error.and_then(|e| e.pointer("/metadata/raw"))
                && json_truthy(raw)
            {
                message.push('\n');
                match raw {
                    Value::String(s) => message.push_str(s),
                    other => message.push_str(&other.to_string()),
                }
            }
            message
        }
        _ => sdk_error_message(Some(status), None, Some(body)),
    }
}

/// `<baseUrl><path>` without a doubled slash (the SDKs' buildURL).
pub(crate) fn join_url(base: &str, path: &str) -> String {
    if base.ends_with('/') && path.starts_with('/') {
        format!("{base}{}", &path[1..])
    } else {
        format!("{base}{path}")
    }
}

/// The output cap before thinking adjustments: the caller's, else min(model.maxTokens, 32000);
/// `None` when the model declares no maximum (pi leaves it undefined).
pub(crate) fn base_max_tokens(request: &StreamRequest) -> Option<u64> {
    request
        .max_tokens
        .or_else(|| (request.model.max_tokens > 0).then(|| request.model.max_tokens.min(32000)))
}

/// Adds the model's headers, then the request's, to `defaults`; a later header replaces an earlier
/// one of the same name regardless of case (as the SDKs merge headers).
pub(crate) fn with_extra_headers(
    defaults: Vec<(String, String)>,
    model: &Model,
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let mut headers = defaults;
    let model_headers = model
        .headers
        .iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())));
    for (name, value) in model_headers.chain(extra.iter().cloned()) {
        headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(&name));
        headers.push((name, value));
    }
    headers
}

/// `JSON.parse`, retried once on a repaired copy (raw control characters inside strings escaped,
/// invalid escapes doubled) as pi-ai's `parseJsonWithRepair` does.
pub(crate) fn parse_json_with_repair(text: &str) -> Result<Value, serde_json::Error> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(e) => {
            let repaired = repair_json(text);
            if repaired != text {
                serde_json::from_str(&repaired)
            } else {
                Err(e)
            }
        }
    }
}

fn repair_json(json: &str) -> String {
    let chars: Vec<char> = json.chars().collect();
    let mut out = String::with_capacity(json.len());
    let mut in_string = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if !in_string {
            out.push(c);
            in_string = c == '"';
            i += 1;
            continue;
        }
        match c {
            '"' => {
                out.push(c);
                in_string = false;
            }
            '\\' => match chars.get(i + 1) {
                None => out.push_str("\\\\"),
                Some('u')
                    if chars.len() >= i + 6
                        && chars[i + 2..i + 6].iter().all(char::is_ascii_hexdigit) =>
                {
                    out.extend(&chars[i..i + 6]);
                    i += 5;
                }
                Some(&next) if "\"\\/bfnrtu".contains(next) => {
                    out.push('\\');
                    out.push(next);
                    i += 1;
                }
                Some(_) => out.push_str("\\\\"),
            },
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// Tool-call arguments from streamed JSON, as pi-ai's `parseStreamingJson`: empty → `{}`;
/// complete (possibly repaired) JSON as is; a truncated document is closed at its last complete
/// value; anything else → `{}`.
pub fn parse_tool_arguments(partial_json: &str) -> Value {
    if partial_json.trim().is_empty() {
        return Value::Object(Default::default());
    }
    if let Ok(v) = parse_json_with_repair(partial_json) {
        return v;
    }
    close_partial_json(&repair_json(partial_json))
        .unwrap_or_else(|| Value::Object(Default::default()))
}

/// Best effort for a document cut off mid-way: cut back to the last point where a value ended
/// and close what is open.
fn close_partial_json(text: &str) -> Option<Value> {
    // Positions (byte offsets) after which the prefix is a sequence of complete members, with the
    // stack of open containers at that point.
    let mut cut_points: Vec<(usize, Vec<char>)> = Vec::new();
    let mut stack: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (pos, c) in text.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => {
                stack.push(if c == '{' { '}' } else { ']' });
                cut_points.push((pos + 1, stack.clone()));
            }
            '}' | ']' => {
                stack.pop();
                cut_points.push((pos + 1, stack.clone()));
            }
            ',' => cut_points.push((pos, stack.clone())),
            _ => {}
        }
    }
    // Try the whole text first (a truncated string or number may still close cleanly).
    let mut whole = text.to_string();
    if in_string {
        if escaped {
            whole.pop();
        }
        whole.push('"');
    }
    let closing: String = stack.iter().rev().collect();
    if let Ok(v) = serde_json::from_str::<Value>(&format!("{whole}{closing}")) {
        return Some(v);
    }
    for (pos, open) in cut_points.iter().rev() {
        let closing: String = open.iter().rev().collect();
        if let Ok(v) = serde_json::from_str::<Value>(&format!("{}{closing}", &text[..*pos])) {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Small builders shared by the provider tests.
    use super::*;
    use crate::messages::{
        AssistantMessage, ContentBlock, TextContent, ToolResultMessage, UserMessage,
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
            tools: Vec::new(),
            thinking: ThinkingLevel::Off,
            thinking_budgets: [None; 4],
            max_tokens: None,
            session_id: "session-1".into(),
            idle_timeout: Duration::from_secs(5),
            provider_retry: retry::ProviderRetry::default(),
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
}

#[cfg(test)]
mod tests {
    //! Loopback tests of the whole thread: a one-shot HTTP server on 127.0.0.1 serves a scripted
    //! reply and records the request it got.
    use super::test_support::{model, request, user};
    use super::*;
    use crossbeam_channel::{Receiver, bounded};
    use serde_json::json;
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Instant;

    /// What the server does after reading the request.
    enum Reply {
        /// Writes these bytes and closes.
        Raw(String),
        /// Writes these bytes, then keeps the connection open for the given time.
        Stall(String, Duration),
    }

    struct Recorded {
        head: String,
        body: Vec<u8>,
    }

    fn serve(reply: Reply) -> (String, std::thread::JoinHandle<Option<Recorded>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().ok()?;
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .ok()?;
            let recorded = read_request(&stream)?;
            let mut stream = stream;
            match reply {
                Reply::Raw(bytes) => {
                    let _ = stream.write_all(bytes.as_bytes());
                }
                Reply::Stall(bytes, hold) => {
                    let _ = stream.write_all(bytes.as_bytes());
                    let _ = stream.flush();
                    std::thread::sleep(hold);
                }
            }
            Some(recorded)
        });
        (url, handle)
    }

    fn read_request(stream: &TcpStream) -> Option<Recorded> {
        let mut reader = BufReader::new(stream);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let length = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        Some(Recorded { head, body })
    }

    fn sse_response(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn start(request: StreamRequest) -> Receiver<ProviderEvent> {
        let (tx, rx) = bounded(64);
        std::thread::spawn(move || {
            run_stream(
                RequestId(7),
                &request,
                &tx,
                http_agent(request.idle_timeout),
                &crossbeam_channel::never(),
            )
        });
        rx
    }

    /// Events until the terminal one (or a 20 s safety bound).
    fn collect(rx: &Receiver<ProviderEvent>) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        while let Ok(e) = rx.recv_timeout(Duration::from_secs(20)) {
            assert_eq!(e.req, RequestId(7));
            let terminal = matches!(e.event, StreamEvent::Done { .. } | StreamEvent::Failed(_));
            events.push(e.event);
            if terminal {
                break;
            }
        }
        events
    }

    fn anthropic_request(base_url: &str) -> StreamRequest {
        let mut m = model("anthropic-messages", "anthropic", "claude-sonnet-4-5");
        m.base_url = base_url.into();
        let mut r = request(m, vec![user("hi")]);
        r.api_key = "sk-secret-key".into();
        r
    }

    fn openai_request(base_url: &str) -> StreamRequest {
        let mut m = model("openai-completions", "mock", "gpt-test");
        m.base_url = format!("{base_url}/v1");
        let mut r = request(m, vec![user("hi")]);
        r.api_key = "sk-secret-key".into();
        r
    }

    fn failed(events: &[StreamEvent]) -> &ProviderError {
        match events.last() {
            Some(StreamEvent::Failed(e)) => e,
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    const ANTHROPIC_HELLO: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    #[test]
    fn streams_a_canned_anthropic_response() {
        let (url, server) = serve(Reply::Raw(sse_response(ANTHROPIC_HELLO)));
        let r = anthropic_request(&url);
        let events = collect(&start(r.clone()));
        assert_eq!(events[0], StreamEvent::Opened);
        assert!(events.contains(&StreamEvent::Delta {
            index: 0,
            delta: "Hello".into()
        }));
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done {
                stop_reason: StopReason::Stop,
                error_message: None
            })
        );
        let recorded = server.join().unwrap().unwrap();
        assert!(
            recorded.head.starts_with("POST /v1/messages HTTP/1.1\r\n"),
            "{}",
            recorded.head
        );
        assert!(
            recorded
                .head
                .to_ascii_lowercase()
                .contains("x-api-key: sk-secret-key\r\n")
        );
        assert!(recorded.head.contains("anthropic-version: 2023-06-01\r\n"));
        let body: Value = serde_json::from_slice(&recorded.body).unwrap();
        assert_eq!(body, anthropic::build_request(&r).body);
    }

    #[test]
    fn streams_a_canned_openai_response_in_small_chunks() {
        let body = "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"id\":\"c1\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";
        // Chunked transfer encoding with tiny chunks exercises reassembly across reads.
        let mut response =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                .to_string();
        for piece in body.as_bytes().chunks(7) {
            response.push_str(&format!(
                "{:x}\r\n{}\r\n",
                piece.len(),
                std::str::from_utf8(piece).unwrap()
            ));
        }
        response.push_str("0\r\n\r\n");
        let (url, server) = serve(Reply::Raw(response));
        let events = collect(&start(openai_request(&url)));
        assert_eq!(events[0], StreamEvent::Opened);
        assert!(events.contains(&StreamEvent::Delta {
            index: 0,
            delta: "Hi".into()
        }));
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done {
                stop_reason: StopReason::Stop,
                error_message: None
            })
        );
        let recorded = server.join().unwrap().unwrap();
        assert!(
            recorded
                .head
                .starts_with("POST /v1/chat/completions HTTP/1.1\r\n")
        );
        assert!(
            recorded
                .head
                .contains("authorization: Bearer sk-secret-key\r\n")
        );
    }

    #[test]
    fn overloaded_status_reports_body_and_retry_after() {
        let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let response = format!(
            "HTTP/1.1 529 Site Overloaded\r\ncontent-type: application/json\r\nretry-after: 2\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let (url, _server) = serve(Reply::Raw(response));
        let events = collect(&start(anthropic_request(&url)));
        assert_eq!(
            events.len(),
            1,
            "no Opened before a failed status: {events:?}"
        );
        let error = failed(&events);
        assert_eq!(error.message, format!("529 {body}"));
        assert_eq!(error.retry_after, Some(Duration::from_secs(2)));

        let body = r#"{"error":{"message":"boom internal","type":"server_error"}}"#;
        let response = format!(
            "HTTP/1.1 500 Internal Server Error\r\nretry-after-ms: 1500\r\nretry-after: 9\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let (url, _server) = serve(Reply::Raw(response));
        let events = collect(&start(openai_request(&url)));
        let error = failed(&events);
        assert_eq!(error.message, "500 boom internal");
        assert_eq!(error.retry_after, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn a_stalled_stream_ends_by_the_idle_timeout() {
        let first = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n";
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100000\r\n\r\n{first}"
        );
        let (url, _server) = serve(Reply::Stall(head, Duration::from_secs(10)));
        let mut r = anthropic_request(&url);
        r.idle_timeout = Duration::from_millis(300);
        let started = Instant::now();
        let events = collect(&start(r));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(events[0], StreamEvent::Opened);
        assert_eq!(failed(&events).message, "Request timed out.");
    }

    #[test]
    fn a_connection_closed_mid_stream_fails() {
        // Chunked body cut inside a chunk: the transport breaks off.
        let response = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n40\r\nevent: message_start\ndata: {\"type\":\"mes".to_string();
        let (url, _server) = serve(Reply::Raw(response));
        let events = collect(&start(anthropic_request(&url)));
        assert_eq!(events[0], StreamEvent::Opened);
        assert_eq!(failed(&events).message, "terminated");

        // A body that ends cleanly without message_stop is an incomplete Anthropic stream.
        let first = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n";
        let (url, _server) = serve(Reply::Raw(sse_response(first)));
        let events = collect(&start(anthropic_request(&url)));
        assert_eq!(
            failed(&events).message,
            "Anthropic stream ended before message_stop"
        );
    }

    #[test]
    fn refused_connection_and_unknown_api() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let events = collect(&start(anthropic_request(&format!(
            "http://127.0.0.1:{port}"
        ))));
        assert_eq!(failed(&events).message, "Connection error.");

        let mut r = anthropic_request("http://127.0.0.1:1");
        r.model.api = "no-such-api".into();
        let events = collect(&start(r));
        assert_eq!(
            failed(&events).message,
            "No API provider registered for api: no-such-api"
        );
    }

    #[test]
    fn dropping_the_receiver_ends_the_thread() {
        let mut body = String::new();
        for _ in 0..200 {
            body.push_str("data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
        }
        let (url, _server) = serve(Reply::Stall(sse_response(&body), Duration::from_secs(10)));
        let (tx, rx) = bounded(1);
        let r = openai_request(&url);
        let thread = std::thread::spawn(move || {
            run_stream(
                RequestId(1),
                &r,
                &tx,
                http_agent(r.idle_timeout),
                &crossbeam_channel::never(),
            )
        });
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap().event,
            StreamEvent::Opened
        );
        drop(rx);
        let started = Instant::now();
        while !thread.is_finished() {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "thread kept running"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn http_error_texts_follow_the_sdks() {
        assert_eq!(
            anthropic_http_error_message(502, "Bad gateway"),
            "502 Bad gateway"
        );
        assert_eq!(
            anthropic_http_error_message(503, ""),
            "503 status code (no body)"
        );
        assert_eq!(
            anthropic_http_error_message(400, r#"{"message":"m"}"#),
            "400 m"
        );
        assert_eq!(
            openai_http_error_message(429, r#"{"detail":"x"}"#),
            "429 status code (no body)"
        );
        assert_eq!(
            openai_http_error_message(404, "<html>nope</html>"),
            "404 <html>nope</html>"
        );
        assert_eq!(
            openai_http_error_message(400, r#"{"error":{"code":1}}"#),
            r#"400 {"code":1}"#
        );
        assert_eq!(
            openai_http_error_message(
                502,
                r#"{"error":{"message":"Provider returned error","metadata":{"raw":"upstream down"}}}"#
            ),
            "502 Provider returned error\nupstream down"
        );
    }

    #[test]
    fn tool_arguments_parse_like_pi() {
        assert_eq!(parse_tool_arguments(""), json!({}));
        assert_eq!(parse_tool_arguments(r#"{"a":1}"#), json!({"a":1}));
        assert_eq!(
            parse_tool_arguments("{\"a\":\"x\ny\"}"),
            json!({"a":"x\ny"})
        );
        assert_eq!(
            parse_tool_arguments(r#"{"a":"C:\d"}"#),
            json!({"a":"C:\\d"})
        );
        assert_eq!(
            parse_tool_arguments(r#"{"path":"a.t"#),
            json!({"path":"a.t"})
        );
        assert_eq!(parse_tool_arguments(r#"{"a":1,"b":"#), json!({"a":1}));
        assert_eq!(parse_tool_arguments(r#"{"a":[1,2"#), json!({"a":[1,2]}));
        assert_eq!(parse_tool_arguments("nonsense"), json!({}));
    }
}
