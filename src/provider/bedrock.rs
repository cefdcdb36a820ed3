//! The `bedrock-converse-stream` wire API (pi-ai `providers/amazon-bedrock.js`, requests shaped as
//! the AWS SDK's ConverseStream command sends them): the request builder — endpoint and region,
//! body (messages, system, inferenceConfig, toolConfig, additionalModelRequestFields with Claude's
//! thinking settings, cache points) and auth (SigV4 or a Bedrock API key) — and the decoder of the
//! binary event-stream body (`event_stream.rs` frames carrying JSON events).
//!
//! The builder reads the environment and the shared AWS files (`config::aws`), so it can fail
//! (no credentials, no region, an image type Bedrock does not take): a `BedrockError`, whose text
//! is the assistant error. The body is serialized here once
//! for the signature; `provider/mod.rs` serializes the same `Value` again, which gives the same
//! bytes (serde_json output is deterministic).
//!
//! The decoder ends with `Done` at the end of the body after `messageStop` (usage arrives in the
//! `metadata` event after it), or with `Failed` on an exception event, a broken frame or a body
//! that ends early.

use serde_json::{Map, Value, json};

use super::anthropic::normalize_tool_call_id;
use super::aws_remote;
use super::decode::{Emitter, Framing, OpenBlocks, WireDecoder};
use super::event_stream;
use super::request::{adaptive_effort, strict_parameters};
use super::sigv4::{self, AwsCredentials, SigningRequest, SigningScope};
use super::token_cache;
use super::transform::transform_messages;
use super::types::{
    BlockKind, CacheRetention, HttpRequest, StreamRequest, cache_retention_from_env,
};
use crate::config::auth::Env;
use crate::config::aws::{self, BedrockAuth};
use crate::config::{Model, ThinkingLevel};
use crate::messages::{AgentMessage, ContentBlock, StopReason, Usage, UserContent};
use crate::time::now_ms;

/// Why a Bedrock request could not be built. `Display` is the assistant error's text.
#[derive(Debug)]
pub enum BedrockError {
    /// The credential chain or the region (`config::aws`).
    Credentials(aws::AwsCredentialError),
    /// Credentials fetched at request time (container endpoint, STS).
    RemoteCredentials(aws_remote::RemoteCredentialError),
    UnknownImageType(String),
}

impl std::fmt::Display for BedrockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BedrockError::Credentials(e) => e.fmt(f),
            BedrockError::RemoteCredentials(e) => e.fmt(f),
            BedrockError::UnknownImageType(mime_type) => {
                write!(f, "Unknown image type: {mime_type}")
            }
        }
    }
}

impl std::error::Error for BedrockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BedrockError::Credentials(e) => Some(e),
            BedrockError::RemoteCredentials(e) => Some(e),
            BedrockError::UnknownImageType(_) => None,
        }
    }
}

impl From<aws::AwsCredentialError> for BedrockError {
    fn from(e: aws::AwsCredentialError) -> BedrockError {
        BedrockError::Credentials(e)
    }
}

impl From<aws_remote::RemoteCredentialError> for BedrockError {
    fn from(e: aws_remote::RemoteCredentialError) -> BedrockError {
        BedrockError::RemoteCredentials(e)
    }
}

/// The request, signed for now with the credentials the environment gives.
/// Strict tools with `compat.supportsStrictMode` (the catalog sets it for Claude; the preferring
/// ones go non-strict after Claude refused them: `request::strict_parameters`).
pub(crate) fn strict_supported(model: &crate::config::Model) -> bool {
    model.compat_bool("supportsStrictMode") == Some(true)
}

pub fn build_request(
    request: &StreamRequest,
    agent: &ureq::Agent,
) -> Result<HttpRequest, BedrockError> {
    let env = Env::from_process();
    let endpoint = Endpoint::resolve(&env, &request.model.base_url, &request.model.id)?;
    let cache = token_cache::shared();
    let auth =
        match aws::bedrock_auth(&env)? {
            BedrockAuth::Bearer(token) => Auth::Bearer(token),
            BedrockAuth::SigV4(credentials) => Auth::SigV4(credentials),
            BedrockAuth::Container { url, authorization } => Auth::SigV4(
                aws_remote::container_credentials(agent, &url, authorization.as_deref(), cache)?,
            ),
            BedrockAuth::WebIdentity(identity) => Auth::SigV4(
                aws_remote::web_identity_credentials(agent, &identity, &endpoint.region, cache)?,
            ),
            BedrockAuth::AssumeRole(role) => Auth::SigV4(aws_remote::assumed_role_credentials(
                agent,
                &role,
                &endpoint.region,
                cache,
            )?),
        };
    let body = build_body(
        request,
        cache_retention_from_env(),
        aws::configured_region(&env),
    )?;
    Ok(endpoint.authorize(request, body, &auth, &sigv4::amz_date(now_ms())))
}

