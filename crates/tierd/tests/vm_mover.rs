//! The `move_pages(2)` mover (`tierd::mover`) in the emulated CXL host
//! (QEMU, Debian's 6.12 kernel, node 0 = CPUs + 1 GiB DRAM, node 1 = 1 GiB
//! CPU-less lower tier), driven through the `movebench` binary.
//!
//! A `tierload` process is started in a cgroup whose `cpuset.mems` is 1, so all
//! its memory lands on node 1; then `cpuset.mems` is widened to 0-1 (going from
//! {1} to {0,1} migrates nothing: `do_migrate_pages` leaves pages on nodes that
//! stay allowed) and `movebench` moves its pages to node 0. `numactl`'s
//! `migratepages` (from the host, `apt-get install numactl`) runs in the same
//! guest for the throughput comparison.
//!
//! Run through `cargo xtask test`, which installs QEMU and the kernel and builds
//! the binaries; without them these tests fail and say so.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

/// One guest at a time (2-core machine, TCG).
static VM: Mutex<()> = Mutex::new(());

const MIB: u64 = 1 << 20;
const MIGRATEPAGES: &str = "/usr/bin/migratepages";

/// Shell helpers on top of /tests/lib.sh.
const PRELUDE: &str = r#"
set -e
. /tests/lib.sh
# on_node1 CGROUP SIZE_MIB ARGS...: tierload (SIZE_MIB) with all its memory on
# node 1, then cpuset.mems widened to 0-1; prints the pid.
on_node1() {
    local cg=$1 size=$2; shift 2
    mkcg "$cg"
    echo 1 > "$CG/$cg/cpuset.mems"
    local pid
    pid=$(start_in "$cg" tierload hotset --size-mib "$size" --hot-mib 4 --report-s 0 --rate 2000 "$@")
    wait_usage "$cg" "$size" 120 >&2
    echo 0-1 > "$CG/$cg/cpuset.mems"
    echo "$pid"
}
# thp_kb PID: AnonHugePages of the process, kB.
thp_kb() { awk '$1 == "AnonHugePages:" { print $2 }' "/proc/$1/smaps_rollup"; }
"#;

struct Guest {
    exit_code: i32,
    output: String,
}

fn boot(script: &str, timeout_s: u64) -> Guest {
    let _one = VM.lock().unwrap_or_else(|e| e.into_inner());
    let mut bins = testbed::guest_binaries(&["tierload", "movebench"]).unwrap_or_else(|e| {
        panic!("{e:#}\nrun the VM tests through `cargo xtask test`, which builds the binaries")
    });
    let migratepages = PathBuf::from(MIGRATEPAGES);
    assert!(
        migratepages.is_file(),
        "{MIGRATEPAGES} missing: `apt-get install -y numactl` on this host (the guest gets a copy)"
    );
    bins.push(migratepages);
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/guest/lib.sh");
    let cfg = testbed::VmConfig {
        binaries: bins,
        files: vec![(lib, "/tests/lib.sh".into())],
        timeout: Duration::from_secs(timeout_s),
        ..Default::default()
    };
    let out = testbed::run(&cfg, &format!("{PRELUDE}\n{script}")).unwrap_or_else(|e| {
        panic!("emulated CXL host failed: {e:#}\n(run `cargo xtask setup` if QEMU or the kernel is missing)")
    });
    Guest {
        exit_code: out.exit_code,
        output: out.output,
    }
}

/// The JSON of the line tagged `tag`, by order of appearance.
fn tagged(out: &str, tag: &str) -> Vec<Value> {
    out.lines()
        .filter_map(|l| l.strip_prefix(tag)?.strip_prefix(' '))
        .map(|j| serde_json::from_str(j).unwrap_or_else(|e| panic!("{tag} {j}: {e}")))
        .collect()
}

