//! `tierscen`: runs a tiering scenario inside the (emulated) CXL host, first
//! under kernel tiering only and then under tierd, in the same boot, and prints
//! per-container placement over time.
//!
//! A scenario file (TOML) names the containers (cgroup, start time, `tierload`
//! arguments), the run length, the checkpoints and the tierd config. For each
//! mode the runner creates the cgroups, starts the workloads in them at their
//! start times, samples `memory.numa_stat` and the workloads' own move_pages
//! reports every `sample_s`, and tears everything down. Output: one line per
//! sample, a checkpoint table per mode, and (`--metrics`) tierd's /metrics at
//! the end. `--json FILE` also writes every sample as JSON lines.
//!
//! Needs root, cgroup v2 with the memory controller, and `tierload` and (for the
//! tierd mode) `tierd` on PATH.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// tierd's own cgroup, at the top level: there its `memory.min` is not
/// capped by an ancestor's (cgroup-v2.rst), as the unit's is when
/// system.slice has `MemoryMin=` too (README "Install").
const TIERD_CGROUP: &str = "tierd.service";
/// `MemoryMin=32M` of config/tierd.service, bytes.
const TIERD_MEMORY_MIN: u64 = 32 << 20;
const DEMOTION_ENABLED: &str = "/sys/kernel/mm/numa/demotion_enabled";
const NUMA_BALANCING: &str = "/proc/sys/kernel/numa_balancing";

#[derive(Parser)]
#[command(about = "Run a tiering scenario: kernel tiering only vs tierd, same boot")]
struct Cli {
    /// Scenario file (TOML).
    scenario: PathBuf,
    /// Modes to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "kernel,tierd")]
    modes: Vec<Mode>,
    /// Override the scenario's duration, seconds.
    #[arg(long)]
    duration_s: Option<u64>,
    /// Print tierd's /metrics at the end of the tierd mode.
    #[arg(long)]
    metrics: bool,
    /// Write every sample as a JSON line to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also print every sample to stdout as `SAMPLE <json>` (per container)
    /// and `HOST <json>` (host-wide) lines, for `cargo xtask bench`.
    #[arg(long)]
    emit: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    /// Kernel tiering only (TPP: NUMA balancing mode 2 + reclaim demotion).
    Kernel,
    /// tierd managing the containers with the scenario's config as written.
    Tierd,
    /// The scenario's config with `promotion = "tierd"`, `mover = "move_pages"`
    /// (regulated promotion by move_pages(2); kernel promotion off).
    TierdPages,
    /// The scenario's config with `promotion = "tierd"`, `mover = "damos"`
    /// (DAMOS migrate_hot / migrate_cold with per-container quotas).
    TierdDamos,
    /// The scenario's config with the defaults of tierd before issue 11:
    /// `demand = "hot_set"` (DAMON's held hot set) and `cold_demotion = true`
    /// (DAMON's idle regions demoted by move_pages before memory.reclaim).
    TierdHot,
    /// The scenario's config with `hotness.source = "damon"` (DAMON heat
    /// sampled though the policy does not use it: its cost alone).
    TierdHeat,
    /// The scenario's config with `limits.band_trade = true` (the
    /// inside-band trade), to compare with `tierd` in the same boot.
    TierdTrade,
    /// The scenario's config with `limits.hot_swap = false` and
    /// `hotness.hot_latency = "0"` (the defaults before session 79: no hot
    /// swap), to compare with `tierd` in the same boot.
    TierdNoSwap,
    /// `tierd` with `limits.arrival_assist = true`, to compare with `tierd`
    /// in the same boot.
    TierdArrival,
    /// `tierd` with `limits.steady_promote_rate = "0"`: the kernel's
    /// promotion never limited or closed in a steady state.
    TierdOpen,
    /// `tierd` with `limits.steady_hot_below = "0"`: the kernel's promotion
    /// held at `steady_promote_rate` in a steady state, never closed.
    TierdLimited,
    /// `tierd` with `limits.arrival_lookahead = false`: no room made ahead
    /// for a filling newcomer's next allocation (the default before
    /// session 70).
    TierdNoLookahead,
    /// `tierd` with `limits.aging_gap = "0s"`: a demotion's two agings
    /// back to back whether or not a newcomer fills (the shipped behaviour
    /// before session 78; docs/NOTES.md "Session 76").
    TierdNoGap,
    /// `tierd` with `limits.hot_swap_window = "120s"`: the hot swap open
    /// for a full NUMA-balancing scan period (60 s at most) after a
    /// newcomer settles at its target.
    TierdWindow,
    /// `tierd` with `limits.hot_swap_extension = "0s"`: the hot swap ends
    /// with its window for every container (the shipped behaviour before
    /// session 82).
    TierdNoExt,
    /// `tierd` with `limits.hot_swap_stop_after = 0`: hot swaps go on
    /// whatever they find idle (the shipped behaviour before session 82).
    TierdNoStop,
    /// `tierd` with `limits.aging_gap_lift_after = 0`: a demotion's agings
    /// spaced by `aging_gap` however little it takes (the shipped behaviour
    /// before session 83).
    TierdGapFixed,
    /// `tierd` with `limits.hot_swap_idle = "0s"`: the hot swap demotes
    /// only pages idle for a cycle (MGLRU generations 1.5 s old; the
    /// shipped behaviour before session 84).
    TierdSwapCycle,
}

impl Mode {
    fn is_tierd(self) -> bool {
        self != Mode::Kernel
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Kernel => "kernel",
            Mode::Tierd => "tierd",
            Mode::TierdPages => "tierd-pages",
            Mode::TierdDamos => "tierd-damos",
            Mode::TierdHot => "tierd-hot",
            Mode::TierdHeat => "tierd-heat",
            Mode::TierdTrade => "tierd-trade",
            Mode::TierdNoSwap => "tierd-no-swap",
            Mode::TierdArrival => "tierd-arrival",
            Mode::TierdOpen => "tierd-open",
            Mode::TierdLimited => "tierd-limited",
            Mode::TierdNoLookahead => "tierd-no-lookahead",
            Mode::TierdNoGap => "tierd-no-gap",
            Mode::TierdWindow => "tierd-window",
            Mode::TierdNoExt => "tierd-no-ext",
            Mode::TierdNoStop => "tierd-no-stop",
            Mode::TierdGapFixed => "tierd-gap-fixed",
            Mode::TierdSwapCycle => "tierd-swap-cycle",
        }
    }

    /// The tierd config for this mode: the scenario's, with the promotion
    /// mode and mover forced for the tierd-* modes.
    fn tierd_config(self, text: &str) -> Result<String> {
        let set: &[(&str, &str, toml::Value)] = match self {
            Mode::Kernel | Mode::Tierd => return Ok(text.to_owned()),
            Mode::TierdPages => &[
                ("hotness", "source", toml::Value::from("damon")),
                ("daemon", "promotion", toml::Value::from("tierd")),
                ("daemon", "mover", toml::Value::from("move_pages")),
            ],
            Mode::TierdDamos => &[
                ("hotness", "source", toml::Value::from("damon")),
                ("daemon", "promotion", toml::Value::from("tierd")),
                ("daemon", "mover", toml::Value::from("damos")),
            ],
            Mode::TierdHot => &[
                ("daemon", "demand", toml::Value::from("hot_set")),
                ("daemon", "cold_demotion", toml::Value::from(true)),
                ("hotness", "source", toml::Value::from("damon")),
            ],
            Mode::TierdHeat => &[("hotness", "source", toml::Value::from("damon"))],
            Mode::TierdTrade => &[("limits", "band_trade", toml::Value::from(true))],
            Mode::TierdNoSwap => &[
                ("limits", "hot_swap", toml::Value::from(false)),
                ("hotness", "hot_latency", toml::Value::from("0")),
            ],
            Mode::TierdArrival => &[("limits", "arrival_assist", toml::Value::from(true))],
            Mode::TierdOpen => &[("limits", "steady_promote_rate", toml::Value::from("0"))],
            Mode::TierdLimited => &[("limits", "steady_hot_below", toml::Value::from("0"))],
            Mode::TierdNoLookahead => &[("limits", "arrival_lookahead", toml::Value::from(false))],
            Mode::TierdNoGap => &[("limits", "aging_gap", toml::Value::from("0s"))],
            Mode::TierdWindow => &[("limits", "hot_swap_window", toml::Value::from("120s"))],
            Mode::TierdNoExt => &[("limits", "hot_swap_extension", toml::Value::from("0s"))],
            Mode::TierdNoStop => &[("limits", "hot_swap_stop_after", toml::Value::from(0))],
            Mode::TierdGapFixed => &[("limits", "aging_gap_lift_after", toml::Value::from(0))],
            Mode::TierdSwapCycle => &[("limits", "hot_swap_idle", toml::Value::from("0s"))],
        };
        let mut v: toml::Table = toml::from_str(text).context("tierd_config")?;
        for (section, key, value) in set {
            let t = v
                .entry(*section)
                .or_insert_with(|| toml::Value::Table(Default::default()))
                .as_table_mut()
                .with_context(|| format!("tierd_config: [{section}] is not a table"))?;
            t.insert((*key).into(), value.clone());
        }
        Ok(toml::to_string(&v)?)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    name: String,
    #[serde(default)]
    description: String,
    duration_s: u64,
    #[serde(default = "default_sample")]
    sample_s: u64,
    #[serde(default)]
    checkpoints_s: Vec<u64>,
    /// Config for the tierd mode (TOML text).
    tierd_config: String,
    #[serde(rename = "container")]
    containers: Vec<ContainerSpec>,
    /// Kernel modules the scenario needs (`zram`, `loop`), in load order:
    /// `cargo xtask bench` places them in the guest's
    /// `/lib/modules/<release>/`, tierscen loads each one not yet loaded
    /// before [`Scenario::setup`].
    #[serde(default)]
    modules: Vec<String>,
    /// Shell commands (`sh -c`) run once, in order, before the first mode:
    /// a swap device, a file system. A failure fails the scenario.
    #[serde(default)]
    setup: Vec<String>,
    /// Shell commands run once after the last mode, whatever its outcome
    /// (a swap device turned off, so that later scenarios of the same boot
    /// run without it); failures are printed.
    #[serde(default)]
    teardown: Vec<String>,
    /// Commands run at a time into every mode (memory offlined, onlined).
    #[serde(default, rename = "event")]
    events: Vec<EventSpec>,
    /// tierd metric families whose samples are printed at the end of each
    /// tierd mode (`METRIC <json>` lines with `--emit`), e.g.
    /// `tierd_topology_changes_total`.
    #[serde(default)]
    report_metrics: Vec<String>,
    /// Report memory by kind per container (anon / file per tier, swap,
    /// memory.pressure): read every sample anyway; this only asks
    /// `cargo xtask bench` for the table.
    #[serde(default)]
    memory_kinds: bool,
}

/// A command run `at_s` seconds into every mode, in `sh -c`, beside the
/// sampling (see [`spawn_events`]); its output is printed (`EVENT` lines)
/// and a non-zero exit fails the scenario once all modes have run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventSpec {
    at_s: u64,
    run: String,
}

