//! tierd: a userspace memory-tiering daemon. It samples per-container placement
//! from cgroup v2, computes each container's fair share of the fast (DRAM) tier
//! with the `policy` crate, and enforces it with `memory.reclaim` (demotion),
//! `memory.low` (protection) and `cpuset.mems` (opt-out pinning).
//! See docs/DESIGN.md for the architecture and the policy semantics.

pub mod actuators;
pub mod arrivals;
pub mod config;
pub mod controller;
pub mod daemon;
pub mod interleave;
pub mod journal;
pub mod metrics;
pub mod regulate;
pub mod status;

/// NUMA plumbing, re-exported: it lives in the `numa` crate.
pub use numa::{mover, topology};
pub mod sysctl;

/// Initialises `tracing` with an env filter (`RUST_LOG`, default `info`),
/// to stderr. Colour only on a terminal. Under systemd (`JOURNAL_STREAM`
/// set: stderr is the journal) timestamps are left to the journal and each
/// line starts with its syslog priority (`<3>` error, `<4>` warning, `<6>`
/// info, `<7>` debug and trace), which journald strips and records
/// (sd-daemon(3), `SyslogLevelPrefix=` on by default), so `journalctl -p
/// warning` shows tierd's warnings.
pub fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        builder
            .event_format(SyslogPriority(
                tracing_subscriber::fmt::format().without_time(),
            ))
            .init();
    } else {
        builder.init();
    }
}

/// Prefixes each formatted event with its syslog priority in the `<N>`
/// form journald reads from a service's stdout/stderr (sd-daemon(3)).
pub struct SyslogPriority<F>(pub F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for SyslogPriority<F>
where
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let priority = match *event.metadata().level() {
            tracing::Level::ERROR => 3,
            tracing::Level::WARN => 4,
            tracing::Level::INFO => 6,
            _ => 7,
        };
        write!(writer, "<{priority}>")?;
        self.0.format_event(ctx, writer, event)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    /// Each line carries its level as a syslog priority, and no colour.
    #[test]
    fn journal_lines_start_with_their_syslog_priority() {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || out.clone())
            .event_format(super::SyslogPriority(
                tracing_subscriber::fmt::format().without_time(),
            ))
            .finish();
        tracing::subscriber::with_default(sub, || {
            tracing::error!(path = "/sys/fs/cgroup", "e");
            tracing::warn!("w");
            tracing::info!("i");
            tracing::debug!("d");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        for (line, p) in lines.iter().zip(["<3>", "<4>", "<6>", "<7>"]) {
            assert!(line.starts_with(p), "{line:?} should start with {p}");
            assert!(!line.contains('\x1b'), "colour in {line:?}");
        }
        assert!(lines[0].contains("path=\"/sys/fs/cgroup\""), "{}", lines[0]);
    }
}
