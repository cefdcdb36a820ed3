//! Provider streaming: one thread per LLM request ("provider-<n>"), a blocking ureq POST whose SSE
//! body is decoded by the wire API's module into provider-neutral `StreamEvent`s and sent to the
//! agent over a bounded channel (so a stalled client stalls the socket read, not memory).
//!
//! Only `provider/<api>.rs` knows a provider's format: it builds the request (url, headers, body)
//! and maps the framed body events to `StreamEvent`s (a `decode::WireDecoder`). This file is the
//! dispatcher: it picks the wire API by `model.api` (`wire_api`), owns the thread and the HTTP
//! exchange (provider-level retries, status errors), and feeds the body to the decoder scaffold
//! (`decode.rs`). The vocabulary is `types.rs`; the API files never import from here. Anthropic
//! message threads work on the final body and the HTTP exchange, so they are applied here too
//! (`anthropic_threads`: the body cut for the thread, a rejected thread's resend, the reply
//! followed to record where the next request continues).
//!
//! Blocking calls and their bounds: connecting (`CONNECT_TIMEOUT`), writing the request and every
//! socket read (`StreamRequest::idle_timeout`, ureq's per-read/per-write timeouts, so a silent
//! server ends the request with `Request timed out.`), and `send` on the bounded channel (ends when
//! the agent reads or drops the receiver). A credential fetch before the request (Vertex's token
//! exchange, AWS container credentials) runs on the same HTTP agent (the process's shared
//! connection pool), under the same bounds and abort; an AWS `credential_process` is bounded by `config::auth::COMMAND_TIMEOUT`.
//!
//! How it ends: the body reaches EOF or its terminal event (→ `Done`), or fails (→ `Failed`), or
//! the agent drops the `StreamHandle` (its `net::Cancel` shuts the request's socket, so a read
//! blocked on a silent server ends at once, and every later read or write fails). Nothing here
//! waits on the agent.
//!
//! Connections: every request shares one HTTP agent (connection pool) per idle bound, so a turn's
//! next request, or another ACP session's, reuses a kept-alive connection; cancelling one request
//! touches no other (`net::Cancel`).

pub mod anthropic;
pub mod anthropic_federation;
pub mod anthropic_threads;
pub mod aws_remote;
pub mod azure_responses;
pub mod bedrock;
#[cfg(test)]
mod catalog_coverage;
pub mod codex_responses;
pub mod copilot;
pub mod decode;
pub mod error_text;
pub mod event_stream;
pub mod google;
pub mod google_auth;
pub mod grammar;
pub mod history;
pub mod mistral;
pub mod openai_completions;
pub mod openai_responses;
pub mod partial_json;
pub mod pi_messages;
pub mod request;
pub mod request_cache;
pub mod retry;
pub mod sigv4;
pub mod sse;
pub mod strict_limits;
#[cfg(test)]
pub(crate) mod test_support;
pub mod token_cache;
pub mod transcript_tools;
pub mod transform;
pub mod types;
pub mod vertex;

use std::io::Read;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use decode::Decoder;
use error_text::network_error_message;
pub use types::{
    BlockKind, ProviderEvent, REDACTED_THINKING_TEXT, RequestId, StreamEvent, StreamRequest,
};
use types::{HttpRequest, ProviderError};

