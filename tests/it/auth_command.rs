//! `pi auth check | print-api-key | print-bearer-token` as pi 1.6.0 prints and exits: each case's
//! stdout, stderr and exit code are what 1.6.0 gave for the same environment and auth.json (the
//! table passes against pi 1.6.0 too: `PI_TEST_BIN=<pi 1.6.0> cargo test --test it auth_command::`).

use std::process::Command;

use crate::support::{Workspace, binary, isolate_env};

/// Runs `pi <args>` with `env` and `auth_json`; (exit code, stdout, stderr) trimmed.
fn pi_auth(env: &[(&str, &str)], auth_json: Option<&str>, args: &str) -> (i32, String, String) {
    let workspace = Workspace::new();
    if let Some(text) = auth_json {
        std::fs::write(workspace.agent_dir().join("auth.json"), text).expect("write auth.json");
    }
    let mut cmd = Command::new(binary());
    cmd.current_dir(workspace.cwd());
    isolate_env(&mut cmd, &workspace.agent_dir(), workspace.root());
    cmd.envs(env.iter().copied()).args(args.split_whitespace());
    let output = cmd.output().expect("run pi auth");
    let text = |bytes: &[u8]| {
        let raw = String::from_utf8_lossy(bytes).into_owned();
        // pi colours its errors; the words are what is compared.
        let mut plain = String::new();
        let mut chars = raw.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                plain.push(c);
            }
        }
        plain.trim().to_string()
    };
    (
        output.status.code().unwrap_or(-1),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// Environment, auth.json, arguments, then 1.6.0's exit code, stdout and stderr.
type Case<'a> = (
    &'a [(&'a str, &'a str)],
    Option<&'a str>,
    &'a str,
    i32,
    &'a str,
    &'a str,
);

const LOGIN: &str =
    r#"{"anthropic":{"type":"oauth","access":"acc-tok","refresh":"r","expires":9999999999999}}"#;

