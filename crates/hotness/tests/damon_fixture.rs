//! The DAMON driver against copies of the Linux 6.12 and 7.3 fixture trees.

use std::fs;
use std::path::{Path, PathBuf};

use hotness::damon::{
    read_tried_regions, Damon, Error, Filter, FilterKind, KdamondSpec, Ops, Scheme,
};
use hotness::{Attrs, TriedRegion};

fn fixtures() -> PathBuf {
    fixtures_of("6.12")
}

fn fixtures_of(kernel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/fixtures/linux-{kernel}"))
}

/// A writable copy of the one-kdamond fixture (state off), with scheme and
/// target directories 1..n duplicated from 0 (the kernel would create them
/// when nr_* is written).
fn tree(n: usize) -> (tempfile::TempDir, PathBuf) {
    tree_of("6.12", n)
}

/// [`tree`] from `kernel`'s capture, at `<tmp>/sys/kernel/mm/damon/admin`
/// beside a copy of its `sys/module/damon_stat` (if captured).
fn tree_of(kernel: &str, n: usize) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sys/kernel/mm/damon/admin");
    testbed::copy_tree(
        &fixtures_of(kernel).join("sys/kernel/mm/damon/admin"),
        &root,
    );
    let stat = fixtures_of(kernel).join("sys/module/damon_stat");
    if stat.is_dir() {
        testbed::copy_tree(&stat, &tmp.path().join("sys/module/damon_stat"));
    }
    let c = root.join("kdamonds/0/contexts/0");
    for i in 1..n {
        testbed::copy_tree(&c.join("schemes/0"), &c.join("schemes").join(i.to_string()));
        testbed::copy_tree(&c.join("targets/0"), &c.join("targets").join(i.to_string()));
    }
    (tmp, root)
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn snapshot(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(snapshot(&e.path()));
        } else {
            out.push((e.path(), read(&e.path())));
        }
    }
    out.sort();
    out
}

