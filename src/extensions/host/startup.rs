//! Starting extensions: spawning each in its own process group, its stdin writer and stdout
//! reader threads, and the handshake (waiting for every `register` line, bounded). A deferred
//! slot (the TypeScript host, unless the command line has extension flags to check) is not
//! waited for here: its `register` line reaches the router, which accepts it (`parse_register`)
//! while the agent already answers commands.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::*;
use crate::child::{is_executable, kill_group};
use crate::extensions::protocol::{
    self, ExtensionMessage, MAX_PROTOCOL_VERSION, PROTOCOL_VERSION, Registration,
};
use crate::extensions::{ExtensionOrigin, ExtensionSpec, is_script_module};
use crate::rpc::jsonl::{Frame, Framer};

pub(super) struct Slot {
    pub(super) path: String,
    pub(super) spec: ExtensionSpec,
    pub(super) process: Option<Process>,
    pub(super) registration: Option<Registration>,
    /// Registers later, through the router (see the module's doc).
    pub(super) deferred: bool,
}

/// A running child and its stdin queue.
pub(super) struct Process {
    pub(super) child: Child,
    pub(super) pgid: i32,
    pub(super) writer: Sender<String>,
}

impl Process {
    /// SIGKILLs the whole group, then reaps the leader. The leader is reaped only after the
    /// kill, so its pid (= the group id) cannot have been reused by then.
    pub(super) fn kill_and_reap(&mut self) -> Option<std::process::ExitStatus> {
        kill_group(self.pgid);
        self.child.wait().ok()
    }
}

pub(super) fn check_loadable(spec: &ExtensionSpec) -> Result<(), String> {
    let path = spec.path.as_path();
    if let ExtensionOrigin::TsHost(_) = spec.origin {
        return Ok(());
    }
    if is_script_module(path) {
        // `ts_host::gather` hands script modules to the Node host; one left here was not.
        return Err("a JavaScript/TypeScript module is loaded by the TypeScript host only".into());
    }
    if !path.exists() {
        return Err(format!("not found: {}", path.display()));
    }
    if !is_executable(path) {
        return Err(
            "not an executable file (pi-rs runs extensions as executables; chmod +x it)".into(),
        );
    }
    Ok(())
}

/// How long `spec` may take to register: the TypeScript host loads Node, the pi package and
/// every TypeScript extension first.
pub(super) fn register_timeout(spec: &ExtensionSpec) -> std::time::Duration {
    match spec.origin {
        ExtensionOrigin::TsHost(_) => TS_HOST_REGISTER_TIMEOUT,
        _ => REGISTER_TIMEOUT,
    }
}

/// `(index, generation)`: the extension's load-order index and its process's generation (0; 1
/// for a restarted TypeScript host), which tag what its threads report.
pub(super) fn spawn_extension(
    (index, generation): (usize, u32),
    spec: &ExtensionSpec,
    cwd: &str,
    sandbox: Option<&crate::sandbox::Policy>,
    to_router: Sender<FromExtension>,
) -> Result<Process, String> {
    let mut command = match &spec.origin {
        ExtensionOrigin::TsHost(launch) => {
            let mut command = Command::new(&launch.node);
            command
                .arg(&launch.script)
                .env(crate::extensions::ts_host::CONFIG_ENV, &launch.config);
            command
        }
        _ => Command::new(&spec.path),
    };
    command
        .current_dir(cwd)
        .env("PI_EXTENSION_PROTOCOL", PROTOCOL_VERSION.to_string())
        .env(
            "PI_EXTENSION_MAX_PROTOCOL",
            MAX_PROTOCOL_VERSION.to_string(),
        )
        .envs(crate::tools::env::CHILD_MARKERS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(policy) = sandbox {
        let mut policy = policy.clone();
        // The confined TypeScript host reads its script in the (denied) agent dir.
        if let ExtensionOrigin::TsHost(launch) = &spec.origin
            && let Some(folder) = launch.script.parent()
        {
            let folder = std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf());
            policy.also_readable.push(folder);
        }
        crate::sandbox::confine_child(&mut command, &policy).map_err(|e| e.to_string())?;
    }
    crate::child::isolate(&mut command, crate::child::Origin::Agent);
    let mut child = command.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let pgid = child.id() as i32;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        kill_group(pgid);
        let _ = child.wait();
        return Err("cannot start: no pipes".into());
    };
    let (writer, queue) = crossbeam_channel::bounded::<String>(OUTBOUND_CAPACITY);
    let writer_report = to_router.clone();
    let spawned_writer = std::thread::Builder::new()
        .name(format!("ext-in-{index}"))
        .spawn(move || write_lines((index, generation), stdin, queue, writer_report));
    let spawned_reader = spawned_writer.and_then(|_| {
        std::thread::Builder::new()
            .name(format!("ext-out-{index}"))
            .spawn(move || read_lines((index, generation), stdout, to_router))
    });
    if let Err(e) = spawned_reader {
        kill_group(pgid);
        let _ = child.wait();
        return Err(format!("cannot start its threads: {e}"));
    }
    Ok(Process {
        child,
        pgid,
        writer,
    })
}

