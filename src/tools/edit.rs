//! The edit tool: one or more exact-text replacements in one file, matched against the original
//! content, with a fuzzy fallback, BOM/CRLF preservation, and a numbered diff in `details`.
//!
//! Input: validated `{path, edits:[{oldText,newText}]}` (after `prepare_arguments` folded the legacy
//! top-level oldText/newText in and parsed `edits` sent as a JSON string). Output: the result text
//! and `{diff, firstChangedLine}`, or one of pi's error texts.
//!
//! Fuzzy matching ("NFKC-lite"): the reference NFKC-normalizes both sides before stripping
//! trailing whitespace and folding quotes/dashes/spaces. Without Unicode tables we apply only the
//! NFKC mappings that show up in code and prose: special spaces → space, fullwidth ASCII → ASCII,
//! the ellipsis/leader characters → dots, the Latin ligatures ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ, superscript 1-3 and ™.
//! Skipped: canonical composition/decomposition (combining accents), other compatibility forms
//! (circled/squared letters, vertical forms, Hangul/Kana width variants, fractions, etc.).

use serde_json::{Value, json};

use super::path::{FileLock, errno_parts, node_fs_error_no_path};
use super::path_guard::{self, Access};
use super::{ToolContext, ToolOutput};
use crate::child::CancelFlag;
use crate::js::is_js_whitespace;
use crate::paths::resolve_to_cwd;

/// Mirrors the reference's argument preparation: `edits` given as a JSON string is parsed, and a
/// top-level `oldText`/`newText` pair is appended to `edits` and removed from the top level.
pub fn prepare_arguments(arguments: Value) -> Value {
    let Value::Object(mut map) = arguments else {
        return arguments;
    };
    if let Some(Value::String(text)) = map.get("edits")
        && let Ok(parsed @ Value::Array(_)) = serde_json::from_str::<Value>(text)
    {
        map.insert("edits".to_string(), parsed);
    }
    let (Some(Value::String(old_text)), Some(Value::String(new_text))) =
        (map.get("oldText"), map.get("newText"))
    else {
        return Value::Object(map);
    };
    let legacy = json!({"oldText": old_text, "newText": new_text});
    let mut edits = match map.get("edits") {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    edits.push(legacy);
    map.shift_remove("oldText");
    map.shift_remove("newText");
    // `{...rest, edits}`: an existing `edits` key keeps its place, otherwise it goes last.
    map.insert("edits".to_string(), Value::Array(edits));
    Value::Object(map)
}

/// One replacement.
#[derive(Clone, Debug, PartialEq)]
pub struct Replacement {
    pub old_text: String,
    pub new_text: String,
}

pub fn execute(
    args: &Value,
    context: &ToolContext,
    cancel: &CancelFlag,
) -> Result<ToolOutput, String> {
    let raw_path = args.get("path").and_then(Value::as_str).unwrap_or_default();
    let edits: Vec<Replacement> = match args.get("edits") {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|item| Replacement {
                old_text: item
                    .get("oldText")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                new_text: item
                    .get("newText")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            })
            .collect(),
        _ => {
            return Err(
                "Edit tool input is invalid. edits must contain at least one replacement."
                    .to_string(),
            );
        }
    };
    let absolute = resolve_to_cwd(raw_path, &context.cwd);
    path_guard::check(&absolute, Access::Write)?;
    let _lock = FileLock::acquire(&absolute);
    if cancel.is_cancelled() {
        return Err(super::ABORTED.to_string());
    }
    let client = context.client.as_deref();
    let bytes;
    let raw = match client.filter(|c| c.reads_files()) {
        // The editor's text, unsaved changes included.
        Some(client) => std::borrow::Cow::Owned(client.read_text_file(&absolute, cancel)?),
        None => {
            check_read_write(&absolute)
                .map_err(|code| format!("Could not edit file: {raw_path}. Error code: {code}."))?;
            bytes = std::fs::read(&absolute).map_err(|e| node_fs_error_no_path(&e, "read"))?;
            String::from_utf8_lossy(&bytes)
        }
    };
    if cancel.is_cancelled() {
        return Err(super::ABORTED.to_string());
    }
    let (bom, content) = match raw.strip_prefix('\u{FEFF}') {
        Some(rest) => ("\u{FEFF}", rest),
        None => ("", raw.as_ref()),
    };
    let ending = detect_line_ending(content);
    let normalized = normalize_to_lf(content);
    let (base, new_content) = apply_edits(&normalized, &edits, raw_path)?;
    if cancel.is_cancelled() {
        return Err(super::ABORTED.to_string());
    }
    let restored = if ending == "\r\n" {
        new_content.replace('\n', "\r\n")
    } else {
        new_content.clone()
    };
    let written = format!("{bom}{restored}");
    match client.filter(|c| c.writes_files()) {
        Some(client) => client.write_text_file(&absolute, &written, cancel)?,
        // Atomic, as the write tool: a reader never sees the file half-written.
        None => crate::disk::replace_file(&absolute, written.as_bytes())
            .map_err(|e| super::path::node_fs_error(&e, "open", &absolute))?,
    }
    if let Some(client) = client
        && raw.len().max(written.len()) <= super::client::MAX_DIFF_BYTES
    {
        client.file_changed(&context.call_id, &absolute, Some(&raw), &written);
    }
    let (diff, first_changed_line) = diff_string(&base, &new_content, 4);
    let mut details = serde_json::Map::new();
    details.insert("diff".to_string(), Value::from(diff));
    if let Some(line) = first_changed_line {
        details.insert("firstChangedLine".to_string(), Value::from(line));
    }
    Ok(ToolOutput {
        details: Some(Value::Object(details)),
        ..ToolOutput::text(format!(
            "Successfully replaced {} block(s) in {raw_path}.",
            edits.len()
        ))
    })
}

