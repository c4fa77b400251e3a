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

    /// Which of this cycle's containers are filling their share
    /// ([`crate::Plan::filling`]): `usage` is each container's id and usage
    /// (bytes), in id order, as recorded by [`Self::observe`] this cycle. A
    /// container is filling when it arrived less than `window_ms` before
    /// `now_ms` and this is its first cycle or its usage grew by more than
    /// `grow_bytes` since the last one. `first` (the set was empty before
    /// this cycle: the daemon's start) fills nobody: there is no one
    /// already there to make room. Records the usages for the next cycle.
    pub(crate) fn filling(
        &mut self,
        now_ms: u64,
        usage: &[(ContainerId, u64)],
        window_ms: u64,
        grow_bytes: u64,
        first: bool,
    ) -> Vec<bool> {
        let out = usage
            .iter()
            .map(|&(id, now)| {
                !first
                    && window_ms > 0
                    && self.arrived_within(id, now_ms, window_ms)
                    && self
                        .usage_bytes
                        .get(&id)
                        .is_none_or(|&before| now > before.saturating_add(grow_bytes))
            })
            .collect();
        self.usage_bytes = usage.iter().copied().collect();
        out
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

    #[test]
    fn a_newcomer_fills_while_it_grows_within_the_window() {
        let mut m = Membership::default();
        let (w, g) = (30_000, 16);
        m.observe(0, &[1]);
        assert_eq!(m.filling(0, &[(1, 500)], w, g, true), [false], "start");
        m.observe(2_000, &[1, 2]);
        // A newcomer's first cycle, with no memory yet: filling. The
        // incumbent arrived 2 s ago but grows by no more than 16.
        assert_eq!(
            m.filling(2_000, &[(1, 510), (2, 0)], w, g, false),
            [false, true]
        );
        assert_eq!(
            m.filling(4_000, &[(1, 510), (2, 17)], w, g, false),
            [false, true]
        );
        assert_eq!(
            m.filling(6_000, &[(1, 510), (2, 33)], w, g, false),
            [false, false],
            "grew 16: not more"
        );
        assert_eq!(
            m.filling(8_000, &[(1, 510), (2, 100)], w, g, false),
            [false, true],
            "grew again"
        );
        assert_eq!(
            m.filling(32_000, &[(1, 510), (2, 200)], w, g, false),
            [false, false],
            "window over"
        );
        assert_eq!(
            m.filling(2_000, &[(1, 510), (2, 900)], 0, g, false),
            [false, false],
            "off"
        );
        assert_eq!(
            m.usage_bytes.get(&2),
            Some(&900),
            "recorded whatever the window"
        );
    }
}
