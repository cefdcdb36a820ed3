//! OAuth sign-in for hosted MCP servers through the real binary, against a fake authorization
//! server and a fake streamable-HTTP MCP server on 127.0.0.1 (one `ScriptedHttp`, both roles):
//! discovery from the 401's `resource_metadata` (RFC 9728) to the OpenID configuration of an
//! issuer with a path, dynamic registration, PKCE S256 checked by the fake, the resource
//! indicator, the loopback callback and a pasted redirect URL, a wrong `iss` refused, tokens
//! stored in pi 1.6.0's `mcp-auth.json` format and sent as the bearer (redacted), refresh before
//! expiry, step-up on `insufficient_scope`, `pi mcp logout`, and RPC sessions: a server needing
//! sign-in is a notice and the agent keeps working; `/mcp login` and `/mcp logout` as pi 1.6.0
//! runs them outside its TUI, its server choice and the browser it opens.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::scripted_http::{Answer, HttpRequest, ScriptedHttp, form, json_answer, rpc_answer};
use crate::sse::{AnthropicStream, anthropic_text};
use crate::support::{
    Pi, Setup, Workspace, file_mode, is_reference, mcp_servers_until, mcp_sign_in_dialog,
    next_notify, result_text, wait_for_file, write_mcp_json,
};

#[derive(Default)]
struct State {
    wrong_iss: bool,
    /// Advertise Client ID Metadata Document support.
    cimd: bool,
    /// A scope every MCP request needs: tokens without it get 403 `insufficient_scope`.
    required_scope: Option<String>,
    /// code -> (code_challenge, redirect_uri, client_id, resource, scope)
    codes: Vec<(String, [String; 5])>,
    /// Valid access tokens with their scope.
    access: Vec<(String, String)>,
    /// Valid refresh tokens with their scope.
    refresh: Vec<(String, String)>,
    issued: usize,
}

struct FakeOAuth {
    server: ScriptedHttp,
    state: Arc<Mutex<State>>,
}

fn s256(verifier: &str) -> String {
    use base64::Engine;
    let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
}

impl FakeOAuth {
    fn start() -> FakeOAuth {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let server = ScriptedHttp::start(Box::new(move |request, _| {
            answer(request, &mut shared.lock().unwrap())
        }));
        FakeOAuth { server, state }
    }
    fn base(&self) -> String {
        self.server.base()
    }
    /// A refresh token the fake takes (granting no scope).
    fn accept_refresh_token(&self, token: &str) {
        let mut state = self.state.lock().unwrap();
        state.refresh.push((token.into(), String::new()));
    }
    /// `METHOD /path` of every request, in order.
    fn paths(&self) -> Vec<String> {
        self.server
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }
    /// What each request to `path` carried: the query of `/as/authorize`, the form of
    /// `/as/token`, the JSON of `/as/register`, `{authorization, body}` of `/mcp` POSTs.
    fn calls(&self, path: &str) -> Vec<Value> {
        self.server
            .requests()
            .iter()
            .filter(|r| r.path == path && (path != "/mcp" || r.method == "POST"))
            .map(logged)
            .collect()
    }
}

fn logged(request: &HttpRequest) -> Value {
    match request.path.as_str() {
        "/as/authorize" => Value::Object(form(&request.query)),
        "/as/token" => Value::Object(form(&request.text)),
        "/mcp" => json!({"authorization": request.header("authorization"), "body": request.body}),
        _ => request.body.clone(),
    }
}

