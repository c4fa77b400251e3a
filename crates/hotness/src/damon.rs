//! DAMON sysfs driver for Linux 6.12.
//!
//! Kernel documentation: `Documentation/admin-guide/mm/damon/usage.rst`
//! ("sysfs Interface"); the file layout below is the 6.12 one, checked in the
//! emulated host (see `tests/fixtures/linux-6.12/sys/kernel/mm/damon`).
//!
//! ```text
//! <root>/kdamonds/nr_kdamonds
//! <root>/kdamonds/<K>/{state,pid}
//! <root>/kdamonds/<K>/contexts/nr_contexts
//! <root>/kdamonds/<K>/contexts/0/{operations,avail_operations}
//! <root>/kdamonds/<K>/contexts/0/monitoring_attrs/intervals/{sample_us,aggr_us,update_us}
//! <root>/kdamonds/<K>/contexts/0/monitoring_attrs/nr_regions/{min,max}
//! <root>/kdamonds/<K>/contexts/0/targets/nr_targets
//! <root>/kdamonds/<K>/contexts/0/targets/<T>/{pid_target,regions/nr_regions,regions/<R>/{start,end}}
//! <root>/kdamonds/<K>/contexts/0/schemes/nr_schemes
//! <root>/kdamonds/<K>/contexts/0/schemes/<S>/{action,apply_interval_us,target_nid}
//!     access_pattern/{sz,nr_accesses,age}/{min,max}
//!     quotas/{ms,bytes,reset_interval_ms,effective_bytes,goals/nr_goals}
//!     quotas/goals/<G>/{target_metric,target_value,current_value,nid}
//!     (node metrics 6.16+; per-memcg metrics and goals/<G>/path 6.19+)
//!     quotas/weights/{sz_permil,nr_accesses_permil,age_permil}
//!     watermarks/{metric,interval_us,high,mid,low}
//!     filters/nr_filters, filters/<F>/{type,matching,memcg_path,addr_start,addr_end,damon_target_idx}
//!     (6.15+: core_filters/ for addr and target, ops_filters/ for anon,
//!     memcg and young, same files; filters/ deprecated)
//!     stats/{nr_tried,sz_tried,nr_applied,sz_applied,qt_exceeds}
//!     tried_regions/{total_bytes,<N>/{start,end,nr_accesses,age}}
//! ```
//!
//! Accuracy caveat (seen in the emulated host): DAMON checks the page-table
//! accessed bit and x86 does not flush the TLB when it clears it, so a thread
//! that runs alone on its CPU (no switch to another address space) and whose
//! hot set fits in the TLB is not seen accessing it again: its regions show
//! `nr_accesses` 0. Under TCG, with one busy process per vCPU, a 16 MiB hot
//! set read as 0 hot bytes in some runs; with a third runnable process on the
//! two vCPUs every run saw 0.9x..1.05x of the hot set.
//!
//! Ownership: DAMON sysfs has no owner or label field, so [`Damon`] records the
//! kdamonds it created in a state file (JSON) and only ever touches those; see
//! [`Damon::claim`].

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where the kernel mounts the DAMON sysfs interface (`CONFIG_DAMON_SYSFS`).
pub const DEFAULT_ROOT: &str = "/sys/kernel/mm/damon/admin";

/// Where tierd records the kdamonds it owns (see [`Damon::claim`]).
pub const DEFAULT_STATE_FILE: &str = "/run/tierd/damon.json";

/// Where physical memory ranges for `paddr` targets are read from.
pub const DEFAULT_IOMEM: &str = "/proc/iomem";

/// Attempts for a write (or a `state`/`pid` read) that fails with EBUSY
/// (the DAMON sysfs lock is taken with `mutex_trylock`, so concurrent users
/// of the interface see EBUSY).
const BUSY_ATTEMPTS: u32 = 10;

/// Writes of this process that met EBUSY and were tried again (see
/// [`busy_retries`]).
static BUSY_RETRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Writes still to fail with an injected EBUSY (see [`inject_busy`]).
static INJECTED_BUSY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Test-only fault point: the next `writes` DAMON sysfs write attempts of
/// this process fail with EBUSY before reaching the kernel, as they do when
/// another user of the interface holds its lock. Lets the VM tests show
/// what tierd does with a busy interface without racing a second writer.
pub fn inject_busy(writes: u64) {
    INJECTED_BUSY.store(writes, std::sync::atomic::Ordering::Relaxed);
}

/// Takes one injected EBUSY, if any is left.
fn injected_busy() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    INJECTED_BUSY
        .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

/// How many DAMON sysfs writes (and `state`/`pid` reads) of this process
/// met EBUSY (another user of the interface held its lock, mm/damon/sysfs.c
/// `mutex_trylock`) and were tried again, since the process started. A count, not an error: a write
/// that stays busy for all its attempts fails with [`Error::Busy`].
pub fn busy_retries() -> u64 {
    BUSY_RETRIES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Errors of the DAMON driver. Every message names the file and what the
/// operator can do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{}: {source}{}", path.display(), io_hint(source))]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file held something that is not what the kernel writes there.
    #[error("{}: unexpected value {value:?} (is this a Linux 6.12 DAMON sysfs tree?)", path.display())]
    Parse { path: PathBuf, value: String },
    /// DAMON sysfs is missing or unreadable.
    #[error("{}: DAMON sysfs interface unavailable: {detail}", path.display())]
    Unavailable { path: PathBuf, detail: String },
    /// A kdamond that tierd did not create is in the way.
    #[error("{}: kdamond not created by tierd: {detail}", path.display())]
    Foreign { path: PathBuf, detail: String },
    /// DAMON_STAT's kdamond runs, and it runs exclusively: the kernel
    /// refuses to start any other kdamond (EBUSY on `state`) until it stops.
    #[error("{} is Y: the kernel's DAMON_STAT module runs an exclusive kdamond (Linux 6.17 and later; on by default on 7.x kernels), so no other kdamond can start; tierd does not stop kdamonds it did not create. Write N there (or boot with damon_stat.enabled=N) to let tierd use DAMON, or set hotness.source = \"off\"", path.display())]
    HeldByDamonStat { path: PathBuf },
    /// The kernel kept answering EBUSY.
    #[error("{}: device or resource busy after {BUSY_ATTEMPTS} attempts (another DAMON user, e.g. damo, holds the sysfs lock, or a kdamond is running); retry later", path.display())]
    Busy { path: PathBuf },
    /// The operation needs a running kdamond.
    #[error("{}: kdamond is not running (a vaddr kdamond stops by itself when all its target processes have exited); start it first", path.display())]
    NotRunning { path: PathBuf },
    /// The kdamond index was not claimed by this [`Damon`].
    #[error("kdamond {idx} under {}: not claimed by this tierd (call claim first); tierd never touches kdamonds it did not create", root.display())]
    NotClaimed { idx: usize, root: PathBuf },
    /// The spec cannot be written as given.
    #[error("invalid DAMON spec for {}: {detail}", path.display())]
    Spec { path: PathBuf, detail: String },
}