/// How this request is authorized, credentials in hand.
enum Auth {
    Bearer(String),
    SigV4(AwsCredentials),
}

/// Where the request goes and the region it is signed for.
#[derive(Clone, Debug, PartialEq)]
struct Endpoint {
    /// Scheme and authority, then an optional path prefix, without a trailing slash.
    base: String,
    region: String,
}

impl Endpoint {
    /// pi pins the catalog's standard endpoint only when neither a region nor a profile is
    /// configured; a custom base URL (a VPC endpoint, a proxy) is always used as is. An inference
    /// profile ARN names its own region, which wins (newest pi; 0.73.1 used AWS_REGION).
    fn resolve(
        env: &Env,
        base_url: &str,
        model_id: &str,
    ) -> Result<Endpoint, aws::AwsCredentialError> {
        let base_url = base_url.trim().trim_end_matches('/');
        let endpoint_region = standard_endpoint_region(base_url);
        let explicit = !base_url.is_empty()
            && (endpoint_region.is_none()
                || (aws::configured_region(env).is_none() && env.get("AWS_PROFILE").is_none()));
        let region = match arn_region(model_id) {
            Some(region) => region,
            None => aws::region(env, endpoint_region.as_deref().filter(|_| explicit))?,
        };
        let base = if explicit {
            base_url.to_string()
        } else {
            let suffix = if region.starts_with("cn-") { ".cn" } else { "" };
            format!("https://bedrock-runtime.{region}.amazonaws.com{suffix}")
        };
        Ok(Endpoint { base, region })
    }

    fn authorize(
        &self,
        request: &StreamRequest,
        body: Value,
        auth: &Auth,
        amz_date: &str,
    ) -> HttpRequest {
        let model_path = format!(
            "/model/{}/converse-stream",
            sigv4::uri_encode(request.model.id.as_bytes())
        );
        let url = format!("{}{model_path}", self.base);
        let (host, prefix) = split_authority(&self.base);
        let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
        match auth {
            Auth::Bearer(token) => {
                headers.push(("authorization".into(), format!("Bearer {token}")));
            }
            Auth::SigV4(credentials) => {
                let bytes = serde_json::to_vec(&body).unwrap_or_default();
                let path = format!("{prefix}{model_path}");
                let signing = SigningRequest {
                    method: "POST",
                    host: &host,
                    path: &path,
                    query: "",
                    headers: &headers,
                    body: &bytes,
                };
                let scope = SigningScope {
                    region: &self.region,
                    service: "bedrock",
                    amz_date,
                    content_sha256_header: true,
                };
                headers.extend(sigv4::sign(&signing, credentials, &scope));
            }
        }
        HttpRequest { url, headers, body }
    }
}

/// `host[:port]` as the `Host` header carries it, and the path prefix of a base URL.
fn split_authority(base: &str) -> (String, String) {
    let without_scheme = base.split_once("://").map_or(base, |(_, rest)| rest);
    let (authority, prefix) = match without_scheme.find('/') {
        Some(at) => (&without_scheme[..at], &without_scheme[at..]),
        None => (without_scheme, ""),
    };
    let default_port = if base.starts_with("https://") {
        ":443"
    } else {
        ":80"
    };
    let host = authority.strip_suffix(default_port).unwrap_or(authority);
    (host.to_string(), prefix.to_string())
}

