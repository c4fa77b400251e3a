//! Demotion of cold memory that no managed container holds, before the
//! cycle's solve (policy `unmanaged.rs`; docs/DESIGN.md "Policy
//! semantics", memory outside the containers): the root cgroup's own
//! pages and cgroups that no policy matches, never tierd's own cgroup,
//! fast nodes only, MGLRU generations untouched for
//! `daemon.unmanaged_min_age` only (default
//! [`policy::unmanaged::UNMANAGED_MIN_AGE_MS`]).

use super::*;
use crate::controller::actuate::Agings;
use crate::controller::offload::Untouched;
use cgroupctl::lru_gen::MemcgGens;

impl Controller {
    /// Finds tierd's own cgroup (`<procfs>/self/cgroup`, the cgroup2 line),
    /// which the unmanaged demotion never touches, and says once when the
    /// demotion is on but cannot run (no lru_gen).
    pub(super) fn setup_unmanaged(&mut self) {
        let file = self.cfg.daemon.procfs_root.join("self/cgroup");
        self.own_cgroup = fs::read_to_string(&file).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|p| p.trim().trim_matches('/').to_string())
        });
        if self.cfg.daemon.demote_unmanaged && !self.observe_only && self.lru_gen.is_none() {
            tracing::info!(
                "daemon.demote_unmanaged: off, it needs the multi-gen LRU's eviction command \
                 (daemon.demotion = \"auto\" or \"lru_gen\" with MGLRU on); memory outside \
                 the containers is left to kswapd"
            );
        }
    }

    /// Demotes cold unmanaged fast-tier memory when the fast tier needs room
    /// this cycle, and credits what left to `snapshot` (so the solve that
    /// follows gives it to the containers). The room needed is that of a
    /// solve on a copy of the policy state (solving does not change the
    /// host). `held` are the paths of every container discovery found this
    /// cycle (sampled or not: a container whose read failed is still not
    /// unmanaged). At most [`MAX_MEMCGS`] memcgs, the ones with the most
    /// fast-tier pages, each with at least 1 MiB there: every one may cost
    /// an aging (a page-table walk) and a re-read of lru_gen. Returns the
    /// bytes that left the fast tier: the drop of those memcgs' fast-node
    /// pages between this cycle's read of lru_gen and one made after the
    /// eviction (which then serves the rest of the cycle), at most the bytes
    /// asked; the kernel keeps referenced, dirty or pinned pages, and pages
    /// with nowhere to go. Errors are logged and the cycle goes on with the
    /// containers alone.
    pub(super) fn demote_unmanaged(
        &mut self,
        held: &[String],
        snapshot: &mut Snapshot,
        params: &policy::PolicyParams,
        gens: &mut Option<Vec<MemcgGens>>,
        agings: &mut Agings,
    ) -> u64 {
        let Some(lg) = self.lru_gen.clone() else {
            return 0;
        };
        if !self.cfg.daemon.demote_unmanaged || held.is_empty() {
            return 0;
        }
        let mut dry = self.policy_state.clone();
        let need = policy::solve(snapshot, params, &mut dry).need_bytes;
        let now_ms = dry.clock_ms;
        let ask =
            policy::unmanaged::ask(&self.unmanaged, now_ms, need, snapshot.fast_unmanaged_bytes);
        if ask == 0 {
            return 0;
        }
        let fast = self.topo.fast_nodes();
        let all = match gens {
            Some(a) => a,
            None => match lg.read() {
                Ok(a) => gens.insert(a),
                Err(e) => {
                    tracing::warn!(error = %e, "unmanaged demotion: cannot read lru_gen; skipped this cycle");
                    return 0;
                }
            },
        };
        let chosen = unmanaged_memcgs(all, held, self.own_cgroup.as_deref(), &fast);
        let before = fast_pages(all, &chosen, &fast);
        let outside = Managed {
            path: "(unmanaged)".into(),
            id: 0,
            policy_index: 0,
            member_ids: chosen.iter().map(|c| c.0).collect(),
            members: chosen.iter().map(|c| c.1.clone()).collect(),
        };
        let min_age = self.cfg.daemon.unmanaged_min_age.as_millis() as u64;
        let evicted = self.evict_cold(
            &outside,
            ask,
            Untouched::Since(min_age),
            &fast,
            gens,
            agings,
        );
        let taken = match evicted {
            Some(Ok(_)) => match lg.read() {
                Ok(after) => {
                    let left = before.saturating_sub(fast_pages(&after, &chosen, &fast));
                    *gens = Some(after);
                    (left * PAGE_BYTES).min(ask)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "unmanaged demotion: cannot read lru_gen after the eviction; nothing credited");
                    0
                }
            },
            Some(Err(e)) => {
                tracing::warn!(error = %e, "unmanaged demotion failed; the containers make the room");
                0
            }
            None => 0,
        };
        policy::unmanaged::observe(&mut self.unmanaged, now_ms, ask, taken);
        policy::unmanaged::credit(snapshot, taken);
        self.metrics.unmanaged_demoted_bytes.inc_by(taken);
        tracing::debug!(
            need,
            asked = ask,
            demoted = taken,
            memcgs = chosen.len(),
            "unmanaged demotion: cold memory outside the containers"
        );
        taken
    }
}

