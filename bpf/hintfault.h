/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Record layouts shared by hintfault.bpf.c and tierd's loader
 * (crates/hotness/src/probe.rs). The Rust side does not redeclare them: the
 * libbpf-rs skeleton generates `types::hf_key`, `types::hf_counts` and
 * `types::hf_hist` from the BTF of the compiled object, so both sides read the
 * same definition. Fixed-width fields only, no implicit padding.
 */
#ifndef TIERD_HINTFAULT_H
#define TIERD_HINTFAULT_H

/* Node number the kernel uses for "none" (NUMA_NO_NODE = -1) in a key. */
#define HF_NO_NODE 0xffffffffu
/* latency_ms of a record without one (not a lower-tier hint fault that
 * went through the kernel's hot-page test, or the probe could not read it). */
#define HF_NO_LATENCY 0xffffffffu
/* Log2 buckets of the promotion-latency histogram: bucket i counts
 * migrations that took [2^i, 2^(i+1)) ns; the last one is open-ended. */
#define HF_LAT_BUCKETS 32

/* Key of the per-CPU `counts` map: one memcg (cgroup v2 directory inode, as
 * `folio->memcg_data` -> `css.cgroup->kn->id`; 0 = no memcg) and the folio's
 * source node and the node the kernel wanted it on (HF_NO_NODE when
 * numa_migrate_check found no better node). */
struct hf_key {
	__u64 memcg_id;
	__u32 src_nid;
	__u32 dst_nid;
};

/* Values of the `counts` map, summed over CPUs by the loader. Events are
 * counted once per fault or migration call; `*_pages` in base pages. */
struct hf_counts {
	/* numa_migrate_check() calls: one NUMA hint fault (PTE or PMD), the
	 * same event as memcg `numa_hint_faults`. */
	__u64 hint_faults;
	/* Hint faults for which the kernel chose a target node (return != -1):
	 * promotion (or NUMA-balancing migration) candidates. */
	__u64 candidates;
	/* migrate_misplaced_folio_prepare() != 0: the candidate was dropped
	 * (isolation failed, target node low on memory, rate limit). */
	__u64 prepare_failed;
	/* migrate_misplaced_folio() returned 0 / non-zero. */
	__u64 migrated;
	__u64 migrate_failed;
	__u64 migrated_pages;
	__u64 migrate_failed_pages;
};

/* Value of the `latency` array map (one entry per CPU): the time spent in
 * migrate_misplaced_folio(), fentry to fexit, in ns, as a log2 histogram of
 * the calls, and the CPU time of those calls summed (the kernel's promotion
 * work in the faulting tasks' own context, which no kernel thread's CPU time
 * shows; see hf_migrate_exit for how it is taken). */
struct hf_hist {
	__u64 buckets[HF_LAT_BUCKETS];
	__u64 cpu_ns;
};

/* One successful NUMA-balancing migration, sent through the `promotions`
 * ring buffer so that tierd can match it, by (process, virtual address),
 * against the pages it demoted itself (exact ping-pong) and recall it when
 * it is demoted again; the `refusals` ring buffer carries the same record
 * for a candidate the kernel refused before migration (dst_nid = the node
 * it wanted), and the `declined` one for a hint fault on a remote page the
 * kernel did not make a candidate (dst_nid = HF_NO_NODE). */
struct hf_promotion {
	__u64 memcg_id;
	/* Faulting process (tgid) and the faulting virtual address (from
	 * numa_migrate_check's `addr`, 0 when unknown). */
	__u64 addr;
	__u32 tgid;
	__u32 nr_pages;
	__u32 src_nid;
	__u32 dst_nid;
	/* `declined` only: the hint-fault latency the kernel's hot-page test
	 * compared with its threshold (kernel/sched/fair.c
	 * numa_hint_fault_latency: ms from the NUMA-balancing scan that
	 * unmapped the page to this fault), HF_NO_LATENCY when unknown. */
	__u32 latency_ms;
	__u32 reserved;
};

#endif
