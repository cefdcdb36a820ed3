//! Amazon Bedrock and Google Vertex AI end to end: the real binary, pi's built-in
//! `amazon-bedrock` / `google-vertex` providers with their base URL pointed (models.json) at a
//! fake on 127.0.0.1 that speaks the real wire formats and checks the credentials it is given:
//!
//! - Bedrock: the fake recomputes the AWS SigV4 signature of every request with the same secret
//!   (its own implementation below, not pi-rs's) and answers with binary event-stream frames
//!   (prelude and message CRC32), one per HTTP chunk.
//! - Vertex: a service-account key made with `openssl` at test time; the fake token endpoint
//!   verifies the JWT's RS256 signature with `openssl dgst -verify` and the claims, then the
//!   stream endpoint accepts only the token it issued. A gcloud `authorized_user` login is
//!   refreshed the same way.
//!
//! Reference (PI_TEST_BIN=pi 0.73.1): the Bedrock tests set `AWS_BEDROCK_FORCE_HTTP1=1` so the
//! AWS SDK talks HTTP/1.1 to the fake. The reference passes the Bedrock round trip, the
//! profile/bearer test, the profile role test and the Vertex API-key test against these fakes. Known differences: the
//! SDK retries a 429 itself (3 attempts) before pi sees it, so the error test's script runs
//! ahead; the reference fetches container and web-identity credentials for every request (pi-rs
//! caches them; the reference passes those tests but for the fetch count);
//! google-auth-library always uses Google's own token host for service accounts and gcloud
//! logins, so the Vertex ADC tests need pi-rs.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::{digest, hmac};
use serde_json::{Value, json};

use crate::fake_provider::fixture;
use crate::support::{
    Pi, Setup, TempDir, Workspace, assistant_messages, openssl, prompt, require, tool_shape, which,
};

// ---- a small HTTP fake with per-path handlers ----------------------------------------------------

#[derive(Clone, Debug)]
struct Request {
    method: String,
    /// Path and query as on the request line.
    target: String,
    /// Lower-case names.
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

struct Response {
    status: u16,
    content_type: &'static str,
    /// Written as one HTTP chunk each.
    chunks: Vec<Vec<u8>>,
}

impl Response {
    fn json(status: u16, body: Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            chunks: vec![body.to_string().into_bytes()],
        }
    }
}

type Handler = Box<dyn Fn(&Request) -> Response + Send + Sync>;

/// Serves each request with the handler of the first path prefix that matches; records them.
struct CloudFake {
    url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl CloudFake {
    fn start(handlers: Vec<(&'static str, Handler)>) -> CloudFake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handlers = Arc::new(handlers);
        let recorded = Arc::clone(&requests);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let handlers = Arc::clone(&handlers);
                let recorded = Arc::clone(&recorded);
                thread::spawn(move || serve(stream, &handlers, &recorded));
            }
        });
        CloudFake { url, requests }
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, handlers: &[(&'static str, Handler)], recorded: &Mutex<Vec<Request>>) {
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let length = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = Request {
        method,
        target,
        headers,
        body,
    };
    recorded.lock().unwrap().push(request.clone());
    let response = handlers
        .iter()
        .find(|(prefix, _)| request.target.starts_with(prefix))
        .map(|(_, handler)| handler(&request))
        .unwrap_or_else(|| Response::json(404, json!({"message": "no handler"})));
    let mut out = &stream;
    let head = format!(
        "HTTP/1.1 {} X\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        response.status, response.content_type
    );
    let _ = out.write_all(head.as_bytes());
    for chunk in response.chunks {
        let _ = out.write_all(format!("{:x}\r\n", chunk.len()).as_bytes());
        let _ = out.write_all(&chunk);
        let _ = out.write_all(b"\r\n");
        let _ = out.flush();
    }
    let _ = out.write_all(b"0\r\n\r\n");
}

// ---- AWS: SigV4 verification and event-stream frames (independent of pi-rs's code) ------------

fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, bytes).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac_sha256(key: &[u8], data: &str) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
        .as_ref()
        .to_vec()
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn aws_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Checks a request's `Authorization: AWS4-HMAC-SHA256 …` the way AWS does: the canonical
/// request is rebuilt from what arrived (path segments encoded again, the signed headers' values,
/// the body's hash) and signed with `secret`, for Bedrock.
fn verify_sigv4(
    request: &Request,
    access_key: &str,
    secret: &str,
    region: &str,
) -> Result<(), String> {
    verify_sigv4_for(request, access_key, secret, region, "bedrock")
}

fn verify_sigv4_for(
    request: &Request,
    access_key: &str,
    secret: &str,
    region: &str,
    service: &str,
) -> Result<(), String> {
    let authorization = request.header("authorization").ok_or("no authorization")?;
    let rest = authorization
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or("not AWS4-HMAC-SHA256")?;
    let mut fields = HashMap::new();
    for part in rest.split(", ") {
        let (k, v) = part.split_once('=').ok_or("malformed authorization")?;
        fields.insert(k, v);
    }
    let credential = fields.get("Credential").ok_or("no Credential")?;
    let scope: Vec<&str> = credential.split('/').collect();
    if scope.len() != 5
        || scope[0] != access_key
        || scope[2] != region
        || scope[3] != service
        || scope[4] != "aws4_request"
    {
        return Err(format!("wrong credential scope {credential}"));
    }
    let amz_date = request.header("x-amz-date").ok_or("no x-amz-date")?;
    if !amz_date.starts_with(scope[1]) {
        return Err("x-amz-date and scope date differ".into());
    }
    let payload_hash = sha256_hex(&request.body);
    if request.header("x-amz-content-sha256") != Some(payload_hash.as_str()) {
        return Err("x-amz-content-sha256 is not the body's hash".into());
    }
    let signed: Vec<&str> = fields
        .get("SignedHeaders")
        .ok_or("no SignedHeaders")?
        .split(';')
        .collect();
    for required in ["host", "x-amz-date", "x-amz-content-sha256"] {
        if !signed.contains(&required) {
            return Err(format!("{required} is not signed"));
        }
    }
    let mut canonical_headers = String::new();
    for name in &signed {
        let value = request
            .header(name)
            .ok_or(format!("signed header {name} missing"))?;
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((&request.target, ""));
    let canonical_uri = path
        .split('/')
        .map(aws_encode)
        .collect::<Vec<_>>()
        .join("/");
    let canonical = format!(
        "{}\n{canonical_uri}\n{query}\n{canonical_headers}\n{}\n{payload_hash}",
        request.method,
        signed.join(";")
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{}/{region}/{service}/aws4_request\n{}",
        scope[1],
        sha256_hex(canonical.as_bytes())
    );
    let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), scope[1]);
    for part in [region, service, "aws4_request"] {
        key = hmac_sha256(&key, part);
    }
    let expected = hex(&hmac_sha256(&key, &string_to_sign));
    if fields.get("Signature") != Some(&expected.as_str()) {
        return Err(format!(
            "signature mismatch; canonical request was:\n{canonical}"
        ));
    }
    Ok(())
}

