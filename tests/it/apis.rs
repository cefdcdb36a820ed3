//! The Azure OpenAI Responses, Mistral and ChatGPT Codex wire APIs end to end through the binary,
//! against the fake provider speaking their real stream formats. The request bodies match what
//! pi 0.73.1 sent to a local server (see the unit tests of `src/provider/azure_responses.rs`,
//! `mistral.rs`, `codex_responses.rs`).
//!
//! Reference (PI_TEST_BIN): every test here passes against pi 0.73.1 as well.

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::support::{Pi, Setup, Workspace, assistant_messages, prompt, session_file};

/// The first assistant message of `run`, which must have stopped normally.
#[track_caller]
fn first_stopped(run: &[Value]) -> Value {
    let message = assistant_messages(run).remove(0);
    assert_eq!(message["stopReason"], "stop", "{message}");
    message
}

/// The first assistant message of the run `text` starts (see `first_stopped`).
#[track_caller]
fn first_reply(pi: &mut Pi, id: &str, text: &str) -> Value {
    first_stopped(&prompt(pi, id, text))
}

/// One process per step on one session (resumed with `--session` from the second step on),
/// each started with its step's extra arguments and running one prompt of the step's text.
#[track_caller]
fn prompts_in_one_session(setup: &Setup, steps: &[(&str, &[&str])]) {
    let workspace = Workspace::new();
    let mut file: Option<std::path::PathBuf> = None;
    for (step, (text, args)) in steps.iter().enumerate() {
        let mut run_setup = setup.clone();
        if let Some(file) = &file {
            run_setup = run_setup.arg("--session").arg(&file.to_string_lossy());
        }
        for arg in *args {
            run_setup = run_setup.arg(arg);
        }
        let mut pi = Pi::spawn_in(&workspace, &run_setup);
        first_reply(&mut pi, &format!("p{step}"), text);
        file.get_or_insert_with(|| session_file(&mut pi, "s"));
        pi.close_and_wait();
    }
}

#[test]
fn azure_uses_the_deployment_api_version_and_api_key_header() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
    let setup = Setup::new(&fake, "azure", "gpt-5.2")
        .models_json(r#"{"providers": {}}"#)
        .env("AZURE_OPENAI_API_KEY", "azure-key-123456")
        .env(
            "AZURE_OPENAI_BASE_URL",
            &format!("{}/openai/v1", fake.base_url()),
        )
        .env("AZURE_OPENAI_DEPLOYMENT_NAME_MAP", "gpt-5.2=prod-gpt52")
        .env("AZURE_OPENAI_API_VERSION", "2025-04-01-preview");
    let mut pi = Pi::spawn(&setup);
    let message = first_reply(&mut pi, "p", "Say hello");
    assert_eq!(message["api"], "azure-openai-responses");
    assert_eq!(
        message["content"][1]["text"],
        "Hello from the fake responses API."
    );
    let request = &fake.requests()[0];
    assert_eq!(
        request.path,
        "/openai/v1/responses?api-version=2025-04-01-preview"
    );
    assert_eq!(request.header("api-key"), Some("azure-key-123456"));
    assert_eq!(request.header("authorization"), None);
    assert_eq!(request.body["model"], "prod-gpt52");
    assert_eq!(request.body["input"][0]["role"], "developer");
}

/// pi 1.6.0's `azure` provider also has Chat Completions models (Foundry): they go to the same
/// resolved endpoint as plain Chat Completions requests, the deployment as the model, the key as
/// a bearer.
#[test]
fn azure_chat_completions_models_use_the_azure_endpoint_and_deployment() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai/text.sse")]);
    let setup = Setup::new(&fake, "azure", "deepseek-v4-pro")
        .models_json(r#"{"providers": {}}"#)
        .env("AZURE_OPENAI_API_KEY", "azure-key-123456")
        .env(
            "AZURE_OPENAI_BASE_URL",
            &format!("{}/openai/v1", fake.base_url()),
        )
        .env(
            "AZURE_OPENAI_DEPLOYMENT_NAME_MAP",
            "deepseek-v4-pro=prod-ds",
        );
    let mut pi = Pi::spawn(&setup);
    let message = first_reply(&mut pi, "p", "Say hello");
    assert_eq!(message["api"], "openai-completions");
    let request = &fake.requests()[0];
    assert_eq!(request.path, "/openai/v1/chat/completions");
    assert_eq!(
        request.header("authorization"),
        Some("Bearer azure-key-123456")
    );
    assert_eq!(request.body["model"], "prod-ds");
}

/// Cloudflare endpoints carry the account (and gateway) id from the environment or auth.json's
/// `env` object in place of their `{CLOUDFLARE_…}` placeholders; the AI Gateway takes the key as
/// `cf-aig-authorization`, never as the upstream API's `Authorization`.
#[test]
fn cloudflare_urls_get_their_ids_and_the_gateway_its_own_auth_header() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai/text.sse")]);
    let base = format!(
        "{}/v1/{{CLOUDFLARE_ACCOUNT_ID}}/{{CLOUDFLARE_GATEWAY_ID}}/compat",
        fake.base_url()
    );
    let models =
        format!(r#"{{"providers": {{"cloudflare-ai-gateway": {{"baseUrl": "{base}"}}}}}}"#);
    let setup = Setup::new(
        &fake,
        "cloudflare-ai-gateway",
        "workers-ai/@cf/deepseek-ai/deepseek-v4-pro-0813",
    )
    .models_json(&models)
    .env("CLOUDFLARE_GATEWAY_ID", "gw-7");
    let workspace = Workspace::new();
    std::fs::write(
        workspace.agent_dir().join("auth.json"),
        r#"{"cloudflare-ai-gateway": {"type": "api_key", "key": "cf-key-123456", "env": {"CLOUDFLARE_ACCOUNT_ID": "acct-42"}}}"#,
    )
    .unwrap();
    let mut pi = Pi::spawn_in(&workspace, &setup);
    first_reply(&mut pi, "p", "Say hello");
    let request = &fake.requests()[0];
    assert_eq!(request.path, "/v1/acct-42/gw-7/compat/chat/completions");
    assert_eq!(
        request.header("cf-aig-authorization"),
        Some("Bearer cf-key-123456")
    );
    assert_eq!(request.header("authorization"), None);
    assert_eq!(request.header("x-api-key"), None);
}

