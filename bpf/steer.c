// SPDX-License-Identifier: MIT OR GPL-2.0-only
//go:build ignore

/*
 * steer.c: the xdpndk XDP program.
 *
 * It parses Ethernet, up to two VLAN tags (802.1Q 0x8100 or 802.1ad 0x88a8),
 * IPv4 or IPv6 and UDP. A UDP datagram whose destination port equals
 * steer_port is "ours": it is redirected to the AF_XDP socket bound at the
 * receiving queue (XSKMAP key = ctx->rx_queue_index). Everything else goes
 * to the kernel stack untouched. Every verdict is counted per CPU.
 *
 * Verdict table (first matching row wins; "malformed" rows are checked in
 * parse order, so a packet is classified by its first bad header):
 *
 *   condition                                          action        counter
 *   -------------------------------------------------  ------------  -------------
 *   Ethernet header (14 bytes) not in linear data      XDP_PASS      malformed
 *   VLAN tag announced but its 4 bytes are missing     XDP_PASS      malformed
 *   a third VLAN tag                                   XDP_PASS      passed
 *   EtherType not IPv4 or IPv6 (ARP, LLDP, ...)        XDP_PASS      passed
 *   IPv4: header < 20 bytes, version != 4, IHL < 5,    XDP_PASS      malformed
 *         total length < IHL*4, total length larger
 *         than the frame after the L2 header
 *   IPv4: fragment (MF set or offset != 0)             XDP_PASS      passed
 *   IPv4: protocol not UDP                             XDP_PASS      passed
 *   IPv6: header < 40 bytes, version != 6,             XDP_PASS      malformed
 *         40 + payload length larger than the frame
 *   IPv6: payload length 0 (jumbogram)                 XDP_PASS      passed
 *   IPv6: extension header (hop-by-hop, routing,       XDP_PASS      malformed
 *         destination options) truncated or longer
 *         than the payload
 *   IPv6: more than 8 extension headers, or more       XDP_PASS      passed
 *         than 2048 bytes of them
 *   IPv6: fragment header, or next header not UDP      XDP_PASS      passed
 *   UDP: header (8 bytes) not in linear data or not    XDP_PASS      malformed
 *        within the IP payload, UDP length < 8 or
 *        larger than the IP payload
 *   UDP: destination port != steer_port                XDP_PASS      passed
 *   ours, no socket in xsks[rx_queue_index]            XDP_PASS      no_socket
 *   ours, fault injection fires                        XDP_DROP      fault_dropped
 *   ours, bpf_redirect_map fails (socket just left)    XDP_PASS      no_socket
 *   ours                                               XDP_REDIRECT  redirected,
 *                                                                    redirected_bytes
 *
 * A redirected datagram carries its arrival time in front of it (struct
 * arrival, XDP metadata).
 *
 * Checksums (IPv4 header, UDP) are not verified here; the receiver must.
 * Destination MAC and IP are not looked at either: the port alone selects.
 *
 * The program is self-contained: it defines the few UAPI constants and
 * header layouts it needs instead of including kernel headers, so the
 * object does not depend on the build host's linux-libc-dev version or
 * architecture (go generate output must be byte-identical everywhere).
 */

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
#include <bpf/bpf_endian.h>

/* UAPI values (include/uapi/linux/bpf.h); stable kernel ABI. */
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_XSKMAP 17

enum xdp_action {
	XDP_ABORTED = 0,
	XDP_DROP,
	XDP_PASS,
	XDP_TX,
	XDP_REDIRECT,
};

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

/* Wire layouts (IEEE 802.3, 802.1Q, RFC 791, RFC 8200, RFC 768). */
#define ETH_P_IPV4 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8

#define IPPROTO_HOPOPTS 0
#define IPPROTO_UDP 17
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_DSTOPTS 60

#define IPV4_MF_OFFSET_MASK 0x3FFF /* MF flag and fragment offset */

struct eth_hdr {
	__u8 dst[6];
	__u8 src[6];
	__be16 proto;
};

struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

