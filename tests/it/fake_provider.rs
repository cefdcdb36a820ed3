//! A scripted stand-in for an LLM provider, listening on 127.0.0.1.
//!
//! `FakeProvider::start(script)` binds an ephemeral port and serves HTTP/1.1 (keep-alive, one
//! thread per connection). Every request is recorded (method, path, lowercase headers, JSON body)
//! and answered with the next `Reply` of the script, in arrival order, whatever the path: the
//! same server backs the `fake-anthropic` (`/v1/messages`) and `fake-openai`
//! (`/v1/chat/completions`) providers of `fixtures/models.json`. Streams are written with
//! `Transfer-Encoding: chunked`, one chunk per SSE event, as the real APIs do.
//!
//! A connection that opens with a TLS handshake (an `https://` URL pointed at this port) gets a
//! plain-text 400 and is closed, as real HTTP servers answer it; `tls_handshakes_refused` counts
//! them.
//!
//! A body sent with `Content-Encoding: zstd` (pi 1.6.0's Codex client compresses its requests) is
//! recorded decompressed, by the system's `zstd` command.
//!
//! Checks made on every request, reported by `finish()` or, failing that, by `Drop` (which panics
//! the test unless it is already panicking): a request arriving after the script ran out, a body
//! that is not JSON, and a conversation history in which a tool call does not have exactly one
//! result (Anthropic `tool_use`/`tool_result` and OpenAI `tool_calls`/`role:"tool"` shapes).
//!
//! Ends: `Drop` sets a shutdown flag and wakes the accept loop; connection threads notice the
//! flag within one read-timeout tick (50 ms) and close their sockets, which also releases any
//! stalled stream.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How often blocked socket reads wake up to look at the shutdown/release flags.
const POLL_TICK: Duration = Duration::from_millis(50);
/// The first byte of a TLS ClientHello (record type "handshake").
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// `bytes` decompressed by `zstd -d` (no zstd crate among the dependencies).
fn zstd_decompress(bytes: &[u8]) -> io::Result<Vec<u8>> {
    let mut child = std::process::Command::new("zstd")
        .args(["-d", "-c", "-q"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = bytes.to_vec();
    // Written from another thread: a large body would fill both pipes otherwise.
    let writer = thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| invalid("zstd writer panicked"))??;
    if !output.status.success() {
        return Err(invalid("zstd could not decompress the request body"));
    }
    Ok(output.stdout)
}

/// Absolute path of a file under `fixtures/`.
pub fn fixture_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(relative)
}

/// Contents of a file under `fixtures/` (panics with the path if it is missing).
pub fn fixture(relative: &str) -> String {
    let path = fixture_path(relative);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read fixture {}: {err}", path.display()))
}

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// `200 text/event-stream`, the body sent one SSE event per chunk, `gap` between events.
    Sse { body: String, gap: Duration },
    /// Any status with a body (usually a provider error JSON) and extra headers.
    Status {
        code: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
    /// `200 text/event-stream`, sends `prefix`, then holds the connection open until
    /// `FakeProvider::release_stalls()` (which drops the connection mid-stream), the client
    /// closes it, or the fake shuts down.
    Stall { prefix: String },
    /// `200 text/event-stream`, sends `prefix`, holds the stream open until
    /// `FakeProvider::release_stalls()`, then sends `rest` and ends the body normally (unlike
    /// `Stall`, the reply completes). Lets a test act while a turn is provably mid-stream.
    Hold { prefix: String, rest: String },
}

impl Reply {
    /// A complete SSE stream given as text (see `sse.rs` for generators).
    pub fn sse(body: impl Into<String>) -> Reply {
        Reply::Sse {
            body: body.into(),
            gap: Duration::ZERO,
        }
    }

    /// A complete SSE stream read from `fixtures/<relative>`.
    pub fn sse_fixture(relative: &str) -> Reply {
        Reply::sse(fixture(relative))
    }