/// One event-stream message with string headers.
fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut head = Vec::new();
    for (name, value) in headers {
        head.push(name.len() as u8);
        head.extend_from_slice(name.as_bytes());
        head.push(7);
        head.extend_from_slice(&(value.len() as u16).to_be_bytes());
        head.extend_from_slice(value.as_bytes());
    }
    let total = (16 + head.len() + payload.len()) as u32;
    let mut out = total.to_be_bytes().to_vec();
    out.extend_from_slice(&(head.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

fn event(kind: &str, payload: Value) -> Vec<u8> {
    frame(
        &[
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

fn event_stream(frames: Vec<Vec<u8>>) -> Response {
    Response {
        status: 200,
        content_type: "application/vnd.amazon.eventstream",
        chunks: frames,
    }
}

/// A turn that thinks, says a sentence and calls bash.
fn tool_turn() -> Response {
    event_stream(vec![
        event("messageStart", json!({"role": "assistant"})),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Listing files."}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "c2lnLWJlZHJvY2s="}}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"text": "Let me look."}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 1})),
        event(
            "contentBlockStart",
            json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_01", "name": "bash"}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"command\":\"echo "}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "from-bash\"}"}}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 2})),
        event("messageStop", json!({"stopReason": "tool_use"})),
        event(
            "metadata",
            json!({"usage": {"inputTokens": 1200, "outputTokens": 40, "totalTokens": 1240}, "metrics": {"latencyMs": 5}}),
        ),
    ])
}

fn text_turn(text: &str) -> Response {
    event_stream(vec![
        event("messageStart", json!({"role": "assistant"})),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": text}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event("messageStop", json!({"stopReason": "end_turn"})),
        event(
            "metadata",
            json!({"usage": {"inputTokens": 1300, "outputTokens": 7, "totalTokens": 1400, "cacheReadInputTokens": 93}}),
        ),
    ])
}

const BEDROCK_MODEL: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";
const ACCESS_KEY: &str = "AKIDPIRSTEST";
const SECRET: &str = "bedrock-test-secret/Zx9+pi-rs";
const SESSION_TOKEN: &str = "bedrock-test-session-token";

fn bedrock_setup(fake: &CloudFake) -> Setup {
    let models = r#"{"providers": {"amazon-bedrock": {"baseUrl": "__BASE_URL__"}}}"#;
    setup_for(fake, "amazon-bedrock", BEDROCK_MODEL)
        .models_json(models)
        .env("AWS_BEDROCK_FORCE_HTTP1", "1")
}

fn setup_for(fake: &CloudFake, provider: &str, model: &str) -> Setup {
    Setup::at(&fake.url, provider, model).settings(json!({"retry": {"enabled": false}}))
}

/// Bedrock answers a signed request; anything else is refused as AWS refuses it.
fn signed_bedrock(
    access_key: &'static str,
    secret: &'static str,
    region: &'static str,
    turns: Vec<Response>,
) -> CloudFake {
    let turns = Mutex::new(turns.into_iter());
    CloudFake::start(vec![(
        "/model/",
        Box::new(move |request: &Request| {
            match verify_sigv4(request, access_key, secret, region) {
                Ok(()) => {
                    turns.lock().unwrap().next().unwrap_or_else(|| {
                        Response::json(500, json!({"message": "script ran out"}))
                    })
                }
                Err(reason) => Response::json(
                    403,
                    json!({"message": format!("The request signature we calculated does not match the signature you provided. ({reason})")}),
                ),
            }
        }),
    )])
}

