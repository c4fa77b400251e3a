//! `tierload`: a memory-tiering workload that reports where its own pages are.
//!
//! Modes:
//! - `hotset`: GUPS-style random 8-byte read-modify-writes, uniform over a hot
//!   region of the buffer (as in HeMem and Colloid).
//! - `zipf`: cache-like; each page has a Zipf popularity (ranks shuffled over
//!   the buffer with `--seed`), each access touches one random cacheline of a
//!   page drawn from that distribution.
//!
//! The buffer is touched once (written) before the access phase. Every
//! `--report-s` seconds the main thread queries each page's node with
//! `move_pages(2)` (nodes = NULL: a query, no migration) and prints one JSON
//! line to stdout; SIGTERM/SIGINT or `--duration-s` end the run with a final line
//! (`"final": true`) and exit status 0.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, SeedableRng};

use tierload::{
    bounded, parse_latency_ns, parse_node_list, AccessModel, AliasTable, Placement, Report,
    ZipfPages, DEFAULT_FAST_LATENCY_NS, DEFAULT_SLOW_LATENCY_NS, ZIPF_HOT_MASS,
};

const NODE_ROOT: &str = "/sys/devices/system/node";
const MIB: usize = 1 << 20;
/// Pages per move_pages(2) call.
const MOVE_PAGES_BATCH: usize = 4096;
/// Accesses between checks of the stop flag / counter updates (unpaced).
const BATCH: u64 = 4096;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Memory-tiering workload: GUPS hot set or Zipf cache, with move_pages placement reports"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// GUPS: random 8-byte read-modify-writes, uniform over a hot region.
    Hotset {
        /// Hot region size in MiB.
        #[arg(long)]
        hot_mib: usize,
        /// Hot region start, in MiB from the buffer start.
        #[arg(long, default_value_t = 0)]
        hot_offset_mib: usize,
    },
    /// Cache-like: pages drawn by Zipf popularity, one random cacheline each.
    Zipf {
        /// Zipf exponent s (P(rank r) ∝ 1/r^s); 0 is uniform.
        #[arg(long, default_value_t = 0.99)]
        zipf_s: f64,
    },
}

#[derive(Args, Debug)]
struct Common {
    /// Buffer size in MiB.
    #[arg(long, global = true, default_value_t = 0)]
    size_mib: usize,
    /// Label copied into every report.
    #[arg(long, global = true, default_value = "tierload")]
    name: String,
    /// Use transparent huge pages (MADV_HUGEPAGE); default MADV_NOHUGEPAGE.
    #[arg(long, global = true)]
    thp: bool,
    /// Lock the buffer in memory (mlock(2)): its pages go to the
    /// unevictable LRU, so reclaim (kswapd, memory.reclaim) can neither
    /// evict nor demote them, while migration (move_pages, NUMA-balancing
    /// promotion) still moves them. For tests that need a node whose
    /// memory reclaim cannot take. Needs CAP_IPC_LOCK or RLIMIT_MEMLOCK.
    #[arg(long, global = true)]
    mlock: bool,
    /// Seconds between reports (0: only the final report).
    #[arg(long, global = true, default_value_t = 2.0)]
    report_s: f64,
    /// End the access phase after this many seconds (default: run until signalled).
    #[arg(long, global = true)]
    duration_s: Option<f64>,
    /// Pace to this many accesses per second in total (default: as fast as possible).
    #[arg(long, global = true)]
    rate: Option<f64>,
    /// Access threads.
    #[arg(long, global = true, default_value_t = 1)]
    threads: usize,
    /// Seed for the access streams and the Zipf rank shuffle.
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// Fast-tier nodes, e.g. "0" or "0-1,3" (default: /sys/devices/system/node/has_cpu).
    #[arg(long, global = true)]
    fast_nodes: Option<String>,
    /// Every this many milliseconds, force a full TLB flush of the process
    /// (0: never). Emulation aid: QEMU's software TLB holds millions of
    /// entries, so a hot set that a real CPU's TLB (~2K entries) misses
    /// constantly stays cached, the CPU never sets the accessed bit again
    /// after DAMON clears it, and DAMON sees the hot set as idle. A real
    /// CPU re-walks the page table on its TLB misses; this does it for the
    /// emulated one (see docs/NOTES.md "DAMON under TCG").
    #[arg(long, global = true, default_value_t = 10)]
    tlb_refresh_ms: u64,
}

