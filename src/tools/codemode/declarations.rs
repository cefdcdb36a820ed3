//! TypeScript declarations of the tools a script calls, generated from their JSON Schemas as pi
//! 1.6.0 renders them (`@earendil-works/pi-codemode` declarations): a tool is
//! `name(args: T): Promise<R>;`, a schema becomes a type expression (objects with their
//! properties sorted by name, on one line, or one property a line with `//` comments when a
//! property has a description or constraints the type cannot express), local `$ref`s resolve.
//! Also the one-line "what a call resolves to" of a declared tool's description.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

const INDENT: &str = "  ";
/// Largest rendered input type, in characters (UTF-16 units), before it becomes `unknown`.
const INPUT_SCHEMA_MAX_CHARS: usize = 16_000;
/// Local `$ref` expansions per rendered schema.
const MAX_REF_EXPANSIONS: usize = 32;
/// Keywords shown as `@keyword value` property tags.
const TAG_KEYWORDS: [&str; 11] = [
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minItems",
    "maxItems",
];
const LOWER_BOUNDS: [&str; 4] = ["minimum", "exclusiveMinimum", "minLength", "minItems"];
const UPPER_BOUNDS: [&str; 4] = ["maximum", "exclusiveMaximum", "maxLength", "maxItems"];
/// Longest property tag; longer ones are left out.
const MAX_TAG_CHARS: usize = 80;

/// What a call of a tool without an output schema resolves to: its text.
pub fn text_output_schema() -> Value {
    json!({"type": "string"})
}

/// The output schema of `bash` for scripts (pi 1.6.0's).
pub fn bash_output_schema() -> Value {
    json!({"type": "object", "required": ["output", "truncated", "exit_code", "wall_time_seconds"], "properties": {
        "output": {"type": "string", "description": "Combined stdout and stderr, possibly truncated"},
        "truncated": {"type": "boolean"},
        "full_output_path": {"type": "string", "description": "Full output, when truncated"},
        "exit_code": {"type": "number"},
        "wall_time_seconds": {"type": "number"}}})
}

/// The output schema of `read` for scripts: the text, or an image block.
pub fn read_output_schema() -> Value {
    json!({"anyOf": [{"type": "string"}, {"type": "object", "required": ["type", "data", "mimeType", "note"], "properties": {
        "type": {"type": "string", "const": "image"},
        "data": {"type": "string"},
        "mimeType": {"type": "string"},
        "note": {"type": "string"}}}]})
}

/// The output schema of every MCP tool: its `CallToolResult`, with the tool's own output
/// schema as `structuredContent` (its local references moved below it).
pub fn mcp_result_schema(structured: Option<&Value>) -> Value {
    let structured = structured
        .map(|s| relocate(s, "#/properties/structuredContent"))
        .unwrap_or_else(|| json!({}));
    json!({"type": "object", "properties": {
        "content": {"type": "array", "items": {"type": "object", "properties": {
            "type": {"enum": ["text", "image", "audio", "resource_link", "resource"]},
            "text": {"type": "string"},
            "data": {"type": "string"},
            "mimeType": {"type": "string"}},
            "required": ["type"], "additionalProperties": true}},
        "structuredContent": structured,
        "isError": {"type": "boolean"}},
        "required": ["content"], "additionalProperties": true})
}

