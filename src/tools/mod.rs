//! Built-in tools (read, write, edit, bash, grep, find, ls): their specs as offered to the model,
//! argument validation, and execution on a thread of their own ("tool-<callId>").
//!
//! Input: a `ToolCall` (raw model arguments) and a `ToolContext`. Output: `ToolEvent`s on the
//! agent's channel: zero or more cumulative `Update`s, then exactly one `Finished` — unless the
//! agent dropped the `ToolHandle` first (abort), which raises the cancel flag; bash then kills its
//! process group so grandchildren die and pipes close, and the thread's last send fails harmlessly.
//! Tool failures are data for the model (`is_error: true`), never a panic or an `Err` to the loop.

pub mod bash;
pub mod client;
pub mod codemode;
pub mod edit;
pub mod env;
pub mod find;
pub mod grep;
pub mod image;
pub mod ls;
pub mod path;
pub mod path_guard;
pub mod read;
pub mod selection;
pub mod tool_search;
pub mod truncate;
pub mod validate;
pub mod walk;
pub mod write;

use std::path::PathBuf;
use std::sync::Arc;

use crossbeam_channel::Sender;
use serde_json::{Value, json};

use crate::child::CancelFlag;
use crate::messages::ToolSpec;
use crate::messages::{ContentBlock, TextContent, ToolCall};

/// The default active tool set.
pub const DEFAULT_TOOLS: [&str; 4] = ["read", "bash", "edit", "write"];
/// Every built-in tool, in pi's order.
pub const ALL_TOOLS: [&str; 7] = ["read", "bash", "edit", "write", "grep", "find", "ls"];

/// What a tool needs to know about where it runs.
#[derive(Clone, Debug)]
pub struct ToolContext {
    pub cwd: PathBuf,
    pub agent_dir: PathBuf,
    pub shell_path: Option<String>,
    pub shell_command_prefix: Option<String>,
    /// Whether the current model accepts images (read's image notice).
    pub model_supports_images: bool,
    /// The sandbox in effect when the call started; the tool keeps it to its end.
    pub sandbox: Arc<crate::sandbox::Policy>,
    /// `PI_SESSION_ID`, `PI_SESSION_FILE`, `PI_PROVIDER`, `PI_MODEL`, `PI_REASONING_LEVEL` as
    /// they stand when the call starts (the bash tool's children see them; see `env::SESSION_VARS`).
    pub session_env: Vec<(&'static str, String)>,
    /// How large an image read may send (the model's input limits); `None` when settings
    /// `images.autoResize` is off.
    pub image_resize: Option<image::ResizeLimits>,
    /// The front door's client, when it reads, writes or runs for the tools (ACP).
    pub client: Option<Arc<dyn client::Client>>,
    /// The call being run (set by `spawn_tool`).
    pub call_id: String,
}

/// A tool result or a cumulative partial one.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    pub content: Vec<ContentBlock>,
    pub details: Option<Value>,
    pub is_error: bool,
}

impl ToolOutput {
    /// Known credentials replaced in the text and details: a tool result is stored and sent to
    /// the model, and a key a tool printed has no business at the LLM vendor.
    pub fn redact(&mut self) {
        let known = crate::redact::default_redactions();
        if known.is_empty() {
            return;
        }
        for block in &mut self.content {
            if let ContentBlock::Text(text) = block
                && let std::borrow::Cow::Owned(clean) = known.apply_text(&text.text)
            {
                text.text = clean;
            }
        }
        if let Some(details) = &mut self.details {
            known.apply_value(details);
        }
    }

