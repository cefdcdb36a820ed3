//! Read-only views over a session's entries: the path from a leaf to the root, the context that
//! path yields for the model (pi's buildSessionContext, compaction included) and the whole tree
//! for clients (pi's getTree). Input: entries in file order plus an id index. Output: messages and
//! JSON values. Every walk is iterative and linear, so 100k-entry sessions (a 100k-deep chain)
//! neither take quadratic time nor overflow the stack.

use std::collections::HashMap;

#[cfg(test)]
use serde_json::{Map, Value, json};

use super::entry::{EntryKind, SessionEntry};
use super::index::IdIndex;
use crate::config::ThinkingLevel;
use crate::messages::{
    AgentMessage, BranchSummaryMessage, CompactionSummaryMessage, CustomMessage,
};

/// A label on an entry: its text and the timestamp of the label entry that set it.
#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    pub text: String,
    pub timestamp: String,
}

/// Indexes of the entries from the root to `leaf` (inclusive), root first. A parent cycle in a
/// damaged file stops the walk instead of looping.
pub fn path_to(entries: &[SessionEntry], by_id: &IdIndex, leaf: usize) -> Vec<usize> {
    let mut path = vec![leaf];
    let mut current = leaf;
    while let Some(parent) = by_id.parent(entries, current) {
        if path.len() > entries.len() {
            log::warn!(
                "Session entries form a parent cycle at {}",
                entries[current].id
            );
            break;
        }
        current = parent;
        path.push(current);
    }
    path.reverse();
    path
}

/// What the path says: messages for the model, the last thinking level and model. Each
/// message held as text is typed once, here, into the list the agent keeps.
pub fn context(
    entries: &[SessionEntry],
    by_id: &IdIndex,
    leaf: Option<usize>,
) -> super::SessionContext {
    let mut result = super::SessionContext::default();
    let Some(leaf) = leaf else { return result };
    let path = path_to(entries, by_id, leaf);
    // The last thinking level and model on the path win: found from the end, so only the one
    // deciding message is typed for it.
    result.thinking_level = path
        .iter()
        .rev()
        .find_map(|&i| match &entries[i].kind {
            EntryKind::ThinkingLevelChange { thinking_level } => Some(thinking_level),
            _ => None,
        })
        .and_then(|level| ThinkingLevel::parse(level));
    // The latest model_change, or a later reply: a failed route's reply names the virtual model,
    // not one that answered, and does not count (pi 1.6.0's `getBranchSelection`).
    let deciding = path.iter().rposition(|&i| match &entries[i].kind {
        EntryKind::ModelChange { .. } => true,
        EntryKind::Message(message) if message.is_assistant() => matches!(
            message.get().as_deref(),
            Some(AgentMessage::Assistant(a)) if a.api != crate::config::model::VIRTUAL_MODEL_API
        ),
        _ => false,
    });
    let model_change = |i: usize| match &entries[i].kind {
        EntryKind::ModelChange { provider, model_id } => Some((provider.clone(), model_id.clone())),
        _ => None,
    };
    if let Some(at) = deciding {
        result.model =
            model_change(path[at]).or_else(|| match entries[path[at]].message().as_deref() {
                Some(AgentMessage::Assistant(a)) => Some((a.provider.clone(), a.model.clone())),
                _ => None,
            });
        if model_change(path[at]).is_none() {
            result.selected_before_reply = path[..at].iter().rev().find_map(|&i| model_change(i));
        }
    }
    let compaction_at = path
        .iter()
        .rposition(|&i| matches!(entries[i].kind, EntryKind::Compaction { .. }));
    let Some(compaction_at) = compaction_at else {
        let edits = ContextEdits::of(entries, &path);
        result.messages = context_messages(entries, &path, &edits);
        return result;
    };
    let compaction = &entries[path[compaction_at]];
    if let EntryKind::Compaction {
        summary,
        first_kept_entry_id,
        tokens_before,
        system_message,
        ..
    } = &compaction.kind
    {
        // Kept entries: from firstKeptEntryId up to the compaction (none if the id is not on the
        // path, as in pi).
        let kept_from = path[..compaction_at]
            .iter()
            .position(|&i| entries[i].id == *first_kept_entry_id);
        let kept = kept_from.map_or(&[][..], |from| &path[from..compaction_at]);
        let after = &path[compaction_at + 1..];
        // Edits count from the entries the context is built of (pi 1.6.0's projection).
        let mut edits = ContextEdits::of(entries, kept);
        edits.extend(entries, after);
        let mut messages =
            Vec::with_capacity(2 + countable(entries, kept) + countable(entries, after));
        // The prompt state the compaction kept (pi 1.6.0) leads; the kept entries' own system
        // messages are part of it, so they are left out.
        let system = system_message
            .as_ref()
            .and_then(|value| serde_json::from_value::<AgentMessage>(value.clone()).ok())
            .filter(|m| matches!(m, AgentMessage::System(_)));
        messages.extend(system);
        messages.push(AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: summary.clone(),
            tokens_before: *tokens_before,
            timestamp: entry_ms(compaction),
        }));
        messages.extend(
            kept.iter()
                .filter_map(|&i| edits.project(&entries[i]))
                .filter(|m| !matches!(m, AgentMessage::System(_))),
        );
        messages.extend(after.iter().filter_map(|&i| edits.project(&entries[i])));
        result.messages = messages;
    }
    result
}

