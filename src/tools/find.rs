//! The find tool: files by glob through `fd` (from `<agentDir>/bin` or PATH, also as `fdfind`)
//! with the reference's arguments, relative POSIX paths, limits and notices.
//!
//! Fallback when fd is missing (the reference would download it or fail): our own walk and glob
//! matcher (`glob.rs`): the pattern is matched against the entry name, or against the path
//! relative to the search directory when it contains `/`; fd's smart case is imitated (all
//! lowercase pattern → case-insensitive); directories are listed with a trailing `/`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::grep::find_tool;
use super::truncate::listing_output;
use super::walk::walk;
use super::{ABORTED, ToolContext, ToolOutput, number_arg};
use crate::child::CancelFlag;
use crate::child::{LinesEnd, run_lines};
use crate::glob::{Glob, GlobOptions};
use crate::ignore::FD_FILES;
use crate::js::{js_number_string, number_value};

pub const DEFAULT_LIMIT: usize = 1000;

pub fn execute(
    args: &Value,
    context: &ToolContext,
    cancel: &CancelFlag,
) -> Result<ToolOutput, String> {
    let pattern = args
        .get("pattern")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let limit = number_arg(args, "limit").unwrap_or(DEFAULT_LIMIT as f64);
    let search_path = context.listing_path(args)?;
    let lines = match find_tool(&context.agent_dir, &["fd", "fdfind"]) {
        Some(fd) => run_fd(&fd, pattern, &search_path, limit, cancel)?,
        None => find_fallback(pattern, &search_path, limit, cancel)?,
    };
    if cancel.is_cancelled() {
        return Err(ABORTED.to_string());
    }
    if lines.is_empty() {
        return Ok(ToolOutput::text("No files found matching pattern"));
    }
    let prefix = search_path.to_string_lossy().to_string();
    let mut relativized = Vec::new();
    for raw in &lines {
        let line = raw.strip_suffix('\r').unwrap_or(raw).trim();
        if line.is_empty() {
            continue;
        }
        let had_slash = line.ends_with('/');
        let mut relative = match line.strip_prefix(&prefix) {
            Some(rest) if rest.starts_with('/') => rest[1..].to_string(),
            _ => relative_path(&search_path, Path::new(line)),
        };
        if had_slash && !relative.ends_with('/') {
            relative.push('/');
        }
        relativized.push(relative);
    }
    let limit_reached = relativized.len() as f64 >= limit;
    let notice = limit_reached.then(|| {
        let text = format!(
            "{} results limit reached. Use limit={} for more, or refine pattern",
            js_number_string(limit),
            js_number_string(limit * 2.0)
        );
        (text, "resultLimitReached", number_value(limit))
    });
    Ok(listing_output(&relativized.join("\n"), notice))
}

/// Node's `path.relative(from, to)` for absolute paths.
fn relative_path(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to_parts: Vec<_> = to.components().collect();
    let common = from
        .iter()
        .zip(&to_parts)
        .take_while(|(a, b)| a == b)
        .count();
    let mut parts: Vec<String> = vec!["..".to_string(); from.len() - common];
    parts.extend(
        to_parts[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().to_string()),
    );
    parts.join("/")
}

fn run_fd(
    fd: &Path,
    pattern: &str,
    search_path: &Path,
    limit: f64,
    cancel: &CancelFlag,
) -> Result<Vec<String>, String> {
    match run_fd_with(fd, pattern, search_path, limit, cancel, true) {
        // fd before 8.7 (Debian 12's) has no --no-require-git: ask again without it.
        Err(e) if e.contains("--no-require-git") => {
            run_fd_with(fd, pattern, search_path, limit, cancel, false)
        }
        other => other,
    }
}

fn run_fd_with(
    fd: &Path,
    pattern: &str,
    search_path: &Path,
    limit: f64,
    cancel: &CancelFlag,
    no_require_git: bool,
) -> Result<Vec<String>, String> {
    let mut command = Command::new(fd);
    super::env::scrub(&mut command);
    command.args(["--glob", "--color=never", "--hidden"]);
    if no_require_git {
        command.arg("--no-require-git");
    }
    command.args(["--max-results", &js_number_string(limit)]);
    let mut effective = pattern.to_string();
    if pattern.contains('/') {
        command.arg("--full-path");
        if !pattern.starts_with('/') && !pattern.starts_with("**/") && pattern != "**" {
            effective = format!("**/{pattern}");
        }
    }
    command.arg("--").arg(&effective).arg(search_path);
    let mut lines = Vec::new();
    let end = run_lines(&mut command, cancel, &mut |line| {
        lines.push(line.to_string());
        true
    })
    .map_err(|e| format!("Failed to run fd: {e}"))?;
    match end {
        LinesEnd::Aborted => Err(ABORTED.to_string()),
        LinesEnd::Exited(code, stderr) if code != Some(0) && lines.iter().all(|l| l.is_empty()) => {
            let trimmed = stderr.trim();
            Err(if trimmed.is_empty() {
                format!(
                    "fd exited with code {}",
                    code.map(|c| c.to_string())
                        .unwrap_or_else(|| "null".to_string())
                )
            } else {
                trimmed.to_string()
            })
        }
        _ => Ok(lines),
    }
}