/// `access(path, R_OK | W_OK)`, returning the errno name on failure.
fn check_read_write(path: &std::path::Path) -> Result<(), &'static str> {
    let c_path =
        std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| "ENOENT")?;
    // SAFETY: valid NUL-terminated string; access() only reads it.
    if unsafe { libc::access(c_path.as_ptr(), libc::R_OK | libc::W_OK) } != 0 {
        return Err(errno_parts(&std::io::Error::last_os_error()).0);
    }
    Ok(())
}

/// `\r\n` when the first line break is CRLF, else `\n`.
pub fn detect_line_ending(content: &str) -> &'static str {
    match (content.find("\r\n"), content.find('\n')) {
        (Some(crlf), Some(lf)) if crlf < lf => "\r\n",
        _ => "\n",
    }
}

pub fn normalize_to_lf(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// The NFKC mappings we implement (see the module doc); `None` = keep the char.
fn nfkc_lite(ch: char) -> Option<&'static str> {
    Some(match ch {
        '\u{00A0}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => " ",
        '\u{2024}' => ".",
        '\u{2025}' => "..",
        '\u{2026}' => "...",
        '\u{2011}' => "\u{2010}",
        '\u{00B9}' => "1",
        '\u{00B2}' => "2",
        '\u{00B3}' => "3",
        '\u{2122}' => "TM",
        '\u{FB00}' => "ff",
        '\u{FB01}' => "fi",
        '\u{FB02}' => "fl",
        '\u{FB03}' => "ffi",
        '\u{FB04}' => "ffl",
        '\u{FB05}' | '\u{FB06}' => "st",
        _ => return None,
    })
}

