//! The session a run starts with (FACTS §9.2, §1.2): `--no-session` (memory only), `--fork` (a
//! copy in this project's session dir), `--session <path|id>`, `--continue` (most recent here),
//! else a new one; and the entries a start records (model, thinking level, `--name`).
//!
//! Input: the command line's session flags, the config (session dir), the start directory.
//! Output: the log and whether it was resumed, or an `OpenError`; warnings to print either way.
//! Files are written lazily, as everywhere in `session`.

use std::path::{Path, PathBuf};

use super::{SessionArg, SessionContext, SessionError, SessionLog};
use crate::config::start_model::SessionModel;
use crate::config::{self, Config, Model, ThinkingLevel};

/// The session flags of the command line (`cli::Args::session_choice`).
#[derive(Clone, Copy, Debug, Default)]
pub struct StartChoice<'a> {
    pub no_session: bool,
    pub fork: Option<&'a str>,
    pub session: Option<&'a str>,
    pub continue_recent: bool,
    pub resume: bool,
    pub session_dir: Option<&'a str>,
    /// `--session-id <id>`: this project's session with that id, else a new one with it (with
    /// `--fork`: the fork's id; with `--no-session`: the in-memory session's).
    pub session_id: Option<&'a str>,
}

/// The session to start with.
#[derive(Debug)]
pub struct Opened {
    pub log: SessionLog,
    /// It existed before (or is a fork of one that did): its model and level are kept.
    pub resumed: bool,
}

/// Why no session could be opened; `main` prints `Error: <Display>` and exits 1.
#[derive(Debug)]
pub enum OpenError {
    /// `--fork` with another session choice.
    ForkConflict,
    /// `--resume` is pi's interactive picker.
    ResumeNeedsPicker,
    /// A `--session`/`--fork` id prefix that matches nothing.
    NoMatch(String),
    /// `--fork` of a path that is not a file.
    FileNotFound(PathBuf),
    /// `--session-id` with `--session`, `--continue` or `--resume` (the flags named).
    SessionIdConflict(Vec<&'static str>),
    /// A `--session-id` that breaks pi's rule.
    InvalidSessionId,
    /// `--fork --session-id` of an id this project already has.
    SessionIdTaken(String),
    Session(SessionError),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::ForkConflict => f.write_str(
                "--fork cannot be combined with --session, --continue, --resume or --no-session",
            ),
            OpenError::ResumeNeedsPicker => f.write_str(
                "--resume needs pi's interactive picker; use --session <id> or --continue",
            ),
            OpenError::NoMatch(arg) => write!(f, "No session found matching '{arg}'"),
            OpenError::FileNotFound(path) => {
                write!(f, "Session file not found: {}", path.display())
            }
            OpenError::SessionIdConflict(flags) => {
                write!(
                    f,
                    "--session-id cannot be combined with {}",
                    flags.join(", ")
                )
            }
            OpenError::InvalidSessionId => f.write_str(
                "Session id must be non-empty, contain only alphanumeric characters, '-', '_', \
                 and '.', and start and end with an alphanumeric character",
            ),
            OpenError::SessionIdTaken(id) => write!(f, "Session already exists with id '{id}'"),
            OpenError::Session(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Session(e) => Some(e),
            _ => None,
        }
    }
}

impl From<SessionError> for OpenError {
    fn from(e: SessionError) -> OpenError {
        OpenError::Session(e)
    }
}

