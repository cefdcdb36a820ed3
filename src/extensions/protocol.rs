//! The extension wire protocol (pure): parsing the JSONL lines an extension writes on its stdout
//! into `ExtensionMessage`s, and building the lines pi-rs writes on the extension's stdin. Only
//! this file knows the extension wire format; the README's Extensions section is the human description.
//!
//! Input: one line's bytes (already framed). Output: a typed message or a `ProtocolError` naming
//! what was wrong; nothing here panics on peer data. Builders return the line without its LF.

use std::fmt;

use serde::de::Error as _;
use serde_json::{Map, Value, json};

use crate::messages::ContentBlock;
use crate::tools::ToolOutput;

/// The base protocol version: `hello.protocol`, understood by every extension.
pub const PROTOCOL_VERSION: u64 = 1;
/// The newest protocol version pi-rs speaks (`hello.maxProtocol`); an extension chooses its
/// version in `register.protocol` (1 or 2).
pub const MAX_PROTOCOL_VERSION: u64 = 2;

/// A hook: a point where an extension's answer can change what the agent does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookKind {
    ToolCall,
    ToolResult,
    Input,
    BeforeAgentStart,
    /// (v2) Before each model request: the messages it sends, which the answer may replace.
    Context,
    /// (v2) Before a new session or a switch to another one; `{cancel: true}` stops it.
    SessionBeforeSwitch,
    /// (v2) Before a fork or clone; `{cancel: true}` stops it.
    SessionBeforeFork,
    // --- provider hooks (issue 23 item 8; src/extensions/providers.rs) ---
    /// (v2) The extra headers of a model request; `{headers: {name: value | null}}` sets or
    /// removes headers of the request.
    BeforeProviderHeaders,
    /// (v2) The request body as built; `{payload}` replaces it.
    BeforeProviderRequest,
    /// (v2) Before a tree navigation (`navigate_tree`); may cancel it or give the summary.
    SessionBeforeTree,
    /// (v2) Before a compaction; may cancel it or give the compaction (summary) itself.
    SessionBeforeCompact,
    /// (v2) Before the RPC `bash` command runs; may answer it instead (`result`).
    UserBash,
    /// (v2) After `session_start` (startup, reload): skill and prompt paths to load too.
    ResourcesDiscover,
}

impl HookKind {
    pub const ALL: [HookKind; 13] = [
        HookKind::ToolCall,
        HookKind::ToolResult,
        HookKind::Input,
        HookKind::BeforeAgentStart,
        HookKind::Context,
        HookKind::SessionBeforeSwitch,
        HookKind::SessionBeforeFork,
        HookKind::BeforeProviderHeaders,
        HookKind::BeforeProviderRequest,
        HookKind::SessionBeforeTree,
        HookKind::SessionBeforeCompact,
        HookKind::UserBash,
        HookKind::ResourcesDiscover,
    ];

    /// Registered only by protocol-2 extensions (for protocol 1 the name stays unknown).
    pub fn needs_v2(self) -> bool {
        matches!(
            self,
            HookKind::Context
                | HookKind::SessionBeforeSwitch
                | HookKind::SessionBeforeFork
                | HookKind::BeforeProviderHeaders
                | HookKind::BeforeProviderRequest
                | HookKind::SessionBeforeTree
                | HookKind::SessionBeforeCompact
                | HookKind::UserBash
                | HookKind::ResourcesDiscover
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::ToolCall => "tool_call",
            HookKind::ToolResult => "tool_result",
            HookKind::Input => "input",
            HookKind::BeforeAgentStart => "before_agent_start",
            HookKind::Context => "context",
            HookKind::SessionBeforeSwitch => "session_before_switch",
            HookKind::SessionBeforeFork => "session_before_fork",
            HookKind::BeforeProviderHeaders => "before_provider_headers",
            HookKind::BeforeProviderRequest => "before_provider_request",
            HookKind::SessionBeforeTree => "session_before_tree",
            HookKind::SessionBeforeCompact => "session_before_compact",
            HookKind::UserBash => "user_bash",
            HookKind::ResourcesDiscover => "resources_discover",
        }
    }

    pub fn parse(text: &str) -> Option<HookKind> {
        HookKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// A slash command an extension offers.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandDecl {
    pub name: String,
    pub description: Option<String>,
}

/// A tool an extension offers to the model and executes itself.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDecl {
    pub name: String,
    pub label: Option<String>,
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: Value,
    pub prompt_snippet: Option<String>,
    pub prompt_guidelines: Vec<String>,
    /// (v2) `executionMode: "sequential"`: a batch with such a call runs its calls one by one.
    pub sequential: bool,
    /// `constrainedSampling` as given (pi 1.6.0: `{type: "json_schema", strict}` or
    /// `{type: "grammar", variants}`): it goes into the tool's declaration in the transcript,
    /// which decides how the providers send the tool.
    pub constrained_sampling: Option<Value>,
}

/// A command-line flag an extension declares (values arrive in `hello.flags`).
#[derive(Clone, Debug, PartialEq)]
pub struct FlagDecl {
    pub name: String,
    pub description: Option<String>,
    /// "boolean" or "string".
    pub kind: String,
    pub default: Option<Value>,
}

/// Everything an extension declares in its `register` line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Registration {
    /// The protocol version the extension chose (1 or 2).
    pub protocol: u64,
    pub name: Option<String>,
    pub commands: Vec<CommandDecl>,
    pub tools: Vec<ToolDecl>,
    /// Event types it wants (`"*"` = every event).
    pub events: Vec<String>,
    pub hooks: Vec<HookKind>,
    pub flags: Vec<FlagDecl>,
    /// (v2) `providers`: `[{name, config}]`, as `register_provider` takes them, registered
    /// before the start-up model is chosen (pi's `registerProvider` during loading).
    pub providers: Vec<ProviderDecl>,
    /// (v2) `virtualModels`: `[{provider, id, …}]`, as `register_virtual_model` takes its
    /// `model`, registered with the providers (pi's `registerVirtualModel` during loading).
    pub virtual_models: Vec<VirtualModelDecl>,
}

/// A provider an extension registers (pi's `registerProvider(name, config)`).
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderDecl {
    pub name: String,
    /// pi's provider config (models.json's provider shape: `baseUrl`, `apiKey`, `api`,
    /// `headers`, `authHeader`, `models`, …; `streamSimple: true` when the extension streams).
    pub config: Value,
}

impl Registration {
    pub fn wants_event(&self, event_type: &str) -> bool {
        self.events.iter().any(|e| e == "*" || e == event_type)
    }
    pub fn handles(&self, hook: HookKind) -> bool {
        self.hooks.contains(&hook)
    }
}

/// When a message an extension sends joins the conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// After the current turn's tool calls, before the next model call.
    Steer,
    /// When the agent would otherwise stop.
    FollowUp,
    /// With the next user prompt (custom messages only).
    NextTurn,
    /// (v2, user messages) Now: starts a run when idle, refused while one runs.
    Immediate,
}

impl Delivery {
    fn parse(text: &str) -> Option<Delivery> {
        match text {
            "steer" => Some(Delivery::Steer),
            "followUp" => Some(Delivery::FollowUp),
            "nextTurn" => Some(Delivery::NextTurn),
            "immediate" => Some(Delivery::Immediate),
            _ => None,
        }
    }
}

/// Something an extension asks the agent to do, at any time.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// A user message, as if typed (`content` is a string or an array of content blocks).
    /// `deliver_as` None: start a run when idle, steer when busy.
    SendUserMessage {
        content: Value,
        deliver_as: Option<Delivery>,
        /// (v2) `expandPromptTemplates`: run an extension command, expand skills and templates.
        expand: bool,
    },
    /// A custom message (role `custom`), seen by the model.
    SendMessage {
        custom_type: String,
        content: Value,
        display: bool,
        details: Option<Value>,
        deliver_as: Option<Delivery>,
        trigger_turn: bool,
    },
    /// A custom session entry (not seen by the model).
    AppendEntry {
        custom_type: String,
        data: Option<Value>,
    },
    SetSessionName {
        name: String,
    },
    /// `label` None clears the label.
    SetLabel {
        entry_id: String,
        label: Option<String>,
    },
    /// The extension asks pi-rs to shut down (as `ctx.shutdown()`).
    Shutdown,
}

