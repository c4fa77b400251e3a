//! The multi-gen LRU's per-memcg, per-node generations and its proactive
//! reclaim commands: `/sys/kernel/debug/lru_gen`
//! (Documentation/admin-guide/mm/multigen_lru.rst, "Experimental features").
//!
//! Why tierd uses it: on Linux 6.12 with MGLRU on, a `memory.reclaim` write
//! does not stop at the amount asked for when a memcg's pages all sit in its
//! two youngest generations (a cache whose whole footprint is touched within
//! seconds): the kernel ages the memcg, lowers the scan priority, and memcg
//! reclaim does not abort once the goal is met. Measured in the emulated
//! host (one memcg, 600 MiB Zipf(0.99), docs/NOTES.md "memory.reclaim
//! overshoots under MGLRU"): `20M` demoted 97 MiB, `2M` 32 MiB; with MGLRU
//! off every write demoted what it asked. The lru_gen eviction command takes
//! a page count and a node: it demotes that many pages of one node, oldest
//! generation first, and stops (1291 pages for 1280 asked).
//!
//! File format (read): per memcg a `memcg <id> <path>` line, per node a
//! `node <nid>` line, then one line per generation: `<seq> <age_ms>
//! <anon_pages> <file_pages>`. The id is the memcg's css id, not the cgroup
//! id (inode number) the rest of this crate uses, so memcgs are matched by
//! path (relative to the cgroup2 root, with a leading `/`).
//! Commands (write): `+ <id> <nid> <max_seq> <can_swap> <force_scan>` ages
//! (a new youngest generation; the page-table walk moves the pages accessed
//! since the last aging into the previous youngest one), `- <id> <nid>
//! <min_seq> <swappiness> <nr_pages>` evicts generations up to `min_seq`
//! (at most `max_seq - 2`), stopping after `nr_pages`. Eviction of anon
//! pages on a node with a lower tier demotes them (`demotion_enabled`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{write_once, Error, Result};

/// `/sys/kernel/debug/lru_gen` below a debugfs mount.
pub const LRU_GEN_FILE: &str = "lru_gen";
/// MGLRU's on/off switch below sysfs (`0x0000` = off).
pub const LRU_GEN_ENABLED: &str = "kernel/mm/lru_gen/enabled";

/// Generations the kernel never evicts: `max_seq` and `max_seq - 1`
/// (MIN_NR_GENS in include/linux/mmzone.h).
const MIN_NR_GENS: u64 = 2;

/// One generation of one memcg on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation {
    pub seq: u64,
    /// Milliseconds since the generation was created.
    pub age_ms: u64,
    pub anon_pages: u64,
    pub file_pages: u64,
}

/// One memcg's generations, by node (oldest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemcgGens {
    /// The memcg's css id (what the commands take).
    pub id: u64,
    /// Path relative to the cgroup2 root, with a leading `/` (`/` = root).
    pub path: String,
    pub nodes: BTreeMap<u32, Vec<Generation>>,
}

impl MemcgGens {
    /// The youngest generation on `node`.
    pub fn youngest(&self, node: u32) -> Option<Generation> {
        self.nodes.get(&node)?.iter().max_by_key(|g| g.seq).copied()
    }

    /// The youngest generation's sequence number on `node`.
    pub fn max_seq(&self, node: u32) -> Option<u64> {
        self.youngest(node).map(|g| g.seq)
    }

    /// Pages of the memcg on `node`, every generation.
    pub fn resident_pages(&self, node: u32) -> u64 {
        self.nodes
            .get(&node)
            .map_or(0, |g| g.iter().map(|g| g.anon_pages + g.file_pages).sum())
    }

    /// Pages on `node` in generations younger than `max_age_ms` (touched,
    /// or allocated, about that recently); `None` when the youngest
    /// generation there is `stale_ms` old or older: not aged since, so
    /// pages touched meanwhile still sit in older generations.
    pub fn young_pages(&self, node: u32, max_age_ms: u64, stale_ms: u64) -> Option<u64> {
        let gens = self.nodes.get(&node)?;
        if self.youngest(node)?.age_ms >= stale_ms {
            return None;
        }
        Some(
            gens.iter()
                .filter(|g| g.age_ms < max_age_ms)
                .map(|g| g.anon_pages + g.file_pages)
                .sum(),
        )
    }

