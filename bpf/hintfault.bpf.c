// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * tierd's NUMA hint-fault probe: per-memcg, per-node counts of hint faults,
 * promotion candidates and promotion outcomes, seen on the kernel's own fast
 * path (NUMA balancing). `do_numa_page` is inlined on 6.12 and cannot be
 * attached; the functions below can (checked in the emulated host, Debian
 * 6.12): see ../docs/NOTES.md, "The eBPF hint-fault probe".
 *
 *   fentry/fexit numa_migrate_check(folio, vmf, addr, flags, writable, last_cpupid)
 *          one call = one memcg `numa_hint_faults` event (PTE and PMD);
 *          return != NUMA_NO_NODE = a migration candidate to that node;
 *          the folio's access time before and after gives the fault's
 *          latency as the kernel's hot-page test measured it
 *   fexit  migrate_misplaced_folio_prepare(folio, vma, node)
 *          != 0: the candidate was dropped before migration
 *   fentry/fexit migrate_misplaced_folio(folio, vma, node), or (folio, node)
 *          0 = migrated; at fexit the old folio's memcg_data is already 0,
 *          so memcg, node and size are captured at fentry per thread
 *
 * Records: hintfault.h. The memcg is the folio's (as the kernel charges it),
 * not the faulting task's.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "hintfault.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* NODES_SHIFT of the running kernel (CONFIG_NODES_SHIFT, 10 on Debian's
 * x86-64 kernels): not in BTF, so the loader sets it. The node id is the top
 * NODES_SHIFT bits of folio->flags (SPARSEMEM_VMEMMAP: no section bits). */
const volatile __u32 nodes_shift = 10;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct hf_key);
	__type(value, struct hf_counts);
} counts SEC(".maps");

struct inflight {
	__u64 memcg_id;
	__u64 start_ns;
	__u64 addr;
	/* The task's context switches and its sum_exec_runtime at entry. */
	__u64 switches;
	__u64 runtime_ns;
	__u32 src_nid;
	__u32 nr_pages;
};

static __always_inline __u64 task_switches(struct task_struct *t)
{
	return BPF_CORE_READ(t, nvcsw) + BPF_CORE_READ(t, nivcsw);
}

/* The last candidate's faulting address, by pid_tgid: numa_migrate_check
 * knows the address, migrate_misplaced_folio (called next by the same
 * thread, in do_numa_page / do_huge_pmd_numa_page) does not. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u64);
} fault_addr SEC(".maps");

/* Successful migrations, for exact ping-pong matching and recall in tierd.
 * 1 MiB: ~21k records (40 bytes + an 8-byte header each). tierd empties it
 * every interval (2 s), and one NUMA-balancing pass promotes 12k pages in a
 * second in the emulated host: 256 KiB, emptied only at full cycles (2 to
 * 8 s apart), lost half of them. The consumer's mapping of the buffer
 * counts in tierd's RSS (4 MiB took it from ~10 to 17.6 MiB). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} promotions SEC(".maps");

/* Promotion candidates the kernel refused (migrate_misplaced_folio_prepare
 * failed: mostly no free memory above the fast node's watermark), same
 * record layout: pages hot by the kernel's own test that stay on the lower
 * tier until its next scan pass, for tierd's recall. A sample: one pass over
 * a full fast tier refuses tens of thousands, and what the buffer has no
 * room for is lost uncounted. 1 MiB: ~21k records (85 MiB of base pages),
 * more than tierd remembers per container (16k pages) and one whole pass
 * over a 48 MiB hot set (12.3k refusals), which at 512 KiB (~10.9k) lost
 * its last 1.2k pages whenever no drain fell inside the pass. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} refusals SEC(".maps");

/* Hint faults on pages away from the faulting CPU's node (with memory
 * tiering only, lower-tier pages: NUMA balancing does not scan the top tier)
 * that the kernel declined to promote (numa_migrate_check returned no node:
 * the fault came later than its hot threshold, or its rate limit was spent),
 * same record layout with dst_nid = HF_NO_NODE. Pages in use, if not hot by
 * the kernel's test: the ones a container below its share would recall when
 * it has no known-hot page left below. A sample, as `refusals`: 256 KiB,
 * ~5.4k records (21 MiB of base pages) per drain. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} declined SEC(".maps");

/* The memcgs whose declined hint faults are wanted (key: memcg id, value
 * unused), filled by tierd: the containers that may fall short of their
 * fast-tier target, the only ones recall serves. A neighbour above its
 * share takes most of the lower-tier hint faults (~1.2k/s in the emulated
 * host), and recording them cost tierd 15-27 ms per cycle under emulation
 * to drain and discard (docs/NOTES.md "Declined hint faults only for the
 * containers recall serves"). Empty: none are recorded. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} declined_memcgs SEC(".maps");

/* Never written: puts struct hf_promotion into the object's BTF, so the
 * skeleton generates its Rust type (ring buffer records have no map type). */