#[test]
fn bedrock_tool_round_trip_signed_with_session_credentials() {
    let fake = signed_bedrock(
        ACCESS_KEY,
        SECRET,
        "eu-west-1",
        vec![tool_turn(), text_turn("It printed from-bash.")],
    );
    let setup = bedrock_setup(&fake)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_SESSION_TOKEN", SESSION_TOKEN)
        .env("AWS_REGION", "eu-west-1")
        .arg("--thinking")
        .arg("medium");
    let mut pi = Pi::spawn(&setup);
    let run = prompt(&mut pi, "p1", "What does echo print?");

    let messages = assistant_messages(&run);
    assert_eq!(messages.len(), 2, "{run:#?}");
    assert_eq!(
        messages[0]["content"],
        json!([
            {"type": "thinking", "thinking": "Listing files.", "thinkingSignature": "c2lnLWJlZHJvY2s="},
            {"type": "text", "text": "Let me look."},
            {"type": "toolCall", "id": "tooluse_01", "name": "bash", "arguments": {"command": "echo from-bash"}}
        ])
    );
    assert_eq!(messages[0]["api"], "bedrock-converse-stream");
    assert_eq!(messages[0]["stopReason"], "toolUse");
    assert_eq!(messages[0]["rawStopReason"], "tool_use");
    assert_eq!(messages[1]["rawStopReason"], "end_turn");
    assert_eq!(messages[0]["thinkingLevel"], "medium");
    // No cache details in the metadata: no one-hour split.
    assert!(messages[0]["usage"].get("cacheWrite1h").is_none());
    assert_eq!(messages[0]["usage"]["totalTokens"], 1240);
    assert_eq!(
        messages[1]["content"],
        json!([{"type": "text", "text": "It printed from-bash."}])
    );
    assert_eq!(messages[1]["stopReason"], "stop");
    let usage = &messages[1]["usage"];
    assert_eq!(
        (
            usage["input"].as_u64(),
            usage["cacheRead"].as_u64(),
            usage["totalTokens"].as_u64()
        ),
        (Some(1300), Some(93), Some(1400))
    );
    // Catalog price of Claude Sonnet 4.5 on Bedrock (pi 1.6.0): $3.30 / M input.
    assert!((usage["cost"]["input"].as_f64().unwrap() - 0.00429).abs() < 1e-12);

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request.target,
            "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
        );
        assert_eq!(request.header("x-amz-security-token"), Some(SESSION_TOKEN));
        assert_eq!(request.header("content-type"), Some("application/json"));
        verify_sigv4(request, ACCESS_KEY, SECRET, "eu-west-1").unwrap();
    }
    let first = requests[0].json();
    // pi 1.6.0: the model's maxTokens (the context window holds it); the budget fits inside.
    assert_eq!(first["inferenceConfig"], json!({"maxTokens": 64000}));
    assert_eq!(
        first["additionalModelRequestFields"],
        json!({"thinking": {"type": "enabled", "budget_tokens": 8192, "display": "summarized"},
               "anthropic_beta": ["interleaved-thinking-2025-05-14"]})
    );
    assert_eq!(
        first["system"].as_array().unwrap().last().unwrap(),
        &json!({"cachePoint": {"type": "default"}})
    );
    assert_eq!(
        first["messages"],
        json!([{"role": "user", "content": [{"text": "What does echo print?"}, {"cachePoint": {"type": "default"}}]}])
    );
    let tools: Vec<&str> = first["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"bash"), "{tools:?}");
    let second = requests[1].json();
    let history = second["messages"].as_array().unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(
        history[1]["content"],
        json!([
            {"reasoningContent": {"reasoningText": {"text": "Listing files.", "signature": "c2lnLWJlZHJvY2s="}}},
            {"text": "Let me look."},
            {"toolUse": {"toolUseId": "tooluse_01", "name": "bash", "input": {"command": "echo from-bash"}}}
        ])
    );
    let result = &history[2]["content"][0]["toolResult"];
    assert_eq!(result["toolUseId"], "tooluse_01");
    assert_eq!(result["status"], "success");
    assert_eq!(
        result["content"][0]["text"].as_str().unwrap().trim(),
        "from-bash"
    );
}

/// Strict tools on Bedrock, as pi 1.6.0 sends them (`compat.supportsStrictMode`, which the
/// catalog gives Claude Sonnet 4.5): pi's read/bash/edit/write go `strict: true` with strict
/// schemas. When Bedrock refuses them for Claude's strict-tool limits, the same request goes
/// again at once with them non-strict, the reply records a `bedrock_strict_tools_fallback`
/// diagnostic, and the session's next request is non-strict from the start. The tool shapes are
/// those 1.6.0 sent; every request is signed. Passes against pi 1.6.0 too.
#[test]
fn bedrock_strict_tools_fall_back_when_claude_refuses_them() {
    let refusal = "Too many strict tools (21). The maximum number of strict tools is 20.";
    let fake = signed_bedrock(
        ACCESS_KEY,
        SECRET,
        "eu-west-1",
        vec![
            Response::json(
                400,
                json!({"__type": "ValidationException", "message": refusal}),
            ),
            text_turn("Fine."),
            text_turn("Again."),
        ],
    );
    let setup = bedrock_setup(&fake)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "eu-west-1")
        .arg("--thinking")
        .arg("off");
    let mut pi = Pi::spawn(&setup);
    let run = prompt(&mut pi, "p1", "hi");
    let message = assistant_messages(&run).pop().expect("assistant message");
    assert_eq!(message["stopReason"], "stop", "{message}");
    let diagnostics = message["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    let fallback = diagnostics[0].as_object().unwrap();
    let keys: Vec<&str> = fallback.keys().map(String::as_str).collect();
    assert_eq!(keys, ["type", "timestamp", "error", "details"]);
    assert_eq!(fallback["type"], "bedrock_strict_tools_fallback");
    assert!(fallback["timestamp"].is_u64());
    assert_eq!(fallback["error"], json!({"message": refusal}));
    assert_eq!(
        fallback["details"],
        json!({"reason": "strict_tool_limits_exceeded"})
    );
    let run = prompt(&mut pi, "p2", "again");
    let message = assistant_messages(&run).pop().expect("assistant message");
    assert_eq!(message["stopReason"], "stop", "{message}");
    assert!(message.get("diagnostics").is_none(), "{message}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        verify_sigv4(request, ACCESS_KEY, SECRET, "eu-west-1").unwrap();
    }
    assert_eq!(
        tool_shape(&requests[0].json()["toolConfig"]),
        BEDROCK_STRICT_TOOLS
    );
    for request in &requests[1..] {
        let tools = &request.json()["toolConfig"]["tools"];
        assert_eq!(tool_shape(&tools[0]), BEDROCK_READ, "{tools}");
        let strict = tools.as_array().unwrap().iter();
        assert!(
            strict
                .filter_map(|t| t["toolSpec"].get("strict"))
                .next()
                .is_none()
        );
    }
}