#[test]
fn mistral_streams_thinking_text_and_a_tool_call_and_sends_the_result_back() {
    let second = "data: {\"id\":\"cmpl-3\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"magistral-medium-latest\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Done.\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":2,\"total_tokens\":22}}\n\ndata: [DONE]\n\n";
    let fake = FakeProvider::start(vec![
        Reply::sse(fixture("mistral/thinking_tool.sse")),
        Reply::sse(second),
    ]);
    let setup = Setup::new(&fake, "mistral", "magistral-medium-latest")
        .models_json(r#"{"providers": {"mistral": {"baseUrl": "__BASE_URL__"}}}"#)
        .env("MISTRAL_API_KEY", "mistral-key-123456")
        .arg("--thinking")
        .arg("high");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "Run echo hi"}));
    let run = pi.records_until_event("agent_end");
    let messages = assistant_messages(&run);
    assert_eq!(messages.len(), 2);
    assert_eq!(
        messages[0]["content"],
        json!([{"type": "thinking", "thinking": "Let me look."},
               {"type": "text", "text": "Checking."},
               {"type": "toolCall", "id": "D681PevKs", "name": "bash",
                "arguments": {"command": "echo hi"}}])
    );
    assert_eq!(messages[0]["stopReason"], "toolUse");
    assert_eq!(messages[0]["responseId"], "cmpl-2");
    assert_eq!(messages[0]["usage"]["totalTokens"], 15);
    assert_eq!(messages[1]["content"][0]["text"], "Done.");
    // pi 1.6.0's closing fields: the finish reason as sent, the level asked for, the time taken.
    assert_eq!(messages[0]["rawStopReason"], "tool_calls");
    assert_eq!(messages[1]["rawStopReason"], "stop");
    assert_eq!(messages[0]["thinkingLevel"], "high");
    assert!(messages[1]["durationMs"].is_u64(), "{}", messages[1]);

    let requests = fake.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer mistral-key-123456")
    );
    assert_eq!(requests[0].body["prompt_mode"], "reasoning");
    let history = requests[1].messages();
    let tool = history.last().unwrap();
    assert_eq!(
        tool,
        &json!({"role": "tool", "content": [{"type": "text", "text": "hi"}],
                "tool_call_id": "D681PevKs", "name": "bash"})
    );
    assert_eq!(history[history.len() - 2]["prefix"], false);
}

