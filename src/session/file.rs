//! Disk side of a session: reading a file into header + entries (repairing a torn tail, skipping
//! and reporting bad middle lines, migrating versions 1 and 2), appending lines, and atomic
//! whole-file writes. Input: paths and lines. Output: parsed data and `SessionError`s.
//!
//! Invariants this module keeps for pi-rs-written files: every line reaches the file through one
//! `write` of the complete line plus its newline; a failed write is cut back to the length the
//! file had before it; whole-file writes go to a temporary file that is fsynced and renamed over
//! the target, so a kill at any moment leaves either the old or the new content.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::SessionError;
use super::entry::{ReadLine, SessionEntry, SessionHeader};
use super::ids;

/// What a session file held.
pub struct LoadedFile {
    pub header: SessionHeader,
    pub entries: Vec<SessionEntry>,
    /// Problems found and repaired or skipped, one sentence each. Not logged here: the caller
    /// reports each once (startup prints them, switch_session logs them).
    pub warnings: Vec<String>,
}

/// Result of reading a path that may hold a session.
pub enum Loaded {
    /// The path does not exist: a new session should be bound to it.
    Missing,
    /// The file is empty, or holds only a torn first line (a crash while pi-rs created it):
    /// nothing to keep, a new session may replace it.
    Empty {
        warnings: Vec<String>,
    },
    Session(LoadedFile),
}

/// Reads and, where needed, repairs or migrates the file at `path`.
pub fn load(path: &Path) -> Result<Loaded, SessionError> {
    let raw = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(e) => {
            return Err(SessionError::File {
                action: "read",
                path: path.to_path_buf(),
                source: e,
            });
        }
    };
    // One buffer for the whole file, kept: message entries hold slices of it rather than a
    // copy each. A file that is not all UTF-8 (a damaged line) is read line by line instead.
    let (shared, raw) = match String::from_utf8(raw) {
        Ok(text) => (Some(std::sync::Arc::new(text)), Vec::new()),
        Err(e) => (None, e.into_bytes()),
    };
    let bytes: &[u8] = match &shared {
        Some(text) => text.as_bytes(),
        None => &raw,
    };
    let lines = split_lines(bytes);

    let mut header: Option<SessionHeader> = None;
    let mut entries: Vec<SessionEntry> = Vec::new();
    // Only for files that need migrating: the remaining lines as values.
    let mut legacy: Option<Vec<Value>> = None;
    let mut bad_lines: Vec<Line> = Vec::new();
    let mut scratch = Vec::new();
    for line in &lines {
        // Not UTF-8 can never be JSON (serde_json refuses it too).
        let text = match &shared {
            // Cut at ASCII bytes (newlines, whitespace), so always at char boundaries.
            Some(all) => trimmed_str(all, line),
            None => std::str::from_utf8(trimmed(bytes, line)).ok(),
        };
        let Some(text) = text else {
            bad_lines.push(*line);
            continue;
        };
        if header.is_none() {
            // The first object decides whether this is a session file at all.
            match serde_json::from_str::<Value>(text) {
                Ok(value) if value.is_object() => {
                    let found =
                        SessionHeader::from_value(value).ok_or_else(|| not_a_session(path))?;
                    if found.version() < SessionHeader::CURRENT_VERSION {
                        legacy = Some(Vec::new());
                    } else {
                        entries.reserve(lines.len());
                    }
                    header = Some(found);
                }
                _ => bad_lines.push(*line),
            }
            continue;
        }
        if let Some(values) = &mut legacy {
            match serde_json::from_str::<Value>(text) {
                Ok(value) if value.is_object() => values.push(value),
                _ => bad_lines.push(*line),
            }
            continue;
        }
        match SessionEntry::read_line(text, &mut scratch, shared.as_ref()) {
            ReadLine::Entry(entry) => entries.push(entry),
            ReadLine::Header => {}
            ReadLine::Invalid => bad_lines.push(*line),
        }
    }

    // The last non-blank line decides whether the tail needs repair.
    let mut warnings = Vec::new();
    let mut keep_len = bytes.len();
    let mut needs_repair = false;
    if let Some(last) = lines.last() {
        let last_is_bad = bad_lines.last().is_some_and(|bad| bad.start == last.start);
        if last_is_bad {
            bad_lines.pop();
            keep_len = last.start;
            needs_repair = true;
            let message = format!(
                "Session file {}: dropped a torn or unparsable last line ({} bytes at offset {})",
                path.display(),
                last.end - last.start,
                last.start
            );
            warnings.push(message);
        } else if !last.terminated {
            keep_len = last.end;
            needs_repair = true;
        }
    }
    for bad in &bad_lines {
        let message = format!(
            "Session file {}: skipped an unparsable line ({} bytes at offset {})",
            path.display(),
            bad.end - bad.start,
            bad.start
        );
        warnings.push(message);
    }

    let Some(mut header) = header else {
        // No object at all. Zero or one line can only be an empty file or our own torn first
        // write; anything longer is some other file we must not overwrite.
        if lines.len() <= 1 {
            return Ok(Loaded::Empty { warnings });
        }
        return Err(not_a_session(path));
    };
    if let Some(mut values) = legacy {
        migrate(&mut header, &mut values);
        let entries: Vec<SessionEntry> = values
            .into_iter()
            .filter(|value| value.get("type").and_then(Value::as_str) != Some("session"))
            .map(SessionEntry::from_value)
            .collect();
        // pi rewrites migrated files in place; we do it atomically.
        let content = whole_file(&header, &entries);
        write_atomically(path, content.as_bytes(), true)?;
        let message = format!(
            "Session file {}: migrated to version {}",
            path.display(),
            SessionHeader::CURRENT_VERSION
        );
        log::info!("{message}");
        return Ok(Loaded::Session(LoadedFile {
            header,
            entries,
            warnings,
        }));
    }
    if needs_repair {
        let mut content = bytes[..keep_len].to_vec();
        if content.last().is_some_and(|&b| b != b'\n') {
            content.push(b'\n');
        }
        repair(path, &content, keep_len as u64)?;
    }
    Ok(Loaded::Session(LoadedFile {
        header,
        entries,
        warnings,
    }))
}

