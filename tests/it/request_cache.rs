//! The kept request prefix (`src/provider/request_cache.rs`) changes no byte the provider gets:
//! one conversation — tool calls, a manual compaction, a fork to an earlier entry, a switch to
//! another provider and back — is run twice, with the cache and with `PI_TEST_NO_REQUEST_CACHE=1`,
//! and every request body must be the same (once each run's own paths and ids are masked). A
//! second conversation does the same on the OpenAI Chat Completions fake: thinking, tool calls, an
//! image from the user and one from a tool, a switch to a model without images and back. A third
//! runs Anthropic with `compat.supportsMidConvoEffort` (an effort marker closes every request).

use serde_json::json;

use crate::fake_provider::{FakeProvider, RecordedRequest, Reply};
use crate::sse::{self, OpenAiStream};
use crate::support::{Pi, Setup, prompt, state, text_reply, tool_reply};

fn script() -> Vec<Reply> {
    vec![
        text_reply("answer one"),
        tool_reply("toolu_cache_1", "bash", json!({"command": "echo cached"})),
        text_reply("ran it"),
        text_reply("answer three"),
        text_reply("answer four"),
        // The manual compaction's summaries: the history, and the turn it cuts through. Both are
        // asked at once, so they may arrive in either order: the same text makes that moot.
        text_reply("## Goal\nSummary of the early turns."),
        text_reply("## Goal\nSummary of the early turns."),
        text_reply("answer five"),
        // After the fork.
        text_reply("answer six"),
        Reply::sse(sse::openai_text(&["answer seven"])),
        text_reply("answer eight"),
        text_reply("answer nine"),
    ]
}

/// Runs the conversation; returns each request body with the run's own paths and ids masked.
/// `threads`: the Anthropic provider says `supportsMessageThreads` (its requests continue a
/// message thread with only the new messages).
fn bodies(cache: bool, threads: bool) -> Vec<String> {
    let fake = FakeProvider::start(script());
    let mut setup = Setup::anthropic(&fake)
        .with_sessions()
        .settings(json!({"compaction": {"keepRecentTokens": 10}}));
    if threads {
        let models = crate::fake_provider::fixture("models.json").replacen(
            "\"api\": \"anthropic-messages\",",
            "\"api\": \"anthropic-messages\", \"compat\": {\"supportsMessageThreads\": true},",
            1,
        );
        setup = setup.models_json(&models);
    }
    if !cache {
        setup = setup.env("PI_TEST_NO_REQUEST_CACHE", "1");
    }
    let mut pi = Pi::spawn(&setup);
    let mut masks = vec![
        pi.cwd().display().to_string(),
        pi.agent_dir().display().to_string(),
    ];
    prompt(&mut pi, "p1", "one");
    prompt(&mut pi, "p2", "two: run the tool");
    prompt(&mut pi, "p3", "three");
    prompt(&mut pi, "p4", "four");
    let compacted = pi.command("c1", "compact", json!({}));
    assert_eq!(compacted["success"], true, "{compacted}");
    prompt(&mut pi, "p5", "five");
    masks.push(
        state(&mut pi, "s1")["sessionId"]
            .as_str()
            .unwrap()
            .to_string(),
    );

    // Back to before "five": the context is the compacted one without the last turn.
    let tree = pi.command("t1", "get_tree", json!({}));
    let five = find_user_entry(&tree["data"], "five").expect("the entry of prompt five");
    let forked = pi.command("f1", "fork", json!({"entryId": five}));
    assert_eq!(forked["success"], true, "{forked}");
    masks.push(
        state(&mut pi, "s2")["sessionId"]
            .as_str()
            .unwrap()
            .to_string(),
    );
    prompt(&mut pi, "p6", "six");

    switch_model(&mut pi, "m1", "fake-openai", "fake-gpt");
    prompt(&mut pi, "p7", "seven");
    switch_model(&mut pi, "m2", "fake-anthropic", "fake-claude");
    prompt(&mut pi, "p8", "eight");
    prompt(&mut pi, "p9", "nine");

    let requests = fake.requests();
    assert_eq!(requests.len(), script().len());
    let mut bodies: Vec<String> = masked_bodies(&requests, &masks);
    // The two summary requests (after the five turn requests) in a fixed order.
    bodies[SUMMARIES].sort();
    bodies
}

/// `set_model` to `provider`/`model`, which must succeed.
fn switch_model(pi: &mut Pi, id: &str, provider: &str, model: &str) {
    let switched = pi.command(
        id,
        "set_model",
        json!({"provider": provider, "modelId": model}),
    );
    assert_eq!(switched["success"], true, "{switched}");
}

