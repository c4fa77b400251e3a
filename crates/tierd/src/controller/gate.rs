//! The kernel's promotion rate in a steady state.
//!
//! With `promotion = "kernel"`, once the plan is steady ([`Plan::steady`]: no
//! container under its target for `limits.steady_after`), a NUMA-balancing
//! promotion only swaps a warm lower-tier page in for one kswapd demotes: the
//! split does not change, pages move. tierd then holds the kernel's
//! promotion rate limit (`kernel.numa_balancing_promote_rate_limit_MBps`)
//! where the plan says ([`policy::PromoteGate`]): at 0 (closed) while
//! nothing on the lower tier passes the kernel's hot-page test
//! (`pgpromote_candidate`, read here each cycle), at
//! `limits.steady_promote_rate` for a while once something does (the pages
//! that fault first after a scan, the hottest, come up, the rest wait). The
//! first cycle that is not steady (a container under its target, one arriving or
//! leaving) writes the original value back, so a newcomer or a container
//! kswapd pushed under its target is promoted at the kernel's full rate.
//! The original is journalled before the first write and restored at exit.
//! docs/NOTES.md "Kernel promotion in a steady state" and "Who moves what
//! in a steady state" have the measurements.
//!
//! The other half: for `limits.promote_scan_window` (30 s) after a
//! container arrives, while it is under its target
//! ([`Plan::scan_paced`]), tierd holds NUMA balancing's longest scan period
//! at `limits.promote_scan_period` (off by default; 2 s measured). In
//! tiering mode only lower-tier pages are scanned and every hint fault
//! counts as private, so the kernel doubles a task's scan period after each
//! scan up to 60 s (`update_task_scan_period`): a newcomer's promotion
//! stalls for a minute with part of its hot set on the lower tier, in one
//! boot and not the next. The kernel's value goes back after the window.
//! docs/NOTES.md "NUMA balancing's scan period".
//!
//! And, when `limits.promote_hot_threshold` is set (off by default: 2 s
//! cost the tenants throughput in the demo), while the plan is not steady
//! tierd holds NUMA balancing's hot-page threshold at it (the kernel's
//! default is 1 s), with the kernel's per-node copy of it reset
//! ([`crate::sysctl::reset_promotion_threshold`]) each time it writes the
//! knob: the copy otherwise moves an eighth of the value a minute, and
//! after a long steady state with promotion closed it sits at an eighth of
//! a second. Under its target a container's lower-tier pages whose faults
//! the kernel declines are recalled by tierd a cycle later anyway
//! (`recall.rs`); a higher threshold has the kernel promote them in the
//! faulting task instead (docs/NOTES.md "Session 61: the hot-page
//! threshold while a share fills").

use std::path::{Path, PathBuf};

use super::*;
use crate::sysctl::{
    reset_promotion_threshold, KernelKnobs, HOT_THRESHOLD, PROMOTE_RATE_LIMIT, SCAN_PERIOD_MAX,
};

/// The kernel's promotion knobs, while tierd holds them.
#[derive(Debug, Default)]
pub(super) struct PromotionGate {
    knobs: KernelKnobs,
    /// The promotion rate limit, MiB/s, held while the plan is steady.
    rate: Hold,
    /// The longest scan period, ms, held while the plan paces the scan.
    scan: Hold,
    /// The hot-page threshold, ms, held while the plan is not steady.
    threshold: Hold,
    /// Where the threshold knob is, once tierd has written it.
    threshold_path: Option<PathBuf>,
    /// `pgpromote_candidate` (/proc/vmstat, pages) at the last cycle.
    candidates: Option<u64>,
    /// /proc/vmstat has no `pgpromote_candidate` (logged once).
    no_candidates: bool,
}

/// One knob's state: the value tierd holds it at, or None while it has
/// the kernel's (or the operator's) own.
#[derive(Debug, Default)]
struct Hold {
    value: Option<u64>,
    /// The knob cannot be read (a kernel without it, debugfs not mounted):
    /// logged once, then left alone.
    off: bool,
}

/// What [`hold`] did this cycle.
enum Held {
    Nothing,
    Set(u64),
    Restored,
}