    pub fn text(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: vec![ContentBlock::Text(TextContent::new(&text.into()))],
            details: None,
            is_error: false,
        }
    }
    /// A failed result: `details` is `{}`, as the reference's error results carry.
    pub fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            is_error: true,
            details: Some(Value::Object(serde_json::Map::new())),
            ..ToolOutput::text(text)
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolEventKind {
    /// Cumulative partial result (replaces the previous one).
    Update(ToolOutput),
    /// An MCP call's whole `CallToolResult` (pi's `structuredContent`), sent just before its
    /// `Finished`: it rides on `tool_execution_end` (and the `tool_result` hook) only.
    Structured(serde_json::Value),
    Finished(ToolOutput),
    /// The agent's own: a finished result with its images made ready for the model.
    ImagesReady(ToolOutput),
    /// What a running `codemode` script did (output, a nested call, its end).
    Script(codemode::engine::FromScript),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolEvent {
    pub call_id: String,
    pub kind: ToolEventKind,
}

/// Owns a running tool. Dropping it cancels the run (and runs the cancel hook, if any: an MCP
/// call tells its server).
pub struct ToolHandle {
    cancel: CancelFlag,
    on_cancel: Option<Box<dyn FnOnce() + Send>>,
}

impl ToolHandle {
    pub fn with_cancel_hook(cancel: CancelFlag, on_cancel: Box<dyn FnOnce() + Send>) -> ToolHandle {
        ToolHandle {
            cancel,
            on_cancel: Some(on_cancel),
        }
    }
}

impl Drop for ToolHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(hook) = self.on_cancel.take() {
            hook();
        }
    }
}

/// Specs of the named built-in tools, in the given order; unknown names are skipped.
pub fn specs(names: &[String]) -> Vec<ToolSpec> {
    names
        .iter()
        .filter_map(|name| {
            if name == codemode::TOOL_NAME {
                return Some(codemode::spec());
            }
            if name == tool_search::TOOL_NAME {
                return Some(tool_search::spec());
            }
            let (description, parameters) = definition(name)?;
            Some(ToolSpec {
                name: name.clone(),
                description,
                parameters,
            })
        })
        .collect()
}