fn default_sample() -> u64 {
    5
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContainerSpec {
    name: String,
    /// cgroup path relative to /sys/fs/cgroup.
    cgroup: String,
    #[serde(default)]
    start_s: u64,
    /// Arguments to `tierload`.
    args: Vec<String>,
    /// The container's `local_low` in the tierd config, MiB, when it has one:
    /// the summary reports the MiB × s its fast-tier bytes spent below it
    /// (in every mode, so the kernel-only baseline is measured the same way).
    #[serde(default)]
    local_low_mib: Option<u64>,
    /// The workload program (default `tierload`; `redisload` drives a
    /// `server`); `--name <name>` is appended except for other programs.
    #[serde(default)]
    program: Option<String>,
    /// A server started in the same cgroup before the workload (e.g.
    /// `["redis-server", "--port", "7001", "--save", ""]`), stopped with it.
    #[serde(default)]
    server: Option<Vec<String>>,
    /// Launch the workload through `tierd exec --policy NAME` in the tierd
    /// modes (a `placement = "interleave"` policy: the memory policy is
    /// set before exec); a plain launch under kernel tiering.
    #[serde(default)]
    policy: Option<String>,
}

/// The last report line a workload printed (tierload's JSON), as far as we use it.
#[derive(Debug, Clone, Default, Deserialize)]
struct WorkloadReport {
    /// Absent from reports of workloads that cannot measure it (redisload).
    #[serde(default)]
    hot_residency: Option<f64>,
    #[serde(default)]
    hit_ratio: f64,
    #[serde(default)]
    top10_residency: Option<f64>,
    #[serde(default)]
    accesses_per_s: f64,
    #[serde(default)]
    model_latency_ns: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Sample {
    scenario: String,
    mode: Mode,
    t_s: f64,
    container: String,
    fast_bytes: u64,
    lower_bytes: u64,
    local_ratio: f64,
    target_bytes: Option<u64>,
    hot_residency: Option<f64>,
    hit_ratio: Option<f64>,
    /// Share of the workload's hottest tenth of pages on fast nodes.
    top10_residency: Option<f64>,
    accesses_per_s: Option<f64>,
    /// tierload's modelled mean access latency (accesses × HMAT node
    /// latency): a model, not a measurement.
    model_latency_ns: Option<f64>,
    /// Page-cache bytes on fast / lower-tier nodes (`file` of
    /// memory.numa_stat); anonymous = the totals above minus these.
    file_fast_bytes: u64,
    file_lower_bytes: u64,
    /// memory.swap.current, bytes (0 without swap accounting).
    swap_bytes: u64,
    /// memory.pressure `some avg10`, percent (cgroup-v2.rst, PSI).
    pressure_some_avg10: Option<f64>,
    /// The container's migrations so far (memory.stat, pages, cumulative):
    /// promoted by NUMA balancing, demoted by kswapd, demoted in the
    /// reclaimer's context (direct reclaim and, on 6.12, tierd's
    /// `memory.reclaim`; 7.3 counts the latter in `pgdemote_proactive`,
    /// added here).
    promoted_pages: u64,
    demoted_kswapd_pages: u64,
    demoted_direct_pages: u64,
    /// Hint faults on the container's lower-tier pages so far and of them
    /// the ones the kernel chose to promote (the probe tierscen loads,
    /// events), cumulative.
    lower_hint_faults: u64,
    promotion_candidates: u64,
    /// CPU time the container's tasks got so far (cpu.stat `usage_usec`),
    /// and the time at least one of them was runnable but waiting for a
    /// CPU (cpu.pressure `some` total), seconds, cumulative: a tenant's
    /// throughput under emulation follows the CPU it gets. `None` when the
    /// file cannot be read.
    cpu_s: Option<f64>,
    cpu_wait_s: Option<f64>,
}

struct Running {
    spec_index: usize,
    child: Child,
    server: Option<Child>,
    report: Arc<Mutex<Option<WorkloadReport>>>,
}

fn nodes_with_cpus() -> Vec<u32> {
    let s = fs::read_to_string("/sys/devices/system/node/has_cpu").unwrap_or_else(|_| "0".into());
    parse_list(s.trim())
}

fn parse_list(s: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    v.extend(a..=b);
                }
            }
            None => v.extend(part.parse::<u32>().ok()),
        }
    }
    v
}

/// A cgroup's bytes by tier from memory.numa_stat: anon + file on fast and
/// lower-tier nodes, and of it the file (page cache) bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Placement {
    fast: u64,
    lower: u64,
    file_fast: u64,
    file_lower: u64,
}

fn placement(cgroup: &str, fast: &[u32]) -> Result<Placement> {
    let stat = cgroupctl::CgroupFs::new(CGROUP_ROOT).numa_stat(cgroup)?;
    let mut p = Placement::default();
    for n in stat.nodes() {
        let (all, file) = (stat.resident_bytes(n), stat.file_bytes(n));
        if fast.contains(&n) {
            p.fast += all;
            p.file_fast += file;
        } else {
            p.lower += all;
            p.file_lower += file;
        }
    }
    Ok(p)
}

/// memory.swap.current of a cgroup, bytes (0 where absent).
fn swap_bytes(cgroup: &str) -> u64 {
    fs::read_to_string(
        Path::new(CGROUP_ROOT)
            .join(cgroup)
            .join("memory.swap.current"),
    )
    .ok()
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or(0)
}

/// `some avg10` of a cgroup's memory.pressure, percent.
fn pressure_some_avg10(cgroup: &str) -> Option<f64> {
    let psi = cgroupctl::CgroupFs::new(CGROUP_ROOT).memory_pressure(cgroup);
    psi.ok().map(|p| p.some.avg10)
}

/// DAMON_STAT's switch (Linux 6.17+; on from boot in Debian's 7.x kernels).
const DAMON_STAT: &str = "/sys/module/damon_stat/parameters/enabled";

/// DAMON_STAT's tuned aggregation interval, µs (Documentation/admin-guide/
/// mm/damon/stat.rst).
const DAMON_STAT_AGGR_INTERVAL: &str = "/sys/module/damon_stat/parameters/aggr_interval_us";

/// Whether DAMON_STAT runs (its `enabled` parameter reads Y).
fn damon_stat_on() -> bool {
    fs::read_to_string(DAMON_STAT).is_ok_and(|s| s.trim() == "Y")
}

/// DAMON_STAT's kdamond's pid (mm/damon/stat.c; -1 while it is off).
const DAMON_STAT_KDAMOND_PID: &str = "/sys/module/damon_stat/parameters/kdamond_pid";

/// DAMON_STAT turned off for a mode whose config needs DAMON, as an
/// operator does before running such a config (its kdamond is exclusive,
/// and tierd never stops kdamonds it did not create); on again when
/// dropped. The shipped defaults (`Mode::Tierd`, `Mode::Kernel`) run on the
/// kernel as it boots.
struct DamonStatOff(bool);

impl DamonStatOff {
    fn for_mode(mode: Mode) -> Self {
        let needs_damon = matches!(
            mode,
            Mode::TierdPages | Mode::TierdDamos | Mode::TierdHot | Mode::TierdHeat
        );
        let on = damon_stat_on();
        if !(needs_damon && on) {
            return DamonStatOff(false);
        }
        match fs::write(DAMON_STAT, "N") {
            Ok(()) => {
                println!(
                    "tierscen: DAMON_STAT off for {} (its config needs DAMON), on again after it",
                    mode.label()
                );
                DamonStatOff(true)
            }
            Err(e) => {
                println!("tierscen: cannot turn DAMON_STAT off ({DAMON_STAT}: {e}); tierd runs without DAMON");
                DamonStatOff(false)
            }
        }
    }
}

impl Drop for DamonStatOff {
    fn drop(&mut self) {
        if self.0 {
            if let Err(e) = fs::write(DAMON_STAT, "Y") {
                println!("tierscen: cannot turn DAMON_STAT back on ({DAMON_STAT}: {e})");
            }
        }
    }
}

/// Every mode starts from a host whose kernel reclaims every node: a node
/// the kernel gave up on (`node_unreclaimable` in /proc/zoneinfo, after 16
/// kswapd runs that reclaimed nothing) gets neither kswapd demotion nor
/// NUMA-balancing promotion until a reclaim frees a page on it, so a run
/// after one that left it so would measure a crippled kernel. Revives such
/// a node with a root `memory.reclaim` write and says so (`HOST_RESET`).
fn revive_given_up_nodes(scenario: &str, mode: Mode) {
    let path = Path::new("/proc/zoneinfo");
    let read = || {
        fs::read_to_string(path)
            .ok()
            .and_then(|t| tierd::topology::unreclaimable_nodes(path, &t).ok())
            .unwrap_or_default()
    };
    let given_up = read();
    if given_up.is_empty() {
        return;
    }
    let reclaim = Path::new(CGROUP_ROOT).join("memory.reclaim");
    let r = fs::write(&reclaim, "1M");
    println!(
        "HOST_RESET {scenario} / {}: node(s) {given_up:?} unreclaimable at the start; root memory.reclaim: {r:?}; now {:?}",
        mode.label(),
        read()
    );
}

/// Every mode starts from the kernel's memory-tiering state as it is when
/// tiering is switched on: `kernel.numa_balancing` written 0 here, and 2 by
/// the mode (kernel tiering in [`run_mode`], tierd at its start). Setting the
/// tiering bit resets each node's hot-page threshold to `hot_threshold_ms`
/// (kernel/sched/core.c `reset_memory_tiering`). Without it a run inherits
/// the threshold the boot's earlier runs left: the kernel moves it by an
/// eighth of `hot_threshold_ms` per minute (kernel/sched/fair.c
/// `numa_promotion_adjust_threshold`), up towards 2× while promotion is
/// unlimited, down while tierd's steady-state gate holds it at 0 — and
/// with it how many hint faults pass the hot-page test (docs/NOTES.md
/// "Session 60").
///
/// DAMON_STAT (on from boot on 7.x) is restarted too when it runs: its
/// context, regions and auto-tuned intervals last until it is switched off
/// (mm/damon/stat.c builds a new context on each enable), so every run
/// starts it from the same regions and intervals. What the restart cannot
/// reset is the physical layout the boot's earlier runs left: the boot's
/// first run keeps 7–13× fewer DAMON regions, and spends 3–5× less
/// kdamond CPU, than any later run whichever mode it is (docs/NOTES.md
/// "Session 74"); [`HostSample::damon_stat_cpu_s`] keeps it apart.
fn reset_tiering_state() -> Result<()> {
    fs::write(NUMA_BALANCING, "0")
        .with_context(|| format!("{NUMA_BALANCING}: switch tiering off before the run"))?;
    if damon_stat_on() {
        fs::write(DAMON_STAT, "N")
            .and_then(|()| fs::write(DAMON_STAT, "Y"))
            .with_context(|| format!("{DAMON_STAT}: restart DAMON_STAT before the run"))?;
        println!("tierscen: DAMON_STAT restarted for this run (fresh regions and intervals)");
    }
    Ok(())
}

fn http_get(addr: &str, path: &str) -> Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    match buf.split_once("\r\n\r\n") {
        Some((head, body)) if head.contains(" 200 ") => Ok(body.to_owned()),
        _ => bail!("bad answer from http://{addr}{path}"),
    }
}

