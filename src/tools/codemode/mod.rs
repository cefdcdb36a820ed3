//! The `codemode` tool (pi 1.6.0 `docs/codemode.md`): the model writes a JavaScript script that
//! calls the session's other tools; only the script's output reaches the model.
//!
//! `engine` runs one script in QuickJS on its own thread; this module holds what surrounds it:
//! the tool's declaration, the `// @options:` line, the state of one running script (its output,
//! its nested calls) and the result the model reads (`Script completed` / `Script failed`, the
//! output items, `<console_output>`, truncation with a spill file). The agent's tool batch
//! (`agent/tool_batch.rs`) runs each nested call through the same pipeline as a direct call.
//! Nothing here runs, and QuickJS holds no memory, until a `codemode` call starts.

pub mod declarations;
pub mod engine;
pub mod models;
pub mod search;

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::messages::{ContentBlock, ImageContent, TextContent, ToolSpec};
use engine::{Outcome, OutputItem};

pub const TOOL_NAME: &str = "codemode";

/// The system prompt's line and guideline for the tool (pi 1.6.0's).
pub const PROMPT_SNIPPET: &str = "Run JavaScript that calls other tools";
pub const PROMPT_GUIDELINES: &[&str] = &[
    "Use codemode to batch independent tool calls (Promise.allSettled), chain them, or filter large output, instead of many separate calls.",
];

/// The Lark grammar pi 1.6.0 declares for providers that constrain a tool's raw input: only
/// the options line's shape is fixed.
pub const SOURCE_GRAMMAR: &str = "
start: options_source | plain_source
options_source: OPTIONS_LINE NEWLINE SOURCE
plain_source: SOURCE

OPTIONS_LINE: /[ \\t]*\\/\\/ @options:[^\\r\\n]*/
NEWLINE: /\\r?\\n/
SOURCE: /[\\s\\S]+/
";

const OPTIONS_PREFIX: &str = "// @options:";
const SUPPORTED_FIELDS: &str = "`max_output_tokens` and `timeout_ms`";
const MAX_TIMEOUT_MS: u64 = 2_147_483_647;
const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 10_000;
const CHARS_PER_TOKEN: u64 = 4;
const ARGS_PREVIEW_CHARS: usize = 200;
const ERROR_PREVIEW_CHARS: usize = 500;

const DESCRIPTION_INTRO: &str = "Run JavaScript that calls other tools. The input is raw JavaScript (not JSON, no code fence), run as an async function body in a QuickJS sandbox: top-level `await` and `return` work. No Node, file system, network, or timers.
- `await tools.<name>({ ...args })` resolves to a string, or an object if the tool's declaration says so, and rejects with an Error on failure. A tool whose declaration returns an object resolves on failure too when it returned that object; check its fields. Calls still running when the script ends are cancelled.
- Optional first line: `// @options: {\"max_output_tokens\": 10000, \"timeout_ms\": 60000}`";

const DESCRIPTION_GLOBALS: &str = "Globals:
- `text(value)`, `image(dataUrlOrImageBlock)`, `console.log(...)`, and top-level `return` add output; `exit()` ends the script. With several text items, each starts with a `==> text N/M <==` line, and `console` lines follow the other output in one `<console_output>` block. `image()` also saves the image to a temp file and the result names its path.
- `store(key, value)` and `load(key)` keep JSON values across codemode calls.
- `ALL_TOOLS`, `await searchTools(query, { limit?, namespace? })`, `await describeTool(name)`, `await describeNamespace(name)`: find unlisted tools, such as MCP tools.";

/// The tool as declared to the model: a function tool with one `code` string.
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: TOOL_NAME.to_string(),
        description: format!("{DESCRIPTION_INTRO}\n\n{DESCRIPTION_GLOBALS}"),
        parameters: json!({"type":"object","required":["code"],"properties":{
            "code":{"type":"string","description":"Raw JavaScript source."}}}),
    }
}

/// How `codemode` presents the session's other tools (settings `codemode.mode` and
/// `codemode.inlineBudget`, pi 1.6.0's defaults `on` and 3000).
#[derive(Clone, Debug, PartialEq)]
pub struct Presentation {
    /// `only`: the tools scripts call directly are not declared; the description lists them.
    pub only: bool,
    /// Estimated tokens (characters / 4) the listed tools' sections may spend.
    pub inline_budget: usize,
    /// The scripts' reference the description's `models` line names (pi's `docs/codemode.md`).
    pub docs: String,
}

