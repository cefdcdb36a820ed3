//! Hook chaining (pure): how the answers of several extensions to one hook combine into the one
//! outcome the agent acts on. Extensions are asked one after the other in load order; each sees
//! the payload as the previous ones left it.
//!
//! - `tool_call`: `input` rewrites replace the arguments for later extensions and for execution;
//!   the first `block` wins and ends the chain. A failed step (error, crash, timeout, bad answer)
//!   blocks the call — fail-safe, as pi does when a `tool_call` handler throws.
//! - `tool_result`: `content` / `details` / `isError` patches apply in turn (middleware); a
//!   failed step changes nothing.
//! - `input`: `transform` replaces the text (and images) for later extensions; the first
//!   `handled` wins and ends the chain; a failed step changes nothing.
//! - `before_agent_start`: every `message` is collected in order; `systemPrompt` replaces the
//!   prompt, and later extensions see the replaced one (also as `systemPromptOptions`'
//!   `forceSystemPrompt`); `systemPromptOptions` (v2, an object) replaces the options later
//!   extensions see and the agent builds the run's prompt from; a failed step changes nothing.
//!
//! Input: the agent's payload, then one answer object (or one failure) per step. Output: a
//! `HookOutcome`. No IO; the host drives it.

use serde_json::{Map, Value};

use super::protocol::{HookKind, parse_content};
use crate::messages::ContentBlock;

/// What the agent does with a `tool_call`.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolCallOutcome {
    /// Run the tool; `args` is Some when an extension rewrote the arguments.
    Allow { args: Option<Value> },
    /// Do not run it; the reason is the tool result's text (`isError: true`). `terminate` (v2):
    /// the blocked result ends the run like a terminating tool result.
    Block { reason: String, terminate: bool },
}

/// Changes to a finished tool's result; None = keep the tool's own value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolResultPatch {
    pub content: Option<Vec<ContentBlock>>,
    pub details: Option<Value>,
    pub is_error: Option<bool>,
}

/// What happens to prompt text.
#[derive(Clone, Debug, PartialEq)]
pub enum InputOutcome {
    Continue,
    /// Use this text (and, when Some, these images: the raw JSON array) instead.
    Transform {
        text: String,
        images: Option<Value>,
    },
    /// An extension dealt with the input: no run starts.
    Handled,
}

