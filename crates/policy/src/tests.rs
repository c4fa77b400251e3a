//! One unit test (or a few) per rule of docs/DESIGN.md "Policy semantics", with
//! exact numbers. Property tests live in `tests/properties.rs`.

use crate::solve::{water_fill, FillItem};
use crate::*;
use proptest::prelude::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Params that get out of the way: no headroom, no band, effectively
/// unlimited rates, hot-set demand (the rules with hot sets are the
/// general case; usage demand is hot_bytes = None). Each test turns on what
/// it exercises.
fn params() -> PolicyParams {
    PolicyParams {
        demand: DemandSource::HotSet,
        headroom_bytes: 0,
        band_fraction: 0.0,
        band_min_bytes: 0,
        container_demote_bytes_per_s: 1 << 50,
        global_demote_bytes_per_s: 1 << 50,
        container_promote_bytes_per_s: 1 << 50,
        global_promote_bytes_per_s: 1 << 50,
        burst_s: 1.0,
        thrash: ThrashParams::default(),
        need_window_ms: 10_000,
        tierd_promotes: false,
        steady_ms: 10_000,
        hot_below_bytes_per_s: 256 << 10,
        scan_pace_ms: 30_000,
        assist_after_ms: 0,
        band_trade: false,
        hot_swap: true,
        hot_swap_window_ms: 0,
        hot_swap_extension_ms: 0,
        hot_swap_stop_after: 0,
        arrival_assist: false,
        arrival_window_ms: 0,
        arrival_lookahead: false,
        share_min: true,
        aging_gap_ms: 0,
        aging_gap_lift_after: 0,
    }
}

fn c(id: ContainerId, fast_bytes: u64, slow_bytes: u64) -> ContainerSnapshot {
    ContainerSnapshot {
        id,
        name: format!("c{id}"),
        fast_bytes,
        slow_bytes,
        hot_bytes: None,
        policy: ContainerPolicy::default(),
        migrations: Default::default(),
        recallable_bytes: 0,
        lower_hot_bytes: None,
        lower_hint_faults: None,
        known_hot_below_bytes: 0,
        swap_idle_bytes: None,
        aged_demoted_bytes: 0,
        warm_bytes: None,
    }
}

trait With {
    fn hot(self, b: u64) -> Self;
    fn low(self, s: Share) -> Self;
    fn high(self, s: Share) -> Self;
    fn weight(self, w: u32) -> Self;
    fn pinned(self) -> Self;
}

impl With for ContainerSnapshot {
    fn hot(mut self, b: u64) -> Self {
        self.hot_bytes = Some(b);
        self
    }
    fn low(mut self, s: Share) -> Self {
        self.policy.local_low = s;
        self
    }
    fn high(mut self, s: Share) -> Self {
        self.policy.local_high = s;
        self
    }
    fn weight(mut self, w: u32) -> Self {
        self.policy.weight = w;
        self
    }
    fn pinned(mut self) -> Self {
        self.policy.opt_out = true;
        self
    }
}

fn snap(fast_capacity_bytes: u64, containers: Vec<ContainerSnapshot>) -> Snapshot {
    Snapshot {
        fast_capacity_bytes,
        fast_unmanaged_bytes: 0,
        elapsed_ms: 0,
        containers,
        hot_below_bytes: None,
    }
}

fn run(s: &Snapshot, p: &PolicyParams) -> Plan {
    solve(s, p, &mut PolicyState::default())
}

fn target(plan: &Plan, id: ContainerId) -> u64 {
    plan.get(id).unwrap().target_bytes
}

// ---- Pool and opt-out -------------------------------------------------------

#[test]
fn pool_excludes_unmanaged_headroom_and_pinned_fast_bytes() {
    let mut s = snap(
        10 * GIB,
        vec![c(1, 2 * GIB, GIB).pinned(), c(2, GIB, 20 * GIB)],
    );
    s.fast_unmanaged_bytes = GIB;
    let p = PolicyParams {
        headroom_bytes: GIB,
        ..params()
    };
    let plan = run(&s, &p);
    assert_eq!(plan.pool_bytes, 6 * GIB);
    let pinned = plan.get(1).unwrap();
    assert_eq!(pinned.state, PlacementState::Pinned);
    assert_eq!(pinned.target_bytes, 2 * GIB);
    assert_eq!(pinned.memory_low_bytes, 3 * GIB);
    assert_eq!((pinned.demote_bytes, pinned.promote_bytes), (0, 0));
    // The only shared container gets the whole pool, not the pinned DRAM.
    assert_eq!(target(&plan, 2), 6 * GIB);
}

#[test]
fn pinned_container_is_never_demoted_even_far_above_any_share() {
    let s = snap(GIB, vec![c(1, 4 * GIB, 0).pinned(), c(2, GIB, GIB)]);
    let plan = run(&s, &params());
    assert_eq!(plan.pool_bytes, 0);
    let pinned = plan.get(1).unwrap();
    assert_eq!(
        (pinned.state, pinned.demote_bytes),
        (PlacementState::Pinned, 0)
    );
    // Nothing left for the shared container: demote all its fast bytes.
    let other = plan.get(2).unwrap();
    assert_eq!(other.target_bytes, 0);
    assert_eq!(other.state, PlacementState::OverTarget);
    assert_eq!(other.demote_bytes, GIB);
}

#[test]
fn pool_saturates_at_zero() {
    let mut s = snap(GIB, vec![c(1, 0, GIB)]);
    s.fast_unmanaged_bytes = 2 * GIB;
    let plan = run(&s, &params());
    assert_eq!(plan.pool_bytes, 0);
    assert_eq!(target(&plan, 1), 0);
    assert!(!plan.guarantees_scaled);
}

// ---- Guarantee ----------------------------------------------------------------

#[test]
fn guarantee_is_min_of_demand_and_local_low() {
    // A: demand 4 GiB, low 3 GiB → 3 GiB. B: demand 2 GiB, low 5 GiB → 2 GiB.
    let s = snap(
        100 * GIB,
        vec![
            c(1, 0, 4 * GIB).low(Share::Bytes(3 * GIB)),
            c(2, 0, 8 * GIB).hot(2 * GIB).low(Share::Bytes(5 * GIB)),
        ],
    );
    let plan = run(&s, &params());
    assert_eq!(plan.get(1).unwrap().guarantee_bytes, 3 * GIB);
    assert_eq!(plan.get(2).unwrap().guarantee_bytes, 2 * GIB);
    assert_eq!(plan.get(2).unwrap().demand_bytes, 2 * GIB);
}

#[test]
fn guarantee_holds_against_a_heavier_neighbour() {
    // Weight 1 vs 1000, but A's 6 GiB local_low comes first; only the other
    // 4 GiB are split by weight (1:1000).
    let s = snap(
        10 * GIB,
        vec![
            c(1, 0, 20 * GIB).weight(1).low(Share::Bytes(6 * GIB)),
            c(2, 0, 20 * GIB).weight(1000),
        ],
    );
    let plan = run(&s, &params());
    // floor(4 GiB / 1001) plus the one spare byte of rounding (by position).
    let extra_a = 4 * GIB / 1001 + 1;
    assert_eq!(target(&plan, 1), 6 * GIB + extra_a);
    assert_eq!(target(&plan, 2), 10 * GIB - 6 * GIB - extra_a);
}

#[test]
fn guarantees_over_pool_are_scaled_in_proportion_and_flagged() {
    // Σg = 9 GiB > 6 GiB pool: scaled by 2/3 → 4 GiB and 2 GiB.
    let s = snap(
        6 * GIB,
        vec![
            c(1, 0, 6 * GIB).low(Share::Bytes(6 * GIB)),
            c(2, 0, 3 * GIB).low(Share::Bytes(3 * GIB)),
        ],
    );
    let plan = run(&s, &params());
    assert!(plan.guarantees_scaled);
    assert_eq!(plan.get(1).unwrap().guarantee_bytes, 4 * GIB);
    assert_eq!(plan.get(2).unwrap().guarantee_bytes, 2 * GIB);
    assert_eq!(target(&plan, 1), 4 * GIB);
    assert_eq!(target(&plan, 2), 2 * GIB);

    // Exactly at the pool: not scaled.
    let s = snap(9 * GIB, s.containers);
    let plan = run(&s, &params());
    assert!(!plan.guarantees_scaled);
    assert_eq!(target(&plan, 1), 6 * GIB);
}

// ---- Share: weighted water-filling -------------------------------------------

#[test]
fn water_filling_splits_by_weight_exactly() {
    let s = snap(
        12 * GIB,
        vec![
            c(1, 0, 100 * GIB).weight(100),
            c(2, 0, 100 * GIB).weight(200),
            c(3, 0, 100 * GIB).weight(300),
        ],
    );
    let plan = run(&s, &params());
    assert_eq!(target(&plan, 1), 2 * GIB);
    assert_eq!(target(&plan, 2), 4 * GIB);
    assert_eq!(target(&plan, 3), 6 * GIB);
}

#[test]
fn water_filling_redistributes_what_a_capped_container_leaves() {
    // Weights 1:1:2 of 12 GiB would be 3/3/6, but A wants only 1 GiB:
    // the 11 GiB left split 1:2 → B 11/3, C 22/3 (integer bytes, sum exact).
    let s = snap(
        12 * GIB,
        vec![
            c(1, 0, GIB).weight(1),
            c(2, 0, 100 * GIB).weight(1),
            c(3, 0, 100 * GIB).weight(2),
        ],
    );
    let plan = run(&s, &params());
    assert_eq!(target(&plan, 1), GIB);
    let (b, cc) = (target(&plan, 2), target(&plan, 3));
    assert_eq!(b + cc, 11 * GIB);
    assert_eq!(b, 11 * GIB / 3 + 1); // the 1 spare byte of rounding
    assert_eq!(cc, 22 * GIB / 3);
}

#[test]
fn local_high_caps_the_share() {
    let s = snap(
        10 * GIB,
        vec![c(1, 0, 10 * GIB).high(Share::Bytes(GIB)), c(2, 0, 10 * GIB)],
    );
    let plan = run(&s, &params());
    assert_eq!(plan.get(1).unwrap().local_high_bytes, GIB);
    assert_eq!(target(&plan, 1), GIB);
    assert_eq!(target(&plan, 2), 9 * GIB);
}

#[test]
fn work_conserving_gives_unused_capacity_to_others() {
    // A's hot set is 1 GiB: B gets the other 9 GiB, not its "half".
    let s = snap(10 * GIB, vec![c(1, 0, 8 * GIB).hot(GIB), c(2, 0, 20 * GIB)]);
    let plan = run(&s, &params());
    assert_eq!(target(&plan, 1), GIB);
    assert_eq!(target(&plan, 2), 9 * GIB);

    // When everyone is satisfied each gets its whole demand, and the rest of
    // the pool stays unallocated.
    let s = snap(10 * GIB, vec![c(1, 0, GIB), c(2, 0, 2 * GIB)]);
    let plan = run(&s, &params());
    assert_eq!(target(&plan, 1), GIB);
    assert_eq!(target(&plan, 2), 2 * GIB);
}

#[test]
fn water_fill_rounding_sums_to_budget_exactly() {
    let items: Vec<FillItem> = (1..=3)
        .map(|_| FillItem {
            room_bytes: 100,
            weight: 1,
        })
        .collect();
    assert_eq!(water_fill(10, &items), vec![4, 3, 3]);
    assert_eq!(water_fill(1_000, &items), vec![100, 100, 100]);
    assert_eq!(water_fill(0, &items), vec![0, 0, 0]);
    assert_eq!(water_fill(7, &[]), Vec::<u64>::new());
}

#[test]
fn zero_weight_counts_as_one() {
    let s = snap(
        2 * GIB,
        vec![c(1, 0, 10 * GIB).weight(0), c(2, 0, 10 * GIB).weight(1)],
    );
    let plan = run(&s, &params());
    assert_eq!(target(&plan, 1), GIB);
    assert_eq!(target(&plan, 2), GIB);
}

#[test]
fn fraction_shares_resolve_against_usage() {
    // Usage 4 GiB: low 50% → 2 GiB, high 75% → 3 GiB.
    let s = snap(
        100 * GIB,
        vec![c(1, GIB, 3 * GIB)
            .low(Share::Fraction(0.5))
            .high(Share::Fraction(0.75))],
    );
    let plan = run(&s, &params());
    let p = plan.get(1).unwrap();
    assert_eq!(p.local_low_bytes, 2 * GIB);
    assert_eq!(p.local_high_bytes, 3 * GIB);
    assert_eq!(p.guarantee_bytes, 2 * GIB);
    assert_eq!(p.target_bytes, 3 * GIB);

    // local_low above local_high is clamped down to it.
    let s = snap(
        100 * GIB,
        vec![c(1, GIB, 3 * GIB)
            .low(Share::Fraction(0.9))
            .high(Share::Fraction(0.5))],
    );
    let p = run(&s, &params()).get(1).unwrap().clone();
    assert_eq!(p.local_low_bytes, 2 * GIB);
    assert_eq!(p.local_high_bytes, 2 * GIB);
    assert_eq!(p.target_bytes, 2 * GIB);
}

