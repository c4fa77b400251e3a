//! Regulated page movement: tierd's own promotion (`promotion = "tierd"`)
//! and cold-first demotion, through one of two movers.
//!
//! * [`PagesMover`] (`mover = "move_pages"`): `move_pages(2)` on the pages of
//!   DAMON's hottest lower-tier regions (promotion) or longest-idle fast-tier
//!   regions (demotion) of each process, within the byte budget the policy
//!   gave the container. It keeps a record of the ranges it demoted, so a
//!   promotion of the same pages within the thrash window counts as exact
//!   ping-pong.
//! * [`DamosMover`] (`mover = "damos"`): a `paddr` kdamond with one
//!   `migrate_hot` and one `migrate_cold` scheme per container (memcg filter,
//!   an address filter for the source tier) whose quotas are the budgets;
//!   what DAMON moved is read back from each scheme's `sz_applied`, since
//!   DAMON migrations show up in no memcg counter. Where the kernel has
//!   per-memcg quota goals (6.19+: a goal's `path` file) and the fast tier
//!   is one node, each scheme also carries a goal at the container's
//!   target (`node_memcg_used_bp` for migrate_hot, `node_memcg_free_bp`
//!   for migrate_cold), so the kernel stops at the target between tierd's
//!   cycles instead of spending a budget computed up to a cycle earlier.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

use hotness::damon::{
    AccessPattern, Action, Attrs, Damon, Filter, FilterKind, GoalMetric, KdamondSpec, Ops, Quota,
    QuotaGoal, Range, Scheme, TriedRegion,
};

use crate::mover::{MoveError, MoveReport, Mover};
use hotness::monitor::{cold_ranges, hot_ranges, ProcRegions};

/// Direction of a move, for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    Promote,
    Demote,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Promote => "promote",
            Direction::Demote => "demote",
        }
    }
}

/// What one container's move did this cycle.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Moved {
    pub bytes: u64,
    /// Per-page failures by status name (`busy`, `not_present`, `fault`,
    /// `denied`, `other`, `not_attempted`), in pages.
    pub failures: BTreeMap<&'static str, u64>,
    /// Promoted bytes that this mover had demoted within the window.
    pub pingpong_bytes: u64,
}

impl Moved {
    /// Adds one `move_pages(2)` report: its moved bytes and per-page failures.
    pub fn add_report(&mut self, r: &MoveReport) {
        self.bytes += r.moved_bytes;
        for (k, v) in [
            ("busy", r.busy),
            ("not_present", r.not_present),
            ("fault", r.fault),
            ("denied", r.denied),
            ("other", r.other),
            ("not_attempted", r.not_attempted),
        ] {
            if v > 0 {
                *self.failures.entry(k).or_default() += v;
            }
        }
    }
}

/// A range of a process's address space and when it was seen (demoted,
/// for ping-pong detection; accessed, for a promotion's recently idle).
#[derive(Debug, Clone, Copy)]
struct Span {
    at: Instant,
    pid: u32,
    start: u64,
    end: u64,
}

/// Most demotion records kept per container (oldest dropped first).
const MAX_RECORDS: usize = 4096;

/// `move_pages(2)`-based mover.
pub struct PagesMover {
    mover: Mover,
    window: Duration,
    demoted: HashMap<u64, VecDeque<Span>>,
    seen: SeenAccessed,
}

/// Which idle regions (no access in DAMON's last aggregation) a promotion
/// may move after the accessed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recent {
    /// None: only what DAMON saw accessed.
    None,
    /// Those DAMON saw accessed within `wall` (tierd's own record,
    /// [`PagesMover::note_accessed`]) and idle for fewer than `age`
    /// aggregations (what cold-first demotion would not take).
    Within { age: u32, wall: Duration },
    /// Every region, whatever its heat (a guarantee's promotion).
    Any,
}

/// The regions [`PagesMover::promote`] may move, in its order, as (pid,
/// region): those seen accessed now (`nr_accesses` ≥ 1), hottest first
/// ([`hot_ranges`]), then the idle ones `recent` says were seen accessed
/// lately (most recently accessed by DAMON's age first, then by address).
/// `recent` is [`PagesMover`]'s own wall-clock record rather than DAMON's
/// age: DAMON counts age in the aggregations it has done, and resets or
/// averages it when it splits and merges regions, so the never-touched bulk
/// of a process read as a few aggregations old under emulation and was
/// promoted with the hot set (docs/NOTES.md, session 64).
pub(crate) fn promotion_order(
    procs: &[ProcRegions],
    recent: impl Fn(u32, &TriedRegion) -> bool,
) -> Vec<(u32, TriedRegion)> {
    let mut ranges = hot_ranges(procs, 1);
    let mut idle: Vec<(u32, TriedRegion)> = procs
        .iter()
        .flat_map(|p| p.regions.iter().map(move |r| (p.pid, *r)))
        .filter(|(pid, r)| r.nr_accesses == 0 && recent(*pid, r))
        .collect();
    idle.sort_by(|a, b| a.1.age.cmp(&b.1.age).then(a.1.start.cmp(&b.1.start)));
    ranges.extend(idle);
    ranges
}