/// Each request's body with the run-specific values (`masks`, e.g. session ids) replaced.
fn masked_bodies(requests: &[RecordedRequest], masks: &[String]) -> Vec<String> {
    requests
        .iter()
        .map(|request| {
            let mut body = String::from_utf8(request.raw_body.clone()).expect("UTF-8 body");
            for mask in masks {
                body = body.replace(mask.as_str(), "<masked>");
            }
            body
        })
        .collect()
}

/// Where the compaction's two requests are in the script.
const SUMMARIES: std::ops::Range<usize> = 5..7;

/// The id of the user entry whose text is `text`, searching `get_tree`'s nodes.
fn find_user_entry(node: &serde_json::Value, text: &str) -> Option<String> {
    if let Some(items) = node.as_array() {
        return items.iter().find_map(|item| find_user_entry(item, text));
    }
    node.as_object()?;
    let entry = &node["entry"];
    if entry["message"]["role"] == "user" && entry["message"]["content"][0]["text"] == text {
        return entry["id"].as_str().map(str::to_string);
    }
    ["children", "tree"]
        .iter()
        .find_map(|key| find_user_entry(&node[*key], text))
}

/// With Anthropic message threads the bodies are the same too: a continue is cut from the whole
/// request whether its start came from the kept prefix or not.
#[test]
fn thread_request_bodies_are_the_same_with_and_without_the_kept_prefix() {
    let cached = bodies(true, true);
    let uncached = bodies(false, true);
    for (index, (with, without)) in cached.iter().zip(&uncached).enumerate() {
        assert_eq!(with, without, "request {index} differs");
    }
    let continues = cached
        .iter()
        .filter(|body| body.contains("\"thread\":{\"type\":\"continue\""))
        .count();
    assert!(continues >= 4, "{continues} continues: {cached:?}");
}

#[test]
fn request_bodies_are_the_same_with_and_without_the_kept_prefix() {
    let cached = bodies(true, false);
    let uncached = bodies(false, false);
    for (index, (with, without)) in cached.iter().zip(&uncached).enumerate() {
        assert_eq!(with, without, "request {index} differs");
    }
    // The last request carries the whole conversation since the compaction, in order.
    let last: serde_json::Value = serde_json::from_str(cached.last().unwrap()).unwrap();
    let texts: Vec<String> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].to_string())
        .collect();
    let joined = texts.join("\n");
    for expected in ["six", "answer seven", "eight", "answer eight", "nine"] {
        assert!(joined.contains(expected), "{expected} missing: {joined}");
    }
    assert!(
        !joined.contains("answer five"),
        "the fork left five out: {joined}"
    );
}

/// A 1x1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

fn openai_script() -> Vec<Reply> {
    let thought = |thinking: &str, text: &str| {
        Reply::sse(
            OpenAiStream::new()
                .reasoning(&[thinking])
                .text(&[text])
                .finish("stop"),
        )
    };
    let call = |id: &str, tool: &str, args: serde_json::Value| {
        Reply::sse(
            OpenAiStream::new()
                .reasoning(&["a tool will do"])
                .tool_call(id, tool, &[&args.to_string()])
                .finish("tool_calls"),
        )
    };
    vec![
        thought("first thoughts", "answer one"),
        call("call_cache_1", "bash", json!({"command": "echo cached"})),
        thought("it ran", "ran it"),
        thought("a picture", "answer three"),
        call("call_cache_2", "read", json!({"path": "pixel.png"})),
        Reply::sse(sse::openai_text(&["a pixel, read"])),
        Reply::sse(sse::openai_text(&["answer five"])),
        // On fake-gpt (no images, no reasoning).
        Reply::sse(sse::openai_text(&["answer six"])),
        Reply::sse(sse::openai_text(&["answer seven"])),
        // Back on fake-gpt-reasoning.
        thought("last thoughts", "answer eight"),
        Reply::sse(sse::openai_text(&["answer nine"])),
    ]
}