/// The `toolConfig` pi 1.6.0 sent a Claude model on Bedrock: strict, then after the refusal
/// (descriptions as `D`).
const BEDROCK_STRICT_TOOLS: &str = r#"{"tools":[{"toolSpec":{"name":"read","inputSchema":{"json":{"type":"object","required":["path","offset","limit"],"properties":{"path":{"type":"string","description":"D"},"offset":{"anyOf":[{"type":"number","description":"D"},{"type":"null"}]},"limit":{"anyOf":[{"type":"number","description":"D"},{"type":"null"}]}},"additionalProperties":false}},"description":"D","strict":true}},{"toolSpec":{"name":"bash","inputSchema":{"json":{"type":"object","required":["command","timeout"],"properties":{"command":{"type":"string","description":"D"},"timeout":{"anyOf":[{"type":"number","description":"D"},{"type":"null"}]}},"additionalProperties":false}},"description":"D","strict":true}},{"toolSpec":{"name":"edit","inputSchema":{"json":{"type":"object","required":["path","edits"],"properties":{"path":{"type":"string","description":"D"},"edits":{"type":"array","items":{"type":"object","required":["oldText","newText"],"properties":{"oldText":{"type":"string","description":"D"},"newText":{"type":"string","description":"D"}},"additionalProperties":false},"description":"D"}},"additionalProperties":false}},"description":"D","strict":true}},{"toolSpec":{"name":"write","inputSchema":{"json":{"type":"object","required":["path","content"],"properties":{"path":{"type":"string","description":"D"},"content":{"type":"string","description":"D"}},"additionalProperties":false}},"description":"D","strict":true}}]}"#;
const BEDROCK_READ: &str = r#"{"toolSpec":{"name":"read","inputSchema":{"json":{"type":"object","required":["path"],"properties":{"path":{"type":"string","description":"D"},"offset":{"type":"number","description":"D"},"limit":{"type":"number","description":"D"}}}},"description":"D"}}"#;

#[test]
fn bedrock_profile_credentials_and_bearer_token() {
    // A named profile from the shared files (region from the profile too) signs the request;
    // the model has the credentials file printed, and its secret never reaches stdout.
    let cat_credentials = event_stream(vec![
        event("messageStart", json!({"role": "assistant"})),
        event(
            "contentBlockStart",
            json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tooluse_cat", "name": "bash"}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{\"command\":\"cat ~/.aws/credentials\"}"}}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event("messageStop", json!({"stopReason": "tool_use"})),
    ]);
    let fake = signed_bedrock(
        "AKIDPROFILE",
        "profile-secret-value",
        "ap-southeast-2",
        vec![cat_credentials, text_turn("From the profile.")],
    );
    // The shared files in their default place, ~/.aws (HOME is the workspace root).
    let workspace = Workspace::new();
    let aws = workspace.root().join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(aws.join("credentials"), "[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = wrong\n\n[work]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = profile-secret-value\n").unwrap();
    std::fs::write(
        aws.join("config"),
        "[profile work]\nregion = ap-southeast-2\n",
    )
    .unwrap();
    let setup = bedrock_setup(&fake)
        .env("AWS_PROFILE", "work")
        // The SDK ignores environment keys when a profile is named.
        .env("AWS_ACCESS_KEY_ID", "AKIDENVIRONMENT")
        .env("AWS_SECRET_ACCESS_KEY", "environment-secret");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let run = prompt(&mut pi, "p1", "hi");
    let messages = assistant_messages(&run);
    assert_eq!(
        messages[1]["content"][0]["text"], "From the profile.",
        "{run:#?}"
    );
    assert!(fake.requests()[0].header("x-amz-security-token").is_none());
    let result = run
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool_execution_end");
    assert!(result.to_string().contains("AKIDPROFILE"), "{result}");
    assert!(result.to_string().contains("[redacted]"), "{result}");
    for index in 0..pi.records().len() {
        assert!(
            !pi.raw_line(index).contains("profile-secret-value"),
            "{}",
            pi.raw_line(index)
        );
    }
    drop(pi);

    // A Bedrock API key goes as a bearer token, unsigned.
    let fake = CloudFake::start(vec![(
        "/model/",
        Box::new(|request: &Request| match request.header("authorization") {
            Some("Bearer bedrock-api-key-123") => text_turn("Bearer accepted."),
            _ => Response::json(403, json!({"message": "bad bearer"})),
        }),
    )]);
    let setup = bedrock_setup(&fake).env("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-123");
    let mut pi = Pi::spawn(&setup);
    let run = prompt(&mut pi, "p1", "hi");
    assert_eq!(
        assistant_messages(&run)[0]["content"][0]["text"],
        "Bearer accepted.",
        "{run:#?}"
    );
    assert!(fake.requests()[0].header("x-amz-date").is_none());
}

