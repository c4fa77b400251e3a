//! Readers on files captured byte for byte from the Linux 6.12 and 7.3
//! guests (`tests/fixtures/linux-<kernel>/`, mirroring absolute paths).
//! Every cgroup in each captured tree is read with every reader whose file
//! was captured; the exact values of the captured tenant are checked per
//! kernel.

use std::path::{Path, PathBuf};

use cgroupctl::{CgroupFs, Limit};

/// The kernels with a capture under `tests/fixtures/`.
const KERNELS: [&str; 2] = ["6.12", "7.3"];

fn fixture(kernel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/fixtures/linux-{kernel}"))
}

fn fixture_root(kernel: &str) -> PathBuf {
    fixture(kernel).join("sys/fs/cgroup")
}

/// Counts, per file name, how many captured files parsed.
#[derive(Default, Debug)]
struct Seen(std::collections::BTreeMap<&'static str, usize>);

impl Seen {
    fn add(&mut self, f: &'static str) {
        *self.0.entry(f).or_default() += 1;
    }
}

#[test]
fn every_captured_cgroup_file_parses() {
    for k in KERNELS {
        every_cgroup_file_parses(k);
    }
}

fn every_cgroup_file_parses(kernel: &str) {
    let root = fixture_root(kernel);
    assert!(root.is_dir(), "{} missing", root.display());
    let fs = CgroupFs::new(&root);
    let cgroups = fs.discover().unwrap();
    assert!(cgroups.len() > 1, "only the root cgroup was captured");
    let mut seen = Seen::default();
    for c in &cgroups {
        let has = |f: &str| fs.dir(&c.path).join(f).is_file();
        let p = &c.path;
        if has("memory.numa_stat") {
            let s = fs.numa_stat(p).unwrap();
            assert!(
                s.stats.contains_key("anon") && s.stats.contains_key("file"),
                "{p}: {s:?}"
            );
            assert!(!s.nodes().is_empty());
            // The capture host is the two-node emulated CXL host; every key
            // lists the same nodes.
            for (k, per_node) in &s.stats {
                assert_eq!(
                    per_node.keys().copied().collect::<cgroupctl::NodeSet>(),
                    s.nodes(),
                    "{p}: {k}"
                );
            }
            seen.add("memory.numa_stat");
        }
        if has("memory.stat") {
            let s = fs.memory_stat(p).unwrap();
            assert!(s.get("anon").is_some() && s.get("file").is_some(), "{p}");
            for k in [
                "pgdemote_kswapd",
                "pgdemote_direct",
                "pgdemote_khugepaged",
                "pgpromote_success",
            ] {
                assert!(s.get(k).is_some(), "{p}: {kernel} memory.stat has {k}");
            }
            seen.add("memory.stat");
        }
        if has("memory.current") {
            fs.memory_current(p).unwrap();
            seen.add("memory.current");
        }
        for (f, read) in [
            (
                "memory.low",
                CgroupFs::memory_low as fn(&CgroupFs, &str) -> cgroupctl::Result<Limit>,
            ),
            ("memory.min", CgroupFs::memory_min),
            ("memory.high", CgroupFs::memory_high),
            ("memory.max", CgroupFs::memory_max),
        ] {
            if has(f) {
                read(&fs, p).unwrap();
                seen.add(f);
            }
        }
        if has("memory.pressure") {
            let psi = fs.memory_pressure(p).unwrap();
            assert!(psi.full.is_some(), "{p}: memory PSI has a full line");
            seen.add("memory.pressure");
        }
        if has("cpu.stat") {
            let c = fs.cpu_stat(p).unwrap();
            assert!(
                c.usage_usec() >= c.user_usec() && c.usage_usec() >= c.system_usec(),
                "{p}: {c:?}"
            );
            seen.add("cpu.stat");
        }
        if has("cpu.pressure") {
            fs.cpu_pressure(p).unwrap();
            seen.add("cpu.pressure");
        }
        if has("cpuset.mems") {
            fs.cpuset_mems(p).unwrap();
            seen.add("cpuset.mems");
        }
        if has("cpuset.mems.effective") {
            assert!(!fs.cpuset_mems_effective(p).unwrap().is_empty(), "{p}");
            seen.add("cpuset.mems.effective");
        }
        if has("cgroup.procs") {
            fs.procs(p).unwrap();
            seen.add("cgroup.procs");
        }
        if has("cgroup.controllers") {
            fs.controllers(p).unwrap();
            seen.add("cgroup.controllers");
        }
        if has("cgroup.subtree_control") {
            fs.subtree_control(p).unwrap();
            seen.add("cgroup.subtree_control");
        }
    }
    eprintln!("parsed from the linux-{kernel} capture: {seen:?}");
    for f in [
        "memory.numa_stat",
        "memory.stat",
        "memory.current",
        "memory.low",
        "memory.pressure",
        "cpu.stat",
        "cpu.pressure",
    ] {
        assert!(seen.0.contains_key(f), "no {f} in the capture: {seen:?}");
    }
}

/// Exact values of `test.slice/app` at capture time (see the fixture README):
/// 64 MiB anon + 64 MiB shmem, then 16 MiB demoted by `memory.reclaim`.
#[test]
fn app_values() {
    let fs = CgroupFs::new(fixture_root("6.12"));
    let app = "test.slice/app";
    let s = fs.numa_stat(app).unwrap();
    assert_eq!(s.nodes(), cgroupctl::NodeSet::from_ids([0, 1]));
    assert_eq!((s.anon_bytes(0), s.anon_bytes(1)), (67252224, 0));
    // The tmpfs (shmem) pages are counted in `file`, and were what got demoted.
    assert_eq!((s.file_bytes(0), s.file_bytes(1)), (50331648, 16777216));
    assert_eq!(s.get("shmem", 1), Some(16777216));
    assert_eq!(
        s.resident_bytes(0) + s.resident_bytes(1),
        67252224 + 67108864
    );
    // pgdemote_* in numa_stat are pages, attributed to the source node:
    // 16 MiB = 4096 pages demoted from N0.
    assert_eq!(s.get("pgdemote_direct", 0), Some(4096));
    assert_eq!(s.get("pgdemote_direct", 1), Some(0));

    let m = fs.memory_stat(app).unwrap();
    assert_eq!((m.anon_bytes(), m.file_bytes()), (67252224, 67108864));
    assert_eq!(
        m.pgdemote_direct(),
        4096,
        "memory.reclaim demotes count as direct"
    );
    assert_eq!(
        (
            m.pgdemote_kswapd(),
            m.pgdemote_khugepaged(),
            m.pgpromote_success()
        ),
        (0, 0, 0)
    );
    assert_eq!(
        (
            m.numa_hint_faults(),
            m.numa_pte_updates(),
            m.numa_pages_migrated()
        ),
        (1, 512, 0)
    );

    assert_eq!(fs.memory_current(app).unwrap(), 135000064);
    assert_eq!(fs.memory_low(app).unwrap(), Limit::Bytes(0));
    assert_eq!(fs.memory_min(app).unwrap(), Limit::Bytes(0));
    assert_eq!(fs.memory_high(app).unwrap(), Limit::Max);
    assert_eq!(fs.memory_max(app).unwrap(), Limit::Max);
    let psi = fs.memory_pressure(app).unwrap();
    assert_eq!(psi.some.total_us, 0);
    assert_eq!(psi.full.unwrap().avg300, 0.0);
    assert!(
        fs.cpuset_mems(app).unwrap().is_empty(),
        "empty line: inherits the parent's"
    );
    assert_eq!(
        fs.cpuset_mems_effective(app).unwrap(),
        cgroupctl::NodeSet::from_ids([0, 1])
    );
    assert_eq!(fs.procs(app).unwrap(), vec![171, 197]);
    assert_eq!(fs.controllers(app).unwrap(), ["cpuset", "memory"]);
    assert!(
        fs.subtree_control(app).unwrap().is_empty(),
        "captured as a 0-byte file"
    );
    assert_eq!(
        fs.controllers("").unwrap(),
        ["cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"]
    );
    assert_eq!(
        fs.subtree_control("").unwrap(),
        ["cpuset", "cpu", "io", "memory"]
    );

    let all = fs.discover().unwrap();
    let paths: Vec<&str> = all.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["", "test.slice", "test.slice/app"]);
}

