//! The `tool_search` tool (pi 1.6.0 `docs/cli.md` "Tools"): it ranks the tools that are not
//! declared to the model (`codemode` and `deferred` exposure, MCP tools) with the BM25 ranker of
//! codemode's `searchTools()` and declares the matches for the next model call. The agent keeps
//! the loaded names; the transcript's system message records them (`toolsAdded`), so they stay
//! declared on that branch, after a resume too.

use serde_json::{Value, json};

use super::codemode::search::{self, CatalogTool};
use crate::messages::ToolSpec;

pub const TOOL_NAME: &str = "tool_search";

/// The system prompt's line for the tool (pi 1.6.0's).
pub const PROMPT_SNIPPET: &str = "Search for tools that are not loaded yet and load the matches";

/// pi 1.6.0's description: it lists no tools, so it stays the same while servers connect.
const DESCRIPTION: &str = "# Tool discovery\n\nSearches over deferred tool metadata with BM25 and exposes matching tools for the next model call.\n\nSome of the tools, such as tools of MCP servers, may not have been provided to you upfront, and you should use this tool (`tool_search`) to search for the required tools. For MCP tool discovery, always use `tool_search`.";

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: TOOL_NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: json!({"type":"object","required":["query"],"properties":{
            "query":{"type":"string","description":"Search query for deferred tools."},
            "limit":{"type":"number","description":format!(
                "Maximum number of tools to return. Defaults to {}.", search::DEFAULT_LIMIT)}}}),
    }
}

/// The result of one search over `candidates` (the tools not declared yet): the text the model
/// reads and the names to declare, or pi 1.6.0's error for bad arguments.
pub fn run(arguments: &Value, candidates: &[CatalogTool]) -> Result<(String, Vec<String>), String> {
    let query = arguments.get("query").and_then(Value::as_str).unwrap_or("");
    if query.trim().is_empty() {
        return Err("query must not be empty".into());
    }
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => search::DEFAULT_LIMIT,
        Some(value) => value
            .as_f64()
            .filter(|n| n.fract() == 0.0 && *n >= 1.0)
            .map(|n| n.min(usize::MAX as f64) as usize)
            .ok_or("limit must be a positive integer")?,
    };
    let found: Vec<&CatalogTool> = search::rank(query, candidates, limit)
        .into_iter()
        .filter_map(|name| candidates.iter().find(|t| t.name == name))
        .collect();
    if found.is_empty() {
        return Ok(("No matching tools found.".into(), Vec::new()));
    }
    let lines: Vec<String> = found
        .iter()
        .map(|tool| {
            let first = tool.description.trim().split('\n').next().unwrap_or("");
            format!("- {}: {}", tool.name, first.trim_end_matches('\r'))
        })
        .collect();
    let text = format!(
        "Loaded {} tool{}. They are available from your next call:\n{}",
        found.len(),
        if found.len() == 1 { "" } else { "s" },
        lines.join("\n")
    );
    Ok((text, found.iter().map(|t| t.name.clone()).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> CatalogTool {
        CatalogTool {
            name: name.into(),
            sample: String::new(),
            description: description.into(),
            parameters: json!({"type": "object"}),
            namespace: None,
        }
    }

    #[test]
    fn loads_the_best_matches_with_pi_texts() {
        let tools = [
            tool("mcp__a__echo", "Echo text back\nmore"),
            tool("mcp__a__slow", "Wait a while"),
            tool("mcp__a__echo_twice", "Echo text back twice"),
        ];
        let (text, loaded) = run(&json!({"query": "echo", "limit": 1}), &tools).unwrap();
        assert_eq!(loaded, ["mcp__a__echo"]);
        assert_eq!(
            text,
            "Loaded 1 tool. They are available from your next call:\n- mcp__a__echo: Echo text back"
        );
        let (text, loaded) = run(&json!({"query": "echo"}), &tools).unwrap();
        assert_eq!(loaded.len(), 2);
        assert!(text.starts_with("Loaded 2 tools."), "{text}");
        assert_eq!(
            run(&json!({"query": "nothing here"}), &tools).unwrap(),
            ("No matching tools found.".to_string(), Vec::new())
        );
        assert_eq!(
            run(&json!({"query": "  "}), &tools).unwrap_err(),
            "query must not be empty"
        );
        for limit in [json!(0), json!(1.5), json!(-2)] {
            assert_eq!(
                run(&json!({"query": "echo", "limit": limit}), &tools).unwrap_err(),
                "limit must be a positive integer"
            );
        }
    }
}
