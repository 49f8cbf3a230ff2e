package ndk

import (
	"cmp"
	"net/netip"
	"reflect"
	"slices"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/link"
)

// The adapter's counters, one public view of what the engines, the links, the XDP program
// and the memory registry count (docs/OPERATIONS.md). Reading them adds nothing to
// the data path: the counters are atomics the engine and the link update anyway, and
// Stats loads them when it is called, from any goroutine. What the kernel counts (the
// AF_XDP sockets' drops, the XDP program's verdicts) costs a system call per socket and
// one for the program, at read time only.
//
// JSON names are snake_case with their units: _total ends a counter (it only grows, from
// the adapter's or the QP's creation), _bytes and _us name the unit of a size or a time;
// a name without either is a count of things present now (a gauge).

// AdapterStats is a snapshot of an adapter's counters (Adapter.Stats).
type AdapterStats struct {
	// Engines is how many protocol engines the adapter runs (Options.Engines).
	Engines int `json:"engines"`
	// Engine is the sum of every engine's counters.
	Engine EngineStats `json:"engine"`
	// Link is the sum of the counters of every queue in Queues.
	Link LinkStats `json:"link"`
	// Socket is the sum of the AF_XDP sockets' counters of every queue in Queues; nil for
	// an adapter whose links have no AF_XDP socket (OpenLink on another link).
	Socket *SocketStats `json:"socket,omitempty"`
	// Queues are the queues the engines serve, each with its counters: every RX queue
	// served of an adapter from Open, one entry per link of an adapter from OpenLink. In
	// engine order, and in each engine in the order it serves them.
	Queues []QueueStats `json:"queues"`
	// Steering is the XDP steering program's verdicts; nil for an adapter without one
	// (OpenLink), or when its counters could not be read (the program was detached).
	Steering *SteeringStats `json:"steering,omitempty"`
	// Neighbours is the next-hop table of an adapter from Open; nil otherwise.
	Neighbours *NeighbourStats `json:"neighbours,omitempty"`
	// Memory is the adapter's UMEM, heap and registered memory.
	Memory MemoryStats `json:"memory"`
	// QPs counts the adapter's QPs and sums their counters, those of closed QPs included:
	// every counter of it only grows, whatever QPs come and go.
	QPs QPTotals `json:"qps"`
}

// EngineStats are the protocol engines' counters of datagrams: what they received from
// and handed to the link, and what they dropped and why.
type EngineStats struct {
	// RxDatagrams is the datagrams received from the link.
	RxDatagrams uint64 `json:"rx_datagrams_total"`
	// TxDatagrams is the datagrams handed to the link.
	TxDatagrams uint64 `json:"tx_datagrams_total"`
	// Malformed is the datagrams dropped because they failed to parse (length, version,
	// CRC32C, a field out of range).
	Malformed uint64 `json:"malformed_total"`
	// NoQP is the datagrams dropped because the QP they name does not exist (a multi-QP
	// Bundle counts once for each group that names one; BadSource and BadCookie alike).
	NoQP uint64 `json:"no_qp_total"`
	// BadSource is the datagrams dropped because they came from an address other than
	// their QP's peer.
	BadSource uint64 `json:"bad_source_total"`
	// BadCookie is the datagrams dropped because they carried the wrong connection cookie.
	BadCookie uint64 `json:"bad_cookie_total"`
	// OutOfWindow is the data packets dropped because their PSN lay outside the receive
	// window.
	OutOfWindow uint64 `json:"out_of_window_total"`
	// CMDropped is the connection-management messages dropped because they matched
	// nothing or had a field out of range.
	CMDropped uint64 `json:"cm_dropped_total"`
	// HalfOpenFull is the connection requests refused because the most connections were
	// being set up already.
	HalfOpenFull uint64 `json:"half_open_full_total"`
	// TxRefused is the datagrams the link refused outright (too large: a bug); the
	// protocol resends them or times out.
	TxRefused uint64 `json:"tx_refused_total"`
	// BundlesSent and BundlesReceived count Bundle datagrams (several small data packets
	// in one datagram, of one QP or of several to one peer, Options.PackLimit);
	// BundledSent and BundledReceived the data packets they carried.
	BundlesSent     uint64 `json:"bundles_sent_total"`
	BundledSent     uint64 `json:"bundled_sent_total"`
	BundlesReceived uint64 `json:"bundles_received_total"`
	BundledReceived uint64 `json:"bundled_received_total"`
	// MultiBundlesSent and MultiBundlesReceived count the multi-QP Bundles among them
	// (the packets of several QPs to one peer). With several engines, a received one whose
	// entries two engines own counts at each.
	MultiBundlesSent     uint64 `json:"multi_bundles_sent_total"`
	MultiBundlesReceived uint64 `json:"multi_bundles_received_total"`
	// Forwarded is the datagrams an engine received for a QP or connection request of
	// another engine of the adapter and passed to it; ForwardDropped those it dropped
	// because that engine's inbox was full (the protocol resends them); ForwardReceived
	// those engines took from their inboxes. 0 with one engine.
	Forwarded       uint64 `json:"forwarded_total"`
	ForwardDropped  uint64 `json:"forward_dropped_total"`
	ForwardReceived uint64 `json:"forward_received_total"`
}

