//! `pi mcp add|remove|list`: shell commands that work without a session (pi's `docs/cli.md`).
//! `add` and `remove` edit `<agentDir>/mcp.json`, or `.pi/mcp.json` with `--local`/`-l`, keeping
//! unrelated content; `list` connects to every enabled server and prints its state, tools and
//! errors, exiting 1 when an entry is invalid or an enabled server did not connect.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::config;

const USAGE: &str = "Usage:
  pi mcp add <server> [-l] [--env KEY=VALUE]... [--cwd <dir>] [--exposure <mode>] [--description <text>] -- <command> [args...]
  pi mcp add <server> [-l] --url <url> [--header KEY=VALUE]... [--bearer-token-env-var <NAME>] [--oauth-client-id <id>] [--oauth-client-secret <secret>] [--oauth-callback-port <port>] [--oauth-client-name <name>] [--oauth-client-registration <auto|dcr|cimd>] [--exposure <mode>] [--description <text>]
  pi mcp remove <server> [-l]
  pi mcp list [--json]
  pi mcp login <server> [-l] [--timeout <seconds>]
  pi mcp logout <server> [-l]
";

/// Runs `pi mcp <args>`; returns the exit code.
pub fn run(args: Vec<OsString>, agent_dir: &Path, cwd: &Path, project_trusted: bool) -> u8 {
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let result = match args.first().map(String::as_str) {
        Some("add") => add(&args[1..], agent_dir, cwd),
        Some("remove") => remove(&args[1..], agent_dir, cwd),
        Some("list") => return list(&args[1..], agent_dir, cwd, project_trusted),
        Some(command @ ("login" | "logout")) => {
            sign_in_or_out(command, &args[1..], agent_dir, cwd, project_trusted)
        }
        _ => Err(USAGE.trim_end().to_string()),
    };
    match result {
        Ok(message) => {
            crate::rpc::print_text(&format!("{message}\n"));
            0
        }
        Err(message) => {
            eprintln!("{message}");
            1
        }
    }
}

fn target(local: bool, agent_dir: &Path, cwd: &Path) -> std::path::PathBuf {
    match local {
        true => config::project_path(cwd),
        false => config::user_path(agent_dir),
    }
}

fn pair(value: &str, flag: &str) -> Result<(String, String), String> {
    value
        .split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{flag} expects KEY=VALUE, got \"{value}\""))
}

