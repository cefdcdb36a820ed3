//! Running one reply's tool calls (FACTS §4.3): every call gets its `tool_execution_start` in call
//! order, then each goes through its own small pipeline and they run in parallel:
//!
//! ```text
//! known tool? → approval gate (may ask the client) → extensions' tool_call hook (may block or
//! rewrite) → run (a builtin on its own thread, or an extension tool) → extensions' tool_result
//! hook (may patch) → tool_execution_end
//! ```
//!
//! Waiting steps are `CallWait`s on the call; the answers (approval dialogs, hook results, tool
//! events) arrive through the loop's select and move the call on. When every call has its
//! result, the tool result messages follow in call order, then `turn_end`.

use serde_json::{Value, json};

use super::state::{CallSlot, CallWait, Phase, ToolBatch};
use super::{Agent, PROVIDER_CHANNEL_CAPACITY};
use crate::extensions::ExtensionTool;
use crate::extensions::HookId;
use crate::extensions::approval::{ApprovalAnswer, ApprovalPolicy, Decision, SessionGrants};
use crate::extensions::hooks::{HookOutcome, ToolCallOutcome};
use crate::extensions::protocol::HookKind;
use crate::messages::ToolSpec;
use crate::messages::{AgentMessage, ToolCall, ToolResultMessage};
use crate::rpc::SharedJson;
use crate::rpc::events::{self, Event};
use crate::time::now_ms;
use crate::tools::codemode::{self, engine};
use crate::tools::{self, ToolContext, ToolEvent, ToolEventKind, ToolOutput};

/// What the model is offered and what a call must pass: the builtin tools, the extensions'
/// tools, the specs sent with each request, the approval policy with this session's grants, and
/// the sandbox tools start in.
pub struct Toolbox {
    pub builtins: Vec<String>,
    /// Which extension tools are offered (MCP tools: the MCP host holds the same filter).
    pub filter: crate::tools::selection::ToolFilter,
    pub extension_tools: Vec<ExtensionTool>,
    /// What the next request declares.
    pub specs: Vec<ToolSpec>,
    /// What a `codemode` script can call: the declared tools but `codemode` and `tool_search`,
    /// and the MCP tools with `codemode` or `deferred` exposure.
    pub callable: Vec<ToolSpec>,
    /// Tools `tool_search` loaded that the transcript does not declare yet (the next request's
    /// system message does).
    pub loading: Vec<String>,
    pub approvals: ApprovalPolicy,
    pub grants: SessionGrants,
    /// The tool sandbox (settings, `--sandbox`; `set_sandbox` changes it).
    pub sandbox: crate::sandbox::Sandbox,
    /// An extension's `set_active_tools` (v2): only these names are offered (None: all).
    pub active: Option<Vec<String>>,
    /// Tools a restored transcript took out (removed there, or by `-name`): not offered.
    pub withdrawn: Vec<String>,
    /// The tools follow the defaults: a transcript's loadout replaces them, with these `+name` /
    /// `-name` entries applied (`Selection::restore_with`).
    pub restore_with: Option<Vec<String>>,
    /// The built-ins the command line and settings chose (a new session starts with them).
    pub startup_builtins: Vec<String>,
    /// The front door's client, when it reads, writes or runs for the built-in tools (ACP).
    pub client: Option<std::sync::Arc<dyn crate::tools::client::Client>>,
}

impl Toolbox {
    /// Whether `name` passes an extension's `set_active_tools` filter.
    pub fn is_active(&self, name: &str) -> bool {
        !self.withdrawn.iter().any(|n| n == name)
            && self
                .active
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n == name))
    }
}

impl Toolbox {
    pub fn new(
        builtins: Vec<String>,
        filter: crate::tools::selection::ToolFilter,
        extensions: Option<&crate::extensions::ExtensionHost>,
        approvals: ApprovalPolicy,
        sandbox: crate::sandbox::Sandbox,
    ) -> Toolbox {
        let extension_tools = extensions
            .map(|h| crate::extensions::offered(h.tools(), &filter))
            .unwrap_or_default();
        // The agent fills `specs` and `callable` once it holds the MCP host and the transcript.
        let startup_builtins = builtins.clone();
        Toolbox {
            builtins,
            filter,
            extension_tools,
            specs: Vec::new(),
            callable: Vec::new(),
            loading: Vec::new(),
            approvals,
            grants: Default::default(),
            sandbox,
            active: None,
            withdrawn: Vec::new(),
            restore_with: None,
            startup_builtins,
            client: None,
        }
    }
}