/// Address ranges seen accessed, each with when it last was, per
/// container: what "recently idle" means to a promotion.
#[derive(Debug, Default)]
struct SeenAccessed {
    spans: HashMap<u64, VecDeque<Span>>,
}

impl SeenAccessed {
    /// Records the regions of `procs` with accesses (`nr_accesses` ≥ 1) as
    /// seen at `now` for `container`, and forgets what is older than
    /// `keep`, at most [`MAX_RECORDS`] spans per container (oldest dropped).
    fn note(&mut self, container: u64, procs: &[ProcRegions], now: Instant, keep: Duration) {
        let spans = self.spans.entry(container).or_default();
        spans.retain(|s| now.duration_since(s.at) < keep);
        for p in procs {
            for r in p.regions.iter().filter(|r| r.nr_accesses > 0) {
                if spans.len() == MAX_RECORDS {
                    spans.pop_front();
                }
                spans.push_back(Span {
                    at: now,
                    pid: p.pid,
                    start: r.start,
                    end: r.end,
                });
            }
        }
    }

    /// Whether `pid`'s `r` overlaps a span of `container` seen accessed
    /// within `within` of `now`.
    fn lately(
        &self,
        container: u64,
        pid: u32,
        r: &TriedRegion,
        now: Instant,
        within: Duration,
    ) -> bool {
        self.spans.get(&container).is_some_and(|v| {
            v.iter().any(|s| {
                s.pid == pid
                    && s.start < r.end
                    && r.start < s.end
                    && now.duration_since(s.at) < within
            })
        })
    }
}

impl PagesMover {
    pub fn new(batch: usize, window: Duration) -> Self {
        PagesMover {
            mover: Mover::new(batch),
            window,
            demoted: HashMap::new(),
            seen: SeenAccessed::default(),
        }
    }

    /// Records which regions of `container`'s processes DAMON saw accessed
    /// this cycle (`procs`: all its regions, on any node), for the
    /// [`Recent::Within`] of later promotions; forgets what is older than
    /// `keep`. Called once a cycle per container DAMON watches.
    pub fn note_accessed(&mut self, container: u64, procs: &[ProcRegions], keep: Duration) {
        self.seen.note(container, procs, Instant::now(), keep);
    }

    /// Moves up to `budget` bytes of `container`'s most accessed regions
    /// from `lower` nodes to `dest`: hottest first, then warm ones (any
    /// access seen), then the idle ones `recent` admits, most recently
    /// accessed first ([`promotion_order`]).
    pub fn promote(
        &mut self,
        container: u64,
        procs: &[ProcRegions],
        recent: Recent,
        lower: &[u32],
        dest: u32,
        budget: u64,
    ) -> Moved {
        // The policy granted this DRAM. A hot set DAMON has not resolved yet
        // (a newcomer's regions are still being split) is in the warm
        // regions, and a cache's long tail (every page has some access
        // probability) in the recently idle ones; regions idle for at least
        // the demotion's age stay put, so promotion and demotion never
        // disagree about a region.
        let now = Instant::now();
        let seen = &self.seen;
        let ranges = promotion_order(procs, |pid, r| match recent {
            Recent::None => false,
            Recent::Any => true,
            Recent::Within { age, wall } => {
                r.age < age && seen.lately(container, pid, r, now, wall)
            }
        });
        let window = self.window;
        let records = self.demoted.entry(container).or_default();
        records.retain(|d| now.duration_since(d.at) < window);
        // One call per process, its ranges hottest first: each call reads
        // the process's smaps once (THP detection), which under emulation
        // costs more than the moves of a small region.
        let mut per_pid: Vec<(u32, Vec<(u64, u64)>)> = Vec::new();
        for (pid, r) in ranges {
            match per_pid.iter_mut().find(|(p, _)| *p == pid) {
                Some((_, v)) => v.push((r.start, r.end)),
                None => per_pid.push((pid, vec![(r.start, r.end)])),
            }
        }
        let mut out = Moved::default();
        for (pid, rs) in per_pid {
            let left = budget.saturating_sub(out.bytes);
            if left == 0 {
                break;
            }
            match self.mover.move_ranges(pid, &rs, lower, dest, left) {
                Ok(rep) => {
                    if rep.moved_bytes > 0 {
                        let overlap: u64 = records
                            .iter()
                            .filter(|d| d.pid == pid)
                            .flat_map(|d| {
                                rs.iter()
                                    .map(move |&(s, e)| d.end.min(e).saturating_sub(d.start.max(s)))
                            })
                            .sum();
                        out.pingpong_bytes += overlap.min(rep.moved_bytes);
                    }
                    out.add_report(&rep);
                }
                Err(MoveError::NoProcess { .. }) => {}
                Err(e) => {
                    tracing::debug!(pid, error = %e, "move_pages promotion failed");
                    *out.failures.entry("syscall").or_default() += 1;
                }
            }
        }
        out
    }

