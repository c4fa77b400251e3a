//! The eBPF NUMA hint-fault probe in the emulated CXL host (QEMU TCG,
//! Debian's 6.12 kernel with BTF), driven through the `hint-probe` binary.
//!
//! Two containers run `tierload hotset` with their memory on the CPU-less
//! node 1 (cpuset.mems = 1 while they allocate, then widened to 0-1, which
//! migrates nothing) under NUMA balancing mode 2, so the kernel takes hint
//! faults on their hot pages and promotes them. The probe's per-memcg counts
//! must match each memcg's own `memory.stat` deltas over the same window.
//!
//! Needs the release binaries `tierload` and `hint-probe` (`cargo xtask
//! test` builds them) and the testbed; without them the test fails and says so.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

/// The guest: `tierload` and `hint-probe` (release builds) and the shell
/// helpers; the CXL lower tier takes the longest (314-403 s for the test
/// below).
fn guest() -> testbed::VmConfig {
    let bins = testbed::guest_binaries(&["tierload", "hint-probe"]).unwrap_or_else(|e| {
        panic!("{e:#}\nbuild them with `cargo build --release -p tierload -p hotness` (or run `cargo xtask test`)")
    });
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/guest/lib.sh");
    testbed::VmConfig {
        binaries: bins,
        files: vec![(lib, "/tests/lib.sh".into())],
        timeout: Duration::from_secs(720),
        ..Default::default()
    }
}

/// Runs `script` in the guest; fails unless it exits 0.
fn run(cfg: &testbed::VmConfig, script: &str) -> testbed::VmOutput {
    let out = testbed::run(cfg, script).unwrap_or_else(|e| {
        panic!("emulated CXL host failed: {e:#}\n(run `cargo xtask setup` if QEMU or the kernel is missing)")
    });
    assert_eq!(out.exit_code, 0, "guest script failed:\n{}", out.output);
    out
}