/// What scripts can call and what the model is offered, as (declared, callable): builtins, then
/// extension tools, then MCP tools. An extension tool named like a builtin replaces it in its
/// place (pi: "the extension tool replaces the built-in"), so every name is offered once.
/// MCP tools with `codemode` or `deferred` exposure are callable (from scripts) but declared
/// only once `loaded` says `tool_search` found them; `is_active` (an extension's
/// `set_active_tools`, a restored transcript's withdrawals) limits the others. While `codemode`
/// is declared, `presentation` (`codemode.mode`) decides the rest: with `on` the other declared
/// tools say how a script calls them; with `only` the tools scripts reach directly are not
/// declared and the `codemode` description lists them instead (pi 1.6.0's loadout).
pub(super) fn tool_sets(
    builtins: &[String],
    extension_tools: &[crate::extensions::ExtensionTool],
    mcp: Option<&crate::mcp::McpHost>,
    is_active: &dyn Fn(&str) -> bool,
    loaded: &dyn Fn(&str) -> bool,
    presentation: codemode::Presentation,
) -> (Vec<ToolSpec>, Vec<ToolSpec>) {
    let by_extension = |name: &str| extension_tools.iter().find(|t| t.decl.name == name);
    let mut callable: Vec<ToolSpec> = tools::specs(builtins)
        .into_iter()
        .map(|spec| by_extension(&spec.name).map_or(spec, |t| t.spec()))
        .collect();
    callable.extend(
        extension_tools
            .iter()
            .filter(|t| !builtins.contains(&t.decl.name))
            .map(|t| t.spec()),
    );
    let mut indirect: Vec<String> = Vec::new();
    if let Some(mcp) = mcp {
        for (spec, exposure) in mcp.tools_with_exposure() {
            if callable.iter().any(|s| s.name == spec.name) {
                continue;
            }
            if exposure.is_indirect() {
                indirect.push(spec.name.clone());
            }
            callable.push(spec);
        }
    }
    let mut declared: Vec<ToolSpec> = callable
        .iter()
        .filter(|spec| match indirect.contains(&spec.name) {
            true => loaded(&spec.name),
            false => is_active(&spec.name),
        })
        .cloned()
        .collect();
    // Scripts reach neither discovery tool, and direct tools only while they are active.
    callable.retain(|spec| {
        spec.name != codemode::TOOL_NAME
            && spec.name != tools::tool_search::TOOL_NAME
            && (indirect.contains(&spec.name) || is_active(&spec.name))
    });
    if builtins.iter().any(|b| b == codemode::TOOL_NAME) {
        // With `only` the tools scripts reach directly are listed (and not declared); with
        // `on` no tool is (the MCP tools scripts reach are found with the discovery globals).
        let direct: Vec<&ToolSpec> = match presentation.only {
            true => callable
                .iter()
                .filter(|spec| !indirect.contains(&spec.name))
                .collect(),
            false => Vec::new(),
        };
        let listed: Vec<codemode::Listed> = direct
            .iter()
            .map(|spec| codemode::Listed {
                spec,
                guidelines: tools::prompt_info(&spec.name).map_or(&[], |(_, g)| g),
                namespace: mcp.and_then(|mcp| mcp.namespace_of(&spec.name)),
                output: script_output_schema(&spec.name, extension_tools, mcp),
            })
            .collect();
        let description =
            codemode::description_listing(&listed, presentation.inline_budget, &presentation.docs);
        let hidden: Vec<String> = direct.iter().map(|spec| spec.name.clone()).collect();
        declared.retain(|spec| !hidden.contains(&spec.name));
        for spec in declared.iter_mut() {
            if spec.name == codemode::TOOL_NAME {
                spec.description = description.clone();
            } else if callable.iter().any(|c| c.name == spec.name) {
                let output = script_output_schema(&spec.name, extension_tools, mcp);
                codemode::script_call_note(spec, &output);
            }
        }
    }
    (declared, callable)
}

/// What a script's call of `name` resolves to, as pi 1.6.0's output schemas say: `bash` and
/// `read` their structured values, an MCP tool its `CallToolResult`, any other tool (an
/// extension's too, also one replacing a built-in) its text.
fn script_output_schema(
    name: &str,
    extension_tools: &[crate::extensions::ExtensionTool],
    mcp: Option<&crate::mcp::McpHost>,
) -> Value {
    use codemode::declarations;
    if extension_tools.iter().any(|t| t.decl.name == name) {
        return declarations::text_output_schema();
    }
    match name {
        "bash" => declarations::bash_output_schema(),
        "read" => declarations::read_output_schema(),
        _ => mcp
            .and_then(|mcp| mcp.output_schema_of(name))
            .unwrap_or_else(declarations::text_output_schema),
    }
}

impl Agent {
    /// A resumed or switched-to session: its transcript's tools, when the tools follow the
    /// defaults (`restore_tools_from_transcript` with the `+name` / `-name` entries).
    pub(super) fn restore_session_tools(&mut self) {
        let Some(modifiers) = self.tools.restore_with.clone() else {
            return;
        };
        let restored =
            !self.tools.withdrawn.is_empty() || self.tools.builtins != self.tools.startup_builtins;
        if super::system_message::loadout(&self.messages).is_none() && restored {
            // A session without a loadout (a new one) starts with the command line's tools.
            self.tools.builtins = self.tools.startup_builtins.clone();
            self.tools.withdrawn.clear();
            self.refresh_tool_specs();
            self.rebuild_system_prompt();
        }
        self.restore_tools_from_transcript(&modifiers);
    }

