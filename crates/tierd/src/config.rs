//! The daemon's TOML configuration: daemon settings and `[[policy]]` entries.
//!
//! Loading is two passes: serde (unknown keys rejected, types checked; toml's
//! error names the line and key) and [`Config::validate`], whose errors name the
//! file, the key and the reason. See `config/tierd.toml` for a commented example.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::{GlobBuilder, GlobMatcher};
use policy::{ContainerPolicy, PolicyParams, Share};
use serde::{Deserialize, Deserializer};

/// Where the service reads its config unless `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/tierd/tierd.toml";

/// A config error: which file, which key, and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read config: {source} (pass another file with --config)")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    /// The file is writable by users other than its owner: whoever can
    /// write it can steer a root daemon's writes to cgroups and sysctls.
    #[error(
        "{path}: refused: the config is group- or world-writable (mode {mode:o}); \
         run `chmod go-w {path}`"
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[error("{path}: key `{key}`: {reason}")]
    Invalid {
        path: PathBuf,
        key: String,
        reason: String,
    },
}

/// A byte amount as operators write it: an integer (bytes) or a string with a
/// binary or decimal unit (`512MiB`, `40GiB`, `1G`, `4096`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

/// `local_low`/`local_high` as written: bytes, or a percentage of the
/// container's usage (`75%`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ShareSpec {
    Bytes(u64),
    Percent(f64),
}

/// Parses `40GiB`, `512 MiB`, `1G`, `4096`, `4k` into bytes. Binary (Ki/Mi/Gi/Ti)
/// and bare-letter (K/M/G/T, as the kernel's memparse) units are powers of 1024;
/// `KB`/`MB`/`GB`/`TB` are powers of 1000.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "{s:?} is not a byte amount (write e.g. 512MiB or 40GiB)"
        ));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a byte amount (write e.g. 512MiB or 40GiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "{s:?} has unknown unit {other:?} (use B, KiB, MiB, GiB or TiB)"
            ))
        }
    };
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(bytes as u64)
}

/// Parses a [`ShareSpec`]: `N%` (0–100) or a byte amount.
pub fn parse_share(s: &str) -> Result<ShareSpec, String> {
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        let v: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not a percentage (write e.g. 75%)"))?;
        if !(0.0..=100.0).contains(&v) {
            return Err(format!("{s:?}: a percentage must be between 0% and 100%"));
        }
        return Ok(ShareSpec::Percent(v));
    }
    parse_bytes(t).map(ShareSpec::Bytes)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IntOrString {
    Int(u64),
    Str(String),
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match IntOrString::deserialize(d)? {
            IntOrString::Int(n) => Ok(Bytes(n)),
            IntOrString::Str(s) => parse_bytes(&s).map(Bytes).map_err(serde::de::Error::custom),
        }
    }
}

/// `daemon.headroom` as written: `"auto"` or a byte amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headroom {
    /// The larger of [`MIN_AUTO_HEADROOM`] and the kernel's free-memory
    /// reserve of the fast nodes (zone `high`/`promo` watermarks of
    /// `/proc/zoneinfo`, read at start and at each reload).
    Auto,
    Bytes(u64),
}

/// The least headroom `"auto"` gives: 64 MiB, room for a second of
/// allocations or a burst of promotions on a small host.
pub const MIN_AUTO_HEADROOM: u64 = 64 << 20;

impl<'de> Deserialize<'de> for Headroom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match IntOrString::deserialize(d)? {
            IntOrString::Int(n) => Ok(Headroom::Bytes(n)),
            IntOrString::Str(s) if s.trim() == "auto" => Ok(Headroom::Auto),
            IntOrString::Str(s) => parse_bytes(&s)
                .map(Headroom::Bytes)
                .map_err(|e| serde::de::Error::custom(format!("{e}, or \"auto\""))),
        }
    }
}

impl<'de> Deserialize<'de> for ShareSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match IntOrString::deserialize(d)? {
            IntOrString::Int(n) => Ok(ShareSpec::Bytes(n)),
            IntOrString::Str(s) => parse_share(&s).map_err(serde::de::Error::custom),
        }
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1 << 30 && b % (1 << 20) == 0 {
            write!(f, "{:.2}GiB", b as f64 / (1u64 << 30) as f64)
        } else if b >= 1 << 20 {
            write!(f, "{:.1}MiB", b as f64 / (1u64 << 20) as f64)
        } else {
            write!(f, "{b}B")
        }
    }
}

impl ShareSpec {
    fn to_share(self) -> Share {
        match self {
            ShareSpec::Bytes(b) => Share::Bytes(b),
            ShareSpec::Percent(p) => Share::Fraction(p / 100.0),
        }
    }
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!(
            "{s:?} is not a duration ({e}); write e.g. \"2s\" or \"500ms\""
        ))
    })
}

/// Who promotes lower-tier pages to the fast tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromotionMode {
    /// NUMA balancing mode 2 (memory tiering) promotes; tierd demotes
    /// over-target containers and protects under-target ones.
    Kernel,
    /// Kernel promotion off; tierd promotes within per-container budgets.
    Tierd,
}

impl PromotionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PromotionMode::Kernel => "kernel",
            PromotionMode::Tierd => "tierd",
        }
    }
}

/// `[daemon] demand`: what each container competes for in the fair share
/// (see [`policy::DemandSource`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DemandMode {
    /// The container's usage: stable targets, a fair split of the whole
    /// fast tier; which pages fill each share is the kernel's LRU and hint
    /// faults' business.
    Usage,
    /// DAMON's hot set (held at its peak, decaying), then usage for what
    /// the hot sets leave; needs `hotness.source = "damon"`.
    HotSet,
}

impl DemandMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DemandMode::Usage => "usage",
            DemandMode::HotSet => "hot_set",
        }
    }
}

/// `[daemon] demotion`: how an over-target container's fast-tier pages are
/// demoted (what tierd's own movers did not move).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DemotionMechanism {
    /// `lru_gen` where the kernel has it (MGLRU on, debugfs mounted), else
    /// `memory_reclaim`; the choice is logged at start.
    Auto,
    /// The multi-gen LRU's eviction command (`/sys/kernel/debug/lru_gen`):
    /// per node, oldest generation first, stopping at the bytes asked
    /// ([`cgroupctl::lru_gen`]). Refuses to start without it.
    LruGen,
    /// A `memory.reclaim` write: every node, LRU order; under MGLRU it can
    /// demote several times what it was asked (docs/NOTES.md).
    MemoryReclaim,
}

impl DemotionMechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            DemotionMechanism::Auto => "auto",
            DemotionMechanism::LruGen => "lru_gen",
            DemotionMechanism::MemoryReclaim => "memory_reclaim",
        }
    }
}

/// Mechanism tierd uses to move pages itself (`promotion = "tierd"`
/// promotion, and cold-first demotion of containers above target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoverKind {
    /// `move_pages(2)` on the pages of DAMON's hottest (coldest) regions of
    /// each process, in batches, within the budgets.
    MovePages,
    /// DAMOS `migrate_hot` / `migrate_cold` schemes on a `paddr` kdamond, one
    /// per container (memcg filter) with the budget as the scheme quota.
    Damos,
}

impl MoverKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MoverKind::MovePages => "move_pages",
            MoverKind::Damos => "damos",
        }
    }
}

/// `[daemon]`: how the control loop runs and what it may change on the host.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Control-loop period.
    #[serde(deserialize_with = "de_duration")]
    pub interval: Duration,
    /// Address of the `/metrics` and `/status` endpoint (loopback by default:
    /// the status shows cgroup names).
    pub metrics_listen: String,
    pub promotion: PromotionMode,
    /// What each container competes for: `"usage"` or `"hot_set"`.
    pub demand: DemandMode,
    /// How tierd moves pages itself: `"move_pages"` or `"damos"`.
    pub mover: MoverKind,
    /// Demote cold pages first: containers above target + band lose their
    /// coldest DAMON regions (idle at least `cold_min_age`) through the mover
    /// before `memory.reclaim` (LRU order) takes the rest.
    pub cold_demotion: bool,
    /// Minimum idle age of a region before tierd demotes it itself (doubled
    /// per thrash damping level).
    #[serde(deserialize_with = "de_duration")]
    pub cold_min_age: Duration,
    /// Promote back, with `move_pages(2)`, the pages the kernel promoted
    /// before (known hot: the eBPF probe records each promotion's address)
    /// that are on the lower tier again while their container is under its
    /// target, into free fast-tier memory above `headroom`, and when those
    /// fall short, pages whose hint faults the kernel declined (in use, not
    /// hot by its threshold); the rest of the room waits for the kernel's
    /// next NUMA-balancing pass ([`crate::controller`], `recall.rs`). Needs
    /// the probe.
    pub recall: bool,
    /// Demote cold memory that no managed container holds (the root
    /// cgroup's page cache, cgroups no policy matches; never tierd's own
    /// cgroup) from the fast tier when it needs room, before any container:
    /// MGLRU generations untouched for `unmanaged_min_age` only (policy
    /// `unmanaged.rs`). Needs `demotion` through lru_gen; ignored (said at
    /// start) without it.
    pub demote_unmanaged: bool,
    /// How long an unmanaged page must have gone untouched before
    /// `demote_unmanaged` takes it (MGLRU generations at least this old).
    #[serde(deserialize_with = "de_duration")]
    pub unmanaged_min_age: Duration,
    /// Promotion assist (`promotion = "kernel"`): a container under its
    /// target − band with nothing promoted for it (by the kernel or recall)
    /// for this long, and whose lower-tier pages drew hint faults since it
    /// went under (where the probe counts them by node), is watched by
    /// DAMON, and tierd promotes its hot
    /// lower-tier regions with `move_pages(2)` into free fast-tier memory
    /// above `headroom`; at its band it swaps its own oldest fast-tier
    /// pages for hot lower-tier regions while a quarter band of them is
    /// left (policy `assist.rs`, `ContainerPlan::swap_bytes`). The
    /// kernel promotes a page only at the hint fault after its process's
    /// next NUMA-balancing scan pass, which comes a minute apart once the
    /// scan has backed off. 0 turns it off.
    #[serde(deserialize_with = "de_duration")]
    pub assist_after: Duration,
    /// Pages per `move_pages(2)` call.
    pub mover_batch: usize,
    /// How over-target containers are demoted.
    pub demotion: DemotionMechanism,
    /// Free fast-tier memory kept out of every container's share, for new
    /// allocations and promotions (see [`Config::headroom_bytes`]).
    pub headroom: Headroom,
    /// Value tierd writes to `/sys/kernel/mm/numa/demotion_enabled` at start
    /// (restored at exit). Demotion via `memory.reclaim` needs it true.
    pub demotion_enabled: bool,
    /// Value for `kernel.numa_balancing` at start (restored at exit); `None`
    /// leaves it alone. In `promotion = "kernel"` mode this should be 2 (or 3).
    pub numa_balancing: Option<u32>,
    /// Where tierd journals the original value of every setting it
    /// changes, before changing it ([`crate::journal`]); a journal left by
    /// a tierd that died is restored at the next start.
    pub journal: PathBuf,
    /// cgroup v2 mount point.
    pub cgroup_root: PathBuf,
    /// sysfs and procfs mount points (tests point these at fixture trees).
    pub sysfs_root: PathBuf,
    pub procfs_root: PathBuf,
    /// debugfs mount point (MGLRU's `lru_gen` file).
    pub debugfs_root: PathBuf,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            interval: Duration::from_secs(2),
            metrics_listen: "127.0.0.1:9464".into(),
            promotion: PromotionMode::Kernel,
            demand: DemandMode::Usage,
            mover: MoverKind::MovePages,
            cold_demotion: false,
            cold_min_age: Duration::from_secs(5),
            recall: true,
            demote_unmanaged: true,
            unmanaged_min_age: Duration::from_millis(policy::unmanaged::UNMANAGED_MIN_AGE_MS),
            assist_after: Duration::from_secs(10),
            mover_batch: 1024,
            demotion: DemotionMechanism::Auto,
            headroom: Headroom::Auto,
            demotion_enabled: true,
            numa_balancing: Some(2),
            journal: "/run/tierd/journal.json".into(),
            cgroup_root: cgroupctl::DEFAULT_CGROUP_ROOT.into(),
            sysfs_root: "/sys".into(),
            procfs_root: "/proc".into(),
            debugfs_root: "/sys/kernel/debug".into(),
        }
    }
}

