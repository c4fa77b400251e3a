//! The wire types of `/status`, shared by the daemon (which fills them each
//! cycle) and `tierctl` (which reads them): JSON, one object per cycle with
//! one entry per managed container. Fields added later carry
//! `#[serde(default)]` so that a newer `tierctl` reads an older tierd.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What `/status` and `tierctl status` show: the last cycle, per container.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    pub tiered: bool,
    /// The promotion mode in effect: "kernel" or "tierd" (`promotion =
    /// "tierd"` shows "kernel" while DAMON is unavailable and the kernel's
    /// NUMA balancing promotes instead).
    pub promotion: String,
    pub fast_nodes: Vec<u32>,
    pub lower_nodes: Vec<u32>,
    pub fast_capacity_bytes: u64,
    pub fast_free_bytes: u64,
    pub pool_bytes: u64,
    pub guarantees_scaled: bool,
    pub cycles: u64,
    /// When the last full cycle published this document: seconds since the
    /// Unix epoch (wall clock, sub-second). Between full cycles of a quiet
    /// steady state it ages by up to 4 intervals. 0 in older tierd's /status.
    #[serde(default)]
    pub updated_unix_s: f64,
    /// Intervals of a quiet steady state that ran only the check, not the
    /// full cycle (`cycles` counts the full ones); absent in older tierd's
    /// /status.
    #[serde(default)]
    pub quiet_checks: u64,
    /// The kernel's promotion rate limited by tierd (a steady state, see
    /// `limits.steady_promote_rate`); absent in older tierd's /status.
    #[serde(default)]
    pub kernel_promotion_limited: bool,
    /// Of that, held at 0: nothing hot on the lower tier
    /// (`limits.steady_hot_below`); absent in older tierd's /status.
    #[serde(default)]
    pub kernel_promotion_closed: bool,
    /// NUMA balancing's longest scan period held by tierd (not steady, see
    /// `limits.promote_scan_period`); absent in older tierd's /status.
    #[serde(default)]
    pub kernel_scan_paced: bool,
    /// NUMA balancing's hot-page threshold held by tierd (not steady, see
    /// `limits.promote_hot_threshold`); absent in older tierd's /status.
    #[serde(default)]
    pub kernel_hot_threshold_held: bool,
    /// Where demand comes from: "damon" or "usage" (and why, if DAMON is off).
    pub hotness: String,
    /// Where hint faults come from: "ebpf" or "memory_stat" (and why the
    /// probe is off).
    #[serde(default)]
    pub hint_faults: String,
    pub mover: String,
    pub damon_targets: usize,
    pub kdamond_restarts: u64,
    /// The CXL regions (and their memory devices) behind the nodes, from
    /// sysfs; empty without CXL memory and in older tierd's /status.
    #[serde(default)]
    pub lower_devices: Vec<numa::cxl::CxlRegion>,
    pub containers: Vec<ContainerStatus>,
}

/// One managed container in [`Status`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ContainerStatus {
    /// The cgroup path relative to the cgroup2 root.
    pub container: String,
    pub id: u64,
    pub policy: String,
    pub fast_bytes: u64,
    pub lower_bytes: u64,
    pub demand_bytes: u64,
    pub local_low_bytes: u64,
    pub local_high_bytes: u64,
    pub target_bytes: u64,
    pub memory_low_bytes: u64,
    /// memory.min written (a container at or under its target with a
    /// guarantee, or while another holds an excess unprotected), bytes;
    /// absent in older tierd's /status.
    #[serde(default)]
    pub memory_min_bytes: u64,
    pub demote_bytes: u64,
    pub promote_bytes: u64,
    pub state: String,
    /// Hot bytes per tier (`fast`, `lower`), when DAMON knows them.
    pub hot_fast_bytes: Option<u64>,
    pub hot_lower_bytes: Option<u64>,
    /// Bytes tierd moved itself, since start, by direction and mechanism
    /// (e.g. `promote/move_pages`).
    pub moved_bytes: BTreeMap<String, u64>,
    /// Thrash damping level (0 = none) and ping-pong rate.
    pub damping_level: u32,
    pub pingpong_bytes_per_s: u64,
    /// `memory.pressure` some avg10 (percent) of a container with
    /// `offload`, as last read; absent otherwise and in older tierd's
    /// /status.
    #[serde(default)]
    pub memory_pressure_percent: Option<f64>,
    /// A newcomer filling its share (`limits.arrival_window`); absent in
    /// older tierd's /status.
    #[serde(default)]
    pub filling: bool,
}