    /// Pages the eviction command can take on `node` now: those in
    /// generations older than the two youngest.
    pub fn evictable_pages(&self, node: u32) -> u64 {
        let Some(max) = self.max_seq(node) else {
            return 0;
        };
        self.nodes[&node]
            .iter()
            .filter(|g| g.seq + MIN_NR_GENS <= max)
            .map(|g| g.anon_pages + g.file_pages)
            .sum()
    }
}

/// Parses the lru_gen file (`path` names it in errors).
///
/// Errors: [`Error::Parse`] with the line for a line that is none of the
/// three kinds, a generation before any `node` line, or a `node` line before
/// any `memcg` line.
pub fn parse(path: &Path, text: &str) -> Result<Vec<MemcgGens>> {
    let err = |line: usize, reason: String| Error::Parse {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let mut out: Vec<MemcgGens> = Vec::new();
    let mut node: Option<u32> = None;
    for (i, l) in text.lines().enumerate() {
        let ln = i + 1;
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            [] => {}
            ["memcg", id, rest @ ..] => {
                let id = id
                    .parse()
                    .map_err(|_| err(ln, format!("memcg id {id:?} is not a number")))?;
                // A removed memcg still being freed prints no path.
                out.push(MemcgGens {
                    id,
                    path: rest.join(" "),
                    nodes: BTreeMap::new(),
                });
                node = None;
            }
            ["node", nid] => {
                let nid: u32 = nid
                    .parse()
                    .map_err(|_| err(ln, format!("node id {nid:?} is not a number")))?;
                let m = out
                    .last_mut()
                    .ok_or_else(|| err(ln, "node line before any memcg line".into()))?;
                m.nodes.entry(nid).or_default();
                node = Some(nid);
            }
            [seq, age, anon, file, ..] if seq.bytes().all(|b| b.is_ascii_digit()) => {
                let num = |s: &str, what: &str| {
                    s.parse::<u64>()
                        .map_err(|_| err(ln, format!("{what} {s:?} is not a number")))
                };
                let g = Generation {
                    seq: num(seq, "generation")?,
                    age_ms: num(age, "age")?,
                    anon_pages: num(anon, "anon pages")?,
                    file_pages: num(file, "file pages")?,
                };
                let (Some(m), Some(n)) = (out.last_mut(), node) else {
                    return Err(err(ln, "generation line before any node line".into()));
                };
                m.nodes.entry(n).or_default().push(g);
            }
            _ => return Err(err(ln, format!("unexpected line {l:?}"))),
        }
    }
    for m in &mut out {
        for gens in m.nodes.values_mut() {
            gens.sort_by_key(|g| g.seq);
        }
    }
    Ok(out)
}

/// What one [`LruGen::demote`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Eviction {
    /// Pages asked of the eviction command.
    pub asked_pages: u64,
    /// Pages that were evictable when it ran (after aging).
    pub evictable_pages: u64,
    /// Agings run first to make pages evictable.
    pub agings: u32,
    /// Wall time of those agings (the page-table walks and the re-reads of
    /// the file after each): the part of a demotion that does not scale
    /// with the pages asked but with the memcg's whole mapped footprint.
    pub aging: Duration,
}

/// The lru_gen file of a debugfs mount.
#[derive(Debug, Clone)]
pub struct LruGen {
    file: PathBuf,
}

impl LruGen {
    /// The lru_gen file below `debugfs` (normally `/sys/kernel/debug`), if
    /// MGLRU is usable: the file exists and `<sysfs>/kernel/mm/lru_gen/enabled`
    /// is not `0x0000`.
    ///
    /// Errors: [`Error::Unsupported`] naming the file that is missing or the
    /// switch that is off, and what to do.
    pub fn open(debugfs: &Path, sysfs: &Path) -> Result<Self> {
        let enabled = sysfs.join(LRU_GEN_ENABLED);
        match fs::read_to_string(&enabled) {
            Ok(s) if u32::from_str_radix(s.trim().trim_start_matches("0x"), 16) == Ok(0) => {
                return Err(Error::Unsupported {
                    path: enabled,
                    reason: "the multi-gen LRU is off (0x0000); echo y to it to use it".into(),
                })
            }
            Ok(_) => {}
            Err(e) => {
                return Err(Error::Unsupported {
                    path: enabled,
                    reason: format!("{e}: the kernel has no multi-gen LRU (CONFIG_LRU_GEN)"),
                })
            }
        }
        let file = debugfs.join(LRU_GEN_FILE);
        if !file.is_file() {
            return Err(Error::Unsupported {
                path: file,
                reason: "not found: mount debugfs there (mount -t debugfs none /sys/kernel/debug)"
                    .into(),
            });
        }
        Ok(LruGen { file })
    }