#[test]
fn codex_sends_the_account_and_instructions_from_a_subscription_login() {
    use base64::Engine;
    let claims = json!({"https://api.openai.com/auth": {"chatgpt_account_id": "acct_42"}});
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
    let token = format!("eyJhbGciOiJub25lIn0.{payload}.sig");
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
    let workspace = Workspace::new();
    let login = json!({"openai-codex": {"type": "oauth", "access": token, "refresh": "r-123456",
        "expires": 4102444800000u64, "accountId": "acct_42"}});
    std::fs::write(workspace.agent_dir().join("auth.json"), login.to_string()).unwrap();
    let setup = Setup::new(&fake, "openai-codex", "gpt-5.2")
        .models_json(r#"{"providers": {"openai-codex": {"baseUrl": "__BASE_URL__/backend-api"}}}"#);
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let message = first_reply(&mut pi, "p", "Say hello");
    assert_eq!(message["api"], "openai-codex-responses");
    assert_eq!(message["rawStopReason"], "completed");
    let request = &fake.requests()[0];
    assert_eq!(request.path, "/backend-api/codex/responses");
    assert_eq!(request.header("chatgpt-account-id"), Some("acct_42"));
    assert_eq!(request.header("originator"), Some("pi"));
    assert_eq!(
        request.header("openai-beta"),
        Some("responses=experimental")
    );
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {token}").as_str())
    );
    let body = &request.body;
    assert!(body["instructions"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(body["input"][0]["role"], "user");
    assert_eq!(body["text"], json!({"verbosity": "low"}));
    assert_eq!(body["store"], false);
    // Codex's strict mode is on by default (pi 1.6.0): pi's `read` prefers strict sampling, so
    // it is strict with its schema converted; a tool that does not say so gets `strict: null`.
    assert_eq!(body["tools"][0]["name"], "read");
    assert_eq!(body["tools"][0]["strict"], true);
    assert_eq!(
        body["tools"][0]["parameters"]["additionalProperties"],
        false
    );
    assert!(body.get("max_output_tokens").is_none());
}

/// `pi-messages` (pi 1.6.0's tenth wire API, the radius provider's): one POST of
/// `{model, context, options}` to `<baseUrl>/messages` with a bearer key; the fake answers with
/// the SSE of serialized assistant-message events 1.6.0 reads (`fixtures/pi-messages/text.sse`).
/// Passes against pi 1.6.0 too.
#[test]
fn pi_messages_posts_the_context_and_reads_the_event_stream() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("pi-messages/text.sse")]);
    let models = r#"{"providers": {"pim": {"baseUrl": "__BASE_URL__/v1", "api": "pi-messages",
        "apiKey": "pm-key-123456",
        "models": [{"id": "pm-model", "reasoning": true, "input": ["text", "image"]}]}}}"#;
    let setup = Setup::new(&fake, "pim", "pm-model")
        .models_json(models)
        .arg("--thinking")
        .arg("high");
    let mut pi = Pi::spawn(&setup);
    let message = first_reply(&mut pi, "p", "Say hello");
    assert_eq!(message["api"], "pi-messages");
    assert_eq!(
        message["content"],
        json!([
            {"type": "thinking", "thinking": "Plan", "thinkingSignature": "sig-1"},
            {"type": "text", "text": "Hello from pi-messages."}
        ])
    );
    assert_eq!(message["responseId"], "resp-1");
    assert_eq!(
        (
            message["usage"]["input"].as_u64(),
            message["usage"]["totalTokens"].as_u64()
        ),
        (Some(120), Some(132))
    );
    let request = &fake.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(
        request.header("authorization"),
        Some("Bearer pm-key-123456")
    );
    assert_eq!(request.header("accept"), Some("text/event-stream"));
    assert_eq!(request.body["model"], "pm-model");
    assert_eq!(request.body["options"]["reasoning"], "high");
    assert!(request.body["options"]["sessionId"].is_string());
    let messages = request.body["context"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    let tools: Vec<&str> = messages[0]["toolsAdded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["read", "bash", "edit", "write"]);
    assert_eq!(
        messages[1]["content"],
        json!([{"type": "text", "text": "Say hello"}])
    );
    assert_eq!(messages[1]["role"], "user");
}

/// A failed pi-messages request: `<status> <statusText>: <error.message> (<error.code>)`.
#[test]
fn pi_messages_errors_carry_the_status_message_and_code() {
    let fake = FakeProvider::start(vec![Reply::status(
        400,
        r#"{"error":{"message":"model not enabled","code":"model_disabled"}}"#,
        &[("content-type", "application/json")],
    )]);
    let models = r#"{"providers": {"pim": {"baseUrl": "__BASE_URL__/v1", "api": "pi-messages",
        "apiKey": "pm-key-123456", "models": [{"id": "pm-model"}]}}}"#;
    let setup = Setup::new(&fake, "pim", "pm-model").models_json(models);
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "Say hello"}));
    let run = pi.records_until_event("agent_end");
    let message = assistant_messages(&run).remove(0);
    assert_eq!(message["stopReason"], "error");
    assert_eq!(
        message["errorMessage"],
        "400 Bad Request: model not enabled (model_disabled)"
    );
}

/// One prompt at `thinking` to the models.json provider `id` (`provider`: its baseUrl, api, key
/// and one model, with the `compat` under test), answered with `fixture`; the request the fake
/// provider got. The reply must end cleanly. (The compat checks' common part.)
fn compat_request(
    id: &str,
    provider: Value,
    fixture: &str,
    thinking: &str,
) -> crate::fake_provider::RecordedRequest {
    let fake = FakeProvider::start(vec![Reply::sse_fixture(fixture)]);
    let model = provider["models"][0]["id"].as_str().unwrap().to_string();
    let models = json!({"providers": {id: provider}});
    let setup = Setup::new(&fake, id, &model)
        .models_json(&models.to_string())
        .arg("--thinking")
        .arg(thinking);
    let mut pi = Pi::spawn(&setup);
    first_reply(&mut pi, "p", "hi");
    fake.requests().remove(0)
}

/// 1.6.0's template compat keys on Chat Completions, in the body at the server: the
/// `chat-template` format sends `chatTemplateKwargs` with pi's values filled in (`$var`
/// `thinking.enabled` / `thinking.effort` / `thinking.budget`, `omitWhenOff`), `baseten` sends
/// `chatTemplateArgs` as `chat_template_args` with `reasoning_effort`, and
/// `thinkingTokenBudgetField` caps reasoning with the budget left under the output cap. Passes
/// against pi 1.6.0 too (`PI_TEST_BIN`).
#[test]
fn chat_template_compat_keys_fill_pis_values_into_the_body() {
    let body_for = |compat: Value, thinking: &str| -> Value {
        let provider = json!({"baseUrl": "__BASE_URL__/v1", "api": "openai-completions",
            "apiKey": "tpl-key-123456",
            "models": [{"id": "tpl-model", "reasoning": true, "maxTokens": 10000,
                "compat": compat}]});
        compat_request("tpl", provider, "openai/text.sse", thinking).body
    };
    let kwargs = json!({
        "enable_thinking": {"$var": "thinking.enabled"},
        "reasoning_effort": {"$var": "thinking.effort"},
        "budget": {"$var": "thinking.budget", "omitWhenOff": true},
        "fixed": "yes"
    });
    let body = body_for(
        json!({"thinkingFormat": "chat-template", "chatTemplateKwargs": kwargs,
            "thinkingTokenBudgetField": "thinking_budget"}),
        "medium",
    );
    assert_eq!(
        body["chat_template_kwargs"],
        json!({"enable_thinking": true, "reasoning_effort": "medium", "budget": 8192,
            "fixed": "yes"})
    );
    assert_eq!(body["thinking_budget"], 8192);
    assert!(body.get("reasoning_effort").is_none(), "{body}");

    let body = body_for(
        json!({"thinkingFormat": "chat-template", "chatTemplateKwargs": kwargs,
            "supportsThinkingTokenBudget": true}),
        "off",
    );
    assert_eq!(
        body["chat_template_kwargs"],
        json!({"enable_thinking": false, "fixed": "yes"})
    );
    assert!(body.get("thinking_token_budget").is_none(), "{body}");

    let body = body_for(
        json!({"thinkingFormat": "baseten", "supportsThinkingTokenBudget": true,
            "chatTemplateArgs": {"enable_thinking": {"$var": "thinking.enabled"}}}),
        "high",
    );
    assert_eq!(body["chat_template_args"], json!({"enable_thinking": true}));
    assert_eq!(body["reasoning_effort"], "high");
    // 16384 for high, less the 1024 left for the answer under max_completion_tokens 10000.
    assert_eq!(body["thinking_token_budget"], 8976);
}

