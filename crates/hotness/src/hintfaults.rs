//! Per-container NUMA hint faults and kernel promotions, from the eBPF probe
//! ([`crate::probe`]) when it loads, else from the memcg counters of
//! `memory.stat` (`numa_hint_faults`, `pgpromote_success`).
//!
//! The probe adds what the memcg counters lack: the node a fault came from,
//! promotion candidates that were dropped or failed to migrate, and hint
//! faults on lower-tier pages as a second hotness signal in
//! `promotion = "kernel"` mode (the kernel's own view of which lower-tier
//! pages are being touched). Which source is active is exported as
//! `tierd_hint_fault_source{source}`.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Deserialize;

use crate::probe::{HintCounts, HintFaultProbe, ProbeError, ProbeOptions, ProbeReading};

/// Where per-container hint faults come from (tierd's `[hotness]
/// hint_faults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HintFaultSource {
    /// The eBPF probe when the kernel allows it, else memory.stat.
    Auto,
    /// The eBPF probe, or an error.
    Ebpf,
    /// memory.stat counters only; the probe is never loaded.
    MemoryStat,
}

/// One container's hint-fault activity over the last cycle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerFaults {
    /// Hint faults by the node the faulting page was on; `None` = node
    /// unknown (memory.stat source).
    pub faults_by_node: BTreeMap<Option<u32>, u64>,
    /// Probe only, by destination node: promotion candidates, candidates
    /// dropped before migration, migrations that succeeded / failed (calls).
    pub candidates: BTreeMap<u32, u64>,
    pub dropped: BTreeMap<u32, u64>,
    pub migrated: BTreeMap<u32, u64>,
    pub failed: BTreeMap<u32, u64>,
    /// Probe only: each successful migration as (pid, page-aligned virtual
    /// address, bytes), for exact ping-pong matching.
    pub promotions: Vec<(u32, u64, u64)>,
    /// Probe only: promotion candidates the kernel refused before
    /// migration (a sample), same shape: hot by the kernel's test, left on
    /// their node.
    pub refused: Vec<(u32, u64, u64)>,
    /// Probe only: hint faults on remote pages the kernel did not make
    /// candidates (a sample): pages in use, not hot by the kernel's test
    /// as it stood (its threshold, or its rate limit).
    pub declined: Vec<Declined>,
}

/// One declined hint fault ([`ContainerFaults::declined`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declined {
    pub pid: u32,
    /// Page-aligned virtual address.
    pub addr: u64,
    pub bytes: u64,
    /// The page's node.
    pub node: u32,
    /// The fault's latency as the kernel's hot-page test measured it, ms
    /// from the scan to the fault (`PromotionEvent::latency_ms`).
    pub latency_ms: Option<u32>,
}

/// Base page size for the probe's page counts.
const PAGE_BYTES: u64 = 4096;

/// The active source and its previous reading.
pub struct HintFaults {
    probe: Option<HintFaultProbe>,
    prev: ProbeReading,
    /// Why the probe is not running, when it is not.
    pub off_reason: Option<String>,
    /// The memcgs whose declined hint faults the probe records, as last
    /// set (`None`: not set since the probe loaded, or the last set failed).
    declined_for: Option<HashSet<u64>>,
}

impl HintFaults {
    /// Moves the promotion and refusal records waiting in the probe's ring
    /// buffers to the queues the next [`Self::sample`] reads (nothing
    /// without the probe): called between full cycles so the ring buffers
    /// cannot overflow while they are spaced out.
    pub fn collect_promotions(&self) {
        if let Some(p) = &self.probe {
            p.collect_promotions();
        }
    }

    /// Records declined hint faults ([`ContainerFaults::declined`]) of the
    /// memcgs `ids` only, from now on: the probe filters them in the
    /// kernel, so the others cost neither the faulting task a ring-buffer
    /// record nor tierd a drain. Nothing without the probe or when `ids`
    /// is the set in force. A failed map update is logged and tried again
    /// at the next call.
    pub fn want_declined(&mut self, ids: HashSet<u64>) {
        let Some(probe) = &self.probe else { return };
        if self.declined_for.as_ref() == Some(&ids) {
            return;
        }
        match probe.set_declined_memcgs(&ids) {
            Ok(_) => self.declined_for = Some(ids),
            Err(e) => {
                tracing::warn!(error = %e, "cannot update the hint-fault probe's declined filter");
                self.declined_for = None;
            }
        }
    }

