//! Booting the guest under QEMU and collecting what it printed.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::setup::{Assets, GuestKernel};
use crate::{choice, initramfs, Error, Result};

/// What the guest's lower (CPU-less) tier is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LowerTier {
    /// A plain memory backend on NUMA node 1 whose HMAT latency and
    /// bandwidth (250 ns / 76 GB/s against 130 ns / 614 GB/s) put it in a
    /// lower memory tier. As fast as DRAM under emulation.
    #[default]
    Hmat,
    /// A CXL Type-3 volatile memory device behind a CXL host bridge and
    /// root port, brought up the way production CXL memory is: `cxl_acpi →
    /// cxl_pci → cxl_mem`, a RAM region committed on root decoder
    /// `decoder0.0`, `dax_cxl → kmem`, onlined movable as a CPU-less node
    /// whose tier comes from the device's CDAT. Every access goes through
    /// QEMU's MMIO path: about 5 MB/s against 1.2 GB/s on DRAM.
    Cxl,
}

impl LowerTier {
    /// Both kinds.
    pub const ALL: [LowerTier; 2] = [LowerTier::Hmat, LowerTier::Cxl];

    /// "hmat" or "cxl".
    pub fn name(self) -> &'static str {
        match self {
            LowerTier::Hmat => "hmat",
            LowerTier::Cxl => "cxl",
        }
    }

    /// The kind `$TIERD_LOWER` names ("hmat" or "cxl"), else HMAT.
    ///
    /// Errors: the variable holds anything else (the message names it).
    pub fn from_env() -> std::result::Result<LowerTier, String> {
        choice::from_env("TIERD_LOWER", &Self::ALL, Self::name, "lower tier")
    }
}

impl std::str::FromStr for LowerTier {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        choice::parse(&Self::ALL, Self::name, "lower tier", s)
    }
}

impl std::fmt::Display for LowerTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The kernel modules of the CXL memory path, in load order; each is loaded
/// after the modules it depends on ([`Assets::modules_with_deps`]: busybox
/// `insmod` resolves nothing; 6.12 builds `cxl_core` in, 7.3 does not).
pub const CXL_MODULES: [&str; 6] = [
    "cxl_acpi",
    "cxl_pci",
    "cxl_mem",
    "device_dax",
    "dax_cxl",
    "kmem",
];

/// One emulated CXL host: node 0 with the CPUs and `dram_mib` of memory,
/// and a CPU-less lower tier of `cxl_mib`, either an HMAT-described memory
/// backend or a CXL Type-3 device ([`LowerTier`]).
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// The guest kernel (default: `$TIERD_KERNEL`, else 6.12).
    pub kernel: GuestKernel,
    /// What the lower tier is (default: `$TIERD_LOWER`, else HMAT).
    pub lower: LowerTier,
    /// vCPUs, all on node 0 (default 2).
    pub cpus: u32,
    /// Node 0 memory in MiB (default 1024).
    pub dram_mib: u64,
    /// Node 1 (CPU-less, "CXL") memory in MiB (default 1024); 0 = no node 1.
    pub cxl_mib: u64,
    /// Wall-clock limit for boot + script + power-off (default 10 min).
    pub timeout: Duration,
    /// Wall-clock limit from starting QEMU to the init's first line (default
    /// 2 min, about 25× a TCG boot here); past it the boot counts as hung.
    pub boot_timeout: Duration,
    /// Boots tried before a boot that hung, or whose kernel failed, before
    /// init is [`Error::BootHung`] or [`Error::Kernel`] (default 3). Seen in
    /// CI, Linux 7.3 under TCG: a boot stopped for good right after
    /// "clocksource: Switched to clocksource tsc-early", and one oopsed at
    /// 1.3 s on an `int3` in `enqueue_task_fair` (a static-key site being
    /// patched while the other vCPU ran it). Nothing of the script has run
    /// then, so booting again repeats nothing. The same count bounds the
    /// runs of a script whose QEMU crashed (killed by a signal, SIGSEGV seen
    /// with the CXL Type-3 device): each is a new guest, so a second run
    /// starts from a clean machine.
    pub boot_attempts: u32,
    /// Host executables, copied to `/usr/local/bin/<file name>` with the shared
    /// libraries and loader `ldd` names for them.
    pub binaries: Vec<PathBuf>,
    /// (host file, absolute guest path) pairs, mode preserved.
    pub files: Vec<(PathBuf, String)>,
    /// Kernel modules (`cxl_acpi`, `kmem`, ...) to place decompressed at
    /// `/lib/modules/<release>/<name>.ko`; the script loads them with `insmod`.
    pub modules: Vec<String>,
    /// Stream the guest console and the script's output to our stderr live.
    pub echo: bool,
    /// Stream only the script's output (no kernel log) to our stdout live.
    pub echo_output: bool,
    /// Minimum number of `/sys/devices/virtual/memory_tiering/memory_tier*`
    /// directories; fewer is [`Error::MissingTiers`] (default 2, 0 = no check).
    pub expect_tiers: usize,
    /// Extra kernel command-line arguments.
    pub kernel_args: Vec<String>,
    /// Extra QEMU arguments (devices for the CXL Type-3 path, ...).
    pub qemu_args: Vec<String>,
}

