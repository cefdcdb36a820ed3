//! OAuth sign-in for hosted MCP servers through the real binary, against a fake authorization
//! server and a fake streamable-HTTP MCP server on 127.0.0.1 (one listener, both roles):
//! discovery from the 401's `resource_metadata` (RFC 9728) to the OpenID configuration of an
//! issuer with a path, dynamic registration, PKCE S256 checked by the fake, the resource
//! indicator, the loopback callback and a pasted redirect URL, a wrong `iss` refused, tokens
//! stored in pi 1.6.0's `mcp-auth.json` format and sent as the bearer (redacted), refresh before
//! expiry, `pi mcp logout`, and an RPC session that keeps working when a server needs sign-in.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse::{AnthropicStream, anthropic_text};
use crate::support::{Pi, Setup, Workspace, file_mode, is_reference, result_text};

#[derive(Default)]
struct State {
    wrong_iss: bool,
    /// Advertise Client ID Metadata Document support.
    cimd: bool,
    /// code -> (code_challenge, redirect_uri, client_id, resource)
    codes: Vec<(String, [String; 4])>,
    access: Vec<String>,
    refresh: Vec<String>,
    issued: usize,
    /// (method, path, params or body)
    log: Vec<(String, String, Value)>,
}

struct FakeOAuth {
    port: u16,
    state: Arc<Mutex<State>>,
}

fn decode(text: &str) -> String {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn form(text: &str) -> Map<String, Value> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), json!(decode(v)))
        })
        .collect()
}

fn s256(verifier: &str) -> String {
    use base64::Engine;
    let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
}

type Answer = (u16, Vec<(String, String)>, String);

fn answer_json(status: u16, body: Value) -> Answer {
    (
        status,
        vec![("Content-Type".into(), "application/json".into())],
        body.to_string(),
    )
}

impl FakeOAuth {
    fn start() -> FakeOAuth {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let state = shared.clone();
                std::thread::spawn(move || serve(stream, port, &state));
            }
        });
        FakeOAuth { port, state }
    }
    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    fn log(&self) -> Vec<(String, String, Value)> {
        self.state.lock().unwrap().log.clone()
    }
    fn calls(&self, path: &str) -> Vec<Value> {
        self.log()
            .into_iter()
            .filter(|(_, p, _)| p == path)
            .map(|(_, _, v)| v)
            .collect()
    }
}

