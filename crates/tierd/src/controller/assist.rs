//! Promotion assist (`daemon.assist_after`, policy `assist.rs`): tierd
//! promotes the hot lower-tier regions of a container the kernel's
//! NUMA-balancing promotion has left under its target. NUMA balancing
//! promotes a page at the hint fault after its process's next scan pass;
//! once the scan has backed off those passes come a minute apart, and a
//! newcomer's hot pages that one pass did not reach wait there while its
//! share of DRAM sits with a neighbour (docs/NOTES.md "Promotion assist").
//! DAMON watches only the assisted containers' processes (with the shipped
//! defaults nothing else needs it), and stops when none is assisted.

use super::actuate::Agings;
use super::*;

impl Controller {
    /// DAMON's hot bytes on the lower tier of container `c`, once DAMON has
    /// watched it for `cold_min_age` (a region's access count means
    /// nothing before it has been split and aggregated); `None` before, or
    /// when DAMON does not watch it.
    pub(super) fn lower_hot_bytes(&self, c: u64) -> Option<u64> {
        let r = self.hot.readings.get(&c)?;
        if r.regions == 0 || r.monitored_for < self.cfg.daemon.cold_min_age {
            return None;
        }
        let lower = self.topo.lower_nodes();
        Some(
            hotness::monitor::hot_by_node(r)
                .iter()
                .filter(|(n, _)| lower.contains(n))
                .map(|(_, b)| *b)
                .sum(),
        )
    }

    /// Records which containers the plan assists (DAMON watches them from
    /// the next cycle) and logs each change.
    pub(super) fn note_assisted(&mut self, managed: &[Managed], plan: &Plan) {
        let ids = |f: fn(&policy::ContainerPlan) -> bool| -> HashSet<u64> {
            plan.containers
                .iter()
                .filter(|p| f(p))
                .map(|p| p.id)
                .collect()
        };
        let now = ids(|p| p.assisted);
        let swapping = ids(|p| p.swap_bytes > 0);
        for m in managed {
            if let Some(p) = plan.get(m.id).filter(|p| p.assisted) {
                tracing::debug!(container = %m.path, lower_hot_bytes = ?self.lower_hot_bytes(m.id),
                    state = ?p.state, promote = p.promote_bytes, swap = p.swap_bytes, "assisted");
            }
            match (self.assisted.contains(&m.id), now.contains(&m.id)) {
                (false, true) => tracing::info!(
                    container = %m.path,
                    after = ?self.cfg.daemon.assist_after,
                    "under its target with nothing promoted for it: tierd promotes its hot lower-tier regions (DAMON watches it)"
                ),
                (true, false) => {
                    tracing::info!(container = %m.path, "promotion assist ended")
                }
                _ => {}
            }
            if swapping.contains(&m.id) && !self.swapping.contains(&m.id) {
                tracing::info!(
                    container = %m.path,
                    "at its target with hot regions on the lower tier: swaps its oldest fast-tier pages for them"
                );
            }
        }
        self.assisted = now;
        self.swapping = swapping;
    }

    /// Promotes the hot lower-tier DAMON regions of each assisted container
    /// (`move_pages(2)`, hottest regions first), at most its promotion
    /// budget (`promote_bytes`, already divided by its damping level), and
    /// makes the room for it in steps: first into free fast-tier memory
    /// above the headroom, then, while the plan leaves room to make
    /// (`assist_room_bytes` of the containers over their targets,
    /// `swap_bytes` of the swapping ones), one step of demotion (half the
    /// headroom, at least [`MIN_ASSIST_STEP`]) followed by a promotion
    /// round into it. It stops when a round fills less than half of its
    /// step: DAMON's region-granular estimate swings from cycle to cycle,
    /// and room made ahead of a promotion that finds less stays empty
    /// (docs/NOTES.md "Assist room in steps"). Agings of the demotions
    /// are added to `agings`. Returns true while an assisted container is
    /// still being watched or moved (the cycle is not quiet).
    pub(super) fn assist(&mut self, managed: &[Managed], plan: &Plan, agings: &mut Agings) -> bool {
        let mut budgets: BTreeMap<u64, u64> = managed
            .iter()
            .filter_map(|m| {
                plan.get(m.id)
                    .filter(|p| p.assisted && p.promote_bytes > 0)
                    .map(|p| (m.id, p.promote_bytes))
            })
            .collect();
        if budgets.is_empty() || self.hot.pages.is_none() {
            return false;
        }
        // (container, assist room left to make, swap demotion left)
        let mut left: Vec<(&Managed, u64, u64)> = managed
            .iter()
            .filter_map(|m| {
                plan.get(m.id)
                    .map(|p| (m, p.assist_room_bytes, p.swap_bytes))
            })
            .filter(|&(_, room, swap)| room + swap > 0)
            .collect();
        let step = (self.cfg.headroom_bytes() / 2).max(MIN_ASSIST_STEP);
        self.assist_round(managed, &mut budgets, 0);
        loop {
            let total: u64 = left.iter().map(|&(_, r, s)| r + s).sum();
            if total == 0 || budgets.values().all(|&b| b == 0) {
                break;
            }
            let this = step.min(total);
            let mut made = 0;
            for (m, room, swap) in left.iter_mut() {
                let mine = ((u128::from(this) * u128::from(*room + *swap))
                    .div_ceil(u128::from(total)) as u64)
                    .min(*room + *swap);
                if mine == 0 {
                    continue;
                }
                // Each step reads lru_gen again: the last one emptied
                // generations.
                let started = Instant::now();
                match self.demote(m, mine, &mut None, agings) {
                    Ok(outcome) => {
                        self.demotion_pace.observe(mine, started.elapsed());
                        let from_swap = mine.min(*swap);
                        self.note_demoted(m, mine, outcome, mine - from_swap);
                        *swap -= from_swap;
                        *room -= mine - from_swap;
                        made += mine;
                    }
                    Err(e) => {
                        self.demotion_failed(m, e);
                        (*room, *swap) = (0, 0);
                    }
                }
            }
            if made == 0 {
                break;
            }
            let filled = self.assist_round(managed, &mut budgets, made);
            if filled < made / 2 {
                tracing::debug!(made, filled, left = total - made,
                    "the assist filled under half the room made for it: the rest waits for the next cycle");
                break;
            }
        }
        true
    }

