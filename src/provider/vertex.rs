//! The `google-vertex` wire API (pi-ai `providers/google-vertex.js` through `@google/genai` in
//! Vertex mode): Gemini's `streamGenerateContent` on Vertex AI. The body and the stream decoder are
//! Gemini's (`google.rs`, `Dialect::Vertex` for the thinking rules that differ); this file owns
//! what is Vertex's own: the URL (regional, global, multi-region or a custom base URL), the auth
//! (a Vertex API key, or an Application Default Credentials token from `google_auth.rs`), project
//! and location from the environment, and the key order the SDK's Vertex converter writes.
//!
//! Building the request may block on a token exchange (on the request's own HTTP agent) and may
//! fail (no project, no location, no credentials): a `VertexError`, whose text is the assistant
//! error, pi's words.

use serde_json::{Map, Value};

use super::google::{self, Dialect};
use super::google_auth;
use super::request::with_extra_headers;
use super::token_cache;
use super::types::{HttpRequest, StreamRequest};
use crate::config::auth::Env;
use crate::config::google_adc;

const API_VERSION: &str = "v1";
/// The key pi stores for Vertex when ADC is meant (as well as any `<…>` placeholder).
const CREDENTIALS_MARKER: &str = "gcp-vertex-credentials";

/// Why a Vertex request could not be built. `Display` is the assistant error's text.
#[derive(Debug)]
pub enum VertexError {
    NoProject,
    NoLocation,
    /// No usable Application Default Credentials file.
    Credentials(google_adc::AdcError),
    /// The credentials could not be exchanged for an access token.
    Token(google_auth::GoogleAuthError),
}

impl std::fmt::Display for VertexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VertexError::NoProject => f.write_str(
                "Vertex AI requires a project ID. Set GOOGLE_CLOUD_PROJECT/GCLOUD_PROJECT or pass project in options.",
            ),
            VertexError::NoLocation => f.write_str(
                "Vertex AI requires a location. Set GOOGLE_CLOUD_LOCATION or pass location in options.",
            ),
            VertexError::Credentials(e) => e.fmt(f),
            VertexError::Token(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for VertexError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VertexError::Credentials(e) => Some(e),
            VertexError::Token(e) => Some(e),
            VertexError::NoProject | VertexError::NoLocation => None,
        }
    }
}

pub fn build_request(
    request: &StreamRequest,
    agent: &ureq::Agent,
) -> Result<HttpRequest, VertexError> {
    build_request_in(&Env::from_process(), request, agent)
}

fn build_request_in(
    env: &Env,
    request: &StreamRequest,
    agent: &ureq::Agent,
) -> Result<HttpRequest, VertexError> {
    let custom_base = custom_base_url(&request.model.base_url);
    let (base, auth_headers) = match api_key(&request.api_key, env) {
        // Vertex express mode: the global host, no project or location in the path.
        Some(key) => (
            versioned(custom_base.unwrap_or_else(|| "https://aiplatform.googleapis.com".into())),
            vec![("x-goog-api-key".to_string(), key)],
        ),
        None => {
            let project = env
                .get("GOOGLE_CLOUD_PROJECT")
                .or_else(|| env.get("GCLOUD_PROJECT"))
                .ok_or(VertexError::NoProject)?;
            let location = env
                .get("GOOGLE_CLOUD_LOCATION")
                .ok_or(VertexError::NoLocation)?;
            let credentials = google_adc::load(env).map_err(VertexError::Credentials)?;
            let token = google_auth::access_token(&credentials, agent, token_cache::shared())
                .map_err(VertexError::Token)?;
            let mut headers = vec![("authorization".to_string(), format!("Bearer {token}"))];
            if let Some(quota) = credentials.quota_project() {
                headers.push(("x-goog-user-project".into(), quota.into()));
            }
            // A custom base URL is the collection itself: no project/location path is added.
            let base = match custom_base {
                Some(base) => versioned(base),
                None => format!(
                    "{}/{API_VERSION}/projects/{project}/locations/{location}",
                    regional_host(location)
                ),
            };
            (base, headers)
        }
    };
    Ok(finish(
        request,
        &base,
        &model_resource(&request.model.id),
        auth_headers,
    ))
}

