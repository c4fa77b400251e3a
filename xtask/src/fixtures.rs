//! `cargo xtask fixtures [--kernel 7.3]`: real kernel files from the guest,
//! byte for byte, under `tests/fixtures/linux-<kernel>/<absolute guest path>`.
//!
//! sysfs/procfs files report a size that has nothing to do with their contents,
//! so the guest first copies each file with `cat` (which reads until EOF), then
//! tars and base64-encodes the copies between marker lines on the output port.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use base64::Engine;

const BEGIN: &str = "=====FIXTURES-BEGIN=====";
const END: &str = "=====FIXTURES-END=====";

/// The guest script: makes the state interesting, then collects the files.
const SCRIPT: &str = r#####"
set -u
CG=/sys/fs/cgroup
APP=$CG/test.slice/app
mkdir $CG/test.slice
echo "+memory +cpuset" > $CG/test.slice/cgroup.subtree_control
mkdir $APP
echo true > /sys/kernel/mm/numa/demotion_enabled

# A tenant: 64 MiB of anon memory held by a shell variable, plus 64 MiB of
# shmem written into tmpfs from inside the cgroup (charged to it).
mkdir -p /tmp/app
sh -c 'echo $$ > '$APP'/cgroup.procs
       dd if=/dev/zero of=/tmp/app/shmem bs=1M count=64 2>/dev/null
       v=$(head -c 67108864 /dev/zero | tr "\0" x)
       touch /tmp/app/ready
       while :; do sleep 1000; done' &
i=0
while [ ! -e /tmp/app/ready ]; do
    i=$((i + 1)); [ $i -gt 600 ] && { echo "tenant never got ready"; exit 1; }
    sleep 0.5
done
echo "app memory.current before reclaim: $(cat $APP/memory.current)"
echo 16M > $APP/memory.reclaim || echo "memory.reclaim: short (EAGAIN is fine)"
echo "app memory.numa_stat after reclaim:"; head -n 2 $APP/memory.numa_stat

# DAMON: one kdamond, one context (plus one target and one scheme, so the
# whole tree under a context exists).
D=/sys/kernel/mm/damon/admin/kdamonds
echo 1 > $D/nr_kdamonds
echo 1 > $D/0/contexts/nr_contexts
echo 1 > $D/0/contexts/0/targets/nr_targets
echo 1 > $D/0/contexts/0/schemes/nr_schemes
echo 1 > $D/0/contexts/0/schemes/0/filters/nr_filters
# 6.15 and later: DAMOS filters also under core_filters/ and ops_filters/.
for f in core_filters ops_filters; do
    [ -d $D/0/contexts/0/schemes/0/$f ] && echo 1 > $D/0/contexts/0/schemes/0/$f/nr_filters
done
echo 1 > $D/0/contexts/0/schemes/0/quotas/goals/nr_goals

OUT=/tmp/cap
cap() {
    for f in "$@"; do
        [ -f "$f" ] || continue
        mkdir -p "$OUT${f%/*}"
        cat "$f" > "$OUT$f" 2>/dev/null || rm -f "$OUT$f"
    done
}
for f in memory.numa_stat memory.stat memory.current memory.low memory.high memory.max \
         memory.min memory.pressure memory.events cpu.stat cpu.pressure cpuset.mems cpuset.mems.effective \
         cgroup.procs cgroup.controllers cgroup.subtree_control cgroup.type; do
    cap $APP/$f
done
cap $CG/cgroup.controllers $CG/cgroup.subtree_control
N=/sys/devices/system/node
cap $N/online $N/possible $N/has_cpu $N/has_memory $N/has_normal_memory
for n in $N/node[0-9]*; do
    cap $n/cpulist $n/meminfo $n/numastat $n/vmstat
    for m in $n/memory[0-9]*; do cap $m/phys_index; done
    for a in access0 access1; do
        [ -d $n/$a/initiators ] && cap $(find $n/$a/initiators -type f)
    done
done
cap /sys/devices/system/memory/block_size_bytes
cap $(find /sys/devices/virtual/memory_tiering/ -type f)
cap /sys/kernel/mm/numa/demotion_enabled
cap /proc/sys/kernel/numa_balancing /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps
cap /proc/meminfo /proc/vmstat /proc/pressure/memory /proc/zoneinfo
cap $(find /sys/kernel/mm/damon/admin/ -type f)
# DAMON_STAT (6.17 and later; runs from boot on 7.x), MGLRU's generations.
[ -d /sys/module/damon_stat ] && cap $(find /sys/module/damon_stat/parameters -type f)
cap /sys/kernel/mm/lru_gen/enabled /sys/kernel/debug/lru_gen
[ -d /sys/kernel/mm/mempolicy ] && cap $(find /sys/kernel/mm/mempolicy -type f)

