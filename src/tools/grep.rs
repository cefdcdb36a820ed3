//! The grep tool: content search through ripgrep (`rg --json`, from `<agentDir>/bin` or PATH) with
//! pi's output format, limits and notices.
//!
//! Fallback when `rg` is missing (the reference would try to download it and otherwise fail):
//! walk the tree ourselves (see `glob.rs`: hidden files included, `.git`/`node_modules` skipped,
//! simple .gitignore rules) and match each line — with a plain substring test when the pattern is
//! literal (flag or no regex metacharacters), else through the system `grep -P` (or `grep -E`
//! when -P is unsupported), whose regex dialect is close to but not exactly ripgrep's.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Map, Value};

use super::truncate::{
    DEFAULT_MAX_BYTES, GREP_MAX_LINE_LENGTH, NO_LINE_LIMIT, format_size, truncate_head,
    truncate_line,
};
use super::walk::walk;
use super::{ABORTED, ToolContext, ToolOutput, number_arg};
use crate::child::CancelFlag;
use crate::child::{LinesEnd, run_lines};
use crate::glob::{Glob, GlobOptions};
use crate::ignore::RG_FILES;
use crate::js::js_number_string;

pub const DEFAULT_LIMIT: usize = 100;

/// A helper binary: `<agentDir>/bin/<name>` first, then each of `names` on PATH.
pub fn find_tool(agent_dir: &Path, names: &[&str]) -> Option<PathBuf> {
    let local = agent_dir.join("bin").join(names[0]);
    if local.is_file() {
        return Some(local);
    }
    names
        .iter()
        .find_map(|name| crate::child::find_on_path(name))
}

struct Match {
    file: PathBuf,
    line_number: usize,
    line_text: Option<String>,
}

struct Search<'a> {
    pattern: &'a str,
    glob: Option<&'a str>,
    ignore_case: bool,
    literal: bool,
    limit: f64,
}

pub fn execute(
    args: &Value,
    context: &ToolContext,
    cancel: &CancelFlag,
) -> Result<ToolOutput, String> {
    let search = Search {
        pattern: args
            .get("pattern")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        glob: args
            .get("glob")
            .and_then(Value::as_str)
            .filter(|g| !g.is_empty()),
        ignore_case: args
            .get("ignoreCase")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        literal: args
            .get("literal")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        limit: number_arg(args, "limit")
            .unwrap_or(DEFAULT_LIMIT as f64)
            .max(1.0),
    };
    let context_lines = args
        .get("context")
        .and_then(Value::as_f64)
        .filter(|c| *c > 0.0)
        .map(|c| c as usize)
        .unwrap_or(0);
    let search_path = context.listing_path(args)?;
    let Ok(metadata) = std::fs::metadata(&search_path) else {
        return Err(format!("Path not found: {}", search_path.display()));
    };
    let is_dir = metadata.is_dir();
    let (matches, limit_reached) = match find_tool(&context.agent_dir, &["rg"]) {
        Some(rg) => search_with_rg(&rg, &search, &search_path, cancel)?,
        None => search_fallback(&search, &search_path, is_dir, cancel)?,
    };
    if cancel.is_cancelled() {
        return Err(ABORTED.to_string());
    }
    if matches.is_empty() {
        return Ok(ToolOutput::text("No matches found"));
    }
    Ok(format_matches(
        &matches,
        limit_reached,
        search.limit,
        &search_path,
        is_dir,
        context_lines,
    ))
}