/// The fake's answer: protected resource metadata, the authorization server (OpenID
/// configuration only, registration, authorization, token), and the MCP server itself.
fn answer(request: &HttpRequest, st: &mut State) -> Answer {
    let base = request.base();
    let issuer = format!("{base}/as");
    let fields = logged(request);
    let field = |k: &str| fields[k].as_str().unwrap_or("").to_string();
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/.well-known/oauth-protected-resource/mcp") => json_answer(
            200,
            json!({"resource": format!("{base}/mcp"), "authorization_servers": [issuer], "scopes_supported": ["mcp.read"]}),
        ),
        // RFC 8414 first: missing here, so discovery falls back to the OpenID configuration.
        ("GET", "/.well-known/openid-configuration/as") => json_answer(
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
        ("POST", "/as/register") => json_answer(
            201,
            json!({"client_id": "dyn-client-1", "redirect_uris": fields["redirect_uris"], "token_endpoint_auth_method": "none"}),
        ),
        ("GET", "/as/authorize") => {
            st.issued += 1;
            let code = format!("code-{}", st.issued);
            st.codes.push((
                code.clone(),
                [
                    field("code_challenge"),
                    field("redirect_uri"),
                    field("client_id"),
                    field("resource"),
                    field("scope"),
                ],
            ));
            let iss = match st.wrong_iss {
                true => "http://127.0.0.1:1/evil".to_string(),
                false => issuer.clone(),
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
            let granted = match field("grant_type").as_str() {
                "authorization_code" => st
                    .codes
                    .iter()
                    .find(|(code, [challenge, redirect, client, resource, _])| {
                        *code == field("code")
                            && *challenge == s256(&field("code_verifier"))
                            && *redirect == field("redirect_uri")
                            && *client == field("client_id")
                            && *resource == field("resource")
                    })
                    .map(|(_, [.., scope])| scope.clone()),
                "refresh_token" if field("resource") == format!("{base}/mcp") => st
                    .refresh
                    .iter()
                    .find(|(token, _)| *token == field("refresh_token"))
                    .map(|(_, scope)| scope.clone()),
                _ => None,
            };
            let Some(scope) = granted else {
                return json_answer(400, json!({"error": "invalid_grant"}));
            };
            st.issued += 1;
            let access = format!("at-{}-9c8b7a6d5e4f", st.issued);
            let refresh = format!("rt-{}-1a2b3c4d5e6f", st.issued);
            st.access.push((access.clone(), scope.clone()));
            st.refresh.push((refresh.clone(), scope.clone()));
            let mut tokens = json!({"access_token": access, "token_type": "Bearer", "expires_in": 3600, "refresh_token": refresh});
            if !scope.is_empty() {
                tokens["scope"] = json!(scope);
            }
            json_answer(200, tokens)
        }
        ("POST", "/mcp") => {
            let bearer = request.header("authorization").unwrap_or_default();
            let scope = bearer
                .strip_prefix("Bearer ")
                .and_then(|t| st.access.iter().find(|(a, _)| a == t))
                .map(|(_, scope)| scope.clone());
            let metadata =
                format!("resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
            let Some(scope) = scope else {
                let challenge = format!("Bearer {metadata}");
                return (
                    401,
                    vec![("WWW-Authenticate".into(), challenge)],
                    String::new(),
                );
            };
            if let Some(needed) = &st.required_scope
                && !scope.split(' ').any(|s| s == needed)
            {
                let challenge =
                    format!("Bearer error=\"insufficient_scope\", scope=\"{needed}\", {metadata}");
                return (
                    403,
                    vec![("WWW-Authenticate".into(), challenge)],
                    String::new(),
                );
            }
            let result = match request.rpc_method() {
                "initialize" => {
                    json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "hosted", "version": "1"}})
                }
                "tools/list" => json!({"tools": [{"name": "whoami", "inputSchema": {}}]}),
                "tools/call" => {
                    json!({"content": [{"type": "text", "text": format!("you are {bearer}")}]})
                }
                _ => return (202, vec![], String::new()),
            };
            rpc_answer(request, result, "")
        }
        ("GET", "/mcp") => (405, vec![], String::new()),
        _ => (404, vec![], String::new()),
    }
}

