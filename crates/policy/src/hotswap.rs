//! When the hot swap may run ([`crate::ContainerPlan::swap_bytes`] of a
//! container that is not assisted, with [`crate::PolicyParams::hot_swap`]).
//!
//! Each swap costs an MGLRU aging of the container on the fast node (a walk
//! of its page tables: `cgroupctl::LruGen::evict_cold`) and a recall of its
//! known-hot pages. Kept always on, much of its volume in a steady state
//! was tail pages for tail pages (docs/NOTES.md "Hot swap"). What the swap
//! repairs is made when the set of containers changes: a newcomer that took
//! DRAM first come with pages it never touches again, an incumbent cut to
//! its share in seconds that lost hot pages with its cold ones. So the swap
//! is bounded three times:
//! - in time: only within [`crate::PolicyParams::hot_swap_window_ms`] of
//!   the last arrival or exit (0: always), and for a container that was
//!   quiet when that window closed, within
//!   [`crate::PolicyParams::hot_swap_extension_ms`] more, until its first
//!   run of swaps past the close ends ([`container_open`]);
//! - in rate: a container swaps at most once every [`HOT_SWAP_PERIOD_MS`].
//!   A cycle apart is what makes a swap find anything: its aging leaves
//!   evictable the pages untouched since the aging before (the previous
//!   swap's), and a cache tenant touches every page about once a second.
//!   Six seconds apart (until session 75), a swap found ~1 MiB idle
//!   whatever it asked, and so kept aging for little (docs/NOTES.md
//!   "Session 75");
//! - in volume: a container trades at most its lower-tier bytes that aged
//!   reclaim did not put there ([`unranked_below`]).
//!
//! Pure: time is the policy clock (`PolicyState::clock_ms`).

use crate::model::{ContainerId, ContainerSnapshot, HotSwapState, Membership};

/// A container's hot swaps are at least this far apart, milliseconds
/// (every cycle at the default 2 s interval, every other at 1 s).
pub const HOT_SWAP_PERIOD_MS: u64 = 1_500;

/// Says whether the hot swap's window is open at `now_ms`: an arrival or
/// exit (`members`, recorded this cycle; the first cycle counts as one: the
/// daemon has not seen the placement before) less than `window_ms` ago.
/// `window_ms` 0: always open. `changed` (the set changed this cycle) drops
/// the swap records of containers that are gone.
pub(crate) fn window_open(
    st: &mut HotSwapState,
    members: &Membership,
    changed: bool,
    now_ms: u64,
    window_ms: u64,
) -> bool {
    if changed {
        st.last_ms.retain(|&id, _| members.contains(id));
        // A change cuts and fills containers anew: their swaps may find
        // idle pages again.
        st.fruitless.clear();
    }
    window_ms == 0 || members.changed_within(now_ms, window_ms)
}

/// A container that swapped less than this long before the hot swap's
/// window closed was still finding known-hot pages below: its hint faults
/// were flowing and the window served it, so it gets no extension
/// ([`container_open`]), ms.
pub const HOT_SWAP_QUIET_MS: u64 = 10_000;

/// Whether the hot swap's window is open for container `id` at `now_ms`:
/// within `window_ms` of the last arrival or exit (`members`; 0: always),
/// or past that close but less than `extension_ms` after it for a
/// container that was quiet at the close (no swap in the
/// [`HOT_SWAP_QUIET_MS`] before it) and has not yet ended a run of swaps
/// since: once it has swapped past the close, its window closes at the
/// first cycle 2 × [`HOT_SWAP_PERIOD_MS`] after its last swap.
///
/// Why: NUMA balancing backs a task's scan off to
/// `numa_balancing_scan_period_max_ms` (60 s by default,
/// Documentation/admin-guide/sysctl/kernel.rst) once its faults settle, so
/// a newcomer that reached its share ~30 s after arriving may see no hint
/// fault, and so no known-hot page below, for up to a minute more; its
/// first burst after that is what the swap exists for (docs/NOTES.md
/// "Session 82"). A container whose swaps ran up to the close (a Zipf
/// tenant's tail faults all the time) trades tail for tail: no extension.
pub(crate) fn container_open(
    st: &HotSwapState,
    members: &Membership,
    id: ContainerId,
    now_ms: u64,
    window_ms: u64,
    extension_ms: u64,
) -> bool {
    if window_ms == 0 {
        return true;
    }
    let Some(changed) = members.changed_ms else {
        return false;
    };
    let close = changed.saturating_add(window_ms);
    if now_ms < close {
        return true;
    }
    if now_ms >= close.saturating_add(extension_ms) {
        return false;
    }
    match st.last_ms.get(&id) {
        None => true,
        // Its run of swaps past the close: open while it goes on.
        Some(&t) if t >= close => now_ms.saturating_sub(t) < 2 * HOT_SWAP_PERIOD_MS,
        Some(&t) => t.saturating_add(HOT_SWAP_QUIET_MS) <= close,
    }
}