impl Default for Presentation {
    fn default() -> Presentation {
        Presentation {
            only: false,
            inline_budget: 3000,
            docs: "docs/codemode.md".into(),
        }
    }
}

/// A tool the `codemode` description lists: its spec, the guideline bullets the system prompt
/// has only for declared tools, and its namespace (an MCP server).
pub struct Listed<'a> {
    pub spec: &'a ToolSpec,
    pub guidelines: &'a [&'a str],
    pub namespace: Option<search::Namespace>,
    /// What a script's call resolves to (`declarations::*_output_schema`).
    pub output: Value,
}

/// What a script sees of a tool's description: the description, then its prompt guidelines
/// (which the system prompt has only for declared tools) as bullets.
pub fn with_guidelines(description: &str, guidelines: &[&str]) -> String {
    let bullets: Vec<String> = guidelines
        .iter()
        .filter(|g| !g.trim().is_empty())
        .map(|g| format!("- {}", g.trim()))
        .collect();
    match bullets.is_empty() {
        true => description.to_string(),
        false => format!("{}\n\n{}", description.trim(), bullets.join("\n")),
    }
}

/// The description (its `models` line naming `docs`) with a `Nested tools:` section listing
/// `listed` as pi 1.6.0 does: tools
/// without a namespace first, then one `## <namespace>` group per namespace by name; sections
/// are chosen round-robin, cheapest first, within `budget` estimated tokens, and a group with
/// tools left out says so. Each section is the tool's description, its guidelines and its
/// TypeScript declaration.
pub fn description_listing(listed: &[Listed], budget: usize, docs: &str) -> String {
    let intro = format!(
        "{DESCRIPTION_INTRO}\n\n{DESCRIPTION_GLOBALS}\n- `models`: classifiers and image generation. Read {docs} first."
    );
    if listed.is_empty() {
        return intro;
    }
    struct Entry {
        section: String,
        cost: usize,
        shown: bool,
    }
    let mut groups: Vec<(Option<&search::Namespace>, Vec<Entry>)> = vec![(None, Vec::new())];
    for tool in listed {
        let id = identifier(&tool.spec.name);
        let heading = match id == tool.spec.name {
            true => format!("### `{id}`"),
            false => format!("### `{id}` (`{}`)", tool.spec.name),
        };
        let sample = declarations::tool_sample(
            &tool.spec.name,
            &with_guidelines(&tool.spec.description, tool.guidelines),
            &tool.spec.parameters,
            &tool.output,
        );
        let section = format!("{heading}\n{}", sample.trim());
        let cost = section.encode_utf16().count().div_ceil(4);
        let entry = Entry {
            section,
            cost,
            shown: false,
        };
        let key = tool.namespace.as_ref();
        match groups
            .iter_mut()
            .find(|(n, _)| n.map(|n| &n.name) == key.map(|n| &n.name))
        {
            Some((_, entries)) => entries.push(entry),
            None => groups.push((key, vec![entry])),
        }
    }
    groups[1..].sort_by(|a, b| {
        let name = |g: &(Option<&search::Namespace>, Vec<Entry>)| g.0.map(|n| n.name.clone());
        name(a).cmp(&name(b))
    });
    // Round-robin: each group places its cheapest remaining tool; one that does not fit ends
    // that group's turn for good.
    let mut queues: Vec<Vec<usize>> = groups
        .iter()
        .map(|(_, entries)| {
            let mut order: Vec<usize> = (0..entries.len()).collect();
            order.sort_by_key(|&i| entries[i].cost);
            order.reverse();
            order
        })
        .collect();
    let mut remaining = budget;
    let mut active: Vec<usize> = (0..groups.len())
        .filter(|&g| !queues[g].is_empty())
        .collect();
    while !active.is_empty() {
        active.retain(|&g| {
            let Some(&next) = queues[g].last() else {
                return false;
            };
            let entry = &mut groups[g].1[next];
            if entry.cost > remaining {
                return false;
            }
            remaining -= entry.cost;
            entry.shown = true;
            queues[g].pop();
            !queues[g].is_empty()
        });
    }
    let mut sections = vec!["Nested tools:".to_string()];
    for (namespace, entries) in &groups {
        let shown = entries.iter().filter(|e| e.shown).count();
        if let Some(namespace) = namespace {
            let listing = match shown {
                n if n == entries.len() => "",
                0 => " (tools not listed)",
                _ => " (some tools not listed)",
            };
            let description = namespace
                .description
                .as_deref()
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(|d| format!("\n{d}"))
                .unwrap_or_default();
            sections.push(format!("## {}{listing}{description}", namespace.name));
        }
        sections.extend(
            entries
                .iter()
                .filter(|e| e.shown)
                .map(|e| e.section.clone()),
        );
    }
    format!("{intro}\n\n{}", sections.join("\n\n"))
}

