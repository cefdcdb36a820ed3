//! The read tool: a text file as numbered-free lines with offset/limit and pi's continuation
//! notices, or an image (sniffed by magic bytes) as an image block.
//!
//! Input: validated `{path, offset?, limit?}`. Output: the tool result or the error text.
//! Not done: the reference shrinks images larger than 2000×2000 px or 4.5 MB of base64 (re-encoding
//! as PNG/JPEG, adding a "[Image: original WxH, displayed at …]" note, or replacing the image with
//! "[Image omitted: could not be resized below the inline image size limit.]"). Without an image
//! codec we pass every image through unchanged.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde_json::{Value, json};

use super::path::{node_fs_error, node_fs_error_no_path, resolve_read_path};
use super::truncate::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, TruncatedBy, format_size, truncate_head,
};
use super::{CancelFlag, ToolContext, ToolOutput};
use crate::messages::{ContentBlock, ImageContent, TextContent};

const SNIFF_BYTES: usize = 4100;
const NON_VISION_NOTE: &str =
    "[Current model does not support images. The image will be omitted from this request.]";

/// Supported image type of a file's first bytes (jpeg, png — not animated png —, gif, webp).
pub fn sniff_image_mime(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Some("image/jpeg");
    }
    if head.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]) {
        // An acTL chunk before the first IDAT makes it an APNG, which pi does not treat as an image.
        return if is_apng(head) {
            None
        } else {
            Some("image/png")
        };
    }
    if head.starts_with(b"GIF8") {
        return Some("image/gif");
    }
    if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        return Some("image/webp");
    }
    None
}