fn serve(mut stream: TcpStream, port: u16, state: &Mutex<State>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("/").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    let body = String::from_utf8_lossy(&body).into_owned();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let base = format!("http://127.0.0.1:{port}");
    let issuer = format!("{base}/as");
    let logged = match (method.as_str(), path) {
        ("GET", "/as/authorize") => Value::Object(form(query)),
        ("POST", "/as/token") => Value::Object(form(&body)),
        ("POST", "/as/register") => serde_json::from_str(&body).unwrap_or(Value::Null),
        ("POST", "/mcp") => {
            json!({"authorization": header("authorization"), "body": serde_json::from_str::<Value>(&body).unwrap_or(Value::Null)})
        }
        _ => Value::Null,
    };
    let mut st = state.lock().unwrap();
    st.log
        .push((method.clone(), path.to_string(), logged.clone()));
    let (status, extra, text): Answer = match (method.as_str(), path) {
        ("GET", "/.well-known/oauth-protected-resource/mcp") => answer_json(
            200,
            json!({"resource": format!("{base}/mcp"), "authorization_servers": [issuer], "scopes_supported": ["mcp.read"]}),
        ),
        // RFC 8414 first: missing here, so discovery falls back to the OpenID configuration.
        ("GET", "/.well-known/openid-configuration/as") => answer_json(
            200,
            json!({
                "issuer": issuer,
                "authorization_endpoint": format!("{issuer}/authorize"),
                "token_endpoint": format!("{issuer}/token"),
                "registration_endpoint": format!("{issuer}/register"),
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
                "authorization_response_iss_parameter_supported": true,
                "client_id_metadata_document_supported": st.cimd,
            }),
        ),
        ("POST", "/as/register") => {
            let redirects = logged["redirect_uris"].clone();
            answer_json(
                201,
                json!({"client_id": "dyn-client-1", "redirect_uris": redirects, "token_endpoint_auth_method": "none"}),
            )
        }
        ("GET", "/as/authorize") => {
            st.issued += 1;
            let code = format!("code-{}", st.issued);
            let field = |k: &str| logged[k].as_str().unwrap_or("").to_string();
            st.codes.push((
                code.clone(),
                [
                    field("code_challenge"),
                    field("redirect_uri"),
                    field("client_id"),
                    field("resource"),
                ],
            ));
            let iss = if st.wrong_iss {
                "http://127.0.0.1:1/evil".to_string()
            } else {
                issuer.clone()
            };
            let location = format!(
                "{}?code={code}&state={}&iss={}",
                field("redirect_uri"),
                field("state"),
                iss.replace(':', "%3A").replace('/', "%2F")
            );
            (302, vec![("Location".into(), location)], String::new())
        }
        ("POST", "/as/token") => {
            let field = |k: &str| logged[k].as_str().unwrap_or("").to_string();
            let grant = field("grant_type");
            let ok = match grant.as_str() {
                "authorization_code" => {
                    st.codes
                        .iter()
                        .any(|(code, [challenge, redirect, client, resource])| {
                            *code == field("code")
                                && *challenge == s256(&field("code_verifier"))
                                && *redirect == field("redirect_uri")
                                && *client == field("client_id")
                                && *resource == field("resource")
                        })
                }
                "refresh_token" => {
                    st.refresh.contains(&field("refresh_token"))
                        && field("resource") == format!("{base}/mcp")
                }
                _ => false,
            };
            if ok {
                st.issued += 1;
                let access = format!("at-{}-9c8b7a6d5e4f", st.issued);
                let refresh = format!("rt-{}-1a2b3c4d5e6f", st.issued);
                st.access.push(access.clone());
                st.refresh.push(refresh.clone());
                answer_json(
                    200,
                    json!({"access_token": access, "token_type": "Bearer", "expires_in": 3600, "refresh_token": refresh}),
                )
            } else {
                answer_json(400, json!({"error": "invalid_grant"}))
            }
        }
        ("POST", "/mcp") => {
            let bearer = header("authorization").unwrap_or_default();
            let valid = bearer
                .strip_prefix("Bearer ")
                .is_some_and(|t| st.access.iter().any(|a| a == t));
            if !valid {
                (
                    401,
                    vec![(
                        "WWW-Authenticate".into(),
                        format!(
                            "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
                        ),
                    )],
                    String::new(),
                )
            } else {
                let request = &logged["body"];
                let result = match request["method"].as_str().unwrap_or("") {
                    "initialize" => {
                        json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "hosted", "version": "1"}})
                    }
                    "tools/list" => json!({"tools": [{"name": "whoami", "inputSchema": {}}]}),
                    "tools/call" => {
                        json!({"content": [{"type": "text", "text": format!("you are {bearer}")}]})
                    }
                    _ => return reply(&mut stream, 202, &[], ""),
                };
                answer_json(
                    200,
                    json!({"jsonrpc": "2.0", "id": request["id"], "result": result}),
                )
            }
        }
        ("GET", "/mcp") => (405, vec![], String::new()),
        _ => (404, vec![], String::new()),
    };
    drop(st);
    reply(&mut stream, status, &extra, &text);
}

fn reply(stream: &mut TcpStream, status: u16, extra: &[(String, String)], body: &str) {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
}

fn write_config(workspace: &Workspace, fake: &FakeOAuth) {
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        json!({"mcpServers": {"hosted": {"url": format!("{}/mcp", fake.base())}}}).to_string(),
    )
    .unwrap();
}

