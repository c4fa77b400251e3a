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

use std::collections::VecDeque;

use super::*;
use crate::mover::{query_nodes, MoveError, Mover, PageStatus};

/// Most known-hot pages remembered per container, newest kept (64 MiB of
/// base pages): the node query of a whole set stays a few milliseconds
/// under emulation, and a tenant's hottest tenth fits for the demo's
/// 700 MiB caches.
pub(super) const KNOWN_HOT_PAGES: usize = 16384;

/// Known pages queried per `move_pages(2)` call in a check (16 MiB of base
/// pages): the check stops after the chunk that finds enough.
const CHECK_CHUNK: usize = 1024;

/// A page seen on the fast tier at its last query is queried again once
/// every this many checks (a rotating slice each check); pages last seen on
/// the lower tier, and new ones, at every check. A page leaves the fast tier
/// only by demotion, and known-hot pages are among the youngest in LRU
/// order, the last a demotion takes: re-querying all of them each cycle
/// cost ~35 ms of the daemon's CPU per cycle under emulation (identical-cache,
/// docs/NOTES.md "Recall queries a slice of the pages seen on DRAM") to find
/// few. A demoted one is found within this many checks (8 s at the default
/// 2 s interval), sooner than the kernel's next NUMA-balancing pass over its
/// process.
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
    /// On a fast-tier node at its last query (false before the first).
    fast: bool,
}

#[derive(Default)]
struct Known {
    /// Oldest first.
    order: VecDeque<Page>,
    set: HashSet<(u32, u64)>,
    /// Sequence number of the next page added.
    next_seq: u64,
    /// Checks so far: the slice of fast-tier pages due is `checks % REQUERY_SLICES`.
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
    by_container: HashMap<u64, Known>,
    /// Pages whose hint faults the kernel declined (in use, not hot by its
    /// test), per container: looked at only when the known-hot pages on
    /// the lower tier fall short of what the container lacks.
    declined: HashMap<u64, Known>,
    mover: Mover,
}

/// Most pages with declined hint faults remembered per container, newest
/// kept (64 MiB of base pages, as [`KNOWN_HOT_PAGES`]).
pub(super) const KNOWN_DECLINED_PAGES: usize = 16384;

/// A check's result for one container: its lower-tier pages by process,
/// processes in the order of their newest page, pages newest first.
type Recallable = Vec<(u32, Vec<(u64, u64)>)>;

impl Known {
    /// Remembers a page, the newest; a page already known keeps its place
    /// and the oldest go beyond `cap`. Returns whether it was new.
    fn add(&mut self, pid: u32, addr: u64, bytes: u64, cap: usize) -> bool {
        if !self.set.insert((pid, addr)) {
            return false;
        }
        self.order.push_back(Page {
            pid,
            addr,
            bytes,
            seq: self.next_seq,
            fast: false,
        });
        self.next_seq += 1;
        while self.order.len() > cap {
            if let Some(p) = self.order.pop_front() {
                self.set.remove(&(p.pid, p.addr));
            }
        }
        true
    }