fn io_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::PermissionDenied => " (DAMON sysfs needs root / CAP_SYS_ADMIN)",
        io::ErrorKind::NotFound => " (file missing: not the Linux 6.12 DAMON layout?)",
        io::ErrorKind::InvalidInput => {
            " (the kernel rejected the value: check the spec, and that target pids are alive)"
        }
        _ => "",
    }
}

/// DAMON operations set (`contexts/0/operations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ops {
    /// Virtual address spaces of processes (`vaddr`).
    Vaddr,
    /// The physical address space (`paddr`).
    Paddr,
}

impl Ops {
    /// The sysfs string.
    pub fn as_str(self) -> &'static str {
        match self {
            Ops::Vaddr => "vaddr",
            Ops::Paddr => "paddr",
        }
    }
}

/// Monitoring attributes (`monitoring_attrs/`), times in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attrs {
    /// Sampling interval (µs): how often one page per region is checked.
    pub sample_us: u64,
    /// Aggregation interval (µs): `nr_accesses` counts samples per this interval.
    pub aggr_us: u64,
    /// Operations update interval (µs): how often vaddr re-reads the mappings.
    pub update_us: u64,
    /// Minimum number of monitoring regions (per target).
    pub min_nr_regions: u64,
    /// Maximum number of monitoring regions (per target).
    pub max_nr_regions: u64,
}

impl Default for Attrs {
    /// DAMON's defaults (5 ms, 100 ms, 10..1000 regions) except `update_us`:
    /// 1 s instead of the sysfs default of 60 s, because vaddr only learns of a
    /// process's new mappings at this interval — with 60 s, memory a container
    /// maps after start-up stays invisible (and cold) for up to a minute.
    fn default() -> Self {
        Attrs {
            sample_us: 5_000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            min_nr_regions: 10,
            max_nr_regions: 1_000,
        }
    }
}

impl Attrs {
    /// `aggr_us / sample_us`: the highest `nr_accesses` a region can show.
    pub fn max_nr_accesses(&self) -> u32 {
        (self.aggr_us / self.sample_us.max(1)).min(u32::MAX as u64) as u32
    }
}

/// An inclusive range `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub min: u64,
    pub max: u64,
}

impl Range {
    /// `0..=u32::MAX`: matches everything.
    pub const ALL: Range = Range {
        min: 0,
        max: u32::MAX as u64,
    };
}

/// Which regions a scheme applies to (`access_pattern/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessPattern {
    /// Region size in bytes.
    pub sz: Range,
    /// Accesses per aggregation interval (0..=aggr_us/sample_us).
    pub nr_accesses: Range,
    /// Age in aggregation intervals.
    pub age: Range,
}

impl Default for AccessPattern {
    /// Everything (`0..=u32::MAX` for each). Note that the kernel's own sysfs
    /// default is `0..=0` for all three, which matches nothing.
    fn default() -> Self {
        AccessPattern {
            sz: Range::ALL,
            nr_accesses: Range::ALL,
            age: Range::ALL,
        }
    }
}

/// Scheme quota (`quotas/`). Zero means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Bytes the action may apply to per reset interval (0 = unlimited).
    pub bytes: u64,
    /// Milliseconds of kdamond time per reset interval (0 = unlimited).
    pub ms: u64,
    /// Quota charge reset interval in milliseconds.
    pub reset_interval_ms: u64,
    /// Prioritisation weight of region size (per mille).
    pub sz_permil: u32,
    /// Prioritisation weight of access frequency (per mille).
    pub nr_accesses_permil: u32,
    /// Prioritisation weight of age (per mille).
    pub age_permil: u32,
}

/// DAMOS action (`action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// `stat`: only count (and report tried regions).
    Stat,
    /// `migrate_hot`: migrate to `target_nid`, hottest first (paddr only).
    MigrateHot,
    /// `migrate_cold`: migrate to `target_nid`, coldest first (paddr only).
    MigrateCold,
}

impl Action {
    /// The sysfs string.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Stat => "stat",
            Action::MigrateHot => "migrate_hot",
            Action::MigrateCold => "migrate_cold",
        }
    }
}

/// What a DAMOS filter matches (`filters/<F>/type` and its argument files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FilterKind {
    /// Anonymous pages.
    Anon,
    /// Pages charged to exactly this memcg (not its descendants): the path
    /// relative to the cgroup2 root, e.g. `/tierd.slice/a`.
    Memcg(String),
    /// Pages accessed since the last check (young).
    Young,
    /// Addresses `start..end` (bytes, end exclusive).
    Addr { start: u64, end: u64 },
    /// The DAMON target with this index (position in `targets/`).
    Target(u32),
}

impl FilterKind {
    /// Whether DAMON's core evaluates this filter (`addr`, `target`) rather
    /// than the operations set (`anon`, `memcg`, `young`): where a 6.15+
    /// kernel wants it, `core_filters/` or `ops_filters/`.
    pub fn is_core_layer(&self) -> bool {
        matches!(self, FilterKind::Addr { .. } | FilterKind::Target(_))
    }
}

/// A DAMOS filter. 6.12 semantics: the scheme skips memory for which
/// (the filter matches) == `matching`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    pub kind: FilterKind,
    /// `Y`: filter out what matches; `N`: filter out what does not match.
    pub matching: bool,
}

/// A DAMOS quota goal metric (`quotas/goals/<G>/target_metric`), in basis
/// points (1/10,000) of node `nid`'s total memory
/// (Documentation/mm/damon/design.rst, "Aim-oriented Feedback-driven
/// Auto-tuning"; `mm/damon/core.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GoalMetric {
    /// `node_memcg_used_bp`: the memcg's LRU pages on the node (6.19+).
    NodeMemcgUsedBp,
    /// `node_memcg_free_bp`: 10,000 − `node_memcg_used_bp` (6.19+).
    NodeMemcgFreeBp,
}

impl GoalMetric {
    /// The sysfs string.
    pub fn as_str(self) -> &'static str {
        match self {
            GoalMetric::NodeMemcgUsedBp => "node_memcg_used_bp",
            GoalMetric::NodeMemcgFreeBp => "node_memcg_free_bp",
        }
    }
}

