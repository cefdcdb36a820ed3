//! The Azure OpenAI Responses, Mistral and ChatGPT Codex wire APIs end to end through the binary,
//! against the fake provider speaking their real stream formats. The request bodies match what
//! pi 0.73.1 sent to a local server (see the unit tests of `src/provider/azure_responses.rs`,
//! `mistral.rs`, `codex_responses.rs`).
//!
//! Reference (PI_TEST_BIN): every test here passes against pi 0.73.1 as well, but those that check
//! a behaviour of pi 1.6.0's (they say they pass against 1.6.0; the output cap is 1.6.0's).

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::support::{Pi, Setup, Workspace, assistant_messages, prompt, session_file, tool_shape};

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
    // The catalog's Magistral has a thinking-level map: `reasoning_effort`, not `prompt_mode`
    // (pi 1.6.0).
    assert_eq!(requests[0].body["reasoning_effort"], "high");
    assert!(requests[0].body.get("prompt_mode").is_none());
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
fn codex_sends_the_account_and_prompt_from_a_subscription_login() {
    let token = crate::support::codex_token("acct_42");
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
    // pi 1.6.0: the system prompt leads the input (after the tools the model's compat declares
    // there), nothing goes in `instructions`.
    assert!(body.get("instructions").is_none(), "{body}");
    // The model takes the provider's compat, `supportsAdditionalTools` with system messages in
    // place: its tools are declared at the head of the input, none at the top level.
    assert_eq!(body["input"][0]["type"], "additional_tools");
    assert_eq!(body["input"][1]["role"], "developer");
    assert_eq!(body["input"][2]["role"], "user");
    assert!(body.get("tools").is_none(), "{body}");
    assert_eq!(body["text"], json!({"verbosity": "low"}));
    assert_eq!(body["store"], false);
    // Codex's strict mode is on by default (pi 1.6.0): pi's `read` prefers strict sampling, so
    // it is strict with its schema converted; a tool that does not say so gets `strict: null`.
    let tools = &body["input"][0]["tools"];
    assert_eq!(tools[0]["name"], "read");
    assert_eq!(tools[0]["strict"], true);
    assert_eq!(tools[0]["parameters"]["additionalProperties"], false);
    // pi 1.6.0 caps Codex's output too (`compat.supportsMaxOutputTokens`, default true): the
    // catalog model's `maxTokens`, which its context window holds.
    assert_eq!(body["max_output_tokens"], 128000, "{body}");
}

/// The Codex body byte for byte as pi 1.6.0 sends it (its zstd-compressed body decompressed by
/// the fake): no `instructions`, the system prompt as the leading `developer` item (content a
/// string), the output cap fitted into the small context window (what is left after the input's
/// estimate — 3.5 characters a token, then the first reply's reported 1928 tokens plus the new
/// prompt — and 4096 tokens), and after `set_thinking_level off` effort `none` for the reasoning
/// model; the second request replays the first reply (reasoning item, message) after the prompt.
/// Passes against pi 1.6.0 too (`PI_TEST_BIN`; `transport: sse` keeps 1.6.0 off its WebSocket).
#[test]
fn codex_body_matches_pi_with_the_prompt_as_a_developer_item() {
    let token = crate::support::codex_token("acct_42");
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("openai-responses/text.sse"),
        Reply::sse_fixture("openai-responses/text.sse"),
    ]);
    let workspace = Workspace::new();
    let login = json!({"openai-codex": {"type": "oauth", "access": token, "refresh": "r-123456",
        "expires": 4102444800000u64, "accountId": "acct_42"}});
    std::fs::write(workspace.agent_dir().join("auth.json"), login.to_string()).unwrap();
    let models = r#"{"providers": {"openai-codex": {"baseUrl": "__BASE_URL__/backend-api",
        "models": [{"id": "codex-test", "name": "Codex Test", "reasoning": true,
            "input": ["text"], "contextWindow": 12000, "maxTokens": 8192,
            "cost": {"input": 1, "output": 2, "cacheRead": 0.1, "cacheWrite": 0}}]}}}"#;
    let setup = Setup::new(&fake, "openai-codex", "codex-test")
        .models_json(models)
        .settings(json!({"transport": "sse"}))
        .arg("--system-prompt")
        .arg("SYS")
        .arg("--no-tools")
        .arg("--thinking")
        .arg("medium");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "Say hello"}));
    let first = assistant_messages(&pi.records_until_event("agent_end")).remove(0);
    assert_eq!(first["stopReason"], "stop", "{first}");
    pi.command("t", "set_thinking_level", json!({"level": "off"}));
    pi.send(json!({"id": "p2", "type": "prompt", "message": "Again"}));
    let second = assistant_messages(&pi.records_until_event("agent_end")).remove(0);
    assert_eq!(second["stopReason"], "stop", "{second}");

    let requests = fake.requests();
    let prompt = format!("SYS\n\n<cwd>\n{}\n</cwd>", pi.cwd().display());
    let user =
        |text: &str| json!({"role": "user", "content": [{"type": "input_text", "text": text}]});
    let reply = json!([
        {"id": "rs_0a1b2c3d4e5f60718293a4b5c6d7e8f9aa", "type": "reasoning",
         "encrypted_content": "gAAAAABpVGVzdEVuY3J5cHRlZFJlYXNvbmluZ0Jsb2JPbmU=",
         "summary": [
             {"type": "summary_text", "text": "**Greeting the user**\n\nThe user wants a short hello."},
             {"type": "summary_text", "text": "Keep it brief."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Hello from the fake responses API.", "annotations": []}],
         "status": "completed", "id": "msg_0a1b2c3d4e5f60718293a4b5c6d7e8f9bb"}
    ]);
    let mut second_input = vec![
        json!({"role": "developer", "content": prompt}),
        user("Say hello"),
    ];
    second_input.extend(reply.as_array().unwrap().iter().cloned());
    second_input.push(user("Again"));
    let inputs = [
        json!([{"role": "developer", "content": prompt}, user("Say hello")]),
        Value::Array(second_input),
    ];
    let efforts = [
        json!({"effort": "medium", "summary": "auto"}),
        json!({"effort": "none", "summary": "auto"}),
    ];
    // ceil(chars / 3.5) of the prompt and of "Say hello"; then the reply's 1928 and "Again".
    let estimate = |text: &str| (text.len() as u64 * 2).div_ceil(7);
    let caps = [
        12000 - 4096 - estimate(&prompt) - estimate("Say hello"),
        12000 - 4096 - 1928 - estimate("Again"),
    ];
    let cases = requests.iter().zip(inputs).zip(efforts).zip(caps);
    for (((request, input), reasoning), cap) in cases {
        let body = &request.body;
        // Key order and every value but the session's cache key as 1.6.0 writes them.
        let expected = json!({
            "model": "codex-test", "store": false, "stream": true, "input": input,
            "text": {"verbosity": "low"}, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": body["prompt_cache_key"], "tool_choice": "auto",
            "parallel_tool_calls": true, "max_output_tokens": cap, "reasoning": reasoning,
        });
        assert_eq!(
            String::from_utf8_lossy(&request.raw_body),
            expected.to_string()
        );
        assert!(body["prompt_cache_key"].is_string());
    }
}

/// pi 1.6.0's output cap on Chat Completions: the model's `maxTokens` fitted into a small context
/// window — what it leaves after the input's estimate (3.5 characters a token of the system
/// prompt, the tools as 1.6.0 declares them, pi's own preferring strict sampling, and the prompt;
/// then the first reply's reported context and the new prompt) and 4096 tokens. Passes against
/// pi 1.6.0 too (`PI_TEST_BIN`).
#[test]
fn chat_completions_output_cap_is_fitted_into_the_context_window() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("openai/text.sse"),
        Reply::sse_fixture("openai/text.sse"),
    ]);
    let models = json!({"providers": {"cap": {"baseUrl": "__BASE_URL__/v1",
        "api": "openai-completions", "apiKey": "cap-key-123456",
        "models": [{"id": "cap-model", "input": ["text"], "contextWindow": 16000,
            "maxTokens": 16000}]}}});
    let setup = Setup::new(&fake, "cap", "cap-model")
        .models_json(&models.to_string())
        .arg("--system-prompt")
        .arg("SYS");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "Say hello"}));
    let first = assistant_messages(&pi.records_until_event("agent_end")).remove(0);
    assert_eq!(first["stopReason"], "stop", "{first}");
    pi.send(json!({"id": "p2", "type": "prompt", "message": "Again"}));
    let second = assistant_messages(&pi.records_until_event("agent_end")).remove(0);
    assert_eq!(second["stopReason"], "stop", "{second}");

    let requests = fake.requests();
    let estimate = |text: &str| (text.encode_utf16().count() as u64 * 2).div_ceil(7);
    let body = &requests[0].body;
    let system = body["messages"][0]["content"].as_str().unwrap();
    let tools: Vec<Value> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| {
            let f = &tool["function"];
            json!({"name": f["name"], "description": f["description"],
                "parameters": f["parameters"],
                "constrainedSampling": {"type": "json_schema", "strict": "prefer"}})
        })
        .collect();
    assert_eq!(tools.len(), 4, "pi's own four tools: {tools:?}");
    let input =
        estimate(system) + estimate(&Value::Array(tools).to_string()) + estimate("Say hello");
    assert_eq!(
        body["max_completion_tokens"],
        16000 - 4096 - input,
        "{body}"
    );
    let reported = first["usage"]["totalTokens"].as_u64().unwrap();
    assert!(reported > 0, "{first}");
    let cap = 16000 - 4096 - reported - estimate("Again");
    assert_eq!(requests[1].body["max_completion_tokens"], cap);
}

