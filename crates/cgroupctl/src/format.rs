//! Typed readings of cgroup v2 files and their pure parsers.
//!
//! Each parser takes the whole file as text and returns the value or a
//! [`Bad`]: the 1-based line and what was wrong with it. [`crate::CgroupFs`]
//! adds the path. Formats are those of Documentation/admin-guide/cgroup-v2.rst
//! (Linux 6.12) and the kernel's `memory_stat_format()` / `psi_show()`.

use std::collections::BTreeMap;

use crate::NodeSet;

/// A parse failure before the path is known: 1-based line and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bad {
    pub line: usize,
    pub reason: String,
}

fn bad(line: usize, reason: impl Into<String>) -> Bad {
    Bad {
        line,
        reason: reason.into(),
    }
}

/// Lines with their 1-based numbers; a file with no non-blank line is an error
/// for formats that always have content.
fn nonempty_lines(text: &str) -> Result<impl Iterator<Item = (usize, &str)>, Bad> {
    if text.trim().is_empty() {
        return Err(bad(1, "file is empty"));
    }
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty()))
}

fn parse_u64(line: usize, what: &str, t: &str) -> Result<u64, Bad> {
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(
            line,
            format!("{what}: expected an unsigned integer, found {t:?}"),
        ));
    }
    t.parse::<u64>()
        .map_err(|_| bad(line, format!("{what}: {t} does not fit in 64 bits")))
}

/// A single unsigned integer on one line (`memory.current`: bytes).
pub(crate) fn parse_single_u64(text: &str, what: &str) -> Result<u64, Bad> {
    let mut lines = nonempty_lines(text)?;
    let (n, l) = lines.next().expect("nonempty");
    if let Some((n2, _)) = lines.next() {
        return Err(bad(n2, format!("{what}: expected one line")));
    }
    parse_u64(n, what, l.trim())
}

/// A memory limit or protection: `memory.min`, `memory.low`, `memory.high`,
/// `memory.max`. The kernel prints `max` for "no limit" (`PAGE_COUNTER_MAX`),
/// else bytes (a multiple of the page size once written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// `max`: no limit (for `memory.low`/`memory.min`: protect everything).
    Max,
    Bytes(u64),
}

impl Limit {
    /// The byte value, with `Max` as `u64::MAX` (for comparisons only).
    pub fn as_bytes_saturating(self) -> u64 {
        match self {
            Limit::Max => u64::MAX,
            Limit::Bytes(b) => b,
        }
    }
}

impl std::fmt::Display for Limit {
    /// The form the kernel reads and writes: `max` or a decimal byte count.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Max => f.write_str("max"),
            Limit::Bytes(b) => write!(f, "{b}"),
        }
    }
}

pub(crate) fn parse_limit(text: &str, what: &str) -> Result<Limit, Bad> {
    if text.trim() == "max" {
        return Ok(Limit::Max);
    }
    parse_single_u64(text, what)
        .map(Limit::Bytes)
        .map_err(|b| Bad {
            reason: format!("{} (or \"max\")", b.reason),
            ..b
        })
}

/// `memory.numa_stat`: per-node breakdown of a memcg's memory.
///
/// File shape (cgroup-v2.rst, "memory.numa_stat"), one line per key:
/// `anon N0=1138688 N1=0`, listing every node with memory (`N_MEMORY`).
/// Memory amounts (`anon`, `file`, `shmem`, `kernel_stack`, ...) are in
/// **bytes**; the event counters in it (`pgdemote_kswapd`, `pgdemote_direct`,
/// `pgdemote_khugepaged`, `pgpromote_success`, `workingset_*`) are in **pages**
/// or events. Every key is kept so that new kernels' keys are not lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaStat {
    /// key → node → value, in the file's units (see above).
    pub stats: BTreeMap<String, BTreeMap<u32, u64>>,
}

impl NumaStat {
    /// Value of `key` on `node`, if the file has it.
    pub fn get(&self, key: &str, node: u32) -> Option<u64> {
        self.stats.get(key)?.get(&node).copied()
    }

    /// Bytes of anonymous memory on `node`: brk/sbrk/`MAP_ANONYMOUS` mappings,
    /// anonymous THP included (cgroup-v2.rst). Swapped-out pages are not in it.
    /// 0 if the node or key is absent.
    pub fn anon_bytes(&self, node: u32) -> u64 {
        self.get("anon", node).unwrap_or(0)
    }

    /// Bytes of file-backed memory on `node`: page cache, *including tmpfs and
    /// shared memory* (`shmem`, SysV and `MAP_SHARED|MAP_ANONYMOUS`), which the
    /// kernel counts under `file`, not `anon` (cgroup-v2.rst). 0 if absent.
    pub fn file_bytes(&self, node: u32) -> u64 {
        self.get("file", node).unwrap_or(0)
    }

    /// Bytes of user memory on `node` that can be migrated between tiers:
    /// `anon + file` (so shmem is counted once, in `file`). Kernel memory
    /// (slab, stacks, page tables) is not included: it is not demotable.
    pub fn resident_bytes(&self, node: u32) -> u64 {
        self.anon_bytes(node) + self.file_bytes(node)
    }

