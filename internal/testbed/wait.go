package testbed

import (
	"testing"
	"time"
)

// WaitFor polls cond every millisecond until it holds, failing t after 5 s with what it
// waited for.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