#[test]
fn bedrock_container_credentials_are_fetched_once_and_used() {
    // ECS task roles / EKS Pod Identity: credentials from a local endpoint, with its token.
    // The second reply quotes the fetched session token: it was resolved at request time and must
    // be redacted from then on.
    let turns =
        Mutex::new(vec![text_turn("One."), text_turn("Two. container-session-token")].into_iter());
    let fake = CloudFake::start(vec![
        (
            "/container-credentials",
            Box::new(|request: &Request| {
                if request.header("authorization") != Some("container-auth-token") {
                    return Response::json(401, json!({"message": "no token"}));
                }
                let expires = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    + 3600;
                // ISO 8601 without a library: the fake only needs a time an hour ahead.
                let days = expires / 86_400;
                let (y, m, d) = civil_from_days(days as i64);
                let secs = expires % 86_400;
                Response::json(
                    200,
                    json!({
                        "AccessKeyId": "ASIACONTAINER", "SecretAccessKey": "container-secret",
                        "Token": "container-session-token",
                        "Expiration": format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60),
                    }),
                )
            }),
        ),
        (
            "/model/",
            Box::new(move |request: &Request| {
                match verify_sigv4(request, "ASIACONTAINER", "container-secret", "us-east-1") {
                    Ok(())
                        if request.header("x-amz-security-token")
                            == Some("container-session-token") =>
                    {
                        turns.lock().unwrap().next().unwrap_or_else(|| {
                            Response::json(500, json!({"message": "script ran out"}))
                        })
                    }
                    other => Response::json(403, json!({"message": format!("refused: {other:?}")})),
                }
            }),
        ),
    ]);
    let setup = bedrock_setup(&fake)
        .env(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            &format!("{}/container-credentials", fake.url),
        )
        .env("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-auth-token");
    let mut pi = Pi::spawn(&setup);
    for expected in ["One.", "Two. [redacted]"] {
        let run = prompt(&mut pi, "p1", "hi");
        let message = assistant_messages(&run).pop().expect("assistant message");
        assert_eq!(message["content"][0]["text"], expected, "{message}");
    }
    let targets: Vec<String> = fake.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(
        targets
            .iter()
            .filter(|t| t.as_str() == "/container-credentials")
            .count(),
        1,
        "{targets:?}"
    );
}

#[test]
fn bedrock_web_identity_is_exchanged_at_sts_once() {
    // EKS IRSA: the projected token is exchanged at STS for temporary credentials.
    let dir = TempDir::new("web-identity");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "eyJ.oidc-token.sig\n").unwrap();
    // The second reply quotes the session token STS issued: it was resolved at request time and must
    // be redacted from then on.
    let turns =
        Mutex::new(vec![text_turn("One."), text_turn("Two. web-identity-session")].into_iter());
    let fake = CloudFake::start(vec![
        (
            "/sts",
            Box::new(|request: &Request| {
                let fields = form(&request.body);
                let expected = [
                    ("Action", "AssumeRoleWithWebIdentity"),
                    ("Version", "2011-06-15"),
                    ("RoleArn", "arn:aws:iam::123456789012:role/pi-rs"),
                    ("RoleSessionName", "pi-rs-test"),
                    ("WebIdentityToken", "eyJ.oidc-token.sig"),
                ];
                // The file's text as it is (the SDK sends the trailing newline too).
                if !expected
                    .iter()
                    .all(|(k, v)| fields.get(*k).map(|f| f.trim_end()) == Some(*v))
                {
                    let error = "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>bad request</Message></Error></ErrorResponse>";
                    return Response {
                        status: 400,
                        content_type: "text/xml",
                        chunks: vec![error.into()],
                    };
                }
                let expires = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    + 3600;
                let (y, m, d) = civil_from_days((expires / 86_400) as i64);
                let secs = expires % 86_400;
                let xml = format!(
                    "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
                     <AccessKeyId>ASIAWEBIDENTITY</AccessKeyId><SecretAccessKey>web-identity-secret</SecretAccessKey>\
                     <SessionToken>web-identity-session</SessionToken>\
                     <Expiration>{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z</Expiration></Credentials>\
                     </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
                    secs / 3600,
                    secs / 60 % 60,
                    secs % 60
                );
                Response {
                    status: 200,
                    content_type: "text/xml",
                    chunks: vec![xml.into_bytes()],
                }
            }),
        ),
        (
            "/model/",
            Box::new(move |request: &Request| {
                match verify_sigv4(
                    request,
                    "ASIAWEBIDENTITY",
                    "web-identity-secret",
                    "us-west-2",
                ) {
                    Ok(())
                        if request.header("x-amz-security-token")
                            == Some("web-identity-session") =>
                    {
                        turns.lock().unwrap().next().unwrap_or_else(|| {
                            Response::json(500, json!({"message": "script ran out"}))
                        })
                    }
                    other => Response::json(403, json!({"message": format!("refused: {other:?}")})),
                }
            }),
        ),
    ]);
    let setup = bedrock_setup(&fake)
        .env("AWS_WEB_IDENTITY_TOKEN_FILE", token_file.to_str().unwrap())
        .env("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/pi-rs")
        .env("AWS_ROLE_SESSION_NAME", "pi-rs-test")
        .env("AWS_ENDPOINT_URL_STS", &format!("{}/sts", fake.url))
        .env("AWS_REGION", "us-west-2");
    let mut pi = Pi::spawn(&setup);
    for expected in ["One.", "Two. [redacted]"] {
        let run = prompt(&mut pi, "p1", "hi");
        let message = assistant_messages(&run).pop().expect("assistant message");
        assert_eq!(message["content"][0]["text"], expected, "{message}");
    }
    let targets: Vec<String> = fake.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(
        targets.iter().filter(|t| t.as_str() == "/sts").count(),
        1,
        "{targets:?}"
    );
}

