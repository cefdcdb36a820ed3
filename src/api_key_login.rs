//! `pi auth login <provider> --api-key` as pi 1.6.0 runs it (`cli/auth-login.js` with
//! `auth-terminal.js`): the words checked as 1.6.0 checks every `auth login`, the provider found
//! by id or display name (any case), a terminal required on stdin and stdout, the key read
//! without echo after `Enter <key name>: `, stored as `{"type": "api_key", "key"}` in auth.json
//! under pi's lock, and `Saved API key for <name>. Credentials saved to <path>` on stdout. Errors
//! go to stderr with exit 1. A Radius key is followed by what a Radius sign-in is followed by
//! (`login::after_radius_login`). An `auth login` without `--api-key` that parses goes on to
//! `pi login` (`login.rs`).
//!
//! Not here: the multi-step credential prompts of Amazon Bedrock, Google Vertex AI and the two
//! Cloudflare providers (refused with a message), the key logins of models.json providers, and
//! the catalog refresh 1.6.0 runs after saving (pi-rs refreshes no catalog from pi.dev).

use std::io::IsTerminal;
use std::path::Path;

use serde_json::{Map, Value, json};

const USAGE: &str = "pi auth login <provider> [--api-key] [--no-browser]";

/// How 1.6.0 saves a provider's API key.
#[derive(Clone, Copy, PartialEq, Debug)]
enum KeyLogin {
    /// One secret prompt for the key of this name.
    Prompt(&'static str),
    /// Several prompts (credentials and ids) pi-rs does not ask for yet.
    Steps,
    /// An account sign-in only.
    None,
}

/// 1.6.0's built-in providers: id, display name and key login (`ai:dist/providers/*.js`).
const PROVIDERS: &[(&str, &str, KeyLogin)] = &[
    ("amazon-bedrock", "Amazon Bedrock", KeyLogin::Steps),
    ("ant-ling", "Ant Ling", KeyLogin::Prompt("Ant Ling API key")),
    (
        "anthropic",
        "Anthropic",
        KeyLogin::Prompt("Anthropic API key"),
    ),
    ("azure", "Azure", KeyLogin::Prompt("Azure OpenAI API key")),
    ("baseten", "Baseten", KeyLogin::Prompt("Baseten API key")),
    ("cerebras", "Cerebras", KeyLogin::Prompt("Cerebras API key")),
    (
        "cloudflare-ai-gateway",
        "Cloudflare AI Gateway",
        KeyLogin::Steps,
    ),
    (
        "cloudflare-workers-ai",
        "Cloudflare Workers AI",
        KeyLogin::Steps,
    ),
    ("deepseek", "DeepSeek", KeyLogin::Prompt("DeepSeek API key")),
    (
        "fireworks",
        "Fireworks",
        KeyLogin::Prompt("Fireworks API key"),
    ),
    (
        "github-copilot",
        "GitHub Copilot",
        KeyLogin::Prompt("GitHub Copilot token"),
    ),
    ("google", "Google", KeyLogin::Prompt("Gemini API key")),
    ("google-vertex", "Google Vertex AI", KeyLogin::Steps),
    ("groq", "Groq", KeyLogin::Prompt("Groq API key")),
    (
        "huggingface",
        "Hugging Face",
        KeyLogin::Prompt("Hugging Face token"),
    ),
    (
        "kimi-coding",
        "Kimi For Coding",
        KeyLogin::Prompt("Kimi API key"),
    ),
    ("meta", "Meta", KeyLogin::Prompt("Meta Model API key")),
    ("minimax", "MiniMax", KeyLogin::Prompt("MiniMax API key")),
    (
        "minimax-cn",
        "MiniMax CN",
        KeyLogin::Prompt("MiniMax CN API key"),
    ),
    ("mistral", "Mistral", KeyLogin::Prompt("Mistral API key")),
    (
        "moonshotai",
        "Moonshot AI",
        KeyLogin::Prompt("Moonshot AI API key"),
    ),
    (
        "moonshotai-cn",
        "Moonshot AI CN",
        KeyLogin::Prompt("Moonshot AI API key"),
    ),
    ("nvidia", "NVIDIA", KeyLogin::Prompt("NVIDIA API key")),
    ("openai", "OpenAI", KeyLogin::Prompt("OpenAI API key")),
    ("openai-codex", "OpenAI Codex", KeyLogin::None),
    (
        "opencode",
        "OpenCode Zen",
        KeyLogin::Prompt("OpenCode API key"),
    ),
    (
        "opencode-go",
        "OpenCode Go",
        KeyLogin::Prompt("OpenCode API key"),
    ),
    (
        "openrouter",
        "OpenRouter",
        KeyLogin::Prompt("OpenRouter API key"),
    ),
    (
        "qwen-token-plan",
        "Qwen Token Plan Team",
        KeyLogin::Prompt("Qwen Token Plan Team API key"),
    ),
    (
        "qwen-token-plan-cn",
        "Qwen Token Plan Team CN",
        KeyLogin::Prompt("Qwen Token Plan Team CN API key"),
    ),
    (
        "qwen-token-plan-individual",
        "Qwen Token Plan Individual",
        KeyLogin::Prompt("Qwen Token Plan Individual API key"),
    ),
    (
        "qwen-token-plan-individual-cn",
        "Qwen Token Plan Individual CN",
        KeyLogin::Prompt("Qwen Token Plan Individual CN API key"),
    ),
    ("radius", "Radius", KeyLogin::Prompt("Radius API key")),
    ("together", "Together", KeyLogin::Prompt("Together API key")),
    ("typesafe", "TypeSafe", KeyLogin::Prompt("TypeSafe API key")),
    (
        "vercel-ai-gateway",
        "Vercel AI Gateway",
        KeyLogin::Prompt("Vercel AI Gateway API key"),
    ),
    ("xai", "xAI", KeyLogin::Prompt("xAI API key")),
    ("xiaomi", "Xiaomi", KeyLogin::Prompt("Xiaomi API key")),
    (
        "xiaomi-token-plan-ams",
        "Xiaomi Token Plan AMS",
        KeyLogin::Prompt("Xiaomi Token Plan AMS API key"),
    ),
    (
        "xiaomi-token-plan-cn",
        "Xiaomi Token Plan CN",
        KeyLogin::Prompt("Xiaomi Token Plan CN API key"),
    ),
    (
        "xiaomi-token-plan-sgp",
        "Xiaomi Token Plan SGP",
        KeyLogin::Prompt("Xiaomi Token Plan SGP API key"),
    ),
    ("zai", "Z.AI", KeyLogin::Prompt("Z.AI API key")),
    (
        "zai-coding-cn",
        "Z.AI Coding CN",
        KeyLogin::Prompt("Z.AI Coding CN API key"),
    ),
];

/// What the words after `auth login` ask for.
#[derive(Debug, PartialEq)]
struct Request {
    provider: String,
    api_key: bool,
    browser: bool,
}

/// 1.6.0's `parseLoginRequest`; the refusal text otherwise.
fn parse(words: &[String]) -> Result<Request, String> {
    let usage = || format!("Usage: {USAGE}");
    let mut request = Request {
        provider: String::new(),
        api_key: false,
        browser: true,
    };
    for word in words {
        match word.as_str() {
            "--api-key" => request.api_key = true,
            "--no-browser" => request.browser = false,
            _ if word.starts_with('-') || !request.provider.is_empty() => return Err(usage()),
            _ => request.provider = word.clone(),
        }
    }
    if request.provider.is_empty() {
        return Err(usage());
    }
    if request.api_key && !request.browser {
        return Err(
            "--no-browser only applies to account sign-in; omit it with --api-key.".to_string(),
        );
    }
    Ok(request)
}

/// The provider named by id or display name, ignoring case and surrounding whitespace.
fn find(reference: &str) -> Option<&'static (&'static str, &'static str, KeyLogin)> {
    let wanted = reference.trim().to_lowercase();
    if wanted.is_empty() {
        return None;
    }
    PROVIDERS
        .iter()
        .find(|(id, name, _)| *id == wanted || name.to_lowercase() == wanted)
}

