//! Table-driven tests over fixture trees written into temp dirs.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::*;

/// A fake cgroup2 mount in a temp dir.
struct Tree {
    _dir: tempfile::TempDir,
    fs: CgroupFs,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fs = CgroupFs::new(dir.path());
        Tree { _dir: dir, fs }
    }

    /// Writes `content` to `rel` (relative to the root), creating parents.
    fn file(&self, rel: &str, content: &[u8]) -> &Self {
        let p = self.fs.root().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
        self
    }

    fn mkdir(&self, rel: &str) -> &Self {
        fs::create_dir_all(self.fs.root().join(rel)).unwrap();
        self
    }

    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.fs.root().join(rel)).unwrap()
    }
}

/// Reader `$method` on cgroup `app` whose `$file` holds `$content` gives `$expected`.
macro_rules! test_success {
    ($name:ident, $method:ident, $file:expr, $content:expr, $expected:expr) => {
        #[test]
        fn $name() {
            let t = Tree::new();
            t.file(concat!("app/", $file), $content);
            assert_eq!(t.fs.$method("app").unwrap(), $expected);
        }
    };
}

/// Reader `$method` on `$content` fails with a parse error on `$line` whose
/// reason contains `$reason`, naming the file.
macro_rules! test_failure {
    ($name:ident, $method:ident, $file:expr, $content:expr, $line:expr, $reason:expr) => {
        #[test]
        fn $name() {
            let t = Tree::new();
            t.file(concat!("app/", $file), $content);
            match t.fs.$method("app") {
                Err(e @ Error::Parse { .. }) => {
                    let Error::Parse { path, line, reason } = &e else {
                        unreachable!()
                    };
                    assert!(path.ends_with(concat!("app/", $file)), "{e}");
                    assert_eq!(*line, $line, "{e}");
                    assert!(reason.contains($reason), "{e}");
                    assert!(e.to_string().contains($file), "{e}");
                }
                other => panic!("expected a parse error, got {other:?}"),
            }
        }
    };
}

fn numa(rows: &[(&str, &[(u32, u64)])]) -> NumaStat {
    NumaStat {
        stats: rows
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().copied().collect()))
            .collect(),
    }
}

fn mstat(rows: &[(&str, u64)]) -> MemoryStat {
    MemoryStat {
        stats: rows.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    }
}

fn ns(ids: &[u32]) -> NodeSet {
    NodeSet::from_ids(ids.iter().copied())
}

fn psi_line(avg10: f64, avg60: f64, avg300: f64, total_us: u64) -> PsiLine {
    PsiLine {
        avg10,
        avg60,
        avg300,
        total_us,
    }
}

// ---- memory.numa_stat ------------------------------------------------------

test_success!(
    numa_stat_two_nodes,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=1138688 N1=4096\nfile N0=8192 N1=0\npgpromote_success N0=0 N1=3\n",
    numa(&[
        ("anon", &[(0, 1138688), (1, 4096)]),
        ("file", &[(0, 8192), (1, 0)]),
        ("pgpromote_success", &[(0, 0), (1, 3)])
    ])
);
test_success!(
    numa_stat_no_trailing_newline,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=1",
    numa(&[("anon", &[(0, 1)])])
);
test_success!(
    numa_stat_sparse_node_ids,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=1 N3=2\n",
    numa(&[("anon", &[(0, 1), (3, 2)])])
);
test_success!(
    numa_stat_u64_max,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=18446744073709551615\n",
    numa(&[("anon", &[(0, u64::MAX)])])
);
test_failure!(
    numa_stat_empty,
    numa_stat,
    "memory.numa_stat",
    b"",
    1,
    "empty"
);
test_failure!(
    numa_stat_blank,
    numa_stat,
    "memory.numa_stat",
    b"\n\n",
    1,
    "empty"
);
test_failure!(
    numa_stat_no_nodes,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=1\nfile\n",
    2,
    "no per-node values"
);
test_failure!(
    numa_stat_bad_token,
    numa_stat,
    "memory.numa_stat",
    b"anon 0=1\n",
    1,
    "expected N<node>=<value>"
);
test_failure!(
    numa_stat_negative,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=-1\n",
    1,
    "expected an unsigned integer"
);
test_failure!(
    numa_stat_overflow,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=18446744073709551616\n",
    1,
    "does not fit"
);
test_failure!(
    numa_stat_max,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=max\n",
    1,
    "expected an unsigned integer"
);
test_failure!(
    numa_stat_dup_node,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=1 N0=2\n",
    1,
    "listed twice"
);
test_failure!(
    numa_stat_dup_key,
    numa_stat,
    "memory.numa_stat",
    b"anon N0=1\nanon N0=2\n",
    2,
    "appears twice"
);
test_failure!(
    numa_stat_flat_stat,
    numa_stat,
    "memory.numa_stat",
    b"anon 4096\n",
    1,
    "expected N<node>=<value>"
);
test_failure!(
    numa_stat_garbage,
    numa_stat,
    "memory.numa_stat",
    b"\xff\xfe\n",
    1,
    "not UTF-8"
);