/// Holds the knob at `path` at `want` (None: gives back its original).
/// An operator's own value that `stays(value, want)` stays (a scan period
/// at or below tierd's, a threshold at or above it). Failures are logged;
/// a knob that cannot be read is logged once (`missing` says what that
/// means) and never touched again.
fn hold(
    knobs: &mut KernelKnobs,
    h: &mut Hold,
    path: &Path,
    want: Option<u64>,
    stays: fn(u64, u64) -> bool,
    missing: &str,
) -> Held {
    if h.off || want == h.value {
        return Held::Nothing;
    }
    let Some(v) = want else {
        return match knobs.restore_path(path) {
            Ok(_) => {
                h.value = None;
                Held::Restored
            }
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "cannot restore kernel setting");
                Held::Nothing
            }
        };
    };
    let current = match fs::read_to_string(path) {
        Ok(s) => s.trim().parse::<u64>().ok(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "{missing}");
            h.off = true;
            return Held::Nothing;
        }
    };
    if current.is_some_and(|c| stays(c, v)) && !knobs.changed_path(path) {
        h.value = Some(v);
        return Held::Nothing;
    }
    match knobs.set(path, &v.to_string()) {
        Ok(()) => {
            h.value = Some(v);
            Held::Set(v)
        }
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "cannot change kernel setting");
            Held::Nothing
        }
    }
}

impl PromotionGate {
    /// Journals the knobs' originals before tierd first writes them.
    pub(super) fn set_journal(&mut self, journal: SharedJournal) {
        self.knobs = KernelKnobs::with_journal(journal);
    }

    /// Whether the kernel's promotion is held by tierd: at
    /// `limits.steady_promote_rate`, or closed (0).
    pub(super) fn limited(&self) -> bool {
        self.rate.value.is_some()
    }

    /// Whether the kernel's promotion is closed (its rate limit held at 0).
    pub(super) fn closed(&self) -> bool {
        self.rate.value == Some(0)
    }

