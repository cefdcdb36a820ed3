//! What maps to what between pi's records and ACP (pure): prompt content blocks into a pi
//! prompt, tool calls into ACP tool calls (kind, title, locations, content with diffs), a turn's
//! last reply into a stop reason, the model and thinking level into config options, and a
//! session's messages into the updates that replay it.
//!
//! Input: JSON values from the agent's records and the client's params. Output: ACP values.

use std::path::Path;

use serde_json::{Value, json};

use super::wire::RpcError;
use crate::mcp::config::{DEFAULT_TIMEOUT, Exposure, McpConfig, ServerConfig, Transport};
use crate::messages::ImageContent;

/// A `session/prompt`'s content blocks as pi's prompt text and images. Text blocks join with
/// blank lines; an embedded text resource becomes a `<file name="uri">` block (as `@file` does in
/// print mode); a resource link is named in the text for the model to read.
pub fn prompt_input(blocks: &Value) -> Result<(String, Vec<ImageContent>), RpcError> {
    let items = blocks
        .as_array()
        .ok_or_else(|| RpcError::params("Invalid params: \"prompt\" must be an array"))?;
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for (i, block) in items.iter().enumerate() {
        let bad = |what: &str| RpcError::params(format!("Invalid params: prompt[{i}]: {what}"));
        let field = |name: &str| block.get(name).and_then(Value::as_str);
        match field("type") {
            Some("text") => parts.push(field("text").ok_or_else(|| bad("no text"))?.to_string()),
            Some("image") => {
                let (Some(data), Some(mime)) = (field("data"), field("mimeType")) else {
                    return Err(bad("an image needs data and mimeType"));
                };
                images.push(ImageContent {
                    data: data.to_string(),
                    mime_type: mime.to_string(),
                });
            }
            Some("resource_link") => {
                let uri = field("uri").ok_or_else(|| bad("a resource link needs a uri"))?;
                let name = field("name").unwrap_or(uri);
                parts.push(format!("[{name}]({uri})"));
            }
            Some("resource") => {
                let resource = &block["resource"];
                let uri = resource["uri"].as_str().unwrap_or_default();
                let path = uri.strip_prefix("file://").unwrap_or(uri);
                match (resource["text"].as_str(), resource["blob"].as_str()) {
                    (Some(text), _) => {
                        parts.push(format!("<file name=\"{path}\">\n{text}\n</file>"));
                    }
                    (None, Some(blob)) => {
                        let mime = resource["mimeType"].as_str().unwrap_or_default();
                        if !mime.starts_with("image/") {
                            return Err(bad("only image blobs can be embedded"));
                        }
                        images.push(ImageContent {
                            data: blob.to_string(),
                            mime_type: mime.to_string(),
                        });
                        parts.push(format!("<file name=\"{path}\"></file>"));
                    }
                    (None, None) => return Err(bad("a resource needs text or blob")),
                }
            }
            Some("audio") => return Err(bad("audio prompts are not supported")),
            _ => return Err(bad("unknown content block type")),
        }
    }
    Ok((parts.join("\n\n"), images))
}

