package compare

import "testing"

// FuzzNdkpeerFigures: whatever an ndkpeer client prints (another build's JSON, a cut-off
// document) becomes figures or an error, never a panic.
func FuzzNdkpeerFigures(f *testing.F) {
	for _, s := range []string{ndkpeerSendLat, ndkpeerWriteBW, ndkpeerLoaded, `{"schema_version":2,"record":"result","latency":[{}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		d, err := parseNdkpeer(out)
		if err != nil {
			return
		}
		for _, sys := range []string{SystemXDPNDK, SystemXDPNDKEvents} {
			_, _ = ndkpeerFigures(sys, d, CPUSizes)
		}
	})
}
