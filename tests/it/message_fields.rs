//! The assistant message fields pi 1.6.0 added, per wire API, as the fake provider's recorded
//! streams produce them: `rawStopReason` (the provider's own stop word), `durationMs` and
//! `thinkingLevel` on every finished reply, usage `reasoning`, Anthropic's `cacheWrite1h` (priced
//! at twice the input rate) and `cost.totalFromProvider` (false for a catalog price, true for
//! OpenRouter's billed cost) — in `message_end`, `agent_end.messages` and the session file.
//!
//! Reference (PI_TEST_BIN): every test here passes against pi 1.6.0 as well; the expected values
//! were read from its records with the same fixtures.

use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture};
use crate::support::{Pi, Setup, assistant_messages, prompt, read_jsonl, session_file};

const MODELS: &str = r#"{"providers": {
 "fake-responses": {"baseUrl": "__BASE_URL__/v1", "apiKey": "test-key", "api": "openai-responses",
   "models": [{"id": "fake-gpt-5", "reasoning": true, "input": ["text"],
     "cost": {"input": 1.25, "output": 10, "cacheRead": 0.125, "cacheWrite": 0},
     "contextWindow": 400000, "maxTokens": 128000}]},
 "fake-google": {"baseUrl": "__BASE_URL__/v1beta", "apiKey": "test-key", "api": "google-generative-ai",
   "models": [{"id": "fake-gemini-2.5-flash", "reasoning": true, "input": ["text"],
     "cost": {"input": 0.3, "output": 2.5, "cacheRead": 0.075, "cacheWrite": 0},
     "contextWindow": 1048576, "maxTokens": 65536}]},
 "pim": {"baseUrl": "__BASE_URL__/v1", "api": "pi-messages", "apiKey": "pm-key-123456",
   "models": [{"id": "pm-model", "reasoning": true, "input": ["text"]}]},
 "openrouter": {"baseUrl": "__BASE_URL__/v1", "apiKey": "or-key-123456", "api": "openai-completions",
   "models": [{"id": "fake/or-model", "reasoning": false, "input": ["text"],
     "cost": {"input": 2, "output": 8, "cacheRead": 0.5, "cacheWrite": 0},
     "contextWindow": 128000, "maxTokens": 16384}]}
}}"#;

/// One prompt's replies (message_end), each checked to be the same in `agent_end.messages`.
fn replies(setup: &Setup, prompts: usize) -> Vec<Value> {
    let mut pi = Pi::spawn(setup);
    let mut all = Vec::new();
    for n in 0..prompts {
        let run = prompt(&mut pi, &format!("p{n}"), "Say hello");
        let ended = assistant_messages(&run);
        let agent_end = run.iter().find(|r| r["type"] == "agent_end").unwrap();
        let in_end: Vec<Value> = agent_end["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .cloned()
            .collect();
        assert_eq!(ended, in_end, "message_end and agent_end.messages differ");
        all.extend(ended);
    }
    all
}

/// `durationMs` a whole number, `thinkingLevel` as given; both only on the finished reply.
#[track_caller]
fn assert_timed(message: &Value, level: &str) {
    assert!(message["durationMs"].is_u64(), "durationMs in {message}");
    assert_eq!(message["thinkingLevel"], level, "{message}");
}

#[track_caller]
fn assert_close(actual: &Value, expected: f64) {
    let actual = actual.as_f64().unwrap_or(f64::NAN);
    assert!(
        (actual - expected).abs() <= expected.abs() * 1e-9,
        "{actual} != {expected}"
    );
}

#[test]
fn anthropic_reports_its_stop_word_the_one_hour_cache_writes_and_is_timed() {
    // message_start says 1000 tokens were written to the cache, 400 of them for an hour.
    let text = fixture("anthropic/text.sse")
        .replace(
            "\"cache_creation_input_tokens\":0",
            "\"cache_creation_input_tokens\":1000",
        )
        .replace(
            "\"ephemeral_5m_input_tokens\":0,\"ephemeral_1h_input_tokens\":0",
            "\"ephemeral_5m_input_tokens\":600,\"ephemeral_1h_input_tokens\":400",
        );
    let refusal = fixture("anthropic/text.sse").replace(
        "\"stop_reason\":\"end_turn\"",
        "\"stop_reason\":\"refusal\"",
    );
    let fake = FakeProvider::start(vec![Reply::sse(text), Reply::sse(refusal)]);
    let setup = Setup::anthropic(&fake).with_sessions();
    let mut pi = Pi::spawn(&setup);
    let run = prompt(&mut pi, "p1", "Say hello");
    let message = assistant_messages(&run).remove(0);
    assert_eq!(message["rawStopReason"], "end_turn", "{message}");
    assert_eq!(message["stopReason"], "stop");
    assert_timed(&message, "medium");
    let usage = &message["usage"];
    assert_eq!(usage["cacheWrite"], 1000);
    assert_eq!(usage["cacheWrite1h"], 400);
    assert_eq!(usage["totalTokens"], 2855);
    assert!(usage.get("reasoning").is_none(), "{usage}");
    // fake-claude: input $3, cache write $3.75 per million; an hour's write costs twice the input.
    assert_close(
        &usage["cost"]["cacheWrite"],
        (3.75 * 600.0 + 3.0 * 2.0 * 400.0) / 1e6,
    );
    assert_close(&usage["cost"]["total"], 0.005529 + 0.00018 + 0.00465);
    assert_eq!(usage["cost"]["totalFromProvider"], false);
    // The partial message of message_start has none of the reply's closing fields.
    let start = run
        .iter()
        .find(|r| r["type"] == "message_start" && r["message"]["role"] == "assistant")
        .unwrap();
    for key in ["rawStopReason", "durationMs", "thinkingLevel"] {
        assert!(start["message"].get(key).is_none(), "{key} in {start}");
    }

    // A refusal is an error stop with 1.6.0's words.
    let run = prompt(&mut pi, "p2", "Say hello");
    let refused = assistant_messages(&run).remove(0);
    assert_eq!(refused["stopReason"], "error");
    assert_eq!(refused["rawStopReason"], "refusal");
    assert_eq!(
        refused["errorMessage"],
        "The model refused to complete the request"
    );
    assert_timed(&refused, "medium");

    // The session file keeps the same fields, in 1.6.0's order.
    let file = session_file(&mut pi, "s");
    let text = std::fs::read_to_string(&file).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("\"end_turn\""))
        .expect("the first reply in the session file");
    let entry: Value = serde_json::from_str(line).unwrap();
    assert_eq!(entry["message"], message);
    let at = |key: &str| line.find(&format!("\"{key}\"")).unwrap();
    assert!(at("responseId") < at("rawStopReason"));
    assert!(at("rawStopReason") < at("durationMs"));
    assert!(at("durationMs") < at("thinkingLevel"));
    assert!(at("cost") < at("cacheWrite1h"));
    assert_eq!(read_jsonl(&file).len(), text.lines().count());
}

