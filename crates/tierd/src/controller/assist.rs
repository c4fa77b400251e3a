//! Promotion assist (`daemon.assist_after`, policy `assist.rs`): tierd
//! promotes the hot lower-tier regions of a container the kernel's
//! NUMA-balancing promotion has left under its target. NUMA balancing
//! promotes a page at the hint fault after its process's next scan pass;
//! once the scan has backed off those passes come a minute apart, and a
//! newcomer's hot pages that one pass did not reach wait there while its
//! share of DRAM sits with a neighbour (docs/NOTES.md "Promotion assist").
//! DAMON watches only the processes of assisted containers and of those
//! lacking their `local_low` guarantee (with the shipped defaults nothing
//! else needs it), and stops when there are none.

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

    /// Records which containers the plan assists and which lack their
    /// `local_low` guarantee (DAMON watches both from the next cycle: the
    /// guarantee's promotion takes its pages from DAMON's regions, README
    /// "Policy semantics"), and logs each change. A container stays owed
    /// while its fast-tier bytes are under its guarantee with pages on the
    /// lower tier, so DAMON does not stop and restart on a cycle whose
    /// promotion budget happens to be spent.
    pub(super) fn note_assisted(&mut self, managed: &[Managed], snapshot: &Snapshot, plan: &Plan) {
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
        let owed: HashSet<u64> = snapshot
            .containers
            .iter()
            .filter(|c| {
                plan.get(c.id).is_some_and(|p| {
                    p.guarantee_promote_bytes > 0
                        || (self.owed.contains(&c.id)
                            && p.state != PlacementState::Pinned
                            && c.fast_bytes < p.guarantee_bytes
                            && c.slow_bytes > 0)
                })
            })
            .map(|c| c.id)
            .collect();
        for m in managed {
            match (self.owed.contains(&m.id), owed.contains(&m.id)) {
                (false, true) => tracing::info!(
                    container = %m.path,
                    "under its local_low guarantee: tierd promotes what it lacks (DAMON watches it)"
                ),
                (true, false) => tracing::info!(container = %m.path, "guarantee met"),
                _ => {}
            }
        }
        self.assisted = now;
        self.owed = owed;
        self.swapping = swapping;
    }

    /// Promotes the hot lower-tier DAMON regions of each assisted container
    /// (`move_pages(2)`, hottest regions first) after this cycle's demotion
    /// made room: at most its promotion budget (`promote_bytes`, already
    /// divided by its damping level) and what free fast-tier memory exceeds
    /// the headroom by. Returns true while an assisted container is still
    /// being watched or moved (the cycle is not quiet).
    pub(super) fn assist(&mut self, managed: &[Managed], plan: &Plan) -> bool {
        let todo: Vec<(u64, u64, Recent)> = plan
            .containers
            .iter()
            .filter(|p| p.assisted && p.promote_bytes > 0)
            .map(|p| (p.id, p.promote_bytes, Recent::None))
            .collect();
        if todo.is_empty() || self.hot.pages.is_none() {
            return false;
        }
        // Hot regions only (Recent::None): the assist promotes what DAMON saw
        // accessed, never the recently idle; and nothing before DAMON has
        // watched the container for `cold_min_age`.
        let warm_up = self.cfg.daemon.cold_min_age;
        self.promote_regions(managed, &todo, warm_up, "the promotion assist", "assist");
        true
    }

    /// Moves up to `want` bytes of each `(container, want, recent)` of
    /// `todo`, in its order, from the container's DAMON regions that have
    /// pages on the lower tier to the fast node with the most free memory,
    /// with `move_pages(2)`: regions seen accessed, hottest first, then the
    /// idle ones `recent` admits
    /// ([`PagesMover::promote`]). All of them share the room
    /// read now, after this cycle's demotion: free fast-tier bytes above
    /// the headroom, so a promotion never pushes the fast node into its
    /// watermarks (docs/NOTES.md "The guarantee's promotion needs DAMON"),
    /// except that a container in a within-share swap may refill what its
    /// own eviction freed this cycle (`swap_room`, spent as it is used) in
    /// any case.
    /// A container DAMON has watched for less than `warm_up`, or not at all,
    /// is skipped. `what` names the caller in a log line when free memory
    /// cannot be read; `mechanism` labels the moved bytes
    /// (`tierd_container_migrated_bytes_total`).
    pub(super) fn promote_regions(
        &mut self,
        managed: &[Managed],
        todo: &[(u64, u64, Recent)],
        warm_up: Duration,
        what: &str,
        mechanism: &'static str,
    ) {
        let Some((dest, lower, mut room)) = self.promotion_room(what) else {
            return;
        };
        let mut results = Vec::new();
        let (Some(pm), readings) = (self.hot.pages.as_mut(), &self.hot.readings) else {
            return;
        };
        for &(c, want, recent) in todo {
            let Some(r) = readings.get(&c).filter(|r| r.monitored_for >= warm_up) else {
                continue;
            };
            // A swap's promotion half may refill the room its own eviction
            // made this cycle, headroom or not (see `recall`).
            let swapped = self.swap_room.get(&c).copied().unwrap_or(0);
            let budget = want.min(room.max(swapped));
            if budget == 0 {
                continue;
            }
            // Only regions whose sampled pages are partly on the lower
            // tier: the node queries (a few µs a page under emulation) are
            // not spent on pages already on DRAM.
            let procs = with_lower_pages(&r.procs, &lower);
            let mv = pm.promote(c, &procs, recent, &lower, dest, budget);
            room = room.saturating_sub(mv.bytes);
            results.push((c, mv));
        }
        for (c, mv) in results {
            self.record_move(managed, c, Direction::Promote, mechanism, &mv);
            self.spend_swap_room(c, mv.bytes);
        }
    }

    /// Takes `bytes` promoted for container `c` (already counted by
    /// [`Self::record_move`]) off the room its swap made this cycle, so
    /// that a second promotion in the same cycle (the guarantee's, then the
    /// assist's) does not spend it again.
    ///
    /// What refilled that room is the swap's promotion half and leaves the
    /// thrash input, as its demotion half does (`record_demotion`,
    /// `swap_out`): min(down, up) would otherwise read a container trading
    /// its own pages after a cut as thrashing and damp it.
    pub(super) fn spend_swap_room(&mut self, c: u64, bytes: u64) {
        let Some(r) = self.swap_room.get_mut(&c) else {
            return;
        };
        let spent = bytes.min(*r);
        *r -= spent;
        if let Some(own) = self.own_moved.get_mut(&c) {
            own.promoted_bytes = own.promoted_bytes.saturating_sub(spent);
        }
    }
}

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

    /// A controller on a copy of the 6.12 guest's kernel files.
    fn fixture_controller() -> (tempfile::TempDir, Controller) {
        let fixtures = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/linux-6.12"
        );
        let dir = tempfile::tempdir().unwrap();
        testbed::copy_tree(std::path::Path::new(fixtures), dir.path());
        let root = dir.path();
        let text = format!(
            "[daemon]\ncgroup_root = {:?}\nsysfs_root = {:?}\nprocfs_root = {:?}\n[[policy]]\nmatch = \"test.slice/*\"\n",
            root.join("sys/fs/cgroup"),
            root.join("sys"),
            root.join("proc"),
        );
        let cfg = crate::config::Config::parse(&text, std::path::Path::new("test.toml")).unwrap();
        let c = Controller::new(
            cfg,
            Arc::new(crate::metrics::Metrics::new("kernel")),
            Arc::new(std::sync::Mutex::new(Default::default())),
        )
        .unwrap();
        (dir, c)
    }

    #[test]
    fn a_swaps_promotion_half_leaves_the_thrash_input() {
        let (_dir, mut c) = fixture_controller();
        const MIB: u64 = 1 << 20;
        // 10 MiB promoted this cycle, 6 MiB of it into the room the
        // container's own swap made.
        c.swap_room.insert(1, 6 * MIB);
        c.own_moved.entry(1).or_default().promoted_bytes = 10 * MIB;
        c.spend_swap_room(1, 10 * MIB);
        assert_eq!(c.own_moved[&1].promoted_bytes, 4 * MIB);
        assert_eq!(c.swap_room[&1], 0);
        // The room spent, a later promotion counts whole.
        c.own_moved.get_mut(&1).unwrap().promoted_bytes += 2 * MIB;
        c.spend_swap_room(1, 2 * MIB);
        assert_eq!(c.own_moved[&1].promoted_bytes, 6 * MIB);
        // A container that did not swap keeps all of its promotions.
        c.own_moved.entry(2).or_default().promoted_bytes = 3 * MIB;
        c.spend_swap_room(2, 3 * MIB);
        assert_eq!(c.own_moved[&2].promoted_bytes, 3 * MIB);
    }
}
