//! TMO-style offload of cold memory, paced by pressure (docs/DESIGN.md
//! "Policy semantics", offload): for each container whose policy has
//! `offload`, every full cycle reclaims a step of its coldest memory while
//! its PSI `memory.pressure` stays under the threshold, and nothing once it
//! reaches it (the step rule is `policy::Offload::step_bytes`).

use super::*;
use crate::controller::actuate::Agings;

impl Controller {
    /// Runs the offload step of each offloading container. Through MGLRU's
    /// eviction command where tierd uses it, on every node the container
    /// has pages on, oldest generations only (after at most two agings:
    /// pages untouched between two page-table walks), so a hot set is
    /// never taken: from fast nodes that is demotion, from lower nodes
    /// reclaim to swap or zswap where the host has it (anonymous pages on
    /// the lowest tier have nowhere else to go, so without swap only file
    /// pages leave there). Else one `memory.reclaim` write (LRU order).
    /// Errors are logged per container and counted; the cycle goes on.
    pub(super) fn offload(
        &mut self,
        managed: &[Managed],
        gens: &mut Option<Vec<cgroupctl::lru_gen::MemcgGens>>,
        agings: &mut Agings,
    ) {
        self.offload_pressure
            .retain(|id, _| managed.iter().any(|m| m.id == *id));
        for m in managed {
            let Some(o) = self.cfg.container_policy(m.policy_index).offload else {
                continue;
            };
            let labels = ContainerLabels {
                cgroup: m.path.clone(),
            };
            let read = self
                .cg
                .memory_pressure(&m.path)
                .and_then(|p| Ok((p.some.avg10, self.cg.memory_current(&m.path)?)));
            let (pressure, current) = match read {
                Ok(r) => r,
                Err(cgroupctl::Error::Vanished(_)) => continue,
                Err(e) => {
                    tracing::warn!(container = %m.path, error = %e,
                        "offload: cannot read memory.pressure or memory.current; skipped this cycle");
                    self.count_error(&m.path, "offload", &e);
                    continue;
                }
            };
            self.offload_pressure.insert(m.id, pressure);
            let step = o.step_bytes(current, pressure);
            if step < MIN_RECLAIM_BYTES {
                continue;
            }
            let nodes: NodeSet = self.topo.nodes.iter().map(|n| n.id).collect();
            let r = match self.demote_lru_gen(m, step, gens, agings, self.swappiness, &nodes) {
                Some(r) => r,
                None => self.cg.reclaim(&m.path, step),
            };
            match r {
                Ok(_) => {
                    self.metrics
                        .container_offload_bytes
                        .get_or_create(&labels)
                        .inc_by(step);
                    self.own_moved.entry(m.id).or_default().demoted_bytes += step;
                    tracing::debug!(container = %m.path, bytes = step, pressure, "offloaded");
                }
                Err(cgroupctl::Error::Vanished(_)) => {}
                Err(e) => {
                    tracing::warn!(container = %m.path, error = %e, "offload failed");
                    self.count_error(&m.path, "offload", &e);
                }
            }
        }
    }
}
