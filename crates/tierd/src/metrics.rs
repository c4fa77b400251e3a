//! Prometheus metrics, each declared once with its help text and unit in the
//! name (Prometheus naming: `_bytes`, `_seconds`, `_total`). prometheus-client
//! appends `_total` to counters itself, so counters are registered without it.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
}

/// The phases of a control cycle, in the order the cycle runs them: the
/// values of [`PhaseLabels::phase`] (the profile tables of `tierscen` and
/// `cargo xtask` follow this order).
pub const CYCLE_PHASES: &[&str] = &[
    "discover",
    "damon",
    "read",
    "hint_faults",
    "solve",
    "protect",
    "move",
    "age",
    "reclaim",
    "recall",
    "kswapd",
    "publish",
];

/// Phase of a control cycle, for [`Metrics::cycle_phase_seconds`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// `discover` (free memory per node, the walk of the cgroup tree),
    /// `damon` (heat sampling), `read` (memory.numa_stat and memory.stat),
    /// `hint_faults` (probe or memcg counters), `solve`, `protect` (memory.low, cpuset.mems writes),
    /// `move` (tierd's own page moves), `age` (MGLRU agings before a
    /// demotion through lru_gen: page-table walks of the memcg), `reclaim`
    /// (memory.reclaim or lru_gen eviction: the kernel's demotion work, done
    /// in tierd's context), `recall` (the
    /// node queries and moves of known-hot pages back), `kswapd` (the
    /// fast nodes' state in /proc/zoneinfo) or `publish` (metrics and
    /// /status).
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerNodeLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub node: u32,
    pub tier: &'static str,
}

/// The `tier` label: `fast` (top tier) or `lower`.
pub fn tier_label(fast: bool) -> &'static str {
    if fast {
        "fast"
    } else {
        "lower"
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerTierLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub tier: &'static str,
}

/// Pages tierd moved itself: `direction` promote|demote, `mechanism`
/// move_pages|damos.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MoveLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub direction: &'static str,
    pub mechanism: &'static str,
}

/// Per-page move_pages(2) failures, by status: busy (-EBUSY),
/// not_present (-ENOENT), fault (-EFAULT), denied (-EACCES: not in the
/// cpuset), other, not_attempted (after a positive return), syscall.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MoveFailureLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub direction: &'static str,
    pub status: &'static str,
}

/// Heat histogram bucket: bytes by DAMON access frequency (`freq`, share of
/// the samples in an aggregation interval) per node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeatLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub node: u32,
    pub tier: &'static str,
    pub freq: &'static str,
}

/// Idle-age histogram bucket: bytes not accessed for `idle` (DAMON age of
/// regions with no access seen).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IdleLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub node: u32,
    pub tier: &'static str,
    pub idle: &'static str,
}

/// Hint faults by the node the faulting page was on (`all` when the source
/// is memory.stat, which has no node).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerFaultLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub node: String,
}

/// Kernel (NUMA-balancing) migrations of a container's pages to `node`, by
/// outcome: candidate (the kernel chose a node), dropped (isolation or
/// target checks failed), migrated, failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PromotionLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub node: u32,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerStateLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerReasonLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    /// Kernel demotion path from memory.stat: kswapd, direct (includes
    /// memory.reclaim), khugepaged.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerErrorLabels {
    /// The cgroup path relative to the cgroup2 root.
    pub cgroup: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub node: u32,
    pub tier: &'static str,
}

/// A CXL region onlined into a node (`tierd_cxl_region_bytes`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CxlRegionLabels {
    pub node: u32,
    pub region: String,
    /// `ram` or `pmem`.
    pub mode: String,
}

/// A CXL memory device in a region (`tierd_cxl_memdev_*`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CxlMemdevLabels {
    pub node: u32,
    pub region: String,
    pub memdev: String,
    /// The device serial number, `0x` hex as sysfs prints it.
    pub serial: String,
    pub firmware_version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InfoLabels {
    pub version: &'static str,
    pub promotion: &'static str,
}

