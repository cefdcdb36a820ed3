//! pi-rs: the pi coding agent's RPC mode as a synchronous, thread-per-component program.
//!
//! `main` is wiring: it parses the command line, has each component built by the module that owns
//! it (config, `session::open`, `config::start_model`, resources, sandbox, `extensions::launch`,
//! MCP), wires the threads (stdin-reader or print-driver → agent on the main thread →
//! stdout-writer), runs the agent loop and turns its end into the exit code. A start that cannot
//! go on is an `error::Error` (`Error: <text>`, exit 1). It joins the writer (so every record is
//! flushed) but never the stdin reader, which may still sit in a blocking read.

mod acp;
mod agent;
mod api_key_login;
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
mod packages;
mod paths;
mod provider;
mod redact;
mod resources;
mod rpc;
mod sandbox;
mod session;
mod signals;
mod source_info;
mod subcommands;
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
    // `pi install`, `pi auth …`, `pi mcp …`, `pi login …`: commands of their own, not a session.
    let words: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    if let Some(code) = subcommands::run(&words, &config::agent_dir_from_env()) {
        return ExitCode::from(code);
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

pub(crate) fn init_logging(verbose: bool) {
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
    if let Some(problem) = args.tool_list_error() {
        return Err(error::Error::ToolList(problem));
    }

    let cwd = std::env::current_dir().map_err(error::Error::WorkingDirectory)?;
    let agent_dir = config::agent_dir_from_env();
    let config = Config::load(agent_dir.clone(), cwd.clone(), args.project_trust);
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
    let run_mode = args.run_mode(print_mode::stdin_is_terminal());
    let print_output = match run_mode {
        RunMode::Rpc | RunMode::Acp => None,
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

    let (signal_tx, signals) = crossbeam_channel::bounded(4);
    if let Err(e) = signals::spawn(signal_tx) {
        log::warn!("signals are not handled: {e}");
    }
    if run_mode == RunMode::Acp {
        return Ok(run_acp(args, agent_dir, profile, signals));
    }
    let no_session_mcp = mcp::config::McpConfig::default();
    let setup = match build_setup(args, cwd, agent_dir, config, profile, no_session_mcp)? {
        Built::Setup(setup) => *setup,
        Built::Exit(code) => return Ok(code),
    };
    // Spill files a session file may refer to outlive the process; otherwise they go at exit.
    let session_persisted = setup.session.file_path().is_some();
    let result = match print_output {
        None => Ok(run_rpc(setup, signals)),
        Some(output) => run_print(setup, signals, output, print_messages),
    };
    if !session_persisted {
        tools::bash::remove_spill_dir();
    }
    result
}

/// What `build_setup` gives: the agent's setup, or the exit code of a start that stops there.
enum Built {
    Setup(Box<agent::AgentSetup>),
    Exit(u8),
}

/// Builds one agent's setup from the command line, the start directory and its config: MCP
/// config (plus `session_mcp`, servers given for this session only), the session, the model,
/// resources, sandbox, approvals, extensions, the system prompt.
fn build_setup(
    args: Args,
    mut cwd: std::path::PathBuf,
    agent_dir: std::path::PathBuf,
    mut config: Config,
    profile: rpc::Profile,
    session_mcp: mcp::config::McpConfig,
) -> Result<Built, error::Error> {
    // MCP servers' resolved `${VAR}` / `!command` values join the redaction set before any
    // session log or the stdout writer exists.
    let mcp_config = (!args.no_mcp).then(|| {
        let mut loaded = mcp::config::load(
            &agent_dir,
            &cwd,
            config.project_trusted(),
            &mcp::config::system_resolver(&cwd),
        );
        loaded.merge(session_mcp);
        loaded
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
        return Ok(Built::Exit(1));
    }
    let mut args = args;
    let start_cwd = cwd.clone();
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
    let mut context = session.context();
    tools::env::set_passthrough(tools::env::names_from_setting(
        config.setting("shellEnvPassthrough"),
    ));
    // pi packages (settings `packages`, `-e npm:…`/`-e git:…`): missing ones are installed now.
    let (run_packages, package_warnings) = packages::for_run(&config, &args.extensions);
    print_warnings(&package_warnings);
    let resource_options = resources::discovery::LoadOptions {
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
        package_skills: run_packages.resources(packages::collect::Kind::Skills),
        package_prompts: run_packages.resources(packages::collect::Kind::Prompts),
    };
    let loaded = resources::discovery::load_resources(&resource_options);
    for warning in &loaded.warnings {
        log::info!("{warning}");
    }
    let (sandbox_cwd, root_warning) = sandbox_root(&start_cwd, &cwd, config.project_trust.decided);
    let (sandbox, mut sandbox_warnings) = sandbox::Sandbox::new(
        config.scoped_setting(false, "sandbox"),
        config.scoped_setting(true, "sandbox"),
        args.sandbox,
        &sandbox_cwd,
        &agent_dir,
    );
    if sandbox.policy().mode != sandbox::Mode::Off {
        sandbox_warnings.extend(root_warning);
    }
    print_warnings(&sandbox_warnings);
    let (approvals, warnings) =
        extensions::approval::ApprovalPolicy::from_settings(config.setting("approvals"));
    print_warnings(&warnings);
    let relaunch = extensions::launch::Relaunch {
        files: run_packages.extension_files(),
        cli_flags: args.extension_flags.clone(),
        no_extensions: args.no_extensions,
    };
    // A `--model` no known provider has may be one a TypeScript extension registers: start-up
    // then waits for the TypeScript host's registrations (as for extension flags).
    let unknown_model = args.model.as_deref().is_some_and(|pattern| {
        config
            .resolve_cli_model(
                args.provider.as_deref(),
                pattern,
                args.api_key.is_some(),
                args.thinking.as_deref(),
            )
            .is_err()
    });
    // So may the model a resumed session selected (a virtual model, say, that its extension
    // registers while loading, as under pi 1.6.0).
    let unknown_session_model = resumed
        && args.model.is_none()
        && [&context.model, &context.selected_before_reply]
            .into_iter()
            .flatten()
            .any(|(provider, id)| config.find_model(provider, id).is_none());
    let extensions = extensions::launch::launch(
        &relaunch,
        unknown_model || unknown_session_model,
        &config,
        &session,
        &sandbox.policy(),
        approvals,
    );
    if !extensions.flag_errors.is_empty() {
        for error in &extensions.flag_errors {
            eprintln!("Error: {error}");
        }
        return Ok(Built::Exit(1));
    }
    let mut startup_events = extensions.startup_events;
    // (v2) Providers of the extensions' `register` lines count for the start-up model.
    if let Some(host) = &extensions.host {
        startup_events.extend(extensions::launch::register_providers(host, &mut config));
    }
    let model_flags = args.model_flags();
    let (scoped, warnings) = config::start_model::scoped_models(&model_flags, &config);
    print_warnings(&warnings);
    // (v2) The registered virtual models are known now: a session's virtual selection holds.
    context.resolve_virtual_selection(|provider, id| {
        config
            .find_model(provider, id)
            .is_some_and(|m| m.is_virtual())
    });
    let session_model = context.start_model(resumed);
    let start = config::start_model::choose(&model_flags, &mut config, &session_model, &scoped)?;
    print_warnings(&start.warnings);
    let (model, thinking) = (start.model, start.thinking);
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
    let registering = extensions.host.as_ref().is_some_and(|h| h.is_registering());
    let selection = select_tools(&args, &config, &extension_tools, registering);
    let extension_tools = extensions::offered(extension_tools, &selection.filter);
    let mut mcp = mcp_config.map(|loaded| {
        let policy = sandbox.policy();
        let reconnect_sandbox = (policy.mode != sandbox::Mode::Off).then_some(policy);
        mcp::McpHost::start(
            loaded,
            selection.filter.clone(),
            cwd.clone(),
            agent_dir.clone(),
            reconnect_sandbox,
        )
    });
    let mut tool_names = selection.builtins;
    if let Some(host) = mcp.as_mut() {
        host.turn_on_discovery(&mut tool_names);
    }
    let prompt_sources = resources::system_prompt::RunSources {
        system_prompt: args.system_prompt.as_deref(),
        append: &args.append_system_prompt,
        no_context_files: args.no_context_files,
        cwd: &config.cwd,
        agent_dir: &config.agent_dir,
        project_trusted: config.project_trust.trusted,
        codemode_only: config.codemode_presentation().only,
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

    Ok(Built::Setup(Box::new(agent::AgentSetup {
        mcp,
        client: None,
        extensions: extensions.host,
        extension_events: extensions.events,
        reload: agent::reload::ReloadInputs {
            extensions: relaunch,
            events_tx: extensions.events_tx,
            resources: resource_options,
            prompt: agent::reload::PromptArgs {
                system_prompt: args.system_prompt.clone(),
                append: args.append_system_prompt.clone(),
                no_context_files: args.no_context_files,
            },
        },
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
        tool_filter: selection.filter,
        restore_tools_with: selection.restore_with,
        system_prompt,
    })))
}

/// ACP mode: one agent per ACP session, each built here as a run in the session's directory
/// would be (`--session <file>` for `session/load` and `session/resume`).
fn run_acp(
    args: Args,
    agent_dir: std::path::PathBuf,
    profile: rpc::Profile,
    signals: crossbeam_channel::Receiver<i32>,
) -> u8 {
    let start = |start: acp::Start| {
        let (cwd, session) = (start.cwd, start.session_file);
        let mut args = args.clone();
        // The client chooses the session: the command line's session choice does not apply.
        args.session = session.map(str::to_string);
        (args.continue_session, args.resume, args.fork) = (false, false, None);
        let config = Config::load(agent_dir.clone(), cwd.to_path_buf(), args.project_trust);
        print_warnings(config.diagnostics.iter().map(|Diagnostic::Warning(t)| t));
        let built = build_setup(
            args,
            cwd.to_path_buf(),
            agent_dir.clone(),
            config,
            profile,
            start.mcp,
        );
        match built {
            Ok(Built::Setup(setup)) => Ok(*setup),
            Ok(Built::Exit(_)) => Err("the session could not start (see stderr)".into()),
            Err(e) => Err(e.to_string()),
        }
    };
    let session_dir = |cwd: &std::path::Path| {
        let config = Config::load(agent_dir.clone(), cwd.to_path_buf(), args.project_trust);
        session::open::session_dir(args.session_dir.as_deref(), &config, cwd)
    };
    let code = acp::run(acp::Host {
        start: &start,
        session_dir: &session_dir,
        signals,
    });
    if args.no_session {
        tools::bash::remove_spill_dir();
    }
    code
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
        out: writer.records.clone(),
    };
    let code = agent::Agent::new(setup, channels).run();
    // Before stdout closes: a client that sees the end finds no child of ours left.
    agent::kill_leftover_children();
    // With the last record sender gone the writer flushes and ends.
    drop(writer.records);
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
        out: records_tx.clone(),
    };
    let agent_code = agent::Agent::new(setup, channels).run();
    // Before the driver ends the output: no child of ours is left by then.
    agent::kill_leftover_children();
    drop(records_tx);
    let driver_code = driver.join().unwrap_or(1);
    Ok(if agent_code != 0 {
        agent_code as u8
    } else {
        driver_code
    })
}

/// The folder the sandbox makes writable: a resumed session runs in the cwd its file names (as
/// pi does), but a session file may come from anyone, so that folder is the writable root only
/// when it is the start directory, inside it, or a trusted project; otherwise the start
/// directory stays the root (and the warning says so).
fn sandbox_root(
    start: &std::path::Path,
    cwd: &std::path::Path,
    trusted: bool,
) -> (std::path::PathBuf, Option<String>) {
    let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (start_real, cwd_real) = (real(start), real(cwd));
    if trusted || cwd_real.starts_with(&start_real) {
        return (cwd.to_path_buf(), None);
    }
    let warning = format!(
        "the session's directory {} is outside the start directory and not a trusted project: \
         the sandbox's writable root stays {}",
        cwd_real.display(),
        start_real.display()
    );
    (start.to_path_buf(), Some(warning))
}

/// The run's tools from `--tools`, `--exclude-tools`, `--no-tools` / `--no-builtin-tools` and
/// settings `defaultTools` (`tools::selection`); names that match no tool are said once.
/// `registering`: the TypeScript host registers later, so a name no tool has yet may be one of
/// its tools (not warned about).
fn select_tools(
    args: &Args,
    config: &Config,
    extension_tools: &[extensions::ExtensionTool],
    registering: bool,
) -> tools::selection::Selection {
    use tools::selection;
    let defaults = selection::default_tools(
        config.scoped_setting(false, "defaultTools"),
        config.scoped_setting(true, "defaultTools"),
    );
    let known: Vec<String> = extension_tools
        .iter()
        .map(|t| t.decl.name.clone())
        .collect();
    let lists = [
        args.tools.as_deref(),
        args.exclude_tools.as_deref(),
        defaults.as_deref(),
    ];
    let unknown =
        selection::unknown_names(lists.into_iter().flatten(), &known, mcp::is_mcp_tool_name);
    if !unknown.is_empty() && !registering {
        eprintln!("Warning: no tool is named {}; ignored", unknown.join(", "));
    }
    selection::resolve(
        args.tools.as_deref(),
        args.exclude_tools.as_deref(),
        args.no_tools(),
        defaults,
    )
}

/// Warnings for stderr, one line each (config problems never stop pi-rs: built-ins stay usable).
fn print_warnings<T: std::fmt::Display>(warnings: impl IntoIterator<Item = T>) {
    let mut stderr = std::io::stderr().lock();
    for warning in warnings {
        let _ = writeln!(stderr, "Warning: {warning}");
    }
}