#[test]
fn hot_bytes_above_usage_are_capped_at_usage() {
    let s = snap(100 * GIB, vec![c(1, GIB, GIB).hot(5 * GIB)]);
    let plan = run(&s, &params());
    assert_eq!(plan.get(1).unwrap().demand_bytes, 2 * GIB);
    assert_eq!(target(&plan, 1), 2 * GIB);
}

// ---- Hysteresis -----------------------------------------------------------------

/// One container whose target is exactly 1 GiB (the whole pool), with
/// `fast_bytes` on DRAM and 4 GiB on CXL, and a 100 MiB band.
fn one_gib_target(fast_bytes: u64) -> (Snapshot, PolicyParams) {
    let s = snap(GIB, vec![c(1, fast_bytes, 4 * GIB)]);
    let p = PolicyParams {
        band_min_bytes: 100 * MIB,
        ..params()
    };
    (s, p)
}

#[test]
fn no_move_inside_the_band() {
    for fast in [
        GIB - 100 * MIB,
        GIB - 50 * MIB,
        GIB,
        GIB + 50 * MIB,
        GIB + 100 * MIB,
    ] {
        let (s, p) = one_gib_target(fast);
        let plan = run(&s, &p);
        let c = plan.get(1).unwrap();
        assert_eq!(c.target_bytes, GIB);
        assert_eq!(c.state, PlacementState::AtTarget, "fast = {fast}");
        assert_eq!((c.demote_bytes, c.promote_bytes), (0, 0));
        // Protected up to the target itself; above it (inside the band) not.
        let want = if fast <= GIB { fast + 4 * GIB } else { 0 };
        assert_eq!(c.memory_low_bytes, want, "fast = {fast}");
    }
}

#[test]
fn only_containers_not_above_their_band_may_fall_short() {
    for (fast, state, may) in [
        (GIB - 300 * MIB, PlacementState::UnderTarget, true),
        (GIB - 50 * MIB, PlacementState::AtTarget, true),
        (GIB + 50 * MIB, PlacementState::AtTarget, true),
        (GIB + 300 * MIB, PlacementState::OverTarget, false),
    ] {
        let (s, p) = one_gib_target(fast);
        let c = run(&s, &p).get(1).unwrap().clone();
        assert_eq!((c.state, c.may_fall_short()), (state, may), "fast = {fast}");
    }
    let s = snap(GIB, vec![c(1, GIB / 2, GIB).pinned()]);
    assert!(!run(&s, &params()).get(1).unwrap().may_fall_short());
}

#[test]
fn band_is_the_larger_of_minimum_and_fraction() {
    // 20% of 1 GiB > 100 MiB: 150 MiB over target is still inside the band.
    let (s, p) = one_gib_target(GIB + 150 * MIB);
    let p = PolicyParams {
        band_fraction: 0.2,
        ..p
    };
    assert_eq!(run(&s, &p).get(1).unwrap().state, PlacementState::AtTarget);
}

#[test]
fn demotion_goes_to_target_not_to_the_band_edge() {
    let (s, p) = one_gib_target(GIB + 500 * MIB);
    let plan = run(&s, &p);
    let c = plan.get(1).unwrap();
    assert_eq!(c.state, PlacementState::OverTarget);
    assert_eq!(c.demote_bytes, 500 * MIB);
    assert_eq!(c.promote_bytes, 0);
    assert_eq!(c.memory_low_bytes, 0);
}

#[test]
fn promotion_below_band_is_capped_by_slow_bytes() {
    // Pool 10 GiB, demand = usage = 200 MiB fast + 300 MiB slow: target
    // 500 MiB, shortfall 300 MiB = everything on the slow tier.
    let s = snap(10 * GIB, vec![c(1, 200 * MIB, 300 * MIB)]);
    let p = PolicyParams {
        band_min_bytes: 100 * MIB,
        ..params()
    };
    let plan = run(&s, &p);
    let c = plan.get(1).unwrap();
    assert_eq!(c.target_bytes, 500 * MIB);
    assert_eq!(c.state, PlacementState::UnderTarget);
    assert_eq!(c.promote_bytes, 300 * MIB);
    assert_eq!(c.memory_low_bytes, 500 * MIB);

    // Under target by more than the band, but with a smaller hot set the
    // budget is the shortfall only.
    let (s, p) = one_gib_target(GIB - 300 * MIB);
    let c = run(&s, &p).get(1).unwrap().clone();
    assert_eq!(c.state, PlacementState::UnderTarget);
    assert_eq!(c.promote_bytes, 300 * MIB);
}

#[test]
fn nothing_to_promote_without_slow_bytes() {
    let s = snap(10 * GIB, vec![c(1, GIB, 0)]);
    let p = PolicyParams {
        band_min_bytes: 0,
        ..params()
    };
    let c = run(&s, &p).get(1).unwrap().clone();
    assert_eq!(c.state, PlacementState::AtTarget);
    assert_eq!(c.promote_bytes, 0);
}

// ---- Rate limits --------------------------------------------------------------

fn limited(container_rate: u64, global_rate: u64) -> PolicyParams {
    PolicyParams {
        container_demote_bytes_per_s: container_rate,
        global_demote_bytes_per_s: global_rate,
        container_promote_bytes_per_s: container_rate,
        global_promote_bytes_per_s: global_rate,
        burst_s: 2.0,
        thrash: ThrashParams::default(),
        ..params()
    }
}

#[test]
fn token_bucket_first_cycle_burst_then_refill_then_cap() {
    // Wants to demote 9 GiB; 100 MiB/s, 2 s burst.
    let p = limited(100 * MIB, 1 << 50);
    let mut s = snap(GIB, vec![c(1, 10 * GIB, 0)]);
    let mut st = PolicyState::default();

    let plan = solve(&s, &p, &mut st);
    assert_eq!(
        plan.get(1).unwrap().demote_bytes,
        200 * MIB,
        "first cycle: one burst"
    );
    assert_eq!(st.demote_tokens[&1], 0.0);

    s.elapsed_ms = 500;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(
        plan.get(1).unwrap().demote_bytes,
        50 * MIB,
        "refill 100 MiB/s × 0.5 s"
    );

    s.elapsed_ms = 60_000;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(
        plan.get(1).unwrap().demote_bytes,
        200 * MIB,
        "capped at one burst"
    );

    // A container new to the state starts with a full bucket mid-run.
    s.elapsed_ms = 100;
    s.containers.push(c(2, 10 * GIB, 0));
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 10 * MIB);
    assert_eq!(plan.get(2).unwrap().demote_bytes, 200 * MIB);
}

#[test]
fn unspent_tokens_carry_over() {
    let p = limited(100 * MIB, 1 << 50);
    let mut s = snap(GIB, vec![c(1, GIB + 50 * MIB, 0).hot(GIB)]);
    let mut st = PolicyState::default();
    // Target = demand = 1 GiB; 50 MiB over; 150 MiB of tokens left.
    assert_eq!(
        solve(&s, &p, &mut st).get(1).unwrap().demote_bytes,
        50 * MIB
    );
    assert_eq!(st.demote_tokens[&1], (150 * MIB) as f64);
    s.containers[0].fast_bytes = 2 * GIB;
    s.elapsed_ms = 100;
    assert_eq!(
        solve(&s, &p, &mut st).get(1).unwrap().demote_bytes,
        160 * MIB
    );
}

#[test]
fn global_demote_bucket_is_spent_largest_excess_first() {
    // Global 100 MiB (50 MiB/s × 2 s). Excess: A 80, B 60, C 60 MiB (B before
    // C on the id tie). Ids are given out of order on purpose.
    let p = limited(1 << 40, 50 * MIB);
    let s = snap(
        3 * GIB,
        vec![
            c(3, GIB + 60 * MIB, 0).hot(GIB).high(Share::Bytes(GIB)),
            c(1, GIB + 80 * MIB, 0).hot(GIB).high(Share::Bytes(GIB)),
            c(2, GIB + 60 * MIB, 0).hot(GIB).high(Share::Bytes(GIB)),
        ],
    );
    let mut st = PolicyState::default();
    let plan = solve(&s, &p, &mut st);
    for id in 1..=3 {
        assert_eq!(plan.get(id).unwrap().state, PlacementState::OverTarget);
    }
    assert_eq!(plan.get(1).unwrap().demote_bytes, 80 * MIB);
    assert_eq!(plan.get(2).unwrap().demote_bytes, 20 * MIB);
    assert_eq!(plan.get(3).unwrap().demote_bytes, 0);
    assert_eq!(st.global_demote_tokens, 0.0);
}

#[test]
fn global_promote_bucket_is_spent_largest_shortfall_first() {
    // Pool 10 GiB, each wants all of its usage: shortfalls 300 and 500 MiB;
    // global promote budget 400 MiB.
    let p = limited(1 << 40, 200 * MIB);
    let s = snap(10 * GIB, vec![c(1, 0, 300 * MIB), c(2, 0, 500 * MIB)]);
    let plan = run(&s, &p);
    assert_eq!(plan.get(2).unwrap().promote_bytes, 400 * MIB);
    assert_eq!(plan.get(1).unwrap().promote_bytes, 0);
    assert_eq!(plan.get(1).unwrap().state, PlacementState::UnderTarget);
}

#[test]
fn per_container_promote_bucket_limits_promotion() {
    let p = limited(10 * MIB, 1 << 40);
    let s = snap(10 * GIB, vec![c(1, 0, GIB)]);
    assert_eq!(run(&s, &p).get(1).unwrap().promote_bytes, 20 * MIB);
}

#[test]
fn state_drops_containers_absent_from_the_snapshot() {
    let p = limited(MIB, MIB);
    let mut st = PolicyState::default();
    solve(
        &snap(GIB, vec![c(1, 0, 0), c(2, 0, 0), c(3, 0, 0)]),
        &p,
        &mut st,
    );
    assert_eq!(
        st.demote_tokens.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let mut s = snap(GIB, vec![c(2, 0, 0)]);
    s.elapsed_ms = 1_000;
    solve(&s, &p, &mut st);
    assert_eq!(st.demote_tokens.keys().copied().collect::<Vec<_>>(), [2]);
    assert_eq!(st.promote_tokens.keys().copied().collect::<Vec<_>>(), [2]);
}

// ---- Protection and plan lookup ----------------------------------------------

#[test]
fn memory_low_protects_at_and_under_target_only() {
    let p = PolicyParams {
        band_min_bytes: 10 * MIB,
        ..params()
    };
    // Pool 3 GiB, three equal shares of 1 GiB (local_high pins the targets).
    let hi = Share::Bytes(GIB);
    let s = snap(
        3 * GIB + 300 * MIB,
        vec![
            c(1, 2 * GIB, GIB).high(hi),         // over
            c(2, GIB, GIB).high(hi),             // at
            c(3, 100 * MIB, 2 * GIB).high(hi),   // under
            c(4, 300 * MIB, 100 * MIB).pinned(), // pinned
        ],
    );
    let plan = run(&s, &p);
    let st = |id| plan.get(id).unwrap().state;
    let low = |id| plan.get(id).unwrap().memory_low_bytes;
    assert_eq!(plan.pool_bytes, 3 * GIB);
    assert_eq!(st(2), PlacementState::AtTarget);
    assert_eq!(st(1), PlacementState::OverTarget);
    assert_eq!(low(1), 0);
    assert_eq!(st(4), PlacementState::Pinned);
    assert_eq!(low(4), 400 * MIB);
    assert_eq!(low(2), 2 * GIB);
    assert_eq!(st(3), PlacementState::UnderTarget);
    assert_eq!(low(3), 2 * GIB + 100 * MIB);
}

/// cold-hog's arrival: a hog alone at its target (all of an 800 MiB pool
/// would be its, 700 MiB used) is protected; a newcomer arrives with no
/// memory. While the newcomer grows, the hog is unprotected down to
/// the half it would keep, and nothing is demoted by tierd for it; once the
/// newcomer stops growing, the ordinary rule is back.
#[test]
fn an_arrival_unprotects_the_incumbents_while_the_newcomer_grows() {
    let p = PolicyParams {
        demand: DemandSource::Usage,
        band_min_bytes: 16 * MIB,
        arrival_window_ms: 30_000,
        ..params()
    };
    let mut st = PolicyState::default();
    let mut s = snap(800 * MIB, vec![c(1, 700 * MIB, 0)]);
    s.elapsed_ms = 2_000;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.get(1).unwrap().memory_low_bytes, 700 * MIB);
    assert!(plan.filling.is_empty());
    let low = |plan: &Plan, id| plan.get(id).unwrap().memory_low_bytes;
    // Arrival, 0 MiB: target 0, nothing to demote, the hog unprotected.
    s.containers.push(c(2, 0, 0));
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.filling, [2]);
    assert_eq!((target(&plan, 1), target(&plan, 2)), (700 * MIB, 0));
    assert_eq!(plan.get(1).unwrap().demote_bytes, 0);
    assert_eq!(low(&plan, 1), 0);
    // Growing, 30 MiB so far: its target is its usage and the hog, at its
    // own (700 MiB), is above the 400 MiB it would keep.
    s.containers[1] = c(2, 30 * MIB, 0);
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.filling, [2]);
    assert_eq!(plan.get(1).unwrap().state, PlacementState::AtTarget);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 0);
    assert_eq!(low(&plan, 1), 0);
    assert_eq!(low(&plan, 2), 30 * MIB, "the newcomer stays protected");
    // 300 MiB, the hog 20 MiB over its target (500 MiB): the newcomer is
    // protected by memory.low only. The hog's pages are all young, and with
    // the newcomer under memory.min kswapd could find nothing to take.
    s.containers[0] = c(1, 520 * MIB, 180 * MIB);
    s.containers[1] = c(2, 280 * MIB, 20 * MIB);
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.filling, [2]);
    assert_eq!(plan.get(1).unwrap().state, PlacementState::OverTarget);
    assert_eq!(low(&plan, 2), 300 * MIB);
    assert_eq!(plan.get(2).unwrap().memory_min_bytes, 0);
    // The hog would keep less than it holds only while it holds more: at
    // 400 MiB (kswapd demoted the rest) it is protected again.
    s.containers[0] = c(1, 400 * MIB, 300 * MIB);
    s.containers[1] = c(2, 380 * MIB, 20 * MIB);
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.filling, [2]);
    assert_eq!(low(&plan, 1), 700 * MIB);
    // Grown by no more than the band: filling is over.
    s.containers[1] = c(2, 380 * MIB, 36 * MIB);
    let plan = solve(&s, &p, &mut st);
    assert!(plan.filling.is_empty());
    assert_eq!(low(&plan, 1), 700 * MIB, "at its target, the ordinary rule");
    // Filling over, and the newcomer (target 400 MiB) holds more than its
    // own: memory.min for the hog, under its target.
    s.containers[1] = c(2, 416 * MIB, 16 * MIB);
    let plan = solve(&s, &p, &mut st);
    assert!(plan.filling.is_empty());
    assert_eq!(low(&plan, 2), 0);
    assert_eq!(plan.get(1).unwrap().memory_min_bytes, 700 * MIB);
}

