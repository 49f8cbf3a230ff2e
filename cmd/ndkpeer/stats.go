//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/xdp/xsk"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/bpf"
	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/xdp"
)

// A running server answers on an abstract unix socket named for its interface and port.
// Abstract socket names belong to a network namespace, so `ndkpeer stats` finds the
// servers of the namespace it runs in. A connection gets one JSON document (serverStats)
// and is closed; nothing is read from it.
const statsSocketPrefix = "@xdpndk/ndkpeer/"

// statsSocketName is the socket of the server on ifname and port.
func statsSocketName(ifname string, port uint16) string {
	return statsSocketPrefix + ifname + "/" + strconv.Itoa(int(port))
}

// serverStats is what `ndkpeer stats` reports.
type serverStats struct {
	PID         int       `json:"pid"`
	Interface   string    `json:"interface"`
	Address     string    `json:"address"`
	Port        uint16    `json:"port"`
	Service     uint16    `json:"service"`
	UptimeS     float64   `json:"uptime_s"`
	Mode        modeJSON  `json:"mode"`
	Connections connStats `json:"connections"`
	// Tests counts accepted connections per test.
	Tests map[string]uint64 `json:"tests"`
	// QP sums the counters of every QP the server had (closed and live).
	QP struct {
		TxBytes     uint64 `json:"tx_bytes"`
		RxBytes     uint64 `json:"rx_bytes"`
		TxPackets   uint64 `json:"tx_packets"`
		RxPackets   uint64 `json:"rx_packets"`
		Retransmits uint64 `json:"retransmits"`
		Timeouts    uint64 `json:"timeouts"`
	} `json:"qp"`
	Engine   transport.EngineStats `json:"engine"`
	Link     link.Stats            `json:"link"`
	Steering *bpf.Counters         `json:"steering,omitempty"`
	Socket   *xsk.Statistics       `json:"socket,omitempty"`
	Memory   struct {
		TestBuffers uint64 `json:"test_buffers"`
		Limit       uint64 `json:"limit"`
	} `json:"memory"`
}

type connStats struct {
	Active   int64  `json:"active"`
	Accepted uint64 `json:"accepted"`
	Rejected uint64 `json:"rejected"`
	Closed   uint64 `json:"closed"`
	Failed   uint64 `json:"failed"`
}

// snapshot gathers the server's counters. Any goroutine.
func (s *server) snapshot() serverStats {
	var st serverStats
	n := s.n
	st.PID, st.Interface, st.Address = os.Getpid(), n.cfg.iface, n.a.LocalAddr().Addr().String()
	st.Port, st.Service = n.cfg.port, n.cfg.service
	st.UptimeS = time.Since(s.started).Seconds()
	st.Mode = n.localJSON()
	st.Connections = connStats{Active: int64(s.conns.Load()), Accepted: s.ctr.accepted.Load(),
		Rejected: s.ctr.rejected.Load(), Closed: s.ctr.closed.Load(), Failed: s.ctr.failed.Load()}
	st.Tests = map[string]uint64{}
	for k := proto.KindSendLat; k <= proto.MaxKind; k++ {
		st.Tests[k.String()] = s.ctr.byKind[k].Load()
	}
	q := &st.QP
	q.TxBytes, q.RxBytes = s.ctr.txBytes.Load(), s.ctr.rxBytes.Load()
	q.TxPackets, q.RxPackets = s.ctr.txPackets.Load(), s.ctr.rxPackets.Load()
	q.Retransmits, q.Timeouts = s.ctr.retransmits.Load(), s.ctr.timeouts.Load()
	s.connMu.Lock()
	for k := range s.live {
		x := plumb.QP(k.qp).Stats()
		q.TxBytes += x.TxBytes
		q.RxBytes += x.RxBytes
		q.TxPackets += x.TxPackets
		q.RxPackets += x.RxPackets
		q.Retransmits += x.Retransmits
		q.Timeouts += x.Timeouts
	}
	s.connMu.Unlock()
	st.Engine = plumb.Group(n.a).Stats().EngineStats // every engine's, summed
	st.Link = plumb.Link(n.a).Stats()
	if c, err := n.dev.Program().Counters(); err == nil {
		st.Steering = &c
	}
	if links := n.dev.Links(); len(links) > 0 {
		if x, err := links[0].Socket().Statistics(); err == nil {
			st.Socket = &x
		}
	}
	st.Memory.TestBuffers, st.Memory.Limit = uint64(max(s.memUsed.Load(), 0)), uint64(s.lim.maxMem)
	return st
}

