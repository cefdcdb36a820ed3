//! pi-rs: the pi coding agent's RPC mode as a synchronous, thread-per-component program.
//!
//! `main` parses the command line, loads config, resolves the model, wires the threads
//! (stdin-reader → agent on the main thread → stdout-writer), runs the agent loop and turns its
//! end into the exit code. It joins the writer (so every record is flushed) but never the stdin
//! reader, which may still sit in a blocking read.

mod agent;
mod child;
mod cli;
mod config;
mod deadline;
mod disk;
mod export;
mod extensions;
mod glob;
mod ids;
mod ignore;
mod js;
mod login;
mod mcp;
mod messages;
mod provider;
mod resources;
mod rpc;
mod sandbox;
mod session;
mod signals;
#[cfg(test)]
mod test_support;
mod time;
mod tools;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use base64::Engine;
use cli::{Args, Mode};
use config::{Config, Diagnostic, Model, ThinkingLevel};
use rpc::print_mode;

fn main() -> ExitCode {
    // `pi login <provider>` / `pi logout <provider>`: subscription logins, no agent.
    let words: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    if let Some(command @ ("login" | "logout")) = words.first().map(String::as_str) {
        init_logging(false);
        return ExitCode::from(login::run(
            command,
            &words[1..],
            &config::agent_dir_from_env(),
        ));
    }
    // `pi mcp …` is a shell command of its own, not a session.
    let mut raw = std::env::args_os().skip(1);
    if raw.next().is_some_and(|first| first == "mcp") {
        init_logging(false);
        let Ok(cwd) = std::env::current_dir() else {
            eprintln!("Error: cannot read the working directory");
            return ExitCode::from(1);
        };
        let agent_dir = config::agent_dir_from_env();
        let trusted = Config::load(agent_dir.clone(), cwd.clone(), None).project_trusted();
        return ExitCode::from(mcp::cli::run(raw.collect(), &agent_dir, &cwd, trusted));
    }
    let args = match cli::parse(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("Error: {e}");
            eprintln!("Run `pi --help` for the options.");
            return ExitCode::from(2);
        }
    };
    init_logging(args.verbose);
    tools::path_guard::mark_not_dumpable();
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("Error: {message}");
            ExitCode::from(1)
        }
    }
}

fn init_logging(verbose: bool) {
    let default = if verbose { "debug" } else { "warn" };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default))
        .target(env_logger::Target::Stderr)
        .init();
}

/// `--version`: the pi version whose protocol pi-rs implements, bare, as pi prints it; with
/// `--verbose` a second line names pi-rs and its own version.
fn version_text(verbose: bool) -> String {
    let mut text = format!("{}\n", rpc::PI_PROTOCOL_VERSION);
    if verbose {
        text.push_str(&format!(
            "pi-rs {} (the pi {} RPC protocol)\n",
            env!("CARGO_PKG_VERSION"),
            rpc::PI_PROTOCOL_VERSION
        ));
    }
    text
}

