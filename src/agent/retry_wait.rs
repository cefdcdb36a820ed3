//! The `RetryWait` phase: after a run failed with a transient error, the automatic retry is
//! planned (attempts, backoff, the server's `retry-after`), announced (`auto_retry_start`), and
//! waited for on a timer in the loop's select — so `abort` and `abort_retry` cancel it at once —
//! before the conversation continues with a new run. Which errors are transient is `retry`.

use std::time::Duration;

use super::state::{Phase, RetryWait};
use super::{Agent, retry};
use crate::messages::{AgentMessage, AssistantMessage};
use crate::rpc::events::Event;

impl Agent {
    /// `Ok(Some(delay))` to retry, `Ok(None)` when the failure is not retried at all, `Err(text)`
    /// when retries are exhausted (or the server asks for a longer wait than allowed).
    pub(super) fn plan_retry(
        &mut self,
        failed: &AssistantMessage,
    ) -> Result<Option<Duration>, String> {
        let window = self.limits_model(failed).context_window;
        if !self.settings.auto_retry || !retry::is_retryable(failed, window) {
            return Ok(None);
        }
        let error = failed.error_message.clone().unwrap_or_default();
        let attempt = self.runs.retry_attempt + 1;
        if attempt > self.config.retry_max_retries() {
            return if self.runs.retry_attempt > 0 {
                Err(error)
            } else {
                Ok(None)
            };
        }
        let mut delay = retry::backoff_delay(self.config.retry_base_delay_ms(), attempt);
        if let Some(asked) = self.runs.retry_after.take() {
            let limit = Duration::from_millis(self.config.provider_max_retry_delay_ms());
            if asked > limit {
                return Err(format!(
                    "{error} (the provider asked to retry after {} s, more than retry.provider.maxRetryDelayMs allows: {} s)",
                    asked.as_secs(),
                    limit.as_secs()
                ));
            }
            delay = delay.max(asked);
        }
        Ok(Some(delay))
    }

    /// The failed reply leaves the agent's context (it stays in the session file), and the
    /// retry waits in the loop's select, where `abort` and `abort_retry` cancel it at once.
    pub(super) fn schedule_retry(&mut self, delay: Duration, failed: &AssistantMessage) {
        self.runs.retry_attempt += 1;
        self.runs.failed_response = Some(failed.clone());
        if matches!(self.messages.last(), Some(AgentMessage::Assistant(_))) {
            self.messages.pop();
        }
        let error = failed.error_message.as_deref().unwrap_or("Unknown error");
        self.emit(Event::AutoRetryStart {
            attempt: self.runs.retry_attempt,
            max_attempts: self.config.retry_max_retries(),
            delay_ms: delay.as_millis() as u64,
            error_message: error.to_string(),
        });
        self.omit_failed_attempt();
        self.phase = Phase::RetryWait(RetryWait {
            deadline: crate::deadline::after(delay),
        });
    }

    /// pi 1.6.0 keeps a failed attempt in the session but leaves it out of the model's context
    /// for good: a `context_edit` entry without replacement (announced by `entry_appended`), so a
    /// resumed session does not send it either. Only a reply the session recorded has one. Used
    /// before an ordinary retry (an error reply) and before overflow recovery's compaction (an
    /// error or a `length` reply; a completed `stop` reply is kept, as 1.6.0 keeps it).
    pub(super) fn omit_failed_attempt(&mut self) {
        let Some(leaf) = self.session.leaf_id().map(str::to_string) else {
            return;
        };
        let failed_reply = self.session.entry(&leaf).is_some_and(|entry| {
            let value = entry.to_value();
            value["type"] == "message"
                && value["message"]["role"] == "assistant"
                && matches!(
                    value["message"]["stopReason"].as_str(),
                    Some("error" | "length")
                )
        });
        if !failed_reply {
            return;
        }
        match self.session.append_context_edit(&leaf, None) {
            Ok(id) => {
                if let Some(entry) = self.session.entry(&id).map(|e| e.to_value()) {
                    self.emit(Event::EntryAppended { entry });
                }
            }
            Err(e) => log::error!("could not record the failed attempt's omission: {e}"),
        }
    }

    /// The delay ran out: continue the conversation with a new run (no new user message).
    pub(super) fn retry_now(&mut self) {
        if !matches!(self.phase, Phase::RetryWait(_)) {
            return;
        }
        self.phase = Phase::Idle;
        self.continue_run();
    }

    pub(super) fn cancel_retry(&mut self) {
        self.phase = Phase::Idle;
        let attempt = std::mem::take(&mut self.runs.retry_attempt);
        self.emit(Event::AutoRetryEnd {
            success: false,
            attempt,
            final_error: Some("Retry cancelled".into()),
        });
        self.settle();
    }
}
