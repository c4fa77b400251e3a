//! NUMA topology and memory tiers, from sysfs.
//!
//! Sources (all under a root directory, [`DEFAULT_SYSFS_ROOT`] on a host):
//! - `devices/system/node/online`: the online nodes, in list syntax
//!   (Documentation/ABI/stable/sysfs-devices-node); if absent, the `node<N>`
//!   directories.
//! - `devices/system/node/node<N>/cpulist`: the node's CPUs. A node with
//!   memory and no CPUs is how CXL (and PMEM) memory appears: a candidate
//!   lower tier.
//! - `devices/system/node/node<N>/meminfo`: `Node 0 MemTotal:  1014196 kB`.
//! - `devices/virtual/memory_tiering/memory_tier<T>/nodelist`
//!   (Documentation/ABI/testing/sysfs-kernel-mm-memory-tiers, Linux ≥ 6.1):
//!   the kernel's memory tiers. `T` is the tier's abstract distance divided
//!   by the chunk size (`MEMTIER_CHUNK_BITS`); **a lower `T` is a faster
//!   tier**. DRAM lands in tier 4 by default; CXL and HMAT-described slower
//!   memory in higher tiers. The top tier is the lowest-numbered tier that has
//!   memory.
//! - `devices/system/node/node<N>/access0/initiators/{read,write}_{latency,bandwidth}`
//!   (Documentation/admin-guide/mm/numaperf.rst): HMAT performance from the
//!   nearest initiator, latency in nanoseconds, bandwidth in MB/s. Only on
//!   hosts whose firmware provides an HMAT.
//!
//! Without `memory_tiering` (an older kernel, `CONFIG_NUMA` without tiers, or
//! an empty directory) every node is treated as one tier,
//! [`KERNEL_DRAM_TIER`], and [`Topology::kernel_tiers`] is false: such a host
//! has no lower tier as far as the kernel's demotion is concerned.
//!
//! Needs: std, `thiserror`, `cgroupctl::NodeSet`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use cgroupctl::NodeSet;

/// Where sysfs is mounted.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys";

/// The tier id the kernel gives DRAM (`MEMTIER_ADISTANCE_DRAM >>
/// MEMTIER_CHUNK_BITS` = 4), used for the single synthetic tier of a host
/// without `memory_tiering`.
pub const KERNEL_DRAM_TIER: u32 = 4;

const NODE_DIR: &str = "devices/system/node";
const TIER_DIR: &str = "devices/virtual/memory_tiering";

/// Errors reading the topology; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: line {line}: {reason}", path.display())]
    Parse {
        path: PathBuf,
        /// 1-based line of the file.
        line: usize,
        reason: String,
    },
    /// Neither `node/online` nor any `node<N>` directory: not a NUMA sysfs.
    #[error("{}: no NUMA nodes found (no `online` file and no node<N> directories)", .0.display())]
    NoNodes(PathBuf),
}

pub type Result<T, E = TopologyError> = std::result::Result<T, E>;

/// The kernel's free-memory reserve of each node, in pages: the sum over the
/// node's zones of the `high` watermark (or `promo`, where the kernel has it
/// and it is higher: NUMA balancing's promotion watermark), from
/// `/proc/zoneinfo` (mm/vmstat.c `zoneinfo_show_print`). kswapd runs, and
/// demotes, whenever a zone's free pages drop below `low`, until they reach
/// `high`.
///
/// Errors: [`TopologyError::Parse`] naming `path` when a `Node N, zone`
/// header has no node number or a watermark line no number.
pub fn zone_reserve_pages(path: &Path, text: &str) -> Result<BTreeMap<u32, u64>> {
    let mut out: BTreeMap<u32, u64> = BTreeMap::new();
    let mut node: Option<u32> = None;
    // Per zone: (high, promo).
    let mut zone = (0u64, 0u64);
    let flush = |out: &mut BTreeMap<u32, u64>, node: Option<u32>, zone: (u64, u64)| {
        if let Some(n) = node {
            *out.entry(n).or_default() += zone.0.max(zone.1);
        }
    };
    for l in zoneinfo_lines(path, text) {
        match l? {
            ZoneLine::Zone(n) => {
                flush(&mut out, node, zone);
                zone = (0, 0);
                node = Some(n);
            }
            ZoneLine::Pair { key, val, line, .. } => {
                let slot = match key {
                    "high" => &mut zone.0,
                    "promo" => &mut zone.1,
                    _ => continue,
                };
                *slot = val.parse().map_err(|_| {
                    parse_error(
                        path,
                        line,
                        format!("watermark {key} is not a number: {val:?}"),
                    )
                })?;
            }
        }
    }
    flush(&mut out, node, zone);
    Ok(out)
}

/// One line of `/proc/zoneinfo` as the parsers here read it.
enum ZoneLine<'a> {
    /// `Node N, zone NAME`: a zone section of node N starts.
    Zone(u32),
    /// A line of exactly two fields, `key value`, in the section of `node`
    /// (None before the first header); `line` is 1-based.
    Pair {
        node: Option<u32>,
        key: &'a str,
        val: &'a str,
        line: usize,
    },
}

/// The zone headers and `key value` lines of a zoneinfo text, in order;
/// an `Err` for a header without a node number.
fn zoneinfo_lines<'a>(
    path: &'a Path,
    text: &'a str,
) -> impl Iterator<Item = Result<ZoneLine<'a>>> + 'a {
    let mut node = None;
    text.lines().enumerate().filter_map(move |(i, line)| {
        if let Some(rest) = line.strip_prefix("Node ") {
            let id = rest.split(',').next().unwrap_or("").trim();
            return Some(match id.parse() {
                Ok(n) => {
                    node = Some(n);
                    Ok(ZoneLine::Zone(n))
                }
                Err(_) => Err(parse_error(
                    path,
                    i + 1,
                    format!("no node number in {line:?}"),
                )),
            });
        }
        let mut f = line.split_whitespace();
        let (Some(key), Some(val), None) = (f.next(), f.next(), f.next()) else {
            return None;
        };
        Some(Ok(ZoneLine::Pair {
            node,
            key,
            val,
            line: i + 1,
        }))
    })
}