    /// An SSE stream sent one event every `gap` (lets a test abort mid-stream).
    pub fn sse_slow(body: impl Into<String>, gap: Duration) -> Reply {
        Reply::Sse {
            body: body.into(),
            gap,
        }
    }

    /// A plain HTTP answer, e.g. `Reply::status(529, fixture("anthropic/error_529.json"),
    /// &[("retry-after", "0")])`.
    pub fn status(code: u16, body: impl Into<String>, headers: &[(&str, &str)]) -> Reply {
        Reply::Status {
            code,
            body: body.into(),
            headers: headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
        }
    }

    /// Sends `prefix` (some SSE events, possibly empty) and then stalls.
    pub fn stall_after(prefix: impl Into<String>) -> Reply {
        Reply::Stall {
            prefix: prefix.into(),
        }
    }

    /// Sends the events of `body` up to (not including) the first whose text contains
    /// `hold_before`, waits for `release_stalls()`, then sends the rest.
    pub fn hold(body: &str, hold_before: &str) -> Reply {
        let cut = body
            .find(hold_before)
            .map(|pos| body[..pos].rfind("\n\n").map_or(0, |p| p + 2))
            .unwrap_or_else(|| panic!("hold point {hold_before:?} not in the body"));
        Reply::Hold {
            prefix: body[..cut].to_string(),
            rest: body[cut..].to_string(),
        }
    }
}

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` if it was empty or not JSON).
    pub body: Value,
    /// The body's bytes (decompressed when it came zstd-encoded).
    pub raw_body: Vec<u8>,
    /// When the request's body was complete.
    pub received_at: Instant,
    /// Which accepted connection carried it (0, 1, … in accept order): requests on one number
    /// shared a kept-alive connection.
    pub connection: usize,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
    }

    /// `body.messages` (both APIs name the history that way), or an empty slice.
    pub fn messages(&self) -> &[Value] {
        self.body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The names of the tools the request declares (`body.tools[].name`), in order.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    failures: Vec<String>,
    /// Bumped by `release_stalls`; a stall ends when it sees a value above the one it started with.
    release_generation: u64,
    /// Stalled connections that the client closed on its own (e.g. after an abort).
    stalls_closed_by_client: usize,
    /// Connections that opened with a TLS handshake and got a plain-text 400.
    tls_handshakes_refused: usize,
    shutdown: bool,
    /// An authorization server, not an LLM API: requests are not checked as provider requests.
    any_request: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread must not hide the test's own result.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn shutting_down(&self) -> bool {
        self.lock().shutdown
    }

    fn fail(&self, message: String) {
        self.lock().failures.push(message);
        self.changed.notify_all();
    }
}

pub struct FakeProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

impl FakeProvider {
    pub fn start(script: Vec<Reply>) -> FakeProvider {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local_addr");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                script: script.into(),
                ..State::default()
            }),
            changed: Condvar::new(),
        });
        let accept_shared = Arc::clone(&shared);
        let accept_thread = thread::Builder::new()
            .name("fake-provider-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))
            .expect("spawn fake provider");
        FakeProvider {
            addr,
            shared,
            accept_thread: Some(accept_thread),
        }
    }

    /// A fake authorization server (OAuth token and device-code endpoints): like `start`, but any
    /// method and body is accepted (form posts, GETs).
    pub fn start_auth_server(script: Vec<Reply>) -> FakeProvider {
        let fake = FakeProvider::start(script);
        fake.shared.lock().any_request = true;
        fake
    }

    /// `http://127.0.0.1:<port>` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request recorded so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Waits until at least `count` requests arrived; panics after `timeout`.
    #[track_caller]
    pub fn wait_for_requests(&self, count: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.wait_for_count(count, timeout, "request(s)", |state| state.requests.len())
            .requests
            .clone()
    }

    /// Ends every stalled stream by dropping its connection without the final chunk.
    pub fn release_stalls(&self) {
        self.shared.lock().release_generation += 1;
    }

    /// Stalled streams whose connection the client closed before they were released.
    pub fn stalls_closed_by_client(&self) -> usize {
        self.shared.lock().stalls_closed_by_client
    }

    /// Takes the problems recorded so far (so `Drop` will not panic over them): for callers,
    /// like the bench, that report problems instead of failing a test.
    pub fn take_failures(&self) -> Vec<String> {
        std::mem::take(&mut self.shared.lock().failures)
    }

    /// Waits until at least `count` stalled or held streams were closed by the client (e.g. an
    /// abort that really cancels the HTTP request); panics after `timeout`.
    #[track_caller]
    pub fn wait_for_stalls_closed_by_client(&self, count: usize, timeout: Duration) {
        drop(
            self.wait_for_count(count, timeout, "client-closed stream(s)", |state| {
                state.stalls_closed_by_client
            }),
        );
    }

    /// Waits until `counter` reaches `count` (woken by every change); panics after `timeout`
    /// naming `what` was awaited.
    #[track_caller]
    fn wait_for_count(
        &self,
        count: usize,
        timeout: Duration,
        what: &str,
        counter: impl Fn(&State) -> usize,
    ) -> MutexGuard<'_, State> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        while counter(&state) < count {
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "fake provider: waited {timeout:?} for {count} {what}, got {}",
                    counter(&state)
                );
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|poison| poison.into_inner())
                .0;
        }
        state
    }

    /// Connections that started a TLS handshake on this plain-HTTP port (answered with a 400).
    pub fn tls_handshakes_refused(&self) -> usize {
        self.shared.lock().tls_handshakes_refused
    }

    /// Replies not yet used.
    pub fn remaining_replies(&self) -> usize {
        self.shared.lock().script.len()
    }

    /// Asserts that nothing went wrong and that the whole script was used.
    #[track_caller]
    pub fn finish(self) {
        let (failures, remaining) = {
            let mut state = self.shared.lock();
            (std::mem::take(&mut state.failures), state.script.len())
        };
        assert!(
            failures.is_empty(),
            "fake provider failures:\n{}",
            failures.join("\n")
        );
        assert_eq!(
            remaining, 0,
            "fake provider: {remaining} scripted replies unused"
        );
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        // Wake the blocking accept() so the loop can see the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(handle) = self.accept_thread.take() {
            let _ = handle.join();
        }
        let failures = std::mem::take(&mut self.shared.lock().failures);
        if !failures.is_empty() && !thread::panicking() {
            panic!("fake provider failures:\n{}", failures.join("\n"));
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for (index, stream) in listener.incoming().enumerate() {
        if shared.shutting_down() {
            return;
        }
        let Ok(stream) = stream else { continue };
        let conn_shared = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("fake-provider-conn-{index}"))
            .spawn(move || {
                if let Err(err) = serve_connection(stream, index, &conn_shared) {
                    // Client hang-ups are normal (aborts, keep-alive pools closing); only report
                    // errors that mean the fake misbehaved or got garbage.
                    if err.kind() == io::ErrorKind::InvalidData {
                        conn_shared.fail(format!("fake provider: bad request: {err}"));
                    }
                }
            });
        if spawned.is_err() {
            shared.fail("fake provider: cannot spawn a connection thread".into());
        }
    }
}

