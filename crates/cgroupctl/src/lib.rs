//! cgroup v2 files for tierd: discover cgroups, read `memory.*`, `cpuset.*` and
//! `cgroup.*` files into typed values, and write `memory.reclaim`,
//! `memory.low`, `cpuset.mems` and `cgroup.subtree_control`. No policy.
//!
//! Everything goes through [`CgroupFs`], which takes the cgroup2 mount point as
//! a parameter ([`DEFAULT_CGROUP_ROOT`] on a real host, a fixture tree in
//! tests). Cgroups are named by their path relative to that root (`""` is the
//! root cgroup, `"system.slice/foo.service"` a unit) and identified by their
//! cgroup id, the inode number of their directory.
//!
//! Formats and semantics: Documentation/admin-guide/cgroup-v2.rst (Linux 6.12).
//!
//! Errors: every [`Error`] names the file. A cgroup removed while tierd works
//! on it gives [`Error::Vanished`], which callers skip quietly; anything else
//! (a missing controller file, EBUSY, EINVAL, malformed content) is worth a
//! warning.

mod format;
pub mod lru_gen;
mod nodeset;

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

pub use format::{CpuStat, Limit, MemoryStat, NumaStat, Psi, PsiLine};
pub use lru_gen::LruGen;
pub use nodeset::{NodeSet, NodeSetParseError, MAX_ID as MAX_NODESET_ID};

/// Where cgroup2 is mounted on a systemd host.
pub const DEFAULT_CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Errors from reading or writing cgroup files. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read or written: the errno says why (EBUSY,
    /// EINVAL for a value the kernel refuses, EACCES without privileges, or
    /// ENOENT when the cgroup exists but the controller that provides the
    /// file is not enabled in its parent's `cgroup.subtree_control`).
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file's content is not in the format the kernel documents.
    #[error("{}: line {line}: {reason}", path.display())]
    Parse {
        path: PathBuf,
        /// 1-based line of the file.
        line: usize,
        reason: String,
    },
    /// The cgroup was removed (its directory is gone: ENOENT, or ENODEV from
    /// a file of a removed cgroup). Callers normally skip it at debug level.
    /// Carries the path of the file that was being accessed.
    #[error("{}: cgroup vanished", .0.display())]
    Vanished(PathBuf),
    /// The root is not a cgroup v2 hierarchy with the memory controller that
    /// tierd can write: `reason` says what is missing and what to do.
    #[error("{}: {reason}", path.display())]
    Unsupported { path: PathBuf, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Io { path, .. }
            | Error::Parse { path, .. }
            | Error::Vanished(path)
            | Error::Unsupported { path, .. } => path,
        }
    }

    /// The errno, for I/O errors.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// One cgroup found by [`CgroupFs::discover`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cgroup {
    /// Path relative to the root, without leading or trailing `/`; `""` for
    /// the root cgroup. E.g. `"system.slice/foo.service"`.
    pub path: String,
    /// The cgroup id: the inode number of the cgroup's directory, which is
    /// what the kernel reports as the cgroup id (`kernfs_node->id` on 64-bit;
    /// BPF's `bpf_get_current_cgroup_id`, `name_to_handle_at`). A cgroup
    /// removed and recreated under the same path gets a new id.
    pub id: u64,
}

/// What a `memory.reclaim` write achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimOutcome {
    /// The kernel reclaimed at least the bytes asked for.
    Full,
    /// EAGAIN: the kernel gave up after `MAX_RECLAIM_RETRIES` passes having
    /// reclaimed less than asked (cgroup-v2.rst, "memory.reclaim"). Not an
    /// error: some pages were still reclaimed.
    Short,
    /// EINTR: a signal arrived and the kernel stopped early. Some pages may
    /// have been reclaimed; retrying would start over, so it is reported.
    Interrupted,
}

/// The cgroup v2 hierarchy mounted at a root directory.
#[derive(Debug, Clone)]
pub struct CgroupFs {
    root: PathBuf,
}