/// What a declared tool's description gains while codemode is offered (`codemode.mode` `on`):
/// how a script calls it and what the call resolves to (`output`, its output schema).
pub fn script_call_note(spec: &mut ToolSpec, output: &Value) {
    spec.description = format!(
        "{}\n\nCodemode: `tools.{}(args)` resolves to {}.",
        spec.description.trim(),
        identifier(&spec.name),
        declarations::describe_output(&spec.name, output)
    );
}

/// The identifier a script uses for a tool: characters not valid in a JavaScript identifier
/// become `_` (`mcp__dev-radius__search` → `mcp__dev_radius__search`).
pub fn identifier(name: &str) -> String {
    let mut id = String::with_capacity(name.len());
    for c in name.chars() {
        let valid = c.is_ascii_alphabetic()
            || c == '_'
            || c == '$'
            || (!id.is_empty() && c.is_ascii_digit());
        id.push(if valid { c } else { '_' });
    }
    if id.is_empty() { "_".into() } else { id }
}

/// A script's `// @options:` line.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScriptOptions {
    pub max_output_tokens: Option<u64>,
    pub timeout_ms: Option<u64>,
}

/// Splits an optional first-line `// @options: {...}` from the script (pi 1.6.0's rules and
/// messages).
pub fn parse_source(input: &str) -> Result<(String, ScriptOptions), String> {
    if input.trim().is_empty() {
        return Err("Expected JavaScript source text (non-empty). Provide JS only, optionally with a first line `// @options: {\"max_output_tokens\": 1000}`.".into());
    }
    if let Some(line) = input
        .split('\n')
        .enumerate()
        .skip(1)
        .find(|(_, line)| line.trim_start().starts_with(OPTIONS_PREFIX))
        .map(|(index, _)| index + 1)
    {
        return Err(format!(
            "The {OPTIONS_PREFIX} line must be the first line of the input; found one on line {line}"
        ));
    }
    let first = input.split('\n').next().unwrap_or("");
    let first = first.strip_suffix('\r').unwrap_or(first).trim_start();
    let Some(directive) = first.strip_prefix(OPTIONS_PREFIX) else {
        return Ok((input.to_string(), ScriptOptions::default()));
    };
    let code = input.find('\n').map(|i| &input[i..]).unwrap_or("");
    if code.trim().is_empty() {
        return Err(
            "The @options line must be followed by JavaScript source on subsequent lines".into(),
        );
    }
    Ok((code.to_string(), parse_options(directive.trim())?))
}

fn parse_options(directive: &str) -> Result<ScriptOptions, String> {
    let not_object =
        || format!("@options must be a JSON object with supported fields {SUPPORTED_FIELDS}");
    if directive.is_empty() {
        return Err(not_object());
    }
    let value: Value = serde_json::from_str(directive).map_err(|e| {
        format!("@options must be valid JSON with supported fields {SUPPORTED_FIELDS}: {e}")
    })?;
    let Value::Object(fields) = value else {
        return Err(not_object());
    };
    if let Some(key) = fields
        .keys()
        .find(|k| *k != "max_output_tokens" && *k != "timeout_ms")
    {
        return Err(format!(
            "@options only supports {SUPPORTED_FIELDS}; got `{key}`"
        ));
    }
    let safe_integer = |value: &Value| {
        value
            .as_f64()
            .filter(|n| n.fract() == 0.0 && *n >= 0.0 && *n <= 9_007_199_254_740_991.0)
            .map(|n| n as u64)
    };
    let mut options = ScriptOptions::default();
    if let Some(value) = fields.get("max_output_tokens") {
        options.max_output_tokens = Some(
            safe_integer(value)
                .ok_or("@options field `max_output_tokens` must be a non-negative safe integer")?,
        );
    }
    if let Some(value) = fields.get("timeout_ms") {
        let ms = safe_integer(value)
            .filter(|ms| *ms > 0 && *ms <= MAX_TIMEOUT_MS)
            .ok_or_else(|| {
                format!(
                    "@options field `timeout_ms` must be a positive integer up to {MAX_TIMEOUT_MS}"
                )
            })?;
        options.timeout_ms = Some(ms);
    }
    Ok(options)
}

