//! The OpenAI Responses and Gemini wire APIs end to end: a text turn, a tool-call round trip and
//! an HTTP error per API, through the real binary against the fake provider serving recorded-shape
//! transcripts (`fixtures/openai-responses/`, `fixtures/google/`). The models come from a
//! models.json of this file's own (`fake-responses`, `fake-google`).
//!
//! Reference (PI_TEST_BIN): every test here passes; the assertions only read records that 0.73.1
//! and the seed share (message_end/turn_end/tool events and the requests the fake recorded). One
//! known difference is not asserted: pi emits a trailing "\n\n" thinking delta after the last
//! reasoning summary part, which pi-rs holds back so the deltas add up to the final text.

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::support::{Pi, Setup, assistant_messages, prompt};

const MODELS: &str = r#"{
  "providers": {
    "fake-responses": {
      "baseUrl": "__BASE_URL__/v1",
      "apiKey": "test-key",
      "api": "openai-responses",
      "models": [
        {
          "id": "fake-gpt-5",
          "name": "Fake GPT-5",
          "reasoning": true,
          "input": ["text", "image"],
          "cost": { "input": 1.25, "output": 10, "cacheRead": 0.125, "cacheWrite": 0 },
          "contextWindow": 400000,
          "maxTokens": 128000
        }
      ]
    },
    "fake-google": {
      "baseUrl": "__BASE_URL__/v1beta",
      "apiKey": "test-key",
      "api": "google-generative-ai",
      "models": [
        {
          "id": "fake-gemini-2.5-flash",
          "name": "Fake Gemini",
          "reasoning": true,
          "input": ["text", "image"],
          "cost": { "input": 0.3, "output": 2.5, "cacheRead": 0.075, "cacheWrite": 0 },
          "contextWindow": 1048576,
          "maxTokens": 65536
        }
      ]
    }
  }
}"#;

fn responses(fake: &FakeProvider) -> Setup {
    Setup::new(fake, "fake-responses", "fake-gpt-5").models_json(MODELS)
}

fn google(fake: &FakeProvider) -> Setup {
    Setup::new(fake, "fake-google", "fake-gemini-2.5-flash").models_json(MODELS)
}

/// Concatenated `<kind>_delta` texts of `run`.
fn deltas(run: &[Value], kind: &str) -> String {
    run.iter()
        .filter(|r| {
            r["type"] == "message_update"
                && r["assistantMessageEvent"]["type"] == format!("{kind}_delta")
        })
        .filter_map(|r| r["assistantMessageEvent"]["delta"].as_str())
        .collect()
}

/// Token counts exactly; costs (reference values) up to float parsing: serde_json's default
/// parser may land one ulp off the printed value.
#[track_caller]
fn assert_usage(usage: &Value, tokens: [u64; 5], costs: [f64; 5]) {
    let token_keys = ["input", "output", "cacheRead", "cacheWrite", "totalTokens"];
    for (key, expected) in token_keys.iter().zip(tokens) {
        assert_eq!(usage[*key], expected, "usage.{key} in {usage}");
    }
    let cost_keys = ["input", "output", "cacheRead", "cacheWrite", "total"];
    for (key, expected) in cost_keys.iter().zip(costs) {
        let actual = usage["cost"][*key].as_f64().unwrap_or(f64::NAN);
        assert!(
            (actual - expected).abs() <= expected.abs() * 1e-12,
            "usage.cost.{key} = {actual}, expected {expected}"
        );
    }
}

