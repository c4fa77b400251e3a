//! Steady state: when the kernel's own promotion has nothing left to do for
//! the split (docs/DESIGN.md "Policy semantics", issue 11 "Quiet").
//!
//! With `promotion = "kernel"`, NUMA balancing promotes every lower-tier page
//! that takes a hint fault soon enough after its scan, whichever container it
//! belongs to, and kswapd demotes pages of the tier to make room. While a
//! container is under its target that is how it gets its share; once every
//! container is at or over its target, a promotion only swaps a warm page in
//! for a page kswapd takes out: pages move and the split does not. The daemon
//! then closes the kernel's promotion (rate limit
//! `kernel.numa_balancing_promote_rate_limit_MBps` at 0,
//! Documentation/admin-guide/sysctl/kernel.rst) while nothing on the lower
//! tier passes the kernel's hot-page test, lowers it to a few MiB/s when
//! something does (the hottest candidates fault first after a scan and get
//! through, the rest are refused), and lifts it again as soon as a
//! container falls under its target ([`promote_gate`]).
//!
//! Pure: time is the policy clock (`PolicyState::clock_ms`).

use crate::model::{ContainerId, Membership, PromoteGate, SteadyState};

/// Records one cycle and says whether the state is steady: no container
/// under its target − band (`settled` this cycle) and the same containers,
/// without a break, for at least `steady_ms`.
///
/// `members` are this cycle's containers, recorded this cycle; `changed`:
/// the set changed with it. An arrival or exit, and any cycle with a
/// container under target, restart the clock: a newcomer is under its
/// target until the kernel has promoted its share.
pub(crate) fn observe(
    st: &mut SteadyState,
    now_ms: u64,
    members: &Membership,
    changed: bool,
    settled: bool,
    steady_ms: u64,
) -> bool {
    let empty = members.is_empty();
    if !settled || changed || empty {
        st.since_ms = None;
        // An arrival restarts the clock even when it is settled from the
        // start (a container whose usage fits its target).
        if settled && !empty {
            st.since_ms = Some(now_ms);
        }
        return false;
    }
    let since = *st.since_ms.get_or_insert(now_ms);
    now_ms.saturating_sub(since) >= steady_ms
}

/// Says whether one of the containers under their target − band (`under`)
/// arrived (`members`, recorded this cycle) less than `pace_ms` ago. Only
/// arrivals are paced: a container pushed under its target later is in the
/// kernel's promotion bursts (its scan is paced by the task's runtime, not
/// the period), and faster scans there only add churn (docs/NOTES.md "NUMA
/// balancing's scan period"). `pace_ms` 0: never.
pub(crate) fn pace_scan(
    members: &Membership,
    now_ms: u64,
    under: &[ContainerId],
    pace_ms: u64,
) -> bool {
    pace_ms > 0
        && under
            .iter()
            .any(|&id| members.arrived_within(id, now_ms, pace_ms))
}

