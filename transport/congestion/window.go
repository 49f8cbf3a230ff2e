package congestion

// window is what Swift and Delay share: a fractional window in packets of MSS bytes, the
// delay samples it is steered by (the last, the smoothed, a windowed minimum), the clock
// that allows one decrease per round trip, and the pacing below one packet. Each
// controller embeds one and decides when to grow or cut it.
type window struct {
	mssBytes   int     // the configured MSS
	mss        float64 // the same, as a float
	minCwnd    float64 // packets
	initialRTT int64   // ns: the round trip before the first sample
	cwnd       float64 // packets, within the controller's [MinCwnd, MaxCwnd]

	have bool  // a sample arrived
	last int64 // ns, the last valid sample, clamped to [1, MaxDelay]
	srtt int64 // ns, moving average of the samples with gain 1/8

	// The path's unloaded delay: the minimum sample of the current and of the previous
	// half of a window of time (a windowed minimum that forgets a path that got longer).
	minCur, minPrev int64 // ns; 0 means none yet
	minEpoch        int64 // ns, start of the current half

	decreased    bool  // lastDecrease is valid
	lastDecrease int64 // ns, time of the last window decrease

	sentAny  bool
	lastSend int64 // ns, time of the last OnSent
}

func newWindow(mss int, initial, minCwnd float64, initialRTT int64) window {
	return window{mssBytes: mss, mss: float64(mss), minCwnd: minCwnd, initialRTT: initialRTT, cwnd: initial}
}

// Window returns the congestion window in bytes, but never less than one MSS: below one
// packet the window is enforced by NextSendTime instead (one packet in flight, paced).
func (w *window) Window() int {
	if w.cwnd < 1 {
		return w.mssBytes
	}
	return int(w.cwnd * w.mss)
}

// NextSendTime returns now while the window is at least one packet. Below one packet it
// paces: a packet of bytes may leave SmoothedDelay*(bytes/MSS)/cwnd after the previous
// send (so MSS-sized packets leave cwnd per round trip), or now if that time has passed.
// The gap is capped at 100*MaxDelay; bytes <= 0 needs no gap.
func (w *window) NextSendTime(now int64, bytes int) int64 {
	if w.cwnd >= 1 || !w.sentAny || bytes <= 0 {
		return now
	}
	return max(now, satAdd(w.lastSend, w.pacingGap(float64(bytes))))
}

// sent records a send at now, for pacing.
func (w *window) sent(now int64) { w.sentAny, w.lastSend = true, now }

// sample folds one valid delay sample (1..MaxDelay ns) into the last and smoothed delay.
func (w *window) sample(delay int64) {
	w.last = delay
	if !w.have {
		w.have, w.srtt = true, delay
		return
	}
	w.srtt += (delay - w.srtt) / 8
}

// learnMin folds a sample into the minimum over the last span ns. A now before the
// current half began (a clock reading taken before another that was already seen, as
// when one poller was descheduled after reading the clock and another polled meanwhile)
// counts in the current half: it does not start a new one, which forgot the minimum
// whenever it happened (several times a second on the delay line's loaded bed).
func (w *window) learnMin(now, delay, span int64) {
	if now-w.minEpoch >= span/2 {
		w.minPrev, w.minCur, w.minEpoch = w.minCur, 0, now
	}
	if w.minCur == 0 || delay < w.minCur {
		w.minCur = delay
	}
}

// baseDelay is the learned unloaded delay of the path, 0 when none is known.
func (w *window) baseDelay() int64 {
	switch {
	case w.minPrev == 0:
		return w.minCur
	case w.minCur == 0:
		return w.minPrev
	}
	return min(w.minCur, w.minPrev)
}

// rtt returns the round-trip time, in ns, that limits decreases to one per round trip: the
// larger of the smoothed and the last sample, so a growing queue never lets decreases come
// faster than their effect can be seen.
func (w *window) rtt() int64 {
	if !w.have {
		return w.initialRTT
	}
	return max(w.srtt, w.last)
}

// canDecrease reports whether a round trip has passed since the last decrease. Time is
// assumed not to go backwards; if it does, decreases wait until it passes the last one.
func (w *window) canDecrease(now int64) bool {
	return !w.decreased || now >= satAdd(w.lastDecrease, w.rtt())
}

// decrease multiplies the window by factor (< 1), clamps it to MinCwnd, and if it
// actually shrank, starts a new once-per-round-trip period and bumps counter.
func (w *window) decrease(now int64, factor float64, counter *uint64) {
	prev := w.cwnd
	w.cwnd = max(w.cwnd*factor, w.minCwnd)
	if w.cwnd < prev {
		w.decreased, w.lastDecrease = true, now
		*counter++
	}
}

// pacingGap returns the time, in ns, a packet of bytes occupies at the current window
// and round trip: rtt*(bytes/MSS)/cwnd, capped at maxPacingGap.
func (w *window) pacingGap(bytes float64) int64 {
	rtt := w.initialRTT
	if w.have {
		rtt = w.srtt
	}
	gap := float64(rtt) * (bytes / w.mss) / w.cwnd
	if !(gap < float64(maxPacingGap)) { // also catches NaN and +Inf
		return maxPacingGap
	}
	return int64(gap)
}

// fill copies the window's state into st (counters are the controller's).
func (w *window) fill(st *Stats) {
	st.Window = w.Window()
	st.Cwnd = int(w.cwnd * w.mss)
	st.LastDelay = w.last
	st.SmoothedDelay = w.srtt
	if w.cwnd < 1 {
		st.PacingInterval = w.pacingGap(w.mss)
	}
}