#[test]
fn numa_stat_helpers() {
    let s = numa(&[
        ("anon", &[(0, 100), (1, 10)]),
        ("file", &[(0, 50), (2, 5)]),
        ("shmem", &[(0, 40)]),
    ]);
    assert_eq!(s.anon_bytes(0), 100);
    assert_eq!(s.file_bytes(0), 50);
    assert_eq!(s.resident_bytes(0), 150, "shmem is inside file, not added");
    assert_eq!(s.resident_bytes(1), 10);
    assert_eq!(s.resident_bytes(2), 5);
    assert_eq!(s.resident_bytes(7), 0);
    assert_eq!(s.nodes(), ns(&[0, 1, 2]));
    assert_eq!(s.get("shmem", 0), Some(40));
    assert_eq!(s.get("shmem", 1), None);
}

// ---- memory.stat -----------------------------------------------------------

const MEMORY_STAT: &[u8] = b"anon 1138688\nfile 8192\nkernel 327680\nshmem 0\n\
pgdemote_kswapd 12\npgdemote_direct 34\npgdemote_khugepaged 0\npgpromote_success 5\n\
numa_pages_migrated 5\nnuma_pte_updates 1024\nnuma_hint_faults 77\n";

test_success!(
    memory_stat_tiering_keys,
    memory_stat,
    "memory.stat",
    MEMORY_STAT,
    mstat(&[
        ("anon", 1138688),
        ("file", 8192),
        ("kernel", 327680),
        ("shmem", 0),
        ("pgdemote_kswapd", 12),
        ("pgdemote_direct", 34),
        ("pgdemote_khugepaged", 0),
        ("pgpromote_success", 5),
        ("numa_pages_migrated", 5),
        ("numa_pte_updates", 1024),
        ("numa_hint_faults", 77)
    ])
);
test_success!(
    memory_stat_no_trailing_newline,
    memory_stat,
    "memory.stat",
    b"anon 1",
    mstat(&[("anon", 1)])
);
test_success!(
    memory_stat_u64_max,
    memory_stat,
    "memory.stat",
    b"anon 18446744073709551615\n",
    mstat(&[("anon", u64::MAX)])
);
test_failure!(
    memory_stat_empty,
    memory_stat,
    "memory.stat",
    b"",
    1,
    "empty"
);
test_failure!(
    memory_stat_max,
    memory_stat,
    "memory.stat",
    b"anon max\n",
    1,
    "unsigned integer"
);
test_failure!(
    memory_stat_three_fields,
    memory_stat,
    "memory.stat",
    b"anon 1\nfile 1 2\n",
    2,
    "expected `key value`"
);
test_failure!(
    memory_stat_numa_shape,
    memory_stat,
    "memory.stat",
    b"anon N0=1\n",
    1,
    "unsigned integer"
);
test_failure!(
    memory_stat_dup,
    memory_stat,
    "memory.stat",
    b"anon 1\nanon 2\n",
    2,
    "twice"
);
test_failure!(
    memory_stat_garbage,
    memory_stat,
    "memory.stat",
    b"garbage\n",
    1,
    "expected `key value`"
);

