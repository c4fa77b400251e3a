//! Demotion of pages the kernel's reclaim will not take.
//!
//! Both of tierd's demotion writes go through reclaim: MGLRU's eviction
//! command evicts only generations older than the two youngest, and
//! `memory.reclaim` activates every page whose PTE was referenced since
//! the last look (mm/vmscan.c `folio_check_references`). A container that
//! touches all of its fast-tier pages between two looks (a hot set that
//! the kernel's promotion put on DRAM past a `local_high` cap, say) has
//! nothing reclaim will take: both writes come back short and its fast-tier
//! bytes do not move, cycle after cycle, with the cap or share not held
//! (docs/NOTES.md "Session 81: a cap reclaim cannot hold"). Once that has
//! lasted a grace period, the demotion still owed is moved with
//! `move_pages(2)` from the container's processes' mappings, largest
//! first: the pages are all hot by the kernel's own test, so none is a
//! better pick than another.

use super::*;
use crate::mover::{MoveError, Mover};

/// Which over-target containers' demotion reclaim has stopped taking.
#[derive(Default)]
pub(super) struct Unevictable {
    /// Since when each one's writes have been short with nothing taken.
    stall: ColdStall,
    /// Each one's fast-tier bytes at its last demotion write.
    last_fast: HashMap<u64, u64>,
    /// Containers whose first move was logged (at info; later ones at
    /// debug, until the container stops demoting).
    said: HashSet<u64>,
    mover: Mover,
}

impl Unevictable {
    /// One cycle's demotion writes of container `c`: `short` when reclaim
    /// took less than asked, `fast_bytes` the container's fast-tier bytes
    /// (bytes) before them. Returns true once its writes have been short
    /// for at least `grace` with its fast-tier bytes falling less than
    /// [`MIN_RECLAIM_BYTES`] a cycle; the clock then restarts, so reclaim
    /// has its try again before the next move. A write that is not short,
    /// or fast-tier bytes that fell, restart it too.
    pub(super) fn stuck(
        &mut self,
        c: u64,
        short: bool,
        fast_bytes: u64,
        now: Instant,
        grace: Duration,
    ) -> bool {
        let fell = self
            .last_fast
            .insert(c, fast_bytes)
            .is_some_and(|prev| fast_bytes + MIN_RECLAIM_BYTES <= prev);
        if !self.stall.stalled(c, !short || fell, now, grace) {
            return false;
        }
        self.stall.restart(c, now);
        true
    }

    /// Forgets containers that no longer demote.
    pub(super) fn retain(&mut self, demoting: impl Fn(u64) -> bool) {
        self.stall.retain(&demoting);
        self.last_fast.retain(|&c, _| demoting(c));
        self.said.retain(|&c| demoting(c));
    }

    /// Moves up to `budget` bytes of the pages on `fast` nodes of the
    /// processes in `memcgs` (cgroup paths relative to the hierarchy root)
    /// to node `dest`, from their mappings largest first (the vDSO and
    /// kernel pages left out). Processes that vanish are skipped; any other
    /// failure of one process is logged and counted in the result's
    /// `failures` as "syscall", and the next process is tried.
    pub(super) fn demote(
        &self,
        cg: &CgroupFs,
        memcgs: &[String],
        fast: &[u32],
        dest: u32,
        budget: u64,
    ) -> Moved {
        let mut out = Moved::default();
        let pids = memcgs
            .iter()
            .filter_map(|p| cg.procs(p).ok())
            .flatten()
            .filter_map(|pid| u32::try_from(pid).ok());
        for pid in pids {
            if out.bytes >= budget {
                break;
            }
            let mut ranges = match mappings(pid) {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(pid, error = %e, "cannot read the mappings of a process to demote");
                    continue;
                }
            };
            ranges.sort_by_key(|&(start, end)| std::cmp::Reverse(end - start));
            let left = budget - out.bytes;
            match self.mover.move_ranges(pid, &ranges, fast, dest, left) {
                Ok(rep) => out.add_report(&rep),
                Err(MoveError::NoProcess { .. }) => {}
                Err(e) => {
                    tracing::debug!(pid, error = %e, "move_pages demotion failed");
                    *out.failures.entry("syscall").or_default() += 1;
                }
            }
        }
        out
    }
}

