//! Frontmatter of skill and prompt-template files: the YAML block between a leading `---` line
//! and the next `\n---`, plus the body after it. Input is a file's text; output is the top-level
//! `key: value` pairs and the body (trimmed when a frontmatter block was found, otherwise the
//! whole text with CRLF/CR turned into LF, untrimmed — as pi does).
//!
//! Only the YAML subset these files use is understood: a top-level mapping whose values are plain,
//! single- or double-quoted scalars (also spread over several lines), `|`/`>` block scalars,
//! booleans, nulls and numbers. Nested mappings, sequences and flow collections are accepted and
//! reported as [`YamlValue::Other`]. Inputs that pi's YAML library rejects and that occur in
//! practice (`description: use when: x`, duplicate keys, unclosed quotes, tab indentation, text
//! after a quoted value) are errors here too, so such files are skipped the same way; anything
//! else we do not understand is ignored rather than rejected.

use crate::js::js_trim;
use std::fmt;

/// One top-level frontmatter value.
#[derive(Debug, Clone, PartialEq)]
pub enum YamlValue {
    Null,
    Bool(bool),
    /// A number, kept as written (`42`, `0x1F`, `1e3`).
    Number(String),
    String(String),
    /// A sequence, nested mapping, flow collection or alias: present but not interpreted.
    Other,
}

/// The top-level keys of a frontmatter block, in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frontmatter {
    pub entries: Vec<(String, YamlValue)>,
}

impl Frontmatter {
    pub fn get(&self, key: &str) -> Option<&YamlValue> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The value of `key` when it is a string.
    pub fn string(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(YamlValue::String(s)) => Some(s),
            _ => None,
        }
    }

    /// True only for a YAML boolean `true` (a string "true" or "yes" does not count).
    pub fn is_true(&self, key: &str) -> bool {
        matches!(self.get(key), Some(YamlValue::Bool(true)))
    }
}

/// A file split into its frontmatter and body.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedFile {
    pub frontmatter: Frontmatter,
    pub body: String,
}

/// The frontmatter block is not YAML pi would accept.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontmatterError {
    pub message: String,
    /// 1-based line inside the frontmatter block.
    pub line: usize,
}

impl fmt::Display for FrontmatterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at frontmatter line {}", self.message, self.line)
    }
}

impl std::error::Error for FrontmatterError {}

/// Splits `content` into frontmatter and body.
pub fn parse_frontmatter(content: &str) -> Result<ParsedFile, FrontmatterError> {
    let normalized = content.replace("\r\n", "\n").replace('\r', "\n");
    if !normalized.starts_with("---") {
        return Ok(ParsedFile {
            frontmatter: Frontmatter::default(),
            body: normalized,
        });
    }
    // The closing marker is searched from offset 3, so `---\n---` closes immediately.
    let Some(end) = normalized[3..].find("\n---").map(|i| i + 3) else {
        return Ok(ParsedFile {
            frontmatter: Frontmatter::default(),
            body: normalized,
        });
    };
    // pi skips the 4th character (normally the newline after `---`), whatever it is.
    let yaml_start = 3 + normalized[3..].chars().next().map_or(0, char::len_utf8);
    let yaml = if end > yaml_start {
        &normalized[yaml_start..end]
    } else {
        ""
    };
    let body = js_trim(&normalized[end + 4..]).to_string();
    let frontmatter = if yaml.is_empty() {
        Frontmatter::default()
    } else {
        parse_yaml_mapping(yaml)?
    };
    Ok(ParsedFile { frontmatter, body })
}

/// The body of `content` without its frontmatter.
pub fn strip_frontmatter(content: &str) -> Result<String, FrontmatterError> {
    parse_frontmatter(content).map(|parsed| parsed.body)
}

// ---------------------------------------------------------------------------------------------
// The YAML subset.

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim_start_matches([' ', '\t']);
    t.is_empty() || t.starts_with('#')
}

fn error(message: &str, index: usize) -> FrontmatterError {
    FrontmatterError {
        message: message.to_string(),
        line: index + 1,
    }
}

/// Position of the `:` that separates a plain key from its value: the first `:` followed by a
/// space, a tab or the end of the line.
fn mapping_colon(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len()).find(|&i| {
        bytes[i] == b':' && (i + 1 == bytes.len() || bytes[i + 1] == b' ' || bytes[i + 1] == b'\t')
    })
}

