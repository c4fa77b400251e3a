//! Task runner: `cargo xtask setup | vm | fixtures | test`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

mod bench;
mod fixtures;

#[derive(Parser)]
#[command(about = "tierd's task runner")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install QEMU 10, busybox-static, cpio, numactl and the eBPF build tools (apt)
    /// and download the guest kernels (6.12 from bookworm-backports, 7.3 from
    /// trixie-backports through an apt state of its own).
    Setup,
    /// Boot the emulated CXL host with the release binaries and run a shell command.
    Vm {
        #[command(flatten)]
        vm: VmArgs,
        /// Don't build the binaries; use whatever is in target/release.
        #[arg(long)]
        no_build: bool,
        /// The shell command (joined with spaces, run by busybox sh).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Capture kernel files from the guest into tests/fixtures/linux-<kernel>/.
    Fixtures {
        #[command(flatten)]
        vm: VmArgs,
    },
    /// Everything CI runs: setup, fmt, clippy, release build, all tests.
    Test,
    /// The evaluation harness: every scenario under each mode in the
    /// emulated host; tables, PNG plots and samples under target/tierd-bench.
    Bench {
        #[command(flatten)]
        vm: VmArgs,
        /// Scenario files (default: every file in benches/scenarios/) and
        /// a duration override.
        #[command(flatten)]
        run: RunArgs,
        /// tierscen modes, comma-separated (a scenario's own `modes` wins).
        #[arg(long, default_value = "kernel,tierd,tierd-pages")]
        modes: String,
        /// Output directory (default: <target>/tierd-bench).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Length of the churn soak run after the scenarios (a container
        /// created and destroyed every second beside a steady one), seconds;
        /// 0 skips it.
        #[arg(long, default_value_t = 600)]
        soak_s: u64,
        /// Run only the churn soak, no scenario.
        #[arg(long)]
        soak_only: bool,
    },
    /// The verdict table again, from a saved `demo` or `bench` output (the
    /// `SAMPLE`/`HOST`/`PROFILE` lines), without running anything.
    Verdict {
        /// The saved output (e.g. `cargo xtask demo > demo.log`).
        #[arg(long)]
        log: PathBuf,
        /// Scenario files the output came from (default: the demo's).
        #[arg(long = "scenario", value_name = "FILE")]
        scenarios: Vec<PathBuf>,
        /// Modes run for every scenario, comma-separated (default: each
        /// scenario's own, else kernel,tierd).
        #[arg(long)]
        modes: Option<String>,
        /// DRAM of the emulated host the output came from, MiB (scenario
        /// sizes scale with it).
        #[arg(long, default_value_t = 1024)]
        dram_mib: u64,
        /// Lower tier the output came from (its demo scenarios are the
        /// default).
        #[arg(long, default_value = "hmat")]
        lower: testbed::LowerTier,
    },
    /// The main job: tierd managing real containers in the emulated CXL host,
    /// each scenario under kernel tiering only and then under tierd, same boot.
    Demo {
        #[command(flatten)]
        vm: VmArgs,
        /// Scenario files (default: identical-cache, cold-hog,
        /// noisy-neighbour; with `--lower cxl` the two of
        /// benches/scenarios/cxl/) and a duration override.
        #[command(flatten)]
        run: RunArgs,
        /// tierscen modes, comma-separated (kernel, tierd, tierd-pages,
        /// tierd-damos); default: kernel,tierd.
        #[arg(long)]
        modes: Option<String>,
        /// Runs of every scenario and mode, in the same boot; the verdict
        /// compares medians, and counts a difference only beyond kernel
        /// tiering's own run-to-run spread. Two kernel-only runs of one
        /// scenario in one boot have differed by more than the metrics'
        /// tolerances (docs/BENCHMARKS.md), so one run decides nothing.
        #[arg(long, default_value_t = 3)]
        repeat: u32,
    },
}