/// The aging gaps of a plan, by container id.
fn gaps(plan: &Plan) -> Vec<(ContainerId, u64)> {
    plan.containers
        .iter()
        .map(|p| (p.id, p.aging_gap_ms))
        .collect()
}

/// A demotion's agings are spaced (`ContainerPlan::aging_gap_ms`) except
/// while a newcomer fills its share: then the cycles making room for its
/// allocations must not wait. Spaced on the daemon's first cycle (nobody
/// fills), back to back from the arrival while the newcomer grows by more
/// than the band a cycle, spaced again once it stops (the incumbent's
/// demotion to its share, an over-target container in a steady state), and
/// back to back always with a gap of 0.
#[test]
fn a_demotion_spaces_its_agings_unless_a_newcomer_fills() {
    let p = PolicyParams {
        demand: DemandSource::Usage,
        band_min_bytes: 16 * MIB,
        arrival_window_ms: 30_000,
        aging_gap_ms: 500,
        ..params()
    };
    let mut st = PolicyState::default();
    let mut s = snap(800 * MIB, vec![c(1, 700 * MIB, 0)]);
    s.elapsed_ms = 2_000;
    assert_eq!(gaps(&solve(&s, &p, &mut st)), [(1, 500)], "first cycle");
    s.containers.push(c(2, 0, 0));
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.filling, [2]);
    assert_eq!(gaps(&plan), [(1, 0), (2, 0)]);
    s.containers[0] = c(1, 500 * MIB, 200 * MIB);
    s.containers[1] = c(2, 250 * MIB, 100 * MIB);
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.filling, [2]);
    assert_eq!(gaps(&plan), [(1, 0), (2, 0)]);
    // Grown by less than the band: the incumbent, over its target, is cut
    // with spaced agings.
    s.containers[1] = c(2, 250 * MIB, 110 * MIB);
    let plan = solve(&s, &p, &mut st);
    assert!(plan.filling.is_empty());
    assert_eq!(plan.get(1).unwrap().state, PlacementState::OverTarget);
    assert_eq!(gaps(&plan), [(1, 500), (2, 500)]);
    let off = PolicyParams {
        aging_gap_ms: 0,
        ..p.clone()
    };
    assert_eq!(gaps(&solve(&s, &off, &mut st.clone())), [(1, 0), (2, 0)]);
}

/// An over-target container whose demotion under the gap takes next to
/// nothing (its fast-tier bytes fall by less than a quarter of what was
/// asked) for `aging_gap_lift_after` cycles in a row loses its gap, the
/// others keep theirs, and it gets the gap back once within its band
/// (docs/NOTES.md "Session 83").
#[test]
fn a_demotion_that_takes_nothing_under_the_gap_loses_it_until_within_band() {
    let p = PolicyParams {
        demand: DemandSource::Usage,
        band_min_bytes: 16 * MIB,
        arrival_window_ms: 30_000,
        aging_gap_ms: 500,
        aging_gap_lift_after: 3,
        ..params()
    };
    let mut st = PolicyState::default();
    // Two identical tenants on a 900 MiB pool, b 40 MiB over its share
    // and a under it: b is asked to demote every cycle.
    // a's hot pages below (recallable) claim the room.
    let mut s = snap(
        900 * MIB,
        vec![c(1, 410 * MIB, 200 * MIB), c(2, 490 * MIB, 120 * MIB)],
    );
    s.containers[0].recallable_bytes = 40 * MIB;
    s.elapsed_ms = 2_000;
    let mut lifted_at = None;
    for cycle in 0..6 {
        // b gives up 0.2 MiB a cycle.
        s.containers[1].fast_bytes = 490 * MIB - cycle * MIB / 5;
        let plan = solve(&s, &p, &mut st);
        let b = plan.get(2).unwrap();
        assert!(
            b.demote_bytes > 4 * MIB,
            "cycle {cycle}: b asked {}",
            b.demote_bytes
        );
        assert_eq!(plan.get(1).unwrap().aging_gap_ms, 500, "a keeps its gap");
        if b.aging_gap_ms == 0 && lifted_at.is_none() {
            lifted_at = Some(cycle);
        }
        if let Some(at) = lifted_at {
            assert_eq!(
                b.aging_gap_ms, 0,
                "cycle {cycle}: lifted at {at}, still asked"
            );
        }
    }
    // The first cycle asks; the next three find it slow.
    assert_eq!(lifted_at, Some(3));
    // Lifted, it comes down fast to its share: within the band, the gap
    // is back.
    s.containers[1].fast_bytes = 455 * MIB;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.get(2).unwrap().demote_bytes, 0);
    assert_eq!(gaps(&plan), [(1, 500), (2, 500)]);
}

/// Arrival lookahead: a newcomer filling its share and under its target
/// claims room for as much as it grew since the last cycle, up to its
/// target; the hog gives it on top of the headroom. Off: nothing more.
#[test]
fn a_filling_newcomer_claims_its_growth_with_the_arrival_lookahead() {
    let run_with = |lookahead| {
        let p = PolicyParams {
            demand: DemandSource::Usage,
            band_min_bytes: 16 * MIB,
            arrival_window_ms: 30_000,
            arrival_lookahead: lookahead,
            ..params()
        };
        let mut st = PolicyState::default();
        let mut s = snap(800 * MIB, vec![c(1, 780 * MIB, 0)]);
        s.elapsed_ms = 2_000;
        solve(&s, &p, &mut st);
        s.containers.push(c(2, 0, 0));
        solve(&s, &p, &mut st);
        // 100 MiB since the last cycle, 60 of it spilled to the lower
        // tier; the fast tier full.
        s.containers[0] = c(1, 760 * MIB, 20 * MIB);
        s.containers[1] = c(2, 40 * MIB, 60 * MIB);
        solve(&s, &p, &mut st)
    };
    let (on, off) = (run_with(true), run_with(false));
    assert_eq!(on.filling, [2]);
    assert_eq!(on.get(2).unwrap().state, PlacementState::UnderTarget);
    assert_eq!(target(&on, 2), 100 * MIB);
    assert_eq!(target(&on, 1), target(&off, 1));
    // Its target is 60 MiB above what it holds: all of its growth fits.
    assert_eq!(target(&on, 1), 700 * MIB);
    assert_eq!((off.need_bytes, on.need_bytes), (0, 60 * MIB));
    assert_eq!(off.get(1).unwrap().demote_bytes, 0);
    assert_eq!(on.get(1).unwrap().demote_bytes, 60 * MIB);
    assert_eq!(on.get(2).unwrap().demote_bytes, 0);
}

#[test]
fn plan_is_sorted_by_id_and_get_finds_every_container() {
    let s = snap(GIB, vec![c(9, 0, 1), c(3, 0, 1), c(5, 0, 1)]);
    let plan = run(&s, &params());
    let ids: Vec<_> = plan.containers.iter().map(|p| p.id).collect();
    assert_eq!(ids, [3, 5, 9]);
    assert!(plan.get(4).is_none());

    // A hand-built plan in another order is still answered.
    let mut shuffled = plan.clone();
    shuffled.containers.reverse();
    for id in [3, 5, 9] {
        assert_eq!(shuffled.get(id).unwrap().id, id);
    }
}

#[test]
fn empty_snapshot() {
    let mut st = PolicyState::default();
    let plan = solve(&snap(GIB, vec![]), &params(), &mut st);
    assert_eq!(plan.pool_bytes, GIB);
    assert!(plan.containers.is_empty());
    assert!(st.demote_tokens.is_empty());
}

// ---- Water-filling by selection equals the sorted textbook form ----------------

/// Reference water-filling by a full sort on `room / weight`, the textbook
/// O(n log n) form; [`water_fill`] must agree with it exactly.
///
/// Returns, per item, `min(room, weight × λ)` for the level λ at which the
/// sum equals the budget (or every item is full, if the rooms add up to less).
/// Items are visited in increasing `room / weight` (ties by position): while
/// the smallest one fits under the current level `budget_left / weight_left`
/// it is filled and drops out; the first that does not fit fixes the level
/// for all the rest. O(n log n) for the sort (skipped when everyone fits),
/// exact in integers: the floors of the final shares leave fewer bytes than
/// there are unsaturated items, and those are handed out one each in the same
/// order (each still has room for them), so the result sums to
/// `min(budget, Σ room)` exactly.
fn water_fill_sorted(budget_bytes: u64, items: &[FillItem]) -> Vec<u64> {
    let rooms: u128 = items.iter().map(|it| u128::from(it.room_bytes)).sum();
    if rooms <= u128::from(budget_bytes) {
        return items.iter().map(|it| it.room_bytes).collect();
    }
    let mut out = vec![0u64; items.len()];
    let mut order: Vec<(u64, u64, usize)> = items
        .iter()
        .enumerate()
        .filter(|(_, it)| it.room_bytes > 0)
        .map(|(i, it)| (it.room_bytes, it.weight, i))
        .collect();
    order.sort_unstable_by(|&(ra, wa, ia), &(rb, wb, ib)| {
        (u128::from(ra) * u128::from(wb))
            .cmp(&(u128::from(rb) * u128::from(wa)))
            .then(ia.cmp(&ib))
    });

    let mut left = u128::from(budget_bytes);
    let mut weight_left: u128 = order.iter().map(|&(_, w, _)| u128::from(w)).sum();
    let mut k = 0;
    while k < order.len() && left > 0 {
        let (room, w, i) = order[k];
        // room / w ≤ left / weight_left: it saturates below the level.
        if u128::from(room) * weight_left <= left * u128::from(w) {
            out[i] = room;
            left -= u128::from(room);
            weight_left -= u128::from(w);
            k += 1;
        } else {
            break;
        }
    }
    if k < order.len() && left > 0 {
        let rest = &order[k..];
        let mut given = 0u128;
        for &(_, w, i) in rest {
            let share = u128::from(w) * left / weight_left;
            out[i] = share as u64;
            given += share;
        }
        // Fewer than rest.len() bytes; each item has room_bytes > share.
        let spare = (left - given) as usize;
        let mut by_position: Vec<usize> = rest.iter().map(|&(_, _, i)| i).collect();
        by_position.sort_unstable();
        for &i in by_position.iter().take(spare) {
            out[i] += 1;
        }
    }
    out
}

