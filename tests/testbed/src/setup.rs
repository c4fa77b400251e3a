//! Host preparation: QEMU 10, busybox-static and cpio from apt, and Debian's
//! 6.12 cloud kernel extracted (not installed) into the cache directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{cache_dir, Error, Result};

/// The meta package whose dependency names the concrete kernel image package.
pub const KERNEL_META_PACKAGE: &str = "linux-image-6.12-cloud-amd64";
/// Oldest QEMU major version accepted: 7.2 crashed guests under multi-threaded TCG.
pub const MIN_QEMU_MAJOR: u32 = 10;

const SOURCES_FILE: &str = "/etc/apt/sources.list.d/tierd-backports.sources";

/// Everything a guest needs, found on the host and in the cache.
#[derive(Debug, Clone)]
pub struct Assets {
    /// The cache directory ([`cache_dir`]).
    pub cache: PathBuf,
    /// `qemu-system-x86_64` on PATH.
    pub qemu: PathBuf,
    /// Its version, e.g. "10.0.2".
    pub qemu_version: String,
    /// A statically linked busybox.
    pub busybox: PathBuf,
    /// The guest kernel's release (`uname -r` in the guest), e.g. "6.12.117+deb12-cloud-amd64".
    pub kernel_release: String,
    /// The kernel image (`boot/vmlinuz-<release>` inside the extracted package).
    pub vmlinuz: PathBuf,
    /// `lib/modules/<release>` inside the extracted package (modules are `.ko.xz`).
    pub modules_dir: PathBuf,
    /// What [`setup`] did, one line each (empty when everything was present).
    pub actions: Vec<String>,
}

impl Assets {
    /// Finds the assets without installing or downloading anything.
    ///
    /// Errors: [`Error::NotSetUp`] naming what is missing (QEMU, its version,
    /// busybox-static or the kernel).
    pub fn find() -> Result<Assets> {
        let cache = cache_dir();
        let qemu = which("qemu-system-x86_64").ok_or_else(|| Error::NotSetUp {
            what: "qemu-system-x86_64 is not on PATH".into(),
        })?;
        let qemu_version = qemu_version(&qemu)?;
        if major(&qemu_version) < MIN_QEMU_MAJOR {
            return Err(Error::NotSetUp {
                what: format!("QEMU {qemu_version} is older than {MIN_QEMU_MAJOR}"),
            });
        }
        let busybox = static_busybox().ok_or_else(|| Error::NotSetUp {
            what: "no statically linked busybox (package busybox-static)".into(),
        })?;
        let (kernel_release, root) = current_kernel(&cache).ok_or_else(|| Error::NotSetUp {
            what: format!(
                "no kernel extracted under {}",
                cache.join("kernel").display()
            ),
        })?;
        let vmlinuz = root.join("boot").join(format!("vmlinuz-{kernel_release}"));
        if !vmlinuz.is_file() {
            return Err(Error::NotSetUp {
                what: format!("{} is missing", vmlinuz.display()),
            });
        }
        let modules_dir = root.join("lib/modules").join(&kernel_release);
        Ok(Assets {
            cache,
            qemu,
            qemu_version,
            busybox,
            kernel_release,
            vmlinuz,
            modules_dir,
            actions: Vec::new(),
        })
    }

    /// A decompressed copy of kernel module `name` (`cxl_acpi`, `kmem`, ...;
    /// `-` and `_` are interchangeable), made on first use with `xz -dc` and
    /// kept in the cache. busybox `insmod` cannot load `.ko.xz`.
    ///
    /// Errors: [`Error::ModuleNotFound`], or I/O and `xz` failures.
    pub fn module(&self, name: &str) -> Result<PathBuf> {
        let want = name.replace('-', "_");
        let out_dir = self.modules_dir.join("decompressed");
        let out = out_dir.join(format!("{want}.ko"));
        if out.is_file() {
            return Ok(out);
        }
        let src = find_module(&self.modules_dir.join("kernel"), &want)?.ok_or_else(|| {
            Error::ModuleNotFound {
                name: name.into(),
                dir: self.modules_dir.clone(),
            }
        })?;
        fs::create_dir_all(&out_dir).map_err(|e| Error::io(&out_dir, e))?;
        let data = if src.extension().is_some_and(|e| e == "xz") {
            run_output(Command::new("xz").arg("-dc").arg(&src))?
        } else {
            fs::read(&src).map_err(|e| Error::io(&src, e))?
        };
        let tmp = out.with_extension(format!("ko.tmp{}", std::process::id()));
        fs::write(&tmp, data).map_err(|e| Error::io(&tmp, e))?;
        fs::rename(&tmp, &out).map_err(|e| Error::io(&out, e))?;
        Ok(out)
    }
}

