//! The `azure-openai-responses` wire API (pi-ai `providers/azure-openai-responses.js`): OpenAI's
//! Responses API on an Azure OpenAI resource. The input conversion and the stream decoder are
//! `openai_responses`'s; what differs lives here, configured from the environment as pi reads it:
//!
//! - base URL: `AZURE_OPENAI_BASE_URL`, else `https://$AZURE_OPENAI_RESOURCE_NAME.openai.azure.com/openai/v1`,
//!   else the model's `baseUrl`; an Azure host with no path (or `/openai`) gets `/openai/v1`;
//! - `?api-version=` from `AZURE_OPENAI_API_VERSION` (default `v1`);
//! - the body's `model` is the deployment: `AZURE_OPENAI_DEPLOYMENT_NAME_MAP`
//!   (`model=deployment,…`) or the model id;
//! - the key travels in an `api-key` header (`AZURE_OPENAI_API_KEY` when no other key is set).
//!
//! Without a key or a base URL the request is not built: an `AzureError`, pi's text.

use serde_json::{Map, Value, json};

use super::openai_responses::{
    ToolStyle, convert_input_with, insert_limits_tools_and_reasoning, set_header,
};
use super::request::{join_url, with_extra_headers};
use super::transcript_tools::transcript_tools;
use super::types::{HttpRequest, StreamRequest};
use crate::config::Model;

const DEFAULT_API_VERSION: &str = "v1";
const TOOL_CALL_PROVIDERS: &[&str] = &["openai", "openai-codex", "opencode", "azure"];
/// Strict mode unless the compat says otherwise (pi 1.6.0).
pub(crate) const TOOLS: ToolStyle = ToolStyle {
    strict_by_default: true,
    null_when_not_strict: false,
};

/// Why an Azure request could not be built. `Display` is the assistant error's text.
#[derive(Debug, PartialEq, Eq)]
pub enum AzureError {
    NoApiKey,
    NoBaseUrl,
    InvalidBaseUrl(String),
}

impl std::fmt::Display for AzureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AzureError::NoApiKey => f.write_str(
                "Azure OpenAI API key is required. Set AZURE_OPENAI_API_KEY environment variable or pass it as an argument.",
            ),
            AzureError::NoBaseUrl => f.write_str(
                "Azure OpenAI base URL is required. Set AZURE_OPENAI_BASE_URL or AZURE_OPENAI_RESOURCE_NAME, or pass azureBaseUrl, azureResourceName, or model.baseUrl.",
            ),
            AzureError::InvalidBaseUrl(url) => write!(f, "Invalid Azure OpenAI base URL: {url}"),
        }
    }
}

impl std::error::Error for AzureError {}

/// The Azure settings pi reads from its environment.
#[derive(Clone, Debug, Default)]
pub struct AzureEnv {
    pub base_url: Option<String>,
    pub resource_name: Option<String>,
    pub api_version: Option<String>,
    pub deployment_map: Option<String>,
    pub api_key: Option<String>,
}

impl AzureEnv {
    pub fn from_process() -> AzureEnv {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        AzureEnv {
            base_url: var("AZURE_OPENAI_BASE_URL"),
            resource_name: var("AZURE_OPENAI_RESOURCE_NAME"),
            api_version: var("AZURE_OPENAI_API_VERSION"),
            deployment_map: var("AZURE_OPENAI_DEPLOYMENT_NAME_MAP"),
            api_key: var("AZURE_OPENAI_API_KEY"),
        }
    }
}

pub fn build_request(request: &StreamRequest) -> Result<HttpRequest, AzureError> {
    build_request_with(request, &AzureEnv::from_process())
}

pub fn build_request_with(
    request: &StreamRequest,
    env: &AzureEnv,
) -> Result<HttpRequest, AzureError> {
    let model = &request.model;
    let api_key = Some(request.api_key.as_str())
        .filter(|k| !k.is_empty())
        .or(env.api_key.as_deref())
        .ok_or(AzureError::NoApiKey)?;
    let base_url = resolve_base_url(model, env)?;
    let api_version = env.api_version.as_deref().unwrap_or(DEFAULT_API_VERSION);

    let defaults = vec![
        ("accept".to_string(), "application/json".to_string()),
        ("content-type".to_string(), "application/json".to_string()),
    ];
    let mut headers = with_extra_headers(defaults, model, &request.headers);
    set_header(&mut headers, "api-key", api_key);

    let tools = transcript_tools(request);
    let mut body = Map::new();
    body.insert(
        "model".into(),
        json!(deployment_name(&model.id, env.deployment_map.as_deref())),
    );
    body.insert(
        "input".into(),
        Value::Array(convert_input_with(
            request,
            TOOL_CALL_PROVIDERS,
            &tools,
            TOOLS,
        )),
    );
    body.insert("stream".into(), json!(true));
    if !request.session_id.is_empty() {
        body.insert("prompt_cache_key".into(), json!(request.session_id));
    }
    body.insert("store".into(), json!(false));
    // Azure always sends the output cap (pi 1.6.0 reads no `supportsMaxOutputTokens` there).
    insert_limits_tools_and_reasoning(&mut body, request, &tools.top_level, true, TOOLS, true);
    super::request::apply_sampling_params(&mut body, request);

    Ok(HttpRequest {
        url: format!(
            "{}?api-version={}",
            join_url(&base_url, "/responses"),
            query_escape(api_version)
        ),
        headers,
        body: Value::Object(body),
    })
}

