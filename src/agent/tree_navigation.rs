//! (v2) Tree navigation from an extension (pi's `ctx.navigateTree`): the leaf moves to another
//! entry of the session, optionally leaving a `branch_summary` of the abandoned branch. The
//! `session_before_tree` hook comes first (it may cancel, give the summary, or change the
//! instructions and label); `session_tree` tells the extensions afterwards.
//!
//! pi-rs does not write a branch summary with the model itself: `summarize` needs the summary
//! from a `session_before_tree` answer when there is something to summarize.

use serde_json::{Map, Value, json};

use super::Agent;
use super::state::Phase;
use crate::extensions::protocol::{HookKind, TreeTarget};
use crate::extensions::{ExtensionId, HookId};

/// A navigation waiting for the `session_before_tree` hook.
pub struct PendingTree {
    pub hook: HookId,
    extension: ExtensionId,
    id: Option<String>,
    target: TreeTarget,
    old_leaf: Option<String>,
    /// Whether the abandoned branch has entries (a summary needs some).
    has_entries: bool,
}

/// pi's `collectEntriesForBranchSummary`: the entries from the old leaf back to the deepest
/// entry both paths share (exclusive), oldest first, and that shared entry's id.
fn entries_to_summarize(
    entries: &[Value],
    old_leaf: Option<&str>,
    target: &str,
) -> (Vec<Value>, Option<String>) {
    let Some(old_leaf) = old_leaf else {
        return (Vec::new(), None);
    };
    let path = |from: &str| -> Vec<&Value> {
        let by_id = |id: &str| entries.iter().find(|e| e["id"] == id);
        let mut path = Vec::new();
        let mut current = by_id(from);
        while let Some(entry) = current {
            if path.len() > entries.len() {
                break; // a cycle in a damaged file
            }
            path.push(entry);
            current = entry["parentId"].as_str().and_then(by_id);
        }
        path
    };
    let old_path = path(old_leaf);
    let common = path(target)
        .into_iter()
        .find(|e| old_path.iter().any(|o| o["id"] == e["id"]))
        .and_then(|e| e["id"].as_str().map(String::from));
    let mut abandoned: Vec<Value> = old_path
        .into_iter()
        .take_while(|e| e["id"].as_str() != common.as_deref())
        .cloned()
        .collect();
    abandoned.reverse();
    (abandoned, common)
}

impl Agent {
    pub(super) fn navigate_tree(
        &mut self,
        extension: ExtensionId,
        id: Option<String>,
        target: TreeTarget,
    ) {
        let answer = self.start_navigation(extension, id.clone(), target);
        if let Some(answer) = answer {
            self.answer_extension(extension, id, answer);
        }
    }

    /// Checks and starts a navigation; Some(answer) when it ends at once.
    fn start_navigation(
        &mut self,
        extension: ExtensionId,
        id: Option<String>,
        target: TreeTarget,
    ) -> Option<Result<Value, String>> {
        if matches!(self.phase, Phase::Compacting(_)) || self.extensions.tree.is_some() {
            return Some(Err("Wait for the current compaction or tree navigation to finish before navigating the session tree.".into()));
        }
        if self.is_busy() {
            return Some(Err(
                "Wait for the current response to finish before navigating the session tree."
                    .into(),
            ));
        }
        let old_leaf = self.session.leaf_id().map(String::from);
        if old_leaf.as_deref() == Some(target.target_id.as_str()) {
            return Some(Ok(json!({ "cancelled": false })));
        }
        if target.summarize && self.model.is_placeholder() {
            return Some(Err("No model available for summarization".into()));
        }
        if self.session.entry(&target.target_id).is_none() {
            return Some(Err(format!("Entry {} not found", target.target_id)));
        }
        let entries: Vec<Value> = self
            .session
            .entries()
            .iter()
            .map(|e| e.to_value())
            .collect();
        let (abandoned, common) =
            entries_to_summarize(&entries, old_leaf.as_deref(), &target.target_id);
        let preparation = json!({
            "targetId": target.target_id,
            "oldLeafId": old_leaf,
            "commonAncestorId": common,
            "entriesToSummarize": abandoned,
            "userWantsSummary": target.summarize,
            "customInstructions": target.custom_instructions,
            "replaceInstructions": target.replace_instructions,
            "label": target.label,
        });
        let pending = PendingTree {
            hook: HookId(0),
            extension,
            id,
            target,
            old_leaf,
            has_entries: !abandoned.is_empty(),
        };
        let deadline = self.extensions.hook_deadline;
        let hook = self.extensions.host.as_ref().and_then(|host| {
            host.start_hook(
                HookKind::SessionBeforeTree,
                json!({ "preparation": preparation }),
                deadline,
            )
        });
        match hook {
            Some(hook) => {
                self.extensions.tree = Some(PendingTree { hook, ..pending });
                None
            }
            None => {
                let (extension, id) = (pending.extension, pending.id.clone());
                let answer = self.finish_navigation(pending, false, Map::new());
                self.answer_extension(extension, id, answer);
                None
            }
        }
    }