/// One nested call as the codemode result's `details.calls` lists it.
#[derive(Clone, Debug)]
pub struct CallRecord {
    pub id: String,
    pub name: String,
    pub args: String,
    /// `running`, `ok`, `error` or `cancelled`.
    pub status: &'static str,
    pub duration_ms: Option<f64>,
    pub error: Option<String>,
    started: Instant,
}

/// The custom entry type of a script's `store()` writes (pi 1.6.0's).
pub const STORE_ENTRY_TYPE: &str = "codemode-store";

/// The discovery globals a script gets.
pub const DISCOVERY_GLOBALS: [&str; 3] = ["searchTools", "describeTool", "describeNamespace"];

/// `load()`'s values on a branch: its `codemode-store` entries' data (`{set, delete}`) applied
/// from the root; key → JSON text. Entries of another shape are skipped.
pub fn read_store<'a>(
    custom_data: impl IntoIterator<Item = &'a Value>,
) -> std::collections::BTreeMap<String, String> {
    let mut store = std::collections::BTreeMap::new();
    for data in custom_data {
        let (Some(set), Some(deleted)) = (
            data.get("set").and_then(Value::as_object),
            data.get("delete").and_then(Value::as_array),
        ) else {
            continue;
        };
        if !deleted.iter().all(Value::is_string) {
            continue;
        }
        for key in deleted.iter().filter_map(Value::as_str) {
            store.remove(key);
        }
        for (key, value) in set {
            store.insert(key.clone(), value.to_string());
        }
    }
    store
}

/// The data of the `codemode-store` entry for a successful script's writes, None when it wrote
/// nothing.
pub fn store_entry(outcome: &Outcome) -> Option<Value> {
    let Outcome::Completed { writes, .. } = outcome else {
        return None;
    };
    if writes.is_empty() {
        return None;
    }
    let mut set = Map::new();
    let mut deleted = Vec::new();
    for (key, json) in writes {
        match json
            .as_deref()
            .and_then(|j| serde_json::from_str::<Value>(j).ok())
        {
            Some(value) => {
                set.insert(key.clone(), value);
            }
            None => deleted.push(Value::String(key.clone())),
        }
    }
    Some(json!({ "set": set, "delete": deleted }))
}

/// A running script: the engine, what it printed, the calls it made.
pub struct ScriptRun {
    pub script: engine::Script,
    /// The callable tools, for the discovery globals.
    pub catalog: Vec<search::CatalogTool>,
    pub options: ScriptOptions,
    pub started: Instant,
    pub output: Vec<OutputItem>,
    pub calls: Vec<CallRecord>,
    /// Nested call ids handed out (`<callId>/<n>`).
    pub next_nested: usize,
    /// The tool result message's `nestedCalls` record (1.6.0's limits: 256 calls, 8 KB of
    /// arguments a call, 32 KB in all; past them `complete` is false).
    nested: Vec<Value>,
    nested_complete: bool,
    nested_argument_bytes: usize,
}

const NESTED_MAX_CALLS: usize = 256;
const NESTED_MAX_ARGUMENT_BYTES: usize = 8 * 1024;
const NESTED_MAX_ARGUMENT_BYTES_TOTAL: usize = 32 * 1024;

impl ScriptRun {
    pub fn new(
        script: engine::Script,
        catalog: Vec<search::CatalogTool>,
        options: ScriptOptions,
        started: Instant,
    ) -> ScriptRun {
        ScriptRun {
            script,
            catalog,
            options,
            started,
            output: Vec::new(),
            calls: Vec::new(),
            next_nested: 0,
            nested: Vec::new(),
            nested_complete: true,
            nested_argument_bytes: 0,
        }
    }

    /// `nestedCalls` of the tool result message: `{calls, complete}`; None without calls.
    pub fn nested_calls(&self) -> Option<Value> {
        if self.nested.is_empty() && self.nested_complete {
            return None;
        }
        let complete = self.nested_complete
            && self
                .nested
                .iter()
                .all(|call| call["status"] != "unfinished");
        Some(json!({ "calls": self.nested, "complete": complete }))
    }

