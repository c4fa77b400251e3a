//! tierd: a userspace memory-tiering daemon. It samples per-container placement
//! from cgroup v2, computes each container's fair share of the fast (DRAM) tier
//! with the `policy` crate, and enforces it with `memory.reclaim` (demotion),
//! `memory.low` (protection) and `cpuset.mems` (opt-out pinning).
//! See DESIGN.md for the architecture and the policy semantics.

pub mod config;
pub mod controller;
pub mod daemon;
pub mod heatmon;
pub mod hintfaults;
pub mod metrics;
pub mod mover;
pub mod regulate;
pub mod sysctl;
pub mod topology;

/// Initialises `tracing` with an env filter (`RUST_LOG`, default `info`).
/// Under systemd, stderr goes to the journal; timestamps are left to it.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        builder.without_time().init();
    } else {
        builder.init();
    }
}