fn add(args: &[String], agent_dir: &Path, cwd: &Path) -> Result<String, String> {
    let name = args
        .first()
        .filter(|n| !n.starts_with('-'))
        .ok_or(USAGE.trim_end())?;
    let mut local = false;
    let mut entry = Map::new();
    let (mut env, mut headers, mut oauth) = (Map::new(), Map::new(), Map::new());
    let mut command: Option<&[String]> = None;
    let mut i = 1;
    let value = |i: usize, flag: &str| {
        args.get(i + 1)
            .cloned()
            .ok_or_else(|| format!("{flag} needs a value"))
    };
    while i < args.len() {
        let flag = args[i].as_str();
        match flag {
            "--" => {
                command = Some(&args[i + 1..]);
                break;
            }
            "-l" | "--local" => local = true,
            "--env" => {
                let (k, v) = pair(&value(i, flag)?, flag)?;
                env.insert(k, json!(v));
                i += 1;
            }
            "--header" => {
                let (k, v) = pair(&value(i, flag)?, flag)?;
                headers.insert(k, json!(v));
                i += 1;
            }
            "--bearer-token-env-var" => {
                headers.insert(
                    "Authorization".into(),
                    json!(format!("Bearer ${{{}}}", value(i, flag)?)),
                );
                i += 1;
            }
            "--oauth-client-id"
            | "--oauth-client-secret"
            | "--oauth-callback-port"
            | "--oauth-client-name"
            | "--oauth-client-registration" => {
                let key = match flag {
                    "--oauth-client-id" => "clientId",
                    "--oauth-client-secret" => "clientSecret",
                    "--oauth-callback-port" => "callbackPort",
                    "--oauth-client-name" => "clientName",
                    _ => "clientRegistration",
                };
                let given = value(i, flag)?;
                let value = match key {
                    "callbackPort" => given
                        .parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map(|n| match n.as_f64() {
                            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => json!(f as i64),
                            _ => Value::Number(n),
                        })
                        .unwrap_or(Value::Null),
                    _ => json!(given),
                };
                oauth.insert(key.to_string(), value);
                i += 1;
            }
            "--url" | "--cwd" | "--exposure" | "--description" => {
                entry.insert(
                    flag.trim_start_matches("--").to_string(),
                    json!(value(i, flag)?),
                );
                i += 1;
            }
            other => return Err(format!("Unknown option for pi mcp add: {other}\n{USAGE}")),
        }
        i += 1;
    }
    // pi's key order: url, headers | command, args, env, cwd; then exposure, description.
    let mut out = Map::new();
    match (command, entry.remove("url")) {
        (Some(command), None) if !command.is_empty() => {
            if !headers.is_empty() {
                return Err("--header only applies to HTTP servers (--url).".into());
            }
            if let Some(key) = oauth.keys().next() {
                let flag = match key.as_str() {
                    "clientId" => "oauth-client-id",
                    "clientSecret" => "oauth-client-secret",
                    "callbackPort" => "oauth-callback-port",
                    "clientName" => "oauth-client-name",
                    _ => "oauth-client-registration",
                };
                return Err(format!("--{flag} only applies to HTTP servers (--url)."));
            }
            out.insert("command".into(), json!(command[0]));
            if command.len() > 1 {
                out.insert("args".into(), json!(command[1..]));
            }
            if !env.is_empty() {
                out.insert("env".into(), Value::Object(env));
            }
            out.extend(entry.remove("cwd").map(|c| ("cwd".to_string(), c)));
        }
        (None, Some(url)) => {
            let misplaced = match (env.is_empty(), entry.contains_key("cwd")) {
                (false, _) => Some("env"),
                (true, true) => Some("cwd"),
                (true, false) => None,
            };
            if let Some(option) = misplaced {
                return Err(format!("--{option} only applies to stdio servers."));
            }
            out.insert("url".into(), url);
            if !headers.is_empty() {
                out.insert("headers".into(), Value::Object(headers));
            }
            // pi's key order inside `oauth`.
            let mut ordered = Map::new();
            for key in [
                "clientId",
                "clientSecret",
                "callbackPort",
                "clientName",
                "clientRegistration",
            ] {
                ordered.extend(oauth.remove(key).map(|v| (key.to_string(), v)));
            }
            if !ordered.is_empty() {
                out.insert("oauth".into(), Value::Object(ordered));
            }
        }
        _ => {
            return Err(format!(
                "pi mcp add needs either -- <command> or --url <url>\n{USAGE}"
            ));
        }
    }
    for key in ["exposure", "description"] {
        out.extend(entry.remove(key).map(|v| (key.to_string(), v)));
    }
    // HTTP servers without an Authorization header may use OAuth.
    let may_need_sign_in = out.contains_key("url")
        && !out
            .get("headers")
            .and_then(Value::as_object)
            .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case("authorization")));
    let entry = Value::Object(out);
    config::validate(name, &entry)?;
    let path = target(local, agent_dir, cwd);
    let replaced = config::add_server(&path, name, entry).map_err(|e| e.to_string())?;
    let verb = if replaced { "Replaced" } else { "Added" };
    let scope = if local { "project" } else { "global" };
    Ok(format!(
        "{verb} {scope} MCP server \"{name}\" in {}.\nCheck it with: pi mcp list{}",
        path.display(),
        match may_need_sign_in {
            true => format!(". If it requires sign-in: pi mcp login {name}"),
            false => String::new(),
        }
    ))
}

fn remove(args: &[String], agent_dir: &Path, cwd: &Path) -> Result<String, String> {
    let name = args
        .first()
        .filter(|n| !n.starts_with('-'))
        .ok_or(USAGE.trim_end())?;
    let local = args[1..].iter().any(|a| a == "-l" || a == "--local");
    let path = target(local, agent_dir, cwd);
    let scope = if local { "project" } else { "global" };
    match config::remove_server(&path, name).map_err(|e| e.to_string())? {
        true => Ok(format!(
            "Removed {scope} MCP server \"{name}\" from {}.",
            path.display()
        )),
        false => Err(format!(
            "No {scope} MCP server named \"{name}\" in {}.",
            path.display()
        )),
    }
}