    pub fn path(&self) -> &Path {
        &self.file
    }

    /// Every memcg's generations.
    pub fn read(&self) -> Result<Vec<MemcgGens>> {
        let text = fs::read_to_string(&self.file).map_err(|source| Error::Io {
            path: self.file.clone(),
            source,
        })?;
        parse(&self.file, &text)
    }

    /// The generations of the memcg at `rel` (relative to the cgroup2 root).
    /// Errors: [`Error::Vanished`] when lru_gen lists no such memcg.
    pub fn memcg(&self, rel: &str) -> Result<MemcgGens> {
        let want = format!("/{}", rel.trim_matches('/'));
        self.read()?
            .into_iter()
            .find(|m| m.path == want)
            .ok_or_else(|| Error::Vanished(self.file.join(want.trim_start_matches('/'))))
    }

    fn command(&self, cmd: &str) -> Result<()> {
        write_once(&self.file, cmd.as_bytes()).map_err(|source| Error::Io {
            path: self.file.clone(),
            source,
        })
    }

    /// Evicts (demotes from a fast node; from the lowest tier, reclaims to
    /// swap where there is swap) up to `pages` pages of memcg `m` (as last
    /// read) on `node`, from generations at least `min_age_ms` old and
    /// older than the two youngest. First ages the memcg on that node when
    /// its youngest generation is older than a third of `min_age_ms`: pages
    /// touched since move up into the new generation, so a generation that
    /// reaches `min_age_ms` holds pages untouched for about that long (the
    /// idea of MGLRU's `min_ttl_ms`, Documentation/admin-guide/mm/multigen_lru.rst).
    /// `Eviction::evictable_pages` is what those generations held.
    ///
    /// Errors: as [`Self::demote`].
    pub fn evict_cold(
        &self,
        m: &MemcgGens,
        node: u32,
        pages: u64,
        swappiness: u32,
        min_age_ms: u64,
    ) -> Result<Eviction> {
        let mut out = Eviction {
            asked_pages: pages,
            ..Eviction::default()
        };
        let mut m = m.clone();
        let Some(youngest) = m.youngest(node) else {
            return Ok(out);
        };
        if pages == 0 {
            return Ok(out);
        }
        if youngest.age_ms >= min_age_ms / 3 {
            let start = Instant::now();
            self.command(&format!("+ {} {node} {} 1 1", m.id, youngest.seq))?;
            out.agings += 1;
            m = self.memcg(&m.path)?;
            out.aging += start.elapsed();
        }
        let Some(max) = m.max_seq(node) else {
            return Ok(out);
        };
        let cold: Vec<&Generation> = m.nodes[&node]
            .iter()
            .filter(|g| g.seq + MIN_NR_GENS <= max && g.age_ms >= min_age_ms)
            .collect();
        out.evictable_pages = cold.iter().map(|g| g.anon_pages + g.file_pages).sum();
        let Some(top) = cold.iter().map(|g| g.seq).max() else {
            return Ok(out);
        };
        if out.evictable_pages == 0 {
            return Ok(out);
        }
        self.command(&format!("- {} {node} {top} {swappiness} {pages}", m.id))?;
        Ok(out)
    }

    /// Demotes (or, with no lower tier, reclaims) up to `pages` pages of
    /// memcg `m` (as last read) from `node`, oldest generation first. When
    /// fewer are evictable it ages the memcg on that node first (at most
    /// twice: the second aging leaves in the old generations only what was
    /// not touched between the two page-table walks). An aging waits (sleeps)
    /// until the youngest generation is `gap` old, so those pages were
    /// untouched for at least that long: back to back (0; ~0.1 s apart
    /// under TCG) a page touched 7 times a second, the edge of a
    /// Zipf(0.99) cache's hottest tenth, is untouched half the time and
    /// demoted with the cold ones; 0.5 s apart, 3 % of the time
    /// (docs/NOTES.md "Session 76"). `swappiness` (0–200, as
    /// `vm.swappiness`) weighs anon against file pages.
    ///
    /// Errors: [`Error::Vanished`] for a memcg gone from lru_gen,
    /// [`Error::Io`] with the kernel's errno for a refused command.
    pub fn demote(
        &self,
        m: &MemcgGens,
        node: u32,
        pages: u64,
        swappiness: u32,
        gap: Duration,
    ) -> Result<Eviction> {
        self.age_and_evict(m, node, pages, swappiness, gap, 0)
    }