fn write_config(workspace: &Workspace, fake: &FakeOAuth) {
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        json!({"mcpServers": {"hosted": {"url": format!("{}/mcp", fake.base()), "exposure": "direct"}}}).to_string(),
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

/// `pi mcp login hosted` with the browser following the redirect to the loopback callback:
/// its exit code, stdout and stderr.
fn sign_in_from_the_shell(workspace: &Workspace) -> (i32, String, String) {
    let (child, url, stdout) = start_login(workspace);
    ureq::get(&authorize(&url)).call().unwrap();
    finish(child, stdout)
}

/// `pi mcp login hosted` on a headless machine: the URL the browser was redirected to, as
/// `paste` changes it, is pasted on stdin; the exit code, stdout and stderr.
fn sign_in_by_pasting(
    workspace: &Workspace,
    paste: impl Fn(String) -> String,
) -> (i32, String, String) {
    let (mut child, url, stdout) = start_login(workspace);
    let pasted = paste(authorize(&url));
    writeln!(child.stdin.as_mut().unwrap(), "{pasted}").unwrap();
    finish(child, stdout)
}

fn store(workspace: &Workspace) -> (Value, String) {
    let path = workspace.agent_dir().join("mcp-auth.json");
    let text = std::fs::read_to_string(&path).unwrap();
    (serde_json::from_str(&text).unwrap(), text)
}

/// A session whose model calls the hosted server's `whoami`: the tool's echo of the bearer is
/// redacted. Returns the provider (keep it alive), the session and the `tool_execution_end`.
fn whoami_turn(workspace: &Workspace) -> (FakeProvider, Pi, Value) {
    let provider = FakeProvider::start(vec![
        Reply::sse(
            AnthropicStream::new()
                .tool_use("c1", "mcp__hosted__whoami", &["{}"])
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let mut pi = Pi::spawn_in(workspace, &Setup::anthropic(&provider));
    pi.command("1", "prompt", json!({"message": "who"}));
    let end = pi.find(|r| r["type"] == "tool_execution_end");
    assert_eq!(
        result_text(&end["result"]),
        "you are Bearer [redacted]",
        "{end}"
    );
    (provider, pi, end)
}

/// The last `tools/call` the fake MCP server received.
fn last_tool_call(calls: &[Value]) -> &Value {
    calls
        .iter()
        .rfind(|c| c["body"]["method"] == "tools/call")
        .expect("a tools/call reached the server")
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
    let paths = fake.paths();
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
    let (_provider, mut pi, end) = whoami_turn(&workspace);
    // The whole `CallToolResult` rides along as pi's `structuredContent`, redacted too.
    assert_eq!(
        end["result"]["structuredContent"],
        json!({"content": [{"type": "text", "text": "you are Bearer [redacted]"}]})
    );
    assert!(end["result"].get("isError").is_none(), "{end}");
    // The session's tool result message does not keep it (pi's neither).
    let message = pi.find(|r| r["type"] == "message_end" && r["message"]["role"] == "toolResult");
    assert!(message["message"].get("structuredContent").is_none());
    pi.wait_for_event("agent_end");
    pi.close_stdin();
    pi.wait_for_exit();
    let calls: Vec<Value> = fake.calls("/mcp");
    let call = last_tool_call(&calls);
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
    let (code, out, err) = sign_in_by_pasting(&workspace, |redirected| {
        redirected.replacen("http://127.0.0.1:", "http://evil.example:", 1)
    });
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("Sign-in to MCP server \"hosted\" failed: The redirect URL does not match this sign-in's redirect URI"),
        "{err}"
    );
    fake.state.lock().unwrap().wrong_iss = true;
    let (code, out, err) = sign_in_by_pasting(&workspace, |redirected| redirected);
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
    let (code, out, err) = sign_in_by_pasting(&workspace, |redirected| redirected);
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
    fake.accept_refresh_token("rt-old-5f4e3d2c1b0a");
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
        "MCP servers need attention:\n  hosted: needs sign-in\nRun /mcp to fix."
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
        json!({"mcpServers": {"hosted": {"url": format!("{}/mcp", fake.base()), "exposure": "direct", "oauth": {"clientId": "configured-1"}}}})
            .to_string(),
    )
    .unwrap();
    fake.accept_refresh_token("rt-kept-5f4e3d2c1b0a");
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
    let (_provider, mut pi, _) = whoami_turn(&workspace);
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
    let call = last_tool_call(&calls);
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
    fake.accept_refresh_token("rt-pi-5f4e3d2c1b0a");
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
        json!({"mcpServers": {"hosted": {"url": format!("{}/mcp", fake.base()), "exposure": "direct", "oauth": {"authServerMetadataUrl": metadata}}}})
            .to_string(),
    )
    .unwrap();
    let (code, out, err) = sign_in_from_the_shell(&workspace);
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
    let paths = fake.paths();
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

/// `get_mcp_servers`' entry of the one server, once `done` holds for it.
fn server_when(pi: &mut Pi, done: impl Fn(&Value) -> bool) -> Value {
    mcp_servers_until(pi, |data| done(&data["servers"][0]))["servers"][0].clone()
}

/// The prompt's `handled` answer, once the command it ran is over.
fn handled(pi: &mut Pi, id: &str) {
    let answer = pi.response_for(id);
    assert_eq!(answer["data"]["disposition"], "handled", "{answer}");
}

#[test]
fn over_rpc_mcp_login_asks_the_client_for_the_redirect_and_logout_signs_out() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    write_config(&workspace, &fake);
    let provider = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&provider));
    assert_eq!(
        next_notify(&mut pi, "").0,
        "MCP servers need attention:\n  hosted: needs sign-in\nRun /mcp to fix."
    );
    // `/mcp` is offered as pi 1.6.0 lists it, and its status names the way to sign in.
    let commands = pi.command("c", "get_commands", json!({}));
    assert_eq!(
        commands["data"]["commands"],
        json!([crate::mcp::builtin_command()])
    );
    pi.send(json!({"id": "s", "type": "prompt", "message": "/mcp"}));
    assert_eq!(
        next_notify(&mut pi, ""),
        (
            "hosted: needs sign-in, run /mcp login hosted (direct)".into(),
            "info".into()
        )
    );
    handled(&mut pi, "s");
    let server = server_when(&mut pi, |_| true);
    assert_eq!(server["state"], "needs-auth");
    assert_eq!(server["tools"], json!([]));

    // The sign-in shows the URL, then asks for the redirect URL (the browser is elsewhere).
    pi.send(json!({"id": "l1", "type": "prompt", "message": "/mcp login hosted"}));
    let (url, dialog) = mcp_sign_in_dialog(&mut pi, "hosted");
    assert_eq!(
        dialog["title"],
        "Waiting for sign-in to \"hosted\". If the browser cannot reach this machine, paste the URL it was redirected to."
    );
    assert_eq!(
        dialog["placeholder"],
        "http://127.0.0.1:.../callback?code=..."
    );
    // The prompt is answered when the command is over, as pi does.
    assert!(!pi.records().iter().any(|r| r["id"] == "l1"));
    let redirected = authorize(&url);
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "value": redirected}));
    assert_eq!(
        next_notify(&mut pi, ""),
        (
            "Signed in to MCP server \"hosted\" (1 tools).".into(),
            "info".into()
        )
    );
    handled(&mut pi, "l1");
    let server = server_when(&mut pi, |s| s["state"] == "connected");
    assert_eq!(server["tools"], json!(["mcp__hosted__whoami"]));
    let (stored, _) = store(&workspace);
    let key = format!("mcp__hosted|{}/mcp", fake.base());
    assert_eq!(stored[&key]["tokens"]["access_token"], "at-2-9c8b7a6d5e4f");
    // Nothing secret reached stdout: the dialog's answer is not echoed.
    assert!(
        !pi.records()
            .iter()
            .any(|r| r.to_string().contains("at-2-9c8b7a6d5e4f"))
    );

    // Sign-out deletes the credentials; the server waits for a sign-in again.
    pi.send(json!({"id": "o", "type": "prompt", "message": "/mcp logout hosted"}));
    assert_eq!(
        next_notify(&mut pi, ""),
        ("Signed out of MCP server \"hosted\".".into(), "info".into())
    );
    handled(&mut pi, "o");
    assert_eq!(store(&workspace).0, json!({}));
    let server = server_when(&mut pi, |s| s["state"] == "needs-auth");
    assert_eq!(server["state"], "needs-auth");

    // Dismissing the dialog cancels the sign-in (the login is picked when it is the only one).
    pi.send(json!({"id": "l2", "type": "prompt", "message": "/mcp login"}));
    let (_, dialog) = mcp_sign_in_dialog(&mut pi, "hosted");
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "cancelled": true}));
    assert_eq!(
        next_notify(&mut pi, ""),
        ("Sign-in cancelled.".into(), "info".into())
    );
    handled(&mut pi, "l2");
    // A server that does not use OAuth, and one that is not there.
    pi.send(json!({"id": "x", "type": "prompt", "message": "/mcp logout nope"}));
    assert_eq!(
        next_notify(&mut pi, ""),
        ("No MCP server named \"nope\".".into(), "error".into())
    );
    handled(&mut pi, "x");
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn a_session_picks_up_a_sign_in_done_elsewhere_when_the_next_prompt_starts() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    write_config(&workspace, &fake);
    let provider = FakeProvider::start(vec![
        Reply::sse(anthropic_text(&["One."])),
        Reply::sse(anthropic_text(&["Two."])),
    ]);
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&provider));
    next_notify(&mut pi, "");
    pi.command("1", "prompt", json!({"message": "hi"}));
    pi.wait_for_event("agent_end");
    // `pi mcp login` in a shell (the agent's bash tool, say) while the session runs.
    let (code, out, err) = sign_in_from_the_shell(&workspace);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(server_when(&mut pi, |_| true)["state"], "needs-auth");
    pi.command("2", "prompt", json!({"message": "again"}));
    pi.wait_for_event("agent_end");
    let server = server_when(&mut pi, |s| s["state"] == "connected");
    assert_eq!(server["tools"], json!(["mcp__hosted__whoami"]), "{server}");
    pi.close_stdin();
    pi.wait_for_exit();
}

