package testbed

// LossStats count what a router's loss program (Bed.SetRouterLoss) let through and dropped.
type LossStats struct {
	Passed, Dropped uint64
}
