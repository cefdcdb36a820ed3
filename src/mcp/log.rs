//! Server logging (`notifications/message`) appended to `<agentDir>/mcp.log` as
//! `<time> [<server>] <level> <logger>: <message>`, continuation lines indented; the file moves
//! to `mcp.log.1` once it grows past 5 MB (pi's format and rotation). Lines are redacted and a new
//! file is 0600 (pi leaves both: clear text, the umask's mode). Best effort: a write error
//! is ignored, logging must not break tools. Several processes may append: one write per line.

use std::io::Write;
use std::path::PathBuf;

use serde_json::Value;

const MAX_LOG_BYTES: u64 = 5 * 1024 * 1024;

pub fn format_line(server: &str, params: &Value, time: &str) -> String {
    let level = params
        .get("level")
        .and_then(Value::as_str)
        .unwrap_or("info");
    let logger = match params.get("logger").and_then(Value::as_str) {
        Some(l) if !l.is_empty() => format!(" {l}:"),
        _ => String::new(),
    };
    let data = match params.get("data") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let text = data.replace("\r\n", "\n").replace('\n', "\n    ");
    format!("{time} [{server}] {level}{logger} {text}\n")
}

/// Appends one message, redacted (a server may log the token it was given), to the log; a new
/// log file is 0600 (servers log what they work on), in a folder created 0700.
pub fn append(path: &PathBuf, server: &str, params: &Value) {
    use std::os::unix::fs::OpenOptionsExt;
    let line = format_line(server, params, &crate::time::now_iso());
    let line = crate::redact::default_redactions()
        .apply_text(&line)
        .into_owned();
    if std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let _ = std::fs::rename(path, path.with_extension("log.1"));
    }
    if let Some(dir) = path.parent() {
        let _ = crate::disk::create_private_dir_all(dir);
    }
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_look_like_pis() {
        let t = "2026-01-01T00:00:00.000Z";
        assert_eq!(
            format_line(
                "db",
                &json!({"level": "warning", "logger": "sql", "data": "a\nb"}),
                t
            ),
            "2026-01-01T00:00:00.000Z [db] warning sql: a\n    b\n"
        );
        assert_eq!(
            format_line("db", &json!({"data": {"n": 1}}), t),
            "2026-01-01T00:00:00.000Z [db] info {\"n\":1}\n"
        );
    }

    #[test]
    fn the_file_moves_aside_past_five_megabytes() {
        let dir = std::env::temp_dir().join(format!("pi-rs-mcplog-{}", crate::ids::random_hex16()));
        let path = dir.join("mcp.log");
        append(&path, "s", &json!({"data": "first"}));
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with("[s] info first\n")
        );
        std::fs::write(&path, vec![b'x'; 5 * 1024 * 1024 + 1]).unwrap();
        append(&path, "s", &json!({"data": "after"}));
        assert_eq!(
            std::fs::metadata(dir.join("mcp.log.1")).unwrap().len(),
            5 * 1024 * 1024 + 1
        );
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with("[s] info after\n")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
