//! Images as pi 1.6.0 sends them: an image the `read` tool returns and the images of a prompt
//! are scaled into the model's input limits (default 2000×2000 px and 4.5 MiB of base64, or
//! models.json `inputLimits.images.resize`), re-encoded as the smaller of PNG and JPEG, with
//! 1.6.0's coordinate note; the fake provider's request bodies show what the model gets.
//!
//! The same holds for the images of `steer` and `follow_up` messages (made ready at delivery),
//! for BMP images in prompts (converted to PNG), and for the images an MCP server's or an
//! extension's tool returns (scaled after the `tool_result` hook, the note in a text block right
//! after the image).
//!
//! Reference: pi 1.6.0 gives the same notes and sizes for these images (the queue and MCP tests
//! pass with `PI_TEST_BIN=<pi 1.6.0>`); 0.73.1 sends images unscaled, so these tests fail there
//! by design.

use std::io::Cursor;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::fake_provider::{FakeProvider, Reply, fixture_path};
use crate::support::{
    GATED_COMMAND, Pi, Setup, Workspace, open_gate, prompt, text_reply, tool_ends, tool_script,
    write_mcp_json,
};

/// A `width`×`height` PNG with a smooth pattern (small file, many pixels).
pub(crate) fn png(width: u32, height: u32) -> Vec<u8> {
    let pixels = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([
            (x * 255 / width) as u8,
            (y * 255 / height) as u8,
            ((x + y) * 255 / (width + height)) as u8,
        ])
    });
    let mut out = Vec::new();
    image::DynamicImage::ImageRgb8(pixels)
        .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png)
        .expect("encode png");
    out
}

/// A small BMP file (`width`×`height`).
fn bmp(width: u32, height: u32) -> Vec<u8> {
    let pixels = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([x as u8 * 40, y as u8 * 60, 90])
    });
    let mut out = Vec::new();
    image::DynamicImage::ImageRgb8(pixels)
        .write_to(&mut Cursor::new(&mut out), image::ImageFormat::Bmp)
        .expect("encode bmp");
    out
}

/// The user messages of a run (`message_end`), in order.
fn user_messages(run: &[Value]) -> Vec<Value> {
    run.iter()
        .filter(|r| r["type"] == "message_end" && r["message"]["role"] == "user")
        .map(|r| r["message"].clone())
        .collect()
}

/// Width and height of a base64 image.
fn dimensions(data: &str) -> (u32, u32) {
    let bytes = STANDARD.decode(data).expect("base64");
    let image = image::load_from_memory(&bytes).expect("an image");
    (image.width(), image.height())
}