/// pi 1.6.0's output cap with budget thinking on Anthropic Messages: the model's `maxTokens` is
/// fitted into a small window, grown by the medium budget (8192), and fitted again, so the window
/// still decides the cap and the whole budget fits under it. Passes against pi 1.6.0 too
/// (`PI_TEST_BIN`).
#[test]
fn anthropic_budget_thinking_fits_the_grown_cap_into_the_window() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("anthropic/text.sse")]);
    let models = json!({"providers": {"capa": {"baseUrl": "__BASE_URL__",
        "api": "anthropic-messages", "apiKey": "capa-key-123456",
        "models": [{"id": "claude-sonnet-4-5", "reasoning": true, "input": ["text"],
            "contextWindow": 24000, "maxTokens": 64000}]}}});
    let setup = Setup::new(&fake, "capa", "claude-sonnet-4-5")
        .models_json(&models.to_string())
        .arg("--system-prompt")
        .arg("SYS")
        .arg("--no-tools")
        .arg("--thinking")
        .arg("medium");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "Say hello"}));
    let reply = assistant_messages(&pi.records_until_event("agent_end")).remove(0);
    assert_eq!(reply["stopReason"], "stop", "{reply}");

    let body = &fake.requests()[0].body;
    let estimate = |text: &str| (text.encode_utf16().count() as u64 * 2).div_ceil(7);
    let system = body["system"][0]["text"].as_str().unwrap();
    let input = estimate(system) + estimate("Say hello");
    let room = 24000 - 4096 - input;
    assert_eq!(body["max_tokens"], room, "{body}");
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 8192, "display": "summarized"})
    );
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
        let setup = Setup::new(&fake, "dg", "dg-model")
            .models_json(&models.to_string())
            .with_sessions();
        let mut pi = Pi::spawn(&setup);
        let message = first_reply(&mut pi, "p", "hi");
        // The session file holds the message with the same key order as stdout.
        let file = session_file(&mut pi, "s");
        let text = std::fs::read_to_string(&file).expect("session file");
        let stored = text
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("entry"))
            .find(|entry| entry["message"]["role"] == "assistant")
            .expect("assistant entry");
        assert_eq!(keys_of(&stored["message"]), keys_of(&message), "{stored}");
        message
    };
    // The keys of `message` in order.
    fn keys_of(message: &Value) -> Vec<String> {
        message
            .as_object()
            .expect("object")
            .keys()
            .cloned()
            .collect()
    }
    // Where 1.6.0 puts `diagnostics`: in the order it set the fields.
    let next_to_diagnostics = |message: &Value| -> (String, String) {
        let keys = keys_of(message);
        let at = keys
            .iter()
            .position(|k| k == "diagnostics")
            .expect("diagnostics");
        (keys[at - 1].clone(), keys[at + 1].clone())
    };
    let anthropic = fixture("anthropic/text.sse").replacen(
        "\"message\":{",
        "\"message\":{\"input_transformations\":[{\"type\":\"thinking_removed\",\
         \"path\":\"messages.1.content.0\",\"reason\":\"unsigned\",\"extra\":1}],",
        1,
    );
    let message = reply_for("anthropic-messages", anthropic);
    // Anthropic's come at the end, after the stop reason.
    assert_eq!(
        next_to_diagnostics(&message),
        ("rawStopReason".into(), "durationMs".into())
    );
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
    // OpenAI's with the completed response, before its stop reason.
    assert_eq!(
        next_to_diagnostics(&message),
        ("responseId".into(), "rawStopReason".into())
    );
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
/// end, where it takes the cache marker), with the `inline-tools` beta. With
/// `supportsStrictTools`, a first tool removed since (`bash`) stays strict: its declaration asks
/// for it. Passes against pi 1.6.0 too.
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
                "supportsMidConvoToolChanges": true, "supportsStrictTools": true}}]}}});
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
        assert_eq!(
            (&tools[0]["strict"], &tools[1]["strict"]),
            (&json!(true), &json!(true))
        );
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
    assert!(definition.get("strict").is_none(), "{definition}");
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

/// Four runs on one session, each starting with other active tools (`--tools`, as an
/// extension or an MCP server would change them): `read`; `read,grep` (an addition); `grep` (a
/// removal); `grep,find` (an addition after it). A model of `api` with `compat` (system messages
/// in place, plus `keys`); Codex gets a subscription token and `transport: "sse"`. Returns the
/// four request bodies.
fn bodies_as_the_tools_change(api: &str, keys: Value) -> Vec<Value> {
    let steps = ["read", "read,grep", "grep", "grep,find"];
    let replies = steps
        .iter()
        .map(|_| Reply::sse_fixture("openai-responses/text.sse"))
        .collect();
    let fake = FakeProvider::start(replies);
    let (base_url, key) = match api {
        "openai-codex-responses" => (
            "__BASE_URL__/backend-api",
            crate::support::codex_token("acct_42"),
        ),
        _ => ("__BASE_URL__/v1", "tc-key-123456".to_string()),
    };
    let mut compat = json!({"supportsMidConvoSystemMessages": true});
    compat
        .as_object_mut()
        .unwrap()
        .extend(keys.as_object().unwrap().clone());
    let models = json!({"providers": {"tc": {"baseUrl": base_url, "api": api, "apiKey": key,
        "models": [{"id": "tc-model", "input": ["text"], "compat": compat}]}}});
    let workspace = Workspace::new();
    let setup = Setup::new(&fake, "tc", "tc-model")
        .models_json(&models.to_string())
        .settings(json!({"transport": "sse"}))
        .with_sessions();
    let mut file: Option<std::path::PathBuf> = None;
    for (step, tools) in steps.iter().enumerate() {
        let mut run_setup = setup.clone();
        if let Some(file) = &file {
            run_setup = run_setup.arg("--session").arg(&file.to_string_lossy());
        }
        let run_setup = run_setup.arg("--tools").arg(tools);
        let mut pi = Pi::spawn_in(&workspace, &run_setup);
        pi.send(json!({"id": format!("p{step}"), "type": "prompt", "message": format!("m{step}")}));
        let run = pi.records_until_event("agent_end");
        assert_eq!(assistant_messages(&run)[0]["stopReason"], "stop", "{run:?}");
        file.get_or_insert_with(|| crate::support::session_file(&mut pi, "s"));
        pi.close_and_wait();
    }
    let requests = fake.requests();
    assert_eq!(requests.len(), steps.len());
    requests.into_iter().map(|r| r.body).collect()
}