#[test]
fn a_server_asking_for_more_scope_gets_a_new_sign_in_with_the_wider_scope() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    write_config(&workspace, &fake);
    assert_eq!(sign_in_from_the_shell(&workspace).0, 0);
    // The server now wants `mcp.write` too: a 403 with `insufficient_scope`.
    fake.state.lock().unwrap().required_scope = Some("mcp.write".into());
    let provider = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&provider));
    assert_eq!(
        next_notify(&mut pi, "").0,
        "MCP servers need attention:\n  hosted: needs sign-in\nRun /mcp to fix."
    );
    pi.close_stdin();
    pi.wait_for_exit();
    // `pi mcp list` says so as pi 1.6.0 does.
    let out = pi_mcp(&workspace, &["list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "hosted: needs sign-in (direct, global)\n  {}/mcp\n  sign in with: pi mcp login hosted\n",
            fake.base()
        )
    );
    // No refresh (it would keep the old scope): a new authorization asking for both scopes.
    let (code, out, err) = sign_in_from_the_shell(&workspace);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "Signed in to MCP server \"hosted\".\n");
    let grants: Vec<Value> = fake
        .calls("/as/token")
        .iter()
        .map(|c| c["grant_type"].clone())
        .collect();
    assert_eq!(grants, ["authorization_code", "authorization_code"]);
    let requests = fake.calls("/as/authorize");
    assert_eq!(requests[0]["scope"], "mcp.read");
    assert_eq!(requests[1]["scope"], "mcp.read mcp.write");
    let (stored, _) = store(&workspace);
    let key = format!("mcp__hosted|{}/mcp", fake.base());
    assert_eq!(stored[&key]["tokens"]["scope"], "mcp.read mcp.write");
}