#[test]
fn auth_commands_print_and_exit_as_pi_1_6_0() {
    let key = [("ANTHROPIC_API_KEY", "sk-ant-1")];
    let openai = [("OPENAI_API_KEY", "sk-x")];
    let cases: &[Case] = &[
        (
            &key,
            None,
            "auth check --provider anthropic",
            0,
            "ready",
            "",
        ),
        (
            &[],
            None,
            "auth check --provider anthropic",
            1,
            "not_ready",
            "",
        ),
        (
            &key,
            None,
            "auth check --provider anthropic --json",
            0,
            r#"{"status":"ready","provider":"anthropic","authType":"api_key"}"#,
            "",
        ),
        (
            &key,
            None,
            "auth check --provider anthropic --json --credentials",
            0,
            r#"{"status":"ready","provider":"anthropic","authType":"api_key","credentials":"sk-ant-1"}"#,
            "",
        ),
        (
            &key,
            None,
            "auth check --provider anthropic --credentials",
            0,
            "sk-ant-1",
            "",
        ),
        (
            &[],
            None,
            "auth check --provider anthropic --json",
            1,
            r#"{"status":"not_ready","provider":"anthropic","reason":"credentials_not_configured"}"#,
            "",
        ),
        (
            &[],
            None,
            "auth check --provider nope --json",
            1,
            r#"{"status":"not_ready","provider":"nope","reason":"provider_not_found"}"#,
            "",
        ),
        (
            &[],
            None,
            "auth check",
            2,
            "",
            "Error: Auth checks require --provider <provider> or --model <model>",
        ),
        (
            &openai,
            None,
            "auth print-api-key --provider openai",
            0,
            "sk-x",
            "",
        ),
        (
            &openai,
            None,
            "auth print-bearer-token --provider openai",
            1,
            "",
            "Error: Provider \"openai\" is not configured with an OAuth bearer token",
        ),
        (
            &[],
            None,
            "auth print-api-key --provider openai",
            1,
            "",
            "Error: No usable API key is configured",
        ),
        (
            &[],
            None,
            "auth print-api-key --provider nope",
            1,
            "",
            "Error: Unknown provider \"nope\". Use --list-models to see available providers.",
        ),
        (
            &[],
            None,
            "auth print-api-key",
            1,
            "",
            "Error: Credential printing requires --provider <provider> or --model <model>",
        ),
        (
            &[],
            None,
            "auth foo",
            1,
            "",
            "Error: Unknown auth command \"foo\". Use \"pi auth login\", \"pi auth logout\", \"pi auth print-api-key\", \"pi auth print-bearer-token\", or \"pi auth check\".",
        ),
        (
            &[],
            None,
            "auth check --provider openai --bogus",
            1,
            "",
            "Unknown option --bogus for \"auth check\".\nUse \"pi --help\" or \"pi auth check --provider <provider> [--json] [--credentials] [--no-refresh]\".",
        ),
        (
            &openai,
            None,
            "auth print-api-key --provider openai --json",
            1,
            "",
            "Error: --json is only supported by auth check",
        ),
        (
            &openai,
            None,
            "auth print-api-key --model openai/gpt-4o",
            1,
            "",
            "Error: Model \"openai/gpt-4o\" not found. Use --list-models to see available models.",
        ),
        (
            &[],
            Some(LOGIN),
            "auth print-bearer-token --provider anthropic",
            0,
            "acc-tok",
            "",
        ),
        (
            &[],
            Some(LOGIN),
            "auth print-api-key --provider anthropic",
            1,
            "",
            "Error: Provider \"anthropic\" is configured with OAuth, not an API key",
        ),
        (
            &[],
            Some(LOGIN),
            "auth check --provider anthropic --json --credentials",
            0,
            r#"{"status":"ready","provider":"anthropic","authType":"oauth","credentials":"acc-tok"}"#,
            "",
        ),
        (
            &[],
            Some(r#"{"openai":{"type":"api_key","key":"$NOPE_VAR"}}"#),
            "auth check --provider openai --json",
            1,
            r#"{"status":"not_ready","provider":"openai","reason":"credentials_not_configured"}"#,
            "",
        ),
    ];
    for (env, auth, args, code, stdout, stderr) in cases {
        let got = pi_auth(env, *auth, args);
        assert_eq!(
            got,
            (*code, stdout.to_string(), stderr.to_string()),
            "pi {args}"
        );
    }
}

/// Anthropic's workload identity federation and AWS's credential chain authenticate without a
/// key: `check` says ready, but has no credential to show, and `print-api-key` has nothing to
/// print (as 1.6.0; passes against it).
#[test]
fn ambient_credentials_are_ready_but_print_no_key() {
    let federation = [
        ("ANTHROPIC_FEDERATION_RULE_ID", "fdrl_1"),
        ("ANTHROPIC_ORGANIZATION_ID", "org-1"),
        ("ANTHROPIC_IDENTITY_TOKEN_FILE", "/nonexistent/identity.jwt"),
    ];
    let aws = [("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "b")];
    let cases: &[Case] = &[
        (
            &federation,
            None,
            "auth check --provider anthropic --json",
            0,
            r#"{"status":"ready","provider":"anthropic","authType":"api_key"}"#,
            "",
        ),
        (
            &federation[..2],
            None,
            "auth check --provider anthropic",
            1,
            "not_ready",
            "",
        ),
        (
            &federation,
            None,
            "auth check --provider anthropic --json --credentials",
            1,
            r#"{"status":"not_ready","provider":"anthropic","reason":"credential_not_available"}"#,
            "",
        ),
        (
            &aws,
            None,
            "auth check --provider amazon-bedrock --json --credentials",
            1,
            r#"{"status":"not_ready","provider":"amazon-bedrock","reason":"credential_not_available"}"#,
            "",
        ),
        (
            &federation,
            None,
            "auth print-api-key --provider anthropic",
            1,
            "",
            "Error: No usable API key is configured",
        ),
        (
            &aws,
            None,
            "auth print-api-key --provider amazon-bedrock",
            1,
            "",
            "Error: No usable API key is configured",
        ),
    ];
    for (env, auth, args, code, stdout, stderr) in cases {
        let got = pi_auth(env, *auth, args);
        assert_eq!(
            got,
            (*code, stdout.to_string(), stderr.to_string()),
            "pi {args}"
        );
    }
}

/// `pi auth login` refusals as pi 1.6.0 prints them (stderr, exit 1), before any prompt: the
/// usage, `--no-browser` with `--api-key`, an unknown provider with the list of those one can
/// log in to, and no terminal on stdin and stdout. Passes against pi 1.6.0 too.
#[test]
fn auth_login_refusals_are_pis() {
    let providers = "amazon-bedrock, ant-ling, anthropic, azure, baseten, cerebras, cloudflare-ai-gateway, cloudflare-workers-ai, deepseek, fireworks, github-copilot, google, google-vertex, groq, huggingface, kimi-coding, meta, minimax, minimax-cn, mistral, moonshotai, moonshotai-cn, nvidia, openai, openai-codex, opencode, opencode-go, openrouter, qwen-token-plan, qwen-token-plan-cn, qwen-token-plan-individual, qwen-token-plan-individual-cn, radius, together, typesafe, vercel-ai-gateway, xai, xiaomi, xiaomi-token-plan-ams, xiaomi-token-plan-cn, xiaomi-token-plan-sgp, zai, zai-coding-cn";
    let usage = "Usage: pi auth login <provider> [--api-key] [--no-browser]";
    let cases: &[(&str, String)] = &[
        ("auth login", usage.to_string()),
        ("auth login --api-key", usage.to_string()),
        ("auth login groq openai --api-key", usage.to_string()),
        (
            "auth login groq --api-key --no-browser",
            "--no-browser only applies to account sign-in; omit it with --api-key.".to_string(),
        ),
        (
            "auth login nosuch --api-key",
            format!("Unknown provider \"nosuch\".\nProviders: {providers}"),
        ),
        (
            "auth login groq --api-key",
            format!("\"{usage}\" requires an interactive terminal").replace("Usage: ", ""),
        ),
    ];
    for (args, stderr) in cases {
        let got = pi_auth(&[], None, args);
        assert_eq!(got, (1, String::new(), stderr.clone()), "pi {args}");
    }
}

/// Whether the pseudo-terminal echoes input (its mode read through the master side).
fn terminal_echoes(master: i32) -> bool {
    // SAFETY: termios is plain data filled by tcgetattr on our own master fd.
    let mut mode: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let read = unsafe { libc::tcgetattr(master, &mut mode) };
    read != 0 || mode.c_lflag & libc::ECHO != 0
}

/// One `pi <args>` on a pseudo-terminal (stdin, stdout and stderr), answering its prompts in
/// turn: each `(end, typed)` is typed once what it showed since the last answer ends in `end`
/// (spaces aside); what the terminal showed and the exit code.
fn on_terminal(workspace: &Workspace, args: &str, answers: &[(&str, &[u8])]) -> (String, i32) {
    use std::os::fd::FromRawFd;
    let (master, slave, _) = crate::support::open_pty();
    let mut cmd = Command::new(binary());
    cmd.current_dir(workspace.cwd());
    isolate_env(&mut cmd, &workspace.agent_dir(), workspace.root());
    cmd.env("TERM", "dumb").args(args.split_whitespace());
    // SAFETY: each Stdio takes its own duplicate of the slave, closed with the Command.
    unsafe {
        cmd.stdin(std::process::Stdio::from_raw_fd(libc::dup(slave)))
            .stdout(std::process::Stdio::from_raw_fd(libc::dup(slave)))
            .stderr(std::process::Stdio::from_raw_fd(libc::dup(slave)));
    }
    let mut child = cmd.spawn().expect("spawn pi");
    drop(cmd);
    // SAFETY: our copy of the slave; the master reads EOF/EIO once the child's copies close.
    unsafe { libc::close(slave) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut shown = Vec::new();
    let mut answers = answers.iter();
    let mut next = answers.next();
    let mut since = 0;
    let mut buffer = [0u8; 4096];
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "it never finished: {}",
            String::from_utf8_lossy(&shown)
        );
        let mut poll = libc::pollfd {
            fd: master,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on our master; a bounded wait.
        let ready = unsafe { libc::poll(&mut poll, 1, 200) };
        if ready > 0 {
            // SAFETY: reads into a stack buffer of the given length.
            let n = unsafe { libc::read(master, buffer.as_mut_ptr().cast(), buffer.len()) };
            if n <= 0 {
                break;
            }
            shown.extend_from_slice(&buffer[..n as usize]);
        }
        let text = String::from_utf8_lossy(&shown[since..]);
        // Typed once the prompt is up and the terminal no longer echoes (answers are read raw;
        // pi 1.6.0 switches the mode just after writing the prompt).
        if let Some((end, typed)) = next
            && text.trim_end_matches(' ').ends_with(end)
            && !terminal_echoes(master)
        {
            since = shown.len();
            next = answers.next();
            // SAFETY: writes our bytes to the master.
            let written = unsafe { libc::write(master, typed.as_ptr().cast(), typed.len()) };
            assert_eq!(written, typed.len() as isize);
        }
    }
    let status = child.wait().expect("wait pi");
    // SAFETY: our master fd, no longer used.
    unsafe { libc::close(master) };
    (
        String::from_utf8_lossy(&shown).into_owned(),
        status.code().unwrap_or(-1),
    )
}

/// `pi auth login groq --api-key` on a terminal, as pi 1.6.0 runs it: `Enter Groq API key: `,
/// the key typed without echo (Backspace takes a character off), stored as an `api_key` entry,
/// `Saved API key for Groq. Credentials saved to <auth.json>`, exit 0; Ctrl+C at the prompt is
/// `Login cancelled.` with exit 1 and nothing stored; a Radius key also sets up the Radius MCP
/// server; a provider with only an account sign-in says so. Passes against pi 1.6.0 too.
#[test]
fn auth_login_api_key_prompts_stores_and_exits() {
    let workspace = Workspace::new();
    let (shown, code) = on_terminal(
        &workspace,
        "auth login groq --api-key",
        &[("API key:", b"gsk-secret-12x\x7f3\r")],
    );
    let auth_path = workspace.agent_dir().join("auth.json");
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        shown,
        format!(
            "Enter Groq API key: \r\nSaved API key for Groq. Credentials saved to {}\r\n",
            auth_path.display()
        )
    );
    let auth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&auth_path).unwrap()).unwrap();
    assert_eq!(
        auth,
        serde_json::json!({"groq": {"type": "api_key", "key": "gsk-secret-123"}})
    );
    // The model store is left empty (its catalog refresh is skipped under PI_OFFLINE).
    let store = workspace.agent_dir().join("models-store.json");
    assert_eq!(std::fs::read_to_string(&store).unwrap(), "{}");

    let workspace = Workspace::new();
    let (shown, code) = on_terminal(
        &workspace,
        "auth login OpenAI --api-key",
        &[("API key:", b"sk-1\x03")],
    );
    assert_eq!(code, 1, "{shown}");
    assert_eq!(shown, "Enter OpenAI API key: \r\nLogin cancelled.\r\n");
    // Nothing stored (1.6.0 leaves an empty auth.json behind, pi-rs none).
    let stored = std::fs::read_to_string(workspace.agent_dir().join("auth.json"))
        .unwrap_or_else(|_| "{}".into());
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stored).unwrap(),
        serde_json::json!({})
    );

    // A Radius key also points the Radius MCP server at the login (its catalog is not fetched
    // under PI_OFFLINE).
    let workspace = Workspace::new();
    let (shown, code) = on_terminal(
        &workspace,
        "auth login radius --api-key",
        &[("API key:", b"rad-key-1\r")],
    );
    let mcp_path = workspace.agent_dir().join("mcp.json");
    assert_eq!(code, 0, "{shown}");
    assert_eq!(
        shown,
        format!(
            "Enter Radius API key: \r\nSaved API key for Radius. Credentials saved to {}\r\nAdded MCP server \"radius\" in {} to use the Radius login.\r\n",
            workspace.agent_dir().join("auth.json").display(),
            mcp_path.display()
        )
    );
    let mcp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&mcp_path).unwrap()).unwrap();
    assert_eq!(
        mcp,
        serde_json::json!({"mcpServers": {"radius": {"url": "https://radius.pi.dev/mcp",
            "auth": {"provider": "radius"}}}})
    );

    let (shown, code) = on_terminal(&workspace, "auth login openai-codex --api-key", &[]);
    assert_eq!(
        (code, shown.as_str()),
        (
            1,
            "OpenAI Codex has no API key login. Omit --api-key to sign in.\r\n"
        )
    );
}