#[test]
fn a_failed_request_is_timed_but_has_no_stop_word_or_price() {
    let fake = FakeProvider::start(vec![Reply::status(
        400,
        fixture("anthropic/error_400.json"),
        &[("content-type", "application/json")],
    )]);
    let message = replies(&Setup::anthropic(&fake), 1).remove(0);
    assert_eq!(message["stopReason"], "error");
    assert_timed(&message, "medium");
    assert!(message.get("rawStopReason").is_none(), "{message}");
    assert!(message["usage"]["cost"].get("totalFromProvider").is_none());
    assert!(message["usage"].get("cacheWrite1h").is_none());
}

#[test]
fn openai_completions_reports_finish_reason_reasoning_tokens_and_the_clamped_level() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("openai/text.sse"),
        Reply::sse_fixture("openai/max_tokens.sse"),
    ]);
    // fake-gpt cannot think: its level is "off" whatever was asked.
    let setup = Setup::openai(&fake).arg("--thinking").arg("high");
    let message = replies(&setup, 1).remove(0);
    assert_eq!(message["rawStopReason"], "stop", "{message}");
    assert_timed(&message, "off");
    assert_eq!(message["usage"]["reasoning"], 0);
    assert_eq!(message["usage"]["cost"]["totalFromProvider"], false);
    assert!(message["usage"].get("cacheWrite1h").is_none());

    let setup = Setup::new(&fake, "fake-openai", "fake-gpt-reasoning")
        .arg("--thinking")
        .arg("low");
    let message = replies(&setup, 1).remove(0);
    assert_eq!(message["stopReason"], "length");
    assert_eq!(message["rawStopReason"], "length");
    assert_timed(&message, "low");
}

#[test]
fn openrouter_usage_carries_the_billed_cost() {
    let body = fixture("openai/text.sse").replace(
        "\"completion_tokens_details\"",
        "\"cost\":0.0125,\"is_byok\":false,\"completion_tokens_details\"",
    );
    let fake = FakeProvider::start(vec![Reply::sse(body)]);
    let setup = Setup::new(&fake, "openrouter", "fake/or-model").models_json(MODELS);
    let message = replies(&setup, 1).remove(0);
    let cost = &message["usage"]["cost"];
    assert_eq!(cost["total"], 0.0125, "{message}");
    assert_eq!(cost["totalFromProvider"], true);
    // The parts are still the catalog's prices.
    assert_close(&cost["input"], 2.0 * 1843.0 / 1e6);
}

