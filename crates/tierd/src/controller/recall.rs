//! Recall of known-hot pages (`daemon.recall`): pages the kernel promoted
//! once are hot by its own test (a NUMA hint fault soon after the scan,
//! `hot_threshold_ms`); when kswapd demotes them again to make room for
//! another container's promotions, the kernel brings them back only at the
//! next NUMA-balancing pass over their process, tens of seconds later
//! (docs/NOTES.md "Kernel promotion comes in bursts, per task"). Candidates
//! the kernel refused for want of room stay there until that pass too.
//! tierd remembers each container's promoted and refused pages (the eBPF
//! probe reports every promotion's and a sample of the refusals' process
//! and address), finds those on the lower tier while
//! the container is under its target, claims room for them
//! (`ContainerSnapshot::recallable_bytes`) and moves them back with
//! `move_pages(2)` into free fast-tier memory above the headroom.
//!
//! When those fall short of what the container lacks, the rest comes from
//! its pages whose hint faults the kernel declined (later than its hot
//! threshold, or over its rate limit): in use, if not hot by the kernel's
//! test. Without them a container below its share whose lower-tier pages
//! are all lukewarm (a skewed cache's tail) claims nothing, and a
//! neighbour above its share keeps the difference for good (docs/NOTES.md
//! "Skew: the work-conserving end state").

use std::collections::hash_map::Entry;
use std::collections::VecDeque;

use super::*;
use crate::mover::{query_nodes, MoveError, MoveReport, Mover, PageStatus};

/// Most known-hot pages remembered per container, newest kept (64 MiB of
/// base pages): the node query of a whole set stays a few milliseconds
/// under emulation, and a tenant's hottest tenth fits for the demo's
/// 700 MiB caches.
pub(super) const KNOWN_HOT_PAGES: usize = 16384;

/// Known pages queried per `move_pages(2)` call in a check (16 MiB of base
/// pages): the check stops after the chunk that finds enough.
const CHECK_CHUNK: usize = 1024;

/// Every known page's node is queried again once every this many checks
/// (a rotating slice each check); between those the node last seen stands.
/// The probe's records say where a page is when it becomes known (promoted:
/// fast tier; refused or declined: lower tier), and a page changes tier
/// only by a promotion (the probe reports the kernel's; recall marks its
/// own moves for a query at the next check) or a demotion, which the
/// slice finds within this many checks (8 s at the default 2 s interval),
/// sooner than the kernel's next NUMA-balancing pass over its process.
/// Re-querying every page at every check cost ~35 ms of the daemon's CPU
/// per cycle under emulation (identical-cache, docs/NOTES.md "Recall queries
/// a slice of the pages seen on DRAM"), and the pages last seen on the
/// lower tier, all queried each check, still cost 27–45 ms in cold-hog
/// (docs/NOTES.md "Recall trusts the node it last saw").
const REQUERY_SLICES: u64 = 4;

/// One remembered page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Page {
    pid: u32,
    /// Page-aligned address.
    addr: u64,
    /// A base page or a THP.
    bytes: u64,
    /// Order of arrival: picks the page's re-query slice.
    seq: u64,
    /// On a fast-tier node when last seen (a query, or the probe's record).
    fast: bool,
    /// `fast` stands until the page's re-query slice; false after recall
    /// moved it (queried at the next check).
    seen: bool,
}

#[derive(Default)]
struct Known {
    /// Oldest first.
    order: VecDeque<Page>,
    /// The pages in `order`, with their sequence number (`order` is sorted
    /// by it).
    set: foldhash::HashMap<(u32, u64), u64>,
    /// Sequence number of the next page added.
    next_seq: u64,
    /// Checks so far: the slice of pages due is `checks % REQUERY_SLICES`.
    checks: u64,
    /// Bytes found on the lower tier at the last check.
    recallable: u64,
    /// The container's demotion count (memory.stat `pgdemote_*`) at the
    /// last check: pages reach the lower tier only by demotion, so while it
    /// stays the same a check with nothing to recall need not be repeated.
    checked_at: Option<u64>,
}

/// Known-hot pages per container, and the mover that recalls them.
#[derive(Default)]
pub(super) struct KnownHot {
    by_container: foldhash::HashMap<u64, Known>,
    /// Pages whose hint faults the kernel declined (in use, not hot by its
    /// test), per container: looked at only when the known-hot pages on
    /// the lower tier fall short of what the container lacks.
    declined: foldhash::HashMap<u64, Known>,
    mover: Mover,
    /// Pages the checks queried since recall last published the count
    /// (`tierd_recall_queried_pages_total`).
    queried: u64,
}

