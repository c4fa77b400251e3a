/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Minimal kernel type definitions for hintfault.bpf.c, written by hand rather
 * than generated with `bpftool btf dump ... format c`: a generated header is
 * ~120,000 lines for one kernel build, while the probe touches seven structs.
 * Every struct carries preserve_access_index, so each field access becomes a
 * CO-RE relocation that libbpf resolves against the running kernel's BTF by
 * field *name* (anonymous unions in the real layout are fine): the offsets
 * below are never used as written. Enums are read with bpf_core_enum_value(),
 * so their values here are placeholders checked against the kernel at load.
 * Field names as in Linux 6.12 (include/linux/mm_types.h, memcontrol.h,
 * cgroup-defs.h, kernfs.h, sched.h), with the 7.3 variants as ___flavours.
 */
#ifndef TIERD_VMLINUX_H
#define TIERD_VMLINUX_H

typedef unsigned char __u8;
typedef short unsigned int __u16;
typedef unsigned int __u32;
typedef long long unsigned int __u64;
typedef signed char __s8;
typedef short int __s16;
typedef int __s32;
typedef long long int __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

/* uapi (include/uapi/linux/bpf.h): stable numbers. */
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};
enum { BPF_ANY = 0, BPF_NOEXIST = 1, BPF_EXIST = 2 };

#pragma clang attribute push (__attribute__((preserve_access_index)), apply_to = record)

struct kernfs_node {
	__u64 id;
};

struct cgroup {
	struct kernfs_node *kn;
};

struct cgroup_subsys_state {
	struct cgroup *cgroup;
};

struct mem_cgroup {
	struct cgroup_subsys_state css;
};

/* Kernels that charge LRU folios through an object cgroup (so that a dying
 * memcg's folios can be reparented; 7.3 has it) point memcg_data at one,
 * and their obj_cgroup has `is_root`, which the older one (kmem objects
 * only) lacks. */
struct obj_cgroup {
	struct mem_cgroup *memcg;
	bool is_root;
};

struct folio {
	unsigned long flags;
	unsigned long memcg_data;
	unsigned int _folio_nr_pages;
};

/* Later kernels (7.3 has it) wrap the page and folio flags in a struct,
 * include/linux/mm_types.h memdesc_flags_t: the same word, another type, so
 * the plain `flags` relocation fails there. A second flavour of struct
 * folio (libbpf drops the ___suffix when matching) reads it. */
typedef struct {
	unsigned long f;
} memdesc_flags_t;

struct folio___memdesc {
	memdesc_flags_t flags;
};

/* ... and name the folio's page count `_nr_pages` (6.12: `_folio_nr_pages`). */
struct folio___nr {
	unsigned int _nr_pages;
};

/* Where the folio's last CPU/PID (with memory tiering, on a lower-tier
 * folio: its NUMA-balancing scan time) lives when page flags have no room
 * for it (LAST_CPUPID_NOT_IN_PAGE_FLAGS); absent from the BTF otherwise. */
struct folio___cpupid {
	int _last_cpupid;
};

struct sched_entity {
	__u64 sum_exec_runtime;
};

struct task_struct {
	unsigned long nvcsw;
	unsigned long nivcsw;
	struct sched_entity se;
};

struct vm_fault;
struct vm_area_struct;

#pragma clang attribute pop

enum page_memcg_data_flags {
	MEMCG_DATA_OBJEXTS = 1,
	MEMCG_DATA_KMEM = 2,
	__NR_MEMCG_DATA_FLAGS = 4,
};

enum pageflags {
	PG_head = 6,
};

/* Zones per node: the width of the page-flags zone field
 * (include/linux/page-flags-layout.h ZONES_SHIFT). */
enum zone_type {
	__MAX_NR_ZONES = 5,
};

#endif
