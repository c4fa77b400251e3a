//! Promotion assist: tierd promotes for a container the kernel's promotion
//! has left under its target (issue 11, cold-hog).
//!
//! With `promotion = "kernel"` an under-target container gets its share
//! only through NUMA balancing, which promotes a lower-tier page at the
//! hint fault that follows its process's next scan pass. Passes over a
//! process come tens of seconds to a minute apart once its scan has backed
//! off (kernel/sched/fair.c `update_task_scan_period`, the per-VMA scan
//! delay and PID-activity filters of `task_numa_work`), so a newcomer's
//! hot pages left on the lower tier after one pass wait for the next one
//! while its share of DRAM is held by others (docs/NOTES.md "Promotion
//! assist"). After `assist_after_ms` under target − band with no page
//! promoted for it (by the kernel or tierd's recall), a container is
//! *assisted*: the daemon watches its processes with DAMON and promotes its
//! hot lower-tier regions itself, and the container claims room for the
//! hot bytes DAMON found there ([`ContainerSnapshot::lower_hot_bytes`]).
//! Only when its lower tier is in use, where the probe counts hint faults
//! by node: at least a sixteenth of its band (as base pages) faulted there
//! since it went under. A hog whose lower tier holds only its cold bulk,
//! left under its target by kswapd, was otherwise assisted every 10–40 s
//! in cold-hog for DAMON to find nothing (docs/NOTES.md "Session 52: an
//! assist needs lower-tier use").
//! Under its target it stays assisted until DAMON, once warmed up, finds
//! nothing hot on its lower tier (then the clock starts again: its
//! lower-tier pages are cold, and watching them costs a kdamond for
//! nothing). At its target it stays assisted for the within-share swap
//! ([`crate::ContainerPlan::swap_bytes`]) while DAMON finds at least a
//! quarter of its band hot on its lower tier, its pages do not ping-pong
//! and the swap moves at least that much every few cycles
//! ([`SWAP_IDLE_CYCLES`]: regions DAMON calls hot but whose lower-tier pages
//! the mover does not find are not worth a kdamond); over its target the
//! assist ends.
//!
//! With [`crate::PolicyParams::arrival_assist`], a container inside its band
//! but a quarter band or more under its target, within
//! [`crate::PolicyParams::hot_swap_window_ms`] of an arrival or exit, is
//! waited for and assisted the same way (`Progress::short`): the kernel's
//! scan of a newcomer backs off to a minute while it climbs, and one that
//! stops inside its band keeps its first touches (cold) on DRAM and part of
//! its hot set below, with no hint fault to find them by (docs/NOTES.md
//! "Session 55: the arrival assist").
//!
//! Pure: time is the policy clock (`PolicyState::clock_ms`).

use std::collections::BTreeMap;

use crate::model::{AssistState, ContainerId};

/// At its target, an assisted container stays assisted for the
/// within-share swap only while it is promoted at least a quarter of its
/// band (`Progress::swap_min_bytes`) in one of this many consecutive
/// cycles. A logged cold-hog run (docs/NOTES.md "DAMON at 20 ms samples")
/// kept its kdamond for 18 s after the newcomer's hot set was on DRAM,
/// swapping under 1 MiB a cycle.
pub const SWAP_IDLE_CYCLES: u32 = 3;

/// The within-share swap demotes only fast-tier pages untouched for this
/// long, milliseconds (MGLRU generations at least this old, after an
/// aging: `cgroupctl::LruGen::evict_cold`). Its promotion half then fits
/// the room those pages left. Without the floor the swap evicted the
/// oldest generation whatever its age: for a Zipf cache tenant those are
/// pages touched every second or two, traded for tail regions DAMON
/// called hot, 100 MiB down and up again in a cycle (docs/NOTES.md
/// "DAMON's grain per kdamond; the within-share swap takes only cold
/// pages").
pub const SWAP_MIN_AGE_MS: u64 = 30_000;

/// With the daemon's `limits.hot_swap_idle` at 0, the hot swap
/// ([`crate::ContainerPlan::swap_bytes`] of a container that is not
/// assisted) demotes only fast-tier pages in MGLRU generations at least
/// this old, milliseconds (by default it takes pages untouched for 500 ms
/// instead: a cache tenant touching every page it holds on DRAM several
/// times a second has next to nothing idle for a cycle; docs/NOTES.md
/// "Session 84"). MGLRU's eviction takes only generations
/// older than the two youngest, so after the swap's own aging those hold
/// the pages untouched since the aging before: with a swap (an aging) every
/// cycle, pages idle for a cycle (2 s at the default interval). The pages
/// it brings up faulted within the daemon's hot latency (250 ms by
/// default) of a NUMA-balancing scan; a page of the hottest tenth of the
/// demo's cache tenants (touched ~11 times a second) is idle for 2 s with
/// a chance of 10⁻⁹, one at the equal split's edge (1.5/s) 5 % of the time.
/// 5 s (until session 75) found ~1 MiB a swap in those tenants, whose
/// least popular page is touched about once a second (docs/NOTES.md
/// "Session 75").
pub const HOT_SWAP_MIN_AGE_MS: u64 = 1_500;