/// The input items of a Responses body as short labels: declarations with their tools' names,
/// instructions with their text (the session's prompt as `prompt`, a prompt update as `update`
/// and what follows it), user messages with theirs, replies by their item type.
fn input_labels(body: &Value) -> Vec<String> {
    let names = |tools: &Value| -> String {
        let names: Vec<&str> = tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        names.join(",")
    };
    let mut labels = Vec::new();
    for item in body["input"].as_array().unwrap() {
        let kind = item["type"].as_str().unwrap_or("");
        let role = item["role"].as_str().unwrap_or("");
        labels.push(match (kind, role) {
            ("additional_tools", _) => format!("additional_tools:{}", names(&item["tools"])),
            ("tool_search_call", _) => format!(
                "tool_search_call:{}:{}",
                item["arguments"]["query"].as_str().unwrap(),
                item["arguments"]["limit"]
            ),
            ("tool_search_output", _) => format!("tool_search_output:{}", names(&item["tools"])),
            ("message", _) | ("reasoning", _) => kind.to_string(),
            (_, "user") => format!("user:{}", content_text(item)),
            (_, "system" | "developer") => {
                let text = content_text(item);
                if text.starts_with("Updated system prompt section") {
                    match text.find("\n\nThe following tools") {
                        Some(at) => format!("update+{}", &text[at + 2..]),
                        None => "update".to_string(),
                    }
                } else if text.starts_with("You are") {
                    "prompt".to_string()
                } else {
                    text
                }
            }
            _ => item.to_string(),
        });
    }
    labels
}

/// The tools the items of the input declare, by name, with their keys and their `strict`
/// (`name:key,key,…=strict`).
fn in_place_declarations(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| item["tools"].as_array())
        .flatten()
        .map(|tool| {
            let keys: Vec<&str> = tool
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            let strict = tool
                .get("strict")
                .map(|s| format!("={s}"))
                .unwrap_or_default();
            format!(
                "{}:{}{strict}",
                tool["name"].as_str().unwrap(),
                keys.join(",")
            )
        })
        .collect()
}

/// The first tool named `name` an input item of `body` declares.
fn declared_in_place<'a>(body: &'a Value, name: &str) -> &'a Value {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| item["tools"].as_array())
        .flatten()
        .find(|tool| tool["name"] == name)
        .unwrap_or_else(|| panic!("no declaration of {name} in {body}"))
}

const INCREMENTAL_TOOLS_NOTICE: &str = "This is an incremental tools update. Previously declared \
    tools remain available unless explicitly marked unavailable. A tool declared again here is \
    available again, and its latest definition replaces the earlier one.";

/// pi 1.6.0's request bodies for `bodies_as_the_tools_change` on a Responses-family `api`, one
/// scenario per compat: `supportsAdditionalTools` (alone and with `supportsToolSearch`) declares
/// every tool in `additional_tools` items — the first at the head, a later one after a notice
/// that it adds to the earlier ones (and which removed tools stay unavailable) — and announces a
/// removal after the system message's text; no top-level `tools`. `supportsToolSearch` alone
/// keeps the top-level `tools` at the state after the last removal and loads a later addition
/// by a synthetic client tool search (its call id hashed from the position and the names).
/// `strict` marks the declarations' keys and values on this API (`none`: no `strict` key).
fn check_in_place_tools(api: &str, strict: [&str; 3]) {
    let [read_strict, grep_strict, find_strict] = strict;
    let key_list = |name: &str, strict: &str, deferred: bool| {
        let deferred = if deferred { ",defer_loading" } else { "" };
        match strict {
            "none" => format!("{name}:type,name,description,parameters{deferred}"),
            value => format!("{name}:type,name,description,parameters{deferred},strict={value}"),
        }
    };
    let read = key_list("read", read_strict, false);
    let grep = key_list("grep", grep_strict, false);
    let find = key_list("find", find_strict, false);
    // The session's prompt item is left out of the comparison (other tests check it).
    let labels = |body: &Value| -> Vec<String> {
        input_labels(body)
            .into_iter()
            .filter(|label| label != "prompt")
            .collect()
    };
    let turn = ["reasoning", "message"];
    let removal = "update+The following tools are no longer available. Do not call them:\n- read";
    let still_unavailable = format!("{INCREMENTAL_TOOLS_NOTICE}\nStill unavailable: read.");

    let mut changes_bodies = Vec::new();
    for keys in [
        json!({"supportsAdditionalTools": true}),
        json!({"supportsAdditionalTools": true, "supportsToolSearch": true}),
    ] {
        let bodies = bodies_as_the_tools_change(api, keys.clone());
        // Every client of this family tells the server not to store the response (1.6.0).
        assert!(bodies.iter().all(|b| b["store"] == false), "{bodies:?}");
        let mut expected: Vec<String> = vec!["additional_tools:read".into(), "user:m0".into()];
        assert_eq!(labels(&bodies[0]), expected, "{keys}: {}", bodies[0]);
        expected.extend(turn.map(String::from));
        expected.extend([
            INCREMENTAL_TOOLS_NOTICE.into(),
            "additional_tools:grep".into(),
            "update".into(),
            "user:m1".into(),
        ]);
        assert_eq!(labels(&bodies[1]), expected, "{keys}: {}", bodies[1]);
        expected.extend(turn.map(String::from));
        expected.extend([removal.into(), "user:m2".into()]);
        assert_eq!(labels(&bodies[2]), expected, "{keys}: {}", bodies[2]);
        expected.extend(turn.map(String::from));
        expected.extend([
            still_unavailable.clone(),
            "additional_tools:find".into(),
            "update".into(),
            "user:m3".into(),
        ]);
        assert_eq!(labels(&bodies[3]), expected, "{keys}: {}", bodies[3]);
        for body in &bodies {
            assert!(body.get("tools").is_none(), "{keys}: {body}");
        }
        // The removed tool's first declaration stays as it was (strict where it was).
        assert_eq!(
            in_place_declarations(&bodies[3]),
            [read.clone(), grep.clone(), find.clone()],
            "{keys}"
        );
        changes_bodies = bodies;
    }

    let bodies = bodies_as_the_tools_change(api, json!({"supportsToolSearch": true}));
    let search = |name: &str, call_id: &str| {
        json!({"type": "tool_search_call", "call_id": call_id, "execution": "client",
            "status": "completed", "arguments": {"query": name, "limit": 1}})
    };
    let grep_call = search("grep", "pi_tool_load_csad79vystg3");
    let find_call = search("find", "pi_tool_load_1gzs5tl15ahsdo");
    let mut expected: Vec<String> = vec!["user:m0".into()];
    assert_eq!(labels(&bodies[0]), expected, "{}", bodies[0]);
    let mut with_grep = expected.clone();
    with_grep.extend(turn.map(String::from));
    with_grep.extend([
        "tool_search_call:grep:1".into(),
        "tool_search_output:grep".into(),
        "update".into(),
        "user:m1".into(),
    ]);
    assert_eq!(labels(&bodies[1]), with_grep, "{}", bodies[1]);
    // After the removal the top level is the state after it, and nothing is loaded in place.
    for step in 1..3 {
        expected.extend(turn.map(String::from));
        expected.extend(["update".into(), format!("user:m{step}")]);
    }
    assert_eq!(labels(&bodies[2]), expected, "{}", bodies[2]);
    expected.extend(turn.map(String::from));
    expected.extend([
        "tool_search_call:find:1".into(),
        "tool_search_output:find".into(),
        "update".into(),
        "user:m3".into(),
    ]);
    assert_eq!(labels(&bodies[3]), expected, "{}", bodies[3]);
    let top_level = |body: &Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        [0, 1, 2, 3].map(|i| top_level(&bodies[i])),
        [["read"], ["read"], ["grep"], ["grep"]]
    );
    for (body, call, name, strict) in [
        (&bodies[1], &grep_call, "grep", grep_strict),
        (&bodies[3], &find_call, "find", find_strict),
    ] {
        let input = body["input"].as_array().unwrap();
        let at = input.iter().position(|item| item == call).expect(name);
        assert_eq!(input[at + 1]["call_id"], call["call_id"], "{body}");
        assert_eq!(input[at + 1]["execution"], "client", "{}", input[at + 1]);
        assert_eq!(input[at + 1]["status"], "completed", "{}", input[at + 1]);
        assert_eq!(
            in_place_declarations(body),
            [key_list(name, strict, true)],
            "{body}"
        );
    }
    // An in-place declaration is the top-level one (a tool search result's deferred).
    let mut loaded = declared_in_place(&bodies[1], "grep").clone();
    loaded
        .as_object_mut()
        .unwrap()
        .shift_remove("defer_loading");
    assert_eq!(loaded, bodies[2]["tools"][0]);
    assert_eq!(
        declared_in_place(&changes_bodies[0], "read"),
        &bodies[0]["tools"][0]
    );
}