fn parse_error(path: &Path, line: usize, reason: String) -> TopologyError {
    TopologyError::Parse {
        path: path.to_path_buf(),
        line,
        reason,
    }
}

/// Nodes the kernel has given up reclaiming: `node_unreclaimable: 1` in
/// `/proc/zoneinfo` (mm/vmstat.c `zoneinfo_show_print`; the line is
/// `pgdat->kswapd_failures >= MAX_RECLAIM_RETRIES`). After 16 kswapd runs in
/// a row that reclaimed nothing (every memcg on the node protected, say),
/// `wakeup_kswapd()` no longer wakes kswapd for the node, so neither
/// reclaim-time demotion nor NUMA-balancing promotion into it (which needs
/// free pages above the high watermark, and asks kswapd for them) happens
/// again until some reclaim through `shrink_node()` — direct reclaim, or a
/// `memory.reclaim` write — frees a page there (mm/vmscan.c). MGLRU's
/// debugfs eviction command does not count.
///
/// Errors: [`TopologyError::Parse`] naming `path` when a `Node N, zone`
/// header has no node number or the flag is not a number.
pub fn unreclaimable_nodes(path: &Path, text: &str) -> Result<BTreeSet<u32>> {
    let mut out = BTreeSet::new();
    for l in zoneinfo_lines(path, text) {
        let ZoneLine::Pair {
            node,
            key: "node_unreclaimable:",
            val,
            line,
        } = l?
        else {
            continue;
        };
        let flag: u32 = val.parse().map_err(|_| {
            parse_error(
                path,
                line,
                format!("node_unreclaimable is not a number: {val:?}"),
            )
        })?;
        if let (Some(n), true) = (node, flag != 0) {
            out.insert(n);
        }
    }
    Ok(out)
}

/// HMAT access attributes of a node as seen from its nearest initiator
/// (`access0`). Zero means the firmware gave no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hmat {
    pub read_latency_ns: u64,
    pub write_latency_ns: u64,
    /// MB/s, as the kernel reports it.
    pub read_bandwidth_mb_s: u64,
    pub write_bandwidth_mb_s: u64,
}

/// One online NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub id: u32,
    /// Number of CPUs on the node; 0 for CXL/PMEM memory-only nodes.
    pub cpus: usize,
    /// `MemTotal` from the node's meminfo, bytes (0 for a memoryless node).
    pub mem_total_bytes: u64,
    /// `MemFree`, bytes; refreshed by [`Topology::refresh_free`].
    pub mem_free_bytes: u64,
    /// The memory tier holding the node; `None` if no tier lists it (a node
    /// without memory).
    pub tier: Option<u32>,
    pub hmat: Option<Hmat>,
}

impl NodeInfo {
    /// A node with memory and no CPUs: how CXL memory shows up.
    pub fn is_cpuless_memory(&self) -> bool {
        self.cpus == 0 && self.mem_total_bytes > 0
    }
}

/// A memory tier: its kernel id (lower = faster) and its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    pub id: u32,
    pub nodes: NodeSet,
}

/// The host's nodes (ascending id) and memory tiers (ascending id, so
/// fastest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub nodes: Vec<NodeInfo>,
    pub tiers: Vec<Tier>,
    /// True if the tiers come from `memory_tiering`; false if it was absent
    /// and all nodes were put in one synthetic tier.
    pub kernel_tiers: bool,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> TopologyError + '_ {
    move |source| TopologyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn parse_err(path: &Path, line: usize, reason: impl Into<String>) -> TopologyError {
    TopologyError::Parse {
        path: path.to_path_buf(),
        line,
        reason: reason.into(),
    }
}

pub(crate) fn read(path: &Path) -> Result<String> {
    let bytes = fs::read(path).map_err(io_err(path))?;
    String::from_utf8(bytes).map_err(|_| parse_err(path, 1, "not UTF-8 text"))
}

/// A file holding one list (`online`, `cpulist`, `nodelist`).
fn read_list(path: &Path) -> Result<NodeSet> {
    let text = read(path)?;
    if text.trim().lines().count() > 1 {
        return Err(parse_err(path, 2, "expected one line"));
    }
    NodeSet::parse(&text).map_err(|e| parse_err(path, 1, e.to_string()))
}

/// A file holding one unsigned integer (HMAT attributes).
fn read_u64(path: &Path) -> Result<u64> {
    let text = read(path)?;
    let t = text.trim();
    if t.is_empty() {
        return Err(parse_err(path, 1, "file is empty"));
    }
    t.parse::<u64>().map_err(|_| {
        parse_err(
            path,
            1,
            format!("expected an unsigned integer, found {t:?}"),
        )
    })
}

