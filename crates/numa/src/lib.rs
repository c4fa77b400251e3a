//! The kernel's NUMA and memory-tier surface, as tierd uses it, with no
//! policy: which nodes form the fast (top) tier and which the lower tiers
//! ([`topology`], from sysfs, and the zone watermarks from
//! `/proc/zoneinfo`), and where a process's pages are and how to move them
//! ([`mover`]: `move_pages(2)`, `/proc/<pid>/pagemap`,
//! `/proc/kpageflags`). Every rule it relies on is cited from the kernel
//! source or documentation in the module that relies on it.

pub mod cxl;
pub mod mover;
pub mod topology;
