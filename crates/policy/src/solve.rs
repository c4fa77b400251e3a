//! The fair-share solver: one pure pass from a [`Snapshot`] (plus the token
//! buckets in [`PolicyState`]) to a [`Plan`].
//!
//! The control law is docs/DESIGN.md "Policy semantics", in the mould of the
//! Vistara "Fair Share" policy (per-service `local_low` protection, `local_high`
//! bound, weight, and opt-out) and of Equilibria (Meta's LKML RFC "memory
//! tiering fairness by per-cgroup control of promotion and demotion", Sep
//! 2024: protection through `memory.low`, regulated demotion and promotion).
//! The steps, in order:
//!
//! 1. **Pool.** The fast tier minus unmanaged use, minus the headroom reserve,
//!    minus the fast-tier bytes of opted-out (pinned) containers.
//! 2. **Guarantee.** Each container gets `min(demand, local_low)`; if those
//!    exceed the pool they are scaled down in proportion
//!    ([`Plan::guarantees_scaled`]).
//! 3. **Share.** The rest of the pool is water-filled by weight (weighted
//!    max-min fairness) up to `min(demand, local_high)`; what one container
//!    cannot use goes to the others (work-conserving).
//! 4. **Hysteresis.** Pages move only when fast-tier usage leaves
//!    `target ± band`; a demotion brings the container back *to* its target.
//! 5. **Rate limits.** Per-container and global token buckets bound the bytes
//!    demoted and promoted per cycle (see [`crate::bucket`]).
//! 6. **Protection.** `memory.low` = usage for containers at or under target
//!    (so kswapd skips them; the kernel computes `memory.low` on total usage,
//!    not per tier), 0 for containers over target; pinned containers get
//!    their usage and are never demoted. `memory.min` = usage for containers
//!    at or under target whose fast-tier bytes are within a band of their
//!    guarantee (the multi-gen LRU reclaims below `memory.low` anyway).
//!
//! All arithmetic on bytes is integer (u64, with u128 intermediates), so the
//! targets of non-pinned containers sum to at most the pool, exactly. The
//! solver is O(n log n) in the number of containers: the only sort is by id
//! (skipped when the snapshot already lists containers in id order);
//! water-filling is O(n) by selection, and the global buckets are spent
//! through a heap only when they run short.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::bucket::{whole_bytes, Bucket};
use crate::model::{
    ContainerId, ContainerPlan, ContainerSnapshot, DemandSource, PlacementState, Plan,
    PolicyParams, PolicyState, Snapshot,
};

