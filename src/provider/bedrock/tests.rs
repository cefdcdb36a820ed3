//! Request bodies against the ones pi-ai 0.73.1 + the AWS SDK sent (captured from the reference
//! pointed at a local server: `fixtures/bedrock/requests/`), the signature against one the SDK
//! computed, endpoint/region choices, and the event-stream decoder.

use super::super::decode::decode_in_parts;
use super::super::test_support::{model, request};
use super::super::types::{StreamEvent, StreamRequest};
use super::*;
use crate::config::auth::Env;
use crate::messages::ToolSpec;
use crate::provider::event_stream::encode;

fn bedrock_model(id: &str, name: &str, reasoning: bool) -> Model {
    let mut m = model("bedrock-converse-stream", "amazon-bedrock", id);
    m.name = name.into();
    m.reasoning = reasoning;
    m.input = vec!["text".into(), "image".into()];
    m.base_url = "https://bedrock-runtime.us-east-1.amazonaws.com".into();
    m
}

fn reference_request(id: &str, name: &str, reasoning: bool, history: &str) -> StreamRequest {
    let messages: Vec<AgentMessage> = serde_json::from_str(&history.replace("MODEL", id)).unwrap();
    let mut r = request(bedrock_model(id, name, reasoning), messages);
    r.system_prompt = "SYS".into();
    r.tools = vec![ToolSpec {
        name: "bash".into(),
        description: "Run".into(),
        parameters: json!({"type":"object","properties":{"command":{"type":"string"}}}),
    }];
    r
}

const MIXED: &str = include_str!("../../../fixtures/bedrock/history_mixed.json");
const SAME_MODEL: &str = include_str!("../../../fixtures/bedrock/history_same_model.json");

