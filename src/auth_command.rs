//! `pi auth check | print-api-key | print-bearer-token | login | logout` as pi 1.6.0 prints them
//! and exits (`cli/auth-command.js`, `auth-check.js`, `credential-print.js`): a result or a
//! credential on stdout (only there, and only what 1.6.0 prints), `Error: …` on stderr, exit 0
//! (ready / printed), 1 (not ready / error) or 2 (invalid; any error of `check`). `login` is
//! checked and, with `--api-key`, run by `api_key_login.rs`, otherwise it is `pi login`;
//! `logout` is `pi logout` (`login.rs`). One entry point, `run`, for main's
//! subcommand dispatch.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::config::Config;

const USAGE_CHECK: &str =
    "pi auth check --provider <provider> [--json] [--credentials] [--no-refresh]";
const USAGE_API_KEY: &str = "pi auth print-api-key --provider <provider> [--model <model>]";
const USAGE_BEARER: &str =
    "pi auth print-bearer-token --provider <provider> [--model <model>] [--min-expiry <duration>]";

/// How long a printed bearer token must stay valid unless `--min-expiry` says otherwise.
const DEFAULT_MIN_EXPIRY_MS: f64 = 30.0 * 60_000.0;

const HELP: &str = "Usage:
  pi auth login <provider> [--api-key] [--no-browser]
  pi auth logout <provider>
  pi auth print-api-key [--provider <provider>] [--model <model>]
  pi auth print-bearer-token [--provider <provider>] [--model <model>] [--min-expiry <duration>]
  pi auth check [--provider <provider>] [--model <model>] [--json] [--credentials] [--no-refresh]

Log in to and out of model providers, print their credentials for external clients, or check that they are ready.
Credentials are stored in ~/.pi/agent/auth.json.

Commands:
  login <provider>        Sign in with an account in the browser, or save an API key, then exit
  logout <provider>       Remove the stored credentials; environment variables and models.json stay
  print-api-key           Print the resolved API key
  print-bearer-token      Print a resolved OAuth bearer token (refreshes if expired)
  check                   Print ready, not_ready, or invalid; exit with 0, 1, or 2

Options for print-api-key, print-bearer-token, and check (at least one is required):
  --provider <provider>   Resolve credentials for a provider
  --model <model>         Resolve credentials from a model

Options for login:
  --api-key               Save an API key instead of signing in with an account
  --no-browser            Do not open a browser; use another sign-in method, e.g. device code

Other options:
  --min-expiry <duration> Minimum remaining token lifetime for print-bearer-token, e.g. 30m or 1h
  --json                  Print the check result as JSON
  --credentials           Emit the credential from check, or include it in JSON output
  --no-refresh            Do not refresh expired OAuth credentials during check";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Check,
    ApiKey,
    BearerToken,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Check => "auth check",
            Kind::ApiKey => "auth print-api-key",
            Kind::BearerToken => "auth print-bearer-token",
        }
    }

    fn usage(self) -> &'static str {
        match self {
            Kind::Check => USAGE_CHECK,
            Kind::ApiKey => USAGE_API_KEY,
            Kind::BearerToken => USAGE_BEARER,
        }
    }
}

/// What the words after `auth` ask for.
#[derive(Debug, Default, PartialEq)]
struct Request {
    provider: Option<String>,
    model: Option<String>,
    json: bool,
    credentials: bool,
    no_refresh: bool,
    min_expiry_ms: Option<f64>,
}

/// A refusal printed as `Error: …` (or as given, for unknown options), with its exit code.
#[derive(Debug, PartialEq)]
struct Refusal {
    text: String,
    code: u8,
}

fn error(text: impl Into<String>, code: u8) -> Refusal {
    Refusal {
        text: format!("Error: {}", text.into()),
        code,
    }
}