/// Cuts a ` #` / `\t#` comment off a plain scalar line.
fn strip_comment(text: &str) -> &str {
    let bytes = text.as_bytes();
    for i in 1..bytes.len() {
        if bytes[i] == b'#' && (bytes[i - 1] == b' ' || bytes[i - 1] == b'\t') {
            return &text[..i];
        }
    }
    text
}

fn parse_yaml_mapping(src: &str) -> Result<Frontmatter, FrontmatterError> {
    let mut lines: Vec<&str> = src.split('\n').collect();
    if src.ends_with('\n') {
        lines.pop(); // the text after the last newline is not a line
    }
    let mut entries: Vec<(String, YamlValue)> = Vec::new();
    let mut base: Option<usize> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if is_blank_or_comment(line) {
            i += 1;
            continue;
        }
        if line.starts_with('\t') {
            return Err(error("Tabs are not allowed as indentation", i));
        }
        let indent = indent_of(line);
        let text = &line[indent..];
        if indent == 0 && (text == "..." || text.starts_with("... ") || text == "---") {
            break; // end of the YAML document
        }
        let base_indent = *base.get_or_insert(indent);
        if indent != base_indent {
            return Err(error("All mapping items must start at the same column", i));
        }
        let Some((key, rest)) = split_key(text, i)? else {
            let later_key = lines[i + 1..]
                .iter()
                .any(|l| !is_blank_or_comment(l) && mapping_colon(l.trim_start()).is_some());
            if entries.is_empty() && !later_key {
                // A document that is a scalar or a sequence: pi sees no keys at all.
                return Ok(Frontmatter::default());
            }
            return Err(error("Implicit keys need to be on a single line", i));
        };
        if entries.iter().any(|(k, _)| *k == key) {
            return Err(error("Map keys must be unique", i));
        }
        let (value, next) = parse_value(&lines, i, base_indent, rest)?;
        entries.push((key, value));
        i = next;
    }
    Ok(Frontmatter { entries })
}

/// Splits `key: rest` (plain or quoted key). `None` when the line is not a mapping entry.
fn split_key(text: &str, index: usize) -> Result<Option<(String, &str)>, FrontmatterError> {
    if text.starts_with('"') || text.starts_with('\'') {
        let quote = text.as_bytes()[0] as char;
        let Some((key, consumed)) = quoted_single_line(text, quote) else {
            return Ok(None);
        };
        let after = text[consumed..].trim_start_matches([' ', '\t']);
        return Ok(after
            .strip_prefix(':')
            .map(|rest| (key, rest.trim_start_matches([' ', '\t']))));
    }
    if text.starts_with("- ") || text == "-" {
        return Ok(None);
    }
    let Some(colon) = mapping_colon(text) else {
        return Ok(None);
    };
    let key = text[..colon].trim_end();
    if key.is_empty() {
        return Err(error("Empty mapping key", index));
    }
    Ok(Some((
        key.to_string(),
        text[colon + 1..].trim_start_matches([' ', '\t']),
    )))
}

/// A quoted key on one line: (unescaped text, bytes consumed including both quotes).
fn quoted_single_line(text: &str, quote: char) -> Option<(String, usize)> {
    let lines = [text];
    let (value, end_line, end_col) = scan_quoted(&lines, 0, 1, quote).ok()?;
    (end_line == 0).then_some((value, end_col))
}

/// Parses the value that starts with `rest` on line `index`; returns it and the next line to read.
fn parse_value(
    lines: &[&str],
    index: usize,
    base: usize,
    rest: &str,
) -> Result<(YamlValue, usize), FrontmatterError> {
    let rest = strip_properties(rest);
    if rest.is_empty() || rest.starts_with('#') {
        return value_on_following_lines(lines, index, base);
    }
    match rest.as_bytes()[0] {
        b'|' | b'>' => block_scalar(lines, index, base, rest),
        b'"' | b'\'' => {
            let line = lines[index];
            let start_col = line.len() - rest.len();
            let quote = rest.as_bytes()[0] as char;
            let (value, end_line, end_col) = scan_quoted(lines, index, start_col + 1, quote)?;
            let after = lines[end_line][end_col..].trim_start_matches([' ', '\t']);
            if !after.is_empty() && !after.starts_with('#') {
                return Err(error("Unexpected scalar at node end", end_line));
            }
            let next = end_line + 1;
            if let Some(j) = next_content_line(lines, next)
                && indent_of(lines[j]) > base
            {
                return Err(error("All mapping items must start at the same column", j));
            }
            Ok((YamlValue::String(value), next))
        }
        b'[' | b'{' => Ok((YamlValue::Other, skip_flow(lines, index, rest))),
        b'*' => Ok((YamlValue::Other, index + 1)),
        b'@' | b'`' => Err(error(
            "Plain value cannot start with reserved character",
            index,
        )),
        b'%' => Err(error(
            "Plain value cannot start with directive indicator character %",
            index,
        )),
        b'-' if rest == "-" || rest.starts_with("- ") => Err(error(
            "Unexpected block-seq-ind on same line with key",
            index,
        )),
        _ => plain_scalar(lines, index, base, rest),
    }
}

