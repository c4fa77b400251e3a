//! Fair-share placement policy for tiered memory: pure functions from a
//! [`Snapshot`] (plus [`PolicyState`]) to a [`Plan`]. No I/O, no clock, no async.

mod model;
pub use model::*;

/// Solves one cycle. Placeholder until the solver lands.
pub fn solve(_snapshot: &Snapshot, _params: &PolicyParams, _state: &mut PolicyState) -> Plan {
    Plan::default()
}
