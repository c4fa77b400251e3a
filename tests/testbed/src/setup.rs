//! Host preparation: QEMU 10, busybox-static and cpio from apt, and Debian's
//! cloud kernels (6.12 from bookworm-backports, 7.3 from trixie-backports)
//! extracted (not installed) into the cache directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use crate::{cache_dir, choice, Error, Result};

/// The meta package whose dependency names the concrete kernel image package.
pub const KERNEL_META_PACKAGE: &str = "linux-image-6.12-cloud-amd64";
/// Oldest QEMU major version accepted: 7.2 crashed guests under multi-threaded TCG.
pub const MIN_QEMU_MAJOR: u32 = 10;

const SOURCES_FILE: &str = "/etc/apt/sources.list.d/tierd-backports.sources";

/// A guest kernel the testbed boots. Both are Debian cloud kernels with
/// DAMON, BTF, HMAT and the CXL drivers; they differ where tierd looks
/// (DAMON sysfs layout, `damon_stat`, quota goals, memcg counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GuestKernel {
    /// Debian's 6.12 cloud kernel from bookworm-backports (the default).
    #[default]
    Linux6_12,
    /// Debian's 7.3 cloud kernel from trixie-backports, fetched with an apt
    /// state of its own under the cache: the host's apt sources never get a
    /// trixie suite (later installs would upgrade the host to trixie).
    Linux7_3,
}

impl GuestKernel {
    /// Every kernel the testbed knows.
    pub const ALL: [GuestKernel; 2] = [GuestKernel::Linux6_12, GuestKernel::Linux7_3];

    /// The short name used on command lines and in tables: "6.12", "7.3".
    pub fn name(self) -> &'static str {
        match self {
            GuestKernel::Linux6_12 => "6.12",
            GuestKernel::Linux7_3 => "7.3",
        }
    }

    /// The kernel `$TIERD_KERNEL` names ("6.12" or "7.3"), else 6.12.
    ///
    /// Errors: the variable holds anything else (the message names it).
    pub fn from_env() -> std::result::Result<GuestKernel, String> {
        choice::from_env("TIERD_KERNEL", &Self::ALL, Self::name, "kernel")
    }

    /// The file under `<cache>/kernel/` naming the extracted release.
    fn marker(self) -> &'static str {
        match self {
            GuestKernel::Linux6_12 => "current",
            GuestKernel::Linux7_3 => "current-7.3",
        }
    }
}

impl FromStr for GuestKernel {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        choice::parse(&Self::ALL, Self::name, "kernel", s)
    }
}

impl std::fmt::Display for GuestKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
    /// Which kernel these assets boot.
    pub kernel: GuestKernel,
    /// The guest kernel's release (`uname -r` in the guest), e.g. "6.12.117+deb12-cloud-amd64".
    pub kernel_release: String,
    /// The kernel image (`boot/vmlinuz-<release>`, or
    /// `usr/lib/modules/<release>/vmlinuz.unsigned` in trixie's packages).
    pub vmlinuz: PathBuf,
    /// `[usr/]lib/modules/<release>` inside the extracted packages (modules
    /// are `.ko.xz`).
    pub modules_dir: PathBuf,
    /// What [`setup`] did, one line each (empty when everything was present).
    pub actions: Vec<String>,
}

impl Assets {
    /// Finds the assets for the default kernel (6.12) without installing or
    /// downloading anything; see [`Assets::find_for`].
    pub fn find() -> Result<Assets> {
        Assets::find_for(GuestKernel::default())
    }