    /// Bytes of the lower-tier pages whose hint fault passed the kernel's
    /// hot-page test since the last call ([`policy::Snapshot::hot_below_bytes`]):
    /// the growth of `pgpromote_candidate` in `<procfs>/vmstat`, times the
    /// base page size. None on the first call, and where the counter is
    /// missing (kernels before 5.18; logged once) or unreadable.
    pub(super) fn hot_below_bytes(&mut self, procfs_root: &Path) -> Option<u64> {
        if self.no_candidates {
            return None;
        }
        let path = procfs_root.join("vmstat");
        let now = match fs::read_to_string(&path) {
            Ok(text) => text.lines().find_map(|l| {
                l.strip_prefix("pgpromote_candidate ")
                    .and_then(|v| v.trim().parse::<u64>().ok())
            }),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "cannot read vmstat");
                None
            }
        };
        if now.is_none() && path.exists() {
            self.no_candidates = true;
            tracing::info!(
                path = %path.display(),
                "no pgpromote_candidate counter (a kernel before 5.18?): kernel promotion is limited, never closed, in a steady state"
            );
        }
        let prev = std::mem::replace(&mut self.candidates, now);
        Some(now?.saturating_sub(prev?) * crate::mover::base_page_size())
    }

    /// Whether NUMA balancing's scan period is held at
    /// `limits.promote_scan_period`.
    pub(super) fn scan_paced(&self) -> bool {
        self.scan.value.is_some()
    }

    /// Limits or opens the kernel's promotion for this cycle's plan.
    /// Failures are logged (a knob missing: once, and it is left alone);
    /// the cycle goes on either way.
    /// `promotion`: the mode in effect (`Controller::promotion`).
    pub(super) fn apply(
        &mut self,
        cfg: &Config,
        promotion: PromotionMode,
        plan: &Plan,
        names: &dyn Fn(u64) -> String,
    ) {
        let kernel = promotion == PromotionMode::Kernel;
        let rate = cfg.limits.steady_promote_rate.0;
        let want = match plan.promote_gate {
            _ if !kernel || rate == 0 => None,
            PromoteGate::Open => None,
            PromoteGate::Limited => Some(rate >> 20),
            PromoteGate::Closed => Some(0),
        };
        let path = cfg.daemon.procfs_root.join(PROMOTE_RATE_LIMIT);
        match hold(
            &mut self.knobs,
            &mut self.rate,
            &path,
            want,
            |c, v| c <= v,
            "cannot read the kernel's promotion rate limit (a kernel before 6.0?); limits.steady_promote_rate has no effect",
        ) {
            Held::Set(0) => tracing::info!(
                steady_after_s = cfg.limits.steady_after.as_secs_f64(),
                "steady: every container at or over its target and nothing hot on the lower tier; kernel promotion closed"
            ),
            Held::Set(mib) => tracing::info!(
                mib_per_s = mib,
                steady_after_s = cfg.limits.steady_after.as_secs_f64(),
                "steady: every container at or over its target; kernel promotion limited"
            ),
            Held::Restored => {
                let under: Vec<String> = plan
                    .containers
                    .iter()
                    .filter(|p| p.state == PlacementState::UnderTarget)
                    .map(|p| names(p.id))
                    .collect();
                tracing::info!(
                    under_target = ?under,
                    "not steady: kernel promotion no longer limited by tierd"
                );
            }
            Held::Nothing => {}
        }
        let period = cfg.limits.promote_scan_period;
        let want = (kernel && !period.is_zero() && plan.scan_paced)
            .then(|| period.as_millis().max(1) as u64);
        let path = cfg.daemon.debugfs_root.join(SCAN_PERIOD_MAX);
        match hold(
            &mut self.knobs,
            &mut self.scan,
            &path,
            want,
            |c, v| c <= v,
            "cannot read NUMA balancing's scan period (debugfs not mounted, or a kernel without CONFIG_NUMA_BALANCING); limits.promote_scan_period has no effect",
        ) {
            Held::Set(ms) => tracing::info!(
                scan_period_max_ms = ms,
                "a newcomer under its target: NUMA balancing rescans lower-tier pages at least this often, so kernel promotion keeps going"
            ),
            Held::Restored => tracing::info!(
                "no newcomer under its target: NUMA balancing's scan period back to the kernel's"
            ),
            Held::Nothing => {}
        }
        let hot = cfg.limits.promote_hot_threshold;
        let want = (kernel && !hot.is_zero() && !plan.steady).then_some(hot.as_millis() as u64);
        let path = cfg.daemon.debugfs_root.join(HOT_THRESHOLD);
        let held = hold(
            &mut self.knobs,
            &mut self.threshold,
            &path,
            want,
            |c, v| c >= v,
            "cannot read NUMA balancing's hot-page threshold (debugfs not mounted, or a kernel before 5.18); limits.promote_hot_threshold has no effect",
        );
        if matches!(held, Held::Nothing) {
            return;
        }
        self.threshold_path = Some(path);
        let reset = reset_promotion_threshold(&cfg.daemon.procfs_root);
        match (held, reset) {
            (_, Err(e)) => tracing::warn!(
                error = format!("{e:#}"),
                "cannot reset the kernel's per-node hot-page threshold: it moves to the new value an eighth a minute"
            ),
            (Held::Set(ms), Ok(_)) => tracing::info!(
                hot_threshold_ms = ms,
                "not steady: the kernel's promotion takes lower-tier pages faulted up to this long after their scan"
            ),
            _ => tracing::info!(
                "steady: the kernel's hot-page threshold back to its own value"
            ),
        }
    }

    /// Whether NUMA balancing's hot-page threshold is held at
    /// `limits.promote_hot_threshold`.
    pub(super) fn threshold_held(&self) -> bool {
        self.threshold.value.is_some()
    }

    /// Writes the originals back (exit, reload to another mode).
    /// With the threshold written back, the kernel's per-node copy is
    /// reset to it (`procfs_root`: where `kernel.numa_balancing` is).
    pub(super) fn restore(&mut self, procfs_root: &Path) {
        let threshold = self
            .threshold_path
            .take()
            .is_some_and(|p| self.knobs.changed_path(&p));
        self.knobs.restore();
        self.rate.value = None;
        self.scan.value = None;
        self.threshold.value = None;
        if threshold {
            if let Err(e) = reset_promotion_threshold(procfs_root) {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot reset the kernel's per-node hot-page threshold"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::sysctl::NUMA_BALANCING;

    /// A config whose procfs and debugfs roots are `dir`, with the knobs
    /// at the kernel's defaults and tiering mode on.
    fn setup(dir: &Path) -> Config {
        let mut cfg = Config::parse("", Path::new("test.toml")).unwrap();
        cfg.daemon.procfs_root = dir.join("proc");
        cfg.daemon.debugfs_root = dir.join("debug");
        cfg.limits.promote_scan_period = Duration::from_secs(2);
        for (p, v) in [
            (cfg.daemon.procfs_root.join(PROMOTE_RATE_LIMIT), "65536\n"),
            (cfg.daemon.debugfs_root.join(SCAN_PERIOD_MAX), "60000\n"),
            (cfg.daemon.debugfs_root.join(HOT_THRESHOLD), "1000\n"),
            (cfg.daemon.procfs_root.join(NUMA_BALANCING), "2\n"),
        ] {
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, v).unwrap();
        }
        cfg
    }

    fn read(p: PathBuf) -> String {
        fs::read_to_string(p).unwrap().trim().to_owned()
    }

    /// A steady plan (promotion limited), or one that paces the scan.
    fn plan(steady: bool) -> Plan {
        Plan {
            steady,
            promote_gate: if steady {
                PromoteGate::Limited
            } else {
                PromoteGate::Open
            },
            scan_paced: !steady,
            ..Plan::default()
        }
    }

    /// Steady: the rate is limited and the scan period is the kernel's;
    /// a container lately under its target: the other way round; restore
    /// gives both back.
    #[test]
    fn the_rate_is_held_when_steady_and_the_scan_period_when_not() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = setup(dir.path());
        let rate = || read(cfg.daemon.procfs_root.join(PROMOTE_RATE_LIMIT));
        let scan = || read(cfg.daemon.debugfs_root.join(SCAN_PERIOD_MAX));
        let names = |id: u64| id.to_string();
        let mut g = PromotionGate::default();
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert_eq!((rate().as_str(), scan().as_str()), ("65536", "2000"));
        assert!(!g.limited() && g.scan_paced());
        g.apply(&cfg, cfg.daemon.promotion, &plan(true), &names);
        assert_eq!((rate().as_str(), scan().as_str()), ("4", "60000"));
        assert!(g.limited() && !g.scan_paced());
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert_eq!((rate().as_str(), scan().as_str()), ("65536", "2000"));
        // Closed, limited, closed: 0, the steady rate, 0.
        let closed = Plan {
            promote_gate: PromoteGate::Closed,
            ..plan(true)
        };
        g.apply(&cfg, cfg.daemon.promotion, &closed, &names);
        assert_eq!(rate(), "0");
        assert!(g.limited() && g.closed());
        g.apply(&cfg, cfg.daemon.promotion, &plan(true), &names);
        assert_eq!(rate(), "4");
        assert!(g.limited() && !g.closed());
        g.apply(&cfg, cfg.daemon.promotion, &closed, &names);
        assert_eq!(rate(), "0");
        g.restore(&cfg.daemon.procfs_root);
        assert_eq!((rate().as_str(), scan().as_str()), ("65536", "60000"));
        // steady_promote_rate = 0: tierd never touches the limit.
        let mut cfg0 = cfg.clone();
        cfg0.limits.steady_promote_rate = crate::config::Bytes(0);
        let mut g = PromotionGate::default();
        g.apply(&cfg0, cfg0.daemon.promotion, &closed, &names);
        assert_eq!(rate(), "65536");
        assert!(!g.limited());
    }

    /// `pgpromote_candidate` growth, in bytes, from the second read on;
    /// None without the counter (a kernel before 5.18).
    #[test]
    fn hot_pages_below_are_read_from_vmstat() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = setup(dir.path());
        let vmstat = cfg.daemon.procfs_root.join("vmstat");
        let page = crate::mover::base_page_size();
        let mut g = PromotionGate::default();
        fs::write(&vmstat, "pgpromote_success 7\npgpromote_candidate 100\n").unwrap();
        assert_eq!(g.hot_below_bytes(&cfg.daemon.procfs_root), None);
        fs::write(&vmstat, "pgpromote_success 9\npgpromote_candidate 164\n").unwrap();
        assert_eq!(g.hot_below_bytes(&cfg.daemon.procfs_root), Some(64 * page));
        fs::write(&vmstat, "pgpromote_success 9\n").unwrap();
        assert_eq!(g.hot_below_bytes(&cfg.daemon.procfs_root), None);
        fs::write(&vmstat, "pgpromote_success 9\npgpromote_candidate 200\n").unwrap();
        assert_eq!(
            g.hot_below_bytes(&cfg.daemon.procfs_root),
            None,
            "a kernel without the counter is not asked again"
        );
        // The real files: 7.3 also has pgpromote_candidate_nrl (promotions
        // past the rate limit into free room), which must not be read.
        for kernel in ["linux-6.12", "linux-7.3"] {
            let real = fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../tests/fixtures")
                    .join(kernel)
                    .join("proc/vmstat"),
            )
            .unwrap();
            let mut g = PromotionGate::default();
            fs::write(&vmstat, &real).unwrap();
            assert_eq!(g.hot_below_bytes(&cfg.daemon.procfs_root), None);
            let grown = real
                .replace("pgpromote_candidate 0\n", "pgpromote_candidate 10\n")
                .replace(
                    "pgpromote_candidate_nrl 0\n",
                    "pgpromote_candidate_nrl 999\n",
                );
            fs::write(&vmstat, grown).unwrap();
            assert_eq!(
                g.hot_below_bytes(&cfg.daemon.procfs_root),
                Some(10 * page),
                "{kernel}"
            );
        }
    }

    /// An operator's own shorter period stays; `promote_scan_period = 0`
    /// and `promotion = "tierd"` leave the knob alone; a missing knob
    /// (debugfs not mounted) turns the scan half off, not the rate half.
    #[test]
    fn the_scan_period_is_left_alone_when_it_should_be() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = setup(dir.path());
        let path = cfg.daemon.debugfs_root.join(SCAN_PERIOD_MAX);
        let names = |id: u64| id.to_string();
        fs::write(&path, "1000\n").unwrap();
        let mut g = PromotionGate::default();
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert_eq!(read(path.clone()), "1000");
        g.restore(&cfg.daemon.procfs_root);
        assert_eq!(read(path.clone()), "1000");

        fs::write(&path, "60000\n").unwrap();
        cfg.limits.promote_scan_period = Duration::ZERO;
        let mut g = PromotionGate::default();
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert_eq!(read(path.clone()), "60000");
        assert!(!g.scan_paced());

        cfg.limits.promote_scan_period = Duration::from_secs(2);
        cfg.daemon.promotion = PromotionMode::Tierd;
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert_eq!(read(path.clone()), "60000");

        cfg.daemon.promotion = PromotionMode::Kernel;
        fs::remove_file(&path).unwrap();
        let mut g = PromotionGate::default();
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert!(g.scan.off && !g.scan_paced());
        g.apply(&cfg, cfg.daemon.promotion, &plan(true), &names);
        assert!(g.limited(), "the rate half still works");
        assert!(!path.exists(), "nothing written where the knob was missing");
    }

    /// Not steady: the threshold at `promote_hot_threshold` (ms); steady and
    /// at exit: the original back. The tiering mode is left as found. An
    /// operator's higher threshold stays; 0, `promotion = "tierd"` and a
    /// missing knob leave it alone.
    #[test]
    fn the_hot_threshold_is_raised_while_not_steady() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = setup(dir.path());
        cfg.limits.promote_hot_threshold = Duration::from_secs(2);
        let path = cfg.daemon.debugfs_root.join(HOT_THRESHOLD);
        let mode = cfg.daemon.procfs_root.join(NUMA_BALANCING);
        let names = |id: u64| id.to_string();
        let mut g = PromotionGate::default();
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert_eq!(read(path.clone()), "2000");
        assert!(g.threshold_held());
        assert_eq!(read(mode.clone()), "2");
        g.apply(&cfg, cfg.daemon.promotion, &plan(true), &names);
        assert_eq!(read(path.clone()), "1000");
        assert!(!g.threshold_held());
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert_eq!(read(path.clone()), "2000");
        g.restore(&cfg.daemon.procfs_root);
        assert_eq!(
            (read(path.clone()).as_str(), read(mode.clone()).as_str()),
            ("1000", "2")
        );

        fs::write(&path, "3000\n").unwrap();
        let mut g = PromotionGate::default();
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert_eq!(
            read(path.clone()),
            "3000",
            "an operator's higher value stays"
        );
        g.restore(&cfg.daemon.procfs_root);
        assert_eq!(read(path.clone()), "3000");

        fs::write(&path, "1000\n").unwrap();
        cfg.limits.promote_hot_threshold = Duration::ZERO;
        let mut g = PromotionGate::default();
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert!(!g.threshold_held());
        cfg.limits.promote_hot_threshold = Duration::from_secs(2);
        g.apply(&cfg, PromotionMode::Tierd, &plan(false), &names);
        assert_eq!(read(path.clone()), "1000");
        assert!(!g.threshold_held());

        fs::remove_file(&path).unwrap();
        let mut g = PromotionGate::default();
        g.apply(&cfg, cfg.daemon.promotion, &plan(false), &names);
        assert!(g.threshold.off && !g.threshold_held());
        assert!(g.scan_paced(), "the scan half still works");
        assert!(!path.exists(), "nothing written where the knob was missing");
    }
}
