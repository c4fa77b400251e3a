//! Aggregation of DAMON regions into per-container heat per NUMA node.
//! Pure: no I/O, no clock; O(number of regions).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::damon::{Attrs, TriedRegion};

/// Default hotness threshold in accesses per aggregation interval, for
/// DAMON's default 20 samples per interval (5 ms / 100 ms): a region is hot
/// when at least 2 of its 20 samples saw an access (10 %). One access is too
/// eager: a region that merged a few touched pages into a large idle span, or
/// a one-off touch (a scan, a `fork`), shows 1 now and then; pages that are
/// not touched at all show 0 reliably.
pub const DEFAULT_HOT_MIN_NR_ACCESSES: u32 = 2;

/// Access-frequency buckets of [`Histogram::by_freq`], as a fraction of the
/// maximum `nr_accesses` (`aggr_us / sample_us`):
/// 0: `nr_accesses == 0`; 1: (0, 25 %]; 2: (25, 50 %]; 3: (50, 75 %];
/// 4: (75, 100 %] (and anything above the maximum).
pub const FREQ_BUCKETS: usize = 5;

/// Idle-age buckets of [`Histogram::by_age_idle`], in seconds of idleness
/// (`age × aggr_us`), log-scale by 4: `<1 s`, `<4 s`, `<16 s`, `<64 s`,
/// `<256 s`, `≥256 s`.
pub const AGE_BUCKETS: usize = 6;

/// Upper bounds (exclusive, seconds) of the first `AGE_BUCKETS - 1` age buckets.
pub const AGE_BUCKET_BOUNDS_S: [u64; AGE_BUCKETS - 1] = [1, 4, 16, 64, 256];

/// What [`accumulate`] needs to classify regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeatParams {
    /// The highest possible `nr_accesses`: `aggr_us / sample_us` (20 by default).
    pub max_nr_accesses: u32,
    /// A region is hot when `nr_accesses >= hot_min_nr_accesses` (accesses per
    /// aggregation interval; see [`DEFAULT_HOT_MIN_NR_ACCESSES`]). 0 makes
    /// everything hot.
    pub hot_min_nr_accesses: u32,
    /// The aggregation interval (µs), to turn `age` into seconds.
    pub aggr_us: u64,
}

impl HeatParams {
    /// Parameters for regions monitored with `attrs`.
    pub fn from_attrs(attrs: &Attrs, hot_min_nr_accesses: u32) -> Self {
        HeatParams {
            max_nr_accesses: attrs.max_nr_accesses(),
            hot_min_nr_accesses,
            aggr_us: attrs.aggr_us,
        }
    }

    /// True when `r` counts as hot.
    pub fn is_hot(&self, r: &TriedRegion) -> bool {
        r.nr_accesses >= self.hot_min_nr_accesses
    }

    /// The [`Histogram::by_freq`] bucket of `nr_accesses`.
    pub fn freq_bucket(&self, nr_accesses: u32) -> usize {
        if nr_accesses == 0 {
            return 0;
        }
        let max = self.max_nr_accesses.max(1) as u64;
        // ceil(4 × nr / max), clamped to 1..=4.
        let q = (4 * nr_accesses as u64).div_ceil(max);
        q.clamp(1, FREQ_BUCKETS as u64 - 1) as usize
    }

    /// The [`Histogram::by_age_idle`] bucket of `age` (aggregation intervals).
    pub fn age_bucket(&self, age: u32) -> usize {
        let us = age as u64 * self.aggr_us;
        AGE_BUCKET_BOUNDS_S
            .iter()
            .position(|&b| us < b * 1_000_000)
            .unwrap_or(AGE_BUCKETS - 1)
    }
}

impl Default for HeatParams {
    /// DAMON's default intervals (20 samples per 100 ms) and
    /// [`DEFAULT_HOT_MIN_NR_ACCESSES`].
    fn default() -> Self {
        HeatParams::from_attrs(&Attrs::default(), DEFAULT_HOT_MIN_NR_ACCESSES)
    }
}

