// Package tools runs the tools users compare a transport with — qperf, iperf3, sockperf
// and libfabric's fi_pingpong — between host A (client) and host B (server) of an
// internal/testbed bed, parses what each tool prints into typed results, and measures
// what both processes cost in CPU.
//
// # What each tool measures and how it is called
//
// Every runner starts the server in B (Host.Command: `ip netns exec NS tool ...`, which
// execs the tool, so the process waited for is the tool itself), waits until the server's
// socket exists in B's namespace, runs the client in A, then stops the server. The
// addresses are the bed's (198.18.0.0/15); each server listens or binds in B's namespace,
// which has no address outside the bed. Ports are fixed (QperfPort, QperfDataPort,
// Iperf3Port, SockperfPort, FabricPort). Durations are whole seconds (the tools take
// integers; qperf runs forever with -t 0.5).
//
//   - qperf (RunQperfLat, RunQperfBW). Server: `qperf -lp 19765` (one forked process per
//     test). Client: `qperf B -lp 19765 -ip 19766 -t S -vv -uu -e 9 -m SIZE TEST quit`.
//     Options must come before the test they apply to: qperf applies an option to the
//     tests named after it, and ignores -m written after the last test. "quit" makes the
//     server exit. tcp_lat and udp_lat are a ping-pong of SIZE-byte messages: qperf's
//     latency is HALF the mean round trip (QperfLat.LatencyUS; RTTUS is twice it), its
//     msg_rate counts both directions. tcp_bw and udp_bw stream SIZE-byte messages from A
//     to B: bandwidth and message rate at the receiver, send and receive counts. -vv adds
//     qperf's CPU report (cpus_used and its user, intr and kernel parts, cpu_time,
//     send_cost/recv_cost): it is read from the aggregate line of /proc/stat, so it is
//     the whole machine's CPU, the same figure for both sides here, including everything
//     else the machine ran. qperf leaves out a part that is zero (no cpus_user line when
//     the machine spent no user time over the test): it reads as 0.
//   - iperf3 (RunIperf3): bulk TCP with CUBIC. Server: `iperf3 -s -1 -J -B B -p 5201`.
//     Client: `iperf3 -c B -B A -p 5201 -t S -J -C cubic -l SIZE -P N`. The client's JSON
//     report is parsed: end.sum_sent and end.sum_received (bytes, seconds, bits per
//     second, retransmits), the congestion control of both ends, and iperf3's CPU report
//     (cpu_utilization_percent: each process's own getrusage over the test's wall time).
//     A report with an "error" member is an error even when iperf3 exited 0.
//   - sockperf (RunSockperfPingPong, RunSockperfThroughput), UDP. Server: `sockperf server
//     -i B -p 11111`, stopped with SIGINT once the client is done (it then prints how many
//     messages it handled). Client: `sockperf ping-pong|throughput -i B -p 11111
//     --client_ip A -m SIZE -t S`. ping-pong reports the latency distribution over its
//     "valid duration" (after a 400 ms warm-up, before a cool-down): average, standard
//     deviation, minimum, percentiles 25 to 99.999, maximum — each HALF the round trip
//     (SockperfPingPong.Latency; RTT holds them doubled). throughput reports what the
//     client sent (messages, rate, MBps); what arrived is the server's count. With
//     polling, both sides get --nonblocked: sockperf 3.7 then spins on recvfrom of a
//     non-blocking socket (both processes use a whole CPU each while they run). Its other
//     polling option, --lls (SO_BUSY_POLL), busy-polls the device's NAPI context, which a
//     veth without XDP or GRO does not have: it changed nothing here and is not used.
//     --recv_looping_num only batches receives and needs --nonblocked; -F needs a feed
//     file.
//   - fi_pingpong (RunFabricPingPong), libfabric's ping-pong (Debian's libfabric-bin).
//     Server: `fi_pingpong -B 47592 -p PROV -e EP -I N -S SIZE`. Client: `fi_pingpong -P
//     47592 -p PROV -e EP -I N -S SIZE B`. This fi_pingpong has no source-address option
//     (-s); the client's address is A's only one. Both sides print one table row; usec/xfer
//     is the mean one-way transfer time, HALF the round trip (FabricPingPong.LatencyUS;
//     RTTUS is twice it); sizes and counts are printed rounded (64k, 2k). Both processes
//     poll their completion queue. Providers (Fabrics): tcp (msg and its own rdm),
//     tcp;ofi_rxm (rdm), udp;ofi_rxd (rdm), udp (dgram, at most FabricUDPMaxSize bytes:
//     larger sizes are refused with fi_getinfo -61), sockets (msg, rdm: it works, but its
//     progress thread and the polling main thread of both processes share 2 vCPUs here,
//     and a transfer takes milliseconds). The other fabtests (fi_rma_bw, fi_msg_bw,
//     fi_rdm_pingpong, ...) are not packaged by Debian (FabricUnavailable), so there is
//     no RMA or streaming-message bandwidth from libfabric; FabricSupport says which
//     combinations cannot run, and RunFabricPingPong returns those with Unsupported set and
//     an error wrapping ErrUnsupported.
//
// ToolVersions reports each tool's version (and libfabric's providers) for a results
// header.
//
// # CPU
//
// Every result embeds Run: the command lines, both outputs (kept for failure messages,
// not written to JSON), and Usage: the user and system CPU time of the client and of the
// server from their rusage at exit (os.ProcessState.SysUsage: wait4 on the tool's own
// process, which includes the children it waited for, such as qperf's per-test server
// process), each process's wall time from start to exit, and the messages delivered
// (each result says from which of the tool's figures). Usage.PerMessageUS is the CPU of
// both processes per message, Usage.Cores the share of a core each used, added. The CPU
// covers each process's whole life, start-up included, and for the server the short time
// before the client started and after it ended (a spinning server spins then too). Where
// the tool's own idle phases would distort that, Usage.Window holds the CPU of both
// processes during the tool's test phase only, read from /proc/PID/stat when the client
// prints the lines that open and close it: sockperf's client idles about 2 s after its
// warm-up messages, while a polling server spins, so its lifetime CPU per message is
// several times the test's (Window.PerMessageUS, Window.Cores). fi_pingpong prints
// nothing until the end; its processes spend about 0.1 s of CPU each starting libfabric
// (measured here), so its CPU per message means something only over many iterations
// (a few seconds of test). qperf and iperf3 live about as long as their test.
// The kernel here (tick-based CPU accounting, no IRQ time accounting) charges softirq work
// to whichever process was running: on a veth pair the receiving side's network stack
// mostly runs in the sender's system call, so a sender's system time includes much of
// the receiver's kernel work and the split between client and server says little; their
// sum is the figure to compare. The user/system split is sampled at each tick (250 Hz);
// their total follows the scheduler's exact run time.
//
// # Bounds and cleanup
//
// Each run has a deadline (the duration plus 30 s; FabricLimit for fi_pingpong) under the
// caller's context. The processes run in their own process group; on the deadline, an
// error, or a server that does not stop within 5 s of the client, the group is killed, and
// both processes have exited when a runner returns. A failed run's error is a *RunError
// with both command lines and the end of both outputs; a parser never returns a zero
// figure for a missing one.
//
// Runs need root (namespaces); on other systems than Linux the runners return
// ErrNotSupported. The parsers work anywhere; their tests use the outputs in testdata,
// captured from these tools on this project's bed.
package tools
