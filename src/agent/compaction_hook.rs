//! (v2) The `session_before_compact` hook (pi's, as `custom-compaction.ts` uses it): before
//! pi-rs asks the model for a summary — manual, threshold or overflow compaction alike — the
//! extensions see the preparation and may cancel the compaction or give the compaction (summary,
//! first kept entry, tokens before) themselves; then no summary request is made.
//!
//! A hostile answer changes nothing it should not: a `firstKeptEntryId` that is not an entry of
//! the session is refused (reported as `extension_error`, pi-rs summarizes as usual).

use serde_json::{Map, Value, json};

use super::Agent;
use super::compaction::{self, CompactionResult};
use super::state::{Compaction, CompactionOrigin, Phase};
use crate::extensions::HookId;
use crate::extensions::protocol::HookKind;
use crate::rpc::events::Event;

/// A compaction waiting for the hook: what starting its summary requests needs.
pub struct BeforeCompact {
    hook: HookId,
    custom_instructions: Option<String>,
}

impl Agent {
    /// Asks the extensions that handle `session_before_compact`; None when nobody does.
    pub(super) fn ask_before_compact(
        &self,
        compaction: &Compaction,
        custom_instructions: Option<&str>,
    ) -> Option<BeforeCompact> {
        let host = self.extensions.host.as_ref()?;
        if !host.handles_hook(HookKind::SessionBeforeCompact) {
            return None;
        }
        let p = &compaction.preparation;
        let preparation = json!({
            "firstKeptEntryId": p.first_kept_entry_id,
            "messagesToSummarize": p.messages_to_summarize,
            "turnPrefixMessages": p.turn_prefix_messages,
            "isSplitTurn": p.is_split_turn,
            "tokensBefore": p.tokens_before,
            "previousSummary": p.previous_summary,
            "fileOps": {
                "read": p.file_ops.read,
                "written": p.file_ops.written,
                "edited": p.file_ops.edited,
            },
            "settings": {
                "enabled": true,
                "reserveTokens": p.settings.reserve_tokens,
                "keepRecentTokens": p.settings.keep_recent_tokens,
            },
        });
        let branch: Vec<Value> = self.session.branch().iter().map(|e| e.to_value()).collect();
        let payload = json!({
            "preparation": preparation,
            "branchEntries": branch,
            "customInstructions": custom_instructions,
            "reason": compaction.reason.as_str(),
            "willRetry": compaction.will_retry,
        });
        let hook = host.start_hook(
            HookKind::SessionBeforeCompact,
            payload,
            self.extensions.hook_deadline,
        )?;
        Some(BeforeCompact {
            hook,
            custom_instructions: custom_instructions.map(String::from),
        })
    }

    /// The hook answered. False when no compaction waited for it (e.g. it was aborted).
    pub(super) fn on_before_compact_hook(
        &mut self,
        hook: HookId,
        cancel: bool,
        answer: &Map<String, Value>,
    ) -> bool {
        let waiting = matches!(&self.phase, Phase::Compacting(c)
            if c.before_hook.as_ref().is_some_and(|b| b.hook == hook));
        if !waiting {
            return false;
        }
        let Phase::Compacting(mut compaction) = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return false;
        };
        let Some(before) = compaction.before_hook.take() else {
            return false;
        };
        if cancel {
            self.cancel_compaction(*compaction);
            return true;
        }
        match answer
            .get("compaction")
            .map(|c| self.extension_compaction(c))
        {
            Some(Ok(result)) => {
                let Compaction {
                    reason,
                    will_retry,
                    origin,
                    usages,
                    ..
                } = *compaction;
                self.save_compaction(reason, will_retry, origin, result, usages, true);
            }
            Some(Err(error)) => {
                self.emit(Event::ExtensionError {
                    extension_path: String::new(),
                    event: "session_before_compact".into(),
                    error,
                });
                self.spawn_summaries(*compaction, before.custom_instructions.as_deref());
            }
            None => self.spawn_summaries(*compaction, before.custom_instructions.as_deref()),
        }
        true
    }

    /// An extension's compaction (its shape checked by the hook chain), refused when its first
    /// kept entry is not in the session.
    fn extension_compaction(&self, given: &Value) -> Result<CompactionResult, String> {
        let first_kept = given["firstKeptEntryId"].as_str().unwrap_or_default();
        if self.session.entry(first_kept).is_none() {
            return Err(format!(
                "session_before_compact result: firstKeptEntryId {first_kept:?} is not an entry of the session"
            ));
        }
        Ok(CompactionResult {
            summary: given["summary"].as_str().unwrap_or_default().to_string(),
            first_kept_entry_id: first_kept.to_string(),
            tokens_before: given["tokensBefore"].as_u64().unwrap_or_default(),
            // Estimated once the context is rebuilt (`save_compaction`).
            estimated_tokens_after: 0,
            details: given.get("details").cloned().unwrap_or(Value::Null),
            extension_usage: given.get("usage").filter(|u| !u.is_null()).cloned(),
        })
    }

    /// An extension cancelled: pi's aborted end (no error message), `session_compact_failed`,
    /// the command's `Compaction cancelled`; a run goes on without the retry.
    fn cancel_compaction(&mut self, compaction: Compaction) {
        let Compaction {
            reason,
            origin,
            usages,
            ..
        } = compaction;
        self.extra_usage.extend(usages);
        self.emit(compaction::end_event(reason, None, true, false, None));
        self.notify_extensions_of(json!({
            "type": "session_compact_failed",
            "reason": reason.as_str(),
            "aborted": true,
            "willRetry": false,
            "fromExtension": false,
        }));
        let error = matches!(origin, CompactionOrigin::Command { .. })
            .then(|| compaction::CANCELLED.to_string());
        self.after_compaction(origin, false, error);
    }
}