/// The messages of the entries at `path`, in a list of (almost always) exactly the right size:
/// the caller keeps it for the whole run, and a doubled list of 100k messages wastes tens of MB.
fn context_messages(
    entries: &[SessionEntry],
    path: &[usize],
    edits: &ContextEdits,
) -> Vec<AgentMessage> {
    let mut messages = Vec::with_capacity(countable(entries, path));
    messages.extend(path.iter().filter_map(|&i| edits.project(&entries[i])));
    messages
}

/// pi 1.6.0's `context_edit` entries (append-only edits of the model's context): per target
/// entry id, the latest edit's replacement — `None` leaves the target out, else its `content`
/// replaces the message's. The raw entries stay as they are.
#[derive(Default)]
pub struct ContextEdits {
    latest: HashMap<String, Option<serde_json::Value>>,
}

impl ContextEdits {
    fn of(entries: &[SessionEntry], range: &[usize]) -> ContextEdits {
        let mut edits = ContextEdits::default();
        edits.extend(entries, range);
        edits
    }

    /// The edits among `entries` (a branch summary's entries, say), the latest per target.
    pub fn among<'a>(entries: impl IntoIterator<Item = &'a SessionEntry>) -> ContextEdits {
        let mut edits = ContextEdits::default();
        edits.add(entries);
        edits
    }

    fn extend(&mut self, entries: &[SessionEntry], range: &[usize]) {
        self.add(range.iter().map(|&i| &entries[i]));
    }

    fn add<'a>(&mut self, entries: impl IntoIterator<Item = &'a SessionEntry>) {
        for entry in entries {
            let EntryKind::Unknown(value) = &entry.kind else {
                continue;
            };
            if value["type"] != "context_edit" {
                continue;
            }
            let Some(target) = value["targetId"].as_str() else {
                continue;
            };
            let replacement = match &value["replacement"] {
                serde_json::Value::Null => None,
                other => Some(other["content"].clone()),
            };
            self.latest.insert(target.to_string(), replacement);
        }
    }

    /// The entry's context message with its latest edit applied.
    pub fn project(&self, entry: &SessionEntry) -> Option<AgentMessage> {
        let Some(edit) = self.latest.get(&entry.id) else {
            return context_message(entry);
        };
        let mut message = context_message(entry)?;
        let content = edit.as_ref()?;
        // Assistant and tool-result content is a list: a text replacement becomes one block.
        let blocks = || -> Option<Vec<crate::messages::ContentBlock>> {
            match content {
                serde_json::Value::String(text) => Some(vec![crate::messages::ContentBlock::Text(
                    crate::messages::TextContent::new(text),
                )]),
                other => serde_json::from_value(other.clone()).ok(),
            }
        };
        let user_content =
            || serde_json::from_value::<crate::messages::UserContent>(content.clone());
        match &mut message {
            AgentMessage::User(user) => match user_content() {
                Ok(replaced) => user.content = replaced,
                Err(e) => log::warn!("context_edit of {}: bad content: {e}", entry.id),
            },
            AgentMessage::Custom(custom) => match user_content() {
                Ok(replaced) => custom.content = replaced,
                Err(e) => log::warn!("context_edit of {}: bad content: {e}", entry.id),
            },
            AgentMessage::Assistant(assistant) => match blocks() {
                Some(replaced) => assistant.content = replaced,
                None => log::warn!("context_edit of {}: bad content", entry.id),
            },
            AgentMessage::ToolResult(result) => match blocks() {
                Some(replaced) => result.content = replaced,
                None => log::warn!("context_edit of {}: bad content", entry.id),
            },
            _ => {}
        }
        Some(message)
    }
}

