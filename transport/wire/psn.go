package wire

// PSN is a packet sequence number: a free-running 32-bit counter that wraps. Comparisons are
// only meaningful between PSNs less than 2^31 apart (serial number arithmetic, RFC 1982;
// exactly 2^31 apart the order is undefined); every window the transport keeps is far smaller.
type PSN uint32

// Add returns p advanced by n (wrapping).
func (p PSN) Add(n uint32) PSN { return p + PSN(n) }

// Sub returns the distance from q to p: how far p is ahead of q (wrapping, so a p behind q
// gives a large value; use Less first when the order is unknown).
func (p PSN) Sub(q PSN) uint32 { return uint32(p - q) }

// Less reports whether p comes before q.
func (p PSN) Less(q PSN) bool { return int32(p-q) < 0 }

// LessEq reports whether p comes before q or equals it.
func (p PSN) LessEq(q PSN) bool { return int32(p-q) <= 0 }

// InWindow reports whether p lies in the window of n PSNs starting at base:
// base <= p < base+n.
func (p PSN) InWindow(base PSN, n uint32) bool { return uint32(p-base) < n }

// Max returns the later of p and q.
func (p PSN) Max(q PSN) PSN {
	if p.Less(q) {
		return q
	}
	return p
}
