//! Per-container heat from DAMON.
//!
//! One tierd-owned `vaddr` kdamond monitors the managed containers'
//! processes (largest resident set first, up to `hotness.max_processes`).
//! Each process is one DAMON target and has one `stat` scheme whose `target`
//! filter keeps only that target's regions: on 6.12 tried regions carry no
//! target index, so per-scheme results are how regions are attributed to a
//! process (and its container) exactly. See docs/NOTES.md "Hotness" for why
//! `vaddr` per process rather than `paddr` with memcg filters.
//!
//! Each cycle reads the tried regions (`update_schemes_tried_regions`), splits
//! every region over NUMA nodes by sampling its pages with `move_pages(2)`
//! status queries, and aggregates a heat histogram per container and node.

use std::collections::{BTreeMap, HashMap};

use std::time::Duration;

use numa::mover::{MoveError, Mover};

use crate::damon::{
    AccessPattern, Action, Attrs, Damon, Filter, FilterKind, KdamondSpec, Ops, Quota, Scheme,
    TriedRegion,
};
use crate::heat::{self, ContainerHeat, HeatParams};

/// How the monitor drives DAMON and samples page nodes (tierd's `[hotness]`
/// section, as plain values).
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorParams {
    /// DAMON sampling interval (one access check per region).
    pub sample_interval: Duration,
    /// DAMON aggregation interval (the `nr_accesses` window).
    pub aggr_interval: Duration,
    /// DAMON operations update interval: how soon new mappings are seen.
    pub update_interval: Duration,
    /// DAMON's bounds on the number of regions per target.
    pub min_regions: u64,
    pub max_regions: u64,
    /// A region is hot when seen accessed in at least this many samples of
    /// the last aggregation interval.
    pub hot_min_accesses: u32,
    /// Most processes monitored (largest resident set first).
    pub max_processes: usize,
    /// Pages whose node is queried (`move_pages(2)` status) per cycle.
    pub node_samples: usize,
}

/// One monitored process and its DAMON regions this cycle, sorted by start.
#[derive(Debug, Clone)]
pub struct ProcRegions {
    pub pid: u32,
    pub regions: Vec<TriedRegion>,
    /// Per region (same order): how its sampled present pages split over
    /// nodes, (node, fraction), sorted by node; empty when not sampled.
    pub nodes: Vec<Vec<(u32, f64)>>,
}

/// Heat of one container this cycle.
#[derive(Debug, Clone, Default)]
pub struct ContainerReading {
    /// Histogram per node; bytes whose node is unknown (unmapped gaps inside
    /// DAMON regions, pages not present) are left out of `per_node`.
    pub heat: ContainerHeat,
    pub procs: Vec<ProcRegions>,
    /// Hot bytes resident on any node (the policy's demand input).
    pub hot_bytes: u64,
    /// Number of DAMON regions of its processes.
    pub regions: usize,
    /// How long its least-watched process has been monitored: region ages
    /// cannot exceed it, so "idle for N s" means nothing before.
    pub monitored_for: std::time::Duration,
}

/// A process of a managed container, as a monitoring candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub container: u64,
    pub pid: u32,
}

/// DAMON-based heat sampling for the control loop.
pub struct HeatMonitor {
    cfg: MonitorParams,
    idx: usize,
    /// Targets of the kdamond as last written: scheme i ↔ pids[i].
    targets: Vec<Member>,
    running: bool,
    /// Times the kdamond was found stopped and restarted.
    pub restarts: u64,
    sampler: Mover,
    /// When each target's monitoring began (reset on a kdamond restart).
    since: HashMap<u32, std::time::Instant>,
}

impl HeatMonitor {
    /// A monitor driving kdamond `idx` (claimed by the caller, which passes
    /// the same [`Damon`] to every call).
    pub fn new(cfg: &MonitorParams, idx: usize) -> Self {
        HeatMonitor {
            cfg: cfg.clone(),
            idx,
            targets: Vec::new(),
            running: false,
            restarts: 0,
            sampler: Mover::new(1024),
            since: HashMap::new(),
        }
    }

    /// DAMON interval settings from the parameters.
    pub fn attrs(cfg: &MonitorParams) -> Attrs {
        Attrs {
            sample_us: cfg.sample_interval.as_micros() as u64,
            aggr_us: cfg.aggr_interval.as_micros() as u64,
            update_us: cfg.update_interval.as_micros() as u64,
            min_nr_regions: cfg.min_regions,
            max_nr_regions: cfg.max_regions,
        }
    }

    /// Samples per aggregation interval: the largest `nr_accesses`.
    pub fn max_nr_accesses(cfg: &MonitorParams) -> u32 {
        (cfg.aggr_interval.as_micros() / cfg.sample_interval.as_micros().max(1)) as u32
    }

    pub fn heat_params(&self) -> HeatParams {
        HeatParams {
            max_nr_accesses: Self::max_nr_accesses(&self.cfg),
            hot_min_nr_accesses: self.cfg.hot_min_accesses,
            aggr_us: self.cfg.aggr_interval.as_micros() as u64,
        }
    }

