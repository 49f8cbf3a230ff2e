// Package ndk is Microsoft's NDK verbs (NDKPI) for Linux hosts with ordinary Ethernet NICs:
// adapters, protection domains, completion queues, queue pairs, shared receive queues,
// memory regions and windows, listeners and connectors, with NDK's flags, NTSTATUS values
// and rules as Microsoft's NDKPI documentation gives them (docs/NDK.md records the
// decisions).
//
// The verbs run over xdpndk's reliable protocol (package transport) on an AF_XDP link
// (Open) or on any link.Link (OpenLink: transport/simlink in tests):
//
//	application                      ndk                          transport / memreg
//	───────────                      ───                          ──────────────────
//	qp.Write(rc, sgl, addr, tok) ──► check flags, SGEs (AcquireLocal
//	                                 holds the region), slot ─────► WorkRequest on the QP's
//	                                                                SPSC queue (no lock, no alloc)
//	                                                                engine: packets, acks,
//	                                                                retransmission, placement;
//	                                                                the peer's Resolve/Acquire
//	                                 QP's sink (engine goroutine) ◄─ completion in posting order
//	cq.GetResults(res) ◄──────────── result ring of the CQ; Arm'ed
//	notify(status) ◄──────────────── notification on the adapter's
//	                                 event goroutine
//
// Every posting verb takes a request context (rc above, NDK's RequestContext): any value,
// returned untouched in the request's Result. It is not a context.Context: posting never
// blocks, so there is nothing to cancel. Posting (one goroutine per queue at a time, NDKPI
// Work Request Posting Requirements) and polling never block and never allocate. Blocking
// calls (Connect, Accept, Disconnect, Deregister, Close) take a context. Errors carry their
// NTSTATUS: errors.Is(err, ndk.StatusAccessViolation), or ndk.StatusOf(err).
package ndk