/// Solves one control cycle: computes each container's fast-tier target and
/// this cycle's demotion/promotion budgets and `memory.low` value, and
/// advances the token buckets in `state`.
///
/// * Time enters only as `snapshot.elapsed_ms` (0 on the first snapshot,
///   which fills every bucket to one burst).
/// * `state` entries of containers absent from `snapshot` are dropped; a
///   container new to `state` starts with a full bucket.
/// * Containers are keyed by [`ContainerId`], assumed unique in a snapshot.
/// * The returned [`Plan::containers`] is sorted by id, so [`Plan::get`] is a
///   binary search.
///
/// Deterministic: the same inputs (snapshot, params, state) give the same plan
/// and the same new state.
pub fn solve(snapshot: &Snapshot, params: &PolicyParams, state: &mut PolicyState) -> Plan {
    // Work in id order throughout: the plan comes out sorted, the token maps
    // (BTreeMaps, sorted by id) are merge-joined instead of searched, and
    // every tie is broken by id.
    let mut order: Vec<(ContainerId, usize)> = snapshot
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id, i))
        .collect();
    if !order.is_sorted() {
        order.sort_unstable();
    }
    let cs: Vec<&ContainerSnapshot> = order
        .iter()
        .map(|&(_, i)| &snapshot.containers[i])
        .collect();

    // Rule 1 and opt-out (docs/DESIGN.md rule 5, Vistara opt-out): pinned
    // containers keep their DRAM, which leaves the shared pool.
    let pinned_fast_bytes = cs
        .iter()
        .filter(|c| c.policy.opt_out)
        .fold(0u64, |acc, c| acc.saturating_add(c.fast_bytes));
    let pool_bytes = snapshot
        .fast_capacity_bytes
        .saturating_sub(snapshot.fast_unmanaged_bytes)
        .saturating_sub(params.headroom_bytes)
        .saturating_sub(pinned_fast_bytes);

    // Rule 2 inputs: demand, resolved bounds, unscaled guarantee.
    let mut plans: Vec<ContainerPlan> = cs.iter().map(|c| initial_plan(c, params.demand)).collect();

    // Guarantee (docs/DESIGN.md rule 1), scaled in proportion when the guarantees
    // alone exceed the pool (rule 2, last sentence).
    let shared = |p: &&mut ContainerPlan| p.state != PlacementState::Pinned;
    let guarantee_sum: u128 = plans
        .iter_mut()
        .filter(shared)
        .map(|p| u128::from(p.guarantee_bytes))
        .sum();
    let guarantees_scaled = guarantee_sum > u128::from(pool_bytes);
    let mut guaranteed = guarantee_sum as u64; // ≤ pool unless scaled
    if guarantees_scaled {
        guaranteed = 0;
        for p in plans.iter_mut().filter(shared) {
            // floor(g × pool / Σg) ≤ g, and the floors sum to ≤ pool.
            p.guarantee_bytes =
                (u128::from(p.guarantee_bytes) * u128::from(pool_bytes) / guarantee_sum) as u64;
            guaranteed += p.guarantee_bytes;
        }
    }

    // Share (docs/DESIGN.md rule 2): water-fill the rest of the pool by weight,
    // each container up to its cap min(demand, local_high).
    let items: Vec<FillItem> = plans
        .iter()
        .zip(&cs)
        .map(|(p, c)| FillItem {
            room_bytes: if c.policy.opt_out {
                0
            } else {
                p.demand_bytes
                    .min(p.local_high_bytes)
                    .saturating_sub(p.guarantee_bytes)
            },
            weight: u64::from(c.policy.weight.max(1)),
        })
        .collect();
    let extra = water_fill(pool_bytes - guaranteed, &items);
    let mut given = guaranteed;
    for ((p, c), e) in plans.iter_mut().zip(&cs).zip(extra) {
        p.target_bytes = if c.policy.opt_out {
            c.fast_bytes
        } else {
            given += e;
            p.guarantee_bytes + e
        };
    }
    // Work conservation beyond the hot sets: when the hot sets leave part of
    // the pool unclaimed, it is water-filled again by weight up to
    // min(usage, local_high), so cold pages stay in DRAM that nobody's hot
    // set wants (docs/DESIGN.md rule 2: DRAM stays full while anyone wants it) instead
    // of being demoted into an empty fast tier. A no-op where demand = usage.
    if given < pool_bytes {
        let items: Vec<FillItem> = plans
            .iter()
            .zip(&cs)
            .map(|(p, c)| FillItem {
                room_bytes: if c.policy.opt_out {
                    0
                } else {
                    usage_bytes(c)
                        .min(p.local_high_bytes)
                        .saturating_sub(p.target_bytes)
                },
                weight: u64::from(c.policy.weight.max(1)),
            })
            .collect();
        for (p, e) in plans.iter_mut().zip(water_fill(pool_bytes - given, &items)) {
            p.target_bytes += e;
        }
    }

    // Thrash control (docs/DESIGN.md rule 4): per-container damping level from
    // the ping-pong seen over the window.
    state.clock_ms = state.clock_ms.saturating_add(snapshot.elapsed_ms);
    let now_ms = state.clock_ms;
    let mut thrash = std::mem::take(&mut state.thrash);
    for (p, c) in plans.iter_mut().zip(&cs) {
        let st = thrash.entry(c.id).or_default();
        let (level, rate) = crate::thrash::observe(st, now_ms, c.migrations, &params.thrash);
        p.damping_level = level;
        p.pingpong_bytes_per_s = rate;
    }
    thrash.retain(|id, _| cs.binary_search_by_key(id, |c| c.id).is_ok());
    state.thrash = thrash;

    // Hysteresis (docs/DESIGN.md rule 3): classify, and what each would move.
    let mut over: Vec<(usize, u64)> = Vec::new();
    let mut under: Vec<(usize, u64)> = Vec::new();
    let over_band = |p: &ContainerPlan, c: &ContainerSnapshot| {
        !c.policy.opt_out
            && c.fast_bytes
                > p.target_bytes
                    .saturating_add(band_bytes(params, p.target_bytes))
    };
    let someone_over = plans.iter().zip(&cs).any(|(p, c)| over_band(p, c));
    for (i, (p, c)) in plans.iter_mut().zip(&cs).enumerate() {
        if c.policy.opt_out {
            continue;
        }
        // Damping widens only the promotion side of the band: a container
        // that thrashes while holding more than its share (the kernel promotes
        // it, kswapd demotes it) is the one its neighbours need demoted, and
        // leaving it above target lets kswapd take from them instead (seen in
        // the emulated host: a protected neighbour lost 105 MiB, not 60).
        // And only while nobody is over target: a damped container short of
        // its share beside one holding more than its own would otherwise be
        // at target, claim nothing, and the excess would stay where it is
        // (its promotion is still cut per level, below).
        let band = band_bytes(params, p.target_bytes);
        let promote_band = if someone_over {
            band
        } else {
            band.saturating_mul(1u64 << p.damping_level.min(16))
        };
        if over_band(p, c) {
            p.state = PlacementState::OverTarget;
            over.push((i, c.fast_bytes - p.target_bytes));
        } else if c.fast_bytes.saturating_add(promote_band) < p.target_bytes && c.slow_bytes > 0 {
            p.state = PlacementState::UnderTarget;
            under.push((i, (p.target_bytes - c.fast_bytes).min(c.slow_bytes)));
        } else {
            p.state = PlacementState::AtTarget;
        }
    }

    // This cycle's containers, recorded once (membership.rs); then the
    // window after an arrival or exit (hotswap.rs), for the arrival assist
    // and the hot swap.
    let ids: Vec<ContainerId> = cs.iter().map(|c| c.id).collect();
    let first = state.members.is_empty();
    let changed = state.members.observe(now_ms, &ids);
    let usage: Vec<(ContainerId, u64)> = cs.iter().map(|c| (c.id, usage_bytes(c))).collect();
    // Each container's growth since the last cycle (all of it on a first
    // cycle), read before `filling` records this cycle's usages.
    let growth: Vec<u64> = usage
        .iter()
        .map(|&(id, now)| {
            now.saturating_sub(state.members.usage_bytes.get(&id).copied().unwrap_or(0))
        })
        .collect();
    let filling = state.members.filling(
        now_ms,
        &usage,
        params.arrival_window_ms,
        params.band_min_bytes,
        first,
    );
    let window_open = crate::hotswap::window_open(
        &mut state.hot_swap,
        &state.members,
        changed,
        now_ms,
        params.hot_swap_window_ms,
    );

    // Promotion assist (assist.rs): who has waited too long for the
    // kernel's promotion.
    if !params.tierd_promotes {
        let progress: Vec<crate::assist::Progress> = cs
            .iter()
            .zip(&plans)
            .map(|(c, p)| {
                let band = band_bytes(params, p.target_bytes);
                crate::assist::Progress {
                    id: c.id,
                    under: p.state == PlacementState::UnderTarget,
                    at_target: p.state == PlacementState::AtTarget && c.slow_bytes > 0,
                    short: params.arrival_assist
                        && window_open
                        && p.state == PlacementState::AtTarget
                        && p.damping_level == 0
                        && c.slow_bytes > 0
                        && c.fast_bytes.saturating_add(band / 4) < p.target_bytes,
                    damped: p.damping_level > 0,
                    promoted_bytes: c.migrations.promoted_bytes,
                    lower_hot_bytes: c.lower_hot_bytes,
                    swap_min_bytes: band / 4,
                    progress_min_bytes: band / 16,
                    lower_hint_faults: c.lower_hint_faults,
                }
            })
            .collect();
        let assisted =
            crate::assist::observe(&mut state.assist, now_ms, &progress, params.assist_after_ms);
        for (p, a) in plans.iter_mut().zip(assisted) {
            p.assisted = a;
        }
    } else {
        state.assist.clear();
    }

    // Inside-band trade (ContainerPlan::band_trade): a container a quarter
    // band or more below its target claims its known-hot lower-tier pages up
    // to its target; those a quarter band or more above theirs give up the
    // bytes above target for them. A quarter band on both sides, so that a
    // trade ends with both nearer their targets than it began, and a
    // thrashing (damped) container does not trade.
    let mut trade_claims = 0u64;
    if params.band_trade {
        for (p, c) in plans.iter_mut().zip(&cs) {
            let quarter = band_bytes(params, p.target_bytes) / 4;
            if p.state == PlacementState::AtTarget
                && p.damping_level == 0
                && c.slow_bytes > 0
                && c.fast_bytes.saturating_add(quarter) < p.target_bytes
            {
                p.band_trade = true;
                let gap = (p.target_bytes - c.fast_bytes).min(c.slow_bytes);
                trade_claims = trade_claims.saturating_add(c.recallable_bytes.min(gap));
            }
        }
    }
    if trade_claims > 0 {
        for (i, (p, c)) in plans.iter().zip(&cs).enumerate() {
            let quarter = band_bytes(params, p.target_bytes) / 4;
            // An assisted container at its target swaps within its own
            // share (swap_bytes) instead.
            if p.state == PlacementState::AtTarget
                && !p.assisted
                && c.fast_bytes > p.target_bytes.saturating_add(quarter)
            {
                over.push((i, c.fast_bytes - p.target_bytes));
            }
        }
    }

    // Rate limits: refill every bucket, then spend in a fixed order.
    let elapsed_ms = snapshot.elapsed_ms;
    let ids = || cs.iter().map(|c| c.id);
    let mut demote_tokens = Bucket::new(params.container_demote_bytes_per_s, params.burst_s)
        .refill_all(&state.demote_tokens, ids(), elapsed_ms);
    let mut promote_tokens = Bucket::new(params.container_promote_bytes_per_s, params.burst_s)
        .refill_all(&state.promote_tokens, ids(), elapsed_ms);
    let mut global_demote = Bucket::new(params.global_demote_bytes_per_s, params.burst_s)
        .refill(Some(state.global_demote_tokens), elapsed_ms);
    let mut global_promote = Bucket::new(params.global_promote_bytes_per_s, params.burst_s)
        .refill(Some(state.global_promote_tokens), elapsed_ms);

    // Work conservation (docs/DESIGN.md "Work conservation"): bytes above
    // `local_high` always go; below it, the over-target containers together
    // give up only the room the fast tier needs this cycle, in proportion
    // to their excess, so DRAM never empties for nobody.
    let managed_fast = cs
        .iter()
        .fold(0u64, |acc, c| acc.saturating_add(c.fast_bytes));
    // Room the tierd promoter fills in one window (promotion = "tierd").
    let promoter_window_bytes = if params.tierd_promotes {
        whole_bytes(
            params.container_promote_bytes_per_s as f64 * params.need_window_ms as f64 / 1000.0,
        )
    } else {
        0
    };
    // What each under-target container claims beyond the headroom. With
    // the kernel's promotion nothing but what a guarantee lacks, known-hot
    // pages and an assisted container's hot regions: NUMA balancing
    // promotes into the headroom and, short of free pages, wakes kswapd,
    // which demotes the unprotected (over-target) containers
    // (mm/migrate.c `migrate_misplaced_folio_prepare`). Room
    // made ahead of it stays empty whenever NUMA balancing backs its scan
    // off (to a minute between scans).
    let claims = under.iter().fold(0u64, |acc, &(i, w)| {
        // A `local_low` guarantee is owed up front: the kernel's promotion
        // of a sparse hot set can take minutes (tierd also promotes what
        // a guarantee lacks, into this room).
        let owed = plans[i].guarantee_bytes.saturating_sub(cs[i].fast_bytes);
        // Known-hot pages on the lower tier, and an assisted container's
        // hot lower-tier regions, are promoted by tierd as soon as there is
        // room.
        let assist = if plans[i].assisted {
            cs[i].lower_hot_bytes.unwrap_or(0)
        } else {
            0
        };
        let claim = promoter_window_bytes
            .max(owed)
            .max(cs[i].recallable_bytes)
            .max(assist)
            .min(w);
        // Arrival lookahead: a newcomer filling its share allocates about
        // as much by the next cycle as since the last one; the room is made
        // now, so that the allocation lands on the fast tier. Up to its
        // target, beside what it claims for its lower-tier pages.
        let lookahead = if params.arrival_lookahead && filling[i] {
            growth[i].min(
                plans[i]
                    .target_bytes
                    .saturating_sub(cs[i].fast_bytes)
                    .saturating_sub(claim),
            )
        } else {
            0
        };
        acc.saturating_add(claim).saturating_add(lookahead)
    });
    // Room needed = headroom + claims − free, where free = capacity −
    // unmanaged − managed: free room already there is not made again (it
    // is what the claimants grow into next). Written without clamping free
    // at 0, so a snapshot whose counters overcommit the tier (read at
    // different instants) counts the whole overcommit as needed room.
    let need_bytes = snapshot
        .fast_unmanaged_bytes
        .saturating_add(managed_fast)
        .saturating_add(params.headroom_bytes)
        .saturating_add(claims)
        .saturating_add(trade_claims)
        .saturating_sub(snapshot.fast_capacity_bytes);
    let over = limit_to_need(over, &plans, &cs, need_bytes);
    for (i, take) in spend(over, &mut demote_tokens, &mut global_demote) {
        plans[i].demote_bytes = take;
    }
    // A damped container wants only 1/2^level of its gap this cycle, so the
    // buckets are charged for what it may actually move.
    let under = under
        .into_iter()
        .map(|(i, want)| (i, want >> plans[i].damping_level.min(63)))
        .collect();
    for (i, take) in spend(under, &mut promote_tokens, &mut global_promote) {
        plans[i].promote_bytes = take;
    }
    // Within-share swap (ContainerPlan::swap_bytes): an assisted container
    // at its target trades its oldest fast-tier pages for its hot
    // lower-tier regions, charged to both its buckets. Its own demotion
    // makes the room, so nobody else's claim or the headroom pays for it.
    // The hot swap is the same for one that is not assisted, with its
    // known-hot pages, up to its lower-tier bytes that did not go there by
    // aged reclaim (its coldest, hotswap::unranked_below): at least a
    // quarter band of them (a smaller trade
    // is not worth the aging it takes), within a minute of an arrival or
    // exit (more for one quiet at that close, until its next burst) and at
    // most once every few cycles (hotswap.rs: each swap is an aging of the
    // container), and no more after `hot_swap_stop_after` swaps in a row
    // found next to nothing idle (less than a quarter band or a tenth of
    // what it holds on the fast tier: its pages there are all hot, and a
    // swap would trade hot for hot). Damped or not: its halves move
    // different pages (idle ones down, hot ones up), which is not
    // ping-pong, and a container damped after a fast cut is the one whose
    // hot pages went down with its cold ones.
    // Which containers may hot-swap this cycle: their window open
    // (hotswap::container_open) and their swaps not ended for finding
    // nothing idle (hotswap::fruitless, counted whether or not the window
    // is open).
    let may_swap: Vec<bool> = cs
        .iter()
        .zip(&plans)
        .map(|(c, p)| {
            let ended = crate::hotswap::fruitless(
                &mut state.hot_swap,
                c.id,
                c.swap_idle_bytes,
                (band_bytes(params, p.target_bytes) / 4)
                    .max(whole_bytes(
                        c.fast_bytes as f64 * crate::hotswap::HOT_SWAP_MIN_IDLE_FRACTION,
                    ))
                    .max(1),
                params.hot_swap_stop_after,
            );
            params.hot_swap
                && !ended
                && crate::hotswap::container_open(
                    &state.hot_swap,
                    &state.members,
                    c.id,
                    now_ms,
                    params.hot_swap_window_ms,
                    params.hot_swap_extension_ms,
                )
        })
        .collect();
    let unranked = crate::hotswap::unranked_below(&mut state.hot_swap, &cs);
    let hot_swap_open = may_swap.contains(&true);
    let swaps: Vec<(usize, u64)> = plans
        .iter()
        .enumerate()
        // A container already giving room this cycle (above its target for
        // a trader, band_trade) swaps at another: its demotion would be
        // two things at once, and the givers' bytes are counted for the
        // trader's claim alone.
        .filter(|(_, p)| p.state == PlacementState::AtTarget && p.demote_bytes == 0)
        .filter_map(|(i, p)| {
            let hot = if p.assisted {
                cs[i].lower_hot_bytes?
            } else {
                // Never more than what did not go below by aged reclaim
                // (hotswap::unranked_below).
                let known = cs[i].known_hot_below_bytes.min(unranked[i]);
                let min = (band_bytes(params, p.target_bytes) / 4).max(1);
                if !may_swap[i]
                    || known < min
                    || !crate::hotswap::due(&state.hot_swap, p.id, now_ms)
                {
                    return None;
                }
                known
            };
            let hot = hot.min(cs[i].slow_bytes);
            (hot > 0).then_some((i, hot))
        })
        .collect();
    let promotable = spend(swaps, &mut promote_tokens, &mut global_promote);
    let matched: BTreeMap<usize, u64> =
        spend(promotable.clone(), &mut demote_tokens, &mut global_demote)
            .into_iter()
            .collect();
    for (i, asked) in promotable {
        // A swap is both halves: promotion tokens the demotion side could
        // not match go back (spend may serve fewer than asked).
        let take = matched.get(&i).copied().unwrap_or(0);
        let back = asked.saturating_sub(take) as f64;
        promote_tokens[i] += back;
        global_promote += back;
        plans[i].swap_bytes = take;
        if take > 0 && !plans[i].assisted {
            crate::hotswap::record(&mut state.hot_swap, plans[i].id, now_ms);
        }
        plans[i].promote_bytes = plans[i].promote_bytes.saturating_add(take);
        plans[i].demote_bytes = plans[i].demote_bytes.saturating_add(take);
    }

    // Protection (Equilibria: memory.low steers kswapd demotion away).
    // It flips at the target itself, not at the band edge: a container inside
    // the band but above its target is left unprotected, so that when kswapd
    // must demote (promotions, new allocations) it takes from the containers
    // holding more than their share. Protecting everyone inside the band makes
    // every memcg protected, and the kernel then ignores memory.low for all of
    // them (seen in the emulated host: an at-target container lost 19 MiB).
    //
    // While a newcomer fills its share (Plan::filling), the others are
    // protected only up to what they would keep were it grown to its share:
    // its allocation wakes kswapd, which then demotes them rather than
    // failing and sending the allocation to the lower tier. Targets, and so
    // tierd's own demotion, do not change.
    let keep = filling
        .contains(&true)
        .then(|| would_be_targets(pool_bytes, guaranteed, &plans, &cs, &filling));
    for (i, (p, c)) in plans.iter_mut().zip(&cs).enumerate() {
        let room_for_newcomer = keep
            .as_ref()
            .is_some_and(|k| !filling[i] && c.fast_bytes > k[i]);
        p.memory_low_bytes = match p.state {
            PlacementState::OverTarget => 0,
            PlacementState::AtTarget if c.fast_bytes > p.target_bytes => 0,
            PlacementState::AtTarget | PlacementState::UnderTarget if room_for_newcomer => 0,
            PlacementState::Pinned | PlacementState::AtTarget | PlacementState::UnderTarget => {
                usage_bytes(c)
            }
        };
        // What a guarantee lacks is tierd's to promote (see ContainerPlan).
        if p.state != PlacementState::Pinned {
            p.guarantee_promote_bytes = p
                .guarantee_bytes
                .saturating_sub(c.fast_bytes)
                .min(p.promote_bytes);
        }
    }
    // A container holding more than its target, unprotected: kswapd has
    // fast-tier pages to demote that nobody's share needs. Not while one
    // fills its share: the incumbents' pages are then all young (nothing
    // has aged them yet), kswapd can find nothing it may take, and after 16
    // such tries the kernel gives the fast node up.
    let someone_unprotected_over = params.share_min
        && !filling.contains(&true)
        && plans.iter().zip(&cs).any(|(p, c)| {
            p.state != PlacementState::Pinned
                && p.memory_low_bytes == 0
                && c.fast_bytes > p.target_bytes
        });
    for p in plans.iter_mut() {
        // memory.low alone is only an ordering under the multi-gen LRU:
        // kswapd can take tens of MiB between two cycles from a protected
        // container (see ContainerPlan). A guarantee is hard whenever its
        // container is protected; any protected container is while another
        // holds an excess, so kswapd takes that excess and not pages the
        // protected one must then promote back.
        p.memory_min_bytes = if p.state != PlacementState::Pinned
            && p.memory_low_bytes > 0
            && (p.guarantee_bytes > 0 || someone_unprotected_over)
        {
            p.memory_low_bytes
        } else {
            0
        };
    }

    // New state: exactly the containers of this snapshot (prunes the rest).
    // The input is in key order, so collecting is a linear bulk build.
    store_tokens(&mut state.demote_tokens, &cs, demote_tokens);
    store_tokens(&mut state.promote_tokens, &cs, promote_tokens);
    state.global_demote_tokens = global_demote;
    state.global_promote_tokens = global_promote;

    // The aging gap (gap.rs): demotions' agings spaced, but not while a
    // newcomer fills its share, nor for a container whose demotion under
    // the gap takes next to nothing, until it is back within its band.
    let any_filling = filling.contains(&true);
    let members: Vec<ContainerId> = ids().collect();
    crate::gap::retain(&mut state.aging_gap, &members);
    for (p, c) in plans.iter_mut().zip(cs.iter()) {
        // An ask under a quarter of band_min is not written (the daemon's
        // least demotion is 1 MiB) or is rounding: it counts as none.
        let asked = Some(p.demote_bytes.saturating_sub(p.swap_bytes))
            .filter(|&b| b >= params.band_min_bytes / 4)
            .unwrap_or(0);
        let lifted = crate::gap::lifted(
            &mut state.aging_gap,
            p.id,
            c.fast_bytes,
            asked,
            params.aging_gap_lift_after,
        );
        p.aging_gap_ms = if any_filling || lifted {
            0
        } else {
            params.aging_gap_ms
        };
    }

    let settled = plans.iter().all(|p| p.state != PlacementState::UnderTarget);
    let steady = crate::steady::observe(
        &mut state.steady,
        now_ms,
        &state.members,
        changed,
        settled,
        params.steady_ms,
    );
    let under: Vec<ContainerId> = plans
        .iter()
        .filter(|p| p.state == PlacementState::UnderTarget)
        .map(|p| p.id)
        .collect();
    let scan_paced = crate::steady::pace_scan(&state.members, now_ms, &under, params.scan_pace_ms);
    let promote_gate = crate::steady::promote_gate(
        &mut state.steady,
        now_ms,
        snapshot.elapsed_ms,
        steady,
        snapshot.hot_below_bytes,
        params.hot_below_bytes_per_s,
        params.steady_ms,
    );

    Plan {
        pool_bytes,
        guarantees_scaled,
        need_bytes,
        containers: plans,
        steady,
        promote_gate,
        scan_paced,
        filling: cs
            .iter()
            .zip(&filling)
            .filter(|(_, &f)| f)
            .map(|(c, _)| c.id)
            .collect(),
        hot_swap_open,
    }
}

