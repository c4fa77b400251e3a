//! TMO-style offload of cold memory, paced by pressure (docs/DESIGN.md
//! "Policy semantics", offload): for each container whose policy has
//! `offload`, every full cycle reclaims a step of its coldest memory while
//! its PSI `memory.pressure` stays under the threshold, and nothing once it
//! reaches it (the step rule is `policy::Offload::step_bytes`).

use super::*;
use crate::controller::actuate::Agings;

/// Which of a container's pages an eviction through MGLRU
/// ([`Controller::evict_cold`]) may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Untouched {
    /// Those in generations at least this old, ms, after an aging when the
    /// youngest is stale ([`cgroupctl::LruGen::evict_cold`]).
    Since(u64),
    /// Those untouched for at least this long, by one or two agings
    /// ([`cgroupctl::LruGen::evict_idle`]: the hot swap).
    For(Duration),
}

/// What an eviction through MGLRU ([`Controller::evict_cold`]) found and
/// asked of the kernel, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Evicted {
    /// The bytes asked that old enough generations held (what the kernel
    /// could take), at most the bytes asked.
    pub taken: u64,
    /// All the bytes old enough generations held when the eviction ran,
    /// asked or not: the container's supply of pages that passed the test.
    pub idle: u64,
}

impl Controller {
    /// Eviction of pages untouched for `untouched` through MGLRU
    /// ([`cgroupctl::LruGen::evict_cold`], [`cgroupctl::LruGen::evict_idle`]):
    /// `bytes` split over the container's memcgs and `nodes` in proportion
    /// to their pages there (the offload: every node; the swaps: the fast
    /// nodes).
    /// Returns what old enough generations held ([`Evicted`]). `None` when
    /// tierd does not use lru_gen or it does not list the container.
    pub(super) fn evict_cold(
        &self,
        m: &Managed,
        bytes: u64,
        untouched: Untouched,
        nodes: &NodeSet,
        gens: &mut Option<Vec<cgroupctl::lru_gen::MemcgGens>>,
        agings: &mut Agings,
    ) -> Option<cgroupctl::Result<Evicted>> {
        let lg = self.lru_gen.as_ref()?;
        let parts = match self.lru_gen_parts(m, gens, nodes)? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let total: u64 = parts.iter().map(|p| p.2).sum();
        if total == 0 {
            return None;
        }
        let want = bytes.div_ceil(PAGE_BYTES);
        let (mut taken, mut idle) = (0u64, 0u64);
        for (g, node, pages) in parts {
            let share = (u128::from(want) * u128::from(pages)).div_ceil(u128::from(total)) as u64;
            let ev = match untouched {
                Untouched::Since(ms) => lg.evict_cold(g, node, share, self.swappiness, ms),
                Untouched::For(idle) => lg.evict_idle(g, node, share, self.swappiness, idle),
            };
            match ev {
                Ok(ev) => {
                    taken += ev.asked_pages.min(ev.evictable_pages);
                    idle += ev.evictable_pages;
                    agings.count += u64::from(ev.agings);
                    agings.time += ev.aging;
                }
                Err(cgroupctl::Error::Vanished(_)) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(Evicted {
            taken: (taken * PAGE_BYTES).min(bytes),
            idle: idle * PAGE_BYTES,
        }))
    }

    /// An offloading container's warm set
    /// ([`policy::ContainerSnapshot::warm_bytes`]): its bytes on every node
    /// in generations younger than the policy's `min_age`, while each of
    /// its memcgs was aged within `min_age` there (the offload's step ages
    /// once the youngest generation is a third of it old; with no aging
    /// for `min_age` every generation would look cold). `None` for a
    /// container without offload, without
    /// lru_gen, or with a generation list that is stale or unreadable (its
    /// demand then falls back to what it holds on the fast tier).
    pub(super) fn warm_bytes(
        &self,
        m: &Managed,
        gens: &mut Option<Vec<cgroupctl::lru_gen::MemcgGens>>,
    ) -> Option<u64> {
        let o = self.cfg.container_policy(m.policy_index).offload?;
        let nodes: NodeSet = self.topo.nodes.iter().map(|n| n.id).collect();
        let parts = match self.lru_gen_parts(m, gens, &nodes)? {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(container = %m.path, error = %e, "offload: cannot read lru_gen; demand is what the container holds");
                return None;
            }
        };
        let mut pages = 0;
        for (g, node, _) in parts {
            pages += g.young_pages(node, o.min_age_ms, o.min_age_ms)?;
        }
        Some(pages * PAGE_BYTES)
    }

    /// Runs the offload step of each offloading container. Through MGLRU's
    /// eviction command where tierd uses it, on every node the container
    /// has pages on, generations at least `min_age` old only (pages
    /// untouched about that long), so neither a hot set nor warm pages are
    /// taken: from fast nodes that is demotion, from lower nodes
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
                if pressure >= o.pressure_pct {
                    tracing::debug!(container = %m.path, pressure, threshold = o.pressure_pct,
                        "offload backs off: memory pressure at or above the threshold");
                }
                continue;
            }
            // Without lru_gen, memory.reclaim in LRU order: no page-age
            // guard (docs/DESIGN.md offload).
            let nodes: NodeSet = self.topo.nodes.iter().map(|n| n.id).collect();
            let r = match self.evict_cold(
                m,
                step,
                Untouched::Since(o.min_age_ms),
                &nodes,
                gens,
                agings,
            ) {
                Some(r) => r.map(|e| e.taken),
                None => self.cg.reclaim(&m.path, step).map(|_| step),
            };
            match r {
                Ok(0) => {}
                Ok(step) => {
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
