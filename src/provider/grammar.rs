//! Grammar tools (pi 1.6.0's grammar constrained sampling, `supportsOpenAIGrammarTools`): which
//! of a request's tools go to OpenAI as custom tools with a grammar, and the streamed raw input of
//! their calls turned into the JSON arguments text every other tool call has. Shared by the
//! Responses and Chat Completions wire modules. Pure.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::types::StreamRequest;

/// A tool sent as an OpenAI custom tool with a grammar: the grammar's syntax (`lark` or
/// `regex`), its definition, and the parameter that carries the raw input.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ResolvedGrammar {
    pub syntax: &'static str,
    pub definition: String,
    pub input_property: String,
}

/// The request's grammar tools by name, where the model's compat has `supportsOpenAIGrammarTools`
/// (pi 1.6.0's `resolveGrammarConstrainedSampling`: the Lark variant before the regex one; the
/// input is the one required property, a string). A declaration outside that shape stays a
/// function tool (1.6.0 fails the request; only pi-rs's own `codemode` declares a grammar).
pub(crate) fn grammar_tools(request: &StreamRequest) -> HashMap<String, ResolvedGrammar> {
    if request.model.compat_bool("supportsOpenAIGrammarTools") != Some(true) {
        return HashMap::new();
    }
    let mut resolved = HashMap::new();
    for tool in &request.grammar_tools {
        let usable = |d: &Option<String>| d.clone().filter(|d| !d.trim().is_empty());
        let (syntax, definition) = match (usable(&tool.lark), usable(&tool.regex)) {
            (Some(lark), _) => ("lark", lark),
            (None, Some(regex)) => ("regex", regex),
            (None, None) => {
                log::warn!("tool {} declares a grammar without a variant", tool.name);
                continue;
            }
        };
        let schema = &tool.parameters;
        let input_property = match schema["required"].as_array().map(Vec::as_slice) {
            Some([Value::String(name)])
                if schema["type"] == "object" && schema["properties"][name]["type"] == "string" =>
            {
                name.clone()
            }
            _ => {
                log::warn!(
                    "tool {}'s grammar input is not one string property",
                    tool.name
                );
                continue;
            }
        };
        resolved.insert(
            tool.name.clone(),
            ResolvedGrammar {
                syntax,
                definition,
                input_property,
            },
        );
    }
    resolved
}

/// A custom tool call's raw input as it streams, turned into pieces of the JSON arguments text
/// `{"<property>":"<input>"}` (pi 1.6.0's grammar tool input buffer). The first piece waits to
/// go out with the next one, as 1.6.0 sends it.
pub(crate) struct CustomInput {
    property: String,
    input: String,
    started: bool,
    closed: bool,
    unsent: String,
}

impl CustomInput {
    pub(crate) fn new(property: String, initial: &str) -> Result<CustomInput, String> {
        let mut input = CustomInput {
            property,
            input: String::new(),
            started: false,
            closed: false,
            unsent: String::new(),
        };
        input.unsent = input.append(initial)?.unwrap_or_default();
        Ok(input)
    }

    /// The opening `{"<property>":"`, once.
    fn start(&mut self) -> String {
        if std::mem::replace(&mut self.started, true) {
            return String::new();
        }
        format!("{{{}:\"", json!(self.property))
    }

    /// More input → its JSON piece (`None` for an empty delta).
    pub(crate) fn append(&mut self, delta: &str) -> Result<Option<String>, String> {
        if self.closed {
            return Err(self.changed("after it was closed"));
        }
        if delta.is_empty() {
            return Ok(None);
        }
        self.input.push_str(delta);
        Ok(Some(self.start() + &escaped(delta)))
    }

    /// The end, with the complete input when the server sends it (it must continue what
    /// streamed) → the rest of the JSON text (`None` when already closed with the same input).
    pub(crate) fn close(&mut self, complete: Option<&str>) -> Result<Option<String>, String> {
        if self.closed {
            return match complete {
                Some(complete) if complete != self.input => {
                    Err(self.changed("after it was closed"))
                }
                _ => Ok(None),
            };
        }
        let rest = match complete {
            Some(complete) => match complete.strip_prefix(self.input.as_str()) {
                Some(rest) => rest.to_string(),
                None => return Err(self.changed("non-monotonically")),
            },
            None => String::new(),
        };
        self.input.push_str(&rest);
        self.closed = true;
        Ok(Some(format!("{}{}\"}}", self.start(), escaped(&rest))))
    }

