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
        "install" | "remove" | "uninstall" | "update" | "list" => packages,
        "config" => config,
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

/// A usage error as pi prints it: the message, then a hint line; exit 1.
fn usage_error(message: &str, hint: &str) -> u8 {
    eprintln!("{message}");
    eprintln!("{hint}");
    1
}

const CONFIG_USAGE: &str = "pi config [-l] [--approve|--no-approve]";

fn package_usage(command: &str) -> &'static str {
    match command {
        "install" => "pi install <source> [-l] [--approve|--no-approve]",
        "remove" => "pi remove <source> [-l] [--approve|--no-approve]",
        "update" => {
            "pi update [source|self|pi] [--self|--extensions|--models|--all] \
             [--extension <source>] [--approve|--no-approve] [--force]"
        }
        _ => "pi list [--approve|--no-approve]",
    }
}

fn package_help(command: &str) -> String {
    let (what, options) = match command {
        "install" => (
            "Installs a package (npm:, git:, a URL or a local path) and adds it to settings.",
            "  -l, --local       in the project's .pi/settings.json\n",
        ),
        "remove" => (
            "Removes a package and its entry from settings (alias: pi uninstall).",
            "  -l, --local       from the project's .pi/settings.json\n",
        ),
        "update" => (
            "Updates pi, the installed packages, or the model catalogs.",
            "  --self                  pi itself (the default without a target)\n  \
             --extensions            the installed packages\n  \
             --models                the model catalogs\n  \
             --all                   pi and the installed packages\n  \
             --extension <source>    one package\n  \
             --force                 reinstall pi even when it is current\n",
        ),
        _ => ("Lists the packages of the user and project settings.", ""),
    };
    format!(
        "Usage:\n  {}\n\n{what}\npi-rs does not have packages yet.\n\nOptions:\n{options}  \
         -a, --approve     trust the project's files for this command\n  \
         -na, --no-approve ignore the project's files for this command\n",
        package_usage(command)
    )
}

/// `install`, `remove` (`uninstall`), `update`, `list`: pi 1.6.0's argument checks, in its order.
fn packages(word: &str, rest: &[String], _: &Path) -> u8 {
    let command = if word == "uninstall" { "remove" } else { word };
    let usage = package_usage(command);
    let mut help = false;
    let mut invalid_option: Option<&str> = None;
    let mut invalid_argument: Option<&str> = None;
    let mut missing_value: Option<&str> = None;
    let mut conflict: Option<&'static str> = None;
    let mut source: Option<&str> = None;
    let (mut own_self, mut extensions, mut models, mut all) = (false, false, false, false);
    let mut extension: Option<&str> = None;
    let is_update = command == "update";
    let mut index = 0;
    while index < rest.len() {
        let arg = rest[index].as_str();
        index += 1;
        let accepted = match arg {
            "-h" | "--help" => {
                help = true;
                true
            }
            "-a" | "--approve" | "-na" | "--no-approve" => true,
            "-l" | "--local" => matches!(command, "install" | "remove"),
            "--self" if is_update => {
                own_self = true;
                true
            }
            "--extensions" if is_update => {
                extensions = true;
                true
            }
            "--models" if is_update => {
                models = true;
                true
            }
            "--all" if is_update => {
                all = true;
                true
            }
            "--force" => is_update,
            "--extension" if is_update => {
                match rest.get(index).map(String::as_str) {
                    Some(value) if !value.starts_with('-') => {
                        if extension.is_some() {
                            conflict = conflict.or(Some("--extension can only be provided once"));
                        } else {
                            extension = Some(value);
                        }
                        index += 1;
                    }
                    _ => missing_value = missing_value.or(Some(arg)),
                }
                true
            }
            _ if arg.starts_with('-') => false,
            _ => {
                match source {
                    None => source = Some(arg),
                    Some(_) => invalid_argument = invalid_argument.or(Some(arg)),
                }
                true
            }
        };
        if !accepted {
            invalid_option = invalid_option.or(Some(arg));
        }
    }
    if is_update {
        conflict = conflict
            .or_else(|| update_conflict(source, own_self, extensions, models, all, extension));
    }
    if help {
        crate::rpc::print_text(&package_help(command));
        return 0;
    }
    if let Some(option) = invalid_option {
        return usage_error(
            &format!("Unknown option {option} for \"{command}\"."),
            &format!("Use \"pi --help\" or \"{usage}\"."),
        );
    }
    let usage_line = format!("Usage: {usage}");
    if let Some(option) = missing_value {
        return usage_error(&format!("Missing value for {option}."), &usage_line);
    }
    if let Some(argument) = invalid_argument {
        return usage_error(&format!("Unexpected argument {argument}."), &usage_line);
    }
    if let Some(conflict) = conflict {
        return usage_error(conflict, &usage_line);
    }
    if matches!(command, "install" | "remove") && source.is_none() {
        return usage_error(&format!("Missing {command} source."), &usage_line);
    }
    not_yet(command, "pi packages are not implemented")
}