/// The region of `arn:aws[-partition]:bedrock:<region>:…`.
fn arn_region(model_id: &str) -> Option<String> {
    let mut parts = model_id.split(':');
    let (arn, partition, service, region) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let partition_ok = partition == "aws"
        || partition.strip_prefix("aws-").is_some_and(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
    let region_ok = !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    (arn == "arn" && partition_ok && service == "bedrock" && region_ok && parts.next().is_some())
        .then(|| region.to_string())
}

/// The region of `https://bedrock-runtime[-fips].<region>.amazonaws.com[.cn]`.
fn standard_endpoint_region(base_url: &str) -> Option<String> {
    let without_scheme = base_url.split_once("://")?.1;
    let host = without_scheme
        .split(['/', ':'])
        .next()?
        .to_ascii_lowercase();
    let host = host.strip_suffix(".cn").unwrap_or(&host);
    let rest = host
        .strip_prefix("bedrock-runtime-fips.")
        .or_else(|| host.strip_prefix("bedrock-runtime."))?;
    let region = rest.strip_suffix(".amazonaws.com")?;
    let valid = !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    valid.then(|| region.to_string())
}

/// The model id and name, lower-cased, each also with runs of space/`_`/`.`/`:` as `-`.
fn match_candidates(model: &Model) -> Vec<String> {
    let mut values = vec![model.id.as_str()];
    if !model.name.is_empty() {
        values.push(model.name.as_str());
    }
    let mut out = Vec::new();
    for value in values {
        let lower = value.to_lowercase();
        let mut dashed = String::with_capacity(lower.len());
        let mut in_run = false;
        for c in lower.chars() {
            if c.is_whitespace() || matches!(c, '_' | '.' | ':') {
                if !in_run {
                    dashed.push('-');
                }
                in_run = true;
            } else {
                dashed.push(c);
                in_run = false;
            }
        }
        out.push(lower);
        out.push(dashed);
    }
    out
}

fn is_claude(model: &Model) -> bool {
    let id = model.id.to_lowercase();
    let name = model.name.to_lowercase();
    id.contains("anthropic.claude")
        || id.contains("anthropic/claude")
        || name.contains("anthropic.claude")
        || name.contains("anthropic/claude")
        || name.contains("claude")
}

fn supports_adaptive_thinking(model: &Model) -> bool {
    match_candidates(model)
        .iter()
        .any(|s| s.contains("opus-4-6") || s.contains("opus-4-7") || s.contains("sonnet-4-6"))
}

fn supports_prompt_caching(model: &Model) -> bool {
    let candidates = match_candidates(model);
    if !candidates.iter().any(|s| s.contains("claude")) {
        // Application inference profiles hide the model name; the user can force cache points.
        return std::env::var("AWS_BEDROCK_FORCE_CACHE").is_ok_and(|v| v == "1");
    }
    candidates.iter().any(|s| {
        s.contains("-4-") || s.contains("claude-3-7-sonnet") || s.contains("claude-3-5-haiku")
    })
}

fn is_gov_cloud(model: &Model, configured_region: Option<&str>) -> bool {
    if configured_region.is_some_and(|r| r.to_lowercase().starts_with("us-gov-")) {
        return true;
    }
    let id = model.id.to_lowercase();
    id.starts_with("us-gov.") || id.starts_with("arn:aws-us-gov:")
}

fn effort(model: &Model, level: ThinkingLevel) -> String {
    if level == ThinkingLevel::Xhigh
        && match_candidates(model)
            .iter()
            .any(|s| s.contains("opus-4-7"))
    {
        return "xhigh".into();
    }
    adaptive_effort(model, level)
}

/// The ConverseStream body, keys in the order the SDK serializes them.
fn build_body(
    request: &StreamRequest,
    retention: CacheRetention,
    configured_region: Option<&str>,
) -> Result<Value, BedrockError> {
    let model = &request.model;
    let reasoning = (request.thinking != ThinkingLevel::Off).then_some(request.thinking);
    let claude = is_claude(model);
    let adaptive = supports_adaptive_thinking(model);

    // pi 1.6.0's cap on every model (`request::context_clamped_max_tokens`); Claude with a budget
    // grows it by the thinking budget.
    let mut max_tokens = super::request::context_clamped_max_tokens(request);
    let mut budget = None;
    if let Some(level) = reasoning
        && claude
        && !adaptive
    {
        let (grown, thinking_budget) =
            super::request::thinking_max_tokens_and_budget(request, level);
        max_tokens = grown;
        budget = Some(thinking_budget);
    }

    let caching = supports_prompt_caching(model);
    let cache_point = || {
        let mut point = json!({"type": "default"});
        if retention == CacheRetention::Long {
            point["ttl"] = json!("1h");
        }
        json!({"cachePoint": point})
    };

    let mut body = Map::new();
    let mut messages = convert_messages(request)?;
    if caching
        && let Some(last) = messages.last_mut()
        && last["role"] == "user"
        && let Some(content) = last["content"].as_array_mut()
    {
        content.push(cache_point());
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.system_prompt.is_empty() {
        let mut system = vec![json!({"text": request.system_prompt})];
        if caching {
            system.push(cache_point());
        }
        body.insert("system".into(), Value::Array(system));
    }
    let mut inference = Map::new();
    inference.insert("maxTokens".into(), json!(max_tokens));
    body.insert("inferenceConfig".into(), Value::Object(inference));
    if !request.tools.is_empty() {
        let supported = strict_supported(model);
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                let strict = strict_parameters(request, tool, supported, None);
                let mut spec = json!({"name": tool.name,
                    "inputSchema": {"json": strict.as_ref().unwrap_or(&tool.parameters)},
                    "description": tool.description});
                if strict.is_some() {
                    spec["strict"] = json!(true);
                }
                json!({"toolSpec": spec})
            })
            .collect();
        body.insert("toolConfig".into(), json!({"tools": tools}));
    }
    if let Some(level) = reasoning
        && model.reasoning
        && claude
    {
        let display = (!is_gov_cloud(model, configured_region)).then_some("summarized");
        let mut fields = Map::new();
        if adaptive {
            let mut thinking = json!({"type": "adaptive"});
            if let Some(display) = display {
                thinking["display"] = json!(display);
            }
            fields.insert("thinking".into(), thinking);
            fields.insert(
                "output_config".into(),
                json!({"effort": effort(model, level)}),
            );
        } else {
            let mut thinking = json!({"type": "enabled", "budget_tokens": budget.unwrap_or(1024)});
            if let Some(display) = display {
                thinking["display"] = json!(display);
            }
            fields.insert("thinking".into(), thinking);
            fields.insert(
                "anthropic_beta".into(),
                json!(["interleaved-thinking-2025-05-14"]),
            );
        }
        body.insert("additionalModelRequestFields".into(), Value::Object(fields));
    }
    Ok(Value::Object(body))
}