/// Every base64 image payload anywhere in a request body (Anthropic `source.data`).
fn body_images(body: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut stack = vec![body];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                if map.get("type") == Some(&json!("base64"))
                    && let (Some(data), Some(mime)) =
                        (map["data"].as_str(), map["media_type"].as_str())
                {
                    found.push((mime.to_string(), data.to_string()));
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    found
}

/// A 2400×960 PNG read by the model comes back scaled to 2000×800 with the note; the next
/// request carries that image, not the original. (Any width over the 2000 default proves it; a
/// larger original only costs decode and scaling time, seconds in a debug build under load.)
#[test]
fn read_of_a_large_png_sends_it_scaled_with_the_coordinate_note() {
    let workspace = Workspace::new();
    let original = png(2400, 960);
    std::fs::write(workspace.cwd().join("big.png"), &original).unwrap();
    let fake = FakeProvider::start(tool_script(&[("read", json!({"path": "big.png"}))]));
    let mut setup = Setup::anthropic(&fake).arg("--tools").arg("read");
    // Decoding, scaling and encoding twice is CPU work: on a loaded machine a debug build takes
    // many times its ~1 s.
    setup.wait_limit = Some(Duration::from_secs(120));
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let run = prompt(&mut pi, "p1", "Look at big.png");
    let ends = tool_ends(run, 1);
    let content = &ends[0]["result"]["content"];
    let mime = content[1]["mimeType"].as_str().expect("an image block");
    assert_eq!(
        content[0]["text"],
        format!(
            "Read image file [{mime}]\n[Image: original 2400x960, displayed at 2000x800. \
             Multiply coordinates by 1.20 to map to original image.]"
        )
    );
    let data = content[1]["data"].as_str().unwrap();
    assert_eq!(dimensions(data), (2000, 800));
    assert!(data.len() < 4_718_592);

    let requests = fake.requests();
    let sent = body_images(&requests[1].body);
    assert_eq!(sent, [(mime.to_string(), data.to_string())]);
    assert!(
        requests[1]
            .body
            .to_string()
            .contains("Multiply coordinates by 1.20"),
        "the note reaches the model"
    );
    pi.close_and_wait();
    fake.finish();
}

/// A BMP file is read as an image, converted to PNG with pi 1.6.0's note (pi-rs read BMP files
/// as text before). Reference: passes against 1.6.0.
#[test]
fn read_of_a_bmp_sends_it_as_png_with_the_conversion_note() {
    let workspace = Workspace::new();
    std::fs::write(workspace.cwd().join("shot.bmp"), bmp(6, 4)).unwrap();
    let fake = FakeProvider::start(tool_script(&[("read", json!({"path": "shot.bmp"}))]));
    let setup = Setup::anthropic(&fake).arg("--tools").arg("read");
    let mut pi = Pi::spawn_in(&workspace, &setup);
    let run = prompt(&mut pi, "p1", "Look at shot.bmp");
    let ends = tool_ends(run, 1);
    let content = &ends[0]["result"]["content"];
    assert_eq!(
        content[0]["text"],
        "Read image file [image/png]\n[Image converted from image/bmp to image/png.]"
    );
    assert_eq!(content[1]["mimeType"], "image/png");
    let data = content[1]["data"].as_str().unwrap();
    assert!(STANDARD.decode(data).unwrap().starts_with(b"\x89PNG"));
    assert_eq!(dimensions(data), (6, 4));
    let sent = body_images(&fake.requests()[1].body);
    assert_eq!(sent, [("image/png".to_string(), data.to_string())]);
    pi.close_and_wait();
    fake.finish();
}

/// A prompt's 2500×600 image is scaled to 2000×480 before the run, the note after the text, in
/// the user message as recorded and as sent; a small image passes unchanged, and a model's
/// models.json `inputLimits` sets other bounds.
#[test]
fn prompt_images_are_scaled_to_the_models_limits() {
    let fake = FakeProvider::start(vec![text_reply("Seen.")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    let large = STANDARD.encode(png(2500, 600));
    let small = STANDARD.encode(png(30, 20));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Look",
                   "images": [{"type": "image", "data": large, "mimeType": "image/png"},
                              {"type": "image", "data": small, "mimeType": "image/png"}]}));
    let run = pi.records_until_event("agent_end");
    let user = &run
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "user")
        .expect("the prompt")["message"];
    assert_eq!(
        user["content"][0]["text"],
        "Look\n\n[Image: original 2500x600, displayed at 2000x480. Multiply coordinates by 1.25 \
         to map to original image.]"
    );
    let scaled = user["content"][1]["data"]
        .as_str()
        .expect("the scaled image");
    assert_eq!(dimensions(scaled), (2000, 480));
    assert_eq!(
        user["content"][2]["data"], small,
        "within the limits: unchanged"
    );
    let sent: Vec<String> = body_images(&fake.requests()[0].body)
        .into_iter()
        .map(|(_, data)| data)
        .collect();
    assert_eq!(sent.len(), 2);
    assert!(sent.contains(&scaled.to_string()) && sent.contains(&small));
    pi.close_and_wait();
    fake.finish();

    // A model that takes at most 100 px a side.
    let fake = FakeProvider::start(vec![text_reply("Seen.")]);
    let models = crate::fake_provider::fixture("models.json").replace(
        "\"id\": \"fake-claude\",",
        "\"id\": \"fake-claude\", \"inputLimits\": {\"images\": {\"resize\": {\"maxWidth\": 100, \"maxHeight\": 100}}},",
    );
    assert!(
        models.contains("inputLimits"),
        "the fixture names fake-claude"
    );
    let mut pi = Pi::spawn(&Setup::anthropic(&fake).models_json(&models));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Look",
                   "images": [{"type": "image", "data": small, "mimeType": "image/png"},
                              {"type": "image", "data": STANDARD.encode(png(300, 150)), "mimeType": "image/png"}]}));
    let run = pi.records_until_event("agent_end");
    let user = &run
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "user")
        .expect("the prompt")["message"];
    assert_eq!(
        user["content"][0]["text"],
        "Look\n\n[Image: original 300x150, displayed at 100x50. Multiply coordinates by 3.00 to \
         map to original image.]"
    );
    assert_eq!(
        dimensions(user["content"][2]["data"].as_str().unwrap()),
        (100, 50)
    );
    pi.close_and_wait();
    fake.finish();
}

