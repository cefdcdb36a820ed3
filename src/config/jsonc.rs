//! A tolerant pre-pass that turns "JSON with comments" (models.json) into strict JSON: it drops
//! `// …` line comments and `/* … */` block comments and removes commas that directly precede a
//! closing `}` or `]`. String literals are copied untouched, escapes included. The output is then
//! parsed by serde_json as usual, so syntax errors still surface with a line/column.
//!
//! Comments are replaced by spaces (newlines kept) so error positions keep pointing at the
//! original line. An unterminated block comment or string simply runs to the end of the input;
//! the JSON parser then reports the problem.

/// Strips comments and trailing commas, leaving string literals as they were.
pub fn strip_jsonc(input: &str) -> String {
    let bytes = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    // Index into `out` of a comma that may turn out to be trailing; it is blanked if the next
    // significant byte closes an object or array.
    let mut pending_comma: Option<usize> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                pending_comma = None;
                let start = i;
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' => i += 2,
                        b'"' => {
                            i += 1;
                            break;
                        }
                        _ => i += 1,
                    }
                }
                let end = i.min(bytes.len());
                out.extend_from_slice(&bytes[start..end]);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                out.extend_from_slice(b"  ");
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    out.push(if bytes[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
                if i < bytes.len() {
                    out.extend_from_slice(b"  ");
                    i += 2;
                }
                continue;
            }
            b',' => {
                pending_comma = Some(out.len());
                out.push(b',');
            }
            b'}' | b']' => {
                if let Some(at) = pending_comma.take() {
                    out[at] = b' ';
                }
                out.push(b);
            }
            b' ' | b'\t' | b'\r' | b'\n' => out.push(b),
            _ => {
                pending_comma = None;
                out.push(b);
            }
        }
        i += 1;
    }
    // Only ASCII bytes were replaced and string/comment boundaries are ASCII, so the bytes stay
    // valid UTF-8; the lossy conversion is a belt-and-braces fallback that never triggers.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn parse(s: &str) -> Value {
        serde_json::from_str(&strip_jsonc(s)).unwrap()
    }

    #[test]
    fn removes_line_and_block_comments() {
        let v = parse("{\n // hi\n \"a\": 1, /* two\n lines */ \"b\": 2 // end\n}");
        assert_eq!(v, json!({"a": 1, "b": 2}));
    }

    #[test]
    fn keeps_comment_markers_and_escapes_inside_strings() {
        let v = parse(r#"{"url": "http://x/*y*/", "q": "say \"//no\"", "c": "a,]"}"#);
        assert_eq!(
            v,
            json!({"url": "http://x/*y*/", "q": "say \"//no\"", "c": "a,]"})
        );
    }

    #[test]
    fn drops_trailing_commas_even_across_comments() {
        let v = parse("{\"a\": [1, 2, ], \"b\": {\"c\": 3,\n // x\n },\n}");
        assert_eq!(v, json!({"a": [1, 2], "b": {"c": 3}}));
    }

    #[test]
    fn keeps_line_numbers_for_errors() {
        let stripped = strip_jsonc("{\n/* a\nb */\n\"x\": }");
        let err = serde_json::from_str::<Value>(&stripped).unwrap_err();
        assert_eq!(err.line(), 4);
    }

    #[test]
    fn unterminated_input_is_left_to_the_parser() {
        assert!(serde_json::from_str::<Value>(&strip_jsonc("{\"a\": \"x")).is_err());
        assert!(serde_json::from_str::<Value>(&strip_jsonc("{\"a\": 1 /* x")).is_err());
        // A lone escape at the very end must not index past the input.
        let _ = strip_jsonc("\"\\");
    }
}