impl Default for VmConfig {
    /// 2 vCPUs, 1 GiB + 1 GiB, 10 minutes; the kernel and the lower tier
    /// from `$TIERD_KERNEL` and `$TIERD_LOWER`, so that one test binary runs
    /// on every kernel and tier (`cargo xtask test` sets them).
    ///
    /// Panics on a value of either variable it does not know.
    fn default() -> Self {
        VmConfig {
            kernel: GuestKernel::from_env().unwrap_or_else(|e| panic!("{e}")),
            lower: LowerTier::from_env().unwrap_or_else(|e| panic!("{e}")),
            cpus: 2,
            dram_mib: 1024,
            cxl_mib: 1024,
            timeout: Duration::from_secs(600),
            boot_timeout: Duration::from_secs(120),
            boot_attempts: 3,
            binaries: Vec::new(),
            files: Vec::new(),
            modules: Vec::new(),
            echo: false,
            echo_output: false,
            expect_tiers: 2,
            kernel_args: Vec::new(),
            qemu_args: Vec::new(),
        }
    }
}

/// What a finished guest produced.
#[derive(Debug, Clone)]
pub struct VmOutput {
    /// The script's exit status (`exit 3` → 3; killed by a signal → 128 + signal).
    pub exit_code: i32,
    /// The script's stdout and stderr, interleaved as written, without kernel
    /// messages (they travel on a second serial port), `\r` removed.
    pub output: String,
    /// The console (first serial port): kernel log and the init's own lines.
    pub console: String,
    /// From starting QEMU to its exit.
    pub duration: Duration,
    /// From starting QEMU to the init's first line (kernel boot).
    pub boot_duration: Duration,
}

/// Kernel console lines that make a run fail, whatever the script returned.
const KERNEL_FAILURES: [&str; 5] = [
    "Kernel panic - not syncing",
    "BUG: ",
    "Oops: ",
    "kernel BUG at",
    "general protection fault",
];

const INIT_TEMPLATE: &str = r###"#!/bin/sh
export PATH=/usr/local/bin:/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup
for c in memory cpuset cpu io; do
    if grep -qw "$c" /sys/fs/cgroup/cgroup.controllers; then
        echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control || echo "testbed: cannot enable $c"
    fi
done
hostname testbed
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
stty -F /dev/ttyS1 raw -echo 2>/dev/null
echo "##TESTBED-INIT-@NONCE@##"
@LOWER_UP@
n=0
tiers=""
for d in /sys/devices/virtual/memory_tiering/memory_tier*; do
    [ -d "$d" ] || continue
    n=$((n + 1))
    tiers="$tiers ${d##*/}=$(cat "$d/nodelist")"
done
if [ "$n" -lt @EXPECT@ ]; then
    echo "##TESTBED-TIERS-@NONCE@ $n$tiers##"
    usleep 300000
    poweroff -f
fi
echo "testbed: memory tiers:$tiers"
cd /root
/bin/sh /testbed/script < /dev/null > /dev/ttyS1 2>&1
rc=$?
sync
echo "##TESTBED-EXIT-@NONCE@ $rc##" > /dev/ttyS1
echo "##TESTBED-EXIT-@NONCE@ $rc##"
usleep 300000
poweroff -f
"###;

