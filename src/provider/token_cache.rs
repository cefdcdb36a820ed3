//! Short-lived credentials (Google ADC access tokens, AWS container credentials) shared by the
//! provider threads of one process: an entry is reused until shortly before it expires, so
//! consecutive requests do not each pay an exchange, and never after (the refresh margin covers
//! clock skew and a long request start).
//!
//! Input: a key naming the credential (never the secret itself), the token and its lifetime.
//! Output: the token while it is fresh. Nothing here blocks beyond a mutex held for a map lookup;
//! two threads that miss at once both fetch, and the later answer wins (harmless).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A token is not handed out in its last five minutes (google-auth-library's eager refresh).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

#[derive(Default)]
pub struct TokenCache {
    entries: Mutex<HashMap<String, (String, Instant)>>,
}

impl TokenCache {
    /// The cached token for `key` if it is still valid at `now` plus the refresh margin.
    pub fn get(&self, key: &str, now: Instant) -> Option<String> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(key) {
            Some((token, expires)) if now + REFRESH_MARGIN < *expires => Some(token.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// The cached token for `key` when more than `margin` of its life is left at `now`; unlike
    /// `get`, a staler entry is kept (a caller may still fall back on it).
    pub fn get_within(&self, key: &str, now: Instant, margin: Duration) -> Option<String> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, expires)| now + margin < *expires)
            .map(|(token, _)| token.clone())
    }

    /// Drops `key`'s token (the server refused it).
    pub fn forget(&self, key: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.remove(key);
    }

    pub fn put(&self, key: &str, token: String, lifetime: Duration, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.insert(key.to_string(), (token, now + lifetime));
    }
}

/// The process-wide cache (each request runs on its own thread).
pub fn shared() -> &'static TokenCache {
    static CACHE: OnceLock<TokenCache> = OnceLock::new();
    CACHE.get_or_init(TokenCache::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_reused_until_the_refresh_margin() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        assert_eq!(cache.get("sa:a@b", t0), None);
        cache.put("sa:a@b", "tok-1".into(), Duration::from_secs(3600), t0);
        assert_eq!(cache.get("sa:a@b", t0).as_deref(), Some("tok-1"));
        assert_eq!(cache.get("other", t0), None);
        let fresh_until = t0 + Duration::from_secs(3600) - REFRESH_MARGIN;
        assert_eq!(
            cache
                .get("sa:a@b", fresh_until - Duration::from_secs(1))
                .as_deref(),
            Some("tok-1")
        );
        assert_eq!(cache.get("sa:a@b", fresh_until), None);
        // An expired entry is gone, also for earlier instants.
        assert_eq!(cache.get("sa:a@b", t0), None);
        // A token shorter-lived than the margin is never handed out.
        cache.put("short", "tok-2".into(), Duration::from_secs(60), t0);
        assert_eq!(cache.get("short", t0), None);
    }

    #[test]
    fn a_margin_of_ones_own_keeps_the_stale_entry() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        cache.put("k", "tok".into(), Duration::from_secs(100), t0);
        let minute = Duration::from_secs(60);
        assert_eq!(cache.get_within("k", t0, minute).as_deref(), Some("tok"));
        let later = t0 + Duration::from_secs(50);
        assert_eq!(cache.get_within("k", later, minute), None);
        assert_eq!(
            cache
                .get_within("k", later, Duration::from_secs(30))
                .as_deref(),
            Some("tok")
        );
        cache.forget("k");
        assert_eq!(cache.get_within("k", t0, Duration::ZERO), None);
    }
}
