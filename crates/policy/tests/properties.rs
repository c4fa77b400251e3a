//! Property tests of the solver's invariants (docs/DESIGN.md "Policy semantics"):
//! the pool is never overcommitted, targets respect demand, `local_high` and
//! (when satisfiable) `local_low`, the division is work-conserving and
//! monotonic in weight, and the solve is deterministic and independent of the
//! order in which containers are listed.

use policy::*;
use proptest::prelude::*;

const GIB: u64 = 1 << 30;

fn share() -> impl Strategy<Value = Share> {
    prop_oneof![
        (0..=16 * GIB).prop_map(Share::Bytes),
        (0.0..=1.0f64).prop_map(Share::Fraction),
    ]
}

fn container() -> impl Strategy<Value = ContainerSnapshot> {
    (
        0..=8 * GIB,
        0..=8 * GIB,
        proptest::option::of(0..=16 * GIB),
        share(),
        prop_oneof![Just(Share::Fraction(1.0)), share()],
        1..=1000u32,
        proptest::bool::weighted(0.1),
        proptest::option::of(0..=8 * GIB),
        prop_oneof![Just(0), 0..=GIB],
        prop_oneof![Just(0), 0..=GIB],
        proptest::option::of(0..=100_000u64),
    )
        .prop_map(
            |(
                fast,
                slow,
                hot,
                low,
                high,
                weight,
                opt_out,
                lower_hot,
                recallable,
                known_hot,
                lower_faults,
            )| {
                ContainerSnapshot {
                    id: 0,
                    name: String::new(),
                    fast_bytes: fast,
                    slow_bytes: slow,
                    hot_bytes: hot,
                    policy: ContainerPolicy {
                        local_low: low,
                        local_high: high,
                        weight,
                        opt_out,
                        offload: None,
                    },
                    migrations: Default::default(),
                    recallable_bytes: recallable,
                    lower_hot_bytes: lower_hot,
                    lower_hint_faults: lower_faults,
                    known_hot_below_bytes: known_hot,
                    swap_idle_bytes: None,
                    aged_demoted_bytes: 0,
                    warm_bytes: None,
                }
            },
        )
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (
        0..=64 * GIB,
        0..=4 * GIB,
        0..=10_000u64,
        proptest::collection::vec(container(), 0..12),
    )
        .prop_map(|(cap, unmanaged, elapsed_ms, mut cs)| {
            for (i, c) in cs.iter_mut().enumerate() {
                c.id = 1000 + 17 * i as u64;
            }
            Snapshot {
                fast_capacity_bytes: cap,
                fast_unmanaged_bytes: unmanaged,
                elapsed_ms,
                containers: cs,
                hot_below_bytes: None,
            }
        })
}

fn params() -> impl Strategy<Value = PolicyParams> {
    (
        0..=GIB,
        0.0..=0.2f64,
        0..=256u64 << 20,
        0..=GIB,
        0..=4 * GIB,
        0.0..=5.0f64,
        prop_oneof![Just(DemandSource::Usage), Just(DemandSource::HotSet)],
        any::<bool>(),
        0..=10_000u64,
        any::<bool>(),
        any::<bool>(),
        (
            prop_oneof![Just(0u64), Just(60_000u64)],
            any::<bool>(),
            prop_oneof![Just(0u64), Just(30_000u64)],
            any::<bool>(),
            prop_oneof![Just(0u64), Just(60_000u64)],
            0..4u32,
        ),
    )
        .prop_map(
            |(
                headroom,
                frac,
                band_min,
                rate,
                grate,
                burst,
                demand,
                tierd_promotes,
                assist_after_ms,
                band_trade,
                hot_swap,
                (
                    hot_swap_window_ms,
                    arrival_assist,
                    arrival_window_ms,
                    arrival_lookahead,
                    hot_swap_extension_ms,
                    hot_swap_stop_after,
                ),
            )| PolicyParams {
                demand,
                headroom_bytes: headroom,
                band_fraction: frac,
                band_min_bytes: band_min,
                container_demote_bytes_per_s: rate,
                global_demote_bytes_per_s: grate,
                container_promote_bytes_per_s: rate / 2,
                global_promote_bytes_per_s: grate / 2,
                burst_s: burst,
                thrash: ThrashParams::default(),
                need_window_ms: 10_000,
                tierd_promotes,
                steady_ms: 10_000,
                hot_below_bytes_per_s: 256 << 10,
                scan_pace_ms: 30_000,
                assist_after_ms,
                band_trade,
                hot_swap,
                hot_swap_window_ms,
                hot_swap_extension_ms,
                hot_swap_stop_after,
                arrival_assist,
                arrival_window_ms,
                arrival_lookahead,
                share_min: true,
                aging_gap_ms: 500,
                aging_gap_lift_after: 3,
            },
        )
}