fn u(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

fn f(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

/// MiB on `node` in a movebench placement map.
fn mib(v: &Value, map: &str, node: u32) -> f64 {
    v.pointer(&format!("/{map}/{node}"))
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
}

/// THPs among moved pages: pages = base + thp, bytes = 4 KiB·base + 2 MiB·thp.
fn thps_moved(rep: &Value) -> u64 {
    let (pages, bytes) = (u(rep, "/report/moved_pages"), u(rep, "/report/moved_bytes"));
    (bytes - 4096 * pages) / (2 * MIB - 4096)
}

#[test]
fn budgeted_move_to_node0_base_pages_and_thp() {
    let budget = 64;
    let g = boot(
        &format!(
            r#"
pid=$(on_node1 mv4k 128)
echo "BEFORE4K $(movebench placement --pid $pid)"
echo "MOVE4K $(movebench move --pid $pid --from 1 --to 0 --budget-mib {budget})"
echo "AFTER4K $(movebench placement --pid $pid)"
emit_node mv4k
kill $pid; wait $pid 2>/dev/null || true
pid=$(on_node1 mvthp 128 --thp)
echo "THPKB $(thp_kb $pid)"
echo "MOVETHP $(movebench move --pid $pid --from 1 --to 0 --budget-mib {budget})"
echo "AFTERTHP $(movebench placement --pid $pid)"
emit_node mvthp
kill $pid; wait $pid 2>/dev/null || true
"#
        ),
        300,
    );
    eprintln!("{}", g.output);
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let budget_b = budget * MIB;
    for (tag, after_tag) in [("MOVE4K", "AFTER4K"), ("MOVETHP", "AFTERTHP")] {
        let m = &tagged(&g.output, tag)[0];
        let after = &tagged(&g.output, after_tag)[0];
        assert!(
            mib(m, "before_mib", 1) >= 120.0,
            "{tag}: tierload should start on node 1: {m}"
        );
        let moved = u(m, "/report/moved_bytes");
        assert!(moved <= budget_b, "{tag}: over budget: {m}");
        assert!(
            moved * 10 >= budget_b * 9,
            "{tag}: moved less than 90% of the budget: {m}"
        );
        // Really on node 0 afterwards: the process's own placement query...
        let gained = mib(after, "mib", 0) - mib(m, "before_mib", 0);
        assert!(
            gained >= 0.9 * budget as f64 && gained <= budget as f64 + 1.0,
            "{tag}: node 0 gained {gained} MiB: {m} {after}"
        );
        assert!(
            mib(after, "mib", 1) >= 60.0,
            "{tag}: moved too much: {after}"
        );
    }
    // ... and the cgroup's memory.numa_stat.
    let n4k = nodes_line(&g.output, "mv4k");
    assert!(n4k.0 >= 57, "memory.numa_stat N0 of mv4k: {n4k:?}");
    let nthp = nodes_line(&g.output, "mvthp");
    assert!(nthp.0 >= 57, "memory.numa_stat N0 of mvthp: {nthp:?}");

    // Base pages: one address per 4 KiB page.
    let m = &tagged(&g.output, "MOVE4K")[0];
    assert_eq!(
        u(m, "/report/moved_pages") * 4096,
        u(m, "/report/moved_bytes")
    );
    // THP: one address per THP, so about budget/2 MiB pages and few calls.
    let thp_kb: u64 = g
        .output
        .lines()
        .find_map(|l| l.strip_prefix("THPKB "))
        .and_then(|s| s.trim().parse().ok())
        .expect("THPKB line");
    assert!(
        thp_kb >= 100 * 1024,
        "tierload --thp got only {thp_kb} kB of THPs"
    );
    let m = &tagged(&g.output, "MOVETHP")[0];
    let thps = thps_moved(m);
    assert!(
        thps * 2 * MIB * 10 >= budget_b * 9,
        "expected ≥ 90% of the budget moved as THPs: {thps} THPs, {m}"
    );
    assert!(
        u(m, "/report/moved_pages") <= thps + 256,
        "THPs were passed as base pages: {m}"
    );
    assert!(
        u(m, "/report/busy") <= 2,
        "EBUSY from THP tails means base-page addresses inside THPs: {m}"
    );
    assert!(u(m, "/report/syscalls") <= 12, "{m}");
}

/// (N0, N1) MiB of the last `NODES <cgroup>` line.
fn nodes_line(out: &str, cg: &str) -> (u64, u64) {
    out.lines()
        .filter_map(|l| l.strip_prefix("NODES "))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[0] == cg).then(|| (f[1].parse().ok(), f[2].parse().ok()))
        })
        .filter_map(|(a, b)| Some((a?, b?)))
        .next_back()
        .unwrap_or_else(|| panic!("no NODES {cg} line:\n{out}"))
}