/// Which scenarios to run, and for how long.
#[derive(clap::Args)]
struct RunArgs {
    /// Scenario files, repeatable (default: `bench` runs every file in
    /// benches/scenarios/, `demo` identical-cache, cold-hog, noisy-neighbour;
    /// with `--lower cxl` those of benches/scenarios/cxl/).
    #[arg(long = "scenario", value_name = "FILE")]
    scenarios: Vec<PathBuf>,
    /// Override each scenario's duration per mode, seconds.
    #[arg(long)]
    duration_s: Option<u64>,
}

#[derive(clap::Args)]
struct VmArgs {
    /// vCPUs (all on node 0).
    #[arg(long, default_value_t = 2)]
    cpus: u32,
    /// Node 0 memory, MiB.
    #[arg(long, default_value_t = 1024)]
    dram_mib: u64,
    /// Node 1 (CPU-less) memory, MiB.
    #[arg(long, default_value_t = 1024)]
    cxl_mib: u64,
    /// Limit for boot + command, seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Extra kernel command-line argument (repeatable).
    #[arg(long = "kernel-arg", value_name = "ARG")]
    kernel_args: Vec<String>,
    /// Guest kernel: 6.12 (Debian bookworm-backports) or 7.3 (trixie-backports).
    #[arg(long, default_value = "6.12")]
    kernel: testbed::GuestKernel,
    /// Lower tier: `hmat` (a CPU-less memory node with HMAT latencies) or
    /// `cxl` (a CXL Type-3 memory device onlined by the kernel's CXL
    /// drivers; about 100–250× slower than DRAM under emulation).
    #[arg(long, default_value = "hmat")]
    lower: testbed::LowerTier,
    /// Kernel module to place in the guest's /lib/modules/<release>/, for
    /// the command to `insmod` (repeatable; e.g. `zram` and its
    /// dependencies for swap).
    #[arg(long = "module", value_name = "NAME")]
    modules: Vec<String>,
}

impl VmArgs {
    fn config(&self) -> testbed::VmConfig {
        testbed::VmConfig {
            kernel: self.kernel,
            lower: self.lower,
            cpus: self.cpus,
            dram_mib: self.dram_mib,
            cxl_mib: self.cxl_mib,
            timeout: Duration::from_secs(self.timeout_s),
            kernel_args: self.kernel_args.clone(),
            modules: self.modules.clone(),
            ..Default::default()
        }
    }
}

/// The main job's scenarios (benches/scenarios/): fairness between
/// identical tenants, a cold hog against a newcomer, a noisy neighbour
/// against a protected service.
const DEMO_SCENARIOS: [&str; 3] = [
    "identical-cache.toml",
    "cold-hog.toml",
    "noisy-neighbour.toml",
];

/// The main job's scenarios on the CXL Type-3 device
/// (benches/scenarios/cxl/): the identical-tenant and cold-hog cases with
/// footprints beyond DRAM of tens of MiB, what the device migrates within a
/// run at ~2 MiB/s under emulation.
const CXL_DEMO_SCENARIOS: [&str; 2] = ["identical-cache.toml", "cold-hog.toml"];

/// Where a lower tier's scenarios are: benches/scenarios/, or its cxl/
/// directory for the CXL device.
fn scenario_dir(lower: testbed::LowerTier) -> PathBuf {
    let dir = testbed::workspace_root().join("benches/scenarios");
    match lower {
        testbed::LowerTier::Hmat => dir,
        testbed::LowerTier::Cxl => dir.join("cxl"),
    }
}

/// The demo's scenario files for a lower tier.
fn demo_scenarios(lower: testbed::LowerTier) -> Vec<PathBuf> {
    let names: &[&str] = match lower {
        testbed::LowerTier::Hmat => &DEMO_SCENARIOS,
        testbed::LowerTier::Cxl => &CXL_DEMO_SCENARIOS,
    };
    let dir = scenario_dir(lower);
    names.iter().map(|f| dir.join(f)).collect()
}