echo "UNAME $(uname -r)"
echo "FILES $(find $OUT -type f | wc -l)"
echo "=====FIXTURES-BEGIN====="
cd $OUT && tar -czf - . | base64
echo "=====FIXTURES-END====="
"#####;

pub fn capture(assets: &testbed::Assets, mut cfg: testbed::VmConfig) -> Result<()> {
    cfg.echo = false;
    eprintln!("xtask: booting the guest to capture fixtures");
    let out = testbed::run(&cfg, SCRIPT).context("emulated CXL host")?;
    if out.exit_code != 0 {
        bail!("capture script exited {}:\n{}", out.exit_code, out.output);
    }
    let text = &out.output;
    let b = text.find(BEGIN).context("no begin marker in the output")? + BEGIN.len();
    let e = text[b..].find(END).context("no end marker in the output")? + b;
    let b64: String = text[b..e].chars().filter(|c| !c.is_whitespace()).collect();
    let tgz = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .context("decoding the base64 archive")?;
    let uname = text
        .lines()
        .find_map(|l| l.strip_prefix("UNAME "))
        .unwrap_or("?")
        .trim()
        .to_string();

    let numa: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("anon N0=") || l.starts_with("file N0="))
        .collect();
    let root = testbed::workspace_root().join(format!("tests/fixtures/linux-{}", cfg.kernel));
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    fs::create_dir_all(&root)?;
    let tgz_path = root.join(".capture.tgz");
    fs::write(&tgz_path, &tgz)?;
    let status = Command::new("tar")
        .args([
            "-xzf",
            ".capture.tgz",
            "--no-same-owner",
            "--no-same-permissions",
        ])
        .current_dir(&root)
        .status()
        .context("running tar")?;
    fs::remove_file(&tgz_path)?;
    if !status.success() {
        bail!("tar -x failed: {status}");
    }
    let mut files = Vec::new();
    normalize(&root, &root, &mut files)?;
    files.sort();

    let readme = format!(
        "# Kernel files from the emulated CXL host\n\n\
         Captured byte for byte by `cargo xtask fixtures` (xtask/src/fixtures.rs,\n\
         which also holds the exact guest script) from a guest booted by\n\
         `tests/testbed`: kernel `{uname}` (Debian's {kernel} cloud kernel), QEMU {qemu}\n\
         (TCG), {cpus} vCPUs, node 0 = {dram} MiB DRAM with the CPUs, node 1 =\n\
         {cxl} MiB CPU-less memory with HMAT 250 ns / 76 GB/s against 130 ns /\n\
         614 GB/s, so node 1 sits in a lower memory tier.\n\n\
         Each file is at its absolute path in the guest. State at capture time:\n\n\
         - cgroup2 at /sys/fs/cgroup (nsdelegate,memory_recursiveprot), memory,\n  \
         cpuset, cpu, io enabled in the root; `test.slice` enables memory and cpuset;\n\
         - `test.slice/app` holds one shell with 64 MiB of anon memory (a shell\n  \
         variable) and 64 MiB of shmem it wrote into tmpfs;\n\
         - `demotion_enabled` = true, then `16M` written to the app's\n  \
         `memory.reclaim`, so some of its pages were demoted to node 1\n  \
         (its memory.numa_stat then began `{numa}`);\n\
         - DAMON sysfs: 1 kdamond, 1 context, 1 target, 1 scheme with 1 filter\n  \
         and 1 quota goal (nothing started); write-only or unreadable files are\n  \
         left out;\n\
         - where the kernel has them: DAMON_STAT's parameters, MGLRU's `enabled`\n  \
         and `/sys/kernel/debug/lru_gen`, the weighted-interleave weights.\n\n\
         Files ({n}):\n\n{list}\n",
        qemu = assets.qemu_version,
        kernel = cfg.kernel,
        numa = numa.join("`, `"),
        cpus = cfg.cpus,
        dram = cfg.dram_mib,
        cxl = cfg.cxl_mib,
        n = files.len(),
        list = files
            .iter()
            .map(|f| format!("- `{f}`"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    fs::write(root.join("README.md"), readme)?;
    println!(
        "captured {} files from {uname} into {}",
        files.len(),
        root.display()
    );
    Ok(())
}

/// Makes every captured file 0644 and directory 0755 and lists the files as
/// absolute guest paths.
fn normalize(root: &Path, dir: &Path, files: &mut Vec<String>) -> Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    for ent in fs::read_dir(dir)? {
        let p = ent?.path();
        if p.is_dir() {
            normalize(root, &p, files)?;
        } else {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o644))?;
            files.push(format!("/{}", p.strip_prefix(root)?.display()));
        }
    }
    Ok(())
}
