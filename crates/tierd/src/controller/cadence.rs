//! How often the full cycle runs. In a quiet steady state (nothing for
//! tierd to demote or promote, the same containers as the cycle before)
//! reading every memcg, solving and publishing each interval is work for
//! nothing. Each interval tierd then
//! checks only what would change a plan: the managed containers (one walk
//! of the cgroup tree), their `memory.current`, and the fast tier's free
//! memory. The full cycle runs when one of them moved by more than the
//! minimum band since the last one, and otherwise every 2nd, then every
//! 4th interval while the quiet state lasts. A cycle that is not quiet, or
//! a reload, brings the full cycle back to every interval.

use super::*;

/// Longest spacing of full cycles in a quiet state, in intervals.
pub const MAX_QUIET_SPACING: u32 = 4;

/// What the last full cycle saw, and how many quiet ones ran in a row.
#[derive(Debug, Default)]
pub(super) struct Cadence {
    /// Quiet full cycles in a row (with the same containers).
    streak: u32,
    /// Intervals since the last full cycle.
    ticks: u32,
    /// Set by a reload: the next interval runs the full cycle.
    forced: bool,
    /// Managed container ids at the last full cycle, ascending.
    ids: Vec<u64>,
    /// Their `memory.current`, bytes.
    current: HashMap<u64, u64>,
    /// Free bytes of the fast tier.
    fast_free: u64,
}

impl Cadence {
    /// Intervals between two full cycles now: 1, 2, then
    /// [`MAX_QUIET_SPACING`] as quiet cycles follow one another.
    pub(super) fn spacing(&self) -> u32 {
        (1u32 << self.streak.min(MAX_QUIET_SPACING.ilog2())).min(MAX_QUIET_SPACING)
    }

    /// Counts one interval; true when the full cycle is due whatever the
    /// check would find.
    pub(super) fn due(&mut self) -> bool {
        self.ticks = self.ticks.saturating_add(1);
        self.forced || self.ticks >= self.spacing()
    }

    /// The next interval runs the full cycle, and the spacing starts over.
    pub(super) fn force(&mut self) {
        self.forced = true;
        self.streak = 0;
    }

    /// Records a full cycle and what it saw.
    pub(super) fn full(
        &mut self,
        quiet: bool,
        ids: Vec<u64>,
        current: HashMap<u64, u64>,
        fast_free: u64,
    ) {
        let same = ids == self.ids;
        self.streak = if quiet && same {
            self.streak.saturating_add(1)
        } else {
            0
        };
        self.ticks = 0;
        self.forced = false;
        self.ids = ids;
        self.current = current;
        self.fast_free = fast_free;
    }

    /// Whether a check (`ids` ascending, `memory.current` by id, the fast
    /// tier's free bytes) differs from the last full cycle: another set of
    /// containers, or a usage or the free memory moved by more than `slack`
    /// bytes. A container whose `memory.current` could not be read counts
    /// as changed.
    pub(super) fn changed(
        &self,
        ids: &[u64],
        current: &HashMap<u64, u64>,
        fast_free: u64,
        slack: u64,
    ) -> bool {
        ids != self.ids.as_slice()
            || self.fast_free.abs_diff(fast_free) > slack
            || ids
                .iter()
                .any(|id| match (self.current.get(id), current.get(id)) {
                    (Some(a), Some(b)) => a.abs_diff(*b) > slack,
                    _ => true,
                })
    }
}

/// A plan that gives tierd nothing to move: no bytes to demote, none a
/// guarantee lacks, and no promotion budget when tierd promotes
/// (`tierd_promotes`; with `promotion = "kernel"` the budget is not spent).
/// A container outside its band can be quiet: over its target while no one
/// needs the room, or under it while it does not grow into the room.
pub(super) fn quiet(plan: &Plan, tierd_promotes: bool) -> bool {
    plan.containers.iter().all(|p| {
        p.demote_bytes == 0
            && p.guarantee_promote_bytes == 0
            && (!tierd_promotes || p.promote_bytes == 0)
    })
}

impl Controller {
    /// One interval of the control loop: the full cycle ([`Self::cycle`])
    /// when it is due or the check finds a change, else nothing
    /// (`Ok(None)`; counted in `tierd_quiet_checks_total`). A check that
    /// fails runs the full cycle, which reports the error.
    pub fn tick(&mut self) -> Result<Option<Plan>> {
        if !self.cadence.due() {
            match self.check() {
                Ok(Some(changed)) => return self.cycle_from(Some(changed)).map(Some),
                Ok(None) => {
                    self.quiet_checks += 1;
                    self.metrics.quiet_checks.inc();
                    if let Ok(mut s) = self.status.lock() {
                        s.quiet_checks = self.quiet_checks;
                    }
                    return Ok(None);
                }
                Err(e) => {
                    tracing::debug!(error = format!("{e:#}"), "quiet check failed; full cycle")
                }
            }
        }
        self.cycle().map(Some)
    }

    /// A cgroup appeared where a policy can match one
    /// ([`Self::arrival_dirs`]): the check, now rather than at the next
    /// interval, and the full cycle when it finds an arrival (or anything
    /// else that moved), so that a newcomer is seen before it has allocated
    /// (`policy::Plan::filling`). `Ok(None)` when nothing changed (a
    /// cgroup no policy matches). Counted in `tierd_arrival_wakes_total`.
    pub fn on_arrival(&mut self) -> Result<Option<Plan>> {
        self.metrics.arrival_wakes.inc();
        match self.check()? {
            Some(changed) => self.cycle_from(Some(changed)).map(Some),
            None => Ok(None),
        }
    }