    /// pi 1.6.0's restore of a transcript's tools: the ones it declares now are offered instead
    /// of the current set, plus extension tools it never mentions (registered since), with the
    /// `+name` / `-name` entries of `modifiers` applied; what it removed stays out. A transcript
    /// without system messages keeps the current tools.
    pub(super) fn restore_tools_from_transcript(&mut self, modifiers: &[String]) {
        use crate::tools::selection::{apply_modifiers, is_builtin};
        let Some((current, mentioned)) = super::system_message::loadout(&self.messages) else {
            return;
        };
        let extension_names: Vec<String> = self
            .tools
            .extension_tools
            .iter()
            .map(|t| t.decl.name.clone())
            .collect();
        let mut names = current;
        names.extend(
            extension_names
                .iter()
                .filter(|n| !mentioned.contains(n) && !is_builtin(n))
                .cloned(),
        );
        let names = apply_modifiers(&names, modifiers);
        self.tools.builtins = names
            .iter()
            .filter(|n| is_builtin(n) && self.tools.filter.allows(n))
            .cloned()
            .collect();
        let mut withdrawn: Vec<String> = Vec::new();
        for name in mentioned.into_iter().chain(extension_names) {
            if !names.contains(&name) && !withdrawn.contains(&name) {
                withdrawn.push(name);
            }
        }
        self.tools.withdrawn = withdrawn;
        self.refresh_tool_specs();
        self.rebuild_system_prompt();
    }

    /// Starts the calls of a reply.
    pub(super) fn start_tools(&mut self, assistant: SharedJson, calls: Vec<ToolCall>) {
        let (sender, events) = crossbeam_channel::bounded(PROVIDER_CHANNEL_CAPACITY);
        let count = calls.len();
        for call in &calls {
            self.emit(Event::ToolExecutionStart {
                call: call.clone(),
                parent: None,
            });
        }
        let sequential = calls.iter().any(|call| {
            self.tools
                .extension_tools
                .iter()
                .any(|t| t.decl.name == call.name && t.decl.sequential)
        });
        self.phase = Phase::RunningTools(Box::new(ToolBatch {
            assistant,
            calls: calls.into_iter().map(CallSlot::new).collect(),
            sender,
            starting: true,
            sequential,
            events,
            declared: self.tools.specs.iter().map(|s| s.name.clone()).collect(),
        }));
        let first = if sequential { count.min(1) } else { count };
        for index in 0..first {
            if let Some(batch) = self.batch() {
                batch.calls[index].gated = true;
            }
            self.gate_call(index);
        }
        if let Phase::RunningTools(batch) = &mut self.phase {
            batch.starting = false;
        }
        self.finish_tools_if_done();
    }

    fn batch(&mut self) -> Option<&mut ToolBatch> {
        match &mut self.phase {
            Phase::RunningTools(batch) => Some(batch),
            _ => None,
        }
    }

    /// Known tool, then the approval gate.
    fn gate_call(&mut self, index: usize) {
        let Some(batch) = self.batch() else { return };
        let name = batch.calls[index].call.name.clone();
        let args = batch.calls[index].args.clone();
        let declared = batch.declared.contains(&name);
        // The model calls what it was declared; a script what it can call.
        let known = match batch.calls[index].parent.is_some() {
            true => self.tools.callable.iter().any(|s| s.name == name),
            false => {
                self.tools.is_active(&name)
                    && (self.tools.builtins.contains(&name)
                        || self
                            .tools
                            .extension_tools
                            .iter()
                            .any(|t| t.decl.name == name)
                        || declared)
            }
        };
        if !known {
            self.finish_call(index, ToolOutput::error(format!("Tool {name} not found")));
            return;
        }
        match self
            .tools
            .approvals
            .decide(&name, &args, &self.config.cwd, &self.tools.grants)
        {
            Decision::Allow => {
                if self.tools.approvals.is_enabled() {
                    self.record_approval(&name, &args, "allowed by rule");
                }
                self.hook_call(index)
            }
            Decision::Deny { reason } => {
                self.record_approval(&name, &args, "denied by rule");
                self.finish_call(index, ToolOutput::error(reason));
            }
            Decision::Ask {
                title,
                message,
                grant_key,
            } => {
                let Some(host) = &self.extensions.host else {
                    self.finish_call(
                        index,
                        ToolOutput::error("Approval needed, but no client dialog is available"),
                    );
                    return;
                };
                let (ui_id, record) =
                    host.ask_approval(&title, &message, self.tools.approvals.ask_timeout());
                if let Some(batch) = self.batch() {
                    batch.calls[index].wait = Some(CallWait::Approval { ui_id, grant_key });
                }
                self.emit(record);
            }
        }
    }

    /// The approval gate records every decision in the session, as a custom entry.
    pub(super) fn record_approval(&mut self, tool: &str, args: &Value, decision: &str) {
        let data = json!({ "tool": tool, "args": args, "decision": decision });
        if let Err(e) = self.session.append_custom("approval", Some(data)) {
            log::error!("could not record the approval decision: {e}");
        }
    }

    /// Extensions' `tool_call` hook, if any handles it.
    fn hook_call(&mut self, index: usize) {
        let Some(batch) = self.batch() else { return };
        let payload = json!({
            "toolName": batch.calls[index].call.name,
            "toolCallId": batch.calls[index].call.id,
            "input": batch.calls[index].args,
        });
        let hook = self.extensions.host.as_ref().and_then(|host| {
            host.start_hook(HookKind::ToolCall, payload, self.extensions.hook_deadline)
        });
        match hook {
            Some(hook) => {
                if let Some(batch) = self.batch() {
                    batch.calls[index].wait = Some(CallWait::CallHook(hook));
                }
            }
            None => self.execute_call(index),
        }
    }

