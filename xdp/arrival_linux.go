package xdp

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"
)

// Arrival stamps: the XDP program (bpf/steer.c, struct arrival) writes, in front of every
// datagram it redirects to a socket, the CLOCK_MONOTONIC time it ran at and a check word
// (that time XOR arrivalCheck), as XDP metadata, which AF_XDP delivers in the frame just
// before the data. The link counts how long each datagram waited between that moment and
// the Receive that returned it (link.Stats RxStamped, RxWaitNanos): the time it sat in the
// RX ring while the engine was away (transmitting, descheduled) or busy with the datagrams
// ahead.
const (
	arrivalSize  = 16
	arrivalCheck = 0x786470206e64c0de
	// maxArrivalSkew is how far in the future a stamp may lie (the two clocks' offset is
	// measured once, to within the time of a clock read): closer ones count as 0.
	maxArrivalSkew = int64(10 * time.Microsecond)
	// maxWaited is the longest wait believed: a stamp further back is not one.
	maxWaited = int64(time.Second)
)

// monoClock reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns, through Go's
// monotonic clock (the same clock, read through the vDSO): the offset between the two
// readings is measured once.
type monoClock struct {
	base   time.Time
	offset int64
}

// newMonoClock measures the offset of CLOCK_MONOTONIC from a Go time base, between two
// readings of the latter.
func newMonoClock() monoClock {
	c := monoClock{base: time.Now()}
	var ts unix.Timespec
	t0 := int64(time.Since(c.base))
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return monoClock{} // no stamp is then believed (now returns 0)
	}
	t1 := int64(time.Since(c.base))
	c.offset = ts.Nano() - (t0+t1)/2
	return c
}

// now returns CLOCK_MONOTONIC in ns, or 0 if its offset could not be measured.
func (c *monoClock) now() int64 {
	if c.offset == 0 {
		return 0
	}
	return int64(time.Since(c.base)) + c.offset
}

// takeArrival reads the arrival stamp in front of the datagram whose first byte is at
// addr of mem (frames of fsize bytes) and clears its check word, so that a frame used
// again without a new stamp shows none. It reports false when there is none: no room in
// front of the data within the frame, or a check word that does not match.
func takeArrival(mem []byte, addr, fsize uint64) (int64, bool) {
	if addr&(fsize-1) < arrivalSize || addr > uint64(len(mem)) {
		return 0, false
	}
	st := mem[addr-arrivalSize : addr]
	at := binary.NativeEndian.Uint64(st[0:8])
	check := binary.NativeEndian.Uint64(st[8:16])
	if at == 0 || check != at^arrivalCheck {
		return 0, false
	}
	binary.NativeEndian.PutUint64(st[8:16], 0)
	return int64(at), true
}

// waitedSince returns how long before now (CLOCK_MONOTONIC ns) a datagram stamped at
// arrived, or false for a stamp that cannot be right: later than now beyond the clocks'
// skew, or older than maxWaited. A stamp just ahead of now counts as no wait.
func waitedSince(now, arrived int64) (int64, bool) {
	w := now - arrived
	if now == 0 || w < -maxArrivalSkew || w > maxWaited {
		return 0, false
	}
	return max(w, 0), true
}
