//! `move_pages(2)` placement queries and page moves of another process.
//!
//! Kernel rules this module relies on (Linux 6.12, `mm/migrate.c`,
//! `kernel_move_pages` → `do_pages_stat` / `do_pages_move`):
//! - `nodes == NULL` is a query: every status entry gets the page's node or a
//!   negative errno (`-ENOENT` not present or the zero page, `-EFAULT` not
//!   mapped); nothing moves.
//! - A plain move (`MPOL_MF_MOVE`) of another process needs ptrace read access
//!   to it (`ptrace_may_access(PTRACE_MODE_READ_REALCREDS)`, else `EPERM`); a
//!   pid that does not exist is `ESRCH`; an exiting process has no mm
//!   (`EINVAL`).
//! - The destination must be in the process's `cpuset.mems`, else the whole
//!   call fails with `EACCES` (`!node_isset(node, task_nodes)`); a page mapped
//!   by more than one process gets the per-page status `-EACCES`
//!   (`folio_likely_mapped_shared` without `MPOL_MF_MOVE_ALL`).
//! - A page that cannot be isolated from the LRU gets `-EBUSY`; so does a second
//!   address inside a THP whose head was already queued in the same call.
//! - A page already on the destination gets the destination as its status,
//!   exactly like a moved page: hence [`Mover::move_ranges`] queries first.
//! - A positive return value is the number of pages not migrated (the failures of
//!   the last migrated batch plus every page after the one being processed);
//!   status entries of that batch and of the pages after it are left unwritten.
//! - `-ENOMEM` from `migrate_pages` (destination node full) fails the call.
//! - One address moves the whole folio, so a THP is passed once, by its head.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use serde::Serialize;

/// `MPOL_MF_MOVE` (include/uapi/linux/mempolicy.h): move pages mapped only by
/// this process.
pub const MPOL_MF_MOVE: i32 = 2;

/// Default pages per `move_pages(2)` call.
pub const DEFAULT_BATCH: usize = 1024;

/// Status prefill: the kernel never writes it, so an entry that still holds it
/// was left unwritten.
const SENTINEL: i32 = i32::MIN;

/// Addresses per query call (placement lookups are cheap; this bounds memory
/// and the time a call holds the target's mmap lock).
const QUERY_CHUNK: usize = 8192;

/// `/proc/kpageflags` bits (include/uapi/linux/kernel-page-flags.h).
const KPF_COMPOUND_HEAD: u64 = 1 << 15;
const KPF_COMPOUND_TAIL: u64 = 1 << 16;
const KPF_THP: u64 = 1 << 22;
/// `/proc/PID/pagemap` (Documentation/admin-guide/mm/pagemap.rst).
const PM_PRESENT: u64 = 1 << 63;
const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// One page's status from `move_pages(2)` (`mm/migrate.c` `do_pages_stat`,
/// `do_pages_move`, `add_page_for_migration`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PageStatus {
    /// The page is on this node (after a move: moved there, or already there).
    Node(u32),
    /// `-EBUSY`: not isolatable right now (LRU, pinned, or a second address in
    /// a THP already queued in the same call); retry later.
    Busy,
    /// `-ENOENT`: not present (never touched, swapped out, the zero page).
    NotPresent,
    /// `-EFAULT`: no VMA, or a VMA that cannot migrate (VM_IO, VM_PFNMAP).
    Fault,
    /// `-EACCES`: mapped by more than one process (plain MOVE moves only
    /// pages mapped by this process alone).
    Denied,
    /// Any other negative errno, as the positive errno value.
    Other(i32),
}

impl PageStatus {
    /// Decodes a raw status entry: a node id (≥ 0) or a negative errno.
    pub fn from_raw(raw: i32) -> PageStatus {
        match raw {
            n if n >= 0 => PageStatus::Node(n as u32),
            n if n == -libc::EBUSY => PageStatus::Busy,
            n if n == -libc::ENOENT => PageStatus::NotPresent,
            n if n == -libc::EFAULT => PageStatus::Fault,
            n if n == -libc::EACCES => PageStatus::Denied,
            n => PageStatus::Other(n.saturating_neg()),
        }
    }
}

/// A `move_pages(2)` call that failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// `ESRCH` (or `EINVAL` for a process that is exiting and has no memory
    /// left): the process is gone; drop it from the plan.
    #[error("process {pid} no longer exists: nothing to move, drop it from the plan")]
    NoProcess { pid: u32 },
    /// `EPERM`: no ptrace read access to the process (`ptrace_may_access`);
    /// run tierd as root (or with CAP_SYS_PTRACE).
    #[error("not permitted to read or move the pages of process {pid} (EPERM): tierd needs ptrace read access, run it as root")]
    Permission { pid: u32 },
    /// `EACCES` for the whole call: `node` is not in the process's
    /// `cpuset.mems`; widen the container's `cpuset.mems` or skip it.
    #[error("node {node} is not in the cpuset.mems of process {pid} (EACCES): widen the container's cpuset.mems or do not move its pages there")]
    NodeNotAllowed { pid: u32, node: u32 },
    /// Any other failure (`ENODEV`: the node has no memory, `ENOMEM`, ...).
    #[error("move_pages(2) on process {pid} failed: {source}")]
    Io {
        pid: u32,
        #[source]
        source: io::Error,
    },
}

impl MoveError {
    fn from_errno(pid: u32, errno: i32, dest: Option<u32>) -> MoveError {
        match errno {
            libc::ESRCH => MoveError::NoProcess { pid },
            libc::EPERM => MoveError::Permission { pid },
            libc::EACCES if dest.is_some() => MoveError::NodeNotAllowed {
                pid,
                node: dest.unwrap_or_default(),
            },
            libc::EINVAL if process_exiting(pid) => MoveError::NoProcess { pid },
            e => MoveError::Io {
                pid,
                source: io::Error::from_raw_os_error(e),
            },
        }
    }
}

/// Whether `pid` is a zombie or dead (`get_task_mm` returns NULL → EINVAL).
fn process_exiting(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the comm's closing parenthesis.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st == "Z" || st == "X"),
        Err(_) => true,
    }
}

