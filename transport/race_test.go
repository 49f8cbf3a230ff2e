//go:build race

package transport_test

// raceEnabled is true in a race-detector build, where the longest virtual-time scenarios
// run ten times slower: they run in the plain pass of make test only.
const raceEnabled = true