/// The least idle supply a hot swap must find, as a fraction of what the
/// container holds on the fast tier, for the swap to count as fruitful
/// ([`fruitless`]; the other bound is a quarter of its band).
///
/// Why a tenth: a page touched `r` times a second stays untouched for the
/// idle test `w` (`limits.hot_swap_idle`) with a chance of e^(−r·w), so a
/// container whose fast-tier pages are all hot shows a small idle fraction
/// however many bytes that is, and its swaps trade hot pages for hot ones:
/// with `w` = 250 ms, noisy-neighbour's all-hot 800 MiB tenant (~12
/// touches a second per page) found 2–9 % of its ~490 MiB idle swap after
/// swap, where identical-cache's Zipf tenants found 8–22 % while their
/// swaps repaired a cut (docs/NOTES.md "Session 85").
pub const HOT_SWAP_MIN_IDLE_FRACTION: f64 = 0.1;

/// Records what container `id`'s swap of the last cycle found idle
/// (`idle`, bytes: every page that passed the idle test, taken or not;
/// `None`: it did not swap) against `min` (the larger of a quarter of its
/// band, the least a swap asks for, and [`HOT_SWAP_MIN_IDLE_FRACTION`] of
/// its fast-tier bytes), and says whether its hot swaps have ended:
/// `stop_after` (> 0) swaps in a row found less than `min`.
pub(crate) fn fruitless(
    st: &mut HotSwapState,
    id: ContainerId,
    idle: Option<u64>,
    min: u64,
    stop_after: u32,
) -> bool {
    match idle {
        Some(b) if b < min => *st.fruitless.entry(id).or_insert(0) += 1,
        Some(_) => {
            st.fruitless.remove(&id);
        }
        None => {}
    }
    stop_after > 0 && st.fruitless.get(&id).is_some_and(|&n| n >= stop_after)
}

/// Whether container `id` may swap at `now_ms`: it has not swapped in the
/// last [`HOT_SWAP_PERIOD_MS`].
pub(crate) fn due(st: &HotSwapState, id: ContainerId, now_ms: u64) -> bool {
    st.last_ms
        .get(&id)
        .is_none_or(|&t| now_ms.saturating_sub(t) >= HOT_SWAP_PERIOD_MS)
}

/// Records that container `id` swapped at `now_ms`.
pub(crate) fn record(st: &mut HotSwapState, id: ContainerId, now_ms: u64) {
    st.last_ms.insert(id, now_ms);
}