/// Drops `&anchor` and `!tag` properties in front of a value.
fn strip_properties(mut rest: &str) -> &str {
    while rest.starts_with('&') || rest.starts_with('!') {
        match rest.find([' ', '\t']) {
            Some(space) => rest = rest[space..].trim_start_matches([' ', '\t']),
            None => return "",
        }
    }
    rest
}

fn next_content_line(lines: &[&str], from: usize) -> Option<usize> {
    (from..lines.len()).find(|&j| !is_blank_or_comment(lines[j]))
}

/// `key:` with nothing after it: a nested block, a scalar on the next lines, or null.
fn value_on_following_lines(
    lines: &[&str],
    index: usize,
    base: usize,
) -> Result<(YamlValue, usize), FrontmatterError> {
    let Some(j) = next_content_line(lines, index + 1) else {
        return Ok((YamlValue::Null, lines.len()));
    };
    let indent = indent_of(lines[j]);
    let text = &lines[j][indent..];
    let is_sequence_item = text == "-" || text.starts_with("- ");
    if indent > base {
        if is_sequence_item || text.ends_with(':') || mapping_colon(text).is_some() {
            return Ok((YamlValue::Other, skip_indented(lines, j, base)));
        }
        return match text.as_bytes()[0] {
            b'"' | b'\'' | b'|' | b'>' => parse_value(lines, j, base, text),
            _ => plain_scalar(lines, j, base, text),
        };
    }
    if indent == base && is_sequence_item {
        // `key:` followed by `- item` lines at the key's own column.
        let mut k = j;
        while k < lines.len() {
            let t = &lines[k][indent_of(lines[k]).min(lines[k].len())..];
            let item_here = indent_of(lines[k]) == base && (t == "-" || t.starts_with("- "));
            if !(is_blank_or_comment(lines[k]) || item_here || indent_of(lines[k]) > base) {
                break;
            }
            k += 1;
        }
        return Ok((YamlValue::Other, k));
    }
    Ok((YamlValue::Null, j))
}

/// The first line at or above `base` indentation after `from` (blank lines do not count).
fn skip_indented(lines: &[&str], from: usize, base: usize) -> usize {
    let mut k = from;
    while k < lines.len() && (is_blank_or_comment(lines[k]) || indent_of(lines[k]) > base) {
        k += 1;
    }
    k
}

/// Skips a flow collection (`[a, b]`, `{a: 1}`), possibly spanning lines.
fn skip_flow(lines: &[&str], index: usize, rest: &str) -> usize {
    let mut depth: i64 = 0;
    let mut quote: Option<char> = None;
    let mut k = index;
    let mut text = rest;
    loop {
        for c in text.chars() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    '"' | '\'' => quote = Some(c),
                    '[' | '{' => depth += 1,
                    ']' | '}' => depth -= 1,
                    _ => {}
                },
            }
        }
        k += 1;
        if depth <= 0 || k >= lines.len() {
            return k;
        }
        text = lines[k];
    }
}

