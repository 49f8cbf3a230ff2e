// Package transport is xdpndk's protocol engine: the reliable, RDMA-like transport that NDK
// verbs ride on (later steps), and the Link interface it runs on.
//
//	engine (one goroutine per Link)
//	   │ Send(pkts) / TxDone(cookies)          ▲ Receive(pkts) / Release(pkts)
//	   ▼                                        │
//	Link: xdp.Link (AF_XDP, production) or transport/simlink (in-memory, tests and bench)
//
// A Link moves UDP datagrams only: it frames them in Ethernet/IP/UDP (or whatever its medium
// needs) below this interface, so the engine sees payload bytes and peer addresses and cannot
// tell one Link from another. Package transport never imports xdp or bpf.
package transport
