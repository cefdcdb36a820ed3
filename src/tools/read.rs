//! The read tool: a text file as numbered-free lines with offset/limit and pi's continuation
//! notices, or an image (sniffed by magic bytes) as an image block.
//!
//! Input: validated `{path, offset?, limit?}`. Output: the tool result or the error text.
//! A text file is streamed once in chunks (line count, selected lines' sizes, and only the text
//! the output limits can show are kept), so memory stays bounded whatever the file's size; the
//! result is the same as splitting the whole file. Images above 32 MB are left out with the
//! reference's "could not be resized" note instead of being loaded; others larger than the
//! model's input limits are scaled and re-encoded with pi 1.6.0's coordinate note
//! (`image::process`).

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde_json::{Value, json};

use super::image::{self, SNIFF_BYTES};
use super::path::{node_fs_error, node_fs_error_no_path, resolve_read_path};
use super::path_guard::{self, Access};
use super::truncate::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, TruncatedBy, format_size, truncate_head,
};
use super::{ToolContext, ToolOutput, number_arg};
use crate::child::CancelFlag;
use crate::messages::{ContentBlock, TextContent};

const NON_VISION_NOTE: &str =
    "[Current model does not support images. The image will be omitted from this request.]";

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

/// What a script's `tools.read()` resolves to (pi 1.6.0): the text of a text file; for an
/// image, an image block `{type, data, mimeType, note}` that `image()` shows, `note` being the
/// text that goes with it.
pub fn script_value(output: &ToolOutput) -> Value {
    let text = output
        .content
        .iter()
        .find_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let image = output.content.iter().find_map(|block| match block {
        ContentBlock::Image(image) => Some(image),
        _ => None,
    });
    match image {
        Some(image) => json!({"type": "image", "data": image.data,
            "mimeType": image.mime_type, "note": text}),
        None => Value::String(text),
    }
}

pub fn execute(
    args: &Value,
    context: &ToolContext,
    cancel: &CancelFlag,
) -> Result<ToolOutput, String> {
    let raw_path = args.get("path").and_then(Value::as_str).unwrap_or_default();
    let absolute = resolve_read_path(raw_path, &context.cwd);
    path_guard::check(&absolute, Access::Read)?;
    if let Some(client) = context.client.as_deref().filter(|c| c.reads_files())
        && !is_image_on_disk(&absolute)
    {
        // The editor's text, unsaved changes included; selected and cut as from the disk.
        let text = client.read_text_file(&absolute, cancel)?;
        let (offset, limit) = (number_arg(args, "offset"), number_arg(args, "limit"));
        let scan = scan_text(&b""[..], text.into_bytes(), offset, limit, cancel)?;
        let (text, details) = select_text(scan, raw_path, offset, limit)?;
        return Ok(ToolOutput {
            details,
            ..ToolOutput::text(text)
        });
    }
    check_readable(&absolute)?;
    // Non-blocking: a file that waits for data (`/proc/kmsg`) fails with EAGAIN instead of
    // holding the tool until abort; regular files read as always.
    let opened = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&absolute)
            .map_err(|e| node_fs_error(&e, "open", &absolute))?
    };
    let budget = read_budget(&opened);
    let mut file = opened.take(budget);
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    (&mut file)
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| node_fs_error_no_path(&e, "read"))?;
    if cancel.is_cancelled() {
        return Err(super::ABORTED.to_string());
    }
    if let Some(mime) = image::sniff_mime(&head) {
        return read_image(file, head, mime, context, cancel);
    }
    let scan = scan_text(
        file,
        head,
        number_arg(args, "offset"),
        number_arg(args, "limit"),
        cancel,
    )?;
    let (text, details) = select_text(
        scan,
        raw_path,
        number_arg(args, "offset"),
        number_arg(args, "limit"),
    )?;
    Ok(ToolOutput {
        details,
        ..ToolOutput::text(text)
    })
}

/// Whether `path` is a file on disk that starts like an image (images never go through the
/// client, whose files are text).
fn is_image_on_disk(path: &Path) -> bool {
    // Regular files only: opening a FIFO would wait for a writer.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(file) = File::open(path) else {
        return false;
    };
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    file.take(SNIFF_BYTES as u64).read_to_end(&mut head).is_ok()
        && image::sniff_mime(&head).is_some()
}