/// `<base>/v1` unless the base URL already names an API version.
fn versioned(base: String) -> String {
    if includes_api_version(&base) {
        base
    } else {
        format!("{base}/{API_VERSION}")
    }
}

fn finish(
    request: &StreamRequest,
    base: &str,
    model_path: &str,
    auth_headers: Vec<(String, String)>,
) -> HttpRequest {
    let mut defaults = vec![("content-type".to_string(), "application/json".to_string())];
    defaults.extend(auth_headers);
    let headers = with_extra_headers(defaults, &request.model, &request.headers);
    let mut body = google::request_body(request, Dialect::Vertex);
    vertex_key_order(&mut body);
    HttpRequest {
        url: format!("{base}/{model_path}:streamGenerateContent?alt=sse"),
        headers,
        body,
    }
}

/// The explicit key, pi's way: the configured key, else `GOOGLE_CLOUD_API_KEY`; the ADC marker
/// and `<placeholder>` values mean "use ADC".
fn api_key(configured: &str, env: &Env) -> Option<String> {
    let key = Some(configured.trim())
        .filter(|k| !k.is_empty())
        .or_else(|| env.get("GOOGLE_CLOUD_API_KEY").map(str::trim))?;
    let placeholder = key.len() > 2
        && key.starts_with('<')
        && key.ends_with('>')
        && !key[1..key.len() - 1].contains('>');
    (!key.is_empty() && key != CREDENTIALS_MARKER && !placeholder).then(|| key.to_string())
}

/// A models.json base URL, unless it is the catalog's `{location}` template.
fn custom_base_url(base_url: &str) -> Option<String> {
    let trimmed = base_url.trim();
    (!trimmed.is_empty() && !trimmed.contains("{location}"))
        .then(|| trimmed.trim_end_matches('/').to_string())
}

/// A path segment like `v1` or `v1beta1` means the base URL already names the API version.
fn includes_api_version(base_url: &str) -> bool {
    let path = base_url.split_once("://").map_or(base_url, |(_, rest)| {
        rest.split_once('/').map_or("", |(_, p)| p)
    });
    path.split('/').any(|part| {
        let Some(rest) = part.strip_prefix('v') else {
            return false;
        };
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        let tail = &rest[digits..];
        tail.is_empty()
            || tail
                .strip_prefix("beta")
                .is_some_and(|d| d.chars().all(|c| c.is_ascii_digit()))
    })
}

/// The SDK's host for a location: global, the multi-regions, else `<location>-aiplatform`.
fn regional_host(location: &str) -> String {
    match location {
        "global" => "https://aiplatform.googleapis.com".into(),
        "us" | "eu" => format!("https://aiplatform.{location}.rep.googleapis.com"),
        other => format!("https://{other}-aiplatform.googleapis.com"),
    }
}

/// `publishers/google/models/<id>` (ids with a publisher, or full resource names, as given).
fn model_resource(id: &str) -> String {
    if ["publishers/", "projects/", "models/"]
        .iter()
        .any(|p| id.starts_with(p))
    {
        id.to_string()
    } else if let Some((publisher, model)) = id.split_once('/') {
        let model = model.split('/').next().unwrap_or(model);
        format!("publishers/{publisher}/models/{model}")
    } else {
        format!("publishers/google/models/{id}")
    }
}