fn run(args: Args) -> Result<u8, String> {
    // Help and version are answers, not diagnostics: stdout (no protocol runs in these cases).
    if args.help {
        rpc::print_text(&cli::help_text());
        return Ok(0);
    }
    if args.version {
        rpc::print_text(&version_text(args.verbose));
        return Ok(0);
    }
    reject_unsupported(&args)?;

    let mut cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the working directory: {e}"))?;
    let agent_dir = config::agent_dir_from_env();
    let mut config = Config::load(agent_dir.clone(), cwd.clone(), args.project_trust);
    report(&config.diagnostics)?;

    let profile = rpc_profile(&args, &config)?;

    if let Some((session_path, output)) = &args.export {
        return export_session(&cwd, session_path, output.as_deref());
    }
    if let Some(search) = &args.list_models {
        rpc::print_text(&config.list_models(search.as_deref()));
        return Ok(0);
    }
    let print_output = match (args.mode, args.print) {
        (Mode::Rpc, _) => None,
        (Mode::Json, _) => Some(print_mode::Output::Json),
        (Mode::Text, _) | (Mode::Interactive, true) => Some(print_mode::Output::Text),
        (Mode::Interactive, false) if stdin_is_terminal() => {
            eprint!("{}", cli::NO_TUI);
            return Ok(1);
        }
        // Piped stdin without a mode: print mode, as pi does.
        (Mode::Interactive, false) => Some(print_mode::Output::Text),
    };
    if print_output.is_none() && !args.file_args.is_empty() {
        return Err("@file arguments are not supported in RPC mode".into());
    }
    let print_messages = match print_output {
        Some(_) => print_messages(&args, &cwd)?,
        None => Vec::new(),
    };

    // MCP servers' resolved `${VAR}` / `!command` values join the redaction set before any
    // session log or the stdout writer exists.
    let mcp_config = (!args.no_mcp).then(|| {
        mcp::config::load(
            &agent_dir,
            &cwd,
            config.project_trusted(),
            &mcp::config::system_resolver(&cwd),
        )
    });
    if let Some(mcp_config) = &mcp_config {
        config.add_known_secrets(&mcp_config.secrets);
    }
    // Every session log written from here on (forks and new sessions too) redacts these.
    session::set_default_redactions(config.known_secrets());
    let (mut session, resumed) = open_session(&args, &config, &cwd)?;
    // pi runs a session opened by `--session` in its own directory (settings, resources and tools
    // resolve there) and refuses one whose directory is gone; `--continue` stays here.
    if let Some(message) = session.missing_cwd_error(&cwd) {
        eprintln!("{message}");
        return Ok(1);
    }
    let mut args = args;
    if session.cwd() != cwd {
        absolutize_cli_paths(&mut args, &cwd);
        cwd = session.cwd().to_path_buf();
        let reported = std::mem::take(&mut config.diagnostics);
        config = Config::load(agent_dir.clone(), cwd.clone(), args.project_trust);
        config.diagnostics.retain(|d| !reported.contains(d));
        report(&config.diagnostics)?;
        session::set_default_redactions(config.known_secrets());
    }
    let context = session.context();
    let patterns: Vec<String> = match &args.models {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect(),
        None => config.enabled_models().unwrap_or_default(),
    };
    let scoped = if patterns.is_empty() {
        Vec::new()
    } else {
        let (scoped, diagnostics) = config.resolve_model_scope(&patterns);
        report(&diagnostics)?;
        scoped
    };
    let (model, thinking) = choose_model(&args, &mut config, &context, &scoped, resumed)?;
    let tool_names = active_tools(&args);
    let passthrough = config
        .setting("shellEnvPassthrough")
        .and_then(|v| v.as_array())
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    tools::env::set_passthrough(passthrough);
    let loaded = resources::discovery::load_resources(&resources::discovery::LoadOptions {
        cwd: cwd.clone(),
        agent_dir: agent_dir.clone(),
        home: config::home_dir(),
        project_settings_skills: config.scoped_list(true, "skills"),
        project_settings_prompts: config.scoped_list(true, "prompts"),
        user_settings_skills: config.scoped_list(false, "skills"),
        user_settings_prompts: config.scoped_list(false, "prompts"),
        cli_skills: args.skills.clone(),
        cli_prompt_templates: args.prompt_templates.clone(),
        no_skills: args.no_skills,
        no_prompt_templates: args.no_prompt_templates,
        skip_project: !config.project_trust.trusted,
    });
    for warning in &loaded.warnings {
        log::info!("{warning}");
    }
    let (sandbox, sandbox_warnings) = sandbox::Sandbox::new(
        config.scoped_setting(false, "sandbox"),
        config.scoped_setting(true, "sandbox"),
        args.sandbox,
        &cwd,
        &agent_dir,
    );
    for warning in sandbox_warnings {
        eprintln!("Warning: {warning}");
    }
    let (extensions, extension_events, approvals, mut startup_events) =
        start_extensions(&args, &config, &session, &sandbox.policy());
    // Skipped project resources are said once, on stderr and to the client.
    if let Some(warning) = config.project_trust.warning() {
        eprintln!("Warning: {warning}");
        startup_events.insert(0, rpc::events::Event::notify(&warning, "warning"));
    }
    if let Some(warning) = sandbox::unenforced_warning(&sandbox.policy(), sandbox::support()) {
        eprintln!("Warning: {warning}");
        startup_events.push(rpc::events::Event::notify(&warning, "warning"));
    }
    let extension_tools = extensions.as_ref().map(|h| h.tools()).unwrap_or_default();
    let system_prompt = system_prompt(&args, &config, &tool_names, &extension_tools, &loaded);

    // A new session records its model and level at once; a resumed one only what changed.
    let record_model = !model.is_placeholder()
        && (!resumed
            || context.model.as_ref() != Some(&(model.provider.clone(), model.id.clone())));
    if record_model && let Err(e) = session.append_model_change(&model.provider, &model.id) {
        log::error!("could not record the model: {e}");
    }
    if (!resumed || context.thinking_level.is_none() || context.thinking_level != Some(thinking))
        && let Err(e) = session.append_thinking_level_change(thinking)
    {
        log::error!("could not record the thinking level: {e}");
    }
    if let Some(name) = args
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let _ = session.append_session_info(name);
    }

    let (signal_tx, signals) = crossbeam_channel::bounded(4);
    if let Err(e) = signals::spawn(signal_tx) {
        log::warn!("signals are not handled: {e}");
    }
    let mcp = mcp_config.map(|loaded| {
        let filter = mcp::ToolFilter::from_cli(args.tools.as_deref(), args.no_tools);
        mcp::McpHost::start(loaded, filter, cwd.clone(), agent_dir.clone())
    });
    // Spill files a session file may refer to outlive the process; otherwise they go at exit.
    let session_persisted = session.file_path().is_some();
    let setup = agent::AgentSetup {
        mcp,
        extensions,
        extension_events,
        approvals,
        sandbox,
        startup_events,
        profile,
        resources: loaded,
        scoped_models: scoped,
        messages: context.messages,
        config,
        session,
        model,
        thinking,
        tool_names,
        system_prompt,
    };
    let result = match print_output {
        None => Ok(run_rpc(setup, signals)),
        Some(output) => run_print(setup, signals, output, print_messages),
    };
    if !session_persisted {
        tools::bash::remove_spill_dir();
    }
    result
}

