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
//! PI_REFERENCE (one or more executables, `:`-separated, each optionally `name=path`; one table
//! per reference, each target marked met / MISSED), PI_BENCH_RUNS (cheap figures, default 5), PI_BENCH_HEAVY_RUNS (default 3),
//! PI_BENCH_REF_RUNS (caps the reference's runs, default: same as pi-rs), PI_BENCH_DELTAS
//! (20000), PI_BENCH_STALL_MB (50), PI_BENCH_STALL_SECS (10), PI_BENCH_BASH_MB (100),
//! PI_BENCH_TREE_ENTRIES (100000), PI_BENCH_TURNCPU_API (anthropic-messages; or openai-completions), PI_BENCH_STDOUT_CAP_MB (4096) and PI_BENCH_RSS_CAP_MB (6144): a
//! run whose stdout or agent RSS grows past these gives up (n/a), PI_BENCH_TIMEOUT_SECS (300: bound on each long wait). Arguments after `--`
//! select scenarios by name: startup tsstartup turn codemode stream holdback stall bash sandbox tree turncpu disk acp size,
//! and `tree1m` (only when named: the tree scenario at 10x PI_BENCH_TREE_ENTRIES, pi-rs alone).
//! `turncpu` loads a session of 100, then 3000 turns and times the process's CPU over 200 more.
//! `disk` runs pi-rs alone with its slow-fsync test hook (`PI_TEST_FSYNC_DELAY_MS`).
//! `codemode` has the fake MCP server (`fixtures/mcp/fake_server.py`) and one script making
//! 20 parallel calls of it, prompt → `agent_end`.
//! `acp` runs `--mode acp` against pi-acp (target/acp-sdk, tests/install_acp_sdk.sh) in front of
//! each reference: initialize → first agent_message_chunk, and the process tree's RSS with 1 and
//! 10 sessions (each prompted once).
//! `tsstartup` starts every binary with pi 1.6.0's `examples/extensions/hello.ts` (pi-rs's host
//! gets pi 1.6.0's Node and package from `tests/install_reference.sh --check 1.6.0`): spawn →
//! first `get_state`, spawn → first prompt's `agent_end`, and the process tree's RSS.
//!
//! Ends: after the last scenario; every child is closed (or killed) by `Agent`'s drop.

mod agent;
// Shared with the integration tests. `pub`: what only the tests use is exported, not dead.
#[path = "../it/fake_provider.rs"]
pub mod fake_provider;
mod report;
mod scenarios;
#[path = "../it/sse.rs"]
pub mod sse;
#[path = "../it/support.rs"]
pub mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use report::{Figure, Target};
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

const MIB: f64 = 1024.0 * 1024.0;