struct ipv4_hdr {
	__u8 ver_ihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6_hdr {
	__be32 ver_tc_flow;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct ipv6_ext_hdr {
	__u8 nexthdr;
	__u8 len; /* in 8-byte units, not counting the first 8 bytes */
};

struct udp_hdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__u16 check;
};

#define MAX_VLAN_TAGS 2
#define MAX_IPV6_EXT_HDRS 8
#define MAX_IPV6_EXT_BYTES 2048

/*
 * Shared with Go (bpf2go generates steerCounters, steerFaultConfig,
 * steerPrngState from the BTF of these structs).
 */

/* Per-CPU verdict counters, one element. */
struct counters {
	__u64 redirected;
	__u64 redirected_bytes; /* full frame length, all fragments */
	__u64 passed;
	__u64 no_socket;
	__u64 malformed;
	__u64 fault_dropped;
};

/*
 * Arrival stamp, written in front of the packet as XDP metadata
 * (bpf_xdp_adjust_meta) for every datagram redirected to a socket; AF_XDP
 * delivers it in the frame, just before the data, in copy and zero-copy mode.
 * arrival_ns is CLOCK_MONOTONIC (bpf_ktime_get_ns) when the program ran;
 * check is arrival_ns ^ ARRIVAL_CHECK, so that the reader can tell a stamp
 * from bytes left in the headroom (it clears check once read). A driver
 * without metadata support gets no stamp: the packet goes unstamped.
 */
struct arrival {
	__u64 arrival_ns;
	__u64 check;
};

#define ARRIVAL_CHECK 0x786470206e64c0deULL

/*
 * Fault-injection configuration, one element, written by Go.
 * threshold: an "ours" packet is dropped when the top 32 bits of the next
 * PRNG output are < threshold; 0 never drops, 1<<32 always drops.
 * generation: bumped by Go on every change so the per-CPU PRNG reseeds
 * even when the seed is the same.
 */
struct fault_config {
	__u64 threshold;
	__u64 seed;
	__u64 generation;
};

/* Per-CPU PRNG (splitmix64) state and the config it was seeded from. */
struct prng_state {
	__u64 state;
	__u64 seed;
	__u64 generation;
};

/* Our UDP destination port in HOST byte order; set from Go before load. */
volatile const __u16 steer_port = 0;

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64); /* resized from Go to the queue count */
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fault_config);
} fault_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct prng_state);
} prng SEC(".maps");

enum class {
	CLASS_OTHER,     /* not ours: pass */
	CLASS_MALFORMED, /* bad or truncated header: pass */
	CLASS_OURS,      /* UDP to steer_port: steer */
};

static __always_inline enum class classify_udp(void *l4, void *data_end,
					       __u32 ip_payload)
{
	struct udp_hdr *udp = l4;
	__u32 udp_len;

	if ((void *)(udp + 1) > data_end)
		return CLASS_MALFORMED;
	if (ip_payload < sizeof(*udp))
		return CLASS_MALFORMED;
	udp_len = bpf_ntohs(udp->len);
	if (udp_len < sizeof(*udp) || udp_len > ip_payload)
		return CLASS_MALFORMED;
	if (steer_port == 0 || bpf_ntohs(udp->dest) != steer_port)
		return CLASS_OTHER;
	return CLASS_OURS;
}

/* avail: bytes of the frame from the IPv4 header on, fragments included. */
static __always_inline enum class classify_ipv4(void *l3, void *data_end,
						__u64 avail)
{
	struct ipv4_hdr *ip = l3;
	__u32 ihl, tot_len;

	if ((void *)(ip + 1) > data_end)
		return CLASS_MALFORMED;
	if ((ip->ver_ihl >> 4) != 4)
		return CLASS_MALFORMED;
	ihl = (ip->ver_ihl & 0x0F) * 4;
	if (ihl < sizeof(*ip))
		return CLASS_MALFORMED;
	tot_len = bpf_ntohs(ip->tot_len);
	if (tot_len < ihl || tot_len > avail)
		return CLASS_MALFORMED;
	if (ip->frag_off & bpf_htons(IPV4_MF_OFFSET_MASK))
		return CLASS_OTHER;
	if (ip->protocol != IPPROTO_UDP)
		return CLASS_OTHER;
	return classify_udp(l3 + ihl, data_end, tot_len - ihl);
}

/* avail: bytes of the frame from the IPv6 header on, fragments included. */
static __always_inline enum class classify_ipv6(void *l3, void *data_end,
						__u64 avail)
{
	struct ipv6_hdr *ip6 = l3;
	__u32 payload_len, ext_len = 0;
	__u8 nexthdr;
	int i;

	if ((void *)(ip6 + 1) > data_end)
		return CLASS_MALFORMED;
	if ((bpf_ntohl(ip6->ver_tc_flow) >> 28) != 6)
		return CLASS_MALFORMED;
	payload_len = bpf_ntohs(ip6->payload_len);
	if (payload_len == 0)
		return CLASS_OTHER; /* jumbogram (RFC 2675): never ours */
	if (sizeof(*ip6) + payload_len > avail)
		return CLASS_MALFORMED;
	nexthdr = ip6->nexthdr;

	for (i = 0; i < MAX_IPV6_EXT_HDRS; i++) {
		struct ipv6_ext_hdr *ext;

		if (nexthdr != IPPROTO_HOPOPTS && nexthdr != IPPROTO_ROUTING &&
		    nexthdr != IPPROTO_DSTOPTS)
			break;
		ext = l3 + sizeof(*ip6) + ext_len;
		if ((void *)(ext + 1) > data_end)
			return CLASS_MALFORMED;
		nexthdr = ext->nexthdr;
		ext_len += ((__u32)ext->len + 1) * 8;
		if (ext_len > payload_len)
			return CLASS_MALFORMED;
		if (ext_len > MAX_IPV6_EXT_BYTES)
			return CLASS_OTHER;
	}
	if (nexthdr != IPPROTO_UDP)
		return CLASS_OTHER; /* fragment, too many extensions, TCP, ICMPv6... */
	return classify_udp(l3 + sizeof(*ip6) + ext_len, data_end,
			    payload_len - ext_len);
}