fn find_module(dir: &Path, want: &str) -> Result<Option<PathBuf>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return Err(Error::io(dir, e)),
    };
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(dir, e))?;
        let p = ent.path();
        if p.is_dir() {
            if let Some(found) = find_module(&p, want)? {
                return Ok(Some(found));
            }
            continue;
        }
        let fname = ent.file_name().to_string_lossy().replace('-', "_");
        if fname == format!("{want}.ko.xz") || fname == format!("{want}.ko") {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// Installs what is missing and returns the assets. Idempotent; when QEMU ≥ 10,
/// busybox-static, cpio and xz are present and a kernel is in the cache it runs
/// no apt command at all.
///
/// Installing: adds `<codename>-backports` to apt's sources on bookworm (a copy
/// of the first stanza of `/etc/apt/sources.list.d/debian.sources` — or the
/// first `deb` line of `/etc/apt/sources.list` — with another suite; no mirror
/// is hard-coded), `apt-get update`, `apt-get install -t <codename>-backports
/// qemu-system-x86 busybox-static cpio xz-utils numactl`, and
/// what the eBPF probe's build needs (`clang make gcc pkg-config libelf-dev
/// zlib1g-dev`). The kernel: the package that
/// [`KERNEL_META_PACKAGE`] depends on is fetched with `apt-get download` and
/// unpacked with `dpkg-deb -x` into `<cache>/kernel/<release>`, never installed.
///
/// Errors: apt or dpkg failures ([`Error::Command`]), not being root when
/// something must be installed, or a QEMU that is still too old.
pub fn setup() -> Result<Assets> {
    let cache = cache_dir();
    let mut actions = Vec::new();
    let mut updated = false;

    let mut missing = Vec::new();
    let qemu_ok = which("qemu-system-x86_64")
        .and_then(|q| qemu_version(&q).ok())
        .is_some_and(|v| major(&v) >= MIN_QEMU_MAJOR);
    if !qemu_ok {
        missing.push("qemu-system-x86");
    }
    if static_busybox().is_none() {
        missing.push("busybox-static");
    }
    if which("cpio").is_none() {
        missing.push("cpio");
    }
    if which("xz").is_none() {
        missing.push("xz-utils");
    }
    // numactl: `migratepages`, the baseline of the move_pages throughput test.
    if which("migratepages").is_none() {
        missing.push("numactl");
    }
    // The eBPF probe's build (crates/hotness/build.rs): clang for the BPF
    // object; libbpf-sys compiles its vendored libbpf with make and a C
    // compiler and links libelf and zlib dynamically (found by pkg-config).
    for (bin, pkg) in [
        ("clang", "clang"),
        ("make", "make"),
        ("cc", "gcc"),
        ("pkg-config", "pkg-config"),
        // The redis scenario's server (redis-tools has the binary and no
        // service; redis-server would start one on the host).
        ("redis-check-rdb", "redis-tools"),
    ] {
        if which(bin).is_none() {
            missing.push(pkg);
        }
    }
    for (header, pkg) in [
        ("/usr/include/libelf.h", "libelf-dev"),
        ("/usr/include/zlib.h", "zlib1g-dev"),
        // The font of the evaluation plots (`cargo xtask bench`).
        (
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "fonts-dejavu-core",
        ),
    ] {
        if !Path::new(header).is_file() {
            missing.push(pkg);
        }
    }
    if !missing.is_empty() {
        require_root(&missing.join(" "))?;
        let codename = os_codename();
        let mut install = Command::new("apt-get");
        install.args(["install", "-y", "--no-install-recommends"]);
        if codename.as_deref() == Some("bookworm") {
            let suite = "bookworm-backports";
            if ensure_suite(suite)? {
                actions.push(format!("added apt suite {suite} in {SOURCES_FILE}"));
            }
            install.args(["-t", suite]);
        }
        apt_update()?;
        updated = true;
        install
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive");
        run_output(&mut install)?;
        actions.push(format!("apt-get installed {}", missing.join(" ")));
    }

    if current_kernel(&cache).is_none() {
        let pkg = match kernel_package() {
            Ok(p) => p,
            Err(_) if !updated => {
                require_root("the apt package lists")?;
                apt_update()?;
                kernel_package()?
            }
            Err(e) => return Err(e),
        };
        let release = extract_kernel(&cache, &pkg)?;
        actions.push(format!(
            "downloaded {pkg} and extracted it into {}",
            cache.join("kernel").join(&release).display()
        ));
    }

    let mut assets = Assets::find()?;
    assets.actions = actions;
    Ok(assets)
}

fn require_root(what: &str) -> Result<()> {
    let uid = run_output(Command::new("id").arg("-u")).unwrap_or_default();
    if String::from_utf8_lossy(&uid).trim() != "0" {
        return Err(Error::NotSetUp {
            what: format!("installing {what} needs root (run `cargo xtask setup` as root)"),
        });
    }
    Ok(())
}

fn os_codename() -> Option<String> {
    let text = fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
}

/// Makes sure apt knows `suite`; returns whether a sources file was written.
fn ensure_suite(suite: &str) -> Result<bool> {
    let mut texts = Vec::new();
    if let Ok(t) = fs::read_to_string("/etc/apt/sources.list") {
        texts.push(t);
    }
    if let Ok(rd) = fs::read_dir("/etc/apt/sources.list.d") {
        for ent in rd.flatten() {
            let p = ent.path();
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            if ext == "sources" || ext == "list" {
                texts.push(fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    let known = texts.iter().any(|t| {
        t.lines().any(|l| {
            let l = l.trim();
            !l.starts_with('#') && l.split_whitespace().any(|w| w == suite)
        })
    });
    if known {
        return Ok(false);
    }
    let deb822 = Path::new("/etc/apt/sources.list.d/debian.sources");
    if let Ok(text) = fs::read_to_string(deb822) {
        let stanza = suite_stanza(&text, suite).ok_or_else(|| Error::NotSetUp {
            what: format!("{} has no stanza with Suites:", deb822.display()),
        })?;
        fs::write(SOURCES_FILE, stanza).map_err(|e| Error::io(Path::new(SOURCES_FILE), e))?;
        return Ok(true);
    }
    let list = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    let line = list
        .lines()
        .find(|l| l.trim_start().starts_with("deb "))
        .ok_or_else(|| Error::NotSetUp {
            what: "no Debian apt source to copy for backports".into(),
        })?;
    // deb [opts] URI SUITE COMPONENTS...
    let mut words: Vec<&str> = line.split_whitespace().collect();
    let uri_at = words
        .iter()
        .position(|w| w.contains("://"))
        .ok_or_else(|| Error::NotSetUp {
            what: format!("cannot parse apt source line {line:?}"),
        })?;
    if words.len() <= uri_at + 1 {
        return Err(Error::NotSetUp {
            what: format!("cannot parse apt source line {line:?}"),
        });
    }
    words[uri_at + 1] = suite;
    let path = "/etc/apt/sources.list.d/tierd-backports.list";
    fs::write(path, format!("{}\n", words.join(" "))).map_err(|e| Error::io(Path::new(path), e))?;
    Ok(true)
}

/// The first deb822 stanza of `sources` with its `Suites:` line replaced by `suite`.
fn suite_stanza(sources: &str, suite: &str) -> Option<String> {
    let stanza = sources
        .split("\n\n")
        .find(|s| s.lines().any(|l| l.starts_with("Suites:")))?;
    let mut out: Vec<String> = stanza
        .lines()
        .map(|l| {
            if l.starts_with("Suites:") {
                format!("Suites: {suite}")
            } else {
                l.to_string()
            }
        })
        .collect();
    out.push(String::new());
    Some(out.join("\n"))
}

fn apt_update() -> Result<()> {
    run_output(
        Command::new("apt-get")
            .arg("update")
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .map(|_| ())
}

/// The concrete image package the meta package depends on, from apt's lists.
fn kernel_package() -> Result<String> {
    let out = run_output(Command::new("apt-cache").args(["depends", KERNEL_META_PACKAGE]))?;
    String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|p| p.trim().trim_matches(|c| c == '<' || c == '>').to_string())
        .find(|p| p.starts_with("linux-image-"))
        .ok_or_else(|| Error::NotSetUp {
            what: format!("apt-cache depends {KERNEL_META_PACKAGE} names no linux-image package"),
        })
}

/// Downloads `pkg` and unpacks it into `<cache>/kernel/<release>`; returns the release.
fn extract_kernel(cache: &Path, pkg: &str) -> Result<String> {
    let release = pkg.trim_start_matches("linux-image-").to_string();
    let kdir = cache.join("kernel");
    let dl = kdir.join("download");
    let _ = fs::remove_dir_all(&dl);
    fs::create_dir_all(&dl).map_err(|e| Error::io(&dl, e))?;
    run_output(
        Command::new("apt-get")
            .args(["download", "-o", "APT::Sandbox::User=root", pkg])
            .current_dir(&dl),
    )?;
    let deb = fs::read_dir(&dl)
        .map_err(|e| Error::io(&dl, e))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .ok_or_else(|| Error::NotSetUp {
            what: format!("apt-get download {pkg} left no .deb in {}", dl.display()),
        })?;
    let tmp = kdir.join(format!("{release}.tmp"));
    let dest = kdir.join(&release);
    let _ = fs::remove_dir_all(&tmp);
    let _ = fs::remove_dir_all(&dest);
    run_output(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp))?;
    fs::rename(&tmp, &dest).map_err(|e| Error::io(&dest, e))?;
    let _ = fs::remove_dir_all(&dl);
    let current = kdir.join("current");
    fs::write(&current, format!("{release}\n")).map_err(|e| Error::io(&current, e))?;
    Ok(release)
}

/// The kernel named by `<cache>/kernel/current`: (release, extracted root).
fn current_kernel(cache: &Path) -> Option<(String, PathBuf)> {
    let kdir = cache.join("kernel");
    let release = fs::read_to_string(kdir.join("current"))
        .ok()?
        .trim()
        .to_string();
    let root = kdir.join(&release);
    root.join("boot")
        .join(format!("vmlinuz-{release}"))
        .is_file()
        .then_some((release, root))
}

fn qemu_version(qemu: &Path) -> Result<String> {
    let out = run_output(Command::new(qemu).arg("--version"))?;
    let text = String::from_utf8_lossy(&out);
    text.lines()
        .next()
        .and_then(|l| l.split("version ").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .map(str::to_string)
        .ok_or_else(|| Error::NotSetUp {
            what: format!("cannot parse `{} --version`: {text:?}", qemu.display()),
        })
}

fn major(version: &str) -> u32 {
    version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// A busybox without an ELF interpreter (PT_INTERP), so it runs in the bare guest.
fn static_busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| fs::read(p).is_ok_and(|b| is_static_elf(&b)))
}

/// True for a 64-bit little-endian ELF with no PT_INTERP program header.
pub(crate) fn is_static_elf(b: &[u8]) -> bool {
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().unwrap_or([0; 8])) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|i| {
        let o = phoff + i * phentsize;
        b.get(o..o + 4)
            .is_some_and(|t| u32::from_le_bytes(t.try_into().unwrap_or([0; 4])) != 3)
    })
}

pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs `cmd`, returning stdout; a non-zero exit is [`Error::Command`] with stderr.
pub(crate) fn run_output(cmd: &mut Command) -> Result<Vec<u8>> {
    let desc = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| Error::Command {
        cmd: desc.clone(),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: desc,
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backports_stanza_copies_the_first_entry() {
        let debian = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\
                      Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                      Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n";
        let s = suite_stanza(debian, "bookworm-backports").unwrap();
        assert_eq!(
            s,
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\n\
             Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        );
    }

    #[test]
    fn static_elf_detection() {
        assert!(!is_static_elf(b"not an elf"));
        if let Ok(b) = fs::read("/bin/busybox") {
            // busybox-static on the machines this runs on.
            assert!(is_static_elf(&b));
        }
        assert!(!is_static_elf(&fs::read("/bin/sh").unwrap()));
        assert_eq!(major("10.0.2"), 10);
        assert_eq!(major("7.2.15"), 7);
    }
}