// LinkStats are a link's counters (of one queue, or summed over queues).
type LinkStats struct {
	// RxPackets and RxBytes count the datagrams the link received and gave the engine,
	// and their UDP payload bytes.
	RxPackets uint64 `json:"rx_packets_total"`
	RxBytes   uint64 `json:"rx_bytes_total"`
	// TxPackets and TxBytes count the datagrams the link put on the wire (a held one when
	// it left the hold), and their UDP payload bytes.
	TxPackets uint64 `json:"tx_packets_total"`
	TxBytes   uint64 `json:"tx_bytes_total"`
	// RxDropped is the datagrams dropped before the engine saw them: malformed frames,
	// no buffer, and the AF_XDP socket's drops (its rx_dropped, rx_ring_full and
	// rx_invalid_descs, which Socket also shows).
	RxDropped uint64 `json:"rx_dropped_total"`
	// TxDropped is the datagrams the link took and then discarded (TxUnresolved,
	// TxHoldOverflow, failed transmits and the descriptors the kernel rejected).
	TxDropped uint64 `json:"tx_dropped_total"`
	// TxErrors is the hard transmit errors (interface down); their datagrams stay queued.
	TxErrors uint64 `json:"tx_errors_total"`
	// TxZeroCopy is the segments transmitted by reference into registered memory instead
	// of copied.
	TxZeroCopy uint64 `json:"tx_zero_copy_total"`
	// Kicks is the system calls made to have the kernel transmit or refill.
	Kicks uint64 `json:"kicks_total"`
	// TxHeld is the datagrams held while their peer's next hop was resolved.
	TxHeld uint64 `json:"tx_held_total"`
	// TxUnresolved is the datagrams dropped because their peer's next hop could not be
	// resolved.
	TxUnresolved uint64 `json:"tx_unresolved_total"`
	// TxHoldOverflow is the held datagrams dropped to make room for newer ones.
	TxHoldOverflow uint64 `json:"tx_hold_overflow_total"`
	// RxStamped is the datagrams received with their arrival time (the XDP program's
	// stamp), and RxWaitNanos the sum of how long they waited in the RX ring for the
	// engine, ns: RxWaitNanos/RxStamped is the mean wait.
	RxStamped   uint64 `json:"rx_stamped_total"`
	RxWaitNanos uint64 `json:"rx_wait_nanoseconds_total"`
}

