//! Solve time for 10, 1,000 and 10,000 containers with mixed policies.
//! Goal (docs/DESIGN.md: the solver runs every full cycle): 10,000 containers
//! in well under 1 ms.
//!
//! Run briefly with
//! `cargo bench -p policy --bench solve -- --warm-up-time 1 --measurement-time 3`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use policy::{ContainerPolicy, ContainerSnapshot, PolicyParams, PolicyState, Share, Snapshot};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A fixed pseudo-random host: the same snapshot on every run (xorshift64).
fn host(n: usize) -> Snapshot {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let containers: Vec<ContainerSnapshot> = (0..n)
        .map(|i| {
            let fast = next() % (4 * GIB);
            let slow = next() % (4 * GIB);
            let usage = fast + slow;
            let r = next();
            ContainerSnapshot {
                id: 10_000 + (next() % 1_000_000_000) * 16 + i as u64,
                name: format!("svc-{i}.slice"),
                fast_bytes: fast,
                slow_bytes: slow,
                hot_bytes: (r % 3 != 0).then(|| next() % (usage + 1)),
                policy: ContainerPolicy {
                    local_low: match r % 4 {
                        0 => Share::Bytes(0),
                        1 => Share::Bytes(next() % (2 * GIB)),
                        _ => Share::Fraction((next() % 50) as f64 / 100.0),
                    },
                    local_high: match (r >> 8) % 3 {
                        0 => Share::Fraction(1.0),
                        1 => Share::Bytes(GIB + next() % (4 * GIB)),
                        _ => Share::Fraction(0.5 + (next() % 50) as f64 / 100.0),
                    },
                    weight: 1 + (next() % 1000) as u32,
                    opt_out: r % 50 == 0,
                    offload: None,
                },
                migrations: Default::default(),
                recallable_bytes: 0,
                lower_hot_bytes: None,
                lower_hint_faults: None,
                known_hot_below_bytes: 0,
                swap_idle_bytes: None,
                aged_demoted_bytes: 0,
                warm_bytes: None,
            }
        })
        .collect();
    // DRAM for about a third of the total usage: contended.
    let usage: u64 = containers.iter().map(|c| c.usage_bytes()).sum();
    Snapshot {
        fast_capacity_bytes: usage / 3 + 2 * GIB,
        fast_unmanaged_bytes: 512 * MIB,
        elapsed_ms: 1_000,
        containers,
        hot_below_bytes: None,
    }
}

fn bench_solve(c: &mut Criterion) {
    let params = PolicyParams::default();
    let mut group = c.benchmark_group("solve");
    for n in [10usize, 1_000, 10_000] {
        let snapshot = host(n);
        // Steady state: buckets exist for every container, refilled each cycle.
        let mut state = PolicyState::default();
        let _ = policy::solve(&snapshot, &params, &mut state);
        group.bench_with_input(BenchmarkId::from_parameter(n), &snapshot, |b, s| {
            b.iter(|| policy::solve(black_box(s), &params, &mut state))
        });
    }
    // The same 10,000-container host listed in id order (as a daemon that
    // keeps its containers in a BTreeMap would): the solver skips its sort.
    let mut sorted = host(10_000);
    sorted.containers.sort_by_key(|c| c.id);
    let mut state = PolicyState::default();
    let _ = policy::solve(&sorted, &params, &mut state);
    group.bench_function("10000-id-ordered", |b| {
        b.iter(|| policy::solve(black_box(&sorted), &params, &mut state))
    });
    group.finish();
}

criterion_group!(benches, bench_solve);
criterion_main!(benches);