/// Owns a running request. Dropping it cancels the request: its socket is shut down
/// (`net::Cancel`), which interrupts a read blocked on a silent server at once, its later reads
/// and writes fail, and a provider-level retry wait ends (its channel disconnects). Other requests
/// on the shared connection pool are not touched.
pub struct StreamHandle {
    pub req: RequestId,
    http: Option<crate::net::Cancel>,
    _cancel: Sender<()>,
    _thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        if let Some(http) = self.http.take() {
            http.cancel();
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
    let http = crate::net::Cancel::default();
    let thread_http = http.clone();
    // Nothing is ever sent: the handle's drop disconnects it, which wakes a retry wait.
    let (cancel, cancelled) = crossbeam_channel::bounded(0);
    let thread = std::thread::Builder::new()
        .name(format!("provider-{}", req.0))
        .spawn(move || {
            let _scope = thread_http.enter();
            run_stream(req, &request, &events, agent, &cancelled)
        })
        .ok();
    StreamHandle {
        req,
        http: Some(http),
        _cancel: cancel,
        _thread: thread,
    }
}

/// Starts a request that is not served over HTTP by pi-rs (an extension streams the response):
/// `serve` runs on the request's own thread with a send function (false once the agent dropped
/// the receiver) and the cancel receiver (disconnected when the handle is dropped), and must end
/// with exactly one `Done` or `Failed`, as `spawn_stream`'s requests do.
pub fn spawn_served(
    req: RequestId,
    events: Sender<ProviderEvent>,
    serve: impl FnOnce(&dyn Fn(StreamEvent) -> bool, &Receiver<()>) + Send + 'static,
) -> StreamHandle {
    let (cancel, cancelled) = crossbeam_channel::bounded::<()>(0);
    let thread = std::thread::Builder::new()
        .name(format!("provider-{}", req.0))
        .spawn(move || {
            let send = |event: StreamEvent| events.send(ProviderEvent { req, event }).is_ok();
            serve(&send, &cancelled);
        })
        .ok();
    StreamHandle {
        req,
        http: None,
        _cancel: cancel,
        _thread: thread,
    }
}

/// The HTTP agent (connection pool) every request with this idle bound shares, across turns and
/// ACP sessions; the bound comes from one setting, so in practice there is one. A request is
/// cancelled on its own through `net::Cancel`. Trust store and proxy choice: `crate::net`.
fn http_agent(idle: Duration) -> ureq::Agent {
    static AGENTS: std::sync::Mutex<Vec<(Duration, ureq::Agent)>> =
        std::sync::Mutex::new(Vec::new());
    let mut agents = AGENTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, agent)) = agents.iter().find(|(bound, _)| *bound == idle) {
        return agent.clone();
    }
    let agent = crate::net::agent(CONNECT_TIMEOUT.min(idle), idle);
    agents.push((idle, agent.clone()));
    agent
}

/// Connecting gets its own, shorter bound than reads: an unreachable host should fail fast.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Error bodies are read up to this size; the rest is dropped.
const MAX_ERROR_BODY: u64 = 1024 * 1024;
/// The socket is read in chunks of this size and each chunk goes straight to the decoder.
const READ_CHUNK: usize = 16 * 1024;

/// The wire API `model.api` names: the request it sends and the decoder of its body. Building
/// fails when what the request needs (credentials, a base URL) is missing, or the API is unknown.
fn wire_api(
    request: &StreamRequest,
    agent: &ureq::Agent,
) -> Result<(HttpRequest, Decoder), String> {
    if let Some(reason) = required_strict_failure(request) {
        return Err(reason);
    }
    let responses = || Decoder::new(openai_responses::Decoder::new(request));
    let (mut http, decoder) = match request.model.api.as_str() {
        "anthropic-messages" => (
            anthropic::build_request(request),
            Decoder::new(anthropic::Decoder::new(request)),
        ),
        "openai-completions" if request.model.provider == "azure" => (
            azure_responses::build_completions_request(request).map_err(|e| e.to_string())?,
            Decoder::new(openai_completions::Decoder::new(request)),
        ),
        "openai-completions" => (
            openai_completions::build_request(request),
            Decoder::new(openai_completions::Decoder::new(request)),
        ),
        "openai-responses" => (openai_responses::build_request(request), responses()),
        "azure-openai-responses" => (
            azure_responses::build_request(request).map_err(|e| e.to_string())?,
            responses(),
        ),
        "openai-codex-responses" => (
            codex_responses::build_request(request)?,
            Decoder::new(codex_responses::decoder(request)),
        ),
        "google-generative-ai" => (
            google::build_request(request),
            Decoder::new(google::Decoder::new(request)),
        ),
        "pi-messages" => (
            pi_messages::build_request(request),
            Decoder::new(pi_messages::Decoder::new(request)),
        ),
        "mistral-conversations" => (
            mistral::build_request(request),
            Decoder::new(mistral::Decoder::new(request)),
        ),
        // Wire APIs whose request needs credentials resolved (and maybe fetched) first.
        "bedrock-converse-stream" => (
            bedrock::build_request(request, agent).map_err(|e| e.to_string())?,
            Decoder::new(bedrock::Decoder::new(request)),
        ),
        "google-vertex" => (
            vertex::build_request(request, agent).map_err(|e| e.to_string())?,
            Decoder::new(google::Decoder::new(request)),
        ),
        other => return Err(format!("No API provider registered for api: {other}")),
    };
    if request.model.provider == "cloudflare-ai-gateway" {
        cloudflare_gateway_auth(&mut http, &request.api_key);
    }
    if anthropic_federation::applies(request) {
        anthropic_federation::authorize(&mut http, request, agent, false)?;
    }
    Ok((http, decoder))
}

