//! One control-loop cycle on a copy of the kernel files captured in the 6.12
//! guest (`tests/fixtures/linux-6.12`): sampling, solving and the cgroup writes,
//! without a VM. The captured `test.slice/app` has 117.6 MiB on node 0 (fast)
//! and 16 MiB on node 1. One cycle runs on the 7.3 capture too.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tierd::config::Config;
use tierd::controller::{Controller, Status};
use tierd::metrics::Metrics;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/linux-6.12"
);
const APP: &str = "sys/fs/cgroup/test.slice/app";

/// A writable copy of the fixture tree, with the write-only `memory.reclaim`
/// that the capture could not read.
fn host() -> (tempfile::TempDir, PathBuf) {
    host_of(FIXTURES)
}

fn host_of(fixtures: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    testbed::copy_tree(Path::new(fixtures), dir.path());
    std::fs::write(dir.path().join(APP).join("memory.reclaim"), "").unwrap();
    let root = dir.path().to_owned();
    (dir, root)
}

/// A config on the fixture tree: `daemon` adds `[daemon]` lines, `policy`
/// lines to the one policy.
fn config(root: &Path, daemon: &str, policy: &str) -> Config {
    let text = format!(
        "[daemon]\ncgroup_root = {:?}\nsysfs_root = {:?}\nprocfs_root = {:?}\n{daemon}\n[[policy]]\nmatch = \"test.slice/*\"\n{policy}\n",
        root.join("sys/fs/cgroup"),
        root.join("sys"),
        root.join("proc"),
    );
    Config::parse(&text, Path::new("test.toml")).unwrap()
}

fn controller(root: &Path, policy: &str) -> (Controller, Arc<Metrics>, Arc<Mutex<Status>>) {
    let cfg = config(root, "", policy);
    let metrics = Arc::new(Metrics::new("kernel"));
    let status = Arc::new(Mutex::new(Status::default()));
    let c = Controller::new(cfg, metrics.clone(), status.clone()).unwrap();
    (c, metrics, status)
}

