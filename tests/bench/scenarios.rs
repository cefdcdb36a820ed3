//! The measured scenarios. Each one scripts a fresh fake provider and a fresh process per run,
//! and returns its figures with one outcome per run and binary.
//!
//! `alternate` interleaves the binaries run by run (A B A B ...). A run that fails returns
//! `Err(reason)`: every figure of that run becomes n/a with the reason, and that binary is not run
//! again in this scenario (failures here are deterministic, and the reference is slow to start).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::agent::{Agent, Flow, Record, SpawnOptions};
use crate::fake_provider::{FakeProvider, Reply, fixture_path};
use crate::report::{Figure, Outcome, Unit};
use crate::sse::{AnthropicStream, anthropic_bash, anthropic_text, openai_text};

pub struct Binary {
    pub name: String,
    pub path: PathBuf,
    pub is_reference: bool,
}

pub struct Config {
    pub runs: usize,
    pub heavy_runs: usize,
    pub reference_runs: usize,
    pub deltas: usize,
    pub stall_bytes: u64,
    pub stall: Duration,
    pub bash_bytes: u64,
    pub tree_entries: usize,
    pub stdout_cap: u64,
    pub rss_cap_kb: u64,
    pub long_wait: Duration,
    pub short_wait: Duration,
}

/// A fake provider whose recorded problems are collected instead of panicking on drop.
struct Fake(FakeProvider);

impl Fake {
    fn start(script: Vec<Reply>) -> Fake {
        Fake(FakeProvider::start(script))
    }

    fn base_url(&self) -> String {
        self.0.base_url()
    }

    /// `Err` when the fake saw problems or a different number of requests than scripted.
    fn check(&self, expected_requests: usize) -> Result<(), String> {
        let failures = self.0.take_failures();
        if !failures.is_empty() {
            return Err(format!("fake provider: {}", failures.join("; ")));
        }
        let seen = self.0.requests().len();
        if seen != expected_requests {
            return Err(format!(
                "the fake provider got {seen} request(s), {expected_requests} scripted"
            ));
        }
        Ok(())
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.0.take_failures();
    }
}

pub struct Spec {
    key: &'static str,
    title: &'static str,
    unit: Unit,
}

const fn spec(key: &'static str, title: &'static str, unit: Unit) -> Spec {
    Spec { key, title, unit }
}

const MIB: f64 = 1024.0 * 1024.0;

fn mb(kb: Option<u64>) -> Outcome {
    match kb {
        Some(kb) => Outcome::Value(kb as f64 / 1024.0),
        None => Outcome::NotAvailable("cannot read /proc/<pid>/status".into()),
    }
}

fn millis(duration: Duration) -> Outcome {
    Outcome::Value(duration.as_secs_f64() * 1000.0)
}

/// Runs `run` alternately for each binary and gathers one outcome per figure per run.
fn alternate(
    scenario: &str,
    binaries: &[&Binary],
    runs: usize,
    config: &Config,
    specs: &[Spec],
    mut run: impl FnMut(&Binary) -> Result<Vec<Outcome>, String>,
) -> Vec<Figure> {
    let mut results: Vec<Vec<Vec<Outcome>>> = vec![vec![Vec::new(); specs.len()]; binaries.len()];
    let mut given_up = vec![false; binaries.len()];
    for round in 0..runs {
        for (index, binary) in binaries.iter().enumerate() {
            let limit = if binary.is_reference {
                runs.min(config.reference_runs)
            } else {
                runs
            };
            if given_up[index] || round >= limit {
                continue;
            }
            eprintln!(
                "bench: {scenario} run {}/{limit} {}",
                round + 1,
                binary.name
            );
            let started = Instant::now();
            let outcomes = match run(binary) {
                Ok(outcomes) => outcomes,
                Err(reason) => {
                    eprintln!("bench:   n/a: {reason}");
                    given_up[index] = true;
                    specs
                        .iter()
                        .map(|_| Outcome::NotAvailable(reason.clone()))
                        .collect()
                }
            };
            eprintln!("bench:   took {:.1} s", started.elapsed().as_secs_f64());
            for (slot, outcome) in results[index].iter_mut().zip(outcomes) {
                slot.push(outcome);
            }
        }
    }
    let mut per_binary = results.into_iter();
    let pi_rs = per_binary.next().unwrap_or_default();
    let references: Vec<Vec<Vec<Outcome>>> = per_binary.collect();
    specs
        .iter()
        .enumerate()
        .map(|(index, spec)| Figure {
            key: spec.key,
            title: spec.title,
            unit: spec.unit,
            pi_rs: pi_rs[index].clone(),
            references: references.iter().map(|r| r[index].clone()).collect(),
        })
        .collect()
}

fn spawn(binary: &Binary, fake: &Fake, config: &Config) -> Result<Agent, String> {
    Agent::spawn(&SpawnOptions::plain(
        &binary.path,
        fake.base_url(),
        config.rss_cap_kb,
    ))
}

/// Tracks one prompt: fails on a `success:false` prompt response, ends at `agent_end`.
struct PromptWatch {
    id: &'static str,
    failure: Option<String>,
    ended: bool,
}

impl PromptWatch {
    fn send(agent: &mut Agent, id: &'static str, message: &str) -> Result<PromptWatch, String> {
        agent.send(&json!({"id": id, "type": "prompt", "message": message}))?;
        Ok(PromptWatch {
            id,
            failure: None,
            ended: false,
        })
    }

    /// Looks at one record; true when the visitor should stop (turn over or prompt refused).
    fn observe(&mut self, record: &Record) -> bool {
        if record.is_response_to(self.id) && record.success != Some(true) {
            self.failure = Some(format!(
                "prompt refused: {}",
                record.error.as_deref().unwrap_or("(no error text)")
            ));
            return true;
        }
        if record.kind == "agent_end" {
            self.ended = true;
            return true;
        }
        false
    }

    fn result(&self) -> Result<(), String> {
        match &self.failure {
            Some(reason) => Err(reason.clone()),
            None => Ok(()),
        }
    }
}

/// A `get_state` answered within `wait` (the process is up and its loop running).
fn get_state(agent: &mut Agent, wait: Duration) -> Result<(), String> {
    agent.request("bench-state", "get_state", Instant::now() + wait)
}

/// Once the process answers (`get_state`), one prompt run to `agent_end` within `wait`, every
/// record handed to `visit`: the prompt's wall time and the peak RSS after it.
fn timed_turn(
    agent: &mut Agent,
    config: &Config,
    message: &str,
    wait: Duration,
    visit: impl FnMut(&Record, usize),
) -> Result<(Duration, Option<u64>), String> {
    get_state(agent, config.short_wait)?;
    let started = Instant::now();
    run_prompt(agent, message, started + wait, config.stdout_cap, visit)?;
    Ok((started.elapsed(), agent.peak_rss_kb()))
}

