//! Output size limits shared by the tools: head truncation (read, grep, find, ls), tail truncation
//! (bash), single-line cutting (grep) and pi's human-readable size format.
//!
//! Input: text. Output: the kept text plus a `Truncation` record whose JSON form
//! (`Truncation::to_json`) is what the tools put into `details.truncation`, key for key.

use serde_json::{Value, json};

/// Line limit of every tool output.
pub const DEFAULT_MAX_LINES: usize = 2000;
/// Byte limit of every tool output (50 KB).
pub const DEFAULT_MAX_BYTES: usize = 50 * 1024;
/// grep cuts each printed line after this many characters (UTF-16 units, like the reference).
pub const GREP_MAX_LINE_LENGTH: usize = 500;
/// `Number.MAX_SAFE_INTEGER`: the "no line limit" used by grep/find/ls.
pub const NO_LINE_LIMIT: usize = 9_007_199_254_740_991;

/// Which limit cut the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TruncatedBy {
    Lines,
    Bytes,
}

/// What a truncation kept and why; mirrors the reference's TruncationResult.
#[derive(Clone, Debug, PartialEq)]
pub struct Truncation {
    pub content: String,
    pub truncated: bool,
    pub truncated_by: Option<TruncatedBy>,
    pub total_lines: usize,
    pub total_bytes: usize,
    pub output_lines: usize,
    pub output_bytes: usize,
    pub last_line_partial: bool,
    pub first_line_exceeds_limit: bool,
    pub max_lines: usize,
    pub max_bytes: usize,
}

impl Truncation {
    /// The `details.truncation` object, keys in the reference's order.
    pub fn to_json(&self) -> Value {
        json!({
            "content": self.content,
            "truncated": self.truncated,
            "truncatedBy": match self.truncated_by {
                None => Value::Null,
                Some(TruncatedBy::Lines) => Value::from("lines"),
                Some(TruncatedBy::Bytes) => Value::from("bytes"),
            },
            "totalLines": self.total_lines,
            "totalBytes": self.total_bytes,
            "outputLines": self.output_lines,
            "outputBytes": self.output_bytes,
            "lastLinePartial": self.last_line_partial,
            "firstLineExceedsLimit": self.first_line_exceeds_limit,
            "maxLines": self.max_lines,
            "maxBytes": self.max_bytes,
        })
    }

    fn untouched(content: &str, max_lines: usize, max_bytes: usize) -> Truncation {
        let total_lines = content.split('\n').count();
        Truncation {
            content: content.to_string(),
            truncated: false,
            truncated_by: None,
            total_lines,
            total_bytes: content.len(),
            output_lines: total_lines,
            output_bytes: content.len(),
            last_line_partial: false,
            first_line_exceeds_limit: false,
            max_lines,
            max_bytes,
        }
    }
}

/// pi's size format: `512B`, `1.5KB`, `2.0MB`.
pub fn format_size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes}B")
    } else if bytes < 1024 * 1024 {
        format!("{}KB", to_fixed_1(bytes as f64 / 1024.0))
    } else {
        format!("{}MB", to_fixed_1(bytes as f64 / (1024.0 * 1024.0)))
    }
}

/// JS `toFixed(1)` rounds half away from zero on the decimal representation; Rust's `{:.1}`
/// rounds half to even on the binary value. Sizes are k/1024, which are exact binary fractions, so
/// ties (x.x5) really happen: round them up like JS does.
fn to_fixed_1(value: f64) -> String {
    let scaled = value * 10.0;
    let rounded = if scaled.fract() == 0.5 {
        scaled.ceil()
    } else {
        scaled.round()
    };
    format!("{:.1}", rounded / 10.0)
}