/// Marks `root`'s kdamond 0 as created by us with `nr` kdamonds.
fn ours(state: &Path, nr: usize, pid: Option<u32>) {
    let pid = pid.map_or("null".to_string(), |p| p.to_string());
    fs::write(
        state,
        format!(r#"{{"nr_kdamonds":{nr},"kdamonds":[{{"index":0,"pid":{pid}}}]}}"#),
    )
    .unwrap();
}

#[test]
fn claim_on_empty_creates_and_records() {
    let (tmp, root) = tree(1);
    fs::write(root.join("kdamonds/nr_kdamonds"), "0\n").unwrap();
    let state = tmp.path().join("run/tierd/damon.json");
    let mut d = Damon::new(&root, &state);
    d.check_available().unwrap();
    let c = d.claim(1).unwrap();
    assert_eq!(c.indices, vec![0]);
    assert_eq!(c.adopted, vec![false]);
    assert_eq!(read(&root.join("kdamonds/nr_kdamonds")), "1");
    let rec: serde_json::Value = serde_json::from_str(&read(&state)).unwrap();
    assert_eq!(rec["nr_kdamonds"], 1);
    assert_eq!(rec["kdamonds"][0]["index"], 0);
}

#[test]
fn claim_refuses_foreign_and_writes_nothing() {
    let (tmp, root) = tree(1);
    let before = snapshot(&root);
    let state = tmp.path().join("damon.json");
    let mut d = Damon::new(&root, &state);
    let e = d.claim(1).unwrap_err();
    match &e {
        Error::Foreign { path, detail } => {
            assert!(path.ends_with("kdamonds/0"), "{path:?}");
            assert!(detail.contains("echo 0 >"), "{detail}");
        }
        other => panic!("expected Foreign, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("kdamonds/0") && msg.contains("nr_kdamonds"),
        "{msg}"
    );
    assert_eq!(snapshot(&root), before, "a foreign claim must not write");
    assert!(!state.exists());
}

#[test]
fn claim_adopts_ours_off_and_running() {
    let (tmp, root) = tree(1);
    let state = tmp.path().join("damon.json");
    // Off, nr_kdamonds unchanged: adopted as ours, not running.
    ours(&state, 1, None);
    let mut d = Damon::new(&root, &state);
    let c = d.claim(1).unwrap();
    assert_eq!((c.indices, c.adopted), (vec![0], vec![false]));
    assert_eq!(read(&root.join("kdamonds/nr_kdamonds")).trim(), "1");

    // Running with the recorded kthread pid: adopted, running.
    fs::write(root.join("kdamonds/0/state"), "on\n").unwrap();
    fs::write(root.join("kdamonds/0/pid"), "195\n").unwrap();
    ours(&state, 1, Some(195));
    let mut d = Damon::new(&root, &state);
    let c = d.claim(1).unwrap();
    assert_eq!((c.indices, c.adopted), (vec![0], vec![true]));

    // Running with another pid: someone else restarted it.
    fs::write(root.join("kdamonds/0/pid"), "300\n").unwrap();
    let mut d = Damon::new(&root, &state);
    assert!(matches!(d.claim(1), Err(Error::Foreign { .. })));

    // Off but nr_kdamonds changed since we recorded it: recreated by someone else.
    fs::write(root.join("kdamonds/0/state"), "off\n").unwrap();
    ours(&state, 2, None);
    let mut d = Damon::new(&root, &state);
    assert!(matches!(d.claim(1), Err(Error::Foreign { .. })));
}

#[test]
fn claim_of_more_than_ours_recreates_when_all_are_ours() {
    let (tmp, root) = tree(1);
    let state = tmp.path().join("damon.json");
    ours(&state, 1, None);
    let mut d = Damon::new(&root, &state);
    let c = d.claim(2).unwrap();
    assert_eq!(c.indices, vec![0, 1]);
    assert_eq!(read(&root.join("kdamonds/nr_kdamonds")), "2");
}

fn spec(pids: Vec<u32>) -> KdamondSpec {
    let mut schemes: Vec<Scheme> = (0..pids.len() as u32)
        .map(Scheme::stat_for_target)
        .collect();
    schemes[0].filters.push(Filter {
        kind: FilterKind::Memcg("/tierd.slice/a".into()),
        matching: true,
    });
    KdamondSpec {
        ops: Ops::Vaddr,
        attrs: Attrs::default(),
        pids,
        schemes,
    }
}

#[test]
fn write_spec_writes_every_file() {
    let (tmp, root) = tree(2);
    let state = tmp.path().join("damon.json");
    ours(&state, 1, None);
    let mut d = Damon::new(&root, &state);
    d.claim(1).unwrap();
    // Fixture has one filter per scheme; the kernel would add the second.
    let s0 = root.join("kdamonds/0/contexts/0/schemes/0");
    testbed::copy_tree(&s0.join("filters/0"), &s0.join("filters/1"));
    d.write_spec(0, &spec(vec![12, 34])).unwrap();
    let c = root.join("kdamonds/0/contexts/0");
    let f = |p: &str| read(&c.join(p));
    assert_eq!(
        read(&root.join("kdamonds/0/contexts/nr_contexts")).trim(),
        "1"
    );
    assert_eq!(f("operations"), "vaddr");
    assert_eq!(f("monitoring_attrs/intervals/sample_us"), "5000");
    assert_eq!(f("monitoring_attrs/intervals/aggr_us"), "100000");
    assert_eq!(f("monitoring_attrs/intervals/update_us"), "1000000");
    assert_eq!(f("monitoring_attrs/nr_regions/min"), "10");
    assert_eq!(f("monitoring_attrs/nr_regions/max"), "1000");
    assert_eq!(f("targets/nr_targets"), "2");
    assert_eq!(f("targets/0/pid_target"), "12");
    assert_eq!(f("targets/1/pid_target"), "34");
    assert_eq!(f("schemes/nr_schemes"), "2");
    for i in 0..2 {
        let s = |p: &str| f(&format!("schemes/{i}/{p}"));
        assert_eq!(s("action"), "stat");
        assert_eq!(s("target_nid"), "-1");
        assert_eq!(s("apply_interval_us"), "0");
        for k in ["sz", "nr_accesses", "age"] {
            assert_eq!(s(&format!("access_pattern/{k}/min")), "0");
            assert_eq!(s(&format!("access_pattern/{k}/max")), "4294967295");
        }
        assert_eq!(s("quotas/bytes"), "0");
        assert_eq!(s("quotas/goals/nr_goals"), "0");
        assert_eq!(s("watermarks/metric"), "none");
        assert_eq!(s("filters/0/type"), "target");
        assert_eq!(s("filters/0/matching"), "N");
        assert_eq!(s("filters/0/damon_target_idx"), i.to_string());
    }
    assert_eq!(f("schemes/0/filters/nr_filters"), "2");
    assert_eq!(f("schemes/1/filters/nr_filters").trim(), "1");
    assert_eq!(f("schemes/0/filters/1/type"), "memcg");
    assert_eq!(f("schemes/0/filters/1/matching"), "Y");
    // No trailing newline: 6.12 keeps memcg_path verbatim.
    assert_eq!(f("schemes/0/filters/1/memcg_path"), "/tierd.slice/a");
}

#[test]
fn write_spec_paddr_uses_system_ram_and_migrate_fields() {
    let (tmp, root) = tree(1);
    let state = tmp.path().join("damon.json");
    ours(&state, 1, None);
    let iomem = tmp.path().join("iomem");
    fs::write(
        &iomem,
        "00000000-00000fff : Reserved\n00001000-0009fbff : System RAM\n00100000-7ffdefff : System RAM\n  01000000-01ffffff : Kernel code\n",
    )
    .unwrap();
    let c = root.join("kdamonds/0/contexts/0");
    testbed::copy_tree(&c.join("targets/0/regions"), &c.join("targets/0/regions")); // exists
    for r in 0..2 {
        let d = c.join(format!("targets/0/regions/{r}"));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("start"), "0").unwrap();
        fs::write(d.join("end"), "0").unwrap();
    }
    let mut d = Damon::new(&root, &state).with_iomem(&iomem);
    d.claim(1).unwrap();
    let mut s = Scheme::stat();
    s.action = hotness::Action::MigrateHot;
    s.target_nid = Some(0);
    s.quota.bytes = 64 << 20;
    s.quota.reset_interval_ms = 1000;
    s.filters = vec![Filter {
        kind: FilterKind::Addr {
            start: 4096,
            end: 8192,
        },
        matching: false,
    }];
    let sp = KdamondSpec {
        ops: Ops::Paddr,
        attrs: Attrs::default(),
        pids: vec![],
        schemes: vec![s],
    };
    d.write_spec(0, &sp).unwrap();
    let f = |p: &str| read(&c.join(p));
    assert_eq!(f("operations"), "paddr");
    assert_eq!(f("targets/nr_targets").trim(), "1");
    assert_eq!(f("targets/0/regions/nr_regions"), "2");
    assert_eq!(f("targets/0/regions/0/start"), "4096");
    assert_eq!(f("targets/0/regions/0/end"), "654336");
    assert_eq!(f("targets/0/regions/1/start"), "1048576");
    assert_eq!(f("targets/0/regions/1/end"), "2147348480");
    assert_eq!(f("schemes/0/action"), "migrate_hot");
    assert_eq!(f("schemes/0/target_nid"), "0");
    assert_eq!(f("schemes/0/quotas/bytes"), "67108864");
    assert_eq!(f("schemes/0/quotas/reset_interval_ms"), "1000");
    assert_eq!(f("schemes/0/filters/0/type"), "addr");
    assert_eq!(f("schemes/0/filters/0/addr_start"), "4096");
    assert_eq!(f("schemes/0/filters/0/addr_end"), "8192");
    // pids with paddr is a spec error.
    let bad = KdamondSpec {
        pids: vec![1],
        ..sp
    };
    assert!(matches!(d.write_spec(0, &bad), Err(Error::Spec { .. })));
}

#[test]
fn unclaimed_index_is_refused() {
    let (tmp, root) = tree(1);
    let d = Damon::new(&root, tmp.path().join("s.json"));
    assert!(matches!(
        d.write_spec(0, &spec(vec![1])),
        Err(Error::NotClaimed { idx: 0, .. })
    ));
    assert!(matches!(d.start(0), Err(Error::NotClaimed { .. })));
}

#[test]
fn start_records_pid_and_release_cleans_up() {
    let (tmp, root) = tree(1);
    let state = tmp.path().join("damon.json");
    ours(&state, 1, None);
    let mut d = Damon::new(&root, &state);
    d.claim(1).unwrap();
    assert!(!d.is_running(0).unwrap());
    assert_eq!(d.kdamond_pid(0).unwrap(), None);
    d.start(0).unwrap();
    // The fixture is not a kernel: "on" was written, pid stays what the file says.
    assert_eq!(read(&root.join("kdamonds/0/state")), "on");
    fs::write(root.join("kdamonds/0/pid"), "4242\n").unwrap();
    d.start(0).unwrap(); // already running: records the pid
    let rec: serde_json::Value = serde_json::from_str(&read(&state)).unwrap();
    assert_eq!(rec["kdamonds"][0]["pid"], 4242);
    assert_eq!(d.kdamond_pid(0).unwrap(), Some(4242));
    d.release().unwrap();
    assert_eq!(read(&root.join("kdamonds/0/state")), "off");
    assert_eq!(read(&root.join("kdamonds/nr_kdamonds")), "0");
    assert!(!state.exists());
}

#[test]
fn check_available_names_the_missing_root() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Damon::new(tmp.path().join("nope"), tmp.path().join("s.json"));
    let e = d.check_available().unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }));
    assert!(e.to_string().contains("CONFIG_DAMON_SYSFS"), "{e}");
}