#[test]
fn responses_text_turn_keeps_reasoning_and_message_ids() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("openai-responses/text.sse")]);
    let mut pi = Pi::spawn(&responses(&fake));
    let run = prompt(&mut pi, "p1", "Say hello");

    let messages = assistant_messages(&run);
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    let reasoning_item = r#"{"id":"rs_0a1b2c3d4e5f60718293a4b5c6d7e8f9aa","type":"reasoning","encrypted_content":"gAAAAABpVGVzdEVuY3J5cHRlZFJlYXNvbmluZ0Jsb2JPbmU=","summary":[{"type":"summary_text","text":"**Greeting the user**\n\nThe user wants a short hello."},{"type":"summary_text","text":"Keep it brief."}]}"#;
    assert_eq!(
        message["content"],
        json!([
            {"type": "thinking",
             "thinking": "**Greeting the user**\n\nThe user wants a short hello.\n\nKeep it brief.",
             "thinkingSignature": reasoning_item},
            {"type": "text", "text": "Hello from the fake responses API.",
             "textSignature": "{\"v\":1,\"id\":\"msg_0a1b2c3d4e5f60718293a4b5c6d7e8f9bb\"}"}
        ])
    );
    assert_eq!(message["api"], "openai-responses");
    assert_eq!(message["provider"], "fake-responses");
    assert_eq!(message["model"], "fake-gpt-5");
    assert_eq!(message["stopReason"], "stop");
    assert_eq!(
        message["responseId"],
        "resp_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
    );
    assert_usage(
        &message["usage"],
        [819, 85, 1024, 0, 1928],
        [
            0.0010237500000000001,
            0.0008500000000000001,
            0.000128,
            0.0,
            0.00200175,
        ],
    );
    assert_eq!(deltas(&run, "text"), "Hello from the fake responses API.");
    assert!(
        deltas(&run, "thinking").starts_with(
            "**Greeting the user**\n\nThe user wants a short hello.\n\nKeep it brief."
        )
    );

    let requests = fake.wait_for_requests(1, pi.timeout());
    let request = &requests[0];
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(request.header("authorization"), Some("Bearer test-key"));
    let session_id = request.header("session-id").expect("session-id header");
    assert!(!session_id.is_empty());
    assert_eq!(request.header("x-client-request-id"), Some(session_id));
    let body = &request.body;
    assert_eq!(body["model"], "fake-gpt-5");
    assert_eq!(body["stream"], true);
    assert_eq!(body["store"], false);
    assert_eq!(body["prompt_cache_key"], session_id);
    // pi 1.6.0: the model's maxTokens, which its context window holds.
    assert_eq!(body["max_output_tokens"], 128000);
    assert_eq!(
        body["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["input"][0]["role"], "developer");
    assert_eq!(
        body["input"][1],
        json!({"role": "user", "content": [{"type": "input_text", "text": "Say hello"}]})
    );
    let tool = &body["tools"].as_array().expect("tools")[0];
    assert_eq!(tool["type"], "function");
    // pi 1.6.0 sends `strict` only to a model whose compat says `supportsStrictMode`.
    assert!(tool.get("strict").is_none(), "{tool}");
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "model",
            "input",
            "stream",
            "prompt_cache_key",
            "store",
            "max_output_tokens",
            "tools",
            "reasoning",
            "include"
        ]
    );
    fake.finish();
}

#[test]
fn responses_tool_round_trip_replays_items() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("openai-responses/tool_bash.sse"),
        Reply::sse_fixture("openai-responses/text_after_tool.sse"),
    ]);
    let mut pi = Pi::spawn(&responses(&fake));
    let run = prompt(&mut pi, "p1", "Run echo hi");

    let composite = "call_Xk2pQ9sLr7TbW4vN1mZc8Hf|fc_1b2c3d4e5f60718293a4b5c6d7e8f90add";
    let messages = assistant_messages(&run);
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["stopReason"], "toolUse");
    assert_eq!(
        messages[0]["content"][1],
        json!({"type": "toolCall", "id": composite, "name": "bash",
               "arguments": {"command": "echo hi"}})
    );
    assert_eq!(messages[0]["content"][0]["thinking"], "");
    let end = run
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool_execution_end");
    assert_eq!(end["toolCallId"], composite);
    assert_eq!(end["isError"], false);
    assert_eq!(messages[1]["stopReason"], "stop");
    assert_eq!(
        messages[1]["content"],
        json!([{"type": "text", "text": "The command printed hi.",
                "textSignature": "{\"v\":1,\"id\":\"msg_3d4e5f60718293a4b5c6d7e8f90a1b2cff\"}"}])
    );

    let requests = fake.wait_for_requests(2, pi.timeout());
    let input = requests[1].body["input"].as_array().expect("input").clone();
    assert_eq!(
        input[1..],
        [
            json!({"role": "user", "content": [{"type": "input_text", "text": "Run echo hi"}]}),
            json!({"id": "rs_1b2c3d4e5f60718293a4b5c6d7e8f90acc", "type": "reasoning",
                   "encrypted_content": "gAAAAABpVG9vbFR1cm5FbmNyeXB0ZWQ=", "summary": []}),
            json!({"type": "function_call", "id": "fc_1b2c3d4e5f60718293a4b5c6d7e8f90add",
                   "call_id": "call_Xk2pQ9sLr7TbW4vN1mZc8Hf", "name": "bash",
                   "arguments": "{\"command\":\"echo hi\"}"}),
            json!({"type": "function_call_output", "call_id": "call_Xk2pQ9sLr7TbW4vN1mZc8Hf",
                   "output": "hi\n"}),
        ]
    );
    fake.finish();
}

/// pi 1.6.0's text: `<provider> API error (<status>): ` and the body's error object. Passes
/// against 1.6.0 too.
#[test]
fn responses_http_error_text_is_pis() {
    let fake = FakeProvider::start(vec![Reply::status(
        400,
        fixture("openai-responses/error_400.json"),
        &[],
    )]);
    let mut pi = Pi::spawn(&responses(&fake));
    let run = prompt(&mut pi, "p1", "x");
    let messages = assistant_messages(&run);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["stopReason"], "error");
    let error: Value = serde_json::from_str(&fixture("openai-responses/error_400.json")).unwrap();
    assert_eq!(
        messages[0]["errorMessage"],
        format!("fake-responses API error (400): {}", error["error"])
    );
    assert_eq!(messages[0]["content"], json!([]));
    fake.finish();
}

