//! The hand-off to tierd's own movers (`promotion = "tierd"`, cold-first
//! demotion, and in every mode what a `local_low` guarantee lacks, the
//! last through the `move_pages` mover after the cycle's demotion): what
//! each container may move this cycle, when memory.reclaim takes over from
//! a stalled cold mover, and how each result is counted.

use super::*;

/// When memory.reclaim may take over a container's demotion from the
/// cold-first mover. memory.reclaim picks by LRU and takes hot pages too, so
/// it waits while the mover is warming up or making progress, and takes the
/// remainder only after the mover found nothing for a grace period: DAMON
/// regions restart their age when they split, merge or are tried by DAMOS,
/// so one empty cycle is not a stall (docs/NOTES.md, "The DAMOS mover on
/// Linux 6.12"). The same clock says when `move_pages` takes over from
/// reclaim that takes nothing (`unevictable.rs`).
#[derive(Default)]
pub(super) struct ColdStall {
    since: HashMap<u64, Instant>,
}

impl ColdStall {
    /// Returns true once the mover of container `c` has been stalled (not
    /// `busy`: neither warming up, nor progressing, nor at its quota) for at
    /// least `grace`; any busy cycle restarts the clock.
    pub(super) fn stalled(&mut self, c: u64, busy: bool, now: Instant, grace: Duration) -> bool {
        if busy {
            self.since.remove(&c);
            return false;
        }
        let since = *self.since.entry(c).or_insert(now);
        now.duration_since(since) >= grace
    }

    /// Restarts container `c`'s clock at `now` (after the taking over).
    pub(super) fn restart(&mut self, c: u64, now: Instant) {
        self.since.insert(c, now);
    }

    /// Forgets containers that no longer demote.
    pub(super) fn retain(&mut self, demoting: impl Fn(u64) -> bool) {
        self.since.retain(|&c, _| demoting(c));
    }
}

impl Controller {
    /// `daemon.cold_min_age` in aggregation intervals `aggr` (at least 1):
    /// the region age (DAMON counts it in aggregations) from which a region
    /// is idle enough for cold-first demotion, and up to which an idle
    /// region still counts for tierd's promotion. The virtual-address
    /// monitor and the DAMOS mover's kdamond aggregate at their own
    /// intervals (`hotness.aggr_interval`, `hotness.damos_aggr_interval`).
    fn cold_min_age_aggrs(&self, aggr: Duration) -> u32 {
        let aggr_us = aggr.as_micros().max(1);
        (self.cfg.daemon.cold_min_age.as_micros() / aggr_us).max(1) as u32
    }