// SocketStats are an AF_XDP socket's counters, as the kernel keeps them
// (XDP_STATISTICS; docs: the kernel's AF_XDP documentation).
type SocketStats struct {
	// RxDropped is the packets the kernel dropped for reasons other than invalid
	// descriptors (no room, no scatter-gather for a multi-buffer packet).
	RxDropped uint64 `json:"rx_dropped_total"`
	// RxInvalidDescs is the packets dropped because of invalid descriptors.
	RxInvalidDescs uint64 `json:"rx_invalid_descs_total"`
	// TxInvalidDescs is the transmit descriptors the kernel rejected.
	TxInvalidDescs uint64 `json:"tx_invalid_descs_total"`
	// RxRingFull is the packets dropped because the RX ring was full.
	RxRingFull uint64 `json:"rx_ring_full_total"`
	// RxFillRingEmpty is the times a packet arrived to an empty fill ring.
	RxFillRingEmpty uint64 `json:"rx_fill_ring_empty_total"`
	// TxRingEmptyDescs is the times the kernel found the TX ring empty when kicked.
	TxRingEmptyDescs uint64 `json:"tx_ring_empty_descs_total"`
}

// QueueStats are one queue's counters.
type QueueStats struct {
	// Queue is the interface's RX queue the socket is bound to (Open), or the link's
	// index among the adapter's links (OpenLink).
	Queue int `json:"queue"`
	// Engine is the index of the engine that serves the queue.
	Engine int `json:"engine"`
	// Link is the queue's link counters.
	Link LinkStats `json:"link"`
	// Socket is the queue's AF_XDP socket counters; nil for a link without one, or when
	// the kernel did not answer (the socket is closed).
	Socket *SocketStats `json:"socket,omitempty"`
}

// SteeringStats are the XDP steering program's verdicts, summed over CPUs.
type SteeringStats struct {
	// Redirected is our packets handed to an AF_XDP socket; RedirectedBytes their frame
	// bytes (Ethernet header to the end of the last fragment).
	Redirected      uint64 `json:"redirected_total"`
	RedirectedBytes uint64 `json:"redirected_bytes_total"`
	// Passed is the packets that are not ours (other protocols, ports, IP fragments),
	// passed to the kernel.
	Passed uint64 `json:"passed_total"`
	// NoSocket is our packets passed to the kernel because their queue has no socket.
	NoSocket uint64 `json:"no_socket_total"`
	// Malformed is the packets with a truncated or invalid Ethernet, VLAN, IP or UDP
	// header, passed to the kernel unsteered.
	Malformed uint64 `json:"malformed_total"`
	// FaultDropped is our packets dropped by fault injection (tests).
	FaultDropped uint64 `json:"fault_dropped_total"`
}

// NeighbourStats are the next-hop table's state and counters (xdp/nexthop).
type NeighbourStats struct {
	// Entries is the entries in the table; Pending those being resolved for the first
	// time, Failed those cached as failed, Resolved those with a usable next hop;
	// Resolving the targets being resolved now (first resolutions and re-validations).
	Entries   int `json:"entries"`
	Pending   int `json:"pending"`
	Failed    int `json:"failed"`
	Resolved  int `json:"resolved"`
	Resolving int `json:"resolving"`
	// Requests is the resolution requests accepted; RequestsDropped those dropped (the
	// queue to the resolver was full, or too many were in progress).
	Requests        uint64 `json:"requests_total"`
	RequestsDropped uint64 `json:"requests_dropped_total"`
	// Resolutions and Failures count the first resolutions that succeeded and failed.
	Resolutions uint64 `json:"resolutions_total"`
	Failures    uint64 `json:"failures_total"`
	// Refreshes is the re-validations of resolved entries; Changes the entries whose next
	// hop changed (a new MAC or gateway).
	Refreshes uint64 `json:"refreshes_total"`
	Changes   uint64 `json:"changes_total"`
	// Evictions is the entries evicted to make room; Expired those that expired or went
	// unused.
	Evictions uint64 `json:"evictions_total"`
	Expired   uint64 `json:"expired_total"`
	// EventsLost is the times the kernel's neighbour event stream was lost and
	// subscribed to again.
	EventsLost uint64 `json:"events_lost_total"`
}

