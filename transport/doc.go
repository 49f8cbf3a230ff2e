// Package transport is xdpndk's protocol engine: the reliable, RDMA-like transport that NDK
// verbs ride on, and the Link interface it runs on. docs/PROTOCOL.md specifies the wire
// protocol; this package is its implementation.
//
//	application goroutines                       engine goroutine (one per Link)
//	  QP.PostSend / PostReceive ──SPSC rings──▶  Engine.Poll / Run
//	  Engine.Connect, Listener, ConnRequest      ├─ Receive a batch → wire.Parse → QP or CM
//	                                             │    checks: QPN, source, cookie, PSN window
//	                                             │    places payload out of order (receives,
//	                                             │    remote memory via MemoryResolver)
//	                                             ├─ per QP: posted work, timers (RTO, RACK,
//	                                             │    RNR, credits), acks (SACK, credits)
//	                                             ├─ transmit new packets within the congestion
//	                                             │    window, retransmit exactly what is lost
//	  CompletionSink.Complete ◀───────────────── └─ completions in posting order per queue
//	                                                  Link.Send (batched)
//	Link: xdp.Link (AF_XDP, production) or transport/simlink (in-memory, tests and bench)
//
// Each direction of a connection is one reliable stream of PSNs (ack.SentHistory and
// ack.ReceiveTracker), paced by a congestion.Controller (Swift by default). Time is read
// through Config.Now and passed down as an argument, so tests run whole scenarios in virtual
// time over simlink. Posting never blocks and never allocates; neither does the engine in
// steady state.
//
// A Link moves UDP datagrams only: it frames them in Ethernet/IP/UDP (or whatever its medium
// needs) below this interface, so the engine sees payload bytes and peer addresses and cannot
// tell one Link from another. Package transport never imports xdp or bpf.
package transport
