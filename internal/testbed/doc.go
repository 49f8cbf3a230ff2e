// Package testbed builds two "hosts" on one Linux machine: two network namespaces joined by
// a veth pair, with IPv4 addresses from the benchmarking range 198.18.0.0/15 (RFC 2544) and
// IPv6 disabled, for privileged tests, the demo and the benchmarks.
//
//	 root namespace (untouched: nothing of the bed ever appears here)
//	┌──────────────────────────────┐        ┌──────────────────────────────┐
//	│ netns xdpndk-tb-<pid>-…-a    │  veth  │ netns xdpndk-tb-<pid>-…-b    │
//	│   lo (up)                    │        │   lo (up)                    │
//	│   xn<pid>-<n>a  198.18.0.1 ──┼────────┼── xn<pid>-<n>b  198.18.0.2   │
//	└──────────────────────────────┘        └──────────────────────────────┘
//	       Bed.A (Host)                             Bed.B (Host)
//
// With Options.Routed, a third namespace, the router R, sits between them: A and R share
// 198.18.1.0/24 on one veth pair, R and B share 198.18.2.0/24 on another, R forwards IPv4,
// and A and B each have one route to the other's subnet through R ([Bed.R], [Router]).
// [Bed.SetBottleneck] puts a rate limit (tc-tbf) on R's egress towards B. With
// Options.Path, R is a delay line instead of a kernel router (package delayline): a
// forwarder of this process adds a one-way delay, a rate and a drop-tail queue in both
// directions, to emulate paths of 10 µs to 10 ms; [Bed.PathStats] has its counters.
//
// [New] creates a [Bed] (the namespaces, the veth pairs created directly inside them,
// addresses, links up) and [Bed.Close] removes it; [NewT] does both for a test. [Host.Do]
// runs a function on an OS thread that has entered a host's namespace, so that the sockets,
// netlink handles and XDP attachments it creates belong to that host; [Host.Command] runs a
// program there. [Sweep] removes namespaces left behind by a process that died before it
// could clean up; New calls it.
//
// Namespaces and links are managed by running iproute2's ip(8): it is the tool an operator
// would use by hand to inspect or repair the bed, it creates /run/netns entries exactly as
// `ip netns` expects them, and it keeps this package free of netlink message details. Only
// entering a namespace ([Host.Do]) is done directly with setns(2).
//
// Everything here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); tests reach it through
// [NewT], which skips or fails through package privileged. docs/TESTBED.md describes the
// naming, the address plan and the cleanup rules.
package testbed
