//! Thread "stdout-writer": the sole owner of stdout. Receives records, serializes each once and
//! writes it whole with its LF; flushes whenever the channel runs dry, so bursts of deltas become
//! few large writes. The channel is bounded: when the client stops reading, the pipe fills, this
//! thread blocks in `write`, the channel fills and the agent (and behind it the provider socket)
//! waits — memory stays bounded instead of buffering the stream.
//!
//! How it ends: when every `Sender` is dropped (after the last record is written and flushed), or
//! on a write error such as EPIPE (the client closed stdout), after which it reports
//! `Closed` once and drains and drops the remaining records so nobody blocks on it.

use std::io::Write;
use std::thread::JoinHandle;

use super::{Part, Record};
use crate::redact;
use crossbeam_channel::{Receiver, Sender};

/// Records queued for stdout before the agent waits.
pub const CHANNEL_CAPACITY: usize = 1024;

/// What the writer tells the agent.
#[derive(Debug, PartialEq)]
pub enum WriterEvent {
    /// stdout is gone (EPIPE or another write error): shut down.
    Closed,
}

pub struct Writer {
    pub records: Sender<Record>,
    pub thread: JoinHandle<()>,
}

/// Every credential in the process-wide redaction set (`crate::redact`) is replaced by
/// `[redacted]` wherever it would appear on stdout — a model or a tool could echo one back. The
/// set is re-read whenever it changes, so a key resolved mid-session is covered from then on.
pub fn spawn(
    output: Box<dyn Write + Send>,
    events: Sender<WriterEvent>,
    capacity: usize,
) -> std::io::Result<Writer> {
    let (records, inbox) = crossbeam_channel::bounded(capacity);
    let thread = std::thread::Builder::new()
        .name("stdout-writer".into())
        .spawn(move || write_loop(output, inbox, events))?;
    Ok(Writer { records, thread })
}

fn write_loop(output: Box<dyn Write + Send>, inbox: Receiver<Record>, events: Sender<WriterEvent>) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, output);
    let mut line = Vec::with_capacity(4096);
    let mut generation = redact::generation();
    let mut redactions = redact::default_redactions();
    for record in inbox.iter() {
        // A record acknowledging a session entry goes out only once the entry is in the file.
        crate::disk::wait_for_writes();
        if redact::generation() != generation {
            generation = redact::generation();
            redactions = redact::default_redactions();
        }
        line.clear();
        match record {
            Record::Settled => {
                // Nothing to write, but what came before it must not wait in the buffer.
                if !finish_record(&mut out, &[], &inbox, &events, Ok(())) {
                    return;
                }
                continue;
            }
            Record::Json(value) => {
                if serde_json::to_writer(&mut line, &value).is_err() {
                    log::error!("could not serialize a record; dropped");
                    continue;
                }
            }
            Record::Raw(text) if !redactions.may_contain(text.as_bytes()) => {
                // Large pre-serialized lines (get_tree, get_entries) go out without a copy.
                let result = out.write_all(text.as_bytes());
                line.push(b'\n');
                if !finish_record(&mut out, &line, &inbox, &events, result) {
                    return;
                }
                continue;
            }
            Record::Raw(text) => line.extend_from_slice(text.as_bytes()),
            Record::Parts(parts)
                if parts
                    .iter()
                    .flat_map(Part::pieces)
                    .any(|piece| redactions.may_contain(piece.as_bytes())) =>
            {
                // Rare: the whole line is decoded, redacted and encoded again.
                for piece in parts.iter().flat_map(Part::pieces) {
                    line.extend_from_slice(piece.as_bytes());
                }
            }
            Record::Parts(parts) => {
                // Written piece by piece: a shared message is never copied into the line.
                let mut result = Ok(());
                for piece in parts.iter().flat_map(Part::pieces) {
                    result = result.and_then(|()| out.write_all(piece.as_bytes()));
                }
                line.push(b'\n');
                if !finish_record(&mut out, &line, &inbox, &events, result) {
                    return;
                }
                continue;
            }
        }
        if redactions.may_contain(&line) {
            let text = String::from_utf8_lossy(&line).into_owned();
            line = redactions.apply(&text).into_owned().into_bytes();
        }
        line.push(b'\n');
        if !finish_record(&mut out, &line, &inbox, &events, Ok(())) {
            return;
        }
        // Memory back after a huge record.
        if line.capacity() > 1 << 20 {
            line = Vec::with_capacity(4096);
        }
    }
    let _ = out.flush();
}

/// Writes the rest of a record (`tail`, ending in LF) and flushes when nothing else is queued.
/// False when stdout is gone: the close is reported and the inbox drained.
fn finish_record(
    out: &mut std::io::BufWriter<Box<dyn Write + Send>>,
    tail: &[u8],
    inbox: &Receiver<Record>,
    events: &Sender<WriterEvent>,
    earlier: std::io::Result<()>,
) -> bool {
    {
        let mut result = earlier.and_then(|()| out.write_all(tail));
        if result.is_ok() && inbox.is_empty() {
            result = out.flush();
        }
        if let Err(e) = result {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                log::warn!("stdout write failed: {e}");
            }
            let _ = events.send(WriterEvent::Closed);
            // Keep draining so the agent never blocks on a full channel while it shuts down.
            for _ in inbox.iter() {}
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_one_line_per_record_keeping_separators_raw() {
        let sink = Shared::default();
        let (etx, _erx) = crossbeam_channel::unbounded();
        redact::register_secrets(["sk-secret-123".to_string()]);
        let writer = spawn(Box::new(sink.clone()), etx, CHANNEL_CAPACITY).unwrap();
        writer
            .records
            .send(json!({"a": "x\u{2028}y"}).into())
            .unwrap();
        writer
            .records
            .send(Record::Raw("{\"b\":1}".into()))
            .unwrap();
        let secret = json!({"k": "key=sk-secret-123!"});
        writer.records.send(secret.into()).unwrap();
        // A tab before the key: redacted on the decoded string, the line stays JSON.
        writer
            .records
            .send(json!({"t": "col\tsk-secret-123"}).into())
            .unwrap();
        drop(writer.records);
        writer.thread.join().unwrap();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "{\"a\":\"x\u{2028}y\"}\n{\"b\":1}\n{\"k\":\"key=[redacted]!\"}\n{\"t\":\"col\\t[redacted]\"}\n"
        );
    }

    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn broken_pipe_is_reported_and_the_channel_keeps_draining() {
        let (etx, erx) = crossbeam_channel::unbounded();
        let writer = spawn(Box::new(Broken), etx, CHANNEL_CAPACITY).unwrap();
        for i in 0..(CHANNEL_CAPACITY * 2) {
            writer.records.send(json!({"i": i}).into()).unwrap();
        }
        assert_eq!(erx.recv().unwrap(), WriterEvent::Closed);
        drop(writer.records);
        writer.thread.join().unwrap();
    }
}
