//! cgroup v2 files: discovery, memory.* parsing and writes.
