package compare

import "time"

// Bounds of fi_pingpong's iterations.
const (
	fabricMinIters = 10
	fabricMaxIters = 20000
	// fabricGuessUS is the round trip assumed before any was measured, in µs.
	fabricGuessUS = 300.0
	// fabricSlowBytesPerUS is the bandwidth assumed to grow a round trip from one size to
	// the next (1 Gbit/s, below what any provider did here): a larger size gets fewer
	// iterations rather than too many.
	fabricSlowBytesPerUS = 125.0
)

// fabricIters returns the iterations of an fi_pingpong run at size meant to take about
// target: target over the round trip known at that size (knownOK), else over the previous
// size's round trip (prev µs at prevSize, 0 if none) plus the time the extra bytes take
// both ways at 1 Gbit/s, else over fabricGuessUS; within [fabricMinIters, fabricMaxIters],
// and in whole thousands from 1000 up, since fi_pingpong prints counts that way ("3k") and
// bench/tools checks the count it printed.
func fabricIters(target time.Duration, size int, known float64, knownOK bool, prev float64, prevSize int) int {
	guess := known
	if !knownOK {
		guess = fabricGuessUS
		if prev > 0 {
			guess = prev + 2*float64(max(size-prevSize, 0))/fabricSlowBytesPerUS
		}
	}
	n := int(float64(target.Microseconds()) / max(guess, 1))
	n = min(max(n, fabricMinIters), fabricMaxIters)
	if n >= 1000 {
		n = n / 1000 * 1000
	}
	return n
}
