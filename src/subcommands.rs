//! The words pi 1.6.0 reserves as the first argument (`pi install …`, `pi auth …`, `pi mcp …`):
//! each is a command of its own and never a prompt, whatever follows it. [`run`] holds the one
//! match that dispatches them to their modules (`login`, `mcp::cli`, `packages::cli`,
//! `auth_command`) — never a session, never a model call.
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

/// `pi install|remove|uninstall|update|list|config`: pi packages (README "Packages").
fn packages(word: &str, rest: &[String], _: &Path) -> u8 {
    crate::packages::cli::run(word, rest)
}

/// `pi auth …`: check or print credentials, log in or out (README "Providers").
fn auth(_: &str, rest: &[String], agent_dir: &Path) -> u8 {
    crate::auth_command::run(rest, agent_dir)
}
