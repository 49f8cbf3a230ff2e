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

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
	"github.com/xdpndk/xdpndk/ndk"
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

// statsSchemaVersion is the version of the stats document's layout (schema_version): 2
// has schema_version, the adapter's counters as ndk.AdapterStats (every queue, the QP
// totals, the memory) and open_qps; the document of version 1, which had no such field,
// mixed key styles and counted the first queue's socket only.
const statsSchemaVersion = 2

// serverStats is what `ndkpeer stats` reports (docs/OPERATIONS.md, "ndkpeer stats").
type serverStats struct {
	SchemaVersion int      `json:"schema_version"`
	PID           int      `json:"pid"`
	Interface     string   `json:"interface"`
	Address       string   `json:"address"`
	Port          uint16   `json:"port"`
	Service       uint16   `json:"service"`
	UptimeS       float64  `json:"uptime_s"`
	Metrics       string   `json:"metrics_url,omitempty"`
	Mode          modeJSON `json:"mode"`
	// Connections counts the server's connections (each one QP).
	Connections connStats `json:"connections"`
	// Buffers is the memory of the connections' test buffers against --max-mem.
	Buffers struct {
		Used  uint64 `json:"used_bytes"`
		Limit uint64 `json:"limit_bytes"`
	} `json:"test_buffers"`
	// Adapter is the adapter's counters, the QP totals among them.
	Adapter ndk.AdapterStats `json:"adapter"`
	// OpenQPs are the open QPs, oldest first (stats --qp; the server always sends them).
	OpenQPs []ndk.QPStats `json:"open_qps,omitempty"`
}

type connStats struct {
	Active   int64  `json:"active"`
	Accepted uint64 `json:"accepted_total"`
	Rejected uint64 `json:"refused_total"`
	Closed   uint64 `json:"closed_total"`
	Failed   uint64 `json:"failed_total"`
	// ByTest counts the connections accepted per test.
	ByTest map[string]uint64 `json:"accepted_by_test"`
}

// snapshot gathers the server's counters. Any goroutine.
func (s *server) snapshot() serverStats {
	st := serverStats{SchemaVersion: statsSchemaVersion}
	n := s.n
	st.PID, st.Interface, st.Address = os.Getpid(), n.cfg.iface, n.a.LocalAddr().Addr().String()
	st.Port, st.Service = n.cfg.port, n.cfg.service
	st.UptimeS = time.Since(s.started).Seconds()
	st.Metrics = s.metricsURL
	st.Mode = n.localJSON()
	st.Connections = connStats{Active: int64(s.conns.Load()), Accepted: s.ctr.accepted.Load(),
		Rejected: s.ctr.rejected.Load(), Closed: s.ctr.closed.Load(), Failed: s.ctr.failed.Load(),
		ByTest: map[string]uint64{}}
	for k := proto.KindSendLat; k <= proto.MaxKind; k++ {
		st.Connections.ByTest[k.String()] = s.ctr.byKind[k].Load()
	}
	st.Buffers.Used, st.Buffers.Limit = uint64(max(s.memUsed.Load(), 0)), uint64(s.lim.maxMem)
	st.Adapter = n.a.Stats()
	st.OpenQPs = n.a.QPStats()
	return st
}

