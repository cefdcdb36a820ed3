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
pub fn patch(
    messages: &[AgentMessage],
    prompt: &SystemPrompt,
    tools: &[ToolSpec],
    samplings: Samplings,
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
        .map(|spec| declaration(spec, samplings))
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

/// Where the current tools' `constrainedSampling` comes from: pi-rs's own tools (pi 1.6.0's
/// for read/bash/edit/write and `codemode`) and the extensions' tools (as they declared it).
#[derive(Clone, Copy)]
pub struct Samplings<'a> {
    pub builtins: &'a [String],
    pub extension_tools: &'a [crate::extensions::ExtensionTool],
}

impl Samplings<'_> {
    /// The `constrainedSampling` the tool named `name` is declared with (an extension's tool
    /// named like a built-in replaces it, and has its own).
    fn of(&self, name: &str) -> Option<Value> {
        if let Some(tool) = self.extension_tools.iter().find(|t| t.decl.name == name) {
            return tool.decl.constrained_sampling.clone();
        }
        if !self.builtins.iter().any(|b| b == name) {
            return None;
        }
        match name {
            "read" | "bash" | "edit" | "write" => {
                Some(json!({"type": "json_schema", "strict": "prefer"}))
            }
            crate::tools::codemode::TOOL_NAME => Some(json!({"type": "grammar",
                "variants": {"openai_lark": crate::tools::codemode::SOURCE_GRAMMAR}})),
            _ => None,
        }
    }
}

/// A tool as the transcript declares it: name, description, parameters, and its
/// `constrainedSampling` where it has one.
fn declaration(spec: &ToolSpec, samplings: Samplings) -> Value {
    let mut tool = json!({
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
    });
    if let Some(sampling) = samplings.of(&spec.name) {
        tool["constrainedSampling"] = sampling;
    }
    tool
}

/// Whether a declaration's `constrainedSampling` asks for strict JSON-schema sampling in `mode`:
/// `"prefer"` (where the API allows it) or `"require"` (or the request fails).
fn asks_strict(sampling: &Value, mode: &str) -> bool {
    sampling["type"] == "json_schema" && sampling["strict"] == mode
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
/// initial tools), then the current tools that ask for it and are not declared yet. (A name
/// redeclared otherwise later counts by its last declaration everywhere.)
pub fn strict_preferred(
    messages: &[AgentMessage],
    specs: &[ToolSpec],
    samplings: Samplings,
) -> Vec<String> {
    strict_in_mode(messages, specs, samplings, "prefer")
}

/// The tools that require strict JSON-schema sampling (`strict: "require"`), chosen as
/// `strict_preferred` chooses.
pub fn strict_required(
    messages: &[AgentMessage],
    specs: &[ToolSpec],
    samplings: Samplings,
) -> Vec<String> {
    strict_in_mode(messages, specs, samplings, "require")
}

fn strict_in_mode(
    messages: &[AgentMessage],
    specs: &[ToolSpec],
    samplings: Samplings,
    mode: &str,
) -> Vec<String> {
    let mut last: Vec<(&str, bool)> = Vec::new();
    for tool in systems(messages).flat_map(|s| s.tools_added.iter().flatten()) {
        let Some(name) = tool["name"].as_str() else {
            continue;
        };
        let asks = asks_strict(&tool["constrainedSampling"], mode);
        match last.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = asks,
            None => last.push((name, asks)),
        }
    }
    let declared = last.iter().filter(|(_, asks)| *asks);
    let undeclared = specs.iter().filter(|spec| {
        !last.iter().any(|(n, _)| *n == spec.name)
            && samplings
                .of(&spec.name)
                .is_some_and(|s| asks_strict(&s, mode))
    });
    declared
        .map(|(name, _)| name.to_string())
        .chain(undeclared.map(|spec| spec.name.clone()))
        .collect()
}

