//! Provider-level retries (settings `retry.provider.maxRetries`, pi ≥ 0.76): a request that fails
//! before its stream opens — 408, 409, 429, 5xx, or no response at all — is sent again inside the
//! provider thread, silently (no event), after a backoff or the server's `retry-after`. Default 0:
//! no retry here, failures go to the agent's own `auto_retry` which the client sees.
//!
//! Pure policy only: which failures are retried and how long to wait. The wait itself happens in
//! `provider::run_stream` on a channel the `StreamHandle` owns, so abort ends it at once.

use std::time::Duration;

/// The settings this policy reads; they live in config, which builds them.
pub use crate::config::ProviderRetry;

/// A request that failed before its stream opened.
#[derive(Debug)]
pub struct EarlyFailure {
    /// `None`: no response (connection refused, reset, timed out).
    pub status: Option<u16>,
    /// `x-should-retry: true|false`, which overrides the status (as the SDKs honour it).
    pub should_retry: Option<bool>,
    /// `retry-after-ms` / `retry-after`, when sent.
    pub server_delay: Option<Duration>,
    /// The error text the request would end with.
    pub message: String,
    /// The `error.details.error_code` of a JSON error body (Anthropic's thread rejections).
    pub error_code: Option<String>,
    /// The API said the request's strict tools exceed Claude's limits, in these words
    /// (`strict_limits`).
    pub strict_limits: Option<String>,
}

/// What to do after an early failure.
#[derive(Debug, PartialEq)]
pub enum Decision {
    RetryAfter(Duration),
    /// Give up with this message.
    Fail(String),
}

/// The SDKs' policy: `x-should-retry` first, then no response / 408 / 409 / 429 / ≥ 500.
fn is_retryable(failure: &EarlyFailure) -> bool {
    if let Some(forced) = failure.should_retry {
        return forced;
    }
    match failure.status {
        None => true,
        Some(status) => matches!(status, 408 | 409 | 429) || status >= 500,
    }
}

/// `retries_done` retries were made already. `jitter` in [0, 1) shortens the backoff by up to a
/// quarter, so clients retrying together spread out.
pub fn decide(
    policy: &ProviderRetry,
    failure: EarlyFailure,
    retries_done: u32,
    jitter: f64,
) -> Decision {
    if retries_done >= policy.max_retries || !is_retryable(&failure) {
        return Decision::Fail(failure.message);
    }
    if let Some(asked) = failure.server_delay {
        return match policy.max_server_delay {
            Some(limit) if asked > limit => Decision::Fail(format!(
                "Server requested {}s retry delay (max: {}s). {}",
                ceil_secs(asked),
                ceil_secs(limit),
                failure.message
            )),
            _ => Decision::RetryAfter(asked),
        };
    }
    // 0.5 s, 1 s, 2 s, … capped at 8 s.
    let base = (0.5 * 2f64.powi(retries_done.min(16) as i32)).min(8.0);
    Decision::RetryAfter(Duration::from_secs_f64(
        base * (1.0 - jitter.clamp(0.0, 1.0) * 0.25),
    ))
}

fn ceil_secs(delay: Duration) -> u128 {
    delay.as_millis().div_ceil(1000)
}

/// An HTTP date in the IMF-fixdate form servers send in `retry-after`
/// (`Wed, 21 Oct 2015 07:28:00 GMT`).
pub fn parse_http_date(text: &str) -> Option<std::time::SystemTime> {
    let mut parts = text.split_whitespace();
    let _weekday = parts.next()?;
    let day: u64 = parts.next()?.parse().ok()?;
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month_name = parts.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? as u64 + 1;
    let year: u64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':').map(|p| p.parse::<u64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || year < 1970 || hour > 23 {
        return None;
    }
    // Days since 1970-01-01 (Howard Hinnant's days_from_civil, years ≥ 1970 only).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = (era * 146_097 + day_of_era).checked_sub(719_468)?;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(seconds))
}

