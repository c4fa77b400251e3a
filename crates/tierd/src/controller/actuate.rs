//! Writing the plan: protection (`memory.low`, `memory.min` and their
//! ancestors), opt-out pinning (`cpuset.mems`), then demotion through
//! `memory.reclaim` for what tierd's own movers did not move. Each knob's
//! record of originals and its undo live in [`crate::actuators`].

use super::*;
use crate::controller::offload::{Evicted, Untouched};
use cgroupctl::lru_gen::MemcgGens;

impl Controller {
    /// Writes memory.low and cpuset.mems where they changed, demotes, then
    /// recalls known-hot pages into the room made (`recall.rs`; returns
    /// true while some are left to recall). Protection goes first so that
    /// kswapd skips at-target containers while the reclaim below frees
    /// fast-tier memory.
    pub(super) fn actuate(
        &mut self,
        managed: &[Managed],
        snapshot: &Snapshot,
        plan: &Plan,
        fast: &NodeSet,
        gens: Option<Vec<MemcgGens>>,
        phase: &mut super::PhaseClock,
    ) -> bool {
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
                // where no container is ever over its target beside a
                // protected one, and none has a guarantee, never sees tierd
                // touch it.
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
        // lru_gen lists every memcg: read once per cycle, on first use (or
        // already, for the offloaders' warm sets: `gens`).
        let mut gens = gens;
        let mut agings = Agings::default();
        // What this cycle may demote in about one interval at the pace the
        // lower tier has taken pages so far (the rest waits for the
        // next cycle: the plan asks again).
        let mut allowance = Allowance::new(&self.demotion_pace, self.cfg.daemon.interval);
        self.swap_room.clear();
        let mut demoting = HashSet::new();
        for m in managed {
            let Some(p) = plan.get(m.id) else { continue };
            let mut want = p
                .demote_bytes
                .saturating_sub(moved_down.get(&m.id).copied().unwrap_or(0));
            // What this cycle's writes asked of reclaim, and whether it
            // took less (for `unevictable.rs`).
            let (mut asked, mut short) = (0, false);
            for pass in 0..2 {
                if want.min(allowance.left()) < MIN_RECLAIM_BYTES {
                    break;
                }
                let demote = allowance.take(want);
                want -= demote;
                // A within-share swap's half goes first, cold pages only;
                // where lru_gen is not used it stays in the LRU-order
                // demotion. The hot swap trades idle pages only: without
                // lru_gen, none.
                let swap = if pass == 0 {
                    p.swap_bytes.min(demote)
                } else {
                    0
                };
                let (demote, swap_left) = if swap == 0 {
                    (demote, 0)
                } else {
                    let untouched = self.swap_untouched(p.assisted);
                    match self.swap_out(m, swap, untouched, &mut gens, &mut agings) {
                        Some(()) => {
                            self.refill_swap_room(m, snapshot, plan);
                            (demote - swap, 0)
                        }
                        None if !p.assisted => (demote - swap, 0),
                        None => (demote, swap),
                    }
                };
                if demote < MIN_RECLAIM_BYTES {
                    break;
                }
                let started = Instant::now();
                let gap = Duration::from_millis(p.aging_gap_ms);
                let result = self.demote(m, demote, &mut gens, &mut agings, gap);
                // Only a write that went through measures the device.
                if result.is_ok() {
                    self.demotion_pace.observe(demote, started.elapsed());
                }
                asked += demote;
                short |= matches!(result, Ok(ReclaimOutcome::Short));
                self.record_demotion(m, demote, swap_left, result);
                // The write measured the tier: this container may take
                // more of the cycle's room now, not a cycle later.
                if !allowance.remeasure(&self.demotion_pace) {
                    break;
                }
            }
            if p.state == PlacementState::OverTarget && asked > 0 {
                demoting.insert(m.id);
                self.demote_unevictable(m, snapshot, short, asked);
            }
        }
        self.unevictable.retain(|c| demoting.contains(&c));
        self.offload(managed, &mut gens, &mut agings);
        // The kernel's demotion work runs in the writer's context: these
        // phases are where tierd's CPU goes when it demotes.
        self.metrics.lru_gen_agings.inc_by(agings.count);
        self.lap_split(phase, "reclaim", "age", agings.time);
        // Into the room the demotion made: the guarantees first (a hard
        // promise), then tierd's own promotion (`promotion = "tierd"`), the
        // pages the kernel wanted, and the assist.
        self.promote_guarantees(managed, plan);
        self.promote_regulated(managed, plan);
        let recalling = self.recall(managed, snapshot, plan);
        let assisting = self.assist(managed, plan);
        self.lap(phase, "recall");
        recalling || assisting
    }
}