fn list(args: &[String], agent_dir: &Path, cwd: &Path, project_trusted: bool) -> u8 {
    let as_json = args.iter().any(|a| a == "--json");
    let loaded = config::load(
        agent_dir,
        cwd,
        project_trusted,
        &config::system_resolver(cwd),
    );
    let invalid = !loaded.errors.is_empty();
    let mut host = super::McpHost::start(
        loaded,
        super::ToolFilter::default(),
        cwd.to_path_buf(),
        agent_dir.to_path_buf(),
        // `pi mcp list` on a terminal: no model, no restarts to confine.
        None,
    );
    // Each server connects within its own timeout; stop waiting when all have settled.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !host.settled() && Instant::now() < deadline {
        if let Ok(event) = host.events().recv_timeout(Duration::from_millis(100)) {
            host.on_event(event);
        }
    }
    let report = host.list_report();
    host.shutdown(Duration::from_secs(3));
    let servers = report["servers"].as_array().cloned().unwrap_or_default();
    let failed = servers
        .iter()
        .any(|s| s["enabled"] == json!(true) && s["state"] != json!("connected"));
    if as_json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        crate::rpc::print_text(&format!("{text}\n"));
        return u8::from(invalid || failed);
    }
    let mut out = String::new();
    if servers.is_empty() && !invalid {
        out.push_str(&format!(
            "No MCP servers configured. Add them to {} or .pi/mcp.json.\n",
            config::user_path(agent_dir).display()
        ));
    }
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    for s in &servers {
        let tools: Vec<String> = s["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        let state = match s["state"].as_str() {
            Some("connected") => format!(
                "connected, {} tool{}",
                tools.len(),
                if tools.len() == 1 { "" } else { "s" }
            ),
            Some("needs-auth") => "needs sign-in".into(),
            _ => text(&s["state"]),
        };
        out.push_str(&format!(
            "{}: {state} ({}, {})\n",
            text(&s["name"]),
            text(&s["exposure"]),
            text(&s["scope"])
        ));
        out.push_str(&format!("  {}\n", text(&s["transport"])));
        if let Some(path) = s["override"].as_str() {
            out.push_str(&format!("  project override: {path}\n"));
        }
        if s["state"] == "needs-auth" {
            out.push_str(&match s["authProvider"].as_str() {
                Some(provider) => format!("  sign in with: /login {provider} in pi\n"),
                None => format!("  sign in with: pi mcp login {}\n", text(&s["name"])),
            });
        }
        if !tools.is_empty() {
            let listed: Vec<String> = tools
                .iter()
                .map(|t| match s["toolExposure"][t].as_str() {
                    Some(exposure) => format!("{t} [{exposure}]"),
                    None => t.clone(),
                })
                .collect();
            out.push_str(&format!("  tools: {}\n", listed.join(", ")));
        }
        if s["resources"] == json!(true) {
            out.push_str("  offers resources\n");
        }
        if let Some(error) = s["error"].as_str() {
            out.push_str(&format!(
                "  {}\n",
                error.split('\n').collect::<Vec<_>>().join("\n  ")
            ));
        }
    }
    for error in report["errors"].as_array().into_iter().flatten() {
        out.push_str(&format!("config error: {}\n", text(error)));
    }
    crate::rpc::print_text(&out);
    u8::from(invalid || failed)
}