/// What one [`Mover::move_ranges`] call did. Page counts are in pages as passed
/// to the kernel (a THP counts as one page); bytes are counted by page size
/// (base page or THP size).
#[derive(Default, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MoveReport {
    /// Pages whose status after the move is the destination node.
    pub moved_pages: u64,
    /// Bytes of those pages.
    pub moved_bytes: u64,
    /// Bytes of candidate pages that were already on the destination node
    /// (not moved, not counted against the budget).
    pub already_bytes: u64,
    /// Pages with `-EBUSY` (at query or move time).
    pub busy: u64,
    /// Pages with `-ENOENT`: not present (at query or move time).
    pub not_present: u64,
    /// Pages with `-EFAULT`: not mapped / not migratable.
    pub fault: u64,
    /// Pages with `-EACCES`: shared with another process.
    pub denied: u64,
    /// Pages with any other status (including an unexpected node after a move).
    pub other: u64,
    /// Pages submitted but not migrated after a positive return (their status
    /// was left unwritten and a follow-up query did not find them on the
    /// destination), or left in the batch the kernel failed with `ENOMEM`.
    pub not_attempted: u64,
    /// `move_pages(2)` calls made (queries and moves).
    pub syscalls: u64,
    /// The destination ran out of memory (`ENOMEM`); the call stopped there.
    /// (Addition to the first API sketch.)
    pub dest_full: bool,
}

impl MoveReport {
    fn count_error(&mut self, s: PageStatus) {
        match s {
            PageStatus::Node(_) => {}
            PageStatus::Busy => self.busy += 1,
            PageStatus::NotPresent => self.not_present += 1,
            PageStatus::Fault => self.fault += 1,
            PageStatus::Denied => self.denied += 1,
            PageStatus::Other(_) => self.other += 1,
        }
    }
}

/// One address handed to the kernel and the bytes it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Page {
    pub addr: u64,
    pub size: u64,
}

/// The raw system call, behind a trait so that the accounting can be tested
/// against a simulated kernel.
pub(crate) trait Sys {
    /// Query (nodes = NULL): fills `status`; `Err(errno)` when the call fails.
    fn stat(&mut self, pid: u32, addrs: &[u64], status: &mut [i32]) -> Result<(), i32>;
    /// Move every address to `node`: `Ok(n)` with n = the positive return
    /// (pages not migrated), `Err(errno)` when the call fails.
    fn migrate(
        &mut self,
        pid: u32,
        addrs: &[u64],
        node: u32,
        status: &mut [i32],
    ) -> Result<u64, i32>;
}

/// The real kernel.
struct RealSys;

fn raw_move_pages(
    pid: u32,
    addrs: &[u64],
    nodes: Option<&[i32]>,
    status: &mut [i32],
    flags: i32,
) -> Result<u64, i32> {
    assert_eq!(addrs.len(), status.len());
    let ptrs: Vec<*const libc::c_void> = addrs.iter().map(|&a| a as usize as *const _).collect();
    let nodes_ptr = nodes.map_or(std::ptr::null(), |n| {
        assert_eq!(n.len(), addrs.len());
        n.as_ptr()
    });
    // SAFETY: every array has addrs.len() elements and outlives the call; the
    // kernel only reads `pages`/`nodes` and writes `status`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::pid_t,
            addrs.len() as libc::c_ulong,
            ptrs.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            flags as libc::c_int,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(r as u64)
    }
}

impl Sys for RealSys {
    fn stat(&mut self, pid: u32, addrs: &[u64], status: &mut [i32]) -> Result<(), i32> {
        raw_move_pages(pid, addrs, None, status, 0).map(|_| ())
    }

    fn migrate(
        &mut self,
        pid: u32,
        addrs: &[u64],
        node: u32,
        status: &mut [i32],
    ) -> Result<u64, i32> {
        let nodes = vec![node as i32; addrs.len()];
        raw_move_pages(pid, addrs, Some(&nodes), status, MPOL_MF_MOVE)
    }
}

/// Tells whether a THP-size-aligned chunk of the address space is mapped by
/// one transparent huge page.
pub(crate) trait ThpProbe {
    fn is_thp(&mut self, chunk: u64) -> bool;
}

/// THP detection from procfs: `/proc/PID/smaps` (read once, lazily: only VMAs
/// with `AnonHugePages` > 0 can hold a PMD-mapped THP), then for a chunk inside
/// such a VMA `/proc/PID/pagemap` of its first and last page and
/// `/proc/kpageflags` of their frames: a THP when the first is a compound head
/// with KPF_THP at a THP-aligned frame and the last is a KPF_THP tail exactly
/// one THP further on. Needs root (pagemap hides frame numbers otherwise);
/// when any file cannot be read, every chunk counts as base pages (see
/// [`Mover::move_ranges`] for what that means).
struct ProcThp {
    pid: u32,
    page: u64,
    thp: u64,
    /// Sorted (start, end) of VMAs with AnonHugePages > 0; None until loaded.
    vmas: Option<Vec<(u64, u64)>>,
    files: Option<(File, File)>,
    unavailable: bool,
}

impl ProcThp {
    fn new(pid: u32, page: u64, thp: u64) -> ProcThp {
        ProcThp {
            pid,
            page,
            thp,
            vmas: None,
            files: None,
            unavailable: false,
        }
    }

    fn load(&mut self) -> bool {
        if self.unavailable {
            return false;
        }
        if self.vmas.is_some() {
            return true;
        }
        let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", self.pid));
        let pagemap = File::open(format!("/proc/{}/pagemap", self.pid));
        let kpf = File::open("/proc/kpageflags");
        match (smaps, pagemap, kpf) {
            (Ok(s), Ok(pm), Ok(kf)) => {
                self.vmas = Some(thp_vmas(&s));
                self.files = Some((pm, kf));
                true
            }
            (s, pm, kf) => {
                let why = [s.err(), pm.err(), kf.err()]
                    .into_iter()
                    .flatten()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                tracing::debug!(pid = self.pid, error = %why, "no THP detection, moving by base pages");
                self.unavailable = true;
                false
            }
        }
    }

    fn read_u64(f: &File, off: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        f.read_exact_at(&mut b, off).ok()?;
        Some(u64::from_ne_bytes(b))
    }
}

impl ThpProbe for ProcThp {
    fn is_thp(&mut self, chunk: u64) -> bool {
        if !self.load() {
            return false;
        }
        let vmas = self.vmas.as_deref().unwrap_or_default();
        let end = chunk + self.thp;
        let i = vmas.partition_point(|&(_, e)| e <= chunk);
        if !vmas.get(i).is_some_and(|&(s, e)| s <= chunk && end <= e) {
            return false;
        }
        let Some((pm, kf)) = self.files.as_ref() else {
            return false;
        };
        let last = end - self.page;
        let (Some(e0), Some(e1)) = (
            Self::read_u64(pm, chunk / self.page * 8),
            Self::read_u64(pm, last / self.page * 8),
        ) else {
            return false;
        };
        let Some((p0, p1)) = thp_frames(e0, e1, self.thp / self.page) else {
            return false;
        };
        let (Some(f0), Some(f1)) = (
            Self::read_u64(kf, p0.saturating_mul(8)),
            Self::read_u64(kf, p1.saturating_mul(8)),
        ) else {
            return false;
        };
        thp_flags(f0, f1)
    }
}