static __always_inline enum class classify(struct xdp_md *ctx, __u64 *frame_len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	void *l3;
	__be16 proto;
	__u64 avail;
	int i;

	if ((void *)(eth + 1) > data_end)
		return CLASS_MALFORMED;
	proto = eth->proto;
	l3 = eth + 1;

#pragma unroll
	for (i = 0; i < MAX_VLAN_TAGS; i++) {
		struct vlan_tag *tag = l3;

		if (proto != bpf_htons(ETH_P_8021Q) &&
		    proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(tag + 1) > data_end)
			return CLASS_MALFORMED;
		proto = tag->proto;
		l3 = tag + 1;
	}
	if (proto != bpf_htons(ETH_P_IPV4) && proto != bpf_htons(ETH_P_IPV6))
		return CLASS_OTHER; /* includes a third VLAN tag */

	/* The linear part may end before the frame does (xdp.frags). */
	*frame_len = bpf_xdp_get_buff_len(ctx);
	avail = *frame_len - (__u64)(l3 - data);
	if (proto == bpf_htons(ETH_P_IPV4))
		return classify_ipv4(l3, data_end, avail);
	return classify_ipv6(l3, data_end, avail);
}

/* splitmix64 (Steele, Lea, Flood 2014): one 64-bit output per call. */
static __always_inline __u64 mix64(__u64 z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ULL

/* fault_drop reports whether fault injection drops this (our) packet. */
static __always_inline int fault_drop(void)
{
	struct fault_config *cfg;
	struct prng_state *st;
	__u64 threshold, seed, generation;
	__u32 zero = 0;

	cfg = bpf_map_lookup_elem(&fault_config, &zero);
	if (!cfg)
		return 0;
	threshold = cfg->threshold;
	if (threshold == 0)
		return 0;
	st = bpf_map_lookup_elem(&prng, &zero);
	if (!st)
		return 0;

	/*
	 * Go rewrites the whole config element while we may be reading it;
	 * comparing seed and generation both makes a torn read self-correct
	 * on the next packet.
	 */
	seed = cfg->seed;
	generation = cfg->generation;
	if (st->generation != generation || st->seed != seed) {
		__u64 cpu = bpf_get_smp_processor_id();

		/* Distinct, non-overlapping streams per CPU for one seed. */
		st->state = mix64(seed) ^ mix64((cpu + 1) * GOLDEN_GAMMA);
		st->seed = seed;
		st->generation = generation;
	}
	st->state += GOLDEN_GAMMA;
	return (mix64(st->state) >> 32) < threshold;
}

/* stamp writes the packet's arrival time in front of it (struct arrival). */
static __always_inline void stamp(struct xdp_md *ctx)
{
	struct arrival *a;
	void *data;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct arrival)) != 0)
		return;
	data = (void *)(long)ctx->data;
	a = (void *)(long)ctx->data_meta;
	if ((void *)(a + 1) > data)
		return;
	a->arrival_ns = bpf_ktime_get_ns();
	a->check = a->arrival_ns ^ ARRIVAL_CHECK;
}

SEC("xdp.frags")
int steer(struct xdp_md *ctx)
{
	struct counters *cnt;
	__u64 frame_len = 0;
	__u32 zero = 0, queue;
	long action;

	cnt = bpf_map_lookup_elem(&counters, &zero);
	if (!cnt)
		return XDP_PASS; /* cannot happen: array element 0 always exists */

	switch (classify(ctx, &frame_len)) {
	case CLASS_MALFORMED:
		cnt->malformed++;
		return XDP_PASS;
	case CLASS_OTHER:
		cnt->passed++;
		return XDP_PASS;
	case CLASS_OURS:
		break;
	}

	queue = ctx->rx_queue_index;
	if (!bpf_map_lookup_elem(&xsks, &queue)) {
		cnt->no_socket++;
		return XDP_PASS;
	}
	if (fault_drop()) {
		cnt->fault_dropped++;
		return XDP_DROP;
	}
	stamp(ctx);
	action = bpf_redirect_map(&xsks, queue, XDP_PASS);
	if (action != XDP_REDIRECT) {
		cnt->no_socket++;
		return XDP_PASS;
	}
	cnt->redirected++;
	cnt->redirected_bytes += frame_len;
	return XDP_REDIRECT;
}

char _license[] SEC("license") = "Dual MIT/GPL";