#[test]
fn memory_stat_accessors() {
    let t = Tree::new();
    t.file("app/memory.stat", MEMORY_STAT);
    let s = t.fs.memory_stat("app").unwrap();
    assert_eq!((s.anon_bytes(), s.file_bytes()), (1138688, 8192));
    assert_eq!(
        (
            s.pgdemote_kswapd(),
            s.pgdemote_direct(),
            s.pgdemote_khugepaged()
        ),
        (12, 34, 0)
    );
    assert_eq!(s.pgpromote_success(), 5);
    assert_eq!(
        (
            s.numa_hint_faults(),
            s.numa_pages_migrated(),
            s.numa_pte_updates()
        ),
        (77, 5, 1024)
    );
    // A kernel without NUMA balancing has no numa_* keys: 0, not an error.
    assert_eq!(mstat(&[("anon", 1)]).numa_hint_faults(), 0);
}

// ---- memory.current and limits ---------------------------------------------

test_success!(
    current_bytes,
    memory_current,
    "memory.current",
    b"1138688\n",
    1138688
);
test_success!(
    current_zero_no_newline,
    memory_current,
    "memory.current",
    b"0",
    0
);
test_failure!(
    current_empty,
    memory_current,
    "memory.current",
    b"",
    1,
    "empty"
);
test_failure!(
    current_max,
    memory_current,
    "memory.current",
    b"max\n",
    1,
    "unsigned integer"
);
test_failure!(
    current_two_lines,
    memory_current,
    "memory.current",
    b"1\n2\n",
    2,
    "one line"
);
test_failure!(
    current_garbage,
    memory_current,
    "memory.current",
    b"12k\n",
    1,
    "unsigned integer"
);

test_success!(low_max, memory_low, "memory.low", b"max\n", Limit::Max);
test_success!(low_zero, memory_low, "memory.low", b"0\n", Limit::Bytes(0));
test_success!(
    low_bytes_no_newline,
    memory_low,
    "memory.low",
    b"209715200",
    Limit::Bytes(209715200)
);
test_success!(high_max, memory_high, "memory.high", b"max\n", Limit::Max);
test_success!(
    max_bytes,
    memory_max,
    "memory.max",
    b"1073741824\n",
    Limit::Bytes(1 << 30)
);
test_success!(min_zero, memory_min, "memory.min", b"0\n", Limit::Bytes(0));
test_failure!(low_empty, memory_low, "memory.low", b"", 1, "empty");
test_failure!(
    low_negative,
    memory_low,
    "memory.low",
    b"-1\n",
    1,
    "(or \"max\")"
);
test_failure!(
    low_suffix,
    memory_low,
    "memory.low",
    b"200M\n",
    1,
    "unsigned integer"
);
test_failure!(
    max_capitalised,
    memory_max,
    "memory.max",
    b"MAX\n",
    1,
    "unsigned integer"
);

// ---- cpu.stat and cpu.pressure ---------------------------------------------

#[test]
fn cpu_stat_without_the_cpu_controller() {
    // The three keys every cgroup has (cgroup-v2.rst "cpu.stat").
    let t = Tree::new();
    t.file(
        "app/cpu.stat",
        b"usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
    );
    let s = t.fs.cpu_stat("app").unwrap();
    assert_eq!(
        (s.usage_usec(), s.user_usec(), s.system_usec()),
        (2_500_000, 2_000_000, 500_000)
    );
    assert_eq!(s.get("nr_throttled"), None);
}
test_failure!(
    cpu_stat_without_usage,
    cpu_stat,
    "cpu.stat",
    b"user_usec 1\nsystem_usec 2\n",
    1,
    "no usage_usec"
);
test_failure!(
    cpu_stat_bad_value,
    cpu_stat,
    "cpu.stat",
    b"usage_usec -1\n",
    1,
    "unsigned integer"
);
test_success!(cpu_pressure_some_full, cpu_pressure, "cpu.pressure",
    b"some avg10=12.50 avg60=3.00 avg300=0.75 total=987654\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=11\n",
    Psi { some: psi_line(12.5, 3.0, 0.75, 987654), full: Some(psi_line(0.0, 0.0, 0.0, 11)) });

// ---- memory.pressure -------------------------------------------------------

test_success!(pressure_some_full, memory_pressure, "memory.pressure",
    b"some avg10=0.00 avg60=1.50 avg300=99.99 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
    Psi { some: psi_line(0.0, 1.5, 99.99, 123456), full: Some(psi_line(0.0, 0.0, 0.0, 7)) });