/// Two containers with different hot sets (24 and 6 MiB, so their fault
/// counts differ several-fold and a swapped attribution cannot pass): each
/// one's probe hint faults within 10% of its memcg `numa_hint_faults` delta,
/// and promoted pages within 10% of `pgpromote_success`. Then, with every
/// hint fault declined (hot threshold 0 ms), only the container named to
/// the declined filter has declined records.
#[test]
fn probe_counts_match_memcg_counters_per_container() {
    let cfg = guest();
    let script = r#"
set -e
. /tests/lib.sh
grep -qw cpuset $CG/cgroup.subtree_control || echo +cpuset > $CG/cgroup.subtree_control
mkcg t/a; mkcg t/b
echo +cpuset > $CG/t/cgroup.subtree_control
echo 0 > /proc/sys/kernel/numa_balancing
echo 1 > $CG/t/a/cpuset.mems; echo 1 > $CG/t/b/cpuset.mems
PA=$(start_in t/a tierload --size-mib 48 --report-s 0 hotset --hot-mib 24)
PB=$(start_in t/b tierload --size-mib 48 --report-s 0 hotset --hot-mib 6)
wait_usage t/a 48 60; wait_usage t/b 48 60
echo 0-1 > $CG/t/a/cpuset.mems; echo 0-1 > $CG/t/b/cpuset.mems
emit_node t/a; emit_node t/b
hint-probe --cgroup $CG/t/a --cgroup $CG/t/b --seconds 20 --bpf-stats \
    --after-load 'echo 2 > /proc/sys/kernel/numa_balancing' | sed 's/^/PROBE /'
emit_node t/a; emit_node t/b
kill $PA $PB
# The declined filter: new processes on node 1 (NUMA balancing scans a new
# task soon; the old ones' scans were spaced out), the hot threshold at 0 ms
# so the kernel declines every hint fault, and the scan period capped so
# that passes that migrate nothing are not spaced out either.
NB=/sys/kernel/debug/sched/numa_balancing
[ -d $NB ] || mount -t debugfs none /sys/kernel/debug
echo 0 > $NB/hot_threshold_ms; echo 1000 > $NB/scan_period_max_ms
# What the kernel's scanner did, for a window with too few faults: the
# nodes the tasks' memory is on, PTEs marked and hint faults taken.
scanned() {
    emit_node t/a; emit_node t/b
    echo "SCAN $1 $(grep -E '^numa_(pte_updates|hint_faults|pages_migrated) ' /proc/vmstat | tr '\n' ' ')" \
        "a: $(grep -E 'numa_scan_seq|total_numa_faults|numa_preferred_nid' /proc/$PA/sched | tr -s ' \n' ' ')"
}
hf() { awk '/^numa_hint_faults /{print $2}' $CG/$1/memory.stat; }
# Until the killed tasks have left both cgroups: their memory would pass
# the new tasks' usage check before those had allocated theirs.
gone() { wait_empty t/a 60; wait_empty t/b 60; }
# wait_lower CGROUP MIB: until CGROUP holds MIB on node 1 (at most 60 s):
# the cpuset is widened only then, so none of it is allocated on node 0,
# whose pages mode 2 does not scan.
wait_lower() {
    local i=0
    until [ "$(node_mib $1 1)" -ge $2 ]; do
        i=$((i + 1)); [ $i -gt 120 ] && { echo "FAIL: $1 has only $(node_mib $1 1) MiB on node 1"; return 1; }
        sleep 0.5
    done
}
gone
# The window's precondition is the kernel's: NUMA balancing must scan the
# new tasks. On the CXL device under TCG it once scanned them about never
# (4 faults in 90 s), so a window short of faults is run once more with new
# tasks; the one that counts is the last.
for try in 1 2; do
    echo 1 > $CG/t/a/cpuset.mems; echo 1 > $CG/t/b/cpuset.mems
    PA=$(start_in t/a tierload --size-mib 48 --report-s 0 hotset --hot-mib 24)
    PB=$(start_in t/b tierload --size-mib 48 --report-s 0 hotset --hot-mib 6)
    wait_lower t/a 47; wait_lower t/b 47
    echo 0-1 > $CG/t/a/cpuset.mems; echo 0-1 > $CG/t/b/cpuset.mems
    scanned "before try $try"
    A0=$(hf t/a); B0=$(hf t/b)
    # Until both have faulted (a new task's first scan comes at its own time).
    hint-probe --cgroup $CG/t/a --cgroup $CG/t/b --declined-for $CG/t/a \
        --seconds 90 --min-faults 100 > /tmp/declined
    scanned "after try $try"
    kill $PA $PB
    gone
    if [ $(( $(hf t/a) - A0 )) -ge 100 ] && [ $(( $(hf t/b) - B0 )) -ge 100 ]; then break; fi
    echo "RETRY: window $try had $(( $(hf t/a) - A0 )) and $(( $(hf t/b) - B0 )) hint faults"
    sed 's/^/TRY /' /tmp/declined
done
sed 's/^/DECLINED /' /tmp/declined
"#;
    let out = run(&cfg, script);
    let o = &out.output;
    let lines: Vec<Value> = o
        .lines()
        .filter_map(|l| l.strip_prefix("PROBE "))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 3, "two cgroups and the program stats:\n{o}");
    let u =
        |v: &Value, a: &str, b: &str| v[a][b].as_u64().unwrap_or_else(|| panic!("{a}.{b} in {v}"));
    let mut faults = Vec::new();
    for l in &lines[..2] {
        let probe = u(l, "probe", "hint_faults");
        let stat = u(l, "memory_stat", "numa_hint_faults");
        assert!(
            stat >= 50,
            "too few hint faults to compare ({stat}): {l}\n{o}"
        );
        let tol = stat / 10;
        assert!(
            probe.abs_diff(stat) <= tol,
            "hint faults: probe {probe} vs memory.stat {stat} (> 10%): {l}\n{o}"
        );
        let promoted = u(l, "probe", "migrated_pages");
        let pgpromote = u(l, "memory_stat", "pgpromote_success");
        assert!(
            promoted.abs_diff(pgpromote) <= pgpromote / 10 + 1,
            "promotions: probe {promoted} pages vs pgpromote_success {pgpromote}: {l}"
        );
        // Faults come from the lower tier (mode 2 scans only lower-tier pages).
        assert!(
            l["probe"]["hint_faults_by_nodes"]
                .as_object()
                .unwrap()
                .keys()
                .all(|k| k.starts_with("1->")),
            "{l}"
        );
        eprintln!(
            "{}: hint faults probe {probe} / memory.stat {stat}; promoted pages probe {promoted} / pgpromote_success {pgpromote}",
            l["cgroup"]
        );
        faults.push(stat);
    }
    assert!(
        faults[0] > faults[1],
        "a's 24 MiB hot set should fault more than b's 6 MiB: {faults:?}\n{o}"
    );
    // Declined hint faults are recorded for the cgroups named only.
    let declined: Vec<Value> = o
        .lines()
        .filter_map(|l| l.strip_prefix("DECLINED "))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(declined.len(), 3, "two cgroups and the program stats:\n{o}");
    let (da, db) = (&declined[0], &declined[1]);
    for l in o
        .lines()
        .filter(|l| l.starts_with("SCAN ") || l.starts_with("RETRY"))
    {
        eprintln!("{l}");
    }
    assert!(
        u(da, "probe", "declined_records") >= 50 && u(db, "probe", "hint_faults") >= 50,
        "a (named) should have declined records and b hint faults (within 90 s):\n{da}\n{db}\n{o}"
    );
    assert_eq!(
        u(db, "probe", "declined_records"),
        0,
        "b is not named by --declined-for:\n{db}\n{o}"
    );
    eprintln!(
        "declined filter: a {} records, b {} records of {} hint faults",
        u(da, "probe", "declined_records"),
        u(db, "probe", "declined_records"),
        u(db, "probe", "hint_faults")
    );
    // The migration-latency histogram (bucket b: calls of [2^b, 2^(b+1)) ns
    // wall time, the last open-ended) holds every promotion call, and as a
    // call's CPU time is at most its wall time, the CPU time summed is below
    // the buckets' upper edges summed: a bucket computed too low fails it.
    let hist: Vec<u64> = lines[2]["latency_ns_log2"]
        .as_array()
        .unwrap_or_else(|| panic!("no latency_ns_log2: {}", lines[2]))
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    let calls: u64 = hist.iter().sum();
    let promotion_calls: u64 = lines[..2].iter().map(|l| u(l, "probe", "migrated")).sum();
    assert!(
        promotion_calls > 0 && calls >= promotion_calls,
        "latency histogram {calls} calls, promotions {promotion_calls}: {}",
        lines[2]
    );
    let cpu_ns = u128::from(lines[2]["migrate_cpu_ns"].as_u64().unwrap());
    if hist.last() == Some(&0) {
        let upper: u128 = hist
            .iter()
            .enumerate()
            .map(|(b, &n)| u128::from(n) << (b + 1))
            .sum();
        assert!(
            cpu_ns <= upper,
            "migration CPU {cpu_ns} ns above the histogram's upper edges {upper}: {}",
            lines[2]
        );
    }
    eprintln!("promotion calls {calls}, histogram {hist:?}, CPU {cpu_ns} ns");
    let progs = lines[2]["programs"].as_array().unwrap();
    let check = progs
        .iter()
        .find(|p| p["program"] == "hf_check")
        .unwrap_or_else(|| panic!("no hf_check stats: {}", lines[2]));
    let runs = check["runs"].as_u64().unwrap();
    assert!(runs >= faults.iter().sum::<u64>(), "{}", lines[2]);
    let ns = check["run_time_ns"].as_u64().unwrap() as f64 / runs.max(1) as f64;
    let all_ns: u64 = progs.iter().filter_map(|p| p["run_time_ns"].as_u64()).sum();
    let secs = lines[0]["seconds"].as_f64().unwrap();
    eprintln!(
        "hint-probe overhead (TCG): {ns:.0} ns per hint fault in hf_check ({runs} runs); \
         all programs {:.3} ms over {secs:.1} s = {:.4}% of one CPU",
        all_ns as f64 / 1e6,
        100.0 * all_ns as f64 / 1e9 / secs
    );
}