/// Where per-container heat comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HotnessSource {
    /// DAMON when something in the config uses it (`demand = "hot_set"`,
    /// `promotion = "tierd"` or `cold_demotion`), else off; resolved to
    /// one of the two when the config is loaded.
    Auto,
    /// DAMON `vaddr` monitoring of every managed process (heat metrics,
    /// hot-set demand, the movers' choice of regions).
    Damon,
    /// No DAMON.
    Off,
}

/// `[hotness]`: DAMON monitoring. Interval and region defaults are DAMON's
/// (Documentation/admin-guide/mm/damon/usage.rst), except `update_interval`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HotnessConfig {
    pub source: HotnessSource,
    /// DAMON watches only the containers under promotion assist
    /// (`daemon.assist_after`) and those lacking their `local_low`
    /// guarantee: `source = "auto"` with nothing else that needs heat. Set
    /// when the config is loaded.
    #[serde(skip)]
    pub assisted_only: bool,
    /// DAMON sysfs admin directory; default `<daemon.sysfs_root>/kernel/mm/damon/admin`.
    pub damon_root: Option<PathBuf>,
    /// Where tierd records which kdamonds it created (to adopt them after a
    /// restart and never touch anyone else's).
    pub state_file: PathBuf,
    /// DAMON sampling interval of the virtual-address monitor (heat,
    /// promotion assist, guarantees, the `move_pages` mover): one access
    /// check per region. Default 20 ms, four times DAMON's own 5 ms: a page
    /// touched ten times a second is seen accessed in a fifth of 20 ms
    /// windows but a twentieth of 5 ms ones, and the kdamond's page-table
    /// walks cost a quarter (docs/NOTES.md "DAMON at 20 ms samples"). The
    /// DAMOS mover's kdamond has its own, `damos_sample_interval`.
    #[serde(deserialize_with = "de_duration")]
    pub sample_interval: Duration,
    /// DAMON aggregation interval (nr_accesses window) of the same monitor:
    /// 20 samples by default, so `hot_min_accesses` keeps its meaning.
    #[serde(deserialize_with = "de_duration")]
    pub aggr_interval: Duration,
    /// DAMON operations update interval: how soon new mappings are monitored.
    /// DAMON sysfs defaults to 60 s; 1 s lets a starting container's heap be
    /// seen within a cycle.
    #[serde(deserialize_with = "de_duration")]
    pub update_interval: Duration,
    /// DAMON's lower bound on regions per kdamond context.
    pub min_regions: u64,
    /// DAMON's upper bound on regions of the virtual-address monitor's
    /// context, shared by all monitored processes. Default 200 (DAMON's
    /// own is 1000): with the shipped defaults DAMON watches only the one
    /// or two containers under promotion assist or lacking their
    /// guarantee, whose hot ranges 200 regions resolve; the kdamond's
    /// checks and tierd's tried-regions reads (four sysfs files a region)
    /// grow with it: at 1000 the kdamond took ~18 % of a core during
    /// cold-hog's assist, at 200 ~5 % (docs/NOTES.md "DAMON at 20 ms
    /// samples"). Raise it with `source = "damon"` over many containers.
    pub max_regions: u64,
    /// The DAMOS mover's physical-address kdamond (`mover = "damos"`):
    /// sampling interval. Default 5 ms, DAMON's: its cold-first demotion
    /// (`migrate_cold`) ages regions in whole aggregations, and at 20 ms /
    /// 400 ms it found 73 of the 100 MiB of cold pages its VM test demotes
    /// (docs/NOTES.md "DAMON at 20 ms samples").
    #[serde(deserialize_with = "de_duration")]
    pub damos_sample_interval: Duration,
    /// The DAMOS mover's aggregation interval (default 100 ms, DAMON's;
    /// `daemon.cold_min_age` is counted in these for its schemes).
    #[serde(deserialize_with = "de_duration")]
    pub damos_aggr_interval: Duration,
    /// The DAMOS mover's upper bound on regions over all of RAM (default
    /// 1000, DAMON's; it starts with a quarter of them).
    pub damos_max_regions: u64,
    /// A region is hot when DAMON saw it accessed in at least this many
    /// samples of the last aggregation interval (default 2 of 20: one is
    /// noise from merged regions and one-off touches).
    pub hot_min_accesses: u32,
    /// Most processes monitored (largest resident set first); DAMON costs
    /// grow with targets × regions.
    pub max_processes: usize,
    /// Pages whose node is queried (move_pages status) per cycle to split
    /// regions over nodes; spread over all regions.
    pub node_samples: usize,
    /// Where per-container NUMA hint faults come from: `auto` (the eBPF
    /// probe when the kernel allows it, else memory.stat), `ebpf` (the probe
    /// or refuse to start), `memory_stat`.
    pub hint_faults: HintFaultSource,
    /// `CONFIG_NODES_SHIFT` of the running kernel, for the probe (the node id
    /// is the top bits of a folio's flags; not in BTF). Debian: 10.
    pub nodes_shift: u32,
    /// A declined NUMA hint fault that came within this long of the scan
    /// that unmapped its page (the latency the kernel's own hot-page test
    /// measures, read by the probe) marks the page hot, as a kernel
    /// promotion does: recall takes it first and the hot swap trades it
    /// in. 0 turns it off; the default, "250ms", a quarter of the kernel's
    /// default threshold, goes with `limits.hot_swap`: at the kernel's 1 s
    /// a page touched once every 3 s passes a quarter of the time and the
    /// lower tier's tail outnumbers its misplaced hot pages. docs/NOTES.md
    /// "Hot swap".
    #[serde(deserialize_with = "de_duration")]
    pub hot_latency: Duration,
}

/// `[hotness] hint_faults`: defined beside the monitor that reads it.
pub use hotness::hintfaults::HintFaultSource;

impl HotnessConfig {
    /// DAMON attributes of the DAMOS mover's physical-address kdamond.
    pub fn damos_attrs(&self) -> hotness::damon::Attrs {
        hotness::damon::Attrs {
            sample_us: self.damos_sample_interval.as_micros() as u64,
            aggr_us: self.damos_aggr_interval.as_micros() as u64,
            update_us: self.update_interval.as_micros() as u64,
            min_nr_regions: self.min_regions,
            max_nr_regions: self.damos_max_regions,
        }
    }

    /// The monitor's parameters from this section.
    pub fn monitor_params(&self) -> hotness::monitor::MonitorParams {
        hotness::monitor::MonitorParams {
            sample_interval: self.sample_interval,
            aggr_interval: self.aggr_interval,
            update_interval: self.update_interval,
            min_regions: self.min_regions,
            max_regions: self.max_regions,
            hot_min_accesses: self.hot_min_accesses,
            max_processes: self.max_processes,
            node_samples: self.node_samples,
        }
    }
}

impl Default for HotnessConfig {
    fn default() -> Self {
        HotnessConfig {
            source: HotnessSource::Auto,
            assisted_only: false,
            damon_root: None,
            state_file: "/run/tierd/damon.json".into(),
            sample_interval: Duration::from_millis(20),
            aggr_interval: Duration::from_millis(400),
            update_interval: Duration::from_secs(1),
            min_regions: 10,
            max_regions: 200,
            damos_sample_interval: Duration::from_millis(5),
            damos_aggr_interval: Duration::from_millis(100),
            damos_max_regions: 1000,
            hot_min_accesses: hotness::heat::DEFAULT_HOT_MIN_NR_ACCESSES,
            max_processes: 64,
            node_samples: 16384,
            hint_faults: HintFaultSource::Auto,
            nodes_shift: hotness::probe::DEFAULT_NODES_SHIFT,
            hot_latency: Duration::from_millis(250),
        }
    }
}

