//! Deterministic randomized test of the stdin path (framer + command parser): a seeded generator
//! of hostile records — truncated JSON, deep nesting, huge numbers, lone surrogate escapes,
//! invalid UTF-8, NUL bytes, giant strings, CR/LF mixes — fed in random chunk sizes. Asserts no
//! panic and exactly one frame (so one response) per line. No extra crate: a xorshift generator.

use super::jsonl::{Frame, Framer};
use super::protocol::parse_record;

pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const VALID: [&str; 8] = [
    r#"{"type":"get_state"}"#,
    r#"{"id":1,"type":"get_messages"}"#,
    r#"{"id":"x","type":"prompt","message":"hi \u2028 there"}"#,
    r#"{"type":"set_thinking_level","level":"high"}"#,
    r#"{"type":"steer","message":"s","images":[{"type":"image","data":"QQ==","mimeType":"image/png"}]}"#,
    r#"{"id":null,"type":"nope"}"#,
    r#"{"type":"set_auto_retry","enabled":true}"#,
    r#"{"type":"get_entries","since":"abc"}"#,
];

/// One generated record body (without its LF). Never contains LF.
pub fn record(rng: &mut XorShift) -> Vec<u8> {
    let base = VALID[rng.below(VALID.len() as u64) as usize]
        .as_bytes()
        .to_vec();
    let mut out = match rng.below(12) {
        0..=2 => base,
        3 => base[..rng.below(base.len() as u64) as usize].to_vec(),
        4 => {
            let depth = 1 + rng.below(400) as usize;
            let mut v = "[".repeat(depth).into_bytes();
            v.extend(std::iter::repeat_n(
                b']',
                rng.below(depth as u64 + 1) as usize,
            ));
            v
        }
        5 => format!(
            r#"{{"id":{}{},"type":"get_state"}}"#,
            rng.next(),
            "9".repeat(rng.below(400) as usize)
        )
        .into_bytes(),
        6 => br#"{"type":"prompt","message":"\ud800 lone \udfff"}"#.to_vec(),
        7 => {
            let mut v = base;
            let at = rng.below(v.len() as u64) as usize;
            v.insert(at, [0xff, 0xfe, 0xc3, 0x80, 0xed][rng.below(5) as usize]);
            v
        }
        8 => {
            let mut v = base;
            let at = rng.below(v.len() as u64) as usize;
            v.insert(at, 0);
            v
        }
        9 => format!(
            r#"{{"type":"prompt","message":"{}"}}"#,
            "x".repeat(rng.below(100_000) as usize)
        )
        .into_bytes(),
        10 => {
            let mut v = base;
            v.push(b'\r');
            v
        }
        _ => (0..rng.below(64))
            .map(|_| (rng.below(255) + 1) as u8)
            .filter(|b| *b != b'\n')
            .collect(),
    };
    out.retain(|b| *b != b'\n');
    out
}

#[test]
fn a_million_hostile_records_frame_and_parse_without_panic() {
    let count: usize = std::env::var("PI_FUZZ_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            100_000
        } else {
            1_000_000
        });
    let mut rng = XorShift::new(0x5eed_1234);
    let mut framer = Framer::new(64 * 1024);
    let mut frames = Vec::new();
    let (mut lines, mut parsed, mut rejected, mut too_long) = (0usize, 0usize, 0usize, 0usize);
    let mut pending = Vec::new();
    for _ in 0..count {
        pending.extend(record(&mut rng));
        // Mostly LF, sometimes CRLF.
        if rng.below(10) == 0 {
            pending.push(b'\r');
        }
        pending.push(b'\n');
        lines += 1;
        // Feed in random chunk sizes, splitting records anywhere.
        while pending.len() > 4096 || (!pending.is_empty() && rng.below(4) == 0) {
            let take = 1 + rng.below(pending.len() as u64) as usize;
            framer.push(&pending[..take], &mut frames);
            pending.drain(..take);
        }
        for frame in frames.drain(..) {
            match frame {
                Frame::Record(bytes) => match parse_record(&bytes) {
                    Ok(_) => parsed += 1,
                    Err(r) => {
                        let _ = r.to_response();
                        rejected += 1;
                    }
                },
                Frame::TooLong { .. } => too_long += 1,
            }
        }
    }
    framer.push(&pending, &mut frames);
    framer.finish(&mut frames);
    for frame in frames.drain(..) {
        match frame {
            Frame::Record(bytes) => match parse_record(&bytes) {
                Ok(_) => parsed += 1,
                Err(_) => rejected += 1,
            },
            Frame::TooLong { .. } => too_long += 1,
        }
    }
    assert_eq!(parsed + rejected + too_long, lines, "one frame per line");
    assert!(
        parsed > 0 && rejected > 0 && too_long > 0,
        "{parsed} {rejected} {too_long}"
    );
}
