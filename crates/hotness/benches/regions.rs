//! Reading 10,000 tried regions from a sysfs-shaped tree and aggregating
//! 10,000 regions into a `ContainerHeat`.

use std::fs;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hotness::damon::read_tried_regions;
use hotness::heat::{accumulate, ContainerHeat, HeatParams};
use hotness::TriedRegion;

const N: u64 = 10_000;

fn regions() -> Vec<TriedRegion> {
    (0..N)
        .map(|i| TriedRegion {
            start: 0x7f00_0000_0000 + i * 2 * 4096,
            end: 0x7f00_0000_0000 + i * 2 * 4096 + 4096,
            nr_accesses: (i * 7 % 21) as u32,
            age: (i * 13 % 3000) as u32,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tried_regions");
    for (i, r) in regions().iter().enumerate() {
        let d = dir.join((i + 17).to_string());
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("start"), format!("{}\n", r.start)).unwrap();
        fs::write(d.join("end"), format!("{}\n", r.end)).unwrap();
        fs::write(d.join("nr_accesses"), format!("{}\n", r.nr_accesses)).unwrap();
        fs::write(d.join("age"), format!("{}\n", r.age)).unwrap();
    }
    fs::write(dir.join("total_bytes"), format!("{}\n", N * 4096)).unwrap();
    c.bench_function("parse_tried_regions_10k", |b| {
        b.iter(|| {
            let v = read_tried_regions(black_box(&dir)).unwrap();
            assert_eq!(v.len(), N as usize);
            v
        })
    });
    let rs = regions();
    let p = HeatParams::default();
    c.bench_function("accumulate_10k", |b| {
        b.iter(|| {
            let mut h = ContainerHeat::default();
            accumulate(&mut h, black_box(&rs), &p, |r| {
                if r.start & 0x2000 == 0 {
                    vec![(0, 0.75), (1, 0.25)]
                } else {
                    vec![(1, 1.0)]
                }
            });
            h
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