    /// A nested call starts: its record, and the id its `tool_execution_*` records carry.
    pub fn call_started(&mut self, parent_id: &str, name: &str, args: &Value) -> (usize, String) {
        self.next_nested += 1;
        let id = format!("{parent_id}/{}", self.next_nested);
        let args_json = serde_json::to_string(args).unwrap_or_default();
        if self.nested.len() >= NESTED_MAX_CALLS {
            self.nested_complete = false;
        } else {
            let mut record = json!({"id": id, "name": name, "status": "unfinished"});
            let bytes = args_json.len();
            if bytes > NESTED_MAX_ARGUMENT_BYTES
                || self.nested_argument_bytes + bytes > NESTED_MAX_ARGUMENT_BYTES_TOTAL
            {
                record["argumentsBytes"] = json!(bytes);
                self.nested_complete = false;
            } else {
                record["arguments"] = args.clone();
                self.nested_argument_bytes += bytes;
            }
            self.nested.push(record);
        }
        let args = args_json;
        self.calls.push(CallRecord {
            id: id.clone(),
            name: name.to_string(),
            args: preview(&args, ARGS_PREVIEW_CHARS),
            status: "running",
            duration_ms: None,
            error: None,
            started: Instant::now(),
        });
        (self.calls.len() - 1, id)
    }

    pub fn call_finished(&mut self, record: usize, is_error: bool, text: &str, cancelled: bool) {
        let Some(call) = self.calls.get_mut(record) else {
            return;
        };
        call.duration_ms = Some(call.started.elapsed().as_secs_f64() * 1000.0);
        if let Some(nested) = self.nested.iter_mut().find(|n| n["id"] == call.id.as_str()) {
            nested["status"] = json!(if is_error { "error" } else { "ok" });
            nested["durationMs"] = json!(call.started.elapsed().as_millis() as u64);
            if is_error && !text.is_empty() {
                let error: String = text.chars().take(ERROR_PREVIEW_CHARS).collect();
                nested["error"] = json!(error);
            }
        }
        if is_error {
            call.status = if cancelled { "cancelled" } else { "error" };
            let text = if text.is_empty() {
                format!("Tool \"{}\" failed", call.name)
            } else {
                text.to_string()
            };
            call.error = Some(preview(&text, ERROR_PREVIEW_CHARS));
        } else {
            call.status = "ok";
        }
    }

    /// `details` of the codemode result and its updates: `{calls: [...]}`.
    pub fn details(&self) -> Value {
        let calls: Vec<Value> = self
            .calls
            .iter()
            .map(|call| {
                let mut record = Map::new();
                record.insert("id".into(), json!(call.id));
                record.insert("name".into(), json!(call.name));
                record.insert("args".into(), json!(call.args));
                record.insert("status".into(), json!(call.status));
                if let Some(ms) = call.duration_ms {
                    record.insert("durationMs".into(), json!(ms));
                }
                if let Some(error) = &call.error {
                    record.insert("error".into(), json!(error));
                }
                Value::Object(record)
            })
            .collect();
        json!({ "calls": calls })
    }

    /// The model's result once the script ended.
    pub fn finish(mut self, outcome: Outcome) -> crate::tools::ToolOutput {
        if let Outcome::NotStarted(error) = &outcome {
            return not_started(self.started, error);
        }
        for call in &mut self.calls {
            if call.status == "running" {
                call.status = "cancelled";
            }
        }
        let ok = matches!(outcome, Outcome::Completed { .. });
        let mut items = self.output.clone();
        if let Outcome::Completed {
            value: Some(json), ..
        } = &outcome
        {
            let text = match serde_json::from_str::<Value>(json) {
                Ok(Value::String(s)) => s,
                _ => json.clone(),
            };
            items.push(OutputItem::Text(text));
        }
        let mut blocks = layout(items);
        if !ok {
            blocks.push(Block::Text(format!(
                "Script error:\n{}",
                self.error_text(&outcome)
            )));
        }
        let budget = self
            .options
            .max_output_tokens
            .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
        let (blocks, full_output_path) = truncate(join_text(blocks), budget);
        let blocks = join_text(save_images(blocks));
        let wall = wall_seconds(self.started.elapsed());
        let header = format!(
            "{}\nWall time {wall} seconds\nOutput:\n",
            if ok {
                "Script completed"
            } else {
                "Script failed"
            }
        );
        let mut content = vec![ContentBlock::Text(TextContent::new(&header))];
        content.extend(blocks.into_iter().map(|block| match block {
            Block::Text(text) => ContentBlock::Text(TextContent::new(&text)),
            Block::Image(data, mime_type) => ContentBlock::Image(ImageContent { data, mime_type }),
        }));
        let mut details = self.details();
        if let Some(path) = full_output_path {
            details["fullOutputPath"] = json!(path);
        }
        crate::tools::ToolOutput {
            content,
            details: Some(details),
            is_error: !ok,
        }
    }

