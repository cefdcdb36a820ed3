//! Where sessions live and how a command line names one: the per-cwd default directory
//! (`<agentDir>/sessions/--<encoded cwd>--/`), file names (`<ISO with : and . as ->_<id>.jsonl`),
//! the most recent session for `--continue`, and `--session`/`--fork` argument resolution (a path,
//! or a prefix of a session id searched in the current directory, then across all projects).
//! Input: directories and arguments. Output: paths. Reads headers only, never writes.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

use super::file;

/// `<agent_dir>/sessions/--<cwd without its leading separator, with / \ : replaced by ->--`.
/// Pure: the caller creates the directory.
pub fn default_session_dir(agent_dir: &Path, cwd: &Path) -> PathBuf {
    let cwd = cwd.to_string_lossy();
    let trimmed = cwd.strip_prefix(['/', '\\']).unwrap_or(&cwd);
    let encoded: String = trimmed
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect();
    agent_dir.join("sessions").join(format!("--{encoded}--"))
}

/// `<timestamp with : and . replaced by ->_<session id>.jsonl`.
pub fn session_file_name(iso_timestamp: &str, session_id: &str) -> String {
    let stamp: String = iso_timestamp
        .chars()
        .map(|c| if matches!(c, ':' | '.') { '-' } else { c })
        .collect();
    format!("{stamp}_{session_id}.jsonl")
}

/// The `.jsonl` file in `dir` with a valid header and the newest mtime (pi's --continue).
pub fn find_most_recent(dir: &Path) -> Option<PathBuf> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for path in jsonl_files(dir) {
        if file::read_header(&path).is_none() {
            continue;
        }
        let Ok(modified) = fs::metadata(&path).and_then(|m| m.modified()) else {
            continue;
        };
        if newest.as_ref().is_none_or(|(time, _)| modified > *time) {
            newest = Some((modified, path));
        }
    }
    newest.map(|(_, path)| path)
}

/// The sessions in `dir` with a valid header, most recently active first, each with its last
/// activity (ms since the epoch, as `--session` ranks matches).
pub fn list_sessions(dir: &Path) -> Vec<(PathBuf, super::SessionHeader, i64)> {
    let mut found: Vec<_> = jsonl_files(dir)
        .into_iter()
        .filter_map(|path| {
            let header = file::read_header(&path)?;
            let activity = last_activity_ms(&path, header.timestamp());
            Some((path, header, activity))
        })
        .collect();
    found.sort_by_key(|(_, _, activity)| std::cmp::Reverse(*activity));
    found
}

/// How a `--session` / `--fork` argument resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum SessionArg {
    /// The argument looks like a path (contains `/` or `\`, or ends in `.jsonl`); relative to the
    /// process cwd, possibly not existing yet.
    Path(PathBuf),
    /// A session in the current project's session directory whose id starts with the argument.
    Local(PathBuf),
    /// A session of another project (pi asks before forking it into this one).
    Global {
        path: PathBuf,
        cwd: String,
    },
    NotFound,
}

