//! Fair-share placement policy for tiered memory: pure functions from a
//! [`Snapshot`] (plus [`PolicyState`]) to a [`Plan`]. No I/O, no clock, no
//! async, no randomness: the same inputs always give the same plan.
//!
//! The control law (docs/DESIGN.md "Policy semantics") is documented on [`solve`].

mod assist;
mod bucket;
mod demand;
mod gap;
mod hotswap;
mod membership;
mod model;
mod solve;
mod steady;
mod thrash;
pub mod unmanaged;

pub use assist::{HOT_SWAP_MIN_AGE_MS, SWAP_MIN_AGE_MS};
pub use demand::{DemandHolds, DEMAND_DECAY_PER_S, DEMAND_HOLD_MISSES};
pub use hotswap::{HOT_SWAP_MIN_IDLE_FRACTION, HOT_SWAP_PERIOD_MS, HOT_SWAP_QUIET_MS};
pub use model::*;
pub use solve::solve;

#[cfg(test)]
mod tests;