/// `compat.supportsAdditionalTools` and `supportsToolSearch` on OpenAI Responses (with
/// `supportsMidConvoSystemMessages`), as pi 1.6.0 sends them (`check_in_place_tools`): without
/// strict mode no declaration says `strict`. Passes against pi 1.6.0 too.
#[test]
fn responses_declare_tool_changes_in_the_input() {
    check_in_place_tools("openai-responses", ["none", "none", "none"]);
}

/// The same on ChatGPT Codex, whose strict mode is on by default: `read` (which prefers strict
/// sampling) says `strict: true`, the others `null` — in the input as at the top level. Passes
/// against pi 1.6.0 too (`transport: "sse"`; its zstd bodies decoded by the fake).
#[test]
fn codex_declares_tool_changes_in_the_input() {
    check_in_place_tools("openai-codex-responses", ["true", "null", "null"]);
}

/// The same on Azure OpenAI, whose strict mode is on by default: `read` says `strict: true`, the
/// others `false`. Passes against pi 1.6.0 too.
#[test]
fn azure_declares_tool_changes_in_the_input() {
    check_in_place_tools("azure-openai-responses", ["true", "false", "false"]);
}

/// The models.json provider `id` on Anthropic Messages at the fake server, model `fake-claude`
/// (the id the fixtures answer with, so a reply is not a fallback model's), with `compat`.
fn anthropic_compat_models(id: &str, compat: Value) -> String {
    json!({"providers": {id: {"baseUrl": "__BASE_URL__", "api": "anthropic-messages",
        "apiKey": "th-key-123456",
        "models": [{"id": "fake-claude", "input": ["text"], "compat": compat}]}}})
    .to_string()
}

/// `compat.supportsMessageThreads` (pi 1.6.0; by default only for api.anthropic.com): every
/// request of the session has the message-threads beta; the first opens a thread with the whole
/// request, the next one that starts with that conversation and the reply continues it with only
/// the new messages (no `system`, no `tools`) after the reply's id. A continue the server no
/// longer knows (`thread_not_found`) is sent again once as a new thread with everything, and the
/// reply records an `anthropic_thread_fallback` diagnostic. An endpoint that rejects the `thread`
/// field (a 400 about it without a code) gets the request again without it, and the session
/// sends no thread after that (the beta stays). Passes against pi 1.6.0 too.
#[test]
fn anthropic_message_threads_send_only_whats_new() {
    const BETA: &str = "message-threads-2026-08-12";
    let not_found = json!({"type": "error", "error": {"type": "not_found_error",
        "message": "thread not found", "details": {"error_code": "thread_not_found"}}});
    let unknown_field = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "thread: Extra inputs are not permitted"}});
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("anthropic/text.sse"),
        Reply::sse_fixture("anthropic/text.sse"),
        Reply::status(404, not_found.to_string(), &[]),
        Reply::sse_fixture("anthropic/text.sse"),
        Reply::status(400, unknown_field.to_string(), &[]),
        Reply::sse_fixture("anthropic/text.sse"),
        Reply::sse_fixture("anthropic/text.sse"),
    ]);
    let models = anthropic_compat_models("th", json!({"supportsMessageThreads": true}));
    let setup = Setup::new(&fake, "th", "fake-claude").models_json(&models);
    let mut pi = Pi::spawn(&setup);
    let mut replies = Vec::new();
    for (id, text) in [
        ("p1", "first"),
        ("p2", "second"),
        ("p3", "third"),
        ("p4", "fourth"),
        ("p5", "fifth"),
    ] {
        pi.send(json!({"id": id, "type": "prompt", "message": text}));
        let run = pi.records_until_event("agent_end");
        let reply = assistant_messages(&run).remove(0);
        assert_eq!(reply["stopReason"], "stop", "{reply}");
        replies.push(reply);
    }
    let requests = fake.requests();
    assert_eq!(requests.len(), 7);
    for request in &requests {
        let betas = request.header("anthropic-beta").unwrap_or("");
        assert!(betas.split(',').any(|b| b == BETA), "{betas}");
    }
    let reply_id = "msg_01XFDUDYJgAACzvnptvVoYEL";
    let first = &requests[0].body;
    assert_eq!(first["thread"], json!({"type": "create"}), "{first}");
    assert!(
        first.get("system").is_some() && first.get("tools").is_some(),
        "{first}"
    );
    let second = &requests[1].body;
    assert_eq!(
        second["thread"],
        json!({"type": "continue", "previous_message_id": reply_id})
    );
    // Byte for byte as 1.6.0 sends it: the request's members in order without `system` and
    // `tools`, the new message only, `thread` last.
    assert_eq!(
        String::from_utf8_lossy(&requests[1].raw_body),
        r#"{"model":"fake-claude","messages":[{"role":"user","content":[{"type":"text","text":"second","cache_control":{"type":"ephemeral"}}]}],"max_tokens":16384,"stream":true,"thread":{"type":"continue","previous_message_id":"msg_01XFDUDYJgAACzvnptvVoYEL"}}"#
    );
    // The third continues the second; the server no longer knows it: a new thread, in full.
    assert_eq!(requests[2].body["thread"]["type"], "continue");
    let resent = &requests[3].body;
    assert_eq!(resent["thread"], json!({"type": "create"}));
    assert_eq!(resent["messages"].as_array().unwrap().len(), 5, "{resent}");
    assert!(resent.get("system").is_some(), "{resent}");
    let diagnostics = replies[2]["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(diagnostics.len(), 1, "{}", replies[2]);
    assert_eq!(diagnostics[0]["type"], "anthropic_thread_fallback");
    assert!(diagnostics[0]["timestamp"].as_i64().is_some_and(|t| t > 0));
    assert_eq!(
        diagnostics[0]["details"],
        json!({"reason": "thread_not_found"})
    );
    assert_eq!(
        diagnostics[0]["error"]["message"],
        format!("404 {not_found}")
    );
    // The fourth continues the new thread; the endpoint rejects the field: sent without it,
    // and the fifth has no thread either.
    assert_eq!(requests[4].body["thread"]["type"], "continue");
    assert!(
        requests[5].body.get("thread").is_none(),
        "{}",
        requests[5].body
    );
    assert_eq!(requests[5].body["messages"].as_array().unwrap().len(), 7);
    assert_eq!(
        replies[3]["diagnostics"][0]["details"],
        json!({"reason": "400"})
    );
    assert!(
        requests[6].body.get("thread").is_none(),
        "{}",
        requests[6].body
    );
    assert!(replies[4].get("diagnostics").is_none(), "{}", replies[4]);
}