/// Reads a quoted scalar starting after the opening quote at (`line`, `col`). Returns the value
/// and the position just after the closing quote.
fn scan_quoted(
    lines: &[&str],
    line: usize,
    col: usize,
    quote: char,
) -> Result<(String, usize, usize), FrontmatterError> {
    let missing = || error(&format!("Missing closing {quote}quote"), line);
    let mut value = String::new();
    let mut l = line;
    let mut offset = col;
    loop {
        let text = &lines[l][offset..];
        let mut chars = text.char_indices().peekable();
        // Whitespace is held back: before a line break it is not part of the value.
        let mut pending_space = String::new();
        let mut escaped_break = false;
        while let Some((pos, c)) = chars.next() {
            if c == quote {
                if quote == '\'' && chars.peek().map(|&(_, n)| n) == Some('\'') {
                    chars.next();
                    value.push_str(&pending_space);
                    pending_space.clear();
                    value.push('\'');
                    continue;
                }
                value.push_str(&pending_space);
                return Ok((value, l, offset + pos + c.len_utf8()));
            }
            if quote == '"' && c == '\\' {
                value.push_str(&pending_space);
                pending_space.clear();
                match chars.next() {
                    Some((_, e)) => push_escape(&mut value, e, &mut chars),
                    None => escaped_break = true,
                }
                continue;
            }
            if c == ' ' || c == '\t' {
                pending_space.push(c);
                continue;
            }
            value.push_str(&pending_space);
            pending_space.clear();
            value.push(c);
        }
        // End of the line without the closing quote: continue on the next line.
        let mut next = l + 1;
        let mut empty_lines = 0;
        if !escaped_break {
            while next < lines.len() && lines[next].trim_matches([' ', '\t']).is_empty() {
                empty_lines += 1;
                next += 1;
            }
        }
        if next >= lines.len() {
            return Err(missing());
        }
        if !escaped_break {
            // Folding: a single break is a space, each empty line a newline.
            if empty_lines == 0 {
                value.push(' ');
            } else {
                value.extend(std::iter::repeat_n('\n', empty_lines));
            }
        }
        l = next;
        let next_line = lines[l];
        offset = next_line.len() - next_line.trim_start_matches([' ', '\t']).len();
    }
}

fn push_escape(
    value: &mut String,
    escape: char,
    chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
) {
    let simple = match escape {
        '0' => Some('\0'),
        'a' => Some('\u{7}'),
        'b' => Some('\u{8}'),
        't' | '\t' => Some('\t'),
        'n' => Some('\n'),
        'v' => Some('\u{b}'),
        'f' => Some('\u{c}'),
        'r' => Some('\r'),
        'e' => Some('\u{1b}'),
        ' ' => Some(' '),
        '"' => Some('"'),
        '/' => Some('/'),
        '\\' => Some('\\'),
        'N' => Some('\u{85}'),
        '_' => Some('\u{a0}'),
        'L' => Some('\u{2028}'),
        'P' => Some('\u{2029}'),
        _ => None,
    };
    if let Some(c) = simple {
        value.push(c);
        return;
    }
    let digits = match escape {
        'x' => 2,
        'u' => 4,
        'U' => 8,
        _ => {
            // Unknown escape: keep it as written rather than fail.
            value.push('\\');
            value.push(escape);
            return;
        }
    };
    let mut hex = String::new();
    for _ in 0..digits {
        match chars.peek() {
            Some(&(_, h)) if h.is_ascii_hexdigit() => {
                hex.push(h);
                chars.next();
            }
            _ => break,
        }
    }
    match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
        Some(c) if hex.len() == digits => value.push(c),
        _ => {
            value.push('\\');
            value.push(escape);
            value.push_str(&hex);
        }
    }
}

/// `|` / `>` block scalar with optional chomping (`+`/`-`) and indentation indicators.
fn block_scalar(
    lines: &[&str],
    index: usize,
    base: usize,
    header: &str,
) -> Result<(YamlValue, usize), FrontmatterError> {
    let literal = header.starts_with('|');
    let mut chomp = ' ';
    let mut explicit_indent: Option<usize> = None;
    for c in strip_comment(&header[1..]).trim_end().chars() {
        match c {
            '+' | '-' => chomp = c,
            '1'..='9' => explicit_indent = Some(c as usize - '0' as usize),
            _ => return Err(error("Unexpected characters in block scalar header", index)),
        }
    }
    // The scalar takes every following line that is blank or indented deeper than the key.
    let mut end = index + 1;
    while end < lines.len()
        && (lines[end].trim_matches(' ').is_empty() || indent_of(lines[end]) > base)
    {
        end += 1;
    }
    let body = &lines[index + 1..end];
    let content_indent = match explicit_indent {
        Some(n) => base + n,
        None => body
            .iter()
            .find(|l| !l.trim_matches(' ').is_empty())
            .map_or(base + 1, |l| indent_of(l)),
    };
    if let Some(k) = body
        .iter()
        .position(|l| !l.trim_matches(' ').is_empty() && indent_of(l) < content_indent)
    {
        return Err(error(
            "Block scalar line is indented less than its first line",
            index + 1 + k,
        ));
    }
    let strip = |l: &&str| -> String {
        if indent_of(l) >= content_indent {
            l[content_indent..].to_string()
        } else {
            String::new()
        }
    };
    let content: Vec<String> = body.iter().map(strip).collect();
    let last_text = content.iter().rposition(|l| !l.is_empty());
    let Some(last_text) = last_text else {
        let value = if chomp == '+' {
            "\n".repeat(content.len())
        } else {
            String::new()
        };
        return Ok((YamlValue::String(value), end));
    };
    let trailing_breaks = content.len() - last_text - 1;
    let kept = &content[..=last_text];
    let mut value = if literal {
        kept.join("\n")
    } else {
        fold_lines(kept)
    };
    match chomp {
        '-' => {}
        '+' => value.push_str(&"\n".repeat(trailing_breaks + 1)),
        _ => value.push('\n'),
    }
    Ok((YamlValue::String(value), end))
}