/// `PI_REFERENCE`: one or more reference executables separated by `:`, each optionally named
/// `name=path`. Unnamed ones are called after the `pi-reference-<version>` folder they sit in
/// (the project's install layout), else "reference N".
fn references() -> Vec<Binary> {
    let Some(list) = std::env::var_os("PI_REFERENCE").filter(|v| !v.is_empty()) else {
        return Vec::new();
    };
    let list = list.to_string_lossy().into_owned();
    list.split(':')
        .filter(|item| !item.is_empty())
        .enumerate()
        .map(|(index, item)| {
            let (name, path) = match item.split_once('=') {
                Some((name, path)) => (name.to_string(), PathBuf::from(path)),
                None => {
                    let path = PathBuf::from(item);
                    let version = path.ancestors().find_map(|dir| {
                        let name = dir.file_name()?.to_str()?;
                        name.strip_prefix("pi-reference-").map(str::to_string)
                    });
                    let name =
                        version.map_or(format!("reference {}", index + 1), |v| format!("pi {v}"));
                    (name, path)
                }
            };
            Binary {
                name,
                path,
                is_reference: true,
            }
        })
        .collect()
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
        name: "pi-rs".into(),
        path: match std::env::var_os("PI_BENCH_BIN") {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => PathBuf::from(env!("CARGO_BIN_EXE_pi")),
        },
        is_reference: false,
    };
    let references = references();
    eprintln!("bench: pi-rs = {}", pi_rs.path.display());
    if references.is_empty() {
        eprintln!("bench: PI_REFERENCE not set; measuring pi-rs alone");
    }
    for reference in &references {
        eprintln!("bench: {} = {}", reference.name, reference.path.display());
    }
    let binaries: Vec<&Binary> = std::iter::once(&pi_rs).chain(&references).collect();

    let mut figures: Vec<Figure> = Vec::new();
    let mut targets = vec![
        Target {
            key: "startup.first_get_state_ms",
            limit: 2.0,
        },
        Target {
            key: "startup.idle_rss_mb",
            limit: 4.0,
        },
        Target {
            key: "stream.cpu_per_delta_us",
            limit: 5.0,
        },
        Target {
            key: "stall.peak_rss_mb",
            limit: 16.0 + 2.0 * config.stall_bytes as f64 / MIB,
        },
        Target {
            key: "bash.peak_rss_mb",
            limit: 16.0,
        },
        Target {
            key: "tree.first_get_state_ms",
            limit: 200.0,
        },
        Target {
            key: "tree.get_tree_ms",
            limit: 200.0,
        },
        // Per-turn CPU must not grow with the conversation (issue 18 item 9).
        Target {
            key: "turncpu.growth",
            limit: 1.5,
        },
        Target {
            key: "turncpu_openai.growth",
            limit: 1.5,
        },
        Target {
            key: "disk.get_state_p99_ms",
            limit: 5.0,
        },
        Target {
            key: "size.install_mb",
            limit: 6.0,
        },
    ];
    if wants("startup") {
        figures.extend(scenarios::startup(&binaries, &config));
    }
    if wants("tsstartup") {
        figures.extend(scenarios::ts_startup(&binaries, &config));
    }
    if wants("turn") {
        figures.extend(scenarios::tool_turn(&binaries, &config));
    }
    if wants("codemode") {
        figures.extend(scenarios::codemode(&binaries, &config));
    }
    if wants("stream") {
        figures.extend(scenarios::stream(&binaries, &config));
    }
    if wants("holdback") {
        figures.extend(scenarios::hold_back(&binaries, &config));
    }
    if wants("stall") {
        figures.extend(scenarios::stall(&binaries, &config));
    }
    if wants("bash") {
        figures.extend(scenarios::bash_output(&binaries, &config));
    }
    if wants("sandbox") {
        figures.extend(scenarios::sandbox(&pi_rs, &config));
    }
    if wants("tree") {
        let (tree, file_mib) =
            scenarios::tree(&binaries, &config, config.tree_entries, &scenarios::TREE);
        figures.extend(tree);
        targets.push(Target {
            key: "tree.peak_rss_mb",
            limit: 2.0 * file_mib,
        });
    }
    // Only when asked for by name: a 10x longer session takes minutes and gigabytes.
    if selected.iter().any(|s| s == "tree1m") {
        let entries = config.tree_entries * 10;
        let (tree, _) = scenarios::tree(&[&pi_rs], &config, entries, &scenarios::TREE_LARGE);
        figures.extend(tree);
    }
    if wants("turncpu") {
        figures.extend(scenarios::turn_cpu(&binaries, &config));
    }
    if wants("disk") {
        figures.extend(scenarios::disk(&binaries, &config));
    }
    if wants("acp") {
        figures.extend(scenarios::acp(&binaries, &config));
    }
    if wants("size") {
        figures.extend(scenarios::size(
            &pi_rs,
            &references.iter().collect::<Vec<_>>(),
        ));
    }

    // The tables are the bench's output; this is a bench binary, not src/.
    if references.is_empty() {
        println!("\n{}", report::table(&figures, None, &targets));
    }
    for (index, reference) in references.iter().enumerate() {
        println!(
            "\npi-rs against {} ({})\n\n{}",
            reference.name,
            reference.path.display(),
            report::table(&figures, Some((index, &reference.name)), &targets)
        );
    }

    let meta = json!({
        "pi_rs": pi_rs.path.display().to_string(),
        "references": references.iter().map(|r| json!({"name": r.name, "path": r.path.display().to_string()})).collect::<Vec<_>>(),
        "runs": config.runs,
        "heavy_runs": config.heavy_runs,
        "deltas": config.deltas,
        "stall_bytes": config.stall_bytes,
        "stall_secs": config.stall.as_secs(),
        "bash_bytes": config.bash_bytes,
        "tree_entries": config.tree_entries,
        "ratio": "pi-rs median / reference median",
    });
    let document = report::to_json(&figures, meta, &targets);
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