/// `pi mcp login <server>` and `pi mcp logout <server>` (pi 1.6.0's texts).
fn sign_in_or_out(
    command: &str,
    args: &[String],
    agent_dir: &Path,
    cwd: &Path,
    project_trusted: bool,
) -> Result<String, String> {
    let mut name = None;
    let mut local = false;
    let mut timeout = 300.0;
    let mut words = args.iter();
    while let Some(word) = words.next() {
        match word.as_str() {
            "-l" | "--local" => local = true,
            "--timeout" if command == "login" => {
                timeout = words
                    .next()
                    .and_then(|t| t.parse::<f64>().ok())
                    .filter(|t| t.is_finite() && *t > 0.0)
                    .ok_or("--timeout must be a positive number of seconds.")?;
            }
            other if name.is_none() && !other.starts_with('-') => name = Some(other.to_string()),
            _ => return Err(format!("Usage: pi mcp {command} <server> [-l]")),
        }
    }
    let Some(name) = name else {
        return Err(format!("Usage: pi mcp {command} <server> [-l]"));
    };
    let loaded = config::load(
        agent_dir,
        cwd,
        project_trusted,
        &config::system_resolver(cwd),
    );
    crate::redact::register_secrets(loaded.secrets.clone());
    let Some(server) = loaded.servers.iter().find(|s| s.name == name) else {
        let names: Vec<&str> = loaded.servers.iter().map(|s| s.name.as_str()).collect();
        return Err(format!(
            "No MCP server named \"{name}\". Configured: {}.",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    };
    if local && !server.project {
        return Err(format!(
            "MCP server \"{name}\" is defined in {}, not in the project; omit --local.",
            server.source.display()
        ));
    }
    if let config::Transport::Http {
        provider: Some(auth),
        ..
    } = &server.transport
    {
        return Err(format!(
            "MCP server \"{name}\" uses the credentials of provider \"{}\". Run \"pi auth {command} {}\".",
            auth.provider, auth.provider
        ));
    }
    let config::Transport::Http {
        oauth: Some(settings),
        ..
    } = &server.transport
    else {
        return Err(format!(
            "MCP server \"{name}\" does not use OAuth. Only HTTP servers without an Authorization header do."
        ));
    };
    if command == "logout" {
        return Ok(match settings.remove()? {
            true => format!("Signed out of MCP server \"{name}\"."),
            false => format!("No stored credentials for MCP server \"{name}\"."),
        });
    }
    let failed = |e: String| format!("Sign-in to MCP server \"{name}\" failed: {e}");
    let Some(challenge) = super::oauth::probe(settings)
        .map_err(|e| format!("MCP server \"{name}\" failed to connect: {e}"))?
    else {
        return Ok(format!("Already signed in to MCP server \"{name}\"."));
    };
    // A redirect URL pasted on stdin finishes a sign-in whose browser cannot reach this machine.
    let (lines_tx, lines) = crossbeam_channel::unbounded();
    let _ = std::thread::Builder::new()
        .name("mcp-login-stdin".into())
        .spawn(move || {
            use std::io::BufRead;
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { return };
                // An empty line is no answer on a terminal (it would cancel the sign-in).
                if !line.trim().is_empty() && lines_tx.send(line).is_err() {
                    return;
                }
            }
        });
    struct Terminal<'a>(&'a str);
    impl super::oauth::SignInUi for Terminal<'_> {
        fn show_url(&mut self, url: &str) {
            crate::rpc::print_text(&format!(
                "Sign in to MCP server \"{}\" in your browser:\n{url}\n",
                self.0
            ));
            super::login::open_browser(url);
            eprintln!(
                "If the browser cannot reach this machine, paste the URL it was redirected to: "
            );
        }
    }
    let seconds = Duration::from_secs_f64(timeout);
    match super::oauth::sign_in(settings, &challenge, &mut Terminal(&name), lines, seconds) {
        Ok(_) => {}
        Err(e) if e == super::oauth::TIMED_OUT => {
            return Err(format!(
                "Sign-in to MCP server \"{name}\" was cancelled or not completed within {} seconds.",
                timeout.round()
            ));
        }
        Err(e) => return Err(failed(e)),
    }
    match super::oauth::probe(settings) {
        Ok(None) => Ok(format!("Signed in to MCP server \"{name}\".")),
        Ok(Some(_)) => Err(format!(
            "Signed in, but MCP server \"{name}\" still rejects the credentials"
        )),
        Err(e) => Err(format!("Signed in, but {e}")),
    }
}