/// Most pages with declined hint faults remembered per container, newest
/// kept (64 MiB of base pages, as [`KNOWN_HOT_PAGES`]).
pub(super) const KNOWN_DECLINED_PAGES: usize = 16384;

/// A check's result for one container: its lower-tier pages by process,
/// processes in the order of their newest page, pages newest first.
type Recallable = Vec<(u32, Vec<(u64, u64)>)>;

impl Known {
    /// Remembers a page seen now on the fast tier (`fast`) or the lower
    /// one, the newest; a page already known keeps its place (its tier is
    /// updated) and the oldest go beyond `cap`. Returns whether it was new
    /// or last seen on the other tier.
    fn add(&mut self, pid: u32, addr: u64, bytes: u64, fast: bool, cap: usize) -> bool {
        match self.set.entry((pid, addr)) {
            Entry::Occupied(e) => {
                let seq = *e.get();
                return self.mark(seq, fast);
            }
            Entry::Vacant(e) => {
                e.insert(self.next_seq);
            }
        }
        self.order.push_back(Page {
            pid,
            addr,
            bytes,
            seq: self.next_seq,
            fast,
            seen: true,
        });
        self.next_seq += 1;
        while self.order.len() > cap {
            if let Some(p) = self.order.pop_front() {
                self.set.remove(&(p.pid, p.addr));
            }
        }
        true
    }

    /// Records that a known page `(pid, addr)` was seen on the fast tier
    /// (`fast`) or the lower one; unknown pages are ignored. Returns whether
    /// it was last seen on the other tier (or not since recall moved it).
    fn seen_at(&mut self, pid: u32, addr: u64, fast: bool) -> bool {
        let Some(&seq) = self.set.get(&(pid, addr)) else {
            return false;
        };
        self.mark(seq, fast)
    }

    /// [`Self::seen_at`] for the page numbered `seq`.
    fn mark(&mut self, seq: u64, fast: bool) -> bool {
        let Ok(i) = self.order.binary_search_by_key(&seq, |p| p.seq) else {
            return false;
        };
        let p = &mut self.order[i];
        let changed = !p.seen || p.fast != fast;
        p.fast = fast;
        p.seen = true;
        changed
    }

    /// Marks process `pid`'s pages at `addrs` for a query at the next
    /// check (recall moved them, or tried).
    fn unsee(&mut self, pid: u32, addrs: &HashSet<u64>) {
        for p in self.order.iter_mut() {
            if p.pid == pid && addrs.contains(&p.addr) {
                p.seen = false;
            }
        }
    }

    /// Finds the pages on a `lower` node (process by process in the order
    /// of their newest page, newest page first) until `enough` bytes were
    /// found or every page was looked at: a page's node is queried in its
    /// re-query slice (one of [`REQUERY_SLICES`], rotating per check) or
    /// when recall moved it since, in chunks of [`CHECK_CHUNK`]; otherwise
    /// the node last seen stands. Drops pages no longer mapped and
    /// processes that are gone (found by a query). Returns the pages found
    /// on the lower tier, their bytes, and the number of pages queried.
    fn query(&mut self, lower: &[u32], enough: u64) -> (Recallable, u64, u64) {
        let slice = self.checks % REQUERY_SLICES;
        self.checks += 1;
        // Per process: indices into `self.order`, newest first.
        let mut by_pid: Vec<(u32, Vec<usize>)> = Vec::new();
        let mut slot: HashMap<u32, usize> = HashMap::new();
        for (i, p) in self.order.iter().enumerate().rev() {
            let due = !p.seen || p.seq % REQUERY_SLICES == slice;
            if !due && p.fast {
                continue;
            }
            let j = *slot.entry(p.pid).or_insert_with(|| {
                by_pid.push((p.pid, Vec::new()));
                by_pid.len() - 1
            });
            by_pid[j].1.push(i);
        }
        let mut gone: HashSet<(u32, u64)> = HashSet::new();
        let mut out = Vec::new();
        let mut found = 0u64;
        let mut queried = 0u64;
        'pids: for (pid, pages) in by_pid {
            let mut low = Vec::new();
            let before = found;
            // Pages due for a query, flushed a chunk at a time.
            let mut chunk: Vec<usize> = Vec::with_capacity(CHECK_CHUNK);
            let mut it = pages.iter().copied().peekable();
            while found < enough {
                let next = it.next();
                if let Some(i) = next {
                    let p = &self.order[i];
                    if p.seen && p.seq % REQUERY_SLICES != slice {
                        // Last seen on the lower tier, and it stands.
                        low.push((i, p.addr, p.bytes));
                        found += p.bytes;
                        continue;
                    }
                    chunk.push(i);
                    if chunk.len() < CHECK_CHUNK && it.peek().is_some() {
                        continue;
                    }
                }
                if chunk.is_empty() {
                    break;
                }
                let addrs: Vec<u64> = chunk.iter().map(|&i| self.order[i].addr).collect();
                queried += addrs.len() as u64;
                match query_nodes(pid, &addrs) {
                    Ok(st) => {
                        for (&i, s) in chunk.iter().zip(st) {
                            let page = &mut self.order[i];
                            match s {
                                PageStatus::Node(n) => {
                                    page.fast = !lower.contains(&n);
                                    page.seen = true;
                                    if !page.fast {
                                        low.push((i, page.addr, page.bytes));
                                        found += page.bytes;
                                    }
                                }
                                PageStatus::NotPresent | PageStatus::Fault => {
                                    gone.insert((pid, page.addr));
                                }
                                _ => {}
                            }
                        }
                    }
                    Err(MoveError::NoProcess { .. }) => {
                        gone.extend(pages.iter().map(|&i| (pid, self.order[i].addr)));
                        low.clear();
                        found = before;
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(pid, error = %e, "cannot query known pages");
                        break;
                    }
                }
                chunk.clear();
                if next.is_none() {
                    break;
                }
            }
            if !low.is_empty() {
                // Newest first, queried or not.
                low.sort_unstable_by_key(|p| std::cmp::Reverse(p.0));
                out.push((pid, low.into_iter().map(|(_, a, b)| (a, b)).collect()));
            }
            if found >= enough {
                break 'pids;
            }
        }
        if !gone.is_empty() {
            self.order.retain(|p| !gone.contains(&(p.pid, p.addr)));
            self.set.retain(|key, _| !gone.contains(key));
        }
        (out, found, queried)
    }
}

