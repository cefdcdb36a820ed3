//! The steering and follow-up queues (seed semantics): messages the client (or an extension)
//! queued during a run, each announced by a `queue_update`, and delivered at their drain point —
//! steering after a turn's tool calls, before the next LLM call; follow-ups only when the agent
//! would otherwise stop — all at once or one per turn, as the queue's mode says.

use std::collections::VecDeque;

use super::Agent;
use crate::config::{Config, QueueMode};
use crate::extensions::HookId;
use crate::messages::{AgentMessage, ImageContent, UserMessage};
use crate::rpc::events::Event;
use crate::rpc::protocol::StreamingBehavior;

/// Messages waiting for their drain point, each queue with its mode.
pub struct Queues {
    pub steering: VecDeque<QueuedMessage>,
    pub follow_up: VecDeque<QueuedMessage>,
    pub steering_mode: QueueMode,
    pub follow_up_mode: QueueMode,
    /// Queued input waiting for the extensions' `input` hook before it joins its queue.
    pub inputs: Vec<QueueInput>,
}

/// A `steer`, `follow_up` or queued `prompt` waiting for the extensions' `input` hook before it
/// joins its queue (pi 0.86.0).
pub struct QueueInput {
    pub hook: HookId,
    pub id: Option<serde_json::Value>,
    /// The command answered: `steer`, `follow_up` or `prompt`.
    pub command: &'static str,
    pub behavior: StreamingBehavior,
    pub text: String,
    pub images: Vec<ImageContent>,
}

/// A steering or follow-up message waiting for its drain point.
pub struct QueuedMessage {
    /// As the client sent it (queue_update lists texts).
    pub text: String,
    /// A user message, or an extension's custom message.
    pub message: AgentMessage,
}

impl Queues {
    pub fn new(config: &Config) -> Queues {
        Queues {
            steering: VecDeque::new(),
            follow_up: VecDeque::new(),
            steering_mode: config.steering_mode(),
            follow_up_mode: config.follow_up_mode(),
            inputs: Vec::new(),
        }
    }
}

impl Agent {
    pub(super) fn enqueue(
        &mut self,
        behavior: StreamingBehavior,
        text: String,
        images: Vec<ImageContent>,
    ) {
        let message = AgentMessage::User(UserMessage::new(&text, images));
        let queued = QueuedMessage { text, message };
        match behavior {
            StreamingBehavior::Steer => self.queues.steering.push_back(queued),
            StreamingBehavior::FollowUp => self.queues.follow_up.push_back(queued),
        }
        self.emit_queue_update();
    }

    pub(super) fn emit_queue_update(&mut self) {
        let event = Event::QueueUpdate {
            steering: self
                .queues
                .steering
                .iter()
                .map(|q| q.text.clone())
                .collect(),
            follow_up: self
                .queues
                .follow_up
                .iter()
                .map(|q| q.text.clone())
                .collect(),
        };
        self.emit(event);
    }

    /// Delivers queued messages at a drain point: all of them or one, per the queue's mode. Each
    /// is announced by a `queue_update` just before its `message_start`. Returns how many.
    pub(super) fn deliver_queued(&mut self, steering: bool) -> usize {
        let (queue, mode) = if steering {
            (&mut self.queues.steering, self.queues.steering_mode)
        } else {
            (&mut self.queues.follow_up, self.queues.follow_up_mode)
        };
        let count = match mode {
            QueueMode::All => queue.len(),
            QueueMode::OneAtATime => queue.len().min(1),
        };
        for _ in 0..count {
            let queue = if steering {
                &mut self.queues.steering
            } else {
                &mut self.queues.follow_up
            };
            let Some(item) = queue.pop_front() else { break };
            self.emit_queue_update();
            self.add_message(item.message);
        }
        count
    }
}