// MemoryStats are the adapter's memory: its UMEM, the heap Alloc hands out, and what the
// registry holds.
type MemoryStats struct {
	// UMEMSize is the pinned UMEM's size in bytes (0: the adapter has none), packet frames
	// and heap together.
	UMEMSize int `json:"umem_size_bytes"`
	// Frames is the packet frames in the UMEM (every queue's), FrameSize the bytes of one.
	Frames    int `json:"frames"`
	FrameSize int `json:"frame_size_bytes"`
	// HeapSize is the most bytes Alloc hands out (Options.HeapSize; 0: no heap), HeapUsed
	// the bytes of the live buffers (each rounded up to the heap's granule), HeapBuffers
	// how many there are, HeapLargestFree the longest free run.
	HeapSize        int `json:"heap_size_bytes"`
	HeapUsed        int `json:"heap_used_bytes"`
	HeapBuffers     int `json:"heap_buffers"`
	HeapLargestFree int `json:"heap_largest_free_bytes"`
	// Regions is the live MRs registered with RegisterMR, FastRegisterRegions the live
	// fast-register MRs, Windows the live MWs; together at most MaxEntries
	// (Options.MaxMemoryEntries).
	Regions             int `json:"regions"`
	FastRegisterRegions int `json:"fast_register_regions"`
	Windows             int `json:"windows"`
	MaxEntries          int `json:"max_entries"`
	// Pinned is the memory outside the UMEM that regions pin (mlock), in bytes.
	Pinned uint64 `json:"pinned_bytes"`
}

// QPTotals count an adapter's QPs and sum their counters.
type QPTotals struct {
	// Live is the QPs open now; Created and Closed count those created and closed since
	// the adapter opened.
	Live    int    `json:"live"`
	Created uint64 `json:"created_total"`
	Closed  uint64 `json:"closed_total"`
	// QPCounters are summed over every QP the adapter had, closed ones included.
	QPCounters
}

// QPCounters are a QP's cumulative counters (each only grows, from the QP's creation).
type QPCounters struct {
	// TxPackets and TxBytes count the data packets sent, retransmissions included, and
	// their payload bytes.
	TxPackets uint64 `json:"tx_packets_total"`
	TxBytes   uint64 `json:"tx_bytes_total"`
	// RxPackets and RxBytes count the new data packets accepted (not duplicates) and
	// their payload bytes.
	RxPackets uint64 `json:"rx_packets_total"`
	RxBytes   uint64 `json:"rx_bytes_total"`
	// Retransmits is the data packets sent again.
	Retransmits uint64 `json:"retransmits_total"`
	// RetransmitsQueued counts the packets queued for retransmission by each cause. A
	// packet queued by two causes before it left again counts under both, and one
	// acknowledged before it left again does not leave: Retransmits is at most the sum.
	RetransmitsQueued RetransmitCauses `json:"retransmits_queued"`
	// NeedlessTailProbes is the tail loss probes whose original had arrived (its
	// acknowledgement was late, not lost).
	NeedlessTailProbes uint64 `json:"needless_tail_probes_total"`
	// Timeouts is the retransmission timer's expiries; SpuriousTimeouts those the
	// timestamp echo proved spurious (their window cut was undone).
	Timeouts         uint64 `json:"timeouts_total"`
	SpuriousTimeouts uint64 `json:"spurious_timeouts_total"`
	// KeepAlives is the keepalive probes sent (the peer was silent for a third of
	// KeepAlive).
	KeepAlives uint64 `json:"keepalives_total"`
	// AcksSent is the acknowledgements sent in Ack packets, AcksPiggybacked those that
	// data packets carried.
	AcksSent        uint64 `json:"acks_sent_total"`
	AcksPiggybacked uint64 `json:"acks_piggybacked_total"`
	// NaksSent and NaksReceived count negative acknowledgements, NaksSentBy and
	// NaksReceivedBy the same by kind.
	NaksSent       uint64    `json:"naks_sent_total"`
	NaksReceived   uint64    `json:"naks_received_total"`
	NaksSentBy     NakCounts `json:"naks_sent_by_kind"`
	NaksReceivedBy NakCounts `json:"naks_received_by_kind"`
	// RNRNaksReceived is the receiver-not-ready NAKs received (the peer had no receive
	// posted for a Send): NaksReceivedBy.RNR.
	RNRNaksReceived uint64 `json:"rnr_naks_received_total"`
	// Duplicates is the data packets received more than once.
	Duplicates uint64 `json:"duplicates_total"`
}