#[test]
fn bedrock_profile_role_is_assumed_with_the_source_keys() {
    // [profile admin] role_arn + source_profile: STS AssumeRole signed with the source's keys.
    let workspace = Workspace::new();
    let aws = workspace.root().join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        "[base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = base-secret\n",
    )
    .unwrap();
    std::fs::write(aws.join("config"), "[profile admin]\nrole_arn = arn:aws:iam::123456789012:role/admin\nsource_profile = base\nrole_session_name = pi-rs-admin\nregion = eu-central-1\n").unwrap();
    let turns = Mutex::new(vec![text_turn("Assumed.")].into_iter());
    let fake = CloudFake::start(vec![
        (
            "/sts",
            Box::new(|request: &Request| {
                let fields = form(&request.body);
                let signed =
                    verify_sigv4_for(request, "AKIDBASE", "base-secret", "eu-central-1", "sts");
                let form_ok = fields.get("Action").map(String::as_str) == Some("AssumeRole")
                    && fields.get("RoleArn").map(String::as_str)
                        == Some("arn:aws:iam::123456789012:role/admin")
                    && fields.get("RoleSessionName").map(String::as_str) == Some("pi-rs-admin");
                if signed.is_err() || !form_ok {
                    let error = format!(
                        "<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code><Message>{signed:?} {fields:?}</Message></Error></ErrorResponse>"
                    );
                    return Response {
                        status: 403,
                        content_type: "text/xml",
                        chunks: vec![error.into_bytes()],
                    };
                }
                let xml = "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIAASSUMED</AccessKeyId>\
                    <SecretAccessKey>assumed-secret</SecretAccessKey><SessionToken>assumed-session</SessionToken>\
                    <Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>";
                Response {
                    status: 200,
                    content_type: "text/xml",
                    chunks: vec![xml.into()],
                }
            }),
        ),
        (
            "/model/",
            Box::new(move |request: &Request| {
                match verify_sigv4(request, "ASIAASSUMED", "assumed-secret", "eu-central-1") {
                    Ok(()) if request.header("x-amz-security-token") == Some("assumed-session") => {
                        turns.lock().unwrap().next().unwrap_or_else(|| {
                            Response::json(500, json!({"message": "script ran out"}))
                        })
                    }
                    other => Response::json(403, json!({"message": format!("refused: {other:?}")})),
                }
            }),
        ),
    ]);
    let setup = bedrock_setup(&fake)
        .env("AWS_PROFILE", "admin")
        .env("AWS_ENDPOINT_URL_STS", &format!("{}/sts", fake.url));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let run = prompt(&mut pi, "p1", "hi");
    let message = assistant_messages(&run).pop().expect("assistant message");
    assert_eq!(message["content"][0]["text"], "Assumed.", "{message}");
}

/// Howard Hinnant's days → (year, month, day).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[test]
fn bedrock_errors_reach_the_client_with_pis_wording() {
    let corrupted = {
        let mut bad = event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "lost"}}),
        );
        let at = bad.len() - 8;
        bad[at] ^= 0x20;
        bad
    };
    let turns = vec![
        // Throttled: AWS's status and message.
        Response::json(
            429,
            json!({"message": "Too many requests, please wait before trying again."}),
        ),
        event_stream(vec![
            event("messageStart", json!({"role": "assistant"})),
            event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "Partial"}}),
            ),
            frame(
                &[
                    (":exception-type", "modelStreamErrorException"),
                    (":content-type", "application/json"),
                    (":message-type", "exception"),
                ],
                br#"{"message":"Model stream broke."}"#,
            ),
        ]),
        event_stream(vec![
            event("messageStart", json!({"role": "assistant"})),
            corrupted,
        ]),
    ];
    let fake = signed_bedrock(ACCESS_KEY, SECRET, "us-east-1", turns);
    let base = bedrock_setup(&fake)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET);
    let mut pi = Pi::spawn(&base);
    let expected = [
        "Throttling error: Too many requests, please wait before trying again.",
        "Model stream error: Model stream broke.",
        "event stream: message checksum mismatch",
    ];
    for text in expected {
        let run = prompt(&mut pi, "p1", "hi");
        let message = assistant_messages(&run).pop().expect("assistant message");
        assert_eq!(message["stopReason"], "error");
        assert_eq!(message["errorMessage"], text);
    }
    drop(pi);

    // A wrong secret is refused by the fake's signature check.
    let setup = bedrock_setup(&fake)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", "not-the-secret");
    let mut pi = Pi::spawn(&setup);
    let run = prompt(&mut pi, "p1", "hi");
    let message = assistant_messages(&run).pop().expect("assistant message");
    assert!(
        message["errorMessage"].as_str().unwrap().starts_with(
            "AccessDeniedException: The request signature we calculated does not match"
        ),
        "{message}"
    );
}

