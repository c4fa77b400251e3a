//! [`NodeSet`]: a set of NUMA node (or CPU) ids in the kernel's list syntax.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::str::FromStr;

/// Largest id [`NodeSet::parse`] accepts. The kernel's limits are far below it
/// (`MAX_NUMNODES` is at most 1024, `NR_CPUS` at most 8192 on x86-64); the cap
/// keeps a corrupt range such as `0-4294967295` from allocating gigabytes.
pub const MAX_ID: u32 = 65_535;

/// A set of NUMA node ids, as in `cpuset.mems`, `/sys/devices/system/node/online`
/// or a memory tier's `nodelist`. The same list syntax is used for CPU lists
/// (`node0/cpulist`), so the type parses those too.
///
/// Derefs to `BTreeSet<u32>`, so `contains`, `iter`, `len`, `insert` work as on
/// the set; iteration is in ascending order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeSet(pub BTreeSet<u32>);

/// Why a list string is not in the kernel's list syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a node list such as \"0-1,3\": {reason}")]
pub struct NodeSetParseError {
    /// The offending input, trimmed.
    pub input: String,
    pub reason: String,
}

impl NodeSet {
    pub fn new() -> Self {
        NodeSet(BTreeSet::new())
    }

    /// Parses the kernel's list syntax (`bitmap_parselist`, as printed with
    /// `%*pbl`): comma-separated ids and inclusive ranges, e.g. `0-1,3`.
    /// Surrounding whitespace (the trailing newline of a sysfs file) is
    /// ignored; an empty or blank string is the empty set (`cpuset.mems` of a
    /// cgroup that inherits its parent's nodes reads as an empty line).
    /// The stride form `0-7:2/4`, which the kernel accepts on input but never
    /// prints, is rejected, as are ids above [`MAX_ID`].
    pub fn parse(s: &str) -> Result<NodeSet, NodeSetParseError> {
        let input = s.trim();
        let fail = |reason: String| NodeSetParseError {
            input: input.to_owned(),
            reason,
        };
        let mut set = BTreeSet::new();
        if input.is_empty() {
            return Ok(NodeSet(set));
        }
        let id = |t: &str| -> Result<u32, NodeSetParseError> {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(fail(format!("{t:?} is not a decimal id")));
            }
            match t.parse::<u32>() {
                Ok(v) if v <= MAX_ID => Ok(v),
                _ => Err(fail(format!("{t} is larger than {MAX_ID}"))),
            }
        };
        for part in input.split(',') {
            match part.split_once('-') {
                None => {
                    set.insert(id(part)?);
                }
                Some((a, b)) => {
                    let (a, b) = (id(a)?, id(b)?);
                    if a > b {
                        return Err(fail(format!("range {part} runs backwards")));
                    }
                    set.extend(a..=b);
                }
            }
        }
        Ok(NodeSet(set))
    }

    /// Builds a set from ids (for code and tests).
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Self {
        NodeSet(ids.into_iter().collect())
    }
}

impl Deref for NodeSet {
    type Target = BTreeSet<u32>;
    fn deref(&self) -> &BTreeSet<u32> {
        &self.0
    }
}

impl DerefMut for NodeSet {
    fn deref_mut(&mut self) -> &mut BTreeSet<u32> {
        &mut self.0
    }
}

impl FromStr for NodeSet {
    type Err = NodeSetParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeSet::parse(s)
    }
}

impl FromIterator<u32> for NodeSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        NodeSet(iter.into_iter().collect())
    }
}

impl IntoIterator for NodeSet {
    type Item = u32;
    type IntoIter = std::collections::btree_set::IntoIter<u32>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a NodeSet {
    type Item = &'a u32;
    type IntoIter = std::collections::btree_set::Iter<'a, u32>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Formats in the kernel's list syntax with maximal ranges (`0-2,5`), as the
/// kernel prints it; the empty set formats as the empty string.
impl fmt::Display for NodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut it = self.0.iter().copied().peekable();
        let mut first = true;
        while let Some(start) = it.next() {
            let mut end = start;
            while it.peek() == Some(&(end + 1)) {
                end += 1;
                it.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! parse_ok {
        ($name:ident, $input:expr, [$($id:expr),*]) => {
            #[test]
            fn $name() {
                let got = NodeSet::parse($input).unwrap();
                assert_eq!(got, NodeSet::from_ids([$($id),*]));
            }
        };
    }
    macro_rules! parse_err {
        ($name:ident, $input:expr, $reason:expr) => {
            #[test]
            fn $name() {
                let e = NodeSet::parse($input).unwrap_err();
                assert!(e.reason.contains($reason), "{e}");
            }
        };
    }

    parse_ok!(empty, "", []);
    parse_ok!(blank_line, "\n", []);
    parse_ok!(single, "0\n", [0]);
    parse_ok!(range, "0-1\n", [0, 1]);
    parse_ok!(mixed, "0-2,5,7-8", [0, 1, 2, 5, 7, 8]);
    parse_ok!(degenerate_range, "3-3", [3]);
    parse_ok!(unordered_overlapping, "5,0-2,1", [0, 1, 2, 5]);
    parse_ok!(max_id, "65535", [65535]);
    parse_err!(garbage, "abc", "not a decimal id");
    parse_err!(negative, "-1", "not a decimal id");
    parse_err!(trailing_comma, "0,", "not a decimal id");
    parse_err!(backwards, "3-1", "runs backwards");
    parse_err!(stride, "0-7:2/4", "not a decimal id");
    parse_err!(space_inside, "0, 1", "not a decimal id");
    parse_err!(too_large, "0-4294967295", "larger than");
    parse_err!(overflow, "99999999999", "larger than");
    parse_err!(max_keyword, "max", "not a decimal id");

    #[test]
    fn format_round_trips() {
        for s in ["", "0", "0-1", "0-2,5,7-8", "1,3,5"] {
            assert_eq!(NodeSet::parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn deref_and_iter() {
        let s = NodeSet::parse("2,0").unwrap();
        assert!(s.contains(&2) && !s.contains(&1));
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(s.into_iter().collect::<Vec<_>>(), vec![0, 2]);
    }
}