/// The latency the kernel's hot-page test measures (scan to hint fault),
/// read by the probe for each declined hint fault, ranks pages by use: a
/// 4 MiB hot set touched as fast as the guest runs faults within
/// milliseconds of each NUMA-balancing scan, a 48 MiB buffer touched
/// uniformly at 2000 accesses/s (each page every ~6 s) within seconds. With
/// the hot threshold at 0 ms the kernel declines every fault, so both
/// cgroups' faults are recorded; every record must carry a latency (a
/// page-flags layout the probe misreads gives none).
#[test]
fn declined_hint_faults_carry_the_kernels_latency() {
    let cfg = guest();
    let script = r#"
set -e
. /tests/lib.sh
grep -qw cpuset $CG/cgroup.subtree_control || echo +cpuset > $CG/cgroup.subtree_control
mkcg t/hot; mkcg t/slow
echo +cpuset > $CG/t/cgroup.subtree_control
NB=/sys/kernel/debug/sched/numa_balancing
[ -d $NB ] || mount -t debugfs none /sys/kernel/debug
echo 2 > /proc/sys/kernel/numa_balancing
echo 0 > $NB/hot_threshold_ms; echo 1000 > $NB/scan_period_max_ms
echo 1 > $CG/t/hot/cpuset.mems; echo 1 > $CG/t/slow/cpuset.mems
PH=$(start_in t/hot tierload --size-mib 8 --report-s 0 hotset --hot-mib 4)
PS=$(start_in t/slow tierload --size-mib 48 --report-s 0 --rate 2000 zipf --zipf-s 0)
wait_usage t/hot 8 60; wait_usage t/slow 48 60
echo 0-1 > $CG/t/hot/cpuset.mems; echo 0-1 > $CG/t/slow/cpuset.mems
hint-probe --cgroup $CG/t/hot --cgroup $CG/t/slow \
    --declined-for $CG/t/hot --declined-for $CG/t/slow \
    --seconds 120 --min-faults 1000 | sed 's/^/LATENCY /'
kill $PH $PS
"#;
    let out = run(&cfg, script);
    let o = &out.output;
    let lines: Vec<Value> = o
        .lines()
        .filter_map(|l| l.strip_prefix("LATENCY "))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 3, "two cgroups and the program stats:\n{o}");
    let lat = |v: &Value, k: &str| {
        v["probe"]["declined_latency_ms"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("declined_latency_ms.{k} in {v}\n{o}"))
    };
    for l in &lines[..2] {
        assert!(
            lat(l, "known") >= 200,
            "too few declined records with a latency (within 120 s): {l}\n{o}"
        );
        assert_eq!(lat(l, "unknown"), 0, "records without a latency: {l}\n{o}");
    }
    let (hot, slow) = (&lines[0], &lines[1]);
    eprintln!(
        "declined hint-fault latency (ms) p10 / p50 / p90: hot {} / {} / {}, slow {} / {} / {}",
        lat(hot, "p10"),
        lat(hot, "p50"),
        lat(hot, "p90"),
        lat(slow, "p10"),
        lat(slow, "p50"),
        lat(slow, "p90")
    );
    assert!(
        lat(hot, "p90") < lat(slow, "p50") && 10 * lat(hot, "p50") < lat(slow, "p50"),
        "the hot set's faults should come far sooner after the scan:\n{hot}\n{slow}\n{o}"
    );
    assert!(
        lat(slow, "p50") >= 200,
        "pages touched every ~6 s should fault hundreds of ms or more after the scan:\n{slow}\n{o}"
    );
}
