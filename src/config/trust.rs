//! Project trust, as pi 1.6.0 decides it (`docs/security.md`): a cloned repository's `.pi/`
//! resources (settings, MCP servers, extensions, skills, prompts, themes, SYSTEM.md /
//! APPEND_SYSTEM.md, and `.agents/skills` of the cwd or an ancestor) load only after a trust
//! decision. The decision, first that applies: `--approve` / `--no-approve`; a saved decision in
//! `<agentDir>/trust.json` for the cwd or its closest parent (canonical paths; pi's file, shared
//! with it); global settings `defaultProjectTrust` (`always` trusts; `ask`, the default, and
//! `never` skip, since pi-rs never has a prompt to ask with). A folder without any protected
//! resource is trusted unless a saved decision says otherwise. Context files (AGENTS.md,
//! CLAUDE.md) are not protected, as in pi.
//!
//! pi-rs only reads `trust.json` (pi writes it from its interactive prompt). It takes the same
//! `trust.json.lock` directory lock while reading, so it never sees a half-written file.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Entries of `<cwd>/.pi` that need a trust decision (pi's list; a bare `.pi` does not).
pub const PROTECTED_PROJECT_ENTRIES: [&str; 8] = [
    "settings.json",
    "mcp.json",
    "extensions",
    "skills",
    "prompts",
    "themes",
    "SYSTEM.md",
    "APPEND_SYSTEM.md",
];

/// The outcome for this process.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectTrust {
    pub trusted: bool,
    /// Protected resources that exist and were skipped (empty when trusted), as paths.
    pub skipped: Vec<PathBuf>,
    /// Why: the rule that decided (for the warning and the log).
    pub reason: String,
    /// Trusted by a decision (`--approve`, trust.json, `defaultProjectTrust: "always"`), not
    /// only for lack of anything to protect.
    pub decided: bool,
}

impl ProjectTrust {
    /// The one warning for the client when something was skipped.
    pub fn warning(&self) -> Option<String> {
        if self.skipped.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .skipped
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        Some(format!(
            "Project resources not loaded ({}): {}. Start with --approve, or save a decision in trust.json, to load them.",
            self.reason,
            list.join(", ")
        ))
    }
}

/// Decides trust for `cwd`. `cli` is `--approve` (Some(true)) / `--no-approve` (Some(false));
/// `default_setting` is the global settings' `defaultProjectTrust`.
pub fn resolve(
    agent_dir: &Path,
    cwd: &Path,
    home: &Path,
    cli: Option<bool>,
    default_setting: Option<&Value>,
) -> ProjectTrust {
    let protected = protected_resources(cwd, home);
    let decide = |trusted: bool, reason: &str| ProjectTrust {
        trusted,
        skipped: if trusted {
            Vec::new()
        } else {
            protected.clone()
        },
        reason: reason.to_string(),
        decided: trusted,
    };
    if let Some(trusted) = cli {
        let flag = if trusted { "--approve" } else { "--no-approve" };
        return decide(trusted, flag);
    }
    let saved = match saved_decision(&agent_dir.join("trust.json"), cwd) {
        Ok(saved) => saved,
        Err(e) => {
            // A broken trust file decides nothing; pi refuses to start, pi-rs skips (safe side).
            log::warn!("{e}");
            return decide(false, &e);
        }
    };
    if protected.is_empty() {
        let decided = saved.as_ref().is_some_and(|(_, d)| *d);
        return ProjectTrust {
            decided,
            ..decide(
                saved.map(|(_, d)| d).unwrap_or(true),
                "no protected resources",
            )
        };
    }
    if let Some((path, decision)) = saved {
        return decide(decision, &format!("trust.json entry {path}"));
    }
    match default_setting.and_then(Value::as_str) {
        Some("always") => decide(true, "defaultProjectTrust \"always\""),
        Some("never") => decide(false, "defaultProjectTrust \"never\""),
        // "ask" (the default) has no prompt to ask with in RPC/print/JSON modes: skip, as pi.
        _ => decide(false, "no trust decision for this folder"),
    }
}

/// The saved decision for `cwd` alone (`pi update` trusts nothing else: no default, no "no
/// protected resources"); a broken file decides nothing.
pub fn saved(agent_dir: &Path, cwd: &Path) -> Option<bool> {
    saved_decision(&agent_dir.join("trust.json"), cwd)
        .ok()
        .flatten()
        .map(|(_, decision)| decision)
}

/// The protected resources present for `cwd`: `.pi/<entry>` and `.agents/skills` of the cwd and
/// each ancestor, except `$HOME/.agents/skills` (a user resource).
pub fn protected_resources(cwd: &Path, home: &Path) -> Vec<PathBuf> {
    let cwd = canonical(cwd);
    let config_dir = cwd.join(".pi");
    let mut found: Vec<PathBuf> = PROTECTED_PROJECT_ENTRIES
        .iter()
        .map(|entry| config_dir.join(entry))
        .filter(|p| p.exists())
        .collect();
    let user_skills = canonical(home).join(".agents").join("skills");
    for dir in cwd.ancestors() {
        let skills = dir.join(".agents").join("skills");
        if skills != user_skills && skills.exists() {
            found.push(skills);
        }
    }
    found
}