// line is the one-line summary --stats prints.
func (st serverStats) line() string {
	drops := st.Link.RxDropped + st.Link.TxDropped
	return fmt.Sprintf("stats %s: connections %d active, %d accepted, %d refused | data received %s, sent %s | packets rx %d tx %d, retransmissions %d, timeouts %d | link drops %d",
		time.Duration(st.UptimeS*float64(time.Second)).Round(time.Second), st.Connections.Active, st.Connections.Accepted,
		st.Connections.Rejected, humanBytes(st.QP.RxBytes), humanBytes(st.QP.TxBytes), st.Engine.RxPackets,
		st.Engine.TxPackets, st.QP.Retransmits, st.QP.Timeouts, drops)
}

// serveStats answers stats requests on the server's socket until the returned stop runs.
func (s *server) serveStats() (stop func(), err error) {
	name := statsSocketName(s.n.cfg.iface, s.n.cfg.port)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("stats socket %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
			b, _ := json.Marshal(s.snapshot())
			_, _ = c.Write(b)
			_ = c.Close()
		}
	}()
	return func() { _ = l.Close(); <-done }, nil
}

// statsSockets lists the ndkpeer stats sockets of this network namespace
// (/proc/net/unix), by interface and port.
func statsSockets() ([]string, error) {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 {
			continue
		}
		path := fields[len(fields)-1]
		// A listening socket (state 01 = SS_UNCONNECTED, flags __SO_ACCEPTCON) is listed
		// once; connected ones share its name, so keep names unique.
		if strings.HasPrefix(path, statsSocketPrefix) && !contains(names, path) {
			names = append(names, path)
		}
	}
	sort.Strings(names)
	return names, sc.Err()
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// fetchStats asks the server listening on the stats socket name for its counters.
func fetchStats(name string) (serverStats, error) {
	var st serverStats
	c, err := net.DialTimeout("unix", name, 2*time.Second)
	if err != nil {
		return st, err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(io.LimitReader(c, 1<<20))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("stats from %s: %w", name, err)
	}
	return st, nil
}

// findServer looks for a running ndkpeer serve on ifname (any port) and returns its pid
// and port.
func findServer(ifname string) (pid int, port uint16, ok bool) {
	names, err := statsSockets()
	if err != nil {
		return 0, 0, false
	}
	for _, name := range names {
		if !strings.HasPrefix(name, statsSocketPrefix+ifname+"/") {
			continue
		}
		if st, err := fetchStats(name); err == nil {
			return st.PID, st.Port, true
		}
	}
	return 0, 0, false
}

const statsUsage = "[-i IFACE] [--port N] [--json]"

func statsCmd(args []string) int {
	fs := newFlagSet("stats", statsUsage, os.Stderr)
	var iface string
	fs.StringVar(&iface, "i", "", "the server's `IFACE` (default: the only server in this network namespace)")
	fs.StringVar(&iface, "interface", "", "same as -i")
	port := fs.Uint("port", xdp.DefaultPort, "the server's UDP `port`")
	jsonOut := fs.Bool("json", false, "print the counters as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 {
		fmt.Fprintf(os.Stderr, "ndkpeer stats: unexpected argument %q\n", pos[0])
		return exitUsage
	}
	st, err := queryStats(iface, *port, isSet(fs, "port"))
	if err != nil {
		return report("stats", err, *jsonOut)
	}
	if *jsonOut {
		writeJSON(os.Stdout, st)
		return exitOK
	}
	printStats(os.Stdout, st)
	return exitOK
}