/// Runs a prompt to `agent_end`, handing every record to `visit` as well.
fn run_prompt(
    agent: &mut Agent,
    message: &str,
    deadline: Instant,
    byte_cap: u64,
    mut visit: impl FnMut(&Record, usize),
) -> Result<(), String> {
    let mut watch = PromptWatch::send(agent, "bench-prompt", message)?;
    agent.pump(deadline, byte_cap, |record, line_len| {
        visit(record, line_len);
        if watch.observe(record) {
            Flow::Stop
        } else {
            Flow::Continue
        }
    })?;
    watch.result()
}

// ---------------------------------------------------------------------------------------------
// 1 + 2a: startup, idle RSS, exit

const STARTUP: [Spec; 5] = [
    spec(
        "startup.first_get_state_ms",
        "spawn → first get_state response",
        Unit::Millis,
    ),
    // Wall time above waits for the scheduler on a loaded machine; this does not.
    spec(
        "startup.cpu_ms",
        "CPU (all threads) until that response",
        Unit::Millis,
    ),
    spec(
        "startup.idle_rss_mb",
        "RSS idle after startup",
        Unit::Megabytes,
    ),
    // The rest of the idle RSS is file pages (the binary's, shared libraries'), clean and shared.
    spec(
        "startup.idle_rss_anon_mb",
        "RSS idle: anonymous (private) part",
        Unit::Megabytes,
    ),
    spec(
        "startup.exit_ms",
        "stdin closed → process exit",
        Unit::Millis,
    ),
];

/// How long an idle process is left alone before its RSS is read.
const IDLE_SETTLE: Duration = Duration::from_millis(500);

pub fn startup(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    alternate(
        "startup",
        binaries,
        config.runs,
        config,
        &STARTUP,
        |binary| {
            let fake = Fake::start(Vec::new());
            let mut agent = spawn(binary, &fake, config)?;
            get_state(&mut agent, config.short_wait)?;
            let first_state = agent.spawned_at.elapsed();
            let cpu = agent.threads_cpu_time();
            std::thread::sleep(IDLE_SETTLE);
            let idle = agent.rss_kb();
            let idle_anon = agent.rss_anon_kb();
            let exit = agent.close_and_time_exit(Instant::now() + config.short_wait)?;
            fake.check(0)?;
            Ok(vec![
                millis(first_state),
                cpu.map_or_else(
                    || Outcome::NotAvailable("cannot read /proc/<pid>/task/*/schedstat".into()),
                    millis,
                ),
                mb(idle),
                mb(idle_anon),
                millis(exit),
            ])
        },
    )
}

// ---------------------------------------------------------------------------------------------
// disk: command latency while every fsync is slow

const DISK: [Spec; 3] = [
    spec(
        "disk.get_state_p50_ms",
        "slow fsync: get_state latency p50",
        Unit::Millis,
    ),
    spec(
        "disk.get_state_p99_ms",
        "slow fsync: get_state latency p99 (≤ 5)",
        Unit::Millis,
    ),
    spec(
        "disk.get_state_max_ms",
        "slow fsync: get_state latency max",
        Unit::Millis,
    ),
];

/// How long each fsync sleeps in the `disk` scenario (`PI_TEST_FSYNC_DELAY_MS`).
const SLOW_FSYNC_MS: u64 = 300;
const DISK_TURNS: usize = 20;
const STATES_PER_TURN: usize = 10;

/// Sessions on and every fsync delayed by `SLOW_FSYNC_MS`: after each of `DISK_TURNS` turns (the
/// run's fsync follows `agent_end`) `STATES_PER_TURN` `get_state` requests go out back to back,
/// each timed from send to response. pi-rs only: the hook is pi-rs's.
pub fn disk(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    let binaries: Vec<&Binary> = binaries
        .iter()
        .copied()
        .filter(|b| !b.is_reference)
        .collect();
    alternate(
        "disk",
        &binaries,
        config.heavy_runs,
        config,
        &DISK,
        |binary| {
            let script = (0..DISK_TURNS)
                .map(|turn| Reply::sse(anthropic_text(&["turn ", &turn.to_string()])))
                .collect();
            let fake = Fake::start(script);
            let mut agent = Agent::spawn(&SpawnOptions {
                sessions: true,
                env: vec![("PI_TEST_FSYNC_DELAY_MS", SLOW_FSYNC_MS.to_string())],
                ..SpawnOptions::plain(&binary.path, fake.base_url(), config.rss_cap_kb)
            })?;
            let mut latencies = Vec::new();
            for turn in 0..DISK_TURNS {
                let deadline = Instant::now() + config.short_wait;
                run_prompt(
                    &mut agent,
                    &format!("turn {turn}"),
                    deadline,
                    u64::MAX,
                    |_, _| {},
                )?;
                for _ in 0..STATES_PER_TURN {
                    let sent = Instant::now();
                    get_state(&mut agent, config.short_wait)?;
                    latencies.push(sent.elapsed());
                }
            }
            agent.close_and_time_exit(Instant::now() + config.long_wait)?;
            fake.check(DISK_TURNS)?;
            latencies.sort();
            let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
            Ok(vec![millis(at(0.5)), millis(at(0.99)), millis(at(1.0))])
        },
    )
}

// ---------------------------------------------------------------------------------------------
// 2b: a turn with two tool calls

const TURN: [Spec; 2] = [
    spec(
        "turn.peak_rss_mb",
        "peak RSS, turn with 2 tool calls",
        Unit::Megabytes,
    ),
    spec(
        "turn.wall_ms",
        "turn with 2 tool calls, prompt → agent_end",
        Unit::Millis,
    ),
];