/// One DAMOS quota goal: the kernel tunes the scheme's effective quota
/// (at most ×2 per reset interval while the metric is below `target_value`,
/// less above it, from 1 byte, capped by `quotas/bytes`) so that the
/// action drives the metric to the target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaGoal {
    pub metric: GoalMetric,
    /// Target, basis points of node `nid`'s total memory (0..=10,000).
    pub target_value: u64,
    pub nid: u32,
    /// memcg path from the cgroup2 mount, with a leading `/` (the goal's
    /// `path` file; resolved to a cgroup id when the goals are committed).
    pub memcg_path: String,
}

/// One DAMOS scheme.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scheme {
    pub action: Action,
    pub access_pattern: AccessPattern,
    pub quota: Quota,
    /// Destination node of migrate actions (`target_nid`, -1 = none).
    pub target_nid: Option<u32>,
    pub filters: Vec<Filter>,
    /// Apply interval (µs); 0 = the aggregation interval.
    pub apply_interval_us: u64,
    /// Quota goals (none: the quota is fixed).
    #[serde(default)]
    pub goals: Vec<QuotaGoal>,
}

impl Scheme {
    /// A `stat` scheme over everything, no quota, no filters.
    pub fn stat() -> Self {
        Scheme {
            action: Action::Stat,
            access_pattern: AccessPattern::default(),
            quota: Quota::default(),
            target_nid: None,
            filters: Vec::new(),
            apply_interval_us: 0,
            goals: Vec::new(),
        }
    }

    /// A `stat` scheme that sees only target `idx` (a `target` filter with
    /// `matching = N`): its tried regions are exactly that target's regions.
    pub fn stat_for_target(idx: u32) -> Self {
        Scheme {
            filters: vec![Filter {
                kind: FilterKind::Target(idx),
                matching: false,
            }],
            ..Scheme::stat()
        }
    }
}

/// Everything tierd writes for one kdamond (one context).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KdamondSpec {
    pub ops: Ops,
    pub attrs: Attrs,
    /// vaddr: one target per pid, in order (target index = position).
    /// paddr: must be empty; one target without pid is written, whose
    /// regions are the `System RAM` ranges of `/proc/iomem` (paddr has no
    /// automatic region setup in sysfs: with no regions it monitors nothing).
    pub pids: Vec<u32>,
    pub schemes: Vec<Scheme>,
}

/// One region of `tried_regions/<N>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriedRegion {
    /// Start address (bytes, inclusive).
    pub start: u64,
    /// End address (bytes, exclusive).
    pub end: u64,
    /// Accesses seen in the last aggregation interval (0..=aggr_us/sample_us).
    pub nr_accesses: u32,
    /// Aggregation intervals since the access frequency last changed much.
    pub age: u32,
}

impl TriedRegion {
    /// `end - start` in bytes.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// True when the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A scheme's `stats/` (cumulative since the kdamond started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemeStats {
    /// Regions the action was tried on.
    pub nr_tried: u64,
    /// Bytes the action was tried on.
    pub sz_tried: u64,
    /// Regions the action was applied to.
    pub nr_applied: u64,
    /// Bytes the action was applied to.
    pub sz_applied: u64,
    /// Times the quota was exceeded.
    pub qt_exceeds: u64,
}

/// Result of [`Damon::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The kdamond indices now ours.
    pub indices: Vec<usize>,
    /// `adopted[i]`: kdamond `indices[i]` was found running and ours (left
    /// an earlier tierd); the caller may keep it or rewrite its spec.
    pub adopted: Vec<bool>,
}

/// The state file: which kdamonds are ours.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct StateRecord {
    /// `nr_kdamonds` when we wrote it; writing `nr_kdamonds` recreates every
    /// kdamond, so a different value means our kdamonds are gone.
    nr_kdamonds: usize,
    kdamonds: Vec<OwnedKdamond>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct OwnedKdamond {
    index: usize,
    /// Kthread pid while started by us.
    pid: Option<u32>,
}

/// What the sysfs tree shows at claim or release time.
struct Survey {
    nr: usize,
    /// Indices that are ours (recorded and still valid), sorted.
    ours: Vec<usize>,
    /// First foreign index and why.
    foreign: Option<(usize, String)>,
}

/// Driver for the DAMON sysfs interface. Create with [`Damon::new`], then
/// [`claim`](Damon::claim) kdamonds before configuring them.
#[derive(Debug)]
pub struct Damon {
    root: PathBuf,
    state_file: PathBuf,
    iomem: PathBuf,
    claimed: Vec<usize>,
    record: Mutex<StateRecord>,
    busy_backoff: Duration,
}

impl Damon {
    /// A driver for the DAMON sysfs tree at `root` (normally [`DEFAULT_ROOT`])
    /// that records its kdamonds in `state_file` (normally
    /// [`DEFAULT_STATE_FILE`]; its directory is created when needed).
    /// Touches nothing until called.
    pub fn new(root: impl Into<PathBuf>, state_file: impl Into<PathBuf>) -> Self {
        Damon {
            root: root.into(),
            state_file: state_file.into(),
            iomem: PathBuf::from(DEFAULT_IOMEM),
            claimed: Vec::new(),
            record: Mutex::new(StateRecord::default()),
            busy_backoff: Duration::from_millis(20),
        }
    }

    /// Reads `System RAM` ranges for paddr targets from `path` instead of
    /// [`DEFAULT_IOMEM`] (tests).
    pub fn with_iomem(mut self, path: impl Into<PathBuf>) -> Self {
        self.iomem = path.into();
        self
    }

    /// The sysfs root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The kdamond indices claimed by [`claim`](Damon::claim).
    pub fn claimed(&self) -> &[usize] {
        &self.claimed
    }

    /// `<root>/kdamonds/<idx>`.
    pub fn kdamond_dir(&self, idx: usize) -> PathBuf {
        self.root.join("kdamonds").join(idx.to_string())
    }

    fn nr_kdamonds_path(&self) -> PathBuf {
        self.root.join("kdamonds/nr_kdamonds")
    }

    /// DAMON_STAT's `enabled` parameter beside this tree:
    /// `<sys>/module/damon_stat/parameters/enabled`, where `<sys>` is four
    /// levels above `<root>` (`<sys>/kernel/mm/damon/admin`), so that a
    /// fixture tree carries its own.
    pub fn damon_stat_enabled_path(&self) -> PathBuf {
        let sys = self.root.ancestors().nth(4).unwrap_or(Path::new("/sys"));
        sys.join("module/damon_stat/parameters/enabled")
    }