    /// Moves up to `budget` bytes of `container`'s longest-idle regions (no
    /// access for at least `min_age` aggregation intervals) from `fast`
    /// nodes to `dest`, and records them.
    pub fn demote(
        &mut self,
        container: u64,
        procs: &[ProcRegions],
        min_age: u32,
        fast: &[u32],
        dest: u32,
        budget: u64,
    ) -> Moved {
        let ranges = cold_ranges(procs, min_age);
        let now = Instant::now();
        let records = self.demoted.entry(container).or_default();
        let mut out = Moved::default();
        for (pid, r) in ranges {
            let left = budget.saturating_sub(out.bytes);
            if left == 0 {
                break;
            }
            match self
                .mover
                .move_ranges(pid, &[(r.start, r.end)], fast, dest, left)
            {
                Ok(rep) => {
                    if rep.moved_bytes > 0 {
                        if records.len() == MAX_RECORDS {
                            records.pop_front();
                        }
                        records.push_back(Span {
                            at: now,
                            pid,
                            start: r.start,
                            end: r.end,
                        });
                    }
                    out.add_report(&rep);
                }
                Err(MoveError::NoProcess { .. }) => {}
                Err(e) => {
                    tracing::debug!(pid, error = %e, "move_pages demotion failed");
                    *out.failures.entry("syscall").or_default() += 1;
                }
            }
        }
        out
    }

    /// Bytes of a kernel promotion (process `pid`, `len` bytes at virtual
    /// address `addr`) that this mover demoted for `container` within the
    /// thrash window: exact ping-pong between tierd's demotion and NUMA
    /// balancing's promotion (the eBPF probe reports the latter).
    pub fn returned(&self, container: u64, pid: u32, addr: u64, len: u64) -> u64 {
        let Some(records) = self.demoted.get(&container) else {
            return 0;
        };
        let now = Instant::now();
        let end = addr.saturating_add(len);
        records
            .iter()
            .filter(|d| d.pid == pid && now.duration_since(d.at) < self.window)
            .map(|d| d.end.min(end).saturating_sub(d.start.max(addr)))
            .sum::<u64>()
            .min(len)
    }

    /// Drops the records of containers no longer managed.
    pub fn retain(&mut self, alive: impl Fn(u64) -> bool) {
        self.demoted.retain(|&c, _| alive(c));
        self.seen.spans.retain(|&c, _| alive(c));
    }
}

/// One container's DAMOS budgets for a cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct DamosOrder {
    pub container: u64,
    /// memcg path relative to the cgroup2 root, with a leading `/`.
    pub memcg_path: String,
    pub promote_bytes: u64,
    pub demote_bytes: u64,
    /// Minimum idle age for migrate_cold, in aggregation intervals.
    pub cold_min_age: u32,
    /// The container's fast-tier target, bytes (the quota goals' aim).
    pub target_fast_bytes: u64,
}

/// What one DAMOS scheme did over an interval, from its stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DamosDone {
    /// Bytes migrated (`sz_applied`).
    pub applied: u64,
    /// Bytes of regions charged to the quota (`sz_tried`).
    pub tried: u64,
}

/// DAMOS-based mover: a `paddr` kdamond owned by tierd.
pub struct DamosMover {
    idx: usize,
    attrs: Attrs,
    fast_dest: u32,
    lower_dest: u32,
    /// Physical address ranges `[start, end)` of the lower tier and of the
    /// fast tier (merged memory blocks of their nodes).
    lower_ranges: Vec<(u64, u64)>,
    fast_ranges: Vec<(u64, u64)>,
    reset_interval_ms: u64,
    /// Scheme layout of the running spec: (container, direction) per scheme.
    layout: Vec<(u64, Direction)>,
    /// Per scheme slot: the kernel's (sz_applied, sz_tried) at the last read.
    last_stats: Vec<(u64, u64)>,
    /// When each scheme slot was created in the kernel (its first quota
    /// charge window starts then); see [`DamosMover::armed`].
    slot_created: Vec<Instant>,
    /// Budget (bytes per cycle) each (container, direction) had armed in the
    /// running spec (disarmed slots and empty budgets are absent).
    armed_quota: HashMap<(u64, Direction), u64>,
    /// When the kdamond was (re)started by this mover.
    started: Option<Instant>,
    running: bool,
    /// MemTotal of the fast tier's one node, bytes: the basis of the quota
    /// goals (None with several fast nodes: a goal names one node).
    goal_node_bytes: Option<u64>,
    /// Whether the kernel takes per-memcg quota goals: unknown until the
    /// first spec with goals is written.
    goals: Option<bool>,
}