fn shared<'a>(s: &'a Snapshot, plan: &'a Plan) -> impl Iterator<Item = &'a ContainerPlan> {
    s.containers
        .iter()
        .filter(|c| !c.policy.opt_out)
        .map(|c| plan.get(c.id).unwrap())
}

/// Hot-set cap: what the first water-filling pass fills up to.
fn hot_cap(p: &ContainerPlan) -> u64 {
    p.demand_bytes.min(p.local_high_bytes)
}

/// Overall cap: the second pass fills up to usage (work conservation).
fn cap(s: &Snapshot, p: &ContainerPlan) -> u64 {
    let c = s.containers.iter().find(|c| c.id == p.id).unwrap();
    (c.fast_bytes + c.slow_bytes).min(p.local_high_bytes)
}

fn fresh(s: &Snapshot, p: &PolicyParams) -> Plan {
    solve(s, p, &mut PolicyState::default())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn targets_never_exceed_the_pool(s in snapshot(), p in params()) {
        let plan = fresh(&s, &p);
        let sum: u128 = shared(&s, &plan).map(|c| u128::from(c.target_bytes)).sum();
        prop_assert!(sum <= u128::from(plan.pool_bytes));
    }

    #[test]
    fn targets_respect_demand_and_local_high(s in snapshot(), p in params()) {
        let plan = fresh(&s, &p);
        let hot: u128 = shared(&s, &plan).map(|c| u128::from(hot_cap(c))).sum();
        for c in shared(&s, &plan) {
            prop_assert!(c.target_bytes <= cap(&s, c), "{c:?}");
            // While the hot sets fill the pool, nobody gets more than its hot set.
            if hot >= u128::from(plan.pool_bytes) {
                prop_assert!(c.target_bytes <= hot_cap(c), "{c:?}");
            }
            prop_assert!(c.guarantee_bytes <= c.target_bytes);
        }
    }

    #[test]
    fn satisfiable_guarantees_are_met(s in snapshot(), p in params()) {
        let plan = fresh(&s, &p);
        let sum: u128 = shared(&s, &plan)
            .map(|c| u128::from(c.demand_bytes.min(c.local_low_bytes)))
            .sum();
        prop_assert_eq!(plan.guarantees_scaled, sum > u128::from(plan.pool_bytes));
        if !plan.guarantees_scaled {
            for c in shared(&s, &plan) {
                prop_assert!(c.target_bytes >= c.demand_bytes.min(c.local_low_bytes));
            }
        }
    }

    #[test]
    fn work_conserving(s in snapshot(), p in params()) {
        let plan = fresh(&s, &p);
        let caps: u128 = shared(&s, &plan).map(|c| u128::from(cap(&s, c))).sum();
        let sum: u128 = shared(&s, &plan).map(|c| u128::from(c.target_bytes)).sum();
        if caps >= u128::from(plan.pool_bytes) {
            // Exact: the integer water-filling hands out its rounding bytes.
            prop_assert_eq!(sum, u128::from(plan.pool_bytes));
        } else {
            for c in shared(&s, &plan) {
                prop_assert_eq!(c.target_bytes, cap(&s, c));
            }
        }
    }

    #[test]
    fn raising_a_weight_never_lowers_that_target(
        s in snapshot(), p in params(), pick in any::<prop::sample::Index>(), more in 1..=1000u32,
    ) {
        prop_assume!(!s.containers.is_empty());
        let i = pick.index(s.containers.len());
        let before = fresh(&s, &p);
        let mut heavier = s.clone();
        heavier.containers[i].policy.weight += more;
        let after = fresh(&heavier, &p);
        let id = s.containers[i].id;
        // One byte of slack: the spare rounding byte may move elsewhere.
        prop_assert!(
            after.get(id).unwrap().target_bytes + 1 >= before.get(id).unwrap().target_bytes
        );
    }

    #[test]
    fn budgets_are_bounded_by_what_can_move(s in snapshot(), p in params()) {
        let plan = fresh(&s, &p);
        let burst = p.burst_s;
        let mut demoted = 0u64;
        let mut promoted = 0u64;
        for c in &s.containers {
            let pc = plan.get(c.id).unwrap();
            // A hot swap (a container at its target) moves as many bytes
            // each way within its share; the rest is bounded by the gap.
            let own_demote = pc.demote_bytes - pc.swap_bytes;
            let own_promote = pc.promote_bytes - pc.swap_bytes;
            prop_assert!(own_demote <= c.fast_bytes.saturating_sub(pc.target_bytes));
            prop_assert!(pc.promote_bytes <= c.slow_bytes);
            prop_assert!(own_promote <= pc.target_bytes.saturating_sub(c.fast_bytes));
            if pc.swap_bytes > 0 {
                prop_assert!(pc.state == PlacementState::AtTarget && own_demote == 0 && own_promote == 0, "{pc:?}");
            }
            // Over target, or above it inside the band for a trader.
            if own_demote > 0 {
                prop_assert!(
                    pc.state == PlacementState::OverTarget
                        || (pc.state == PlacementState::AtTarget
                            && c.fast_bytes > pc.target_bytes
                            && plan.containers.iter().any(|t| t.band_trade)),
                    "{pc:?}"
                );
            }
            if pc.band_trade {
                prop_assert!(pc.state == PlacementState::AtTarget && c.fast_bytes < pc.target_bytes);
            }
            if own_promote > 0 {
                prop_assert_eq!(pc.state, PlacementState::UnderTarget);
            }
            prop_assert!(pc.demote_bytes as f64 <= p.container_demote_bytes_per_s as f64 * burst);
            demoted += pc.demote_bytes;
            promoted += pc.promote_bytes;
        }
        prop_assert!(demoted as f64 <= p.global_demote_bytes_per_s as f64 * burst);
        prop_assert!(promoted as f64 <= p.global_promote_bytes_per_s as f64 * burst);
    }

    #[test]
    fn deterministic_and_order_independent(
        s in snapshot(), p in params(), seed in any::<u64>(),
    ) {
        // Two cycles from the same state give the same plans and states.
        let mut st1 = PolicyState::default();
        let mut st2 = PolicyState::default();
        let a1 = solve(&s, &p, &mut st1);
        let b1 = solve(&s, &p, &mut st2);
        prop_assert_eq!(&a1, &b1);
        prop_assert_eq!(&st1, &st2);
        let a2 = solve(&s, &p, &mut st1);
        let b2 = solve(&s, &p, &mut st2);
        prop_assert_eq!(&a2, &b2);
        prop_assert_eq!(&st1, &st2);

        // Listing the containers in another order changes nothing.
        let mut shuffled = s.clone();
        let n = shuffled.containers.len();
        if n > 1 {
            let mut x = seed | 1;
            for k in (1..n).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                shuffled.containers.swap(k, (x % (k as u64 + 1)) as usize);
            }
        }
        let mut st3 = PolicyState::default();
        prop_assert_eq!(solve(&shuffled, &p, &mut st3), a1);
    }

    #[test]
    fn tokens_spent_over_many_cycles_respect_the_rates(
        s in snapshot(), p in params(), cycles in 1..8usize,
    ) {
        // Whatever the container does, demotion over k cycles stays within
        // one burst plus rate × elapsed, per container and globally.
        let mut st = PolicyState::default();
        let mut s = s;
        s.elapsed_ms = 0;
        let mut elapsed_total_ms = 0u64;
        let mut per: std::collections::BTreeMap<ContainerId, u64> = Default::default();
        let mut global = 0u64;
        for k in 0..cycles {
            let plan = solve(&s, &p, &mut st);
            for c in &plan.containers {
                *per.entry(c.id).or_default() += c.demote_bytes;
                global += c.demote_bytes;
            }
            s.elapsed_ms = 100 * (k as u64 + 1);
            elapsed_total_ms += s.elapsed_ms;
        }
        elapsed_total_ms -= s.elapsed_ms; // the last refill was never used
        let allow = |rate: u64| rate as f64 * (p.burst_s + elapsed_total_ms as f64 / 1000.0) + 1.0;
        for v in per.values() {
            prop_assert!(*v as f64 <= allow(p.container_demote_bytes_per_s));
        }
        prop_assert!(global as f64 <= allow(p.global_demote_bytes_per_s));
    }
}

