//! Wakes the control loop when a cgroup appears where a policy can match
//! one, so that a newcomer is seen while it allocates rather than up to an
//! interval later (`policy::Plan::filling`: the containers already there
//! lose their protection while it fills its share, and its allocations
//! stay on the fast tier).
//!
//! inotify `IN_CREATE` on the cgroup directories the controller names
//! ([`crate::controller::Controller::arrival_dirs`]): creating a cgroup is a
//! `mkdir(2)` on cgroupfs, and the VFS reports it like any other
//! (`fsnotify_mkdir`, fs/namei.c `vfs_mkdir`). A directory removed drops
//! its watch by itself (`IN_IGNORED`).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

struct Fd(Inotify);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The watched cgroup directories and their inotify instance.
pub struct ArrivalWatch {
    fd: AsyncFd<Fd>,
    watched: HashMap<PathBuf, WatchDescriptor>,
    /// A watch could not be added (`fs.inotify.max_user_watches`): said once.
    warned: bool,
}

impl ArrivalWatch {
    /// A new inotify instance, watching nothing yet. Must be called within
    /// a tokio runtime.
    ///
    /// # Errors
    /// inotify_init1(2) failed (`fs.inotify.max_user_instances` reached,
    /// or a kernel without inotify), or the runtime has no I/O driver.
    pub fn new() -> io::Result<Self> {
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        // SAFETY: `Fd` owns the inotify descriptor for as long as the
        // AsyncFd holds it, and `as_raw_fd` always returns that one.
        let fd = unsafe { AsyncFd::register_with_interest(Fd(ino), Interest::READABLE) }?;
        Ok(ArrivalWatch {
            fd,
            watched: HashMap::new(),
            warned: false,
        })
    }

    /// Watches exactly `dirs` (absolute paths) for new subdirectories:
    /// adds the new ones, drops the others. A directory that is gone is
    /// skipped; one that cannot be watched is logged once and then seen
    /// at the next interval like any cgroup.
    pub fn sync(&mut self, dirs: &[PathBuf]) {
        let ino = &self.fd.get_ref().0;
        let keep: std::collections::HashSet<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        self.watched.retain(|dir, wd| {
            let k = keep.contains(dir.as_path());
            if !k {
                // EINVAL when the directory, and so its watch, is gone.
                let _ = ino.rm_watch(*wd);
            }
            k
        });
        for dir in dirs {
            if self.watched.contains_key(dir) {
                continue;
            }
            match ino.add_watch(
                dir.as_path(),
                AddWatchFlags::IN_CREATE | AddWatchFlags::IN_ONLYDIR,
            ) {
                Ok(wd) => {
                    self.watched.insert(dir.clone(), wd);
                }
                Err(nix::errno::Errno::ENOENT) => {}
                Err(e) if !self.warned => {
                    self.warned = true;
                    tracing::warn!(path = %dir.display(), error = %e,
                        "cannot watch the cgroup directory for arrivals (raise \
                         fs.inotify.max_user_watches); a container created there is seen \
                         at the next interval");
                }
                Err(_) => {}
            }
        }
    }

    /// How many directories are watched.
    pub fn len(&self) -> usize {
        self.watched.len()
    }

    /// Whether no directory is watched.
    pub fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }

    /// Waits until a directory is created in a watched one (or the event
    /// queue overflowed, which may have hidden one), reading every event
    /// that is queued.
    ///
    /// # Errors
    /// Reading the inotify descriptor failed other than with EAGAIN.
    pub async fn created(&mut self) -> io::Result<()> {
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.try_io(|fd| fd.get_ref().0.read_events().map_err(io::Error::from)) {
                Ok(Ok(events)) => {
                    // A removed directory's watch is gone (`IN_IGNORED`):
                    // forget it, so that a directory made again at the same
                    // path is watched again at the next `sync`.
                    for e in events
                        .iter()
                        .filter(|e| e.mask.contains(AddWatchFlags::IN_IGNORED))
                    {
                        self.watched.retain(|_, wd| *wd != e.wd);
                    }
                    if events.iter().any(|e| {
                        e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                            || e.mask
                                .contains(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_ISDIR)
                    }) {
                        return Ok(());
                    }
                }
                Ok(Err(e)) => return Err(e),
                // Drained: wait for the next readiness.
                Err(_would_block) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory made in a watched one wakes the watch; one made
    /// elsewhere, or a file, does not; a directory dropped from the set is
    /// no longer watched. (On tmpfs: cgroupfs reports mkdir the same way,
    /// through the VFS; the VM test `an_arrival_is_seen_at_once_and_unprotects_the_incumbent_while_it_fills`
    /// shows it there.)
    #[tokio::test]
    async fn a_new_directory_in_a_watched_one_wakes_the_loop() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let mut w = ArrivalWatch::new().unwrap();
        w.sync(&[a.clone(), root.path().join("gone")]);
        assert_eq!(w.len(), 1, "a directory that does not exist is skipped");
        // Events are queued by the mkdir itself: one that would come is
        // already there.
        async fn quiet(w: &mut ArrivalWatch) -> bool {
            tokio::time::timeout(std::time::Duration::from_millis(200), w.created())
                .await
                .is_err()
        }
        std::fs::create_dir(b.join("x")).unwrap();
        std::fs::write(a.join("file"), b"").unwrap();
        assert!(quiet(&mut w).await, "unwatched directory, or a file");
        std::fs::create_dir(a.join("newcomer")).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), w.created())
            .await
            .expect("no wake for a directory made in a watched one")
            .unwrap();
        w.sync(std::slice::from_ref(&b));
        assert_eq!(w.len(), 1);
        std::fs::create_dir(a.join("later")).unwrap();
        assert!(quiet(&mut w).await, "a is no longer watched");
        std::fs::create_dir(b.join("y")).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), w.created())
            .await
            .expect("no wake for a directory made in b")
            .unwrap();
    }

    /// A watched directory removed and made again at the same path (a
    /// cgroup parent recreated) is watched again after the next `sync`.
    #[tokio::test]
    async fn a_directory_made_again_is_watched_again() {
        let root = tempfile::tempdir().unwrap();
        let c = root.path().join("c");
        std::fs::create_dir(&c).unwrap();
        let mut w = ArrivalWatch::new().unwrap();
        w.sync(std::slice::from_ref(&c));
        assert_eq!(w.len(), 1);
        std::fs::remove_dir(&c).unwrap();
        // Reading the events takes in the IN_IGNORED of the removal.
        let waited = tokio::time::timeout(std::time::Duration::from_millis(300), w.created()).await;
        assert!(waited.is_err(), "a removal is not an arrival");
        assert_eq!(w.len(), 0, "the removed directory's watch is forgotten");
        std::fs::create_dir(&c).unwrap();
        w.sync(std::slice::from_ref(&c));
        assert_eq!(w.len(), 1);
        std::fs::create_dir(c.join("newcomer")).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), w.created())
            .await
            .expect("no wake for a directory made in the re-made one")
            .unwrap();
    }
}