/// Description and JSON Schema of a built-in tool (same properties, types, required lists,
/// `additionalProperties` and key order as the reference; our own wording).
fn definition(name: &str) -> Option<(String, Value)> {
    let lines = truncate::DEFAULT_MAX_LINES;
    let kb = truncate::DEFAULT_MAX_BYTES / 1024;
    let found = match name {
        "read" => (
            format!(
                "Reads a file. Handles text files and images (jpg, png, gif, webp, bmp); images come back as attachments. \
                 Text output stops at {lines} lines or {kb}KB, whichever comes first. For big files use offset/limit, and \
                 keep reading with a larger offset until you have everything you need."
            ),
            json!({"type":"object","required":["path"],"properties":{
                "path":{"type":"string","description":"File to read, relative or absolute"},
                "offset":{"type":"number","description":"First line to read (counting from 1)"},
                "limit":{"type":"number","description":"How many lines to read at most"}}}),
        ),
        "bash" => (
            format!(
                "Runs a bash command in the current working directory and returns its stdout and stderr. Only the last \
                 {lines} lines or {kb}KB of output are returned (whichever limit is reached first); when output is cut, \
                 the complete output is written to a temp file. An optional timeout in seconds can be given."
            ),
            json!({"type":"object","required":["command"],"properties":{
                "command":{"type":"string","description":"The bash command to run"},
                "timeout":{"type":"number","description":"Timeout in seconds (optional; none by default)"}}}),
        ),
        "edit" => (
            "Edits one file by exact text replacement. Each edits[].oldText has to match a unique region of the original \
             file, and regions must not overlap. When two changes touch the same block or lines close together, combine \
             them into a single edit. Do not pad edits with long unchanged stretches just to bridge distant changes."
                .to_string(),
            json!({"type":"object","required":["path","edits"],"properties":{
                "path":{"type":"string","description":"File to edit, relative or absolute"},
                "edits":{"type":"array","items":{"type":"object","required":["oldText","newText"],"properties":{
                    "oldText":{"type":"string","description":"Exact text of one targeted replacement. It has to be unique in the original file and must not overlap any other edits[].oldText of this call."},
                    "newText":{"type":"string","description":"Text that replaces oldText."}}},
                    "description":"One or more targeted replacements, each matched against the original file (not against the result of earlier edits). No overlapping or nested edits: merge changes to the same block or nearby lines into one edit."}}}),
        ),
        "write" => (
            "Writes content to a file, creating it when missing and overwriting it otherwise. Parent directories are \
             created as needed."
                .to_string(),
            json!({"type":"object","required":["path","content"],"properties":{
                "path":{"type":"string","description":"File to write, relative or absolute"},
                "content":{"type":"string","description":"The content to write"}}}),
        ),
        "grep" => (
            format!(
                "Searches file contents for a pattern and returns the matching lines with file path and line number. \
                 Honors .gitignore. Output stops at {} matches or {kb}KB, whichever comes first; lines longer than {} \
                 characters are cut.",
                grep::DEFAULT_LIMIT,
                truncate::GREP_MAX_LINE_LENGTH
            ),
            json!({"type":"object","required":["pattern"],"properties":{
                "pattern":{"type":"string","description":"Pattern to search for (regex, or a literal string)"},
                "path":{"type":"string","description":"Directory or file to search (defaults to the current directory)"},
                "glob":{"type":"string","description":"Only search files matching this glob, e.g. '*.ts' or '**/*.spec.ts'"},
                "ignoreCase":{"type":"boolean","description":"Match case-insensitively (default: false)"},
                "literal":{"type":"boolean","description":"Take the pattern as a literal string, not a regex (default: false)"},
                "context":{"type":"number","description":"Lines of context to show before and after each match (default: 0)"},
                "limit":{"type":"number","description":"Most matches to return (default: 100)"}}}),
        ),
        "find" => (
            format!(
                "Finds files by glob pattern and returns their paths relative to the search directory. Honors \
                 .gitignore. Output stops at {} results or {kb}KB, whichever comes first.",
                find::DEFAULT_LIMIT
            ),
            json!({"type":"object","required":["pattern"],"properties":{
                "pattern":{"type":"string","description":"Glob that file paths must match, e.g. '*.ts', '**/*.json' or 'src/**/*.spec.ts'"},
                "path":{"type":"string","description":"Directory to search (defaults to the current directory)"},
                "limit":{"type":"number","description":"Most results to return (default: 1000)"}}}),
        ),
        "ls" => (
            format!(
                "Lists a directory. Entries are sorted alphabetically, directories end in '/', dotfiles are included. \
                 Output stops at {} entries or {kb}KB, whichever comes first.",
                ls::DEFAULT_LIMIT
            ),
            json!({"type":"object","properties":{
                "path":{"type":"string","description":"Directory to list (defaults to the current directory)"},
                "limit":{"type":"number","description":"Most entries to return (default: 500)"}}}),
        ),
        _ => return None,
    };
    Some(found)
}

/// The system prompt's tool line (`- <name>: <snippet>`) and the tool's guideline bullets.
pub fn prompt_info(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    match name {
        "read" => Some((
            "Read file contents",
            &["Use read to look at files rather than cat or sed."],
        )),
        "bash" => Some((
            "Execute bash commands (ls, grep, find, etc.)",
            &[
                "The PI_* environment variables name the current session, provider, model and thinking level; look there when you need them.",
            ],
        )),
        "edit" => Some((
            "Make precise file edits by exact text replacement, several disjoint edits per call allowed",
            &[
                "Use edit for focused changes, and put all the changes to one file into a single call.",
                "Every edits[].oldText has to match the original file exactly and only once. Keep them short and apart from each other; join nearby changes into one edit without spanning large unchanged stretches.",
            ],
        )),
        "write" => Some((
            "Create or overwrite files",
            &["Use write only for new files or full rewrites."],
        )),
        "grep" => Some(("Search file contents for patterns (honors .gitignore)", &[])),
        "find" => Some(("Find files by glob pattern (honors .gitignore)", &[])),
        "ls" => Some(("List directory contents", &[])),
        codemode::TOOL_NAME => Some((codemode::PROMPT_SNIPPET, codemode::PROMPT_GUIDELINES)),
        tool_search::TOOL_NAME => Some((tool_search::PROMPT_SNIPPET, &[])),
        _ => None,
    }
}

