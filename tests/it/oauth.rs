//! Subscription logins through the real binary, against faked authorization servers (the token
//! endpoints are pointed at 127.0.0.1 with `PI_OAUTH_*` variables, see README "Providers"):
//! an expired Anthropic login refreshed under pi's `auth.json.lock` and written back in pi's
//! format, a failed refresh, a Codex refresh, and `pi login github-copilot` (device code) /
//! `pi logout` end to end.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply};
use crate::sse;
use crate::support::{Pi, Setup, Workspace, codex_token, is_reference, scrub_env};

const ANTHROPIC_MODELS: &str = r#"{"providers": {"anthropic": {"baseUrl": "__BASE_URL__"}}}"#;

fn json_reply(body: Value) -> Reply {
    Reply::status(
        200,
        body.to_string(),
        &[("content-type", "application/json")],
    )
}

fn write_auth(workspace: &Workspace, auth: &Value) {
    std::fs::write(
        workspace.agent_dir().join("auth.json"),
        serde_json::to_string_pretty(auth).unwrap(),
    )
    .unwrap();
}

fn read_auth(workspace: &Workspace) -> Value {
    let text = std::fs::read_to_string(workspace.agent_dir().join("auth.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
}

#[test]
fn an_expired_anthropic_login_is_refreshed_under_pis_lock_and_written_back() {
    if is_reference() {
        return;
    }
    let new_access = "sk-ant-oat01-REFRESHED-ACCESS-abc123";
    let tokens = FakeProvider::start_auth_server(vec![json_reply(json!({
        "access_token": new_access, "refresh_token": "refresh-NEW-456", "expires_in": 3600
    }))]);
    // The model repeats the new token: it must reach stdout redacted.
    let provider = FakeProvider::start(vec![Reply::sse(sse::anthropic_text(&[
        "your token is ",
        new_access,
    ]))]);
    let workspace = Workspace::new();
    write_auth(
        &workspace,
        &json!({
            "openai": {"type": "api_key", "key": "sk-openai-kept"},
            "anthropic": {"type": "oauth", "refresh": "refresh-OLD-123",
                          "access": "sk-ant-oat01-OLD-expired", "expires": now_ms() - 1000.0}
        }),
    );
    // Another pi holds the lock for a moment: pi-rs must wait for it.
    let lock = workspace.agent_dir().join("auth.json.lock");
    std::fs::create_dir(&lock).unwrap();
    let released = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(600));
            std::fs::remove_dir(&lock).unwrap();
            Instant::now()
        })
    };
    let setup = Setup::new(&provider, "anthropic", "claude-sonnet-4-5")
        .models_json(ANTHROPIC_MODELS)
        .env(
            "PI_OAUTH_ANTHROPIC_TOKEN_URL",
            &format!("{}/v1/oauth/token", tokens.base_url()),
        );
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
    let run = pi.records_until_event("agent_end");
    let released_at = released.join().unwrap();

    let token_requests = tokens.requests();
    assert_eq!(token_requests.len(), 1);
    let refresh = &token_requests[0];
    assert!(
        refresh.received_at >= released_at,
        "refreshed while another process held auth.json.lock"
    );
    assert_eq!(refresh.path, "/v1/oauth/token");
    assert_eq!(
        refresh.body,
        json!({"grant_type": "refresh_token", "client_id": "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
               "refresh_token": "refresh-OLD-123"})
    );
    let sent = provider.requests();
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {new_access}").as_str())
    );

    // auth.json: the other entry kept, the login in pi's shape and key order, lock released.
    let text = std::fs::read_to_string(workspace.agent_dir().join("auth.json")).unwrap();
    let auth: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        auth["openai"],
        json!({"type": "api_key", "key": "sk-openai-kept"})
    );
    assert_eq!(
        entry_keys(&auth, "anthropic"),
        ["type", "refresh", "access", "expires"]
    );
    let entry = &auth["anthropic"];
    assert_eq!(entry["access"], new_access);
    assert_eq!(entry["refresh"], "refresh-NEW-456");
    let expires = entry["expires"].as_f64().unwrap();
    let expected = now_ms() + 3600.0 * 1000.0 - 5.0 * 60_000.0;
    assert!((expires - expected).abs() < 60_000.0, "expires {expires}");
    assert!(
        text.starts_with("{\n  \"openai\": {\n    \"type\""),
        "{text}"
    );
    assert!(!lock.exists());

    let stdout: String = run.iter().map(|r| r.to_string()).collect();
    assert!(!stdout.contains(new_access), "refreshed token on stdout");
    assert!(stdout.contains("[redacted]"));
}

/// pi 1.6.0 refreshes a login with less than five minutes left before using it (its
/// `DEFAULT_OAUTH_MINIMUM_VALIDITY_MS`), and uses one with more as it is.
#[test]
fn a_login_with_less_than_five_minutes_left_is_refreshed_before_the_request() {
    if is_reference() {
        return;
    }
    let new_access = "sk-ant-oat01-REFRESHED-EARLY-def456";
    let tokens = FakeProvider::start_auth_server(vec![json_reply(json!({
        "access_token": new_access, "refresh_token": "refresh-NEW-789", "expires_in": 3600
    }))]);
    let provider = FakeProvider::start(vec![
        Reply::sse(sse::anthropic_text(&["Refreshed."])),
        Reply::sse(sse::anthropic_text(&["Kept."])),
    ]);
    let workspace = Workspace::new();
    write_auth(
        &workspace,
        &json!({"anthropic": {"type": "oauth", "refresh": "refresh-OLD-789",
                              "access": "sk-ant-oat01-FOUR-MINUTES-left",
                              "expires": now_ms() + 4.0 * 60_000.0}}),
    );
    let setup = Setup::new(&provider, "anthropic", "claude-sonnet-4-5")
        .models_json(ANTHROPIC_MODELS)
        .env(
            "PI_OAUTH_ANTHROPIC_TOKEN_URL",
            &format!("{}/v1/oauth/token", tokens.base_url()),
        );
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.command("p", "prompt", json!({"message": "hi"}));
    pi.wait_for_event("agent_end");
    assert_eq!(tokens.requests().len(), 1);
    let sent = provider.wait_for_requests(1, pi.timeout());
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {new_access}").as_str())
    );
    // The new login has 55 minutes left: the next request uses it without a refresh.
    pi.command("p2", "prompt", json!({"message": "again"}));
    pi.wait_for_event("agent_end");
    let sent = provider.wait_for_requests(2, pi.timeout());
    assert_eq!(
        sent[1].header("authorization"),
        Some(format!("Bearer {new_access}").as_str())
    );
    assert_eq!(tokens.requests().len(), 1);
}

