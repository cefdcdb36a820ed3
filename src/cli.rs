//! Command line: lexopt → `Args`. Pure (no I/O), so it is tested without a process. Flags are
//! pi's (FACTS §1.2). pi's multi-letter short flags (`-nt`, `-nbt`, `-nc`, …) are rewritten to their
//! long forms before lexopt sees them, since lexopt would read `-nt` as `-n -t`.

use std::ffi::OsString;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// No mode and no `-p`: pi's TUI, which pi-rs does not have.
    #[default]
    Interactive,
    Text,
    Json,
    Rpc,
    /// `--mode acp`: the Agent Client Protocol for editors (README "ACP").
    Acp,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Args {
    pub mode: Mode,
    pub print: bool,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub models: Option<String>,
    pub thinking: Option<String>,
    pub api_key: Option<String>,
    pub system_prompt: Option<String>,
    pub append_system_prompt: Vec<String>,
    pub tools: Option<Vec<String>>,
    /// How `--tools` was spelled (`-t` or `--tools`), for its error.
    pub tools_flag: &'static str,
    /// `--exclude-tools` / `-xt`: names or patterns taken out last.
    pub exclude_tools: Option<Vec<String>>,
    pub no_tools: bool,
    pub no_builtin_tools: bool,
    pub name: Option<String>,
    pub no_session: bool,
    pub session_dir: Option<String>,
    pub session: Option<String>,
    pub continue_session: bool,
    pub resume: bool,
    pub fork: Option<String>,
    /// `--session-id <id>`.
    pub session_id: Option<String>,
    pub extensions: Vec<String>,
    pub no_extensions: bool,
    /// `--approve` (true) / `--no-approve` (false): this run's project-trust decision.
    pub project_trust: Option<bool>,
    /// `--no-mcp`: no MCP servers this run.
    pub no_mcp: bool,
    pub skills: Vec<String>,
    pub no_skills: bool,
    pub prompt_templates: Vec<String>,
    pub no_prompt_templates: bool,
    pub themes: Vec<String>,
    pub no_themes: bool,
    pub no_context_files: bool,
    /// `--export <session> [out.html]`.
    pub export: Option<(String, Option<String>)>,
    pub offline: bool,
    /// `--sandbox <mode>`: the tool sandbox (README "Sandbox").
    pub sandbox: Option<crate::sandbox::Mode>,
    /// `--list-models [search]`.
    pub list_models: Option<Option<String>>,
    /// `--rpc-profile default|legacy` (checked by main, with the env var and setting).
    pub rpc_profile: Option<String>,
    pub verbose: bool,
    /// Unknown `--name [value]` options, kept (as pi does) until the extensions have registered
    /// their flags: `--name=value` and `--name value` give the text, a bare `--name` gives true.
    pub extension_flags: Vec<(String, serde_json::Value)>,
    pub help: bool,
    pub version: bool,
    /// Bare words: messages for print mode.
    pub messages: Vec<String>,
    /// `@file` arguments.
    pub file_args: Vec<String>,
}

/// What a run does with stdin/stdout, from `--mode`/`-p` and whether stdin is a terminal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RunMode {
    Rpc,
    Acp,
    Print(crate::rpc::print_mode::Output),
    /// No mode on a terminal: pi's TUI, which pi-rs does not have ([`NO_TUI`]).
    NoTui,
}