type GaugeF = Gauge<f64, AtomicU64>;

/// `freq` labels of the heat histogram: share of an aggregation interval's
/// samples that saw an access (buckets of `hotness::heat::FREQ_BUCKETS`).
pub const FREQ_LABELS: [&str; hotness::heat::FREQ_BUCKETS] =
    ["0", "0-25%", "25-50%", "50-75%", "75-100%"];

/// `idle` labels of the idle-age histogram (`hotness::heat::AGE_BUCKET_BOUNDS_S`).
pub const AGE_LABELS: [&str; hotness::heat::AGE_BUCKETS] =
    ["<1s", "1-4s", "4-16s", "16-64s", "64-256s", ">=256s"];

/// Label sets that name a cgroup (the `cgroup` label).
pub trait CgroupLabel {
    fn cgroup(&self) -> &str;
}

macro_rules! cgroup_label {
    ($($t:ty),*) => {$(
        impl CgroupLabel for $t {
            fn cgroup(&self) -> &str {
                &self.cgroup
            }
        }
    )*};
}
cgroup_label!(
    ContainerLabels,
    ContainerErrorLabels,
    ContainerReasonLabels,
    MoveLabels,
    MoveFailureLabels,
    ContainerFaultLabels,
    PromotionLabels
);

/// A per-cgroup counter family that remembers the label sets of each cgroup,
/// so that a vanished cgroup's series can be removed
/// ([`Metrics::forget_cgroups`]): with container churn, series would
/// otherwise grow without bound.
pub struct PerCgroup<L> {
    family: Family<L, Counter>,
    seen: Mutex<HashMap<String, HashSet<L>>>,
}

impl<L> Default for PerCgroup<L>
where
    L: Clone + Hash + Eq,
{
    fn default() -> Self {
        PerCgroup {
            family: Family::default(),
            seen: Mutex::new(HashMap::new()),
        }
    }
}