/// The protocol generation: `--rpc-profile`, else `PI_RPC_PROFILE`, else settings `rpcProfile`,
/// else the newest. A wrong flag is an error; a wrong env var or setting a warning.
fn rpc_profile(args: &Args, config: &Config) -> Result<rpc::Profile, String> {
    const EXPECTED: &str = "expected \"default\" or \"legacy\"";
    if let Some(name) = &args.rpc_profile {
        return rpc::Profile::parse(name)
            .ok_or_else(|| format!("Invalid --rpc-profile \"{name}\": {EXPECTED}"));
    }
    let env = std::env::var("PI_RPC_PROFILE")
        .ok()
        .filter(|v| !v.is_empty());
    let (name, source) = match (env, config.setting("rpcProfile")) {
        (Some(name), _) => (name, "PI_RPC_PROFILE"),
        (None, Some(serde_json::Value::String(name))) => (name.clone(), "setting rpcProfile"),
        (None, Some(other)) => (other.to_string(), "setting rpcProfile"),
        (None, None) => return Ok(rpc::Profile::Default),
    };
    Ok(rpc::Profile::parse(&name).unwrap_or_else(|| {
        eprintln!("Warning: ignoring {source} \"{name}\": {EXPECTED}");
        rpc::Profile::Default
    }))
}

/// RPC mode: stdin-reader → agent → stdout-writer.
fn run_rpc(setup: agent::AgentSetup, signals: crossbeam_channel::Receiver<i32>) -> u8 {
    let (writer_events_tx, writer_events) = crossbeam_channel::bounded(1);
    let capacity = setup.profile.writer_capacity();
    let stdout = Box::new(std::io::stdout());
    let writer = match rpc::stdout_writer::spawn(stdout, writer_events_tx, capacity) {
        Ok(writer) => writer,
        Err(e) => {
            eprintln!("Error: cannot start the stdout writer: {e}");
            return 1;
        }
    };
    let (stdin_tx, stdin) = crossbeam_channel::bounded(64);
    rpc::stdin_reader::spawn(Box::new(std::io::stdin()), stdin_tx);
    let channels = agent::Channels {
        stdin,
        writer_events,
        signals,
        out: writer.records,
    };
    let code = agent::Agent::new(setup, channels).run();
    // The agent (and with it the last record sender) is gone: the writer flushes and ends.
    if writer.thread.join().is_err() {
        log::error!("the stdout writer panicked");
    }
    code as u8
}