/// How many bytes one read may consume: the file as large as it was when opened, so a file that
/// keeps growing (a log being written, a FIFO the path guard let through) still ends. Files that
/// report no size (`/proc`, `/sys`) get `UNSIZED_READ_BYTES`.
fn read_budget(file: &File) -> u64 {
    match file.metadata().map(|m| m.len()) {
        Ok(len) if len > 0 => len,
        _ => UNSIZED_READ_BYTES,
    }
}

/// The bound for files whose size is unknown (see `read_budget`).
const UNSIZED_READ_BYTES: u64 = 64 * 1024 * 1024;

/// An image is passed through whole (see the module note), up to `MAX_IMAGE_BYTES`; a larger
/// one is left out with the reference's "could not be resized" note rather than held in memory.
fn read_image(
    mut file: impl Read,
    mut data: Vec<u8>,
    mime: &str,
    context: &ToolContext,
    cancel: &CancelFlag,
) -> Result<ToolOutput, String> {
    (&mut file)
        .take(MAX_IMAGE_BYTES + 1 - data.len() as u64)
        .read_to_end(&mut data)
        .map_err(|e| node_fs_error_no_path(&e, "read"))?;
    if cancel.is_cancelled() {
        return Err(super::ABORTED.to_string());
    }
    // Scaled to the model's limits here, on the tool's thread (pi 1.6.0).
    let processed = if data.len() as u64 > MAX_IMAGE_BYTES {
        Err(image::OMITTED.to_string())
    } else {
        image::prepare(&data, mime, context.image_resize.as_ref())
    };
    if cancel.is_cancelled() {
        return Err(super::ABORTED.to_string());
    }
    let (mut note, image) = match processed {
        Ok(processed) => {
            let mut note = format!("Read image file [{}]", processed.image.mime_type);
            if let Some(hint) = processed.note {
                note.push('\n');
                note.push_str(&hint);
            }
            (note, Some(processed.image))
        }
        Err(omitted) => (format!("Read image file [{mime}]\n{omitted}"), None),
    };
    if !context.model_supports_images {
        note.push('\n');
        note.push_str(NON_VISION_NOTE);
    }
    let mut content = vec![ContentBlock::Text(TextContent::new(&note))];
    content.extend(image.map(ContentBlock::Image));
    Ok(ToolOutput {
        content,
        details: None,
        is_error: false,
    })
}

/// What one pass over a text file keeps: the line count, and of the selected lines
/// (`offset`/`limit`) their sizes plus only as much text as the output limits can show.
struct TextScan {
    /// Lines in the file (newlines + 1), as `split("\n")` counts them.
    total_lines: i64,
    /// The selected lines joined by `\n`, cut once it holds more than the output limits allow
    /// (more than `DEFAULT_MAX_LINES` lines or `DEFAULT_MAX_BYTES` bytes).
    kept: String,
    /// Whether `kept` is the whole selection.
    kept_all: bool,
    /// Byte count of the whole selection (after lossy UTF-8 decoding).
    selected_bytes: usize,
    /// Size of the first selected line.
    first_line_bytes: usize,
}

/// Bytes read per step: memory stays at about this plus the kept text, whatever the file size.
const READ_CHUNK: usize = 256 * 1024;
/// Larger images are left out instead of being loaded whole.
const MAX_IMAGE_BYTES: u64 = 32 * 1024 * 1024;