fn pi_mcp(workspace: &Workspace, args: &[&str]) -> Command {
    let mut command = Command::new(crate::support::binary());
    command
        .arg("mcp")
        .args(args)
        .current_dir(workspace.cwd())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("PI_CODING_AGENT_DIR", workspace.agent_dir())
        .env("HOME", workspace.root());
    command
}

/// Starts `pi mcp login hosted` and returns it with the authorization URL it printed.
fn start_login(workspace: &Workspace) -> (Child, String, BufReader<std::process::ChildStdout>) {
    let mut child = pi_mcp(workspace, &["login", "hosted", "--timeout", "30"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "Sign in to MCP server \"hosted\" in your browser:\n");
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    (child, url.trim().to_string(), stdout)
}

/// The browser: opens the authorization URL and returns where the server redirects.
fn authorize(url: &str) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .into();
    let response = agent.get(url).call().unwrap();
    assert_eq!(response.status().as_u16(), 302);
    response.headers()["location"].to_str().unwrap().to_string()
}

fn finish(
    mut child: Child,
    mut stdout: BufReader<std::process::ChildStdout>,
) -> (i32, String, String) {
    let until = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    let mut out = String::new();
    stdout.read_to_string(&mut out).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code().unwrap_or(-1), out, err)
}

fn store(workspace: &Workspace) -> (Value, String) {
    let path = workspace.agent_dir().join("mcp-auth.json");
    let text = std::fs::read_to_string(&path).unwrap();
    (serde_json::from_str(&text).unwrap(), text)
}

