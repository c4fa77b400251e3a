//! Cost of what tierd re-reads every interval to notice capacity changes
//! (`Topology::reread`: nodes, tiers, MemTotal; against the full
//! `Topology::discover`, which also reads CPUs and HMAT) and, on a change,
//! the CXL devices behind the nodes (`cxl::discover`), on the sysfs trees
//! captured from the 6.12 and 7.3 guests with the CXL device
//! (`tests/fixtures/linux-{6.12,7.3}-cxl`).

use criterion::{criterion_group, criterion_main, Criterion};

fn discover(c: &mut Criterion) {
    for kernel in ["6.12", "7.3"] {
        let sys = format!(
            "{}/../../tests/fixtures/linux-{kernel}-cxl/sys",
            env!("CARGO_MANIFEST_DIR")
        );
        c.bench_function(&format!("Topology::discover ({kernel} CXL tree)"), |b| {
            b.iter(|| numa::topology::Topology::discover(&sys).unwrap())
        });
        let known = numa::topology::Topology::discover(&sys).unwrap();
        c.bench_function(&format!("Topology::reread ({kernel} CXL tree)"), |b| {
            b.iter(|| known.reread(&sys).unwrap())
        });
        c.bench_function(&format!("cxl::discover ({kernel} CXL tree)"), |b| {
            b.iter(|| numa::cxl::discover(&sys).unwrap())
        });
    }
}

criterion_group!(benches, discover);
criterion_main!(benches);
