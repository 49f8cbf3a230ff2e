package congestion

import "math"

// maxPacingGap bounds the gap NextSendTime puts between two packets, in ns.
const maxPacingGap = 100 * MaxDelay

// Swift is a delay-based AIMD congestion controller after Swift (Kumar et al., SIGCOMM
// 2020; see the package documentation). It keeps a fractional window in packets of MSS
// bytes, grows it additively while the fabric delay is below a target, shrinks it
// multiplicatively when the delay is above the target or a loss or timeout happens (at
// most once per round trip), and paces packets when the window is below one packet.
//
// A Swift belongs to one QP direction and is driven by the engine goroutine; it is not
// safe for concurrent use. Create it with NewSwift.
type Swift struct {
	cfg    SwiftConfig
	mss    float64 // cfg.MSS as a float
	target target

	cwnd float64 // packets, always within [cfg.MinCwnd, cfg.MaxCwnd]

	haveSample bool
	lastDelay  int64 // ns, last valid sample, clamped to [1, MaxDelay]
	srtt       int64 // ns, moving average of samples with gain 1/8

	// The path's unloaded delay: the minimum sample of the current and of the previous
	// half of BaseDelayWindow (a windowed minimum that forgets a path that got longer).
	minCur, minPrev int64 // ns; 0 means none yet
	minEpoch        int64 // ns, start of the current half

	decreased    bool  // lastDecrease is valid
	lastDecrease int64 // ns, time of the last window decrease

	retx int // consecutive timeouts since the last ack or loss event
	// the window before the first timeout of the current run, for OnSpuriousTimeout
	undoCwnd  float64
	undoValid bool

	sentAny  bool
	lastSend int64 // ns, time of the last OnSent

	stats Stats // counters only; the state fields are filled in by Stats
}

var _ Controller = (*Swift)(nil)

// NewSwift returns a Swift controller with configuration cfg, or an error wrapping
// ErrInvalidConfig that names the first invalid field.
func NewSwift(cfg SwiftConfig) (*Swift, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Swift{
		cfg:    cfg,
		mss:    float64(cfg.MSS),
		target: newTarget(&cfg),
		cwnd:   cfg.InitialCwnd,
	}, nil
}

// Config returns the configuration s was created with.
func (s *Swift) Config() SwiftConfig { return s.cfg }

// Window returns the congestion window in bytes, but never less than one MSS: below one
// packet the window is enforced by NextSendTime instead (one packet in flight, paced).
func (s *Swift) Window() int {
	if s.cwnd < 1 {
		return s.cfg.MSS
	}
	return int(s.cwnd * s.mss)
}

// OnSent records bytes sent at now; Swift uses it only for pacing and counters.
func (s *Swift) OnSent(now int64, bytes int) {
	if bytes <= 0 {
		return
	}
	s.stats.SentBytes += uint64(bytes)
	s.sentAny = true
	s.lastSend = now
}

// OnAck applies one acknowledgement of acked bytes with fabric delay sample delay (ns).
// A delay below the target delay grows the window by AI packets per round trip (by
// AI*acked/MSS/cwnd packets, or AI*acked/MSS while cwnd < 1). A delay above the target
// shrinks it by the factor max(1 - Beta*(delay-target)/delay, 1 - MaxMDF), unless the
// window already decreased within the last round trip. Any ack ends a run of timeouts.
//
// delay <= 0 means no sample: the bytes are counted but the window is left alone.
// Samples above MaxDelay are clamped to MaxDelay. acked <= 0 is ignored.
func (s *Swift) OnAck(now int64, acked int, delay int64) {
	if acked <= 0 {
		return
	}
	s.stats.AckedBytes += uint64(acked)
	s.retx = 0
	if delay <= 0 {
		return
	}
	delay = min(delay, MaxDelay)
	s.sample(delay)
	s.learnBase(now, delay)

	t := s.targetDelay()
	d := float64(delay)
	switch {
	case d < t:
		pkts := float64(acked) / s.mss
		if s.cwnd >= 1 {
			s.cwnd += s.cfg.AI * pkts / s.cwnd
		} else {
			s.cwnd += s.cfg.AI * pkts
		}
		s.cwnd = min(s.cwnd, s.cfg.MaxCwnd)
	case d > t && s.canDecrease(now):
		f := max(1-s.cfg.Beta*(d-t)/d, 1-s.cfg.MaxMDF)
		s.decrease(now, f, &s.stats.DelayDecreases)
	}
}

// OnLoss applies one loss event: the window shrinks by MaxMDF unless it already
// decreased within the last round trip. lost is only counted (negative counts as 0).
func (s *Swift) OnLoss(now int64, lost int) {
	s.stats.LossEvents++
	if lost > 0 {
		s.stats.LostBytes += uint64(lost)
	}
	s.retx = 0
	if s.canDecrease(now) {
		s.decrease(now, 1-s.cfg.MaxMDF, &s.stats.LossDecreases)
	}
}

