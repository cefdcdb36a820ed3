//! The AWS event-stream binary framing (`application/vnd.amazon.eventstream`), as Bedrock's
//! ConverseStream sends its events: each message is
//!
//! ```text
//! total length u32 | headers length u32 | prelude CRC32 u32 | headers | payload | message CRC32 u32
//! ```
//!
//! (big-endian; the prelude CRC covers the first 8 bytes, the message CRC everything before it).
//! Headers are `name length u8, name, type u8, value`, the value's size given by its type.
//!
//! Input: body bytes in any pieces (`push`). Output: whole messages (`next_message`) whose both
//! CRCs matched; a bad CRC, an impossible length or a malformed header is an `EventStreamError`
//! that ends the stream (the framing cannot be trusted after it). CRC32 comes from `crc32fast`,
//! already in the build through flate2.

/// A message larger than this is refused (Bedrock's events are far smaller; AWS caps at 16 MiB).
const MAX_MESSAGE_LEN: usize = 24 * 1024 * 1024;
/// Prelude (12 bytes) plus the trailing message CRC (4 bytes).
const MIN_MESSAGE_LEN: usize = 16;

/// Why the framing broke. `Display` is the stream's failure text (`event stream: …`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventStreamError {
    PreludeChecksum,
    MessageChecksum,
    InvalidLength { total: usize, headers_len: usize },
    TruncatedHeader,
    UnknownHeaderType(u8),
}

impl std::fmt::Display for EventStreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventStreamError::PreludeChecksum => {
                f.write_str("event stream: prelude checksum mismatch")
            }
            EventStreamError::MessageChecksum => {
                f.write_str("event stream: message checksum mismatch")
            }
            EventStreamError::InvalidLength { total, headers_len } => write!(
                f,
                "event stream: invalid message length {total} (headers {headers_len})"
            ),
            EventStreamError::TruncatedHeader => f.write_str("event stream: truncated header"),
            EventStreamError::UnknownHeaderType(kind) => {
                write!(f, "event stream: unknown header type {kind}")
            }
        }
    }
}

impl std::error::Error for EventStreamError {}

/// One header value. Only strings matter to Bedrock; the others are decoded to stay in frame.
#[derive(Clone, Debug, PartialEq)]
pub enum HeaderValue {
    Bool(bool),
    Int(i64),
    Bytes(Vec<u8>),
    String(String),
    Timestamp(i64),
    Uuid([u8; 16]),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub headers: Vec<(String, HeaderValue)>,
    pub payload: Vec<u8>,
}

impl Message {
    /// A string header's value (`:message-type`, `:event-type`, `:exception-type`, …).
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|(n, v)| match v {
            HeaderValue::String(s) if n == name => Some(s.as_str()),
            _ => None,
        })
    }
}

/// Incremental decoder.
#[derive(Default)]
pub struct Decoder {
    buffer: Vec<u8>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// True when bytes of an incomplete message are waiting (a body that ends here was cut).
    pub fn has_partial(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// The next complete message, `Ok(None)` when more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Message>, EventStreamError> {
        if self.buffer.len() < 12 {
            return Ok(None);
        }
        let total = be32(&self.buffer[0..4]) as usize;
        let headers_len = be32(&self.buffer[4..8]) as usize;
        let prelude_crc = be32(&self.buffer[8..12]);
        if crc32fast::hash(&self.buffer[0..8]) != prelude_crc {
            return Err(EventStreamError::PreludeChecksum);
        }
        if !(MIN_MESSAGE_LEN..=MAX_MESSAGE_LEN).contains(&total)
            || headers_len > total - MIN_MESSAGE_LEN
        {
            return Err(EventStreamError::InvalidLength { total, headers_len });
        }
        if self.buffer.len() < total {
            return Ok(None);
        }
        let message_crc = be32(&self.buffer[total - 4..total]);
        if crc32fast::hash(&self.buffer[..total - 4]) != message_crc {
            return Err(EventStreamError::MessageChecksum);
        }
        let headers = parse_headers(&self.buffer[12..12 + headers_len])?;
        let payload = self.buffer[12 + headers_len..total - 4].to_vec();
        self.buffer.drain(..total);
        Ok(Some(Message { headers, payload }))
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn parse_headers(mut bytes: &[u8]) -> Result<Vec<(String, HeaderValue)>, EventStreamError> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], EventStreamError> {
        if bytes.len() < n {
            return Err(EventStreamError::TruncatedHeader);
        }
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(head)
    }
    fn int(bytes: &mut &[u8], n: usize) -> Result<i64, EventStreamError> {
        let raw = take(bytes, n)?;
        let mut value: i64 = if raw[0] & 0x80 != 0 { -1 } else { 0 };
        for b in raw {
            value = (value << 8) | i64::from(*b);
        }
        Ok(value)
    }
    let mut headers = Vec::new();
    while !bytes.is_empty() {
        let name_len = take(&mut bytes, 1)?[0] as usize;
        let name = String::from_utf8_lossy(take(&mut bytes, name_len)?).into_owned();
        let kind = take(&mut bytes, 1)?[0];
        let value = match kind {
            0 => HeaderValue::Bool(true),
            1 => HeaderValue::Bool(false),
            2 => HeaderValue::Int(int(&mut bytes, 1)?),
            3 => HeaderValue::Int(int(&mut bytes, 2)?),
            4 => HeaderValue::Int(int(&mut bytes, 4)?),
            5 => HeaderValue::Int(int(&mut bytes, 8)?),
            6 | 7 => {
                let len = int(&mut bytes, 2)? as u16 as usize;
                let raw = take(&mut bytes, len)?.to_vec();
                if kind == 6 {
                    HeaderValue::Bytes(raw)
                } else {
                    HeaderValue::String(String::from_utf8_lossy(&raw).into_owned())
                }
            }
            8 => HeaderValue::Timestamp(int(&mut bytes, 8)?),
            9 => {
                let mut uuid = [0u8; 16];
                uuid.copy_from_slice(take(&mut bytes, 16)?);
                HeaderValue::Uuid(uuid)
            }
            other => return Err(EventStreamError::UnknownHeaderType(other)),
        };
        headers.push((name, value));
    }
    Ok(headers)
}