    /// A JSON piece with what waited in front of it.
    pub(crate) fn send(&mut self, piece: Option<String>) -> Option<String> {
        let unsent = std::mem::take(&mut self.unsent);
        match piece {
            Some(piece) => Some(unsent + &piece),
            None => (!unsent.is_empty()).then_some(unsent),
        }
    }

    fn changed(&self, how: &str) -> String {
        format!(
            "grammar tool input for property \"{}\" changed {how}",
            self.property
        )
    }
}

/// `text` as the inside of a JSON string.
fn escaped(text: &str) -> String {
    let quoted = json!(text).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::test_support::{model, request};
    use crate::provider::types::GrammarTool;

    fn tool(required: Value, lark: Option<&str>, regex: Option<&str>) -> GrammarTool {
        GrammarTool {
            name: "g".into(),
            lark: lark.map(str::to_string),
            regex: regex.map(str::to_string),
            parameters: json!({"type": "object", "required": required,
                "properties": {"code": {"type": "string"}, "n": {"type": "number"}}}),
        }
    }

    #[test]
    fn grammar_tools_need_the_compat_flag_a_variant_and_one_string_input() {
        let mut r = request(model("openai-responses", "p", "m"), vec![]);
        r.grammar_tools = vec![tool(json!(["code"]), Some("start: X"), Some("x"))];
        assert!(grammar_tools(&r).is_empty());
        r.model.compat = json!({"supportsOpenAIGrammarTools": true})
            .as_object()
            .cloned();
        let resolved = grammar_tools(&r);
        assert_eq!(resolved["g"].syntax, "lark");
        assert_eq!(resolved["g"].definition, "start: X");
        assert_eq!(resolved["g"].input_property, "code");
        r.grammar_tools = vec![tool(json!(["code"]), Some("  "), Some("x+"))];
        assert_eq!(grammar_tools(&r)["g"].syntax, "regex");
        for bad in [
            tool(json!(["code"]), None, None),
            tool(json!(["n"]), Some("start: X"), None),
            tool(json!(["code", "n"]), Some("start: X"), None),
        ] {
            r.grammar_tools = vec![bad];
            assert!(grammar_tools(&r).is_empty());
        }
    }

    #[test]
    fn custom_input_becomes_json_arguments_text_as_pi_streams_it() {
        // An initial input waits for the next piece.
        let mut input = CustomInput::new("code".into(), "a\"").unwrap();
        let piece = input.append("\n").unwrap();
        assert_eq!(input.send(piece).as_deref(), Some(r#"{"code":"a\"\n"#));
        assert_eq!(input.append("").unwrap(), None);
        // The complete input continues what streamed: the rest, then the end.
        let piece = input.close(Some("a\"\nb")).unwrap();
        assert_eq!(input.send(piece).as_deref(), Some(r#"b"}"#));
        // Closing again with the same input adds nothing; anything else is an error.
        assert_eq!(input.close(Some("a\"\nb")).unwrap(), None);
        assert_eq!(input.close(None).unwrap(), None);
        assert_eq!(
            input.close(Some("other")).unwrap_err(),
            r#"grammar tool input for property "code" changed after it was closed"#
        );
        assert!(input.append("more").is_err());
        let mut input = CustomInput::new("code".into(), "abc").unwrap();
        assert_eq!(
            input.close(Some("xyz")).unwrap_err(),
            r#"grammar tool input for property "code" changed non-monotonically"#
        );
        // Nothing streamed: the whole text at the end.
        let mut input = CustomInput::new("code".into(), "").unwrap();
        let piece = input.close(None).unwrap();
        assert_eq!(input.send(piece).as_deref(), Some(r#"{"code":""}"#));
    }
}