/// The fast-tier bytes each container would be given were every filling
/// container (`filling`, by index) grown to its `local_high` (a fraction
/// of an unknown usage: the pool): the pool above the guarantees
/// (`guaranteed`, as the share step spent them) water-filled by weight,
/// the others capped at this cycle's targets. Pinned containers get 0 (they
/// are outside the pool and never unprotected).
fn would_be_targets(
    pool_bytes: u64,
    guaranteed: u64,
    plans: &[ContainerPlan],
    cs: &[&ContainerSnapshot],
    filling: &[bool],
) -> Vec<u64> {
    let items: Vec<FillItem> = plans
        .iter()
        .zip(cs)
        .zip(filling)
        .map(|((p, c), &f)| FillItem {
            room_bytes: if c.policy.opt_out {
                0
            } else if f {
                c.policy
                    .local_high
                    .resolve(u64::MAX)
                    .min(pool_bytes)
                    .saturating_sub(p.guarantee_bytes)
            } else {
                p.target_bytes.saturating_sub(p.guarantee_bytes)
            },
            weight: u64::from(c.policy.weight.max(1)),
        })
        .collect();
    let extra = water_fill(pool_bytes.saturating_sub(guaranteed), &items);
    plans
        .iter()
        .zip(cs)
        .zip(extra)
        .map(|((p, c), e)| {
            if c.policy.opt_out {
                0
            } else {
                p.guarantee_bytes + e
            }
        })
        .collect()
}

