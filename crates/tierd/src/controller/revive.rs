//! Keeping kswapd alive on the fast tier. When kswapd reclaims nothing from a
//! node 16 times in a row the kernel marks the node unreclaimable and stops
//! waking kswapd for it (`/proc/zoneinfo` `node_unreclaimable`, see
//! [`crate::topology::unreclaimable_nodes`]); NUMA-balancing promotion into
//! the node then fails too, for the rest of the boot, until a reclaim through
//! `shrink_node()` frees a page there. tierd's protection can cause it:
//! with a container under `memory.min` (a guarantee, or short of its share
//! beside one over its own) and a neighbour whose pages are all hot
//! (nothing old enough for MGLRU to evict), kswapd found nothing it could
//! take (seen in the emulated host, docs/NOTES.md "A fast node the kernel
//! gave up on" and "Session 86"), and kernel tiering stayed dead after
//! tierd stopped. MGLRU's eviction
//! command, tierd's usual demotion, does not reset the kernel's count; a
//! `memory.reclaim` write does.
//!
//! While tierd runs it reports such a node and does not revive it: tierd
//! keeps the fast tier's headroom free itself, which is what kswapd would do
//! there, and promotion needs only that free room. Reviving it every cycle
//! cost more than it gave (docs/NOTES.md "A fast node the kernel gave up
//! on").
//!
//! At exit, when tierd's protection is gone, it revives the node so that the
//! kernel's own tiering works again.

use super::*;

/// What a revival write asks `memory.reclaim` for: the kernel needs one
/// reclaimed page on the node to count kswapd alive again.
const REVIVE_BYTES: u64 = MIN_RECLAIM_BYTES;

impl Controller {
    /// Fast nodes the kernel has stopped reclaiming, from `/proc/zoneinfo`
    /// (empty, logged at debug level, when it cannot be read or parsed).
    pub(super) fn unreclaimable_fast_nodes(&self) -> BTreeSet<u32> {
        let path = self.cfg.daemon.procfs_root.join("zoneinfo");
        let fast = self.topo.fast_nodes();
        match fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| unreclaimable_nodes(&path, &t).map_err(|e| e.to_string()))
        {
            Ok(nodes) => nodes.into_iter().filter(|n| fast.contains(n)).collect(),
            Err(e) => {
                tracing::debug!(file = %path.display(), error = %e, "cannot read node_unreclaimable");
                BTreeSet::new()
            }
        }
    }

    /// Managed containers to revive a node through, best first: those
    /// without `memory.min` (no guarantee to dent) before those with, then
    /// the most above their target (whose pages would go first anyway).
    /// Only containers with at least [`REVIVE_BYTES`] on the fast tier.
    fn revival_candidates(
        fast_nodes: &NodeSet,
        plan: &Plan,
        managed: &[Managed],
        per_node: &HashMap<u64, BTreeMap<u32, u64>>,
    ) -> Vec<String> {
        let mut c: Vec<(bool, i128, &str)> = managed
            .iter()
            .filter_map(|m| {
                let p = plan.get(m.id)?;
                let fast: u64 = per_node
                    .get(&m.id)?
                    .iter()
                    .filter(|(n, _)| fast_nodes.contains(n))
                    .map(|(_, b)| *b)
                    .sum();
                (p.state != PlacementState::Pinned && fast >= REVIVE_BYTES).then(|| {
                    (
                        p.memory_min_bytes > 0,
                        i128::from(p.target_bytes) - i128::from(fast),
                        m.path.as_str(),
                    )
                })
            })
            .collect();
        c.sort();
        c.into_iter().map(|(_, _, p)| p.to_owned()).collect()
    }

    /// Each cycle: exports which fast nodes the kernel has stopped
    /// reclaiming (`tierd_node_unreclaimable`), logs when one is given up
    /// and when it is reclaimed again, and, while one is, keeps the managed
    /// containers to revive it through at exit, best first.
    pub(super) fn watch_kswapd(
        &mut self,
        plan: &Plan,
        managed: &[Managed],
        per_node: &HashMap<u64, BTreeMap<u32, u64>>,
    ) {
        let hopeless = self.unreclaimable_fast_nodes();
        let fast = self.topo.fast_nodes();
        for &n in &fast {
            let l = NodeLabels {
                node: n,
                tier: tier_label(true),
            };
            self.metrics
                .node_unreclaimable
                .get_or_create(&l)
                .set(i64::from(hopeless.contains(&n)));
        }
        // Ranked only while a node is given up: a node given up after the
        // last cycle is revived through the root cgroup alone.
        self.revive_with = if hopeless.is_empty() {
            Vec::new()
        } else {
            Self::revival_candidates(&fast, plan, managed, per_node)
        };
        for &n in self.unreclaimable.difference(&hopeless) {
            tracing::info!(node = n, "kswapd reclaims fast node {n} again");
        }
        for &n in hopeless.difference(&self.unreclaimable) {
            tracing::warn!(
                node = n,
                "the kernel stopped reclaiming fast node {n} (kswapd reclaimed nothing 16 times \
                 in a row: node_unreclaimable in /proc/zoneinfo); no kswapd demotion or \
                 NUMA-balancing promotion into it until a reclaim frees a page there. tierd \
                 keeps its headroom free meanwhile and revives kswapd when it stops"
            );
        }
        self.unreclaimable = hopeless;
    }

    /// One `memory.reclaim` write of [`REVIVE_BYTES`] to `path` (`""`: the
    /// root cgroup); true when the kernel took it.
    fn revive_through(&self, node: u32, path: &str) -> bool {
        match self.cg.reclaim(path, REVIVE_BYTES) {
            Ok(outcome) => {
                self.metrics
                    .kswapd_revivals
                    .get_or_create(&NodeLabels {
                        node,
                        tier: tier_label(true),
                    })
                    .inc();
                tracing::info!(node, cgroup = %path, ?outcome,
                    "memory.reclaim write to revive kswapd on the fast node");
                true
            }
            Err(cgroupctl::Error::Vanished(_)) => false,
            Err(e) => {
                tracing::warn!(node, cgroup = %path, error = %e,
                    "memory.reclaim write to revive kswapd failed");
                false
            }
        }
    }

    /// At shutdown, after protection is put back: leaves no fast node
    /// unreclaimable behind (`tierd_kswapd_revivals_total`), through the
    /// last cycle's managed containers and then the root cgroup's
    /// `memory.reclaim`.
    pub(super) fn revive_at_exit(&self) {
        let mut paths = self.revive_with.clone();
        paths.push(String::new());
        for n in self.unreclaimable_fast_nodes() {
            for p in &paths {
                if self.revive_through(n, p) && !self.unreclaimable_fast_nodes().contains(&n) {
                    break;
                }
            }
            if self.unreclaimable_fast_nodes().contains(&n) {
                tracing::warn!(
                    node = n,
                    "fast node {n} is still unreclaimable at exit: kswapd stays asleep there until \
                     an allocation's direct reclaim frees a page"
                );
            } else {
                tracing::info!(node = n, "kswapd revived on fast node {n} before exit");
            }
        }
    }
}
