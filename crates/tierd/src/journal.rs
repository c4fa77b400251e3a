//! The journal of what tierd changed on the host: the original value of each
//! sysctl and cgroup file, persisted before tierd's first write to it. A
//! tierd that stopped without restoring (kill -9, OOM kill, abort, watchdog)
//! leaves the journal behind; the next start writes those originals back
//! before anything else ([`restore_leftover`]), so it never takes its own
//! earlier writes for originals and the host does not drift.
//!
//! The file is JSON, replaced atomically (temp file, fsync, rename) on every
//! new entry, under `/run/tierd` by default (the unit's
//! `RuntimeDirectory=`, kept across restarts by
//! `RuntimeDirectoryPreserve=restart`, gone at reboot with the settings).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One file tierd changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Absolute path of the file (a sysctl, a sysfs knob or a cgroup file).
    pub path: PathBuf,
    /// Its content before tierd's first write, trimmed.
    pub original: String,
    /// For a cgroup file, the id of its cgroup (the directory's inode) when
    /// it was recorded: a cgroup removed and recreated under the same path
    /// is someone else's and is not restored.
    pub cgroup_id: Option<u64>,
}

/// The entries of this run, persisted at `file` (or only kept in memory
/// when `file` is `None`: fixture tests and benchmarks).
#[derive(Debug, Default)]
pub struct Journal {
    file: Option<PathBuf>,
    entries: Vec<Entry>,
}

/// A journal shared by the actuators (sysctls, controller).
pub type SharedJournal = Arc<Mutex<Journal>>;

impl Journal {
    /// An empty journal persisted at `file`. Call [`restore_leftover`]
    /// first: this does not read what a previous run left there.
    pub fn new(file: Option<PathBuf>) -> Journal {
        Journal {
            file,
            entries: Vec::new(),
        }
    }

    /// Records `path`'s original value before tierd first writes it, and
    /// persists the journal before returning; an already recorded path
    /// keeps its first original.
    ///
    /// Errors: the journal file cannot be written (its directory is not
    /// writable): the caller must not write `path` then.
    pub fn record(&mut self, path: &Path, original: &str, cgroup_id: Option<u64>) -> Result<()> {
        if self
            .entries
            .iter()
            .any(|e| e.path == path && e.cgroup_id == cgroup_id)
        {
            return Ok(());
        }
        self.entries.push(Entry {
            path: path.to_owned(),
            original: original.trim().to_owned(),
            cgroup_id,
        });
        if let Err(e) = self.persist() {
            self.entries.pop();
            return Err(e);
        }
        Ok(())
    }

    /// Drops the entries of `path` (restored, or its cgroup is gone) and
    /// persists; a failure to persist is logged (the entry would only be
    /// restored once more at the next start).
    pub fn forget(&mut self, path: &Path) {
        let n = self.entries.len();
        self.entries.retain(|e| e.path != path);
        if self.entries.len() != n {
            if let Err(e) = self.persist() {
                tracing::warn!(error = format!("{e:#}"), "cannot update the journal");
            }
        }
    }

    /// The entries of this run, oldest first.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Everything was restored (a clean stop): the file goes.
    pub fn finish(&mut self) {
        self.entries.clear();
        if let Some(f) = &self.file {
            match fs::remove_file(f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %f.display(), error = %e, "cannot remove the journal")
                }
            }
        }
    }

    fn persist(&self) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).with_context(|| {
                format!("{}: cannot create the journal directory", dir.display())
            })?;
        }
        let tmp = file.with_extension("tmp");
        let text = serde_json::to_vec(&self.entries).expect("journal entries serialise");
        let mut f = fs::File::create(&tmp)
            .with_context(|| format!("{}: cannot write the journal", tmp.display()))?;
        f.write_all(&text)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("{}: cannot write the journal", tmp.display()))?;
        fs::rename(&tmp, file)
            .with_context(|| format!("{}: cannot write the journal", file.display()))
    }
}

