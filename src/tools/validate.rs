//! Argument checking for tool calls: the JSON Schemas we advertise, TypeBox-style coercion of the
//! model's arguments (numbers sent as strings and the like), and validation whose error lines match
//! the reference's `Validation failed for tool …` text.
//!
//! Input: a tool name and raw JSON arguments. Output: the coerced arguments or the full error text.
//! Only the schema subset the built-in tools use is supported: object/array/string/number/boolean,
//! `properties`, `required`, `items`, `additionalProperties: false`.

use serde_json::{Map, Value};

use crate::js::{js_number_string, js_to_number, number_value};

/// Converts `value` towards `schema` the way TypeBox's `Value.Convert` does.
pub fn coerce(value: Value, schema: &Value) -> Value {
    match schema_type(schema) {
        "object" => match value {
            Value::Object(mut map) => {
                if let Some(Value::Object(properties)) = schema.get("properties") {
                    for (key, property) in properties {
                        if let Some(slot) = map.get_mut(key) {
                            let current = std::mem::take(slot);
                            *slot = coerce(current, property);
                        }
                    }
                }
                Value::Object(map)
            }
            other => other,
        },
        "array" => {
            // TypeBox wraps a non-array into a one-element array.
            let items = match value {
                Value::Array(items) => items,
                other => vec![other],
            };
            let item_schema = schema.get("items").cloned().unwrap_or(Value::Null);
            Value::Array(
                items
                    .into_iter()
                    .map(|item| coerce(item, &item_schema))
                    .collect(),
            )
        }
        "string" => match value {
            Value::Null => Value::from("null"),
            Value::Bool(b) => Value::from(b.to_string()),
            Value::Number(n) => Value::from(js_number_string(n.as_f64().unwrap_or(0.0))),
            other => other,
        },
        "number" => match &value {
            Value::Null => Value::from(0),
            Value::Bool(b) => Value::from(u8::from(*b)),
            Value::String(text) => match string_to_number(text) {
                Some(number) => number_value(number),
                None => value,
            },
            _ => value,
        },
        "boolean" => match &value {
            Value::Null => Value::Bool(false),
            Value::Number(n) if n.as_f64() == Some(0.0) => Value::Bool(false),
            Value::Number(n) if n.as_f64() == Some(1.0) => Value::Bool(true),
            Value::String(text) => {
                let lower = text.to_lowercase();
                if lower == "false" || text == "0" {
                    Value::Bool(false)
                } else if lower == "true" || text == "1" {
                    Value::Bool(true)
                } else {
                    value
                }
            }
            _ => value,
        },
        _ => value,
    }
}

fn schema_type(schema: &Value) -> &str {
    schema.get("type").and_then(Value::as_str).unwrap_or("")
}

/// TypeBox's string→number conversion: JS `+text` when finite, then `true`/`false`, then `<int>n`.
fn string_to_number(text: &str) -> Option<f64> {
    if let Some(number) = js_to_number(text).filter(|n| n.is_finite()) {
        return Some(number);
    }
    match text.to_lowercase().as_str() {
        "false" => return Some(0.0),
        "true" => return Some(1.0),
        _ => {}
    }
    let digits = text.strip_suffix('n')?;
    let unsigned = digits.strip_prefix('-').unwrap_or(digits);
    let canonical = unsigned == "0" || (!unsigned.starts_with('0') && !unsigned.is_empty());
    if canonical && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        let value: f64 = digits.parse().ok()?;
        if value.abs() <= 9_007_199_254_740_991.0 {
            return Some(value);
        }
    }
    None
}

/// Validates already-coerced arguments; returns the error lines (`  - path: message`), in
/// TypeBox's order: required, additional properties, then each property in schema order.
pub fn check(value: &Value, schema: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check_at(value, schema, &mut Vec::new(), &mut errors);
    errors
}

fn display_path(segments: &[String]) -> String {
    if segments.is_empty() {
        "root".to_string()
    } else {
        segments.join(".")
    }
}

fn check_at(value: &Value, schema: &Value, path: &mut Vec<String>, errors: &mut Vec<String>) {
    let fail = |errors: &mut Vec<String>, path: &[String], message: &str| {
        errors.push(format!("  - {}: {}", display_path(path), message));
    };
    match schema_type(schema) {
        "object" => {
            let Value::Object(map) = value else {
                fail(errors, path, "must be object");
                return;
            };
            check_object(map, schema, path, errors);
        }
        "array" => {
            let Value::Array(items) = value else {
                fail(errors, path, "must be array");
                return;
            };
            let item_schema = schema.get("items").cloned().unwrap_or(Value::Null);
            for (index, item) in items.iter().enumerate() {
                path.push(index.to_string());
                check_at(item, &item_schema, path, errors);
                path.pop();
            }
        }
        "string" if !value.is_string() => fail(errors, path, "must be string"),
        "number" if !value.as_f64().is_some_and(f64::is_finite) || !value.is_number() => {
            fail(errors, path, "must be number")
        }
        "boolean" if !value.is_boolean() => fail(errors, path, "must be boolean"),
        _ => {}
    }
}