test_success!(
    pressure_some_only,
    memory_pressure,
    "memory.pressure",
    b"some avg10=1.00 avg60=2.00 avg300=3.00 total=4",
    Psi {
        some: psi_line(1.0, 2.0, 3.0, 4),
        full: None
    }
);
test_success!(
    pressure_extra_field_ignored,
    memory_pressure,
    "memory.pressure",
    b"some avg10=1.00 avg60=2.00 avg300=3.00 total=4 avg1000=5.00\n",
    Psi {
        some: psi_line(1.0, 2.0, 3.0, 4),
        full: None
    }
);
test_failure!(
    pressure_empty,
    memory_pressure,
    "memory.pressure",
    b"",
    1,
    "empty"
);
test_failure!(
    pressure_full_only,
    memory_pressure,
    "memory.pressure",
    b"full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    1,
    "no `some` line"
);
test_failure!(
    pressure_missing_total,
    memory_pressure,
    "memory.pressure",
    b"some avg10=0.00 avg60=0.00 avg300=0.00\n",
    1,
    "needs avg10"
);
test_failure!(
    pressure_bad_avg,
    memory_pressure,
    "memory.pressure",
    b"some avg10=x avg60=0.00 avg300=0.00 total=0\n",
    1,
    "percentage"
);
test_failure!(
    pressure_nan,
    memory_pressure,
    "memory.pressure",
    b"some avg10=NaN avg60=0.00 avg300=0.00 total=0\n",
    1,
    "percentage"
);
test_failure!(
    pressure_max,
    memory_pressure,
    "memory.pressure",
    b"some avg10=0.00 avg60=0.00 avg300=0.00 total=max\n",
    2 - 1,
    "unsigned integer"
);
test_failure!(
    pressure_garbage,
    memory_pressure,
    "memory.pressure",
    b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nwhat\n",
    2,
    "`some` or `full`"
);
test_failure!(
    pressure_dup,
    memory_pressure,
    "memory.pressure",
    b"some avg10=0 avg60=0 avg300=0 total=0\nsome avg10=0 avg60=0 avg300=0 total=0\n",
    2,
    "twice"
);

// ---- cpuset.mems -----------------------------------------------------------

test_success!(
    mems_range,
    cpuset_mems,
    "cpuset.mems",
    b"0-1\n",
    ns(&[0, 1])
);
test_success!(
    mems_list,
    cpuset_mems,
    "cpuset.mems",
    b"0-1,3",
    ns(&[0, 1, 3])
);
test_success!(mems_empty_line, cpuset_mems, "cpuset.mems", b"\n", ns(&[]));
test_success!(mems_empty_file, cpuset_mems, "cpuset.mems", b"", ns(&[]));
test_success!(
    mems_effective,
    cpuset_mems_effective,
    "cpuset.mems.effective",
    b"0\n",
    ns(&[0])
);
test_failure!(
    mems_max,
    cpuset_mems,
    "cpuset.mems",
    b"max\n",
    1,
    "not a node list"
);
test_failure!(
    mems_garbage,
    cpuset_mems,
    "cpuset.mems",
    b"0-\n",
    1,
    "not a decimal id"
);
test_failure!(
    mems_two_lines,
    cpuset_mems,
    "cpuset.mems",
    b"0\n1\n",
    2,
    "one line"
);

// ---- cgroup.procs, cgroup.controllers ---------------------------------------

test_success!(
    procs_some,
    procs,
    "cgroup.procs",
    b"1\n42\n31337\n",
    vec![1, 42, 31337]
);
test_success!(procs_empty, procs, "cgroup.procs", b"", Vec::<i32>::new());
test_success!(
    procs_no_trailing_newline,
    procs,
    "cgroup.procs",
    b"7",
    vec![7]
);
test_failure!(
    procs_garbage,
    procs,
    "cgroup.procs",
    b"1\nx\n",
    2,
    "expected a PID"
);
test_failure!(
    procs_zero,
    procs,
    "cgroup.procs",
    b"0\n",
    1,
    "expected a PID"
);
test_failure!(
    procs_max,
    procs,
    "cgroup.procs",
    b"max\n",
    1,
    "expected a PID"
);

