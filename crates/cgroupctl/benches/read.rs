//! Cost of reading and parsing the per-container files tierd reads every cycle,
//! on the files captured from the 6.12 guest (`tests/fixtures/linux-6.12`).

use cgroupctl::CgroupFs;
use criterion::{criterion_group, criterion_main, Criterion};

fn reads(c: &mut Criterion) {
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/linux-6.12/sys/fs/cgroup"
    );
    let fs = CgroupFs::new(root);
    c.bench_function("memory.numa_stat read+parse", |b| {
        b.iter(|| fs.numa_stat("test.slice/app").unwrap())
    });
    c.bench_function("memory.stat read+parse", |b| {
        b.iter(|| fs.memory_stat("test.slice/app").unwrap())
    });
    c.bench_function("discover (fixture tree)", |b| {
        b.iter(|| fs.discover().unwrap())
    });
}

criterion_group!(benches, reads);
criterion_main!(benches);