    fn execute_call(&mut self, index: usize) {
        let context = self.tool_context();
        let Phase::RunningTools(batch) = &self.phase else {
            return;
        };
        let name = &batch.calls[index].call.name;
        // An extension tool replaces a builtin of the same name.
        let owner = self
            .tools
            .extension_tools
            .iter()
            .find(|t| t.decl.name == *name)
            .map(|t| t.extension);
        let Phase::RunningTools(batch) = &mut self.phase else {
            return;
        };
        let mut call = batch.calls[index].call.clone();
        call.arguments = batch.calls[index].args.clone();
        batch.calls[index].started = Some(std::time::Instant::now());
        let by_mcp = owner.is_none()
            && !self.tools.builtins.contains(&call.name)
            && self
                .mcp
                .as_ref()
                .is_some_and(|mcp| mcp.has_tool(&call.name));
        if owner.is_none() && call.name == codemode::TOOL_NAME {
            self.start_script(index, call);
            return;
        }
        if owner.is_none() && call.name == tools::tool_search::TOOL_NAME {
            self.run_tool_search(index, &call.arguments);
            return;
        }
        match (owner, &self.extensions.host, &mut self.mcp) {
            (Some(extension), Some(host), _) => {
                batch.calls[index].by_extension = true;
                host.run_tool(extension, &call.id, &call.name, &call.arguments);
            }
            (None, _, Some(mcp)) if by_mcp => {
                batch.calls[index].handle = Some(mcp.spawn_call(call, batch.sender.clone()))
            }
            _ => {
                batch.calls[index].images_ready = true;
                batch.calls[index].handle =
                    Some(tools::spawn_tool(call, context, batch.sender.clone()))
            }
        }
    }

    pub(super) fn on_tool_event(&mut self, event: ToolEvent) {
        let Some(batch) = self.batch() else { return };
        let Some(index) = batch.position_of(&event.call_id) else {
            log::debug!("event for unknown tool call {}", event.call_id);
            return;
        };
        match event.kind {
            ToolEventKind::Update(partial) => self.on_tool_update(index, partial),
            ToolEventKind::Structured(result) => batch.calls[index].structured = Some(result),
            ToolEventKind::Finished(output) => self.on_tool_finished(index, output),
            ToolEventKind::ImagesReady(output) => {
                if matches!(batch.calls[index].wait, Some(CallWait::Images)) {
                    self.finish_call_now(index, output)
                }
            }
            ToolEventKind::Script(event) => self.on_script_event(index, event),
        }
    }

    /// A tool as discovery (`searchTools()`, `tool_search`) sees it.
    fn catalog_tool(&self, spec: &ToolSpec) -> codemode::search::CatalogTool {
        let guidelines = tools::prompt_info(&spec.name).map_or(&[][..], |(_, g)| g);
        let output =
            script_output_schema(&spec.name, &self.tools.extension_tools, self.mcp.as_ref());
        codemode::search::CatalogTool {
            name: spec.name.clone(),
            sample: codemode::declarations::tool_sample(
                &spec.name,
                &codemode::with_guidelines(&spec.description, guidelines),
                &spec.parameters,
                &output,
            ),
            description: spec.description.clone(),
            parameters: spec.parameters.clone(),
            namespace: self
                .mcp
                .as_ref()
                .and_then(|mcp| mcp.namespace_of(&spec.name)),
        }
    }

    /// A `tool_search` call: the callable tools not declared yet (`codemode` and `deferred`
    /// exposure) are ranked; the matches are declared from the next request on.
    fn run_tool_search(&mut self, index: usize, arguments: &Value) {
        let candidates: Vec<codemode::search::CatalogTool> = self
            .tools
            .callable
            .iter()
            .filter(|spec| !self.tools.specs.iter().any(|s| s.name == spec.name))
            .map(|spec| self.catalog_tool(spec))
            .collect();
        let output = match tools::tool_search::run(arguments, &candidates) {
            Ok((text, loaded)) => {
                self.tools.loading.extend(loaded.iter().cloned());
                self.refresh_tool_specs();
                ToolOutput {
                    details: Some(json!({ "loaded": loaded })),
                    ..ToolOutput::text(text)
                }
            }
            Err(error) => ToolOutput::error(error),
        };
        self.on_tool_finished(index, output);
    }