impl KnownHot {
    /// Remembers a kernel promotion of container `c`'s page (`fast`: it is
    /// on the fast tier now) or a candidate it refused (on the lower tier);
    /// a page already known keeps its place, the oldest goes beyond
    /// [`KNOWN_HOT_PAGES`]. A promoted page also known as declined is on
    /// the fast tier there too; a refused one makes the next check due.
    pub(super) fn add(&mut self, c: u64, pid: u32, addr: u64, bytes: u64, fast: bool) {
        let k = self.by_container.entry(c).or_default();
        if k.add(pid, addr, bytes, fast, KNOWN_HOT_PAGES) && !fast {
            // On the lower tier without a demotion: look again.
            k.checked_at = None;
        }
        if let Some(d) = self.declined.get_mut(&c) {
            d.seen_at(pid, addr, fast);
        }
    }

    /// Remembers lower-tier pages of container `c` whose hint faults the
    /// kernel declined, as (pid, page address, bytes), oldest first (beyond
    /// [`KNOWN_DECLINED_PAGES`] the oldest go). A new one, or one last seen
    /// on the fast tier, is on the lower tier now, so the next check looks
    /// again even if nothing was demoted since the last. A known-hot page
    /// stays known hot, marked as on the lower tier.
    pub(super) fn add_declined(
        &mut self,
        c: u64,
        pages: impl IntoIterator<Item = (u32, u64, u64)>,
    ) {
        // One lookup per container, not per page: a drain brings thousands.
        let hot = self.by_container.entry(c).or_default();
        let declined = self.declined.entry(c).or_default();
        let mut look_again = false;
        for (pid, addr, bytes) in pages {
            look_again |= if hot.set.contains_key(&(pid, addr)) {
                hot.seen_at(pid, addr, false)
            } else {
                declined.add(pid, addr, bytes, false, KNOWN_DECLINED_PAGES)
            };
        }
        if look_again {
            hot.checked_at = None;
        }
    }

    /// Marks the pages of process `pid` the mover looked at (`pages` in the
    /// order given, as many bytes as its report `r` accounts for) for a
    /// query at container `c`'s next check: moved to the fast tier, gone,
    /// or still below.
    fn moved(&mut self, c: u64, pid: u32, pages: &[(u64, u64)], r: &MoveReport) {
        let failed = r.busy + r.not_present + r.fault + r.denied + r.other + r.not_attempted;
        let mut looked = r.moved_bytes + r.already_bytes + failed * 4096;
        let mut addrs = HashSet::new();
        for &(addr, bytes) in pages {
            if looked == 0 {
                break;
            }
            looked = looked.saturating_sub(bytes);
            addrs.insert(addr);
        }
        for set in [self.by_container.get_mut(&c), self.declined.get_mut(&c)]
            .into_iter()
            .flatten()
        {
            set.unsee(pid, &addrs);
        }
    }