impl<L> PerCgroup<L>
where
    L: CgroupLabel + Clone + Hash + Eq,
{
    /// The counter of `labels` (shared with the registry), created at 0.
    pub fn get_or_create(&self, labels: &L) -> Counter {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get_mut(labels.cgroup()) {
            Some(sets) if sets.contains(labels) => {}
            Some(sets) => {
                sets.insert(labels.clone());
            }
            None => {
                seen.insert(labels.cgroup().to_owned(), HashSet::from([labels.clone()]));
            }
        }
        self.family.get_or_create_owned(labels)
    }

    /// Removes every series of the cgroups for which `alive` is false.
    fn retain(&self, alive: &dyn Fn(&str) -> bool) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.retain(|cgroup, sets| {
            if alive(cgroup) {
                return true;
            }
            for l in sets.iter() {
                self.family.remove(l);
            }
            false
        });
    }

    /// Cgroups with at least one series.
    pub fn cgroups(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Every metric tierd exports.
pub struct Metrics {
    registry: Registry,
    /// Registered names (without the `_total` counters get on the wire).
    names: Vec<&'static str>,
    pub container_memory_bytes: Family<ContainerNodeLabels, Gauge>,
    pub container_local_ratio: Family<ContainerLabels, GaugeF>,
    pub container_target_bytes: Family<ContainerLabels, Gauge>,
    pub container_demand_bytes: Family<ContainerLabels, Gauge>,
    pub container_guarantee_bytes: Family<ContainerLabels, Gauge>,
    pub container_recallable_bytes: Family<ContainerLabels, Gauge>,
    pub container_known_hot_below_bytes: Family<ContainerLabels, Gauge>,
    pub container_local_low_bytes: Family<ContainerLabels, Gauge>,
    pub container_local_high_bytes: Family<ContainerLabels, Gauge>,
    pub container_memory_low_bytes: Family<ContainerLabels, Gauge>,
    pub container_memory_min_bytes: Family<ContainerLabels, Gauge>,
    pub container_state: Family<ContainerStateLabels, Gauge>,
    pub container_demote_requested_bytes: PerCgroup<ContainerLabels>,
    pub container_reclaim_short: PerCgroup<ContainerLabels>,
    pub container_swap_asked_bytes: PerCgroup<ContainerLabels>,
    pub container_swap_idle_bytes: PerCgroup<ContainerLabels>,
    pub container_reclaim_errors: PerCgroup<ContainerErrorLabels>,
    pub container_demoted_bytes: PerCgroup<ContainerReasonLabels>,
    pub container_promoted_bytes: PerCgroup<ContainerLabels>,
    pub container_hot_bytes: Family<ContainerTierLabels, Gauge>,
    pub container_heat_bytes: Family<HeatLabels, Gauge>,
    pub container_idle_bytes: Family<IdleLabels, Gauge>,
    pub container_damon_regions: Family<ContainerLabels, Gauge>,
    pub container_migrated_bytes: PerCgroup<MoveLabels>,
    pub move_pages_failures: PerCgroup<MoveFailureLabels>,
    pub container_damping_level: Family<ContainerLabels, Gauge>,
    pub container_pingpong_bytes_per_second: Family<ContainerLabels, Gauge>,
    pub damon_targets: Gauge,
    pub demotion_bytes_per_second: GaugeF,
    pub kdamond_restarts: Counter,
    pub damon_busy_retries: Counter,
    hotness: Family<SourceLabels, Gauge>,
    hint_fault_source: Family<SourceLabels, Gauge>,
    pub container_numa_hint_faults: PerCgroup<ContainerFaultLabels>,
    pub container_numa_promotions: PerCgroup<PromotionLabels>,
    pub container_lower_hint_faults_per_second: Family<ContainerLabels, GaugeF>,
    pub container_repromoted_bytes: PerCgroup<ContainerLabels>,
    pub container_offload_bytes: PerCgroup<ContainerLabels>,
    pub container_memory_pressure: Family<ContainerLabels, GaugeF>,
    pub node_capacity_bytes: Family<NodeLabels, Gauge>,
    pub node_free_bytes: Family<NodeLabels, Gauge>,
    pub node_unreclaimable: Family<NodeLabels, Gauge>,
    pub kswapd_revivals: Family<NodeLabels, Counter>,
    pub fast_pool_bytes: Gauge,
    pub fast_need_bytes: Gauge,
    pub guarantees_scaled: Gauge,
    pub tiered: Gauge,
    pub managed_containers: Gauge,
    pub filling_containers: Gauge,
    pub kernel_promotion_limited: Gauge,
    pub kernel_promotion_closed: Gauge,
    pub kernel_scan_paced: Gauge,
    pub kernel_hot_threshold_held: Gauge,
    pub loop_duration_seconds: Histogram,
    pub quiet_checks: Counter,
    pub arrival_wakes: Counter,
    pub lru_gen_agings: Counter,
    pub unmanaged_demoted_bytes: Counter,
    pub recall_queried_pages: Counter,
    /// Wall time spent per cycle phase, summed over cycles (seconds).
    pub cycle_phase_seconds: Family<PhaseLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    /// CPU time (user + system) of the thread running the cycle in each
    /// phase, seconds summed over cycles: where tierd's own CPU goes,
    /// including the kernel work its writes do in its context
    /// (memory.reclaim's demotion, lru_gen agings, move_pages).
    pub cycle_phase_cpu_seconds: Family<PhaseLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    pub loop_errors: Counter,
    pub topology_changes: Counter,
    cxl_region_bytes: Family<CxlRegionLabels, Gauge>,
    cxl_memdev_ram_bytes: Family<CxlMemdevLabels, Gauge>,
    info: Family<InfoLabels, Gauge>,
}

impl Metrics {
    pub fn new(promotion: &'static str) -> Metrics {
        let mut r = Registry::default();
        let mut names = Vec::new();
        macro_rules! reg {
            (@cgroup $name:literal, $help:literal) => {{
                let m = PerCgroup::default();
                r.register($name, $help, m.family.clone());
                names.push($name);
                m
            }};
            ($name:literal, $help:literal, $m:expr) => {{
                let m = $m;
                r.register($name, $help, m.clone());
                names.push($name);
                m
            }};
        }
        let m = Metrics {
            container_memory_bytes: reg!("tierd_container_memory_bytes", "Container memory (anon + file) resident on a NUMA node, from memory.numa_stat", Family::default()),
            container_local_ratio: reg!("tierd_container_local_ratio", "Share of the container's memory on the fast tier (0..1)", Family::default()),
            container_target_bytes: reg!("tierd_container_target_bytes", "Fast-tier target computed by the fair-share policy", Family::default()),
            container_demand_bytes: reg!("tierd_container_demand_bytes", "Fast-tier demand used by the policy (hot bytes, or usage where hotness is unknown)", Family::default()),
            container_known_hot_below_bytes: reg!("tierd_container_known_hot_below_bytes", "Bytes of the container's known-hot pages (promoted by the kernel before, or whose hint fault came within hotness.hot_latency) last seen on the lower tier: what a hot swap may trade in (counted only with limits.hot_swap and daemon.recall, and 0 while no container's hot swap window is open: limits.hot_swap_window, hot_swap_extension)", Family::default()),
            container_recallable_bytes: reg!("tierd_container_recallable_bytes", "Bytes of the container's known-hot pages (promoted by the kernel before) found on the lower tier at the last check (daemon.recall; 0 while the container is not under its target)", Family::default()),
            container_guarantee_bytes: reg!("tierd_container_guarantee_bytes", "Guaranteed fast-tier bytes: min(demand, local_low), scaled if guarantees exceed capacity", Family::default()),
            container_local_low_bytes: reg!("tierd_container_local_low_bytes", "Configured local_low resolved to bytes", Family::default()),
            container_local_high_bytes: reg!("tierd_container_local_high_bytes", "Configured local_high resolved to bytes", Family::default()),
            container_memory_low_bytes: reg!("tierd_container_memory_low_bytes", "memory.low protection written by tierd", Family::default()),
            container_memory_min_bytes: reg!("tierd_container_memory_min_bytes", "memory.min protection written by tierd (a container at or under its target with a local_low guarantee, or while another container holds more than its target unprotected)", Family::default()),
            container_state: reg!("tierd_container_state", "1 for the container's placement state (over_target, under_target, at_target, pinned)", Family::default()),
            container_demote_requested_bytes: reg!(@cgroup "tierd_container_demote_requested_bytes", "Bytes tierd asked memory.reclaim to demote"),
            container_reclaim_short: reg!(@cgroup "tierd_container_reclaim_short", "memory.reclaim writes that returned EAGAIN (reclaimed less than asked)"),
            container_swap_asked_bytes: reg!(@cgroup "tierd_container_swap_asked_bytes", "Bytes the demotion half of a within-share or hot swap asked for (policy ContainerPlan::swap_bytes)"),
            container_swap_idle_bytes: reg!(@cgroup "tierd_container_swap_idle_bytes", "Of tierd_container_swap_asked_bytes, the bytes found idle long enough (the hot swap: untouched for limits.hot_swap_idle; the within-share swap: in MGLRU generations 30 s old) and demoted: the room the swap's promotion half fills"),
            container_reclaim_errors: reg!(@cgroup "tierd_container_reclaim_errors", "Failed memory.reclaim / memory.low / cpuset.mems writes, by error"),
            container_demoted_bytes: reg!(@cgroup "tierd_container_demoted_bytes", "Bytes the kernel demoted from the container (memory.stat pgdemote_*, 4 KiB pages)"),
            container_promoted_bytes: reg!(@cgroup "tierd_container_promoted_bytes", "Bytes the kernel promoted for the container (memory.stat pgpromote_success, 4 KiB pages)"),
            container_hot_bytes: reg!("tierd_container_hot_bytes", "Hot bytes (DAMON: accessed in at least hotness.hot_min_accesses samples per aggregation) resident on the tier", Family::default()),
            container_heat_bytes: reg!("tierd_container_heat_bytes", "Heat histogram: resident bytes by DAMON access frequency bucket, per node", Family::default()),
            container_idle_bytes: reg!("tierd_container_idle_bytes", "Idle-age histogram: resident bytes of regions with no access seen, by how long they have been idle, per node", Family::default()),
            container_damon_regions: reg!("tierd_container_damon_regions", "DAMON regions of the container's monitored processes", Family::default()),
            container_migrated_bytes: reg!(@cgroup "tierd_container_migrated_bytes", "Bytes tierd moved itself, by direction (promote, demote) and mechanism (move_pages, damos); these appear in no memcg counter"),
            move_pages_failures: reg!(@cgroup "tierd_move_pages_failures", "Pages move_pages(2) did not move, by per-page status"),
            container_damping_level: reg!("tierd_container_thrash_damping_level", "Thrash damping level (0 = none; each level halves the promotion budget and doubles the promotion band)", Family::default()),
            container_pingpong_bytes_per_second: reg!("tierd_container_pingpong_bytes_per_second", "Bytes per second demoted and promoted again within the thrash window", Family::default()),
            damon_targets: reg!("tierd_damon_targets", "Processes tierd's kdamond monitors", Gauge::default()),
            demotion_bytes_per_second: reg!("tierd_demotion_bytes_per_second", "Demotion throughput the lower tier has given tierd's writes (moving average); one cycle demotes at most one interval of it", GaugeF::default()),
            kdamond_restarts: reg!("tierd_kdamond_restarts", "Times tierd found its kdamond stopped and restarted it", Counter::default()),
            damon_busy_retries: reg!("tierd_damon_busy_retries", "DAMON sysfs writes that met EBUSY (another user of the interface held its lock) and were tried again", Counter::default()),
            hotness: reg!("tierd_hotness_source", "1 for the active demand source: damon, or usage (DAMON unavailable or off)", Family::default()),
            hint_fault_source: reg!("tierd_hint_fault_source", "1 for the active source of per-container hint faults: ebpf (the probe) or memory_stat", Family::default()),
            container_numa_hint_faults: reg!(@cgroup "tierd_container_numa_hint_faults", "NUMA hint faults on the container's pages, by the node the page was on (all: memory.stat, no node)"),
            container_numa_promotions: reg!(@cgroup "tierd_container_numa_promotions", "Kernel NUMA-balancing migrations of the container's pages to a node, by outcome (candidate, dropped, migrated, failed); eBPF probe only"),
            container_lower_hint_faults_per_second: reg!("tierd_container_lower_tier_hint_faults_per_second", "Hint faults per second on the container's lower-tier pages (eBPF probe): the kernel's view of its lower-tier heat", Family::default()),
            container_repromoted_bytes: reg!(@cgroup "tierd_container_repromoted_bytes", "Bytes the kernel promoted (eBPF probe) that tierd had demoted with move_pages within the thrash window: exact ping-pong"),
            container_offload_bytes: reg!(@cgroup "tierd_container_offload_bytes", "Bytes tierd asked the kernel to reclaim from an offloading container (policy offload: demotion from the fast tier, swap from the lower tier where the host has it), paced by its memory pressure"),
            container_memory_pressure: reg!("tierd_container_memory_pressure_percent", "memory.pressure some avg10 of an offloading container (percent of wall time with a task stalled on memory), as tierd read it this cycle", Family::default()),
            node_capacity_bytes: reg!("tierd_node_capacity_bytes", "NUMA node MemTotal", Family::default()),
            node_free_bytes: reg!("tierd_node_free_bytes", "NUMA node MemFree", Family::default()),
            node_unreclaimable: reg!("tierd_node_unreclaimable", "1 while the kernel has stopped reclaiming the fast node (/proc/zoneinfo node_unreclaimable: kswapd reclaimed nothing 16 times in a row; no kswapd demotion or NUMA-balancing promotion into it)", Family::default()),
            kswapd_revivals: reg!("tierd_kswapd_revivals", "memory.reclaim writes tierd made at exit to revive kswapd on a fast node the kernel had stopped reclaiming", Family::default()),
            fast_pool_bytes: reg!("tierd_fast_pool_bytes", "Fast-tier bytes shared among managed containers this cycle", Gauge::default()),
            fast_need_bytes: reg!("tierd_fast_need_bytes", "Fast-tier room needed this cycle (headroom deficit + under-target containers' deficits): what demotion below local_high may free at most", Gauge::default()),
            guarantees_scaled: reg!("tierd_guarantees_scaled", "1 when the local_low guarantees exceed the fast tier and were scaled down", Gauge::default()),
            tiered: reg!("tierd_host_tiered", "1 when the host has a lower memory tier and tierd actuates; 0 in observe-only mode", Gauge::default()),
            managed_containers: reg!("tierd_managed_containers", "Containers matched by a policy this cycle", Gauge::default()),
            filling_containers: reg!("tierd_filling_containers", "Newcomers filling their share (limits.arrival_window): while one is, the containers above what they would keep once it has its share are not protected", Gauge::default()),
            kernel_promotion_limited: reg!("tierd_kernel_promotion_limited", "1 while tierd holds kernel.numa_balancing_promote_rate_limit_MBps (steady: no container under its target), at limits.steady_promote_rate or at 0 (see tierd_kernel_promotion_closed)", Gauge::default()),
            kernel_promotion_closed: reg!("tierd_kernel_promotion_closed", "1 while tierd holds kernel.numa_balancing_promote_rate_limit_MBps at 0: steady, and no lower-tier page passed the kernel's hot-page test faster than limits.steady_hot_below", Gauge::default()),
            kernel_hot_threshold_held: reg!("tierd_kernel_hot_threshold_held", "1 while tierd holds NUMA balancing's hot_threshold_ms at limits.promote_hot_threshold (not steady: a container under its target in the last steady_after)", Gauge::default()),
            kernel_scan_paced: reg!("tierd_kernel_scan_paced", "1 while tierd holds NUMA balancing's scan_period_max_ms at limits.promote_scan_period (not steady: a container under its target in the last steady_after)", Gauge::default()),
            loop_duration_seconds: reg!("tierd_loop_duration_seconds", "Duration of one control-loop cycle (sample, solve, actuate)", Histogram::new(exponential_buckets(0.0005, 2.0, 16))),
            arrival_wakes: reg!("tierd_arrival_wakes", "Checks run between intervals because a cgroup appeared where a policy can match one (inotify on the cgroup directories)", Counter::default()),
            quiet_checks: reg!("tierd_quiet_checks", "Intervals in a quiet steady state that ran only the check (containers, their memory.current, the fast tier's free memory) instead of the full cycle", Counter::default()),
            recall_queried_pages: reg!("tierd_recall_queried_pages", "Known pages whose node recall's checks queried with move_pages(2) (daemon.recall; the rest of a check takes the node last seen)", Counter::default()),
            unmanaged_demoted_bytes: reg!("tierd_unmanaged_demoted_bytes", "Bytes of cold fast-tier memory that no managed container holds (the root cgroup's own pages, cgroups no policy matches) that tierd demoted to make room the fast tier needed (daemon.demote_unmanaged): the drop of those memcgs' fast-node pages in lru_gen across MGLRU's eviction command, generations untouched for daemon.unmanaged_min_age (30 s by default) only", Counter::default()),
            lru_gen_agings: reg!("tierd_lru_gen_agings", "MGLRU agings (forced page-table walks of a memcg on one node, lru_gen's `+` command) run to make pages evictable before a demotion; their time is the `age` cycle phase", Counter::default()),
            cycle_phase_seconds: reg!("tierd_cycle_phase_seconds", "Wall time spent in each phase of the control cycle, summed over cycles: discover, damon, read, hint_faults, solve, protect, move, age, reclaim, recall, kswapd, publish", Family::default()),
            cycle_phase_cpu_seconds: reg!("tierd_cycle_phase_cpu_seconds", "CPU time (user + system) of the thread running the control cycle in each phase, summed over cycles: tierd's own CPU per phase, with the kernel work its writes do (memory.reclaim, lru_gen agings, move_pages), capped per phase at its wall time", Family::default()),
            loop_errors: reg!("tierd_loop_errors", "Control-loop cycles that failed as a whole", Counter::default()),
            topology_changes: reg!("tierd_topology_changes", "Times tierd found a NUMA node's capacity or tier changed (memory blocks onlined or offlined, a node or tier came or went) and planned with the new capacity", Counter::default()),
            cxl_region_bytes: reg!("tierd_cxl_region_bytes", "Capacity of a CXL region onlined as system RAM into a node (sysfs bus/cxl region size)", Family::default()),
            cxl_memdev_ram_bytes: reg!("tierd_cxl_memdev_ram_bytes", "Volatile capacity of a CXL memory device backing a node, labelled with its region, serial number and firmware version (sysfs bus/cxl mem<N>; health is not in sysfs)", Family::default()),
            info: reg!("tierd_build_info", "tierd version and promotion mode", Family::default()),
            registry: r,
            names,
        };
        m.info
            .get_or_create(&InfoLabels {
                version: env!("CARGO_PKG_VERSION"),
                promotion,
            })
            .set(1);
        m
    }

    /// Removes the counter series of every cgroup for which `alive` is false
    /// (the gauges are cleared and set again each cycle).
    pub fn forget_cgroups(&self, alive: impl Fn(&str) -> bool) {
        let alive: &dyn Fn(&str) -> bool = &alive;
        self.container_demote_requested_bytes.retain(alive);
        self.container_reclaim_short.retain(alive);
        self.container_swap_asked_bytes.retain(alive);
        self.container_swap_idle_bytes.retain(alive);
        self.container_reclaim_errors.retain(alive);
        self.container_demoted_bytes.retain(alive);
        self.container_promoted_bytes.retain(alive);
        self.container_migrated_bytes.retain(alive);
        self.move_pages_failures.retain(alive);
        self.container_numa_hint_faults.retain(alive);
        self.container_numa_promotions.retain(alive);
        self.container_repromoted_bytes.retain(alive);
        self.container_offload_bytes.retain(alive);
    }

    /// Drops the per-container gauge series (not the counters) so that a
    /// vanished container stops being reported; the cycle sets them again.
    pub fn clear_container_gauges(&self) {
        self.container_memory_bytes.clear();
        self.container_local_ratio.clear();
        self.container_target_bytes.clear();
        self.container_demand_bytes.clear();
        self.container_guarantee_bytes.clear();
        self.container_recallable_bytes.clear();
        self.container_known_hot_below_bytes.clear();
        self.container_local_low_bytes.clear();
        self.container_local_high_bytes.clear();
        self.container_memory_low_bytes.clear();
        self.container_memory_min_bytes.clear();
        self.container_state.clear();
        self.container_hot_bytes.clear();
        self.container_heat_bytes.clear();
        self.container_idle_bytes.clear();
        self.container_damon_regions.clear();
        self.container_damping_level.clear();
        self.container_pingpong_bytes_per_second.clear();
        self.container_lower_hint_faults_per_second.clear();
        self.container_memory_pressure.clear();
    }

    /// Replaces the `tierd_cxl_*` series with `regions` (read at start and
    /// after each topology change).
    pub fn set_cxl(&self, regions: &[numa::cxl::CxlRegion]) {
        self.cxl_region_bytes.clear();
        self.cxl_memdev_ram_bytes.clear();
        for r in regions {
            self.cxl_region_bytes
                .get_or_create(&CxlRegionLabels {
                    node: r.node,
                    region: r.name.clone(),
                    mode: r.mode.clone(),
                })
                .set(gauge_bytes(r.size_bytes));
            for m in &r.memdevs {
                self.cxl_memdev_ram_bytes
                    .get_or_create(&CxlMemdevLabels {
                        node: r.node,
                        region: r.name.clone(),
                        memdev: m.name.clone(),
                        serial: format!("{:#x}", m.serial),
                        firmware_version: m.firmware_version.clone(),
                    })
                    .set(gauge_bytes(m.ram_bytes));
            }
        }
    }

    /// Marks the active hint-fault source (`ebpf` or `memory_stat`).
    pub fn hint_fault_source(&self, source: &'static str) {
        self.hint_fault_source.clear();
        self.hint_fault_source
            .get_or_create(&SourceLabels { source })
            .set(1);
    }

    /// Marks the active demand source.
    pub fn hotness_source(&self, damon: bool) {
        self.hotness.clear();
        self.hotness
            .get_or_create(&SourceLabels {
                source: if damon { "damon" } else { "usage" },
            })
            .set(1);
    }

    /// Brings the restart counter up to the monitor's running total.
    pub fn kdamond_restarts_seen(&self, total: u64) {
        catch_up(&self.kdamond_restarts, total);
    }

    /// Brings the EBUSY retry counter up to the DAMON driver's running total
    /// ([`hotness::damon::busy_retries`]).
    pub fn damon_busy_retries_seen(&self, total: u64) {
        catch_up(&self.damon_busy_retries, total);
    }

    /// Sets one container-node heat histogram.
    pub fn set_heat(
        &self,
        container: &str,
        node: u32,
        tier: &'static str,
        h: &hotness::heat::Histogram,
    ) {
        for (i, &b) in h.by_freq.iter().enumerate() {
            self.container_heat_bytes
                .get_or_create(&HeatLabels {
                    cgroup: container.to_owned(),
                    node,
                    tier,
                    freq: FREQ_LABELS[i],
                })
                .set(gauge_bytes(b));
        }
        for (i, &b) in h.by_age_idle.iter().enumerate() {
            self.container_idle_bytes
                .get_or_create(&IdleLabels {
                    cgroup: container.to_owned(),
                    node,
                    tier,
                    idle: AGE_LABELS[i],
                })
                .set(gauge_bytes(b));
        }
    }

    /// Names of every registered metric family, as registered (counters get
    /// `_total` appended in the exposition).
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// Saturating u64 → i64 for gauges.
pub fn gauge_bytes(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Raises `counter` to a running `total` kept elsewhere (never lowers it).
fn catch_up(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vanished cgroup's counter series go, a live one's stay, and every
    /// per-container series is labelled `cgroup`.
    #[test]
    fn vanished_cgroups_lose_their_counter_series() {
        let m = Metrics::new("kernel");
        for cg in ["a.slice/x", "a.slice/y"] {
            m.container_demote_requested_bytes
                .get_or_create(&ContainerLabels { cgroup: cg.into() })
                .inc_by(4096);
            for reason in ["kswapd", "direct"] {
                m.container_demoted_bytes
                    .get_or_create(&ContainerReasonLabels {
                        cgroup: cg.into(),
                        reason,
                    })
                    .inc();
            }
            m.container_reclaim_errors
                .get_or_create(&ContainerErrorLabels {
                    cgroup: cg.into(),
                    error: "EBUSY".into(),
                })
                .inc();
        }
        let text = m.encode();
        assert_eq!(text.matches("cgroup=\"a.slice/y\"").count(), 4, "{text}");
        assert!(!text.contains("container=\""), "{text}");
        m.forget_cgroups(|p| p == "a.slice/x");
        let text = m.encode();
        assert!(!text.contains("a.slice/y"), "{text}");
        assert_eq!(text.matches("cgroup=\"a.slice/x\"").count(), 4, "{text}");
        assert_eq!(m.container_demoted_bytes.cgroups(), 1);
        // The same counter continues for a live cgroup.
        assert_eq!(
            m.container_demote_requested_bytes
                .get_or_create(&ContainerLabels {
                    cgroup: "a.slice/x".into()
                })
                .get(),
            4096
        );
    }
}