/// Without `supportsMessageThreads` a base URL that is not api.anthropic.com gets no threads:
/// no beta, no `thread`, and the whole conversation each time. Passes against pi 1.6.0 too.
#[test]
fn anthropic_message_threads_stay_off_elsewhere_by_default() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("anthropic/text.sse"),
        Reply::sse_fixture("anthropic/text.sse"),
    ]);
    let models = anthropic_compat_models("nt", json!({}));
    let setup = Setup::new(&fake, "nt", "fake-claude").models_json(&models);
    let mut pi = Pi::spawn(&setup);
    for id in ["p1", "p2"] {
        pi.send(json!({"id": id, "type": "prompt", "message": "hi"}));
        pi.records_until_event("agent_end");
    }
    let requests = fake.requests();
    for request in &requests {
        assert_eq!(request.header("anthropic-beta"), None);
        assert!(request.body.get("thread").is_none(), "{}", request.body);
    }
    assert_eq!(requests[1].body["messages"].as_array().unwrap().len(), 3);
}

/// `compat.allowedFallbackModels` (pi 1.6.0): the request names them in `fallbacks` (models
/// only) with the server-side fallback beta; a reply from a fallback model says so in
/// `responseModel` and is priced with that model's `cost`. A fallback block after content has
/// started is an error. Passes against pi 1.6.0 too.
#[test]
fn anthropic_allowed_fallback_models_are_sent_and_priced() {
    let answered_by = |model: &str| {
        fixture("anthropic/text.sse").replacen(
            "\"model\":\"fake-claude\"",
            &format!("\"model\":\"{model}\""),
            1,
        )
    };
    let late_fallback = fixture("anthropic/text.sse").replacen(
        "event: content_block_stop",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\
         \"content_block\":{\"type\":\"fallback\"}}\n\nevent: content_block_stop",
        1,
    );
    let fake = FakeProvider::start(vec![
        Reply::sse(answered_by("fb-model")),
        Reply::sse(late_fallback),
    ]);
    let compat = json!({"allowedFallbackModels": [
        {"provider": "fb", "model": "fb-model",
            "cost": {"input": 100, "output": 1000, "cacheRead": 0, "cacheWrite": 0}},
        {"provider": "other", "model": "other-model",
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}]});
    let models = anthropic_compat_models("fb", compat);
    let setup = Setup::new(&fake, "fb", "fake-claude").models_json(&models);
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "hi"}));
    let run = pi.records_until_event("agent_end");
    let reply = assistant_messages(&run).remove(0);
    assert_eq!(reply["stopReason"], "stop", "{reply}");
    assert_eq!(reply["responseModel"], "fb-model", "{reply}");
    let usage = &reply["usage"];
    let input = usage["input"].as_f64().unwrap();
    let output = usage["output"].as_f64().unwrap();
    assert!(input > 0.0 && output > 0.0, "{usage}");
    let cost = &usage["cost"];
    let near = |value: &Value, expected: f64| (value.as_f64().unwrap() - expected).abs() < 1e-12;
    assert!(near(&cost["input"], 100.0 / 1e6 * input), "{usage}");
    assert!(near(&cost["output"], 1000.0 / 1e6 * output), "{usage}");
    pi.send(json!({"id": "p2", "type": "prompt", "message": "again"}));
    let run = pi.records_until_event("agent_end");
    let reply = assistant_messages(&run).remove(0);
    assert_eq!(reply["stopReason"], "error", "{reply}");
    assert_eq!(
        reply["errorMessage"],
        "Anthropic performed an unsupported mid-output model fallback"
    );

    let request = &fake.requests()[0];
    assert_eq!(
        request.header("anthropic-beta"),
        Some("server-side-fallback-2026-07-01")
    );
    assert_eq!(
        request.body["fallbacks"],
        json!([{"model": "fb-model"}, {"model": "other-model"}])
    );
    let keys: Vec<&String> = request.body.as_object().unwrap().keys().collect();
    assert_eq!(
        keys.last().map(|k| k.as_str()),
        Some("fallbacks"),
        "{keys:?}"
    );
}

/// `compat.allowEmptySignature` (pi 1.6.0): a thinking block the server left unsigned goes back
/// as thinking with an empty signature; without the key it goes back as text. Passes against pi
/// 1.6.0 too.
#[test]
fn anthropic_allow_empty_signature_replays_unsigned_thinking() {
    let unsigned: String = fixture("anthropic/thinking_text.sse")
        .split_inclusive("\n\n")
        .filter(|event| !event.contains("signature_delta"))
        .collect();
    let second_request = |compat: Value| -> Value {
        let fake = FakeProvider::start(vec![
            Reply::sse(unsigned.clone()),
            Reply::sse_fixture("anthropic/text.sse"),
        ]);
        let models = json!({"providers": {"es": {"baseUrl": "__BASE_URL__",
            "api": "anthropic-messages", "apiKey": "es-key-123456",
            "models": [{"id": "fake-claude", "reasoning": true, "input": ["text"],
                "compat": compat}]}}});
        let setup = Setup::new(&fake, "es", "fake-claude")
            .models_json(&models.to_string())
            .arg("--thinking")
            .arg("low");
        let mut pi = Pi::spawn(&setup);
        for id in ["p1", "p2"] {
            pi.send(json!({"id": id, "type": "prompt", "message": "hi"}));
            let run = pi.records_until_event("agent_end");
            let reply = assistant_messages(&run).remove(0);
            assert_eq!(reply["stopReason"], "stop", "{reply}");
        }
        fake.requests()[1].body["messages"][1]["content"][0].clone()
    };
    let thought = "The user greets me. A short answer fits.";
    assert_eq!(
        second_request(json!({"allowEmptySignature": true})),
        json!({"type": "thinking", "thinking": thought, "signature": ""})
    );
    assert_eq!(
        second_request(json!({})),
        json!({"type": "text", "text": thought})
    );
}