/// A pi-messages `thinking_end` with `redacted: true` (the gateway's opaque reasoning): the
/// thinking block of the message says `redacted: true`, as 1.6.0 assembles it. Passes against
/// pi 1.6.0 too.
#[test]
fn pi_messages_thinking_end_carries_the_redacted_flag() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture(
        "pi-messages/redacted_thinking.sse",
    )]);
    let models = r#"{"providers": {"pim": {"baseUrl": "__BASE_URL__/v1", "api": "pi-messages",
        "apiKey": "pm-key-123456",
        "models": [{"id": "pm-model", "reasoning": true, "input": ["text"]}]}}}"#;
    let setup = Setup::new(&fake, "pim", "pm-model")
        .models_json(models)
        .arg("--thinking")
        .arg("high");
    let mut pi = Pi::spawn(&setup);
    let run = prompt(&mut pi, "p", "Say hello");
    let message = first_stopped(&run);
    assert_eq!(
        message["content"][0],
        json!({"type": "thinking", "thinking": "Plan", "thinkingSignature": "opaque-1",
            "redacted": true})
    );
    // The `thinking_end` update passes the gateway's signature and flag on, as 1.6.0 does.
    let end = run
        .iter()
        .map(|record| &record["assistantMessageEvent"])
        .find(|event| event["type"] == "thinking_end")
        .expect("a thinking_end update");
    assert_eq!(end["content"], "Plan", "{end}");
    assert_eq!(end["contentSignature"], "opaque-1", "{end}");
    assert_eq!(end["redacted"], true, "{end}");
    let text_end = run
        .iter()
        .map(|record| &record["assistantMessageEvent"])
        .find(|event| event["type"] == "text_end")
        .expect("a text_end update");
    assert!(text_end.get("contentSignature").is_none(), "{text_end}");
}

/// `compat.forceAdaptiveThinking` decides adaptive thinking on Anthropic Messages, as in pi
/// 1.6.0: with it, `thinking: adaptive` and the effort, no interleaved-thinking beta; without it
/// (even for an id that names an adaptive Claude) a token budget and the beta. Passes against
/// pi 1.6.0 too.
#[test]
fn force_adaptive_thinking_compat_picks_adaptive_thinking() {
    let request_for = |compat: Value| {
        let provider = json!({"baseUrl": "__BASE_URL__", "api": "anthropic-messages",
            "apiKey": "claude-key-123456",
            "models": [{"id": "claude-opus-4-6", "reasoning": true, "maxTokens": 64000,
                "compat": compat}]});
        compat_request("claudeish", provider, "anthropic/text.sse", "medium")
    };
    let adaptive = request_for(json!({"forceAdaptiveThinking": true}));
    assert_eq!(
        adaptive.body["thinking"],
        json!({"type": "adaptive", "display": "summarized"})
    );
    assert_eq!(adaptive.body["output_config"], json!({"effort": "medium"}));
    assert_eq!(adaptive.header("anthropic-beta"), None);

    let budget = request_for(json!({"forceAdaptiveThinking": false}));
    assert_eq!(
        budget.body["thinking"]["type"], "enabled",
        "{}",
        budget.body
    );
    assert_eq!(budget.body["thinking"]["budget_tokens"], 8192);
    assert!(
        budget.body.get("output_config").is_none(),
        "{}",
        budget.body
    );
    assert_eq!(
        budget.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
}

/// pi-messages sends pi's transcript as it is (pi 1.6.0): the context opens with the run's own
/// system message — `content` empty, the prompt in `sections`, the tool declarations in
/// `toolsAdded` — exactly as the `message_end` record shows it, and a later run that changes
/// nothing sends that one message again, in place, before the conversation. Passes against pi
/// 1.6.0 too (`PI_TEST_BIN`).
#[test]
fn pi_messages_sends_the_transcripts_system_message_with_its_sections() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("pi-messages/text.sse"),
        Reply::sse_fixture("pi-messages/text.sse"),
    ]);
    let models = r#"{"providers": {"pim": {"baseUrl": "__BASE_URL__/v1", "api": "pi-messages",
        "apiKey": "pm-key-123456", "models": [{"id": "pm-model"}]}}}"#;
    let setup = Setup::new(&fake, "pim", "pm-model").models_json(models);
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Say hello"}));
    let run = pi.records_until_event("agent_end");
    let system = run
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "system")
        .expect("the run's system message")["message"]
        .clone();
    assert_eq!(system["content"], "");
    let sections: Vec<&str> = system["sections"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(sections, ["preamble", "tools", "rules", "docs", "cwd"]);
    let first = fake.requests()[0].body["context"]["messages"].clone();
    assert_eq!(first[0], system, "the transcript's system message, as is");
    assert_eq!(first.as_array().unwrap().len(), 2);
    assert!(
        first[0]["toolsAdded"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["constrainedSampling"].is_object()),
        "{}",
        first[0]
    );

    pi.send(json!({"id": "p2", "type": "prompt", "message": "Again"}));
    let run = pi.records_until_event("agent_end");
    assert!(
        !run.iter()
            .any(|r| r["type"] == "message_end" && r["message"]["role"] == "system"),
        "nothing changed, so no new system message"
    );
    let second = fake.requests()[1].body["context"]["messages"].clone();
    let roles: Vec<&str> = second
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(second[0], system);
}