proptest! {
    #[test]
    fn water_fill_by_selection_matches_sorted_reference(
        budget in prop_oneof![0..1_000u64, 0..=u64::MAX >> 8],
        items in proptest::collection::vec(
            (prop_oneof![0..100u64, 0..=u64::MAX >> 12], 1..=1000u64)
                .prop_map(|(room_bytes, weight)| FillItem { room_bytes, weight }),
            0..40,
        ),
    ) {
        let got = water_fill(budget, &items);
        prop_assert_eq!(&got, &water_fill_sorted(budget, &items));
        let rooms: u128 = items.iter().map(|it| u128::from(it.room_bytes)).sum();
        let sum: u128 = got.iter().map(|&b| u128::from(b)).sum();
        prop_assert_eq!(sum, rooms.min(u128::from(budget)));
        for (g, it) in got.iter().zip(&items) {
            prop_assert!(*g <= it.room_bytes);
        }
    }
}

// ---- Hot sets first, then usage (work conservation) ---------------------------

#[test]
fn hot_sets_are_served_before_cold_pages() {
    // Cold hog (800 MiB, 50 MiB hot) and hot newcomer (500 MiB, 400 MiB hot)
    // on an 860 MiB pool: the hot sets first (50 + 400), then the remaining
    // 410 MiB water-filled up to usage: the newcomer's last 100 MiB, and the
    // hog the other 310 MiB.
    let s = snap(
        860 * MIB,
        vec![
            c(1, 800 * MIB, 0).hot(50 * MIB),
            c(2, 60 * MIB, 440 * MIB).hot(400 * MIB),
        ],
    );
    let plan = run(&s, &params());
    assert_eq!(target(&plan, 2), 500 * MIB);
    assert_eq!(target(&plan, 1), 360 * MIB);
    assert_eq!(plan.get(1).unwrap().state, PlacementState::OverTarget);
    assert_eq!(plan.get(2).unwrap().state, PlacementState::UnderTarget);

    // When the hot sets alone fill the pool, cold pages get nothing.
    let s = snap(
        400 * MIB,
        vec![
            c(1, 300 * MIB, 0).hot(50 * MIB),
            c(2, 100 * MIB, 400 * MIB).hot(400 * MIB),
        ],
    );
    let plan = run(&s, &params());
    assert_eq!(target(&plan, 1), 50 * MIB);
    assert_eq!(target(&plan, 2), 350 * MIB);
}

// ---- Thrash control -----------------------------------------------------------

fn moved(mut c: ContainerSnapshot, down: u64, up: u64, exact: u64) -> ContainerSnapshot {
    c.migrations = Migrations {
        demoted_bytes: down,
        promoted_bytes: up,
        pingpong_bytes: exact,
    };
    c
}

/// Params for the damping tests: an 8 MiB band, ping-pong above 1 MiB/s
/// over a 10 s window raises the level (at most 2), 10 s calm lowers it.
fn damping_params() -> PolicyParams {
    PolicyParams {
        band_min_bytes: 8 * MIB,
        thrash: ThrashParams {
            window_ms: 10_000,
            pingpong_bytes_per_s: MIB,
            settle_ms: 10_000,
            max_level: 2,
        },
        ..params()
    }
}

#[test]
fn ping_pong_raises_damping_which_halves_promotion_and_widens_the_promotion_band() {
    let p = damping_params();
    let mut st = PolicyState::default();
    // 1 GiB container with 200 MiB on DRAM, target 400 MiB: wants 200 MiB.
    let mk = |down, up| {
        let mut s = snap(
            400 * MIB,
            vec![moved(c(1, 200 * MIB, 824 * MIB), down, up, 0)],
        );
        s.elapsed_ms = 1_000;
        s
    };
    let plan = solve(&mk(0, 0), &p, &mut st);
    assert_eq!(plan.containers[0].damping_level, 0);
    assert_eq!(plan.containers[0].promote_bytes, 200 * MIB);

    // 12 MiB down and 12 MiB back up within the window: 1.2 MiB/s > 1 MiB/s.
    let plan = solve(&mk(12 * MIB, 12 * MIB), &p, &mut st);
    let c1 = &plan.containers[0];
    assert_eq!(c1.pingpong_bytes_per_s, 12 * MIB / 10);
    assert_eq!(c1.damping_level, 1);
    assert_eq!(c1.promote_bytes, 100 * MIB);
    // Still thrashing one second later: no second raise within half a window.
    let plan = solve(&mk(0, 0), &p, &mut st);
    assert_eq!(plan.containers[0].damping_level, 1);
    // After half a window, still above: level 2 (the cap), a quarter budget.
    for _ in 0..4 {
        solve(&mk(0, 0), &p, &mut st);
    }
    let plan = solve(&mk(MIB, MIB), &p, &mut st);
    assert_eq!(plan.containers[0].damping_level, 2);
    assert_eq!(plan.containers[0].promote_bytes, 50 * MIB);

    // The band doubles per level: 8 MiB → 32 MiB. A container 20 MiB under
    // its target is at target while damped at level 2.
    let mut s = snap(400 * MIB, vec![c(1, 380 * MIB, 600 * MIB)]);
    s.elapsed_ms = 1_000;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.containers[0].state, PlacementState::AtTarget);
    // ... but only on the promotion side: 20 MiB over its target it is still
    // over target and demoted (it holds DRAM its neighbours are owed).
    let mut s = snap(400 * MIB, vec![c(1, 420 * MIB, 580 * MIB)]);
    s.elapsed_ms = 1_000;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.containers[0].damping_level, 2);
    assert_eq!(plan.containers[0].state, PlacementState::OverTarget);
    assert!(plan.containers[0].demote_bytes > 0);

    // Calm: the window empties, then settle_ms below half the threshold
    // lowers the level one step at a time.
    let mut levels = Vec::new();
    for _ in 0..40 {
        levels.push(solve(&mk(0, 0), &p, &mut st).containers[0].damping_level);
    }
    assert_eq!(levels.last(), Some(&0), "{levels:?}");
    assert!(levels.windows(2).all(|w| w[1] <= w[0]), "{levels:?}");
    assert!(
        levels.contains(&1),
        "steps down one level at a time: {levels:?}"
    );
}

/// Damping widens a container's promotion band only while nobody is over
/// target: a damped container short of its share beside one holding more
/// than its own claims that excess (its promotion still cut per level).
/// Without it the excess stayed put (docs/NOTES.md "Session 84": cache-a
/// damped 50 MiB under its target, cache-b ~40 MiB over for 45 s).
#[test]
fn a_damped_container_short_of_its_share_claims_a_neighbours_excess() {
    let p = damping_params();
    let mut st = PolicyState::default();
    // Two 1000 MiB containers in an 820 MiB pool: targets 410 MiB each.
    let mk = |a_fast: u64, b_fast: u64, pingpong: u64| {
        let mut a = moved(c(1, a_fast, 1000 * MIB - a_fast), pingpong, pingpong, 0);
        a.recallable_bytes = 12 * MIB;
        let mut s = snap(820 * MIB, vec![a, c(2, b_fast, 1000 * MIB - b_fast)]);
        s.elapsed_ms = 1_000;
        s
    };
    solve(&mk(398 * MIB, 410 * MIB, 0), &p, &mut st);
    let plan = solve(&mk(398 * MIB, 410 * MIB, 12 * MIB), &p, &mut st);
    let (a, b) = (&plan.containers[0], &plan.containers[1]);
    assert_eq!((a.target_bytes, b.target_bytes), (410 * MIB, 410 * MIB));
    assert_eq!(a.damping_level, 1);
    // Nobody over target: 12 MiB under with a band of 16 MiB is at target.
    assert_eq!(a.state, PlacementState::AtTarget);
    assert_eq!((a.promote_bytes, b.demote_bytes), (0, 0));

    // The neighbour 12 MiB over its target and band: the damped one is
    // under target, claims its 12 MiB of known-hot pages, and gets half.
    let plan = solve(&mk(398 * MIB, 422 * MIB, 0), &p, &mut st);
    let (a, b) = (&plan.containers[0], &plan.containers[1]);
    assert_eq!(a.damping_level, 1);
    assert_eq!(a.state, PlacementState::UnderTarget);
    assert_eq!(b.state, PlacementState::OverTarget);
    assert_eq!(b.demote_bytes, 12 * MIB);
    assert_eq!(a.promote_bytes, 6 * MIB);
}

#[test]
fn one_way_migration_is_not_ping_pong() {
    // A container being demoted steadily (nothing comes back) is not thrashing;
    // tierd's exact records count even when the memcg counters do not show it.
    let mut p = params();
    p.thrash.window_ms = 10_000;
    p.thrash.pingpong_bytes_per_s = MIB;
    let mut st = PolicyState::default();
    for _ in 0..5 {
        let mut s = snap(GIB, vec![moved(c(1, GIB, 0), 64 * MIB, 0, 0)]);
        s.elapsed_ms = 1_000;
        let plan = solve(&s, &p, &mut st);
        assert_eq!(plan.containers[0].damping_level, 0);
        assert_eq!(plan.containers[0].pingpong_bytes_per_s, 0);
    }
    let mut s = snap(GIB, vec![moved(c(1, GIB, 0), 0, 0, 20 * MIB)]);
    s.elapsed_ms = 1_000;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.containers[0].pingpong_bytes_per_s, 2 * MIB);
    assert_eq!(plan.containers[0].damping_level, 1);
    // Containers that leave are forgotten.
    let s = snap(GIB, vec![c(2, GIB, 0)]);
    solve(&s, &p, &mut st);
    assert!(!st.thrash.contains_key(&1));
}

// ---- Work-conserving demotion and usage demand ----------------------------------

#[test]
fn over_target_container_gives_only_the_room_that_is_needed() {
    // Pool 1024 MiB (1088 − 64 headroom), band 32 MiB, equal targets of
    // 512. A holds 552 (40 over: over target), B 492 (20 under: inside the
    // band, so it needs nothing), and the fast tier is 20 MiB into its
    // headroom: A gives up those 20 MiB, not the 40 down to its target.
    let p = PolicyParams {
        demand: DemandSource::Usage,
        headroom_bytes: 64 * MIB,
        band_min_bytes: 32 * MIB,
        ..params()
    };
    let s = snap(
        1088 * MIB,
        vec![c(1, 552 * MIB, 100 * MIB), c(2, 492 * MIB, 200 * MIB)],
    );
    let plan = run(&s, &p);
    let (a, b) = (plan.get(1).unwrap(), plan.get(2).unwrap());
    assert_eq!((a.target_bytes, b.target_bytes), (512 * MIB, 512 * MIB));
    assert_eq!(
        (a.state, b.state),
        (PlacementState::OverTarget, PlacementState::AtTarget)
    );
    assert_eq!(plan.need_bytes, 20 * MIB);
    assert_eq!(a.demote_bytes, 20 * MIB);

    // Headroom free again (A at 532): nothing is needed, nothing moves.
    let s = snap(
        1088 * MIB,
        vec![c(1, 532 * MIB, 120 * MIB), c(2, 492 * MIB, 200 * MIB)],
    );
    let p = PolicyParams {
        band_min_bytes: 16 * MIB,
        ..p
    };
    let plan = run(&s, &p);
    assert_eq!(plan.get(1).unwrap().state, PlacementState::OverTarget);
    assert_eq!(plan.get(2).unwrap().state, PlacementState::UnderTarget);
    // With a narrower band B is under target: the kernel's promotion
    // takes the headroom first, so nothing moves yet; when tierd promotes
    // (only into free room above the headroom) B claims its 20 MiB.
    assert_eq!(plan.need_bytes, 0);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 0);
    let plan = run(
        &s,
        &PolicyParams {
            tierd_promotes: true,
            ..p
        },
    );
    assert_eq!(plan.need_bytes, 20 * MIB);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 20 * MIB);
}

#[test]
fn need_is_split_over_the_over_target_containers_by_excess() {
    // Pool 1200 MiB, three 600 MiB tenants, targets 400, band 50 MiB. A is
    // 120 over, B 60 over, C 30 under (inside the band: it needs nothing),
    // and the fast tier is 150 MiB into its headroom. A and B give up those
    // 150 MiB in proportion to their excess: 100 and 50.
    let p = PolicyParams {
        demand: DemandSource::Usage,
        headroom_bytes: 64 * MIB,
        band_min_bytes: 50 * MIB,
        ..params()
    };
    let s = snap(
        1264 * MIB,
        vec![
            c(1, 520 * MIB, 80 * MIB),
            c(2, 460 * MIB, 140 * MIB),
            c(3, 370 * MIB, 230 * MIB),
        ],
    );
    let plan = run(&s, &p);
    assert_eq!(plan.pool_bytes, 1200 * MIB);
    assert_eq!(target(&plan, 1), 400 * MIB);
    assert_eq!(plan.get(3).unwrap().state, PlacementState::AtTarget);
    assert_eq!(plan.need_bytes, 150 * MIB);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 100 * MIB);
    assert_eq!(plan.get(2).unwrap().demote_bytes, 50 * MIB);
}

