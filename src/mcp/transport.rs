//! The two ways to reach a server, behind one interface: `send` a JSON-RPC message, and receive
//! `Inbound` items on the connection's channel. Each transport owns its threads; `close` ends them.
//!
//! stdio: the server is a child in its own process group; one thread reads its stdout as
//! newline-delimited JSON (a line that is not JSON is reported as `Garbage`, and the connection
//! goes on), one keeps the last 2,000 characters of its stderr, one writes its stdin (so a server
//! that stops reading cannot block the connection). Closing: stdin closed, 500 ms grace, SIGTERM
//! to the group, 2 s, SIGKILL to the group — on a reaper thread, so nobody waits for it; at
//! process exit `kill_all` sends SIGKILL to every group still alive.
//!
//! Streamable HTTP: every message is one POST (`Accept: application/json, text/event-stream`) on
//! its own thread; the answer is JSON or an event stream whose events are messages. The
//! `Mcp-Session-Id` from the server is sent back on every later request and the
//! `MCP-Protocol-Version` once negotiated; after `notifications/initialized` a GET event stream
//! is opened (a 405 means the server offers none). Reads end by data, EOF, or the per-read
//! timeout (the server's request timeout); close sends DELETE for the session.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::Value;

use super::config::Transport as TransportConfig;
use super::oauth::{self, Settings as OAuthSettings};
use crate::child::{LiveGroups, signal_group};

/// The largest message a server may send.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
const STDERR_TAIL_CHARS: usize = 2_000;
const STDIN_CLOSE_GRACE: Duration = Duration::from_millis(500);
const TERM_GRACE: Duration = Duration::from_secs(2);

/// What a transport delivers to its connection, tagged with the transport's generation so a
/// replaced transport's leftovers are ignored.
#[derive(Debug)]
pub struct Inbound {
    pub generation: u64,
    pub kind: InboundKind,
}

#[derive(Debug)]
pub enum InboundKind {
    Message(Value),
    /// A line or event that is not JSON (stdio servers that print logs on stdout).
    Garbage(String),
    /// Sending request `id` failed (HTTP status or network error).
    SendFailed {
        id: Option<u64>,
        error: String,
        kind: Failure,
    },
    /// The connection is gone (child exited, stdout closed).
    Closed,
}

/// What kind of HTTP failure, for what happens next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Network errors, 408, 429, 5xx (not 501): worth another attempt.
    Transient,
    /// 401 from a server with a configured `Authorization` header: the user fixes the header.
    Auth,
    /// 401 (or 403 `insufficient_scope`) from an OAuth server that a token refresh did not cure:
    /// the user signs in (`pi mcp login`, `/mcp login`).
    SignIn,
    /// 404 on a request that carried a session id: the server forgot the session.
    SessionExpired,
    Other,
}

/// A transport that could not start or take a message. `Display` is the text the connection
/// reports (in notices, `/mcp` and failed tool calls).
#[derive(Debug)]
pub enum TransportError {
    /// The stdio server's command did not start.
    Start {
        command: String,
        source: std::io::Error,
    },
    /// A stdio pipe the spawn asked for is missing ("stdout", "stderr", "stdin").
    NoPipe(&'static str),
    /// A reader, writer or request thread could not be spawned.
    Thread(std::io::Error),
    Encode(serde_json::Error),
    Closed,
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportError::Start { command, source } => {
                write!(f, "cannot start {command}: {source}")
            }
            TransportError::NoPipe(pipe) => write!(f, "no {pipe}"),
            TransportError::Thread(e) => e.fmt(f),
            TransportError::Encode(e) => e.fmt(f),
            TransportError::Closed => f.write_str("MCP connection closed"),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TransportError::Start { source, .. } | TransportError::Thread(source) => Some(source),
            TransportError::Encode(e) => Some(e),
            TransportError::NoPipe(_) | TransportError::Closed => None,
        }
    }
}

pub trait Transport: Send {
    /// Queues one message; `Err` when the transport is already closed.
    fn send(&mut self, message: &Value) -> Result<(), TransportError>;
    /// Called once the protocol version is agreed (HTTP sends it as a header).
    fn set_protocol_version(&mut self, _version: &str) {}
    /// The last lines the server wrote to stderr (stdio only).
    fn stderr_tail(&self) -> String {
        String::new()
    }
    /// Ends the transport; returns at once (the rest happens on its own threads).
    fn close(&mut self);
}

type Tx = Sender<Inbound>;

fn deliver(tx: &Tx, generation: u64, kind: InboundKind) -> bool {
    tx.send(Inbound { generation, kind }).is_ok()
}

