//! The decoder scaffold every wire API shares. `Decoder` takes the response body as the socket
//! delivers it, frames it (SSE, or AWS event-stream frames for Bedrock), hands each framed event to
//! the API's `WireDecoder`, and returns the `StreamEvent`s that produced. Everything the APIs have
//! in common lives here once: content indexes in order of appearance, the terminal state (after
//! `Done` or `Failed` nothing more is decoded), the default error text of an error stop, a body
//! that is not an event stream at all, framing errors, and small block trackers the APIs pick from
//! (`OpenBlocks` for blocks keyed by the wire's index, `TextRun` for consecutive text or thinking
//! parts). Each `provider/<api>.rs` keeps only its wire mapping. Pure: no I/O, no threads; the
//! thread in `mod.rs` reads the socket and sends what comes out.

use serde_json::Value;

use super::event_stream;
use super::sse::{SseEvent, SseParser};
use super::types::{BlockKind, ProviderError, StreamEvent};
use crate::messages::{StopReason, Usage};

/// What pi reports for an error stop (or a failed status) without a text of its own.
pub(crate) const UNKNOWN_ERROR_TEXT: &str = "An unknown error occurred";

/// How a wire API frames its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    Sse,
    /// AWS event-stream frames (Bedrock), both CRCs checked.
    EventStream,
}

/// One wire API's mapping from framed events to `StreamEvent`s. It is called only until the
/// stream is finished (`Emitter::fail` or a `done`), so it need not guard against later input.
pub(crate) trait WireDecoder {
    fn framing(&self) -> Framing {
        Framing::Sse
    }
    /// One server-sent event (`Framing::Sse`).
    fn on_sse(&mut self, _sse: &SseEvent, _out: &mut Emitter) {}
    /// One event-stream message (`Framing::EventStream`).
    fn on_frame(&mut self, _frame: &event_stream::Message, _out: &mut Emitter) {}
    /// The body ended (cleanly) before the stream finished.
    fn on_eof(&mut self, out: &mut Emitter);
    /// The error text of a failed HTTP response, as the API's client words it.
    fn http_error_message(&self, status: u16, body: &str) -> String;
}

/// Where a wire decoder puts its events; it numbers the blocks and knows when the stream ended.
#[derive(Default)]
pub(crate) struct Emitter {
    events: Vec<StreamEvent>,
    next_index: usize,
    finished: bool,
    /// The first response id reported (`first_response_id`).
    response_id: Option<String>,
}

impl Emitter {
    /// Starts a block at the next content index and returns that index.
    pub fn start(&mut self, kind: BlockKind) -> usize {
        let index = self.next_index;
        self.next_index += 1;
        self.events.push(StreamEvent::BlockStart { index, kind });
        index
    }

    pub fn delta(&mut self, index: usize, delta: impl Into<String>) {
        self.events.push(StreamEvent::Delta {
            index,
            delta: delta.into(),
        });
    }

    /// A thinking block's `redacted` flag, stated at its end (before `end`).
    pub fn redacted(&mut self, index: usize, redacted: bool) {
        self.events
            .push(StreamEvent::ThinkingRedacted { index, redacted });
    }

    pub fn end(&mut self, index: usize, signature: Option<String>) {
        self.events.push(StreamEvent::BlockEnd { index, signature });
    }

    pub fn diagnostic(&mut self, diagnostic: serde_json::Value) {
        self.events.push(StreamEvent::Diagnostic(diagnostic));
    }

    pub fn meta(&mut self, response_id: Option<String>, response_model: Option<String>) {
        self.events.push(StreamEvent::Meta {
            response_id,
            response_model,
        });
    }

    /// Reports the response id the first time a non-empty one is seen; later ones are ignored.
    pub fn first_response_id(&mut self, id: Option<&str>) {
        if self.response_id.is_none()
            && let Some(id) = id.filter(|id| !id.is_empty())
        {
            self.response_id = Some(id.to_string());
            self.meta(self.response_id.clone(), None);
        }
    }

    pub fn usage(&mut self, usage: Usage) {
        self.events.push(StreamEvent::Usage(usage));
    }

