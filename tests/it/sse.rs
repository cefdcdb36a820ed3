//! Generators for provider SSE bodies, for scenarios that need content the fixtures lack.
//!
//! `AnthropicStream` writes the Messages API event sequence (message_start, content blocks with
//! their deltas, message_delta with the stop reason, message_stop); `OpenAiStream` writes Chat
//! Completions chunks (`data: {chunk}`, a finish chunk, a usage chunk, `data: [DONE]`). Both
//! produce exactly the shapes of the hand-written files in `fixtures/`.

use serde_json::{Value, json};

fn anthropic_event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Builder for one Anthropic Messages stream.
pub struct AnthropicStream {
    blocks: String,
    next_index: usize,
    output_tokens: u64,
    input_tokens: u64,
}

impl Default for AnthropicStream {
    fn default() -> AnthropicStream {
        AnthropicStream::new()
    }
}

impl AnthropicStream {
    pub fn new() -> AnthropicStream {
        AnthropicStream {
            blocks: String::new(),
            next_index: 0,
            output_tokens: 0,
            input_tokens: 100,
        }
    }

    /// The prompt size `message_start` reports (100 unless set): how big the context looks.
    pub fn input_tokens(mut self, tokens: u64) -> Self {
        self.input_tokens = tokens;
        self
    }

    fn start_block(&mut self, block: Value) -> usize {
        let index = self.next_index;
        self.next_index += 1;
        self.blocks.push_str(&anthropic_event(
            "content_block_start",
            json!({"type":"content_block_start","index":index,"content_block":block}),
        ));
        index
    }

    fn delta(&mut self, index: usize, delta: Value) {
        self.output_tokens += 1;
        self.blocks.push_str(&anthropic_event(
            "content_block_delta",
            json!({"type":"content_block_delta","index":index,"delta":delta}),
        ));
    }

    fn stop_block(&mut self, index: usize) {
        self.blocks.push_str(&anthropic_event(
            "content_block_stop",
            json!({"type":"content_block_stop","index":index}),
        ));
    }

    /// A text block streamed as the given pieces.
    pub fn text(mut self, parts: &[&str]) -> Self {
        let index = self.start_block(json!({"type":"text","text":""}));
        for part in parts {
            self.delta(index, json!({"type":"text_delta","text":part}));
        }
        self.stop_block(index);
        self
    }

    /// A tool_use block whose input JSON arrives as the given fragments.
    pub fn tool_use(mut self, id: &str, name: &str, json_fragments: &[&str]) -> Self {
        let index = self.start_block(json!({"type":"tool_use","id":id,"name":name,"input":{}}));
        for fragment in json_fragments {
            self.delta(
                index,
                json!({"type":"input_json_delta","partial_json":fragment}),
            );
        }
        self.stop_block(index);
        self
    }