/// Brings the CXL Type-3 device's memory online before the tier check: the
/// drivers, then a RAM region over the whole device on root decoder
/// `decoder0.0` with the device's endpoint decoder as its one target (the
/// sysfs sequence of `cxl create-region -t ram`, Documentation/ABI/testing/
/// sysfs-bus-cxl), then waits for the CPU-less node the kmem driver onlines.
/// A step that fails says so on the console; the tier check then fails the
/// run with the tiers it found.
const CXL_UP: &str = r###"
mods=/lib/modules/$(uname -r)
for m in @CXL_MODULES@; do
    insmod "$mods/$m.ko" || echo "testbed: insmod $m failed"
done
cxl=/sys/bus/cxl/devices
ep=""
i=0
while [ $i -lt 300 ]; do
    # The endpoint's first decoder: DPA is handed out in decoder order, so
    # a later one is refused (EBUSY) while the first is unused.
    for d in $cxl/decoder*; do
        [ -f "$d/dpa_size" ] && { ep=${d##*/}; break; }
    done
    [ -n "$ep" ] && [ -f "$cxl/decoder0.0/create_ram_region" ] && [ -f "$cxl/mem0/ram/size" ] && break
    usleep 100000
    i=$((i + 1))
done
size=$(cat "$cxl/mem0/ram/size" 2>/dev/null)
region=$(cat "$cxl/decoder0.0/create_ram_region" 2>/dev/null)
echo "testbed: CXL memdev mem0 ram $size, endpoint decoder $ep, region $region"
cxl_step() {
    echo "$1" > "$2" || echo "testbed: CXL: writing $1 to $2 failed"
}
cxl_step "$region" "$cxl/decoder0.0/create_ram_region"
cxl_step "$(cat "$cxl/decoder0.0/interleave_granularity")" "$cxl/$region/interleave_granularity"
cxl_step 1 "$cxl/$region/interleave_ways"
cxl_step "$size" "$cxl/$region/size"
cxl_step ram "$cxl/$ep/mode"
cxl_step "$size" "$cxl/$ep/dpa_size"
cxl_step "$ep" "$cxl/$region/target0"
cxl_step 1 "$cxl/$region/commit"
[ -e "$cxl/$region/driver" ] || cxl_step "$region" /sys/bus/cxl/drivers/cxl_region/bind
i=0
while [ $i -lt 300 ]; do
    [ "$(ls -d /sys/devices/virtual/memory_tiering/memory_tier* 2>/dev/null | wc -l)" -ge 2 ] && break
    usleep 100000
    i=$((i + 1))
done
echo "testbed: CXL node(s) $(cat /sys/devices/system/node/has_memory) with memory, $(cat /sys/devices/system/node/has_cpu) with CPUs"
"###;

/// One guest at a time per process: two TCG guests on a small machine starve
/// each other and make every time bound meaningless.
static ONE_GUEST: Mutex<()> = Mutex::new(());

/// Boots a guest with `cfg`, runs `script` with busybox `sh` (PATH =
/// `/usr/local/bin:/bin:/sbin:/usr/bin:/usr/sbin`, cwd `/root`, stdin
/// `/dev/null`, cgroup2 mounted at `/sys/fs/cgroup` with memory, cpuset, cpu,
/// io enabled in the root), powers off and returns its exit code and output.
///
/// A boot that does not reach init within [`VmConfig::boot_timeout`], or
/// whose kernel fails (panic/BUG/Oops) before init, is tried again, up to
/// [`VmConfig::boot_attempts`] boots, with a line on stderr naming the
/// console's last line or the failure. So is a run whose QEMU was killed by
/// a signal before init or before the script finished (the emulator
/// crashed: SIGSEGV, and an assertion in `iotlb_to_section`, seen under TCG
/// with the CXL Type-3 device, docs/NOTES.md); the script runs again from
/// the start in a new guest.
///
/// Errors: [`Error::NotSetUp`] (run `cargo xtask setup`), [`Error::Boot`],
/// [`Error::BootHung`] (every boot hung), [`Error::Kernel`] (panic/BUG/Oops
/// on the console, even if the script succeeded), [`Error::Timeout`] (QEMU is
/// killed), [`Error::MissingTiers`] (checked before the script runs),
/// [`Error::NoExit`].
pub fn run(cfg: &VmConfig, script: &str) -> Result<VmOutput> {
    let attempts = cfg.boot_attempts.max(1);
    let mut attempt = 1;
    loop {
        match run_once(cfg, script, attempt) {
            Err(e) if attempt < attempts => match again(&e) {
                Some(why) => {
                    eprintln!("testbed: {why} ({} of {attempts})", attempt + 1);
                    attempt += 1;
                }
                None => return Err(e),
            },
            r => return r,
        }
    }
}

/// Why [`run`] tries again after `e`, or `None` when `e` is the result: a
/// boot that hung or whose kernel failed before init (nothing of the
/// script ran), or a QEMU that crashed (the emulator, not the guest: the
/// script's run is lost with it, and a new guest runs it from the start).
fn again(e: &Error) -> Option<String> {
    match e {
        Error::BootHung {
            after,
            console_tail,
            ..
        } => {
            let last = console_tail.lines().last().unwrap_or("").trim();
            Some(format!(
                "the guest did not reach init in {after:?} (last console line: {last:?}); \
                 booting again"
            ))
        }
        Error::Kernel {
            excerpt,
            before_init: true,
            ..
        } => {
            let first = excerpt.lines().next().unwrap_or("").trim();
            Some(format!(
                "the guest kernel failed before init ({first:?}); booting again"
            ))
        }
        Error::Boot {
            qemu_signal: Some(sig),
            qemu_stderr,
            ..
        } => {
            let last = qemu_stderr.lines().last().unwrap_or("").trim();
            Some(format!(
                "QEMU itself died (signal {sig}: {last:?}) before init; booting again"
            ))
        }
        Error::NoExit {
            qemu_signal: Some(sig),
            ..
        } => Some(format!(
            "QEMU itself died (signal {sig}) before the script finished; running it again \
             in a new guest"
        )),
        _ => None,
    }
}

/// One boot of [`run`]; `attempt` (1-based) only labels [`Error::BootHung`]
/// and [`Error::Kernel`].
fn run_once(cfg: &VmConfig, script: &str, attempt: u32) -> Result<VmOutput> {
    let assets = Assets::find_for(cfg.kernel)?;
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    let mut cfg = cfg.clone();
    let mut cxl_order = Vec::new();
    if cfg.lower == LowerTier::Cxl && cfg.cxl_mib > 0 {
        let want: Vec<String> = CXL_MODULES.iter().map(|m| m.to_string()).collect();
        cxl_order = assets.modules_with_deps(&want)?;
        for m in &cxl_order {
            if !cfg.modules.iter().any(|x| x == m) {
                cfg.modules.push(m.clone());
            }
        }
    }
    let cfg = &cfg;
    let base = initramfs::base(&assets, cfg)?;

    let nonce = format!(
        "{:x}{:x}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
        std::process::id()
    );
    let init = INIT_TEMPLATE
        .replace("@NONCE@", &nonce)
        .replace("@EXPECT@", &cfg.expect_tiers.to_string())
        .replace(
            "@LOWER_UP@",
            &if cfg.lower == LowerTier::Cxl && cfg.cxl_mib > 0 {
                CXL_UP.replace("@CXL_MODULES@", &cxl_order.join(" "))
            } else {
                String::new()
            },
        );
    let runs = assets.cache.join("runs");
    fs::create_dir_all(&runs).map_err(|e| Error::io(&runs, e))?;
    let dir = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&runs)
        .map_err(|e| Error::io(&runs, e))?;
    let initrd = dir.path().join("initrd.cpio");
    fs::copy(&base, &initrd).map_err(|e| Error::io(&initrd, e))?;
    let extra = initramfs::run_archive(&init, script)?;
    fs::OpenOptions::new()
        .append(true)
        .open(&initrd)
        .and_then(|mut f| f.write_all(&extra))
        .map_err(|e| Error::io(&initrd, e))?;
    let out_path = dir.path().join("output.log");
    fs::File::create(&out_path).map_err(|e| Error::io(&out_path, e))?;

    let mut cmd = qemu_command(&assets, cfg, &initrd, &out_path);
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Command {
            cmd: format!("{cmd:?}"),
            detail: e.to_string(),
        })?;

    let console = Arc::new(Mutex::new(Vec::<u8>::new()));
    let stdout = child.stdout.take().expect("piped stdout");
    let reader = {
        let console = Arc::clone(&console);
        let echo = cfg.echo;
        thread::spawn(move || pump(stdout, &console, echo))
    };
    let stderr_buf = Arc::new(Mutex::new(Vec::<u8>::new()));
    let stderr = child.stderr.take().expect("piped stderr");
    let err_reader = {
        let buf = Arc::clone(&stderr_buf);
        thread::spawn(move || pump(stderr, &buf, false))
    };

    let init_marker = format!("##TESTBED-INIT-{nonce}##");
    let exit_marker = format!("##TESTBED-EXIT-{nonce} ");
    let mut boot_duration = None;
    let mut exit_seen: Option<Instant> = None;
    let mut timed_out = false;
    let mut boot_hung = false;
    let mut tail = OutputTail::new(out_path.clone(), cfg.echo, cfg.echo_output);
    let mut qemu_status = None;
    loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            qemu_status = Some(status);
            break;
        }
        // Kernel messages can land in the middle of a marker on the shared
        // console (seen: `##TESTBED-INIT-1[ 2.236708] tsc: ...\n8ea7…##`).
        let text = strip_kernel_lines(&String::from_utf8_lossy(
            &console.lock().unwrap_or_else(|e| e.into_inner()),
        ));
        if boot_duration.is_none() && text.contains(&init_marker) {
            boot_duration = Some(started.elapsed());
        }
        if exit_seen.is_none() && text.contains(&exit_marker) {
            exit_seen = Some(Instant::now());
        }
        tail.poll();
        if exit_seen.is_some_and(|t| t.elapsed() > Duration::from_secs(15)) {
            // Powered off but QEMU lingers: the result is in.
            kill(&mut child);
            break;
        }
        if boot_duration.is_none() && started.elapsed() > cfg.boot_timeout.min(cfg.timeout) {
            boot_hung = cfg.boot_timeout < cfg.timeout;
            timed_out = !boot_hung;
            kill(&mut child);
            break;
        }
        if started.elapsed() > cfg.timeout {
            timed_out = true;
            kill(&mut child);
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let duration = started.elapsed();
    let _ = reader.join();
    let _ = err_reader.join();
    tail.poll();

    let console = String::from_utf8_lossy(&console.lock().unwrap_or_else(|e| e.into_inner()))
        .replace('\r', "");
    if boot_duration.is_none() && strip_kernel_lines(&console).contains(&init_marker) {
        boot_duration = Some(duration);
    }
    let qemu_stderr =
        String::from_utf8_lossy(&stderr_buf.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    let raw_out = fs::read(&out_path).map_err(|e| Error::io(&out_path, e))?;
    let raw_out = String::from_utf8_lossy(&raw_out).replace('\r', "");

    if let Some(excerpt) = kernel_failure(&console) {
        return Err(Error::Kernel {
            excerpt,
            before_init: boot_duration.is_none(),
            attempts: attempt,
        });
    }
    if boot_hung && boot_duration.is_none() {
        return Err(Error::BootHung {
            after: cfg.boot_timeout,
            attempts: attempt,
            console_tail: last_lines(&console, 30),
        });
    }
    let exit_code =
        parse_exit(&raw_out, &exit_marker).or_else(|| parse_exit(&console, &exit_marker));
    if timed_out && exit_code.is_none() {
        return Err(Error::Timeout {
            after: cfg.timeout,
            booted: boot_duration.is_some(),
            console_tail: last_lines(&console, 30),
            output_tail: last_lines(&raw_out, 30),
        });
    }
    if boot_duration.is_none() {
        return Err(Error::Boot {
            console_tail: last_lines(&console, 40),
            qemu_stderr,
            qemu_signal: signal_of(qemu_status),
        });
    }
    let tiers_marker = format!("##TESTBED-TIERS-{nonce} ");
    if let Some(i) = console.find(&tiers_marker) {
        let rest = &console[i + tiers_marker.len()..];
        let rest = rest.split("##").next().unwrap_or("");
        let (n, listing) = rest.split_once(' ').unwrap_or((rest, ""));
        return Err(Error::MissingTiers {
            found: n.trim().parse().unwrap_or(0),
            expected: cfg.expect_tiers,
            listing: listing.trim().to_string(),
        });
    }
    let Some(exit_code) = exit_code else {
        let log_path = qemu_log_path(&out_path);
        let log = fs::read(&log_path).unwrap_or_default();
        return Err(Error::NoExit {
            console_tail: last_lines(&console, 40),
            output_tail: last_lines(&raw_out, 40),
            qemu: qemu_ending(qemu_status, &qemu_stderr, &String::from_utf8_lossy(&log)),
            qemu_signal: signal_of(qemu_status),
        });
    };
    let output = match raw_out.find(&exit_marker) {
        Some(i) => raw_out[..i].to_string(),
        None => raw_out,
    };
    Ok(VmOutput {
        exit_code,
        output,
        console,
        duration,
        boot_duration: boot_duration.unwrap_or_default(),
    })
}

fn qemu_command(
    assets: &Assets,
    cfg: &VmConfig,
    initrd: &std::path::Path,
    out: &std::path::Path,
) -> Command {
    let mut c = Command::new(&assets.qemu);
    let cpus = cfg.cpus.max(1);
    let cxl_device = cfg.lower == LowerTier::Cxl && cfg.cxl_mib > 0;
    // The CXL device's memory is not system RAM: it is mapped in a fixed
    // memory window the kernel finds in ACPI CEDT.
    let total = if cxl_device {
        cfg.dram_mib
    } else {
        cfg.dram_mib + cfg.cxl_mib
    };
    // With the hypervisor CPUID bit the CXL region's commit fails ("Failed
    // to synchronize CPU cache state": the kernel will not flush caches
    // for memory it cannot see being shared).
    let cpu = if cxl_device { "max,-hypervisor" } else { "max" };
    c.args(["-accel", "tcg,thread=multi", "-cpu", cpu]);
    c.args(["-smp", &cpus.to_string(), "-m", &format!("{total}M")]);
    c.args([
        "-object",
        &format!("memory-backend-ram,id=m0,size={}M", cfg.dram_mib),
    ]);
    c.args([
        "-numa",
        &format!("node,nodeid=0,cpus=0-{},memdev=m0,initiator=0", cpus - 1),
    ]);
    // HMAT (ACPI 6.3, QEMU docs/system/invocation "-numa hmat-lb"): the kernel
    // turns the initiator→target performance into an abstract distance
    // (mt_perf_to_adistance) and puts the slower node in a lower tier.
    let mut hmat = vec![(0, 130, "614G")];
    if cxl_device {
        c.args(["-machine", "q35,cxl=on,hmat=on"]);
        c.args([
            "-object",
            &format!("memory-backend-ram,id=cxlmem0,size={}M", cfg.cxl_mib),
        ]);
        c.args(["-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1"]);
        c.args(["-device", "cxl-rp,port=0,bus=cxl.1,id=rp0,chassis=0,slot=2"]);
        c.args([
            "-device",
            "cxl-type3,bus=rp0,volatile-memdev=cxlmem0,id=cxl-vmem0",
        ]);
        // The fixed memory window: a multiple of 256 MiB that holds the device.
        let window = cfg.cxl_mib.div_ceil(256).max(1) * 256;
        c.args([
            "-M",
            &format!("cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size={window}M"),
        ]);
    } else {
        c.args(["-machine", "q35,hmat=on"]);
    }
    if cfg.cxl_mib > 0 && !cxl_device {
        c.args([
            "-object",
            &format!("memory-backend-ram,id=m1,size={}M", cfg.cxl_mib),
        ]);
        c.args(["-numa", "node,nodeid=1,memdev=m1,initiator=0"]);
        hmat.push((1, 250, "76G"));
    }
    for (target, latency_ns, bandwidth) in hmat {
        c.args([
            "-numa",
            &format!("hmat-lb,initiator=0,target={target},hierarchy=memory,data-type=access-latency,latency={latency_ns}"),
        ]);
        c.args([
            "-numa",
            &format!("hmat-lb,initiator=0,target={target},hierarchy=memory,data-type=access-bandwidth,bandwidth={bandwidth}"),
        ]);
    }
    c.args([
        "-display", "none", "-vga", "none", "-nic", "none", "-monitor", "none",
    ]);
    c.args(["-no-reboot", "-serial", "stdio"]);
    // Register state at each CPU reset, for a guest that stops with no word
    // on its console (a triple fault resets the CPU, and -no-reboot then
    // ends QEMU): `Error::NoExit` shows the last one.
    c.args(["-d", "cpu_reset", "-D"]);
    c.arg(qemu_log_path(out));
    c.args(["-serial", &format!("file:{}", out.display())]);
    c.arg("-kernel").arg(&assets.vmlinuz);
    c.arg("-initrd").arg(initrd);
    let mut append = vec!["console=ttyS0", "panic=-1", "oops=panic"];
    if cxl_device {
        // Hot-added memory goes to ZONE_MOVABLE, as production CXL memory
        // does, so it can go offline again.
        append.push("memhp_default_state=online_movable");
    }
    append.extend(cfg.kernel_args.iter().map(String::as_str));
    c.args(["-append", &append.join(" ")]);
    c.args(&cfg.qemu_args);
    c
}

fn pump(mut from: impl Read, into: &Mutex<Vec<u8>>, echo: bool) {
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if echo {
                    let mut e = std::io::stderr().lock();
                    let _ = e.write_all(&buf[..n]);
                    let _ = e.flush();
                }
                into.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&buf[..n]);
            }
        }
    }
}

