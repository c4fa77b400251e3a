//! One control-loop cycle: sample (cgroupctl + topology) → [`policy::solve`] →
//! actuate (memory.low, memory.reclaim, cpuset.mems) → metrics and status.
//!
//! Everything here is blocking file I/O on cgroupfs and sysfs; the async loop in
//! [`crate::daemon`] runs each cycle on a blocking thread.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cgroupctl::{CgroupFs, Limit, NodeSet, ReclaimOutcome};
use hotness::damon::Damon;
use policy::{
    ContainerSnapshot, DemandHolds, Migrations, PlacementState, Plan, PolicyState, Snapshot,
};

use crate::actuators::{
    protection_limit, CpusetMems, Enabled, Knob, Protection, SubtreeCpuset, Writes,
};
use crate::config::{Config, HotnessSource, MoverKind, PromotionMode};
use crate::heatmon::{ContainerReading, HeatMonitor, Member};
use crate::hintfaults::HintFaults;
use crate::journal::SharedJournal;
use crate::metrics::{
    gauge_bytes, tier_label, ContainerErrorLabels, ContainerFaultLabels, ContainerLabels,
    ContainerNodeLabels, ContainerReasonLabels, ContainerStateLabels, ContainerTierLabels, Metrics,
    MoveFailureLabels, MoveLabels, NodeLabels, PhaseLabels, PromotionLabels,
};
use crate::regulate::{DamosMover, DamosOrder, Direction, Moved, PagesMover};
use crate::topology::{zone_reserve_pages, Topology};

/// Smallest demotion worth a memory.reclaim write: below this the syscall and
/// the LRU scan cost more than the placement gains.
const MIN_RECLAIM_BYTES: u64 = 1 << 20;

/// memory.stat counters are in pages of this size (PAGE_SIZE on x86-64).
const PAGE_BYTES: u64 = 4096;

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
    demote_khugepaged: u64,
    promote_success: u64,
    numa_hint_faults: u64,
}

pub use crate::status::{ContainerStatus, Status};

/// Test-only fault point: with this set to N in tierd's environment, cycle
/// N panics after its writes, so the VM tests can show that a panic
/// restores the host (the drop guards). Never set in production.
pub const PANIC_AT_CYCLE_ENV: &str = "TIERD_TEST_PANIC_AT_CYCLE";

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
    /// Held hot-set demand per container (`policy::DemandHolds`).
    demand_hold: DemandHolds,
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

/// When memory.reclaim may take over a container's demotion from the
/// cold-first mover. memory.reclaim picks by LRU and takes hot pages too, so
/// it waits while the mover is warming up or making progress, and takes the
/// remainder only after the mover found nothing for a grace period: DAMON
/// regions restart their age when they split, merge or are tried by DAMOS,
/// so one empty cycle is not a stall (docs/NOTES.md, "The DAMOS mover on
/// Linux 6.12").
#[derive(Default)]
struct ColdStall {
    since: HashMap<u64, Instant>,
}

impl ColdStall {
    /// Returns true once the mover of container `c` has been stalled (not
    /// `busy`: neither warming up, nor progressing, nor at its quota) for at
    /// least `grace`; any busy cycle restarts the clock.
    fn stalled(&mut self, c: u64, busy: bool, now: Instant, grace: Duration) -> bool {
        if busy {
            self.since.remove(&c);
            return false;
        }
        let since = *self.since.entry(c).or_insert(now);
        now.duration_since(since) >= grace
    }

    /// Forgets containers that no longer demote.
    fn retain(&mut self, demoting: impl Fn(u64) -> bool) {
        self.since.retain(|&c, _| demoting(c));
    }
}