/// Targets per cgroup path from tierd's /status.
fn tierd_targets(addr: &str) -> BTreeMap<String, (u64, String)> {
    let mut out = BTreeMap::new();
    if let Ok(body) = http_get(addr, "/status") {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) {
            for c in v["containers"].as_array().into_iter().flatten() {
                if let (Some(name), Some(t)) = (c["container"].as_str(), c["target_bytes"].as_u64())
                {
                    // State, demand (MiB), damping level: why the target is what it is.
                    let why = format!(
                        " [{} demand {:.0} d{}]",
                        c["state"].as_str().unwrap_or("?"),
                        c["demand_bytes"].as_u64().unwrap_or(0) as f64 / (1u64 << 20) as f64,
                        c["damping_level"].as_u64().unwrap_or(0)
                    );
                    out.insert(name.to_owned(), (t, why));
                }
            }
        }
    }
    out
}

fn mkcgroup(path: &str) -> Result<()> {
    let mut cur = PathBuf::from(CGROUP_ROOT);
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts {
        // Children need the memory controller enabled in their parent.
        let sc = cur.join("cgroup.subtree_control");
        let enabled = fs::read_to_string(&sc).unwrap_or_default();
        if !enabled.split_whitespace().any(|c| c == "memory") {
            fs::write(&sc, "+memory")
                .with_context(|| format!("enable memory in {}", sc.display()))?;
        }
        cur.push(part);
        if !cur.exists() {
            fs::create_dir(&cur).with_context(|| format!("mkdir {}", cur.display()))?;
        }
    }
    Ok(())
}

/// Removes a cgroup and its now-empty parents up to the root; retries while
/// the killed workload is still exiting.
fn rmcgroup(path: &str) {
    let full = Path::new(CGROUP_ROOT).join(path);
    for _ in 0..50 {
        if !full.exists() || fs::remove_dir(&full).is_ok() {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let mut parent = full.parent().map(Path::to_path_buf);
    while let Some(p) = parent {
        if p == Path::new(CGROUP_ROOT) || fs::remove_dir(&p).is_err() {
            break;
        }
        parent = p.parent().map(Path::to_path_buf);
    }
}

/// Starts container `i`'s server and workload in its cgroup; in a tierd
/// mode (`tierd_config` = the config tierd runs with) a container with a
/// `policy` is launched through `tierd exec --policy`.
fn spawn_workload(i: usize, spec: &ContainerSpec, tierd_config: Option<&Path>) -> Result<Running> {
    let procs = Path::new(CGROUP_ROOT)
        .join(&spec.cgroup)
        .join("cgroup.procs");
    let server = match &spec.server {
        Some(argv) if !argv.is_empty() => {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit());
            let procs_c = procs.clone();
            unsafe {
                cmd.pre_exec(move || fs::write(&procs_c, "0"));
            }
            Some(
                cmd.spawn()
                    .with_context(|| format!("start {} in {}", argv[0], procs.display()))?,
            )
        }
        _ => None,
    };
    let program = spec.program.as_deref().unwrap_or("tierload");
    let mut cmd = match (&spec.policy, tierd_config) {
        (Some(policy), Some(cfg)) => {
            let mut c = Command::new("tierd");
            c.arg("--config")
                .arg(cfg)
                .args(["exec", "--policy", policy, "--", program]);
            c
        }
        _ => Command::new(program),
    };
    cmd.args(&spec.args);
    if program == "tierload" {
        cmd.args(["--name", &spec.name]);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    // Join the cgroup before exec, so that every page is charged to it.
    let procs_c = procs.clone();
    unsafe {
        cmd.pre_exec(move || fs::write(&procs_c, "0"));
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("start {program} in {}", procs.display()))?;
    let report = Arc::new(Mutex::new(None));
    let stdout = child.stdout.take().expect("piped");
    let r = report.clone();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(rep) = serde_json::from_str::<WorkloadReport>(&line) {
                *r.lock().unwrap() = Some(rep);
            }
        }
    });
    Ok(Running {
        spec_index: i,
        child,
        server,
        report,
    })
}

fn stop(children: &mut Vec<Running>) {
    for r in children.iter() {
        for c in std::iter::once(&r.child).chain(r.server.as_ref()) {
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
        }
    }
    for r in children.iter_mut() {
        let _ = r.child.wait();
        if let Some(s) = r.server.as_mut() {
            let _ = s.wait();
        }
    }
    children.clear();
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

struct ModeResult {
    mode: Mode,
    samples: Vec<Sample>,
    host: Vec<HostSample>,
    converged_s: Option<f64>,
    profile: Option<CycleProfile>,
    /// Events whose command failed (the scenario fails after all modes).
    event_failures: Vec<String>,
}

/// Where tierd's cycles spent their wall time, from its /metrics at the end
/// of a mode (`tierd_cycle_phase_seconds_total{phase}`,
/// `tierd_loop_duration_seconds_count`).
#[derive(Debug, Clone, Serialize)]
struct CycleProfile {
    scenario: String,
    mode: String,
    cycles: u64,
    /// (phase, wall seconds summed over all cycles), in the order tierd
    /// runs them.
    phases: Vec<(String, f64)>,
    /// (phase, CPU seconds of the cycle's thread summed over all cycles),
    /// the same order (`tierd_cycle_phase_cpu_seconds_total`; empty from a
    /// tierd without it).
    cpu_phases: Vec<(String, f64)>,
}

/// A cycle profile read from /metrics: the cycle count, and per phase the
/// wall and the CPU seconds summed over cycles (see [`CycleProfile`]).
type PhaseSeconds = (u64, Vec<(String, f64)>, Vec<(String, f64)>);

/// Parses the cycle count and the per-phase wall and CPU seconds out of a
/// /metrics text; `None` when the count or the wall times are missing (a
/// tierd without the profile, or no cycle).
fn cycle_profile(metrics: &str) -> Option<PhaseSeconds> {
    let mut cycles = None;
    let mut phases = Vec::new();
    let mut cpu_phases = Vec::new();
    for line in metrics.lines() {
        let Some((key, val)) = line.rsplit_once(' ') else {
            continue;
        };
        if key == "tierd_loop_duration_seconds_count" {
            cycles = val.parse().ok();
            continue;
        }
        let (rest, into) = if let Some(r) =
            key.strip_prefix("tierd_cycle_phase_seconds_total{phase=\"")
        {
            (r, &mut phases)
        } else if let Some(r) = key.strip_prefix("tierd_cycle_phase_cpu_seconds_total{phase=\"") {
            (r, &mut cpu_phases)
        } else {
            continue;
        };
        if let (Some(name), Ok(v)) = (rest.strip_suffix("\"}"), val.parse::<f64>()) {
            into.push((name.to_string(), v));
        }
    }
    const ORDER: &[&str] = tierd::metrics::CYCLE_PHASES;
    for p in [&mut phases, &mut cpu_phases] {
        p.sort_by_key(|(p, _)| ORDER.iter().position(|o| o == p).unwrap_or(ORDER.len()));
    }
    let cycles = cycles.filter(|&c| c > 0)?;
    (!phases.is_empty()).then_some((cycles, phases, cpu_phases))
}

/// Host-wide state at one sample: fast-tier use and the kernel's migration
/// counters (/proc/vmstat, pages; cumulative). `pgmigrate_success` counts every
/// migration — NUMA-balancing promotion, reclaim demotion, move_pages(2),
/// DAMOS — so its rate is comparable across modes and movers.
#[derive(Debug, Clone, Default, Serialize)]
struct HostSample {
    scenario: String,
    mode: String,
    t_s: f64,
    fast_total_bytes: u64,
    fast_used_bytes: u64,
    pgmigrate_success: u64,
    pgpromote_success: u64,
    pgdemote: u64,
    /// tierd's CPU time (user + system) so far and its resident set; 0 in
    /// kernel-only mode.
    tierd_cpu_s: f64,
    tierd_rss_bytes: u64,
    /// CPU time so far of the kernel's tiering threads (`kswapd*`: reclaim
    /// and demotion; `kdamond*`: DAMON, but for DAMON_STAT's), user +
    /// system seconds: what kernel tiering spends where tierd spends its
    /// own CPU.
    kernel_tiering_cpu_s: f64,
    /// The `kdamond*` part of `kernel_tiering_cpu_s`: the kdamonds of a
    /// tierd config that uses DAMON.
    kdamond_cpu_s: f64,
    /// CPU time so far of DAMON_STAT's kdamond (the thread named by its
    /// `kdamond_pid` parameter), user + system seconds, in no other field:
    /// the kernel's own access monitor (Linux 6.17+, on from boot in
    /// Debian's 7.x kernels) runs in every mode and tiers nothing, and what
    /// it costs follows the boot's history, not the mode (see
    /// [`reset_tiering_state`]).
    damon_stat_cpu_s: f64,
    /// DAMON_STAT's auto-tuned aggregation interval (µs; its sampling
    /// interval is a twentieth of it), from its module parameter
    /// `aggr_interval_us`; `None` where DAMON_STAT is absent or off. What
    /// its kdamond costs follows from it.
    damon_stat_aggr_interval_us: Option<u64>,
    /// System CPU time so far of the scenario's workload processes (and
    /// their servers): where the kernel's own tiering work runs in task
    /// context — NUMA-balancing scanning (`task_numa_work`), hint faults and
    /// the promotions they make — together with the workloads' other kernel
    /// time (page faults, system calls), which is the same in every mode.
    workload_system_cpu_s: f64,
    /// CPU time so far the kernel spent promoting pages in the faulting
    /// tasks (`migrate_misplaced_folio`, timed by the hint-fault probe, all
    /// processes): the part of the tasks' kernel time that is tiering work
    /// and that tierd's own promotions (`move_pages` in tierd) replace.
    kernel_promotion_cpu_s: f64,
    /// `pgpromote_candidate` (/proc/vmstat, pages, cumulative): lower-tier
    /// pages whose hint fault passed the kernel's hot-page latency test,
    /// whether the promotion rate limit then let them through or not
    /// (kernel/sched/fair.c `numa_promotion_rate_limit`).
    pgpromote_candidate: u64,
    /// Hint faults the kernel chose a target node for (the probe, all
    /// memcgs, events, cumulative): the candidates the rate limit let
    /// through. `pgpromote_candidate` minus these is the hot faults the
    /// rate limit declined.
    probe_candidates: u64,
    /// TLB shootdowns so far (/proc/interrupts `TLB`, summed over CPUs,
    /// cumulative; x86): the IPIs a migration, an unmap or a protection
    /// change sends to the other CPUs a process ran on. Under TCG each one
    /// flushes the receiving vCPU's software TLB, so a tenant can run
    /// slower for another process's page moves.
    tlb_shootdowns: u64,
    /// Function-call IPIs so far (/proc/interrupts `CAL`, summed over CPUs,
    /// cumulative; x86).
    call_ipis: u64,
}

/// The hint-fault probe tierscen loads for itself in every mode, to time
/// the kernel's promotions in task context (see
/// [`HostSample::kernel_promotion_cpu_s`]).
fn promotion_clock() -> Result<hotness::probe::HintFaultProbe> {
    hotness::probe::HintFaultProbe::load(&hotness::probe::ProbeOptions::default()).context(
        "cannot load the hint-fault probe that times the kernel's promotions in \
         the tasks (the tiering-CPU rows need it): run tierscen as root on a kernel \
         with BTF (/sys/kernel/btf/vmlinux)",
    )
}

/// A read of the probe's maps; `None` (logged) when they cannot be read, so
/// the rows built on it show no value rather than a wrong one.
fn read_clock(probe: &hotness::probe::HintFaultProbe) -> Option<hotness::probe::ProbeReading> {
    probe
        .read()
        .map_err(|e| eprintln!("tierscen: cannot read the hint-fault probe: {e}"))
        .ok()
}

/// CPU seconds spent in `migrate_misplaced_folio` since the probe was
/// loaded; NaN (null in the samples) without a reading.
fn promotion_s(reading: Option<&hotness::probe::ProbeReading>) -> f64 {
    reading.map_or(f64::NAN, |r| r.migrate_cpu_ns as f64 / 1e9)
}

/// A container's hint faults on lower-tier pages and, of them, the ones the
/// kernel chose to promote (events since the probe was loaded; 0 without a
/// reading or when the cgroup is gone).
fn container_hint_counts(
    reading: Option<&hotness::probe::ProbeReading>,
    cgroup: &str,
    fast: &[u32],
) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (Some(r), Ok(meta)) = (reading, fs::metadata(Path::new(CGROUP_ROOT).join(cgroup))) else {
        return (0, 0);
    };
    r.counts
        .iter()
        .filter(|(k, _)| k.memcg_id == meta.ino() && !fast.contains(&k.src_nid))
        .fold((0, 0), |(f, c), (_, n)| {
            (f + n.hint_faults, c + n.candidates)
        })
}

