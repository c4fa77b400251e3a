//! One control-loop cycle: sample (cgroupctl + topology) → [`policy::solve`] →
//! actuate (memory.low, memory.reclaim, cpuset.mems) → metrics and status.
//!
//! Everything here is blocking file I/O on cgroupfs and sysfs; the async loop in
//! [`crate::daemon`] runs each cycle on a blocking thread.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cgroupctl::{CgroupFs, Limit, LruGen, NodeSet, ReclaimOutcome};
use hotness::damon::Damon;
use policy::{
    ContainerSnapshot, DemandHolds, Migrations, PlacementState, Plan, PolicyState, PromoteGate,
    Snapshot,
};

mod actuate;
mod assist;
mod cadence;
mod gate;
mod hotplug;
mod moves;
mod offload;
mod publish;
mod recall;
mod revive;
mod sample;
mod unevictable;
mod unmanaged;

use crate::actuators::{
    protection_limit, CpusetMems, Enabled, Knob, Protection, SubtreeCpuset, Writes,
};
use crate::config::{Config, DemotionMechanism, HotnessSource, MoverKind, PromotionMode};
use crate::journal::SharedJournal;
use crate::metrics::{
    gauge_bytes, tier_label, ContainerErrorLabels, ContainerFaultLabels, ContainerLabels,
    ContainerNodeLabels, ContainerReasonLabels, ContainerStateLabels, ContainerTierLabels, Metrics,
    MoveFailureLabels, MoveLabels, NodeLabels, PhaseLabels, PromotionLabels, CYCLE_PHASES,
};
use crate::regulate::{DamosMover, DamosOrder, Direction, Moved, PagesMover, Recent};
use crate::topology::{unreclaimable_nodes, zone_reserve_pages, Topology};
use hotness::hintfaults::{HintFaultSource, HintFaults};
use hotness::monitor::{ContainerReading, HeatMonitor, Member};
use moves::ColdStall;

/// Smallest demotion worth a memory.reclaim write: below this the syscall and
/// the LRU scan cost more than the placement gains.
const MIN_RECLAIM_BYTES: u64 = 1 << 20;

mod pace;
use pace::{Allowance, DemotionPace};

/// memory.stat counters are in pages of this size (PAGE_SIZE on x86-64).
const PAGE_BYTES: u64 = 4096;

/// A point in a cycle, for its per-phase profile: the wall clock and the
/// CPU time (user + system) of the thread running the cycle. A cycle is
/// synchronous on one blocking thread ([`crate::daemon`]), and the kernel
/// work its writes start (memory.reclaim, an lru_gen aging, move_pages)
/// runs in that thread, so the CPU part is tierd's CPU per phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PhaseClock {
    wall: Instant,
    cpu: Duration,
}

impl PhaseClock {
    fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write; CLOCK_THREAD_CPUTIME_ID
        // exists on every Linux, and a failure reads as no CPU (0) rather
        // than a wrong phase.
        let cpu = match unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } {
            0 => Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32),
            _ => Duration::ZERO,
        };
        Self {
            wall: Instant::now(),
            cpu,
        }
    }

    /// (wall, CPU) time from `self` to `later`, the CPU capped at the wall
    /// time: one thread cannot run longer than the time that passed, but
    /// the guest's scheduler clock (thread CPU time) and its monotonic clock
    /// drift apart under emulation, by up to 20 ms a phase in a test run.
    fn until(&self, later: &PhaseClock) -> (Duration, Duration) {
        let wall = later.wall - self.wall;
        (wall, later.cpu.saturating_sub(self.cpu).min(wall))
    }
}

/// A managed container found this cycle.
#[derive(Debug, Clone)]
struct Managed {
    path: String,
    id: u64,
    policy_index: usize,
    /// The container's cgroup and its descendants (their processes are the
    /// container's).
    members: Vec<String>,
    /// cgroup ids (inodes) of `members`, in the same order.
    member_ids: Vec<u64>,
}

/// Kernel tiering counters of one memcg, for deltas (keyed by cgroup id).
#[derive(Debug, Clone, Copy, Default)]
struct MemcgCounters {
    demote_kswapd: u64,
    demote_direct: u64,
    demote_proactive: u64,
    demote_khugepaged: u64,
    promote_success: u64,
    numa_hint_faults: u64,
}

pub use crate::status::{ContainerStatus, Status};

/// Test-only fault point: with this set to N in tierd's environment, cycle
/// N panics after its writes, so the VM tests can show that a panic
/// restores the host (the drop guards). Never set in production.
pub const PANIC_AT_CYCLE_ENV: &str = "TIERD_TEST_PANIC_AT_CYCLE";