/// Streams `head` then the rest of `input` through a lossy UTF-8 decoder (invalid bytes become
/// U+FFFD exactly as `String::from_utf8_lossy` on the whole file would make them) and a line
/// counter. Only the selected lines' first ~50 KB are held, so a 1 GB file costs a quick pass,
/// not 1 GB of memory.
fn scan_text(
    mut input: impl Read,
    head: Vec<u8>,
    offset: Option<f64>,
    limit: Option<f64>,
    cancel: &CancelFlag,
) -> Result<TextScan, String> {
    let start = first_line_index(offset);
    let end = limit.map(|l| start.saturating_add(l.trunc() as i64));
    let mut scan = TextScan {
        total_lines: 1,
        kept: String::new(),
        kept_all: true,
        selected_bytes: 0,
        first_line_bytes: 0,
    };
    let mut kept_newlines = 0usize;
    let mut line: i64 = 0;
    let selected = |line: i64| line >= start && end.is_none_or(|end| line < end);
    let mut decoder = LossyDecoder::default();
    let mut chunk = head;
    let mut decoded = String::new();
    let mut at_eof = false;
    loop {
        decoded.clear();
        decoder.decode(&chunk, at_eof, &mut decoded);
        let mut rest = decoded.as_str();
        loop {
            // str::find, not the memchr crate: std's search stays fast in unoptimized builds too.
            let (segment, newline) = match rest.find('\n') {
                Some(at) => (&rest[..at], true),
                None => (rest, false),
            };
            if selected(line) {
                scan.selected_bytes += segment.len();
                if line == start {
                    scan.first_line_bytes += segment.len();
                }
                if scan.kept_all {
                    scan.kept.push_str(segment);
                }
            }
            if !newline {
                break;
            }
            rest = &rest[segment.len() + 1..];
            // This newline separates two selected lines: it is part of the selection.
            if selected(line) && selected(line + 1) {
                scan.selected_bytes += 1;
                if scan.kept_all {
                    scan.kept.push('\n');
                    kept_newlines += 1;
                }
            }
            line += 1;
            scan.total_lines += 1;
            if scan.kept_all
                && (scan.kept.len() > DEFAULT_MAX_BYTES || kept_newlines > DEFAULT_MAX_LINES)
            {
                scan.kept_all = false;
            }
        }
        if scan.kept_all && scan.kept.len() > DEFAULT_MAX_BYTES {
            scan.kept_all = false;
        }
        if at_eof {
            return Ok(scan);
        }
        if cancel.is_cancelled() {
            return Err(super::ABORTED.to_string());
        }
        chunk.resize(READ_CHUNK, 0);
        let read = loop {
            match input.read(&mut chunk) {
                Ok(read) => break read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(node_fs_error_no_path(&e, "read")),
            }
        };
        chunk.truncate(read);
        at_eof = read == 0;
    }
}

/// JS: `offset ? max(0, offset - 1) : 0` — 0 and absent both mean "from the top".
fn first_line_index(offset: Option<f64>) -> i64 {
    match offset {
        Some(o) if o != 0.0 => ((o - 1.0).max(0.0)).trunc() as i64,
        _ => 0,
    }
}

/// Incremental `from_utf8_lossy`: an incomplete sequence at the end of a chunk waits for the
/// next one, so chunk boundaries never change the decoded text.
#[derive(Default)]
struct LossyDecoder {
    pending: Vec<u8>,
}