#[test]
fn a_failed_refresh_is_one_clear_error_saying_how_to_log_in() {
    if is_reference() {
        return;
    }
    let tokens = FakeProvider::start_auth_server(vec![Reply::status(
        400,
        r#"{"error":"invalid_grant"}"#,
        &[("content-type", "application/json")],
    )]);
    let provider = FakeProvider::start(vec![]);
    let workspace = Workspace::new();
    let auth = json!({"anthropic": {"type": "oauth", "refresh": "refresh-revoked",
        "access": "sk-ant-oat01-old", "expires": 1000}});
    write_auth(&workspace, &auth);
    let setup = Setup::new(&provider, "anthropic", "claude-sonnet-4-5")
        .models_json(ANTHROPIC_MODELS)
        .env(
            "PI_OAUTH_ANTHROPIC_TOKEN_URL",
            &format!("{}/token", tokens.base_url()),
        );
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let response = pi.request(json!({"id": "p", "type": "prompt", "message": "hi"}));
    assert_eq!(response["success"], false, "{response}");
    let error = response["error"].as_str().unwrap();
    assert!(error.contains("anthropic login has expired"), "{error}");
    assert!(error.contains("pi login anthropic"), "{error}");
    assert!(error.contains("HTTP 400"), "{error}");
    assert_eq!(tokens.requests().len(), 1);
    assert!(provider.requests().is_empty());
    assert_eq!(read_auth(&workspace), auth, "auth.json unchanged");
}

#[test]
fn an_expired_codex_login_is_refreshed_and_the_backend_gets_the_account() {
    if is_reference() {
        return;
    }
    let access = codex_token("acct_new");
    let tokens = FakeProvider::start_auth_server(vec![json_reply(json!({
        "access_token": access, "refresh_token": "codex-refresh-2", "expires_in": 864000
    }))]);
    let provider = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
    let workspace = Workspace::new();
    write_auth(
        &workspace,
        &json!({"openai-codex": {"type": "oauth", "access": codex_token("acct_old"),
            "refresh": "codex-refresh-1", "expires": now_ms() + 10_000.0, "accountId": "acct_old"}}),
    );
    let setup = Setup::new(&provider, "openai-codex", "gpt-5.2")
        .models_json(r#"{"providers": {"openai-codex": {"baseUrl": "__BASE_URL__/backend-api"}}}"#)
        .env(
            "PI_OAUTH_OPENAI_CODEX_TOKEN_URL",
            &format!("{}/oauth/token", tokens.base_url()),
        );
    let reply = prompt_reply(&workspace, &setup);
    assert_eq!(reply["api"], "openai-codex-responses");

    // Nearly expired (10 s left): refreshed with a form post.
    let refresh = &tokens.requests()[0];
    assert_eq!(
        String::from_utf8_lossy(&refresh.raw_body),
        "grant_type=refresh_token&refresh_token=codex-refresh-1&client_id=app_EMoamEEZ73f0CkXaXp7hrann"
    );
    let sent = &provider.requests()[0];
    assert_eq!(sent.path, "/backend-api/codex/responses");
    assert_eq!(sent.header("chatgpt-account-id"), Some("acct_new"));
    assert_eq!(sent.header("originator"), Some("pi"));
    let auth = read_auth(&workspace);
    assert_eq!(
        entry_keys(&auth, "openai-codex"),
        ["type", "access", "refresh", "expires", "accountId"]
    );
    assert_eq!(auth["openai-codex"]["accountId"], "acct_new");
}

/// Runs `pi <args>` with the test's environment (no protocol); (exit code, stderr).
fn run_cli(agent_dir: &Path, args: &[&str], env: &[(&str, String)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pi"));
    command.args(args);
    scrub_env(&mut command);
    command
        .env("PI_CODING_AGENT_DIR", agent_dir)
        .env("HOME", agent_dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn pi login");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut text);
        text
    });
    // Bounded: a login that hangs is killed.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.join().unwrap()).into_owned(),
        String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
    )
}

#[test]
fn pi_login_github_copilot_runs_the_device_flow_end_to_end() {
    if is_reference() {
        return;
    }
    let expires_at = (now_ms() / 1000.0).floor() + 1800.0;
    let github = FakeProvider::start_auth_server(vec![
        json_reply(json!({"device_code": "dev-123", "user_code": "ABCD-1234",
            "verification_uri": "https://github.com/login/device", "interval": 0, "expires_in": 60})),
        json_reply(json!({"error": "authorization_pending"})),
        json_reply(json!({"access_token": "gho_githubtoken123", "token_type": "bearer"})),
        json_reply(
            json!({"token": "tid=abc;exp=1;proxy-ep=proxy.individual.githubcopilot.com",
            "expires_at": expires_at}),
        ),
    ]);
    let workspace = Workspace::new();
    let env = [
        ("PI_OAUTH_GITHUB_URL", github.base_url()),
        ("PI_OAUTH_GITHUB_API_URL", github.base_url()),
    ];
    let stderr = login_ok(&workspace, &["login", "github-copilot"], &env);
    assert!(
        stderr.contains("Open https://github.com/login/device and enter code: ABCD-1234"),
        "{stderr}"
    );

    let requests = github.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/login/device/code",
            "/login/oauth/access_token",
            "/login/oauth/access_token",
            "/copilot_internal/v2/token"
        ]
    );
    assert_eq!(
        String::from_utf8_lossy(&requests[0].raw_body),
        "client_id=Iv1.b507a08c87ecfe98&scope=read%3Auser"
    );
    assert_eq!(
        String::from_utf8_lossy(&requests[1].raw_body),
        "client_id=Iv1.b507a08c87ecfe98&device_code=dev-123&grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code"
    );
    assert_eq!(
        requests[3].header("authorization"),
        Some("Bearer gho_githubtoken123")
    );
    assert_eq!(requests[3].header("editor-version"), Some("vscode/1.107.0"));

    let auth = read_auth(&workspace);
    assert_eq!(
        auth["github-copilot"],
        json!({"type": "oauth", "refresh": "gho_githubtoken123",
            "access": "tid=abc;exp=1;proxy-ep=proxy.individual.githubcopilot.com",
            "expires": expires_at * 1000.0 - 300_000.0})
    );

    let (code, stdout, stderr) =
        run_cli(&workspace.agent_dir(), &["logout", "github-copilot"], &[]);
    assert_eq!(stdout, "");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read_auth(&workspace), json!({}));
    let (code, stdout, stderr) = run_cli(&workspace.agent_dir(), &["login", "groq"], &[]);
    assert_eq!(stdout, "");
    assert_eq!(code, 1);
    assert!(
        stderr.contains("no subscription login for groq"),
        "{stderr}"
    );
}