#[test]
fn bytes_above_local_high_go_whatever_the_need() {
    let p = PolicyParams {
        demand: DemandSource::Usage,
        ..params()
    };
    // Plenty of room, nobody needs it, but local_high = 50% of 1 GiB.
    let s = snap(
        4 * GIB,
        vec![c(1, 800 * MIB, 224 * MIB).high(Share::Fraction(0.5))],
    );
    let plan = run(&s, &p);
    assert_eq!(plan.need_bytes, 0);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 288 * MIB);
}

#[test]
fn usage_demand_ignores_the_hot_set() {
    let p = PolicyParams {
        demand: DemandSource::Usage,
        ..params()
    };
    let s = snap(
        GIB,
        vec![
            c(1, 700 * MIB, 0).hot(10 * MIB),
            c(2, 300 * MIB, 400 * MIB).hot(690 * MIB),
        ],
    );
    let plan = run(&s, &p);
    assert_eq!(target(&plan, 1), 512 * MIB);
    assert_eq!(target(&plan, 2), 512 * MIB);
    assert_eq!(plan.get(2).unwrap().demand_bytes, 700 * MIB);
}

/// Usage demand, a 10 s claim window, pool 1024 MiB: A (700 MiB, 612 on
/// the fast tier) and `b`.
fn claim_case(b: ContainerSnapshot) -> (PolicyParams, PolicyState, Snapshot) {
    let p = PolicyParams {
        demand: DemandSource::Usage,
        need_window_ms: 10_000,
        tierd_promotes: false,
        steady_ms: 10_000,
        scan_pace_ms: 30_000,
        ..params()
    };
    let s = snap(1024 * MIB, vec![c(1, 612 * MIB, 88 * MIB), b]);
    (p, PolicyState::default(), s)
}

#[test]
fn with_the_kernels_promotion_only_the_headroom_is_room_made_ahead() {
    // Pool 1024, two 700 MiB tenants, targets 512. A holds 612 (100 over),
    // B 412 with 288 below (100 under); the tier is full. The kernel
    // promotes B into the headroom (and kswapd demotes the unprotected A
    // when that runs short): nothing is demoted for B ahead of it.
    let (mut p, mut st, mut s) = claim_case(c(2, 412 * MIB, 288 * MIB));
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.get(1).unwrap().state, PlacementState::OverTarget);
    assert_eq!(plan.get(2).unwrap().state, PlacementState::UnderTarget);
    assert_eq!(plan.need_bytes, 0);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 0);
    // With a 32 MiB headroom, the tier 32 MiB into it: A gives up 32.
    p.headroom_bytes = 32 * MIB;
    s.elapsed_ms = 1_000;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.need_bytes, 32 * MIB);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 32 * MIB);
    // B was promoted into the freed headroom (A at 580, B at 444) and
    // filled it: A gives up the next 32.
    s.containers[0].fast_bytes = 580 * MIB;
    s.containers[0].slow_bytes = 120 * MIB;
    s.containers[1].fast_bytes = 444 * MIB;
    s.containers[1].slow_bytes = 256 * MIB;
    assert_eq!(solve(&s, &p, &mut st).need_bytes, 32 * MIB);
    // While the promotion stalls, the headroom stays free and nothing more
    // leaves A: DRAM is not emptied for a promotion that does not come.
    s.containers[0].fast_bytes = 548 * MIB;
    s.containers[0].slow_bytes = 152 * MIB;
    assert_eq!(solve(&s, &p, &mut st).need_bytes, 0);
    assert_eq!(solve(&s, &p, &mut st).get(1).unwrap().demote_bytes, 0);
}

#[test]
fn with_tierd_promoting_a_claim_covers_a_window_of_the_promotion_budget() {
    // As above: tierd promotes only into free room, so B claims a window
    // of its budget, 1 MiB/s × 10 s, less what is already free.
    let (mut p, mut st, mut s) = claim_case(c(2, 412 * MIB, 288 * MIB));
    p.tierd_promotes = true;
    p.container_promote_bytes_per_s = MIB;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.need_bytes, 10 * MIB);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 10 * MIB);
    // A at 606 leaves 6 MiB free: 4 more are needed.
    s.elapsed_ms = 1_000;
    s.containers[0].fast_bytes = 606 * MIB;
    s.containers[0].slow_bytes = 94 * MIB;
    assert_eq!(solve(&s, &p, &mut st).need_bytes, 4 * MIB);
    // Never more than B's deficit.
    p.container_promote_bytes_per_s = 64 * MIB;
    assert_eq!(solve(&s, &p, &mut st).need_bytes, 100 * MIB - 6 * MIB);
}

#[test]
fn a_guarantee_short_on_the_fast_tier_claims_room() {
    // As above, but B has a 450 MiB local_low: B claims what its guarantee
    // lacks (450 - 412 = 38 MiB), not its whole 288 MiB deficit.
    let (p, mut st, s) = claim_case(c(2, 412 * MIB, 288 * MIB).low(Share::Bytes(450 * MIB)));
    // The guarantee comes first, the rest is shared: B's target is its
    // whole 700 MiB.
    let plan = solve(&s, &p, &mut st);
    assert_eq!(target(&plan, 2), 700 * MIB);
    assert_eq!(plan.get(2).unwrap().state, PlacementState::UnderTarget);
    assert_eq!(plan.need_bytes, 38 * MIB);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 38 * MIB);
    // What the guarantee lacks is promoted by tierd whatever the mode.
    let b = plan.get(2).unwrap();
    assert!(b.promote_bytes > 0, "{b:?}");
    assert_eq!(b.guarantee_promote_bytes, (38 * MIB).min(b.promote_bytes));
    // Without a guarantee nothing is owed.
    assert_eq!(plan.get(1).unwrap().guarantee_promote_bytes, 0);
}

#[test]
fn known_hot_bytes_on_the_lower_tier_claim_room_without_growing() {
    // As above: B claims nothing; once the daemon finds 30 MiB of B's
    // known-hot pages on the lower tier (kswapd demoted them), B claims
    // those 30 MiB and A gives them up, never more than B's deficit.
    let (p, mut st, mut s) = claim_case(c(2, 412 * MIB, 288 * MIB));
    assert_eq!(solve(&s, &p, &mut st).need_bytes, 0);
    s.elapsed_ms = 1_000;
    s.containers[1].recallable_bytes = 30 * MIB;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.need_bytes, 30 * MIB);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 30 * MIB);
    s.containers[1].recallable_bytes = 250 * MIB;
    assert_eq!(solve(&s, &p, &mut st).need_bytes, 100 * MIB);
    // A container at its target claims nothing for its known-hot pages.
    s.containers[0].fast_bytes = 512 * MIB;
    s.containers[0].slow_bytes = 188 * MIB;
    s.containers[1].fast_bytes = 512 * MIB;
    s.containers[1].slow_bytes = 188 * MIB;
    assert_eq!(solve(&s, &p, &mut st).need_bytes, 0);
}

#[test]
fn a_container_a_quarter_band_below_its_target_trades_inside_the_band() {
    // Two 700 MiB tenants, targets 512, band 40 MiB (quarter 10): A holds
    // 532, B 492, both inside their bands, the tier full.
    let (mut p, mut st, _) = claim_case(c(2, 0, 0));
    p.band_min_bytes = 40 * MIB;
    p.band_trade = true;
    let mut s = snap(
        1024 * MIB,
        vec![c(1, 532 * MIB, 168 * MIB), c(2, 492 * MIB, 208 * MIB)],
    );
    let plan = solve(&s, &p, &mut st);
    let (a, b) = (plan.get(1).unwrap(), plan.get(2).unwrap());
    assert_eq!(
        (a.state, b.state),
        (PlacementState::AtTarget, PlacementState::AtTarget)
    );
    // B is a trader, but with nothing known hot below it claims nothing.
    assert!(b.band_trade && !a.band_trade);
    assert_eq!((plan.need_bytes, a.demote_bytes), (0, 0));
    // 15 MiB of B's known-hot pages found on the lower tier: B claims
    // them and A gives up as much of its 20 MiB above target.
    s.elapsed_ms = 1_000;
    s.containers[1].recallable_bytes = 15 * MIB;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.need_bytes, 15 * MIB);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 15 * MIB);
    assert_eq!(plan.get(1).unwrap().memory_low_bytes, 0);
    // More than B lacks of its target is not claimed; A gives its 20.
    s.containers[1].recallable_bytes = 100 * MIB;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.need_bytes, 20 * MIB);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 20 * MIB);
    // Within a quarter band of their targets nobody trades: A at 520, B
    // at 504 (and B, 8 below, does not claim).
    s.containers[0].fast_bytes = 520 * MIB;
    s.containers[1].fast_bytes = 504 * MIB;
    let plan = solve(&s, &p, &mut st);
    assert!(!plan.get(2).unwrap().band_trade);
    assert_eq!((plan.need_bytes, plan.get(1).unwrap().demote_bytes), (0, 0));
    // B a quarter band short but A within a quarter band above: B claims,
    // and free room or nobody pays for it.
    s.containers[1].fast_bytes = 496 * MIB;
    let plan = solve(&s, &p, &mut st);
    assert!(plan.get(2).unwrap().band_trade);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 0);
    // A damped (thrashing) container does not trade.
    s.containers[0].fast_bytes = 532 * MIB;
    s.containers[1].fast_bytes = 492 * MIB;
    st.thrash.get_mut(&2).unwrap().level = 1;
    st.thrash.get_mut(&2).unwrap().raised_ms = Some(st.clock_ms);
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.get(2).unwrap().damping_level, 1);
    assert!(!plan.get(2).unwrap().band_trade);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 0);
}

#[test]
fn memory_min_guards_a_guarantee_while_its_container_is_protected() {
    // Pool 1024 MiB; the steady service (400 MiB, local_low 350 MiB) and a
    // neighbour (800 MiB). Usage demand: steady's target is its 400 MiB.
    let p = PolicyParams {
        demand: DemandSource::Usage,
        band_min_bytes: 16 * MIB,
        ..params()
    };
    let steady = |fast: u64| c(1, fast * MIB, (400 - fast) * MIB).low(Share::Bytes(350 * MIB));
    let min_of = |fast: u64, noisy_fast: u64| {
        let s = snap(
            1024 * MIB,
            vec![
                steady(fast),
                c(2, noisy_fast * MIB, (800 - noisy_fast) * MIB),
            ],
        );
        let plan = run(&s, &p);
        let c = plan.get(1).unwrap().clone();
        (
            c.memory_min_bytes,
            c.memory_low_bytes,
            plan.get(2).unwrap().memory_min_bytes,
        )
    };
    // At its target, far above its guarantee: memory.min already (kswapd
    // takes tens of MiB between two cycles, faster than a band near the
    // guarantee could be watched).
    assert_eq!(min_of(400, 600), (400 * MIB, 400 * MIB, 0));
    // Demoted to 360 MiB: memory.min = its usage.
    assert_eq!(min_of(360, 600), (400 * MIB, 400 * MIB, 0));
    // Below the guarantee: still min; the neighbour, without a guarantee,
    // never gets one.
    assert_eq!(min_of(300, 600).0, 400 * MIB);
    assert_eq!(min_of(300, 600).2, 0);
}

#[test]
fn memory_min_guards_every_protected_container_while_another_holds_an_excess() {
    // Two identical tenants, 700 MiB each, pool 1024 MiB: targets 512 MiB.
    let p = PolicyParams {
        demand: DemandSource::Usage,
        band_min_bytes: 16 * MIB,
        ..params()
    };
    let mins = |a: u64, b: u64| {
        let s = snap(
            1024 * MIB,
            vec![
                c(1, a * MIB, (700 - a) * MIB),
                c(2, b * MIB, (700 - b) * MIB),
            ],
        );
        let plan = run(&s, &p);
        let (pa, pb) = (plan.get(1).unwrap(), plan.get(2).unwrap());
        assert_eq!(pa.target_bytes, 512 * MIB);
        (
            (pa.memory_low_bytes, pa.memory_min_bytes),
            (pb.memory_low_bytes, pb.memory_min_bytes),
        )
    };
    // b over its target: kswapd is to take b's excess, never a's pages
    // (memory.low would only put a at the end of its walk).
    assert_eq!(mins(400, 600), ((700 * MIB, 700 * MIB), (0, 0)));
    // Inside the band but above its target b is unprotected all the same.
    assert_eq!(mins(508, 516), ((700 * MIB, 700 * MIB), (0, 0)));
    // Nobody above target: memory.low only, kswapd spreads what it takes.
    assert_eq!(mins(500, 500), ((700 * MIB, 0), (700 * MIB, 0)));
    // Off: memory.low only, whoever is over.
    let off = PolicyParams {
        share_min: false,
        ..p.clone()
    };
    let s = snap(
        1024 * MIB,
        vec![c(1, 400 * MIB, 300 * MIB), c(2, 600 * MIB, 100 * MIB)],
    );
    assert_eq!(run(&s, &off).get(1).unwrap().memory_min_bytes, 0);
}

