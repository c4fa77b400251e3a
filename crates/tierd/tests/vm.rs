//! Integration tests in the emulated CXL host (QEMU, Debian's 6.12 kernel,
//! node 0 = CPUs + 1 GiB DRAM, node 1 = 1 GiB CPU-less lower tier).
//!
//! Each test boots a guest with the release binaries (`tierd`, `tierctl`,
//! `tierload`) and a busybox script; the script prints `STATUS <json>` (tierctl
//! status) and `NODES <cgroup> <N0 MiB> <N1 MiB>` lines that the assertions here
//! read. Run them through `cargo xtask test`, which installs QEMU and the kernel
//! and builds the binaries first; without those they fail and say so.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tierd::controller::{ContainerStatus, Status};

/// One guest at a time: two TCG guests on a 2-core machine would starve each
/// other and make every time bound meaningless.
static VM: Mutex<()> = Mutex::new(());

const MIB: u64 = 1 << 20;

struct Guest {
    exit_code: i32,
    output: String,
}

fn boot(script: &str, timeout_s: u64) -> Guest {
    boot_with(script, timeout_s, |_| {})
}

fn boot_with(script: &str, timeout_s: u64, tweak: impl FnOnce(&mut testbed::VmConfig)) -> Guest {
    let _one = VM.lock().unwrap_or_else(|e| e.into_inner());
    let bins = testbed::guest_binaries(&["tierd", "tierctl", "tierload"]).unwrap_or_else(|e| {
        panic!("{e:#}\nrun the VM tests through `cargo xtask test`, which builds the binaries")
    });
    let guest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/guest");
    let cfg = testbed::VmConfig {
        binaries: bins,
        files: ["lib.sh", "churn.sh"]
            .iter()
            .map(|f| (guest.join(f), format!("/tests/{f}")))
            .collect(),
        timeout: Duration::from_secs(timeout_s),
        ..Default::default()
    };
    let mut cfg = cfg;
    tweak(&mut cfg);
    let out = testbed::run(&cfg, script).unwrap_or_else(|e| {
        panic!("emulated CXL host failed: {e:#}\n(run `cargo xtask setup` if QEMU or the kernel is missing)")
    });
    Guest {
        exit_code: out.exit_code,
        output: out.output,
    }
}

fn statuses(out: &str) -> Vec<Status> {
    out.lines()
        .filter_map(|l| l.strip_prefix("STATUS "))
        .filter_map(|j| serde_json::from_str(j).ok())
        .collect()
}

/// `NODES` lines for one cgroup: (N0 MiB, N1 MiB) in order.
fn nodes(out: &str, cgroup: &str) -> Vec<(u64, u64)> {
    out.lines()
        .filter_map(|l| l.strip_prefix("NODES "))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[0] == cgroup).then(|| (f[1].parse().ok(), f[2].parse().ok()))
        })
        .filter_map(|(a, b)| Some((a?, b?)))
        .collect()
}

/// The rest of the first line that starts with `key ` (trimmed); panics
/// with the whole output when there is none.
fn field(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {key} line:\n{out}"))
}

fn container<'a>(s: &'a Status, name: &str) -> Option<&'a ContainerStatus> {
    s.containers.iter().find(|c| c.container == name)
}

/// Bytes tierd's recall promoted for `cgroup` by the last `STATUS` line of
/// `out` (`promote/recall` in its moved bytes; 0 when absent).
fn recalled_bytes(out: &str, cgroup: &str) -> u64 {
    statuses(out)
        .last()
        .and_then(|s| container(s, cgroup))
        .and_then(|c| c.moved_bytes.get("promote/recall").copied())
        .unwrap_or(0)
}

/// The hysteresis band for a target, as the default config computes it:
/// max(16 MiB, 5% of target).
fn band(target: u64) -> u64 {
    (16 * MIB).max(target / 20)
}

/// Run on every kernel and lower tier: on the CXL Type-3 device, which
/// takes demoted pages at about 2 MiB/s under emulation, with a smaller
/// tenant (the cycle keeps its cadence meanwhile: demotion is paced by what
/// the device takes, `controller/pace.rs`). Sampled each second until the
/// container is within its band, to a deadline, then 10 s more.
#[test]
fn over_target_container_is_brought_to_target() {
    let cxl = testbed::LowerTier::from_env() == Ok(testbed::LowerTier::Cxl);
    // (tenant MiB, deadline in samples of a second)
    let (size, deadline) = if cxl { (120u64, 240) } else { (400, 120) };
    let script = r#"
set -e
. /tests/lib.sh
mkcg tenants.slice/big
start_in tenants.slice/big tierload hotset --size-mib SIZE --hot-mib HOT --report-s 60
wait_usage tenants.slice/big $((SIZE - 10)) 90
emit_node tenants.slice/big
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
[[policy]]
match = "tenants.slice/*"
local_high = "50%"
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
wait_http 30
# within: node 0 holds half the usage ± the band (16 MiB or 5%), in MiB.
within() {
    local f u t b
    f=$(node_mib tenants.slice/big 0); u=$(usage_mib tenants.slice/big); t=$((u / 2))
    b=$((t / 20)); [ $b -lt 16 ] && b=16
    [ $((f - t)) -le $b ] && [ $((t - f)) -le $b ]
}
i=0; more=10
while [ $more -gt 0 ] && [ $i -lt DEADLINE ]; do
    i=$((i + 1))
    if within; then more=$((more - 1)); fi
    emit_status; emit_node tenants.slice/big; sleep 1
done
kill -TERM $!
wait $! || true
"#
    .replace("DEADLINE", &deadline.to_string())
    .replace("SIZE", &size.to_string())
    .replace("HOT", &(size / 10).to_string());
    let g = boot(&script, 600);
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let n = nodes(&g.output, "tenants.slice/big");
    assert!(
        n[0].0 >= size * 3 / 4,
        "the container should start mostly in DRAM: {n:?}"
    );
    let st = statuses(&g.output);
    assert!(st.len() >= 10, "too few status samples:\n{}", g.output);
    let within: Vec<usize> = st
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let c = container(s, "tenants.slice/big")?;
            (c.target_bytes > 0 && c.fast_bytes.abs_diff(c.target_bytes) <= band(c.target_bytes))
                .then_some(i)
        })
        .collect();
    let first = *within
        .first()
        .unwrap_or_else(|| panic!("never within target ± band in {deadline} s:\n{}", g.output));
    eprintln!("within target ± band after {first} samples of a second");
    let last = container(st.last().unwrap(), "tenants.slice/big").unwrap();
    assert!(
        last.fast_bytes.abs_diff(last.target_bytes) <= band(last.target_bytes),
        "drifted away from the target: {last:?}"
    );
    // Target is local_high = 50% of usage; the demoted half sits on node 1.
    let usage = last.fast_bytes + last.lower_bytes;
    assert!(last.target_bytes.abs_diff(usage / 2) <= 2 * MIB, "{last:?}");
    // What left DRAM is on node 1 (within the band tierd stops at: on the
    // 120 MiB CXL tenant a fixed 3/8 of the size was 0.3 MiB past it).
    assert!(
        last.lower_bytes + band(last.target_bytes) >= usage / 2,
        "{last:?}"
    );
}

