//! The transcript's system messages, as pi 1.6.0 keeps them: the prompt's sections and the tool
//! declarations live in the conversation as `role:"system"` messages. A run starts by comparing
//! what the transcript says (every system message replayed: sections patched by name, tools
//! added and removed) with the prompt and tools it is about to use; any difference becomes one
//! system message, emitted and recorded like any other (`message_start`/`message_end`,
//! `agent_end.messages`, `get_messages`, the session file). The first run of a session
//! therefore opens with the whole prompt and every tool; later runs add nothing until
//! something changes (a switched working directory, another tool set). Compaction keeps the
//! replayed state in its entry (`systemMessage`), so a compacted context still starts with it.
//!
//! A request leads with the replayed state as its prompt; a model whose compat says
//! `supportsMidConvoSystemMessages` instead gets the first system message as the prompt and the
//! later ones in place, each rendered as the sections it changes (`SystemMessage::update_text`,
//! placed by each wire API's builder), as pi 1.6.0 sends them. The tools are always the current
//! set at the request's top level.

use serde_json::{Map, Value, json};

use crate::messages::{AgentMessage, SystemMessage, ToolSpec, UserContent};
use crate::resources::system_prompt::SystemPrompt;

/// Every system message of `messages` replayed into one: text contents joined by blank lines,
/// sections patched by name, tools added and removed in order; `None` without any.
pub fn replay(messages: &[AgentMessage]) -> Option<SystemMessage> {
    let mut content: Vec<String> = Vec::new();
    let mut sections = Map::new();
    let mut timestamp = None;
    for system in systems(messages) {
        timestamp.get_or_insert(system.timestamp);
        let text = system.content.text();
        if !text.is_empty() {
            content.push(text);
        }
        for (name, value) in system.sections.iter().flatten() {
            if value.is_null() {
                sections.shift_remove(name);
            } else {
                sections.insert(name.clone(), value.clone());
            }
        }
    }
    let tools = current_tools(messages);
    if timestamp.is_none() && tools.is_empty() {
        return None;
    }
    Some(SystemMessage {
        content: UserContent::Text(content.join("\n\n")),
        sections: (!sections.is_empty()).then_some(sections),
        timestamp: timestamp.unwrap_or(0),
        tools_added: (!tools.is_empty()).then_some(tools),
        tools_removed: None,
        extra: Map::new(),
    })
}

/// The replayed state as a compaction entry's `systemMessage`, stamped `timestamp`, its keys in
/// pi 1.6.0's order there (role, content, sections, toolsAdded, timestamp).
pub fn compaction_snapshot(messages: &[AgentMessage], timestamp: i64) -> Option<Value> {
    let state = replay(messages)?;
    let mut snapshot = Map::new();
    snapshot.insert("role".into(), json!("system"));
    snapshot.insert("content".into(), json!(state.content));
    if let Some(sections) = state.sections {
        snapshot.insert("sections".into(), Value::Object(sections));
    }
    if let Some(tools) = state.tools_added {
        snapshot.insert("toolsAdded".into(), Value::Array(tools));
    }
    snapshot.insert("timestamp".into(), json!(timestamp));
    Some(Value::Object(snapshot))
}

