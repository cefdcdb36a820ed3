//! The fatal errors of a start: what stops pi-rs before (or instead of) its protocol runs.
//! `main` prints `Error: <Display>` on stderr and exits 1. Each variant wraps the typed error of
//! the module that failed; `Display` is that module's text unchanged (scripts match on it).
//!
//! Errors of a running agent never come here: a failed turn is an event, a bad command an error
//! response (README "Architecture": no `?` leaves the agent loop).

use crate::config::ModelError;
use crate::export::ExportError;
use crate::rpc::InvalidProfile;
use crate::rpc::print_mode::InputError;
use crate::session::open::OpenError;

#[derive(Debug)]
pub enum Error {
    WorkingDirectory(std::io::Error),
    /// A flag pi-rs cannot honour (refused, never silently ignored).
    Unsupported(&'static str),
    /// A `--tools` list pi refuses.
    ToolList(String),
    /// `@file` arguments without print mode.
    FileArgsInRpcMode,
    Profile(InvalidProfile),
    Export(ExportError),
    PrintInput(InputError),
    Session(OpenError),
    Model(ModelError),
    /// The print-driver thread could not be spawned.
    PrintDriver(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::WorkingDirectory(e) => write!(f, "cannot read the working directory: {e}"),
            Error::Unsupported(text) => f.write_str(text),
            Error::ToolList(text) => f.write_str(text),
            Error::FileArgsInRpcMode => {
                f.write_str("@file arguments are not supported in RPC mode")
            }
            Error::Profile(e) => e.fmt(f),
            Error::Export(e) => e.fmt(f),
            Error::PrintInput(e) => e.fmt(f),
            Error::Session(e) => e.fmt(f),
            Error::Model(e) => e.fmt(f),
            Error::PrintDriver(e) => write!(f, "cannot start the print driver: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::WorkingDirectory(e) | Error::PrintDriver(e) => Some(e),
            Error::Profile(e) => Some(e),
            Error::Export(e) => Some(e),
            Error::PrintInput(e) => Some(e),
            Error::Session(e) => Some(e),
            Error::Model(e) => Some(e),
            Error::Unsupported(_) | Error::ToolList(_) | Error::FileArgsInRpcMode => None,
        }
    }
}

impl From<InvalidProfile> for Error {
    fn from(e: InvalidProfile) -> Error {
        Error::Profile(e)
    }
}

impl From<ExportError> for Error {
    fn from(e: ExportError) -> Error {
        Error::Export(e)
    }
}

impl From<InputError> for Error {
    fn from(e: InputError) -> Error {
        Error::PrintInput(e)
    }
}

impl From<OpenError> for Error {
    fn from(e: OpenError) -> Error {
        Error::Session(e)
    }
}

impl From<ModelError> for Error {
    fn from(e: ModelError) -> Error {
        Error::Model(e)
    }
}