/// Print and JSON modes: the print driver feeds the messages and owns stdout.
fn run_print(
    setup: agent::AgentSetup,
    signals: crossbeam_channel::Receiver<i32>,
    output: print_mode::Output,
    messages: Vec<print_mode::PrintMessage>,
) -> Result<u8, String> {
    let header = setup.session.header().to_value().clone();
    let (records_tx, records) = crossbeam_channel::bounded(setup.profile.writer_capacity());
    let (input_tx, input) = crossbeam_channel::bounded(64);
    // Never fires: stdout belongs to the driver, which simply stops reading when it is gone.
    let (_writer_events_tx, writer_events) = crossbeam_channel::bounded(1);
    let driver = print_mode::spawn(output, header, messages, records, input_tx)
        .map_err(|e| format!("cannot start the print driver: {e}"))?;
    let channels = agent::Channels {
        stdin: input,
        writer_events,
        signals,
        out: records_tx,
    };
    let agent_code = agent::Agent::new(setup, channels).run();
    let driver_code = driver.join().unwrap_or(1);
    Ok(if agent_code != 0 {
        agent_code as u8
    } else {
        driver_code
    })
}

fn stdin_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal()
}

/// The messages print mode sends: the first is piped stdin + `@file` contents + the first CLI
/// message, concatenated as pi does; the rest follow one by one.
fn print_messages(
    args: &Args,
    cwd: &std::path::Path,
) -> Result<Vec<print_mode::PrintMessage>, String> {
    let mut first = String::new();
    if !stdin_is_terminal() {
        let mut piped = String::new();
        use std::io::Read;
        std::io::stdin()
            .read_to_string(&mut piped)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        if !piped.trim().is_empty() {
            first.push_str(&piped);
        }
    }
    let mut images = Vec::new();
    for file in &args.file_args {
        let path = cwd.join(file);
        let bytes =
            std::fs::read(&path).map_err(|_| format!("File not found: {}", path.display()))?;
        if bytes.is_empty() {
            continue;
        }
        let shown = path.display();
        // Sniffed from the head as the read tool does (pi uses one detector for both).
        let head = &bytes[..bytes.len().min(tools::read::SNIFF_BYTES)];
        match tools::read::sniff_image_mime(head) {
            Some(mime) => {
                images.push(messages::ImageContent {
                    data: base64::engine::general_purpose::STANDARD.encode(&bytes),
                    mime_type: mime.into(),
                });
                first.push_str(&format!("<file name=\"{shown}\"></file>\n"));
            }
            None => {
                let text = String::from_utf8_lossy(&bytes);
                first.push_str(&format!("<file name=\"{shown}\">\n{text}\n</file>\n"));
            }
        }
    }
    let mut rest = args.messages.iter();
    if let Some(message) = rest.next() {
        first.push_str(message);
    }
    let mut messages = Vec::new();
    if !first.is_empty() || !images.is_empty() {
        messages.push(print_mode::PrintMessage {
            text: first,
            images,
        });
    }
    messages.extend(rest.map(|text| print_mode::PrintMessage {
        text: text.clone(),
        images: Vec::new(),
    }));
    if messages.is_empty() {
        return Err("no message given: pass it as an argument, an @file, or on stdin".into());
    }
    Ok(messages)
}

