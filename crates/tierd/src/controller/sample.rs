//! The sample side of the cycle: which cgroups are managed containers
//! (discovery), their memcg counters (migrations, hint faults), and their
//! heat from DAMON (claimed, set up and re-tried here).

use super::*;

impl Controller {
    /// Claims tierd's kdamonds and sets up the monitor and movers. On
    /// failure heat stays unknown (demand = usage), the reason is logged and
    /// shown in /status, and the claim is retried every
    /// [`DAMON_RETRY_CYCLES`] cycles.
    pub(super) fn setup_hotness(&mut self) {
        let h = &self.cfg.hotness;
        let d = &self.cfg.daemon;
        if h.source == HotnessSource::Off || self.observe_only {
            if !self.observe_only {
                tracing::info!(
                    "DAMON off: demand = {}, promotion = {}, cold_demotion = {} need no heat (set hotness.source = \"damon\" for the heat metrics)",
                    d.demand.as_str(),
                    d.promotion.as_str(),
                    d.cold_demotion
                );
            }
            return;
        }
        let want_damos =
            d.mover == MoverKind::Damos && (d.promotion == PromotionMode::Tierd || d.cold_demotion);
        let mut damon = Damon::new(self.cfg.damon_root(), &h.state_file);
        let claimed = damon
            .check_available()
            .and_then(|()| damon.claim(if want_damos { 2 } else { 1 }));
        let claim = match claimed {
            Ok(c) => c,
            Err(e) => {
                let reason = e.to_string();
                if self.hot.off_reason.as_deref() != Some(&reason) {
                    if h.assisted_only {
                        tracing::warn!(error = %e,
                            "DAMON unavailable: no promotion assist (daemon.assist_after), the kernel's NUMA balancing alone promotes; retrying every {DAMON_RETRY_CYCLES} cycles");
                    } else {
                        tracing::error!(error = %e,
                            "DAMON unavailable: demand falls back to usage and tierd moves no pages itself; retrying every {DAMON_RETRY_CYCLES} cycles");
                    }
                }
                self.hot.off_reason = Some(reason);
                self.hot.retry_cycle = self.cycles + DAMON_RETRY_CYCLES;
                self.metrics.hotness_source(false);
                return;
            }
        };
        if h.assisted_only {
            tracing::info!(
                assist_after = ?d.assist_after,
                "DAMON only for containers under promotion assist (none at start; its kdamond runs while one is)"
            );
        }
        if claim.adopted.iter().any(|&a| a) {
            tracing::info!(kdamonds = ?claim.indices, "adopted the kdamonds of a previous tierd");
        }
        let fast: Vec<u32> = self.topo.fast_nodes().iter().copied().collect();
        let lower: Vec<u32> = self.topo.lower_nodes().iter().copied().collect();
        self.hot.monitor = Some(HeatMonitor::new(&h.monitor_params(), claim.indices[0]));
        self.hot.pages = (d.mover == MoverKind::MovePages)
            .then(|| PagesMover::new(d.mover_batch, self.cfg.limits.thrash_window));
        if want_damos {
            match DamosMover::new(
                claim.indices[1],
                h.damos_attrs(),
                &d.sysfs_root,
                &fast,
                &lower,
                fast[0],
                lower[0],
                d.interval,
                self.topo.node(fast[0]).map(|n| n.mem_total_bytes),
            ) {
                Ok(m) => self.hot.damos = Some(m),
                Err(e) => {
                    tracing::error!(error = %e, "DAMOS mover unavailable; tierd moves no pages itself")
                }
            }
        }
        self.hot.damon = Some(damon);
        self.hot.off_reason = None;
        self.metrics.hotness_source(true);
    }