    /// Cold-first demotion (`cold_demotion`) through the configured mover,
    /// and with the DAMOS mover also promotion by tierd (`promotion =
    /// "tierd"`: DAMOS applies its quotas during the coming interval; the
    /// `move_pages` mover promotes after the demotion,
    /// [`Self::promote_regulated`]). Returns, per container, the demotion
    /// already done (memory.reclaim does the rest).
    pub(super) fn regulated_moves(
        &mut self,
        managed: &[Managed],
        plan: &Plan,
    ) -> HashMap<u64, u64> {
        let mut done_down = HashMap::new();
        let d = &self.cfg.daemon;
        let promote = d.promotion == PromotionMode::Tierd;
        let cold = d.cold_demotion;
        let Some(damon) = &self.hot.damon else {
            return done_down;
        };
        if !promote && !cold {
            return done_down;
        }
        let Some(lower_dest) = self.topo.most_free(&self.topo.lower_nodes()) else {
            return done_down;
        };
        let fast: Vec<u32> = self.topo.fast_nodes().iter().copied().collect();
        let base_age = self.cold_min_age_aggrs(self.cfg.hotness.aggr_interval);
        let damos_age = self.cold_min_age_aggrs(self.cfg.hotness.damos_aggr_interval);
        let mut results: Vec<(u64, Direction, &'static str, Moved)> = Vec::new();
        let now = Instant::now();
        let stall_grace = d.cold_min_age.max(3 * d.interval);
        let demoting: HashSet<u64> = managed
            .iter()
            .filter(|m| {
                plan.get(m.id).is_some_and(|p| {
                    cold && p.state == PlacementState::OverTarget && p.demote_bytes > 0
                })
            })
            .map(|m| m.id)
            .collect();
        self.hot.cold_stalled.retain(|c| demoting.contains(&c));

        if let Some(pm) = &mut self.hot.pages {
            for m in managed {
                let (Some(p), Some(r)) = (plan.get(m.id), self.hot.readings.get(&m.id)) else {
                    continue;
                };
                if cold && p.state == PlacementState::OverTarget && p.demote_bytes > 0 {
                    let min_age = base_age.saturating_mul(1 << p.damping_level.min(16));
                    // No region can have been idle for cold_min_age yet: wait
                    // for DAMON rather than let memory.reclaim demote.
                    let warming_up = r.monitored_for < d.cold_min_age;
                    let mv = if warming_up {
                        Moved::default()
                    } else {
                        pm.demote(m.id, &r.procs, min_age, &fast, lower_dest, p.demote_bytes)
                    };
                    let progress = mv.bytes >= MIN_RECLAIM_BYTES;
                    let stalled = self.hot.cold_stalled.stalled(
                        m.id,
                        warming_up || progress,
                        now,
                        stall_grace,
                    );
                    done_down.insert(m.id, if stalled { mv.bytes } else { p.demote_bytes });
                    if !warming_up {
                        results.push((m.id, Direction::Demote, "move_pages", mv));
                    }
                }
            }
            pm.retain(|c| managed.iter().any(|m| m.id == c));
        }
        if let Some(dm) = &mut self.hot.damos {
            let orders: Vec<DamosOrder> = managed
                .iter()
                .filter_map(|m| {
                    let p = plan.get(m.id)?;
                    Some(DamosOrder {
                        container: m.id,
                        memcg_path: format!("/{}", m.path),
                        promote_bytes: if promote { p.promote_bytes } else { 0 },
                        demote_bytes: if cold && p.state == PlacementState::OverTarget {
                            p.demote_bytes
                        } else {
                            0
                        },
                        cold_min_age: damos_age.saturating_mul(1 << p.damping_level.min(16)),
                        target_fast_bytes: p.target_bytes,
                    })
                })
                .collect();
            // Whose migrate_cold had a real quota in the interval that just
            // ended, and how much (read before apply() re-arms them).
            let tried: HashMap<u64, u64> = orders
                .iter()
                .map(|o| (o.container, dm.armed_quota(o.container, Direction::Demote)))
                .filter(|&(_, q)| q > 0)
                .collect();
            let warming_up = dm.running_for() < d.cold_min_age;
            match dm.apply(damon, &orders) {
                // DAMOS moves during the coming interval; what it moved in the
                // last one is reported now, and memory.reclaim only takes what
                // DAMOS fell short by.
                Ok(moved) => {
                    for o in orders.iter().filter(|o| o.demote_bytes > 0) {
                        // As for move_pages: while DAMOS has not had its try
                        // (scheme still in its first charge window, or no
                        // region old enough yet), makes progress, or used up
                        // its quota (it was not short of cold regions),
                        // memory.reclaim does not take the rest.
                        let r = moved
                            .get(&(o.container, Direction::Demote))
                            .copied()
                            .unwrap_or_default();
                        let quota = tried.get(&o.container).copied();
                        let wait = warming_up || quota.is_none();
                        let progress = r.applied >= MIN_RECLAIM_BYTES;
                        let exhausted = quota.is_some_and(|q| r.tried >= q);
                        // A region DAMOS tried (even one whose pages were
                        // all filtered out) restarts its age at 0, so
                        // migrate_cold moves in bursts a cold_min_age apart:
                        // one empty interval is not a stall.
                        let stalled = self.hot.cold_stalled.stalled(
                            o.container,
                            wait || progress || exhausted,
                            now,
                            stall_grace,
                        );
                        let done = if stalled {
                            r.applied
                        } else {
                            o.demote_bytes.max(r.applied)
                        };
                        done_down.insert(o.container, done);
                    }
                    for ((c, dir), r) in moved {
                        let mv = Moved {
                            bytes: r.applied,
                            ..Moved::default()
                        };
                        results.push((c, dir, "damos", mv));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "DAMOS mover: cannot apply this cycle's quotas")
                }
            }
        }
        for (c, dir, mechanism, mv) in results {
            self.record_move(managed, c, dir, mechanism, &mv);
        }
        done_down
    }
}

impl Controller {
    /// Promotion by tierd (`promotion = "tierd"`) with the `move_pages`
    /// mover: each container's `promote_bytes` of its hot DAMON regions
    /// (and, once DAMON has watched it for `cold_min_age`, regions idle for
    /// at most that long), after this cycle's demotion and bounded by the
    /// room above the headroom, as the guarantee's promotion and the assist
    /// are: promoted before the demotion and past the headroom, it could
    /// take the fast node to its min watermark while every memcg is
    /// protected, and a cpuset-bound `opt_out` allocation then has nowhere
    /// to go (docs/NOTES.md "The guarantee's promotion needs DAMON").
    pub(super) fn promote_regulated(&mut self, managed: &[Managed], plan: &Plan) {
        let d = &self.cfg.daemon;
        if d.promotion != PromotionMode::Tierd || self.hot.pages.is_none() {
            return;
        }
        let recent = Recent::Within {
            age: self.cold_min_age_aggrs(self.cfg.hotness.aggr_interval),
            wall: d.cold_min_age,
        };
        let todo: Vec<(u64, u64, Recent)> = managed
            .iter()
            .filter_map(|m| {
                let p = plan.get(m.id).filter(|p| p.promote_bytes > 0)?;
                let r = self.hot.readings.get(&m.id)?;
                // Recently idle regions count as worth promoting only once
                // DAMON has watched long enough to tell them from cold ones.
                let recent = if r.monitored_for >= d.cold_min_age {
                    recent
                } else {
                    Recent::None
                };
                Some((m.id, p.promote_bytes, recent))
            })
            .collect();
        if !todo.is_empty() {
            self.promote_regions(
                managed,
                &todo,
                Duration::ZERO,
                "tierd's promotion",
                "move_pages",
            );
        }
    }