/// The first conflict among `pi update`'s targets, as pi 1.6.0 checks them.
fn update_conflict(
    source: Option<&str>,
    own_self: bool,
    extensions: bool,
    models: bool,
    all: bool,
    extension: Option<&str>,
) -> Option<&'static str> {
    if all && (own_self || extensions || models || extension.is_some()) {
        return Some(
            "--all cannot be combined with --self, --extensions, --models, or --extension",
        );
    }
    if all && source.is_some() {
        return Some("--all cannot be combined with a positional source");
    }
    if models {
        if own_self || extensions || all || extension.is_some() {
            return Some(
                "--models cannot be combined with --self, --extensions, --all, or --extension",
            );
        }
        return source
            .is_some()
            .then_some("--models cannot be combined with a positional source");
    }
    if extension.is_some() {
        if own_self || extensions || all {
            return Some("--extension cannot be combined with --self, --extensions, or --all");
        }
        return source
            .is_some()
            .then_some("--extension cannot be combined with a positional source");
    }
    match source {
        Some(s) if s != "self" && s != "pi" && (extensions || own_self || all) => {
            Some("positional update targets cannot be combined with --self, --extensions, or --all")
        }
        _ => None,
    }
}

/// `pi config`: pi's resource TUI; its arguments checked as pi 1.6.0 checks them.
fn config(_: &str, rest: &[String], _: &Path) -> u8 {
    if rest.iter().any(|a| a == "-h" || a == "--help") {
        crate::rpc::print_text(&format!(
            "Usage:\n  {CONFIG_USAGE}\n\nEnables or disables the resources of installed packages \
             in pi's terminal UI.\npi-rs has no terminal UI and no packages yet.\n"
        ));
        return 0;
    }
    for arg in rest {
        match arg.as_str() {
            "-l" | "--local" | "-a" | "--approve" | "-na" | "--no-approve" => {}
            option if option.starts_with('-') => {
                return usage_error(
                    &format!("Unknown option {option} for \"config\"."),
                    &format!("Use \"pi --help\" or \"{CONFIG_USAGE}\"."),
                );
            }
            argument => {
                return usage_error(
                    &format!("Unexpected argument {argument}."),
                    &format!("Usage: {CONFIG_USAGE}"),
                );
            }
        }
    }
    not_yet("config", "it is pi's terminal UI for package resources")
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
    fn update_conflicts_in_pi_order() {
        assert_eq!(
            update_conflict(None, false, false, false, false, None),
            None
        );
        assert_eq!(
            update_conflict(Some("pi"), true, false, false, false, None),
            None
        );
        assert!(
            update_conflict(None, true, false, false, true, None)
                .unwrap()
                .starts_with("--all cannot be combined with --self")
        );
        assert!(
            update_conflict(Some("x"), false, false, true, false, None)
                .unwrap()
                .starts_with("--models cannot be combined with a positional")
        );
        assert!(
            update_conflict(Some("x"), false, true, false, false, None)
                .unwrap()
                .starts_with("positional update targets")
        );
    }

    #[test]
    fn durations() {
        assert!(is_duration("30m") && is_duration("1H") && is_duration("500ms"));
        assert!(!is_duration("3") && !is_duration("m") && !is_duration("1d"));
    }
}