/// The move_pages path and numactl's `migratepages PID 1 0` each move a
/// fresh 256 MiB process from node 1 to node 0 in the same boot (base pages
/// four runs each, THP three, alternating): both must move everything. Their
/// throughput (pages/s; medians, per-pair ratios) is printed as the benchmark
/// figure of issue 4
/// (goal: move_pages ≥ 90% of migratepages); it is a measurement, not an
/// assertion, since TCG timings vary by ±30% between runs. Each move_pages
/// call costs a fixed `lru_cache_disable()` (an LRU drain on every CPU, slow
/// under TCG), hence one call (65536 pages) per 256 MiB.
#[test]
fn move_pages_and_migratepages_move_everything_throughput_printed() {
    let g = boot(
        r#"
run() { # run TAG CGROUP [tierload args]: one fresh 256 MiB process, one mover
    local tag=$1 cg=$2; shift 2
    local pid
    pid=$(on_node1 "$cg" 256 "$@")
    if [ "${tag#MP}" != "$tag" ]; then
        echo "$tag $(movebench migratepages --pid $pid --from 1 --to 0)"
    else
        echo "$tag $(movebench move --pid $pid --from 1 --to 0 --batch 65536)"
    fi
    kill $pid
    # Exited (memory freed); left a zombie for PID 1, so no rmdir.
    wait_empty "$cg" 60 || exit 1
}
for i in 1 2 3 4; do
    run MV4K a$i
    run MP4K b$i
done
for i in 1 2 3; do
    run MVTHP e$i --thp
    run MPTHP f$i --thp
done
"#,
        900,
    );
    eprintln!("{}", g.output);
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let rate = |tag: &str| -> Vec<f64> {
        tagged(&g.output, tag)
            .iter()
            .map(|v| {
                assert!(
                    u(v, "/left_from_bytes") >= 250 * MIB,
                    "{tag}: not everything left node 1: {v}"
                );
                f(v, "/base_pages_per_s")
            })
            .collect()
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            0.0
        } else if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let best = |v: Vec<f64>| v.into_iter().fold(0.0, f64::max);
    // Runs alternate (move_pages, migratepages, ...), so pair i of each is
    // measured back to back; the ratio of each pair cancels slow phases of
    // the host.
    let ratios = |a: &[f64], b: &[f64]| -> Vec<f64> {
        a.iter().zip(b).map(|(x, y)| 100.0 * x / y).collect()
    };
    let (mv4k, mp4k) = (rate("MV4K"), rate("MP4K"));
    let (mvthp, mpthp) = (rate("MVTHP"), rate("MPTHP"));
    let r4k = ratios(&mv4k, &mp4k);
    let rthp = ratios(&mvthp, &mpthp);
    eprintln!(
        "base pages: move_pages {:.0} pages/s, migratepages {:.0} pages/s (medians); \
         per-pair ratios {r4k:.0?} %, median {:.0}%\n\
         THP:        move_pages {:.0} pages/s, migratepages {:.0} pages/s (medians); \
         per-pair ratios {rthp:.0?} %, median {:.0}%\n\
         best runs:  base {:.0} vs {:.0}, THP {:.0} vs {:.0} pages/s",
        median(mv4k.clone()),
        median(mp4k.clone()),
        median(r4k.clone()),
        median(mvthp.clone()),
        median(mpthp.clone()),
        median(rthp.clone()),
        best(mv4k.clone()),
        best(mp4k.clone()),
        best(mvthp.clone()),
        best(mpthp.clone()),
    );
    let (mv4k, mp4k) = (best(mv4k), best(mp4k));
    let (mvthp, mpthp) = (best(mvthp), best(mpthp));
    for (name, r) in [
        ("move_pages base", mv4k),
        ("migratepages base", mp4k),
        ("move_pages THP", mvthp),
        ("migratepages THP", mpthp),
    ] {
        assert!(r > 0.0, "{name}: no rate measured:\n{}", g.output);
    }
}