/// The OpenAI conversation; returns each request body with the run's own paths masked.
fn openai_bodies(cache: bool) -> Vec<String> {
    use base64::Engine;
    let fake = FakeProvider::start(openai_script());
    let mut setup = Setup::new(&fake, "fake-openai", "fake-gpt-reasoning");
    if !cache {
        setup = setup.env("PI_TEST_NO_REQUEST_CACHE", "1");
    }
    let mut pi = Pi::spawn(&setup);
    std::fs::write(pi.cwd().join("pixel.png"), PNG).expect("write the image");
    let masks = [
        pi.cwd().display().to_string(),
        pi.agent_dir().display().to_string(),
    ];
    let level = pi.command("l1", "set_thinking_level", json!({"level": "high"}));
    assert_eq!(level["success"], true, "{level}");
    prompt(&mut pi, "p1", "one");
    prompt(&mut pi, "p2", "two: run the tool");
    let image = json!({"type": "image", "mimeType": "image/png",
        "data": base64::engine::general_purpose::STANDARD.encode(PNG)});
    pi.send(
        json!({"id": "p3", "type": "prompt", "message": "three: this picture",
        "images": [image]}),
    );
    pi.records_until_event("agent_end");
    assert_eq!(pi.response_for("p3")["success"], true);
    prompt(&mut pi, "p4", "four: read pixel.png");
    prompt(&mut pi, "p5", "five");
    switch_model(&mut pi, "m1", "fake-openai", "fake-gpt");
    prompt(&mut pi, "p6", "six");
    prompt(&mut pi, "p7", "seven");
    switch_model(&mut pi, "m2", "fake-openai", "fake-gpt-reasoning");
    prompt(&mut pi, "p8", "eight");
    prompt(&mut pi, "p9", "nine");

    let requests = fake.requests();
    assert_eq!(requests.len(), openai_script().len());
    masked_bodies(&requests, &masks)
}

#[test]
fn openai_request_bodies_are_the_same_with_and_without_the_kept_prefix() {
    let cached = openai_bodies(true);
    let uncached = openai_bodies(false);
    for (index, (with, without)) in cached.iter().zip(&uncached).enumerate() {
        assert_eq!(with, without, "request {index} differs");
    }
    // The last request holds the whole conversation: thinking, both images, the tool traffic.
    let last: serde_json::Value = serde_json::from_str(cached.last().unwrap()).unwrap();
    let joined = last["messages"].to_string();
    for expected in [
        "first thoughts",
        "call_cache_1",
        "echo cached",
        "this picture",
        "data:image/png;base64,",
        "Attached image(s) from tool result:",
        "answer six",
        "last thoughts",
        "nine",
    ] {
        assert!(joined.contains(expected), "{expected} missing: {joined}");
    }
    // pi 1.6.0 gives a local Chat Completions server `system` (developer is OpenAI's own).
    assert_eq!(last["messages"][0]["role"], "system", "{last}");
}

/// An Anthropic conversation with `compat.supportsMidConvoEffort`, four turns with a thinking
/// change in between; the request bodies, masked.
fn effort_marker_bodies(cache: bool) -> Vec<String> {
    let fake = FakeProvider::start(
        (1..=4)
            .map(|n| text_reply(&format!("answer {n}")))
            .collect(),
    );
    let models = json!({"providers": {"fx": {"baseUrl": "__BASE_URL__", "api": "anthropic-messages",
        "apiKey": "fx-key-123456", "models": [{"id": "fx-claude", "reasoning": true,
            "input": ["text"], "compat": {"supportsMidConvoEffort": true,
                "forceAdaptiveThinking": true}}]}}});
    let mut setup = Setup::new(&fake, "fx", "fx-claude")
        .models_json(&models.to_string())
        .arg("--thinking")
        .arg("high");
    if !cache {
        setup = setup.env("PI_TEST_NO_REQUEST_CACHE", "1");
    }
    let mut pi = Pi::spawn(&setup);
    let masks = vec![pi.cwd().display().to_string()];
    prompt(&mut pi, "p1", "one");
    prompt(&mut pi, "p2", "two");
    let changed = pi.command("t", "set_thinking_level", json!({"level": "low"}));
    assert_eq!(changed["success"], true, "{changed}");
    prompt(&mut pi, "p3", "three");
    prompt(&mut pi, "p4", "four");
    masked_bodies(&fake.requests(), &masks)
}

/// With `supportsMidConvoEffort` every Anthropic request ends with its own effort marker and
/// each earlier reply is preceded by the level it was given: the kept prefix leaves the closing
/// marker out, and every body is the one the whole list encodes to (the markers as pi 1.6.0
/// sends them: passes against it too).
#[test]
fn effort_marker_bodies_are_the_same_with_and_without_the_kept_prefix() {
    let cached = effort_marker_bodies(true);
    let uncached = effort_marker_bodies(false);
    assert_eq!(cached.len(), 4);
    for (index, (with, without)) in cached.iter().zip(&uncached).enumerate() {
        assert_eq!(with, without, "request {index} differs");
    }
    let last: serde_json::Value = serde_json::from_str(&cached[3]).unwrap();
    let efforts: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["output_config"]["effort"].as_str())
        .collect();
    assert_eq!(efforts, ["high", "high", "low", "low"], "{last}");
}