/// A line without leading and trailing whitespace (a CRLF file's CR included).
fn trimmed<'a>(bytes: &'a [u8], line: &Line) -> &'a [u8] {
    bytes
        .get(line.start..line.end)
        .unwrap_or_default()
        .trim_ascii()
}

/// [`trimmed`] of a text.
fn trimmed_str<'a>(text: &'a str, line: &Line) -> Option<&'a str> {
    text.get(line.start..line.end).map(str::trim_ascii)
}

fn not_a_session(path: &Path) -> SessionError {
    SessionError::NotASession(path.to_path_buf())
}

/// Rewrites the repaired content atomically; if the directory refuses a temp file, cuts the file
/// in place instead (the good prefix is already there), so appends never follow a torn line.
fn repair(path: &Path, content: &[u8], good_prefix_len: u64) -> Result<(), SessionError> {
    let atomic = write_atomically(path, content, true);
    let Err(atomic_error) = atomic else {
        return Ok(());
    };
    let in_place = OpenOptions::new().write(true).open(path).and_then(|file| {
        file.set_len(good_prefix_len)?;
        if content.len() as u64 > good_prefix_len {
            // The last good line lacked its newline.
            let mut file = OpenOptions::new().append(true).open(path)?;
            file.write_all(b"\n")?;
        }
        file.sync_all()
    });
    in_place.map_err(|source| SessionError::Repair {
        path: path.to_path_buf(),
        atomic: Box::new(atomic_error),
        source,
    })
}

#[derive(Clone, Copy, Debug)]
struct Line {
    start: usize,
    end: usize,
    terminated: bool,
}

/// Non-blank lines with their byte ranges (without the newline; a trailing CR is ignored by the
/// JSON parser as whitespace).
fn split_lines(bytes: &[u8]) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let (end, terminated) = match memchr::memchr(b'\n', &bytes[start..]) {
            Some(offset) => (start + offset, true),
            None => (bytes.len(), false),
        };
        if !bytes[start..end].iter().all(u8::is_ascii_whitespace) {
            lines.push(Line {
                start,
                end,
                terminated,
            });
        }
        start = end + 1;
    }
    lines
}