/// The tools declared with grammar constrained sampling: every declaration the transcript ever
/// added (the last one per name, removals ignored: pi 1.6.0's `getDeclaredTools`, so a call
/// replays in the form it was made in), then the current tools the transcript does not declare
/// yet.
pub fn grammar_tools(
    messages: &[AgentMessage],
    specs: &[ToolSpec],
    samplings: Samplings,
) -> Vec<crate::provider::types::GrammarTool> {
    let mut declared: Vec<Value> = Vec::new();
    let added = systems(messages).flat_map(|s| s.tools_added.iter().flatten());
    let current = specs.iter().map(|spec| declaration(spec, samplings));
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

    /// The samplings of pi-rs's own tools `builtins`, no extension tools.
    fn own(builtins: &[String]) -> Samplings<'_> {
        Samplings {
            builtins,
            extension_tools: &[],
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
        let first = patch(&[], &prompt("/a"), &tools, own(&builtins), 5).expect("a first message");
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
            patch(&transcript, &prompt("/a"), &tools, own(&builtins), 6),
            None
        );
        let moved = patch(&transcript, &prompt("/b"), &tools[..1], own(&builtins), 7).unwrap();
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
            patch(&[], &prompt("/a"), &[], own(&[]), 1).unwrap(),
        )];
        let only_preamble = SystemPrompt::from_sections(vec![("preamble".into(), "Hello.".into())]);
        let change = patch(&transcript, &only_preamble, &[], own(&[]), 2).unwrap();
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
    /// tool has the one it registered; a current tool counts before it is declared.
    #[test]
    fn strict_preference_follows_the_declarations_and_the_current_tools() {
        let builtins = vec!["read".to_string(), "bash".to_string()];
        let extension_tools = [crate::extensions::ExtensionTool {
            extension: crate::extensions::ExtensionId(0),
            decl: crate::extensions::protocol::ToolDecl {
                name: "ext".into(),
                label: None,
                description: "Ext.".into(),
                parameters: json!({"type": "object", "properties": {}}),
                prompt_snippet: None,
                prompt_guidelines: vec![],
                sequential: false,
                constrained_sampling: Some(json!({"type": "json_schema", "strict": "prefer"})),
            },
        }];
        let samplings = Samplings {
            builtins: &builtins,
            extension_tools: &extension_tools,
        };
        let tools = [
            spec("read", "Reads."),
            spec("bash", "Runs."),
            spec("ext", "Ext."),
            spec("plain", "Plain."),
        ];
        assert_eq!(
            strict_preferred(&[], &tools, samplings),
            ["read", "bash", "ext"]
        );
        let first = patch(&[], &prompt("/a"), &tools, samplings, 1).unwrap();
        let value = serde_json::to_value(AgentMessage::System(first.clone())).unwrap();
        assert_eq!(
            value["toolsAdded"][2]["constrainedSampling"],
            json!({"type": "json_schema", "strict": "prefer"})
        );
        let mut transcript = vec![AgentMessage::System(first)];
        let removed = patch(&transcript, &prompt("/a"), &tools[3..], own(&[]), 2).unwrap();
        transcript.push(AgentMessage::System(removed));
        assert_eq!(
            strict_preferred(&transcript, &tools[3..], own(&[])),
            ["read", "bash", "ext"]
        );
        let write = vec!["write".to_string()];
        assert_eq!(
            strict_preferred(&transcript, &[spec("write", "Writes.")], own(&write)),
            ["read", "bash", "ext", "write"]
        );
        // An extension's `write` in place of the built-in declares no preference.
        let mut replaced = extension_tools[0].clone();
        replaced.decl.name = "write".into();
        replaced.decl.constrained_sampling = None;
        let samplings = Samplings {
            builtins: &write,
            extension_tools: std::slice::from_ref(&replaced),
        };
        assert_eq!(
            strict_preferred(&transcript, &[spec("write", "Writes.")], samplings),
            ["read", "bash", "ext"]
        );
        assert!(strict_required(&transcript, &[spec("write", "Writes.")], samplings).is_empty());
        // An extension's tool that requires strict sampling: required, not preferred, before and
        // after it is declared.
        replaced.decl.constrained_sampling =
            Some(json!({"type": "json_schema", "strict": "require"}));
        let samplings = Samplings {
            builtins: &[],
            extension_tools: std::slice::from_ref(&replaced),
        };
        let current = [spec("write", "Writes.")];
        assert_eq!(strict_required(&[], &current, samplings), ["write"]);
        assert!(strict_preferred(&[], &current, samplings).is_empty());
        let declared = patch(&transcript, &prompt("/a"), &current, samplings, 3).unwrap();
        transcript.push(AgentMessage::System(declared));
        assert_eq!(strict_required(&transcript, &[], samplings), ["write"]);
    }

    /// A tool the transcript declared with a grammar stays a grammar tool after its removal
    /// (1.6.0's `getDeclaredTools`); a current built-in `codemode` counts before it is declared;
    /// an extension's tool of that name does not.
    #[test]
    fn grammar_tools_come_from_every_declaration_and_the_current_built_ins() {
        let codemode = crate::tools::codemode::TOOL_NAME;
        let builtins = vec![codemode.to_string()];
        let tools = [spec(codemode, "Scripts."), spec("read", "Reads.")];
        let current = grammar_tools(&[], &tools, own(&builtins));
        assert_eq!(current.len(), 1);
        assert_eq!(current[0].name, codemode);
        assert!(current[0].lark.as_deref().unwrap().contains("start:"));
        assert!(grammar_tools(&[], &tools, own(&[])).is_empty());

        let first = patch(&[], &prompt("/a"), &tools, own(&builtins), 1).unwrap();
        let mut transcript = vec![AgentMessage::System(first)];
        let removed = patch(&transcript, &prompt("/a"), &tools[1..], own(&builtins), 2).unwrap();
        transcript.push(AgentMessage::System(removed));
        let declared = grammar_tools(&transcript, &tools[1..], own(&builtins));
        assert_eq!(declared.len(), 1);
        assert_eq!(declared[0].name, codemode);
    }
}