// RetransmitCauses count packets queued for retransmission by cause.
type RetransmitCauses struct {
	// Timer is the packets the retransmission timer's expiries queued.
	Timer uint64 `json:"timer_total"`
	// Loss is the packets loss detection found lost (selective acknowledgements, time
	// based detection) and queued.
	Loss uint64 `json:"loss_total"`
	// TailProbe is the tail loss probes: the last packet sent again before the timer
	// would fire.
	TailProbe uint64 `json:"tail_probe_total"`
	// RNR is the packets sent again at the end of their receiver-not-ready wait.
	RNR uint64 `json:"rnr_total"`
}

// NakCounts count NAKs by kind (the syndrome of the wire protocol, docs/PROTOCOL.md).
type NakCounts struct {
	// Sequence: a gap in the packet sequence.
	Sequence uint64 `json:"sequence_total"`
	// RNR: receiver not ready, no receive posted for a Send.
	RNR uint64 `json:"rnr_total"`
	// Access: a remote access refused (token, rights, bounds).
	Access uint64 `json:"access_total"`
	// InvalidRequest: a request the responder cannot carry out.
	InvalidRequest uint64 `json:"invalid_request_total"`
	// RemoteOperation: the responder failed the operation.
	RemoteOperation uint64 `json:"remote_operation_total"`
	// InvalidateToken: a SendAndInvalidate's token could not be invalidated.
	InvalidateToken uint64 `json:"invalidate_token_total"`
	// Other: any other syndrome.
	Other uint64 `json:"other_total"`
}

// QPStats are a QP's identity, state, counters and estimates (QP.Stats).
type QPStats struct {
	// QPN is the QP's number, unique on its adapter (its low bits name the engine).
	QPN uint32 `json:"qpn"`
	// Engine is the index of the engine the QP is on.
	Engine int `json:"engine"`
	// State is "idle", "connecting", "connected", "error" or "disconnected".
	State string `json:"state"`
	// Peer is the connected peer's address ("" before the QP connected).
	Peer netip.AddrPort `json:"peer"`
	// Cause is why a QP in error or disconnected ended ("" otherwise).
	Cause string `json:"cause,omitempty"`
	// QPCounters are the QP's counters.
	QPCounters
	// SRTT and RTTVar are the smoothed round trip and its variation, RTO the
	// retransmission timeout, in µs (0 before the first estimate).
	SRTT   float64 `json:"srtt_us"`
	RTTVar float64 `json:"rttvar_us"`
	RTO    float64 `json:"rto_us"`
	// CongestionWindow is the congestion controller's window, InFlight the payload bytes
	// sent and not yet acknowledged.
	CongestionWindow int `json:"cwnd_bytes"`
	InFlight         int `json:"in_flight_bytes"`
}

// Stats returns the adapter's counters. Safe from any goroutine, at any time (after
// Close, the last values; a closed link's sockets and the detached program no longer
// answer, so Socket and Steering are nil then).
func (a *Adapter) Stats() AdapterStats {
	s := AdapterStats{Engines: len(a.engs)}
	s.Engine = engineStats(a.grp.Stats())
	for i, e := range a.engs {
		s.Queues = appendQueues(s.Queues, i, e.link)
	}
	for _, q := range s.Queues {
		s.Link = sumCounters(s.Link, q.Link)
		if q.Socket != nil {
			if s.Socket == nil {
				s.Socket = &SocketStats{}
			}
			*s.Socket = sumCounters(*s.Socket, *q.Socket)
		}
	}
	s.Steering, s.Neighbours = a.deviceStats()
	s.Memory = a.memoryStats()
	s.QPs = a.qpTotals()
	return s
}

