//! The ls tool: one directory's entries, sorted like the reference (lower-cased, ICU-style
//! collation), directories suffixed with `/`, dotfiles included, with limit and size notices.
//!
//! Input: validated `{path?, limit?}`. Output: the listing or `Path not found` / `Not a directory`.

use std::cmp::Ordering;

use serde_json::Value;

use super::path::node_fs_error;
use super::truncate::listing_output;
use super::{ABORTED, ToolContext, ToolOutput, number_arg};
use crate::child::CancelFlag;
use crate::js::{js_number_string, number_value};

pub const DEFAULT_LIMIT: usize = 500;

/// ICU root order of the printable ASCII characters (lower case), as `localeCompare` sorts them.
const ICU_ASCII_ORDER: &str =
    " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz";

/// Collation weight of one lower-cased char: ASCII by ICU order, anything else after ASCII in
/// code point order (we do not model ICU's accent folding, e.g. é sorting beside e).
fn weight(ch: char) -> u32 {
    match ICU_ASCII_ORDER.find(ch) {
        Some(index) => index as u32,
        None => 0x100 + ch as u32,
    }
}

/// `a.toLowerCase().localeCompare(b.toLowerCase())`, approximated.
pub fn compare_names(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.to_lowercase(), b.to_lowercase());
    a.chars().map(weight).cmp(b.chars().map(weight))
}

pub fn execute(
    args: &Value,
    context: &ToolContext,
    cancel: &CancelFlag,
) -> Result<ToolOutput, String> {
    let limit = number_arg(args, "limit").unwrap_or(DEFAULT_LIMIT as f64);
    let dir = context.listing_path(args)?;
    let Ok(metadata) = std::fs::metadata(&dir) else {
        return Err(format!("Path not found: {}", dir.display()));
    };
    if !metadata.is_dir() {
        return Err(format!("Not a directory: {}", dir.display()));
    }
    let read = std::fs::read_dir(&dir).map_err(|e| {
        format!(
            "Cannot read directory: {}",
            node_fs_error(&e, "scandir", &dir)
        )
    })?;
    // (shown name, real name): a name that is not UTF-8 is shown lossily but stat'ed as it is.
    let mut names: Vec<(String, std::ffi::OsString)> = read
        .filter_map(Result::ok)
        .map(|e| (e.file_name().to_string_lossy().to_string(), e.file_name()))
        .collect();
    names.sort_by(|a, b| compare_names(&a.0, &b.0));
    let mut results = Vec::new();
    let mut limit_reached = false;
    for (name, real_name) in names {
        if cancel.is_cancelled() {
            return Err(ABORTED.to_string());
        }
        if results.len() as f64 >= limit {
            limit_reached = true;
            break;
        }
        // stat follows symlinks; entries that cannot be stat'ed (broken links) are left out.
        let Ok(meta) = std::fs::metadata(dir.join(&real_name)) else {
            continue;
        };
        results.push(if meta.is_dir() {
            format!("{name}/")
        } else {
            name
        });
    }
    if results.is_empty() {
        return Ok(ToolOutput::text("(empty directory)"));
    }
    let notice = limit_reached.then(|| {
        let text = format!(
            "{} entries limit reached. Use limit={} for more",
            js_number_string(limit),
            js_number_string(limit * 2.0)
        );
        (text, "entryLimitReached", number_value(limit))
    });
    Ok(listing_output(&results.join("\n"), notice))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn listing_matches_reference_order_and_notices() {
        let dir = std::env::temp_dir().join(format!("pi-rs-ls-{}", crate::ids::random_hex16()));
        for sub in ["src", ".hidden", "Docs"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        for file in ["readme.txt", "_under", "Zeta", "alpha", "1num"] {
            std::fs::write(dir.join(file), "").unwrap();
        }
        let ctx = ToolContext::for_test(&dir);
        let cancel = CancelFlag::default();
        // Expected strings produced by the reference ls tool on the same tree.
        let out = execute(&json!({}), &ctx, &cancel).unwrap();
        assert_eq!(
            out.first_text(),
            "_under\n.hidden/\n1num\nalpha\nDocs/\nreadme.txt\nsrc/\nZeta"
        );
        assert_eq!(out.details, None);
        let out = execute(&json!({"limit":2}), &ctx, &cancel).unwrap();
        assert_eq!(
            out.first_text(),
            "_under\n.hidden/\n\n[2 entries limit reached. Use limit=4 for more]"
        );
        assert_eq!(out.details, Some(json!({"entryLimitReached":2})));
        assert_eq!(
            execute(&json!({"path":"Docs"}), &ctx, &cancel)
                .unwrap()
                .first_text(),
            "(empty directory)"
        );
        let err = execute(&json!({"path":"alpha"}), &ctx, &cancel).unwrap_err();
        assert_eq!(
            err,
            format!("Not a directory: {}", dir.join("alpha").display())
        );
        let err = execute(&json!({"path":"nope"}), &ctx, &cancel).unwrap_err();
        assert_eq!(
            err,
            format!("Path not found: {}", dir.join("nope").display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