/// Test-only fault point: with this set to N, tierd's first N DAMON sysfs
/// write attempts fail with EBUSY ([`hotness::damon::inject_busy`]). Never
/// set in production.
pub const DAMON_EBUSY_ENV: &str = "TIERD_TEST_DAMON_EBUSY";

/// The control loop's state between cycles.
pub struct Controller {
    cfg: Config,
    cg: CgroupFs,
    topo: Topology,
    observe_only: bool,
    /// Set by [`Controller::restore`]: `Drop` restores only if it is unset.
    restored: bool,
    /// Test-only fault point ([`PANIC_AT_CYCLE_ENV`]).
    panic_at_cycle: Option<u64>,
    policy_state: PolicyState,
    last_cycle: Option<Instant>,
    counters: HashMap<u64, MemcgCounters>,
    /// memory.low and memory.min written, by (knob, cgroup path).
    /// memory.low / memory.min written, with their originals.
    protection: Writes<Protection>,
    /// cpuset.mems written for opt_out, with their originals.
    pinning: Writes<CpusetMems>,
    /// The cpuset controller enabled in opt_out containers' parents.
    subtree: Writes<SubtreeCpuset>,
    metrics: Arc<Metrics>,
    status: Arc<Mutex<Status>>,
    cycles: u64,
    /// Intervals that ran only the quiet check (`cadence.rs`).
    quiet_checks: u64,
    hot: Hotness,
    /// tierd's own moves since the previous snapshot (for thrash detection).
    own_moved: HashMap<u64, Migrations>,
    /// tierd's own moves since start, per container, for /status.
    moved_total: HashMap<u64, BTreeMap<String, u64>>,
    /// Per-container hint faults (eBPF probe or memory.stat).
    faults: HintFaults,
    /// memory.stat `numa_hint_faults` delta per container this cycle (none
    /// the first cycle a container is seen).
    stat_hint_faults: HashMap<u64, u64>,
    /// Every cgroup id seen by this cycle's discovery.
    alive_ids: HashSet<u64>,
    /// The cgroup directories where a new cgroup may be an arrival, as of
    /// the last discovery ([`Self::arrival_dirs`]).
    arrival_dirs: Vec<PathBuf>,
    /// Held hot-set demand per container (`policy::DemandHolds`).
    demand_hold: DemandHolds,
    /// MGLRU's eviction command, when demotion goes through it.
    lru_gen: Option<LruGen>,
    /// `vm.swappiness`, passed to the eviction command.
    swappiness: u32,
    /// How fast demotion has gone on this host (`pace.rs`).
    demotion_pace: DemotionPace,
    /// Fast nodes the kernel had stopped reclaiming at the last cycle
    /// (`revive.rs`).
    unreclaimable: BTreeSet<u32>,
    /// The last cycle's managed containers, best first for a revival write
    /// at exit (`revive.rs`).
    revive_with: Vec<String>,
    /// Spacing of full cycles in a quiet steady state (`cadence.rs`).
    cadence: cadence::Cadence,
    /// Pages the kernel promoted, per container (`recall.rs`).
    known_hot: recall::KnownHot,
    /// Bytes each container's hot swap evicted this cycle: the room its
    /// promotion half (recall) fills (`ContainerPlan::swap_bytes`).
    swap_room: HashMap<u64, u64>,
    /// Bytes each container's swap found idle (every page that passed its
    /// idle test, taken or not) in the last cycle it swapped, for the next
    /// snapshot (`ContainerSnapshot::swap_idle_bytes`; taken as it is read).
    swap_idle: HashMap<u64, u64>,
    /// Over-target containers whose demotion reclaim does not take
    /// (`unevictable.rs`).
    unevictable: unevictable::Unevictable,
    /// The kernel's promotion rate limit in a steady state (`gate.rs`).
    gate: gate::PromotionGate,
    /// Containers under promotion assist at the last solve (`assist.rs`):
    /// the ones DAMON watches when `hotness.assisted_only`.
    assisted: HashSet<u64>,
    /// Containers whose fast-tier bytes lack their `local_low` guarantee
    /// (`ContainerPlan::guarantee_promote_bytes`): tierd promotes the lack
    /// through DAMON's regions, so DAMON watches them as well when
    /// `hotness.assisted_only`.
    owed: HashSet<u64>,
    /// Assisted containers at their target trading pages within their
    /// share (`ContainerPlan::swap_bytes`), for the log.
    swapping: HashSet<u64>,
    /// The last plan's `hot_swap_open`: while the window is closed the
    /// known-hot pages below are not counted (a walk per container).
    hot_swap_open: bool,
    /// CXL regions behind the nodes, read at start and on a topology
    /// change (`hotplug.rs`).
    cxl: Vec<numa::cxl::CxlRegion>,
    /// The kernel refused `memory.reclaim`'s `swappiness=` (EINVAL):
    /// `file_first` falls back to LRU order (logged once).
    file_first_unsupported: bool,
    /// `memory.pressure` some avg10 of each offloading container at its
    /// last offload step (`offload.rs`), for the metrics and /status.
    offload_pressure: HashMap<u64, f64>,
    /// The demotion of unmanaged memory (`unmanaged.rs`).
    unmanaged: policy::unmanaged::UnmanagedState,
    /// tierd's own cgroup (from /proc/self/cgroup, relative to the cgroup2
    /// root without a leading `/`), never demoted as unmanaged memory.
    own_cgroup: Option<String>,
}