/// The dialog methods: they wait for the client's answer.
pub const DIALOG_METHODS: [&str; 4] = ["select", "confirm", "input", "editor"];

/// One line from an extension.
#[derive(Clone, Debug, PartialEq)]
pub enum ExtensionMessage {
    Register {
        protocol: u64,
        registration: Registration,
    },
    /// The answer to `hook` `id`: a result object (may be empty: no change) or an error text.
    HookResult {
        id: String,
        result: Result<Value, String>,
    },
    ToolUpdate {
        id: String,
        partial: ToolOutput,
    },
    ToolResult {
        id: String,
        output: ToolOutput,
        /// (v2) `result.terminate`: no follow-up model call when every result of the batch says so.
        terminate: bool,
    },
    CommandDone {
        id: String,
        error: Option<String>,
    },
    /// (v2) One event of a model response the extension streams for its provider (`id`: the
    /// `stream_request`'s); `event` is an object with a string `type`.
    StreamEvent {
        id: String,
        event: Value,
    },
    /// (v2) The answer to a request pi-rs made of one extension (`id`: its id): `route_result`
    /// (`{model: {provider, id}, thinkingLevel?, state?}`), `refresh_models_result` (`{models}`),
    /// `oauth_refresh_result` (`{access, refresh, expires, …}`), `oauth_api_key_result`
    /// (`{apiKey}`) or `oauth_modify_models_result` (`{models}`); Err: the extension's `error`,
    /// or a result that is not an object.
    RequestResult {
        id: String,
        /// The request it answers (`route`, …: the message type without `_result`).
        request: &'static str,
        result: Result<Value, String>,
    },
    Action(Action),
    /// A UI request. `id` is the extension's own id (dialogs only); `request` holds the method's
    /// fields in the order of pi's `extension_ui_request`, without `type` and `id`.
    Ui {
        id: Option<String>,
        method: String,
        request: Map<String, Value>,
    },
    /// A non-fatal error the extension reports about itself. A host of several extensions (the
    /// TypeScript host) names the one it is about (`extensionPath`) and when (`event`).
    Error {
        error: String,
        extension_path: Option<String>,
        event: Option<String>,
    },
    /// (v2) A question for pi-rs, answered by a `query_result` with the same `id`. `query` is
    /// Err (the answer's error text) when the name or its fields are not understood.
    Query {
        id: String,
        query: Result<Query, String>,
    },
    /// (v2) A control request; `action` is Err (the answer's error) when its fields are bad.
    Control {
        id: Option<String>,
        action: Result<ControlAction, String>,
    },
}

/// (v2) The requests pi-rs makes of one extension, and the type of their answers.
const REQUESTS: &[(&str, &str)] = &[
    ("route", "route_result"),
    ("refresh_models", "refresh_models_result"),
    ("oauth_refresh", "oauth_refresh_result"),
    ("oauth_api_key", "oauth_api_key_result"),
    ("oauth_modify_models", "oauth_modify_models_result"),
];

impl ExtensionMessage {
    /// The message type exists only in protocol 2 (a v1 extension sending it is malformed).
    pub fn needs_v2(&self) -> bool {
        matches!(
            self,
            ExtensionMessage::Query { .. }
                | ExtensionMessage::Control { .. }
                | ExtensionMessage::StreamEvent { .. }
                | ExtensionMessage::RequestResult { .. }
        )
    }

    /// The wire name of the message type (for errors).
    pub fn type_name(&self) -> &'static str {
        match self {
            ExtensionMessage::Register { .. } => "register",
            ExtensionMessage::HookResult { .. } => "hook_result",
            ExtensionMessage::ToolUpdate { .. } => "tool_update",
            ExtensionMessage::ToolResult { .. } => "tool_result",
            ExtensionMessage::CommandDone { .. } => "command_done",
            ExtensionMessage::StreamEvent { .. } => "stream_event",
            ExtensionMessage::RequestResult { request, .. } => REQUESTS
                .iter()
                .find(|(name, _)| name == request)
                .map_or("route_result", |(_, answer)| answer),
            ExtensionMessage::Action(_) => "action",
            ExtensionMessage::Ui { .. } => "ui",
            ExtensionMessage::Error { .. } => "error",
            ExtensionMessage::Query { .. } => "query",
            ExtensionMessage::Control { .. } => "control",
        }
    }
}

/// (v2) A control request (`{"type":<name>, "id"?, …}`): pi-rs answers `action_result` with the
/// same `id` when one is given.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlAction {
    /// `set_active_tools` `{names}`: the tools offered from the next request on (unknown names
    /// are ignored, as pi does). Answer: the active names.
    SetActiveTools { names: Vec<String> },
    /// `set_model` `{provider, modelId}`. Answer: true, or false when the provider has no
    /// credentials (the model stays).
    SetModel { provider: String, model_id: String },
    /// `set_thinking_level` `{level}`. Answer: the effective (clamped) level.
    SetThinkingLevel { level: String },
    /// `compact` `{customInstructions?}`: starts a compaction. Answer: `{"started":true}`.
    Compact { custom_instructions: Option<String> },
    /// `abort`: aborts the run in progress. Answer: null.
    Abort,
    /// `new_session` `{parentSession?}`. Answer: `{"cancelled":false}`.
    NewSession { parent_session: Option<String> },
    /// `fork` `{entryId}`. Answer: `{"text", "cancelled":false}`.
    Fork { entry_id: String },
    /// `switch_session` `{sessionPath}`. Answer: `{"cancelled":false}`.
    SwitchSession { session_path: String },
    /// `wait_for_idle`: answered (null) once no run, compaction or retry is in progress.
    WaitForIdle,
    /// `register_tool` `{tool}` (as in `register.tools[]`): offered from the next request on;
    /// replaces this extension's tool of that name. Answer: null.
    RegisterTool(ToolDecl),
    /// `unregister_tool` `{name}`: this extension's tool is no longer offered. Answer: whether
    /// it had one.
    UnregisterTool { name: String },
    /// `register_command` `{command}` (as in `register.commands[]`). Answer: null.
    RegisterCommand(CommandDecl),
    /// `unregister_command` `{name}`. Answer: whether it had one.
    UnregisterCommand { name: String },
    /// `exec` `{command, args?, cwd?, timeout?, maxBuffer?}` (needs an `id`): runs a program
    /// through pi-rs (approval gate as `bash`, tool sandbox). Answer: `{stdout, stderr, code,
    /// killed, truncated}`.
    Exec(super::exec::ExecSpec),
    /// `execute_tool` `{toolName, args, cwd?, timeout?}` (needs an `id`): runs one of pi-rs's
    /// built-in tools through the approval gate (as that tool), the tool sandbox, redaction and
    /// abort. Partial results come as `action_update`; answer: `{content, details?, isError}`.
    ExecuteTool(super::tool_run::ToolRunSpec),
    /// `cancel_request` `{requestId}`: ends this extension's `exec` or `execute_tool` request of
    /// that id (its answer follows as usual). Answer (with an `id`): whether one was running.
    CancelRequest { request_id: String },
    // --- providers (issue 23 item 9; src/extensions/providers.rs) ---
    /// `register_provider` `{name, config}` (pi's `registerProvider` config: `baseUrl`,
    /// `apiKey`, `api`, `headers`, `authHeader`, `models`). Answer: null.
    RegisterProvider { name: String, config: Value },
    /// `unregister_provider` `{name}`. Answer: whether it was registered.
    UnregisterProvider { name: String },
    /// `reload`: extensions, skills, prompt templates and context files are loaded anew (pi's
    /// `ctx.reload()`). Answer: null, before the extensions stop.
    Reload,
    /// `navigate_tree` `{targetId, summarize?, customInstructions?, replaceInstructions?,
    /// label?}` (pi's `ctx.navigateTree`). Answer: `{"cancelled"}`.
    NavigateTree(TreeTarget),
    // --- MCP servers (issue 28; src/agent/mcp_servers.rs) ---
    /// `register_mcp_server` `{name, config}` (pi's `registerMcpServer`; `config` an
    /// `mcpServers` entry): connects it, or replaces this extension's registration of that
    /// name. Answer: null, or pi's error for an invalid or taken name or config.
    RegisterMcpServer { name: String, config: Value },
    /// `unregister_mcp_server` `{name}`: closes this extension's server. Answer: null.
    UnregisterMcpServer { name: String },
    // --- virtual models (pi 1.6.0 `registerVirtualModel`; src/agent/virtual_models.rs) ---
    /// `register_virtual_model` `{model: {provider, id, name?, thinkingLevels?, contextWindow?,
    /// maxTokens?, input?}}`: a selectable model whose requests this extension routes (`route`).
    /// Answer: null.
    RegisterVirtualModel(VirtualModelDecl),
    /// `unregister_virtual_model` `{provider, modelId}`. Answer: whether it was registered.
    UnregisterVirtualModel { provider: String, model_id: String },
}