    fn error_text(&self, outcome: &Outcome) -> String {
        let head = match outcome {
            Outcome::Failed {
                name,
                message,
                stack,
            } => stack
                .clone()
                .unwrap_or_else(|| format!("{}: {message}", name.as_deref().unwrap_or("Error"))),
            Outcome::TimedOut(message) => format!("Script timed out: {message}"),
            Outcome::Aborted(message) => format!("Script aborted: {message}"),
            Outcome::Sandbox(message) => format!("Script sandbox failed: {message}"),
            Outcome::NotStarted(message) => message.clone(),
            Outcome::Completed { .. } => String::new(),
        };
        let summary = if self.calls.is_empty() {
            "No tool calls were made.".to_string()
        } else {
            let calls: Vec<String> = self
                .calls
                .iter()
                .map(|call| format!("{} ({})", call.name, call.status))
                .collect();
            format!(
                "Tool calls made before the failure (they are not undone): {}",
                calls.join(", ")
            )
        };
        format!("{head}\n\n{summary}")
    }
}

/// The result of a script that could not start (no worker thread).
pub fn not_started(started: Instant, error: &str) -> crate::tools::ToolOutput {
    let wall = wall_seconds(started.elapsed());
    crate::tools::ToolOutput {
        content: vec![
            ContentBlock::Text(TextContent::new(&format!(
                "Script failed\nWall time {wall} seconds\nOutput:\n"
            ))),
            ContentBlock::Text(TextContent::new(&format!(
                "Script error:\n{error}\n\nThe script did not start."
            ))),
        ],
        details: Some(json!({ "calls": [] })),
        is_error: true,
    }
}

fn wall_seconds(elapsed: Duration) -> String {
    format!("{:.1}", elapsed.as_secs_f64())
}

/// `text` cut to `max` characters with `...` (pi's previews).
fn preview(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max.saturating_sub(3)).collect();
    format!("{head}...")
}

enum Block {
    Text(String),
    Image(String, String),
}

/// Text items numbered `==> text N/M <==` when there are several, images in place, console
/// lines in one `<console_output>` block at the end.
fn layout(items: Vec<OutputItem>) -> Vec<Block> {
    let total = items
        .iter()
        .filter(|item| matches!(item, OutputItem::Text(_)))
        .count();
    let mut blocks = Vec::new();
    let mut console = Vec::new();
    let mut index = 0;
    for item in items {
        match item {
            OutputItem::Image { data, mime_type } => blocks.push(Block::Image(data, mime_type)),
            OutputItem::Console(line) => console.push(line),
            OutputItem::Text(text) => {
                index += 1;
                blocks.push(Block::Text(if total > 1 {
                    format!("==> text {index}/{total} <==\n{text}")
                } else {
                    text
                }));
            }
        }
    }
    if !console.is_empty() {
        blocks.push(Block::Text(format!(
            "<console_output>\n{}\n</console_output>",
            console.join("\n")
        )));
    }
    blocks
}

/// Adjacent text blocks joined into one, each part on its own line.
fn join_text(blocks: Vec<Block>) -> Vec<Block> {
    let mut joined = Vec::new();
    let mut current: Option<String> = None;
    let mut last_part_ends_line = true;
    for block in blocks {
        match block {
            Block::Text(text) => {
                let buffer = current.get_or_insert_with(String::new);
                if !last_part_ends_line {
                    buffer.push('\n');
                    last_part_ends_line = true;
                }
                if !text.is_empty() {
                    last_part_ends_line = text.ends_with('\n');
                }
                buffer.push_str(&text);
            }
            image => {
                if let Some(text) = current.take() {
                    joined.push(Block::Text(text));
                }
                last_part_ends_line = true;
                joined.push(image);
            }
        }
    }
    if let Some(text) = current {
        joined.push(Block::Text(text));
    }
    joined
}

/// The first `units` UTF-16 code units of `text` (never splitting a character).
fn head_utf16(text: &str, units: usize) -> &str {
    let mut count = 0;
    for (at, c) in text.char_indices() {
        count += c.len_utf16();
        if count > units {
            return &text[..at];
        }
    }
    text
}

/// The last `units` UTF-16 code units of `text`.
fn tail_utf16(text: &str, units: usize) -> &str {
    let mut count = 0;
    for (at, c) in text.char_indices().rev() {
        count += c.len_utf16();
        if count > units {
            return &text[at + c.len_utf8()..];
        }
    }
    text
}

