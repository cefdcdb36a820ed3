//! The environment tool and shell subprocesses get: pi-rs's own minus credentials. Provider key
//! variables and anything whose name contains KEY, TOKEN, SECRET or PASSWORD are removed, so a
//! model-run `env` or `printenv` cannot leak them; settings `shellEnvPassthrough` (a list of
//! names) lets chosen ones through. Variables holding a known credential value are removed too.

use std::process::Command;
use std::sync::OnceLock;

static PASSTHROUGH: OnceLock<Vec<String>> = OnceLock::new();

/// Names from settings that are passed through even if they look like credentials.
pub fn set_passthrough(names: Vec<String>) {
    let _ = PASSTHROUGH.set(names);
}

/// The names in settings `shellEnvPassthrough` (an array of strings; anything else is no name).
pub fn names_from_setting(setting: Option<&serde_json::Value>) -> Vec<String> {
    setting
        .and_then(|v| v.as_array())
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a variable of this name is withheld from children.
pub fn is_secret_name(name: &str) -> bool {
    crate::redact::is_credential_name(name)
        && !PASSTHROUGH
            .get()
            .is_some_and(|allowed| allowed.iter().any(|a| a == name))
}

/// What pi (0.84.0) marks its children's environment with: generic agent attribution
/// (`AI_AGENT=pi`) and pi's own marker.
pub const CHILD_MARKERS: [(&str, &str); 2] = [("AI_AGENT", "pi"), ("PI_CODING_AGENT", "true")];

/// Removes the withheld variables from a command about to be spawned — credential-like names,
/// and any variable holding a known credential whatever its name (a models.json `apiKey` may name
/// `MY_LLM_CREDS`) — and marks it as run by an agent (`CHILD_MARKERS`).
pub fn scrub(command: &mut Command) {
    command.envs(CHILD_MARKERS);
    let known = crate::redact::default_redactions();
    for (name, value) in std::env::vars_os() {
        let holds_secret = value
            .to_str()
            .is_some_and(|v| known.secrets().iter().any(|s| s == v));
        let passed = name.to_str().is_some_and(|n| {
            PASSTHROUGH
                .get()
                .is_some_and(|allowed| allowed.iter().any(|a| a == n))
        });
        if !passed && (holds_secret || name.to_str().is_none_or(is_secret_name)) {
            command.env_remove(name);
        }
    }
}

/// The session variables the prompt tells the model about (pi 1.6.0): the bash tool's commands
/// get the current values, never inherited ones.
pub const SESSION_VARS: [&str; 5] = [
    "PI_SESSION_ID",
    "PI_SESSION_FILE",
    "PI_PROVIDER",
    "PI_MODEL",
    "PI_REASONING_LEVEL",
];

/// Replaces whatever `SESSION_VARS` the command would inherit with `values` (a variable without
/// a value, such as the file of a `--no-session` run, is left unset).
pub fn set_session_vars(command: &mut Command, values: &[(&'static str, String)]) {
    for name in SESSION_VARS {
        command.env_remove(name);
    }
    command.envs(values.iter().map(|(name, value)| (name, value)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_withheld() {
        for name in [
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GH_TOKEN",
            "my_secret",
            "DB_PASSWORD",
            "AWS_PROFILE",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "LANG", "TERM", "PI_CODING_AGENT"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }
}