#[test]
fn google_text_turn_keeps_thoughts_and_signature() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("google/text.sse")]);
    let mut pi = Pi::spawn(&google(&fake));
    let run = prompt(&mut pi, "p1", "Say hello");

    let messages = assistant_messages(&run);
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(
        message["content"],
        json!([
            {"type": "thinking", "thinking": "**Planning a greeting**\n\nThe user wants a short hello."},
            {"type": "text", "text": "Hello from the fake Gemini API.",
             "textSignature": "CiQB0e2Kb3Rlc3RTaWduYXR1cmVGb3JUZXh0UGFydA=="}
        ])
    );
    assert_eq!(message["api"], "google-generative-ai");
    assert_eq!(message["stopReason"], "stop");
    assert_eq!(message["responseId"], "kFdnaJ-xLNWTz7IPqY2x4Qc");
    assert!(message.get("responseModel").is_none(), "{message}");
    assert_usage(
        &message["usage"],
        [819, 66, 1024, 0, 1909],
        [
            0.0002457,
            0.00016500000000000003,
            7.68e-05,
            0.0,
            0.0004875000000000001,
        ],
    );
    assert_eq!(
        deltas(&run, "thinking"),
        "**Planning a greeting**\n\nThe user wants a short hello."
    );
    assert_eq!(deltas(&run, "text"), "Hello from the fake Gemini API.");

    let requests = fake.wait_for_requests(1, pi.timeout());
    let request = &requests[0];
    assert_eq!(
        request.path,
        "/v1beta/models/fake-gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(request.header("x-goog-api-key"), Some("test-key"));
    assert_eq!(request.header("authorization"), None);
    let body = &request.body;
    assert_eq!(
        body["contents"],
        json!([{"parts": [{"text": "Say hello"}], "role": "user"}])
    );
    assert_eq!(body["systemInstruction"]["role"], "user");
    assert!(body["systemInstruction"]["parts"][0]["text"].is_string());
    let declaration = &body["tools"][0]["functionDeclarations"][0];
    assert!(
        declaration["parametersJsonSchema"].is_object(),
        "{declaration}"
    );
    assert_eq!(
        body["generationConfig"],
        json!({"maxOutputTokens": 65536,
               "thinkingConfig": {"includeThoughts": true, "thinkingBudget": 8192}})
    );
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["contents", "systemInstruction", "tools", "generationConfig"]
    );
    fake.finish();
}

#[test]
fn google_tool_round_trip_sends_function_responses() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("google/tool_bash.sse"),
        Reply::sse_fixture("google/text_after_tool.sse"),
    ]);
    let mut pi = Pi::spawn(&google(&fake));
    let run = prompt(&mut pi, "p1", "Run echo hi");

    let messages = assistant_messages(&run);
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["stopReason"], "toolUse");
    let call = &messages[0]["content"][0];
    assert_eq!(call["type"], "toolCall");
    assert_eq!(call["name"], "bash");
    assert_eq!(call["arguments"], json!({"command": "echo hi"}));
    assert_eq!(
        call["thoughtSignature"],
        "CiQB0e2Kb0Z1bmN0aW9uQ2FsbFNpZ25hdHVyZQ=="
    );
    // No id from Gemini: `<name>_<epoch ms>_<counter>`.
    let id = call["id"].as_str().expect("id");
    let parts: Vec<&str> = id.split('_').collect();
    assert_eq!(parts.len(), 3, "{id}");
    assert_eq!(parts[0], "bash");
    assert!(
        parts[1]
            .parse::<u64>()
            .is_ok_and(|ms| ms > 1_700_000_000_000),
        "{id}"
    );
    assert!(parts[2].parse::<u64>().is_ok(), "{id}");
    let end = run
        .iter()
        .find(|r| r["type"] == "tool_execution_end")
        .expect("tool_execution_end");
    assert_eq!(end["toolCallId"], id);
    assert_eq!(messages[1]["content"][0]["text"], "The command printed hi.");

    let requests = fake.wait_for_requests(2, pi.timeout());
    assert_eq!(
        requests[1].body["contents"],
        json!([
            {"parts": [{"text": "Run echo hi"}], "role": "user"},
            {"parts": [{"functionCall": {"args": {"command": "echo hi"}, "name": "bash"},
                        "thoughtSignature": "CiQB0e2Kb0Z1bmN0aW9uQ2FsbFNpZ25hdHVyZQ=="}],
             "role": "model"},
            {"parts": [{"functionResponse": {"name": "bash", "response": {"output": "hi\n"}}}],
             "role": "user"}
        ])
    );
    fake.finish();
}

#[test]
fn google_http_error_is_the_body_without_status() {
    let fake = FakeProvider::start(vec![Reply::status(
        400,
        fixture("google/error_400.json"),
        &[],
    )]);
    let mut pi = Pi::spawn(&google(&fake));
    let run = prompt(&mut pi, "p1", "x");
    let messages = assistant_messages(&run);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["stopReason"], "error");
    assert_eq!(
        messages[0]["errorMessage"],
        r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}]}}"#
    );
    fake.finish();
}
