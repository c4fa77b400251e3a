//! DAMON in the emulated CXL host (QEMU TCG, Debian's 6.12 or 7.3 kernel):
//! the `damon-heat` tool against two `tierload hotset` processes (on 7.x
//! after DAMON_STAT's exclusive kdamond is stopped, as an operator does).
//!
//! Needs the release binaries `tierload` and `damon-heat` (`cargo build
//! --release -p tierload -p hotness`) and the testbed (`cargo xtask setup`);
//! without them the test fails and says so.

use std::path::PathBuf;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// Two processes with 16 and 48 MiB hot sets; `damon-heat` must see hot
/// bytes within 0.5x..2x of each (in one of up to six 10 s rounds: in one CI
/// run a single round saw 11 of 48 MiB) and leave no kdamond behind.
///
/// A shell busy loop runs alongside: with one busy process per vCPU nothing
/// flushes the TLB (x86 does not flush when DAMON clears an accessed bit, and
/// switching to a kernel thread keeps the user page tables), so a hot set
/// that fits in the (emulated) TLB is never seen as accessed again. Two more
/// runnable processes make the vCPUs switch address spaces, as on any shared
/// host (with one, a 16 MiB hot set still read as 0 in one run of four).
#[test]
fn damon_heat_sees_each_hot_set() {
    let bins = testbed::guest_binaries(&["tierload", "damon-heat"]).unwrap_or_else(|e| {
        panic!("{e:#}\nbuild them with `cargo build --release -p tierload -p hotness`")
    });
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/guest/lib.sh");
    let cfg = testbed::VmConfig {
        binaries: bins,
        files: vec![(lib, "/tests/lib.sh".into())],
        timeout: Duration::from_secs(180),
        ..Default::default()
    };
    let script = r#"
. /tests/lib.sh
damon_stat_off
mkcg t/a; mkcg t/b
PA=$(start_in t/a tierload --size-mib 64 --report-s 0 hotset --hot-mib 16)
PB=$(start_in t/b tierload --size-mib 96 --report-s 0 hotset --hot-mib 48)
sh -c 'while :; do :; done' & H1=$!
sh -c 'while :; do :; done' & H2=$!
wait_usage t/a 64 30 || exit 1
wait_usage t/b 96 30 || exit 1
sleep 1
echo "PIDS $PA $PB"
# in_range PID LO_MIB HI_MIB: the last round's hot bytes of PID are within.
in_range() {
    grep "\"pid\":$1[,}]" /tmp/round.json | grep -o '"hot_bytes":[0-9]*' |
        awk -F: -v lo="$2" -v hi="$3" '{ m = $2 / 1048576; ok = m >= lo && m <= hi; n++ } END { exit !(n && ok) }'
}
# DAMON's regions adapt over time and sample one page each: poll, 10 s a
# round, until both hot sets are seen (6 rounds at most).
for r in 1 2 3 4 5 6; do
    echo "ROUND $r"
    damon-heat --pids $PA,$PB --seconds 10 --state-file /run/tierd/damon-heat.json > /tmp/round.json || exit 2
    cat /tmp/round.json
    in_range $PA 8 32 && in_range $PB 24 96 && break
done
kill $H1 $H2
echo "NR_KDAMONDS $(cat /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds)"
[ -e /run/tierd/damon-heat.json ] && echo "STATE_FILE_LEFT"
exit 0
"#;
    let out = testbed::run(&cfg, script).unwrap_or_else(|e| {
        panic!("emulated CXL host failed: {e:#}\n(run `cargo xtask setup` if QEMU or the kernel is missing)")
    });
    let o = &out.output;
    if std::env::var_os("HOTNESS_VM_CONSOLE").is_some() {
        eprintln!("{}", out.console);
    }
    assert_eq!(out.exit_code, 0, "guest script failed:\n{o}");
    let pids: Vec<u64> = o
        .lines()
        .find_map(|l| l.strip_prefix("PIDS "))
        .unwrap_or_else(|| panic!("no PIDS line:\n{o}"))
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // The last round's lines.
    let last_round = o.rsplit_once("ROUND ").map_or(o.as_str(), |(_, r)| r);
    let lines: Vec<serde_json::Value> = last_round
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "one JSON line per pid expected:\n{o}");
    for (pid, hot_mib) in pids.iter().zip([16u64, 48]) {
        let l = lines
            .iter()
            .find(|l| l["pid"].as_u64() == Some(*pid))
            .unwrap_or_else(|| panic!("no line for pid {pid}:\n{o}"));
        let hot = l["hot_bytes"].as_u64().unwrap();
        let (lo, hi) = (hot_mib * MIB / 2, hot_mib * MIB * 2);
        assert!(
            (lo..=hi).contains(&hot),
            "pid {pid} ({hot_mib} MiB hot): damon-heat saw {} MiB hot, expected {}..={} MiB\n{o}",
            hot / MIB,
            lo / MIB,
            hi / MIB
        );
        assert!(l["regions"].as_u64().unwrap() > 0, "{l}");
        assert!(l["total_bytes"].as_u64().unwrap() >= hot, "{l}");
    }
    assert!(o.contains("NR_KDAMONDS 0"), "kdamond left behind:\n{o}");
    assert!(
        !o.contains("STATE_FILE_LEFT"),
        "state file left behind:\n{o}"
    );
}
