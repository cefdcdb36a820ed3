//! Thread "stdin-reader": reads stdin in chunks, frames records (`jsonl`), parses them
//! (`protocol`) and sends each as an `Input` to the agent over a bounded channel, so a client
//! flooding stdin waits on the pipe instead of growing our memory.
//!
//! How it ends: at EOF or a read error it delivers the unterminated tail and returns, dropping its
//! `Sender` — the agent sees the disconnect as "stdin closed". It also returns when the agent has
//! gone (send fails). It is never joined: it may sit in a blocking read when the process exits.

use std::io::Read;

use crossbeam_channel::Sender;

use super::jsonl::{Frame, Framer};
use super::protocol::{self, Rejected, Request};

/// Records longer than this are dropped with a parse error (64 MiB: room for large images).
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// The read buffer's first and largest sizes.
const FIRST_CHUNK: usize = 4 * 1024;
const MAX_CHUNK: usize = 64 * 1024;

#[derive(Debug)]
pub enum Input {
    Request(Request),
    Rejected(Rejected),
}

pub fn spawn(input: Box<dyn Read + Send>, to_agent: Sender<Input>) {
    spawn_framed(input, to_agent, rpc_input);
}

/// The same reader for another protocol on stdin (`acp`): each frame becomes a `T` by `parse`.
pub fn spawn_framed<T: Send + 'static>(
    input: Box<dyn Read + Send>,
    to: Sender<T>,
    parse: fn(Frame) -> T,
) {
    let spawned = std::thread::Builder::new()
        .name("stdin-reader".into())
        .spawn(move || read_loop(input, MAX_RECORD_BYTES, &to, parse));
    if let Err(e) = spawned {
        log::error!("cannot start the stdin reader: {e}");
    }
}

fn read_loop<T>(
    mut input: Box<dyn Read + Send>,
    max_record: usize,
    to_agent: &Sender<T>,
    parse: fn(Frame) -> T,
) {
    let mut framer = Framer::new(max_record);
    // Starts small and doubles while reads fill it: an idle client's commands never make the
    // reader's (zeroed, so touched) buffer resident, a large record still reads in big chunks.
    let mut chunk = vec![0u8; FIRST_CHUNK];
    let mut frames = Vec::new();
    loop {
        let n = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::warn!("stdin read failed, treating it as closed: {e}");
                break;
            }
        };
        framer.push(&chunk[..n], &mut frames);
        if n == chunk.len() && chunk.len() < MAX_CHUNK {
            chunk.resize(chunk.len() * 2, 0);
        }
        if !deliver(&mut frames, to_agent, parse) {
            return;
        }
    }
    framer.finish(&mut frames);
    deliver(&mut frames, to_agent, parse);
}

/// Parses and sends every frame; false once the agent is gone.
fn deliver<T>(frames: &mut Vec<Frame>, to_agent: &Sender<T>, parse: fn(Frame) -> T) -> bool {
    for frame in frames.drain(..) {
        if to_agent.send(parse(frame)).is_err() {
            return false;
        }
    }
    true
}

/// One frame as an RPC command, or why it is not one.
fn rpc_input(frame: Frame) -> Input {
    match frame {
        Frame::Record(bytes) => match protocol::parse_record(&bytes) {
            Ok(request) => Input::Request(request),
            Err(rejected) => Input::Rejected(rejected),
        },
        Frame::TooLong { len } => Input::Rejected(Rejected {
            id: None,
            command: "parse".into(),
            error: format!(
                "Failed to parse command: record of {len} bytes exceeds the {MAX_RECORD_BYTES}-byte limit"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_every_record_then_disconnects() {
        let (tx, rx) = crossbeam_channel::bounded(4);
        let data = b"{\"type\":\"get_state\"}\nbad\n{\"id\":1,\"type\":\"abort\"}".to_vec();
        let handle = std::thread::spawn(move || {
            read_loop(Box::new(std::io::Cursor::new(data)), 1024, &tx, rpc_input)
        });
        let inputs: Vec<Input> = rx.iter().collect();
        handle.join().unwrap();
        assert_eq!(inputs.len(), 3);
        assert!(matches!(inputs[0], Input::Request(_)));
        assert!(matches!(inputs[1], Input::Rejected(_)));
        assert!(matches!(inputs[2], Input::Request(_)));
    }

    #[test]
    fn records_across_the_growing_buffer_arrive_whole() {
        let (tx, rx) = crossbeam_channel::bounded(1024);
        let mut data = Vec::new();
        for n in 0..300 {
            let message = "x".repeat(n * 37);
            data.extend(format!("{{\"type\":\"prompt\",\"message\":\"{message}\"}}\n").bytes());
        }
        let handle = std::thread::spawn(move || {
            read_loop(
                Box::new(std::io::Cursor::new(data)),
                MAX_RECORD_BYTES,
                &tx,
                rpc_input,
            )
        });
        let inputs: Vec<Input> = rx.iter().collect();
        handle.join().unwrap();
        assert_eq!(inputs.len(), 300);
        for (n, input) in inputs.iter().enumerate() {
            let Input::Request(request) = input else {
                panic!("record {n} was rejected: {input:?}");
            };
            assert!(
                format!("{request:?}").contains(&"x".repeat(n * 37)),
                "record {n}"
            );
        }
    }
}