/// Default of `limits.steady_promote_rate`, bytes per second (docs/NOTES.md
/// "Kernel promotion in a steady state").
pub const STEADY_PROMOTE_RATE: u64 = 4 << 20;

/// `[limits]`: hysteresis band and token-bucket rate limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Per-container demotion rate, bytes per second.
    pub demote_rate: Bytes,
    /// Host-wide demotion rate, bytes per second.
    pub global_demote_rate: Bytes,
    /// Per-container promotion budget, bytes per second.
    pub promote_rate: Bytes,
    /// Host-wide promotion budget, bytes per second.
    pub global_promote_rate: Bytes,
    /// Token bucket depth, in seconds of rate.
    pub burst_s: f64,
    /// Hysteresis band as a percentage of the target (`"5%"`).
    pub band: String,
    /// Smallest band, whatever the target.
    pub band_min: Bytes,
    /// Thrash control: ping-pong window, damping threshold (bytes/s that went
    /// down and came back up) and calm time before damping is lifted.
    #[serde(deserialize_with = "de_duration")]
    pub thrash_window: Duration,
    pub thrash_rate: Bytes,
    #[serde(deserialize_with = "de_duration")]
    pub thrash_settle: Duration,
    /// With `promotion = "kernel"`: the kernel's promotion rate limit
    /// (`kernel.numa_balancing_promote_rate_limit_MBps`, per fast node, in
    /// whole MiB/s) while the plan is steady (no container under its target
    /// for `steady_after`); the original value is written back as soon as
    /// one is. 0: tierd never changes it.
    pub steady_promote_rate: Bytes,
    /// With `promotion = "kernel"`, while the plan is steady: the kernel's
    /// promotion is closed (its rate limit held at 0) until pages that pass
    /// its hot-page test show on the lower tier at this many bytes per
    /// second (`pgpromote_candidate` in /proc/vmstat); then it is held at
    /// `steady_promote_rate` for `steady_after` and closed again
    /// ([`policy::PromoteGate`]). 0: never closed, held at
    /// `steady_promote_rate` for as long as the plan is steady.
    /// docs/NOTES.md "Who moves what in a steady state".
    pub steady_hot_below: Bytes,
    /// How long no container may be under its target before the plan is
    /// steady.
    #[serde(deserialize_with = "de_duration")]
    pub steady_after: Duration,
    /// With `promotion = "kernel"`: the longest NUMA-balancing scan period
    /// (debugfs `sched/numa_balancing/scan_period_max_ms`) while a newly
    /// arrived container is under its target ([`policy::Plan::scan_paced`]),
    /// so its lower-tier pages keep getting hint faults and the kernel keeps
    /// promoting them; the kernel's own value (60 s) is written back after
    /// `promote_scan_window` and at exit. 0 (the default): tierd never
    /// changes it. docs/NOTES.md "NUMA balancing's scan period".
    #[serde(deserialize_with = "de_duration")]
    pub promote_scan_period: Duration,
    /// For how long after a container arrives (or tierd starts) the scan
    /// period is held at `promote_scan_period`, while it is under its
    /// target − band. Longer, and a container whose lower tier is cold (a
    /// skewed tenant's tail) pays for scans that find nothing; 0: never.
    #[serde(deserialize_with = "de_duration")]
    pub promote_scan_window: Duration,
    /// With `promotion = "kernel"`: NUMA balancing's hot-page threshold
    /// (debugfs `sched/numa_balancing/hot_threshold_ms`) while the plan is
    /// not steady (a container under its target, or one lately), set with
    /// the kernel's per-node copy reset to it; the original goes back,
    /// reset the same way, once the plan is steady, and at exit. A lower-tier
    /// page whose hint fault comes this long after its scan is promoted by
    /// the kernel in the faulting task, where tierd's recall would move it
    /// a cycle later, so the fill of a container's share costs tierd less.
    /// An operator's own higher value stays. 0: tierd never changes it.
    /// docs/NOTES.md "Session 61: the hot-page threshold while a share fills".
    #[serde(deserialize_with = "de_duration")]
    pub promote_hot_threshold: Duration,
    /// Inside-band trade (`policy::ContainerPlan::band_trade`): a container
    /// a quarter band or more below its target, inside its band, claims its
    /// known-hot lower-tier pages, and those a quarter band or more above
    /// theirs give the room. Off by default (docs/NOTES.md "The inside-band
    /// trade").
    pub band_trade: bool,
    /// Hot swap (`policy::ContainerPlan::swap_bytes`): a container at its
    /// target (damped or not) with at least a quarter band of known-hot pages
    /// on the lower tier demotes as many of its fast-tier pages idle for a
    /// cycle and recall moves the hot ones into the room (needs lru_gen and
    /// `daemon.recall`; goes with `hotness.hot_latency`), at most once every
    /// `policy::HOT_SWAP_PERIOD_MS` per container. On by default (see
    /// `policy::PolicyParams::hot_swap`); without lru_gen it does nothing.
    pub hot_swap: bool,
    /// How long after an arrival or exit (and tierd's start) the hot swap
    /// runs; "0": always.
    #[serde(deserialize_with = "de_duration")]
    pub hot_swap_window: Duration,
    /// How long past `hot_swap_window`'s close a container that had not
    /// swapped in the 10 s before it may still swap, until its first run of
    /// swaps after the close ends (`policy::PolicyParams::hot_swap_extension_ms`:
    /// NUMA balancing's scan of a settled newcomer can come a minute
    /// later); "0": none.
    #[serde(deserialize_with = "de_duration")]
    pub hot_swap_extension: Duration,
    /// After this many hot swaps in a row that each found idle less than a
    /// quarter of the container's band or `policy::HOT_SWAP_MIN_IDLE_FRACTION`
    /// of its fast-tier bytes (its pages there all touched within the idle
    /// test, bar chance), the container swaps no more until the
    /// next arrival or exit (`policy::PolicyParams::hot_swap_stop_after`);
    /// 0: never stop.
    pub hot_swap_stop_after: u32,
    /// The least time the hot swap's demotion half finds a fast-tier page
    /// untouched before it demotes it: the swap ages the container, and
    /// when the pages untouched since its last aging (a cycle) are fewer
    /// than it asks, waits this long and ages it again, then demotes the
    /// pages untouched in between, oldest first
    /// (`cgroupctl::LruGen::evict_idle`). A cache touching every page it
    /// holds on DRAM within a second or two has next to nothing idle for a
    /// cycle, and the swap cannot trade in its hot pages below; its pages
    /// untouched for half a second are the ones it touches less than
    /// about twice a second, and a known-hot page below faulted within
    /// `hotness.hot_latency` (250 ms) of a scan: twice the idle test's
    /// rate, so a swap does not trade pages at the edge of its share for
    /// each other. "0": only the pages idle for a cycle (MGLRU generations
    /// 1.5 s old, the rule until session 84). Default 500 ms (250 ms in
    /// session 84), cut to half of `daemon.interval` when that
    /// is shorter; a value set longer than half the interval is an error
    /// (the cycle waits).
    #[serde(deserialize_with = "de_duration")]
    pub hot_swap_idle: Duration,
    /// Arrival assist (`policy::PolicyParams::arrival_assist`): within
    /// `hot_swap_window` of an arrival or exit, a container inside its band
    /// but a quarter band or more under its target is assisted (DAMON, then
    /// the within-share swap) like one under its band. Needs what the
    /// assist needs (`hotness.source = "damon"`, the move_pages mover,
    /// `daemon.assist_after` > 0).
    pub arrival_assist: bool,
    /// For how long after a container arrives tierd lets the kernel make
    /// room for it: while its usage grows by more than `band_min` a cycle,
    /// the containers already there that hold more of the fast tier than
    /// they would keep once it has its share lose their `memory.low`, so
    /// kswapd, woken by its allocations, demotes them and the allocations
    /// stay on the fast tier instead of spilling to the lower tier, to be
    /// promoted back page by page (`policy::Plan::filling`); and a cycle
    /// starts every quarter interval (at once when the last took longer),
    /// each demoting to the headroom what the allocation took. Targets do
    /// not change. "0": off. docs/NOTES.md "Session 63", "Session 72".
    #[serde(deserialize_with = "de_duration")]
    pub arrival_window: Duration,
    /// Arrival lookahead (`policy::PolicyParams::arrival_lookahead`):
    /// while a newcomer fills its share under its target, tierd also makes
    /// room for its next cycle's allocation (its growth since the last
    /// cycle, up to its target), so the allocation lands on the fast tier
    /// instead of spilling to the lower tier to be promoted back. On by
    /// default (docs/NOTES.md "Session 69", "Session 70").
    pub arrival_lookahead: bool,
    /// `memory.min` (= usage) for a container at or under its target while
    /// another holds more than its own without protection and no newcomer
    /// fills its share (`policy::PolicyParams::share_min`), so kswapd takes
    /// that excess and not pages the protected one would promote back.
    /// With the excess all hot the kernel then gives the fast node up
    /// (`tierd_node_unreclaimable`) while tierd runs; false keeps
    /// `memory.min` for guarantees only. On by default (docs/NOTES.md
    /// "Session 86").
    pub share_min: bool,
    /// The least time between the two agings of a demotion through MGLRU's
    /// eviction command (`daemon.demotion`): when a container's pages all
    /// sit in its two youngest generations, tierd ages it, waits this long,
    /// ages it again and demotes what was untouched in between. Back to
    /// back (0) that window is the length of a page-table walk, and pages
    /// at the edge of a cache's hottest tenth go with the cold ones
    /// ([`policy::PolicyParams::aging_gap_ms`]). Not while a newcomer fills
    /// its share ([`policy::ContainerPlan::aging_gap_ms`]): the cycles that make
    /// room for its allocations do not wait (always on, the gap let
    /// cold-hog's newcomer spill to the lower tier; docs/NOTES.md "Session
    /// 76"), nor for a container whose demotion under it takes next to
    /// nothing (`aging_gap_lift_after`). Default 500 ms, cut to half of `daemon.interval` when that is
    /// shorter; a value set longer than half the interval is an error (the
    /// cycle waits).
    #[serde(deserialize_with = "de_duration")]
    pub aging_gap: Duration,
    /// After this many cycles in a row whose demotion of a container took
    /// next to nothing under `aging_gap` (a cache touching every DRAM page
    /// within it), that container's agings run back to back until it is
    /// back within its band (`policy::PolicyParams::aging_gap_lift_after`);
    /// 0: never.
    pub aging_gap_lift_after: u32,
}