// queryStats finds the server (by interface and port, or the only one) and fetches its
// counters.
func queryStats(iface string, port uint, portSet bool) (serverStats, error) {
	if port == 0 || port > 65535 {
		return serverStats{}, fail(exitUsage, "--port %d: not a UDP port", port)
	}
	if iface != "" {
		name := statsSocketName(iface, uint16(port))
		st, err := fetchStats(name)
		if err != nil {
			return st, failWrap(exitRefused, err, "no ndkpeer serve on %s port %d in this network namespace (%v)", iface, port, err)
		}
		return st, nil
	}
	names, err := statsSockets()
	if err != nil {
		return serverStats{}, fmt.Errorf("list servers: %w", err)
	}
	var found []string
	for _, n := range names {
		if !portSet || strings.HasSuffix(n, "/"+strconv.Itoa(int(port))) {
			found = append(found, n)
		}
	}
	switch len(found) {
	case 0:
		return serverStats{}, fail(exitRefused, "no ndkpeer serve runs in this network namespace (start one: ndkpeer serve -i IFACE)")
	case 1:
		return fetchStats(found[0])
	}
	for i := range found {
		found[i] = strings.TrimPrefix(found[i], statsSocketPrefix)
	}
	return serverStats{}, fail(exitUsage, "several servers run here (%s): name one with -i IFACE [--port N]", strings.Join(found, ", "))
}

// isSet reports whether the flag was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// printStats writes the counters for people.
func printStats(w io.Writer, st serverStats) {
	fmt.Fprintf(w, "ndkpeer serve pid %d on %s (%s, UDP port %d, service %d), up %v\n", st.PID, st.Interface, st.Address,
		st.Port, st.Service, time.Duration(st.UptimeS*float64(time.Second)).Round(time.Second))
	m := st.Mode
	fmt.Fprintf(w, "  mode         XDP %s, zero-copy %v, multi-buffer %v, need_wakeup %v, busy-poll %v, MTU %d, queues served %d of %d, progress %s, pages %s\n",
		m.XDP, m.ZeroCopy, m.MultiBuffer, m.NeedWakeup, m.BusyPoll, m.MTU, m.Served, m.Queues, m.Progress, m.Pages)
	c := st.Connections
	fmt.Fprintf(w, "  connections  %d active, %d accepted, %d refused, %d closed, %d failed to set up\n", c.Active, c.Accepted, c.Rejected, c.Closed, c.Failed)
	var tests []string
	for k := proto.KindSendLat; k <= proto.MaxKind; k++ {
		if n := st.Tests[k.String()]; n > 0 {
			tests = append(tests, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(tests) == 0 {
		tests = []string{"none yet"}
	}
	fmt.Fprintf(w, "  tests        %s\n", strings.Join(tests, ", "))
	fmt.Fprintf(w, "  QPs          received %s in %d packets, sent %s in %d, %d retransmissions, %d timeouts\n",
		humanBytes(st.QP.RxBytes), st.QP.RxPackets, humanBytes(st.QP.TxBytes), st.QP.TxPackets, st.QP.Retransmits, st.QP.Timeouts)
	e := st.Engine
	fmt.Fprintf(w, "  engine       rx %d tx %d datagrams; dropped: malformed %d, no QP %d, bad source %d, bad cookie %d, out of window %d, CM %d\n",
		e.RxPackets, e.TxPackets, e.Malformed, e.NoQP, e.BadSource, e.BadCookie, e.OutOfWindow, e.CMDropped)
	l := st.Link
	fmt.Fprintf(w, "  link         rx %d (%s) tx %d (%s), dropped rx %d tx %d, tx errors %d, kicks %d\n",
		l.RxPackets, humanBytes(l.RxBytes), l.TxPackets, humanBytes(l.TxBytes), l.RxDropped, l.TxDropped, l.TxErrors, l.Kicks)
	if p := st.Steering; p != nil {
		fmt.Fprintf(w, "  XDP program  redirected %d, passed %d, no socket %d, malformed %d\n", p.Redirected, p.Passed, p.NoSocket, p.Malformed)
	}
	if k := st.Socket; k != nil {
		fmt.Fprintf(w, "  AF_XDP       rx dropped %d, rx ring full %d, fill ring empty %d, invalid descs rx %d tx %d\n",
			k.RxDropped, k.RxRingFull, k.RxFillRingEmpty, k.RxInvalidDescs, k.TxInvalidDescs)
	}
	fmt.Fprintf(w, "  memory       test buffers %s of %s\n", humanBytes(st.Memory.TestBuffers), humanBytes(st.Memory.Limit))
}
