//go:build linux

// Command ndkpeer runs NDK verbs (package ndk) between two hosts over AF_XDP: a server on
// one, tests and a guided tour of the verbs from the other, and checks of a host's setup.
//
//	ndkpeer serve     -i IFACE [--port N] [--stats[=INTERVAL]]      on host B
//	ndkpeer send-lat  -i IFACE [options] HOST                       on host A (and write-lat,
//	                                                                read-lat, send-bw, write-bw,
//	                                                                read-bw)
//	ndkpeer tour      -i IFACE HOST                                 every verb, step by step
//	ndkpeer stats     [-i IFACE] [--port N] [--json]                a running server's counters
//	ndkpeer doctor    -i IFACE                                      is this host ready?
//
// # Addresses
//
// Both sides open an adapter (ndk.Open) on their interface: the XDP steering program is
// attached to it, every RX queue of the interface gets an AF_XDP socket, all served by the
// adapter's one engine (or only queue --queue, with --steer ntuple|external saying how our
// port reaches it), and our UDP port
// (--port, default 4793, the same on both hosts) is taken from the kernel on that
// interface; every other packet still goes to the kernel. The server listens on the NDK
// service ServiceID (4800, --service), multiplexed on that UDP port; the client connects to
// HOST:4800 over it. One interface carries one xdpndk process at a time (one XDP program
// per interface): a client and a server need an interface each.
//
// # What travels in the private data
//
// A test opens -q QPs, each its own connection. The client's NdkConnect carries a
// proto.Request (32 bytes: the test, the largest message size, the inline size, how many
// receives the server keeps posted, the QP's index and count, a session number). The
// server checks it against its limits, allocates the test buffer (one per connection, the
// size of the largest message, from the adapter's UMEM or else pinned Go memory), registers
// it (remote read and write for Read and Write tests), posts the receives of Send tests and
// answers with NdkAccept carrying a proto.Reply (48 bytes: the buffer's address, length and
// remote token, and the server adapter's mode). The client reads it with
// NdkGetConnectionData: Writes go to and Reads come from that buffer. A server that cannot
// run the test answers with NdkReject carrying a proto.Refusal (a code and a one-line
// reason), which the client prints and exits with code 11. The tour's further exchanges are
// proto.TourMsg Sends. cmd/ndkpeer/internal/proto documents the layouts.
//
// # What the server does
//
// send-lat: every Send is echoed back with a Send of the same length (inline up to the
// request's inline size), and the receive is posted again. send-bw: receives are posted
// again as they complete. write-*, read-*: nothing but running the protocol (acks, Read
// responses). The server's polling loop (one goroutine on its own thread, ProgressInline by
// default) takes every connection's completions and spins while they keep coming; after 1 ms
// without any it arms the CQs and sleeps until a notification, and the adapter's own
// goroutine serves the engine meanwhile, as the adaptive engine does (connection requests
// and the acknowledgements of a client's Writes included). A connection whose peer sent
// nothing for --idle-timeout is disconnected (a client killed without disconnecting).
//
// # How the tests measure
//
// The client's loop polls its CQs (ProgressInline: GetResults runs the engine) on one
// thread. Latency tests keep one operation outstanding per QP and time each from its post to
// its completion: for send-lat, from the Send's post to the receive of the server's echo
// (a round trip, as bench/ndkbench's ping-pong); for write-lat and read-lat, from the post
// to the Write's or Read's completion (bench/ndkbench's latency figure). The first -w
// operations of each size are a warm-up and are not counted. Percentiles are nearest-rank
// over every sample. Bandwidth tests keep -t operations outstanding per QP. Without -t
// the warm-up keeps 128, fewer for large messages so that at most 1 MiB is outstanding
// (bench/ndkbench's 128 outstanding 64-byte Writes of its message rate and 16 outstanding
// 64 KiB Writes of its goodput); then the measured phase keeps enough to cover twice the
// path's bandwidth-delay product: the QPs' smoothed round trip after the warm-up times the
// interface's speed (/sys/class/net/IFACE/speed; 10 Gbit/s when it reports none), at most
// 64 MiB and 1024 operations per QP, never fewer than the warm-up's. 1 MiB outstanding
// over a 10 ms round trip cannot exceed 0.84 Gbit/s; on a short path nothing changes. The
// result's "outstanding" is the depth measured with. Bandwidth tests report payload bytes × 8 / time from the first measured post to the last
// completion (-n), or over the -D window (operations completed in it); Gbit/s is payload
// only, 10^9 bits. A result line is followed by the packets the client's QPs retransmitted,
// when there were any.
//
// # The tour
//
// tour connects with the tour test and walks the verbs, printing per step what it does, the
// NDK calls and the result: open the adapter, register memory, create a CQ (with a
// notification callback) and a QP, connect with private data, have the server bind a memory
// window (a Send; the server's NdkBind; its token comes back in a Send), Write into it,
// Read it back and compare, arm the CQ for solicited events and have the server answer with
// SEND_AND_SOLICIT_EVENT (the notification must fire), SendAndInvalidate the window (the
// server's receive must report the token invalidated), Read through the dead token
// (STATUS_ACCESS_VIOLATION is the expected result), and disconnect. It exits 1 at the first
// step that does not give its expected result.
//
// # Counters
//
// A server answers on the abstract unix socket @xdpndk/ndkpeer/IFACE/PORT with one JSON
// document of its counters (connections, tests, QP, engine, link, XDP program and AF_XDP
// socket counters); abstract socket names belong to the network namespace, so `ndkpeer
// stats` run in the server's namespace finds it, and `ndkpeer serve` uses it to name the
// process that already holds an interface.
//
// # Exit codes
//
//	0   success
//	1   a test, a tour step or a doctor check failed; an unexpected error
//	2   usage: bad flags or arguments
//	3   not root, or a capability missing (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF)
//	4   no such interface
//	5   RLIMIT_MEMLOCK too low for the UMEM (and no CAP_IPC_LOCK)
//	6   the interface is taken by xdpndk already (ndkpeer serve or another xdpndk
//	    process: our XDP program attached, or the queue's AF_XDP socket busy)
//	7   another XDP program (not xdpndk's) is attached to the interface
//	8   the peer is unreachable: name not resolved, no route, no ARP answer
//	    (STATUS_HOST_UNREACHABLE, STATUS_NETWORK_UNREACHABLE)
//	9   nothing listens at the peer (STATUS_CONNECTION_REFUSED); stats: no server found
//	10  the peer is silent: no answer in time (STATUS_IO_TIMEOUT)
//	11  the server refused the test (its limits, busy, out of memory)
//	130 interrupted (SIGINT or SIGTERM) before a client finished
package main