fn real_scheme(i: usize) -> PathBuf {
    fixtures().join(format!(
        "damon-tried/sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/{i}/tried_regions"
    ))
}

#[test]
fn real_tried_regions_with_global_numbering() {
    let s0 = read_tried_regions(&real_scheme(0)).unwrap();
    let s1 = read_tried_regions(&real_scheme(1)).unwrap();
    assert_eq!(s0.len(), 8, "scheme 0 has dirs 0..=7");
    assert_eq!(s1.len(), 15, "scheme 1 has dirs 8..=22");
    for s in [&s0, &s1] {
        assert!(
            s.windows(2).all(|w| w[0].end <= w[1].start),
            "sorted, disjoint"
        );
    }
    let total = |s: &[TriedRegion]| s.iter().map(|r| r.len()).sum::<u64>();
    let tb = |i| {
        read(&real_scheme(i).join("total_bytes"))
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(total(&s0), tb(0));
    assert_eq!(total(&s1), tb(1));
    assert_eq!(
        s1[4],
        TriedRegion {
            start: 139974934556672,
            end: 139974945800192,
            nr_accesses: 8,
            age: 0
        }
    );
    assert!(s1.iter().all(|r| r.nr_accesses <= 20));
}

#[test]
fn real_stats_and_running_state() {
    let root = fixtures().join("damon-tried/sys/kernel/mm/damon/admin");
    let st = hotness::damon::read_scheme_stats(&root.join("kdamonds/0/contexts/0/schemes/1/stats"))
        .unwrap();
    assert_eq!(st.nr_tried, 2085);
    assert_eq!(st.sz_tried, 27321495552);
    assert_eq!(st.nr_applied, 0);
    let d = Damon::new(&root, "/nonexistent/state.json");
    assert!(d.is_running(0).unwrap());
    assert_eq!(d.kdamond_pid(0).unwrap(), Some(195));
}

#[test]
fn malformed_values_are_parse_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tried_regions");
    testbed::copy_tree(&real_scheme(0), &dir);
    fs::write(dir.join("3/nr_accesses"), "lots\n").unwrap();
    match read_tried_regions(&dir) {
        Err(Error::Parse { path, value }) => {
            assert!(path.ends_with("3/nr_accesses"), "{path:?}");
            assert_eq!(value, "lots");
        }
        other => panic!("{other:?}"),
    }
    let (tmp2, root) = tree(1);
    fs::write(root.join("kdamonds/0/state"), "maybe\n").unwrap();
    let d = Damon::new(&root, tmp2.path().join("s.json"));
    let e = d.is_running(0).unwrap_err();
    assert!(e.to_string().contains("kdamonds/0/state"), "{e}");
    fs::write(root.join("kdamonds/0/pid"), "x\n").unwrap();
    assert!(matches!(d.kdamond_pid(0), Err(Error::Parse { .. })));
}