fn image_block(mime_type: &str, data: &str) -> Result<Value, BedrockError> {
    let format = match mime_type {
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/png" => "png",
        "image/gif" => "gif",
        "image/webp" => "webp",
        other => return Err(BedrockError::UnknownImageType(other.to_string())),
    };
    Ok(json!({"image": {"format": format, "source": {"bytes": data}}}))
}

fn convert_messages(request: &StreamRequest) -> Result<Vec<Value>, BedrockError> {
    let model = &request.model;
    let signatures = is_claude(model);
    let transformed = transform_messages(&request.messages, model, &normalize_tool_call_id);
    let mut out: Vec<Value> = Vec::new();
    let mut in_results = false;
    for message in &transformed {
        let was_results = std::mem::replace(&mut in_results, false);
        match message {
            AgentMessage::User(user) => {
                let content: Vec<Value> = match &user.content {
                    UserContent::Text(text) => vec![json!({"text": text})],
                    UserContent::Blocks(blocks) => blocks
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text(t) => Some(Ok(json!({"text": t.text}))),
                            ContentBlock::Image(img) => {
                                Some(image_block(&img.mime_type, &img.data))
                            }
                            _ => None,
                        })
                        .collect::<Result<_, _>>()?,
                };
                out.push(json!({"role": "user", "content": content}));
            }
            AgentMessage::Assistant(assistant) => {
                let mut content = Vec::new();
                for block in &assistant.content {
                    match block {
                        ContentBlock::Text(t) if !t.text.trim().is_empty() => {
                            content.push(json!({"text": t.text}));
                        }
                        ContentBlock::ToolCall(call) => content.push(json!({"toolUse": {
                            "toolUseId": call.id, "name": call.name, "input": call.arguments}})),
                        ContentBlock::Thinking(t) if !t.thinking.trim().is_empty() => {
                            let signature = t
                                .thinking_signature
                                .as_deref()
                                .filter(|s| !s.trim().is_empty());
                            content.push(match (signatures, signature) {
                                // A Claude thought without its signature would be rejected.
                                (true, None) => json!({"text": t.thinking}),
                                (true, Some(signature)) => json!({"reasoningContent":
                                    {"reasoningText": {"text": t.thinking, "signature": signature}}}),
                                (false, _) => json!({"reasoningContent":
                                    {"reasoningText": {"text": t.thinking}}}),
                            });
                        }
                        _ => {}
                    }
                }
                if !content.is_empty() {
                    out.push(json!({"role": "assistant", "content": content}));
                }
            }
            AgentMessage::ToolResult(result) => {
                let content: Vec<Value> = result
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Image(img) => Some(image_block(&img.mime_type, &img.data)),
                        ContentBlock::Text(t) => Some(Ok(json!({"text": t.text}))),
                        _ => None,
                    })
                    .collect::<Result<_, _>>()?;
                let status = if result.is_error { "error" } else { "success" };
                let entry = json!({"toolResult": {"toolUseId": result.tool_call_id,
                    "content": content, "status": status}});
                // Consecutive results share one user message.
                match out.last_mut() {
                    Some(last) if was_results => {
                        if let Some(list) = last["content"].as_array_mut() {
                            list.push(entry);
                        }
                    }
                    _ => out.push(json!({"role": "user", "content": [entry]})),
                }
                in_results = true;
            }
            _ => {}
        }
    }
    Ok(out)
}