    /// Samples heat of every managed container (DAMON + page-node queries).
    pub(super) fn sample_heat(&mut self, managed: &[Managed]) {
        self.hot.readings.clear();
        if self.hot.damon.is_none() {
            // Off by config: setup_hotness said so once at start.
            if self.cfg.hotness.source == HotnessSource::Off || self.observe_only {
                return;
            }
            if self.cycles >= self.hot.retry_cycle {
                self.setup_hotness();
            }
            if self.hot.damon.is_none() {
                return;
            }
        }
        let mut members = Vec::new();
        let only_assisted = self.cfg.hotness.assisted_only;
        for m in managed {
            if only_assisted && !self.assisted.contains(&m.id) && !self.owed.contains(&m.id) {
                continue;
            }
            for cg in &m.members {
                if let Ok(pids) = self.cg.procs(cg) {
                    members.extend(pids.into_iter().filter(|&p| p > 0).map(|p| Member {
                        container: m.id,
                        pid: p as u32,
                    }));
                }
            }
        }
        let (Some(damon), Some(mon)) = (&self.hot.damon, &mut self.hot.monitor) else {
            return;
        };
        match mon.sample(damon, &members) {
            Ok(r) => {
                // What was accessed, for the recently idle tierd's own
                // promotion may take (kept as long as that counts as
                // recent); nothing else reads it.
                let promotes = self.cfg.daemon.promotion == PromotionMode::Tierd;
                if let Some(pm) = self.hot.pages.as_mut().filter(|_| promotes) {
                    for (&c, reading) in &r {
                        pm.note_accessed(c, &reading.procs, self.cfg.daemon.cold_min_age);
                    }
                }
                self.hot.readings = r;
            }
            Err(e) => {
                tracing::warn!(error = %e, "DAMON sampling failed this cycle; demand = usage");
            }
        }
        self.metrics.damon_targets.set(mon.targets() as i64);
        self.metrics.kdamond_restarts_seen(mon.restarts);
        self.metrics
            .damon_busy_retries_seen(hotness::damon::busy_retries());
    }

    /// Managed containers: cgroups matched by a policy whose ancestors are not
    /// themselves managed (a matched subtree is managed as one container).
    pub(super) fn discover(&mut self) -> Result<Vec<Managed>> {
        self.alive_ids.clear();
        let mut all = self.cg.discover().with_context(|| {
            format!(
                "cannot list cgroups under {}",
                self.cfg.daemon.cgroup_root.display()
            )
        })?;
        all.sort_by(|a, b| a.path.cmp(&b.path));
        let mut out: Vec<Managed> = Vec::new();
        // Paths already managed (parents sort before children): a cgroup below
        // one of them is part of it. One set lookup per ancestor keeps
        // discovery linear in the number of cgroups.
        let mut managed_paths: HashMap<String, usize> = HashMap::new();
        let match_dirs = self.cfg.match_dirs();
        // A new cgroup can be an arrival only where a policy can match it.
        let watch = |path: &str| {
            match_dirs.iter().any(|d| {
                d.is_empty()
                    || path.is_empty()
                    || d == path
                    || d.strip_prefix(path).is_some_and(|r| r.starts_with('/'))
                    || path
                        .strip_prefix(d.as_str())
                        .is_some_and(|r| r.starts_with('/'))
            })
        };
        self.arrival_dirs.clear();
        for c in all {
            if c.path.is_empty() {
                if watch("") {
                    self.arrival_dirs.push(self.cg.dir(""));
                }
                continue;
            }
            self.alive_ids.insert(c.id);
            if let Some(&i) = ancestors(&c.path).iter().find_map(|a| managed_paths.get(a)) {
                out[i].members.push(c.path);
                out[i].member_ids.push(c.id);
                continue;
            }
            let matched = self.cfg.match_policy(&c.path);
            if matched.is_none() && watch(&c.path) {
                self.arrival_dirs.push(self.cg.dir(&c.path));
            }
            if let Some(i) = matched {
                managed_paths.insert(c.path.clone(), out.len());
                out.push(Managed {
                    members: vec![c.path.clone()],
                    member_ids: vec![c.id],
                    path: c.path,
                    id: c.id,
                    policy_index: i,
                });
            }
        }
        Ok(out)
    }

