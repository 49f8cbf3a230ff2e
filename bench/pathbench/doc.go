// Package pathbench measures the congestion control and loss recovery of the ndk verbs on
// real paths between network namespaces: a routed test bed whose router limits the rate
// towards host B with tc tbf (the bottleneck) and can drop packets at random with a tc BPF
// classifier (internal/tcloss), and the plain two-host bed whose XDP programs drop our
// datagrams at random in both directions (bpf.Program.SetFaultDrop).
//
// Every scenario drives 64 KiB RDMA Writes from host A to host B through package ndk over
// AF_XDP, in process, and reports figures and goals (bench/README.md, "bench: real paths"):
//
//   - single: one QP fills the bottleneck (goodput / rate >= 0.9);
//   - two: two QPs, the second started a second after the first, share it (Jain's fairness
//     index >= 0.95 over the second half of the window);
//   - tcp: one QP and one kernel TCP flow (iperf3) share it (each >= 0.25 of the rate);
//   - loss: the router drops 1% at random in both directions (goodput >= 0.7 x lossless);
//   - xdp: on the plain bed the XDP programs drop 1% and 10% in both directions (goodput >=
//     0.7 x and 0.3 x lossless; fewer than 10% of the retransmissions caused by the
//     retransmission timer).
//
// The engine is measured as it is: nothing here configures its congestion controller.
// Every run is bounded in time and count; every bed, XDP program and tc program it creates
// is removed when it returns, also on failure or cancellation.
package pathbench