/// A custom message an extension injects before a run.
#[derive(Clone, Debug, PartialEq)]
pub struct InjectedMessage {
    pub custom_type: String,
    /// A string or an array of content blocks.
    pub content: Value,
    pub display: bool,
    pub details: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct BeforeAgentStartOutcome {
    /// Persisted custom messages, sent to the model after the user's prompt.
    pub messages: Vec<InjectedMessage>,
    /// The system prompt for this prompt's run, when an extension replaced it.
    pub system_prompt: Option<String>,
    /// (v2) The `systemPromptOptions` as the extensions left them, when one changed them.
    pub system_prompt_options: Option<Value>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum HookOutcome {
    ToolCall(ToolCallOutcome),
    ToolResult(ToolResultPatch),
    Input(InputOutcome),
    BeforeAgentStart(BeforeAgentStartOutcome),
    /// (v2) The messages to send instead (JSON agent messages), when an extension replaced them.
    Context(Option<Value>),
    /// (v2) `session_before_switch` / `session_before_fork`: whether an extension cancelled.
    SessionChange {
        cancel: bool,
    },
    /// (v2) `before_provider_headers`: the changes to the request's headers, in order (a name
    /// set to a value, or removed).
    ProviderHeaders(Vec<(String, Option<String>)>),
    /// (v2) `before_provider_request`: the body to send instead, when an extension replaced it.
    ProviderPayload(Option<Value>),
    /// (v2) `session_before_tree` / `session_before_compact`: whether an extension cancelled,
    /// else the fields the extensions answered (checked; a later answer's field overrides an
    /// earlier one's).
    SessionPrepared {
        cancel: bool,
        answer: Map<String, Value>,
    },
    /// (v2) `user_bash`: an extension's `result` (`{output, exitCode, cancelled, truncated}`)
    /// answers the command; a failed extension blocks it (`Err`, as pi); Ok(None): run it.
    UserBash(Result<Option<Value>, String>),
    /// (v2) `resources_discover`: the paths every extension gave, in load order.
    ResourcesDiscover {
        skill_paths: Vec<String>,
        prompt_paths: Vec<String>,
    },
}

/// The text of a `tool_call` blocked because an extension failed.
pub fn failed_tool_call_reason(error: &str) -> String {
    format!("Extension failed, blocking execution: {error}")
}

/// One hook's progress through the chain.
#[derive(Clone, Debug)]
pub struct HookChain {
    kind: HookKind,
    /// The payload the next extension sees (rewritten by earlier steps).
    payload: Map<String, Value>,
    args_rewritten: bool,
    blocked: Option<String>,
    /// (v2) The blocking answer asked to end the run (`terminate: true`).
    terminate: bool,
    patch: ToolResultPatch,
    original_text: Option<Value>,
    original_images: Option<Value>,
    handled: bool,
    injected: Vec<InjectedMessage>,
    system_prompt_replaced: bool,
    options_replaced: bool,
    /// (v2 `context`) an extension replaced the messages.
    messages_replaced: bool,
    /// (v2 `before_provider_headers`) the header changes so far.
    header_patch: Vec<(String, Option<String>)>,
    /// (v2 `before_provider_request`) an extension replaced the payload.
    payload_replaced: bool,
    /// (v2 `session_before_tree` / `session_before_compact`) the answered fields.
    prepared: Map<String, Value>,
}

impl HookChain {
    pub fn new(kind: HookKind, payload: Value) -> HookChain {
        let payload = match payload {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        HookChain {
            kind,
            original_text: payload.get("text").cloned(),
            original_images: payload.get("images").cloned(),
            payload,
            args_rewritten: false,
            terminate: false,
            blocked: None,
            patch: ToolResultPatch::default(),
            handled: false,
            injected: Vec::new(),
            system_prompt_replaced: false,
            options_replaced: false,
            messages_replaced: false,
            header_patch: Vec::new(),
            payload_replaced: false,
            prepared: Map::new(),
        }
    }

    pub fn kind(&self) -> HookKind {
        self.kind
    }

    /// The payload for the next extension.
    pub fn payload(&self) -> Value {
        Value::Object(self.payload.clone())
    }

    /// Whether the chain has reached its final answer (block / handled): no more steps.
    pub fn is_settled(&self) -> bool {
        self.blocked.is_some() || self.handled
    }

    /// Applies one extension's answer. An `Err` means the answer was malformed: the caller
    /// reports it and then calls `apply_failure`.
    pub fn apply(&mut self, result: &Value) -> Result<(), String> {
        let empty = Map::new();
        let result = result.as_object().unwrap_or(&empty);
        match self.kind {
            HookKind::ToolCall => {
                if let Some(input) = result.get("input").filter(|v| !v.is_null()) {
                    if !input.is_object() {
                        return Err("tool_call result: input must be an object".into());
                    }
                    self.payload.insert("input".into(), input.clone());
                    self.args_rewritten = true;
                }
                if result.get("block").and_then(Value::as_bool) == Some(true) {
                    let reason = result
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("Tool execution was blocked");
                    self.blocked = Some(reason.to_string());
                    self.terminate = result.get("terminate").and_then(Value::as_bool) == Some(true);
                }
            }
            HookKind::ToolResult => {
                if let Some(content) = result.get("content").filter(|v| !v.is_null()) {
                    let blocks = parse_content(Some(content)).map_err(|e| e.0)?;
                    self.payload.insert("content".into(), content.clone());
                    self.patch.content = Some(blocks);
                }
                if let Some(details) = result.get("details").filter(|v| !v.is_null()) {
                    self.payload.insert("details".into(), details.clone());
                    self.patch.details = Some(details.clone());
                }
                if let Some(is_error) = result.get("isError").and_then(Value::as_bool) {
                    self.payload.insert("isError".into(), is_error.into());
                    self.patch.is_error = Some(is_error);
                }
            }
            HookKind::Input => match result.get("action").and_then(Value::as_str) {
                None | Some("continue") => {}
                Some("handled") => self.handled = true,
                Some("transform") => {
                    let Some(text) = result.get("text").and_then(Value::as_str) else {
                        return Err("input result: transform needs a text".into());
                    };
                    self.payload.insert("text".into(), text.into());
                    if let Some(images) = result.get("images").filter(|v| v.is_array()) {
                        self.payload.insert("images".into(), images.clone());
                    }
                }
                Some(other) => return Err(format!("input result: unknown action {other:?}")),
            },
            HookKind::SessionBeforeSwitch | HookKind::SessionBeforeFork => {
                // The first `cancel` settles the chain (nobody after it is asked).
                if result.get("cancel").and_then(Value::as_bool) == Some(true) {
                    self.handled = true;
                }
            }
            HookKind::SessionBeforeTree | HookKind::SessionBeforeCompact => {
                if result.get("cancel").and_then(Value::as_bool) == Some(true) {
                    self.handled = true;
                    return Ok(());
                }
                let fields = check_prepared(self.kind, result)?;
                self.prepared.extend(fields);
            }
            HookKind::ResourcesDiscover => {
                let mut lists = Vec::new();
                for key in ["skillPaths", "promptPaths", "themePaths"] {
                    let list = match result.get(key) {
                        None | Some(Value::Null) => Vec::new(),
                        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
                            items.clone()
                        }
                        Some(_) => {
                            return Err(format!(
                                "resources_discover result: {key} must be a list of paths"
                            ));
                        }
                    };
                    lists.push((key, list));
                }
                for (key, list) in lists {
                    if let Value::Array(all) = self
                        .prepared
                        .entry(key)
                        .or_insert_with(|| Value::Array(Vec::new()))
                    {
                        all.extend(list);
                    }
                }
            }
            HookKind::UserBash => {
                if result.get("operations").is_some_and(|v| !v.is_null()) {
                    return Err(
                        "user_bash result: operations cannot cross the protocol (answer a result)"
                            .into(),
                    );
                }
                if let Some(answer) = result.get("result").filter(|v| !v.is_null()) {
                    let ok = answer.get("output").is_some_and(Value::is_string)
                        && answer
                            .get("exitCode")
                            .is_none_or(|c| c.is_null() || c.is_i64())
                        && answer.get("cancelled").is_none_or(Value::is_boolean)
                        && answer.get("truncated").is_none_or(Value::is_boolean);
                    if !ok {
                        return Err("user_bash result: result needs output (text), exitCode (a whole number or null), cancelled and truncated (true/false)".into());
                    }
                    // The first result answers the command; nobody after it is asked.
                    self.prepared.insert("result".into(), answer.clone());
                    self.handled = true;
                }
            }
            HookKind::Context => {
                if let Some(messages) = result.get("messages").filter(|v| !v.is_null()) {
                    let Some(list) = messages.as_array() else {
                        return Err("context result: messages must be an array".into());
                    };
                    if list.iter().any(|m| !m.is_object()) {
                        return Err("context result: messages must be message objects".into());
                    }
                    self.payload.insert("messages".into(), messages.clone());
                    self.messages_replaced = true;
                }
            }
            HookKind::BeforeProviderHeaders => {
                if let Some(headers) = result.get("headers").filter(|v| !v.is_null()) {
                    let patch = parse_header_patch(headers)?;
                    let mut shown = self
                        .payload
                        .get("headers")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    for (name, value) in &patch {
                        shown.retain(|have, _| !have.eq_ignore_ascii_case(name));
                        if let Some(value) = value {
                            shown.insert(name.clone(), value.clone().into());
                        }
                    }
                    self.payload.insert("headers".into(), Value::Object(shown));
                    self.header_patch.extend(patch);
                }
            }
            HookKind::BeforeProviderRequest => {
                // Any value replaces the payload (pi: whatever a handler returns but undefined).
                if let Some(payload) = result.get("payload") {
                    self.payload.insert("payload".into(), payload.clone());
                    self.payload_replaced = true;
                }
            }
            HookKind::BeforeAgentStart => {
                if let Some(message) = result.get("message").filter(|v| !v.is_null()) {
                    self.injected.push(parse_injected(message)?);
                }
                if let Some(prompt) = result.get("systemPrompt").filter(|v| !v.is_null()) {
                    let Some(prompt) = prompt.as_str() else {
                        return Err(
                            "before_agent_start result: systemPrompt must be a string".into()
                        );
                    };
                    self.payload.insert("systemPrompt".into(), prompt.into());
                    self.system_prompt_replaced = true;
                }
                if let Some(options) = result.get("systemPromptOptions").filter(|v| !v.is_null()) {
                    if !options.is_object() {
                        return Err(
                            "before_agent_start result: systemPromptOptions must be an object"
                                .into(),
                        );
                    }
                    self.payload
                        .insert("systemPromptOptions".into(), options.clone());
                    self.options_replaced = true;
                }
                // pi keeps one field for both: a replaced prompt is the options' forced one.
                if self.system_prompt_replaced
                    && let Some(prompt) = self.payload.get("systemPrompt").cloned()
                    && let Some(Value::Object(options)) =
                        self.payload.get_mut("systemPromptOptions")
                {
                    options.insert("forceSystemPrompt".into(), prompt);
                }
            }
        }
        Ok(())
    }

    /// A step that produced no usable answer: `tool_call` blocks, the others change nothing.
    pub fn apply_failure(&mut self, error: &str) {
        if self.kind == HookKind::ToolCall && self.blocked.is_none() {
            self.blocked = Some(failed_tool_call_reason(error));
        }
        // pi: a `user_bash` error blocks the command instead of running it.
        if self.kind == HookKind::UserBash && self.blocked.is_none() {
            self.blocked = Some(error.to_string());
        }
    }

    pub fn finish(mut self) -> HookOutcome {
        match self.kind {
            HookKind::ToolCall => HookOutcome::ToolCall(match self.blocked {
                Some(reason) => ToolCallOutcome::Block {
                    reason,
                    terminate: self.terminate,
                },
                None => ToolCallOutcome::Allow {
                    args: self
                        .args_rewritten
                        .then(|| self.payload.get("input").cloned())
                        .flatten(),
                },
            }),
            HookKind::ToolResult => HookOutcome::ToolResult(self.patch),
            HookKind::Input => HookOutcome::Input(if self.handled {
                InputOutcome::Handled
            } else if self.payload.get("text") != self.original_text.as_ref()
                || self.payload.get("images") != self.original_images.as_ref()
            {
                InputOutcome::Transform {
                    text: self
                        .payload
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    images: self.payload.get("images").cloned(),
                }
            } else {
                InputOutcome::Continue
            }),
            HookKind::SessionBeforeSwitch | HookKind::SessionBeforeFork => {
                HookOutcome::SessionChange {
                    cancel: self.handled,
                }
            }
            HookKind::ResourcesDiscover => {
                let paths = |key: &str| -> Vec<String> {
                    self.prepared
                        .get(key)
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|p| p.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default()
                };
                HookOutcome::ResourcesDiscover {
                    skill_paths: paths("skillPaths"),
                    prompt_paths: paths("promptPaths"),
                }
            }
            HookKind::UserBash => HookOutcome::UserBash(match self.blocked {
                Some(error) => Err(error),
                None => Ok(self.prepared.get("result").cloned()),
            }),
            HookKind::SessionBeforeTree | HookKind::SessionBeforeCompact => {
                HookOutcome::SessionPrepared {
                    cancel: self.handled,
                    answer: self.prepared,
                }
            }
            HookKind::Context => HookOutcome::Context(
                self.messages_replaced
                    .then(|| self.payload.get("messages").cloned())
                    .flatten(),
            ),
            HookKind::BeforeProviderHeaders => HookOutcome::ProviderHeaders(self.header_patch),
            HookKind::BeforeProviderRequest => HookOutcome::ProviderPayload(
                self.payload_replaced
                    .then(|| self.payload.remove("payload"))
                    .flatten(),
            ),
            HookKind::BeforeAgentStart => HookOutcome::BeforeAgentStart(BeforeAgentStartOutcome {
                messages: self.injected,
                system_prompt: self
                    .system_prompt_replaced
                    .then(|| {
                        self.payload
                            .get("systemPrompt")
                            .and_then(Value::as_str)
                            .map(String::from)
                    })
                    .flatten(),
                system_prompt_options: self
                    .options_replaced
                    .then(|| self.payload.remove("systemPromptOptions"))
                    .flatten(),
            }),
        }
    }
}

/// A `before_provider_headers` answer's `headers`: names that are HTTP tokens, each with a value
/// without line breaks or NULs (set) or null (remove).
fn parse_header_patch(headers: &Value) -> Result<Vec<(String, Option<String>)>, String> {
    let Some(object) = headers.as_object() else {
        return Err("before_provider_headers result: headers must be an object".into());
    };
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    let mut patch = Vec::with_capacity(object.len());
    for (name, value) in object {
        if name.is_empty() || !name.chars().all(token) {
            return Err(format!(
                "before_provider_headers result: {name:?} is not a header name"
            ));
        }
        let value = match value {
            Value::Null => None,
            Value::String(text) if !text.contains(['\r', '\n', '\0']) => Some(text.clone()),
            _ => {
                return Err(format!(
                    "before_provider_headers result: the value of {name} must be a one-line string or null"
                ));
            }
        };
        patch.push((name.clone(), value));
    }
    Ok(patch)
}

/// The fields of a `session_before_tree` answer (`summary: {summary, details?}`,
/// `customInstructions`, `replaceInstructions`, `label`) or a `session_before_compact` answer
/// (`compaction: {summary, firstKeptEntryId, tokensBefore, details?}`), checked; others are
/// ignored. An answer with a field of the wrong shape is refused whole.
fn check_prepared(
    kind: HookKind,
    result: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let hook = kind.as_str();
    let mut fields = Map::new();
    let present = |key: &str| result.get(key).filter(|v| !v.is_null());
    let object_with_summary = |key: &str| -> Result<Option<Value>, String> {
        let Some(value) = present(key) else {
            return Ok(None);
        };
        let ok = value
            .get("summary")
            .is_some_and(|s| s.as_str().is_some_and(|t| !t.is_empty()));
        if !value.is_object() || !ok {
            return Err(format!(
                "{hook} result: {key} needs a non-empty summary text"
            ));
        }
        Ok(Some(value.clone()))
    };
    if kind == HookKind::SessionBeforeTree {
        if let Some(summary) = object_with_summary("summary")? {
            fields.insert("summary".into(), summary);
        }
        for (key, is_right) in [
            ("customInstructions", Value::is_string as fn(&Value) -> bool),
            ("replaceInstructions", Value::is_boolean),
            ("label", Value::is_string),
        ] {
            if let Some(value) = present(key) {
                if !is_right(value) {
                    return Err(format!("{hook} result: {key} has the wrong type"));
                }
                fields.insert(key.into(), value.clone());
            }
        }
    } else if let Some(compaction) = object_with_summary("compaction")? {
        if !compaction
            .get("firstKeptEntryId")
            .is_some_and(Value::is_string)
            || !compaction.get("tokensBefore").is_some_and(Value::is_u64)
        {
            return Err(format!(
                "{hook} result: compaction needs firstKeptEntryId (text) and tokensBefore (a whole number)"
            ));
        }
        fields.insert("compaction".into(), compaction);
    }
    Ok(fields)
}

fn parse_injected(message: &Value) -> Result<InjectedMessage, String> {
    let Some(object) = message.as_object() else {
        return Err("before_agent_start result: message must be an object".into());
    };
    let custom_type = object
        .get("customType")
        .and_then(Value::as_str)
        .ok_or("before_agent_start result: message.customType must be a string")?;
    let content = match object.get("content") {
        Some(content @ (Value::String(_) | Value::Array(_))) => content.clone(),
        _ => {
            return Err(
                "before_agent_start result: message.content must be a string or blocks".into(),
            );
        }
    };
    Ok(InjectedMessage {
        custom_type: custom_type.to_string(),
        content,
        display: object.get("display").and_then(Value::as_bool) != Some(false),
        details: object.get("details").cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_call_rewrites_chain_and_first_block_wins() {
        let mut chain = HookChain::new(
            HookKind::ToolCall,
            json!({"toolName":"bash","toolCallId":"c1","input":{"command":"ls"}}),
        );
        chain.apply(&json!({})).unwrap();
        assert!(!chain.is_settled());
        chain.apply(&json!({"input":{"command":"ls -a"}})).unwrap();
        assert_eq!(chain.payload()["input"]["command"], "ls -a");
        assert_eq!(
            chain.clone().finish(),
            HookOutcome::ToolCall(ToolCallOutcome::Allow {
                args: Some(json!({"command":"ls -a"}))
            })
        );
        chain.apply(&json!({"block":true})).unwrap();
        assert!(chain.is_settled());
        assert_eq!(
            chain.finish(),
            HookOutcome::ToolCall(ToolCallOutcome::Block {
                reason: "Tool execution was blocked".into(),
                terminate: false,
            })
        );
    }

    #[test]
    fn tool_call_without_answers_allows_unchanged_and_failure_blocks() {
        let chain = HookChain::new(HookKind::ToolCall, json!({"input":{}}));
        assert_eq!(
            chain.finish(),
            HookOutcome::ToolCall(ToolCallOutcome::Allow { args: None })
        );
        let mut chain = HookChain::new(HookKind::ToolCall, json!({"input":{}}));
        chain.apply_failure("timed out");
        assert_eq!(
            chain.finish(),
            HookOutcome::ToolCall(ToolCallOutcome::Block {
                reason: "Extension failed, blocking execution: timed out".into(),
                terminate: false,
            })
        );
    }

    #[test]
    fn tool_result_patches_accumulate() {
        let mut chain = HookChain::new(
            HookKind::ToolResult,
            json!({"content":[{"type":"text","text":"a"}],"isError":false}),
        );
        chain.apply(&json!({"isError":true})).unwrap();
        chain.apply(&json!({"content":"b"})).unwrap();
        chain.apply_failure("crashed");
        assert!(chain.apply(&json!({"content":7})).is_err());
        let HookOutcome::ToolResult(patch) = chain.finish() else {
            panic!()
        };
        assert_eq!(patch.is_error, Some(true));
        assert_eq!(patch.content.unwrap().len(), 1);
        assert_eq!(patch.details, None);
    }

    #[test]
    fn input_transforms_chain_and_handled_wins() {
        let mut chain = HookChain::new(HookKind::Input, json!({"text":"?q hi","source":"rpc"}));
        chain
            .apply(&json!({"action":"transform","text":"Briefly: hi"}))
            .unwrap();
        assert_eq!(chain.payload()["text"], "Briefly: hi");
        assert_eq!(
            chain.clone().finish(),
            HookOutcome::Input(InputOutcome::Transform {
                text: "Briefly: hi".into(),
                images: None
            })
        );
        chain.apply(&json!({"action":"handled"})).unwrap();
        assert_eq!(chain.finish(), HookOutcome::Input(InputOutcome::Handled));
        let unchanged = HookChain::new(HookKind::Input, json!({"text":"x"}));
        assert_eq!(
            unchanged.finish(),
            HookOutcome::Input(InputOutcome::Continue)
        );
        let mut bad = HookChain::new(HookKind::Input, json!({"text":"x"}));
        assert!(bad.apply(&json!({"action":"explode"})).is_err());
    }

    #[test]
    fn before_agent_start_collects_messages_and_chains_the_prompt() {
        let mut chain = HookChain::new(
            HookKind::BeforeAgentStart,
            json!({"prompt":"hi","systemPrompt":"base"}),
        );
        chain
            .apply(
                &json!({"message":{"customType":"ctx","content":"extra"},"systemPrompt":"base+1"}),
            )
            .unwrap();
        assert_eq!(chain.payload()["systemPrompt"], "base+1");
        chain
            .apply(&json!({"message":{"customType":"ctx2","content":"more","display":false}}))
            .unwrap();
        let HookOutcome::BeforeAgentStart(outcome) = chain.finish() else {
            panic!()
        };
        assert_eq!(outcome.messages.len(), 2);
        assert!(!outcome.messages[1].display);
        assert_eq!(outcome.system_prompt.as_deref(), Some("base+1"));
    }

    #[test]
    fn provider_header_changes_chain_and_bad_ones_are_refused() {
        let mut chain = HookChain::new(
            HookKind::BeforeProviderHeaders,
            json!({"headers": {"X-Team": "a", "X-Drop": "1"}}),
        );
        chain
            .apply(&json!({"headers": {"x-team": "b", "X-New": "n"}}))
            .unwrap();
        assert_eq!(
            chain.payload()["headers"],
            json!({"X-Drop": "1", "x-team": "b", "X-New": "n"})
        );
        chain.apply(&json!({"headers": {"X-Drop": null}})).unwrap();
        assert!(
            chain
                .apply(&json!({"headers": {"X-Bad": "a\r\nb"}}))
                .is_err()
        );
        assert!(chain.apply(&json!({"headers": {"bad name": "v"}})).is_err());
        assert!(chain.apply(&json!({"headers": ["x"]})).is_err());
        assert_eq!(
            chain.finish(),
            HookOutcome::ProviderHeaders(vec![
                ("x-team".into(), Some("b".into())),
                ("X-New".into(), Some("n".into())),
                ("X-Drop".into(), None),
            ])
        );
    }

    #[test]
    fn provider_payload_is_replaced_by_any_answer_that_names_one() {
        let mut chain = HookChain::new(
            HookKind::BeforeProviderRequest,
            json!({"payload": {"model": "m"}}),
        );
        chain.apply(&json!({})).unwrap();
        assert_eq!(chain.clone().finish(), HookOutcome::ProviderPayload(None));
        chain
            .apply(&json!({"payload": {"model": "m", "temperature": 0}}))
            .unwrap();
        assert_eq!(chain.payload()["payload"]["temperature"], 0);
        assert_eq!(
            chain.finish(),
            HookOutcome::ProviderPayload(Some(json!({"model": "m", "temperature": 0})))
        );
    }

    #[test]
    fn context_answers_replace_the_messages_in_turn() {
        let mut chain = HookChain::new(HookKind::Context, json!({"messages": [{"role": "user"}]}));
        chain.apply(&json!({})).unwrap();
        assert_eq!(chain.clone().finish(), HookOutcome::Context(None));
        assert!(chain.apply(&json!({"messages": "x"})).is_err());
        chain
            .apply(&json!({"messages": [{"role": "user", "content": "b"}]}))
            .unwrap();
        assert_eq!(chain.payload()["messages"][0]["content"], "b");
        assert_eq!(
            chain.finish(),
            HookOutcome::Context(Some(json!([{"role": "user", "content": "b"}])))
        );
    }
}