/// The token budget: past it the text becomes one block keeping the start and end, images
/// follow, and the whole text goes to a spill file.
fn truncate(blocks: Vec<Block>, max_tokens: u64) -> (Vec<Block>, Option<String>) {
    let texts: Vec<&str> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text(t) => Some(t.as_str()),
            Block::Image(..) => None,
        })
        .collect();
    let combined = texts.join("\n");
    let length = crate::tools::truncate::utf16_len(&combined) as u64;
    let budget = max_tokens.saturating_mul(CHARS_PER_TOKEN);
    if texts.is_empty() || length <= budget {
        return (blocks, None);
    }
    let head_chars = budget / 2;
    let tail_chars = budget - head_chars;
    let removed = length - head_chars - tail_chars;
    let head = head_utf16(&combined, head_chars as usize);
    let tail = if tail_chars == 0 {
        ""
    } else {
        tail_utf16(&combined, tail_chars as usize)
    };
    let mut text = format!(
        "Warning: truncated output (original token count: {})\nTotal output lines: {}\n\n{head}…{} tokens truncated…{tail}",
        length.div_ceil(CHARS_PER_TOKEN),
        combined.split('\n').count(),
        removed.div_ceil(CHARS_PER_TOKEN),
    );
    let spilled = spill(&combined);
    match &spilled {
        Ok(path) => text.push_str(&format!(
            "\n\n[Full output: {path} (read with offset/limit)]"
        )),
        Err(e) => text.push_str(&format!("\n\n[Could not save the full output: {e}]")),
    }
    let mut out = vec![Block::Text(text)];
    out.extend(blocks.into_iter().filter(|b| matches!(b, Block::Image(..))));
    (out, spilled.ok())
}

/// Writes `text`, redacted, to a spill file `pi-codemode-<hex>.txt`.
fn spill(text: &str) -> Result<String, String> {
    use std::io::Write;
    let (path, mut file) =
        crate::tools::bash::create_spill_file("pi-codemode", ".txt").map_err(|e| e.to_string())?;
    let clean = crate::redact::default_redactions()
        .apply_text(text)
        .into_owned();
    file.write_all(clean.as_bytes())
        .map_err(|e| e.to_string())?;
    Ok(path.to_string_lossy().into_owned())
}