/// The session to start with, and whether it was resumed (FACTS §9.2, §1.2): `--no-session`
/// (memory only), `--fork` (a copy in this project's session dir), `--session <path|id>`,
/// `--continue` (most recent here), else a new one. Files are written lazily.
fn open_session(
    args: &Args,
    config: &Config,
    cwd: &std::path::Path,
) -> Result<(session::SessionLog, bool), String> {
    use session::{SessionArg, SessionLog};
    let other_choices = args.session.is_some() || args.continue_session || args.resume;
    if args.fork.is_some() && (other_choices || args.no_session) {
        return Err(
            "--fork cannot be combined with --session, --continue, --resume or --no-session".into(),
        );
    }
    if args.no_session {
        return Ok((SessionLog::in_memory(cwd), false));
    }
    if args.resume {
        return Err(
            "--resume needs pi's interactive picker; use --session <id> or --continue".into(),
        );
    }
    let dir = match &args.session_dir {
        Some(dir) => cwd.join(config::expand_tilde(dir, &config::home_dir())),
        None => config::session_dir_from_env()
            .or_else(|| config.session_dir())
            .map(|d| cwd.join(d))
            .unwrap_or_else(|| session::default_session_dir(&config.agent_dir, cwd)),
    };
    let sessions_root = config.agent_dir.join("sessions");
    let open = |path: &std::path::Path| -> Result<SessionLog, String> {
        let (log, warnings) = SessionLog::open(path, Some(&dir), cwd).map_err(|e| e.0)?;
        for warning in warnings {
            eprintln!("Warning: {warning}");
        }
        Ok(log)
    };
    let resolve = |arg: &str| -> Result<(std::path::PathBuf, bool), String> {
        match session::resolve_session_arg(arg, &dir, &sessions_root) {
            SessionArg::Path(path) => Ok((cwd.join(path), true)),
            SessionArg::Local(path) => Ok((path, true)),
            SessionArg::Global { path, .. } => Ok((path, false)),
            SessionArg::NotFound => Err(format!("No session found matching '{arg}'")),
        }
    };
    if let Some(arg) = &args.fork {
        let (path, _) = resolve(arg)?;
        if !path.is_file() {
            return Err(format!("Session file not found: {}", path.display()));
        }
        let source = open(&path)?;
        let copy = match source.leaf_id() {
            Some(_) => source.clone_into(cwd)?,
            None => SessionLog::create_with_parent(&dir, cwd, Some(&path.to_string_lossy()))
                .map_err(|e| e.0)?,
        };
        return Ok((copy, true));
    }
    if let Some(arg) = &args.session {
        let (path, local) = resolve(arg)?;
        if !local {
            // pi asks whether to fork a session of another project; without a terminal pi-rs
            // forks it into this project, leaving the original untouched.
            eprintln!(
                "Warning: session {arg} belongs to another project; continuing in a forked copy"
            );
            let source = open(&path)?;
            return Ok((source.clone_into(cwd)?, true));
        }
        return Ok((open(&path)?, true));
    }
    if args.continue_session
        && let Some(path) = session::find_most_recent(&dir)
    {
        let mut log = open(&path)?;
        log.set_cwd(cwd);
        return Ok((log, true));
    }
    Ok((SessionLog::create(&dir, cwd).map_err(|e| e.0)?, false))
}

/// `--extension`, `--skill` and `--prompt-template` paths stay relative to the directory pi-rs
/// was started in when a resumed session moves it elsewhere (`~` paths are left to expand).
fn absolutize_cli_paths(args: &mut Args, started_in: &std::path::Path) {
    let absolute = |path: &mut String| {
        if !path.starts_with('~') {
            *path = started_in.join(&*path).to_string_lossy().into_owned();
        }
    };
    args.extensions.iter_mut().for_each(absolute);
    args.skills.iter_mut().for_each(absolute);
    args.prompt_templates.iter_mut().for_each(absolute);
}

/// Extensions (executables) and the approval gate. The host also runs with no extension when
/// approval rules may need to ask the client.
fn start_extensions(
    args: &Args,
    config: &Config,
    session: &session::SessionLog,
    sandbox: &sandbox::Policy,
) -> (
    Option<extensions::ExtensionHost>,
    crossbeam_channel::Receiver<extensions::ExtensionEvent>,
    extensions::approval::ApprovalPolicy,
    Vec<rpc::events::Event>,
) {
    let (policy, warnings) =
        extensions::approval::ApprovalPolicy::from_settings(config.setting("approvals"));
    for warning in warnings {
        eprintln!("Warning: {warning}");
    }
    let specs = extensions::discover(&extensions::ExtensionSources {
        cli: args.extensions.iter().map(PathBuf::from).collect(),
        project_settings: config
            .scoped_list(true, "extensions")
            .into_iter()
            .map(PathBuf::from)
            .collect(),
        user_settings: config
            .scoped_list(false, "extensions")
            .into_iter()
            .map(PathBuf::from)
            .collect(),
        cwd: config.cwd.clone(),
        agent_dir: config.agent_dir.clone(),
        no_extensions: args.no_extensions,
        skip_project: !config.project_trust.trusted,
    });
    let (events_tx, events) = crossbeam_channel::bounded(256);
    if specs.is_empty() && !policy.is_enabled() {
        return (None, crossbeam_channel::never(), policy, Vec::new());
    }
    let handshake = extensions::protocol::Handshake {
        cwd: config.cwd.to_string_lossy().into_owned(),
        session_id: session.id().to_string(),
        session_file: session
            .file_path()
            .map(|p| p.to_string_lossy().into_owned()),
        flag_values: Default::default(),
    };
    // Extensions are trusted code the user installed: confined only with `sandbox.extensions`.
    let confine = sandbox.extensions.then_some(sandbox);
    let (host, errors) = extensions::ExtensionHost::start(specs, &handshake, confine, events_tx);
    let mut policy = policy;
    policy.set_extension_tools(host.tools().into_iter().map(|t| t.decl.name));
    let startup_events = errors.iter().map(|e| e.event()).collect();
    (Some(host), events, policy, startup_events)
}