/// The client's `mcpServers` (stdio and HTTP) as MCP servers of pi's own client, for one
/// session: stdio servers start in the session's directory; every tool is declared to the model.
/// Names are made valid for pi's `mcp__<server>__<tool>` names (other characters become `-`).
/// Their env and header values are redacted like mcp.json's.
pub fn mcp_servers(servers: &Value, cwd: &Path) -> Result<McpConfig, RpcError> {
    let mut config = McpConfig::default();
    let items = match servers {
        Value::Null => return Ok(config),
        Value::Array(items) => items,
        _ => {
            return Err(RpcError::params(
                "Invalid params: \"mcpServers\" must be an array",
            ));
        }
    };
    for (i, server) in items.iter().enumerate() {
        let bad = |what: &str| RpcError::params(format!("Invalid params: mcpServers[{i}]: {what}"));
        let name: String = server["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad("a server needs a name"))?
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let pairs =
            |key: &str, secrets: &mut Vec<String>| -> Result<Vec<(String, String)>, RpcError> {
                let mut out = Vec::new();
                for pair in server[key].as_array().into_iter().flatten() {
                    let (Some(name), Some(value)) = (pair["name"].as_str(), pair["value"].as_str())
                    else {
                        return Err(bad(&format!("{key} entries need a name and a value")));
                    };
                    if value.len() >= 6 {
                        secrets.push(value.to_string());
                    }
                    out.push((name.to_string(), value.to_string()));
                }
                Ok(out)
            };
        let transport = match server["type"].as_str() {
            Some("http") => Transport::Http {
                url: server["url"]
                    .as_str()
                    .ok_or_else(|| bad("an http server needs a url"))?
                    .to_string(),
                headers: pairs("headers", &mut config.secrets)?,
                // An editor's server comes with its headers; sign-in is `pi mcp login`'s.
                oauth: None,
                provider: None,
            },
            Some("sse") => return Err(bad("the SSE transport is not supported")),
            Some(_) => return Err(bad("unknown transport type")),
            None => Transport::Stdio {
                command: server["command"]
                    .as_str()
                    .ok_or_else(|| bad("a stdio server needs a command"))?
                    .to_string(),
                args: server["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
                env: pairs("env", &mut config.secrets)?,
                cwd: cwd.to_path_buf(),
            },
        };
        config.servers.push(ServerConfig {
            name,
            transport,
            timeout: DEFAULT_TIMEOUT,
            enabled: true,
            description: None,
            exposure_name: "direct".into(),
            exposure: Exposure::Direct,
            tool_exposure: Vec::new(),
            source: "ACP client (session/new)".into(),
            project: false,
            override_source: None,
            registered: false,
        });
    }
    Ok(config)
}

/// ACP's kind for one of pi's tools.
pub fn tool_kind(name: &str) -> &'static str {
    match name {
        "read" => "read",
        "edit" | "write" => "edit",
        "bash" => "execute",
        "grep" | "find" | "ls" => "search",
        _ => "other",
    }
}

/// A short title: the tool and its main argument.
pub fn tool_title(name: &str, args: &Value) -> String {
    let arg = |key: &str| args.get(key).and_then(Value::as_str);
    let main = match name {
        "read" | "edit" | "write" | "ls" => arg("path"),
        "bash" => arg("command"),
        "grep" | "find" => arg("pattern"),
        _ => None,
    };
    match main {
        Some(main) => {
            let line = main.lines().next().unwrap_or_default();
            let short: String = line.chars().take(200).collect();
            format!("{name} {short}")
        }
        None => name.to_string(),
    }
}

/// The files a call touches, absolute (relative paths taken from the session's cwd).
pub fn tool_locations(name: &str, args: &Value, cwd: &Path) -> Value {
    let Some(path) = args.get("path").and_then(Value::as_str) else {
        return json!([]);
    };
    if !matches!(name, "read" | "edit" | "write" | "ls" | "grep" | "find") {
        return json!([]);
    }
    let absolute = crate::paths::resolve_to_cwd(path, cwd);
    let mut location = json!({"path": absolute.to_string_lossy()});
    if name == "read"
        && let Some(offset) = args.get("offset").and_then(Value::as_u64)
    {
        location["line"] = json!(offset);
    }
    json!([location])
}

/// A finished call's content: its text (and images) as content blocks, and for edit and write
/// the diffs their own arguments describe (each replacement's old and new text; a write's whole
/// new content) — never a re-read of the file, which another edit may have changed since.
pub fn tool_content(name: &str, args: &Value, result: &Value, is_error: bool, cwd: &Path) -> Value {
    let mut content = Vec::new();
    let path = args.get("path").and_then(Value::as_str).map(|p| {
        crate::paths::resolve_to_cwd(p, cwd)
            .to_string_lossy()
            .into_owned()
    });
    if !is_error && let Some(path) = &path {
        match name {
            "edit" => {
                for edit in args["edits"].as_array().into_iter().flatten() {
                    if let (Some(old), Some(new)) =
                        (edit["oldText"].as_str(), edit["newText"].as_str())
                    {
                        content.push(json!({"type": "diff", "path": path,
                            "oldText": old, "newText": new}));
                    }
                }
            }
            "write" => {
                if let Some(new) = args["content"].as_str() {
                    content.push(json!({"type": "diff", "path": path,
                        "oldText": null, "newText": new}));
                }
            }
            _ => {}
        }
    }
    content.extend(content_blocks(&result["content"]));
    Value::Array(content)
}

/// A finished edit's or write's content: the whole file before (null: a new file) and after, as
/// the tool itself read and wrote it, then the result's text.
pub fn change_content(path: &Path, old: Option<&str>, new: &str, result: &Value) -> Value {
    let mut content = vec![json!({"type": "diff", "path": path.to_string_lossy(),
        "oldText": old, "newText": new})];
    content.extend(content_blocks(&result["content"]));
    Value::Array(content)
}

/// pi content blocks (text, image) as ACP tool-call content.
pub fn content_blocks(blocks: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for block in blocks.as_array().into_iter().flatten() {
        match block["type"].as_str() {
            Some("text") => out.push(json!({"type": "content",
                "content": {"type": "text", "text": block["text"]}})),
            Some("image") => out.push(json!({"type": "content",
                "content": {"type": "image", "data": block["data"],
                    "mimeType": block["mimeType"]}})),
            _ => {}
        }
    }
    out
}

/// How a turn ended, from its last assistant message: `Ok(stopReason)` or `Err(error text)` for a
/// failed turn (a provider error is the prompt's error, so the editor shows it). A content
/// filter's stop is a refusal; a run that was aborted (`session/cancel`, or by an extension) is
/// `cancelled` whatever its last message says.
pub fn stop_reason(reply: Option<&Value>, cancelled: bool) -> Result<&'static str, String> {
    if cancelled {
        return Ok("cancelled");
    }
    let Some(reply) = reply else {
        return Ok("end_turn");
    };
    match reply["stopReason"].as_str().unwrap_or_default() {
        "aborted" => Ok("cancelled"),
        "length" => Ok("max_tokens"),
        "error" => {
            let text = reply["errorMessage"]
                .as_str()
                .unwrap_or("the model request failed");
            if text.contains("content_filter") || text.contains("refusal") {
                Ok("refusal")
            } else {
                Err(text.to_string())
            }
        }
        _ => Ok("end_turn"),
    }
}