/// Turns an I/O error on `file` (in cgroup directory `dir`) into an [`Error`]:
/// ENODEV (kernfs: the node was removed) is always [`Error::Vanished`];
/// ENOENT is `Vanished` when the cgroup directory itself is gone, else an
/// `Io` error (the file is missing because its controller is not enabled).
fn classify(dir: &Path, file: &Path, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ENODEV) => Error::Vanished(file.to_path_buf()),
        Some(libc::ENOENT) if !dir.is_dir() => Error::Vanished(file.to_path_buf()),
        _ => Error::Io {
            path: file.to_path_buf(),
            source: e,
        },
    }
}

/// Maps the result of the `memory.reclaim` write. EAGAIN → `Short`,
/// EINTR → `Interrupted`, other errors through [`classify`].
fn reclaim_outcome(dir: &Path, file: &Path, r: io::Result<()>) -> Result<ReclaimOutcome> {
    match r {
        Ok(()) => Ok(ReclaimOutcome::Full),
        Err(e) => match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(ReclaimOutcome::Short),
            Some(libc::EINTR) => Ok(ReclaimOutcome::Interrupted),
            _ => Err(classify(dir, file, e)),
        },
    }
}

/// One `write(2)` of `data` to an existing file opened `O_WRONLY` (no
/// `O_CREAT`, no `O_TRUNC`): cgroup files act on each write, so the value
/// must arrive whole in one call. A short write is reported as an error.
fn write_once(file: &Path, data: &[u8]) -> io::Result<()> {
    let mut f = fs::OpenOptions::new().write(true).open(file)?;
    let n = f.write(data)?;
    if n != data.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short write: {n} of {} bytes accepted", data.len()),
        ));
    }
    Ok(())
}

