//! The eBPF NUMA hint-fault probe (`bpf/hintfault.bpf.c`): loader and map
//! reader.
//!
//! The probe counts, per memcg (cgroup v2 directory inode) and per
//! (source node, destination node): NUMA hint faults, promotion candidates,
//! candidates dropped before migration, and migrations that succeeded or
//! failed (calls and base pages), plus a log2 histogram of the time spent in
//! `migrate_misplaced_folio` (ns). Counts are cumulative since load; the
//! caller turns them into rates. Record layouts are `bpf/hintfault.h`; the
//! Rust views are the skeleton's generated `types`, decoded here from the raw
//! map bytes.
//!
//! Attach points (Linux 6.12 and 7.3 with BTF; `do_numa_page` is inlined and cannot be
//! attached, see docs/NOTES.md "The eBPF hint-fault probe"): fexit `numa_migrate_check`, fexit
//! `migrate_misplaced_folio_prepare`, fentry+fexit `migrate_misplaced_folio`
//! (three parameters on 6.12, two on 7.3: the pair of programs that matches
//! the kernel's BTF is loaded).
//! `numa_migrate_check` is required; the others are attached when the kernel
//! has them, and [`HintFaultProbe::attached`] says which.
//!
//! Errors: [`ProbeError`] says why the probe cannot run (no BTF, no
//! privilege, a missing function, a verifier or attach failure) and what to
//! do; the caller falls back to `memory.stat` counters.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

#[allow(clippy::all, missing_docs, non_camel_case_types, dead_code)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/hintfault.skel.rs"));
}

use skel::types;

/// Where the running kernel's BTF lives (CONFIG_DEBUG_INFO_BTF).
pub const DEFAULT_BTF: &str = "/sys/kernel/btf/vmlinux";
/// `CONFIG_NODES_SHIFT` of Debian's x86-64 kernels: the node id is the top
/// this-many bits of `folio->flags`. Not in BTF, so it is a setting.
pub const DEFAULT_NODES_SHIFT: u32 = 10;
/// Buckets of the promotion-latency histogram (`HF_LAT_BUCKETS`).
pub const LATENCY_BUCKETS: usize = 32;
/// `HF_NO_NODE`: the key's destination when the kernel chose no node.
const NO_NODE: u32 = u32::MAX;

/// The function every hint fault passes through; without it there is no probe.
pub const REQUIRED_FUNCTION: &str = "numa_migrate_check";
/// Functions whose programs are attached only when the kernel has them.
pub const OPTIONAL_FUNCTIONS: [&str; 2] =
    ["migrate_misplaced_folio_prepare", "migrate_misplaced_folio"];

/// Why the probe is not running. `Display` names the cause and the fix.
#[derive(Debug)]
pub enum ProbeError {
    /// The kernel exposes no BTF (`CONFIG_DEBUG_INFO_BTF`): fentry/fexit
    /// programs cannot be attached.
    NoBtf { path: PathBuf },
    /// A function the probe attaches to is not in the kernel's BTF.
    MissingFunction { name: &'static str, btf: PathBuf },
    /// Loading or attaching was refused for lack of privilege (EPERM/EACCES).
    NotPermitted { detail: String },
    /// Any other libbpf failure (verifier, CO-RE relocation, attach).
    Load { step: &'static str, detail: String },
    /// A map record had an unexpected size.
    Record {
        map: &'static str,
        len: usize,
        want: usize,
    },
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::NoBtf { path } => write!(
                f,
                "{}: no kernel BTF; the eBPF hint-fault probe needs a kernel built with CONFIG_DEBUG_INFO_BTF (Debian's 6.12 kernels have it)",
                path.display()
            ),
            ProbeError::MissingFunction { name, btf } => write!(
                f,
                "kernel function {name} is not in {} (inlined or renamed in this kernel); the probe needs Linux 6.11+ NUMA-balancing code",
                btf.display()
            ),
            ProbeError::NotPermitted { detail } => write!(
                f,
                "loading BPF programs was refused ({detail}); run tierd as root or with CAP_BPF and CAP_PERFMON"
            ),
            ProbeError::Load { step, detail } => write!(f, "BPF {step} failed: {detail}"),
            ProbeError::Record { map, len, want } => {
                write!(f, "BPF map {map}: record of {len} bytes, expected {want}")
            }
        }
    }
}

