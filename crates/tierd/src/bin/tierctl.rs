//! `tierctl status`: the daemon's view per container, as a table;
//! `tierctl reload`: reload tierd's config and print the outcome.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use tierd::status::Status;

#[derive(Parser)]
#[command(version, about = "Query a running tierd")]
struct Cli {
    /// tierd's metrics/status address (daemon.metrics_listen).
    #[arg(long, default_value = "127.0.0.1:9464")]
    addr: String,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Per-container tier usage, targets and state.
    Status {
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
    },
    /// The raw Prometheus exposition.
    Metrics,
    /// Reload the config file (as SIGHUP does) and print what was applied,
    /// or why the file was refused (exit 1; the running config is kept).
    Reload,
}

/// A plain HTTP/1.0 request without a body (`GET`, `POST`): the endpoint is
/// local and speaks HTTP/1.
fn request(method: &str, addr: &str, path: &str) -> Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| {
        format!("cannot connect to tierd at {addr} (is tierd.service running?)")
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let Some((head, body)) = buf.split_once("\r\n\r\n") else {
        bail!("malformed HTTP answer from {addr}");
    };
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!(
            "{addr}{path}: {} {}",
            head.lines().next().unwrap_or(""),
            body.trim()
        );
    }
    Ok(body.to_owned())
}

fn mib(b: u64) -> String {
    format!("{:.0}", b as f64 / (1u64 << 20) as f64)
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Metrics => print!("{}", request("GET", &cli.addr, "/metrics")?),
        Cmd::Reload => print!("{}", request("POST", &cli.addr, "/reload")?),
        Cmd::Status { json } => {
            let body = request("GET", &cli.addr, "/status")?;
            if json {
                println!("{body}");
                return Ok(());
            }
            let s: Status = serde_json::from_str(&body).context("cannot decode /status")?;
            println!(
                "tiered: {}  promotion: {}{}  fast nodes {:?} lower nodes {:?}  fast capacity {} MiB, free {} MiB, pool {} MiB{}",
                s.tiered,
                s.promotion,
                if s.kernel_promotion_limited {
                    " (rate-limited: steady)"
                } else if s.kernel_scan_paced {
                    " (scan paced: not steady)"
                } else {
                    ""
                },
                s.fast_nodes,
                s.lower_nodes,
                mib(s.fast_capacity_bytes),
                mib(s.fast_free_bytes),
                mib(s.pool_bytes),
                if s.guarantees_scaled { "  (guarantees scaled down)" } else { "" }
            );
            for r in &s.lower_devices {
                let devs: Vec<String> = r
                    .memdevs
                    .iter()
                    .map(|m| {
                        format!(
                            "{} (serial {:#x}, firmware {:?}, {} MiB ram)",
                            m.name,
                            m.serial,
                            m.firmware_version,
                            mib(m.ram_bytes)
                        )
                    })
                    .collect();
                println!(
                    "node {}: CXL {} ({}, {} MiB) via {} on {}",
                    r.node,
                    r.name,
                    r.mode,
                    mib(r.size_bytes),
                    r.dax,
                    devs.join(", ")
                );
            }
            println!(
                "{:<40} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9}  state",
                "container", "fast MiB", "lower MiB", "local%", "target", "low", "high", "mem.low"
            );
            for c in &s.containers {
                let usage = c.fast_bytes + c.lower_bytes;
                let local = if usage == 0 {
                    0.0
                } else {
                    100.0 * c.fast_bytes as f64 / usage as f64
                };
                println!(
                    "{:<40} {:>9} {:>9} {:>6.1}% {:>9} {:>9} {:>9} {:>9}  {}",
                    c.container,
                    mib(c.fast_bytes),
                    mib(c.lower_bytes),
                    local,
                    mib(c.target_bytes),
                    mib(c.local_low_bytes),
                    mib(c.local_high_bytes),
                    mib(c.memory_low_bytes),
                    c.state
                );
            }
        }
    }
    Ok(())
}
