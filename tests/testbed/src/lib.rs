//! The emulated CXL host used by the VM tests and `cargo xtask vm`.
//!
//! QEMU (software emulation, `-accel tcg`) boots Debian's 6.12 cloud kernel
//! with node 0 = the vCPUs + DRAM and node 1 = CPU-less memory whose HMAT
//! latency/bandwidth (250 ns / 76 GB/s against 130 ns / 614 GB/s) makes the
//! kernel put it in a lower memory tier. The root file system is a busybox
//! initramfs with the given binaries; a script runs as root and its exit code
//! and output come back in a [`VmOutput`].
//!
//! ```no_run
//! let out = testbed::run(&testbed::VmConfig::default(), "cat /sys/devices/system/node/has_cpu")?;
//! assert_eq!(out.output.trim(), "0");
//! # Ok::<(), testbed::Error>(())
//! ```
//!
//! [`setup`] installs QEMU 10 and friends through apt and downloads the kernel;
//! [`run`] never installs anything and fails with [`Error::NotSetUp`] instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod choice;
mod cpio;
mod initramfs;
mod setup;
pub mod soak;
mod vm;

pub use setup::{setup, setup_kernel, Assets, GuestKernel, KERNEL_META_PACKAGE, MIN_QEMU_MAJOR};
pub use vm::{run, LowerTier, VmConfig, VmOutput, CXL_MODULES};

/// Everything that can go wrong preparing or running a guest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// QEMU, busybox or the kernel is missing or too old.
    #[error("{what}: run `cargo xtask setup`")]
    NotSetUp { what: String },
    /// A host file could not be read or written.
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    /// A host command failed (apt-get, dpkg-deb, ldd, xz, QEMU's spawn).
    #[error("{cmd} failed: {detail}")]
    Command { cmd: String, detail: String },
    /// A binary or file given to the guest is unusable.
    #[error("{path}: {reason}")]
    Input { path: PathBuf, reason: String },
    /// A project binary has not been built.
    #[error("{0}: not built (run `cargo build --release -p tierd -p tierload`)")]
    MissingBinary(PathBuf),
    /// No such kernel module in the extracted kernel package.
    #[error("kernel module {name} not found under {dir}")]
    ModuleNotFound { name: String, dir: PathBuf },
    /// QEMU exited before the guest's init ran.
    #[error("guest did not boot (no init marker on the console)\nconsole tail:\n{console_tail}\nQEMU stderr:\n{qemu_stderr}")]
    Boot {
        console_tail: String,
        qemu_stderr: String,
        /// The signal that killed QEMU, when the emulator itself crashed
        /// (seen: an assertion in QEMU's `iotlb_to_section`, SIGABRT).
        qemu_signal: Option<i32>,
    },
    /// The guest's kernel did not reach init within
    /// [`VmConfig::boot_timeout`](crate::VmConfig::boot_timeout) in any of
    /// `attempts` boots; QEMU was killed each time.
    #[error("guest did not reach init in {after:?} in {attempts} boot(s); QEMU was killed\nconsole tail of the last boot:\n{console_tail}")]
    BootHung {
        after: Duration,
        attempts: u32,
        console_tail: String,
    },
    /// A kernel panic, BUG or Oops appeared on the console. `before_init`:
    /// it came before the init's first line, in each of `attempts` boots
    /// (a failure after init ends the run at once, `attempts` = the boot it
    /// happened in).
    #[error(
        "kernel failure in the guest (boot {attempts}, before init: {before_init}):\n{excerpt}"
    )]
    Kernel {
        excerpt: String,
        before_init: bool,
        attempts: u32,
    },
    /// The guest did not finish in time; QEMU was killed.
    #[error("guest timed out after {after:?} (booted: {booted})\nconsole tail:\n{console_tail}\noutput tail:\n{output_tail}")]
    Timeout {
        after: Duration,
        booted: bool,
        console_tail: String,
        output_tail: String,
    },
    /// Fewer memory tiers than [`VmConfig::expect_tiers`]; the script did not run.
    #[error("guest has {found} memory tiers, expected at least {expected} ({listing})")]
    MissingTiers {
        found: usize,
        expected: usize,
        /// `memory_tierN=nodelist` pairs.
        listing: String,
    },
    /// The guest stopped without reporting the script's exit code.
    #[error("guest stopped without an exit marker\nconsole tail:\n{console_tail}\noutput tail:\n{output_tail}\n{qemu}")]
    NoExit {
        console_tail: String,
        output_tail: String,
        /// How QEMU ended: exit status, stderr tail, last CPU reset logged.
        qemu: String,
        /// The signal that killed QEMU, when the emulator itself crashed
        /// (seen: SIGSEGV under TCG with the CXL Type-3 device).
        qemu_signal: Option<i32>,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> Error {
        Error::Io(path.to_path_buf(), e)
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The workspace root: the nearest directory at or above the current one
/// whose `Cargo.toml` has a `[workspace]` table (cargo runs `cargo xtask`
/// in the invoking directory and tests in their crate's), else two levels
/// above this crate as it was built. The compile-time path alone is not
/// enough: two checkouts sharing a `CARGO_TARGET_DIR` share build products,
/// and a binary built in the other checkout points at it (seen: an xtask
/// built by CI in /check/work/main failing in /work/main).
pub fn workspace_root() -> PathBuf {
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            let manifest = dir.join("Cargo.toml");
            if std::fs::read_to_string(&manifest)
                .is_ok_and(|t| t.lines().any(|l| l.trim() == "[workspace]"))
            {
                return dir.to_path_buf();
            }
        }
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .and_then(Path::parent)
        .unwrap_or(here)
        .to_path_buf()
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` (relative to the current
/// directory, as cargo reads it) or `<workspace root>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                std::env::current_dir().unwrap_or_default().join(d)
            }
        }
        None => workspace_root().join("target"),
    }
}

/// Where downloads, the extracted kernel and initramfs images live:
/// `$TIERD_CACHE_DIR`, else `<target dir>/tierd-vm`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("TIERD_CACHE_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => target_dir().join("tierd-vm"),
    }
}

/// `<target dir>/release/<name>` for each name; [`Error::MissingBinary`] for
/// the first one that is not built.
pub fn guest_binaries(names: &[&str]) -> Result<Vec<PathBuf>> {
    let dir = target_dir().join("release");
    names
        .iter()
        .map(|n| {
            let p = dir.join(n);
            if p.is_file() {
                Ok(p)
            } else {
                Err(Error::MissingBinary(p))
            }
        })
        .collect()
}

/// Copies the directory tree `from` into `to` (created if missing): regular
/// files and directories only. Host-side tests use it to get a writable copy of
/// a fixture tree such as `tests/fixtures/linux-6.12`.
///
/// Panics on I/O errors: it is for tests and benchmarks.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap_or_else(|err| panic!("{}: {err}", dst.display()));
        }
    }
}