/// Brings version 1 and 2 data to version 3 (pi's migrations).
fn migrate(header: &mut SessionHeader, values: &mut [Value]) {
    let version = header.version();
    if version < 2 {
        // v1 was a flat list: give every entry an id and chain it to the previous one, and turn
        // compaction's index (into the whole file, header included) into an id.
        let mut taken = std::collections::HashSet::new();
        let mut previous: Option<String> = None;
        let mut ids_by_file_index: Vec<Option<String>> = vec![None];
        for value in values.iter_mut() {
            if value.get("type").and_then(Value::as_str) == Some("session") {
                ids_by_file_index.push(None);
                continue;
            }
            let id = ids::entry_id_not_in(&taken);
            taken.insert(id.clone());
            value["id"] = Value::String(id.clone());
            value["parentId"] = previous.map_or(Value::Null, Value::String);
            previous = Some(id.clone());
            ids_by_file_index.push(Some(id));
        }
        for value in values.iter_mut() {
            if value.get("type").and_then(Value::as_str) != Some("compaction") {
                continue;
            }
            let Some(object) = value.as_object_mut() else {
                continue;
            };
            if let Some(index) = object.get("firstKeptEntryIndex").and_then(Value::as_u64) {
                if let Some(Some(id)) = ids_by_file_index.get(index as usize) {
                    object.insert("firstKeptEntryId".into(), Value::String(id.clone()));
                }
                object.remove("firstKeptEntryIndex");
            }
        }
    }
    // v2 → v3: extension messages were called hookMessage.
    for value in values.iter_mut() {
        if value.get("type").and_then(Value::as_str) == Some("message")
            && value["message"]["role"].as_str() == Some("hookMessage")
        {
            value["message"]["role"] = Value::String("custom".into());
        }
    }
    header.set_version(SessionHeader::CURRENT_VERSION);
}

/// Header and entries as file content, one line each, newline-terminated.
pub fn whole_file(header: &SessionHeader, entries: &[SessionEntry]) -> String {
    let mut content = header.to_line().into_bytes();
    content.push(b'\n');
    for entry in entries {
        entry.write_line(&mut content);
        content.push(b'\n');
    }
    // Always UTF-8: lines read were checked, the rest is serde_json's output.
    String::from_utf8(content)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Writes `content` to `path` via a fsynced temp file and a rename. With `replace` false an
/// existing non-empty file is an error (a new session must never clobber another file). A new
/// file is 0600 (it holds the whole conversation); a replaced one keeps its mode.
pub fn write_atomically(path: &Path, content: &[u8], replace: bool) -> Result<(), SessionError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let existing = fs::metadata(path).ok();
    if !replace && existing.as_ref().is_some_and(|m| m.len() > 0) {
        return Err(SessionError::AlreadyExists(path.to_path_buf()));
    }
    let mode = existing.map_or(0o600, |m| m.permissions().mode() & 0o7777);
    let temp = temp_path(path);
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        // Exactly the kept mode, whatever the umask.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(content)?;
        crate::disk::fsync(&file)?;
        fs::rename(&temp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(SessionError::File {
            action: "write",
            path: path.to_path_buf(),
            source: e,
        });
    }
    sync_parent_dir(path);
    Ok(())
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let suffix = crate::ids::random_hex(4);
    path.with_file_name(format!(".{name}.{}-{suffix}.tmp", std::process::id()))
}

/// Makes a rename or a file creation durable. Best effort: some filesystems refuse.
pub fn sync_parent_dir(path: &Path) {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(dir) = File::open(dir)
    {
        let _ = dir.sync_all();
    }
}

/// Test hook: the next append to `path` writes `partial` bytes of its line, then fails. Keyed by
/// path because appends run on the disk-writer thread, shared by tests running in parallel.
#[cfg(test)]
static FAIL_APPEND: std::sync::Mutex<Option<(PathBuf, usize)>> = std::sync::Mutex::new(None);

#[cfg(test)]
pub fn fail_next_append(path: &Path, partial: usize) {
    *FAIL_APPEND.lock().unwrap() = Some((path.to_path_buf(), partial));
}