/// Each image saved to a spill file, a text line naming the path before it.
fn save_images(blocks: Vec<Block>) -> Vec<Block> {
    use base64::Engine;
    let mut labels: Vec<(String, String)> = Vec::new();
    let mut out = Vec::new();
    for block in blocks {
        let Block::Image(data, mime_type) = block else {
            out.push(block);
            continue;
        };
        let label = match labels.iter().find(|(d, _)| *d == data) {
            Some((_, label)) => label.clone(),
            None => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(&data)
                    .unwrap_or_default();
                let kind = format!(
                    "{mime_type}, {}",
                    crate::tools::truncate::format_size(bytes.len())
                );
                let extension = match mime_type.as_str() {
                    "image/png" => ".png",
                    "image/jpeg" => ".jpg",
                    "image/gif" => ".gif",
                    _ => ".webp",
                };
                let saved = crate::tools::bash::create_spill_file("pi-codemode", extension)
                    .and_then(|(path, mut file)| {
                        use std::io::Write;
                        file.write_all(&bytes)?;
                        Ok(path)
                    });
                let label = match saved {
                    Ok(path) => format!("[Image saved to {} ({kind})]", path.display()),
                    Err(e) => format!("[Image ({kind}) could not be saved: {e}]"),
                };
                labels.push((data.clone(), label.clone()));
                label
            }
        };
        out.push(Block::Text(label));
        out.push(Block::Image(data, mime_type));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_shares_its_budget_round_robin_and_marks_left_out_groups() {
        let spec = |name: &str, words: usize| ToolSpec {
            name: name.into(),
            description: "w ".repeat(words),
            parameters: json!({"type": "object"}),
        };
        let namespace = |name: &str| search::Namespace {
            name: name.into(),
            aliases: vec![],
            description: Some(format!("{name} tools")),
            instructions: None,
        };
        let (small, big, a, b) = (
            spec("small", 1),
            spec("big", 400),
            spec("a", 1),
            spec("b-x", 1),
        );
        let listed = [
            Listed {
                spec: &big,
                guidelines: &["Be brief."],
                namespace: None,
                output: declarations::text_output_schema(),
            },
            Listed {
                spec: &small,
                guidelines: &[],
                namespace: None,
                output: declarations::text_output_schema(),
            },
            Listed {
                spec: &b,
                guidelines: &[],
                namespace: Some(namespace("mcp__z")),
                output: declarations::text_output_schema(),
            },
            Listed {
                spec: &a,
                guidelines: &[],
                namespace: Some(namespace("mcp__y")),
                output: declarations::text_output_schema(),
            },
        ];
        let all = description_listing(&listed, 10_000, "D");
        let order: Vec<usize> = [
            "### `big`",
            "### `small`",
            "## mcp__y\nmcp__y tools",
            "### `a`",
            "## mcp__z\n",
            "### `b_x` (`b-x`)",
        ]
        .iter()
        .map(|h| all.find(h).unwrap_or_else(|| panic!("{h} in {all}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{all}");
        assert!(all.contains("- Be brief."));
        // The big section does not fit: the cheap ones still do, round-robin.
        let some = description_listing(&listed, 120, "D");
        assert!(
            !some.contains("### `big`") && some.contains("### `small`"),
            "{some}"
        );
        assert!(some.contains("## mcp__y\n") && some.contains("### `b_x`"));
        let none = description_listing(&listed, 0, "D");
        assert!(none.ends_with("Nested tools:\n\n## mcp__y (tools not listed)\nmcp__y tools\n\n## mcp__z (tools not listed)\nmcp__z tools"), "{none}");
        assert_eq!(
            description_listing(&[], 0, "D"),
            format!(
                "{}\n- `models`: classifiers and image generation. Read D first.",
                spec_description()
            )
        );
    }

    fn spec_description() -> String {
        spec().description
    }

    #[test]
    fn options_line() {
        assert_eq!(
            parse_source("text(1)").unwrap(),
            ("text(1)".to_string(), ScriptOptions::default())
        );
        let (code, options) =
            parse_source("// @options: {\"max_output_tokens\": 5, \"timeout_ms\": 100}\ntext(1)")
                .unwrap();
        assert_eq!(code, "\ntext(1)");
        assert_eq!(options.max_output_tokens, Some(5));
        assert_eq!(options.timeout_ms, Some(100));
        assert_eq!(
            parse_source("text(1)\n// @options: {}").unwrap_err(),
            "The // @options: line must be the first line of the input; found one on line 2"
        );
        assert_eq!(
            parse_source("// @options: {\"x\": 1}\ntext(1)").unwrap_err(),
            "@options only supports `max_output_tokens` and `timeout_ms`; got `x`"
        );
        assert!(
            parse_source("  ")
                .unwrap_err()
                .starts_with("Expected JavaScript")
        );
        assert!(
            parse_source("// @options: {\"timeout_ms\": 0}\nx")
                .unwrap_err()
                .contains("positive integer up to 2147483647")
        );
    }

    #[test]
    fn identifiers() {
        assert_eq!(
            identifier("mcp__dev-radius__search"),
            "mcp__dev_radius__search"
        );
        assert_eq!(identifier("1abc"), "_abc");
        assert_eq!(identifier(""), "_");
    }

    #[test]
    fn layout_numbers_texts_and_collects_console() {
        let blocks = join_text(layout(vec![
            OutputItem::Text("a".into()),
            OutputItem::Console("c1".into()),
            OutputItem::Text("b".into()),
        ]));
        let texts: Vec<String> = blocks
            .into_iter()
            .map(|b| match b {
                Block::Text(t) => t,
                Block::Image(..) => "image".into(),
            })
            .collect();
        assert_eq!(
            texts,
            vec![
                "==> text 1/2 <==\na\n==> text 2/2 <==\nb\n<console_output>\nc1\n</console_output>"
            ]
        );
    }

    #[test]
    fn truncation_keeps_both_ends_and_spills() {
        let text = format!("{}{}", "a".repeat(100), "z".repeat(100));
        let (blocks, path) = truncate(vec![Block::Text(text.clone())], 10);
        let Block::Text(cut) = &blocks[0] else {
            panic!("text")
        };
        assert!(cut.starts_with(
            "Warning: truncated output (original token count: 50)\nTotal output lines: 1\n\n"
        ));
        assert!(cut.contains(&format!(
            "{}…40 tokens truncated…{}",
            "a".repeat(20),
            "z".repeat(20)
        )));
        let path = path.expect("spilled");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let _ = std::fs::remove_file(path);
    }
}