    /// Whether DAMON_STAT's exclusive kdamond runs (its `enabled` parameter
    /// reads `Y`); false where the kernel has no DAMON_STAT (before 6.17,
    /// or built without it).
    pub fn damon_stat_running(&self) -> bool {
        fs::read_to_string(self.damon_stat_enabled_path()).is_ok_and(|v| v.trim() == "Y")
    }

    /// Checks that `<root>` exists and `kdamonds/nr_kdamonds` is readable.
    ///
    /// Errors: [`Error::Unavailable`] with the likely cause (kernel built
    /// without `CONFIG_DAMON_SYSFS`, sysfs not mounted, not root);
    /// [`Error::HeldByDamonStat`] while DAMON_STAT's exclusive kdamond runs
    /// (mm/damon/stat.c starts it with `damon_start(..., exclusive = true)`).
    pub fn check_available(&self) -> Result<(), Error> {
        if !self.root.is_dir() {
            let detail = if Path::new("/sys/kernel/mm").is_dir()
                && self.root == Path::new(DEFAULT_ROOT)
            {
                "directory missing: kernel built without CONFIG_DAMON_SYSFS (DAMON needs Linux >= 5.18; Debian's 6.12 cloud kernel has it)"
            } else {
                "directory missing: kernel built without CONFIG_DAMON_SYSFS, or sysfs not mounted"
            };
            return Err(Error::Unavailable {
                path: self.root.clone(),
                detail: detail.into(),
            });
        }
        let p = self.nr_kdamonds_path();
        match fs::read_to_string(&p) {
            Ok(s) => {
                s.trim().parse::<usize>().map_err(|_| Error::Parse {
                    path: p,
                    value: s.trim().into(),
                })?;
                if self.damon_stat_running() {
                    return Err(Error::HeldByDamonStat {
                        path: self.damon_stat_enabled_path(),
                    });
                }
                Ok(())
            }
            Err(e) => Err(Error::Unavailable {
                path: p,
                detail: format!("{e}{}", io_hint(&e)),
            }),
        }
    }

    fn read_nr_kdamonds(&self) -> Result<usize, Error> {
        read_num(&self.nr_kdamonds_path())
    }