/// The frames (head, last) of a THP of `frames` base pages, from the
/// `/proc/PID/pagemap` entries of its first and last base page
/// (Documentation/admin-guide/mm/pagemap.rst: bit 63 present, bits 0–54
/// PFN): both present, the head frame non-zero and THP-aligned, the last
/// exactly `frames − 1` after it. `None` otherwise (including `frames` 0).
pub(crate) fn thp_frames(e0: u64, e1: u64, frames: u64) -> Option<(u64, u64)> {
    let (p0, p1) = (e0 & PM_PFN_MASK, e1 & PM_PFN_MASK);
    if frames == 0 || e0 & PM_PRESENT == 0 || e1 & PM_PRESENT == 0 || p0 == 0 || p0 % frames != 0 {
        return None;
    }
    (p0.checked_add(frames - 1) == Some(p1)).then_some((p0, p1))
}

/// Whether `/proc/kpageflags` words of a head and a last frame show one THP:
/// KPF_THP with KPF_COMPOUND_HEAD, then KPF_THP with KPF_COMPOUND_TAIL.
pub(crate) fn thp_flags(f0: u64, f1: u64) -> bool {
    f0 & (KPF_THP | KPF_COMPOUND_HEAD) == KPF_THP | KPF_COMPOUND_HEAD
        && f1 & (KPF_THP | KPF_COMPOUND_TAIL) == KPF_THP | KPF_COMPOUND_TAIL
}

/// (start, end) of the VMAs in `/proc/PID/smaps` text whose `AnonHugePages`
/// is not 0, sorted by address.
pub(crate) fn thp_vmas(smaps: &str) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut cur: Option<(u64, u64)> = None;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                cur = Some((a, b));
                continue;
            }
        }
        if let Some(v) = line.strip_prefix("AnonHugePages:") {
            let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            if kb > 0 {
                out.extend(cur.take());
            }
        }
    }
    out.sort_unstable();
    out
}

/// Turns byte ranges into the addresses to pass to the kernel, in range order,
/// ascending within a range: base-page stride, except that a THP-aligned chunk
/// the probe reports as one THP yields its head address once (size = THP size),
/// however many ranges touch it.
pub(crate) struct Resolver<'a, P> {
    ranges: &'a [(u64, u64)],
    idx: usize,
    cur: u64,
    page: u64,
    thp: u64,
    probe: P,
    seen_thp: HashSet<u64>,
    last_chunk: Option<(u64, bool)>,
}

impl<'a, P: ThpProbe> Resolver<'a, P> {
    pub(crate) fn new(ranges: &'a [(u64, u64)], page: u64, thp: u64, probe: P) -> Self {
        Resolver {
            ranges,
            idx: 0,
            cur: ranges.first().map_or(0, |r| r.0 / page * page),
            page,
            thp,
            probe,
            seen_thp: HashSet::new(),
            last_chunk: None,
        }
    }

    fn chunk_is_thp(&mut self, chunk: u64) -> bool {
        match self.last_chunk {
            Some((c, t)) if c == chunk => t,
            _ => {
                let t = self.thp > self.page && self.probe.is_thp(chunk);
                self.last_chunk = Some((chunk, t));
                t
            }
        }
    }
}

impl<P: ThpProbe> Iterator for Resolver<'_, P> {
    type Item = Page;

    fn next(&mut self) -> Option<Page> {
        loop {
            let &(_, end) = self.ranges.get(self.idx)?;
            if self.cur >= end {
                self.idx += 1;
                if let Some(&(s, _)) = self.ranges.get(self.idx) {
                    self.cur = s / self.page * self.page;
                }
                continue;
            }
            let addr = self.cur;
            let chunk = addr / self.thp.max(1) * self.thp.max(1);
            if self.chunk_is_thp(chunk) {
                self.cur = chunk + self.thp;
                if self.seen_thp.insert(chunk) {
                    return Some(Page {
                        addr: chunk,
                        size: self.thp,
                    });
                }
                continue;
            }
            self.cur = addr + self.page;
            return Some(Page {
                addr,
                size: self.page,
            });
        }
    }
}

/// Queries in chunks; statuses in address order.
fn query_with(sys: &mut impl Sys, pid: u32, addrs: &[u64]) -> Result<Vec<i32>, MoveError> {
    let mut out = Vec::with_capacity(addrs.len());
    for c in addrs.chunks(QUERY_CHUNK) {
        let mut st = vec![SENTINEL; c.len()];
        sys.stat(pid, c, &mut st)
            .map_err(|e| MoveError::from_errno(pid, e, None))?;
        out.extend_from_slice(&st);
    }
    Ok(out)
}

/// Queries the node of each address of process `pid` (0 = the caller) with
/// `move_pages(2)` and `nodes = NULL` (`do_pages_stat`: nothing moves).
/// Addresses should be page-aligned; any address inside a page (or THP) reports
/// that page's node. Chunks internally ([`QUERY_CHUNK`] addresses per call).
///
/// Errors: [`MoveError::NoProcess`] (ESRCH), [`MoveError::Permission`] (EPERM:
/// no ptrace read access), [`MoveError::Io`] otherwise.
pub fn query_nodes(pid: u32, addrs: &[u64]) -> Result<Vec<PageStatus>, MoveError> {
    Ok(query_with(&mut RealSys, pid, addrs)?
        .into_iter()
        .map(PageStatus::from_raw)
        .collect())
}

/// The base page size (`sysconf(_SC_PAGESIZE)`, 4 KiB on x86-64).
pub fn base_page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// The PMD THP size from `/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`,
/// else 2 MiB.
pub fn thp_size() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2 << 20)
}

/// Moves pages of other processes between NUMA nodes with `move_pages(2)`.
#[derive(Debug, Clone)]
pub struct Mover {
    batch: usize,
    page_size: u64,
    thp_size: u64,
}

impl Default for Mover {
    fn default() -> Self {
        Mover::new(DEFAULT_BATCH)
    }
}