/// (v2) A virtual model's definition (pi 1.6.0's `registerVirtualModel` without `route`, which
/// the extension answers over `route` requests).
#[derive(Clone, Debug, PartialEq)]
pub struct VirtualModelDecl {
    pub provider: String,
    pub id: String,
    pub name: String,
    /// The levels offered for selection (default `["off"]`).
    pub thinking_levels: Vec<String>,
    pub context_window: Option<u64>,
    pub max_tokens: Option<u64>,
    /// Input types offered for selection (default text and images).
    pub input: Option<Vec<String>>,
}

/// (v2) The control types of virtual models.
const VIRTUAL_CONTROL_TYPES: [&str; 2] = ["register_virtual_model", "unregister_virtual_model"];

fn parse_virtual_control(kind: &str, fields: &Fields) -> Result<ControlAction, String> {
    let err = |e: ProtocolError| format!("{kind}: {e}");
    if kind == "unregister_virtual_model" {
        return Ok(ControlAction::UnregisterVirtualModel {
            provider: fields.string("provider").map_err(err)?,
            model_id: fields.string("modelId").map_err(err)?,
        });
    }
    let object = fields
        .0
        .get("model")
        .and_then(Value::as_object)
        .ok_or("register_virtual_model: model must be an object")?;
    parse_virtual_model(kind, object).map(ControlAction::RegisterVirtualModel)
}

/// A virtual model's definition (`register_virtual_model.model`, `register.virtualModels[]`).
fn parse_virtual_model(
    kind: &str,
    object: &Map<String, Value>,
) -> Result<VirtualModelDecl, String> {
    let err = |e: ProtocolError| format!("{kind}: {e}");
    let model = Fields(object);
    let strings = |key: &str| -> Result<Option<Vec<String>>, String> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(String::from))
                .collect::<Option<Vec<String>>>()
                .map(Some)
                .ok_or(format!("{kind}: model.{key} must be strings")),
            Some(_) => Err(format!("{kind}: model.{key} must be an array of strings")),
        }
    };
    let number = |key: &str| match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or(format!("{kind}: model.{key} must be a whole number")),
    };
    let provider = model.string("provider").map_err(err)?;
    let id = model.string("id").map_err(err)?;
    if provider.trim().is_empty() || id.trim().is_empty() {
        return Err("Virtual model provider and id must not be empty.".into());
    }
    let thinking_levels = strings("thinkingLevels")?.unwrap_or_else(|| vec!["off".into()]);
    if let Some(level) = thinking_levels
        .iter()
        .find(|l| crate::config::ThinkingLevel::parse(l).is_none())
    {
        return Err(format!("{kind}: unknown thinking level {level:?}"));
    }
    Ok(VirtualModelDecl {
        name: model
            .opt_string("name")
            .map_err(err)?
            .unwrap_or_else(|| id.clone()),
        provider,
        id,
        thinking_levels,
        context_window: number("contextWindow")?,
        max_tokens: number("maxTokens")?,
        input: strings("input")?,
    })
}

/// (v2) The control types of MCP servers, apart from `CONTROL_TYPES` (issue 28's addition).
const MCP_CONTROL_TYPES: [&str; 2] = ["register_mcp_server", "unregister_mcp_server"];

fn parse_mcp_control(kind: &str, fields: &Fields) -> Result<ControlAction, String> {
    let name = fields.string("name").map_err(|e| format!("{kind}: {e}"))?;
    Ok(match kind {
        "register_mcp_server" => ControlAction::RegisterMcpServer {
            name,
            config: match fields.0.get("config") {
                Some(config @ Value::Object(_)) => config.clone(),
                _ => return Err("register_mcp_server: config must be an object".into()),
            },
        },
        _ => ControlAction::UnregisterMcpServer { name },
    })
}

/// (v2) Where `navigate_tree` goes, and how.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TreeTarget {
    pub target_id: String,
    pub summarize: bool,
    pub custom_instructions: Option<String>,
    pub replace_instructions: Option<bool>,
    pub label: Option<String>,
}

const CONTROL_TYPES: [&str; 20] = [
    "execute_tool",
    "cancel_request",
    "register_provider",
    "unregister_provider",
    "reload",
    "navigate_tree",
    "exec",
    "register_tool",
    "unregister_tool",
    "register_command",
    "unregister_command",
    "set_active_tools",
    "set_model",
    "set_thinking_level",
    "compact",
    "abort",
    "new_session",
    "fork",
    "switch_session",
    "wait_for_idle",
];

fn parse_control(kind: &str, fields: &Fields) -> Result<ControlAction, String> {
    let text = |key: &str| fields.string(key).map_err(|e| format!("{kind}: {e}"));
    let opt_text = |key: &str| fields.opt_string(key).map_err(|e| format!("{kind}: {e}"));
    Ok(match kind {
        "set_active_tools" => {
            let names = fields
                .array("names")
                .map_err(|e| e.0)?
                .iter()
                .map(|n| n.as_str().map(String::from))
                .collect::<Option<Vec<String>>>()
                .ok_or("set_active_tools: names must be strings")?;
            ControlAction::SetActiveTools { names }
        }
        "set_model" => ControlAction::SetModel {
            provider: text("provider")?,
            model_id: text("modelId")?,
        },
        "set_thinking_level" => ControlAction::SetThinkingLevel {
            level: text("level")?,
        },
        "compact" => ControlAction::Compact {
            custom_instructions: opt_text("customInstructions")?,
        },
        "abort" => ControlAction::Abort,
        "reload" => ControlAction::Reload,
        "navigate_tree" => {
            let flag = |key: &str| match fields.0.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(_) => Err(format!("navigate_tree: {key} must be true or false")),
            };
            ControlAction::NavigateTree(TreeTarget {
                target_id: text("targetId")?,
                summarize: flag("summarize")?.unwrap_or(false),
                custom_instructions: opt_text("customInstructions")?,
                replace_instructions: flag("replaceInstructions")?,
                label: opt_text("label")?,
            })
        }
        "new_session" => ControlAction::NewSession {
            parent_session: opt_text("parentSession")?,
        },
        "fork" => ControlAction::Fork {
            entry_id: text("entryId")?,
        },
        "switch_session" => ControlAction::SwitchSession {
            session_path: text("sessionPath")?,
        },
        "register_tool" | "register_command" => {
            let key = if kind == "register_tool" {
                "tool"
            } else {
                "command"
            };
            let object = fields
                .0
                .get(key)
                .and_then(Value::as_object)
                .ok_or_else(|| format!("{kind}: {key} must be an object"))?;
            let decl = |e: ProtocolError| format!("{kind}: {e}");
            if kind == "register_tool" {
                ControlAction::RegisterTool(parse_tool_decl(object).map_err(decl)?)
            } else {
                ControlAction::RegisterCommand(parse_command_decl(object).map_err(decl)?)
            }
        }
        "exec" => {
            let args = fields
                .array("args")
                .map_err(|e| format!("exec: {}", e.0))?
                .iter()
                .map(|a| a.as_str().map(String::from))
                .collect::<Option<Vec<String>>>()
                .ok_or("exec: args must be strings")?;
            let number = |key: &str| match fields.0.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(Some)
                    .ok_or(format!("exec: {key} must be a whole number")),
            };
            ControlAction::Exec(super::exec::ExecSpec {
                command: text("command")?,
                args,
                cwd: opt_text("cwd")?,
                timeout: number("timeout")?.map(std::time::Duration::from_millis),
                max_buffer: number("maxBuffer")?.map(|n| n as usize),
            })
        }
        "execute_tool" => {
            let tool_name = text("toolName")?;
            if !crate::tools::ALL_TOOLS.contains(&tool_name.as_str()) {
                let shown: String = tool_name.chars().take(80).collect();
                return Err(format!(
                    "execute_tool: unknown tool {shown:?} (pi-rs runs its built-in tools: {})",
                    crate::tools::ALL_TOOLS.join(", ")
                ));
            }
            let args = match fields.0.get("args") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(args @ Value::Object(_)) => args.clone(),
                Some(_) => return Err("execute_tool: args must be an object".into()),
            };
            let timeout = match fields.0.get("timeout") {
                None | Some(Value::Null) => None,
                Some(v) => Some(std::time::Duration::from_millis(
                    v.as_u64()
                        .ok_or("execute_tool: timeout must be a whole number (ms)")?,
                )),
            };
            ControlAction::ExecuteTool(super::tool_run::ToolRunSpec {
                tool_name,
                args,
                cwd: opt_text("cwd")?,
                timeout,
            })
        }
        "cancel_request" => ControlAction::CancelRequest {
            request_id: text("requestId")?,
        },
        "unregister_tool" => ControlAction::UnregisterTool {
            name: text("name")?,
        },
        "unregister_command" => ControlAction::UnregisterCommand {
            name: text("name")?,
        },
        "register_provider" => ControlAction::RegisterProvider {
            name: text("name")?,
            config: match fields.0.get("config") {
                Some(config @ Value::Object(_)) => config.clone(),
                _ => return Err("register_provider: config must be an object".into()),
            },
        },
        "unregister_provider" => ControlAction::UnregisterProvider {
            name: text("name")?,
        },
        _ => ControlAction::WaitForIdle,
    })
}

