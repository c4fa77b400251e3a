//! The guest's root file system: a cached base archive (busybox, the binaries
//! and their libraries, extra files, kernel modules) plus a small per-run
//! archive (`/init` and the script) concatenated after it.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::BufWriter;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::cpio::{Node, Tree};
use crate::setup::{is_static_elf, Assets};
use crate::{Error, Result, VmConfig};

/// Bump when the base layout changes, to invalidate cached archives.
const LAYOUT_VERSION: u32 = 1;
/// Cached base archives unused for this long are deleted.
const STALE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Returns the path of the base archive for `cfg`, building it if needed.
///
/// The cache key hashes the path, size and mtime of every input (busybox,
/// binaries, their libraries as `ldd` resolves them, files, modules) — not
/// their contents, which would cost seconds per run on big binaries.
pub(crate) fn base(assets: &Assets, cfg: &VmConfig) -> Result<PathBuf> {
    let mut inputs: Vec<(PathBuf, String, u32)> = Vec::new(); // host, guest, perm
    let mut libs = Vec::new();
    for bin in &cfg.binaries {
        let name = bin.file_name().ok_or_else(|| Error::Input {
            path: bin.clone(),
            reason: "not a file name".into(),
        })?;
        inputs.push((
            bin.clone(),
            format!("/usr/local/bin/{}", name.to_string_lossy()),
            0o755,
        ));
        for lib in shared_libs(bin)? {
            if !libs.contains(&lib) {
                libs.push(lib);
            }
        }
    }
    for lib in libs {
        let guest = lib.to_string_lossy().into_owned();
        inputs.push((lib, guest, 0o755));
    }
    for (host, guest) in &cfg.files {
        let meta = fs::metadata(host).map_err(|e| Error::io(host, e))?;
        inputs.push((
            host.clone(),
            guest.clone(),
            meta.permissions().mode() & 0o7777,
        ));
    }
    for m in &cfg.modules {
        let ko = assets.module(m)?;
        let guest = format!(
            "/lib/modules/{}/{}.ko",
            assets.kernel_release,
            m.replace('-', "_")
        );
        inputs.push((ko, guest, 0o644));
    }

    let mut h = DefaultHasher::new();
    LAYOUT_VERSION.hash(&mut h);
    for (host, guest, perm) in
        std::iter::once(&(assets.busybox.clone(), String::new(), 0)).chain(inputs.iter())
    {
        let meta = fs::metadata(host).map_err(|e| Error::io(host, e))?;
        (
            host,
            guest,
            perm,
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec(),
        )
            .hash(&mut h);
    }
    let dir = assets.cache.join("initramfs");
    fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let out = dir.join(format!("base-{:016x}.cpio", h.finish()));
    if out.is_file() {
        // Mark as used, so the stale sweep keeps it.
        let _ = fs::File::options()
            .append(true)
            .open(&out)
            .and_then(|f| f.set_modified(SystemTime::now()));
        return Ok(out);
    }
    sweep_stale(&dir);

    let mut tree = Tree::default();
    for d in [
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/run",
        "/root",
        "/mnt",
        "/var",
        "/etc",
        "/usr/local/bin",
    ] {
        tree.insert(d, Node::Dir);
    }
    tree.insert("/dev/console", Node::CharDev(5, 1));
    tree.insert("/dev/null", Node::CharDev(1, 3));
    tree.insert(
        "/bin/busybox",
        Node::HostFile(assets.busybox.clone(), 0o755),
    );
    let list = crate::setup::run_output(Command::new(&assets.busybox).arg("--list-full"))?;
    for applet in String::from_utf8_lossy(&list).lines() {
        let applet = applet.trim();
        if applet.is_empty() || applet == "bin/busybox" || applet == "linuxrc" {
            continue;
        }
        tree.insert(applet, Node::Symlink("/bin/busybox".into()));
    }
    tree.insert(
        "/etc/passwd",
        Node::Bytes(b"root:x:0:0:root:/root:/bin/sh\n".to_vec(), 0o644),
    );
    tree.insert("/etc/group", Node::Bytes(b"root:x:0:\n".to_vec(), 0o644));
    tree.insert(
        "/etc/hosts",
        Node::Bytes(b"127.0.0.1 localhost testbed\n".to_vec(), 0o644),
    );
    for (host, guest, perm) in inputs {
        // Follow symlinks: the guest gets the file's contents at the path ldd named.
        tree.insert(&guest, Node::HostFile(host, perm));
    }

    let tmp = dir.join(format!("base.tmp{}", std::process::id()));
    let f = fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    tree.write_to(BufWriter::new(f))
        .map_err(|e| Error::io(&tmp, e))?;
    fs::rename(&tmp, &out).map_err(|e| Error::io(&out, e))?;
    Ok(out)
}

fn sweep_stale(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for ent in rd.flatten() {
        let old = ent
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_AFTER);
        if old {
            let _ = fs::remove_file(ent.path());
        }
    }
}

/// The shared libraries and dynamic loader `bin` needs, as `ldd` resolves them
/// on the host; empty for a static binary.
pub(crate) fn shared_libs(bin: &Path) -> Result<Vec<PathBuf>> {
    let head = fs::read(bin).map_err(|e| Error::io(bin, e))?;
    if is_static_elf(&head) {
        return Ok(Vec::new());
    }
    let out = crate::setup::run_output(Command::new("ldd").arg(bin))?;
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&out).lines() {
        let line = line.trim();
        if line.contains("not found") {
            return Err(Error::Input {
                path: bin.to_path_buf(),
                reason: format!("ldd: {line}"),
            });
        }
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.trim().split(" (").next().unwrap_or("").trim(),
            None => line.split(" (").next().unwrap_or("").trim(),
        };
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// The per-run archive: `/init` and `/testbed/script`.
pub(crate) fn run_archive(init: &str, script: &str) -> Result<Vec<u8>> {
    let mut tree = Tree::default();
    tree.insert("/init", Node::Bytes(init.as_bytes().to_vec(), 0o755));
    tree.insert(
        "/testbed/script",
        Node::Bytes(script.as_bytes().to_vec(), 0o755),
    );
    let mut buf = Vec::new();
    tree.write_to(&mut buf)
        .map_err(|e| Error::io(Path::new("<run archive>"), e))?;
    Ok(buf)
}
