//! `damon-heat`: samples the heat of a few processes with DAMON and prints one
//! JSON line per pid, then removes its kdamond.
//!
//! ```text
//! damon-heat --pids 12,34 --seconds 5
//! {"pid":12,"regions":14,"total_bytes":69632000,"hot_bytes":16777216,"hottest":[140200000000,140200016384,17]}
//! ```
//!
//! It claims one kdamond (see `hotness::Damon::claim`; a kdamond another tool
//! created makes it fail without touching anything), runs one vaddr context
//! with one target per pid and one `stat` scheme per target (a `target`
//! filter with `matching = N` keeps only that target), waits, reads the
//! schemes' tried regions and releases the kdamond.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use hotness::heat::{self, ContainerHeat, HeatParams, DEFAULT_HOT_MIN_NR_ACCESSES};
use hotness::{Attrs, Damon, KdamondSpec, Ops, Scheme, DEFAULT_ROOT};

#[derive(Parser, Debug)]
#[command(about = "Per-process DAMON heat: one JSON line per pid")]
struct Args {
    /// Processes to monitor, comma-separated.
    #[arg(long, value_delimiter = ',', required_unless_present = "paddr")]
    pids: Vec<u32>,
    /// Monitor physical memory instead (one line with `"paddr":true`).
    #[arg(long, conflicts_with = "pids")]
    paddr: bool,
    /// How long to monitor before reading the regions (seconds).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// DAMON sysfs root.
    #[arg(long, default_value = DEFAULT_ROOT)]
    root: String,
    /// Where the claimed kdamond is recorded.
    #[arg(long, default_value = "/run/tierd/damon-heat.json")]
    state_file: String,
    /// Hot threshold: accesses per aggregation interval.
    #[arg(long, default_value_t = DEFAULT_HOT_MIN_NR_ACCESSES)]
    hot_min: u32,
    /// Sampling interval (µs).
    #[arg(long, default_value_t = Attrs::default().sample_us)]
    sample_us: u64,
    /// Aggregation interval (µs).
    #[arg(long, default_value_t = Attrs::default().aggr_us)]
    aggr_us: u64,
    /// Also print every region of every pid (`{"pid":..,"region":[start,end,nr_accesses,age]}`).
    #[arg(long)]
    regions: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut damon = Damon::new(&args.root, &args.state_file);
    let result = run(&args, &mut damon);
    let released = damon.release();
    if let Err(e) = &released {
        eprintln!("damon-heat: release: {e}");
    }
    match result {
        Ok(()) if released.is_ok() => ExitCode::SUCCESS,
        Ok(()) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("damon-heat: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args, damon: &mut Damon) -> Result<(), hotness::Error> {
    damon.check_available()?;
    let claim = damon.claim(1)?;
    let idx = claim.indices[0];
    let attrs = Attrs {
        sample_us: args.sample_us,
        aggr_us: args.aggr_us,
        ..Attrs::default()
    };
    let spec = if args.paddr {
        KdamondSpec {
            ops: Ops::Paddr,
            attrs,
            pids: Vec::new(),
            schemes: vec![Scheme::stat()],
        }
    } else {
        KdamondSpec {
            ops: Ops::Vaddr,
            attrs,
            pids: args.pids.clone(),
            schemes: (0..args.pids.len() as u32)
                .map(Scheme::stat_for_target)
                .collect(),
        }
    };
    if claim.adopted[0] {
        damon.stop(idx)?;
    }
    damon.write_spec(idx, &spec)?;
    damon.start(idx)?;
    std::thread::sleep(Duration::from_secs_f64(args.seconds.max(0.0)));
    let per_scheme = damon.tried_regions(idx)?;
    let params = HeatParams::from_attrs(&attrs, args.hot_min);
    if args.paddr {
        let mut regions = per_scheme.into_iter().next().unwrap_or_default();
        let mut h = ContainerHeat::default();
        heat::accumulate(&mut h, &regions, &params, |_| Vec::new());
        heat::hottest_first(&mut regions);
        let hottest = regions
            .first()
            .map(|r| serde_json::json!([r.start, r.end, r.nr_accesses]));
        println!(
            "{}",
            serde_json::json!({
                "paddr": true,
                "regions": regions.len(),
                "total_bytes": h.total_bytes(),
                "hot_bytes": h.hot_bytes(),
                "hottest": hottest,
            })
        );
        return Ok(());
    }
    for (pid, mut regions) in args.pids.iter().zip(per_scheme) {
        let mut h = ContainerHeat::default();
        heat::accumulate(&mut h, &regions, &params, |_| Vec::new());
        if args.regions {
            for r in &regions {
                println!(
                    "{}",
                    serde_json::json!({"pid": pid, "region": [r.start, r.end, r.nr_accesses, r.age]})
                );
            }
        }
        heat::hottest_first(&mut regions);
        let hottest = regions
            .first()
            .map(|r| serde_json::json!([r.start, r.end, r.nr_accesses]));
        println!(
            "{}",
            serde_json::json!({
                "pid": pid,
                "regions": regions.len(),
                "total_bytes": h.total_bytes(),
                "hot_bytes": h.hot_bytes(),
                "hottest": hottest,
            })
        );
    }
    Ok(())
}
