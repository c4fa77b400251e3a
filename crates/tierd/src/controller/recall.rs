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

/// One remembered page: process, page-aligned address, bytes (a base page
/// or a THP).
type Page = (u32, u64, u64);

#[derive(Default)]
struct Known {
    /// Oldest first.
    order: VecDeque<Page>,
    set: HashSet<(u32, u64)>,
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
    mover: Mover,
}

/// A check's result for one container: its lower-tier pages by process,
/// processes in the order of their newest page, pages newest first.
type Recallable = Vec<(u32, Vec<(u64, u64)>)>;

impl KnownHot {
    /// Remembers a kernel promotion of container `c`'s page; a page already
    /// known keeps its place, the oldest goes beyond [`KNOWN_HOT_PAGES`].
    pub(super) fn add(&mut self, c: u64, pid: u32, addr: u64, bytes: u64) {
        let k = self.by_container.entry(c).or_default();
        if !k.set.insert((pid, addr)) {
            return;
        }
        k.order.push_back((pid, addr, bytes));
        while k.order.len() > KNOWN_HOT_PAGES {
            if let Some((p, a, _)) = k.order.pop_front() {
                k.set.remove(&(p, a));
            }
        }
    }

    /// Bytes of container `c`'s known-hot pages found on the lower tier at
    /// the last check (0 if never checked).
    pub(super) fn recallable(&self, c: u64) -> u64 {
        self.by_container.get(&c).map_or(0, |k| k.recallable)
    }

    /// Pages known for container `c`.
    pub(super) fn known(&self, c: u64) -> usize {
        self.by_container.get(&c).map_or(0, |k| k.order.len())
    }

    /// Forgets containers for which `keep` is false.
    pub(super) fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        self.by_container.retain(|&c, _| keep(c));
    }

    /// Forgets container `c`'s claim (it is no longer under its target).
    fn settle(&mut self, c: u64) {
        if let Some(k) = self.by_container.get_mut(&c) {
            k.recallable = 0;
            k.checked_at = None;
        }
    }

    /// Whether container `c` needs no check: the last one found nothing to
    /// recall and its demotion count `demoted` (pages) has not moved since.
    fn unchanged(&self, c: u64, demoted: Option<u64>) -> bool {
        self.by_container
            .get(&c)
            .is_some_and(|k| k.recallable == 0 && demoted.is_some() && k.checked_at == demoted)
    }

    /// Queries the node of container `c`'s known pages (process by
    /// process in the order of their newest page, newest page first) in
    /// chunks of [`CHECK_CHUNK`], until `enough` bytes were found on a
    /// `lower` node or every page was looked at: drops pages no longer
    /// mapped and processes that are gone, records the bytes found on the
    /// lower tier as the container's recallable bytes (and `demoted`, its
    /// demotion count now), and returns those pages. The solver claims at
    /// most what the container lacks of its target and recall moves no
    /// more, so pages beyond `enough` need no query (each costs a
    /// page-table walk).
    fn check(&mut self, c: u64, lower: &[u32], demoted: Option<u64>, enough: u64) -> Recallable {
        let Some(k) = self.by_container.get_mut(&c) else {
            return Vec::new();
        };
        k.checked_at = demoted;
        let mut by_pid: Vec<(u32, Vec<(u64, u64)>)> = Vec::new();
        let mut slot: HashMap<u32, usize> = HashMap::new();
        for &(pid, addr, bytes) in k.order.iter().rev() {
            let i = *slot.entry(pid).or_insert_with(|| {
                by_pid.push((pid, Vec::new()));
                by_pid.len() - 1
            });
            by_pid[i].1.push((addr, bytes));
        }
        let mut gone: HashSet<(u32, u64)> = HashSet::new();
        let mut out = Vec::new();
        let mut found = 0u64;
        'pids: for (pid, pages) in by_pid {
            let mut low = Vec::new();
            for chunk in pages.chunks(CHECK_CHUNK) {
                if found >= enough {
                    break;
                }
                let addrs: Vec<u64> = chunk.iter().map(|p| p.0).collect();
                match query_nodes(pid, &addrs) {
                    Ok(st) => {
                        for (&(addr, bytes), s) in chunk.iter().zip(st) {
                            match s {
                                PageStatus::Node(n) if lower.contains(&n) => {
                                    low.push((addr, bytes));
                                    found += bytes;
                                }
                                PageStatus::NotPresent | PageStatus::Fault => {
                                    gone.insert((pid, addr));
                                }
                                _ => {}
                            }
                        }
                    }
                    Err(MoveError::NoProcess { .. }) => {
                        gone.extend(pages.iter().map(|&(a, _)| (pid, a)));
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(pid, error = %e, "cannot query known-hot pages");
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
            k.order.retain(|&(p, a, _)| !gone.contains(&(p, a)));
            k.set.retain(|key| !gone.contains(key));
        }
        k.recallable = found;
        out
    }
}

impl Controller {
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
        // Room as it is after the demotion above.
        if let Err(e) = self.topo.refresh_free(&self.cfg.daemon.sysfs_root) {
            tracing::debug!(error = %e, "cannot refresh free memory for recall");
            return false;
        }
        let Some(dest) = self.topo.most_free(&self.topo.fast_nodes()) else {
            return false;
        };
        let lower: Vec<u32> = self.topo.lower_nodes().iter().copied().collect();
        let mut room = self
            .topo
            .fast_free_bytes()
            .saturating_sub(self.cfg.headroom_bytes());
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
        assert_eq!(c.order.front(), Some(&(7, 10 << 12, 4096)));
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
        // Its node counted as lower: it is recallable.
        let found = k.check(1, &[node_of_page], Some(6), u64::MAX);
        assert_eq!(found, vec![(me, vec![(page, 4096)])]);
        assert_eq!(k.recallable(1), 4096);
        // Pages left to recall are looked at again whatever the count.
        assert!(!k.unchanged(1, Some(6)));
        k.settle(1);
        assert_eq!(k.recallable(1), 0);
        drop(buf);
    }

    #[test]
    fn a_check_stops_at_the_chunk_that_finds_enough() {
        // CHECK_CHUNK + 1 touched pages of this process, all on one node.
        let n = CHECK_CHUNK + 1;
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
}