/// DAMOS quota windows per tierd cycle. DAMOS applies a quota changed by a
/// commit only from its next window on, and kswapd or a changed target can
/// make the cycle's budget too large while DAMOS is still spending it: with
/// one window per cycle the cold-hog's hog was demoted 86 MiB below its
/// target. Four windows of a quarter of the budget each move the same bytes
/// per cycle and follow a new budget within a quarter of a cycle.
const QUOTA_WINDOWS: u64 = 4;

impl DamosMover {
    /// `fast_node_bytes`: MemTotal of `fast_dest`, the basis of the quota
    /// goals (used only when the fast tier is that one node).
    ///
    /// Errors if the nodes' physical ranges cannot be read from sysfs.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        idx: usize,
        attrs: Attrs,
        sysfs_root: &Path,
        fast: &[u32],
        lower: &[u32],
        fast_dest: u32,
        lower_dest: u32,
        reset_interval: Duration,
        fast_node_bytes: Option<u64>,
    ) -> anyhow::Result<Self> {
        let ranges = |nodes: &[u32]| -> anyhow::Result<Vec<(u64, u64)>> {
            let mut v = Vec::new();
            for &n in nodes {
                v.extend(node_phys_ranges(sysfs_root, n)?);
            }
            Ok(v)
        };
        let fast_ranges = ranges(fast)?;
        let lower_ranges = ranges(lower)?;
        // One paddr context spans all of RAM, and DAMON samples one page per
        // region: start it with a quarter of the region budget so that a
        // container's hot pages are not averaged away in a region of cold
        // ones before the adaptive split gets to them.
        let attrs = Attrs {
            min_nr_regions: attrs.min_nr_regions.max(attrs.max_nr_regions / 4),
            ..attrs
        };
        Ok(DamosMover {
            idx,
            attrs,
            fast_dest,
            lower_dest,
            lower_ranges,
            fast_ranges,
            reset_interval_ms: (reset_interval.as_millis() as u64 / QUOTA_WINDOWS).max(1),
            layout: Vec::new(),
            last_stats: Vec::new(),
            slot_created: Vec::new(),
            armed_quota: HashMap::new(),
            started: None,
            running: false,
            goal_node_bytes: fast_node_bytes.filter(|&b| b > 0 && fast.len() == 1),
            goals: None,
        })
    }

    /// The quota goal holding `o`'s container at its target on the fast
    /// node (basis points of the node's MemTotal, rounded): for
    /// migrate_hot its `node_memcg_used_bp` rises to the target, for
    /// migrate_cold its `node_memcg_free_bp` (10,000 − used) rises to
    /// 10,000 − target. None without a single fast node, or where the
    /// kernel has no per-memcg goals.
    fn goal(&self, o: &DamosOrder, dir: Direction) -> Option<QuotaGoal> {
        let total = self.goal_node_bytes?;
        if self.goals == Some(false) {
            return None;
        }
        let bp =
            (u128::from(o.target_fast_bytes) * 10_000 + u128::from(total) / 2) / u128::from(total);
        let bp = bp.min(10_000) as u64;
        let (metric, target_value) = match dir {
            Direction::Promote => (GoalMetric::NodeMemcgUsedBp, bp),
            Direction::Demote => (GoalMetric::NodeMemcgFreeBp, 10_000 - bp),
        };
        Some(QuotaGoal {
            metric,
            target_value,
            nid: self.fast_dest,
            memcg_path: o.memcg_path.clone(),
        })
    }

    /// Whether a scheme slot created at `created` is past its first quota
    /// charge window. Linux 6.12 starts a scheme's first window at its first
    /// application with no effective quota (`esz` is only computed when a
    /// window *ends*), so a new scheme moves without limit for one reset
    /// interval — measured in the guest: a 32 MiB quota let 315 MB through in
    /// the first aggregation. A slot is armed once two reset intervals have
    /// passed (one window, plus the wait for its first application); until
    /// then it carries an access pattern that matches no region.
    fn armed(&self, created: Instant, now: Instant) -> bool {
        now.duration_since(created) >= Duration::from_millis(2 * self.reset_interval_ms)
    }

    fn scheme(&self, o: &DamosOrder, dir: Direction, armed: bool) -> Scheme {
        // `exclude`: the destination tier's physical ranges.
        let (action, mut pattern, nid, exclude, quota) = match dir {
            Direction::Promote => (
                Action::MigrateHot,
                // As the move_pages mover: warm regions (seen accessed at
                // all) qualify. (Every region plus a `young` page filter was
                // tried, with priority weights: slower in the cold-hog
                // scenario, 95% after 60 s instead of 45 s.)
                AccessPattern {
                    nr_accesses: Range {
                        min: 1,
                        max: u64::from(u32::MAX),
                    },
                    ..AccessPattern::default()
                },
                self.fast_dest,
                &self.fast_ranges,
                o.promote_bytes,
            ),
            Direction::Demote => (
                Action::MigrateCold,
                AccessPattern {
                    nr_accesses: Range { min: 0, max: 0 },
                    age: Range {
                        min: u64::from(o.cold_min_age),
                        max: u64::from(u32::MAX),
                    },
                    ..AccessPattern::default()
                },
                self.lower_dest,
                &self.lower_ranges,
                // DAMOS charges whole regions to the quota, and a fast-tier
                // region idle long enough for migrate_cold holds free pages
                // and other memcgs' pages too, so a quota of the budget
                // moves at most the budget, often less. (Scaling the quota
                // by the measured applied/charged yield was tried: the yield
                // swings between intervals, and the container overshot its
                // target by 90 MiB.)
                o.demote_bytes,
            ),
        };
        if !armed {
            // No region is 0 bytes long.
            pattern.sz = Range { min: 0, max: 0 };
        }
        Scheme {
            action,
            access_pattern: pattern,
            // A zero quota means "no limit" to DAMOS: a container with no
            // budget gets one byte, which moves nothing (DAMOS charges whole
            // regions against the quota and stops once it is exceeded).
            quota: Quota {
                bytes: quota.div_ceil(QUOTA_WINDOWS).max(1),
                reset_interval_ms: self.reset_interval_ms,
                // All priority weights 0: every region scores the same and
                // the quota goes in address order. 6.12 computes the
                // quota's minimum score over every region the access
                // pattern matches *before* the address filters, so with
                // frequency/age weights the destination tier's hot regions
                // set the bar and the source tier's fall below it
                // (measured: the cold-hog newcomer never reached 95%, 0.883,
                // against 45 s with zero weights).
                ..Quota::default()
            },
            target_nid: Some(nid),
            filters: damos_filters(&o.memcg_path, exclude),
            apply_interval_us: 0,
            goals: self.goal(o, dir).into_iter().collect(),
        }
    }

    /// Writes this cycle's quotas (one promote and one demote scheme per
    /// container), committing online, and returns what each container's
    /// schemes did since the previous call (the schemes' `sz_applied` and
    /// `sz_tried` deltas, bytes).
    pub fn apply(
        &mut self,
        damon: &Damon,
        orders: &[DamosOrder],
    ) -> Result<BTreeMap<(u64, Direction), DamosDone>, hotness::damon::Error> {
        let mut moved: BTreeMap<(u64, Direction), DamosDone> = BTreeMap::new();
        // Read what the previous quotas achieved before changing them.
        if self.running && damon.is_running(self.idx)? {
            let stats = damon.scheme_stats(self.idx)?;
            // A recreated scheme starts from 0 again.
            let delta = |now: u64, prev: u64| if now >= prev { now - prev } else { now };
            for (i, (key, st)) in self.layout.iter().zip(&stats).enumerate() {
                let (pa, pt) = self.last_stats.get(i).copied().unwrap_or((0, 0));
                let e = moved.entry(*key).or_default();
                e.applied += delta(st.sz_applied, pa);
                e.tried += delta(st.sz_tried, pt);
                if let Some(v) = self.last_stats.get_mut(i) {
                    *v = (st.sz_applied, st.sz_tried);
                }
            }
        } else {
            self.running = false;
        }
        let now = Instant::now();
        if !self.running {
            self.slot_created.clear();
        }
        let n = orders.len() * 2;
        self.slot_created.truncate(n);
        self.slot_created.resize(n, now);
        let mut layout = Vec::with_capacity(n);
        let mut schemes = Vec::with_capacity(n);
        self.armed_quota.clear();
        for o in orders {
            for dir in [Direction::Promote, Direction::Demote] {
                let armed = self.armed(self.slot_created[schemes.len()], now);
                let s = self.scheme(o, dir, armed);
                let budget = match dir {
                    Direction::Promote => o.promote_bytes,
                    Direction::Demote => o.demote_bytes,
                };
                if armed && budget > 0 {
                    self.armed_quota.insert((o.container, dir), budget);
                }
                schemes.push(s);
                layout.push((o.container, dir));
            }
        }
        if schemes.is_empty() {
            if self.running {
                damon.stop(self.idx)?;
                self.running = false;
            }
            self.layout.clear();
            self.last_stats.clear();
            return Ok(moved);
        }
        let mut spec = KdamondSpec {
            ops: Ops::Paddr,
            attrs: self.attrs,
            pids: Vec::new(),
            schemes,
        };
        let with_goals = spec.schemes.iter().any(|s| !s.goals.is_empty());
        match damon.write_spec(self.idx, &spec) {
            Ok(()) => {
                if with_goals && self.goals.is_none() {
                    tracing::info!(
                        "DAMOS mover: per-memcg quota goals (node_memcg_used_bp for migrate_hot, \
                         node_memcg_free_bp for migrate_cold) hold each container at its target"
                    );
                    self.goals = Some(true);
                }
            }
            // Feature detection by the files present: a kernel without a
            // goal's `path` file has no per-memcg goals.
            Err(hotness::damon::Error::Spec { path, detail })
                if with_goals && self.goals.is_none() =>
            {
                tracing::info!(
                    path = %path.display(),
                    reason = %detail,
                    "DAMOS mover: no per-memcg quota goals on this kernel; quotas alone"
                );
                self.goals = Some(false);
                for s in &mut spec.schemes {
                    s.goals.clear();
                }
                damon.write_spec(self.idx, &spec)?;
            }
            Err(e) => return Err(e),
        }
        if self.running {
            damon.commit(self.idx)?;
        } else {
            damon.start(self.idx)?;
            self.running = true;
            self.started = Some(now);
        }
        if layout != self.layout {
            // Schemes that moved position keep stats of another container:
            // re-baseline from the kernel on the next read.
            self.last_stats = vec![(0, 0); layout.len()];
            if let Ok(stats) = damon.scheme_stats(self.idx) {
                for (v, st) in self.last_stats.iter_mut().zip(stats) {
                    *v = (st.sz_applied, st.sz_tried);
                }
            }
            self.layout = layout;
        }
        Ok(moved)
    }

    /// The budget (bytes per cycle, spread over the quota windows) armed for
    /// `container`'s scheme in `dir` by the last [`DamosMover::apply`]; 0
    /// while its slot is still in its first charge window, or when it had no
    /// budget (a 1-byte quota).
    pub fn armed_quota(&self, container: u64, dir: Direction) -> u64 {
        self.armed_quota
            .get(&(container, dir))
            .copied()
            .unwrap_or(0)
    }

    /// How long the kdamond has been monitoring since this mover started it
    /// (zero when stopped): no region can be older than that.
    pub fn running_for(&self) -> Duration {
        match (self.running, self.started) {
            (true, Some(t)) => t.elapsed(),
            _ => Duration::ZERO,
        }
    }

    pub fn stop(&mut self, damon: &Damon) {
        if self.running {
            if let Err(e) = damon.stop(self.idx) {
                tracing::warn!(error = %e, "cannot stop tierd's DAMOS kdamond");
            }
            self.running = false;
        }
    }
}