    /// Reads the memcg tiering counters and returns what the kernel moved
    /// since the previous cycle (zero on the first), and the bytes aged
    /// reclaim demoted since then
    /// ([`policy::ContainerSnapshot::aged_demoted_bytes`]: the growth of
    /// `pgdemote_direct` and `pgdemote_proactive`, their whole count on the
    /// first; 0 when memory.stat is unreadable).
    pub(super) fn update_counters(&mut self, m: &Managed) -> (Migrations, u64) {
        let stat = match self.cg.memory_stat(&m.path) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(container = %m.path, error = %e, "memory.stat unreadable");
                return (Migrations::default(), 0);
            }
        };
        let now = MemcgCounters {
            demote_kswapd: stat.pgdemote_kswapd(),
            demote_direct: stat.pgdemote_direct(),
            demote_proactive: stat.pgdemote_proactive(),
            demote_khugepaged: stat.pgdemote_khugepaged(),
            promote_success: stat.pgpromote_success(),
            numa_hint_faults: stat.numa_hint_faults(),
        };
        let aged = |c: &MemcgCounters| c.demote_direct + c.demote_proactive;
        let prev = self.counters.insert(m.id, now);
        let aged_demoted = aged(&now).saturating_sub(prev.as_ref().map_or(0, aged)) * PAGE_BYTES;
        if let Some(prev) = prev {
            self.stat_hint_faults.insert(
                m.id,
                now.numa_hint_faults.saturating_sub(prev.numa_hint_faults),
            );
            let label = |reason| ContainerReasonLabels {
                cgroup: m.path.clone(),
                reason,
            };
            let d = &self.metrics.container_demoted_bytes;
            d.get_or_create(&label("kswapd"))
                .inc_by(now.demote_kswapd.saturating_sub(prev.demote_kswapd) * PAGE_BYTES);
            d.get_or_create(&label("direct"))
                .inc_by(now.demote_direct.saturating_sub(prev.demote_direct) * PAGE_BYTES);
            d.get_or_create(&label("proactive"))
                .inc_by(now.demote_proactive.saturating_sub(prev.demote_proactive) * PAGE_BYTES);
            d.get_or_create(&label("khugepaged"))
                .inc_by(now.demote_khugepaged.saturating_sub(prev.demote_khugepaged) * PAGE_BYTES);
            let promoted = now.promote_success.saturating_sub(prev.promote_success) * PAGE_BYTES;
            self.metrics
                .container_promoted_bytes
                .get_or_create(&ContainerLabels {
                    cgroup: m.path.clone(),
                })
                .inc_by(promoted);
            // Thrash input: what went *up* (kernel promotions here, tierd's
            // own added by the caller) against what *tierd* sent down (its
            // moves and memory.reclaim requests, added by the caller).
            // kswapd's demotions are not counted: a newcomer whose pages
            // kswapd demoted as it allocated, and which tierd then promotes
            // to its share, is not thrashing.
            let migrations = Migrations {
                demoted_bytes: 0,
                promoted_bytes: promoted,
                pingpong_bytes: 0,
            };
            return (migrations, aged_demoted);
        }
        (Migrations::default(), aged_demoted)
    }

    /// Points the probe's declined hint faults at the containers recall may
    /// serve before the next plan ([`ContainerPlan::may_fall_short`]; none
    /// without `daemon.recall`): the rest would only be drained and dropped.
    pub(super) fn want_declined(&mut self, managed: &[Managed], plan: &Plan) {
        let ids: HashSet<u64> = managed
            .iter()
            .filter(|m| {
                self.cfg.daemon.recall && plan.get(m.id).is_some_and(|p| p.may_fall_short())
            })
            .flat_map(|m| m.member_ids.iter().copied())
            .collect();
        self.faults.want_declined(ids);
    }

    /// Reads this cycle's hint faults and kernel migrations per container
    /// and exports them (counters by node and outcome; lower-tier fault
    /// rate). Returns each container's hint faults on lower-tier pages
    /// when the probe counts them by node (none with the memory.stat
    /// counters).
    pub(super) fn sample_hint_faults(
        &mut self,
        managed: &[Managed],
        elapsed_ms: u64,
    ) -> HashMap<u64, u64> {
        let input: Vec<(u64, &[u64], Option<u64>)> = managed
            .iter()
            .map(|m| {
                (
                    m.id,
                    m.member_ids.as_slice(),
                    self.stat_hint_faults.get(&m.id).copied(),
                )
            })
            .collect();
        self.stat_hint_faults.clear();
        let deltas = self.faults.sample(&input, &self.alive_ids);
        let lower = self.topo.lower_nodes();
        let by_node = self.faults.source() == "ebpf";
        let mut lower_faults = HashMap::new();
        for m in managed {
            let Some(f) = deltas.get(&m.id) else { continue };
            if self.cfg.daemon.recall {
                // Promoted or refused for want of room: hot by the
                // kernel's own test either way.
                // Refused first: a page refused and then promoted in the
                // same interval is on the fast tier.
                for &(pid, addr, len) in &f.refused {
                    self.known_hot.add(m.id, pid, addr, len, false);
                }
                for &(pid, addr, len) in &f.promotions {
                    self.known_hot.add(m.id, pid, addr, len, true);
                }
                // A fault within the hot latency of its scan: hot by the
                // kernel's own measure, sharper than its threshold (declined
                // for its rate limit, or because the threshold is looser).
                // Off (the default, 0): none is.
                let hot_ms = self.cfg.hotness.hot_latency.as_millis();
                // In use, not hot by the kernel's test: recalled only for
                // what the known-hot pages leave short. Records of pages
                // on the fast tier (the fault came after a promotion) are
                // neither.
                let mut warm = Vec::new();
                for d in f.declined.iter().filter(|d| lower.contains(&d.node)) {
                    if d.latency_ms.is_some_and(|l| u128::from(l) < hot_ms) {
                        self.known_hot.add(m.id, d.pid, d.addr, d.bytes, false);
                    } else {
                        warm.push((d.pid, d.addr, d.bytes));
                    }
                }
                if !warm.is_empty() {
                    self.known_hot.add_declined(m.id, warm);
                }
            }
            // Kernel promotions of pages tierd itself demoted within the
            // thrash window: exact ping-pong, input to thrash control.
            if let Some(pm) = &self.hot.pages {
                let back: u64 = f
                    .promotions
                    .iter()
                    .map(|&(pid, addr, len)| pm.returned(m.id, pid, addr, len))
                    .sum();
                if back > 0 {
                    self.own_moved.entry(m.id).or_default().pingpong_bytes += back;
                    self.metrics
                        .container_repromoted_bytes
                        .get_or_create(&ContainerLabels {
                            cgroup: m.path.clone(),
                        })
                        .inc_by(back);
                }
            }
            for (node, n) in &f.faults_by_node {
                self.metrics
                    .container_numa_hint_faults
                    .get_or_create(&ContainerFaultLabels {
                        cgroup: m.path.clone(),
                        node: node.map_or("all".into(), |n| n.to_string()),
                    })
                    .inc_by(*n);
            }
            for (outcome, map) in [
                ("candidate", &f.candidates),
                ("dropped", &f.dropped),
                ("migrated", &f.migrated),
                ("failed", &f.failed),
            ] {
                for (node, n) in map {
                    self.metrics
                        .container_numa_promotions
                        .get_or_create(&PromotionLabels {
                            cgroup: m.path.clone(),
                            node: *node,
                            outcome,
                        })
                        .inc_by(*n);
                }
            }
            if !by_node {
                continue;
            }
            let on_lower: u64 = f
                .faults_by_node
                .iter()
                .filter(|(n, _)| n.is_some_and(|n| lower.contains(&n)))
                .map(|(_, c)| c)
                .sum();
            lower_faults.insert(m.id, on_lower);
            if elapsed_ms > 0 {
                self.metrics
                    .container_lower_hint_faults_per_second
                    .get_or_create(&ContainerLabels {
                        cgroup: m.path.clone(),
                    })
                    .set(on_lower as f64 * 1000.0 / elapsed_ms as f64);
            }
        }
        lower_faults
    }
}