    /// The whole stream, ending with `stop_reason` (end_turn, tool_use, max_tokens, ...).
    pub fn finish(self, stop_reason: &str) -> String {
        let usage = json!({"input_tokens":self.input_tokens,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1});
        let mut out = anthropic_event(
            "message_start",
            json!({"type":"message_start","message":{"model":"fake-claude","id":"msg_01GeneratedByHarness","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"usage":usage}}),
        );
        out.push_str("event: ping\ndata: {\"type\": \"ping\"}\n\n");
        out.push_str(&self.blocks);
        out.push_str(&anthropic_event(
            "message_delta",
            json!({"type":"message_delta","delta":{"stop_reason":stop_reason,"stop_sequence":null},"usage":{"output_tokens":self.output_tokens.max(1)}}),
        ));
        out.push_str(&anthropic_event(
            "message_stop",
            json!({"type":"message_stop"}),
        ));
        out
    }

    /// Everything up to (not including) the stop events: for stalls and truncated streams.
    pub fn unfinished(self) -> String {
        let full = self.finish("end_turn");
        let cut = full.find("event: message_delta").unwrap_or(full.len());
        full[..cut].to_string()
    }
}

/// A plain text reply: `anthropic_text(&["Hel", "lo"])`.
pub fn anthropic_text(parts: &[&str]) -> String {
    AnthropicStream::new().text(parts).finish("end_turn")
}

/// One bash tool call (`{"command": command}`), stop reason tool_use.
pub fn anthropic_bash(id: &str, command: &str) -> String {
    let input = json!({ "command": command }).to_string();
    AnthropicStream::new()
        .tool_use(id, "bash", &[&input])
        .finish("tool_use")
}

fn openai_chunk(delta: Value, finish_reason: Value) -> String {
    let chunk = json!({
        "id":"chatcmpl-GeneratedByHarness","object":"chat.completion.chunk","created":1741569952,
        "model":"fake-gpt","system_fingerprint":"fp_fake",
        "choices":[{"index":0,"delta":delta,"logprobs":null,"finish_reason":finish_reason}],
        "usage":null
    });
    format!("data: {chunk}\n\n")
}

/// Builder for one OpenAI Chat Completions stream.
pub struct OpenAiStream {
    chunks: String,
    tool_calls: usize,
    completion_tokens: u64,
}

impl Default for OpenAiStream {
    fn default() -> OpenAiStream {
        OpenAiStream::new()
    }
}

impl OpenAiStream {
    pub fn new() -> OpenAiStream {
        OpenAiStream {
            chunks: openai_chunk(
                json!({"role":"assistant","content":"","refusal":null}),
                Value::Null,
            ),
            tool_calls: 0,
            completion_tokens: 0,
        }
    }

    pub fn reasoning(mut self, parts: &[&str]) -> Self {
        for part in parts {
            self.completion_tokens += 1;
            self.chunks.push_str(&openai_chunk(
                json!({"reasoning_content":part}),
                Value::Null,
            ));
        }
        self
    }

    pub fn text(mut self, parts: &[&str]) -> Self {
        for part in parts {
            self.completion_tokens += 1;
            self.chunks
                .push_str(&openai_chunk(json!({"content":part}), Value::Null));
        }
        self
    }

    pub fn tool_call(mut self, id: &str, name: &str, argument_fragments: &[&str]) -> Self {
        let index = self.tool_calls;
        self.tool_calls += 1;
        self.chunks.push_str(&openai_chunk(
            json!({"tool_calls":[{"index":index,"id":id,"type":"function","function":{"name":name,"arguments":""}}]}),
            Value::Null,
        ));
        for fragment in argument_fragments {
            self.completion_tokens += 1;
            self.chunks.push_str(&openai_chunk(
                json!({"tool_calls":[{"index":index,"function":{"arguments":fragment}}]}),
                Value::Null,
            ));
        }
        self
    }

    /// The whole stream with `finish_reason` (stop, tool_calls, length), usage and `[DONE]`.
    pub fn finish(mut self, finish_reason: &str) -> String {
        self.chunks
            .push_str(&openai_chunk(json!({}), json!(finish_reason)));
        let completion = self.completion_tokens.max(1);
        let usage = json!({
            "id":"chatcmpl-GeneratedByHarness","object":"chat.completion.chunk","created":1741569952,
            "model":"fake-gpt","system_fingerprint":"fp_fake","choices":[],
            "usage":{"prompt_tokens":100,"completion_tokens":completion,"total_tokens":100 + completion,
                     "prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}
        });
        self.chunks
            .push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
        self.chunks
    }

    /// The chunks so far, without finish/usage/[DONE]: for stalls and truncated streams.
    pub fn unfinished(self) -> String {
        self.chunks
    }
}

pub fn openai_text(parts: &[&str]) -> String {
    OpenAiStream::new().text(parts).finish("stop")
}

pub fn openai_bash(id: &str, command: &str) -> String {
    let arguments = json!({ "command": command }).to_string();
    OpenAiStream::new()
        .tool_call(id, "bash", &[&arguments])
        .finish("tool_calls")
}