    /// A `codemode` call runs: its script starts on a worker of its own; what the script does
    /// comes back as `ToolEventKind::Script` events on the batch's channel.
    fn start_script(&mut self, index: usize, call: crate::messages::ToolCall) {
        let started = std::time::Instant::now();
        let code = call
            .arguments
            .get("code")
            .and_then(Value::as_str)
            .unwrap_or("");
        let (code, options) = match codemode::parse_source(code) {
            Ok(parsed) => parsed,
            Err(message) => {
                self.on_tool_finished(index, ToolOutput::error(message));
                return;
            }
        };
        let catalog: Vec<codemode::search::CatalogTool> = self
            .tools
            .callable
            .iter()
            .map(|spec| self.catalog_tool(spec))
            .collect();
        let tools = catalog
            .iter()
            .map(|tool| engine::ScriptTool {
                name: tool.name.clone(),
                js_name: codemode::identifier(&tool.name),
                description: tool.sample.clone(),
            })
            .collect();
        let store = codemode::read_store(self.session.branch().into_iter().filter_map(|entry| {
            match &entry.kind {
                crate::session::EntryKind::Custom {
                    custom_type,
                    data: Some(data),
                } if custom_type == codemode::STORE_ENTRY_TYPE => Some(data),
                _ => None,
            }
        }));
        let spec = engine::ScriptSpec {
            code,
            tools,
            globals: codemode::DISCOVERY_GLOBALS
                .iter()
                .chain(codemode::models::GLOBALS.iter())
                .map(|g| g.to_string())
                .collect(),
            store,
            deadline: options
                .timeout_ms
                .map(|ms| started + std::time::Duration::from_millis(ms)),
            timeout_ms: options.timeout_ms,
        };
        let Some(batch) = self.batch() else { return };
        let sender = batch.sender.clone();
        let call_id = call.id.clone();
        let sink: engine::Sink = Box::new(move |event| {
            let _ = sender.send(ToolEvent {
                call_id: call_id.clone(),
                kind: ToolEventKind::Script(event),
            });
        });
        match engine::start(&call.id, spec, sink) {
            Ok(script) => {
                let run = codemode::ScriptRun::new(script, catalog, options, started);
                let details = run.details();
                batch.calls[index].script = Some(Box::new(run));
                self.on_tool_update(
                    index,
                    ToolOutput {
                        content: Vec::new(),
                        details: Some(details),
                        is_error: false,
                    },
                );
            }
            Err(error) => self.on_tool_finished(index, codemode::not_started(started, &error)),
        }
    }

    /// Output, a nested call or the end of a `codemode` call's script.
    fn on_script_event(&mut self, index: usize, event: engine::FromScript) {
        let Some(batch) = self.batch() else { return };
        if batch.calls[index].script.is_none() {
            return;
        }
        match event {
            engine::FromScript::Output(item) => {
                if let Some(run) = batch.calls[index].script.as_mut() {
                    run.output.push(item);
                }
            }
            engine::FromScript::Call {
                id,
                target: engine::CallTarget::Tool,
                name,
                args,
            } => self.start_nested_call(index, id, name, args),
            engine::FromScript::Call { id, name, args, .. } => {
                let args = args
                    .and_then(|json| serde_json::from_str::<Value>(&json).ok())
                    .unwrap_or_else(|| json!([]));
                let answer = match name.starts_with("models.") {
                    true => self.call_models(&name, &args),
                    false => match batch.calls[index].script.as_ref() {
                        Some(run) => codemode::search::call_global(&name, &args, &run.catalog),
                        None => return,
                    },
                };
                let answer = answer.map(|value| value.map(|v| v.to_string()));
                if let Some(batch) = self.batch()
                    && let Some(run) = batch.calls[index].script.as_ref()
                {
                    run.script.reply(id, answer);
                }
            }
            engine::FromScript::Done(outcome) => {
                let Some(run) = batch.calls[index].script.take() else {
                    return;
                };
                let running: Vec<usize> = (0..batch.calls.len())
                    .filter(|&i| {
                        batch.calls[i].parent.is_some_and(|p| p.slot == index)
                            && batch.calls[i].result.is_none()
                    })
                    .collect();
                // Writes are kept only when the script succeeds, per branch.
                let store = codemode::store_entry(&outcome);
                batch.calls[index].nested_calls = run.nested_calls();
                let output = run.finish(outcome);
                if let Some(data) = store
                    && let Err(e) = self
                        .session
                        .append_custom(codemode::STORE_ENTRY_TYPE, Some(data))
                {
                    log::error!("could not record the script's store: {e}");
                }
                // Calls still running when the script ends are cancelled.
                for nested in running {
                    if let Some(batch) = self.batch() {
                        batch.calls[nested].handle = None;
                        batch.calls[nested].wait = None;
                    }
                    self.finish_call(nested, ToolOutput::error(tools::ABORTED));
                }
                self.on_tool_finished(index, output);
            }
        }
    }

    /// A script's `models.*` call, over the session's model catalog.
    fn call_models(&self, name: &str, args: &Value) -> Result<Option<Value>, String> {
        let listed = |models: Vec<crate::config::Model>, provider: Option<&str>| -> Vec<Value> {
            models
                .into_iter()
                .filter(|m| provider.is_none_or(|p| m.provider == p))
                .filter_map(|m| serde_json::to_value(m).ok())
                .collect()
        };
        let all = |provider: Option<&str>| listed(self.config.all_models().to_vec(), provider);
        let available = |provider: Option<&str>| listed(self.config.available_models(), provider);
        codemode::models::call(
            name,
            args,
            &codemode::models::Catalog {
                all: &all,
                available: &available,
            },
        )
    }