// logStats logs the one-line summary --stats asks for.
func (s *server) logStats(st serverStats) {
	q, l := st.Adapter.QPs, st.Adapter.Link
	s.log.Info("stats", "up", time.Duration(st.UptimeS*float64(time.Second)).Round(time.Second),
		"active", st.Connections.Active, "accepted", st.Connections.Accepted, "refused", st.Connections.Rejected,
		"rx_bytes", q.RxBytes, "tx_bytes", q.TxBytes, "rx_datagrams", st.Adapter.Engine.RxDatagrams,
		"tx_datagrams", st.Adapter.Engine.TxDatagrams, "retransmits", q.Retransmits, "timeouts", q.Timeouts,
		"link_drops", l.RxDropped+l.TxDropped)
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
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
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

// maxStatsDoc bounds a stats document: a server of 1024 QPs (--max-conns) sends about
// 1.5 MiB.
const maxStatsDoc = 16 << 20

// fetchStats asks the server listening on the stats socket name for its counters.
func fetchStats(name string) (serverStats, error) {
	var st serverStats
	c, err := net.DialTimeout("unix", name, 2*time.Second)
	if err != nil {
		return st, err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(io.LimitReader(c, maxStatsDoc))
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

const statsUsage = "[-i IFACE] [--port N] [--qp] [--json]"

func statsCmd(args []string) int {
	fs := newFlagSet("stats", statsUsage, os.Stderr)
	var iface string
	fs.StringVar(&iface, "i", "", "the server's `IFACE` (default: the only server in this network namespace)")
	fs.StringVar(&iface, "interface", "", "same as -i")
	port := fs.Uint("port", xdp.DefaultPort, "the server's UDP `port`")
	qps := fs.Bool("qp", false, "also list every open QP (its number, peer, state, packets, retransmissions, round trip, window)")
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
	if err == nil && st.SchemaVersion != statsSchemaVersion {
		err = fmt.Errorf("the server (pid %d) answered a stats document of schema version %d; this ndkpeer reads version %d: run the server's own ndkpeer stats", st.PID, st.SchemaVersion, statsSchemaVersion)
	}
	if err != nil {
		return report("stats", err, *jsonOut)
	}
	if !*qps {
		st.OpenQPs = nil
	}
	if *jsonOut {
		writeJSON(os.Stdout, st)
		return exitOK
	}
	printStats(os.Stdout, st)
	if *qps {
		printQPs(os.Stdout, st.OpenQPs)
	}
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
	if st.Metrics != "" {
		fmt.Fprintf(w, "  metrics      %s\n", st.Metrics)
	}
	c := st.Connections
	fmt.Fprintf(w, "  connections  %d active, %d accepted, %d refused, %d closed, %d failed to set up\n", c.Active, c.Accepted, c.Rejected, c.Closed, c.Failed)
	var tests []string
	for k := proto.KindSendLat; k <= proto.MaxKind; k++ {
		if n := c.ByTest[k.String()]; n > 0 {
			tests = append(tests, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(tests) == 0 {
		tests = []string{"none yet"}
	}
	fmt.Fprintf(w, "  tests        %s\n", strings.Join(tests, ", "))
	a := st.Adapter
	q := a.QPs
	rq := q.RetransmitsQueued
	fmt.Fprintf(w, "  QPs          %d open, %d created, %d closed; received %s in %d packets, sent %s in %d\n",
		q.Live, q.Created, q.Closed, humanBytes(q.RxBytes), q.RxPackets, humanBytes(q.TxBytes), q.TxPackets)
	fmt.Fprintf(w, "               %d retransmissions (queued by timer %d, loss %d, tail probe %d, RNR %d), %d timeouts (%d spurious), %d duplicates received\n",
		q.Retransmits, rq.Timer, rq.Loss, rq.TailProbe, rq.RNR, q.Timeouts, q.SpuriousTimeouts, q.Duplicates)
	fmt.Fprintf(w, "               NAKs sent %d (%s), received %d (%s)\n", q.NaksSent, nakLine(q.NaksSentBy), q.NaksReceived, nakLine(q.NaksReceivedBy))
	e := a.Engine
	fmt.Fprintf(w, "  engine       %d engine(s): rx %d tx %d datagrams; dropped: malformed %d, no QP %d, bad source %d, bad cookie %d, out of window %d, CM %d, half-open full %d\n",
		a.Engines, e.RxDatagrams, e.TxDatagrams, e.Malformed, e.NoQP, e.BadSource, e.BadCookie, e.OutOfWindow, e.CMDropped, e.HalfOpenFull)
	if a.Engines > 1 {
		fmt.Fprintf(w, "               forwarded %d, dropped at a full inbox %d\n", e.Forwarded, e.ForwardDropped)
	}
	fmt.Fprintf(w, "  link         %s\n", linkLine(a.Link, a.Socket))
	for _, x := range a.Queues {
		fmt.Fprintf(w, "    queue %-4d engine %d: %s\n", x.Queue, x.Engine, linkLine(x.Link, x.Socket))
	}
	if p := a.Steering; p != nil {
		fmt.Fprintf(w, "  XDP program  redirected %d (%s), passed %d, no socket %d, malformed %d\n", p.Redirected, humanBytes(p.RedirectedBytes), p.Passed, p.NoSocket, p.Malformed)
	}
	if nb := a.Neighbours; nb != nil {
		fmt.Fprintf(w, "  next hops    %d entries (%d resolved, %d pending, %d failed); %d resolutions, %d failures, %d requests dropped\n",
			nb.Entries, nb.Resolved, nb.Pending, nb.Failed, nb.Resolutions, nb.Failures, nb.RequestsDropped)
	}
	mm := a.Memory
	fmt.Fprintf(w, "  memory       UMEM %s (%d frames of %s), heap %s used of %s in %d buffers; %d regions, %d fast-register, %d windows (of %d); pinned outside the UMEM %s\n",
		humanBytes(uint64(mm.UMEMSize)), mm.Frames, humanBytes(uint64(mm.FrameSize)), humanBytes(uint64(mm.HeapUsed)), humanBytes(uint64(mm.HeapSize)),
		mm.HeapBuffers, mm.Regions, mm.FastRegisterRegions, mm.Windows, mm.MaxEntries, humanBytes(mm.Pinned))
	fmt.Fprintf(w, "  test buffers %s of %s\n", humanBytes(st.Buffers.Used), humanBytes(st.Buffers.Limit))
}

// linkLine describes a link's counters and its AF_XDP socket's.
func linkLine(l ndk.LinkStats, k *ndk.SocketStats) string {
	s := fmt.Sprintf("rx %d (%s) tx %d (%s), dropped rx %d tx %d, tx errors %d, kicks %d",
		l.RxPackets, humanBytes(l.RxBytes), l.TxPackets, humanBytes(l.TxBytes), l.RxDropped, l.TxDropped, l.TxErrors, l.Kicks)
	if k != nil {
		s += fmt.Sprintf("; AF_XDP rx dropped %d, rx ring full %d, fill ring empty %d, invalid descs rx %d tx %d",
			k.RxDropped, k.RxRingFull, k.RxFillRingEmpty, k.RxInvalidDescs, k.TxInvalidDescs)
	}
	return s
}

// nakLine names the kinds of NAKs counted.
func nakLine(n ndk.NakCounts) string {
	var parts []string
	for _, k := range []struct {
		name string
		v    uint64
	}{{"sequence", n.Sequence}, {"RNR", n.RNR}, {"access", n.Access}, {"invalid request", n.InvalidRequest},
		{"remote operation", n.RemoteOperation}, {"invalidate token", n.InvalidateToken}, {"other", n.Other}} {
		if k.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k.name, k.v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// printQPs writes the open QPs as a table, one a line (as rdma resource show qp).
func printQPs(w io.Writer, qps []ndk.QPStats) {
	fmt.Fprintf(w, "QPs open: %d\n", len(qps))
	if len(qps) == 0 {
		return
	}
	fmt.Fprintf(w, "  %10s %-22s %-12s %3s %10s %10s %11s %11s %7s %8s %10s %10s\n", "QPN", "PEER", "STATE", "ENG",
		"TX_PKTS", "RX_PKTS", "TX_BYTES", "RX_BYTES", "RETX", "TIMEOUTS", "SRTT_US", "CWND")
	for _, q := range qps {
		peer := "-"
		if q.Peer.IsValid() {
			peer = q.Peer.String()
		}
		fmt.Fprintf(w, "  %10d %-22s %-12s %3d %10d %10d %11d %11d %7d %8d %10.1f %10d\n", q.QPN, peer, q.State, q.Engine,
			q.TxPackets, q.RxPackets, q.TxBytes, q.RxBytes, q.Retransmits, q.Timeouts, q.SRTT, q.CongestionWindow)
	}
}