/// 7.3's scheme directories have `core_filters/` and `ops_filters/` beside
/// the deprecated `filters/`: the target filter (core layer) goes to the
/// first, the memcg filter (ops layer) to the second, `filters/` is emptied.
#[test]
fn write_spec_on_7_3_splits_filters_by_layer() {
    let (tmp, root) = tree_of("7.3", 2);
    let state = tmp.path().join("damon.json");
    ours(&state, 1, None);
    // As an operator does before tierd may use DAMON on 7.x.
    fs::write(
        tmp.path().join("sys/module/damon_stat/parameters/enabled"),
        "N\n",
    )
    .unwrap();
    let mut d = Damon::new(&root, &state);
    d.claim(1).unwrap();
    let s0 = root.join("kdamonds/0/contexts/0/schemes/0");
    for dir in ["core_filters", "ops_filters", "filters"] {
        assert!(
            s0.join(dir).join("0/type").is_file(),
            "{dir} in the 7.3 capture"
        );
    }
    d.write_spec(0, &spec(vec![12, 34])).unwrap();
    let f = |p: &str| read(&s0.join(p));
    assert_eq!(f("filters/nr_filters").trim(), "0");
    assert_eq!(f("core_filters/nr_filters").trim(), "1");
    assert_eq!(f("core_filters/0/type"), "target");
    assert_eq!(f("core_filters/0/matching"), "N");
    assert_eq!(f("core_filters/0/damon_target_idx"), "0");
    assert_eq!(f("ops_filters/nr_filters").trim(), "1");
    assert_eq!(f("ops_filters/0/type"), "memcg");
    assert_eq!(f("ops_filters/0/matching"), "Y");
    assert_eq!(f("ops_filters/0/memcg_path"), "/tierd.slice/a");
    // The rest is written as on 6.12.
    let c = root.join("kdamonds/0/contexts/0");
    assert_eq!(read(&c.join("targets/1/pid_target")), "34");
    assert_eq!(read(&c.join("schemes/1/action")), "stat");
}