/// Cuts the demotion wants `over` (index, bytes above target) down to what
/// the fast tier needs: each container's bytes above its `local_high` are
/// kept whole (a hard bound), and the rest of every want is scaled by
/// `min(1, need / Σ rest)`, floored, so the discretionary part sums to at
/// most `need_bytes`.
fn limit_to_need(
    over: Vec<(usize, u64)>,
    plans: &[ContainerPlan],
    cs: &[&ContainerSnapshot],
    need_bytes: u64,
) -> Vec<(usize, u64)> {
    let split = |&(i, want): &(usize, u64)| {
        let above_high = cs[i]
            .fast_bytes
            .saturating_sub(plans[i].local_high_bytes)
            .min(want);
        (i, above_high, want - above_high)
    };
    let rest: u128 = over.iter().map(|w| u128::from(split(w).2)).sum();
    if rest <= u128::from(need_bytes) {
        return over;
    }
    over.iter()
        .map(split)
        .map(|(i, hard, soft)| {
            let scaled = u128::from(soft) * u128::from(need_bytes) / rest;
            (i, hard + scaled as u64)
        })
        .filter(|&(_, w)| w > 0)
        .collect()
}

/// Hands out `wants` (index in id order, bytes wanted) from the per-container
/// `tokens` and the shared `global` bucket: each gets
/// `min(wanted, its tokens, global tokens left)`, and both buckets are
/// charged. The global bucket is spent largest want first, ties by id, so
/// the container furthest from its target is served first, deterministically.
/// The order only matters when the global bucket runs short; then a binary
/// heap serves the largest wants until it is empty (O(n + k log n) for k
/// served), and everyone after that gets 0. Returns (index, bytes granted).
fn spend(wants: Vec<(usize, u64)>, tokens: &mut [f64], global: &mut f64) -> Vec<(usize, u64)> {
    fn grant((i, want): (usize, u64), tokens: &mut [f64], global: &mut f64) -> (usize, u64) {
        let take = want.min(whole_bytes(tokens[i])).min(whole_bytes(*global));
        tokens[i] -= take as f64;
        *global -= take as f64;
        (i, take)
    }
    let asked: u128 = wants
        .iter()
        .map(|&(i, w)| u128::from(w.min(whole_bytes(tokens[i]))))
        .sum();
    if asked <= u128::from(whole_bytes(*global)) {
        return wants
            .into_iter()
            .map(|w| grant(w, tokens, global))
            .collect();
    }
    // Max-heap on (want, Reverse(index)): largest want first, then lowest id.
    let mut heap: BinaryHeap<(u64, Reverse<usize>)> =
        wants.into_iter().map(|(i, w)| (w, Reverse(i))).collect();
    let mut out = Vec::with_capacity(heap.len());
    while whole_bytes(*global) > 0 {
        let Some((w, Reverse(i))) = heap.pop() else {
            break;
        };
        out.push(grant((i, w), tokens, global));
    }
    out
}

