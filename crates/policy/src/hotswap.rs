//! When the hot swap may run ([`crate::ContainerPlan::swap_bytes`] of a
//! container that is not assisted, with [`crate::PolicyParams::hot_swap`]).
//!
//! Each swap costs an MGLRU aging of the container on the fast node (a walk
//! of its page tables: `cgroupctl::LruGen::evict_cold`, ~80 ms for a
//! 600 MiB tenant under emulation) and a recall of its known-hot pages.
//! Swapping every cycle made the age phase 7× and tierd's CPU 2× the plain
//! defaults' in the demo, and in a steady state much of the volume was
//! tail pages for tail pages (docs/NOTES.md "Hot swap"). So the swap is
//! paced ([`Pace`]):
//! - within [`crate::PolicyParams::hot_swap_window_ms`] of the last arrival
//!   or exit ([`Pace::Window`]; window 0: always), when the set of
//!   containers has just changed what the swap repairs (a newcomer that
//!   took DRAM first come with pages it never touches again, an incumbent
//!   cut to its share in seconds that lost hot pages with its cold ones):
//!   at least a quarter band of known-hot pages below, at most once every
//!   [`HOT_SWAP_PERIOD_MS`], so one aging serves several cycles' pages;
//! - after it ([`Pace::Steady`]): what is left to repair comes in the bursts
//!   of lower-tier hint faults of the kernel's NUMA-balancing passes (tens
//!   of seconds apart), while between them the known-hot pages trickle in a
//!   few hundred at a time, each trickle an aging for little. So a swap
//!   waits for a whole band of known-hot pages below and runs at most once
//!   every [`HOT_SWAP_STEADY_PERIOD_MS`] (docs/NOTES.md "Session 75").
//!
//! Pure: time is the policy clock (`PolicyState::clock_ms`).

use crate::model::{ContainerId, HotSwapState, Membership};

/// Within the window, a container's hot swaps are at least this far apart,
/// milliseconds (three cycles at the default 2 s interval).
pub const HOT_SWAP_PERIOD_MS: u64 = 6_000;

/// After the window, a container's hot swaps are at least this far apart,
/// milliseconds: about one NUMA-balancing pass over a large process, whose
/// hint faults bring the known-hot pages a swap trades in.
pub const HOT_SWAP_STEADY_PERIOD_MS: u64 = 30_000;

/// How the hot swap runs this cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pace {
    /// [`crate::PolicyParams::hot_swap`] is off.
    #[default]
    Off,
    /// Within the window after an arrival or exit.
    Window,
    /// After the window.
    Steady,
}

impl Pace {
    /// The pace: off without the hot swap, else by the window.
    pub(crate) fn of(hot_swap: bool, window_open: bool) -> Self {
        match (hot_swap, window_open) {
            (false, _) => Pace::Off,
            (true, true) => Pace::Window,
            (true, false) => Pace::Steady,
        }
    }

    /// The fewest known-hot bytes below worth a swap for a container whose
    /// band is `band` bytes: a quarter band within the window, a whole band
    /// after it; `None` when off.
    pub(crate) fn min_known_bytes(self, band: u64) -> Option<u64> {
        match self {
            Pace::Off => None,
            Pace::Window => Some((band / 4).max(1)),
            Pace::Steady => Some(band.max(1)),
        }
    }

    /// A container's swaps are at least this far apart, milliseconds.
    pub fn period_ms(self) -> u64 {
        match self {
            Pace::Off | Pace::Window => HOT_SWAP_PERIOD_MS,
            Pace::Steady => HOT_SWAP_STEADY_PERIOD_MS,
        }
    }
}

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
    }
    window_ms == 0 || members.changed_within(now_ms, window_ms)
}

/// Whether container `id` may swap at `now_ms` at pace `pace`: it has not
/// swapped in the last [`Pace::period_ms`].
pub(crate) fn due(st: &HotSwapState, id: ContainerId, now_ms: u64, pace: Pace) -> bool {
    pace != Pace::Off
        && st
            .last_ms
            .get(&id)
            .is_none_or(|&t| now_ms.saturating_sub(t) >= pace.period_ms())
}

/// Records that container `id` swapped at `now_ms`.
pub(crate) fn record(st: &mut HotSwapState, id: ContainerId, now_ms: u64) {
    st.last_ms.insert(id, now_ms);
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
    fn a_container_swaps_at_most_once_a_period() {
        let (mut st, mut m) = (HotSwapState::default(), Membership::default());
        let (a, b): (ContainerId, ContainerId) = (1, 2);
        let w = Pace::Window;
        cycle(&mut st, &mut m, 0, &[a, b], 60_000);
        assert!(due(&st, a, 0, w));
        record(&mut st, a, 2_000);
        assert!(!due(&st, a, 2_000 + HOT_SWAP_PERIOD_MS - 1, w));
        assert!(due(&st, a, 2_000 + HOT_SWAP_PERIOD_MS, w));
        assert!(due(&st, b, 2_000, w), "per container");
        // After the window, the steady period.
        let s = Pace::Steady;
        assert!(!due(&st, a, 2_000 + HOT_SWAP_STEADY_PERIOD_MS - 1, s));
        assert!(due(&st, a, 2_000 + HOT_SWAP_STEADY_PERIOD_MS, s));
        assert!(!due(&st, b, 2_000, Pace::Off), "off: never");
        // A container that leaves and comes back is due at once.
        cycle(&mut st, &mut m, 4_000, &[b], 60_000);
        cycle(&mut st, &mut m, 6_000, &[a, b], 60_000);
        assert!(due(&st, a, 6_000, w));
    }

    #[test]
    fn the_steady_pace_waits_for_a_whole_band() {
        assert_eq!(Pace::of(false, true), Pace::Off);
        assert_eq!(Pace::of(true, true), Pace::Window);
        assert_eq!(Pace::of(true, false), Pace::Steady);
        assert_eq!(Pace::Off.min_known_bytes(100), None);
        assert_eq!(Pace::Window.min_known_bytes(100), Some(25));
        assert_eq!(Pace::Steady.min_known_bytes(100), Some(100));
        assert_eq!(Pace::Window.min_known_bytes(0), Some(1));
    }
}