/// The model and thinking-level selectors, from `get_state`, `get_available_models` and
/// `get_available_thinking_levels` data.
pub fn config_options(state: &Value, models: &Value, levels: &Value) -> Value {
    let model_value = |m: &Value| {
        format!(
            "{}/{}",
            m["provider"].as_str().unwrap_or_default(),
            m["id"].as_str().unwrap_or_default()
        )
    };
    let current = &state["model"];
    let mut model_options: Vec<Value> = models["models"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| json!({"value": model_value(m), "name": m["name"].as_str().or(m["id"].as_str()).unwrap_or_default()}))
        .collect();
    let current_value = model_value(current);
    if !model_options
        .iter()
        .any(|o| o["value"] == current_value.as_str())
    {
        model_options.insert(
            0,
            json!({"value": current_value, "name": current["name"].as_str().or(current["id"].as_str()).unwrap_or_default()}),
        );
    }
    let level_options: Vec<Value> = levels["levels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|l| json!({"value": l, "name": l}))
        .collect();
    let level = state["thinkingLevel"].as_str().unwrap_or("off");
    json!([
        {"id": "model", "name": "Model", "category": "model", "type": "select",
            "currentValue": current_value, "options": model_options},
        {"id": "thought_level", "name": "Thinking", "category": "thought_level",
            "type": "select", "currentValue": level, "options": level_options},
    ])
}

/// `available_commands_update` from `get_commands` data (templates, skills, extension
/// commands); the client sends `/name args` as prompt text, which pi expands as over RPC.
pub fn available_commands(data: &Value) -> Value {
    let commands: Vec<Value> = data["commands"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|command| {
            let name = command["name"].as_str()?;
            let description = command["description"].as_str().unwrap_or_default();
            Some(json!({"name": name, "description": description}))
        })
        .collect();
    json!({"sessionUpdate": "available_commands_update", "availableCommands": commands})
}

/// `usage_update` from `get_session_stats` data: tokens in context and the window, and the
/// session's cost in USD; None while the context use is unknown (right after a compaction).
pub fn usage_update(stats: &Value) -> Option<Value> {
    let usage = &stats["contextUsage"];
    let used = usage["tokens"].as_u64()?;
    let size = usage["contextWindow"].as_u64()?;
    let mut update = json!({"sessionUpdate": "usage_update", "used": used, "size": size});
    if let Some(cost) = stats["cost"].as_f64() {
        update["cost"] = json!({"amount": cost, "currency": "USD"});
    }
    Some(update)
}

/// The updates that show a session's messages again (`session/load`): user text and images,
/// the model's thinking and text, each tool call with its arguments and its result. After a
/// compaction the context starts from its summary, and so does the replay, as pi's own view of
/// a resumed session does: a completed `compaction_update` for a client that shows compactions
/// (`compaction`), else the summary as the agent's text; a branch summary the same way as text.
pub fn replay(messages: &Value, cwd: &Path, compaction: bool) -> Vec<Value> {
    let mut updates = Vec::new();
    let mut calls: std::collections::HashMap<String, (String, Value)> = Default::default();
    for (i, message) in messages.as_array().into_iter().flatten().enumerate() {
        let summary = message["summary"].as_str().unwrap_or_default();
        match message["role"].as_str() {
            Some("compactionSummary") if compaction => updates.push(json!({
                "sessionUpdate": "compaction_update", "compactionId": format!("loaded-{i}"),
                "status": "completed", "summary": [{"type": "text", "text": summary}]})),
            Some("compactionSummary") => updates.push(chunk(
                "agent_message_chunk",
                &format!("The conversation before this point was compacted into this summary:\n\n{summary}\n\n"),
            )),
            Some("branchSummary") => updates.push(chunk(
                "agent_message_chunk",
                &format!("Summary of the branch left behind:\n\n{summary}\n\n"),
            )),
            Some("user") => match &message["content"] {
                Value::String(text) => updates.push(chunk("user_message_chunk", text)),
                blocks => {
                    for block in blocks.as_array().into_iter().flatten() {
                        match block["type"].as_str() {
                            Some("text") => updates
                                .push(chunk("user_message_chunk", block["text"].as_str().unwrap_or_default())),
                            Some("image") => updates.push(json!({"sessionUpdate": "user_message_chunk",
                                "content": {"type": "image", "data": block["data"], "mimeType": block["mimeType"]}})),
                            _ => {}
                        }
                    }
                }
            },
            Some("assistant") => {
                for block in message["content"].as_array().into_iter().flatten() {
                    match block["type"].as_str() {
                        Some("text") => updates.push(chunk(
                            "agent_message_chunk",
                            block["text"].as_str().unwrap_or_default(),
                        )),
                        Some("thinking") => updates.push(chunk(
                            "agent_thought_chunk",
                            block["thinking"].as_str().unwrap_or_default(),
                        )),
                        Some("toolCall") => {
                            let id = block["id"].as_str().unwrap_or_default().to_string();
                            let name = block["name"].as_str().unwrap_or_default().to_string();
                            let args = block["arguments"].clone();
                            updates.push(tool_call(&id, &name, &args, "pending", cwd));
                            calls.insert(id, (name, args));
                        }
                        _ => {}
                    }
                }
            }
            Some("toolResult") => {
                let id = message["toolCallId"].as_str().unwrap_or_default();
                let is_error = message["isError"].as_bool().unwrap_or(false);
                let (name, args) = calls.get(id).cloned().unwrap_or_default();
                updates.push(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": id,
                    "status": if is_error { "failed" } else { "completed" },
                    "content": tool_content(&name, &args, message, is_error, cwd)}),
                );
            }
            _ => {}
        }
    }
    updates
}