pub fn tool_turn(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    alternate("turn", binaries, config.runs, config, &TURN, |binary| {
        let calls = AnthropicStream::new()
            .tool_use("toolu_bench_read", "read", &[r#"{"path":"notes.txt"}"#])
            .tool_use("toolu_bench_bash", "bash", &[r#"{"command":"echo bench"}"#])
            .finish("tool_use");
        let fake = Fake::start(vec![
            Reply::sse(calls),
            Reply::sse(anthropic_text(&["Both ", "tools ", "ran."])),
        ]);
        let mut agent = Agent::spawn(&SpawnOptions {
            files: vec![("notes.txt".into(), b"line one\nline two\n".to_vec())],
            ..SpawnOptions::plain(&binary.path, fake.base_url(), config.rss_cap_kb)
        })?;
        let (wall, peak) = timed_turn(
            &mut agent,
            config,
            "Read notes.txt and run echo.",
            config.short_wait,
            |_, _| {},
        )?;
        fake.check(2)?;
        Ok(vec![mb(peak), millis(wall)])
    })
}

// ---------------------------------------------------------------------------------------------
// codemode: one script making 20 MCP calls at once (issue 27)

const CODEMODE: [Spec; 2] = [
    spec(
        "codemode.wall_ms",
        "codemode: script with 20 parallel MCP calls, prompt → agent_end",
        Unit::Millis,
    ),
    spec(
        "codemode.peak_rss_mb",
        "codemode: peak RSS during that turn",
        Unit::Megabytes,
    ),
];

/// 20 calls of the fake MCP server's `echo` at once; the script returns their texts.
const PARALLEL_SCRIPT: &str = "const results = await Promise.all(Array.from({ length: 20 }, (_, i) => tools.mcp__fake__echo({ text: `n${i}` })));\nreturn results.map((r) => r.content[0].text).join(\",\");";

/// The fake MCP server (`fixtures/mcp/fake_server.py`, default exposure `codemode`) gets one
/// script from the model; the run counts when the script's result, with all 20 echoes, went
/// back to the model.
pub fn codemode(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    alternate(
        "codemode",
        binaries,
        config.runs,
        config,
        &CODEMODE,
        |binary| {
            let call = AnthropicStream::new()
                .tool_use(
                    "toolu_bench_codemode",
                    "codemode",
                    &[&json!({ "code": PARALLEL_SCRIPT }).to_string()],
                )
                .finish("tool_use");
            let fake = Fake::start(vec![
                Reply::sse(call),
                Reply::sse(anthropic_text(&["Twenty ", "echoes."])),
            ]);
            let server = fixture_path("mcp/fake_server.py");
            let mcp = json!({"mcpServers": {"fake": {"command": server.to_string_lossy()}}});
            let mut agent = Agent::spawn(&SpawnOptions {
                agent_files: vec![("mcp.json".into(), mcp.to_string().into_bytes())],
                ..SpawnOptions::plain(&binary.path, fake.base_url(), config.rss_cap_kb)
            })?;
            let mut ends = 0;
            let (wall, peak) = timed_turn(
                &mut agent,
                config,
                "Echo twenty times.",
                config.long_wait,
                |record, _| ends += usize::from(record.kind == "tool_execution_end"),
            )?;
            fake.check(2)?;
            let sent_back = fake.0.requests()[1].body.to_string();
            if !sent_back.contains("Script completed") || !sent_back.contains("echo: n19") {
                return Err(format!(
                    "the script did not complete its 20 calls ({ends} tool_execution_end records)"
                ));
            }
            Ok(vec![millis(wall), mb(peak)])
        },
    )
}

// ---------------------------------------------------------------------------------------------
// 3: streaming cost

const STREAM: [Spec; 4] = [
    spec(
        "stream.cpu_per_delta_us",
        "stream: agent CPU per text delta",
        Unit::Micros,
    ),
    spec("stream.wall_ms", "stream: prompt → agent_end", Unit::Millis),
    spec(
        "stream.stdout_mb",
        "stream: stdout during the turn",
        Unit::Megabytes,
    ),
    spec(
        "stream.stdout_ratio",
        "stream: stdout / reply text size",
        Unit::Ratio,
    ),
];

/// 64-bit FNV-1a, fed piece by piece: equal over the same bytes in the same order.
#[derive(Clone, Copy, PartialEq)]
struct Checksum(u64);

impl Checksum {
    fn new() -> Checksum {
        Checksum(0xcbf2_9ce4_8422_2325)
    }

    fn feed(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// What arrived as `text_delta`s.
struct DeltaTally {
    count: usize,
    bytes: u64,
    checksum: Checksum,
}

impl DeltaTally {
    fn new() -> DeltaTally {
        DeltaTally {
            count: 0,
            bytes: 0,
            checksum: Checksum::new(),
        }
    }

    fn observe(&mut self, record: &Record) {
        if record.kind != "message_update" || record.event_kind.as_deref() != Some("text_delta") {
            return;
        }
        if let Some(delta) = &record.delta {
            self.count += 1;
            self.bytes += delta.len() as u64;
            self.checksum.feed(delta.as_bytes());
        }
    }

    /// `Err` unless exactly the expected text arrived, in order.
    fn verify(&self, parts: &[String]) -> Result<(), String> {
        let mut expected = Checksum::new();
        let mut bytes = 0u64;
        for part in parts {
            expected.feed(part.as_bytes());
            bytes += part.len() as u64;
        }
        if self.checksum == expected && self.bytes == bytes {
            return Ok(());
        }
        Err(format!(
            "text deltas differ from the reply: {} deltas / {} bytes arrived, {} / {bytes} sent{}",
            self.count,
            self.bytes,
            parts.len(),
            if self.bytes == bytes {
                " (same size, different checksum)"
            } else {
                ""
            }
        ))
    }
}

pub fn stream(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    // Short varied pieces ("017 ", "018 ", ...), like tokens.
    let parts: Vec<String> = (0..config.deltas)
        .map(|i| format!("{:03} ", i % 1000))
        .collect();
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let body = AnthropicStream::new().text(&refs).finish("end_turn");
    let reply_size: u64 = parts.iter().map(|p| p.len() as u64).sum();
    alternate(
        "stream",
        binaries,
        config.heavy_runs,
        config,
        &STREAM,
        |binary| {
            let fake = Fake::start(vec![Reply::sse(body.clone())]);
            let mut agent = spawn(binary, &fake, config)?;
            get_state(&mut agent, config.short_wait)?;
            let cpu_before = agent.cpu_time().ok_or("cannot read /proc/<pid>/stat")?;
            let started = Instant::now();
            let mut tally = DeltaTally::new();
            let mut turn_bytes = 0u64;
            let outcome = run_prompt(
                &mut agent,
                "Count.",
                started + config.long_wait,
                config.stdout_cap,
                |record, line_len| {
                    turn_bytes += line_len as u64 + 1;
                    tally.observe(record);
                },
            );
            if let Err(reason) = outcome {
                let reason = format!(
                    "{reason} (after {:.1} s, {} of {} deltas, {:.1} MB of stdout)",
                    started.elapsed().as_secs_f64(),
                    tally.count,
                    parts.len(),
                    agent.stdout_bytes as f64 / MIB
                );
                agent.kill();
                return Err(reason);
            }
            let wall = started.elapsed();
            let cpu_after = agent.cpu_time().ok_or("cannot read /proc/<pid>/stat")?;
            fake.check(1)?;
            tally.verify(&parts)?;
            let cpu_per_delta =
                cpu_after.saturating_sub(cpu_before).as_secs_f64() * 1e6 / parts.len() as f64;
            Ok(vec![
                Outcome::Value(cpu_per_delta),
                millis(wall),
                Outcome::Value(turn_bytes as f64 / MIB),
                Outcome::Value(turn_bytes as f64 / reply_size as f64),
            ])
        },
    )
}

// ---------------------------------------------------------------------------------------------
// 3b: the cost of holding back delta tails that could begin a known key (issue 13, item 7)

const HOLD_BACK: [Spec; 5] = [
    spec(
        "holdback.cpu_per_delta_off_us",
        "stream, no key known: agent CPU per delta",
        Unit::Micros,
    ),
    spec(
        "holdback.cpu_per_delta_on_us",
        "stream, key known + held tails: CPU per delta",
        Unit::Micros,
    ),
    spec(
        "holdback.wall_off_ms",
        "stream, no key known: prompt → agent_end",
        Unit::Millis,
    ),
    spec(
        "holdback.wall_on_ms",
        "stream, key known + held tails: → agent_end",
        Unit::Millis,
    ),
    spec(
        "holdback.records_ratio",
        "key known: text_delta records / provider deltas",
        Unit::Ratio,
    ),
];

/// A key long enough to be redacted; every 8th delta of the reply ends with its first bytes,
/// so the hold-back really holds (the worst case short of streaming the key itself).
const BENCH_KEY: &str = "sk-bench-HOLDBACK-0123456789abcdefghijklmnop";

pub fn hold_back(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    let parts: Vec<String> = (0..config.deltas)
        .map(|i| {
            if i % 8 == 7 {
                format!("{:03} sk-b", i % 1000)
            } else {
                format!("{:03} ", i % 1000)
            }
        })
        .collect();
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let body = AnthropicStream::new().text(&refs).finish("end_turn");
    // pi-rs alone: the reference has no redaction to compare.
    let pi_rs: Vec<&Binary> = binaries
        .iter()
        .copied()
        .filter(|b| !b.is_reference)
        .collect();
    alternate(
        "holdback",
        &pi_rs,
        config.heavy_runs,
        config,
        &HOLD_BACK,
        |binary| {
            let mut cpu = Vec::new();
            let mut walls = Vec::new();
            let mut records_ratio = 0.0;
            for key in ["ollama", BENCH_KEY] {
                let fake = Fake::start(vec![Reply::sse(body.clone())]);
                let mut agent = Agent::spawn(&SpawnOptions {
                    api_key: Some(key),
                    ..SpawnOptions::plain(&binary.path, fake.base_url(), config.rss_cap_kb)
                })?;
                get_state(&mut agent, config.short_wait)?;
                let cpu_before = agent.cpu_time().ok_or("cannot read /proc/<pid>/stat")?;
                let started = Instant::now();
                let mut tally = DeltaTally::new();
                run_prompt(
                    &mut agent,
                    "Count.",
                    started + config.long_wait,
                    config.stdout_cap,
                    |record, _| tally.observe(record),
                )?;
                walls.push(millis(started.elapsed()));
                let cpu_after = agent.cpu_time().ok_or("cannot read /proc/<pid>/stat")?;
                fake.check(1)?;
                tally.verify(&parts)?;
                cpu.push(Outcome::Value(
                    cpu_after.saturating_sub(cpu_before).as_secs_f64() * 1e6 / parts.len() as f64,
                ));
                records_ratio = tally.count as f64 / parts.len() as f64;
            }
            let mut walls = walls.into_iter();
            let mut cpu = cpu.into_iter();
            Ok(vec![
                cpu.next().unwrap_or(Outcome::NotAvailable("no run".into())),
                cpu.next().unwrap_or(Outcome::NotAvailable("no run".into())),
                walls
                    .next()
                    .unwrap_or(Outcome::NotAvailable("no run".into())),
                walls
                    .next()
                    .unwrap_or(Outcome::NotAvailable("no run".into())),
                Outcome::Value(records_ratio),
            ])
        },
    )
}

// ---------------------------------------------------------------------------------------------
// 4: a client that stops reading

const STALL: [Spec; 3] = [
    spec(
        "stall.peak_rss_mb",
        "stalled client: agent peak RSS",
        Unit::Megabytes,
    ),
    spec(
        "stall.intact",
        "stalled client: every delta, in order",
        Unit::Check,
    ),
    spec(
        "stall.wall_ms",
        "stalled client: prompt → agent_end",
        Unit::Millis,
    ),
];

/// Bytes of text per delta in the stall reply.
const STALL_DELTA_BYTES: usize = 1000;

pub fn stall(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    let count = (config.stall_bytes as usize).div_ceil(STALL_DELTA_BYTES);
    // Each piece starts with its index, so a lost or swapped delta changes the checksum.
    let parts: Vec<String> = (0..count)
        .map(|i| {
            let mut piece = format!("{i:09}:");
            let filler = (b'a' + (i % 26) as u8) as char;
            piece.extend(std::iter::repeat_n(filler, STALL_DELTA_BYTES - piece.len()));
            piece
        })
        .collect();
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let body = AnthropicStream::new().text(&refs).finish("end_turn");
    drop(refs);
    alternate(
        "stall",
        binaries,
        config.heavy_runs,
        config,
        &STALL,
        |binary| {
            let fake = Fake::start(vec![Reply::sse(body.clone())]);
            let mut agent = spawn(binary, &fake, config)?;
            get_state(&mut agent, config.short_wait)?;
            let started = Instant::now();
            let deadline = started + config.long_wait + config.stall;
            let mut tally = DeltaTally::new();
            let mut watch = PromptWatch::send(&mut agent, "bench-prompt", "Stream a lot.")?;
            // Read up to the first delta, then stop reading while the reply keeps coming.
            let mut stalled = false;
            let mut outcome = agent.pump(deadline, config.stdout_cap, |record, _| {
                tally.observe(record);
                if watch.observe(record) || tally.count > 0 {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            });
            if outcome.is_ok() && !watch.ended && watch.failure.is_none() {
                stalled = true;
                outcome = agent.pause_reading(config.stall);
            }
            if outcome.is_ok() && stalled {
                outcome = agent.pump(deadline, config.stdout_cap, |record, _| {
                    tally.observe(record);
                    if watch.observe(record) {
                        Flow::Stop
                    } else {
                        Flow::Continue
                    }
                });
            }
            let peak = agent.peak_rss_kb();
            if let Err(reason) = outcome.and_then(|()| watch.result()) {
                let reason = format!(
                    "{reason} (after {:.1} s: {:.1} of {:.0} MB of text arrived, {:.1} MB of stdout, peak RSS {} MB)",
                    started.elapsed().as_secs_f64(),
                    tally.bytes as f64 / MIB,
                    config.stall_bytes as f64 / MIB,
                    agent.stdout_bytes as f64 / MIB,
                    peak.map_or("?".to_string(), |kb| (kb / 1024).to_string())
                );
                agent.kill();
                return Err(reason);
            }
            let wall = started.elapsed();
            fake.check(1)?;
            if !stalled {
                return Err("the turn ended before any text delta; nothing was stalled".into());
            }
            let intact = match tally.verify(&parts) {
                Ok(()) => Outcome::Value(1.0),
                Err(reason) => Outcome::NotAvailable(reason),
            };
            Ok(vec![mb(peak), intact, millis(wall)])
        },
    )
}

// ---------------------------------------------------------------------------------------------
// 5: huge bash output

const BASH: [Spec; 2] = [
    spec(
        "bash.peak_rss_mb",
        "bash tool, huge output: peak RSS",
        Unit::Megabytes,
    ),
    spec(
        "bash.wall_ms",
        "bash tool, huge output: prompt → agent_end",
        Unit::Millis,
    ),
];

pub fn bash_output(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    let command = format!(
        "head -c {} /dev/zero | tr '\\0' 'x' | fold -w 100",
        config.bash_bytes
    );
    alternate(
        "bash",
        binaries,
        config.heavy_runs,
        config,
        &BASH,
        |binary| {
            let fake = Fake::start(vec![
                Reply::sse(anthropic_bash("toolu_bench_bash", &command)),
                Reply::sse(anthropic_text(&["Lots of x."])),
            ]);
            let mut agent = spawn(binary, &fake, config)?;
            let (wall, peak) = timed_turn(
                &mut agent,
                config,
                "Print many x.",
                config.long_wait,
                |_, _| {},
            )?;
            fake.check(2)?;
            Ok(vec![mb(peak), millis(wall)])
        },
    )
}

// ---------------------------------------------------------------------------------------------
// 5b: the tool sandbox's start-up cost (pi-rs only: the reference has no sandbox)

const SANDBOX: [Spec; 4] = [
    spec(
        "sandbox.bash_first_output_ms",
        "bash tool start → first output, workspace-write sandbox",
        Unit::Millis,
    ),
    spec(
        "sandbox.bash_first_output_open_ms",
        "bash tool start → first output, no sandbox",
        Unit::Millis,
    ),
    spec(
        "sandbox.read_ms",
        "read tool start → end, workspace-write sandbox",
        Unit::Millis,
    ),
    spec(
        "sandbox.read_open_ms",
        "read tool start → end, no sandbox",
        Unit::Millis,
    ),
];

/// One process, one bash call then one read call; returns (start → first bash output,
/// read start → read end), timed from the bench's side of stdout.
fn sandbox_run(
    binary: &Binary,
    sandbox: Option<&str>,
    config: &Config,
) -> Result<(Duration, Duration), String> {
    let fake = Fake::start(vec![
        Reply::sse(anthropic_bash("toolu_bench_bash", "echo first; sleep 0.2")),
        Reply::sse(
            AnthropicStream::new()
                .tool_use("toolu_bench_read", "read", &[r#"{"path":"notes.txt"}"#])
                .finish("tool_use"),
        ),
        Reply::sse(anthropic_text(&["Done."])),
    ]);
    let extra_args = match sandbox {
        Some(mode) => vec!["--sandbox".to_string(), mode.to_string()],
        None => Vec::new(),
    };
    let mut agent = Agent::spawn(&SpawnOptions {
        extra_args,
        files: vec![("notes.txt".into(), b"line one\nline two\n".to_vec())],
        ..SpawnOptions::plain(&binary.path, fake.base_url(), config.rss_cap_kb)
    })?;
    get_state(&mut agent, config.short_wait)?;
    let started = Instant::now();
    let mut bash_start: Option<Instant> = None;
    let mut first_output: Option<Duration> = None;
    let mut updates = 0;
    let mut read_start: Option<Instant> = None;
    let mut read_time: Option<Duration> = None;
    let mut tool_ends = 0;
    run_prompt(
        &mut agent,
        "Run echo, then read notes.txt.",
        started + config.short_wait,
        config.stdout_cap,
        |record, _| match record.kind.as_str() {
            "tool_execution_start" if bash_start.is_none() => bash_start = Some(Instant::now()),
            "tool_execution_start" => read_start = Some(Instant::now()),
            // The bash tool's first update is its empty start; the second carries output.
            "tool_execution_update" if read_start.is_none() => {
                updates += 1;
                if updates == 2 {
                    first_output = bash_start.map(|at| at.elapsed());
                }
            }
            "tool_execution_end" => {
                tool_ends += 1;
                if tool_ends == 2 {
                    read_time = read_start.map(|at| at.elapsed());
                }
            }
            _ => {}
        },
    )?;
    fake.check(3)?;
    match (first_output, read_time) {
        (Some(bash), Some(read)) => Ok((bash, read)),
        _ => Err("the bash output or the read result did not arrive".into()),
    }
}

pub fn sandbox(pi_rs: &Binary, config: &Config) -> Vec<Figure> {
    alternate(
        "sandbox",
        &[pi_rs],
        config.runs,
        config,
        &SANDBOX,
        |binary| {
            let (bash, read) = sandbox_run(binary, Some("workspace-write"), config)?;
            let (bash_open, read_open) = sandbox_run(binary, None, config)?;
            Ok(vec![
                millis(bash),
                millis(bash_open),
                millis(read),
                millis(read_open),
            ])
        },
    )
}

// ---------------------------------------------------------------------------------------------
// 6: a long session and get_tree

pub const TREE: [Spec; 4] = [
    spec(
        "tree.first_get_state_ms",
        "long session: spawn → get_state",
        Unit::Millis,
    ),
    spec(
        "tree.get_tree_ms",
        "long session: get_tree response",
        Unit::Millis,
    ),
    spec(
        "tree.peak_rss_mb",
        "long session: peak RSS",
        Unit::Megabytes,
    ),
    spec(
        "tree.rss_after_new_session_mb",
        "long session: RSS after new_session",
        Unit::Megabytes,
    ),
];

/// The same figures for a session ten times longer (`tree1m`: 10⁶ entries by default), so the
/// growth curve is visible.
pub const TREE_LARGE: [Spec; 4] = [
    spec(
        "tree1m.first_get_state_ms",
        "10x longer session: spawn → get_state",
        Unit::Millis,
    ),
    spec(
        "tree1m.get_tree_ms",
        "10x longer session: get_tree response",
        Unit::Millis,
    ),
    spec(
        "tree1m.peak_rss_mb",
        "10x longer session: peak RSS",
        Unit::Megabytes,
    ),
    spec(
        "tree1m.rss_after_new_session_mb",
        "10x longer session: RSS after new_session",
        Unit::Megabytes,
    ),
];

/// A session file (format v3) with one linear branch of alternating user/assistant messages.
/// `__CWD__` in the header is replaced by the run's cwd at spawn time.
fn session_file(entries: usize) -> String {
    session_file_by(entries, &ANTHROPIC)
}

/// A model the agent talks to, as `--provider`/`--model` and as a session's replies name it.
struct Writer {
    api: &'static str,
    provider: &'static str,
    model: &'static str,
}

const ANTHROPIC: Writer = Writer {
    api: "anthropic-messages",
    provider: "fake-anthropic",
    model: "fake-claude",
};
const OPENAI: Writer = Writer {
    api: "openai-completions",
    provider: "fake-openai",
    model: "fake-gpt",
};

/// [`session_file`] with the replies written by `writer`.
fn session_file_by(entries: usize, writer: &Writer) -> String {
    let mut out = String::with_capacity(entries * 420);
    out.push_str(
        &json!({"type":"session","version":3,"id":"0190c2a0-0000-7000-8000-00000000beef",
                "timestamp":"2025-01-01T00:00:00.000Z","cwd":"__CWD__"})
        .to_string(),
    );
    out.push('\n');
    let base_ms: i64 = 1_735_689_600_000; // 2025-01-01T00:00:00Z
    for index in 0..entries {
        let ms = index as i64;
        let timestamp = format!(
            "2025-01-01T{:02}:{:02}:{:02}.{:03}Z",
            ms / 3_600_000 % 24,
            ms / 60_000 % 60,
            ms / 1000 % 60,
            ms % 1000
        );
        let id = format!("{:08x}", index + 1);
        let parent = if index == 0 {
            json!(null)
        } else {
            json!(format!("{index:08x}"))
        };
        let message = if index % 2 == 0 {
            json!({"role":"user","content":[{"type":"text","text":format!("Question number {index}?")}],
                   "timestamp": base_ms + ms})
        } else {
            json!({"role":"assistant","content":[{"type":"text","text":format!("Answer number {index}.")}],
                   "api":writer.api,"provider":writer.provider,"model":writer.model,
                   "usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,
                            "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},
                   "stopReason":"stop","timestamp": base_ms + ms})
        };
        out.push_str(
            &json!({"type":"message","id":id,"parentId":parent,"timestamp":timestamp,"message":message})
                .to_string(),
        );
        out.push('\n');
    }
    out
}

/// A session of `entries` entries: load, get_tree, peak, new_session. Returns the figures and
/// the session file's size in MiB (the peak-RSS target is a multiple of it).
pub fn tree(
    binaries: &[&Binary],
    config: &Config,
    entries: usize,
    specs: &[Spec; 4],
) -> (Vec<Figure>, f64) {
    let contents = session_file(entries);
    let file_mib = contents.len() as f64 / MIB;
    let figures = alternate(
        specs[0].key.split('.').next().unwrap_or("tree"),
        binaries,
        config.heavy_runs,
        config,
        specs,
        |binary| {
            let fake = Fake::start(Vec::new());
            let mut agent = Agent::spawn(&SpawnOptions {
                session_file: Some(contents.clone()),
                ..SpawnOptions::plain(&binary.path, fake.base_url(), config.rss_cap_kb)
            })?;
            get_state(&mut agent, config.long_wait)?;
            let first_state = agent.spawned_at.elapsed();
            let asked = Instant::now();
            let tree = match agent.request("bench-tree", "get_tree", asked + config.long_wait) {
                Ok(()) => millis(asked.elapsed()),
                Err(reason) => {
                    eprintln!("bench:   get_tree: {reason}");
                    Outcome::NotAvailable(format!("get_tree: {reason}"))
                }
            };
            let peak = agent.peak_rss_kb();
            // The old session's memory should go back to the system once it is replaced.
            let after_new = match agent.request(
                "bench-new",
                "new_session",
                Instant::now() + config.long_wait,
            ) {
                Ok(()) => {
                    std::thread::sleep(IDLE_SETTLE);
                    mb(agent.rss_kb())
                }
                Err(reason) => Outcome::NotAvailable(format!("new_session: {reason}")),
            };
            fake.check(0)?;
            Ok(vec![millis(first_state), tree, mb(peak), after_new])
        },
    );
    (figures, file_mib)
}

// ---------------------------------------------------------------------------------------------
// 6b: CPU per turn as the conversation grows

/// `PI_BENCH_TURNCPU_API=openai-completions` runs the scenario on the OpenAI Chat Completions
/// fake instead (its own figure keys).
const TURN_CPU_OPENAI: [Spec; 3] = [
    spec(
        "turncpu_openai.short_ms",
        "CPU per turn, 100 retained turns (Chat Completions)",
        Unit::Millis,
    ),
    spec(
        "turncpu_openai.long_ms",
        "CPU per turn, 3000 retained turns (Chat Completions)",
        Unit::Millis,
    ),
    spec(
        "turncpu_openai.growth",
        "CPU per turn: 3000 / 100 (Chat Completions)",
        Unit::Ratio,
    ),
];

const TURN_CPU: [Spec; 3] = [
    spec(
        "turncpu.short_ms",
        "CPU per turn, 100 retained turns",
        Unit::Millis,
    ),
    spec(
        "turncpu.long_ms",
        "CPU per turn, 3000 retained turns",
        Unit::Millis,
    ),
    spec(
        "turncpu.growth",
        "CPU per turn: 3000 / 100 retained turns",
        Unit::Ratio,
    ),
];

/// Retained turns (one user and one assistant message each) before the measured turns.
pub const TURN_CPU_SHORT: usize = 100;
pub const TURN_CPU_LONG: usize = 3000;
/// Turns timed per process: the process's utime + stime (all threads, 10 ms ticks) before and
/// after, divided by this. Two unmeasured turns first warm the caches and the connection.
const TURN_CPU_MEASURED: usize = 200;
const TURN_CPU_WARMUP: usize = 2;

/// The process's CPU time per turn (prompt → agent_end of a short text reply) after a session
/// of `retained` turns was loaded with `--session`.
fn cpu_per_turn(
    binary: &Binary,
    config: &Config,
    retained: usize,
    writer: &Writer,
) -> Result<f64, String> {
    let turns = TURN_CPU_WARMUP + TURN_CPU_MEASURED;
    let script = (0..turns)
        .map(|turn| {
            let parts = ["Reply ", &turn.to_string(), "."];
            Reply::sse(match writer.api {
                "openai-completions" => openai_text(&parts),
                _ => anthropic_text(&parts),
            })
        })
        .collect();
    let fake = Fake::start(script);
    let mut agent = Agent::spawn(&SpawnOptions {
        extra_args: ["--provider", writer.provider, "--model", writer.model]
            .map(String::from)
            .to_vec(),
        session_file: Some(session_file_by(2 * retained, writer)),
        ..SpawnOptions::plain(&binary.path, fake.base_url(), config.rss_cap_kb)
    })?;
    get_state(&mut agent, config.long_wait)?;
    let mut before = None;
    for turn in 0..turns {
        if turn == TURN_CPU_WARMUP {
            before = agent.cpu_time();
        }
        run_prompt(
            &mut agent,
            &format!("Question {turn}?"),
            Instant::now() + config.long_wait,
            u64::MAX,
            |_, _| {},
        )?;
    }
    let after = agent.cpu_time();
    fake.check(turns)?;
    match (before, after) {
        (Some(before), Some(after)) => {
            Ok((after - before).as_secs_f64() * 1000.0 / TURN_CPU_MEASURED as f64)
        }
        _ => Err("cannot read /proc/<pid>/stat".into()),
    }
}

pub fn turn_cpu(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    let openai = std::env::var("PI_BENCH_TURNCPU_API").is_ok_and(|api| api == OPENAI.api);
    let (writer, specs) = if openai {
        (&OPENAI, &TURN_CPU_OPENAI)
    } else {
        (&ANTHROPIC, &TURN_CPU)
    };
    alternate(
        "turncpu",
        binaries,
        config.heavy_runs,
        config,
        specs,
        |binary| {
            let short = cpu_per_turn(binary, config, TURN_CPU_SHORT, writer)?;
            let long = cpu_per_turn(binary, config, TURN_CPU_LONG, writer)?;
            let growth = if short > 0.0 {
                Outcome::Value(long / short)
            } else {
                Outcome::NotAvailable("no CPU time measured at 100 turns".into())
            };
            Ok(vec![Outcome::Value(short), Outcome::Value(long), growth])
        },
    )
}

// ---------------------------------------------------------------------------------------------
// 7: size

/// Total bytes of regular files under `dir` and the number of npm packages in it (directories
/// with a package.json directly under a node_modules directory or an @scope inside one).
fn tree_size(dir: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut packages = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                let parent = path
                    .parent()
                    .and_then(Path::file_name)
                    .and_then(|n| n.to_str());
                let grandparent = path
                    .parent()
                    .and_then(Path::parent)
                    .and_then(Path::file_name)
                    .and_then(|n| n.to_str());
                let in_modules = parent == Some("node_modules")
                    || (parent.is_some_and(|p| p.starts_with('@'))
                        && grandparent == Some("node_modules"));
                if in_modules && path.join("package.json").is_file() {
                    packages += 1;
                }
                stack.push(path);
            } else if kind.is_file() {
                bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    (bytes, packages)
}

/// Distinct crates in `cargo tree -e normal --target all`, the root package excluded. Every
/// target's crates may need a download; without a registry it falls back to the host target.
fn crate_count() -> Result<u64, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let attempts: [&[&str]; 2] = [&["--target", "all"], &["--offline"]];
    let mut last_failure = String::new();
    for (index, extra) in attempts.iter().enumerate() {
        let output = std::process::Command::new(&cargo)
            .args(["tree", "--prefix", "none", "-e", "normal"])
            .args(*extra)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .map_err(|err| format!("cannot run cargo tree: {err}"))?;
        if !output.status.success() {
            last_failure = format!("cargo tree {} failed: {}", extra.join(" "), output.status);
            continue;
        }
        if index > 0 {
            eprintln!("bench: {last_failure}; counting the host target's crates only");
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let mut names: Vec<&str> = text
            .lines()
            .map(|line| line.trim_end_matches(" (*)").trim())
            .filter(|line| !line.is_empty())
            .collect();
        let root = names.first().copied();
        names.sort_unstable();
        names.dedup();
        return Ok(names.iter().filter(|name| Some(**name) != root).count() as u64);
    }
    Err(last_failure)
}

const SIZE: [Spec; 2] = [
    spec(
        "size.install_mb",
        "installed size (pi-rs: stripped binary)",
        Unit::Megabytes,
    ),
    spec(
        "size.dependencies",
        "dependencies (crates / npm packages)",
        Unit::Count,
    ),
];

pub fn size(pi_rs: &Binary, references: &[&Binary]) -> Vec<Figure> {
    eprintln!("bench: size");
    let binary_mb = match std::fs::metadata(&pi_rs.path) {
        Ok(meta) => Outcome::Value(meta.len() as f64 / MIB),
        Err(err) => Outcome::NotAvailable(format!("{}: {err}", pi_rs.path.display())),
    };
    let crates = match crate_count() {
        Ok(count) => Outcome::Value(count as f64),
        Err(reason) => Outcome::NotAvailable(reason),
    };
    let mut reference_mb = Vec::new();
    let mut reference_packages = Vec::new();
    for reference in references {
        // The install is the outermost node_modules above the executable (`.bin/pi`), or the
        // executable's own directory when it holds one (a launcher next to its packages and
        // bundled Node, as pi 1.x ships).
        let root = reference
            .path
            .ancestors()
            .filter(|dir| dir.file_name().is_some_and(|n| n == "node_modules"))
            .last()
            .map(Path::to_path_buf)
            .or_else(|| {
                let dir = reference.path.parent()?;
                dir.join("node_modules")
                    .is_dir()
                    .then(|| dir.join("node_modules"))
            });
        match root {
            Some(root) => {
                let (bytes, packages) = tree_size(&root);
                reference_mb.push(vec![Outcome::Value(bytes as f64 / MIB)]);
                reference_packages.push(vec![Outcome::Value(packages as f64)]);
            }
            None => {
                let reason = "the reference is not inside a node_modules directory".to_string();
                reference_mb.push(vec![Outcome::NotAvailable(reason.clone())]);
                reference_packages.push(vec![Outcome::NotAvailable(reason)]);
            }
        }
    }
    vec![
        Figure {
            key: SIZE[0].key,
            title: SIZE[0].title,
            unit: SIZE[0].unit,
            pi_rs: vec![binary_mb],
            references: reference_mb,
        },
        Figure {
            key: SIZE[1].key,
            title: SIZE[1].title,
            unit: SIZE[1].unit,
            pi_rs: vec![crates],
            references: reference_packages,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// ACP: pi-rs's `--mode acp` beside pi-acp (npm, installed by tests/install_acp_sdk.sh) in front
// of each reference pi (`PI_ACP_PI_COMMAND`), with the reference's own Node.

const ACP: [Spec; 3] = [
    spec(
        "acp.first_chunk_ms",
        "ACP: initialize → first agent_message_chunk",
        Unit::Millis,
    ),
    spec(
        "acp.rss_1_mb",
        "ACP: RSS with 1 session (process tree)",
        Unit::Megabytes,
    ),
    spec(
        "acp.rss_10_mb",
        "ACP: RSS with 10 sessions (process tree)",
        Unit::Megabytes,
    ),
];

/// Sessions opened (each prompted once) for the second RSS figure.
const ACP_SESSIONS: usize = 10;

pub fn acp(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    let adapter = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/acp-sdk/node_modules/pi-acp/dist/index.js");
    alternate("acp", binaries, config.heavy_runs, config, &ACP, |binary| {
        let fake = Fake::start(
            (0..ACP_SESSIONS)
                .map(|_| Reply::sse(anthropic_text(&["Hello from the fake."])))
                .collect(),
        );
        let (program, front, env) = if binary.is_reference {
            if !adapter.exists() {
                return Err(format!(
                    "pi-acp is not installed at {}: run tests/install_acp_sdk.sh",
                    adapter.display()
                ));
            }
            let node = binary
                .path
                .parent()
                .map(|dir| dir.join("node_modules/node/bin/node"))
                .filter(|node| node.exists())
                .unwrap_or_else(|| PathBuf::from("/usr/bin/node"));
            let front = vec![adapter.display().to_string()];
            let env = vec![("PI_ACP_PI_COMMAND", binary.path.display().to_string())];
            (node, front, env)
        } else {
            let front = [
                "--mode",
                "acp",
                "--provider",
                "fake-anthropic",
                "--model",
                "fake-claude",
            ];
            (
                binary.path.clone(),
                front.iter().map(|s| s.to_string()).collect(),
                Vec::new(),
            )
        };
        let mut agent = Agent::spawn(&SpawnOptions {
            sessions: true,
            env,
            front: Some(front),
            ..SpawnOptions::plain(&program, fake.base_url(), config.rss_cap_kb)
        })?;
        let outcomes = acp_run(&mut agent, config)?;
        fake.check(ACP_SESSIONS)?;
        Ok(outcomes)
    })
}

fn acp_run(agent: &mut Agent, config: &Config) -> Result<Vec<Outcome>, String> {
    let deadline = Instant::now() + config.long_wait;
    let started = Instant::now();
    let mut first_chunk = None;
    let mut next_id = 0u64;
    let mut call = |agent: &mut Agent,
                    method: &str,
                    params: serde_json::Value,
                    first_chunk: &mut Option<Duration>|
     -> Result<serde_json::Value, String> {
        next_id += 1;
        let id = next_id;
        agent.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let line = agent
                .read_line(deadline, config.stdout_cap)?
                .ok_or_else(|| {
                    agent.explain(&format!("stdout closed before the {method} answer"))
                })?;
            let Ok(message) = serde_json::from_slice::<serde_json::Value>(&line) else {
                continue;
            };
            if message["method"] == "session/update"
                && message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                && first_chunk.is_none()
            {
                *first_chunk = Some(started.elapsed());
            }
            if message["method"].is_string() && !message["id"].is_null() {
                // A request of the agent's (none is expected): refused, so nothing waits on it.
                agent.send(&json!({"jsonrpc": "2.0", "id": message["id"],
                    "error": {"code": -32601, "message": "not offered by the bench"}}))?;
                continue;
            }
            if message["method"].is_null() && message["id"] == id {
                if let Some(error) = message.get("error") {
                    return Err(format!("{method} failed: {error}"));
                }
                return Ok(message["result"].clone());
            }
        }
    };
    call(
        agent,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
        &mut first_chunk,
    )?;
    let cwd = agent.cwd.display().to_string();
    let mut rss_one = None;
    for n in 0..ACP_SESSIONS {
        let session = call(
            agent,
            "session/new",
            json!({"cwd": cwd, "mcpServers": []}),
            &mut first_chunk,
        )?;
        let id = session["sessionId"].clone();
        let prompt = json!({"sessionId": id, "prompt": [{"type": "text", "text": "hello"}]});
        let answer = call(agent, "session/prompt", prompt, &mut first_chunk)?;
        if answer["stopReason"] != "end_turn" {
            return Err(format!("session/prompt ended with {answer}"));
        }
        if n == 0 {
            rss_one = crate::agent::tree_rss_kb(agent.pid);
        }
    }
    let rss_ten = crate::agent::tree_rss_kb(agent.pid);
    let chunk = match first_chunk {
        Some(elapsed) => millis(elapsed),
        None => Outcome::NotAvailable("no agent_message_chunk came".into()),
    };
    Ok(vec![chunk, mb(rss_one), mb(rss_ten)])
}

// ---------------------------------------------------------------------------------------------
// tsstartup: start-up with one TypeScript extension (pi 1.6.0's examples/extensions/hello.ts)

const TS_STARTUP: [Spec; 3] = [
    spec(
        "tsstartup.first_get_state_ms",
        "hello.ts: spawn → first get_state response",
        Unit::Millis,
    ),
    spec(
        "tsstartup.first_prompt_ms",
        "hello.ts: spawn → first prompt's agent_end (its tool offered)",
        Unit::Millis,
    ),
    // pi-rs's figure includes its Node host (a child); pi's extensions run in its own process.
    spec(
        "tsstartup.tree_rss_mb",
        "hello.ts: RSS of the process tree after that prompt",
        Unit::Megabytes,
    ),
];

/// pi 1.6.0's Node and package, as `tests/install_reference.sh --check 1.6.0` prints them.
fn reference_1_6() -> Result<(PathBuf, PathBuf), String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/install_reference.sh");
    let output = std::process::Command::new("bash")
        .arg(&script)
        .args(["--check", "1.6.0"])
        .output()
        .map_err(|err| format!("cannot run {}: {err}", script.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .map(PathBuf::from)
            .filter(|path| path.exists())
    };
    match (field("node"), field("package")) {
        (Some(node), Some(package)) => Ok((node, package)),
        _ => Err("pi 1.6.0 is not installed: run tests/install_reference.sh 1.6.0".into()),
    }
}

/// One TypeScript extension, `-e <pi 1.6.0>/examples/extensions/hello.ts`, for every binary
/// (pi-rs's host is given pi 1.6.0's Node and package). `get_state` and a prompt go out at
/// once after the spawn; each is timed from the spawn to its answer (the prompt: its
/// `agent_end`, and its request must offer the `hello` tool).
pub fn ts_startup(binaries: &[&Binary], config: &Config) -> Vec<Figure> {
    let found = reference_1_6();
    alternate(
        "tsstartup",
        binaries,
        config.runs,
        config,
        &TS_STARTUP,
        |binary| {
            let (node, package) = found.clone()?;
            let hello = package.join("examples/extensions/hello.ts");
            let fake = Fake::start(vec![Reply::sse(anthropic_text(&["Hi."]))]);
            let env = match binary.is_reference {
                true => Vec::new(),
                false => vec![
                    ("PI_RS_NODE", node.display().to_string()),
                    ("PI_RS_PI_PACKAGE", package.display().to_string()),
                ],
            };
            let mut agent = Agent::spawn(&SpawnOptions {
                extra_args: vec!["-e".into(), hello.display().to_string()],
                env,
                ..SpawnOptions::plain(&binary.path, fake.base_url(), config.rss_cap_kb)
            })?;
            let deadline = Instant::now() + config.long_wait;
            agent.send(&json!({"id": "bench-state", "type": "get_state"}))?;
            let mut watch = PromptWatch::send(&mut agent, "bench-prompt", "hello")?;
            let mut first_state = None;
            let spawned_at = agent.spawned_at;
            agent.pump(deadline, config.stdout_cap, |record, _| {
                if first_state.is_none() && record.is_response_to("bench-state") {
                    first_state = Some(spawned_at.elapsed());
                }
                match watch.observe(record) {
                    true => Flow::Stop,
                    false => Flow::Continue,
                }
            })?;
            watch.result()?;
            let first_prompt = spawned_at.elapsed();
            let first_state = first_state.ok_or("no get_state response before agent_end")?;
            let tree_rss = crate::agent::tree_rss_kb(agent.pid);
            let offered = fake.0.requests().first().is_some_and(|request| {
                request.body["tools"]
                    .as_array()
                    .is_some_and(|tools| tools.iter().any(|t| t["name"] == "hello"))
            });
            if !offered {
                return Err("the prompt's request did not offer hello.ts's tool".into());
            }
            agent.close_and_time_exit(Instant::now() + config.short_wait)?;
            fake.check(1)?;
            Ok(vec![
                millis(first_state),
                millis(first_prompt),
                mb(tree_rss),
            ])
        },
    )
}