    /// Usage whose cost the provider computed: the agent keeps it unpriced.
    pub fn priced_usage(&mut self, usage: Usage) {
        self.events.push(StreamEvent::PricedUsage(usage));
    }

    /// The usage's cost is multiplied by `multiplier` (a service tier's price).
    pub fn cost_multiplier(&mut self, multiplier: f64) {
        self.events.push(StreamEvent::CostMultiplier(multiplier));
    }

    /// The provider's own word for why the reply stopped (kept as `rawStopReason`).
    pub fn raw_stop_reason(&mut self, reason: impl Into<String>) {
        self.events.push(StreamEvent::RawStopReason(reason.into()));
    }

    /// Whether the model ended its turn (kept as `endTurn`).
    pub fn end_turn(&mut self, end_turn: bool) {
        self.events.push(StreamEvent::EndTurn(end_turn));
    }

    /// The stream finished; an error stop carries pi's unknown-error text.
    pub fn done(&mut self, stop_reason: StopReason) {
        let error_message =
            (stop_reason == StopReason::Error).then(|| UNKNOWN_ERROR_TEXT.to_string());
        self.done_with_message(stop_reason, error_message);
    }

    pub fn done_with_message(&mut self, stop_reason: StopReason, error_message: Option<String>) {
        self.finished = true;
        self.events.push(StreamEvent::Done {
            stop_reason,
            error_message,
        });
    }

    /// The stream failed with `message`; nothing more is decoded.
    pub fn fail(&mut self, message: impl Into<String>) {
        self.finished = true;
        self.events.push(StreamEvent::Failed(ProviderError {
            message: message.into(),
            retry_after: None,
        }));
    }

    /// `data` parsed as JSON, or the stream fails with `Could not parse <what> as JSON: …`.
    pub fn parse_json(&mut self, data: &str, what: &str) -> Option<Value> {
        match serde_json::from_str(data) {
            Ok(value) => Some(value),
            Err(e) => {
                self.fail(format!("Could not parse {what} as JSON: {e}"));
                None
            }
        }
    }
}

/// A token count as the SDKs read one (`x || 0`): a positive finite number, else 0.
pub(crate) fn token_count(value: &Value) -> u64 {
    value
        .as_f64()
        .filter(|f| f.is_finite() && *f > 0.0)
        .unwrap_or(0.0) as u64
}

/// Blocks the wire numbers itself (Anthropic's `index`, Bedrock's `contentBlockIndex`), open from
/// their start to their stop, each with what the API accumulates for it until then.
pub(crate) struct OpenBlocks<S> {
    open: Vec<OpenBlock<S>>,
}

pub(crate) struct OpenBlock<S> {
    pub wire_index: u64,
    /// The content index.
    pub index: usize,
    pub state: S,
}

impl<S> OpenBlocks<S> {
    pub fn new() -> OpenBlocks<S> {
        OpenBlocks { open: Vec::new() }
    }

    /// Starts a block for `wire_index` and returns it.
    pub fn start(
        &mut self,
        wire_index: u64,
        kind: BlockKind,
        state: S,
        out: &mut Emitter,
    ) -> &mut OpenBlock<S> {
        let index = out.start(kind);
        self.open.push(OpenBlock {
            wire_index,
            index,
            state,
        });
        let last = self.open.len() - 1;
        &mut self.open[last]
    }

    /// The open block for `wire_index`, else a new one from `new` (a block without a start event).
    pub fn get_or_start(
        &mut self,
        wire_index: u64,
        new: impl FnOnce() -> (BlockKind, S),
        out: &mut Emitter,
    ) -> &mut OpenBlock<S> {
        match self.open.iter().position(|b| b.wire_index == wire_index) {
            Some(at) => &mut self.open[at],
            None => {
                let (kind, state) = new();
                self.start(wire_index, kind, state, out)
            }
        }
    }

    pub fn get_mut(&mut self, wire_index: u64) -> Option<&mut OpenBlock<S>> {
        self.open.iter_mut().find(|b| b.wire_index == wire_index)
    }