impl LossyDecoder {
    fn decode(&mut self, bytes: &[u8], at_eof: bool, out: &mut String) {
        let joined;
        let mut input: &[u8] = if self.pending.is_empty() {
            bytes
        } else {
            let mut buffer = std::mem::take(&mut self.pending);
            buffer.extend_from_slice(bytes);
            joined = buffer;
            &joined
        };
        loop {
            match std::str::from_utf8(input) {
                Ok(valid) => {
                    out.push_str(valid);
                    return;
                }
                Err(error) => {
                    let (valid, after) = input.split_at(error.valid_up_to());
                    // SAFETY-free: `valid_up_to` marks a prefix that is valid UTF-8.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match error.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            input = &after[bad..];
                        }
                        None if at_eof => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            return;
                        }
                        None => {
                            self.pending = after.to_vec();
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// The text part of read on a whole text (tests and callers that already hold the text).
#[cfg(test)]
pub fn read_text(
    text: &str,
    raw_path: &str,
    offset: Option<f64>,
    limit: Option<f64>,
) -> Result<(String, Option<Value>), String> {
    let scan = scan_text(
        &b""[..],
        text.as_bytes().to_vec(),
        offset,
        limit,
        &CancelFlag::default(),
    )?;
    select_text(scan, raw_path, offset, limit)
}

/// Line selection, truncation and notices from a scan. `raw_path` appears in the oversized-line
/// hint exactly as the model wrote it.
fn select_text(
    scan: TextScan,
    raw_path: &str,
    offset: Option<f64>,
    limit: Option<f64>,
) -> Result<(String, Option<Value>), String> {
    let total = scan.total_lines;
    let start = first_line_index(offset);
    let start_display = start + 1;
    if start >= total {
        let shown = offset.map(crate::js::js_number_string).unwrap_or_default();
        return Err(format!(
            "Offset {shown} is beyond end of file ({total} lines total)"
        ));
    }
    let end = limit.map_or(total, |l| start.saturating_add(l.trunc() as i64).min(total));
    let user_limited = limit.map(|_| end - start);
    // `kept` holds more than the limits whenever the selection does, so truncating it keeps
    // exactly what truncating the whole selection would; only the totals come from the scan.
    let mut truncation = truncate_head(&scan.kept, DEFAULT_MAX_LINES, DEFAULT_MAX_BYTES);
    if !scan.kept_all {
        truncation.total_lines = (end - start).max(0) as usize;
        truncation.total_bytes = scan.selected_bytes;
    }
    if truncation.first_line_exceeds_limit {
        let size = format_size(scan.first_line_bytes);
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
    use crate::test_support::temp_dir;
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

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
        let mut png = Vec::new();
        ::image::DynamicImage::new_rgb8(4, 3)
            .write_to(
                &mut std::io::Cursor::new(&mut png),
                ::image::ImageFormat::Png,
            )
            .unwrap();
        std::fs::write(dir.join("pic.dat"), &png).unwrap();
        // A PNG signature and header with no image behind it does not decode: left out, as pi
        // 1.6.0 leaves out what it cannot scale.
        let broken = [
            0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, b'I', b'H', b'D', b'R',
        ];
        std::fs::write(dir.join("broken.png"), broken).unwrap();
        let ctx = ToolContext::for_test(&dir);
        let cancel = CancelFlag::default();
        let out = execute(&json!({"path":"@a.txt"}), &ctx, &cancel).unwrap();
        assert_eq!(text_of(&out), "hello\n");
        let out = execute(&json!({"path":"pic.dat"}), &ctx, &cancel).unwrap();
        assert_eq!(text_of(&out), "Read image file [image/png]");
        assert!(
            matches!(&out.content[1], ContentBlock::Image(i) if i.mime_type == "image/png" && i.data == STANDARD.encode(&png))
        );
        let out = execute(&json!({"path":"broken.png"}), &ctx, &cancel).unwrap();
        assert_eq!(
            text_of(&out),
            format!("Read image file [image/png]\n{}", image::OMITTED)
        );
        assert_eq!(out.content.len(), 1);
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
    fn lossy_decoding_does_not_depend_on_chunk_boundaries() {
        let bytes: &[u8] = b"a\xE2\x82\xACb\xE2\x82A\xF0\x9F\x98\x80\xFF\n\xC3";
        let expected = String::from_utf8_lossy(bytes).into_owned();
        for split in 0..=bytes.len() {
            for second in split..=bytes.len() {
                let mut decoder = LossyDecoder::default();
                let mut out = String::new();
                decoder.decode(&bytes[..split], false, &mut out);
                decoder.decode(&bytes[split..second], false, &mut out);
                decoder.decode(&bytes[second..], true, &mut out);
                assert_eq!(out, expected, "split at {split}/{second}");
            }
        }
    }

    /// A 1 GB file (sparse: no disk used) is streamed, never loaded: the answer is the
    /// oversized-line notice with the real size, quickly.
    /// A read consumes the file as large as it was when opened: what is appended meanwhile (a
    /// log that never stops growing) is not read, so the read always ends.
    #[test]
    fn growing_file_is_read_up_to_its_size_at_open() {
        use std::io::Write;
        let dir = temp_dir("growing");
        let path = dir.join("app.log");
        std::fs::write(&path, "line 1\nline 2\n").unwrap();
        let opened = File::open(&path).unwrap();
        let budget = read_budget(&opened);
        let mut appender = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        appender.write_all(&vec![b'x'; 1 << 20]).unwrap();
        let mut seen = String::new();
        opened.take(budget).read_to_string(&mut seen).unwrap();
        assert_eq!(seen, "line 1\nline 2\n");
        // Files that report no size (procfs) are bounded too.
        let proc_file = File::open("/proc/self/stat").unwrap();
        assert_eq!(read_budget(&proc_file), UNSIZED_READ_BYTES);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn gigabyte_file_is_streamed_not_loaded() {
        let dir = temp_dir("huge");
        let file = File::create(dir.join("huge.bin")).unwrap();
        file.set_len(1 << 30).unwrap();
        let started = std::time::Instant::now();
        let out = execute(
            &json!({"path":"huge.bin"}),
            &ToolContext::for_test(&dir),
            &CancelFlag::default(),
        )
        .unwrap();
        assert_eq!(
            text_of(&out),
            "[Line 1 is 1024.0MB, exceeds 50.0KB limit. Use bash: sed -n '1p' huge.bin | head -c 51200]"
        );
        let truncation = &out.details.unwrap()["truncation"];
        assert_eq!(truncation["totalBytes"], 1u64 << 30);
        assert_eq!(truncation["totalLines"], 1);
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Many lines in a large file: the first 2000 are shown and the total is still exact.
    #[test]
    fn large_file_keeps_exact_totals() {
        let dir = temp_dir("lines");
        let text: String = (0..300_000).map(|i| format!("row {i}\n")).collect();
        std::fs::write(dir.join("rows.txt"), &text).unwrap();
        let ctx = ToolContext::for_test(&dir);
        let cancel = CancelFlag::default();
        let out = execute(&json!({"path":"rows.txt","offset":100}), &ctx, &cancel).unwrap();
        let (expected, details) = {
            // The selection as the whole-text rule defines it.
            let lines: Vec<&str> = text.split('\n').collect();
            let selected = lines[99..].join("\n");
            let truncation = truncate_head(&selected, DEFAULT_MAX_LINES, DEFAULT_MAX_BYTES);
            (truncation.content.clone(), truncation.to_json())
        };
        assert_eq!(
            text_of(&out),
            format!(
                "{expected}\n\n[Showing lines 100-2099 of 300001. Use offset=2100 to continue.]"
            )
        );
        assert_eq!(out.details.unwrap()["truncation"], details);
        let out = execute(
            &json!({"path":"rows.txt","offset":299_999,"limit":1}),
            &ctx,
            &cancel,
        )
        .unwrap();
        assert_eq!(
            text_of(&out),
            "row 299998\n\n[2 more lines in file. Use offset=300000 to continue.]"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Binary content that is no image: decoded lossily, never an error or a panic.
    #[test]
    fn binary_file_reads_as_lossy_text() {
        let dir = temp_dir("binary");
        let bytes: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        std::fs::write(dir.join("blob.bin"), &bytes).unwrap();
        let out = execute(
            &json!({"path":"blob.bin"}),
            &ToolContext::for_test(&dir),
            &CancelFlag::default(),
        )
        .unwrap();
        let expected = read_text(&String::from_utf8_lossy(&bytes), "blob.bin", None, None)
            .unwrap()
            .0;
        assert_eq!(text_of(&out), expected);
        assert!(text_of(&out).contains('\u{FFFD}'));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn path_with_invalid_utf8_is_read() {
        use std::os::unix::ffi::OsStrExt;
        let dir = temp_dir("nonutf8");
        let name = std::ffi::OsStr::from_bytes(b"bad\xFFname.txt");
        std::fs::write(dir.join(name), "inside\n").unwrap();
        let ctx = ToolContext::for_test(&dir);
        // The model can only name it lossily; that name does not exist.
        let err = execute(
            &json!({"path":"bad\u{FFFD}name.txt"}),
            &ctx,
            &CancelFlag::default(),
        )
        .unwrap_err();
        assert!(
            err.starts_with("ENOENT: no such file or directory, access '"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