/// A cheap jitter source in [0, 1): the clock's sub-second nanoseconds.
pub fn clock_jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    f64::from(nanos) / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(status: Option<u16>) -> EarlyFailure {
        EarlyFailure {
            status,
            should_retry: None,
            server_delay: None,
            message: "500 boom".into(),
            error_code: None,
            strict_limits: None,
        }
    }

    fn policy(max_retries: u32) -> ProviderRetry {
        ProviderRetry {
            max_retries,
            ..ProviderRetry::default()
        }
    }

    #[test]
    fn default_policy_never_retries() {
        let decision = decide(&ProviderRetry::default(), failure(Some(500)), 0, 0.0);
        assert_eq!(decision, Decision::Fail("500 boom".into()));
    }

    #[test]
    fn transient_statuses_and_no_response_are_retried_others_are_not() {
        for status in [None, Some(408), Some(409), Some(429), Some(500), Some(529)] {
            assert!(
                matches!(
                    decide(&policy(2), failure(status), 0, 0.0),
                    Decision::RetryAfter(_)
                ),
                "{status:?}"
            );
        }
        for status in [400, 401, 403, 404, 422] {
            assert!(matches!(
                decide(&policy(2), failure(Some(status)), 0, 0.0),
                Decision::Fail(_)
            ));
        }
        let mut forced = failure(Some(400));
        forced.should_retry = Some(true);
        assert!(matches!(
            decide(&policy(1), forced, 0, 0.0),
            Decision::RetryAfter(_)
        ));
        let mut refused = failure(Some(503));
        refused.should_retry = Some(false);
        assert!(matches!(
            decide(&policy(1), refused, 0, 0.0),
            Decision::Fail(_)
        ));
    }

    #[test]
    fn backoff_doubles_from_half_a_second_up_to_eight_with_jitter() {
        let delay = |n, jitter| match decide(&policy(10), failure(Some(500)), n, jitter) {
            Decision::RetryAfter(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!(delay(0, 0.0), Duration::from_millis(500));
        assert_eq!(delay(1, 0.0), Duration::from_secs(1));
        assert_eq!(delay(5, 0.0), Duration::from_secs(8));
        assert_eq!(delay(9, 0.0), Duration::from_secs(8));
        assert_eq!(
            delay(0, 0.999_999),
            Duration::from_secs_f64(0.5 * 0.75000025)
        );
    }

    #[test]
    fn http_dates_parse_to_their_instant() {
        let at = |text| {
            parse_http_date(text)
                .map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs())
        };
        assert_eq!(at("Wed, 21 Oct 2015 07:28:00 GMT"), Some(1_445_412_480));
        assert_eq!(at("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(at("Tue, 29 Feb 2028 23:59:59 GMT"), Some(1_835_481_599));
        assert_eq!(at("21 Oct 2015"), None);
        assert_eq!(at("Wed, 21 Foo 2015 07:28:00 GMT"), None);
        assert_eq!(at("Wed, 21 Oct 2015 07:28:00 PST"), None);
    }

    #[test]
    fn retries_stop_after_the_limit() {
        assert!(matches!(
            decide(&policy(2), failure(Some(500)), 2, 0.0),
            Decision::Fail(_)
        ));
    }

    #[test]
    fn server_delay_is_honoured_up_to_the_limit() {
        let mut asked = failure(Some(429));
        asked.server_delay = Some(Duration::from_millis(1500));
        assert_eq!(
            decide(&policy(1), asked, 0, 0.5),
            Decision::RetryAfter(Duration::from_millis(1500))
        );
        let mut too_long = failure(Some(429));
        too_long.server_delay = Some(Duration::from_secs(120));
        assert_eq!(
            decide(&policy(1), too_long, 0, 0.0),
            Decision::Fail("Server requested 120s retry delay (max: 60s). 500 boom".into())
        );
        let mut unlimited = failure(Some(429));
        unlimited.server_delay = Some(Duration::from_secs(120));
        let no_limit = ProviderRetry {
            max_retries: 1,
            max_server_delay: None,
        };
        assert_eq!(
            decide(&no_limit, unlimited, 0, 0.0),
            Decision::RetryAfter(Duration::from_secs(120))
        );
    }
}
