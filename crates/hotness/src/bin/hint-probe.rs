//! `hint-probe`: loads tierd's eBPF NUMA hint-fault probe, watches for a while
//! and prints, for each cgroup given, what the probe counted next to the
//! memcg's own `memory.stat` counters over the same window (one JSON line per
//! cgroup), then the probe's program run statistics (one JSON line).
//!
//! Used by the VM tests (probe vs memcg agreement, attribution between two
//! containers) and for the overhead figure: with `--bpf-stats` the kernel's
//! per-program run time (`kernel.bpf_stats_enabled`) gives the ns the probe
//! adds to each hint fault.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use hotness::probe::{nodes_shift_from_config, HintFaultProbe, ProbeOptions, DEFAULT_NODES_SHIFT};

#[derive(Parser)]
#[command(about = "Per-cgroup NUMA hint faults seen by tierd's eBPF probe vs memory.stat")]
struct Args {
    /// cgroup v2 directories to report on (repeatable).
    #[arg(long = "cgroup", required = true)]
    cgroups: Vec<PathBuf>,
    /// How long to watch, seconds (with `--min-faults`, the deadline).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Stop watching as soon as every cgroup's `memory.stat`
    /// `numa_hint_faults` grew by at least this many (polled every 0.5 s),
    /// rather than at `--seconds`.
    #[arg(long)]
    min_faults: Option<u64>,
    /// CONFIG_NODES_SHIFT (default: from --kernel-config, else 10).
    #[arg(long)]
    nodes_shift: Option<u32>,
    /// Kernel config file to read CONFIG_NODES_SHIFT from.
    #[arg(long)]
    kernel_config: Option<PathBuf>,
    /// Turn on kernel.bpf_stats_enabled while watching (restored after).
    #[arg(long)]
    bpf_stats: bool,
    /// Shell command run once the probe is attached and both baselines are
    /// taken (e.g. turning NUMA balancing on), so that no event falls between
    /// the two readings.
    #[arg(long)]
    after_load: Option<String>,
    /// Record declined hint faults (the probe's kernel-side filter) of
    /// these cgroups only (repeatable; none when not given); each
    /// reported cgroup's line counts its records (`declined_records`).
    #[arg(long = "declined-for")]
    declined_for: Vec<PathBuf>,
}

const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

fn memcg_counters(cg: &Path) -> Result<BTreeMap<String, u64>, String> {
    let p = cg.join("memory.stat");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect())
}