fn read(root: &Path, file: &str) -> String {
    std::fs::read_to_string(root.join(APP).join(file))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn over_target_container_gets_memory_reclaim_and_no_protection() {
    let (_dir, root) = host();
    let (mut c, metrics, status) = controller(&root, "local_high = \"50%\"");
    assert!(!c.observe_only());
    let plan = c.cycle().unwrap();
    let p = &plan.containers[0];
    let usage = 67252224 + 50331648 + 16777216;
    assert_eq!(p.target_bytes, usage / 2);
    let fast = 67252224 + 50331648;
    assert_eq!(p.demote_bytes, fast - usage / 2);
    // The first cycle, with no demotion measured yet, writes at most 16 MiB
    // (controller/pace.rs); the plan asks for the rest next cycle.
    let asked = p.demote_bytes.min(16 << 20);
    assert_eq!(read(&root, "memory.reclaim"), asked.to_string());
    assert_eq!(read(&root, "memory.low"), "0");
    let s = status.lock().unwrap().clone();
    assert_eq!(s.containers[0].container, "test.slice/app");
    assert_eq!(s.containers[0].state, "over_target");
    assert_eq!(s.containers[0].fast_bytes, fast);
    assert_eq!(s.containers[0].lower_bytes, 16777216);
    let m = metrics.encode();
    for line in [
        format!("tierd_container_target_bytes{{cgroup=\"test.slice/app\"}} {}", usage / 2),
        format!(
            "tierd_container_memory_bytes{{cgroup=\"test.slice/app\",node=\"1\",tier=\"lower\"}} {}",
            16777216
        ),
        format!(
            "tierd_container_demote_requested_bytes_total{{cgroup=\"test.slice/app\"}} {asked}"
        ),
        "tierd_host_tiered 1".to_string(),
    ] {
        assert!(m.lines().any(|l| l == line), "missing {line:?} in\n{m}");
    }
}

#[test]
fn container_under_target_is_protected_with_its_usage() {
    let (_dir, root) = host();
    let (mut c, _, _) = controller(&root, "local_low = \"200MiB\"");
    let plan = c.cycle().unwrap();
    let p = &plan.containers[0];
    let usage = 67252224 + 50331648 + 16777216;
    assert_eq!(p.target_bytes, usage);
    assert_eq!(p.demote_bytes, 0);
    // Full protection is written as max: memory.current (135000064 in the
    // capture) exceeds anon + file by its kernel memory, and the kernel
    // protects only when the protection covers memory.current.
    assert_eq!(p.memory_low_bytes, usage);
    assert_eq!(read(&root, "memory.low"), "max");
    assert_eq!(read(&root, "memory.reclaim"), "", "nothing to demote");
    // Its 117.6 MiB on the fast tier are within the band of its guarantee
    // (min(usage, 200 MiB) = 128 MiB): the guarantee is held hard.
    assert_eq!(p.guarantee_bytes, usage);
    assert_eq!(p.memory_min_bytes, usage);
    assert_eq!(read(&root, "memory.min"), "max");
    // tierd writes cgroup files without truncating them (the kernel parses
    // each write whole); these are plain files, so empty them first.
    for f in ["memory.min", "memory.low"] {
        std::fs::write(root.join(APP).join(f), "").unwrap();
    }
    c.restore();
    assert_eq!(read(&root, "memory.min"), "0");
    assert_eq!(read(&root, "memory.low"), "0");
}

#[test]
fn no_guarantee_no_memory_min_write() {
    let (_dir, root) = host();
    std::fs::write(root.join(APP).join("memory.min"), "4096").unwrap();
    let (mut c, _, _) = controller(&root, "");
    c.cycle().unwrap();
    assert_eq!(read(&root, "memory.min"), "4096", "memory.min untouched");
    c.restore();
    assert_eq!(read(&root, "memory.min"), "4096");
}

#[test]
fn vanished_cgroup_is_skipped_not_fatal() {
    let (_dir, root) = host();
    let (mut c, _, status) = controller(&root, "");
    c.cycle().unwrap();
    std::fs::remove_dir_all(root.join(APP)).unwrap();
    let plan = c.cycle().unwrap();
    assert!(plan.containers.is_empty());
    assert!(status.lock().unwrap().containers.is_empty());
}

/// Every metric the shipped Grafana dashboard queries is one tierd registers,
/// so the dashboard cannot rot.
#[test]
fn grafana_dashboard_queries_exported_metrics() {
    let metrics = Metrics::new("kernel");
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/grafana/tierd-dashboard.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut checked = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(i) = rest.find("tierd_") {
                let name: String = rest[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[i + name.len()..];
                let family = name.trim_end_matches("_bucket").trim_end_matches("_total");
                assert!(
                    metrics.names().contains(&family),
                    "dashboard panel {:?} queries {name}, which tierd does not export",
                    panel["title"]
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 15, "only {checked} metric references found");
}

/// A matched cgroup is one container with its descendants: a child that the
/// same glob matches is not managed on its own.
#[test]
fn nested_matches_are_one_container() {
    let (_dir, root) = host();
    // Copied beside it first: copying a tree into itself would never end.
    testbed::copy_tree(&root.join(APP), &root.join("worker"));
    std::fs::rename(root.join("worker"), root.join(APP).join("worker")).unwrap();
    let text = format!(
        "[daemon]\ncgroup_root = {:?}\nsysfs_root = {:?}\n[[policy]]\nmatch = \"test.slice/**\"\n",
        root.join("sys/fs/cgroup"),
        root.join("sys"),
    );
    let cfg = Config::parse(&text, Path::new("test.toml")).unwrap();
    let status = Arc::new(Mutex::new(Status::default()));
    let mut c = Controller::new(cfg, Arc::new(Metrics::new("kernel")), status.clone()).unwrap();
    c.cycle().unwrap();
    let names: Vec<String> = status
        .lock()
        .unwrap()
        .containers
        .iter()
        .map(|c| c.container.clone())
        .collect();
    assert_eq!(names, ["test.slice/app"]);
}

/// Without kernel BTF under the fixture's sysfs the eBPF probe cannot load:
/// tierd says so and counts hint faults from memory.stat deltas (node "all").
#[test]
fn hint_faults_fall_back_to_memory_stat_deltas() {
    let (_dir, root) = host();
    let (mut c, metrics, status) = controller(&root, "");
    c.cycle().unwrap();
    let st = status.lock().unwrap().hint_faults.clone();
    assert!(
        st.starts_with("memory_stat (") && st.contains("kernel/btf/vmlinux"),
        "{st}"
    );
    let stat = root.join(APP).join("memory.stat");
    let text = std::fs::read_to_string(&stat).unwrap();
    std::fs::write(
        &stat,
        text.replace("numa_hint_faults 1\n", "numa_hint_faults 43\n"),
    )
    .unwrap();
    c.cycle().unwrap();
    let m = metrics.encode();
    assert!(
        m.contains("tierd_hint_fault_source{source=\"memory_stat\"} 1"),
        "{m}"
    );
    let line = m
        .lines()
        .find(|l| {
            l.starts_with("tierd_container_numa_hint_faults_total{") && l.contains("node=\"all\"")
        })
        .unwrap_or_else(|| panic!("no hint-fault counter:\n{m}"));
    assert!(line.ends_with(" 42"), "{line}");
}

/// `demotion = "lru_gen"` on a host whose MGLRU switch is missing (the
/// fixture tree has none) refuses to start, naming the key and the file;
/// `auto` falls back to memory.reclaim (the other tests here).
#[test]
fn lru_gen_demotion_without_mglru_is_refused_naming_the_key() {
    let (_dir, root) = host();
    let daemon = format!(
        "debugfs_root = {:?}\ndemotion = \"lru_gen\"",
        root.join("sys/kernel/debug")
    );
    let cfg = config(&root, &daemon, "");
    let metrics = Arc::new(Metrics::new("kernel"));
    let status = Arc::new(Mutex::new(Status::default()));
    let e = Controller::new(cfg, metrics, status)
        .err()
        .expect("lru_gen without MGLRU must be refused");
    let msg = format!("{e:#}");
    assert!(msg.contains("daemon.demotion"), "{msg}");
    assert!(msg.contains("kernel/mm/lru_gen/enabled"), "{msg}");
    assert!(msg.contains("test.toml"), "{msg}");
}

/// The over-target cycle on the 7.3 capture: the same reading, target and
/// demotion need from 7.3's files (its own byte counts).
#[test]
fn over_target_cycle_on_the_7_3_capture() {
    let (_dir, root) = host_of(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/linux-7.3"
    ));
    let (mut c, _, status) = controller(&root, "local_high = \"50%\"");
    assert!(!c.observe_only());
    let plan = c.cycle().unwrap();
    let p = &plan.containers[0];
    let fast = 67244032 + 50143232;
    let usage = fast + 16965632;
    assert_eq!(p.target_bytes, usage / 2);
    assert_eq!(p.demote_bytes, fast - usage / 2);
    let s = status.lock().unwrap().clone();
    assert_eq!(s.containers[0].state, "over_target");
    assert_eq!(s.containers[0].lower_bytes, 16965632);
    assert_eq!(read(&root, "memory.low"), "0");
}