/// Most doublings of the wait before an assist after assists that found
/// nothing hot on the lower tier (10 s → 20, 40, 80 s at the default
/// `assist_after`). A container left just under target − band with only
/// cold pages on the lower tier was assisted every 20 s, each time a
/// kdamond start and a DAMON warm-up for nothing (docs/NOTES.md "The CXL
/// cold-hog on 7.3 with DAMON_STAT off": 152 ms of DAMON per cycle).
pub const MAX_COLD_BACKOFF: u32 = 3;

/// One container's input to [`observe`].
pub(crate) struct Progress {
    pub id: ContainerId,
    /// Under target − band this cycle (with lower-tier bytes to promote).
    pub under: bool,
    /// Within its band this cycle, with bytes on the lower tier.
    pub at_target: bool,
    /// Within its band but a quarter band or more under its target, within
    /// the window after an arrival or exit, with the arrival assist on:
    /// waited for and assisted as if under its target.
    pub short: bool,
    /// Thrash damping engaged (its pages ping-pong).
    pub damped: bool,
    /// Bytes promoted for it since the last cycle (kernel and tierd).
    pub promoted_bytes: u64,
    /// DAMON's hot bytes on the lower tier, once warmed up (`None`: not
    /// watched, or not long enough).
    pub lower_hot_bytes: Option<u64>,
    /// Below this many hot lower-tier bytes an assisted container at its
    /// target is no longer assisted (a quarter of its band).
    pub swap_min_bytes: u64,
    /// Fewer bytes promoted in a cycle are not progress (a sixteenth of its
    /// band): a stalled NUMA-balancing scan still promotes a few pages a
    /// second, which must not hold the assist off.
    pub progress_min_bytes: u64,
    /// Hint faults on its lower-tier pages this cycle
    /// ([`crate::ContainerSnapshot::lower_hint_faults`]; `None`: unknown).
    pub lower_hint_faults: Option<u64>,
}

/// Bytes a lower-tier hint fault stands for in the evidence an assist
/// needs ([`observe`]): a base page (a THP's fault counts once, so the
/// count errs low).
pub const FAULT_BYTES: u64 = 4096;

/// Records one cycle; returns whether each container (in input order) is
/// assisted. `after_ms` 0 turns the assist off. An assisted container that
/// reaches its target stays assisted (for the within-share swap) while
/// DAMON finds at least `swap_min_bytes` hot on its lower tier and its
/// pages do not ping-pong; over its target, or once that ends, its state is
/// forgotten, like that of containers absent from `cs`.
pub(crate) fn observe(
    st: &mut BTreeMap<ContainerId, AssistState>,
    now_ms: u64,
    cs: &[Progress],
    after_ms: u64,
) -> Vec<bool> {
    let out: Vec<bool> = cs
        .iter()
        .map(|c| {
            if after_ms == 0 {
                return false;
            }
            if !c.under && !c.short {
                let Some(s) = st.get_mut(&c.id).filter(|s| s.assisted) else {
                    return false;
                };
                if !c.at_target
                    || c.damped
                    || c.lower_hot_bytes.is_some_and(|h| h < c.swap_min_bytes)
                {
                    return false;
                }
                if c.promoted_bytes >= c.swap_min_bytes.max(1) {
                    s.idle_swaps = 0;
                } else {
                    s.idle_swaps += 1;
                }
                return s.idle_swaps < SWAP_IDLE_CYCLES;
            }
            let s = st.entry(c.id).or_insert(AssistState {
                since_ms: now_ms,
                assisted: false,
                idle_swaps: 0,
                cold_ends: 0,
                lower_faults: 0,
            });
            s.idle_swaps = 0;
            s.lower_faults = s
                .lower_faults
                .saturating_add(c.lower_hint_faults.unwrap_or(0));
            if s.assisted {
                if c.lower_hot_bytes == Some(0) {
                    // Nothing hot down there: back off for another period,
                    // twice as long after each such assist in a row, and
                    // wait for new evidence of use.
                    s.assisted = false;
                    s.since_ms = now_ms;
                    s.cold_ends = s.cold_ends.saturating_add(1);
                    s.lower_faults = 0;
                } else if c.promoted_bytes >= c.progress_min_bytes.max(1) {
                    // This assist moves pages: the cold streak is over.
                    s.cold_ends = 0;
                }
            } else if c.promoted_bytes >= c.progress_min_bytes.max(1) {
                // The kernel (or recall) is still bringing it up.
                s.since_ms = now_ms;
                s.cold_ends = 0;
            } else {
                let wait = after_ms << s.cold_ends.saturating_sub(1).min(MAX_COLD_BACKOFF);
                // Its lower tier in use since it went under: without hint
                // faults there (when the probe counts them) its lower-tier
                // pages are cold, and a kdamond would only confirm it.
                let in_use = c.lower_hint_faults.is_none()
                    || s.lower_faults.saturating_mul(FAULT_BYTES) >= c.progress_min_bytes.max(1);
                if now_ms.saturating_sub(s.since_ms) >= wait && in_use {
                    s.assisted = true;
                }
            }
            s.assisted
        })
        .collect();
    st.retain(|id, _| {
        cs.iter()
            .zip(&out)
            .any(|(c, &a)| c.id == *id && (c.under || c.short || a))
    });
    out
}