/// Resolves `arg` like pi: path-looking arguments as given; otherwise an id prefix, first in
/// `cwd_session_dir`, then in every directory under `sessions_root`. Among several matches the
/// most recently active session wins (last user/assistant message time, else header time, else
/// mtime).
pub fn resolve_session_arg(arg: &str, cwd_session_dir: &Path, sessions_root: &Path) -> SessionArg {
    if arg.contains('/') || arg.contains('\\') || arg.ends_with(".jsonl") {
        return SessionArg::Path(PathBuf::from(arg));
    }
    if let Some((path, _)) = best_match(arg, jsonl_files(cwd_session_dir)) {
        return SessionArg::Local(path);
    }
    let mut project_dirs: Vec<PathBuf> = fs::read_dir(sessions_root)
        .map(|dir| {
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    project_dirs.sort();
    let all = project_dirs.iter().flat_map(|dir| jsonl_files(dir));
    match best_match(arg, all) {
        Some((path, cwd)) => SessionArg::Global { path, cwd },
        None => SessionArg::NotFound,
    }
}

/// The session file in `dir` whose header id is exactly `id` (`--session-id`); with `cwd`, only
/// one whose header names that directory (a session dir shared by projects).
pub fn find_by_id(dir: &Path, id: &str, cwd: Option<&Path>) -> Option<PathBuf> {
    jsonl_files(dir).into_iter().find(|path| {
        file::read_header(path).is_some_and(|header| {
            header.id() == id
                && cwd.is_none_or(|cwd| header.cwd() == Some(cwd.to_string_lossy().as_ref()))
        })
    })
}

/// A valid `--session-id`: letters, digits, `.`, `_`, `-`, starting and ending with a letter or
/// digit (pi's rule).
pub fn is_valid_session_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    let edge = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    edge(bytes.first())
        && edge(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn jsonl_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl") && p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// The most recently active file whose header id starts with `prefix`, with its header cwd.
fn best_match(prefix: &str, files: impl IntoIterator<Item = PathBuf>) -> Option<(PathBuf, String)> {
    let mut best: Option<(i64, PathBuf, String)> = None;
    for path in files {
        let Some(header) = file::read_header(&path) else {
            continue;
        };
        if !header.id().starts_with(prefix) {
            continue;
        }
        let activity = last_activity_ms(&path, header.timestamp());
        let cwd = header.cwd().unwrap_or("").to_string();
        if best.as_ref().is_none_or(|(time, _, _)| activity > *time) {
            best = Some((activity, path, cwd));
        }
    }
    best.map(|(_, path, cwd)| (path, cwd))
}

/// pi's "modified" date of a session: newest user/assistant message time, else the header's
/// timestamp, else the file's mtime.
fn last_activity_ms(path: &Path, header_timestamp: Option<&str>) -> i64 {
    let mut newest: Option<i64> = None;
    if let Ok(content) = fs::read(path) {
        for line in content.split(|&b| b == b'\n') {
            let Ok(entry) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            if entry["type"] != "message" {
                continue;
            }
            let message = &entry["message"];
            if !matches!(message["role"].as_str(), Some("user" | "assistant"))
                || message.get("content").is_none()
            {
                continue;
            }
            let time = message["timestamp"]
                .as_i64()
                .or_else(|| message["timestamp"].as_f64().map(|t| t as i64))
                .or_else(|| {
                    entry["timestamp"]
                        .as_str()
                        .and_then(crate::time::ms_from_iso)
                });
            if let Some(time) = time {
                newest = Some(newest.map_or(time, |n: i64| n.max(time)));
            }
        }
    }
    if let Some(newest) = newest.filter(|&n| n > 0) {
        return newest;
    }
    if let Some(time) = header_timestamp.and_then(crate::time::ms_from_iso) {
        return time;
    }
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_follow_pi_rule() {
        for good in ["a", "work-1", "a.b_c-9", "X"] {
            assert!(is_valid_session_id(good), "{good}");
        }
        for bad in ["", "-a", "a-", "a/b", "a b", ".a", "é"] {
            assert!(!is_valid_session_id(bad), "{bad}");
        }
    }
    use crate::test_support::temp_dir;

    #[test]
    fn default_dir_encoding_matches_pi() {
        let dir = default_session_dir(Path::new("/a"), Path::new("/home/u/work"));
        assert_eq!(dir, Path::new("/a/sessions/--home-u-work--"));
        let dir = default_session_dir(Path::new("/a"), Path::new("C:\\x\\y"));
        assert_eq!(dir, Path::new("/a/sessions/--C--x-y--"));
    }

    #[test]
    fn file_names_match_pi() {
        assert_eq!(
            session_file_name("2026-11-29T12:33:01.453Z", "01a2274b-6207"),
            "2026-11-29T12-33-01-453Z_01a2274b-6207.jsonl"
        );
    }

    fn write_session(dir: &Path, name: &str, id: &str, cwd: &str, message_ms: i64) -> PathBuf {
        let path = dir.join(name);
        let header = format!(
            r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-01T00:00:00.000Z","cwd":"{cwd}"}}"#
        );
        let message = format!(
            r#"{{"type":"message","id":"00000001","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{{"role":"user","content":"x","timestamp":{message_ms}}}}}"#
        );
        fs::write(&path, format!("{header}\n{message}\n")).unwrap();
        path
    }

    #[test]
    fn resolves_paths_local_and_global_prefixes() {
        let root = temp_dir("resolve");
        let here = root.join("--here--");
        let there = root.join("--there--");
        fs::create_dir_all(&here).unwrap();
        fs::create_dir_all(&there).unwrap();
        let older = write_session(&here, "a.jsonl", "abc-1", "/here", 1000);
        let newer = write_session(&here, "b.jsonl", "abc-2", "/here", 2000);
        let remote = write_session(&there, "c.jsonl", "xyz-1", "/there", 500);
        fs::write(here.join("junk.jsonl"), "nope\n").unwrap();

        assert_eq!(
            resolve_session_arg("x/y", &here, &root),
            SessionArg::Path("x/y".into())
        );
        assert_eq!(
            resolve_session_arg("s.jsonl", &here, &root),
            SessionArg::Path("s.jsonl".into())
        );
        assert_eq!(
            resolve_session_arg("abc", &here, &root),
            SessionArg::Local(newer.clone())
        );
        assert_eq!(
            resolve_session_arg("abc-1", &here, &root),
            SessionArg::Local(older)
        );
        assert_eq!(
            resolve_session_arg("xyz", &here, &root),
            SessionArg::Global {
                path: remote,
                cwd: "/there".into()
            }
        );
        assert_eq!(
            resolve_session_arg("nothing", &here, &root),
            SessionArg::NotFound
        );
        assert!(find_most_recent(&here).is_some());
        assert_eq!(find_most_recent(&root.join("missing")), None);
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn most_recent_is_by_mtime() {
        let dir = temp_dir("recent");
        let first = write_session(&dir, "1.jsonl", "a", "/w", 5000);
        let second = write_session(&dir, "2.jsonl", "b", "/w", 1);
        let old = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        fs::File::options()
            .write(true)
            .open(&second)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(find_most_recent(&dir), Some(first.clone()));
        fs::File::options()
            .write(true)
            .open(&first)
            .unwrap()
            .set_modified(old - std::time::Duration::from_secs(5))
            .unwrap();
        assert_eq!(find_most_recent(&dir), Some(second));
        fs::remove_dir_all(dir).unwrap();
    }
}
