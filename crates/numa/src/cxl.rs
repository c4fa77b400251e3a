//! Which CXL devices back which lower-tier nodes, from sysfs.
//!
//! A CXL Type-3 memory expander becomes system RAM through
//! `cxl_acpi → cxl_pci → cxl_mem → region → dax → kmem`
//! (Documentation/driver-api/cxl/, Documentation/ABI/testing/sysfs-bus-cxl,
//! sysfs-bus-dax). The chain is read backwards from the node:
//! - `bus/dax/devices/dax<R>.<I>/target_node`: the NUMA node the dax device's
//!   memory was onlined into by kmem (`-1`: not onlined as RAM). The device's
//!   link resolves through `.../region<N>/dax_region<N>/dax<R>.<I>` when a CXL
//!   region backs it (a dax device from `hmem` or a PMEM namespace has no
//!   region component and is not CXL);
//! - `bus/cxl/devices/region<N>/{size,mode,interleave_ways,target<K>}`: the
//!   region's bytes (hex), `ram` or `pmem`, how many devices it interleaves,
//!   and for each position the endpoint decoder (`decoder<P>.<D>`);
//! - `bus/cxl/devices/decoder<P>.<D>` resolves into `.../endpoint<P>/`, and
//!   `bus/cxl/devices/endpoint<P>/uport` links to the memory device;
//! - `bus/cxl/devices/mem<M>/{serial,firmware_version,ram/size,pmem/size}`:
//!   the device's serial number (hex), firmware revision and capacities.
//!
//! Device health (media status, life used, temperature) is not in sysfs: it
//! comes from the mailbox command Get Health Info (CXL 3.1 §8.2.9.9.3.1)
//! through the `CXL_MEM_SEND_COMMAND` ioctl, and is left out here.

use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::topology::{io_err, parse_err, read, Result};

const DAX_DIR: &str = "bus/dax/devices";
const CXL_DIR: &str = "bus/cxl/devices";

/// A CXL memory device (`mem<M>`) as its sysfs directory describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CxlMemdev {
    /// `mem0`, ...
    pub name: String,
    /// The device serial number (PCIe DSN; QEMU's emulated device has 0).
    pub serial: u64,
    /// `firmware_version`, trimmed; empty if the file is absent.
    pub firmware_version: String,
    /// Volatile capacity, bytes (`ram/size`).
    pub ram_bytes: u64,
    /// Persistent capacity, bytes (`pmem/size`; 0 if absent).
    pub pmem_bytes: u64,
}

/// A CXL region onlined as system RAM on a NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CxlRegion {
    /// The node its memory was onlined into (`target_node` of its dax device).
    pub node: u32,
    /// `region0`, ...
    pub name: String,
    /// The dax device between the region and the node (`dax0.0`).
    pub dax: String,
    /// `ram` or `pmem`.
    pub mode: String,
    /// Region capacity, bytes (`size`).
    pub size_bytes: u64,
    /// The devices it interleaves, in target order (`interleave_ways` of them).
    pub memdevs: Vec<CxlMemdev>,
}

/// The CXL regions under `sysfs` that back NUMA nodes, ordered by node then
/// region name. Empty when the host has no `bus/dax` or no dax device on a
/// CXL region (no CXL memory, or the `cxl`/`dax` drivers not loaded).
///
/// Errors: [`crate::topology::TopologyError`] naming the file, when a file
/// the chain needs is missing or does not parse (a half-torn-down region
/// can give one; the caller logs and retries on its next refresh).
pub fn discover(sysfs: impl AsRef<Path>) -> Result<Vec<CxlRegion>> {
    let sysfs = sysfs.as_ref();
    let dax_dir = sysfs.join(DAX_DIR);
    let Ok(entries) = fs::read_dir(&dax_dir) else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("dax"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for dax in names {
        let link = dax_dir.join(&dax);
        let Some(region) = component_like(&link, "region") else {
            continue;
        };
        let node_path = link.join("target_node");
        let node = read(&node_path)?;
        let Ok(node) = node.trim().parse::<u32>() else {
            // -1: the dax device is not onlined as system RAM (devdax mode).
            continue;
        };
        out.push(read_region(sysfs, &region, dax, node)?);
    }
    out.sort_by(|a, b| (a.node, &a.name).cmp(&(b.node, &b.name)));
    Ok(out)
}

fn read_region(sysfs: &Path, name: &str, dax: String, node: u32) -> Result<CxlRegion> {
    let dir = sysfs.join(CXL_DIR).join(name);
    let ways_path = dir.join("interleave_ways");
    let ways = parse_dec(&ways_path)?;
    let mut memdevs = Vec::new();
    for k in 0..ways {
        let target = dir.join(format!("target{k}"));
        let decoder = read(&target)?.trim().to_string();
        if decoder.is_empty() {
            return Err(parse_err(
                &target,
                1,
                "empty: the region has no decoder here",
            ));
        }
        let decoder_link = sysfs.join(CXL_DIR).join(&decoder);
        let endpoint = component_like(&decoder_link, "endpoint").ok_or_else(|| {
            parse_err(
                &decoder_link,
                1,
                "does not resolve into an endpoint<N> port",
            )
        })?;
        let uport = sysfs.join(CXL_DIR).join(&endpoint).join("uport");
        let target_dev = fs::read_link(&uport).map_err(io_err(&uport))?;
        let mem = target_dev
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| parse_err(&uport, 1, "link has no device name"))?;
        memdevs.push(read_memdev(sysfs, mem)?);
    }
    Ok(CxlRegion {
        node,
        name: name.to_string(),
        dax,
        mode: read(&dir.join("mode"))?.trim().to_string(),
        size_bytes: parse_hex(&dir.join("size"))?,
        memdevs,
    })
}