/// `/sys/kernel/debug/lru_gen` of the 6.12 guest (captured separately: a
/// 64 MiB Zipf tenant in `test.slice/app`, 16M written to its
/// `memory.reclaim`, so node 1 holds 4096 of its pages).
#[test]
fn captured_lru_gen_parses() {
    let file = fixture("6.12").join("sys/kernel/debug/lru_gen");
    let text = std::fs::read_to_string(&file).unwrap();
    let m = cgroupctl::lru_gen::parse(&file, &text).unwrap();
    let paths: Vec<&str> = m.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(paths, ["/", "/test.slice", "/test.slice/app"]);
    let app = &m[2];
    assert_eq!(app.id, 3);
    assert_eq!(app.max_seq(0), Some(9));
    // Generations 6 and 7 are older than the two youngest (8, 9).
    assert_eq!(app.evictable_pages(0), 607 + 88);
    let on_lower: u64 = app.nodes[&1].iter().map(|g| g.anon_pages).sum();
    assert_eq!(on_lower, 4096, "16 MiB demoted to node 1");
}

/// The same tenant on 7.3: `memory.reclaim`'s demotions are counted as
/// `pgdemote_proactive` (6.12: `pgdemote_direct`), with `pgsteal_proactive`
/// and `pgscan_proactive` beside them; the tmpfs pages demoted.
#[test]
fn app_values_7_3() {
    let fs = CgroupFs::new(fixture_root("7.3"));
    let app = "test.slice/app";
    let s = fs.numa_stat(app).unwrap();
    assert_eq!(s.nodes(), cgroupctl::NodeSet::from_ids([0, 1]));
    assert_eq!((s.anon_bytes(0), s.anon_bytes(1)), (67244032, 0));
    assert_eq!((s.file_bytes(0), s.file_bytes(1)), (50143232, 16965632));
    assert_eq!(s.get("shmem", 1), Some(16965632));
    assert_eq!(s.get("pgdemote_proactive", 0), Some(4142));
    assert_eq!(s.get("pgdemote_direct", 0), Some(0));

    let m = fs.memory_stat(app).unwrap();
    assert_eq!((m.anon_bytes(), m.file_bytes()), (67244032, 67108864));
    assert_eq!(
        m.pgdemote_proactive(),
        4142,
        "memory.reclaim demotes count as proactive"
    );
    assert_eq!(m.pgdemote_direct(), 0);
    assert_eq!(m.get("pgsteal_proactive"), Some(4142));
    assert_eq!(
        (
            m.pgdemote_kswapd(),
            m.pgdemote_khugepaged(),
            m.pgpromote_success()
        ),
        (0, 0, 0)
    );
    assert_eq!(fs.memory_current(app).unwrap(), 134926336);
    assert_eq!(fs.memory_low(app).unwrap(), Limit::Bytes(0));
    assert_eq!(fs.memory_max(app).unwrap(), Limit::Max);
    assert_eq!(fs.procs(app).unwrap(), vec![128, 147]);
    assert_eq!(
        fs.cpuset_mems_effective(app).unwrap(),
        cgroupctl::NodeSet::from_ids([0, 1])
    );
    let all = fs.discover().unwrap();
    let paths: Vec<&str> = all.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["", "test.slice", "test.slice/app"]);

    // 6.12 lacks the proactive counters: the accessor reads 0 there.
    let old = CgroupFs::new(fixture_root("6.12"))
        .memory_stat(app)
        .unwrap();
    assert_eq!(old.get("pgdemote_proactive"), None);
    assert_eq!(old.pgdemote_proactive(), 0);
}

/// `/sys/kernel/debug/lru_gen` of the 7.3 guest (the capture of
/// `cargo xtask fixtures --kernel 7.3`): the same per-memcg, per-node
/// generations; the app's 4142 demoted pages on node 1.
#[test]
fn captured_lru_gen_parses_7_3() {
    let file = fixture("7.3").join("sys/kernel/debug/lru_gen");
    let text = std::fs::read_to_string(&file).unwrap();
    let m = cgroupctl::lru_gen::parse(&file, &text).unwrap();
    let paths: Vec<&str> = m.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(paths, ["/", "/test.slice", "/test.slice/app"]);
    let app = &m[2];
    assert_eq!(app.id, 84);
    assert_eq!(app.max_seq(0), Some(5));
    let on_lower: u64 = app.nodes[&1].iter().map(|g| g.anon_pages).sum();
    assert_eq!(on_lower, 4142, "memory.reclaim's 4142 pages on node 1");
}
