//! `pi login <provider> [github-enterprise-domain] [--no-browser]` and `pi logout <provider>`: subscription logins
//! for machines without pi. The flows are `config::oauth`'s (GitHub Copilot: device code; Anthropic
//! and OpenAI Codex: open a URL, paste the code back); this file is the terminal side: instructions
//! on stderr, the pasted code from stdin, the result stored in auth.json under pi's lock. Radius's
//! lines go to stdout in 1.6.0's words (`pi auth login radius`), its errors to stderr.

use std::io::{BufRead, Write};
use std::path::Path;

use crate::config::auth::Env;
use crate::config::oauth::{self, Endpoints, LoginUi, OAuthError};

/// Runs `login`/`logout` with the words after it; the process exit code.
pub fn run(command: &str, words: &[String], agent_dir: &Path) -> u8 {
    let browser = !words.iter().any(|w| w == "--no-browser");
    let words: Vec<String> = words
        .iter()
        .filter(|w| *w != "--no-browser")
        .cloned()
        .collect();
    let Some(provider) = words.first() else {
        eprintln!(
            "Usage: pi {command} <provider>   (providers: {})",
            oauth::PROVIDERS.join(", ")
        );
        return 2;
    };
    let result = match command {
        "logout" => logout(agent_dir, provider),
        _ => login(
            agent_dir,
            provider,
            words.get(1).map(String::as_str),
            browser,
        ),
    };
    match result {
        // 1.6.0's `pi auth login radius` writes its lines on stdout.
        Ok(message) if command == "login" && provider == oauth::RADIUS_PROVIDER => {
            crate::rpc::print_text(&format!("{message}\n"));
            0
        }
        Ok(message) => {
            eprintln!("{message}");
            0
        }
        Err(message) => {
            eprintln!("Error: {message}");
            1
        }
    }
}

/// Why `pi login`/`pi logout` failed (printed as `Error: <Display>`, exit 1).
#[derive(Debug)]
enum LoginError {
    /// A provider without a subscription login.
    NotSubscription(String),
    OAuth(OAuthError),
}

impl std::fmt::Display for LoginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoginError::NotSubscription(provider) => write!(
                f,
                "no subscription login for {provider} (one of: {}); for API keys, set the \
                 provider's environment variable or add it to auth.json",
                oauth::PROVIDERS.join(", ")
            ),
            LoginError::OAuth(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LoginError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoginError::OAuth(e) => Some(e),
            LoginError::NotSubscription(_) => None,
        }
    }
}

impl From<OAuthError> for LoginError {
    fn from(e: OAuthError) -> LoginError {
        LoginError::OAuth(e)
    }
}

fn login(
    agent_dir: &Path,
    provider: &str,
    enterprise: Option<&str>,
    browser: bool,
) -> Result<String, LoginError> {
    if !oauth::PROVIDERS.contains(&provider) {
        return Err(LoginError::NotSubscription(provider.to_string()));
    }
    let endpoints = Endpoints::from_env(&Env::from_process());
    let entry = oauth::login(
        provider,
        enterprise,
        browser,
        &endpoints,
        agent_dir,
        &mut Terminal {
            stdout: provider == oauth::RADIUS_PROVIDER,
        },
    )?;
    let access = entry
        .get("access")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    oauth::store_login(agent_dir, provider, entry)?;
    let auth_path = agent_dir.join("auth.json");
    if provider != oauth::RADIUS_PROVIDER {
        return Ok(format!(
            "Logged in to {provider}; credentials saved in {}",
            auth_path.display()
        ));
    }
    let mut message = format!(
        "Logged in to Radius. Credentials saved to {}",
        auth_path.display()
    );
    for line in after_radius_login(agent_dir, &endpoints, &access) {
        match line {
            Ok(line) => {
                message.push('\n');
                message.push_str(&line);
            }
            Err(line) => eprintln!("{line}"),
        }
    }
    Ok(message)
}

/// What pi 1.6.0's `pi auth login radius` does once a login or key is saved, and the lines it
/// shows (`Err`: the ones it writes as errors): the account's model catalog fetched at once
/// with the new credential (it replaces the built-in Radius list; not with `PI_OFFLINE`), then
/// the Radius MCP server in the user's mcp.json pointed at the login. Neither undoes the login
/// when it fails.
pub fn after_radius_login(
    agent_dir: &Path,
    endpoints: &Endpoints,
    credential: &str,
) -> Vec<Result<String, String>> {
    let mut lines = Vec::new();
    // 1.6.0's model runtime takes no catalog from the network when PI_OFFLINE is set at all.
    let offline = std::env::var_os("PI_OFFLINE").is_some();
    if !offline && let Err(e) = oauth::refresh_radius_catalog(endpoints, credential, agent_dir) {
        log::warn!("Radius model catalog: {e}");
        lines.push(Ok(
            "The Radius model catalog could not be refreshed; pi retries on next start."
                .to_string(),
        ));
    }
    let url = format!("{}/mcp", oauth::RADIUS_DEFAULT_URL);
    let Some((name, entry)) =
        crate::mcp::config::plan_login_server(agent_dir, &url, oauth::RADIUS_PROVIDER)
    else {
        return lines;
    };
    let path = crate::mcp::config::user_path(agent_dir);
    lines.push(match crate::mcp::config::add_server(&path, &name, entry) {
        Ok(replaced) => Ok(format!(
            "{} MCP server \"{name}\" in {} to use the Radius login.",
            if replaced { "Updated" } else { "Added" },
            path.display()
        )),
        Err(e) => Err(format!("Could not update {}: {e}", path.display())),
    });
    lines
}

fn logout(agent_dir: &Path, provider: &str) -> Result<String, LoginError> {
    if oauth::remove_login(agent_dir, provider)? {
        Ok(format!("Logged out of {provider}"))
    } else {
        Ok(format!("No credentials for {provider} in auth.json"))
    }
}

/// stderr for instructions (stdout for Radius, as 1.6.0), stdin for the pasted code.
struct Terminal {
    stdout: bool,
}

impl LoginUi for Terminal {
    fn show(&mut self, text: &str) {
        if self.stdout {
            crate::rpc::print_text(&format!("{text}\n"));
        } else {
            eprintln!("{text}");
        }
    }

    fn ask(&mut self, prompt: &str) -> Option<String> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_string()),
        }
    }

    fn pasted(&mut self, prompt: &str) -> crossbeam_channel::Receiver<String> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let (sender, lines) = crossbeam_channel::bounded(1);
        // Left blocked on stdin when the callback wins; the process ends after the login.
        let _ = std::thread::Builder::new()
            .name("login-paste".into())
            .spawn(move || {
                let mut line = String::new();
                if let Ok(1..) = std::io::stdin().lock().read_line(&mut line) {
                    let _ = sender.send(line.trim().to_string());
                }
            });
        lines
    }
}
