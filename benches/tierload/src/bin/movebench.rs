//! `movebench`: times tierd's `move_pages(2)` mover on a running process, and
//! numactl's `migratepages` on another, so the two can be compared in the same
//! guest.
//!
//! - `movebench move --pid P --from 1 --to 0 [--budget-mib N] [--batch 1024]`
//!   moves P's pages from the `--from` nodes to `--to` with
//!   `tierd::mover::Mover::move_ranges` over all of P's mappings (or `--range`s)
//!   and prints one JSON line: the `MoveReport`, elapsed seconds, pages/s.
//! - `movebench migratepages --pid P --from 1 --to 0` runs
//!   `migratepages P 1 0` (numactl) and prints the same kind of line.
//! - `movebench placement --pid P` prints P's bytes per node.
//!
//! Both timed modes measure P's placement before and after with a full
//! base-page query (untimed), so `base_pages_per_s` = 4 KiB pages that left the
//! source nodes per second, comparable between the two.

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::{Parser, Subcommand};
use serde_json::json;

use tierd::mover::{base_page_size, query_nodes, Mover, PageStatus, DEFAULT_BATCH};

const MIB: u64 = 1 << 20;

#[derive(Parser)]
#[command(about = "Times move_pages(2) page moves (tierd's mover) against numactl's migratepages")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Move pages of a process with tierd's mover.
    Move {
        #[arg(long)]
        pid: u32,
        /// Source nodes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1")]
        from: Vec<u32>,
        /// Destination node.
        #[arg(long, default_value_t = 0)]
        to: u32,
        /// Stop after this many MiB moved (default: no limit).
        #[arg(long)]
        budget_mib: Option<u64>,
        /// Pages per move_pages(2) call.
        #[arg(long, default_value_t = DEFAULT_BATCH)]
        batch: usize,
        /// Byte range START-END (hex, as in /proc/PID/maps); repeatable.
        /// Default: every mapping of the process, in address order.
        #[arg(long = "range", value_name = "START-END")]
        ranges: Vec<String>,
    },
    /// Run numactl's `migratepages PID FROM TO` and time it.
    Migratepages {
        #[arg(long)]
        pid: u32,
        #[arg(long, default_value = "1")]
        from: String,
        #[arg(long, default_value = "0")]
        to: String,
        /// The migratepages binary.
        #[arg(long, default_value = "migratepages")]
        bin: String,
    },
    /// Print the process's bytes per node (full base-page query).
    Placement {
        #[arg(long)]
        pid: u32,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("movebench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// (start, end) of every mapping in /proc/PID/maps except [vsyscall].
fn mappings(pid: u32) -> Result<Vec<(u64, u64)>, String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("/proc/{pid}/maps: {e}"))?;
    Ok(maps
        .lines()
        .filter(|l| !l.ends_with("[vsyscall]"))
        .filter_map(|l| parse_range(l.split_whitespace().next()?).ok())
        .collect())
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("{s}: expected START-END"))?;
    let p = |x: &str| {
        u64::from_str_radix(x.trim_start_matches("0x"), 16).map_err(|e| format!("{s}: {e}"))
    };
    Ok((p(a)?, p(b)?))
}

/// Bytes per node of all the process's base pages (a THP counts 512 times).
fn placement(pid: u32) -> Result<BTreeMap<u32, u64>, String> {
    let page = base_page_size();
    let addrs: Vec<u64> = mappings(pid)?
        .into_iter()
        .flat_map(|(s, e)| (s..e).step_by(page as usize))
        .collect();
    let st = query_nodes(pid, &addrs).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for s in st {
        if let PageStatus::Node(n) = s {
            *out.entry(n).or_insert(0) += page;
        }
    }
    Ok(out)
}

fn mib_map(m: &BTreeMap<u32, u64>) -> serde_json::Value {
    json!(m
        .iter()
        .map(|(n, b)| (n.to_string(), *b as f64 / MIB as f64))
        .collect::<BTreeMap<_, _>>())
}

/// Bytes that left `from` between two placements.
fn left(before: &BTreeMap<u32, u64>, after: &BTreeMap<u32, u64>, from: &[u32]) -> u64 {
    from.iter()
        .map(|n| {
            before
                .get(n)
                .copied()
                .unwrap_or(0)
                .saturating_sub(after.get(n).copied().unwrap_or(0))
        })
        .sum()
}

fn run(cli: Cli) -> Result<(), String> {
    let page = base_page_size();
    match cli.cmd {
        Cmd::Move {
            pid,
            from,
            to,
            budget_mib,
            batch,
            ranges,
        } => {
            let ranges = if ranges.is_empty() {
                mappings(pid)?
            } else {
                ranges
                    .iter()
                    .map(|r| parse_range(r))
                    .collect::<Result<_, _>>()?
            };
            let before = placement(pid)?;
            let mover = Mover::new(batch);
            let budget = budget_mib.map_or(u64::MAX, |m| m * MIB);
            let t = Instant::now();
            let rep = mover
                .move_ranges(pid, &ranges, &from, to, budget)
                .map_err(|e| e.to_string())?;
            let secs = t.elapsed().as_secs_f64();
            let after = placement(pid)?;
            let gone = left(&before, &after, &from);
            println!(
                "{}",
                json!({
                    "mode": "move_pages",
                    "pid": pid,
                    "batch": mover.batch(),
                    "budget_bytes": budget_mib.map(|m| m * MIB),
                    "report": rep,
                    "elapsed_s": secs,
                    "pages_per_s": rep.moved_pages as f64 / secs,
                    "base_pages_per_s": rep.moved_bytes as f64 / page as f64 / secs,
                    "mib_per_s": rep.moved_bytes as f64 / MIB as f64 / secs,
                    "left_from_bytes": gone,
                    "before_mib": mib_map(&before),
                    "after_mib": mib_map(&after),
                })
            );
        }
        Cmd::Migratepages { pid, from, to, bin } => {
            let from_nodes: Vec<u32> = from
                .split(',')
                .map(|n| n.parse().map_err(|e| format!("--from {from}: {e}")))
                .collect::<Result<_, _>>()?;
            let before = placement(pid)?;
            let t = Instant::now();
            let out = Command::new(&bin)
                .args([pid.to_string(), from.clone(), to.clone()])
                .output()
                .map_err(|e| format!("{bin}: {e}"))?;
            let secs = t.elapsed().as_secs_f64();
            if !out.status.success() {
                return Err(format!(
                    "{bin} {pid} {from} {to}: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            let after = placement(pid)?;
            let gone = left(&before, &after, &from_nodes);
            println!(
                "{}",
                json!({
                    "mode": "migratepages",
                    "pid": pid,
                    "elapsed_s": secs,
                    "base_pages_per_s": gone as f64 / page as f64 / secs,
                    "mib_per_s": gone as f64 / MIB as f64 / secs,
                    "left_from_bytes": gone,
                    "before_mib": mib_map(&before),
                    "after_mib": mib_map(&after),
                })
            );
        }
        Cmd::Placement { pid } => {
            let p = placement(pid)?;
            println!("{}", json!({"pid": pid, "mib": mib_map(&p)}));
        }
    }
    Ok(())
}
