//! A minimal writer for the `newc` cpio format the kernel unpacks as an
//! initramfs (Documentation/driver-api/early-userspace/buffer-format.rst).
//!
//! Writing the archive ourselves lets us create device nodes without root and
//! keeps the output deterministic (all mtimes 0, inodes numbered in order).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// One entry of the guest tree.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Dir,
    /// Contents of a host file, with permission bits.
    HostFile(PathBuf, u32),
    /// In-memory contents, with permission bits.
    Bytes(Vec<u8>, u32),
    Symlink(String),
    CharDev(u32, u32),
}

/// A guest file tree keyed by absolute guest path ("/usr/local/bin/tierd").
/// Parent directories are added when the tree is written.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    nodes: BTreeMap<String, Node>,
}

impl Tree {
    pub(crate) fn insert(&mut self, guest_path: &str, node: Node) {
        let p = format!("/{}", guest_path.trim_matches('/'));
        self.nodes.insert(p, node);
    }

    /// Writes the tree as one complete newc archive (with its trailer).
    pub(crate) fn write_to(&self, w: impl Write) -> io::Result<()> {
        let mut all = self.nodes.clone();
        for path in self.nodes.keys() {
            let mut p = path.as_str();
            while let Some(i) = p.rfind('/') {
                p = &p[..i];
                if p.is_empty() {
                    break;
                }
                all.entry(p.to_string()).or_insert(Node::Dir);
            }
        }
        // BTreeMap order puts every directory before its contents.
        let mut out = Writer::new(w);
        for (path, node) in &all {
            let name = path.trim_start_matches('/');
            match node {
                Node::Dir => out.entry(name, S_IFDIR | 0o755, 2, (0, 0), &[])?,
                Node::HostFile(src, perm) => {
                    let data = std::fs::read(src)
                        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", src.display())))?;
                    out.entry(name, S_IFREG | perm, 1, (0, 0), &data)?
                }
                Node::Bytes(data, perm) => out.entry(name, S_IFREG | perm, 1, (0, 0), data)?,
                Node::Symlink(target) => {
                    out.entry(name, S_IFLNK | 0o777, 1, (0, 0), target.as_bytes())?
                }
                Node::CharDev(maj, min) => {
                    out.entry(name, S_IFCHR | 0o600, 1, (*maj, *min), &[])?
                }
            }
        }
        out.finish()
    }
}

struct Writer<W: Write> {
    w: W,
    offset: u64,
    ino: u32,
}

impl<W: Write> Writer<W> {
    fn new(w: W) -> Self {
        Writer {
            w,
            offset: 0,
            ino: 1,
        }
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.w.write_all(b)?;
        self.offset += b.len() as u64;
        Ok(())
    }

    fn pad4(&mut self) -> io::Result<()> {
        let pad = (4 - (self.offset % 4) as usize) % 4;
        self.put(&[0u8; 3][..pad])
    }

    fn entry(
        &mut self,
        name: &str,
        mode: u32,
        nlink: u32,
        rdev: (u32, u32),
        data: &[u8],
    ) -> io::Result<()> {
        let size = u32::try_from(data.len())
            .map_err(|_| io::Error::other(format!("{name}: larger than 4 GiB")))?;
        let header = format!(
            "070701{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            self.ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            size,
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            name.len() + 1,
            0, // check
        );
        self.ino += 1;
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad4()?;
        self.put(data)?;
        self.pad4()
    }

    fn finish(mut self) -> io::Result<()> {
        self.ino = 0;
        self.entry("TRAILER!!!", 0, 1, (0, 0), &[])?;
        self.w.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_come_first_and_entries_are_aligned() {
        let mut t = Tree::default();
        t.insert("/a/b/c", Node::Bytes(b"hello".to_vec(), 0o644));
        t.insert("/dev/console", Node::CharDev(5, 1));
        let mut buf = Vec::new();
        t.write_to(&mut buf).unwrap();
        assert_eq!(buf.len() % 4, 0);
        let s = String::from_utf8_lossy(&buf);
        let pos = |n: &str| s.find(n).unwrap();
        assert!(pos("a\0") < pos("a/b\0"));
        assert!(pos("a/b\0") < pos("a/b/c\0"));
        assert!(s.contains("hello"));
        assert!(s.ends_with("TRAILER!!!\0\0\0\0") || s.contains("TRAILER!!!"));
        // Every header starts on a 4-byte boundary.
        for (i, _) in s.match_indices("070701") {
            assert_eq!(i % 4, 0);
        }
    }
}