/// The system message that brings the transcript to `prompt` and `tools`, if anything differs.
/// `builtins` names pi-rs's own tools (their declarations carry pi's `constrainedSampling`).
pub fn patch(
    messages: &[AgentMessage],
    prompt: &SystemPrompt,
    tools: &[ToolSpec],
    builtins: &[String],
    timestamp: i64,
) -> Option<SystemMessage> {
    let previous = replay(messages);
    let previous_sections = previous
        .as_ref()
        .and_then(|m| m.sections.clone())
        .unwrap_or_default();
    let mut sections = Map::new();
    for (name, text) in prompt.sections() {
        if previous_sections.get(name).and_then(Value::as_str) != Some(text.as_str()) {
            sections.insert(name.clone(), Value::String(text.clone()));
        }
    }
    for name in previous_sections.keys() {
        if !prompt.sections().iter().any(|(n, _)| n == name) {
            sections.insert(name.clone(), Value::Null);
        }
    }
    let previous_tools = previous.and_then(|m| m.tools_added).unwrap_or_default();
    let current: Vec<Value> = tools
        .iter()
        .map(|spec| declaration(spec, builtins.contains(&spec.name)))
        .collect();
    let named = |list: &[Value], name: &str| -> Option<Value> {
        list.iter().find(|t| t["name"] == name).cloned()
    };
    let added: Vec<Value> = current
        .iter()
        .filter(|tool| {
            named(&previous_tools, tool["name"].as_str().unwrap_or("")).as_ref() != Some(tool)
        })
        .cloned()
        .collect();
    let removed: Vec<Value> = previous_tools
        .iter()
        .filter(|tool| named(&current, tool["name"].as_str().unwrap_or("")).as_ref() != Some(tool))
        .map(|tool| json!({"name": tool["name"]}))
        .collect();
    if sections.is_empty() && added.is_empty() && removed.is_empty() {
        return None;
    }
    Some(SystemMessage {
        content: UserContent::Text(String::new()),
        sections: (!sections.is_empty()).then_some(sections),
        timestamp,
        tools_added: (!added.is_empty()).then_some(added),
        tools_removed: (!removed.is_empty()).then_some(removed),
        extra: Map::new(),
    })
}

/// A tool as the transcript declares it: name, description, parameters, and for pi's own
/// read/bash/edit/write the `constrainedSampling` pi 1.6.0 gives them.
pub fn declaration(spec: &ToolSpec, builtin: bool) -> Value {
    let mut tool = json!({
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
    });
    if prefers_strict(&spec.name, builtin) {
        tool["constrainedSampling"] = json!({"type": "json_schema", "strict": "prefer"});
    }
    if builtin && spec.name == crate::tools::codemode::TOOL_NAME {
        tool["constrainedSampling"] = json!({"type": "grammar",
            "variants": {"openai_lark": crate::tools::codemode::SOURCE_GRAMMAR}});
    }
    tool
}

/// Whether a tool asks for strict JSON-schema sampling where the API allows it (pi 1.6.0 gives
/// its own read/bash/edit/write `constrainedSampling` `strict: "prefer"`).
fn prefers_strict(name: &str, builtin: bool) -> bool {
    builtin && matches!(name, "read" | "bash" | "edit" | "write")
}

/// The names of the tools the transcript declares now.
pub fn declared_names(messages: &[AgentMessage]) -> Vec<String> {
    current_tools(messages)
        .iter()
        .filter_map(|tool| tool["name"].as_str().map(str::to_string))
        .collect()
}

fn systems(messages: &[AgentMessage]) -> impl Iterator<Item = &SystemMessage> {
    messages.iter().filter_map(|m| match m {
        AgentMessage::System(system) => Some(system),
        _ => None,
    })
}

/// The tool loadout the transcript records: the names it declares now (in declaration order)
/// and every name it ever added or removed; `None` when it has no system message.
pub fn loadout(messages: &[AgentMessage]) -> Option<(Vec<String>, Vec<String>)> {
    systems(messages).next()?;
    let name = |tool: &Value| tool["name"].as_str().map(str::to_string);
    let current = current_tools(messages).iter().filter_map(name).collect();
    let mut mentioned: Vec<String> = Vec::new();
    for system in systems(messages) {
        let tools = system.tools_added.iter().chain(system.tools_removed.iter());
        for tool in tools.flatten() {
            if let Some(n) = name(tool).filter(|n| !mentioned.contains(n)) {
                mentioned.push(n);
            }
        }
    }
    Some((current, mentioned))
}

/// The tools that prefer strict JSON-schema sampling (`constrainedSampling` `strict: "prefer"`),
/// by name: those whose last declaration in the transcript asks for it, removed ones too (pi
/// 1.6.0 decides by the declaration a request sends, and a removed tool stays among Anthropic's
/// initial tools), then the current built-ins that ask for it and are not declared yet. (A name
/// redeclared otherwise later counts by its last declaration everywhere.)
pub fn strict_preferred(messages: &[AgentMessage], builtins: &[String]) -> Vec<String> {
    let mut last: Vec<(&str, bool)> = Vec::new();
    for tool in systems(messages).flat_map(|s| s.tools_added.iter().flatten()) {
        let Some(name) = tool["name"].as_str() else {
            continue;
        };
        let sampling = &tool["constrainedSampling"];
        let prefers = sampling["type"] == "json_schema" && sampling["strict"] == "prefer";
        match last.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = prefers,
            None => last.push((name, prefers)),
        }
    }
    let declared = last.iter().filter(|(_, prefers)| *prefers);
    let undeclared = builtins
        .iter()
        .filter(|name| prefers_strict(name, true) && !last.iter().any(|(n, _)| n == name));
    declared
        .map(|(name, _)| name.to_string())
        .chain(undeclared.cloned())
        .collect()
}