/// On 7.3 DAMON_STAT runs from boot (`enabled` = Y in the capture): DAMON
/// is refused with the file to write N to, tierd writes nothing; once the
/// operator has written N it is available.
#[test]
fn damon_stat_running_is_refused_naming_its_parameter() {
    let (tmp, root) = tree_of("7.3", 1);
    let enabled = tmp.path().join("sys/module/damon_stat/parameters/enabled");
    assert_eq!(
        read(&enabled).trim(),
        "Y",
        "the 7.3 capture has DAMON_STAT on"
    );
    let before = snapshot(tmp.path());
    let mut d = Damon::new(&root, tmp.path().join("damon.json"));
    assert!(d.damon_stat_running());
    let e = d.check_available().unwrap_err();
    assert!(matches!(e, Error::HeldByDamonStat { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&enabled.display().to_string()) && msg.contains("Write N"),
        "{msg}"
    );
    assert!(d.claim(1).is_err());
    assert_eq!(
        snapshot(tmp.path()),
        before,
        "nothing written while DAMON_STAT runs"
    );
    fs::write(&enabled, "N\n").unwrap();
    d.check_available().unwrap();
    // 6.12 has no DAMON_STAT at all.
    let (_t, old) = tree(1);
    assert!(!Damon::new(&old, _t.path().join("s.json")).damon_stat_running());
}
