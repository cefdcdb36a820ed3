//! What the resource loaders (discovery, skills, prompt templates) share about files: where a
//! resource came from (`SourceInfo`, from its leaf module) and directory listings in Node's order (the ignore rules
//! they honor are `crate::ignore`'s, in pi's style). Its own module so the loaders do not import one
//! another in a circle.

use std::path::{Path, PathBuf};

pub use crate::source_info::SourceInfo;

/// Directory entries as (name, path), sorted by name bytes: Node's `readdirSync` returns them
/// sorted, and the order decides collisions. Unreadable directories give nothing.
pub(crate) fn read_dir_sorted(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut entries: Vec<(String, PathBuf)> = read
        .filter_map(Result::ok)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    entries
}