    /// Queries the node of the pages due (process by process in the order
    /// of their newest page, newest page first) in chunks of
    /// [`CHECK_CHUNK`], until `enough` bytes were found on a `lower` node
    /// or every page due was looked at: pages last seen on the lower tier
    /// or never queried are due at every check, those last seen on the fast
    /// tier in one slice of [`REQUERY_SLICES`] per check. Drops pages no
    /// longer mapped and processes that are gone. Returns the pages found
    /// on the lower tier and their bytes.
    fn query(&mut self, lower: &[u32], enough: u64) -> (Recallable, u64) {
        let slice = self.checks % REQUERY_SLICES;
        self.checks += 1;
        // Per process: indices into `self.order` of the pages due.
        let mut by_pid: Vec<(u32, Vec<usize>)> = Vec::new();
        let mut slot: HashMap<u32, usize> = HashMap::new();
        for (i, p) in self.order.iter().enumerate().rev() {
            if p.fast && p.seq % REQUERY_SLICES != slice {
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
        'pids: for (pid, due) in by_pid {
            let mut low = Vec::new();
            for chunk in due.chunks(CHECK_CHUNK) {
                if found >= enough {
                    break;
                }
                let addrs: Vec<u64> = chunk.iter().map(|&i| self.order[i].addr).collect();
                match query_nodes(pid, &addrs) {
                    Ok(st) => {
                        for (&i, s) in chunk.iter().zip(st) {
                            let page = &mut self.order[i];
                            match s {
                                PageStatus::Node(n) => {
                                    page.fast = !lower.contains(&n);
                                    if !page.fast {
                                        low.push((page.addr, page.bytes));
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
                        gone.extend(due.iter().map(|&i| (pid, self.order[i].addr)));
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(pid, error = %e, "cannot query known pages");
                        break;
                    }
                }
            }
            if !low.is_empty() {
                out.push((pid, low));
            }
            if found >= enough {
                break 'pids;
            }
        }
        if !gone.is_empty() {
            self.order.retain(|p| !gone.contains(&(p.pid, p.addr)));
            self.set.retain(|key| !gone.contains(key));
        }
        (out, found)
    }
}

impl KnownHot {
    /// Remembers a kernel promotion (or refused candidate) of container
    /// `c`'s page; a page already known keeps its place, the oldest goes
    /// beyond [`KNOWN_HOT_PAGES`].
    pub(super) fn add(&mut self, c: u64, pid: u32, addr: u64, bytes: u64) {
        self.by_container
            .entry(c)
            .or_default()
            .add(pid, addr, bytes, KNOWN_HOT_PAGES);
    }

    /// Remembers a lower-tier page of container `c` whose hint fault the
    /// kernel declined (beyond [`KNOWN_DECLINED_PAGES`] the oldest go). A
    /// new one is on the lower tier now, so the next check looks again
    /// even if nothing was demoted since the last.
    pub(super) fn add_declined(&mut self, c: u64, pid: u32, addr: u64, bytes: u64) {
        if self
            .by_container
            .get(&c)
            .is_some_and(|k| k.set.contains(&(pid, addr)))
        {
            return;
        }
        if self
            .declined
            .entry(c)
            .or_default()
            .add(pid, addr, bytes, KNOWN_DECLINED_PAGES)
        {
            self.by_container.entry(c).or_default().checked_at = None;
        }
    }

    /// Bytes of container `c`'s known pages found on the lower tier at
    /// the last check (0 if never checked).
    pub(super) fn recallable(&self, c: u64) -> u64 {
        self.by_container.get(&c).map_or(0, |k| k.recallable)
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
    /// costs a page-table walk).
    fn check(&mut self, c: u64, lower: &[u32], demoted: Option<u64>, enough: u64) -> Recallable {
        let k = self.by_container.entry(c).or_default();
        k.checked_at = demoted;
        let (mut out, mut found) = k.query(lower, enough);
        if found < enough {
            if let Some(d) = self.declined.get_mut(&c) {
                let (more, bytes) = d.query(lower, enough - found);
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
    /// target − band claim room for them (the solver). Returns true while
    /// recall makes progress or an under-target container has known-hot
    /// pages left on the lower tier (the cycle is not quiet).
    pub(super) fn recall(&mut self, managed: &[Managed], snapshot: &Snapshot, plan: &Plan) -> bool {
        if !self.cfg.daemon.recall {
            return false;
        }
        let fast_bytes: HashMap<u64, u64> = snapshot
            .containers
            .iter()
            .map(|c| (c.id, c.fast_bytes))
            .collect();
        // (container, bytes it may recall this cycle, bytes it lacks of its
        // target, under target − band)
        let mut short: Vec<(&Managed, u64, u64, bool)> = Vec::new();
        for m in managed {
            let (Some(p), Some(&fast)) = (plan.get(m.id), fast_bytes.get(&m.id)) else {
                continue;
            };
            let enough = if p.state == PlacementState::Pinned {
                0
            } else {
                p.target_bytes.saturating_sub(fast)
            };
            let lack = enough >> p.damping_level.min(63);
            if lack == 0 || self.known_hot.known(m.id) == 0 {
                self.known_hot.settle(m.id);
                continue;
            }
            short.push((m, lack, enough, p.state == PlacementState::UnderTarget));
        }
        if short.is_empty() {
            return false;
        }
        let Some((dest, lower, mut room)) = self.promotion_room("recall") else {
            return false;
        };
        let mut pending = false;
        let mut results = Vec::new();
        for (m, lack, enough, under) in short {
            let demoted = self.counters.get(&m.id).map(|c| {
                c.demote_kswapd + c.demote_direct + c.demote_proactive + c.demote_khugepaged
            });
            // Within its band a container claims nothing: without free room
            // a query would find pages it can neither move nor claim room for.
            if self.known_hot.unchanged(m.id, demoted) || (!under && room == 0) {
                continue;
            }
            let found = self.known_hot.check(m.id, &lower, demoted, enough);
            let budget = lack.min(room);
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
                    Ok(r) => mv.add_report(&r),
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
        }
        pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_hot_pages_keep_the_newest_and_no_duplicates() {
        let mut k = KnownHot::default();
        for i in 0..(KNOWN_HOT_PAGES as u64 + 10) {
            k.add(1, 7, i << 12, 4096);
        }
        // A page already known is not added twice.
        k.add(1, 7, (KNOWN_HOT_PAGES as u64 + 9) << 12, 4096);
        let c = &k.by_container[&1];
        assert_eq!(c.order.len(), KNOWN_HOT_PAGES);
        assert_eq!(c.set.len(), KNOWN_HOT_PAGES);
        // The ten oldest went.
        let oldest = c.order.front().unwrap();
        assert_eq!((oldest.pid, oldest.addr, oldest.seq), (7, 10 << 12, 10));
        assert!(!c.set.contains(&(7, 9 << 12)));
        k.add(2, 8, 0, 2 << 20);
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
        k.add(1, me, page, 4096);
        k.add(1, me, 4096, 4096);
        k.add(1, u32::MAX - 1, page, 4096);
        let node_of_page = match query_nodes(me, &[page]).unwrap()[0] {
            PageStatus::Node(n) => n,
            s => panic!("own page not present: {s:?}"),
        };
        // Not on a "lower" node: nothing to recall, unmapped and gone dropped.
        assert!(k
            .check(1, &[node_of_page + 1], Some(5), u64::MAX)
            .is_empty());
        assert_eq!(k.recallable(1), 0);
        assert_eq!(k.known(1), 1);
        // Nothing was found and nothing demoted since: no need to look again.
        assert!(k.unchanged(1, Some(5)));
        assert!(!k.unchanged(1, Some(6)) && !k.unchanged(1, None));
        // Its node counted as lower: it is recallable once its slice of the
        // pages seen on the fast tier is due (every REQUERY_SLICES checks).
        for _ in 1..REQUERY_SLICES {
            assert!(k.check(1, &[node_of_page], Some(6), u64::MAX).is_empty());
        }
        let found = k.check(1, &[node_of_page], Some(6), u64::MAX);
        assert_eq!(found, vec![(me, vec![(page, 4096)])]);
        assert_eq!(k.recallable(1), 4096);
        // Pages left to recall are looked at again whatever the count.
        assert!(!k.unchanged(1, Some(6)));
        k.settle(1);
        assert_eq!(k.recallable(1), 0);
        drop(buf);
    }

    /// `n` touched pages of this process known for container 1: the buffer
    /// (keep it alive), the first page's address, its node, the known set.
    fn own_known_pages(n: usize) -> (Vec<u8>, u64, u32, KnownHot) {
        let buf = vec![1u8; (n + 1) * 4096];
        let first = (buf.as_ptr() as u64 + 4095) & !4095;
        let me = std::process::id();
        let mut k = KnownHot::default();
        for i in 0..n as u64 {
            k.add(1, me, first + i * 4096, 4096);
        }
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
        let found = k.check(1, &[node], None, 1);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1.len(), CHECK_CHUNK);
        assert_eq!(found[0].1[0].0, first + (n as u64 - 1) * 4096);
        assert_eq!(k.recallable(1), CHECK_CHUNK as u64 * 4096);
        // Without a bound every page is.
        let found = k.check(1, &[node], None, u64::MAX);
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
        k.by_container.get_mut(&1).unwrap().set = [(me, first), (me, first + 4096)].into();
        k.add_declined(1, me, first + 2 * 4096, 4096);
        k.add_declined(1, me, first + 3 * 4096, 4096);
        // A page already known hot is not remembered again as declined.
        k.add_declined(1, me, first, 4096);
        assert_eq!(k.known(1), 4);
        // Two pages' worth is enough: the known-hot pages alone are queried.
        let found = k.check(1, &[node], Some(1), 2 * 4096);
        let pages: Vec<u64> = found
            .iter()
            .flat_map(|(_, p)| p.iter().map(|x| x.0))
            .collect();
        assert_eq!(pages, vec![first + 4096, first]);
        assert_eq!(k.declined[&1].checks, 0);
        // More than that: the declined pages, newest first, make up the
        // rest (a whole chunk of them is queried).
        let found = k.check(1, &[node], Some(1), 3 * 4096);
        let pages: Vec<u64> = found
            .iter()
            .flat_map(|(_, p)| p.iter().map(|x| x.0))
            .collect();
        assert_eq!(
            pages,
            vec![first + 4096, first, first + 3 * 4096, first + 2 * 4096]
        );
        assert_eq!(k.recallable(1), 4 * 4096);
        // Nothing on the lower tier and nothing demoted: no check is due
        // until a new declined page arrives.
        assert!(k.check(1, &[node + 1], Some(1), u64::MAX).is_empty());
        assert!(k.unchanged(1, Some(1)));
        k.add_declined(1, me, first + 3 * 4096, 4096);
        assert!(
            k.unchanged(1, Some(1)),
            "a page already declined is not new"
        );
        k.add_declined(1, me, first + 4 * 4096, 4096);
        assert!(!k.unchanged(1, Some(1)));
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
        assert!(k.check(1, &[node + 1], None, u64::MAX).is_empty());
        // Now their node counts as lower: each check re-queries one slice of
        // the pages seen on the fast tier (2 pages) and every page already
        // found on the lower tier.
        for check in 1..=REQUERY_SLICES {
            let found = k.check(1, &[node], None, u64::MAX);
            let pages: usize = found.iter().map(|(_, p)| p.len()).sum();
            assert_eq!(pages as u64, 2 * check, "check {check}");
        }
        assert_eq!(k.recallable(1), n as u64 * 4096);
        drop(buf);
    }
}
