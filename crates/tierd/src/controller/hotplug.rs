//! Capacity that changes under tierd: memory blocks of a node onlined or
//! offlined (CXL memory pools, a device taken out for service), a node
//! leaving or joining a tier. Each interval re-reads the topology; a change
//! is logged per node, counted (`tierd_topology_changes_total`) and the next
//! plan uses the new capacities. The CXL devices behind the lower-tier
//! nodes are read again on a change.

use super::*;

impl Controller {
    /// Re-reads nodes, tiers and per-node memory (the cycle's and the quiet
    /// check's free-memory refresh). Returns whether a node's capacity or
    /// tier changed since the last reading.
    ///
    /// Errors: the topology cannot be read at all (the caller's cycle fails
    /// and the loop goes on).
    pub(super) fn refresh_topology(&mut self) -> Result<bool> {
        let sysfs = &self.cfg.daemon.sysfs_root;
        // Nodes, tiers and MemTotal; CPUs and HMAT of known nodes do not
        // change with memory hotplug (docs/BENCHMARKS.md: the full
        // discover cost ~2 ms a cycle under emulation).
        let fresh = self
            .topo
            .reread(sysfs)
            .with_context(|| format!("cannot read the NUMA topology under {}", sysfs.display()))?;
        let changes = self.topo.changes(&fresh);
        let was_tiered = self.topo.is_tiered();
        self.topo = fresh;
        if changes.is_empty() {
            return Ok(false);
        }
        self.metrics.topology_changes.inc();
        let mib = |b: Option<u64>| b.map(|b| b >> 20);
        for c in &changes {
            tracing::warn!(
                node = c.node,
                before_mib = ?mib(c.before_bytes),
                after_mib = ?mib(c.after_bytes),
                tier_before = ?c.tier_before,
                tier_after = ?c.tier_after,
                "NUMA node capacity changed (memory onlined or offlined): planning with the new capacity"
            );
        }
        let fast = self.topo.fast_nodes();
        let lower = self.topo.lower_nodes();
        match (was_tiered, self.topo.is_tiered()) {
            (true, false) => tracing::warn!(
                fast = ?fast,
                "no lower memory tier has memory any more: tierd stops demoting and promoting \
                 (memory.reclaim would reclaim, not demote) until one comes back"
            ),
            (false, true) if !self.observe_only => tracing::warn!(
                fast = ?fast, lower = ?lower,
                "a lower memory tier has memory again: tierd demotes and promotes again"
            ),
            _ => tracing::info!(fast = ?fast, lower = ?lower,
                fast_capacity_bytes = self.topo.fast_capacity_bytes(), "memory tiers now"),
        }
        if !self.observe_only && self.topo.is_tiered() {
            apply_fast_reserve(&mut self.cfg, &self.topo);
        }
        // Nodes that went must not keep their last figures.
        self.metrics.node_capacity_bytes.clear();
        self.metrics.node_free_bytes.clear();
        self.read_cxl();
        self.cadence.force();
        Ok(true)
    }

    /// Whether this cycle may move pages between tiers: tierd manages
    /// (not observe-only) and a lower tier has memory now.
    pub(super) fn actuating(&self) -> bool {
        !self.observe_only && self.topo.is_tiered()
    }

    /// Reads which CXL regions and devices back the nodes
    /// ([`numa::cxl::discover`]) into the status and the `tierd_cxl_*`
    /// metrics. A read error is logged and leaves the list empty until the
    /// next topology change.
    pub(super) fn read_cxl(&mut self) {
        let regions = match numa::cxl::discover(&self.cfg.daemon.sysfs_root) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot map NUMA nodes to CXL devices; the tierd_cxl_* metrics are empty");
                Vec::new()
            }
        };
        for r in &regions {
            tracing::info!(
                node = r.node, region = %r.name, mode = %r.mode, size_mib = r.size_bytes >> 20,
                memdevs = ?r.memdevs.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
                "CXL memory behind a NUMA node"
            );
        }
        self.metrics.set_cxl(&regions);
        self.cxl = regions;
    }
}