    /// The block for `wire_index`, no longer open.
    pub fn stop(&mut self, wire_index: u64) -> Option<OpenBlock<S>> {
        let at = self.open.iter().position(|b| b.wire_index == wire_index)?;
        Some(self.open.remove(at))
    }
}

/// The text or thinking block consecutive parts append to (Gemini, Mistral): a part of the other
/// kind, or anything else the caller closes it for, ends it.
#[derive(Default)]
pub(crate) struct TextRun {
    open: Option<Run>,
}

struct Run {
    index: usize,
    thinking: bool,
    /// Sent with the block's end (Gemini's last thought signature).
    signature: Option<String>,
}

impl TextRun {
    /// Appends `text` to the open block of this kind, first starting one if needed.
    pub fn append(&mut self, thinking: bool, text: impl Into<String>, out: &mut Emitter) {
        if self
            .open
            .as_ref()
            .is_none_or(|run| run.thinking != thinking)
        {
            self.close(out);
            let kind = if thinking {
                BlockKind::Thinking { redacted: false }
            } else {
                BlockKind::Text
            };
            self.open = Some(Run {
                index: out.start(kind),
                thinking,
                signature: None,
            });
        }
        if let Some(run) = &self.open {
            out.delta(run.index, text);
        }
    }

    /// The signature the open block ends with.
    pub fn set_signature(&mut self, signature: String) {
        if let Some(run) = &mut self.open {
            run.signature = Some(signature);
        }
    }

    pub fn close(&mut self, out: &mut Emitter) {
        if let Some(run) = self.open.take() {
            out.end(run.index, run.signature);
        }
    }
}

/// A response body being decoded: framing, the wire mapping, and what the stream emitted.
pub(crate) struct Decoder {
    wire: Box<dyn WireDecoder>,
    framing: Framer,
    out: Emitter,
    /// A 2xx body without a single event (an HTML error page, a proxy's banner) is a failure,
    /// not an empty reply; the body's start goes into the message to show what came instead.
    saw_event: bool,
    body_start: String,
    /// Each framed event's value, kept for extensions' `provider_stream_event` when asked
    /// (`keep_raw_events`); taken by the thread after each `feed`/`finish`.
    raw: Option<Vec<Value>>,
}

/// Keeps one framed event's JSON value, when values are kept (`Decoder::keep_raw_events`).
fn keep_raw(raw: &mut Option<Vec<Value>>, data: &[u8]) {
    if let Some(raw) = raw.as_mut()
        && let Ok(value) = serde_json::from_slice::<Value>(data)
    {
        raw.push(value);
    }
}

enum Framer {
    Sse(SseParser),
    EventStream(event_stream::Decoder),
}

impl Decoder {
    pub fn new(wire: impl WireDecoder + 'static) -> Decoder {
        let framing = match wire.framing() {
            Framing::Sse => Framer::Sse(SseParser::new()),
            Framing::EventStream => Framer::EventStream(event_stream::Decoder::new()),
        };
        Decoder {
            wire: Box::new(wire),
            framing,
            out: Emitter::default(),
            saw_event: false,
            body_start: String::new(),
            raw: None,
        }
    }

    /// From now on, keep each framed event's parsed value (its JSON data; events whose data is
    /// not JSON, such as `[DONE]`, are not kept).
    pub fn keep_raw_events(&mut self) {
        self.raw = Some(Vec::new());
    }