    /// A script calls a tool: a nested call of its own (`<callId>/<n>`), through the same gate,
    /// hooks and execution as a call of the model.
    fn start_nested_call(&mut self, index: usize, id: u64, name: String, args: Option<String>) {
        let callable = self.tools.callable.iter().any(|s| s.name == name);
        let Some(batch) = self.batch() else { return };
        let parent_id = batch.calls[index].call.id.clone();
        let Some(run) = batch.calls[index].script.as_mut() else {
            return;
        };
        if !callable {
            run.script
                .reply(id, Err(format!("Unknown tool \"{name}\"")));
            return;
        }
        let arguments = args
            .and_then(|json| serde_json::from_str::<Value>(&json).ok())
            .unwrap_or_else(|| json!({}));
        let (record, nested_id) = run.call_started(&parent_id, &name, &arguments);
        let details = run.details();
        let call = crate::messages::ToolCall {
            id: nested_id,
            name,
            arguments,
            thought_signature: None,
        };
        let mut slot = super::state::CallSlot::new(call.clone());
        slot.gated = true;
        slot.parent = Some(super::state::NestedOf {
            slot: index,
            script_call: id,
            record,
        });
        batch.calls.push(slot);
        let nested = batch.calls.len() - 1;
        self.emit(Event::ToolExecutionStart {
            call,
            parent: Some(parent_id),
        });
        self.on_tool_update(
            index,
            ToolOutput {
                content: Vec::new(),
                details: Some(details),
                is_error: false,
            },
        );
        self.gate_call(nested);
    }

    /// The batch's channel closed although the batch holds a sender: every running call gets an
    /// error result so the turn can end, and calls started later get a fresh channel.
    pub(super) fn on_tools_gone(&mut self) {
        let Some(batch) = self.batch() else { return };
        log::error!("the tool batch's channel closed; failing its running calls");
        (batch.sender, batch.events) = crossbeam_channel::bounded(PROVIDER_CHANNEL_CAPACITY);
        let running: Vec<usize> = (0..batch.calls.len())
            .filter(|&i| batch.calls[i].result.is_none() && batch.calls[i].handle.is_some())
            .collect();
        for index in running {
            self.on_tool_finished(
                index,
                ToolOutput::error("The tool's thread ended without a result"),
            );
        }
    }

    pub(super) fn on_tool_update(&mut self, index: usize, mut partial: ToolOutput) {
        partial.redact();
        let Some(batch) = self.batch() else { return };
        let parent = batch.calls[index]
            .parent
            .map(|p| batch.calls[p.slot].call.id.clone());
        let event = Event::ToolExecutionUpdate {
            call: batch.calls[index].call.clone(),
            partial_result: events::tool_result_value(&partial.content, partial.details.as_ref()),
            parent,
        };
        batch.calls[index].partial = Some(partial);
        self.emit(event);
    }

    /// A call's own result; extensions' `tool_result` hook may still patch it.
    pub(super) fn on_tool_finished(&mut self, index: usize, mut output: ToolOutput) {
        output.redact();
        let Some(batch) = self.batch() else { return };
        batch.calls[index].handle = None;
        let mut payload = json!({
            "toolName": batch.calls[index].call.name,
            "toolCallId": batch.calls[index].call.id,
            "input": batch.calls[index].args,
            "content": output.content,
            "details": output.details,
            "isError": output.is_error,
        });
        if let Some(structured) = &batch.calls[index].structured {
            let mut structured = structured.clone();
            crate::redact::default_redactions().apply_value(&mut structured);
            payload["structuredContent"] = structured;
        }
        let hook = self.extensions.host.as_ref().and_then(|host| {
            host.start_hook(HookKind::ToolResult, payload, self.extensions.hook_deadline)
        });
        match hook {
            Some(hook) => {
                if let Some(batch) = self.batch() {
                    batch.calls[index].wait = Some(CallWait::ResultHook(hook, output));
                }
            }
            None => self.finish_call(index, output),
        }
    }

    /// A tool hook answered. Returns false when no call of the batch waited for it.
    pub(super) fn on_tool_hook(&mut self, hook: HookId, outcome: HookOutcome) -> bool {
        let Some(batch) = self.batch() else {
            return false;
        };
        let waiting = batch.calls.iter().position(|slot| match &slot.wait {
            Some(CallWait::CallHook(h)) | Some(CallWait::ResultHook(h, _)) => *h == hook,
            _ => false,
        });
        let Some(index) = waiting else { return false };
        match (batch.calls[index].wait.take(), outcome) {
            (
                Some(CallWait::CallHook(_)),
                HookOutcome::ToolCall(ToolCallOutcome::Block { reason, terminate }),
            ) => {
                batch.calls[index].terminate = terminate;
                self.finish_call(index, ToolOutput::error(reason));
            }
            (
                Some(CallWait::CallHook(_)),
                HookOutcome::ToolCall(ToolCallOutcome::Allow { args }),
            ) => {
                if let Some(args) = args {
                    batch.calls[index].args = args;
                }
                self.execute_call(index);
            }
            (Some(CallWait::ResultHook(_, mut output)), HookOutcome::ToolResult(patch)) => {
                if let Some(content) = patch.content {
                    output.content = content;
                    batch.calls[index].images_ready = false;
                    // As pi: the structured result may no longer match the new content.
                    batch.calls[index].structured = None;
                }
                if patch.details.is_some() {
                    output.details = patch.details;
                }
                if let Some(is_error) = patch.is_error {
                    output.is_error = is_error;
                }
                self.finish_call(index, output);
            }
            (Some(CallWait::CallHook(_)), _) => self.execute_call(index),
            (Some(CallWait::ResultHook(_, output)), _) => self.finish_call(index, output),
            (other, _) => batch.calls[index].wait = other,
        }
        true
    }