#[test]
fn login_discovers_registers_signs_in_with_pkce_and_the_session_sends_the_bearer() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    write_config(&workspace, &fake);
    let (child, url, stdout) = start_login(&workspace);
    assert!(
        url.starts_with(&format!("{}/as/authorize?", fake.base())),
        "{url}"
    );
    let callback = authorize(&url);
    assert!(callback.starts_with("http://127.0.0.1:"), "{callback}");
    // The browser lands on the loopback callback.
    let page = ureq::get(&callback)
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    assert_eq!(page, "Authorization complete. You may close this window.");
    let (code, out, err) = finish(child, stdout);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "Signed in to MCP server \"hosted\".\n");

    // Discovery: the 401's resource_metadata, then RFC 8414 (missing) and the OpenID fallback.
    let paths: Vec<String> = fake
        .log()
        .into_iter()
        .map(|(m, p, _)| format!("{m} {p}"))
        .collect();
    let at = |p: &str| {
        paths
            .iter()
            .position(|x| x == p)
            .unwrap_or_else(|| panic!("{p} in {paths:?}"))
    };
    assert!(at("POST /mcp") < at("GET /.well-known/oauth-protected-resource/mcp"));
    assert!(
        at("GET /.well-known/oauth-authorization-server/as")
            < at("GET /.well-known/openid-configuration/as")
    );
    // Dynamic registration with pi's client metadata.
    let registration = &fake.calls("/as/register")[0];
    let redirect = registration["redirect_uris"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(redirect.starts_with("http://127.0.0.1:") && redirect.ends_with("/callback"));
    assert_eq!(registration["client_name"], "pi");
    assert_eq!(registration["application_type"], "native");
    assert_eq!(registration["token_endpoint_auth_method"], "none");
    assert_eq!(registration["scope"], "mcp.read");
    // The authorization request: PKCE S256, the resource indicator, the discovered scope.
    let request = &fake.calls("/as/authorize")[0];
    assert_eq!(request["code_challenge_method"], "S256");
    assert_eq!(request["client_id"], "dyn-client-1");
    assert_eq!(request["resource"], format!("{}/mcp", fake.base()));
    assert_eq!(request["scope"], "mcp.read");
    assert_eq!(request["redirect_uri"], redirect.as_str());
    // The fake accepted the exchange only with the verifier of that challenge.
    let exchange = &fake.calls("/as/token")[0];
    assert_eq!(exchange["grant_type"], "authorization_code");
    assert_eq!(
        s256(exchange["code_verifier"].as_str().unwrap()),
        request["code_challenge"]
    );

    // Stored like pi 1.6.0: mcp-auth.json, keyed by namespace and URL, 0600, pretty + newline.
    let (stored, text) = store(&workspace);
    let key = format!("mcp__hosted|{}/mcp", fake.base());
    let state = &stored[&key];
    assert_eq!(state["serverUrl"], format!("{}/mcp", fake.base()));
    assert_eq!(state["clientInformation"]["client_id"], "dyn-client-1");
    assert_eq!(state["tokens"]["access_token"], "at-2-9c8b7a6d5e4f");
    assert_eq!(state["tokens"]["refresh_token"], "rt-2-1a2b3c4d5e6f");
    assert_eq!(state["tokens"]["token_type"], "Bearer");
    assert_eq!(state["tokens"]["scope"], "mcp.read");
    assert!(state["tokensExpireAt"].as_f64().unwrap() > 0.0);
    assert!(text.ends_with("}\n") && text.contains("\n  \""));
    assert_eq!(
        file_mode(&workspace.agent_dir().join("mcp-auth.json")),
        0o600
    );
    assert!(!workspace.agent_dir().join("mcp-auth.json.lock").exists());

    // A session uses the stored token; the tool's echo of it is redacted.
    let provider = FakeProvider::start(vec![
        Reply::sse(
            AnthropicStream::new()
                .tool_use("c1", "mcp__hosted__whoami", &["{}"])
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&provider));
    pi.command("1", "prompt", json!({"message": "who"}));
    let end = pi.find(|r| r["type"] == "tool_execution_end");
    assert_eq!(
        result_text(&end["result"]),
        "you are Bearer [redacted]",
        "{end}"
    );
    pi.wait_for_event("agent_end");
    pi.close_stdin();
    pi.wait_for_exit();
    let calls: Vec<Value> = fake.calls("/mcp");
    let call = calls
        .iter()
        .rfind(|c| c["body"]["method"] == "tools/call")
        .unwrap();
    assert_eq!(call["authorization"], "Bearer at-2-9c8b7a6d5e4f");
}

#[test]
fn headless_sign_in_by_pasted_url_refuses_a_foreign_host_and_a_wrong_iss_then_succeeds() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    write_config(&workspace, &fake);
    // A pasted URL on another host is refused before anything is exchanged.
    let (mut child, url, stdout) = start_login(&workspace);
    let redirected = authorize(&url);
    let foreign = redirected.replacen("http://127.0.0.1:", "http://evil.example:", 1);
    writeln!(child.stdin.as_mut().unwrap(), "{foreign}").unwrap();
    let (code, out, err) = finish(child, stdout);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("Sign-in to MCP server \"hosted\" failed: The redirect URL does not match this sign-in's redirect URI"),
        "{err}"
    );
    fake.state.lock().unwrap().wrong_iss = true;
    let (mut child, url, stdout) = start_login(&workspace);
    let redirected = authorize(&url);
    writeln!(child.stdin.as_mut().unwrap(), "{redirected}").unwrap();
    let (code, out, err) = finish(child, stdout);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!(
            "Sign-in to MCP server \"hosted\" failed: OAuth issuer mismatch: expected {}/as, received http://127.0.0.1:1/evil",
            fake.base()
        )),
        "{err}"
    );
    // The code never went to the token endpoint.
    assert!(fake.calls("/as/token").is_empty());

    fake.state.lock().unwrap().wrong_iss = false;
    let (mut child, url, stdout) = start_login(&workspace);
    let redirected = authorize(&url);
    writeln!(child.stdin.as_mut().unwrap(), "{redirected}").unwrap();
    let (code, out, err) = finish(child, stdout);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "Signed in to MCP server \"hosted\".\n");
    // The client registered by the first attempt is reused (same redirect URI and port).
    assert_eq!(fake.calls("/as/register").len(), 1);
}

