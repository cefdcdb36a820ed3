//! Random bytes and the ids made of them: UUIDs (v4 random, v7 time-ordered) and hex names for
//! temp files. One home, so every id in pi-rs comes from the same source.
//!
//! Randomness comes from `/dev/urandom`, read in blocks and handed out from a per-thread pool; if
//! the device cannot be read, bytes are derived from the clock, the pid and std's randomly keyed
//! hasher, which is enough for ids that only need to be unlikely to collide. (Secrets — OAuth
//! verifiers, signatures — use `ring`'s generator instead.)

use std::cell::RefCell;
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
    uuid_v7_at(crate::time::now_ms())
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

/// `n` random bytes as lowercase hex.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    random_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 16 random hex digits for temp file names.
pub fn random_hex16() -> String {
    random_hex(8)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn random_bytes_survive_a_missing_device() {
        let mut fallback = [0u8; 20];
        fallback_bytes(&mut fallback);
        assert!(fallback.iter().any(|&b| b != 0));
        let hex = random_hex16();
        assert_eq!(hex.len(), 16);
        assert!(hex.bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn random_uuids_are_version_4_and_differ() {
        let (a, b) = (uuid_v4(), uuid_v4());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    }
}
