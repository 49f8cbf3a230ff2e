package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParsers feeds every parser of a tool's output the same bytes: the tools are other
// programs of any version, so whatever they print gets a result or an error, never a
// panic. The corpus is the captured outputs of testdata/, each as client and server output.
func FuzzParsers(f *testing.F) {
	names, err := filepath.Glob(filepath.Join("testdata", "*.out"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, ".server.out") {
			continue
		}
		client, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		server, _ := os.ReadFile(strings.TrimSuffix(name, ".out") + ".server.out")
		f.Add(client, server)
	}
	f.Add([]byte("{}"), []byte(nil))
	f.Fuzz(func(t *testing.T, client, server []byte) {
		_, _ = ParseFabricRow(client)
		_, _ = ParseIperf3(client)
		_, _ = ParseQperfLat(client, "tcp_lat")
		_, _ = ParseQperfBW(client, "tcp_bw")
		_, _ = ParseSockperfPingPong(client, server)
		_, _ = ParseSockperfThroughput(client, server)
		for _, tool := range []string{"qperf", "iperf3", "sockperf", "fi_info"} {
			_, _ = ParseVersion(tool, client)
		}
		_, _ = ParseFabricProviders(client)
	})
}