/// Folding of `>` scalars: line breaks between normal lines become spaces, empty lines become
/// newlines, and lines indented further (or next to them) keep their breaks.
fn fold_lines(lines: &[String]) -> String {
    let mut out = String::new();
    let mut previous_more_indented = false;
    let mut empties = 0;
    for (n, line) in lines.iter().enumerate() {
        if line.is_empty() {
            empties += 1;
            continue;
        }
        let more_indented = line.starts_with(' ') || line.starts_with('\t');
        if n > 0 {
            if empties == 0 {
                out.push(if more_indented || previous_more_indented {
                    '\n'
                } else {
                    ' '
                });
            } else {
                let extra = usize::from(more_indented || previous_more_indented);
                out.push_str(&"\n".repeat(empties + extra));
            }
        } else {
            out.push_str(&"\n".repeat(empties));
        }
        empties = 0;
        out.push_str(line);
        previous_more_indented = more_indented;
    }
    out
}

/// A plain (unquoted) scalar, possibly continued on more deeply indented lines.
fn plain_scalar(
    lines: &[&str],
    index: usize,
    base: usize,
    first: &str,
) -> Result<(YamlValue, usize), FrontmatterError> {
    let first_text = strip_comment(first);
    let had_comment = first_text.len() != first.len();
    let first_text = first_text.trim_end_matches([' ', '\t']);
    if mapping_colon(first_text).is_some() {
        return Err(error(
            "Nested mappings are not allowed in compact mappings",
            index,
        ));
    }
    let mut value = first_text.to_string();
    let mut k = index + 1;
    let mut empties = 0;
    if !had_comment {
        while k < lines.len() {
            let line = lines[k];
            if line.trim_matches([' ', '\t']).is_empty() {
                empties += 1;
                k += 1;
                continue;
            }
            if indent_of(line) <= base {
                break;
            }
            let text = line.trim_matches([' ', '\t']);
            if text.starts_with('#') {
                // A comment ends the scalar; anything indented after it is an error in YAML.
                if let Some(j) = next_content_line(lines, k)
                    && indent_of(lines[j]) > base
                {
                    return Err(error("All mapping items must start at the same column", j));
                }
                break;
            }
            let text = strip_comment(text).trim_end_matches([' ', '\t']);
            if mapping_colon(text).is_some() {
                return Err(error(
                    "Nested mappings are not allowed in compact mappings",
                    index,
                ));
            }
            if empties == 0 {
                value.push(' ');
            } else {
                value.push_str(&"\n".repeat(empties));
            }
            empties = 0;
            value.push_str(text);
            k += 1;
        }
    }
    // Blank lines after the scalar belong to nobody; the caller resumes at the next content.
    let next = if empties > 0 { k } else { k.max(index + 1) };
    Ok((resolve_plain(value), next))
}

/// YAML 1.2 core schema resolution of a plain scalar.
fn resolve_plain(text: String) -> YamlValue {
    match text.as_str() {
        "" | "~" | "null" | "Null" | "NULL" => return YamlValue::Null,
        "true" | "True" | "TRUE" => return YamlValue::Bool(true),
        "false" | "False" | "FALSE" => return YamlValue::Bool(false),
        _ => {}
    }
    if is_yaml_number(&text) {
        YamlValue::Number(text)
    } else {
        YamlValue::String(text)
    }
}