/// Bytes by access frequency and by idle age.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// Bytes per frequency bucket (see [`FREQ_BUCKETS`]).
    pub by_freq: [u64; FREQ_BUCKETS],
    /// Bytes of idle regions (`nr_accesses == 0` only) per idle-age bucket
    /// (see [`AGE_BUCKETS`]); sums to `by_freq[0]`.
    pub by_age_idle: [u64; AGE_BUCKETS],
}

/// Heat of one container on one node (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHeat {
    pub hist: Histogram,
    /// Bytes in hot regions ([`HeatParams::is_hot`]).
    pub hot_bytes: u64,
    /// All bytes seen.
    pub total_bytes: u64,
}

impl NodeHeat {
    fn add(&mut self, bytes: u64, freq: usize, age: Option<usize>, hot: bool) {
        self.total_bytes += bytes;
        self.hist.by_freq[freq] += bytes;
        if let Some(a) = age {
            self.hist.by_age_idle[a] += bytes;
        }
        if hot {
            self.hot_bytes += bytes;
        }
    }
}

/// Heat of one container (all its processes), per NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerHeat {
    /// Node id → heat of the bytes sampled on that node.
    pub per_node: BTreeMap<u32, NodeHeat>,
    /// Bytes whose node is unknown (not sampled, not mapped, or the
    /// fractions of a region summed to less than 1).
    pub unknown_node: NodeHeat,
}

impl ContainerHeat {
    /// Hot bytes on all nodes, the unknown node included.
    pub fn hot_bytes(&self) -> u64 {
        self.per_node.values().map(|n| n.hot_bytes).sum::<u64>() + self.unknown_node.hot_bytes
    }

    /// Hot bytes on the listed nodes (unknown node excluded).
    pub fn hot_bytes_on(&self, nodes: &[u32]) -> u64 {
        nodes
            .iter()
            .filter_map(|n| self.per_node.get(n))
            .map(|n| n.hot_bytes)
            .sum()
    }

    /// All bytes seen, the unknown node included.
    pub fn total_bytes(&self) -> u64 {
        self.per_node.values().map(|n| n.total_bytes).sum::<u64>() + self.unknown_node.total_bytes
    }
}

/// Sorts hottest first: `nr_accesses` descending, then `age` descending (hot
/// for longer first), then start address.
pub fn hottest_first(regions: &mut [TriedRegion]) {
    regions.sort_unstable_by(|a, b| {
        b.nr_accesses
            .cmp(&a.nr_accesses)
            .then(b.age.cmp(&a.age))
            .then(a.start.cmp(&b.start))
    });
}

/// Sorts coldest first: `nr_accesses` ascending, then `age` descending (idle
/// for longer first), then start address.
pub fn coldest_first(regions: &mut [TriedRegion]) {
    regions.sort_unstable_by(|a, b| {
        a.nr_accesses
            .cmp(&b.nr_accesses)
            .then(b.age.cmp(&a.age))
            .then(a.start.cmp(&b.start))
    });
}