/// A socket plus the bytes read from it but not consumed yet.
struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
    /// The accept order of this connection.
    index: usize,
}

enum Fill {
    Data,
    Closed,
}

impl Connection {
    /// Reads more bytes; waits through read timeouts until data, EOF or shutdown.
    fn fill(&mut self, shared: &Shared) -> io::Result<Fill> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(Fill::Closed),
                Ok(n) => {
                    self.buffer.extend_from_slice(&chunk[..n]);
                    return Ok(Fill::Data);
                }
                Err(err) if is_timeout(&err) => {
                    if shared.shutting_down() {
                        return Ok(Fill::Closed);
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
    }

    /// Reads one request; `None` when the client closed the connection between requests.
    fn read_request(&mut self, shared: &Shared) -> io::Result<Option<RecordedRequest>> {
        let head_end = loop {
            if let Some(pos) = find(&self.buffer, b"\r\n\r\n") {
                break pos;
            }
            if let Fill::Closed = self.fill(shared)? {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                return Err(invalid("connection closed inside request head"));
            }
        };
        let head = String::from_utf8(self.buffer[..head_end].to_vec())
            .map_err(|_| invalid("request head is not UTF-8"))?;
        self.buffer.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split(' ');
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut headers = Vec::new();
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| invalid(&format!("malformed header line {line:?}")))?;
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
        let header = |name: &str| {
            headers
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, v)| v.clone())
        };
        let raw_body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            self.read_chunked_body(shared)?
        } else {
            let length: usize = match header("content-length") {
                Some(text) => text.parse().map_err(|_| invalid("bad content-length"))?,
                None => 0,
            };
            self.read_exact_body(length, shared)?
        };
        let raw_body = if header("content-encoding").as_deref() == Some("zstd") {
            zstd_decompress(&raw_body)?
        } else {
            raw_body
        };
        let body = serde_json::from_slice(&raw_body).unwrap_or(Value::Null);
        Ok(Some(RecordedRequest {
            method,
            path,
            headers,
            body,
            raw_body,
            received_at: Instant::now(),
            connection: self.index,
        }))
    }

    fn read_exact_body(&mut self, length: usize, shared: &Shared) -> io::Result<Vec<u8>> {
        while self.buffer.len() < length {
            if let Fill::Closed = self.fill(shared)? {
                return Err(invalid("connection closed inside request body"));
            }
        }
        Ok(self.buffer.drain(..length).collect())
    }

    fn read_chunked_body(&mut self, shared: &Shared) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(pos) = find(&self.buffer, b"\r\n") {
                    break pos;
                }
                if let Fill::Closed = self.fill(shared)? {
                    return Err(invalid("connection closed inside chunked body"));
                }
            };
            let size_text = String::from_utf8_lossy(&self.buffer[..line_end]).to_string();
            let size_text = size_text.split(';').next().unwrap_or_default().trim();
            let size =
                usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size"))?;
            self.buffer.drain(..line_end + 2);
            // The chunk, then its CRLF (for the last chunk: the empty trailer line).
            let data = self.read_exact_body(size + 2, shared)?;
            if size == 0 {
                return Ok(body);
            }
            body.extend_from_slice(&data[..size]);
        }
    }
}