    /// Evicts up to `pages` pages of memcg `m` (as last read) on `node`
    /// that were untouched for at least `idle`, oldest generation first:
    /// ages the memcg there once (after waiting until its youngest
    /// generation is `idle` old), which leaves evictable the pages untouched
    /// since the aging before; when those are fewer than asked, waits
    /// `idle` and ages again, which leaves evictable every page untouched
    /// between the two page-table walks. Unlike [`Self::evict_cold`], whose
    /// window is the time since the last aging (a cycle), this finds the
    /// pages of a cache touching its whole footprint every second or two
    /// that are touched least often: a page touched `r` times a second is
    /// untouched for `idle` with a chance of e^(−r·idle) (Poisson).
    /// `Eviction::evictable_pages` is what the old enough generations held.
    ///
    /// Errors: as [`Self::demote`].
    pub fn evict_idle(
        &self,
        m: &MemcgGens,
        node: u32,
        pages: u64,
        swappiness: u32,
        idle: Duration,
    ) -> Result<Eviction> {
        self.age_and_evict(m, node, pages, swappiness, idle, 1)
    }

    /// [`Self::demote`] with at least `min_agings` agings (of at most two).
    fn age_and_evict(
        &self,
        m: &MemcgGens,
        node: u32,
        pages: u64,
        swappiness: u32,
        gap: Duration,
        min_agings: u32,
    ) -> Result<Eviction> {
        let mut out = Eviction {
            asked_pages: pages,
            ..Eviction::default()
        };
        if pages == 0 {
            return Ok(out);
        }
        let mut m = m.clone();
        while (m.evictable_pages(node) < pages || out.agings < min_agings) && out.agings < 2 {
            let Some(youngest) = m.youngest(node) else {
                return Ok(out);
            };
            let max = youngest.seq;
            let young = Duration::from_millis(youngest.age_ms);
            if young < gap {
                std::thread::sleep(gap - young);
            }
            let start = Instant::now();
            self.command(&format!("+ {} {node} {max} 1 1", m.id))?;
            out.agings += 1;
            m = self.memcg(&m.path)?;
            out.aging += start.elapsed();
        }
        out.evictable_pages = m.evictable_pages(node);
        let Some(max) = m.max_seq(node) else {
            return Ok(out);
        };
        if max < MIN_NR_GENS || out.evictable_pages == 0 {
            return Ok(out);
        }
        self.command(&format!(
            "- {} {node} {} {swappiness} {pages}",
            m.id,
            max - MIN_NR_GENS
        ))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "memcg     1 /\n node     0\n          0      13124          0           0 \n          3      13124         56           0 \nmemcg     2 /x\n node     0\n          8       9464         24           0 \n          9       6216     154322           0 \n         10       3032          0           0 \n node     1\n          2      32852        618           0 \n          3      32852          0           0 \n";

    #[test]
    fn parses_memcgs_nodes_and_generations() {
        let m = parse(Path::new("lru_gen"), SAMPLE).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!((m[1].id, m[1].path.as_str()), (2, "/x"));
        assert_eq!(m[1].max_seq(0), Some(10));
        // Only generation 8 is older than the two youngest (9, 10).
        assert_eq!(m[1].evictable_pages(0), 24);
        assert_eq!(m[1].evictable_pages(1), 0);
        assert_eq!(m[1].evictable_pages(7), 0);
        assert_eq!(m[1].resident_pages(0), 154346);
        assert_eq!(
            m[1].nodes[&1][0],
            Generation {
                seq: 2,
                age_ms: 32852,
                anon_pages: 618,
                file_pages: 0
            }
        );
    }

    /// The warm set: pages in generations younger than the age asked,
    /// and none known when the youngest generation is stale.
    #[test]
    fn young_pages_count_recent_generations_while_fresh() {
        let m = parse(Path::new("lru_gen"), SAMPLE).unwrap();
        // /x node 0: gens aged 9464, 6216 and 3032 ms (24, 154322, 0 pages).
        assert_eq!(m[1].young_pages(0, 7000, 5000), Some(154322));
        assert_eq!(m[1].young_pages(0, 10_000, 5000), Some(154346));
        assert_eq!(m[1].young_pages(0, 3000, 5000), Some(0));
        // Youngest aged 3032 ms ago: stale for a 3 s limit.
        assert_eq!(m[1].young_pages(0, 7000, 3000), None);
        assert_eq!(m[1].young_pages(7, 7000, 5000), None);
    }

    #[test]
    fn malformed_lines_name_the_file_and_line() {
        for (text, line) in [
            ("memcg x /\n", 1),
            (" node 0\n", 1),
            ("memcg 1 /\n 0 1 2 3\n", 2),
            ("memcg 1 /\n node 0\n 0 1 two 3\n", 3),
            ("memcg 1 /\n node 0\n garbage\n", 3),
        ] {
            let e = parse(Path::new("/sys/kernel/debug/lru_gen"), text).unwrap_err();
            assert!(
                matches!(e, Error::Parse { line: l, .. } if l == line),
                "{text:?}: {e}"
            );
            assert!(e.to_string().starts_with("/sys/kernel/debug/lru_gen: line"));
        }
    }

    #[test]
    fn open_says_what_is_missing() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("sys");
        let dbg = d.path().join("debug");
        fs::create_dir_all(sys.join("kernel/mm/lru_gen")).unwrap();
        fs::create_dir_all(&dbg).unwrap();
        let e = LruGen::open(&dbg, &sys).unwrap_err();
        assert!(e.to_string().contains("CONFIG_LRU_GEN"), "{e}");
        fs::write(sys.join(LRU_GEN_ENABLED), "0x0000\n").unwrap();
        let e = LruGen::open(&dbg, &sys).unwrap_err();
        assert!(e.to_string().contains("off"), "{e}");
        fs::write(sys.join(LRU_GEN_ENABLED), "0x0007\n").unwrap();
        let e = LruGen::open(&dbg, &sys).unwrap_err();
        assert!(e.to_string().contains("mount -t debugfs"), "{e}");
        fs::write(dbg.join(LRU_GEN_FILE), SAMPLE).unwrap();
        let g = LruGen::open(&dbg, &sys).unwrap();
        assert_eq!(g.memcg("x").unwrap().id, 2);
        assert!(matches!(g.memcg("gone"), Err(Error::Vanished(_))));
    }

