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
