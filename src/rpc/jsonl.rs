//! Strict JSONL framing (pure): bytes in, records out. Records end at LF only — never at U+2028 or
//! U+2029, which are valid inside JSON strings — and one CR before the LF is dropped. A record
//! longer than `max_record` is discarded up to its LF and reported as `Frame::TooLong`, so a
//! runaway client cannot make the reader buffer without bound. A final record without LF is
//! delivered by `finish` at EOF.

use memchr::memchr;

#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// One record, without its line terminator.
    Record(Vec<u8>),
    /// A record over the limit was dropped; `len` is how many bytes it had.
    TooLong { len: usize },
}

pub struct Framer {
    buffer: Vec<u8>,
    max_record: usize,
    /// Bytes of an over-long record dropped so far (Some while discarding up to the next LF).
    discarding: Option<usize>,
}

impl Framer {
    pub fn new(max_record: usize) -> Framer {
        Framer {
            buffer: Vec::new(),
            max_record,
            discarding: None,
        }
    }

    /// Adds `bytes`; complete frames are pushed to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<Frame>) {
        while !bytes.is_empty() {
            match memchr(b'\n', bytes) {
                Some(newline) => {
                    let (head, rest) = (&bytes[..newline], &bytes[newline + 1..]);
                    if let Some(dropped) = self.discarding.take() {
                        out.push(Frame::TooLong {
                            len: dropped + head.len(),
                        });
                    } else if self.buffer.len() + head.len() > self.max_record {
                        out.push(Frame::TooLong {
                            len: self.buffer.len() + head.len(),
                        });
                        self.buffer.clear();
                    } else {
                        self.buffer.extend_from_slice(head);
                        out.push(Frame::Record(take_record(&mut self.buffer)));
                    }
                    bytes = rest;
                }
                None => {
                    if let Some(dropped) = self.discarding.as_mut() {
                        *dropped += bytes.len();
                    } else if self.buffer.len() + bytes.len() > self.max_record {
                        self.discarding = Some(self.buffer.len() + bytes.len());
                        self.buffer = Vec::new();
                    } else {
                        self.buffer.extend_from_slice(bytes);
                    }
                    return;
                }
            }
        }
    }

    /// End of input: the unterminated tail, if any, is one more record.
    pub fn finish(&mut self, out: &mut Vec<Frame>) {
        if let Some(dropped) = self.discarding.take() {
            out.push(Frame::TooLong { len: dropped });
        } else if !self.buffer.is_empty() {
            out.push(Frame::Record(take_record(&mut self.buffer)));
        }
    }
}

fn take_record(buffer: &mut Vec<u8>) -> Vec<u8> {
    if buffer.last() == Some(&b'\r') {
        buffer.pop();
    }
    let record = buffer.clone();
    buffer.clear();
    // Give back memory after an unusually large record.
    if buffer.capacity() > 1 << 20 {
        *buffer = Vec::new();
    }
    record
}

/// Parses one JSON line as JavaScript's `JSON.parse` would: a lone UTF-16 surrogate escape
/// (`"\ud800"`, which serde_json rejects and pi accepts) becomes U+FFFD instead of failing the
/// whole line. Used for client commands and extension lines alike.
pub fn parse_value(text: &str) -> serde_json::Result<serde_json::Value> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(error) => match replace_lone_surrogates(text) {
            Some(fixed) => serde_json::from_str(&fixed),
            None => Err(error),
        },
    }
}

/// `text` with every `\uD800`–`\uDFFF` escape that is not half of a pair replaced by
/// `\ufffd`; `None` when there is none.
fn replace_lone_surrogates(text: &str) -> Option<String> {
    fn escape_at(bytes: &[u8], at: usize) -> Option<u16> {
        let hex = bytes.get(at..at + 6)?;
        if hex[0] != b'\\' || hex[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        match escape_at(bytes, i) {
            Some(high @ 0xD800..=0xDBFF)
                if matches!(escape_at(bytes, i + 6), Some(0xDC00..=0xDFFF)) =>
            {
                let _ = high;
                i += 12; // a valid pair
            }
            Some(0xD800..=0xDFFF) => {
                out.push_str(&text[copied..i]);
                out.push_str("\\ufffd");
                changed = true;
                i += 6;
                copied = i;
            }
            _ => i += 2, // any other escape, `\\` included
        }
    }
    if !changed {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        let value =
            parse_value(r#"{"id":"x","message":"a\ud800b\udc00c\ud83d\ude00\\ud800"}"#).unwrap();
        assert_eq!(value["message"], "a\u{FFFD}b\u{FFFD}c\u{1F600}\\ud800");
        assert!(parse_value("{").is_err());
    }

    fn frames(input: &[u8], max: usize) -> Vec<Frame> {
        let mut framer = Framer::new(max);
        let mut out = Vec::new();
        framer.push(input, &mut out);
        framer.finish(&mut out);
        out
    }

    fn rec(s: &str) -> Frame {
        Frame::Record(s.as_bytes().to_vec())
    }

    #[test]
    fn splits_on_lf_only_and_strips_one_cr() {
        let input = "{\"a\":\"x\u{2028}y\u{2029}\"}\r\n{}\n\r\r\nlast";
        assert_eq!(
            frames(input.as_bytes(), 1024),
            vec![
                rec("{\"a\":\"x\u{2028}y\u{2029}\"}"),
                rec("{}"),
                rec("\r"),
                rec("last")
            ]
        );
    }

    #[test]
    fn empty_lines_are_records() {
        assert_eq!(frames(b"\n\n", 16), vec![rec(""), rec("")]);
    }

    #[test]
    fn every_split_point_gives_the_same_frames() {
        let input = "{\"type\":\"get_state\"}\r\n{\"m\":\"\u{2028}é\"}\nxx\n";
        let whole = frames(input.as_bytes(), 1024);
        for cut in 0..=input.len() {
            let mut framer = Framer::new(1024);
            let mut out = Vec::new();
            framer.push(&input.as_bytes()[..cut], &mut out);
            framer.push(&input.as_bytes()[cut..], &mut out);
            framer.finish(&mut out);
            assert_eq!(out, whole, "cut at {cut}");
        }
    }

    #[test]
    fn over_long_records_are_dropped_up_to_their_lf() {
        let mut framer = Framer::new(4);
        let mut out = Vec::new();
        framer.push(b"ab", &mut out);
        framer.push(b"cdefg", &mut out);
        framer.push(b"hi\nok\n", &mut out);
        assert_eq!(out, vec![Frame::TooLong { len: 9 }, rec("ok")]);
        assert_eq!(
            frames(b"abcdef\nok", 4),
            vec![Frame::TooLong { len: 6 }, rec("ok")]
        );
        assert_eq!(frames(b"abcdef", 4), vec![Frame::TooLong { len: 6 }]);
    }
}
