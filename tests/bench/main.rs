//! `cargo bench`: resource figures for pi-rs, side by side with the reference pi when
//! `PI_REFERENCE` names its executable.
//!
//! Every run starts a fresh process (isolated agent dir, `PI_OFFLINE=1`, scrubbed environment,
//! `--mode rpc --provider fake-anthropic --model fake-claude`) against a scripted fake Anthropic
//! provider on 127.0.0.1 (the integration harness's `FakeProvider`). Runs alternate between the
//! binaries (A B A B ...) so slow drift of the machine hits both alike. Output: a table on stdout
//! and `target/bench/results.json`; progress and per-run problems go to stderr. A figure a binary
//! cannot produce is "n/a (reason)"; nothing is asserted about timings.
//!
//! Knobs (environment): PI_BENCH_BIN (default: the release `pi` cargo built for the bench),
//! PI_REFERENCE, PI_BENCH_RUNS (cheap figures, default 5), PI_BENCH_HEAVY_RUNS (default 3),
//! PI_BENCH_REF_RUNS (caps the reference's runs, default: same as pi-rs), PI_BENCH_DELTAS
//! (20000), PI_BENCH_STALL_MB (50), PI_BENCH_STALL_SECS (10), PI_BENCH_BASH_MB (100),
//! PI_BENCH_TREE_ENTRIES (100000), PI_BENCH_STDOUT_CAP_MB (4096) and PI_BENCH_RSS_CAP_MB (6144): a
//! run whose stdout or agent RSS grows past these gives up (n/a), PI_BENCH_TIMEOUT_SECS (300: bound on each long wait). Arguments after `--`
//! select scenarios by name: startup turn stream stall bash tree disk size. `disk` runs pi-rs
//! alone with its slow-fsync test hook (`PI_TEST_FSYNC_DELAY_MS`).
//!
//! Ends: after the last scenario; every child is closed (or killed) by `Agent`'s drop.

mod agent;
// Shared with the integration tests; their `#[cfg(test)]` modules compile empty here (the bench
// is built with cfg(test) but without libtest), hence unused imports.
#[allow(dead_code, unused_imports)]
#[path = "../it/fake_provider.rs"]
mod fake_provider;
mod report;
mod scenarios;
#[allow(dead_code, unused_imports)]
#[path = "../it/sse.rs"]
mod sse;
#[allow(dead_code)]
#[path = "../it/support.rs"]
mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use report::Figure;
use scenarios::{Binary, Config};

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => match text.trim().parse() {
            Ok(value) => value,
            Err(_) => {
                eprintln!("bench: {name}={text:?} is not a number; using {default}");
                default
            }
        },
        _ => default,
    }
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; other words select scenarios.
    let selected: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let wants = |name: &str| selected.is_empty() || selected.iter().any(|s| s == name);

    let runs = env_number("PI_BENCH_RUNS", 5).max(1) as usize;
    let config = Config {
        runs,
        heavy_runs: env_number("PI_BENCH_HEAVY_RUNS", 3).max(1) as usize,
        reference_runs: env_number("PI_BENCH_REF_RUNS", u64::MAX) as usize,
        deltas: env_number("PI_BENCH_DELTAS", 20_000).max(1) as usize,
        stall_bytes: env_number("PI_BENCH_STALL_MB", 50).max(1) * 1024 * 1024,
        stall: Duration::from_secs(env_number("PI_BENCH_STALL_SECS", 10)),
        bash_bytes: env_number("PI_BENCH_BASH_MB", 100).max(1) * 1_000_000,
        tree_entries: env_number("PI_BENCH_TREE_ENTRIES", 100_000).max(1) as usize,
        stdout_cap: env_number("PI_BENCH_STDOUT_CAP_MB", 4096).max(1) * 1024 * 1024,
        rss_cap_kb: env_number("PI_BENCH_RSS_CAP_MB", 6144).max(1) * 1024,
        long_wait: Duration::from_secs(env_number("PI_BENCH_TIMEOUT_SECS", 300).max(1)),
        short_wait: Duration::from_secs(30),
    };

    let pi_rs = Binary {
        name: "pi-rs",
        path: match std::env::var_os("PI_BENCH_BIN") {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => PathBuf::from(env!("CARGO_BIN_EXE_pi")),
        },
        is_reference: false,
    };
    let reference = match std::env::var_os("PI_REFERENCE") {
        Some(path) if !path.is_empty() => Some(Binary {
            name: "reference",
            path: PathBuf::from(path),
            is_reference: true,
        }),
        _ => None,
    };
    eprintln!("bench: pi-rs = {}", pi_rs.path.display());
    match &reference {
        Some(reference) => eprintln!("bench: reference = {}", reference.path.display()),
        None => eprintln!("bench: PI_REFERENCE not set; measuring pi-rs alone"),
    }
    let binaries: Vec<&Binary> = std::iter::once(&pi_rs).chain(reference.as_ref()).collect();

    let mut figures: Vec<Figure> = Vec::new();
    if wants("startup") {
        figures.extend(scenarios::startup(&binaries, &config));
    }
    if wants("turn") {
        figures.extend(scenarios::tool_turn(&binaries, &config));
    }
    if wants("stream") {
        figures.extend(scenarios::stream(&binaries, &config));
    }
    if wants("stall") {
        figures.extend(scenarios::stall(&binaries, &config));
    }
    if wants("bash") {
        figures.extend(scenarios::bash_output(&binaries, &config));
    }
    if wants("tree") {
        figures.extend(scenarios::tree(&binaries, &config));
    }
    if wants("disk") {
        figures.extend(scenarios::disk(&binaries, &config));
    }
    if wants("size") {
        figures.extend(scenarios::size(&pi_rs, reference.as_ref()));
    }

    let table = report::table(&figures, reference.is_some());
    // The table is the bench's output; this is a bench binary, not src/.
    println!("\n{table}");

    let meta = json!({
        "pi_rs": pi_rs.path.display().to_string(),
        "reference": reference.as_ref().map(|r| r.path.display().to_string()),
        "runs": config.runs,
        "heavy_runs": config.heavy_runs,
        "deltas": config.deltas,
        "stall_bytes": config.stall_bytes,
        "stall_secs": config.stall.as_secs(),
        "bash_bytes": config.bash_bytes,
        "tree_entries": config.tree_entries,
        "ratio": "pi-rs median / reference median",
    });
    let document = report::to_json(&figures, meta);
    let dir = target_dir().join("bench");
    let path = dir.join("results.json");
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        let text = serde_json::to_string_pretty(&document).unwrap_or_default();
        std::fs::write(&path, text + "\n")
    });
    match written {
        Ok(()) => eprintln!("bench: wrote {}", path.display()),
        Err(err) => eprintln!("bench: cannot write {}: {err}", path.display()),
    }
}