/// Restores what a previous run left in the journal at `file`, newest entry
/// first, then removes the file. A cgroup file is restored only while its
/// cgroup still has the recorded id (`cgroup_id` gives the current id of a
/// file's cgroup, None when it is gone). Returns how many were restored.
///
/// Errors: the file exists but cannot be read or parsed (it names the file;
/// remove it after checking the host's settings by hand). A value that
/// cannot be written back is logged and skipped.
pub fn restore_leftover(file: &Path, cgroup_id: impl Fn(&Path) -> Option<u64>) -> Result<usize> {
    let text = match fs::read(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("{}: cannot read", file.display())),
    };
    let entries: Vec<Entry> = serde_json::from_slice(&text).with_context(|| {
        format!(
            "{}: not a tierd journal; check the host's settings and remove it",
            file.display()
        )
    })?;
    let mut restored = 0;
    for e in entries.iter().rev() {
        if let Some(id) = e.cgroup_id {
            if cgroup_id(&e.path) != Some(id) {
                continue;
            }
        }
        // One write with a newline, as `echo` does: an empty cpuset.mems
        // must arrive as "\n" (a zero-length write is no write at all).
        match fs::write(&e.path, format!("{}\n", e.original)) {
            Ok(()) => {
                restored += 1;
                tracing::info!(path = %e.path.display(), value = %e.original,
                    "restored a setting left changed by a previous tierd");
            }
            Err(err) => tracing::warn!(path = %e.path.display(), value = %e.original, error = %err,
                "cannot restore a setting left changed by a previous tierd"),
        }
    }
    fs::remove_file(file).with_context(|| format!("{}: cannot remove", file.display()))?;
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leftover_journal_restores_first_originals_newest_first() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("run/journal.json");
        let knob = d.path().join("numa_balancing");
        let low = d.path().join("cg/memory.low");
        fs::create_dir_all(low.parent().unwrap()).unwrap();
        fs::write(&knob, "0\n").unwrap();
        fs::write(&low, "0\n").unwrap();
        let mut j = Journal::new(Some(file.clone()));
        j.record(&knob, "0\n", None).unwrap();
        fs::write(&knob, "2").unwrap();
        // A second record of the same file keeps the first original.
        j.record(&knob, "2", None).unwrap();
        j.record(&low, "0", Some(7)).unwrap();
        fs::write(&low, "max").unwrap();
        assert_eq!(j.entries().len(), 2);
        // Dies here (no finish): the next start restores from the file.
        drop(j);
        let n = restore_leftover(&file, |p| (p == low).then_some(7)).unwrap();
        assert_eq!(n, 2);
        assert_eq!(fs::read_to_string(&knob).unwrap(), "0\n");
        assert_eq!(fs::read_to_string(&low).unwrap(), "0\n");
        assert!(!file.exists());
        // Nothing left: a second start restores nothing.
        assert_eq!(restore_leftover(&file, |_| None).unwrap(), 0);
    }

    #[test]
    fn a_recreated_cgroup_is_not_restored_and_a_clean_stop_leaves_no_journal() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("journal.json");
        let low = d.path().join("memory.low");
        fs::write(&low, "max").unwrap();
        let mut j = Journal::new(Some(file.clone()));
        j.record(&low, "0", Some(7)).unwrap();
        drop(j);
        // The cgroup now has id 8: someone else's.
        assert_eq!(restore_leftover(&file, |_| Some(8)).unwrap(), 0);
        assert_eq!(fs::read_to_string(&low).unwrap(), "max");

        let mut j = Journal::new(Some(file.clone()));
        j.record(&low, "0", Some(8)).unwrap();
        assert!(file.exists());
        j.forget(&low);
        assert!(j.entries().is_empty());
        j.finish();
        assert!(!file.exists());
    }

    #[test]
    fn an_unwritable_journal_refuses_the_record_and_a_corrupt_one_is_named() {
        let d = tempfile::tempdir().unwrap();
        // The journal's directory is a file: it cannot be created.
        let blocker = d.path().join("run");
        fs::write(&blocker, "").unwrap();
        let mut j = Journal::new(Some(blocker.join("journal.json")));
        assert!(j.record(Path::new("/proc/x"), "0", None).is_err());
        assert!(j.entries().is_empty());

        let bad = d.path().join("bad.json");
        fs::write(&bad, "{not json").unwrap();
        let e = restore_leftover(&bad, |_| None).unwrap_err();
        assert!(format!("{e:#}").contains("bad.json"), "{e:#}");
    }
}