/// The Responses keys of pi 1.6.0: `supportsMaxOutputTokens: false` leaves `max_output_tokens`
/// out; `supportsExplicitPromptCacheMode` asks for long retention (`PI_CACHE_RETENTION=long`) with
/// `prompt_cache_options: {ttl: "30m"}` instead of `prompt_cache_retention`, and short retention
/// with neither. Passes against pi 1.6.0 too.
#[test]
fn responses_output_cap_and_explicit_prompt_cache_compat_keys() {
    let body_for = |compat: Value, retention: Option<&str>| -> Value {
        let fake = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
        let models = json!({"providers": {"rs": {"baseUrl": "__BASE_URL__/v1",
            "api": "openai-responses", "apiKey": "rs-key-123456",
            "models": [{"id": "rs-model", "input": ["text"], "maxTokens": 4096,
                "compat": compat}]}}});
        let mut setup = Setup::new(&fake, "rs", "rs-model").models_json(&models.to_string());
        if let Some(retention) = retention {
            setup = setup.env("PI_CACHE_RETENTION", retention);
        }
        let mut pi = Pi::spawn(&setup);
        pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
        let run = pi.records_until_event("agent_end");
        let reply = assistant_messages(&run).remove(0);
        assert_eq!(reply["stopReason"], "stop", "{reply}");
        fake.requests().remove(0).body
    };
    let body = body_for(json!({}), None);
    assert_eq!(body["max_output_tokens"], 4096, "{body}");
    let body = body_for(json!({"supportsMaxOutputTokens": false}), None);
    assert!(body.get("max_output_tokens").is_none(), "{body}");

    let body = body_for(
        json!({"supportsExplicitPromptCacheMode": true}),
        Some("long"),
    );
    assert_eq!(
        body["prompt_cache_options"],
        json!({"ttl": "30m"}),
        "{body}"
    );
    assert!(body.get("prompt_cache_retention").is_none(), "{body}");
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    let at = |key: &str| keys.iter().position(|k| *k == key);
    assert_eq!(
        at("prompt_cache_options"),
        at("store").map(|i| i - 1),
        "{keys:?}"
    );
    let body = body_for(json!({"supportsExplicitPromptCacheMode": true}), None);
    assert!(body.get("prompt_cache_options").is_none(), "{body}");
    assert!(body.get("prompt_cache_retention").is_none(), "{body}");
    let body = body_for(json!({}), Some("long"));
    assert_eq!(body["prompt_cache_retention"], "24h", "{body}");
    assert!(body.get("prompt_cache_options").is_none(), "{body}");
}

/// `compat.supportsFinishReason` on Chat Completions (pi 1.6.0): a stream that ends without
/// `finish_reason` is an error by default; with the key false the reply stops normally, or with
/// `toolUse` when it has tool calls. Passes against pi 1.6.0 too.
#[test]
fn chat_completions_without_finish_reason_follows_the_compat_key() {
    let strip = |relative: &str| {
        fixture(relative)
            .replace("\"finish_reason\":\"stop\"", "\"finish_reason\":null")
            .replace("\"finish_reason\":\"tool_calls\"", "\"finish_reason\":null")
    };
    let reply_for = |compat: Value, bodies: Vec<String>, turns: usize| -> Value {
        let fake = FakeProvider::start(bodies.into_iter().map(Reply::sse).collect());
        let models = json!({"providers": {"fr": {"baseUrl": "__BASE_URL__/v1",
            "api": "openai-completions", "apiKey": "fr-key-123456",
            "models": [{"id": "fr-model", "input": ["text"], "compat": compat}]}}});
        let setup = Setup::new(&fake, "fr", "fr-model").models_json(&models.to_string());
        let mut pi = Pi::spawn(&setup);
        pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
        let run = pi.records_until_event("agent_end");
        let mut replies = assistant_messages(&run);
        assert_eq!(replies.len(), turns, "{replies:?}");
        replies.remove(0)
    };
    let reply = reply_for(json!({}), vec![strip("openai/text.sse")], 1);
    assert_eq!(reply["stopReason"], "error", "{reply}");
    assert_eq!(reply["errorMessage"], "Stream ended without finish_reason");

    let reply = reply_for(
        json!({"supportsFinishReason": false}),
        vec![strip("openai/text.sse")],
        1,
    );
    assert_eq!(reply["stopReason"], "stop", "{reply}");
    assert!(reply.get("rawStopReason").is_none(), "{reply}");

    let reply = reply_for(
        json!({"supportsFinishReason": false}),
        vec![strip("openai/tool_bash.sse"), fixture("openai/text.sse")],
        2,
    );
    assert_eq!(reply["stopReason"], "toolUse", "{reply}");
}

/// A thread continues across a thinking reply and a tool call: the request with the tool's
/// result sends only that result, and the next prompt only itself, each after the reply before
/// it. Passes against pi 1.6.0 too.
#[test]
fn anthropic_message_threads_continue_after_thinking_and_tool_calls() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("anthropic/thinking_text.sse"),
        Reply::sse_fixture("anthropic/tool_bash.sse"),
        Reply::sse_fixture("anthropic/text.sse"),
    ]);
    let models = json!({"providers": {"tt": {"baseUrl": "__BASE_URL__",
        "api": "anthropic-messages", "apiKey": "tt-key-123456",
        "compat": {"supportsMessageThreads": true},
        "models": [{"id": "fake-claude", "reasoning": true, "input": ["text"]}]}}});
    let setup = Setup::new(&fake, "tt", "fake-claude")
        .models_json(&models.to_string())
        .arg("--thinking")
        .arg("low");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "hello"}));
    pi.records_until_event("agent_end");
    pi.send(json!({"id": "p2", "type": "prompt", "message": "run echo"}));
    let run = pi.records_until_event("agent_end");
    let replies = assistant_messages(&run);
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[1]["stopReason"], "stop", "{}", replies[1]);
    let requests = fake.requests();
    let thread = |i: usize| requests[i].body["thread"].clone();
    let roles = |i: usize| -> Vec<String> {
        requests[i].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(thread(0), json!({"type": "create"}));
    assert_eq!(
        thread(1),
        json!({"type": "continue", "previous_message_id": "msg_01Q8Faay6S7QPTvEUUQARt7h"})
    );
    assert_eq!(roles(1), ["user"]);
    assert_eq!(thread(2)["type"], "continue", "{}", requests[2].body);
    assert_eq!(roles(2), ["user"]);
    assert_eq!(
        requests[2].body["messages"][0]["content"][0]["type"],
        "tool_result"
    );
}