/// Where 1.6.0's SDK (@google/genai 2.32) writes Vertex parts differently from the Gemini API's
/// converter: `functionCall` stays as pi writes it (name, args, id) and `functionResponse` is
/// rebuilt as id, name, parts, response. Image parts and function declarations pass through.
fn vertex_key_order(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                let order: &[&str] = match key.as_str() {
                    "functionCall" => &["name", "args", "id"],
                    "functionResponse" => &["id", "name", "parts", "response"],
                    _ => &[],
                };
                reorder(child, order);
                vertex_key_order(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(vertex_key_order),
        _ => {}
    }
}

/// Puts `order`'s keys first, in that order; other keys keep their place after them.
fn reorder(value: &mut Value, order: &[&str]) {
    let Value::Object(map) = value else { return };
    if order.is_empty() {
        return;
    }
    let mut sorted = Map::new();
    for key in order {
        if let Some(v) = map.shift_remove(*key) {
            sorted.insert((*key).to_string(), v);
        }
    }
    sorted.append(map);
    *map = sorted;
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{model, request};
    use super::*;
    use crate::config::ThinkingLevel;
    use crate::messages::AgentMessage;
    use crate::messages::ToolSpec;
    use serde_json::json;

    /// google.rs's mixed history with the first assistant turn written by this Vertex model.
    fn history(id: &str) -> Vec<AgentMessage> {
        let text = include_str!("../../fixtures/bedrock/history_mixed.json").replace(
            r#""api": "google-generative-ai", "provider": "google", "model": "gemini-2.5-flash""#,
            &format!(r#""api": "google-vertex", "provider": "google-vertex", "model": "{id}""#),
        );
        serde_json::from_str(&text).unwrap()
    }

    fn vertex_request(id: &str, level: ThinkingLevel) -> StreamRequest {
        let mut m = model("google-vertex", "google-vertex", id);
        m.reasoning = true;
        m.input = vec!["text".into(), "image".into()];
        m.base_url = "http://127.0.0.1:9".into();
        let mut r = request(m, history(id));
        r.api_key = "vkey".into();
        r.thinking = level;
        r.system_prompt = "SYS".into();
        r.tools = vec![ToolSpec {
            name: "bash".into(),
            description: "Run".into(),
            parameters: json!({"type":"object","properties":{"command":{"type":"string"}}}),
        }];
        r
    }

    #[test]
    fn bodies_and_urls_match_the_reference() {
        use ThinkingLevel::*;
        // (model, level, fixture) as pi-ai sends them with an API key, parts in the key order
        // of 1.6.0's @google/genai (2.32) Vertex converter.
        let cases = [
            ("gemini-2.5-flash", Low, "gemini25flash_low"),
            ("claude-sonnet-4-5", Medium, "claude_medium"),
            ("gemini-3-pro-preview", Off, "gemini3pro_off"),
            (
                "gemini-2.5-flash-lite",
                Minimal,
                "gemini25flashlite_minimal",
            ),
            ("gemma-4-27b", Medium, "gemma4_medium"),
            ("gemini-3-flash-preview", Medium, "gemini3flash_medium"),
        ];
        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        for (id, level, fixture) in cases {
            let http = build_request(&vertex_request(id, level), &agent).unwrap();
            assert_eq!(
                http.url,
                format!(
                    "http://127.0.0.1:9/v1/publishers/google/models/{id}:streamGenerateContent?alt=sse"
                )
            );
            assert_eq!(
                http.headers,
                vec![
                    ("content-type".to_string(), "application/json".to_string()),
                    ("x-goog-api-key".to_string(), "vkey".to_string())
                ]
            );
            let expected = std::fs::read_to_string(format!(
                "{}/fixtures/vertex/requests/{fixture}.json",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            assert_eq!(
                serde_json::to_string(&http.body).unwrap(),
                expected.trim_end(),
                "{fixture}"
            );
        }
    }

    #[test]
    fn adc_requests_go_to_the_regional_host_with_the_cached_token() {
        let dir = std::env::temp_dir().join(format!("pi-rs-vertex-adc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("adc.json");
        let adc = r#"{"type":"authorized_user","client_id":"cid-vertex-test","client_secret":"cs","refresh_token":"rt-vertex-test","quota_project_id":"billing-proj"}"#;
        std::fs::write(&file, adc).unwrap();
        let env = |location: &str| {
            Env::from_pairs([
                ("GOOGLE_APPLICATION_CREDENTIALS", file.to_str().unwrap()),
                ("GCLOUD_PROJECT", "proj-1"),
                ("GOOGLE_CLOUD_LOCATION", location),
            ])
        };
        // A fresh cached token means no exchange: the agent is never used.
        let credentials = google_adc::load(&env("x")).unwrap();
        token_cache::shared().put(
            &credentials.cache_key(),
            "ya29.cached".into(),
            std::time::Duration::from_secs(3600),
            std::time::Instant::now(),
        );
        let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
        let mut r = vertex_request("gemini-2.5-pro", ThinkingLevel::Off);
        r.api_key = "<authenticated>".into();
        r.model.base_url = "https://{location}-aiplatform.googleapis.com".into();
        for (location, url) in [
            (
                "us-central1",
                "https://us-central1-aiplatform.googleapis.com/v1/projects/proj-1/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            ),
            (
                "global",
                "https://aiplatform.googleapis.com/v1/projects/proj-1/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            ),
        ] {
            let http = build_request_in(&env(location), &r, &agent).unwrap();
            assert_eq!(http.url, url);
            assert_eq!(
                http.headers,
                vec![
                    ("content-type".to_string(), "application/json".to_string()),
                    (
                        "authorization".to_string(),
                        "Bearer ya29.cached".to_string()
                    ),
                    (
                        "x-goog-user-project".to_string(),
                        "billing-proj".to_string()
                    ),
                ]
            );
        }
        let missing = Env::from_pairs([("GOOGLE_CLOUD_LOCATION", "x")]);
        assert!(
            build_request_in(&missing, &r, &agent)
                .unwrap_err()
                .to_string()
                .starts_with("Vertex AI requires a project ID")
        );
        let missing = Env::from_pairs([("GCLOUD_PROJECT", "p")]);
        assert!(
            build_request_in(&missing, &r, &agent)
                .unwrap_err()
                .to_string()
                .starts_with("Vertex AI requires a location")
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn keys_hosts_and_model_paths() {
        let env = Env::from_pairs([("GOOGLE_CLOUD_API_KEY", " env-key ")]);
        assert_eq!(api_key("cfg", &env).as_deref(), Some("cfg"));
        assert_eq!(api_key("", &env).as_deref(), Some("env-key"));
        assert_eq!(api_key("<authenticated>", &env), None);
        assert_eq!(api_key("gcp-vertex-credentials", &env), None);
        assert_eq!(api_key("", &Env::default()), None);
        assert_eq!(
            custom_base_url("https://{location}-aiplatform.googleapis.com"),
            None
        );
        assert_eq!(
            custom_base_url(" http://h/x/ ").as_deref(),
            Some("http://h/x")
        );
        assert!(includes_api_version("https://proxy/vertex/v1beta1"));
        assert!(includes_api_version("https://proxy/v1/x"));
        assert!(!includes_api_version("https://proxy/vertex"));
        assert!(!includes_api_version("https://v1.proxy"));
        assert_eq!(regional_host("global"), "https://aiplatform.googleapis.com");
        assert_eq!(
            regional_host("eu"),
            "https://aiplatform.eu.rep.googleapis.com"
        );
        assert_eq!(
            regional_host("us-central1"),
            "https://us-central1-aiplatform.googleapis.com"
        );
        assert_eq!(
            model_resource("gemini-2.5-pro"),
            "publishers/google/models/gemini-2.5-pro"
        );
        assert_eq!(
            model_resource("anthropic/claude-x"),
            "publishers/anthropic/models/claude-x"
        );
        assert_eq!(model_resource("projects/p/x"), "projects/p/x");
    }
}