#[test]
fn bodies_match_the_reference() {
    use ThinkingLevel::*;
    let sonnet = (
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "Claude Sonnet 4.5",
    );
    // (fixture, model id, name, reasoning model, level, history, retention, AWS_REGION)
    let cases = [
        (
            "sonnet45_medium_history",
            sonnet.0,
            sonnet.1,
            true,
            Medium,
            MIXED,
            CacheRetention::Short,
            None,
        ),
        (
            "opus46_high",
            "us.anthropic.claude-opus-4-6-v1",
            "Claude Opus 4.6",
            true,
            High,
            SAME_MODEL,
            CacheRetention::Short,
            None,
        ),
        (
            "opus47_xhigh",
            "us.anthropic.claude-opus-4-7-v1",
            "Claude Opus 4.7",
            true,
            Xhigh,
            SAME_MODEL,
            CacheRetention::Short,
            None,
        ),
        (
            "sonnet45_off_long",
            sonnet.0,
            sonnet.1,
            true,
            Off,
            SAME_MODEL,
            CacheRetention::Long,
            None,
        ),
        (
            "sonnet45_xhigh_govcloud",
            sonnet.0,
            sonnet.1,
            true,
            Xhigh,
            SAME_MODEL,
            CacheRetention::Short,
            Some("us-gov-west-1"),
        ),
        (
            "gptoss_high",
            "openai.gpt-oss-120b-1:0",
            "gpt-oss-120b",
            true,
            High,
            SAME_MODEL,
            CacheRetention::Short,
            None,
        ),
        (
            "nova_not_reasoning",
            "amazon.nova-pro-v1:0",
            "Nova Pro",
            false,
            High,
            SAME_MODEL,
            CacheRetention::Short,
            None,
        ),
    ];
    for (fixture, id, name, reasoning, level, history, retention, region) in cases {
        let mut r = reference_request(id, name, reasoning, history);
        r.thinking = level;
        let expected = std::fs::read_to_string(format!(
            "{}/fixtures/bedrock/requests/{fixture}.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let body = build_body(&r, retention, region).unwrap();
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            expected.trim_end(),
            "{fixture}"
        );
    }
}

#[test]
fn unknown_image_types_fail_the_request() {
    let messages: Vec<AgentMessage> = serde_json::from_str(
        r#"[{"role":"user","content":[{"type":"image","data":"AAAA","mimeType":"image/tiff"}],"timestamp":1}]"#,
    )
    .unwrap();
    let r = request(
        bedrock_model("amazon.nova-pro-v1:0", "Nova", false),
        messages,
    );
    assert_eq!(
        build_body(&r, CacheRetention::Short, None)
            .unwrap_err()
            .to_string(),
        "Unknown image type: image/tiff"
    );
}

/// A request the AWS SDK (v3.1163, under pi 0.73.1) signed; pi-rs's signer must agree with it,
/// including the model id's `:` encoded twice in the canonical path.
#[test]
fn signs_like_the_aws_sdk() {
    let body = include_str!("../../../fixtures/bedrock/sdk_signed_body.json").trim_end();
    let headers: Vec<(String, String)> = [
        ("content-type", "application/json"),
        ("content-length", "346"),
        ("x-amz-user-agent", "aws-sdk-js/3.1163.0"),
        (
            "amz-sdk-invocation-id",
            "a82e9c60-601f-49fc-8108-88de9963c514",
        ),
        ("amz-sdk-request", "attempt=1; max=3"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let signed = sigv4::sign(
        &SigningRequest {
            method: "POST",
            host: "127.0.0.1:38517",
            path: "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream",
            query: "",
            headers: &headers,
            body: body.as_bytes(),
        },
        &sigv4::AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: Some("session-token-example".into()),
        },
        &SigningScope {
            region: "eu-west-1",
            service: "bedrock",
            amz_date: "20261201T151233Z",
            content_sha256_header: true,
        },
    );
    assert_eq!(
        signed.last().unwrap().1,
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261201/eu-west-1/bedrock/aws4_request, SignedHeaders=amz-sdk-invocation-id;amz-sdk-request;content-length;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token;x-amz-user-agent, Signature=c5136977d6a859d8e99606b6ea0e682678602622feb0ae98534ce05c44d010aa"
    );
    // And the body pi-rs builds for that request is the one the SDK signed.
    let mut r = reference_request(
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "Claude Sonnet 4.5",
        true,
        r#"[{"role":"user","content":"hi","timestamp":1}]"#,
    );
    r.thinking = ThinkingLevel::Off;
    let built = build_body(&r, CacheRetention::Short, Some("eu-west-1")).unwrap();
    assert_eq!(serde_json::to_string(&built).unwrap(), body);
}

#[test]
fn endpoint_and_auth_headers() {
    let env = |pairs: &[(&str, &str)]| Env::from_pairs(pairs.iter().copied());
    let catalog = "https://bedrock-runtime.us-east-1.amazonaws.com";
    let e = Endpoint::resolve(&env(&[]), catalog, "m").unwrap();
    assert_eq!((e.base.as_str(), e.region.as_str()), (catalog, "us-east-1"));
    // A configured region moves the request off the catalog's endpoint.
    let e = Endpoint::resolve(&env(&[("AWS_REGION", "eu-west-3")]), catalog, "m").unwrap();
    assert_eq!(e.base, "https://bedrock-runtime.eu-west-3.amazonaws.com");
    let e = Endpoint::resolve(&env(&[("AWS_REGION", "cn-north-1")]), catalog, "m").unwrap();
    assert_eq!(
        e.base,
        "https://bedrock-runtime.cn-north-1.amazonaws.com.cn"
    );
    // A custom endpoint stays, signed for the configured region (default us-east-1).
    let e = Endpoint::resolve(
        &env(&[("AWS_REGION", "eu-west-3")]),
        "http://127.0.0.1:9/p/",
        "m",
    )
    .unwrap();
    assert_eq!(
        (e.base.as_str(), e.region.as_str()),
        ("http://127.0.0.1:9/p", "eu-west-3")
    );
    assert_eq!(
        standard_endpoint_region("https://bedrock-runtime-fips.us-gov-west-1.amazonaws.com"),
        Some("us-gov-west-1".into())
    );
    // An application inference profile ARN carries its region (newest pi).
    let arn = "arn:aws:bedrock:ap-northeast-1:123456789012:application-inference-profile/abc";
    let by_arn = Endpoint::resolve(&env(&[("AWS_REGION", "eu-west-3")]), catalog, arn).unwrap();
    assert_eq!(
        (by_arn.base.as_str(), by_arn.region.as_str()),
        (
            "https://bedrock-runtime.ap-northeast-1.amazonaws.com",
            "ap-northeast-1"
        )
    );
    assert_eq!(
        arn_region("arn:aws-us-gov:bedrock:us-gov-west-1:1:x"),
        Some("us-gov-west-1".into())
    );
    assert_eq!(arn_region("anthropic.claude-v1:0"), None);
    assert_eq!(standard_endpoint_region("https://example.com"), None);
    assert_eq!(
        split_authority("https://h.example:443/x"),
        ("h.example".into(), "/x".into())
    );
    assert_eq!(
        split_authority("http://127.0.0.1:9"),
        ("127.0.0.1:9".into(), String::new())
    );

    let r = reference_request(
        "us.anthropic.claude-opus-4-6-v1",
        "Claude Opus 4.6",
        true,
        SAME_MODEL,
    );
    let body = json!({"messages": []});
    let http = e.authorize(
        &r,
        body.clone(),
        &Auth::Bearer("brk-key".into()),
        "20260101T000000Z",
    );
    assert_eq!(
        http.url,
        "http://127.0.0.1:9/p/model/us.anthropic.claude-opus-4-6-v1/converse-stream"
    );
    assert_eq!(
        http.headers,
        vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("authorization".to_string(), "Bearer brk-key".to_string())
        ]
    );
    let credentials = sigv4::AwsCredentials {
        access_key_id: "AKID".into(),
        secret_access_key: "s".into(),
        session_token: Some("tok".into()),
    };
    let http = e.authorize(&r, body, &Auth::SigV4(credentials), "20260101T000000Z");
    let names: Vec<&str> = http.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "content-type",
            "x-amz-date",
            "x-amz-security-token",
            "x-amz-content-sha256",
            "authorization"
        ]
    );
    assert!(http.headers[4].1.contains("/20260101/eu-west-3/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token, "));
}

