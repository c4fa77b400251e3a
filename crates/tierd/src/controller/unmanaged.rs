//! Demotion of cold memory that no managed container holds, before the
//! cycle's solve (policy `unmanaged.rs`; docs/DESIGN.md "Unmanaged
//! memory"): the root cgroup's own pages and cgroups that no policy
//! matches, never tierd's own cgroup, fast nodes only, MGLRU generations
//! untouched for `daemon.unmanaged_min_age` only (default
//! [`policy::unmanaged::UNMANAGED_MIN_AGE_MS`]).

use super::*;
use crate::controller::actuate::Agings;
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
    /// this cycle, and credits what it found to `snapshot` (so the solve
    /// that follows gives it to the containers). The room needed is that of
    /// a solve on a copy of the policy state (solving does not change the
    /// host). Returns the bytes demoted (what the eviction command was asked
    /// and found old enough, as [`Self::evict_cold`] counts). Errors are
    /// logged and the cycle goes on with the containers alone.
    pub(super) fn demote_unmanaged(
        &mut self,
        managed: &[Managed],
        snapshot: &mut Snapshot,
        params: &policy::PolicyParams,
        gens: &mut Option<Vec<MemcgGens>>,
        agings: &mut Agings,
    ) -> u64 {
        if !self.cfg.daemon.demote_unmanaged || self.lru_gen.is_none() || managed.is_empty() {
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
        let all = match gens {
            Some(a) => a,
            None => match self.lru_gen.as_ref().map(LruGen::read) {
                Some(Ok(a)) => gens.insert(a),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "unmanaged demotion: cannot read lru_gen; skipped this cycle");
                    return 0;
                }
                None => return 0,
            },
        };
        let members = unmanaged_memcgs(all, managed, self.own_cgroup.as_deref());
        let outside = Managed {
            path: "(unmanaged)".into(),
            id: 0,
            policy_index: 0,
            member_ids: vec![0; members.len()],
            members,
        };
        let fast = self.topo.fast_nodes();
        let min_age = self.cfg.daemon.unmanaged_min_age.as_millis() as u64;
        let taken = match self.evict_cold(&outside, ask, min_age, &fast, gens, agings) {
            Some(Ok(t)) => t,
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
            "unmanaged demotion: cold memory outside the containers"
        );
        taken
    }
}

/// Paths (relative to the cgroup2 root, `/` for the root) of the memcgs in
/// `all` that no managed container holds: not a container's cgroup or
/// below one, and not `own` (tierd's cgroup) or below it. Ancestors of
/// containers stay in: lru_gen lists each memcg's own pages, not its
/// children's.
fn unmanaged_memcgs(all: &[MemcgGens], managed: &[Managed], own: Option<&str>) -> Vec<String> {
    let under = |path: &str, root: &str| {
        let root = root.trim_matches('/');
        !root.is_empty()
            && (path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/')))
    };
    all.iter()
        .map(|g| g.path.trim_matches('/'))
        .filter(|p| !managed.iter().any(|m| under(p, &m.path)))
        .filter(|p| !own.is_some_and(|o| under(p, o)))
        .map(|p| format!("/{p}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memcg(path: &str) -> MemcgGens {
        MemcgGens {
            id: 1,
            path: path.into(),
            nodes: BTreeMap::new(),
        }
    }

    fn container(path: &str) -> Managed {
        Managed {
            path: path.into(),
            id: 7,
            policy_index: 0,
            members: vec![path.into()],
            member_ids: vec![7],
        }
    }

    #[test]
    fn unmanaged_memcgs_leave_out_containers_their_children_and_tierd() {
        let all: Vec<MemcgGens> = [
            "/",
            "/test.slice",
            "/test.slice/app",
            "/test.slice/app/worker",
            "/test.slice/application",
            "/system.slice",
            "/system.slice/tierd.service",
            "/system.slice/sshd.service",
        ]
        .into_iter()
        .map(memcg)
        .collect();
        let got = unmanaged_memcgs(
            &all,
            &[container("test.slice/app")],
            Some("system.slice/tierd.service"),
        );
        assert_eq!(
            got,
            [
                "/",
                "/test.slice",
                "/test.slice/application",
                "/system.slice",
                "/system.slice/sshd.service"
            ]
        );
        // tierd in the root cgroup (a test guest) excludes nothing more.
        assert_eq!(unmanaged_memcgs(&all, &[], Some("")).len(), all.len());
    }
}