fn search_with_rg(
    rg: &Path,
    search: &Search,
    search_path: &Path,
    cancel: &CancelFlag,
) -> Result<(Vec<Match>, bool), String> {
    let mut command = Command::new(rg);
    super::env::scrub(&mut command);
    command.args(["--json", "--line-number", "--color=never", "--hidden"]);
    if search.ignore_case {
        command.arg("--ignore-case");
    }
    if search.literal {
        command.arg("--fixed-strings");
    }
    if let Some(glob) = search.glob {
        command.args(["--glob", glob]);
    }
    command.arg("--").arg(search.pattern).arg(search_path);
    let mut matches = Vec::new();
    let mut limit_reached = false;
    let end = run_lines(&mut command, cancel, &mut |line| {
        if line.trim().is_empty() || matches.len() as f64 >= search.limit {
            return true;
        }
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            return true;
        };
        if event.get("type").and_then(Value::as_str) != Some("match") {
            return true;
        }
        let data = &event["data"];
        if let (Some(file), Some(number)) = (rg_bytes(&data["path"]), data["line_number"].as_u64())
        {
            use std::os::unix::ffi::OsStringExt;
            matches.push(Match {
                file: PathBuf::from(std::ffi::OsString::from_vec(file)),
                line_number: number as usize,
                line_text: rg_bytes(&data["lines"])
                    .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            });
        }
        if matches.len() as f64 >= search.limit {
            limit_reached = true;
            return false;
        }
        true
    })
    .map_err(|e| format!("Failed to run ripgrep: {e}"))?;
    match end {
        LinesEnd::Aborted => Err(ABORTED.to_string()),
        LinesEnd::Exited(code, stderr) if code != Some(0) && code != Some(1) => {
            let trimmed = stderr.trim();
            Err(if trimmed.is_empty() {
                format!(
                    "ripgrep exited with code {}",
                    code.map(|c| c.to_string())
                        .unwrap_or_else(|| "null".to_string())
                )
            } else {
                trimmed.to_string()
            })
        }
        _ => Ok((matches, limit_reached)),
    }
}

/// ripgrep's `{"text": …}` or, for paths and lines that are not UTF-8, `{"bytes": <base64>}`.
fn rg_bytes(data: &Value) -> Option<Vec<u8>> {
    if let Some(text) = data["text"].as_str() {
        return Some(text.as_bytes().to_vec());
    }
    base64_decode(data["bytes"].as_str()?)
}

/// Standard base64 (padding optional); None on any other character.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    LENIENT.decode(text).ok()
}

fn has_regex_syntax(pattern: &str) -> bool {
    pattern.chars().any(|c| ".^$*+?()[]{}|\\".contains(c))
}