/// CPU time of the kernel's tiering threads (`kswapd*`, `kdamond*`), kept
/// across their exits: a kdamond that tierd starts for an assist and stops
/// again takes its CPU time with it from /proc, so a sum over the threads
/// alive at each sample fell when one ended (and the assist's DAMON cost
/// was left out of the tiering-CPU rows). Each thread, told apart by pid
/// and start time, counts with the most CPU it was seen with; a thread
/// born and gone between two samples, or its last seconds, are still
/// missed (at most one sample interval of it).
#[derive(Default)]
struct TieringThreads {
    /// (pid, start time in clock ticks) → (utime + stime seconds last
    /// seen, which thread it is).
    seen: BTreeMap<(u32, u64), (f64, KernelThread)>,
}

/// Which of the threads [`TieringThreads`] follows a thread is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KernelThread {
    Kswapd,
    Kdamond,
    /// DAMON_STAT's kdamond.
    DamonStat,
}

/// CPU seconds of the threads [`TieringThreads`] has seen, alive or gone.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct ThreadCpu {
    /// kswapd's and the kdamonds' but DAMON_STAT's.
    tiering: f64,
    /// The kdamonds' part of `tiering`.
    kdamonds: f64,
    /// DAMON_STAT's kdamond's (in neither of the others).
    damon_stat: f64,
}

impl TieringThreads {
    /// Reads the threads alive under `proc` (a /proc) and returns the CPU
    /// seconds of every one seen so far, alive or gone. `damon_stat_pid`:
    /// DAMON_STAT's kdamond (its `kdamond_pid` parameter), told apart from
    /// the other kdamonds when first seen.
    fn sample(&mut self, proc: &Path, damon_stat_pid: Option<u32>) -> ThreadCpu {
        if let Ok(dir) = fs::read_dir(proc) {
            for pid in dir
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            {
                let dir = proc.join(pid.to_string());
                let comm = fs::read_to_string(dir.join("comm")).unwrap_or_default();
                let kind = if comm.starts_with("kswapd") {
                    KernelThread::Kswapd
                } else if !comm.starts_with("kdamond") {
                    continue;
                } else if damon_stat_pid == Some(pid) {
                    KernelThread::DamonStat
                } else {
                    KernelThread::Kdamond
                };
                let stat = fs::read_to_string(dir.join("stat")).unwrap_or_default();
                let Some((user, system, start)) = stat_times(&stat) else {
                    continue;
                };
                let (cpu, _) = self.seen.entry((pid, start)).or_insert((0.0, kind));
                *cpu = cpu.max(user + system);
            }
        }
        let mut cpu = ThreadCpu::default();
        for &(c, kind) in self.seen.values() {
            match kind {
                KernelThread::Kswapd => cpu.tiering += c,
                KernelThread::Kdamond => {
                    cpu.tiering += c;
                    cpu.kdamonds += c;
                }
                KernelThread::DamonStat => cpu.damon_stat += c,
            }
        }
        cpu
    }
}

/// (utime, stime) in seconds and the start time in clock ticks from the
/// text of /proc/PID/stat; `None` when it does not parse.
fn stat_times(stat: &str) -> Option<(f64, f64, u64)> {
    // Fields after the command name (which may contain spaces): utime,
    // stime and starttime are fields 14, 15 and 22: 11, 12 and 19 after ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some((
        field(11)? as f64 / clock_ticks(),
        field(12)? as f64 / clock_ticks(),
        field(19)?,
    ))
}

/// (utime, stime) of a process in seconds, from /proc/PID/stat (0 when gone).
fn proc_times(pid: u32) -> (f64, f64) {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat_times(&stat).map_or((0.0, 0.0), |(u, s, _)| (u, s))
}