impl Mover {
    /// A mover passing at most `batch` pages (≥ 1) per `move_pages(2)` call;
    /// the kernel migrates them as one list, so a larger batch means fewer
    /// calls and longer holds of the target's mmap lock. Default 1024.
    pub fn new(batch: usize) -> Self {
        Mover {
            batch: batch.max(1),
            page_size: base_page_size(),
            thp_size: thp_size(),
        }
    }

    /// Pages per call.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Moves pages of process `pid` in `ranges` (byte ranges `[start, end)`,
    /// e.g. DAMON regions hottest-first; the order is kept, pages ascending
    /// within a range; ranges should not overlap) that currently sit on a node
    /// in `from` to node `dest`, until `budget_bytes` have been moved.
    ///
    /// Ranges resolve to base-page addresses, except that a THP-aligned chunk
    /// mapped by a THP gives one address (its head, counted as the THP size),
    /// detected through smaps/pagemap/kpageflags. The pages' nodes are queried
    /// first: pages on `dest` add to `already_bytes`, pages on neither `from`
    /// nor `dest` are skipped, errors are counted; pages on `from` are moved in
    /// batches. The budget is never exceeded by the bytes counted: at the first
    /// page that would exceed it (after the pending batch has been moved) the
    /// call stops. Busy pages are not retried (the next call will).
    ///
    /// Without THP detection (not root, no `/proc/kpageflags`), a THP is passed
    /// as base pages: the first address moves the whole THP, the next one in the
    /// same call gets `-EBUSY` (counted in `busy`), the rest find it on `dest`
    /// and count as moved base pages, so the bytes still add up to about the
    /// THP size, but a THP at the budget's edge may move whole.
    ///
    /// Errors: [`MoveError::NoProcess`] (the process vanished),
    /// [`MoveError::Permission`] (no ptrace read access),
    /// [`MoveError::NodeNotAllowed`] (`dest` not in the process's
    /// `cpuset.mems`), [`MoveError::Io`] otherwise. The destination running out
    /// of memory is not an error: the report says `dest_full`.
    pub fn move_ranges(
        &self,
        pid: u32,
        ranges: &[(u64, u64)],
        from: &[u32],
        dest: u32,
        budget_bytes: u64,
    ) -> Result<MoveReport, MoveError> {
        let probe = ProcThp::new(pid, self.page_size, self.thp_size);
        let pages = Resolver::new(ranges, self.page_size, self.thp_size, probe);
        self.run(pid, pages, from, dest, budget_bytes)
    }

    /// Moves the pages `pages` of process `pid` — (address, size in bytes):
    /// a base page, or a THP by its head address with the THP size, as the
    /// caller knows them (e.g. from the kernel's own migration records) —
    /// that sit on a node in `from` to `dest`, in the order given, until
    /// `budget_bytes`. Accounting, budget and errors as
    /// [`Self::move_ranges`], without its THP detection (no smaps read).
    pub fn move_pages(
        &self,
        pid: u32,
        pages: &[(u64, u64)],
        from: &[u32],
        dest: u32,
        budget_bytes: u64,
    ) -> Result<MoveReport, MoveError> {
        let pages = pages.iter().map(|&(addr, size)| Page { addr, size });
        self.run(pid, pages, from, dest, budget_bytes)
    }

    fn run(
        &self,
        pid: u32,
        pages: impl Iterator<Item = Page>,
        from: &[u32],
        dest: u32,
        budget: u64,
    ) -> Result<MoveReport, MoveError> {
        move_with(&mut RealSys, pages, pid, from, dest, budget, self.batch)
    }

    /// Estimates how the bytes of each range split over nodes from at most
    /// `max_samples` queried base pages in total, spread evenly (stride
    /// sampling; every non-empty range gets at least one sample when
    /// `max_samples` ≥ the number of ranges). Per range: (node, fraction of
    /// its present samples), sorted by node; samples that are not present or
    /// not mapped are left out, so a range with none present gives an empty
    /// list. Errors as [`query_nodes`].
    pub fn sample_nodes(
        &self,
        pid: u32,
        ranges: &[(u64, u64)],
        max_samples: usize,
    ) -> Result<Vec<Vec<(u32, f64)>>, MoveError> {
        sample_with(&mut RealSys, pid, ranges, max_samples, self.page_size)
    }
}

/// The move loop, over any kernel and any page stream.
pub(crate) fn move_with(
    sys: &mut impl Sys,
    mut pages: impl Iterator<Item = Page>,
    pid: u32,
    from: &[u32],
    dest: u32,
    budget: u64,
    batch: usize,
) -> Result<MoveReport, MoveError> {
    let mut rep = MoveReport::default();
    let mut pending: Vec<Page> = Vec::with_capacity(batch);
    // Bytes in `pending`.
    let mut queued = 0u64;
    let mut chunk: Vec<Page> = Vec::with_capacity(QUERY_CHUNK);
    let mut addrs: Vec<u64> = Vec::with_capacity(QUERY_CHUNK);
    let mut st: Vec<i32> = Vec::with_capacity(QUERY_CHUNK);
    'outer: loop {
        chunk.clear();
        chunk.extend(pages.by_ref().take(QUERY_CHUNK));
        if chunk.is_empty() {
            break;
        }
        addrs.clear();
        addrs.extend(chunk.iter().map(|p| p.addr));
        st.clear();
        st.resize(chunk.len(), SENTINEL);
        rep.syscalls += 1;
        sys.stat(pid, &addrs, &mut st)
            .map_err(|e| MoveError::from_errno(pid, e, None))?;
        for (p, &s) in chunk.iter().zip(&st) {
            match PageStatus::from_raw(s) {
                PageStatus::Node(n) if n == dest => rep.already_bytes += p.size,
                PageStatus::Node(n) if from.contains(&n) => {
                    if rep.moved_bytes + queued + p.size > budget {
                        flush(sys, pid, dest, &mut pending, &mut rep)?;
                        queued = 0;
                        if rep.dest_full || rep.moved_bytes + p.size > budget {
                            break 'outer;
                        }
                    }
                    pending.push(*p);
                    queued += p.size;
                    if pending.len() >= batch {
                        flush(sys, pid, dest, &mut pending, &mut rep)?;
                        queued = 0;
                        if rep.dest_full {
                            break 'outer;
                        }
                    }
                }
                PageStatus::Node(_) => {}
                e => rep.count_error(e),
            }
        }
    }
    if !rep.dest_full {
        flush(sys, pid, dest, &mut pending, &mut rep)?;
    }
    pending.clear();
    Ok(rep)
}