impl std::error::Error for ProbeError {}

fn libbpf_err(step: &'static str, e: libbpf_rs::Error) -> ProbeError {
    use libbpf_rs::ErrorKind;
    match e.kind() {
        ErrorKind::PermissionDenied => ProbeError::NotPermitted {
            detail: format!("{step}: {e}"),
        },
        _ => ProbeError::Load {
            step,
            detail: format!("{e:#}"),
        },
    }
}

/// Loader settings.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Kernel BTF file checked for the attach points (default [`DEFAULT_BTF`]).
    pub btf: PathBuf,
    /// `CONFIG_NODES_SHIFT` of the running kernel (default 10).
    pub nodes_shift: u32,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            btf: DEFAULT_BTF.into(),
            nodes_shift: DEFAULT_NODES_SHIFT,
        }
    }
}

/// One row of the `counts` map: a memcg and a (source, destination) node pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HintKey {
    /// cgroup v2 directory inode of the folio's memcg; 0 = none (kernel
    /// memory, or memcg disabled).
    pub memcg_id: u64,
    /// Node the folio was on.
    pub src_nid: u32,
    /// Node the kernel wanted it on; `None` when it chose none.
    pub dst_nid: Option<u32>,
}

/// Counts of one [`HintKey`], summed over CPUs. Events are calls; `*_pages`
/// are base pages (a THP counts 512).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HintCounts {
    /// NUMA hint faults (= memcg `numa_hint_faults` events).
    pub hint_faults: u64,
    /// Faults for which the kernel chose a target node.
    pub candidates: u64,
    /// Candidates dropped by `migrate_misplaced_folio_prepare`.
    pub prepare_failed: u64,
    /// `migrate_misplaced_folio` calls that returned 0 / non-zero.
    pub migrated: u64,
    pub migrate_failed: u64,
    /// Base pages in those calls.
    pub migrated_pages: u64,
    pub migrate_failed_pages: u64,
}

impl HintCounts {
    fn add(&mut self, o: &HintCounts) {
        self.hint_faults += o.hint_faults;
        self.candidates += o.candidates;
        self.prepare_failed += o.prepare_failed;
        self.migrated += o.migrated;
        self.migrate_failed += o.migrate_failed;
        self.migrated_pages += o.migrated_pages;
        self.migrate_failed_pages += o.migrate_failed_pages;
    }

    /// `self − earlier`, field by field, saturating (a key deleted and
    /// re-created restarts from zero).
    pub fn since(&self, earlier: &HintCounts) -> HintCounts {
        HintCounts {
            hint_faults: self.hint_faults.saturating_sub(earlier.hint_faults),
            candidates: self.candidates.saturating_sub(earlier.candidates),
            prepare_failed: self.prepare_failed.saturating_sub(earlier.prepare_failed),
            migrated: self.migrated.saturating_sub(earlier.migrated),
            migrate_failed: self.migrate_failed.saturating_sub(earlier.migrate_failed),
            migrated_pages: self.migrated_pages.saturating_sub(earlier.migrated_pages),
            migrate_failed_pages: self
                .migrate_failed_pages
                .saturating_sub(earlier.migrate_failed_pages),
        }
    }
}

/// A full read of the probe's maps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeReading {
    /// Cumulative counts since load, by memcg and node pair.
    pub counts: BTreeMap<HintKey, HintCounts>,
    /// Cumulative `migrate_misplaced_folio` durations: bucket i counts calls
    /// that took [2^i, 2^(i+1)) ns.
    pub latency_ns_log2: [u64; LATENCY_BUCKETS],
    /// Their CPU time summed, ns: the kernel's promotion work in the
    /// faulting tasks' context. A call's wall time, or, when the task was
    /// switched out during it, the `sum_exec_runtime` it was accounted
    /// meanwhile (bpf/hintfault.bpf.c `hf_migrate_exit`).
    pub migrate_cpu_ns: u64,
}