fn relocate(schema: &Value, pointer: &str) -> Value {
    const DATA: [&str; 4] = ["const", "enum", "default", "examples"];
    const MAPS: [&str; 6] = [
        "properties",
        "patternProperties",
        "dependentSchemas",
        "dependencies",
        "$defs",
        "definitions",
    ];
    match schema {
        Value::Array(items) => Value::Array(items.iter().map(|i| relocate(i, pointer)).collect()),
        Value::Object(fields) => {
            let mut out = Map::new();
            for (key, value) in fields {
                let moved = match (key.as_str(), value) {
                    ("$ref", Value::String(r)) if r == "#" || r.starts_with("#/") => {
                        Value::String(format!("{pointer}{}", &r[1..]))
                    }
                    (k, v) if DATA.contains(&k) => v.clone(),
                    (k, Value::Object(map)) if MAPS.contains(&k) => Value::Object(
                        map.iter()
                            .map(|(name, sub)| (name.clone(), relocate(sub, pointer)))
                            .collect(),
                    ),
                    (_, v) => relocate(v, pointer),
                };
                out.insert(key.clone(), moved);
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// `name(args: T): Promise<R>;` with the name scripts use; an input type over 16,000
/// characters renders as `unknown`.
pub fn tool_signature(name: &str, input: &Value, output: &Value) -> String {
    format!(
        "{}(args: {}): Promise<{}>;",
        super::identifier(name),
        schema_to_type(input, Some(INPUT_SCHEMA_MAX_CHARS)),
        schema_to_type(output, None)
    )
}

/// A tool's sample (the `codemode` listing, `ALL_TOOLS`, `describeTool()`): its description,
/// then its declaration in a `ts` fence.
pub fn tool_sample(name: &str, description: &str, input: &Value, output: &Value) -> String {
    format!(
        "{}\n\ncodemode tool declaration:\n```ts\ndeclare const tools: {{ {} }};\n```",
        description.trim(),
        tool_signature(name, input, output)
    )
}

fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// A JSON Schema as a TypeScript type expression; past `max_chars` it is rendered again
/// without constraint tags, and is `unknown` if still too long.
pub fn schema_to_type(schema: &Value, max_chars: Option<usize>) -> String {
    let render = |tags: bool| {
        let mut context = Context {
            root: schema,
            resolving: BTreeSet::new(),
            expansions: 0,
            tags,
        };
        to_type(schema, &mut context)
    };
    let typed = render(true);
    let Some(max) = max_chars else {
        return typed;
    };
    if utf16_len(&typed) <= max {
        return typed;
    }
    let untagged = render(false);
    if utf16_len(&untagged) <= max {
        untagged
    } else {
        "unknown".into()
    }
}

struct Context<'a> {
    root: &'a Value,
    resolving: BTreeSet<String>,
    expansions: usize,
    tags: bool,
}

/// The subschema a local `$ref` (`#`, `#/$defs/Item`) names in `root`; None for remote
/// references and references that name nothing.
pub fn resolve_ref<'a>(reference: &str, root: &'a Value) -> Option<&'a Value> {
    if reference != "#" && !reference.starts_with("#/") {
        return None;
    }
    let mut current = root;
    for segment in reference
        .get(2..)
        .unwrap_or("")
        .split('/')
        .filter(|s| !s.is_empty())
    {
        let decoded = percent_decode(segment)?;
        let key = decoded.replace("~1", "/").replace("~0", "~");
        current = current.as_object()?.get(&key)?;
    }
    match current {
        Value::Bool(_) | Value::Object(_) => Some(current),
        _ => None,
    }
}

/// `decodeURIComponent`: None for a malformed escape.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `JSON.stringify` of a value (compact).
fn js_json(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "unknown".into())
}

fn union(types: Vec<String>) -> String {
    let mut unique: Vec<String> = Vec::new();
    for t in types {
        if !unique.contains(&t) {
            unique.push(t);
        }
    }
    if unique.iter().any(|t| t == "unknown") {
        return "unknown".into();
    }
    if unique.is_empty() {
        "never".into()
    } else {
        unique.join(" | ")
    }
}