// ---- Steady state (kernel promotion limited) --------------------------------

#[test]
fn steady_once_nobody_is_under_target_for_the_settle_time() {
    let p = PolicyParams {
        demand: DemandSource::Usage,
        band_min_bytes: 16 * MIB,
        ..params()
    };
    let mut st = PolicyState::default();
    // Two identical tenants, 600 MiB each, pool 900 MiB: targets 450 MiB.
    let at = |fast_a: u64, fast_b: u64, elapsed_ms: u64| Snapshot {
        elapsed_ms,
        ..snap(
            900 * MIB,
            vec![
                c(1, fast_a * MIB, (600 - fast_a) * MIB),
                c(2, fast_b * MIB, (600 - fast_b) * MIB),
            ],
        )
    };
    let steady =
        |st: &mut PolicyState, a: u64, b: u64, ms: u64| solve(&at(a, b, ms), &p, st).steady;
    assert!(!steady(&mut st, 450, 450, 0));
    assert!(!steady(&mut st, 460, 440, 5_000), "within the band, 5 s");
    // Over its target does not break it: nothing is owed to anyone.
    assert!(steady(&mut st, 480, 440, 5_000), "10 s");
    // b 40 MiB under its target (band 16 MiB): not steady, and the clock
    // starts again.
    assert!(!steady(&mut st, 480, 410, 2_000));
    assert!(!steady(&mut st, 450, 450, 2_000));
    assert!(!steady(&mut st, 450, 450, 9_000));
    assert!(steady(&mut st, 450, 450, 1_000));
    // A third container arrives, at its target (all of it fits): the clock
    // starts again all the same.
    let three = Snapshot {
        elapsed_ms: 2_000,
        ..snap(
            1000 * MIB,
            vec![
                c(1, 450 * MIB, 150 * MIB),
                c(2, 450 * MIB, 150 * MIB),
                c(3, 10 * MIB, 0),
            ],
        )
    };
    assert!(!solve(&three, &p, &mut st).steady);
}

#[test]
fn a_steady_plan_closes_kernel_promotion_until_hot_pages_show_below() {
    let p = PolicyParams {
        demand: DemandSource::Usage,
        band_min_bytes: 16 * MIB,
        steady_ms: 10_000,
        hot_below_bytes_per_s: 256 << 10,
        ..params()
    };
    let mut st = PolicyState::default();
    // Two identical tenants at their targets (450 MiB each), cycles 2 s
    // apart; `hot` bytes passed the kernel's hot-page test since the last.
    let mut gate = |fast_b: u64, hot: Option<u64>| {
        let s = Snapshot {
            elapsed_ms: 2_000,
            hot_below_bytes: hot,
            ..snap(
                900 * MIB,
                vec![
                    c(1, 450 * MIB, 150 * MIB),
                    c(2, fast_b * MIB, (600 - fast_b) * MIB),
                ],
            )
        };
        solve(&s, &p, &mut st).promote_gate
    };
    // Not steady for the first 10 s: the kernel's own limit.
    for _ in 0..5 {
        assert_eq!(gate(450, Some(0)), PromoteGate::Open);
    }
    // Steady, nothing hot below: closed.
    assert_eq!(gate(450, Some(0)), PromoteGate::Closed);
    // Less than 256 KiB/s over the 2 s cycle: still closed.
    assert_eq!(gate(450, Some(500 << 10)), PromoteGate::Closed);
    // 512 KiB in 2 s = 256 KiB/s: limited, for steady_ms (10 s).
    assert_eq!(gate(450, Some(512 << 10)), PromoteGate::Limited);
    // What passes while limited (the churn it causes) does not extend it.
    for _ in 0..4 {
        assert_eq!(gate(450, Some(64 << 20)), PromoteGate::Limited);
    }
    assert_eq!(gate(450, Some(64 << 20)), PromoteGate::Closed);
    // That cycle began closed: its hot pages count.
    assert_eq!(gate(450, Some(64 << 20)), PromoteGate::Limited);
    // A container under its target − band opens the kernel's promotion at
    // once, and steadiness (10 s) must be earned again.
    assert_eq!(gate(400, Some(0)), PromoteGate::Open);
    for _ in 0..5 {
        assert_eq!(gate(450, Some(0)), PromoteGate::Open);
    }
    assert_eq!(gate(450, Some(0)), PromoteGate::Closed);
    // Without the kernel's counter, or with the threshold 0: limited, never
    // closed.
    assert_eq!(gate(450, None), PromoteGate::Limited);
    let p0 = PolicyParams {
        hot_below_bytes_per_s: 0,
        ..p.clone()
    };
    let mut st0 = PolicyState::default();
    let s = Snapshot {
        elapsed_ms: 2_000,
        hot_below_bytes: Some(0),
        ..snap(900 * MIB, vec![c(1, 450 * MIB, 0)])
    };
    let gates: Vec<PromoteGate> = (0..8)
        .map(|_| solve(&s, &p0, &mut st0).promote_gate)
        .collect();
    assert_eq!(gates[..5], [PromoteGate::Open; 5]);
    assert_eq!(gates[5..], [PromoteGate::Limited; 3]);
}

/// The promotion assist: a hog (700 MiB on DRAM) and a newcomer under its
/// target (200 of 500 MiB on DRAM), pool 1024 MiB, cycles 2 s apart.
fn assist_case() -> (PolicyParams, Snapshot) {
    let p = PolicyParams {
        demand: DemandSource::Usage,
        band_min_bytes: 16 * MIB,
        assist_after_ms: 10_000,
        ..params()
    };
    let mut s = snap(
        1024 * MIB,
        vec![c(1, 700 * MIB, 100 * MIB), c(2, 200 * MIB, 300 * MIB)],
    );
    s.elapsed_ms = 2_000;
    (p, s)
}

#[test]
fn assist_starts_after_the_kernel_promoted_nothing_for_assist_after() {
    let (p, mut s) = assist_case();
    let mut st = PolicyState::default();
    let mut assisted_at = None;
    for cycle in 1..=10u64 {
        // The kernel promotes for the newcomer in the first two cycles, then
        // a stalled scan's trickle (64 KiB a cycle, under a sixteenth of
        // the 16 MiB band), which is not progress.
        s.containers[1].migrations.promoted_bytes = if cycle <= 2 { 4 * MIB } else { 64 << 10 };
        let plan = solve(&s, &p, &mut st);
        assert!(!plan.get(1).unwrap().assisted, "the hog is over its target");
        if plan.get(2).unwrap().assisted && assisted_at.is_none() {
            assisted_at = Some(cycle);
        }
    }
    // Last promotion at cycle 2 (4 s); 10 s later is cycle 7.
    assert_eq!(assisted_at, Some(7));
}

#[test]
fn assist_waits_for_hint_faults_on_the_lower_tier_when_the_probe_counts_them() {
    let (p, mut s) = assist_case();
    let mut st = PolicyState::default();
    // A sixteenth of the 16 MiB band, in base pages: 256 faults.
    let enough = (16 * MIB / 16) / crate::assist::FAULT_BYTES;
    let mut assisted_at = None;
    for cycle in 1..=14u64 {
        // Nothing promoted, and its lower tier untouched for 8 cycles (a
        // hog's cold bulk); then a scan pass faults on it, in two halves.
        s.containers[1].lower_hint_faults = Some(match cycle {
            9 | 10 => enough / 2,
            _ => 0,
        });
        let plan = solve(&s, &p, &mut st);
        if plan.get(2).unwrap().assisted && assisted_at.is_none() {
            assisted_at = Some(cycle);
        }
    }
    // 10 s of waiting were over at cycle 6; the evidence is complete at 10.
    assert_eq!(assisted_at, Some(10));

    // Unknown (no probe): the wait alone decides, as before.
    let (p, mut s) = assist_case();
    let mut st = PolicyState::default();
    s.containers[1].lower_hint_faults = None;
    let first = (1..=14u64).find(|_| solve(&s, &p, &mut st).get(2).unwrap().assisted);
    assert_eq!(first, Some(6));

    // An assist that found nothing hot needs new evidence for the next one.
    let (p, mut s) = assist_case();
    let mut st = PolicyState::default();
    s.containers[1].lower_hint_faults = Some(enough);
    for _ in 0..6 {
        solve(&s, &p, &mut st);
    }
    assert!(st.assist[&2].assisted);
    s.containers[1].lower_hint_faults = Some(0);
    s.containers[1].lower_hot_bytes = Some(0);
    for _ in 0..20 {
        assert!(!solve(&s, &p, &mut st).get(2).unwrap().assisted);
        s.containers[1].lower_hot_bytes = None;
    }
}

#[test]
fn an_assisted_container_claims_room_for_its_hot_lower_tier_bytes() {
    let (p, mut s) = assist_case();
    let mut st = PolicyState::default();
    // The first cycle starts the clock (2 s); assisted 10 s later, at the 6th.
    for _ in 0..5 {
        assert!(!solve(&s, &p, &mut st).get(2).unwrap().assisted);
    }
    // Not warmed up yet: assisted, but nothing claimed beyond the headroom.
    let plan = solve(&s, &p, &mut st);
    assert!(plan.get(2).unwrap().assisted);
    assert_eq!(plan.need_bytes, 0);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 0);
    // DAMON found 120 MiB hot on the newcomer's lower tier, and the fast
    // tier is full: the hog gives that room up.
    s.containers[0].fast_bytes = 824 * MIB;
    s.containers[1].lower_hot_bytes = Some(120 * MIB);
    let plan = solve(&s, &p, &mut st);
    assert!(plan.get(2).unwrap().assisted);
    assert_eq!(plan.need_bytes, 120 * MIB);
    assert_eq!(plan.get(1).unwrap().demote_bytes, 120 * MIB);
    assert!(plan.get(2).unwrap().promote_bytes > 0);
}

#[test]
fn the_assist_backs_off_when_nothing_hot_is_down_there_and_ends_at_the_target() {
    let (p, mut s) = assist_case();
    let mut st = PolicyState::default();
    for _ in 0..6 {
        solve(&s, &p, &mut st);
    }
    s.containers[1].lower_hot_bytes = Some(0);
    let plan = solve(&s, &p, &mut st);
    assert!(!plan.get(2).unwrap().assisted, "cold lower tier: no assist");
    s.containers[1].lower_hot_bytes = None;
    // Another full period before it is tried again.
    for _ in 0..4 {
        assert!(!solve(&s, &p, &mut st).get(2).unwrap().assisted);
    }
    assert!(solve(&s, &p, &mut st).get(2).unwrap().assisted);
    // At its target the assist ends, and the state is forgotten.
    s.containers[0].fast_bytes = 512 * MIB;
    s.containers[1] = c(2, 512 * MIB, 0);
    let plan = solve(&s, &p, &mut st);
    assert!(!plan.get(2).unwrap().assisted);
    assert!(st.assist.is_empty());
    // Off: never assisted.
    let off = PolicyParams {
        assist_after_ms: 0,
        ..p
    };
    let (_, s) = assist_case();
    let mut st = PolicyState::default();
    for _ in 0..20 {
        assert!(!solve(&s, &off, &mut st).get(2).unwrap().assisted);
    }
}

/// Assists that find nothing hot in a row wait twice as long each time
/// (10, 20, 40, 80, 80 s at 2 s cycles), and a promotion for the container
/// starts the count again.
#[test]
fn assists_that_find_nothing_hot_back_off_in_doublings() {
    let (p, mut s) = assist_case();
    let mut st = PolicyState::default();
    // Cycles between one assist's end (nothing hot) and the next start.
    let mut gaps = Vec::new();
    let mut ended_at = None;
    for cycle in 0..200u64 {
        let before = st.assist.get(&2).is_some_and(|a| a.assisted);
        s.containers[1].lower_hot_bytes = before.then_some(0);
        let assisted = solve(&s, &p, &mut st).get(2).unwrap().assisted;
        if before && !assisted {
            ended_at = Some(cycle);
        }
        if !before && assisted {
            if let Some(e) = ended_at.take() {
                gaps.push(cycle - e);
            }
        }
        if gaps.len() == 5 {
            break;
        }
    }
    assert_eq!(
        gaps,
        [5, 10, 20, 40, 40],
        "cycles of 2 s: 10, 20, 40, 80, 80 s"
    );
    // The fifth assist moves pages: the streak is over, and once it ends
    // the next wait is one period again.
    s.containers[1].lower_hot_bytes = Some(64 * MIB);
    s.containers[1].migrations.promoted_bytes = 4 * MIB;
    assert!(solve(&s, &p, &mut st).get(2).unwrap().assisted);
    assert_eq!(st.assist[&2].cold_ends, 0);
    s.containers[1].migrations.promoted_bytes = 0;
    s.containers[1].lower_hot_bytes = Some(0);
    assert!(!solve(&s, &p, &mut st).get(2).unwrap().assisted);
    s.containers[1].lower_hot_bytes = None;
    let mut waited = 0;
    while !solve(&s, &p, &mut st).get(2).unwrap().assisted {
        waited += 1;
    }
    assert_eq!(waited, 4, "assisted at the 5th cycle after the promotion");
}