    /// Number of processes DAMON monitors now.
    pub fn targets(&self) -> usize {
        if self.running {
            self.targets.len()
        } else {
            0
        }
    }

    fn spec(&self, targets: &[Member]) -> KdamondSpec {
        let schemes = (0..targets.len())
            .map(|i| Scheme {
                action: Action::Stat,
                access_pattern: AccessPattern::default(),
                quota: Quota::default(),
                target_nid: None,
                // 6.12 filters drop memory for which (match == matching):
                // matching = false drops every other target's regions.
                filters: vec![Filter {
                    kind: FilterKind::Target(i as u32),
                    matching: false,
                }],
                apply_interval_us: 0,
                goals: Vec::new(),
            })
            .collect();
        KdamondSpec {
            ops: Ops::Vaddr,
            attrs: Self::attrs(&self.cfg),
            pids: targets.iter().map(|m| m.pid).collect(),
            schemes,
        }
    }

    /// Chooses up to `max_processes` members, largest resident set first,
    /// returned in (container, pid) order so the target list is stable.
    fn choose(&self, members: &[Member]) -> Vec<Member> {
        let mut by_rss: Vec<(u64, Member)> = members
            .iter()
            .filter_map(|m| resident_pages(m.pid).filter(|&r| r > 0).map(|r| (r, *m)))
            .collect();
        by_rss.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.pid.cmp(&b.1.pid)));
        by_rss.truncate(self.cfg.max_processes);
        let mut out: Vec<Member> = by_rss.into_iter().map(|(_, m)| m).collect();
        out.sort_by_key(|m| (m.container, m.pid));
        out
    }

    /// Points the kdamond at `targets`: an online `commit` when it runs, else
    /// (re)start. A kdamond found stopped while it should run (every target
    /// exited, or someone stopped it) counts as a restart.
    fn retarget(&mut self, damon: &Damon, targets: Vec<Member>) -> Result<(), crate::damon::Error> {
        let alive = self.running && damon.is_running(self.idx)?;
        if self.running && !alive {
            self.restarts += 1;
            tracing::info!(
                kdamond = self.idx,
                "tierd's kdamond had stopped; restarting it"
            );
        }
        if targets.is_empty() {
            if alive {
                damon.stop(self.idx)?;
            }
            self.running = false;
            self.targets = targets;
            return Ok(());
        }
        if alive && targets == self.targets {
            return Ok(());
        }
        let spec = self.spec(&targets);
        damon.write_spec(self.idx, &spec)?;
        let committed = if alive {
            match damon.commit(self.idx) {
                Ok(()) => true,
                Err(e) => {
                    // A target may have exited between the choice and the
                    // commit (EINVAL): start over from a stopped kdamond.
                    tracing::debug!(error = %e, "DAMON commit failed; restarting the kdamond");
                    let _ = damon.stop(self.idx);
                    false
                }
            }
        } else {
            false
        };
        if !committed {
            damon.start(self.idx)?;
            self.since.clear();
        }
        let now = std::time::Instant::now();
        self.since
            .retain(|pid, _| targets.iter().any(|m| m.pid == *pid));
        for m in &targets {
            self.since.entry(m.pid).or_insert(now);
        }
        self.running = true;
        self.targets = targets;
        Ok(())
    }

    /// One sampling pass over `members` (every process of every managed
    /// container). Returns the heat of each container with at least one
    /// monitored process. Errors: DAMON sysfs failures (the caller logs and
    /// treats heat as unknown this cycle).
    pub fn sample(
        &mut self,
        damon: &Damon,
        members: &[Member],
    ) -> Result<HashMap<u64, ContainerReading>, crate::damon::Error> {
        let chosen = self.choose(members);
        self.retarget(damon, chosen)?;
        let mut out: HashMap<u64, ContainerReading> = HashMap::new();
        if !self.running {
            return Ok(out);
        }
        let per_scheme = damon.tried_regions(self.idx)?;
        let params = self.heat_params();
        let total: u64 = per_scheme
            .iter()
            .flatten()
            .map(|r| r.end.saturating_sub(r.start))
            .sum::<u64>()
            .max(1);
        for (member, regions) in self.targets.iter().zip(per_scheme) {
            let watched = self
                .since
                .get(&member.pid)
                .map_or(Default::default(), |t| t.elapsed());
            let fresh = !out.contains_key(&member.container);
            let reading = out.entry(member.container).or_default();
            reading.monitored_for = if fresh {
                watched
            } else {
                reading.monitored_for.min(watched)
            };
            reading.regions += regions.len();
            if regions.is_empty() {
                continue;
            }
            let bytes: u64 = regions.iter().map(|r| r.end - r.start).sum();
            let samples = ((self.cfg.node_samples as u128 * u128::from(bytes) / u128::from(total))
                as usize)
                .max(4 * regions.len())
                .min(self.cfg.node_samples.max(regions.len()));
            let ranges: Vec<(u64, u64)> = regions.iter().map(|r| (r.start, r.end)).collect();
            let split = match self.sampler.sample_nodes(member.pid, &ranges, samples) {
                Ok(s) => s,
                Err(MoveError::NoProcess { .. }) => continue,
                Err(e) => {
                    tracing::debug!(pid = member.pid, error = %e, "cannot query page nodes");
                    continue;
                }
            };
            tracing::debug!(
                pid = member.pid,
                regions = regions.len(),
                hot_region_bytes = regions
                    .iter()
                    .filter(|r| r.nr_accesses >= params.hot_min_nr_accesses)
                    .map(|r| r.end - r.start)
                    .sum::<u64>(),
                hot_sampled = split
                    .iter()
                    .zip(&regions)
                    .filter(|(_, r)| r.nr_accesses >= params.hot_min_nr_accesses)
                    .map(|(s, _)| s.iter().map(|x| x.1).sum::<f64>())
                    .sum::<f64>(),
                "DAMON regions"
            );
            tracing::trace!(pid = member.pid, ?regions, "DAMON region list");
            let by_start: HashMap<u64, &Vec<(u32, f64)>> =
                ranges.iter().map(|r| r.0).zip(split.iter()).collect();
            heat::accumulate(&mut reading.heat, &regions, &params, |r| {
                by_start
                    .get(&r.start)
                    .map(|v| (*v).clone())
                    .unwrap_or_default()
            });
            reading.procs.push(ProcRegions {
                pid: member.pid,
                regions,
                nodes: split,
            });
        }
        for r in out.values_mut() {
            r.hot_bytes = r.heat.per_node.values().map(|n| n.hot_bytes).sum();
        }
        Ok(out)
    }

    /// Stops the kdamond (the owner releases it).
    pub fn stop(&mut self, damon: &Damon) {
        if self.running {
            if let Err(e) = damon.stop(self.idx) {
                tracing::warn!(error = %e, "cannot stop tierd's kdamond");
            }
        }
        self.running = false;
        self.targets.clear();
    }
}