fn is_yaml_number(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        ".inf" | "+.inf" | "-.inf" | ".nan" | "+.nan" | "-.nan"
    ) {
        return true;
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit());
    }
    if let Some(oct) = text.strip_prefix("0o") {
        return !oct.is_empty() && oct.chars().all(|c| ('0'..='7').contains(&c));
    }
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(e) => (&unsigned[..e], Some(&unsigned[e + 1..])),
        None => (unsigned, None),
    };
    let (int_part, frac_part) = match mantissa.find('.') {
        Some(dot) => (&mantissa[..dot], Some(&mantissa[dot + 1..])),
        None => (mantissa, None),
    };
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = match frac_part {
        None => !int_part.is_empty() && digits(int_part),
        Some(frac) => digits(int_part) && digits(frac) && !(int_part.is_empty() && frac.is_empty()),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fm(yaml: &str) -> Result<Frontmatter, FrontmatterError> {
        parse_frontmatter(&format!("---\n{yaml}\n---\nbody")).map(|p| p.frontmatter)
    }

    fn desc(yaml: &str) -> Option<YamlValue> {
        fm(yaml).unwrap().get("description").cloned()
    }

    fn s(text: &str) -> Option<YamlValue> {
        Some(YamlValue::String(text.to_string()))
    }

    #[test]
    fn body_is_trimmed_after_frontmatter_and_whole_without_it() {
        let parsed = parse_frontmatter("---\r\nname: x\r\n---\r\n\r\n  Body\r\n\n").unwrap();
        assert_eq!(parsed.body, "Body");
        assert_eq!(parsed.frontmatter.string("name"), Some("x"));
        let plain = parse_frontmatter("  no frontmatter\r\nline\r\n").unwrap();
        assert_eq!(plain.body, "  no frontmatter\nline\n");
        let unclosed = parse_frontmatter("---\nname: x\nbody").unwrap();
        assert_eq!(unclosed.body, "---\nname: x\nbody");
        assert!(unclosed.frontmatter.entries.is_empty());
        let empty = parse_frontmatter("---\n---\n text ").unwrap();
        assert_eq!(empty.body, "text");
        // Whatever follows the closing marker on its line is body.
        assert_eq!(
            parse_frontmatter("---\na: 1\n----x\ny").unwrap().body,
            "-x\ny"
        );
        assert_eq!(js_trim("\u{feff} a \u{a0}"), "a");
    }

    #[test]
    fn plain_scalars_comments_and_types() {
        assert_eq!(desc("description: foo # bar"), s("foo"));
        assert_eq!(desc("description: foo\t# c"), s("foo"));
        assert_eq!(desc("description: a#b"), s("a#b"));
        assert_eq!(desc("description: foo:bar"), s("foo:bar"));
        assert_eq!(desc("description:   spaced  "), s("spaced"));
        assert_eq!(
            desc("description: plain\n  continued\n  more"),
            s("plain continued more")
        );
        assert_eq!(desc("description: foo\n\n  bar\n"), s("foo\nbar"));
        assert_eq!(
            desc("description:\n  indented on next"),
            s("indented on next")
        );
        assert_eq!(
            desc("description: 42"),
            Some(YamlValue::Number("42".into()))
        );
        assert_eq!(desc("description: 12abc"), s("12abc"));
        assert_eq!(
            desc("description: 1e3"),
            Some(YamlValue::Number("1e3".into()))
        );
        assert_eq!(desc("description: ~"), Some(YamlValue::Null));
        assert_eq!(desc("description:"), Some(YamlValue::Null));
        assert_eq!(desc("description: &a foo"), s("foo"));
        assert_eq!(desc("description: [a, b]"), Some(YamlValue::Other));
        let f = fm("disable-model-invocation: True\nother: yes").unwrap();
        assert!(f.is_true("disable-model-invocation"));
        assert!(!f.is_true("other"));
        assert_eq!(f.string("other"), Some("yes"));
    }

    #[test]
    fn quoted_scalars() {
        assert_eq!(desc("description: 'it''s'"), s("it's"));
        assert_eq!(desc("description: \"a\\tb\\u0041\""), s("a\tbA"));
        assert_eq!(desc("description: \"multi\n  line\""), s("multi line"));
        assert_eq!(desc("description: \"a\\\n  b\""), s("ab"));
        assert_eq!(desc("description: \"a  \n\n  b\""), s("a\nb"));
        assert_eq!(desc("description: 'a\n\n  b'"), s("a\nb"));
        assert_eq!(desc("description: \"x\" # c"), s("x"));
        assert_eq!(desc("description: ''"), s(""));
        assert_eq!(desc("description: \"true\""), s("true"));
        let f = fm("\"quoted key\": v").unwrap();
        assert_eq!(f.string("quoted key"), Some("v"));
    }

    #[test]
    fn block_scalars() {
        assert_eq!(
            desc("description: >\n  line one\n  line two\n\n  para\nname: x"),
            s("line one line two\npara\n")
        );
        assert_eq!(
            desc("description: |\n  line one\n  line two\n"),
            s("line one\nline two\n")
        );
        assert_eq!(desc("description: |-\n  a\n  b\n\n"), s("a\nb"));
        assert_eq!(desc("description: >\n  a\n    b\n  c\n"), s("a\n  b\nc\n"));
        assert_eq!(desc("description: >+\n  a\n\n\nname: n"), s("a\n\n\n"));
        assert_eq!(desc("description: >-\n  a\n  b\n"), s("a b"));
        assert_eq!(desc("description: |2\n    a\n  b\n"), s("  a\nb\n"));
        assert_eq!(desc("description: |\n\n  a\n"), s("\na\n"));
        assert_eq!(desc("description: >\n  a\n\n\n  b\n\n"), s("a\n\nb\n"));
        assert_eq!(desc("description: >\n"), s(""));
        assert_eq!(desc("description: >+\n"), s(""));
        let f = fm("description: |\nname: x").unwrap();
        assert_eq!(f.string("description"), Some(""));
        assert_eq!(f.string("name"), Some("x"));
    }

    #[test]
    fn nested_values_are_skipped() {
        let f = fm("tags:\n  - a\n  - b\ndescription: d").unwrap();
        assert_eq!(f.get("tags"), Some(&YamlValue::Other));
        assert_eq!(f.string("description"), Some("d"));
        let f = fm("meta:\n  k: v\ndescription: d").unwrap();
        assert_eq!(f.string("description"), Some("d"));
        let f = fm("list:\n- a\n- b\ndescription: d").unwrap();
        assert_eq!(f.string("description"), Some("d"));
        let f = fm("description: x\n# comment\nname: y").unwrap();
        assert_eq!(f.string("name"), Some("y"));
        let f = fm("  description: x\n  name: y").unwrap();
        assert_eq!(f.string("name"), Some("y"));
        assert!(fm("hello").unwrap().entries.is_empty());
        assert!(fm("- a").unwrap().entries.is_empty());
    }

    #[test]
    fn inputs_pi_rejects_are_errors() {
        for bad in [
            "description: Use when: x",
            "description: foo:",
            "description: foo\n  bar: baz",
            "a: 1\na: 2",
            "description: \"unterminated",
            "\tdescription: x",
            "name: \"x\" trailing",
            "description: 'a' extra",
            "description: 'x'\n  more",
            "description: @foo",
            "description: - x",
            "hello\nname: x",
            "description: foo\n  # c\n  bar",
            "description: >\n    deeper\n  less",
        ] {
            assert!(fm(bad).is_err(), "{bad:?} should be rejected");
        }
    }
    /// Arbitrary mixes of YAML-ish fragments (with multi-byte text) never panic.
    #[test]
    fn odd_inputs_never_panic() {
        let fragments = [
            "---",
            "\n",
            "description:",
            " ",
            "\t",
            "\"",
            "'",
            "\\",
            "|",
            ">",
            "-",
            "+",
            "2",
            "#",
            ":",
            "é",
            "😀",
            "  ",
            "key",
            "[",
            "{",
            "}",
            "]",
            "&a",
            "!t",
            "*x",
            "\r\n",
            "...",
            "\\u00",
            "''",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..4000 {
            let mut text = String::from("---\n");
            let len = (seed % 24) as usize;
            for _ in 0..len {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push_str(fragments[(seed >> 33) as usize % fragments.len()]);
            }
            text.push_str("\n---\nbody");
            let _ = parse_frontmatter(&text);
            let _ = parse_frontmatter(&text[4..]);
        }
    }
}