/// `MemTotal` and `MemFree` of node `id`, in bytes, from its meminfo:
/// lines `Node <id> <Key>: <value> kB` (drivers/base/node.c). Other lines
/// (including `HugePages_*` ones without a unit) are skipped.
fn parse_meminfo(path: &Path, id: u32, text: &str) -> Result<(u64, u64)> {
    if text.trim().is_empty() {
        return Err(parse_err(path, 1, "file is empty"));
    }
    let (mut total, mut free) = (None, None);
    for (i, l) in text.lines().enumerate() {
        let n = i + 1;
        let toks: Vec<&str> = l.split_whitespace().collect();
        let slot = match toks.get(2) {
            Some(&"MemTotal:") => &mut total,
            Some(&"MemFree:") => &mut free,
            _ => continue,
        };
        let [node_kw, node, key, value, unit] = toks[..] else {
            return Err(parse_err(
                path,
                n,
                format!("expected `Node {id} {} <n> kB`, found {l:?}", toks[2]),
            ));
        };
        if node_kw != "Node" || node != id.to_string() {
            return Err(parse_err(
                path,
                n,
                format!("line is for {node_kw} {node}, expected Node {id}"),
            ));
        }
        if unit != "kB" {
            return Err(parse_err(
                path,
                n,
                format!("{key} unit is {unit:?}, expected kB"),
            ));
        }
        let kb = value.parse::<u64>().map_err(|_| {
            parse_err(
                path,
                n,
                format!("{key} expected a number of kB, found {value:?}"),
            )
        })?;
        let bytes = kb
            .checked_mul(1024)
            .ok_or_else(|| parse_err(path, n, format!("{key} {kb} kB overflows bytes")))?;
        if slot.replace(bytes).is_some() {
            return Err(parse_err(path, n, format!("{key} appears twice")));
        }
    }
    match (total, free) {
        (Some(t), Some(f)) => Ok((t, f)),
        (None, _) => Err(parse_err(path, 1, "no MemTotal line")),
        (_, None) => Err(parse_err(path, 1, "no MemFree line")),
    }
}

fn read_meminfo(node_dir: &Path, id: u32) -> Result<(u64, u64)> {
    let path = node_dir.join("meminfo");
    let text = read(&path)?;
    parse_meminfo(&path, id, &text)
}

/// Ids of directories `<prefix><N>` in `dir`, ascending. Other entries are
/// ignored (`node/` also holds `online`, `possible`, `has_cpu`, ...).
fn numbered_dirs(dir: &Path, prefix: &str) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(id) = rest.parse::<u32>() {
            if entry.path().is_dir() {
                ids.push(id);
            }
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

fn read_hmat(node_dir: &Path) -> Result<Option<Hmat>> {
    let dir = node_dir.join("access0/initiators");
    if !dir.is_dir() {
        return Ok(None);
    }
    Ok(Some(Hmat {
        read_latency_ns: read_u64(&dir.join("read_latency"))?,
        write_latency_ns: read_u64(&dir.join("write_latency"))?,
        read_bandwidth_mb_s: read_u64(&dir.join("read_bandwidth"))?,
        write_bandwidth_mb_s: read_u64(&dir.join("write_bandwidth"))?,
    }))
}

/// The kernel's tiers, or `None` if `memory_tiering` is absent or empty.
fn read_tiers(sysfs: &Path) -> Result<Option<Vec<Tier>>> {
    let dir = sysfs.join(TIER_DIR);
    if !dir.is_dir() {
        return Ok(None);
    }
    let mut tiers = Vec::new();
    for id in numbered_dirs(&dir, "memory_tier")? {
        let nodes = read_list(&dir.join(format!("memory_tier{id}/nodelist")))?;
        tiers.push(Tier { id, nodes });
    }
    Ok(if tiers.is_empty() { None } else { Some(tiers) })
}

/// Smallest change of a node's `MemTotal` that counts as capacity going or
/// coming ([`Topology::changes`]): memory hotplug moves whole memory blocks
/// (`/sys/devices/system/memory/block_size_bytes`, 128 MiB or more on
/// x86-64), so 1 MiB ignores nothing real and no rounding noise.
pub const CAPACITY_STEP_BYTES: u64 = 1 << 20;

/// How one node differs between two readings of the topology
/// ([`Topology::changes`]). `None` means the node was not online (before)
/// or is not online any more (after), or had no tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeChange {
    pub node: u32,
    /// `MemTotal` before and after, bytes.
    pub before_bytes: Option<u64>,
    pub after_bytes: Option<u64>,
    /// The kernel memory tier before and after (a node whose memory all
    /// went offline leaves its tier: mm/memory-tiers.c, `MEM_OFFLINE`).
    pub tier_before: Option<u32>,
    pub tier_after: Option<u32>,
}

impl Topology {
    /// Reads nodes and tiers under `sysfs` (normally [`DEFAULT_SYSFS_ROOT`]).
    /// Errors name the file; a host without NUMA sysfs gives
    /// [`TopologyError::NoNodes`].
    pub fn discover(sysfs: impl AsRef<Path>) -> Result<Topology> {
        Self::read(sysfs.as_ref(), None)
    }

    /// The topology as it is now, for the per-interval check of capacity
    /// changes ([`Topology::changes`]): re-reads the online nodes, the
    /// tiers and every node's `meminfo`, and carries each known node's CPU
    /// count and HMAT attributes over from `self` (read only for a node
    /// that is new). Errors as [`Topology::discover`].
    pub fn reread(&self, sysfs: impl AsRef<Path>) -> Result<Topology> {
        Self::read(sysfs.as_ref(), Some(self))
    }

    fn read(sysfs: &Path, known: Option<&Topology>) -> Result<Topology> {
        let node_dir = sysfs.join(NODE_DIR);
        let online = node_dir.join("online");
        let ids: Vec<u32> = if online.is_file() {
            read_list(&online)?.into_iter().collect()
        } else if node_dir.is_dir() {
            numbered_dirs(&node_dir, "node")?
        } else {
            Vec::new()
        };
        if ids.is_empty() {
            return Err(TopologyError::NoNodes(node_dir));
        }

        let kernel = read_tiers(sysfs)?;
        let kernel_tiers = kernel.is_some();
        let tiers = kernel.unwrap_or_else(|| {
            vec![Tier {
                id: KERNEL_DRAM_TIER,
                nodes: ids.iter().copied().collect(),
            }]
        });

        let mut nodes = Vec::with_capacity(ids.len());
        for id in ids {
            let dir = node_dir.join(format!("node{id}"));
            let (mem_total_bytes, mem_free_bytes) = read_meminfo(&dir, id)?;
            let tier = tiers.iter().find(|t| t.nodes.contains(&id)).map(|t| t.id);
            let (cpus, hmat) = match known.and_then(|k| k.node(id)) {
                Some(n) => (n.cpus, n.hmat),
                None => (read_list(&dir.join("cpulist"))?.len(), read_hmat(&dir)?),
            };
            nodes.push(NodeInfo {
                id,
                cpus,
                mem_total_bytes,
                mem_free_bytes,
                tier,
                hmat,
            });
        }
        Ok(Topology {
            nodes,
            tiers,
            kernel_tiers,
        })
    }

