//! Print and JSON modes (`pi -p "msg"`, `pi --mode json "msg"`): the same agent loop, driven by a
//! thread "print-driver" instead of stdin. The driver sends the messages one at a time as
//! `prompt` requests, waits for each to settle, then closes the agent's input so it exits.
//!
//! Text mode prints the final assistant reply's text; a reply that ended in error or abort prints
//! its error on stderr and exits 1. JSON mode writes the session header, then every session event
//! as one JSON line (the same records RPC mode emits; responses are not events and stay out).
//! The driver is the only writer of stdout in these modes.
//!
//! How it ends: after the last message settles, or when the agent's records channel disconnects.
//!
//! `messages` builds what the driver sends from the command line: piped stdin, `@file`
//! arguments (text inline, images as image blocks) and the bare-word messages.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use serde_json::{Value, json};

use super::Record;
use super::protocol::{Command, Request};
use super::stdin_reader::Input;
use crate::messages::ImageContent;
use crate::tools::image;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Output {
    Text,
    Json,
}

/// One message to send: text plus images (from `@file` arguments).
pub struct PrintMessage {
    pub text: String,
    pub images: Vec<ImageContent>,
}

/// Why print mode has nothing to send; `main` prints `Error: <Display>` and exits 1.
#[derive(Debug)]
pub enum InputError {
    Stdin(std::io::Error),
    /// An `@file` argument that cannot be read.
    FileNotFound(PathBuf),
    NoMessage,
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputError::Stdin(e) => write!(f, "cannot read stdin: {e}"),
            InputError::FileNotFound(path) => write!(f, "File not found: {}", path.display()),
            InputError::NoMessage => {
                f.write_str("no message given: pass it as an argument, an @file, or on stdin")
            }
        }
    }
}

impl std::error::Error for InputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InputError::Stdin(e) => Some(e),
            InputError::FileNotFound(_) | InputError::NoMessage => None,
        }
    }
}

pub fn stdin_is_terminal() -> bool {
    std::io::stdin().is_terminal()
}

/// The messages print mode sends: the first is piped stdin + `@file` contents + the first CLI
/// message, concatenated as pi does; the rest follow one by one. `@file` paths are taken from
/// `cwd`.
pub fn messages(
    file_args: &[String],
    cli_messages: &[String],
    cwd: &Path,
) -> Result<Vec<PrintMessage>, InputError> {
    let mut first = String::new();
    if !stdin_is_terminal() {
        let mut piped = String::new();
        std::io::stdin()
            .read_to_string(&mut piped)
            .map_err(InputError::Stdin)?;
        if !piped.trim().is_empty() {
            first.push_str(&piped);
        }
    }
    let mut images = Vec::new();
    for file in file_args {
        let path = cwd.join(file);
        let Ok(bytes) = std::fs::read(&path) else {
            return Err(InputError::FileNotFound(path));
        };
        if bytes.is_empty() {
            continue;
        }
        let shown = path.display();
        // Sniffed from the head as the read tool does (pi uses one detector for both).
        match image::sniff_mime(&bytes[..bytes.len().min(image::SNIFF_BYTES)]) {
            Some(mime) => {
                images.push(image::content(&bytes, mime));
                first.push_str(&format!("<file name=\"{shown}\"></file>\n"));
            }
            None => {
                let text = String::from_utf8_lossy(&bytes);
                first.push_str(&format!("<file name=\"{shown}\">\n{text}\n</file>\n"));
            }
        }
    }
    let mut rest = cli_messages.iter();
    if let Some(message) = rest.next() {
        first.push_str(message);
    }
    let mut messages = Vec::new();
    if !first.is_empty() || !images.is_empty() {
        messages.push(PrintMessage {
            text: first,
            images,
        });
    }
    messages.extend(rest.map(|text| PrintMessage {
        text: text.clone(),
        images: Vec::new(),
    }));
    if messages.is_empty() {
        return Err(InputError::NoMessage);
    }
    Ok(messages)
}