impl ProbeReading {
    /// Counts of one memcg summed over node pairs.
    pub fn memcg_total(&self, memcg_id: u64) -> HintCounts {
        let mut t = HintCounts::default();
        for (_, c) in self
            .counts
            .range(
                HintKey {
                    memcg_id,
                    src_nid: 0,
                    dst_nid: None,
                }..,
            )
            .take_while(|(k, _)| k.memcg_id == memcg_id)
        {
            t.add(c);
        }
        t
    }
}

/// Decodes a `struct hf_key` from map bytes (native endian, 16 bytes).
pub fn decode_key(b: &[u8]) -> Result<HintKey, ProbeError> {
    let k: types::hf_key = read_record("counts (key)", b)?;
    Ok(HintKey {
        memcg_id: k.memcg_id,
        src_nid: k.src_nid,
        dst_nid: (k.dst_nid != NO_NODE).then_some(k.dst_nid),
    })
}

/// Encodes a key as the map stores it (for deletion).
pub fn encode_key(k: &HintKey) -> Vec<u8> {
    let mut v = Vec::with_capacity(size_of::<types::hf_key>());
    v.extend_from_slice(&k.memcg_id.to_ne_bytes());
    v.extend_from_slice(&k.src_nid.to_ne_bytes());
    v.extend_from_slice(&k.dst_nid.unwrap_or(NO_NODE).to_ne_bytes());
    v
}

/// Decodes and sums the per-CPU values of one `counts` entry.
pub fn decode_counts<B: AsRef<[u8]>>(per_cpu: &[B]) -> Result<HintCounts, ProbeError> {
    let mut t = HintCounts::default();
    for b in per_cpu {
        let c: types::hf_counts = read_record("counts (value)", b.as_ref())?;
        t.add(&HintCounts {
            hint_faults: c.hint_faults,
            candidates: c.candidates,
            prepare_failed: c.prepare_failed,
            migrated: c.migrated,
            migrate_failed: c.migrate_failed,
            migrated_pages: c.migrated_pages,
            migrate_failed_pages: c.migrate_failed_pages,
        });
    }
    Ok(t)
}

/// Decodes and sums the per-CPU latency histograms: (calls per log2-ns
/// bucket, their CPU time in ns). Errors: [`ProbeError::Record`] for a value of another
/// size than `struct hf_hist` (bpf/hintfault.h).
pub fn decode_latency<B: AsRef<[u8]>>(
    per_cpu: &[B],
) -> Result<([u64; LATENCY_BUCKETS], u64), ProbeError> {
    let mut t = [0u64; LATENCY_BUCKETS];
    let mut total = 0u64;
    for b in per_cpu {
        let h: types::hf_hist = read_record("latency", b.as_ref())?;
        for (a, x) in t.iter_mut().zip(h.buckets) {
            *a += x;
        }
        total = total.saturating_add(h.cpu_ns);
    }
    Ok((t, total))
}