// ---- Google: ADC with a key made by openssl, verified by openssl ----------------------------------

/// `openssl`, or a clear skip (a failure under CI, where it must be installed).
/// A fresh 2048-bit RSA key pair: (private PEM path, public PEM path).
fn make_key(dir: &Path) -> (PathBuf, PathBuf) {
    let private = dir.join("sa-key.pem");
    let public = dir.join("sa-pub.pem");
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            private.to_str().unwrap(),
        ],
    );
    openssl(
        dir,
        &[
            "pkey",
            "-in",
            private.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ],
    );
    (private, public)
}

fn form(body: &[u8]) -> HashMap<String, String> {
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), crate::scripted_http::percent_decode(v)))
        .collect()
}

/// Verifies an RS256 JWT with `openssl dgst` and the public key; returns its claims.
fn verify_jwt(jwt: &str, public_key: &Path, scratch: &Path) -> Result<Value, String> {
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|e| e.to_string());
    let parts: Vec<&str> = jwt.split('.').collect();
    if parts.len() != 3 {
        return Err("not a JWT".into());
    }
    let header: Value = serde_json::from_slice(&decode(parts[0])?).map_err(|e| e.to_string())?;
    if header["alg"] != "RS256" || header["kid"] != "test-key-id" {
        return Err(format!("unexpected header {header}"));
    }
    let unique = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let input = scratch.join(format!("jwt-input-{unique}"));
    let signature = scratch.join(format!("jwt-sig-{unique}"));
    std::fs::write(&input, format!("{}.{}", parts[0], parts[1])).unwrap();
    std::fs::write(&signature, decode(parts[2])?).unwrap();
    let verified = Command::new("openssl")
        .args([
            "dgst",
            "-sha256",
            "-verify",
            public_key.to_str().unwrap(),
            "-signature",
            signature.to_str().unwrap(),
            input.to_str().unwrap(),
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !verified.status.success() {
        return Err(format!(
            "signature rejected: {}",
            String::from_utf8_lossy(&verified.stdout)
        ));
    }
    serde_json::from_slice(&decode(parts[1])?).map_err(|e| e.to_string())
}

fn gemini_sse() -> Response {
    let body = fixture("google/text.sse");
    Response {
        status: 200,
        content_type: "text/event-stream",
        chunks: crate::fake_provider::split_sse_events(&body)
            .into_iter()
            .map(String::into_bytes)
            .collect(),
    }
}

const VERTEX_MODELS: &str = r#"{"providers": {"google-vertex": {"baseUrl": "__BASE_URL__"}}}"#;
const VERTEX_PATH: &str =
    "/v1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse";

/// The token endpoint and the stream endpoint of one fake Google.
fn google_fake(
    check_grant: impl Fn(&HashMap<String, String>) -> Result<(), String> + Send + Sync + 'static,
) -> CloudFake {
    CloudFake::start(vec![
        (
            "/token",
            Box::new(move |request: &Request| {
                let fields = form(&request.body);
                match check_grant(&fields) {
                    Ok(()) => Response::json(
                        200,
                        json!({"access_token": "ya29.fake-vertex-token", "expires_in": 3599, "token_type": "Bearer"}),
                    ),
                    Err(reason) => Response::json(
                        400,
                        json!({"error": "invalid_grant", "error_description": reason}),
                    ),
                }
            }),
        ),
        (
            "/v1/",
            Box::new(|request: &Request| match request.header("authorization") {
                Some("Bearer ya29.fake-vertex-token") => gemini_sse(),
                _ => Response::json(
                    401,
                    json!({"error": {"code": 401, "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED"}}),
                ),
            }),
        ),
    ])
}

#[test]
fn vertex_service_account_jwt_is_exchanged_once_and_the_token_used() {
    if !require("openssl", which("openssl").is_some()) {
        return;
    }
    let dir = TempDir::new("vertex-sa");
    let (private, public) = make_key(dir.path());
    let scratch = dir.path().to_path_buf();
    let token_uri = Arc::new(Mutex::new(String::new()));
    let expected_aud = Arc::clone(&token_uri);
    let fake = google_fake(move |fields| {
        if fields.get("grant_type").map(String::as_str)
            != Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
        {
            return Err(format!("wrong grant_type {:?}", fields.get("grant_type")));
        }
        let claims = verify_jwt(
            fields.get("assertion").ok_or("no assertion")?,
            &public,
            &scratch,
        )?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let iat = claims["iat"].as_u64().unwrap_or(0);
        let ok = claims["iss"] == "pi-rs-test@test-project.iam.gserviceaccount.com"
            && claims["scope"] == "https://www.googleapis.com/auth/cloud-platform"
            && claims["aud"] == *expected_aud.lock().unwrap()
            && iat.abs_diff(now) < 300
            && claims["exp"].as_u64() == Some(iat + 3600);
        if ok {
            Ok(())
        } else {
            Err(format!("bad claims {claims}"))
        }
    });
    *token_uri.lock().unwrap() = format!("{}/token", fake.url);
    let key_file = dir.path().join("service-account.json");
    let key = json!({
        "type": "service_account", "project_id": "test-project", "private_key_id": "test-key-id",
        "private_key": std::fs::read_to_string(&private).unwrap(),
        "client_email": "pi-rs-test@test-project.iam.gserviceaccount.com",
        "token_uri": format!("{}/token", fake.url),
    });
    std::fs::write(&key_file, key.to_string()).unwrap();
    let setup = setup_for(&fake, "google-vertex", "gemini-2.5-flash")
        .models_json(VERTEX_MODELS)
        .env("GOOGLE_APPLICATION_CREDENTIALS", key_file.to_str().unwrap())
        .env("GOOGLE_CLOUD_PROJECT", "test-project")
        .env("GOOGLE_CLOUD_LOCATION", "us-central1");
    let mut pi = Pi::spawn(&setup);
    for _ in 0..2 {
        let run = prompt(&mut pi, "p1", "Say hello");
        let message = assistant_messages(&run).pop().expect("assistant message");
        assert_eq!(message["stopReason"], "stop", "{message}");
        assert_eq!(message["api"], "google-vertex");
        assert_eq!(
            message["content"].as_array().unwrap().last().unwrap()["text"],
            "Hello from the fake Gemini API."
        );
    }
    let requests = fake.requests();
    let targets: Vec<&str> = requests.iter().map(|r| r.target.as_str()).collect();
    // One exchange: the second turn reuses the cached token.
    assert_eq!(targets, ["/token", VERTEX_PATH, VERTEX_PATH]);
    let body = requests[1].json();
    assert_eq!(
        body["contents"][0],
        json!({"parts": [{"text": "Say hello"}], "role": "user"})
    );
    // Declarations keep their key order (1.6.0's SDK passes them through on Vertex).
    let declaration = &body["tools"][0]["functionDeclarations"][0];
    let keys: Vec<&String> = declaration.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["name", "description", "parametersJsonSchema"]);
}