/// Moves `pending` to `dest` in one call and accounts the result.
fn flush(
    sys: &mut impl Sys,
    pid: u32,
    dest: u32,
    pending: &mut Vec<Page>,
    rep: &mut MoveReport,
) -> Result<(), MoveError> {
    if pending.is_empty() {
        return Ok(());
    }
    let addrs: Vec<u64> = pending.iter().map(|p| p.addr).collect();
    let mut st = vec![SENTINEL; addrs.len()];
    rep.syscalls += 1;
    let partial = match sys.migrate(pid, &addrs, dest, &mut st) {
        Ok(0) => false,
        Ok(_) => true,
        Err(libc::ENOMEM) => {
            rep.dest_full = true;
            true
        }
        Err(e) => return Err(MoveError::from_errno(pid, e, Some(dest))),
    };
    if partial {
        // Unwritten entries: part of them moved (the batch migrate_pages was
        // working on), the rest did not; ask where they are now.
        let idx: Vec<usize> = (0..st.len()).filter(|&i| st[i] == SENTINEL).collect();
        if !idx.is_empty() {
            let a: Vec<u64> = idx.iter().map(|&i| addrs[i]).collect();
            let mut s2 = vec![SENTINEL; a.len()];
            rep.syscalls += 1;
            sys.stat(pid, &a, &mut s2)
                .map_err(|e| MoveError::from_errno(pid, e, None))?;
            for (&i, &s) in idx.iter().zip(&s2) {
                if s == dest as i32 {
                    st[i] = s;
                }
            }
        }
    }
    account(pending, &st, dest, rep);
    pending.clear();
    Ok(())
}

/// Adds one move call's statuses to the report: the destination node = moved,
/// [`SENTINEL`] = not attempted, errors by kind.
pub(crate) fn account(pages: &[Page], status: &[i32], dest: u32, rep: &mut MoveReport) {
    for (p, &s) in pages.iter().zip(status) {
        if s == SENTINEL {
            rep.not_attempted += 1;
            continue;
        }
        match PageStatus::from_raw(s) {
            PageStatus::Node(n) if n == dest => {
                rep.moved_pages += 1;
                rep.moved_bytes += p.size;
            }
            PageStatus::Node(_) => rep.other += 1,
            e => rep.count_error(e),
        }
    }
}

/// Sample addresses per range (see [`Mover::sample_nodes`]).
pub(crate) fn sample_plan(ranges: &[(u64, u64)], max: usize, page: u64) -> Vec<Vec<u64>> {
    let spans: Vec<(u64, u64)> = ranges
        .iter()
        .map(|&(s, e)| {
            let s = s / page * page;
            let n = if e > s { (e - s).div_ceil(page) } else { 0 };
            (s, n)
        })
        .collect();
    let total: u64 = spans.iter().map(|&(_, n)| n).sum();
    let mut out = vec![Vec::new(); ranges.len()];
    if total == 0 || max == 0 {
        return out;
    }
    let nonempty = spans.iter().filter(|&&(_, n)| n > 0).count() as u64;
    let max = max as u64;
    let counts: Vec<u64> = if total <= max {
        spans.iter().map(|&(_, n)| n).collect()
    } else if max >= nonempty {
        let extra = max - nonempty;
        spans
            .iter()
            .map(|&(_, n)| {
                if n == 0 {
                    0
                } else {
                    (1 + (extra as u128 * n as u128 / total as u128) as u64).min(n)
                }
            })
            .collect()
    } else {
        // Fewer samples than ranges: one global stride over all pages.
        let mut counts = vec![0u64; spans.len()];
        let mut r = 0;
        let mut before = 0u64; // pages in ranges before r
        for j in 0..max {
            let pos = ((2 * j + 1) as u128 * total as u128 / (2 * max as u128)) as u64;
            while pos >= before + spans[r].1 {
                before += spans[r].1;
                r += 1;
            }
            counts[r] += 1;
        }
        counts
    };
    for ((s, n), (k, o)) in spans.iter().zip(counts.iter().zip(out.iter_mut())) {
        for j in 0..*k {
            let idx = ((2 * j + 1) as u128 * *n as u128 / (2 * *k as u128)) as u64;
            o.push(s + idx * page);
        }
    }
    out
}

