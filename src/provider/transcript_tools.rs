//! Where a request declares the tools of a transcript whose later system messages go in place
//! (pi 1.6.0's `TranscriptToolSupport` and `resolveTranscriptTools`): all of them at the top
//! level; the top level up to the last removal with each later addition in place; or every
//! declaration in place, none at the top level. Which one a model gets comes from its `compat`;
//! the wire API modules that write such declarations (Chat Completions, the Responses family)
//! take the split from here, and the request cache asks whether a model has any. Pure.

use std::borrow::Cow;

use super::request::sends_mid_convo_system_messages;
use super::types::StreamRequest;
use crate::config::Model;
use crate::messages::{AgentMessage, ToolSpec};

/// How a model takes tool changes later in the conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlaceTools {
    /// Only the request's top-level tools, always the current set.
    None,
    /// Additions where a system message stands, never removals or redefinitions: the top-level
    /// tools are the state after the last system message that removes or redeclares a tool.
    /// Chat Completions' `supportsMidConvoToolAdditions` (Kimi's `{role:"system", tools}`),
    /// Responses' `supportsToolSearch` (synthetic `tool_search_call`/`tool_search_output`).
    Additions,
    /// Every declaration in place, the first system message's too, and none at the top level;
    /// a removal is announced in text. Responses' `supportsAdditionalTools` (`additional_tools`
    /// items).
    Changes,
}

/// What `model` takes; `None` unless its later system messages go in place.
pub fn in_place_tools(model: &Model) -> InPlaceTools {
    if !sends_mid_convo_system_messages(model) {
        return InPlaceTools::None;
    }
    let says = |key: &str| model.compat_bool(key) == Some(true);
    match model.api.as_str() {
        "openai-completions" if says("supportsMidConvoToolAdditions") => InPlaceTools::Additions,
        "openai-responses" | "azure-openai-responses" | "openai-codex-responses" => {
            // Additional tools can also express removals (in text), so they win.
            if says("supportsAdditionalTools") {
                InPlaceTools::Changes
            } else if says("supportsToolSearch") {
                InPlaceTools::Additions
            } else {
                InPlaceTools::None
            }
        }
        _ => InPlaceTools::None,
    }
}

/// A request's tool declarations split between the top level and the conversation.
#[derive(Debug)]
pub struct TranscriptTools<'a> {
    pub support: InPlaceTools,
    /// The request's top-level tools.
    pub top_level: Cow<'a, [ToolSpec]>,
    /// How many of the request's later system messages (the ones in `request.messages`) the
    /// top-level tools account for; those after them declare their additions in place.
    folded: usize,
}

impl TranscriptTools<'_> {
    /// Whether the first system message (the prompt, `request.initial_tools`) declares its
    /// tools in place.
    pub fn head_in_place(&self) -> bool {
        self.support == InPlaceTools::Changes
    }

    /// Whether the later system message at `index` (0-based, among `request.messages`' system
    /// messages) declares its tool changes in place.
    pub fn in_place_at(&self, index: usize) -> bool {
        self.support != InPlaceTools::None && index >= self.folded
    }
}

/// The split for `request`, by `in_place_tools` of its model.
pub fn transcript_tools(request: &StreamRequest) -> TranscriptTools<'_> {
    let support = in_place_tools(&request.model);
    match support {
        InPlaceTools::None => TranscriptTools {
            support,
            top_level: Cow::Borrowed(&request.tools),
            folded: usize::MAX,
        },
        InPlaceTools::Changes => TranscriptTools {
            support,
            top_level: Cow::Borrowed(&[]),
            folded: 0,
        },
        InPlaceTools::Additions => {
            let (tools, folded) = tools_until_last_removal(request);
            TranscriptTools {
                support,
                top_level: Cow::Owned(tools),
                folded,
            }
        }
    }
}