/// Keeps the first lines that fit both limits. Never returns a partial line; when even the first
/// line is too big the content is empty and `first_line_exceeds_limit` is set.
pub fn truncate_head(content: &str, max_lines: usize, max_bytes: usize) -> Truncation {
    let lines: Vec<&str> = content.split('\n').collect();
    let total_lines = lines.len();
    let total_bytes = content.len();
    if total_lines <= max_lines && total_bytes <= max_bytes {
        return Truncation::untouched(content, max_lines, max_bytes);
    }
    let base = Truncation {
        content: String::new(),
        truncated: true,
        truncated_by: Some(TruncatedBy::Bytes),
        total_lines,
        total_bytes,
        output_lines: 0,
        output_bytes: 0,
        last_line_partial: false,
        first_line_exceeds_limit: false,
        max_lines,
        max_bytes,
    };
    if lines[0].len() > max_bytes {
        return Truncation {
            first_line_exceeds_limit: true,
            ..base
        };
    }
    let mut kept = 0usize;
    let mut bytes = 0usize;
    let mut by = TruncatedBy::Lines;
    for (index, line) in lines.iter().enumerate().take(max_lines) {
        let cost = line.len() + usize::from(index > 0);
        if bytes + cost > max_bytes {
            by = TruncatedBy::Bytes;
            break;
        }
        kept += 1;
        bytes += cost;
    }
    if kept >= max_lines && bytes <= max_bytes {
        by = TruncatedBy::Lines;
    }
    let output = lines[..kept].join("\n");
    Truncation {
        output_bytes: output.len(),
        content: output,
        truncated_by: Some(by),
        output_lines: kept,
        ..base
    }
}

/// Keeps the last lines that fit both limits. If the very last line alone is too big, its end is
/// kept (cut at a UTF-8 boundary) and `last_line_partial` is set.
pub fn truncate_tail(content: &str, max_lines: usize, max_bytes: usize) -> Truncation {
    let lines: Vec<&str> = content.split('\n').collect();
    let total_lines = lines.len();
    let total_bytes = content.len();
    if total_lines <= max_lines && total_bytes <= max_bytes {
        return Truncation::untouched(content, max_lines, max_bytes);
    }
    let mut kept: Vec<&str> = Vec::new();
    let mut bytes = 0usize;
    let mut by = TruncatedBy::Lines;
    let mut partial = false;
    for line in lines.iter().rev() {
        if kept.len() >= max_lines {
            break;
        }
        let cost = line.len() + usize::from(!kept.is_empty());
        if bytes + cost > max_bytes {
            by = TruncatedBy::Bytes;
            if kept.is_empty() {
                let tail = tail_within_bytes(line, max_bytes);
                bytes = tail.len();
                kept.push(tail);
                partial = true;
            }
            break;
        }
        kept.push(line);
        bytes += cost;
    }
    if kept.len() >= max_lines && bytes <= max_bytes {
        by = TruncatedBy::Lines;
    }
    kept.reverse();
    let output = kept.join("\n");
    Truncation {
        content: String::new(),
        truncated: true,
        truncated_by: Some(by),
        total_lines,
        total_bytes,
        output_lines: kept.len(),
        output_bytes: output.len(),
        last_line_partial: partial,
        first_line_exceeds_limit: false,
        max_lines,
        max_bytes,
    }
    .with_content(output)
}

impl Truncation {
    fn with_content(mut self, content: String) -> Truncation {
        self.content = content;
        self
    }
}