/// Host binaries the guest gets when installed: redis-tools' server binary
/// (the redis scenario; linked as redis-server in the guest).
const HOST_BINARIES: [&str; 1] = ["/usr/bin/redis-check-rdb"];

/// Binaries the guest gets from target/release, when built.
const GUEST_BINARIES: [&str; 8] = [
    "tierd",
    "tierctl",
    "tierload",
    "tierscen",
    "movebench",
    "damon-heat",
    "hint-probe",
    "redisload",
];

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Setup => {
            let a = setup()?;
            println!("cache:   {}", a.cache.display());
            println!("qemu:    {} ({})", a.qemu.display(), a.qemu_version);
            println!("busybox: {}", a.busybox.display());
            for k in testbed::GuestKernel::ALL {
                let a = setup_kernel(k)?;
                println!("kernel:  {} ({})", a.kernel_release, a.vmlinuz.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Vm {
            vm,
            no_build,
            command,
        } => {
            setup_kernel(vm.kernel)?;
            if !no_build {
                build_release()?;
            }
            let mut cfg = vm.config();
            cfg.binaries = built_binaries();
            cfg.files = guest_files();
            cfg.echo = true;
            let out = run_guest(&cfg, &command.join(" "))?;
            Ok(ExitCode::from(out.exit_code.clamp(0, 255) as u8))
        }
        Cmd::Fixtures { vm } => {
            let assets = setup_kernel(vm.kernel)?;
            fixtures::capture(&assets, vm.config())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Demo {
            vm,
            run,
            modes,
            repeat,
        } => demo(vm, run.scenarios, run.duration_s, modes, repeat.max(1)),
        Cmd::Verdict {
            log,
            mut scenarios,
            modes,
            dram_mib,
            lower,
        } => {
            if scenarios.is_empty() {
                scenarios = demo_scenarios(lower);
            }
            let mut expanded = Vec::new();
            for f in &scenarios {
                expanded.extend(bench::load(f, dram_mib)?);
            }
            let output = std::fs::read_to_string(&log)
                .with_context(|| format!("cannot read {}", log.display()))?;
            print_verdict(&expanded, &output, modes.as_deref());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench {
            vm,
            run,
            modes,
            out,
            soak_s,
            soak_only,
        } => {
            let out = out.unwrap_or_else(|| bench::default_out(&testbed::target_dir()));
            if !soak_only {
                bench_cmd(&vm, run.scenarios, run.duration_s, modes, &out)?;
            }
            if soak_s > 0 || soak_only {
                soak_cmd(&vm, soak_s.max(60), &out)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Test => {
            for k in testbed::GuestKernel::ALL {
                setup_kernel(k)?;
            }
            cargo(&["fmt", "--all", "--check"])?;
            cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])?;
            build_release()?;
            // Every test on 6.12 with the HMAT node; then the VM tests whose
            // outcome depends on the kernel or on the lower tier's driver
            // path again on 7.3 and on the CXL Type-3 device.
            let all = cargo(&["test", "--workspace", "--no-fail-fast"]);
            let mut failed: Vec<String> = all.err().map(|e| format!("{e:#}")).into_iter().collect();
            for (kernel, lower) in [("7.3", "hmat"), ("6.12", "cxl")] {
                for (package, test, filter) in KERNEL_DEPENDENT_VM_TESTS {
                    let mut args = vec!["test", "-p", package, "--test", test, "--"];
                    args.extend(filter.iter());
                    args.push("--test-threads=1");
                    if let Err(e) =
                        cargo_env(&args, &[("TIERD_KERNEL", kernel), ("TIERD_LOWER", lower)])
                    {
                        failed.push(format!("Linux {kernel}, lower tier {lower}: {e:#}"));
                    }
                }
            }
            if !failed.is_empty() {
                bail!("{}", failed.join("\n"));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The VM tests run again on Linux 7.3 and on the CXL Type-3 device (issue
/// 13): (package, test target, name filters; none = every test of the
/// target). The guest itself, the DAMON driver, the movers, the eBPF probe,
/// the restore of every setting, tierd end to end, and weighted
/// interleave (issue 14).
const KERNEL_DEPENDENT_VM_TESTS: [(&str, &str, &[&str]); 4] = [
    (
        "testbed",
        "vm",
        &["guest_has_two_tiers_a_cpuless_node_and_memcg"],
    ),
    ("hotness", "vm_probe", &[]),
    ("hotness", "vm", &[]),
    (
        "tierd",
        "vm",
        &[
            "over_target_container_is_brought_to_target",
            // MGLRU's eviction command, and DAMON_STAT running from boot.
            "demotion_stops_at_the_target_under_mglru",
            "sigterm_restores_kernel_and_cgroup_settings",
            "hot_set_on_cxl_is_promoted_within_budget",
            "kdamonds_removed_on_stop_adopted_after_kill9_foreign_untouched",
            "tierd_promotion_falls_back_to_the_kernels_while_damon_is_unavailable",
            // Weighted interleave: 7.3 has the kernel's `auto` weights to
            // turn off and back on; the CXL device takes the interleaved
            // allocations itself.
            "interleave_placement_splits_by_weight_and_holds_the_split",
        ],
    ),
];

/// Runs `tierscen` on each scenario `repeat` times in one boot (the modes in
/// reverse order on every other repeat, so that neither always runs first
/// after a scenario's setup); tierd's /metrics is printed at the end of the
/// last run.
fn demo(
    vm: VmArgs,
    mut scenarios: Vec<PathBuf>,
    duration_s: Option<u64>,
    modes: Option<String>,
    repeat: u32,
) -> Result<ExitCode> {
    setup_kernel(vm.kernel)?;
    build_release()?;
    if scenarios.is_empty() {
        scenarios = demo_scenarios(vm.lower);
    }
    let default_modes: Vec<String> = modes
        .as_deref()
        .unwrap_or("kernel,tierd")
        .split(',')
        .map(String::from)
        .collect();
    let mut cfg = vm.config();
    cfg.binaries = built_binaries();
    cfg.files = guest_files();
    cfg.echo_output = true;
    let stage = testbed::target_dir().join("tierd-demo-scenarios");
    std::fs::create_dir_all(&stage)?;
    let mut expanded = Vec::new();
    for f in &scenarios {
        expanded.extend(bench::load(f, vm.dram_mib)?);
    }
    // Each scenario file is staged once and run by every repeat.
    let mut guest_paths = Vec::with_capacity(expanded.len());
    for sc in &expanded {
        add_modules(&mut cfg, sc);
        let host = stage.join(format!("{}.toml", sc.name));
        std::fs::write(&host, &sc.text)?;
        let guest = format!("/scenarios/{}.toml", sc.name);
        cfg.files.push((host, guest.clone()));
        guest_paths.push(guest);
    }
    let mut script = String::from("set -e\n");
    let mut total_s = 60;
    let n = expanded.len();
    for rep in 1..=repeat {
        script += &format!("echo {} {rep}\n", bench::REPEAT_MARKER);
        for (i, (sc, guest)) in expanded.iter().zip(&guest_paths).enumerate() {
            let mut m = if modes.is_some() {
                default_modes.clone()
            } else {
                sc.modes(&default_modes)
            };
            if rep % 2 == 0 {
                m.reverse();
            }
            total_s += m.len() as u64 * (duration_s.unwrap_or(sc.duration_s) + 60);
            let mut cmd = format!("tierscen {guest} --emit --modes {}", m.join(","));
            if let Some(d) = duration_s {
                cmd += &format!(" --duration-s {d}");
            }
            if rep == repeat && i + 1 == n {
                cmd += " --metrics";
            }
            script += &cmd;
            script += "\n";
        }
    }
    let scenarios = expanded;
    cfg.timeout = cfg.timeout.max(Duration::from_secs(total_s));
    // Each scenario's samples (`--emit`) feed the verdict table at the end.
    eprintln!(
        "xtask: running {} scenario(s) × {repeat} in the emulated CXL host ({} vCPUs, {} MiB DRAM + {} MiB CXL), up to {} s",
        scenarios.len(),
        cfg.cpus,
        cfg.dram_mib,
        cfg.cxl_mib,
        cfg.timeout.as_secs()
    );
    let out = run_guest(&cfg, &script)?;
    print_verdict(&scenarios, &out.output, modes.as_deref());
    Ok(ExitCode::from(out.exit_code.clamp(0, 255) as u8))
}

/// Prints the verdict table (kernel tiering vs each tierd mode, per
/// scenario) and tierd's cycle profile from tierscen's `--emit` output.
/// `modes`: the modes run for every scenario (None: each scenario's own,
/// else kernel,tierd).
fn print_verdict(scenarios: &[bench::ScenarioFile], output: &str, modes: Option<&str>) {
    let default_modes: Vec<String> = modes
        .unwrap_or("kernel,tierd")
        .split(',')
        .map(String::from)
        .collect();
    let series = bench::parse_repeats(output);
    let repeats = series.values().map(Vec::len).max().unwrap_or(0);
    let mut table = String::new();
    let mut behind = Vec::new();
    // (scenario, mode) pairs without a single sample: a run that failed.
    let mut missing = Vec::new();
    let mut header = None;
    for sc in scenarios {
        let m = if modes.is_some() {
            default_modes.clone()
        } else {
            sc.modes(&default_modes)
        };
        header.get_or_insert_with(|| bench::verdict_header(&m));
        let runs: Vec<&bench::Series> = series.get(&sc.name).into_iter().flatten().collect();
        for mode in &m {
            if !runs
                .iter()
                .any(|r| r.samples.get(mode).is_some_and(|v| !v.is_empty()))
            {
                missing.push(format!("{} / {mode}", sc.name));
            }
        }
        let (rows, b) = bench::verdict(sc, &runs, &m);
        table += &rows;
        behind.extend(b);
    }
    let merged: Vec<(&str, bench::Series)> = scenarios
        .iter()
        .filter_map(|sc| {
            Some((
                sc.name.as_str(),
                bench::merged_profiles(series.get(&sc.name)?),
            ))
        })
        .collect();
    let runs_note = if repeats > 1 {
        format!(
            "Each value is the median of {repeats} runs in this boot (range in parentheses); `=` within the \
             metric's tolerance or within kernel tiering's own run-to-run spread (half its range)"
        )
    } else {
        "One run per mode; `=` within the metric's tolerance".to_string()
    };
    println!(
        "\n## Verdict: kernel tiering vs tierd, same boot\n\n{runs_note}; `policy`: behind on a container that kernel \
         tiering gave more than its fair share (its fast-tier bytes > 1.05 × tierd's target for it).\n\n{}{table}{}",
        header.unwrap_or_default(),
        bench::profile_table(merged.iter().map(|(n, s)| (*n, s)))
    );
    let resets: Vec<&str> = output
        .lines()
        .filter(|l| l.starts_with("HOST_RESET "))
        .collect();
    if !resets.is_empty() {
        println!(
            "\n{} run(s) started on a fast node the kernel had given up on (revived before the run):\n  {}",
            resets.len(),
            resets.join("\n  ")
        );
    }
    if !missing.is_empty() {
        println!(
            "\nNo samples for {} (the run failed: see its output above); no verdict.",
            missing.join(", ")
        );
    } else if behind.is_empty() {
        println!("\ntierd is ahead of or equal to kernel tiering on every metric.");
    } else {
        println!(
            "\ntierd is behind kernel tiering on {} metric(s):\n  {}",
            behind.len(),
            behind.join("\n  ")
        );
    }
}

/// Every `.toml` in the lower tier's scenario directory
/// ([`scenario_dir`]), sorted.
fn default_scenarios(lower: testbed::LowerTier) -> Result<Vec<PathBuf>> {
    let dir = scenario_dir(lower);
    let mut v = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "toml") {
            v.push(p);
        }
    }
    v.sort();
    Ok(v)
}

fn bench_cmd(
    vm: &VmArgs,
    files: Vec<PathBuf>,
    duration_s: Option<u64>,
    modes: String,
    out_dir: &Path,
) -> Result<()> {
    setup_kernel(vm.kernel)?;
    build_release()?;
    let files = if files.is_empty() {
        default_scenarios(vm.lower)?
    } else {
        files
    };
    let mut scenarios = Vec::new();
    for f in &files {
        scenarios.extend(bench::load(f, vm.dram_mib)?);
    }
    let mut cfg = vm.config();
    cfg.binaries = built_binaries();
    cfg.files = guest_files();
    cfg.echo_output = true;
    let stage = testbed::target_dir().join("tierd-bench-scenarios");
    std::fs::create_dir_all(&stage)?;
    let modes_v: Vec<String> = modes.split(',').map(String::from).collect();
    let mut total_s = 60;
    let mut staged = Vec::new();
    for sc in &scenarios {
        add_modules(&mut cfg, sc);
        let n_modes = sc.modes(&modes_v).len() as u64;
        let host = stage.join(format!("{}.toml", sc.name));
        std::fs::write(&host, &sc.text)?;
        let guest = format!("/scenarios/{}.toml", sc.name);
        cfg.files.push((host, guest.clone()));
        total_s += n_modes * (duration_s.unwrap_or(sc.duration_s) + 60);
        staged.push((sc.clone(), guest));
    }
    cfg.timeout = cfg.timeout.max(Duration::from_secs(total_s));
    let script = bench::script(&staged, &modes_v, duration_s);
    eprintln!(
        "xtask: {} scenario(s) in the emulated CXL host, up to {} s",
        scenarios.len(),
        cfg.timeout.as_secs()
    );
    let res = testbed::run(&cfg, &script).context("emulated CXL host")?;
    let series = bench::parse_output(&res.output);
    let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let (_, problems) = bench::write_all(
        out_dir,
        &scenarios,
        &series,
        &modes_v,
        &format!("cargo xtask {command}"),
    )?;
    std::fs::write(out_dir.join("guest-output.txt"), &res.output)?;
    eprintln!("xtask: report in {}", out_dir.join("report.md").display());
    let failed = bench::failures(&res.output);
    if res.exit_code != 0 && failed.is_empty() {
        bail!(
            "the guest exited {} (see {}/guest-output.txt)",
            res.exit_code,
            out_dir.display()
        );
    }
    bench::check(&problems, &failed)
}

/// The churn soak (tests/guest/churn.sh) for `soak_s` seconds in its own
/// boot: tierd's RSS, open fds and series of churned cgroups every minute,
/// written to `<out>/soak.md` and appended to `<out>/report.md`. Fails when
/// tierd did not stay flat (see `testbed::soak::check`).
fn soak_cmd(vm: &VmArgs, soak_s: u64, out_dir: &Path) -> Result<()> {
    setup_kernel(vm.kernel)?;
    build_release()?;
    let mut cfg = vm.config();
    cfg.binaries = built_binaries();
    cfg.files = guest_files();
    cfg.echo_output = true;
    cfg.timeout = cfg.timeout.max(Duration::from_secs(soak_s + 300));
    eprintln!("xtask: churn soak of {soak_s} s in the emulated CXL host");
    let res = run_guest(
        &cfg,
        &format!(". /tests/lib.sh\n. /tests/churn.sh\nchurn_soak {soak_s}\n"),
    )?;
    // Under TCG a create-run-kill-remove round takes 1-2 s.
    let r = testbed::soak::check(&res.output, (soak_s / 3) as i64);
    let md = format!(
        "## Churn soak ({soak_s} s)\n\n`cargo xtask bench --soak-s {soak_s}`: a container created \
         and destroyed every second beside a steady one, tierd at 500 ms cycles.\n\n{}",
        testbed::soak::table(&r)
    );
    std::fs::create_dir_all(out_dir)?;
    std::fs::write(out_dir.join("soak.md"), &md)?;
    std::fs::write(out_dir.join("soak-guest-output.txt"), &res.output)?;
    let report = out_dir.join("report.md");
    let mut text = std::fs::read_to_string(&report).unwrap_or_default();
    text += &format!("\n{md}");
    std::fs::write(&report, text)?;
    println!("{md}");
    if !r.problems.is_empty() {
        bail!("churn soak failed: {}", r.problems.join("; "));
    }
    Ok(())
}

/// Adds a scenario's kernel modules (`modules = [..]`) to the guest's,
/// keeping their order and each once.
fn add_modules(cfg: &mut testbed::VmConfig, sc: &bench::ScenarioFile) {
    for m in &sc.modules {
        if !cfg.modules.contains(m) {
            cfg.modules.push(m.clone());
        }
    }
}

/// Runs a script in the guest (its output streams to stdout as it comes
/// when `cfg` echoes it) and says how it ended.
fn run_guest(cfg: &testbed::VmConfig, script: &str) -> Result<testbed::VmOutput> {
    let out = testbed::run(cfg, script).context("emulated CXL host")?;
    eprintln!(
        "xtask: guest exited {} after {:.1} s (boot {:.1} s)",
        out.exit_code,
        out.duration.as_secs_f64(),
        out.boot_duration.as_secs_f64()
    );
    Ok(out)
}

fn setup() -> Result<testbed::Assets> {
    let a = testbed::setup().context("setting up the emulated CXL host")?;
    for action in &a.actions {
        eprintln!("xtask: {action}");
    }
    Ok(a)
}

/// [`setup`], then the assets of `kernel` (downloaded when missing).
fn setup_kernel(kernel: testbed::GuestKernel) -> Result<testbed::Assets> {
    let a = testbed::setup_kernel(kernel)
        .with_context(|| format!("setting up the emulated CXL host with Linux {kernel}"))?;
    for action in &a.actions {
        eprintln!("xtask: {action}");
    }
    Ok(a)
}

fn cargo(args: &[&str]) -> Result<()> {
    cargo_env(args, &[])
}

/// `cargo args` in the workspace root with `env` set.
fn cargo_env(args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("xtask: {}cargo {}", shown.concat(), args.join(" "));
    let status = Command::new(cargo)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(testbed::workspace_root())
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("cargo {} failed: {status}", args.join(" "));
    }
    Ok(())
}

fn build_release() -> Result<()> {
    cargo(&[
        "build",
        "--release",
        "-p",
        "tierd",
        "-p",
        "tierload",
        "-p",
        "hotness",
    ])
}

fn built_binaries() -> Vec<PathBuf> {
    let dir = testbed::target_dir().join("release");
    GUEST_BINARIES
        .iter()
        .map(|n| dir.join(n))
        .chain(HOST_BINARIES.iter().map(PathBuf::from))
        .filter(|p| p.is_file())
        .collect()
}

/// The guest shell helpers, at the path the VM tests source them from.
fn guest_files() -> Vec<(PathBuf, String)> {
    let dir = testbed::workspace_root().join("tests/guest");
    ["lib.sh", "churn.sh"]
        .iter()
        .map(|f| (dir.join(f), format!("/tests/{f}")))
        .filter(|(p, _)| p.is_file())
        .collect()
}
