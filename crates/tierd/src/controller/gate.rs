//! The kernel's promotion rate in a steady state.
//!
//! With `promotion = "kernel"`, once the plan is steady ([`Plan::steady`]: no
//! container under its target for `limits.steady_after`), a NUMA-balancing
//! promotion only swaps a warm lower-tier page in for one kswapd demotes: the
//! split does not change, pages move. tierd then writes
//! `limits.steady_promote_rate` to the kernel's promotion rate limit
//! (`kernel.numa_balancing_promote_rate_limit_MBps`): the pages that fault
//! first after a scan, the hottest, still come up, the rest wait. The first
//! cycle that is not steady (a container under its target, one arriving or
//! leaving) writes the original value back, so a newcomer or a container
//! kswapd pushed under its target is promoted at the kernel's full rate.
//! The original is journalled before the first write and restored at exit.
//! docs/NOTES.md "Kernel promotion in a steady state" has the measurements.

use std::path::PathBuf;

use super::*;
use crate::sysctl::{KernelKnobs, PROMOTE_RATE_LIMIT};

/// The rate-limit knob, while tierd holds it.
#[derive(Debug, Default)]
pub(super) struct PromotionGate {
    knobs: KernelKnobs,
    /// MiB/s written while the plan is steady; None while open.
    limited_mib: Option<u64>,
    /// The knob cannot be read (a kernel without it): logged once, then
    /// the gate does nothing.
    off: bool,
}

impl PromotionGate {
    /// Journals the knob's original before tierd first writes it.
    pub(super) fn set_journal(&mut self, journal: SharedJournal) {
        self.knobs = KernelKnobs::with_journal(journal);
    }

    /// Whether the kernel's promotion is held at `limits.steady_promote_rate`.
    pub(super) fn limited(&self) -> bool {
        self.limited_mib.is_some()
    }

    /// Limits or opens the kernel's promotion for this cycle's plan.
    /// Failures are logged (the knob missing: once, and the gate stays
    /// off); the cycle goes on either way.
    pub(super) fn apply(&mut self, cfg: &Config, plan: &Plan, names: &dyn Fn(u64) -> String) {
        if self.off {
            return;
        }
        let rate = cfg.limits.steady_promote_rate.0;
        let want = (cfg.daemon.promotion == PromotionMode::Kernel && rate > 0 && plan.steady)
            .then_some(rate >> 20);
        if want == self.limited_mib {
            return;
        }
        let path = path(cfg);
        match want {
            Some(mib) => {
                let current = match fs::read_to_string(&path) {
                    Ok(v) => v.trim().parse::<u64>().ok(),
                    Err(e) => {
                        tracing::warn!(
                            path = %path.display(),
                            error = %e,
                            "cannot read the kernel's promotion rate limit (a kernel before 6.0?); limits.steady_promote_rate has no effect"
                        );
                        self.off = true;
                        return;
                    }
                };
                // An operator's own lower limit stays.
                if current.is_some_and(|c| c <= mib) && !self.knobs.changed_path(&path) {
                    self.limited_mib = Some(mib);
                    return;
                }
                match self.knobs.set(&path, &mib.to_string()) {
                    Ok(()) => {
                        tracing::info!(
                            mib_per_s = mib,
                            steady_after_s = cfg.limits.steady_after.as_secs_f64(),
                            "steady: every container at or over its target; kernel promotion limited"
                        );
                        self.limited_mib = Some(mib);
                    }
                    Err(e) => {
                        tracing::warn!(error = format!("{e:#}"), "cannot limit kernel promotion")
                    }
                }
            }
            None => {
                let under: Vec<String> = plan
                    .containers
                    .iter()
                    .filter(|p| p.state == PlacementState::UnderTarget)
                    .map(|p| names(p.id))
                    .collect();
                match self.knobs.restore_path(&path) {
                    Ok(_) => {
                        tracing::info!(
                            under_target = ?under,
                            "not steady: kernel promotion no longer limited by tierd"
                        );
                        self.limited_mib = None;
                    }
                    Err(e) => tracing::warn!(
                        error = format!("{e:#}"),
                        "cannot restore kernel promotion rate limit"
                    ),
                }
            }
        }
    }

    /// Writes the original limit back (exit, reload to another mode).
    pub(super) fn restore(&mut self) {
        self.knobs.restore();
        self.limited_mib = None;
    }
}

fn path(cfg: &Config) -> PathBuf {
    cfg.daemon.procfs_root.join(PROMOTE_RATE_LIMIT)
}