/// Starts `call` on its own thread ("tool-<callId>"). Only built-in names are known here; the
/// caller checks the call against the ACTIVE tool set first (inactive → `Tool <name> not found`).
pub fn spawn_tool(
    call: ToolCall,
    mut context: ToolContext,
    events: Sender<ToolEvent>,
) -> ToolHandle {
    context.call_id = call.id.clone();
    let cancel = CancelFlag::default();
    let call_id = call.id.clone();
    let flag = cancel.clone();
    let thread_events = events.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("tool-{}", call.id))
        .spawn(move || {
            let call_id = call.id.clone();
            let update_events = thread_events.clone();
            let update_id = call_id.clone();
            let mut emit = move |partial: ToolOutput| {
                let _ = update_events.send(ToolEvent {
                    call_id: update_id.clone(),
                    kind: ToolEventKind::Update(partial),
                });
            };
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // A client reads and writes where Landlock cannot see: the sandbox's path check
                // holds on its own, even on a kernel that cannot enforce the rest.
                if call.name != "bash"
                    && context.client.is_some()
                    && let Err(sentence) = crate::sandbox::check_call(
                        &context.sandbox,
                        &call.name,
                        &call.arguments,
                        &context.cwd,
                    )
                {
                    return (ToolOutput::error(sentence), None);
                }
                // bash confines its shell instead (between fork and exec), not this thread.
                if call.name != "bash"
                    && let Err(blocked) = crate::sandbox::enter_tool_thread(
                        &context.sandbox,
                        &call.name,
                        &call.arguments,
                        &context.cwd,
                    )
                {
                    return (ToolOutput::error(blocked.to_string()), None);
                }
                run_tool(&call.name, &call.arguments, &context, &flag, &mut emit)
            }));
            let (output, structured) = match outcome {
                Ok(ran) => ran,
                Err(_) => (
                    ToolOutput::error(format!("Tool {} failed unexpectedly", call.name)),
                    None,
                ),
            };
            if let Some(structured) = structured {
                let _ = thread_events.send(ToolEvent {
                    call_id: call_id.clone(),
                    kind: ToolEventKind::Structured(structured),
                });
            }
            let _ = thread_events.send(ToolEvent {
                call_id,
                kind: ToolEventKind::Finished(output),
            });
        });
    if let Err(e) = spawned {
        let output = ToolOutput::error(format!("Could not start tool thread: {e}"));
        let _ = events.send(ToolEvent {
            call_id,
            kind: ToolEventKind::Finished(output),
        });
    }
    ToolHandle {
        cancel,
        on_cancel: None,
    }
}

/// Runs one call synchronously: argument preparation, validation, execution.
/// Failures come back as error outputs (`is_error: true`).
pub fn run_tool(
    name: &str,
    arguments: &Value,
    context: &ToolContext,
    cancel: &CancelFlag,
    emit: &mut dyn FnMut(ToolOutput),
) -> (ToolOutput, Option<Value>) {
    let Some((_, schema)) = definition(name) else {
        return (ToolOutput::error(format!("Tool {name} not found")), None);
    };
    let prepared = if name == "edit" {
        edit::prepare_arguments(arguments.clone())
    } else {
        arguments.clone()
    };
    let args = match validate::validate_arguments(name, &schema, &prepared) {
        Ok(args) => args,
        Err(message) => return (ToolOutput::error(message), None),
    };
    if name == "bash" {
        return bash::execute(&args, context, cancel, emit);
    }
    if cancel.is_cancelled() {
        return (ToolOutput::error(ABORTED), None);
    }
    let result = match name {
        "read" => read::execute(&args, context, cancel),
        "edit" => edit::execute(&args, context, cancel),
        "write" => write::execute(&args, context, cancel),
        "grep" => grep::execute(&args, context, cancel),
        "find" => find::execute(&args, context, cancel),
        "ls" => ls::execute(&args, context, cancel),
        _ => Err(format!("Tool {name} not found")),
    };
    if cancel.is_cancelled() {
        return (ToolOutput::error(ABORTED), None);
    }
    match result {
        Ok(output) if name == "read" => {
            let structured = read::script_value(&output);
            (output, Some(structured))
        }
        Ok(output) => (output, None),
        Err(message) => (ToolOutput::error(message), None),
    }
}

