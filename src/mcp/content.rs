//! MCP results as the model sees them (pi's conversion): text and images pass through, embedded
//! text resources become text, embedded images become images, resource links and other blobs
//! become a one-line note (blobs that are not images or text are saved to a private temp file),
//! a result without content blocks falls back to its `structuredContent` as JSON, and `isError`
//! makes an error result. Text over 20 KB is cut in the middle (`…N chars truncated…`) with the
//! whole text, redacted, saved to a spill file (the bash tool's private folder, mode 0600,
//! created new, removed at exit when no session refers to it) named in the result.

use std::io::Write;
use std::path::PathBuf;

use base64::Engine;
use serde_json::{Value, json};

use crate::messages::{ContentBlock, ImageContent, TextContent, joined_text};
use crate::tools::ToolOutput;
use crate::tools::truncate::format_size;

/// Model-facing text beyond this is cut in the middle.
pub const MAX_OUTPUT_BYTES: usize = 20 * 1024;

fn text(s: impl Into<String>) -> ContentBlock {
    ContentBlock::Text(TextContent::new(&s.into()))
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Whether blobs of this type read as text.
fn is_text_mime(mime: Option<&str>) -> bool {
    let Some(mime) = mime else { return false };
    let kind = mime
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    kind.starts_with("text/")
        || kind == "application/json"
        || kind.ends_with("+json")
        || kind.ends_with("+xml")
}

/// Writes `data` to a new spill file (`pi-mcp-<hex><extension>`, 0600, in the process's private
/// spill folder that bash output uses, removed at exit when no session refers to it) and returns
/// its path. Text must be redacted by the caller.
pub fn save_private(data: &[u8], extension: &str) -> Result<PathBuf, String> {
    let (path, mut file) =
        crate::tools::bash::create_spill_file("pi-mcp", extension).map_err(|e| e.to_string())?;
    file.write_all(data).map_err(|e| e.to_string())?;
    Ok(path)
}

fn extension_of(uri: &str) -> String {
    let path = uri.split(['?', '#']).next().unwrap_or(uri);
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('.') {
        Some((_, ext))
            if (1..=8).contains(&ext.len()) && ext.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            format!(".{ext}")
        }
        _ => ".bin".to_string(),
    }
}

/// One content block of `server`'s result. `readable` says whether `read_mcp_resource` exists.
fn block(server: &str, block: &Value, readable: bool) -> ContentBlock {
    match str_of(block, "type").unwrap_or("") {
        "text" => text(str_of(block, "text").unwrap_or("")),
        "image" => ContentBlock::Image(ImageContent {
            data: str_of(block, "data").unwrap_or("").to_string(),
            mime_type: str_of(block, "mimeType").unwrap_or("image/png").to_string(),
        }),
        "audio" => text(format!(
            "[audio {} omitted]",
            str_of(block, "mimeType").unwrap_or("")
        )),
        "resource_link" => {
            let uri = str_of(block, "uri").unwrap_or("");
            let title = str_of(block, "title")
                .or(str_of(block, "name"))
                .unwrap_or(uri);
            let mut details: Vec<String> = str_of(block, "mimeType")
                .map(String::from)
                .into_iter()
                .collect();
            if let Some(size) = block.get("size").and_then(Value::as_u64) {
                details.push(format_size(size as usize));
            }
            let details = match details.is_empty() {
                true => String::new(),
                false => format!(" ({})", details.join(", ")),
            };
            let description = str_of(block, "description")
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            let read = match readable {
                true => format!(". Read it with read_mcp_resource (server \"{server}\")"),
                false => String::new(),
            };
            text(format!(
                "[Resource {uri} \"{title}\"{details}{description}{read}]"
            ))
        }
        "resource" => {
            let resource = block.get("resource").unwrap_or(&Value::Null);
            resource_contents(resource)
        }
        other => text(format!("[unsupported MCP content {other}]")),
    }
}

/// One `contents` item of an embedded resource or of `resources/read`.
pub fn resource_contents(resource: &Value) -> ContentBlock {
    let uri = str_of(resource, "uri").unwrap_or("");
    let mime = str_of(resource, "mimeType");
    if let Some(t) = str_of(resource, "text") {
        return text(t);
    }
    let blob = str_of(resource, "blob").unwrap_or("");
    if mime.is_some_and(|m| m.starts_with("image/")) {
        return ContentBlock::Image(ImageContent {
            data: blob.to_string(),
            mime_type: mime.unwrap_or("").to_string(),
        });
    }
    let data = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .unwrap_or_default();
    if is_text_mime(mime) {
        return text(String::from_utf8_lossy(&data));
    }
    let kind = format!(
        "{}, {}",
        mime.unwrap_or("unknown type"),
        format_size(data.len())
    );
    match save_private(&data, &extension_of(uri)) {
        Ok(path) => text(format!(
            "[Binary resource {uri} ({kind}) saved to {}]",
            path.display()
        )),
        Err(e) => text(format!(
            "[Binary resource {uri} ({kind}) could not be saved: {e}]"
        )),
    }
}

/// A `tools/call` result of `server`'s `tool` as a tool result.
pub fn call_result(server: &str, tool: &str, result: &Value, readable: bool) -> ToolOutput {
    let blocks = result.get("content").and_then(Value::as_array);
    let mut content: Vec<ContentBlock> = blocks
        .map(|b| b.iter().map(|item| block(server, item, readable)).collect())
        .unwrap_or_default();
    if content.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        content.push(text(
            serde_json::to_string_pretty(structured).unwrap_or_default(),
        ));
    }
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    if is_error && joined_text(&content, "\n").is_empty() {
        content.push(text(format!("MCP tool {server}/{tool} returned an error")));
    }
    let (content, full_path) = limit(content);
    let mut details = json!({"server": server, "tool": tool});
    if let Some(path) = full_path {
        details["fullOutputPath"] = json!(path);
    }
    ToolOutput {
        content,
        details: Some(details),
        is_error,
    }
}