// appendQueues appends the queues of engine i's link l: each socket of an AF_XDP link
// (queueStats), or l itself.
func appendQueues(dst []QueueStats, i int, l link.Link) []QueueStats {
	if qs, ok := queueStats(i, l); ok {
		return append(dst, qs...)
	}
	return append(dst, QueueStats{Queue: i, Engine: i, Link: linkStats(l.Stats())})
}

// memoryStats returns the adapter's memory.
func (a *Adapter) memoryStats() MemoryStats {
	var m MemoryStats
	if u := a.umem; u != nil {
		m.UMEMSize, m.Frames, m.FrameSize = u.Size(), u.Frames(), u.FrameSize()
	}
	if a.heap != nil {
		h := a.heap.Stats()
		m.HeapSize, m.HeapUsed, m.HeapBuffers, m.HeapLargestFree = h.Size, h.InUse, h.Allocs, h.LargestFree
	}
	r := a.reg.Stats()
	m.Regions, m.FastRegisterRegions, m.Windows, m.MaxEntries = r.Regions, r.FastRegisterRegions, r.Windows, r.Capacity
	m.Pinned = r.PinnedBytes
	return m
}

// qpTotals counts the adapter's QPs and sums their counters with those of the closed ones.
func (a *Adapter) qpTotals() QPTotals {
	a.objMu.Lock()
	defer a.objMu.Unlock()
	t := QPTotals{Live: len(a.qps), Created: a.qpsCreated, Closed: a.qpsClosed, QPCounters: a.qpsRetired}
	for q := range a.qps {
		t.QPCounters = sumCounters(t.QPCounters, qpCounters(q.tq.Stats()))
	}
	return t
}

// retire adds the final counters of q, closed, to the adapter's totals. a.objMu is held.
func (a *Adapter) retire(q *QP) {
	a.qpsClosed++
	a.qpsRetired = sumCounters(a.qpsRetired, qpCounters(q.tq.Stats()))
}

// QPStats returns the statistics of every QP open on the adapter, oldest first (in the
// order they were created). Safe from any goroutine.
func (a *Adapter) QPStats() []QPStats {
	a.objMu.Lock()
	qps := make([]*QP, 0, len(a.qps))
	for q := range a.qps {
		qps = append(qps, q)
	}
	a.objMu.Unlock()
	slices.SortFunc(qps, func(x, y *QP) int { return cmp.Compare(x.seq, y.seq) })
	out := make([]QPStats, len(qps))
	for i, q := range qps {
		out[i] = q.Stats()
	}
	return out
}

// Stats returns the QP's identity, state, counters and latest estimates (the engine
// publishes its estimates after each acknowledgement it processes). Safe from any
// goroutine, also after Close (the last values).
func (q *QP) Stats() QPStats {
	tq := q.tq
	st := tq.State() // first: a state past connecting publishes the peer's address
	s := QPStats{QPN: tq.QPN(), Engine: tq.Engine().Index(), State: st.String()}
	if st >= transport.QPConnected {
		s.Peer = tq.Peer()
	}
	if err := tq.Cause(); err != nil {
		s.Cause = err.Error()
	}
	x := tq.Stats()
	s.QPCounters = qpCounters(x)
	s.SRTT, s.RTTVar, s.RTO = micros(x.SRTT), micros(x.RTTVar), micros(x.RTO)
	s.CongestionWindow, s.InFlight = x.CongestionWindow, x.InFlight
	return s
}

// micros converts ns to µs.
func micros(ns int64) float64 { return float64(ns) / 1e3 }