/// Most memcgs one unmanaged demotion evicts from (see
/// [`Controller::demote_unmanaged`]).
const MAX_MEMCGS: usize = 8;

/// Fewest pages (1 MiB) on the fast nodes for a memcg to be evicted from.
const MIN_MEMCG_PAGES: u64 = 256;

/// Pages on `nodes` of the memcgs `chosen` (by id) in `all`.
fn fast_pages(all: &[MemcgGens], chosen: &[(u64, String)], nodes: &NodeSet) -> u64 {
    all.iter()
        .filter(|g| chosen.iter().any(|c| c.0 == g.id))
        .map(|g| nodes.iter().map(|&n| g.resident_pages(n)).sum::<u64>())
        .sum()
}

/// The memcgs of `all` that no container holds, as (id, path relative to
/// the cgroup2 root with a leading `/`): not a container's cgroup
/// (`held`) or below one, not `own` (tierd's cgroup) or below it, not a
/// removed memcg still being freed (lru_gen prints no path for it), with
/// at least [`MIN_MEMCG_PAGES`] on `nodes`; at most [`MAX_MEMCGS`], most
/// pages there first. Ancestors of containers stay in: lru_gen lists each
/// memcg's own pages, not its children's. tierd in the root cgroup (`own`
/// empty) leaves out nothing more: its pages in use are young.
fn unmanaged_memcgs(
    all: &[MemcgGens],
    held: &[String],
    own: Option<&str>,
    nodes: &NodeSet,
) -> Vec<(u64, String)> {
    let under = |path: &str, root: &str| {
        let root = root.trim_matches('/');
        !root.is_empty()
            && (path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/')))
    };
    let mut out: Vec<(u64, u64, String)> = all
        .iter()
        .filter(|g| !g.path.is_empty())
        .filter(|g| {
            let p = g.path.trim_matches('/');
            !held.iter().any(|h| under(p, h)) && !own.is_some_and(|o| under(p, o))
        })
        .map(|g| {
            let pages = nodes.iter().map(|&n| g.resident_pages(n)).sum::<u64>();
            (pages, g.id, g.path.clone())
        })
        .filter(|&(pages, _, _)| pages >= MIN_MEMCG_PAGES)
        .collect();
    out.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    out.truncate(MAX_MEMCGS);
    out.into_iter().map(|(_, id, path)| (id, path)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cgroupctl::lru_gen::Generation;

    fn memcg(id: u64, path: &str, pages: u64) -> MemcgGens {
        let gen = Generation {
            seq: 0,
            age_ms: 0,
            anon_pages: pages,
            file_pages: 0,
        };
        MemcgGens {
            id,
            path: path.into(),
            nodes: BTreeMap::from([
                (0, vec![gen]),
                (
                    1,
                    vec![Generation {
                        anon_pages: 9999,
                        ..gen
                    }],
                ),
            ]),
        }
    }

    #[test]
    fn unmanaged_memcgs_leave_out_containers_their_children_tierd_and_the_dying() {
        let all = vec![
            memcg(1, "/", 9000),
            memcg(2, "/test.slice", 300),
            memcg(3, "/test.slice/app", 5000),
            memcg(4, "/test.slice/app/worker", 5000),
            memcg(5, "/test.slice/application", 2000),
            memcg(6, "/system.slice", 100),
            memcg(7, "/system.slice/tierd.service", 5000),
            memcg(8, "/system.slice/sshd.service", 4000),
            memcg(9, "", 7000),
        ];
        let fast: NodeSet = [0].into_iter().collect();
        let ids = |v: Vec<(u64, String)>| v.into_iter().map(|c| c.0).collect::<Vec<_>>();
        let got = unmanaged_memcgs(
            &all,
            &["test.slice/app".into()],
            Some("system.slice/tierd.service"),
            &fast,
        );
        // Most fast-tier pages first; /system.slice (100 pages) is under
        // the 1 MiB floor; the lower node's pages do not count.
        assert_eq!(ids(got), [1, 8, 5, 2]);
        // tierd in the root cgroup leaves out nothing more.
        assert_eq!(
            ids(unmanaged_memcgs(&all, &[], Some(""), &fast)),
            [1, 3, 4, 7, 8, 5, 2]
        );
        // At most MAX_MEMCGS, the most fast-tier pages first.
        let many: Vec<MemcgGens> = (1..=12)
            .map(|i| memcg(i, &format!("/s{i}"), 1000 + i))
            .collect();
        assert_eq!(
            ids(unmanaged_memcgs(&many, &[], None, &fast)),
            (5..=12).rev().collect::<Vec<u64>>()
        );
        assert_eq!(
            fast_pages(&all, &[(1, "/".into()), (8, String::new())], &fast),
            13000
        );
    }
}
