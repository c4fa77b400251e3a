//! Per-cycle export: Prometheus gauges and the `/status` document.

use super::*;

impl Controller {
    pub(super) fn publish(
        &self,
        snapshot: &Snapshot,
        plan: &Plan,
        managed: &[Managed],
        per_node: &HashMap<u64, BTreeMap<u32, u64>>,
        fast_free: u64,
    ) {
        let mt = &self.metrics;
        let fast = self.topo.fast_nodes();
        for n in &self.topo.nodes {
            let tier = tier_label(fast.contains(&n.id));
            let l = NodeLabels { node: n.id, tier };
            mt.node_capacity_bytes
                .get_or_create(&l)
                .set(gauge_bytes(n.mem_total_bytes));
            mt.node_free_bytes
                .get_or_create(&l)
                .set(gauge_bytes(n.mem_free_bytes));
        }
        mt.clear_container_gauges();
        let paths: HashSet<&str> = managed.iter().map(|m| m.path.as_str()).collect();
        mt.forget_cgroups(|p| paths.contains(p));
        mt.fast_pool_bytes.set(gauge_bytes(plan.pool_bytes));
        mt.fast_need_bytes.set(gauge_bytes(plan.need_bytes));
        mt.guarantees_scaled.set(i64::from(plan.guarantees_scaled));
        mt.managed_containers.set(managed.len() as i64);
        mt.filling_containers.set(plan.filling.len() as i64);
        mt.tiered.set(i64::from(self.actuating()));
        mt.kernel_promotion_limited
            .set(i64::from(self.gate.limited()));
        mt.kernel_promotion_closed
            .set(i64::from(self.gate.closed()));
        mt.kernel_scan_paced.set(i64::from(self.gate.scan_paced()));
        mt.kernel_hot_threshold_held
            .set(i64::from(self.gate.threshold_held()));
        let lower = self.topo.lower_nodes();
        let mut status = Status {
            tiered: self.actuating(),
            lower_devices: self.cxl.clone(),
            promotion: self.promotion().as_str().into(),
            fast_nodes: fast.iter().copied().collect(),
            lower_nodes: self.topo.lower_nodes().iter().copied().collect(),
            fast_capacity_bytes: snapshot.fast_capacity_bytes,
            fast_free_bytes: fast_free,
            pool_bytes: plan.pool_bytes,
            guarantees_scaled: plan.guarantees_scaled,
            cycles: self.cycles + 1,
            updated_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            quiet_checks: self.quiet_checks,
            kernel_promotion_limited: self.gate.limited(),
            kernel_promotion_closed: self.gate.closed(),
            kernel_scan_paced: self.gate.scan_paced(),
            kernel_hot_threshold_held: self.gate.threshold_held(),
            hotness: match (&self.hot.damon, &self.hot.off_reason) {
                (Some(_), _) => "damon".into(),
                (None, Some(why)) => format!("usage ({why})"),
                (None, None) => "usage".into(),
            },
            hint_faults: match &self.faults.off_reason {
                Some(why) if self.faults.source() != "ebpf" => format!("memory_stat ({why})"),
                _ => self.faults.source().into(),
            },
            mover: self.cfg.daemon.mover.as_str().into(),
            damon_targets: self.hot.monitor.as_ref().map_or(0, |m| m.targets()),
            kdamond_restarts: self.hot.monitor.as_ref().map_or(0, |m| m.restarts),
            containers: Vec::new(),
        };
        for (m, s) in managed.iter().zip(&snapshot.containers) {
            let c = ContainerLabels {
                cgroup: m.path.clone(),
            };
            if let Some(nodes) = per_node.get(&m.id) {
                for (&node, &b) in nodes {
                    let tier = tier_label(fast.contains(&node));
                    mt.container_memory_bytes
                        .get_or_create(&ContainerNodeLabels {
                            cgroup: m.path.clone(),
                            node,
                            tier,
                        })
                        .set(gauge_bytes(b));
                }
            }
            let usage = s.usage_bytes();
            mt.container_local_ratio
                .get_or_create(&c)
                .set(if usage == 0 {
                    0.0
                } else {
                    s.fast_bytes as f64 / usage as f64
                });
            let Some(p) = plan.get(m.id) else { continue };
            let (written_low, written_min) = if !self.actuating() {
                (0, 0)
            } else {
                (p.memory_low_bytes, p.memory_min_bytes)
            };
            for (family, bytes) in [
                (&mt.container_target_bytes, p.target_bytes),
                (&mt.container_demand_bytes, p.demand_bytes),
                (&mt.container_guarantee_bytes, p.guarantee_bytes),
                (
                    &mt.container_recallable_bytes,
                    self.known_hot.recallable(m.id),
                ),
                (&mt.container_known_hot_below_bytes, s.known_hot_below_bytes),
                (&mt.container_local_low_bytes, p.local_low_bytes),
                (&mt.container_local_high_bytes, p.local_high_bytes),
                (&mt.container_memory_low_bytes, written_low),
                (&mt.container_memory_min_bytes, written_min),
            ] {
                family.get_or_create(&c).set(gauge_bytes(bytes));
            }
            mt.container_state
                .get_or_create(&ContainerStateLabels {
                    cgroup: m.path.clone(),
                    state: state_name(p.state),
                })
                .set(1);
            mt.container_damping_level
                .get_or_create(&c)
                .set(i64::from(p.damping_level));
            mt.container_pingpong_bytes_per_second
                .get_or_create(&c)
                .set(gauge_bytes(p.pingpong_bytes_per_s));
            let pressure = self.offload_pressure.get(&m.id).copied();
            if let Some(p) = pressure {
                mt.container_memory_pressure.get_or_create(&c).set(p);
            }
            let reading = self.hot.readings.get(&m.id).filter(|r| r.regions > 0);
            let (mut hot_fast, mut hot_lower) = (None, None);
            if let Some(r) = reading {
                mt.container_damon_regions
                    .get_or_create(&c)
                    .set(r.regions as i64);
                let (mut hf, mut hl) = (0u64, 0u64);
                for (&node, nh) in &r.heat.per_node {
                    let is_fast = fast.contains(&node);
                    if is_fast {
                        hf += nh.hot_bytes;
                    } else if lower.contains(&node) {
                        hl += nh.hot_bytes;
                    }
                    mt.set_heat(&m.path, node, tier_label(is_fast), &nh.hist);
                }
                for (tier, b) in [("fast", hf), ("lower", hl)] {
                    mt.container_hot_bytes
                        .get_or_create(&ContainerTierLabels {
                            cgroup: m.path.clone(),
                            tier,
                        })
                        .set(gauge_bytes(b));
                }
                (hot_fast, hot_lower) = (Some(hf), Some(hl));
            }
            let entry = &self.cfg.policies[m.policy_index];
            status.containers.push(ContainerStatus {
                container: m.path.clone(),
                id: m.id,
                policy: entry.name.clone().unwrap_or_else(|| entry.pattern.clone()),
                fast_bytes: s.fast_bytes,
                lower_bytes: s.slow_bytes,
                demand_bytes: p.demand_bytes,
                local_low_bytes: p.local_low_bytes,
                local_high_bytes: p.local_high_bytes,
                target_bytes: p.target_bytes,
                memory_low_bytes: p.memory_low_bytes,
                memory_min_bytes: p.memory_min_bytes,
                demote_bytes: if self.actuating() { p.demote_bytes } else { 0 },
                promote_bytes: if !self.actuating() {
                    0
                } else {
                    p.promote_bytes
                },
                state: state_name(p.state).into(),
                hot_fast_bytes: hot_fast,
                hot_lower_bytes: hot_lower,
                moved_bytes: self.moved_total.get(&m.id).cloned().unwrap_or_default(),
                damping_level: p.damping_level,
                memory_pressure_percent: pressure,
                pingpong_bytes_per_s: p.pingpong_bytes_per_s,
                filling: plan.filling.contains(&m.id),
            });
        }
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = status;
    }
}
