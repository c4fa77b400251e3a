//! The least time between a demotion's two MGLRU agings, per container
//! ([`crate::ContainerPlan::aging_gap_ms`]).
//!
//! The gap ([`crate::PolicyParams::aging_gap_ms`], 500 ms) keeps a
//! container's hottest pages when it is cut to its share: the second aging
//! leaves evictable only what went untouched between the two page-table
//! walks. It has two exceptions:
//! - while a newcomer fills its share, nobody waits (its allocations would
//!   spill to the lower tier while the incumbents age);
//! - a container whose gapped demotion takes next to nothing, cycle after
//!   cycle, loses its gap until it is back within its band. A cache tenant
//!   whose DRAM pages are all touched within half a second gives up
//!   ~0.1–0.2 MiB per aging under the gap: 36 MiB over its target, it came
//!   down 24 MiB in 50 s, every cycle running two agings for nothing while
//!   its neighbour waited under its target (docs/NOTES.md "Session 82",
//!   "Session 83"). Back to back (~0.1 s apart under emulation) the tail
//!   of its popularity is untouched and goes.
//!
//! Pure: the state is what each container held and was asked last cycle.

use crate::model::{AgingGapState, AgingGapTrack, ContainerId};

/// A demotion that brought the container's fast-tier bytes down by less
/// than `asked / SLOW_FRACTION` took next to nothing.
const SLOW_FRACTION: u64 = 4;

/// Records container `id`'s fast-tier bytes (`fast_bytes`) and this
/// cycle's demotion (`asked`, bytes, the hot swap's half left out: it
/// promotes as much as it demotes), and says whether its gap is lifted:
/// `after` (> 0; [`crate::PolicyParams::aging_gap_lift_after`]) cycles in a
/// row asked a demotion and its fast-tier bytes fell by less than a
/// [`SLOW_FRACTION`]th of it by the next. Lifted, it stays lifted while
/// the container is asked to demote; a cycle that asks nothing (within its
/// band) gives the gap back. The caller passes an ask too small to be
/// written (the daemon skips demotions under a few MiB) as 0: falling
/// short of it says nothing about the gap.
pub(crate) fn lifted(
    st: &mut AgingGapState,
    id: ContainerId,
    fast_bytes: u64,
    asked: u64,
    after: u32,
) -> bool {
    let t = st.containers.entry(id).or_default();
    // Once lifted, the gap stays off until the container is back within
    // its band: the fast falls it makes then are the lifted gap's, not a
    // sign the gap would do. (A first record has asked nothing.)
    if t.asked_bytes > 0 && (after == 0 || t.slow < after) {
        if t.fast_bytes.saturating_sub(fast_bytes) < t.asked_bytes / SLOW_FRACTION {
            t.slow += 1;
        } else {
            t.slow = 0;
        }
    }
    if asked == 0 {
        t.slow = 0;
    }
    *t = AgingGapTrack {
        fast_bytes,
        asked_bytes: asked,
        slow: t.slow,
    };
    after > 0 && t.slow >= after
}

/// Forgets the containers not in `ids` (sorted).
pub(crate) fn retain(st: &mut AgingGapState, ids: &[ContainerId]) {
    st.containers.retain(|id, _| ids.binary_search(id).is_ok());
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn three_slow_demotions_in_a_row_lift_the_gap_until_within_band() {
        let mut st = AgingGapState::default();
        let id = 7;
        // 36 MiB over: asked 36, fell 0.2 MiB a cycle.
        assert!(!lifted(&mut st, id, 461 * MIB, 36 * MIB, 3), "first ask");
        assert!(!lifted(&mut st, id, 461 * MIB - MIB / 5, 36 * MIB, 3));
        assert!(!lifted(&mut st, id, 461 * MIB - 2 * MIB / 5, 36 * MIB, 3));
        assert!(
            lifted(&mut st, id, 461 * MIB - 3 * MIB / 5, 36 * MIB, 3),
            "3rd slow"
        );
        // Lifted, it falls fast, and stays lifted while it is asked.
        assert!(lifted(&mut st, id, 440 * MIB, 10 * MIB, 3), "fell 20 of 36");
        assert!(!lifted(&mut st, id, 430 * MIB, 0, 3), "within its band");
        assert!(!lifted(&mut st, id, 430 * MIB, 8 * MIB, 3), "a new count");
    }

    #[test]
    fn a_demotion_that_keeps_pace_keeps_the_gap() {
        let mut st = AgingGapState::default();
        let mut fast = 600 * MIB;
        for _ in 0..10 {
            assert!(!lifted(&mut st, 1, fast, 32 * MIB, 3));
            fast -= 8 * MIB; // a quarter of what was asked
        }
    }

    #[test]
    fn an_ask_of_nothing_resets_the_count() {
        let mut st = AgingGapState::default();
        let f = 500 * MIB;
        lifted(&mut st, 1, f, 20 * MIB, 3);
        lifted(&mut st, 1, f, 20 * MIB, 3);
        lifted(&mut st, 1, f, 0, 3); // 2nd slow, then within band: reset
        lifted(&mut st, 1, f, 20 * MIB, 3);
        assert!(
            !lifted(&mut st, 1, f, 20 * MIB, 3),
            "one slow since the reset"
        );
        assert!(!lifted(&mut st, 1, f, 20 * MIB, 3), "two");
        assert!(lifted(&mut st, 1, f, 20 * MIB, 3), "three");
        assert!(lifted(&mut st, 1, f, 20 * MIB, 3), "lifted while asked");
        let mut never = AgingGapState::default();
        for _ in 0..10 {
            assert!(!lifted(&mut never, 1, f, 20 * MIB, 0), "0: never lifted");
        }
        retain(&mut st, &[2]);
        assert!(
            !lifted(&mut st, 1, f, 20 * MIB, 3),
            "forgotten: a first ask"
        );
    }
}
