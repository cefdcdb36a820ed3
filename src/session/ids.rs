//! Identifiers and clocks for session files: UUIDv7 session ids, 8-hex entry ids, and ISO-8601
//! UTC timestamps with milliseconds (`2026-01-02T03:04:05.678Z`, what JavaScript's
//! `Date.toISOString` prints), plus the reverse parse used to order tree children.
//!
//! Randomness comes from `/dev/urandom`, read in blocks and handed out from a per-thread pool; if
//! the device cannot be read, bytes are derived from the clock, the pid and std's randomly keyed
//! hasher, which is enough for ids that only need to be unlikely to collide.

use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static RANDOM_POOL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Fills `out` with random bytes.
pub fn random_bytes(out: &mut [u8]) {
    RANDOM_POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        for byte in out.iter_mut() {
            if pool.is_empty() {
                refill(&mut pool);
            }
            // refill always leaves at least one byte behind.
            *byte = pool.pop().unwrap_or(0);
        }
    });
}

fn refill(pool: &mut Vec<u8>) {
    let mut block = vec![0u8; 1024];
    let from_device = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut block))
        .is_ok();
    if !from_device {
        fallback_bytes(&mut block);
    }
    pool.extend_from_slice(&block);
}

/// Clock + pid + a counter through std's SipHash with per-process random keys.
fn fallback_bytes(out: &mut [u8]) {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let keys = std::collections::hash_map::RandomState::new();
    for chunk in out.chunks_mut(8) {
        let mut hasher = keys.build_hasher();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        hasher.write_u128(nanos);
        hasher.write_u32(std::process::id());
        hasher.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let value = hasher.finish().to_le_bytes();
        chunk.copy_from_slice(&value[..chunk.len()]);
    }
}

fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A random (version 4) UUID.
pub fn uuid_v4() -> String {
    let mut bytes = [0u8; 16];
    random_bytes(&mut bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    format_uuid(&bytes)
}

/// A time-ordered (version 7) UUID: 48 bits of Unix milliseconds, then random bits.
pub fn uuid_v7() -> String {
    uuid_v7_at(now_ms())
}

fn uuid_v7_at(ms: i64) -> String {
    let mut bytes = [0u8; 16];
    random_bytes(&mut bytes[6..]);
    let ms = (ms.max(0) as u64).to_be_bytes();
    bytes[..6].copy_from_slice(&ms[2..8]);
    bytes[6] = (bytes[6] & 0x0f) | 0x70;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    format_uuid(&bytes)
}

/// An entry id: 8 hex characters not yet used in `taken`; after 100 collisions (practically never)
/// a whole UUID, as pi does.
pub fn entry_id(taken: &dyn Fn(&str) -> bool) -> String {
    for _ in 0..100 {
        let mut bytes = [0u8; 4];
        random_bytes(&mut bytes);
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        if !taken(&id) {
            return id;
        }
    }
    uuid_v4()
}

/// Convenience for callers holding a plain set of ids.
pub fn entry_id_not_in(taken: &HashSet<String>) -> String {
    entry_id(&|id| taken.contains(id))
}

pub fn now_ms() -> i64 {
    crate::messages::now_ms()
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn now_iso() -> String {
    iso_from_ms(now_ms())
}

/// Unix milliseconds → `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, proleptic Gregorian).
pub fn iso_from_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (in_day / 3_600_000, in_day / 60_000 % 60);
    let (second, milli) = (in_day / 1000 % 60, in_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z")
}

/// Parses the ISO forms pi writes (and the common variants `Date` accepts: no fraction, fewer or
/// more fraction digits, `+hh:mm` offsets). None for anything else.
pub fn ms_from_iso(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || (b[10] != b'T' && b[10] != b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut pos = 19;
    let mut millis = 0i64;
    if b.get(pos) == Some(&b'.') {
        let start = pos + 1;
        let mut end = start;
        while end < b.len() && b[end].is_ascii_digit() {
            end += 1;
        }
        if end == start {
            return None;
        }
        let digits = &text[start..end.min(start + 3)];
        millis = digits.parse::<i64>().ok()? * 10i64.pow(3 - digits.len() as u32);
        pos = end;
    }
    let offset_minutes = match b.get(pos) {
        Some(b'Z') if pos + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if b.len() == pos + 6 && b[pos + 3] == b':' => {
            let minutes = num(pos + 1..pos + 3)? * 60 + num(pos + 4..pos + 6)?;
            if *sign == b'+' { minutes } else { -minutes }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    Some(
        days * 86_400_000 + (hour * 3600 + minute * 60 + second) * 1000 + millis
            - offset_minutes * 60_000,
    )
}

// Howard Hinnant's civil-date algorithms.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_formatting_matches_javascript() {
        assert_eq!(iso_from_ms(0), "1970-01-01T00:00:00.000Z");
        // new Date(1767323045678).toISOString()
        assert_eq!(iso_from_ms(1_767_323_045_678), "2026-01-02T03:04:05.678Z");
        assert_eq!(iso_from_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn iso_parse_inverts_format() {
        for ms in [0, 1_767_323_045_678, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(ms_from_iso(&iso_from_ms(ms)), Some(ms));
        }
        assert_eq!(ms_from_iso("2026-01-02T03:04:05Z"), Some(1_767_323_045_000));
        assert_eq!(
            ms_from_iso("2026-01-02T04:04:05.678+01:00"),
            Some(1_767_323_045_678)
        );
        assert_eq!(ms_from_iso("garbage"), None);
        assert_eq!(ms_from_iso("2026-13-02T03:04:05.678Z"), None);
        assert_eq!(ms_from_iso("2026-01-02T03:04:05.678"), None);
    }

    #[test]
    fn uuid_v7_layout() {
        let id = uuid_v7_at(1_767_323_045_678);
        assert_eq!(id.len(), 36);
        assert!(id.starts_with("019b7ca9-8f2e-7")); // 0x019b7ca98f2e = 1767323045678 ms
        assert_eq!(&id[14..15], "7");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(uuid_v7(), uuid_v7());
    }

    #[test]
    fn entry_ids_are_8_hex_and_avoid_taken() {
        let id = entry_id(&|_| false);
        assert_eq!(id.len(), 8);
        assert!(id.bytes().all(|c| c.is_ascii_hexdigit()));
        // Everything taken: falls back to a whole UUID.
        assert_eq!(entry_id(&|_| true).len(), 36);
        let mut fallback = [0u8; 20];
        fallback_bytes(&mut fallback);
        assert!(fallback.iter().any(|&b| b != 0));
    }
}