/// Parses one line or event payload and delivers it (arrays are JSON-RPC batches).
fn deliver_text(tx: &Tx, generation: u64, text: &str) -> bool {
    let text = text.trim();
    if text.is_empty() {
        return true;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => items
            .into_iter()
            .all(|item| deliver(tx, generation, InboundKind::Message(item))),
        Ok(message) => deliver(tx, generation, InboundKind::Message(message)),
        Err(_) => {
            let shown: String = text.chars().take(200).collect();
            deliver(tx, generation, InboundKind::Garbage(shown))
        }
    }
}

/// `sandbox`: the confinement a stdio server starts in (see `Connection::connect`).
pub fn open(
    server: &str,
    config: &TransportConfig,
    timeout: Duration,
    generation: u64,
    sandbox: Option<&crate::sandbox::Policy>,
    tx: Tx,
) -> Result<Box<dyn Transport>, TransportError> {
    match config {
        TransportConfig::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let child = stdio_command(command, args, env, cwd, sandbox)?;
            StdioTransport::spawn(server, command, child, generation, tx)
                .map(|t| Box::new(t) as Box<dyn Transport>)
        }
        TransportConfig::Http {
            url,
            headers,
            oauth,
            provider,
        } => Ok(Box::new(HttpTransport::new(
            server,
            url,
            headers,
            Credentials {
                oauth: oauth.clone(),
                provider: provider.clone(),
            },
            timeout,
            generation,
            tx,
        ))),
    }
}

/// A stdio server's command: its own session and group, pi-rs's environment without credentials
/// plus the entry's `env`, and `sandbox`'s confinement when given.
fn stdio_command(
    command: &str,
    args: &[String],
    env: &[(String, String)],
    cwd: &std::path::Path,
    sandbox: Option<&crate::sandbox::Policy>,
) -> Result<Command, TransportError> {
    let mut cmd = Command::new(command);
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(policy) = sandbox {
        crate::sandbox::confine_child(&mut cmd, policy).map_err(|blocked| {
            TransportError::Start {
                command: command.to_string(),
                source: std::io::Error::other(blocked.to_string()),
            }
        })?;
    }
    crate::child::isolate(&mut cmd, crate::child::Origin::Agent);
    // pi-rs's environment without credentials, plus what the entry sets explicitly.
    crate::tools::env::scrub(&mut cmd);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    Ok(cmd)
}

// ---- stdio -----------------------------------------------------------------------------------

/// Process groups of running stdio servers, for `kill_all` at exit.
static LIVE_SERVERS: LiveGroups = LiveGroups::new();

/// Waits until every stdio server has stopped (their reapers are done) or `deadline` passes.
pub fn wait_all_stopped(deadline: Instant) {
    while Instant::now() < deadline
        && (!LIVE_SERVERS.is_empty() || SESSION_DELETES.load(Ordering::SeqCst) > 0)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Session-ending DELETEs still on their way. They run on threads of their own so `close` returns
/// at once; at exit `wait_all_stopped` waits for them (each is bounded by 1 s), or the process
/// would end before the server hears that the session is over.
static SESSION_DELETES: AtomicUsize = AtomicUsize::new(0);

/// SIGKILL to every server group still alive (pi-rs is exiting).
pub fn kill_all() {
    LIVE_SERVERS.kill_all();
}

struct StdioTransport {
    stdin: Option<Sender<Vec<u8>>>,
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
    /// Set when stderr reached EOF (the server's last words are all in).
    stderr_done: Arc<AtomicBool>,
}

impl StdioTransport {
    fn spawn(
        server: &str,
        command: &str,
        mut cmd: Command,
        generation: u64,
        tx: Tx,
    ) -> Result<StdioTransport, TransportError> {
        let mut child = cmd.spawn().map_err(|source| TransportError::Start {
            command: command.to_string(),
            source,
        })?;
        let pgid = child.id() as i32;
        LIVE_SERVERS.insert(pgid);
        let stdout = child
            .stdout
            .take()
            .ok_or(TransportError::NoPipe("stdout"))?;
        let stderr_pipe = child
            .stderr
            .take()
            .ok_or(TransportError::NoPipe("stderr"))?;
        let mut stdin_pipe = child.stdin.take().ok_or(TransportError::NoPipe("stdin"))?;
        let stderr = Arc::new(Mutex::new(String::new()));

        let reader_tx = tx.clone();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name).spawn(f).map(|_| ())
        };
        spawn(
            format!("mcp-{server}-out"),
            Box::new(move || read_lines(stdout, generation, reader_tx)),
        )
        .map_err(TransportError::Thread)?;
        let tail = stderr.clone();
        let stderr_done = Arc::new(AtomicBool::new(false));
        let done = stderr_done.clone();
        spawn(
            format!("mcp-{server}-err"),
            Box::new(move || {
                keep_tail(stderr_pipe, &tail);
                done.store(true, Ordering::SeqCst);
            }),
        )
        .map_err(TransportError::Thread)?;
        let (stdin_tx, stdin_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
        spawn(
            format!("mcp-{server}-in"),
            Box::new(move || {
                for bytes in stdin_rx {
                    if stdin_pipe
                        .write_all(&bytes)
                        .and_then(|_| stdin_pipe.flush())
                        .is_err()
                    {
                        break;
                    }
                }
                // Dropping the pipe closes the server's stdin.
            }),
        )
        .map_err(TransportError::Thread)?;
        Ok(StdioTransport {
            stdin: Some(stdin_tx),
            child: Some(child),
            stderr,
            stderr_done,
        })
    }
}