/// Adds one process's regions to `heat`.
///
/// `node_fraction(region)` says how the region's bytes split over nodes as
/// `(node, fraction)` pairs (the caller samples pages with `move_pages(2)`).
/// Fractions are clamped to `[0, 1]`; if they sum to more than 1 they are
/// scaled down to 1; what they leave is counted in
/// [`ContainerHeat::unknown_node`]. Bytes per node are rounded so that the
/// parts of a region always add up to its length exactly.
pub fn accumulate(
    heat: &mut ContainerHeat,
    regions: &[TriedRegion],
    params: &HeatParams,
    mut node_fraction: impl FnMut(&TriedRegion) -> Vec<(u32, f64)>,
) {
    for r in regions {
        let len = r.len();
        if len == 0 {
            continue;
        }
        let freq = params.freq_bucket(r.nr_accesses);
        let age = (r.nr_accesses == 0).then(|| params.age_bucket(r.age));
        let hot = params.is_hot(r);
        let parts = node_fraction(r);
        let sum: f64 = parts
            .iter()
            .map(|&(_, f)| {
                if f.is_finite() {
                    f.clamp(0.0, 1.0)
                } else {
                    0.0
                }
            })
            .sum();
        let scale = if sum > 1.0 { 1.0 / sum } else { 1.0 };
        let mut left = len;
        for (node, f) in parts {
            let f = if f.is_finite() {
                f.clamp(0.0, 1.0)
            } else {
                0.0
            } * scale;
            let bytes = ((len as f64 * f).round() as u64).min(left);
            if bytes == 0 {
                continue;
            }
            left -= bytes;
            heat.per_node
                .entry(node)
                .or_default()
                .add(bytes, freq, age, hot);
        }
        if left > 0 {
            heat.unknown_node.add(left, freq, age, hot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, len: u64, nr_accesses: u32, age: u32) -> TriedRegion {
        TriedRegion {
            start,
            end: start + len,
            nr_accesses,
            age,
        }
    }

    #[test]
    fn buckets() {
        let p = HeatParams::default();
        assert_eq!(p.max_nr_accesses, 20);
        let f: Vec<usize> = [0, 1, 5, 6, 10, 11, 15, 16, 20, 99]
            .iter()
            .map(|&n| p.freq_bucket(n))
            .collect();
        assert_eq!(f, vec![0, 1, 1, 2, 2, 3, 3, 4, 4, 4]);
        // age in 100 ms intervals: 9 → 0.9 s, 10 → 1 s, 2560 → 256 s.
        let a: Vec<usize> = [0, 9, 10, 39, 40, 159, 160, 639, 640, 2559, 2560]
            .iter()
            .map(|&x| p.age_bucket(x))
            .collect();
        assert_eq!(a, vec![0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5]);
        let zero = HeatParams {
            max_nr_accesses: 0,
            ..p
        };
        assert_eq!(zero.freq_bucket(1), 4);
    }

    #[test]
    fn accumulate_splits_by_node_and_keeps_bytes() {
        let p = HeatParams::default();
        let regions = [r(0, 1000, 10, 3), r(1000, 3000, 0, 50), r(4000, 7, 1, 0)];
        let mut h = ContainerHeat::default();
        accumulate(&mut h, &regions, &p, |reg| match reg.start {
            0 => vec![(0, 0.5), (1, 0.25)],
            1000 => vec![(1, 0.8), (0, 0.8)], // sums > 1: scaled to 1
            _ => vec![],
        });
        assert_eq!(h.total_bytes(), 4007);
        let n0 = h.per_node[&0];
        let n1 = h.per_node[&1];
        assert_eq!(n0.hot_bytes, 500);
        assert_eq!(n1.hot_bytes, 250);
        assert_eq!(h.unknown_node.hot_bytes, 250);
        assert_eq!(h.unknown_node.total_bytes, 250 + 7); // 1 access < hot threshold 2
        assert_eq!(h.hot_bytes(), 1000);
        assert_eq!(h.hot_bytes_on(&[0]), 500);
        assert_eq!(h.hot_bytes_on(&[0, 1, 7]), 750);
        assert_eq!(n0.total_bytes + n1.total_bytes, 750 + 3000);
        assert_eq!(n1.hist.by_freq[0] + n0.hist.by_freq[0], 3000);
        // 50 intervals = 5 s idle → bucket 2 (<16 s); idle bytes only.
        assert_eq!(n0.hist.by_age_idle[2] + n1.hist.by_age_idle[2], 3000);
        assert_eq!(n0.hist.by_age_idle.iter().sum::<u64>(), n0.hist.by_freq[0]);
        assert_eq!(n0.hist.by_freq[2], 500);
        assert_eq!(h.unknown_node.hist.by_freq[1], 7);
    }

    #[test]
    fn ranking() {
        let mut v = vec![
            r(0, 1, 5, 1),
            r(1, 1, 9, 0),
            r(2, 1, 0, 3),
            r(3, 1, 0, 7),
            r(4, 1, 5, 4),
        ];
        hottest_first(&mut v);
        assert_eq!(
            v.iter().map(|r| r.start).collect::<Vec<_>>(),
            vec![1, 4, 0, 3, 2]
        );
        coldest_first(&mut v);
        assert_eq!(
            v.iter().map(|r| r.start).collect::<Vec<_>>(),
            vec![3, 2, 4, 0, 1]
        );
    }
}
