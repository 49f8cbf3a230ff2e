//go:build !race

package workload

// raceEnabled is true in a race-detector build: the privileged tests shrink their volumes
// and durations.
const raceEnabled = false