/// Copies a plain-old-data record out of map bytes. The generated types hold
/// only integers (any bit pattern is valid), and the length is checked.
fn read_record<T: Copy>(map: &'static str, b: &[u8]) -> Result<T, ProbeError> {
    if b.len() != size_of::<T>() {
        return Err(ProbeError::Record {
            map,
            len: b.len(),
            want: size_of::<T>(),
        });
    }
    // SAFETY: the length equals size_of::<T>(), T is a #[repr(C)] struct of
    // integer fields generated from bpf/hintfault.h, and the read is unaligned.
    Ok(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

/// Whether the kernel's BTF has a function named `name`.
fn btf_has_function(btf: &libbpf_rs::btf::Btf<'_>, name: &str) -> bool {
    btf.type_by_name::<libbpf_rs::btf::types::Func<'_>>(name)
        .is_some()
}

/// How many parameters kernel function `name` takes per BTF (`None` when
/// it is not there). A tracing program may read only the arguments the
/// function has (the verifier rejects the load otherwise), so where a
/// signature changed between kernels the loader keeps the matching program.
fn btf_function_params(btf: &libbpf_rs::btf::Btf<'_>, name: &str) -> Option<usize> {
    use libbpf_rs::btf::types::{Func, FuncProto};
    use libbpf_rs::btf::ReferencesType;
    let f = btf.type_by_name::<Func<'_>>(name)?;
    FuncProto::try_from(f.referenced_type())
        .ok()
        .map(|p| p.len())
}

/// One successful NUMA-balancing migration (`struct hf_promotion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromotionEvent {
    pub memcg_id: u64,
    /// Faulting process (tgid) and virtual address (page-aligned by the
    /// caller when matching).
    pub pid: u32,
    pub addr: u64,
    /// Base pages migrated (512 for a THP).
    pub nr_pages: u32,
    pub src_nid: u32,
    pub dst_nid: u32,
    /// Declined hint faults only: the latency the kernel's hot-page test
    /// measured, in ms from the NUMA-balancing scan that unmapped the page
    /// to the fault (kernel/sched/fair.c `numa_hint_fault_latency`); `None`
    /// when the probe could not read it (a page-flags layout it does not
    /// know, bpf/hintfault.bpf.c `hint_latency_ms`).
    pub latency_ms: Option<u32>,
}

/// Decodes a `struct hf_promotion` ring-buffer record.
pub fn decode_promotion(b: &[u8]) -> Result<PromotionEvent, ProbeError> {
    let e: types::hf_promotion = read_record("promotions", b)?;
    Ok(PromotionEvent {
        memcg_id: e.memcg_id,
        pid: e.tgid,
        addr: e.addr,
        nr_pages: e.nr_pages,
        src_nid: e.src_nid,
        dst_nid: e.dst_nid,
        latency_ms: (e.latency_ms != NO_LATENCY).then_some(e.latency_ms),
    })
}

/// `HF_NO_LATENCY` (bpf/hintfault.h).
const NO_LATENCY: u32 = u32::MAX;

/// Most promotion events kept between two drains (about 32 MiB): beyond
/// it they are counted as dropped.
const MAX_PENDING_EVENTS: usize = 1 << 20;

/// Most refused candidates kept between two drains (2 MiB): they are a
/// sample (the kernel side loses what its buffer has no room for), so
/// more are dropped uncounted.
const MAX_PENDING_REFUSALS: usize = 1 << 16;

/// Most declined hint faults kept between two drains (2 MiB): a guard, since
/// a drain consumes the kernel-side buffer, which holds ~5.4k.
const MAX_PENDING_DECLINED: usize = 1 << 16;

/// Size of the probe's `declined_memcgs` map.
const DECLINED_MEMCGS: usize = 1024;

#[derive(Default)]
struct Pending {
    events: Vec<PromotionEvent>,
    refusals: Vec<PromotionEvent>,
    declined: Vec<PromotionEvent>,
    dropped: u64,
    /// The kernel-side drop counter at the last drain.
    kernel_drops_seen: u64,
}

/// The loaded and attached probe. Dropping it detaches every program.
pub struct HintFaultProbe {
    // Declared before `skel`: the ring buffers map the `promotions`,
    // `refusals` and `declined` maps and must be dropped first.
    ring: libbpf_rs::RingBuffer<'static>,
    /// The `declined` map alone: read only by [`Self::drain_declined`], so
    /// what one drain returns is bounded by the map's size (a sample; the
    /// rest is lost in the kernel), not by the faults since the last one.
    declined_ring: libbpf_rs::RingBuffer<'static>,
    pending: std::sync::Arc<std::sync::Mutex<Pending>>,
    skel: skel::HintfaultSkel<'static>,
    attached: Vec<&'static str>,
    nr_cpus: usize,
}

impl fmt::Debug for HintFaultProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HintFaultProbe")
            .field("attached", &self.attached)
            .finish()
    }
}