    /// The values kept since the last call, in stream order.
    pub fn take_raw_events(&mut self) -> Vec<Value> {
        self.raw.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// True once `Done` or `Failed` was produced: the request is over, whatever the server sends.
    pub fn is_finished(&self) -> bool {
        self.out.finished
    }

    pub fn http_error_message(&self, status: u16, body: &str) -> String {
        self.wire.http_error_message(status, body)
    }

    /// A piece of the body; the events it completes are decoded at once.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<StreamEvent> {
        if self.body_start.len() < 200 {
            let head = &bytes[..bytes.len().min(200)];
            self.body_start.push_str(&String::from_utf8_lossy(head));
        }
        match &mut self.framing {
            Framer::Sse(parser) => {
                if let Err(e) = parser.push(bytes) {
                    self.out.fail(e.to_string());
                }
                while !self.out.finished
                    && let Some(sse) = parser.next_event()
                {
                    self.saw_event = true;
                    keep_raw(&mut self.raw, sse.data.as_bytes());
                    self.wire.on_sse(&sse, &mut self.out);
                }
            }
            Framer::EventStream(frames) => {
                // Every byte is checked by the frame CRCs, so any body counts as a stream.
                self.saw_event = true;
                frames.push(bytes);
                while !self.out.finished {
                    match frames.next_message() {
                        Ok(Some(frame)) => {
                            keep_raw(&mut self.raw, &frame.payload);
                            self.wire.on_frame(&frame, &mut self.out)
                        }
                        Ok(None) => break,
                        Err(e) => self.out.fail(e.to_string()),
                    }
                }
            }
        }
        std::mem::take(&mut self.out.events)
    }

    /// The body ended cleanly; `content_type` is the response's, for the not-a-stream message.
    pub fn finish(&mut self, content_type: &str) -> Vec<StreamEvent> {
        if let Framer::Sse(parser) = &mut self.framing {
            for sse in parser.finish() {
                self.saw_event = true;
                if !self.out.finished {
                    keep_raw(&mut self.raw, sse.data.as_bytes());
                    self.wire.on_sse(&sse, &mut self.out);
                }
            }
        }
        if !self.saw_event {
            let snippet: String = self.body_start.trim().chars().take(200).collect();
            self.out.fail(format!(
                "The provider's response is not an event stream (content-type: {content_type}): {snippet}"
            ));
        } else if !self.out.finished {
            match &self.framing {
                Framer::EventStream(frames) if frames.has_partial() => {
                    self.out.fail("event stream: body ended inside a message")
                }
                _ => self.wire.on_eof(&mut self.out),
            }
        }
        std::mem::take(&mut self.out.events)
    }
}

/// Test helper: the body pushed in the given pieces, then its end — what the provider thread does
/// with a body, without HTTP. `RawStopReason` events are left out (`raw_stop_reasons` has them).
#[cfg(test)]
pub(crate) fn decode_in_parts(
    wire: impl WireDecoder + 'static,
    parts: &[&[u8]],
) -> Vec<StreamEvent> {
    let mut decoder = Decoder::new(wire);
    let mut out = Vec::new();
    for part in parts {
        out.extend(decoder.feed(part));
    }
    out.extend(decoder.finish("text/event-stream"));
    out.retain(|e| !matches!(e, StreamEvent::RawStopReason(_)));
    out
}