fn to_type(schema: &Value, context: &mut Context) -> String {
    let object = match schema {
        Value::Bool(true) => return "unknown".into(),
        Value::Bool(false) => return "never".into(),
        Value::Object(object) => object,
        _ => return "unknown".into(),
    };
    if let Some(Value::String(reference)) = object.get("$ref") {
        if context.resolving.contains(reference) || context.expansions >= MAX_REF_EXPANSIONS {
            return "unknown".into();
        }
        let root = context.root;
        let Some(target) = resolve_ref(reference, root) else {
            return "unknown".into();
        };
        context.expansions += 1;
        context.resolving.insert(reference.clone());
        let typed = to_type(target, context);
        context.resolving.remove(reference);
        return typed;
    }
    if let Some(constant) = object.get("const") {
        return js_json(constant);
    }
    if let Some(Value::Array(values)) = object.get("enum") {
        return union(values.iter().map(js_json).collect());
    }
    let variants = match (object.get("anyOf"), object.get("oneOf")) {
        (Some(Value::Array(v)), _) | (_, Some(Value::Array(v))) => Some(v),
        _ => None,
    };
    if let Some(variants) = variants {
        return union(variants.iter().map(|v| to_type(v, context)).collect());
    }
    if let Some(Value::Array(parts)) = object.get("allOf") {
        let parts: Vec<String> = parts
            .iter()
            .map(|p| to_type(p, context))
            .filter(|p| p != "unknown")
            .collect();
        if parts.is_empty() {
            return "unknown".into();
        }
        return parts
            .iter()
            .map(|p| match p.contains(" | ") {
                true => format!("({p})"),
                false => p.clone(),
            })
            .collect::<Vec<_>>()
            .join(" & ");
    }
    match object.get("type") {
        Some(Value::Array(types)) => {
            let types = types.clone();
            union(
                types
                    .into_iter()
                    .map(|entry| {
                        let mut single = object.clone();
                        single.insert("type".into(), entry);
                        to_type(&Value::Object(single), context)
                    })
                    .collect(),
            )
        }
        Some(Value::String(t)) => match t.as_str() {
            "string" => "string".into(),
            "number" | "integer" => "number".into(),
            "boolean" => "boolean".into(),
            "null" => "null".into(),
            "array" => array_type(object, context),
            "object" => object_type(object, context),
            _ => "unknown".into(),
        },
        None => {
            if ["properties", "additionalProperties", "required"]
                .iter()
                .any(|k| object.contains_key(*k))
            {
                object_type(object, context)
            } else if object.contains_key("items") || object.contains_key("prefixItems") {
                array_type(object, context)
            } else {
                "unknown".into()
            }
        }
        Some(_) => "unknown".into(),
    }
}