/// Opens or creates the session `choice` names, for a run started in `cwd`. Problems found while
/// reading and choices made for the user go to `warnings`, one sentence each, also when the
/// opening then fails.
pub fn open_for_start(
    choice: &StartChoice,
    config: &Config,
    cwd: &Path,
    warnings: &mut Vec<String>,
) -> Result<Opened, OpenError> {
    let other_choices = choice.session.is_some() || choice.continue_recent || choice.resume;
    if choice.fork.is_some() && (other_choices || choice.no_session) {
        return Err(OpenError::ForkConflict);
    }
    if let Some(id) = choice.session_id {
        let conflicts: Vec<&'static str> = [
            (choice.session.is_some(), "--session"),
            (choice.continue_recent, "--continue"),
            (choice.resume, "--resume"),
        ]
        .into_iter()
        .filter_map(|(set, flag)| set.then_some(flag))
        .collect();
        if !conflicts.is_empty() {
            return Err(OpenError::SessionIdConflict(conflicts));
        }
        if !super::is_valid_session_id(id) {
            return Err(OpenError::InvalidSessionId);
        }
    }
    if choice.no_session {
        let mut log = SessionLog::in_memory(cwd);
        if let Some(id) = choice.session_id {
            log.take_id(id);
        }
        return Ok(opened(log, false));
    }
    if choice.resume {
        return Err(OpenError::ResumeNeedsPicker);
    }
    let dir = session_dir(choice.session_dir, config, cwd);
    let sessions_root = config.agent_dir.join("sessions");
    let open = |path: &Path, warnings: &mut Vec<String>| -> Result<SessionLog, SessionError> {
        let (log, found) = SessionLog::open(path, Some(&dir), cwd)?;
        warnings.extend(found);
        Ok(log)
    };
    // (path, whether it belongs to this project)
    let resolve = |arg: &str| -> Result<(PathBuf, bool), OpenError> {
        match super::resolve_session_arg(arg, &dir, &sessions_root) {
            SessionArg::Path(path) => Ok((cwd.join(path), true)),
            SessionArg::Local(path) => Ok((path, true)),
            SessionArg::Global { path, .. } => Ok((path, false)),
            SessionArg::NotFound => Err(OpenError::NoMatch(arg.to_string())),
        }
    };
    // pi looks for `--session-id` among this project's sessions; a session dir other than the
    // project's default may hold other projects' too, so there only this directory's count.
    let find_id = |id: &str| {
        let shared = dir != super::default_session_dir(&config.agent_dir, cwd);
        super::find_by_id(&dir, id, shared.then_some(cwd))
    };
    if let Some(arg) = choice.fork {
        if let Some(id) = choice.session_id
            && find_id(id).is_some()
        {
            return Err(OpenError::SessionIdTaken(id.to_string()));
        }
        let (path, _) = resolve(arg)?;
        if !path.is_file() {
            return Err(OpenError::FileNotFound(path));
        }
        let source = open(&path, warnings)?;
        let copy = match source.leaf_id() {
            Some(_) => source.clone_into(cwd, choice.session_id)?,
            None => {
                let mut log =
                    SessionLog::create_with_parent(&dir, cwd, Some(&path.to_string_lossy()))?;
                if let Some(id) = choice.session_id {
                    log.take_id(id);
                }
                log
            }
        };
        return Ok(opened(copy, true));
    }
    if let Some(arg) = choice.session {
        let (path, local) = resolve(arg)?;
        if !local {
            // pi asks whether to fork a session of another project; without a terminal pi-rs
            // forks it into this project, leaving the original untouched.
            warnings.push(format!(
                "session {arg} belongs to another project; continuing in a forked copy"
            ));
            let source = open(&path, warnings)?;
            return Ok(opened(source.clone_into(cwd, None)?, true));
        }
        let log = open(&path, warnings)?;
        return Ok(opened(log, true));
    }
    if choice.continue_recent
        && let Some(path) = super::find_most_recent(&dir)
    {
        let mut log = open(&path, warnings)?;
        log.set_cwd(cwd);
        return Ok(opened(log, true));
    }
    if let Some(id) = choice.session_id {
        if let Some(path) = find_id(id) {
            return Ok(opened(open(&path, warnings)?, true));
        }
        warnings.push(format!(
            "No project session found with id '{id}'; creating a new session with that id."
        ));
        let mut log = SessionLog::create(&dir, cwd)?;
        log.take_id(id);
        return Ok(opened(log, false));
    }
    Ok(opened(SessionLog::create(&dir, cwd)?, false))
}

/// Where the sessions of a run in `cwd` live: `--session-dir` (`flag`), else `PI_SESSION_DIR`,
/// else the `sessionDir` setting, else the per-cwd default.
pub fn session_dir(flag: Option<&str>, config: &Config, cwd: &Path) -> PathBuf {
    match flag {
        Some(dir) => cwd.join(crate::paths::expand_tilde(dir, &crate::paths::home_dir())),
        None => config::session_dir_from_env()
            .or_else(|| config.session_dir())
            .map(|d| cwd.join(d))
            .unwrap_or_else(|| super::default_session_dir(&config.agent_dir, cwd)),
    }
}

fn opened(log: SessionLog, resumed: bool) -> Opened {
    Opened { log, resumed }
}

/// What a start records: a new session its model and level at once, a resumed one only what
/// changed; `--name` as a session_info entry. Failures are logged (the run goes on in memory and
/// the next append retries the file); a name's is not.
pub fn record_start(
    log: &mut SessionLog,
    resumed: Option<&SessionContext>,
    model: &Model,
    thinking: ThinkingLevel,
    name: Option<&str>,
) {
    let record_model = !model.is_placeholder()
        && resumed.is_none_or(|context| {
            context.model.as_ref() != Some(&(model.provider.clone(), model.id.clone()))
        });
    if record_model && let Err(e) = log.append_model_change(&model.provider, &model.id) {
        log::error!("could not record the model: {e}");
    }
    if resumed.is_none_or(|context| context.thinking_level != Some(thinking))
        && let Err(e) = log.append_thinking_level_change(thinking)
    {
        log::error!("could not record the thinking level: {e}");
    }
    if let Some(name) = name.map(str::trim).filter(|n| !n.is_empty()) {
        // As before this moved here: a name that cannot be recorded is not reported.
        let _ = log.append_session_info(name);
    }
}

impl SessionContext {
    /// What this context tells the choice of the starting model (`resuming`: the session existed
    /// before).
    pub fn start_model(&self, resuming: bool) -> SessionModel<'_> {
        SessionModel {
            resuming,
            model: self
                .model
                .as_ref()
                .map(|(provider, id)| (provider.as_str(), id.as_str())),
            thinking: self.thinking_level,
        }
    }
}