fn is_apng(head: &[u8]) -> bool {
    let mut offset = 8;
    while offset + 8 <= head.len() {
        let length = u32::from_be_bytes([
            head[offset],
            head[offset + 1],
            head[offset + 2],
            head[offset + 3],
        ]) as usize;
        let kind = &head[offset + 4..offset + 8];
        if kind == b"acTL" {
            return true;
        }
        if kind == b"IDAT" {
            return false;
        }
        offset = offset.saturating_add(12).saturating_add(length);
    }
    false
}

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(ALPHABET[(n >> 18) as usize & 63] as char);
        out.push(ALPHABET[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            ALPHABET[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            ALPHABET[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// `access(path, R_OK)` with Node's error text.
fn check_readable(path: &Path) -> Result<(), String> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        let error = std::io::Error::from_raw_os_error(libc::ENOENT);
        node_fs_error(&error, "access", path)
    })?;
    // SAFETY: valid NUL-terminated string; access() only reads it.
    if unsafe { libc::access(c_path.as_ptr(), libc::R_OK) } != 0 {
        return Err(node_fs_error(
            &std::io::Error::last_os_error(),
            "access",
            path,
        ));
    }
    Ok(())
}

fn read_all(path: &Path) -> Result<Vec<u8>, String> {
    let mut file = File::open(path).map_err(|e| node_fs_error(&e, "open", path))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .map_err(|e| node_fs_error_no_path(&e, "read"))?;
    Ok(data)
}

fn number_arg(args: &Value, key: &str) -> Option<f64> {
    args.get(key).and_then(Value::as_f64)
}

pub fn execute(
    args: &Value,
    context: &ToolContext,
    cancel: &CancelFlag,
) -> Result<ToolOutput, String> {
    let raw_path = args.get("path").and_then(Value::as_str).unwrap_or_default();
    let absolute = resolve_read_path(raw_path, &context.cwd);
    check_readable(&absolute)?;
    let data = read_all(&absolute)?;
    if cancel.is_cancelled() {
        return Err(super::ABORTED.to_string());
    }
    let head = &data[..data.len().min(SNIFF_BYTES)];
    if let Some(mime) = sniff_image_mime(head) {
        let mut note = format!("Read image file [{mime}]");
        if !context.model_supports_images {
            note.push('\n');
            note.push_str(NON_VISION_NOTE);
        }
        return Ok(ToolOutput {
            content: vec![
                ContentBlock::Text(TextContent::new(&note)),
                ContentBlock::Image(ImageContent {
                    data: base64_encode(&data),
                    mime_type: mime.to_string(),
                }),
            ],
            details: None,
            is_error: false,
        });
    }
    let text = String::from_utf8_lossy(&data);
    let (text, details) = read_text(
        &text,
        raw_path,
        number_arg(args, "offset"),
        number_arg(args, "limit"),
    )?;
    Ok(ToolOutput {
        details,
        ..ToolOutput::text(text)
    })
}

/// The text part of read: line selection, truncation and notices. `raw_path` appears in the
/// oversized-line hint exactly as the model wrote it.
pub fn read_text(
    text: &str,
    raw_path: &str,
    offset: Option<f64>,
    limit: Option<f64>,
) -> Result<(String, Option<Value>), String> {
    let all_lines: Vec<&str> = text.split('\n').collect();
    let total = all_lines.len() as i64;
    // JS: `offset ? max(0, offset - 1) : 0` — 0 and absent both mean "from the top".
    let start = match offset {
        Some(o) if o != 0.0 => ((o - 1.0).max(0.0)).trunc() as i64,
        _ => 0,
    };
    let start_display = start + 1;
    if start >= total {
        let shown = offset
            .map(super::validate::js_number_string)
            .unwrap_or_default();
        return Err(format!(
            "Offset {shown} is beyond end of file ({total} lines total)"
        ));
    }
    let (selected, user_limited) = match limit {
        Some(limit) => {
            let end = (start + limit.trunc() as i64).min(total);
            let slice = if end > start {
                all_lines[start as usize..end as usize].join("\n")
            } else {
                String::new()
            };
            (slice, Some(end - start))
        }
        None => (all_lines[start as usize..].join("\n"), None),
    };
    let truncation = truncate_head(&selected, DEFAULT_MAX_LINES, DEFAULT_MAX_BYTES);
    if truncation.first_line_exceeds_limit {
        let size = format_size(all_lines[start as usize].len());
        let text = format!(
            "[Line {start_display} is {size}, exceeds {} limit. Use bash: sed -n '{start_display}p' {raw_path} | head -c {DEFAULT_MAX_BYTES}]",
            format_size(DEFAULT_MAX_BYTES)
        );
        return Ok((text, Some(json!({"truncation": truncation.to_json()}))));
    }
    if truncation.truncated {
        let end_display = start_display + truncation.output_lines as i64 - 1;
        let next = end_display + 1;
        let mut text = truncation.content.clone();
        if truncation.truncated_by == Some(TruncatedBy::Lines) {
            text.push_str(&format!("\n\n[Showing lines {start_display}-{end_display} of {total}. Use offset={next} to continue.]"));
        } else {
            text.push_str(&format!(
                "\n\n[Showing lines {start_display}-{end_display} of {total} ({} limit). Use offset={next} to continue.]",
                format_size(DEFAULT_MAX_BYTES)
            ));
        }
        return Ok((text, Some(json!({"truncation": truncation.to_json()}))));
    }
    if let Some(count) = user_limited
        && start + count < total
    {
        let remaining = total - (start + count);
        let next = start + count + 1;
        return Ok((
            format!(
                "{}\n\n[{remaining} more lines in file. Use offset={next} to continue.]",
                truncation.content
            ),
            None,
        ));
    }
    Ok((truncation.content, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "pi-rs-read-{tag}-{}",
            super::super::bash::random_hex16()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn context(cwd: &Path) -> ToolContext {
        ToolContext {
            cwd: cwd.to_path_buf(),
            agent_dir: cwd.to_path_buf(),
            shell_path: None,
            shell_command_prefix: None,
            model_supports_images: true,
        }
    }

    fn text_of(output: &ToolOutput) -> String {
        match &output.content[0] {
            ContentBlock::Text(t) => t.text.clone(),
            other => panic!("not text: {other:?}"),
        }
    }

    #[test]
    fn plain_and_limited_reads() {
        let text = "a\nb\nc\n";
        assert_eq!(read_text(text, "f", None, None).unwrap().0, "a\nb\nc\n");
        assert_eq!(
            read_text(text, "f", Some(2.0), Some(1.0)).unwrap().0,
            "b\n\n[2 more lines in file. Use offset=3 to continue.]"
        );
        // A trailing newline counts as an extra (empty) line: 4 lines in total.
        assert_eq!(
            read_text(text, "f", Some(5.0), None).unwrap_err(),
            "Offset 5 is beyond end of file (4 lines total)"
        );
        assert_eq!(read_text(text, "f", Some(4.0), None).unwrap().0, "");
    }

    #[test]
    fn truncation_notices() {
        let many: String = (1..=2500)
            .map(|i| format!("line{i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let (text, details) = read_text(&many, "f", None, None).unwrap();
        assert!(
            text.ends_with(
                "line2000\n\n[Showing lines 1-2000 of 2500. Use offset=2001 to continue.]"
            )
        );
        assert_eq!(details.unwrap()["truncation"]["truncatedBy"], "lines");
        let (text, _) = read_text(&many, "f", Some(2001.0), None).unwrap();
        assert!(text.starts_with("line2001\n") && text.ends_with("line2500"));

        let wide: String = (1..=100)
            .map(|_| "x".repeat(1000))
            .collect::<Vec<_>>()
            .join("\n");
        let (text, _) = read_text(&wide, "f", None, None).unwrap();
        assert!(
            text.ends_with(
                "\n\n[Showing lines 1-51 of 100 (50.0KB limit). Use offset=52 to continue.]"
            ),
            "{}",
            &text[text.len() - 100..]
        );

        let huge = format!("short\n{}", "y".repeat(60 * 1024));
        let (text, _) = read_text(&huge, "src/x.txt", Some(2.0), None).unwrap();
        assert_eq!(
            text,
            "[Line 2 is 60.0KB, exceeds 50.0KB limit. Use bash: sed -n '2p' src/x.txt | head -c 51200]"
        );
    }

    #[test]
    fn files_images_and_errors() {
        let dir = temp_dir("files");
        std::fs::write(dir.join("a.txt"), "hello\n").unwrap();
        let png = [
            0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, b'I', b'H', b'D', b'R',
        ];
        std::fs::write(dir.join("pic.dat"), png).unwrap();
        let ctx = context(&dir);
        let cancel = CancelFlag::default();
        let out = execute(&json!({"path":"@a.txt"}), &ctx, &cancel).unwrap();
        assert_eq!(text_of(&out), "hello\n");
        let out = execute(&json!({"path":"pic.dat"}), &ctx, &cancel).unwrap();
        assert_eq!(text_of(&out), "Read image file [image/png]");
        assert!(
            matches!(&out.content[1], ContentBlock::Image(i) if i.mime_type == "image/png" && i.data == base64_encode(&png))
        );
        let no_vision = ToolContext {
            model_supports_images: false,
            ..ctx.clone()
        };
        let out = execute(&json!({"path":"pic.dat"}), &no_vision, &cancel).unwrap();
        assert_eq!(
            text_of(&out),
            format!("Read image file [image/png]\n{NON_VISION_NOTE}")
        );
        let err = execute(&json!({"path":"missing.txt"}), &ctx, &cancel).unwrap_err();
        assert_eq!(
            err,
            format!(
                "ENOENT: no such file or directory, access '{}'",
                dir.join("missing.txt").display()
            )
        );
        let err = execute(&json!({"path":"."}), &ctx, &cancel).unwrap_err();
        assert_eq!(err, "EISDIR: illegal operation on a directory, read");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(sniff_image_mime(b"GIF89a"), Some("image/gif"));
        assert_eq!(
            sniff_image_mime(b"RIFF\0\0\0\0WEBPVP8 "),
            Some("image/webp")
        );
        assert_eq!(
            sniff_image_mime(&[0xFF, 0xD8, 0xFF, 0xE0]),
            Some("image/jpeg")
        );
        assert_eq!(sniff_image_mime(b"hello"), None);
    }
}