/// The tools after the last later system message that removes a tool or declares a name declared
/// before (even one removed since: Kimi ignores such a redeclaration, pi 1.6.0 says), and how
/// many later system messages that folds; the first system message's tools at least.
fn tools_until_last_removal(request: &StreamRequest) -> (Vec<ToolSpec>, usize) {
    let systems: Vec<&crate::messages::SystemMessage> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            AgentMessage::System(system) => Some(system),
            _ => None,
        })
        .collect();
    let mut declared: Vec<String> = request
        .initial_tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let mut folded = 0;
    for (index, system) in systems.iter().enumerate() {
        if system.tools_removed.as_ref().is_some_and(|r| !r.is_empty()) {
            folded = index + 1;
        }
        for tool in system.tools_added.iter().flatten() {
            let name = tool["name"].as_str().unwrap_or_default().to_string();
            if declared.contains(&name) {
                folded = index + 1;
            } else {
                declared.push(name);
            }
        }
    }
    let mut tools = request.initial_tools.clone();
    for system in &systems[..folded] {
        for removed in system.tools_removed.iter().flatten() {
            tools.retain(|t| removed["name"] != t.name.as_str());
        }
        for added in system.tools_added.iter().flatten() {
            let spec = ToolSpec::from_declaration(added);
            match tools.iter_mut().find(|t| t.name == spec.name) {
                Some(slot) => *slot = spec,
                None => tools.push(spec),
            }
        }
    }
    (tools, folded)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{model, request};
    use super::*;
    use crate::messages::{SystemMessage, UserContent};
    use serde_json::{Map, Value, json};

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"type": "object"}),
        }
    }

    fn change(added: &[&str], removed: &[&str]) -> AgentMessage {
        let declare = |names: &[&str], full: bool| -> Option<Vec<Value>> {
            (!names.is_empty()).then(|| {
                names
                    .iter()
                    .map(|n| match full {
                        true => json!({"name": n, "description": format!("{n} things"),
                            "parameters": {"type": "object"}}),
                        false => json!({"name": n}),
                    })
                    .collect()
            })
        };
        AgentMessage::System(SystemMessage {
            content: UserContent::Text(String::new()),
            sections: None,
            timestamp: 1,
            tools_added: declare(added, true),
            tools_removed: declare(removed, false),
            extra: Map::new(),
        })
    }

    fn names(tools: &[ToolSpec]) -> Vec<&str> {
        tools.iter().map(|t| t.name.as_str()).collect()
    }

    /// The keys as pi 1.6.0 reads them: nothing without system messages in place, additional
    /// tools before tool search on the Responses family, tool additions on Chat Completions.
    #[test]
    fn compat_keys_pick_the_split() {
        let with = |api: &str, compat: Value| {
            let mut m = model(api, "p", "m");
            m.compat = compat.as_object().cloned();
            in_place_tools(&m)
        };
        let mid = |extra: Value| {
            let mut compat = json!({"supportsMidConvoSystemMessages": true});
            compat
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            compat
        };
        let both = json!({"supportsAdditionalTools": true, "supportsToolSearch": true});
        for api in [
            "openai-responses",
            "azure-openai-responses",
            "openai-codex-responses",
        ] {
            assert_eq!(with(api, mid(both.clone())), InPlaceTools::Changes);
            assert_eq!(
                with(api, mid(json!({"supportsToolSearch": true}))),
                InPlaceTools::Additions
            );
            assert_eq!(with(api, both.clone()), InPlaceTools::None);
            assert_eq!(
                with(api, mid(json!({"supportsMidConvoToolAdditions": true}))),
                InPlaceTools::None
            );
        }
        assert_eq!(
            with(
                "openai-completions",
                mid(json!({"supportsMidConvoToolAdditions": true}))
            ),
            InPlaceTools::Additions
        );
        assert_eq!(with("openai-completions", mid(both)), InPlaceTools::None);
    }

    /// Additions: the top level stops at the last removal or redeclaration; changes: nothing at
    /// the top level, every system message in place.
    #[test]
    fn the_top_level_stops_at_the_last_removal() {
        let mut m = model("openai-responses", "p", "m");
        m.compat = json!({"supportsMidConvoSystemMessages": true,
            "supportsToolSearch": true})
        .as_object()
        .cloned();
        let mut r = request(
            m.clone(),
            vec![
                change(&["grep"], &[]),
                change(&[], &["read"]),
                change(&["find"], &[]),
            ],
        );
        r.initial_tools = vec![tool("read")];
        r.tools = vec![tool("grep"), tool("find")];
        let split = transcript_tools(&r);
        assert_eq!(names(&split.top_level), ["grep"]);
        assert_eq!(
            (0..3).map(|i| split.in_place_at(i)).collect::<Vec<_>>(),
            [false, false, true]
        );
        assert!(!split.head_in_place());

        // A name declared again after its removal counts as a redeclaration.
        r.messages.push(change(&["read"], &[]));
        let split = transcript_tools(&r);
        assert_eq!(names(&split.top_level), ["grep", "find", "read"]);
        assert!(!split.in_place_at(3));

        m.compat = json!({"supportsMidConvoSystemMessages": true,
            "supportsAdditionalTools": true})
        .as_object()
        .cloned();
        r.model = m;
        let split = transcript_tools(&r);
        assert!(split.top_level.is_empty());
        assert!(split.head_in_place() && split.in_place_at(0));

        r.model.compat = json!({"supportsAdditionalTools": true})
            .as_object()
            .cloned();
        let split = transcript_tools(&r);
        assert_eq!(names(&split.top_level), ["grep", "find"]);
        assert!(!split.head_in_place() && !split.in_place_at(3));
    }
}