/// `pi --export <session.jsonl> [out.html]`: writes the page and prints its path.
fn export_session(
    cwd: &std::path::Path,
    session_path: &str,
    output: Option<&str>,
) -> Result<u8, String> {
    let path = cwd.join(session_path);
    if !path.is_file() {
        return Err(format!("File not found: {}", path.display()));
    }
    let (log, warnings) = session::SessionLog::open(&path, None, cwd).map_err(|e| e.0)?;
    for warning in warnings {
        eprintln!("Warning: {warning}");
    }
    let output = output
        .map(String::from)
        .unwrap_or_else(|| export::default_output_name(&path));
    let input = export::ExportInput {
        header: log.header().to_value().clone(),
        entries: log.entries_since(None).unwrap_or_default(),
        leaf_id: log.leaf_id().map(str::to_string),
        system_prompt: String::new(),
        tools: Vec::new(),
        redactions: log.redactions(),
    };
    export::export_to_file(&input, &cwd.join(&output))?;
    eprintln!("Exported to: {output}");
    Ok(0)
}

/// Flags pi-rs cannot honour are refused, never silently ignored.
fn reject_unsupported(args: &Args) -> Result<(), String> {
    if !args.themes.is_empty() {
        return Err("--theme styles pi's interactive TUI, which pi-rs does not have".into());
    }
    Ok(())
}

/// Prints startup warnings (config problems never stop pi-rs: built-ins stay usable).
fn report(diagnostics: &[Diagnostic]) -> Result<(), String> {
    let mut stderr = std::io::stderr().lock();
    for Diagnostic::Warning(text) in diagnostics {
        let _ = writeln!(stderr, "Warning: {text}");
    }
    Ok(())
}

/// The starting model and thinking level (FACTS §1.8): `--model` (resolved among all models),
/// else settings/defaults via the registry, else the placeholder. Thinking: `--thinking` >
/// `:level` suffix > settings default > medium, clamped to the model.
fn choose_model(
    args: &Args,
    config: &mut Config,
    resumed: &session::SessionContext,
    scoped: &[config::ScopedModel],
    resuming: bool,
) -> Result<(Model, ThinkingLevel), String> {
    let mut suffix_level = None;
    let model = match &args.model {
        Some(pattern) => {
            let resolved = config.resolve_cli_model(args.provider.as_deref(), pattern)?;
            if let Some(warning) = &resolved.warning {
                eprintln!("Warning: {warning}");
            }
            suffix_level = resolved.thinking;
            Some(resolved.model)
        }
        None => None,
    };
    if let Some(key) = &args.api_key {
        let Some(model) = &model else {
            return Err("--api-key requires a model to be specified via --model, --provider/--model, or --models".into());
        };
        config.set_runtime_api_key(&model.provider, key.clone());
    }
    // A resumed session keeps its model if it still exists and has credentials.
    let session_model = resumed.model.as_ref().and_then(|(provider, id)| {
        config
            .find_model(provider, id)
            .filter(|m| config.has_auth(&m.provider))
            .cloned()
    });
    // Scoped models (--models / enabledModels) come before the saved default, unless resuming;
    // the saved default wins if it is in scope.
    let scoped_choice = (!resuming && model.is_none())
        .then(|| {
            let saved = scoped.iter().find(|s| {
                Some(s.model.provider.as_str()) == config.default_provider()
                    && Some(s.model.id.as_str()) == config.default_model()
            });
            saved.or(scoped.first()).cloned()
        })
        .flatten();
    if let Some(choice) = &scoped_choice {
        suffix_level = suffix_level.or(choice.thinking);
    }
    let model = model
        .or(scoped_choice.map(|s| s.model))
        .or(session_model)
        .or_else(|| config.initial_model())
        .unwrap_or_else(Model::placeholder);
    let flag_level = match args.thinking.as_deref() {
        Some(text) => match ThinkingLevel::parse(text) {
            Some(level) => Some(level),
            None => {
                eprintln!(
                    "Warning: Invalid thinking level \"{text}\". Valid values: off, minimal, low, medium, high, xhigh, max"
                );
                None
            }
        },
        None => None,
    };
    let wanted = flag_level
        .or(suffix_level)
        .or(resumed.thinking_level)
        .or_else(|| config.default_thinking_level())
        .unwrap_or(ThinkingLevel::Medium);
    let thinking = model.clamp_thinking_level(wanted);
    Ok((model, thinking))
}

