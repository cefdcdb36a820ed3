//! Tool discovery for scripts: `searchTools()` (BM25 over a tool's name, description, schema
//! text and namespace, ranked as pi 1.6.0 ranks), `describeTool()`, `describeNamespace()`.
//! Pure functions over a catalog of the callable tools.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

pub const DEFAULT_LIMIT: usize = 8;
const K1: f64 = 1.2;
const B: f64 = 0.75;
const NAME_WEIGHT: f64 = 3.0;
const NAMESPACE_WEIGHT: f64 = 0.5;
const STOP_WORDS: [&str; 21] = [
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "of", "on",
    "or", "that", "the", "this", "to", "with",
];

/// A group of tools such as one MCP server's (`mcp__<server>`, alias `<server>`).
#[derive(Clone, Debug, PartialEq)]
pub struct Namespace {
    pub name: String,
    pub aliases: Vec<String>,
    pub description: Option<String>,
    pub instructions: Option<String>,
}

/// A tool a script may call, as discovery sees it.
#[derive(Clone, Debug)]
pub struct CatalogTool {
    pub name: String,
    /// What `ALL_TOOLS` and `describeTool()` show: the description (with the tool's
    /// guidelines) and its TypeScript declaration (`declarations::tool_sample`).
    pub sample: String,
    pub description: String,
    pub parameters: Value,
    pub namespace: Option<Namespace>,
}

/// Naive singular form (`issues` → `issue`, `searches` → `search`).
fn stem(term: &str) -> String {
    let n = term.len();
    if n > 4 && term.ends_with("ies") {
        return format!("{}y", &term[..n - 3]);
    }
    if n > 4
        && ["ches", "shes", "sses", "xes", "zes"]
            .iter()
            .any(|s| term.ends_with(s))
    {
        return term[..n - 2].to_string();
    }
    if n > 3 && term.ends_with('s') && !term.ends_with("ss") {
        return term[..n - 1].to_string();
    }
    term.to_string()
}

/// Words of `text`: identifier boundaries (`camelCase`, `HTTPServer`) split, lower case, runs of
/// anything but letters and digits as separators, stop words dropped, ASCII words stemmed.
pub fn tokenize(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut spaced = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        if i > 0 && c.is_ascii_uppercase() {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_lower)
            {
                spaced.push(' ');
            }
        }
        spaced.push(c);
    }
    spaced
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !STOP_WORDS.contains(w))
        .map(|w| {
            if w.bytes().all(|b| b.is_ascii_alphanumeric()) {
                stem(w)
            } else {
                w.to_string()
            }
        })
        .collect()
}

fn schema_text(schema: &Value, parts: &mut Vec<String>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    if let Some(description) = object.get("description").and_then(Value::as_str) {
        parts.push(description.to_string());
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            parts.push(name.clone());
            schema_text(property, parts);
        }
    }
    if let Some(items) = object.get("items") {
        schema_text(items, parts);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for variant in object
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            schema_text(variant, parts);
        }
    }
}

fn normalize_name(name: &str) -> String {
    name.trim()
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '$' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

struct Indexed<'a> {
    name: &'a str,
    name_terms: BTreeSet<String>,
    local_name_terms: BTreeSet<String>,
    counts: BTreeMap<String, usize>,
    length: usize,
    namespace_terms: BTreeSet<String>,
}

fn index(tool: &CatalogTool) -> Indexed<'_> {
    let mut parts = vec![tool.description.clone()];
    schema_text(&tool.parameters, &mut parts);
    let text: Vec<String> = parts.into_iter().filter(|p| !p.trim().is_empty()).collect();
    let mut counts = BTreeMap::new();
    for term in tokenize(&text.join(" ")) {
        *counts.entry(term).or_insert(0) += 1;
    }
    let namespace_text = tool
        .namespace
        .as_ref()
        .map(|n| {
            format!(
                "{} {} {}",
                n.name,
                n.description.as_deref().unwrap_or(""),
                n.instructions.as_deref().unwrap_or("")
            )
        })
        .unwrap_or_default();
    let local = tool.name.rsplit("__").next().unwrap_or(&tool.name);
    Indexed {
        name: &tool.name,
        name_terms: tokenize(&tool.name).into_iter().collect(),
        local_name_terms: tokenize(local).into_iter().collect(),
        length: counts.values().sum(),
        counts,
        namespace_terms: tokenize(&namespace_text).into_iter().collect(),
    }
}

