//! One control-loop cycle (sample, solve, actuate, publish) on a writable copy
//! of the 6.12 fixture tree with N copies of the captured container, every one
//! of them over its target (local_high = 50%), so each cycle writes memory.low
//! and memory.reclaim for all of them.

use std::path::Path;
use std::sync::{Arc, Mutex};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tierd::config::Config;
use tierd::controller::{Controller, Status};
use tierd::metrics::Metrics;

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/linux-6.12"
);

fn cycle(c: &mut Criterion) {
    let mut g = c.benchmark_group("control-loop cycle");
    for n in [1usize, 32, 256] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        testbed::copy_tree(Path::new(FIXTURES), root);
        let app = root.join("sys/fs/cgroup/test.slice/app");
        std::fs::write(app.join("memory.reclaim"), "").unwrap();
        for i in 1..n {
            testbed::copy_tree(&app, &root.join(format!("sys/fs/cgroup/test.slice/app{i}")));
        }
        let text = format!(
            "[daemon]\ncgroup_root = {:?}\nsysfs_root = {:?}\n[limits]\ndemote_rate = \"1TiB\"\nglobal_demote_rate = \"1TiB\"\n[[policy]]\nmatch = \"test.slice/*\"\nlocal_high = \"50%\"\n",
            root.join("sys/fs/cgroup"),
            root.join("sys"),
        );
        let cfg = Config::parse(&text, Path::new("bench.toml")).unwrap();
        let metrics = Arc::new(Metrics::new("kernel"));
        let mut ctl =
            Controller::new(cfg, metrics, Arc::new(Mutex::new(Status::default()))).unwrap();
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| ctl.cycle().unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, cycle);
criterion_main!(benches);