/// A tool that requires strict JSON-schema sampling fails the request where the API has no
/// strict tools or the tool's schema has no strict form (pi 1.6.0's reason text). pi-messages
/// passes the declarations on and decides nothing.
fn required_strict_failure(request: &StreamRequest) -> Option<String> {
    if request.strict_required.is_empty() {
        return None;
    }
    let model = &request.model;
    let (supported, unsupported) = match model.api.as_str() {
        "anthropic-messages" => (
            anthropic::strict_tools_supported(model),
            Some(anthropic::strict_rejects as request::UnsupportedKeyword),
        ),
        "openai-completions" => (
            openai_completions::resolve_compat(model).supports_strict_mode,
            None,
        ),
        "openai-responses" => (
            openai_responses::strict_supported(model, openai_responses::RESPONSES_TOOLS),
            None,
        ),
        "azure-openai-responses" => (
            openai_responses::strict_supported(model, azure_responses::TOOLS),
            None,
        ),
        "openai-codex-responses" => (
            openai_responses::strict_supported(model, codex_responses::TOOLS),
            None,
        ),
        "google-generative-ai" | "google-vertex" => (google::strict_supported(&model.id), None),
        "mistral-conversations" => (mistral::strict_supported(model), None),
        "bedrock-converse-stream" => (bedrock::strict_supported(model), None),
        _ => return None,
    };
    request::required_strict_failure(request, supported, unsupported)
}