/// Starts the driver. `records` is the agent's output channel; `to_agent` its input. Joining the
/// handle gives the exit code.
pub fn spawn(
    output: Output,
    header: Value,
    messages: Vec<PrintMessage>,
    records: Receiver<Record>,
    to_agent: Sender<Input>,
) -> std::io::Result<JoinHandle<u8>> {
    std::thread::Builder::new()
        .name("print-driver".into())
        .spawn(move || drive(output, header, messages, records, to_agent))
}

fn drive(
    output: Output,
    header: Value,
    messages: Vec<PrintMessage>,
    records: Receiver<Record>,
    to_agent: Sender<Input>,
) -> u8 {
    let mut stdout = std::io::stdout().lock();
    if output == Output::Json && write_line(&mut stdout, &header).is_err() {
        return 0;
    }
    let mut last_reply: Option<Value> = None;
    for (n, message) in messages.into_iter().enumerate() {
        let id = json!(format!("print-{n}"));
        let request = Request {
            id: Some(id.clone()),
            command: Command::Prompt {
                message: message.text,
                images: message.images,
                streaming_behavior: None,
            },
        };
        if to_agent.send(Input::Request(request)).is_err() {
            break;
        }
        loop {
            let Ok(record) = records.recv() else {
                return finish(output, last_reply.as_ref());
            };
            if matches!(record, Record::Settled) {
                break;
            }
            let Some(record) = event_value(record) else {
                continue;
            };
            let kind = record["type"].as_str().unwrap_or_default().to_string();
            if kind == "response" {
                if record["id"] == id && record["success"] == false {
                    let error = record["error"]
                        .as_str()
                        .unwrap_or("the prompt was rejected");
                    eprintln!("{error}");
                    return 1;
                }
                continue;
            }
            if kind == "message_end" && record["message"]["role"] == "assistant" {
                last_reply = Some(record["message"].clone());
            }
            if output == Output::Json && write_line(&mut stdout, &record).is_err() {
                return 0;
            }
            if kind == "agent_settled" {
                break;
            }
        }
    }
    drop(to_agent);
    // Let the agent finish; anything it still says is written in JSON mode.
    for record in records.iter() {
        let Some(record) = event_value(record) else {
            continue;
        };
        if output == Output::Json
            && record["type"] != "response"
            && write_line(&mut stdout, &record).is_err()
        {
            return 0;
        }
    }
    finish(output, last_reply.as_ref())
}

/// The record as a value to inspect; `Raw` records are command responses, never events.
fn event_value(record: Record) -> Option<Value> {
    match record {
        Record::Json(value) => Some(value),
        Record::Raw(_) | Record::Settled => None,
        parts @ Record::Parts(_) => parts.to_value(),
    }
}

/// One record, every known credential redacted (as the RPC writer does).
fn write_line(out: &mut impl Write, record: &Value) -> std::io::Result<()> {
    let line = serde_json::to_string(record)?;
    let known = crate::redact::default_redactions();
    out.write_all(known.apply(&line).as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Text mode prints the last reply's text blocks; any mode fails on an error or aborted reply.
fn finish(output: Output, reply: Option<&Value>) -> u8 {
    let Some(reply) = reply else { return 0 };
    let stop = reply["stopReason"].as_str().unwrap_or_default();
    if stop == "error" || stop == "aborted" {
        let error = reply["errorMessage"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("Request {stop}"));
        let known = crate::redact::default_redactions();
        eprintln!("{}", known.apply_text(&error));
        return 1;
    }
    if output == Output::Text {
        let mut stdout = std::io::stdout().lock();
        for block in reply["content"].as_array().into_iter().flatten() {
            if block["type"] == "text"
                && let Some(text) = block["text"].as_str()
            {
                let known = crate::redact::default_redactions();
                let _ = writeln!(stdout, "{}", known.apply_text(text));
            }
        }
        let _ = stdout.flush();
    }
    0
}