    /// The client answered (or did not answer) an approval dialog.
    pub(super) fn on_approval(&mut self, ui_id: &str, answer: ApprovalAnswer) {
        let Some(batch) = self.batch() else { return };
        let waiting = batch.calls.iter().position(
            |slot| matches!(&slot.wait, Some(CallWait::Approval { ui_id: id, .. }) if id == ui_id),
        );
        let Some(index) = waiting else { return };
        let Some(CallWait::Approval { grant_key, .. }) = batch.calls[index].wait.take() else {
            return;
        };
        let name = batch.calls[index].call.name.clone();
        let args = batch.calls[index].args.clone();
        match answer {
            ApprovalAnswer::AllowOnce => {
                self.record_approval(&name, &args, "allowed once");
                self.hook_call(index);
            }
            ApprovalAnswer::AllowForSession => {
                self.tools.grants.grant(&grant_key);
                self.record_approval(&name, &args, "allowed for this session");
                self.hook_call(index);
            }
            ApprovalAnswer::Deny { timed_out } => {
                let decision = if timed_out {
                    "denied (no answer in time)"
                } else {
                    "denied by the user"
                };
                self.record_approval(&name, &args, decision);
                let reason = answer
                    .denial_reason(&name)
                    .unwrap_or_else(|| "Denied".into());
                self.finish_call(index, ToolOutput::error(reason));
            }
        }
    }

    /// Records a call's final result with its end event, once its images are ready: pi 1.6.0
    /// scales a result's images to the model's limits after the `tool_result` hook (tools of
    /// extensions and MCP servers send images of any size), on a worker here. A built-in tool's
    /// own images are ready already (`read` scales them).
    pub(super) fn finish_call(&mut self, index: usize, output: ToolOutput) {
        let has_images = output
            .content
            .iter()
            .any(|b| matches!(b, crate::messages::ContentBlock::Image(_)));
        let limits = self.image_limits();
        let Some(batch) = self.batch() else { return };
        if !has_images || batch.calls[index].images_ready {
            return self.finish_call_now(index, output);
        }
        let sender = batch.sender.clone();
        let call_id = batch.calls[index].call.id.clone();
        let (content, details, is_error) = (
            output.content.clone(),
            output.details.clone(),
            output.is_error,
        );
        let spawned = std::thread::Builder::new()
            .name("result-images".to_string())
            .spawn(move || {
                let normalized =
                    crate::tools::image::normalize_tool_result(&content, limits.as_ref());
                let output = ToolOutput {
                    content: normalized.unwrap_or(content),
                    details,
                    is_error,
                };
                let _ = sender.send(ToolEvent {
                    call_id,
                    kind: ToolEventKind::ImagesReady(output),
                });
            });
        match spawned {
            Ok(_) => {
                batch.calls[index].handle = None;
                batch.calls[index].wait = Some(CallWait::Images);
            }
            Err(e) => {
                log::error!("could not start the image worker ({e}); the result goes as it came");
                self.finish_call_now(index, output);
            }
        }
    }

    fn finish_call_now(&mut self, index: usize, mut output: ToolOutput) {
        // Again after the hooks: an extension's patch may bring a key back.
        output.redact();
        let Some(batch) = self.batch() else { return };
        batch.calls[index].handle = None;
        batch.calls[index].wait = None;
        let duration_ms = batch.calls[index]
            .started
            .map(|at| at.elapsed().as_millis() as u64);
        let mut result = events::tool_result_value(&output.content, output.details.as_ref());
        // An MCP call's result also carries the whole `CallToolResult` (and `isError`), as pi's.
        if let Some(mut structured) = batch.calls[index].structured.take() {
            crate::redact::default_redactions().apply_value(&mut structured);
            result["structuredContent"] = structured;
            if output.is_error {
                result["isError"] = json!(true);
            }
        }
        let nested_of = batch.calls[index].parent;
        // An MCP tool's call resolves a script's call to its whole `CallToolResult`, errors
        // included (pi 1.6.0); other tools to their text, and a failure rejects with it.
        let script_value = nested_of.and(result.get("structuredContent").cloned());
        let event = Event::ToolExecutionEnd {
            call: batch.calls[index].call.clone(),
            parent: nested_of.map(|p| batch.calls[p.slot].call.id.clone()),
            result,
            is_error: output.is_error,
            duration_ms,
        };
        if let Some(of) = nested_of {
            let text = output_text(&output);
            let name = batch.calls[index].call.name.clone();
            let cancelled =
                output.is_error && batch.calls[index].started.is_some() && text == tools::ABORTED;
            let mut details = None;
            if let Some(run) = batch.calls[of.slot].script.as_mut() {
                run.call_finished(of.record, output.is_error, &text, cancelled);
                let reply = if let Some(value) = script_value {
                    Ok(Some(value.to_string()))
                } else if output.is_error {
                    Err(if text.is_empty() {
                        format!("Tool \"{name}\" failed")
                    } else {
                        text
                    })
                } else {
                    Ok(Some(serde_json::to_string(&text).unwrap_or_default()))
                };
                run.script.reply(of.script_call, reply);
                details = Some(run.details());
            }
            batch.calls[index].result = Some(output);
            self.emit(event);
            if let Some(details) = details {
                self.on_tool_update(
                    of.slot,
                    ToolOutput {
                        content: Vec::new(),
                        details: Some(details),
                        is_error: false,
                    },
                );
            }
            // After an abort the last call to finish may be a nested one.
            self.finish_tools_if_done();
            return;
        }
        batch.calls[index].result = Some(output);
        let next = batch
            .sequential
            .then(|| batch.calls.iter().position(|slot| !slot.gated))
            .flatten();
        if let Some(next) = next {
            batch.calls[next].gated = true;
        }
        self.emit(event);
        if let Some(next) = next {
            self.gate_call(next);
        }
        self.finish_tools_if_done();
    }

