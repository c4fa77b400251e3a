//! Which containers a cycle manages, and when that set changed: an arrival
//! or an exit. Recorded once per solve, before anything reads it; the
//! steady-state detector (`steady.rs`: an arrival or exit restarts its
//! clock), the scan pacing (`steady::pace_scan`: how long ago a container
//! arrived) and the hot swap's window (`hotswap.rs`: how long ago the set
//! changed) all read this one record.
//!
//! Pure: time is the policy clock (`PolicyState::clock_ms`).

use crate::model::{ContainerId, Membership};

impl Membership {
    /// Records this cycle's containers (`ids`, in id order) at `now_ms` and
    /// says whether the set changed since the last cycle. A newcomer's
    /// arrival time is `now_ms`; a container that is gone is forgotten. The
    /// first cycle with containers counts as a change (the daemon has not
    /// seen the placement before); a cycle with none as before does not.
    pub(crate) fn observe(&mut self, now_ms: u64, ids: &[ContainerId]) -> bool {
        if self.arrived_ms.keys().eq(ids) {
            return false;
        }
        self.changed_ms = Some(now_ms);
        self.arrived_ms
            .retain(|id, _| ids.binary_search(id).is_ok());
        for &id in ids {
            self.arrived_ms.entry(id).or_insert(now_ms);
        }
        true
    }

    /// Whether container `id` was in the last recorded cycle.
    pub(crate) fn contains(&self, id: ContainerId) -> bool {
        self.arrived_ms.contains_key(&id)
    }

    /// Whether the last recorded cycle had no container.
    pub(crate) fn is_empty(&self) -> bool {
        self.arrived_ms.is_empty()
    }

    /// Whether the set changed less than `window_ms` before `now_ms`.
    pub(crate) fn changed_within(&self, now_ms: u64, window_ms: u64) -> bool {
        self.changed_ms
            .is_some_and(|t| now_ms.saturating_sub(t) < window_ms)
    }

    /// Whether container `id` arrived less than `window_ms` before `now_ms`.
    pub(crate) fn arrived_within(&self, id: ContainerId, now_ms: u64, window_ms: u64) -> bool {
        self.arrived_ms
            .get(&id)
            .is_some_and(|&t| now_ms.saturating_sub(t) < window_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_and_exits_change_the_set_and_stamp_the_newcomers() {
        let mut m = Membership::default();
        assert!(!m.observe(0, &[]), "no containers, as before");
        assert!(m.observe(1_000, &[1, 2]), "first containers");
        assert!(!m.observe(3_000, &[1, 2]));
        assert!(m.observe(5_000, &[1, 2, 3]), "arrival");
        assert_eq!(m.arrived_ms.get(&1), Some(&1_000));
        assert_eq!(m.arrived_ms.get(&3), Some(&5_000));
        assert!(m.observe(7_000, &[2, 3]), "exit");
        assert_eq!(m.arrived_ms.len(), 2, "the gone are forgotten");
        assert_eq!(m.changed_ms, Some(7_000));
        assert!(m.changed_within(7_000 + 59_999, 60_000));
        assert!(!m.changed_within(7_000 + 60_000, 60_000));
        // Back later: a new arrival.
        assert!(m.observe(9_000, &[1, 2, 3]));
        assert!(m.arrived_within(1, 9_000 + 29_999, 30_000));
        assert!(!m.arrived_within(2, 9_000, 3_999));
        assert!(!m.arrived_within(4, 9_000, 30_000), "never seen");
    }
}