    /// Re-reads `MemTotal`/`MemFree` of every known node (memory hotplug can
    /// change the total too); nodes and tiers are not rediscovered. Cheap
    /// enough for every control-loop cycle.
    pub fn refresh_free(&mut self, sysfs: impl AsRef<Path>) -> Result<()> {
        let node_dir = sysfs.as_ref().join(NODE_DIR);
        for n in &mut self.nodes {
            let (total, free) = read_meminfo(&node_dir.join(format!("node{}", n.id)), n.id)?;
            n.mem_total_bytes = total;
            n.mem_free_bytes = free;
        }
        Ok(())
    }

    /// The nodes whose capacity or tier differs in `newer`, by node id:
    /// a node that came or went, memory blocks onlined or offlined
    /// (`MemTotal` moved by [`CAPACITY_STEP_BYTES`] or more), a node moved
    /// between tiers. Free memory is not a change.
    pub fn changes(&self, newer: &Topology) -> Vec<NodeChange> {
        let ids: BTreeSet<u32> = self
            .nodes
            .iter()
            .chain(&newer.nodes)
            .map(|n| n.id)
            .collect();
        ids.into_iter()
            .filter_map(|id| {
                let (a, b) = (self.node(id), newer.node(id));
                let c = NodeChange {
                    node: id,
                    before_bytes: a.map(|n| n.mem_total_bytes),
                    after_bytes: b.map(|n| n.mem_total_bytes),
                    tier_before: a.and_then(|n| n.tier),
                    tier_after: b.and_then(|n| n.tier),
                };
                let moved = match (c.before_bytes, c.after_bytes) {
                    (Some(x), Some(y)) => x.abs_diff(y) >= CAPACITY_STEP_BYTES,
                    (x, y) => x != y,
                };
                (moved || c.tier_before != c.tier_after).then_some(c)
            })
            .collect()
    }

