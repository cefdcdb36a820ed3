//! Helpers for the unit tests beside the code (compiled only for tests).

use std::path::PathBuf;

/// A fresh directory under the system temp dir, named after `tag` plus random hex (tests remove
/// it when they pass).
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pi-rs-{tag}-{}", crate::ids::random_hex(6)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
