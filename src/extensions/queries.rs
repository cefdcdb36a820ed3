//! (v2) The answers to extension queries that do not need the agent's private state: the tool
//! list with sources (`all_tools`) and walks over session entries (`branch`). The agent
//! (`agent::extension_requests`) gathers the rest and calls these.
//!
//! Input: the agent's tools and session entries as values. Output: the `result` of a
//! `query_result`; pure, nothing blocks.

use serde_json::{Map, Value, json};

use super::ExtensionTool;
use crate::messages::ToolSpec;

/// pi's `sourceInfo` for a tool shipped with pi-rs.
pub fn builtin_source(name: &str) -> Value {
    json!({"path": format!("builtin:{name}"), "source": "builtin", "scope": "temporary",
           "origin": "top-level"})
}

/// One `getAllTools()` item: `{name, description, parameters, promptGuidelines, exposure,
/// sourceInfo}`.
pub fn tool_info(spec: &ToolSpec, guidelines: &[String], source_info: Value) -> Value {
    json!({
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
        "promptGuidelines": guidelines,
        "exposure": "direct",
        "sourceInfo": source_info,
    })
}

/// Every tool that can be offered: the built-ins (an extension tool of the same name replaces
/// one), then the other extension tools, then MCP tools (their server names them).
pub fn all_tools(
    extension_tools: &[ExtensionTool],
    source_of: impl Fn(&ExtensionTool) -> Value,
    mcp_specs: &[ToolSpec],
) -> Vec<Value> {
    let builtins: Vec<String> = crate::tools::ALL_TOOLS
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut all = Vec::new();
    for spec in crate::tools::specs(&builtins) {
        match extension_tools.iter().find(|t| t.decl.name == spec.name) {
            Some(tool) => all.push(tool_info(
                &tool.spec(),
                &tool.decl.prompt_guidelines,
                source_of(tool),
            )),
            None => {
                let guidelines: Vec<String> = crate::tools::prompt_info(&spec.name)
                    .map(|(_, g)| g.iter().map(|s| s.to_string()).collect())
                    .unwrap_or_default();
                let source = builtin_source(&spec.name);
                all.push(tool_info(&spec, &guidelines, source));
            }
        }
    }
    for tool in extension_tools
        .iter()
        .filter(|t| !builtins.contains(&t.decl.name))
    {
        all.push(tool_info(
            &tool.spec(),
            &tool.decl.prompt_guidelines,
            source_of(tool),
        ));
    }
    let taken: Vec<String> = all
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    for spec in mcp_specs.iter().filter(|s| !taken.contains(&s.name)) {
        all.push(tool_info(spec, &[], builtin_source("mcp")));
    }
    all
}

/// The entries from the root to `from` (pi's `getBranch(fromId)`), following `parentId`.
/// Err when `from` is not an entry; a cycle or a dangling parent ends the walk.
pub fn branch_to(entries: &[Value], from: &str) -> Result<Vec<Value>, String> {
    let by_id: Map<String, Value> = entries
        .iter()
        .filter_map(|e| Some((e.get("id")?.as_str()?.to_string(), e.clone())))
        .collect();
    let mut current = by_id
        .get(from)
        .ok_or_else(|| format!("Entry not found: {from}"))?;
    let mut path = vec![current.clone()];
    while let Some(parent) = current.get("parentId").and_then(Value::as_str) {
        let Some(next) = by_id.get(parent) else { break };
        if path.len() > entries.len() {
            break;
        }
        path.push(next.clone());
        current = next;
    }
    path.reverse();
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_follow_parents_and_unknown_ids_are_errors() {
        let entries = vec![
            json!({"id": "a", "parentId": null}),
            json!({"id": "b", "parentId": "a"}),
            json!({"id": "c", "parentId": "a"}),
            json!({"id": "d", "parentId": "c"}),
        ];
        let ids = |path: Vec<Value>| -> Vec<String> {
            path.iter()
                .map(|e| e["id"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(ids(branch_to(&entries, "d").unwrap()), ["a", "c", "d"]);
        assert_eq!(ids(branch_to(&entries, "b").unwrap()), ["a", "b"]);
        assert_eq!(branch_to(&entries, "x").unwrap_err(), "Entry not found: x");
        let cycle = vec![
            json!({"id": "a", "parentId": "b"}),
            json!({"id": "b", "parentId": "a"}),
        ];
        assert!(branch_to(&cycle, "a").unwrap().len() <= 3);
    }

    #[test]
    fn an_extension_tool_takes_the_place_of_a_builtin() {
        let tool = ExtensionTool {
            extension: super::super::ExtensionId(0),
            decl: super::super::protocol::ToolDecl {
                name: "read".into(),
                label: None,
                description: "mine".into(),
                parameters: json!({"type": "object"}),
                prompt_snippet: None,
                prompt_guidelines: vec![],
                sequential: false,
                constrained_sampling: None,
            },
        };
        let all = all_tools(&[tool], |_| json!({"source": "cli"}), &[]);
        let reads: Vec<&Value> = all.iter().filter(|t| t["name"] == "read").collect();
        assert_eq!(reads.len(), 1);
        assert_eq!(reads[0]["description"], "mine");
        assert_eq!(reads[0]["sourceInfo"]["source"], "cli");
        let bash = all.iter().find(|t| t["name"] == "bash").unwrap();
        assert_eq!(bash["sourceInfo"]["path"], "builtin:bash");
    }
}
