// Package transport is xdpndk's protocol engine: the reliable, RDMA-like transport that NDK
// verbs ride on, and the Link interface it runs on. docs/PROTOCOL.md specifies the wire
// protocol; this package is its implementation.
//
//	application goroutines                       engine goroutine (one per Link)
//	  QP.PostSend / PostReceive ──SPSC rings──▶  Engine.Poll / Run
//	  Engine.Connect, Listener, ConnRequest      ├─ Receive a batch → wire.Parse → QP or CM
//	                                             │    checks: QPN, source, cookie, PSN window
//	                                             ├─ CM (cmState): handshake, disconnect, tables
//	                                             ├─ per QP, its coordinator runs its parts:
//	                                             │    requester  our work requests → packets
//	                                             │    responder  the peer's Sends, Writes, Reads
//	                                             │    sender     our stream: in flight, RTO,
//	                                             │               loss, RNR, window, pacing
//	                                             │    receiver   the peer's stream: acks, SACK,
//	                                             │               NAKs, credits, piggyback
//	                                             ├─ conn → txBatch: encode, CRC, Link.Send
//	  CompletionSink.Complete ◀───────────────── └─ completions in posting order per queue
//	Link: xdp.Link (AF_XDP, production) or transport/simlink (in-memory, tests and bench)
//
// A QP (qp.go, qp_flow.go) is the one dispatcher of its parts: the posting API, its state,
// its counters, and each engine round the order in which its parts run (poll), what
// arrived for them (input, onAck), what leaves (transmit). The parts own their state, take
// events and return what should happen; none holds a pointer to the QP or to another part
// (the requester and the responder build their packets through conn, the way out), so none
// calls up, and nothing is reset while one of their methods runs:
//
//   - sender (sender.go) is the reliability of our stream of PSNs: ack.SentHistory,
//     ack.RTO, the congestion.Controller, the retransmission list, the RNR wait and the Read
//     probe. It decides whether a packet may leave (CanSend: window, cwnd, pacing), what to
//     retransmit (OnAck, DetectLoss, OnNak, OnTimer) and when to give up: a failure it
//     returns, a Read probe it asks for (ProbeRead). Every packet it records carries its
//     owner as a value (owner.go: which work request or read job, and the payload's
//     offset), which it hands back on acknowledgement, loss and timeout.
//   - receiver (receiver.go) is the reliability of the peer's stream: ack.ReceiveTracker,
//     when an acknowledgement is due (AckDue), the acknowledgement a data packet may carry
//     (carry), the credits advertised (the QP passes the limit) and the NAK waiting.
//   - requester (requester.go) takes our work requests from the send queue to their
//     completion: admission (credits, ORD, fences), packets (startNext, then sent once the
//     sender recorded the PSN), Read responses placed, completions in posting order (pop).
//   - responder (responder.go) serves the peer: posted receives (or an SRQ's), Send and
//     Write placement through the MemoryResolver (a verdict per packet: placed, the NAK,
//     the failure), read jobs answered in our stream, receive completions in MSN order.
//   - conn (conn.go) is the connection as packets need it (addresses, cookie, MSS) and the
//     way out through the engine's txBatch (txbatch.go); it lets the first data packet with
//     room carry the acknowledgement the QP offers.
//
// Beside them the QP keeps its keepalive (keepalive.go: when the peer was last heard, when
// to probe it, when its silence fails the QP) and the cause of its failure (cause.go,
// QP.Cause; a part's decision to end the connection is a failure value the QP acts on).
// Every liveness budget is a duration (Config.RetryTimeout, RNRTimeout, KeepAlive,
// ConnectTimeout; per QP in QPConfig), and a timer the engine reaches late (it was not
// polled) retransmits or probes before it fails anything, so this host's own stalls never
// count as the peer's silence.
//
// The engine and the connection manager reach a QP's parts only through the QP (setup,
// established, match, close, zcDone). Time is read through Config.Now and passed down as an
// argument, so the parts are tested event by event and whole scenarios run in virtual time
// over simlink. Posting never blocks and never allocates; neither does the engine in
// steady state.
//
// Connection management is split by concept: the state machine (cm.go: tables, the
// retransmission schedule from Config.CMTimeout doubling to 500 ms, bounded by each
// operation's timeout), the passive side (cm_listen.go), the active side and QP setup
// (cm_connect.go), graceful disconnect (cm_disconnect.go).
//
// A Link moves UDP datagrams only: it frames them in Ethernet/IP/UDP (or whatever its medium
// needs) below this interface, so the engine sees payload bytes and peer addresses and cannot
// tell one Link from another. Package transport never imports xdp or bpf.
package transport