/// Runs `pi auth login <words…>`; the process exit code.
pub fn run(words: &[String], agent_dir: &Path) -> u8 {
    let request = match parse(words) {
        Ok(request) => request,
        Err(text) => {
            eprintln!("{text}");
            return 1;
        }
    };
    if !request.api_key {
        let mut rest = vec![request.provider];
        if !request.browser {
            rest.push("--no-browser".into());
        }
        return crate::login::run("login", &rest, agent_dir);
    }
    let Some(&(id, name, key_login)) = find(&request.provider) else {
        let shown: String = request
            .provider
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        eprintln!("Unknown provider \"{shown}\".");
        let mut ids: Vec<&str> = PROVIDERS.iter().map(|(id, _, _)| *id).collect();
        ids.sort_unstable();
        eprintln!("Providers: {}", ids.join(", "));
        return 1;
    };
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        eprintln!("\"{USAGE}\" requires an interactive terminal");
        return 1;
    }
    let label = match key_login {
        KeyLogin::Prompt(label) => label,
        KeyLogin::None => {
            eprintln!("{name} has no API key login. Omit --api-key to sign in.");
            return 1;
        }
        KeyLogin::Steps => {
            eprintln!(
                "pi-rs cannot ask for {name} credentials yet; set its environment variables or add them to auth.json."
            );
            return 1;
        }
    };
    let Some(key) = read_secret(&format!("Enter {label}: ")) else {
        eprintln!("Login cancelled.");
        return 1;
    };
    let mut entry = Map::new();
    entry.insert("type".into(), json!("api_key"));
    entry.insert("key".into(), Value::String(key.clone()));
    if let Err(e) = crate::config::oauth::store_login(agent_dir, id, entry) {
        eprintln!("Failed to log in to {name}: {e}");
        return 1;
    }
    crate::rpc::print_text(&format!(
        "Saved API key for {name}. Credentials saved to {}\n",
        agent_dir.join("auth.json").display()
    ));
    // A Radius key gets what a Radius sign-in gets (1.6.0 does both after either).
    if id == crate::config::oauth::RADIUS_PROVIDER {
        let env = crate::config::auth::Env::from_process();
        let endpoints = crate::config::oauth::Endpoints::from_env(&env);
        for line in crate::login::after_radius_login(agent_dir, &endpoints, &key) {
            match line {
                Ok(line) => crate::rpc::print_text(&format!("{line}\n")),
                Err(line) => eprintln!("{line}"),
            }
        }
    }
    0
}

