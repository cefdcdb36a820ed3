//! pi-rs: the pi coding agent's RPC mode as a synchronous, thread-per-component program.
//!
//! `main` is wiring: it parses the command line, has each component built by the module that owns
//! it (config, `session::open`, `config::start_model`, resources, sandbox, `extensions::launch`,
//! MCP), wires the threads (stdin-reader or print-driver → agent on the main thread →
//! stdout-writer), runs the agent loop and turns its end into the exit code. A start that cannot
//! go on is an `error::Error` (`Error: <text>`, exit 1). It joins the writer (so every record is
//! flushed) but never the stdin reader, which may still sit in a blocking read.

mod agent;
mod auth_command;
mod child;
mod cli;
mod config;
mod deadline;
mod disk;
mod error;
mod export;
mod extensions;
mod glob;
mod ids;
mod ignore;
mod js;
mod login;
mod mcp;
mod messages;
mod net;
mod paths;
mod provider;
mod redact;
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
use std::process::ExitCode;

use cli::{Args, RunMode};
use config::{Config, Diagnostic};
use rpc::print_mode;

fn main() -> ExitCode {
    // `pi login <provider>` / `pi logout <provider>`: subscription logins, no agent.
    let words: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    // `pi auth …`: check or print credentials, log in or out (pi 1.6.0), no agent.
    if words.first().map(String::as_str) == Some("auth") {
        init_logging(false);
        return ExitCode::from(auth_command::run(
            &words[1..],
            &config::agent_dir_from_env(),
        ));
    }
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

fn run(args: Args) -> Result<u8, error::Error> {
    // Help and version are answers, not diagnostics: stdout (no protocol runs in these cases).
    if args.help {
        rpc::print_text(&cli::help_text());
        return Ok(0);
    }
    if args.version {
        rpc::print_text(&cli::version_text(args.verbose));
        return Ok(0);
    }
    if let Some(refusal) = args.unsupported() {
        return Err(error::Error::Unsupported(refusal));
    }

    let mut cwd = std::env::current_dir().map_err(error::Error::WorkingDirectory)?;
    let agent_dir = config::agent_dir_from_env();
    let mut config = Config::load(agent_dir.clone(), cwd.clone(), args.project_trust);
    print_warnings(
        config
            .diagnostics
            .iter()
            .map(|Diagnostic::Warning(text)| text),
    );

    let (profile, warning) =
        rpc::Profile::choose(args.rpc_profile.as_deref(), config.setting("rpcProfile"))?;
    print_warnings(warning);

    if let Some((session_path, output)) = &args.export {
        let mut warnings = Vec::new();
        let exported =
            export::export_session_file(&cwd, session_path, output.as_deref(), &mut warnings);
        print_warnings(&warnings);
        let output = exported?;
        eprintln!("Exported to: {output}");
        return Ok(0);
    }
    if let Some(search) = &args.list_models {
        rpc::print_text(&config.list_models(search.as_deref()));
        return Ok(0);
    }
    let print_output = match args.run_mode(print_mode::stdin_is_terminal()) {
        RunMode::Rpc => None,
        RunMode::Print(output) => Some(output),
        RunMode::NoTui => {
            eprint!("{}", cli::NO_TUI);
            return Ok(1);
        }
    };
    if print_output.is_none() && !args.file_args.is_empty() {
        return Err(error::Error::FileArgsInRpcMode);
    }
    let print_messages = match print_output {
        Some(_) => print_mode::messages(&args.file_args, &args.messages, &cwd)?,
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
    redact::set_default_redactions(config.known_secrets());
    let mut warnings = Vec::new();
    let opened =
        session::open::open_for_start(&args.session_choice(), &config, &cwd, &mut warnings);
    print_warnings(&warnings);
    let opened = opened?;
    let (mut session, resumed) = (opened.log, opened.resumed);
    // pi runs a session opened by `--session` in its own directory (settings, resources and tools
    // resolve there) and refuses one whose directory is gone; `--continue` stays here.
    if let Some(message) = session.missing_cwd_error(&cwd) {
        eprintln!("{message}");
        return Ok(1);
    }
    let mut args = args;
    if session.cwd() != cwd {
        args.absolutize_paths(&cwd);
        cwd = session.cwd().to_path_buf();
        let reported = std::mem::take(&mut config.diagnostics);
        config = Config::load(agent_dir.clone(), cwd.clone(), args.project_trust);
        config.diagnostics.retain(|d| !reported.contains(d));
        print_warnings(
            config
                .diagnostics
                .iter()
                .map(|Diagnostic::Warning(text)| text),
        );
        redact::set_default_redactions(config.known_secrets());
    }
    let context = session.context();
    let model_flags = args.model_flags();
    let (scoped, warnings) = config::start_model::scoped_models(&model_flags, &config);
    print_warnings(&warnings);
    let session_model = context.start_model(resumed);
    let start = config::start_model::choose(&model_flags, &mut config, &session_model, &scoped)?;
    print_warnings(&start.warnings);
    let (model, thinking) = (start.model, start.thinking);
    let tool_names = tools::active_builtins(
        args.tools.as_deref(),
        args.no_tools || args.no_builtin_tools,
    );
    tools::env::set_passthrough(tools::env::names_from_setting(
        config.setting("shellEnvPassthrough"),
    ));
    let loaded = resources::discovery::load_resources(&resources::discovery::LoadOptions {
        cwd: cwd.clone(),
        agent_dir: agent_dir.clone(),
        home: paths::home_dir(),
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
    print_warnings(&sandbox_warnings);
    let (approvals, warnings) =
        extensions::approval::ApprovalPolicy::from_settings(config.setting("approvals"));
    print_warnings(&warnings);
    let extensions = extensions::launch::launch(
        &args.extensions,
        args.no_extensions,
        &config,
        &session,
        &sandbox.policy(),
        approvals,
    );
    let mut startup_events = extensions.startup_events;
    // Skipped project resources are said once, on stderr and to the client.
    if let Some(warning) = config.project_trust.warning() {
        eprintln!("Warning: {warning}");
        startup_events.insert(0, rpc::events::Event::notify(&warning, "warning"));
    }
    if let Some(warning) = sandbox::unenforced_warning(&sandbox.policy(), sandbox::support()) {
        eprintln!("Warning: {warning}");
        startup_events.push(rpc::events::Event::notify(&warning, "warning"));
    }
    let extension_tools = extensions
        .host
        .as_ref()
        .map(|h| h.tools())
        .unwrap_or_default();
    let prompt_sources = resources::system_prompt::RunSources {
        system_prompt: args.system_prompt.as_deref(),
        append: &args.append_system_prompt,
        no_context_files: args.no_context_files,
        cwd: &config.cwd,
        agent_dir: &config.agent_dir,
        project_trusted: config.project_trust.trusted,
    };
    let system_prompt =
        resources::system_prompt::for_run(&prompt_sources, &tool_names, &extension_tools, &loaded);

    session::open::record_start(
        &mut session,
        resumed.then_some(&context),
        &model,
        thinking,
        args.name.as_deref(),
    );

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
        extensions: extensions.host,
        extension_events: extensions.events,
        approvals: extensions.approvals,
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
) -> Result<u8, error::Error> {
    let header = setup.session.header().to_value().clone();
    let (records_tx, records) = crossbeam_channel::bounded(setup.profile.writer_capacity());
    let (input_tx, input) = crossbeam_channel::bounded(64);
    // Never fires: stdout belongs to the driver, which simply stops reading when it is gone.
    let (_writer_events_tx, writer_events) = crossbeam_channel::bounded(1);
    let driver = print_mode::spawn(output, header, messages, records, input_tx)
        .map_err(error::Error::PrintDriver)?;
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

/// Warnings for stderr, one line each (config problems never stop pi-rs: built-ins stay usable).
fn print_warnings<T: std::fmt::Display>(warnings: impl IntoIterator<Item = T>) {
    let mut stderr = std::io::stderr().lock();
    for warning in warnings {
        let _ = writeln!(stderr, "Warning: {warning}");
    }
}
