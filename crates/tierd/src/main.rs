//! `tierd` binary: wiring only.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tierd::config::{Config, DEFAULT_CONFIG_PATH};

#[derive(Parser)]
#[command(
    version,
    about = "Memory-tiering daemon: fair shares of the fast tier per container"
)]
struct Cli {
    /// Config file.
    #[arg(long, short, global = true, default_value = DEFAULT_CONFIG_PATH)]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (the default).
    Run,
    /// Load and validate the config, print the result, and exit (1 on error).
    CheckConfig,
    /// Run a command under a `placement = "interleave"` policy: its memory
    /// is interleaved over the tiers by the host's weighted-interleave
    /// weights (which the daemon sets from that policy).
    Exec {
        /// The policy's name (or its match pattern).
        #[arg(long)]
        policy: String,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    tierd::init_logging();
    let cfg = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tierd: {e}");
            std::process::exit(1);
        }
    };
    match cli.command.unwrap_or(Command::Run) {
        Command::CheckConfig => {
            println!(
                "{}: ok ({} policies, interval {:?}, promotion {}, metrics on {})",
                cfg.source.display(),
                cfg.policies.len(),
                cfg.daemon.interval,
                cfg.daemon.promotion.as_str(),
                cfg.listen_addr()
            );
            Ok(())
        }
        Command::Exec { policy, cmd } => match tierd::interleave::exec(&cfg, &policy, &cmd) {
            Ok(never) => match never {},
            Err(e) => {
                eprintln!("tierd exec: {e:#}");
                std::process::exit(1);
            }
        },
        Command::Run => {
            // Blocked before the runtime's threads exist, so they inherit
            // the mask and a stop sent while the handlers are being
            // installed waits for them (Signals::block).
            let blocked = tierd::daemon::Signals::block()?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(2)
                .enable_all()
                .build()?;
            // Signals first, before anything is written (daemon::run).
            let res = rt.block_on(async {
                let signals = tierd::daemon::Signals::install(blocked)?;
                tierd::daemon::run(cfg, signals).await
            });
            if let Err(e) = &res {
                tracing::error!("{e:#}");
            }
            res
        }
    }
}
