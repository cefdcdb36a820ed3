//! Server-sent events parser (pure): bytes in, `SseEvent`s out. LF, CR and CRLF line endings,
//! `event:`/`data:` fields (other fields such as `id:`/`retry:` are read and dropped), comment lines
//! (`:`) ignored, multi-line data joined with LF, an event dispatched on a blank line.
//!
//! Usage: `push` whatever bytes the socket delivered, then call `next_event` until it returns
//! `None`; at EOF call `finish` once, which flushes a last line without a line break and a last
//! event without its blank line (pi's own Anthropic parser does the same). The result does not
//! depend on how the bytes were split into chunks: a CR at the end of one chunk followed by an LF at
//! the start of the next is one line break.
//!
//! Memory is bounded: a single event (its pending line plus its data) larger than
//! `MAX_EVENT_BYTES` is reported as `SseError::EventTooLarge` and the parser stops producing events.

use std::collections::VecDeque;
use std::fmt;

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SseEvent {
    /// The `event:` field, empty when absent.
    pub event: String,
    pub data: String,
}

/// Upper bound for one event; real provider events are a few KiB at most.
pub const MAX_EVENT_BYTES: usize = 32 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseError {
    /// One event grew beyond `MAX_EVENT_BYTES` without being dispatched.
    EventTooLarge,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SseError::EventTooLarge => {
                write!(f, "server-sent event larger than {MAX_EVENT_BYTES} bytes")
            }
        }
    }
}

impl std::error::Error for SseError {}

#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended in CR: an LF at the start of the next one belongs to it.
    skip_leading_lf: bool,
    event: Option<String>,
    data_lines: Vec<String>,
    data_bytes: usize,
    ready: VecDeque<SseEvent>,
    failed: bool,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds received bytes. Complete events become available through `next_event`.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.failed {
            return Err(SseError::EventTooLarge);
        }
        let mut rest = bytes;
        if self.skip_leading_lf && !rest.is_empty() {
            self.skip_leading_lf = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', rest) {
            self.line.extend_from_slice(&rest[..pos]);
            let line = std::mem::take(&mut self.line);
            self.take_line(&line);
            let after = &rest[pos + 1..];
            if rest[pos] == b'\r' {
                match after.first() {
                    Some(b'\n') => rest = &after[1..],
                    Some(_) => rest = after,
                    None => {
                        self.skip_leading_lf = true;
                        rest = after;
                    }
                }
            } else {
                rest = after;
            }
        }
        self.line.extend_from_slice(rest);
        if self.line.len() + self.data_bytes > MAX_EVENT_BYTES {
            self.failed = true;
            self.line = Vec::new();
            self.data_lines = Vec::new();
            return Err(SseError::EventTooLarge);
        }
        Ok(())
    }

    /// The next complete event, if any.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        self.ready.pop_front()
    }

    /// End of input: flushes an unterminated last line and an undispatched last event. Returns
    /// every event still pending, in order.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        if !self.failed {
            if !self.line.is_empty() {
                let line = std::mem::take(&mut self.line);
                self.take_line(&line);
            }
            self.dispatch();
        }
        self.ready.drain(..).collect()
    }

    fn take_line(&mut self, line: &[u8]) {
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if line[0] == b':' {
            return;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.find(':') {
            Some(colon) => (&line[..colon], &line[colon + 1..]),
            None => (&line[..], ""),
        };
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                self.data_bytes += value.len() + 1;
                self.data_lines.push(value.to_string());
            }
            _ => {}
        }
    }

    /// Blank line: an event exists when it has a non-empty `event:` or at least one `data:` line.
    fn dispatch(&mut self) {
        let event = self.event.take().unwrap_or_default();
        if event.is_empty() && self.data_lines.is_empty() {
            return;
        }
        let data = self.data_lines.join("\n");
        self.data_lines.clear();
        self.data_bytes = 0;
        self.ready.push_back(SseEvent { event, data });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_whole(input: &[u8]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        parser.push(input).unwrap();
        let mut events = Vec::new();
        while let Some(e) = parser.next_event() {
            events.push(e);
        }
        events.extend(parser.finish());
        events
    }

    fn parse_split(input: &[u8], at: usize) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for part in [&input[..at], &input[at..]] {
            parser.push(part).unwrap();
            while let Some(e) = parser.next_event() {
                events.push(e);
            }
        }
        events.extend(parser.finish());
        events
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    const STREAMS: &[&str] = &[
        "event: message_start\ndata: {\"a\":1}\n\nevent: ping\ndata: {}\n\n",
        "event: a\r\ndata: x\r\n\r\ndata: y\r\ndata: z\r\n\r\n",
        "event: a\rdata: x\r\rdata: y\rdata: z\r\r",
        ": comment\ndata: one\n\n:another\n\ndata:two\ndata\n\n",
        "data: {\"choices\":[]}\n\ndata: [DONE]\n\n",
        "event: tail\ndata: no blank line at end",
        "id: 7\nretry: 100\ndata: héllo ✓\n\n\n\nevent:\n\n",
        "data: a\r\n\r\ndata: b\n\r\ndata: c\r\r\n",
    ];

    #[test]
    fn parses_fields_comments_and_line_endings() {
        assert_eq!(
            parse_whole(STREAMS[0].as_bytes()),
            vec![ev("message_start", "{\"a\":1}"), ev("ping", "{}")]
        );
        assert_eq!(
            parse_whole(STREAMS[1].as_bytes()),
            vec![ev("a", "x"), ev("", "y\nz")]
        );
        assert_eq!(
            parse_whole(STREAMS[2].as_bytes()),
            vec![ev("a", "x"), ev("", "y\nz")]
        );
        assert_eq!(
            parse_whole(STREAMS[3].as_bytes()),
            vec![ev("", "one"), ev("", "two\n")]
        );
        assert_eq!(
            parse_whole(STREAMS[5].as_bytes()),
            vec![ev("tail", "no blank line at end")]
        );
        assert_eq!(parse_whole(STREAMS[6].as_bytes()), vec![ev("", "héllo ✓")]);
        assert_eq!(
            parse_whole(STREAMS[7].as_bytes()),
            vec![ev("", "a"), ev("", "b"), ev("", "c")]
        );
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        for stream in STREAMS {
            let bytes = stream.as_bytes();
            let whole = parse_whole(bytes);
            for at in 0..=bytes.len() {
                assert_eq!(
                    parse_split(bytes, at),
                    whole,
                    "stream {stream:?} split at {at}"
                );
            }
            // One byte at a time, too.
            let mut parser = SseParser::new();
            let mut events = Vec::new();
            for b in bytes {
                parser.push(std::slice::from_ref(b)).unwrap();
                while let Some(e) = parser.next_event() {
                    events.push(e);
                }
            }
            events.extend(parser.finish());
            assert_eq!(events, whole, "stream {stream:?} byte by byte");
        }
    }

    #[test]
    fn oversized_event_is_an_error() {
        let mut parser = SseParser::new();
        let chunk = vec![b'x'; 1024 * 1024];
        let mut result = parser.push(b"data: ");
        for _ in 0..40 {
            result = parser.push(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::EventTooLarge));
        assert!(parser.finish().is_empty());
    }
}
