//! Host-wide kernel knobs tierd sets and restores at exit:
//! `/sys/kernel/mm/numa/demotion_enabled` and `kernel.numa_balancing` (at
//! start), `kernel.numa_balancing_promote_rate_limit_MBps` (while the plan
//! is steady, `controller/gate.rs`), NUMA balancing's longest scan
//! period and its hot-page threshold (while it is not).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::journal::SharedJournal;

/// `demotion_enabled` below the sysfs root (Documentation/ABI/testing/sysfs-kernel-mm-numa).
pub const DEMOTION_ENABLED: &str = "kernel/mm/numa/demotion_enabled";
/// `kernel.numa_balancing` below the procfs root (Documentation/admin-guide/sysctl/kernel.rst):
/// 0 off, 1 NUMA balancing, 2 memory-tiering promotion, 3 both.
pub const NUMA_BALANCING: &str = "sys/kernel/numa_balancing";
/// `kernel.numa_balancing_promote_rate_limit_MBps` below the procfs root
/// (Documentation/admin-guide/sysctl/kernel.rst, 6.0+): the most MiB per
/// second NUMA balancing promotes into each fast node; candidates over it
/// in a one-second window stay where they are (`numa_promotion_rate_limit`
/// in kernel/sched/fair.c). The kernel's default, 65536, is no limit.
pub const PROMOTE_RATE_LIMIT: &str = "sys/kernel/numa_balancing_promote_rate_limit_MBps";

/// NUMA balancing's longest scan period, milliseconds, below the debugfs
/// root (Documentation/admin-guide/sysctl/kernel.rst "numa_balancing_scan_period_max_ms";
/// debugfs since 5.13). A task's period doubles after every scan whose
/// hint faults were mostly private (`update_task_scan_period` in
/// kernel/sched/fair.c), which in tiering mode is every scan, up to this
/// value divided by the task's 256 MiB scan windows. Default 60000.
pub const SCAN_PERIOD_MAX: &str = "sched/numa_balancing/scan_period_max_ms";

/// NUMA balancing's hot-page threshold, milliseconds, below the debugfs
/// root (debugfs `sched/numa_balancing/hot_threshold_ms`, 5.18+): in
/// tiering mode a lower-tier page is a promotion candidate when its hint
/// fault comes within this long of the scan that unmapped it
/// (`should_numa_migrate_memory` in kernel/sched/fair.c). The kernel
/// compares with a per-node copy (`pglist_data::nbp_threshold`) that it
/// moves by an eighth of this value once every `scan_period_max_ms` (up
/// while candidates stay under the promotion rate limit, down while they
/// exceed it) and resets only when the tiering bit of
/// `kernel.numa_balancing` is switched on ([`reset_promotion_threshold`]).
/// Default 1000.
pub const HOT_THRESHOLD: &str = "sched/numa_balancing/hot_threshold_ms";

/// Bit of `kernel.numa_balancing` that turns on memory-tiering promotion
/// (`NUMA_BALANCING_MEMORY_TIERING`, include/linux/sched/sysctl.h).
const MEMORY_TIERING: u64 = 2;