/// Touches then discards 64 scratch pages every `period`: the unmap of more
/// than `tlb_single_page_flush_ceiling` (33) pages makes x86 Linux flush the
/// whole TLB of this mm on every CPU it runs on (arch/x86/mm/tlb.c).
fn tlb_refresher(period: Duration) {
    const PAGES: usize = 64;
    let len = PAGES * 4096;
    // SAFETY: private anonymous mapping owned by this thread for its life.
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
    if p == libc::MAP_FAILED {
        eprintln!(
            "tierload: tlb refresher: mmap failed; DAMON may see hot pages as idle under emulation"
        );
        return;
    }
    loop {
        for i in 0..PAGES {
            // SAFETY: within the mapping.
            unsafe { (p as *mut u8).add(i * 4096).write_volatile(1) };
        }
        // SAFETY: the range is the mapping above.
        unsafe { libc::madvise(p, len, libc::MADV_DONTNEED) };
        thread::sleep(period);
    }
}

/// The anonymous mapping the workload runs on.
struct Buffer {
    base: *mut u8,
    len: usize,
    map_base: *mut libc::c_void,
    map_len: usize,
}

// The buffer is shared by the access threads through atomics only.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    fn new(len: usize, thp: bool) -> Result<Self, String> {
        // With THP, over-allocate to align the buffer to 2 MiB.
        let align = if thp { 2 * MIB } else { 0 };
        let map_len = len + align;
        let map_base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map_base == libc::MAP_FAILED {
            return Err(format!(
                "mmap {len} bytes: {}",
                std::io::Error::last_os_error()
            ));
        }
        let base = if thp {
            let a = map_base as usize;
            ((a + align - 1) & !(align - 1)) as *mut u8
        } else {
            map_base as *mut u8
        };
        let advice = if thp {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        if unsafe { libc::madvise(base as *mut libc::c_void, len, advice) } != 0 {
            eprintln!(
                "tierload: madvise: {} (continuing)",
                std::io::Error::last_os_error()
            );
        }
        Ok(Buffer {
            base,
            len,
            map_base,
            map_len,
        })
    }

    #[inline(always)]
    fn word(&self, idx: usize) -> &AtomicU64 {
        debug_assert!(idx * 8 < self.len);
        // SAFETY: idx is in bounds; the mapping is 8-byte aligned and lives as
        // long as self; all accesses go through atomics.
        unsafe { &*(self.base.add(idx * 8) as *const AtomicU64) }
    }

    /// Read-modify-write of one word: plain load and store, not a locked RMW.
    #[inline(always)]
    fn rmw(&self, idx: usize) {
        let w = self.word(idx);
        w.store(w.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        unsafe {
            libc::munmap(self.map_base, self.map_len);
        }
    }
}

/// What the access threads draw from.
enum Pattern {
    /// Uniform over words `start..start + len`.
    Hot { start_word: u64, words: u64 },
    /// Pages drawn from the access model's weights (alias table).
    Zipf {
        alias: AliasTable,
        words_per_page: usize,
    },
}

fn access_loop(buf: &Buffer, pat: &Pattern, seed: u64, rate: Option<f64>, counter: &AtomicU64) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    // With pacing, bursts of ~10 ms worth of accesses, then sleep to schedule.
    let batch = match rate {
        Some(r) => ((r / 100.0) as u64).clamp(1, BATCH),
        None => BATCH,
    };
    let t0 = Instant::now();
    let mut done: u64 = 0;
    while !STOP.load(Ordering::Relaxed) {
        match pat {
            Pattern::Hot { start_word, words } => {
                for _ in 0..batch {
                    buf.rmw((start_word + bounded(rng.next_u64(), *words)) as usize);
                }
            }
            Pattern::Zipf {
                alias,
                words_per_page,
            } => {
                let lines = (*words_per_page / 8) as u64;
                for _ in 0..batch {
                    let r = rng.next_u64();
                    let page = alias.sample(r);
                    // The 6 low bits (unused by the alias draw) pick the cacheline.
                    let line = ((r & 63) * lines) >> 6;
                    buf.rmw(page * words_per_page + line as usize * 8);
                }
            }
        }
        done += batch;
        counter.fetch_add(batch, Ordering::Relaxed);
        if let Some(r) = rate {
            let due = Duration::from_secs_f64(done as f64 / r);
            let el = t0.elapsed();
            if due > el {
                // Sleep in short steps so a signal is seen promptly.
                thread::sleep((due - el).min(Duration::from_millis(100)));
            }
        }
    }
}