    /// Promotes what each `local_low` guarantee lacks on the fast tier
    /// (`ContainerPlan::guarantee_promote_bytes`, bytes) through
    /// `move_pages(2)`, whatever the pages' heat (hottest DAMON regions
    /// first, then the most recently used), into the room this cycle's
    /// demotion made: at most what free fast-tier memory exceeds the
    /// headroom by. Promoting past that room drove the fast node to its
    /// min watermark with every memcg protected, and the kernel then
    /// OOM-killed a tenant for a cpuset-pinned allocation (docs/NOTES.md
    /// "The guarantee's promotion needs DAMON"). Needs the `move_pages`
    /// mover and DAMON's regions of the container (sample.rs watches owed
    /// containers); otherwise the kernel's promotion alone fills it.
    pub(super) fn promote_guarantees(&mut self, managed: &[Managed], plan: &Plan) {
        let todo: Vec<(u64, u64, Recent)> = plan
            .containers
            .iter()
            .filter(|p| p.guarantee_promote_bytes > 0)
            .map(|p| (p.id, p.guarantee_promote_bytes, Recent::Any))
            .collect();
        if todo.is_empty() || self.hot.pages.is_none() {
            return;
        }
        self.promote_regions(
            managed,
            &todo,
            Duration::ZERO,
            "a guarantee's promotion",
            "move_pages",
        );
    }

    /// Counts one mover result in metrics, /status and the thrash input.
    pub(super) fn record_move(
        &mut self,
        managed: &[Managed],
        id: u64,
        dir: Direction,
        mechanism: &'static str,
        mv: &Moved,
    ) {
        let Some(m) = managed.iter().find(|m| m.id == id) else {
            return;
        };
        let own = self.own_moved.entry(id).or_default();
        match dir {
            Direction::Promote => own.promoted_bytes += mv.bytes,
            Direction::Demote => own.demoted_bytes += mv.bytes,
        }
        own.pingpong_bytes += mv.pingpong_bytes;
        *self
            .moved_total
            .entry(id)
            .or_default()
            .entry(format!("{}/{mechanism}", dir.as_str()))
            .or_default() += mv.bytes;
        self.metrics
            .container_migrated_bytes
            .get_or_create(&MoveLabels {
                cgroup: m.path.clone(),
                direction: dir.as_str(),
                mechanism,
            })
            .inc_by(mv.bytes);
        for (&status, &pages) in &mv.failures {
            self.metrics
                .move_pages_failures
                .get_or_create(&MoveFailureLabels {
                    cgroup: m.path.clone(),
                    direction: dir.as_str(),
                    status,
                })
                .inc_by(pages);
        }
        if mv.bytes > 0 {
            tracing::debug!(container = %m.path, direction = dir.as_str(), mechanism, bytes = mv.bytes, "moved");
        }
    }
}