/// The error text of a tool run abandoned by the agent (all tools but bash).
pub const ABORTED: &str = "Operation aborted";

/// The result of a call cut short by abort: the output it had so far, then the notice ("Command
/// aborted" for bash, `ABORTED` for the others).
pub fn aborted_output(name: &str, partial: Option<&ToolOutput>) -> ToolOutput {
    let notice = if name == "bash" {
        "Command aborted"
    } else {
        ABORTED
    };
    let partial = partial
        .map(|p| crate::messages::joined_text(&p.content, "\n"))
        .filter(|t| !t.is_empty());
    ToolOutput::error(match partial {
        Some(partial) => format!("{partial}\n\n{notice}"),
        None => notice.to_string(),
    })
}

impl ToolContext {
    /// The directory ls, find and grep work in: their `path` argument (`.` when absent or
    /// empty) resolved against the cwd, checked for listing.
    pub(crate) fn listing_path(&self, args: &Value) -> Result<PathBuf, String> {
        let raw = args
            .get("path")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .unwrap_or(".");
        let resolved = crate::paths::resolve_to_cwd(raw, &self.cwd);
        path_guard::check(&resolved, path_guard::Access::List)?;
        Ok(resolved)
    }
}

/// A number argument (after schema coercion, so any JSON number).
pub(crate) fn number_arg(args: &Value, key: &str) -> Option<f64> {
    args.get(key).and_then(Value::as_f64)
}

/// Test helpers shared by the tool modules' unit tests.
#[cfg(test)]
impl ToolContext {
    /// A context rooted at `dir` with no shell overrides and image support on.
    pub(crate) fn for_test(dir: &std::path::Path) -> ToolContext {
        ToolContext {
            cwd: dir.to_path_buf(),
            agent_dir: dir.to_path_buf(),
            shell_path: None,
            shell_command_prefix: None,
            model_supports_images: true,
            sandbox: Arc::new(crate::sandbox::Policy::off(dir, dir)),
            session_env: Vec::new(),
            image_resize: Some(image::ResizeLimits::default()),
            client: None,
            call_id: String::new(),
        }
    }
}