/// (v2) What an extension can ask (`{"type":"query","id":…,"query":<name>, …fields}`).
#[derive(Clone, Debug, PartialEq)]
pub enum Query {
    /// `flags`: the values of the extension's own flags (defaults applied).
    Flags,
    /// `model`: the current model and thinking level.
    Model,
    /// `models`: the model registry (every model, and whether its provider has credentials).
    Models,
    /// `active_tools`: the names of the tools offered to the model.
    ActiveTools,
    /// `all_tools`: every tool that could be offered, with its source.
    AllTools,
    /// `commands`: as the RPC `get_commands` lists them.
    Commands,
    /// `context_usage`: `{tokens, contextWindow, percent}` or null.
    ContextUsage,
    /// `system_prompt`: the system prompt the next request uses.
    SystemPrompt,
    /// `session`: the session's id, file, cwd, name, header and leaf id.
    Session,
    /// `session_name`.
    SessionName,
    /// `trust`: whether the project is trusted.
    Trust,
    /// `entries`: every session entry.
    Entries,
    /// `branch`: the entries from the root to `fromId` (default: the leaf).
    Branch { from: Option<String> },
    /// `entry`: one entry by `entryId` (null when there is none).
    Entry { id: String },
    /// `leaf`: the leaf entry (null in an empty session).
    Leaf,
    /// `idle`: whether no run, compaction or retry is in progress, and queued messages.
    Idle,
    /// `settings`: every setting, global and project merged (pi's `getSettings()`).
    Settings,
    /// `auth`: the credential pi-rs resolved for `provider` (`{apiKey}`), or for one of its
    /// models (`modelId`: `{apiKey, headers}`, the request headers models.json and
    /// `register_provider` give it).
    Auth {
        provider: String,
        model_id: Option<String>,
    },
    /// `mcp_servers`: the servers extensions registered (pi's `getMcpServers()`):
    /// `[{name, config, extensionPath}]`.
    McpServers,
}

impl Query {
    pub const NAMES: [&'static str; 18] = [
        "flags",
        "model",
        "models",
        "active_tools",
        "all_tools",
        "commands",
        "context_usage",
        "system_prompt",
        "session",
        "session_name",
        "trust",
        "entries",
        "branch",
        "entry",
        "leaf",
        "idle",
        "settings",
        "auth",
    ];
}

fn parse_query(name: &str, fields: &Fields) -> Result<Query, String> {
    let text = |key: &str| fields.opt_string(key).map_err(|e| e.0);
    Ok(match name {
        "flags" => Query::Flags,
        "model" => Query::Model,
        "models" => Query::Models,
        "active_tools" => Query::ActiveTools,
        "all_tools" => Query::AllTools,
        "commands" => Query::Commands,
        "context_usage" => Query::ContextUsage,
        "system_prompt" => Query::SystemPrompt,
        "session" => Query::Session,
        "session_name" => Query::SessionName,
        "trust" => Query::Trust,
        "entries" => Query::Entries,
        "branch" => Query::Branch {
            from: text("fromId")?,
        },
        "entry" => Query::Entry {
            id: text("entryId")?.ok_or("entry: missing entryId")?,
        },
        "leaf" => Query::Leaf,
        "idle" => Query::Idle,
        "settings" => Query::Settings,
        "auth" => Query::Auth {
            provider: text("provider")?.ok_or("auth: missing provider")?,
            model_id: text("modelId")?,
        },
        "mcp_servers" => Query::McpServers,
        other => {
            return Err(format!(
                "unknown query {other:?} (known: {}, mcp_servers)",
                Query::NAMES.join(", ")
            ));
        }
    })
}

/// Why a line from an extension could not be understood.
#[derive(Clone, Debug, PartialEq)]
pub struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtocolError {}

fn bad(text: impl Into<String>) -> ProtocolError {
    ProtocolError(text.into())
}

/// Parses one line an extension wrote.
pub fn parse_line(line: &[u8]) -> Result<ExtensionMessage, ProtocolError> {
    let value: Value = std::str::from_utf8(line)
        .map_err(serde_json::Error::custom)
        .and_then(crate::rpc::jsonl::parse_value)
        .map_err(|e| {
            let shown = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
            bad(format!("not a JSON line ({e}): {shown}"))
        })?;
    let Value::Object(object) = value else {
        return Err(bad("a line must be a JSON object"));
    };
    let fields = Fields(&object);
    let kind = fields.string("type")?;
    match kind.as_str() {
        "register" => parse_register(&fields),
        "hook_result" => {
            let id = fields.string("id")?;
            let result = match object.get("error") {
                Some(Value::String(error)) => Err(error.clone()),
                Some(other) if !other.is_null() => Err(other.to_string()),
                _ => match object.get("result") {
                    None | Some(Value::Null) => Ok(Value::Object(Map::new())),
                    Some(Value::Object(result)) => Ok(Value::Object(result.clone())),
                    Some(_) => return Err(bad("hook_result.result must be an object")),
                },
            };
            Ok(ExtensionMessage::HookResult { id, result })
        }
        "tool_update" => Ok(ExtensionMessage::ToolUpdate {
            id: fields.string("id")?,
            partial: parse_tool_output(object.get("partialResult"), false)?,
        }),
        "tool_result" => {
            let id = fields.string("id")?;
            let output = match object.get("error") {
                Some(Value::String(error)) => ToolOutput::error(error.clone()),
                _ => parse_tool_output(object.get("result"), true)?,
            };
            let terminate = object
                .get("result")
                .and_then(|r| r.get("terminate"))
                .and_then(Value::as_bool)
                == Some(true);
            Ok(ExtensionMessage::ToolResult {
                id,
                output,
                terminate,
            })
        }
        "stream_event" => {
            let id = fields.string("id")?;
            match object.get("event") {
                Some(event) if event.get("type").is_some_and(Value::is_string) => {
                    Ok(ExtensionMessage::StreamEvent {
                        id,
                        event: event.clone(),
                    })
                }
                _ => Err(bad(
                    "stream_event.event must be an object with a string type",
                )),
            }
        }
        "command_done" => Ok(ExtensionMessage::CommandDone {
            id: fields.string("id")?,
            error: fields.opt_string("error")?,
        }),
        "ui" => parse_ui(&fields),
        "error" => Ok(ExtensionMessage::Error {
            error: fields.string("error")?,
            extension_path: fields.opt_string("extensionPath")?,
            event: fields.opt_string("event")?,
        }),
        "query" => {
            let id = fields.string("id")?;
            let query = match object.get("query") {
                Some(Value::String(name)) => parse_query(name, &fields),
                _ => Err("query must be a string naming the query".to_string()),
            };
            Ok(ExtensionMessage::Query { id, query })
        }
        kind if CONTROL_TYPES.contains(&kind) => Ok(ExtensionMessage::Control {
            id: fields.opt_string("id")?,
            action: parse_control(kind, &fields),
        }),
        kind if MCP_CONTROL_TYPES.contains(&kind) => Ok(ExtensionMessage::Control {
            id: fields.opt_string("id")?,
            action: parse_mcp_control(kind, &fields),
        }),
        kind if VIRTUAL_CONTROL_TYPES.contains(&kind) => Ok(ExtensionMessage::Control {
            id: fields.opt_string("id")?,
            action: parse_virtual_control(kind, &fields),
        }),
        kind if REQUESTS.iter().any(|(_, answer)| *answer == kind) => {
            let request = REQUESTS
                .iter()
                .find(|(_, answer)| *answer == kind)
                .map_or("route", |(name, _)| name);
            let id = fields.string("id")?;
            let result = match object.get("error") {
                Some(Value::String(error)) => Err(error.clone()),
                Some(other) if !other.is_null() => Err(other.to_string()),
                _ => match object.get("result") {
                    Some(Value::Object(result)) => Ok(Value::Object(result.clone())),
                    _ => Err(format!("{kind}.result must be an object")),
                },
            };
            Ok(ExtensionMessage::RequestResult {
                id,
                request,
                result,
            })
        }
        _ => parse_action(&kind, &fields).map(ExtensionMessage::Action),
    }
}