impl HintFaultProbe {
    /// Checks BTF, opens, loads and attaches the probe.
    ///
    /// Errors: [`ProbeError::NoBtf`] when `opts.btf` is missing,
    /// [`ProbeError::MissingFunction`] when `numa_migrate_check` is not in it,
    /// [`ProbeError::NotPermitted`] without CAP_BPF/CAP_PERFMON,
    /// [`ProbeError::Load`] for verifier, relocation or attach failures.
    pub fn load(opts: &ProbeOptions) -> Result<HintFaultProbe, ProbeError> {
        if !opts.btf.is_file() {
            return Err(ProbeError::NoBtf {
                path: opts.btf.clone(),
            });
        }
        let btf = libbpf_rs::btf::Btf::from_path(&opts.btf).map_err(|e| ProbeError::Load {
            step: "reading kernel BTF",
            detail: format!("{}: {e}", opts.btf.display()),
        })?;
        if !btf_has_function(&btf, REQUIRED_FUNCTION) {
            return Err(ProbeError::MissingFunction {
                name: REQUIRED_FUNCTION,
                btf: opts.btf.clone(),
            });
        }
        let has: Vec<bool> = OPTIONAL_FUNCTIONS
            .iter()
            .map(|f| btf_has_function(&btf, f))
            .collect();
        // migrate_misplaced_folio(folio, vma, node) on 6.12, (folio, node)
        // on later kernels.
        let migrate_params = btf_function_params(&btf, OPTIONAL_FUNCTIONS[1]);
        drop(btf);

        // The skeleton borrows its object storage for its whole life; the
        // probe lives as long as the daemon, so the storage is leaked once.
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = skel::HintfaultSkelBuilder::default()
            .open(storage)
            .map_err(|e| libbpf_err("open", e))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.nodes_shift = opts.nodes_shift;
        }
        let mut attached = vec![REQUIRED_FUNCTION];
        if !has[0] {
            open.progs.hf_prepare.set_autoload(false);
        } else {
            attached.push(OPTIONAL_FUNCTIONS[0]);
        }
        let (three, two) = match migrate_params {
            Some(3) => (true, false),
            Some(2) => (false, true),
            _ => (false, false),
        };
        open.progs.hf_migrate_enter.set_autoload(three);
        open.progs.hf_migrate_exit.set_autoload(three);
        open.progs.hf_migrate_enter2.set_autoload(two);
        open.progs.hf_migrate_exit2.set_autoload(two);
        if three || two {
            attached.push(OPTIONAL_FUNCTIONS[1]);
        } else if has[1] {
            tracing::warn!(
                params = ?migrate_params,
                "{}: a signature the probe does not know; promotions are counted from memory.stat only",
                OPTIONAL_FUNCTIONS[1]
            );
        }
        let t = std::time::Instant::now();
        let mut skel = open.load().map_err(|e| libbpf_err("load", e))?;
        let loaded = t.elapsed();
        skel.attach().map_err(|e| libbpf_err("attach", e))?;
        tracing::debug!(
            load_ms = loaded.as_millis(),
            attach_ms = (t.elapsed() - loaded).as_millis(),
            "hint-fault probe loaded (maps made, programs verified) and attached"
        );
        let nr_cpus = libbpf_rs::num_possible_cpus().map_err(|e| libbpf_err("cpu count", e))?;
        let pending = std::sync::Arc::new(std::sync::Mutex::new(Pending::default()));
        let sink = pending.clone();
        let mut rb = libbpf_rs::RingBufferBuilder::new();
        rb.add(&skel.maps.promotions, move |data: &[u8]| {
            let mut p = sink.lock().unwrap_or_else(|e| e.into_inner());
            match decode_promotion(data) {
                Ok(e) if p.events.len() < MAX_PENDING_EVENTS => p.events.push(e),
                _ => p.dropped += 1,
            }
            0
        })
        .map_err(|e| libbpf_err("ring buffer", e))?;
        let sink = pending.clone();
        rb.add(&skel.maps.refusals, move |data: &[u8]| {
            let mut p = sink.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(e) = decode_promotion(data) {
                if p.refusals.len() < MAX_PENDING_REFUSALS {
                    p.refusals.push(e);
                }
            }
            0
        })
        .map_err(|e| libbpf_err("ring buffer", e))?;
        let ring = rb.build().map_err(|e| libbpf_err("ring buffer", e))?;
        let sink = pending.clone();
        let mut rb = libbpf_rs::RingBufferBuilder::new();
        rb.add(&skel.maps.declined, move |data: &[u8]| {
            let mut p = sink.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(e) = decode_promotion(data) {
                if p.declined.len() < MAX_PENDING_DECLINED {
                    p.declined.push(e);
                }
            }
            0
        })
        .map_err(|e| libbpf_err("ring buffer", e))?;
        let declined_ring = rb.build().map_err(|e| libbpf_err("ring buffer", e))?;
        // Loading parses the kernel's BTF (several MiB) for the CO-RE
        // relocations and frees it; what the allocator keeps of it stayed in
        // the daemon's RSS for good (13 → 23 MiB with the latency read's
        // relocations, over half the unit's MemoryMin=). Give it back.
        #[cfg(target_env = "gnu")]
        // SAFETY: malloc_trim only returns free heap memory to the kernel.
        unsafe {
            libc::malloc_trim(0);
        }
        Ok(HintFaultProbe {
            ring,
            declined_ring,
            pending,
            skel,
            attached,
            nr_cpus,
        })
    }

    /// Kernel functions the probe is attached to.
    pub fn attached(&self) -> &[&'static str] {
        &self.attached
    }

    /// Possible CPUs (the number of per-CPU values per map entry).
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// Run statistics of the probe's programs, `(name, runs, total ns)`,
    /// as the kernel keeps them while `kernel.bpf_stats_enabled` = 1
    /// (zeros otherwise). The cost the probe adds to each hint fault is
    /// `hf_check`'s ns / runs.
    pub fn program_stats(&self) -> Vec<(String, u64, u64)> {
        let p = &self.skel.progs;
        let ids: Vec<u32> = [
            &p.hf_check,
            &p.hf_check_enter,
            &p.hf_prepare,
            &p.hf_migrate_enter,
            &p.hf_migrate_exit,
            &p.hf_migrate_enter2,
            &p.hf_migrate_exit2,
        ]
        .iter()
        .filter(|p| p.autoload())
        .filter_map(|p| libbpf_rs::Program::id_from_fd(p.as_fd()).ok())
        .collect();
        libbpf_rs::query::ProgInfoIter::default()
            .filter(|i| ids.contains(&i.id))
            .map(|i| {
                (
                    i.name.to_string_lossy().into_owned(),
                    i.run_cnt,
                    i.run_time_ns,
                )
            })
            .collect()
    }

    /// Moves the records waiting in the ring buffers to the pending queues
    /// ([`MAX_PENDING_EVENTS`] and [`MAX_PENDING_REFUSALS`] at most) that
    /// [`Self::drain_promotions`] and [`Self::drain_refusals`] return.
    pub fn collect_promotions(&self) {
        let _ = self.ring.consume();
    }

    /// Takes the successful migrations recorded since the last call, and how
    /// many were lost (ring buffer full, or too many pending).
    pub fn drain_promotions(&self) -> (Vec<PromotionEvent>, u64) {
        let _ = self.ring.consume();
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let zero = 0u32.to_ne_bytes();
        let kernel_drops: u64 = self
            .skel
            .maps
            .promotion_drops
            .lookup_percpu(&zero, MapFlags::ANY)
            .ok()
            .flatten()
            .map(|v| {
                v.iter()
                    .filter_map(|b| b.get(..8)?.try_into().ok().map(u64::from_ne_bytes))
                    .sum()
            })
            .unwrap_or(0);
        let dropped =
            std::mem::take(&mut p.dropped) + kernel_drops.saturating_sub(p.kernel_drops_seen);
        p.kernel_drops_seen = p.kernel_drops_seen.max(kernel_drops);
        (std::mem::take(&mut p.events), dropped)
    }

    /// Takes the promotion candidates the kernel refused since the last
    /// call (`migrate_misplaced_folio_prepare` failed: the fast node had no
    /// free memory above its watermark, or isolation failed), a sample.
    /// Call after [`Self::drain_promotions`], which empties the ring
    /// buffers.
    pub fn drain_refusals(&self) -> Vec<PromotionEvent> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut p.refusals)
    }

    /// Takes the hint faults on remote (with memory tiering, lower-tier)
    /// pages of the memcgs named by [`Self::set_declined_memcgs`] that the
    /// kernel declined to make promotion candidates since the last call
    /// (later than its hot threshold, or over its rate limit), a sample: at
    /// most what the kernel-side ring buffer holds (~5.4k records), the
    /// first since the last call; `dst_nid` is `HF_NO_NODE` (`u32::MAX`).
    pub fn drain_declined(&self) -> Vec<PromotionEvent> {
        let _ = self.declined_ring.consume();
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut p.declined)
    }

    /// Makes the kernel side record the declined hint faults (see
    /// [`Self::drain_declined`]) of exactly the memcgs `ids` (cgroup ids, as
    /// `PromotionEvent::memcg_id`) from now on; none until the first call.
    /// At most 1024 memcgs: beyond it the rest are left out. Returns how
    /// many map entries changed.
    ///
    /// Errors: [`ProbeError::Load`] (step `declined filter`) when the
    /// kernel refuses a map update or delete.
    pub fn set_declined_memcgs(&self, ids: &HashSet<u64>) -> Result<usize, ProbeError> {
        let map = &self.skel.maps.declined_memcgs;
        // Keys first: deleting while walking a hash map restarts the walk.
        let held: Vec<u64> = map
            .keys()
            .filter_map(|k| k.get(..8)?.try_into().ok().map(u64::from_ne_bytes))
            .collect();
        let mut changed = 0;
        for id in held.iter().filter(|id| !ids.contains(id)) {
            map.delete(&id.to_ne_bytes())
                .map_err(|e| libbpf_err("declined filter", e))?;
            changed += 1;
        }
        let room = DECLINED_MEMCGS.saturating_sub(held.len() - changed);
        for id in ids.iter().filter(|id| !held.contains(id)).take(room) {
            map.update(&id.to_ne_bytes(), &[1], MapFlags::ANY)
                .map_err(|e| libbpf_err("declined filter", e))?;
            changed += 1;
        }
        Ok(changed)
    }

    /// Reads every map. Entries deleted concurrently are skipped.
    pub fn read(&self) -> Result<ProbeReading, ProbeError> {
        let counts_map = &self.skel.maps.counts;
        let mut out = ProbeReading::default();
        for key in counts_map.keys() {
            let Some(vals) = counts_map
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(|e| libbpf_err("map lookup", e))?
            else {
                continue;
            };
            out.counts.insert(decode_key(&key)?, decode_counts(&vals)?);
        }
        let zero = 0u32.to_ne_bytes();
        if let Some(vals) = self
            .skel
            .maps
            .latency
            .lookup_percpu(&zero, MapFlags::ANY)
            .map_err(|e| libbpf_err("map lookup", e))?
        {
            (out.latency_ns_log2, out.migrate_cpu_ns) = decode_latency(&vals)?;
        }
        Ok(out)
    }

    /// Deletes the entries of memcgs for which `keep` is false (cgroups that
    /// are gone: their ids are never reused while the entry would matter,
    /// but the map is bounded). Returns how many entries were deleted.
    pub fn prune(&self, reading: &ProbeReading, keep: impl Fn(u64) -> bool) -> usize {
        let mut n = 0;
        for k in reading.counts.keys().filter(|k| !keep(k.memcg_id)) {
            if self.skel.maps.counts.delete(&encode_key(k)).is_ok() {
                n += 1;
            }
        }
        n
    }
}