/// Warns when `daemon.headroom` is below the kernel's own free-memory reserve
/// of the fast tier (zone `high`/`promo` watermarks, `/proc/zoneinfo`): tierd
/// would then fill DRAM past the point where kswapd starts demoting in LRU
/// order, and the targets could not hold. The reserve is also why a hot set
/// larger than DRAM cannot have more than DRAM − reserve − other use on it.
fn warn_headroom_below_reserve(cfg: &Config, topo: &Topology) {
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
            let headroom = cfg.daemon.headroom.0;
            if headroom < bytes {
                tracing::warn!(
                    headroom_bytes = headroom,
                    kernel_reserve_bytes = bytes,
                    "daemon.headroom is below the kernel's free-memory reserve of the fast tier \
                     ({}: zone high/promo watermarks): kswapd will demote in LRU order before \
                     the targets are reached; raise daemon.headroom to at least the reserve",
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
        Err(e) => tracing::debug!(error = %e, "kernel free-memory reserve unknown"),
    }
}

/// Cycles between attempts to claim DAMON after it was unavailable (busy
/// with someone else's kdamonds): about a minute at the default interval.
const DAMON_RETRY_CYCLES: u64 = 30;

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
    pub fn new(cfg: Config, metrics: Arc<Metrics>, status: Arc<Mutex<Status>>) -> Result<Self> {
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
            warn_headroom_below_reserve(&cfg, &topo);
        }
        metrics.tiered.set(i64::from(!observe_only));
        let faults = HintFaults::start(&cfg.hotness, &cfg.daemon.sysfs_root, &cfg.source)?;
        metrics.hint_fault_source(faults.source());
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
            hot: Hotness::default(),
            own_moved: HashMap::new(),
            moved_total: HashMap::new(),
            faults,
            stat_hint_faults: HashMap::new(),
            alive_ids: HashSet::new(),
            demand_hold: DemandHolds::default(),
            restored: false,
            panic_at_cycle: std::env::var(PANIC_AT_CYCLE_ENV)
                .ok()
                .and_then(|v| v.parse().ok()),
        };
        c.setup_hotness();
        Ok(c)
    }

    /// Claims tierd's kdamonds and sets up the monitor and movers. On
    /// failure heat stays unknown (demand = usage), the reason is logged and
    /// shown in /status, and the claim is retried every
    /// [`DAMON_RETRY_CYCLES`] cycles.
    fn setup_hotness(&mut self) {
        let h = &self.cfg.hotness;
        let d = &self.cfg.daemon;
        if h.source == HotnessSource::Off || self.observe_only {
            if !self.observe_only {
                tracing::info!(
                    "DAMON off: demand = {}, promotion = {}, cold_demotion = {} need no heat (set hotness.source = \"damon\" for the heat metrics)",
                    d.demand.as_str(),
                    d.promotion.as_str(),
                    d.cold_demotion
                );
            }
            return;
        }
        let want_damos =
            d.mover == MoverKind::Damos && (d.promotion == PromotionMode::Tierd || d.cold_demotion);
        let mut damon = Damon::new(self.cfg.damon_root(), &h.state_file);
        let claimed = damon
            .check_available()
            .and_then(|()| damon.claim(if want_damos { 2 } else { 1 }));
        let claim = match claimed {
            Ok(c) => c,
            Err(e) => {
                let reason = e.to_string();
                if self.hot.off_reason.as_deref() != Some(&reason) {
                    tracing::error!(error = %e,
                        "DAMON unavailable: demand falls back to usage and tierd moves no pages itself; retrying every {DAMON_RETRY_CYCLES} cycles");
                }
                self.hot.off_reason = Some(reason);
                self.hot.retry_cycle = self.cycles + DAMON_RETRY_CYCLES;
                self.metrics.hotness_source(false);
                return;
            }
        };
        if claim.adopted.iter().any(|&a| a) {
            tracing::info!(kdamonds = ?claim.indices, "adopted the kdamonds of a previous tierd");
        }
        let fast: Vec<u32> = self.topo.fast_nodes().iter().copied().collect();
        let lower: Vec<u32> = self.topo.lower_nodes().iter().copied().collect();
        self.hot.monitor = Some(HeatMonitor::new(h, claim.indices[0]));
        self.hot.pages = (d.mover == MoverKind::MovePages)
            .then(|| PagesMover::new(d.mover_batch, self.cfg.limits.thrash_window));
        if want_damos {
            match DamosMover::new(
                claim.indices[1],
                HeatMonitor::attrs(h),
                &d.sysfs_root,
                &fast,
                &lower,
                fast[0],
                lower[0],
                d.interval,
            ) {
                Ok(m) => self.hot.damos = Some(m),
                Err(e) => {
                    tracing::error!(error = %e, "DAMOS mover unavailable; tierd moves no pages itself")
                }
            }
        }
        self.hot.damon = Some(damon);
        self.hot.off_reason = None;
        self.metrics.hotness_source(true);
    }

    /// Samples heat of every managed container (DAMON + page-node queries).
    fn sample_heat(&mut self, managed: &[Managed]) {
        self.hot.readings.clear();
        if self.hot.damon.is_none() {
            if self.cycles >= self.hot.retry_cycle {
                self.setup_hotness();
            }
            if self.hot.damon.is_none() {
                return;
            }
        }
        let mut members = Vec::new();
        for m in managed {
            for cg in &m.members {
                if let Ok(pids) = self.cg.procs(cg) {
                    members.extend(pids.into_iter().filter(|&p| p > 0).map(|p| Member {
                        container: m.id,
                        pid: p as u32,
                    }));
                }
            }
        }
        let (Some(damon), Some(mon)) = (&self.hot.damon, &mut self.hot.monitor) else {
            return;
        };
        match mon.sample(damon, &members) {
            Ok(r) => self.hot.readings = r,
            Err(e) => {
                tracing::warn!(error = %e, "DAMON sampling failed this cycle; demand = usage");
            }
        }
        self.metrics.damon_targets.set(mon.targets() as i64);
        self.metrics.kdamond_restarts_seen(mon.restarts);
    }

    pub fn observe_only(&self) -> bool {
        self.observe_only
    }

    /// Managed containers: cgroups matched by a policy whose ancestors are not
    /// themselves managed (a matched subtree is managed as one container).
    fn discover(&mut self) -> Result<Vec<Managed>> {
        self.alive_ids.clear();
        let mut all = self.cg.discover().with_context(|| {
            format!(
                "cannot list cgroups under {}",
                self.cfg.daemon.cgroup_root.display()
            )
        })?;
        all.sort_by(|a, b| a.path.cmp(&b.path));
        let mut out: Vec<Managed> = Vec::new();
        // Paths already managed (parents sort before children): a cgroup below
        // one of them is part of it. One set lookup per ancestor keeps
        // discovery linear in the number of cgroups.
        let mut managed_paths: HashMap<String, usize> = HashMap::new();
        for c in all {
            if c.path.is_empty() {
                continue;
            }
            self.alive_ids.insert(c.id);
            if let Some(&i) = ancestors(&c.path).iter().find_map(|a| managed_paths.get(a)) {
                out[i].members.push(c.path);
                out[i].member_ids.push(c.id);
                continue;
            }
            if let Some(i) = self.cfg.match_policy(&c.path) {
                managed_paths.insert(c.path.clone(), out.len());
                out.push(Managed {
                    members: vec![c.path.clone()],
                    member_ids: vec![c.id],
                    path: c.path,
                    id: c.id,
                    policy_index: i,
                });
            }
        }
        Ok(out)
    }

    /// Runs one cycle. Per-container failures (vanished cgroups, EBUSY) are
    /// logged and skipped; an error here means the cycle as a whole failed.
    pub fn cycle(&mut self) -> Result<Plan> {
        let started = Instant::now();
        let elapsed_ms = self
            .last_cycle
            .map(|t| t.elapsed().as_millis() as u64)
            .unwrap_or(0);
        self.last_cycle = Some(started);
        self.topo
            .refresh_free(&self.cfg.daemon.sysfs_root)
            .context("cannot refresh per-node free memory")?;
        let fast = self.topo.fast_nodes();
        let managed = self.discover()?;
        let mut phase = started;
        self.lap(&mut phase, "read");
        self.sample_heat(&managed);
        self.lap(&mut phase, "damon");

        let mut snaps = Vec::with_capacity(managed.len());
        let mut per_node: HashMap<u64, BTreeMap<u32, u64>> = HashMap::new();
        let mut kept = Vec::with_capacity(managed.len());
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
            let mut migrations = self.update_counters(&m);
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
        self.lap(&mut phase, "read");
        self.sample_hint_faults(&managed, elapsed_ms);
        self.lap(&mut phase, "hint_faults");

        let fast_capacity = self.topo.fast_capacity_bytes();
        let fast_free = self.topo.fast_free_bytes();
        let managed_fast: u64 = snaps.iter().map(|s| s.fast_bytes).sum();
        let snapshot = Snapshot {
            fast_capacity_bytes: fast_capacity,
            fast_unmanaged_bytes: fast_capacity
                .saturating_sub(fast_free)
                .saturating_sub(managed_fast),
            elapsed_ms,
            containers: snaps,
        };
        let plan = policy::solve(&snapshot, &self.cfg.policy_params(), &mut self.policy_state);
        self.lap(&mut phase, "solve");
        if plan.guarantees_scaled {
            tracing::warn!(
                pool_bytes = plan.pool_bytes,
                "local_low guarantees exceed the fast tier; scaled down in proportion"
            );
        }

        if !self.observe_only {
            self.actuate(&managed, &plan, &fast, &mut phase);
        }
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

    /// Reads the memcg tiering counters and returns what the kernel moved
    /// since the previous cycle (zero on the first).
    fn update_counters(&mut self, m: &Managed) -> Migrations {
        let stat = match self.cg.memory_stat(&m.path) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(container = %m.path, error = %e, "memory.stat unreadable");
                return Migrations::default();
            }
        };
        let now = MemcgCounters {
            demote_kswapd: stat.pgdemote_kswapd(),
            demote_direct: stat.pgdemote_direct(),
            demote_khugepaged: stat.pgdemote_khugepaged(),
            promote_success: stat.pgpromote_success(),
            numa_hint_faults: stat.numa_hint_faults(),
        };
        if let Some(prev) = self.counters.insert(m.id, now) {
            self.stat_hint_faults.insert(
                m.id,
                now.numa_hint_faults.saturating_sub(prev.numa_hint_faults),
            );
            let label = |reason| ContainerReasonLabels {
                cgroup: m.path.clone(),
                reason,
            };
            let d = &self.metrics.container_demoted_bytes;
            d.get_or_create(&label("kswapd"))
                .inc_by(now.demote_kswapd.saturating_sub(prev.demote_kswapd) * PAGE_BYTES);
            d.get_or_create(&label("direct"))
                .inc_by(now.demote_direct.saturating_sub(prev.demote_direct) * PAGE_BYTES);
            d.get_or_create(&label("khugepaged"))
                .inc_by(now.demote_khugepaged.saturating_sub(prev.demote_khugepaged) * PAGE_BYTES);
            let promoted = now.promote_success.saturating_sub(prev.promote_success) * PAGE_BYTES;
            self.metrics
                .container_promoted_bytes
                .get_or_create(&ContainerLabels {
                    cgroup: m.path.clone(),
                })
                .inc_by(promoted);
            // Thrash input: what went *up* (kernel promotions here, tierd's
            // own added by the caller) against what *tierd* sent down (its
            // moves and memory.reclaim requests, added by the caller).
            // kswapd's demotions are not counted: a newcomer whose pages
            // kswapd demoted as it allocated, and which tierd then promotes
            // to its share, is not thrashing.
            return Migrations {
                demoted_bytes: 0,
                promoted_bytes: promoted,
                pingpong_bytes: 0,
            };
        }
        Migrations::default()
    }

    /// Reads this cycle's hint faults and kernel migrations per container
    /// and exports them (counters by node and outcome; lower-tier fault rate).
    fn sample_hint_faults(&mut self, managed: &[Managed], elapsed_ms: u64) {
        let input: Vec<(u64, &[u64], Option<u64>)> = managed
            .iter()
            .map(|m| {
                (
                    m.id,
                    m.member_ids.as_slice(),
                    self.stat_hint_faults.get(&m.id).copied(),
                )
            })
            .collect();
        self.stat_hint_faults.clear();
        let deltas = self.faults.sample(&input, &self.alive_ids);
        let lower = self.topo.lower_nodes();
        for m in managed {
            let Some(f) = deltas.get(&m.id) else { continue };
            // Kernel promotions of pages tierd itself demoted within the
            // thrash window: exact ping-pong, input to thrash control.
            if let Some(pm) = &self.hot.pages {
                let back: u64 = f
                    .promotions
                    .iter()
                    .map(|&(pid, addr, len)| pm.returned(m.id, pid, addr, len))
                    .sum();
                if back > 0 {
                    self.own_moved.entry(m.id).or_default().pingpong_bytes += back;
                    self.metrics
                        .container_repromoted_bytes
                        .get_or_create(&ContainerLabels {
                            cgroup: m.path.clone(),
                        })
                        .inc_by(back);
                }
            }
            for (node, n) in &f.faults_by_node {
                self.metrics
                    .container_numa_hint_faults
                    .get_or_create(&ContainerFaultLabels {
                        cgroup: m.path.clone(),
                        node: node.map_or("all".into(), |n| n.to_string()),
                    })
                    .inc_by(*n);
            }
            for (outcome, map) in [
                ("candidate", &f.candidates),
                ("dropped", &f.dropped),
                ("migrated", &f.migrated),
                ("failed", &f.failed),
            ] {
                for (node, n) in map {
                    self.metrics
                        .container_numa_promotions
                        .get_or_create(&PromotionLabels {
                            cgroup: m.path.clone(),
                            node: *node,
                            outcome,
                        })
                        .inc_by(*n);
                }
            }
            if self.faults.source() == "ebpf" && elapsed_ms > 0 {
                let on_lower: u64 = f
                    .faults_by_node
                    .iter()
                    .filter(|(n, _)| n.is_some_and(|n| lower.contains(&n)))
                    .map(|(_, c)| c)
                    .sum();
                self.metrics
                    .container_lower_hint_faults_per_second
                    .get_or_create(&ContainerLabels {
                        cgroup: m.path.clone(),
                    })
                    .set(on_lower as f64 * 1000.0 / elapsed_ms as f64);
            }
        }
    }

    /// Adds the wall time since `*since` to `phase`'s counter
    /// (`tierd_cycle_phase_seconds`, the per-phase profile of the cycle) and
    /// restarts the clock.
    fn lap(&self, since: &mut Instant, phase: &'static str) {
        let now = Instant::now();
        self.metrics
            .cycle_phase_seconds
            .get_or_create(&PhaseLabels { phase })
            .inc_by(now.duration_since(*since).as_secs_f64());
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

    /// Writes memory.low and cpuset.mems where they changed, then demotes.
    /// Protection goes first so that kswapd skips at-target containers while
    /// the reclaim below frees fast-tier memory.
    fn actuate(&mut self, managed: &[Managed], plan: &Plan, fast: &NodeSet, phase: &mut Instant) {
        // Which (knob, ancestor) pairs have a protected managed child.
        let mut ancestor_sum: BTreeMap<(Protection, String), bool> = BTreeMap::new();
        for m in managed {
            let Some(p) = plan.get(m.id) else { continue };
            if p.state == PlacementState::Pinned && !self.pinning.contains(CpusetMems, &m.path) {
                self.pin(m, fast);
            }
            for (knob, bytes) in [
                (Protection::Low, p.memory_low_bytes),
                (Protection::Min, p.memory_min_bytes),
            ] {
                // memory.min is written only once it is wanted: a host
                // without guarantees never sees tierd touch it.
                if knob == Protection::Min && bytes == 0 && !self.protection.contains(knob, &m.path)
                {
                    continue;
                }
                self.write_protection(knob, &m.path, m.id, protection_limit(bytes));
                for a in ancestors(&m.path) {
                    *ancestor_sum.entry((knob, a)).or_default() |= bytes > 0;
                }
            }
        }
        // Protection is hierarchical: a child's is capped by its parent's
        // (cgroup-v2.rst, "Memory Protection"), so every ancestor below the
        // root of a protected container is protected as fully (`max`); with
        // none protected below it, what it had before tierd (0 if tierd wrote
        // nothing there).
        for ((knob, path), protected) in ancestor_sum {
            let written = self.protection.original(knob, &path);
            let want = match (protected, written) {
                (true, _) => Limit::Max,
                (false, Some(original)) => original,
                (false, None) => continue,
            };
            let id = self.cg.cgroup_id(&path).unwrap_or(0);
            if written.is_none() && knob.read(&self.cg, &path).is_ok_and(|v| v == want) {
                continue;
            }
            self.write_protection(knob, &path, id, want);
        }
        self.lap(phase, "protect");
        // tierd's own moves (hot promotion, cold-first demotion), then
        // memory.reclaim (LRU order) for whatever demotion is left.
        let moved_down = self.regulated_moves(managed, plan);
        self.lap(phase, "move");
        for m in managed {
            let Some(p) = plan.get(m.id) else { continue };
            let demote = p
                .demote_bytes
                .saturating_sub(moved_down.get(&m.id).copied().unwrap_or(0));
            if demote < MIN_RECLAIM_BYTES {
                continue;
            }
            let labels = ContainerLabels {
                cgroup: m.path.clone(),
            };
            match self.cg.reclaim(&m.path, demote) {
                Ok(outcome) => {
                    self.own_moved.entry(m.id).or_default().demoted_bytes += demote;
                    self.metrics
                        .container_demote_requested_bytes
                        .get_or_create(&labels)
                        .inc_by(demote);
                    if outcome == ReclaimOutcome::Short {
                        self.metrics
                            .container_reclaim_short
                            .get_or_create(&labels)
                            .inc();
                    }
                    tracing::debug!(container = %m.path, bytes = demote, ?outcome, "memory.reclaim");
                }
                Err(cgroupctl::Error::Vanished(p)) => {
                    tracing::debug!(path = %p.display(), "cgroup vanished before memory.reclaim; skipped");
                }
                Err(e) => {
                    tracing::warn!(container = %m.path, error = %e, "memory.reclaim failed");
                    self.count_error(&m.path, "reclaim", &e);
                }
            }
        }
        // The kernel's demotion work runs in the writer's context: this phase
        // is where tierd's CPU goes when it demotes.
        self.lap(phase, "reclaim");
    }

    /// Promotion by tierd (`promotion = "tierd"`) and cold-first demotion
    /// (`cold_demotion`) through the configured mover. Returns, per
    /// container, the demotion already done (memory.reclaim does the rest).
    fn regulated_moves(&mut self, managed: &[Managed], plan: &Plan) -> HashMap<u64, u64> {
        let mut done_down = HashMap::new();
        let d = &self.cfg.daemon;
        let promote = d.promotion == PromotionMode::Tierd;
        let cold = d.cold_demotion;
        let Some(damon) = &self.hot.damon else {
            return done_down;
        };
        if !promote && !cold {
            return done_down;
        }
        let most_free = |nodes: &NodeSet| {
            nodes
                .iter()
                .filter_map(|&n| self.topo.node(n))
                .max_by_key(|n| (n.mem_free_bytes, std::cmp::Reverse(n.id)))
                .map(|n| n.id)
        };
        let (Some(fast_dest), Some(lower_dest)) = (
            most_free(&self.topo.fast_nodes()),
            most_free(&self.topo.lower_nodes()),
        ) else {
            return done_down;
        };
        let fast: Vec<u32> = self.topo.fast_nodes().iter().copied().collect();
        let lower: Vec<u32> = self.topo.lower_nodes().iter().copied().collect();
        let aggr_us = self.cfg.hotness.aggr_interval.as_micros().max(1);
        let base_age = (d.cold_min_age.as_micros() / aggr_us).max(1) as u32;
        let mut results: Vec<(u64, Direction, &'static str, Moved)> = Vec::new();
        let now = Instant::now();
        let stall_grace = d.cold_min_age.max(3 * d.interval);
        let demoting: HashSet<u64> = managed
            .iter()
            .filter(|m| {
                plan.get(m.id).is_some_and(|p| {
                    cold && p.state == PlacementState::OverTarget && p.demote_bytes > 0
                })
            })
            .map(|m| m.id)
            .collect();
        self.hot.cold_stalled.retain(|c| demoting.contains(&c));

        if let Some(pm) = &mut self.hot.pages {
            for m in managed {
                let (Some(p), Some(r)) = (plan.get(m.id), self.hot.readings.get(&m.id)) else {
                    continue;
                };
                if promote && p.promote_bytes > 0 {
                    // Recently idle regions count as worth promoting only once DAMON
                    // has watched long enough to tell them from cold ones.
                    let idle_ok = if r.monitored_for >= d.cold_min_age {
                        base_age
                    } else {
                        0
                    };
                    let mv =
                        pm.promote(m.id, &r.procs, idle_ok, &lower, fast_dest, p.promote_bytes);
                    results.push((m.id, Direction::Promote, "move_pages", mv));
                }
                if cold && p.state == PlacementState::OverTarget && p.demote_bytes > 0 {
                    let min_age = base_age.saturating_mul(1 << p.damping_level.min(16));
                    // No region can have been idle for cold_min_age yet: wait
                    // for DAMON rather than let memory.reclaim demote.
                    let warming_up = r.monitored_for < d.cold_min_age;
                    let mv = if warming_up {
                        Moved::default()
                    } else {
                        pm.demote(m.id, &r.procs, min_age, &fast, lower_dest, p.demote_bytes)
                    };
                    let progress = mv.bytes >= MIN_RECLAIM_BYTES;
                    let stalled = self.hot.cold_stalled.stalled(
                        m.id,
                        warming_up || progress,
                        now,
                        stall_grace,
                    );
                    done_down.insert(m.id, if stalled { mv.bytes } else { p.demote_bytes });
                    if !warming_up {
                        results.push((m.id, Direction::Demote, "move_pages", mv));
                    }
                }
            }
            pm.retain(|c| managed.iter().any(|m| m.id == c));
        }
        if let Some(dm) = &mut self.hot.damos {
            let orders: Vec<DamosOrder> = managed
                .iter()
                .filter_map(|m| {
                    let p = plan.get(m.id)?;
                    Some(DamosOrder {
                        container: m.id,
                        memcg_path: format!("/{}", m.path),
                        promote_bytes: if promote { p.promote_bytes } else { 0 },
                        demote_bytes: if cold && p.state == PlacementState::OverTarget {
                            p.demote_bytes
                        } else {
                            0
                        },
                        cold_min_age: base_age.saturating_mul(1 << p.damping_level.min(16)),
                    })
                })
                .collect();
            // Whose migrate_cold had a real quota in the interval that just
            // ended, and how much (read before apply() re-arms them).
            let tried: HashMap<u64, u64> = orders
                .iter()
                .map(|o| (o.container, dm.armed_quota(o.container, Direction::Demote)))
                .filter(|&(_, q)| q > 0)
                .collect();
            let warming_up = dm.running_for() < d.cold_min_age;
            match dm.apply(damon, &orders) {
                // DAMOS moves during the coming interval; what it moved in the
                // last one is reported now, and memory.reclaim only takes what
                // DAMOS fell short by.
                Ok(moved) => {
                    for o in orders.iter().filter(|o| o.demote_bytes > 0) {
                        // As for move_pages: while DAMOS has not had its try
                        // (scheme still in its first charge window, or no
                        // region old enough yet), makes progress, or used up
                        // its quota (it was not short of cold regions),
                        // memory.reclaim does not take the rest.
                        let r = moved
                            .get(&(o.container, Direction::Demote))
                            .copied()
                            .unwrap_or_default();
                        let quota = tried.get(&o.container).copied();
                        let wait = warming_up || quota.is_none();
                        let progress = r.applied >= MIN_RECLAIM_BYTES;
                        let exhausted = quota.is_some_and(|q| r.tried >= q);
                        // A region DAMOS tried (even one whose pages were
                        // all filtered out) restarts its age at 0, so
                        // migrate_cold moves in bursts a cold_min_age apart:
                        // one empty interval is not a stall.
                        let stalled = self.hot.cold_stalled.stalled(
                            o.container,
                            wait || progress || exhausted,
                            now,
                            stall_grace,
                        );
                        let done = if stalled {
                            r.applied
                        } else {
                            o.demote_bytes.max(r.applied)
                        };
                        done_down.insert(o.container, done);
                    }
                    for ((c, dir), r) in moved {
                        let mv = Moved {
                            bytes: r.applied,
                            ..Moved::default()
                        };
                        results.push((c, dir, "damos", mv));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "DAMOS mover: cannot apply this cycle's quotas")
                }
            }
        }
        for (c, dir, mechanism, mv) in results {
            self.record_move(managed, c, dir, mechanism, &mv);
        }
        done_down
    }

    /// Counts one mover result in metrics, /status and the thrash input.
    fn record_move(
        &mut self,
        managed: &[Managed],
        id: u64,
        dir: Direction,
        mechanism: &'static str,
        mv: &Moved,
    ) {
        let Some(m) = managed.iter().find(|m| m.id == id) else {
            return;
        };
        let own = self.own_moved.entry(id).or_default();
        match dir {
            Direction::Promote => own.promoted_bytes += mv.bytes,
            Direction::Demote => own.demoted_bytes += mv.bytes,
        }
        own.pingpong_bytes += mv.pingpong_bytes;
        *self
            .moved_total
            .entry(id)
            .or_default()
            .entry(format!("{}/{mechanism}", dir.as_str()))
            .or_default() += mv.bytes;
        self.metrics
            .container_migrated_bytes
            .get_or_create(&MoveLabels {
                cgroup: m.path.clone(),
                direction: dir.as_str(),
                mechanism,
            })
            .inc_by(mv.bytes);
        for (&status, &pages) in &mv.failures {
            self.metrics
                .move_pages_failures
                .get_or_create(&MoveFailureLabels {
                    cgroup: m.path.clone(),
                    direction: dir.as_str(),
                    status,
                })
                .inc_by(pages);
        }
        if mv.bytes > 0 {
            tracing::debug!(container = %m.path, direction = dir.as_str(), mechanism, bytes = mv.bytes, "moved");
        }
    }

    fn write_protection(&mut self, knob: Protection, path: &str, id: u64, value: Limit) {
        if let Err(e) = self.protection.write(&self.cg, knob, path, id, value) {
            tracing::warn!(container = %path, error = %e, "cannot write {}", knob.file());
            self.count_error(path, knob.metric(), &e);
        }
    }

    /// opt_out: confine the container's memory to the fast tier. In cgroup v2
    /// a cpuset.mems change migrates existing pages too (asynchronously).
    fn pin(&mut self, m: &Managed, fast: &NodeSet) {
        // cpuset.mems exists only where the parent enables the controller.
        let parent = ancestors(&m.path).pop().unwrap_or_default();
        let parent_id = self.cg.cgroup_id(&parent).unwrap_or(0);
        if let Err(e) =
            self.subtree
                .write(&self.cg, SubtreeCpuset, &parent, parent_id, Enabled(true))
        {
            tracing::warn!(container = %m.path, error = %e,
                "cannot enable the cpuset controller for opt_out; the container stays unpinned");
            self.count_error(&m.path, "cpuset", &e);
            return;
        }
        match self
            .pinning
            .write(&self.cg, CpusetMems, &m.path, m.id, fast.clone())
        {
            Ok(()) => {
                if self.pinning.contains(CpusetMems, &m.path) {
                    tracing::info!(container = %m.path, nodes = ?fast, "opt_out: pinned to the fast tier");
                }
            }
            Err(e) => {
                tracing::warn!(container = %m.path, error = %e, "cannot write cpuset.mems");
                self.count_error(&m.path, "cpuset", &e);
            }
        }
    }

    /// Forgets writes to cgroups that are gone (or recreated under a new id):
    /// there is nothing to restore in them.
    fn forget_vanished(&mut self, managed: &[Managed]) {
        let cg = &self.cg;
        let alive = |path: &str, id: u64| {
            managed.iter().any(|m| m.path == path && m.id == id)
                || cg.cgroup_id(path).map(|i| i == id).unwrap_or(false)
        };
        self.protection.forget_vanished(cg, alive);
        self.pinning.forget_vanished(cg, alive);
        self.subtree.forget_vanished(cg, alive);
    }

    /// Applies a config reloaded from the same file (SIGHUP, `tierctl
    /// reload`): policies, `[limits]`, `daemon.interval` and
    /// `daemon.headroom` take effect from the next cycle (see
    /// [`Config::reloaded`]). Returns the sections whose changes wait for a
    /// restart.
    pub fn reload(&mut self, new: Config) -> Vec<&'static str> {
        let (merged, restart) = self.cfg.reloaded(new);
        if !self.observe_only {
            warn_headroom_below_reserve(&merged, &self.topo);
        }
        self.cfg = merged;
        restart
    }

    /// Journals the original of every cgroup file before tierd first
    /// writes it (see [`crate::journal`]).
    pub fn set_journal(&mut self, journal: SharedJournal) {
        self.protection.set_journal(journal.clone());
        self.pinning.set_journal(journal.clone());
        self.subtree.set_journal(journal);
    }

    /// The running config (after reloads).
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
        self.protection.restore(&self.cg);
        // Children's cpuset.mems first: the controller can go from the
        // parent only after.
        self.pinning.restore(&self.cg);
        self.subtree.restore(&self.cg);
        tracing::info!("restored memory.low and cpuset.mems of managed cgroups");
    }

    fn publish(
        &self,
        snapshot: &Snapshot,
        plan: &Plan,
        managed: &[Managed],
        per_node: &HashMap<u64, BTreeMap<u32, u64>>,
        fast_free: u64,
    ) {
        let mt = &self.metrics;
        let fast = self.topo.fast_nodes();
        for n in &self.topo.nodes {
            let tier = tier_label(fast.contains(&n.id));
            let l = NodeLabels { node: n.id, tier };
            mt.node_capacity_bytes
                .get_or_create(&l)
                .set(gauge_bytes(n.mem_total_bytes));
            mt.node_free_bytes
                .get_or_create(&l)
                .set(gauge_bytes(n.mem_free_bytes));
        }
        mt.clear_container_gauges();
        let paths: HashSet<&str> = managed.iter().map(|m| m.path.as_str()).collect();
        mt.forget_cgroups(|p| paths.contains(p));
        mt.fast_pool_bytes.set(gauge_bytes(plan.pool_bytes));
        mt.fast_need_bytes.set(gauge_bytes(plan.need_bytes));
        mt.guarantees_scaled.set(i64::from(plan.guarantees_scaled));
        mt.managed_containers.set(managed.len() as i64);
        let lower = self.topo.lower_nodes();
        let mut status = Status {
            tiered: !self.observe_only,
            promotion: self.cfg.daemon.promotion.as_str().into(),
            fast_nodes: fast.iter().copied().collect(),
            lower_nodes: self.topo.lower_nodes().iter().copied().collect(),
            fast_capacity_bytes: snapshot.fast_capacity_bytes,
            fast_free_bytes: fast_free,
            pool_bytes: plan.pool_bytes,
            guarantees_scaled: plan.guarantees_scaled,
            cycles: self.cycles + 1,
            hotness: match (&self.hot.damon, &self.hot.off_reason) {
                (Some(_), _) => "damon".into(),
                (None, Some(why)) => format!("usage ({why})"),
                (None, None) => "usage".into(),
            },
            hint_faults: match &self.faults.off_reason {
                Some(why) if self.faults.source() != "ebpf" => format!("memory_stat ({why})"),
                _ => self.faults.source().into(),
            },
            mover: self.cfg.daemon.mover.as_str().into(),
            damon_targets: self.hot.monitor.as_ref().map_or(0, |m| m.targets()),
            kdamond_restarts: self.hot.monitor.as_ref().map_or(0, |m| m.restarts),
            containers: Vec::new(),
        };
        for (m, s) in managed.iter().zip(&snapshot.containers) {
            let c = ContainerLabels {
                cgroup: m.path.clone(),
            };
            if let Some(nodes) = per_node.get(&m.id) {
                for (&node, &b) in nodes {
                    let tier = tier_label(fast.contains(&node));
                    mt.container_memory_bytes
                        .get_or_create(&ContainerNodeLabels {
                            cgroup: m.path.clone(),
                            node,
                            tier,
                        })
                        .set(gauge_bytes(b));
                }
            }
            let usage = s.usage_bytes();
            mt.container_local_ratio
                .get_or_create(&c)
                .set(if usage == 0 {
                    0.0
                } else {
                    s.fast_bytes as f64 / usage as f64
                });
            let Some(p) = plan.get(m.id) else { continue };
            let (written_low, written_min) = if self.observe_only {
                (0, 0)
            } else {
                (p.memory_low_bytes, p.memory_min_bytes)
            };
            for (family, bytes) in [
                (&mt.container_target_bytes, p.target_bytes),
                (&mt.container_demand_bytes, p.demand_bytes),
                (&mt.container_guarantee_bytes, p.guarantee_bytes),
                (&mt.container_local_low_bytes, p.local_low_bytes),
                (&mt.container_local_high_bytes, p.local_high_bytes),
                (&mt.container_memory_low_bytes, written_low),
                (&mt.container_memory_min_bytes, written_min),
            ] {
                family.get_or_create(&c).set(gauge_bytes(bytes));
            }
            mt.container_state
                .get_or_create(&ContainerStateLabels {
                    cgroup: m.path.clone(),
                    state: state_name(p.state),
                })
                .set(1);
            mt.container_damping_level
                .get_or_create(&c)
                .set(i64::from(p.damping_level));
            mt.container_pingpong_bytes_per_second
                .get_or_create(&c)
                .set(gauge_bytes(p.pingpong_bytes_per_s));
            let reading = self.hot.readings.get(&m.id).filter(|r| r.regions > 0);
            let (mut hot_fast, mut hot_lower) = (None, None);
            if let Some(r) = reading {
                mt.container_damon_regions
                    .get_or_create(&c)
                    .set(r.regions as i64);
                let (mut hf, mut hl) = (0u64, 0u64);
                for (&node, nh) in &r.heat.per_node {
                    let is_fast = fast.contains(&node);
                    if is_fast {
                        hf += nh.hot_bytes;
                    } else if lower.contains(&node) {
                        hl += nh.hot_bytes;
                    }
                    mt.set_heat(&m.path, node, tier_label(is_fast), &nh.hist);
                }
                for (tier, b) in [("fast", hf), ("lower", hl)] {
                    mt.container_hot_bytes
                        .get_or_create(&ContainerTierLabels {
                            cgroup: m.path.clone(),
                            tier,
                        })
                        .set(gauge_bytes(b));
                }
                (hot_fast, hot_lower) = (Some(hf), Some(hl));
            }
            let entry = &self.cfg.policies[m.policy_index];
            status.containers.push(ContainerStatus {
                container: m.path.clone(),
                id: m.id,
                policy: entry.name.clone().unwrap_or_else(|| entry.pattern.clone()),
                fast_bytes: s.fast_bytes,
                lower_bytes: s.slow_bytes,
                demand_bytes: p.demand_bytes,
                local_low_bytes: p.local_low_bytes,
                local_high_bytes: p.local_high_bytes,
                target_bytes: p.target_bytes,
                memory_low_bytes: p.memory_low_bytes,
                memory_min_bytes: p.memory_min_bytes,
                demote_bytes: if self.observe_only { 0 } else { p.demote_bytes },
                promote_bytes: if self.observe_only {
                    0
                } else {
                    p.promote_bytes
                },
                state: state_name(p.state).into(),
                hot_fast_bytes: hot_fast,
                hot_lower_bytes: hot_lower,
                moved_bytes: self.moved_total.get(&m.id).cloned().unwrap_or_default(),
                damping_level: p.damping_level,
                pingpong_bytes_per_s: p.pingpong_bytes_per_s,
            });
        }
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = status;
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