/// Resets every node's hot-page threshold to `hot_threshold_ms`
/// ([`HOT_THRESHOLD`]): writes `kernel.numa_balancing` (below
/// `procfs_root`) without its tiering bit and then with it again, the
/// only way the kernel resets the per-node copy (`reset_memory_tiering`
/// in kernel/sched/core.c, called when a write switches the bit on).
/// NUMA balancing is off for the microseconds between the two writes.
/// Returns false, changing nothing, when the tiering bit is not set
/// (kernel tiering's promotion is off: there is no threshold in use).
///
/// Errors: `kernel.numa_balancing` cannot be read or written (the path is
/// named). If the second write fails the first is retried once more;
/// should that fail too the error says the mode was left without tiering.
pub fn reset_promotion_threshold(procfs_root: &Path) -> Result<bool> {
    let path = procfs_root.join(NUMA_BALANCING);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    let mode: u64 = text
        .trim()
        .parse()
        .with_context(|| format!("{}: not a number: {:?}", path.display(), text.trim()))?;
    if mode & MEMORY_TIERING == 0 {
        return Ok(false);
    }
    std::fs::write(&path, (mode & !MEMORY_TIERING).to_string()).with_context(|| {
        format!(
            "{}: cannot write (tierd must run as root); the hot-page threshold was not reset",
            path.display()
        )
    })?;
    let on = mode.to_string();
    if let Err(e) = std::fs::write(&path, &on).or_else(|_| std::fs::write(&path, &on)) {
        return Err(e).with_context(|| {
            format!(
                "{}: cannot write {on} back: memory-tiering promotion is off until it is",
                path.display()
            )
        });
    }
    Ok(true)
}

/// One knob changed by tierd, with the value it had before.
#[derive(Debug, Clone)]
struct Saved {
    path: PathBuf,
    original: String,
}

/// Knobs changed by tierd. [`KernelKnobs::restore`] writes back the originals;
/// it is also called on drop, so a panic or early return leaves the host sane.
#[derive(Debug, Default)]
pub struct KernelKnobs {
    saved: Vec<Saved>,
    journal: Option<SharedJournal>,
}

impl KernelKnobs {
    /// Knobs whose originals are journalled in `journal` before each first
    /// write (see [`crate::journal`]).
    pub fn with_journal(journal: SharedJournal) -> Self {
        KernelKnobs {
            saved: Vec::new(),
            journal: Some(journal),
        }
    }

    /// Writes `value` to `path` unless it already holds it; remembers the old
    /// value for restore. Errors name the path (missing file: the kernel lacks
    /// the feature; EACCES: not root).
    pub fn set(&mut self, path: &Path, value: &str) -> Result<()> {
        let original = std::fs::read_to_string(path)
            .with_context(|| {
                format!(
                    "{}: cannot read (kernel without this feature?)",
                    path.display()
                )
            })?
            .trim()
            .to_owned();
        if normalize(&original) == normalize(value) {
            return Ok(());
        }
        if let Some(j) = &self.journal {
            j.lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(path, &original, None)
                .with_context(|| format!("{}: not changed", path.display()))?;
        }
        std::fs::write(path, value).with_context(|| {
            format!(
                "{}: cannot write {value:?} (tierd must run as root)",
                path.display()
            )
        })?;
        tracing::info!(path = %path.display(), from = %original, to = %value, "changed kernel setting");
        if !self.saved.iter().any(|s| s.path == path) {
            self.saved.push(Saved {
                path: path.to_owned(),
                original,
            });
        }
        Ok(())
    }

    /// Writes back the original value of `path` if tierd changed it, and
    /// forgets it (the journal too). Returns whether it was changed.
    ///
    /// Errors: the write failed; the original is kept for the next try and
    /// for [`KernelKnobs::restore`].
    pub fn restore_path(&mut self, path: &Path) -> Result<bool> {
        let Some(i) = self.saved.iter().position(|s| s.path == path) else {
            return Ok(false);
        };
        let original = &self.saved[i].original;
        std::fs::write(path, original)
            .with_context(|| format!("{}: cannot write back {original:?}", path.display()))?;
        tracing::info!(path = %path.display(), value = %original, "restored kernel setting");
        self.saved.remove(i);
        if let Some(j) = &self.journal {
            j.lock().unwrap_or_else(|e| e.into_inner()).forget(path);
        }
        Ok(true)
    }

