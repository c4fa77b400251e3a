//! The cgroup files tierd writes to steer the kernel, one actuator per
//! kind: protection (`memory.low`, `memory.min`) and pinning (`cpuset.mems`
//! for `opt_out`, and the cpuset controller in its parent's
//! `cgroup.subtree_control`). Each actuator owns the record of what it wrote — the
//! cgroup id, the original and tierd's current value per file — journals
//! each original before its first write ([`crate::journal`]), and puts the
//! originals back ([`Writes::restore`]). Demotion (`memory.reclaim`) changes
//! no setting and needs no undo; tierd's own page moves are in
//! [`crate::regulate`]. What to write is decided in `policy`.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::PathBuf;

use cgroupctl::{CgroupFs, Limit, NodeSet};

use crate::journal::SharedJournal;

/// A cgroup interface file an actuator writes.
pub trait Knob: Copy + Ord {
    type Value: Clone + PartialEq + Display;
    /// The file's name in the cgroup directory.
    fn file(self) -> &'static str;
    /// Error label of `tierd_container_reclaim_errors`.
    fn metric(self) -> &'static str;
    fn read(self, cg: &CgroupFs, path: &str) -> cgroupctl::Result<Self::Value>;
    fn write(self, cg: &CgroupFs, path: &str, value: &Self::Value) -> cgroupctl::Result<()>;
    /// Writes the original back; by default as any value.
    fn put_back(self, cg: &CgroupFs, path: &str, original: &Self::Value) -> cgroupctl::Result<()> {
        self.write(cg, path, original)
    }
}

/// A cgroup file tierd overwrote, with what it held before.
#[derive(Debug, Clone)]
struct Written<T> {
    id: u64,
    original: T,
    current: T,
}

/// What one actuator wrote, per (knob, cgroup path), and its undo.
pub struct Writes<K: Knob> {
    written: BTreeMap<(K, String), Written<K::Value>>,
    journal: Option<SharedJournal>,
}

impl<K: Knob> Default for Writes<K> {
    fn default() -> Self {
        Writes {
            written: BTreeMap::new(),
            journal: None,
        }
    }
}

impl<K: Knob> Writes<K> {
    /// Journals each original before the first write (see
    /// [`crate::journal`]).
    pub fn set_journal(&mut self, journal: SharedJournal) {
        self.journal = Some(journal);
    }

    /// Whether tierd has written `knob` of `path` (and not restored it).
    pub fn contains(&self, knob: K, path: &str) -> bool {
        self.written.contains_key(&(knob, path.to_owned()))
    }

    /// The value `knob` of `path` had before tierd's first write.
    pub fn original(&self, knob: K, path: &str) -> Option<K::Value> {
        self.written
            .get(&(knob, path.to_owned()))
            .map(|w| w.original.clone())
    }