#[test]
fn mcp_login_without_a_name_asks_which_server_when_several_need_a_sign_in() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    let url = format!("{}/mcp", fake.base());
    write_mcp_json(
        &workspace,
        json!({"hosted": {"url": url}, "second": {"url": url}}),
    );
    let provider = FakeProvider::start(vec![]);
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&provider));
    assert_eq!(
        next_notify(&mut pi, "").0,
        "MCP servers need attention:\n  hosted: needs sign-in\n  second: needs sign-in\nRun /mcp to fix."
    );
    // pi's `ctx.ui.select("MCP server", names)`; the chosen server signs in.
    pi.send(json!({"id": "l", "type": "prompt", "message": "/mcp login"}));
    let deadline = pi.deadline();
    let select = pi
        .recv_until(|r| r["method"] == "select", deadline)
        .pop()
        .unwrap();
    assert_eq!(select["title"], "MCP server");
    assert_eq!(select["options"], json!(["hosted", "second"]));
    assert!(!pi.records().iter().any(|r| r["id"] == "l"));
    pi.send(json!({"type": "extension_ui_response", "id": select["id"], "value": "second"}));
    let (_, dialog) = mcp_sign_in_dialog(&mut pi, "second");
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "cancelled": true}));
    assert_eq!(
        next_notify(&mut pi, ""),
        ("Sign-in cancelled.".into(), "info".into())
    );
    handled(&mut pi, "l");
    // A dismissed choice ends the command without a word, as pi.
    pi.send(json!({"id": "r", "type": "prompt", "message": "/mcp reconnect"}));
    let deadline = pi.deadline();
    let select = pi
        .recv_until(|r| r["method"] == "select", deadline)
        .pop()
        .unwrap();
    assert_eq!(select["options"], json!(["hosted", "second"]));
    pi.send(json!({"type": "extension_ui_response", "id": select["id"], "cancelled": true}));
    handled(&mut pi, "r");
    let after = pi
        .records()
        .iter()
        .position(|r| r["id"] == select["id"])
        .unwrap();
    assert!(
        !pi.records()[after..]
            .iter()
            .any(|r| r["method"] == "notify"),
        "{:?}",
        &pi.records()[after..]
    );
    pi.close_stdin();
    pi.wait_for_exit();
}