/// How many of the entries at `path` may contribute a message (a message that does not type
/// is counted: finding out would type it twice).
fn countable(entries: &[SessionEntry], path: &[usize]) -> usize {
    path.iter()
        .filter(|&&i| match &entries[i].kind {
            EntryKind::Message(_) | EntryKind::CustomMessage { .. } => true,
            EntryKind::BranchSummary { summary, .. } => !summary.is_empty(),
            _ => false,
        })
        .count()
}

/// The message an entry contributes to the model's context, if any (the context rebuild and
/// compaction's view of a branch both use it).
pub fn context_message(entry: &SessionEntry) -> Option<AgentMessage> {
    match &entry.kind {
        EntryKind::Message(message) => message.get().map(std::borrow::Cow::into_owned),
        EntryKind::CustomMessage {
            custom_type,
            content,
            display,
            details,
        } => Some(AgentMessage::Custom(CustomMessage {
            custom_type: custom_type.clone(),
            content: content.clone(),
            display: *display,
            details: details.clone(),
            timestamp: entry_ms(entry),
        })),
        // pi skips a branch summary with an empty summary.
        EntryKind::BranchSummary {
            from_id, summary, ..
        } if !summary.is_empty() => Some(AgentMessage::BranchSummary(BranchSummaryMessage {
            summary: summary.clone(),
            from_id: from_id.clone(),
            timestamp: entry_ms(entry),
        })),
        _ => None,
    }
}

/// The entry's ISO timestamp in milliseconds (0 if unreadable; pi would produce NaN → null).
fn entry_ms(entry: &SessionEntry) -> i64 {
    crate::time::ms_from_iso(&entry.timestamp).unwrap_or(0)
}

/// The tree's shape: the roots, and for each node the indexes of its children, sorted by entry
/// timestamp. Entries repeated under the same id (a damaged file) appear once, as their last copy.
pub struct TreeShape {
    pub roots: Vec<usize>,
    /// All children lists back to back, node by node (one allocation, not one per node).
    children: Vec<usize>,
    /// Node `i`'s children are `children[starts[i]..starts[i + 1]]`.
    starts: Vec<usize>,
}

impl TreeShape {
    pub fn children(&self, index: usize) -> &[usize] {
        &self.children[self.starts[index]..self.starts[index + 1]]
    }
}

pub fn shape(entries: &[SessionEntry], by_id: &IdIndex) -> TreeShape {
    const ROOT: usize = usize::MAX;
    let mut roots = Vec::new();
    // Each indexed node's parent (ROOT for roots and unindexed entries), and child counts.
    let mut parents = vec![ROOT; entries.len()];
    let mut counts = vec![0usize; entries.len() + 1];
    for (index, slot) in parents.iter_mut().enumerate() {
        if !by_id.is_indexed(entries, index) {
            continue; // not indexed: no id, or an earlier duplicate
        }
        // An entry that names itself as parent is a root.
        let parent = by_id.parent(entries, index).filter(|&p| p != index);
        match parent {
            Some(parent) => {
                *slot = parent;
                counts[parent] += 1;
            }
            None => roots.push(index),
        }
    }
    let mut starts = Vec::with_capacity(entries.len() + 1);
    let mut total = 0;
    for count in &counts {
        starts.push(total);
        total += count;
    }
    // Fill in file order, so the sort below keeps file order among equal times.
    let mut children = vec![0usize; total];
    let mut next = starts.clone();
    for (index, &parent) in parents.iter().enumerate() {
        if parent != ROOT {
            children[next[parent]] = index;
            next[parent] += 1;
        }
    }
    // Stable sort on parsed times; unreadable times sort first (a total order, unlike pi's NaN).
    let time = |i: usize| crate::time::ms_from_iso(&entries[i].timestamp).unwrap_or(i64::MIN);
    for node in 0..entries.len() {
        let list = &mut children[starts[node]..starts[node + 1]];
        if list.len() > 1 {
            list.sort_by_cached_key(|&i| time(i));
        }
    }
    TreeShape {
        roots,
        children,
        starts,
    }
}