    /// Writes `value` to `knob` of the cgroup at `path` (id `id`) unless
    /// tierd's last write there was the same. Before the first write (or the
    /// first into a recreated cgroup) the original is read and journalled;
    /// when it cannot be read or journalled, nothing is written (logged).
    ///
    /// Errors: the kernel refused the write (the caller counts it); a
    /// vanished cgroup is not an error.
    pub fn write(
        &mut self,
        cg: &CgroupFs,
        knob: K,
        path: &str,
        id: u64,
        value: K::Value,
    ) -> cgroupctl::Result<()> {
        let key = (knob, path.to_owned());
        let original = match self.written.get(&key) {
            Some(w) if w.id == id && w.current == value => return Ok(()),
            // The first original stays: a later read would see tierd's own.
            Some(w) if w.id == id => w.original.clone(),
            _ => match knob.read(cg, path) {
                Ok(v) => {
                    let file = cg.dir(path).join(knob.file());
                    if let Some(j) = &self.journal {
                        let rec = j.lock().unwrap_or_else(|e| e.into_inner()).record(
                            &file,
                            &v.to_string(),
                            Some(id),
                        );
                        if let Err(e) = rec {
                            tracing::warn!(
                                error = format!("{e:#}"),
                                "{} not written",
                                file.display()
                            );
                            return Ok(());
                        }
                    }
                    v
                }
                Err(e) => {
                    tracing::debug!(container = %path, error = %e, "{} unreadable; skipped", knob.file());
                    return Ok(());
                }
            },
        };
        match knob.write(cg, path, &value) {
            Ok(()) => {
                self.written.insert(
                    key,
                    Written {
                        id,
                        original,
                        current: value,
                    },
                );
                Ok(())
            }
            Err(cgroupctl::Error::Vanished(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Forgets the writes into cgroups for which `alive(path, id)` is false
    /// (gone, or recreated under a new id): there is nothing to restore.
    pub fn forget_vanished(&mut self, cg: &CgroupFs, alive: impl Fn(&str, u64) -> bool) {
        let mut gone: Vec<PathBuf> = Vec::new();
        self.written.retain(|(k, p), w| {
            alive(p, w.id) || {
                gone.push(cg.dir(p).join(k.file()));
                false
            }
        });
        self.journal_forget(gone);
    }

    /// Puts every original back, in reverse key order (for protection:
    /// `memory.min` before `memory.low`, children before their parents, so
    /// that no child is capped below the value it is restored to), into
    /// cgroups that still have the recorded id. Failures are logged.
    pub fn restore(&mut self, cg: &CgroupFs) {
        let mut done = Vec::new();
        for ((knob, path), w) in std::mem::take(&mut self.written).into_iter().rev() {
            if cg.cgroup_id(&path).ok() != Some(w.id) {
                continue;
            }
            match knob.put_back(cg, &path, &w.original) {
                Ok(()) => done.push(cg.dir(&path).join(knob.file())),
                Err(e) => {
                    tracing::warn!(container = %path, error = %e, "cannot restore {}", knob.file())
                }
            }
        }
        self.journal_forget(done);
    }

    fn journal_forget(&self, files: Vec<PathBuf>) {
        if let Some(j) = &self.journal {
            let mut j = j.lock().unwrap_or_else(|e| e.into_inner());
            for f in files {
                j.forget(&f);
            }
        }
    }
}

/// The cgroup protection knobs tierd writes (cgroup-v2.rst "Memory
/// Protection"): both cover a memcg's total usage, `low` best effort, `min`
/// hard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protection {
    Low,
    Min,
}

impl Knob for Protection {
    type Value = Limit;

    fn file(self) -> &'static str {
        match self {
            Protection::Low => "memory.low",
            Protection::Min => "memory.min",
        }
    }

    fn metric(self) -> &'static str {
        match self {
            Protection::Low => "memory_low",
            Protection::Min => "memory_min",
        }
    }

    fn read(self, cg: &CgroupFs, path: &str) -> cgroupctl::Result<Limit> {
        match self {
            Protection::Low => cg.memory_low(path),
            Protection::Min => cg.memory_min(path),
        }
    }

    fn write(self, cg: &CgroupFs, path: &str, value: &Limit) -> cgroupctl::Result<()> {
        match self {
            Protection::Low => cg.set_memory_low(path, *value),
            Protection::Min => cg.set_memory_min(path, *value),
        }
    }
}

/// The value written for a protection the policy gives in bytes: 0 stays 0,
/// anything else is `max`. The policy protects a container's whole usage
/// (memory.numa_stat: anon + file per node), but the kernel compares the
/// effective protection with `memory.current`, which also counts kernel
/// memory (page tables, slab: 620 KiB above anon + file in the captured
/// 6.12 cgroup) — `mem_cgroup_below_low`/`_below_min` in
/// include/linux/memcontrol.h need protection ≥ `memory.current` — so
/// writing the usage in bytes protects nothing under the multi-gen LRU and
/// only most of it under the classic LRU's proportional scan.
pub fn protection_limit(bytes: u64) -> Limit {
    if bytes == 0 {
        Limit::Bytes(0)
    } else {
        Limit::Max
    }
}

/// `cpuset.mems`, written to pin an `opt_out` container to the fast tier.
/// In cgroup v2 a change migrates the cgroup's existing pages too
/// (asynchronously).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CpusetMems;

impl Knob for CpusetMems {
    type Value = NodeSet;

    fn file(self) -> &'static str {
        "cpuset.mems"
    }

    fn metric(self) -> &'static str {
        "cpuset"
    }

    fn read(self, cg: &CgroupFs, path: &str) -> cgroupctl::Result<NodeSet> {
        cg.cpuset_mems(path)
    }

    fn write(self, cg: &CgroupFs, path: &str, value: &NodeSet) -> cgroupctl::Result<()> {
        cg.set_cpuset_mems(path, value)
    }

    /// An empty `cpuset.mems` ("inherit") cannot be written back while the
    /// cgroup has tasks (ENOSPC); the parent's effective nodes are what it
    /// had.
    fn put_back(self, cg: &CgroupFs, path: &str, original: &NodeSet) -> cgroupctl::Result<()> {
        let res = cg.set_cpuset_mems(path, original);
        if res.is_err() && original.is_empty() {
            let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
            if let Ok(nodes) = cg.cpuset_mems_effective(parent) {
                return cg.set_cpuset_mems(path, &nodes);
            }
        }
        res
    }
}

/// The cpuset controller in a parent's `cgroup.subtree_control`: enabled
/// so that an `opt_out` child has a `cpuset.mems` to write; disabled again
/// at restore where tierd enabled it (after the children's `cpuset.mems`,
/// which [`crate::controller::Controller::restore`] puts back first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SubtreeCpuset;

/// Whether a controller is enabled for a cgroup's children, as
/// [`SubtreeCpuset`] reads and writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enabled(pub bool);

impl Display for Enabled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // As journalled: what to write back to cgroup.subtree_control.
        f.write_str(if self.0 { "+cpuset" } else { "-cpuset" })
    }
}

