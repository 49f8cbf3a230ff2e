//go:build linux

// Command ndkpeer runs NDK verbs (package ndk) between two hosts over AF_XDP: a server on
// one, tests and a guided tour of the verbs from the other, and checks of a host's setup.
//
//	ndkpeer serve     -i IFACE [--port N] [--stats[=INTERVAL]]      on host B
//	ndkpeer send-lat  -i IFACE [options] HOST                       on host A (and write-lat,
//	                                                                read-lat, send-bw, write-bw,
//	                                                                read-bw)
//	ndkpeer tour      -i IFACE HOST                                 every verb, step by step
//	ndkpeer stats     [-i IFACE] [--port N] [--qp] [--json]         a running server's counters
//	ndkpeer doctor    -i IFACE [--cpus LIST] [--busy-poll D]        is this host ready, and tuned?
//	                                                                (docs/TUNING.md)
//	ndkpeer --version                                               module, VCS revision, Go
//
// Every command that opens an adapter takes --pcap FILE (with --pcap-snaplen and
// --pcap-buffer): every datagram its engines send and receive is written to FILE in
// pcapng, for Wireshark with contrib/wireshark/xdpndk.lua (docs/CAPTURE.md).
//
// The tests take perftest's options (ib_send_lat, ib_write_bw, ...): --cpu-util, -e, -b,
// --rate and -D 0, described under "Options as in perftest", and --load, latency under a
// stream of Writes or Reads.
//
// # Addresses
//
// Both sides open an adapter (ndk.Open) on their interface: the XDP steering program is
// attached to it, every RX queue of the interface gets an AF_XDP socket, all served by the
// adapter's one engine, or shared out among --engines N (or only queue --queue, with
// --steer ntuple|external saying how our port reaches it), and our UDP port
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
// The protocol has two versions. A run that uses none of -e, -b and --cpu-util sends a
// version 1 Request (the 32 bytes above), which servers of either version take. With them
// the Request is of version 2 (64 bytes: also the flags, the depth and, for -b with Writes
// and Reads, the client's buffer, address, length and token) and, with --cpu-util or -b,
// the run opens one more connection, its control connection (proto.KindControl), over
// which proto.CtlMsg Sends open the measured window (CtlStart), sample it once a second
// (CtlSample) and close it (CtlStop); the server answers each with its counters. A server
// answers in the version of the request; one of version 1 refuses a version 2 request
// (RefuseVersion, which names its version), and the client says which options need a
// newer server (exit code 11). ndkpeer --version prints the versions it speaks.
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
// and the acknowledgements of a client's Writes included). While a client runs with -e the
// loop sleeps as soon as a round finds nothing. A connection whose peer sent nothing for
// --idle-timeout is disconnected (a client killed without disconnecting).
//
// A control connection's CtlStart finds the run's test connections by their session
// number, notes the server process's CPU time (getrusage RUSAGE_SELF: every thread) and,
// with -b, starts the same test towards the client on each: Sends into receives the client
// keeps posted, Writes into or Reads from the client's buffer, the depth the client keeps,
// paced at --rate. CtlSample answers the counters so far; CtlStop takes them at its
// arrival, stops the server's direction and answers once what it posted has completed.
//
// # How the tests measure
//
// The client's loop polls its CQs (ProgressInline: polling runs the engine) on one thread,
// or with -e sleeps on their notifications. Latency tests keep one operation outstanding
// per QP and time each from its post to its completion: for send-lat, from the Send's post
// to the receive of the server's echo (a round trip, as bench/ndkbench's ping-pong; the
// text columns rtt_*, JSON latency_timed "round_trip"); for write-lat and read-lat, from
// the post to the Write's or Read's completion (bench/ndkbench's latency figure; op_*,
// "post_to_completion"; a Write completes when the server acknowledged it, so it too spans
// the path both ways). Beside them, t_typical and t_avg (JSON perftest_t_*) give the same
// figures in perftest's convention, so that the two can be compared: ib_send_lat and
// ib_write_lat report half of a ping-pong's round trip (× 0.5), ib_read_lat the whole Read
// (× 1); t_typical is the median, t_avg the mean. The first -w operations of each size are
// a warm-up and are not counted. Percentiles are nearest-rank over every sample in -n runs;
// -D runs, whatever their length, keep their latencies in a log-linear histogram of fixed
// size (cmd/ndkpeer/internal/hist: exact below 256 ns, 128 buckets per power of two above)
// whose percentiles are within 1/256 (0.4%) of nearest-rank, with min, max and mean exact.
// Bandwidth tests keep -t operations outstanding per QP. Without -t the warm-up keeps 128,
// fewer for large messages so that at most 1 MiB is outstanding (bench/ndkbench's 128
// outstanding 64-byte Writes of its message rate and 16 outstanding 64 KiB Writes of its
// goodput); then the measured phase keeps enough to cover twice the path's bandwidth-delay
// product: the QPs' smoothed round trip after the warm-up times the interface's speed
// (/sys/class/net/IFACE/speed; 10 Gbit/s when it reports none), at most 64 MiB and 1024
// operations per QP, never fewer than the warm-up's. 1 MiB outstanding over a 10 ms round
// trip cannot exceed 0.84 Gbit/s; on a short path nothing changes. The result's
// "outstanding" is the depth measured with. Bandwidth tests report payload bytes × 8 / time
// from the first measured post to the last completion (-n), or over the -D window
// (operations completed in it); Gbit/s is payload only, 10^9 bits. A result line is followed
// by the packets the client's QPs retransmitted, when there were any.
//
// # Options as in perftest
//
//	--cpu-util        CPU time of both sides over the measured window: the client's own
//	                  getrusage (RUSAGE_SELF, user + sys: every thread of the process) and the
//	                  server's, which it measures from CtlStart to CtlStop and reports over
//	                  the control connection; per message in µs for each side and both, and
//	                  as a share of a core (CPU seconds per second). A message is an operation
//	                  counted (a send-lat iteration, one round trip, is one; with -b, both
//	                  directions'). Each figure says whether its side polls: a polling side
//	                  spends its whole core whatever the rate (the client without -e; the
//	                  server, whose loop spins while traffic comes, unless the client runs
//	                  with -e).
//	-e, --events      wait for completions on notifications instead of busy polling, as
//	                  perftest's event mode: the loop arms its CQs (NdkArmCq) and sleeps in
//	                  epoll on their FDs (ndk.CQ.FD; the epoll set waits in Go's poller, so
//	                  the adapter's goroutine, which serves the engine while the loop
//	                  sleeps, gets the CPU at once), with a timer for the next paced post or
//	                  interval. The Request tells the server, whose loop then sleeps as soon
//	                  as it finds nothing to do. The header says which mode runs, and the
//	                  result how often the loop slept. The adapter's goroutine still polls
//	                  for ndk's Options.Spin (50 µs) after each burst of work before it
//	                  sleeps too, so at rates of tens of thousands of messages a second an
//	                  -e side still spends most of a core (--cpu-util shows it); below that
//	                  it sleeps between messages.
//	-b, --bidirectional
//	                  bandwidth tests: both sides send at once. The server runs the same test
//	                  towards the client over the client's measured window, with the same
//	                  size, depth and rate, and counts its own direction; the result has a
//	                  line per direction and their sum (JSON reverse_* and sum_*).
//	--rate N          hold N messages per second over all QPs (K and M suffixes: 1000s;
//	                  with -b, each direction): posts are paced, the k-th due at the window's
//	                  start plus k/N s; a poster that falls behind catches up back to back on
//	                  up to a second of missed posts. Latency tests then measure latency
//	                  under that load; bandwidth tests are capped at it. The achieved rate
//	                  is reported (msg_per_s; in text under the result).
//	-D 0, --infinite  run until SIGINT or SIGTERM with a line per second, then print the
//	                  summary and exit 0 (any other run those signals end exits 130).
//	                  Latency goes into the fixed histogram: the run's memory does not grow
//	                  with its length; with --json each interval is written as it ends, one
//	                  JSON object a line, and the summary document follows on one line.
//
// One option of ours, for latency under load:
//
//	--load OP:SIZE    latency tests: while each size is measured (its warm-up included),
//	                  stream OP (write or read) of SIZE bytes (K, M suffixes) on one more
//	                  QP of the same adapter, a connection of its own to the same server,
//	                  which runs it as the write-bw or read-bw test; -t deep (without -t,
//	                  as a bandwidth test of that size: at most 1 MiB outstanding), not
//	                  paced. The same loop polls (or with -e waits on) both, so the
//	                  latency includes what taking the stream's completions costs it. The
//	                  result reports the stream over the measured window (JSON load_*;
//	                  in text under the result). With --cpu-util the CPU covers both and is
//	                  divided by the latency test's operations.
//
// A run that cannot hold a low rate on a busy machine is usually descheduled: one
// operation outstanding cannot catch up on round trips of milliseconds. Two polling
// processes on a machine of two CPUs shared with other work are the typical case; -e lets
// them sleep instead.
//
// # JSON
//
// --json prints one document (with -D 0: one JSON object a line, see above). Its fields:
//
//	schema_version     2 (this layout; 1 had no such field)
//	record             "result" (and "interval" for a streamed interval line)
//	command, op        the test ("write-bw") and its verb ("Write")
//	measure            what the figures are, in words
//	latency_timed      "round_trip" (send-lat), "post_to_completion" (write-lat, read-lat),
//	                   "" (bandwidth tests)
//	completions        "polling" or "events" (-e)
//	ndkpeer_version    the client's module version (ndkpeer --version has the rest)
//	protocol           the protocol version the server answered in (1 or 2)
//	local, server      each side's mode: xdp, zero_copy, multi_buffer, need_wakeup,
//	                   busy_poll, mtu, max_payload, queues_served, queues, progress (local
//	                   also pages, interface, address, notes)
//	server_address, service
//	params             qps, tx_depth, iterations, duration_s, inline_size, sizes, infinite,
//	                   rate_msg_per_s (0: unpaced), bidirectional, cpu_util, events,
//	                   load ("write:64K", "" without --load), percentiles ("exact", "histogram", "" for bandwidth tests),
//	                   percentile_relative_error
//	latency[]          per size: bytes, iterations, seconds (the window), msg_per_s;
//	                   min_us, p50_us, p99_us, p99_9_us, max_us, mean_us (ndkpeer's measure,
//	                   as latency_timed says); perftest_factor (0.5 or 1) and perftest_t_min_us,
//	                   perftest_t_typical_us (median), perftest_t_avg_us (mean),
//	                   perftest_t_p99_us, perftest_t_p99_9_us, perftest_t_max_us;
//	                   retransmits (packets), retransmit_causes; cpu; load_op ("Write", "Read"),
//	                   load_bytes, load_outstanding, load_iterations, load_gbit_per_s,
//	                   load_msg_per_s (--load's stream over the window; "" and 0 without)
//	bandwidth[]        per size: bytes, iterations, seconds, gbit_per_s (10^9 bit/s of
//	                   payload), mmsg_per_s (10^6 messages/s), msg_per_s, outstanding (per
//	                   QP); reverse_iterations, reverse_seconds, reverse_gbit_per_s,
//	                   reverse_mmsg_per_s (-b: the server's direction as the server counted
//	                   it over its window; 0 without -b); sum_gbit_per_s, sum_mmsg_per_s (both
//	                   directions; the client's alone without -b); retransmits,
//	                   retransmit_causes; cpu
//	retransmit_causes  the client's QPs' retransmits by cause (packets): loss (loss
//	                   detection), timer (retransmission timeouts), rnr (after an RNR wait),
//	                   tail_probes; and timeouts (expiries), spurious_timeouts (undone: the
//	                   original had arrived), needless_probes (probes of packets that had
//	                   arrived)
//	cpu                measured (false without --cpu-util: then every figure is 0), messages,
//	                   client_us_per_msg, server_us_per_msg, both_us_per_msg (µs of CPU per
//	                   message), client_cores, server_cores, both_cores (CPU s per s),
//	                   client_user_s, client_sys_s, server_user_s, server_sys_s (CPU s),
//	                   client_polls, server_polls
//	intervals[]        -D runs, one per second: bytes, start_s, end_s, iterations,
//	                   msg_per_s, gbit_per_s, mmsg_per_s; p50_us, p99_us, max_us,
//	                   perftest_t_typical_us (latency tests); reverse_iterations,
//	                   reverse_gbit_per_s, reverse_mmsg_per_s, sum_gbit_per_s, sum_mmsg_per_s;
//	                   cpu. Every field is always present: 0 when nothing completed in the
//	                   interval or the run does not measure it. [] without -D.
//	intervals_streamed true when a -D 0 run wrote its intervals as lines before
//
// A failed run's document is {"command", "error", "exit_code"}.
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
// # Counters, metrics and the log
//
// A server answers on the abstract unix socket @xdpndk/ndkpeer/IFACE/PORT with one JSON
// document of its counters (schema_version 2: its connections and tests, and the adapter's
// counters as ndk.AdapterStats: engines, every queue with its link and AF_XDP socket, the
// XDP program, next hops, memory, the QP totals; and every open QP as ndk.QPStats);
// abstract socket names belong to the network namespace, so `ndkpeer stats` run in the
// server's namespace finds it (--qp also lists the open QPs), and `ndkpeer serve` uses it
// to name the process that already holds an interface. serve --metrics ADDR serves the
// same counters to Prometheus on http://ADDR/metrics (package promndk; a port alone is on
// 127.0.0.1). serve's output is a log, one record a line with its time (RFC 3339, to the
// millisecond) and level (--log-level, --log-format text|json): connections accepted and
// closed at info, refusals, failures and idle timeouts at warn, control commands at
// debug, and the adapter's own events. docs/OPERATIONS.md describes it all.
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
  ndkpeer send-lat|write-lat|read-lat -i IFACE [-s SIZE | -a] [-n ITERS | -D SECONDS | -D 0] [-q QPS] [--inline]
                                      [-e] [--rate MSGS_PER_S] [--cpu-util] [--json] HOST
  ndkpeer send-bw|write-bw|read-bw    -i IFACE [-s SIZE | -a] [-n ITERS | -D SECONDS | -D 0] [-q QPS] [--inline]
                                      [-e] [-b] [--rate MSGS_PER_S] [--cpu-util] [--json] HOST
  ndkpeer tour    -i IFACE [--json] HOST
  ndkpeer stats   [-i IFACE] [--port N] [--qp] [--json]
  ndkpeer doctor  -i IFACE [--port N] [--queue Q] [--cpus LIST] [--busy-poll D] [--json]

  ndkpeer --version

As perftest: --cpu-util reports both sides' CPU per message and as cores, -e waits on
completion notifications instead of polling, -b (bandwidth tests) sends both ways at once,
--rate holds a message rate, -D 0 (--infinite) runs until Ctrl-C with a line per second;
--load write:64K (latency tests) streams 64 KiB Writes on one more QP meanwhile.
Latency columns say what they time: send-lat's rtt_* are round trips, write-lat's and
read-lat's op_* one operation's post to completion; t_typical and t_avg beside them follow
perftest's convention (ib_send_lat and ib_write_lat report half, ib_read_lat the whole).

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
	case "--version", "-version", "version":
		fmt.Println(readVersion())
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "ndkpeer: unknown command %q\n\n%s", args[0], usageText)
		return exitUsage
	}
	return cmd(args[1:])
}