impl Controller {
    /// After a demotion write of `asked` bytes of container `m` (over its
    /// target) that reclaim came back `short` on: once
    /// [`Unevictable::stuck`] says reclaim has taken nothing for three
    /// intervals, moves `asked` bytes with `move_pages(2)` to the lower
    /// node with the most free memory, and counts them as tierd's own
    /// demotion (mechanism `move_pages`).
    pub(super) fn demote_unevictable(
        &mut self,
        m: &Managed,
        snapshot: &Snapshot,
        short: bool,
        asked: u64,
    ) {
        let Some(fast_bytes) = snapshot
            .containers
            .iter()
            .find(|c| c.id == m.id)
            .map(|c| c.fast_bytes)
        else {
            return;
        };
        let grace = 3 * self.cfg.daemon.interval;
        if !self
            .unevictable
            .stuck(m.id, short, fast_bytes, Instant::now(), grace)
        {
            return;
        }
        let Some(dest) = self.topo.most_free(&self.topo.lower_nodes()) else {
            return;
        };
        let fast: Vec<u32> = self.topo.fast_nodes().iter().copied().collect();
        let mv = self
            .unevictable
            .demote(&self.cg, &m.members, &fast, dest, asked);
        // A cap on an all-hot container moves every few intervals for as
        // long as the kernel promotes its pages back: said once.
        if self.unevictable.said.insert(m.id) {
            tracing::info!(container = %m.path, asked, moved = mv.bytes,
                "reclaim took none of this container's fast-tier pages for {:?} (all recently used); moved them with move_pages (logged again at debug)",
                grace);
        } else {
            tracing::debug!(container = %m.path, asked, moved = mv.bytes,
                "demotion reclaim will not take: moved with move_pages");
        }
        self.record_move(
            std::slice::from_ref(m),
            m.id,
            Direction::Demote,
            "move_pages",
            &mv,
        );
    }
}

/// (start, end) of the mappings of process `pid` whose pages can move:
/// all but the vDSO, vvar and vsyscall pages.
fn mappings(pid: u32) -> procfs::ProcResult<Vec<(u64, u64)>> {
    use procfs::process::{MMapPath, Process};
    let maps = Process::new(pid as i32)?.maps()?;
    Ok(maps
        .into_iter()
        .filter(|m| {
            !matches!(
                m.pathname,
                MMapPath::Vdso | MMapPath::Vvar | MMapPath::Vsyscall
            )
        })
        .map(|m| m.address)
        .filter(|&(start, end)| end > start)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn stuck_after_the_grace_with_no_fast_tier_bytes_gone() {
        let mut u = Unevictable::default();
        let t0 = Instant::now();
        let grace = Duration::from_secs(3);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(!u.stuck(1, true, 50 * MIB, at(0), grace));
        // Less than a MiB gone is no progress.
        assert!(!u.stuck(1, true, 50 * MIB - MIB / 2, at(2), grace));
        assert!(u.stuck(1, true, 50 * MIB, at(3), grace));
        // The clock restarts after a move.
        assert!(!u.stuck(1, true, 50 * MIB, at(4), grace));
        assert!(u.stuck(1, true, 50 * MIB, at(6), grace));
    }

    #[test]
    fn reclaim_that_takes_pages_or_a_full_write_is_not_stuck() {
        let mut u = Unevictable::default();
        let t0 = Instant::now();
        let grace = Duration::from_secs(3);
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Short every cycle, but a MiB or more leaves the fast tier each time.
        for s in 0..10 {
            assert!(!u.stuck(1, true, (60 - s) * MIB, at(s), grace));
        }
        // A full write restarts the clock.
        assert!(!u.stuck(2, true, 50 * MIB, at(0), grace));
        assert!(!u.stuck(2, false, 50 * MIB, at(2), grace));
        assert!(!u.stuck(2, true, 50 * MIB, at(4), grace));
        assert!(u.stuck(2, true, 50 * MIB, at(7), grace));
        u.retain(|c| c != 2);
        assert!(!u.stuck(2, true, 50 * MIB, at(8), grace));
    }
}