/// The endpoint: `AZURE_OPENAI_BASE_URL`, else the resource name's, else the model's, normalized.
fn resolve_base_url(model: &Model, env: &AzureEnv) -> Result<String, AzureError> {
    let base_url = env
        .base_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .or_else(|| {
            env.resource_name
                .as_ref()
                .map(|name| format!("https://{name}.openai.azure.com/openai/v1"))
        })
        .or_else(|| Some(model.base_url.clone()).filter(|u| !u.is_empty()))
        .ok_or(AzureError::NoBaseUrl)?;
    normalize_base_url(&base_url)
}

/// The `azure` provider's Chat Completions models (Foundry): pi 1.6.0 sends them as plain
/// `openai-completions` requests to the resolved Azure endpoint, with the deployment as the body's
/// `model` (and the key as a bearer, as for any Chat Completions server).
pub fn build_completions_request(request: &StreamRequest) -> Result<HttpRequest, AzureError> {
    let env = AzureEnv::from_process();
    let mut resolved = request.clone();
    resolved.model.base_url = resolve_base_url(&request.model, &env)?;
    let mut http = super::openai_completions::build_request(&resolved);
    if let Some(body) = http.body.as_object_mut() {
        body.insert(
            "model".into(),
            json!(deployment_name(
                &request.model.id,
                env.deployment_map.as_deref()
            )),
        );
    }
    Ok(http)
}

/// `AZURE_OPENAI_DEPLOYMENT_NAME_MAP` (`model=deployment,…`) for `model_id`, else the id.
fn deployment_name(model_id: &str, map: Option<&str>) -> String {
    map.unwrap_or("")
        .split(',')
        .filter_map(|entry| {
            let (model, deployment) = entry.trim().split_once('=')?;
            let deployment = deployment.split('=').next().unwrap_or("");
            (!model.is_empty() && !deployment.is_empty()).then(|| (model.trim(), deployment.trim()))
        })
        .rfind(|(model, _)| *model == model_id)
        .map(|(_, deployment)| deployment.to_string())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| model_id.to_string())
}

/// pi's `normalizeAzureBaseUrl`: trailing slashes dropped; an Azure host without a path (or with
/// `/openai`) gets `/openai/v1`.
fn normalize_base_url(base_url: &str) -> Result<String, AzureError> {
    let trimmed = base_url.trim().trim_end_matches('/');
    let invalid = || AzureError::InvalidBaseUrl(base_url.to_string());
    let (scheme, rest) = trimmed.split_once("://").ok_or_else(invalid)?;
    if scheme.is_empty() || rest.is_empty() {
        return Err(invalid());
    }
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let host = authority
        .rsplit('@')
        .next()
        .unwrap_or("")
        .split(':')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let azure_host =
        host.ends_with(".openai.azure.com") || host.ends_with(".cognitiveservices.azure.com");
    let bare_path = path.split(['?', '#']).next().unwrap_or("");
    if azure_host && matches!(bare_path.trim_end_matches('/'), "" | "/openai") {
        return Ok(format!("{scheme}://{authority}/openai/v1"));
    }
    Ok(trimmed.to_string())
}

