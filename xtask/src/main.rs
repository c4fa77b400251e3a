//! Task runner: `cargo xtask setup | vm | fixtures | test`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

mod fixtures;

#[derive(Parser)]
#[command(about = "tierd's task runner")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install QEMU 10, busybox-static and cpio (apt) and download the 6.12 kernel.
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
    /// Capture kernel files from the guest into tests/fixtures/linux-6.12/.
    Fixtures {
        #[command(flatten)]
        vm: VmArgs,
    },
    /// Everything CI runs: setup, fmt, clippy, release build, all tests.
    Test,
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
}

impl VmArgs {
    fn config(&self) -> testbed::VmConfig {
        testbed::VmConfig {
            cpus: self.cpus,
            dram_mib: self.dram_mib,
            cxl_mib: self.cxl_mib,
            timeout: Duration::from_secs(self.timeout_s),
            kernel_args: self.kernel_args.clone(),
            ..Default::default()
        }
    }
}

/// Binaries the guest gets from target/release, when built.
const GUEST_BINARIES: [&str; 3] = ["tierd", "tierctl", "tierload"];

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
            println!("kernel:  {} ({})", a.kernel_release, a.vmlinuz.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Vm {
            vm,
            no_build,
            command,
        } => {
            setup()?;
            if !no_build {
                build_release()?;
            }
            let mut cfg = vm.config();
            cfg.binaries = built_binaries();
            cfg.files = guest_files();
            cfg.echo = true;
            let out = testbed::run(&cfg, &command.join(" ")).context("emulated CXL host")?;
            eprintln!(
                "xtask: guest exited {} after {:.1} s (boot {:.1} s)",
                out.exit_code,
                out.duration.as_secs_f64(),
                out.boot_duration.as_secs_f64()
            );
            Ok(ExitCode::from(out.exit_code.clamp(0, 255) as u8))
        }
        Cmd::Fixtures { vm } => {
            let assets = setup()?;
            fixtures::capture(&assets, vm.config())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Test => {
            setup()?;
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
            cargo(&["test", "--workspace"])?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn setup() -> Result<testbed::Assets> {
    let a = testbed::setup().context("setting up the emulated CXL host")?;
    for action in &a.actions {
        eprintln!("xtask: {action}");
    }
    Ok(a)
}

fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = Command::new(cargo)
        .args(args)
        .current_dir(testbed::workspace_root())
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("cargo {} failed: {status}", args.join(" "));
    }
    Ok(())
}

fn build_release() -> Result<()> {
    cargo(&["build", "--release", "-p", "tierd", "-p", "tierload"])
}

fn built_binaries() -> Vec<PathBuf> {
    let dir = testbed::target_dir().join("release");
    GUEST_BINARIES
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.is_file())
        .collect()
}

/// The guest shell helpers, at the path the VM tests source them from.
fn guest_files() -> Vec<(PathBuf, String)> {
    let lib = testbed::workspace_root().join("tests/guest/lib.sh");
    if Path::new(&lib).is_file() {
        vec![(lib, "/tests/lib.sh".into())]
    } else {
        Vec::new()
    }
}