impl Args {
    /// Why a flag pi-rs cannot honour is refused (never silently ignored).
    pub fn unsupported(&self) -> Option<&'static str> {
        (!self.themes.is_empty())
            .then_some("--theme styles pi's interactive TUI, which pi-rs does not have")
    }

    /// A `--tools` list pi refuses (names mixed with `+name`/`-name`, or a modifier with a
    /// pattern), as pi words it: `--tools: <problem>`.
    pub fn tool_list_error(&self) -> Option<String> {
        let problem = crate::tools::selection::tool_list_error(self.tools.as_deref()?)?;
        Some(format!("{}: {problem}", self.tools_flag))
    }

    /// `--no-tools` (everything) over `--no-builtin-tools` (the built-ins).
    pub fn no_tools(&self) -> crate::tools::selection::NoTools {
        use crate::tools::selection::NoTools;
        match (self.no_tools, self.no_builtin_tools) {
            (true, _) => NoTools::All,
            (false, true) => NoTools::Builtin,
            (false, false) => NoTools::Keep,
        }
    }

    /// `--mode rpc`, `--mode json`, `--mode text` or `-p`; without either, print mode when stdin
    /// is piped (as pi does) and [`RunMode::NoTui`] on a terminal.
    pub fn run_mode(&self, stdin_is_terminal: bool) -> RunMode {
        use crate::rpc::print_mode::Output;
        match (self.mode, self.print) {
            (Mode::Rpc, _) => RunMode::Rpc,
            (Mode::Acp, _) => RunMode::Acp,
            (Mode::Json, _) => RunMode::Print(Output::Json),
            (Mode::Text, _) | (Mode::Interactive, true) => RunMode::Print(Output::Text),
            (Mode::Interactive, false) if stdin_is_terminal => RunMode::NoTui,
            (Mode::Interactive, false) => RunMode::Print(Output::Text),
        }
    }

    /// The session flags, for `session::open`.
    pub fn session_choice(&self) -> crate::session::open::StartChoice<'_> {
        crate::session::open::StartChoice {
            no_session: self.no_session,
            fork: self.fork.as_deref(),
            session: self.session.as_deref(),
            continue_recent: self.continue_session,
            resume: self.resume,
            session_dir: self.session_dir.as_deref(),
            session_id: self.session_id.as_deref(),
        }
    }

    /// The model flags, for `config::start_model`.
    pub fn model_flags(&self) -> crate::config::start_model::ModelFlags<'_> {
        crate::config::start_model::ModelFlags {
            provider: self.provider.as_deref(),
            model: self.model.as_deref(),
            models: self.models.as_deref(),
            thinking: self.thinking.as_deref(),
            api_key: self.api_key.as_deref(),
        }
    }

    /// `--extension`, `--skill` and `--prompt-template` paths stay relative to the directory
    /// pi-rs was started in when a resumed session moves it elsewhere (`~` paths are left to
    /// expand).
    pub fn absolutize_paths(&mut self, started_in: &std::path::Path) {
        let absolute = |path: &mut String| {
            if !path.starts_with('~') {
                *path = started_in.join(&*path).to_string_lossy().into_owned();
            }
        };
        self.extensions.iter_mut().for_each(absolute);
        self.skills.iter_mut().for_each(absolute);
        self.prompt_templates.iter_mut().for_each(absolute);
    }
}

/// A command-line error; main prints `Error: <text>` and exits 2.
#[derive(Debug, PartialEq)]
pub struct CliError(pub String);

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<lexopt::Error> for CliError {
    fn from(e: lexopt::Error) -> CliError {
        CliError(e.to_string())
    }
}

fn expand_short_aliases(arg: OsString) -> OsString {
    let long = match arg.to_str() {
        Some("-nt") => "--no-tools",
        Some("-nbt") => "--no-builtin-tools",
        Some("-ne") => "--no-extensions",
        Some("-na") => "--no-approve",
        Some("-ns") => "--no-skills",
        Some("-np") => "--no-prompt-templates",
        Some("-nc") => "--no-context-files",
        Some("-xt") => "--exclude-tools",
        _ => return arg,
    };
    OsString::from(long)
}

