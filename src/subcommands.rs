//! The words pi 1.6.0 reserves as the first argument (`pi install …`, `pi auth …`, `pi mcp …`):
//! each is a command of its own and never a prompt, whatever follows it. [`run`] holds the one
//! match that dispatches them; a command pi-rs does not have yet still checks its usage as 1.6.0
//! does (same messages on stderr, same exit codes) and, when the usage is right, says it is not
//! there and exits 1 — never a session, never a model call.
//!
//! Only the first argument counts, as in pi: `pi -p install` is a prompt.

use std::path::Path;

/// Runs the reserved command `words[0]` names and returns its exit code; `None` when the first
/// word is not reserved (a session starts).
pub fn run(words: &[String], agent_dir: &Path) -> Option<u8> {
    let (first, rest) = words.split_first()?;
    let command: fn(&str, &[String], &Path) -> u8 = match first.as_str() {
        "login" | "logout" => crate::login::run,
        "mcp" => mcp,
        "install" | "remove" | "uninstall" | "update" | "list" | "config" => packages,
        "auth" => auth,
        _ => return None,
    };
    crate::init_logging(false);
    Some(command(first, rest, agent_dir))
}

/// `pi mcp add|remove|list …`: edits `mcp.json` (README "MCP").
fn mcp(_: &str, rest: &[String], agent_dir: &Path) -> u8 {
    let Ok(cwd) = std::env::current_dir() else {
        eprintln!("Error: cannot read the working directory");
        return 1;
    };
    let trusted =
        crate::config::Config::load(agent_dir.to_path_buf(), cwd.clone(), None).project_trusted();
    let words = rest.iter().map(std::ffi::OsString::from).collect();
    crate::mcp::cli::run(words, agent_dir, &cwd, trusted)
}

/// A command pi-rs does not have yet, with its usage right: said on stderr, exit 1.
fn not_yet(command: &str, what: &str) -> u8 {
    eprintln!("Error: \"pi {command}\" is not in pi-rs yet ({what}; README \"Not there (yet)\").");
    1
}

/// `pi install|remove|uninstall|update|list|config`: pi packages (README "Packages").
fn packages(word: &str, rest: &[String], _: &Path) -> u8 {
    crate::packages::cli::run(word, rest)
}

const AUTH_HELP: &str = "\
Usage:
  pi auth login <provider> [--api-key] [--no-browser]
  pi auth logout <provider>
  pi auth print-api-key [--provider <provider>] [--model <model>]
  pi auth print-bearer-token [--provider <provider>] [--model <model>] [--min-expiry <duration>]
  pi auth check [--provider <provider>] [--model <model>] [--json] [--credentials] [--no-refresh]

Provider credentials: log in and out (pi-rs: as `pi login` / `pi logout`). print-api-key,
print-bearer-token and check are not in pi-rs yet.
";

/// `pi auth …`: help, `login`/`logout` (pi-rs's `pi login`/`pi logout`), and 1.6.0's argument
/// checks for the credential commands pi-rs does not have yet.
fn auth(_: &str, rest: &[String], agent_dir: &Path) -> u8 {
    let sub = rest.first().map(String::as_str);
    if sub.is_none_or(|s| s == "help") || rest.iter().any(|a| a == "--help" || a == "-h") {
        crate::rpc::print_text(AUTH_HELP);
        return 0;
    }
    let args: Vec<String> = rest[1..]
        .iter()
        .filter(|a| *a != "--offline")
        .cloned()
        .collect();
    let kind = match sub {
        Some(command @ ("login" | "logout")) => {
            return crate::login::run(command, &args, agent_dir);
        }
        Some("check") => "check",
        Some("print-api-key") => "print-api-key",
        Some("print-bearer-token") => "print-bearer-token",
        other => {
            eprintln!(
                "Error: Unknown auth command \"{}\". Use \"pi auth login\", \"pi auth logout\", \
                 \"pi auth print-api-key\", \"pi auth print-bearer-token\", or \"pi auth check\".",
                other.unwrap_or("")
            );
            return 1;
        }
    };
    let mut words = args.iter();
    while let Some(arg) = words.next() {
        let refusal = match arg.as_str() {
            "--min-expiry" if kind != "print-bearer-token" => {
                Some("--min-expiry is only supported by print-bearer-token".to_string())
            }
            "--min-expiry" => (!words.next().is_some_and(|v| is_duration(v)))
                .then(|| "--min-expiry must use a duration such as 30m or 1h".to_string()),
            "--json" | "--credentials" | "--no-refresh" if kind != "check" => {
                Some(format!("{arg} is only supported by auth check"))
            }
            _ => None,
        };
        if let Some(refusal) = refusal {
            eprintln!("Error: {refusal}");
            return 1;
        }
    }
    not_yet(
        &format!("auth {kind}"),
        "credential printing and checks are not implemented",
    )
}

/// `30m`, `1h`, `500ms`, `10s` (case-insensitive), as `--min-expiry` takes them.
fn is_duration(value: &str) -> bool {
    let digits = value.bytes().take_while(u8::is_ascii_digit).count();
    let unit = value[digits..].to_ascii_lowercase();
    digits > 0 && matches!(unit.as_str(), "ms" | "s" | "m" | "h")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert!(is_duration("30m") && is_duration("1H") && is_duration("500ms"));
        assert!(!is_duration("3") && !is_duration("m") && !is_duration("1d"));
    }
}
