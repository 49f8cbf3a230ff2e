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
