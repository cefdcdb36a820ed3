//! The Azure OpenAI Responses and Mistral wire APIs end to end through the binary, against the
//! fake provider speaking their real stream formats (Codex: `oauth.rs`, which needs a login).
//! The request bodies match what pi 0.73.1 sent to a local server (see the unit tests of
//! `src/provider/azure_responses.rs` and `mistral.rs`).

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::support::{Pi, Setup, is_reference};

fn assistant_messages(run: &[Value]) -> Vec<Value> {
    run.iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "assistant")
        .map(|r| r["message"].clone())
        .collect()
}

#[test]
fn azure_uses_the_deployment_api_version_and_api_key_header() {
    if is_reference() {
        return;
    }
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
    let setup = Setup::new(&fake, "azure-openai-responses", "gpt-5.2")
        .models_json(r#"{"providers": {}}"#)
        .env("AZURE_OPENAI_API_KEY", "azure-key-123456")
        .env(
            "AZURE_OPENAI_BASE_URL",
            &format!("{}/openai/v1", fake.base_url()),
        )
        .env("AZURE_OPENAI_DEPLOYMENT_NAME_MAP", "gpt-5.2=prod-gpt52")
        .env("AZURE_OPENAI_API_VERSION", "2025-04-01-preview");
    let mut pi = Pi::spawn(&setup);
    pi.send(json!({"id": "p", "type": "prompt", "message": "Say hello"}));
    let run = pi.records_until_event("agent_end");
    let messages = assistant_messages(&run);
    assert_eq!(messages[0]["stopReason"], "stop", "{}", messages[0]);
    assert_eq!(messages[0]["api"], "azure-openai-responses");
    assert_eq!(
        messages[0]["content"][1]["text"],
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

#[test]
fn mistral_streams_thinking_text_and_a_tool_call_and_sends_the_result_back() {
    if is_reference() {
        return;
    }
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