fn parse_register(fields: &Fields) -> Result<ExtensionMessage, ProtocolError> {
    let protocol = fields
        .0
        .get("protocol")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("register.protocol must be a number"))?;
    let mut registration = Registration {
        protocol,
        name: fields.opt_string("name")?,
        ..Registration::default()
    };
    for item in fields.array("commands")? {
        registration
            .commands
            .push(parse_command_decl(as_object(item, "commands[]")?)?);
    }
    for item in fields.array("tools")? {
        registration
            .tools
            .push(parse_tool_decl(as_object(item, "tools[]")?)?);
    }
    for item in fields.array("events")? {
        let event = item
            .as_str()
            .ok_or_else(|| bad("events[] must be strings"))?;
        registration.events.push(event.to_string());
    }
    for item in fields.array("hooks")? {
        let name = item
            .as_str()
            .ok_or_else(|| bad("hooks[] must be strings"))?;
        let hook = HookKind::parse(name)
            .filter(|h| !h.needs_v2() || protocol >= 2)
            .ok_or_else(|| bad(format!("unknown hook {name:?}")))?;
        if !registration.hooks.contains(&hook) {
            registration.hooks.push(hook);
        }
    }
    for item in fields.array("flags")? {
        let flag = Fields(as_object(item, "flags[]")?);
        registration.flags.push(FlagDecl {
            name: flag.string("name")?,
            description: flag.opt_string("description")?,
            kind: flag
                .opt_string("type")?
                .unwrap_or_else(|| "boolean".to_string()),
            default: flag.0.get("default").cloned(),
        });
    }
    if protocol >= 2 {
        for item in fields.array("providers")? {
            let provider = Fields(as_object(item, "providers[]")?);
            registration.providers.push(ProviderDecl {
                name: provider.string("name")?,
                config: match provider.0.get("config") {
                    Some(config @ Value::Object(_)) => config.clone(),
                    _ => return Err(bad("providers[].config must be an object")),
                },
            });
        }
        for item in fields.array("virtualModels")? {
            let object = as_object(item, "virtualModels[]")?;
            let decl = parse_virtual_model("virtualModels[]", object).map_err(bad)?;
            registration.virtual_models.push(decl);
        }
    }
    Ok(ExtensionMessage::Register {
        protocol,
        registration,
    })
}

fn parse_command_decl(object: &Map<String, Value>) -> Result<CommandDecl, ProtocolError> {
    let command = Fields(object);
    let name = command.string("name")?;
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(bad(format!("invalid command name {name:?}")));
    }
    Ok(CommandDecl {
        name,
        description: command.opt_string("description")?,
    })
}

fn parse_tool_decl(object: &Map<String, Value>) -> Result<ToolDecl, ProtocolError> {
    let tool = Fields(object);
    let name = tool.string("name")?;
    if name.is_empty() {
        return Err(bad("a tool needs a name"));
    }
    let parameters = match tool.0.get("parameters") {
        Some(Value::Object(schema)) => Value::Object(schema.clone()),
        None => json!({"type": "object", "properties": {}}),
        Some(_) => return Err(bad(format!("tool {name}: parameters must be an object"))),
    };
    let sequential = match tool.opt_string("executionMode")?.as_deref() {
        None | Some("parallel") => false,
        Some("sequential") => true,
        Some(other) => {
            return Err(bad(format!(
                "tool {name}: executionMode must be \"parallel\" or \"sequential\", not {other:?}"
            )));
        }
    };
    let constrained_sampling = match tool.0.get("constrainedSampling") {
        None | Some(Value::Null) => None,
        Some(Value::Object(sampling)) => Some(Value::Object(sampling.clone())),
        Some(_) => {
            return Err(bad(format!(
                "tool {name}: constrainedSampling must be an object"
            )));
        }
    };
    Ok(ToolDecl {
        sequential,
        constrained_sampling,
        label: tool.opt_string("label")?,
        description: tool.opt_string("description")?.unwrap_or_default(),
        parameters,
        prompt_snippet: tool.opt_string("promptSnippet")?,
        prompt_guidelines: tool
            .array("promptGuidelines")?
            .iter()
            .filter_map(|g| g.as_str().map(String::from))
            .collect(),
        name,
    })
}

fn parse_action(kind: &str, fields: &Fields) -> Result<Action, ProtocolError> {
    let delivery = |fields: &Fields| -> Result<Option<Delivery>, ProtocolError> {
        match fields.opt_string("deliverAs")? {
            None => Ok(None),
            Some(text) => Delivery::parse(&text)
                .map(Some)
                .ok_or_else(|| bad(format!("unknown deliverAs {text:?}"))),
        }
    };
    let content = |fields: &Fields| -> Result<Value, ProtocolError> {
        match fields.0.get("content") {
            Some(content @ (Value::String(_) | Value::Array(_))) => Ok(content.clone()),
            _ => Err(bad(format!(
                "{kind}.content must be a string or an array of content blocks"
            ))),
        }
    };
    match kind {
        "send_user_message" => {
            let deliver_as = delivery(fields)?;
            if deliver_as == Some(Delivery::NextTurn) {
                return Err(bad("send_user_message cannot be delivered as nextTurn"));
            }
            Ok(Action::SendUserMessage {
                content: content(fields)?,
                deliver_as,
                expand: fields
                    .0
                    .get("expandPromptTemplates")
                    .and_then(Value::as_bool)
                    == Some(true),
            })
        }
        "send_message" if delivery(fields)? == Some(Delivery::Immediate) => {
            Err(bad("send_message cannot be delivered as immediate"))
        }
        "send_message" => Ok(Action::SendMessage {
            custom_type: fields.string("customType")?,
            content: content(fields)?,
            display: fields.0.get("display").and_then(Value::as_bool) != Some(false),
            details: fields.0.get("details").cloned(),
            deliver_as: delivery(fields)?,
            trigger_turn: fields.0.get("triggerTurn").and_then(Value::as_bool) == Some(true),
        }),
        "append_entry" => Ok(Action::AppendEntry {
            custom_type: fields.string("customType")?,
            data: fields.0.get("data").cloned(),
        }),
        "set_session_name" => Ok(Action::SetSessionName {
            name: fields.string("name")?,
        }),
        "set_label" => Ok(Action::SetLabel {
            entry_id: fields.string("entryId")?,
            label: fields.opt_string("label")?,
        }),
        "shutdown" => Ok(Action::Shutdown),
        other => Err(bad(format!("unknown message type {other:?}"))),
    }
}