#[test]
fn vertex_gcloud_user_login_is_refreshed_and_failures_are_reported() {
    let fake = google_fake(|fields| {
        let expected = [
            ("grant_type", "refresh_token"),
            ("client_id", "cid.apps.googleusercontent.com"),
            ("client_secret", "gcloud-secret"),
            ("refresh_token", "1//refresh-token+/="),
        ];
        match expected
            .iter()
            .all(|(k, v)| fields.get(*k).map(String::as_str) == Some(*v))
        {
            true => Ok(()),
            false => Err("Token has been expired or revoked.".into()),
        }
    });
    let dir = TempDir::new("vertex-user");
    let login = |refresh: &str| {
        json!({"type": "authorized_user", "client_id": "cid.apps.googleusercontent.com", "client_secret": "gcloud-secret",
               "refresh_token": refresh, "quota_project_id": "billing-project", "token_uri": format!("{}/token", fake.url)})
        .to_string()
    };
    // gcloud's default place, ~/.config/gcloud (HOME is the workspace root).
    let workspace = Workspace::new();
    let gcloud = workspace.root().join(".config/gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    std::fs::write(
        gcloud.join("application_default_credentials.json"),
        login("1//refresh-token+/="),
    )
    .unwrap();
    let setup = setup_for(&fake, "google-vertex", "gemini-2.5-flash")
        .models_json(VERTEX_MODELS)
        .env("GOOGLE_CLOUD_PROJECT", "test-project")
        .env("GOOGLE_CLOUD_LOCATION", "europe-west4");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let run = prompt(&mut pi, "p1", "Say hello");
    let message = assistant_messages(&run).pop().expect("assistant message");
    assert_eq!(message["stopReason"], "stop", "{message}");
    let requests = fake.requests();
    assert_eq!(requests[0].target, "/token");
    assert_eq!(
        requests[1].header("x-goog-user-project"),
        Some("billing-project")
    );
    drop(pi);

    // A revoked login: one clear error, no stream request.
    let revoked = dir.path().join("revoked.json");
    std::fs::write(&revoked, login("1//revoked")).unwrap();
    let mut pi = Pi::spawn(
        &setup
            .clone()
            .env("GOOGLE_APPLICATION_CREDENTIALS", revoked.to_str().unwrap()),
    );
    let run = prompt(&mut pi, "p1", "Say hello");
    let message = assistant_messages(&run).pop().expect("assistant message");
    assert_eq!(
        message["errorMessage"],
        "Could not get a Google access token: invalid_grant: Token has been expired or revoked."
    );
    assert_eq!(
        fake.requests().len(),
        3,
        "no stream request after the failed exchange"
    );
    drop(pi);

    // No project: like pi, the provider has no credentials at all.
    let mut setup = setup.clone();
    setup.env.retain(|(k, _)| k != "GOOGLE_CLOUD_PROJECT");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
    let response = pi.response_for("p");
    assert_eq!(response["success"], false);
    assert!(
        response["error"]
            .as_str()
            .unwrap()
            .starts_with("No API key found for google-vertex."),
        "{response}"
    );
}

/// Vertex express mode: a Vertex API key, no project or location in the path.
#[test]
fn vertex_api_key_goes_in_the_header() {
    let fake = CloudFake::start(vec![(
        "/v1/",
        Box::new(|request: &Request| match request.header("x-goog-api-key") {
            Some("vertex-express-key") if request.header("authorization").is_none() => gemini_sse(),
            _ => Response::json(403, json!({"error": {"code": 403, "message": "bad key"}})),
        }),
    )]);
    let setup = setup_for(&fake, "google-vertex", "gemini-2.5-flash")
        .models_json(VERTEX_MODELS)
        .env("GOOGLE_CLOUD_API_KEY", "vertex-express-key");
    let mut pi = Pi::spawn(&setup);
    let run = prompt(&mut pi, "p1", "Say hello");
    let message = assistant_messages(&run).pop().expect("assistant message");
    assert_eq!(message["stopReason"], "stop", "{message}");
    assert_eq!(fake.requests()[0].target, VERTEX_PATH);
}