/// Two processes on one session: the second adds `--append-system-prompt`, so its run starts
/// with a system message that sets the `addendum` section. Returns the second request's body.
fn body_after_a_prompt_change(api: &str, reply: &str, compat: Value) -> Value {
    let replies = || match api {
        "mistral-conversations" => Reply::sse(MISTRAL_TEXT),
        _ => Reply::sse_fixture(reply),
    };
    let fake = FakeProvider::start(vec![replies(), replies()]);
    let models = json!({"providers": {"mc": {"baseUrl": "__BASE_URL__", "api": api,
        "apiKey": "mc-key-123456",
        "models": [{"id": "mc-model", "input": ["text"], "compat": compat}]}}});
    let setup = Setup::new(&fake, "mc", "mc-model")
        .models_json(&models.to_string())
        .with_sessions();
    prompts_in_one_session(
        &setup,
        &[
            ("first", &[]),
            ("second", &["--append-system-prompt", "Answer briefly."]),
        ],
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    requests[1].body.clone()
}

const MISTRAL_TEXT: &str = "data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"mc-model\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Done.\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":2,\"total_tokens\":22}}\n\ndata: [DONE]\n\n";

const ADDENDUM_UPDATE: &str =
    "Updated system prompt section \"addendum\":\n\n<addendum>\nAnswer briefly.\n</addendum>";

/// The text of a wire message's content (a string, or text blocks joined).
fn content_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The roles of a conversation array, user texts and system updates spelled out.
fn shape(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap_or("");
            match role {
                "user" => format!("user:{}", content_text(m)),
                "system" | "developer" if content_text(m).starts_with("Updated") => {
                    format!("{role}:{}", content_text(m))
                }
                _ => role.to_string(),
            }
        })
        .collect()
}

/// The prompt after a system-prompt change, as pi 1.6.0 sends it: to a model whose compat says
/// `supportsMidConvoSystemMessages`, the conversation keeps the first prompt at its head and the
/// change goes where the transcript has it, rendered as `Updated system prompt section "…"` —
/// a `system`/`developer` message on Chat Completions, Responses and Mistral; on Anthropic held
/// until the next assistant message or the end (here: after the new user message, with the
/// cache marker). Without the key, the head carries the whole new prompt and nothing follows.
/// Passes against pi 1.6.0 too.
#[test]
fn a_prompt_change_reaches_mid_conversation_models_in_place() {
    let on = json!({"supportsMidConvoSystemMessages": true});
    let update = |role: &str| format!("{role}:{ADDENDUM_UPDATE}");

    let body = body_after_a_prompt_change("openai-completions", "openai/text.sse", on.clone());
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        shape(messages),
        [
            "system",
            "user:first",
            "assistant",
            &update("system"),
            "user:second"
        ],
        "{body}"
    );
    assert!(
        !content_text(&messages[0]).contains("Answer briefly."),
        "{body}"
    );
    let body = body_after_a_prompt_change("openai-completions", "openai/text.sse", json!({}));
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        shape(messages),
        ["system", "user:first", "assistant", "user:second"],
        "{body}"
    );
    // The replayed prompt: the section added later comes last.
    assert!(
        content_text(&messages[0]).ends_with("<addendum>\nAnswer briefly.\n</addendum>"),
        "{body}"
    );

    let body =
        body_after_a_prompt_change("openai-responses", "openai-responses/text.sse", on.clone());
    let input = body["input"].as_array().unwrap();
    assert_eq!(
        shape(input)
            .into_iter()
            .map(|s| if s.is_empty() { "item".into() } else { s })
            .collect::<Vec<_>>(),
        [
            "system",
            "user:first",
            "item",
            "assistant",
            &update("system"),
            "user:second"
        ],
        "{body}"
    );

    let body = body_after_a_prompt_change("mistral-conversations", "", on.clone());
    assert_eq!(
        shape(body["messages"].as_array().unwrap()),
        [
            "system",
            "user:first",
            "assistant",
            &update("system"),
            "user:second"
        ],
        "{body}"
    );

    let body = body_after_a_prompt_change("anthropic-messages", "anthropic/text.sse", on);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        shape(messages),
        ["user:first", "assistant", "user:second", &update("system")],
        "{body}"
    );
    assert!(
        !content_text(&body["system"][0]).contains("Answer briefly."),
        "{body}"
    );
    let last = &messages[3]["content"][0];
    assert_eq!(
        last["cache_control"],
        json!({"type": "ephemeral"}),
        "{body}"
    );
}