/// Checks a UI request's fields and puts them in the order pi's `extension_ui_request` has.
fn parse_ui(fields: &Fields) -> Result<ExtensionMessage, ProtocolError> {
    let method = fields.string("method")?;
    let mut request = Map::new();
    let copy = |request: &mut Map<String, Value>, key: &str| {
        if let Some(value) = fields.0.get(key).filter(|v| !v.is_null()) {
            request.insert(key.to_string(), value.clone());
        }
    };
    let need_string = |key: &str| -> Result<(), ProtocolError> {
        match fields.0.get(key) {
            Some(Value::String(_)) => Ok(()),
            _ => Err(bad(format!("ui {method}: {key} must be a string"))),
        }
    };
    match method.as_str() {
        "select" => {
            need_string("title")?;
            let options_ok = fields
                .0
                .get("options")
                .and_then(Value::as_array)
                .is_some_and(|o| o.iter().all(Value::is_string));
            if !options_ok {
                return Err(bad("ui select: options must be an array of strings"));
            }
            for key in ["title", "options", "timeout"] {
                copy(&mut request, key);
            }
        }
        "confirm" => {
            need_string("title")?;
            for key in ["title", "message", "timeout"] {
                copy(&mut request, key);
            }
        }
        "input" => {
            need_string("title")?;
            for key in ["title", "placeholder", "timeout"] {
                copy(&mut request, key);
            }
        }
        "editor" => {
            need_string("title")?;
            for key in ["title", "prefill", "timeout"] {
                copy(&mut request, key);
            }
        }
        "notify" => {
            need_string("message")?;
            for key in ["message", "notifyType"] {
                copy(&mut request, key);
            }
        }
        "setStatus" => {
            need_string("statusKey")?;
            for key in ["statusKey", "statusText"] {
                copy(&mut request, key);
            }
        }
        "setWidget" => {
            need_string("widgetKey")?;
            for key in ["widgetKey", "widgetLines", "widgetPlacement"] {
                copy(&mut request, key);
            }
        }
        "setTitle" => {
            need_string("title")?;
            copy(&mut request, "title");
        }
        "set_editor_text" => {
            need_string("text")?;
            copy(&mut request, "text");
        }
        other => return Err(bad(format!("unknown ui method {other:?}"))),
    }
    if let Some(timeout) = request.get("timeout")
        && timeout.as_u64().is_none()
    {
        return Err(bad(format!(
            "ui {method}: timeout must be a whole number of milliseconds"
        )));
    }
    let id = if DIALOG_METHODS.contains(&method.as_str()) {
        Some(fields.string("id")?)
    } else {
        None
    };
    Ok(ExtensionMessage::Ui {
        id,
        method,
        request,
    })
}

/// `{content, details?, isError?}`; `final_result` false (a partial) ignores `isError`.
fn parse_tool_output(
    value: Option<&Value>,
    final_result: bool,
) -> Result<ToolOutput, ProtocolError> {
    let Some(Value::Object(object)) = value else {
        return Err(bad("a tool result must be an object with content"));
    };
    let content = parse_content(object.get("content"))?;
    Ok(ToolOutput {
        content,
        details: object.get("details").cloned(),
        is_error: final_result && object.get("isError").and_then(Value::as_bool) == Some(true),
    })
}

/// Content blocks (text or image) from an array, or a plain string as one text block.
pub fn parse_content(value: Option<&Value>) -> Result<Vec<ContentBlock>, ProtocolError> {
    match value {
        Some(Value::String(text)) => Ok(vec![ContentBlock::Text(
            crate::messages::TextContent::new(text),
        )]),
        Some(Value::Array(_)) => {
            let blocks: Vec<ContentBlock> =
                serde_json::from_value(value.cloned().unwrap_or_default())
                    .map_err(|e| bad(format!("invalid content blocks: {e}")))?;
            Ok(blocks)
        }
        _ => Err(bad(
            "content must be a string or an array of content blocks",
        )),
    }
}

// ---- lines pi-rs writes ----

/// What the handshake tells every extension.
#[derive(Clone, Debug, Default)]
pub struct Handshake {
    pub cwd: String,
    pub session_id: String,
    pub session_file: Option<String>,
    /// Values of extension flags given on the command line (`--plan`, `--level x`).
    pub flag_values: Map<String, Value>,
}

pub fn hello_line(handshake: &Handshake, extension_path: &str) -> String {
    json!({
        "type": "hello",
        "protocol": PROTOCOL_VERSION,
        "maxProtocol": MAX_PROTOCOL_VERSION,
        "mode": "rpc",
        "cwd": handshake.cwd,
        "sessionId": handshake.session_id,
        "sessionFile": handshake.session_file,
        "extensionPath": extension_path,
        "flags": handshake.flag_values,
    })
    .to_string()
}

/// (v2) The answer to a query or an action with an `id`: `result` or `error`.
pub fn answer_line(kind: &str, id: &str, answer: &Result<Value, String>) -> String {
    match answer {
        Ok(result) => json!({"type": kind, "id": id, "result": result}),
        Err(error) => json!({"type": kind, "id": id, "error": error}),
    }
    .to_string()
}

/// `answer_line` with the `result` given as JSON text (written by `serde_json`), copied as it is.
pub fn answer_line_json(kind: &str, id: &str, result: &str) -> String {
    let head = json!({"type": kind, "id": id}).to_string();
    // `{"type":…,"id":…}` without its closing brace, then the result.
    let mut line = String::with_capacity(head.len() + result.len() + 12);
    line.push_str(&head[..head.len() - 1]);
    line.push_str(",\"result\":");
    line.push_str(result);
    line.push('}');
    line
}

/// (v2) `{"type":"action_update","id","partialResult":{content, details?, isError}}`: a cumulative
/// partial result of the extension's `execute_tool` request `id`, before its `action_result`.
pub fn action_update_line(id: &str, partial: &Value) -> String {
    json!({"type": "action_update", "id": id, "partialResult": partial}).to_string()
}

/// `session_shutdown` as extensions get it at exit (`quit`) and before a reload (`reload`); a
/// session change adds `targetSessionFile`.
pub fn session_shutdown_event(reason: &str) -> Value {
    json!({"type": "session_shutdown", "reason": reason})
}

pub fn event_line(event: &Value) -> String {
    json!({"type": "event", "event": event}).to_string()
}

/// (v2) `{"type":"stream_request","id",…request}`: stream a model response for the extension's
/// provider (`request`: `model`, `context`, `options`).
pub fn stream_request_line(id: &str, request: &Value) -> String {
    let mut line = Map::new();
    line.insert("type".into(), "stream_request".into());
    line.insert("id".into(), id.into());
    if let Value::Object(fields) = request {
        for (key, value) in fields {
            line.insert(key.clone(), value.clone());
        }
    }
    Value::Object(line).to_string()
}

/// (v2) `{"type":<kind>,"id","deadlineMs","request"}`: a question for one extension —
/// `route` (pick the physical model of a request made with its virtual model) or
/// `refresh_models` (its provider's models now).
pub fn request_line(kind: &str, id: &str, deadline_ms: u64, request: &Value) -> String {
    json!({"type": kind, "id": id, "deadlineMs": deadline_ms, "request": request}).to_string()
}

/// (v2) `{"type":"cancel_stream","id"}`: pi-rs no longer reads that stream (abort).
pub fn cancel_stream_line(id: &str) -> String {
    json!({"type": "cancel_stream", "id": id}).to_string()
}

pub fn hook_line(id: &str, hook: HookKind, deadline_ms: u64, payload: &Value) -> String {
    json!({"type": "hook", "id": id, "hook": hook.as_str(), "deadlineMs": deadline_ms, "payload": payload})
        .to_string()
}

pub fn run_tool_line(id: &str, tool_name: &str, tool_call_id: &str, args: &Value) -> String {
    json!({"type": "run_tool", "id": id, "toolName": tool_name, "toolCallId": tool_call_id, "args": args})
        .to_string()
}

pub fn cancel_tool_line(id: &str) -> String {
    json!({"type": "cancel_tool", "id": id}).to_string()
}

pub fn run_command_line(id: &str, name: &str, args: &str) -> String {
    json!({"type": "run_command", "id": id, "name": name, "args": args}).to_string()
}

/// The client's answer to a dialog, as the extension receives it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UiResponse {
    pub value: Option<Value>,
    pub confirmed: Option<bool>,
    pub cancelled: bool,
}