#[test]
fn expired_tokens_are_refreshed_before_use_and_logout_deletes_them() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    write_config(&workspace, &fake);
    fake.state
        .lock()
        .unwrap()
        .refresh
        .push("rt-old-5f4e3d2c1b0a".into());
    let key = format!("mcp__hosted|{}/mcp", fake.base());
    // As pi 1.6.0 writes it: the access token expired a minute ago.
    let state = json!({key.clone(): {
        "serverUrl": format!("{}/mcp", fake.base()),
        "clientInformation": {"client_id": "dyn-client-1", "redirect_uris": ["http://127.0.0.1:1234/callback"]},
        "tokens": {"access_token": "at-old-0a1b2c3d4e5f", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt-old-5f4e3d2c1b0a"},
        "tokensExpireAt": 1_000_000,
    }});
    let path = workspace.agent_dir().join("mcp-auth.json");
    std::fs::write(
        &path,
        format!("{}\n", serde_json::to_string_pretty(&state).unwrap()),
    )
    .unwrap();
    let out = pi_mcp(&workspace, &["login", "hosted"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Already signed in to MCP server \"hosted\".\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refresh = &fake.calls("/as/token")[0];
    assert_eq!(refresh["grant_type"], "refresh_token");
    assert_eq!(refresh["client_id"], "dyn-client-1");
    let (stored, _) = store(&workspace);
    assert_eq!(stored[&key]["tokens"]["access_token"], "at-1-9c8b7a6d5e4f");
    assert!(stored[&key]["tokensExpireAt"].as_i64().unwrap() > 1_000_000);
    // The refresh lock was released.
    let locks: Vec<_> = std::fs::read_dir(workspace.agent_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".lock"))
        .collect();
    assert!(locks.is_empty());

    let out = pi_mcp(&workspace, &["logout", "hosted"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Signed out of MCP server \"hosted\".\n"
    );
    let (stored, _) = store(&workspace);
    assert_eq!(stored, json!({}));
    let out = pi_mcp(&workspace, &["logout", "hosted"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "No stored credentials for MCP server \"hosted\".\n"
    );
}

#[test]
fn in_rpc_mode_a_server_needing_sign_in_is_reported_and_the_agent_keeps_working() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    write_config(&workspace, &fake);
    let provider = FakeProvider::start(vec![Reply::sse(anthropic_text(&["Still here."]))]);
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&provider));
    let deadline = pi.deadline();
    let notice = pi
        .recv_until(
            |r| r["type"] == "extension_ui_request" && r["method"] == "notify",
            deadline,
        )
        .pop()
        .unwrap();
    assert_eq!(
        notice["message"],
        "MCP servers need attention:\n  hosted: failed: MCP server \"hosted\" needs sign-in: run \"pi mcp login hosted\"\nRun /mcp to fix."
    );
    pi.command("1", "prompt", json!({"message": "hi"}));
    let end = pi.wait_for_event("agent_end");
    assert!(end.to_string().contains("Still here."), "{end}");
    pi.close_stdin();
    pi.wait_for_exit();
    // No sign-in was started on its own.
    assert!(fake.calls("/as/authorize").is_empty());
}