/// One node's JSON without its children: `{entry, children: [], label?, labelTimestamp?}`.
#[cfg(test)]
fn node_value(entry: &SessionEntry, labels: &HashMap<String, Label>) -> Map<String, Value> {
    let mut node = Map::new();
    node.insert("entry".into(), entry.to_value());
    node.insert("children".into(), json!([]));
    if let Some(label) = labels.get(&entry.id) {
        node.insert("label".into(), json!(label.text));
        node.insert("labelTimestamp".into(), json!(label.timestamp));
    }
    node
}

/// The tree as nested JSON values, built bottom-up without recursion.
///
/// Nesting depth equals the longest branch. serde_json serializes and drops values recursively,
/// so very deep trees should go to the wire through [`tree_json`] instead.
#[cfg(test)]
pub fn tree_values(
    entries: &[SessionEntry],
    by_id: &IdIndex,
    labels: &HashMap<String, Label>,
) -> Vec<Value> {
    let shape = shape(entries, by_id);
    let order = post_order(&shape);
    let mut built: Vec<Option<Value>> = vec![None; entries.len()];
    for index in order {
        let mut node = node_value(&entries[index], labels);
        let kids: Vec<Value> = shape
            .children(index)
            .iter()
            .filter_map(|&c| built[c].take())
            .collect();
        node.insert("children".into(), Value::Array(kids));
        built[index] = Some(Value::Object(node));
    }
    shape
        .roots
        .iter()
        .filter_map(|&r| built[r].take())
        .collect()
}

/// Every node after its children (roots' subtrees in order).
#[cfg(test)]
fn post_order(shape: &TreeShape) -> Vec<usize> {
    let mut order = Vec::with_capacity(shape.starts.len());
    let mut stack: Vec<(usize, bool)> = shape.roots.iter().rev().map(|&r| (r, false)).collect();
    while let Some((index, expanded)) = stack.pop() {
        if expanded {
            order.push(index);
        } else {
            stack.push((index, true));
            stack.extend(shape.children(index).iter().rev().map(|&c| (c, false)));
        }
    }
    order
}

/// The tree as JSON text, byte-identical to serializing [`tree_values`], written iteratively so
/// any depth is safe, between `before` and `after` (a caller can build its whole protocol line
/// in this one buffer instead of copying a tree of tens of MB into another).
pub fn tree_json(
    entries: &[SessionEntry],
    by_id: &IdIndex,
    labels: &HashMap<String, Label>,
    before: &str,
    after: &str,
) -> String {
    let shape = shape(entries, by_id);
    // Written as bytes (serde_json writes into a byte buffer), all of it UTF-8.
    let mut out: Vec<u8> = Vec::with_capacity(entries.len() * 256 + before.len() + after.len() + 2);
    out.extend_from_slice(before.as_bytes());
    out.push(b'[');
    // Work items: open a node, or close the children array + object of a node.
    enum Step {
        Open(usize, bool),
        Close(usize),
    }
    let mut stack: Vec<Step> = shape
        .roots
        .iter()
        .enumerate()
        .rev()
        .map(|(n, &r)| Step::Open(r, n > 0))
        .collect();
    while let Some(step) = stack.pop() {
        match step {
            Step::Open(index, comma) => {
                if comma {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"entry\":");
                entries[index].write_json(&mut out);
                out.extend_from_slice(b",\"children\":[");
                stack.push(Step::Close(index));
                let kids = shape.children(index);
                stack.extend(
                    kids.iter()
                        .enumerate()
                        .rev()
                        .map(|(n, &c)| Step::Open(c, n > 0)),
                );
            }
            Step::Close(index) => {
                out.push(b']');
                if let Some(label) = labels.get(&entries[index].id) {
                    out.extend_from_slice(b",\"label\":");
                    let _ = serde_json::to_writer(&mut out, &label.text);
                    out.extend_from_slice(b",\"labelTimestamp\":");
                    let _ = serde_json::to_writer(&mut out, &label.timestamp);
                }
                out.push(b'}');
            }
        }
    }
    out.push(b']');
    out.extend_from_slice(after.as_bytes());
    // Always UTF-8: entry lines were checked when read, the rest is serde_json's output.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
