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
        Command::Run => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(2)
                .enable_all()
                .build()?;
            // Signals first, before anything is written (daemon::run).
            let res = rt.block_on(async {
                let signals = tierd::daemon::Signals::install()?;
                tierd::daemon::run(cfg, signals).await
            });
            if let Err(e) = &res {
                tracing::error!("{e:#}");
            }
            res
        }
    }
}