    /// Every node that appears under any key.
    pub fn nodes(&self) -> NodeSet {
        self.stats
            .values()
            .flat_map(|m| m.keys().copied())
            .collect()
    }
}

pub(crate) fn parse_numa_stat(text: &str) -> Result<NumaStat, Bad> {
    let mut out = NumaStat::default();
    for (n, l) in nonempty_lines(text)? {
        let mut toks = l.split_whitespace();
        let key = toks.next().expect("nonblank");
        if key.contains('=') {
            return Err(bad(n, format!("expected `key N0=value ...`, found {l:?}")));
        }
        let mut per_node = BTreeMap::new();
        for t in toks {
            let (node, value) = t
                .strip_prefix('N')
                .and_then(|r| r.split_once('='))
                .ok_or_else(|| bad(n, format!("{key}: expected N<node>=<value>, found {t:?}")))?;
            let node = u32::try_from(parse_u64(n, key, node)?)
                .map_err(|_| bad(n, format!("{key}: node id {node} too large")))?;
            if per_node.insert(node, parse_u64(n, key, value)?).is_some() {
                return Err(bad(n, format!("{key}: node N{node} listed twice")));
            }
        }
        if per_node.is_empty() {
            return Err(bad(n, format!("{key}: no per-node values")));
        }
        if out.stats.insert(key.to_owned(), per_node).is_some() {
            return Err(bad(n, format!("key {key} appears twice")));
        }
    }
    Ok(out)
}

/// `memory.stat`: flat `key value` lines (cgroup-v2.rst, "memory.stat").
/// Memory amounts (`anon`, `file`, ...) are bytes; event counters
/// (`pg*`, `numa_*`, `workingset_*`) are counts of pages or events.
/// Every key is kept; the accessors return 0 for a key the kernel does not
/// report (`pgdemote_*` need Linux ≥ 6.1 for memcg, `numa_*` need
/// `CONFIG_NUMA_BALANCING`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryStat {
    pub stats: BTreeMap<String, u64>,
}

macro_rules! accessor {
    ($(#[$m:meta])* $name:ident, $key:literal) => {
        $(#[$m])*
        pub fn $name(&self) -> u64 {
            self.get($key).unwrap_or(0)
        }
    };
}

impl MemoryStat {
    pub fn get(&self, key: &str) -> Option<u64> {
        self.stats.get(key).copied()
    }
    accessor!(
        /// `anon`, bytes: anonymous memory, anonymous THP included.
        anon_bytes, "anon");
    accessor!(
        /// `file`, bytes: page cache including tmpfs and shared memory.
        file_bytes, "file");
    accessor!(
        /// `pgdemote_kswapd`, pages demoted to a lower tier by kswapd.
        pgdemote_kswapd, "pgdemote_kswapd");
    accessor!(
        /// `pgdemote_direct`, pages demoted by direct reclaim; on 6.12
        /// `memory.reclaim` writes count here too (it reclaims in the
        /// writer's context).
        pgdemote_direct, "pgdemote_direct");
    accessor!(
        /// `pgdemote_proactive`, pages demoted by `memory.reclaim` (and
        /// `lru_gen` eviction) on kernels that count proactive reclaim
        /// apart (7.3; 0 where the key is absent, as on 6.12, which counts
        /// them in `pgdemote_direct`).
        pgdemote_proactive, "pgdemote_proactive");
    accessor!(
        /// `pgdemote_khugepaged`, pages demoted by khugepaged.
        pgdemote_khugepaged, "pgdemote_khugepaged");
    accessor!(
        /// `pgpromote_success`, pages promoted by NUMA balancing (mode 2).
        pgpromote_success, "pgpromote_success");
    accessor!(
        /// `numa_hint_faults`, NUMA-balancing hint faults (events).
        numa_hint_faults, "numa_hint_faults");
    accessor!(
        /// `numa_pages_migrated`, pages migrated by NUMA balancing.
        numa_pages_migrated, "numa_pages_migrated");
    accessor!(
        /// `numa_pte_updates`, PTEs made inaccessible to take hint faults.
        numa_pte_updates, "numa_pte_updates");
}

/// A flat keyed file (cgroup-v2.rst "Format": `KEY VALUE` per line), every
/// value a u64.
fn parse_flat_keyed(text: &str) -> Result<BTreeMap<String, u64>, Bad> {
    let mut out = BTreeMap::new();
    for (n, l) in nonempty_lines(text)? {
        let toks: Vec<&str> = l.split_whitespace().collect();
        let [key, value] = toks[..] else {
            return Err(bad(n, format!("expected `key value`, found {l:?}")));
        };
        let v = parse_u64(n, key, value)?;
        if out.insert(key.to_owned(), v).is_some() {
            return Err(bad(n, format!("key {key} appears twice")));
        }
    }
    Ok(out)
}

pub(crate) fn parse_memory_stat(text: &str) -> Result<MemoryStat, Bad> {
    parse_flat_keyed(text).map(|stats| MemoryStat { stats })
}

/// `cpu.stat`: the cgroup's CPU time, microseconds, cumulative
/// (cgroup-v2.rst "CPU Interface Files"). `usage_usec`, `user_usec` and
/// `system_usec` are there whether or not the cpu controller is enabled;
/// the throttling keys only where it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuStat {
    pub stats: BTreeMap<String, u64>,
}

impl CpuStat {
    pub fn get(&self, key: &str) -> Option<u64> {
        self.stats.get(key).copied()
    }
    accessor!(
        /// `usage_usec`, µs: CPU time of the cgroup's tasks, user + system.
        usage_usec, "usage_usec");
    accessor!(
        /// `user_usec`, µs: user CPU time.
        user_usec, "user_usec");
    accessor!(
        /// `system_usec`, µs: system CPU time.
        system_usec, "system_usec");
}

pub(crate) fn parse_cpu_stat(text: &str) -> Result<CpuStat, Bad> {
    let stats = parse_flat_keyed(text)?;
    if !stats.contains_key("usage_usec") {
        return Err(bad(1, "no usage_usec line"));
    }
    Ok(CpuStat { stats })
}

/// One line of a PSI file (Documentation/accounting/psi.rst): share of wall
/// time stalled, as percentages averaged over 10 s, 60 s and 300 s, and the
/// total stall time in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_us: u64,
}