test_success!(
    controllers_list,
    controllers,
    "cgroup.controllers",
    b"cpuset cpu io memory hugetlb pids rdma misc\n",
    vec!["cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"]
);
test_success!(
    controllers_empty,
    controllers,
    "cgroup.controllers",
    b"",
    Vec::<String>::new()
);
test_success!(
    subtree_blank_line,
    subtree_control,
    "cgroup.subtree_control",
    b"\n",
    Vec::<String>::new()
);
test_success!(
    subtree_no_newline,
    subtree_control,
    "cgroup.subtree_control",
    b"memory",
    vec!["memory"]
);
test_failure!(
    controllers_garbage,
    controllers,
    "cgroup.controllers",
    b"+memory\n",
    1,
    "not a controller name"
);
test_failure!(
    controllers_two_lines,
    subtree_control,
    "cgroup.subtree_control",
    b"cpu\nmemory\n",
    2,
    "one line"
);

// ---- errors: missing files, vanished cgroups ---------------------------------

#[test]
fn missing_cgroup_is_vanished() {
    let t = Tree::new();
    let e = t.fs.numa_stat("gone.service").unwrap_err();
    assert!(
        matches!(&e, Error::Vanished(p) if p.ends_with("gone.service/memory.numa_stat")),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("gone.service/memory.numa_stat"),
        "{e}"
    );
    assert!(matches!(
        t.fs.cgroup_id("gone.service"),
        Err(Error::Vanished(_))
    ));
    assert!(matches!(
        t.fs.reclaim("gone.service", 4096),
        Err(Error::Vanished(_))
    ));
    assert!(matches!(
        t.fs.set_memory_low("gone.service", Limit::Max),
        Err(Error::Vanished(_))
    ));
}

#[test]
fn missing_file_in_live_cgroup_is_io_error() {
    // The memory controller is not enabled for this cgroup: its dir exists,
    // the memory.* files do not. That is a configuration problem, not a
    // vanished cgroup.
    let t = Tree::new();
    t.mkdir("app");
    let e = t.fs.memory_low("app").unwrap_err();
    match &e {
        Error::Io { path, source } => {
            assert!(path.ends_with("app/memory.low"));
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
        }
        other => panic!("{other:?}"),
    }
    assert!(e
        .to_string()
        .starts_with(&t.fs.root().join("app/memory.low").display().to_string()));
    assert!(
        matches!(
            t.fs.set_memory_low("app", Limit::Max),
            Err(Error::Io { .. })
        ),
        "writes never create files"
    );
    assert!(!t.fs.root().join("app/memory.low").exists());
}

#[test]
fn errno_mapping() {
    let t = Tree::new();
    t.mkdir("app");
    let dir = t.fs.dir("app");
    let file = dir.join("memory.reclaim");
    let os = io::Error::from_raw_os_error;
    assert_eq!(
        reclaim_outcome(&dir, &file, Ok(())).unwrap(),
        ReclaimOutcome::Full
    );
    assert_eq!(
        reclaim_outcome(&dir, &file, Err(os(libc::EAGAIN))).unwrap(),
        ReclaimOutcome::Short
    );
    assert_eq!(
        reclaim_outcome(&dir, &file, Err(os(libc::EINTR))).unwrap(),
        ReclaimOutcome::Interrupted
    );
    assert!(
        matches!(reclaim_outcome(&dir, &file, Err(os(libc::ENODEV))), Err(Error::Vanished(p)) if p == file)
    );
    let e = reclaim_outcome(&dir, &file, Err(os(libc::EBUSY))).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
    assert_eq!(e.path(), file);
    let e = reclaim_outcome(&dir, &file, Err(os(libc::EINVAL))).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    // ENOENT: vanished only if the cgroup directory is gone too.
    assert!(matches!(
        classify(&dir, &file, os(libc::ENOENT)),
        Error::Io { .. }
    ));
    let gone = t.fs.dir("gone");
    assert!(matches!(
        classify(&gone, &gone.join("memory.low"), os(libc::ENOENT)),
        Error::Vanished(_)
    ));
}

// ---- writes ----------------------------------------------------------------