/// The most a hot swap of each container in `cs` may trade this cycle,
/// bytes, in `cs`'s order: its lower-tier bytes (`slow_bytes`) less those
/// that reached the lower tier by aged reclaim, which `st.ranked_below`
/// tracks (it grows by `aged_demoted_bytes` and is cut to `slow_bytes`,
/// since the kernel's promotions, the swap's own promotion half and frees
/// take pages back from below). Containers not in `cs` (sorted by id)
/// are forgotten.
///
/// Why: reclaim that ages a memcg before it evicts (MGLRU,
/// Documentation/admin-guide/mm/multigen_lru.rst) demotes the pages
/// untouched longest, so what it put below is colder than anything the
/// container keeps on the fast tier, and a swap can only trade its tail
/// for its tail there. What may hide hot pages below is the rest: a
/// newcomer's allocation that spilled, or kswapd's demotion of it in
/// allocation order while it filled. In identical-cache the tenant cut to
/// its share by tierd's reclaim swapped 17 thousand pages each way for no
/// gain (hit ratio 0.961 → 0.963, its hottest tenth already 0.997), half
/// the migrations its swaps cost (docs/NOTES.md "Session 88").
pub(crate) fn unranked_below(st: &mut HotSwapState, cs: &[&ContainerSnapshot]) -> Vec<u64> {
    st.ranked_below
        .retain(|id, _| cs.binary_search_by_key(id, |c| c.id).is_ok());
    cs.iter()
        .map(|c| {
            let r = st.ranked_below.entry(c.id).or_insert(0);
            *r = r.saturating_add(c.aged_demoted_bytes).min(c.slow_bytes);
            c.slow_bytes - *r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One cycle: the containers recorded, then the window asked.
    fn cycle(
        st: &mut HotSwapState,
        m: &mut Membership,
        now: u64,
        ids: &[ContainerId],
        w: u64,
    ) -> bool {
        let changed = m.observe(now, ids);
        window_open(st, m, changed, now, w)
    }

    #[test]
    fn the_window_opens_at_each_arrival_or_exit_and_closes_after_it() {
        let (mut st, mut m) = (HotSwapState::default(), Membership::default());
        let (a, b): (ContainerId, ContainerId) = (1, 2);
        assert!(cycle(&mut st, &mut m, 0, &[a], 60_000), "first cycle");
        assert!(cycle(&mut st, &mut m, 59_999, &[a], 60_000));
        assert!(!cycle(&mut st, &mut m, 60_000, &[a], 60_000));
        assert!(cycle(&mut st, &mut m, 90_000, &[a, b], 60_000), "arrival");
        assert!(!cycle(&mut st, &mut m, 150_000, &[a, b], 60_000));
        assert!(cycle(&mut st, &mut m, 160_000, &[b], 60_000), "exit");
        assert!(cycle(&mut st, &mut m, 1 << 40, &[b], 0), "0: always open");
    }

    #[test]
    fn a_container_quiet_at_the_close_keeps_its_window_until_its_next_run_ends() {
        let (mut st, mut m) = (HotSwapState::default(), Membership::default());
        let (a, b, c): (ContainerId, ContainerId, ContainerId) = (1, 2, 3);
        let (w, ext) = (60_000, 60_000);
        cycle(&mut st, &mut m, 0, &[a, b, c], w);
        // a swapped up to the close; b swapped long before it; c never.
        record(&mut st, a, 55_000);
        record(&mut st, b, 20_000);
        let open = |st: &HotSwapState, id, now| container_open(st, &m, id, now, w, ext);
        assert!(open(&st, a, 59_999), "inside the window");
        assert!(!open(&st, a, 60_000), "its swaps ran up to the close");
        assert!(
            open(&st, b, 60_000) && open(&st, c, 60_000),
            "quiet at the close"
        );
        // b's burst: a run of swaps every 2 s from 100 s, then none.
        for t in [100_000, 102_000, 104_000] {
            assert!(open(&st, b, t));
            record(&mut st, b, t);
        }
        assert!(open(&st, b, 106_000), "one cycle without a swap");
        assert!(!open(&st, b, 107_000), "the run has ended");
        assert!(!open(&st, b, 115_000), "and stays closed");
        assert!(open(&st, c, 119_999));
        assert!(!open(&st, c, 120_000), "the extension's end");
        assert!(!container_open(&st, &m, c, 60_000, w, 0), "no extension");
        assert!(container_open(&st, &m, a, 1 << 40, 0, 0), "0: always open");
        // An exit opens the window again for everyone.
        cycle(&mut st, &mut m, 130_000, &[b, c], w);
        assert!(container_open(&st, &m, b, 130_000, w, ext));
    }

    #[test]
    fn swaps_that_find_nothing_idle_end_until_the_next_change() {
        let (mut st, mut m) = (HotSwapState::default(), Membership::default());
        let (a, b): (ContainerId, ContainerId) = (1, 2);
        cycle(&mut st, &mut m, 0, &[a], 60_000);
        let min = 4 << 20;
        assert!(!fruitless(&mut st, a, Some(0), min, 3));
        assert!(!fruitless(&mut st, a, None, min, 3), "no swap: no count");
        assert!(!fruitless(&mut st, a, Some(min - 1), min, 3));
        // A swap that found enough idle starts the count again.
        assert!(!fruitless(&mut st, a, Some(min), min, 3));
        for _ in 0..2 {
            assert!(!fruitless(&mut st, a, Some(1 << 20), min, 3));
        }
        assert!(
            fruitless(&mut st, a, Some(1 << 20), min, 3),
            "three in a row"
        );
        assert!(fruitless(&mut st, a, None, min, 3), "and stays ended");
        assert!(!fruitless(&mut st, a, None, min, 0), "0: never");
        // An arrival: it may swap again.
        cycle(&mut st, &mut m, 10_000, &[a, b], 60_000);
        assert!(!fruitless(&mut st, a, None, min, 3));
    }

    #[test]
    fn a_container_swaps_at_most_once_a_period() {
        let (mut st, mut m) = (HotSwapState::default(), Membership::default());
        let (a, b): (ContainerId, ContainerId) = (1, 2);
        cycle(&mut st, &mut m, 0, &[a, b], 60_000);
        assert!(due(&st, a, 0));
        record(&mut st, a, 2_000);
        assert!(!due(&st, a, 2_000 + HOT_SWAP_PERIOD_MS - 1));
        assert!(due(&st, a, 2_000 + HOT_SWAP_PERIOD_MS));
        assert!(due(&st, b, 2_000), "per container");
        // A container that leaves and comes back is due at once.
        cycle(&mut st, &mut m, 4_000, &[b], 60_000);
        cycle(&mut st, &mut m, 6_000, &[a, b], 60_000);
        assert!(due(&st, a, 6_000));
    }
}