    fn load_record(&self) -> Option<StateRecord> {
        let text = fs::read_to_string(&self.state_file).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn save_record(&self, rec: &StateRecord) -> Result<(), Error> {
        let path = &self.state_file;
        let io = |e| Error::Io {
            path: path.clone(),
            source: e,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| Error::Io {
                path: dir.to_path_buf(),
                source: e,
            })?;
        }
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string(rec).expect("state record serialises");
        let mut f = fs::File::create(&tmp).map_err(|e| Error::Io {
            path: tmp.clone(),
            source: e,
        })?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| Error::Io {
                path: tmp.clone(),
                source: e,
            })?;
        fs::rename(&tmp, path).map_err(io)
    }

    /// Which existing kdamonds are ours according to the state file.
    fn survey(&self) -> Result<Survey, Error> {
        let nr = self.read_nr_kdamonds()?;
        let rec = self.load_record();
        let mut ours = Vec::new();
        let mut foreign = None;
        for idx in 0..nr {
            let mine = rec
                .as_ref()
                .and_then(|r| r.kdamonds.iter().find(|k| k.index == idx));
            let running = self.is_running(idx)?;
            let verdict = match (mine, &rec) {
                (Some(k), Some(r)) => {
                    if running {
                        let pid = self.kdamond_pid(idx)?;
                        if k.pid.is_some() && pid == k.pid {
                            Ok(())
                        } else {
                            Err(format!(
                                "running with kthread pid {} but {} records pid {}",
                                pid.map_or("-1".into(), |p| p.to_string()),
                                self.state_file.display(),
                                k.pid.map_or("none".into(), |p| p.to_string())
                            ))
                        }
                    } else if r.nr_kdamonds == nr {
                        Ok(())
                    } else {
                        Err(format!(
                            "nr_kdamonds is {nr} but was {} when {} was written, so the kdamonds were recreated by someone else",
                            r.nr_kdamonds,
                            self.state_file.display()
                        ))
                    }
                }
                _ => Err(format!(
                    "not recorded in {}{}",
                    self.state_file.display(),
                    if self.state_file.exists() && rec.is_none() {
                        " (the file exists but is not valid JSON)"
                    } else {
                        ""
                    }
                )),
            };
            match verdict {
                Ok(()) => ours.push(idx),
                Err(why) => {
                    if foreign.is_none() {
                        let state = if running { "running" } else { "off" };
                        foreign = Some((idx, format!("{state}, {why}")));
                    }
                }
            }
        }
        Ok(Survey { nr, ours, foreign })
    }

    fn foreign_error(&self, idx: usize, why: String) -> Error {
        let k = self.kdamond_dir(idx);
        Error::Foreign {
            path: k.clone(),
            detail: format!(
                "{why}. tierd only uses kdamonds it created and never rewrites nr_kdamonds while another \
                 user's kdamonds exist (that would wipe their configuration). If it is not in use, remove it: \
                 `echo off > {}; echo 0 > {}` (or stop the tool that created it, e.g. damo), then restart tierd",
                k.join("state").display(),
                self.nr_kdamonds_path().display()
            ),
        }
    }

    /// Takes `n` kdamonds for this tierd and records them in the state file.
    ///
    /// - If the state file names kdamonds that are still ours (running with
    ///   the recorded kthread pid, or off and `nr_kdamonds` unchanged since we
    ///   wrote it) and there are at least `n` of them, the first `n` are
    ///   adopted without being rewritten (`adopted[i]` = it was running).
    /// - Else, if every existing kdamond is ours (or there is none), our
    ///   running ones are stopped and `nr_kdamonds` is set to `n`, which
    ///   recreates them with kernel defaults.
    /// - Else [`Error::Foreign`] names the first kdamond that is not ours and
    ///   how to remove it; nothing is written in that case.
    ///
    /// Errors: also [`Error::Io`], [`Error::Busy`] (EBUSY on `nr_kdamonds`),
    /// [`Error::Unavailable`].
    pub fn claim(&mut self, n: usize) -> Result<Claim, Error> {
        self.check_available()?;
        let s = self.survey()?;
        let rec = self.load_record().unwrap_or_default();
        if s.ours.len() >= n && n > 0 && (s.foreign.is_some() || s.ours.len() == n) {
            let indices: Vec<usize> = s.ours[..n].to_vec();
            let adopted = indices
                .iter()
                .map(|&i| self.is_running(i))
                .collect::<Result<Vec<_>, _>>()?;
            let kept = StateRecord {
                nr_kdamonds: s.nr,
                kdamonds: rec
                    .kdamonds
                    .into_iter()
                    .filter(|k| s.ours.contains(&k.index))
                    .collect(),
            };
            self.save_record(&kept)?;
            *self.record.lock().unwrap_or_else(|e| e.into_inner()) = kept;
            self.claimed = indices.clone();
            return Ok(Claim { indices, adopted });
        }
        if let Some((idx, why)) = s.foreign {
            return Err(self.foreign_error(idx, why));
        }
        // Every existing kdamond is ours: stop them and recreate n.
        for &i in &s.ours {
            self.stop_unchecked(i)?;
        }
        let fresh = StateRecord {
            nr_kdamonds: n,
            kdamonds: (0..n)
                .map(|index| OwnedKdamond { index, pid: None })
                .collect(),
        };
        // Record first: a crash between the two writes leaves a record that
        // the next claim validates against nr_kdamonds.
        self.save_record(&fresh)?;
        write_busy(&self.nr_kdamonds_path(), &n.to_string(), self.busy_backoff)?;
        *self.record.lock().unwrap_or_else(|e| e.into_inner()) = fresh;
        self.claimed = (0..n).collect();
        Ok(Claim {
            indices: self.claimed.clone(),
            adopted: vec![false; n],
        })
    }

    fn check_claimed(&self, idx: usize) -> Result<PathBuf, Error> {
        if self.claimed.contains(&idx) {
            Ok(self.kdamond_dir(idx))
        } else {
            Err(Error::NotClaimed {
                idx,
                root: self.root.clone(),
            })
        }
    }

    fn set_recorded_pid(&self, idx: usize, pid: Option<u32>) -> Result<(), Error> {
        let mut rec = self.record.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = rec.kdamonds.iter_mut().find(|k| k.index == idx) {
            if k.pid == pid {
                return Ok(());
            }
            k.pid = pid;
        }
        self.save_record(&rec)
    }

    /// Writes every file of `spec` into kdamond `idx` (claimed): context 0,
    /// targets, schemes, quotas, filters. Count files (`nr_targets`,
    /// `nr_schemes`, `nr_filters`, ...) are written only when they change,
    /// because writing one recreates all directories below it. Works whether
    /// the kdamond is off (follow with [`start`](Damon::start)) or running
    /// (follow with [`commit`](Damon::commit)).
    ///
    /// Errors: [`Error::NotClaimed`], [`Error::Spec`] (pids with paddr, no
    /// pids with vaddr, no System RAM in `/proc/iomem`), [`Error::Io`] (the
    /// kernel rejected a value: EINVAL), [`Error::Busy`].
    pub fn write_spec(&self, idx: usize, spec: &KdamondSpec) -> Result<(), Error> {
        let k = self.check_claimed(idx)?;
        let ctxs = k.join("contexts");
        let c = ctxs.join("0");
        let paddr_regions = match spec.ops {
            Ops::Vaddr if spec.pids.is_empty() => {
                return Err(Error::Spec {
                    path: c.join("targets"),
                    detail: "vaddr needs at least one pid".into(),
                })
            }
            Ops::Paddr if !spec.pids.is_empty() => {
                return Err(Error::Spec {
                    path: c.join("targets"),
                    detail: "paddr takes no pids (one target without pid is written)".into(),
                })
            }
            Ops::Vaddr => Vec::new(),
            Ops::Paddr => system_ram(&self.iomem)?,
        };
        let b = self.busy_backoff;
        write_count(&ctxs.join("nr_contexts"), 1, b)?;
        write_busy(&c.join("operations"), spec.ops.as_str(), b)?;
        let ma = c.join("monitoring_attrs");
        let a = &spec.attrs;
        write_busy(&ma.join("intervals/sample_us"), &a.sample_us.to_string(), b)?;
        write_busy(&ma.join("intervals/aggr_us"), &a.aggr_us.to_string(), b)?;
        write_busy(&ma.join("intervals/update_us"), &a.update_us.to_string(), b)?;
        write_busy(&ma.join("nr_regions/min"), &a.min_nr_regions.to_string(), b)?;
        write_busy(&ma.join("nr_regions/max"), &a.max_nr_regions.to_string(), b)?;

        let ts = c.join("targets");
        match spec.ops {
            Ops::Vaddr => {
                write_count(&ts.join("nr_targets"), spec.pids.len(), b)?;
                for (i, pid) in spec.pids.iter().enumerate() {
                    let t = ts.join(i.to_string());
                    write_busy(&t.join("pid_target"), &pid.to_string(), b)?;
                    write_count(&t.join("regions/nr_regions"), 0, b)?;
                }
            }
            Ops::Paddr => {
                write_count(&ts.join("nr_targets"), 1, b)?;
                let rs = ts.join("0/regions");
                write_count(&rs.join("nr_regions"), paddr_regions.len(), b)?;
                for (i, r) in paddr_regions.iter().enumerate() {
                    let d = rs.join(i.to_string());
                    write_busy(&d.join("start"), &r.min.to_string(), b)?;
                    write_busy(&d.join("end"), &r.max.to_string(), b)?;
                }
            }
        }

        let ss = c.join("schemes");
        write_count(&ss.join("nr_schemes"), spec.schemes.len(), b)?;
        for (i, s) in spec.schemes.iter().enumerate() {
            self.write_scheme(&ss.join(i.to_string()), s)?;
        }
        Ok(())
    }

    fn write_scheme(&self, d: &Path, s: &Scheme) -> Result<(), Error> {
        let b = self.busy_backoff;
        write_busy(&d.join("action"), s.action.as_str(), b)?;
        write_busy(
            &d.join("apply_interval_us"),
            &s.apply_interval_us.to_string(),
            b,
        )?;
        let nid = s.target_nid.map_or("-1".to_string(), |n| n.to_string());
        write_busy(&d.join("target_nid"), &nid, b)?;
        let ap = d.join("access_pattern");
        for (name, r) in [
            ("sz", s.access_pattern.sz),
            ("nr_accesses", s.access_pattern.nr_accesses),
            ("age", s.access_pattern.age),
        ] {
            write_busy(&ap.join(name).join("min"), &r.min.to_string(), b)?;
            write_busy(&ap.join(name).join("max"), &r.max.to_string(), b)?;
        }
        let q = d.join("quotas");
        write_busy(&q.join("ms"), &s.quota.ms.to_string(), b)?;
        write_busy(&q.join("bytes"), &s.quota.bytes.to_string(), b)?;
        write_busy(
            &q.join("reset_interval_ms"),
            &s.quota.reset_interval_ms.to_string(),
            b,
        )?;
        let w = q.join("weights");
        write_busy(&w.join("sz_permil"), &s.quota.sz_permil.to_string(), b)?;
        write_busy(
            &w.join("nr_accesses_permil"),
            &s.quota.nr_accesses_permil.to_string(),
            b,
        )?;
        write_busy(&w.join("age_permil"), &s.quota.age_permil.to_string(), b)?;
        let goals = q.join("goals");
        write_count(&goals.join("nr_goals"), s.goals.len(), b)?;
        for (i, g) in s.goals.iter().enumerate() {
            let gd = goals.join(i.to_string());
            // Per-memcg metrics need the goal's `path` file (6.19+): on
            // an older kernel the metric name would be refused with a
            // bare EINVAL, so say what is missing instead.
            if !gd.join("path").exists() {
                return Err(Error::Spec {
                    path: gd.join("path"),
                    detail: format!(
                        "this kernel's DAMON has no per-memcg quota goals ({} needs \
                         Linux 6.19 or later); use the mover without goals",
                        g.metric.as_str()
                    ),
                });
            }
            write_busy(&gd.join("target_metric"), g.metric.as_str(), b)?;
            write_busy(&gd.join("target_value"), &g.target_value.to_string(), b)?;
            write_busy(&gd.join("nid"), &g.nid.to_string(), b)?;
            write_busy(&gd.join("path"), &g.memcg_path, b)?;
        }
        write_busy(&d.join("watermarks/metric"), "none", b)?;
        // 6.15 and later split the filters by the layer that evaluates
        // them (`core_filters/`: addr, target; `ops_filters/`: anon, memcg,
        // young; Documentation/admin-guide/mm/damon/usage.rst) and keep the
        // mixed `filters/` only as a deprecated alias: where the split
        // directories exist the filters go there and `filters/` is emptied.
        if d.join("core_filters").is_dir() && d.join("ops_filters").is_dir() {
            write_count(&d.join("filters/nr_filters"), 0, b)?;
            let (core, ops): (Vec<&Filter>, Vec<&Filter>) =
                s.filters.iter().partition(|f| f.kind.is_core_layer());
            write_filters(&d.join("core_filters"), &core, b)?;
            write_filters(&d.join("ops_filters"), &ops, b)?;
        } else {
            let all: Vec<&Filter> = s.filters.iter().collect();
            write_filters(&d.join("filters"), &all, b)?;
        }
        Ok(())
    }

    /// Starts kdamond `idx` (`on` to `state`) and records its kthread pid in
    /// the state file. Already running: records the pid and returns Ok.
    ///
    /// Errors: [`Error::NotClaimed`], [`Error::Busy`], [`Error::Io`] (EINVAL
    /// when the spec is invalid or a vaddr target pid does not exist).
    pub fn start(&self, idx: usize) -> Result<(), Error> {
        let k = self.check_claimed(idx)?;
        if !self.is_running(idx)? {
            write_busy(&k.join("state"), "on", self.busy_backoff)?;
        }
        let pid = self.kdamond_pid(idx)?;
        self.set_recorded_pid(idx, pid)
    }

    /// Makes running kdamond `idx` re-read its files (`commit` to `state`):
    /// an online update after [`write_spec`](Damon::write_spec). Changing the
    /// number of targets or schemes this way works in 6.12.
    ///
    /// Errors: [`Error::NotRunning`], [`Error::NotClaimed`], [`Error::Busy`],
    /// [`Error::Io`].
    pub fn commit(&self, idx: usize) -> Result<(), Error> {
        self.state_command(idx, "commit")
    }

    /// Stops kdamond `idx` (`off` to `state`); stopped already is Ok.
    ///
    /// Errors: [`Error::NotClaimed`], [`Error::Busy`], [`Error::Io`].
    pub fn stop(&self, idx: usize) -> Result<(), Error> {
        self.check_claimed(idx)?;
        self.stop_unchecked(idx)?;
        self.set_recorded_pid(idx, None)
    }

    fn stop_unchecked(&self, idx: usize) -> Result<(), Error> {
        let state = self.kdamond_dir(idx).join("state");
        if !self.is_running(idx)? {
            return Ok(());
        }
        match write_busy(&state, "off", self.busy_backoff) {
            Ok(()) => Ok(()),
            // It stopped by itself between the check and the write (EINVAL).
            Err(_) if !self.is_running(idx)? => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// True when kdamond `idx`'s `state` reads `on` (one small read).
    ///
    /// Errors: [`Error::Io`], [`Error::Parse`].
    pub fn is_running(&self, idx: usize) -> Result<bool, Error> {
        let p = self.kdamond_dir(idx).join("state");
        let s = read_trimmed(&p, self.busy_backoff)?;
        match s.as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err(Error::Parse { path: p, value: s }),
        }
    }

    /// The kthread pid of kdamond `idx` (`pid`; -1 → None).
    ///
    /// Errors: [`Error::Io`], [`Error::Parse`].
    pub fn kdamond_pid(&self, idx: usize) -> Result<Option<u32>, Error> {
        let p = self.kdamond_dir(idx).join("pid");
        let s = read_trimmed(&p, self.busy_backoff)?;
        match s.parse::<i64>() {
            Ok(-1) => Ok(None),
            Ok(v) if v > 0 && v <= u32::MAX as i64 => Ok(Some(v as u32)),
            _ => Err(Error::Parse { path: p, value: s }),
        }
    }

    fn state_command(&self, idx: usize, cmd: &str) -> Result<(), Error> {
        let k = self.check_claimed(idx)?;
        let state = k.join("state");
        if !self.is_running(idx)? {
            return Err(Error::NotRunning { path: state });
        }
        match write_busy(&state, cmd, self.busy_backoff) {
            Err(Error::Io { .. }) if !self.is_running(idx)? => {
                Err(Error::NotRunning { path: state })
            }
            r => r,
        }
    }

    /// Asks running kdamond `idx` to refresh its schemes' tried regions
    /// (`update_schemes_tried_regions`; blocks until the kdamond has filled
    /// them, about one aggregation interval) and returns them per scheme,
    /// each sorted by start address.
    ///
    /// The numbered directories under `tried_regions/` are numbered globally
    /// across schemes in 6.12 (scheme 0: 0..10, scheme 1: 11..18), so every
    /// numeric entry is read whatever its number.
    ///
    /// Errors: [`Error::NotRunning`], [`Error::Busy`], [`Error::Io`],
    /// [`Error::Parse`].
    pub fn tried_regions(&self, idx: usize) -> Result<Vec<Vec<TriedRegion>>, Error> {
        self.state_command(idx, "update_schemes_tried_regions")?;
        let ss = self.kdamond_dir(idx).join("contexts/0/schemes");
        let n: usize = read_num(&ss.join("nr_schemes"))?;
        (0..n)
            .map(|i| read_tried_regions(&ss.join(i.to_string()).join("tried_regions")))
            .collect()
    }

    /// Asks running kdamond `idx` to refresh its schemes' stats
    /// (`update_schemes_stats`) and returns them per scheme.
    ///
    /// Errors: [`Error::NotRunning`], [`Error::Busy`], [`Error::Io`],
    /// [`Error::Parse`].
    pub fn scheme_stats(&self, idx: usize) -> Result<Vec<SchemeStats>, Error> {
        self.state_command(idx, "update_schemes_stats")?;
        let ss = self.kdamond_dir(idx).join("contexts/0/schemes");
        let n: usize = read_num(&ss.join("nr_schemes"))?;
        (0..n)
            .map(|i| read_scheme_stats(&ss.join(i.to_string()).join("stats")))
            .collect()
    }

    /// Stops every kdamond that is ours (claimed by this driver, or — when
    /// nothing was claimed — recorded in the state file and still valid);
    /// when every existing kdamond is ours, writes `nr_kdamonds` 0; removes
    /// the state file. Foreign kdamonds are left alone.
    ///
    /// Errors: [`Error::Io`], [`Error::Busy`].
    pub fn release(&mut self) -> Result<(), Error> {
        if !self.nr_kdamonds_path().exists() {
            let _ = fs::remove_file(&self.state_file);
            self.claimed.clear();
            return Ok(());
        }
        let s = self.survey()?;
        let mine: BTreeSet<usize> = s
            .ours
            .iter()
            .copied()
            .chain(self.claimed.iter().copied())
            .collect();
        for &i in &mine {
            if i < s.nr {
                self.stop_unchecked(i)?;
            }
        }
        if s.nr > 0 && s.foreign.is_none() {
            write_busy(&self.nr_kdamonds_path(), "0", self.busy_backoff)?;
        }
        match fs::remove_file(&self.state_file) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::Io {
                    path: self.state_file.clone(),
                    source: e,
                })
            }
        }
        self.claimed.clear();
        *self.record.lock().unwrap_or_else(|e| e.into_inner()) = StateRecord::default();
        Ok(())
    }
}