/// Fuzzy form of a text: NFKC-lite, trailing whitespace stripped per line, smart quotes → ASCII,
/// Unicode dashes → `-`, special spaces → space.
pub fn normalize_for_fuzzy_match(text: &str) -> String {
    let mut nfkc = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '\u{FF01}'..='\u{FF5E}' => {
                nfkc.push(char::from_u32(ch as u32 - 0xFF01 + 0x21).unwrap_or(ch))
            }
            _ => match nfkc_lite(ch) {
                Some(replacement) => nfkc.push_str(replacement),
                None => nfkc.push(ch),
            },
        }
    }
    let trimmed: Vec<&str> = nfkc
        .split('\n')
        .map(|line| line.trim_end_matches(is_js_whitespace))
        .collect();
    trimmed
        .join("\n")
        .chars()
        .map(|ch| match ch {
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

struct FoundText {
    index: usize,
    length: usize,
    fuzzy: bool,
}

fn fuzzy_find(content: &str, old_text: &str) -> Option<FoundText> {
    if let Some(index) = content.find(old_text) {
        return Some(FoundText {
            index,
            length: old_text.len(),
            fuzzy: false,
        });
    }
    let fuzzy_content = normalize_for_fuzzy_match(content);
    let fuzzy_old = normalize_for_fuzzy_match(old_text);
    fuzzy_content.find(&fuzzy_old).map(|index| FoundText {
        index,
        length: fuzzy_old.len(),
        fuzzy: true,
    })
}

fn count_occurrences(content: &str, old_text: &str) -> usize {
    let fuzzy_old = normalize_for_fuzzy_match(old_text);
    if fuzzy_old.is_empty() {
        return 0;
    }
    normalize_for_fuzzy_match(content)
        .matches(&fuzzy_old)
        .count()
}

/// Applies all edits to LF content; returns (base content the edits were matched in, new content).
/// If any edit needed fuzzy matching, base is the fuzzy-normalized content.
pub fn apply_edits(
    content: &str,
    edits: &[Replacement],
    path: &str,
) -> Result<(String, String), String> {
    let total = edits.len();
    let edits: Vec<Replacement> = edits
        .iter()
        .map(|e| Replacement {
            old_text: normalize_to_lf(&e.old_text),
            new_text: normalize_to_lf(&e.new_text),
        })
        .collect();
    for (index, edit) in edits.iter().enumerate() {
        if edit.old_text.is_empty() {
            return Err(if total == 1 {
                format!("oldText must not be empty in {path}.")
            } else {
                format!("edits[{index}].oldText must not be empty in {path}.")
            });
        }
    }
    let any_fuzzy = edits
        .iter()
        .any(|e| fuzzy_find(content, &e.old_text).is_some_and(|f| f.fuzzy));
    let base = if any_fuzzy {
        normalize_for_fuzzy_match(content)
    } else {
        content.to_string()
    };
    let mut matched: Vec<(usize, usize, usize)> = Vec::new(); // (edit index, start, length)
    for (index, edit) in edits.iter().enumerate() {
        let Some(found) = fuzzy_find(&base, &edit.old_text) else {
            return Err(if total == 1 {
                format!(
                    "Could not find the exact text in {path}. The old text must match exactly including all whitespace and newlines."
                )
            } else {
                format!(
                    "Could not find edits[{index}] in {path}. The oldText must match exactly including all whitespace and newlines."
                )
            });
        };
        let occurrences = count_occurrences(&base, &edit.old_text);
        if occurrences > 1 {
            return Err(if total == 1 {
                format!(
                    "Found {occurrences} occurrences of the text in {path}. The text must be unique. Please provide more context to make it unique."
                )
            } else {
                format!(
                    "Found {occurrences} occurrences of edits[{index}] in {path}. Each oldText must be unique. Please provide more context to make it unique."
                )
            });
        }
        matched.push((index, found.index, found.length));
    }
    matched.sort_by_key(|m| m.1);
    for pair in matched.windows(2) {
        let (previous, current) = (pair[0], pair[1]);
        if previous.1 + previous.2 > current.1 {
            return Err(format!(
                "edits[{}] and edits[{}] overlap in {path}. Merge them into one edit or target disjoint regions.",
                previous.0, current.0
            ));
        }
    }
    let mut new_content = base.clone();
    for &(index, start, length) in matched.iter().rev() {
        // Fuzzy lengths come from the normalized old text; clamp so odd inputs cannot slice
        // outside the string or inside a char.
        let end = (start + length).min(new_content.len());
        if !new_content.is_char_boundary(start) || !new_content.is_char_boundary(end) {
            return Err(format!(
                "Could not find edits[{index}] in {path}. The oldText must match exactly including all whitespace and newlines."
            ));
        }
        new_content.replace_range(start..end, &edits[index].new_text);
    }
    if base == new_content {
        return Err(if total == 1 {
            format!(
                "No changes made to {path}. The replacement produced identical content. This might indicate an issue with special characters or the text not existing as expected."
            )
        } else {
            format!("No changes made to {path}. The replacements produced identical content.")
        });
    }
    Ok((base, new_content))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PartKind {
    Same,
    Added,
    Removed,
}

/// Line diff in jsdiff's `diffLines` shape: parts of whole lines (each keeps its `\n`), removals
/// before additions within a change. Common prefix/suffix are peeled off first; the middle uses an
/// LCS table when small, else is reported as one replacement (bounded time and memory).
fn diff_lines(old: &str, new: &str) -> Vec<(PartKind, Vec<String>)> {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suffix)
        .take_while(|(x, y)| x == y)
        .count();
    let mid_a = &a[prefix..a.len() - suffix];
    let mid_b = &b[prefix..b.len() - suffix];
    let mut ops: Vec<(PartKind, &str)> = Vec::new();
    ops.extend(a[..prefix].iter().map(|l| (PartKind::Same, *l)));
    if mid_a.len().saturating_mul(mid_b.len()) <= 4_000_000 {
        let (n, m) = (mid_a.len(), mid_b.len());
        let mut lcs = vec![0u32; (n + 1) * (m + 1)];
        let at = |i: usize, j: usize| i * (m + 1) + j;
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[at(i, j)] = if mid_a[i] == mid_b[j] {
                    lcs[at(i + 1, j + 1)] + 1
                } else {
                    lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && mid_a[i] == mid_b[j] && lcs[at(i, j)] == lcs[at(i + 1, j + 1)] + 1
            {
                ops.push((PartKind::Same, mid_a[i]));
                i += 1;
                j += 1;
            } else if i < n && (j >= m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
                ops.push((PartKind::Removed, mid_a[i]));
                i += 1;
            } else {
                ops.push((PartKind::Added, mid_b[j]));
                j += 1;
            }
        }
    } else {
        ops.extend(mid_a.iter().map(|l| (PartKind::Removed, *l)));
        ops.extend(mid_b.iter().map(|l| (PartKind::Added, *l)));
    }
    ops.extend(a[a.len() - suffix..].iter().map(|l| (PartKind::Same, *l)));

    // Group: runs of Same, and change runs split into one Removed then one Added part.
    let mut parts: Vec<(PartKind, Vec<String>)> = Vec::new();
    let mut index = 0;
    while index < ops.len() {
        if ops[index].0 == PartKind::Same {
            let mut lines = Vec::new();
            while index < ops.len() && ops[index].0 == PartKind::Same {
                lines.push(ops[index].1.to_string());
                index += 1;
            }
            parts.push((PartKind::Same, lines));
        } else {
            let (mut removed, mut added) = (Vec::new(), Vec::new());
            while index < ops.len() && ops[index].0 != PartKind::Same {
                match ops[index].0 {
                    PartKind::Removed => removed.push(ops[index].1.to_string()),
                    _ => added.push(ops[index].1.to_string()),
                }
                index += 1;
            }
            if !removed.is_empty() {
                parts.push((PartKind::Removed, removed));
            }
            if !added.is_empty() {
                parts.push((PartKind::Added, added));
            }
        }
    }
    parts
}

/// pi's diff text: `+`/`-`/` ` + line number padded to the widest line count + space + text,
/// `context` lines around changes, skipped stretches as ` <pad> ...`. Also returns the first
/// changed line (numbered in the new file).
pub fn diff_string(old: &str, new: &str, context: usize) -> (String, Option<usize>) {
    let parts = diff_lines(old, new);
    let width = old
        .split('\n')
        .count()
        .max(new.split('\n').count())
        .to_string()
        .len();
    let pad = " ".repeat(width);
    let mut output: Vec<String> = Vec::new();
    let (mut old_line, mut new_line) = (1usize, 1usize);
    let mut last_was_change = false;
    let mut first_changed = None;
    for (index, (kind, tokens)) in parts.iter().enumerate() {
        let joined: String = tokens.concat();
        let mut raw: Vec<&str> = joined.split('\n').collect();
        if raw.last() == Some(&"") {
            raw.pop();
        }
        match kind {
            PartKind::Added | PartKind::Removed => {
                first_changed.get_or_insert(new_line);
                for line in raw {
                    if *kind == PartKind::Added {
                        output.push(format!("+{new_line:>width$} {line}"));
                        new_line += 1;
                    } else {
                        output.push(format!("-{old_line:>width$} {line}"));
                        old_line += 1;
                    }
                }
                last_was_change = true;
            }
            PartKind::Same => {
                let next_is_change = parts
                    .get(index + 1)
                    .is_some_and(|(k, _)| *k != PartKind::Same);
                let show = |lines: &[&str],
                            output: &mut Vec<String>,
                            old_line: &mut usize,
                            new_line: &mut usize| {
                    for line in lines {
                        output.push(format!(" {:>width$} {line}", *old_line));
                        *old_line += 1;
                        *new_line += 1;
                    }
                };
                if last_was_change && next_is_change {
                    if raw.len() <= context * 2 {
                        show(&raw, &mut output, &mut old_line, &mut new_line);
                    } else {
                        let skipped = raw.len() - 2 * context;
                        show(&raw[..context], &mut output, &mut old_line, &mut new_line);
                        output.push(format!(" {pad} ..."));
                        old_line += skipped;
                        new_line += skipped;
                        show(
                            &raw[raw.len() - context..],
                            &mut output,
                            &mut old_line,
                            &mut new_line,
                        );
                    }
                } else if last_was_change {
                    let shown = raw.len().min(context);
                    show(&raw[..shown], &mut output, &mut old_line, &mut new_line);
                    let skipped = raw.len() - shown;
                    if skipped > 0 {
                        output.push(format!(" {pad} ..."));
                        old_line += skipped;
                        new_line += skipped;
                    }
                } else if next_is_change {
                    let skipped = raw.len().saturating_sub(context);
                    if skipped > 0 {
                        output.push(format!(" {pad} ..."));
                        old_line += skipped;
                        new_line += skipped;
                    }
                    show(&raw[skipped..], &mut output, &mut old_line, &mut new_line);
                } else {
                    old_line += raw.len();
                    new_line += raw.len();
                }
                last_was_change = false;
            }
        }
    }
    (output.join("\n"), first_changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::ContentBlock;

    fn edits(pairs: &[(&str, &str)]) -> Vec<Replacement> {
        pairs
            .iter()
            .map(|(o, n)| Replacement {
                old_text: o.to_string(),
                new_text: n.to_string(),
            })
            .collect()
    }

    // Expected diffs come from the reference's generateDiffString (node probe).
    #[test]
    fn diff_format_matches_reference() {
        assert_eq!(
            diff_string("a\nb\nc\n", "a\nB\nc\n", 4),
            (" 1 a\n-2 b\n+2 B\n 3 c".to_string(), Some(2))
        );
        let old: String = (1..=20).map(|i| format!("l{i}\n")).collect();
        let new: String = (1..=20)
            .map(|i| {
                if i == 3 {
                    "X\n".to_string()
                } else if i == 16 {
                    "Y\n".to_string()
                } else {
                    format!("l{i}\n")
                }
            })
            .collect();
        assert_eq!(
            diff_string(&old, &new, 4).0,
            "  1 l1\n  2 l2\n- 3 l3\n+ 3 X\n  4 l4\n  5 l5\n  6 l6\n  7 l7\n    ...\n 12 l12\n 13 l13\n 14 l14\n 15 l15\n-16 l16\n+16 Y\n 17 l17\n 18 l18\n 19 l19\n 20 l20"
        );
        assert_eq!(
            diff_string("a\nb", "a\nb\nc", 4).0,
            " 1 a\n-2 b\n+2 b\n+3 c"
        );
        assert_eq!(
            diff_string("x\ny\ny\nz\n", "x\ny\nz\n", 4),
            (" 1 x\n 2 y\n-3 y\n 4 z".to_string(), Some(3))
        );
        let old: String = (1..=12).map(|i| format!("{i}\n")).collect();
        let new = old.replace("6\n", "6\nnew\n");
        assert_eq!(
            diff_string(&old, &new, 4),
            ("    ...\n  3 3\n  4 4\n  5 5\n  6 6\n+ 7 new\n  7 7\n  8 8\n  9 9\n 10 10\n    ...".to_string(), Some(7))
        );
    }

    #[test]
    fn fuzzy_matching_rewrites_in_normalized_space() {
        assert_eq!(
            normalize_for_fuzzy_match("a\u{a0}b\u{2014}c \u{2018}q\u{2019} \u{ff21}\u{2026}  \n"),
            "a b-c 'q' A...\n"
        );
        let content = "const s = \u{201c}hi\u{201d};   \nlet x = 1;\n";
        let (base, new) = apply_edits(
            content,
            &edits(&[("const s = \"hi\";\nlet", "const s = \"yo\";\nlet")]),
            "f.js",
        )
        .unwrap();
        assert_eq!(base, "const s = \"hi\";\nlet x = 1;\n");
        assert_eq!(new, "const s = \"yo\";\nlet x = 1;\n");
    }

    #[test]
    fn edit_error_texts() {
        let one = |o: &str| apply_edits("aa bb aa\n", &edits(&[(o, "z")]), "p.txt").unwrap_err();
        assert_eq!(
            one("zz"),
            "Could not find the exact text in p.txt. The old text must match exactly including all whitespace and newlines."
        );
        assert_eq!(
            one("aa"),
            "Found 2 occurrences of the text in p.txt. The text must be unique. Please provide more context to make it unique."
        );
        assert_eq!(one(""), "oldText must not be empty in p.txt.");
        let err = apply_edits("aa bb\n", &edits(&[("bb", "bb")]), "p.txt").unwrap_err();
        assert!(
            err.starts_with(
                "No changes made to p.txt. The replacement produced identical content."
            )
        );
        let err =
            apply_edits("abcdef\n", &edits(&[("abc", "1"), ("cde", "2")]), "p.txt").unwrap_err();
        assert_eq!(
            err,
            "edits[0] and edits[1] overlap in p.txt. Merge them into one edit or target disjoint regions."
        );
        let err = apply_edits("abc\n", &edits(&[("a", "1"), ("q", "2")]), "p.txt").unwrap_err();
        assert_eq!(
            err,
            "Could not find edits[1] in p.txt. The oldText must match exactly including all whitespace and newlines."
        );
        let (_, new) = apply_edits(
            "one two three\n",
            &edits(&[("three", "3"), ("one", "1")]),
            "p.txt",
        )
        .unwrap();
        assert_eq!(new, "1 two 3\n");
    }

    #[test]
    fn legacy_and_string_arguments_are_prepared() {
        let prepared = prepare_arguments(json!({"path":"a","oldText":"x","newText":"y"}));
        assert_eq!(
            prepared,
            json!({"path":"a","edits":[{"oldText":"x","newText":"y"}]})
        );
        let prepared = prepare_arguments(
            json!({"path":"a","edits":"[{\"oldText\":\"x\",\"newText\":\"y\"}]"}),
        );
        assert_eq!(
            prepared,
            json!({"path":"a","edits":[{"oldText":"x","newText":"y"}]})
        );
    }

    #[test]
    fn edits_file_keeping_bom_and_crlf() {
        let dir = std::env::temp_dir().join(format!("pi-rs-edit-{}", crate::ids::random_hex16()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f.txt");
        std::fs::write(&file, "\u{feff}one\r\ntwo\r\nthree\r\n").unwrap();
        let ctx = ToolContext::for_test(&dir);
        let cancel = CancelFlag::default();
        let out = execute(
            &json!({"path":"f.txt","edits":[{"oldText":"two\nthree","newText":"2\n3"}]}),
            &ctx,
            &cancel,
        )
        .unwrap();
        let ContentBlock::Text(text) = &out.content[0] else {
            panic!()
        };
        assert_eq!(text.text, "Successfully replaced 1 block(s) in f.txt.");
        assert_eq!(
            out.details,
            Some(json!({"diff":" 1 one\n-2 two\n-3 three\n+2 2\n+3 3","firstChangedLine":2}))
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "\u{feff}one\r\n2\r\n3\r\n"
        );
        let err = execute(
            &json!({"path":"nope.txt","edits":[{"oldText":"a","newText":"b"}]}),
            &ctx,
            &cancel,
        )
        .unwrap_err();
        assert_eq!(err, "Could not edit file: nope.txt. Error code: ENOENT.");
        let err = execute(&json!({"path":"f.txt","edits":[]}), &ctx, &cancel).unwrap_err();
        assert_eq!(
            err,
            "Edit tool input is invalid. edits must contain at least one replacement."
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
