package transport

// owner is what a packet of our stream carries, as a value: the packet of a work request
// (its sequence number in the QP's request sequence) or of a read response (the slot of
// its read job), and the byte offset of the packet's payload in it. The sender records it
// with the packet (ack.PacketInfo.Owner) and hands it back on acknowledgement, loss,
// timeout and refusal; the QP alone dispatches on it, to the requester or the responder.
type owner struct {
	job bool   // a read response of read job idx; else a packet of work request idx
	idx uint32 // the work request's sequence number (31 bits), or the read job's slot
	off uint32 // the payload's byte offset in the request's or the response's bytes
}

// wrOwner is the owner of work request seq's packet at byte offset off.
func wrOwner(seq, off uint32) owner { return owner{idx: seq & seqMask, off: off} }

// jobOwner is the owner of read job i's response packet at byte offset off.
func jobOwner(i int, off uint32) owner { return owner{job: true, idx: uint32(i) & seqMask, off: off} }

// seqMask keeps the 31 bits of a sequence number or slot that an owner (and a zero-copy
// cookie) carries.
const seqMask = 0x7fffffff

// seq is the sequence number of the work request a failure of o's packet is reported on,
// or -1 for a read response (it belongs to no request of ours).
func (o owner) seq() int64 {
	if o.job {
		return -1
	}
	return int64(o.idx)
}

// cookie is the link's cookie of a zero-copy packet that o's QP (number qpn) sent: the QPN
// in bits 32-63, the job flag in bit 31 and the request's sequence number or the job's slot
// in bits 0-30 (the offset is left out: a request or job counts its packets). The link hands
// it back through TxDone; cookieOwner is its inverse. This is the one place where an owner
// is packed into bits, because the link's contract carries a uint64.
func (o owner) cookie(qpn uint32) uint64 {
	c := uint64(qpn)<<32 | uint64(o.idx&seqMask)
	if o.job {
		c |= 1 << 31
	}
	return c
}

// cookieOwner splits a zero-copy cookie (owner.cookie) into its QPN and owner.
func cookieOwner(c uint64) (qpn uint32, o owner) {
	return uint32(c >> 32), owner{job: c&(1<<31) != 0, idx: uint32(c) & seqMask}
}