/// Replaces `map` by `cs` (ascending ids) ↦ `tokens`. In the steady state the
/// set of containers is unchanged, and the values are overwritten in place
/// (one ordered walk); otherwise the map is rebuilt, which drops the state of
/// containers that left.
fn store_tokens(map: &mut BTreeMap<ContainerId, f64>, cs: &[&ContainerSnapshot], tokens: Vec<f64>) {
    let same_keys = map.len() == cs.len() && map.keys().zip(cs).all(|(&k, c)| k == c.id);
    if same_keys {
        for (v, t) in map.values_mut().zip(tokens) {
            *v = t;
        }
    } else {
        *map = cs.iter().map(|c| c.id).zip(tokens).collect();
    }
}

/// Total usage, saturating (the model's `usage_bytes` would overflow-panic in
/// debug builds on absurd inputs).
fn usage_bytes(c: &ContainerSnapshot) -> u64 {
    c.fast_bytes.saturating_add(c.slow_bytes)
}

/// Demand, resolved bounds and unscaled guarantee of one container; target,
/// budgets, state and `memory.low` are filled in later.
fn initial_plan(c: &ContainerSnapshot, demand: DemandSource) -> ContainerPlan {
    let usage = usage_bytes(c);
    // Demand is usage, or the hot set where hotness knows it (docs/DESIGN.md
    // rule 1). A hot set larger than usage is sampling noise: capped at usage
    // so the pool is never held for memory the container does not have.
    let demand_bytes = match demand {
        DemandSource::Usage => usage,
        DemandSource::HotSet => c.hot_bytes.map_or(usage, |h| h.min(usage)),
    };
    // An offloading container needs on the fast tier what it touched
    // within the offload's min_age (its warm set): its cold pages are
    // demoted by the share as soon as another container needs the room,
    // and the share does not claim room back for what offload let go.
    // While the warm set is unknown, what it holds (the offload shrinks
    // it, promotion of what it touches grows it).
    let demand_bytes = match (&c.policy.offload, c.warm_bytes) {
        (Some(_), Some(warm)) => demand_bytes.min(warm),
        (Some(_), None) => demand_bytes.min(c.fast_bytes),
        (None, _) => demand_bytes,
    };
    let local_high_bytes = c.policy.local_high.resolve(usage);
    let local_low_bytes = c.policy.local_low.resolve(usage).min(local_high_bytes);
    let pinned = c.policy.opt_out;
    ContainerPlan {
        demand_bytes,
        local_low_bytes,
        local_high_bytes,
        guarantee_bytes: if pinned {
            c.fast_bytes
        } else {
            demand_bytes.min(local_low_bytes)
        },
        ..ContainerPlan::new(
            c.id,
            if pinned {
                PlacementState::Pinned
            } else {
                PlacementState::AtTarget
            },
        )
    }
}