fn read_lines(stdout: impl Read, generation: u64, tx: Tx) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_MESSAGE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => break,
            Ok(_) if line.len() > MAX_MESSAGE_BYTES => {
                let _ = deliver(
                    &tx,
                    generation,
                    InboundKind::Garbage(format!("message over {MAX_MESSAGE_BYTES} bytes")),
                );
                // Skip to the end of that line.
                let mut skip = Vec::new();
                let _ = reader.read_until(b'\n', &mut skip);
            }
            Ok(_) => {
                if !deliver_text(&tx, generation, &String::from_utf8_lossy(&line)) {
                    return;
                }
            }
            Err(_) => break,
        }
    }
    let _ = deliver(&tx, generation, InboundKind::Closed);
}

fn keep_tail(stderr: impl Read, tail: &Mutex<String>) {
    let mut reader = BufReader::new(stderr);
    let mut buf = [0u8; 4096];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.push_str(&String::from_utf8_lossy(&buf[..n]));
        let excess = tail.chars().count().saturating_sub(STDERR_TAIL_CHARS);
        if excess > 0 {
            let cut = tail
                .char_indices()
                .nth(excess)
                .map_or(tail.len(), |(i, _)| i);
            tail.drain(..cut);
        }
    }
}

impl Transport for StdioTransport {
    fn send(&mut self, message: &Value) -> Result<(), TransportError> {
        let mut line = serde_json::to_vec(message).map_err(TransportError::Encode)?;
        line.push(b'\n');
        match &self.stdin {
            Some(stdin) => stdin.send(line).map_err(|_| TransportError::Closed),
            None => Err(TransportError::Closed),
        }
    }

    fn stderr_tail(&self) -> String {
        // stdout may close a moment before stderr has been read to its end.
        let until = Instant::now() + Duration::from_millis(500);
        while !self.stderr_done.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .trim()
            .to_string()
    }

    fn close(&mut self) {
        self.stdin = None;
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pgid = child.id() as i32;
        let reaper = move || {
            let started = Instant::now();
            let mut termed = false;
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                let waited = started.elapsed();
                if !termed && waited >= STDIN_CLOSE_GRACE {
                    signal_group(pgid, libc::SIGTERM);
                    termed = true;
                }
                if waited >= STDIN_CLOSE_GRACE + TERM_GRACE {
                    signal_group(pgid, libc::SIGKILL);
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            // Children of the server that ignored stdin closing would otherwise outlive it.
            signal_group(pgid, libc::SIGKILL);
            LIVE_SERVERS.remove(pgid);
        };
        if std::thread::Builder::new()
            .name("mcp-reaper".into())
            .spawn(reaper)
            .is_err()
        {
            signal_group(pgid, libc::SIGKILL);
        }
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.close();
    }
}

// ---- streamable HTTP -------------------------------------------------------------------------

/// Where an HTTP server's bearer comes from: its OAuth sign-in, or a provider's credential
/// (`auth.provider`); neither for a server with an `Authorization` header.
#[derive(Clone)]
struct Credentials {
    oauth: Option<Box<OAuthSettings>>,
    provider: Option<super::config::ProviderAuth>,
}

impl Credentials {
    /// The bearer for the next request, read now (None: the configured headers only).
    fn token(&self) -> Option<String> {
        match (&self.oauth, &self.provider) {
            (Some(settings), _) => oauth::bearer(settings),
            (None, Some(provider)) => provider.token(),
            (None, None) => None,
        }
    }
}

struct HttpTransport {
    server: String,
    url: String,
    headers: Vec<(String, String)>,
    credentials: Credentials,
    session: Arc<Mutex<Option<String>>>,
    protocol_version: Option<String>,
    agent: ureq::Agent,
    generation: u64,
    tx: Tx,
    closed: Arc<AtomicBool>,
    get_started: bool,
}

impl HttpTransport {
    fn new(
        server: &str,
        url: &str,
        headers: &[(String, String)],
        credentials: Credentials,
        timeout: Duration,
        generation: u64,
        tx: Tx,
    ) -> HttpTransport {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10).min(timeout)))
            .timeout_per_read(Some(timeout))
            .timeout_per_write(Some(timeout));
        HttpTransport {
            server: server.to_string(),
            url: url.to_string(),
            headers: headers.to_vec(),
            credentials,
            session: Arc::default(),
            protocol_version: None,
            agent: config.build().into(),
            generation,
            tx,
            closed: Arc::default(),
            get_started: false,
        }
    }

    /// Everything a request thread needs, owned.
    fn request_parts(&self) -> RequestParts {
        RequestParts {
            agent: self.agent.clone(),
            url: self.url.clone(),
            headers: self.headers.clone(),
            credentials: self.credentials.clone(),
            session: self.session.clone(),
            protocol_version: self.protocol_version.clone(),
            generation: self.generation,
            tx: self.tx.clone(),
            closed: self.closed.clone(),
        }
    }
}