fn check_object(
    map: &Map<String, Value>,
    schema: &Value,
    path: &mut Vec<String>,
    errors: &mut Vec<String>,
) {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|key| !map.contains_key(*key))
        .collect();
    if let Some(first) = missing.first() {
        path.push((*first).to_string());
        errors.push(format!(
            "  - {}: must have required properties {}",
            display_path(path),
            missing.join(", ")
        ));
        path.pop();
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        let extra: Vec<&String> = map
            .keys()
            .filter(|key| !properties.contains_key(*key))
            .collect();
        for key in &extra {
            path.push((*key).clone());
            errors.push(format!("  - {}: schema is false", display_path(path)));
            path.pop();
        }
        if !extra.is_empty() {
            errors.push(format!(
                "  - {}: must not have additional properties",
                display_path(path)
            ));
        }
    }
    for (key, property) in properties {
        if let Some(child) = map.get(key) {
            path.push(key.clone());
            check_at(child, property, path, errors);
            path.pop();
        }
    }
}

/// Coerces and validates `arguments` for tool `name` against `schema`.
/// On failure returns the reference's full message, which quotes the arguments as received.
pub fn validate_arguments(name: &str, schema: &Value, arguments: &Value) -> Result<Value, String> {
    let coerced = coerce(arguments.clone(), schema);
    let errors = check(&coerced, schema);
    if errors.is_empty() {
        return Ok(coerced);
    }
    let received = serde_json::to_string_pretty(arguments).unwrap_or_else(|_| "null".to_string());
    Err(format!(
        "Validation failed for tool \"{name}\":\n{}\n\nReceived arguments:\n{received}",
        errors.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read_schema() -> Value {
        json!({"type":"object","required":["path"],"properties":{
            "path":{"type":"string"},"offset":{"type":"number"},"limit":{"type":"number"}}})
    }

    fn edit_schema() -> Value {
        json!({"type":"object","required":["path","edits"],"properties":{
            "path":{"type":"string"},
            "edits":{"type":"array","items":{"type":"object","required":["oldText","newText"],"properties":{
                "oldText":{"type":"string"},"newText":{"type":"string"}},"additionalProperties":false}}},
            "additionalProperties":false})
    }

    // Expected texts below were produced by the reference's validateToolArguments (node probe).
    #[test]
    fn missing_required() {
        let err = validate_arguments("read", &read_schema(), &json!({})).unwrap_err();
        assert_eq!(
            err,
            "Validation failed for tool \"read\":\n  - path: must have required properties path\n\nReceived arguments:\n{}"
        );
    }

    #[test]
    fn coercion_of_strings_and_nulls() {
        let ok = validate_arguments(
            "read",
            &read_schema(),
            &json!({"path":1,"offset":" 5 ","limit":"1e3"}),
        )
        .unwrap();
        assert_eq!(ok, json!({"path":"1","offset":5,"limit":1000}));
        let ok = validate_arguments(
            "read",
            &read_schema(),
            &json!({"path":null,"offset":true,"limit":""}),
        )
        .unwrap();
        assert_eq!(ok, json!({"path":"null","offset":1,"limit":0}));
        let ok = validate_arguments(
            "read",
            &read_schema(),
            &json!({"path":"a","offset":"5n","limit":"0x10"}),
        )
        .unwrap();
        assert_eq!(ok, json!({"path":"a","offset":5,"limit":16}));
        let schema = json!({"type":"object","properties":{"b":{"type":"boolean"}}});
        assert_eq!(coerce(json!({"b":"TRUE"}), &schema), json!({"b":true}));
        assert_eq!(coerce(json!({"b":"0"}), &schema), json!({"b":false}));
        assert_eq!(coerce(json!({"b":"yes"}), &schema), json!({"b":"yes"}));
    }

    #[test]
    fn type_errors_in_schema_order() {
        let err = validate_arguments(
            "read",
            &read_schema(),
            &json!({"offset":"x","path":{},"limit":"Infinity"}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "Validation failed for tool \"read\":\n  - path: must be string\n  - offset: must be number\n  - limit: must be number\n\nReceived arguments:\n{\n  \"offset\": \"x\",\n  \"path\": {},\n  \"limit\": \"Infinity\"\n}"
        );
        let err = validate_arguments("read", &read_schema(), &json!(null)).unwrap_err();
        assert_eq!(
            err,
            "Validation failed for tool \"read\":\n  - root: must be object\n\nReceived arguments:\nnull"
        );
    }

    #[test]
    fn nested_and_additional_properties() {
        let args = json!({"zz":1,"edits":[{"newText":1,"oldText":"a","q":2},{"oldText":[]}]});
        let err = validate_arguments("edit", &edit_schema(), &args).unwrap_err();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(
            &lines[1..8],
            [
                "  - path: must have required properties path",
                "  - zz: schema is false",
                "  - root: must not have additional properties",
                "  - edits.0.q: schema is false",
                "  - edits.0: must not have additional properties",
                "  - edits.1.newText: must have required properties newText",
                "  - edits.1.oldText: must be string",
            ]
        );
        let err = validate_arguments("edit", &edit_schema(), &json!({"path":"a","edits":"5"}))
            .unwrap_err();
        assert!(err.contains("  - edits.0: must be object\n"));
        let err = validate_arguments("edit", &edit_schema(), &json!({"path":"a","edits":{}}))
            .unwrap_err();
        assert!(
            err.contains("  - edits.0.oldText: must have required properties oldText, newText\n")
        );
    }
}