/// CPU seconds (utime + stime) and VmRSS of a process, from /proc.
fn proc_usage(pid: u32) -> (f64, u64) {
    let (user, system) = proc_times(pid);
    let cpu = user + system;
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024;
    (cpu, rss)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn host_sample(
    t_s: f64,
    fast: &[u32],
    tierd: Option<u32>,
    workloads: &[u32],
    reading: Option<&hotness::probe::ProbeReading>,
    threads: &mut TieringThreads,
) -> HostSample {
    let mut h = HostSample {
        t_s,
        workload_system_cpu_s: workloads.iter().map(|&p| proc_times(p).1).sum(),
        kernel_promotion_cpu_s: promotion_s(reading),
        probe_candidates: reading.map_or(0, |r| r.counts.values().map(|c| c.candidates).sum()),
        ..Default::default()
    };
    if let Some(pid) = tierd {
        (h.tierd_cpu_s, h.tierd_rss_bytes) = proc_usage(pid);
    }
    let damon_stat_pid = fs::read_to_string(DAMON_STAT_KDAMOND_PID)
        .ok()
        .and_then(|v| v.trim().parse().ok());
    let cpu = threads.sample(Path::new("/proc"), damon_stat_pid);
    h.kernel_tiering_cpu_s = cpu.tiering;
    h.kdamond_cpu_s = cpu.kdamonds;
    h.damon_stat_cpu_s = cpu.damon_stat;
    if damon_stat_on() {
        h.damon_stat_aggr_interval_us = fs::read_to_string(DAMON_STAT_AGGR_INTERVAL)
            .ok()
            .and_then(|v| v.trim().parse().ok());
    }
    for n in fast {
        let p = format!("/sys/devices/system/node/node{n}/meminfo");
        let text = fs::read_to_string(&p).unwrap_or_default();
        let kb = |key: &str| -> u64 {
            text.lines()
                .find(|l| l.split_whitespace().nth(2) == Some(key))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
                .unwrap_or(0)
                * 1024
        };
        let (total, free) = (kb("MemTotal:"), kb("MemFree:"));
        h.fast_total_bytes += total;
        h.fast_used_bytes += total.saturating_sub(free);
    }
    let irq = fs::read_to_string("/proc/interrupts").unwrap_or_default();
    h.tlb_shootdowns = interrupts_total(&irq, "TLB");
    h.call_ipis = interrupts_total(&irq, "CAL");
    let vm = fs::read_to_string("/proc/vmstat").unwrap_or_default();
    for l in vm.lines() {
        let mut it = l.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match k {
            "pgmigrate_success" => h.pgmigrate_success = v,
            "pgpromote_success" => h.pgpromote_success = v,
            "pgpromote_candidate" => h.pgpromote_candidate = v,
            k if k.starts_with("pgdemote_") => h.pgdemote += v,
            _ => {}
        }
    }
    h
}

/// One row of /proc/interrupts (`row`: its name without the colon, e.g.
/// `TLB`) summed over the CPUs; 0 where the kernel has no such row. The
/// counts are the numeric columns after `NAME:`, one per CPU, up to the
/// description text.
fn interrupts_total(text: &str, row: &str) -> u64 {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(row)?.strip_prefix(':'))
        .map(|rest| {
            rest.split_whitespace()
                .map_while(|v| v.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

/// Pages migrated per second between two host samples.
fn migrate_rate(a: &HostSample, b: &HostSample) -> f64 {
    let dt = (b.t_s - a.t_s).max(1e-3);
    b.pgmigrate_success.saturating_sub(a.pgmigrate_success) as f64 / dt
}

fn run_mode(
    sc: &Scenario,
    mode: Mode,
    duration_s: u64,
    cli: &Cli,
    json: &mut Option<fs::File>,
    clock: &hotness::probe::HintFaultProbe,
) -> Result<ModeResult> {
    let fast = nodes_with_cpus();
    let _ = fs::write("/proc/sys/vm/drop_caches", "3");
    revive_given_up_nodes(&sc.name, mode);
    reset_tiering_state()?;
    let mut tierd: Option<Child> = None;
    let mut tierd_config: Option<PathBuf> = None;
    let _damon_stat = DamonStatOff::for_mode(mode);
    let watchdog_pings = Arc::new(Mutex::new(0u64));
    let mut addr = String::from("127.0.0.1:9464");
    match mode {
        Mode::Kernel => {
            fs::write(DEMOTION_ENABLED, "1").context(DEMOTION_ENABLED)?;
            fs::write(NUMA_BALANCING, "2").context(NUMA_BALANCING)?;
        }
        Mode::Tierd
        | Mode::TierdPages
        | Mode::TierdDamos
        | Mode::TierdHot
        | Mode::TierdHeat
        | Mode::TierdTrade
        | Mode::TierdNoSwap
        | Mode::TierdArrival
        | Mode::TierdOpen
        | Mode::TierdLimited
        | Mode::TierdNoLookahead
        | Mode::TierdNoGap
        | Mode::TierdWindow
        | Mode::TierdNoExt
        | Mode::TierdNoStop
        | Mode::TierdGapFixed
        | Mode::TierdSwapCycle => {
            let cfg_path = PathBuf::from(format!("/tmp/tierd-{}.toml", sc.name));
            let cfg_text = mode.tierd_config(&sc.tierd_config)?;
            fs::write(&cfg_path, &cfg_text)?;
            // tierd refuses a group- or world-writable config.
            {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&cfg_path, fs::Permissions::from_mode(0o600))?;
            }
            let v: toml::Value = toml::from_str(&cfg_text).context("tierd_config")?;
            if let Some(a) = v
                .get("daemon")
                .and_then(|d| d.get("metrics_listen"))
                .and_then(|a| a.as_str())
            {
                addr = a.to_owned();
            }
            let log = fs::File::create(format!("/tmp/tierd-{}.log", sc.name))?;
            // Start tierd the way systemd's Type=notify does: a notification
            // socket in NOTIFY_SOCKET, readiness when it sends READY=1.
            let sock_path = PathBuf::from(format!("/run/tierscen-{}.notify", sc.name));
            let _ = fs::remove_file(&sock_path);
            let sock = UnixDatagram::bind(&sock_path).context("bind the notify socket")?;
            sock.set_read_timeout(Some(Duration::from_secs(30)))?;
            // systemd also sets WATCHDOG_PID (sd_notify checks it): the shell's
            // pid is tierd's after exec.
            // And in a cgroup protected as the unit's MemoryMin= protects
            // tierd.service (config/tierd.service): its pages are never
            // demoted to the tier it manages.
            mkcgroup(TIERD_CGROUP)?;
            let cg = Path::new(CGROUP_ROOT).join(TIERD_CGROUP);
            fs::write(cg.join("memory.min"), TIERD_MEMORY_MIN.to_string())
                .with_context(|| format!("{}/memory.min", cg.display()))?;
            let procs = cg.join("cgroup.procs");
            let mut cmd = Command::new("sh");
            // SAFETY: only a write(2) between fork and exec.
            unsafe {
                cmd.pre_exec(move || fs::write(&procs, "0"));
            }
            let child = cmd
                .args(["-c", "export WATCHDOG_PID=$$; exec tierd \"$@\"", "sh"])
                .args(["--config", cfg_path.to_str().unwrap(), "run"])
                .env("NOTIFY_SOCKET", &sock_path)
                // As systemd's WatchdogSec=10 would: tierd pings every cycle.
                .env("WATCHDOG_USEC", "10000000")
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("start tierd (is it on PATH?)")?;
            let pid = child.id();
            tierd = Some(child);
            tierd_config = Some(cfg_path.clone());
            let started = Instant::now();
            let mut buf = [0u8; 512];
            loop {
                match sock.recv(&mut buf) {
                    Ok(n) => {
                        if String::from_utf8_lossy(&buf[..n])
                            .lines()
                            .any(|l| l == "READY=1")
                        {
                            break;
                        }
                    }
                    Err(e) if started.elapsed() < READY_TIMEOUT => {
                        // Slow, not yet failed: say where tierd's threads
                        // wait in the kernel (the guest is gone afterwards).
                        println!(
                            "tierd not ready after {:.0} s ({e}); its threads, pages and the guest:\n{}",
                            started.elapsed().as_secs_f64(),
                            start_diagnostics(pid)
                        );
                    }
                    Err(e) => {
                        let path = format!("/tmp/tierd-{}.log", sc.name);
                        let text = fs::read_to_string(&path).unwrap_or_default();
                        let tail: Vec<&str> = text.lines().rev().take(30).collect();
                        let tail: Vec<&str> = tail.into_iter().rev().collect();
                        bail!(
                            "tierd sent no READY=1 within {} s ({e}); the end of {path}:\n{}",
                            READY_TIMEOUT.as_secs(),
                            tail.join("\n")
                        );
                    }
                }
            }
            println!(
                "tierd is ready (sd_notify READY=1) after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            let pings = watchdog_pings.clone();
            thread::spawn(move || {
                let mut buf = [0u8; 512];
                while let Ok(n) = sock.recv(&mut buf) {
                    if String::from_utf8_lossy(&buf[..n])
                        .lines()
                        .any(|l| l == "WATCHDOG=1")
                    {
                        *pings.lock().unwrap() += 1;
                    }
                }
            });
            http_get(&addr, "/status").context("tierd is ready but does not serve /status")?;
        }
    }
    for c in &sc.containers {
        mkcgroup(&c.cgroup)?;
    }
    println!("--- {} / {}: {} s ---", sc.name, mode.label(), duration_s);
    let start = Instant::now();
    let mut running: Vec<Running> = Vec::new();
    let mut samples = Vec::new();
    let tierd_pid = tierd.as_ref().map(|c| c.id());
    let tag = |mut h: HostSample| {
        h.scenario = sc.name.clone();
        h.mode = mode.label().into();
        h
    };
    let mut threads = TieringThreads::default();
    let mut host: Vec<HostSample> = vec![tag(host_sample(
        0.0,
        &fast,
        tierd_pid,
        &[],
        read_clock(clock).as_ref(),
        &mut threads,
    ))];
    let mut next_sample = 0u64;
    let mut converged_s = None;
    let events = spawn_events(&sc.events, start, format!("{} / {}", sc.name, mode.label()));
    let last_start = sc.containers.iter().map(|c| c.start_s).max().unwrap_or(0);
    while start.elapsed().as_secs_f64() < duration_s as f64 + 0.5 {
        let t = start.elapsed().as_secs_f64();
        for (i, c) in sc.containers.iter().enumerate() {
            if c.start_s as f64 <= t && !running.iter().any(|r| r.spec_index == i) {
                running.push(spawn_workload(i, c, tierd_config.as_deref())?);
            }
        }
        if t >= next_sample as f64 {
            next_sample += sc.sample_s;
            let targets = if mode.is_tierd() {
                tierd_targets(&addr)
            } else {
                BTreeMap::new()
            };
            let pids: Vec<u32> = running
                .iter()
                .flat_map(|r| std::iter::once(r.child.id()).chain(r.server.as_ref().map(Child::id)))
                .collect();
            let reading = read_clock(clock);
            let h = tag(host_sample(
                t,
                &fast,
                tierd_pid,
                &pids,
                reading.as_ref(),
                &mut threads,
            ));
            let prev = host.last().unwrap().clone();
            let mut line = format!(
                "t={t:>5.0}s | DRAM used {:>5.1}% | migrated {:>6.0} pages/s",
                100.0 * h.fast_used_bytes as f64 / h.fast_total_bytes.max(1) as f64,
                migrate_rate(&prev, &h)
            );
            if cli.emit {
                println!("HOST {}", serde_json::to_string(&h)?);
            }
            host.push(h);
            let mut all_within = running.len() == sc.containers.len() && t >= last_start as f64;
            for r in &running {
                let spec = &sc.containers[r.spec_index];
                let p = placement(&spec.cgroup, &fast).unwrap_or_default();
                let (f, l) = (p.fast, p.lower);
                let cgfs = cgroupctl::CgroupFs::new(CGROUP_ROOT);
                let stat = cgfs.memory_stat(&spec.cgroup).ok();
                let hints = container_hint_counts(reading.as_ref(), &spec.cgroup, &fast);
                let rep = r.report.lock().unwrap().clone();
                let target = targets.get(&spec.cgroup).map(|t| t.0);
                let why = targets
                    .get(&spec.cgroup)
                    .map(|t| t.1.clone())
                    .unwrap_or_default();
                let s = Sample {
                    scenario: sc.name.clone(),
                    mode,
                    t_s: t,
                    container: spec.name.clone(),
                    fast_bytes: f,
                    lower_bytes: l,
                    local_ratio: if f + l == 0 {
                        0.0
                    } else {
                        f as f64 / (f + l) as f64
                    },
                    target_bytes: target,
                    hot_residency: rep.as_ref().and_then(|r| r.hot_residency),
                    hit_ratio: rep.as_ref().map(|r| r.hit_ratio),
                    top10_residency: rep.as_ref().and_then(|r| r.top10_residency),
                    accesses_per_s: rep.as_ref().map(|r| r.accesses_per_s),
                    model_latency_ns: rep.as_ref().map(|r| r.model_latency_ns),
                    file_fast_bytes: p.file_fast,
                    file_lower_bytes: p.file_lower,
                    swap_bytes: swap_bytes(&spec.cgroup),
                    pressure_some_avg10: pressure_some_avg10(&spec.cgroup),
                    promoted_pages: stat.as_ref().map_or(0, |m| m.pgpromote_success()),
                    demoted_kswapd_pages: stat.as_ref().map_or(0, |m| m.pgdemote_kswapd()),
                    demoted_direct_pages: stat
                        .as_ref()
                        .map_or(0, |m| m.pgdemote_direct() + m.pgdemote_proactive()),
                    lower_hint_faults: hints.0,
                    promotion_candidates: hints.1,
                    cpu_s: cgfs
                        .cpu_stat(&spec.cgroup)
                        .ok()
                        .map(|c| c.usage_usec() as f64 / 1e6),
                    cpu_wait_s: cgfs
                        .cpu_pressure(&spec.cgroup)
                        .ok()
                        .map(|p| p.some.total_us as f64 / 1e6),
                };
                match target {
                    Some(tg) if tg > 0 => {
                        if (f as f64 - tg as f64).abs() > 0.05 * tg as f64 {
                            all_within = false;
                        }
                    }
                    _ => all_within = false,
                }
                line += &format!(
                    " | {}: local {:>5.1}% ({:>4.0}/{:>4.0} MiB){} hot-res {} hit {}",
                    spec.name,
                    100.0 * s.local_ratio,
                    mib(f),
                    mib(f + l),
                    target
                        .map(|t| format!(" target {:>4.0}{why}", mib(t)))
                        .unwrap_or_default(),
                    s.hot_residency
                        .map(|v| format!("{v:.2}"))
                        .unwrap_or_else(|| "-".into()),
                    s.hit_ratio
                        .map(|v| format!("{v:.2}"))
                        .unwrap_or_else(|| "-".into()),
                );
                if let Some(f) = json.as_mut() {
                    writeln!(f, "{}", serde_json::to_string(&s)?)?;
                }
                if cli.emit {
                    println!("SAMPLE {}", serde_json::to_string(&s)?);
                }
                samples.push(s);
            }
            if mode.is_tierd() && t >= last_start as f64 {
                // Converged = within ±5% from this sample on: reset on every miss.
                match (all_within, converged_s) {
                    (true, None) => converged_s = Some(t - last_start as f64),
                    (false, _) => converged_s = None,
                    _ => {}
                }
            }
            println!("{line}");
        }
        thread::sleep(Duration::from_millis(200));
    }
    let mut profile = None;
    if mode.is_tierd() {
        let text = http_get(&addr, "/metrics")
            .unwrap_or_else(|e| format!("(cannot read /metrics: {e})\n"));
        profile = cycle_profile(&text).map(|(cycles, phases, cpu_phases)| CycleProfile {
            scenario: sc.name.clone(),
            mode: mode.label().to_string(),
            cycles,
            phases,
            cpu_phases,
        });
        if let (Some(p), true) = (&profile, cli.emit) {
            println!("PROFILE {}", serde_json::to_string(p)?);
        }
        for f in &sc.report_metrics {
            if let Some(why) = unreported(&text, f) {
                eprintln!("tierscen: {}: report_metrics: {f:?}: {why}", sc.name);
            }
        }
        for line in metric_samples(&text, &sc.report_metrics) {
            println!(
                "METRIC {}",
                serde_json::json!({"scenario": sc.name, "mode": mode.label(), "sample": line})
            );
        }
        if cli.metrics {
            println!("--- tierd /metrics at the end of {} ---", sc.name);
            print!("{text}");
        }
    }
    // Events still running (an offline that waits for migration) end
    // before the workloads stop.
    let event_failures = events
        .join()
        .unwrap_or_else(|_| vec!["the event thread panicked".into()]);
    stop(&mut running);
    if let Some(mut t) = tierd {
        unsafe {
            libc::kill(t.id() as i32, libc::SIGTERM);
        }
        let st = t.wait()?;
        println!(
            "tierd sent {} sd_notify WATCHDOG=1 pings in {:.0} s and exited with {st}",
            watchdog_pings.lock().unwrap(),
            start.elapsed().as_secs_f64()
        );
        rmcgroup(TIERD_CGROUP);
        if !st.success() {
            bail!("tierd exited with {st}; see /tmp/tierd-{}.log", sc.name);
        }
    }
    for c in &sc.containers {
        rmcgroup(&c.cgroup);
    }
    Ok(ModeResult {
        mode,
        samples,
        host,
        converged_s,
        profile,
        event_failures,
    })
}

/// Every mode of the command line in turn; a mode without samples fails.
fn run_modes(
    sc: &Scenario,
    duration_s: u64,
    cli: &Cli,
    json: &mut Option<fs::File>,
    clock: &hotness::probe::HintFaultProbe,
) -> Result<Vec<ModeResult>> {
    let mut results = Vec::new();
    for &mode in &cli.modes {
        let r = run_mode(sc, mode, duration_s, cli, json, clock)?;
        if r.samples.is_empty() {
            bail!("{} / {:?}: no samples recorded", sc.name, mode);
        }
        results.push(r);
    }
    Ok(results)
}

/// Runs a mode's events in order on a thread of their own, so that
/// sampling goes on while one runs (offlining memory waits for its pages
/// to migrate): each starts at `start + at_s`, or when the one before it
/// ended if that is later. Returns what failed, labelled with `label`.
fn spawn_events(
    events: &[EventSpec],
    start: Instant,
    label: String,
) -> thread::JoinHandle<Vec<String>> {
    let mut events = events.to_vec();
    events.sort_by_key(|e| e.at_s);
    thread::spawn(move || {
        let mut failed = Vec::new();
        for e in &events {
            let at = Duration::from_secs(e.at_s);
            if let Some(wait) = at.checked_sub(start.elapsed()) {
                thread::sleep(wait);
            }
            let t = start.elapsed().as_secs_f64();
            if let Err(err) = run_event(e, t) {
                println!("EVENT_FAILED t={t:.0}s {}: {err:#}", e.run);
                failed.push(format!("{label} at {t:.0} s: {err:#}"));
            }
        }
        failed
    })
}

/// Runs one scenario event (`sh -c`), printing its output as `EVENT` lines.
fn run_event(e: &EventSpec, t: f64) -> Result<()> {
    println!("EVENT t={t:.0}s: {}", e.run);
    let out = Command::new("sh")
        .args(["-c", &e.run])
        .output()
        .context("run sh")?;
    for l in String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
    {
        println!("EVENT | {l}");
    }
    if !out.status.success() {
        bail!("exited with {}", out.status);
    }
    Ok(())
}

/// The sample lines of `/metrics` text whose metric family is one of
/// `families` (name up to `{` or the space).
fn metric_samples<'a>(metrics: &'a str, families: &[String]) -> Vec<&'a str> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            let name = l.split(['{', ' ']).next().unwrap_or("");
            families.iter().any(|f| f == name)
        })
        .collect()
}

/// Why `report_metrics` entry `family` can print nothing from `metrics`
/// (tierd's /metrics text), if it is a mistake in the scenario rather than
/// a family with no series yet: a counter's samples are named with
/// `_total`, which its `# TYPE` line lacks.
fn unreported(metrics: &str, family: &str) -> Option<String> {
    let typed = |name: &str| {
        metrics.lines().find_map(|l| {
            l.strip_prefix("# TYPE ")?
                .strip_prefix(name)?
                .strip_prefix(' ')
        })
    };
    match typed(family) {
        Some("counter") => Some(format!("a counter: its samples are {family}_total")),
        Some(_) => None,
        None if family.strip_suffix("_total").and_then(typed) == Some("counter") => None,
        None => Some("tierd's /metrics has no such family".to_owned()),
    }
}

/// Loads the scenario's kernel modules not yet loaded (busybox `insmod`
/// resolves no dependencies: they are listed in load order), then runs its
/// setup commands.
fn prepare(sc: &Scenario) -> Result<()> {
    let release = kernel_release()?;
    for m in &sc.modules {
        if Path::new("/sys/module").join(m.replace('-', "_")).exists() {
            continue;
        }
        let ko = format!("/lib/modules/{release}/{m}.ko");
        let st = Command::new("insmod")
            .arg(&ko)
            .status()
            .with_context(|| format!("insmod {ko}"))?;
        if !st.success() {
            bail!("insmod {ko} exited with {st}: the scenario needs kernel module {m} (cargo xtask bench places the scenario's `modules` in the guest)");
        }
    }
    for cmd in &sc.setup {
        println!("SETUP {cmd}");
        let st = Command::new("sh")
            .args(["-c", cmd])
            .status()
            .with_context(|| format!("setup: sh -c {cmd:?}"))?;
        if !st.success() {
            bail!("{}: setup command {cmd:?} exited with {st}", sc.name);
        }
    }
    Ok(())
}

/// The running kernel's release (`uname -r`).
fn kernel_release() -> Result<String> {
    Ok(fs::read_to_string("/proc/sys/kernel/osrelease")
        .context("/proc/sys/kernel/osrelease")?
        .trim()
        .to_owned())
}

fn summarize(sc: &Scenario, results: &[ModeResult]) {
    println!("=== {}: {} ===", sc.name, sc.description);
    println!(
        "{:<8} {:<10} {:>6} {:>9} {:>10} {:>9} {:>8} {:>8}",
        "mode", "container", "t (s)", "local %", "fast MiB", "target", "hot-res", "hit"
    );
    for r in results {
        for &cp in &sc.checkpoints_s {
            for c in &sc.containers {
                // The sample nearest to the checkpoint.
                let best = r
                    .samples
                    .iter()
                    .filter(|s| s.container == c.name)
                    .min_by(|a, b| {
                        (a.t_s - cp as f64)
                            .abs()
                            .total_cmp(&(b.t_s - cp as f64).abs())
                    });
                if let Some(s) = best {
                    println!(
                        "{:<8} {:<10} {:>6.0} {:>8.1}% {:>10.0} {:>9} {:>8} {:>8}",
                        r.mode.label(),
                        c.name,
                        s.t_s,
                        100.0 * s.local_ratio,
                        mib(s.fast_bytes),
                        s.target_bytes
                            .map(|t| format!("{:.0}", mib(t)))
                            .unwrap_or_else(|| "-".into()),
                        s.hot_residency
                            .map(|v| format!("{v:.3}"))
                            .unwrap_or_else(|| "-".into()),
                        s.hit_ratio
                            .map(|v| format!("{v:.3}"))
                            .unwrap_or_else(|| "-".into()),
                    );
                }
            }
        }
        for c in &sc.containers {
            let Some(low) = c.local_low_mib else { continue };
            // Trapezoid-free: each sample stands for the interval up to the next.
            let pts: Vec<&Sample> = r.samples.iter().filter(|s| s.container == c.name).collect();
            // From the first sample at which the container had grown to its
            // guarantee (held to its largest usage if it never does): the
            // allocation ramp is not a violation.
            let usage = |s: &Sample| mib(s.fast_bytes + s.lower_bytes);
            let low = (low as f64).min(pts.iter().map(|s| usage(s)).fold(0.0, f64::max));
            let start = pts
                .iter()
                .position(|s| usage(s) >= low)
                .unwrap_or(pts.len());
            let mut below = 0.0;
            let mut worst = 0.0f64;
            for w in pts[start..].windows(2) {
                let gap = (low - mib(w[0].fast_bytes)).max(0.0);
                below += gap * (w[1].t_s - w[0].t_s);
                worst = worst.max(gap);
            }
            println!(
                "{:<8} {}: {:.0} MiB x s below its local_low of {:.0} MiB (worst {:.0} MiB below)",
                r.mode.label(),
                c.name,
                below,
                low,
                worst
            );
        }
        if sc.memory_kinds {
            for c in &sc.containers {
                let mine: Vec<&Sample> =
                    r.samples.iter().filter(|s| s.container == c.name).collect();
                let Some(s) = mine.last() else { continue };
                let psi = mine
                    .iter()
                    .filter_map(|s| s.pressure_some_avg10)
                    .fold(0.0, f64::max);
                println!(
                    "{:<8} {}: at the end anon {:.0} / {:.0} MiB, file {:.0} / {:.0} MiB (fast / lower), swap {:.0} MiB; memory.pressure some avg10 max {psi:.2}%",
                    r.mode.label(),
                    c.name,
                    mib(s.fast_bytes - s.file_fast_bytes),
                    mib(s.lower_bytes - s.file_lower_bytes),
                    mib(s.file_fast_bytes),
                    mib(s.file_lower_bytes),
                    mib(s.swap_bytes),
                );
            }
        }
        for c in &sc.containers {
            let reached = r
                .samples
                .iter()
                .find(|s| s.container == c.name && s.hot_residency.is_some_and(|h| h >= 0.95));
            match reached {
                Some(s) => println!(
                    "{:<8} {}: hot set >= 95% on the fast tier {:.0} s after its start",
                    r.mode.label(),
                    c.name,
                    s.t_s - c.start_s as f64
                ),
                None => println!(
                    "{:<8} {}: hot set never reached 95% on the fast tier",
                    r.mode.label(),
                    c.name
                ),
            }
        }
        // Host-wide: DRAM use after the last container started, and
        // migrations over the whole run and over its second half (settled).
        let last_start = sc.containers.iter().map(|c| c.start_s).max().unwrap_or(0) as f64;
        let after: Vec<&HostSample> = r
            .host
            .iter()
            .filter(|h| h.t_s >= last_start + 1.0)
            .collect();
        if !after.is_empty() {
            let used: f64 = after
                .iter()
                .map(|h| h.fast_used_bytes as f64 / h.fast_total_bytes.max(1) as f64)
                .sum::<f64>()
                / after.len() as f64;
            let min_used = after
                .iter()
                .map(|h| h.fast_used_bytes as f64 / h.fast_total_bytes.max(1) as f64)
                .fold(f64::INFINITY, f64::min);
            println!(
                "{:<8} DRAM used after the last start: mean {:.1}%, min {:.1}%",
                r.mode.label(),
                100.0 * used,
                100.0 * min_used
            );
        }
        if let (Some(first), Some(last)) = (r.host.first(), r.host.last()) {
            let mid_t = (first.t_s + last.t_s) / 2.0;
            let mid = r
                .host
                .iter()
                .min_by(|a, b| (a.t_s - mid_t).abs().total_cmp(&(b.t_s - mid_t).abs()))
                .unwrap();
            println!(
                "{:<8} pages migrated/s: {:.0} over the run, {:.0} over its second half (promoted {}, demoted {} pages in all)",
                r.mode.label(),
                migrate_rate(first, last),
                migrate_rate(mid, last),
                last.pgpromote_success.saturating_sub(first.pgpromote_success),
                last.pgdemote.saturating_sub(first.pgdemote)
            );
            // Where the second half's migrations came from, per container,
            // and how many hot lower-tier faults the kernel's promotion
            // rate limit declined (docs/NOTES.md, "Who moves what in a
            // steady state").
            let cand = last
                .pgpromote_candidate
                .saturating_sub(mid.pgpromote_candidate);
            let chosen = last.probe_candidates.saturating_sub(mid.probe_candidates);
            println!(
                "{:<8} second half: {cand} pages passed the kernel's hot-page test, {chosen} faults were let through, {} declined by the promotion rate limit",
                r.mode.label(),
                cand.saturating_sub(chosen)
            );
            for c in &sc.containers {
                let of = |t: f64| {
                    r.samples
                        .iter()
                        .filter(|s| s.container == c.name)
                        .min_by(|a, b| (a.t_s - t).abs().total_cmp(&(b.t_s - t).abs()))
                };
                if let (Some(a), Some(b)) = (of(mid.t_s), of(last.t_s)) {
                    println!(
                        "{:<8} {} second half, pages: promoted {}, demoted by kswapd {}, demoted in the reclaimer (tierd, direct) {}; lower-tier hint faults {}, let through {}",
                        r.mode.label(),
                        c.name,
                        b.promoted_pages.saturating_sub(a.promoted_pages),
                        b.demoted_kswapd_pages.saturating_sub(a.demoted_kswapd_pages),
                        b.demoted_direct_pages.saturating_sub(a.demoted_direct_pages),
                        b.lower_hint_faults.saturating_sub(a.lower_hint_faults),
                        b.promotion_candidates.saturating_sub(a.promotion_candidates),
                    );
                }
            }
        }
        if r.mode.is_tierd() {
            if let (Some(first), Some(last)) = (r.host.first(), r.host.last()) {
                let dt = (last.t_s - first.t_s).max(1e-3);
                let max_rss = r.host.iter().map(|h| h.tierd_rss_bytes).max().unwrap_or(0);
                println!(
                    "{:<8} tierd CPU {:.2}% of one core, max RSS {:.1} MiB",
                    r.mode.label(),
                    100.0 * (last.tierd_cpu_s - first.tierd_cpu_s) / dt,
                    mib(max_rss)
                );
            }
            if let Some(p) = &r.profile {
                // "phase ms, …" per cycle.
                let per = |phases: &[(String, f64)]| {
                    let v: Vec<String> = phases
                        .iter()
                        .map(|(n, v)| format!("{n} {:.2}", 1e3 * v / p.cycles as f64))
                        .collect();
                    v.join(", ")
                };
                println!(
                    "{:<8} tierd cycle, ms per cycle over {} cycles: {}",
                    r.mode.label(),
                    p.cycles,
                    per(&p.phases)
                );
                if !p.cpu_phases.is_empty() {
                    println!(
                        "{:<8} tierd cycle, CPU ms per cycle: {}",
                        r.mode.label(),
                        per(&p.cpu_phases)
                    );
                }
            }
            match r.converged_s {
                Some(t) => println!(
                    "tierd: all containers within ±5% of target {t:.0} s after the last start"
                ),
                None => println!(
                    "tierd: containers were not all within ±5% of their targets at the end"
                ),
            }
        }
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let text =
        fs::read_to_string(&cli.scenario).with_context(|| cli.scenario.display().to_string())?;
    let sc: Scenario = toml::from_str(&text)
        .with_context(|| format!("{}: invalid scenario", cli.scenario.display()))?;
    if sc.containers.is_empty() {
        bail!("{}: no [[container]]", cli.scenario.display());
    }
    let duration_s = cli.duration_s.unwrap_or(sc.duration_s);
    let mut json = match &cli.json {
        Some(p) => Some(fs::File::create(p).with_context(|| p.display().to_string())?),
        None => None,
    };
    prepare(&sc)?;
    pin_harness_code();
    let clock = promotion_clock()?;
    let results = run_modes(&sc, duration_s, &cli, &mut json, &clock);
    for cmd in &sc.teardown {
        println!("TEARDOWN {cmd}");
        match Command::new("sh").args(["-c", cmd]).status() {
            Ok(st) if st.success() => {}
            r => println!("tierscen: teardown command {cmd:?}: {r:?}"),
        }
    }
    let results = results?;
    summarize(&sc, &results);
    let failed: Vec<&String> = results.iter().flat_map(|r| &r.event_failures).collect();
    if !failed.is_empty() {
        bail!("scenario events failed: {failed:?}");
    }
    Ok(())
}

/// Where the CXL bus lists memory devices (`cxl_mem`, Documentation/ABI/
/// testing/sysfs-bus-cxl).
const CXL_DEVICES: &str = "/sys/bus/cxl/devices";
/// Executables the runs start, beside tierscen's own mapped files.
const HARNESS_EXES: [&str; 3] = [
    "/usr/local/bin/tierd",
    "/usr/local/bin/tierload",
    "/bin/busybox",
];

/// Where the guest's shared libraries are (`ldd`'s paths on Debian).
const LIBRARY_DIRS: [&str; 3] = ["/lib", "/lib64", "/usr/lib"];

/// Appends the shared objects (names with `.so`) under `dir` to `out`,
/// recursively but for kernel modules.
fn shared_libraries(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if e.file_name() != "modules" {
                shared_libraries(&p, out);
            }
        } else if p.is_file() && e.file_name().to_string_lossy().contains(".so") {
            out.push(p);
        }
    }
}