/// Catalog models carry 1.6.0's compat keys: Claude Fable 5's fallbacks (with its base URL moved
/// to the fake server, which also keeps threads off) and GPT-5.6 Sol's explicit prompt-cache mode.
/// Passes against pi 1.6.0 too.
#[test]
fn catalog_compat_keys_reach_the_body() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("anthropic/text.sse")]);
    let setup = Setup::new(&fake, "anthropic", "claude-fable-5")
        .models_json(r#"{"providers": {"anthropic": {"baseUrl": "__BASE_URL__"}}}"#)
        .env("ANTHROPIC_API_KEY", "sk-ant-test-123456");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
    pi.records_until_event("agent_end");
    let request = fake.requests().remove(0);
    assert_eq!(
        request.body["fallbacks"],
        json!([{"model": "claude-opus-4-8"}, {"model": "claude-opus-5"}])
    );
    // (The catalog also gives it mid-conversation tool changes.)
    assert_eq!(
        request.header("anthropic-beta"),
        Some("server-side-fallback-2026-07-01,inline-tools-2026-09-15")
    );
    assert!(request.body.get("thread").is_none(), "{}", request.body);

    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
    let setup = Setup::new(&fake, "openai", "gpt-5.6-sol")
        .models_json(r#"{"providers": {"openai": {"baseUrl": "__BASE_URL__/v1"}}}"#)
        .env("OPENAI_API_KEY", "sk-test-123456")
        .env("PI_CACHE_RETENTION", "long");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
    pi.records_until_event("agent_end");
    let body = fake.requests().remove(0).body;
    assert_eq!(
        body["prompt_cache_options"],
        json!({"ttl": "30m"}),
        "{body}"
    );
    assert!(body.get("prompt_cache_retention").is_none(), "{body}");
}

/// Strict tools on Google Generative AI and Vertex AI, as pi 1.6.0 sends them (decided by the
/// model id): to a Gemini 3 or later model pi's read/bash/edit/write go with strict schemas and
/// `toolConfig.functionCallingConfig.mode: VALIDATED`; to Gemini 2.5 as they are, without
/// `toolConfig` (edit's schema without `additionalProperties`). The shape is the one 1.6.0 sent
/// (`tool_shape`). Passes against pi 1.6.0 too.
#[test]
fn gemini_3_models_get_strict_tools_and_validated_calls() {
    let body_for = |api: &str, id: &str| -> Value {
        let provider = json!({"baseUrl": "__BASE_URL__/v1beta", "api": api,
            "apiKey": "gg-key-123456", "models": [{"id": id, "input": ["text"]}]});
        compat_request("gg", provider, "google/text.sse", "off").body
    };
    for api in ["google-generative-ai", "google-vertex"] {
        let body = body_for(api, "gemini-3-pro-preview");
        let declared = json!({"tools": body["tools"], "toolConfig": body["toolConfig"]});
        assert_eq!(tool_shape(&declared), GEMINI_STRICT_TOOLS, "{api}");
    }
    let body = body_for("google-generative-ai", "gemini-2.5-flash");
    assert!(body.get("toolConfig").is_none(), "{body}");
    let read = &body["tools"][0]["functionDeclarations"][0];
    assert_eq!(read["name"], "read");
    assert_eq!(
        read["parametersJsonSchema"]["required"],
        json!(["path"]),
        "{read}"
    );
    assert!(
        read["parametersJsonSchema"]
            .get("additionalProperties")
            .is_none()
    );
    // 1.6.0's edit schema allows extra keys: no `additionalProperties` at its root or its items.
    let edit = &body["tools"][0]["functionDeclarations"][2]["parametersJsonSchema"];
    assert_eq!(edit["required"], json!(["path", "edits"]), "{edit}");
    assert!(edit.get("additionalProperties").is_none(), "{edit}");
    assert!(
        edit["properties"]["edits"]["items"]
            .get("additionalProperties")
            .is_none(),
        "{edit}"
    );
}

/// What pi 1.6.0 sent a Gemini 3 model (descriptions as `D`).
const GEMINI_STRICT_TOOLS: &str = r#"{"tools":[{"functionDeclarations":[{"name":"read","description":"D","parametersJsonSchema":{"type":"object","required":["path","offset","limit"],"properties":{"path":{"type":"string","description":"D"},"offset":{"anyOf":[{"type":"number","description":"D"},{"type":"null"}]},"limit":{"anyOf":[{"type":"number","description":"D"},{"type":"null"}]}},"additionalProperties":false}},{"name":"bash","description":"D","parametersJsonSchema":{"type":"object","required":["command","timeout"],"properties":{"command":{"type":"string","description":"D"},"timeout":{"anyOf":[{"type":"number","description":"D"},{"type":"null"}]}},"additionalProperties":false}},{"name":"edit","description":"D","parametersJsonSchema":{"type":"object","required":["path","edits"],"properties":{"path":{"type":"string","description":"D"},"edits":{"type":"array","items":{"type":"object","required":["oldText","newText"],"properties":{"oldText":{"type":"string","description":"D"},"newText":{"type":"string","description":"D"}},"additionalProperties":false},"description":"D"}},"additionalProperties":false}},{"name":"write","description":"D","parametersJsonSchema":{"type":"object","required":["path","content"],"properties":{"path":{"type":"string","description":"D"},"content":{"type":"string","description":"D"}},"additionalProperties":false}}]}],"toolConfig":{"functionCallingConfig":{"mode":"VALIDATED"}}}"#;

/// A 1×1 PNG (the image of the Gemini replay test).
const ONE_PIXEL_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";

/// An extension tool whose schema has `const`s where Gemini honours them (strings, numbers) and
/// where it does not (a boolean, one beside an `enum`, a property named `const`).
const CONST_TOOL_EXTENSION: &str = r#"export default function (pi) {
  pi.registerTool({
    name: "pick", label: "pick", description: "Pick",
    parameters: {type: "object", properties: {
      mode: {const: "fast", description: "M"}, level: {type: "number", const: 3},
      flag: {const: true}, nested: {type: "object", properties: {const: {type: "string", const: "k"}}},
      list: {type: "array", items: {const: "a"}}, both: {const: "x", enum: ["x", "y"]}},
      required: ["mode"]},
    async execute() { return {content: [{type: "text", text: "ok"}], details: {}}; },
  });
}
"#;