#[cfg(test)]
fn injected_failure(path: &Path) -> Option<usize> {
    let mut hook = FAIL_APPEND.lock().unwrap_or_else(|p| p.into_inner());
    match hook.take() {
        Some((hooked, partial)) if hooked == path => Some(partial),
        other => {
            *hook = other;
            None
        }
    }
}

/// Appends one newline-terminated line with a single write. On failure the file is cut back to
/// its previous length. `Ok(false)` means the file no longer exists (the caller rewrites it).
pub fn append_line(path: &Path, line: &str) -> Result<bool, SessionError> {
    let mut file = match OpenOptions::new().append(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(append_error(path, e)),
    };
    let fail = |e: io::Error| append_error(path, e);
    let length_before = file.metadata().map_err(fail)?.len();
    let mut buffer = Vec::with_capacity(line.len() + 1);
    buffer.extend_from_slice(line.as_bytes());
    buffer.push(b'\n');
    #[cfg(test)]
    if let Some(partial) = injected_failure(path) {
        let _ = file.write_all(&buffer[..partial.min(buffer.len())]);
        let error = io::Error::other("injected write failure");
        return Err(cut_back(&file, path, length_before, fail(error)));
    }
    match file.write_all(&buffer) {
        Ok(()) => Ok(true),
        Err(e) => Err(cut_back(&file, path, length_before, fail(e))),
    }
}

fn append_error(path: &Path, source: io::Error) -> SessionError {
    SessionError::File {
        action: "append to",
        path: path.to_path_buf(),
        source,
    }
}

/// Removes a partial line; if even that fails, says so in the error (the next load repairs it).
fn cut_back(file: &File, path: &Path, length_before: u64, error: SessionError) -> SessionError {
    match file.set_len(length_before) {
        Ok(()) => error,
        Err(e) => {
            log::error!(
                "Session file {}: could not remove a partial line: {e}",
                path.display()
            );
            SessionError::PartialLineLeft {
                error: Box::new(error),
                source: e,
            }
        }
    }
}

/// fsyncs the file.
pub fn sync_file(path: &Path) -> Result<(), SessionError> {
    File::open(path)
        .and_then(|file| crate::disk::fsync(&file))
        .map_err(|source| SessionError::File {
            action: "sync",
            path: path.to_path_buf(),
            source,
        })
}

