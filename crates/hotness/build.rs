//! Builds bpf/hintfault.bpf.c into a libbpf-rs skeleton (`$OUT_DIR/hintfault.skel.rs`).
//!
//! Needs clang (any version with the BPF target; Debian 12's clang 14 works)
//! and the libbpf headers that libbpf-sys ships. The kernel types come from
//! the hand-written, CO-RE-relocated bpf/vmlinux.h, so no kernel headers or
//! bpftool are needed at build time.

use std::env;
use std::path::PathBuf;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bpf = manifest.join("../../bpf");
    let src = bpf.join("hintfault.bpf.c");
    for f in ["hintfault.bpf.c", "hintfault.h", "vmlinux.h"] {
        println!("cargo:rerun-if-changed={}", bpf.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    if Command::new(&clang).arg("--version").output().is_err() {
        panic!(
            "\n\nhotness: `{}` not found: building the eBPF hint-fault probe (bpf/hintfault.bpf.c) needs clang.\n\
             Install it with `apt-get install -y clang` (or run `cargo xtask setup`, which does), \
             or point CLANG at a clang binary.\n\n",
            clang.to_string_lossy()
        );
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("hintfault.skel.rs");
    SkeletonBuilder::new()
        .source(&src)
        .clang(&clang)
        .clang_args([
            "-I".to_string(),
            bpf.display().to_string(),
            "-D__TARGET_ARCH_x86".to_string(),
        ])
        .build_and_generate(&out)
        .unwrap_or_else(|e| panic!("hotness: building {}: {e:#}", src.display()));
}