/// Queries the node of every page of the buffer; negative = -errno.
fn query_nodes(buf: &Buffer, page_size: usize, status: &mut [i32]) {
    let mut ptrs: Vec<*mut libc::c_void> = Vec::with_capacity(MOVE_PAGES_BATCH);
    for (chunk_i, chunk) in status.chunks_mut(MOVE_PAGES_BATCH).enumerate() {
        ptrs.clear();
        let first = chunk_i * MOVE_PAGES_BATCH;
        ptrs.extend(
            (0..chunk.len())
                .map(|i| unsafe { buf.base.add((first + i) * page_size) } as *mut libc::c_void),
        );
        // SAFETY: pointers into the buffer; `chunk` has one entry per page.
        if let Err(e) = unsafe { tierload::move_pages(&ptrs, None, chunk, 0) } {
            let errno = -e.raw_os_error().unwrap_or(libc::EINVAL);
            chunk.fill(errno);
        }
    }
}

fn read_node_list(file: &str) -> Option<Vec<i32>> {
    let s = std::fs::read_to_string(Path::new(NODE_ROOT).join(file)).ok()?;
    parse_node_list(&s).ok()
}

/// HMAT read latency of a node from its best initiator, if the firmware gave one.
fn hmat_read_latency(node: i32) -> Option<f64> {
    let p = Path::new(NODE_ROOT).join(format!("node{node}/access0/initiators/read_latency"));
    parse_latency_ns(&std::fs::read_to_string(p).ok()?)
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("tierload: {e}");
        std::process::exit(2);
    }
}

