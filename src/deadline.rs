//! Deadlines and durations from numbers pi-rs does not control (a model's tool arguments, a
//! repository's settings, an extension's dialog timeout, a provider's `retry-after` header):
//! clamped into range, never a panic. `Duration::from_secs_f64(1e300)` and
//! `Instant::now() + Duration::MAX` both panic; these do not.

use std::time::{Duration, Instant};

/// Longer than anything pi-rs waits for on purpose (a day); larger numbers are clamped to it.
pub const MAX_WAIT: Duration = Duration::from_secs(86_400);

/// `seconds` as a duration: `None` for NaN, infinities, zero or less; at most `MAX_WAIT`.
pub fn seconds(seconds: f64) -> Option<Duration> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return None;
    }
    Some(Duration::from_secs_f64(seconds.min(MAX_WAIT.as_secs_f64())))
}

/// `now + wait`, with `wait` clamped to `MAX_WAIT`.
pub fn after(wait: Duration) -> Instant {
    Instant::now() + wait.min(MAX_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_numbers_are_clamped() {
        assert_eq!(seconds(1e300), Some(MAX_WAIT));
        assert_eq!(seconds(f64::NAN), None);
        assert_eq!(seconds(-1.0), None);
        assert_eq!(seconds(0.5), Some(Duration::from_millis(500)));
        assert!(after(Duration::MAX) > Instant::now());
    }
}