/// The auth.json entry `pi auth login <provider> --api-key` stored after `answers`, and what the
/// terminal showed with the agent dir written `DIR`.
fn key_login(
    models_json: Option<&str>,
    provider: &str,
    answers: &[(&str, &[u8])],
) -> (String, serde_json::Value) {
    let workspace = Workspace::new();
    if let Some(text) = models_json {
        std::fs::write(workspace.agent_dir().join("models.json"), text).unwrap();
    }
    let (shown, code) = on_terminal(
        &workspace,
        &format!("auth login {provider} --api-key"),
        answers,
    );
    assert_eq!(code, 0, "{shown}");
    let auth = std::fs::read_to_string(workspace.agent_dir().join("auth.json")).unwrap();
    let dir = workspace.agent_dir().display().to_string();
    (
        shown.replace(&dir, "DIR"),
        serde_json::from_str(&auth).unwrap(),
    )
}

/// The key logins in steps, as pi 1.6.0 asks them: Amazon Bedrock's and Google Vertex AI's
/// numbered choice (a wrong number asked again), their notes with a link, answers echoed, and
/// the entry with `env`; the Cloudflare key with its ids; a provider only models.json defines,
/// found by its `name`, with the generic `Enter API key: `. Passes against pi 1.6.0 too.
#[test]
fn auth_login_api_key_steps_are_pis() {
    let bedrock = "Select Amazon Bedrock authentication method:\r\n  1. Bearer token\r\n  2. AWS profile\r\n  3. Existing AWS credential chain\r\n";
    let (shown, auth) = key_login(
        None,
        "amazon-bedrock",
        &[("1-3:", b"7\r"), ("1-3:", b"2\r"), ("name:", b"work\r")],
    );
    assert_eq!(
        shown,
        format!(
            "{bedrock}Select 1-3: 7\r\r\nEnter a number from 1 to 3.\r\nSelect 1-3: 2\r\r\nAmazon Bedrock supports AWS profiles, IAM credentials, and role-based credentials.\r\n  AWS credential provider chain: https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html\r\nEnter AWS profile name: work\r\r\nSaved API key for Amazon Bedrock. Credentials saved to DIR/auth.json\r\n"
        )
    );
    assert_eq!(
        auth,
        serde_json::json!({"amazon-bedrock": {"type": "api_key", "env": {"AWS_PROFILE": "work"}}})
    );
    let (_, auth) = key_login(
        None,
        "amazon-bedrock",
        &[("1-3:", b"1\r"), ("token:", b"tok\r")],
    );
    assert_eq!(
        auth,
        serde_json::json!({"amazon-bedrock": {"type": "api_key", "key": "tok"}})
    );
    let (_, auth) = key_login(
        None,
        "amazon-bedrock",
        &[("1-3:", b"3\r"), ("continue:", b"\r")],
    );
    assert_eq!(
        auth,
        serde_json::json!({"amazon-bedrock": {"type": "api_key"}})
    );

    let (shown, auth) = key_login(
        None,
        "google-vertex",
        &[
            ("1-3:", b"3\r"),
            ("ID:", b"proj\r"),
            ("location:", b"us-east5\r"),
            ("path:", b"/keys/sa.json\r"),
        ],
    );
    assert_eq!(
        shown,
        "Select Google Vertex AI authentication method:\r\n  1. Google Cloud API key\r\n  2. Application Default Credentials\r\n  3. Service account credentials file\r\nSelect 1-3: 3\r\r\nProvide a service account credentials file, project, and location.\r\n  Application Default Credentials: https://cloud.google.com/docs/authentication/provide-credentials-adc\r\nEnter Google Cloud project ID: proj\r\r\nEnter Google Cloud location: us-east5\r\r\nEnter service account credentials file path: /keys/sa.json\r\r\nSaved API key for Google Vertex AI. Credentials saved to DIR/auth.json\r\n"
    );
    assert_eq!(
        auth,
        serde_json::json!({"google-vertex": {"type": "api_key", "env": {"GOOGLE_CLOUD_PROJECT": "proj",
            "GOOGLE_CLOUD_LOCATION": "us-east5", "GOOGLE_APPLICATION_CREDENTIALS": "/keys/sa.json"}}})
    );
    let (shown, auth) = key_login(
        None,
        "google-vertex",
        &[("1-3:", b"2\r"), ("ID:", b"p\r"), ("location:", b"eu\r")],
    );
    assert!(
        shown.contains("Run `gcloud auth application-default login`, then provide the project and location.\r\n"),
        "{shown}"
    );
    assert_eq!(
        auth,
        serde_json::json!({"google-vertex": {"type": "api_key", "env": {"GOOGLE_CLOUD_PROJECT": "p",
            "GOOGLE_CLOUD_LOCATION": "eu"}}})
    );

    let (shown, auth) = key_login(
        None,
        "cloudflare-ai-gateway",
        &[
            ("key:", b"cf-key\r"),
            ("account ID:", b"acc\r"),
            ("Gateway ID:", b"gw\r"),
        ],
    );
    assert_eq!(
        shown,
        "Enter Cloudflare API key: \r\nEnter Cloudflare account ID: acc\r\r\nEnter Cloudflare AI Gateway ID: gw\r\r\nSaved API key for Cloudflare AI Gateway. Credentials saved to DIR/auth.json\r\n"
    );
    assert_eq!(
        auth,
        serde_json::json!({"cloudflare-ai-gateway": {"type": "api_key", "key": "cf-key",
            "env": {"CLOUDFLARE_ACCOUNT_ID": "acc", "CLOUDFLARE_GATEWAY_ID": "gw"}}})
    );
    let (_, auth) = key_login(
        None,
        "cloudflare-workers-ai",
        &[("key:", b"cf-key\r"), ("account ID:", b"acc\r")],
    );
    assert_eq!(
        auth,
        serde_json::json!({"cloudflare-workers-ai": {"type": "api_key", "key": "cf-key",
            "env": {"CLOUDFLARE_ACCOUNT_ID": "acc"}}})
    );

    let models = r#"{"providers": {"local": {"name": "Lokal", "apiKey": "LOCAL_KEY",
        "baseUrl": "http://127.0.0.1:1/v1", "api": "openai-completions", "models": [{"id": "m1"}]}}}"#;
    let (shown, auth) = key_login(Some(models), "LOKAL", &[("API key:", b"k-9\r")]);
    assert_eq!(
        shown,
        "Enter API key: \r\nSaved API key for Lokal. Credentials saved to DIR/auth.json\r\n"
    );
    assert_eq!(
        auth,
        serde_json::json!({"local": {"type": "api_key", "key": "k-9"}})
    );
}