#[test]
fn writes_format_values() {
    let t = Tree::new();
    for f in [
        "memory.reclaim",
        "memory.low",
        "cpuset.mems",
        "cgroup.subtree_control",
    ] {
        t.file(&format!("a/b/{f}"), b"");
    }
    t.file("cgroup.subtree_control", b"");
    assert_eq!(
        t.fs.reclaim("a/b", 209715200).unwrap(),
        ReclaimOutcome::Full
    );
    assert_eq!(t.read("a/b/memory.reclaim"), "209715200");
    t.fs.set_memory_low("a/b", Limit::Bytes(1 << 20)).unwrap();
    assert_eq!(t.read("a/b/memory.low"), "1048576");
    t.file("a/b/memory.low", b"");
    t.fs.set_memory_low("a/b", Limit::Max).unwrap();
    assert_eq!(t.read("a/b/memory.low"), "max");
    t.fs.set_cpuset_mems("a/b", &ns(&[0, 1, 3])).unwrap();
    assert_eq!(t.read("a/b/cpuset.mems"), "0-1,3");
    t.fs.enable_controllers("a/b", &["memory", "cpuset"])
        .unwrap();
    assert_eq!(t.read("a/b/cgroup.subtree_control"), "+memory +cpuset");
    t.fs.enable_controllers("", &["cpuset"]).unwrap();
    assert_eq!(t.read("cgroup.subtree_control"), "+cpuset");
}

#[test]
fn writes_do_not_truncate() {
    // O_WRONLY without O_TRUNC: on a regular file the new value overwrites
    // the start. (cgroupfs ignores offsets; this pins the open flags.)
    let t = Tree::new();
    t.file("a/memory.low", b"1234567890\n");
    t.fs.set_memory_low("a", Limit::Max).unwrap();
    assert_eq!(t.read("a/memory.low"), "max4567890\n");
}

#[test]
fn empty_cpuset_written_as_newline() {
    let t = Tree::new();
    t.file("a/cpuset.mems", b"");
    t.fs.set_cpuset_mems("a", &NodeSet::new()).unwrap();
    assert_eq!(t.read("a/cpuset.mems"), "\n");
    assert_eq!(t.fs.cpuset_mems("a").unwrap(), NodeSet::new());
}

#[test]
fn write_round_trips_through_reader() {
    let t = Tree::new();
    t.file("a/memory.low", b"");
    t.fs.set_memory_low("a", Limit::Bytes(4096)).unwrap();
    assert_eq!(t.fs.memory_low("a").unwrap(), Limit::Bytes(4096));
}

// ---- discover --------------------------------------------------------------

#[test]
fn discover_walks_tree() {
    let t = Tree::new();
    t.file("cgroup.procs", b"1\n")
        .file("system.slice/foo.service/memory.current", b"0\n")
        .mkdir("system.slice/bar.service")
        .mkdir("user.slice/user-1000.slice/session-1.scope")
        .file("system.slice/memory.stat", b"anon 0\n");
    // A symlink to a directory is not a cgroup (cgroupfs has none).
    std::os::unix::fs::symlink(t.fs.root().join("user.slice"), t.fs.root().join("link")).unwrap();
    let got = t.fs.discover().unwrap();
    let paths: Vec<&str> = got.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "",
            "system.slice",
            "system.slice/bar.service",
            "system.slice/foo.service",
            "user.slice",
            "user.slice/user-1000.slice",
            "user.slice/user-1000.slice/session-1.scope",
        ]
    );
    for c in &got {
        assert_eq!(c.id, t.fs.cgroup_id(&c.path).unwrap(), "{}", c.path);
        assert_eq!(c.id, fs::metadata(t.fs.dir(&c.path)).unwrap().ino());
    }
    let ids: std::collections::BTreeSet<u64> = got.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), got.len(), "ids are distinct");
}

#[test]
fn discover_missing_root_is_error() {
    let fs = CgroupFs::new("/nonexistent/cgroup-root");
    let e = fs.discover().unwrap_err();
    assert!(
        matches!(&e, Error::Io { path, .. } if path == Path::new("/nonexistent/cgroup-root")),
        "{e:?}"
    );
}

#[test]
fn dir_of_rel_paths() {
    let fs = CgroupFs::new("/sys/fs/cgroup");
    assert_eq!(fs.dir(""), Path::new("/sys/fs/cgroup"));
    assert_eq!(fs.dir("/a/b/"), Path::new("/sys/fs/cgroup/a/b"));
    assert_eq!(DEFAULT_CGROUP_ROOT, "/sys/fs/cgroup");
}

#[test]
fn numa_stat_map_shape() {
    let t = Tree::new();
    t.file("memory.numa_stat", b"anon N0=1 N1=2\n");
    let s = t.fs.numa_stat("").unwrap();
    let expected: BTreeMap<u32, u64> = [(0, 1), (1, 2)].into_iter().collect();
    assert_eq!(s.stats["anon"], expected);
}