struct hf_promotion hf_promotion_layout;

/* Events the ring buffer had no room for (index 0). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} promotion_drops SEC(".maps");

/* migrate_misplaced_folio in progress, by pid_tgid (it may sleep). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct inflight);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hf_hist);
} latency SEC(".maps");

static __always_inline __u64 folio_memcg_id(struct folio *folio)
{
	unsigned long data = BPF_CORE_READ(folio, memcg_data);
	unsigned long nflags = bpf_core_enum_value(enum page_memcg_data_flags, __NR_MEMCG_DATA_FLAGS);
	unsigned long kmem = bpf_core_enum_value(enum page_memcg_data_flags, MEMCG_DATA_KMEM);
	struct mem_cgroup *memcg;

	if (!data)
		return 0;
	if (bpf_core_field_exists(((struct obj_cgroup *)0)->is_root)) {
		/* memcg_data is an obj_cgroup for every charged folio. */
		struct obj_cgroup *objcg = (struct obj_cgroup *)(data & ~(nflags - 1));

		memcg = BPF_CORE_READ(objcg, memcg);
	} else {
		/* 6.12: a mem_cgroup, or an obj_cgroup for kmem (not ours). */
		if (data & kmem)
			return 0;
		memcg = (struct mem_cgroup *)(data & ~(nflags - 1));
	}
	if (!memcg)
		return 0;
	return BPF_CORE_READ(memcg, css.cgroup, kn, id);
}

/* The folio's flags word: a plain unsigned long on 6.12, memdesc_flags_t
 * on later kernels. The branch not taken is removed at load (the type check
 * is a load-time constant), so its failed relocation is never reached. */
static __always_inline unsigned long folio_flags(struct folio *folio)
{
	if (bpf_core_type_exists(memdesc_flags_t)) {
		struct folio___memdesc *f = (void *)folio;

		return BPF_CORE_READ(f, flags.f);
	}
	return BPF_CORE_READ(folio, flags);
}

static __always_inline __u32 folio_nid(struct folio *folio)
{
	unsigned long flags = folio_flags(folio);
	__u32 shift = nodes_shift;

	if (shift == 0 || shift > 16)
		return 0;
	return (__u32)(flags >> (64 - shift)) & ((1u << shift) - 1);
}

static __always_inline __u32 folio_pages(struct folio *folio)
{
	unsigned long flags = folio_flags(folio);
	__u32 head = bpf_core_enum_value(enum pageflags, PG_head);

	if (!(flags & (1ul << head)))
		return 1;
	if (bpf_core_field_exists(folio->_folio_nr_pages))
		return BPF_CORE_READ(folio, _folio_nr_pages);
	if (bpf_core_field_exists(((struct folio___nr *)folio)->_nr_pages))
		return BPF_CORE_READ((struct folio___nr *)folio, _nr_pages);
	return 1;
}

static __always_inline struct hf_counts *slot(__u64 memcg, __u32 src, __u32 dst)
{
	struct hf_key key = { .memcg_id = memcg, .src_nid = src, .dst_nid = dst };
	struct hf_counts *c = bpf_map_lookup_elem(&counts, &key);

	if (c)
		return c;
	struct hf_counts zero = {};
	/* Full map: the event is lost rather than evicting another memcg. */
	bpf_map_update_elem(&counts, &key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&counts, &key);
}

