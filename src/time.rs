//! Time as pi writes it: Unix milliseconds, ISO-8601 UTC timestamps with milliseconds
//! (`2026-01-02T03:04:05.678Z`, what JavaScript's `Date.toISOString` prints), the one parser of
//! them back (the forms JavaScript's `Date` reads that pi's files hold), and the civil-date math
//! both use.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as pi stamps messages.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
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
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
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
    fn iso_fractions_of_any_length_read_like_javascript() {
        assert_eq!(ms_from_iso("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(
            ms_from_iso("2025-01-01T00:00:02.000Z"),
            Some(1_735_689_602_000)
        );
        assert_eq!(
            ms_from_iso("2024-02-29T23:59:59.5Z"),
            Some(1_709_251_199_500)
        );
        assert_eq!(
            ms_from_iso("2024-02-29T23:59:59.123456Z"),
            Some(1_709_251_199_123)
        );
        assert_eq!(ms_from_iso("yesterday"), None);
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        for days in [-800_000, -1, 0, 11_016, 20_454, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