/// `supportsStrictTools` on Anthropic Messages, as pi 1.6.0 sends it: pi's read/bash/edit/write
/// (which prefer strict sampling) say `strict: true` with their schemas made strict — every
/// property required, optional ones nullable, no additional properties; without the key no tool
/// says `strict` and optional properties stay optional. Chat Completions does the same with
/// `supportsStrictMode`. Passes against pi 1.6.0 too.
#[test]
fn strict_tool_compat_keys_send_strict_schemas_for_pis_tools() {
    let tools_for = |api: &str, reply: &str, compat: Value| -> Vec<Value> {
        let fake = FakeProvider::start(vec![Reply::sse_fixture(reply)]);
        let models = json!({"providers": {"st": {"baseUrl": "__BASE_URL__", "api": api,
            "apiKey": "st-key-123456",
            "models": [{"id": "st-model", "input": ["text"], "compat": compat}]}}});
        let setup = Setup::new(&fake, "st", "st-model").models_json(&models.to_string());
        let mut pi = Pi::spawn(&setup);
        first_reply(&mut pi, "p", "hi");
        let body = fake.requests().remove(0).body;
        body["tools"].as_array().expect("tools").clone()
    };
    let check_strict = |tool: &Value, schema: &Value| {
        let properties = schema["properties"].as_object().unwrap();
        let names: Vec<&String> = properties.keys().collect();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        assert_eq!(names, required, "{tool}");
        assert_eq!(schema["additionalProperties"], false, "{tool}");
    };
    let tools = tools_for(
        "anthropic-messages",
        "anthropic/text.sse",
        json!({"supportsStrictTools": true}),
    );
    assert_eq!(tools.len(), 4, "{tools:?}");
    for tool in &tools {
        assert_eq!(tool["strict"], true, "{tool}");
        check_strict(tool, &tool["input_schema"]);
    }
    let read = tools.iter().find(|t| t["name"] == "read").unwrap();
    assert_eq!(
        read["input_schema"]["properties"]["offset"]["anyOf"][1],
        json!({"type": "null"}),
        "{read}"
    );
    let tools = tools_for("anthropic-messages", "anthropic/text.sse", json!({}));
    for tool in &tools {
        assert!(tool.get("strict").is_none(), "{tool}");
    }
    let read = tools.iter().find(|t| t["name"] == "read").unwrap();
    assert_eq!(read["input_schema"]["required"], json!(["path"]), "{read}");

    let tools = tools_for(
        "openai-completions",
        "openai/text.sse",
        json!({"supportsStrictMode": true}),
    );
    for tool in &tools {
        assert_eq!(tool["function"]["strict"], true, "{tool}");
        check_strict(tool, &tool["function"]["parameters"]);
    }
}

/// `compat.supportsMidConvoEffort` on OpenAI Responses, as pi 1.6.0 sends it: `reasoning.effort`
/// stays `medium` and the thinking level travels as `configuration_update` items — one at the
/// end of the input, and one before each earlier reply of the same model, with the level that
/// reply records as `providerThinkingLevel`. Passes against pi 1.6.0 too.
#[test]
fn mid_conversation_effort_travels_in_configuration_updates() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("openai-responses/text.sse"),
        Reply::sse_fixture("openai-responses/text.sse"),
    ]);
    let models = json!({"providers": {"me": {"baseUrl": "__BASE_URL__/v1",
        "api": "openai-responses", "apiKey": "me-key-123456",
        "models": [{"id": "me-model", "reasoning": true, "input": ["text"],
            "compat": {"supportsMidConvoEffort": true}}]}}});
    let setup = Setup::new(&fake, "me", "me-model")
        .models_json(&models.to_string())
        .arg("--thinking")
        .arg("high");
    let mut pi = Pi::spawn(&setup);
    let run = prompt(&mut pi, "p1", "first");
    let first = first_stopped(&run);
    assert_eq!(first["providerThinkingLevel"], "high", "{first}");
    let start = run
        .iter()
        .find(|r| r["type"] == "message_start" && r["message"]["role"] == "assistant")
        .expect("message_start");
    assert_eq!(start["message"]["providerThinkingLevel"], "high", "{start}");
    let response = pi.request(json!({"id": "t", "type": "set_thinking_level", "level": "low"}));
    assert_eq!(response["success"], true, "{response}");
    pi.send(json!({"id": "p2", "type": "prompt", "message": "second"}));
    let run = pi.records_until_event("agent_end");
    let second = assistant_messages(&run).remove(0);
    assert_eq!(second["providerThinkingLevel"], "low", "{second}");

    let requests = fake.requests();
    let update =
        |effort: &str| json!({"type": "configuration_update", "reasoning": {"effort": effort}});
    for request in &requests {
        assert_eq!(
            request.body["reasoning"]["effort"], "medium",
            "{}",
            request.body
        );
    }
    let input = requests[0].body["input"].as_array().unwrap();
    assert_eq!(input.last(), Some(&update("high")), "{input:?}");
    let input = requests[1].body["input"].as_array().unwrap();
    assert_eq!(input.last(), Some(&update("low")), "{input:?}");
    let earlier = input
        .iter()
        .position(|i| *i == update("high"))
        .expect("the first reply's level");
    assert_eq!(input[earlier - 1]["role"], "user", "{input:?}");
    assert_eq!(input[earlier + 1]["type"], "reasoning", "{input:?}");
}