impl CgroupFs {
    /// A cgroup2 hierarchy mounted at `root` (normally [`DEFAULT_CGROUP_ROOT`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        CgroupFs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Checks that the root is what tierd needs before it changes anything:
    /// a cgroup v2 hierarchy (its root has `cgroup.controllers`), with the
    /// memory controller available (listed there), and writable
    /// (`cgroup.subtree_control` passes `access(W_OK)`).
    ///
    /// Errors: [`Error::Unsupported`] naming the root and what is missing —
    /// a cgroup v1 layout (per-controller mounts such as `memory/`, no
    /// `cgroup.controllers`), a v2 hierarchy whose memory controller is
    /// bound to v1 or disabled (`cgroup_disable=memory`), or a read-only
    /// mount; [`Error::Io`] if `cgroup.controllers` exists but cannot be read.
    pub fn check_v2_memory(&self) -> Result<()> {
        let unsupported = |reason: String| Error::Unsupported {
            path: self.root.clone(),
            reason,
        };
        let file = self.root.join("cgroup.controllers");
        let controllers = match fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let v1 = ["memory", "cpu", "cpuset"]
                    .iter()
                    .any(|c| self.root.join(c).is_dir());
                return Err(unsupported(if v1 {
                    "cgroup v1 hierarchy (per-controller mounts, no cgroup.controllers): \
                     tierd needs cgroup v2; boot with systemd.unified_cgroup_hierarchy=1 \
                     (and cgroup_no_v1=all)"
                        .into()
                } else {
                    "no cgroup.controllers: not a cgroup v2 mount; mount cgroup2 here or \
                     set daemon.cgroup_root to where it is mounted"
                        .into()
                }));
            }
            Err(source) => return Err(Error::Io { path: file, source }),
        };
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return Err(unsupported(format!(
                "the memory controller is not available in this cgroup v2 hierarchy \
                 (cgroup.controllers: \"{}\"): it is disabled (cgroup_disable=memory) or \
                 bound to a cgroup v1 mount; boot with it on the unified hierarchy",
                controllers.trim()
            )));
        }
        let control = self.root.join("cgroup.subtree_control");
        let c_path = std::ffi::CString::new(control.as_os_str().as_encoded_bytes())
            .map_err(|e| unsupported(e.to_string()))?;
        // SAFETY: a valid NUL-terminated path; access(2) only reads it.
        if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } != 0 {
            let e = io::Error::last_os_error();
            return Err(unsupported(format!(
                "{} is not writable ({e}): run tierd as root with the cgroup2 mount read-write",
                control.display()
            )));
        }
        Ok(())
    }

    /// Directory of the cgroup at `rel` (`""` = the root cgroup).
    pub fn dir(&self, rel: &str) -> PathBuf {
        let rel = rel.trim_matches('/');
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    /// Lists every cgroup under the root, including the root itself (path
    /// `""`, first), sorted by path in byte order. Only directories are
    /// cgroups. A directory that disappears during the walk (a unit stopping)
    /// is skipped, not an error; an unreadable root is. Directory names that
    /// are not UTF-8 are skipped (systemd and container runtimes never make
    /// them; [`Cgroup::path`] is a `String`).
    pub fn discover(&self) -> Result<Vec<Cgroup>> {
        let io_err = |path: &Path, source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let meta = fs::metadata(&self.root).map_err(|e| io_err(&self.root, e))?;
        let mut out = vec![Cgroup {
            path: String::new(),
            id: meta.ino(),
        }];
        let mut stack = vec![String::new()];
        while let Some(rel) = stack.pop() {
            let dir = self.dir(&rel);
            let entries = match fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if !rel.is_empty() && vanished_errno(&e) => continue,
                Err(e) => return Err(io_err(&dir, e)),
            };
            let mut children = Vec::new();
            for entry in entries {
                let entry = match entry {
                    Ok(e) => e,
                    Err(e) if vanished_errno(&e) => continue,
                    Err(e) => return Err(io_err(&dir, e)),
                };
                // The type and inode come with the directory entry
                // (getdents' d_type and d_ino; kernfs fills both, and its d_ino
                // is the inode number stat reports): no stat per control
                // file, of which every cgroup has dozens (measured under TCG:
                // the walk was a third of a quiet cycle). DirEntry::file_type
                // does not follow symlinks: only real directories are cgroups.
                let is_dir = match entry.file_type() {
                    Ok(t) => t.is_dir(),
                    Err(e) if vanished_errno(&e) => continue,
                    Err(e) => return Err(io_err(&entry.path(), e)),
                };
                if !is_dir {
                    continue;
                }
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let path = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                children.push(Cgroup {
                    path,
                    id: entry.ino(),
                });
            }
            for c in &children {
                stack.push(c.path.clone());
            }
            out.extend(children);
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// The cgroup id (directory inode) of the cgroup at `rel`.
    /// [`Error::Vanished`] if it does not exist.
    pub fn cgroup_id(&self, rel: &str) -> Result<u64> {
        let dir = self.dir(rel);
        match fs::metadata(&dir) {
            Ok(m) if m.is_dir() => Ok(m.ino()),
            Ok(_) => Err(Error::Io {
                path: dir,
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
            }),
            Err(e) if vanished_errno(&e) => Err(Error::Vanished(dir)),
            Err(e) => Err(Error::Io {
                path: dir,
                source: e,
            }),
        }
    }

    fn read(&self, rel: &str, file: &str) -> Result<(PathBuf, String)> {
        let dir = self.dir(rel);
        let path = dir.join(file);
        let bytes = fs::read(&path).map_err(|e| classify(&dir, &path, e))?;
        match String::from_utf8(bytes) {
            Ok(s) => Ok((path, s)),
            Err(e) => {
                let upto = &e.as_bytes()[..e.utf8_error().valid_up_to()];
                let line = upto.iter().filter(|&&b| b == b'\n').count() + 1;
                Err(Error::Parse {
                    path,
                    line,
                    reason: "not UTF-8 text".into(),
                })
            }
        }
    }

    fn parse<T>(
        &self,
        rel: &str,
        file: &str,
        f: impl FnOnce(&str) -> Result<T, format::Bad>,
    ) -> Result<T> {
        let (path, text) = self.read(rel, file)?;
        f(&text).map_err(|b| Error::Parse {
            path,
            line: b.line,
            reason: b.reason,
        })
    }

    fn write(&self, rel: &str, file: &str, data: &[u8]) -> Result<()> {
        let dir = self.dir(rel);
        let path = dir.join(file);
        write_once(&path, data).map_err(|e| classify(&dir, &path, e))
    }

    /// `memory.numa_stat`: per-node memory of the cgroup and its descendants.
    pub fn numa_stat(&self, rel: &str) -> Result<NumaStat> {
        self.parse(rel, "memory.numa_stat", format::parse_numa_stat)
    }

    /// `memory.stat`: memcg counters (hierarchical: includes descendants).
    pub fn memory_stat(&self, rel: &str) -> Result<MemoryStat> {
        self.parse(rel, "memory.stat", format::parse_memory_stat)
    }

    /// `memory.current`: bytes charged to the cgroup and its descendants.
    /// The root cgroup has no such file (ENOENT → [`Error::Io`]).
    pub fn memory_current(&self, rel: &str) -> Result<u64> {
        self.parse(rel, "memory.current", |t| {
            format::parse_single_u64(t, "memory.current")
        })
    }

    /// `memory.min`: hard protection, bytes or `max`.
    pub fn memory_min(&self, rel: &str) -> Result<Limit> {
        self.parse(rel, "memory.min", |t| format::parse_limit(t, "memory.min"))
    }

    /// `memory.low`: best-effort protection, bytes or `max`. Protection is
    /// hierarchical: it is effective only up to what the parent's allows.
    pub fn memory_low(&self, rel: &str) -> Result<Limit> {
        self.parse(rel, "memory.low", |t| format::parse_limit(t, "memory.low"))
    }

    /// `memory.high`: throttle limit, bytes or `max`.
    pub fn memory_high(&self, rel: &str) -> Result<Limit> {
        self.parse(rel, "memory.high", |t| {
            format::parse_limit(t, "memory.high")
        })
    }

    /// `memory.max`: hard limit, bytes or `max`.
    pub fn memory_max(&self, rel: &str) -> Result<Limit> {
        self.parse(rel, "memory.max", |t| format::parse_limit(t, "memory.max"))
    }

    /// `memory.pressure`: PSI for memory (Documentation/accounting/psi.rst).
    pub fn memory_pressure(&self, rel: &str) -> Result<Psi> {
        self.parse(rel, "memory.pressure", format::parse_psi)
    }

    /// `cpu.stat`: CPU time of the cgroup's tasks (and its descendants'),
    /// µs, cumulative.
    pub fn cpu_stat(&self, rel: &str) -> Result<CpuStat> {
        self.parse(rel, "cpu.stat", format::parse_cpu_stat)
    }

    /// `cpu.pressure`: PSI for CPU (Documentation/accounting/psi.rst);
    /// `some` total is the time, µs, at least one of the cgroup's tasks was
    /// runnable and waiting for a CPU.
    pub fn cpu_pressure(&self, rel: &str) -> Result<Psi> {
        self.parse(rel, "cpu.pressure", format::parse_psi)
    }

    /// `cpuset.mems`: the nodes configured for the cgroup; empty means "all of
    /// the parent's" (cgroup-v2.rst, "Cpuset Interface Files").
    pub fn cpuset_mems(&self, rel: &str) -> Result<NodeSet> {
        self.parse(rel, "cpuset.mems", format::parse_nodeset)
    }

    /// `cpuset.mems.effective`: the nodes the cgroup may actually allocate on.
    pub fn cpuset_mems_effective(&self, rel: &str) -> Result<NodeSet> {
        self.parse(rel, "cpuset.mems.effective", format::parse_nodeset)
    }

    /// `cgroup.procs`: PIDs of the processes directly in the cgroup (not its
    /// descendants), in the kernel's order (unsorted; may repeat in theory).
    pub fn procs(&self, rel: &str) -> Result<Vec<i32>> {
        self.parse(rel, "cgroup.procs", format::parse_procs)
    }

    /// `cgroup.controllers`: controllers available to the cgroup.
    pub fn controllers(&self, rel: &str) -> Result<Vec<String>> {
        self.parse(rel, "cgroup.controllers", format::parse_controllers)
    }

    /// `cgroup.subtree_control`: controllers enabled for the cgroup's children.
    pub fn subtree_control(&self, rel: &str) -> Result<Vec<String>> {
        self.parse(rel, "cgroup.subtree_control", format::parse_controllers)
    }

    /// Writes `<bytes>` to `memory.reclaim` (cgroup-v2.rst, "memory.reclaim";
    /// Linux ≥ 5.19). The kernel reclaims from the cgroup and its descendants,
    /// ignoring their `memory.low`. With
    /// `/sys/kernel/mm/numa/demotion_enabled` = true, fast-tier pages are
    /// demoted first and *demoted pages count as reclaimed*; lower-tier pages
    /// may also be swapped out or dropped. The call blocks while the kernel
    /// works. EAGAIN (reclaimed less than asked) gives
    /// [`ReclaimOutcome::Short`], not an error.
    pub fn reclaim(&self, rel: &str, bytes: u64) -> Result<ReclaimOutcome> {
        let dir = self.dir(rel);
        let path = dir.join("memory.reclaim");
        let r = write_once(&path, bytes.to_string().as_bytes());
        reclaim_outcome(&dir, &path, r)
    }

    /// Like [`Self::reclaim`], file pages only: `<bytes> swappiness=0`
    /// (cgroup-v2.rst "memory.reclaim": cgroup reclaim with swappiness 0
    /// scans the file LRU only). EINVAL ([`Error::Write`]) on a kernel
    /// without the `swappiness=` argument.
    pub fn reclaim_file(&self, rel: &str, bytes: u64) -> Result<ReclaimOutcome> {
        let dir = self.dir(rel);
        let path = dir.join("memory.reclaim");
        let r = write_once(&path, format!("{bytes} swappiness=0").as_bytes());
        reclaim_outcome(&dir, &path, r)
    }

    /// Writes `memory.low` (`max` or bytes; the kernel rounds down to pages).
    pub fn set_memory_low(&self, rel: &str, value: Limit) -> Result<()> {
        self.write(rel, "memory.low", value.to_string().as_bytes())
    }

    /// Writes `memory.min` (`max` or bytes; the kernel rounds down to pages):
    /// hard protection, never reclaimed (cgroup-v2.rst "memory.min").
    pub fn set_memory_min(&self, rel: &str, value: Limit) -> Result<()> {
        self.write(rel, "memory.min", value.to_string().as_bytes())
    }

    /// Writes `cpuset.mems`. In cgroup v2 the cgroup's existing pages are
    /// then migrated to the new nodes, asynchronously. The empty set (inherit
    /// the parent's nodes) is written as a lone newline, as `echo >` does.
    /// EINVAL if a node is not in the parent's `cpuset.mems.effective`.
    pub fn set_cpuset_mems(&self, rel: &str, nodes: &NodeSet) -> Result<()> {
        let s = nodes.to_string();
        let data = if s.is_empty() { "\n".to_string() } else { s };
        self.write(rel, "cpuset.mems", data.as_bytes())
    }

    /// Enables controllers for the children of `rel`, writing
    /// `+memory +cpuset` to its `cgroup.subtree_control` in one write.
    /// Enabling one already enabled is a no-op for the kernel. EBUSY (or
    /// EOPNOTSUPP) when the no-internal-process rule forbids it; ENOENT in
    /// the kernel's sense when a controller is not in `cgroup.controllers`.
    pub fn enable_controllers(&self, rel: &str, controllers: &[&str]) -> Result<()> {
        let data = controllers
            .iter()
            .map(|c| format!("+{c}"))
            .collect::<Vec<_>>()
            .join(" ");
        self.write(rel, "cgroup.subtree_control", data.as_bytes())
    }

    /// Disables controllers for the children of `rel`, writing `-cpuset ...`
    /// to its `cgroup.subtree_control` in one write. EBUSY while a child
    /// still enables the controller for its own children.
    pub fn disable_controllers(&self, rel: &str, controllers: &[&str]) -> Result<()> {
        let data = controllers
            .iter()
            .map(|c| format!("-{c}"))
            .collect::<Vec<_>>()
            .join(" ");
        self.write(rel, "cgroup.subtree_control", data.as_bytes())
    }
}

fn vanished_errno(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENODEV))
}

#[cfg(test)]
mod tests;