#[test]
fn openai_responses_reports_the_status_and_reasoning_tokens() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("openai-responses/text.sse"),
        Reply::sse_fixture("openai-responses/failed.sse"),
    ]);
    let setup = Setup::new(&fake, "fake-responses", "fake-gpt-5")
        .models_json(MODELS)
        .settings(json!({"retry": {"enabled": false}}));
    let messages = replies(&setup, 2);
    assert_eq!(messages[0]["rawStopReason"], "completed", "{}", messages[0]);
    assert_eq!(messages[0]["usage"]["reasoning"], 64);
    assert_eq!(messages[0]["usage"]["cost"]["totalFromProvider"], false);
    assert_timed(&messages[0], "medium");
    assert_eq!(messages[1]["stopReason"], "error");
    assert_eq!(messages[1]["rawStopReason"], "failed", "{}", messages[1]);
    assert_timed(&messages[1], "medium");
}

#[test]
fn google_reports_the_finish_reason_and_names_it_for_an_error_stop() {
    let fake = FakeProvider::start(vec![
        Reply::sse_fixture("google/text.sse"),
        Reply::sse_fixture("google/safety.sse"),
    ]);
    let setup = Setup::new(&fake, "fake-google", "fake-gemini-2.5-flash")
        .models_json(MODELS)
        .settings(json!({"retry": {"enabled": false}}));
    let messages = replies(&setup, 2);
    assert_eq!(messages[0]["rawStopReason"], "STOP", "{}", messages[0]);
    assert_eq!(messages[0]["usage"]["reasoning"], 57);
    assert_timed(&messages[0], "medium");
    assert_eq!(messages[1]["stopReason"], "error");
    assert_eq!(messages[1]["rawStopReason"], "SAFETY");
    assert_eq!(messages[1]["errorMessage"], "Provider stopped with: SAFETY");
    assert_eq!(messages[1]["usage"]["reasoning"], 0);
}

#[test]
fn pi_messages_keeps_the_servers_usage_and_cost() {
    let fake = FakeProvider::start(vec![Reply::sse_fixture("pi-messages/text.sse")]);
    let setup = Setup::new(&fake, "pim", "pm-model").models_json(MODELS);
    let message = replies(&setup, 1).remove(0);
    assert_eq!(
        message["usage"],
        json!({"input": 120, "output": 8, "cacheRead": 4, "cacheWrite": 0, "totalTokens": 132,
               "cost": {"input": 0.00036, "output": 0.00012, "cacheRead": 0, "cacheWrite": 0,
                        "total": 0.00048}}),
        "{message}"
    );
    assert!(message.get("rawStopReason").is_none());
    assert_timed(&message, "medium");
}

/// ChatGPT Codex says whether the model ended its turn: pi 1.6.0 keeps it as `endTurn`, after
/// `responseId` and before `rawStopReason`; OpenAI's own Responses API gets no such field.
/// Passes against 1.6.0 too (its Codex bodies are zstd-compressed; the fake decodes them).
#[test]
fn codex_keeps_whether_the_model_ended_its_turn() {
    let token = crate::support::codex_token("acct_42");
    let done = |end_turn: &str| {
        fixture("openai-responses/text.sse").replace(
            "\"status\":\"completed\",\"background\"",
            &format!("\"status\":\"completed\",\"end_turn\":{end_turn},\"background\""),
        )
    };
    let fake = FakeProvider::start(vec![Reply::sse(done("false")), Reply::sse(done("true"))]);
    let login = json!({"openai-codex": {"type": "oauth", "access": token, "refresh": "r-123456",
        "expires": 4102444800000u64, "accountId": "acct_42"}});
    let setup = Setup::new(&fake, "openai-codex", "gpt-5.2")
        .models_json(r#"{"providers": {"openai-codex": {"baseUrl": "__BASE_URL__/backend-api"}}}"#)
        .file("../agent/auth.json", &login.to_string())
        // 1.6.0 would try a WebSocket first (and record its failure in `diagnostics`).
        .settings(json!({"transport": "sse"}));
    let messages = replies(&setup, 2);
    assert_eq!(messages[0]["endTurn"], false, "{}", messages[0]);
    assert_eq!(messages[1]["endTurn"], true);
    let text = messages[0].to_string();
    let at = |key: &str| text.find(&format!("\"{key}\"")).unwrap();
    assert!(at("responseId") < at("endTurn") && at("endTurn") < at("rawStopReason"));

    let fake = FakeProvider::start(vec![Reply::sse(done("false"))]);
    let setup = Setup::new(&fake, "fake-responses", "fake-gpt-5").models_json(MODELS);
    let message = replies(&setup, 1).remove(0);
    assert!(message.get("endTurn").is_none(), "{message}");
}