/// Reads `CONFIG_NODES_SHIFT` from a kernel config file (`/boot/config-*`),
/// when one is at hand.
pub fn nodes_shift_from_config(path: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("CONFIG_NODES_SHIFT="))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_bytes(memcg: u64, src: u32, dst: u32) -> Vec<u8> {
        let mut v = memcg.to_ne_bytes().to_vec();
        v.extend_from_slice(&src.to_ne_bytes());
        v.extend_from_slice(&dst.to_ne_bytes());
        v
    }

    fn counts_bytes(f: [u64; 7]) -> Vec<u8> {
        f.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    #[test]
    fn layouts_match_the_shared_header() {
        assert_eq!(size_of::<types::hf_key>(), 16);
        assert_eq!(size_of::<types::hf_counts>(), 7 * 8);
        assert_eq!(size_of::<types::hf_hist>(), (LATENCY_BUCKETS + 1) * 8);
        assert_eq!(size_of::<types::hf_promotion>(), 40);
    }

    #[test]
    fn key_decodes_and_round_trips() {
        let k = decode_key(&key_bytes(4242, 1, 0)).unwrap();
        assert_eq!(
            k,
            HintKey {
                memcg_id: 4242,
                src_nid: 1,
                dst_nid: Some(0)
            }
        );
        assert_eq!(encode_key(&k), key_bytes(4242, 1, 0));
        let none = decode_key(&key_bytes(7, 0, u32::MAX)).unwrap();
        assert_eq!(none.dst_nid, None);
        assert_eq!(encode_key(&none), key_bytes(7, 0, u32::MAX));
    }

    #[test]
    fn counts_are_summed_over_cpus_field_by_field() {
        let cpu0 = counts_bytes([10, 4, 1, 2, 1, 513, 1]);
        let cpu1 = counts_bytes([5, 5, 0, 5, 0, 5, 0]);
        let c = decode_counts(&[cpu0, cpu1]).unwrap();
        assert_eq!(
            c,
            HintCounts {
                hint_faults: 15,
                candidates: 9,
                prepare_failed: 1,
                migrated: 7,
                migrate_failed: 1,
                migrated_pages: 518,
                migrate_failed_pages: 1,
            }
        );
    }

    #[test]
    fn short_or_long_records_are_errors() {
        assert!(matches!(
            decode_key(&[0u8; 12]),
            Err(ProbeError::Record {
                len: 12,
                want: 16,
                ..
            })
        ));
        let e = decode_counts(&[vec![0u8; 57]]).unwrap_err();
        assert!(e.to_string().contains("57 bytes, expected 56"), "{e}");
    }

    #[test]
    fn latency_histogram_sums() {
        let n = LATENCY_BUCKETS * 8;
        let mut a = vec![0u8; n + 8];
        a[8 * 12..8 * 13].copy_from_slice(&3u64.to_ne_bytes());
        a[n..].copy_from_slice(&25_000u64.to_ne_bytes());
        let mut b = vec![0u8; n + 8];
        b[8 * 12..8 * 13].copy_from_slice(&2u64.to_ne_bytes());
        b[8 * 31..n].copy_from_slice(&1u64.to_ne_bytes());
        b[n..].copy_from_slice(&3_000_000_000u64.to_ne_bytes());
        let (h, total) = decode_latency(&[a, b]).unwrap();
        assert_eq!(h[12], 5);
        assert_eq!(h[31], 1);
        assert_eq!(h.iter().sum::<u64>(), 6);
        // Per-CPU sums add up; a record of the old size is refused.
        assert_eq!(total, 3_000_025_000);
        assert!(decode_latency(&[vec![0u8; n]]).is_err());
    }

    #[test]
    fn deltas_and_memcg_totals() {
        let mut r = ProbeReading::default();
        let k = |m, s, d| HintKey {
            memcg_id: m,
            src_nid: s,
            dst_nid: d,
        };
        let c = |h, p| HintCounts {
            hint_faults: h,
            migrated_pages: p,
            ..Default::default()
        };
        r.counts.insert(k(5, 0, None), c(10, 0));
        r.counts.insert(k(6, 1, Some(0)), c(3, 2));
        r.counts.insert(k(6, 1, None), c(4, 0));
        r.counts.insert(k(7, 1, None), c(100, 0));
        assert_eq!(r.memcg_total(6), c(7, 2));
        assert_eq!(r.memcg_total(99), HintCounts::default());
        assert_eq!(c(7, 2).since(&c(3, 5)), c(4, 0));
    }

    #[test]
    fn promotion_record_decodes() {
        let mut b = 77u64.to_ne_bytes().to_vec();
        b.extend_from_slice(&0x7f00_1234_5000u64.to_ne_bytes());
        for x in [4242u32, 512, 1, 0, 850, 0] {
            b.extend_from_slice(&x.to_ne_bytes());
        }
        let e = PromotionEvent {
            memcg_id: 77,
            pid: 4242,
            addr: 0x7f00_1234_5000,
            nr_pages: 512,
            src_nid: 1,
            dst_nid: 0,
            latency_ms: Some(850),
        };
        assert_eq!(decode_promotion(&b).unwrap(), e);
        // HF_NO_LATENCY reads as none.
        b[32..36].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(
            decode_promotion(&b).unwrap(),
            PromotionEvent {
                latency_ms: None,
                ..e
            }
        );
        assert!(decode_promotion(&b[..38]).is_err());
    }

    #[test]
    fn nodes_shift_parsed_from_kernel_config() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config");
        std::fs::write(&p, "CONFIG_NUMA=y\nCONFIG_NODES_SHIFT=10\n").unwrap();
        assert_eq!(nodes_shift_from_config(&p), Some(10));
        assert_eq!(nodes_shift_from_config(&d.path().join("none")), None);
    }
}
