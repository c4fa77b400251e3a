//! Token buckets for the demotion and promotion rate limits (docs/DESIGN.md
//! "Policy semantics" rule 3: per-container and global rate limits, so that a
//! target that moves a little moves no pages, and a big move is spread over
//! cycles instead of flooding `memory.reclaim` / `move_pages(2)`).
//!
//! Tokens are bytes, kept as `f64` so that refills of a few milliseconds at a
//! low rate are not lost to rounding; budgets handed out are whole bytes
//! (floored). The policy crate reads no clock: time arrives as the snapshot's
//! `elapsed_ms`.

use std::collections::BTreeMap;

use crate::model::ContainerId;

/// A token bucket's shape: refill rate and depth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bucket {
    /// Refill rate, bytes per second. 0 disables the movement it limits.
    pub rate_bytes_per_s: u64,
    /// Depth, in seconds of refill. Negative or NaN is taken as 0.
    pub burst_s: f64,
}

impl Bucket {
    pub(crate) fn new(rate_bytes_per_s: u64, burst_s: f64) -> Self {
        Bucket {
            rate_bytes_per_s,
            burst_s,
        }
    }

    /// Capacity of the bucket in bytes: `rate × burst_s`.
    pub(crate) fn capacity_bytes(self) -> f64 {
        let burst = if self.burst_s.is_finite() {
            self.burst_s.max(0.0)
        } else {
            0.0
        };
        self.rate_bytes_per_s as f64 * burst
    }

    /// Tokens after a cycle of `elapsed_ms`, starting from `prev`.
    ///
    /// A bucket starts full (one burst) when it is new (`prev == None`: a
    /// container the state has not seen) or on the first snapshot
    /// (`elapsed_ms == 0`), so that the first cycle can act at once. Otherwise
    /// it gains `rate × elapsed_ms / 1000` bytes, capped at its capacity. A
    /// stored value above the capacity (params lowered since) or not finite is
    /// brought back into `0..=capacity`.
    pub(crate) fn refill(self, prev: Option<f64>, elapsed_ms: u64) -> f64 {
        let cap = self.capacity_bytes();
        match prev {
            None => cap,
            Some(_) if elapsed_ms == 0 => cap,
            Some(t) => {
                let t = if t.is_finite() { t.max(0.0) } else { 0.0 };
                let gained = self.rate_bytes_per_s as f64 * elapsed_ms as f64 / 1000.0;
                (t + gained).min(cap)
            }
        }
    }
}

impl Bucket {
    /// [`Bucket::refill`] for every id of `ids` (ascending), looking each up
    /// in `prev` (also ascending, being a BTreeMap) by a merge join: O(n + m)
    /// rather than n tree searches.
    pub(crate) fn refill_all(
        self,
        prev: &BTreeMap<ContainerId, f64>,
        ids: impl Iterator<Item = ContainerId>,
        elapsed_ms: u64,
    ) -> Vec<f64> {
        let mut prev = prev.iter().peekable();
        ids.map(|id| {
            while prev.next_if(|(&k, _)| k < id).is_some() {}
            let old = prev.peek().filter(|(&k, _)| k == id).map(|(_, &v)| v);
            self.refill(old, elapsed_ms)
        })
        .collect()
    }
}

/// Whole bytes available in a bucket holding `tokens`.
pub(crate) fn whole_bytes(tokens: f64) -> u64 {
    // `as` floors positive values and saturates; NaN and negatives give 0.
    tokens as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn new_bucket_starts_full() {
        let b = Bucket::new(10 * MIB, 2.0);
        assert_eq!(b.refill(None, 1_000), (20 * MIB) as f64);
    }

    #[test]
    fn first_snapshot_refills_to_full() {
        let b = Bucket::new(10 * MIB, 2.0);
        assert_eq!(b.refill(Some(0.0), 0), (20 * MIB) as f64);
    }

    #[test]
    fn refill_is_rate_times_elapsed() {
        let b = Bucket::new(10 * MIB, 2.0);
        assert_eq!(b.refill(Some(0.0), 500), (5 * MIB) as f64);
        assert_eq!(b.refill(Some((3 * MIB) as f64), 100), (4 * MIB) as f64);
    }

    #[test]
    fn refill_caps_at_one_burst() {
        let b = Bucket::new(10 * MIB, 2.0);
        assert_eq!(b.refill(Some((15 * MIB) as f64), 60_000), (20 * MIB) as f64);
        // Params lowered since the last cycle: the excess is dropped.
        assert_eq!(b.refill(Some((100 * MIB) as f64), 1), (20 * MIB) as f64);
    }

    #[test]
    fn bad_values_are_sanitised() {
        assert_eq!(Bucket::new(MIB, f64::NAN).capacity_bytes(), 0.0);
        assert_eq!(Bucket::new(MIB, -1.0).capacity_bytes(), 0.0);
        assert_eq!(
            Bucket::new(MIB, 2.0).refill(Some(f64::NAN), 1_000),
            MIB as f64
        );
        assert_eq!(Bucket::new(MIB, 2.0).refill(Some(-5.0), 1_000), MIB as f64);
        assert_eq!(whole_bytes(f64::NAN), 0);
        assert_eq!(whole_bytes(-3.0), 0);
        assert_eq!(whole_bytes(7.9), 7);
    }

    #[test]
    fn refill_all_merges_with_the_previous_state() {
        let b = Bucket::new(1_000, 10.0);
        let prev: BTreeMap<ContainerId, f64> = [(2, 100.0), (5, 500.0), (9, 900.0)].into();
        // 1 and 7 are new (full: 10,000); 2 and 5 refill by 1,000; 9 is gone.
        let got = b.refill_all(&prev, [1, 2, 5, 7].into_iter(), 1_000);
        assert_eq!(got, vec![10_000.0, 1_100.0, 1_500.0, 10_000.0]);
    }

    #[test]
    fn zero_rate_disables() {
        let b = Bucket::new(0, 2.0);
        assert_eq!(b.refill(None, 0), 0.0);
        assert_eq!(b.refill(Some(0.0), 10_000), 0.0);
    }
}