    /// The offload's eviction takes only generations at least `min_age`
    /// old (and not the two youngest): here generation 8 (40 s), not 9
    /// (20 s). The youngest is 0.1 s old, so no aging first. The fake file
    /// receives the command the kernel would.
    #[test]
    fn evict_cold_takes_only_generations_old_enough() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("sys");
        let dbg = d.path().join("debug");
        fs::create_dir_all(sys.join("kernel/mm/lru_gen")).unwrap();
        fs::create_dir_all(&dbg).unwrap();
        fs::write(sys.join(LRU_GEN_ENABLED), "0x0007\n").unwrap();
        let text = "memcg     2 /x\n node     0\n          8      40000        100          0 \n          9      20000        200          0 \n         10       5000        300          0 \n         11        100        400          0 \n";
        fs::write(dbg.join(LRU_GEN_FILE), text).unwrap();
        let g = LruGen::open(&dbg, &sys).unwrap();
        let m = g.memcg("x").unwrap();
        let ev = g.evict_cold(&m, 0, 50, 60, 30_000).unwrap();
        assert_eq!((ev.agings, ev.evictable_pages), (0, 100));
        // (Written in place, as to the kernel's file: the rest is the old text.)
        let written = fs::read_to_string(dbg.join(LRU_GEN_FILE)).unwrap();
        assert!(written.starts_with("- 2 0 8 60 50x"), "{written}");
        // Nothing that old: no command at all.
        fs::write(dbg.join(LRU_GEN_FILE), text).unwrap();
        let ev = g.evict_cold(&m, 0, 50, 60, 60_000).unwrap();
        assert_eq!(ev.evictable_pages, 0);
        assert_eq!(fs::read_to_string(dbg.join(LRU_GEN_FILE)).unwrap(), text);
    }
}