    /// Once every call has its result: the tool result messages in call order, then `turn_end`.
    fn finish_tools_if_done(&mut self) {
        let done = matches!(&self.phase,
            Phase::RunningTools(b) if !b.starting && b.calls.iter().all(|slot| slot.result.is_some()));
        if !done {
            return;
        }
        let Phase::RunningTools(batch) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        let ToolBatch {
            assistant, calls, ..
        } = *batch;
        // Every result asked to end the run (v2 `terminate`): no follow-up model call.
        let terminate = !calls.is_empty() && calls.iter().all(|slot| slot.terminate);
        let mut tool_results = Vec::with_capacity(calls.len());
        for CallSlot {
            call,
            result,
            parent,
            nested_calls,
            ..
        } in calls
        {
            if parent.is_some() {
                continue;
            }
            let mut extra = serde_json::Map::new();
            if let Some(nested) = nested_calls {
                extra.insert("nestedCalls".into(), nested);
            }
            let output =
                result.unwrap_or_else(|| ToolOutput::error("Tool execution failed unexpectedly"));
            let message = AgentMessage::ToolResult(ToolResultMessage {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                content: output.content,
                details: output.details,
                usage: None,
                is_error: output.is_error,
                timestamp: now_ms(),
                extra,
            });
            tool_results.push(self.add_message(message));
        }
        self.emit(Event::TurnEnd {
            message: assistant,
            tool_results,
        });
        self.after_turn(!terminate);
    }

    /// Abort: running tools are cancelled (their process groups killed), waiting ones dropped;
    /// each unfinished call gets an "aborted" result (with the output it had so far).
    pub(super) fn abort_tools(&mut self) {
        let Some(batch) = self.batch() else { return };
        let unfinished: Vec<usize> = (0..batch.calls.len())
            .filter(|i| batch.calls[*i].result.is_none())
            .collect();
        for &index in &unfinished {
            batch.calls[index].handle = None;
            batch.calls[index].wait = None;
            // A script stops at once (its worker is interrupted), with the calls it started.
            batch.calls[index].script = None;
        }
        let cancelled: Vec<String> = unfinished
            .iter()
            .filter(|i| batch.calls[**i].by_extension)
            .map(|i| batch.calls[*i].call.id.clone())
            .collect();
        let outputs: Vec<(usize, ToolOutput)> = unfinished
            .iter()
            .map(|&i| {
                let call = &batch.calls[i];
                (
                    i,
                    tools::aborted_output(&call.call.name, call.partial.as_ref()),
                )
            })
            .collect();
        if let Some(host) = &self.extensions.host {
            for call_id in &cancelled {
                host.cancel_tool(call_id);
            }
        }
        for (index, output) in outputs {
            self.finish_call(index, output);
        }
    }

    pub(super) fn tool_context(&self) -> ToolContext {
        ToolContext {
            cwd: self.config.cwd.clone(),
            agent_dir: self.config.agent_dir.clone(),
            shell_path: self.config.shell_path(),
            shell_command_prefix: self.config.shell_command_prefix(),
            model_supports_images: self.model.supports_images(),
            sandbox: self.tools.sandbox.policy(),
            session_env: self.session_env(),
            image_resize: self.image_limits(),
            client: self.tools.client.clone(),
            call_id: String::new(),
        }
    }

    /// The session variables a bash tool call sees (pi 1.6.0's names): the session id, its file
    /// when there is one, the model and the thinking level as they are now.
    fn session_env(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![("PI_SESSION_ID", self.session.id().to_string())];
        if let Some(file) = self.session.file_path() {
            vars.push(("PI_SESSION_FILE", file.to_string_lossy().into_owned()));
        }
        vars.push(("PI_PROVIDER", self.model.provider.clone()));
        vars.push(("PI_MODEL", self.model.id.clone()));
        vars.push(("PI_REASONING_LEVEL", self.thinking.as_str().to_string()));
        vars
    }
}

fn output_text(output: &ToolOutput) -> String {
    crate::messages::joined_text(&output.content, "\n")
}
