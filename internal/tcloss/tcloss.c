//go:build ignore

// SPDX-License-Identifier: MIT OR GPL-2.0-only
/*
 * tcloss.c: random loss on a test bed's router, as a tc BPF classifier
 * (BPF_PROG_TYPE_SCHED_CLS, attached with tcx). Every packet that passes the
 * hook is dropped (TC_ACT_SHOT) with the probability Go sets, from the kernel's
 * PRNG (bpf_get_prandom_u32), and counted. Test tooling only: it stands in for
 * netem's loss, which this kernel does not have.
 */
/* No kernel headers (as bpf/steer.c): the types and UAPI values used. */
typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>

#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6

struct __sk_buff; /* the context: no field of it is read */

#define TC_ACT_OK 0
#define TC_ACT_SHOT 2

struct counters {
	__u64 passed;
	__u64 dropped;
};

/* threshold: a packet is dropped when bpf_get_prandom_u32() < threshold;
 * 0 never drops. Written by Go (index 0). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} loss_threshold SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} loss_counters SEC(".maps");

SEC("tc")
int tcloss(struct __sk_buff *skb)
{
	__u32 zero = 0;
	__u64 *threshold = bpf_map_lookup_elem(&loss_threshold, &zero);
	struct counters *c = bpf_map_lookup_elem(&loss_counters, &zero);

	if (!threshold || !c)
		return TC_ACT_OK;
	if (*threshold && (__u64)bpf_get_prandom_u32() < *threshold) {
		c->dropped++;
		return TC_ACT_SHOT;
	}
	c->passed++;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual MIT/GPL";