/// The closest saved decision for `cwd` or a parent: (the key that decided, the decision).
/// `null` entries (pi writes them when a parent takes over) decide nothing.
fn saved_decision(path: &Path, cwd: &Path) -> Result<Option<(String, bool)>, String> {
    // No file, no lock to take (the lock is a directory made and removed: two writes on every
    // start-up otherwise); a file that appears a moment later is a decision made after this read.
    if std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(None);
    }
    let text = {
        let _lock = super::settings::FileLock::acquire(path).ok();
        match std::fs::read(path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(format!(
                    "Failed to read trust store {}: {e}",
                    path.display()
                ));
            }
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let data: serde_json::Map<String, Value> = match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        Ok(_) => {
            return Err(format!(
                "Invalid trust store {}: expected an object",
                path.display()
            ));
        }
        Err(e) => {
            return Err(format!(
                "Failed to read trust store {}: {e}",
                path.display()
            ));
        }
    };
    for dir in canonical(cwd).ancestors() {
        if let Some(Value::Bool(decision)) = data.get(dir.to_string_lossy().as_ref()) {
            return Ok(Some((dir.display().to_string(), *decision)));
        }
    }
    Ok(None)
}

/// pi's `canonicalizePath`: the real path when it exists, else the lexically cleaned absolute one.
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| {
        let mut out = PathBuf::new();
        for part in path.components() {
            match part {
                std::path::Component::ParentDir => {
                    out.pop();
                }
                std::path::Component::CurDir => {}
                other => out.push(other),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Tree(PathBuf);
    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tree(tag: &str) -> Tree {
        let dir = std::env::temp_dir().join(format!("pi-trust-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("agent")).unwrap();
        std::fs::create_dir_all(dir.join("home")).unwrap();
        std::fs::create_dir_all(dir.join("repo/sub/.pi")).unwrap();
        Tree(std::fs::canonicalize(&dir).unwrap())
    }

    #[test]
    fn bare_pi_dir_needs_no_decision_but_settings_do() {
        let t = tree("bare");
        let cwd = t.0.join("repo/sub");
        let home = t.0.join("home");
        let agent = t.0.join("agent");
        assert!(resolve(&agent, &cwd, &home, None, None).trusted);
        std::fs::write(cwd.join(".pi/settings.json"), "{}").unwrap();
        let skipped = resolve(&agent, &cwd, &home, None, None);
        assert!(!skipped.trusted);
        assert_eq!(skipped.skipped, vec![cwd.join(".pi/settings.json")]);
        assert!(resolve(&agent, &cwd, &home, Some(true), None).trusted);
        assert!(resolve(&agent, &cwd, &home, None, Some(&json!("always"))).trusted);
        assert!(!resolve(&agent, &cwd, &home, None, Some(&json!("never"))).trusted);
    }

    #[test]
    fn closest_saved_decision_wins_and_null_decides_nothing() {
        let t = tree("saved");
        let cwd = t.0.join("repo/sub");
        let home = t.0.join("home");
        let agent = t.0.join("agent");
        std::fs::create_dir_all(cwd.join(".pi/extensions")).unwrap();
        let repo = t.0.join("repo").display().to_string();
        let sub = cwd.display().to_string();
        let write = |v: Value| std::fs::write(agent.join("trust.json"), v.to_string()).unwrap();
        write(json!({ &repo: true }));
        assert!(resolve(&agent, &cwd, &home, None, None).trusted);
        write(json!({ &repo: true, &sub: false }));
        assert!(!resolve(&agent, &cwd, &home, None, None).trusted);
        write(json!({ &repo: true, &sub: null }));
        assert!(resolve(&agent, &cwd, &home, None, None).trusted);
        // The command line beats the file.
        assert!(!resolve(&agent, &cwd, &home, Some(false), None).trusted);
        // A broken file trusts nothing.
        std::fs::write(agent.join("trust.json"), "[1]").unwrap();
        assert!(!resolve(&agent, &cwd, &home, None, Some(&json!("always"))).trusted);
    }

    #[test]
    fn ancestor_agents_skills_need_trust_but_home_ones_do_not() {
        let t = tree("agents");
        let cwd = t.0.join("repo/sub");
        let agent = t.0.join("agent");
        std::fs::create_dir_all(t.0.join("repo/.agents/skills")).unwrap();
        let r = resolve(&agent, &cwd, &t.0.join("home"), None, None);
        assert_eq!(r.skipped, vec![t.0.join("repo/.agents/skills")]);
        // The same folder as $HOME/.agents/skills is the user's own.
        assert!(resolve(&agent, &cwd, &t.0.join("repo"), None, None).trusted);
    }
}