/// On a host whose lower tier is a CXL memory device, locks the code of the
/// harness (tierscen, tierd, tierload, busybox and the guest's shared
/// libraries) in memory on the first node with CPUs, moving back there
/// whatever an earlier run in the same boot let reclaim demote (the lock
/// ends with each tierscen process).
///
/// Why: the guest's root file system is tmpfs, so these files' pages are
/// on the LRU like any other and reclaim demotes them under pressure. Under
/// software emulation an instruction fetched from the device runs 100×
/// slower: after a kernel-tiering run had demoted tierd's executable, its
/// next start spent minutes in the eBPF probe load. Mlocked pages are
/// unevictable, so demotion skips them; kernel tiering and tierd then run
/// the same code from the same place. The move back matters from the second
/// scenario of a boot on: in the first full CXL demo, every Zipf tenant
/// started after the first run took 73–92 s instead of 3 s to set up.
/// Not done on HMAT hosts (the lower
/// node is plain RAM there, so nothing changes with placement and the
/// demo's figures stay comparable across commits).
fn pin_harness_code() {
    let has_memdev = fs::read_dir(CXL_DEVICES).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("mem"))
    });
    if !has_memdev {
        return;
    }
    // tierscen's own pages too, as they are faulted: its samples query every
    // tenant page each interval, and a buffer demoted to the device would
    // slow the sampling of whichever mode ran second.
    // SAFETY: mlockall takes no pointers.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) } != 0 {
        println!("tierscen: mlockall: {}", std::io::Error::last_os_error());
    }
    let mut files: Vec<PathBuf> = HARNESS_EXES.iter().map(PathBuf::from).collect();
    // This process's own executable and libraries.
    if let Ok(maps) = fs::read_to_string("/proc/self/maps") {
        files.extend(
            maps.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .filter(|p| p.starts_with('/'))
                .map(PathBuf::from),
        );
    }
    // Every shared library in the guest: the initramfs holds only those the
    // harness links, and tierload and tierd link libm, which tierscen does
    // not map (a Zipf tenant's setup, 10^5 `pow` calls, ran 30× slower
    // with libm demoted to the device).
    for dir in LIBRARY_DIRS {
        shared_libraries(Path::new(dir), &mut files);
    }
    let mut seen = std::collections::HashSet::new();
    files.retain(|f| seen.insert(fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    let node = fs::read_to_string("/sys/devices/system/node/has_cpu")
        .ok()
        .and_then(|s| tierload::parse_node_list(&s).ok())
        .and_then(|n| n.first().copied())
        .unwrap_or(0);
    let (mut pinned, mut moved) = (0u64, 0u64);
    for f in &files {
        match pin_file(f, node) {
            Ok((bytes, back)) => {
                pinned += bytes;
                moved += back;
            }
            Err(e) => println!("tierscen: not pinned: {}: {e:#}", f.display()),
        }
    }
    println!(
        "tierscen: CXL memory device present: {:.1} MiB of harness code locked in memory on node {node} \
         ({} files; {:.1} MiB moved back there)",
        mib(pinned),
        files.len(),
        mib(moved)
    );
}

/// Maps `path` shared read-only, mlocks the mapping for the rest of this
/// process's life (the mapping is never unmapped) and moves its pages to
/// `node`. Returns its length and the bytes that were elsewhere (base pages
/// `move_pages(2)` moved).
fn pin_file(path: &Path, node: i32) -> Result<(u64, u64)> {
    let file = fs::File::open(path).with_context(|| path.display().to_string())?;
    let len = file.metadata()?.len() as usize;
    if len == 0 {
        return Ok((0, 0));
    }
    use std::os::fd::AsRawFd;
    // SAFETY: a new read-only shared mapping of a file we opened; nothing
    // reads through it, it only holds the pages.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error()).context("mmap");
    }
    // SAFETY: the range is the mapping just created.
    if unsafe { libc::mlock(addr, len) } != 0 {
        return Err(std::io::Error::last_os_error()).context("mlock");
    }
    let moved = move_to_node(addr as usize, len, node).context("move_pages")?;
    Ok((len as u64, moved))
}