fn string(value: OsString, flag: &str) -> Result<String, CliError> {
    value
        .into_string()
        .map_err(|_| CliError(format!("{flag} needs a UTF-8 value")))
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, CliError> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args.into_iter().map(expand_short_aliases));
    let mut out = Args::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("mode") => {
                out.mode = match string(parser.value()?, "--mode")?.as_str() {
                    "rpc" => Mode::Rpc,
                    "acp" => Mode::Acp,
                    "json" => Mode::Json,
                    "text" => Mode::Text,
                    other => {
                        return Err(CliError(format!(
                            "Invalid --mode \"{other}\". Valid values: text, json, rpc, acp"
                        )));
                    }
                }
            }
            Short('p') | Long("print") => out.print = true,
            Long("provider") => out.provider = Some(string(parser.value()?, "--provider")?),
            Long("model") => out.model = Some(string(parser.value()?, "--model")?),
            Long("models") => out.models = Some(string(parser.value()?, "--models")?),
            Long("thinking") => out.thinking = Some(string(parser.value()?, "--thinking")?),
            Long("api-key") => out.api_key = Some(string(parser.value()?, "--api-key")?),
            Long("system-prompt") => {
                out.system_prompt = Some(string(parser.value()?, "--system-prompt")?)
            }
            Long("append-system-prompt") => out
                .append_system_prompt
                .push(string(parser.value()?, "--append-system-prompt")?),
            Short('t') | Long("tools") => {
                out.tools_flag = if matches!(arg, Short('t')) {
                    "-t"
                } else {
                    "--tools"
                };
                out.tools = Some(comma_list(string(parser.value()?, "--tools")?));
            }
            Long("exclude-tools") => {
                let list = string(parser.value()?, "--exclude-tools")?;
                out.exclude_tools = Some(comma_list(list));
            }
            Long("no-tools") => out.no_tools = true,
            Long("no-builtin-tools") => out.no_builtin_tools = true,
            Short('n') | Long("name") => out.name = Some(string(parser.value()?, "--name")?),
            Long("no-session") => out.no_session = true,
            Long("rpc-profile") => {
                out.rpc_profile = Some(string(parser.value()?, "--rpc-profile")?)
            }
            Long("session-dir") => {
                out.session_dir = Some(string(parser.value()?, "--session-dir")?)
            }
            Long("session") => out.session = Some(string(parser.value()?, "--session")?),
            Short('c') | Long("continue") => out.continue_session = true,
            Short('r') | Long("resume") => out.resume = true,
            Long("fork") => out.fork = Some(string(parser.value()?, "--fork")?),
            Long("session-id") => out.session_id = Some(string(parser.value()?, "--session-id")?),
            Short('e') | Long("extension") => {
                out.extensions.push(string(parser.value()?, "--extension")?)
            }
            Long("no-extensions") => out.no_extensions = true,
            Short('a') | Long("approve") => out.project_trust = Some(true),
            Long("no-approve") => out.project_trust = Some(false),
            Long("no-mcp") => out.no_mcp = true,
            Long("skill") => out.skills.push(string(parser.value()?, "--skill")?),
            Long("no-skills") => out.no_skills = true,
            Long("prompt-template") => out
                .prompt_templates
                .push(string(parser.value()?, "--prompt-template")?),
            Long("no-prompt-templates") => out.no_prompt_templates = true,
            Long("theme") => out.themes.push(string(parser.value()?, "--theme")?),
            Long("no-themes") => out.no_themes = true,
            Long("no-context-files") => out.no_context_files = true,
            Long("export") => {
                let session = string(parser.value()?, "--export")?;
                let output = next_bare_word(&mut parser);
                out.export = Some((session, output));
            }
            Long("offline") => out.offline = true,
            Long("sandbox") => {
                let mode = string(parser.value()?, "--sandbox")?;
                out.sandbox = Some(crate::sandbox::Mode::parse(&mode).ok_or_else(|| {
                    CliError(format!(
                        "Invalid --sandbox \"{mode}\". Valid values: {}",
                        crate::sandbox::Mode::NAMES
                    ))
                })?);
            }
            Long("list-models") => out.list_models = Some(next_bare_word(&mut parser)),
            Long("verbose") => out.verbose = true,
            Short('h') | Long("help") => out.help = true,
            Short('v') | Long("version") => out.version = true,
            Value(value) => {
                let word = string(value, "an argument")?;
                match word.strip_prefix('@') {
                    Some(file) => out.file_args.push(file.to_string()),
                    None => out.messages.push(word),
                }
            }
            Long(other) => {
                let name = other.to_string();
                let value = match parser.optional_value() {
                    Some(value) => string(value, &format!("--{name}"))?.into(),
                    None => {
                        flag_word(&mut parser).map_or(serde_json::Value::Bool(true), Into::into)
                    }
                };
                out.extension_flags.push((name, value));
            }
            Short(other) => return Err(CliError(format!("Unknown option: -{other}"))),
        }
    }
    Ok(out)
}

/// The value of an unknown `--name`: the next argument unless it starts with `-` or `@` (pi's rule).
fn flag_word(parser: &mut lexopt::Parser) -> Option<String> {
    let mut raw = parser.try_raw_args()?;
    let next = raw.peek()?.to_str()?;
    if next.starts_with('-') || next.starts_with('@') {
        return None;
    }
    let word = next.to_string();
    raw.next();
    Some(word)
}

/// A comma-separated flag value: trimmed entries, empty ones dropped.
fn comma_list(list: String) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Takes the next argument if it is a plain word (not a flag), for flags with an optional value.
fn next_bare_word(parser: &mut lexopt::Parser) -> Option<String> {
    let mut raw = parser.try_raw_args()?;
    let next = raw.peek()?.to_str()?;
    if next.starts_with('-') {
        return None;
    }
    let word = next.to_string();
    raw.next();
    Some(word)
}