/// The value of `name` in a URL's query (percent-decoding is not needed for these values).
fn query_param(url: &str, name: &str) -> Option<String> {
    url.split_once('?')?.1.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

#[test]
fn pi_login_anthropic_takes_a_pasted_code_and_checks_pkce() {
    if is_reference() {
        return;
    }
    use std::io::{BufRead, BufReader, Write};
    let tokens = FakeProvider::start_auth_server(vec![json_reply(json!({
        "access_token": "sk-ant-oat01-LOGGED-IN", "refresh_token": "refresh-first", "expires_in": 28800
    }))]);
    let workspace = Workspace::new();
    let mut command = Command::new(env!("CARGO_BIN_EXE_pi"));
    command.args(["login", "anthropic"]);
    scrub_env(&mut command);
    let mut child = command
        .env("PI_CODING_AGENT_DIR", workspace.agent_dir())
        .env("HOME", workspace.root())
        .env(
            "PI_OAUTH_ANTHROPIC_TOKEN_URL",
            format!("{}/v1/oauth/token", tokens.base_url()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut url = None;
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap_or(0) > 0 {
        if line.starts_with("https://claude.ai/oauth/authorize?") {
            url = Some(line.trim().to_string());
            break;
        }
        line.clear();
    }
    let url = url.expect("the authorization URL on stderr");
    let verifier = query_param(&url, "state").unwrap();
    let challenge = query_param(&url, "code_challenge").unwrap();
    use base64::Engine;
    let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
    assert_eq!(
        challenge,
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
    );
    assert_eq!(
        query_param(&url, "redirect_uri").as_deref(),
        Some("http%3A%2F%2Flocalhost%3A53692%2Fcallback")
    );
    // What claude.ai shows after the login: `<code>#<state>`.
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "auth-code-42#{verifier}").unwrap();
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("pi login anthropic did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    let exchange = &tokens.requests()[0];
    assert_eq!(
        exchange.body,
        json!({"grant_type": "authorization_code", "client_id": "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
               "code": "auth-code-42", "state": verifier,
               "redirect_uri": "http://localhost:53692/callback", "code_verifier": verifier})
    );
    let auth = read_auth(&workspace);
    assert_eq!(auth["anthropic"]["access"], "sk-ant-oat01-LOGGED-IN");
    assert_eq!(auth["anthropic"]["refresh"], "refresh-first");
}

/// `pi login xai` (1.6.0's device code at xAI: a pending poll, then tokens), the login stored as
/// 1.6.0 stores it, then a prompt after it expired: refreshed under the lock with xAI's refresh
/// grant, the new access token is the bearer of the xAI request, and auth.json gets the new one.
#[test]
fn pi_login_xai_runs_the_device_flow_and_the_expired_login_is_refreshed() {
    if is_reference() {
        return;
    }
    let auth_server = FakeProvider::start_auth_server(vec![
        json_reply(json!({"device_code": "xdev-1", "user_code": "GROK-42",
            "verification_uri": "https://accounts.x.ai/device",
            "verification_uri_complete": "https://accounts.x.ai/device?code=GROK-42",
            "interval": 1, "expires_in": 60})),
        Reply::status(
            400,
            json!({"error": "authorization_pending"}).to_string(),
            &[("content-type", "application/json")],
        ),
        json_reply(
            json!({"access_token": "xai-access-1", "refresh_token": "xai-refresh-1",
            "expires_in": 3600}),
        ),
        // The refresh (xAI may keep the refresh token: it is omitted here).
        json_reply(json!({"access_token": "xai-access-2", "expires_in": 3600})),
    ]);
    let workspace = Workspace::new();
    let env = [("PI_OAUTH_XAI_URL", auth_server.base_url())];
    let stderr = login_ok(&workspace, &["login", "xai"], &env);
    assert!(
        stderr.contains("Open https://accounts.x.ai/device?code=GROK-42 and enter code: GROK-42"),
        "{stderr}"
    );
    let poll = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&client_id=b1a00492-073a-47ea-816f-4c329264a828&device_code=xdev-1";
    assert_device_flow(
        &auth_server,
        (
            "/oauth2/device/code",
            "client_id=b1a00492-073a-47ea-816f-4c329264a828&scope=openid+profile+email+offline_access+grok-cli%3Aaccess+api%3Aaccess&referrer=pi",
        ),
        ("/oauth2/token", poll),
    );
    let auth = read_auth(&workspace);
    assert_eq!(
        entry_keys(&auth, "xai"),
        ["type", "access", "refresh", "expires"]
    );
    let entry = &auth["xai"];
    assert_eq!(
        (entry["type"].as_str(), entry["access"].as_str()),
        (Some("oauth"), Some("xai-access-1"))
    );
    assert_expires_in(entry, 3_300_000.0, 60_000.0);

    // Expired: the next prompt refreshes it first.
    let request = prompt_after_expiry(
        &workspace,
        "xai",
        "grok-4.7",
        "openai-responses/text.sse",
        "/v1",
        &env,
    );
    let refresh = &auth_server.requests()[3];
    assert_eq!(
        String::from_utf8_lossy(&refresh.raw_body),
        "grant_type=refresh_token&client_id=b1a00492-073a-47ea-816f-4c329264a828&refresh_token=xai-refresh-1"
    );
    assert_eq!(request.header("authorization"), Some("Bearer xai-access-2"));
    let auth = read_auth(&workspace);
    assert_eq!(auth["xai"]["access"], "xai-access-2");
    assert_eq!(
        auth["xai"]["refresh"], "xai-refresh-1",
        "kept when not rotated"
    );
}

/// A Sign in with ChatGPT login on `openai` (made by pi 1.6.0) is used rather than refused, even
/// with OPENAI_API_KEY set: expired, it is refreshed with the client id it was issued, and the
/// new access token is the bearer sent to the OpenAI API; auth.json keeps 1.6.0's fields.
#[test]
fn a_chatgpt_login_on_openai_is_refreshed_and_used() {
    if is_reference() {
        return;
    }
    let tokens = FakeProvider::start_auth_server(vec![json_reply(json!({
        "access_token": "chatgpt-access-2", "refresh_token": "chatgpt-refresh-2",
        "expires_in": 3600, "scope": "openid offline_access chatgpt.tokens.use.direct",
        "token_type": "Bearer"
    }))]);
    let provider = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
    let workspace = Workspace::new();
    write_auth(
        &workspace,
        &json!({"openai": {"type": "oauth", "access": "chatgpt-access-1",
            "refresh": "chatgpt-refresh-1", "expires": now_ms() - 1000.0,
            "clientId": "issued-client-7", "scopes": ["openid", "chatgpt.tokens.use.direct"]}}),
    );
    let setup = Setup::new(&provider, "openai", "gpt-6.2-sol")
        .models_json(r#"{"providers": {"openai": {"baseUrl": "__BASE_URL__/v1"}}}"#)
        .env("OPENAI_API_KEY", "sk-env-key-not-used")
        .env(
            "PI_OAUTH_OPENAI_TOKEN_URL",
            &format!("{}/api/accounts/oauth/token", tokens.base_url()),
        );
    prompt_reply(&workspace, &setup);
    let refresh = &tokens.requests()[0];
    assert_eq!(refresh.path, "/api/accounts/oauth/token");
    assert_eq!(
        String::from_utf8_lossy(&refresh.raw_body),
        "grant_type=refresh_token&client_id=issued-client-7&refresh_token=chatgpt-refresh-1&resource=https%3A%2F%2Fapi.openai.com%2Fv1"
    );
    assert_eq!(
        provider.requests()[0].header("authorization"),
        Some("Bearer chatgpt-access-2")
    );
    let auth = read_auth(&workspace);
    assert_eq!(
        entry_keys(&auth, "openai"),
        ["type", "access", "refresh", "expires", "clientId", "scopes"]
    );
    assert_eq!(auth["openai"]["clientId"], "issued-client-7");
    assert_eq!(
        auth["openai"]["scopes"],
        json!(["openid", "offline_access", "chatgpt.tokens.use.direct"])
    );
}

/// A JSON answer with any status (OAuth errors are 4xx with a JSON body).
fn json_status(status: u16, body: Value) -> Reply {
    Reply::status(
        status,
        body.to_string(),
        &[("content-type", "application/json")],
    )
}

/// The (path, form body) of each request an authorization server received.
fn paths_and_bodies(server: &FakeProvider) -> Vec<(String, String)> {
    server
        .requests()
        .iter()
        .map(|r| {
            (
                r.path.clone(),
                String::from_utf8_lossy(&r.raw_body).into_owned(),
            )
        })
        .collect()
}

/// A device-code sign-in's requests: the device request (path, form body), then two polls
/// (path, form body): one answered "authorization_pending", one with the tokens.
#[track_caller]
fn assert_device_flow(server: &FakeProvider, device: (&str, &str), poll: (&str, &str)) {
    let expected: Vec<(String, String)> = [device, poll, poll]
        .iter()
        .map(|(path, body)| (path.to_string(), body.to_string()))
        .collect();
    assert_eq!(paths_and_bodies(server), expected);
}

/// An auth.json entry's `expires` is `in_ms` from now, give or take `tolerance_ms`.
#[track_caller]
fn assert_expires_in(entry: &Value, in_ms: f64, tolerance_ms: f64) {
    let expires = entry["expires"].as_f64().unwrap();
    assert!(
        (expires - (now_ms() + in_ms)).abs() < tolerance_ms,
        "{expires}"
    );
}

/// The provider's request carried `token` as its bearer.
#[track_caller]
fn assert_bearer(request: &crate::fake_provider::RecordedRequest, token: &str) {
    let bearer = format!("Bearer {token}");
    assert_eq!(request.header("authorization"), Some(bearer.as_str()));
}

/// One prompt with `provider`'s login in `workspace` (its auth server at `env`); the request the
/// fake provider got.
fn prompt_with_login(
    workspace: &Workspace,
    provider: &FakeProvider,
    setup: Setup,
) -> crate::fake_provider::RecordedRequest {
    prompt_reply(workspace, &setup);
    provider.requests()[0].clone()
}

/// The last assistant message of one prompt ("hi") in a process started for `setup` in
/// `workspace`; it must have stopped normally.
#[track_caller]
fn prompt_reply(workspace: &Workspace, setup: &Setup) -> Value {
    let mut pi = Pi::spawn_in(workspace, setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
    let run = pi.records_until_event("agent_end");
    let reply = run
        .iter()
        .rev()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .unwrap();
    assert_eq!(reply["message"]["stopReason"], "stop", "{reply}");
    reply["message"].clone()
}

/// `pi <args>` (a login) with `env`, which must succeed; its stderr.
fn login_ok(workspace: &Workspace, args: &[&str], env: &[(&str, String)]) -> String {
    let (code, stdout, stderr) = run_cli(&workspace.agent_dir(), args, env);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "", "login wrote to stdout");
    stderr
}

/// The keys of `provider`'s auth.json entry, in their order.
fn entry_keys(auth: &Value, provider: &str) -> Vec<String> {
    auth[provider]
        .as_object()
        .unwrap_or_else(|| panic!("no {provider} entry: {auth}"))
        .keys()
        .cloned()
        .collect()
}

/// `provider`'s login in `workspace` made expired, then one prompt to `model` answered by
/// `fixture` from a fake provider at `<fake>{base_path}`, with `env` (where the login's
/// authorization server is); the request the fake provider got, after the refresh.
fn prompt_after_expiry(
    workspace: &Workspace,
    provider: &str,
    model: &str,
    fixture: &str,
    base_path: &str,
    env: &[(&str, String)],
) -> crate::fake_provider::RecordedRequest {
    let mut auth = read_auth(workspace);
    auth[provider]["expires"] = json!(now_ms() - 1000.0);
    write_auth(workspace, &auth);
    let fake = FakeProvider::start(vec![Reply::sse_fixture(fixture)]);
    let models = json!({"providers": {provider: {"baseUrl": format!("__BASE_URL__{base_path}")}}});
    let mut setup = Setup::new(&fake, provider, model).models_json(&models.to_string());
    for (name, value) in env {
        setup = setup.env(name, value);
    }
    prompt_with_login(workspace, &fake, setup)
}

/// `pi login kimi-coding` (1.6.0's device code at auth.kimi.com, pointed here with pi's own
/// `KIMI_CODE_OAUTH_HOST`): a pending poll, then tokens stored as 1.6.0 stores them; expired, the
/// login is refreshed (after one 503, retried as 1.6.0 retries) and its token is the bearer.
#[test]
fn pi_login_kimi_coding_runs_the_device_flow_and_the_refresh_is_retried() {
    if is_reference() {
        return;
    }
    let auth_server = FakeProvider::start_auth_server(vec![
        json_reply(json!({"device_code": "kdev-1", "user_code": "KIMI-7",
            "verification_uri": "https://www.kimi.com/device",
            "verification_uri_complete": "https://www.kimi.com/device?code=KIMI-7",
            "interval": 1, "expires_in": 60})),
        json_status(400, json!({"error": "authorization_pending"})),
        json_reply(
            json!({"access_token": "kimi-access-1", "refresh_token": "kimi-refresh-1",
            "expires_in": 900}),
        ),
        json_status(503, json!({"error": "unavailable"})),
        json_reply(
            json!({"access_token": "kimi-access-2", "refresh_token": "kimi-refresh-2",
            "expires_in": 900}),
        ),
    ]);
    let workspace = Workspace::new();
    let env = [("KIMI_CODE_OAUTH_HOST", auth_server.base_url())];
    let stderr = login_ok(&workspace, &["login", "kimi-coding"], &env);
    assert!(
        stderr.contains("Open https://www.kimi.com/device?code=KIMI-7 and enter code: KIMI-7"),
        "{stderr}"
    );
    let poll = "client_id=17e5f671-d194-4dfb-9706-5516cb48c098&device_code=kdev-1&grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code";
    assert_device_flow(
        &auth_server,
        (
            "/api/oauth/device_authorization",
            "client_id=17e5f671-d194-4dfb-9706-5516cb48c098",
        ),
        ("/api/oauth/token", poll),
    );
    let auth = read_auth(&workspace);
    assert_eq!(
        entry_keys(&auth, "kimi-coding"),
        ["type", "access", "refresh", "expires"]
    );
    assert_eq!(auth["kimi-coding"]["access"], "kimi-access-1");
    assert_expires_in(&auth["kimi-coding"], 900_000.0, 60_000.0);

    let request = prompt_after_expiry(
        &workspace,
        "kimi-coding",
        "kimi-for-coding",
        "openai/text.sse",
        "/v1",
        &env,
    );
    assert_bearer(&request, "kimi-access-2");
    let refreshes: Vec<String> = paths_and_bodies(&auth_server)[3..]
        .iter()
        .map(|(_, body)| body.clone())
        .collect();
    let grant = "client_id=17e5f671-d194-4dfb-9706-5516cb48c098&grant_type=refresh_token&refresh_token=kimi-refresh-1";
    assert_eq!(refreshes, [grant, grant], "one 503, retried");
    let auth = read_auth(&workspace);
    assert_eq!(auth["kimi-coding"]["refresh"], "kimi-refresh-2");
}

/// `pi login meta` (1.6.0's device code at auth.meta.com, then a Model API key minted with the
/// identity token): stored as `{type, refresh: identity, access: key, expires}`; when the key
/// expires, a new one is minted with the identity token and sent as the bearer.
#[test]
fn pi_login_meta_mints_a_key_and_mints_again_when_it_expires() {
    if is_reference() {
        return;
    }
    let auth_server = FakeProvider::start_auth_server(vec![
        json_reply(json!({"device_code": "mdev-1", "user_code": "META-9",
            "verification_uri": "https://auth.meta.com/device", "interval": 1,
            "expires_in": 60})),
        json_status(400, json!({"error": "authorization_pending"})),
        json_reply(json!({"access_token": "meta-identity-1", "token_type": "Bearer"})),
    ]);
    let mint = FakeProvider::start_auth_server(vec![
        json_reply(json!({"api_key": "meta-key-first"})),
        json_reply(json!({"api_key": "meta-key-second"})),
    ]);
    let workspace = Workspace::new();
    let env = [
        ("PI_OAUTH_META_URL", auth_server.base_url()),
        ("PI_OAUTH_META_API_URL", mint.base_url()),
    ];
    let stderr = login_ok(&workspace, &["login", "meta"], &env);
    assert!(
        stderr.contains("Open https://auth.meta.com/device and enter code: META-9"),
        "{stderr}"
    );
    let poll = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&device_code=mdev-1&client_id=1031625952748946";
    assert_device_flow(
        &auth_server,
        ("/oidc/device/authorization/", "client_id=1031625952748946"),
        ("/oidc/device/token/", poll),
    );
    let minted = &mint.requests()[0];
    assert_eq!(minted.path, "/muse-code/key");
    assert_eq!(
        minted.header("authorization"),
        Some("Bearer meta-identity-1")
    );
    assert_eq!(minted.header("x-api-version"), Some("1.0.0"));
    assert_eq!(String::from_utf8_lossy(&minted.raw_body), "{}");
    let auth = read_auth(&workspace);
    assert_eq!(
        entry_keys(&auth, "meta"),
        ["type", "refresh", "access", "expires"]
    );
    assert_eq!(
        (&auth["meta"]["refresh"], &auth["meta"]["access"]),
        (&json!("meta-identity-1"), &json!("meta-key-first"))
    );

    let request = prompt_after_expiry(
        &workspace,
        "meta",
        "muse-spark-1.3",
        "openai-responses/text.sse",
        "/v1",
        &[("PI_OAUTH_META_API_URL", mint.base_url())],
    );
    assert_bearer(&request, "meta-key-second");
    assert_eq!(
        mint.requests()[1].header("authorization"),
        Some("Bearer meta-identity-1")
    );
    assert_eq!(read_auth(&workspace)["meta"]["access"], "meta-key-second");
}

/// `pi login radius --no-browser` (1.6.0's "Sign in with device code" at the gateway's `/v1/oauth/device`,
/// polled at once): stored with its `scope` and a minute-early expiry; then, as 1.6.0's `pi auth
/// login`, the account's catalog is fetched from `/v1/config` with the new token into
/// models-store.json (the models 1.6.0 keeps, given `pi-messages`, the provider and the config's
/// `baseUrl`; the list Radius then has) and the Radius MCP server is added to the user's mcp.json
/// with the login as its auth; expired, refreshed at `/v1/oauth/token` and sent as the bearer of
/// the pi-messages request.
#[test]
fn pi_login_radius_runs_the_device_flow_and_the_expired_login_is_refreshed() {
    if is_reference() {
        return;
    }
    let gateway = FakeProvider::start_auth_server(vec![
        json_reply(json!({"device_code": "rdev-1", "user_code": "RAD-1",
            "verification_uri": "https://radius.pi.dev/device", "interval": 1,
            "expires_in": 60})),
        json_status(400, json!({"error": "authorization_pending"})),
        json_reply(
            json!({"access_token": "radius-access-1", "refresh_token": "radius-refresh-1",
            "expires_in": 3600, "scope": "gateway offline_access"}),
        ),
        json_reply(json!({"baseUrl": "https://gw.example/v1", "models": [
            {"id": "balanced", "name": "Balanced", "reasoning": true, "input": ["text"],
             "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0},
             "contextWindow": 200000, "maxTokens": 32000, "lab": "acme"},
            {"id": "half", "name": "No limits"}]})),
        json_reply(
            json!({"access_token": "radius-access-2", "refresh_token": "radius-refresh-2",
            "expires_in": 3600, "scope": "gateway offline_access"}),
        ),
    ]);
    let workspace = Workspace::new();
    // A server of another name already in the namespace `radius` would take: `radius-mcp`.
    std::fs::write(
        workspace.agent_dir().join("mcp.json"),
        r#"{"mcpServers": {"radius": {"command": "radius-local"}}}"#,
    )
    .unwrap();
    let env = [("PI_OAUTH_RADIUS_URL", gateway.base_url())];
    // 1.6.0's lines and words, on stdout as `pi auth login radius` writes them.
    let (code, stdout, stderr) = run_cli(
        &workspace.agent_dir(),
        &["login", "radius", "--no-browser"],
        &env,
    );
    assert_eq!((code, stderr.as_str()), (0, ""), "{stdout}");
    let mcp_path = workspace.agent_dir().join("mcp.json");
    assert_eq!(
        stdout,
        format!(
            "Sign in to Radius: Sign in with device code (when signing in from another device)\n\
             Open https://radius.pi.dev/device and enter code: RAD-1\n\
             Waiting for authentication...\n\
             Logged in to Radius. Credentials saved to {}\n\
             Added MCP server \"radius-mcp\" in {} to use the Radius login.\n",
            workspace.agent_dir().join("auth.json").display(),
            mcp_path.display()
        )
    );
    let poll = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&client_id=pi-gateway&device_code=rdev-1";
    assert_eq!(
        paths_and_bodies(&gateway),
        [
            (
                "/v1/oauth/device".to_string(),
                "client_id=pi-gateway&scope=gateway+offline_access".to_string()
            ),
            ("/v1/oauth/token".to_string(), poll.to_string()),
            ("/v1/oauth/token".to_string(), poll.to_string()),
            ("/v1/config".to_string(), String::new()),
        ]
    );
    let config = &gateway.requests()[3];
    assert_eq!(config.method, "GET");
    assert_eq!(
        config.header("authorization"),
        Some("Bearer radius-access-1")
    );
    assert_eq!(config.header("accept"), Some("application/json"));
    let store: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace.agent_dir().join("models-store.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        store["radius"]["models"],
        json!([{"id": "balanced", "name": "Balanced", "reasoning": true, "input": ["text"],
            "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0},
            "contextWindow": 200000, "maxTokens": 32000, "lab": "acme",
            "api": "pi-messages", "provider": "radius", "baseUrl": "https://gw.example/v1"}])
    );
    assert!(store["radius"]["checkedAt"].as_f64().unwrap() > 0.0);
    let mcp: Value = serde_json::from_str(&std::fs::read_to_string(&mcp_path).unwrap()).unwrap();
    assert_eq!(
        mcp["mcpServers"],
        json!({"radius": {"command": "radius-local"},
            "radius-mcp": {"url": "https://radius.pi.dev/mcp", "auth": {"provider": "radius"}}})
    );
    let auth = read_auth(&workspace);
    assert_eq!(
        entry_keys(&auth, "radius"),
        ["type", "access", "refresh", "expires", "scope"]
    );
    assert_expires_in(&auth["radius"], 3_540_000.0, 30_000.0);

    let request = prompt_after_expiry(
        &workspace,
        "radius",
        "balanced",
        "pi-messages/text.sse",
        "/v1",
        &env,
    );
    assert_bearer(&request, "radius-access-2");
    assert_eq!(
        paths_and_bodies(&gateway)[4].1,
        "grant_type=refresh_token&client_id=pi-gateway&refresh_token=radius-refresh-1"
    );
    assert_eq!(
        read_auth(&workspace)["radius"]["refresh"],
        "radius-refresh-2"
    );
}

/// A browser sign-in through `pi login <provider>` (stdin closed: only the callback can finish
/// it): the stderr lines up to the one starting with `marker`, the child still running.
fn start_browser_login(
    workspace: &Workspace,
    provider: &str,
    env: &[(&str, String)],
    marker: &str,
) -> (std::process::Child, Vec<String>) {
    use std::io::{BufRead, BufReader};
    let mut command = Command::new(env!("CARGO_BIN_EXE_pi"));
    command.args(["login", provider]);
    scrub_env(&mut command);
    let mut child = command
        .env("PI_CODING_AGENT_DIR", workspace.agent_dir())
        .env("HOME", workspace.root())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Radius writes its lines on stdout as 1.6.0 does; the other logins on stderr.
    let (shown, other): (Box<dyn std::io::Read + Send>, Box<dyn std::io::Read + Send>) =
        if provider == "radius" {
            (
                Box::new(child.stdout.take().unwrap()),
                Box::new(child.stderr.take().unwrap()),
            )
        } else {
            (
                Box::new(child.stderr.take().unwrap()),
                Box::new(child.stdout.take().unwrap()),
            )
        };
    let mut other = other;
    std::thread::spawn(move || std::io::copy(&mut other, &mut std::io::sink()));
    let mut stderr = BufReader::new(shown);
    let mut lines = Vec::new();
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap_or(0) > 0 {
        lines.push(line.trim().to_string());
        line.clear();
        if lines.last().unwrap().starts_with(marker) {
            // The rest of stderr drains on its own, so the child never blocks on it.
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            return (child, lines);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("no {marker:?} on stderr: {lines:?}");
}

/// A GET of `url` (http, 127.0.0.1); the status line.
fn browser_get(url: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, target) = rest.split_at(rest.find('/').unwrap());
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    write!(stream, "GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text.lines().next().unwrap_or("").to_string()
}

fn wait_success(child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the login did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

fn s256(verifier: &str) -> String {
    use base64::Engine;
    let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
}

/// `pi login openrouter` (1.6.0's PKCE with a loopback callback on a free port and a random
/// path): the browser's callback brings the code, which is exchanged for a permanent key; stored
/// as 1.6.0 stores it (`refresh: ""`, `expires: Number.MAX_SAFE_INTEGER`) and sent as the bearer.
#[test]
fn pi_login_openrouter_takes_the_callback_and_stores_a_permanent_key() {
    if is_reference() {
        return;
    }
    let openrouter = FakeProvider::start_auth_server(vec![json_reply(
        json!({"key": "sk-or-v1-signed-in", "user_id": "u1"}),
    )]);
    let workspace = Workspace::new();
    let env = [("PI_OAUTH_OPENROUTER_URL", openrouter.base_url())];
    let (mut child, lines) = start_browser_login(
        &workspace,
        "openrouter",
        &env,
        "Complete sign-in in your browser. If",
    );
    let redirect = lines
        .iter()
        .find_map(|l| l.strip_prefix("Listening for OpenRouter OAuth callback on "))
        .expect("the callback address")
        .to_string();
    assert!(
        redirect.starts_with("http://127.0.0.1:") && redirect.contains("/oauth/callback/"),
        "{redirect}"
    );
    let authorize = lines
        .iter()
        .find(|l| l.starts_with(&format!("{}/auth?", openrouter.base_url())))
        .expect("the authorization URL");
    assert_eq!(
        query_param(authorize, "callback_url").map(|u| crate::scripted_http::percent_decode(&u)),
        Some(redirect.clone())
    );
    let challenge = query_param(authorize, "code_challenge").unwrap();
    // A stray request elsewhere does not end the sign-in.
    let origin = &redirect[..redirect.find("/oauth").unwrap()];
    assert!(browser_get(&format!("{origin}/oauth/callback/other?code=x")).contains("404"));
    assert!(browser_get(&format!("{redirect}?code=or-code-1")).contains("200"));
    wait_success(&mut child);
    let exchange = &openrouter.requests()[0];
    assert_eq!(exchange.path, "/api/v1/auth/keys");
    let verifier = exchange.body["code_verifier"].as_str().unwrap().to_string();
    assert_eq!(
        exchange.body,
        json!({"code": "or-code-1", "code_verifier": verifier, "code_challenge_method": "S256"})
    );
    assert_eq!(s256(&verifier), challenge);
    let auth = read_auth(&workspace);
    assert_eq!(
        auth["openrouter"],
        json!({"type": "oauth", "access": "sk-or-v1-signed-in", "refresh": "",
            "expires": 9_007_199_254_740_991_u64})
    );

    let provider = FakeProvider::start(vec![Reply::sse_fixture("openai/text.sse")]);
    let setup = Setup::new(&provider, "openrouter", "aion-labs/aion-2.0")
        .models_json(r#"{"providers": {"openrouter": {"baseUrl": "__BASE_URL__/v1"}}}"#);
    let request = prompt_with_login(&workspace, &provider, setup);
    assert_bearer(&request, "sk-or-v1-signed-in");
}

/// `pi login openai` (1.6.0's Sign in with ChatGPT): the authorization URL names this
/// installation (settings.json's `deviceId`, made when missing) and pi's dynamic client; a
/// callback with another state is refused and the sign-in goes on; the right one brings the code
/// and the issued client id, exchanged with PKCE; stored with 1.6.0's fields.
#[test]
fn pi_login_openai_signs_in_with_chatgpt_on_the_1455_callback() {
    if is_reference() {
        return;
    }
    let tokens = FakeProvider::start_auth_server(vec![json_reply(json!({
        "access_token": "chatgpt-access-new", "refresh_token": "chatgpt-refresh-new",
        "id_token": "header.payload.sig", "expires_in": 3600, "token_type": "Bearer",
        "scope": "openid profile email offline_access resource.invoke chatgpt.tokens.use.direct"
    }))]);
    let workspace = Workspace::new();
    let env = [(
        "PI_OAUTH_OPENAI_TOKEN_URL",
        format!("{}/api/accounts/oauth/token", tokens.base_url()),
    )];
    let (mut child, lines) = start_browser_login(
        &workspace,
        "openai",
        &env,
        "Complete sign-in in your browser. If",
    );
    let authorize = lines
        .iter()
        .find(|l| l.starts_with("https://auth.openai.com/api/accounts/authorize?"))
        .expect("the authorization URL")
        .clone();
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace.agent_dir().join("settings.json")).unwrap(),
    )
    .unwrap();
    let device = settings["deviceId"]
        .as_str()
        .expect("a deviceId")
        .to_string();
    let get = |name: &str| {
        query_param(&authorize, name).map(|v| crate::scripted_http::percent_decode(&v))
    };
    assert_eq!(get("client_id").as_deref(), Some("dynamic_agent_client"));
    assert_eq!(get("agent_name_hint").as_deref(), Some("Pi"));
    assert_eq!(get("ext_agent_host_id"), Some(format!("urn:uuid:{device}")));
    assert_eq!(
        get("redirect_uri").as_deref(),
        Some("http://127.0.0.1:1455/auth/callback")
    );
    assert_eq!(
        get("resource").as_deref(),
        Some("https://api.openai.com/v1")
    );
    assert_eq!(
        get("scope").as_deref(),
        Some("openid profile email offline_access resource.invoke chatgpt.tokens.use.direct")
    );
    let state = get("state").unwrap();
    let challenge = get("code_challenge").unwrap();
    let callback = "http://127.0.0.1:1455/auth/callback";
    assert!(
        browser_get(&format!("{callback}?code=c&state=other&client_id=x")).contains("400"),
        "another login's callback is refused"
    );
    let state_q = crate::scripted_http::percent_decode(&state);
    let ok = format!(
        "{callback}?code=chatgpt-code-1&state={}&client_id=issued-client-9",
        form_value(&state_q)
    );
    assert!(browser_get(&ok).contains("200"));
    wait_success(&mut child);
    let exchange =
        crate::scripted_http::form(&String::from_utf8_lossy(&tokens.requests()[0].raw_body));
    let verifier = exchange["code_verifier"].as_str().unwrap().to_string();
    assert_eq!(s256(&verifier), challenge);
    assert_eq!(
        Value::Object(exchange),
        json!({"grant_type": "authorization_code", "client_id": "issued-client-9",
            "code": "chatgpt-code-1", "code_verifier": verifier,
            "redirect_uri": "http://127.0.0.1:1455/auth/callback",
            "resource": "https://api.openai.com/v1"})
    );
    let auth = read_auth(&workspace);
    assert_eq!(
        entry_keys(&auth, "openai"),
        ["type", "access", "refresh", "expires", "clientId", "scopes"]
    );
    assert_eq!(auth["openai"]["access"], "chatgpt-access-new");
    assert_eq!(auth["openai"]["clientId"], "issued-client-9");
}

/// A query value as `URLSearchParams` would write it (the state is base64url: nothing to escape
/// but kept general).
fn form_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `pi login radius` (1.6.0's default "Sign in with browser"): the authorization endpoint comes
/// from the gateway's `/v1/oauth`; the URL carries PKCE and a state; the callback on
/// 127.0.0.1:1456 refuses another state and a missing code, and answers the right one only after
/// the code was exchanged; stored as the device-code login is (a catalog the gateway cannot give
/// leaves the login as it is), and refreshed when expired.
#[test]
fn pi_login_radius_signs_in_with_the_browser_on_the_1456_callback() {
    if is_reference() {
        return;
    }
    let gateway = FakeProvider::start_auth_server(vec![
        json_reply(json!({"authorizationEndpoint": "https://radius.pi.dev/oauth/authorize"})),
        json_reply(
            json!({"access_token": "radius-browser-1", "refresh_token": "radius-browser-r1",
            "expires_in": 3600, "scope": "gateway offline_access"}),
        ),
        json_status(503, json!({"error": "catalog down"})),
        json_reply(
            json!({"access_token": "radius-browser-2", "refresh_token": "radius-browser-r2",
            "expires_in": 3600, "scope": "gateway offline_access"}),
        ),
    ]);
    let workspace = Workspace::new();
    let env = [("PI_OAUTH_RADIUS_URL", gateway.base_url())];
    let (mut child, lines) = start_browser_login(&workspace, "radius", &env, "To use ");
    assert!(
        lines.contains(
            &"Listening for OAuth callback on http://127.0.0.1:1456/oauth/callback".to_string()
        ),
        "{lines:?}"
    );
    assert_eq!(
        lines.last().unwrap(),
        "To use \"Sign in with device code (when signing in from another device)\" instead, run \"pi auth login radius --no-browser\""
    );
    let authorize = lines
        .iter()
        .find(|l| l.starts_with("https://radius.pi.dev/oauth/authorize?"))
        .expect("the authorization URL")
        .clone();
    let get = |name: &str| {
        query_param(&authorize, name).map(|v| crate::scripted_http::percent_decode(&v))
    };
    assert_eq!(get("response_type").as_deref(), Some("code"));
    assert_eq!(get("client_id").as_deref(), Some("pi-gateway"));
    assert_eq!(
        get("redirect_uri").as_deref(),
        Some("http://127.0.0.1:1456/oauth/callback")
    );
    assert_eq!(get("scope").as_deref(), Some("gateway offline_access"));
    assert_eq!(get("code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(get("handoff").as_deref(), Some("url"));
    let state = get("state").unwrap();
    assert_eq!(state.len(), 36, "a UUID: {state}");
    let challenge = get("code_challenge").unwrap();
    let discovery = &gateway.requests()[0];
    assert_eq!(
        (discovery.method.as_str(), discovery.path.as_str()),
        ("GET", "/v1/oauth")
    );
    assert_eq!(discovery.header("accept"), Some("application/json"));

    let callback = "http://127.0.0.1:1456/oauth/callback";
    assert!(browser_get(&format!("{callback}?code=c&state=other")).contains("400"));
    assert!(browser_get(&format!("{callback}?state={state}")).contains("400"));
    assert!(browser_get(&format!("{callback}?code=radius-code-1&state={state}")).contains("200"));
    wait_success(&mut child);
    let exchange =
        crate::scripted_http::form(&String::from_utf8_lossy(&gateway.requests()[1].raw_body));
    let verifier = exchange["code_verifier"].as_str().unwrap().to_string();
    assert_eq!(s256(&verifier), challenge);
    assert_eq!(
        Value::Object(exchange),
        json!({"grant_type": "authorization_code", "client_id": "pi-gateway",
            "redirect_uri": "http://127.0.0.1:1456/oauth/callback", "code": "radius-code-1",
            "code_verifier": verifier})
    );
    assert_eq!(gateway.requests()[1].path, "/v1/oauth/token");
    let auth = read_auth(&workspace);
    assert_eq!(
        entry_keys(&auth, "radius"),
        ["type", "access", "refresh", "expires", "scope"]
    );
    assert_eq!(auth["radius"]["access"], "radius-browser-1");
    // The catalog could not be fetched: the login stays and nothing is stored; the MCP server
    // is added all the same.
    assert_eq!(gateway.requests()[2].path, "/v1/config");
    assert!(!workspace.agent_dir().join("models-store.json").exists());
    let mcp = std::fs::read_to_string(workspace.agent_dir().join("mcp.json")).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&mcp).unwrap(),
        json!({"mcpServers": {"radius": {"url": "https://radius.pi.dev/mcp",
            "auth": {"provider": "radius"}}}})
    );

    let request = prompt_after_expiry(
        &workspace,
        "radius",
        "balanced",
        "pi-messages/text.sse",
        "/v1",
        &env,
    );
    assert_bearer(&request, "radius-browser-2");
    assert_eq!(
        paths_and_bodies(&gateway)[3].1,
        "grant_type=refresh_token&client_id=pi-gateway&refresh_token=radius-browser-r1"
    );
}

/// Anthropic workload identity federation (pi 1.6.0 through the Anthropic SDK): with no key but
/// `ANTHROPIC_FEDERATION_RULE_ID`, `ANTHROPIC_ORGANIZATION_ID` and `ANTHROPIC_IDENTITY_TOKEN_FILE`
/// set, the identity token is exchanged at `<baseUrl>/v1/oauth/token` (jwt-bearer, the SDK's
/// betas) and the access token is the bearer; it is reused by the next prompt, exchanged again
/// once after the API answers 401, and a refused exchange is the prompt's error. The identity
/// token never reaches a record.
#[test]
fn anthropic_workload_identity_federation_exchanges_caches_and_renews_the_token() {
    if is_reference() {
        return;
    }
    let token = |access: &str| {
        json_reply(json!({"access_token": access, "token_type": "Bearer", "expires_in": 3600}))
    };
    let server = FakeProvider::start_auth_server(vec![
        token("fed-access-1"),
        Reply::sse_fixture("anthropic/text.sse"),
        json_status(
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "expired"}}),
        ),
        token("fed-access-2"),
        Reply::sse_fixture("anthropic/text.sse"),
        json_status(
            401,
            json!({"error": "invalid_grant", "error_description": "rule mismatch", "assertion": "x"}),
        ),
    ]);
    let workspace = Workspace::new();
    let identity = workspace.root().join("identity.jwt");
    std::fs::write(&identity, "eyJhbGciOi.identity-jwt-secret.sig\n").unwrap();
    let setup = Setup::new(&server, "anthropic", "claude-haiku-4-5")
        .models_json(r#"{"providers": {"anthropic": {"baseUrl": "__BASE_URL__"}}}"#)
        .env("ANTHROPIC_FEDERATION_RULE_ID", "fdrl_01")
        .env("ANTHROPIC_ORGANIZATION_ID", "org-01")
        .env("ANTHROPIC_IDENTITY_TOKEN_FILE", identity.to_str().unwrap())
        .env("ANTHROPIC_SERVICE_ACCOUNT_ID", "svac_01");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let mut records = Vec::new();
    for id in ["p1", "p2"] {
        pi.send(json!({"id": id, "type": "prompt", "message": "hi"}));
        let run = pi.records_until_event("agent_end");
        let reply = run
            .iter()
            .rev()
            .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
            .unwrap();
        assert_eq!(reply["message"]["stopReason"], "stop", "{reply}");
        records.extend(run);
    }
    let requests = server.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/oauth/token",
            "/v1/messages",
            "/v1/messages",
            "/v1/oauth/token",
            "/v1/messages"
        ]
    );
    let exchange = &requests[0];
    assert_eq!(
        exchange.body,
        json!({"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
            "assertion": "eyJhbGciOi.identity-jwt-secret.sig", "federation_rule_id": "fdrl_01",
            "organization_id": "org-01", "service_account_id": "svac_01"})
    );
    assert_eq!(
        exchange.header("anthropic-beta"),
        Some("oauth-2025-04-20,oidc-federation-2026-04-01")
    );
    assert_eq!(exchange.header("content-type"), Some("application/json"));
    let bearers: Vec<Option<&str>> = [1, 2, 4]
        .iter()
        .map(|&i| requests[i].header("authorization"))
        .collect();
    assert_eq!(
        bearers,
        [
            Some("Bearer fed-access-1"),
            Some("Bearer fed-access-1"),
            Some("Bearer fed-access-2")
        ]
    );
    for &i in &[1, 2, 4] {
        assert_eq!(requests[i].header("x-api-key"), None);
        let betas = requests[i].header("anthropic-beta").unwrap_or("");
        assert!(betas.split(',').any(|b| b == "oauth-2025-04-20"), "{betas}");
        assert!(!betas.contains("claude-code"), "{betas}");
    }
    let all = serde_json::to_string(&records).unwrap();
    assert!(
        !all.contains("identity-jwt-secret"),
        "the identity token leaked"
    );
    drop(pi);

    // A refused exchange ends the prompt with the SDK's error text (only the OAuth error fields).
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p3", "type": "prompt", "message": "hi"}));
    let run = pi.records_until_event("agent_end");
    let reply = run
        .iter()
        .rev()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .unwrap();
    assert_eq!(reply["message"]["stopReason"], "error", "{reply}");
    assert_eq!(
        reply["message"]["errorMessage"],
        "Token exchange failed with status 401: {\"error\":\"invalid_grant\",\"error_description\":\"rule mismatch\"} Ensure your federation rule matches your identity token. If your federation rule is scoped to multiple workspaces, set the ANTHROPIC_WORKSPACE_ID environment variable, the 'workspace_id' config key, or the `workspaceId` option. View your authentication events in the Workload identity page of Claude Console for more details."
    );
}
