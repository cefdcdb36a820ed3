//! Error classification (pure): which failed replies are worth retrying and which mean the
//! context overflowed (FACTS §4.6, §10.3 — pi's own patterns), and the backoff delays.

use std::sync::OnceLock;
use std::time::Duration;

use super::pattern::Pattern;
use crate::messages::{AssistantMessage, StopReason};

const RETRYABLE: &str = r"overloaded|provider.?returned.?error|rate.?limit|too many requests|429|500|502|503|504|service.?unavailable|server.?error|internal.?error|network.?error|connection.?error|connection.?refused|connection.?lost|websocket.?closed|websocket.?error|other side closed|fetch failed|upstream.?connect|reset before headers|socket hang up|ended without|http2 request did not get a response|timed? out|timeout|terminated|retry delay";

/// pi 1.6.0's overflow patterns (`utils/overflow.js`), in its order; `[\w -]` is spelled
/// `[a-z0-9_ -]` (the matcher lowercases) and the bare `413` at the end is not matched (the matcher
/// has no `$`; every error text pi-rs makes has something after its status).
const OVERFLOW: &str = r"prompt (?:is )?too long|prompt exceeds max length|request_too_large|input is too long for requested model|exceeds the context window|exceeds (?:the )?(?:model'?s )?maximum context length(?: of [0-9,]+ tokens?|\s*\([0-9,]+\))|context window exceeded|input token count.*exceeds the maximum|maximum prompt length is \d+|reduce the length of the messages|maximum context length is \d+ tokens|exceeds (?:the )?maximum allowed input length of [0-9,]+ tokens?|input \(\d+ tokens\) is longer than the model'?s context length \(\d+ tokens\)|exceeds the limit of \d+|exceeds the available context size|greater than the context length|context window exceeds limit|exceeded model token limit|too large for model with \d+ maximum context length|prompt has [0-9,]+ tokens?, but the configured context size is [0-9,]+ tokens?|model_context_window_exceeded|prompt too long; exceeded (?:max )?context length|range of input length should be|context[_ ]length[_ ]exceeded|too many tokens|token limit exceeded|^(?:[a-z0-9_ -]+ api error \(413\):|413(?:\s|:))";

/// Cerebras answers an overflow with an empty 400/413 (pi 1.6.0 reads it so for that provider).
const CEREBRAS_BODYLESS_OVERFLOW: &str = r"^4(?:00|13)\s*(?:status code)?\s*\(no body\)";

const NOT_OVERFLOW: &str =
    r"^(?:throttling error|service unavailable):|rate limit|too many requests";

fn pattern(cell: &'static OnceLock<Pattern>, source: &str) -> &'static Pattern {
    cell.get_or_init(|| Pattern::new(source))
}

/// Whether a reply says the context window was exceeded.
pub fn is_context_overflow(message: &AssistantMessage, context_window: u64) -> bool {
    static OVERFLOW_P: OnceLock<Pattern> = OnceLock::new();
    static NOT_OVERFLOW_P: OnceLock<Pattern> = OnceLock::new();
    static CEREBRAS_P: OnceLock<Pattern> = OnceLock::new();
    if message.stop_reason == StopReason::Error
        && let Some(error) = &message.error_message
        && !pattern(&NOT_OVERFLOW_P, NOT_OVERFLOW).is_match(error)
        && (pattern(&OVERFLOW_P, OVERFLOW).is_match(error)
            || (message.provider == "cerebras"
                && pattern(&CEREBRAS_P, CEREBRAS_BODYLESS_OVERFLOW).is_match(error)))
    {
        return true;
    }
    let input = message.usage.input + message.usage.cache_read;
    if context_window > 0 && message.stop_reason == StopReason::Stop && input > context_window {
        return true;
    }
    context_window > 0
        && message.stop_reason == StopReason::Length
        && message.usage.output == 0
        && input as f64 >= context_window as f64 * 0.99
}

/// A transient failure: an error reply, not an overflow, whose text names a transient cause.
pub fn is_retryable(message: &AssistantMessage, context_window: u64) -> bool {
    static RETRYABLE_P: OnceLock<Pattern> = OnceLock::new();
    if message.stop_reason != StopReason::Error {
        return false;
    }
    let Some(error) = &message.error_message else {
        return false;
    };
    !is_context_overflow(message, context_window)
        && pattern(&RETRYABLE_P, RETRYABLE).is_match(error)
}

/// base · 2^(attempt−1).
pub fn backoff_delay(base_delay_ms: u64, attempt: u64) -> Duration {
    let shift = u32::try_from(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
    let factor = 1u64.checked_shl(shift).unwrap_or(u64::MAX);
    Duration::from_millis(base_delay_ms.saturating_mul(factor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> AssistantMessage {
        let mut m = AssistantMessage::empty("a", "p", "m");
        m.stop_reason = StopReason::Error;
        m.error_message = Some(text.into());
        m
    }

    #[test]
    fn classifies_like_pi() {
        assert!(is_retryable(
            &error(
                r#"529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            0
        ));
        assert!(is_retryable(&error("500 boom internal"), 0));
        assert!(is_retryable(&error("Connection refused (os error 111)"), 0));
        assert!(!is_retryable(
            &error(r#"400 {"error":{"message":"bad request"}}"#),
            0
        ));
        let overflow = error("400 Your input exceeds the context window of this model");
        assert!(is_context_overflow(&overflow, 0));
        assert!(!is_retryable(&overflow, 0));
        assert!(!is_context_overflow(
            &error("429 rate limit: too many tokens"),
            0
        ));
        // pi 1.6.0's 413 rule: its error prefixes and a raw status, not a status in a body.
        for text in [
            r#"OpenAI API error (413): {"message":"too big"}"#,
            "github-copilot API error (413): failed to parse request",
            r#"413: {"message":"x"}"#,
            "413 status code (no body)",
            "Input length 5 exceeds the maximum allowed input length of 1,000 tokens.",
            "This model's maximum context length is 8192 tokens",
        ] {
            assert!(is_context_overflow(&error(text), 0), "{text}");
        }
        assert!(!is_context_overflow(
            &error(r#"400: {"message":"limit 413"}"#),
            0
        ));
        // An empty 400 is an overflow only from Cerebras.
        assert!(!is_context_overflow(&error("400 status code (no body)"), 0));
        let mut cerebras = error("400 status code (no body)");
        cerebras.provider = "cerebras".into();
        assert!(is_context_overflow(&cerebras, 0));
        let mut big = AssistantMessage::empty("a", "p", "m");
        big.usage.input = 1001;
        assert!(is_context_overflow(&big, 1000));
    }

    #[test]
    fn delays_double() {
        assert_eq!(backoff_delay(2000, 1), Duration::from_millis(2000));
        assert_eq!(backoff_delay(2000, 3), Duration::from_millis(8000));
        assert_eq!(backoff_delay(2000, 200), Duration::from_millis(u64::MAX));
    }
}