/// DAMON monitoring and the movers, when enabled and available.
#[derive(Default)]
struct Hotness {
    damon: Option<Damon>,
    monitor: Option<HeatMonitor>,
    pages: Option<PagesMover>,
    damos: Option<DamosMover>,
    /// Since when each container's cold-first demotion (either mover) has
    /// had its try and moved (next to) nothing.
    cold_stalled: ColdStall,
    /// Why heat is unknown (logged once), or None when DAMON runs.
    off_reason: Option<String>,
    /// Cycle at which to try claiming DAMON again after a failure.
    retry_cycle: u64,
    readings: HashMap<u64, ContainerReading>,
}

/// Reads the kernel's own free-memory reserve of the fast tier (zone
/// `high`/`promo` watermarks, `/proc/zoneinfo`) into `cfg`, which
/// `headroom = "auto"` follows, and logs the headroom in use. Warns when a
/// headroom written in bytes is below the reserve: tierd would then fill
/// DRAM past the point where kswapd starts demoting in LRU order, and the
/// targets could not hold. The reserve is also why a hot set larger than
/// DRAM cannot have more than DRAM − reserve − other use on it.
fn apply_fast_reserve(cfg: &mut Config, topo: &Topology) {
    let path = cfg.daemon.procfs_root.join("zoneinfo");
    let reserve = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| zone_reserve_pages(&path, &t).map_err(|e| e.to_string()));
    match reserve {
        Ok(pages) => {
            let fast = topo.fast_nodes();
            let bytes: u64 = pages
                .iter()
                .filter(|(n, _)| fast.contains(n))
                .map(|(_, p)| p * crate::mover::base_page_size())
                .sum();
            cfg.set_fast_reserve(bytes);
            let headroom = cfg.headroom_bytes();
            if cfg.daemon.headroom == crate::config::Headroom::Auto {
                tracing::info!(
                    headroom_bytes = headroom,
                    kernel_reserve_bytes = bytes,
                    "fast-tier headroom (daemon.headroom = \"auto\"): the larger of 64 MiB and \
                     the kernel's free-memory reserve of the fast tier ({}: zone high/promo \
                     watermarks)",
                    path.display()
                );
            } else if headroom < bytes {
                tracing::warn!(
                    headroom_bytes = headroom,
                    kernel_reserve_bytes = bytes,
                    "daemon.headroom is below the kernel's free-memory reserve of the fast tier \
                     ({}: zone high/promo watermarks): kswapd will demote in LRU order before \
                     the targets are reached; raise daemon.headroom to at least the reserve, \
                     or set it to \"auto\"",
                    path.display()
                );
            } else {
                tracing::info!(
                    headroom_bytes = headroom,
                    kernel_reserve_bytes = bytes,
                    "fast-tier headroom covers the kernel's free-memory reserve"
                );
            }
        }
        Err(e) => tracing::warn!(
            error = %e,
            headroom_bytes = cfg.headroom_bytes(),
            "kernel free-memory reserve of the fast tier unknown; headroom as configured"
        ),
    }
}

/// Resolves `daemon.demotion`: the lru_gen file for `auto` (when usable)
/// and `lru_gen`, `None` for `memory_reclaim`. One log line says which and
/// why. Errors only for `lru_gen` on a kernel without it, naming the key.
fn demotion_mechanism(cfg: &Config) -> Result<Option<LruGen>> {
    let d = &cfg.daemon;
    if d.demotion == DemotionMechanism::MemoryReclaim {
        tracing::info!("demotion through memory.reclaim (daemon.demotion = \"memory_reclaim\")");
        return Ok(None);
    }
    match LruGen::open(&d.debugfs_root, &d.sysfs_root) {
        Ok(g) => {
            tracing::info!(file = %g.path().display(),
                "demotion through the multi-gen LRU's eviction command: per node, oldest generation first, the bytes asked");
            Ok(Some(g))
        }
        Err(e) if d.demotion == DemotionMechanism::Auto => {
            tracing::info!(reason = %e, "demotion through memory.reclaim: the multi-gen LRU's eviction command is not usable");
            Ok(None)
        }
        Err(e) => Err(anyhow::anyhow!(
            "{e} (key daemon.demotion = \"lru_gen\" in {}; set it to \"auto\" to fall back to memory.reclaim)",
            cfg.source.display()
        )),
    }
}