#[cfg(test)]
impl ToolOutput {
    /// The first content block's text, or "" when it is not text.
    pub(crate) fn first_text(&self) -> String {
        match self.content.first() {
            Some(ContentBlock::Text(t)) => t.text.clone(),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn context() -> ToolContext {
        let dir = std::env::temp_dir();
        ToolContext::for_test(&dir)
    }

    fn finished(call: ToolCall) -> ToolOutput {
        let (tx, rx) = crossbeam_channel::unbounded();
        let call_id = call.id.clone();
        let _handle = spawn_tool(call, context(), tx);
        loop {
            let event = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("tool finished");
            assert_eq!(event.call_id, call_id);
            if let ToolEventKind::Finished(output) = event.kind {
                return output;
            }
        }
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "c1".to_string(),
            name: name.to_string(),
            arguments,
            thought_signature: None,
        }
    }

    #[test]
    fn specs_keep_requested_order_and_schema_shape() {
        let names: Vec<String> = ["ls", "edit", "nope", "read"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let specs = specs(&names);
        assert_eq!(
            specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["ls", "edit", "read"]
        );
        let edit = &specs[1].parameters;
        let keys: Vec<&String> = edit.as_object().unwrap().keys().collect();
        // 1.6.0's edit schema allows extra keys (no `additionalProperties`), at the root and
        // in each edit.
        assert_eq!(keys, ["type", "required", "properties"]);
        assert_eq!(
            edit["properties"]["edits"]["items"].get("additionalProperties"),
            None
        );
        assert_eq!(specs[0].parameters.get("required"), None);
        for name in ALL_TOOLS {
            assert!(prompt_info(name).is_some());
        }
        assert_eq!(prompt_info("read").unwrap().1.len(), 1);
        assert_eq!(prompt_info("edit").unwrap().1.len(), 2);
        assert_eq!(prompt_info("bash").unwrap().1.len(), 1);
    }

    #[test]
    fn unknown_tool_and_validation_failures() {
        let out = finished(call("frobnicate", json!({})));
        assert!(out.is_error);
        assert_eq!(out.first_text(), "Tool frobnicate not found");
        assert_eq!(out.details, Some(json!({})));
        let out = finished(call("read", json!({"path":"x","limit":"lots"})));
        assert_eq!(
            out.first_text(),
            "Validation failed for tool \"read\":\n  - limit: must be number\n\nReceived arguments:\n{\n  \"path\": \"x\",\n  \"limit\": \"lots\"\n}"
        );
        // Legacy edit arguments are folded into edits before validation; half a pair is not.
        let out = finished(call("edit", json!({"path":"x","oldText":"a"})));
        assert!(
            out.first_text()
                .contains("  - edits: must have required properties edits\n")
        );
        assert!(!out.first_text().contains("oldText: "));
    }

    #[test]
    fn cancelled_file_tools_report_operation_aborted() {
        let cancel = CancelFlag::default();
        cancel.cancel();
        for (name, args) in [
            ("read", json!({"path":"x"})),
            ("write", json!({"path":"x","content":""})),
            (
                "edit",
                json!({"path":"x","edits":[{"oldText":"a","newText":"b"}]}),
            ),
            ("grep", json!({"pattern":"a"})),
            ("find", json!({"pattern":"a"})),
            ("ls", json!({})),
        ] {
            let (out, _) = run_tool(name, &args, &context(), &cancel, &mut |_| {});
            assert_eq!(out.first_text(), "Operation aborted", "{name}");
        }
    }

    #[test]
    fn same_file_edits_in_parallel_do_not_lose_updates() {
        let dir = std::env::temp_dir().join(format!("pi-rs-mod-{}", crate::ids::random_hex16()));
        std::fs::create_dir_all(&dir).unwrap();
        let lines: String = (0..20).map(|i| format!("line{i}\n")).collect();
        std::fs::write(dir.join("f.txt"), &lines).unwrap();
        let ctx = ToolContext {
            cwd: dir.clone(),
            ..context()
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        let handles: Vec<ToolHandle> = (0..20)
            .map(|i| {
                let args = json!({"path":"f.txt","edits":[{"oldText":format!("line{i}\n"),"newText":format!("LINE{i}\n")}]});
                spawn_tool(ToolCall { id: format!("e{i}"), name: "edit".to_string(), arguments: args, thought_signature: None }, ctx.clone(), tx.clone())
            })
            .collect();
        for _ in 0..20 {
            let event = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            let ToolEventKind::Finished(output) = event.kind else {
                panic!()
            };
            assert!(!output.is_error, "{}", output.first_text());
        }
        drop(handles);
        let expected: String = (0..20).map(|i| format!("LINE{i}\n")).collect();
        assert_eq!(
            std::fs::read_to_string(dir.join("f.txt")).unwrap(),
            expected
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
