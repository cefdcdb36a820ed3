//! A plain-HTTP server on 127.0.0.1 answering from a script, for the peers a real server cannot
//! be made to play: a streamable-HTTP MCP server failing in chosen ways (`mcp.rs`), and a fake
//! OAuth authorization server with its protected MCP server (`mcp_oauth.rs`). One request per
//! connection, answered in arrival order; every request is kept for the test to inspect.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

/// One request the server received.
#[derive(Clone, Debug)]
pub struct HttpRequest {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The query string (after `?`, not decoded).
    pub query: String,
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub text: String,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
}

impl HttpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC method of an MCP request body.
    pub fn rpc_method(&self) -> &str {
        self.body["method"].as_str().unwrap_or("")
    }

    /// `http://<Host header>`: the server's own base URL.
    pub fn base(&self) -> String {
        format!("http://{}", self.header("host").unwrap_or(""))
    }
}

/// (status, extra headers, body).
pub type Answer = (u16, Vec<(String, String)>, String);

/// Answers a request, given the requests before it.
pub type Responder = dyn Fn(&HttpRequest, &[HttpRequest]) -> Answer + Send + Sync;

pub struct ScriptedHttp {
    pub port: u16,
    seen: Arc<Mutex<Vec<HttpRequest>>>,
}

impl ScriptedHttp {
    pub fn start(respond: Box<Responder>) -> ScriptedHttp {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let Some(request) = read_request(&stream) else {
                    continue;
                };
                let before = log.lock().unwrap().clone();
                let (status, extra, body) = respond(&request, &before);
                log.lock().unwrap().push(request);
                let mut response = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                    body.len()
                );
                for (k, v) in extra {
                    response.push_str(&format!("{k}: {v}\r\n"));
                }
                response.push_str("\r\n");
                response.push_str(&body);
                let _ = stream.write_all(response.as_bytes());
            }
        });
        ScriptedHttp { port, seen }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<HttpRequest> {
        self.seen.lock().unwrap().clone()
    }
}

fn read_request(stream: &std::net::TcpStream) -> Option<HttpRequest> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    let text = String::from_utf8_lossy(&body).into_owned();
    Some(HttpRequest {
        method,
        path: path.to_string(),
        query: query.to_string(),
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    })
}

/// A JSON answer.
pub fn json_answer(status: u16, body: Value) -> Answer {
    (
        status,
        vec![("Content-Type".into(), "application/json".into())],
        body.to_string(),
    )
}

/// `application/x-www-form-urlencoded` decoding of one value (`+` is a space).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A form body or query string as a JSON object of strings.
pub fn form(text: &str) -> Map<String, Value> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), json!(percent_decode(v)))
        })
        .collect()
}

/// A JSON-RPC result for an MCP request, with an `Mcp-Session-Id` unless `session` is empty.
pub fn rpc_answer(request: &HttpRequest, result: Value, session: &str) -> Answer {
    let (status, mut headers, body) = json_answer(
        200,
        json!({"jsonrpc": "2.0", "id": request.body["id"], "result": result}),
    );
    if !session.is_empty() {
        headers.push(("Mcp-Session-Id".into(), session.into()));
    }
    (status, headers, body)
}
