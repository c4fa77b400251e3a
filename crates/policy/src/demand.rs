//! Holding a sampled hot-set demand steady (`demand = "hot_set"`).
//!
//! One DAMON aggregation's hot bytes swing widely: in the emulated host a
//! steady 400 MiB hot set read as 0, 112, 32, 0, 242 MiB in successive
//! cycles while its regions were still being split (docs/NOTES.md "Demand
//! is held"). A target that follows every swing moves pages both ways, so
//! the demand the solver sees is the reading held at its peak and let down
//! by [`DEMAND_DECAY_PER_S`] of itself per second; a growing hot set is
//! followed at once.

use std::collections::BTreeMap;

use crate::model::ContainerId;

/// How fast a held hot-set demand falls when the source sees less, per
/// second (a hot set that really shrank is let go to half within ~14 s).
pub const DEMAND_DECAY_PER_S: f64 = 0.05;

/// Cycles in a row without a reading for a container after which its held
/// demand is dropped and its demand falls back to usage. A cycle without
/// regions for a container that had heat (seen in the emulated host under
/// load: both tenants' demand fell to usage for one cycle and their targets
/// swapped) is a missed reading, not a change of heat.
pub const DEMAND_HOLD_MISSES: u32 = 5;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Held {
    bytes: u64,
    misses: u32,
}

/// Per-container held hot-set demand, keyed by [`ContainerId`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DemandHolds {
    held: BTreeMap<ContainerId, Held>,
}

impl DemandHolds {
    /// Feeds this cycle's reading of container `id` (`None`: no reading)
    /// after `elapsed_ms` since the previous one, and returns the demand to
    /// use, in bytes (`None`: no hot-set demand, fall back to usage).
    ///
    /// * A reading ≥ the decayed hold replaces it; a smaller one leaves the
    ///   hold, decayed by `(1 − DEMAND_DECAY_PER_S)^(elapsed_ms / 1000)`.
    /// * A missing reading keeps the decaying hold for up to
    ///   [`DEMAND_HOLD_MISSES`] cycles, then clears it.
    pub fn hold(&mut self, id: ContainerId, hot: Option<u64>, elapsed_ms: u64) -> Option<u64> {
        let decay = (1.0 - DEMAND_DECAY_PER_S).powf(elapsed_ms as f64 / 1000.0);
        let decayed = |h: &Held| (h.bytes as f64 * decay) as u64;
        let Some(hot) = hot else {
            let h = self.held.get_mut(&id)?;
            h.misses += 1;
            if h.misses > DEMAND_HOLD_MISSES {
                self.held.remove(&id);
                return None;
            }
            h.bytes = decayed(h);
            return Some(h.bytes);
        };
        let v = hot.max(self.held.get(&id).map_or(0, decayed));
        self.held.insert(
            id,
            Held {
                bytes: v,
                misses: 0,
            },
        );
        Some(v)
    }

    /// Forgets the containers for which `keep` is false.
    pub fn retain(&mut self, keep: impl Fn(ContainerId) -> bool) {
        self.held.retain(|&id, _| keep(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn held_demand_decays_survives_missed_readings_then_falls_back() {
        let mut h = DemandHolds::default();
        assert_eq!(h.hold(1, None, 1000), None);
        assert_eq!(h.hold(1, Some(400 * MIB), 1000), Some(400 * MIB));
        // Less heat: held, falling 5% per second.
        assert_eq!(h.hold(1, Some(0), 1000), Some(380 * MIB));
        // Missed readings keep the decaying hold ...
        let mut last = 380 * MIB;
        for _ in 0..DEMAND_HOLD_MISSES {
            let v = h.hold(1, None, 1000).unwrap();
            assert!(v < last && v > 280 * MIB, "{v}");
            last = v;
        }
        // ... up to a limit, then demand falls back to usage (None).
        assert_eq!(h.hold(1, None, 1000), None);
        assert_eq!(h.hold(1, Some(10 * MIB), 1000), Some(10 * MIB));
        // A growing hot set is followed at once; a reading resets the misses.
        assert_eq!(h.hold(1, Some(50 * MIB), 1000), Some(50 * MIB));
        h.retain(|id| id != 1);
        assert_eq!(h.hold(1, None, 1000), None);
    }

    proptest! {
        /// Whatever the readings (jittered, missing), the held demand is at
        /// least this cycle's reading, never rises above the largest reading
        /// seen, and falls by at most the decay rate per second.
        #[test]
        fn held_demand_bounds_under_jitter(
            readings in proptest::collection::vec(
                (proptest::option::of(0..=(1u64 << 34)), 1..=5_000u64), 1..40),
        ) {
            let mut h = DemandHolds::default();
            let mut prev: Option<u64> = None;
            let mut peak = 0u64;
            for (r, dt) in readings {
                let v = h.hold(7, r, dt);
                if let Some(r) = r {
                    peak = peak.max(r);
                    prop_assert!(v.unwrap() >= r);
                }
                if let Some(v) = v {
                    prop_assert!(v <= peak);
                    if let Some(p) = prev {
                        let floor = p as f64 * (1.0 - DEMAND_DECAY_PER_S).powf(dt as f64 / 1000.0);
                        prop_assert!(v as f64 >= floor - 1.0, "{v} fell below {floor}");
                    }
                }
                prev = v;
            }
        }
    }
}