/// Test helper: the raw stop reasons a whole body reports, in order.
#[cfg(test)]
pub(crate) fn raw_stop_reasons(wire: impl WireDecoder + 'static, body: &str) -> Vec<String> {
    let mut decoder = Decoder::new(wire);
    let mut events = decoder.feed(body.as_bytes());
    events.extend(decoder.finish("text/event-stream"));
    events
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::RawStopReason(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// Test helper: the body decoded whole, then split at every byte offset; all must agree.
#[cfg(test)]
pub(crate) fn assert_every_split_decodes_the_same<W: WireDecoder + 'static>(
    stream: &str,
    new: &dyn Fn() -> W,
) {
    let body = stream.as_bytes();
    let whole = decode_in_parts(new(), &[body]);
    for at in 0..=body.len() {
        let split = decode_in_parts(new(), &[&body[..at], &body[at..]]);
        assert_eq!(split, whole, "split at {at}");
    }
}

#[cfg(test)]
mod tests {
    //! The scaffold's own contract, with a toy wire API: each SSE `data` is a text part of the
    //! kind its `event` names (`text` or `thinking`); `event: stop` finishes the stream.
    use super::*;

    struct Toy {
        run: TextRun,
    }

    impl WireDecoder for Toy {
        fn on_sse(&mut self, sse: &SseEvent, out: &mut Emitter) {
            match sse.event.as_str() {
                "stop" => {
                    self.run.close(out);
                    out.done(StopReason::Stop);
                }
                "error" => out.done(StopReason::Error),
                kind => self.run.append(kind == "thinking", sse.data.clone(), out),
            }
        }

        fn on_eof(&mut self, out: &mut Emitter) {
            out.fail("ended early");
        }

        fn http_error_message(&self, status: u16, _body: &str) -> String {
            status.to_string()
        }
    }

    fn toy() -> Toy {
        Toy {
            run: TextRun::default(),
        }
    }

    #[test]
    fn consecutive_parts_share_a_block_and_nothing_is_decoded_after_the_end() {
        let body = "event: text\ndata: a\n\nevent: text\ndata: b\n\nevent: thinking\ndata: t\n\n\
                    event: stop\ndata:\n\nevent: text\ndata: late\n\n";
        let events = decode_in_parts(toy(), &[body.as_bytes()]);
        let delta = |index, text: &str| StreamEvent::Delta {
            index,
            delta: text.into(),
        };
        assert_eq!(
            events,
            vec![
                StreamEvent::BlockStart {
                    index: 0,
                    kind: BlockKind::Text
                },
                delta(0, "a"),
                delta(0, "b"),
                StreamEvent::BlockEnd {
                    index: 0,
                    signature: None
                },
                StreamEvent::BlockStart {
                    index: 1,
                    kind: BlockKind::Thinking { redacted: false }
                },
                delta(1, "t"),
                StreamEvent::BlockEnd {
                    index: 1,
                    signature: None
                },
                StreamEvent::Done {
                    stop_reason: StopReason::Stop,
                    error_message: None
                },
            ]
        );
        assert_eq!(
            decode_in_parts(toy(), &[b"event: error\ndata:\n\n"]),
            vec![StreamEvent::Done {
                stop_reason: StopReason::Error,
                error_message: Some(UNKNOWN_ERROR_TEXT.into())
            }]
        );
    }

    fn failure(events: &[StreamEvent]) -> &str {
        match events.last() {
            Some(StreamEvent::Failed(e)) => &e.message,
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn a_body_without_events_is_not_a_stream_and_an_early_end_is_the_apis_to_word() {
        let mut decoder = Decoder::new(toy());
        assert!(decoder.feed(b"  <html>Bad gateway</html>").is_empty());
        assert_eq!(
            failure(&decoder.finish("text/html")),
            "The provider's response is not an event stream (content-type: text/html): <html>Bad gateway</html>"
        );
        assert!(decoder.is_finished());

        let events = decode_in_parts(toy(), &[b"event: text\ndata: a\n\n"]);
        assert_eq!(failure(&events), "ended early");
    }

    struct Frames;

    impl WireDecoder for Frames {
        fn framing(&self) -> Framing {
            Framing::EventStream
        }

        fn on_frame(&mut self, frame: &event_stream::Message, out: &mut Emitter) {
            let index = out.start(BlockKind::Text);
            out.delta(index, String::from_utf8_lossy(&frame.payload));
        }

        fn on_eof(&mut self, out: &mut Emitter) {
            out.done(StopReason::Stop);
        }

        fn http_error_message(&self, status: u16, _body: &str) -> String {
            status.to_string()
        }
    }

    #[test]
    fn event_stream_bodies_are_framed_and_a_cut_frame_fails() {
        let frame = event_stream::encode(&[(":event-type", "x")], b"hi");
        let events = decode_in_parts(Frames, &[&frame]);
        assert_eq!(events.len(), 3, "{events:?}");
        assert_eq!(
            events[1],
            StreamEvent::Delta {
                index: 0,
                delta: "hi".into()
            }
        );
        let events = decode_in_parts(Frames, &[&frame[..frame.len() - 1]]);
        assert_eq!(
            failure(&events),
            "event stream: body ended inside a message"
        );
        let mut broken = frame.clone();
        let last = broken.len() - 1;
        broken[last] ^= 0xff;
        let events = decode_in_parts(Frames, &[&broken]);
        assert_eq!(failure(&events), "event stream: message checksum mismatch");
    }
}