/// Cycles between attempts to claim DAMON after it was unavailable (busy
/// with someone else's kdamonds): about a minute at the default interval.
pub const DAMON_RETRY_CYCLES: u64 = 30;

fn state_name(s: PlacementState) -> &'static str {
    match s {
        PlacementState::Pinned => "pinned",
        PlacementState::OverTarget => "over_target",
        PlacementState::UnderTarget => "under_target",
        PlacementState::AtTarget => "at_target",
    }
}

/// `a/b/c` → [`a`, `a/b`]: the cgroups between the root and `path`.
fn ancestors(path: &str) -> Vec<String> {
    let parts: Vec<&str> = path.split('/').collect();
    (1..parts.len()).map(|i| parts[..i].join("/")).collect()
}

impl Controller {
    /// Discovers the topology and prepares the loop. Errors if sysfs cannot be
    /// read at all; a host with a single tier gives an observe-only controller
    /// (one log line says so).
    ///
    /// Errors also when `daemon.cgroup_root` is not a writable cgroup v2
    /// hierarchy with the memory controller ([`CgroupFs::check_v2_memory`]):
    /// checked first, so nothing has been changed.
    pub fn new(mut cfg: Config, metrics: Arc<Metrics>, status: Arc<Mutex<Status>>) -> Result<Self> {
        let cg = CgroupFs::new(&cfg.daemon.cgroup_root);
        cg.check_v2_memory().with_context(|| {
            format!(
                "tierd cannot manage memory here (key daemon.cgroup_root in {})",
                cfg.source.display()
            )
        })?;
        let topo = Topology::discover(&cfg.daemon.sysfs_root).with_context(|| {
            format!(
                "cannot read the NUMA topology under {}",
                cfg.daemon.sysfs_root.display()
            )
        })?;
        let observe_only = !topo.is_tiered() || cfg.policies.is_empty();
        if !topo.is_tiered() {
            tracing::warn!(
                nodes = topo.nodes.len(),
                "this host has no lower memory tier (one tier in /sys/devices/virtual/memory_tiering): \
                 tierd runs observe-only, exporting per-container usage and changing nothing"
            );
        } else if cfg.policies.is_empty() {
            tracing::warn!(
                "no [[policy]] in {}: tierd runs observe-only, managing no container and \
                 changing no host setting",
                cfg.source.display()
            );
        } else {
            tracing::info!(fast = ?topo.fast_nodes(), lower = ?topo.lower_nodes(),
                fast_capacity_bytes = topo.fast_capacity_bytes(), "memory tiers discovered");
            apply_fast_reserve(&mut cfg, &topo);
        }
        metrics.tiered.set(i64::from(!observe_only));
        let faults = HintFaults::start(
            cfg.hotness.hint_faults,
            cfg.hotness.nodes_shift,
            &cfg.daemon.sysfs_root,
        )
        .map_err(|e| match cfg.hotness.hint_faults {
            HintFaultSource::Ebpf => anyhow::anyhow!(
                "{e} (key hotness.hint_faults = \"ebpf\" in {}; set it to \"auto\" to fall back to memory.stat counters)",
                cfg.source.display()
            ),
            _ => e.into(),
        })?;
        metrics.hint_fault_source(faults.source());
        let lru_gen = if observe_only {
            None
        } else {
            demotion_mechanism(&cfg)?
        };
        let swappiness = fs::read_to_string(cfg.daemon.procfs_root.join("sys/vm/swappiness"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(60);
        let mut c = Controller {
            cfg,
            cg,
            topo,
            observe_only,
            policy_state: PolicyState::default(),
            last_cycle: None,
            counters: HashMap::new(),
            protection: Writes::default(),
            pinning: Writes::default(),
            subtree: Writes::default(),
            metrics,
            status,
            cycles: 0,
            quiet_checks: 0,
            hot: Hotness::default(),
            own_moved: HashMap::new(),
            moved_total: HashMap::new(),
            faults,
            stat_hint_faults: HashMap::new(),
            alive_ids: HashSet::new(),
            arrival_dirs: Vec::new(),
            demand_hold: DemandHolds::default(),
            lru_gen,
            swappiness,
            demotion_pace: DemotionPace::default(),
            unreclaimable: BTreeSet::new(),
            revive_with: Vec::new(),
            cadence: cadence::Cadence::default(),
            known_hot: recall::KnownHot::default(),
            swap_room: HashMap::new(),
            swap_idle: HashMap::new(),
            unevictable: unevictable::Unevictable::default(),
            assisted: HashSet::new(),
            owed: HashSet::new(),
            swapping: HashSet::new(),
            hot_swap_open: true,
            gate: gate::PromotionGate::default(),
            cxl: Vec::new(),
            file_first_unsupported: false,
            offload_pressure: HashMap::new(),
            unmanaged: Default::default(),
            own_cgroup: None,
            restored: false,
            panic_at_cycle: std::env::var(PANIC_AT_CYCLE_ENV)
                .ok()
                .and_then(|v| v.parse().ok()),
        };
        if let Some(n) = std::env::var(DAMON_EBUSY_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
        {
            tracing::warn!("{DAMON_EBUSY_ENV}={n}: the first {n} DAMON writes fail with EBUSY");
            hotness::damon::inject_busy(n);
        }
        c.read_cxl();
        c.setup_hotness();
        c.setup_unmanaged();
        Ok(c)
    }

    /// The cgroup directories, absolute, in which a new cgroup may be an
    /// arrival, as of the last discovery: the unmanaged ones at, above or
    /// below a policy's literal directory ([`Config::match_dirs`]). The
    /// daemon watches them (`crate::arrivals`) and runs
    /// [`Self::on_arrival`] when one gets a child.
    pub fn arrival_dirs(&self) -> &[PathBuf] {
        &self.arrival_dirs
    }

    pub fn observe_only(&self) -> bool {
        self.observe_only
    }

    /// The promotion mode in effect: `daemon.promotion`, except that
    /// `promotion = "tierd"` falls back to the kernel's NUMA-balancing
    /// promotion while DAMON is unavailable (tierd finds the pages to
    /// promote with DAMON; without it nothing would promote at all, e.g. on
    /// Linux 6.17+ with `damon_stat` holding DAMON exclusively). The daemon
    /// sets `kernel.numa_balancing` to match after every cycle.
    pub fn promotion(&self) -> PromotionMode {
        match self.cfg.daemon.promotion {
            PromotionMode::Tierd if self.hot.damon.is_none() && !self.observe_only => {
                PromotionMode::Kernel
            }
            p => p,
        }
    }

    /// Why DAMON is unavailable, when it is.
    pub fn damon_off_reason(&self) -> Option<&str> {
        self.hot.off_reason.as_deref()
    }

    /// Runs one cycle. Per-container failures (vanished cgroups, EBUSY) are
    /// logged and skipped; an error here means the cycle as a whole failed.
    pub fn cycle(&mut self) -> Result<Plan> {
        self.cycle_from(None)
    }

    /// [`Self::cycle`], from the containers a quiet check found changed
    /// (`checked`: its discovery, with the free memory it refreshed), so
    /// that the walk is not done twice in one interval.
    fn cycle_from(&mut self, checked: Option<Vec<Managed>>) -> Result<Plan> {
        let clock = PhaseClock::now();
        let started = clock.wall;
        let elapsed_ms = self
            .last_cycle
            .map(|t| t.elapsed().as_millis() as u64)
            .unwrap_or(0);
        self.last_cycle = Some(started);
        let managed = match checked {
            Some(m) => m,
            None => {
                self.refresh_topology()?;
                self.discover()?
            }
        };
        let fast = self.topo.fast_nodes();
        let mut phase = clock;
        self.lap(&mut phase, "discover");
        self.sample_heat(&managed);
        self.lap(&mut phase, "damon");

        // Every container found, sampled or not: none is unmanaged memory.
        let held: Vec<String> = managed.iter().map(|m| m.path.clone()).collect();
        let mut snaps = Vec::with_capacity(managed.len());
        // lru_gen for the offloaders' warm sets: read once, on first use.
        let mut warm_gens = None;
        let mut per_node: HashMap<u64, BTreeMap<u32, u64>> = HashMap::new();
        let mut kept = Vec::with_capacity(managed.len());
        // The last cycle's swaps, each read once (a vanished container's
        // goes with the rest).
        let mut swap_idle = std::mem::take(&mut self.swap_idle);
        for m in managed {
            let stat = match self.cg.numa_stat(&m.path) {
                Ok(s) => s,
                Err(cgroupctl::Error::Vanished(p)) => {
                    tracing::debug!(path = %p.display(), "cgroup vanished while sampling; skipped");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(container = %m.path, error = %e, "cannot sample memory.numa_stat; skipped this cycle");
                    continue;
                }
            };
            let mut nodes = BTreeMap::new();
            let (mut fast_b, mut slow_b) = (0u64, 0u64);
            for n in stat.nodes() {
                let b = stat.resident_bytes(n);
                nodes.insert(n, b);
                if fast.contains(&n) {
                    fast_b += b;
                } else {
                    slow_b += b;
                }
            }
            per_node.insert(m.id, nodes);
            let (mut migrations, aged_demoted_bytes) = self.update_counters(&m);
            if let Some(own) = self.own_moved.remove(&m.id) {
                migrations.demoted_bytes += own.demoted_bytes;
                migrations.promoted_bytes += own.promoted_bytes;
                migrations.pingpong_bytes += own.pingpong_bytes;
            }
            snaps.push(ContainerSnapshot {
                id: m.id,
                name: m.path.clone(),
                fast_bytes: fast_b,
                slow_bytes: slow_b,
                hot_bytes: self.demand_hold.hold(
                    m.id,
                    self.hot
                        .readings
                        .get(&m.id)
                        .filter(|r| r.regions > 0)
                        .map(|r| r.hot_bytes),
                    elapsed_ms,
                ),
                policy: self.cfg.container_policy(m.policy_index),
                migrations,
                recallable_bytes: self.known_hot.recallable(m.id),
                lower_hot_bytes: self.lower_hot_bytes(m.id),
                // Set below, from this cycle's read of the probe.
                lower_hint_faults: None,
                // A walk of its known pages: only when the plan can use it
                // (the hot swap's promotion half is recall's).
                known_hot_below_bytes: if self.cfg.limits.hot_swap
                    && self.cfg.daemon.recall
                    // Closed: the next arrival opens it a cycle late,
                    // before a newcomer is at its target anyway.
                    && self.hot_swap_open
                {
                    self.known_hot.known_hot_below(m.id)
                } else {
                    0
                },
                swap_idle_bytes: swap_idle.remove(&m.id),
                aged_demoted_bytes,
                warm_bytes: self.warm_bytes(&m, &mut warm_gens),
            });
            kept.push(m);
        }
        let managed = kept;
        self.counters
            .retain(|id, _| managed.iter().any(|m| m.id == *id));
        self.moved_total
            .retain(|id, _| managed.iter().any(|m| m.id == *id));
        self.own_moved
            .retain(|id, _| managed.iter().any(|m| m.id == *id));
        self.demand_hold
            .retain(|id| managed.iter().any(|m| m.id == id));
        self.known_hot
            .retain(|id| managed.iter().any(|m| m.id == id));
        self.lap(&mut phase, "read");
        let lower_faults = self.sample_hint_faults(&managed, elapsed_ms);
        for s in &mut snaps {
            s.lower_hint_faults = lower_faults.get(&s.id).copied();
        }
        self.lap(&mut phase, "hint_faults");

        let fast_capacity = self.topo.fast_capacity_bytes();
        let fast_free = self.topo.fast_free_bytes();
        let managed_fast: u64 = snaps.iter().map(|s| s.fast_bytes).sum();
        let mut snapshot = Snapshot {
            fast_capacity_bytes: fast_capacity,
            fast_unmanaged_bytes: fast_capacity
                .saturating_sub(fast_free)
                .saturating_sub(managed_fast),
            elapsed_ms,
            containers: snaps,
            hot_below_bytes: self.gate.hot_below_bytes(&self.cfg.daemon.procfs_root),
        };
        let promotion = self.promotion();
        let mut params = self.cfg.policy_params_for(promotion);
        if self.hot.damon.is_none() {
            // The assist promotes over DAMON's regions: nothing to assist with.
            params.assist_after_ms = 0;
        }
        self.lap(&mut phase, "solve");
        if self.actuating() {
            // Cold memory outside the containers makes room first
            // (`unmanaged.rs`); what it made joins the containers' pool.
            let mut agings = actuate::Agings::default();
            self.demote_unmanaged(&held, &mut snapshot, &params, &mut warm_gens, &mut agings);
            self.metrics.lru_gen_agings.inc_by(agings.count);
            self.lap_split(&mut phase, "reclaim", "age", agings.time);
        }
        let plan = policy::solve(&snapshot, &params, &mut self.policy_state);
        self.hot_swap_open = plan.hot_swap_open;
        self.lap(&mut phase, "solve");
        if tracing::enabled!(tracing::Level::DEBUG) {
            for c in &snapshot.containers {
                let Some(p) = plan.get(c.id) else { continue };
                tracing::debug!(container = %c.name, fast = c.fast_bytes, target = p.target_bytes,
                    state = ?p.state, demote = p.demote_bytes, promote = p.promote_bytes,
                    recallable = c.recallable_bytes, lower_hot = ?c.lower_hot_bytes,
                    lower_faults = ?c.lower_hint_faults,
                    known_hot_below = c.known_hot_below_bytes, swap = p.swap_bytes,
                    aging_gap_ms = p.aging_gap_ms,
                    fast_free, "plan");
            }
        }
        self.want_declined(&managed, &plan);
        self.note_assisted(&managed, &snapshot, &plan);
        if plan.guarantees_scaled {
            tracing::warn!(
                pool_bytes = plan.pool_bytes,
                "local_low guarantees exceed the fast tier; scaled down in proportion"
            );
        }

        let recalling = self.actuating()
            && self.actuate(&managed, &snapshot, &plan, &fast, warm_gens, &mut phase);
        if self.actuating() {
            let names = |id: u64| {
                managed
                    .iter()
                    .find(|m| m.id == id)
                    .map_or_else(|| id.to_string(), |m| m.path.clone())
            };
            self.gate.apply(&self.cfg, promotion, &plan, &names);
        }
        self.watch_kswapd(&plan, &managed, &per_node);
        self.lap(&mut phase, "kswapd");
        let (ids, current) = self.usage_of(&managed);
        // A DAMON claim to retry counts cycles: not quiet until it is made.
        let damon_pending = self.hot.damon.is_none()
            && self.cfg.hotness.source != HotnessSource::Off
            && !self.observe_only;
        self.cadence.full(
            cadence::quiet(&plan, promotion == PromotionMode::Tierd)
                && !damon_pending
                && !recalling,
            ids,
            current,
            fast_free,
        );
        self.forget_vanished(&managed);
        self.publish(&snapshot, &plan, &managed, &per_node, fast_free);
        self.lap(&mut phase, "publish");
        self.cycles += 1;
        if self.panic_at_cycle == Some(self.cycles) {
            panic!(
                "{PANIC_AT_CYCLE_ENV}={}: injected panic after the cycle's writes",
                self.cycles
            );
        }
        self.metrics
            .loop_duration_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(plan)
    }

    /// Adds the wall time since `*since` to `phase`'s counter
    /// (`tierd_cycle_phase_seconds`, the per-phase profile of the cycle) and
    /// restarts the clock.
    fn lap(&self, since: &mut PhaseClock, phase: &'static str) {
        debug_assert!(CYCLE_PHASES.contains(&phase), "{phase} not in CYCLE_PHASES");
        let now = PhaseClock::now();
        let (wall, cpu) = since.until(&now);
        self.charge(phase, wall, cpu);
        *since = now;
    }

    /// Adds `wall` and `cpu` to `phase`'s counters
    /// (`tierd_cycle_phase_seconds`, `tierd_cycle_phase_cpu_seconds`).
    fn charge(&self, phase: &'static str, wall: Duration, cpu: Duration) {
        let labels = PhaseLabels { phase };
        self.metrics
            .cycle_phase_seconds
            .get_or_create(&labels)
            .inc_by(wall.as_secs_f64());
        self.metrics
            .cycle_phase_cpu_seconds
            .get_or_create(&labels)
            .inc_by(cpu.as_secs_f64());
    }

    /// [`Self::lap`] for a phase that had `part` of its wall time in another
    /// phase, `part_phase`, interleaved with it (agings within demotion).
    /// The part's CPU time is taken as its wall time (capped at the whole's
    /// CPU): an aging is the kernel walking page tables in this thread,
    /// on CPU throughout.
    fn lap_split(
        &self,
        since: &mut PhaseClock,
        phase: &'static str,
        part_phase: &'static str,
        part: Duration,
    ) {
        for p in [phase, part_phase] {
            debug_assert!(CYCLE_PHASES.contains(&p), "{p} not in CYCLE_PHASES");
        }
        let now = PhaseClock::now();
        let (whole, whole_cpu) = since.until(&now);
        let part = part.min(whole);
        let part_cpu = part.min(whole_cpu);
        self.charge(part_phase, part, part_cpu);
        self.charge(phase, whole - part, whole_cpu - part_cpu);
        *since = now;
    }

    fn count_error(&self, container: &str, what: &str, e: &cgroupctl::Error) {
        let errno = match e {
            cgroupctl::Error::Io { source, .. } => source
                .raw_os_error()
                .map(|n| std::io::Error::from_raw_os_error(n).kind().to_string())
                .unwrap_or_else(|| "io".into()),
            _ => "other".into(),
        };
        self.metrics
            .container_reclaim_errors
            .get_or_create(&ContainerErrorLabels {
                cgroup: container.to_owned(),
                error: format!("{what}:{errno}"),
            })
            .inc();
    }

    /// Applies a config reloaded from the same file (SIGHUP, `tierctl
    /// reload`): policies, `[limits]`, `daemon.interval` and
    /// `daemon.headroom` take effect from the next cycle (see
    /// [`Config::reloaded`]). Returns the sections whose changes wait for a
    /// restart.
    pub fn reload(&mut self, new: Config) -> Vec<&'static str> {
        let (mut merged, restart) = self.cfg.reloaded(new);
        // The weights were applied at start; changing them waits for a
        // restart (the kernel's weights are host-wide).
        if let Some(f) = self.cfg.interleave_split() {
            merged.set_interleave_split(f);
        }
        if !self.observe_only {
            apply_fast_reserve(&mut merged, &self.topo);
        }
        self.cfg = merged;
        self.cadence.force();
        restart
    }

    /// Journals the original of every cgroup file before tierd first
    /// writes it (see [`crate::journal`]).
    pub fn set_journal(&mut self, journal: SharedJournal) {
        self.protection.set_journal(journal.clone());
        self.pinning.set_journal(journal.clone());
        self.subtree.set_journal(journal.clone());
        self.gate.set_journal(journal);
    }

    /// The running config (after reloads).
    /// Applies the interleave policies' weights ([`crate::interleave::apply`])
    /// through `knobs`; nothing when no policy interleaves or tierd only
    /// observes.
    pub fn apply_interleave(&mut self, knobs: &mut crate::sysctl::KernelKnobs) -> Result<()> {
        if self.observe_only {
            return Ok(());
        }
        crate::interleave::apply(&mut self.cfg, &self.topo, knobs)?;
        Ok(())
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Puts back every memory.low and cpuset.mems tierd changed, for cgroups
    /// that still exist, and removes tierd's kdamonds. Called at shutdown,
    /// and by `Drop` if it was not (an error return, a panic in a cycle);
    /// a second call does nothing.
    pub fn restore(&mut self) {
        if std::mem::replace(&mut self.restored, true) {
            return;
        }
        // Stop tierd's kdamonds first: no page moves after this point.
        if let Some(damon) = self.hot.damon.as_mut() {
            if let Some(m) = self.hot.monitor.as_mut() {
                m.stop(damon);
            }
            if let Some(d) = self.hot.damos.as_mut() {
                d.stop(damon);
            }
            match damon.release() {
                Ok(()) => tracing::info!("stopped and removed tierd's kdamonds"),
                Err(e) => tracing::warn!(error = %e, "cannot remove tierd's kdamonds"),
            }
        }
        self.hot = Hotness::default();
        self.gate.restore(&self.cfg.daemon.procfs_root);
        self.protection.restore(&self.cg);
        // Children's cpuset.mems first: the controller can go from the
        // parent only after.
        self.pinning.restore(&self.cg);
        self.subtree.restore(&self.cg);
        tracing::info!("restored memory.low and cpuset.mems of managed cgroups");
        if !self.observe_only {
            self.revive_at_exit();
        }
    }
}

/// The undo of last resort: an error return from the daemon or a panic in a
/// cycle (which unwinds through the blocking task that owns the controller)
/// still puts memory.low, memory.min, cpuset.mems and the kdamonds back.
impl Drop for Controller {
    fn drop(&mut self) {
        self.restore();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_of_nested_path() {
        assert_eq!(ancestors("a/b/c"), vec!["a".to_string(), "a/b".to_string()]);
        assert!(ancestors("a").is_empty());
    }

    #[test]
    fn cold_stall_needs_a_whole_grace_without_progress() {
        let grace = Duration::from_secs(3);
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let mut st = ColdStall::default();
        assert!(!st.stalled(1, false, s(0), grace));
        assert!(!st.stalled(1, false, s(2), grace));
        // Progress restarts the clock.
        assert!(!st.stalled(1, true, s(3), grace));
        assert!(!st.stalled(1, false, s(4), grace));
        assert!(!st.stalled(1, false, s(6), grace));
        assert!(st.stalled(1, false, s(7), grace));
        // Containers are tracked apart, and forgotten when they stop demoting.
        assert!(!st.stalled(2, false, s(7), grace));
        st.retain(|c| c == 2);
        assert!(!st.stalled(1, false, s(8), grace));
        assert!(st.stalled(2, false, s(10), grace));
    }
}