/// The longest suffix of `text` that is at most `max_bytes` long and starts on a char boundary.
fn tail_within_bytes(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Cuts a grep line to `GREP_MAX_LINE_LENGTH` UTF-16 units, adding `... [truncated]`.
/// Returns the text and whether it was cut.
pub fn truncate_line(line: &str) -> (String, bool) {
    let mut units = 0usize;
    for (index, ch) in line.char_indices() {
        let width = ch.len_utf16();
        if units + width > GREP_MAX_LINE_LENGTH {
            // JS slices by UTF-16 unit; a surrogate pair straddling the cut keeps only its lead
            // half there. We keep whole chars: the cut is at most one unit shorter.
            return (format!("{}... [truncated]", &line[..index]), true);
        }
        units += width;
    }
    (line.to_string(), false)
}

/// UTF-16 length of a string (JS `string.length`).
pub fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

/// A listing (find, ls) as pi returns it: cut to 50 KB from the head, with the result-limit notice
/// (`limit`: its text, its details key and value) and the size notice in one bracket.
pub fn listing_output(
    text: &str,
    limit: Option<(String, &'static str, serde_json::Value)>,
) -> super::ToolOutput {
    let truncation = truncate_head(text, NO_LINE_LIMIT, DEFAULT_MAX_BYTES);
    let mut output = truncation.content.clone();
    let mut details = serde_json::Map::new();
    let mut notices = Vec::new();
    if let Some((notice, key, value)) = limit {
        notices.push(notice);
        details.insert(key.to_string(), value);
    }
    if truncation.truncated {
        notices.push(format!("{} limit reached", format_size(DEFAULT_MAX_BYTES)));
        details.insert("truncation".to_string(), truncation.to_json());
    }
    if !notices.is_empty() {
        output.push_str(&format!("\n\n[{}]", notices.join(". ")));
    }
    super::ToolOutput {
        details: (!details.is_empty()).then_some(serde_json::Value::Object(details)),
        ..super::ToolOutput::text(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_format_like_pi() {
        assert_eq!(format_size(0), "0B");
        assert_eq!(format_size(1023), "1023B");
        assert_eq!(format_size(1024), "1.0KB");
        assert_eq!(format_size(51200), "50.0KB");
        assert_eq!(format_size(1536), "1.5KB");
        assert_eq!(format_size(1075), "1.0KB");
        // 1.25 KB exactly: JS toFixed rounds the tie up where `{:.1}` would round to even.
        assert_eq!(format_size(1280), "1.3KB");
        assert_eq!(format_size(1024 * 1024), "1.0MB");
        assert_eq!(format_size(3 * 1024 * 1024 / 2), "1.5MB");
    }

    #[test]
    fn head_keeps_whole_lines() {
        let t = truncate_head("a\nb\nc", 2, 100);
        assert_eq!(t.content, "a\nb");
        assert_eq!(t.truncated_by, Some(TruncatedBy::Lines));
        assert_eq!((t.total_lines, t.output_lines), (3, 2));
        let t = truncate_head("aaaa\nbbbb\ncccc", 100, 9);
        assert_eq!(t.content, "aaaa\nbbbb");
        assert_eq!(t.truncated_by, Some(TruncatedBy::Bytes));
        let t = truncate_head("aaaaaaaaaaaa\nb", 100, 5);
        assert!(t.first_line_exceeds_limit);
        assert_eq!(t.content, "");
        let t = truncate_head("abc", 1, 3);
        assert!(!t.truncated);
        assert_eq!(t.truncated_by, None);
    }

    #[test]
    fn head_exactly_at_line_limit_reports_lines() {
        // 3 lines with a limit of 2 where the bytes also just fit: "lines" wins.
        let t = truncate_head("ab\ncd\nef", 2, 5);
        assert_eq!(t.content, "ab\ncd");
        assert_eq!(t.truncated_by, Some(TruncatedBy::Lines));
    }

    #[test]
    fn tail_keeps_last_lines_and_partial_long_line() {
        let t = truncate_tail("a\nb\nc", 2, 100);
        assert_eq!(t.content, "b\nc");
        assert_eq!(t.truncated_by, Some(TruncatedBy::Lines));
        let t = truncate_tail("x\nééééé", 100, 5);
        // 5 bytes from the end, moved forward to a char boundary.
        assert_eq!(t.content, "éé");
        assert!(t.last_line_partial);
        assert_eq!(t.truncated_by, Some(TruncatedBy::Bytes));
        assert_eq!(t.output_bytes, 4);
    }

    #[test]
    fn grep_lines_cut_at_500_units() {
        let long = "x".repeat(501);
        let (text, cut) = truncate_line(&long);
        assert!(cut);
        assert_eq!(text, format!("{}... [truncated]", "x".repeat(500)));
        let (text, cut) = truncate_line(&"y".repeat(500));
        assert!(!cut);
        assert_eq!(text.len(), 500);
    }

    #[test]
    fn truncation_json_key_order() {
        let t = truncate_head("a\nb", 1, 10);
        let keys: Vec<String> = t.to_json().as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "content",
                "truncated",
                "truncatedBy",
                "totalLines",
                "totalBytes",
                "outputLines",
                "outputBytes",
                "lastLinePartial",
                "firstLineExceedsLimit",
                "maxLines",
                "maxBytes"
            ]
        );
    }
}