/// `--version`: the pi version whose protocol pi-rs implements, bare, as pi prints it; with
/// `--verbose` a second line names pi-rs and its own version.
pub fn version_text(verbose: bool) -> String {
    let mut text = format!("{}\n", crate::rpc::PI_PROTOCOL_VERSION);
    if verbose {
        text.push_str(&format!(
            "pi-rs {} (the pi {} RPC protocol)\n",
            env!("CARGO_PKG_VERSION"),
            crate::rpc::PI_PROTOCOL_VERSION
        ));
    }
    text
}

/// `--help`: names pi-rs's own version and the pi protocol version it speaks.
pub fn help_text() -> String {
    format!(
        "pi-rs {} — the pi coding agent's RPC mode, in Rust (pi {} protocol)\n\n{HELP}",
        env!("CARGO_PKG_VERSION"),
        crate::rpc::PI_PROTOCOL_VERSION
    )
}

const HELP: &str = "\
Usage:
  pi --mode rpc [options]        JSONL commands on stdin, responses and events on stdout
  pi --mode acp [options]        the Agent Client Protocol (editors: Zed, JetBrains, Neovim)
  pi -p [options] [@file] <msg>  one prompt, the answer's text on stdout (also: piped stdin)
  pi --mode json [options] <msg> one prompt, every event as a JSON line on stdout
  pi --list-models [search]      list the models you have credentials for
  pi --export <session> [out]    write a session file as HTML
  pi login <provider> [domain]   subscription login: github-copilot (device code; optional
                                 GitHub Enterprise domain), xai, kimi-coding, meta (device
                                 code), radius (browser callback; --no-browser: device code),
                                 openai (Sign in with ChatGPT), openrouter (browser callback or
                                 pasted URL), anthropic, openai-codex (paste code)
  pi logout <provider>           remove the provider's credentials from auth.json
  pi auth login|logout <provider>  the same as pi login / pi logout
  pi mcp add|remove|list         edit mcp.json (the MCP servers)
  pi install|remove|update|list|config, pi auth print-api-key|print-bearer-token|check
                                 pi's package and credential commands: their usage is checked,
                                 but pi-rs does not have them yet (exit 1, never a prompt)