/// Keeps the model-facing text within `MAX_OUTPUT_BYTES`: longer text becomes one text block
/// with its middle cut out (images follow it) and the full text saved. Returns the saved path.
pub fn limit(content: Vec<ContentBlock>) -> (Vec<ContentBlock>, Option<String>) {
    let combined = joined_text(&content, "\n");
    if combined.len() <= MAX_OUTPUT_BYTES {
        return (content, None);
    }
    let (cut, lines) = cut_middle(&combined, MAX_OUTPUT_BYTES);
    // Known credentials never reach the disk.
    let redacted = crate::redact::default_redactions();
    let saved = redacted.apply_text(&combined);
    let (path, whereabouts) = match save_private(saved.as_bytes(), ".txt") {
        Ok(path) => {
            let path = path.display().to_string();
            let note = format!("\n\n[Full output: {path} (read it with offset/limit)]");
            (Some(path), note)
        }
        Err(e) => (None, format!("\n\n[Could not save the full output: {e}]")),
    };
    let tokens = combined.len().div_ceil(4);
    let mut out = vec![text(format!(
        "Warning: truncated output (original token count: {tokens})\nTotal output lines: {lines}\n\n{cut}{whereabouts}"
    ))];
    out.extend(
        content
            .into_iter()
            .filter(|b| matches!(b, ContentBlock::Image(_))),
    );
    (out, path)
}

/// Start and end of `text`, half of `max` bytes each, at character boundaries, joined by a
/// `…N chars truncated…` marker; and the number of lines of the whole text.
fn cut_middle(text: &str, max: usize) -> (String, usize) {
    let mut head_end = max / 2;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - (max - max / 2);
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let removed = text[head_end..tail_start].chars().count();
    let lines = text.split('\n').count() - usize::from(text.ends_with('\n'));
    (
        format!(
            "{}…{removed} chars truncated…{}",
            &text[..head_end],
            &text[tail_start..]
        ),
        lines,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(out: &ToolOutput) -> Vec<String> {
        out.content
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => t.text.clone(),
                ContentBlock::Image(i) => format!("image {}", i.mime_type),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn blocks_convert_like_pi() {
        let result = json!({"content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a", "mimeType": "text/plain", "size": 2048},
            {"type": "resource", "resource": {"uri": "x://t", "text": "embedded"}},
            {"type": "resource", "resource": {"uri": "x://j", "blob": "eyJhIjoxfQ==", "mimeType": "application/json"}},
            {"type": "audio", "data": "", "mimeType": "audio/wav"}
        ]});
        let out = call_result("srv", "t", &result, true);
        assert!(!out.is_error);
        assert_eq!(
            texts(&out),
            [
                "hi",
                "image image/png",
                "[Resource file:///a.txt \"a\" (text/plain, 2.0KB). Read it with read_mcp_resource (server \"srv\")]",
                "embedded",
                "{\"a\":1}",
                "[audio audio/wav omitted]"
            ]
        );
        assert_eq!(out.details, Some(json!({"server": "srv", "tool": "t"})));
        let structured = call_result("s", "t", &json!({"structuredContent": {"n": 1}}), false);
        assert_eq!(texts(&structured), ["{\n  \"n\": 1\n}"]);
        let failed = call_result("s", "t", &json!({"content": [], "isError": true}), false);
        assert!(failed.is_error);
        assert_eq!(texts(&failed), ["MCP tool s/t returned an error"]);
        let blob = call_result(
            "s",
            "t",
            &json!({"content": [{"type": "resource", "resource": {"uri": "x://f.zip", "blob": "AAEC", "mimeType": "application/zip"}}]}),
            false,
        );
        let note = &texts(&blob)[0];
        assert!(
            note.starts_with("[Binary resource x://f.zip (application/zip, 3B) saved to "),
            "{note}"
        );
        let path = note
            .rsplit("saved to ")
            .next()
            .unwrap()
            .trim_end_matches(']');
        assert!(path.ends_with(".zip"));
        assert_eq!(std::fs::read(path).unwrap(), [0, 1, 2]);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn long_text_is_cut_in_the_middle_and_saved_privately() {
        use std::os::unix::fs::PermissionsExt;
        let long = format!("{}\n{}", "é".repeat(20_000), "z".repeat(5000));
        let out = call_result(
            "s",
            "t",
            &json!({"content": [{"type": "text", "text": long}, {"type": "image", "data": "A", "mimeType": "image/gif"}]}),
            false,
        );
        let all = texts(&out);
        assert_eq!(all.len(), 2);
        assert_eq!(all[1], "image image/gif");
        let first = &all[0];
        assert!(first.starts_with("Warning: truncated output (original token count: 11251)\nTotal output lines: 2\n\néé"), "{}", &first[..80]);
        assert!(first.contains("… chars truncated…") || first.contains(" chars truncated…"));
        let path = out.details.as_ref().unwrap()["fullOutputPath"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(first.ends_with(&format!(
            "zzz\n\n[Full output: {path} (read it with offset/limit)]"
        )));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), long);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::remove_file(&path).unwrap();
        let (cut, lines) = cut_middle("abcdefghij", 4);
        assert_eq!((cut.as_str(), lines), ("ab…6 chars truncated…ij", 1));
    }
}