/// Moves the base pages of `[addr, addr + len)` in this process to `node`,
/// pages other processes map too (`MPOL_MF_MOVE_ALL`; tierscen runs as
/// root). Returns the bytes that were on another node.
fn move_to_node(addr: usize, len: usize, node: i32) -> std::io::Result<u64> {
    const PAGE: usize = 4096;
    // include/uapi/linux/mempolicy.h (not in the libc crate).
    const MPOL_MF_MOVE_ALL: libc::c_int = 1 << 2;
    // Pages per call, as tierload queries.
    const BATCH: usize = 1024;
    let pages: Vec<usize> = (addr..addr + len).step_by(PAGE).collect();
    let mut moved = 0u64;
    for chunk in pages.chunks(BATCH) {
        let ptrs: Vec<*mut libc::c_void> = chunk.iter().map(|&a| a as *mut libc::c_void).collect();
        let nodes = vec![node; chunk.len()];
        let mut before = vec![0i32; chunk.len()];
        let mut status = vec![0i32; chunk.len()];
        // SAFETY: pointers into this process's own mapping; the arrays have
        // `chunk.len()` entries each.
        unsafe {
            tierload::move_pages(&ptrs, None, &mut before, 0)?;
            tierload::move_pages(&ptrs, Some(&nodes), &mut status, MPOL_MF_MOVE_ALL)?;
        }
        moved += before
            .iter()
            .zip(&status)
            .filter(|&(&b, &s)| b >= 0 && b != node && s == node)
            .count() as u64
            * PAGE as u64;
    }
    Ok(moved)
}

/// How long tierscen waits for tierd's READY=1. Its start loads and attaches
/// the eBPF probe, which takes ~4 s in an idle guest and took over 60 s on
/// the CXL device right after a kernel-tiering run.
const READY_TIMEOUT: Duration = Duration::from_secs(240);

