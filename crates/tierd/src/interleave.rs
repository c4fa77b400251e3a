//! The bandwidth-bound class (`placement = "interleave"`): a container whose
//! pages are split over the tiers by weight instead of its hot pages going
//! to DRAM. Spreading a streaming workload over DRAM and CXL in proportion
//! to their bandwidths beats DRAM alone once DRAM bandwidth saturates
//! (HMSDK; the CXL characterisation work).
//!
//! - The daemon writes the host-wide weights,
//!   `/sys/kernel/mm/mempolicy/weighted_interleave/node<N>` (Linux 6.9+,
//!   Documentation/ABI/testing/sysfs-kernel-mm-mempolicy-weighted-interleave),
//!   journalled and restored at exit; `"auto"` leaves them to the kernel
//!   where it has `weighted_interleave/auto` (6.16+: from HMAT/CDAT
//!   bandwidths), else derives them from the nodes' HMAT read bandwidths.
//! - `tierd exec --policy NAME -- cmd` sets `MPOL_WEIGHTED_INTERLEAVE` over
//!   the tiered nodes and execs `cmd`: its allocations follow the weights.
//! - The plan holds such a container at the weights' fast-tier share both
//!   ways (demotion above it, promotion of its lack). NUMA balancing does
//!   not promote its pages: an interleaved page on the node its policy
//!   chose is not misplaced (mm/mempolicy.c `mpol_misplaced`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::config::{Config, InterleaveWeights, Placement};
use crate::sysctl::KernelKnobs;
use crate::topology::Topology;

/// Below the sysfs root.
pub const WEIGHTS_DIR: &str = "kernel/mm/mempolicy/weighted_interleave";

/// `MPOL_WEIGHTED_INTERLEAVE` (include/uapi/linux/mempolicy.h, Linux 6.9).
const MPOL_WEIGHTED_INTERLEAVE: libc::c_int = 6;

/// The nodes interleaved over: every node of a tier with memory, fast and
/// lower.
pub fn interleave_nodes(topo: &Topology) -> Vec<u32> {
    let mut n: Vec<u32> = topo
        .fast_nodes()
        .iter()
        .chain(topo.lower_nodes().iter())
        .copied()
        .collect();
    n.sort_unstable();
    n
}

/// Weights per node for `w`: explicit tier weights, or for `"auto"` the
/// nodes' HMAT read bandwidths divided by the smallest, rounded (1–255).
///
/// Errors: `"auto"` on a host without HMAT bandwidth for every node.
pub fn weights_for(w: &InterleaveWeights, topo: &Topology) -> Result<BTreeMap<u32, u8>> {
    let fast = topo.fast_nodes();
    let nodes = interleave_nodes(topo);
    match w {
        InterleaveWeights::Tiers { fast: f, lower } => Ok(nodes
            .iter()
            .map(|n| (*n, if fast.contains(n) { *f } else { *lower }))
            .collect()),
        InterleaveWeights::Auto(_) => {
            let mut bw = BTreeMap::new();
            for n in &nodes {
                let Some(h) = topo.node(*n).and_then(|i| i.hmat) else {
                    bail!(
                        "interleave_weights = \"auto\": node {n} has no HMAT bandwidth \
                         (devices/system/node/node{n}/access0) and the kernel no \
                         weighted_interleave/auto; give the weights, e.g. \
                         interleave_weights = {{ fast = 3, lower = 1 }}"
                    );
                };
                bw.insert(*n, h.read_bandwidth_mb_s.max(1));
            }
            let min = bw.values().copied().min().unwrap_or(1);
            Ok(bw
                .into_iter()
                .map(|(n, b)| (n, ((b as f64 / min as f64).round()).clamp(1.0, 255.0) as u8))
                .collect())
        }
    }
}

/// Σ fast-tier weights / Σ weights: the share of an interleaved
/// container's pages on the fast tier.
pub fn fast_fraction(weights: &BTreeMap<u32, u8>, topo: &Topology) -> f64 {
    let fast = topo.fast_nodes();
    let all: u32 = weights.values().map(|&w| u32::from(w)).sum();
    let f: u32 = weights
        .iter()
        .filter(|(n, _)| fast.contains(n))
        .map(|(_, &w)| u32::from(w))
        .sum();
    if all == 0 {
        1.0
    } else {
        f64::from(f) / f64::from(all)
    }
}

/// Applies the interleave policies' weights (journalled through `knobs`,
/// restored with them) and records the resulting split in `cfg`. Nothing
/// when no policy interleaves. Returns the weights in effect.
///
/// Errors: a kernel without weighted interleave (no [`WEIGHTS_DIR`]: Linux
/// before 6.9), `"auto"` without bandwidths, a refused write.
pub fn apply(
    cfg: &mut Config,
    topo: &Topology,
    knobs: &mut KernelKnobs,
) -> Result<Option<BTreeMap<u32, u8>>> {
    let Some(w) = cfg.interleave_weights() else {
        return Ok(None);
    };
    let dir = cfg.daemon.sysfs_root.join(WEIGHTS_DIR);
    if !dir.is_dir() {
        bail!(
            "{}: missing: placement = \"interleave\" needs weighted interleave (Linux 6.9+)",
            dir.display()
        );
    }
    let auto = dir.join("auto");
    let weights = match (&w, auto.exists()) {
        (InterleaveWeights::Auto(_), true) => {
            knobs.set(&auto, "true")?;
            read_weights(&dir, topo)?
        }
        _ => {
            let weights = weights_for(&w, topo)?;
            if auto.exists() {
                // Writing a node's weight turns the kernel's auto off; set
                // (and journal) it first, so that the restore turns it on
                // again after the weights.
                knobs.set(&auto, "false")?;
            }
            for (n, v) in &weights {
                knobs.set(&dir.join(format!("node{n}")), &v.to_string())?;
            }
            weights
        }
    };
    let f = fast_fraction(&weights, topo);
    tracing::info!(weights = ?weights, fast_share = f,
        "weighted interleave for placement = \"interleave\": an interleaved container is held at this share of its pages on the fast tier");
    cfg.set_interleave_split(f);
    Ok(Some(weights))
}