/// pi's readable prefixes for the SDK's exception names (the retry classifier matches them).
fn error_prefix(name: &str) -> &str {
    match name {
        "InternalServerException" => "Internal server error",
        "ModelStreamErrorException" => "Model stream error",
        "ValidationException" => "Validation error",
        "ThrottlingException" => "Throttling error",
        "ServiceUnavailableException" => "Service unavailable",
        other => other,
    }
}

/// The exception Bedrock documents for each status, for bodies that do not name one.
fn exception_for_status(status: u16) -> &'static str {
    match status {
        400 => "ValidationException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        500 => "InternalServerException",
        503 => "ServiceUnavailableException",
        _ => "UnknownError",
    }
}

/// `<prefix>: <message>` as pi formats the SDK's exception for a failed HTTP response.
pub fn http_error_message(status: u16, body: &str) -> String {
    let (name, message) = exception(status, None, body);
    format!("{}: {message}", error_prefix(&name))
}

/// The SDK's exception for a failed HTTP response: its name (the `x-amzn-errortype` header
/// when given, else the body's `__type`/`code`, else the status's) and its message.
pub(crate) fn exception(status: u16, error_type: Option<&str>, body: &str) -> (String, String) {
    let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let text = |key: &str| {
        json.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let name = error_type
        .filter(|t| !t.is_empty())
        .or_else(|| text("__type"))
        .or_else(|| text("code"))
        .or_else(|| text("Code"))
        .map(|t| {
            t.rsplit('#')
                .next()
                .unwrap_or(t)
                .split(':')
                .next()
                .unwrap_or(t)
        })
        .unwrap_or_else(|| exception_for_status(status));
    let message = text("message")
        .or_else(|| text("Message"))
        .map(str::to_string)
        .unwrap_or_else(|| {
            if json.is_null() && !body.trim().is_empty() {
                body.trim().to_string()
            } else {
                "UnknownError".to_string()
            }
        });
    (name.to_string(), message)
}

fn map_stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" | "stop_sequence" => StopReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => StopReason::Length,
        "tool_use" => StopReason::ToolUse,
        _ => StopReason::Error,
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum OpenKind {
    Text,
    Thinking,
    ToolCall,
}

/// What an open block accumulates until its stop.
struct Open {
    kind: OpenKind,
    signature: String,
}

impl Open {
    fn new(kind: OpenKind) -> Open {
        Open {
            kind,
            signature: String::new(),
        }
    }
}

/// Event-stream messages → `StreamEvent`s.
pub struct Decoder {
    open: OpenBlocks<Open>,
    stop_reason: Option<StopReason>,
}

impl Decoder {
    pub fn new(_request: &StreamRequest) -> Decoder {
        Decoder {
            open: OpenBlocks::new(),
            stop_reason: None,
        }
    }

    fn on_event(&mut self, kind: &str, event: &Value, out: &mut Emitter) {
        let wire_index = event["contentBlockIndex"].as_u64().unwrap_or(u64::MAX);
        match kind {
            "messageStart" if event["role"] != "assistant" => {
                out.fail("Unexpected assistant message start but got user message start instead");
            }
            "contentBlockStart" => {
                let tool = &event["start"]["toolUse"];
                if tool.is_object() {
                    let kind = BlockKind::ToolCall {
                        id: tool["toolUseId"].as_str().unwrap_or("").into(),
                        name: tool["name"].as_str().unwrap_or("").into(),
                    };
                    self.open
                        .start(wire_index, kind, Open::new(OpenKind::ToolCall), out);
                }
            }
            "contentBlockDelta" => {
                let delta = &event["delta"];
                if let Some(text) = delta["text"].as_str() {
                    // Text blocks have no start event: the first delta opens one.
                    let block = self.open.get_or_start(
                        wire_index,
                        || (BlockKind::Text, Open::new(OpenKind::Text)),
                        out,
                    );
                    if block.state.kind == OpenKind::Text {
                        out.delta(block.index, text);
                    }
                } else if delta["toolUse"].is_object() {
                    if let Some(block) = self.open.get_mut(wire_index)
                        && block.state.kind == OpenKind::ToolCall
                    {
                        out.delta(
                            block.index,
                            delta["toolUse"]["input"].as_str().unwrap_or(""),
                        );
                    }
                } else if delta["reasoningContent"].is_object() {
                    let reasoning = &delta["reasoningContent"];
                    let block = self.open.get_or_start(
                        wire_index,
                        || {
                            let kind = BlockKind::Thinking { redacted: false };
                            (kind, Open::new(OpenKind::Thinking))
                        },
                        out,
                    );
                    if block.state.kind == OpenKind::Thinking {
                        if let Some(text) = reasoning["text"].as_str().filter(|t| !t.is_empty()) {
                            out.delta(block.index, text);
                        }
                        if let Some(signature) = reasoning["signature"].as_str() {
                            block.state.signature.push_str(signature);
                        }
                    }
                }
            }
            "contentBlockStop" => {
                if let Some(block) = self.open.stop(wire_index) {
                    let signature =
                        (block.state.kind == OpenKind::Thinking).then_some(block.state.signature);
                    out.end(block.index, signature);
                }
            }
            "messageStop" => {
                if let Some(raw) = event["stopReason"].as_str() {
                    out.raw_stop_reason(raw);
                }
                self.stop_reason =
                    Some(map_stop_reason(event["stopReason"].as_str().unwrap_or("")));
            }
            "metadata" => {
                let usage = &event["usage"];
                if usage.is_object() {
                    let count = |key: &str| usage[key].as_u64().unwrap_or(0);
                    let (input, output) = (count("inputTokens"), count("outputTokens"));
                    let total = match count("totalTokens") {
                        0 => input + output,
                        total => total,
                    };
                    out.usage(Usage {
                        input,
                        output,
                        cache_read: count("cacheReadInputTokens"),
                        cache_write: count("cacheWriteInputTokens"),
                        total_tokens: total,
                        // The one-hour part of the writes, when the details are there.
                        cache_write_1h: usage["cacheDetails"].as_array().map(|details| {
                            details
                                .iter()
                                .filter(|d| d["ttl"] == "1h")
                                .map(|d| d["inputTokens"].as_u64().unwrap_or(0))
                                .sum()
                        }),
                        ..Usage::default()
                    });
                }
            }
            _ => {}
        }
    }
}

impl WireDecoder for Decoder {
    fn framing(&self) -> Framing {
        Framing::EventStream
    }

    fn on_frame(&mut self, message: &event_stream::Message, out: &mut Emitter) {
        let payload: Value = serde_json::from_slice(&message.payload).unwrap_or(Value::Null);
        match message.header_str(":message-type").unwrap_or("event") {
            "exception" => {
                let kind = message.header_str(":exception-type").unwrap_or("unknown");
                // `throttlingException` → `ThrottlingException`, the SDK's exception name.
                let mut name = kind.to_string();
                if let Some(first) = name.get(..1) {
                    name.replace_range(..1, &first.to_uppercase());
                }
                let text = payload["message"]
                    .as_str()
                    .or_else(|| payload["Message"].as_str())
                    .unwrap_or("UnknownError");
                out.fail(format!("{}: {text}", error_prefix(&name)));
            }
            "error" => {
                let code = message.header_str(":error-code").unwrap_or("UnknownError");
                let text = message.header_str(":error-message").unwrap_or("");
                out.fail(format!("{}: {text}", error_prefix(code)));
            }
            _ => self.on_event(
                message.header_str(":event-type").unwrap_or(""),
                &payload,
                out,
            ),
        }
    }

    /// Usage arrives after `messageStop`, so the reply ends with the body.
    fn on_eof(&mut self, out: &mut Emitter) {
        match self.stop_reason {
            Some(stop_reason) => out.done(stop_reason),
            None => out.fail("Bedrock stream ended before messageStop"),
        }
    }

    fn http_error_message(&self, status: u16, body: &str) -> String {
        http_error_message(status, body)
    }
}

#[cfg(test)]
mod tests;
