package simlink

// PathStats are the cumulative counters of one path (one direction from one host to
// another), or, from Network.Stats, of the whole network. Counts are of datagrams (a
// duplicate is a second copy of one datagram); bytes are payload bytes.
//
// Every datagram Send accepts for a path is counted in Sent and then either delivered (or
// still queued), or counted in exactly one Dropped field; each extra copy is counted in
// Duplicated and then, like the original, delivered or dropped:
//
//	Sent + Duplicated = Delivered + queued + DroppedLoss + DroppedBurst + DroppedPartition
//	                    + DroppedQueue + DroppedMTU + DroppedRxFull + DroppedClosed
//
// (the second copy of a datagram dropped before duplication is never made).
type PathStats struct {
	// Sent and SentBytes count the datagrams Send accepted for the path.
	Sent, SentBytes uint64
	// Delivered and DeliveredBytes count the copies Receive returned.
	Delivered, DeliveredBytes uint64
	// Duplicated counts the extra copies made (Impairments.Duplicate).
	Duplicated uint64
	// Corrupted counts the copies queued with flipped bits (Impairments.Corrupt).
	Corrupted uint64
	// Reordered counts the copies scheduled to arrive before a copy queued earlier on the
	// same path: each overtakes at least one predecessor.
	Reordered uint64

	// DroppedLoss counts random loss (Impairments.Loss).
	DroppedLoss uint64
	// DroppedBurst counts Gilbert–Elliott loss (Impairments.Burst).
	DroppedBurst uint64
	// DroppedPartition counts datagrams sent into a partition, or in flight when it began.
	DroppedPartition uint64
	// DroppedQueue counts tail drops at the bandwidth queue (Impairments.QueueBytes).
	DroppedQueue uint64
	// DroppedMTU counts datagrams longer than the path MTU (Impairments.MTU).
	DroppedMTU uint64
	// DroppedRxFull counts copies refused because the receiver had Config.RxQueue
	// datagrams queued already.
	DroppedRxFull uint64
	// DroppedClosed counts copies sent to a closed link, or queued at one when it closed.
	DroppedClosed uint64
	// DroppedUnknown counts datagrams sent to an address no host has. They belong to no
	// path, so only Network.Stats reports them.
	DroppedUnknown uint64

	// TooLarge counts datagrams Send refused with link.ErrTooLarge (longer than
	// MaxPayload, empty, or with too many segments). They are not in Sent.
	TooLarge uint64
}

// Dropped returns the sum of the Dropped counters.
func (s *PathStats) Dropped() uint64 {
	return s.DroppedLoss + s.DroppedBurst + s.DroppedPartition + s.DroppedQueue +
		s.DroppedMTU + s.DroppedRxFull + s.DroppedClosed + s.DroppedUnknown
}

// add accumulates o into s.
func (s *PathStats) add(o *PathStats) {
	s.Sent += o.Sent
	s.SentBytes += o.SentBytes
	s.Delivered += o.Delivered
	s.DeliveredBytes += o.DeliveredBytes
	s.Duplicated += o.Duplicated
	s.Corrupted += o.Corrupted
	s.Reordered += o.Reordered
	s.DroppedLoss += o.DroppedLoss
	s.DroppedBurst += o.DroppedBurst
	s.DroppedPartition += o.DroppedPartition
	s.DroppedQueue += o.DroppedQueue
	s.DroppedMTU += o.DroppedMTU
	s.DroppedRxFull += o.DroppedRxFull
	s.DroppedClosed += o.DroppedClosed
	s.DroppedUnknown += o.DroppedUnknown
	s.TooLarge += o.TooLarge
}