/// The reply's `diagnostics`, as pi 1.6.0 records them: the input transformations Anthropic
/// reports (`anthropic_input_transformations`, each with its `type`/`path`/`reason`) and the
/// reasoning items OpenAI Responses says it removed (`openai_input_transformations`; a removal
/// at a turn boundary is normal and left out). A reply without any has no `diagnostics`. Passes
/// against pi 1.6.0 too.
#[test]
fn provider_input_transformations_become_the_replys_diagnostics() {
    let reply_for = |api: &str, body: String| -> Value {
        let fake = FakeProvider::start(vec![Reply::sse(body)]);
        let models = json!({"providers": {"dg": {"baseUrl": "__BASE_URL__/v1", "api": api,
            "apiKey": "dg-key-123456", "models": [{"id": "dg-model", "input": ["text"]}]}}});
        let setup = Setup::new(&fake, "dg", "dg-model").models_json(&models.to_string());
        let mut pi = Pi::spawn(&setup);
        first_reply(&mut pi, "p", "hi")
    };
    let anthropic = fixture("anthropic/text.sse").replacen(
        "\"message\":{",
        "\"message\":{\"input_transformations\":[{\"type\":\"thinking_removed\",\
         \"path\":\"messages.1.content.0\",\"reason\":\"unsigned\",\"extra\":1}],",
        1,
    );
    let message = reply_for("anthropic-messages", anthropic);
    let diagnostics = message["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(diagnostics.len(), 1, "{message}");
    assert_eq!(diagnostics[0]["type"], "anthropic_input_transformations");
    assert!(diagnostics[0]["timestamp"].as_i64().is_some_and(|t| t > 0));
    assert_eq!(
        diagnostics[0]["details"],
        json!({"transformations": [{"type": "thinking_removed",
            "path": "messages.1.content.0", "reason": "unsigned"}]})
    );

    let responses = fixture("openai-responses/text.sse").replacen(
        "\"response\":{\"id\":\"resp_0a1b2c3d4e5f60718293a4b5c6d7e8f9\",\"object\":\"response\",\"created_at\":1767225600,\"status\":\"completed\"",
        "\"response\":{\"id\":\"resp_0a1b2c3d4e5f60718293a4b5c6d7e8f9\",\"object\":\"response\",\"created_at\":1767225600,\"status\":\"completed\",\
         \"input_transformations\":[{\"type\":\"reasoning\",\"id\":\"rs_1\",\"action\":\"removed\",\"reason\":\"model_changed\"},\
         {\"type\":\"reasoning\",\"id\":\"rs_2\",\"action\":\"removed\",\"reason\":\"turn_boundary\"}]",
        1,
    );
    let message = reply_for("openai-responses", responses);
    let diagnostics = message["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(
        diagnostics[0]["type"], "openai_input_transformations",
        "{message}"
    );
    assert_eq!(
        diagnostics[0]["details"],
        json!({"transformations": [{"type": "reasoning", "id": "rs_1", "action": "removed",
            "reason": "model_changed"}]})
    );

    let plain = reply_for("anthropic-messages", fixture("anthropic/text.sse"));
    assert!(plain.get("diagnostics").is_none(), "{plain}");
}

/// `compat.supportsMidConvoEffort` on Anthropic, as pi 1.6.0 sends it: adaptive thinking with
/// `block_binding`, a top-level effort of `low`, the two betas, and the level as system messages
/// with `output_config` — one at the end of the conversation, one before each earlier reply of
/// the provider with the level that reply records as `providerThinkingLevel`. With thinking off
/// on a reasoning model, no markers and thinking disabled. Passes against pi 1.6.0 too.
#[test]
fn anthropic_mid_conversation_effort_travels_in_system_messages() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("anthropic/text.sse"),
        Reply::sse_fixture("anthropic/text.sse"),
        Reply::sse_fixture("anthropic/text.sse"),
    ]);
    let models = json!({"providers": {"ae": {"baseUrl": "__BASE_URL__",
        "api": "anthropic-messages", "apiKey": "ae-key-123456",
        "models": [{"id": "ae-model", "reasoning": true, "input": ["text"],
            "compat": {"supportsMidConvoEffort": true, "forceAdaptiveThinking": true}}]}}});
    let setup = Setup::new(&fake, "ae", "ae-model")
        .models_json(&models.to_string())
        .arg("--thinking")
        .arg("medium");
    let mut pi = Pi::spawn(&setup);
    let first = first_reply(&mut pi, "p1", "first");
    assert_eq!(first["providerThinkingLevel"], "medium", "{first}");
    let response = pi.request(json!({"id": "t", "type": "set_thinking_level", "level": "low"}));
    assert_eq!(response["success"], true, "{response}");
    pi.send(json!({"id": "p2", "type": "prompt", "message": "second"}));
    let run = pi.records_until_event("agent_end");
    let second = assistant_messages(&run).remove(0);
    assert_eq!(second["providerThinkingLevel"], "low", "{second}");
    let response = pi.request(json!({"id": "t2", "type": "set_thinking_level", "level": "off"}));
    assert_eq!(response["success"], true, "{response}");
    pi.send(json!({"id": "p3", "type": "prompt", "message": "third"}));
    let run = pi.records_until_event("agent_end");
    let third = assistant_messages(&run).remove(0);
    assert!(third.get("providerThinkingLevel").is_none(), "{third}");

    let requests = fake.requests();
    let marker = |effort: &str| json!({"role": "system", "content": [], "output_config": {"effort": effort}});
    for request in &requests[..2] {
        let betas = request.header("anthropic-beta").unwrap_or("");
        assert!(
            betas.contains("mid-conversation-output-config-2026-07-01")
                && betas.contains("thinking-binding-controls-2026-08-01"),
            "{betas}"
        );
        assert_eq!(
            request.body["thinking"],
            json!({"type": "adaptive", "display": "summarized",
                "block_binding": {"prefix_mismatch_behavior": "drop_block"}}),
            "{}",
            request.body
        );
        assert_eq!(request.body["output_config"], json!({"effort": "low"}));
    }
    let messages = requests[0].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[1], marker("medium"));
    let messages = requests[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "system", "assistant", "user", "system"]);
    assert_eq!(messages[1], marker("medium"));
    assert_eq!(messages[4], marker("low"));
    // Thinking off: no markers at all, thinking disabled (the betas stay).
    let body = &requests[2].body;
    assert_eq!(body["thinking"], json!({"type": "disabled"}), "{body}");
    assert!(body.get("output_config").is_none(), "{body}");
    let messages = body["messages"].as_array().unwrap();
    assert!(
        messages.iter().all(|m| m["role"] != "system"),
        "{messages:?}"
    );
}