fn read_weights(dir: &Path, topo: &Topology) -> Result<BTreeMap<u32, u8>> {
    interleave_nodes(topo)
        .into_iter()
        .map(|n| {
            let p: PathBuf = dir.join(format!("node{n}"));
            let t = std::fs::read_to_string(&p).with_context(|| format!("{}", p.display()))?;
            let v = t
                .trim()
                .parse()
                .with_context(|| format!("{}: not a weight: {t:?}", p.display()))?;
            Ok((n, v))
        })
        .collect()
}

/// `tierd exec --policy NAME -- cmd...`: checks that `NAME` is an
/// interleave policy of `cfg`, sets `MPOL_WEIGHTED_INTERLEAVE` over the
/// tiered nodes for this process (inherited across exec and fork) and
/// replaces it with `cmd`. The weights are the host's at each allocation:
/// the daemon's while it runs.
///
/// Errors (nothing exec'd): no such policy or not an interleave one, no
/// lower tier, a kernel without `MPOL_WEIGHTED_INTERLEAVE` (EINVAL: Linux
/// before 6.9), the exec itself.
pub fn exec(cfg: &Config, policy: &str, cmd: &[String]) -> Result<std::convert::Infallible> {
    let entry = cfg
        .policies
        .iter()
        .find(|p| p.name.as_deref() == Some(policy) || p.pattern == policy)
        .with_context(|| {
            format!(
                "{}: no [[policy]] named {policy:?} (tierd exec --policy takes a policy's name or match)",
                cfg.source.display()
            )
        })?;
    if entry.placement != Placement::Interleave {
        bail!(
            "{}: policy {policy:?} is not placement = \"interleave\"; tierd exec only sets the interleave policy",
            cfg.source.display()
        );
    }
    let topo =
        Topology::discover(&cfg.daemon.sysfs_root).context("cannot read the NUMA topology")?;
    let nodes = interleave_nodes(&topo);
    if topo.lower_nodes().is_empty() {
        bail!("this host has no lower memory tier: nothing to interleave with");
    }
    let mut mask = [0u64; 16];
    for n in &nodes {
        let n = *n as usize;
        if n >= mask.len() * 64 {
            bail!(
                "node {n} is beyond the {} nodes tierd exec handles",
                mask.len() * 64
            );
        }
        mask[n / 64] |= 1 << (n % 64);
    }
    // SAFETY: the mask outlives the call; maxnode is its size in bits.
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            MPOL_WEIGHTED_INTERLEAVE,
            mask.as_ptr(),
            (mask.len() * 64) as libc::c_ulong,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "set_mempolicy(MPOL_WEIGHTED_INTERLEAVE, nodes {nodes:?}): {e}{}",
            if e.raw_os_error() == Some(libc::EINVAL) {
                " (the kernel has no weighted interleave: Linux 6.9+)"
            } else {
                ""
            }
        );
    }
    let Some((prog, args)) = cmd.split_first() else {
        bail!("tierd exec: no command after --");
    };
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(prog).args(args).exec();
    Err(e).with_context(|| format!("cannot exec {prog}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hmat_topo() -> Topology {
        let root = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/linux-6.12/sys"
        ));
        Topology::discover(root).unwrap()
    }

    /// The HMAT host of the fixtures: 628736 vs 77824 MB/s read bandwidth.
    #[test]
    fn auto_weights_follow_hmat_bandwidth_and_explicit_ones_the_tiers() {
        let t = hmat_topo();
        let auto = weights_for(&InterleaveWeights::Auto("auto".into()), &t).unwrap();
        assert_eq!(auto, BTreeMap::from([(0, 8), (1, 1)]));
        assert!((fast_fraction(&auto, &t) - 8.0 / 9.0).abs() < 1e-9);
        let tiers = weights_for(&InterleaveWeights::Tiers { fast: 3, lower: 1 }, &t).unwrap();
        assert_eq!(tiers, BTreeMap::from([(0, 3), (1, 1)]));
        assert!((fast_fraction(&tiers, &t) - 0.75).abs() < 1e-9);
    }

    /// The CXL device host has no HMAT bandwidth for node 1: "auto" there
    /// needs the kernel's own (7.x) or explicit weights, and says so.
    #[test]
    fn auto_without_bandwidths_names_the_node_and_the_fix() {
        let root = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/linux-6.12-cxl/sys"
        ));
        let t = Topology::discover(root).unwrap();
        let e = weights_for(&InterleaveWeights::Auto("auto".into()), &t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("node 0") || e.contains("node 1"), "{e}");
        assert!(e.contains("fast = 3, lower = 1"), "{e}");
    }
}
