//! The arrival guard ([`crate::PolicyParams::arrival_guard_ms`]):
//! `memory.min` for a newcomer while it arrives.
//!
//! While a container allocates its working set, kswapd demotes part of its
//! first touches from the fast tier: in the emulated host 120–250 MiB of a
//! 600 MiB cache tenant within 10 s of its start, under kernel tiering and
//! tierd alike (docs/NOTES.md "Session 56"). Those pages then come back by
//! promotion or recall, or stay below. tierd protects a container at or
//! under its target with `memory.low`, but under the multi-gen LRU that
//! only orders reclaim: `shrink_one` in mm/vmscan.c sends a memcg below its
//! low to the tail of the memcg LRU once and reclaims it at the next visit.
//! `memory.min` is never reclaimed (`mem_cgroup_below_min`), so for a
//! while after its arrival a protected newcomer gets `memory.min` too, and
//! kswapd takes the room from the containers above their targets.
//!
//! Held for every under-target container, `memory.min` once left a fast
//! node with nothing kswapd could reclaim, and the kernel gave up on the
//! node (docs/NOTES.md "memory.min for a container short of its share").
//! So the guard is bounded: only within the window after the arrival, only
//! for containers that arrived while the daemon ran (not those it found at
//! its start), and only while another container holds fast-tier memory
//! without protection.
//!
//! Pure: time is the policy clock (`PolicyState::clock_ms`).

use crate::model::{ArrivalState, ContainerId};

/// Records this cycle's containers and says, for each of `cs` (id, usage
/// in bytes; in id order), whether it arrived less than `guard_ms` ago.
///
/// A container arrives the first cycle its usage reaches `min_usage`
/// bytes: a cgroup created ahead of its workload has not arrived yet.
/// Containers that already held `min_usage` at the first cycle recorded
/// (the daemon's start, or the guard turned on by a reload) never count as
/// arrivals. Containers that are gone are dropped. `guard_ms` 0: the guard
/// is off, nothing is kept and nothing is recent.
pub(crate) fn recent(
    st: &mut ArrivalState,
    now_ms: u64,
    cs: &[(ContainerId, u64)],
    min_usage: u64,
    guard_ms: u64,
) -> Vec<bool> {
    if guard_ms == 0 {
        *st = ArrivalState::default();
        return vec![false; cs.len()];
    }
    let first = !st.started;
    st.started = true;
    st.arrived_ms
        .retain(|id, _| cs.binary_search_by_key(id, |&(c, _)| c).is_ok());
    cs.iter()
        .map(|&(id, usage)| {
            if usage >= min_usage.max(1) {
                st.arrived_ms
                    .entry(id)
                    .or_insert(if first { None } else { Some(now_ms) });
            }
            matches!(st.arrived_ms.get(&id), Some(Some(t)) if now_ms.saturating_sub(*t) < guard_ms)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_container_is_recent_from_the_cycle_it_holds_memory_until_the_window_ends() {
        let mut st = ArrivalState::default();
        let (a, b): (ContainerId, ContainerId) = (1, 2);
        // The first cycle: a is there already, b's cgroup is empty.
        assert_eq!(
            recent(&mut st, 0, &[(a, 600 * MIB), (b, 0)], 16 * MIB, 20_000),
            [false, false]
        );
        // b starts at 6 s: recent for 20 s from then; a never.
        assert_eq!(
            recent(
                &mut st,
                6_000,
                &[(a, 600 * MIB), (b, 300 * MIB)],
                16 * MIB,
                20_000
            ),
            [false, true]
        );
        assert!(recent(&mut st, 25_999, &[(a, 1), (b, 1)], 16 * MIB, 20_000)[1]);
        assert!(!recent(&mut st, 26_000, &[(a, 1), (b, 1)], 16 * MIB, 20_000)[1]);
    }

    #[test]
    fn a_container_that_leaves_and_comes_back_arrives_again() {
        let mut st = ArrivalState::default();
        let a: ContainerId = 1;
        let b: ContainerId = 2;
        recent(&mut st, 0, &[(a, 100 * MIB)], MIB, 10_000);
        assert_eq!(
            recent(
                &mut st,
                2_000,
                &[(a, 100 * MIB), (b, 100 * MIB)],
                MIB,
                10_000
            ),
            [false, true]
        );
        // b is gone, then a cgroup with its id is back.
        assert_eq!(
            recent(&mut st, 4_000, &[(a, 100 * MIB)], MIB, 10_000),
            [false]
        );
        assert_eq!(
            recent(
                &mut st,
                50_000,
                &[(a, 100 * MIB), (b, 100 * MIB)],
                MIB,
                10_000
            ),
            [false, true]
        );
    }

    #[test]
    fn off_keeps_nothing_and_turning_it_on_counts_no_one_present() {
        let mut st = ArrivalState::default();
        let a: ContainerId = 1;
        assert_eq!(recent(&mut st, 0, &[(a, 100 * MIB)], MIB, 0), [false]);
        assert_eq!(st, ArrivalState::default());
        // Turned on later (a reload): a was there before, so it is no arrival.
        assert_eq!(
            recent(&mut st, 9_000, &[(a, 100 * MIB)], MIB, 10_000),
            [false]
        );
        assert_eq!(
            recent(&mut st, 11_000, &[(a, 100 * MIB)], MIB, 10_000),
            [false]
        );
    }
}