/// `compat.supportsMidConvoToolChanges` on Anthropic (with `supportsMidConvoSystemMessages`),
/// as pi 1.6.0 sends it: the request's tools stay those of the session's first system message,
/// followed by a deferred placeholder, and a later tool change goes in place as a system message
/// of `tool_removal` / `tool_addition` blocks after the prompt's changed sections (held until the
/// end, where it takes the cache marker), with the `inline-tools` beta. Passes against pi 1.6.0
/// too.
#[test]
fn anthropic_mid_conversation_tool_changes_go_in_place() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("anthropic/text.sse"),
        Reply::sse_fixture("anthropic/text.sse"),
    ]);
    let models = json!({"providers": {"at": {"baseUrl": "__BASE_URL__",
        "api": "anthropic-messages", "apiKey": "at-key-123456",
        "models": [{"id": "at-model", "input": ["text"],
            "compat": {"supportsMidConvoSystemMessages": true,
                "supportsMidConvoToolChanges": true}}]}}});
    let setup = Setup::new(&fake, "at", "at-model")
        .models_json(&models.to_string())
        .with_sessions();
    prompts_in_one_session(
        &setup,
        &[
            ("first", &["--tools", "read,bash"]),
            ("second", &["--tools", "read,grep"]),
        ],
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);

    let names = |body: &Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let placeholder = json!({"name": "__pi_deferred_placeholder__",
        "description": "Reserved placeholder. Never available. Never call this.",
        "input_schema": {"type": "object", "properties": {}, "required": []},
        "defer_loading": true});
    for request in &requests {
        let betas = request.header("anthropic-beta").unwrap_or("");
        assert!(betas.contains("inline-tools-2026-09-15"), "{betas}");
        assert_eq!(
            names(&request.body),
            ["read", "bash", "__pi_deferred_placeholder__"]
        );
        let tools = request.body["tools"].as_array().unwrap();
        assert_eq!(tools[2], placeholder);
        assert_eq!(tools[1]["cache_control"], json!({"type": "ephemeral"}));
    }
    let first = requests[0].body["messages"].as_array().unwrap();
    assert!(first.iter().all(|m| m["role"] != "system"), "{first:?}");

    let messages = requests[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "system"],
        "{messages:?}"
    );
    // The prompt's changed sections first (the tool list is one), then the tool changes.
    let content = messages[3]["content"].as_array().unwrap();
    assert_eq!(content.len(), 3, "{content:?}");
    assert_eq!(content[0]["type"], "text", "{content:?}");
    let blocks = &content[1..];
    assert_eq!(
        blocks[0],
        json!({"type": "tool_removal", "tool": {"type": "tool_reference", "name": "bash"}})
    );
    assert_eq!(blocks[1]["type"], "tool_addition");
    assert_eq!(blocks[1]["tool"]["type"], "tool_definition");
    let definition = &blocks[1]["tool"]["definition"];
    assert_eq!(definition["name"], "grep");
    assert_eq!(definition["input_schema"]["type"], "object");
    assert!(definition.get("cache_control").is_none(), "{definition}");
    assert_eq!(blocks[1]["cache_control"], json!({"type": "ephemeral"}));
}

/// `compat.supportsMidConvoToolAdditions` on Chat Completions (with
/// `supportsMidConvoSystemMessages`), as pi 1.6.0 sends it: a tool added later is declared in
/// place by a `{role:"system", tools}` message before the change's text, the request's `tools`
/// staying the first set; after a removal the request's `tools` become the state after it and
/// nothing is declared in place. Passes against pi 1.6.0 too.
#[test]
fn chat_completions_mid_conversation_tool_additions_go_in_place() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("openai/text.sse"),
        Reply::sse_fixture("openai/text.sse"),
        Reply::sse_fixture("openai/text.sse"),
    ]);
    let models = json!({"providers": {"ct": {"baseUrl": "__BASE_URL__/v1",
        "api": "openai-completions", "apiKey": "ct-key-123456",
        "models": [{"id": "ct-model", "input": ["text"],
            "compat": {"supportsMidConvoSystemMessages": true,
                "supportsMidConvoToolAdditions": true}}]}}});
    let setup = Setup::new(&fake, "ct", "ct-model")
        .models_json(&models.to_string())
        .with_sessions();
    prompts_in_one_session(
        &setup,
        &[
            ("m0", &["--tools", "read"]),
            ("m1", &["--tools", "read,grep"]),
            ("m2", &["--tools", "grep"]),
        ],
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    let names = |tools: &Value| -> Vec<String> {
        tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let in_place = |body: &Value| -> Vec<Value> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m.get("tools").is_some())
            .cloned()
            .collect()
    };
    assert_eq!(names(&requests[0].body["tools"]), ["read"]);
    assert!(in_place(&requests[0].body).is_empty());

    // An addition: declared in place, right before the change's text.
    let body = &requests[1].body;
    assert_eq!(names(&body["tools"]), ["read"], "{body}");
    let messages = body["messages"].as_array().unwrap();
    let at = messages
        .iter()
        .position(|m| m.get("tools").is_some())
        .expect("an in-place declaration");
    assert_eq!(messages[at]["role"], "system");
    assert_eq!(names(&messages[at]["tools"]), ["grep"]);
    assert!(messages[at].get("content").is_none(), "{}", messages[at]);
    assert_eq!(messages[at - 1]["role"], "assistant");
    assert_eq!(messages[at + 1]["role"], "system");
    assert!(content_text(&messages[at + 1]).starts_with("Updated"));

    // A removal: the request's tools become the state after it, nothing in place.
    let body = &requests[2].body;
    assert_eq!(names(&body["tools"]), ["grep"], "{body}");
    assert!(in_place(body).is_empty(), "{body}");
}