/// A prompt's BMP image is sent as PNG with the conversion note (pi-rs sent it as BMP before).
#[test]
fn a_prompt_bmp_image_is_sent_as_png_with_the_conversion_note() {
    let fake = FakeProvider::start(vec![text_reply("Seen.")]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Look",
                   "images": [{"type": "image", "data": STANDARD.encode(bmp(6, 4)), "mimeType": "image/bmp"}]}));
    let run = pi.records_until_event("agent_end");
    let user = user_messages(&run).remove(0);
    assert_eq!(
        user["content"][0]["text"],
        "Look\n\n[Image converted from image/bmp to image/png.]"
    );
    assert_eq!(user["content"][1]["mimeType"], "image/png");
    let data = user["content"][1]["data"].as_str().unwrap();
    assert_eq!(dimensions(data), (6, 4));
    assert_eq!(
        body_images(&fake.requests()[0].body),
        [("image/png".to_string(), data.to_string())]
    );
    pi.close_and_wait();
    fake.finish();
}

/// Images sent with `steer` and `follow_up` during a run are made ready when the message is
/// delivered, as a prompt's are: the large PNG scaled with the coordinate note, the BMP
/// converted; `queue_update` still lists the texts as sent.
#[test]
fn steer_and_follow_up_images_are_scaled_at_delivery() {
    let fake = FakeProvider::start(vec![
        Reply::sse(crate::sse::anthropic_bash("toolu_gate", GATED_COMMAND)),
        text_reply("Steered."),
        text_reply("Followed."),
    ]);
    let mut pi = Pi::spawn(&Setup::anthropic(&fake));
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Run the slow thing"}));
    pi.wait_for_event("tool_execution_start");
    let large = STANDARD.encode(png(2500, 600));
    let response = pi.command(
        "s1",
        "steer",
        json!({"message": "Look at this",
               "images": [{"type": "image", "data": large, "mimeType": "image/png"}]}),
    );
    assert_eq!(response["success"], true, "{response}");
    let response = pi.command(
        "f1",
        "follow_up",
        json!({"message": "And this",
               "images": [{"type": "image", "data": STANDARD.encode(bmp(6, 4)), "mimeType": "image/bmp"}]}),
    );
    assert_eq!(response["success"], true, "{response}");
    open_gate(&pi);
    let run = pi.records_until_event("agent_end");
    let users = user_messages(&run);
    assert_eq!(users.len(), 2, "{users:?}");
    assert_eq!(
        users[0]["content"][0]["text"],
        "Look at this\n\n[Image: original 2500x600, displayed at 2000x480. Multiply coordinates \
         by 1.25 to map to original image.]"
    );
    let scaled = users[0]["content"][1]["data"].as_str().unwrap();
    assert_eq!(dimensions(scaled), (2000, 480));
    assert_eq!(
        users[1]["content"][0]["text"],
        "And this\n\n[Image converted from image/bmp to image/png.]"
    );
    assert_eq!(users[1]["content"][1]["mimeType"], "image/png");
    let converted = users[1]["content"][1]["data"].as_str().unwrap();
    assert_eq!(dimensions(converted), (6, 4));
    // The queue lists what the client sent.
    let updates: Vec<&Value> = pi
        .records()
        .iter()
        .filter(|r| r["type"] == "queue_update")
        .collect();
    assert_eq!(
        updates[1],
        &json!({"type": "queue_update", "steering": ["Look at this"], "followUp": ["And this"]})
    );
    let requests = fake.requests();
    let sent: Vec<String> = body_images(&requests[1].body)
        .into_iter()
        .map(|(_, data)| data)
        .collect();
    assert_eq!(sent, [scaled.to_string()]);
    assert!(
        body_images(&requests[2].body).contains(&("image/png".to_string(), converted.to_string()))
    );
    pi.close_and_wait();
    fake.finish();
}