/// Default of `limits.promote_scan_period`: off. 2 s put newcomers' hot
/// pages on DRAM sooner and better but cost tiering CPU in the demo
/// (docs/NOTES.md "NUMA balancing's scan period", "The newcomer's scan
/// period at 2 s, against the default, on a faster machine").
pub const PROMOTE_SCAN_PERIOD: Duration = Duration::ZERO;

/// Default of `limits.promote_hot_threshold`: 0, the kernel's own threshold
/// left alone. 2 s (the default until session 67) had the kernel promote
/// more pages in the faulting tasks while a share filled and cost the
/// tenants throughput: in the demo at 0, identical-cache went from three
/// rows behind kernel tiering to none (docs/NOTES.md "Session 67: the
/// kernel's hot threshold left alone").
pub const PROMOTE_HOT_THRESHOLD: Duration = Duration::ZERO;

/// Default of `limits.hot_swap_idle`: half a second, twice the probe's hot
/// latency. A quarter second (session 84) traded as well at a fifth more
/// tiering CPU (docs/NOTES.md "Session 85").
pub const HOT_SWAP_IDLE: Duration = Duration::from_millis(500);

impl Default for LimitsConfig {
    fn default() -> Self {
        let p = PolicyParams::default();
        LimitsConfig {
            demote_rate: Bytes(p.container_demote_bytes_per_s),
            global_demote_rate: Bytes(p.global_demote_bytes_per_s),
            promote_rate: Bytes(p.container_promote_bytes_per_s),
            global_promote_rate: Bytes(p.global_promote_bytes_per_s),
            burst_s: p.burst_s,
            band: format!("{}%", p.band_fraction * 100.0),
            band_min: Bytes(p.band_min_bytes),
            thrash_window: Duration::from_millis(p.thrash.window_ms),
            thrash_rate: Bytes(p.thrash.pingpong_bytes_per_s),
            thrash_settle: Duration::from_millis(p.thrash.settle_ms),
            steady_promote_rate: Bytes(STEADY_PROMOTE_RATE),
            steady_hot_below: Bytes(p.hot_below_bytes_per_s),
            steady_after: Duration::from_millis(p.steady_ms),
            promote_scan_period: PROMOTE_SCAN_PERIOD,
            promote_scan_window: Duration::from_millis(p.scan_pace_ms),
            promote_hot_threshold: PROMOTE_HOT_THRESHOLD,
            band_trade: p.band_trade,
            hot_swap: p.hot_swap,
            hot_swap_window: Duration::from_millis(p.hot_swap_window_ms),
            hot_swap_extension: Duration::from_millis(p.hot_swap_extension_ms),
            hot_swap_stop_after: p.hot_swap_stop_after,
            hot_swap_idle: HOT_SWAP_IDLE,
            arrival_assist: p.arrival_assist,
            arrival_window: Duration::from_millis(p.arrival_window_ms),
            arrival_lookahead: p.arrival_lookahead,
            share_min: p.share_min,
            aging_gap: Duration::from_millis(p.aging_gap_ms),
            aging_gap_lift_after: p.aging_gap_lift_after,
        }
    }
}

/// One `[[policy]]` entry: which cgroups it covers and their share rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    /// Name used in logs and metrics; defaults to the pattern.
    pub name: Option<String>,
    /// Glob over cgroup paths relative to the cgroup root, e.g.
    /// `tenants.slice/*` or `kubepods.slice/**/pod*`; `*` does not cross `/`.
    #[serde(rename = "match")]
    pub pattern: String,
    #[serde(default = "zero_share")]
    pub local_low: ShareSpec,
    #[serde(default = "full_share")]
    pub local_high: ShareSpec,
    #[serde(default = "default_weight")]
    pub weight: u32,
    #[serde(default)]
    pub opt_out: bool,
    /// Demote the container's file pages (page cache) before its anonymous
    /// pages: each demotion first asks `memory.reclaim` with
    /// `swappiness=0` (file LRU only; cgroup-v2.rst "memory.reclaim",
    /// Linux 6.12+ here), and only what that could not free comes from the
    /// anonymous pages in LRU order. Page cache then sits on the lower tier
    /// first, as Vistara places it. Default false.
    #[serde(default)]
    pub file_first: bool,
    /// TMO-style offload of the container's cold memory, paced by its PSI
    /// memory pressure (`offload = { pressure = "0.1%" }`); absent: none.
    #[serde(default)]
    pub offload: Option<OffloadSpec>,
    /// How the container's pages are placed: `tiered` (the default: its
    /// hot pages on the fast tier, by share) or `interleave` (a
    /// bandwidth-bound service: its pages split over the tiers in the
    /// ratio of `interleave_weights`, new allocations through
    /// `MPOL_WEIGHTED_INTERLEAVE` when launched by `tierd exec`).
    #[serde(default)]
    pub placement: Placement,
    /// The weighted-interleave weights of `placement = "interleave"`:
    /// `"auto"` (the default: the kernel's own from HMAT/CDAT bandwidths
    /// where it has `weighted_interleave/auto`, else tierd's from the
    /// nodes' HMAT read bandwidths) or `{ fast = 3, lower = 1 }`. The
    /// weights are host-wide: every interleave policy must give the same.
    #[serde(default)]
    pub interleave_weights: Option<InterleaveWeights>,
}

/// `placement` of a `[[policy]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    #[default]
    Tiered,
    Interleave,
}

/// `interleave_weights` of a `[[policy]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum InterleaveWeights {
    /// `"auto"`.
    Auto(String),
    /// Weight of each fast-tier node and of each lower-tier node, 1–255
    /// (the kernel's range for `weighted_interleave/node<N>`).
    Tiers { fast: u8, lower: u8 },
}

/// `offload = { pressure = "0.1%", step = "1%" }` of a `[[policy]]`
/// (docs/DESIGN.md "Policy semantics", offload).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffloadSpec {
    /// Threshold of the container's `memory.pressure` `some avg10`, as a
    /// percentage: offload runs below it and stops at it.
    pub pressure: String,
    /// Share of the container's `memory.current` reclaimed per interval
    /// at zero pressure (default 1%, at most 10%).
    #[serde(default = "default_offload_step")]
    pub step: String,
    /// Only pages untouched for about this long leave (default 30 s, at
    /// least 3 s): the page-age guard that keeps warm pages where they are.
    #[serde(default = "default_offload_min_age", deserialize_with = "de_duration")]
    pub min_age: Duration,
}

fn default_offload_min_age() -> Duration {
    Duration::from_secs(30)
}

fn default_offload_step() -> String {
    "1%".into()
}

/// `"0.1%"` → 0.1; errors name what to write.
fn parse_percent(s: &str, max: f64) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .strip_suffix('%')
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| format!("{s:?} is not a percentage (write e.g. \"0.1%\")"))?;
    if !(v > 0.0 && v <= max) {
        return Err(format!("{s:?} must be above 0% and at most {max}%"));
    }
    Ok(v)
}

impl OffloadSpec {
    /// The policy crate's view; errors as [`parse_percent`]'s, for the key
    /// the caller names.
    fn resolve(&self) -> Result<policy::Offload, (&'static str, String)> {
        Ok(policy::Offload {
            pressure_pct: parse_percent(&self.pressure, 100.0).map_err(|e| ("pressure", e))?,
            step_fraction: parse_percent(&self.step, 10.0).map_err(|e| ("step", e))? / 100.0,
            min_age_ms: if self.min_age >= Duration::from_secs(3) {
                self.min_age.as_millis() as u64
            } else {
                return Err((
                    "min_age",
                    format!("{:?} is too short; at least 3s", self.min_age),
                ));
            },
        })
    }
}

fn zero_share() -> ShareSpec {
    ShareSpec::Bytes(0)
}
fn full_share() -> ShareSpec {
    ShareSpec::Percent(100.0)
}
fn default_weight() -> u32 {
    100
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    daemon: DaemonConfig,
    #[serde(default)]
    limits: LimitsConfig,
    #[serde(default)]
    hotness: HotnessConfig,
    #[serde(default)]
    policy: Vec<PolicyEntry>,
}

/// A loaded, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from (or `<embedded>`), for error messages.
    pub source: PathBuf,
    pub daemon: DaemonConfig,
    pub limits: LimitsConfig,
    pub hotness: HotnessConfig,
    pub policies: Vec<PolicyEntry>,
    matchers: Vec<GlobMatcher>,
    band_fraction: f64,
    listen: SocketAddr,
    /// The kernel's free-memory reserve of the fast nodes, bytes (0 until
    /// [`Config::set_fast_reserve`]).
    fast_reserve_bytes: u64,
    /// Share of an interleaved container's pages the weights put on the
    /// fast tier (Σ fast weights / Σ weights), once the daemon applied
    /// them ([`Config::set_interleave_split`]).
    interleave_fast_fraction: Option<f64>,
}