/// Runs `pi auth <words…>`; the process exit code.
pub fn run(words: &[String], agent_dir: &Path) -> u8 {
    let first = words.first().map(String::as_str);
    if first.is_none() || first == Some("help") || words.iter().any(|w| w == "--help" || w == "-h")
    {
        crate::rpc::print_text(&format!("{HELP}\n"));
        return 0;
    }
    if let Some(command @ ("login" | "logout")) = first {
        let rest: Vec<String> = words[1..]
            .iter()
            .filter(|w| *w != "--offline")
            .cloned()
            .collect();
        if command == "login" {
            return crate::api_key_login::run(&rest, agent_dir);
        }
        return crate::login::run(command, &rest, agent_dir);
    }
    let (kind, request) = match parse(words) {
        Ok(parsed) => parsed,
        Err(refusal) => {
            eprintln!("{}", refusal.text);
            return refusal.code;
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| agent_dir.to_path_buf());
    let config = Config::load(agent_dir.to_path_buf(), cwd, None);
    match execute(kind, &request, &config) {
        Ok((output, code)) => {
            // The one place a credential is printed: this command's stdout, as pi prints it.
            crate::rpc::print_text(&format!("{output}\n"));
            code
        }
        Err(refusal) => {
            eprintln!("{}", refusal.text);
            refusal.code
        }
    }
}

fn parse(words: &[String]) -> Result<(Kind, Request), Refusal> {
    let kind = match words.first().map(String::as_str) {
        Some("check") => Kind::Check,
        Some("print-api-key") => Kind::ApiKey,
        Some("print-bearer-token") => Kind::BearerToken,
        other => {
            return Err(error(
                format!(
                    "Unknown auth command \"{}\". Use \"pi auth login\", \"pi auth logout\", \"pi auth print-api-key\", \"pi auth print-bearer-token\", or \"pi auth check\".",
                    other.unwrap_or_default()
                ),
                1,
            ));
        }
    };
    let mut request = Request::default();
    let mut rest = words[1..].iter();
    while let Some(word) = rest.next() {
        match word.as_str() {
            "--min-expiry" => {
                if kind != Kind::BearerToken {
                    return Err(error(
                        "--min-expiry is only supported by print-bearer-token",
                        1,
                    ));
                }
                request.min_expiry_ms =
                    Some(rest.next().and_then(|v| duration_ms(v)).ok_or_else(|| {
                        error("--min-expiry must use a duration such as 30m or 1h", 1)
                    })?);
            }
            flag @ ("--json" | "--credentials" | "--no-refresh") => {
                if kind != Kind::Check {
                    return Err(error(format!("{flag} is only supported by auth check"), 1));
                }
                match flag {
                    "--json" => request.json = true,
                    "--credentials" => request.credentials = true,
                    _ => request.no_refresh = true,
                }
            }
            "--provider" | "--model" => {
                let value = rest.next().map(|v| v.trim().to_string());
                let value = value.filter(|v| !v.is_empty());
                if word == "--provider" {
                    request.provider = value;
                } else {
                    request.model = value;
                }
            }
            "--offline" => {}
            option if option.starts_with("--") => {
                return Err(Refusal {
                    text: format!(
                        "Unknown option {option} for \"{}\".\nUse \"pi --help\" or \"{}\".",
                        kind.name(),
                        kind.usage()
                    ),
                    code: 1,
                });
            }
            _ => {
                return Err(error(
                    "Auth commands only accept --provider and --model",
                    if kind == Kind::Check { 2 } else { 1 },
                ));
            }
        }
    }
    if request.provider.is_none() && request.model.is_none() {
        return Err(match kind {
            Kind::Check => error(
                "Auth checks require --provider <provider> or --model <model>",
                2,
            ),
            _ => error(
                "Credential printing requires --provider <provider> or --model <model>",
                1,
            ),
        });
    }
    Ok((kind, request))
}

/// `30m`, `1h`, `45s`, `500ms`.
fn duration_ms(text: &str) -> Option<f64> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    let amount: f64 = digits.parse().ok()?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "ms" => 1.0,
        "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return None,
    };
    Some(amount * scale)
}

/// The line to print and the exit code, or a refusal.
fn execute(kind: Kind, request: &Request, config: &Config) -> Result<(String, u8), Refusal> {
    match kind {
        Kind::Check => Ok(check(request, config)),
        Kind::ApiKey | Kind::BearerToken => print_credential(kind, request, config).map(|v| (v, 0)),
    }
}

fn check(request: &Request, config: &Config) -> (String, u8) {
    let mut result = Map::new();
    let provider = match (&request.provider, &request.model) {
        (provider, Some(model)) => {
            match config.resolve_cli_model(provider.as_deref(), model, false, None) {
                Ok(resolved) => resolved.model.provider,
                // pi reports a model it cannot resolve as an invalid state.
                Err(_) => {
                    let shown = request.provider.clone().unwrap_or_else(|| model.clone());
                    return check_output(request, status("invalid", &shown, "invalid_state"), None);
                }
            }
        }
        (Some(provider), None) => provider.clone(),
        // `parse` refuses a request without either.
        (None, None) => return check_output(request, status("invalid", "", "invalid_state"), None),
    };
    if !config.is_known_provider(&provider) {
        return check_output(
            request,
            status("not_ready", &provider, "provider_not_found"),
            None,
        );
    }
    let stored = config.stored_credential_type(&provider);
    let key = if request.no_refresh && stored == Some("oauth") {
        // Without a refresh a login is ready as stored.
        Some(String::new())
    } else {
        config.api_key(&provider)
    };
    let Some(key) = key.filter(|_| config.has_auth(&provider)) else {
        return check_output(
            request,
            status("not_ready", &provider, "credentials_not_configured"),
            None,
        );
    };
    result.insert("status".into(), json!("ready"));
    result.insert("provider".into(), json!(provider));
    result.insert("authType".into(), json!(stored.unwrap_or("api_key")));
    let credential = if !request.credentials {
        None
    } else if stored == Some("oauth") && request.no_refresh {
        config.stored_oauth_access(&provider)
    } else {
        // Ambient credentials (cloud chains, Anthropic's federation) have none to show.
        Some(key).filter(|k| !k.is_empty() && k != crate::config::auth::AMBIENT_CREDENTIALS)
    };
    if request.credentials && credential.is_none() {
        return check_output(
            request,
            status("not_ready", &provider, "credential_not_available"),
            None,
        );
    }
    check_output(request, result, credential)
}