/// assist_case's newcomer, assisted (six cycles under its target), then at
/// its band (target 500 MiB, its usage; band 16 MiB) with 8 MiB of hot
/// regions still on its lower tier, e.g. its never-touched first pages
/// keeping DRAM inside its share.
fn swap_case(p: &PolicyParams) -> (Snapshot, PolicyState) {
    let (_, s) = assist_case();
    let mut st = PolicyState::default();
    for _ in 0..6 {
        solve(&s, p, &mut st);
    }
    assert!(st.assist[&2].assisted);
    let mut s = snap(
        1024 * MIB,
        vec![c(1, 524 * MIB, 276 * MIB), c(2, 490 * MIB, 10 * MIB)],
    );
    s.elapsed_ms = 2_000;
    s.containers[1].lower_hot_bytes = Some(8 * MIB);
    (s, st)
}

#[test]
fn an_assisted_container_at_its_target_swaps_its_oldest_pages_for_its_hot_lower_tier_ones() {
    let (p, _) = assist_case();
    let (mut s, mut st) = swap_case(&p);
    let plan = solve(&s, &p, &mut st);
    let n = plan.get(2).unwrap();
    assert_eq!(n.state, PlacementState::AtTarget);
    assert!(n.assisted);
    assert_eq!(
        (n.swap_bytes, n.demote_bytes, n.promote_bytes),
        (8 * MIB, 8 * MIB, 8 * MIB)
    );
    // Its own demotion makes the room: the hog gives nothing up for it.
    assert_eq!(plan.get(1).unwrap().demote_bytes, 0);
    assert_eq!(plan.need_bytes, 0);
    // Less than a quarter of its band still hot down there: the swap and
    // the assist end, and its state is forgotten.
    s.containers[1].lower_hot_bytes = Some(3 * MIB);
    let plan = solve(&s, &p, &mut st);
    let n = plan.get(2).unwrap();
    assert!(!n.assisted);
    assert_eq!((n.swap_bytes, n.demote_bytes, n.promote_bytes), (0, 0, 0));
    assert!(st.assist.is_empty());
    // Not assisted again at its target, whatever DAMON would say: only a
    // container under its target starts an assist.
    s.containers[1].lower_hot_bytes = Some(8 * MIB);
    for _ in 0..10 {
        assert!(!solve(&s, &p, &mut st).get(2).unwrap().assisted);
    }
}

#[test]
fn the_arrival_assist_serves_a_newcomer_stalled_inside_its_band() {
    // Pool 1024 MiB, usage demand, equal weights: targets 512 MiB each,
    // band 16 MiB. The newcomer holds 500 MiB on DRAM (12 MiB short, inside
    // its band) with 30 MiB below; nothing is promoted for it any more.
    let p = PolicyParams {
        demand: DemandSource::Usage,
        band_min_bytes: 16 * MIB,
        assist_after_ms: 10_000,
        hot_swap: false,
        hot_swap_window_ms: 60_000,
        arrival_assist: true,
        ..params()
    };
    let mut s = snap(
        1024 * MIB,
        vec![c(1, 524 * MIB, 276 * MIB), c(2, 500 * MIB, 30 * MIB)],
    );
    s.elapsed_ms = 2_000;
    let run_cycles = |p: &PolicyParams, s: &mut Snapshot, st: &mut PolicyState, n: u64| {
        (0..n)
            .map(|_| {
                let plan = solve(s, p, st);
                let c = plan.get(2).unwrap();
                assert_eq!(
                    (c.target_bytes, c.state),
                    (512 * MIB, PlacementState::AtTarget)
                );
                assert!(!plan.get(1).unwrap().assisted);
                c.assisted
            })
            .collect::<Vec<bool>>()
    };
    // The window opens at the first cycle (2 s); 10 s with nothing
    // promoted later, at 12 s (cycle 6), the newcomer is assisted.
    let mut st = PolicyState::default();
    let got = run_cycles(&p, &mut s, &mut st, 8);
    assert_eq!(got, [false, false, false, false, false, true, true, true]);
    // Assisted at its target with DAMON's hot regions below: it swaps.
    s.containers[1].lower_hot_bytes = Some(8 * MIB);
    let plan = solve(&s, &p, &mut st);
    assert_eq!(plan.get(2).unwrap().swap_bytes, 8 * MIB);
    // Off: never assisted inside its band.
    let off = PolicyParams {
        arrival_assist: false,
        ..p.clone()
    };
    s.containers[1].lower_hot_bytes = None;
    let got = run_cycles(&off, &mut s, &mut PolicyState::default(), 40);
    assert!(got.iter().all(|&a| !a));
    // Only while the window is open: a newcomer that stalls 60 s after the
    // last arrival is left to the kernel.
    let mut st = PolicyState::default();
    s.containers[1].fast_bytes = 512 * MIB;
    run_cycles(&p, &mut s, &mut st, 30);
    s.containers[1].fast_bytes = 500 * MIB;
    let got = run_cycles(&p, &mut s, &mut st, 20);
    assert!(got.iter().all(|&a| !a), "{got:?}");
    // Less than a quarter band short: not waited for.
    let mut st = PolicyState::default();
    s.containers[1].fast_bytes = 509 * MIB;
    let got = run_cycles(&p, &mut s, &mut st, 20);
    assert!(got.iter().all(|&a| !a));
}

#[test]
fn the_within_share_swap_ends_after_cycles_that_move_little() {
    let (p, _) = assist_case();
    let (mut s, mut st) = swap_case(&p);
    // DAMON keeps calling 8 MiB of its lower tier hot (a quarter band is
    // 4 MiB). While a cycle in every SWAP_IDLE_CYCLES promotes at least
    // that much, the swap goes on.
    for cycle in 0..12u32 {
        s.containers[1].migrations.promoted_bytes = if cycle % 3 == 2 { 4 * MIB } else { MIB };
        let n = solve(&s, &p, &mut st).get(2).unwrap().clone();
        assert!(n.assisted && n.swap_bytes > 0, "cycle {cycle}");
    }
    // Then three cycles in a row under a quarter band: the third ends it
    // and the state is forgotten.
    s.containers[1].migrations.promoted_bytes = MIB;
    for cycle in 0..2 {
        assert!(
            solve(&s, &p, &mut st).get(2).unwrap().assisted,
            "idle cycle {cycle}"
        );
    }
    let n = solve(&s, &p, &mut st).get(2).unwrap().clone();
    assert!(!n.assisted);
    assert_eq!((n.swap_bytes, n.promote_bytes), (0, 0));
    assert!(st.assist.is_empty());
}

#[test]
fn the_within_share_swap_is_bounded_by_both_token_buckets() {
    let (p, _) = assist_case();
    // 4 MiB/s of demotion and 100 MiB/s of promotion, 1 s bursts: the
    // swap is what both halves allow, and promotion tokens the demotion
    // side could not match are kept.
    let p = PolicyParams {
        container_demote_bytes_per_s: 4 * MIB,
        container_promote_bytes_per_s: 100 * MIB,
        ..p
    };
    let (s, mut st) = swap_case(&p);
    let plan = solve(&s, &p, &mut st);
    let n = plan.get(2).unwrap();
    assert_eq!(
        (n.swap_bytes, n.demote_bytes, n.promote_bytes),
        (4 * MIB, 4 * MIB, 4 * MIB)
    );
    // A full promotion bucket (100 MiB) charged only the 4 MiB swapped.
    assert_eq!(st.promote_tokens[&2], (96 * MIB) as f64);
}

// ---- Offload (TMO-style, paced by pressure) -----------------------------------

const TMO: Offload = Offload {
    pressure_pct: 0.5,
    step_fraction: 0.01,
    min_age_ms: 30_000,
};

#[test]
fn offload_steps_follow_senpai_and_stop_at_the_threshold() {
    // 1 % of 1 GiB at no pressure, half of it at half the threshold.
    assert_eq!(TMO.step_bytes(GIB, 0.0), GIB / 100);
    assert_eq!(TMO.step_bytes(GIB, 0.25), GIB / 200);
    // At or above the threshold, and for garbage, nothing: back off.
    for p in [0.5, 0.51, 80.0, f64::NAN, f64::INFINITY] {
        assert_eq!(TMO.step_bytes(GIB, p), 0, "pressure {p}");
    }
    // A negative reading (never from the kernel) counts as none.
    assert_eq!(TMO.step_bytes(GIB, -1.0), GIB / 100);
}

#[test]
fn an_offloading_container_keeps_what_it_holds_and_the_rest_goes_to_others() {
    // 4 GiB fast tier. The offloading container used 3 GiB and holds 1 GiB
    // on the fast tier after offload; the other wants 5 GiB.
    let mut off = c(1, GIB, 2 * GIB);
    off.policy.offload = Some(TMO);
    let s = snap(4 * GIB, vec![off, c(2, GIB, 4 * GIB)]);
    let plan = run(&s, &params());
    // Its demand is what it holds: no room claimed back for what the
    // offload let go, and it is not demoted by the share either.
    let p1 = plan.get(1).unwrap();
    assert_eq!(
        (p1.demand_bytes, p1.target_bytes, p1.demote_bytes),
        (GIB, GIB, 0)
    );
    // The other gets all the rest (work-conserving).
    assert_eq!(target(&plan, 2), 3 * GIB);
    // Without offload the two would split the tier.
    let s = snap(4 * GIB, vec![c(1, GIB, 2 * GIB), c(2, GIB, 4 * GIB)]);
    assert_eq!(target(&run(&s, &params()), 1), 2 * GIB);
}

#[test]
fn an_offloading_container_gives_its_cold_fast_tier_bytes_to_others() {
    // 4 GiB fast tier. The offloading container holds 2 GiB on it, of
    // which 512 MiB were touched within min_age; the other wants 5 GiB.
    let mut off = c(1, 2 * GIB, GIB);
    off.policy.offload = Some(TMO);
    off.warm_bytes = Some(GIB / 2);
    // The other fills the rest of the tier and has 1 GiB of known-hot
    // pages on the lower tier to promote.
    let mut other = c(2, 2 * GIB, 3 * GIB);
    other.recallable_bytes = GIB;
    let s = snap(4 * GIB, vec![off.clone(), other.clone()]);
    let plan = run(&s, &params());
    // Its demand is its warm set: its cold bytes are the other's share,
    // demoted as the other claims the room, not at the offload's pace.
    let p1 = plan.get(1).unwrap();
    assert_eq!((p1.demand_bytes, p1.target_bytes), (GIB / 2, GIB / 2));
    assert_eq!(target(&plan, 2), 4 * GIB - GIB / 2);
    assert!(p1.demote_bytes >= GIB, "{p1:?}");
    // While its warm set is unknown it keeps what it holds.
    off.warm_bytes = None;
    let plan = run(&snap(4 * GIB, vec![off.clone(), other]), &params());
    let p1 = plan.get(1).unwrap();
    assert_eq!((p1.target_bytes, p1.demote_bytes), (2 * GIB, 0));
    // With nobody else wanting the room it keeps it (work-conserving).
    off.warm_bytes = Some(GIB / 2);
    let plan = run(&snap(4 * GIB, vec![off]), &params());
    assert_eq!(plan.get(1).unwrap().demote_bytes, 0);
}

proptest! {
    /// The step never exceeds `current × step_fraction`, falls as pressure
    /// rises, and is 0 from the threshold on.
    #[test]
    fn offload_step_is_bounded_and_falls_with_pressure(
        current in 0..=u64::MAX >> 4,
        threshold in 0.01f64..100.0,
        fraction in 0.0001f64..0.1,
        a in 0.0f64..150.0,
        b in 0.0f64..150.0,
    ) {
        let o = Offload { pressure_pct: threshold, step_fraction: fraction, min_age_ms: 30_000 };
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let (s_lo, s_hi) = (o.step_bytes(current, lo), o.step_bytes(current, hi));
        prop_assert!(s_hi <= s_lo);
        prop_assert!(s_lo as f64 <= current as f64 * fraction + 1.0);
        if hi >= threshold {
            prop_assert_eq!(s_hi, 0);
        }
    }
}