/// A text chunk update (`agent_message_chunk`, `agent_thought_chunk`, `user_message_chunk`).
pub fn chunk(kind: &str, text: &str) -> Value {
    json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
}

/// A `tool_call` update for a call the model named.
pub fn tool_call(id: &str, name: &str, args: &Value, status: &str, cwd: &Path) -> Value {
    json!({"sessionUpdate": "tool_call", "toolCallId": id, "title": tool_title(name, args),
        "kind": tool_kind(name), "status": status, "rawInput": args,
        "locations": tool_locations(name, args, cwd)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_blocks_become_text_and_images() {
        let (text, images) = prompt_input(&json!([
            {"type": "text", "text": "look"},
            {"type": "resource_link", "uri": "file:///p/a.rs", "name": "a.rs"},
            {"type": "resource", "resource": {"uri": "file:///p/b.rs", "text": "fn b() {}"}},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        ]))
        .unwrap();
        assert_eq!(
            text,
            "look\n\n[a.rs](file:///p/a.rs)\n\n<file name=\"/p/b.rs\">\nfn b() {}\n</file>"
        );
        assert_eq!(images.len(), 1);
        assert!(prompt_input(&json!([{"type": "audio", "data": "", "mimeType": "a"}])).is_err());
        assert!(prompt_input(&json!("text")).is_err());
    }

    #[test]
    fn edit_diffs_come_from_the_calls_own_text() {
        let args = json!({"path": "src/a.rs", "edits": [{"oldText": "a", "newText": "b"}]});
        let result = json!({"content": [{"type": "text", "text": "ok"}]});
        let content = tool_content("edit", &args, &result, false, Path::new("/w"));
        assert_eq!(
            content,
            json!([{"type": "diff", "path": "/w/src/a.rs", "oldText": "a", "newText": "b"},
                {"type": "content", "content": {"type": "text", "text": "ok"}}])
        );
        let failed = tool_content("edit", &args, &result, true, Path::new("/w"));
        assert_eq!(failed.as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_replay_starts_from_the_compaction_summary() {
        let messages = json!([
            {"role": "compactionSummary", "summary": "## Goal\nx", "tokensBefore": 9},
            {"role": "user", "content": "next"},
        ]);
        let shown = replay(&messages, Path::new("/w"), true);
        assert_eq!(shown[0]["sessionUpdate"], "compaction_update");
        assert_eq!(shown[0]["status"], "completed");
        assert_eq!(shown[0]["summary"][0]["text"], "## Goal\nx");
        assert_eq!(shown[1]["content"]["text"], "next");
        let as_text = replay(&messages, Path::new("/w"), false);
        assert_eq!(as_text[0]["sessionUpdate"], "agent_message_chunk");
        assert!(
            as_text[0]["content"]["text"]
                .as_str()
                .unwrap()
                .contains("## Goal\nx")
        );
    }

    #[test]
    fn stop_reasons_map() {
        assert_eq!(
            stop_reason(Some(&json!({"stopReason": "stop"})), false),
            Ok("end_turn")
        );
        assert_eq!(
            stop_reason(Some(&json!({"stopReason": "length"})), false),
            Ok("max_tokens")
        );
        assert_eq!(
            stop_reason(Some(&json!({"stopReason": "aborted"})), false),
            Ok("cancelled")
        );
        assert_eq!(
            stop_reason(Some(&json!({"stopReason": "toolUse"})), true),
            Ok("cancelled")
        );
        assert_eq!(
            stop_reason(
                Some(
                    &json!({"stopReason": "error", "errorMessage": "Provider finish_reason: content_filter"})
                ),
                false
            ),
            Ok("refusal")
        );
        assert_eq!(
            stop_reason(
                Some(&json!({"stopReason": "error", "errorMessage": "boom"})),
                false
            ),
            Err("boom".to_string())
        );
    }
}