    /// One promotion round of the assist into free fast-tier memory above
    /// the headroom, read now, and at least `made` (the bytes the step
    /// before it demoted: pages freed by a migration wait on the per-CPU
    /// free lists, which the node's free count leaves out, so a read right
    /// after a step found 0 of 32 MiB made). Each assisted container in
    /// `budgets` (bytes it may still promote this cycle, reduced by what
    /// moved) gets at most its budget and what room is left. Returns the
    /// bytes moved.
    fn assist_round(
        &mut self,
        managed: &[Managed],
        budgets: &mut BTreeMap<u64, u64>,
        made: u64,
    ) -> u64 {
        let Some((dest, lower, room)) = self.promotion_room("the promotion assist") else {
            return 0;
        };
        let mut room = room.max(made);
        let warm_up = self.cfg.daemon.cold_min_age;
        let mut results = Vec::new();
        let (Some(pm), readings) = (self.hot.pages.as_mut(), &self.hot.readings) else {
            return 0;
        };
        for m in managed {
            let Some(budget) = budgets.get_mut(&m.id) else {
                continue;
            };
            let Some(r) = readings.get(&m.id).filter(|r| r.monitored_for >= warm_up) else {
                continue;
            };
            let take = (*budget).min(room);
            if take == 0 {
                continue;
            }
            // Hot regions only (cold_age 0): the assist promotes what DAMON
            // saw accessed, never the recently idle; and only regions whose
            // sampled pages are partly on the lower tier, so that the node
            // queries (a few µs a page under emulation) are not spent on a
            // hot set already on DRAM.
            let procs = with_lower_pages(&r.procs, &lower);
            let mv = pm.promote(m.id, &procs, 0, &lower, dest, take);
            tracing::debug!(container = %m.path, budget = take, room, moved = mv.bytes,
                failures = ?mv.failures, "assist promoted");
            room = room.saturating_sub(mv.bytes);
            *budget -= mv.bytes.min(*budget);
            results.push((m.id, mv));
        }
        let mut moved = 0;
        for (c, mv) in results {
            moved += mv.bytes;
            self.record_move(managed, c, Direction::Promote, "assist", &mv);
        }
        moved
    }
}

/// The least room the assist makes in one step (see [`Controller::assist`]).
pub(super) const MIN_ASSIST_STEP: u64 = 16 << 20;

/// `procs` keeping only the regions with sampled pages on a `lower` node.
fn with_lower_pages(
    procs: &[hotness::monitor::ProcRegions],
    lower: &[u32],
) -> Vec<hotness::monitor::ProcRegions> {
    procs
        .iter()
        .map(|p| {
            let (regions, nodes) = p
                .regions
                .iter()
                .zip(&p.nodes)
                .filter(|(_, n)| n.iter().any(|(node, f)| *f > 0.0 && lower.contains(node)))
                .map(|(r, n)| (*r, n.clone()))
                .unzip();
            hotness::monitor::ProcRegions {
                pid: p.pid,
                regions,
                nodes,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotness::damon::TriedRegion;
    use hotness::monitor::ProcRegions;

    #[test]
    fn only_regions_sampled_on_the_lower_tier_are_kept() {
        let r = |start| TriedRegion {
            start,
            end: start + 4096,
            nr_accesses: 5,
            age: 1,
        };
        let procs = vec![ProcRegions {
            pid: 7,
            regions: vec![r(0), r(4096), r(8192), r(12288)],
            nodes: vec![
                vec![(0, 1.0)],
                vec![(0, 0.5), (1, 0.5)],
                vec![],
                vec![(1, 1.0)],
            ],
        }];
        let kept = with_lower_pages(&procs, &[1]);
        let starts: Vec<u64> = kept[0].regions.iter().map(|r| r.start).collect();
        assert_eq!(starts, vec![4096, 12288]);
        assert_eq!(kept[0].nodes.len(), 2);
    }
}