/// One memcg of a container on one node, with its pages there: what an
/// eviction through lru_gen splits its pages over.
pub(super) type EvictionPart<'g> = (&'g MemcgGens, u32, u64);

/// The MGLRU agings one cycle's demotions ran (count, wall time).
#[derive(Debug, Default)]
pub(in crate::controller) struct Agings {
    pub count: u64,
    pub time: Duration,
}

impl Controller {
    /// Accounts one demotion write of `demote` bytes to `m` (its swap half
    /// `swap_left` still to do, not counted as tierd's own demotion): the
    /// thrash input, the metrics and the log line.
    fn record_demotion(
        &mut self,
        m: &Managed,
        demote: u64,
        swap_left: u64,
        result: cgroupctl::Result<ReclaimOutcome>,
    ) {
        if let Some(bw) = self.demotion_pace.bytes_per_s() {
            self.metrics.demotion_bytes_per_second.set(bw);
        }
        let labels = ContainerLabels {
            cgroup: m.path.clone(),
        };
        match result {
            Ok(outcome) => {
                // A within-share swap evicts the oldest generation for
                // other pages of the container: not ping-pong input
                // (min(down, up) would read its two halves as one).
                self.own_moved.entry(m.id).or_default().demoted_bytes +=
                    demote.saturating_sub(swap_left);
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
                tracing::debug!(container = %m.path, bytes = demote, ?outcome, "demoted");
            }
            Err(cgroupctl::Error::Vanished(p)) => {
                tracing::debug!(path = %p.display(), "cgroup vanished before demotion; skipped");
            }
            Err(e) => {
                tracing::warn!(container = %m.path, error = %e, "demotion failed");
                self.count_error(&m.path, "reclaim", &e);
            }
        }
    }