#[test]
fn http_errors_carry_pis_prefixes() {
    assert_eq!(
        http_error_message(400, r#"{"message":"The model is not ready"}"#),
        "Validation error: The model is not ready"
    );
    assert_eq!(
        http_error_message(
            429,
            r#"{"message":"Too many requests, please wait before trying again."}"#
        ),
        "Throttling error: Too many requests, please wait before trying again."
    );
    assert_eq!(
        http_error_message(
            403,
            r#"{"message":"The security token included in the request is invalid."}"#
        ),
        "AccessDeniedException: The security token included in the request is invalid."
    );
    assert_eq!(
        http_error_message(
            400,
            r#"{"__type":"com.amazon#UnrecognizedClientException","message":"bad"}"#
        ),
        "UnrecognizedClientException: bad"
    );
    assert_eq!(http_error_message(503, "down"), "Service unavailable: down");
}

fn event(kind: &str, payload: Value) -> Vec<u8> {
    encode(
        &[
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

fn reply() -> Vec<u8> {
    let mut body = event("messageStart", json!({"role": "assistant"}));
    for (kind, payload) in [
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Thinking"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "SIG1"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "SIG2"}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"text": "Hi"}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"text": " there"}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_a", "name": "bash"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"command\":"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "\"ls\"}"}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 2})),
        ("messageStop", json!({"stopReason": "tool_use"})),
        (
            "metadata",
            json!({"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15, "cacheReadInputTokens": 3}, "metrics": {"latencyMs": 9}}),
        ),
    ] {
        body.extend(event(kind, payload));
    }
    body
}

fn decode_parts(parts: &[&[u8]]) -> Vec<StreamEvent> {
    let r = request(bedrock_model("m", "m", true), vec![]);
    decode_in_parts(Decoder::new(&r), parts)
}

#[test]
fn decodes_thinking_text_tool_calls_and_usage() {
    let delta = |index, text: &str| StreamEvent::Delta {
        index,
        delta: text.into(),
    };
    assert_eq!(
        decode_parts(&[&reply()]),
        vec![
            StreamEvent::BlockStart {
                index: 0,
                kind: BlockKind::Thinking { redacted: false }
            },
            delta(0, "Thinking"),
            StreamEvent::BlockEnd {
                index: 0,
                signature: Some("SIG1SIG2".into())
            },
            StreamEvent::BlockStart {
                index: 1,
                kind: BlockKind::Text
            },
            delta(1, "Hi"),
            delta(1, " there"),
            StreamEvent::BlockEnd {
                index: 1,
                signature: None
            },
            StreamEvent::BlockStart {
                index: 2,
                kind: BlockKind::ToolCall {
                    id: "tooluse_a".into(),
                    name: "bash".into()
                }
            },
            delta(2, "{\"command\":"),
            delta(2, "\"ls\"}"),
            StreamEvent::BlockEnd {
                index: 2,
                signature: None
            },
            StreamEvent::Usage(Usage {
                input: 10,
                output: 5,
                cache_read: 3,
                total_tokens: 15,
                ..Usage::default()
            }),
            StreamEvent::Done {
                stop_reason: StopReason::ToolUse,
                error_message: None
            },
        ]
    );
}

#[test]
fn every_split_point_decodes_the_same() {
    let body = reply();
    let whole = decode_parts(&[&body]);
    for at in 0..=body.len() {
        assert_eq!(
            decode_parts(&[&body[..at], &body[at..]]),
            whole,
            "split at {at}"
        );
    }
}

#[test]
fn exceptions_broken_frames_and_early_ends_fail() {
    let failed = |events: Vec<StreamEvent>| match events.last() {
        Some(StreamEvent::Failed(e)) => e.message.clone(),
        other => panic!("expected Failed, got {other:?}"),
    };
    let mut body = event("messageStart", json!({"role": "assistant"}));
    body.extend(encode(
        &[
            (":exception-type", "throttlingException"),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        br#"{"message":"Too many tokens, please wait before trying again."}"#,
    ));
    assert_eq!(
        failed(decode_parts(&[&body])),
        "Throttling error: Too many tokens, please wait before trying again."
    );

    let mut body = reply();
    let at = body.len() - 10;
    body[at] ^= 0xff;
    assert_eq!(
        failed(decode_parts(&[&body])),
        "event stream: message checksum mismatch"
    );

    let body = reply();
    assert_eq!(
        failed(decode_parts(&[&body[..body.len() - 3]])),
        "event stream: body ended inside a message"
    );
    let body = event("messageStart", json!({"role": "assistant"}));
    assert_eq!(
        failed(decode_parts(&[&body])),
        "Bedrock stream ended before messageStop"
    );
    let body = event("messageStart", json!({"role": "user"}));
    assert_eq!(
        failed(decode_parts(&[&body])),
        "Unexpected assistant message start but got user message start instead"
    );

    // Guardrails and filters end as errors with pi's text.
    let mut body = event("messageStart", json!({"role": "assistant"}));
    body.extend(event(
        "messageStop",
        json!({"stopReason": "guardrail_intervened"}),
    ));
    assert_eq!(
        decode_parts(&[&body]).last(),
        Some(&StreamEvent::Done {
            stop_reason: StopReason::Error,
            error_message: Some("An unknown error occurred".into())
        })
    );
}
