package testbed

import (
	"strings"
	"testing"

	"github.com/xdpndk/xdpndk/internal/privileged"
)

// NewT creates a bed for a test: it calls privileged.Require (skip, or fail under
// XDPNDK_REQUIRE_PRIVILEGED=1, without root), then New, and registers Close with
// t.Cleanup so that the bed is removed however the test ends. A failure to create the bed
// is fatal for the test; a failure to remove it is reported with t.Errorf. An empty
// opts.Name is replaced by the test's name without its "Test" prefix.
func NewT(t testing.TB, opts Options) *Bed {
	t.Helper()
	privileged.Require(t)
	if opts.Name == "" {
		opts.Name = strings.TrimPrefix(t.Name(), "Test")
	}
	b, err := New(opts)
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("testbed: %v", err)
		}
	})
	return b
}