/// Writes `filters` into a filters directory (`filters/`, `core_filters/`
/// or `ops_filters/`): the count, then each filter's type, `matching` and
/// argument files.
fn write_filters(dir: &Path, filters: &[&Filter], b: Duration) -> Result<(), Error> {
    write_count(&dir.join("nr_filters"), filters.len(), b)?;
    for (i, f) in filters.iter().enumerate() {
        let fd = dir.join(i.to_string());
        let ty = match &f.kind {
            FilterKind::Anon => "anon",
            FilterKind::Memcg(_) => "memcg",
            FilterKind::Young => "young",
            FilterKind::Addr { .. } => "addr",
            FilterKind::Target(_) => "target",
        };
        write_busy(&fd.join("type"), ty, b)?;
        write_busy(&fd.join("matching"), if f.matching { "Y" } else { "N" }, b)?;
        match &f.kind {
            // No trailing newline: 6.12 stores memcg_path verbatim, and a
            // newline would make it match no cgroup.
            FilterKind::Memcg(p) => write_busy(&fd.join("memcg_path"), p, b)?,
            FilterKind::Addr { start, end } => {
                write_busy(&fd.join("addr_start"), &start.to_string(), b)?;
                write_busy(&fd.join("addr_end"), &end.to_string(), b)?;
            }
            FilterKind::Target(t) => write_busy(&fd.join("damon_target_idx"), &t.to_string(), b)?,
            FilterKind::Anon | FilterKind::Young => {}
        }
    }
    Ok(())
}