/// The tools declared with grammar constrained sampling: every declaration the transcript ever
/// added (the last one per name, removals ignored: pi 1.6.0's `getDeclaredTools`, so a call
/// replays in the form it was made in), then the current tools the transcript does not declare
/// yet (`builtins` names pi-rs's own).
pub fn grammar_tools(
    messages: &[AgentMessage],
    specs: &[ToolSpec],
    builtins: &[String],
) -> Vec<crate::provider::types::GrammarTool> {
    let mut declared: Vec<Value> = Vec::new();
    let added = systems(messages).flat_map(|s| s.tools_added.iter().flatten());
    let current = specs
        .iter()
        .map(|spec| declaration(spec, builtins.contains(&spec.name)));
    for tool in added.cloned() {
        match declared.iter_mut().find(|t| t["name"] == tool["name"]) {
            Some(slot) => *slot = tool,
            None => declared.push(tool),
        }
    }
    for tool in current {
        if !declared.iter().any(|t| t["name"] == tool["name"]) {
            declared.push(tool);
        }
    }
    declared
        .into_iter()
        .filter(|tool| tool["constrainedSampling"]["type"] == "grammar")
        .filter_map(|tool| {
            let variants = &tool["constrainedSampling"]["variants"];
            let variant = |key: &str| variants[key].as_str().map(str::to_string);
            Some(crate::provider::types::GrammarTool {
                name: tool["name"].as_str()?.to_string(),
                lark: variant("openai_lark"),
                regex: variant("openai_regex"),
                parameters: tool["parameters"].clone(),
            })
        })
        .collect()
}