fn run(cli: Cli) -> Result<(), String> {
    let start = Instant::now();
    let c = &cli.common;
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    if c.size_mib == 0 {
        return Err("--size-mib is required and must be > 0".into());
    }
    if c.threads == 0 {
        return Err("--threads must be >= 1".into());
    }
    if !(c.report_s >= 0.0 && c.report_s.is_finite()) {
        return Err("--report-s must be >= 0".into());
    }
    if let Some(r) = c.rate {
        if !(r > 0.0 && r.is_finite()) {
            return Err("--rate must be > 0".into());
        }
    }
    let len = c.size_mib * MIB;
    let pages = len / page_size;
    let words_per_page = page_size / 8;

    let fast_nodes = match &c.fast_nodes {
        Some(s) => parse_node_list(s).map_err(|e| format!("--fast-nodes: {e}"))?,
        None => read_node_list("has_cpu").unwrap_or_else(|| vec![0]),
    };
    // Node latencies for the model: HMAT if present, else 130 ns fast / 250 ns other.
    let mut latency: BTreeMap<i32, f64> = BTreeMap::new();
    for n in read_node_list("online").unwrap_or_else(|| vec![0]) {
        let default = if fast_nodes.contains(&n) {
            DEFAULT_FAST_LATENCY_NS
        } else {
            DEFAULT_SLOW_LATENCY_NS
        };
        latency.insert(n, hmat_read_latency(n).unwrap_or(default));
    }
    let absent_latency = latency
        .values()
        .copied()
        .fold(DEFAULT_SLOW_LATENCY_NS, f64::max);
    let latency_of = |n: i32| {
        latency
            .get(&n)
            .copied()
            .unwrap_or(if fast_nodes.contains(&n) {
                DEFAULT_FAST_LATENCY_NS
            } else {
                DEFAULT_SLOW_LATENCY_NS
            })
    };

    let (mode_name, pattern, model) = match &cli.mode {
        Mode::Hotset {
            hot_mib,
            hot_offset_mib,
        } => {
            if *hot_mib == 0 || hot_offset_mib + hot_mib > c.size_mib {
                return Err(format!(
                    "hot set {hot_offset_mib}+{hot_mib} MiB must be non-empty and within --size-mib {}",
                    c.size_mib
                ));
            }
            let start_page = hot_offset_mib * MIB / page_size;
            let hot_pages = hot_mib * MIB / page_size;
            (
                "hotset",
                Pattern::Hot {
                    start_word: (start_page * words_per_page) as u64,
                    words: (hot_pages * words_per_page) as u64,
                },
                AccessModel::hotset(pages, start_page, hot_pages),
            )
        }
        Mode::Zipf { zipf_s } => {
            if !(*zipf_s >= 0.0 && zipf_s.is_finite()) {
                return Err("--zipf-s must be >= 0".into());
            }
            let z = ZipfPages::new(pages, *zipf_s, c.seed);
            let model = AccessModel::zipf(&z, ZIPF_HOT_MASS);
            (
                "zipf",
                Pattern::Zipf {
                    alias: AliasTable::new(&model.weights),
                    words_per_page,
                },
                model,
            )
        }
    };

    unsafe {
        let h = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGTERM, h);
        libc::signal(libc::SIGINT, h);
    }

    let buf = Arc::new(Buffer::new(len, c.thp)?);
    if c.mlock && unsafe { libc::mlock(buf.base as *const libc::c_void, buf.len) } != 0 {
        return Err(format!(
            "mlock {len} bytes: {} (needs CAP_IPC_LOCK or a larger RLIMIT_MEMLOCK)",
            std::io::Error::last_os_error()
        ));
    }
    // Touch (write) every page once.
    for p in 0..pages {
        if p % 256 == 0 && STOP.load(Ordering::Relaxed) {
            break;
        }
        buf.word(p * words_per_page)
            .store(p as u64, Ordering::Relaxed);
    }
    eprintln!(
        "tierload: {} {mode_name}: {} MiB ({pages} pages) touched in {:.2} s; fast nodes {fast_nodes:?}; latency model {latency:?} ns",
        c.name,
        c.size_mib,
        start.elapsed().as_secs_f64()
    );

    let counter = Arc::new(AtomicU64::new(0));
    let pattern = Arc::new(pattern);
    let per_thread_rate = c.rate.map(|r| r / c.threads as f64);
    let workers: Vec<_> = (0..c.threads)
        .map(|i| {
            let (buf, pattern, counter) = (buf.clone(), pattern.clone(), counter.clone());
            let seed = c.seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            thread::Builder::new()
                .name(format!("access-{i}"))
                .spawn(move || access_loop(&buf, &pattern, seed, per_thread_rate, &counter))
                .expect("spawn access thread")
        })
        .collect();

    if c.tlb_refresh_ms > 0 {
        let period = Duration::from_millis(c.tlb_refresh_ms);
        thread::Builder::new()
            .name("tlb-refresh".into())
            .spawn(move || tlb_refresher(period))
            .expect("spawn tlb refresher");
    }

    let access_start = Instant::now();
    let deadline = c
        .duration_s
        .map(|d| access_start + Duration::from_secs_f64(d.max(0.0)));
    let interval = (c.report_s > 0.0).then(|| Duration::from_secs_f64(c.report_s));
    let mut next_report = interval.map(|i| access_start + i);
    let mut last = (access_start, 0u64);
    let mut status = vec![0i32; pages];
    let stdout = std::io::stdout();
    let mut report = |is_final: bool, last: &mut (Instant, u64)| {
        let now = Instant::now();
        let total = counter.load(Ordering::Relaxed);
        let dt = now.duration_since(last.0).as_secs_f64();
        let rate = if dt > 0.0 {
            (total - last.1) as f64 / dt
        } else {
            0.0
        };
        *last = (now, total);
        query_nodes(&buf, page_size, &mut status);
        let pl = Placement::compute(&status, &model, &fast_nodes, latency_of, absent_latency);
        let r = Report::new(
            start.elapsed().as_secs_f64(),
            &c.name,
            mode_name,
            &pl,
            pages as u64,
            rate,
            total,
            is_final,
        );
        let line = serde_json::to_string(&r).expect("report serialises");
        let mut out = stdout.lock();
        // A closed stdout (reader gone) must not stop the workload.
        let _ = writeln!(out, "{line}").and_then(|_| out.flush());
    };

    loop {
        if STOP.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if let Some(nr) = next_report {
            if now >= nr {
                report(false, &mut last);
                let i = interval.unwrap();
                // Keep the schedule; skip missed slots if a report overran.
                let mut n = nr + i;
                while n <= Instant::now() {
                    n += i;
                }
                next_report = Some(n);
                continue;
            }
        }
        let mut wake = now + Duration::from_millis(50);
        if let Some(nr) = next_report {
            wake = wake.min(nr);
        }
        if let Some(d) = deadline {
            wake = wake.min(d);
        }
        thread::sleep(wake.saturating_duration_since(now));
    }
    STOP.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    report(true, &mut last);
    Ok(())
}