fn find_fallback(
    pattern: &str,
    search_path: &Path,
    limit: f64,
    cancel: &CancelFlag,
) -> Result<Vec<String>, String> {
    if !search_path.is_dir() {
        return Err(format!("Path not found: {}", search_path.display()));
    }
    // fd's smart case: a pattern without capitals ignores case.
    let case_insensitive = !pattern.chars().any(char::is_uppercase);
    let glob = Glob::new(
        pattern.trim_start_matches('/'),
        GlobOptions::GLOBSET.ignore_case(case_insensitive),
    );
    let full_path = pattern.contains('/');
    let mut found = Vec::new();
    walk(search_path, FD_FILES, cancel, &mut |path, is_dir| {
        let Ok(relative) = path.strip_prefix(search_path) else {
            return true;
        };
        let relative = relative.to_string_lossy();
        let subject = if full_path {
            &relative
        } else {
            relative.rsplit('/').next().unwrap_or(&relative)
        };
        if glob.matches(subject) {
            // Absolute, like fd prints for an absolute search path; execute() relativizes.
            let absolute = path.to_string_lossy().to_string();
            found.push(if is_dir {
                format!("{absolute}/")
            } else {
                absolute
            });
            if found.len() as f64 >= limit {
                return false;
            }
        }
        true
    });
    if cancel.is_cancelled() {
        return Err(ABORTED.to_string());
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn find_lists_relative_paths_with_limits() {
        let dir = std::env::temp_dir().join(format!("pi-rs-find-{}", crate::ids::random_hex16()));
        std::fs::create_dir_all(dir.join("src/deep")).unwrap();
        std::fs::write(dir.join("src/a.rs"), "").unwrap();
        std::fs::write(dir.join("src/deep/b.rs"), "").unwrap();
        std::fs::write(dir.join("c.txt"), "").unwrap();
        let ctx = ToolContext::for_test(&dir);
        let cancel = CancelFlag::default();
        let out = execute(&json!({"pattern":"*.rs"}), &ctx, &cancel).unwrap();
        let mut lines: Vec<String> = out.first_text().lines().map(str::to_string).collect();
        lines.sort();
        assert_eq!(lines, ["src/a.rs", "src/deep/b.rs"]);
        let out = execute(&json!({"pattern":"src/deep/*.rs"}), &ctx, &cancel).unwrap();
        assert_eq!(out.first_text(), "src/deep/b.rs");
        let out = execute(&json!({"pattern":"*.rs","limit":1}), &ctx, &cancel).unwrap();
        assert!(
            out.first_text().ends_with(
                "\n\n[1 results limit reached. Use limit=2 for more, or refine pattern]"
            )
        );
        assert_eq!(out.details, Some(json!({"resultLimitReached":1})));
        assert_eq!(
            execute(&json!({"pattern":"*.zip"}), &ctx, &cancel)
                .unwrap()
                .first_text(),
            "No files found matching pattern"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The fallback lists what `fd --glob --hidden` (8.6, `--full-path` for patterns with a `/`)
    /// lists for the same tree: smart case, `**`, braces, `.gitignore` honored.
    #[test]
    fn fallback_matches_fd() {
        let dir = std::env::temp_dir().join(format!("pi-rs-find-{}", crate::ids::random_hex16()));
        for sub in ["src/deep", "Docs", "target"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join(".gitignore"), "target/\n").unwrap();
        for file in [
            "target/x.rs",
            "src/a.rs",
            "src/deep/B.rs",
            "Docs/README.md",
            "src/deep/c.txt",
        ] {
            std::fs::write(dir.join(file), "").unwrap();
        }
        let cancel = CancelFlag::default();
        let found = |pattern: &str| -> Vec<String> {
            let mut lines: Vec<String> = find_fallback(pattern, &dir, 100.0, &cancel)
                .unwrap()
                .into_iter()
                .map(|line| {
                    line.strip_prefix(&format!("{}/", dir.display()))
                        .unwrap()
                        .to_string()
                })
                .collect();
            lines.sort();
            lines
        };
        assert_eq!(found("*.rs"), ["src/a.rs", "src/deep/B.rs"]);
        assert!(found("*.RS").is_empty());
        assert_eq!(found("src/**/*.rs"), ["src/a.rs", "src/deep/B.rs"]);
        assert_eq!(found("**/deep/*"), ["src/deep/B.rs", "src/deep/c.txt"]);
        assert_eq!(found("readme*"), ["Docs/README.md"]);
        assert_eq!(
            found("*.{rs,txt}"),
            ["src/a.rs", "src/deep/B.rs", "src/deep/c.txt"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
