package congestion

import "errors"

// Controller decides how many bytes one direction of a queue pair may have in flight
// and, optionally, when its next packet may leave.
//
// The engine owns one Controller per QP direction (requester data, READ responses) and
// calls it from the engine goroutine only: a Controller is not safe for concurrent use.
// Every method takes the current time as an argument; no implementation reads a clock.
// Times are monotonic int64 nanoseconds, sizes are payload bytes. No method panics on
// any argument: out-of-range values are ignored or clamped as each method documents.
type Controller interface {
	// Window returns the number of payload bytes the sender may have in flight now.
	// It is always at least one byte.
	Window() int
	// OnSent records that bytes of data left at now (first transmissions and
	// retransmissions alike). Non-positive bytes are ignored.
	OnSent(now int64, bytes int)
	// OnAck records acked newly acknowledged bytes, with delay the fabric delay in
	// nanoseconds (round-trip time minus the time the receiver held the ack), or 0 when
	// this ack gave no valid sample (for example it acknowledged a retransmission, Karn's
	// rule). Non-positive acked is ignored; a negative delay counts as no sample.
	OnAck(now int64, acked int, delay int64)
	// OnLoss records one detected loss event (selective loss detection) of lost bytes.
	// The engine calls it once per event, not once per lost packet.
	OnLoss(now int64, lost int)
	// OnTimeout records that the retransmission timer fired at now.
	OnTimeout(now int64)
	// OnSpuriousTimeout reports that the timeouts since the last acknowledgement were
	// spurious: the timestamp echo proved the original transmission had arrived. The
	// controller undoes what they did to the window.
	OnSpuriousTimeout(now int64)
	// NextSendTime returns the earliest time, in nanoseconds, at which the next packet,
	// of bytes payload bytes, may leave. It returns now when no pacing applies.
	NextSendTime(now int64, bytes int) int64
	// Stats returns a snapshot of the controller's state and counters.
	Stats() Stats
}

// Stats is a snapshot of a Controller for counters and debugging. Fields an
// implementation does not track are zero.
type Stats struct {
	Window             int    // bytes: what Window returns
	Cwnd               int    // bytes: the congestion window itself; below MSS it is enforced by pacing
	TargetDelay        int64  // ns: the delay the controller currently steers towards
	BaseDelay          int64  // ns: the path's unloaded delay as learned (0: not learned)
	SlowStart          bool   // the window is in slow start
	Competitive        bool   // competing with flows that keep the queue full: delay ignored, loss rules
	LastDelay          int64  // ns: the last valid delay sample (0 before the first)
	SmoothedDelay      int64  // ns: moving average of delay samples (0 before the first)
	PacingInterval     int64  // ns: gap between MSS-sized packets when pacing, 0 when not pacing
	DelayDecreases     uint64 // multiplicative decreases caused by delay above target
	LossDecreases      uint64 // multiplicative decreases caused by OnLoss
	RTODecreases       uint64 // multiplicative decreases caused by OnTimeout
	WindowResets       uint64 // times repeated timeouts reset the window to its minimum
	Timeouts           uint64 // OnTimeout calls
	LossEvents         uint64 // OnLoss calls
	RandomLosses       uint64 // loss events taken as random loss (no decrease)
	SpuriousTimeouts   uint64 // OnSpuriousTimeout calls
	CompetitiveEntries uint64 // times the controller started competing with buffer-filling flows
	LowSamples         uint64 // delay samples below the learned base taken above their face value: a stale clock may have made them short
	SentBytes          uint64 // sum of OnSent bytes
	AckedBytes         uint64 // sum of OnAck acked bytes
	LostBytes          uint64 // sum of OnLoss lost bytes
}

// ErrInvalidConfig is wrapped by every configuration error a constructor in this package
// returns; test for it with errors.Is.
var ErrInvalidConfig = errors.New("invalid congestion control config")
