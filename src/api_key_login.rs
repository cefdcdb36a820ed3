//! `pi auth login <provider> --api-key` as pi 1.6.0 runs it (`cli/auth-login.js` with
//! `auth-terminal.js`): the words checked as 1.6.0 checks every `auth login`, the provider found
//! by id or display name (any case) among the built-ins and models.json's providers, a terminal
//! required on stdin and stdout, then the provider's key login: one secret read without echo
//! after `Enter <key name>: ` (models.json's own providers: `Enter API key: `), or the steps of
//! Amazon Bedrock, Google Vertex AI and the two Cloudflare providers (a numbered choice, notes,
//! lines read with echo and the secret). The result is stored as `{"type": "api_key", "key"?,
//! "env"?}` in auth.json under pi's lock, `Saved API key for <name>. Credentials saved to <path>`
//! goes to stdout and an empty models-store.json is left as 1.6.0 leaves it. Errors go to stderr
//! with exit 1. A Radius key is followed by what a Radius sign-in is followed by
//! (`login::after_radius_login`). An `auth login` without `--api-key` that parses goes on to
//! `pi login` (`login.rs`).
//!
//! Not here: the pi.dev catalog refresh 1.6.0 runs for other providers after saving (pi-rs
//! refreshes no catalog from pi.dev).

use std::io::IsTerminal;
use std::path::Path;

use serde_json::{Map, Value, json};

const USAGE: &str = "pi auth login <provider> [--api-key] [--no-browser]";