fn read_memdev(sysfs: &Path, name: String) -> Result<CxlMemdev> {
    let dir = sysfs.join(CXL_DIR).join(&name);
    let pmem = dir.join("pmem/size");
    Ok(CxlMemdev {
        serial: parse_hex(&dir.join("serial"))?,
        firmware_version: read(&dir.join("firmware_version"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        ram_bytes: parse_hex(&dir.join("ram/size"))?,
        pmem_bytes: if pmem.exists() { parse_hex(&pmem)? } else { 0 },
        name,
    })
}

/// The first component of `link`'s target named `<prefix><digits>`: sysfs
/// links are relative (`../../../devices/platform/ACPI0017:00/root0/...`),
/// so reading the link, not resolving it, works on a copied tree too.
fn component_like(link: &Path, prefix: &str) -> Option<String> {
    let target: PathBuf = fs::read_link(link).ok()?;
    target.components().find_map(|c| match c {
        Component::Normal(s) => {
            let s = s.to_string_lossy();
            let rest = s.strip_prefix(prefix)?;
            (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())).then(|| s.into_owned())
        }
        _ => None,
    })
}

/// A sysfs number in hex (`0x40000000`), as the CXL attributes print them.
fn parse_hex(path: &Path) -> Result<u64> {
    let text = read(path)?;
    let t = text.trim();
    u64::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| {
        parse_err(
            path,
            1,
            format!("expected a hex number like 0x40000000, found {t:?}"),
        )
    })
}

fn parse_dec(path: &Path) -> Result<u32> {
    let text = read(path)?;
    let t = text.trim();
    t.parse().map_err(|_| {
        parse_err(
            path,
            1,
            format!("expected an unsigned integer, found {t:?}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(kernel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../../tests/fixtures/linux-{kernel}-cxl/sys"))
    }

    /// The sysfs of the emulated CXL Type-3 host, captured on both kernels
    /// (tests/fixtures/cxl-capture.sh): one 1 GiB volatile device, one
    /// 1-way region, onlined into node 1.
    #[test]
    fn both_kernels_map_node_1_to_region0_on_mem0() {
        for k in ["6.12", "7.3"] {
            let regions = discover(fixture(k)).unwrap();
            assert_eq!(
                regions,
                vec![CxlRegion {
                    node: 1,
                    name: "region0".into(),
                    dax: "dax0.0".into(),
                    mode: "ram".into(),
                    size_bytes: 1 << 30,
                    memdevs: vec![CxlMemdev {
                        name: "mem0".into(),
                        serial: 0,
                        firmware_version: "BWFW VERSION 00".into(),
                        ram_bytes: 1 << 30,
                        pmem_bytes: 0,
                    }],
                }],
                "Linux {k}"
            );
            let topo = crate::topology::Topology::discover(fixture(k)).unwrap();
            assert_eq!(
                topo.lower_nodes().into_iter().collect::<Vec<_>>(),
                [1],
                "Linux {k}"
            );
        }
    }

    #[test]
    fn a_host_without_cxl_or_dax_has_no_regions() {
        let hmat =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/linux-6.12/sys");
        assert_eq!(discover(hmat).unwrap(), vec![]);
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(discover(empty.path()).unwrap(), vec![]);
    }

    /// A copy of the capture with one file broken: the error names it.
    #[test]
    fn a_broken_chain_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("cp")
            .args([
                "-a",
                fixture("6.12").to_str().unwrap(),
                dir.path().to_str().unwrap(),
            ])
            .status()
            .unwrap();
        assert!(status.success());
        let sys = dir.path().join("sys");
        let serial = sys.join(CXL_DIR).join("mem0/serial");
        fs::write(&serial, "serial?\n").unwrap();
        let e = discover(&sys).unwrap_err().to_string();
        assert!(e.contains("mem0/serial") && e.contains("hex"), "{e}");
        fs::remove_file(&serial).unwrap();
        let e = discover(&sys).unwrap_err().to_string();
        assert!(e.contains("mem0/serial"), "{e}");
        // A dax device in devdax mode (target_node -1) is not a node.
        fs::write(sys.join(DAX_DIR).join("dax0.0/target_node"), "-1\n").unwrap();
        assert_eq!(discover(&sys).unwrap(), vec![]);
    }
}