/// The tools the transcript declares after every addition and removal, in declaration order.
fn current_tools(messages: &[AgentMessage]) -> Vec<Value> {
    let mut tools: Vec<Value> = Vec::new();
    for system in systems(messages) {
        for removed in system.tools_removed.iter().flatten() {
            tools.retain(|t| t["name"] != removed["name"]);
        }
        for added in system.tools_added.iter().flatten() {
            match tools.iter_mut().find(|t| t["name"] == added["name"]) {
                Some(slot) => *slot = added.clone(),
                None => tools.push(added.clone()),
            }
        }
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: json!({"type": "object", "properties": {}}),
        }
    }

    fn prompt(cwd: &str) -> SystemPrompt {
        SystemPrompt::from_sections(vec![
            ("preamble".into(), "Hello.".into()),
            ("cwd".into(), format!("<cwd>\n{cwd}\n</cwd>")),
        ])
    }

    #[test]
    fn the_first_patch_carries_everything_then_only_changes() {
        let builtins = vec!["read".to_string()];
        let tools = [spec("read", "Reads."), spec("ext", "Extension.")];
        let first = patch(&[], &prompt("/a"), &tools, &builtins, 5).expect("a first message");
        let value = serde_json::to_value(AgentMessage::System(first.clone())).unwrap();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["role", "content", "sections", "timestamp", "toolsAdded"]
        );
        assert_eq!(value["content"], "");
        assert_eq!(value["sections"]["cwd"], "<cwd>\n/a\n</cwd>");
        assert_eq!(
            value["toolsAdded"][0]["constrainedSampling"],
            json!({"type": "json_schema", "strict": "prefer"})
        );
        assert!(value["toolsAdded"][1].get("constrainedSampling").is_none());

        let transcript = vec![AgentMessage::System(first)];
        assert_eq!(
            patch(&transcript, &prompt("/a"), &tools, &builtins, 6),
            None
        );
        let moved = patch(&transcript, &prompt("/b"), &tools[..1], &builtins, 7).unwrap();
        let value = serde_json::to_value(AgentMessage::System(moved.clone())).unwrap();
        assert_eq!(value["sections"], json!({"cwd": "<cwd>\n/b\n</cwd>"}));
        assert_eq!(value["toolsRemoved"], json!([{"name": "ext"}]));
        assert!(value.get("toolsAdded").is_none());

        let mut transcript = transcript;
        transcript.push(AgentMessage::System(moved));
        let snapshot = compaction_snapshot(&transcript, 9).unwrap();
        let keys: Vec<&String> = snapshot.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["role", "content", "sections", "toolsAdded", "timestamp"]
        );
        assert_eq!(snapshot["timestamp"], 9);
        let state = replay(&transcript).unwrap();
        assert_eq!(state.timestamp, 5);
        assert_eq!(state.tools_added.unwrap().len(), 1);
        let sections = state.sections.unwrap();
        assert_eq!(sections["cwd"], "<cwd>\n/b\n</cwd>");
        assert_eq!(sections["preamble"], "Hello.");
    }

    #[test]
    fn a_dropped_section_is_removed_with_null() {
        let transcript = vec![AgentMessage::System(
            patch(&[], &prompt("/a"), &[], &[], 1).unwrap(),
        )];
        let only_preamble = SystemPrompt::from_sections(vec![("preamble".into(), "Hello.".into())]);
        let change = patch(&transcript, &only_preamble, &[], &[], 2).unwrap();
        assert_eq!(
            change.sections,
            Some(json!({"cwd": null}).as_object().unwrap().clone())
        );
        let read: AgentMessage = serde_json::from_value(
            json!({"role":"system","content":"","sections":{"cwd":null},"timestamp":2}),
        )
        .unwrap();
        assert_eq!(read, AgentMessage::System(change));
    }

    /// A removed built-in keeps its strict preference (its declaration says so); an extension's
    /// tool never has one; a current built-in counts before it is declared.
    #[test]
    fn strict_preference_follows_the_declarations_and_the_current_built_ins() {
        let builtins = vec!["read".to_string(), "bash".to_string()];
        let tools = [
            spec("read", "Reads."),
            spec("bash", "Runs."),
            spec("ext", "Ext."),
        ];
        assert_eq!(strict_preferred(&[], &builtins), ["read", "bash"]);
        let first = patch(&[], &prompt("/a"), &tools, &builtins, 1).unwrap();
        let mut transcript = vec![AgentMessage::System(first)];
        let removed = patch(&transcript, &prompt("/a"), &tools[2..], &[], 2).unwrap();
        transcript.push(AgentMessage::System(removed));
        assert_eq!(strict_preferred(&transcript, &[]), ["read", "bash"]);
        let write = vec!["write".to_string()];
        assert_eq!(
            strict_preferred(&transcript, &write),
            ["read", "bash", "write"]
        );
    }

    /// A tool the transcript declared with a grammar stays a grammar tool after its removal
    /// (1.6.0's `getDeclaredTools`); a current built-in `codemode` counts before it is declared;
    /// an extension's tool of that name does not.
    #[test]
    fn grammar_tools_come_from_every_declaration_and_the_current_built_ins() {
        let codemode = crate::tools::codemode::TOOL_NAME;
        let builtins = vec![codemode.to_string()];
        let tools = [spec(codemode, "Scripts."), spec("read", "Reads.")];
        let current = grammar_tools(&[], &tools, &builtins);
        assert_eq!(current.len(), 1);
        assert_eq!(current[0].name, codemode);
        assert!(current[0].lark.as_deref().unwrap().contains("start:"));
        assert!(grammar_tools(&[], &tools, &[]).is_empty());

        let first = patch(&[], &prompt("/a"), &tools, &builtins, 1).unwrap();
        let mut transcript = vec![AgentMessage::System(first)];
        let removed = patch(&transcript, &prompt("/a"), &tools[1..], &builtins, 2).unwrap();
        transcript.push(AgentMessage::System(removed));
        let declared = grammar_tools(&transcript, &tools[1..], &builtins);
        assert_eq!(declared.len(), 1);
        assert_eq!(declared[0].name, codemode);
    }
}