    /// The check between full cycles: the managed containers when something
    /// that would change the plan moved (see [`Cadence::changed`]), for the
    /// full cycle to start from; `None` when nothing did.
    fn check(&mut self) -> Result<Option<Vec<Managed>>> {
        // Empty the probe's ring buffers every interval, not only at full
        // cycles, so that a scan pass's promotions and refusals are not
        // lost (recall).
        self.faults.collect_promotions();
        let moved = self.refresh_topology()?;
        let managed = self.discover()?;
        let (ids, current) = self.usage_of(&managed);
        let slack = self.cfg.policy_params().band_min_bytes;
        let changed = self
            .cadence
            .changed(&ids, &current, self.topo.fast_free_bytes(), slack);
        Ok((changed || moved).then_some(managed))
    }

    /// Managed ids, ascending, and the `memory.current` of each that could
    /// be read.
    pub(super) fn usage_of(&self, managed: &[Managed]) -> (Vec<u64>, HashMap<u64, u64>) {
        let mut ids: Vec<u64> = managed.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        let current = managed
            .iter()
            .filter_map(|m| self.cg.memory_current(&m.path).ok().map(|c| (m.id, c)))
            .collect();
        (ids, current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::ContainerPlan;

    fn cur(pairs: &[(u64, u64)]) -> HashMap<u64, u64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn quiet_cycles_space_the_full_cycle_out_and_anything_else_resets_it() {
        let mut c = Cadence::default();
        // The first cycle sees containers it had not: never quiet.
        assert!(c.due());
        c.full(true, vec![1, 2], cur(&[(1, 10), (2, 20)]), 100);
        assert_eq!(c.spacing(), 1);
        assert!(c.due());
        // Quiet with the same containers: every 2nd, then every 4th.
        c.full(true, vec![1, 2], cur(&[(1, 10), (2, 20)]), 100);
        assert_eq!(c.spacing(), 2);
        assert!(!c.due());
        assert!(c.due());
        c.full(true, vec![1, 2], cur(&[(1, 10), (2, 20)]), 100);
        assert_eq!(c.spacing(), 4);
        c.full(true, vec![1, 2], cur(&[(1, 10), (2, 20)]), 100);
        assert_eq!(c.spacing(), MAX_QUIET_SPACING);
        assert_eq!(
            (0..4).map(|_| c.due()).collect::<Vec<_>>(),
            [false, false, false, true]
        );
        // A cycle that is not quiet: every interval again.
        c.full(false, vec![1, 2], cur(&[(1, 10), (2, 20)]), 100);
        assert_eq!(c.spacing(), 1);
        // A quiet cycle with another set of containers does not count.
        c.full(true, vec![1, 2, 3], cur(&[]), 100);
        assert_eq!(c.spacing(), 1);
        c.full(true, vec![1, 2, 3], cur(&[]), 100);
        c.full(true, vec![1, 2, 3], cur(&[]), 100);
        assert_eq!(c.spacing(), 4);
        // A reload: the next interval runs it, and spacing starts over.
        c.force();
        assert!(c.due());
        c.full(true, vec![1, 2, 3], cur(&[]), 100);
        assert_eq!(c.spacing(), 2);
    }

    #[test]
    fn quiet_means_nothing_for_tierd_to_move() {
        let p = |demote, promote, owed, state| ContainerPlan {
            demote_bytes: demote,
            promote_bytes: promote,
            guarantee_promote_bytes: owed,
            ..ContainerPlan::new(1, state)
        };
        let plan = |c: ContainerPlan| Plan {
            containers: vec![c],
            ..Plan::default()
        };
        // Over its target with no one needing the room, or under it with a
        // promotion budget the kernel's promotion does not spend: quiet.
        assert!(quiet(&plan(p(0, 0, 0, PlacementState::OverTarget)), false));
        assert!(quiet(&plan(p(0, 8, 0, PlacementState::UnderTarget)), false));
        // The same budget when tierd promotes, a demotion, a guarantee owed.
        assert!(!quiet(&plan(p(0, 8, 0, PlacementState::UnderTarget)), true));
        assert!(!quiet(&plan(p(8, 0, 0, PlacementState::OverTarget)), false));
        assert!(!quiet(
            &plan(p(0, 8, 8, PlacementState::UnderTarget)),
            false
        ));
    }

    #[test]
    fn a_check_sees_arrivals_exits_usage_and_free_memory_beyond_the_slack() {
        let mut c = Cadence::default();
        c.full(true, vec![1, 2], cur(&[(1, 1000), (2, 2000)]), 500);
        let same = cur(&[(1, 1000), (2, 2000)]);
        assert!(!c.changed(&[1, 2], &same, 500, 16));
        // Within the slack, either way.
        assert!(!c.changed(&[1, 2], &cur(&[(1, 1016), (2, 1984)]), 484, 16));
        // Beyond it: usage, free memory.
        assert!(c.changed(&[1, 2], &cur(&[(1, 1017), (2, 2000)]), 500, 16));
        assert!(c.changed(&[1, 2], &same, 517, 16));
        // An arrival, an exit, an unreadable memory.current.
        assert!(c.changed(&[1, 2, 3], &cur(&[(1, 1000), (2, 2000), (3, 0)]), 500, 16));
        assert!(c.changed(&[1], &cur(&[(1, 1000)]), 500, 16));
        assert!(c.changed(&[1, 2], &cur(&[(1, 1000)]), 500, 16));
    }
}
