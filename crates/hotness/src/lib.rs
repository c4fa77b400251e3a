//! Access sampling for tierd: the DAMON sysfs driver ([`damon`]), the
//! aggregation of DAMON regions into per-container heat per node ([`heat`]),
//! the eBPF NUMA hint-fault probe ([`probe`]), and the two monitors the
//! daemon runs each cycle on top of them: DAMON heat per container
//! ([`monitor`]) and hint faults per container ([`hintfaults`]). No
//! decisions are taken here.

pub mod damon;
pub mod heat;
pub mod hintfaults;
pub mod monitor;
pub mod probe;

pub use damon::{
    AccessPattern, Action, Attrs, Claim, Damon, Error, Filter, FilterKind, KdamondSpec, Ops, Quota,
    Range, Scheme, SchemeStats, TriedRegion, DEFAULT_ROOT, DEFAULT_STATE_FILE,
};
pub use heat::{ContainerHeat, HeatParams, Histogram, NodeHeat};
pub use probe::{
    HintCounts, HintFaultProbe, HintKey, ProbeError, ProbeOptions, ProbeReading, PromotionEvent,
};