import (
	"fmt"
	"os"
)

// ServiceID is the NDK service (the port of an NDK address) ndkpeer serve listens on,
// multiplexed on the adapter's UDP port.
const ServiceID = 4800

func main() {
	os.Exit(run(os.Args[1:]))
}

// commands maps a command name to its function; each returns the process exit code.
var commands = map[string]func(args []string) int{
	"serve":     serveCmd,
	"send-lat":  clientCmd("send-lat"),
	"write-lat": clientCmd("write-lat"),
	"read-lat":  clientCmd("read-lat"),
	"send-bw":   clientCmd("send-bw"),
	"write-bw":  clientCmd("write-bw"),
	"read-bw":   clientCmd("read-bw"),
	"tour":      tourCmd,
	"stats":     statsCmd,
	"doctor":    doctorCmd,
}

const usageText = `ndkpeer: NDK verbs between two hosts over AF_XDP

usage:
  ndkpeer serve   -i IFACE [--port N] [--stats[=INTERVAL]] [serve options]
  ndkpeer send-lat|write-lat|read-lat -i IFACE [-s SIZE | -a] [-n ITERS | -D SECONDS] [-q QPS] [--inline] [--json] HOST
  ndkpeer send-bw|write-bw|read-bw    -i IFACE [-s SIZE | -a] [-n ITERS | -D SECONDS] [-q QPS] [--inline] [--json] HOST
  ndkpeer tour    -i IFACE [--json] HOST
  ndkpeer stats   [-i IFACE] [--port N] [--json]
  ndkpeer doctor  -i IFACE [--port N] [--json]

The server listens on NDK service 4800 on UDP port 4793 of IFACE (--service, --port):
open UDP 4793 between the hosts. 'ndkpeer COMMAND -h' lists a command's options;
'go doc ./cmd/ndkpeer' documents the protocol, the measurements and the exit codes.
`

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Print(usageText)
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "ndkpeer: unknown command %q\n\n%s", args[0], usageText)
		return exitUsage
	}
	return cmd(args[1:])
}