/// `-P` when the system grep supports it (closest to ripgrep's syntax), else `-E`.
fn system_grep() -> Option<&'static (PathBuf, &'static str)> {
    static GREP: OnceLock<Option<(PathBuf, &'static str)>> = OnceLock::new();
    GREP.get_or_init(|| {
        let path = crate::child::find_on_path("grep")?;
        let pcre = Command::new(&path)
            .args(["-P", "x", "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.code() == Some(1));
        Some((path, if pcre { "-P" } else { "-E" }))
    })
    .as_ref()
}

fn looks_binary(path: &Path) -> bool {
    let Ok(mut file) = std::fs::File::open(path) else {
        return true;
    };
    let mut head = [0u8; 8192];
    let read = file.read(&mut head).unwrap_or(0);
    head[..read].contains(&0)
}

/// rg's `--glob`: a pattern without a `/` matches the file name, one with a `/` the path below
/// the search root; a leading `!` excludes what matches.
struct GlobFilter {
    glob: Glob,
    negated: bool,
    full_path: bool,
}

impl GlobFilter {
    fn new(glob: &str) -> GlobFilter {
        let (negated, pattern) = match glob.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, glob),
        };
        GlobFilter {
            glob: Glob::new(pattern.trim_start_matches('/'), GlobOptions::GLOBSET),
            negated,
            full_path: pattern.contains('/'),
        }
    }

    fn allows(&self, relative: &str) -> bool {
        let subject = if self.full_path {
            relative
        } else {
            relative.rsplit('/').next().unwrap_or(relative)
        };
        self.glob.matches(subject) != self.negated
    }
}

fn search_fallback(
    search: &Search,
    search_path: &Path,
    is_dir: bool,
    cancel: &CancelFlag,
) -> Result<(Vec<Match>, bool), String> {
    let mut files = Vec::new();
    if is_dir {
        let filter = search.glob.map(GlobFilter::new);
        walk(search_path, RG_FILES, cancel, &mut |path, is_dir| {
            if !is_dir {
                let relative = path
                    .strip_prefix(search_path)
                    .map(|r| r.to_string_lossy().to_string())
                    .unwrap_or_default();
                if filter.as_ref().is_none_or(|f| f.allows(&relative)) && !looks_binary(path) {
                    files.push(path.to_path_buf());
                }
            }
            true
        });
    } else {
        files.push(search_path.to_path_buf());
    }
    if cancel.is_cancelled() {
        return Err(ABORTED.to_string());
    }
    let mut matches = Vec::new();
    if search.literal || !has_regex_syntax(search.pattern) {
        let needle = if search.ignore_case {
            search.pattern.to_lowercase()
        } else {
            search.pattern.to_string()
        };
        for file in files {
            if cancel.is_cancelled() {
                return Err(ABORTED.to_string());
            }
            let Ok(bytes) = std::fs::read(&file) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            for (index, line) in text.split('\n').enumerate() {
                let found = if search.ignore_case {
                    line.to_lowercase().contains(&needle)
                } else {
                    line.contains(&needle)
                };
                if found {
                    matches.push(Match {
                        file: file.clone(),
                        line_number: index + 1,
                        line_text: Some(line.to_string()),
                    });
                    if matches.len() as f64 >= search.limit {
                        return Ok((matches, true));
                    }
                }
            }
        }
        return Ok((matches, false));
    }
    let Some((grep, flavor)) = system_grep() else {
        return Err("ripgrep (rg) is not available and could not be downloaded".to_string());
    };
    for batch in files.chunks(200) {
        let mut command = Command::new(grep);
        super::env::scrub(&mut command);
        command.args([*flavor, "-n", "-H", "-Z", "-I", "--color=never"]);
        if search.ignore_case {
            command.arg("-i");
        }
        command.arg("-e").arg(search.pattern).arg("--").args(batch);
        let mut limit_reached = false;
        let end = run_lines(&mut command, cancel, &mut |line| {
            let Some((file, rest)) = line.split_once('\0') else {
                return true;
            };
            let Some((number, text)) = rest.split_once(':') else {
                return true;
            };
            let Ok(number) = number.parse::<usize>() else {
                return true;
            };
            matches.push(Match {
                file: PathBuf::from(file),
                line_number: number,
                line_text: Some(text.to_string()),
            });
            if matches.len() as f64 >= search.limit {
                limit_reached = true;
                return false;
            }
            true
        })
        .map_err(|e| format!("Failed to run grep: {e}"))?;
        match end {
            LinesEnd::Aborted => return Err(ABORTED.to_string()),
            LinesEnd::Exited(Some(2), stderr) => {
                let trimmed = stderr.trim();
                return Err(if trimmed.is_empty() {
                    "grep exited with code 2".to_string()
                } else {
                    trimmed.to_string()
                });
            }
            _ => {}
        }
        if limit_reached {
            return Ok((matches, true));
        }
    }
    Ok((matches, false))
}

fn format_matches(
    matches: &[Match],
    limit_reached: bool,
    limit: f64,
    search_path: &Path,
    is_dir: bool,
    context_lines: usize,
) -> ToolOutput {
    let format_path = |file: &Path| -> String {
        if is_dir && let Ok(relative) = file.strip_prefix(search_path) {
            let relative = relative.to_string_lossy();
            if !relative.is_empty() {
                return relative.to_string();
            }
        }
        file.file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default()
    };
    let mut lines_truncated = false;
    let mut output_lines: Vec<String> = Vec::new();
    let mut cache: std::collections::HashMap<PathBuf, Vec<String>> =
        std::collections::HashMap::new();
    for m in matches {
        let relative = format_path(&m.file);
        if context_lines == 0
            && let Some(text) = &m.line_text
        {
            let sanitized = text.replace("\r\n", "\n").replace('\r', "");
            let sanitized = sanitized.strip_suffix('\n').unwrap_or(&sanitized);
            let (shown, cut) = truncate_line(sanitized);
            lines_truncated |= cut;
            output_lines.push(format!("{relative}:{}: {shown}", m.line_number));
            continue;
        }
        let lines = cache
            .entry(m.file.clone())
            .or_insert_with(|| match std::fs::read(&m.file) {
                Ok(bytes) => String::from_utf8_lossy(&bytes)
                    .replace("\r\n", "\n")
                    .replace('\r', "\n")
                    .split('\n')
                    .map(str::to_string)
                    .collect(),
                Err(_) => Vec::new(),
            });
        if lines.is_empty() {
            output_lines.push(format!(
                "{relative}:{}: (unable to read file)",
                m.line_number
            ));
            continue;
        }
        let (start, end) = if context_lines > 0 {
            (
                m.line_number.saturating_sub(context_lines).max(1),
                (m.line_number + context_lines).min(lines.len()),
            )
        } else {
            (m.line_number, m.line_number)
        };
        for current in start..=end {
            let text = lines
                .get(current - 1)
                .map(String::as_str)
                .unwrap_or("")
                .replace('\r', "");
            let (shown, cut) = truncate_line(&text);
            lines_truncated |= cut;
            if current == m.line_number {
                output_lines.push(format!("{relative}:{current}: {shown}"));
            } else {
                output_lines.push(format!("{relative}-{current}- {shown}"));
            }
        }
    }
    let truncation = truncate_head(&output_lines.join("\n"), NO_LINE_LIMIT, DEFAULT_MAX_BYTES);
    let mut output = truncation.content.clone();
    let mut details = Map::new();
    let mut notices = Vec::new();
    if limit_reached {
        notices.push(format!(
            "{} matches limit reached. Use limit={} for more, or refine pattern",
            js_number_string(limit),
            js_number_string(limit * 2.0)
        ));
        details.insert(
            "matchLimitReached".to_string(),
            crate::js::number_value(limit),
        );
    }
    if truncation.truncated {
        notices.push(format!("{} limit reached", format_size(DEFAULT_MAX_BYTES)));
        details.insert("truncation".to_string(), truncation.to_json());
    }
    if lines_truncated {
        notices.push(format!(
            "Some lines truncated to {GREP_MAX_LINE_LENGTH} chars. Use read tool to see full lines"
        ));
        details.insert("linesTruncated".to_string(), Value::Bool(true));
    }
    if !notices.is_empty() {
        output.push_str(&format!("\n\n[{}]", notices.join(". ")));
    }
    ToolOutput {
        details: if details.is_empty() {
            None
        } else {
            Some(Value::Object(details))
        },
        ..ToolOutput::text(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// rg's `--glob` as `rg --files -g` reads it: a pattern without `/` is the file name, one
    /// with `/` is anchored at the search root, `!` excludes, braces expand, case matters.
    #[test]
    fn glob_filter_reads_globs_like_rg() {
        let files = [
            "src/a.rs",
            "src/deep/B.rs",
            "Docs/README.md",
            "src/deep/c.txt",
        ];
        let allowed = |glob: &str| -> Vec<&str> {
            let filter = GlobFilter::new(glob);
            files.into_iter().filter(|f| filter.allows(f)).collect()
        };
        assert_eq!(allowed("*.rs"), ["src/a.rs", "src/deep/B.rs"]);
        assert_eq!(allowed("!*.rs"), ["Docs/README.md", "src/deep/c.txt"]);
        assert!(allowed("deep/*").is_empty());
        assert_eq!(allowed("src/deep/*"), ["src/deep/B.rs", "src/deep/c.txt"]);
        assert_eq!(allowed("*.{md,txt}"), ["Docs/README.md", "src/deep/c.txt"]);
        assert!(allowed("*.RS").is_empty());
    }

    #[test]
    fn base64_decodes_ripgrep_bytes() {
        assert_eq!(base64_decode("L3RtcC9i/w==").unwrap(), b"/tmp/b\xFF");
        assert_eq!(base64_decode("Zm8").unwrap(), b"fo");
        assert_eq!(base64_decode("Zg==").unwrap(), b"f");
        assert_eq!(base64_decode("!!"), None);
        assert_eq!(
            rg_bytes(&json!({"text": "a"})).unwrap(),
            b"a",
            "plain text form"
        );
    }

    /// A file whose name is not UTF-8 (ripgrep reports it base64-encoded), a binary file named
    /// explicitly, and a tree with symlink loops: matches come back, nothing hangs or fails.
    #[test]
    fn odd_names_binary_files_and_symlink_loops() {
        use std::os::unix::ffi::OsStrExt;
        let dir =
            std::env::temp_dir().join(format!("pi-rs-grep-odd-{}", crate::ids::random_hex16()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = std::ffi::OsStr::from_bytes(b"bad\xFFname.txt");
        std::fs::write(dir.join(name), b"needle here \xFF\n").unwrap();
        std::fs::write(dir.join("blob.bin"), b"needle one\n\0\0binary needle\n").unwrap();
        std::os::unix::fs::symlink(".", dir.join("loop")).unwrap();
        std::os::unix::fs::symlink("a", dir.join("b")).unwrap();
        std::os::unix::fs::symlink("b", dir.join("a")).unwrap();
        let ctx = ToolContext::for_test(&dir);
        let cancel = CancelFlag::default();
        let out = execute(&json!({"pattern":"needle"}), &ctx, &cancel).unwrap();
        let shown = out.first_text();
        assert!(
            shown.contains("bad\u{FFFD}name.txt:1: needle here \u{FFFD}"),
            "{shown}"
        );
        let out = execute(
            &json!({"pattern":"needle","path":"blob.bin"}),
            &ctx,
            &cancel,
        )
        .unwrap();
        assert!(
            out.first_text().starts_with("blob.bin:1: needle one"),
            "{}",
            out.first_text()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// These run whichever backend the machine has (rg if installed, else the fallback); the
    /// expected texts are backend-independent.
    #[test]
    fn grep_formats_matches_context_and_limits() {
        let dir = std::env::temp_dir().join(format!("pi-rs-grep-{}", crate::ids::random_hex16()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::create_dir_all(dir.join(".hidden")).unwrap();
        std::fs::write(dir.join("src/main.rs"), "fn main() {}\nlet x = 1;\n").unwrap();
        std::fs::write(dir.join("readme.txt"), "hello world\nHello again\nbye\n").unwrap();
        std::fs::write(
            dir.join(".hidden/h.txt"),
            format!("secret hello {}\n", "z".repeat(600)),
        )
        .unwrap();
        let ctx = ToolContext::for_test(&dir);
        let cancel = CancelFlag::default();
        let out = execute(
            &json!({"pattern":"hello","glob":"*.txt","path":"readme.txt"}),
            &ctx,
            &cancel,
        )
        .unwrap();
        assert_eq!(out.first_text(), "readme.txt:1: hello world");
        let out = execute(
            &json!({"pattern":"hello","ignoreCase":true,"path":"readme.txt","context":1}),
            &ctx,
            &cancel,
        )
        .unwrap();
        assert_eq!(
            out.first_text(),
            "readme.txt:1: hello world\nreadme.txt-2- Hello again\nreadme.txt-1- hello world\nreadme.txt:2: Hello again\nreadme.txt-3- bye"
        );
        let out = execute(&json!({"pattern":"secret"}), &ctx, &cancel).unwrap();
        assert_eq!(
            out.first_text(),
            format!(
                ".hidden/h.txt:1: secret hello {}... [truncated]\n\n[Some lines truncated to 500 chars. Use read tool to see full lines]",
                "z".repeat(500 - 13)
            )
        );
        assert_eq!(out.details, Some(json!({"linesTruncated":true})));
        let out = execute(
            &json!({"pattern":"l+o","path":"readme.txt","limit":1}),
            &ctx,
            &cancel,
        )
        .unwrap();
        assert_eq!(
            out.first_text(),
            "readme.txt:1: hello world\n\n[1 matches limit reached. Use limit=2 for more, or refine pattern]"
        );
        assert_eq!(out.details, Some(json!({"matchLimitReached":1})));
        assert_eq!(
            execute(&json!({"pattern":"nothing-here"}), &ctx, &cancel)
                .unwrap()
                .first_text(),
            "No matches found"
        );
        let err = execute(&json!({"pattern":"x","path":"missing"}), &ctx, &cancel).unwrap_err();
        assert_eq!(
            err,
            format!("Path not found: {}", dir.join("missing").display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
