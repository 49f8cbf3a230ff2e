package transport

// Internals the external tests (package transport_test) look at.

// CMTableSizes returns the sizes of e's connection-management tables: incoming requests
// half open, established incoming connections remembered, outgoing attempts (waiting or
// lingering), graceful disconnects in progress. Call it on the goroutine that polls e.
func CMTableSizes(e *Engine) (halfOpen, recent, conns, discs int) {
	c := &e.cm
	return len(c.halfOpen), len(c.recent), len(c.conns), len(c.discs)
}

// The bounds of the tables CMTableSizes reports and of the RNR retry delay.
const (
	MaxRecent    = maxRecent
	MaxLingering = maxLingering
	MaxRNRDelay  = maxRNRDelay
)

// SumGroupStats is GroupStats.add of the two, for the test that every counter is summed.
func SumGroupStats(a, b GroupStats) GroupStats {
	a.add(b)
	return a
}