    /// Demotes `bytes` of container `m`'s fast-tier memory. Through MGLRU's
    /// eviction command where tierd uses it (`gens`: this cycle's read of
    /// lru_gen, made on first use): split over the container's
    /// memcgs and fast nodes in proportion to their pages there, each part
    /// oldest generation first and stopping at the pages asked; `Short` when
    /// fewer were evictable even after aging. Else one `memory.reclaim`
    /// write (every node, LRU order; under MGLRU it can take several times
    /// the bytes asked: docs/NOTES.md "memory.reclaim overshoots under
    /// MGLRU"). The agings run are added to `agings`; two agings of one
    /// memcg are at least `gap` apart (`ContainerPlan::aging_gap_ms`).
    pub(super) fn demote(
        &mut self,
        m: &Managed,
        bytes: u64,
        gens: &mut Option<Vec<MemcgGens>>,
        agings: &mut Agings,
        gap: Duration,
    ) -> cgroupctl::Result<ReclaimOutcome> {
        let mut bytes = bytes;
        if self.cfg.policies[m.policy_index].file_first && !self.file_first_unsupported {
            let file = match self.demote_file(m, bytes) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    // Said once: the kernel will not learn the argument.
                    tracing::warn!(container = %m.path, error = %e,
                        "file_first: this kernel's memory.reclaim does not take swappiness= \
                         (Linux 6.12+ does); file pages are demoted in LRU order with the rest");
                    self.file_first_unsupported = true;
                    0
                }
                r => r?,
            };
            if file >= bytes {
                return Ok(ReclaimOutcome::Full);
            }
            tracing::debug!(container = %m.path, file, rest = bytes - file,
                "file_first: too few file pages on the fast tier; the rest from anonymous memory");
            bytes -= file;
        }
        let fast = self.topo.fast_nodes();
        match self.demote_lru_gen(m, bytes, gens, agings, self.swappiness, &fast, gap) {
            Some(Err(e))
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EROFS | libc::EACCES | libc::EPERM)
                ) =>
            {
                // A read-only or forbidden debugfs (a sandbox, lockdown)
                // stays so: say it once and keep to memory.reclaim.
                tracing::warn!(error = %e,
                    "MGLRU's eviction command cannot be written; demotion through memory.reclaim from now on");
                self.lru_gen = None;
                self.cg.reclaim(&m.path, bytes)
            }
            Some(r) => r,
            None => self.cg.reclaim(&m.path, bytes),
        }
    }

    /// Which pages a swap's demotion half may take: the within-share swap
    /// (an `assisted` container's) those in MGLRU generations
    /// [`policy::SWAP_MIN_AGE_MS`] old; the hot swap those untouched for
    /// `limits.hot_swap_idle` (cut to half of `daemon.interval`), or with
    /// it 0 those in generations [`policy::HOT_SWAP_MIN_AGE_MS`] old.
    fn swap_untouched(&self, assisted: bool) -> Untouched {
        let idle = self
            .cfg
            .limits
            .hot_swap_idle
            .min(self.cfg.daemon.interval / 2);
        if assisted {
            Untouched::Since(policy::SWAP_MIN_AGE_MS)
        } else if idle.is_zero() {
            Untouched::Since(policy::HOT_SWAP_MIN_AGE_MS)
        } else {
            Untouched::For(idle)
        }
    }

    /// The demotion half of a within-share or hot swap
    /// (`ContainerPlan::swap_bytes`, bytes): the container's fast-tier pages
    /// `untouched` ([`Self::swap_untouched`]), up to `bytes`
    /// ([`Self::evict_cold`] on the fast nodes), recorded as the container's
    /// `swap_room`. What was not that cold stays: the promotion half (the
    /// assist's, or recall's) then finds only the room these pages left,
    /// so the swap neither trades warm pages nor leaves DRAM empty. `None`
    /// when tierd does not use lru_gen; errors are logged and counted, and
    /// the swap skips this cycle.
    fn swap_out(
        &mut self,
        m: &Managed,
        bytes: u64,
        untouched: Untouched,
        gens: &mut Option<Vec<MemcgGens>>,
        agings: &mut Agings,
    ) -> Option<()> {
        if bytes == 0 {
            return Some(());
        }
        let fast = self.topo.fast_nodes();
        match self.evict_cold(m, bytes, untouched, &fast, gens, agings)? {
            Ok(Evicted { taken, idle }) => {
                self.swap_room.insert(m.id, taken);
                self.swap_idle.insert(m.id, idle);
                tracing::debug!(container = %m.path, asked = bytes, cold = taken, idle, ?untouched,
                    "swap: demoted its untouched pages");
                let c = ContainerLabels {
                    cgroup: m.path.clone(),
                };
                for (family, v) in [
                    (&self.metrics.container_demote_requested_bytes, taken),
                    (&self.metrics.container_swap_asked_bytes, bytes),
                    (&self.metrics.container_swap_idle_bytes, taken),
                ] {
                    family.get_or_create(&c).inc_by(v);
                }
            }
            Err(cgroupctl::Error::Vanished(_)) => {}
            Err(e) => {
                tracing::warn!(container = %m.path, error = %e, "swap: eviction failed");
                self.count_error(&m.path, "reclaim", &e);
            }
        }
        Some(())
    }

    /// `file_first`'s pass of [`Self::demote`]: up to `bytes` of the
    /// container's file pages, through `memory.reclaim` with `swappiness=0`
    /// (cgroup reclaim with swappiness 0 scans the file LRU only, ageing
    /// it as needed: mm/vmscan.c `get_scan_count`, and under MGLRU
    /// `isolate_folios`). Not MGLRU's eviction command: that evicts only
    /// generations older than the two youngest, and a page cache read
    /// again and again sits in the young ones; file_first places page cache
    /// on the lower tier however hot. Returns the fast-tier file bytes that
    /// left (memory.numa_stat `file` before and after).
    ///
    /// Errors: the write's; a kernel that does not take `swappiness=` in
    /// `memory.reclaim` gives EINVAL (the caller says so once).
    fn demote_file(&mut self, m: &Managed, bytes: u64) -> cgroupctl::Result<u64> {
        let fast = self.topo.fast_nodes();
        let file_fast = |c: &Controller| -> cgroupctl::Result<u64> {
            let st = c.cg.numa_stat(&m.path)?;
            Ok(fast.iter().map(|&n| st.file_bytes(n)).sum())
        };
        let before = file_fast(self)?;
        if before == 0 {
            return Ok(0);
        }
        self.cg.reclaim_file(&m.path, bytes.min(before))?;
        Ok(before.saturating_sub(file_fast(self)?))
    }

    /// The parts an eviction through lru_gen splits its pages over: each of
    /// the container's memcgs on each of `nodes` where it has pages, with
    /// those pages, from this cycle's read of lru_gen (`gens`, made on
    /// first use; evicting one container's memcgs leaves the others'
    /// generations as read). `None` when tierd does not use lru_gen or it
    /// lists none of the container's memcgs (lru_gen names memcgs relative
    /// to the reader's cgroup namespace): the caller writes memory.reclaim.
    pub(super) fn lru_gen_parts<'g>(
        &self,
        m: &Managed,
        gens: &'g mut Option<Vec<MemcgGens>>,
        nodes: &NodeSet,
    ) -> Option<cgroupctl::Result<Vec<EvictionPart<'g>>>> {
        let lg = self.lru_gen.as_ref()?;
        let all: &'g Vec<MemcgGens> = match gens {
            Some(a) => a,
            None => match lg.read() {
                Ok(a) => gens.insert(a),
                Err(e) => return Some(Err(e)),
            },
        };
        let memcgs: Vec<&MemcgGens> = m
            .members
            .iter()
            .filter_map(|p| {
                let want = format!("/{}", p.trim_matches('/'));
                all.iter().find(|g| g.path == want)
            })
            .collect();
        if memcgs.is_empty() {
            tracing::debug!(container = %m.path, file = %lg.path().display(),
                "not listed in lru_gen; memory.reclaim instead");
            return None;
        }
        Some(Ok(memcgs
            .into_iter()
            .flat_map(|g| nodes.iter().map(move |&n| (g, n, g.resident_pages(n))))
            .filter(|&(_, _, pages)| pages > 0)
            .collect()))
    }

    /// The lru_gen half of [`Self::demote`]; `None` when tierd does not use
    /// lru_gen or lru_gen does not list the container. `swappiness` 0
    /// evicts file pages only; `nodes` are the nodes evicted from, in
    /// proportion to the container's pages on each (the fast nodes for a
    /// demotion); `gap` spaces two agings of one memcg on one node.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn demote_lru_gen(
        &self,
        m: &Managed,
        bytes: u64,
        gens: &mut Option<Vec<MemcgGens>>,
        agings: &mut Agings,
        swappiness: u32,
        nodes: &NodeSet,
        gap: Duration,
    ) -> Option<cgroupctl::Result<ReclaimOutcome>> {
        let lg = self.lru_gen.as_ref()?;
        let parts = match self.lru_gen_parts(m, gens, nodes)? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let total: u64 = parts.iter().map(|p| p.2).sum();
        if total == 0 {
            return Some(Ok(ReclaimOutcome::Short));
        }
        let want = bytes.div_ceil(PAGE_BYTES);
        let mut short = false;
        for (g, node, pages) in parts {
            let share = (u128::from(want) * u128::from(pages)).div_ceil(u128::from(total)) as u64;
            match lg.demote(g, node, share, swappiness, gap) {
                Ok(ev) => {
                    short |= ev.evictable_pages < ev.asked_pages;
                    agings.count += u64::from(ev.agings);
                    agings.time += ev.aging;
                }
                Err(cgroupctl::Error::Vanished(_)) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(if short {
            ReclaimOutcome::Short
        } else {
            ReclaimOutcome::Full
        }))
    }

    pub(super) fn write_protection(&mut self, knob: Protection, path: &str, id: u64, value: Limit) {
        if let Err(e) = self.protection.write(&self.cg, knob, path, id, value) {
            tracing::warn!(container = %path, error = %e, "cannot write {}", knob.file());
            self.count_error(path, knob.metric(), &e);
        }
    }
}

impl Controller {
    /// opt_out: confine the container's memory to the fast tier. In cgroup v2
    /// a cpuset.mems change migrates existing pages too (asynchronously).
    pub(super) fn pin(&mut self, m: &Managed, fast: &NodeSet) {
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
}

impl Controller {
    /// Forgets writes to cgroups that are gone (or recreated under a new id):
    /// there is nothing to restore in them.
    pub(super) fn forget_vanished(&mut self, managed: &[Managed]) {
        let cg = &self.cg;
        let alive = |path: &str, id: u64| {
            managed.iter().any(|m| m.path == path && m.id == id)
                || cg.cgroup_id(path).map(|i| i == id).unwrap_or(false)
        };
        self.protection.forget_vanished(cg, alive);
        self.pinning.forget_vanished(cg, alive);
        self.subtree.forget_vanished(cg, alive);
    }
}