/// Dialog answers normalised as pi does: select/input/editor give `value` (null when cancelled),
/// confirm gives `confirmed` (false when cancelled); `timedOut` marks a timeout.
pub fn ui_response_line(id: &str, method: &str, response: &UiResponse, timed_out: bool) -> String {
    let mut line = Map::new();
    line.insert("type".into(), "ui_response".into());
    line.insert("id".into(), id.into());
    let cancelled = response.cancelled || timed_out;
    if method == "confirm" {
        let confirmed = !cancelled && response.confirmed == Some(true);
        line.insert("confirmed".into(), confirmed.into());
    } else {
        let value = match (&response.value, cancelled) {
            (Some(value), false) => value.clone(),
            _ => Value::Null,
        };
        line.insert("value".into(), value);
    }
    line.insert("cancelled".into(), cancelled.into());
    if timed_out {
        line.insert("timedOut".into(), true.into());
    }
    Value::Object(line).to_string()
}

// ---- small field readers ----

struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn string(&self, key: &str) -> Result<String, ProtocolError> {
        match self.0.get(key) {
            Some(Value::String(text)) => Ok(text.clone()),
            Some(_) => Err(bad(format!("{key} must be a string"))),
            None => Err(bad(format!("missing {key}"))),
        }
    }
    fn opt_string(&self, key: &str) -> Result<Option<String>, ProtocolError> {
        match self.0.get(key) {
            Some(Value::String(text)) => Ok(Some(text.clone())),
            None | Some(Value::Null) => Ok(None),
            Some(_) => Err(bad(format!("{key} must be a string"))),
        }
    }
    fn array(&self, key: &str) -> Result<&[Value], ProtocolError> {
        match self.0.get(key) {
            Some(Value::Array(items)) => Ok(items),
            None | Some(Value::Null) => Ok(&[]),
            Some(_) => Err(bad(format!("{key} must be an array"))),
        }
    }
}