fn status(status: &str, provider: &str, reason: &str) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("status".into(), json!(status));
    map.insert("provider".into(), json!(provider));
    map.insert("reason".into(), json!(reason));
    map
}

fn check_output(
    request: &Request,
    mut result: Map<String, Value>,
    credential: Option<String>,
) -> (String, u8) {
    let state = result["status"].as_str().unwrap_or_default().to_string();
    let code = match state.as_str() {
        "ready" => 0,
        "not_ready" => 1,
        _ => 2,
    };
    let output = if request.json {
        if let Some(credential) = &credential {
            result.insert("credentials".into(), json!(credential));
        }
        Value::Object(result).to_string()
    } else {
        credential.unwrap_or(state)
    };
    (output, code)
}

fn print_credential(kind: Kind, request: &Request, config: &Config) -> Result<String, Refusal> {
    let what = if kind == Kind::ApiKey {
        "API key"
    } else {
        "OAuth bearer token"
    };
    let provider = match (&request.provider, &request.model) {
        (Some(provider), model) => {
            if !config.is_known_provider(provider) {
                return Err(error(
                    format!(
                        "Unknown provider \"{provider}\". Use --list-models to see available providers."
                    ),
                    1,
                ));
            }
            if let Some(model) = model {
                config
                    .resolve_cli_model(Some(provider), model, false, None)
                    .map_err(|e| error(e.to_string(), 1))?;
            }
            provider.clone()
        }
        // pi looks for the model among the providers with stored credentials only.
        (None, Some(model)) => config
            .stored_providers()
            .into_iter()
            .find(|p| {
                config
                    .find_model(p, model.strip_prefix(&format!("{p}/")).unwrap_or(model))
                    .is_some()
            })
            .ok_or_else(|| {
                error(
                    format!(
                        "Model \"{model}\" not found. Use --list-models to see available models."
                    ),
                    1,
                )
            })?,
        (None, None) => return Err(error(format!("No usable {what} is configured"), 1)),
    };
    let stored = config.stored_credential_type(&provider);
    let value = match kind {
        Kind::ApiKey if stored == Some("oauth") => {
            return Err(error(
                format!("Provider \"{provider}\" is configured with OAuth, not an API key"),
                1,
            ));
        }
        Kind::BearerToken if stored != Some("oauth") => {
            return Err(error(
                format!("Provider \"{provider}\" is not configured with an OAuth bearer token"),
                1,
            ));
        }
        Kind::BearerToken => config.oauth_token_valid_for(
            &provider,
            request.min_expiry_ms.unwrap_or(DEFAULT_MIN_EXPIRY_MS),
        ),
        _ => config.api_key(&provider),
    };
    // Ambient credentials (cloud chains, Anthropic's federation) have no key to print.
    value
        .filter(|v| !v.is_empty() && v != crate::config::auth::AMBIENT_CREDENTIALS)
        .ok_or_else(|| error(format!("No usable {what} is configured"), 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn parsing_refuses_as_pi_1_6_0() {
        let refusal = |text: &str| parse(&words(text)).unwrap_err();
        assert_eq!(
            refusal("check"),
            error(
                "Auth checks require --provider <provider> or --model <model>",
                2
            )
        );
        assert_eq!(
            refusal("print-api-key --provider openai --json").text,
            "Error: --json is only supported by auth check"
        );
        assert_eq!(
            refusal("check --provider openai --bogus").text,
            "Unknown option --bogus for \"auth check\".\nUse \"pi --help\" or \"pi auth check --provider <provider> [--json] [--credentials] [--no-refresh]\"."
        );
        assert_eq!(
            refusal("print-bearer-token --provider x --min-expiry soon").text,
            "Error: --min-expiry must use a duration such as 30m or 1h"
        );
        assert!(
            refusal("foo")
                .text
                .starts_with("Error: Unknown auth command \"foo\".")
        );
        let (kind, request) = parse(&words(
            "print-bearer-token --provider anthropic --min-expiry 2h",
        ))
        .unwrap();
        assert_eq!(kind, Kind::BearerToken);
        assert_eq!(request.min_expiry_ms, Some(7_200_000.0));
        assert_eq!(duration_ms("500ms"), Some(500.0));
        assert_eq!(duration_ms("10"), None);
    }
}
