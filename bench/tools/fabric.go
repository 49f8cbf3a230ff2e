package tools

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Fabric is a libfabric provider and endpoint type for fi_pingpong (-p, -e).
type Fabric struct {
	// Provider is the provider name, layered ones with ';' ("udp;ofi_rxd").
	Provider string `json:"provider"`
	// Endpoint is the endpoint type: "msg" (connected), "rdm" (reliable datagram) or
	// "dgram" (unreliable datagram).
	Endpoint string `json:"endpoint"`
}

// String is "provider/endpoint".
func (f Fabric) String() string { return f.Provider + "/" + f.Endpoint }

// The software providers of Debian's libfabric 1.17 that carry fi_pingpong between two
// namespaces, with the endpoint types each offers. The tcp provider has msg endpoints and,
// since 1.17, its own rdm; udp has dgram only (at most FabricUDPMaxSize bytes), and ofi_rxd
// layers rdm on top of it; sockets (the old reference provider) has all three.
var (
	FabricTCPMsg     = Fabric{"tcp", "msg"}
	FabricTCPRdm     = Fabric{"tcp", "rdm"}
	FabricTCPRxmRdm  = Fabric{"tcp;ofi_rxm", "rdm"}
	FabricUDPRxdRdm  = Fabric{"udp;ofi_rxd", "rdm"}
	FabricUDPDgram   = Fabric{"udp", "dgram"}
	FabricSocketsMsg = Fabric{"sockets", "msg"}
	FabricSocketsRdm = Fabric{"sockets", "rdm"}
)

// Fabrics lists every provider and endpoint type this package runs fi_pingpong over.
var Fabrics = []Fabric{FabricTCPMsg, FabricTCPRdm, FabricTCPRxmRdm, FabricUDPRxdRdm, FabricUDPDgram, FabricSocketsMsg, FabricSocketsRdm}

// FabricUDPMaxSize is the largest message of the udp provider's dgram endpoints (its
// max_msg_size, `fi_info -p udp -v`: one UDP payload of a 1500-byte packet, whatever the
// MTU). fi_pingpong asks for larger ones with a hint the provider cannot meet, and its
// server exits with fi_getinfo's -61 (ENODATA).
const FabricUDPMaxSize = 1472

// FabricLimit bounds one fi_pingpong run (the sockets provider can take milliseconds per
// transfer on two shared vCPUs); a shorter deadline of the caller's context wins.
const FabricLimit = 2 * time.Minute

// FabricUnavailable lists the libfabric benchmarks that cannot run here, and why.
var FabricUnavailable = map[string]string{
	"fi_rma_bw, fi_msg_bw, fi_rdm_pingpong and the other fabtests": "Debian 12 packages only fi_pingpong, fi_info and " +
		"fi_strerror (libfabric-bin); fabtests itself is not packaged (libfabric-bin's README.Debian says so), and nothing " +
		"but Debian packages and Go modules may be installed",
	"RMA bandwidth": "no packaged tool measures it: fi_pingpong only sends messages, one in flight",
}

// FabricSupport returns why fi_pingpong cannot run over f with size-byte messages here, or
// "" when it can.
func FabricSupport(f Fabric, size int) string {
	switch {
	case f.Endpoint == "dgram" && f.Provider == "udp" && size > FabricUDPMaxSize:
		return fmt.Sprintf("the udp provider's dgram endpoints carry at most %d bytes (max_msg_size); "+
			"fi_pingpong's server exits with fi_getinfo -61 (ENODATA) for %d", FabricUDPMaxSize, size)
	case f.Endpoint != "msg" && f.Endpoint != "rdm" && f.Endpoint != "dgram":
		return fmt.Sprintf("fi_pingpong has no endpoint type %q (msg, rdm, dgram)", f.Endpoint)
	}
	return ""
}

// FabricRow is one line of fi_pingpong's table, as the client or the server printed it.
// Sizes and counts are printed rounded (64k, 1.3k, 50k): Bytes and Total to the binary
// prefix (k = 1024), Sent and Acked to the decimal one (k = 1000).
type FabricRow struct {
	// Bytes is the message size (bytes column).
	Bytes float64 `json:"bytes"`
	// Sent and Acked are the pings sent and the pongs received (#sent, #ack); AllAcked is
	// whether #ack was printed as "=N": every ping answered.
	Sent     float64 `json:"sent"`
	Acked    float64 `json:"acked"`
	AllAcked bool    `json:"all_acked"`
	// Total is the bytes moved both ways (total).
	Total float64 `json:"total_bytes"`
	// Seconds is the test's time (time, two decimals).
	Seconds float64 `json:"seconds"`
	// MBps is the MB/sec column: Total / time.
	MBps float64 `json:"mbytes_per_s"`
	// USPerXfer is usec/xfer: the mean time of one transfer one way, half the round trip,
	// in µs.
	USPerXfer float64 `json:"us_per_xfer"`
	// MXfersPerSec is Mxfers/sec: transfers one way per second, in millions.
	MXfersPerSec float64 `json:"mxfers_per_s"`
}