/// Nodes whose free memory the diagnostics print.
const MAX_NODES_SHOWN: u32 = 4;

/// `/proc/<pid>/task/*/stack` of a process, one block per thread (empty
/// where the kernel does not expose stacks), where its pages are, each
/// node's free memory, and what else runs.
fn start_diagnostics(pid: u32) -> String {
    let mut out = String::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let p = t.path();
            let comm = fs::read_to_string(p.join("comm")).unwrap_or_default();
            let stack = fs::read_to_string(p.join("stack")).unwrap_or_default();
            out += &format!(
                "[{} {}] {}\n{}",
                t.file_name().to_string_lossy(),
                comm.trim(),
                state_times(&p),
                stack
            );
        }
        // Where its pages are: the sum of numa_maps' `N<node>=<pages>`.
        let nm = fs::read_to_string(format!("/proc/{pid}/numa_maps")).unwrap_or_default();
        let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
        for w in nm.split_whitespace() {
            if let Some((n, pages)) = w.strip_prefix('N').and_then(|r| r.split_once('=')) {
                *per_node.entry(format!("node{n}")).or_default() +=
                    pages.parse::<u64>().unwrap_or(0);
            }
        }
        out += &format!("its pages per node (numa_maps): {per_node:?}\n");
    }
    for n in 0..MAX_NODES_SHOWN {
        let p = format!("/sys/devices/system/node/node{n}/meminfo");
        if let Ok(m) = fs::read_to_string(&p) {
            if let Some(l) = m.lines().find(|l| l.contains("MemFree")) {
                out += &format!("{}\n", l.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    // And what else runs or waits uninterruptibly in the guest.
    out += &format!(
        "loadavg {}",
        fs::read_to_string("/proc/loadavg").unwrap_or_default()
    );
    if let Ok(procs) = fs::read_dir("/proc") {
        for p in procs.flatten().map(|e| e.path()) {
            let st = state_times(&p);
            if st.starts_with('R') || st.starts_with('D') {
                let comm = fs::read_to_string(p.join("comm")).unwrap_or_default();
                out += &format!("  {} {} {st}\n", p.display(), comm.trim());
            }
        }
    }
    out
}

/// `<state> utime=<ticks> stime=<ticks>` from a `/proc/<pid>` (or task)
/// directory's `stat`; empty when unreadable.
fn state_times(dir: &Path) -> String {
    let stat = fs::read_to_string(dir.join("stat")).unwrap_or_default();
    // Fields after the parenthesised comm: state is the 1st, utime the 12th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    match (f.first(), f.get(11), f.get(12)) {
        (Some(s), Some(u), Some(k)) => format!("{s} utime={u} stime={k}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    /// /proc/interrupts of a 2-CPU x86 host (this repository's build machine): rows
    /// summed over CPUs, the description text left out, a missing row 0.
    #[test]
    fn interrupt_rows_sum_over_cpus() {
        let text = include_str!("../../tests/fixtures/proc-interrupts");
        assert_eq!(super::interrupts_total(text, "TLB"), 379863 + 362189);
        assert_eq!(super::interrupts_total(text, "CAL"), 50456061 + 49160924);
        assert_eq!(super::interrupts_total(text, "LOC"), 13414476 + 13460597);
        assert_eq!(super::interrupts_total(text, "XYZ"), 0);
    }

    use super::{cycle_profile, metric_samples, unreported, Mode, Scenario, TieringThreads};

    /// A /proc/PID/stat line with `comm`, utime/stime ticks and a start time.
    fn stat(pid: u32, comm: &str, utime: u64, stime: u64, start: u64) -> String {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
        // majflt cmajflt utime stime cutime cstime prio nice threads
        // itrealvalue starttime ...
        format!("{pid} ({comm}) S 2 0 0 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0 {start} 0 0\n")
    }

    #[test]
    fn tiering_cpu_keeps_a_kdamond_that_exited_and_tells_reused_pids_apart() {
        let root = std::env::temp_dir().join(format!("tierscen-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let put = |pid: u32, comm: &str, u: u64, s: u64, start: u64| {
            let d = root.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(d.join("stat"), stat(pid, comm, u, s, start)).unwrap();
        };
        let tick = super::clock_ticks();
        put(30, "kswapd0", 0, 100, 5);
        put(31, "kdamond.0", 20, 80, 900);
        put(40, "tierload", 500, 500, 950);
        // DAMON_STAT's kdamond (pid 55) is kept apart from the others.
        put(55, "kdamond.0", 0, 40, 3);
        let stat = Some(55);
        let close = |a: f64, ticks: f64| (a - ticks / tick).abs() < 1e-9;
        let mut t = TieringThreads::default();
        let first = t.sample(&root, stat);
        assert!(close(first.tiering, 200.0), "{first:?}");
        assert!(close(first.kdamonds, 100.0), "{first:?}");
        assert!(close(first.damon_stat, 40.0), "{first:?}");
        // The kdamond ran on, then exited: its CPU stays counted.
        put(31, "kdamond.0", 20, 180, 900);
        t.sample(&root, stat);
        std::fs::remove_dir_all(root.join("31")).unwrap();
        put(30, "kswapd0", 0, 150, 5);
        let after = t.sample(&root, stat);
        assert!(close(after.tiering, 350.0), "{after:?}");
        assert!(close(after.kdamonds, 200.0), "{after:?}");
        // A new kdamond under the same pid is another thread.
        put(31, "kdamond.0", 0, 10, 2000);
        let reused = t.sample(&root, stat);
        assert!(close(reused.tiering, 360.0), "{reused:?}");
        assert!(close(reused.kdamonds, 210.0), "{reused:?}");
        // DAMON_STAT restarted: its new kdamond is DAMON_STAT's too, and
        // the old one's CPU stays counted.
        std::fs::remove_dir_all(root.join("55")).unwrap();
        put(56, "kdamond.0", 0, 30, 2100);
        let restarted = t.sample(&root, Some(56));
        assert!(close(restarted.damon_stat, 70.0), "{restarted:?}");
        assert!(close(restarted.tiering, 360.0), "{restarted:?}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_report_metric_that_cannot_print_is_named() {
        let text = "# HELP tierd_x_bytes Bytes\n\
                    # TYPE tierd_x_bytes counter\n\
                    # HELP tierd_g Gauge\n\
                    # TYPE tierd_g gauge\n";
        assert!(unreported(text, "tierd_x_bytes")
            .unwrap()
            .contains("tierd_x_bytes_total"));
        assert_eq!(
            unreported(text, "tierd_x_bytes_total"),
            None,
            "no series yet"
        );
        assert_eq!(unreported(text, "tierd_g"), None);
        assert!(unreported(text, "tierd_y").is_some());
        assert!(unreported(text, "tierd_g_total").is_some());
    }

    #[test]
    fn metric_samples_pick_whole_families() {
        let text = "# HELP tierd_topology_changes_total Changes\n\
                    tierd_topology_changes_total 6\n\
                    tierd_topology_changes_total_extra 1\n\
                    tierd_node_capacity_bytes{node=\"1\"} 0\n\
                    tierd_nodes 2\n";
        let fams = [
            "tierd_topology_changes_total".into(),
            "tierd_node_capacity_bytes".into(),
        ];
        assert_eq!(
            metric_samples(text, &fams),
            [
                "tierd_topology_changes_total 6",
                "tierd_node_capacity_bytes{node=\"1\"} 0"
            ]
        );
    }

    /// A tierd-* mode changes only its keys of the scenario's config.
    #[test]
    fn each_tierd_mode_sets_only_its_keys() {
        let text = "[daemon]\ninterval = \"1s\"\n[limits]\nband = \"5%\"\n";
        let v: toml::Table = toml::from_str(&Mode::TierdTrade.tierd_config(text).unwrap()).unwrap();
        assert_eq!(v["limits"]["band_trade"].as_bool(), Some(true));
        assert_eq!(v["limits"]["band"].as_str(), Some("5%"));
        assert_eq!(v["daemon"]["interval"].as_str(), Some("1s"));
        assert_eq!(Mode::Tierd.tierd_config(text).unwrap(), text);
        let v: toml::Table =
            toml::from_str(&Mode::TierdNoSwap.tierd_config(text).unwrap()).unwrap();
        assert_eq!(v["limits"]["hot_swap"].as_bool(), Some(false));
        assert_eq!(v["hotness"]["hot_latency"].as_str(), Some("0"));
        assert_eq!(v["limits"]["band"].as_str(), Some("5%"));
        // The steady-state gate's two other settings: open, and limited.
        let v: toml::Table = toml::from_str(&Mode::TierdOpen.tierd_config(text).unwrap()).unwrap();
        assert_eq!(v["limits"]["steady_promote_rate"].as_str(), Some("0"));
        assert!(v["limits"].get("steady_hot_below").is_none());
        let v: toml::Table =
            toml::from_str(&Mode::TierdLimited.tierd_config(text).unwrap()).unwrap();
        assert_eq!(v["limits"]["steady_hot_below"].as_str(), Some("0"));
        assert!(v["limits"].get("steady_promote_rate").is_none());
        assert_eq!(v["daemon"]["interval"].as_str(), Some("1s"));
    }

    /// Every scenario file of the repository is one tierscen accepts (its
    /// keys are checked: `deny_unknown_fields`).
    #[test]
    fn every_shipped_scenario_parses() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let mut n = 0;
        for e in std::fs::read_dir(&dir)
            .unwrap()
            .chain(std::fs::read_dir(dir.join("cxl")).unwrap())
        {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let mut v: toml::Table = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            // Keys of `cargo xtask bench`, removed before the guest sees the file.
            v.remove("sweep");
            v.remove("modes");
            let sc: Scenario = v
                .try_into()
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!sc.containers.is_empty(), "{}", p.display());
            n += 1;
        }
        assert!(n >= 18, "{n} scenario files in {}", dir.display());
    }

    #[test]
    fn cycle_profile_reads_phases_in_cycle_order() {
        let text = "# HELP tierd_cycle_phase_seconds Wall time\n\
                    # TYPE tierd_cycle_phase_seconds counter\n\
                    tierd_cycle_phase_seconds_total{phase=\"solve\"} 0.01\n\
                    tierd_cycle_phase_seconds_total{phase=\"read\"} 0.5\n\
                    tierd_cycle_phase_seconds_total{phase=\"reclaim\"} 0.25\n\
                    tierd_cycle_phase_cpu_seconds_total{phase=\"reclaim\"} 0.2\n\
                    tierd_cycle_phase_cpu_seconds_total{phase=\"read\"} 0.1\n\
                    tierd_loop_duration_seconds_sum 0.8\n\
                    tierd_loop_duration_seconds_count 100\n";
        let (cycles, phases, cpu) = cycle_profile(text).unwrap();
        assert_eq!(cycles, 100);
        let names: Vec<&str> = phases.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["read", "solve", "reclaim"]);
        assert_eq!(phases[0].1, 0.5);
        assert_eq!(
            cpu,
            [("read".to_string(), 0.1), ("reclaim".to_string(), 0.2)]
        );
        assert!(cycle_profile("tierd_loop_duration_seconds_count 0\n").is_none());
        assert!(cycle_profile("tierd_loop_duration_seconds_count 5\n").is_none());
    }
}