fn sample_with(
    sys: &mut impl Sys,
    pid: u32,
    ranges: &[(u64, u64)],
    max: usize,
    page: u64,
) -> Result<Vec<Vec<(u32, f64)>>, MoveError> {
    let plan = sample_plan(ranges, max, page);
    let flat: Vec<u64> = plan.iter().flatten().copied().collect();
    let st = query_with(sys, pid, &flat)?;
    let mut it = st.into_iter();
    Ok(plan
        .iter()
        .map(|addrs| {
            let mut per: std::collections::BTreeMap<u32, u64> = Default::default();
            let mut present = 0u64;
            for s in it.by_ref().take(addrs.len()) {
                if let PageStatus::Node(n) = PageStatus::from_raw(s) {
                    *per.entry(n).or_default() += 1;
                    present += 1;
                }
            }
            per.into_iter()
                .map(|(n, c)| (n, c as f64 / present as f64))
                .collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const K4: u64 = 4096;
    const M2: u64 = 2 << 20;

    #[test]
    fn status_decoding() {
        assert_eq!(PageStatus::from_raw(0), PageStatus::Node(0));
        assert_eq!(PageStatus::from_raw(3), PageStatus::Node(3));
        assert_eq!(PageStatus::from_raw(-libc::EBUSY), PageStatus::Busy);
        assert_eq!(PageStatus::from_raw(-libc::ENOENT), PageStatus::NotPresent);
        assert_eq!(PageStatus::from_raw(-libc::EFAULT), PageStatus::Fault);
        assert_eq!(PageStatus::from_raw(-libc::EACCES), PageStatus::Denied);
        assert_eq!(
            PageStatus::from_raw(-libc::ENOMEM),
            PageStatus::Other(libc::ENOMEM)
        );
        assert_eq!(PageStatus::from_raw(i32::MIN), PageStatus::Other(i32::MAX));
    }

    #[test]
    fn errno_mapping() {
        assert!(matches!(
            MoveError::from_errno(7, libc::ESRCH, None),
            MoveError::NoProcess { pid: 7 }
        ));
        assert!(matches!(
            MoveError::from_errno(7, libc::EPERM, Some(0)),
            MoveError::Permission { pid: 7 }
        ));
        assert!(matches!(
            MoveError::from_errno(7, libc::EACCES, Some(2)),
            MoveError::NodeNotAllowed { pid: 7, node: 2 }
        ));
        let e = MoveError::from_errno(7, libc::ENODEV, Some(2));
        assert!(matches!(e, MoveError::Io { pid: 7, .. }));
        assert!(e.to_string().contains("process 7"), "{e}");
    }

    /// THP chunks given by address.
    struct SetProbe(HashSet<u64>, u64);
    impl ThpProbe for &mut SetProbe {
        fn is_thp(&mut self, chunk: u64) -> bool {
            self.1 += 1;
            self.0.contains(&chunk)
        }
    }

    fn resolve(ranges: &[(u64, u64)], thps: &[u64]) -> (Vec<Page>, u64) {
        let mut p = SetProbe(thps.iter().copied().collect(), 0);
        let v = Resolver::new(ranges, K4, M2, &mut p).collect();
        (v, p.1)
    }

    #[test]
    fn base_page_stride_keeps_range_order() {
        let base = 0x7f00_0000_0000;
        let (v, _) = resolve(
            &[(base + 8 * K4, base + 10 * K4), (base, base + 2 * K4 + 1)],
            &[],
        );
        let a: Vec<u64> = v.iter().map(|p| p.addr - base).collect();
        assert_eq!(a, vec![8 * K4, 9 * K4, 0, K4, 2 * K4]);
        assert!(v.iter().all(|p| p.size == K4));
        // An unaligned start rounds down.
        let (v, _) = resolve(&[(base + 100, base + K4 + 1)], &[]);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].addr, base);
    }

    #[test]
    fn thp_chunks_collapse_to_one_head() {
        // 2 MiB aligned. The range covers 1 MiB before a THP chunk, the THP
        // chunk, and half a base chunk.
        let base = 0x7f00_0000_0000;
        let start = base + M2 - (1 << 20);
        let end = base + 2 * M2 + (1 << 20);
        let (v, probes) = resolve(&[(start, end)], &[base + M2]);
        assert_eq!(v.len(), 256 + 1 + 256);
        assert_eq!(
            v[256],
            Page {
                addr: base + M2,
                size: M2
            }
        );
        assert_eq!(v[255].addr, base + M2 - K4);
        assert_eq!(v[257].addr, base + 2 * M2);
        assert_eq!(
            v.iter().map(|p| p.size).sum::<u64>(),
            end - start - (1 << 20) + (1 << 20)
        );
        assert_eq!(probes, 3, "one probe per chunk");
        // Two ranges inside the same THP (a DAMON region split): one head, and
        // the head address even when the range starts mid-THP.
        let (v, _) = resolve(
            &[
                (base + M2 + 64 * K4, base + M2 + 80 * K4),
                (base + M2, base + M2 + K4),
            ],
            &[base + M2],
        );
        assert_eq!(
            v,
            vec![Page {
                addr: base + M2,
                size: M2
            }]
        );
    }

    /// A simulated kernel: page → node for each address (base pages and THP
    /// heads), with optional per-address move outcomes.
    #[derive(Default)]
    struct FakeKernel {
        nodes: HashMap<u64, u32>,
        /// Move outcome overrides: address → negative errno.
        fail: HashMap<u64, i32>,
        /// When set, migrate_pages fails this many pages of each call's
        /// batch; the kernel then returns failed + pages after, leaving those
        /// entries unwritten.
        fail_in_batch: Option<usize>,
        enomem: bool,
        calls: Vec<(bool, usize)>,
    }

    impl Sys for FakeKernel {
        fn stat(&mut self, _pid: u32, addrs: &[u64], status: &mut [i32]) -> Result<(), i32> {
            self.calls.push((false, addrs.len()));
            for (a, s) in addrs.iter().zip(status.iter_mut()) {
                *s = self.nodes.get(a).map_or(-libc::ENOENT, |&n| n as i32);
            }
            Ok(())
        }
        fn migrate(
            &mut self,
            _pid: u32,
            addrs: &[u64],
            node: u32,
            status: &mut [i32],
        ) -> Result<u64, i32> {
            self.calls.push((true, addrs.len()));
            if self.enomem {
                return Err(libc::ENOMEM);
            }
            if let Some(k) = self.fail_in_batch {
                // The whole call is one batch: the first k stay, the rest move,
                // nothing is written.
                for (i, a) in addrs.iter().enumerate() {
                    if i >= k {
                        self.nodes.insert(*a, node);
                    }
                }
                return Ok(k.min(addrs.len()) as u64);
            }
            for (a, s) in addrs.iter().zip(status.iter_mut()) {
                if let Some(&e) = self.fail.get(a) {
                    *s = e;
                } else {
                    self.nodes.insert(*a, node);
                    *s = node as i32;
                }
            }
            Ok(0)
        }
    }

    fn pages(n: u64, size: u64, base: u64) -> Vec<Page> {
        (0..n)
            .map(|i| Page {
                addr: base + i * size,
                size,
            })
            .collect()
    }

    #[test]
    fn moves_only_pages_on_from_within_budget_in_order() {
        let mut k = FakeKernel::default();
        let ps = pages(100, K4, 0x1000_0000);
        for (i, p) in ps.iter().enumerate() {
            // every 4th page already on node 0, one on node 2
            let n = if i % 4 == 0 {
                0
            } else if i == 1 {
                2
            } else {
                1
            };
            k.nodes.insert(p.addr, n);
        }
        let rep = move_with(&mut k, ps.iter().copied(), 1, &[1], 0, 40 * K4, 16).unwrap();
        assert_eq!(rep.moved_pages, 40);
        assert_eq!(rep.moved_bytes, 40 * K4);
        // The 40 moved pages are the first 40 node-1 pages in order.
        let moved: Vec<usize> = (0..100)
            .filter(|&i| i % 4 != 0 && i != 1 && k.nodes[&ps[i].addr] == 0)
            .collect();
        let expect: Vec<usize> = (0..100)
            .filter(|&i| i % 4 != 0 && i != 1)
            .take(40)
            .collect();
        assert_eq!(moved, expect);
        assert_eq!(k.nodes[&ps[1].addr], 2, "node 2 is not in `from`");
        // Already-there bytes seen before the budget ran out.
        assert!(rep.already_bytes >= 13 * K4, "{rep:?}");
        // Batches of 16: 16 + 16 + 8 (cut by the budget).
        let moves: Vec<usize> = k.calls.iter().filter(|c| c.0).map(|c| c.1).collect();
        assert_eq!(moves, vec![16, 16, 8]);
        assert_eq!(rep.syscalls, k.calls.len() as u64);
    }

    #[test]
    fn thp_budget_cut_and_failures_free_budget() {
        let mut k = FakeKernel::default();
        let ps = pages(10, M2, 0x4000_0000);
        for p in &ps {
            k.nodes.insert(p.addr, 1);
        }
        k.fail.insert(ps[0].addr, -libc::EBUSY);
        // Budget 5 MiB: two THPs fit; the failed one does not count.
        let rep = move_with(&mut k, ps.iter().copied(), 1, &[1], 0, 5 << 20, 1024).unwrap();
        assert_eq!(rep.moved_pages, 2);
        assert_eq!(rep.moved_bytes, 2 * M2);
        assert_eq!(rep.busy, 1);
        assert_eq!(k.nodes[&ps[1].addr], 0);
        assert_eq!(k.nodes[&ps[2].addr], 0);
        assert_eq!(k.nodes[&ps[3].addr], 1);
    }

    #[test]
    fn query_errors_are_counted() {
        let mut k = FakeKernel::default();
        let ps = pages(4, K4, 0x1000);
        k.nodes.insert(ps[0].addr, 1);
        let rep = move_with(&mut k, ps.iter().copied(), 1, &[1], 0, u64::MAX, 8).unwrap();
        assert_eq!(rep.moved_pages, 1);
        assert_eq!(rep.not_present, 3);
    }

    #[test]
    fn positive_return_counts_unwritten_entries() {
        // Kernel contract: the failing batch's entries are left unwritten and
        // some of them may have moved; the follow-up query sorts them out.
        let mut k = FakeKernel {
            fail_in_batch: Some(3),
            ..Default::default()
        };
        let ps = pages(10, K4, 0x1000);
        for p in &ps {
            k.nodes.insert(p.addr, 1);
        }
        let rep = move_with(&mut k, ps.iter().copied(), 1, &[1], 0, u64::MAX, 1024).unwrap();
        assert_eq!(rep.moved_pages, 7);
        assert_eq!(rep.not_attempted, 3);
        assert_eq!(rep.syscalls, 3, "query, move, follow-up query");
        // Pure accounting: sentinels are not attempted.
        let mut r = MoveReport::default();
        account(
            &pages(4, K4, 0),
            &[0, -libc::EBUSY, SENTINEL, SENTINEL],
            0,
            &mut r,
        );
        assert_eq!((r.moved_pages, r.busy, r.not_attempted), (1, 1, 2));
    }

    #[test]
    fn enomem_stops_with_dest_full() {
        let mut k = FakeKernel {
            enomem: true,
            ..Default::default()
        };
        let ps = pages(3000, K4, 0x1000);
        for p in &ps {
            k.nodes.insert(p.addr, 1);
        }
        let rep = move_with(&mut k, ps.iter().copied(), 1, &[1], 0, u64::MAX, 1024).unwrap();
        assert!(rep.dest_full);
        assert_eq!(rep.moved_pages, 0);
        assert_eq!(rep.not_attempted, 1024);
        assert_eq!(k.calls.iter().filter(|c| c.0).count(), 1);
    }

    proptest::proptest! {
        /// `/proc/PID/smaps` text of any shape: no panic, VMAs sorted, and
        /// each one the address range of a header line of the input.
        #[test]
        fn smaps_reader_takes_any_text(lines in proptest::collection::vec(
            proptest::prop_oneof![
                "[0-9a-f]{1,16}-[0-9a-f]{1,16} rw-p 00000000 00:00 0",
                "AnonHugePages: {0,8}[0-9]{0,24} kB",
                "[A-Za-z]{1,12}: +[0-9]{1,8} kB",
                proptest::arbitrary::any::<String>(),
            ],
            0..40,
        )) {
            let text = lines.join("\n");
            let vmas = thp_vmas(&text);
            proptest::prop_assert!(vmas.is_sorted());
            let header = |l: &str| {
                let (a, b) = l.split_whitespace().next()?.split_once('-')?;
                Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
            };
            for v in vmas {
                proptest::prop_assert!(
                    text.lines().any(|l| header(l) == Some(v)),
                    "{v:x?} is no header of the input"
                );
            }
        }

        /// Any pagemap and kpageflags words: no panic (no overflow at PFN
        /// 2^55 − 1), and a THP is found only where the layout says so.
        #[test]
        fn pagemap_words_of_any_value(e0: u64, e1: u64, f0: u64, f1: u64, shift in 0u32..12) {
            let frames = 1u64 << shift;
            if let Some((p0, p1)) = thp_frames(e0, e1, frames) {
                proptest::prop_assert!(p0 != 0 && p0 % frames == 0 && p1 == p0 + frames - 1);
                proptest::prop_assert!(e0 & PM_PRESENT != 0 && e1 & PM_PRESENT != 0);
            }
            proptest::prop_assert_eq!(thp_frames(e0, e1, 0), None);
            let _ = thp_flags(f0, f1);
        }
    }

    #[test]
    fn pagemap_words_of_a_thp() {
        // A 2 MiB THP at PFN 0x200 (512 frames), entries as the kernel
        // writes them (present, exclusive bits set beside the PFN).
        let e = |pfn: u64| PM_PRESENT | (1 << 56) | pfn;
        assert_eq!(thp_frames(e(0x200), e(0x3ff), 512), Some((0x200, 0x3ff)));
        assert_eq!(thp_frames(e(0x200), e(0x3fe), 512), None);
        assert_eq!(thp_frames(e(0x201), e(0x400), 512), None);
        assert_eq!(thp_frames(e(0x200) & !PM_PRESENT, e(0x3ff), 512), None);
        assert_eq!(thp_frames(e(0), e(511), 512), None);
        assert!(thp_flags(
            KPF_THP | KPF_COMPOUND_HEAD,
            KPF_THP | KPF_COMPOUND_TAIL
        ));
        assert!(!thp_flags(KPF_COMPOUND_HEAD, KPF_THP | KPF_COMPOUND_TAIL));
        assert!(!thp_flags(KPF_THP | KPF_COMPOUND_HEAD, KPF_THP));
    }

    #[test]
    fn smaps_thp_vmas() {
        let s = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
AnonHugePages:         0 kB
7f0000000000-7f0010000000 rw-p 00000000 00:00 0
Size:             262144 kB
AnonHugePages:    260096 kB
ShmemPmdMapped:        0 kB
7f0020000000-7f0020001000 r--p 00000000 08:01 1234                       /usr/lib/x.so
AnonHugePages:         0 kB
";
        assert_eq!(thp_vmas(s), vec![(0x7f00_0000_0000, 0x7f00_1000_0000)]);
    }

    #[test]
    fn sampling_plan() {
        // All pages when there are few.
        let p = sample_plan(&[(0, 4 * K4), (8 * K4, 9 * K4)], 100, K4);
        assert_eq!(p, vec![vec![0, K4, 2 * K4, 3 * K4], vec![8 * K4]]);
        // Evenly spread, at most max, every range at least one.
        let r = [
            (0, 1000 * K4),
            (1 << 30, (1 << 30) + K4),
            (1 << 32, (1 << 32) + 3000 * K4),
        ];
        let p = sample_plan(&r, 100, K4);
        let n: Vec<usize> = p.iter().map(Vec::len).collect();
        assert!(n.iter().sum::<usize>() <= 100, "{n:?}");
        assert_eq!(n[1], 1);
        assert!(n[2] >= 2 * n[0], "{n:?}");
        for (v, &(s, e)) in p.iter().zip(&r) {
            assert!(v.iter().all(|&a| a >= s && a < e && a % K4 == 0));
            assert!(v.windows(2).all(|w| w[0] < w[1]));
        }
        // Fewer samples than ranges.
        let p = sample_plan(&r, 2, K4);
        assert_eq!(p.iter().map(Vec::len).sum::<usize>(), 2);
        assert!(sample_plan(&r, 0, K4).iter().all(Vec::is_empty));
    }

    #[test]
    fn sample_fractions() {
        let mut k = FakeKernel::default();
        for i in 0..100u64 {
            k.nodes.insert(i * K4, if i < 75 { 0 } else { 1 });
        }
        let f = sample_with(
            &mut k,
            1,
            &[(0, 100 * K4), (1 << 30, (1 << 30) + K4)],
            1000,
            K4,
        )
        .unwrap();
        assert_eq!(f[0], vec![(0, 0.75), (1, 0.25)]);
        assert!(f[1].is_empty(), "not present is left out");
    }

    // ---- against the running kernel ----

    fn own_buffer(len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        for i in (0..len).step_by(4096) {
            v[i] = 1;
        }
        v
    }

    fn page_addrs(v: &[u8]) -> Vec<u64> {
        let s = (v.as_ptr() as u64).div_ceil(K4) * K4;
        let e = (v.as_ptr() as u64 + v.len() as u64) / K4 * K4;
        (s..e).step_by(K4 as usize).collect()
    }

    fn first_node() -> u32 {
        let s = std::fs::read_to_string("/sys/devices/system/node/has_memory").unwrap();
        s.trim().split([',', '-']).next().unwrap().parse().unwrap()
    }

    #[test]
    fn kernel_query_own_pages() {
        let v = own_buffer(1 << 20);
        let a = page_addrs(&v);
        let st = query_nodes(std::process::id(), &a).unwrap();
        let n = first_node();
        assert_eq!(st.len(), a.len());
        // On a one-node host every page is on that node; on more, on some node.
        assert!(
            st.iter().all(|s| matches!(s, PageStatus::Node(_))),
            "{st:?}"
        );
        if std::fs::read_to_string("/sys/devices/system/node/has_memory")
            .unwrap()
            .trim()
            == n.to_string()
        {
            assert!(st.iter().all(|&s| s == PageStatus::Node(n)));
        }
        // Unmapped address: -EFAULT.
        let st = query_nodes(std::process::id(), &[K4]).unwrap();
        assert_eq!(st, vec![PageStatus::Fault]);
    }

    #[test]
    fn kernel_move_to_own_node_is_already_there() {
        let v = own_buffer(1 << 20);
        let a = page_addrs(&v);
        let st = query_nodes(0, &a).unwrap();
        let PageStatus::Node(n) = st[0] else {
            panic!("{st:?}")
        };
        let range = (a[0], a[a.len() - 1] + K4);
        let rep = Mover::new(64)
            .move_ranges(std::process::id(), &[range], &[n], n, u64::MAX)
            .unwrap();
        assert_eq!(rep.already_bytes, a.len() as u64 * K4, "{rep:?}");
        assert_eq!(rep.moved_bytes, 0);
        let f = Mover::default()
            .sample_nodes(std::process::id(), &[range], 16)
            .unwrap();
        assert_eq!(f[0].len(), 1);
        assert_eq!(f[0][0].1, 1.0);
        assert!(f[0].iter().any(|&(node, _)| node == n));
    }

    #[test]
    fn kernel_dead_pid_is_no_process() {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        let e = query_nodes(pid, &[0x1000]).unwrap_err();
        assert!(
            matches!(e, MoveError::NoProcess { pid: p } if p == pid),
            "{e:?}"
        );
        let e = Mover::default()
            .move_ranges(pid, &[(0x1000, 0x3000)], &[1], 0, u64::MAX)
            .unwrap_err();
        assert!(matches!(e, MoveError::NoProcess { .. }), "{e:?}");
    }

    #[test]
    fn kernel_thp_detection_on_own_buffer() {
        // Only meaningful as root with THP available; otherwise says so.
        let len = 8 * M2 as usize;
        // SAFETY: plain anonymous mapping, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let start = (p as u64).div_ceil(M2) * M2;
        let end = start + 4 * M2;
        unsafe {
            libc::madvise(start as *mut _, (end - start) as usize, libc::MADV_HUGEPAGE);
            for a in (start..end).step_by(K4 as usize) {
                *(a as *mut u8) = 1;
            }
        }
        let thp = thp_size();
        let probe = ProcThp::new(std::process::id(), K4, thp);
        let v: Vec<Page> = Resolver::new(&[(start, end)], K4, thp, probe).collect();
        let bytes: u64 = v.iter().map(|p| p.size).sum();
        let huge = v.iter().filter(|p| p.size == thp).count();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let has_thp = thp_vmas(&smaps)
            .iter()
            .any(|&(s, e)| s <= start && end <= e);
        unsafe { libc::munmap(p, len) };
        assert_eq!(bytes, end - start);
        if has_thp && std::fs::File::open("/proc/kpageflags").is_ok() {
            assert!(huge >= 1, "smaps shows THPs but none detected");
        } else {
            eprintln!("no THP on this host (or not root): detection not exercised");
            assert_eq!(huge, 0);
        }
    }
}