// FabricPingPong is the result of fi_pingpong between A (client) and B (server): Iterations
// round trips of Size-byte messages, one in flight, both sides polling their completion
// queue.
type FabricPingPong struct {
	Fabric
	// Size and Iterations are what was asked for (-S, -I).
	Size       int `json:"size"`
	Iterations int `json:"iterations"`
	// Client and Server are the table rows each side printed.
	Client FabricRow `json:"client"`
	Server FabricRow `json:"server"`
	// LatencyUS is the client's usec/xfer: half the round trip, in µs.
	LatencyUS float64 `json:"latency_us"`
	// RTTUS is the round trip, 2 × LatencyUS.
	RTTUS float64 `json:"rtt_us"`
	// Unsupported says why the run could not be made (FabricSupport, or what the tool
	// said); the figures are then zero and the runner's error wraps ErrUnsupported.
	Unsupported string `json:"unsupported,omitempty"`
	// Run is how it was run; Run.Usage.Messages is 2 × Iterations (every ping and pong,
	// when the client printed that all were acknowledged).
	Run
}

// fabricHeader is the header line of fi_pingpong's table.
var fabricHeader = []string{"bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"}

// ParseFabricRow parses fi_pingpong's output: the table header and exactly one row (one
// size). An error line ("[error] ...", "fi_getinfo(): ...") or a missing table is an
// error.
func ParseFabricRow(out []byte) (FabricRow, error) {
	var row FabricRow
	var said []string
	header, rows := false, 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
		case slices.Equal(f, fabricHeader):
			header = true
		case header && len(f) == len(fabricHeader):
			rows++
			r, err := parseFabricFields(f)
			if err != nil {
				return row, err
			}
			row = r
		default:
			said = append(said, strings.TrimSpace(sc.Text()))
		}
	}
	if err := sc.Err(); err != nil {
		return row, err
	}
	switch {
	case !header || rows == 0:
		if len(said) > 0 {
			return row, fmt.Errorf("fi_pingpong printed no result: %s", strings.Join(said, "; "))
		}
		return row, fmt.Errorf("fi_pingpong printed no result")
	case rows > 1:
		return row, fmt.Errorf("fi_pingpong printed %d rows, want one size", rows)
	case !(row.USPerXfer > 0) || row.Sent <= 0 || row.Acked <= 0:
		return row, fmt.Errorf("fi_pingpong: %v µs per transfer, %v sent, %v acked: no measurement", row.USPerXfer, row.Sent, row.Acked)
	}
	return row, nil
}

// parseFabricFields parses the eight columns of one row.
func parseFabricFields(f []string) (FabricRow, error) {
	var r FabricRow
	var err error
	num := func(s, col string, base float64) float64 {
		if err != nil {
			return 0
		}
		var v float64
		v, err = parseScaled(s, base)
		if err != nil {
			err = fmt.Errorf("fi_pingpong %s column: %w", col, err)
		}
		return v
	}
	r.Bytes = num(f[0], "bytes", 1024)
	r.Sent = num(f[1], "#sent", 1000)
	ack := f[2]
	if strings.HasPrefix(ack, "=") {
		r.AllAcked, ack = true, ack[1:]
	}
	r.Acked = num(ack, "#ack", 1000)
	r.Total = num(f[3], "total", 1024)
	r.Seconds = num(strings.TrimSuffix(f[4], "s"), "time", 0)
	r.MBps = num(f[5], "MB/sec", 0)
	r.USPerXfer = num(f[6], "usec/xfer", 0)
	r.MXfersPerSec = num(f[7], "Mxfers/sec", 0)
	if err == nil && !strings.HasSuffix(f[4], "s") {
		err = fmt.Errorf("fi_pingpong time column %q has no unit", f[4])
	}
	return r, err
}

// parseScaled parses a number with an optional k, m, g or t suffix meaning base^1..4 (base
// 0: no suffix allowed).
func parseScaled(s string, base float64) (float64, error) {
	mult := 1.0
	if base > 0 && s != "" {
		if i := strings.IndexByte("kmgt", s[len(s)-1]); i >= 0 {
			mult = math.Pow(base, float64(i+1))
			s = s[:len(s)-1]
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a count", s)
	}
	return v * mult, nil
}

// fabricRefusal returns why fi_pingpong refused to run, when its output says that the
// provider has no endpoint for what was asked (fi_getinfo: -61, ENODATA), or "".
func fabricRefusal(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "fi_getinfo()") && strings.Contains(l, "ret=-61") {
			return "the provider has no endpoint for it: " + strings.TrimSpace(l)
		}
	}
	return ""
}