/// How 1.6.0 saves a provider's API key.
#[derive(Clone, Copy, PartialEq, Debug)]
enum KeyLogin {
    /// One secret prompt for the key of this name.
    Prompt(&'static str),
    /// 1.6.0's Amazon Bedrock steps: bearer token, AWS profile or the credential chain.
    Bedrock,
    /// 1.6.0's Google Vertex AI steps: API key, ADC or a service account file.
    Vertex,
    /// A Cloudflare key and account id, and with `true` an AI Gateway id.
    Cloudflare(bool),
    /// An account sign-in only.
    None,
}

/// 1.6.0's built-in providers: id, display name and key login (`ai:dist/providers/*.js`).
const PROVIDERS: &[(&str, &str, KeyLogin)] = &[
    ("amazon-bedrock", "Amazon Bedrock", KeyLogin::Bedrock),
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
        KeyLogin::Cloudflare(true),
    ),
    (
        "cloudflare-workers-ai",
        "Cloudflare Workers AI",
        KeyLogin::Cloudflare(false),
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
    ("google-vertex", "Google Vertex AI", KeyLogin::Vertex),
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

/// A provider one can name: its id, display name and key login.
#[derive(Clone, Debug, PartialEq)]
struct Provider {
    id: String,
    name: String,
    login: KeyLogin,
}

/// The built-in providers, then models.json's own: a models.json `name` renames a built-in, and
/// a provider only models.json defines gets 1.6.0's generic `API key` prompt.
fn providers(file_providers: &[(String, Option<String>)]) -> Vec<Provider> {
    let mut list: Vec<Provider> = PROVIDERS
        .iter()
        .map(|&(id, name, login)| Provider {
            id: id.to_string(),
            name: name.to_string(),
            login,
        })
        .collect();
    for (id, name) in file_providers {
        match list.iter_mut().find(|p| &p.id == id) {
            Some(builtin) => {
                if let Some(name) = name {
                    builtin.name = name.clone();
                }
            }
            None => list.push(Provider {
                id: id.clone(),
                name: name.clone().unwrap_or_else(|| id.clone()),
                login: KeyLogin::Prompt("API key"),
            }),
        }
    }
    list
}

/// The provider named by id or display name, ignoring case and surrounding whitespace.
fn find<'a>(list: &'a [Provider], reference: &str) -> Option<&'a Provider> {
    let wanted = reference.trim().to_lowercase();
    if wanted.is_empty() {
        return None;
    }
    list.iter()
        .find(|p| p.id.to_lowercase() == wanted || p.name.to_lowercase() == wanted)
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
    let registry = crate::config::registry::Registry::load(&agent_dir.join("models.json"));
    let list = providers(&registry.file_provider_names());
    let Some(provider) = find(&list, &request.provider) else {
        let shown: String = request
            .provider
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        eprintln!("Unknown provider \"{shown}\".");
        let mut ids: Vec<&str> = list.iter().map(|p| p.id.as_str()).collect();
        ids.sort_unstable();
        eprintln!("Providers: {}", ids.join(", "));
        return 1;
    };
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        eprintln!("\"{USAGE}\" requires an interactive terminal");
        return 1;
    }
    let name = provider.name.as_str();
    let credential = match ask_credential(provider.login) {
        Ok(credential) => credential,
        Err(Refusal::NoKeyLogin) => {
            eprintln!("{name} has no API key login. Omit --api-key to sign in.");
            return 1;
        }
        Err(Refusal::Cancelled) => {
            eprintln!("Login cancelled.");
            return 1;
        }
    };
    let key = credential
        .get("key")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Err(e) = crate::config::oauth::store_login(agent_dir, &provider.id, credential) {
        eprintln!("Failed to log in to {name}: {e}");
        return 1;
    }
    crate::rpc::print_text(&format!(
        "Saved API key for {name}. Credentials saved to {}\n",
        agent_dir.join("auth.json").display()
    ));
    if let Err(e) = crate::config::models_store::ensure_file(agent_dir) {
        log::warn!("{e}");
    }
    // A Radius key gets what a Radius sign-in gets (1.6.0 does both after either).
    if provider.id == crate::config::oauth::RADIUS_PROVIDER
        && let Some(key) = key
    {
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

/// Why no credential came of the prompts.
enum Refusal {
    /// The provider has an account sign-in only.
    NoKeyLogin,
    /// Ctrl+C or the end of input at a prompt.
    Cancelled,
}

const AWS_CHAIN_DOCS: (&str, &str) = (
    "AWS credential provider chain",
    "https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html",
);
const ADC_DOCS: (&str, &str) = (
    "Application Default Credentials",
    "https://cloud.google.com/docs/authentication/provide-credentials-adc",
);

/// Asks the terminal for the provider's credential as 1.6.0's key login does; the auth.json
/// entry (`type`, then `key` and `env` when given).
fn ask_credential(login: KeyLogin) -> Result<Map<String, Value>, Refusal> {
    let ask = |prompt: &str| read_line(&format!("{prompt}: "), false).ok_or(Refusal::Cancelled);
    let ask_text = |prompt: &str| read_line(&format!("{prompt}: "), true).ok_or(Refusal::Cancelled);
    let mut entry = Map::new();
    entry.insert("type".into(), json!("api_key"));
    let mut env = Map::new();
    match login {
        KeyLogin::None => return Err(Refusal::NoKeyLogin),
        KeyLogin::Prompt(label) => {
            entry.insert("key".into(), json!(ask(&format!("Enter {label}"))?));
        }
        KeyLogin::Bedrock => {
            let choice = select(
                "Select Amazon Bedrock authentication method:",
                &[
                    "Bearer token",
                    "AWS profile",
                    "Existing AWS credential chain",
                ],
            )?;
            if choice == 0 {
                entry.insert(
                    "key".into(),
                    json!(ask("Enter Amazon Bedrock bearer token")?),
                );
            } else {
                inform(
                    "Amazon Bedrock supports AWS profiles, IAM credentials, and role-based credentials.",
                    AWS_CHAIN_DOCS,
                );
                if choice == 1 {
                    env.insert(
                        "AWS_PROFILE".into(),
                        json!(ask_text("Enter AWS profile name")?),
                    );
                } else {
                    ask_text("Configure AWS credentials, then press Enter to continue")?;
                }
            }
        }
        KeyLogin::Vertex => {
            let choice = select(
                "Select Google Vertex AI authentication method:",
                &[
                    "Google Cloud API key",
                    "Application Default Credentials",
                    "Service account credentials file",
                ],
            )?;
            if choice == 0 {
                entry.insert("key".into(), json!(ask("Enter Google Cloud API key")?));
            } else {
                inform(
                    if choice == 1 {
                        "Run `gcloud auth application-default login`, then provide the project and location."
                    } else {
                        "Provide a service account credentials file, project, and location."
                    },
                    ADC_DOCS,
                );
                let project = ask_text("Enter Google Cloud project ID")?;
                let location = ask_text("Enter Google Cloud location")?;
                env.insert("GOOGLE_CLOUD_PROJECT".into(), json!(project));
                env.insert("GOOGLE_CLOUD_LOCATION".into(), json!(location));
                if choice == 2 {
                    let file = ask_text("Enter service account credentials file path")?;
                    // 1.6.0 keeps an empty path out of the entry.
                    if !file.is_empty() {
                        env.insert("GOOGLE_APPLICATION_CREDENTIALS".into(), json!(file));
                    }
                }
            }
        }
        KeyLogin::Cloudflare(gateway) => {
            entry.insert("key".into(), json!(ask("Enter Cloudflare API key")?));
            env.insert(
                "CLOUDFLARE_ACCOUNT_ID".into(),
                json!(ask_text("Enter Cloudflare account ID")?),
            );
            if gateway {
                env.insert(
                    "CLOUDFLARE_GATEWAY_ID".into(),
                    json!(ask_text("Enter Cloudflare AI Gateway ID")?),
                );
            }
        }
    }
    if !env.is_empty() {
        entry.insert("env".into(), Value::Object(env));
    }
    Ok(entry)
}

/// 1.6.0's numbered choice: the message, `  <n>. <label>` lines, then `Select 1-<n>: ` until the
/// answer is one of the numbers; the chosen index.
fn select(message: &str, labels: &[&str]) -> Result<usize, Refusal> {
    let mut shown = format!("{message}\n");
    for (index, label) in labels.iter().enumerate() {
        shown.push_str(&format!("  {}. {label}\n", index + 1));
    }
    crate::rpc::print_text(&shown);
    loop {
        let answer =
            read_line(&format!("Select 1-{}: ", labels.len()), true).ok_or(Refusal::Cancelled)?;
        let answer = answer.trim();
        if !answer.is_empty() && answer.bytes().all(|b| b.is_ascii_digit()) {
            let number = answer.parse::<usize>().unwrap_or(0);
            if (1..=labels.len()).contains(&number) {
                return Ok(number - 1);
            }
        }
        crate::rpc::print_text(&format!("Enter a number from 1 to {}.\n", labels.len()));
    }
}

/// A note with one link, as 1.6.0 shows an `info` step.
fn inform(message: &str, (label, url): (&str, &str)) {
    crate::rpc::print_text(&format!("{message}\n  {label}: {url}\n"));
}

/// Shows `prompt` on stdout and reads a line from the terminal on stdin in raw mode, as 1.6.0
/// reads a secret (`readSecret`, no echo) or a text answer (readline, echoed): Enter ends it,
/// Backspace takes the last character off, escape sequences (arrow keys) and other control
/// characters are ignored; Ctrl+C, Ctrl+D on an empty text line or the end of input cancels
/// (`None`). The terminal's mode is restored before returning.
fn read_line(prompt: &str, echo: bool) -> Option<String> {
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
    let value = read_line_bytes(fd, echo);
    // SAFETY: restores the mode read above.
    unsafe { libc::tcsetattr(fd, libc::TCSANOW, &saved) };
    // readline ends a line with "\r\n" (the terminal makes it "\r\r\n"); readSecret with "\n".
    crate::rpc::print_text(if echo { "\r\n" } else { "\n" });
    value
}

/// The line's characters up to Enter, shown as typed when `echo`; `None` on Ctrl+C, Ctrl+D on an
/// empty echoed line, the end of input or a read error.
fn read_line_bytes(fd: i32, echo: bool) -> Option<String> {
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
        let mut shown = String::new();
        for c in text.chars() {
            match c {
                '\r' | '\n' => {
                    if echo {
                        crate::rpc::print_text(&shown);
                    }
                    return Some(value);
                }
                '\u{3}' => return None,
                '\u{4}' if echo && value.is_empty() => return None,
                '\u{7f}' | '\u{8}' if value.pop().is_some() => shown.push_str("\u{8} \u{8}"),
                // Backspace on an empty line: nothing to take off.
                '\u{7f}' | '\u{8}' => {}
                c if c >= ' ' => {
                    value.push(c);
                    shown.push(c);
                }
                _ => {}
            }
        }
        if echo {
            crate::rpc::print_text(&shown);
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
        let list = providers(&[
            ("groq".into(), Some("My Groq".into())),
            ("local".into(), None),
        ]);
        let id = |reference: &str| find(&list, reference).map(|p| p.id.as_str());
        assert_eq!(id(" OpenCode Zen "), Some("opencode"));
        assert_eq!(id("GROQ"), Some("groq"));
        assert_eq!(id("my groq"), Some("groq"));
        assert_eq!(id("Local").map(str::to_string), Some("local".into()));
        assert_eq!(
            find(&list, "local").unwrap().login,
            KeyLogin::Prompt("API key")
        );
        assert_eq!(id("nosuch"), None);
    }
}