    /// Bytes of container `c`'s known pages found on the lower tier at
    /// the last check (0 if never checked).
    pub(super) fn recallable(&self, c: u64) -> u64 {
        self.by_container.get(&c).map_or(0, |k| k.recallable)
    }

    /// Bytes of container `c`'s known-hot pages last seen on the lower tier
    /// (by the probe's record or a query; not those recall moved since,
    /// which the next check queries): what the hot swap may trade in
    /// ([`policy::ContainerSnapshot::known_hot_below_bytes`]).
    pub(super) fn known_hot_below(&self, c: u64) -> u64 {
        self.by_container.get(&c).map_or(0, |k| {
            k.order
                .iter()
                .filter(|p| p.seen && !p.fast)
                .map(|p| p.bytes)
                .sum()
        })
    }

    /// Pages known for container `c`, hot and declined.
    pub(super) fn known(&self, c: u64) -> usize {
        self.by_container.get(&c).map_or(0, |k| k.order.len())
            + self.declined.get(&c).map_or(0, |k| k.order.len())
    }

    /// Forgets containers for which `keep` is false.
    pub(super) fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        self.by_container.retain(|&c, _| keep(c));
        self.declined.retain(|&c, _| keep(c));
    }

    /// Forgets container `c`'s claim (it is no longer under its target).
    fn settle(&mut self, c: u64) {
        if let Some(k) = self.by_container.get_mut(&c) {
            k.recallable = 0;
            k.checked_at = None;
        }
    }

    /// Whether container `c` needs no check: the last one found nothing to
    /// recall, no declined page came since, and its demotion count
    /// `demoted` (pages) has not moved.
    fn unchanged(&self, c: u64, demoted: Option<u64>) -> bool {
        self.by_container
            .get(&c)
            .is_some_and(|k| k.recallable == 0 && demoted.is_some() && k.checked_at == demoted)
    }

    /// Finds container `c`'s known pages on a `lower` node (see
    /// [`Known::query`]): its known-hot pages first, and only if they fall
    /// short of `enough` bytes its declined ones, for the rest. Records the
    /// bytes found as the container's recallable bytes (and `demoted`, its
    /// demotion count now), and returns those pages, hot ones first. The
    /// solver claims at most what the container lacks of its target and
    /// recall moves no more, so pages beyond `enough` need no query (each
    /// costs a page-table walk). `declined`: whether declined pages may
    /// make up the rest (not for the hot swap, which trades idle pages for
    /// hot ones only).
    fn check(
        &mut self,
        c: u64,
        lower: &[u32],
        demoted: Option<u64>,
        enough: u64,
        declined: bool,
    ) -> Recallable {
        let k = self.by_container.entry(c).or_default();
        k.checked_at = demoted;
        let (mut out, mut found, queried) = k.query(lower, enough);
        self.queried += queried;
        if found < enough && declined {
            if let Some(d) = self.declined.get_mut(&c) {
                let (more, bytes, queried) = d.query(lower, enough - found);
                self.queried += queried;
                out.extend(more);
                found += bytes;
            }
        }
        if let Some(k) = self.by_container.get_mut(&c) {
            k.recallable = found;
        }
        out
    }
}

impl Controller {
    /// Where tierd's own promotions (recall, the assist) go and how much
    /// room they have, read now, after this cycle's demotion: (the fast
    /// node with the most free memory, the lower-tier nodes, free fast-tier
    /// bytes above the headroom). `None` when free memory cannot be read
    /// (logged at debug level, naming `what`) or there is no fast node.
    pub(super) fn promotion_room(&mut self, what: &str) -> Option<(u32, Vec<u32>, u64)> {
        if let Err(e) = self.topo.refresh_free(&self.cfg.daemon.sysfs_root) {
            tracing::debug!(error = %e, "cannot refresh free memory for {what}");
            return None;
        }
        let dest = self.topo.most_free(&self.topo.fast_nodes())?;
        let lower = self.topo.lower_nodes().iter().copied().collect();
        let room = self
            .topo
            .fast_free_bytes()
            .saturating_sub(self.cfg.headroom_bytes());
        Some((dest, lower, room))
    }

    /// Recalls known-hot pages of containers below their target (see the
    /// module docs), after this cycle's demotion made room: each gets at
    /// most what it lacks of its target (÷ 2^damping level) and what free
    /// fast-tier memory exceeds the headroom by; only containers under
    /// target − band, and those trading inside their band
    /// (`ContainerPlan::band_trade`), claim room for them (the solver).
    /// A container in a hot swap gets at least the room its own eviction
    /// made this cycle, for its known-hot pages only. Returns true while
    /// recall makes progress or an under-target container has known-hot
    /// pages left on the lower tier (the cycle is not quiet).
    pub(super) fn recall(&mut self, managed: &[Managed], snapshot: &Snapshot, plan: &Plan) -> bool {
        self.recall_into(managed, snapshot, plan, false)
    }