// OnTimeout applies one retransmission timeout. The RetxResetThreshold-th consecutive
// timeout (and every later one) without an ack or loss event in between sets the window
// to MinCwnd; earlier ones shrink it by MaxMDF unless it already decreased within the
// last round trip.
func (s *Swift) OnTimeout(now int64) {
	s.stats.Timeouts++
	if s.retx == 0 {
		s.undoCwnd, s.undoValid = s.cwnd, true
	}
	if s.retx < s.cfg.RetxResetThreshold {
		s.retx++
	}
	if s.retx >= s.cfg.RetxResetThreshold {
		s.stats.WindowResets++
		s.cwnd = s.cfg.MinCwnd
		s.decreased, s.lastDecrease = true, now
		return
	}
	if s.canDecrease(now) {
		s.decrease(now, 1-s.cfg.MaxMDF, &s.stats.RTODecreases)
	}
}

// OnSpuriousTimeout restores the window from before the run of timeouts that proved
// spurious; without one to undo it only counts.
func (s *Swift) OnSpuriousTimeout(now int64) {
	s.stats.SpuriousTimeouts++
	if !s.undoValid {
		return
	}
	s.cwnd = max(s.cwnd, s.undoCwnd)
	s.undoValid = false
	s.retx = 0
}

// NextSendTime returns now while the window is at least one packet. Below one packet it
// paces: a packet of bytes may leave SmoothedDelay*(bytes/MSS)/cwnd after the previous
// OnSent (so MSS-sized packets leave cwnd per round trip), or now if that time has
// passed. The gap is capped at 100*MaxDelay; bytes <= 0 needs no gap.
func (s *Swift) NextSendTime(now int64, bytes int) int64 {
	if s.cwnd >= 1 || !s.sentAny || bytes <= 0 {
		return now
	}
	gap := s.pacingGap(float64(bytes))
	return max(now, satAdd(s.lastSend, gap))
}

// Stats returns a snapshot of s.
func (s *Swift) Stats() Stats {
	st := s.stats
	st.Window = s.Window()
	st.Cwnd = int(s.cwnd * s.mss)
	st.TargetDelay = int64(s.targetDelay())
	st.LastDelay = s.lastDelay
	st.SmoothedDelay = s.srtt
	if s.cwnd < 1 {
		st.PacingInterval = s.pacingGap(s.mss)
	}
	return st
}

// sample folds one valid delay sample (1..MaxDelay ns) into the estimates.
// learnBase keeps the windowed minimum delay (the path's unloaded delay).
func (s *Swift) learnBase(now, delay int64) {
	w := s.cfg.BaseDelayWindow
	if w == 0 {
		return
	}
	if now-s.minEpoch >= w/2 || now < s.minEpoch {
		s.minPrev, s.minCur, s.minEpoch = s.minCur, 0, now
	}
	if s.minCur == 0 || delay < s.minCur {
		s.minCur = delay
	}
}

// baseDelay is the learned unloaded delay of the path, 0 when not learning or not yet known.
func (s *Swift) baseDelay() int64 {
	switch {
	case s.minPrev == 0:
		return s.minCur
	case s.minCur == 0:
		return s.minPrev
	}
	return min(s.minCur, s.minPrev)
}

// targetDelay is the target for the current window: the configured target (with flow
// scaling), above the path's learned unloaded delay when learning.
func (s *Swift) targetDelay() float64 {
	return s.target.at(s.cwnd) + float64(s.baseDelay())
}

func (s *Swift) sample(delay int64) {
	s.lastDelay = delay
	if !s.haveSample {
		s.haveSample = true
		s.srtt = delay
		return
	}
	s.srtt += (delay - s.srtt) / 8
}

// rtt returns the round-trip time, in ns, that limits decreases to one per round trip: the
// larger of the smoothed and the last sample, so a growing queue never lets decreases come
// faster than their effect can be seen.
func (s *Swift) rtt() int64 {
	if !s.haveSample {
		return s.cfg.InitialRTT
	}
	return max(s.srtt, s.lastDelay)
}

// canDecrease reports whether a round trip has passed since the last decrease. Time is
// assumed not to go backwards; if it does, decreases wait until it passes the last one.
func (s *Swift) canDecrease(now int64) bool {
	return !s.decreased || now >= satAdd(s.lastDecrease, s.rtt())
}

// decrease multiplies the window by factor (< 1), clamps it to MinCwnd, and if it
// actually shrank, starts a new once-per-round-trip period and bumps counter.
func (s *Swift) decrease(now int64, factor float64, counter *uint64) {
	prev := s.cwnd
	s.cwnd = max(s.cwnd*factor, s.cfg.MinCwnd)
	if s.cwnd < prev {
		s.decreased, s.lastDecrease = true, now
		*counter++
	}
}

// pacingGap returns the time, in ns, a packet of bytes occupies at the current window
// and round trip: rtt*(bytes/MSS)/cwnd, capped at maxPacingGap.
func (s *Swift) pacingGap(bytes float64) int64 {
	rtt := s.cfg.InitialRTT
	if s.haveSample {
		rtt = s.srtt
	}
	gap := float64(rtt) * (bytes / s.mss) / s.cwnd
	if !(gap < float64(maxPacingGap)) { // also catches NaN and +Inf
		return maxPacingGap
	}
	return int64(gap)
}

// satAdd returns a+b for b >= 0, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