/// Records one cycle and says where the daemon holds the kernel's promotion
/// rate limit ([`PromoteGate`]).
///
/// Not `steady`: [`PromoteGate::Open`]. Steady: [`PromoteGate::Closed`]
/// unless hot pages showed on the lower tier — `hot_below_bytes` (since the
/// previous cycle, `elapsed_ms` ago) at `hot_below_per_s` bytes per second
/// or more — in a cycle that began closed; then [`PromoteGate::Limited`]
/// for `limited_ms` and closed again. Only cycles that began closed count:
/// while the kernel promotes, kswapd's demotions put warm pages on the
/// lower tier, which pass the kernel's test at the next scan, so limited
/// cycles would keep the gate limited on the churn they cause.
/// `hot_below_per_s` 0 or `hot_below_bytes` None (the kernel's counter
/// unknown): limited for as long as the plan is steady, never closed.
pub(crate) fn promote_gate(
    st: &mut SteadyState,
    now_ms: u64,
    elapsed_ms: u64,
    steady: bool,
    hot_below_bytes: Option<u64>,
    hot_below_per_s: u64,
    limited_ms: u64,
) -> PromoteGate {
    let gate = match hot_below_bytes {
        _ if !steady => {
            st.limited_until_ms = None;
            PromoteGate::Open
        }
        Some(bytes) if hot_below_per_s > 0 => {
            // bytes / s ≥ threshold, without dividing by a 0 ms cycle.
            let hot = st.gate == PromoteGate::Closed
                && elapsed_ms > 0
                && u128::from(bytes) * 1000 >= u128::from(hot_below_per_s) * u128::from(elapsed_ms);
            if hot {
                st.limited_until_ms = Some(now_ms + limited_ms);
            }
            match st.limited_until_ms {
                Some(t) if now_ms < t => PromoteGate::Limited,
                _ => PromoteGate::Closed,
            }
        }
        _ => PromoteGate::Limited,
    };
    st.gate = gate;
    gate
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One cycle of the detector: the containers recorded, then asked.
    fn observe_ids(
        st: &mut (SteadyState, Membership),
        now: u64,
        ids: &[ContainerId],
        settled: bool,
        steady_ms: u64,
    ) -> bool {
        let changed = st.1.observe(now, ids);
        observe(&mut st.0, now, &st.1, changed, settled, steady_ms)
    }

    /// One cycle of the scan pacing: the containers recorded, then asked.
    fn pace_ids(
        m: &mut Membership,
        now: u64,
        ids: &[ContainerId],
        under: &[ContainerId],
        pace_ms: u64,
    ) -> bool {
        m.observe(now, ids);
        pace_scan(m, now, under, pace_ms)
    }

    #[test]
    fn steady_after_the_settle_time_and_not_before() {
        let mut st = Default::default();
        let ids = [1, 2];
        assert!(!observe_ids(&mut st, 0, &ids, true, 10_000));
        assert!(!observe_ids(&mut st, 9_999, &ids, true, 10_000));
        assert!(observe_ids(&mut st, 10_000, &ids, true, 10_000));
        assert!(observe_ids(&mut st, 20_000, &ids, true, 10_000));
    }

    #[test]
    fn a_container_under_target_or_a_new_one_restarts_the_clock() {
        let mut st = Default::default();
        assert!(!observe_ids(&mut st, 0, &[1, 2], true, 10_000));
        assert!(observe_ids(&mut st, 10_000, &[1, 2], true, 10_000));
        // Under target: open at once, and the settle time starts again.
        assert!(!observe_ids(&mut st, 12_000, &[1, 2], false, 10_000));
        assert!(!observe_ids(&mut st, 14_000, &[1, 2], true, 10_000));
        assert!(!observe_ids(&mut st, 23_999, &[1, 2], true, 10_000));
        assert!(observe_ids(&mut st, 24_000, &[1, 2], true, 10_000));
        // An arrival, settled or not, restarts it too; so does an exit.
        assert!(!observe_ids(&mut st, 26_000, &[1, 2, 3], true, 10_000));
        assert!(!observe_ids(&mut st, 35_999, &[1, 2, 3], true, 10_000));
        assert!(observe_ids(&mut st, 36_000, &[1, 2, 3], true, 10_000));
        assert!(!observe_ids(&mut st, 38_000, &[1, 3], true, 10_000));
        assert!(observe_ids(&mut st, 48_000, &[1, 3], true, 10_000));
    }

    #[test]
    fn the_scan_is_paced_for_a_while_after_an_arrival_under_target() {
        let mut st = Membership::default();
        assert!(!pace_ids(&mut st, 0, &[], &[], 30_000));
        // 1 arrives at its target: not paced; falls under at 40 s: not
        // an arrival, not paced.
        assert!(!pace_ids(&mut st, 1_000, &[1], &[], 30_000));
        assert!(!pace_ids(&mut st, 40_000, &[1], &[1], 30_000));
        // 2 arrives under its target: paced for 30 s, while under.
        assert!(pace_ids(&mut st, 50_000, &[1, 2], &[2], 30_000));
        assert!(!pace_ids(&mut st, 60_000, &[1, 2], &[], 30_000));
        assert!(pace_ids(&mut st, 79_999, &[1, 2], &[2, 1], 30_000));
        assert!(!pace_ids(&mut st, 80_000, &[1, 2], &[2], 30_000));
        // Gone and forgotten; back later: a new arrival.
        assert!(!pace_ids(&mut st, 81_000, &[1], &[1], 30_000));
        assert_eq!(st.arrived_ms.len(), 1);
        assert!(pace_ids(&mut st, 82_000, &[1, 2], &[2], 30_000));
        assert!(!pace_ids(&mut st, 82_000, &[3], &[3], 0), "0: never");
    }

    #[test]
    fn no_containers_is_never_steady() {
        let mut st = Default::default();
        assert!(!observe_ids(&mut st, 0, &[], true, 0));
        assert!(!observe_ids(&mut st, 60_000, &[], true, 0));
    }
}