/// The best `limit` tools for `query`: an exact name first, then by the number of query terms a
/// tool covers, then by BM25 score (names weigh 3, namespaces 0.5, a tool whose whole local name
/// is in the query gains the sum of the terms' IDF).
pub fn rank<'a>(query: &str, tools: &'a [CatalogTool], limit: usize) -> Vec<&'a str> {
    let terms: BTreeSet<String> = tokenize(query).into_iter().collect();
    if terms.is_empty() || tools.is_empty() || limit == 0 {
        return Vec::new();
    }
    let indexed: Vec<Indexed> = tools.iter().map(index).collect();
    let total = indexed.len() as f64;
    let average = indexed.iter().map(|d| d.length).sum::<usize>() as f64 / total;
    let average = if average == 0.0 { 1.0 } else { average };
    let idf: BTreeMap<&String, f64> = terms
        .iter()
        .map(|term| {
            let frequency = indexed
                .iter()
                .filter(|d| {
                    d.name_terms.contains(term)
                        || d.counts.contains_key(term)
                        || d.namespace_terms.contains(term)
                })
                .count() as f64;
            (
                term,
                (1.0 + (total - frequency + 0.5) / (frequency + 0.5)).ln(),
            )
        })
        .collect();
    let full_name_bonus: f64 = idf.values().sum();
    let exact_query = normalize_name(query);
    let mut matches: Vec<(&str, f64, usize, bool)> = Vec::new();
    for document in &indexed {
        let norm = K1 * (1.0 - B + B * document.length as f64 / average);
        let mut score = 0.0;
        let mut covered = 0;
        for term in &terms {
            let count = *document.counts.get(term).unwrap_or(&0) as f64;
            let weight = if document.name_terms.contains(term) {
                NAME_WEIGHT
            } else {
                0.0
            } + if document.namespace_terms.contains(term) {
                NAMESPACE_WEIGHT
            } else {
                0.0
            } + count * (K1 + 1.0) / (count + norm);
            if weight > 0.0 {
                covered += 1;
            }
            score += idf.get(term).copied().unwrap_or(0.0) * weight;
        }
        if score == 0.0 {
            continue;
        }
        if !document.local_name_terms.is_empty()
            && document.local_name_terms.iter().all(|t| terms.contains(t))
        {
            score += full_name_bonus;
        }
        let normalized = normalize_name(document.name);
        let exact = normalized == exact_query || normalized.ends_with(&format!("__{exact_query}"));
        matches.push((document.name, score, covered, exact));
    }
    matches.sort_by(|a, b| {
        b.3.cmp(&a.3)
            .then(b.2.cmp(&a.2))
            .then(b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal))
    });
    matches.into_iter().take(limit).map(|m| m.0).collect()
}

/// Whether `query` names the namespace (its name or an alias, as written or as the same script
/// identifier).
fn names_namespace(namespace: &Namespace, query: &str) -> bool {
    let id = super::identifier(query);
    std::iter::once(&namespace.name)
        .chain(&namespace.aliases)
        .any(|name| name == query || super::identifier(name) == id)
}