/* The folio's access-time word as numa_migrate_check found it (fentry),
 * per CPU: the fault runs under the page-table lock, so fentry and fexit of
 * one call are on one CPU with nothing in between. */
struct hf_before {
	__u64 folio;
	__u64 raw;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hf_before);
} check_before SEC(".maps");

/* The word that holds the folio's last CPU/PID, which memory tiering
 * reuses on lower-tier folios for the time NUMA balancing last unmapped
 * them (include/linux/mm.h folio_xchg_access_time): `_last_cpupid` when the
 * page flags have no room for it, else the flags word. */
static __always_inline __u64 access_word(struct folio *folio)
{
	if (bpf_core_field_exists(((struct folio___cpupid *)folio)->_last_cpupid))
		return (__u32)BPF_CORE_READ((struct folio___cpupid *)folio, _last_cpupid);
	return folio_flags(folio);
}

/* Bits set in a word (SWAR popcount). Straight-line on purpose: a loop
 * that tests one bit per iteration branches each time, and the verifier
 * walks every path (docs/NOTES.md "Session 73": 2.6 s to load). */
static __always_inline __u32 popcount64(__u64 m)
{
	m = m - ((m >> 1) & 0x5555555555555555ULL);
	m = (m & 0x3333333333333333ULL) + ((m >> 2) & 0x3333333333333333ULL);
	m = (m + (m >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (__u32)((m * 0x0101010101010101ULL) >> 56);
}

/* floor(log2(v)), 0 for v <= 1: the bits below the top one set, counted. */
static __always_inline __u32 log2_floor(__u64 v)
{
	__u32 bits;

	v |= v >> 1;
	v |= v >> 2;
	v |= v >> 4;
	v |= v >> 8;
	v |= v >> 16;
	v |= v >> 32;
	bits = popcount64(v);
	return bits ? bits - 1 : 0;
}

/* The hint-fault latency (ms) the kernel's hot-page test measured for this
 * fault (kernel/sched/fair.c numa_hint_fault_latency: the fault's time
 * minus the scan's, both jiffies_to_msecs() in the folio's last-cpupid
 * field, swapped in by should_numa_migrate_memory), or HF_NO_LATENCY.
 * numa_migrate_check leaves LAST_CPUPID_MASK in *last_cpupid for a folio
 * that keeps an access time, which gives the field's width; in the flags
 * word the field sits below the node and zone fields
 * (include/linux/page-flags-layout.h; SPARSEMEM_VMEMMAP: no section bits,
 * as for folio_nid). The value after the fault must read as the current
 * time (jiffies at HZ 1000, 250 or 100), so a layout this does not know
 * gives no latency rather than a wrong one. */
static __always_inline __u32 hint_latency_ms(struct folio *folio, int *last_cpupid)
{
	__u32 zero = 0;
	struct hf_before *b = bpf_map_lookup_elem(&check_before, &zero);
	int m = 0;

	if (!b || b->folio != (__u64)folio)
		return HF_NO_LATENCY;
	if (bpf_probe_read_kernel(&m, sizeof(m), last_cpupid))
		return HF_NO_LATENCY;
	__u64 mask = (__u32)m;
	/* 2^width - 1, width 8..31 */
	if (mask < 0xff || mask > 0x7fffffff || (mask & (mask + 1)))
		return HF_NO_LATENCY;
	/* a 2^width - 1 mask has width bits set */
	__u32 width = popcount64(mask);
	__u32 pos = 0;
	if (!bpf_core_field_exists(((struct folio___cpupid *)folio)->_last_cpupid)) {
		__u32 zones = bpf_core_enum_value(enum zone_type, __MAX_NR_ZONES);
		__u32 zw = zones <= 1 ? 0 : zones <= 2 ? 1 : zones <= 4 ? 2 : zones <= 8 ? 3 : 4;

		if (nodes_shift + zw + width > 64)
			return HF_NO_LATENCY;
		pos = 64 - nodes_shift - zw - width;
	}
	__u64 before = (b->raw >> (pos & 63)) & mask;
	__u64 after = (access_word(folio) >> (pos & 63)) & mask;
	/* PAGE_ACCESS_TIME_BUCKETS: a field under 12 bits keeps coarser time. */
	__u32 buckets = width < 12 ? 12 - width : 0;
	__u64 j = bpf_jiffies64();
	bool now = false;
	__u64 mpj[3] = { 1, 4, 10 };

	for (int i = 0; i < 3; i++) {
		__u64 t = ((j * mpj[i]) >> buckets) & mask;

		/* a few jiffies after the kernel's read */
		if (((t - after) & mask) <= ((8 * mpj[i]) >> buckets) + 1)
			now = true;
	}
	if (!now)
		return HF_NO_LATENCY;
	__u64 ms = ((after - before) & mask) << buckets;

	return ms > 0xfffffffe ? 0xfffffffe : (__u32)ms;
}

SEC("fentry/numa_migrate_check")
int BPF_PROG(hf_check_enter, struct folio *folio)
{
	__u32 zero = 0;
	struct hf_before *b = bpf_map_lookup_elem(&check_before, &zero);

	if (b) {
		b->folio = (__u64)folio;
		b->raw = access_word(folio);
	}
	return 0;
}

SEC("fexit/numa_migrate_check")
int BPF_PROG(hf_check, struct folio *folio, struct vm_fault *vmf, unsigned long addr,
	     int *flags, bool writable, int *last_cpupid, int ret)
{
	__u32 dst = ret < 0 ? HF_NO_NODE : (__u32)ret;
	__u64 memcg = folio_memcg_id(folio);
	__u32 src = folio_nid(folio);
	struct hf_counts *c = slot(memcg, src, dst);

	if (!c)
		return 0;
	c->hint_faults++;
	if (ret >= 0) {
		__u64 id = bpf_get_current_pid_tgid();

		c->candidates++;
		bpf_map_update_elem(&fault_addr, &id, &addr, BPF_ANY);
	} else if (src != bpf_get_numa_node_id() &&
		   bpf_map_lookup_elem(&declined_memcgs, &memcg)) {
		struct hf_promotion *e = bpf_ringbuf_reserve(&declined, sizeof(*e), 0);

		if (e) {
			e->memcg_id = memcg;
			e->addr = addr;
			e->tgid = bpf_get_current_pid_tgid() >> 32;
			e->nr_pages = folio_pages(folio);
			e->src_nid = src;
			e->dst_nid = HF_NO_NODE;
			e->latency_ms = hint_latency_ms(folio, last_cpupid);
			e->reserved = 0;
			bpf_ringbuf_submit(e, 0);
		}
	}
	return 0;
}

SEC("fexit/migrate_misplaced_folio_prepare")
int BPF_PROG(hf_prepare, struct folio *folio, struct vm_area_struct *vma, int node, int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 memcg, *a;
	struct hf_counts *c;

	if (ret == 0)
		return 0;
	memcg = folio_memcg_id(folio);
	c = slot(memcg, folio_nid(folio), (__u32)node);
	if (c)
		c->prepare_failed++;
	/* The address numa_migrate_check saw: no migration follows to take it. */
	a = bpf_map_lookup_elem(&fault_addr, &id);
	if (!a)
		return 0;
	if (*a) {
		struct hf_promotion *e = bpf_ringbuf_reserve(&refusals, sizeof(*e), 0);

		if (e) {
			e->memcg_id = memcg;
			e->addr = *a;
			e->tgid = id >> 32;
			e->nr_pages = folio_pages(folio);
			e->src_nid = folio_nid(folio);
			e->dst_nid = (__u32)node;
			e->latency_ms = HF_NO_LATENCY;
			e->reserved = 0;
			bpf_ringbuf_submit(e, 0);
		}
	}
	bpf_map_delete_elem(&fault_addr, &id);
	return 0;
}

static __always_inline int migrate_enter(struct folio *folio)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 *a = bpf_map_lookup_elem(&fault_addr, &id);
	struct task_struct *t = bpf_get_current_task_btf();
	struct inflight f = {
		.memcg_id = folio_memcg_id(folio),
		.start_ns = bpf_ktime_get_ns(),
		.switches = task_switches(t),
		.runtime_ns = BPF_CORE_READ(t, se.sum_exec_runtime),
		.addr = a ? *a : 0,
		.src_nid = folio_nid(folio),
		.nr_pages = folio_pages(folio),
	};

	if (a)
		bpf_map_delete_elem(&fault_addr, &id);
	bpf_map_update_elem(&inflight, &id, &f, BPF_ANY);
	return 0;
}

static __always_inline int migrate_exit(int node, int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct inflight *f = bpf_map_lookup_elem(&inflight, &id);
	struct hf_counts *c;
	struct hf_hist *h;
	__u32 zero = 0;

	if (!f)
		return 0;
	__u64 ns = bpf_ktime_get_ns() - f->start_ns;
	/* CPU time: the wall time, unless the task slept or was preempted in
	 * the migration (cond_resched, a page lock); then what the scheduler
	 * accounted to it meanwhile (sum_exec_runtime, exact at each switch,
	 * short by the time since the last tick after it resumed). */
	__u64 cpu_ns = ns;
	struct task_struct *t = bpf_get_current_task_btf();

	if (task_switches(t) != f->switches) {
		__u64 run = BPF_CORE_READ(t, se.sum_exec_runtime) - f->runtime_ns;

		if (run < cpu_ns)
			cpu_ns = run;
	}
	c = slot(f->memcg_id, f->src_nid, (__u32)node);
	if (ret == 0 && f->addr) {
		struct hf_promotion *e = bpf_ringbuf_reserve(&promotions, sizeof(*e), 0);

		if (e) {
			e->memcg_id = f->memcg_id;
			e->addr = f->addr;
			e->tgid = id >> 32;
			e->nr_pages = f->nr_pages;
			e->src_nid = f->src_nid;
			e->dst_nid = (__u32)node;
			e->latency_ms = HF_NO_LATENCY;
			e->reserved = 0;
			bpf_ringbuf_submit(e, 0);
		} else {
			__u64 *d = bpf_map_lookup_elem(&promotion_drops, &zero);

			if (d)
				(*d)++;
		}
	}
	if (c) {
		if (ret == 0) {
			c->migrated++;
			c->migrated_pages += f->nr_pages;
		} else {
			c->migrate_failed++;
			c->migrate_failed_pages += f->nr_pages;
		}
	}
	bpf_map_delete_elem(&inflight, &id);
	h = bpf_map_lookup_elem(&latency, &zero);
	if (h) {
		/* [2^b, 2^(b+1)) ns; the last bucket is open-ended */
		__u32 b = log2_floor(ns);

		if (b > HF_LAT_BUCKETS - 1)
			b = HF_LAT_BUCKETS - 1;
		h->buckets[b & (HF_LAT_BUCKETS - 1)]++;
		h->cpu_ns += cpu_ns;
	}
	return 0;
}

/* migrate_misplaced_folio(folio, vma, node) on 6.12; later kernels dropped
 * the vma (folio, node; 7.3 has that). A tracing program may read only the arguments the
 * function has, so the loader keeps the pair that matches the kernel's BTF. */
SEC("fentry/migrate_misplaced_folio")
int BPF_PROG(hf_migrate_enter, struct folio *folio, struct vm_area_struct *vma, int node)
{
	return migrate_enter(folio);
}

SEC("fexit/migrate_misplaced_folio")
int BPF_PROG(hf_migrate_exit, struct folio *folio, struct vm_area_struct *vma, int node, int ret)
{
	return migrate_exit(node, ret);
}

SEC("fentry/migrate_misplaced_folio")
int BPF_PROG(hf_migrate_enter2, struct folio *folio, int node)
{
	return migrate_enter(folio);
}

SEC("fexit/migrate_misplaced_folio")
int BPF_PROG(hf_migrate_exit2, struct folio *folio, int node, int ret)
{
	return migrate_exit(node, ret);
}