/// Cloudflare's AI Gateway takes the key as `cf-aig-authorization: Bearer <key>` and no
/// `Authorization`/`x-api-key` of the upstream API (pi 1.6.0's gateway auth).
fn cloudflare_gateway_auth(http: &mut HttpRequest, api_key: &str) {
    http.headers.retain(|(name, _)| {
        !name.eq_ignore_ascii_case("authorization")
            && !name.eq_ignore_ascii_case("x-api-key")
            && !name.eq_ignore_ascii_case("cf-aig-authorization")
    });
    http.headers
        .push(("cf-aig-authorization".into(), format!("Bearer {api_key}")));
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

    let (mut http, mut decoder) = match wire_api(request, &agent) {
        Ok(built) => built,
        Err(message) => {
            fail(message, None);
            return;
        }
    };
    let hooks = request.hooks.as_deref();
    // Extensions' provider hooks wait here, before anything is sent; dropping the handle (abort)
    // ends the wait at once.
    if let Some(hooks) = hooks.filter(|h| h.wants_headers()) {
        if !send(StreamEvent::Waiting {
            up_to: hooks.wait_bound(),
        }) {
            return;
        }
        match hooks.headers(&request.headers, cancelled) {
            Ok(patch) => apply_header_patch(&mut http.headers, patch),
            Err(types::Cancelled) => return,
        }
    }

    let body = match &request.history {
        Some(history) => request_cache::splice(request, &http.body, history)
            .ok_or_else(|| "the kept history does not fit the request".to_string()),
        None => serde_json::to_vec(&http.body).map_err(|e| e.to_string()),
    };
    let mut body = match body {
        Ok(body) => body,
        Err(e) => {
            fail(format!("Could not encode the request: {e}"), None);
            return;
        }
    };
    if let Some(hooks) = hooks.filter(|h| h.wants_payload())
        && let Ok(payload) = serde_json::from_slice::<serde_json::Value>(&body)
    {
        if !send(StreamEvent::Waiting {
            up_to: hooks.wait_bound(),
        }) {
            return;
        }
        match hooks.payload(payload, cancelled) {
            Ok(Some(replacement)) => match serde_json::to_vec(&replacement) {
                Ok(replaced) => body = replaced,
                Err(e) => log::debug!("provider-{}: replacement payload unusable: {e}", req.0),
            },
            Ok(None) => {}
            Err(types::Cancelled) => return,
        }
    }
    // Anthropic message threads: the body becomes a thread's create or continue.
    let mut thread = anthropic_threads::ThreadTurn::prepare(
        request,
        &http,
        anthropic::is_oauth_token(&request.api_key),
        &mut body,
    );
    let mut retries_done = 0;
    let mut reauthorized = false;
    let response = loop {
        let mut failure = match open_response(req, request, &agent, &http, &body, &decoder) {
            Ok(response) => break response,
            Err(failure) => failure,
        };
        // Claude refused the strict tools for its limits: the agent sends the request again
        // without them (pi 1.6.0; only a request that declared strict tools, only once).
        if let Some(message) = failure.strict_limits.take()
            && !request.strict_tools_refused
            && strict_limits::declares_strict_tools(&http.body)
        {
            send(StreamEvent::StrictToolsRefused {
                diagnostic: strict_limits::fallback_diagnostic(&request.model.api, message),
                error: ProviderError {
                    message: failure.message,
                    retry_after: failure.server_delay,
                },
            });
            return;
        }
        // A federated token the API refuses is exchanged again, once (as the Anthropic SDK).
        if failure.status == Some(401) && !reauthorized && anthropic_federation::applies(request) {
            reauthorized = true;
            match anthropic_federation::authorize(&mut http, request, &agent, true) {
                Ok(()) => continue,
                Err(message) => {
                    fail(message, None);
                    return;
                }
            }
        }
        let server_delay = failure.server_delay;
        let (status, error_code, error_text) = (
            failure.status,
            failure.error_code.clone(),
            failure.message.clone(),
        );
        let policy = &request.provider_retry;
        match retry::decide(policy, failure, retries_done, retry::clock_jitter()) {
            retry::Decision::Fail(message) => {
                // A rejected thread is sent again once, in full (a new thread, or none).
                let resend = thread
                    .as_mut()
                    .and_then(|t| t.on_rejection(status, error_code.as_deref(), &error_text));
                if let Some((resent, diagnostic)) = resend {
                    if !send(StreamEvent::Diagnostic(diagnostic)) {
                        return;
                    }
                    body = resent;
                    retries_done = 0;
                    continue;
                }
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
    if let Some(hooks) = hooks {
        hooks.response(
            &request.model,
            response.status().as_u16(),
            headers_record(response.headers()),
        );
        if hooks.wants_stream_events() {
            decoder.keep_raw_events();
        }
    }
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
    let mut buf = vec![0u8; READ_CHUNK];
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
        let produced = if n == 0 {
            decoder.finish(&content_type)
        } else {
            decoder.feed(&buf[..n])
        };
        // A terminal event ends the request even if the server keeps the body open. What follows
        // it (usually just the body's end) is read before the answer goes out, under a short
        // bound, so the connection is back in the pool when the agent sends its next request.
        if n > 0 && decoder.is_finished() {
            crate::net::drain(&mut reader);
        }
        if let Some(hooks) = hooks {
            for data in decoder.take_raw_events() {
                hooks.stream_event(&request.model, data);
            }
        }
        for event in produced {
            if let Some(thread) = thread.as_mut() {
                thread.observe(&event);
            }
            if !send(event) {
                return;
            }
        }
        if n == 0 || decoder.is_finished() {
            return;
        }
    }
}

/// Applies extensions' header changes to the request as built: a name set replaces every header
/// of that name (case-insensitively), a name removed drops them.
fn apply_header_patch(headers: &mut Vec<(String, String)>, patch: Vec<(String, Option<String>)>) {
    for (name, value) in patch {
        headers.retain(|(have, _)| !have.eq_ignore_ascii_case(&name));
        if let Some(value) = value {
            headers.push((name, value));
        }
    }
}

/// Response headers as fetch's `Headers` show them: lower-case names, repeated ones joined by
/// `, `.
fn headers_record(headers: &ureq::http::HeaderMap) -> serde_json::Value {
    let mut record = serde_json::Map::new();
    for name in headers.keys() {
        let values: Vec<String> = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        record.insert(name.as_str().to_string(), values.join(", ").into());
    }
    serde_json::Value::Object(record)
}

/// Sends the request once. A success status is the response to stream; anything else is an
/// early failure with what the retry policy needs (status, `x-should-retry`, server delay) and
/// the text the request ends with if it is not retried.
fn open_response(
    req: RequestId,
    request: &StreamRequest,
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
                error_code: None,
                strict_limits: None,
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
    let error_type = response
        .headers()
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
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
    let error_code = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|json| {
            json.pointer("/error/details/error_code")?
                .as_str()
                .map(str::to_string)
        });
    Err(retry::EarlyFailure {
        status: Some(status),
        should_retry,
        server_delay,
        message: decoder.http_error_message(status, &text),
        error_code,
        strict_limits: strict_limits::refusal_message(
            &request.model.api,
            status,
            error_type.as_deref(),
            &text,
        ),
    })
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

#[cfg(test)]
mod tests {
    //! Loopback tests of the whole thread: a one-shot HTTP server on 127.0.0.1 serves a scripted
    //! reply and records the request it got.
    use super::test_support::{model, request, user};
    use super::*;
    use crate::messages::StopReason;
    use crossbeam_channel::{Receiver, bounded};
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
        let body: serde_json::Value = serde_json::from_slice(&recorded.body).unwrap();
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
        assert_eq!(
            error.message,
            r#"500: {"message":"boom internal","type":"server_error"}"#
        );
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
}
