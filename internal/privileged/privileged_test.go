package privileged

import (
	"os"
	"testing"
)

// TestRequiredReadsEnv checks that the gate follows the environment variable exactly.
func TestRequiredReadsEnv(t *testing.T) {
	for _, tc := range []struct {
		val  string
		want bool
	}{{"1", true}, {"0", false}, {"", false}, {"yes", false}} {
		t.Setenv(EnvRequire, tc.val)
		if got := Required(); got != tc.want {
			t.Errorf("%s=%q: Required() = %v, want %v", EnvRequire, tc.val, got, tc.want)
		}
	}
}

// TestAvailableMatchesEUID checks that the privilege test is the effective user id.
func TestAvailableMatchesEUID(t *testing.T) {
	if got, want := Available(), os.Geteuid() == 0; got != want {
		t.Fatalf("Available() = %v, want %v", got, want)
	}
}