/// Copies what the guest wrote to the output port as it arrives: to stderr
/// with `echo` (beside the console), to stdout with `echo_output`.
struct OutputTail {
    path: PathBuf,
    pos: u64,
    echo: bool,
    to_stdout: bool,
}

impl OutputTail {
    fn new(path: PathBuf, echo: bool, to_stdout: bool) -> Self {
        OutputTail {
            path,
            pos: 0,
            echo: echo || to_stdout,
            to_stdout,
        }
    }

    fn poll(&mut self) {
        if !self.echo {
            return;
        }
        let Ok(mut f) = fs::File::open(&self.path) else {
            return;
        };
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(self.pos)).is_ok() && f.read_to_end(&mut buf).is_ok() {
            self.pos += buf.len() as u64;
            let text: String = String::from_utf8_lossy(&buf)
                .replace('\r', "")
                .split_inclusive('\n')
                .filter(|l| !l.starts_with("##TESTBED-EXIT-"))
                .collect();
            if self.to_stdout {
                let mut o = std::io::stdout().lock();
                let _ = o.write_all(text.as_bytes());
                let _ = o.flush();
            } else {
                let mut e = std::io::stderr().lock();
                let _ = e.write_all(text.as_bytes());
                let _ = e.flush();
            }
        }
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The signal that ended QEMU, if one did (it crashed, or was killed).
fn signal_of(status: Option<std::process::ExitStatus>) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.and_then(|s| s.signal())
}