/// Shows `prompt` on stdout and reads a line from the terminal on stdin without echo, as 1.6.0's
/// `readSecret` does: raw mode, Enter ends it, Backspace takes the last character off, escape
/// sequences (arrow keys) and other control characters are ignored; Ctrl+C or the end of input
/// cancels (`None`). The terminal's mode is restored before returning.
fn read_secret(prompt: &str) -> Option<String> {
    let fd = libc::STDIN_FILENO;
    // SAFETY: termios is plain data filled by tcgetattr on our own stdin.
    let mut saved: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd is stdin, checked to be a terminal by the caller.
    if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
        return None;
    }
    let mut raw = saved;
    raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
    raw.c_iflag &= !(libc::ICRNL | libc::IXON);
    raw.c_cc[libc::VMIN] = 1;
    raw.c_cc[libc::VTIME] = 0;
    // SAFETY: as above; the mode is put back below on every path.
    if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw) } != 0 {
        return None;
    }
    crate::rpc::print_text(prompt);
    let value = read_secret_bytes(fd);
    // SAFETY: restores the mode read above.
    unsafe { libc::tcsetattr(fd, libc::TCSANOW, &saved) };
    crate::rpc::print_text("\n");
    value
}

/// The secret's characters up to Enter; `None` on Ctrl+C, the end of input or a read error.
fn read_secret_bytes(fd: i32) -> Option<String> {
    let mut value = String::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut buffer = [0u8; 256];
    loop {
        // SAFETY: reads into a stack buffer of the given length.
        let n = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return None;
        }
        let chunk = &buffer[..n as usize];
        // A chunk that starts with ESC is a key's escape sequence (1.6.0 drops the whole chunk).
        if chunk.first() == Some(&0x1b) {
            continue;
        }
        pending.extend_from_slice(chunk);
        // Keep an incomplete UTF-8 sequence for the next read.
        let valid = match std::str::from_utf8(&pending) {
            Ok(text) => text.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => pending.len(),
        };
        let text = String::from_utf8_lossy(&pending[..valid]).into_owned();
        pending.drain(..valid);
        for c in text.chars() {
            match c {
                '\r' | '\n' => return Some(value),
                '\u{3}' => return None,
                '\u{7f}' | '\u{8}' => {
                    value.pop();
                }
                c if c >= ' ' => value.push(c),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn words_parse_as_pi_parses_them() {
        assert_eq!(
            parse(&words("groq --api-key")),
            Ok(Request {
                provider: "groq".into(),
                api_key: true,
                browser: true
            })
        );
        let usage = Err(format!("Usage: {USAGE}"));
        assert_eq!(parse(&words("")), usage);
        assert_eq!(parse(&words("--api-key")), usage);
        assert_eq!(parse(&words("a b")), usage);
        assert_eq!(parse(&words("a --json")), usage);
        assert!(
            parse(&words("a --api-key --no-browser"))
                .unwrap_err()
                .starts_with("--no-browser only applies")
        );
        assert_eq!(find(" OpenCode Zen ").map(|p| p.0), Some("opencode"));
        assert_eq!(find("GROQ").map(|p| p.0), Some("groq"));
        assert_eq!(find("nosuch"), None);
    }
}
