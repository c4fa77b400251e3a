//! Access sampling (DAMON, eBPF hint faults).