/// Runs a discovery global; `args` is the JSON array of the script's arguments. The answer is
/// the value as JSON (None: undefined); an error rejects the script's promise.
pub fn call_global(
    name: &str,
    args: &Value,
    tools: &[CatalogTool],
) -> Result<Option<Value>, String> {
    let first = args.get(0).unwrap_or(&Value::Null);
    match name {
        "searchTools" => {
            let query = first
                .as_str()
                .ok_or("searchTools() expects a query string")?;
            let options = args.get(1).unwrap_or(&Value::Null);
            let limit = match options.get("limit") {
                None | Some(Value::Null) => DEFAULT_LIMIT,
                Some(limit) => limit
                    .as_f64()
                    .filter(|n| n.fract() == 0.0 && *n > 0.0)
                    .map(|n| n as usize)
                    .ok_or("searchTools() limit must be a positive integer")?,
            };
            let namespace = match options.get("namespace") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) if s.is_empty() => None,
                Some(Value::String(s)) => Some(s.as_str()),
                Some(_) => return Err("searchTools() namespace must be a string".into()),
            };
            let candidates: Vec<CatalogTool> = tools
                .iter()
                .filter(|tool| {
                    namespace.is_none_or(|wanted| {
                        tool.namespace
                            .as_ref()
                            .is_some_and(|n| names_namespace(n, wanted))
                    })
                })
                .cloned()
                .collect();
            let found: Vec<Value> = rank(query, &candidates, limit)
                .into_iter()
                .filter_map(|name| candidates.iter().find(|t| t.name == name))
                .map(|tool| json!({"name": super::identifier(&tool.name), "description": tool.sample}))
                .collect();
            Ok(Some(Value::Array(found)))
        }
        "describeTool" => {
            let wanted = first.as_str().ok_or("describeTool() expects a tool name")?;
            Ok(tools
                .iter()
                .find(|t| t.name == wanted || super::identifier(&t.name) == wanted)
                .map(|t| json!(t.sample)))
        }
        "describeNamespace" => {
            let wanted = first
                .as_str()
                .ok_or("describeNamespace() expects a namespace name")?;
            let mut found: Option<&Namespace> = None;
            let mut names = Vec::new();
            for tool in tools {
                let Some(namespace) = tool
                    .namespace
                    .as_ref()
                    .filter(|n| names_namespace(n, wanted))
                else {
                    continue;
                };
                found.get_or_insert(namespace);
                names.push(super::identifier(&tool.name));
            }
            Ok(found.map(|namespace| {
                let mut value = json!({"name": namespace.name});
                if let Some(d) = &namespace.description {
                    value["description"] = json!(d);
                }
                if let Some(i) = &namespace.instructions {
                    value["instructions"] = json!(i);
                }
                value["tools"] = json!(names);
                value
            }))
        }
        _ => Err(format!("Unknown global \"{name}\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str, namespace: Option<&str>) -> CatalogTool {
        CatalogTool {
            name: name.into(),
            sample: description.into(),
            description: description.into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string", "description": "What to look for"}}}),
            namespace: namespace.map(|server| Namespace {
                name: format!("mcp__{server}"),
                aliases: vec![server.into()],
                description: None,
                instructions: None,
            }),
        }
    }

    #[test]
    fn tokenize_splits_identifiers_and_stems() {
        assert_eq!(
            tokenize("getHTTPServer issues"),
            ["get", "http", "server", "issue"]
        );
        assert_eq!(tokenize("the searches of a box"), ["search", "box"]);
        assert_eq!(
            tokenize("mcp__dev-radius__search"),
            ["mcp", "dev", "radiu", "search"]
        );
    }

    #[test]
    fn rank_prefers_exact_names_then_coverage() {
        let tools = vec![
            tool("read", "Read a file", None),
            tool(
                "mcp__docs__search_issues",
                "Search the issue tracker",
                Some("docs"),
            ),
            tool(
                "mcp__docs__search",
                "Full text search of pages",
                Some("docs"),
            ),
        ];
        assert_eq!(
            rank("search", &tools, 8),
            ["mcp__docs__search", "mcp__docs__search_issues"]
        );
        assert_eq!(rank("issues", &tools, 8), ["mcp__docs__search_issues"]);
        assert_eq!(rank("the", &tools, 8), Vec::<&str>::new());
        let namespace = call_global("describeNamespace", &json!(["docs"]), &tools)
            .unwrap()
            .unwrap();
        assert_eq!(
            namespace,
            json!({"name": "mcp__docs", "tools": ["mcp__docs__search_issues", "mcp__docs__search"]})
        );
        let found = call_global(
            "searchTools",
            &json!(["file", {"namespace": "docs"}]),
            &tools,
        )
        .unwrap();
        assert_eq!(found, Some(json!([])));
        assert_eq!(
            call_global("searchTools", &json!(["x", {"limit": 0}]), &tools).unwrap_err(),
            "searchTools() limit must be a positive integer"
        );
    }
}
