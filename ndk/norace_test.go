//go:build !race

package ndk

// raceEnabled is true in a race-detector build, where tests that wait out a window of
// real time to measure CPU use a shorter one: the plain pass of make test measures.
const raceEnabled = false
