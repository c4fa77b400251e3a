//! `redisload`: a Redis client for the tiering scenarios. Fills a
//! `redis-server` with `--keys` values of `--value-bytes` (pipelined SETs),
//! then issues GETs whose keys follow a Zipf(s) popularity (ranks shuffled
//! over the key space, as tierload's cache mode does over pages) — the skewed
//! access the CXL papers drive Redis with (YCSB). Prints one JSON report per
//! `--report-s`: GETs/s and the hit ratio (keys found).
//!
//! `redis-benchmark` (Debian's redis-tools 7.0) draws keys uniformly (`-r`)
//! and has no skewed distribution, hence this client.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, SeedableRng};
use tierload::ZipfPages;

#[derive(Parser, Debug)]
#[command(about = "Fill redis-server, then GET keys with Zipf popularity; JSON reports")]
struct Args {
    /// redis-server port on 127.0.0.1.
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Keys to SET, then GET.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Value size, bytes.
    #[arg(long, default_value_t = 1024)]
    value_bytes: usize,
    /// Zipf exponent (0: uniform).
    #[arg(long, default_value_t = 0.99)]
    zipf_s: f64,
    /// Seconds between reports.
    #[arg(long, default_value_t = 5.0)]
    report_s: f64,
    /// Seed for the rank shuffle and the key stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// GETs per pipeline.
    #[arg(long, default_value_t = 64)]
    pipeline: usize,
    /// Seconds to wait for the server to accept connections.
    #[arg(long, default_value_t = 30.0)]
    connect_timeout_s: f64,
}

fn connect(args: &Args) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", args.port))?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.connect_timeout_s);
    loop {
        match client.get_connection() {
            Ok(c) => return Ok(c),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(e),
        }
    }
}

fn run(args: &Args) -> redis::RedisResult<()> {
    let mut con = connect(args)?;
    let value = vec![b'x'; args.value_bytes];
    let t0 = Instant::now();
    for chunk in (0..args.keys).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for k in chunk {
            p.cmd("SET").arg(format!("key:{k}")).arg(&value).ignore();
        }
        p.query::<()>(&mut con)?;
    }
    println!(
        "{}",
        serde_json::json!({"name": "redisload", "filled_keys": args.keys, "fill_s": t0.elapsed().as_secs_f64()})
    );
    let z = ZipfPages::new(args.keys, args.zipf_s, args.seed);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(args.seed ^ 0x9e37_79b9);
    let (mut gets, mut hits) = (0u64, 0u64);
    let mut last = Instant::now();
    let (mut last_gets, mut last_hits) = (0u64, 0u64);
    loop {
        let mut p = redis::pipe();
        for _ in 0..args.pipeline {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            p.cmd("GET").arg(format!("key:{}", z.page(u)));
        }
        let vals: Vec<Option<Vec<u8>>> = p.query(&mut con)?;
        gets += vals.len() as u64;
        hits += vals.iter().filter(|v| v.is_some()).count() as u64;
        let dt = last.elapsed().as_secs_f64();
        if dt >= args.report_s {
            let g = gets - last_gets;
            println!(
                "{}",
                serde_json::json!({
                    "name": "redisload",
                    "t_s": t0.elapsed().as_secs_f64(),
                    "accesses_per_s": g as f64 / dt,
                    "hit_ratio": (hits - last_hits) as f64 / g.max(1) as f64,
                    "gets": gets,
                })
            );
            let _ = std::io::stdout().flush();
            last = Instant::now();
            last_gets = gets;
            last_hits = hits;
        }
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("redisload: redis at 127.0.0.1:{}: {e}", args.port);
        std::process::exit(1);
    }
}