proptest! {
    /// What the unmanaged demotion takes is the containers' gain
    /// (`unmanaged.rs`): after `credit`, the pool grows by it, the room
    /// needed shrinks by it, and the containers' demotion never grows.
    #[test]
    fn unmanaged_credit_moves_room_to_the_containers(
        fasts in proptest::collection::vec(0u64..600, 1..4),
        slows in proptest::collection::vec(0u64..600, 4),
        unmanaged in 0u64..200,
        taken_pct in 0u64..=100,
    ) {
        const MIB: u64 = 1 << 20;
        let cap = 1000 * MIB;
        let cs: Vec<ContainerSnapshot> = fasts
            .iter()
            .zip(&slows)
            .enumerate()
            .map(|(i, (&f, &s))| c(i as u64 + 1, f * MIB, s * MIB))
            .collect();
        let managed: u64 = cs.iter().map(|c| c.fast_bytes).sum();
        let unmanaged = (unmanaged * MIB).min(cap.saturating_sub(managed));
        let snap = Snapshot {
            fast_capacity_bytes: cap,
            fast_unmanaged_bytes: unmanaged,
            elapsed_ms: 2000,
            containers: cs,
            hot_below_bytes: None,
        };
        let p = PolicyParams { headroom_bytes: 20 * MIB, ..params() };
        let before = solve(&snap, &p, &mut PolicyState::default());
        let st = unmanaged::UnmanagedState::default();
        let asked = unmanaged::ask(&st, 0, before.need_bytes, unmanaged);
        prop_assert!(asked <= before.need_bytes && asked <= unmanaged);
        let taken = asked * taken_pct / 100;
        let mut credited = snap.clone();
        unmanaged::credit(&mut credited, taken);
        let after = solve(&credited, &p, &mut PolicyState::default());
        prop_assert_eq!(after.pool_bytes, before.pool_bytes + taken);
        prop_assert_eq!(after.need_bytes, before.need_bytes - taken);
        let demoted = |plan: &Plan| plan.containers.iter().map(|c| c.demote_bytes).sum::<u64>();
        prop_assert!(demoted(&after) <= demoted(&before));
    }
}

// ---- Hot swap ----------------------------------------------------------------

/// Two identical tenants sharing the pool, each at its target (inside its
/// band), the second with `known` bytes of known-hot pages on its lower
/// tier.
fn hot_swap_case(known: u64) -> Snapshot {
    let mut s = snap(
        1024 * MIB,
        vec![c(1, 505 * MIB, 195 * MIB), c(2, 505 * MIB, 195 * MIB)],
    );
    s.elapsed_ms = 2_000;
    s.containers[1].known_hot_below_bytes = known;
    s
}

#[test]
fn a_container_at_its_target_swaps_idle_pages_for_its_known_hot_lower_tier_pages() {
    let p = PolicyParams {
        band_min_bytes: 16 * MIB,
        ..params()
    };
    let plan = run(&hot_swap_case(8 * MIB), &p);
    let (a, b) = (plan.get(1).unwrap(), plan.get(2).unwrap());
    assert_eq!(
        (a.state, b.state),
        (PlacementState::AtTarget, PlacementState::AtTarget)
    );
    assert!(!b.assisted);
    // Both halves, within its share: no one else gives room for it.
    assert_eq!(
        (b.swap_bytes, b.demote_bytes, b.promote_bytes),
        (8 * MIB, 8 * MIB, 8 * MIB)
    );
    assert_eq!((a.swap_bytes, a.demote_bytes), (0, 0));
    assert_eq!(plan.need_bytes, 0);
    // Under a quarter of its band (4 MiB): not worth an aging.
    let plan = run(&hot_swap_case(4 * MIB - 4096), &p);
    assert_eq!(plan.get(2).unwrap().swap_bytes, 0);
    // Off: none.
    let off = PolicyParams {
        hot_swap: false,
        ..p.clone()
    };
    assert_eq!(
        run(&hot_swap_case(8 * MIB), &off)
            .get(2)
            .unwrap()
            .swap_bytes,
        0
    );
    // Damped (a fast cut moved much both ways): it still swaps, idle pages
    // down and hot ones up are not ping-pong.
    let mut s = hot_swap_case(8 * MIB);
    s.containers[1].migrations = Migrations {
        demoted_bytes: 512 * MIB,
        promoted_bytes: 512 * MIB,
        pingpong_bytes: 0,
    };
    let mut st = PolicyState::default();
    for _ in 0..3 {
        solve(&s, &p, &mut st);
    }
    let n = solve(&s, &p, &mut st).get(2).unwrap().clone();
    assert!(n.damping_level > 0, "{n:?}");
    assert_eq!(n.swap_bytes, 8 * MIB);
    // Bounded by its slow bytes and its demotion bucket (4 MiB/s, 1 s).
    let slow = PolicyParams {
        container_demote_bytes_per_s: 4 * MIB,
        ..p.clone()
    };
    assert_eq!(
        run(&hot_swap_case(8 * MIB), &slow)
            .get(2)
            .unwrap()
            .swap_bytes,
        4 * MIB
    );
    let mut s = hot_swap_case(300 * MIB);
    s.containers[1].slow_bytes = 6 * MIB;
    assert_eq!(run(&s, &p).get(2).unwrap().swap_bytes, 6 * MIB);
}

/// A hot swap trades only the lower-tier bytes that did not get there by
/// aged reclaim (hotswap::unranked_below): a tenant cut to its share by
/// the daemon's reclaim holds its coldest pages below, and a swap would
/// trade its tail for its tail.
#[test]
fn a_hot_swap_skips_what_aged_reclaim_put_below() {
    let p = PolicyParams {
        band_min_bytes: 16 * MIB,
        ..params()
    };
    let mut st = PolicyState::default();
    let swap = |st: &mut PolicyState, s: &Snapshot| solve(s, &p, st).get(2).unwrap().swap_bytes;
    // 190 of its 195 MiB below went there by aged reclaim (the counters'
    // whole count on the first snapshot): 5 MiB may be traded, a quarter
    // band (4 MiB) or more.
    let mut s = hot_swap_case(64 * MIB);
    s.containers[1].aged_demoted_bytes = 190 * MIB;
    assert_eq!(swap(&mut st, &s), 5 * MIB);
    // Its swap's own eviction adds to what reclaim put below: 3 MiB left,
    // under a quarter band, so no swap (not worth an aging).
    s.containers[1].aged_demoted_bytes = 2 * MIB;
    s.elapsed_ms = crate::HOT_SWAP_PERIOD_MS;
    assert_eq!(swap(&mut st, &s), 0);
    assert_eq!(st.hot_swap.ranked_below.get(&2), Some(&(192 * MIB)));
    // Pages came back from below (the kernel promoted 100 MiB): what is
    // left below counts as aged reclaim's first, nothing to trade.
    s.containers[1].aged_demoted_bytes = 0;
    s.containers[1].slow_bytes = 95 * MIB;
    assert_eq!(swap(&mut st, &s), 0);
    assert_eq!(st.hot_swap.ranked_below.get(&2), Some(&(95 * MIB)));
    // A spill lands below without reclaim: that much may be traded.
    // Container 1, never demoted by reclaim, trades all it knows hot.
    s.containers[1].slow_bytes = 135 * MIB;
    s.containers[0].known_hot_below_bytes = 8 * MIB;
    let plan = solve(&s, &p, &mut st);
    assert_eq!(
        (
            plan.get(1).unwrap().swap_bytes,
            plan.get(2).unwrap().swap_bytes
        ),
        (8 * MIB, 40 * MIB)
    );
    // A container gone is forgotten.
    s.containers.remove(1);
    solve(&s, &p, &mut st);
    assert!(!st.hot_swap.ranked_below.contains_key(&2));
}

/// The hot swap through `solve`, cycle by cycle: at most once every
/// HOT_SWAP_PERIOD_MS (2 s cycles: every one), and only within the
/// window after the first cycle (an arrival); an exit opens it again.
#[test]
fn the_hot_swap_runs_every_few_cycles_and_only_after_an_arrival_or_exit() {
    let p = PolicyParams {
        band_min_bytes: 16 * MIB,
        hot_swap_window_ms: 20_000,
        ..params()
    };
    let s = hot_swap_case(8 * MIB);
    let mut st = PolicyState::default();
    let swapped: Vec<u64> = (0..15)
        .filter_map(|_| {
            let plan = solve(&s, &p, &mut st);
            (plan.get(2).unwrap().swap_bytes > 0).then_some(st.clock_ms)
        })
        .collect();
    // Clock 2 s at the first cycle; the window ends at 22 s.
    assert_eq!(
        swapped,
        (1..=10).map(|k| k * 2_000).collect::<Vec<u64>>(),
        "every cycle up to 20 s"
    );
    assert!(!solve(&s, &p, &mut st).hot_swap_open);
    // Container 1 leaves: the window opens again.
    let mut after = s.clone();
    after.containers.remove(0);
    assert!(solve(&after, &p, &mut st).hot_swap_open);
}

/// Hot swaps that find next to nothing idle end (`hot_swap_stop_after`
/// 3), until an arrival or exit. Container 2 (505 MiB on the fast tier,
/// band 16 MiB: a swap wants the larger of 4 MiB and a tenth of 505 MiB
/// idle) swaps every cycle; what each swap found idle comes back in the
/// next snapshot.
#[test]
fn hot_swaps_end_after_three_that_found_nothing_idle() {
    let p = PolicyParams {
        band_min_bytes: 16 * MIB,
        hot_swap_stop_after: 3,
        ..params()
    };
    let mut s = hot_swap_case(8 * MIB);
    let mut st = PolicyState::default();
    let swapped =
        |s: &Snapshot, st: &mut PolicyState| solve(s, &p, st).get(2).unwrap().swap_bytes > 0;
    // The first swap, then ones that found 60 MiB (a reset), 1 and 1 MiB.
    for idle in [None, Some(60 * MIB), Some(MIB), Some(MIB)] {
        s.containers[1].swap_idle_bytes = idle;
        assert!(swapped(&s, &mut st), "{idle:?}");
    }
    // 30 MiB is many quarter bands, but 6 % of what it holds: its pages
    // there are all touched within the idle test, bar chance.
    s.containers[1].swap_idle_bytes = Some(30 * MIB);
    assert!(
        !swapped(&s, &mut st),
        "the third that found < 50.5 MiB: ended"
    );
    s.containers[1].swap_idle_bytes = None;
    assert!(!swapped(&s, &mut st), "stays ended");
    // A small container arrives: a change, so it may swap again.
    let mut after = s.clone();
    after.containers.push(c(3, MIB, 0));
    assert!(swapped(&after, &mut st));
}

/// The extension through `solve`: window 20 s, extension 20 s. Container 1
/// finds known-hot pages below every cycle (a Zipf tail faulting all the
/// time), so its swaps end with the window. Container 2 is quiet at the
/// close (its hint faults paused) and has its burst at 30–34 s: it swaps
/// through the burst, then never again.
#[test]
fn only_a_container_quiet_at_the_close_swaps_past_it_until_its_burst_ends() {
    let p = PolicyParams {
        band_min_bytes: 16 * MIB,
        hot_swap_window_ms: 20_000,
        hot_swap_extension_ms: 20_000,
        ..params()
    };
    let mut s = hot_swap_case(0);
    s.containers[0].known_hot_below_bytes = 8 * MIB;
    let mut st = PolicyState::default();
    let mut swaps: Vec<(u64, u64)> = Vec::new();
    for _ in 0..25 {
        // The clock is 2 s at the first cycle and 2 s more at each.
        let next = st.clock_ms + s.elapsed_ms;
        s.containers[1].known_hot_below_bytes =
            if (30_000..=34_000).contains(&next) || next == 44_000 {
                8 * MIB
            } else {
                0
            };
        let plan = solve(&s, &p, &mut st);
        for pc in plan.containers.iter().filter(|pc| pc.swap_bytes > 0) {
            swaps.push((pc.id, st.clock_ms));
        }
        match st.clock_ms {
            28_000 => assert!(plan.hot_swap_open, "container 2's extension"),
            38_000 => assert!(!plan.hot_swap_open, "its run has ended"),
            _ => {}
        }
    }
    let of = |id| -> Vec<u64> { swaps.iter().filter(|s| s.0 == id).map(|s| s.1).collect() };
    assert_eq!(of(1), (1..=10).map(|k| k * 2_000).collect::<Vec<u64>>());
    assert_eq!(
        of(2),
        vec![30_000, 32_000, 34_000],
        "its burst, not the one at 44 s"
    );
}