/// QEMU's own log (`-D`) beside the run's output file `out`.
fn qemu_log_path(out: &std::path::Path) -> PathBuf {
    out.with_file_name("qemu.log")
}

/// How QEMU ended, for [`Error::NoExit`]: its exit status, the last lines
/// of its stderr, and the last CPU reset it logged (registers included).
fn qemu_ending(status: Option<std::process::ExitStatus>, stderr: &str, log: &str) -> String {
    let status = match (status, signal_of(status)) {
        (Some(s), Some(_)) => format!("QEMU crashed ({s}): the emulator, not the guest"),
        (Some(s), None) => format!(
            "QEMU exited by itself ({s}); under -no-reboot a guest reboot or a \
             CPU reset (triple fault) ends it"
        ),
        (None, _) => "QEMU was stopped by the testbed".to_string(),
    };
    // The log's last reset: from its last "CPU Reset" line on.
    let last_reset = log
        .rfind("CPU Reset")
        .map(|i| last_lines(&log[i..], 30))
        .unwrap_or_else(|| "(none logged)".into());
    format!(
        "{status}\nQEMU stderr tail:\n{}\nlast CPU reset QEMU logged:\n{last_reset}",
        last_lines(stderr, 10)
    )
}

/// `text` without kernel log lines (`[ seconds.micros] message` up to and
/// including its newline), wherever they start: printk output interleaves
/// with what init writes to the same serial console.
fn strip_kernel_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('[') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let stamp_len = after.find(']').filter(|&j| {
            let stamp = after[..j].trim_start();
            let (secs, micros) = stamp.split_once('.').unwrap_or(("", ""));
            !secs.is_empty()
                && !micros.is_empty()
                && secs.bytes().all(|b| b.is_ascii_digit())
                && micros.bytes().all(|b| b.is_ascii_digit())
        });
        match stamp_len {
            Some(j) => {
                let line = &after[j + 1..];
                rest = line.find('\n').map_or("", |k| &line[k + 1..]);
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn parse_exit(text: &str, marker: &str) -> Option<i32> {
    let i = text.find(marker)?;
    text[i + marker.len()..]
        .split("##")
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The first kernel failure line and what follows it (up to 40 lines).
fn kernel_failure(console: &str) -> Option<String> {
    let lines: Vec<&str> = console.lines().collect();
    let i = lines
        .iter()
        .position(|l| KERNEL_FAILURES.iter().any(|p| l.contains(p)))?;
    Some(lines[i..lines.len().min(i + 40)].join("\n"))
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crashed_qemu_runs_the_script_again_a_guest_that_stopped_does_not() {
        let stopped = |qemu_signal| Error::NoExit {
            console_tail: String::new(),
            output_tail: String::new(),
            qemu: String::new(),
            qemu_signal,
        };
        let why = again(&stopped(Some(11))).expect("a SIGSEGV of QEMU is retried");
        assert!(why.contains("signal 11"), "{why}");
        // QEMU ended by itself (a guest reset or power-off): the result.
        assert!(again(&stopped(None)).is_none());
        let boot = |qemu_signal| Error::Boot {
            console_tail: String::new(),
            qemu_stderr: "qemu: physmem.c: iotlb_to_section: Assertion failed.".into(),
            qemu_signal,
        };
        let why = again(&boot(Some(6))).expect("QEMU's abort before init is retried");
        assert!(
            why.contains("signal 6") && why.contains("iotlb_to_section"),
            "{why}"
        );
        // A QEMU that exits before init without a signal (a bad option): the result.
        assert!(again(&boot(None)).is_none());
        assert!(again(&Error::Kernel {
            excerpt: "BUG: x".into(),
            before_init: false,
            attempts: 1
        })
        .is_none());
    }

    #[test]
    fn a_qemu_that_ended_itself_shows_its_status_and_last_reset() {
        use std::os::unix::process::ExitStatusExt;
        let log = "CPU Reset (CPU 0)\nRIP=0000fff0\nCPU Reset (CPU 1)\nRIP=ffffffff81000000\n";
        let t = qemu_ending(Some(ExitStatusExt::from_raw(0)), "warn: x\n", log);
        assert!(t.contains("exited by itself"), "{t}");
        assert!(t.contains("warn: x"), "{t}");
        let reset = t.split_once("last CPU reset").unwrap().1;
        assert!(
            reset.contains("CPU 1") && reset.contains("ffffffff81000000"),
            "{t}"
        );
        assert!(!reset.contains("CPU 0"), "{t}");
        let t = qemu_ending(Some(ExitStatusExt::from_raw(11)), "", log);
        assert!(t.contains("QEMU crashed"), "{t}");
        let t = qemu_ending(None, "", "");
        assert!(
            t.contains("stopped by the testbed") && t.contains("(none logged)"),
            "{t}"
        );
    }

    #[test]
    fn exit_marker_parses() {
        let m = "##TESTBED-EXIT-abc ";
        assert_eq!(parse_exit("x\n##TESTBED-EXIT-abc 3##\n", m), Some(3));
        assert_eq!(parse_exit("##TESTBED-EXIT-abc 0##", m), Some(0));
        assert_eq!(parse_exit("##TESTBED-EXIT-abd 0##", m), None);
    }

    #[test]
    fn markers_survive_interleaved_kernel_lines() {
        // As captured from a CI boot: a printk line split the init marker.
        let console = "[    2.051331] Run /init as init process\r\n##TESTBED-INIT-1[    2.236708] tsc: Refined TSC clocksource calibration: 2596.173 MHz\r\n8ea7bbf59861cbd5675##[    2.237721] clocksource: tsc: mask\r\n\r\ntestbed: [x] memory tiers\r\n";
        let text = strip_kernel_lines(console);
        assert!(
            text.contains("##TESTBED-INIT-18ea7bbf59861cbd5675##"),
            "{text:?}"
        );
        assert!(text.contains("testbed: [x] memory tiers"), "{text:?}");
        assert!(!text.contains("tsc"), "{text:?}");
    }

    #[test]
    fn kernel_failures_are_found() {
        let c = "[    1.0] ok\n[    2.0] BUG: kernel NULL pointer dereference\n[ 2.1] more\n";
        assert!(kernel_failure(c).unwrap().starts_with("[    2.0] BUG"));
        assert!(kernel_failure("[ 1.0] all fine\n").is_none());
    }
}