/// A browser launcher named `xdg-open` (what pi 1.6.0 runs on Linux) that records its working
/// directory and arguments in `opened.txt`; returns the PATH that finds it first.
fn recording_launcher(workspace: &Workspace) -> (String, std::path::PathBuf) {
    let bin = workspace.root().join("launcher-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let record = workspace.root().join("opened.txt");
    let script = bin.join("xdg-open");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s %s\\n' \"$(pwd)\" \"$*\" >> '{}'\n",
            record.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (path, record)
}

#[test]
fn sign_in_opens_the_browser_as_pi_does_over_rpc_and_from_the_shell() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    write_config(&workspace, &fake);
    let (path, record) = recording_launcher(&workspace);
    let provider = FakeProvider::start(vec![]);
    let setup = Setup::anthropic(&provider).env("PATH", &path);
    let mut pi = Pi::spawn_in(&workspace, &setup);
    next_notify(&mut pi, "");
    pi.send(json!({"id": "l", "type": "prompt", "message": "/mcp login hosted"}));
    let (url, dialog) = mcp_sign_in_dialog(&mut pi, "hosted");
    // `xdg-open <url>` from `/`, as pi's openBrowser; the URL is shown as well.
    let opened = wait_for_file(&record, pi.timeout(), |t| t.ends_with('\n'));
    assert_eq!(opened, format!("/ {url}\n"));
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "cancelled": true}));
    handled(&mut pi, "l");
    pi.close_stdin();
    pi.wait_for_exit();

    // `pi mcp login` opens it too.
    std::fs::remove_file(&record).unwrap();
    let mut login = pi_mcp(&workspace, &["login", "hosted", "--timeout", "30"]);
    let mut child = login
        .env("PATH", &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut lines = String::new();
    stdout.read_line(&mut lines).unwrap();
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let opened = wait_for_file(&record, Duration::from_secs(30), |t| t.ends_with('\n'));
    assert_eq!(opened, format!("/ {}\n", url.trim()));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_server_an_extension_registers_signs_in_like_a_configured_one() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let provider = FakeProvider::start(vec![]);
    let setup = crate::extensions::with_extensions(Setup::anthropic(&provider), &["v2.py"]);
    let mut pi = Pi::spawn(&setup);
    let register = json!({"type": "register_mcp_server", "id": "r", "name": "hosted",
        "config": {"url": format!("{}/mcp", fake.base())}});
    let answer = crate::extensions_v2::ask(&mut pi, &[register], "r");
    assert_eq!(answer["result"], Value::Null, "{answer}");
    let server = server_when(&mut pi, |s| s["state"] == "needs-auth");
    assert_eq!(server["state"], "needs-auth", "{server}");
    // Its own notice once it settled, as pi reports servers it connects later.
    let attention = "MCP servers need attention:\n  hosted: needs sign-in\nRun /mcp to fix.";
    assert!(
        pi.records().iter().any(|r| r["message"] == attention),
        "{:?}",
        pi.records()
    );
    assert_eq!(server["scope"], "extension");
    pi.send(json!({"id": "l", "type": "prompt", "message": "/mcp login hosted"}));
    let (url, dialog) = mcp_sign_in_dialog(&mut pi, "hosted");
    pi.send(json!({"type": "extension_ui_response", "id": dialog["id"], "value": authorize(&url)}));
    let server = server_when(&mut pi, |s| s["state"] == "connected");
    assert_eq!(server["tools"], json!(["mcp__hosted__whoami"]), "{server}");
    handled(&mut pi, "l");
    pi.close_stdin();
    pi.wait_for_exit();
}