/// An MCP tool's 2400×300 image is scaled to 2000×250 before `tool_execution_end`, the note in
/// a text block right after it, in the tool result message and the next request alike.
#[test]
fn an_mcp_tool_results_image_is_scaled_with_the_note_after_it() {
    let workspace = Workspace::new();
    let picture = workspace.cwd().join("big.png");
    std::fs::write(&picture, png(2400, 300)).unwrap();
    write_mcp_json(
        &workspace,
        json!({"fake": {"command": fixture_path("mcp/fake_server.py").to_string_lossy(),
                        "exposure": "direct"}}),
    );
    let fake = FakeProvider::start(tool_script(&[(
        "mcp__fake__picture",
        json!({"text": picture.to_string_lossy()}),
    )]));
    let mut pi = Pi::spawn_in(&workspace, &Setup::anthropic(&fake));
    let run = prompt(&mut pi, "p1", "Show the picture");
    let result_message = run
        .iter()
        .find(|r| r["type"] == "message_end" && r["message"]["role"] == "toolResult")
        .expect("the tool result")["message"]
        .clone();
    let ends = tool_ends(run, 1);
    let content = &ends[0]["result"]["content"];
    assert_eq!(content[0]["type"], "image", "{content}");
    let data = content[0]["data"].as_str().unwrap();
    assert_eq!(dimensions(data), (2000, 250));
    assert_eq!(
        content[1],
        json!({"type": "text", "text": "[Image: original 2400x300, displayed at 2000x250. \
               Multiply coordinates by 1.20 to map to original image.]"})
    );
    assert_eq!(content[2], json!({"type": "text", "text": "a picture"}));
    assert_eq!(&result_message["content"], content);
    let sent: Vec<String> = body_images(&fake.requests()[1].body)
        .into_iter()
        .map(|(_, data)| data)
        .collect();
    assert_eq!(sent, [data.to_string()]);
    pi.close_and_wait();
    fake.finish();
}

/// Issue 22: delivering a queued `steer` with images does not hold up the agent (pi 1.6.0
/// prepares them asynchronously). The image worker is held by the test hook
/// `PI_TEST_IMAGE_WORKER_GATE`: at the drain point after the tool turn, `get_state` is still
/// answered (busy) and nothing is delivered yet; once the worker goes, the steer is delivered
/// with its image made ready, then the text-only steer queued after it, in order.
#[test]
fn queued_images_are_made_ready_while_the_agent_serves_commands() {
    let fake = FakeProvider::start(vec![
        Reply::sse(crate::sse::anthropic_bash("toolu_gate", GATED_COMMAND)),
        text_reply("Steered."),
    ]);
    let workspace = Workspace::new();
    let image_gate = workspace.root().join("image-gate");
    let setup = Setup::anthropic(&fake)
        .settings(json!({"steeringMode": "all"}))
        .env("PI_TEST_IMAGE_WORKER_GATE", image_gate.to_str().unwrap());
    let mut pi = Pi::spawn_in(&workspace, &setup);
    pi.send(json!({"id": "p1", "type": "prompt", "message": "Run the slow thing"}));
    pi.wait_for_event("tool_execution_start");
    for (id, fields) in [
        (
            "s1",
            json!({"message": "Look at this",
                   "images": [{"type": "image", "data": STANDARD.encode(bmp(6, 4)), "mimeType": "image/bmp"}]}),
        ),
        ("s2", json!({"message": "And then this"})),
    ] {
        let response = pi.command(id, "steer", fields);
        assert_eq!(response["success"], true, "{response}");
    }
    open_gate(&pi);
    pi.wait_for_event("turn_end");
    // The drain point: the next turn starts, the steer waits for its image worker.
    pi.wait_for_event("turn_start");
    let state = pi.command("st", "get_state", json!({}));
    assert_eq!(state["data"]["isStreaming"], true, "{state}");
    let answered = pi.records().iter().position(|r| r["id"] == "st").unwrap();
    let delivered_before = pi.records()[..answered]
        .iter()
        .filter(|r| r["type"] == "message_start" && r["message"]["role"] == "user")
        .count();
    assert_eq!(delivered_before, 1, "only the prompt before the answer");
    std::fs::write(&image_gate, "").unwrap();
    let run = pi.records_until_event("agent_end");
    let users = user_messages(&run);
    let texts: Vec<&str> = users
        .iter()
        .map(|u| u["content"][0]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        texts,
        [
            "Look at this\n\n[Image converted from image/bmp to image/png.]",
            "And then this"
        ]
    );
    assert_eq!(users[0]["content"][1]["mimeType"], "image/png");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "one request after the delivery");
    assert_eq!(
        body_images(&requests[1].body)
            .into_iter()
            .map(|(mime, _)| mime)
            .collect::<Vec<_>>(),
        ["image/png"]
    );
    pi.close_and_wait();
    fake.finish();
}