fn array_type(schema: &Map<String, Value>, context: &mut Context) -> String {
    if let Some(items) = schema.get("items").filter(|i| !i.is_array()) {
        return format!("Array<{}>", to_type(items, context));
    }
    let tuple = match (schema.get("prefixItems"), schema.get("items")) {
        (Some(Value::Array(t)), _) | (_, Some(Value::Array(t))) => t.clone(),
        _ => Vec::new(),
    };
    if tuple.is_empty() {
        return "unknown[]".into();
    }
    let items: Vec<String> = tuple.iter().map(|i| to_type(i, context)).collect();
    format!("[{}]", items.join(", "))
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

fn property_key(name: &str) -> String {
    match is_identifier(name) {
        true => name.to_string(),
        false => js_json(&Value::String(name.to_string())),
    }
}

fn is_line_terminator(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{2028}' | '\u{2029}')
}

/// A number as JavaScript prints it (`1`, `0.5`).
fn js_number(value: &Value) -> Option<String> {
    let n = value.as_f64()?;
    Some(crate::js::js_number_string(n))
}

/// Constraints of a property its type cannot express: `@integer @minimum 1 @default 20`.
fn constraint_tags(schema: &Value) -> String {
    let Some(property) = schema.as_object() else {
        return String::new();
    };
    let variants = match property.get("anyOf") {
        Some(Value::Array(v)) => Some(v),
        _ => match property.get("oneOf") {
            Some(Value::Array(v)) => Some(v),
            _ => None,
        },
    };
    let non_null: Vec<&Value> = variants
        .map(|v| v.iter().filter(|v| v["type"] != "null").collect())
        .unwrap_or_default();
    let mut branches: Vec<Map<String, Value>> = vec![property.clone()];
    if non_null.len() == 1
        && let Some(branch) = non_null[0].as_object()
    {
        branches.push(branch.clone());
    }
    // Draft-04: a boolean `exclusiveMinimum` makes `minimum` exclusive.
    for branch in &mut branches {
        for (bound, exclusive) in [
            ("minimum", "exclusiveMinimum"),
            ("maximum", "exclusiveMaximum"),
        ] {
            if branch.get(exclusive) == Some(&Value::Bool(true)) {
                let value = branch.remove(bound).unwrap_or(Value::Null);
                branch.insert(exclusive.into(), value);
            }
        }
    }
    let mut tags: Vec<String> = Vec::new();
    let is_integer = |t: Option<&Value>| match t {
        Some(Value::String(s)) => s == "integer",
        Some(Value::Array(a)) => a.iter().any(|t| t == "integer"),
        _ => false,
    };
    if branches.iter().any(|b| is_integer(b.get("type"))) {
        tags.push("@integer".into());
    }
    for keyword in TAG_KEYWORDS {
        let values: Vec<&Value> = branches.iter().filter_map(|b| b.get(keyword)).collect();
        let lower = LOWER_BOUNDS.contains(&keyword);
        if lower || UPPER_BOUNDS.contains(&keyword) {
            let numbers: Vec<f64> = values.iter().filter_map(|v| v.as_f64()).collect();
            let bound = match lower {
                true => numbers.iter().copied().reduce(f64::max),
                false => numbers.iter().copied().reduce(f64::min),
            };
            if let Some(bound) = bound {
                tags.push(format!("@{keyword} {}", crate::js::js_number_string(bound)));
            }
            continue;
        }
        let mut seen: Vec<String> = Vec::new();
        for value in values {
            let shown = match value {
                Value::String(s) => Some(s.clone()),
                Value::Number(_) => js_number(value),
                _ => None,
            };
            if let Some(shown) = shown
                && !seen.contains(&shown)
            {
                tags.push(format!("@{keyword} {shown}"));
                seen.push(shown);
            }
        }
    }
    if branches
        .iter()
        .any(|b| b.get("uniqueItems") == Some(&Value::Bool(true)))
    {
        tags.push("@uniqueItems".into());
    }
    if let Some(default) = property.get("default").filter(|d| !d.is_null()) {
        tags.push(format!("@default {}", js_json(default)));
    }
    if property.get("deprecated") == Some(&Value::Bool(true)) {
        tags.push("@deprecated".into());
    }
    tags.into_iter()
        .filter(|t| utf16_len(t) <= MAX_TAG_CHARS)
        .map(|t| {
            let mut escaped = String::with_capacity(t.len());
            for c in t.chars() {
                match is_line_terminator(c) {
                    true => escaped.push_str(&format!("\\u{:04x}", c as u32)),
                    false => escaped.push(c),
                }
            }
            escaped
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn object_type(schema: &Map<String, Value>, context: &mut Context) -> String {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = properties.keys().collect();
    names.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    let mut members: Vec<String> = names
        .iter()
        .map(|name| {
            let optional = if required.contains(&name.as_str()) {
                ""
            } else {
                "?"
            };
            format!(
                "{}{optional}: {};",
                property_key(name),
                to_type(&properties[name.as_str()], context)
            )
        })
        .collect();
    match schema.get("additionalProperties") {
        Some(Value::Bool(false)) => {}
        Some(additional) => {
            let typed = match additional {
                Value::Bool(true) => "unknown".to_string(),
                other => to_type(other, context),
            };
            members.push(format!("[key: string]: {typed};"));
        }
        None if names.is_empty() => members.push("[key: string]: unknown;".into()),
        None => {}
    }
    if members.is_empty() {
        return "{}".into();
    }
    let comments: Vec<Vec<String>> = names
        .iter()
        .map(|name| {
            let property = &properties[name.as_str()];
            let mut lines: Vec<String> = property
                .get("description")
                .and_then(Value::as_str)
                .map(str::trim)
                .unwrap_or("")
                .split(is_line_terminator)
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            if context.tags {
                let tags = constraint_tags(property);
                if !tags.is_empty() {
                    lines.push(tags);
                }
            }
            lines
        })
        .collect();
    if comments.iter().all(Vec::is_empty) {
        return format!("{{ {} }}", members.join(" "));
    }
    let mut lines = vec!["{".to_string()];
    for (index, comment) in comments.iter().enumerate() {
        for line in comment {
            lines.push(format!("{INDENT}// {line}"));
        }
        lines.push(format!(
            "{INDENT}{}",
            members[index].replace('\n', &format!("\n{INDENT}"))
        ));
    }
    for member in &members[names.len()..] {
        lines.push(format!("{INDENT}{member}"));
    }
    lines.push("}".into());
    lines.join("\n")
}

/// The schema `schema`'s local `$ref` chain names in `root` (cycles and misses stop there).
fn follow_ref<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    let mut seen: Vec<*const Value> = Vec::new();
    let mut current = schema;
    while let Some(reference) = current.get("$ref").and_then(Value::as_str) {
        if seen.contains(&(current as *const Value)) {
            break;
        }
        let Some(target) = resolve_ref(reference, root) else {
            break;
        };
        seen.push(current);
        current = target;
    }
    current
}

/// `{ output, exit_code, full_output_path? }`: an object schema's field names, object-typed
/// fields `depth` levels deep, `const` fields with their value.
fn describe_fields(schema: &Value, root: &Value, depth: usize) -> Option<String> {
    let resolved = follow_ref(schema, root);
    if resolved.get("type") != Some(&json!("object")) {
        return None;
    }
    let properties = resolved.get("properties")?.as_object()?;
    let required: Vec<&str> = resolved
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<String> = properties
        .iter()
        .map(|(name, field)| {
            let constant = follow_ref(field, root).get("const");
            let nested = match constant {
                Some(c) => Some(js_json(c)),
                None if depth > 0 => describe_fields(field, root, depth - 1),
                None => None,
            };
            let optional = if required.contains(&name.as_str()) {
                ""
            } else {
                "?"
            };
            match nested {
                Some(nested) => format!("{name}{optional}: {nested}"),
                None => format!("{name}{optional}"),
            }
        })
        .collect();
    Some(format!("{{ {} }}", fields.join(", ")))
}

fn describe_union_fields(schema: &Value, root: &Value) -> Option<String> {
    let resolved = follow_ref(schema, root);
    let variants = resolved
        .get("anyOf")
        .or_else(|| resolved.get("oneOf"))?
        .as_array()?;
    if variants.is_empty() {
        return None;
    }
    let described: Option<Vec<String>> = variants
        .iter()
        .map(|v| describe_fields(v, root, 0))
        .collect();
    Some(described?.join(" | "))
}

/// What a script's call of `name` resolves to, in one line: `a string`, an object's field
/// names, a one-line type, or a pointer to `describeTool()`.
pub fn describe_output(name: &str, schema: &Value) -> String {
    let typed = schema_to_type(schema, None);
    if typed == "string" {
        return "a string".into();
    }
    if let Some(fields) =
        describe_fields(schema, schema, 1).or_else(|| describe_union_fields(schema, schema))
    {
        return format!("`{fields}`");
    }
    if !typed.contains('\n') {
        return format!("`{typed}`");
    }
    format!(
        "a value; `await describeTool({})` shows its type",
        js_json(&Value::String(name.into()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_outputs_read_as_in_pi() {
        assert_eq!(
            describe_output("bash", &bash_output_schema()),
            "`{ output, truncated, full_output_path?, exit_code, wall_time_seconds }`"
        );
        assert_eq!(
            describe_output("read", &read_output_schema()),
            "`string | { data: string; mimeType: string; note: string; type: \"image\"; }`"
        );
        assert_eq!(describe_output("ls", &text_output_schema()), "a string");
        assert_eq!(
            describe_output("mcp__a__b", &mcp_result_schema(None)),
            "`{ content, structuredContent?, isError? }`"
        );
    }

    #[test]
    fn schemas_become_typescript() {
        let schema = json!({"type": "object", "required": ["b"], "properties": {
            "b": {"type": "integer", "minimum": 1, "default": 20, "description": "Count\nof things"},
            "a": {"type": ["string", "null"]},
            "c-d": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
            "$defs": {"Item": {"enum": ["x", 2]}}});
        assert_eq!(
            schema_to_type(&schema, None),
            "{\n  a?: string | null;\n  // Count\n  // of things\n  // @integer @minimum 1 @default 20\n  b: number;\n  \"c-d\"?: Array<\"x\" | 2>;\n}"
        );
        assert_eq!(
            schema_to_type(
                &json!({"type": "object", "properties": {"x": {"type": "string"}}}),
                None
            ),
            "{ x?: string; }"
        );
        assert_eq!(
            schema_to_type(&json!({"type": "object"}), None),
            "{ [key: string]: unknown; }"
        );
        let recursive = json!({"type": "object", "properties": {"next": {"$ref": "#"}}});
        assert_eq!(
            schema_to_type(&recursive, None),
            "{ next?: { next?: unknown; }; }"
        );
        assert_eq!(
            tool_signature(
                "mcp__dev-radius__search",
                &json!({"type": "object", "properties": {}, "additionalProperties": false}),
                &text_output_schema()
            ),
            "mcp__dev_radius__search(args: {}): Promise<string>;"
        );
        assert_eq!(
            schema_to_type(
                &json!({"type": "object", "properties": {"s": {"type": "string"}}}),
                Some(3)
            ),
            "unknown"
        );
    }
}