/// Quantiles of declined hint-fault latencies (ms) and the count of
/// records without one, as JSON.
fn latency_summary((mut ms, unknown): (Vec<u32>, u64)) -> serde_json::Value {
    ms.sort_unstable();
    let q = |f: f64| (!ms.is_empty()).then(|| ms[((ms.len() - 1) as f64 * f).round() as usize]);
    serde_json::json!({
        "known": ms.len(),
        "unknown": unknown,
        "p10": q(0.1),
        "p50": q(0.5),
        "p90": q(0.9),
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let shift = args
        .nodes_shift
        .or_else(|| {
            args.kernel_config
                .as_deref()
                .and_then(nodes_shift_from_config)
        })
        .unwrap_or(DEFAULT_NODES_SHIFT);
    let opts = ProbeOptions {
        nodes_shift: shift,
        ..ProbeOptions::default()
    };
    let probe = match HintFaultProbe::load(&opts) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("hint-probe: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("hint-probe: attached to {}", probe.attached().join(", "));
    let old_stats = std::fs::read_to_string(STATS_SYSCTL).ok();
    if args.bpf_stats {
        if let Err(e) = std::fs::write(STATS_SYSCTL, "1") {
            eprintln!("hint-probe: {STATS_SYSCTL}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let mut ids = Vec::new();
    let mut before = Vec::new();
    for cg in &args.cgroups {
        let id = match std::fs::metadata(cg) {
            Ok(m) => m.ino(),
            Err(e) => {
                eprintln!("hint-probe: {}: {e}", cg.display());
                return ExitCode::FAILURE;
            }
        };
        ids.push(id);
        match memcg_counters(cg) {
            Ok(c) => before.push(c),
            Err(e) => {
                eprintln!("hint-probe: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut wanted = std::collections::HashSet::new();
    for cg in &args.declined_for {
        match std::fs::metadata(cg) {
            Ok(m) => wanted.insert(m.ino()),
            Err(e) => {
                eprintln!("hint-probe: --declined-for {}: {e}", cg.display());
                return ExitCode::FAILURE;
            }
        };
    }
    if let Err(e) = probe.set_declined_memcgs(&wanted) {
        eprintln!("hint-probe: {e}");
        return ExitCode::FAILURE;
    }
    let r0 = match probe.read() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hint-probe: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(cmd) = &args.after_load {
        match std::process::Command::new("sh").arg("-c").arg(cmd).status() {
            Ok(st) if st.success() => {}
            Ok(st) => {
                eprintln!("hint-probe: --after-load {cmd:?}: {st}");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("hint-probe: --after-load {cmd:?}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let t0 = Instant::now();
    let deadline = Duration::from_secs_f64(args.seconds.max(0.0));
    let mut declined: BTreeMap<u64, u64> = BTreeMap::new();
    // Per memcg: the latencies the kernel's hot-page test measured, and
    // the records without one.
    let mut latencies: BTreeMap<u64, (Vec<u32>, u64)> = BTreeMap::new();
    // Drained every half second, as tierd drains each cycle: the kernel-side
    // buffer holds ~5k records, and a busy cgroup would fill it for all.
    let mut drain = || {
        for e in probe.drain_declined() {
            *declined.entry(e.memcg_id).or_default() += 1;
            let l = latencies.entry(e.memcg_id).or_default();
            match e.latency_ms {
                Some(ms) => l.0.push(ms),
                None => l.1 += 1,
            }
        }
    };
    let enough = || {
        args.min_faults.is_some_and(|n| {
            args.cgroups.iter().zip(&before).all(|(cg, b)| {
                let now = memcg_counters(cg).unwrap_or_default();
                let d = |k: &str| {
                    now.get(k)
                        .copied()
                        .unwrap_or(0)
                        .saturating_sub(b.get(k).copied().unwrap_or(0))
                };
                d("numa_hint_faults") >= n
            })
        })
    };
    while t0.elapsed() < deadline && !enough() {
        std::thread::sleep(Duration::from_millis(500).min(deadline.saturating_sub(t0.elapsed())));
        drain();
    }
    let r1 = match probe.read() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hint-probe: {e}");
            return ExitCode::FAILURE;
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    drain();
    for ((cg, id), b) in args.cgroups.iter().zip(&ids).zip(&before) {
        let after = match memcg_counters(cg) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("hint-probe: {e}");
                return ExitCode::FAILURE;
            }
        };
        let d = |k: &str| after.get(k).copied().unwrap_or(0) - b.get(k).copied().unwrap_or(0);
        let probe_d = r1.memcg_total(*id).since(&r0.memcg_total(*id));
        let by_node: BTreeMap<String, u64> = r1
            .counts
            .iter()
            .filter(|(k, _)| k.memcg_id == *id)
            .map(|(k, c)| {
                let before = r0.counts.get(k).copied().unwrap_or_default();
                (
                    format!(
                        "{}->{}",
                        k.src_nid,
                        k.dst_nid.map_or("none".into(), |n| n.to_string())
                    ),
                    c.since(&before).hint_faults,
                )
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "cgroup": cg.display().to_string(),
                "memcg_id": id,
                "seconds": secs,
                "probe": {
                    "hint_faults": probe_d.hint_faults,
                    "candidates": probe_d.candidates,
                    "prepare_failed": probe_d.prepare_failed,
                    "migrated": probe_d.migrated,
                    "migrate_failed": probe_d.migrate_failed,
                    "migrated_pages": probe_d.migrated_pages,
                    "hint_faults_by_nodes": by_node,
                    "declined_records": declined.get(id).copied().unwrap_or(0),
                    "declined_latency_ms": latency_summary(latencies.remove(id).unwrap_or_default()),
                },
                "memory_stat": {
                    "numa_hint_faults": d("numa_hint_faults"),
                    "pgpromote_success": d("pgpromote_success"),
                    "numa_pages_migrated": d("numa_pages_migrated"),
                },
            })
        );
    }
    let stats: Vec<_> = probe
        .program_stats()
        .into_iter()
        .map(|(name, runs, ns)| serde_json::json!({"program": name, "runs": runs, "run_time_ns": ns}))
        .collect();
    let all_faults: u64 = r1
        .counts
        .values()
        .map(|c| c.hint_faults)
        .sum::<u64>()
        .saturating_sub(r0.counts.values().map(|c| c.hint_faults).sum::<u64>());
    println!(
        "{}",
        serde_json::json!({"programs": stats, "hint_faults_all_memcgs": all_faults, "latency_ns_log2": r1.latency_ns_log2.to_vec(), "migrate_cpu_ns": r1.migrate_cpu_ns.saturating_sub(r0.migrate_cpu_ns)})
    );
    if args.bpf_stats {
        if let Some(v) = old_stats {
            let _ = std::fs::write(STATS_SYSCTL, v.trim());
        }
    }
    ExitCode::SUCCESS
}
