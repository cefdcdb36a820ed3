//! Streamed tool-call arguments: pi-ai's `parseJsonWithRepair` (a JSON text with raw control
//! characters or invalid escapes inside strings, repaired and parsed again) and
//! `parseStreamingJson` (a document cut off mid-way, closed at its last complete value). Pure.

use serde_json::Value;

/// `JSON.parse`, retried once on a repaired copy (raw control characters inside strings escaped,
/// invalid escapes doubled) as pi-ai's `parseJsonWithRepair` does.
pub(crate) fn parse_json_with_repair(text: &str) -> Result<Value, serde_json::Error> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(e) => {
            let repaired = repair_json(text);
            if repaired != text {
                serde_json::from_str(&repaired)
            } else {
                Err(e)
            }
        }
    }
}

fn repair_json(json: &str) -> String {
    let chars: Vec<char> = json.chars().collect();
    let mut out = String::with_capacity(json.len());
    let mut in_string = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if !in_string {
            out.push(c);
            in_string = c == '"';
            i += 1;
            continue;
        }
        match c {
            '"' => {
                out.push(c);
                in_string = false;
            }
            '\\' => match chars.get(i + 1) {
                None => out.push_str("\\\\"),
                Some('u')
                    if chars.len() >= i + 6
                        && chars[i + 2..i + 6].iter().all(char::is_ascii_hexdigit) =>
                {
                    out.extend(&chars[i..i + 6]);
                    i += 5;
                }
                Some(&next) if "\"\\/bfnrtu".contains(next) => {
                    out.push('\\');
                    out.push(next);
                    i += 1;
                }
                Some(_) => out.push_str("\\\\"),
            },
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// Tool-call arguments from streamed JSON, as pi-ai's `parseStreamingJson`: empty → `{}`;
/// complete (possibly repaired) JSON as is; a truncated document is closed at its last complete
/// value; anything else → `{}`.
pub fn parse_tool_arguments(partial_json: &str) -> Value {
    if partial_json.trim().is_empty() {
        return Value::Object(Default::default());
    }
    if let Ok(v) = parse_json_with_repair(partial_json) {
        return v;
    }
    close_partial_json(&repair_json(partial_json))
        .unwrap_or_else(|| Value::Object(Default::default()))
}

/// Best effort for a document cut off mid-way: cut back to the last point where a value ended
/// and close what is open.
fn close_partial_json(text: &str) -> Option<Value> {
    // Positions (byte offsets) after which the prefix is a sequence of complete members, with the
    // stack of open containers at that point.
    let mut cut_points: Vec<(usize, Vec<char>)> = Vec::new();
    let mut stack: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (pos, c) in text.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => {
                stack.push(if c == '{' { '}' } else { ']' });
                cut_points.push((pos + 1, stack.clone()));
            }
            '}' | ']' => {
                stack.pop();
                cut_points.push((pos + 1, stack.clone()));
            }
            ',' => cut_points.push((pos, stack.clone())),
            _ => {}
        }
    }
    // Try the whole text first (a truncated string or number may still close cleanly).
    let mut whole = text.to_string();
    if in_string {
        if escaped {
            whole.pop();
        }
        whole.push('"');
    }
    let closing: String = stack.iter().rev().collect();
    if let Ok(v) = serde_json::from_str::<Value>(&format!("{whole}{closing}")) {
        return Some(v);
    }
    for (pos, open) in cut_points.iter().rev() {
        let closing: String = open.iter().rev().collect();
        if let Ok(v) = serde_json::from_str::<Value>(&format!("{}{closing}", &text[..*pos])) {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_arguments_parse_like_pi() {
        assert_eq!(parse_tool_arguments(""), json!({}));
        assert_eq!(parse_tool_arguments(r#"{"a":1}"#), json!({"a":1}));
        assert_eq!(
            parse_tool_arguments("{\"a\":\"x\ny\"}"),
            json!({"a":"x\ny"})
        );
        assert_eq!(
            parse_tool_arguments(r#"{"a":"C:\d"}"#),
            json!({"a":"C:\\d"})
        );
        assert_eq!(
            parse_tool_arguments(r#"{"path":"a.t"#),
            json!({"path":"a.t"})
        );
        assert_eq!(parse_tool_arguments(r#"{"a":1,"b":"#), json!({"a":1}));
        assert_eq!(parse_tool_arguments(r#"{"a":[1,2"#), json!({"a":[1,2]}));
        assert_eq!(parse_tool_arguments("nonsense"), json!({}));
    }
}