/// The root's `cgroup.controllers` captured in the 6.12 guest.
const CAPTURED_CONTROLLERS: &[u8] =
    include_bytes!("../../../tests/fixtures/linux-6.12/sys/fs/cgroup/cgroup.controllers");

#[test]
fn hierarchy_check_accepts_v2_with_memory_and_names_what_is_missing() {
    let t = Tree::new();
    t.file("cgroup.controllers", CAPTURED_CONTROLLERS)
        .file("cgroup.subtree_control", b"");
    t.fs.check_v2_memory().unwrap();

    // cgroup v1: per-controller mounts under the root, no cgroup.controllers.
    let v1 = Tree::new();
    v1.mkdir("memory").mkdir("cpu,cpuacct").mkdir("systemd");
    let e = v1.fs.check_v2_memory().unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("cgroup v1") && msg.contains("unified_cgroup_hierarchy"),
        "{msg}"
    );
    assert_eq!(e.path(), v1.fs.root());

    // An empty directory: not a cgroup2 mount at all.
    let e = Tree::new().fs.check_v2_memory().unwrap_err();
    assert!(e.to_string().contains("not a cgroup v2 mount"), "{e}");

    // v2 without the memory controller.
    let nomem = Tree::new();
    nomem
        .file("cgroup.controllers", b"cpuset cpu io pids\n")
        .file("cgroup.subtree_control", b"");
    let e = nomem.fs.check_v2_memory().unwrap_err();
    assert!(e.to_string().contains("memory controller"), "{e}");
}

/// Fuzzing of every reader: arbitrary bytes (and arbitrary `key value`
/// lines, which get past the first token) in each file never panic, and an
/// error names the file it came from.
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    const FILES: &[&str] = &[
        "memory.numa_stat",
        "memory.stat",
        "memory.current",
        "memory.min",
        "memory.low",
        "memory.high",
        "memory.max",
        "memory.pressure",
        "cpuset.mems",
        "cpuset.mems.effective",
        "cgroup.procs",
        "cgroup.controllers",
        "cgroup.subtree_control",
    ];

    fn read_all(t: &Tree) {
        let fs = &t.fs;
        let results: Vec<(&str, Option<Error>)> = vec![
            ("memory.numa_stat", fs.numa_stat("c").err()),
            ("memory.stat", fs.memory_stat("c").err()),
            ("memory.current", fs.memory_current("c").err()),
            ("memory.min", fs.memory_min("c").err()),
            ("memory.low", fs.memory_low("c").err()),
            ("memory.high", fs.memory_high("c").err()),
            ("memory.max", fs.memory_max("c").err()),
            ("memory.pressure", fs.memory_pressure("c").err()),
            ("cpuset.mems", fs.cpuset_mems("c").err()),
            ("cpuset.mems.effective", fs.cpuset_mems_effective("c").err()),
            ("cgroup.procs", fs.procs("c").err()),
            ("cgroup.controllers", fs.controllers("c").err()),
            ("cgroup.subtree_control", fs.subtree_control("c").err()),
        ];
        for (file, e) in results {
            if let Some(e) = e {
                assert!(
                    e.path().ends_with(file) && e.to_string().contains(file),
                    "{file}: error does not name the file: {e}"
                );
            }
        }
    }

    fn lines() -> impl Strategy<Value = String> {
        let token = prop_oneof![
            "[a-z_]{1,12}",
            "[0-9]{1,22}",
            "N[0-9]{1,3}=[0-9]{0,22}",
            "(avg10|avg60|avg300|total)=[0-9.]{0,8}",
            "(some|full|max|-|,)",
        ];
        proptest::collection::vec(proptest::collection::vec(token, 0..6), 0..8).prop_map(|ls| {
            ls.iter()
                .map(|l| l.join(" "))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let t = Tree::new();
            for f in FILES {
                t.file(&format!("c/{f}"), &data);
            }
            read_all(&t);
        }

        #[test]
        fn arbitrary_lines_never_panic(text in lines()) {
            let t = Tree::new();
            for f in FILES {
                t.file(&format!("c/{f}"), text.as_bytes());
            }
            read_all(&t);
        }
    }
}