fn serve_connection(stream: TcpStream, index: usize, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(POLL_TICK))?;
    stream.set_nodelay(true)?;
    let mut conn = Connection {
        stream,
        buffer: Vec::new(),
        index,
    };
    if let Fill::Closed = conn.fill(shared)? {
        return Ok(());
    }
    if conn.buffer.first() == Some(&TLS_HANDSHAKE_RECORD) {
        // A client speaking TLS to this plain-HTTP port: answer in plain text and hang up, as
        // real HTTP servers do, so the client's handshake fails at once instead of waiting.
        shared.lock().tls_handshakes_refused += 1;
        shared.changed.notify_all();
        let body = "400 Bad Request: plain HTTP port";
        write!(
            conn.stream,
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        conn.stream.flush()?;
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        return Ok(());
    }
    while let Some(request) = conn.read_request(shared)? {
        let reply = {
            let mut state = shared.lock();
            let number = state.requests.len() + 1;
            let problems = if state.any_request {
                Vec::new()
            } else {
                check_request(&request)
            };
            for problem in problems {
                state.failures.push(format!(
                    "request #{number} {} {}: {problem}",
                    request.method, request.path
                ));
            }
            let reply = state.script.pop_front();
            if reply.is_none() {
                state.failures.push(format!(
                    "unscripted request #{number} {} {} (the script ran out)",
                    request.method, request.path
                ));
            }
            state.requests.push(request);
            shared.changed.notify_all();
            // Taken with the request recorded: a test that sees the request and then calls
            // `release_stalls()` must release this reply, however soon it is served.
            (reply, state.release_generation)
        };
        let (reply, generation) = reply;
        let keep_open = match reply {
            Some(reply) => write_reply(&mut conn, reply, shared, generation)?,
            None => {
                // 400 is retried by neither the provider SDKs nor pi, so one stray request
                // stays one failure instead of a retry storm.
                let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"fake provider: unscripted request"}}"#;
                write_status(&mut conn.stream, 400, body, &[])?;
                true
            }
        };
        if !keep_open {
            return Ok(());
        }
    }
    Ok(())
}