/// Thread "ext-in-<n>": queued lines → the child's stdin. Ends when the queue's sender is
/// dropped (closing stdin, which tells the extension to exit) or the pipe breaks.
pub(super) fn write_lines(
    (index, generation): (usize, u32),
    mut stdin: std::process::ChildStdin,
    queue: Receiver<String>,
    report: Sender<FromExtension>,
) {
    for line in queue {
        let written = stdin
            .write_all(line.as_bytes())
            .and_then(|_| stdin.write_all(b"\n"))
            .and_then(|_| stdin.flush());
        if let Err(e) = written {
            let _ = report.send(FromExtension::WriteFailed {
                index,
                generation,
                error: e.to_string(),
            });
            return;
        }
    }
}

/// Thread "ext-out-<n>": the child's stdout → framed lines. Ends at EOF (exit or group kill) or
/// when the router is gone.
pub(super) fn read_lines(
    (index, generation): (usize, u32),
    mut stdout: std::process::ChildStdout,
    to_router: Sender<FromExtension>,
) {
    let mut framer = Framer::new(MAX_LINE_BYTES);
    let mut buffer = vec![0u8; 64 * 1024];
    let mut frames = Vec::new();
    loop {
        let read = match stdout.read(&mut buffer) {
            Ok(0) => {
                framer.finish(&mut frames);
                0
            }
            Ok(n) => {
                framer.push(&buffer[..n], &mut frames);
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        for frame in frames.drain(..) {
            let message = match frame {
                Frame::Record(line) if line.iter().all(u8::is_ascii_whitespace) => continue,
                Frame::Record(line) => FromExtension::Line {
                    index,
                    generation,
                    line,
                },
                Frame::TooLong { len } => FromExtension::TooLong {
                    index,
                    generation,
                    len,
                },
            };
            if to_router.send(message).is_err() {
                return;
            }
        }
        if read == 0 {
            let _ = to_router.send(FromExtension::Eof { index, generation });
            return;
        }
    }
}

/// An extension's first line: its `register` message in a protocol pi-rs speaks, or why not.
pub(super) fn parse_register(line: &[u8]) -> Result<Registration, String> {
    match protocol::parse_line(line) {
        Ok(ExtensionMessage::Register {
            protocol: version,
            registration,
        }) if (PROTOCOL_VERSION..=MAX_PROTOCOL_VERSION).contains(&version) => Ok(registration),
        Ok(ExtensionMessage::Register {
            protocol: version, ..
        }) => Err(format!(
            "speaks protocol {version}; pi-rs speaks {PROTOCOL_VERSION} to {MAX_PROTOCOL_VERSION}"
        )),
        Ok(_) => Err("the first line must be a register message".into()),
        Err(e) => Err(format!("invalid register line: {e}")),
    }
}

/// Reads until every started extension that is not deferred registered or failed, or the
/// timeout. Lines that follow a registration early, and a deferred slot's lines, are kept for
/// the router, in order.
pub(super) fn wait_for_registrations(
    slots: &mut [Slot],
    from: &Receiver<FromExtension>,
    errors: &mut Vec<ExtensionError>,
) -> Vec<FromExtension> {
    let started = Instant::now();
    let deadline_of = |slot: &Slot| started + register_timeout(&slot.spec);
    let mut backlog = Vec::new();
    let waits_for = |s: &Slot| s.process.is_some() && s.registration.is_none() && !s.deferred;
    let pending = |slots: &[Slot]| slots.iter().any(waits_for);
    let fail = |slot: &mut Slot, error: String, errors: &mut Vec<ExtensionError>| {
        if let Some(mut process) = slot.process.take() {
            process.kill_and_reap();
        }
        errors.push(ExtensionError {
            extension_path: slot.path.clone(),
            event: "load".into(),
            error,
        });
    };
    while pending(slots) {
        // Wait until the earliest deadline of a slot still pending; past it, that slot fails.
        let Some(deadline) = slots.iter().filter(|s| waits_for(s)).map(deadline_of).min() else {
            break;
        };
        let message = match from.recv_deadline(deadline) {
            Ok(message) => message,
            Err(_) => {
                for slot in slots.iter_mut() {
                    if waits_for(slot) && deadline_of(slot) <= Instant::now() {
                        let seconds = register_timeout(&slot.spec).as_secs();
                        fail(slot, format!("no register line within {seconds} s"), errors);
                    }
                }
                continue;
            }
        };
        let index = message.index();
        let Some(slot) = slots.get_mut(index) else {
            continue;
        };
        if slot.process.is_none() {
            continue;
        }
        if slot.registration.is_some() || slot.deferred {
            backlog.push(message);
            continue;
        }
        match message {
            FromExtension::Line { line, .. } => match parse_register(&line) {
                Ok(registration) => slot.registration = Some(registration),
                Err(error) => fail(slot, error, errors),
            },
            FromExtension::TooLong { len, .. } => {
                fail(slot, format!("a line of {len} bytes is too long"), errors)
            }
            FromExtension::Eof { .. } => {
                let status = slot
                    .process
                    .take()
                    .and_then(|mut p| p.kill_and_reap())
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "unknown status".into());
                fail(
                    slot,
                    format!("exited before registering ({status})"),
                    errors,
                )
            }
            FromExtension::WriteFailed { error, .. } => {
                fail(slot, format!("cannot write to it: {error}"), errors)
            }
        }
    }
    backlog
}