#[derive(Clone)]
struct RequestParts {
    agent: ureq::Agent,
    url: String,
    headers: Vec<(String, String)>,
    credentials: Credentials,
    session: Arc<Mutex<Option<String>>>,
    protocol_version: Option<String>,
    generation: u64,
    tx: Tx,
    closed: Arc<AtomicBool>,
}

impl RequestParts {
    fn builder<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        let token = self.credentials.token();
        self.builder_with(request, token.as_deref())
    }

    /// The request's headers, with `token` (an OAuth access token or a provider's credential)
    /// as the bearer in place of a configured `Authorization` header.
    fn builder_with<B>(
        &self,
        mut request: ureq::RequestBuilder<B>,
        token: Option<&str>,
    ) -> ureq::RequestBuilder<B> {
        for (name, value) in &self.headers {
            if token.is_none() || !name.eq_ignore_ascii_case("authorization") {
                request = request.header(name, value);
            }
        }
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if let Some(id) = self
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            request = request.header("Mcp-Session-Id", id);
        }
        if let Some(version) = &self.protocol_version {
            request = request.header("MCP-Protocol-Version", version);
        }
        request
    }

    fn deliver(&self, kind: InboundKind) -> bool {
        !self.closed.load(Ordering::SeqCst) && deliver(&self.tx, self.generation, kind)
    }

    /// One POST and its answer.
    fn post(&self, body: Vec<u8>, id: Option<u64>, is_initialized: bool) -> bool {
        self.post_once(&body, id, is_initialized, false)
    }

    /// A POST; after a 401 from an OAuth server whose tokens could be refreshed, once more.
    fn post_once(
        &self,
        payload: &[u8],
        id: Option<u64>,
        is_initialized: bool,
        retried: bool,
    ) -> bool {
        let fail = |error: String, kind: Failure| {
            self.deliver(InboundKind::SendFailed { id, error, kind });
            false
        };
        let had_session = self
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        let token = self.credentials.token();
        let request = self
            .builder_with(self.agent.post(&self.url), token.as_deref())
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json");
        let response = match request.send(payload) {
            Ok(response) => response,
            Err(e) => return fail(format!("MCP HTTP request failed: {e}"), Failure::Transient),
        };
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .map(oauth::parse_challenge)
            .unwrap_or_default();
        if let Some(session) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
        {
            *self.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.to_string());
        }
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let mut body = response.into_body();
        let mut reader = body.as_reader();
        if !(200..300).contains(&status) {
            let mut text = String::new();
            let _ = (&mut reader).take(8 * 1024).read_to_string(&mut text);
            let text: String = text.trim().chars().take(500).collect();
            // More scope needed (RFC 6750 `insufficient_scope`, on a 403 or a 401): a new sign-in.
            let more_scope = challenge.error.as_deref() == Some("insufficient_scope");
            let oauth = &self.credentials.oauth;
            if status == 401 || (status == 403 && more_scope && oauth.is_some()) {
                // pi 1.6.0's needs-auth: the provider's own sign-in renews its credential.
                if let Some(auth) = &self.credentials.provider {
                    let error =
                        format!("requires sign-in. Run /login {} to sign in.", auth.provider);
                    return fail(error, Failure::SignIn);
                }
                let Some(settings) = oauth else {
                    let error = "requires authentication (HTTP 401): check the Authorization \
                                 header in mcp.json";
                    return fail(error.into(), Failure::Auth);
                };
                // A refresh keeps the granted scope, so more scope needs a new sign-in.
                if !retried
                    && !more_scope
                    && token.is_some()
                    && oauth::refresh(settings, token.as_deref(), &challenge) == Ok(true)
                {
                    return self.post_once(payload, id, is_initialized, true);
                }
                return fail(
                    "requires sign-in. Run /mcp to sign in.".into(),
                    Failure::SignIn,
                );
            }
            let message = match text.is_empty() {
                true => format!("MCP HTTP request failed with status {status}"),
                false => format!("MCP HTTP request failed with status {status}: {text}"),
            };
            let kind = match status {
                404 if had_session => Failure::SessionExpired,
                408 | 429 => Failure::Transient,
                501 => Failure::Other,
                500.. => Failure::Transient,
                _ => Failure::Other,
            };
            return fail(message, kind);
        }
        if id.is_none() {
            return is_initialized;
        }
        if status == 202 || status == 204 {
            return fail(
                format!("MCP server accepted request without a response (status {status})"),
                Failure::Other,
            );
        }
        match content_type.as_str() {
            "application/json" => {
                let mut text = String::new();
                if let Err(e) = reader
                    .take(MAX_MESSAGE_BYTES as u64)
                    .read_to_string(&mut text)
                {
                    return fail(
                        format!("MCP HTTP response could not be read: {e}"),
                        Failure::Transient,
                    );
                }
                deliver_text(&self.tx, self.generation, &text);
            }
            "text/event-stream" => {
                if let Err(e) = self.read_events(reader) {
                    return fail(e, Failure::Transient);
                }
            }
            other => {
                return fail(
                    format!(
                        "Unsupported MCP response content type: {}",
                        if other.is_empty() { "missing" } else { other }
                    ),
                    Failure::Other,
                );
            }
        }
        false
    }

    /// Reads an event stream until EOF, delivering each event's data as a message.
    fn read_events(&self, mut reader: impl Read) -> Result<(), String> {
        let mut parser = crate::provider::sse::SseParser::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return Ok(());
            }
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return Err(format!("MCP event stream failed: {e}")),
            };
            parser.push(&buf[..n]).map_err(|e| e.to_string())?;
            while let Some(event) = parser.next_event() {
                if !deliver_text(&self.tx, self.generation, &event.data) {
                    return Ok(());
                }
            }
        }
        for event in parser.finish() {
            deliver_text(&self.tx, self.generation, &event.data);
        }
        Ok(())
    }

    /// The server's own event stream (requests and notifications outside any POST), reopened
    /// after a read timeout until the transport closes. A 405 means it offers none.
    fn listen(&self) {
        while !self.closed.load(Ordering::SeqCst) {
            let request = self
                .builder(self.agent.get(&self.url))
                .header("Accept", "text/event-stream");
            let Ok(response) = request.call() else { return };
            if response.status().as_u16() != 200 {
                return;
            }
            let mut body = response.into_body();
            if self.read_events(body.as_reader()).is_err() {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

impl Transport for HttpTransport {
    fn send(&mut self, message: &Value) -> Result<(), TransportError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(TransportError::Closed);
        }
        let body = serde_json::to_vec(message).map_err(TransportError::Encode)?;
        // Requests carry a method and an id; our answers to the server's requests have no method.
        let id = message
            .get("method")
            .and(message.get("id"))
            .and_then(Value::as_u64);
        let is_initialized =
            message.get("method").and_then(Value::as_str) == Some("notifications/initialized");
        let parts = self.request_parts();
        let start_get = is_initialized && !self.get_started;
        self.get_started |= start_get;
        std::thread::Builder::new()
            .name(format!("mcp-{}-post", self.server))
            .spawn(move || {
                if parts.post(body, id, is_initialized) && start_get {
                    parts.listen();
                }
            })
            .map(|_| ())
            .map_err(TransportError::Thread)
    }

    fn set_protocol_version(&mut self, version: &str) {
        self.protocol_version = Some(version.to_string());
    }

    fn close(&mut self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let parts = self.request_parts();
        if parts
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
        {
            return;
        }
        SESSION_DELETES.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-{}-delete", self.server))
            .spawn(move || {
                let _ = parts
                    .builder(parts.agent.delete(&parts.url))
                    .config()
                    .timeout_global(Some(Duration::from_secs(1)))
                    .build()
                    .call();
                SESSION_DELETES.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            SESSION_DELETES.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for HttpTransport {
    fn drop(&mut self) {
        self.close();
    }
}
