//! Pure parts of the `tierload` workload generator: the Zipf popularity table
//! and sampler, the per-page access model (which pages are hot and how often
//! each is accessed), the placement summary computed from a per-page node
//! array (as `move_pages(2)` reports it), node-list parsing, and the JSON report.
//!
//! Nothing here touches the kernel; `main.rs` does the mmap, the accesses and
//! the `move_pages` queries.

use std::collections::BTreeMap;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Default modelled latency of a fast-tier node when the HMAT gives none.
pub const DEFAULT_FAST_LATENCY_NS: f64 = 130.0;
/// Default modelled latency of any other node when the HMAT gives none.
pub const DEFAULT_SLOW_LATENCY_NS: f64 = 250.0;
/// Share of the access probability that the Zipf "hot set" holds.
pub const ZIPF_HOT_MASS: f64 = 0.9;

/// `move_pages(2)` on this process's pages: with `nodes` each page moves to
/// its node (`flags` e.g. `MPOL_MF_MOVE_ALL`), without it the call only
/// queries. `status` gets each page's node, or -errno (-ENOENT: not
/// present).
///
/// Errors: the call itself failed (EINVAL, EPERM, ...); `status` is then
/// unspecified.
///
/// # Safety
/// Every pointer in `pages` must lie in a mapping of this process; `nodes`
/// (if given) and `status` have as many entries as `pages`.
pub unsafe fn move_pages(
    pages: &[*mut libc::c_void],
    nodes: Option<&[i32]>,
    status: &mut [i32],
    flags: libc::c_int,
) -> std::io::Result<()> {
    assert_eq!(pages.len(), status.len());
    let rc = libc::syscall(
        libc::SYS_move_pages,
        0 as libc::c_long,
        pages.len() as libc::c_ulong,
        pages.as_ptr(),
        nodes.map_or(std::ptr::null(), |n| n.as_ptr()),
        status.as_mut_ptr(),
        flags,
    );
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Parses a kernel node list such as `0-1,3` (as in `has_cpu`, `online`).
/// Empty input (or only whitespace) is the empty list. The result is sorted
/// and without duplicates.
pub fn parse_node_list(s: &str) -> Result<Vec<i32>, String> {
    let mut out = Vec::new();
    for part in s.trim().split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let num = |x: &str| -> Result<i32, String> {
            x.trim()
                .parse::<u16>()
                .map(i32::from)
                .map_err(|_| format!("bad node number {x:?} in node list {s:?}"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("descending range {part:?} in node list {s:?}"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Parses a sysfs file holding one number (e.g. HMAT `read_latency`, in ns).
/// Zero counts as "not given".
pub fn parse_latency_ns(s: &str) -> Option<f64> {
    match s.trim().parse::<u64>() {
        Ok(0) | Err(_) => None,
        Ok(v) => Some(v as f64),
    }
}

/// Maps a uniform 64-bit random number to `0..n` (Lemire's multiply-shift,
/// without the rejection step: the bias is below n / 2^64).
#[inline(always)]
pub fn bounded(r: u64, n: u64) -> u64 {
    ((u128::from(r) * u128::from(n)) >> 64) as u64
}

/// Maps a 64-bit random number to a uniform f64 in [0, 1) (its top 53 bits).
#[inline(always)]
pub fn unit_f64(r: u64) -> f64 {
    (r >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Zipf(s) over ranks `0..n`: P(rank r) ∝ 1 / (r + 1)^s, as a precomputed CDF.
#[derive(Debug, Clone)]
pub struct ZipfTable {
    cdf: Vec<f64>,
}

impl ZipfTable {
    pub fn new(n: usize, s: f64) -> Self {
        assert!(n > 0, "Zipf over zero items");
        assert!(s.is_finite() && s >= 0.0, "Zipf exponent must be >= 0");
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0f64;
        for r in 0..n {
            acc += ((r + 1) as f64).powf(-s);
            cdf.push(acc);
        }
        let total = acc;
        for c in &mut cdf {
            *c /= total;
        }
        *cdf.last_mut().unwrap() = 1.0;
        Self { cdf }
    }

    pub fn len(&self) -> usize {
        self.cdf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }

    /// Probability of rank `r`.
    pub fn prob(&self, r: usize) -> f64 {
        if r == 0 {
            self.cdf[0]
        } else {
            self.cdf[r] - self.cdf[r - 1]
        }
    }

    /// Probability mass of the `k` most popular ranks.
    pub fn top_mass(&self, k: usize) -> f64 {
        if k == 0 {
            0.0
        } else {
            self.cdf[k.min(self.cdf.len()) - 1]
        }
    }

    /// The fewest top ranks whose mass reaches `mass` (at least 1).
    pub fn ranks_for_mass(&self, mass: f64) -> usize {
        (self.cdf.partition_point(|&c| c < mass) + 1).min(self.cdf.len())
    }

    /// The rank for a uniform `u` in [0, 1): the first rank whose CDF exceeds u.
    #[inline(always)]
    pub fn rank(&self, u: f64) -> usize {
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

/// A deterministic random permutation of `0..n` (Fisher–Yates, Xoshiro256++
/// seeded with `seed`): entry r is the page that holds popularity rank r.
pub fn rank_permutation(n: usize, seed: u64) -> Vec<u32> {
    assert!(n <= u32::MAX as usize);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut v: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = bounded(rng.next_u64(), i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

/// Zipf popularity over pages: ranks shuffled over the address space.
#[derive(Debug, Clone)]
pub struct ZipfPages {
    pub table: ZipfTable,
    /// `page_of_rank[r]` is the page index with popularity rank r.
    pub page_of_rank: Vec<u32>,
}

impl ZipfPages {
    pub fn new(pages: usize, s: f64, seed: u64) -> Self {
        Self {
            table: ZipfTable::new(pages, s),
            page_of_rank: rank_permutation(pages, seed),
        }
    }

    /// The page for a uniform `u` in [0, 1).
    #[inline(always)]
    pub fn page(&self, u: f64) -> usize {
        self.page_of_rank[self.table.rank(u)] as usize
    }
}

/// Walker/Vose alias table: O(1) sampling from a discrete distribution with
/// one table load per draw (cheaper than a CDF binary search under emulation).
#[derive(Debug, Clone)]
pub struct AliasTable {
    entries: Vec<AliasEntry>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct AliasEntry {
    /// Keep this index when the 26-bit coin is below `thr` (of 2^26).
    thr: u32,
    alias: u32,
}

impl AliasTable {
    /// Coin precision in bits.
    pub const COIN_BITS: u32 = 26;

    /// From non-negative weights (normalised here).
    pub fn new(weights: &[f64]) -> Self {
        let n = weights.len();
        assert!(n > 0 && n <= u32::MAX as usize);
        let total: f64 = weights.iter().sum();
        assert!(total > 0.0, "all weights are zero");
        let one = (1u64 << Self::COIN_BITS) as f64;
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let (mut small, mut large): (Vec<u32>, Vec<u32>) =
            (0..n as u32).partition(|&i| scaled[i as usize] < 1.0);
        let mut entries: Vec<AliasEntry> = (0..n as u32)
            .map(|i| AliasEntry {
                thr: 1 << Self::COIN_BITS,
                alias: i,
            })
            .collect();
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            entries[s as usize] = AliasEntry {
                thr: (scaled[s as usize] * one).round() as u32,
                alias: l,
            };
            scaled[l as usize] -= 1.0 - scaled[s as usize];
            if scaled[l as usize] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Whatever is left has (up to rounding) probability exactly 1/n.
        Self { entries }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// One draw from a 64-bit random number: its top 32 bits pick the bucket,
    /// bits 6..32 are the coin; bits 0..6 are left for the caller.
    #[inline(always)]
    pub fn sample(&self, r: u64) -> usize {
        let i = (((r >> 32) * self.entries.len() as u64) >> 32) as usize;
        let e = self.entries[i];
        let coin = ((r as u32) >> 6) & ((1 << Self::COIN_BITS) - 1);
        if coin < e.thr {
            i
        } else {
            e.alias as usize
        }
    }

    /// The probability of each index that the table encodes.
    pub fn implied_probs(&self) -> Vec<f64> {
        let n = self.entries.len() as f64;
        let one = (1u64 << Self::COIN_BITS) as f64;
        let mut p = vec![0.0; self.entries.len()];
        for (i, e) in self.entries.iter().enumerate() {
            let keep = (e.thr as f64 / one).min(1.0);
            p[i] += keep / n;
            p[e.alias as usize] += (1.0 - keep) / n;
        }
        p
    }
}

/// How the workload spreads its accesses over its pages: the probability of
/// each page per access, and the pages counted as its hot set.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessModel {
    /// Per page, the probability that an access goes to it (sums to 1).
    pub weights: Vec<f64>,
    /// Per page, whether it is in the hot set.
    pub hot: Vec<bool>,
    /// Per page, whether it is among the hottest tenth of the pages (by
    /// access probability, ties by page index; at least one page).
    pub top_decile: Vec<bool>,
}

/// The hottest ⌈n/10⌉ pages by weight (ties: lower page index first).
fn top_decile(weights: &[f64]) -> Vec<bool> {
    let n = weights.len();
    let k = n.div_ceil(10).max(usize::from(n > 0));
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
    let mut top = vec![false; n];
    for &i in &order[..k.min(n)] {
        top[i] = true;
    }
    top
}

impl AccessModel {
    /// GUPS hot set: accesses uniform over pages `start..start + len`, which
    /// are also the hot set.
    pub fn hotset(pages: usize, start: usize, len: usize) -> Self {
        assert!(
            len > 0 && start + len <= pages,
            "hot set outside the buffer"
        );
        let mut weights = vec![0.0; pages];
        let mut hot = vec![false; pages];
        let w = 1.0 / len as f64;
        for p in start..start + len {
            weights[p] = w;
            hot[p] = true;
        }
        let top_decile = top_decile(&weights);
        Self {
            weights,
            hot,
            top_decile,
        }
    }

    /// Zipf over pages; the hot set is the most popular pages that together
    /// hold `hot_mass` of the access probability.
    pub fn zipf(z: &ZipfPages, hot_mass: f64) -> Self {
        let n = z.table.len();
        let mut weights = vec![0.0; n];
        let mut hot = vec![false; n];
        let k = z.table.ranks_for_mass(hot_mass);
        for (r, &p) in z.page_of_rank.iter().enumerate() {
            weights[p as usize] = z.table.prob(r);
            hot[p as usize] = r < k;
        }
        let top_decile = top_decile(&weights);
        Self {
            weights,
            hot,
            top_decile,
        }
    }

    pub fn pages(&self) -> usize {
        self.weights.len()
    }

    pub fn hot_pages(&self) -> u64 {
        self.hot.iter().filter(|&&h| h).count() as u64
    }
}

/// Where a workload's pages are, summarised against its access model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Placement {
    pub pages_by_node: BTreeMap<i32, u64>,
    /// Pages `move_pages` reported with a negative status (not present, ...).
    pub not_present_pages: u64,
    pub fast_pages: u64,
    pub hot_pages: u64,
    pub hot_fast_pages: u64,
    /// hot_fast_pages / hot_pages (0 without a hot set).
    pub hot_residency: f64,
    /// Share of the hottest tenth of the pages (by access probability) on
    /// fast nodes.
    pub top10_residency: f64,
    /// Σ p(page) · [page on a fast node].
    pub hit_ratio: f64,
    /// Σ p(page) · latency(node of page); a not-present page counts at
    /// `absent_latency_ns`.
    pub model_latency_ns: f64,
}

impl Placement {
    /// `status[i]` is the node of page i, or negative (-errno) when the page
    /// is not present; `fast_nodes` is sorted.
    pub fn compute(
        status: &[i32],
        model: &AccessModel,
        fast_nodes: &[i32],
        latency_ns: impl Fn(i32) -> f64,
        absent_latency_ns: f64,
    ) -> Self {
        assert_eq!(status.len(), model.pages());
        let mut p = Placement::default();
        // Latency lookups per node, not per page.
        let mut lat_cache: BTreeMap<i32, f64> = BTreeMap::new();
        let (mut top, mut top_fast) = (0u64, 0u64);
        for (((&node, &w), &hot), &is_top) in status
            .iter()
            .zip(&model.weights)
            .zip(&model.hot)
            .zip(&model.top_decile)
        {
            p.hot_pages += u64::from(hot);
            top += u64::from(is_top);
            if node < 0 {
                p.not_present_pages += 1;
                p.model_latency_ns += w * absent_latency_ns;
                continue;
            }
            *p.pages_by_node.entry(node).or_default() += 1;
            let fast = fast_nodes.binary_search(&node).is_ok();
            if fast {
                p.fast_pages += 1;
                p.hot_fast_pages += u64::from(hot);
                top_fast += u64::from(is_top);
                p.hit_ratio += w;
            }
            let lat = *lat_cache.entry(node).or_insert_with(|| latency_ns(node));
            p.model_latency_ns += w * lat;
        }
        // The weights sum to 1 up to rounding.
        p.hit_ratio = p.hit_ratio.clamp(0.0, 1.0);
        p.top10_residency = if top == 0 {
            0.0
        } else {
            top_fast as f64 / top as f64
        };
        p.hot_residency = if p.hot_pages == 0 {
            0.0
        } else {
            p.hot_fast_pages as f64 / p.hot_pages as f64
        };
        p
    }
}

/// One report line, as printed to stdout (one JSON object per line).
#[derive(Debug, Clone, Serialize)]
pub struct Report<'a> {
    /// Seconds since the process started.
    pub t_s: f64,
    pub name: &'a str,
    pub mode: &'a str,
    pub pages: u64,
    /// Node → pages on it (keys are strings in JSON).
    pub pages_by_node: &'a BTreeMap<i32, u64>,
    pub not_present_pages: u64,
    pub fast_pages: u64,
    pub hot_pages: u64,
    pub hot_fast_pages: u64,
    pub hot_residency: f64,
    pub top10_residency: f64,
    pub hit_ratio: f64,
    pub model_latency_ns: f64,
    /// Accesses per second since the previous report.
    pub accesses_per_s: f64,
    /// Total accesses since the access phase began.
    pub accesses: u64,
    /// True on the last line (end of run or signal).
    #[serde(rename = "final")]
    pub is_final: bool,
}

impl<'a> Report<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        t_s: f64,
        name: &'a str,
        mode: &'a str,
        placement: &'a Placement,
        pages: u64,
        accesses_per_s: f64,
        accesses: u64,
        is_final: bool,
    ) -> Self {
        Report {
            t_s,
            name,
            mode,
            pages,
            pages_by_node: &placement.pages_by_node,
            not_present_pages: placement.not_present_pages,
            fast_pages: placement.fast_pages,
            hot_pages: placement.hot_pages,
            hot_fast_pages: placement.hot_fast_pages,
            hot_residency: placement.hot_residency,
            top10_residency: placement.top10_residency,
            hit_ratio: placement.hit_ratio,
            model_latency_ns: placement.model_latency_ns,
            accesses_per_s,
            accesses,
            is_final,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn move_pages_queries_own_pages_and_reports_unmapped_ones() {
        let buf = vec![1u8; 2 * 4096];
        let page = ((buf.as_ptr() as usize + 4095) & !4095) as *mut libc::c_void;
        let mut status = [i32::MIN; 2];
        // SAFETY: one page of `buf`, and address 4096 (never mapped: a
        // status, not a fault).
        unsafe { move_pages(&[page, 4096 as *mut _], None, &mut status, 0) }.unwrap();
        assert!(status[0] >= 0, "own page on node {}", status[0]);
        assert!(status[1] < 0, "unmapped page: {}", status[1]);
        drop(buf);
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn node_lists() {
        let cases: &[(&str, Option<Vec<i32>>)] = &[
            ("0", Some(vec![0])),
            ("0\n", Some(vec![0])),
            ("0-1,3", Some(vec![0, 1, 3])),
            ("3,0-1", Some(vec![0, 1, 3])),
            ("0-2,1", Some(vec![0, 1, 2])),
            ("", Some(vec![])),
            ("\n", Some(vec![])),
            ("2-1", None),
            ("a", None),
            ("-1", None),
            ("0-", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_node_list(input).ok(), *want, "input {input:?}");
        }
    }

    #[test]
    fn latency_files() {
        assert_eq!(parse_latency_ns("130\n"), Some(130.0));
        assert_eq!(parse_latency_ns("0\n"), None);
        assert_eq!(parse_latency_ns(""), None);
        assert_eq!(parse_latency_ns("x"), None);
    }

    #[test]
    fn bounded_and_unit_stay_in_range() {
        assert_eq!(bounded(0, 10), 0);
        assert_eq!(bounded(u64::MAX, 10), 9);
        assert_eq!(bounded(u64::MAX / 2, 10), 4);
        assert_eq!(unit_f64(0), 0.0);
        assert!(unit_f64(u64::MAX) < 1.0);
    }

    #[test]
    fn zipf_masses() {
        // s = 1, n = 4: weights 1, 1/2, 1/3, 1/4; H = 25/12.
        let z = ZipfTable::new(4, 1.0);
        let h = 25.0 / 12.0;
        assert!(close(z.prob(0), 1.0 / h));
        assert!(close(z.prob(3), 0.25 / h));
        assert!(close(z.top_mass(2), 1.5 / h));
        assert!(close(z.top_mass(4), 1.0));
        assert!(close(z.top_mass(9), 1.0));
        assert_eq!(z.top_mass(0), 0.0);
        // top-1 mass = 0.48, top-2 = 0.72, top-3 = 0.88, top-4 = 1.
        assert_eq!(z.ranks_for_mass(0.4), 1);
        assert_eq!(z.ranks_for_mass(0.48), 1);
        assert_eq!(z.ranks_for_mass(0.5), 2);
        assert_eq!(z.ranks_for_mass(0.9), 4);
        // s = 0 is uniform.
        let u = ZipfTable::new(10, 0.0);
        assert!(close(u.top_mass(3), 0.3));
        assert_eq!(u.ranks_for_mass(0.9), 9);
    }

    #[test]
    fn zipf_rank_inverts_the_cdf() {
        let z = ZipfTable::new(4, 1.0);
        assert_eq!(z.rank(0.0), 0);
        assert_eq!(z.rank(0.479), 0);
        assert_eq!(z.rank(0.481), 1);
        assert_eq!(z.rank(0.89), 3);
        assert_eq!(z.rank(0.999_999), 3);
    }

    #[test]
    fn zipf_sampling_matches_the_table() {
        let z = ZipfTable::new(1000, 0.99);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let n = 200_000;
        let mut top10 = 0;
        for _ in 0..n {
            if z.rank(unit_f64(rng.next_u64())) < 10 {
                top10 += 1;
            }
        }
        let got = top10 as f64 / n as f64;
        assert!(
            (got - z.top_mass(10)).abs() < 0.01,
            "{got} vs {}",
            z.top_mass(10)
        );
    }

    #[test]
    fn permutation_is_deterministic_and_complete() {
        let a = rank_permutation(1000, 1);
        assert_eq!(a, rank_permutation(1000, 1));
        assert_ne!(a, rank_permutation(1000, 2));
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, (0..1000).collect::<Vec<u32>>());
        // Spread: the 10 most popular pages are not all in the first tenth.
        assert!(a[..10].iter().any(|&p| p >= 100));
    }

    #[test]
    fn zipf_hot_set_holds_ninety_percent() {
        let z = ZipfPages::new(10_000, 0.99, 3);
        let m = AccessModel::zipf(&z, ZIPF_HOT_MASS);
        let k = z.table.ranks_for_mass(ZIPF_HOT_MASS);
        assert_eq!(m.hot_pages(), k as u64);
        let hot_mass: f64 = m
            .weights
            .iter()
            .zip(&m.hot)
            .filter(|(_, &h)| h)
            .map(|(w, _)| w)
            .sum();
        assert!(hot_mass >= ZIPF_HOT_MASS);
        assert!(hot_mass - z.table.prob(k - 1) < ZIPF_HOT_MASS);
        assert!(close(m.weights.iter().sum::<f64>(), 1.0));
        // The most popular page is the one the permutation names.
        assert!(close(
            m.weights[z.page_of_rank[0] as usize],
            z.table.prob(0)
        ));
        assert!(m.hot[z.page_of_rank[0] as usize]);
    }

    #[test]
    fn alias_table_encodes_the_weights() {
        let z = ZipfPages::new(1000, 0.99, 5);
        let m = AccessModel::zipf(&z, ZIPF_HOT_MASS);
        let a = AliasTable::new(&m.weights);
        let p = a.implied_probs();
        assert!(close(p.iter().sum::<f64>(), 1.0));
        for (got, want) in p.iter().zip(&m.weights) {
            assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        }
        // Hand-built: weights 3:1 over two items.
        let a = AliasTable::new(&[3.0, 1.0]);
        let p = a.implied_probs();
        assert!(close(p[0], 0.75) && close(p[1], 0.25));
        // A zero weight is never drawn.
        let a = AliasTable::new(&[0.0, 1.0, 1.0]);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        assert!((0..10_000).all(|_| a.sample(rng.next_u64()) != 0));
    }

    #[test]
    fn alias_sampling_matches_the_zipf_mass() {
        let z = ZipfPages::new(1000, 0.99, 9);
        let m = AccessModel::zipf(&z, ZIPF_HOT_MASS);
        let a = AliasTable::new(&m.weights);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
        let n = 200_000;
        let hot = (0..n).filter(|_| m.hot[a.sample(rng.next_u64())]).count();
        let got = hot as f64 / n as f64;
        let want = z.table.top_mass(z.table.ranks_for_mass(ZIPF_HOT_MASS));
        assert!((got - want).abs() < 0.01, "{got} vs {want}");
    }

    #[test]
    fn hotset_placement() {
        // 8 pages, hot set = pages 2..6; nodes: 0 fast, 1 slow, -14 = -EFAULT.
        let m = AccessModel::hotset(8, 2, 4);
        let status = [0, 1, 0, 1, 0, 0, -14, 1];
        let lat = |n: i32| if n == 0 { 100.0 } else { 300.0 };
        let p = Placement::compute(&status, &m, &[0], lat, 300.0);
        assert_eq!(p.pages_by_node, BTreeMap::from([(0, 4), (1, 3)]));
        assert_eq!(p.not_present_pages, 1);
        assert_eq!(p.fast_pages, 4);
        assert_eq!(p.hot_pages, 4);
        assert_eq!(p.hot_fast_pages, 3);
        assert!(close(p.hot_residency, 0.75));
        assert!(close(p.hit_ratio, 0.75));
        assert!(close(p.model_latency_ns, 0.75 * 100.0 + 0.25 * 300.0));
    }

    #[test]
    fn weighted_hit_ratio() {
        // Hand-built weights: a page-weighted and an access-weighted view differ.
        let m = AccessModel {
            weights: vec![0.7, 0.2, 0.1],
            hot: vec![true, true, false],
            top_decile: vec![true, false, false],
        };
        let p = Placement::compute(
            &[1, 0, 0],
            &m,
            &[0],
            |n| if n == 0 { 130.0 } else { 250.0 },
            250.0,
        );
        assert_eq!(p.fast_pages, 2);
        assert!(close(p.hot_residency, 0.5));
        assert_eq!(p.top10_residency, 0.0, "the hottest page is on node 1");
        assert!(close(p.hit_ratio, 0.3));
        assert!(close(p.model_latency_ns, 0.7 * 250.0 + 0.3 * 130.0));
        // Two fast nodes.
        let p = Placement::compute(&[1, 0, 2], &m, &[0, 1], |_| 100.0, 100.0);
        assert!(close(p.hit_ratio, 0.9));
        assert_eq!(p.hot_fast_pages, 2);
    }

    #[test]
    fn report_json_fields() {
        let m = AccessModel::hotset(2, 0, 1);
        let pl = Placement::compute(&[0, 1], &m, &[0], |_| 130.0, 250.0);
        let r = Report::new(1.5, "a", "hotset", &pl, 2, 10.0, 20, false);
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["pages_by_node"]["0"], 1);
        assert_eq!(v["pages_by_node"]["1"], 1);
        assert_eq!(v["hot_residency"], 1.0);
        assert_eq!(v["final"], false);
        for k in [
            "t_s",
            "name",
            "mode",
            "pages",
            "fast_pages",
            "hot_pages",
            "hot_fast_pages",
            "hit_ratio",
            "model_latency_ns",
            "accesses_per_s",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
    }
}