impl Knob for SubtreeCpuset {
    type Value = Enabled;

    fn file(self) -> &'static str {
        "cgroup.subtree_control"
    }

    fn metric(self) -> &'static str {
        "cpuset"
    }

    fn read(self, cg: &CgroupFs, path: &str) -> cgroupctl::Result<Enabled> {
        Ok(Enabled(
            cg.subtree_control(path)?.iter().any(|c| c == "cpuset"),
        ))
    }

    fn write(self, cg: &CgroupFs, path: &str, value: &Enabled) -> cgroupctl::Result<()> {
        if value.0 {
            cg.enable_controllers(path, &["cpuset"])
        } else {
            cg.disable_controllers(path, &["cpuset"])
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::journal::Journal;

    /// Two files per cgroup, written whole (regular files do not act on
    /// each write as cgroup files do): the record-and-undo logic alone.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum TestKnob {
        A,
        B,
    }

    impl Knob for TestKnob {
        type Value = String;
        fn file(self) -> &'static str {
            match self {
                TestKnob::A => "a",
                TestKnob::B => "b",
            }
        }
        fn metric(self) -> &'static str {
            "test"
        }
        fn read(self, cg: &CgroupFs, path: &str) -> cgroupctl::Result<String> {
            Ok(fs::read_to_string(cg.dir(path).join(self.file()))
                .map_err(|e| cgroupctl::Error::Vanished(e.to_string().into()))?
                .trim()
                .to_owned())
        }
        fn write(self, cg: &CgroupFs, path: &str, v: &String) -> cgroupctl::Result<()> {
            fs::write(cg.dir(path).join(self.file()), v)
                .map_err(|e| cgroupctl::Error::Vanished(e.to_string().into()))
        }
    }

    /// A parent and a child cgroup with both files at "0".
    fn tree() -> (tempfile::TempDir, CgroupFs, Writes<TestKnob>, SharedJournal) {
        let d = tempfile::tempdir().unwrap();
        for c in ["p", "p/c"] {
            fs::create_dir_all(d.path().join(c)).unwrap();
            fs::write(d.path().join(c).join("a"), "0").unwrap();
            fs::write(d.path().join(c).join("b"), "0").unwrap();
        }
        let cg = CgroupFs::new(d.path());
        let journal = Arc::new(Mutex::new(Journal::new(None)));
        let mut w = Writes::default();
        w.set_journal(journal.clone());
        (d, cg, w, journal)
    }

    #[test]
    fn first_originals_are_journalled_kept_and_put_back() {
        let (d, cg, mut w, journal) = tree();
        fs::write(d.path().join("p/c/a"), "4096").unwrap();
        let (p, c) = (cg.cgroup_id("p").unwrap(), cg.cgroup_id("p/c").unwrap());
        let max = || "max".to_string();
        w.write(&cg, TestKnob::A, "p/c", c, max()).unwrap();
        w.write(&cg, TestKnob::A, "p", p, max()).unwrap();
        w.write(&cg, TestKnob::B, "p/c", c, max()).unwrap();
        // A second write keeps the first original (not tierd's "max").
        w.write(&cg, TestKnob::A, "p/c", c, "7".into()).unwrap();
        assert_eq!(w.original(TestKnob::A, "p/c").as_deref(), Some("4096"));
        let entries = journal.lock().unwrap().entries().to_vec();
        assert_eq!(entries.len(), 3, "{entries:?}");
        assert_eq!(
            (entries[0].original.as_str(), entries[0].cgroup_id),
            ("4096", Some(c))
        );
        w.restore(&cg);
        let read = |f: &str| fs::read_to_string(d.path().join(f)).unwrap();
        assert_eq!(
            (read("p/c/a"), read("p/a"), read("p/c/b")),
            ("4096".into(), "0".into(), "0".into())
        );
        assert!(!w.contains(TestKnob::A, "p/c"));
        assert!(journal.lock().unwrap().entries().is_empty());
    }

    #[test]
    fn a_vanished_cgroup_is_forgotten_and_never_restored() {
        let (d, cg, mut w, journal) = tree();
        let c = cg.cgroup_id("p/c").unwrap();
        w.write(&cg, TestKnob::A, "p/c", c, "max".into()).unwrap();
        // Recreated under the same path: a new id, someone else's.
        fs::remove_dir_all(d.path().join("p/c")).unwrap();
        fs::create_dir_all(d.path().join("p/c")).unwrap();
        fs::write(d.path().join("p/c/a"), "theirs").unwrap();
        w.forget_vanished(&cg, |_, id| id != c);
        assert!(!w.contains(TestKnob::A, "p/c"));
        assert!(journal.lock().unwrap().entries().is_empty());
        w.restore(&cg);
        assert_eq!(
            fs::read_to_string(d.path().join("p/c/a")).unwrap(),
            "theirs"
        );
    }
}
