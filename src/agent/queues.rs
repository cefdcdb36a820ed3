//! The steering and follow-up queues (seed semantics): messages the client (or an extension)
//! queued during a run, each announced by a `queue_update`, and delivered at their drain point —
//! steering after a turn's tool calls, before the next LLM call; follow-ups only when the agent
//! would otherwise stop — all at once or one per turn, as the queue's mode says.

use std::collections::VecDeque;
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::Agent;
use crate::config::{Config, QueueMode};
use crate::extensions::HookId;
use crate::messages::{AgentMessage, ImageContent, UserMessage};
use crate::rpc::events::Event;
use crate::rpc::protocol::StreamingBehavior;
use crate::tools::image::{ResizeLimits, scale_prompt};

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
    /// A user message's images, being made ready on a worker since the message was queued.
    pub images: Option<QueuedImages>,
}

/// A queued message's images as they came and the worker making them ready for the limits of
/// the model at queue time (pi 1.6.0 does it at delivery, with the model of that moment: a
/// model change in between starts the work again then).
pub struct QueuedImages {
    text: String,
    images: Vec<ImageContent>,
    limits: Option<ResizeLimits>,
    result: Option<Receiver<(String, Vec<ImageContent>)>>,
}

/// How long a drain point waits for a queued message's images (scaling one takes well under a
/// second; the worker started when the message was queued). After that it goes as it came.
const QUEUED_IMAGES_WAIT: Duration = Duration::from_secs(60);

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
        let message = AgentMessage::User(UserMessage::new(&text, images.clone()));
        let images = (!images.is_empty()).then(|| {
            let limits = self.image_limits();
            QueuedImages {
                result: spawn_scaling(&text, &images, limits),
                text: text.clone(),
                images,
                limits,
            }
        });
        let queued = QueuedMessage {
            text,
            message,
            images,
        };
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
            let Some(mut item) = queue.pop_front() else {
                break;
            };
            self.emit_queue_update();
            if let Some(images) = item.images.take() {
                self.images_ready(&mut item.message, images);
            }
            self.add_message(item.message);
        }
        count
    }

    /// The images settings of the model now: its input limits, or `None` with
    /// `images.autoResize` off (only conversions then).
    pub(super) fn image_limits(&self) -> Option<ResizeLimits> {
        self.config
            .auto_resize_images()
            .then(|| ResizeLimits::from_input_limits(self.model.input_limits()))
    }

    /// Starts making a prompt's images ready on a worker (`scale_prompt`, with this model's
    /// limits); `None` when no worker can start (the images then go as they came).
    pub(super) fn scale_images(
        &self,
        text: &str,
        images: &[ImageContent],
    ) -> Option<Receiver<(String, Vec<ImageContent>)>> {
        spawn_scaling(text, images, self.image_limits())
    }

    /// A queued user message gets its images made ready, as pi 1.6.0 does at delivery: the
    /// notes after its text, the images replaced. Waits (bounded) for the worker.
    fn images_ready(&mut self, message: &mut AgentMessage, queued: QueuedImages) {
        let limits = self.image_limits();
        let result = if queued.limits == limits {
            queued.result
        } else {
            spawn_scaling(&queued.text, &queued.images, limits)
        };
        let Some(result) = result else { return };
        let (text, images) = match result.recv_timeout(QUEUED_IMAGES_WAIT) {
            Ok(ready) => ready,
            Err(e) => {
                log::error!("a queued message's images were not ready ({e}); sent as they came");
                return;
            }
        };
        if let AgentMessage::User(user) = message {
            let timestamp = user.timestamp;
            *user = UserMessage::new(&text, images);
            user.timestamp = timestamp;
        }
    }
}

/// A worker thread that runs `scale_prompt`; `None` when it cannot start.
fn spawn_scaling(
    text: &str,
    images: &[ImageContent],
    limits: Option<ResizeLimits>,
) -> Option<Receiver<(String, Vec<ImageContent>)>> {
    let (tx, result) = crossbeam_channel::bounded(1);
    let (text, images) = (text.to_string(), images.to_vec());
    let spawned = std::thread::Builder::new()
        .name("prompt-images".to_string())
        .spawn(move || {
            let _ = tx.send(scale_prompt(&text, &images, limits.as_ref()));
        });
    match spawned {
        Ok(_) => Some(result),
        Err(e) => {
            log::error!("could not start the image worker ({e}); images go as they came");
            None
        }
    }
}