// engineStats maps the engines' counters.
func engineStats(x transport.GroupStats) EngineStats {
	return EngineStats{
		RxDatagrams: x.RxPackets, TxDatagrams: x.TxPackets, Malformed: x.Malformed, NoQP: x.NoQP,
		BadSource: x.BadSource, BadCookie: x.BadCookie, OutOfWindow: x.OutOfWindow, CMDropped: x.CMDropped,
		HalfOpenFull: x.HalfOpenFull, TxRefused: x.TxRefused,
		BundlesSent: x.BundlesSent, BundledSent: x.BundledSent, BundlesReceived: x.BundlesReceived,
		BundledReceived: x.BundledReceived, MultiBundlesSent: x.MultiBundlesSent, MultiBundlesReceived: x.MultiBundlesReceived,
		Forwarded: x.Forwarded, ForwardDropped: x.ForwardDropped, ForwardReceived: x.ForwardReceived,
	}
}

// linkStats maps a link's counters.
func linkStats(x link.Stats) LinkStats {
	return LinkStats{
		RxPackets: x.RxPackets, RxBytes: x.RxBytes, TxPackets: x.TxPackets, TxBytes: x.TxBytes,
		RxDropped: x.RxDropped, TxDropped: x.TxDropped, TxErrors: x.TxErrors, TxZeroCopy: x.TxZeroCopy,
		Kicks: x.Kicks, TxHeld: x.TxHeld, TxUnresolved: x.TxUnresolved, TxHoldOverflow: x.TxHoldOverflow,
		RxStamped: x.RxStamped, RxWaitNanos: x.RxWaitNanos,
	}
}

// qpCounters maps a QP's counters.
func qpCounters(x transport.QPStats) QPCounters {
	return QPCounters{
		TxPackets: x.TxPackets, TxBytes: x.TxBytes, RxPackets: x.RxPackets, RxBytes: x.RxBytes,
		Retransmits: x.Retransmits,
		RetransmitsQueued: RetransmitCauses{Timer: x.RTORetransmits, Loss: x.LossRetransmits,
			TailProbe: x.TailProbes, RNR: x.RNRRetransmits},
		NeedlessTailProbes: x.NeedlessProbes, Timeouts: x.Timeouts, SpuriousTimeouts: x.SpuriousTimeouts,
		KeepAlives: x.KeepAlives, AcksSent: x.AcksSent, AcksPiggybacked: x.AcksPiggybacked,
		NaksSent: x.NaksSent, NaksReceived: x.NaksReceived,
		NaksSentBy: nakCounts(x.NaksSentBy[:]), NaksReceivedBy: nakCounts(x.NaksReceivedBy[:]),
		RNRNaksReceived: x.RNRNaks, Duplicates: x.Duplicates,
	}
}

// nakCounts maps NAK counts indexed by syndrome (transport.QPStats.NaksSentBy).
func nakCounts(by []uint64) NakCounts {
	var n NakCounts
	for syn, c := range by {
		switch syn {
		case 1:
			n.Sequence += c
		case 2:
			n.RNR += c
		case 3:
			n.Access += c
		case 4:
			n.InvalidRequest += c
		case 5:
			n.RemoteOperation += c
		case 6:
			n.InvalidateToken += c
		default:
			n.Other += c
		}
	}
	return n
}

// Add returns the sum of c and x, field by field: the counters of several QPs together.
func (c QPCounters) Add(x QPCounters) QPCounters { return sumCounters(c, x) }

// sumCounters returns s + x, every uint64 field of them added, in nested structs too: the
// counter types here are made of nothing else, so a counter added to one is summed without
// a line of its own (TestStatsAddEveryField).
func sumCounters[T any](s, x T) T {
	addFields(reflect.ValueOf(&s).Elem(), reflect.ValueOf(&x).Elem())
	return s
}

func addFields(dst, src reflect.Value) {
	switch dst.Kind() {
	case reflect.Uint64:
		dst.SetUint(dst.Uint() + src.Uint())
	case reflect.Struct:
		for i := range dst.NumField() {
			addFields(dst.Field(i), src.Field(i))
		}
	default:
		panic("ndk: a counter type holds a " + dst.Kind().String() + ": sumCounters adds only uint64 fields")
	}
}