impl Config {
    /// Reads and validates `path`.
    ///
    /// Errors: [`ConfigError::Read`] if the file cannot be read,
    /// [`ConfigError::Syntax`] for TOML or type errors (unknown keys included),
    /// [`ConfigError::Permissions`] if the file is group- or world-writable,
    /// [`ConfigError::Invalid`] naming the key whose value is unacceptable.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        use std::os::unix::fs::PermissionsExt;
        let read_err = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let mode = std::fs::metadata(path)
            .map_err(read_err)?
            .permissions()
            .mode();
        if mode & 0o022 != 0 {
            return Err(ConfigError::Permissions {
                path: path.to_owned(),
                mode: mode & 0o7777,
            });
        }
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        Config::parse(&text, path)
    }

    /// The config a reload (SIGHUP, `tierctl reload`) of `new` gives: the
    /// policies, `[limits]`, `daemon.interval` and `daemon.headroom` come from
    /// `new`; every other key keeps its running value, since the kdamonds,
    /// the probe, the host settings and the listener were set up from it.
    /// Also returns what in `new` differs there and waits for a restart:
    /// `"[daemon]"`, `"[hotness]"`, and `"[[policy]] (none ↔ some)"` when the
    /// policy list becomes empty or stops being empty (that switches
    /// observe-only mode, decided at start).
    pub fn reloaded(&self, new: Config) -> (Config, Vec<&'static str>) {
        let mut restart = Vec::new();
        // [daemon] without its reloadable keys.
        let fixed = |d: &DaemonConfig| DaemonConfig {
            interval: Duration::ZERO,
            headroom: Headroom::Auto,
            ..d.clone()
        };
        if fixed(&self.daemon) != fixed(&new.daemon) {
            restart.push("[daemon]");
        }
        if self.hotness != new.hotness {
            restart.push("[hotness]");
        }
        let daemon = DaemonConfig {
            interval: new.daemon.interval,
            headroom: new.daemon.headroom,
            ..self.daemon.clone()
        };
        let merged = if self.policies.is_empty() != new.policies.is_empty() {
            restart.push("[[policy]] (none ↔ some)");
            Config {
                daemon,
                limits: new.limits,
                band_fraction: new.band_fraction,
                ..self.clone()
            }
        } else {
            Config {
                daemon,
                hotness: self.hotness.clone(),
                listen: self.listen,
                ..new
            }
        };
        (merged, restart)
    }

    /// Parses and validates TOML text; `path` is used in error messages only.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_owned(),
            message: e.to_string().trim_end().replace('\n', "\n  "),
        })?;
        Config::validate(raw, path)
    }

    fn validate(mut raw: RawConfig, path: &Path) -> Result<Config, ConfigError> {
        let bad = |key: &str, reason: String| ConfigError::Invalid {
            path: path.to_owned(),
            key: key.to_owned(),
            reason,
        };
        if raw.hotness.source == HotnessSource::Auto {
            let d = &raw.daemon;
            let used = d.demand == DemandMode::HotSet
                || d.promotion == PromotionMode::Tierd
                || d.cold_demotion;
            // The promotion assist needs DAMON only for the containers it
            // assists, and only while it does.
            let assist = d.promotion == PromotionMode::Kernel && !d.assist_after.is_zero();
            raw.hotness.source = if used || assist {
                HotnessSource::Damon
            } else {
                HotnessSource::Off
            };
            raw.hotness.assisted_only = !used && assist;
        }
        let d = &raw.daemon;
        if d.interval < Duration::from_millis(100) {
            return Err(bad(
                "daemon.interval",
                format!(
                    "{:?} is shorter than 100ms; sampling memory.numa_stat that often costs more than it tells",
                    d.interval
                ),
            ));
        }
        if raw.limits.aging_gap > d.interval / 2
            && raw.limits.aging_gap != LimitsConfig::default().aging_gap
        {
            return Err(bad(
                "limits.aging_gap",
                format!(
                    "{:?} is longer than half of daemon.interval ({:?}); a demotion's cycle waits that long",
                    raw.limits.aging_gap, d.interval
                ),
            ));
        }
        if raw.limits.hot_swap_idle > d.interval / 2 && raw.limits.hot_swap_idle != HOT_SWAP_IDLE {
            return Err(bad(
                "limits.hot_swap_idle",
                format!(
                    "{:?} is longer than half of daemon.interval ({:?}); a hot swap's cycle waits that long",
                    raw.limits.hot_swap_idle, d.interval
                ),
            ));
        }
        if d.demote_unmanaged && d.unmanaged_min_age < Duration::from_secs(1) {
            return Err(bad(
                "daemon.unmanaged_min_age",
                format!(
                    "{:?} is shorter than 1s: every page of the host's services but the two \
                     youngest MGLRU generations would count as cold",
                    d.unmanaged_min_age
                ),
            ));
        }
        let listen: SocketAddr = d.metrics_listen.parse().map_err(|e| {
            bad(
                "daemon.metrics_listen",
                format!("{:?} is not an address:port ({e})", d.metrics_listen),
            )
        })?;
        if let Some(nb) = d.numa_balancing {
            if nb > 3 {
                return Err(bad(
                    "daemon.numa_balancing",
                    format!("{nb} is not a kernel.numa_balancing mode (0, 1, 2 or 3)"),
                ));
            }
            if d.promotion == PromotionMode::Kernel && nb & 2 == 0 {
                return Err(bad(
                    "daemon.numa_balancing",
                    format!(
                        "promotion = \"kernel\" needs NUMA balancing memory-tiering mode (2 or 3), not {nb}"
                    ),
                ));
            }
        }
        if d.demand == DemandMode::HotSet && raw.hotness.source == HotnessSource::Off {
            return Err(bad(
                "daemon.demand",
                "\"hot_set\" takes each container's hot set from DAMON: set hotness.source = \"damon\" (or use demand = \"usage\")".into(),
            ));
        }
        if d.promotion == PromotionMode::Tierd {
            if raw.hotness.source == HotnessSource::Off {
                return Err(bad(
                    "daemon.promotion",
                    "\"tierd\" promotes the hottest lower-tier pages and needs heat: set hotness.source = \"damon\" (or use promotion = \"kernel\")".into(),
                ));
            }
            if d.numa_balancing.is_some_and(|nb| nb & 1 == 1) {
                return Err(bad(
                    "daemon.numa_balancing",
                    "with promotion = \"tierd\" it must be 0 (or 2, turned to 0): mode 1 migrates lower-tier pages to the faulting CPU's node, which is kernel promotion in all but name".into(),
                ));
            }
        }
        if d.mover_batch == 0 || d.mover_batch > 65536 {
            return Err(bad(
                "daemon.mover_batch",
                format!(
                    "{} must be in 1..=65536 pages per move_pages call",
                    d.mover_batch
                ),
            ));
        }
        let h = &raw.hotness;
        // Each kdamond's intervals: the virtual-address monitor's and the
        // DAMOS mover's.
        for (prefix, sample, aggr, why) in [
            (
                "",
                h.sample_interval,
                h.aggr_interval,
                "each cycle reads one aggregation",
            ),
            (
                "damos_",
                h.damos_sample_interval,
                h.damos_aggr_interval,
                "each cycle re-arms the DAMOS quotas",
            ),
        ] {
            let key = format!("hotness.{prefix}aggr_interval");
            if sample.is_zero() || aggr < sample {
                return Err(bad(
                    &key,
                    format!(
                        "{aggr:?} must be at least hotness.{prefix}sample_interval ({sample:?}), which must be non-zero"
                    ),
                ));
            }
            if aggr >= d.interval {
                return Err(bad(
                    &key,
                    format!(
                        "{aggr:?} must be shorter than daemon.interval ({:?}): {why}",
                        d.interval
                    ),
                ));
            }
        }
        if !(1..=16).contains(&h.nodes_shift) {
            return Err(bad(
                "hotness.nodes_shift",
                format!(
                    "{} must be CONFIG_NODES_SHIFT of the running kernel, 1..=16 (Debian: 10; see /boot/config-$(uname -r))",
                    h.nodes_shift
                ),
            ));
        }
        if h.min_regions < 3 || h.max_regions < h.min_regions {
            return Err(bad(
                "hotness.max_regions",
                format!(
                    "min_regions {} must be ≥ 3 (DAMON vaddr starts with 3 regions) and ≤ max_regions {}",
                    h.min_regions, h.max_regions
                ),
            ));
        }
        if h.damos_max_regions < h.min_regions {
            return Err(bad(
                "hotness.damos_max_regions",
                format!(
                    "{} must be at least hotness.min_regions ({})",
                    h.damos_max_regions, h.min_regions
                ),
            ));
        }
        let max_acc = (h.aggr_interval.as_micros() / h.sample_interval.as_micros().max(1)) as u32;
        if h.hot_min_accesses == 0 || h.hot_min_accesses > max_acc {
            return Err(bad(
                "hotness.hot_min_accesses",
                format!(
                    "{} must be in 1..={max_acc} (samples per aggregation interval)",
                    h.hot_min_accesses
                ),
            ));
        }
        if h.max_processes == 0 {
            return Err(bad("hotness.max_processes", "must be at least 1".into()));
        }
        let l = &raw.limits;
        let band_fraction = match parse_share(&l.band) {
            Ok(ShareSpec::Percent(p)) if p < 50.0 => p / 100.0,
            Ok(_) => {
                return Err(bad(
                    "limits.band",
                    format!("{:?} must be a percentage below 50%, e.g. \"5%\"", l.band),
                ))
            }
            Err(e) => return Err(bad("limits.band", e)),
        };
        if l.thrash_window < Duration::from_secs(1) {
            return Err(bad(
                "limits.thrash_window",
                format!("{:?} must be at least 1s", l.thrash_window),
            ));
        }
        if !(l.burst_s > 0.0 && l.burst_s <= 600.0) {
            return Err(bad(
                "limits.burst_s",
                format!("{} must be in (0, 600] seconds", l.burst_s),
            ));
        }
        for (key, v) in [
            ("limits.demote_rate", l.demote_rate),
            ("limits.global_demote_rate", l.global_demote_rate),
        ] {
            if v.0 == 0 {
                return Err(bad(
                    key,
                    "a rate of 0 would never demote; set at least 1MiB".into(),
                ));
            }
        }
        let steady = l.steady_promote_rate.0;
        if steady > 0 && steady < 1 << 20 {
            return Err(bad(
                "limits.steady_promote_rate",
                format!(
                    "{steady} bytes/s is below the kernel's unit (1 MiB/s); set 0 (tierd leaves the kernel's limit alone) or at least 1MiB"
                ),
            ));
        }
        let scan = l.promote_scan_period;
        if !scan.is_zero() && scan < Duration::from_millis(100) {
            return Err(bad(
                "limits.promote_scan_period",
                format!(
                    "{scan:?} would have NUMA balancing rescan every task's memory nearly all the time; set 0 (tierd leaves the kernel's scan period alone) or at least 100ms"
                ),
            ));
        }
        let hot = l.promote_hot_threshold;
        if !hot.is_zero() && !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&hot)
        {
            return Err(bad(
                "limits.promote_hot_threshold",
                format!(
                    "{hot:?} is outside 100ms..60s (the kernel's default is 1s; a fault that late after its scan says little about the page); set 0 (tierd leaves the kernel's threshold alone) or a value in that range"
                ),
            ));
        }
        let mut matchers = Vec::new();
        // The first interleave policy and its weights (host-wide: the others
        // must agree).
        let mut interleave: Option<(usize, InterleaveWeights)> = None;
        for (i, p) in raw.policy.iter().enumerate() {
            let key = |k: &str| format!("policy[{i}].{k}");
            // `*` stays within one path component, `**` crosses them, as in
            // systemd unit globs and shell paths.
            let glob = GlobBuilder::new(p.pattern.trim_matches('/'))
                .literal_separator(true)
                .build()
                .map_err(|e| {
                    bad(
                        &key("match"),
                        format!("{:?} is not a valid glob: {e}", p.pattern),
                    )
                })?;
            matchers.push(glob.compile_matcher());
            if p.weight == 0 || p.weight > 10_000 {
                return Err(bad(
                    &key("weight"),
                    format!("{} must be between 1 and 10000", p.weight),
                ));
            }
            match (&p.placement, &p.interleave_weights) {
                (Placement::Tiered, Some(_)) => {
                    return Err(bad(
                        &key("interleave_weights"),
                        "is only for placement = \"interleave\"".into(),
                    ))
                }
                (Placement::Interleave, w) => {
                    if p.opt_out || p.offload.is_some() || p.file_first {
                        return Err(bad(
                            &key("placement"),
                            "\"interleave\" splits the container over the tiers by weight; \
                             it does not combine with opt_out, offload or file_first"
                                .into(),
                        ));
                    }
                    if p.local_low != ShareSpec::Bytes(0)
                        || p.local_high != ShareSpec::Percent(100.0)
                    {
                        return Err(bad(
                            &key("placement"),
                            "with \"interleave\" the weights set the container's fast-tier share; \
                             remove local_low and local_high"
                                .into(),
                        ));
                    }
                    match w {
                        Some(InterleaveWeights::Auto(a)) if a != "auto" => {
                            return Err(bad(
                                &key("interleave_weights"),
                                format!("{a:?}: write \"auto\" or {{ fast = 3, lower = 1 }}"),
                            ))
                        }
                        Some(InterleaveWeights::Tiers { fast, lower })
                            if *fast == 0 || *lower == 0 =>
                        {
                            return Err(bad(
                                &key("interleave_weights"),
                                "weights are 1 to 255 (the kernel's weighted_interleave range)"
                                    .into(),
                            ))
                        }
                        _ => {}
                    }
                    let w = w.clone().unwrap_or(InterleaveWeights::Auto("auto".into()));
                    match &interleave {
                        Some((first, other)) if *other != w => {
                            return Err(bad(
                                &key("interleave_weights"),
                                format!(
                                    "differs from policy[{first}]'s: the weights are host-wide \
                                     (/sys/kernel/mm/mempolicy/weighted_interleave), so every \
                                     interleave policy must give the same"
                                ),
                            ))
                        }
                        Some(_) => {}
                        None => interleave = Some((i, w)),
                    }
                }
                (Placement::Tiered, None) => {}
            }
            if let Some(o) = &p.offload {
                if p.opt_out {
                    return Err(bad(
                        &key("offload"),
                        "has no effect with opt_out = true (an opted-out container is never \
                         reclaimed); remove one of them"
                            .into(),
                    ));
                }
                o.resolve()
                    .map_err(|(k, e)| bad(&key(&format!("offload.{k}")), e))?;
            }
            if p.file_first && p.opt_out {
                return Err(bad(
                    &key("file_first"),
                    "has no effect with opt_out = true (an opted-out container is never demoted); \
                     remove one of them"
                        .into(),
                ));
            }
            match (p.local_low, p.local_high) {
                (ShareSpec::Bytes(lo), ShareSpec::Bytes(hi)) if lo > hi => {
                    return Err(bad(
                        &key("local_low"),
                        format!("{} is above local_high {}", Bytes(lo), Bytes(hi)),
                    ))
                }
                (ShareSpec::Percent(lo), ShareSpec::Percent(hi)) if lo > hi => {
                    return Err(bad(
                        &key("local_low"),
                        format!("{lo}% is above local_high {hi}%"),
                    ))
                }
                _ => {}
            }
        }
        Ok(Config {
            source: path.to_owned(),
            daemon: raw.daemon,
            limits: raw.limits,
            hotness: raw.hotness,
            policies: raw.policy,
            matchers,
            band_fraction,
            listen,
            fast_reserve_bytes: 0,
            interleave_fast_fraction: None,
        })
    }

    /// The weights of the interleave policies (all the same, validated),
    /// or None when no policy interleaves.
    pub fn interleave_weights(&self) -> Option<InterleaveWeights> {
        self.policies
            .iter()
            .find(|p| p.placement == Placement::Interleave)
            .map(|p| {
                p.interleave_weights
                    .clone()
                    .unwrap_or(InterleaveWeights::Auto("auto".into()))
            })
    }

    /// Records the share of an interleaved container's pages the applied
    /// weights put on the fast tier (0..1): its target.
    pub fn set_interleave_split(&mut self, fast_fraction: f64) {
        self.interleave_fast_fraction = Some(fast_fraction.clamp(0.0, 1.0));
    }

    /// See [`Config::set_interleave_split`].
    pub fn interleave_split(&self) -> Option<f64> {
        self.interleave_fast_fraction
    }

    /// Records the kernel's free-memory reserve of the fast nodes (zone
    /// `high`/`promo` watermarks summed, bytes), which `headroom = "auto"`
    /// follows.
    pub fn set_fast_reserve(&mut self, bytes: u64) {
        self.fast_reserve_bytes = bytes;
    }

    /// The headroom in bytes: as written, or for `"auto"` the larger of
    /// [`MIN_AUTO_HEADROOM`] and the fast nodes' reserve (below the
    /// reserve kswapd demotes in LRU order before the targets are met).
    pub fn headroom_bytes(&self) -> u64 {
        match self.daemon.headroom {
            Headroom::Bytes(b) => b,
            Headroom::Auto => MIN_AUTO_HEADROOM.max(self.fast_reserve_bytes),
        }
    }

    /// The metrics endpoint address.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// Index of the first `[[policy]]` whose glob matches `cgroup` (a path
    /// relative to the cgroup root, no leading slash). First match wins, as in a
    /// firewall rule list.
    pub fn match_policy(&self, cgroup: &str) -> Option<usize> {
        self.matchers.iter().position(|m| m.is_match(cgroup))
    }

    /// The directories (relative to the cgroup root, no slashes at either
    /// end; `""` is the root) under which a `[[policy]]` can match a cgroup:
    /// each pattern's literal part up to its last `/` before the first glob
    /// character (`tenants.slice/*` → `tenants.slice`,
    /// `kubepods.slice/**/pod*` → `kubepods.slice`, `*` → `""`). Sorted, no
    /// duplicates. A cgroup created in one of them or below is a possible
    /// arrival (`crate::arrivals`).
    pub fn match_dirs(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .policies
            .iter()
            .map(|p| {
                let pat = p.pattern.trim_start_matches('/');
                let literal = &pat[..pat.find(['*', '?', '[', '{', '\\']).unwrap_or(pat.len())];
                literal
                    .rfind('/')
                    .map_or("", |i| &literal[..i])
                    .trim_end_matches('/')
                    .to_owned()
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The policy crate's view of entry `i`.
    pub fn container_policy(&self, i: usize) -> ContainerPolicy {
        let p = &self.policies[i];
        // An interleaved container is held at the weights' split, both ways:
        // demoted above it, its lack promoted as a guarantee's.
        let (low, high) = match (p.placement, self.interleave_fast_fraction) {
            (Placement::Interleave, Some(f)) => (Share::Fraction(f), Share::Fraction(f)),
            _ => (p.local_low.to_share(), p.local_high.to_share()),
        };
        ContainerPolicy {
            local_low: low,
            local_high: high,
            weight: p.weight,
            opt_out: p.opt_out,
            // Validated at load: an invalid spec never reaches here.
            offload: p.offload.as_ref().and_then(|o| o.resolve().ok()),
        }
    }

    /// The DAMON sysfs admin directory in use.
    pub fn damon_root(&self) -> PathBuf {
        self.hotness
            .damon_root
            .clone()
            .unwrap_or_else(|| self.daemon.sysfs_root.join("kernel/mm/damon/admin"))
    }

    /// Solver tunables from `[daemon]` and `[limits]`.
    pub fn policy_params(&self) -> PolicyParams {
        self.policy_params_for(self.daemon.promotion)
    }

    /// Solver tunables with `promotion` in effect instead of
    /// `daemon.promotion` (`promotion = "tierd"` falls back to the kernel's
    /// promotion while DAMON is unavailable: [`crate::controller::Controller::promotion`]).
    pub fn policy_params_for(&self, promotion: PromotionMode) -> PolicyParams {
        let l = &self.limits;
        PolicyParams {
            demand: match self.daemon.demand {
                DemandMode::Usage => policy::DemandSource::Usage,
                DemandMode::HotSet => policy::DemandSource::HotSet,
            },
            headroom_bytes: self.headroom_bytes(),
            band_fraction: self.band_fraction,
            band_min_bytes: l.band_min.0,
            container_demote_bytes_per_s: l.demote_rate.0,
            global_demote_bytes_per_s: l.global_demote_rate.0,
            container_promote_bytes_per_s: l.promote_rate.0,
            global_promote_bytes_per_s: l.global_promote_rate.0,
            burst_s: l.burst_s,
            thrash: policy::ThrashParams {
                window_ms: l.thrash_window.as_millis() as u64,
                pingpong_bytes_per_s: l.thrash_rate.0,
                settle_ms: l.thrash_settle.as_millis() as u64,
                max_level: 4,
            },
            need_window_ms: 10_000,
            tierd_promotes: promotion == PromotionMode::Tierd,
            steady_ms: l.steady_after.as_millis() as u64,
            hot_below_bytes_per_s: if l.steady_promote_rate.0 == 0 {
                // tierd leaves the kernel's limit alone: nothing to close.
                0
            } else {
                l.steady_hot_below.0
            },
            // The scan period is the kernel's to change only with its promotion.
            scan_pace_ms: if promotion == PromotionMode::Kernel && !l.promote_scan_period.is_zero()
            {
                l.promote_scan_window.as_millis() as u64
            } else {
                0
            },
            // Assisting needs DAMON's regions and the move_pages mover.
            assist_after_ms: if self.hotness.source == HotnessSource::Damon
                && self.daemon.mover == MoverKind::MovePages
            {
                self.daemon.assist_after.as_millis() as u64
            } else {
                0
            },
            band_trade: l.band_trade,
            hot_swap: l.hot_swap && self.daemon.recall,
            hot_swap_window_ms: l.hot_swap_window.as_millis() as u64,
            hot_swap_extension_ms: l.hot_swap_extension.as_millis() as u64,
            hot_swap_stop_after: l.hot_swap_stop_after,
            arrival_assist: l.arrival_assist,
            arrival_window_ms: l.arrival_window.as_millis() as u64,
            arrival_lookahead: l.arrival_lookahead,
            share_min: l.share_min,
            aging_gap_ms: l.aging_gap.min(self.daemon.interval / 2).as_millis() as u64,
            aging_gap_lift_after: l.aging_gap_lift_after,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The directories where a policy can match a new cgroup: each
    /// pattern's literal part up to its last `/` before a glob character.
    #[test]
    fn match_dirs_are_the_literal_directories_of_the_patterns() {
        let c = Config::parse(
            "[[policy]]\nmatch = \"tenants.slice/*\"\n\
             [[policy]]\nmatch = \"kubepods.slice/**/pod*\"\n\
             [[policy]]\nmatch = \"tenants.slice/web\"\n\
             [[policy]]\nmatch = \"batch-*.slice\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(c.match_dirs(), ["", "kubepods.slice", "tenants.slice"]);
    }

    /// The commented example shipped in `config/tierd.toml` loads, and says
    /// what the defaults are.
    #[test]
    fn shipped_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/tierd.toml");
        let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let d = DaemonConfig::default();
        assert_eq!(c.daemon.mover, d.mover);
        assert_eq!(c.daemon.headroom, d.headroom);
        assert_eq!(c.daemon.mover_batch, d.mover_batch);
        let (h, hd) = (&c.hotness, HotnessConfig::default());
        assert_eq!(
            (h.sample_interval, h.aggr_interval, h.max_regions),
            (hd.sample_interval, hd.aggr_interval, hd.max_regions)
        );
        assert_eq!(h.damos_attrs(), hd.damos_attrs());
        let (l, ld) = (&c.limits, LimitsConfig::default());
        assert_eq!(
            (
                l.promote_scan_period,
                l.promote_scan_window,
                l.promote_hot_threshold
            ),
            (
                ld.promote_scan_period,
                ld.promote_scan_window,
                ld.promote_hot_threshold
            )
        );
        // The hot swap is on by default, with the latency that marks pages
        // for it (docs/NOTES.md "Session 79").
        assert_eq!((l.hot_swap, h.hot_latency), (ld.hot_swap, hd.hot_latency));
        assert_eq!(
            (ld.hot_swap, hd.hot_latency),
            (true, Duration::from_millis(250))
        );
        assert!(c.policy_params().hot_swap);
        assert_eq!(l.hot_swap_idle, ld.hot_swap_idle);
    }

    /// The hot swap's idle test may be set shorter than half the interval,
    /// or 0; the default is not refused for a short interval.
    #[test]
    fn the_hot_swap_idle_test_fits_in_half_the_interval() {
        let c = parse("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.limits.hot_swap_idle, HOT_SWAP_IDLE);
        parse("[daemon]\ninterval = \"400ms\"\n[hotness]\naggr_interval = \"200ms\"\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let c = parse("[limits]\nhot_swap_idle = \"0s\"\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(c.limits.hot_swap_idle.is_zero());
        let Err(e) = parse("[daemon]\ninterval = \"500ms\"\n[limits]\nhot_swap_idle = \"300ms\"\n")
        else {
            panic!("a 300 ms idle test with a 500 ms interval was accepted")
        };
        assert!(e.to_string().contains("limits.hot_swap_idle"), "{e}");
    }

    fn parse(s: &str) -> Result<Config, ConfigError> {
        Config::parse(s, Path::new("/etc/tierd/test.toml"))
    }

    /// The default aging gap (500 ms) is cut to half a short interval
    /// rather than refused; a gap set longer than that by hand is refused.
    #[test]
    fn the_default_aging_gap_is_cut_to_half_the_interval() {
        let c = parse("[daemon]\ninterval = \"500ms\"\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.policy_params().aging_gap_ms, 250);
        let c = parse("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.policy_params().aging_gap_ms, 500);
        let Err(e) = parse("[daemon]\ninterval = \"500ms\"\n[limits]\naging_gap = \"400ms\"\n")
        else {
            panic!("400ms over a 500ms interval was accepted");
        };
        assert!(e.to_string().contains("limits.aging_gap"), "{e}");
    }

    #[test]
    fn a_group_or_world_writable_config_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tierd.toml");
        std::fs::write(&p, "[[policy]]\nmatch = \"*\"\n").unwrap();
        for (mode, ok) in [(0o644, true), (0o600, true), (0o664, false), (0o646, false)] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            match Config::load(&p) {
                Ok(_) => assert!(ok, "mode {mode:o} accepted"),
                Err(e) => {
                    assert!(!ok, "mode {mode:o}: {e}");
                    let msg = e.to_string();
                    assert!(
                        msg.contains("chmod go-w") && msg.contains("tierd.toml"),
                        "{msg}"
                    );
                }
            }
        }
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        /// TOML-ish lines built from the config's own sections and keys, so
        /// that validation (not only the TOML parser) is reached.
        fn configs() -> impl Strategy<Value = String> {
            let line = prop_oneof![
                Just("[daemon]".to_owned()),
                Just("[limits]".to_owned()),
                Just("[hotness]".to_owned()),
                Just("[[policy]]".to_owned()),
                (
                    prop_oneof![
                        "interval",
                        "headroom",
                        "promotion",
                        "demand",
                        "mover",
                        "match",
                        "weight",
                        "local_low",
                        "local_high",
                        "opt_out",
                        "file_first",
                        "offload",
                        "placement",
                        "interleave_weights",
                        "band",
                        "demote_rate",
                        "sample_interval",
                        "max_regions",
                        "metrics_listen",
                        "numa_balancing",
                        "name",
                        "journal",
                    ],
                    prop_oneof![
                        "\"[0-9]{0,6}(ms|s|MiB|GiB|%|)\"",
                        "[0-9-]{1,22}",
                        "(true|false)",
                        "\"[a-z*/._]{0,12}\"",
                        "\"[^\"\\\\]{0,12}\"",
                    ],
                )
                    .prop_map(|(k, v)| format!("{k} = {v}")),
            ];
            proptest::collection::vec(line, 0..12).prop_map(|v| v.join("\n"))
        }

        proptest! {
            /// Arbitrary text and key-shaped lines never panic the loader,
            /// and every error names the file.
            #[test]
            fn the_loader_never_panics_and_errors_name_the_file(
                text in prop_oneof![configs(), ".{0,200}"],
            ) {
                if let Err(e) = parse(&text) {
                    prop_assert!(e.to_string().contains("/etc/tierd/test.toml"), "{}", e);
                }
            }
        }
    }

    #[test]
    fn reload_takes_policies_limits_and_interval_and_names_what_waits_for_a_restart() {
        let old = parse(
            "[daemon]\ninterval = \"2s\"\nmetrics_listen = \"127.0.0.1:9464\"\n\
             [[policy]]\nmatch = \"a/*\"\n",
        )
        .unwrap();
        let new = parse(
            "[daemon]\ninterval = \"1s\"\nheadroom = \"32MiB\"\n\
             metrics_listen = \"127.0.0.1:9999\"\n[limits]\ndemote_rate = \"8MiB\"\n\
             [hotness]\nmax_regions = 500\n\
             [[policy]]\nmatch = \"b/*\"\nweight = 300\n",
        )
        .unwrap();
        let (m, restart) = old.reloaded(new);
        assert_eq!(restart, ["[daemon]", "[hotness]"]);
        // Reloaded: policies (and their matchers), limits, interval, headroom.
        assert_eq!(m.match_policy("b/x"), Some(0));
        assert_eq!(m.match_policy("a/x"), None);
        assert_eq!(m.policies[0].weight, 300);
        assert_eq!(m.policy_params().container_demote_bytes_per_s, 8 << 20);
        assert_eq!(m.daemon.interval, Duration::from_secs(1));
        assert_eq!(m.policy_params().headroom_bytes, 32 << 20);
        // Kept: the listener and the heat source.
        assert_eq!(m.listen_addr().port(), 9464);
        assert_eq!(m.hotness, old.hotness);

        // Only reloadable keys changed: nothing waits.
        let same = parse("[daemon]\ninterval = \"3s\"\n[[policy]]\nmatch = \"*\"\n").unwrap();
        assert!(old.reloaded(same).1.is_empty());
        // Dropping every policy would switch observe-only: the old ones stay.
        let (m, restart) = old.reloaded(parse("").unwrap());
        assert_eq!(restart, ["[[policy]] (none ↔ some)"]);
        assert_eq!(m.match_policy("a/x"), Some(0));
    }

    #[test]
    fn bytes_table() {
        let cases: &[(&str, Option<u64>)] = &[
            ("4096", Some(4096)),
            ("512MiB", Some(512 << 20)),
            ("512 MiB", Some(512 << 20)),
            ("40GiB", Some(40 << 30)),
            ("1G", Some(1 << 30)),
            ("4k", Some(4096)),
            ("1.5GiB", Some(3 << 29)),
            ("2GB", Some(2_000_000_000)),
            ("", None),
            ("MiB", None),
            ("12 parsecs", None),
            ("-1", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_bytes(s).ok(), *want, "{s:?}");
        }
    }

    #[test]
    fn share_table() {
        assert_eq!(parse_share("75%"), Ok(ShareSpec::Percent(75.0)));
        assert_eq!(parse_share("1GiB"), Ok(ShareSpec::Bytes(1 << 30)));
        assert!(parse_share("150%").is_err());
        assert!(parse_share("x%").is_err());
    }

    #[test]
    fn empty_config_is_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.daemon.interval, Duration::from_secs(2));
        assert_eq!(c.listen_addr().to_string(), "127.0.0.1:9464");
        assert!(c.policies.is_empty());
        assert_eq!(c.daemon.headroom, Headroom::Auto);
        assert_eq!(c.policy_params().headroom_bytes, 64 << 20);
    }

    /// `headroom = "auto"` follows the fast nodes' reserve above 64 MiB; a
    /// byte amount is taken as written; anything else is refused naming
    /// the key.
    #[test]
    fn auto_headroom_follows_the_kernels_reserve() {
        let mut c = parse("[daemon]\nheadroom = \"auto\"\n").unwrap();
        c.set_fast_reserve(40 << 20);
        assert_eq!(c.headroom_bytes(), 64 << 20);
        // The 7.3 guest's DRAM node with the CXL device: 77 MiB.
        c.set_fast_reserve(77 << 20);
        assert_eq!(c.headroom_bytes(), 77 << 20);
        assert_eq!(c.policy_params().headroom_bytes, 77 << 20);
        let mut c = parse("[daemon]\nheadroom = \"32MiB\"\n").unwrap();
        c.set_fast_reserve(77 << 20);
        assert_eq!(c.headroom_bytes(), 32 << 20);
        let e = parse("[daemon]\nheadroom = \"lots\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("headroom") && e.contains("auto"), "{e}");
    }

    #[test]
    fn policies_match_first_wins() {
        let c = parse(
            r#"
            [[policy]]
            match = "tenants.slice/db-*"
            local_low = "256MiB"
            weight = 300
            [[policy]]
            match = "tenants.slice/*"
            local_high = "50%"
            "#,
        )
        .unwrap();
        assert_eq!(c.match_policy("tenants.slice/db-1"), Some(0));
        assert_eq!(c.match_policy("tenants.slice/web"), Some(1));
        assert_eq!(c.match_policy("system.slice/sshd.service"), None);
        assert_eq!(c.match_policy("tenants.slice/web/sub"), None);
        let p = c.container_policy(0);
        assert_eq!(p.local_low, Share::Bytes(256 << 20));
        assert_eq!(p.weight, 300);
        assert_eq!(c.container_policy(1).local_high, Share::Fraction(0.5));
    }

    /// The tierd config of every shipped scenario (benches/scenarios and
    /// its cxl/) passes validation: the bench runs what the daemon accepts.
    #[test]
    fn scenario_configs_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/scenarios");
        let mut n = 0;
        let files = std::fs::read_dir(&dir)
            .unwrap()
            .chain(std::fs::read_dir(dir.join("cxl")).unwrap());
        for e in files {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let v: toml::Table = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let text = v["tierd_config"].as_str().unwrap();
            let c = Config::parse(text, &p).unwrap_or_else(|e| panic!("{e}"));
            assert!(!c.policies.is_empty(), "{}", p.display());
            n += 1;
        }
        assert!(n >= 18, "{n} scenario files in {}", dir.display());
    }

    /// Every rejected config names the file and the offending key.
    #[test]
    fn errors_name_file_and_key() {
        let cases: &[(&str, &str)] = &[
            ("[daemon]\nintervall = \"2s\"\n", "intervall"),
            ("[daemon]\ninterval = \"fast\"\n", "interval"),
            ("[daemon]\ninterval = \"10ms\"\n", "daemon.interval"),
            (
                "[daemon]\nunmanaged_min_age = \"0s\"\n",
                "daemon.unmanaged_min_age",
            ),
            (
                "[daemon]\nmetrics_listen = \"nowhere\"\n",
                "daemon.metrics_listen",
            ),
            ("[daemon]\npromotion = \"magic\"\n", "promotion"),
            ("[daemon]\ndemand = \"hot\"\n", "demand"),
            (
                "[daemon]\ndemand = \"hot_set\"\n[hotness]\nsource = \"off\"\n",
                "daemon.demand",
            ),
            ("[daemon]\nnuma_balancing = 1\n", "daemon.numa_balancing"),
            ("[limits]\nband = \"80%\"\n", "limits.band"),
            ("[limits]\naging_gap = \"1500ms\"\n", "limits.aging_gap"),
            ("[limits]\nhot_swap_idle = \"1500ms\"\n", "limits.hot_swap_idle"),
            (
                "[limits]\npromote_scan_period = \"10ms\"\n",
                "limits.promote_scan_period",
            ),
            (
                "[limits]\npromote_hot_threshold = \"90s\"\n",
                "limits.promote_hot_threshold",
            ),
            (
                "[daemon]\npromotion = \"tierd\"\n[hotness]\nsource = \"off\"\n",
                "daemon.promotion",
            ),
            (
                "[daemon]\npromotion = \"tierd\"\nnuma_balancing = 1\n",
                "daemon.numa_balancing",
            ),
            ("[daemon]\nmover = \"teleport\"\n", "mover"),
            ("[daemon]\ndemotion = \"swap\"\n", "demotion"),
            ("[daemon]\nmover_batch = 0\n", "daemon.mover_batch"),
            (
                "[hotness]\naggr_interval = \"1ms\"\n",
                "hotness.aggr_interval",
            ),
            (
                "[hotness]\naggr_interval = \"5s\"\n",
                "hotness.aggr_interval",
            ),
            ("[hotness]\nmin_regions = 1\n", "hotness.max_regions"),
            (
                "[hotness]\ndamos_aggr_interval = \"1ms\"\n",
                "hotness.damos_aggr_interval",
            ),
            ("[hotness]\ndamos_max_regions = 5\n", "hotness.damos_max_regions"),
            (
                "[hotness]\nhot_min_accesses = 21\n",
                "hotness.hot_min_accesses",
            ),
            ("[hotness]\nmax_processes = 0\n", "hotness.max_processes"),
            ("[hotness]\nnodes_shift = 0\n", "hotness.nodes_shift"),
            ("[hotness]\nhint_faults = \"kprobe\"\n", "hint_faults"),
            (
                "[limits]\nthrash_window = \"10ms\"\n",
                "limits.thrash_window",
            ),
            ("[limits]\ndemote_rate = 0\n", "limits.demote_rate"),
            ("[[policy]]\nmatch = \"a/[\"\n", "policy[0].match"),
            (
                "[[policy]]\nmatch = \"a/*\"\nweight = 0\n",
                "policy[0].weight",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\nlocal_low = \"2GiB\"\nlocal_high = \"1GiB\"\n",
                "policy[0].local_low",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\nlocal_low = \"lots\"\n",
                "local_low",
            ),
            ("[[policy]]\nlocal_low = \"1GiB\"\n", "match"),
            (
                "[[policy]]\nmatch = \"a/*\"\nopt_out = true\nfile_first = true\n",
                "policy[0].file_first",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\nfile_first = \"yes\"\n",
                "file_first",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\noffload = { pressure = \"0\" }\n",
                "policy[0].offload.pressure",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\noffload = { pressure = \"0.1%\", step = \"50%\" }\n",
                "policy[0].offload.step",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\nopt_out = true\noffload = { pressure = \"1%\" }\n",
                "policy[0].offload",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\noffload = { presure = \"1%\" }\n",
                "presure",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\noffload = { pressure = \"1%\", min_age = \"1s\" }\n",
                "policy[0].offload.min_age",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\ninterleave_weights = \"auto\"\n",
                "policy[0].interleave_weights",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\nplacement = \"interleave\"\ninterleave_weights = { fast = 0, lower = 1 }\n",
                "policy[0].interleave_weights",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\nplacement = \"interleave\"\nlocal_high = \"50%\"\n",
                "policy[0].placement",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\nplacement = \"interleave\"\n[[policy]]\nmatch = \"b/*\"\nplacement = \"interleave\"\ninterleave_weights = { fast = 3, lower = 1 }\n",
                "policy[1].interleave_weights",
            ),
            (
                "[[policy]]\nmatch = \"a/*\"\nplacement = \"spread\"\n",
                "placement",
            ),
        ];
        for (text, key) in cases {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains("/etc/tierd/test.toml"), "{err}");
            assert!(err.contains(key), "expected {key:?} in: {err}");
        }
    }

    #[test]
    fn tierd_promotion_with_either_mover() {
        for mover in ["move_pages", "damos"] {
            let c = parse(&format!(
                "[daemon]\npromotion = \"tierd\"\nmover = \"{mover}\"\nnuma_balancing = 0\n"
            ))
            .unwrap();
            assert_eq!(c.daemon.promotion, PromotionMode::Tierd);
            assert_eq!(c.daemon.mover.as_str(), mover);
            assert_eq!(c.hotness.source, HotnessSource::Damon);
        }
        let p = parse("[limits]\nthrash_window = \"20s\"\nthrash_rate = \"2MiB\"\n")
            .unwrap()
            .policy_params();
        assert_eq!(p.thrash.window_ms, 20_000);
        assert_eq!(p.thrash.pingpong_bytes_per_s, 2 << 20);
    }

    /// Every file shipped in config/ loads and validates.
    #[test]
    fn shipped_configs_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 1, "no .toml files in {}", dir.display());
    }
}