/// Reads one scheme's `tried_regions/` directory: every numeric entry (the
/// numbering is global across schemes), sorted by start.
///
/// Errors: [`Error::Io`], [`Error::Parse`] naming the bad file.
pub fn read_tried_regions(dir: &Path) -> Result<Vec<TriedRegion>, Error> {
    let rd = fs::read_dir(dir).map_err(|e| Error::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| Error::Io {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.is_empty() || !name.bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let d = e.path();
        out.push(TriedRegion {
            start: read_num(&d.join("start"))?,
            end: read_num(&d.join("end"))?,
            nr_accesses: read_num(&d.join("nr_accesses"))?,
            age: read_num(&d.join("age"))?,
        });
    }
    out.sort_unstable_by_key(|r| r.start);
    Ok(out)
}

/// Reads one scheme's `stats/` directory.
///
/// Errors: [`Error::Io`], [`Error::Parse`].
pub fn read_scheme_stats(dir: &Path) -> Result<SchemeStats, Error> {
    Ok(SchemeStats {
        nr_tried: read_num(&dir.join("nr_tried"))?,
        sz_tried: read_num(&dir.join("sz_tried"))?,
        nr_applied: read_num(&dir.join("nr_applied"))?,
        sz_applied: read_num(&dir.join("sz_applied"))?,
        qt_exceeds: read_num(&dir.join("qt_exceeds"))?,
    })
}

/// Top-level and nested `System RAM` ranges of an iomem file, merged when
/// adjacent, as `min..max` with `max` exclusive (DAMON region end).
fn system_ram(iomem: &Path) -> Result<Vec<Range>, Error> {
    let text = fs::read_to_string(iomem).map_err(|e| Error::Io {
        path: iomem.to_path_buf(),
        source: e,
    })?;
    let mut out: Vec<Range> = Vec::new();
    for line in text.lines() {
        let Some((span, name)) = line.trim_start().split_once(" : ") else {
            continue;
        };
        if !name.starts_with("System RAM") {
            continue;
        }
        let bad = || Error::Parse {
            path: iomem.to_path_buf(),
            value: line.to_string(),
        };
        let (a, b) = span.split_once('-').ok_or_else(bad)?;
        let a = u64::from_str_radix(a, 16).map_err(|_| bad())?;
        let b = u64::from_str_radix(b, 16).map_err(|_| bad())?;
        if b <= a {
            continue;
        }
        out.push(Range {
            min: a,
            max: b.saturating_add(1),
        });
    }
    out.sort_by_key(|r| r.min);
    let mut merged: Vec<Range> = Vec::new();
    for r in out {
        match merged.last_mut() {
            Some(l) if r.min <= l.max => l.max = l.max.max(r.max),
            _ => merged.push(r),
        }
    }
    if merged.is_empty() {
        return Err(Error::Spec {
            path: iomem.to_path_buf(),
            detail: "no System RAM ranges (addresses read as 0 unless root): paddr needs them as its monitoring regions".into(),
        });
    }
    Ok(merged)
}

/// Reads a kdamond's `state` or `pid`, retrying EBUSY like [`write_busy`]:
/// their show functions can take the sysfs lock with `mutex_trylock`
/// (mm/damon/sysfs.c), and a read of `state` that met another writer was
/// seen to fail with EBUSY in the emulated host.
fn read_trimmed(p: &Path, backoff: Duration) -> Result<String, Error> {
    retry_busy(p, backoff, || fs::read_to_string(p)).map(|s| s.trim().to_string())
}

/// Reads a small numeric file with one `read` into a stack buffer (tried
/// regions are four files each; this is the hot path of the driver).
fn read_num<T: std::str::FromStr>(p: &Path) -> Result<T, Error> {
    use std::io::Read;
    let io = |e| Error::Io {
        path: p.to_path_buf(),
        source: e,
    };
    let mut f = fs::File::open(p).map_err(io)?;
    let mut buf = [0u8; 64];
    let mut n = 0;
    loop {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if n == buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    let text = String::from_utf8_lossy(&buf[..n]);
    let s = text.trim();
    s.parse().map_err(|_| Error::Parse {
        path: p.to_path_buf(),
        value: s.to_string(),
    })
}

/// Writes `value` (no newline) in one write, without creating the file,
/// retrying EBUSY with a 20..200 ms backoff.
fn write_busy(p: &Path, value: &str, backoff: Duration) -> Result<(), Error> {
    retry_busy(p, backoff, || {
        if injected_busy() {
            return Err(std::io::Error::from_raw_os_error(libc_ebusy()));
        }
        fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(p)
            .and_then(|mut f| f.write_all(value.as_bytes()))
    })
}

/// Runs `op` on DAMON sysfs file `p` up to [`BUSY_ATTEMPTS`] times while it
/// fails with EBUSY (the interface's lock is taken with `mutex_trylock`),
/// sleeping `backoff`, doubling to 200 ms, between attempts.
///
/// Errors: [`Error::Busy`] after the last attempt, [`Error::Io`] for any
/// other failure.
fn retry_busy<T>(
    p: &Path,
    backoff: Duration,
    mut op: impl FnMut() -> io::Result<T>,
) -> Result<T, Error> {
    let mut delay = backoff;
    for attempt in 1..=BUSY_ATTEMPTS {
        match op() {
            Ok(v) => return Ok(v),
            Err(e) if e.raw_os_error() == Some(libc_ebusy()) => {
                if attempt == BUSY_ATTEMPTS {
                    break;
                }
                BUSY_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(200));
            }
            Err(e) => {
                return Err(Error::Io {
                    path: p.to_path_buf(),
                    source: e,
                })
            }
        }
    }
    Err(Error::Busy {
        path: p.to_path_buf(),
    })
}

/// Writes a count file (`nr_*`) only when it differs: writing one removes and
/// recreates every directory below it.
fn write_count(p: &Path, n: usize, backoff: Duration) -> Result<(), Error> {
    if read_num::<usize>(p).ok() == Some(n) {
        return Ok(());
    }
    write_busy(p, &n.to_string(), backoff)
}

/// EBUSY on Linux (all architectures).
const fn libc_ebusy() -> i32 {
    16
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// iomem-shaped lines with arbitrary hex spans and names, and the
        /// numeric files of tried regions and scheme stats with arbitrary
        /// bytes, never panic the readers; errors name the file.
        #[test]
        fn readers_never_panic_and_errors_name_the_file(
            spans in proptest::collection::vec(
                ("[0-9a-fA-F]{0,17}", "[0-9a-fA-F-]{0,17}", "(System RAM|Reserved|PCI Bus|System RAM x|)"),
                0..12,
            ),
            junk in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let d = tempfile::tempdir().unwrap();
            let iomem = d.path().join("iomem");
            let text: String = spans
                .iter()
                .map(|(a, b, n)| format!("  {a}-{b} : {n}\n"))
                .collect();
            fs::write(&iomem, text).unwrap();
            if let Err(e) = system_ram(&iomem) {
                prop_assert!(e.to_string().contains("iomem"), "{}", e);
            }
            let r = d.path().join("tried/0");
            fs::create_dir_all(&r).unwrap();
            for f in ["start", "end", "nr_accesses", "age"] {
                fs::write(r.join(f), &junk).unwrap();
            }
            if let Err(e) = read_tried_regions(&d.path().join("tried")) {
                prop_assert!(e.to_string().contains("tried/0/start"), "{}", e);
            }
            let st = d.path().join("stats");
            fs::create_dir_all(&st).unwrap();
            for f in ["nr_tried", "sz_tried", "nr_applied", "sz_applied", "qt_exceeds"] {
                fs::write(st.join(f), &junk).unwrap();
            }
            if let Err(e) = read_scheme_stats(&st) {
                prop_assert!(e.to_string().contains("stats/nr_tried"), "{}", e);
            }
        }
    }
}