    /// A hot swap's promotion half for `m` alone, right after its eviction
    /// (`swap_out`): up to the room that eviction made, known-hot pages
    /// only, nothing for what `m` lacks of its target (the cycle's
    /// [`Self::recall`] does that after every demotion). Why now: the room
    /// stays empty until it is refilled, and the other containers'
    /// demotions before the cycle's recall (their agings wait
    /// `limits.aging_gap` or `limits.hot_swap_idle`) made the dip seconds
    /// long under emulation (docs/NOTES.md "Session 87").
    pub(super) fn refill_swap_room(&mut self, m: &Managed, snapshot: &Snapshot, plan: &Plan) {
        // An assisted container's within-share swap is refilled by the
        // assist after every demotion, not by recall.
        let hot_swap = plan.get(m.id).is_some_and(|p| !p.assisted);
        if hot_swap && self.swap_room.get(&m.id).is_some_and(|&r| r > 0) {
            self.recall_into(std::slice::from_ref(m), snapshot, plan, true);
        }
    }

    /// [`Self::recall`]; `swap_only`: each container's swap room alone
    /// ([`Self::refill_swap_room`]).
    fn recall_into(
        &mut self,
        managed: &[Managed],
        snapshot: &Snapshot,
        plan: &Plan,
        swap_only: bool,
    ) -> bool {
        if !self.cfg.daemon.recall {
            return false;
        }
        let fast_bytes: HashMap<u64, u64> = snapshot
            .containers
            .iter()
            .map(|c| (c.id, c.fast_bytes))
            .collect();
        // (container, bytes it may recall this cycle, bytes it lacks of its
        // target, under target − band, trading inside its band, the room
        // its hot swap made)
        let mut short: Vec<(&Managed, u64, u64, bool, bool, u64)> = Vec::new();
        for m in managed {
            let (Some(p), Some(&fast)) = (plan.get(m.id), fast_bytes.get(&m.id)) else {
                continue;
            };
            // The hot swap's promotion half: what its eviction freed
            // (ContainerPlan::swap_bytes of a container not assisted).
            let swapped = if p.assisted {
                0
            } else {
                self.swap_room.get(&m.id).copied().unwrap_or(0)
            };
            let (lack, enough) = recall_claim(p, fast, swapped, swap_only);
            if lack == 0 || self.known_hot.known(m.id) == 0 {
                self.known_hot.settle(m.id);
                continue;
            }
            short.push((
                m,
                lack,
                enough,
                p.state == PlacementState::UnderTarget,
                p.band_trade,
                swapped,
            ));
        }
        if short.is_empty() {
            return false;
        }
        let Some((dest, lower, mut room)) = self.promotion_room("recall") else {
            return false;
        };
        let mut pending = false;
        let mut results = Vec::new();
        for (m, lack, enough, under, trade, swapped) in short {
            let demoted = self.counters.get(&m.id).map(|c| {
                c.demote_kswapd + c.demote_direct + c.demote_proactive + c.demote_khugepaged
            });
            // Within its band a container claims nothing unless it trades
            // (ContainerPlan::band_trade) or swaps: without free room a
            // query would find pages it can neither move nor claim room for.
            if swapped == 0
                && (self.known_hot.unchanged(m.id, demoted) || (!under && !trade && room == 0))
            {
                continue;
            }
            let found = self
                .known_hot
                .check(m.id, &lower, demoted, enough, swapped == 0);
            // A swap is a trade: its promotion half may refill the room its
            // eviction made even where free memory was below the headroom
            // before (the kernel's promotion keeps it near its watermark),
            // or the trade would leave that much DRAM empty.
            let budget = lack.min(room.max(swapped));
            let mut mv = Moved::default();
            for (pid, pages) in &found {
                let left = budget.saturating_sub(mv.bytes);
                if left == 0 {
                    break;
                }
                match self
                    .known_hot
                    .mover
                    .move_pages(*pid, pages, &lower, dest, left)
                {
                    Ok(r) => {
                        mv.add_report(&r);
                        self.known_hot.moved(m.id, *pid, pages, &r);
                    }
                    Err(e) => {
                        tracing::debug!(container = %m.path, pid, error = %e, "recall failed")
                    }
                }
            }
            room = room.saturating_sub(mv.bytes);
            pending |= mv.bytes > 0 || (under && self.known_hot.recallable(m.id) > mv.bytes);
            if mv.bytes > 0 {
                results.push((m.id, mv));
            }
        }
        for (c, mv) in results {
            self.record_move(managed, c, Direction::Promote, "recall", &mv);
            self.spend_swap_room(c, mv.bytes);
        }
        self.metrics
            .recall_queried_pages
            .inc_by(std::mem::take(&mut self.known_hot.queried));
        pending
    }
}