/// Writes one reply; returns whether the connection can serve another request.
fn write_reply(
    conn: &mut Connection,
    reply: Reply,
    shared: &Shared,
    generation: u64,
) -> io::Result<bool> {
    match reply {
        Reply::Status {
            code,
            body,
            headers,
        } => {
            write_status(&mut conn.stream, code, &body, &headers)?;
            Ok(true)
        }
        Reply::Sse { body, gap } => {
            write_sse_head(&mut conn.stream)?;
            for (index, event) in split_sse_events(&body).into_iter().enumerate() {
                if index > 0 && !gap.is_zero() {
                    // Pacing the stream is the point of `sse_slow`; the test never sleeps.
                    thread::sleep(gap);
                    if shared.shutting_down() {
                        return Ok(false);
                    }
                }
                write_chunk(&mut conn.stream, event.as_bytes())?;
            }
            conn.stream.write_all(b"0\r\n\r\n")?;
            conn.stream.flush()?;
            Ok(true)
        }
        Reply::Stall { prefix } => {
            write_sse_head(&mut conn.stream)?;
            for event in split_sse_events(&prefix) {
                write_chunk(&mut conn.stream, event.as_bytes())?;
            }
            conn.stream.flush()?;
            wait_for_release(conn, shared, generation);
            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
            Ok(false)
        }
        Reply::Hold { prefix, rest } => {
            write_sse_head(&mut conn.stream)?;
            for event in split_sse_events(&prefix) {
                write_chunk(&mut conn.stream, event.as_bytes())?;
            }
            conn.stream.flush()?;
            if !wait_for_release(conn, shared, generation) {
                let _ = conn.stream.shutdown(std::net::Shutdown::Both);
                return Ok(false);
            }
            for event in split_sse_events(&rest) {
                write_chunk(&mut conn.stream, event.as_bytes())?;
            }
            conn.stream.write_all(b"0\r\n\r\n")?;
            conn.stream.flush()?;
            Ok(true)
        }
    }
}

/// Holds a stream open until `release_stalls()` bumps the generation (true), or the client
/// closes the connection or the fake shuts down (false).
fn wait_for_release(conn: &mut Connection, shared: &Shared, generation: u64) -> bool {
    let mut probe = [0u8; 1024];
    loop {
        {
            let state = shared.lock();
            if state.shutdown {
                return false;
            }
            if state.release_generation > generation {
                return true;
            }
        }
        match conn.stream.read(&mut probe) {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) if is_timeout(&err) => {}
            Err(_) => break,
        }
    }
    shared.lock().stalls_closed_by_client += 1;
    shared.changed.notify_all();
    false
}

fn write_sse_head(stream: &mut TcpStream) -> io::Result<()> {
    stream.write_all(
        b"HTTP/1.1 200 OK\r\n\
          Content-Type: text/event-stream; charset=utf-8\r\n\
          Cache-Control: no-cache\r\n\
          Connection: keep-alive\r\n\
          request-id: req_fake_0001\r\n\
          x-request-id: req_fake_0001\r\n\
          Transfer-Encoding: chunked\r\n\r\n",
    )
}

fn write_chunk(stream: &mut TcpStream, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(()); // a zero-length chunk would end the body
    }
    write!(stream, "{:x}\r\n", data.len())?;
    stream.write_all(data)?;
    stream.write_all(b"\r\n")?;
    stream.flush()
}