/// Two identical tenants (same usage and policy) whose placement and hot
/// sets differ arbitrarily — the jitter of sampling and of arrival order.
fn identical_pair() -> impl Strategy<Value = (Snapshot, PolicyParams)> {
    (
        snapshot(),
        params(),
        0..=8 * GIB,
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        proptest::option::of(0..=16 * GIB),
        proptest::option::of(0..=16 * GIB),
        1..=1000u32,
    )
        .prop_map(|(mut s, mut p, usage, split_a, split_b, hot_a, hot_b, w)| {
            p.demand = DemandSource::Usage;
            let pair = |id, split: prop::sample::Index, hot| ContainerSnapshot {
                id,
                name: String::new(),
                fast_bytes: split.index(usage as usize + 1) as u64,
                slow_bytes: usage - split.index(usage as usize + 1) as u64,
                hot_bytes: hot,
                policy: ContainerPolicy {
                    weight: w,
                    ..ContainerPolicy::default()
                },
                migrations: Default::default(),
                recallable_bytes: 0,
                lower_hot_bytes: None,
                lower_hint_faults: None,
                known_hot_below_bytes: 0,
                swap_idle_bytes: None,
                aged_demoted_bytes: 0,
                warm_bytes: None,
            };
            s.containers.push(pair(1, split_a, hot_a));
            s.containers.push(pair(2, split_b, hot_b));
            (s, p)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Fair and stable (issue 11): identical tenants with equal weights get
    /// equal targets (to the rounding byte), however their pages happen to
    /// be placed and whatever their sampled hot sets say.
    #[test]
    fn identical_tenants_get_equal_targets_whatever_the_jitter(
        (s, p) in identical_pair(),
    ) {
        let plan = fresh(&s, &p);
        let (a, b) = (plan.get(1).unwrap(), plan.get(2).unwrap());
        prop_assert!(a.target_bytes.abs_diff(b.target_bytes) <= 1, "{a:?} {b:?}");
    }

    /// With usage demand, the hot-set input changes no target: targets do
    /// not follow heat noise.
    #[test]
    fn usage_demand_targets_do_not_follow_heat(
        s in snapshot(), p in params(), hots in proptest::collection::vec(
            proptest::option::of(0..=16 * GIB), 12),
    ) {
        let p = PolicyParams { demand: DemandSource::Usage, ..p };
        let before = fresh(&s, &p);
        let mut jittered = s.clone();
        for (c, h) in jittered.containers.iter_mut().zip(hots) {
            c.hot_bytes = h;
        }
        let after = fresh(&jittered, &p);
        for (x, y) in before.containers.iter().zip(&after.containers) {
            prop_assert_eq!(x.target_bytes, y.target_bytes);
        }
    }

    /// Work conservation, with usage demand: Σ targets = min(pool, Σ
    /// min(usage, local_high)), exactly.
    #[test]
    fn usage_demand_targets_sum_to_min_of_pool_and_usage(s in snapshot(), p in params()) {
        let p = PolicyParams { demand: DemandSource::Usage, ..p };
        let plan = fresh(&s, &p);
        let caps: u128 = shared(&s, &plan).map(|c| u128::from(cap(&s, c))).sum();
        let sum: u128 = shared(&s, &plan).map(|c| u128::from(c.target_bytes)).sum();
        prop_assert_eq!(sum, caps.min(u128::from(plan.pool_bytes)));
    }

    /// Work-conserving demotion: below local_high, the over-target
    /// containers together are asked for at most the room the fast tier
    /// needs: headroom + claims − free, where an under-target container
    /// claims (up to its deficit) what its guarantee lacks, its recallable
    /// bytes, when it is assisted the hot bytes DAMON found on its lower
    /// tier, and, when tierd promotes, a window of its promotion budget; a
    /// container trading inside its band claims its recallable bytes (up
    /// to its deficit).
    #[test]
    fn demotion_below_local_high_never_exceeds_the_need(s in snapshot(), p in params()) {
        // Every container was assisted in an earlier cycle, so that the
        // assist's claims and the within-share swap are exercised.
        let mut st = PolicyState::default();
        for c in &s.containers {
            st.assist.insert(c.id, AssistState { since_ms: 0, assisted: true, idle_swaps: 0, cold_ends: 0, lower_faults: 0 });
        }
        let plan = solve(&s, &p, &mut st);
        let mut discretionary = 0u128;
        for c in &s.containers {
            let pc = plan.get(c.id).unwrap();
            let above_high = c.fast_bytes.saturating_sub(pc.local_high_bytes);
            // A swap demotes a container's own pages for room it fills
            // itself: no one else's demotion and not the headroom's.
            let own = pc.demote_bytes.saturating_sub(pc.swap_bytes);
            discretionary += u128::from(own.saturating_sub(above_high));
            prop_assert!(pc.swap_bytes <= pc.promote_bytes, "{pc:?}");
            if pc.swap_bytes > 0 {
                // Within-share swap (assisted: DAMON's hot regions) or hot
                // swap (known-hot pages, only when enabled).
                prop_assert!(pc.state == PlacementState::AtTarget, "{pc:?}");
                let hot = if pc.assisted {
                    c.lower_hot_bytes.unwrap_or(0)
                } else {
                    prop_assert!(p.hot_swap, "{pc:?}");
                    c.known_hot_below_bytes
                };
                prop_assert!(pc.swap_bytes <= hot.min(c.slow_bytes));
                prop_assert!(pc.demote_bytes == pc.swap_bytes, "{pc:?}");
            }
        }
        prop_assert!(discretionary <= u128::from(plan.need_bytes));
        // Only a container under or at its target is assisted, and never
        // while tierd promotes everyone.
        for pc in &plan.containers {
            prop_assert!(!pc.assisted || (matches!(pc.state, PlacementState::UnderTarget | PlacementState::AtTarget) && !p.tierd_promotes));
        }
        let managed: u128 = s.containers.iter().map(|c| u128::from(c.fast_bytes)).sum();
        let window = if p.tierd_promotes { u128::from(p.container_promote_bytes_per_s) * 10 } else { 0 };
        let claims: u128 = s.containers.iter()
            .map(|c| (c, plan.get(c.id).unwrap()))
            .filter(|(_, pc)| pc.state == PlacementState::UnderTarget || pc.band_trade)
            .map(|(c, pc)| {
                let deficit = u128::from(pc.target_bytes.saturating_sub(c.fast_bytes).min(c.slow_bytes));
                let recallable = u128::from(c.recallable_bytes);
                if pc.band_trade {
                    return recallable.min(deficit);
                }
                let owed = u128::from(pc.guarantee_bytes.saturating_sub(c.fast_bytes));
                let assist = if pc.assisted { u128::from(c.lower_hot_bytes.unwrap_or(0)) } else { 0 };
                window.max(owed).max(recallable).max(assist).min(deficit)
            })
            .sum();
        let need = (u128::from(s.fast_unmanaged_bytes) + managed + u128::from(p.headroom_bytes) + claims)
            .saturating_sub(u128::from(s.fast_capacity_bytes));
        prop_assert_eq!(u128::from(plan.need_bytes), need.min(u128::from(u64::MAX)));
    }
}

proptest! {
    /// Hot-swap pacing: whatever the snapshot and params, over a run of
    /// cycles with the same containers a non-assisted container swaps at
    /// most once every HOT_SWAP_PERIOD_MS, and past the window after the
    /// first cycle (an arrival) only within its extension, if it was quiet
    /// at the close, until its run of swaps after it ends.
    #[test]
    fn the_hot_swap_is_paced_and_ends_with_its_window(
        s in snapshot(),
        p in params(),
        known in 0..=256u64 << 20,
        cycles in 1..60usize,
    ) {
        let mut s = s;
        s.elapsed_ms = s.elapsed_ms.max(1);
        for c in &mut s.containers {
            c.known_hot_below_bytes = known;
        }
        let mut st = PolicyState::default();
        let mut last: std::collections::BTreeMap<u64, u64> = Default::default();
        // The first cycle is at clock elapsed_ms: the window counts from it.
        let close = s.elapsed_ms + p.hot_swap_window_ms;
        for _ in 0..cycles {
            let plan = solve(&s, &p, &mut st);
            let now = st.clock_ms;
            for pc in plan.containers.iter().filter(|pc| pc.swap_bytes > 0 && !pc.assisted) {
                prop_assert!(p.hot_swap);
                prop_assert!(plan.hot_swap_open);
                let before = last.insert(pc.id, now);
                if let Some(t) = before {
                    prop_assert!(now - t >= HOT_SWAP_PERIOD_MS, "{} then {}", t, now);
                }
                if p.hot_swap_window_ms == 0 || now < close {
                    continue;
                }
                // Past the close: within the extension, and only for a
                // container quiet at the close, or in its run of swaps
                // since (the last less than two periods ago).
                prop_assert!(now < close + p.hot_swap_extension_ms, "{} past {}", now, close);
                prop_assert!(
                    before.is_none_or(|t| t + HOT_SWAP_QUIET_MS <= close
                        || (t >= close && now - t < 2 * HOT_SWAP_PERIOD_MS)),
                    "{:?} then {} (close {})", before, now, close
                );
            }
        }
    }
}

/// `s` as an arrival's cycle (some time elapsed since the last) and how
/// many of its containers were there before its last `arrivals`.
fn arriving(mut s: Snapshot, arrivals: usize) -> (Snapshot, usize) {
    s.elapsed_ms = s.elapsed_ms.max(1);
    let n = s.containers.len().saturating_sub(arrivals);
    (s, n)
}

/// The plan of the cycle in which the containers of `s` after its first
/// `n` arrive: the first `n` (the incumbents) solved alone first, from a
/// fresh state, then all of `s`, under `p`.
fn after_arrivals(s: &Snapshot, n: usize, p: &PolicyParams) -> Plan {
    let mut before = s.clone();
    before.containers.truncate(n);
    let mut st = PolicyState::default();
    solve(&before, p, &mut st);
    solve(s, p, &mut st)
}

proptest! {
    /// The arrival window changes protection only, and only downwards:
    /// with the incumbents of `s` (all but its last `arrivals` containers)
    /// solved first and the newcomers then arriving, the plan with the
    /// window on has the targets, budgets and states of the plan with it
    /// off; `memory.low` is never higher, and lower (0) only for a
    /// container that is not filling, not pinned, and holds more of the
    /// fast tier than its guarantee.
    #[test]
    fn the_arrival_window_only_unprotects_incumbents(
        s in snapshot(),
        p in params(),
        arrivals in 1..4usize,
    ) {
        let (s, n) = arriving(s, arrivals);
        let solve_with = |window_ms| {
            let p = PolicyParams { arrival_window_ms: window_ms, arrival_lookahead: false, ..p.clone() };
            after_arrivals(&s, n, &p)
        };
        let (on, off) = (solve_with(30_000), solve_with(0));
        prop_assert!(off.filling.is_empty());
        if n == 0 {
            prop_assert!(on.filling.is_empty(), "the first cycle fills nobody");
        }
        for (a, b) in on.containers.iter().zip(&off.containers) {
            prop_assert_eq!(a.id, b.id);
            prop_assert_eq!(a.target_bytes, b.target_bytes);
            prop_assert_eq!(a.demote_bytes, b.demote_bytes);
            prop_assert_eq!(a.promote_bytes, b.promote_bytes);
            prop_assert_eq!(a.state, b.state);
            prop_assert!(a.memory_low_bytes <= b.memory_low_bytes);
            if a.memory_low_bytes < b.memory_low_bytes {
                let c = s.containers.iter().find(|c| c.id == a.id).unwrap();
                prop_assert_eq!(a.memory_low_bytes, 0);
                prop_assert!(!on.filling.contains(&a.id));
                prop_assert!(!c.policy.opt_out);
                prop_assert!(c.fast_bytes > a.guarantee_bytes);
            }
        }
        // Newcomers seen for the first time are filling (n > 0).
        for c in &s.containers[n..] {
            prop_assert!(n == 0 || on.filling.contains(&c.id));
        }
    }

    /// Arrival lookahead: whatever the snapshot and params, with the
    /// incumbents solved first and the newcomers then arriving, the plan
    /// with the lookahead has the targets, states and protections of the
    /// plan without it, needs no less room, and needs more only by what
    /// the filling under-target newcomers lack of their targets; no less
    /// is demoted in all.
    #[test]
    fn the_arrival_lookahead_claims_only_a_fillers_room_up_to_its_target(
        s in snapshot(),
        p in params(),
        arrivals in 1..4usize,
    ) {
        let (s, n) = arriving(s, arrivals);
        let solve_with = |lookahead| {
            let p = PolicyParams {
                arrival_window_ms: 30_000,
                arrival_lookahead: lookahead,
                hot_swap: false,
                ..p.clone()
            };
            after_arrivals(&s, n, &p)
        };
        let (on, off) = (solve_with(true), solve_with(false));
        prop_assert_eq!(&on.filling, &off.filling);
        let mut room = 0u128;
        for (a, b) in on.containers.iter().zip(&off.containers) {
            prop_assert_eq!(a.target_bytes, b.target_bytes);
            prop_assert_eq!(a.state, b.state);
            prop_assert_eq!(a.memory_low_bytes, b.memory_low_bytes);
            if on.filling.contains(&a.id) && a.state == PlacementState::UnderTarget {
                let c = s.containers.iter().find(|c| c.id == a.id).unwrap();
                room += u128::from(a.target_bytes.saturating_sub(c.fast_bytes));
            }
        }
        prop_assert!(on.need_bytes >= off.need_bytes);
        prop_assert!(u128::from(on.need_bytes - off.need_bytes) <= room);
        // (Per container the split of the need can round either way.)
        let total = |pl: &Plan| pl.containers.iter().map(|c| u128::from(c.demote_bytes)).sum::<u128>();
        prop_assert!(total(&on) >= total(&off));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The aging gap (`ContainerPlan::aging_gap_ms`) is the configured one
    /// or 0, and 0 only while a newcomer fills its share or for a container
    /// asked to demote this cycle and in each of the
    /// `aging_gap_lift_after` cycles before it (whatever its fast-tier
    /// bytes did in between): a container within its band always waits.
    #[test]
    fn the_aging_gap_is_lifted_only_within_a_run_of_demotions(
        s in snapshot(),
        p in params(),
        lift_after in 0u32..5,
        falls in proptest::collection::vec(0u64..(96 << 20), 1..10),
    ) {
        let p = PolicyParams { aging_gap_lift_after: lift_after, ..p };
        let mut s = s;
        let mut st = PolicyState::default();
        let mut runs = std::collections::BTreeMap::new();
        for fall in falls {
            let plan = solve(&s, &p, &mut st);
            for c in &plan.containers {
                let run = runs.entry(c.id).or_insert(0u32);
                *run = if c.demote_bytes > c.swap_bytes { *run + 1 } else { 0 };
                prop_assert!(c.aging_gap_ms == 0 || c.aging_gap_ms == p.aging_gap_ms, "{c:?}");
                if c.aging_gap_ms != p.aging_gap_ms && plan.filling.is_empty() {
                    prop_assert!(lift_after > 0 && *run > lift_after,
                        "lifted after a run of {run} asks (lift after {lift_after}): {c:?}");
                }
            }
            for c in &mut s.containers {
                c.fast_bytes = c.fast_bytes.saturating_sub(fall);
            }
            s.elapsed_ms = 2_000;
        }
    }
}