/// The filters of one container's DAMOS migrate scheme: keep only the pages
/// of memcg `memcg_path` (6.12 memcg filters are exact: pages of child
/// memcgs are not matched), and drop the regions in `exclude` (the
/// destination tier's physical ranges), so that only source-tier regions
/// are charged to the quota.
///
/// The address filters *exclude* (`matching = Y`) rather than keep the source
/// tier (`matching = N`): 6.12's `paddr` operations evaluate every filter
/// per folio, address filters included, and count an address filter as "not
/// matched" there, so a `matching = N` address filter drops every page and
/// the scheme applies nothing (measured in the guest: nr_tried grows,
/// sz_applied stays 0; an exclusion filter moves the pages).
fn damos_filters(memcg_path: &str, exclude: &[(u64, u64)]) -> Vec<Filter> {
    let mut filters = vec![Filter {
        kind: FilterKind::Memcg(memcg_path.to_string()),
        matching: false,
    }];
    filters.extend(exclude.iter().map(|&(start, end)| Filter {
        kind: FilterKind::Addr { start, end },
        matching: true,
    }));
    filters
}

/// Physical address ranges `[start, end)` of node `node`'s memory blocks
/// (sysfs `devices/system/node/nodeN/memoryM` × `memory/block_size_bytes`,
/// Documentation/admin-guide/mm/memory-hotplug.rst), adjacent blocks merged.
pub fn node_phys_ranges(sysfs_root: &Path, node: u32) -> anyhow::Result<Vec<(u64, u64)>> {
    use anyhow::Context;
    let bs_path = sysfs_root.join("devices/system/memory/block_size_bytes");
    let bs_text = std::fs::read_to_string(&bs_path)
        .with_context(|| format!("cannot read {}", bs_path.display()))?;
    let block = u64::from_str_radix(bs_text.trim(), 16)
        .with_context(|| format!("{} is not hex: {bs_text:?}", bs_path.display()))?;
    let dir = sysfs_root.join(format!("devices/system/node/node{node}"));
    let mut blocks: Vec<u64> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("memory")?
                .parse::<u64>()
                .ok()
        })
        .collect();
    blocks.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for b in blocks {
        let (s, e) = (b * block, (b + 1) * block);
        match out.last_mut() {
            Some(last) if last.1 == s => last.1 = e,
            _ => out.push((s, e)),
        }
    }
    if out.is_empty() {
        anyhow::bail!(
            "{} lists no memoryN blocks: cannot tell node {node}'s physical range for DAMOS",
            dir.display()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tried(start_mib: u64, end_mib: u64, nr_accesses: u32, age: u32) -> TriedRegion {
        TriedRegion {
            start: start_mib << 20,
            end: end_mib << 20,
            nr_accesses,
            age,
        }
    }

    #[test]
    fn promotion_takes_the_accessed_then_what_was_seen_accessed_lately() {
        // One process: a hot region, a warm one, two idle ones DAMON saw
        // accessed a cycle ago, and its untouched bulk, all young by
        // DAMON's age (as when kdamond lags the clock or merges reset it).
        let procs = |regions: Vec<TriedRegion>| {
            vec![ProcRegions {
                pid: 10,
                regions,
                nodes: vec![],
            }]
        };
        let before = procs(vec![
            tried(0, 8, 20, 9),
            tried(8, 16, 2, 3),
            tried(16, 24, 3, 0),
            tried(24, 32, 1, 0),
            tried(32, 192, 0, 3),
        ]);
        let now = procs(vec![
            tried(0, 8, 20, 9),
            tried(8, 16, 2, 3),
            tried(16, 24, 0, 5),
            tried(24, 32, 0, 1),
            tried(32, 192, 0, 4),
        ]);
        let mut seen = SeenAccessed::default();
        let t0 = Instant::now();
        let keep = Duration::from_secs(5);
        seen.note(7, &before, t0, keep);
        let t1 = t0 + Duration::from_secs(2);
        seen.note(7, &now, t1, keep);
        let starts = |at: Instant, age: u32| -> Vec<u64> {
            promotion_order(&now, |pid, r| {
                r.age < age && seen.lately(7, pid, r, at, keep)
            })
            .iter()
            .map(|(_, r)| r.start >> 20)
            .collect()
        };
        // Hottest first, then the recently idle by DAMON's age; never the
        // bulk, young as DAMON's age says it is.
        assert_eq!(starts(t1, 12), vec![0, 8, 24, 16]);
        // Idle for at least the demotion's age: stays, whatever was seen.
        assert_eq!(starts(t1, 2), vec![0, 8, 24]);
        // Seen longer ago than `keep`: no longer recent.
        assert_eq!(starts(t0 + Duration::from_secs(6), 12), vec![0, 8]);
        // Another container's or process's record does not count.
        assert!(!seen.lately(8, 10, &tried(16, 24, 0, 5), t1, keep));
        assert!(!seen.lately(7, 11, &tried(16, 24, 0, 5), t1, keep));
        // Records older than `keep` are dropped at the next note.
        seen.note(7, &[], t0 + Duration::from_secs(6), keep);
        assert_eq!(seen.spans[&7].len(), 2);
        // Recent::None and Recent::Any, as the assist and a guarantee use.
        assert_eq!(promotion_order(&now, |_, _| false).len(), 2);
        assert_eq!(promotion_order(&now, |_, _| true).len(), 5);
    }

    #[test]
    fn node_ranges_from_the_fixture_tree() {
        let root =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/linux-6.12/sys");
        let r0 = node_phys_ranges(&root, 0).unwrap();
        let r1 = node_phys_ranges(&root, 1).unwrap();
        assert!(!r0.is_empty() && !r1.is_empty());
        // Disjoint, and node 1 (the CXL-like node) above node 0.
        assert!(r0
            .iter()
            .all(|a| r1.iter().all(|b| a.1 <= b.0 || b.1 <= a.0)));
        assert!(r1[0].0 >= r0[0].1);
    }

    fn fixture_damos_mover() -> DamosMover {
        let root =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/linux-6.12/sys");
        DamosMover::new(
            1,
            Attrs::default(),
            &root,
            &[0],
            &[1],
            0,
            1,
            Duration::from_secs(1),
            Some(1 << 30),
        )
        .unwrap()
    }

    /// Container 7 (`/tenants.slice/a`): 4 MiB to promote, 8 MiB to demote,
    /// a 256 MiB target.
    fn order_a() -> DamosOrder {
        DamosOrder {
            container: 7,
            memcg_path: "/tenants.slice/a".into(),
            promote_bytes: 4 << 20,
            demote_bytes: 8 << 20,
            cold_min_age: 30,
            target_fast_bytes: 256 << 20,
        }
    }

    #[test]
    fn damos_schemes_exclude_the_destination_tier_and_arm_after_two_windows() {
        let m = fixture_damos_mover();
        let o = order_a();
        let now = Instant::now();
        let up = m.scheme(&o, Direction::Promote, true);
        assert_eq!(up.action, Action::MigrateHot);
        assert_eq!(up.target_nid, Some(0));
        // A quarter of the cycle's budget per quarter-cycle window.
        assert_eq!(up.quota.bytes, 1 << 20);
        assert_eq!(up.quota.reset_interval_ms, 250);
        // Keep the memcg's pages (matching = N) ...
        assert_eq!(
            up.filters[0],
            Filter {
                kind: FilterKind::Memcg("/tenants.slice/a".into()),
                matching: false,
            }
        );
        // ... and drop the fast tier's ranges (matching = Y): 6.12's paddr
        // drops every page under a matching = N address filter.
        let fast: Vec<Filter> = m
            .fast_ranges
            .iter()
            .map(|&(start, end)| Filter {
                kind: FilterKind::Addr { start, end },
                matching: true,
            })
            .collect();
        assert!(!fast.is_empty());
        assert_eq!(up.filters[1..], fast[..]);
        assert_eq!(up.access_pattern.nr_accesses.min, 1);
        // No priority weights (see the comment in `scheme`).
        assert_eq!((up.quota.nr_accesses_permil, up.quota.age_permil), (0, 0));
        let down = m.scheme(&o, Direction::Demote, true);
        assert_eq!(down.action, Action::MigrateCold);
        assert_eq!(down.target_nid, Some(1));
        assert_eq!(down.quota.bytes, 2 << 20);
        assert_eq!(down.access_pattern.age.min, 30);
        assert!(down.filters[1..]
            .iter()
            .all(|f| f.matching && matches!(f.kind, FilterKind::Addr { .. })));
        assert_eq!(down.filters.len(), 1 + m.lower_ranges.len());
        // A slot in its first charge window matches no region.
        let fresh = m.scheme(&o, Direction::Promote, false);
        assert_eq!(fresh.access_pattern.sz, Range { min: 0, max: 0 });
        assert!(!m.armed(now, now));
        assert!(!m.armed(now - Duration::from_millis(400), now));
        assert!(m.armed(now - Duration::from_millis(500), now));
        // No budget: a 1-byte quota (0 would mean unlimited to DAMOS).
        let idle = DamosOrder {
            promote_bytes: 0,
            ..o
        };
        assert_eq!(m.scheme(&idle, Direction::Promote, true).quota.bytes, 1);
    }

    /// A container's schemes aim at its target on the fast node: 256 MiB of
    /// a 1 GiB node is 2,500 bp used (migrate_hot) and 7,500 bp free
    /// (migrate_cold); a kernel found without per-memcg goals, or several
    /// fast nodes, give none.
    #[test]
    fn damos_goals_aim_at_the_target_on_the_fast_node() {
        let mut m = fixture_damos_mover();
        let o = order_a();
        let up = m.scheme(&o, Direction::Promote, true);
        assert_eq!(
            up.goals,
            vec![QuotaGoal {
                metric: GoalMetric::NodeMemcgUsedBp,
                target_value: 2_500,
                nid: 0,
                memcg_path: "/tenants.slice/a".into(),
            }]
        );
        let down = m.scheme(&o, Direction::Demote, true);
        assert_eq!(down.goals[0].metric, GoalMetric::NodeMemcgFreeBp);
        assert_eq!(down.goals[0].target_value, 7_500);
        // A target above the node is capped at the whole node.
        let big = DamosOrder {
            target_fast_bytes: 2 << 30,
            ..o.clone()
        };
        assert_eq!(
            m.scheme(&big, Direction::Promote, true).goals[0].target_value,
            10_000
        );
        assert_eq!(
            m.scheme(&big, Direction::Demote, true).goals[0].target_value,
            0
        );
        m.goals = Some(false);
        assert!(m.scheme(&o, Direction::Promote, true).goals.is_empty());
        let root =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/linux-6.12/sys");
        let two = DamosMover::new(
            1,
            Attrs::default(),
            &root,
            &[0, 1],
            &[1],
            0,
            1,
            Duration::from_secs(1),
            Some(1 << 30),
        )
        .unwrap();
        assert!(two.scheme(&o, Direction::Promote, true).goals.is_empty());
    }

    #[test]
    fn kernel_promotions_of_pages_tierd_demoted_count_exactly() {
        let mut pm = PagesMover::new(64, Duration::from_secs(30));
        let now = Instant::now();
        pm.demoted.entry(7).or_default().extend([
            Span {
                at: now,
                pid: 100,
                start: 0x10000,
                end: 0x20000,
            },
            Span {
                at: now - Duration::from_secs(60),
                pid: 100,
                start: 0x40000,
                end: 0x50000,
            },
        ]);
        // Inside the range: all of it; straddling: the overlap; another
        // process, another container, or a record older than the window: 0.
        assert_eq!(pm.returned(7, 100, 0x11000, 0x1000), 0x1000);
        assert_eq!(pm.returned(7, 100, 0x1f000, 0x2000), 0x1000);
        assert_eq!(pm.returned(7, 101, 0x11000, 0x1000), 0);
        assert_eq!(pm.returned(8, 100, 0x11000, 0x1000), 0);
        assert_eq!(pm.returned(7, 100, 0x41000, 0x1000), 0);
        // A THP promoted whole over a demoted 64 KiB range.
        assert_eq!(pm.returned(7, 100, 0, 0x20_0000), 0x10000);
    }
}