/// Resident pages of `pid` (`/proc/PID/statm`, field 2), `None` if it is
/// gone; kernel threads report 0.
pub fn resident_pages(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    s.split_whitespace().nth(1)?.parse().ok()
}

/// Regions of `procs` at least `hot_min` hot, hottest first, as (pid, range).
pub fn hot_ranges(procs: &[ProcRegions], hot_min: u32) -> Vec<(u32, TriedRegion)> {
    let mut v: Vec<(u32, TriedRegion)> = procs
        .iter()
        .flat_map(|p| p.regions.iter().map(move |r| (p.pid, *r)))
        .filter(|(_, r)| r.nr_accesses >= hot_min)
        .collect();
    v.sort_by(|a, b| {
        b.1.nr_accesses
            .cmp(&a.1.nr_accesses)
            .then(b.1.age.cmp(&a.1.age))
            .then(a.1.start.cmp(&b.1.start))
    });
    v
}

/// Regions of `procs` idle (no access seen) for at least `min_age`
/// aggregation intervals, longest idle first, as (pid, range).
pub fn cold_ranges(procs: &[ProcRegions], min_age: u32) -> Vec<(u32, TriedRegion)> {
    let mut v: Vec<(u32, TriedRegion)> = procs
        .iter()
        .flat_map(|p| p.regions.iter().map(move |r| (p.pid, *r)))
        .filter(|(_, r)| r.nr_accesses == 0 && r.age >= min_age)
        .collect();
    v.sort_by(|a, b| b.1.age.cmp(&a.1.age).then(a.1.start.cmp(&b.1.start)));
    v
}

/// Hot bytes per node of a reading, for metrics.
pub fn hot_by_node(r: &ContainerReading) -> BTreeMap<u32, u64> {
    r.heat
        .per_node
        .iter()
        .map(|(&n, h)| (n, h.hot_bytes))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(start: u64, end: u64, nr_accesses: u32, age: u32) -> TriedRegion {
        TriedRegion {
            start,
            end,
            nr_accesses,
            age,
        }
    }

    #[test]
    fn hot_and_cold_orders() {
        let procs = vec![
            ProcRegions {
                pid: 1,
                regions: vec![
                    region(0, 10, 0, 50),
                    region(10, 20, 5, 3),
                    region(20, 30, 0, 2),
                ],
                nodes: Vec::new(),
            },
            ProcRegions {
                pid: 2,
                regions: vec![region(0, 10, 9, 1), region(10, 20, 0, 80)],
                nodes: Vec::new(),
            },
        ];
        let hot: Vec<(u32, u64)> = hot_ranges(&procs, 1)
            .iter()
            .map(|(p, r)| (*p, r.start))
            .collect();
        assert_eq!(hot, vec![(2, 0), (1, 10)]);
        let cold: Vec<(u32, u64)> = cold_ranges(&procs, 10)
            .iter()
            .map(|(p, r)| (*p, r.start))
            .collect();
        assert_eq!(cold, vec![(2, 10), (1, 0)]);
    }
}