#[test]
fn a_session_refreshes_a_rejected_token_with_the_configured_client_and_retries() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        json!({"mcpServers": {"hosted": {"url": format!("{}/mcp", fake.base()), "oauth": {"clientId": "configured-1"}}}})
            .to_string(),
    )
    .unwrap();
    fake.state
        .lock()
        .unwrap()
        .refresh
        .push("rt-kept-5f4e3d2c1b0a".into());
    let key = format!("mcp__hosted|{}/mcp", fake.base());
    // Not expired by the clock, but the server no longer takes it (revoked on its side).
    let far = 4_000_000_000_000_i64;
    let state = json!({key.clone(): {
        "serverUrl": format!("{}/mcp", fake.base()),
        "tokens": {"access_token": "at-revoked-0a1b2c3d", "token_type": "Bearer", "refresh_token": "rt-kept-5f4e3d2c1b0a"},
        "tokensExpireAt": far,
    }});
    std::fs::write(
        workspace.agent_dir().join("mcp-auth.json"),
        serde_json::to_string_pretty(&state).unwrap(),
    )
    .unwrap();
    let provider = FakeProvider::start(vec![
        Reply::sse(
            AnthropicStream::new()
                .tool_use("c1", "mcp__hosted__whoami", &["{}"])
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&provider));
    pi.command("1", "prompt", json!({"message": "who"}));
    let end = pi.find(|r| r["type"] == "tool_execution_end");
    assert_eq!(
        result_text(&end["result"]),
        "you are Bearer [redacted]",
        "{end}"
    );
    pi.wait_for_event("agent_end");
    pi.close_stdin();
    pi.wait_for_exit();
    let refreshes = fake.calls("/as/token");
    assert_eq!(
        refreshes.len(),
        1,
        "one refresh for the rejected token: {refreshes:?}"
    );
    assert_eq!(refreshes[0]["grant_type"], "refresh_token");
    assert_eq!(refreshes[0]["client_id"], "configured-1");
    assert!(fake.calls("/as/register").is_empty());
    let calls = fake.calls("/mcp");
    assert_eq!(calls[0]["authorization"], "Bearer at-revoked-0a1b2c3d");
    let call = calls
        .iter()
        .rfind(|c| c["body"]["method"] == "tools/call")
        .unwrap();
    assert_eq!(call["authorization"], "Bearer at-1-9c8b7a6d5e4f");
    let (stored, _) = store(&workspace);
    // The refresh token was rotated and stored with the new access token.
    assert_eq!(stored[&key]["tokens"]["refresh_token"], "rt-1-1a2b3c4d5e6f");
}

/// Runs pi 1.6.0's own credential store (`McpOAuthCredentialStore`) on the workspace's agent dir:
/// `save` the given state, or print what `load` returns.
fn pi_store(workspace: &Workspace, url: &str, save: Option<&Value>) -> Option<Value> {
    let reference = crate::reference_clients::reference("1.6.0")?;
    let module = reference
        .package
        .join("dist/extensions/mcp/oauth.js")
        .to_string_lossy()
        .into_owned();
    let script = format!(
        "const m = await import({module:?}); const s = new m.McpOAuthCredentialStore().forServer('hosted', {url:?}); {}",
        match save {
            Some(state) => format!("await s.save({state});"),
            None => "console.log(JSON.stringify(await s.load()));".into(),
        }
    );
    let out = Command::new(&reference.node)
        .args(["--input-type=module", "-e", &script])
        .current_dir(workspace.cwd())
        .env_clear()
        .env("PI_CODING_AGENT_DIR", workspace.agent_dir())
        .env("HOME", workspace.root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap_or(Value::Null))
}

#[test]
fn pi_1_6_0_and_pi_rs_share_one_sign_in() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    write_config(&workspace, &fake);
    let url = format!("{}/mcp", fake.base());
    fake.state
        .lock()
        .unwrap()
        .refresh
        .push("rt-pi-5f4e3d2c1b0a".into());
    // pi 1.6.0 stored an expired sign-in...
    let state = json!({
        "serverUrl": url,
        "clientInformation": {"client_id": "dyn-client-1", "redirect_uris": ["http://127.0.0.1:1234/callback"]},
        "tokens": {"access_token": "at-pi-0a1b2c3d4e5f", "token_type": "Bearer", "refresh_token": "rt-pi-5f4e3d2c1b0a"},
        "tokensExpireAt": 1_000_000,
    });
    if pi_store(&workspace, &url, Some(&state)).is_none() {
        return;
    }
    // ...which pi-rs reads and refreshes...
    let out = pi_mcp(&workspace, &["login", "hosted"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Already signed in to MCP server \"hosted\".\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        fake.calls("/as/token")[0]["refresh_token"],
        "rt-pi-5f4e3d2c1b0a"
    );
    // ...and pi 1.6.0 reads what pi-rs wrote.
    let loaded = pi_store(&workspace, &url, None).unwrap();
    assert_eq!(
        loaded["tokens"]["access_token"], "at-1-9c8b7a6d5e4f",
        "{loaded}"
    );
    assert_eq!(loaded["tokens"]["refresh_token"], "rt-1-1a2b3c4d5e6f");
    assert_eq!(loaded["clientInformation"]["client_id"], "dyn-client-1");
    assert!(loaded["tokensExpireAt"].as_i64().unwrap() > 1_000_000);
}

