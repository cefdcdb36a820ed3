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
  pi mcp add <server> [-l] --url <url> [--header KEY=VALUE]... [--bearer-token-env-var <NAME>] [--exposure <mode>] [--description <text>]
  pi mcp remove <server> [-l]
  pi mcp list [--json]
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
    let (mut env, mut headers) = (Map::new(), Map::new());
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
    let is_http = entry.contains_key("url");
    match (command, is_http) {
        (Some(command), false) if !command.is_empty() => {
            let mut stdio = Map::new();
            stdio.insert("command".into(), json!(command[0]));
            if command.len() > 1 {
                stdio.insert("args".into(), json!(command[1..]));
            }
            if !env.is_empty() {
                stdio.insert("env".into(), Value::Object(env));
            }
            stdio.extend(entry);
            entry = stdio;
        }
        (None, true) => {
            if !headers.is_empty() {
                entry.insert("headers".into(), Value::Object(headers));
            }
        }
        _ => {
            return Err(format!(
                "pi mcp add needs either -- <command> or --url <url>\n{USAGE}"
            ));
        }
    }
    let entry = Value::Object(entry);
    config::validate(name, &entry)?;
    let path = target(local, agent_dir, cwd);
    let replaced = config::add_server(&path, name, entry)?;
    let verb = if replaced { "Replaced" } else { "Added" };
    Ok(format!(
        "{verb} MCP server \"{name}\" in {}. Run `pi mcp list` to check it.",
        path.display()
    ))
}

fn remove(args: &[String], agent_dir: &Path, cwd: &Path) -> Result<String, String> {
    let name = args
        .first()
        .filter(|n| !n.starts_with('-'))
        .ok_or(USAGE.trim_end())?;
    let local = args[1..].iter().any(|a| a == "-l" || a == "--local");
    let path = target(local, agent_dir, cwd);
    match config::remove_server(&path, name)? {
        true => Ok(format!(
            "Removed MCP server \"{name}\" from {}.",
            path.display()
        )),
        false => Err(format!(
            "{} does not define MCP server \"{name}\".",
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
    );
    // Each server connects within its own timeout; stop waiting when all have settled.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !host.settled() && Instant::now() < deadline {
        if let Ok(event) = host.events().recv_timeout(Duration::from_millis(100)) {
            host.on_event(event);
        }
    }
    let status = host.status();
    host.shutdown(Duration::from_secs(3));
    let servers = status["servers"].as_array().cloned().unwrap_or_default();
    let failed = servers
        .iter()
        .any(|s| s["enabled"] == json!(true) && s["state"] != json!("connected"));
    if as_json {
        crate::rpc::print_text(&format!("{}\n", status));
    } else {
        let mut out = String::new();
        for error in status["errors"].as_array().into_iter().flatten() {
            out.push_str(&format!("config: {}\n", error.as_str().unwrap_or("")));
        }
        if servers.is_empty() {
            out.push_str("No MCP servers configured.\n");
        }
        for s in &servers {
            let state = s["state"].as_str().unwrap_or("");
            let detail = match state {
                "connected" => format!(
                    "connected · {} tools{}",
                    s["toolCount"],
                    if s["hasResources"] == json!(true) {
                        " · resources"
                    } else {
                        ""
                    }
                ),
                "failed" | "disconnected" => {
                    format!("{state}: {}", s["error"].as_str().unwrap_or(""))
                }
                other => other.to_string(),
            };
            out.push_str(&format!(
                "{} ({}) — {detail}\n",
                s["name"].as_str().unwrap_or(""),
                s["target"].as_str().unwrap_or("")
            ));
            for tool in s["tools"].as_array().into_iter().flatten() {
                out.push_str(&format!("  {}\n", tool.as_str().unwrap_or("")));
            }
        }
        crate::rpc::print_text(&out);
    }
    u8::from(invalid || failed)
}