fn as_object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, ProtocolError> {
    value
        .as_object()
        .ok_or_else(|| bad(format!("{what} must be an object")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: Value) -> Result<ExtensionMessage, ProtocolError> {
        parse_line(value.to_string().as_bytes())
    }

    #[test]
    fn an_answer_written_as_text_is_the_line_of_its_value() {
        let result = json!({"all": [{"id": "a\"b", "n": 1.5}], "available": []});
        for id in ["q1", "odd \"id\"\n"] {
            assert_eq!(
                answer_line_json("query_result", id, &result.to_string()),
                answer_line("query_result", id, &Ok(result.clone()))
            );
        }
    }

    #[test]
    fn execute_tool_and_cancel_request_parse_with_clear_errors() {
        let action = |value: Value| match parse(value) {
            Ok(ExtensionMessage::Control { action, .. }) => action,
            other => panic!("not a control request: {other:?}"),
        };
        assert_eq!(
            action(
                json!({"type": "execute_tool", "id": "1", "toolName": "read",
                          "args": {"path": "a"}, "cwd": "sub", "timeout": 500})
            ),
            Ok(ControlAction::ExecuteTool(
                super::super::tool_run::ToolRunSpec {
                    tool_name: "read".into(),
                    args: json!({"path": "a"}),
                    cwd: Some("sub".into()),
                    timeout: Some(std::time::Duration::from_millis(500)),
                }
            ))
        );
        let no_args = action(json!({"type": "execute_tool", "id": "1", "toolName": "ls"}));
        assert!(matches!(no_args, Ok(ControlAction::ExecuteTool(spec)) if spec.args == json!({})));
        let unknown = action(json!({"type": "execute_tool", "id": "1", "toolName": "codemode"}));
        assert!(
            unknown
                .unwrap_err()
                .starts_with("execute_tool: unknown tool \"codemode\"")
        );
        let long = action(json!({"type": "execute_tool", "toolName": "y".repeat(10_000)}));
        assert!(long.unwrap_err().len() < 300);
        for (field, value, error) in [
            (
                "args",
                json!("rm -rf /"),
                "execute_tool: args must be an object",
            ),
            (
                "timeout",
                json!(-1),
                "execute_tool: timeout must be a whole number (ms)",
            ),
            ("cwd", json!(5), "execute_tool: cwd must be a string"),
        ] {
            let mut line = json!({"type": "execute_tool", "toolName": "bash", "args": {}});
            line[field] = value;
            assert_eq!(action(line), Err(error.to_string()));
        }
        assert_eq!(
            action(json!({"type": "cancel_request", "requestId": "h3"})),
            Ok(ControlAction::CancelRequest {
                request_id: "h3".into()
            })
        );
        assert!(action(json!({"type": "cancel_request"})).is_err());
    }

    #[test]
    fn register_reads_every_declaration() {
        let message = parse(json!({
            "type": "register", "protocol": 1, "name": "demo",
            "commands": [{"name": "hello", "description": "Say hello"}],
            "tools": [{"name": "word_count", "description": "Count words",
                       "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}],
            "events": ["agent_end"], "hooks": ["tool_call", "input"],
            "flags": [{"name": "plan", "type": "boolean", "default": false}]
        }))
        .unwrap();
        let ExtensionMessage::Register {
            protocol,
            registration,
        } = message
        else {
            panic!("not a register: {message:?}");
        };
        assert_eq!(protocol, 1);
        assert_eq!(registration.name.as_deref(), Some("demo"));
        assert_eq!(registration.commands[0].name, "hello");
        assert_eq!(registration.tools[0].name, "word_count");
        assert!(registration.wants_event("agent_end"));
        assert!(!registration.wants_event("agent_start"));
        assert!(registration.handles(HookKind::ToolCall));
        assert!(!registration.handles(HookKind::ToolResult));
        assert_eq!(registration.flags[0].kind, "boolean");
    }

    #[test]
    fn register_rejects_unknown_hooks_and_bad_names() {
        let err = parse(json!({"type":"register","protocol":1,"hooks":["context"]})).unwrap_err();
        assert!(err.0.contains("unknown hook"), "{err}");
        // `context` is a protocol-2 hook.
        assert!(parse(json!({"type":"register","protocol":2,"hooks":["context"]})).is_ok());
        let err =
            parse(json!({"type":"register","protocol":1,"commands":[{"name":"a b"}]})).unwrap_err();
        assert!(err.0.contains("invalid command name"), "{err}");
    }

    #[test]
    fn queries_parse_and_unknown_ones_become_error_answers() {
        assert_eq!(
            parse(json!({"type":"query","id":"q","query":"branch","fromId":"e1"})).unwrap(),
            ExtensionMessage::Query {
                id: "q".into(),
                query: Ok(Query::Branch {
                    from: Some("e1".into())
                })
            }
        );
        let auth = |fields: Value| match parse(fields).unwrap() {
            ExtensionMessage::Query { query, .. } => query,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            auth(json!({"type":"query","id":"q","query":"auth","provider":"p","modelId":"m"})),
            Ok(Query::Auth {
                provider: "p".into(),
                model_id: Some("m".into())
            })
        );
        assert_eq!(
            auth(json!({"type":"query","id":"q","query":"auth"})),
            Err("auth: missing provider".into())
        );
        let ExtensionMessage::Query { query, .. } =
            parse(json!({"type":"query","id":"q","query":"nope"})).unwrap()
        else {
            panic!()
        };
        assert!(query.unwrap_err().starts_with("unknown query"));
        assert!(parse(json!({"type":"query","query":"model"})).is_err());
        assert_eq!(
            answer_line("query_result", "q", &Err("no".into())),
            r#"{"type":"query_result","id":"q","error":"no"}"#
        );
    }

    #[test]
    fn junk_is_an_error_not_a_panic() {
        for line in [
            &b"hello world"[..],
            b"[1,2]",
            b"{\"type\":42}",
            b"{\"no\":\"type\"}",
            b"\xff\xfe",
            b"",
        ] {
            assert!(parse_line(line).is_err(), "{line:?}");
        }
        let err = parse(json!({"type": "fly"})).unwrap_err();
        assert!(err.0.contains("unknown message type"), "{err}");
    }

    #[test]
    fn hook_results_carry_a_result_or_an_error() {
        let ok = parse(json!({"type":"hook_result","id":"h1","result":{"block":true}})).unwrap();
        assert_eq!(
            ok,
            ExtensionMessage::HookResult {
                id: "h1".into(),
                result: Ok(json!({"block": true}))
            }
        );
        let empty = parse(json!({"type":"hook_result","id":"h2"})).unwrap();
        assert_eq!(
            empty,
            ExtensionMessage::HookResult {
                id: "h2".into(),
                result: Ok(json!({}))
            }
        );
        let failed = parse(json!({"type":"hook_result","id":"h3","error":"boom"})).unwrap();
        assert_eq!(
            failed,
            ExtensionMessage::HookResult {
                id: "h3".into(),
                result: Err("boom".into())
            }
        );
    }

    #[test]
    fn tool_results_accept_strings_blocks_and_errors() {
        let message = parse(json!({"type":"tool_result","id":"t1",
            "result":{"content":[{"type":"text","text":"3 words"}],"details":{"n":3}}}))
        .unwrap();
        let ExtensionMessage::ToolResult { output, .. } = message else {
            panic!()
        };
        assert_eq!(output.content.len(), 1);
        assert_eq!(output.details, Some(json!({"n": 3})));
        assert!(!output.is_error);
        let message = parse(json!({"type":"tool_result","id":"t1","error":"no input"})).unwrap();
        let ExtensionMessage::ToolResult { output, .. } = message else {
            panic!()
        };
        assert!(output.is_error);
        let err =
            parse(json!({"type":"tool_result","id":"t1","result":{"content":[{"type":"nope"}]}}))
                .unwrap_err();
        assert!(err.0.contains("invalid content"), "{err}");
    }

    #[test]
    fn actions_parse_with_their_defaults() {
        assert_eq!(
            parse(json!({"type":"send_user_message","content":"hi","deliverAs":"followUp"}))
                .unwrap(),
            ExtensionMessage::Action(Action::SendUserMessage {
                content: json!("hi"),
                deliver_as: Some(Delivery::FollowUp),
                expand: false
            })
        );
        assert_eq!(
            parse(json!({"type":"send_message","customType":"note","content":"x"})).unwrap(),
            ExtensionMessage::Action(Action::SendMessage {
                custom_type: "note".into(),
                content: json!("x"),
                display: true,
                details: None,
                deliver_as: None,
                trigger_turn: false
            })
        );
        assert_eq!(
            parse(json!({"type":"set_label","entryId":"e1","label":null})).unwrap(),
            ExtensionMessage::Action(Action::SetLabel {
                entry_id: "e1".into(),
                label: None
            })
        );
        assert!(
            parse(json!({"type":"send_user_message","content":"x","deliverAs":"nextTurn"}))
                .is_err()
        );
        assert!(parse(json!({"type":"send_user_message","content":5})).is_err());
    }

    #[test]
    fn ui_requests_keep_pi_key_order_and_need_ids_for_dialogs() {
        let message = parse(
            json!({"type":"ui","timeout":500,"options":["a","b"],"title":"Pick",
            "method":"select","id":"q1"}),
        )
        .unwrap();
        let ExtensionMessage::Ui {
            id,
            method,
            request,
        } = message
        else {
            panic!()
        };
        assert_eq!(id.as_deref(), Some("q1"));
        assert_eq!(method, "select");
        let keys: Vec<&String> = request.keys().collect();
        assert_eq!(keys, ["title", "options", "timeout"]);
        assert!(parse(json!({"type":"ui","method":"confirm","title":"x"})).is_err());
        let notice = parse(json!({"type":"ui","method":"notify","message":"hi"})).unwrap();
        assert!(matches!(notice, ExtensionMessage::Ui { id: None, .. }));
        assert!(parse(json!({"type":"ui","method":"custom"})).is_err());
        assert!(
            parse(json!({"type":"ui","method":"select","id":"q","title":"t","options":[1]}))
                .is_err()
        );
    }

    #[test]
    fn ui_responses_are_normalised_per_method() {
        let answer = UiResponse {
            value: Some(json!("Allow")),
            ..UiResponse::default()
        };
        assert_eq!(
            ui_response_line("q1", "select", &answer, false),
            r#"{"type":"ui_response","id":"q1","value":"Allow","cancelled":false}"#
        );
        assert_eq!(
            ui_response_line("q1", "select", &answer, true),
            r#"{"type":"ui_response","id":"q1","value":null,"cancelled":true,"timedOut":true}"#
        );
        let yes = UiResponse {
            confirmed: Some(true),
            ..UiResponse::default()
        };
        assert_eq!(
            ui_response_line("q2", "confirm", &yes, false),
            r#"{"type":"ui_response","id":"q2","confirmed":true,"cancelled":false}"#
        );
        let cancelled = UiResponse {
            confirmed: Some(true),
            cancelled: true,
            ..UiResponse::default()
        };
        assert_eq!(
            ui_response_line("q2", "confirm", &cancelled, false),
            r#"{"type":"ui_response","id":"q2","confirmed":false,"cancelled":true}"#
        );
    }

    #[test]
    fn hello_carries_the_handshake() {
        let line = hello_line(
            &Handshake {
                cwd: "/w".into(),
                session_id: "s1".into(),
                session_file: None,
                flag_values: Map::new(),
            },
            "/w/.pi/extensions/a.sh",
        );
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["protocol"], 1);
        assert_eq!(value["maxProtocol"], 2);
        assert_eq!(value["mode"], "rpc");
        assert_eq!(value["sessionId"], "s1");
        assert_eq!(value["sessionFile"], Value::Null);
    }

    #[test]
    fn virtual_models_and_request_answers_parse() {
        let message = parse(
            json!({"type": "register_virtual_model", "id": "1", "model": {
            "provider": "router", "id": "auto", "thinkingLevels": ["low", "high"],
            "contextWindow": 5000}}),
        )
        .unwrap();
        let ExtensionMessage::Control {
            action: Ok(ControlAction::RegisterVirtualModel(decl)),
            ..
        } = message
        else {
            panic!("{message:?}");
        };
        assert_eq!(decl.name, "auto", "the name defaults to the id");
        assert_eq!(decl.thinking_levels, ["low", "high"]);
        assert_eq!(decl.context_window, Some(5000));
        assert_eq!(decl.input, None);
        let bad = |model: Value| match parse(json!({"type": "register_virtual_model", "id": "1",
                                                      "model": model}))
        {
            Ok(ExtensionMessage::Control { action: Err(e), .. }) => e,
            other => panic!("{other:?}"),
        };
        assert!(
            bad(json!({"provider": "p", "id": "x", "thinkingLevels": ["loud"]}))
                .contains("unknown thinking level")
        );
        assert_eq!(
            bad(json!({"provider": " ", "id": "x"})),
            "Virtual model provider and id must not be empty."
        );
        assert!(bad(json!({"provider": "p", "id": "x", "maxTokens": -1})).contains("whole number"));
        let answer = parse(json!({"type": "route_result", "id": "r1", "result": {"model": {}}}));
        assert!(
            matches!(answer, Ok(ExtensionMessage::RequestResult { ref id, request: "route", result: Ok(_) }) if id == "r1")
        );
        let error = parse(json!({"type": "refresh_models_result", "id": "r2", "error": "down"}));
        assert!(
            matches!(error, Ok(ExtensionMessage::RequestResult { request: "refresh_models", result: Err(ref e), .. }) if e == "down")
        );
        let key =
            parse(json!({"type": "oauth_api_key_result", "id": "r4", "result": {"apiKey": "k"}}));
        assert_eq!(
            key.as_ref().map(|m| m.type_name()),
            Ok("oauth_api_key_result")
        );
        let not_object = parse(json!({"type": "route_result", "id": "r3", "result": 3}));
        assert!(matches!(
            not_object,
            Ok(ExtensionMessage::RequestResult { result: Err(_), .. })
        ));
        let register = parse(json!({"type": "register", "protocol": 2,
                                    "virtualModels": [{"provider": "r", "id": "b"}]}))
        .unwrap();
        let ExtensionMessage::Register { registration, .. } = register else {
            panic!("register");
        };
        assert_eq!(registration.virtual_models[0].thinking_levels, ["off"]);
    }
}
