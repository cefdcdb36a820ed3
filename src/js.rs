//! JavaScript semantics pi's outputs depend on, in one place: how JSON.stringify and `String()`
//! print numbers and values, `Number(text)`, `String.prototype.trim`'s whitespace, string length
//! and default sort order in UTF-16 code units. Records, session files and tool texts must match
//! pi's bytes, so these are exact where pi's values reach them.

use std::cmp::Ordering;

use serde_json::{Number, Value};

/// Serializes a float the way JavaScript's JSON.stringify does for the values we meet: integral
/// values without a fraction (`3`, not `3.0`), so records and session files match pi's bytes.
pub fn js_number<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        s.serialize_i64(*v as i64)
    } else if v.is_finite() {
        s.serialize_f64(*v)
    } else {
        s.serialize_none()
    }
}

/// A JSON number for an f64, written as an integer when it is one (JSON.stringify does the same).
pub fn number_value(number: f64) -> Value {
    if number.fract() == 0.0 && number.abs() < 9_007_199_254_740_992.0 {
        Value::from(number as i64)
    } else {
        Number::from_f64(number)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

/// JS `String(number)` for the common cases (integers and plain decimals).
pub fn js_number_string(number: f64) -> String {
    if number.fract() == 0.0 && number.abs() < 1e21 {
        format!("{}", number as i128)
    } else {
        format!("{number}")
    }
}

pub fn is_js_whitespace(ch: char) -> bool {
    matches!(
        ch,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// JS `Number(text)`: whitespace-trimmed, empty → 0, 0x/0o/0b literals, decimal with exponent,
/// `Infinity`. `None` stands for NaN.
pub fn js_to_number(text: &str) -> Option<f64> {
    let trimmed = text.trim_matches(is_js_whitespace);
    if trimmed.is_empty() {
        return Some(0.0);
    }
    let radix_prefix = trimmed.get(..2).map(str::to_ascii_lowercase);
    let radix = match radix_prefix.as_deref() {
        Some("0x") => Some(16),
        Some("0o") => Some(8),
        Some("0b") => Some(2),
        _ => None,
    };
    if let Some(radix) = radix {
        let digits = &trimmed[2..];
        if digits.is_empty() {
            return None;
        }
        let mut value = 0f64;
        for ch in digits.chars() {
            value = value * f64::from(radix) + f64::from(ch.to_digit(radix)?);
        }
        return Some(value);
    }
    let unsigned = trimmed.strip_prefix(['+', '-']).unwrap_or(trimmed);
    if unsigned == "Infinity" {
        return Some(if trimmed.starts_with('-') {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    // Rust's float parser also takes "inf"/"nan"; JS only takes digits, '.', and an exponent.
    let valid = unsigned
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
        && unsigned
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'.');
    if !valid {
        return None;
    }
    trimmed.parse::<f64>().ok()
}

/// JavaScript's `String.prototype.trim`: its whitespace set differs from Rust's (it includes the
/// BOM and excludes U+0085), and the body texts must match pi's byte for byte.
pub fn js_trim(text: &str) -> &str {
    text.trim_matches(is_js_whitespace)
}

/// Length of a string as JavaScript counts it.
pub fn js_len(text: &str) -> u64 {
    text.encode_utf16().count() as u64
}

/// JavaScript's default sort order: by UTF-16 code units.
pub fn js_compare(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// JavaScript's `String(value)` for a JSON value (`undefined` when missing).
pub fn js_string(value: Option<&Value>) -> String {
    match value {
        None => "undefined".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) => "null".into(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::Null => String::new(),
                other => js_string(Some(other)),
            })
            .collect::<Vec<_>>()
            .join(","),
        Some(Value::Object(_)) => "[object Object]".into(),
        Some(other) => other.to_string(),
    }
}

/// JavaScript truthiness of a parsed JSON value.
pub fn js_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn js_number_parsing() {
        assert_eq!(js_to_number("  12.5e1 "), Some(125.0));
        assert_eq!(js_to_number("-0x10"), None);
        assert_eq!(js_to_number("1_0"), None);
        assert_eq!(js_to_number("inf"), None);
        assert_eq!(js_to_number(".5"), Some(0.5));
        assert_eq!(js_number_string(3.5), "3.5");
        assert_eq!(js_number_string(2.0), "2");
    }

    #[test]
    fn values_print_as_javascript_prints_them() {
        assert_eq!(number_value(3.0), serde_json::json!(3));
        assert_eq!(number_value(f64::NAN), Value::Null);
        assert_eq!(js_string(None), "undefined");
        assert_eq!(js_string(Some(&serde_json::json!([1, null, "a"]))), "1,,a");
        assert_eq!(
            js_string(Some(&serde_json::json!({"a": 1}))),
            "[object Object]"
        );
        assert_eq!(js_trim("\u{feff} x\u{a0}"), "x");
        assert_eq!(js_len("é😀"), 3);
        assert_eq!(js_compare("\u{ff61}", "😀"), Ordering::Greater);
    }
}