/// The first line of a file, if it is a session header (bounded read, for directory scans).
pub fn read_header(path: &Path) -> Option<SessionHeader> {
    use std::io::{BufRead, BufReader, Read};
    let file = File::open(path).ok()?;
    let mut first = Vec::new();
    BufReader::new(file)
        .take(1 << 20)
        .read_until(b'\n', &mut first)
        .ok()?;
    SessionHeader::from_value(serde_json::from_slice(&first).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::temp_dir;

    const HEADER: &str = r#"{"type":"session","version":3,"id":"019b7ca9-8f2e-7000-8000-000000000000","timestamp":"2026-01-02T03:04:05.678Z","cwd":"/w"}"#;
    const E1: &str = r#"{"type":"model_change","id":"00000001","parentId":null,"timestamp":"2026-01-02T03:04:05.679Z","provider":"p","modelId":"m"}"#;
    const E2: &str = r#"{"type":"thinking_level_change","id":"00000002","parentId":"00000001","timestamp":"2026-01-02T03:04:05.680Z","thinkingLevel":"off"}"#;

    fn loaded(path: &Path) -> LoadedFile {
        match load(path).unwrap() {
            Loaded::Session(file) => file,
            _ => panic!("expected a session"),
        }
    }

    #[test]
    fn torn_tail_is_dropped_and_file_rewritten() {
        let dir = temp_dir("torn");
        let path = dir.join("s.jsonl");
        let torn = &E2[..40];
        fs::write(&path, format!("{HEADER}\n{E1}\n{torn}")).unwrap();
        let file = loaded(&path);
        assert_eq!(file.entries.len(), 1);
        assert_eq!(file.warnings.len(), 1);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{HEADER}\n{E1}\n")
        );
        // Unparsable but newline-terminated last line: also dropped.
        fs::write(&path, format!("{HEADER}\n{E1}\n{torn}\n")).unwrap();
        assert_eq!(loaded(&path).entries.len(), 1);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{HEADER}\n{E1}\n")
        );
        // Good last line without newline: kept, newline added.
        fs::write(&path, format!("{HEADER}\n{E1}\n{E2}")).unwrap();
        assert_eq!(loaded(&path).entries.len(), 2);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{HEADER}\n{E1}\n{E2}\n")
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_middle_lines_are_skipped_reported_and_kept_on_disk() {
        let dir = temp_dir("middle");
        let path = dir.join("s.jsonl");
        let content = format!("{HEADER}\n{E1}\nnot json\n\n{E2}\n");
        fs::write(&path, &content).unwrap();
        let file = loaded(&path);
        assert_eq!(file.entries.len(), 2);
        assert_eq!(file.warnings.len(), 1);
        assert!(file.warnings[0].contains("skipped"));
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            content,
            "no rewrite needed"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn empty_torn_header_and_foreign_files() {
        let dir = temp_dir("foreign");
        let path = dir.join("s.jsonl");
        assert!(matches!(load(&path).unwrap(), Loaded::Missing));
        fs::write(&path, "").unwrap();
        assert!(matches!(load(&path).unwrap(), Loaded::Empty { .. }));
        fs::write(&path, &HEADER[..30]).unwrap();
        assert!(matches!(load(&path).unwrap(), Loaded::Empty { .. }));
        // Some other JSONL: refused, left untouched (pi would overwrite it).
        fs::write(&path, "{\"a\":1}\n{\"b\":2}\n").unwrap();
        assert!(load(&path).is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"a\":1}\n{\"b\":2}\n");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn v1_and_v2_files_are_migrated_and_rewritten() {
        let dir = temp_dir("migrate");
        let path = dir.join("s.jsonl");
        let v1 = [
            r#"{"type":"session","id":"old","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}"#,
            r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#,
            r#"{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"hookMessage","customType":"x","content":"c","display":true,"timestamp":2}}"#,
            r#"{"type":"compaction","timestamp":"2025-01-01T00:00:03.000Z","summary":"s","firstKeptEntryIndex":2,"tokensBefore":9}"#,
        ];
        fs::write(&path, v1.join("\n") + "\n").unwrap();
        let file = loaded(&path);
        assert_eq!(file.header.version(), 3);
        let ids: Vec<&str> = file.entries.iter().map(|e| e.id.as_str()).collect();
        assert!(ids.iter().all(|id| id.len() == 8));
        assert_eq!(file.entries[0].parent_id, None);
        assert_eq!(file.entries[1].parent_id.as_deref(), Some(ids[0]));
        assert_eq!(file.entries[2].parent_id.as_deref(), Some(ids[1]));
        let compaction = file.entries[2].to_value();
        assert_eq!(compaction["firstKeptEntryId"], ids[1]);
        assert!(compaction.get("firstKeptEntryIndex").is_none());
        assert_eq!(file.entries[1].to_value()["message"]["role"], "custom");
        // Rewritten on disk: loading again changes nothing.
        let again = loaded(&path);
        assert_eq!(again.entries, file.entries);
        assert!(fs::read_to_string(&path).unwrap().starts_with(r#"{"type":"session","id":"old","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w","version":3}"#));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn failed_append_is_cut_back() {
        let dir = temp_dir("append");
        let path = dir.join("s.jsonl");
        fs::write(&path, format!("{HEADER}\n")).unwrap();
        fail_next_append(&path, 20);
        assert!(append_line(&path, E1).is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), format!("{HEADER}\n"));
        assert!(append_line(&path, E1).unwrap());
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            format!("{HEADER}\n{E1}\n")
        );
        assert!(!append_line(&dir.join("gone.jsonl"), E1).unwrap());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn atomic_write_refuses_to_clobber_unless_told() {
        let dir = temp_dir("atomic");
        let path = dir.join("s.jsonl");
        write_atomically(&path, b"one\n", false).unwrap();
        assert!(write_atomically(&path, b"two\n", false).is_err());
        write_atomically(&path, b"two\n", true).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two\n");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "no temp files left");
        assert!(write_atomically(&dir.join("no/such/dir.jsonl"), b"x", false).is_err());
        fs::remove_dir_all(dir).unwrap();
    }
}
