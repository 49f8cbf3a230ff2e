//go:build linux

package pathbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// iperf is one iperf3 test from host A to host B of a bed: the server (-s -1: one test,
// then exit) in B's namespace bound to B's address, the client in A's bound to A's, for a
// bounded time, both reporting in JSON.
type iperf struct {
	server, client       *exec.Cmd
	serverOut, serverErr bytes.Buffer
	clientOut, clientErr bytes.Buffer
}

// iperfInterval is one of the server's periodic reports: what it received in [Start, End)
// seconds after the test started.
type iperfInterval struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	Bytes uint64  `json:"bytes"`
}

// startIperf starts the server, waits (at most 3 s) until it listens, and starts the
// client, which sends for d (whole seconds, rounded up) with reports every interval (at
// least 100 ms). ctx bounds both processes.
func startIperf(ctx context.Context, bed *testbed.Bed, d, interval time.Duration) (*iperf, error) {
	secs := max(1, int((d+time.Second-1)/time.Second))
	iv := strconv.FormatFloat(max(interval, 100*time.Millisecond).Seconds(), 'f', 2, 64)
	port := strconv.Itoa(TCPPort)
	ip := &iperf{}
	ip.server = bed.B.Command(ctx, "iperf3", "-s", "-1", "-J", "-i", iv, "-B", bed.B.Addr.String(), "-p", port)
	ip.server.Stdout, ip.server.Stderr = &ip.serverOut, &ip.serverErr
	if err := ip.server.Start(); err != nil {
		return nil, fmt.Errorf("start iperf3 server: %w", err)
	}
	if err := awaitListen(bed.B, TCPPort, 3*time.Second); err != nil {
		ip.stop()
		return nil, fmt.Errorf("iperf3 server: %w: %s", err, ip.serverErr.String())
	}
	ip.client = bed.A.Command(ctx, "iperf3", "-c", bed.B.Addr.String(), "-B", bed.A.Addr.String(), "-p", port,
		"-t", strconv.Itoa(secs), "-i", iv, "-J")
	ip.client.Stdout, ip.client.Stderr = &ip.clientOut, &ip.clientErr
	if err := ip.client.Start(); err != nil {
		ip.client = nil
		ip.stop()
		return nil, fmt.Errorf("start iperf3 client: %w", err)
	}
	return ip, nil
}

// awaitListen waits until a TCP socket of h's namespace listens on port, polling the
// namespace's /proc/net/tcp every 10 ms for at most limit.
func awaitListen(h *testbed.Host, port int, limit time.Duration) error {
	want := fmt.Sprintf(":%04X ", port)
	deadline := time.Now().Add(limit)
	for {
		var listening bool
		err := h.Do(func() error {
			b, err := os.ReadFile("/proc/thread-self/net/tcp")
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(b), "\n")[1:] {
				f := strings.Fields(line)
				// local_address rem_address st: state 0A is LISTEN.
				if len(f) > 3 && strings.HasSuffix(f[1]+" ", want) && f[3] == "0A" {
					listening = true
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read the listening sockets: %w", err)
		}
		if listening {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on port %d after %v", port, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits for the client and then the server to exit, and returns the server's
// interval reports.
func (ip *iperf) wait() ([]iperfInterval, error) {
	cerr := ip.client.Wait()
	serr := ip.server.Wait()
	ip.client, ip.server = nil, nil
	if cerr != nil {
		return nil, fmt.Errorf("iperf3 client: %w: %s", cerr, strings.TrimSpace(ip.clientErr.String()+" "+errorOf(ip.clientOut.Bytes())))
	}
	if serr != nil {
		return nil, fmt.Errorf("iperf3 server: %w: %s", serr, strings.TrimSpace(ip.serverErr.String()+" "+errorOf(ip.serverOut.Bytes())))
	}
	return parseServer(ip.serverOut.Bytes())
}

// stop kills whichever process still runs and waits for it.
func (ip *iperf) stop() {
	for _, c := range []*exec.Cmd{ip.client, ip.server} {
		if c != nil && c.Process != nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	ip.client, ip.server = nil, nil
}

// errorOf returns the "error" member of an iperf3 JSON report, or "".
func errorOf(out []byte) string {
	var v struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(out, &v) != nil {
		return ""
	}
	return v.Error
}

// parseServer decodes the interval reports of an iperf3 server's JSON output.
func parseServer(out []byte) ([]iperfInterval, error) {
	var v struct {
		Intervals []struct {
			Sum iperfInterval `json:"sum"`
		} `json:"intervals"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("decode the iperf3 server's report: %w", err)
	}
	if v.Error != "" {
		return nil, fmt.Errorf("iperf3 server: %s", v.Error)
	}
	if len(v.Intervals) == 0 {
		return nil, errors.New("iperf3 server reported no interval")
	}
	iv := make([]iperfInterval, len(v.Intervals))
	for i, x := range v.Intervals {
		iv[i] = x.Sum
	}
	return iv, nil
}

// tcpGoodput returns the goodput in Gbit/s of the intervals that lie within [from, to]
// seconds (with 10 ms of slack at each end), and the span they cover.
func tcpGoodput(iv []iperfInterval, from, to float64) (gbps, span float64, ok bool) {
	var bytes uint64
	var first, last float64 = -1, 0
	for _, x := range iv {
		if x.Start+0.01 < from || x.End-0.01 > to || x.End <= x.Start {
			continue
		}
		if first < 0 {
			first = x.Start
		}
		last = x.End
		bytes += x.Bytes
	}
	if first < 0 || last <= first {
		return 0, 0, false
	}
	return float64(bytes) * 8 / (last - first) / 1e9, last - first, true
}