    /// Starts `source`. `Auto` tries the probe and falls back to
    /// memory.stat with one warning saying why; `Ebpf` returns the probe's
    /// load error (the caller names its config key); `MemoryStat` never loads
    /// the probe. `nodes_shift` is the running kernel's `CONFIG_NODES_SHIFT`.
    ///
    /// The kernel BTF is read from `<sysfs_root>/kernel/btf/vmlinux`, so a
    /// fixture tree without one runs on memory.stat.
    pub fn start(
        source: HintFaultSource,
        nodes_shift: u32,
        sysfs_root: &std::path::Path,
    ) -> Result<HintFaults, ProbeError> {
        let mut h = HintFaults {
            probe: None,
            prev: ProbeReading::default(),
            off_reason: None,
            declined_for: None,
        };
        if source == HintFaultSource::MemoryStat {
            h.off_reason = Some("hotness.hint_faults = \"memory_stat\"".into());
            return Ok(h);
        }
        let opts = ProbeOptions {
            nodes_shift,
            btf: sysfs_root.join("kernel/btf/vmlinux"),
        };
        match HintFaultProbe::load(&opts) {
            Ok(p) => {
                tracing::info!(attached = ?p.attached(), "eBPF hint-fault probe attached");
                h.prev = p.read().unwrap_or_default();
                h.probe = Some(p);
            }
            Err(e) if source == HintFaultSource::Ebpf => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "eBPF hint-fault probe unavailable; per-container hint faults come from memory.stat (no per-node or failed-promotion detail)");
                h.off_reason = Some(e.to_string());
            }
        }
        Ok(h)
    }

    /// `"ebpf"` or `"memory_stat"`.
    pub fn source(&self) -> &'static str {
        if self.probe.is_some() {
            "ebpf"
        } else {
            "memory_stat"
        }
    }

    /// One cycle. `containers`: (container id, the memcg ids of its cgroup
    /// and descendants, the container's memory.stat `numa_hint_faults` delta
    /// since the previous cycle — hierarchical, `None` without a baseline).
    /// `alive`: every cgroup id that exists now (the probe's entries of
    /// others are deleted). Returns the deltas since the previous cycle per
    /// container id.
    pub fn sample(
        &mut self,
        containers: &[(u64, &[u64], Option<u64>)],
        alive: &HashSet<u64>,
    ) -> HashMap<u64, ContainerFaults> {
        let mut out = HashMap::new();
        let Some(probe) = &self.probe else {
            for (id, _, delta) in containers {
                if let Some(d) = *delta {
                    let mut f = ContainerFaults::default();
                    f.faults_by_node.insert(None, d);
                    out.insert(*id, f);
                }
            }
            return out;
        };
        let now = match probe.read() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "reading the hint-fault probe's maps failed this cycle");
                return out;
            }
        };
        // Looked up once per ring-buffer record (thousands a cycle).
        let owner: foldhash::HashMap<u64, u64> = containers
            .iter()
            .flat_map(|&(c, members, _)| members.iter().map(move |m| (*m, c)))
            .collect();
        for (id, ..) in containers {
            out.insert(*id, ContainerFaults::default());
        }
        for (k, c) in &now.counts {
            let Some(container) = owner.get(&k.memcg_id) else {
                continue;
            };
            let d: HintCounts = c.since(&self.prev.counts.get(k).copied().unwrap_or_default());
            let f = out.entry(*container).or_default();
            *f.faults_by_node.entry(Some(k.src_nid)).or_default() += d.hint_faults;
            if let Some(dst) = k.dst_nid {
                *f.candidates.entry(dst).or_default() += d.candidates;
                *f.dropped.entry(dst).or_default() += d.prepare_failed;
                *f.migrated.entry(dst).or_default() += d.migrated;
                *f.failed.entry(dst).or_default() += d.migrate_failed;
            }
        }
        let keep = |id: u64| id == 0 || alive.contains(&id);
        let (events, dropped) = probe.drain_promotions();
        if dropped > 0 {
            tracing::debug!(dropped, "promotion events lost (ring buffer full)");
        }
        let refusals = probe.drain_refusals();
        let declined = probe.drain_declined();
        for (e, kind) in events
            .iter()
            .map(|e| (e, 0))
            .chain(refusals.iter().map(|e| (e, 1)))
            .chain(declined.iter().map(|e| (e, 2)))
        {
            let Some(container) = owner.get(&e.memcg_id) else {
                continue;
            };
            let bytes = u64::from(e.nr_pages) * PAGE_BYTES;
            // A THP's fault address is anywhere in it: align to the folio.
            let addr = e.addr & !(bytes.next_power_of_two() - 1);
            let f = out.entry(*container).or_default();
            match kind {
                0 => f.promotions.push((e.pid, addr, bytes)),
                1 => f.refused.push((e.pid, addr, bytes)),
                _ => f.declined.push(Declined {
                    pid: e.pid,
                    addr,
                    bytes,
                    node: e.src_nid,
                    latency_ms: e.latency_ms,
                }),
            }
        }
        let pruned = probe.prune(&now, keep);
        if pruned > 0 {
            tracing::debug!(
                entries = pruned,
                "pruned hint-fault entries of removed cgroups"
            );
        }
        self.prev = now;
        self.prev.counts.retain(|k, _| keep(k.memcg_id));
        out
    }
}