/// Hysteresis band around a target, in bytes:
/// `max(band_min_bytes, band_fraction × target)`. A negative or NaN fraction
/// counts as 0.
fn band_bytes(params: &PolicyParams, target_bytes: u64) -> u64 {
    let frac = params.band_fraction.max(0.0); // NaN.max(0.0) == 0.0
    let proportional = (frac * target_bytes as f64) as u64;
    params.band_min_bytes.max(proportional)
}

/// One container's input to [`water_fill`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FillItem {
    /// Bytes the container can still take: its cap minus what it already has.
    pub room_bytes: u64,
    /// Weight, ≥ 1.
    pub weight: u64,
}

/// Weighted max-min fair division of `budget_bytes` (water-filling).
///
/// Returns, per item, `min(room, weight × λ)` for the level λ at which the
/// sum equals the budget (or every item's room, if the rooms add up to less).
///
/// The level is found by selection rather than a full sort by
/// `room / weight`: pick the median ratio r of the undecided items
/// (`select_nth_unstable`, O(len) worst case) and evaluate
/// `f(r) = Σ min(room, weight × r)`. If `f(r) ≤ budget`, every item with
/// ratio ≤ r is full at the level; otherwise every item with ratio ≥ r is
/// not. Each round halves the undecided items, so the whole is O(n), and all
/// comparisons are exact integer (u128) cross-products.
///
/// The unsaturated items then get `floor(weight × left / weight_left)`; the
/// floors leave fewer spare bytes than there are such items, and each of them
/// has room for one more (its ratio is strictly above the level), so the
/// first ones by position get one byte each: the result sums to
/// `min(budget, Σ room)` exactly.
pub(crate) fn water_fill(budget_bytes: u64, items: &[FillItem]) -> Vec<u64> {
    let rooms: u128 = items.iter().map(|it| u128::from(it.room_bytes)).sum();
    if rooms <= u128::from(budget_bytes) {
        return items.iter().map(|it| it.room_bytes).collect();
    }
    let mut out = vec![0u64; items.len()];
    let mut unsaturated = vec![false; items.len()];
    let mut undecided: Vec<(u64, u64, usize)> = items
        .iter()
        .enumerate()
        .filter(|(_, it)| it.room_bytes > 0)
        .map(|(i, it)| (it.room_bytes, it.weight, i))
        .collect();
    // Budget not yet given to saturated items, and weight of those known
    // to be unsaturated.
    let mut left = u128::from(budget_bytes);
    let mut weight_above = 0u128;
    let (mut lo, mut hi) = (0, undecided.len()); // the undecided range
    while lo < hi {
        let slice = &mut undecided[lo..hi];
        let m = slice.len() / 2;
        slice.select_nth_unstable_by(m, |&(ra, wa, ia), &(rb, wb, ib)| {
            (u128::from(ra) * u128::from(wb))
                .cmp(&(u128::from(rb) * u128::from(wa)))
                .then(ia.cmp(&ib))
        });
        let (room_p, weight_p, _) = slice[m];
        let (low, high) = slice.split_at(m + 1); // low ends with the pivot
        let low_rooms: u128 = low.iter().map(|&(r, _, _)| u128::from(r)).sum();
        let high_weight: u128 = high.iter().map(|&(_, w, _)| u128::from(w)).sum();
        // f(r) ≤ left, with r = room_p / weight_p, multiplied by weight_p.
        let fits = low_rooms * u128::from(weight_p)
            + u128::from(room_p) * (high_weight + weight_above)
            <= left * u128::from(weight_p);
        if fits {
            for &(r, _, i) in low {
                out[i] = r;
            }
            left -= low_rooms;
            lo += m + 1;
        } else {
            for &(_, w, i) in &slice[m..] {
                unsaturated[i] = true;
                weight_above += u128::from(w);
            }
            hi = lo + m;
        }
    }
    // Σ rooms > budget, so some item is unsaturated: weight_above > 0.
    let mut given = 0u128;
    for (i, it) in items.iter().enumerate() {
        if unsaturated[i] {
            let share = u128::from(it.weight) * left / weight_above;
            out[i] = share as u64;
            given += share;
        }
    }
    let spare = (left - given) as usize;
    for i in (0..items.len()).filter(|&i| unsaturated[i]).take(spare) {
        out[i] += 1;
    }
    out
}
