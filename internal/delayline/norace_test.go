//go:build !race

package delayline_test

// raceEnabled is true in a race-detector build, where the forwarder costs several times
// more per frame: the rate test runs its line slower there.
const raceEnabled = false