#[test]
fn a_server_taking_client_documents_gets_pis_document_and_the_metadata_url_override_is_used() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    fake.state.lock().unwrap().cimd = true;
    let workspace = Workspace::new();
    let metadata = format!("{}/.well-known/openid-configuration/as", fake.base());
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        json!({"mcpServers": {"hosted": {"url": format!("{}/mcp", fake.base()), "oauth": {"authServerMetadataUrl": metadata}}}})
            .to_string(),
    )
    .unwrap();
    let (child, url, stdout) = start_login(&workspace);
    let callback = authorize(&url);
    ureq::get(&callback).call().unwrap();
    let (code, out, err) = finish(child, stdout);
    assert_eq!(code, 0, "{out}{err}");
    // No registration: the client is pi's document, with the plain /callback (the server sends iss).
    assert!(fake.calls("/as/register").is_empty());
    let request = &fake.calls("/as/authorize")[0];
    assert_eq!(request["client_id"], "https://pi.dev/oauth/client.json");
    assert!(
        request["redirect_uri"]
            .as_str()
            .unwrap()
            .ends_with("/callback")
    );
    // The configured metadata URL replaced RFC 8414 discovery.
    let paths: Vec<String> = fake.log().into_iter().map(|(_, p, _)| p).collect();
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("oauth-authorization-server")),
        "{paths:?}"
    );
    let (stored, _) = store(&workspace);
    let state = &stored[&format!("mcp__hosted|{}/mcp", fake.base())];
    assert!(state.get("clientInformation").is_none(), "{state}");
    assert_eq!(state["tokens"]["access_token"], "at-2-9c8b7a6d5e4f");
}

#[test]
fn pi_mcp_add_writes_oauth_settings_and_checks_them_like_pi() {
    if is_reference() {
        return;
    }
    let workspace = Workspace::new();
    let out = pi_mcp(
        &workspace,
        &[
            "add",
            "example",
            "--url",
            "https://mcp.example.com/mcp",
            "--oauth-client-registration",
            "dcr",
            "--oauth-callback-port",
            "8765",
            "--oauth-client-id",
            "my-client",
            "--oauth-client-secret",
            "${EXAMPLE_SECRET}",
        ],
    )
    .output()
    .unwrap();
    let path = workspace.agent_dir().join("mcp.json");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "Added global MCP server \"example\" in {}.\nCheck it with: pi mcp list. If it requires sign-in: pi mcp login example\n",
            path.display()
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let entry = &written["mcpServers"]["example"];
    assert_eq!(
        entry.to_string(),
        r#"{"url":"https://mcp.example.com/mcp","oauth":{"clientId":"my-client","clientSecret":"${EXAMPLE_SECRET}","callbackPort":8765,"clientRegistration":"dcr"}}"#
    );
    let out = pi_mcp(
        &workspace,
        &[
            "add",
            "bad",
            "--url",
            "https://x.test/mcp",
            "--oauth-client-registration",
            "cimd",
            "--oauth-client-name",
            "Claude Code",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "oauth.clientRegistration \"cimd\" cannot be combined with oauth.clientId or oauth.clientName"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = pi_mcp(
        &workspace,
        &["add", "cmd", "--oauth-client-id", "x", "--", "server"],
    )
    .output()
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "--oauth-client-id only applies to HTTP servers (--url).\n"
    );
}
