//! The `codemode` tool (pi 1.6.0 `docs/codemode.md`): the model writes a JavaScript script that
//! calls the session's other tools; only the script's output reaches the model.
//!
//! `engine` runs one script in QuickJS on its own thread. Nothing here runs, and QuickJS holds
//! no memory, until a `codemode` call starts.

// Wired into the tool batch in the next step.
#[allow(dead_code)]
pub mod engine;
