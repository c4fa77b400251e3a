//! Demotion paced by the lower tier's own speed.
//!
//! A demotion write (`memory.reclaim`, MGLRU's eviction command) returns
//! when the kernel has migrated the pages, so its duration is set by the
//! lower tier: GB/s on CXL hardware, about 1–4 MB/s on an emulated CXL
//! Type-3 device. The plan's demotion is already limited by the
//! `[limits]` token buckets; this caps one cycle's writes further at what
//! the tier took per second so far times one interval, so that a slow
//! device never holds the cycle (and `/status`, the next protection write)
//! for tens of seconds, while a device-bound demotion still keeps the
//! device busy (half an interval would halve its throughput).

use std::time::Duration;

/// Demotion before the first measurement, per cycle: 16 MiB, a few ms on
/// hardware, seconds on an emulated device.
const FIRST_BUDGET: u64 = 16 << 20;
/// Writes shorter than this do not measure the tier (page-cache drops and
/// empty LRUs return at once).
const MIN_TIMED: Duration = Duration::from_millis(20);
/// Weight of the newest measurement in the moving average.
const ALPHA: f64 = 0.3;
/// Never less than this per cycle: progress on any device.
const MIN_BUDGET: u64 = 2 << 20;

/// Measured demotion throughput (bytes/s, exponential moving average of the
/// writes that took at least [`MIN_TIMED`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct DemotionPace {
    bytes_per_s: Option<f64>,
}

impl DemotionPace {
    /// Bytes one cycle of `interval` may ask to demote: one interval at
    /// the measured throughput, at least 2 MiB; 16 MiB before anything was
    /// measured.
    pub(crate) fn budget(&self, interval: Duration) -> u64 {
        match self.bytes_per_s {
            None => FIRST_BUDGET,
            Some(bw) => ((bw * interval.as_secs_f64()) as u64).max(MIN_BUDGET),
        }
    }

    /// Records a write of `bytes` that took `took`.
    pub(crate) fn observe(&mut self, bytes: u64, took: Duration) {
        if took < MIN_TIMED || bytes == 0 {
            return;
        }
        let bw = bytes as f64 / took.as_secs_f64();
        self.bytes_per_s = Some(match self.bytes_per_s {
            None => bw,
            Some(old) => old + ALPHA * (bw - old),
        });
    }

    /// The measured throughput, bytes/s (None before the first timed write).
    pub(crate) fn bytes_per_s(&self) -> Option<f64> {
        self.bytes_per_s
    }
}

/// What one cycle may still demote: [`DemotionPace::budget`] less what it
/// wrote. Before the tier's pace is known, the first timed write measures
/// it and the allowance is then recomputed from the measurement
/// ([`Allowance::remeasure`]): a run's first demotion is often a
/// newcomer's arrival, whose first cycle would otherwise make 16 MiB of
/// room where the plan asked for its allocation burst.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Allowance {
    left: u64,
    spent: u64,
    probing: bool,
    interval: Duration,
}

impl Allowance {
    /// The allowance of a cycle of `interval` at `pace`.
    pub(crate) fn new(pace: &DemotionPace, interval: Duration) -> Allowance {
        Allowance {
            left: pace.budget(interval),
            spent: 0,
            probing: pace.bytes_per_s.is_none(),
            interval,
        }
    }

    /// Bytes the cycle may still write.
    pub(crate) fn left(&self) -> u64 {
        self.left
    }

    /// Bytes of `want` this cycle may write now (all of it, or what is
    /// left), counted as written.
    pub(crate) fn take(&mut self, want: u64) -> u64 {
        let n = want.min(self.left);
        self.left -= n;
        self.spent += n;
        n
    }

    /// After a write: true once, when it gave the pace its first
    /// measurement; the allowance is then one interval at that pace less
    /// what the cycle wrote, and the caller may write again.
    pub(crate) fn remeasure(&mut self, pace: &DemotionPace) -> bool {
        if !self.probing || pace.bytes_per_s.is_none() {
            return false;
        }
        self.probing = false;
        self.left = pace.budget(self.interval).saturating_sub(self.spent);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_tier_gets_a_budget_of_one_interval() {
        let mut p = DemotionPace::default();
        assert_eq!(p.budget(Duration::from_secs(2)), 16 << 20);
        // An emulated CXL device: 16 MiB in 8 s = 2 MiB/s.
        p.observe(16 << 20, Duration::from_secs(8));
        assert_eq!(p.budget(Duration::from_secs(2)), 4 << 20);
        // Hardware: 64 MiB in 40 ms lifts the cap over the token buckets.
        let mut hw = DemotionPace::default();
        hw.observe(64 << 20, Duration::from_millis(40));
        assert!(hw.budget(Duration::from_secs(2)) >= 1 << 30);
    }

    #[test]
    fn the_first_timed_write_sets_the_rest_of_its_cycle() {
        let pace0 = DemotionPace::default();
        let mut a = Allowance::new(&pace0, Duration::from_secs(2));
        // An arrival's first cycle asks for its 128 MiB burst: 16 MiB probe.
        assert_eq!(a.take(128 << 20), 16 << 20);
        assert!(!a.remeasure(&pace0), "no measurement, no more room");
        let mut pace = pace0;
        // 16 MiB in 200 ms: 80 MiB/s, 160 MiB a 2 s cycle, 16 spent.
        pace.observe(16 << 20, Duration::from_millis(200));
        assert!(a.remeasure(&pace));
        assert_eq!(a.take(112 << 20), 112 << 20);
        assert_eq!(a.take(64 << 20), 32 << 20);
        assert_eq!(a.take(1), 0);
        // Once only: later writes do not refill the cycle.
        pace.observe(64 << 20, Duration::from_millis(100));
        assert!(!a.remeasure(&pace));
        // A measured pace never probes.
        let mut b = Allowance::new(&pace, Duration::from_secs(2));
        assert!(b.take(u64::MAX) > 16 << 20);
        assert!(!b.remeasure(&pace));
    }

    #[test]
    fn instant_writes_measure_nothing_and_the_average_moves_gradually() {
        let mut p = DemotionPace::default();
        p.observe(1 << 20, Duration::from_millis(1));
        assert_eq!(p.bytes_per_s(), None);
        p.observe(10 << 20, Duration::from_secs(1));
        p.observe(20 << 20, Duration::from_secs(1));
        let bw = p.bytes_per_s().unwrap();
        assert!((bw - 13.0 * (1 << 20) as f64).abs() < 1.0, "{bw}");
        // A tiny budget never stalls progress.
        p.observe(1 << 20, Duration::from_secs(60));
        assert!(p.budget(Duration::from_millis(500)) >= 2 << 20);
    }
}