/// `memory.pressure`: `some` (at least one task stalled on memory) and `full`
/// (all non-idle tasks stalled). `full` is `None` only if the kernel did not
/// print it (it prints it for memory in every cgroup on 6.12).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Psi {
    pub some: PsiLine,
    pub full: Option<PsiLine>,
}

fn parse_psi_line(n: usize, kind: &str, rest: &str) -> Result<PsiLine, Bad> {
    let (mut a10, mut a60, mut a300, mut total) = (None, None, None, None);
    for t in rest.split_whitespace() {
        let (k, v) = t
            .split_once('=')
            .ok_or_else(|| bad(n, format!("{kind}: expected key=value, found {t:?}")))?;
        let avg = |v: &str| -> Result<f64, Bad> {
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                _ => Err(bad(
                    n,
                    format!("{kind} {k}: expected a percentage, found {v:?}"),
                )),
            }
        };
        match k {
            "avg10" => a10 = Some(avg(v)?),
            "avg60" => a60 = Some(avg(v)?),
            "avg300" => a300 = Some(avg(v)?),
            "total" => total = Some(parse_u64(n, &format!("{kind} total"), v)?),
            _ => {} // a future kernel's extra field
        }
    }
    match (a10, a60, a300, total) {
        (Some(avg10), Some(avg60), Some(avg300), Some(total_us)) => Ok(PsiLine {
            avg10,
            avg60,
            avg300,
            total_us,
        }),
        _ => Err(bad(
            n,
            format!("{kind}: needs avg10, avg60, avg300 and total"),
        )),
    }
}

pub(crate) fn parse_psi(text: &str) -> Result<Psi, Bad> {
    let (mut some, mut full) = (None, None);
    for (n, l) in nonempty_lines(text)? {
        let (kind, rest) = l.split_once(' ').unwrap_or((l, ""));
        let slot = match kind {
            "some" => &mut some,
            "full" => &mut full,
            _ => {
                return Err(bad(
                    n,
                    format!("expected a `some` or `full` line, found {l:?}"),
                ))
            }
        };
        if slot.is_some() {
            return Err(bad(n, format!("{kind} line appears twice")));
        }
        *slot = Some(parse_psi_line(n, kind, rest)?);
    }
    let some = some.ok_or_else(|| bad(1, "no `some` line"))?;
    Ok(Psi { some, full })
}

/// `cgroup.procs`: one PID per line, possibly none.
pub(crate) fn parse_procs(text: &str) -> Result<Vec<i32>, Bad> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.is_empty() {
            continue;
        }
        match t.parse::<i32>() {
            Ok(p) if p > 0 => out.push(p),
            _ => return Err(bad(i + 1, format!("expected a PID, found {t:?}"))),
        }
    }
    Ok(out)
}

/// `cgroup.controllers` / `cgroup.subtree_control`: space-separated names on
/// one line, possibly empty.
pub(crate) fn parse_controllers(text: &str) -> Result<Vec<String>, Bad> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, l)) = lines.next() else {
        return Ok(Vec::new());
    };
    if let Some((n, _)) = lines.next() {
        return Err(bad(n + 1, "expected one line of controller names"));
    }
    let names: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
    if let Some(bad_name) = names
        .iter()
        .find(|c| !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    {
        return Err(bad(1, format!("{bad_name:?} is not a controller name")));
    }
    Ok(names)
}

/// A node list file (`cpuset.mems`, `cpuset.mems.effective`).
pub(crate) fn parse_nodeset(text: &str) -> Result<NodeSet, Bad> {
    if text.trim().lines().count() > 1 {
        return Err(bad(2, "expected one line"));
    }
    NodeSet::parse(text).map_err(|e| bad(1, e.to_string()))
}
