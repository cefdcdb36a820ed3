//! The write tool: creates parent directories and writes the whole file, holding the per-file
//! lock so it never interleaves with an edit or write of the same file. The file is replaced
//! atomically (`disk::replace_file`): a reader sees the old contents or the new, never a part.
//!
//! Input: validated `{path, content}`. Output: `Successfully wrote <N> bytes to <path>`, where N
//! is the content's UTF-16 length (what the reference's `string.length` reports).

use serde_json::Value;

use super::path::{FileLock, node_fs_error};
use super::path_guard::{self, Access};
use super::truncate::utf16_len;
use super::{ToolContext, ToolOutput};
use crate::child::CancelFlag;
use crate::paths::resolve_to_cwd;

pub fn execute(
    args: &Value,
    context: &ToolContext,
    cancel: &CancelFlag,
) -> Result<ToolOutput, String> {
    let raw_path = args.get("path").and_then(Value::as_str).unwrap_or_default();
    let content = args
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let absolute = resolve_to_cwd(raw_path, &context.cwd);
    path_guard::check(&absolute, Access::Write)?;
    let _lock = FileLock::acquire(&absolute);
    if cancel.is_cancelled() {
        return Err(super::ABORTED.to_string());
    }
    match &context.client {
        Some(client) => {
            let old = super::client::old_text(client.as_ref(), &absolute, cancel);
            if client.writes_files() {
                // The folders on disk, the text into the editor (which saves it there).
                if let Some(parent) = absolute.parent() {
                    create_dirs(parent)?;
                }
                client.write_text_file(&absolute, content, cancel)?;
            } else {
                write_to_disk(&absolute, content)?;
            }
            if content.len() <= super::client::MAX_DIFF_BYTES {
                client.file_changed(&context.call_id, &absolute, old.as_deref(), content);
            }
        }
        None => write_to_disk(&absolute, content)?,
    }
    Ok(ToolOutput::text(format!(
        "Successfully wrote {} bytes to {raw_path}",
        utf16_len(content)
    )))
}

fn write_to_disk(absolute: &std::path::Path, content: &str) -> Result<(), String> {
    if let Some(parent) = absolute.parent() {
        create_dirs(parent)?;
    }
    crate::disk::replace_file(absolute, content.as_bytes())
        .map_err(|e| node_fs_error(&e, "open", absolute))
}

/// `mkdir -p` with Node's error text, naming the component that failed like `fs.mkdir` does.
fn create_dirs(dir: &std::path::Path) -> Result<(), String> {
    match std::fs::create_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(error) => {
            // Find the first ancestor that exists but is not a directory (the usual cause).
            let mut failing = dir.to_path_buf();
            for ancestor in dir.ancestors() {
                if ancestor.exists() {
                    if !ancestor.is_dir() {
                        failing = ancestor.to_path_buf();
                        let exists = std::io::Error::from_raw_os_error(libc::EEXIST);
                        return Err(node_fs_error(&exists, "mkdir", &failing));
                    }
                    break;
                }
            }
            Err(node_fs_error(&error, "mkdir", &failing))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::ContentBlock;
    use serde_json::json;

    #[test]
    fn writes_with_parents_and_counts_utf16() {
        let dir = std::env::temp_dir().join(format!("pi-rs-write-{}", crate::ids::random_hex16()));
        let ctx = ToolContext::for_test(&dir);
        let cancel = CancelFlag::default();
        let out = execute(
            &json!({"path":"sub/deep/f.txt","content":"héllo😀"}),
            &ctx,
            &cancel,
        )
        .unwrap();
        let ContentBlock::Text(text) = &out.content[0] else {
            panic!()
        };
        // "héllo" is 5 UTF-16 units, the emoji 2.
        assert_eq!(text.text, "Successfully wrote 7 bytes to sub/deep/f.txt");
        assert_eq!(out.details, None);
        assert_eq!(
            std::fs::read_to_string(dir.join("sub/deep/f.txt")).unwrap(),
            "héllo😀"
        );
        let err = execute(
            &json!({"path":"sub/deep/f.txt/x","content":"x"}),
            &ctx,
            &cancel,
        )
        .unwrap_err();
        assert_eq!(
            err,
            format!(
                "EEXIST: file already exists, mkdir '{}'",
                dir.join("sub/deep/f.txt").display()
            )
        );
        let err = execute(&json!({"path":"sub","content":"x"}), &ctx, &cancel).unwrap_err();
        assert_eq!(
            err,
            format!(
                "EISDIR: illegal operation on a directory, open '{}'",
                dir.join("sub").display()
            )
        );
        let cancelled = CancelFlag::default();
        cancelled.cancel();
        assert_eq!(
            execute(&json!({"path":"z","content":""}), &ctx, &cancelled).unwrap_err(),
            "Operation aborted"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