/// `oauth.callbackPort` is the loopback redirect's port (pi 1.6.0); the tokens a session uses
/// reach neither its session file nor the logs (stderr, `mcp.log`): only `mcp-auth.json` holds
/// them.
#[test]
fn the_configured_callback_port_is_used_and_tokens_stay_out_of_session_files_and_logs() {
    if is_reference() {
        return;
    }
    let fake = FakeOAuth::start();
    let workspace = Workspace::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    write_mcp_json(
        &workspace,
        json!({"hosted": {"url": format!("{}/mcp", fake.base()), "oauth": {"callbackPort": port}}}),
    );
    let (code, out, err) = sign_in_from_the_shell(&workspace);
    assert_eq!(code, 0, "{out}{err}");
    let redirect = format!("http://127.0.0.1:{port}/callback");
    assert_eq!(fake.calls("/as/authorize")[0]["redirect_uri"], redirect);
    assert_eq!(
        fake.calls("/as/register")[0]["redirect_uris"],
        json!([redirect])
    );
    let (stored, _) = store(&workspace);
    let key = format!("mcp__hosted|{}/mcp", fake.base());
    let tokens = &stored[&key]["tokens"];
    let secrets = [
        tokens["access_token"].as_str().unwrap().to_string(),
        tokens["refresh_token"].as_str().unwrap().to_string(),
    ];

    let provider = FakeProvider::start(vec![
        Reply::sse(
            AnthropicStream::new()
                .tool_use("c1", "mcp__hosted__whoami", &["{}"])
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&provider).with_sessions());
    pi.command("1", "prompt", json!({"message": "who"}));
    let end = pi.wait_for_event("tool_execution_end");
    assert_eq!(result_text(&end["result"]), "you are Bearer [redacted]");
    pi.wait_for_event("agent_end");
    pi.close_stdin();
    pi.wait_for_exit();
    let sessions = workspace.jsonl_files();
    assert!(!sessions.is_empty(), "no session file");
    let mut written: Vec<(String, String)> = sessions
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            (p.display().to_string(), text)
        })
        .collect();
    let log = workspace.agent_dir().join("mcp.log");
    written.push((
        "mcp.log".into(),
        std::fs::read_to_string(log).unwrap_or_default(),
    ));
    written.push(("stderr".into(), pi.stderr_text()));
    for (place, text) in &written {
        for secret in &secrets {
            assert!(!text.contains(secret.as_str()), "{secret} in {place}");
        }
    }
    // The session did keep the call's (redacted) result.
    assert!(written[0].1.contains("you are Bearer [redacted]"));
}