Options:
  --mode rpc|acp|json|text       protocol mode (text is -p; acp: the Agent Client Protocol)
  -p, --print                    print mode: answer the prompt and exit
  --provider <name>              provider for --model
  --model <pattern>              model id, provider/id, or pattern; optional :<thinking> suffix
  --models <patterns>            the models cycle_model walks (comma-separated)
  --thinking <level>             off, minimal, low, medium, high, xhigh, max
  --api-key <key>                key for the selected model's provider (not stored)
  --system-prompt <text|file>    replace the system prompt's body
  --append-system-prompt <text|file>  append to the system prompt (repeatable)
  -t, --tools <a,b,...>          only these tools (read, bash, edit, write, grep, find, ls,
                                 extension tools, MCP tools mcp__<server>__<tool>; * patterns),
                                 or +name/-name entries that adjust the default set
  -xt, --exclude-tools <a,b,...> take these tools out (names or * patterns), applied last
  -nt, --no-tools                no tools at all
  -nbt, --no-builtin-tools       no built-in tools (extension and MCP tools stay)
  --no-mcp                       no MCP servers this run
  -n, --name <name>              session display name
  --no-session                   keep the session in memory only
  --session <file|id>            resume this session
  -c, --continue                 continue the most recent session of this folder
  --fork <file|id>               start a new session from a copy of this one
  --session-id <id>              this folder's session with that id, else a new one with it
                                 (with --fork: the copy's id)
  --session-dir <dir>            where session files go
  -e, --extension <path>         load an executable extension (repeatable); -ne: none
  --skill <path>                 load a skill (repeatable); -ns, --no-skills: none
  --prompt-template <path>       load a prompt template (repeatable); -np: none
  -nc, --no-context-files        no AGENTS.md / CLAUDE.md
  -a, --approve                  trust this project's .pi/ resources for this run
  -na, --no-approve              ignore this project's .pi/ resources for this run
  --rpc-profile <name>           protocol generation on stdout: default (newest pi) or legacy
                                 (pi <= 0.83 clients); also PI_RPC_PROFILE, setting rpcProfile
  --offline                      no network besides the model provider
  --sandbox <mode>               confine tools: off, read-only, workspace-write
  --verbose                      more logging on stderr (or set RUST_LOG)
  -h, --help                     this text
  -v, --version                  the pi version whose protocol this speaks (--verbose: also pi-rs's)

Not in pi-rs: pi's interactive terminal UI (--resume, --theme).
Config: $PI_CODING_AGENT_DIR (default ~/.pi/agent): settings.json, models.json, auth.json.
";

pub const NO_TUI: &str = "\
pi-rs has no interactive terminal UI: it is pi's RPC mode, meant to be driven by a program.

  pi --mode rpc                  start the JSONL protocol on stdin/stdout
  pi --help                      all options

For the interactive TUI, use the reference pi (npm install -g @mariozechner/pi-coding-agent).
";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(args: &[&str]) -> Result<Args, CliError> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn rpc_mode_with_common_flags() {
        let args = parse_str(&[
            "--mode",
            "rpc",
            "--provider",
            "anthropic",
            "--model",
            "sonnet:high",
            "-n",
            "work",
            "--no-session",
            "--tools",
            "read,bash",
            "--append-system-prompt",
            "a",
            "--append-system-prompt",
            "b",
        ])
        .unwrap();
        assert_eq!(args.mode, Mode::Rpc);
        assert_eq!(args.provider.as_deref(), Some("anthropic"));
        assert_eq!(args.model.as_deref(), Some("sonnet:high"));
        assert_eq!(args.name.as_deref(), Some("work"));
        assert!(args.no_session);
        assert_eq!(
            args.tools,
            Some(vec!["read".to_string(), "bash".to_string()])
        );
        assert_eq!(args.append_system_prompt, vec!["a", "b"]);
    }

    #[test]
    fn multi_letter_short_flags() {
        let args = parse_str(&["-nt", "-nc", "-nbt"]).unwrap();
        assert!(args.no_tools && args.no_context_files && args.no_builtin_tools);
    }

    #[test]
    fn no_mcp_and_mcp_tool_patterns() {
        let args = parse_str(&["--no-mcp", "--tools", "read,mcp__docs__*"]).unwrap();
        assert!(args.no_mcp);
        assert_eq!(
            args.tools,
            Some(vec!["read".to_string(), "mcp__docs__*".to_string()])
        );
    }

    #[test]
    fn tool_lists_and_their_errors() {
        let args = parse_str(&["-t", "-write,+grep", "-xt", "bash, e*"]).unwrap();
        assert_eq!(
            args.tools,
            Some(vec!["-write".to_string(), "+grep".to_string()])
        );
        assert_eq!(
            args.exclude_tools,
            Some(vec!["bash".to_string(), "e*".to_string()])
        );
        assert_eq!(args.tool_list_error(), None);
        let mixed = parse_str(&["-t", "read,+grep"]).unwrap();
        assert_eq!(
            mixed.tool_list_error().as_deref(),
            Some("-t: tool names cannot be mixed with +name or -name entries")
        );
    }

    #[test]
    fn optional_values() {
        assert_eq!(
            parse_str(&["--list-models"]).unwrap().list_models,
            Some(None)
        );
        assert_eq!(
            parse_str(&["--list-models", "son"]).unwrap().list_models,
            Some(Some("son".to_string()))
        );
        assert_eq!(
            parse_str(&["--list-models", "--verbose"])
                .unwrap()
                .list_models,
            Some(None)
        );
        let print = parse_str(&["-p", "hello", "@a.txt"]).unwrap();
        assert!(print.print);
        assert_eq!(print.messages, vec!["hello"]);
        assert_eq!(print.file_args, vec!["a.txt"]);
    }

    #[test]
    fn unknown_long_options_are_kept_for_extensions() {
        let args = parse_str(&["--plan", "--level", "high", "--x=3", "--y", "@f", "msg"]).unwrap();
        assert_eq!(
            args.extension_flags,
            vec![
                ("plan".to_string(), serde_json::Value::Bool(true)),
                ("level".to_string(), "high".into()),
                ("x".to_string(), "3".into()),
                ("y".to_string(), serde_json::Value::Bool(true)),
            ]
        );
        assert_eq!(args.file_args, vec!["f"]);
        assert_eq!(args.messages, vec!["msg"]);
    }

    #[test]
    fn unknown_flags_and_bad_modes_are_errors() {
        assert_eq!(
            parse_str(&["-x"]),
            Err(CliError("Unknown option: -x".into()))
        );
        assert!(parse_str(&["--mode", "tui"]).is_err());
        assert!(parse_str(&["--model"]).is_err());
    }
}