fn write_status(
    stream: &mut TcpStream,
    code: u16,
    body: &str,
    headers: &[(String, String)],
) -> io::Result<()> {
    // A caller-given content type (e.g. an HTML error page) replaces the JSON default.
    let content_type = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map_or("application/json", |(_, value)| value.as_str());
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: keep-alive\r\n",
        reason_phrase(code),
        body.len()
    );
    for (name, value) in headers {
        if !name.eq_ignore_ascii_case("content-type") {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Site Overloaded",
        _ => "Status",
    }
}

/// Splits an SSE body into events, each keeping its terminating blank line. Accepts LF or CRLF.
pub fn split_sse_events(body: &str) -> Vec<String> {
    let normalized_separator = if body.contains("\r\n\r\n") {
        "\r\n\r\n"
    } else {
        "\n\n"
    };
    let mut events = Vec::new();
    let mut rest = body;
    while let Some(pos) = rest.find(normalized_separator) {
        let end = pos + normalized_separator.len();
        events.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    if !rest.is_empty() {
        events.push(rest.to_string());
    }
    events
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn is_timeout(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

/// Problems with one request: non-JSON body, or tool calls without exactly one result.
pub fn check_request(request: &RecordedRequest) -> Vec<String> {
    if request.method != "POST" {
        return vec![format!("unexpected method {}", request.method)];
    }
    if request.body.is_null() {
        return vec!["body is not JSON".into()];
    }
    check_tool_pairing(request.messages())
}

/// Every tool call has exactly one result, placed after the call and before the next assistant
/// message; every result answers a call. Works on both wire shapes:
/// Anthropic assistant `content[].type=="tool_use"` / user `content[].type=="tool_result"`;
/// OpenAI assistant `tool_calls[].id` / `{"role":"tool","tool_call_id"}`.
pub fn check_tool_pairing(messages: &[Value]) -> Vec<String> {
    let mut calls: Vec<(String, usize)> = Vec::new(); // (id, message index)
    let mut results: Vec<(String, usize)> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        if let Some(blocks) = message["content"].as_array() {
            for block in blocks {
                match (role, block["type"].as_str()) {
                    ("assistant", Some("tool_use")) => {
                        calls.push((block["id"].as_str().unwrap_or_default().into(), index))
                    }
                    ("user", Some("tool_result")) => results.push((
                        block["tool_use_id"].as_str().unwrap_or_default().into(),
                        index,
                    )),
                    _ => {}
                }
            }
        }
        if role == "assistant" {
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                calls.push((call["id"].as_str().unwrap_or_default().into(), index));
            }
        }
        if role == "tool" {
            results.push((
                message["tool_call_id"].as_str().unwrap_or_default().into(),
                index,
            ));
        }
    }
    let next_assistant_after = |index: usize| {
        messages
            .iter()
            .enumerate()
            .skip(index + 1)
            .find(|(_, m)| m["role"] == "assistant")
            .map_or(messages.len(), |(i, _)| i)
    };
    let mut problems = Vec::new();
    for (id, call_index) in &calls {
        let matching: Vec<usize> = results
            .iter()
            .filter(|(result_id, _)| result_id == id)
            .map(|(_, index)| *index)
            .collect();
        if matching.len() != 1 {
            problems.push(format!(
                "tool call {id:?} (message {call_index}) has {} results",
                matching.len()
            ));
            continue;
        }
        let limit = next_assistant_after(*call_index);
        if !(matching[0] > *call_index && matching[0] < limit) {
            problems.push(format!(
                "result of tool call {id:?} (message {call_index}) is at message {}, outside {}..{limit}",
                matching[0],
                call_index + 1
            ));
        }
    }
    for (id, index) in &results {
        if !calls.iter().any(|(call_id, _)| call_id == id) {
            problems.push(format!(
                "tool result {id:?} (message {index}) answers no call"
            ));
        }
    }
    problems
}