/// A tenant whose whole footprint is touched within seconds (600 MiB Zipf)
/// has every page in its two youngest MGLRU generations, where a
/// `memory.reclaim` write of a few MiB demotes up to a hundred. With the
/// default `demotion = "auto"` tierd uses MGLRU's eviction command and the
/// tenant's DRAM settles at its target instead of dropping below it.
/// Polled each second until it is within the band, to 240 s, then 10 s
/// more. How soon depends on the host: with the default `aging_gap` the
/// eviction takes only pages untouched for half a second, and at session
/// 81's workload speed that was ~3 MiB a second of this tenant (asked
/// ~50 MiB a cycle); the 20 s this test allowed until then failed three
/// runs in three (docs/NOTES.md "Session 81").
#[test]
fn demotion_stops_at_the_target_under_mglru() {
    let g = boot(
        r#"
set -e
. /tests/lib.sh
mkcg tenants.slice/cache
start_in tenants.slice/cache tierload zipf --size-mib 600 --zipf-s 0.99 --seed 1 --report-s 60
wait_usage tenants.slice/cache 590 120
emit_node tenants.slice/cache
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
[[policy]]
match = "tenants.slice/*"
local_high = "60%"
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
wait_http 30
# within: node 0 at or under 60 % of the usage + the band (16 MiB or 5 %).
within() {
    local f t b
    f=$(node_mib tenants.slice/cache 0); t=$(( $(usage_mib tenants.slice/cache) * 6 / 10 ))
    b=$((t / 20)); [ $b -lt 16 ] && b=16
    [ $f -le $((t + b)) ]
}
i=0; more=10
while [ $more -gt 0 ] && [ $i -lt 240 ]; do
    i=$((i + 1))
    if [ $more -lt 10 ] || within; then more=$((more - 1)); fi
    emit_status; emit_node tenants.slice/cache; sleep 1
done
kill -TERM $!
wait $! || true
echo "DAMON_ASSIST_LINES $(grep -c 'DAMON only for containers under promotion assist\|DAMON unavailable: no promotion assist' /tmp/tierd.log)"
grep -m1 'demotion through' /tmp/tierd.log | sed 's/^/DEMOTION_LINE /'
"#,
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let mech = line_of(&g.output, "DEMOTION_LINE ");
    assert!(mech.contains("multi-gen LRU"), "{mech}\n{}", g.output);
    // With the defaults DAMON serves only the promotion assist, said once,
    // not every cycle: that it does, or (Linux 6.17+, where DAMON_STAT's
    // exclusive kdamond runs from boot) that it cannot, and retries
    // quietly.
    assert_eq!(
        line_of(&g.output, "DAMON_ASSIST_LINES "),
        "DAMON_ASSIST_LINES 1",
        "{}",
        g.output
    );
    let st = statuses(&g.output);
    let target = st
        .iter()
        .rev()
        .find_map(|s| container(s, "tenants.slice/cache").map(|c| c.target_bytes))
        .unwrap_or_else(|| panic!("no status for the tenant:\n{}", g.output));
    let n = nodes(&g.output, "tenants.slice/cache");
    assert!(n[0].0 >= 550, "the tenant should start in DRAM: {n:?}");
    let (t, b) = (target / MIB, band(target) / MIB);
    let first = n
        .iter()
        .position(|&(fast, _)| fast <= t + b)
        .unwrap_or_else(|| panic!("never demoted to target {t} + band {b} MiB in 240 s: {n:?}"));
    eprintln!("at target {t} + band {b} MiB after {first} s");
    let low = n[first..].iter().map(|&(fast, _)| fast).min().unwrap();
    assert!(
        low + b >= t,
        "DRAM fell to {low} MiB, more than the band ({b} MiB) below target {t} MiB: {n:?}"
    );
}

/// A demotion that needs two agings (every page of the container in its
/// two youngest generations) takes the pages untouched between them. A
/// cache paced at 300k accesses/s over 300 MiB touches the edge of its
/// hottest tenth ~3.5 times a second: back to back (`aging_gap = "0s"`, a
/// walk's length apart) a good part of that tenth is untouched and goes
/// with the cold pages; 0.5 s apart (the default `aging_gap`, used since
/// nobody is filling: tierd starts after the cache is allocated) little of
/// it does.
/// Kernel promotion is off and tierd's held to 4 KiB/s (`promotion =
/// "tierd"`, `promote_rate`), so what the cache reports of its hottest
/// tenth on DRAM once capped at half is what the demotions left.
/// Both runs in one boot, one after the other.
#[test]
fn a_demotion_spaces_its_agings_and_keeps_the_hottest_tenth() {
    let g = boot(
        r#"
set -e
. /tests/lib.sh
# run NAME GAP: the cache alone, capped at half by tierd with aging_gap GAP
# ("": the default, 500ms; nobody is filling, so it holds); its report two
# fresh reports after it reached the cap.
run() {
    mkcg tenants.slice/$1
    W=$(start_log tenants.slice/$1 /tmp/$1.log tierload zipf --size-mib 300 --zipf-s 0.99 --seed 1 --rate 300000 --report-s 1)
    wait_usage tenants.slice/$1 295 120
    n0=$(node_mib tenants.slice/$1 0)
    echo "START $1 $n0"
    gap=""
    [ -n "$2" ] && gap="aging_gap = \"$2\""
    cat > /tmp/t.toml <<EOF
[daemon]
interval = "2s"
promotion = "tierd"
[hotness]
source = "damon"
[limits]
promote_rate = "4KiB"
global_promote_rate = "4KiB"
$gap
[[policy]]
match = "tenants.slice/$1"
local_high = "50%"
EOF
    tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
    T=$!
    wait_http 30
    i=0
    # Within the band (16 MiB here) of half its usage.
    until [ $(( $(node_mib tenants.slice/$1 0) * 2 )) -le $(( $(usage_mib tenants.slice/$1) + 40 )) ]; do
        i=$((i + 1)); [ $i -gt 240 ] && { echo "WARN: $1 not capped: $(node_mib tenants.slice/$1 0) MiB"; break; }
        sleep 0.5
    done
    n=$(reports /tmp/$1.log)
    j=0
    until [ $(reports /tmp/$1.log) -ge $((n + 2)) ]; do
        j=$((j + 1)); [ $j -gt 100 ] && { echo "WARN: $1 reports stopped"; break; }
        sleep 0.2
    done
    emit_report $1 /tmp/$1.log
    emit_node tenants.slice/$1
    kill -TERM $T
    rc=0; wait $T || rc=$?
    echo "TIERD-EXIT $1 $rc"
    kill $W; wait_empty tenants.slice/$1 30
}
run gap0 0s
run gap ""
"#,
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    assert!(!g.output.contains("WARN:"), "{}", g.output);
    let top10 = |name: &str| -> f64 {
        let r = reports(&g.output, name);
        let (_, last) = r
            .last()
            .unwrap_or_else(|| panic!("no report of {name}:\n{}", g.output));
        last["top10_residency"]
            .as_f64()
            .unwrap_or_else(|| panic!("{last}"))
    };
    for name in ["gap0", "gap"] {
        assert_eq!(
            field(&g.output, &format!("TIERD-EXIT {name}")),
            "0",
            "{}",
            g.output
        );
        let n = nodes(&g.output, &format!("tenants.slice/{name}"));
        let (fast, lower) = *n.last().unwrap();
        // Capped at half (within the 16 MiB band and a few MiB of drift):
        // both runs demoted about the same.
        assert!(
            lower >= 100 && 2 * fast <= fast + lower + 48,
            "{name}: {fast} MiB on DRAM, {lower} on the lower tier\n{}",
            g.output
        );
    }
    let (back_to_back, spaced) = (top10("gap0"), top10("gap"));
    eprintln!(
        "hottest tenth on DRAM: agings back to back {back_to_back:.3}, 0.5 s apart {spaced:.3}"
    );
    assert!(
        spaced >= 0.97 && spaced > back_to_back,
        "hottest tenth on DRAM: back to back {back_to_back:.3}, 0.5 s apart {spaced:.3}\n{}",
        g.output
    );
}

#[test]
fn at_target_container_is_not_demoted() {
    // Same boot, same load, twice: a steady 300 MiB container (30 MiB hot,
    // the rest cold, as a cache's tail) at its target, then an 800 MiB all-hot
    // neighbour arrives. First with kernel tiering only
    // (baseline), then under tierd with local_low = 320 MiB for the steady one.
    // The baseline samples until kernel tiering has taken 64 MiB of the
    // steady container's DRAM (at least 40 samples, at most 240: how soon
    // depends on the machine; a slow one took 25 MiB in 40 s), and tierd's
    // phase then takes as many samples.
    let g = boot(
        r#"
. /tests/lib.sh
# The hog's promotions come in bursts one NUMA-balancing scan period
# apart, which grows to 60 s by default: 10 s in both phases.
echo 10000 > /sys/kernel/debug/sched/numa_balancing/scan_period_max_ms
phase() { # phase NAME SAMPLES: steady + hog; SAMPLES = 0: until steady lost 64 MiB
    mkcg tenants.slice/steady
    S=$(start_in tenants.slice/steady tierload hotset --size-mib 300 --hot-mib 30 --report-s 60)
    wait_usage tenants.slice/steady 295 90 || exit 1
    sleep 3
    B=$(node_mib tenants.slice/steady 0)
    echo "$1 $B"
    mkcg tenants.slice/hog
    H=$(start_in tenants.slice/hog tierload hotset --size-mib 800 --hot-mib 800 --report-s 60)
    N=0
    while :; do
        N=$((N + 1))
        [ "$1" = TIERD ] && emit_status
        F=$(node_mib tenants.slice/steady 0)
        echo "$1 $F $(node_mib tenants.slice/hog 1)"
        if [ "$2" -gt 0 ]; then
            [ $N -ge "$2" ] && break
        else
            [ $N -ge 40 ] && [ $((B - F)) -ge 64 ] && break
            [ $N -ge 240 ] && break
        fi
        sleep 1
    done
    # While both tenants exist: tierd forgets a removed cgroup's series.
    [ "$1" = TIERD ] && tierctl metrics | grep -E '^tierd_(hint_fault_source|container_numa_hint_faults_total|container_numa_promotions_total)' | sed 's/^/METRIC /'
    kill $S $H; wait $S $H
    for c in steady hog; do
        while [ -d $CG/tenants.slice/$c ] && ! rmdir $CG/tenants.slice/$c 2>/dev/null; do sleep 0.2; done
    done
}
echo 1 > /sys/kernel/mm/numa/demotion_enabled
echo 2 > /proc/sys/kernel/numa_balancing
phase KERNEL 0
echo 3 > /proc/sys/vm/drop_caches
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
# v0 semantics under test: demand = usage, so local_low covers the whole
# container (with DAMON heat it would cover only its 30 MiB hot set).
[hotness]
source = "off"
[[policy]]
match = "tenants.slice/steady"
local_low = "320MiB"
[[policy]]
match = "tenants.slice/*"
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
phase TIERD $N
kill -TERM $TIERD
wait $TIERD
"#,
        900,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    // (steady MiB on node 0, hog MiB on node 1) per sample of a phase.
    let phase = |name: &str| -> (u64, Vec<(u64, u64)>) {
        let mut rows = g
            .output
            .lines()
            .filter_map(|l| l.strip_prefix(name))
            .map(|l| {
                let v: Vec<u64> = l
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                v
            });
        let before = rows.next().expect("phase start")[0];
        (
            before,
            rows.filter(|v| v.len() == 2)
                .map(|v| (v[0], v[1]))
                .collect(),
        )
    };
    let loss = |(before, rows): &(u64, Vec<(u64, u64)>)| {
        before - rows.iter().map(|r| r.0).min().unwrap().min(*before)
    };
    let kernel = phase("KERNEL ");
    let tierd = phase("TIERD ");
    eprintln!(
        "steady on node 0 (MiB) per sample, kernel-only: {} -> {:?}\ntierd: {} -> {:?}",
        kernel.0,
        kernel.1.iter().map(|r| r.0).collect::<Vec<_>>(),
        tierd.0,
        tierd.1.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    assert!(
        kernel.0 >= 280 && tierd.0 >= 280,
        "steady should start in DRAM: {kernel:?} {tierd:?}"
    );
    // The hog's 800 MiB cannot all fit: DRAM was under pressure in both.
    assert!(
        tierd.1.iter().any(|&(_, n1)| n1 >= 100),
        "no pressure on DRAM: {tierd:?}"
    );
    let (k, t) = (loss(&kernel), loss(&tierd));
    assert!(
        k >= 48,
        "the baseline put no pressure on the steady container (lost {k} MiB):\n{}",
        g.output
    );
    let st = statuses(&g.output);
    let steady: Vec<&ContainerStatus> = st
        .iter()
        .filter_map(|s| container(s, "tenants.slice/steady"))
        .collect();
    assert!(
        steady.iter().all(|c| c.state != "over_target"),
        "{steady:?}"
    );
    assert!(
        steady
            .iter()
            .all(|c| c.fast_bytes > c.target_bytes || c.memory_low_bytes >= 290 * MIB),
        "steady at or under target was not protected with memory.low: {steady:?}"
    );
    // memory.low is strong but not absolute (the kernel breaks protection when
    // reclaim makes no progress otherwise; an earlier measurement saw 40-60 MiB lost by a
    // protected 600 MiB tenant): at most 60% of what kernel tiering alone
    // took. Seen here (kernel-only vs tierd): 209 vs 56, 177 vs 68, 140 vs 73
    // MiB — the kernel-only baseline itself varies by 1.5x between boots.
    assert!(
        5 * t <= 3 * k,
        "steady lost {t} MiB of DRAM under tierd vs {k} MiB with kernel tiering only:\n{}",
        g.output
    );
    eprintln!("steady container DRAM loss: kernel-only {k} MiB, tierd {t} MiB");
    // The eBPF probe is the hint-fault source in this kernel, and the hog's
    // faults on node 1 and its promotions to node 0 are attributed to it.
    let metric = |prefix: &str| -> f64 {
        g.output
            .lines()
            .filter_map(|l| l.strip_prefix("METRIC "))
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        metric("tierd_hint_fault_source{source=\"ebpf\"}"),
        1.0,
        "{}",
        g.output
    );
    assert!(
        metric("tierd_container_numa_hint_faults_total{cgroup=\"tenants.slice/hog\",node=\"1\"}")
            > 0.0,
        "no hint faults attributed to the hog:\n{}",
        g.output
    );
    // Promotion attempts (any outcome): with the steady container protected
    // and the hog at its share, DRAM can stay full and every attempt fail,
    // which is the placement working, not the probe failing.
    assert!(
        metric("tierd_container_numa_promotions_total{cgroup=\"tenants.slice/hog\",node=\"0\"")
            > 0.0,
        "no promotion attempts attributed to the hog:\n{}",
        g.output
    );
}

#[test]
fn sigterm_restores_kernel_and_cgroup_settings() {
    let g = boot(
        &[
            KNOBS_OFF_WITH_A,
            r#"
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
numa_balancing = 2
demotion_enabled = true
[[policy]]
match = "tenants.slice/*"
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30
sleep 3
echo "RUNNING demotion=$(cat /sys/kernel/mm/numa/demotion_enabled) nb=$(cat /proc/sys/kernel/numa_balancing) low=$(cat $CG/tenants.slice/a/memory.low)"
kill -TERM $TIERD
wait $TIERD
echo "EXIT $?"
echo "AFTER demotion=$(cat /sys/kernel/mm/numa/demotion_enabled) nb=$(cat /proc/sys/kernel/numa_balancing) low=$(cat $CG/tenants.slice/a/memory.low)"
cat /tmp/tierd.log
"#,
        ]
        .concat(),
        300,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let line = |p: &str| {
        g.output
            .lines()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no {p} line:\n{}", g.output))
            .to_owned()
    };
    let running = line("RUNNING");
    assert!(
        running.contains("demotion=true") && running.contains("nb=2"),
        "{running}"
    );
    assert!(
        !running.contains("low=12345678"),
        "memory.low was not steered: {running}"
    );
    assert_eq!(line("EXIT"), "EXIT 0");
    // memory.low reads back rounded down to pages: 12345678 → 12345344.
    assert_eq!(
        line("AFTER"),
        "AFTER demotion=false nb=0 low=12345344",
        "{}",
        g.output
    );
}

/// Issue 12: a stop at any instant — before the handlers exist, during the
/// DAMON claim or the BPF load, in the first cycles — leaves every setting
/// tierd touches (demotion_enabled, numa_balancing, memory.low, memory.min,
/// kdamonds) at its pre-start value. The last run waits for the third cycle
/// and shows the settings changed first, so the check cannot pass because
/// tierd never got to write anything. Every stop must end tierd within 60 s:
/// a SIGTERM that came while tokio installed its handler was once lost
/// (`Signals::block`).
#[test]
fn sigterm_at_any_instant_restores_everything() {
    let g = boot(
        &[
            KNOBS_OFF_WITH_A,
            r#"
cat > /tmp/t.toml <<'TOML'
[daemon]
interval = "500ms"
numa_balancing = 2
demotion_enabled = true
[hotness]
source = "damon"
[[policy]]
match = "tenants.slice/*"
local_low = "60MiB"
TOML
state() {
    echo "demotion=$(cat /sys/kernel/mm/numa/demotion_enabled) nb=$(cat /proc/sys/kernel/numa_balancing) low=$(cat $CG/tenants.slice/a/memory.low) min=$(cat $CG/tenants.slice/a/memory.min) kdamonds=$(cat /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds)"
}
# Waits for tierd $1 to end; one still running 60 s after SIGTERM is
# reported (log tail, threads) and killed, so that the test fails here
# with the cause rather than at the guest's timeout.
stopped() {
    i=0
    while kill -0 $1 2>/dev/null && ! grep -qs '^State:.*Z' /proc/$1/status; do
        i=$((i + 1))
        if [ $i -gt 600 ]; then
            echo "HUNG: tierd still running 60 s after SIGTERM"
            tail -20 /tmp/tierd.log
            for t in /proc/$1/task/*; do
                echo "TASK $(cat $t/comm) $(grep State $t/status) wchan=$(cat $t/wchan)"
            done
            kill -KILL $1
            break
        fi
        sleep 0.1
    done
    wait $1
}
echo "BEFORE $(state)"
for d in 0 0.02 0.05 0.1 0.2 0.4 0.7 1 1.5 2.5; do
    tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
    T=$!
    sleep $d
    kill -TERM $T
    stopped $T
    echo "AFTER $d rc=$? $(state)"
done
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
T=$!
wait_cycles 3
echo "RUNNING $(state)"
kill -TERM $T
stopped $T
echo "AFTER cycle3 rc=$? $(state)"
"#,
        ]
        .concat(),
        420,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let lines = |p: &str| -> Vec<&str> { g.output.lines().filter(|l| l.starts_with(p)).collect() };
    assert_eq!(
        lines("BEFORE"),
        ["BEFORE demotion=false nb=0 low=12345344 min=0 kdamonds=0"],
        "{}",
        g.output
    );
    let running = lines("RUNNING");
    assert_eq!(running.len(), 1, "{}", g.output);
    assert!(
        running[0].contains("demotion=true")
            && running[0].contains("nb=2")
            && !running[0].contains("low=12345344")
            && !running[0].contains("kdamonds=0"),
        "tierd did not change the settings in three cycles: {}\n{}",
        running[0],
        g.output
    );
    let after = lines("AFTER");
    assert_eq!(after.len(), 11, "{}", g.output);
    for l in after {
        // 143: killed before the handlers were installed (nothing written).
        assert!(
            l.contains(" rc=0 ") || l.contains(" rc=143 "),
            "unexpected exit: {l}\n{}",
            g.output
        );
        assert!(
            l.ends_with("demotion=false nb=0 low=12345344 min=0 kdamonds=0"),
            "not restored: {l}\n{}",
            g.output
        );
    }
}

/// Issue 12: SIGHUP and `tierctl reload` apply a valid config (the policy's
/// new name shows in /status) and refuse a broken one with one error line,
/// keeping the running config and the daemon.
#[test]
fn sighup_reloads_a_valid_config_and_keeps_the_old_on_a_broken_one() {
    let g = boot(
        r#"
. /tests/lib.sh
mkcg tenants.slice/a
start_in tenants.slice/a tierload hotset --size-mib 64 --hot-mib 8 --report-s 60 > /dev/null
wait_usage tenants.slice/a 60 60
printf '[daemon]\ninterval = "500ms"\n[[policy]]\nname = "first"\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
T=$!
wait_http 60
# wait_policy NAME: polls /status until the container's policy is NAME.
wait_policy() {
    local i=0
    until tierctl status --json | grep -q "\"policy\":\"$1\""; do
        i=$((i + 1)); [ $i -gt 150 ] && { echo "FAIL: policy $1 not applied in 30 s"; return 1; }
        sleep 0.2
    done
    echo "POLICY $1"
}
wait_policy first
sed -i 's/first/second/' /tmp/t.toml
kill -HUP $T
wait_policy second
echo 'interval = "soon"' >> /tmp/t.toml
kill -HUP $T
i=0
until grep -q "reload refused" /tmp/tierd.log; do
    i=$((i + 1)); [ $i -gt 150 ] && { echo "FAIL: no refusal logged"; break; }
    sleep 0.2
done
tierctl reload > /tmp/ctl.out 2>&1
echo "CTL_BROKEN $? $(head -c 300 /tmp/ctl.out | tr '\n' ' ')"
kill -0 $T && echo "ALIVE"
wait_policy second
sed -i '$d' /tmp/t.toml
sed -i 's/second/third/' /tmp/t.toml
tierctl reload > /tmp/ctl.out 2>&1
echo "CTL_OK $? $(cat /tmp/ctl.out)"
wait_policy third
kill -TERM $T
wait $T
echo "EXIT $?"
echo "REFUSALS $(grep -c 'reload refused' /tmp/tierd.log)"
"#,
        300,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let has = |l: &str| g.output.lines().any(|x| x == l);
    for l in [
        "POLICY first",
        "POLICY second",
        "ALIVE",
        "POLICY third",
        "EXIT 0",
    ] {
        assert!(has(l), "no {l:?}:\n{}", g.output);
    }
    let line = |p: &str| {
        g.output
            .lines()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no {p}:\n{}", g.output))
            .to_owned()
    };
    let broken = line("CTL_BROKEN");
    assert!(
        broken.starts_with("CTL_BROKEN 1 ")
            && broken.contains("interval")
            && broken.contains("t.toml"),
        "{broken}"
    );
    let ok = line("CTL_OK");
    assert!(
        ok.starts_with("CTL_OK 0 reloaded /tmp/t.toml: 1 policies"),
        "{ok}"
    );
    // The SIGHUP and the tierctl reload of the broken file: one line each.
    assert_eq!(line("REFUSALS"), "REFUSALS 2", "{}", g.output);
    assert!(!g.output.contains("FAIL"), "{}", g.output);
}

/// Shell lines: both host knobs set to 0, and a 64 MiB container
/// `tenants.slice/a` with `memory.low` 12345678 (reads back 12345344),
/// running and grown to 60 MiB.
const KNOBS_OFF_WITH_A: &str = r#"
. /tests/lib.sh
echo 0 > /sys/kernel/mm/numa/demotion_enabled
echo 0 > /proc/sys/kernel/numa_balancing
mkcg tenants.slice/a
echo 12345678 > $CG/tenants.slice/a/memory.low
start_in tenants.slice/a tierload hotset --size-mib 64 --hot-mib 8 --report-s 60 > /dev/null
wait_usage tenants.slice/a 60 60
"#;

/// Shell lines that set both host knobs to 0 and define `knobs` (prints them).
const KNOBS_OFF: &str = r#"
echo 0 > /sys/kernel/mm/numa/demotion_enabled
echo 0 > /proc/sys/kernel/numa_balancing
knobs() { echo "demotion=$(cat /sys/kernel/mm/numa/demotion_enabled) nb=$(cat /proc/sys/kernel/numa_balancing)"; }
"#;

/// The first line of `out` starting with `prefix`.
fn line_of(out: &str, prefix: &str) -> String {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}:\n{out}"))
        .to_owned()
}

/// Issue 12: on a cgroup v1 layout (a tmpfs with per-controller
/// hierarchies, as systemd mounts it in legacy mode) tierd exits non-zero
/// with one line naming the root and what to do, having changed nothing;
/// an empty policy list runs observe-only and changes no host setting.
#[test]
fn refuses_cgroup_v1_and_runs_observe_only_without_policies() {
    let g = boot(
        &format!(
            r#"
. /tests/lib.sh
{KNOBS_OFF}
mkdir -p /tmp/v1 && mount -t tmpfs tmpfs /tmp/v1
mkdir /tmp/v1/systemd /tmp/v1/memory
mount -t cgroup -o none,name=systemd cgroup /tmp/v1/systemd
printf '[daemon]\ncgroup_root = "/tmp/v1"\n[[policy]]\nmatch = "*"\n' > /tmp/v1.toml
tierd --config /tmp/v1.toml run > /tmp/v1.log 2>&1
echo "V1 rc=$? $(knobs)"
cat /tmp/v1.log
printf '[daemon]\ninterval = "500ms"\n' > /tmp/empty.toml
tierd --config /tmp/empty.toml run > /tmp/tierd.log 2>&1 &
T=$!
wait_http 60
echo "EMPTY $(knobs)"
kill -TERM $T; wait $T
cat /tmp/tierd.log
"#
        ),
        300,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let v1 = line_of(&g.output, "V1");
    assert!(
        v1.ends_with("demotion=false nb=0") && !v1.contains("rc=0"),
        "{v1}\n{}",
        g.output
    );
    assert!(
        g.output.contains("/tmp/v1: cgroup v1 hierarchy"),
        "no line naming the v1 root:\n{}",
        g.output
    );
    assert_eq!(
        line_of(&g.output, "EMPTY"),
        "EMPTY demotion=false nb=0",
        "{}",
        g.output
    );
    assert!(g.output.contains("observe-only"), "{}", g.output);
}

/// Issue 12: in a guest booted with `cgroup_disable=memory` (a cgroup v2
/// hierarchy without the memory controller) tierd exits non-zero naming the
/// root and the missing controller, having changed nothing.
#[test]
fn refuses_a_hierarchy_without_the_memory_controller() {
    let g = boot_with(
        &format!(
            r#"
{KNOBS_OFF}
printf '[[policy]]\nmatch = "*"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/t.log 2>&1
echo "NOMEM rc=$? $(knobs)"
cat /tmp/t.log
"#
        ),
        300,
        |c| c.kernel_args.push("cgroup_disable=memory".into()),
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let nomem = line_of(&g.output, "NOMEM");
    assert!(
        nomem.ends_with("demotion=false nb=0") && !nomem.contains("rc=0"),
        "{nomem}\n{}",
        g.output
    );
    assert!(
        g.output
            .contains("/sys/fs/cgroup: the memory controller is not available"),
        "{}",
        g.output
    );
}

/// Issue 12: tierd killed with SIGKILL mid-run (nothing restored), started
/// again and stopped cleanly leaves the host as it was before the first
/// start: the second tierd undoes the first's changes from the journal
/// before it reads any original, so it never takes them for originals.
#[test]
fn kill9_then_restart_and_clean_stop_restores_the_first_originals() {
    let g = boot(
        &[
            KNOBS_OFF_WITH_A,
            r#"
printf '[daemon]\ninterval = "500ms"\nnuma_balancing = 2\ndemotion_enabled = true\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
state() {
    echo "demotion=$(cat /sys/kernel/mm/numa/demotion_enabled) nb=$(cat /proc/sys/kernel/numa_balancing) low=$(cat $CG/tenants.slice/a/memory.low)"
}
echo "BEFORE $(state)"
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
T=$!
wait_cycles 3
kill -KILL $T
wait $T
echo "KILLED $(state)"
echo "JOURNAL $(test -s /run/tierd/journal.json && echo kept || echo missing)"
tierd --config /tmp/t.toml run > /tmp/tierd2.log 2>&1 &
T=$!
wait_cycles 3
echo "RUNNING $(state)"
kill -TERM $T
wait $T
echo "EXIT $?"
echo "AFTER $(state)"
echo "JOURNAL $(test -e /run/tierd/journal.json && echo kept || echo removed)"
grep -c "stopped without restoring" /tmp/tierd2.log | sed 's/^/UNDONE /'
"#,
        ]
        .concat(),
        300,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let line = |p: &str| line_of(&g.output, p);
    assert_eq!(
        line("BEFORE"),
        "BEFORE demotion=false nb=0 low=12345344",
        "{}",
        g.output
    );
    // The kill left tierd's values and the journal behind.
    let killed = line("KILLED");
    assert!(
        killed.contains("demotion=true")
            && killed.contains("nb=2")
            && !killed.ends_with("low=12345344"),
        "{killed}\n{}",
        g.output
    );
    assert_eq!(line("JOURNAL"), "JOURNAL kept", "{}", g.output);
    let running = line("RUNNING");
    assert!(
        running.contains("demotion=true") && running.contains("nb=2"),
        "{running}\n{}",
        g.output
    );
    assert_eq!(line("EXIT"), "EXIT 0", "{}", g.output);
    assert_eq!(
        line("AFTER"),
        "AFTER demotion=false nb=0 low=12345344",
        "{}",
        g.output
    );
    assert!(
        g.output.lines().any(|l| l == "JOURNAL removed"),
        "{}",
        g.output
    );
    assert_eq!(line("UNDONE"), "UNDONE 1", "{}", g.output);
}

/// Issue 12, churn soak (CI length): a container created and destroyed
/// every second for 60 s (its process killed mid-run, whatever tierd was
/// doing with it) beside a steady one. tierd stays up, its RSS and open fds
/// stay flat, every series of the churned cgroups is gone within a cycle
/// of the last one leaving, loop errors (if any) are counted, not fatal,
/// and no kdamond is left after the stop. The script is
/// tests/guest/churn.sh; `cargo xtask bench` runs it for 10 minutes.
#[test]
fn churn_soak_leaves_tierd_flat_and_no_series_behind() {
    let g = boot(
        r#"
. /tests/lib.sh
. /tests/churn.sh
churn_soak 60 25
"#,
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    // At least 60 s and 25 churned containers (under TCG a
    // create-run-kill-remove round takes 1-3 s; the soak goes on past 60 s
    // until 25 went through).
    let r = testbed::soak::check(&g.output, 25);
    eprintln!("{}", testbed::soak::table(&r));
    assert!(r.problems.is_empty(), "{:?}\n{}", r.problems, g.output);
    // The unit's MemoryMin= must cover what tierd keeps resident, twice
    // over after the soak, and its peak (the start: libbpf reads the
    // kernel's BTF).
    let min_kib = unit_memory_min_kib();
    let end_rss = r.samples.last().unwrap().1;
    assert!(
        end_rss * 2 <= min_kib,
        "tierd's RSS after the soak ({end_rss} KiB) is over half the unit's MemoryMin= ({min_kib} KiB)"
    );
    let hwm = r
        .peak_rss_kib
        .unwrap_or_else(|| panic!("no hwm_kib= on the END line\n{}", g.output));
    assert!(
        hwm <= min_kib,
        "tierd's peak RSS ({hwm} KiB) is over the unit's MemoryMin= ({min_kib} KiB)"
    );
}

/// Issue 12: a panic in a cycle (injected through the test-only fault point
/// `TIERD_TEST_PANIC_AT_CYCLE`) ends tierd with an error and every setting
/// put back by the drop guards, and the journal removed.
#[test]
fn a_panic_in_a_cycle_restores_everything() {
    let g = boot(
        &[
            KNOBS_OFF_WITH_A,
            r#"
printf '[daemon]\ninterval = "1s"\nnuma_balancing = 2\ndemotion_enabled = true\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
state() {
    echo "demotion=$(cat /sys/kernel/mm/numa/demotion_enabled) nb=$(cat /proc/sys/kernel/numa_balancing) low=$(cat $CG/tenants.slice/a/memory.low)"
}
TIERD_TEST_PANIC_AT_CYCLE=6 tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
T=$!
wait_cycles 2
echo "RUNNING $(state)"
wait $T
echo "EXIT $?"
echo "AFTER $(state)"
echo "JOURNAL $(test -e /run/tierd/journal.json && echo kept || echo removed)"
grep -c "injected panic" /tmp/tierd.log | sed 's/^/PANICKED /'
"#,
        ]
        .concat(),
        300,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let line = |p: &str| line_of(&g.output, p);
    let running = line("RUNNING");
    assert!(
        running.contains("demotion=true") && !running.ends_with("low=12345344"),
        "tierd changed nothing before the panic: {running}\n{}",
        g.output
    );
    // The panic message, and the error it becomes, both name it.
    assert_ne!(line("PANICKED"), "PANICKED 0", "{}", g.output);
    assert_ne!(line("EXIT"), "EXIT 0", "{}", g.output);
    assert_eq!(
        line("AFTER"),
        "AFTER demotion=false nb=0 low=12345344",
        "{}",
        g.output
    );
    assert_eq!(line("JOURNAL"), "JOURNAL removed", "{}", g.output);
}

/// Runs tierd with each bounding set (`setpriv --bounding-set`) against a
/// workload of another uid and reports, per set, what worked: alive, the
/// eBPF probe, DAMON, a move_pages demotion, the numa_balancing write.
fn capability_runs(sets: &[String]) -> Guest {
    let mut script = String::from(
        r#"
. /tests/lib.sh
mkcg tenants.slice/a
printf '[daemon]\ninterval = "500ms"\ncold_demotion = true\ncold_min_age = "1s"\n[hotness]\nsource = "damon"\n[[policy]]\nmatch = "tenants.slice/*"\nlocal_high = "40%%"\n' > /tmp/t.toml
run_with() {
    # A fresh workload each time, all on DRAM: the last run's demotions
    # must not hide this one's.
    [ -n "$W" ] && { kill -KILL $W; wait $W 2>/dev/null; }
    W=$(start_in tenants.slice/a /usr/local/bin/setpriv --reuid=1000 --regid=1000 --clear-groups tierload hotset --size-mib 64 --hot-mib 8 --report-s 60)
    wait_usage tenants.slice/a 60 60
    echo 0 > /proc/sys/kernel/numa_balancing
    /usr/local/bin/setpriv --bounding-set="$1" tierd --config /tmp/t.toml run > /tmp/c.log 2>&1 &
    T=$!
    i=0
    S=""
    while [ $i -lt 150 ]; do
        kill -0 $T 2>/dev/null || break
        S=$(tierctl status --json 2>/dev/null)
        echo "$S" | grep -qE '"demote/move_pages":[1-9]' && break
        i=$((i + 1)); sleep 0.2
    done
    alive=$(kill -0 $T 2>/dev/null && echo 1 || echo 0)
    ebpf=$(echo "$S" | grep -c '"hint_faults":"ebpf')
    damon=$(echo "$S" | grep -c '"hotness":"damon')
    moved=$(echo "$S" | grep -cE '"demote/move_pages":[1-9]')
    nb=$(cat /proc/sys/kernel/numa_balancing)
    kill -TERM $T 2>/dev/null; wait $T
    echo "CAPS $1 alive=$alive ebpf=$ebpf damon=$damon moved=$moved nb=$nb"
    grep -iE "permitted|denied|EPERM|EACCES" /tmp/c.log | head -3 | sed 's/^/  log: /'
}
"#,
    );
    for s in sets {
        script += &format!("run_with {s}\n");
    }
    script += "echo END\n";
    boot_with(&script, 900, |c| {
        c.binaries.push("/usr/bin/setpriv".into());
    })
}

/// The CAPS line of `set` in `out`: `alive=. ebpf=. damon=. moved=. nb=.`.
fn caps_result(out: &str, set: &str) -> String {
    let p = format!("CAPS {set} ");
    let l = out
        .lines()
        .find_map(|l| l.find(&p).map(|i| &l[i + p.len()..]))
        .unwrap_or_else(|| panic!("no {p}:\n{out}"));
    l.to_owned()
}

/// The value of `key=` in config/tierd.service.
fn unit_setting(key: &str) -> String {
    let unit = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/tierd.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{}: no {key}=", unit.display()))
        .to_owned()
}

/// `MemoryMin=` of config/tierd.service in KiB (a number with an `M`
/// suffix, as the unit writes it).
fn unit_memory_min_kib() -> i64 {
    let v = unit_setting("MemoryMin");
    let mib: i64 = v
        .strip_suffix('M')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("MemoryMin={v}: expected <MiB>M"));
    mib * 1024
}

/// The capabilities of `CapabilityBoundingSet=` in config/tierd.service,
/// as `setpriv` names (`sys_admin`).
fn unit_capabilities() -> Vec<String> {
    unit_setting("CapabilityBoundingSet")
        .split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_ascii_lowercase())
        .collect()
}

/// Issue 12: the unit's `CapabilityBoundingSet=` is the smallest set found
/// by measurement. With it (as a `setpriv --bounding-set`, which is what
/// systemd applies) tierd loads the eBPF probe, runs DAMON, demotes another
/// uid's cold pages with move_pages and writes numa_balancing; without any
/// one of its capabilities something fails. Measured on a wider candidate
/// set first (docs/NOTES.md): CAP_BPF, CAP_PERFMON, CAP_DAC_OVERRIDE,
/// CAP_DAC_READ_SEARCH, CAP_SYS_RESOURCE, CAP_IPC_LOCK and CAP_SYS_NICE
/// each changed nothing once CAP_SYS_ADMIN and CAP_SYS_PTRACE were there.
#[test]
fn capability_bounding_set_is_found_by_measurement() {
    let caps = unit_capabilities();
    let set = |cs: &[&String]| {
        let plus: Vec<String> = cs.iter().map(|c| format!("+{c}")).collect();
        format!("-all,{}", plus.join(","))
    };
    let all: Vec<&String> = caps.iter().collect();
    let mut sets = vec![set(&all)];
    for drop in &caps {
        let rest: Vec<&String> = caps.iter().filter(|c| *c != drop).collect();
        sets.push(set(&rest));
    }
    let g = capability_runs(&sets);
    assert_eq!(g.exit_code, 0, "{}", g.output);
    assert_eq!(
        caps_result(&g.output, &sets[0]),
        "alive=1 ebpf=1 damon=1 moved=1 nb=2",
        "the unit's set {caps:?} is not enough:\n{}",
        g.output
    );
    for (drop, s) in caps.iter().zip(&sets[1..]) {
        assert_ne!(
            caps_result(&g.output, s),
            "alive=1 ebpf=1 damon=1 moved=1 nb=2",
            "{drop} is not needed:\n{}",
            g.output
        );
    }
}

#[test]
fn survives_a_container_deleted_mid_run() {
    let g = boot(
        r#"
. /tests/lib.sh
mkcg tenants.slice/a
mkcg tenants.slice/b
A=$(start_in tenants.slice/a tierload hotset --size-mib 64 --hot-mib 8 --report-s 60)
B=$(start_in tenants.slice/b tierload hotset --size-mib 64 --hot-mib 8 --report-s 60)
wait_usage tenants.slice/b 60 60
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "500ms"
[[policy]]
match = "tenants.slice/*"
EOF
RUST_LOG=debug tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30
emit_status
# Delete b while tierd is cycling, then recreate it under the same path.
kill -KILL $B; wait $B 2>/dev/null
while ! rmdir $CG/tenants.slice/b 2>/dev/null; do sleep 0.1; done
sleep 2
emit_status
mkcg tenants.slice/b
start_in tenants.slice/b tierload hotset --size-mib 32 --hot-mib 8 --report-s 60 > /dev/null
wait_usage tenants.slice/b 30 60
sleep 2
emit_status
kill -0 $TIERD && echo "ALIVE"
kill -TERM $TIERD
wait $TIERD
echo "EXIT $?"
grep -c ERROR /tmp/tierd.log || true
"#,
        300,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    assert!(g.output.lines().any(|l| l == "ALIVE"), "{}", g.output);
    assert!(g.output.lines().any(|l| l == "EXIT 0"), "{}", g.output);
    let st = statuses(&g.output);
    assert_eq!(st.len(), 3, "{}", g.output);
    let b0 = container(&st[0], "tenants.slice/b")
        .expect("b managed at first")
        .id;
    assert!(container(&st[1], "tenants.slice/a").is_some());
    assert!(
        container(&st[1], "tenants.slice/b").is_none(),
        "deleted b still reported: {:?}",
        st[1]
    );
    let b2 = container(&st[2], "tenants.slice/b").expect("recreated b managed");
    assert_ne!(b2.id, b0, "recreated cgroup must get a new id");
    // Intervals run, full cycles or quiet checks (cadence.rs).
    let ticks = |s: &Status| s.cycles + s.quiet_checks;
    assert!(
        ticks(&st[2]) > ticks(&st[0]) + 4,
        "the loop stalled: {st:?}"
    );
}

#[test]
fn broken_config_is_refused_naming_the_key() {
    let g = boot(
        r#"
cat > /tmp/bad.toml <<'EOF'
[daemon]
interval = "2s"
[[policy]]
match = "tenants.slice/*"
weight = 0
EOF
cat > /tmp/typo.toml <<'EOF'
[daemon]
intervall = "2s"
EOF
tierd --config /tmp/bad.toml check-config; echo "CHECK $?"
tierd --config /tmp/bad.toml run; echo "RUN $?"
tierd --config /tmp/typo.toml run; echo "TYPO $?"
tierd --config /tmp/missing.toml run; echo "MISSING $?"
echo "knobs $(cat /sys/kernel/mm/numa/demotion_enabled)"
"#,
        120,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let o = &g.output;
    for (tag, needle) in [
        ("CHECK 1", "/tmp/bad.toml: key `policy[0].weight`"),
        ("RUN 1", "/tmp/bad.toml: key `policy[0].weight`"),
        ("TYPO 1", "intervall"),
        ("MISSING 1", "/tmp/missing.toml: cannot read config"),
    ] {
        assert!(o.lines().any(|l| l == tag), "expected {tag:?}:\n{o}");
        assert!(o.contains(needle), "expected {needle:?}:\n{o}");
    }
    assert!(
        o.contains("knobs false"),
        "a refused config must change nothing:\n{o}"
    );
}

#[test]
fn opt_out_pins_to_the_fast_tier_and_is_restored() {
    let g = boot(
        r#"
. /tests/lib.sh
mkcg tenants.slice/pay
start_in tenants.slice/pay tierload hotset --size-mib 64 --hot-mib 8 --report-s 60
wait_usage tenants.slice/pay 60 60
# Put part of it on the lower tier first.
echo 1 > /sys/kernel/mm/numa/demotion_enabled
echo 32M > $CG/tenants.slice/pay/memory.reclaim
echo 0 > /sys/kernel/mm/numa/demotion_enabled
emit_node tenants.slice/pay
echo "SUBTREE_BEFORE $(cat $CG/tenants.slice/cgroup.subtree_control)"
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
[[policy]]
match = "tenants.slice/pay"
opt_out = true
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30
for i in $(seq 20); do
    sleep 1
    [ "$(node_mib tenants.slice/pay 1)" -eq 0 ] && break
done
echo "MEMS $(cat $CG/tenants.slice/pay/cpuset.mems)"
emit_node tenants.slice/pay
emit_status
kill -TERM $TIERD
wait $TIERD
echo "AFTER [$(cat $CG/tenants.slice/pay/cpuset.mems 2>/dev/null)]"
echo "SUBTREE_AFTER $(cat $CG/tenants.slice/cgroup.subtree_control)"
"#,
        300,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let n = nodes(&g.output, "tenants.slice/pay");
    assert!(
        n[0].1 >= 16,
        "setup should have demoted pages to node 1: {n:?}"
    );
    assert!(g.output.lines().any(|l| l == "MEMS 0"), "{}", g.output);
    assert_eq!(
        n[1].1, 0,
        "pinned container still has pages on node 1: {n:?}"
    );
    let st = statuses(&g.output);
    let c = container(&st[0], "tenants.slice/pay").unwrap();
    assert_eq!(c.state, "pinned");
    assert!(
        // Empty ("inherit") cannot be written back while the cgroup has
        // tasks; the parent's effective nodes are the same placement.
        g.output
            .lines()
            .any(|l| l == "AFTER []" || l == "AFTER [0-1]"),
        "cpuset.mems not restored:\n{}",
        g.output
    );
    // The cpuset controller tierd enabled in the parent for the pinning
    // is disabled again.
    let line = |p: &str| line_of(&g.output, p);
    assert_eq!(
        line("SUBTREE_BEFORE").trim_start_matches("SUBTREE_BEFORE"),
        line("SUBTREE_AFTER").trim_start_matches("SUBTREE_AFTER"),
        "{}",
        g.output
    );
}

#[test]
fn single_tier_host_is_observe_only() {
    // No CPU-less node: one memory tier. tierd must say so, change nothing,
    // and still export per-container usage.
    let g = boot_with(
        r#"
. /tests/lib.sh
echo 0 > /proc/sys/kernel/numa_balancing
mkcg tenants.slice/a
echo 4096 > $CG/tenants.slice/a/memory.low
start_in tenants.slice/a tierload hotset --size-mib 64 --hot-mib 8 --report-s 60
wait_usage tenants.slice/a 60 60
printf '[[policy]]\nmatch = "tenants.slice/*"\nlocal_high = "10%%"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30
sleep 5
emit_status
emit_node tenants.slice/a
tierctl metrics | grep -E '^tierd_(host_tiered|container_memory_bytes)'
echo "KNOBS nb=$(cat /proc/sys/kernel/numa_balancing) low=$(cat $CG/tenants.slice/a/memory.low)"
kill -TERM $TIERD
wait $TIERD
grep -c "no lower memory tier" /tmp/tierd.log
"#,
        300,
        |cfg| {
            cfg.cxl_mib = 0;
            cfg.expect_tiers = 0;
        },
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let o = &g.output;
    assert!(o.contains("tierd_host_tiered 0"), "{o}");
    assert!(
        o.contains(
            r#"tierd_container_memory_bytes{cgroup="tenants.slice/a",node="0",tier="fast"}"#
        ),
        "{o}"
    );
    assert!(
        o.lines().any(|l| l == "KNOBS nb=0 low=4096"),
        "observe-only changed settings:\n{o}"
    );
    assert!(
        o.lines().any(|l| l == "1"),
        "the one log line about the missing tier:\n{o}"
    );
    let st = statuses(o);
    let c = container(&st[0], "tenants.slice/a").unwrap();
    assert!(!st[0].tiered);
    assert!(c.fast_bytes >= 60 * MIB && c.lower_bytes == 0, "{c:?}");
    // local_high 10% gives a small target, but nothing is demoted.
    assert_eq!(c.demote_bytes, 0);
}

/// (guest uptime s, parsed JSON report) of `REPORT <name>` lines.
fn reports(out: &str, name: &str) -> Vec<(f64, serde_json::Value)> {
    out.lines()
        .filter_map(|l| l.strip_prefix("REPORT "))
        .filter_map(|l| {
            let mut f = l.splitn(3, ' ');
            (f.next()? == name).then_some(())?;
            let t: f64 = f.next()?.parse().ok()?;
            Some((t, serde_json::from_str(f.next()?).ok()?))
        })
        .collect()
}

/// The hot set of a container starts on the CXL node (cpuset.mems = 1 while
/// it allocates); with `promotion = "tierd"` and kernel promotion off, tierd
/// promotes it with move_pages within the per-container budget: the bytes
/// it moved never exceed rate × time + bucket depth over any window, and the
/// cold rest stays on the lower tier.
#[test]
fn hot_set_on_cxl_is_promoted_within_budget() {
    promotes_hot_set_within_budget("move_pages");
}

/// As above with `mover = "damos"`: a DAMOS `migrate_hot` scheme per
/// container (memcg filter, quota = the budget) does the promotion.
#[test]
fn damos_mover_promotes_hot_set_within_budget() {
    promotes_hot_set_within_budget("damos");
}

fn promotes_hot_set_within_budget(mover: &str) {
    let script = r#"
. /tests/lib.sh
damon_stat_off
hot_set_on_node1
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
promotion = "tierd"
mover = "MOVER"
numa_balancing = 0
[limits]
promote_rate = "4MiB"
global_promote_rate = "64MiB"
burst_s = 1.0
[[policy]]
match = "tenants.slice/*"
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
# Samples each second until 90% of the hot set is on DRAM (240 s at most),
# then 10 more: the cold rest must stay where it is.
i=0; more=10
while [ $more -gt 0 ] && [ $i -lt 240 ]; do
    i=$((i + 1))
    hot_at_least 0.9 1 && more=$((more - 1))
    emit_status; emit_node tenants.slice/a; emit_report a /tmp/a.log; sleep 1
done
emit_goals
kill -TERM $TIERD; wait $TIERD
echo "GOALS_LOG $(grep -o 'no per-memcg quota goals\|hold each container at its target' /tmp/tierd.log | head -1)"
echo "TIERD_LOG"; grep -v DEBUG /tmp/tierd.log | tail -20
"#
    .replace("MOVER", mover);
    let g = boot(&script, 600);
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let key = format!("promote/{mover}");
    let n = nodes(&g.output, "tenants.slice/a");
    assert!(
        n[0].0 <= 8 && n[0].1 >= 180,
        "should start on node 1: {n:?}\n{}",
        g.output
    );
    let st = statuses(&g.output);
    assert!(st.len() >= 10, "too few samples:\n{}", g.output);
    // When each status was published (a full cycle's end, not when read).
    let ts: Vec<f64> = st.iter().map(|s| s.updated_unix_s).collect();
    let moved: Vec<u64> = st
        .iter()
        .map(|s| {
            container(s, "tenants.slice/a")
                .and_then(|c| c.moved_bytes.get(&key).copied())
                .unwrap_or(0)
        })
        .collect();
    let total = *moved.last().unwrap();
    // Rate limit over every window of published cycles: Δmoved ≤ rate ×
    // (Δt + one interval) + bucket depth (4 MiB/s × 1 s).
    let rate = 4.0 * MIB as f64;
    for i in 0..moved.len() {
        for j in i + 1..moved.len() {
            let dt = ts[j] - ts[i];
            let bound = rate * (dt + 1.0) + rate * 1.0;
            assert!(
                (moved[j] - moved[i]) as f64 <= bound,
                "moved {} B in {dt:.1} s (bound {bound:.0} B), samples {i}..{j}: {moved:?}",
                moved[j] - moved[i]
            );
        }
    }
    // The hot set (48 MiB) made it to DRAM, by tierd's doing.
    let reps = reports(&g.output, "a");
    let last = &reps.last().expect("no tierload reports").1;
    let residency = last["hot_residency"].as_f64().unwrap();
    assert!(
        residency >= 0.9,
        "hot set residency {residency}:\n{}",
        g.output
    );
    assert!(
        total >= 40 * MIB,
        "tierd moved only {total} B:\n{}",
        g.output
    );
    // Cold pages were not promoted with it beyond what the rule allows: an
    // idle region counts as recently idle while it overlaps a range DAMON
    // saw accessed within `cold_min_age` (5 s), so the cold part of a
    // region straddling the hot set's edge may follow for that long at the
    // budget: 4 MiB/s x 5 s + the 4 MiB bucket = 24 MiB (NOTES sessions
    // 64 and 72).
    let (_, n1) = *n.last().unwrap();
    eprintln!("{mover}: (MiB on node 0, node 1) per second: {n:?}");
    assert!(n1 >= 192 - 48 - 24, "cold pages were promoted too: {n:?}");
    if mover == "damos" {
        damos_goals_follow_the_kernel(&g.output);
    }
}

/// The DAMOS mover's quota goals, by what the kernel has (detected by the
/// files present, the goal's `path`): on 7.3 the container's migrate_hot
/// scheme aims `node_memcg_used_bp` of node 0 at its target (the whole
/// 192 MiB tenant: ~1,900 bp of the 1 GiB node) and migrate_cold
/// `node_memcg_free_bp` at the rest; on 6.12 tierd says it has none and
/// uses quotas alone.
fn damos_goals_follow_the_kernel(out: &str) {
    let goals: Vec<Vec<&str>> = out
        .lines()
        .filter_map(|l| l.strip_prefix("GOAL "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let log = line_of(out, "GOALS_LOG");
    match testbed::GuestKernel::from_env().unwrap_or_else(|e| panic!("{e}")) {
        testbed::GuestKernel::Linux7_3 => {
            assert!(log.contains("hold each container"), "{log}\n{out}");
            let used = goals
                .iter()
                .find(|g| g[0] == "node_memcg_used_bp")
                .unwrap_or_else(|| panic!("no node_memcg_used_bp goal: {goals:?}\n{out}"));
            assert_eq!(used.get(3), Some(&"/tenants.slice/a"), "{goals:?}");
            assert_eq!(used[2], "0", "{goals:?}");
            let bp: u64 = used[1].parse().unwrap();
            assert!((1_500..=2_200).contains(&bp), "{goals:?}");
            let free = goals
                .iter()
                .find(|g| g[0] == "node_memcg_free_bp")
                .unwrap_or_else(|| panic!("no node_memcg_free_bp goal: {goals:?}"));
            assert_eq!(free[1].parse::<u64>().unwrap(), 10_000 - bp, "{goals:?}");
        }
        testbed::GuestKernel::Linux6_12 => {
            assert!(log.contains("no per-memcg quota goals"), "{log}\n{out}");
            assert!(goals.is_empty(), "{goals:?}");
        }
    }
}

/// Recall (`daemon.recall`, on by default): a hot set the kernel promoted
/// (NUMA balancing mode 2, as shipped) and that is then demoted, as kswapd
/// does to a tenant's pages in a neighbour's promotion burst, is promoted
/// back by tierd from the probe's records of those promotions while the
/// container is under its target. NUMA balancing is switched off before the
/// demotion, as it is in effect between two of the kernel's scan passes
/// over a task (tens of seconds for the demo's tenants): only tierd's
/// moves (`promote/recall`) can bring the pages back.
#[test]
fn known_hot_pages_demoted_again_are_recalled() {
    let g = boot(
        r#"
. /tests/lib.sh
# No migration before tierd's probe is attached: it learns the hot set
# from the kernel's promotions (tierd sets mode 2 once the probe runs).
hot_set_on_node1
start_tierd_tenants || exit 1
# until_hot N DEADLINE_S: reports every second until hot_at_least 0.9 N.
until_hot() {
    local i=0
    until hot_at_least 0.9 "$1"; do
        i=$((i + 1)); [ $i -gt "$2" ] && { echo "DEADLINE"; return; }
        emit_report a /tmp/a.log; sleep 1
    done
    emit_report a /tmp/a.log
}
echo "PHASE promote $(cut -d' ' -f1 /proc/uptime)"
until_hot 0 240
emit_status
echo 0 > /proc/sys/kernel/numa_balancing
echo "PHASE demote $(cut -d' ' -f1 /proc/uptime)"
echo 400M > $CG/tenants.slice/a/memory.reclaim 2>/dev/null
emit_node tenants.slice/a
# Two reports later than the demotion: none stale.
until_hot $(( $(reports) + 2 )) 120
# /status is published at a cycle's end: the recall may still be moving.
next_cycle || exit 1
emit_status
emit_node tenants.slice/a
kill -TERM $TIERD; wait $TIERD
echo "TIERD_LOG"; grep -v DEBUG /tmp/tierd.log | tail -20
"#,
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let phase = |name: &str| -> f64 {
        let t = field(&g.output, &format!("PHASE {name}"));
        t.parse()
            .unwrap_or_else(|_| panic!("PHASE {name} {t}: not seconds\n{}", g.output))
    };
    let (promote_at, demote_at) = (phase("promote"), phase("demote"));
    let reps = reports(&g.output, "a");
    let hot = |r: &serde_json::Value| r["hot_residency"].as_f64().unwrap_or(0.0);
    let first_hot = |from: f64| {
        reps.iter()
            .find(|(t, r)| *t >= from && hot(r) >= 0.9)
            .map(|(t, _)| t - from)
    };
    // The kernel promoted the hot set (what tierd learns it from).
    first_hot(promote_at).unwrap_or_else(|| {
        panic!(
            "the kernel never put 90% of the hot set on DRAM (NUMA balancing mode 2):\n{}",
            g.output
        )
    });
    let n = nodes(&g.output, "tenants.slice/a");
    assert!(n.len() >= 3, "{n:?}\n{}", g.output);
    assert!(
        n[1].0 <= 24,
        "memory.reclaim should have demoted most of the DRAM pages: {n:?}\n{}",
        g.output
    );
    // Reports from two seconds after the demotion on (none stale).
    first_hot(demote_at + 2.0).unwrap_or_else(|| {
        panic!(
            "the hot set did not come back within 120 s of its demotion:\n{}",
            g.output
        )
    });
    let st = statuses(&g.output);
    let recalled = st
        .last()
        .and_then(|s| container(s, "tenants.slice/a"))
        .and_then(|c| c.moved_bytes.get("promote/recall").copied())
        .unwrap_or(0);
    // What memory.reclaim took of the hot set came back by tierd's moves.
    let (demoted, after) = (n[1], n[n.len() - 1]);
    assert!(
        after.0 >= demoted.0 + 40,
        "DRAM {} MiB after the demotion, {} MiB at the end:\n{}",
        demoted.0,
        after.0,
        g.output
    );
    assert!(
        recalled >= (after.0 - demoted.0 - 8) * MIB,
        "tierd recalled only {recalled} B of the {} MiB that came back:\n{}",
        after.0 - demoted.0,
        g.output
    );
}

/// A container capped at 16 MiB of DRAM whose 64 MiB are all hot and all
/// on DRAM: reclaim takes none of them (every page is referenced again
/// before reclaim looks: MGLRU's eviction command and memory.reclaim both
/// come back short with nothing taken), so after three intervals of that
/// tierd moves the demotion owed with move_pages
/// (`controller/unevictable.rs`). Polled each second until its fast-tier
/// bytes are within the band of its cap, to a deadline.
#[test]
fn a_cap_holds_on_a_container_whose_pages_are_all_hot() {
    let g = boot(
        r#"
. /tests/lib.sh
mkcg tenants.slice/c
start_in tenants.slice/c tierload hotset --size-mib 64 --hot-mib 64 --report-s 60 > /dev/null
wait_usage tenants.slice/c 62 90 || exit 1
emit_node tenants.slice/c
# Reclaim alone, before tierd: what it takes of an all-hot memcg.
echo 32M > $CG/tenants.slice/c/memory.reclaim 2>/dev/null; echo "RECLAIM rc=$?"
emit_node tenants.slice/c
printf '[daemon]\ninterval = "1s"\n[[policy]]\nmatch = "tenants.slice/c"\nlocal_high = "16MiB"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
i=0
until [ "$(node_mib tenants.slice/c 0)" -le 32 ]; do
    i=$((i + 1)); [ $i -gt 90 ] && { echo "DEADLINE"; emit_status; emit_node tenants.slice/c; grep -v '^$' /tmp/tierd.log | tail -20; exit 1; }
    sleep 1
done
echo "WITHIN $i"
emit_node tenants.slice/c
emit_status
grep 'moved them with move_pages' /tmp/tierd.log | head -3
kill -TERM $TIERD; wait $TIERD
"#,
        400,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let n = nodes(&g.output, "tenants.slice/c");
    assert!(n[0].0 >= 60, "c should start on DRAM: {n:?}\n{}", g.output);
    let last = n.last().unwrap();
    assert!(
        last.0 <= 32,
        "c's DRAM should be within 16 MiB of its cap: {n:?}"
    );
    assert!(
        last.0 + last.1 >= 60,
        "c's pages should be demoted, not swapped or freed: {n:?}"
    );
    let st = statuses(&g.output);
    let moved = st
        .last()
        .and_then(|s| container(s, "tenants.slice/c"))
        .map(|c| c.moved_bytes.clone())
        .unwrap_or_default();
    let within = g
        .output
        .lines()
        .find_map(|l| l.strip_prefix("WITHIN "))
        .unwrap_or("?");
    eprintln!("within the band after {within} s; nodes {n:?}; moved by tierd {moved:?}");
}

/// With `promotion = "kernel"` tierd holds the kernel's promotion while no
/// container is under its target (`controller/gate.rs`): closed (rate limit
/// 0) while nothing on the lower tier passes the kernel's hot-page test,
/// limited to `limits.steady_promote_rate` once something does (a capped
/// container's hot pages above its `local_high`), and open (the kernel's
/// own) the cycle a newcomer is under its target. The original comes back
/// at exit and, from the journal, after a kill -9. NUMA balancing's longest
/// scan period goes the other way: with `limits.promote_scan_period = "2s"`
/// (off by default) it is held at 2 s while the newcomer is under its
/// target, the kernel's own (60 s) while steady and after exit; so does
/// the hot-page threshold (`limits.promote_hot_threshold = "2s"`, off by
/// default).
#[test]
fn kernel_promotion_is_limited_only_in_a_steady_state() {
    let g = boot(
        r#"
. /tests/lib.sh
RL=/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps
echo "RL START $(cat $RL)"
SP=/sys/kernel/debug/sched/numa_balancing/scan_period_max_ms
echo "SP START $(cat $SP)"
HT=/sys/kernel/debug/sched/numa_balancing/hot_threshold_ms
echo "HT START $(cat $HT)"
# until_is TAG FILE VALUE DEADLINE_S NAME: polls FILE every 0.5 s.
until_is() {
    local i=0
    until [ "$(cat $2)" = "$3" ]; do
        i=$((i + 1)); [ $i -gt $(( $4 * 2 )) ] && { echo "$1 DEADLINE $5 $(cat $2)"; return 1; }
        sleep 0.5
    done
    echo "$1 $5 $(cat $2) $(cut -d' ' -f1 /proc/uptime)"
}
until_rl() { until_is RL $RL "$@"; }
until_sp() { until_is SP $SP "$@"; }
until_ht() { until_is HT $HT "$@"; }
echo +cpuset > $CG/cgroup.subtree_control
mkcg tenants.slice
echo +cpuset > $CG/tenants.slice/cgroup.subtree_control
# a fits the fast tier: at its target from the start.
mkcg tenants.slice/a
start_in tenants.slice/a tierload hotset --size-mib 96 --hot-mib 24 --report-s 60 > /dev/null
wait_usage tenants.slice/a 90 60 || exit 1
printf '[daemon]\ninterval = "1s"\n[limits]\nsteady_after = "3s"\npromote_scan_period = "2s"\npromote_hot_threshold = "2s"\n[[policy]]\nname = "capped"\nmatch = "tenants.slice/c"\nlocal_high = "16MiB"\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
RUST_LOG=tierd=debug tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
# Steady with nothing on the lower tier: closed.
until_rl 0 60 CLOSED || exit 1
until_sp 60000 10 STEADY || exit 1
until_ht 1000 10 STEADY || exit 1
emit_status
tierctl metrics | grep '^tierd_kernel_promotion_' | sed 's/^/METRIC /'
# b's pages all on the lower tier: under its target.
on_lower tenants.slice/b 60 hotset --size-mib 64 --hot-mib 64 --report-s 60 || exit 1
emit_node tenants.slice/b
until_rl 65536 30 OPEN || exit 1
until_sp 2000 10 PACED || exit 1
until_ht 2000 10 HELD || exit 1
echo "NB HELD $(cat /proc/sys/kernel/numa_balancing)"
emit_status
# The kernel promotes b (the limit is lifted), then the state is steady
# again, with nothing hot below: closed again.
until_rl 0 240 CLOSED_AGAIN || { emit_status; exit 1; }
until_sp 60000 10 STEADY_AGAIN || exit 1
until_ht 1000 10 STEADY_AGAIN || exit 1
emit_node tenants.slice/b
# c is capped at 16 MiB of DRAM and all of its 48 MiB is hot: at its
# target with hot pages below, which pass the kernel's test while
# promotion is closed: limited.
on_lower tenants.slice/c 44 hotset --size-mib 48 --hot-mib 48 --report-s 60 || exit 1
emit_node tenants.slice/c
until_rl 4 120 LIMITED || { emit_status; emit_node tenants.slice/c; grep -v "^$" /tmp/tierd.log | tail -40; exit 1; }
emit_status
kill -TERM $TIERD; wait $TIERD
echo "RL AFTER_STOP $(cat $RL)"
echo "SP AFTER_STOP $(cat $SP)"
echo "HT AFTER_STOP $(cat $HT)"
kill $(cat $CG/tenants.slice/c/cgroup.procs) 2>/dev/null
while [ -d $CG/tenants.slice/c ] && ! rmdir $CG/tenants.slice/c 2>/dev/null; do sleep 0.2; done
tierd --config /tmp/t.toml run > /tmp/tierd2.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
until_rl 0 60 CLOSED_SECOND_RUN || exit 1
kill -9 $TIERD; wait $TIERD 2>/dev/null
echo "RL AFTER_KILL9 $(cat $RL)"
printf '[daemon]\ninterval = "1s"\n[limits]\nsteady_promote_rate = 0\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t0.toml
tierd --config /tmp/t0.toml run > /tmp/tierd3.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
echo "RL JOURNAL $(cat $RL)"
kill -TERM $TIERD; wait $TIERD
grep -E 'kernel promotion|steady' /tmp/tierd.log | tail -8
"#,
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    // The value on the `TAG NAME value …` line.
    let knob = |tag: &str, name: &str| -> u64 {
        g.output
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{tag} {name} ")))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {tag} {name} line:\n{}", g.output))
    };
    let rl = |name: &str| knob("RL", name);
    let sp = |name: &str| knob("SP", name);
    let ht = |name: &str| knob("HT", name);
    assert_eq!(rl("START"), 65536, "the kernel's default");
    assert_eq!(sp("START"), 60000, "the kernel's default");
    assert_eq!(sp("STEADY"), 60000, "steady: the kernel's own");
    assert_eq!(sp("PACED"), 2000, "b under its target");
    assert_eq!(sp("STEADY_AGAIN"), 60000);
    assert_eq!(sp("AFTER_STOP"), 60000, "SIGTERM restores it");
    // The hot-page threshold: raised (limits.promote_hot_threshold, 2 s
    // here, off by default) while b is under its target, the kernel's own
    // otherwise; the reset of its per-node copy leaves the tiering mode as
    // it was.
    assert_eq!(ht("START"), 1000, "the kernel's default");
    assert_eq!(ht("STEADY"), 1000);
    assert_eq!(ht("HELD"), 2000, "b under its target");
    assert_eq!(knob("NB", "HELD"), 2, "tiering mode on after the reset");
    assert_eq!(ht("STEADY_AGAIN"), 1000);
    assert_eq!(ht("AFTER_STOP"), 1000, "SIGTERM restores it");
    assert_eq!(rl("CLOSED"), 0);
    assert_eq!(rl("OPEN"), 65536);
    assert_eq!(rl("CLOSED_AGAIN"), 0);
    assert_eq!(rl("LIMITED"), 4);
    assert_eq!(rl("AFTER_STOP"), 65536, "SIGTERM restores it");
    assert_eq!(rl("CLOSED_SECOND_RUN"), 0);
    assert_eq!(rl("AFTER_KILL9"), 0, "kill -9 restores nothing");
    assert_eq!(rl("JOURNAL"), 65536, "the next start restores it");
    let st = statuses(&g.output);
    assert!(
        st.len() == 3
            && st[0].kernel_promotion_limited
            && st[0].kernel_promotion_closed
            && !st[0].kernel_scan_paced
            && !st[0].kernel_hot_threshold_held
            && !st[1].kernel_promotion_limited
            && st[1].kernel_scan_paced
            && st[1].kernel_hot_threshold_held,
        "{}",
        g.output
    );
    // b was under its target when the limit went, and had its share (within
    // the band) when it came back.
    let b = container(&st[1], "tenants.slice/b").expect("b in the status");
    assert_eq!(b.state, "under_target", "{b:?}");
    let n = nodes(&g.output, "tenants.slice/b");
    assert!(
        n.len() == 2 && n[0].0 < 8 && n[1].0 + 16 >= 64,
        "b on DRAM (MiB) before and after: {n:?}\n{}",
        g.output
    );
    for m in [
        "METRIC tierd_kernel_promotion_limited 1",
        "METRIC tierd_kernel_promotion_closed 1",
    ] {
        assert!(g.output.lines().any(|l| l == m), "{m}\n{}", g.output);
    }
}

/// Promotion candidates the kernel refuses for want of room are hot by its
/// own test too: with DRAM held by hugetlb pages and demotion off (nothing
/// kswapd can free) every candidate of a hot set on CXL is refused, the kernel
/// promotes nothing, and once the room is back (NUMA balancing off, so only
/// tierd can move them) tierd's recall moves the refused pages to DRAM.
#[test]
fn refused_promotion_candidates_are_recalled() {
    let g = boot(
        r#"
. /tests/lib.sh
hot_set_on_node1
N0=/sys/devices/system/node/node0
HP=$N0/hugepages/hugepages-2048kB/nr_hugepages
free_mib() { awk '/MemFree/ { print int($4 / 1024) }' $N0/meminfo; }
# The highest high watermark of node 0's zones: a promotion needs free
# memory above it (migrate_balanced_pgdat), so the fill leaves 12 MiB less.
HIGH=$(awk '/^Node/ { n = $2 } n == "0," && $1 == "high" && $2 > h { h = $2 } END { print int(h * 4 / 1024) }' /proc/zoneinfo)
# kswapd wakes as the fill crosses the low watermark (and at every refused
# promotion) and frees what it can back up to the high one. With demotion
# on, it demoted node 0's anon pages to node 1 (in one CI run free ended at
# exactly high; in another at 2 MiB under it and the kernel promoted into
# what kswapd freed, refusing too few). Demotion off (the guest has no
# swap): only clean file pages can go. Fill again, two seconds apart, until
# free stays 4 MiB under high.
echo 0 > /sys/kernel/mm/numa/demotion_enabled
i=0
while [ "$(free_mib)" -ge $((HIGH - 4)) ]; do
    i=$((i + 1))
    [ $i -gt 10 ] && { echo "FAIL: node 0 has $(free_mib) MiB free after 10 fills, not 4 MiB under its high watermark ($HIGH MiB)"; exit 1; }
    echo $(( $(cat $HP) + ($(free_mib) - HIGH + 12) / 2 )) > $HP
    sleep 2
done
echo "FILL hugepages=$(cat $HP) free=$(free_mib) high=$HIGH fills=$i"
# A refused promotion counts as a failed migration, and NUMA balancing
# doubles a task's scan period after a pass with failures (up to
# scan_period_max_ms, 60 s): in one CI run the kernel refused only 4162
# candidates in 120 s. Held at 1 s, every pass offers the hot set again.
NB=/sys/kernel/debug/sched/numa_balancing
[ -d $NB ] || mount -t debugfs none /sys/kernel/debug
echo 1000 > $NB/scan_period_max_ms || { echo "FAIL: cannot write $NB/scan_period_max_ms"; exit 1; }
printf '[daemon]\ninterval = "1s"\ndemotion_enabled = false\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
# tierd sets NUMA balancing mode 2 once its probe runs: wait for the
# kernel to refuse one hot set's worth of candidates (48 MiB, 12288 pages).
refused() { tierctl metrics | awk '/^tierd_container_numa_promotions_total/ && /tenants.slice\/a"/ && /outcome="dropped"/ { s += $2 } END { print s + 0 }'; }
i=0
numa() { awk '/^(numa_pte_updates|numa_hint_faults|pgpromote_candidate|pgpromote_success) / { printf "%s=%s ", $1, $2 }' /proc/vmstat; }
until [ "$(refused)" -ge 12288 ]; do
    i=$((i + 1)); [ $i -gt 120 ] && { echo "FAIL: the kernel refused only $(refused) candidates in 120 s (node 0 free $(free_mib) MiB, high $HIGH; $(numa))"; exit 1; }
    [ $((i % 10)) -eq 0 ] && echo "WAIT ${i}s refused=$(refused) free=$(free_mib) $(numa)"
    sleep 1
done
echo "REFUSED $(refused)"
emit_node tenants.slice/a
# NUMA balancing off, and the PTEs its last pass marked are let go: a hot
# page still marked would be promoted by the kernel at its next touch once
# there is room. Each touch now is refused again (no room yet): the count
# stops when the hot set has been touched. Two reads 5 s apart with a full
# cycle of tierd after the wait (its metrics stand still between full
# cycles: in one CI run a frozen count passed for a stopped one).
echo 0 > /proc/sys/kernel/numa_balancing
last=-1; i=0
until [ "$(refused)" -eq "$last" ]; do
    last=$(refused); i=$((i + 1))
    [ $i -gt 20 ] && { echo "FAIL: refusals still growing after NUMA balancing was turned off"; exit 1; }
    sleep 5
    next_cycle || exit 1
done
echo 0 > $HP
echo "RELEASED free=$(free_mib)"
wait_fast tenants.slice/a 44 60
emit_node tenants.slice/a
# /status is published at a cycle's end: the cycle whose recall moved the
# pages may still be moving (a CI run read 26 of 46 MiB recalled).
next_cycle || exit 1
emit_status
kill -TERM $TIERD; wait $TIERD
echo "TIERD_LOG"; grep -v DEBUG /tmp/tierd.log | tail -20
"#,
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let n = nodes(&g.output, "tenants.slice/a");
    assert!(n.len() >= 3, "{n:?}\n{}", g.output);
    let (before, after) = (n[1], n[n.len() - 1]);
    // kswapd, woken by the refusals, can free a few MiB (tierd's and the
    // shells' pages) for the kernel to promote into; most must be refused.
    assert!(
        before.0 <= 24,
        "the kernel promoted {} MiB of 48 with node 0 under its high watermark (the fill failed):\n{}",
        before.0,
        g.output
    );
    let recalled = recalled_bytes(&g.output, "tenants.slice/a");
    // Shown on success too: how close a run came to the bounds.
    let refused = g.output.lines().find(|l| l.starts_with("REFUSED"));
    println!(
        "a on DRAM (MiB) {} -> {}, {recalled} B recalled, {}",
        before.0,
        after.0,
        refused.unwrap_or("REFUSED ?")
    );
    // What the kernel did not promote came by recall: refused pages.
    let want = 44 - before.0 - 4;
    assert!(
        after.0 >= 44 && recalled >= want * MIB,
        "after the room came back: {} MiB on DRAM (≥ 44 wanted), {recalled} B recalled (≥ {want} MiB):\n{}",
        after.0,
        g.output
    );
}

/// Hint faults the kernel declines mark pages in use even when they are
/// not hot by its test: with its hot threshold at 0 ms the kernel makes no
/// promotion candidate of a hot set on CXL and promotes nothing, and
/// tierd's recall (the assist off, so only recall moves pages) brings the
/// pages whose faults it declined to DRAM while the container is under its
/// target (docs/NOTES.md "Skew: the work-conserving end state").
#[test]
fn declined_hint_faults_are_recalled_for_a_container_under_its_target() {
    let g = boot(
        r#"
. /tests/lib.sh
hot_set_on_node1
NB=/sys/kernel/debug/sched/numa_balancing
[ -d $NB ] || mount -t debugfs none /sys/kernel/debug
echo 0 > $NB/hot_threshold_ms || { echo "FAIL: cannot write $NB/hot_threshold_ms"; exit 1; }
# Every pass offers the hot set again (NUMA balancing backs a task's scan
# off to scan_period_max_ms, 60 s, when its faults migrate nothing).
echo 1000 > $NB/scan_period_max_ms || { echo "FAIL: cannot write $NB/scan_period_max_ms"; exit 1; }
PROMOTED0=$(awk '/^pgpromote_success / { print $2 }' /proc/vmstat)
printf '[daemon]\ninterval = "1s"\nassist_after = "0s"\n[limits]\npromote_hot_threshold = "0"\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
wait_fast tenants.slice/a 44 120
emit_node tenants.slice/a
# /status is published at a cycle's end: the cycle whose recall moved the
# pages may still be moving (a CI run read 26 of 46 MiB recalled).
next_cycle || exit 1
emit_status
echo "KERNEL_PROMOTED $(( $(awk '/^pgpromote_success / { print $2 }' /proc/vmstat) - PROMOTED0 ))"
kill -TERM $TIERD; wait $TIERD
echo "TIERD_LOG"; grep -v DEBUG /tmp/tierd.log | tail -20
"#,
        400,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let n = nodes(&g.output, "tenants.slice/a");
    assert!(n.len() >= 2, "{n:?}\n{}", g.output);
    let (before, after) = (n[0], n[n.len() - 1]);
    let kernel: u64 = field(&g.output, "KERNEL_PROMOTED")
        .parse()
        .unwrap_or(u64::MAX);
    let recalled = recalled_bytes(&g.output, "tenants.slice/a");
    // The hot set (48 MiB) came to DRAM, by recall, not by the kernel.
    assert!(
        before.0 < 8 && after.0 >= 44 && recalled >= 40 * MIB && kernel < 1024,
        "a on DRAM {} -> {} MiB (≥ 44 wanted), {recalled} B recalled (≥ 40 MiB), \
         {kernel} pages promoted by the kernel (< 1024):\n{}",
        before.0,
        after.0,
        g.output
    );
}

/// The promotion assist needs lower-tier use: two tenants alike, each
/// under its target with 80 of its 96 MiB on the lower tier. `warm` runs a
/// 16 MiB hot set from there; `cold`'s lower-tier pages are its cold bulk
/// (one access a second over 1 MiB). With the kernel's hot threshold at
/// 0 ms it promotes nothing and recall is off, so neither container is
/// promoted for. `warm`'s hint faults on the lower tier get it assisted
/// (the baseline, same boot: the wait has passed for both); `cold`, whose
/// lower tier draws (almost) no hint faults, stays unassisted for ten more
/// cycles.
#[test]
fn assist_waits_for_hint_faults_on_the_lower_tier() {
    let g = boot(
        r#"
. /tests/lib.sh
damon_stat_off
echo +cpuset > $CG/cgroup.subtree_control
mkcg tenants.slice/warm
echo +cpuset > $CG/tenants.slice/cgroup.subtree_control
echo 0 > /proc/sys/kernel/numa_balancing
on_lower tenants.slice/warm 90 hotset --size-mib 96 --hot-mib 16 --hot-offset-mib 0 --report-s 60 || exit 1
on_lower tenants.slice/cold 90 hotset --size-mib 96 --hot-mib 1 --rate 1 --report-s 60 || exit 1
# Each on DRAM: 16 MiB more of its bulk, touched once (allocated by a
# second process after cpuset.mems opened up).
for t in warm cold; do start_in tenants.slice/$t tierload hotset --size-mib 16 --hot-mib 1 --rate 1 --report-s 60 > /dev/null; done
wait_usage tenants.slice/warm 110 90 || exit 1
wait_usage tenants.slice/cold 110 90 || exit 1
emit_node tenants.slice/warm
emit_node tenants.slice/cold
NB=/sys/kernel/debug/sched/numa_balancing
[ -d $NB ] || mount -t debugfs none /sys/kernel/debug
echo 0 > $NB/hot_threshold_ms || { echo "FAIL: cannot write $NB/hot_threshold_ms"; exit 1; }
echo 1000 > $NB/scan_period_max_ms || { echo "FAIL: cannot write $NB/scan_period_max_ms"; exit 1; }
printf '[daemon]\ninterval = "1s"\nassist_after = "2s"\nrecall = false\n[limits]\npromote_hot_threshold = "0"\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
i=0
until grep 'tierd promotes its hot lower-tier regions' /tmp/tierd.log | grep -q 'container=tenants.slice/warm'; do
    i=$((i + 1)); [ $i -gt 600 ] && { echo "FAIL: warm was not assisted in 120 s"; break; }
    sleep 0.2
done
for k in 1 2 3 4 5 6 7 8 9 10; do next_cycle || break; done
emit_status
emit_node tenants.slice/warm
emit_node tenants.slice/cold
kill -TERM $TIERD; wait $TIERD
echo "ASSISTED $(grep 'tierd promotes its hot lower-tier regions' /tmp/tierd.log | grep -o 'container=tenants.slice/[a-z]*' | sort -u | tr '\n' ' ')"
echo "TIERD_LOG"; grep -v DEBUG /tmp/tierd.log | tail -20
"#,
        400,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    assert!(!g.output.contains("FAIL:"), "{}", g.output);
    for t in ["tenants.slice/warm", "tenants.slice/cold"] {
        let n = nodes(&g.output, t);
        assert!(
            n[0].1 >= 72 && n[0].0 >= 12,
            "{t} should start with its bulk on node 1 and 16 MiB on node 0: {n:?}\n{}",
            g.output
        );
    }
    let assisted = field(&g.output, "ASSISTED");
    eprintln!(
        "assisted: {assisted}; MiB on node 0/1: warm {:?}, cold {:?}",
        nodes(&g.output, "tenants.slice/warm"),
        nodes(&g.output, "tenants.slice/cold")
    );
    assert!(
        assisted.contains("container=tenants.slice/warm"),
        "warm, whose hot set runs from the lower tier, was not assisted: {assisted}\n{}",
        g.output
    );
    assert!(
        !assisted.contains("container=tenants.slice/cold"),
        "cold, whose lower tier is its cold bulk, was assisted: {assisted}\n{}",
        g.output
    );
    // Both were under their targets all along: the wait had passed for cold.
    let st = statuses(&g.output);
    let last = st.last().expect("no status");
    for t in ["tenants.slice/warm", "tenants.slice/cold"] {
        let c = container(last, t).expect("container in status");
        assert!(
            c.fast_bytes + band(c.target_bytes) < c.target_bytes,
            "{t} is not under target − band: {c:?}"
        );
    }
}

/// The hot swap: a container at its target (capped at `local_high` = 96
/// MiB) holds 96 MiB of idle pages on DRAM while its 48 MiB hot set runs
/// from the lower tier. With the kernel's hot threshold at 0 ms the kernel
/// promotes nothing, and recall serves only containers under their target:
/// with `hot_swap = false` the hot set stays below (the baseline, same
/// boot). With it, the probe's hint-fault latencies mark the hot pages,
/// tierd demotes idle pages (untouched for `limits.hot_swap_idle`) and recall moves
/// the hot ones into the room: the hot set reaches DRAM while the
/// container's DRAM stays at its target. The swap's window is off
/// (`hot_swap_window = "0"`): the hot set took 47–56 s to come up, close
/// to the default 60 s window, and the window is the policy tests' to show.
#[test]
fn a_container_at_its_target_swaps_idle_pages_for_its_hot_lower_tier_pages() {
    let g = boot(
        r#"
. /tests/lib.sh
echo 0 > /proc/sys/kernel/numa_balancing
# Two leaves of one container (a cpuset.mems change migrates the pages
# already there, so each process gets its own): 96 MiB touched once on
# DRAM (a 1 MiB hot set), a 48 MiB hot set on the lower tier.
mkcg tenants.slice/a/idle; mkcg tenants.slice/a/hot
echo +cpuset > $CG/cgroup.subtree_control
echo +cpuset > $CG/tenants.slice/cgroup.subtree_control
echo +cpuset > $CG/tenants.slice/a/cgroup.subtree_control
echo 0 > $CG/tenants.slice/a/idle/cpuset.mems
echo 1 > $CG/tenants.slice/a/hot/cpuset.mems
start_in tenants.slice/a/idle tierload hotset --size-mib 96 --hot-mib 1 --report-s 0 > /dev/null
wait_usage tenants.slice/a/idle 96 60 || exit 1
start_log tenants.slice/a/hot /tmp/a.log tierload hotset --size-mib 48 --hot-mib 48 --report-s 1 > /dev/null
wait_usage tenants.slice/a/hot 48 60 || exit 1
echo 0-1 > $CG/tenants.slice/a/hot/cpuset.mems
emit_node tenants.slice/a
NB=/sys/kernel/debug/sched/numa_balancing
[ -d $NB ] || mount -t debugfs none /sys/kernel/debug
echo 0 > $NB/hot_threshold_ms || { echo "FAIL: cannot write $NB/hot_threshold_ms"; exit 1; }
echo 1000 > $NB/scan_period_max_ms || { echo "FAIL: cannot write $NB/scan_period_max_ms"; exit 1; }
config() {
    printf '[daemon]\ninterval = "1s"\nassist_after = "0s"\n[limits]\nhot_swap = %s\nhot_swap_window = "0"\npromote_hot_threshold = "0"\n[hotness]\nhot_latency = "250ms"\n[[policy]]\nmatch = "tenants.slice/*"\nlocal_high = "96MiB"\n' $1 > /tmp/t.toml
}
hot() { grep '^{' /tmp/a.log | tail -1 | grep -o '"hot_residency":[0-9.e-]*' | cut -d: -f2; }
# Baseline: no swap. Known-hot pages pile up (hint faults within 250 ms of
# each scan); 20 full cycles, and the hot set must still be below.
config false
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
for i in $(seq 20); do next_cycle || exit 1; done
echo "BASELINE_HOT $(hot)"
emit_node tenants.slice/a
kill -TERM $TIERD; wait $TIERD
# The swap: until the hot set is 90% on DRAM, 120 s at most.
config true
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
i=0
until hot_at_least 0.9 1; do
    i=$((i + 1)); [ $i -gt 120 ] && break
    sleep 1
done
echo "SWAP_SECONDS $i"
next_cycle || exit 1
echo "SWAP_HOT $(hot)"
emit_node tenants.slice/a
emit_status
kill -TERM $TIERD; wait $TIERD
echo "TIERD_LOG"; grep -v DEBUG /tmp/tierd.log | tail -20
"#,
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let hot = |k: &str| -> f64 { field(&g.output, k).parse().unwrap_or(-1.0) };
    let n = nodes(&g.output, "tenants.slice/a");
    assert_eq!(n.len(), 3, "{n:?}\n{}", g.output);
    assert!(
        n[0].0 >= 90 && n[0].1 >= 44,
        "the idle pages should start on DRAM and the hot set below: {n:?}\n{}",
        g.output
    );
    let recalled = recalled_bytes(&g.output, "tenants.slice/a");
    let secs = field(&g.output, "SWAP_SECONDS");
    assert!(
        (0.0..0.3).contains(&hot("BASELINE_HOT")),
        "without the hot swap the hot set should stay on the lower tier (hot residency {}; DRAM {:?}):\n{}",
        hot("BASELINE_HOT"),
        n,
        g.output
    );
    assert!(
        hot("SWAP_HOT") >= 0.9 && recalled >= 40 * MIB,
        "with it the hot set should come to DRAM: hot residency {} after {secs} s, {recalled} B recalled (≥ 40 MiB):\n{}",
        hot("SWAP_HOT"),
        g.output
    );
    // Within its share: DRAM at most its target (96 MiB) and band.
    assert!(
        n[2].0 <= 96 + 16 + 4,
        "DRAM {} MiB after the swap, above target + band:\n{}",
        n[2].0,
        g.output
    );
    eprintln!(
        "hot swap: hot residency {} (baseline {}) after {secs} s, {} MiB recalled, DRAM {} MiB",
        hot("SWAP_HOT"),
        hot("BASELINE_HOT"),
        recalled / MIB,
        n[2].0
    );
}

/// A container above its target loses its cold pages first (cold-first
/// demotion through move_pages on DAMON's idle regions); its hot set stays
/// in DRAM.
#[test]
fn cold_container_above_target_loses_cold_pages_not_its_hot_set() {
    loses_cold_pages_not_hot_set("move_pages");
}

/// As above with `mover = "damos"` (DAMOS `migrate_cold`, memcg filter,
/// quota = the demotion budget).
#[test]
fn damos_mover_demotes_cold_pages_not_the_hot_set() {
    loses_cold_pages_not_hot_set("damos");
}

fn loses_cold_pages_not_hot_set(mover: &str) {
    let script = r#"
. /tests/lib.sh
mkcg tenants.slice/a
start_log tenants.slice/a /tmp/a.log tierload hotset --size-mib 320 --hot-mib 40 --hot-offset-mib 200 --report-s 1 > /dev/null
wait_usage tenants.slice/a 310 90 || exit 1
emit_node tenants.slice/a
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
cold_demotion = true
cold_min_age = "3s"
mover = "MOVER"
[[policy]]
match = "tenants.slice/*"
local_high = "40%"
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
for i in $(seq 40); do emit_status; emit_node tenants.slice/a; emit_report a /tmp/a.log; sleep 1; done
kill -TERM $TIERD; wait $TIERD
echo "TIERD_LOG"; grep -v DEBUG /tmp/tierd.log | tail -20
"#
    .replace("MOVER", mover);
    let g = boot(&script, 600);
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let st = statuses(&g.output);
    let c = container(st.last().expect("no status"), "tenants.slice/a").unwrap();
    // Brought to its target (40% of 320 MiB = 128 MiB) ...
    assert!(
        c.fast_bytes.abs_diff(c.target_bytes) <= 2 * band(c.target_bytes),
        "{c:?}\n{}",
        g.output
    );
    // ... mostly by tierd's own cold-first demotion ...
    let cold_moved = c
        .moved_bytes
        .get(&format!("demote/{mover}"))
        .copied()
        .unwrap_or(0);
    assert!(
        cold_moved >= 100 * MIB,
        "cold-first demotion moved {cold_moved} B: {c:?}\n{}",
        g.output
    );
    // ... and the 40 MiB hot set never left DRAM for long.
    let reps = reports(&g.output, "a");
    let res: Vec<f64> = reps
        .iter()
        .filter_map(|(_, r)| r["hot_residency"].as_f64())
        .collect();
    assert!(res.len() >= 30, "{}", g.output);
    let last10 = &res[res.len() - 10..];
    assert!(
        last10.iter().all(|&r| r >= 0.95),
        "hot set residency fell: {res:?}\n{}",
        g.output
    );
    // DAMON saw the hot set: about 40 MiB (sampling is approximate).
    let hot = c.hot_fast_bytes.unwrap_or(0) + c.hot_lower_bytes.unwrap_or(0);
    assert!(
        (20 * MIB..=120 * MIB).contains(&hot),
        "hot bytes {hot}: {c:?}"
    );
}

/// Guest script start shared by the DAMON tests: one 64 MiB tenant (16 MiB
/// hot) and a config in /tmp/t.toml that manages it with DAMON heat at a 1 s
/// interval. `D` is the DAMON sysfs kdamonds directory.
const DAMON_TENANT: &str = r#"
. /tests/lib.sh
D=/sys/kernel/mm/damon/admin/kdamonds
mkcg tenants.slice/a
start_in tenants.slice/a tierload hotset --size-mib 64 --hot-mib 16 --report-s 60 > /dev/null
wait_usage tenants.slice/a 60 60 || exit 1
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
[hotness]
source = "damon"
[[policy]]
match = "tenants.slice/*"
EOF
"#;

/// Issue 12, DAMON EBUSY injected: tierd's first 10 DAMON sysfs writes fail
/// with EBUSY (the test-only fault point `TIERD_TEST_DAMON_EBUSY`; the
/// interface answers so when another user holds its lock, which it takes
/// with `mutex_trylock` in mm/damon/sysfs.c). The claim's `nr_kdamonds`
/// write is retried 10 times (counted in `tierd_damon_busy_retries_total`)
/// and then given up: tierd keeps cycling on usage demand, says why in
/// `/status`, claims DAMON at its next retry, sees the hot set, and removes
/// its kdamond at exit.
#[test]
fn damon_ebusy_is_retried_then_survived_and_damon_comes_back() {
    let g = boot(
        &[
            DAMON_TENANT,
            r#"TIERD_TEST_DAMON_EBUSY=10 tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
T=$!
wait_http 30 || exit 1
wait_cycles 3 || exit 1
echo "PHASE busy"; emit_status; kdamonds
# DAMON is claimed again at the retry (30 cycles): poll to a deadline.
i=0
until tierctl status --json | grep -q '"hot_fast_bytes":[1-9]'; do
    i=$((i + 1)); [ $i -gt 600 ] && break; sleep 0.2
done
echo "PHASE back"; emit_status; kdamonds
echo "RETRIES $(tierctl metrics | awk '/^tierd_damon_busy_retries_total/ {print $2}')"
kill -0 $T && echo ALIVE
kill -TERM $T; wait $T; echo "EXIT $?"
echo "PHASE stopped"; kdamonds
"#,
        ]
        .concat(),
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let after = |phase: &str| -> String {
        g.output
            .lines()
            .skip_while(|l| *l != format!("PHASE {phase}"))
            .find(|l| l.starts_with("KDAMONDS"))
            .unwrap_or_else(|| panic!("no KDAMONDS after {phase}:\n{}", g.output))
            .to_string()
    };
    let st = statuses(&g.output);
    let (busy, back) = (&st[0], st.last().unwrap());
    assert!(
        busy.hotness.starts_with("usage (")
            && busy.hotness.contains("nr_kdamonds")
            && busy.hotness.contains("busy"),
        "status should say DAMON is off because the interface was busy: {}",
        busy.hotness
    );
    assert_eq!(after("busy"), "KDAMONDS 0", "{}", g.output);
    assert_eq!(
        back.hotness, "damon",
        "DAMON not claimed again: {back:?}\n{}",
        g.output
    );
    assert!(
        back.cycles > busy.cycles
            && back
                .containers
                .iter()
                .any(|c| c.hot_fast_bytes.unwrap_or(0) > 0),
        "no hot set seen after the retry: {back:?}\n{}",
        g.output
    );
    assert_eq!(after("back"), "KDAMONDS 1 on", "{}", g.output);
    let retries: f64 = g
        .output
        .lines()
        .find_map(|l| l.strip_prefix("RETRIES ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no RETRIES:\n{}", g.output));
    assert_eq!(retries, 9.0, "{}", g.output);
    assert!(g.output.lines().any(|l| l == "ALIVE"), "{}", g.output);
    assert!(g.output.lines().any(|l| l == "EXIT 0"), "{}", g.output);
    assert_eq!(after("stopped"), "KDAMONDS 0", "{}", g.output);
    assert!(!g.output.contains("panicked"), "{}", g.output);
}

/// `promotion = "tierd"` finds the pages to promote with DAMON. While DAMON
/// is unavailable (DAMON_STAT's exclusive kdamond on 7.x, someone else's
/// kdamond on 6.12) nothing would promote at all; tierd turns the kernel's
/// NUMA-balancing promotion on instead (mode 2), says so in `/status`, and
/// the hot set on the lower tier is promoted. Once DAMON is free, tierd
/// claims it within its retry (30 cycles), turns the kernel's promotion off
/// again and promotes itself; at SIGTERM the host's value is back.
#[test]
fn tierd_promotion_falls_back_to_the_kernels_while_damon_is_unavailable() {
    let g = boot(
        r#"
. /tests/lib.sh
S=/sys/module/damon_stat/parameters/enabled
D=/sys/kernel/mm/damon/admin/kdamonds
if [ -f $S ] && [ "$(cat $S)" = Y ]; then
    BLOCKER=damon_stat
else
    BLOCKER=foreign
    echo 1 > $D/nr_kdamonds
    echo 1 > $D/0/contexts/nr_contexts
    echo paddr > $D/0/contexts/0/operations
fi
echo "BLOCKER $BLOCKER"
hot_set_on_node1
NB=/proc/sys/kernel/numa_balancing
# The host's own value, which tierd must give back whatever it switched.
echo 1 > $NB
echo "NB_BEFORE $(cat $NB)"
# The kernel's scan period grows to 60 s after a few passes over a task
# (docs/NOTES.md "NUMA balancing's scan period"); at 1 s every pass offers
# the hot set again and the wait below is bounded by the promotion, not by
# where the period stands.
DBG=/sys/kernel/debug/sched/numa_balancing
[ -d $DBG ] || mount -t debugfs none /sys/kernel/debug
echo 1000 > $DBG/scan_period_max_ms
printf '[daemon]\ninterval = "1s"\npromotion = "tierd"\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
wait_cycles 2 || exit 1
echo "NB_FALLBACK $(cat $NB)"
emit_status
wait_fast tenants.slice/a 40 120
emit_node tenants.slice/a
if [ $BLOCKER = damon_stat ]; then echo N > $S; else echo 0 > $D/nr_kdamonds; fi
i=0
until [ "$(cat $NB)" = 0 ]; do
    i=$((i + 1)); [ $i -gt 90 ] && break
    sleep 1
done
echo "NB_CLAIMED $(cat $NB)"
next_cycle || exit 1
emit_status
kill -TERM $TIERD; wait $TIERD
echo "NB_AFTER $(cat $NB)"
echo "TIERD_LOG"; grep -Ei 'promot|DAMON' /tmp/tierd.log | grep -v DEBUG | tail -8
"#,
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let line = |key: &str| field(&g.output, key);
    assert_eq!(line("NB_BEFORE"), "1", "{}", g.output);
    assert_eq!(
        line("NB_FALLBACK"),
        "2",
        "the kernel's promotion was not turned on while DAMON was unavailable:\n{}",
        g.output
    );
    let st = statuses(&g.output);
    assert_eq!(st.len(), 2, "{}", g.output);
    assert!(
        st[0].promotion == "kernel" && st[0].hotness.starts_with("usage ("),
        "status while DAMON is held: promotion {:?}, hotness {:?}",
        st[0].promotion,
        st[0].hotness
    );
    let n = nodes(&g.output, "tenants.slice/a");
    assert!(
        n.len() == 2 && n[0].0 < 8 && n[1].0 >= 40,
        "the hot set (48 MiB) on DRAM before tierd and after the kernel's promotion, MiB: {n:?}\n{}",
        g.output
    );
    assert_eq!(
        line("NB_CLAIMED"),
        "0",
        "DAMON was freed but tierd did not take promotion back:\n{}",
        g.output
    );
    assert!(
        st[1].promotion == "tierd" && st[1].hotness == "damon",
        "status once DAMON is claimed: promotion {:?}, hotness {:?}",
        st[1].promotion,
        st[1].hotness
    );
    assert_eq!(
        line("NB_AFTER"),
        "1",
        "the host's kernel.numa_balancing was not restored:\n{}",
        g.output
    );
}

/// tierd's kdamonds are gone after it stops; after `kill -9` they keep
/// running, and a restarted tierd adopts them (no second set). A kdamond
/// tierd did not create is never touched: tierd runs without DAMON and says
/// why. On a kernel whose DAMON_STAT runs (7.x), tierd first runs beside
/// it: DAMON off with the reason in `/status` and one log line, DAMON_STAT
/// left on; the script then turns DAMON_STAT off, as an operator would.
#[test]
fn kdamonds_removed_on_stop_adopted_after_kill9_foreign_untouched() {
    let g = boot(
        &[
            DAMON_TENANT,
            // Linux 6.17+ (7.x: on from boot): DAMON_STAT's exclusive
            // kdamond. tierd must say why DAMON is off, run on usage
            // demand, and leave it running; the operator then stops it.
            r#"S=/sys/module/damon_stat/parameters/enabled
if [ -f $S ] && [ "$(cat $S)" = Y ]; then
    tierd --config /tmp/t.toml run > /tmp/tierd0.log 2>&1 &
    T=$!
    wait_http 30 || exit 1
    wait_cycles 2
    echo "PHASE damon_stat"; emit_status
    kill -TERM $T; wait $T
    echo "DAMON_STAT_AFTER $(cat $S)"
    grep -c damon_stat /tmp/tierd0.log | sed 's/^/DAMON_STAT_LOGGED /'
    echo N > $S
else
    echo "NO_DAMON_STAT"
fi
tierd --config /tmp/t.toml run > /tmp/tierd1.log 2>&1 &
T=$!
wait_http 30 || exit 1
wait_status '"damon_targets":1' || exit 1
echo "PHASE running"; kdamonds; emit_status
kill -9 $T; wait $T
echo "PHASE killed"; kdamonds
tierd --config /tmp/t.toml run > /tmp/tierd2.log 2>&1 &
T=$!
wait_http 30 || exit 1
wait_status '"damon_targets":1' || exit 1
echo "PHASE restarted"; kdamonds; emit_status
grep -c adopted /tmp/tierd2.log | sed 's/^/ADOPTED /'
kill -TERM $T; wait $T
echo "PHASE stopped"; kdamonds
# Someone else's kdamond (configured, off): tierd must leave it alone.
echo 1 > $D/nr_kdamonds
echo 1 > $D/0/contexts/nr_contexts
echo paddr > $D/0/contexts/0/operations
tierd --config /tmp/t.toml run > /tmp/tierd3.log 2>&1 &
T=$!
wait_http 30 || exit 1
wait_status 'kdamonds/0' || exit 1
echo "PHASE foreign"; kdamonds; emit_status
echo "FOREIGN_OPS $(cat $D/0/contexts/0/operations)"
kill -TERM $T; wait $T
echo "PHASE foreign-stopped"; kdamonds
echo "FOREIGN_OPS $(cat $D/0/contexts/0/operations)"
grep -i damon /tmp/tierd3.log | head -3
"#,
        ]
        .concat(),
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let st = statuses(&g.output);
    // Which kernel this is decides the first phase; each path is checked.
    let st = if g.output.contains("NO_DAMON_STAT") {
        assert!(!g.output.contains("PHASE damon_stat"), "{}", g.output);
        st
    } else {
        let held = &st[0];
        assert!(
            held.hotness.starts_with("usage (") && held.hotness.contains("damon_stat"),
            "status should say DAMON_STAT holds DAMON: {}",
            held.hotness
        );
        assert!(
            g.output.contains("DAMON_STAT_AFTER Y"),
            "tierd stopped DAMON_STAT:\n{}",
            g.output
        );
        // Said once when it gave up, not once per cycle.
        assert!(g.output.contains("DAMON_STAT_LOGGED 1"), "{}", g.output);
        st[1..].to_vec()
    };
    let after = |phase: &str| -> String {
        let mut lines = g
            .output
            .lines()
            .skip_while(|l| *l != format!("PHASE {phase}"));
        lines
            .find(|l| l.starts_with("KDAMONDS"))
            .unwrap_or_else(|| panic!("no KDAMONDS after {phase}:\n{}", g.output))
            .to_string()
    };
    assert_eq!(after("running"), "KDAMONDS 1 on", "{}", g.output);
    assert_eq!(after("killed"), "KDAMONDS 1 on", "{}", g.output);
    assert_eq!(after("restarted"), "KDAMONDS 1 on", "{}", g.output);
    assert!(g.output.contains("ADOPTED 1"), "{}", g.output);
    assert_eq!(after("stopped"), "KDAMONDS 0", "{}", g.output);
    assert_eq!(after("foreign"), "KDAMONDS 1 off", "{}", g.output);
    assert_eq!(after("foreign-stopped"), "KDAMONDS 1 off", "{}", g.output);
    assert_eq!(
        g.output.matches("FOREIGN_OPS paddr").count(),
        2,
        "the foreign kdamond was modified:\n{}",
        g.output
    );
    assert!(
        st[0].hotness == "damon" && st[0].damon_targets == 1,
        "{:?}",
        st[0]
    );
    let foreign = st.last().unwrap();
    assert!(
        foreign.hotness.starts_with("usage (") && foreign.hotness.contains("kdamonds/0"),
        "status should say why DAMON is off: {}",
        foreign.hotness
    );
}

#[test]
fn a_fast_node_the_kernel_gave_up_on_is_revived_and_not_left_so() {
    // The noisy-neighbour demo scenario under tierd's shipped defaults: a
    // steady service with a local_low guarantee (memory.min), then an
    // all-hot neighbour. kswapd finds nothing to reclaim on node 0 and the
    // kernel marks the node unreclaimable (16 kswapd runs in a row that
    // reclaimed nothing; the script waits for it, to a deadline). In the
    // demo the neighbour's pages are too young for MGLRU to evict, which
    // took from seconds to over 480 s to starve kswapd under emulation
    // (docs/NOTES.md "Session 65"); here the neighbour locks its memory
    // (`tierload --mlock`: unevictable, still promoted by NUMA balancing),
    // so nothing on node 0 is reclaimable once it has filled. Only a
    // failed promotion wakes kswapd there (an allocation falls back to
    // node 1 without waking it), so tierd keeps no headroom free of the
    // kernel's promotion (`headroom`) and does not close that promotion
    // once the plan is steady (`steady_promote_rate = "0"`): with both at
    // their defaults node 0 kept 54 MiB free, promotion stopped, and kswapd
    // never ran for minutes. Before
    // the fix kernel tiering stayed dead after tierd exited: no kswapd
    // demotion, no promotion, for the rest of the boot. tierd must say so
    // while it runs and leave the node reclaimable when it stops. The
    // kernel's hot-page threshold stays the kernel's: this plan never
    // settles, and with the threshold held node 0 may never be given up
    // (docs/NOTES.md "Session 62"). Nor is the noisy tenant an arrival
    // tierd reacts to: its cgroup is made before tierd starts and the
    // arrival window is off, since cycles that run as it allocates make
    // room that kswapd then need not fail to find (docs/NOTES.md
    // "Session 63").
    let g = boot(
        r#"
. /tests/lib.sh
unr() { awk '/^Node 0,/ {n = 1} /^Node [1-9]/ {n = 0}
    n && $1 == "node_unreclaimable:" && $2 == 1 {v = 1} END {print v + 0}' /proc/zoneinfo; }
cat > /tmp/t.toml <<'EOF'
[daemon]
headroom = "4MiB"
[limits]
promote_hot_threshold = "0"
arrival_window = "0"
steady_promote_rate = "0"
[[policy]]
name = "steady"
match = "tenants.slice/steady"
local_low = "350MiB"
[[policy]]
name = "others"
match = "tenants.slice/*"
EOF
mkcg tenants.slice/noisy
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
echo "UNR start $(unr)"
mkcg tenants.slice/steady
S=$(start_in tenants.slice/steady tierload hotset --size-mib 400 --hot-mib 200 --report-s 60)
wait_usage tenants.slice/steady 395 90 || exit 1
N=$(start_in tenants.slice/noisy tierload hotset --size-mib 800 --hot-mib 800 --mlock --report-s 60)
# Until the kernel gives node 0 up, to a deadline; tierd is stopped while
# it is. One sample a second, printed on one line.
i=0
SAMPLES=""
while :; do
    i=$((i + 1)); U=$(unr); SAMPLES="$SAMPLES$U"
    [ "$U" = 1 ] && [ "$(grep -c 'stopped reclaiming fast node' /tmp/tierd.log)" -gt 0 ] && break
    [ $i -ge 480 ] && break
    sleep 1
done
echo "UNR samples $SAMPLES"
# The noisy tenant leaves first: its locked memory, promoted while kswapd
# finds nothing to take, could have the node given up again before tierd
# exits. Freed pages do not revive a node; only a reclaim that frees one
# there does.
kill $N
wait $N
echo "UNR noisy-gone $(unr)"
# Node 0's kswapd runs from here on (the vmscan:mm_vmscan_kswapd_wake
# tracepoint fires before each balance_pgdat()), to tell a node left given
# up (kswapd is never woken for it) from one revived and given up again by
# the kernel. Context switches of kswapd0 undercount: it runs again without
# sleeping while the node is unbalanced.
TR=/sys/kernel/tracing
[ -e $TR/trace ] || mount -t tracefs nodev $TR
echo 'nid == 0' > $TR/events/vmscan/mm_vmscan_kswapd_wake/filter
echo > $TR/trace
echo 1 > $TR/events/vmscan/mm_vmscan_kswapd_wake/enable
runs() { grep -c 'mm_vmscan_kswapd_wake:' $TR/trace; }
echo "RUNS pre-stop $(runs)"
kill -TERM $TIERD
wait $TIERD
echo "UNR stopped $(unr)"
echo "RUNS stopped $(runs)"
kill $S
wait $S
echo "UNR end $(unr)"
echo "RUNS end $(runs)"
echo "GAVEUP $(grep -c 'stopped reclaiming fast node' /tmp/tierd.log)"
echo "REVIVED $(grep -c 'kswapd revived on fast node 0 before exit' /tmp/tierd.log)"
grep -E 'fast node|revive' /tmp/tierd.log | cut -c1-240 | sed 's/^/LOG /'
awk '/^Node 0,/ {n = 1} /^Node [1-9]/ {n = 0} n && ($1 == "pages" || $1 == "min" || $1 == "low" || $1 == "high" || $1 == "node_unreclaimable:")' /proc/zoneinfo | tr -s ' ' | tr '\n' ' ' | sed 's/^/ZONE0 /'; echo
"#,
        900,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let o = &g.output;
    let flag = |tag: &str| {
        o.lines()
            .find_map(|l| l.strip_prefix(&format!("UNR {tag} ")))
            .unwrap_or_else(|| panic!("no UNR {tag} line:\n{o}"))
            .trim()
            .to_string()
    };
    assert_eq!(flag("start"), "0", "node 0 given up before the test:\n{o}");
    let given_up = |tag: &str| {
        o.lines()
            .find_map(|l| l.strip_prefix(&format!("{tag} ")))
            .is_some_and(|n| n.trim() != "0")
    };
    let samples = flag("samples");
    eprintln!("node 0 unreclaimable under tierd, 1 s samples: {samples}");
    assert!(
        given_up("GAVEUP") && samples.contains('1'),
        "the kernel never gave up on node 0 in this run: the setup did not reproduce the \
         condition this test is about\n{o}"
    );
    assert_eq!(
        flag("noisy-gone"),
        "1",
        "node 0 was reclaimable again before tierd stopped: nothing left for tierd to revive\n{o}"
    );
    assert!(
        given_up("REVIVED"),
        "tierd did not say it revived node 0:\n{o}"
    );
    // Read after tierd stopped, node 0 is reclaimable, or its kswapd ran
    // at least 16 times since (the kernel never wakes kswapd for a node it
    // gave up, so those runs mean tierd's revival took). With
    // demotion off again (the guest's original setting) the kernel can
    // give the node up again by itself in those runs: anonymous memory has
    // nowhere to go (2 runs in 6, docs/NOTES.md "Session 65").
    let runs = |tag: &str| -> u64 {
        field(o, &format!("RUNS {tag}"))
            .parse()
            .unwrap_or_else(|_| {
                panic!("RUNS {tag}: no count of node 0's kswapd runs (tracefs):\n{o}")
            })
    };
    for tag in ["stopped", "end"] {
        let woken = runs(tag) - runs("pre-stop");
        eprintln!(
            "at {tag}: node 0 unreclaimable {}, its kswapd ran {woken} times since the stop",
            flag(tag)
        );
        assert!(
            flag(tag) == "0" || woken >= 16,
            "node 0 unreclaimable when read at {tag} and its kswapd ran only {woken} times \
             since tierd was told to stop: tierd left the node given up\n{o}"
        );
    }
}

/// Capacity that changes under tierd (CXL memory taken away and given
/// back), on the CXL Type-3 host whatever `$TIERD_LOWER` says (its memory
/// is onlined movable, so every block can go offline). A 120 MiB tenant is
/// held at half on DRAM; then every memory block of node 1 goes offline
/// (the kernel migrates the tenant's lower-tier pages to DRAM), and comes
/// back. tierd must see each change within a few intervals (log line,
/// `tierd_topology_changes_total`, node capacity), stop actuating while no
/// lower tier has memory (`tiered: false`: a memory.reclaim then would
/// reclaim, not demote), demote the tenant back to its target once the
/// memory is back, and report the CXL device behind node 1 throughout. The
/// tenant's workload keeps running.
#[test]
fn lower_tier_memory_offlined_and_onlined_is_planned_with() {
    let script = r#"
set -e
. /tests/lib.sh
mkcg tenants.slice/big
W=$(start_in tenants.slice/big tierload hotset --size-mib 120 --hot-mib 12 --report-s 60)
wait_usage tenants.slice/big 110 90
printf '[daemon]\ninterval = "1s"\n[[policy]]\nmatch = "tenants.slice/*"\nlocal_high = "50%%"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30
cap1() { tierctl metrics | awk '/^tierd_node_capacity_bytes/ && /node="1"/ { print int($2 / 1048576) }'; }
changes() { tierctl metrics | awk '/^tierd_topology_changes_total/ { print $2 + 0 }'; }
tiered() { tierctl status --json | grep -o '"tiered":[a-z]*' | cut -d: -f2; }
# phase NAME: one line with what the checks below read.
phase() { echo "PHASE $1 t=$(cut -d' ' -f1 /proc/uptime) cap1=$(cap1) changes=$(changes) tiered=$(tiered) n1=$(node_mib tenants.slice/big 1) alive=$(kill -0 $W && echo yes || echo no)"; }
# until_ok SECONDS CMD...: polls CMD every second to a deadline.
until_ok() { local n=$1 i=0; shift; until "$@"; do i=$((i + 1)); [ $i -gt $n ] && return 1; sleep 1; done; }
demoted() { [ "$(node_mib tenants.slice/big 1)" -ge 40 ]; }
until_ok 240 demoted || echo "WARN: demotion reached $(node_mib tenants.slice/big 1) MiB"
phase before
emit_status
BLOCKS=""
for b in /sys/devices/system/node/node1/memory[0-9]*; do BLOCKS="$BLOCKS ${b##*/}"; done
echo "BLOCKS $BLOCKS"
n=0
for b in $BLOCKS; do
    if echo offline > /sys/devices/system/memory/$b/state; then n=$((n + 1)); else echo "OFFLINE-FAILED $b"; fi
done
echo "OFFLINED $n"
gone() { [ "$(tiered)" = false ]; }
until_ok 60 gone || echo "WARN: still tiered"
phase gone
emit_status
for b in $BLOCKS; do echo online_movable > /sys/devices/system/memory/$b/state || echo "ONLINE-FAILED $b"; done
back() { [ "$(tiered)" = true ] && [ "$(node_mib tenants.slice/big 1)" -ge 40 ]; }
until_ok 240 back || echo "WARN: not back"
phase back
emit_status
tierctl status | grep '^node 1: CXL' | sed 's/^/TIERCTL /'
kill -TERM $TIERD; wait $TIERD; echo "TIERD-EXIT $?"
grep -E 'capacity changed|no lower memory tier|lower memory tier has memory again|CXL memory behind' /tmp/tierd.log | sed 's/^/LOG /'
"#;
    let g = boot_with(script, 900, |c| c.lower = testbed::LowerTier::Cxl);
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let phase = |name: &str| -> std::collections::HashMap<String, String> {
        field(&g.output, &format!("PHASE {name}"))
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let num = |m: &std::collections::HashMap<String, String>, k: &str| -> u64 {
        m[k].parse()
            .unwrap_or_else(|_| panic!("{k} in {m:?}:\n{}", g.output))
    };
    for l in g.output.lines().filter(|l| l.starts_with("PHASE")) {
        eprintln!("{l}");
    }
    let (before, gone, back) = (phase("before"), phase("gone"), phase("back"));
    let offlined: u64 = field(&g.output, "OFFLINED").parse().unwrap();
    let blocks = field(&g.output, "BLOCKS").split_whitespace().count() as u64;
    assert!(
        blocks >= 4 && offlined == blocks,
        "offlined {offlined} of {blocks} blocks:\n{}",
        g.output
    );
    // Before: the tenant demoted to its target, on a tiered host, no change yet.
    assert_eq!(
        (before["tiered"].as_str(), num(&before, "changes")),
        ("true", 0),
        "{}",
        g.output
    );
    assert!(
        num(&before, "cap1") >= 1000 && num(&before, "n1") >= 40,
        "{before:?}\n{}",
        g.output
    );
    // All of node 1 offline: seen, counted, no capacity, not actuating, the
    // tenant's pages on DRAM and its workload alive.
    assert_eq!(gone["tiered"], "false", "{}", g.output);
    assert!(
        num(&gone, "changes") >= 1 && num(&gone, "cap1") == 0,
        "{gone:?}\n{}",
        g.output
    );
    assert_eq!(
        (num(&gone, "n1"), gone["alive"].as_str()),
        (0, "yes"),
        "{}",
        g.output
    );
    // Back: tiered again with the whole capacity, and the tenant demoted to
    // its target again.
    assert_eq!(
        (back["tiered"].as_str(), back["alive"].as_str()),
        ("true", "yes"),
        "{}",
        g.output
    );
    assert!(
        num(&back, "changes") >= 2 && num(&back, "cap1") == num(&before, "cap1"),
        "{back:?}\n{}",
        g.output
    );
    assert!(
        num(&back, "n1") >= 40,
        "not demoted again after the memory came back: {back:?}\n{}",
        g.output
    );
    assert_eq!(field(&g.output, "TIERD-EXIT"), "0", "{}", g.output);
    assert!(
        g.output.contains("NUMA node capacity changed"),
        "{}",
        g.output
    );
    assert!(
        g.output
            .contains("no lower memory tier has memory any more"),
        "{}",
        g.output
    );
    assert!(
        g.output.contains("a lower memory tier has memory again"),
        "{}",
        g.output
    );
    // The device behind node 1, as tierctl prints it.
    let line = field(&g.output, "TIERCTL");
    assert!(
        line.contains("CXL region0 (ram, 1024 MiB) via dax0.0 on mem0 (serial 0x0"),
        "{line}"
    );
    // The device behind node 1, in /status at every phase.
    let st = statuses(&g.output);
    assert_eq!(st.len(), 3, "{}", g.output);
    for s in &st {
        let r = s
            .lower_devices
            .first()
            .unwrap_or_else(|| panic!("no CXL device in /status: {s:?}"));
        assert_eq!(
            (r.node, r.name.as_str(), r.memdevs.len()),
            (1, "region0", 1),
            "{s:?}"
        );
        assert_eq!(r.memdevs[0].name, "mem0", "{s:?}");
    }
}

/// `file_first`: two tenants alike (64 MiB of cold anonymous memory with a
/// 4 MiB hot set, and a 64 MiB file on an ext2 file system they read over
/// and over: hot page cache), each held at half its usage on DRAM;
/// `tenants.slice/ff` has `file_first = true`, `tenants.slice/lru` the
/// default. ff's demotion must take its file pages and leave its anonymous
/// memory on DRAM; lru, the baseline in the same boot, shows what LRU order
/// takes instead.
#[test]
fn file_first_demotes_page_cache_before_anonymous_memory() {
    let script = r#"
set -e
. /tests/lib.sh
[ -e /dev/loop-control ] || insmod /lib/modules/$(uname -r)/loop.ko
dd if=/dev/zero of=/tmp/fs.img bs=1M count=0 seek=200 2>/dev/null
LOOP=$(losetup -f)
losetup "$LOOP" /tmp/fs.img
mke2fs -q "$LOOP"
mkdir -p /mnt/fs
mount -t ext2 "$LOOP" /mnt/fs
[ -e /sys/kernel/debug/lru_gen ] || mount -t debugfs none /sys/kernel/debug
LG=/sys/kernel/debug/lru_gen
# fa TENANT: anon N0, anon N1, file N0, file N1 in MiB.
fa() {
    awk '$1 == "anon" || $1 == "file" { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[$1 kv[1]] = kv[2] } }
        END { printf "%d %d %d %d\n", v["anonN0"] / 1048576, v["anonN1"] / 1048576, v["fileN0"] / 1048576, v["fileN1"] / 1048576 }' \
        "$CG/tenants.slice/$1/memory.numa_stat"
}
# gens TENANT: the tenant's MGLRU generations on node 0, oldest first, as
# seq:anon_pages/file_pages.
gens() {
    awk -v p="/tenants.slice/$1" '$1 == "memcg" { m = ($3 == p) } m && $1 == "node" { n = $2 }
        m && n == 0 && $1 ~ /^[0-9]+$/ && NF >= 4 { printf "%s:%s/%s ", $1, $3, $4 } END { print "" }' $LG
}
# age TENANT: one forced MGLRU aging of the tenant's node-0 lruvec
# (Documentation/admin-guide/mm/multigen_lru.rst: `+ memcg_id node_id
# max_gen_nr can_swap force_scan`).
age() {
    local id max
    id=$(awk -v p="/tenants.slice/$1" '$1 == "memcg" && $3 == p { print $2 }' $LG)
    max=$(awk -v p="/tenants.slice/$1" '$1 == "memcg" { m = ($3 == p) } m && $1 == "node" { n = $2 }
        m && n == 0 && $1 ~ /^[0-9]+$/ { g = $1 } END { print g }' $LG)
    echo "+ $id 0 $max 1 1" > $LG
}
for t in ff lru; do
    mkcg tenants.slice/$t
    start_in tenants.slice/$t tierload hotset --size-mib 64 --hot-mib 4 --report-s 60 > /dev/null
done
# All of the anonymous memory touched (usage can pass 60 MiB before the
# pages are counted per node), to a deadline.
for t in ff lru; do
    i=0
    until [ "$(fa $t | cut -d' ' -f1)" -ge 60 ]; do
        i=$((i + 1)); [ $i -gt 600 ] && { echo "WARN: $t's anon not on DRAM: $(fa $t)"; break; }; sleep 0.2
    done
done
# MGLRU places new page cache in the oldest generation of its type and
# anon one below the youngest, and evicts the older type first (mm/vmscan.c
# `lru_gen_add_folio`, `isolate_folios`). Left so, a tenant's cold anon is
# younger than its hot page cache and LRU order takes the page cache: the
# baseline would not tell file_first apart (a CI run lost 44 MiB of file
# and 20 of anon). Three agings first leave the cold anon in the oldest
# generation (the hot set moves to the youngest), so the page cache
# written next lands in a younger one.
for t in ff lru; do age $t; age $t; age $t; done
for t in ff lru; do
    # Written from inside the tenant: its page cache is charged to it.
    sh -c "echo 0 > $CG/tenants.slice/$t/cgroup.procs; dd if=/dev/zero of=/mnt/fs/$t bs=1M count=64 2>/dev/null; sync"
    start_in tenants.slice/$t sh -c "while true; do cat /mnt/fs/$t > /dev/null; done" > /dev/null
done
wait_usage tenants.slice/ff 120 90
wait_usage tenants.slice/lru 120 90
echo "GENS ff $(gens ff)"
echo "GENS lru $(gens lru)"
echo "FA-BEFORE ff $(fa ff)"
echo "FA-BEFORE lru $(fa lru)"
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
[[policy]]
match = "tenants.slice/ff"
local_high = "50%"
file_first = true
[[policy]]
match = "tenants.slice/lru"
local_high = "50%"
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30
# Both held at half (± the 16 MiB band) on DRAM, to a deadline.
held() {
    local t
    for t in ff lru; do
        [ $(( $(node_mib tenants.slice/$t 0) * 2 )) -le $(( $(usage_mib tenants.slice/$t) + 32 )) ] || return 1
    done
}
i=0
until held; do i=$((i + 1)); [ $i -gt 180 ] && { echo "WARN: not held"; break; }; sleep 1; done
echo "HELD after $i s"
sleep 5
echo "FA ff $(fa ff)"
echo "FA lru $(fa lru)"
emit_status
kill -TERM $TIERD; wait $TIERD; echo "TIERD-EXIT $?"
grep -i 'file_first\|demotion failed' /tmp/tierd.log | head -5 | sed 's/^/LOG /'
"#;
    let g = boot_with(script, 600, |c| c.modules.push("loop".into()));
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let fa = |key: &str| -> Vec<u64> {
        field(&g.output, key)
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let (ff, lru) = (fa("FA ff"), fa("FA lru"));
    let (ff0, lru0) = (fa("FA-BEFORE ff"), fa("FA-BEFORE lru"));
    eprintln!("anon N0/N1, file N0/N1 MiB: ff {ff0:?} -> {ff:?}, lru {lru0:?} -> {lru:?}");
    assert_eq!(field(&g.output, "TIERD-EXIT"), "0", "{}", g.output);
    assert!(!g.output.contains("WARN: not held"), "{}", g.output);
    // Everything started on DRAM.
    for b in [&ff0, &lru0] {
        assert!(
            b[1] + b[3] <= 8 && b[0] >= 56 && b[2] >= 56,
            "{b:?}\n{}",
            g.output
        );
    }
    // ff: its page cache went first, most of its anonymous memory stayed.
    // The kernel drops rather than demotes part of a page cache read in a
    // loop (a page busy when migrated is reclaimed instead) and `cat`
    // reads it back into DRAM, so a file pass falls short and the rest
    // comes from anonymous memory: 30–56 MiB of file moved and 0–17 of
    // anon in runs so far (docs/NOTES.md "file_first and the page cache
    // the kernel drops"). LRU order, in the same boot, moves no file and
    // 60 of anon: at most half of ff's anon may go (a bound of 20 was
    // too close to the 17 seen).
    assert!(
        ff[3] >= 24 && ff[3] >= lru[3] + 20,
        "ff's file pages were not demoted: {ff:?} (LRU order: {lru:?})\n{}",
        g.output
    );
    assert!(
        ff[1] <= 32,
        "ff lost over half its anonymous memory to the lower tier: {ff:?}\n{}",
        g.output
    );
    // The baseline in LRU order took its cold anonymous memory.
    assert!(
        lru[1] >= ff[1] + 24,
        "LRU order took no more anonymous memory than file_first ({lru:?} vs {ff:?}): \
         the scenario does not tell the two apart\n{}",
        g.output
    );
}

/// `offload` (TMO-style): two tenants alike (200 MiB, a 16 MiB hot set, the
/// rest never touched again) and a third with the same offload policy whose
/// 200 MiB are all warm (Zipf, every page touched within seconds), on a
/// host with zram swap; `tenants.slice/batch`
/// has `offload = { pressure = "1%", step = "5%", min_age = "10s" }`, `tenants.slice/peer`
/// none (the baseline in the same boot). batch must give up its cold tail
/// (DRAM down to about its hot set, part of it swapped from the lower
/// tier) while its memory pressure stays under the threshold and its hot
/// set stays on DRAM; peer keeps its DRAM.
#[test]
fn offload_finds_the_footprint_under_the_pressure_threshold() {
    let script = r#"
set -e
. /tests/lib.sh
mods=/lib/modules/$(uname -r)
for m in zsmalloc lz4_compress lz4hc_compress zram; do insmod $mods/$m.ko; done
echo 512M > /sys/block/zram0/disksize
mkswap /dev/zram0 > /dev/null
swapon /dev/zram0
for t in batch peer; do
    mkcg tenants.slice/$t
    start_log tenants.slice/$t /tmp/$t.log tierload hotset --size-mib 200 --hot-mib 16 --report-s 1 > /dev/null
done
# Warm everywhere: Zipf popularity over all its pages, each touched within seconds.
mkcg tenants.slice/warm
start_log tenants.slice/warm /tmp/warm.log tierload zipf --size-mib 200 --report-s 1 > /dev/null
wait_usage tenants.slice/batch 190 90
wait_usage tenants.slice/peer 190 90
wait_usage tenants.slice/warm 190 90
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
[[policy]]
match = "tenants.slice/batch"
offload = { pressure = "1%", step = "5%", min_age = "10s" }
[[policy]]
match = "tenants.slice/warm"
offload = { pressure = "1%", step = "5%", min_age = "10s" }
[[policy]]
match = "tenants.slice/peer"
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30
psi() { sed -n 's/^some avg10=\([0-9.]*\).*/\1/p' $CG/tenants.slice/$1/memory.pressure; }
swap_mib() { echo $(( $(cat $CG/tenants.slice/$1/memory.swap.current) / 1048576 )); }
# sample: `S <t> <batch N0> <batch N1> <batch swap> <batch psi> <peer N0>`.
sample() { echo "S $(cut -d' ' -f1 /proc/uptime) $(node_mib tenants.slice/batch 0) $(node_mib tenants.slice/batch 1) $(swap_mib batch) $(psi batch) $(node_mib tenants.slice/peer 0)"; }
i=0
until [ "$(node_mib tenants.slice/batch 0)" -le 64 ] && [ "$(swap_mib batch)" -ge 8 ]; do
    i=$((i + 1)); [ $i -gt 90 ] && { echo "WARN: not offloaded"; break; }
    sample; sleep 2
done
# The footprint found, held for 10 s more.
for j in 1 2 3 4 5; do sample; sleep 2; done
emit_report batch /tmp/batch.log
emit_report peer /tmp/peer.log
emit_report warm /tmp/warm.log
emit_node tenants.slice/warm
tierctl metrics | grep -E '^tierd_container_(offload_bytes_total|memory_pressure_percent)' | sed 's/^/METRIC /'
kill -TERM $TIERD; wait $TIERD; echo "TIERD-EXIT $?"
grep -E 'offload' /tmp/tierd.log | grep -v DEBUG | head -5 | sed 's/^/LOG /'
"#;
    let g = boot_with(script, 600, |c| {
        for m in ["zsmalloc", "lz4_compress", "lz4hc_compress", "zram"] {
            c.modules.push(m.into());
        }
    });
    assert_eq!(g.exit_code, 0, "{}", g.output);
    assert_eq!(field(&g.output, "TIERD-EXIT"), "0", "{}", g.output);
    assert!(!g.output.contains("WARN: not offloaded"), "{}", g.output);
    // (t, batch N0, batch N1, batch swap, batch psi, peer N0)
    let samples: Vec<(f64, u64, u64, u64, f64, u64)> = g
        .output
        .lines()
        .filter_map(|l| l.strip_prefix("S "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            (
                f[0].parse().unwrap(),
                n(1),
                n(2),
                n(3),
                f[4].parse().unwrap(),
                n(5),
            )
        })
        .collect();
    let first = samples.first().unwrap();
    let last = samples.last().unwrap();
    let max_psi = samples.iter().map(|s| s.4).fold(0.0, f64::max);
    eprintln!(
        "batch DRAM {} -> {} MiB, lower {} MiB, swap {} MiB, psi max {max_psi} % in {:.0} s; peer DRAM {} -> {} MiB",
        first.1, last.1, last.2, last.3, last.0 - first.0, first.5, last.5
    );
    // The footprint: the cold tail left DRAM, some of it went on to swap.
    assert!(last.1 <= 64 && last.3 >= 8, "{last:?}\n{}", g.output);
    // Under the threshold throughout (avg10, as the kernel smooths it).
    assert!(max_psi < 1.0, "pressure reached {max_psi} %\n{}", g.output);
    // The hot set stayed on DRAM.
    let report = |name: &str| -> serde_json::Value {
        let r = field(&g.output, &format!("REPORT {name}"));
        let json = r.split_once(' ').map(|(_, j)| j).unwrap_or("");
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {r}\n{}", g.output))
    };
    let hot = report("batch")["hot_residency"].as_f64().unwrap();
    assert!(hot >= 0.9, "batch's hot set on DRAM: {hot}\n{}", g.output);
    // The baseline kept its DRAM: nothing took it but the offload.
    assert!(last.5 >= 180, "peer lost DRAM: {last:?}\n{}", g.output);
    assert!(
        g.output
            .contains("tierd_container_offload_bytes_total{cgroup=\"tenants.slice/batch\"}"),
        "{}",
        g.output
    );
    // Offload takes only pages untouched for min_age: the warm tenant,
    // same policy, keeps its DRAM and its hit ratio.
    let warm = nodes(&g.output, "tenants.slice/warm");
    let hit = report("warm")["hit_ratio"].as_f64().unwrap();
    eprintln!("warm (offload, Zipf over all pages): N0/N1 {warm:?}, hit ratio {hit}");
    assert!(
        warm[0].0 >= 180 && hit >= 0.95,
        "warm {warm:?} hit {hit}\n{}",
        g.output
    );
}

/// `placement = "interleave"` (the bandwidth-bound class): tierd writes the
/// host-wide weights (3 : 1 here), a tenant launched by `tierd exec --policy
/// bw` allocates over both tiers in that ratio, and stays so while it
/// accesses all of its pages (neither the kernel's promotion nor tierd
/// moves it to all-DRAM); the same workload without `tierd exec` in the
/// same boot sits on DRAM. At SIGTERM the host's weights come back.
#[test]
fn interleave_placement_splits_by_weight_and_holds_the_split() {
    let script = r#"
set -e
. /tests/lib.sh
W=/sys/kernel/mm/mempolicy/weighted_interleave
echo "WEIGHTS-BEFORE $(cat $W/node0) $(cat $W/node1)"
cat > /tmp/t.toml <<'EOF'
[daemon]
interval = "1s"
[[policy]]
name = "bw"
match = "tenants.slice/bw"
placement = "interleave"
interleave_weights = { fast = 3, lower = 1 }
[[policy]]
match = "tenants.slice/*"
EOF
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30
echo "WEIGHTS-RUN $(cat $W/node0) $(cat $W/node1)"
mkcg tenants.slice/bw
mkcg tenants.slice/plain
start_in tenants.slice/bw tierd --config /tmp/t.toml exec --policy bw -- tierload hotset --size-mib 160 --hot-mib 160 --report-s 60 > /dev/null
start_in tenants.slice/plain tierload hotset --size-mib 160 --hot-mib 160 --report-s 60 > /dev/null
wait_usage tenants.slice/bw 155 90
wait_usage tenants.slice/plain 155 90
# 20 s of the workloads touching every page, tierd at 1 s cycles.
for i in $(seq 1 10); do emit_node tenants.slice/bw; emit_node tenants.slice/plain; sleep 2; done
emit_status
kill -TERM $TIERD; wait $TIERD; echo "TIERD-EXIT $?"
echo "WEIGHTS-AFTER $(cat $W/node0) $(cat $W/node1)"
tierd --config /tmp/t.toml exec --policy tenants.slice/* -- true 2>&1 | sed 's/^/NOT-INTERLEAVE /' || true
grep 'weighted interleave' /tmp/tierd.log | sed 's/^/LOG /'
"#;
    let g = boot(script, 600);
    assert_eq!(g.exit_code, 0, "{}", g.output);
    assert_eq!(field(&g.output, "WEIGHTS-RUN"), "3 1", "{}", g.output);
    assert_eq!(field(&g.output, "TIERD-EXIT"), "0", "{}", g.output);
    assert_eq!(
        field(&g.output, "WEIGHTS-AFTER"),
        field(&g.output, "WEIGHTS-BEFORE"),
        "{}",
        g.output
    );
    let bw = nodes(&g.output, "tenants.slice/bw");
    let plain = nodes(&g.output, "tenants.slice/plain");
    eprintln!(
        "bw N0/N1 MiB {:?} → {:?}; plain {:?} → {:?}",
        bw[0],
        bw[bw.len() - 1],
        plain[0],
        plain[plain.len() - 1]
    );
    // 3 : 1 of ~160 MiB is 120 / 40: within 10 MiB, at every sample.
    for &(n0, n1) in &bw {
        assert!(
            n0.abs_diff(120) <= 10 && n1.abs_diff(40) <= 10,
            "bw {bw:?}\n{}",
            g.output
        );
    }
    for &(n0, n1) in &plain {
        assert!(n0 >= 150 && n1 <= 8, "plain {plain:?}\n{}", g.output);
    }
    // The plan holds the split: bw's target is 3/4 of its usage.
    let st = statuses(&g.output);
    let c = container(st.last().unwrap(), "tenants.slice/bw").unwrap();
    let usage = c.fast_bytes + c.lower_bytes;
    assert!(c.target_bytes.abs_diff(usage * 3 / 4) <= 2 * MIB, "{c:?}");
    assert!(
        field(&g.output, "NOT-INTERLEAVE").contains("not placement = \"interleave\""),
        "{}",
        g.output
    );
}

/// Cold memory outside the containers makes room first
/// (`daemon.demote_unmanaged`): 64 MiB of tmpfs page cache in a cgroup no
/// policy matches, written once at the start, stays on DRAM while tierd
/// makes room for a guarantee with the switch off (it demotes the
/// over-target tenant), and leaves DRAM first when a second guarantee
/// needs room with it on. Same boot, same setup; tierd restarted between
/// the two phases. Polled to deadlines.
#[test]
fn cold_memory_outside_the_containers_makes_room_first() {
    let g = boot(
        r#"
. /tests/lib.sh
echo +cpuset > $CG/cgroup.subtree_control
mkcg tenants.slice
echo +cpuset > $CG/tenants.slice/cgroup.subtree_control
mkcg other.slice/cold
mkdir -p /tmp/cold && mount -t tmpfs tmpfs /tmp/cold
sh -c 'echo 0 > "$0/cgroup.procs" && exec dd if=/dev/zero of=/tmp/cold/a bs=1M count=64 2>/dev/null' "$CG/other.slice/cold"
# kswapd_cold: pages kswapd demoted from the cold cgroup so far.
kswapd_cold() { echo "KSWAPD $(awk '$1 == "pgdemote_kswapd" { print $2 }' $CG/other.slice/cold/memory.stat)"; }
emit_node other.slice/cold
kswapd_cold
mkcg tenants.slice/fill
start_in tenants.slice/fill tierload hotset --size-mib 700 --hot-mib 16 --report-s 60 > /dev/null
wait_usage tenants.slice/fill 690 90 || exit 1
on_lower tenants.slice/g1 250 hotset --size-mib 256 --hot-mib 32 --report-s 60 || exit 1
emit_node tenants.slice/fill
conf() {
    printf '[daemon]\ninterval = "1s"\ndemote_unmanaged = %s\nunmanaged_min_age = "2s"\n[[policy]]\nname = "owed"\nmatch = "tenants.slice/g*"\nlocal_low = "100%%"\n[[policy]]\nmatch = "tenants.slice/*"\n' $1 > /tmp/t.toml
}
# until_lost CG FROM MIB DEADLINE_S: polls until CG's node-0 MiB is at
# most FROM - MIB.
until_lost() {
    local i=0
    until [ "$(node_mib $1 0)" -le $(( $2 - $3 )) ]; do
        i=$((i + 1)); [ $i -gt $4 ] && return 0
        sleep 1
    done
}
# Off: tierd makes room for g1's guarantee from the over-target tenant.
conf false
FILL0=$(node_mib tenants.slice/fill 0)
tierd --config /tmp/t.toml run > /tmp/tierd-off.log 2>&1 &
T=$!
wait_http 30 || exit 1
until_lost tenants.slice/fill $FILL0 48 90
echo "OFF_METRIC $(tierctl metrics | awk '$1 == "tierd_unmanaged_demoted_bytes_total" { print $2 }')"
emit_node tenants.slice/fill
emit_node other.slice/cold
kswapd_cold
kill -TERM $T; wait $T
echo "PHASE on"
# On: a second guarantee; the cold page cache goes first.
conf true
tierd --config /tmp/t.toml run > /tmp/tierd-on.log 2>&1 &
T=$!
wait_http 30 || exit 1
on_lower tenants.slice/g2 120 hotset --size-mib 128 --hot-mib 32 --report-s 60 || exit 1
until_lost other.slice/cold 64 48 90
echo "ON_METRIC $(tierctl metrics | awk '$1 == "tierd_unmanaged_demoted_bytes_total" { print $2 }')"
emit_node other.slice/cold
kswapd_cold
emit_status
kill -TERM $T; wait $T
echo DONE
"#,
        600,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    assert!(g.output.contains("DONE"), "{}", g.output);
    let out = &g.output;
    let cold = nodes(out, "other.slice/cold");
    let fill = nodes(out, "tenants.slice/fill");
    assert_eq!(cold.len(), 3, "{out}");
    assert_eq!(fill.len(), 2, "{out}");
    assert!(
        cold[0].0 >= 60,
        "the cold page cache should start on DRAM: {cold:?}"
    );
    // kswapd may take some of the cold page cache in either phase (the
    // fast tier is nearly full): what it took (MiB) is not tierd's.
    let kswapd: Vec<u64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("KSWAPD "))
        .map(|v| v.trim().parse::<u64>().unwrap_or(0) * 4096 / MIB)
        .collect();
    assert_eq!(kswapd.len(), 3, "{out}");
    // Off: tierd made room (the tenant lost ≥ 48 MiB of DRAM), not from
    // the cold page cache, and counted nothing.
    assert!(
        fill[1].0 + 48 <= fill[0].0,
        "tierd with demote_unmanaged = false should have demoted the over-target tenant: {fill:?}\n{out}"
    );
    let lost_off = cold[0].0.saturating_sub(cold[1].0);
    assert!(
        lost_off <= kswapd[1] - kswapd[0] + 8,
        "demote_unmanaged = false, yet the cold page cache left DRAM other than by kswapd: \
         {cold:?}, kswapd {kswapd:?}\n{out}"
    );
    assert_eq!(field(out, "OFF_METRIC"), "0", "{out}");
    // On: what was left of the cold page cache left DRAM, by tierd's doing.
    let by_tierd = cold[1]
        .0
        .saturating_sub(cold[2].0)
        .saturating_sub(kswapd[2] - kswapd[1]);
    assert!(
        cold[2].0 <= 16 && by_tierd + 16 >= cold[1].0,
        "demote_unmanaged = true should have demoted the cold page cache: {cold:?}, kswapd {kswapd:?}\n{out}"
    );
    let counted: u64 = field(out, "ON_METRIC").parse().unwrap_or(0);
    assert!(
        counted + 8 * MIB >= by_tierd * MIB,
        "tierd_unmanaged_demoted_bytes {counted} should count the {by_tierd} MiB it demoted\n{out}"
    );
}

/// An arrival (`limits.arrival_window`, and the inotify wake of
/// `arrivals.rs`): a hog alone at its target is protected up to its usage.
/// The moment a cgroup is made under `tenants.slice`, with a 30 s interval,
/// tierd runs a cycle: the newcomer is filling, and the hog, above the half
/// it would keep once the newcomer had its share, loses `memory.low`
/// (its target, and so tierd's demotion, unchanged). With a 20 s window the
/// first regular cycle after it finds the newcomer no longer filling: both
/// fit, so the hog is protected again.
#[test]
fn an_arrival_is_seen_at_once_and_unprotects_the_incumbent_while_it_fills() {
    let g = boot(
        r#"
. /tests/lib.sh
mkcg tenants.slice/hog
start_in tenants.slice/hog tierload hotset --size-mib 500 --hot-mib 32 --report-s 60 > /dev/null
wait_usage tenants.slice/hog 490 120 || exit 1
LOW=$CG/tenants.slice/hog/memory.low
printf '[daemon]\ninterval = "30s"\n[limits]\narrival_window = "20s"\n[[policy]]\nmatch = "tenants.slice/*"\n' > /tmp/t.toml
tierd --config /tmp/t.toml run > /tmp/tierd.log 2>&1 &
TIERD=$!
wait_http 30 || exit 1
# until_low TAG CMP DEADLINE_S: polls the hog's memory.low every 0.2 s
# until `[ value CMP 0 ]` holds (-eq, -gt; tierd writes usage as max).
low_num() { sed 's/^max$/1/' $LOW; }
until_low() {
    local i=0 t0
    t0=$(cut -d' ' -f1 /proc/uptime)
    until [ "$(low_num)" $2 0 ]; do
        i=$((i + 1)); [ $i -gt $(( $3 * 5 )) ] && { echo "LOW $1 DEADLINE $(cat $LOW)"; emit_status; cat /tmp/tierd.log; return 1; }
        sleep 0.2
    done
    echo "LOW $1 $(cat $LOW) $(awk -v a=$t0 '{ printf "%.1f", $1 - a }' /proc/uptime)"
}
until_low ALONE -gt 30 || exit 1
emit_status
mkdir $CG/tenants.slice/newcomer
until_low ARRIVAL -eq 20 || exit 1
# /status is published at the end of the cycle that wrote memory.low.
wait_status '"filling":true' 20 || exit 1
emit_status
start_in tenants.slice/newcomer tierload hotset --size-mib 150 --hot-mib 150 --report-s 60 > /dev/null
until_low AFTER -gt 90 || exit 1
i=0
while tierctl status --json | grep -q '"filling":true'; do
    i=$((i + 1)); [ $i -gt 100 ] && break
    sleep 0.2
done
emit_status
tierctl metrics | grep '^tierd_arrival_wakes' | sed 's/^/METRIC /'
kill -TERM $TIERD; wait $TIERD
"#,
        300,
    );
    assert_eq!(g.exit_code, 0, "{}", g.output);
    let low = |tag: &str| -> (u64, f64) {
        let v = field(&g.output, &format!("LOW {tag}"));
        let f: Vec<&str> = v.split_whitespace().collect();
        let bytes = if f[0] == "max" {
            u64::MAX
        } else {
            f[0].parse().unwrap()
        };
        (bytes, f[1].parse().unwrap())
    };
    let st = statuses(&g.output);
    assert_eq!(st.len(), 3, "{}", g.output);
    let hog = |s: &Status| container(s, "tenants.slice/hog").cloned().unwrap();
    // Alone: at its target, protected to its usage.
    let alone = hog(&st[0]);
    assert!(
        low("ALONE").0 >= 490 * MIB && alone.state == "at_target" && !alone.filling,
        "{alone:?}\n{}",
        g.output
    );
    // The cgroup was seen within seconds, well before the next interval
    // (30 s): the cycle that saw it ran on the wake.
    let (_, seen_s) = low("ARRIVAL");
    assert!(
        seen_s < 15.0,
        "memory.low went to 0 after {seen_s} s\n{}",
        g.output
    );
    let wakes: f64 = field(&g.output, "METRIC tierd_arrival_wakes_total")
        .parse()
        .unwrap();
    assert!(wakes >= 1.0, "{}", g.output);
    let (arr, newcomer) = (
        hog(&st[1]),
        container(&st[1], "tenants.slice/newcomer").cloned(),
    );
    let newcomer = newcomer.unwrap_or_else(|| panic!("newcomer not managed:\n{}", g.output));
    assert!(newcomer.filling && !arr.filling, "{newcomer:?}\n{arr:?}");
    assert_eq!(arr.memory_low_bytes, 0, "{arr:?}");
    // Nothing demoted for it: the hog's target is still its usage.
    assert!(
        arr.demote_bytes == 0 && arr.target_bytes + band(arr.target_bytes) >= arr.fast_bytes,
        "{arr:?}"
    );
    // Filling over (the window): both fit, the hog is protected again.
    let after = hog(&st[2]);
    assert!(
        low("AFTER").0 >= 490 * MIB
            && !container(&st[2], "tenants.slice/newcomer").unwrap().filling
            && after.memory_low_bytes > 0,
        "{after:?}\n{}",
        g.output
    );
}