fn active_tools(args: &Args) -> Vec<String> {
    if args.no_tools || args.no_builtin_tools {
        return Vec::new();
    }
    match &args.tools {
        Some(list) => list
            .iter()
            .filter(|name| tools::ALL_TOOLS.contains(&name.as_str()))
            .cloned()
            .collect(),
        None => tools::DEFAULT_TOOLS.iter().map(|s| s.to_string()).collect(),
    }
}

fn system_prompt(
    args: &Args,
    config: &Config,
    tool_names: &[String],
    extension_tools: &[extensions::ExtensionTool],
    loaded: &resources::discovery::Resources,
) -> String {
    let cwd = &config.cwd;
    let custom = match &args.system_prompt {
        Some(value) => Some(resources::text_or_file(value, cwd)),
        None => resources::discover_prompt_file(
            "SYSTEM.md",
            cwd,
            &config.agent_dir,
            config.project_trust.trusted,
        ),
    };
    let append: Vec<String> = if args.append_system_prompt.is_empty() {
        resources::discover_prompt_file(
            "APPEND_SYSTEM.md",
            cwd,
            &config.agent_dir,
            config.project_trust.trusted,
        )
        .into_iter()
        .collect()
    } else {
        args.append_system_prompt
            .iter()
            .map(|v| resources::text_or_file(v, cwd))
            .collect()
    };
    let context_files = if args.no_context_files {
        Vec::new()
    } else {
        resources::context_files(cwd, &config.agent_dir)
    };
    let extension_guidelines: Vec<Vec<&str>> = extension_tools
        .iter()
        .map(|t| {
            t.decl
                .prompt_guidelines
                .iter()
                .map(String::as_str)
                .collect()
        })
        .collect();
    let mut tool_lines: Vec<resources::system_prompt::ToolLine> = tool_names
        .iter()
        .map(|name| {
            let (snippet, guidelines) = match tools::prompt_info(name) {
                Some((snippet, guidelines)) => (Some(snippet), guidelines),
                None => (None, &[][..]),
            };
            resources::system_prompt::ToolLine {
                name,
                snippet,
                guidelines,
            }
        })
        .collect();
    tool_lines.extend(extension_tools.iter().zip(&extension_guidelines).map(
        |(tool, guidelines)| resources::system_prompt::ToolLine {
            name: &tool.decl.name,
            snippet: tool.decl.prompt_snippet.as_deref(),
            guidelines,
        },
    ));
    // Skills are offered only when the model can read them (`read` active), as pi does.
    let skills_block = tool_names
        .iter()
        .any(|t| t == "read")
        .then(|| resources::skills::skills_prompt_block(&loaded.skills))
        .flatten();
    let date = resources::system_prompt::today();
    resources::system_prompt::build(&resources::system_prompt::PromptInputs {
        custom: custom.as_deref(),
        tools: &tool_lines,
        append: &append,
        context_files: &context_files,
        skills_block: skills_block.as_deref(),
        date: &date,
        cwd: &PathBuf::from(cwd),
    })
}
