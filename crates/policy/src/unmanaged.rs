//! Demotion of cold memory that no container holds (docs/DESIGN.md
//! "Policy semantics", memory outside the containers).
//!
//! The fast tier also holds memory outside every managed container: the
//! root cgroup's page cache (binaries, libraries, files read once at boot),
//! cgroups no policy matches, kernel memory. Under plain kernel tiering
//! kswapd reclaims globally and demotes the cold part of it as soon as the
//! tenants fill DRAM; under tierd kswapd hardly runs (the headroom is kept
//! free) and tierd demotes only its containers, so those pages kept their
//! DRAM, and the pool the containers share was smaller by tens of MiB
//! (docs/NOTES.md "DRAM outside the containers").
//!
//! The rule: when the fast tier needs room this cycle ([`Plan::need_bytes`]
//! of the cycle's solve), the room comes first from unmanaged pages old
//! enough to be cold (untouched for [`UNMANAGED_MIN_AGE_MS`] by default; the daemon
//! evicts only generations that old), then from the over-target containers.
//! What was evicted leaves [`Snapshot::fast_unmanaged_bytes`]
//! ([`credit`]), so the pool grows by it and the containers' demotion
//! shrinks by it. Nothing is demoted when no room is needed: a cold
//! unmanaged page on a fast tier nobody wants costs nothing.
//!
//! An attempt that finds less than [`UNMANAGED_MIN_BYTES`] cold waits
//! [`UNMANAGED_RETRY_MS`] before the next: each attempt ages the memcgs
//! (a page-table walk of their processes), and pages become cold only as
//! time passes.
//!
//! Pure: time is the policy clock (`PolicyState::clock_ms`).
//!
//! [`Plan::need_bytes`]: crate::Plan::need_bytes
//! [`Snapshot::fast_unmanaged_bytes`]: crate::Snapshot::fast_unmanaged_bytes

use crate::model::Snapshot;

/// Default minimum age of an unmanaged page that tierd demotes, in ms
/// (`daemon.unmanaged_min_age`): its MGLRU
/// generation was made at least this long ago and it was not touched at the
/// aging that followed (the idea of MGLRU's `min_ttl_ms`,
/// Documentation/admin-guide/mm/multigen_lru.rst). Pages of the host's own
/// services in use are younger.
pub const UNMANAGED_MIN_AGE_MS: u64 = 30_000;

/// An attempt that finds less than this many cold bytes (1 MiB) counts as
/// finding none.
pub const UNMANAGED_MIN_BYTES: u64 = 1 << 20;

/// Wait after an attempt that found (almost) nothing cold, in ms.
pub const UNMANAGED_RETRY_MS: u64 = 30_000;

/// State of the unmanaged demotion between cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnmanagedState {
    /// Policy clock (ms) before which no attempt is made.
    retry_at_ms: u64,
}

/// Bytes of unmanaged fast-tier memory to demote this cycle: the room the
/// fast tier needs (`need_bytes`, bytes), at most what unmanaged memory
/// holds there (`unmanaged_bytes`), and 0 while waiting after a fruitless
/// attempt or when it is under [`UNMANAGED_MIN_BYTES`]. `now_ms` is the
/// policy clock.
pub fn ask(st: &UnmanagedState, now_ms: u64, need_bytes: u64, unmanaged_bytes: u64) -> u64 {
    if now_ms < st.retry_at_ms {
        return 0;
    }
    let want = need_bytes.min(unmanaged_bytes);
    if want < UNMANAGED_MIN_BYTES {
        0
    } else {
        want
    }
}

/// Records an attempt that asked `asked` bytes and found `taken` cold
/// (bytes): under [`UNMANAGED_MIN_BYTES`] of a real ask, no attempt for
/// [`UNMANAGED_RETRY_MS`].
pub fn observe(st: &mut UnmanagedState, now_ms: u64, asked: u64, taken: u64) {
    if asked >= UNMANAGED_MIN_BYTES && taken < UNMANAGED_MIN_BYTES {
        st.retry_at_ms = now_ms.saturating_add(UNMANAGED_RETRY_MS);
    }
}

/// The snapshot after `taken` bytes of unmanaged memory left the fast tier:
/// they are no longer unmanaged fast-tier bytes, so the pool the containers
/// share grows by them and the room needed shrinks by them. Counted rather
/// than read again, because freed pages first sit on the per-CPU free lists,
/// which node meminfo does not count as free.
pub fn credit(snapshot: &mut Snapshot, taken: u64) {
    snapshot.fast_unmanaged_bytes = snapshot.fast_unmanaged_bytes.saturating_sub(taken);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn asks_the_need_up_to_what_unmanaged_memory_holds() {
        let st = UnmanagedState::default();
        assert_eq!(ask(&st, 0, 20 * MIB, 50 * MIB), 20 * MIB);
        assert_eq!(ask(&st, 0, 80 * MIB, 50 * MIB), 50 * MIB);
        assert_eq!(
            ask(&st, 0, 0, 50 * MIB),
            0,
            "no room needed, nothing demoted"
        );
        assert_eq!(ask(&st, 0, MIB / 2, 50 * MIB), 0, "under the minimum");
    }

    #[test]
    fn a_fruitless_attempt_waits_then_retries() {
        let mut st = UnmanagedState::default();
        observe(&mut st, 10_000, 20 * MIB, 8 * MIB);
        assert_eq!(
            ask(&st, 12_000, 20 * MIB, 50 * MIB),
            20 * MIB,
            "it found some"
        );
        observe(&mut st, 12_000, 20 * MIB, MIB / 4);
        assert_eq!(
            ask(&st, 12_000 + UNMANAGED_RETRY_MS - 1, 20 * MIB, 50 * MIB),
            0
        );
        assert_eq!(
            ask(&st, 12_000 + UNMANAGED_RETRY_MS, 20 * MIB, 50 * MIB),
            20 * MIB
        );
        // No real ask: nothing learnt.
        let mut quiet = UnmanagedState::default();
        observe(&mut quiet, 5_000, 0, 0);
        assert_eq!(quiet, UnmanagedState::default());
    }
}