/// Encodes a message with string headers (tests and fakes; pi-rs only decodes).
#[cfg(test)]
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut head = Vec::new();
    for (name, value) in headers {
        head.push(name.len() as u8);
        head.extend_from_slice(name.as_bytes());
        head.push(7);
        head.extend_from_slice(&(value.len() as u16).to_be_bytes());
        head.extend_from_slice(value.as_bytes());
    }
    let total = (12 + head.len() + payload.len() + 4) as u32;
    let mut out = Vec::new();
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&(head.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, payload: &str) -> Vec<u8> {
        encode(
            &[
                (":event-type", kind),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            payload.as_bytes(),
        )
    }

    #[test]
    fn crc32_is_the_ieee_polynomial() {
        // The check value of CRC-32/ISO-HDLC, the CRC the event-stream spec names.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn a_known_frame_decodes() {
        // A message with no headers and no payload: 16 bytes, both CRCs fixed by the format.
        let frame = [
            0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x05, 0xc2, 0x48, 0xeb, 0x7d, 0x98,
            0xc8, 0xff,
        ];
        let mut d = Decoder::new();
        d.push(&frame);
        assert_eq!(
            d.next_message().unwrap(),
            Some(Message {
                headers: vec![],
                payload: vec![]
            })
        );
        assert!(!d.has_partial());
    }

    #[test]
    fn messages_split_at_every_byte_decode_the_same() {
        let mut stream = event("messageStart", r#"{"role":"assistant"}"#);
        stream.extend(event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
        ));
        for at in 0..=stream.len() {
            let mut d = Decoder::new();
            let mut messages = Vec::new();
            for part in [&stream[..at], &stream[at..]] {
                d.push(part);
                while let Some(m) = d.next_message().unwrap() {
                    messages.push(m);
                }
            }
            assert_eq!(messages.len(), 2, "split at {at}");
            assert_eq!(messages[0].header_str(":event-type"), Some("messageStart"));
            assert_eq!(
                messages[1].payload,
                br#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#
            );
            assert!(!d.has_partial());
        }
    }

    #[test]
    fn corrupted_crcs_are_errors() {
        let good = event("messageStop", r#"{"stopReason":"end_turn"}"#);
        // A flipped payload byte breaks the message CRC.
        let mut bad = good.clone();
        let at = bad.len() - 6;
        bad[at] ^= 1;
        let mut d = Decoder::new();
        d.push(&bad);
        assert_eq!(
            d.next_message().map_err(|e| e.to_string()),
            Err("event stream: message checksum mismatch".into())
        );
        // A changed length breaks the prelude CRC before the length is trusted.
        let mut bad = good.clone();
        bad[3] ^= 0x40;
        let mut d = Decoder::new();
        d.push(&bad);
        assert_eq!(
            d.next_message().map_err(|e| e.to_string()),
            Err("event stream: prelude checksum mismatch".into())
        );
        // A consistent prelude with an impossible length.
        let mut bad = vec![0, 0, 0, 4, 0, 0, 0, 0];
        let crc = crc32fast::hash(&bad);
        bad.extend_from_slice(&crc.to_be_bytes());
        let mut d = Decoder::new();
        d.push(&bad);
        assert!(
            d.next_message()
                .unwrap_err()
                .to_string()
                .contains("invalid message length")
        );
    }

    #[test]
    fn every_header_type_parses() {
        let mut head = Vec::new();
        let mut add = |name: &str, kind: u8, value: &[u8]| {
            head.push(name.len() as u8);
            head.extend_from_slice(name.as_bytes());
            head.push(kind);
            head.extend_from_slice(value);
        };
        add("t", 0, &[]);
        add("f", 1, &[]);
        add("b", 2, &[0xff]);
        add("s", 3, &[0x01, 0x00]);
        add("i", 4, &[0, 0, 1, 0]);
        add("l", 5, &[0, 0, 0, 0, 0, 0, 0, 7]);
        add("y", 6, &[0, 2, 0xde, 0xad]);
        add("z", 7, &[0, 1, b'x']);
        add("ts", 8, &[0, 0, 0, 0, 0, 0, 0, 9]);
        add("u", 9, &[1; 16]);
        let parsed = parse_headers(&head).unwrap();
        let values: Vec<HeaderValue> = parsed.into_iter().map(|(_, v)| v).collect();
        assert_eq!(
            values,
            vec![
                HeaderValue::Bool(true),
                HeaderValue::Bool(false),
                HeaderValue::Int(-1),
                HeaderValue::Int(256),
                HeaderValue::Int(256),
                HeaderValue::Int(7),
                HeaderValue::Bytes(vec![0xde, 0xad]),
                HeaderValue::String("x".into()),
                HeaderValue::Timestamp(9),
                HeaderValue::Uuid([1; 16]),
            ]
        );
        assert!(parse_headers(&[1, b'a', 7, 0, 5, b'x']).is_err());
        assert!(parse_headers(&[1, b'a', 42]).is_err());
    }
}
