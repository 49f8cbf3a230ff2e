// Package promndk exports an ndk adapter's counters to Prometheus: a prometheus.Collector
// that reads ndk.Adapter.Stats and the QPs' statistics (ndk.Adapter.QPStats) when it is
// scraped, and adds nothing to the data path (the counters are atomics the adapter keeps
// anyway; see ndk.AdapterStats).
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(promndk.New(adapter, promndk.Options{}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// # Names and labels
//
// Every metric is named xdpndk_…; counters end in _total, sizes in _bytes, times in
// _seconds. Labels have a bounded number of values:
//
//   - queue and engine (the link and AF_XDP socket metrics, xdpndk_link_… and
//     xdpndk_xsk_…): the interface's RX queue served and the index of the engine serving
//     it, one series per queue served;
//   - reason, verdict, cause, kind, state: a fixed set of values each (below);
//   - qpn (the xdpndk_qp_… metrics): the QP's number, unique on its adapter, for at most
//     Options.MaxQPs QPs (default 64), the oldest open ones. The counters of the QPs
//     beyond them are summed into the series of qpn="other", whose QP count
//     xdpndk_qps_unlabelled gives; their estimates (round trip, window) are not exported.
//     A QP's series end when it closes (and "other" falls by what a QP leaving it had
//     counted); the adapter-wide xdpndk_qps_… counters sum every QP the adapter had,
//     closed ones included, and only grow.
//
// The metrics, by subsystem (ndk.AdapterStats documents each counter):
//
//	xdpndk_engines                                   engines of the adapter
//	xdpndk_engine_{rx,tx}_datagrams_total            datagrams from and to the link
//	xdpndk_engine_dropped_datagrams_total{reason}    malformed, no_qp, bad_source, bad_cookie,
//	                                                 out_of_window, cm, half_open_full
//	xdpndk_engine_tx_refused_datagrams_total         refused by the link (a bug)
//	xdpndk_engine_bundles_{sent,received}_total      Bundle datagrams, and the data packets
//	xdpndk_engine_bundled_packets_{sent,received}_total  they carried
//	xdpndk_engine_multi_bundles_{sent,received}_total  the multi-QP Bundles among them
//	xdpndk_engine_forwarded_datagrams_total, _forward_dropped_datagrams_total,
//	_forward_received_datagrams_total                between the adapter's engines
//	xdpndk_link_{rx,tx}_{packets,bytes}_total{queue,engine}
//	xdpndk_link_{rx,tx}_dropped_packets_total, _tx_errors_total, _tx_zero_copy_segments_total,
//	_kicks_total, _tx_held_packets_total, _tx_unresolved_packets_total,
//	_tx_hold_overflow_packets_total {queue,engine}
//	xdpndk_link_rx_stamped_packets_total, _rx_wait_seconds_total {queue,engine}  datagrams
//	                                                 received with their arrival time, and
//	                                                 how long they waited for the engine
//	xdpndk_xsk_rx_dropped_packets_total, _rx_invalid_descriptors_total,
//	_tx_invalid_descriptors_total, _rx_ring_full_packets_total, _fill_ring_empty_total,
//	_tx_ring_empty_total {queue,engine}             the kernel's AF_XDP socket counters
//	xdpndk_xdp_packets_total{verdict}                redirected, passed, no_socket, malformed,
//	                                                 fault_dropped
//	xdpndk_xdp_redirected_bytes_total
//	xdpndk_neighbour_entries{state}                  pending, failed, resolved
//	xdpndk_neighbour_resolving, _requests_total, _requests_dropped_total,
//	_resolutions_total, _resolution_failures_total, _refreshes_total, _changes_total,
//	_evictions_total, _expired_total, _events_lost_total
//	xdpndk_umem_size_bytes, _umem_frames, _umem_frame_size_bytes
//	xdpndk_heap_size_bytes, _heap_used_bytes, _heap_buffers, _heap_largest_free_bytes
//	xdpndk_memory_regions{kind}                      registered, fast_register
//	xdpndk_memory_windows, _memory_entries_max, _memory_pinned_bytes
//	xdpndk_qps, _qps_created_total, _qps_closed_total, _qps_unlabelled
//	xdpndk_qps_… and xdpndk_qp_…{qpn}: tx_packets_total, tx_bytes_total, rx_packets_total,
//	rx_bytes_total, retransmits_total (sent), retransmits_queued_total{cause} (timer, loss,
//	tail_probe, rnr), needless_tail_probes_total, timeouts_total, spurious_timeouts_total,
//	keepalives_total, acks_sent_total, acks_piggybacked_total, naks_sent_total{kind},
//	naks_received_total{kind} (sequence, rnr, access, invalid_request, remote_operation,
//	invalidate_token, other), duplicate_packets_total
//	xdpndk_qp_srtt_seconds, _rttvar_seconds, _rto_seconds, _cwnd_bytes, _in_flight_bytes{qpn}
//	xdpndk_qp_info{qpn,engine,state,peer}            1 per labelled QP
//
// The core packages (ndk, transport, xdp, memreg, bpf) do not import this one
// (internal/layers checks): an application that does not export to Prometheus neither
// builds nor downloads its client. docs/OPERATIONS.md has the names, the labels' bounds
// and the adapter's events.
package promndk

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdpndk/xdpndk/ndk"
)

// DefaultMaxQPs is Options.MaxQPs's default.
const DefaultMaxQPs = 64

// Options configure a Collector.
type Options struct {
	// MaxQPs is the most QPs exported with a qpn label (0: DefaultMaxQPs; negative: none,
	// every QP is summed into qpn="other").
	MaxQPs int
	// ConstLabels are added to every series (an interface name, a role), to tell several
	// adapters of one process apart.
	ConstLabels prometheus.Labels
}

// Collector is a prometheus.Collector of one adapter's counters. Safe for concurrent
// scrapes.
type Collector struct {
	a   *ndk.Adapter
	max int
	all []metric

	engines, rxDatagrams, txDatagrams, dropped, txRefused        metric
	bundlesSent, bundlesRecv, bundledSent, bundledRecv           metric
	multiSent, multiRecv                                         metric
	forwarded, forwardDropped, forwardReceived                   metric
	linkRxPackets, linkRxBytes, linkTxPackets, linkTxBytes       metric
	linkRxDropped, linkTxDropped, linkTxErrors, linkZeroCopy     metric
	linkKicks, linkHeld, linkUnresolved, linkHoldOverflow        metric
	linkStamped, linkWait                                        metric
	xskRxDropped, xskRxInvalid, xskTxInvalid, xskRingFull        metric
	xskFillEmpty, xskTxEmpty                                     metric
	xdpPackets, xdpBytes                                         metric
	nbEntries, nbResolving, nbRequests, nbDropped, nbResolutions metric
	nbFailures, nbRefreshes, nbChanges, nbEvictions, nbExpired   metric
	nbEventsLost                                                 metric
	umemSize, umemFrames, frameSize                              metric
	heapSize, heapUsed, heapBuffers, heapLargest                 metric
	regions, windows, entriesMax, pinned                         metric
	qps, qpsCreated, qpsClosed, qpsUnlabelled                    metric
	qpSRTT, qpRTTVar, qpRTO, qpCwnd, qpInFlight, qpInfo          metric
	adapterQPs, perQP                                            qpFamilies
	constLabels                                                  prometheus.Labels
}

// metric is one family: its description and type.
type metric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

// New returns a collector of a's counters; register it with a prometheus.Registerer.
func New(a *ndk.Adapter, opts Options) *Collector {
	c := &Collector{a: a, max: opts.MaxQPs, constLabels: opts.ConstLabels}
	switch {
	case c.max == 0:
		c.max = DefaultMaxQPs
	case c.max < 0:
		c.max = 0
	}
	q := []string{"queue", "engine"}
	counter := func(name, help string, labels ...string) metric {
		return c.add(name, help, prometheus.CounterValue, labels)
	}
	gauge := func(name, help string, labels ...string) metric {
		return c.add(name, help, prometheus.GaugeValue, labels)
	}
	c.engines = gauge("engines", "Protocol engines the adapter runs.")
	c.rxDatagrams = counter("engine_rx_datagrams_total", "Datagrams the engines received from the link.")
	c.txDatagrams = counter("engine_tx_datagrams_total", "Datagrams the engines handed to the link.")
	c.dropped = counter("engine_dropped_datagrams_total", "Datagrams the engines dropped, by reason.", "reason")
	c.txRefused = counter("engine_tx_refused_datagrams_total", "Datagrams the link refused outright (too large).")
	c.bundlesSent = counter("engine_bundles_sent_total", "Bundle datagrams sent (several small data packets of one QP).")
	c.bundlesRecv = counter("engine_bundles_received_total", "Bundle datagrams received.")
	c.bundledSent = counter("engine_bundled_packets_sent_total", "Data packets sent in Bundles.")
	c.bundledRecv = counter("engine_bundled_packets_received_total", "Data packets received in Bundles.")
	c.multiSent = counter("engine_multi_bundles_sent_total", "Multi-QP Bundle datagrams sent (small data packets of several QPs to one peer), among the Bundles.")
	c.multiRecv = counter("engine_multi_bundles_received_total", "Multi-QP Bundle datagrams received, among the Bundles.")
	c.forwarded = counter("engine_forwarded_datagrams_total", "Datagrams an engine passed to the engine of their QP.")
	c.forwardDropped = counter("engine_forward_dropped_datagrams_total", "Datagrams dropped because the inbox of their QP's engine was full.")
	c.forwardReceived = counter("engine_forward_received_datagrams_total", "Datagrams engines took from their inboxes.")

	c.linkRxPackets = counter("link_rx_packets_total", "Datagrams the queue's link received.", q...)
	c.linkRxBytes = counter("link_rx_bytes_total", "UDP payload bytes the queue's link received.", q...)
	c.linkTxPackets = counter("link_tx_packets_total", "Datagrams the queue's link transmitted.", q...)
	c.linkTxBytes = counter("link_tx_bytes_total", "UDP payload bytes the queue's link transmitted.", q...)
	c.linkRxDropped = counter("link_rx_dropped_packets_total", "Datagrams dropped before the engine saw them (the socket's drops included).", q...)
	c.linkTxDropped = counter("link_tx_dropped_packets_total", "Datagrams the link took and then discarded.", q...)
	c.linkTxErrors = counter("link_tx_errors_total", "Hard transmit errors (interface down).", q...)
	c.linkZeroCopy = counter("link_tx_zero_copy_segments_total", "Segments transmitted by reference into registered memory.", q...)
	c.linkKicks = counter("link_kicks_total", "System calls made to have the kernel transmit or refill.", q...)
	c.linkHeld = counter("link_tx_held_packets_total", "Datagrams held while their next hop was resolved.", q...)
	c.linkUnresolved = counter("link_tx_unresolved_packets_total", "Datagrams dropped because their next hop could not be resolved.", q...)
	c.linkHoldOverflow = counter("link_tx_hold_overflow_packets_total", "Held datagrams dropped to make room for newer ones.", q...)
	c.linkStamped = counter("link_rx_stamped_packets_total", "Datagrams received with their arrival time (the XDP program's stamp).", q...)
	c.linkWait = counter("link_rx_wait_seconds_total", "How long the stamped datagrams waited in the RX ring for the engine, in total.", q...)
	c.xskRxDropped = counter("xsk_rx_dropped_packets_total", "Packets the kernel dropped at the AF_XDP socket (no room, no scatter-gather).", q...)
	c.xskRxInvalid = counter("xsk_rx_invalid_descriptors_total", "Packets dropped because of invalid descriptors.", q...)
	c.xskTxInvalid = counter("xsk_tx_invalid_descriptors_total", "Transmit descriptors the kernel rejected.", q...)
	c.xskRingFull = counter("xsk_rx_ring_full_packets_total", "Packets dropped because the RX ring was full.", q...)
	c.xskFillEmpty = counter("xsk_fill_ring_empty_total", "Times a packet arrived to an empty fill ring.", q...)
	c.xskTxEmpty = counter("xsk_tx_ring_empty_total", "Times the kernel found the TX ring empty when kicked.", q...)

	c.xdpPackets = counter("xdp_packets_total", "Packets the XDP steering program saw, by verdict.", "verdict")
	c.xdpBytes = counter("xdp_redirected_bytes_total", "Frame bytes of the packets the XDP program redirected to AF_XDP sockets.")

	c.nbEntries = gauge("neighbour_entries", "Entries of the next-hop table, by state.", "state")
	c.nbResolving = gauge("neighbour_resolving", "Next hops being resolved now.")
	c.nbRequests = counter("neighbour_requests_total", "Next-hop resolution requests accepted.")
	c.nbDropped = counter("neighbour_requests_dropped_total", "Next-hop resolution requests dropped.")
	c.nbResolutions = counter("neighbour_resolutions_total", "First resolutions of a next hop that succeeded.")
	c.nbFailures = counter("neighbour_resolution_failures_total", "First resolutions of a next hop that failed.")
	c.nbRefreshes = counter("neighbour_refreshes_total", "Re-validations of resolved next hops.")
	c.nbChanges = counter("neighbour_changes_total", "Resolved next hops that changed (a new MAC or gateway).")
	c.nbEvictions = counter("neighbour_evictions_total", "Next-hop entries evicted to make room.")
	c.nbExpired = counter("neighbour_expired_total", "Next-hop entries that expired or went unused.")
	c.nbEventsLost = counter("neighbour_events_lost_total", "Times the kernel's neighbour event stream was lost.")

	c.umemSize = gauge("umem_size_bytes", "Size of the pinned UMEM (packet frames and heap).")
	c.umemFrames = gauge("umem_frames", "Packet frames in the UMEM.")
	c.frameSize = gauge("umem_frame_size_bytes", "Size of one UMEM frame.")
	c.heapSize = gauge("heap_size_bytes", "Most bytes Adapter.Alloc hands out.")
	c.heapUsed = gauge("heap_used_bytes", "Bytes of the heap's live buffers.")
	c.heapBuffers = gauge("heap_buffers", "Live buffers of the heap.")
	c.heapLargest = gauge("heap_largest_free_bytes", "Longest free run of the heap.")
	c.regions = gauge("memory_regions", "Live memory regions, by kind.", "kind")
	c.windows = gauge("memory_windows", "Live memory windows.")
	c.entriesMax = gauge("memory_entries_max", "Most memory regions and windows that may be live together.")
	c.pinned = gauge("memory_pinned_bytes", "Memory outside the UMEM that regions pin.")

	c.qps = gauge("qps", "QPs open on the adapter.")
	c.qpsCreated = counter("qps_created_total", "QPs created on the adapter.")
	c.qpsClosed = counter("qps_closed_total", "QPs closed on the adapter.")
	c.qpsUnlabelled = gauge("qps_unlabelled", `Open QPs beyond the label limit, summed into qpn="other".`)
	c.adapterQPs = newQPFamilies(c, "qps_", "every QP of the adapter, closed ones included", nil)
	c.perQP = newQPFamilies(c, "qp_", "the QP", []string{"qpn"})
	c.qpSRTT = gauge("qp_srtt_seconds", "The QP's smoothed round-trip time.", "qpn")
	c.qpRTTVar = gauge("qp_rttvar_seconds", "The variation of the QP's round-trip time.", "qpn")
	c.qpRTO = gauge("qp_rto_seconds", "The QP's retransmission timeout.", "qpn")
	c.qpCwnd = gauge("qp_cwnd_bytes", "The QP's congestion window.", "qpn")
	c.qpInFlight = gauge("qp_in_flight_bytes", "Payload bytes the QP sent and has not seen acknowledged.", "qpn")
	c.qpInfo = gauge("qp_info", "1 for each labelled QP, with its engine, state and peer.", "qpn", "engine", "state", "peer")
	return c
}

// add makes a family named xdpndk_name.
func (c *Collector) add(name, help string, typ prometheus.ValueType, labels []string) metric {
	m := metric{desc: prometheus.NewDesc("xdpndk_"+name, help, labels, c.constLabels), typ: typ}
	c.all = append(c.all, m)
	return m
}

// qpFamilies are the counter families of QPs: of every QP together, or of each.
type qpFamilies struct {
	txPackets, txBytes, rxPackets, rxBytes, retransmits, queued metric
	needless, timeouts, spurious, keepalives, acks, piggybacked metric
	naksSent, naksRecv, duplicates                              metric
}

func newQPFamilies(c *Collector, prefix, whose string, labels []string) qpFamilies {
	counter := func(name, help string, extra ...string) metric {
		return c.add(prefix+name, help+" ("+whose+").", prometheus.CounterValue, append(append([]string(nil), labels...), extra...))
	}
	return qpFamilies{
		txPackets:   counter("tx_packets_total", "Data packets sent, retransmissions included"),
		txBytes:     counter("tx_bytes_total", "Payload bytes of the data packets sent"),
		rxPackets:   counter("rx_packets_total", "New data packets accepted"),
		rxBytes:     counter("rx_bytes_total", "Payload bytes of the new data packets accepted"),
		retransmits: counter("retransmits_total", "Data packets sent again"),
		queued:      counter("retransmits_queued_total", "Packets queued for retransmission, by cause", "cause"),
		needless:    counter("needless_tail_probes_total", "Tail loss probes whose original had arrived"),
		timeouts:    counter("timeouts_total", "Retransmission timer expiries"),
		spurious:    counter("spurious_timeouts_total", "Retransmission timer expiries found spurious"),
		keepalives:  counter("keepalives_total", "Keepalive probes sent"),
		acks:        counter("acks_sent_total", "Acknowledgements sent in Ack packets"),
		piggybacked: counter("acks_piggybacked_total", "Acknowledgements carried by data packets"),
		naksSent:    counter("naks_sent_total", "Negative acknowledgements sent, by kind", "kind"),
		naksRecv:    counter("naks_received_total", "Negative acknowledgements received, by kind", "kind"),
		duplicates:  counter("duplicate_packets_total", "Data packets received more than once"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.all {
		ch <- m.desc
	}
}

// emit sends one sample of m.
func emit(ch chan<- prometheus.Metric, m metric, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(m.desc, m.typ, v, labels...)
}

func u(v uint64) float64 { return float64(v) }

// Collect implements prometheus.Collector: it reads the adapter's and its QPs' counters.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.Stats()
	e := s.Engine
	emit(ch, c.engines, float64(s.Engines))
	emit(ch, c.rxDatagrams, u(e.RxDatagrams))
	emit(ch, c.txDatagrams, u(e.TxDatagrams))
	for _, r := range []struct {
		reason string
		v      uint64
	}{{"malformed", e.Malformed}, {"no_qp", e.NoQP}, {"bad_source", e.BadSource}, {"bad_cookie", e.BadCookie},
		{"out_of_window", e.OutOfWindow}, {"cm", e.CMDropped}, {"half_open_full", e.HalfOpenFull}} {
		emit(ch, c.dropped, u(r.v), r.reason)
	}
	emit(ch, c.txRefused, u(e.TxRefused))
	emit(ch, c.bundlesSent, u(e.BundlesSent))
	emit(ch, c.multiSent, u(e.MultiBundlesSent))
	emit(ch, c.multiRecv, u(e.MultiBundlesReceived))
	emit(ch, c.bundlesRecv, u(e.BundlesReceived))
	emit(ch, c.bundledSent, u(e.BundledSent))
	emit(ch, c.bundledRecv, u(e.BundledReceived))
	emit(ch, c.forwarded, u(e.Forwarded))
	emit(ch, c.forwardDropped, u(e.ForwardDropped))
	emit(ch, c.forwardReceived, u(e.ForwardReceived))

	for _, q := range s.Queues {
		lv := []string{strconv.Itoa(q.Queue), strconv.Itoa(q.Engine)}
		l := q.Link
		emit(ch, c.linkRxPackets, u(l.RxPackets), lv...)
		emit(ch, c.linkRxBytes, u(l.RxBytes), lv...)
		emit(ch, c.linkTxPackets, u(l.TxPackets), lv...)
		emit(ch, c.linkTxBytes, u(l.TxBytes), lv...)
		emit(ch, c.linkRxDropped, u(l.RxDropped), lv...)
		emit(ch, c.linkTxDropped, u(l.TxDropped), lv...)
		emit(ch, c.linkTxErrors, u(l.TxErrors), lv...)
		emit(ch, c.linkZeroCopy, u(l.TxZeroCopy), lv...)
		emit(ch, c.linkKicks, u(l.Kicks), lv...)
		emit(ch, c.linkHeld, u(l.TxHeld), lv...)
		emit(ch, c.linkUnresolved, u(l.TxUnresolved), lv...)
		emit(ch, c.linkHoldOverflow, u(l.TxHoldOverflow), lv...)
		emit(ch, c.linkStamped, u(l.RxStamped), lv...)
		emit(ch, c.linkWait, float64(l.RxWaitNanos)/1e9, lv...)
		if k := q.Socket; k != nil {
			emit(ch, c.xskRxDropped, u(k.RxDropped), lv...)
			emit(ch, c.xskRxInvalid, u(k.RxInvalidDescs), lv...)
			emit(ch, c.xskTxInvalid, u(k.TxInvalidDescs), lv...)
			emit(ch, c.xskRingFull, u(k.RxRingFull), lv...)
			emit(ch, c.xskFillEmpty, u(k.RxFillRingEmpty), lv...)
			emit(ch, c.xskTxEmpty, u(k.TxRingEmptyDescs), lv...)
		}
	}

	if p := s.Steering; p != nil {
		for _, v := range []struct {
			verdict string
			n       uint64
		}{{"redirected", p.Redirected}, {"passed", p.Passed}, {"no_socket", p.NoSocket}, {"malformed", p.Malformed},
			{"fault_dropped", p.FaultDropped}} {
			emit(ch, c.xdpPackets, u(v.n), v.verdict)
		}
		emit(ch, c.xdpBytes, u(p.RedirectedBytes))
	}
	if n := s.Neighbours; n != nil {
		emit(ch, c.nbEntries, float64(n.Pending), "pending")
		emit(ch, c.nbEntries, float64(n.Failed), "failed")
		emit(ch, c.nbEntries, float64(n.Resolved), "resolved")
		emit(ch, c.nbResolving, float64(n.Resolving))
		emit(ch, c.nbRequests, u(n.Requests))
		emit(ch, c.nbDropped, u(n.RequestsDropped))
		emit(ch, c.nbResolutions, u(n.Resolutions))
		emit(ch, c.nbFailures, u(n.Failures))
		emit(ch, c.nbRefreshes, u(n.Refreshes))
		emit(ch, c.nbChanges, u(n.Changes))
		emit(ch, c.nbEvictions, u(n.Evictions))
		emit(ch, c.nbExpired, u(n.Expired))
		emit(ch, c.nbEventsLost, u(n.EventsLost))
	}

	m := s.Memory
	emit(ch, c.umemSize, float64(m.UMEMSize))
	emit(ch, c.umemFrames, float64(m.Frames))
	emit(ch, c.frameSize, float64(m.FrameSize))
	emit(ch, c.heapSize, float64(m.HeapSize))
	emit(ch, c.heapUsed, float64(m.HeapUsed))
	emit(ch, c.heapBuffers, float64(m.HeapBuffers))
	emit(ch, c.heapLargest, float64(m.HeapLargestFree))
	emit(ch, c.regions, float64(m.Regions), "registered")
	emit(ch, c.regions, float64(m.FastRegisterRegions), "fast_register")
	emit(ch, c.windows, float64(m.Windows))
	emit(ch, c.entriesMax, float64(m.MaxEntries))
	emit(ch, c.pinned, u(m.Pinned))

	emit(ch, c.qps, float64(s.QPs.Live))
	emit(ch, c.qpsCreated, u(s.QPs.Created))
	emit(ch, c.qpsClosed, u(s.QPs.Closed))
	c.adapterQPs.emit(ch, s.QPs.QPCounters)

	qps := c.a.QPStats()
	labelled := qps[:min(len(qps), c.max)]
	for i := range labelled {
		q := &labelled[i]
		qpn := strconv.FormatUint(uint64(q.QPN), 10)
		c.perQP.emit(ch, q.QPCounters, qpn)
		emit(ch, c.qpSRTT, q.SRTT/1e6, qpn)
		emit(ch, c.qpRTTVar, q.RTTVar/1e6, qpn)
		emit(ch, c.qpRTO, q.RTO/1e6, qpn)
		emit(ch, c.qpCwnd, float64(q.CongestionWindow), qpn)
		emit(ch, c.qpInFlight, float64(q.InFlight), qpn)
		peer := ""
		if q.Peer.IsValid() {
			peer = q.Peer.String()
		}
		emit(ch, c.qpInfo, 1, qpn, strconv.Itoa(q.Engine), q.State, peer)
	}
	rest := qps[len(labelled):]
	emit(ch, c.qpsUnlabelled, float64(len(rest)))
	if len(rest) > 0 {
		var sum ndk.QPCounters
		for i := range rest {
			sum = sum.Add(rest[i].QPCounters)
		}
		c.perQP.emit(ch, sum, "other")
	}
}

// emit sends the counters x of the families, with labels lv first.
func (f *qpFamilies) emit(ch chan<- prometheus.Metric, x ndk.QPCounters, lv ...string) {
	with := func(v string) []string { return append(append(make([]string, 0, len(lv)+1), lv...), v) }
	emit(ch, f.txPackets, u(x.TxPackets), lv...)
	emit(ch, f.txBytes, u(x.TxBytes), lv...)
	emit(ch, f.rxPackets, u(x.RxPackets), lv...)
	emit(ch, f.rxBytes, u(x.RxBytes), lv...)
	emit(ch, f.retransmits, u(x.Retransmits), lv...)
	r := x.RetransmitsQueued
	emit(ch, f.queued, u(r.Timer), with("timer")...)
	emit(ch, f.queued, u(r.Loss), with("loss")...)
	emit(ch, f.queued, u(r.TailProbe), with("tail_probe")...)
	emit(ch, f.queued, u(r.RNR), with("rnr")...)
	emit(ch, f.needless, u(x.NeedlessTailProbes), lv...)
	emit(ch, f.timeouts, u(x.Timeouts), lv...)
	emit(ch, f.spurious, u(x.SpuriousTimeouts), lv...)
	emit(ch, f.keepalives, u(x.KeepAlives), lv...)
	emit(ch, f.acks, u(x.AcksSent), lv...)
	emit(ch, f.piggybacked, u(x.AcksPiggybacked), lv...)
	for _, k := range []struct {
		m metric
		n ndk.NakCounts
	}{{f.naksSent, x.NaksSentBy}, {f.naksRecv, x.NaksReceivedBy}} {
		emit(ch, k.m, u(k.n.Sequence), with("sequence")...)
		emit(ch, k.m, u(k.n.RNR), with("rnr")...)
		emit(ch, k.m, u(k.n.Access), with("access")...)
		emit(ch, k.m, u(k.n.InvalidRequest), with("invalid_request")...)
		emit(ch, k.m, u(k.n.RemoteOperation), with("remote_operation")...)
		emit(ch, k.m, u(k.n.InvalidateToken), with("invalidate_token")...)
		emit(ch, k.m, u(k.n.Other), with("other")...)
	}
	emit(ch, f.duplicates, u(x.Duplicates), lv...)
}