fn query_escape(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{model, request, user};
    use super::*;
    use crate::config::ThinkingLevel;

    fn env(base: &str) -> AzureEnv {
        AzureEnv {
            base_url: Some(base.into()),
            ..AzureEnv::default()
        }
    }

    /// What 0.73.1 sent to a local server for `gpt-5.2` (thinking `medium`, a deployment map and
    /// an api version) and for `gpt-4.1` (no reasoning), system prompt shortened; with 1.6.0's
    /// `store: false`.
    #[test]
    fn requests_match_the_reference() {
        let mut m = model(
            "azure-openai-responses",
            "azure-openai-responses",
            "gpt-5.2",
        );
        m.reasoning = true;
        m.input = vec!["text".into(), "image".into()];
        m.thinking_level_map = json!({"off": null, "xhigh": "xhigh"}).as_object().cloned();
        let mut r = request(m, vec![user("Say hi")]);
        r.api_key = "azkey-123456".into();
        r.system_prompt = "SYS".into();
        r.thinking = ThinkingLevel::Medium;
        let azure = AzureEnv {
            base_url: Some("http://127.0.0.1:9".into()),
            api_version: Some("2025-04-01-preview".into()),
            deployment_map: Some("gpt-5.2=my-dep, x=y".into()),
            ..AzureEnv::default()
        };
        let http = build_request_with(&r, &azure).unwrap();
        assert_eq!(
            http.url,
            "http://127.0.0.1:9/responses?api-version=2025-04-01-preview"
        );
        assert_eq!(
            serde_json::to_string(&http.body).unwrap(),
            r#"{"model":"my-dep","input":[{"role":"developer","content":"SYS"},{"role":"user","content":[{"type":"input_text","text":"Say hi"}]}],"stream":true,"prompt_cache_key":"session-1","store":false,"max_output_tokens":32000,"reasoning":{"effort":"medium","summary":"auto"},"include":["reasoning.encrypted_content"]}"#
        );
        assert!(
            http.headers
                .contains(&("api-key".to_string(), "azkey-123456".to_string()))
        );
        assert!(
            !http
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("authorization"))
        );

        let mut r = request(
            model(
                "azure-openai-responses",
                "azure-openai-responses",
                "gpt-4.1",
            ),
            vec![user("Say hi")],
        );
        r.api_key = "k".into();
        let http = build_request_with(&r, &env("http://127.0.0.1:9/openai/v1/")).unwrap();
        assert_eq!(
            http.url,
            "http://127.0.0.1:9/openai/v1/responses?api-version=v1"
        );
        assert_eq!(
            serde_json::to_string(&http.body).unwrap(),
            r#"{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"Say hi"}]}],"stream":true,"prompt_cache_key":"session-1","store":false,"max_output_tokens":32000}"#
        );
    }

    #[test]
    fn base_urls_resolve_like_pi() {
        let r = request(
            model(
                "azure-openai-responses",
                "azure-openai-responses",
                "gpt-4.1",
            ),
            vec![],
        );
        let resource = AzureEnv {
            resource_name: Some("res".into()),
            api_key: Some("from-env".into()),
            ..AzureEnv::default()
        };
        let mut keyless = r.clone();
        keyless.api_key = String::new();
        let http = build_request_with(&keyless, &resource).unwrap();
        assert_eq!(
            http.url,
            "https://res.openai.azure.com/openai/v1/responses?api-version=v1"
        );
        assert!(
            http.headers
                .contains(&("api-key".to_string(), "from-env".to_string()))
        );
        assert_eq!(
            normalize_base_url("https://x.cognitiveservices.azure.com/openai/").unwrap(),
            "https://x.cognitiveservices.azure.com/openai/v1"
        );
        assert_eq!(
            normalize_base_url("https://proxy.corp/azure/").unwrap(),
            "https://proxy.corp/azure"
        );
        assert!(normalize_base_url("nonsense").is_err());
        assert!(
            build_request_with(&r, &AzureEnv::default())
                .unwrap_err()
                .to_string()
                .starts_with("Azure OpenAI base URL is required")
        );
        assert!(
            build_request_with(&keyless, &env("http://h"))
                .unwrap_err()
                .to_string()
                .starts_with("Azure OpenAI API key is required")
        );
        assert_eq!(deployment_name("a", Some(" a = dep-a ,b=c")), "dep-a");
        assert_eq!(deployment_name("z", Some("a=b")), "z");
    }

    /// `compat.supportsAdditionalTools` on Azure (pi 1.6.0): the first tools lead the input in an
    /// `additional_tools` item, written as Azure writes tools (strict mode on by default, so a
    /// tool that is not strict says `strict: false`); a later addition follows the update notice;
    /// nothing at the top level.
    #[test]
    fn additional_tools_are_declared_in_the_input() {
        let mut m = model("azure-openai-responses", "azure-openai-responses", "m");
        m.compat = json!({"supportsMidConvoSystemMessages": true,
            "supportsAdditionalTools": true})
        .as_object()
        .cloned();
        let tool = |name: &str| crate::messages::ToolSpec {
            name: name.into(),
            description: name.to_uppercase(),
            parameters: json!({"type": "object"}),
        };
        let added = crate::messages::AgentMessage::System(crate::messages::SystemMessage {
            content: crate::messages::UserContent::Text(String::new()),
            sections: None,
            timestamp: 1,
            tools_added: Some(vec![json!({"name": "grep", "description": "GREP",
                "parameters": {"type": "object"}})]),
            tools_removed: None,
            extra: serde_json::Map::new(),
        });
        let mut r = request(m, vec![user("a"), added, user("b")]);
        r.api_key = "k".into();
        r.system_prompt = "SYS".into();
        r.initial_tools = vec![tool("read")];
        r.tools = vec![tool("read"), tool("grep")];
        let body = build_request_with(&r, &env("http://127.0.0.1:9/openai/v1"))
            .unwrap()
            .body;
        assert!(body.get("tools").is_none(), "{body}");
        let declared = |name: &str| {
            json!({"type": "additional_tools", "role": "developer", "tools": [{"type": "function",
                "name": name, "description": name.to_uppercase(),
                "parameters": {"type": "object"}, "strict": false}]})
        };
        let input = body["input"].as_array().unwrap();
        assert_eq!(input[0], declared("read"));
        assert_eq!(input[1], json!({"role": "system", "content": "SYS"}));
        assert_eq!(input[3]["role"], "system");
        assert!(
            input[3]["content"]
                .as_str()
                .unwrap()
                .starts_with("This is an incremental tools update."),
            "{body}"
        );
        assert_eq!(input[4], declared("grep"));
        assert_eq!(input[5]["role"], "user");
    }
}