    /// The `session_before_tree` hook answered. False when no navigation waited for it.
    pub(super) fn on_tree_hook(
        &mut self,
        hook: HookId,
        cancel: bool,
        answer: Map<String, Value>,
    ) -> bool {
        if self.extensions.tree.as_ref().map(|t| t.hook) != Some(hook) {
            return false;
        }
        let Some(pending) = self.extensions.tree.take() else {
            return false;
        };
        let (extension, id) = (pending.extension, pending.id.clone());
        let result = self.finish_navigation(pending, cancel, answer);
        self.answer_extension(extension, id, result);
        true
    }

    fn finish_navigation(
        &mut self,
        pending: PendingTree,
        cancel: bool,
        answer: Map<String, Value>,
    ) -> Result<Value, String> {
        if cancel {
            return Ok(json!({ "cancelled": true }));
        }
        if self.is_busy() {
            return Err(
                "Wait for the current response to finish before navigating the session tree."
                    .into(),
            );
        }
        let target = &pending.target;
        let label = match answer.get("label") {
            Some(label) => label.as_str().map(String::from),
            None => target.label.clone(),
        };
        let summary = answer.get("summary").filter(|_| target.summarize);
        if target.summarize && pending.has_entries && summary.is_none() {
            return Err("pi-rs does not summarize a branch itself: a session_before_tree answer must give the summary".into());
        }
        let Some(entry) = self.session.entry(&target.target_id) else {
            return Err(format!("Entry {} not found", target.target_id));
        };
        let value = entry.to_value();
        // A user or custom message is re-entered from its parent (pi puts its text in the
        // editor); any other entry becomes the leaf.
        let from_parent = (value["type"] == "message" && value["message"]["role"] == "user")
            || value["type"] == "custom_message";
        let new_leaf = if from_parent {
            entry.parent_id.clone()
        } else {
            Some(entry.id.clone())
        };
        let summary_entry = match summary {
            Some(summary) => {
                let text = summary["summary"].as_str().unwrap_or_default();
                let details = summary.get("details").filter(|d| !d.is_null()).cloned();
                let summary_id = self
                    .session
                    .branch_with_summary(new_leaf.as_deref(), text, details, Some(true))
                    .map_err(|e| e.to_string())?;
                if let Some(label) = &label {
                    self.session
                        .append_label(&summary_id, Some(label))
                        .map_err(|e| e.to_string())?;
                }
                self.session.entry(&summary_id).map(|e| e.to_value())
            }
            None => {
                match &new_leaf {
                    Some(leaf) => self.session.set_leaf(leaf).map_err(|e| e.to_string())?,
                    None => self.session.reset_leaf(),
                }
                if let Some(label) = &label {
                    self.session
                        .append_label(&target.target_id, Some(label))
                        .map_err(|e| e.to_string())?;
                }
                None
            }
        };
        self.messages = self.session.context().messages;
        self.request_cache.invalidate();
        // pi 1.6.0: the branch's own tool loadout, whatever the command line chose.
        self.restore_tools_from_transcript(&[]);
        let mut event = json!({
            "type": "session_tree",
            "newLeafId": self.session.leaf_id(),
            "oldLeafId": pending.old_leaf,
        });
        if let Some(entry) = summary_entry {
            event["summaryEntry"] = entry;
            event["fromExtension"] = json!(true);
        }
        self.notify_extensions_of(event);
        Ok(json!({ "cancelled": false }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abandoned_branch_runs_from_the_old_leaf_to_the_shared_entry() {
        // a ─ b ─ c (old leaf)
        //      └─ d (target)
        let entries = vec![
            json!({"id": "a", "parentId": null}),
            json!({"id": "b", "parentId": "a"}),
            json!({"id": "c", "parentId": "b"}),
            json!({"id": "d", "parentId": "b"}),
        ];
        let (abandoned, common) = entries_to_summarize(&entries, Some("c"), "d");
        assert_eq!(abandoned, vec![entries[2].clone()]);
        assert_eq!(common.as_deref(), Some("b"));
        // Back to an ancestor: everything after it is abandoned, oldest first.
        let (abandoned, common) = entries_to_summarize(&entries, Some("c"), "a");
        assert_eq!(abandoned, vec![entries[1].clone(), entries[2].clone()]);
        assert_eq!(common.as_deref(), Some("a"));
        assert_eq!(entries_to_summarize(&entries, None, "a"), (vec![], None));
    }
}