    pub fn node(&self, id: u32) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.id == id)
    }

    fn has_memory(&self, t: &Tier) -> bool {
        t.nodes
            .iter()
            .any(|&id| self.node(id).is_some_and(|n| n.mem_total_bytes > 0))
    }

    /// Tiers that have memory, fastest first.
    pub fn tiers_with_memory(&self) -> impl Iterator<Item = &Tier> {
        self.tiers.iter().filter(|t| self.has_memory(t))
    }

    /// Nodes of the top tier: the lowest-numbered tier with memory. Empty
    /// only if no node has memory.
    pub fn fast_nodes(&self) -> NodeSet {
        self.tiers_with_memory()
            .next()
            .map(|t| t.nodes.clone())
            .unwrap_or_default()
    }

    /// Nodes of every other tier with memory (demotion targets).
    pub fn lower_nodes(&self) -> NodeSet {
        self.tiers_with_memory()
            .skip(1)
            .flat_map(|t| t.nodes.iter().copied())
            .collect()
    }

    /// The node of `nodes` with the most free memory at the last read
    /// (`MemFree`; the lowest id on a tie): where a batch of moves goes.
    /// `None` when none of them is known.
    pub fn most_free(&self, nodes: &NodeSet) -> Option<u32> {
        nodes
            .iter()
            .filter_map(|&n| self.node(n))
            .max_by_key(|n| (n.mem_free_bytes, std::cmp::Reverse(n.id)))
            .map(|n| n.id)
    }

    /// At least two tiers have memory: there is somewhere to demote to.
    pub fn is_tiered(&self) -> bool {
        self.tiers_with_memory().nth(1).is_some()
    }

    fn sum_fast(&self, f: impl Fn(&NodeInfo) -> u64) -> u64 {
        let fast = self.fast_nodes();
        self.nodes
            .iter()
            .filter(|n| fast.contains(&n.id))
            .map(f)
            .sum()
    }

    /// `MemTotal` of the fast tier, bytes.
    pub fn fast_capacity_bytes(&self) -> u64 {
        self.sum_fast(|n| n.mem_total_bytes)
    }

    /// `MemFree` of the fast tier at the last read, bytes.
    pub fn fast_free_bytes(&self) -> u64 {
        self.sum_fast(|n| n.mem_free_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Lines of the captured zoneinfo, shuffled, cut and mixed with
        /// arbitrary ones, never panic the parser; errors name the file.
        #[test]
        fn zoneinfo_parser_never_panics_and_errors_name_the_file(
            picks in proptest::collection::vec((0usize..2000, ".{0,30}", proptest::bool::ANY), 0..40),
        ) {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/linux-6.12/proc/zoneinfo");
            let real: Vec<String> = fs::read_to_string(&path).unwrap().lines().map(String::from).collect();
            let text: Vec<String> = picks
                .iter()
                .map(|(i, junk, keep)| {
                    let l = &real[i % real.len()];
                    if *keep { l.clone() } else { format!("{}{junk}", &l[..l.len() / 2]) }
                })
                .collect();
            if let Err(e) = unreclaimable_nodes(Path::new("/proc/zoneinfo"), &text.join("\n")) {
                proptest::prop_assert!(e.to_string().contains("/proc/zoneinfo"), "{}", e);
            }
            if let Err(e) = zone_reserve_pages(Path::new("/proc/zoneinfo"), &text.join("\n")) {
                proptest::prop_assert!(e.to_string().contains("/proc/zoneinfo"), "{}", e);
            }
        }
    }

    #[test]
    fn unreclaimable_nodes_from_the_guest_zoneinfo() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/linux-6.12/proc/zoneinfo");
        let text = fs::read_to_string(&path).unwrap();
        // Captured from a healthy guest: no node given up.
        assert!(unreclaimable_nodes(&path, &text).unwrap().is_empty());
        // The same file as the kernel prints it once kswapd gave up on node 0
        // (seen in the emulated host: both of node 0's lines flip).
        let mut node = None;
        let hopeless: String = text
            .lines()
            .map(|l| {
                if let Some(rest) = l.strip_prefix("Node ") {
                    node = rest.split(',').next().map(str::to_owned);
                }
                if node.as_deref() == Some("0") && l.trim_start().starts_with("node_unreclaimable:")
                {
                    l.replace(" 0", " 1")
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert_ne!(hopeless, text);
        assert_eq!(
            unreclaimable_nodes(&path, &hopeless).unwrap(),
            BTreeSet::from([0])
        );
        let e = unreclaimable_nodes(
            Path::new("/proc/zoneinfo"),
            "Node 1, zone   Normal\n  node_unreclaimable:  yes\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("/proc/zoneinfo: line 2"), "{e}");
    }

    #[test]
    fn zone_reserve_from_the_guest_zoneinfo() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/linux-6.12/proc/zoneinfo");
        let text = fs::read_to_string(&path).unwrap();
        let r = zone_reserve_pages(&path, &text).unwrap();
        // Node 0: DMA promo 227 + DMA32 promo 14497 + Movable 32 (high =
        // promo there); node 1: DMA32 promo 14840 + Movable 32. About 58 MiB
        // each: THP raises min_free_kbytes on this 1 GiB node.
        assert_eq!(r.get(&0), Some(&(227 + 14497 + 32)));
        assert_eq!(r.get(&1), Some(&(14840 + 32)));
        // pageset `high:` lines (with a colon) are not watermarks.
        let bad = "Node x, zone DMA\n  pages free 1\n        high     2\n";
        let e = zone_reserve_pages(Path::new("/proc/zoneinfo"), bad).unwrap_err();
        assert!(e.to_string().contains("/proc/zoneinfo: line 1"), "{e}");
        let e = zone_reserve_pages(
            Path::new("/proc/zoneinfo"),
            "Node 0, zone DMA\n        high     lots\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    struct Sysfs {
        dir: tempfile::TempDir,
    }

    impl Sysfs {
        fn new() -> Self {
            Sysfs {
                dir: tempfile::tempdir().unwrap(),
            }
        }
        fn root(&self) -> &Path {
            self.dir.path()
        }
        fn file(&self, rel: &str, content: &str) -> &Self {
            let p = self.root().join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, content).unwrap();
            self
        }
        /// A node with `cpulist` and a meminfo of `total_kb`/`free_kb`.
        fn node(&self, id: u32, cpulist: &str, total_kb: u64, free_kb: u64) -> &Self {
            self.file(
                &format!("{NODE_DIR}/node{id}/cpulist"),
                &format!("{cpulist}\n"),
            )
            .file(
                &format!("{NODE_DIR}/node{id}/meminfo"),
                &meminfo(id, total_kb, free_kb),
            )
        }
        fn tier(&self, id: u32, nodelist: &str) -> &Self {
            self.file(
                &format!("{TIER_DIR}/memory_tier{id}/nodelist"),
                &format!("{nodelist}\n"),
            )
        }
    }

    /// A meminfo as drivers/base/node.c prints it (abridged).
    fn meminfo(id: u32, total_kb: u64, free_kb: u64) -> String {
        format!(
            "Node {id} MemTotal:       {total_kb:>8} kB\n\
             Node {id} MemFree:        {free_kb:>8} kB\n\
             Node {id} MemUsed:        {:>8} kB\n\
             Node {id} SwapCached:            0 kB\n\
             Node {id} HugePages_Total:     0\n\
             Node {id} HugePages_Free:      0\n",
            total_kb - free_kb
        )
    }

    fn ns(ids: &[u32]) -> NodeSet {
        NodeSet::from_ids(ids.iter().copied())
    }

    /// The emulated CXL host: node 0 DRAM with CPUs, node 1 CPU-less CXL.
    fn two_tier() -> Sysfs {
        let s = Sysfs::new();
        s.file(&format!("{NODE_DIR}/online"), "0-1\n")
            .file(&format!("{NODE_DIR}/possible"), "0-1\n")
            .node(0, "0-3", 1014196, 500000)
            .node(1, "", 1048576, 1000000)
            .tier(4, "0")
            .tier(22, "1")
            .file(&format!("{TIER_DIR}/uevent"), "");
        for (id, lat, bw) in [(0, "130", "614400"), (1, "250", "76800")] {
            for (f, v) in [
                ("read_latency", lat),
                ("write_latency", lat),
                ("read_bandwidth", bw),
                ("write_bandwidth", bw),
            ] {
                s.file(
                    &format!("{NODE_DIR}/node{id}/access0/initiators/{f}"),
                    &format!("{v}\n"),
                );
            }
        }
        s
    }

    #[test]
    fn two_tier_host() {
        let s = two_tier();
        let t = Topology::discover(s.root()).unwrap();
        assert!(t.kernel_tiers);
        assert_eq!(
            t.tiers,
            vec![
                Tier {
                    id: 4,
                    nodes: ns(&[0])
                },
                Tier {
                    id: 22,
                    nodes: ns(&[1])
                }
            ]
        );
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(
            t.nodes[0],
            NodeInfo {
                id: 0,
                cpus: 4,
                mem_total_bytes: 1014196 * 1024,
                mem_free_bytes: 500000 * 1024,
                tier: Some(4),
                hmat: Some(Hmat {
                    read_latency_ns: 130,
                    write_latency_ns: 130,
                    read_bandwidth_mb_s: 614400,
                    write_bandwidth_mb_s: 614400,
                }),
            }
        );
        assert!(t.nodes[1].is_cpuless_memory());
        assert_eq!(t.nodes[1].tier, Some(22));
        assert_eq!(t.nodes[1].hmat.unwrap().read_latency_ns, 250);
        assert!(t.is_tiered());
        assert_eq!(t.fast_nodes(), ns(&[0]));
        assert_eq!(t.lower_nodes(), ns(&[1]));
        assert_eq!(t.fast_capacity_bytes(), 1014196 * 1024);
        assert_eq!(t.fast_free_bytes(), 500000 * 1024);
    }

    #[test]
    fn refresh_free_rereads_meminfo() {
        let s = two_tier();
        let mut t = Topology::discover(s.root()).unwrap();
        s.node(0, "0-3", 1014196, 1000);
        t.refresh_free(s.root()).unwrap();
        assert_eq!(t.fast_free_bytes(), 1000 * 1024);
        assert_eq!(t.nodes[1].mem_free_bytes, 1000000 * 1024);
    }

    /// `reread` sees what `discover` sees of nodes, tiers and MemTotal
    /// (the capacity check's inputs), and reads CPUs and HMAT only for a
    /// node it did not know.
    #[test]
    fn reread_sees_capacity_and_tiers_as_discover_does() {
        let s = two_tier();
        let t = Topology::discover(s.root()).unwrap();
        // Half of node 1's memory offlined, node 1 moved to another tier.
        s.node(1, "", 524288, 1000).tier(22, "").tier(20, "1");
        let r = t.reread(s.root()).unwrap();
        assert_eq!(r, Topology::discover(s.root()).unwrap());
        assert_eq!(t.changes(&r).len(), 1);
        // CPUs of a known node are carried over, not re-read.
        s.node(0, "0-7", 1014196, 1000);
        assert_eq!(t.reread(s.root()).unwrap().nodes[0].cpus, 4);
        // A node that comes online is read whole.
        s.file(&format!("{NODE_DIR}/online"), "0-2\n")
            .node(2, "", 262144, 262144)
            .tier(20, "1-2");
        let r = t.reread(s.root()).unwrap();
        assert_eq!(r.nodes.len(), 3);
        assert_eq!(r.node(2).map(|n| n.mem_total_bytes), Some(262144 * 1024));
    }

    #[test]
    fn one_tier_host_without_memory_tiering() {
        let s = Sysfs::new();
        s.file(&format!("{NODE_DIR}/online"), "0\n")
            .node(0, "0-1", 2048, 1024);
        let t = Topology::discover(s.root()).unwrap();
        assert!(!t.kernel_tiers);
        assert_eq!(
            t.tiers,
            vec![Tier {
                id: KERNEL_DRAM_TIER,
                nodes: ns(&[0])
            }]
        );
        assert_eq!(t.nodes[0].tier, Some(KERNEL_DRAM_TIER));
        assert_eq!(t.nodes[0].hmat, None);
        assert!(!t.is_tiered());
        assert_eq!(t.fast_nodes(), ns(&[0]));
        assert!(t.lower_nodes().is_empty());
        assert_eq!(t.fast_capacity_bytes(), 2048 * 1024);
    }

    #[test]
    fn cpuless_node_in_dram_tier_is_not_tiered() {
        // Emulated NUMA without HMAT: the CPU-less node lands in tier 4 too.
        let s = Sysfs::new();
        s.file(&format!("{NODE_DIR}/online"), "0-1\n")
            .node(0, "0", 1024, 512)
            .node(1, "", 1024, 1024)
            .tier(4, "0-1");
        let t = Topology::discover(s.root()).unwrap();
        assert!(!t.is_tiered());
        assert_eq!(t.fast_nodes(), ns(&[0, 1]));
        assert_eq!(t.fast_capacity_bytes(), 2048 * 1024);
        // Node 1 has more free memory; an unknown node is skipped.
        assert_eq!(t.most_free(&ns(&[0, 1, 7])), Some(1));
        assert_eq!(t.most_free(&ns(&[0])), Some(0));
        assert_eq!(t.most_free(&ns(&[7])), None);
    }

    #[test]
    fn memoryless_node_and_empty_top_tier() {
        // Node 2 has CPUs, no memory, in no tier; tier 1 lists only a node
        // with no memory, so the top tier is 4.
        let s = Sysfs::new();
        s.file(&format!("{NODE_DIR}/online"), "0-3\n")
            .node(0, "0-1", 4096, 100)
            .node(1, "", 4096, 4000)
            .node(2, "2-3", 0, 0)
            .node(3, "", 0, 0)
            .tier(1, "3")
            .tier(4, "0")
            .tier(5, "1");
        let t = Topology::discover(s.root()).unwrap();
        assert_eq!(t.node(2).unwrap().tier, None);
        assert_eq!(t.fast_nodes(), ns(&[0]));
        assert_eq!(t.lower_nodes(), ns(&[1]));
        assert!(t.is_tiered());
    }

    #[test]
    fn nodes_from_dirs_without_online() {
        let s = Sysfs::new();
        s.node(0, "0", 10, 5).node(2, "1", 10, 5);
        s.file(&format!("{NODE_DIR}/possible"), "0-3\n");
        let t = Topology::discover(s.root()).unwrap();
        assert_eq!(t.nodes.iter().map(|n| n.id).collect::<Vec<_>>(), [0, 2]);
    }

    #[test]
    fn no_nodes_is_error() {
        let s = Sysfs::new();
        assert!(matches!(
            Topology::discover(s.root()),
            Err(TopologyError::NoNodes(_))
        ));
        s.file(&format!("{NODE_DIR}/online"), "\n");
        assert!(matches!(
            Topology::discover(s.root()),
            Err(TopologyError::NoNodes(_))
        ));
    }

    #[test]
    fn empty_memory_tiering_dir_is_one_tier() {
        let s = Sysfs::new();
        s.file(&format!("{NODE_DIR}/online"), "0\n")
            .node(0, "0", 10, 5);
        fs::create_dir_all(s.root().join(TIER_DIR)).unwrap();
        let t = Topology::discover(s.root()).unwrap();
        assert!(!t.kernel_tiers);
        assert_eq!(t.tiers.len(), 1);
    }

    #[test]
    fn missing_meminfo_names_file() {
        let s = Sysfs::new();
        s.file(&format!("{NODE_DIR}/online"), "0\n")
            .file(&format!("{NODE_DIR}/node0/cpulist"), "0\n");
        let e = Topology::discover(s.root()).unwrap_err();
        assert!(
            matches!(&e, TopologyError::Io { path, .. } if path.ends_with("node0/meminfo")),
            "{e:?}"
        );
        assert!(e.to_string().contains("node0/meminfo"), "{e}");
    }

    /// `parse_meminfo` for node 0 on `$text`: Ok((total, free)) bytes, or an
    /// error whose message contains the given text.
    macro_rules! meminfo_ok {
        ($name:ident, $text:expr, $total:expr, $free:expr) => {
            #[test]
            fn $name() {
                assert_eq!(
                    parse_meminfo(Path::new("meminfo"), 0, $text).unwrap(),
                    ($total, $free)
                );
            }
        };
    }
    macro_rules! meminfo_err {
        ($name:ident, $text:expr, $line:expr, $reason:expr) => {
            #[test]
            fn $name() {
                match parse_meminfo(Path::new("node0/meminfo"), 0, $text) {
                    Err(TopologyError::Parse { line, reason, .. }) => {
                        assert_eq!(line, $line, "{reason}");
                        assert!(reason.contains($reason), "{reason}");
                    }
                    other => panic!("{other:?}"),
                }
            }
        };
    }
    meminfo_ok!(
        meminfo_kernel_shape,
        &meminfo(0, 1014196, 3),
        1014196 * 1024,
        3 * 1024
    );
    meminfo_ok!(
        meminfo_no_trailing_newline,
        "Node 0 MemTotal: 1 kB\nNode 0 MemFree: 0 kB",
        1024,
        0
    );
    meminfo_ok!(
        meminfo_zero,
        "Node 0 MemTotal: 0 kB\nNode 0 MemFree: 0 kB\n",
        0,
        0
    );
    meminfo_err!(meminfo_empty, "", 1, "empty");
    meminfo_err!(meminfo_no_free, "Node 0 MemTotal: 1 kB\n", 1, "no MemFree");
    meminfo_err!(
        meminfo_wrong_node,
        "Node 1 MemTotal: 1 kB\n",
        1,
        "expected Node 0"
    );
    meminfo_err!(
        meminfo_max,
        "Node 0 MemTotal: max kB\nNode 0 MemFree: 0 kB\n",
        1,
        "number of kB"
    );
    meminfo_err!(
        meminfo_no_unit,
        "Node 0 MemTotal: 5\n",
        1,
        "expected `Node 0 MemTotal:"
    );
    meminfo_err!(meminfo_mb, "Node 0 MemTotal: 5 MB\n", 1, "expected kB");
    meminfo_err!(
        meminfo_overflow,
        "Node 0 MemTotal: 18446744073709551615 kB\nNode 0 MemFree: 0 kB\n",
        1,
        "overflows"
    );
    meminfo_err!(
        meminfo_dup,
        "Node 0 MemFree: 1 kB\nNode 0 MemTotal: 1 kB\nNode 0 MemFree: 1 kB\n",
        3,
        "twice"
    );

    /// List files and HMAT values through the real readers.
    #[test]
    fn list_and_u64_files() {
        let s = Sysfs::new();
        s.file("a", "0-2,5\n")
            .file("b", "")
            .file("c", "x\n")
            .file("d", "0\n1\n");
        assert_eq!(read_list(&s.root().join("a")).unwrap(), ns(&[0, 1, 2, 5]));
        assert_eq!(read_list(&s.root().join("b")).unwrap(), ns(&[]));
        assert!(matches!(
            read_list(&s.root().join("c")),
            Err(TopologyError::Parse { line: 1, .. })
        ));
        assert!(matches!(
            read_list(&s.root().join("d")),
            Err(TopologyError::Parse { line: 2, .. })
        ));
        s.file("e", "130\n")
            .file("f", "")
            .file("g", "max\n")
            .file("h", "7");
        assert_eq!(read_u64(&s.root().join("e")).unwrap(), 130);
        assert_eq!(read_u64(&s.root().join("h")).unwrap(), 7);
        assert!(matches!(
            read_u64(&s.root().join("f")),
            Err(TopologyError::Parse { .. })
        ));
        assert!(matches!(
            read_u64(&s.root().join("g")),
            Err(TopologyError::Parse { .. })
        ));
    }

    /// The sysfs captured byte for byte from the Linux 6.12 emulated CXL guest.
    #[test]
    fn linux_6_12_capture() {
        let root = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/linux-6.12/sys"
        ));
        let t = Topology::discover(root).unwrap();
        assert!(t.kernel_tiers, "{t:#?}");
        assert!(t.is_tiered(), "{t:#?}");
        let fast = t.fast_nodes();
        assert!(!fast.is_empty() && !t.lower_nodes().is_empty());
        assert!(fast.is_disjoint(&t.lower_nodes()));
        for n in &t.nodes {
            assert!(n.mem_free_bytes <= n.mem_total_bytes, "{n:?}");
            if fast.contains(&n.id) {
                assert!(n.cpus > 0, "fast node without CPUs: {n:?}");
            } else if t.lower_nodes().contains(&n.id) {
                assert!(n.is_cpuless_memory(), "lower node with CPUs: {n:?}");
            }
        }
        // Exact values of the capture (see its README).
        assert_eq!(
            t.tiers,
            vec![
                Tier {
                    id: 4,
                    nodes: ns(&[0])
                },
                Tier {
                    id: 69,
                    nodes: ns(&[1])
                },
            ]
        );
        let n0 = t.node(0).unwrap();
        assert_eq!((n0.cpus, n0.tier), (2, Some(4)));
        assert_eq!(
            (n0.mem_total_bytes, n0.mem_free_bytes),
            (992796 * 1024, 823040 * 1024)
        );
        let n1 = t.node(1).unwrap();
        assert_eq!((n1.cpus, n1.tier), (0, Some(69)));
        assert_eq!(
            (n1.mem_total_bytes, n1.mem_free_bytes),
            (1030832 * 1024, 995236 * 1024)
        );
        assert_eq!(
            n0.hmat,
            Some(Hmat {
                read_latency_ns: 130,
                write_latency_ns: 130,
                read_bandwidth_mb_s: 628736,
                write_bandwidth_mb_s: 628736,
            })
        );
        assert_eq!(
            n1.hmat.map(|h| (h.read_latency_ns, h.read_bandwidth_mb_s)),
            Some((250, 77824))
        );
        assert_eq!(t.fast_nodes(), ns(&[0]));
        assert_eq!(t.lower_nodes(), ns(&[1]));
        assert_eq!(t.fast_capacity_bytes(), 992796 * 1024);
        assert_eq!(t.fast_free_bytes(), 823040 * 1024);
        let mut again = t.clone();
        again.refresh_free(root).unwrap();
        assert_eq!(again, t);
    }

    /// The sysfs captured from the Linux 7.3 guest (same QEMU machine):
    /// the same tiers and HMAT figures, its own free memory.
    #[test]
    fn linux_7_3_capture() {
        let root = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/linux-7.3/sys"
        ));
        let t = Topology::discover(root).unwrap();
        assert!(t.kernel_tiers && t.is_tiered(), "{t:#?}");
        assert_eq!(t.tiers.iter().map(|t| t.id).collect::<Vec<_>>(), [4, 69]);
        assert_eq!(t.fast_nodes(), ns(&[0]));
        assert_eq!(t.lower_nodes(), ns(&[1]));
        let n0 = t.node(0).unwrap();
        assert_eq!((n0.cpus, n0.tier), (2, Some(4)));
        assert_eq!(
            (n0.mem_total_bytes, n0.mem_free_bytes),
            (986828 * 1024, 811536 * 1024)
        );
        let n1 = t.node(1).unwrap();
        assert!(n1.is_cpuless_memory(), "{n1:?}");
        assert_eq!(
            n1.hmat.map(|h| (h.read_latency_ns, h.read_bandwidth_mb_s)),
            Some((250, 77824))
        );
    }

    /// Offlining part of the CXL node's memory, all of it, and onlining it
    /// again, as the kernel shows it: MemTotal moves by whole blocks and a
    /// node without memory leaves its tier.
    #[test]
    fn changes_name_the_nodes_whose_capacity_or_tier_moved() {
        let root = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/linux-6.12-cxl/sys"
        ));
        let t = Topology::discover(root).unwrap();
        assert_eq!(t.changes(&t), vec![]);
        let mut freer = t.clone();
        freer.nodes[1].mem_free_bytes /= 2;
        freer.nodes[0].mem_total_bytes -= CAPACITY_STEP_BYTES - 1;
        assert_eq!(
            t.changes(&freer),
            vec![],
            "free memory and sub-MiB noise are not changes"
        );
        let mut shrunk = t.clone();
        shrunk.nodes[1].mem_total_bytes -= 256 << 20;
        assert_eq!(
            t.changes(&shrunk),
            vec![NodeChange {
                node: 1,
                before_bytes: Some(1 << 30),
                after_bytes: Some(768 << 20),
                tier_before: Some(22),
                tier_after: Some(22),
            }]
        );
        let mut gone = t.clone();
        gone.nodes[1].mem_total_bytes = 0;
        gone.nodes[1].tier = None;
        gone.tiers.retain(|x| x.id != 22);
        assert!(!gone.is_tiered() && t.is_tiered());
        let c = t.changes(&gone);
        assert_eq!(
            (c.len(), c[0].tier_after, c[0].after_bytes),
            (1, None, Some(0))
        );
        // Back again: the same change the other way.
        assert_eq!(gone.changes(&t)[0].after_bytes, Some(1 << 30));
        let mut offline = t.clone();
        offline.nodes.retain(|n| n.id != 1);
        assert_eq!(t.changes(&offline)[0].after_bytes, None);
    }

    /// Both captures' zoneinfo parse; neither has a node given up.
    #[test]
    fn zoneinfo_of_both_kernels_parses() {
        for k in ["6.12", "7.3"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../../tests/fixtures/linux-{k}/proc/zoneinfo"));
            let text = fs::read_to_string(&path).unwrap();
            assert!(unreclaimable_nodes(&path, &text).unwrap().is_empty(), "{k}");
            let r = zone_reserve_pages(&path, &text).unwrap();
            assert!(
                r.get(&0).is_some_and(|&p| p > 0) && r.get(&1).is_some_and(|&p| p > 0),
                "{k}: {r:?}"
            );
        }
    }

    #[test]
    fn partial_hmat_is_error() {
        let s = two_tier();
        fs::remove_file(s.root().join(format!(
            "{NODE_DIR}/node1/access0/initiators/write_bandwidth"
        )))
        .unwrap();
        let e = Topology::discover(s.root()).unwrap_err();
        assert!(
            e.to_string()
                .contains("node1/access0/initiators/write_bandwidth"),
            "{e}"
        );
    }
}
