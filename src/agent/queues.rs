//! The steering and follow-up queues (seed semantics): messages the client (or an extension)
//! queued during a run, each announced by a `queue_update`, and delivered at their drain point —
//! steering after a turn's tool calls, before the next LLM call; follow-ups only when the agent
//! would otherwise stop — all at once or one per turn, as the queue's mode says.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

use super::Agent;
use super::state::{Phase, QueuedDelivery};
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
/// The agent serves commands meanwhile (`Phase::DeliveringQueued`).
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
    /// is announced by a `queue_update` just before its `message_start`. A message whose images
    /// are not ready yet is waited for in `Phase::DeliveringQueued` (the loop goes on serving
    /// commands); the caller's request then follows the delivery (`request_after_delivery`).
    /// Returns how many this drain delivers.
    pub(super) fn deliver_queued(&mut self, steering: bool) -> usize {
        let (queue, mode) = if steering {
            (&self.queues.steering, self.queues.steering_mode)
        } else {
            (&self.queues.follow_up, self.queues.follow_up_mode)
        };
        let count = match mode {
            QueueMode::All => queue.len(),
            QueueMode::OneAtATime => queue.len().min(1),
        };
        self.deliver_front(steering, count, None);
        count
    }

    /// Delivers `left` messages from the front of the queue, in order. `arrived`: what the
    /// front message's worker answered (`Some(None)`: nothing, the message goes as it came).
    /// Stops in `Phase::DeliveringQueued` when a message's images are still being made ready.
    fn deliver_front(
        &mut self,
        steering: bool,
        mut left: usize,
        mut arrived: Option<Option<(String, Vec<ImageContent>)>>,
    ) {
        let limits = self.image_limits();
        while left > 0 {
            let queue = if steering {
                &mut self.queues.steering
            } else {
                &mut self.queues.follow_up
            };
            let Some(front) = queue.front_mut() else {
                break;
            };
            if arrived.is_none()
                && let Some(images) = front.images.as_mut()
            {
                // Made ready for the model of this moment, as pi 1.6.0 does at delivery.
                if images.limits != limits {
                    images.limits = limits;
                    images.result = spawn_scaling(&images.text, &images.images, limits);
                }
                let Some(result) = images.result.clone() else {
                    arrived = Some(None);
                    continue;
                };
                match result.try_recv() {
                    Ok(ready) => arrived = Some(Some(ready)),
                    Err(TryRecvError::Empty) => {
                        self.phase = Phase::DeliveringQueued(Box::new(QueuedDelivery {
                            steering,
                            left,
                            result,
                            deadline: Instant::now() + QUEUED_IMAGES_WAIT,
                        }));
                        return;
                    }
                    Err(TryRecvError::Disconnected) => arrived = Some(None),
                }
            }
            let Some(mut item) = queue.pop_front() else {
                break;
            };
            self.emit_queue_update();
            if item.images.take().is_some() {
                match arrived.take().flatten() {
                    Some((text, images)) => images_ready(&mut item.message, &text, images),
                    None => log::error!(
                        "a queued message's images were not made ready; sent as they came"
                    ),
                }
            }
            arrived = None;
            self.add_message(item.message);
            left -= 1;
        }
    }

    /// The waiting message's worker answered (`None`: it died, or the wait's bound passed):
    /// the drain goes on, then the request it was for.
    pub(super) fn on_queued_images(&mut self, ready: Option<(String, Vec<ImageContent>)>) {
        let Phase::DeliveringQueued(delivery) = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return;
        };
        // `clear_queue` may have taken the message meanwhile: the answer is then not the front's.
        let queue = if delivery.steering {
            &self.queues.steering
        } else {
            &self.queues.follow_up
        };
        let still_front = queue
            .front()
            .and_then(|front| front.images.as_ref())
            .and_then(|images| images.result.as_ref())
            .is_some_and(|result| result.same_channel(&delivery.result));
        let arrived = still_front.then_some(ready);
        self.deliver_front(delivery.steering, delivery.left, arrived);
        self.request_after_delivery();
    }

    /// After a drain point: the next request, unless the drain waits for images (it sends the
    /// request itself when done).
    pub(super) fn request_after_delivery(&mut self) {
        if !matches!(self.phase, Phase::DeliveringQueued(_)) {
            self.request_completion();
        }
    }

    /// Abort while a drain waits for images: the run ends; the message stays queued, as queued
    /// messages survive an abort.
    pub(super) fn abort_delivery(&mut self) {
        self.phase = Phase::Idle;
        self.end_run();
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
}

/// A queued user message with its images made ready, as pi 1.6.0 does at delivery: the notes
/// after its text, the images replaced, the timestamp kept.
fn images_ready(message: &mut AgentMessage, text: &str, images: Vec<ImageContent>) {
    if let AgentMessage::User(user) = message {
        let timestamp = user.timestamp;
        *user = UserMessage::new(text, images);
        user.timestamp = timestamp;
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
    let gate = std::env::var_os("PI_TEST_IMAGE_WORKER_GATE");
    let spawned = std::thread::Builder::new()
        .name("prompt-images".to_string())
        .spawn(move || {
            if let Some(gate) = gate {
                wait_for_gate(std::path::Path::new(&gate));
            }
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

/// Test hook (`PI_TEST_IMAGE_WORKER_GATE=<path>`): an image worker starts its work only once
/// `path` exists (at most 60 s later), so a test can hold it while it checks that the agent
/// goes on serving commands.
fn wait_for_gate(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}