    /// Finds the assets for `kernel` without installing or downloading
    /// anything.
    ///
    /// Errors: [`Error::NotSetUp`] naming what is missing (QEMU, its version,
    /// busybox-static or the kernel).
    pub fn find_for(kernel: GuestKernel) -> Result<Assets> {
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
        let (kernel_release, vmlinuz, modules_dir) =
            current_kernel(&cache, kernel).ok_or_else(|| Error::NotSetUp {
                what: format!(
                    "no {kernel} kernel extracted under {} (`cargo xtask setup --kernel {kernel}`)",
                    cache.join("kernel").display()
                ),
            })?;
        Ok(Assets {
            cache,
            qemu,
            qemu_version,
            busybox,
            kernel,
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

impl Assets {
    /// `names` and every module they depend on, dependencies first, as
    /// busybox `insmod` must load them (it resolves nothing itself). A
    /// module's dependencies are the `depends=` entry of its `.modinfo`; a
    /// name with no `.ko` in the package is built into the kernel and left
    /// out (Debian's 6.12 cloud kernel builds `cxl_core` in, 7.3 ships it as
    /// a module).
    ///
    /// Errors: as [`Assets::module`], but for modules that do not exist.
    pub fn modules_with_deps(&self, names: &[String]) -> Result<Vec<String>> {
        let mut order = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for n in names {
            self.visit_module(&n.replace('-', "_"), &mut seen, &mut order)?;
        }
        Ok(order)
    }

    fn visit_module(
        &self,
        name: &str,
        seen: &mut std::collections::HashSet<String>,
        order: &mut Vec<String>,
    ) -> Result<()> {
        if !seen.insert(name.to_string()) {
            return Ok(());
        }
        let ko = match self.module(name) {
            Ok(p) => p,
            Err(Error::ModuleNotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let bytes = fs::read(&ko).map_err(|e| Error::io(&ko, e))?;
        for dep in module_depends(&bytes) {
            self.visit_module(&dep, seen, order)?;
        }
        order.push(name.to_string());
        Ok(())
    }
}

/// The `depends=` list of a kernel module's `.modinfo` (NUL-separated
/// `key=value` strings), names with `_`.
fn module_depends(ko: &[u8]) -> Vec<String> {
    ko.split(|&b| b == 0)
        .filter_map(|f| f.strip_prefix(b"depends="))
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|d| d.trim().replace('-', "_"))
                .filter(|d| !d.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
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

    if current_kernel(&cache, GuestKernel::Linux6_12).is_none() {
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

/// [`setup`], then the assets of `kernel`, downloading it when it is not in
/// the cache: 7.3 from trixie-backports through an apt state of its own
/// (`<cache>/apt-trixie-backports`: its own sources list, lists and
/// archives; the suite is never added to the host's sources), the newest
/// `linux-binary-unsigned-7.3.*-cloud-amd64` and its `linux-modules-*`,
/// unpacked with `dpkg-deb -x`.
///
/// Errors: as [`setup`]; apt failures, or no 7.3 cloud kernel in the suite.
pub fn setup_kernel(kernel: GuestKernel) -> Result<Assets> {
    let base = setup()?;
    if kernel == GuestKernel::Linux6_12 {
        return Ok(base);
    }
    let mut actions = base.actions;
    if current_kernel(&base.cache, kernel).is_none() {
        let release = fetch_trixie_kernel(&base.cache, "7.3.")?;
        actions.push(format!(
            "downloaded Linux {release} from trixie-backports (apt state in {})",
            base.cache.join("apt-trixie-backports").display()
        ));
        fs::write(
            base.cache.join("kernel").join(kernel.marker()),
            format!("{release}\n"),
        )
        .map_err(|e| Error::io(&base.cache.join("kernel"), e))?;
    }
    let mut assets = Assets::find_for(kernel)?;
    assets.actions = actions;
    Ok(assets)
}

/// The host's Debian mirror and keyring: the `URIs:`/`Signed-By:` of the
/// first stanza of `/etc/apt/sources.list.d/debian.sources`, or the URI of
/// the first `deb` line of `/etc/apt/sources.list` with Debian's archive
/// keyring. No mirror is hard-coded.
fn host_mirror() -> Result<(String, String)> {
    const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list.d/debian.sources") {
        let stanza = text
            .split("\n\n")
            .find(|s| s.lines().any(|l| l.starts_with("URIs:")));
        if let Some(stanza) = stanza {
            let field = |k: &str| {
                stanza
                    .lines()
                    .find_map(|l| l.strip_prefix(k))
                    .and_then(|v| v.split_whitespace().next())
                    .map(str::to_string)
            };
            if let Some(uri) = field("URIs:") {
                return Ok((uri, field("Signed-By:").unwrap_or_else(|| KEYRING.into())));
            }
        }
    }
    let list = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    list.lines()
        .filter(|l| l.trim_start().starts_with("deb "))
        .find_map(|l| l.split_whitespace().find(|w| w.contains("://")))
        .map(|uri| (uri.to_string(), KEYRING.to_string()))
        .ok_or_else(|| Error::NotSetUp {
            what: "no Debian apt source on the host to take the mirror from".into(),
        })
}

/// Downloads the newest trixie-backports cloud kernel whose release starts
/// with `prefix` ("7.3.") and its modules into `<cache>/kernel/<release>`
/// through an apt state of its own; returns the release.
fn fetch_trixie_kernel(cache: &Path, prefix: &str) -> Result<String> {
    let apt = cache.join("apt-trixie-backports");
    for d in ["lists/partial", "archives/partial", "download"] {
        let d = apt.join(d);
        fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
    }
    let (uri, keyring) = host_mirror()?;
    let list = apt.join("sources.list");
    fs::write(
        &list,
        format!("deb [signed-by={keyring}] {uri} trixie-backports main\n"),
    )
    .map_err(|e| Error::io(&list, e))?;
    let opts = |c: &mut Command| {
        for (k, v) in [
            ("Dir::Etc::SourceList", list.clone()),
            ("Dir::Etc::SourceParts", PathBuf::from("/dev/null")),
            ("Dir::State::Lists", apt.join("lists")),
            ("Dir::Cache", apt.clone()),
            ("Dir::Cache::archives", apt.join("archives")),
            ("Dir::State::status", PathBuf::from("/dev/null")),
        ] {
            c.arg("-o").arg(format!("{k}={}", v.display()));
        }
        c.args(["-o", "APT::Sandbox::User=root"]);
    };
    let mut update = Command::new("apt-get");
    opts(&mut update);
    run_output(update.arg("update"))?;
    let mut names = Command::new("apt-cache");
    opts(&mut names);
    let out = run_output(names.args(["pkgnames", "linux-binary-unsigned-"]))?;
    let release =
        newest_release(&String::from_utf8_lossy(&out), prefix).ok_or_else(|| Error::NotSetUp {
            what: format!("trixie-backports has no linux-binary-unsigned-{prefix}*-cloud-amd64"),
        })?;
    let dl = apt.join("download");
    let _ = fs::remove_dir_all(&dl);
    fs::create_dir_all(&dl).map_err(|e| Error::io(&dl, e))?;
    let mut download = Command::new("apt-get");
    opts(&mut download);
    run_output(
        download
            .arg("download")
            .arg(format!("linux-binary-unsigned-{release}"))
            .arg(format!("linux-modules-{release}"))
            .current_dir(&dl),
    )?;
    let kdir = cache.join("kernel");
    let tmp = kdir.join(format!("{release}.tmp"));
    let dest = kdir.join(&release);
    let _ = fs::remove_dir_all(&tmp);
    let _ = fs::remove_dir_all(&dest);
    for deb in fs::read_dir(&dl).map_err(|e| Error::io(&dl, e))?.flatten() {
        if deb.path().extension().is_some_and(|e| e == "deb") {
            run_output(Command::new("dpkg-deb").arg("-x").arg(deb.path()).arg(&tmp))?;
        }
    }
    fs::rename(&tmp, &dest).map_err(|e| Error::io(&dest, e))?;
    let _ = fs::remove_dir_all(&dl);
    Ok(release)
}

/// The newest `<release>` among `linux-binary-unsigned-<release>` package
/// names whose release starts with `prefix` and ends in `-cloud-amd64`,
/// compared by the numbers of its version ("7.3.10" > "7.3.4").
fn newest_release(pkgnames: &str, prefix: &str) -> Option<String> {
    let key = |r: &str| -> Vec<u64> {
        r.split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect()
    };
    pkgnames
        .lines()
        .filter_map(|l| l.trim().strip_prefix("linux-binary-unsigned-"))
        .filter(|r| r.starts_with(prefix) && r.ends_with("-cloud-amd64"))
        .max_by_key(|r| key(r))
        .map(str::to_string)
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

/// The `kernel` named by its marker under `<cache>/kernel/`: (release,
/// vmlinuz, modules directory) inside the extracted packages. Bookworm's
/// image has `boot/vmlinuz-<release>` and `lib/modules/<release>`;
/// trixie's `usr/lib/modules/<release>/vmlinuz.unsigned` beside the modules.
fn current_kernel(cache: &Path, kernel: GuestKernel) -> Option<(String, PathBuf, PathBuf)> {
    let kdir = cache.join("kernel");
    let release = fs::read_to_string(kdir.join(kernel.marker()))
        .ok()?
        .trim()
        .to_string();
    let root = kdir.join(&release);
    let vmlinuz = [
        root.join("boot").join(format!("vmlinuz-{release}")),
        root.join("usr/lib/modules")
            .join(&release)
            .join("vmlinuz.unsigned"),
        root.join("usr/lib/modules").join(&release).join("vmlinuz"),
    ]
    .into_iter()
    .find(|p| p.is_file())?;
    let modules = [
        root.join("lib/modules").join(&release),
        root.join("usr/lib/modules").join(&release),
    ]
    .into_iter()
    .find(|p| p.is_dir())?;
    Some((release, vmlinuz, modules))
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
    fn newest_trixie_cloud_release_is_picked_by_version_numbers() {
        let names = "linux-binary-unsigned-7.2.12+deb13-cloud-amd64\n\
                     linux-binary-unsigned-7.3.4+deb13-cloud-amd64\n\
                     linux-binary-unsigned-7.3.10+deb13-cloud-amd64\n\
                     linux-binary-unsigned-7.3.11+deb13-amd64\n\
                     linux-binary-7.3.12+deb13-cloud-amd64\n";
        assert_eq!(
            newest_release(names, "7.3.").as_deref(),
            Some("7.3.10+deb13-cloud-amd64")
        );
        assert_eq!(newest_release(names, "7.4."), None);
    }

    #[test]
    fn module_dependencies_come_from_modinfo() {
        let ko = b"\x7fELF junk\0license=GPL\0depends=dax_hmem,cxl-core\0name=dax_cxl\0";
        assert_eq!(module_depends(ko), ["dax_hmem", "cxl_core"]);
        assert!(module_depends(b"\0depends=\0name=kmem\0").is_empty());
    }

    #[test]
    fn kernel_names_parse_both_ways() {
        for k in GuestKernel::ALL {
            assert_eq!(k.name().parse::<GuestKernel>(), Ok(k));
        }
        assert!("6.1"
            .parse::<GuestKernel>()
            .unwrap_err()
            .contains("6.12, 7.3"));
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