#[cfg(test)]
mod busy {
    use super::*;

    /// EBUSY is tried again (a read of `state` met it in the emulated host
    /// while another command held the sysfs lock); the last attempt's
    /// EBUSY is [`Error::Busy`]; any other error is [`Error::Io`] at once.
    #[test]
    fn ebusy_is_retried_and_other_errors_are_not() {
        let p = Path::new("/sys/kernel/mm/damon/admin/kdamonds/0/state");
        let ebusy = || io::Error::from_raw_os_error(libc_ebusy());
        let mut calls = 0;
        let r = retry_busy(p, Duration::ZERO, || {
            calls += 1;
            if calls < 3 {
                Err(ebusy())
            } else {
                Ok("on\n".to_string())
            }
        });
        assert_eq!(r.unwrap(), "on\n");
        assert_eq!(calls, 3);

        calls = 0;
        let r: Result<(), _> = retry_busy(p, Duration::ZERO, || {
            calls += 1;
            Err(ebusy())
        });
        assert!(matches!(r, Err(Error::Busy { .. })), "{r:?}");
        assert_eq!(calls, BUSY_ATTEMPTS);

        calls = 0;
        let r: Result<(), _> = retry_busy(p, Duration::ZERO, || {
            calls += 1;
            Err(io::Error::from_raw_os_error(2))
        });
        let e = r.unwrap_err();
        assert!(matches!(e, Error::Io { .. }) && e.to_string().contains("kdamonds/0/state"));
        assert_eq!(calls, 1);
    }
}