/// Gemini 3 on Google Generative AI and Vertex AI, as pi 1.6.0 sends it: a prompt image, a read
/// of an image file replayed with the call's id on `functionCall` and `functionResponse` (the id
/// kept as the model sent it) and the image inside the function response, in each SDK
/// converter's key order. Passes against pi 1.6.0 too.
#[test]
fn gemini_3_replays_call_ids_in_each_converters_key_order() {
    use base64::Engine as _;
    let call = r#"data: {"candidates": [{"content": {"parts": [{"functionCall": {"id": "call|1", "name": "read", "args": {"path": "img.png"}}, "thoughtSignature": "CiQB0e2Kb0Z1bmN0aW9uQ2FsbFNpZ25hdHVyZQ=="}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 18, "totalTokenCount": 28}, "modelVersion": "fake", "responseId": "r1"}

"#;
    let user = format!(
        r#"{{"parts":[{{"text":"look"}},{{"inlineData":{{"mimeType":"image/png","data":"{ONE_PIXEL_PNG}"}}}}],"role":"user"}}"#
    );
    let signed = r#""thoughtSignature":"CiQB0e2Kb0Z1bmN0aW9uQ2FsbFNpZ25hdHVyZQ==""#;
    let image =
        format!(r#"[{{"inlineData":{{"mimeType":"image/png","data":"{ONE_PIXEL_PNG}"}}}}]"#);
    let output = r#"{"output":"Read image file [image/png]"}"#;
    let expected = [
        (
            "google-generative-ai",
            format!(
                r#"[{user},{{"parts":[{{"functionCall":{{"args":{{"path":"img.png"}},"id":"call|1","name":"read"}},{signed}}}],"role":"model"}},{{"parts":[{{"functionResponse":{{"name":"read","response":{output},"parts":{image},"id":"call|1"}}}}],"role":"user"}}]"#
            ),
        ),
        (
            "google-vertex",
            format!(
                r#"[{user},{{"parts":[{{"functionCall":{{"name":"read","args":{{"path":"img.png"}},"id":"call|1"}},{signed}}}],"role":"model"}},{{"parts":[{{"functionResponse":{{"id":"call|1","name":"read","parts":{image},"response":{output}}}}}],"role":"user"}}]"#
            ),
        ),
    ];
    for (api, contents) in expected {
        let fake = FakeProvider::start(vec![
            Reply::sse(call),
            Reply::sse_fixture("google/text.sse"),
        ]);
        let models = json!({"providers": {"gg": {"baseUrl": "__BASE_URL__/v1beta", "api": api,
            "apiKey": "gg-key-123456",
            "models": [{"id": "gemini-3-pro-preview", "input": ["text", "image"]}]}}});
        let setup =
            Setup::new(&fake, "gg", "gemini-3-pro-preview").models_json(&models.to_string());
        let mut pi = Pi::spawn(&setup);
        let png = base64::engine::general_purpose::STANDARD
            .decode(ONE_PIXEL_PNG)
            .unwrap();
        std::fs::write(pi.cwd().join("img.png"), png).unwrap();
        pi.send(
            json!({"id": "p", "type": "prompt", "message": "look", "images": [
            {"type": "image", "data": ONE_PIXEL_PNG, "mimeType": "image/png"}]}),
        );
        let run = pi.records_until_event("agent_end");
        let last = assistant_messages(&run).pop().unwrap();
        assert_eq!(last["stopReason"], "stop", "{last}");
        let requests = fake.requests();
        assert_eq!(requests.len(), 2, "{api}");
        assert_eq!(requests[1].body["contents"].to_string(), contents, "{api}");
    }
}

/// An extension tool's string and number `const`s reach Gemini as one-value `enum`s (a boolean
/// `const`, one beside an `enum` and a property named `const` stay), on Google Generative AI and
/// Vertex AI alike, as pi 1.6.0 sends them. Passes against pi 1.6.0 too.
#[test]
fn gemini_gets_an_extension_tools_consts_as_enums() {
    let Some(reference) = crate::reference_clients::reference("1.6.0") else {
        return;
    };
    for api in ["google-generative-ai", "google-vertex"] {
        let fake = FakeProvider::start(vec![Reply::sse_fixture("google/text.sse")]);
        let models = json!({"providers": {"gg": {"baseUrl": "__BASE_URL__/v1beta", "api": api,
            "apiKey": "gg-key-123456", "models": [{"id": "gemini-2.5-flash", "input": ["text"]}]}}});
        let setup = Setup::new(&fake, "gg", "gemini-2.5-flash")
            .models_json(&models.to_string())
            .env("PI_RS_NODE", &reference.node.to_string_lossy())
            .env("PI_RS_PI_PACKAGE", &reference.package.to_string_lossy())
            .file("pick.ts", CONST_TOOL_EXTENSION)
            .arg("-e")
            .arg("pick.ts");
        let mut pi = Pi::spawn(&setup);
        pi.send(json!({"id": "p", "type": "prompt", "message": "hi"}));
        let run = pi.records_until_event("agent_end");
        let last = assistant_messages(&run).pop().unwrap();
        assert_eq!(last["stopReason"], "stop", "{last}");
        let body = fake.requests().remove(0).body;
        let declarations = body["tools"][0]["functionDeclarations"].as_array().unwrap();
        let pick = declarations
            .iter()
            .find(|d| d["name"] == "pick")
            .expect("pick declared");
        assert_eq!(
            pick["parametersJsonSchema"].to_string(),
            r#"{"type":"object","properties":{"mode":{"description":"M","enum":["fast"]},"level":{"type":"number","enum":[3]},"flag":{"const":true},"nested":{"type":"object","properties":{"const":{"type":"string","enum":["k"]}}},"list":{"type":"array","items":{"enum":["a"]}},"both":{"const":"x","enum":["x","y"]}},"required":["mode"]}"#,
            "{api}"
        );
    }
}

/// Claude's strict-tool limits on Anthropic Messages, as pi 1.6.0 meets them: the API refuses the
/// request (a 400 `invalid_request_error` naming a limit), the same request goes again at once
/// with pi's tools non-strict, the reply records an `anthropic_strict_tools_fallback` diagnostic
/// with the SDK's error message (before `responseId`), and the session's next request is
/// non-strict from the start, without a diagnostic. Passes against pi 1.6.0 too.
#[test]
fn anthropic_strict_tools_fall_back_when_claude_refuses_them() {
    let refusal = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "Schemas contains too many parameters with union types (17 parameters with type arrays or anyOf). Reduce them (limit: 16)."},
        "request_id": "req_011"})
    .to_string();
    let fake = FakeProvider::start(vec![
        Reply::status(
            400,
            refusal.clone(),
            &[("content-type", "application/json")],
        ),
        Reply::sse_fixture("anthropic/text.sse"),
        Reply::sse_fixture("anthropic/text.sse"),
    ]);
    let models = json!({"providers": {"st": {"baseUrl": "__BASE_URL__",
        "api": "anthropic-messages", "apiKey": "st-key-123456",
        "models": [{"id": "st-model", "input": ["text"],
            "compat": {"supportsStrictTools": true}}]}}});
    let setup = Setup::new(&fake, "st", "st-model").models_json(&models.to_string());
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "hi"}));
    let run = pi.records_until_event("agent_end");
    let message = assistant_messages(&run).remove(0);
    assert_eq!(message["stopReason"], "stop", "{message}");
    let keys: Vec<&str> = message
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let at = |key: &str| keys.iter().position(|k| *k == key).unwrap();
    assert!(at("timestamp") < at("diagnostics") && at("diagnostics") < at("responseId"));
    let diagnostics = message["diagnostics"].as_array().unwrap();
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    let fallback = diagnostics[0].as_object().unwrap();
    let keys: Vec<&str> = fallback.keys().map(String::as_str).collect();
    assert_eq!(keys, ["type", "timestamp", "error", "details"]);
    assert_eq!(fallback["type"], "anthropic_strict_tools_fallback");
    assert_eq!(
        fallback["error"],
        json!({"message": format!("400 {refusal}")})
    );
    assert_eq!(
        fallback["details"],
        json!({"reason": "strict_tool_limits_exceeded"})
    );
    pi.send(json!({"id": "p2", "type": "prompt", "message": "again"}));
    let run = pi.records_until_event("agent_end");
    let message = assistant_messages(&run).remove(0);
    assert_eq!(message["stopReason"], "stop", "{message}");
    assert!(message.get("diagnostics").is_none(), "{message}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    let strict = |request: &crate::fake_provider::RecordedRequest| -> Vec<bool> {
        request.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.get("strict") == Some(&json!(true)))
            .collect()
    };
    assert_eq!(strict(&requests[0]), [true; 4]);
    for request in &requests[1..] {
        assert_eq!(strict(request), [false; 4]);
        let read = &request.body["tools"][0];
        assert_eq!(read["input_schema"]["required"], json!(["path"]), "{read}");
    }
}

/// The service tier OpenAI served a Responses reply at scales its cost, as pi 1.6.0 prices it:
/// `priority` twice the model's rates, `flex` half, every part and the total (the fixture's
/// usage: 819 fresh input, 1024 cached, 85 output tokens). Passes against pi 1.6.0 too.
#[test]
fn responses_service_tiers_scale_the_cost() {
    let tiered = |tier: &str| {
        Reply::sse(fixture("openai-responses/text.sse").replace(
            r#""service_tier":"default""#,
            &format!(r#""service_tier":"{tier}""#),
        ))
    };
    let fake = FakeProvider::start(vec![tiered("priority"), tiered("flex")]);
    let models = json!({"providers": {"tiers": {"baseUrl": "__BASE_URL__/v1",
        "api": "openai-responses", "apiKey": "tier-key-123456",
        "models": [{"id": "tier-model", "reasoning": true, "input": ["text"],
            "cost": {"input": 1, "output": 2, "cacheRead": 0.1, "cacheWrite": 0}}]}}});
    let setup = Setup::new(&fake, "tiers", "tier-model").models_json(&models.to_string());
    let mut pi = Pi::spawn(&setup);
    let base = [819e-6, 170e-6, 102.4e-6];
    for (prompt, multiplier) in [("first", 2.0), ("second", 0.5)] {
        pi.send(json!({"id": prompt, "type": "prompt", "message": prompt}));
        let message = assistant_messages(&pi.records_until_event("agent_end")).remove(0);
        assert_eq!(message["stopReason"], "stop", "{message}");
        let cost = &message["usage"]["cost"];
        let parts = [&cost["input"], &cost["output"], &cost["cacheRead"]];
        for (part, base) in parts.iter().zip(base) {
            let got = part.as_f64().unwrap();
            assert!((got - base * multiplier).abs() < 1e-12, "{cost}");
        }
        let total = cost["total"].as_f64().unwrap();
        assert!(
            (total - base.iter().sum::<f64>() * multiplier).abs() < 1e-12,
            "{cost}"
        );
        assert_eq!(cost["cacheWrite"], 0, "{cost}");
    }
}
