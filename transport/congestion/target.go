package congestion

import "math"

// target computes Swift's target delay for a window (the paper's §3.5, with one hop):
//
//	target(cwnd) = base + hops*hopScale + clamp(alpha/sqrt(cwnd) + beta, 0, fsRange)
//
// alpha and beta are chosen so that the flow-scaling term is fsRange at fsMinCwnd and 0 at
// fsMaxCwnd. Smaller windows, the mark of many flows sharing a bottleneck, get a larger
// target: they grow while larger windows shrink, which pulls competing flows towards equal
// shares, and the standing queue grows only with the square root of the number of flows.
type target struct {
	fixed   float64 // ns: base target plus hop scaling
	fsRange float64 // ns
	alpha   float64 // ns * sqrt(packets)
	beta    float64 // ns
}

func newTarget(c *SwiftConfig) target {
	const hops = 1 // no hop count on our wire; see SwiftConfig.HopScale
	t := target{
		fixed:   float64(c.BaseTarget) + hops*float64(c.HopScale),
		fsRange: float64(c.FSRange),
	}
	if c.FSRange > 0 {
		t.alpha = t.fsRange / (1/math.Sqrt(c.FSMinCwnd) - 1/math.Sqrt(c.FSMaxCwnd))
		t.beta = -t.alpha / math.Sqrt(c.FSMaxCwnd)
	}
	return t
}

// at returns the target delay in ns for a window of cwnd packets (cwnd > 0).
func (t *target) at(cwnd float64) float64 {
	if t.alpha == 0 {
		return t.fixed
	}
	fs := t.alpha/math.Sqrt(cwnd) + t.beta
	return t.fixed + min(max(fs, 0), t.fsRange)
}