/// What container `p` (holding `fast` bytes on the fast tier, its hot swap
/// having freed `swapped` bytes this cycle) may recall: (bytes it may move
/// this cycle, bytes a check of its known-hot pages should find). Its gap
/// to its target counts ÷ 2^damping level, the swap's room whole (damping
/// slows what a container claims, not the refill of the room its own swap
/// made); `swap_only` (a swap's promotion half right after its eviction,
/// [`Controller::refill_swap_room`]) and a pinned container claim the room
/// alone.
fn recall_claim(p: &policy::ContainerPlan, fast: u64, swapped: u64, swap_only: bool) -> (u64, u64) {
    let gap = if p.state == PlacementState::Pinned || swap_only {
        0
    } else {
        p.target_bytes.saturating_sub(fast)
    };
    (
        (gap >> p.damping_level.min(63)).max(swapped),
        gap.max(swapped),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swaps_refill_claims_its_room_alone_and_the_cycles_recall_the_gap() {
        const MIB: u64 = 1 << 20;
        let plan = |state, damping_level| policy::ContainerPlan {
            target_bytes: 100 * MIB,
            damping_level,
            ..policy::ContainerPlan::new(1, state)
        };
        let under = plan(PlacementState::UnderTarget, 0);
        // 40 MiB short of its target, 8 MiB of room from its swap: right
        // after the eviction only the room; in the cycle's recall the gap.
        assert_eq!(
            recall_claim(&under, 60 * MIB, 8 * MIB, true),
            (8 * MIB, 8 * MIB)
        );
        assert_eq!(
            recall_claim(&under, 60 * MIB, 8 * MIB, false),
            (40 * MIB, 40 * MIB)
        );
        // Damped: the gap shrinks, the swap's room does not.
        let damped = plan(PlacementState::UnderTarget, 3);
        assert_eq!(
            recall_claim(&damped, 60 * MIB, 0, false),
            (5 * MIB, 40 * MIB)
        );
        assert_eq!(
            recall_claim(&damped, 60 * MIB, 8 * MIB, false),
            (8 * MIB, 40 * MIB)
        );
        // Pinned, or the room already refilled: nothing but the room.
        let pinned = plan(PlacementState::Pinned, 0);
        assert_eq!(recall_claim(&pinned, 60 * MIB, 0, false), (0, 0));
        assert_eq!(recall_claim(&under, 60 * MIB, 0, true), (0, 0));
    }

    #[test]
    fn known_hot_pages_keep_the_newest_and_no_duplicates() {
        let mut k = KnownHot::default();
        for i in 0..(KNOWN_HOT_PAGES as u64 + 10) {
            k.add(1, 7, i << 12, 4096, true);
        }
        // A page already known is not added twice.
        k.add(1, 7, (KNOWN_HOT_PAGES as u64 + 9) << 12, 4096, true);
        let c = &k.by_container[&1];
        assert_eq!(c.order.len(), KNOWN_HOT_PAGES);
        assert_eq!(c.set.len(), KNOWN_HOT_PAGES);
        // The ten oldest went.
        let oldest = c.order.front().unwrap();
        assert_eq!((oldest.pid, oldest.addr, oldest.seq), (7, 10 << 12, 10));
        assert!(!c.set.contains_key(&(7, 9 << 12)));
        k.add(2, 8, 0, 2 << 20, true);
        k.retain(|c| c == 2);
        assert_eq!((k.known(1), k.known(2)), (0, 1));
    }

    #[test]
    fn a_check_finds_own_pages_by_node_and_forgets_unmapped_ones() {
        // This process's own pages: one touched (on some node, none of them
        // "lower" here), one address never mapped, and a process that does
        // not exist.
        let buf = vec![1u8; 3 * 4096];
        let page = (buf.as_ptr() as u64 + 4095) & !4095;
        let me = std::process::id();
        let mut k = KnownHot::default();
        k.add(1, me, page, 4096, true);
        k.add(1, me, 4096, 4096, true);
        k.add(1, u32::MAX - 1, page, 4096, true);
        unsee_all(&mut k);
        let node_of_page = match query_nodes(me, &[page]).unwrap()[0] {
            PageStatus::Node(n) => n,
            s => panic!("own page not present: {s:?}"),
        };
        // Not on a "lower" node: nothing to recall, unmapped and gone dropped.
        assert!(k
            .check(1, &[node_of_page + 1], Some(5), u64::MAX, true)
            .is_empty());
        assert_eq!(k.recallable(1), 0);
        assert_eq!(k.known(1), 1);
        // Nothing was found and nothing demoted since: no need to look again.
        assert!(k.unchanged(1, Some(5)));
        assert!(!k.unchanged(1, Some(6)) && !k.unchanged(1, None));
        // Its node counted as lower: it is recallable once its slice of the
        // pages seen on the fast tier is due (every REQUERY_SLICES checks).
        for _ in 1..REQUERY_SLICES {
            assert!(k
                .check(1, &[node_of_page], Some(6), u64::MAX, true)
                .is_empty());
        }
        let found = k.check(1, &[node_of_page], Some(6), u64::MAX, true);
        assert_eq!(found, vec![(me, vec![(page, 4096)])]);
        assert_eq!(k.recallable(1), 4096);
        // Pages left to recall are looked at again whatever the count.
        assert!(!k.unchanged(1, Some(6)));
        k.settle(1);
        assert_eq!(k.recallable(1), 0);
        drop(buf);
    }

    /// Marks every known page of container 1 for a query at the next check
    /// (as recall's move does).
    fn unsee_all(k: &mut KnownHot) {
        for set in [k.by_container.get_mut(&1), k.declined.get_mut(&1)]
            .into_iter()
            .flatten()
        {
            set.order.iter_mut().for_each(|p| p.seen = false);
        }
    }

    /// `n` touched pages of this process known for container 1, each due
    /// for a query at the next check: the buffer (keep it alive), the first
    /// page's address, its node, the known set.
    fn own_known_pages(n: usize) -> (Vec<u8>, u64, u32, KnownHot) {
        let buf = vec![1u8; (n + 1) * 4096];
        let first = (buf.as_ptr() as u64 + 4095) & !4095;
        let me = std::process::id();
        let mut k = KnownHot::default();
        for i in 0..n as u64 {
            k.add(1, me, first + i * 4096, 4096, true);
        }
        unsee_all(&mut k);
        let node = match query_nodes(me, &[first]).unwrap()[0] {
            PageStatus::Node(n) => n,
            s => panic!("own page not present: {s:?}"),
        };
        (buf, first, node, k)
    }

    #[test]
    fn a_check_stops_at_the_chunk_that_finds_enough() {
        // CHECK_CHUNK + 1 touched pages of this process, all on one node.
        let n = CHECK_CHUNK + 1;
        let (buf, first, node, mut k) = own_known_pages(n);
        // One byte is enough: one chunk, the newest pages, is queried.
        let found = k.check(1, &[node], None, 1, true);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1.len(), CHECK_CHUNK);
        assert_eq!(found[0].1[0].0, first + (n as u64 - 1) * 4096);
        assert_eq!(k.recallable(1), CHECK_CHUNK as u64 * 4096);
        // Without a bound every page is: those found stand, the last one
        // is queried.
        let found = k.check(1, &[node], None, u64::MAX, true);
        assert_eq!(found[0].1.len(), n);
        assert_eq!(k.recallable(1), n as u64 * 4096);
        drop(buf);
    }

    #[test]
    fn declined_pages_make_up_only_what_the_known_hot_ones_leave_short() {
        // Five touched pages of this process: two known hot, then declined.
        let (buf, first, node, mut k) = own_known_pages(5);
        let me = std::process::id();
        k.by_container.get_mut(&1).unwrap().order.truncate(2);
        k.by_container.get_mut(&1).unwrap().set = [((me, first), 0), ((me, first + 4096), 1)]
            .into_iter()
            .collect();
        k.add_declined(1, [(me, first + 2 * 4096, 4096)]);
        k.add_declined(1, [(me, first + 3 * 4096, 4096)]);
        // A page already known hot is not remembered again as declined.
        k.add_declined(1, [(me, first, 4096)]);
        assert_eq!(k.known(1), 4);
        // Two pages' worth is enough: the known-hot pages alone are queried.
        let found = k.check(1, &[node], Some(1), 2 * 4096, true);
        let pages: Vec<u64> = found
            .iter()
            .flat_map(|(_, p)| p.iter().map(|x| x.0))
            .collect();
        assert_eq!(pages, vec![first + 4096, first]);
        assert_eq!(k.declined[&1].checks, 0);
        // More than that: the declined pages, newest first, make up the
        // rest (on the lower tier when declined: no query needed).
        let found = k.check(1, &[node], Some(1), 3 * 4096, true);
        let pages: Vec<u64> = found
            .iter()
            .flat_map(|(_, p)| p.iter().map(|x| x.0))
            .collect();
        assert_eq!(pages, vec![first + 4096, first, first + 3 * 4096]);
        assert_eq!(k.recallable(1), 3 * 4096);
        // All found on the fast tier (as after recall moved them) and
        // nothing demoted: no check is due until a declined page arrives.
        unsee_all(&mut k);
        assert!(k.check(1, &[node + 1], Some(1), u64::MAX, true).is_empty());
        assert!(k.unchanged(1, Some(1)));
        k.add_declined(1, [(me, first + 3 * 4096, 4096)]);
        assert!(
            !k.unchanged(1, Some(1)),
            "a declined page last seen on the fast tier is below again"
        );
        // The probe's word stands: it is recallable without a query.
        let found = k.check(1, &[node + 1], Some(1), u64::MAX, true);
        assert_eq!(found, vec![(me, vec![(first + 3 * 4096, 4096)])]);
        k.add_declined(1, [(me, first + 3 * 4096, 4096)]);
        assert_eq!(
            k.by_container[&1].checked_at,
            Some(1),
            "a page declined again while last seen below is not news"
        );
        k.add_declined(1, [(me, first + 4 * 4096, 4096)]);
        assert_eq!(k.by_container[&1].checked_at, None);
        k.retain(|c| c != 1);
        assert_eq!(k.known(1), 0);
        drop(buf);
    }

    #[test]
    fn pages_seen_on_the_fast_tier_are_queried_a_slice_per_check() {
        // 2 × REQUERY_SLICES touched pages of this process, all on one node.
        let n = 2 * REQUERY_SLICES as usize;
        let (buf, _, node, mut k) = own_known_pages(n);
        // First check: every page is new, so queried; all on the "fast" tier.
        assert!(k.check(1, &[node + 1], None, u64::MAX, true).is_empty());
        // Now their node counts as lower: each check re-queries one slice of
        // the pages (2 pages); those found on the lower tier stand.
        for check in 1..=REQUERY_SLICES {
            let found = k.check(1, &[node], None, u64::MAX, true);
            let pages: usize = found.iter().map(|(_, p)| p.len()).sum();
            assert_eq!(pages as u64, 2 * check, "check {check}");
        }
        assert_eq!(k.recallable(1), n as u64 * 4096);
        drop(buf);
    }

    #[test]
    fn the_tier_a_page_was_last_seen_on_stands_until_its_slice() {
        // 2 × REQUERY_SLICES touched pages of this process, all on one node,
        // reported refused (on the lower tier) though that node is "fast".
        let n = 2 * REQUERY_SLICES as usize;
        let (buf, first, node, mut k) = own_known_pages(n);
        let me = std::process::id();
        k.by_container.clear();
        for i in 0..n as u64 {
            k.add(1, me, first + i * 4096, 4096, false);
        }
        let lower = [node + 1];
        // The first check queries one slice (2 pages) and finds them on the
        // fast tier; the others stand as reported.
        let pages = |f: &Recallable| f.iter().map(|(_, p)| p.len()).sum::<usize>();
        assert_eq!(pages(&k.check(1, &lower, None, u64::MAX, true)), n - 2);
        // A kernel promotion puts a page on the fast tier at once.
        k.add(1, me, first + (n as u64 - 1) * 4096, 4096, true);
        assert_eq!(pages(&k.check(1, &lower, None, u64::MAX, true)), n - 5);
        // Every page is queried within REQUERY_SLICES checks.
        for _ in 2..REQUERY_SLICES {
            k.check(1, &lower, None, u64::MAX, true);
        }
        assert_eq!(pages(&k.check(1, &lower, None, u64::MAX, true)), 0);
        // Pages the mover looked at are queried at the next check: the two
        // its report accounts for (not the third), and with them this
        // check's slice (pages 1 and 5, one of them among those two).
        let r = MoveReport {
            moved_bytes: 2 * 4096,
            ..Default::default()
        };
        let looked = [(first, 4096), (first + 4096, 4096), (first + 8192, 4096)];
        k.moved(1, me, &looked, &r);
        let found = k.check(1, &[node], None, u64::MAX, true);
        let mut addrs: Vec<u64> = found[0].1.iter().map(|p| p.0).collect();
        addrs.sort();
        assert_eq!(addrs, vec![first, first + 4096, first + 5 * 4096]);
        drop(buf);
    }
}
