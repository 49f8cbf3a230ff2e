package congestion

import (
	"fmt"
	"math"
)

// badField makes a configuration error naming the field, its value and what is wanted.
type badField func(field string, v any, want string) error

// configError returns the badField of a controller's configuration (name: "swift", "delay").
func configError(name string) badField {
	return func(field string, v any, want string) error {
		return fmt.Errorf("congestion: %s config: %s = %v, want %s: %w", name, field, v, want, ErrInvalidConfig)
	}
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// checkWindow checks the fields every window-based configuration has: the MSS and the
// initial, smallest and largest windows in packets.
func checkWindow(bad badField, mss int, initial, minCwnd, maxCwnd float64) error {
	switch {
	case mss < 1 || mss > MaxMSS:
		return bad("MSS", mss, fmt.Sprintf("1..%d", MaxMSS))
	case !finite(minCwnd) || minCwnd <= 0:
		return bad("MinCwnd", minCwnd, "> 0")
	case !finite(maxCwnd) || maxCwnd < minCwnd:
		return bad("MaxCwnd", maxCwnd, ">= MinCwnd")
	case maxCwnd*float64(mss) > MaxWindowBytes:
		return bad("MaxCwnd", maxCwnd, fmt.Sprintf("<= MaxWindowBytes/MSS = %d", MaxWindowBytes/mss))
	case !finite(initial) || initial < minCwnd || initial > maxCwnd:
		return bad("InitialCwnd", initial, "in [MinCwnd, MaxCwnd]")
	}
	return nil
}

// controlFields are the fields Swift's and Delay's configurations share beyond the window:
// the increase and decrease, the target and its flow scaling, the timeouts.
type controlFields struct {
	AI, Beta, MaxMDF     float64
	BaseTarget, FSRange  int64
	FSMinCwnd, FSMaxCwnd float64
	RetxResetThreshold   int
	InitialRTT           int64
}

// check reports the first invalid one of f.
func (f controlFields) check(bad badField) error {
	switch {
	case !finite(f.AI) || f.AI <= 0:
		return bad("AI", f.AI, "> 0")
	case !finite(f.Beta) || f.Beta <= 0 || f.Beta > 1:
		return bad("Beta", f.Beta, "in (0, 1]")
	case !finite(f.MaxMDF) || f.MaxMDF <= 0 || f.MaxMDF >= 1:
		return bad("MaxMDF", f.MaxMDF, "in (0, 1)")
	case f.BaseTarget < 1 || f.BaseTarget > MaxDelay:
		return bad("BaseTarget", f.BaseTarget, fmt.Sprintf("1..%d ns", MaxDelay))
	case f.FSRange < 0 || f.FSRange > MaxDelay:
		return bad("FSRange", f.FSRange, fmt.Sprintf("0..%d ns", MaxDelay))
	case !finite(f.FSMinCwnd) || f.FSMinCwnd <= 0:
		return bad("FSMinCwnd", f.FSMinCwnd, "> 0")
	case !finite(f.FSMaxCwnd) || f.FSMaxCwnd <= f.FSMinCwnd:
		return bad("FSMaxCwnd", f.FSMaxCwnd, "> FSMinCwnd")
	case f.RetxResetThreshold < 1:
		return bad("RetxResetThreshold", f.RetxResetThreshold, ">= 1")
	case f.InitialRTT < 1 || f.InitialRTT > MaxDelay:
		return bad("InitialRTT", f.InitialRTT, fmt.Sprintf("1..%d ns", MaxDelay))
	}
	return nil
}
