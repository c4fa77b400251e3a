//! Boots the real emulated CXL host. Without QEMU 10 or the kernel these tests
//! fail and say to run `cargo xtask setup`; they never skip.

use std::time::Duration;

use testbed::{Error, VmConfig};

fn run(cfg: &VmConfig, script: &str) -> Result<testbed::VmOutput, Error> {
    match testbed::run(cfg, script) {
        // The message already says "run `cargo xtask setup`".
        Err(e @ Error::NotSetUp { .. }) => panic!("{e}"),
        r => r,
    }
}

fn cfg(timeout_s: u64) -> VmConfig {
    VmConfig {
        timeout: Duration::from_secs(timeout_s),
        ..Default::default()
    }
}

/// Run on every kernel and lower tier (`$TIERD_KERNEL`, `$TIERD_LOWER`):
/// on the CXL Type-3 device node 1 must be the device's memory, onlined
/// movable through a committed CXL region.
#[test]
fn guest_has_two_tiers_a_cpuless_node_and_memcg() {
    let c = cfg(180);
    let out = run(
        &c,
        r#"
echo "online $(cat /sys/devices/system/node/online)"
awk '/^Node 1, zone/ { z = $4 } z == "Movable" && $1 == "present" { print "node1_movable_present " $2; z = "" }' /proc/zoneinfo
for r in /sys/bus/cxl/devices/region*; do
    [ -d "$r" ] && echo "cxl_region ${r##*/} commit=$(cat $r/commit) mode=$(cat $r/mode 2>/dev/null) size=$(cat $r/size)"
done
echo "has_cpu $(cat /sys/devices/system/node/has_cpu)"
echo "node1_cpulist [$(cat /sys/devices/system/node/node1/cpulist)]"
for d in /sys/devices/virtual/memory_tiering/memory_tier*; do
    echo "tier ${d##*/} $(cat $d/nodelist)"
done
echo "controllers $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "subtree $(cat /sys/fs/cgroup/cgroup.subtree_control)"
grep cgroup2 /proc/mounts
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let o = &out.output;
    assert_eq!(out.exit_code, 0, "{o}");
    assert!(o.contains("online 0-1\n"), "{o}");
    assert!(o.contains("has_cpu 0\n"), "{o}");
    assert!(o.contains("node1_cpulist []\n"), "{o}");
    let tiers: Vec<(u32, String)> = o
        .lines()
        .filter_map(|l| l.strip_prefix("tier memory_tier"))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, nodes)| (n.parse().unwrap(), nodes.to_string()))
        .collect();
    assert_eq!(tiers.len(), 2, "{o}");
    let fast = tiers.iter().min().unwrap();
    let slow = tiers.iter().max().unwrap();
    assert_eq!((fast.1.as_str(), slow.1.as_str()), ("0", "1"), "{o}");
    let subtree = o.lines().find(|l| l.starts_with("subtree ")).unwrap();
    assert!(
        subtree.contains("memory") && subtree.contains("cpuset"),
        "{o}"
    );
    assert!(
        o.contains("nsdelegate") && o.contains("memory_recursiveprot"),
        "{o}"
    );
    // Kernel messages stay out of the script's output.
    assert!(!o.contains("] "), "{o}");
    assert!(
        out.console.contains(&format!("Linux version {}", c.kernel)),
        "{}",
        out.console
    );
    if c.lower == testbed::LowerTier::Cxl {
        let region = o
            .lines()
            .find(|l| l.starts_with("cxl_region "))
            .unwrap_or_else(|| panic!("no CXL region: {o}"));
        assert!(region.contains("commit=1"), "{o}");
        let movable: u64 = o
            .lines()
            .find_map(|l| l.strip_prefix("node1_movable_present "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        // 4 KiB pages: the whole device (1 GiB by default), less nothing.
        assert!(
            movable * 4096 >= (c.cxl_mib << 20) * 9 / 10,
            "node 1 movable pages {movable}: {o}"
        );
    }
    assert!(out.boot_duration < out.duration);
}

#[test]
fn exit_code_propagates() {
    let out = run(&cfg(120), "echo before; exit 3").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.exit_code, 3);
    assert_eq!(out.output, "before\n");
}

#[test]
fn timeout_is_an_error() {
    match run(&cfg(10), "echo sleeping; sleep 1000") {
        Err(Error::Timeout { after, .. }) => assert_eq!(after, Duration::from_secs(10)),
        r => panic!("expected a timeout, got {r:?}"),
    }
}

#[test]
fn a_boot_that_does_not_reach_init_is_tried_again_then_an_error() {
    // No kernel reaches init in 1 s under TCG (boots take 4–5 s here), so
    // every boot counts as hung: two boots, then the error.
    let cfg = VmConfig {
        boot_timeout: Duration::from_secs(1),
        boot_attempts: 2,
        ..cfg(120)
    };
    let started = std::time::Instant::now();
    match run(&cfg, "echo should not run") {
        Err(Error::BootHung {
            after, attempts, ..
        }) => {
            assert_eq!((after, attempts), (Duration::from_secs(1), 2));
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{:?}",
                started.elapsed()
            );
        }
        r => panic!("expected a hung boot after two boots, got {r:?}"),
    }
}

#[test]
fn missing_tiers_is_an_error() {
    let cfg = VmConfig {
        expect_tiers: 3,
        ..cfg(120)
    };
    match run(&cfg, "echo should not run") {
        Err(Error::MissingTiers {
            found: 2,
            expected: 3,
            listing,
        }) => assert!(
            listing.contains("=0") && listing.contains("=1"),
            "{listing}"
        ),
        r => panic!("expected missing tiers, got {r:?}"),
    }
}

/// Checks that `r` is a kernel panic and returns (before init, boots).
fn kernel_panic(r: Result<testbed::VmOutput, Error>) -> (bool, u32) {
    match r {
        Err(Error::Kernel {
            excerpt,
            before_init,
            attempts,
        }) => {
            assert!(excerpt.contains("Kernel panic"), "{excerpt}");
            (before_init, attempts)
        }
        r => panic!("expected a kernel panic, got {r:?}"),
    }
}

#[test]
fn kernel_panic_is_an_error() {
    let r = run(&cfg(120), "echo c > /proc/sysrq-trigger; sleep 5; exit 0");
    // After init: the script may have changed something, so the run ends
    // with the error rather than booting again. (The boot count is not
    // checked: a first boot that hung would make this boot 2.)
    assert!(!kernel_panic(r).0);
}

#[test]
fn a_kernel_failure_before_init_is_booted_again_then_an_error() {
    // No such init in the initramfs: the kernel panics ("No working init
    // found" or "VFS: Unable to mount root fs") before ours runs, every boot.
    let cfg = VmConfig {
        boot_attempts: 2,
        kernel_args: vec!["rdinit=/testbed-no-such-init".into()],
        ..cfg(120)
    };
    assert_eq!(kernel_panic(run(&cfg, "echo should not run")), (true, 2));
}