    /// Writes back every original value, newest first. Failures are logged,
    /// not returned: restore runs on the way out and must try every knob.
    pub fn restore(&mut self) {
        while let Some(s) = self.saved.pop() {
            match std::fs::write(&s.path, &s.original) {
                Ok(()) => {
                    tracing::info!(path = %s.path.display(), value = %s.original, "restored kernel setting");
                    if let Some(j) = &self.journal {
                        j.lock().unwrap_or_else(|e| e.into_inner()).forget(&s.path);
                    }
                }
                Err(e) => {
                    tracing::error!(path = %s.path.display(), value = %s.original, error = %e, "cannot restore kernel setting")
                }
            }
        }
    }

    /// Whether tierd changed `path` (and has not restored it).
    pub fn changed_path(&self, path: &Path) -> bool {
        self.saved.iter().any(|s| s.path == path)
    }

    /// Number of knobs currently changed by tierd.
    pub fn changed(&self) -> usize {
        self.saved.len()
    }
}

impl Drop for KernelKnobs {
    fn drop(&mut self) {
        self.restore();
    }
}

/// `demotion_enabled` reads back as `true`/`false` but accepts `1`/`0` too.
fn normalize(v: &str) -> &str {
    match v.trim() {
        "1" | "true" | "y" | "Y" => "1",
        "0" | "false" | "n" | "N" => "0",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_restore() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("demotion_enabled");
        let b = dir.path().join("numa_balancing");
        std::fs::write(&a, "false\n").unwrap();
        std::fs::write(&b, "0\n").unwrap();
        {
            let mut k = KernelKnobs::default();
            k.set(&a, "1").unwrap();
            k.set(&b, "2").unwrap();
            k.set(&b, "2").unwrap();
            assert_eq!(k.changed(), 2);
            assert_eq!(std::fs::read_to_string(&a).unwrap(), "1");
            assert_eq!(std::fs::read_to_string(&b).unwrap(), "2");
        } // dropped: restores
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "false");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "0");
    }

    #[test]
    fn one_knob_is_restored_and_the_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("numa_balancing");
        let b = dir.path().join("numa_balancing_promote_rate_limit_MBps");
        std::fs::write(&a, "0\n").unwrap();
        std::fs::write(&b, "65536\n").unwrap();
        let mut k = KernelKnobs::default();
        k.set(&a, "2").unwrap();
        k.set(&b, "4").unwrap();
        k.set(&b, "8").unwrap();
        assert!(k.restore_path(&b).unwrap());
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "65536");
        assert!(!k.restore_path(&b).unwrap(), "restored once only");
        assert_eq!(k.changed(), 1);
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "2");
        k.set(&b, "4").unwrap();
        k.restore();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "0");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "65536");
    }

    #[test]
    fn unchanged_value_is_not_saved() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("demotion_enabled");
        std::fs::write(&a, "true\n").unwrap();
        let mut k = KernelKnobs::default();
        k.set(&a, "1").unwrap();
        assert_eq!(k.changed(), 0);
    }

    #[test]
    fn missing_knob_names_path() {
        let mut k = KernelKnobs::default();
        let err = k
            .set(Path::new("/nonexistent/demotion_enabled"), "1")
            .unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/demotion_enabled"));
    }

    #[test]
    fn the_threshold_reset_switches_the_tiering_bit_off_and_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(NUMA_BALANCING);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for (mode, reset) in [("2\n", true), ("3\n", true), ("1\n", false), ("0\n", false)] {
            std::fs::write(&path, mode).unwrap();
            assert_eq!(
                reset_promotion_threshold(dir.path()).unwrap(),
                reset,
                "{mode}"
            );
            assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), mode.trim());
        }
        std::fs::write(&path, "x\n").unwrap();
        let e = reset_promotion_threshold(dir.path()).unwrap_err();
        assert!(
            format!("{e:#}").contains("numa_balancing: not a number"),
            "{e:#}"
        );
        std::fs::remove_file(&path).unwrap();
        let e = reset_promotion_threshold(dir.path()).unwrap_err();
        assert!(
            format!("{e:#}").contains("numa_balancing: cannot read"),
            "{e:#}"
        );
    }
}
