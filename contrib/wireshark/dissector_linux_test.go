package wireshark

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/wire"
	"github.com/xdpndk/xdpndk/xdp"
)

// The dissector over real traffic: two ndk adapters on the routed test bed, every packet
// type between them, captured by tshark on the router (whose kernel forwards every
// datagram; the receiving hosts' XDP programs redirect ours before their own taps would
// see them).

// capture is a tshark capture in progress on one of the router's interfaces.
type capture struct {
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	stderr bytes.Buffer
	signal func(os.Signal) error
}

// startCapture captures our datagrams (UDP to port) on h into file, bounded to 3 minutes
// and 100,000 packets, and returns once tshark says it is capturing.
func startCapture(t *testing.T, h *testbed.Host, port uint16, file string) *capture {
	t.Helper()
	needTshark(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := h.Command(ctx, "tshark", "-i", h.Ifname, "-n", "-p", "-q", "-B", "32",
		"-f", fmt.Sprintf("udp dst port %d", port), "-c", "100000", "-a", "duration:180", "-w", file)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start tshark in %s: %v", h.NS, err)
	}
	c := &capture{cancel: cancel, done: make(chan error, 1), signal: cmd.Process.Signal}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			c.mu.Lock()
			c.stderr.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			// "Capturing on" comes before dumpcap has its capture open; "Capture started"
			// (then the file's name) once it has: waiting for the first, a loaded machine's
			// tshark missed datagrams sent at once.
			if !signalled && (strings.Contains(sc.Text(), "Capture started") || strings.Contains(sc.Text(), "File: ")) {
				close(ready)
				signalled = true
			}
		}
		if !signalled {
			close(ready)
		}
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() { c.cancel(); <-c.done })
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("tshark did not start capturing within 20 s")
	}
	time.Sleep(300 * time.Millisecond) // the packet socket is bound once tshark says so; let it settle
	return c
}

// stop ends the capture (SIGINT: tshark finishes the file) and returns what tshark said.
// It fails t if tshark reports packets dropped: the counts compared below need all of them.
func (c *capture) stop(t *testing.T) string {
	t.Helper()
	if err := c.signal(os.Interrupt); err != nil {
		t.Fatalf("interrupt tshark: %v", err)
	}
	select {
	case <-c.done:
		c.done <- nil // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("tshark did not stop within 20 s of SIGINT")
	}
	c.mu.Lock()
	out := c.stderr.String()
	c.mu.Unlock()
	for _, m := range regexp.MustCompile(`(\d+) packets? dropped`).FindAllStringSubmatch(out, -1) {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			t.Fatalf("the capture dropped packets, so it cannot be compared with the engines' counts:\n%s", out)
		}
	}
	return out
}

// open opens an adapter on h's interface inside its namespace.
func open(t *testing.T, h *testbed.Host, port uint16) *ndk.Adapter {
	t.Helper()
	cfg := xdp.DefaultConfig(h.Ifname)
	cfg.Port, cfg.RingSize, cfg.Frames = port, 1024, 4096
	cfg.Logger = nil // the adapter logs nothing
	opts := ndk.DefaultOptions()
	opts.HeapSize = 8 << 20
	var a *ndk.Adapter
	if err := h.Do(func() (err error) { a, err = ndk.Open(cfg, opts); return err }); err != nil {
		t.Fatalf("open an adapter on %s in %s: %v", h.Ifname, h.NS, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a
}

// side is one host's objects: a PD, one CQ for everything, a registered buffer.
type side struct {
	a   *ndk.Adapter
	pd  *ndk.PD
	cq  *ndk.CQ
	buf []byte
	mr  *ndk.MR
}

func newSide(t *testing.T, a *ndk.Adapter, flags ndk.MRFlags) *side {
	t.Helper()
	s := &side{a: a}
	var err error
	if s.pd, err = a.NewPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = a.NewCQ(1024, nil); err != nil {
		t.Fatal(err)
	}
	if s.buf, err = a.Alloc(1<<20, 4096); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegisterMR(s.buf, flags); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *side) qp(t *testing.T) *ndk.QP {
	t.Helper()
	q, err := s.pd.NewQP(ndk.QPConfig{ReceiveCQ: s.cq, InitiatorCQ: s.cq})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// sge is an SGE for s.buf[off:off+n].
func (s *side) sge(off, n int) []ndk.SGE { return []ndk.SGE{s.mr.SGE(s.buf[off : off+n])} }

// await collects the completions of the request contexts named, in any order, for at most
// 15 s, and returns them; a completion of another context fails t. With ok false a failed
// status is expected for every one of them.
func (s *side) await(t *testing.T, ok bool, names ...string) map[string]ndk.ResultEx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	got := map[string]ndk.ResultEx{}
	var rs [16]ndk.ResultEx
	for len(got) < len(names) {
		n, err := s.cq.WaitEx(ctx, rs[:])
		if err != nil {
			t.Fatalf("waiting for %v (have %d): %v", names, len(got), err)
		}
		for _, r := range rs[:n] {
			name, _ := r.RequestContext.(string)
			if !want[name] {
				t.Fatalf("unexpected completion %q: %v", name, r.Status)
			}
			if (r.Status == ndk.StatusSuccess) != ok {
				t.Fatalf("%s completed %v", name, r.Status)
			}
			got[name] = r
		}
	}
	return got
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*31)
	}
}

// frameOf is one captured datagram: its source, its bytes, wire.Parse's reading (err when
// it refused it) and the dissector's tree.
type frameOf struct {
	n      int
	fromA  bool
	d      []byte
	p      wire.Packet
	err    error
	x      *pdmlNode
	packet *pdmlPacket
}

// dataPkt is one data packet as sent: on its own or a Bundle's entry.
type dataPkt struct {
	fromA   bool
	frame   int
	bundled bool
	p       wire.Packet
	payload []byte
}

// assemble reassembles a message or a read from the data packets that match, placed by
// offset (a retransmitted PSN counted once), and returns the bytes and the packets' PSNs.
func assemble(ps []dataPkt, match func(*dataPkt) bool, offset func(*wire.Packet) uint32, n int) ([]byte, []wire.PSN) {
	out := make([]byte, n)
	seen := map[wire.PSN]bool{}
	var psns []wire.PSN
	for i := range ps {
		d := &ps[i]
		if !match(d) || seen[d.p.PSN] {
			continue
		}
		seen[d.p.PSN] = true
		psns = append(psns, d.p.PSN)
		if off := int(offset(&d.p)); off+len(d.payload) <= n {
			copy(out[off:], d.payload)
		}
	}
	return out, psns
}

// TestDissectorOnTheBed runs every packet type between two adapters across the routed
// bed's router, captures them there with tshark into a pcapng file, and decodes the file
// with the dissector: every datagram decodes with each field equal to what wire.Parse
// reads from its bytes, the CRC correct and nothing malformed, except the one datagram
// forged with a wrong trailer, which is flagged; and the values are those of the traffic:
// the Writes' and Reads' addresses, tokens and lengths as posted, the payloads as sent,
// the private data and reject reason, the SendAndInvalidate tokens, the RNR and access
// NAKs naming the packets they refuse, and the Bundles as many as the engines counted.
// XDPNDK_KEEP_PCAP=FILE keeps the capture in FILE, to look at in Wireshark.
func TestDissectorOnTheBed(t *testing.T) {
	privileged.Require(t)
	needTshark(t)
	const port = xdp.DefaultPort
	const service = 445
	bed := testbed.NewT(t, testbed.Options{Routed: true})
	file := filepath.Join(t.TempDir(), "router.pcapng")
	if keep := os.Getenv("XDPNDK_KEEP_PCAP"); keep != "" {
		file = keep
	}
	capt := startCapture(t, bed.R.A, port, file)

	a, b := open(t, bed.A, port), open(t, bed.B, port)
	A := newSide(t, a, ndk.MRAllowLocalWrite)
	B := newSide(t, b, ndk.MRAllowLocalWrite|ndk.MRAllowRemoteRead|ndk.MRAllowRemoteWrite)
	engA, engB := plumb.Engine(a), plumb.Engine(b)
	stA0, stB0 := engA.Stats(), engB.Stats()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// B listens on the service: a request whose private data is "reject me" is rejected
	// with private data of its own, the others are accepted with the next QP of accepts.
	accepts := make(chan *ndk.QP, 2)
	accepted := make(chan error, 2)
	l, err := b.NewListener(func(c *ndk.Connector) {
		go func() {
			var priv [wire.MaxPrivateData]byte
			_, _, n, err := c.GetConnectionData(priv[:])
			if err == nil && string(priv[:n]) == "reject me" {
				if err := c.Reject([]byte("no, thank you")); err != nil {
					accepted <- fmt.Errorf("reject: %w", err)
				}
				return
			}
			accepted <- c.Accept(ctx, <-accepts, 4, 4, []byte("welcome"), nil)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(netip.Addr{}, service)); err != nil {
		t.Fatal(err)
	}
	dest := netip.AddrPortFrom(bed.B.Addr, service)

	// A rejected attempt, then connection 1.
	qa, qb := A.qp(t), B.qp(t)
	c0, err := a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	if err := c0.Connect(ctx, qa, dest, 4, 4, []byte("reject me")); ndk.StatusOf(err) != ndk.StatusConnectionRefused {
		t.Fatalf("Connect that B rejects: %v, want STATUS_CONNECTION_REFUSED", err)
	}
	accepts <- qb
	c1, err := a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Connect(ctx, qa, dest, 4, 4, []byte("hello from A")); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if err := c1.CompleteConnect(ctx, nil); err != nil {
		t.Fatalf("CompleteConnect: %v", err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("Accept: %v", err)
	}

	// Sends of one packet and of several.
	const oneLen, manyLen = 100, 5000
	fill(A.buf[0:oneLen], 1)
	must(t, qb.Receive("r-one", B.sge(0, 8192)))
	must(t, qa.Send("s-one", A.sge(0, oneLen), 0))
	A.await(t, true, "s-one")
	B.await(t, true, "r-one")
	fill(A.buf[8192:8192+manyLen], 2)
	must(t, qb.Receive("r-many", B.sge(8192, 8192)))
	must(t, qa.Send("s-many", A.sge(8192, manyLen), 0))
	A.await(t, true, "s-many")
	B.await(t, true, "r-many")

	// SendAndInvalidate of one packet and of several, each invalidating a window of B's.
	const invLen = 3000
	mw1, err := B.pd.NewMW()
	if err != nil {
		t.Fatal(err)
	}
	mw2, err := B.pd.NewMW()
	if err != nil {
		t.Fatal(err)
	}
	must(t, qb.Bind("bind1", B.mr, mw1, B.mr.VA()+64<<10, 4096, ndk.OpAllowRemoteWrite))
	must(t, qb.Bind("bind2", B.mr, mw2, B.mr.VA()+72<<10, 4096, ndk.OpAllowRemoteWrite))
	B.await(t, true, "bind1", "bind2")
	tok1, tok2 := mw1.RemoteToken(), mw2.RemoteToken()
	fill(A.buf[16384:16384+invLen], 3)
	must(t, qb.Receive("r-inv1", B.sge(16384, 8192)))
	must(t, qb.Receive("r-inv2", B.sge(24576, 8192)))
	must(t, qa.SendAndInvalidate("si-one", A.sge(16384, oneLen), 0, tok1))
	must(t, qa.SendAndInvalidate("si-many", A.sge(16384, invLen), 0, tok2))
	A.await(t, true, "si-one", "si-many")
	inv := B.await(t, true, "r-inv1", "r-inv2")
	if r := inv["r-inv1"]; r.Type != ndk.OpTypeReceiveAndInvalidate || r.TypeSpecific != uint64(tok1) {
		t.Fatalf("receive of the SendAndInvalidate: %v %#x, want ReceiveAndInvalidate of %#x", r.Type, r.TypeSpecific, tok1)
	}

	// Writes of one packet and of several; Reads of the same bytes back.
	token := B.mr.RemoteToken()
	ops := []rdmaOp{
		{name: "w-one", local: 32768, remote: B.mr.VA() + 128<<10, n: 64, token: token},
		{name: "w-many", local: 40960, remote: B.mr.VA() + 256<<10, n: 6000, token: token},
	}
	fill(A.buf[32768:32768+64], 4)
	fill(A.buf[40960:40960+6000], 5)
	for _, o := range ops {
		must(t, qa.Write(o.name, A.sge(o.local, o.n), o.remote, o.token, 0))
	}
	A.await(t, true, "w-one", "w-many")
	reads := []rdmaOp{
		{name: "rd-one", local: 65536, remote: B.mr.VA() + 128<<10, n: 64, token: token, isRead: true, readFromB: 128 << 10},
		{name: "rd-many", local: 73728, remote: B.mr.VA() + 256<<10, n: 6000, token: token, isRead: true, readFromB: 256 << 10},
	}
	for _, o := range reads {
		must(t, qa.Read(o.name, A.sge(o.local, o.n), o.remote, o.token, 0))
	}
	A.await(t, true, "rd-one", "rd-many")
	ops = append(ops, reads...)

	// Ping-pong Sends: B answers each at once, so its reply carries the ack of A's Send.
	for i := range 30 {
		r, s := fmt.Sprintf("pa%d", i), fmt.Sprintf("pb%d", i)
		must(t, qb.Receive("rb"+r, B.sge(32768, 64)))
		must(t, qa.Receive("ra"+r, A.sge(98304, 64)))
		must(t, qa.Send(r, A.sge(0, 32), 0))
		B.await(t, true, "rb"+r)
		must(t, qb.Send(s, B.sge(0, 32), 0))
		B.await(t, true, s)
		A.await(t, true, r, "ra"+r)
	}

	// Small Writes posted back to back: the engine packs them into Bundles.
	const small = 16
	var names []string
	for i := range small {
		o := rdmaOp{name: fmt.Sprintf("bw%d", i), local: 106496 + 64*i, remote: B.mr.VA() + 512<<10 + uint64(64*i), n: 32, token: token}
		fill(A.buf[o.local:o.local+o.n], byte(0x40+i))
		must(t, qa.Write(o.name, A.sge(o.local, o.n), o.remote, o.token, 0))
		ops = append(ops, o)
		names = append(names, o.name)
	}
	A.await(t, true, names...)

	// A Send that finds no receive posted: B answers RNR until it posts one.
	fill(A.buf[114688:114688+48], 6)
	must(t, qa.Send("s-rnr", A.sge(114688, 48), 0))
	time.Sleep(400 * time.Millisecond)
	must(t, qb.Receive("r-rnr", B.sge(0, 64)))
	A.await(t, true, "s-rnr")
	B.await(t, true, "r-rnr")

	// Connection 2, beside connection 1: small Writes posted on both back to back leave
	// packed across the two QPs (multi-QP Bundles).
	qa2, qb2 := A.qp(t), B.qp(t)
	accepts <- qb2
	c2, err := a.NewConnector()
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Connect(ctx, qa2, dest, 0, 0, []byte("second")); err != nil {
		t.Fatalf("second Connect: %v", err)
	}
	if err := c2.CompleteConnect(ctx, nil); err != nil {
		t.Fatalf("second CompleteConnect: %v", err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("second Accept: %v", err)
	}
	names = names[:0]
	for i := range small {
		o := rdmaOp{name: fmt.Sprintf("mw%d", i), local: 108544 + 64*i, remote: B.mr.VA() + 520<<10 + uint64(64*i), n: 24, token: token}
		fill(A.buf[o.local:o.local+o.n], byte(0x60+i))
		q := qa
		if i%2 == 1 {
			q = qa2
		}
		must(t, q.Write(o.name, A.sge(o.local, o.n), o.remote, o.token, 0))
		ops = append(ops, o)
		names = append(names, o.name)
	}
	A.await(t, true, names...)

	// Disconnect connection 1.
	if err := c1.Disconnect(ctx); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}

	// A Write with a token B never gave, on connection 2: an access NAK ends it.
	badToken := token ^ 0x5a5a5a00
	must(t, qa2.Write("w-bad", A.sge(0, 64), B.mr.VA(), badToken, 0))
	A.await(t, false, "w-bad")

	// A datagram with a wrong CRC32C from A's kernel to B's port: B's engine drops it.
	forged := append([]byte(nil), workedExample...)
	forged[len(forged)-1] ^= 0xff
	if err := bed.A.Do(func() error {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(bed.B.Addr, port)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(forged)
		return err
	}); err != nil {
		t.Fatalf("send the forged datagram: %v", err)
	}

	// Quiet: read the engines' counters, let the capture take the last datagrams, stop it.
	waitFor(t, 5*time.Second, "B's engine to drop the forged datagram", func() bool {
		return engB.Stats().Malformed > stB0.Malformed
	})
	time.Sleep(300 * time.Millisecond)
	stA1, stB1 := engA.Stats(), engB.Stats()
	time.Sleep(500 * time.Millisecond)
	said := capt.stop(t)
	t.Logf("tshark: %s", strings.TrimSpace(strings.ReplaceAll(said, "\n", "; ")))

	frames := readCapture(t, file, bed.A.Addr, bed.B.Addr)
	checkBed(t, &bedRun{frames: frames, infos: infoColumns(t, file), ops: ops, stA0: stA0, stA1: stA1, stB0: stB0, stB1: stB1,
		aBuf: A.buf, bBuf: B.buf, tok1: tok1, tok2: tok2, badToken: badToken, forged: forged, service: service})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every millisecond until it holds, failing t after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// readCapture decodes the capture file with the dissector and returns every datagram
// between A and B with wire.Parse's reading and the dissector's tree.
func readCapture(t *testing.T, file string, addrA, addrB netip.Addr) []frameOf {
	t.Helper()
	pkts := decode(t, file)
	var out []frameOf
	for i := range pkts {
		pk := &pkts[i]
		d, ok := udpPayload(pk)
		ip := pk.proto("ip")
		if !ok || ip == nil {
			t.Errorf("frame %d: no UDP payload or IPv4 header", i+1)
			continue
		}
		src, dst := ip.kid("ip.src"), ip.kid("ip.dst")
		if src == nil || dst == nil {
			t.Errorf("frame %d: no IPv4 addresses", i+1)
			continue
		}
		f := frameOf{n: i + 1, fromA: src.Show == addrA.String(), d: d, x: pk.proto("xdpndk"), packet: pk}
		if !(f.fromA && dst.Show == addrB.String()) && !(src.Show == addrB.String() && dst.Show == addrA.String()) {
			t.Errorf("frame %d: %s -> %s, not between A and B", i+1, src.Show, dst.Show)
			continue
		}
		f.err = wire.Parse([][]byte{d}, &f.p)
		out = append(out, f)
	}
	return out
}

// rdmaOp is a Write or a Read A posted: from A's buffer at local, n bytes at remote
// under token; a Read reads B's buffer at readFromB.
type rdmaOp struct {
	name      string
	local     int
	remote    uint64
	n         int
	token     uint32
	isRead    bool
	readFromB int
}

// bedRun is what the traffic of TestDissectorOnTheBed was, to check the capture against.
type bedRun struct {
	frames                 []frameOf
	infos                  []string // every frame's Info column, by frame number - 1
	ops                    []rdmaOp
	stA0, stA1, stB0, stB1 transport.EngineStats
	aBuf, bBuf             []byte
	tok1, tok2, badToken   uint32
	forged                 []byte
	service                uint64
}

// checkBed checks the decoded capture against the traffic that made it.
func checkBed(t *testing.T, r *bedRun) {
	t.Helper()
	var data []dataPkt
	opcodes := map[wire.Opcode]int{}
	var bundles, entries, multis, frames [2]int // [0] from A, [1] from B
	forged := 0
	dir := func(fromA bool) int {
		if fromA {
			return 0
		}
		return 1
	}
	info := func(f *frameOf) string {
		if f.n-1 < len(r.infos) {
			return r.infos[f.n-1]
		}
		return ""
	}
	for i := range r.frames {
		f := &r.frames[i]
		if f.x == nil {
			t.Errorf("frame %d: not decoded as xdpndk", f.n)
			continue
		}
		if f.err != nil {
			// The forged datagram, and nothing else, is refused: for its trailer.
			if !errors.Is(f.err, wire.ErrCRC) || !f.fromA || !bytes.Equal(f.d, r.forged) {
				t.Errorf("frame %d from A %v: wire.Parse refuses it: %v", f.n, f.fromA, f.err)
				continue
			}
			forged++
			c := f.x.kid("xdpndk.crc")
			if st, ok := c.num("xdpndk.crc.status"); c == nil || !ok || st != 0 || len(f.packet.experts("xdpndk.crc.bad")) != 1 {
				t.Errorf("frame %d, the forged datagram: CRC status and expert info not bad", f.n)
			}
			if m := f.packet.experts("xdpndk.malformed"); len(m) > 0 {
				t.Errorf("frame %d, the forged datagram: flagged malformed: %q", f.n, m)
			}
			if !strings.Contains(info(f), "[bad CRC]") {
				t.Errorf("frame %d, the forged datagram: Info %q", f.n, info(f))
			}
			continue
		}
		frames[dir(f.fromA)]++
		if diffs := compare(f.x, f.d); len(diffs) > 0 {
			t.Errorf("frame %d (%v): %s", f.n, f.p.Opcode, strings.Join(diffs, "; "))
		}
		opcodes[f.p.Opcode]++
		switch {
		case f.p.Opcode == wire.OpBundle || f.p.Opcode == wire.OpMultiBundle:
			it := f.p.Entries()
			n := it.Count()
			bundles[dir(f.fromA)]++
			entries[dir(f.fromA)] += n
			want := fmt.Sprintf("Bundle %d entries: ", n)
			if f.p.Opcode == wire.OpMultiBundle {
				multis[dir(f.fromA)]++
				c := f.p.Entries()
				groups := 0
				for e := (wire.Packet{}); c.Next(&e); {
					if c.GroupStart() {
						groups++
					}
				}
				want = fmt.Sprintf("MultiBundle %d entries in %d groups: ", n, groups)
			}
			if !strings.HasPrefix(info(f), want) {
				t.Errorf("frame %d: Info %q, want it to start %q", f.n, info(f), want)
			}
			var e wire.Packet
			for it.Next(&e) {
				opcodes[e.Opcode]++
				data = append(data, dataPkt{fromA: f.fromA, frame: f.n, bundled: true, p: e, payload: payloadOf(&e)})
			}
		case f.p.Opcode == wire.OpAck:
			if want := fmt.Sprintf("%s %d", f.p.Ack.Syndrome, f.p.Ack.AckPSN); f.p.Ack.Syndrome == wire.SynAck && !strings.HasPrefix(info(f), want) {
				t.Errorf("frame %d: Info %q, want it to start %q", f.n, info(f), want)
			}
		case !wire.IsCM(f.p.Opcode):
			if want := fmt.Sprintf("%s PSN %d", f.p.Opcode, f.p.PSN); !strings.HasPrefix(info(f), want) {
				t.Errorf("frame %d: Info %q, want it to start %q", f.n, info(f), want)
			}
			data = append(data, dataPkt{fromA: f.fromA, frame: f.n, p: f.p, payload: payloadOf(&f.p)})
		}
	}
	t.Logf("%d datagrams captured on the router: %d from A, %d from B, %d forged; Bundles %d from A (%d entries), %d from B (%d entries)",
		len(r.frames), frames[0], frames[1], forged, bundles[0], entries[0], bundles[1], entries[1])
	if forged != 1 {
		t.Errorf("%d forged datagrams found, want 1", forged)
	}
	for op := range 256 {
		if _, ok := wire.ExtLen(wire.Opcode(op)); ok && opcodes[wire.Opcode(op)] == 0 {
			t.Errorf("no %v captured", wire.Opcode(op))
		}
	}

	// The engines' counts: every datagram they sent was captured, every Bundle counted.
	sentA, sentB := r.stA1.TxPackets-r.stA0.TxPackets, r.stB1.TxPackets-r.stB0.TxPackets
	if uint64(frames[0]) < sentA || uint64(frames[1]) < sentB {
		t.Errorf("captured %d datagrams from A and %d from B, fewer than their engines sent (%d, %d)", frames[0], frames[1], sentA, sentB)
	}
	for _, c := range []struct {
		what      string
		got, want uint64
	}{
		{"Bundles from A / A's BundlesSent", uint64(bundles[0]), r.stA1.BundlesSent - r.stA0.BundlesSent},
		{"their entries / A's BundledSent", uint64(entries[0]), r.stA1.BundledSent - r.stA0.BundledSent},
		{"Bundles from A / B's BundlesReceived", uint64(bundles[0]), r.stB1.BundlesReceived - r.stB0.BundlesReceived},
		{"their entries / B's BundledReceived", uint64(entries[0]), r.stB1.BundledReceived - r.stB0.BundledReceived},
		{"Bundles from B / B's BundlesSent", uint64(bundles[1]), r.stB1.BundlesSent - r.stB0.BundlesSent},
		{"their entries / B's BundledSent", uint64(entries[1]), r.stB1.BundledSent - r.stB0.BundledSent},
		{"multi-QP Bundles from A / A's MultiBundlesSent", uint64(multis[0]), r.stA1.MultiBundlesSent - r.stA0.MultiBundlesSent},
		{"multi-QP Bundles from A / B's MultiBundlesReceived", uint64(multis[0]), r.stB1.MultiBundlesReceived - r.stB0.MultiBundlesReceived},
		{"multi-QP Bundles from B / B's MultiBundlesSent", uint64(multis[1]), r.stB1.MultiBundlesSent - r.stB0.MultiBundlesSent},
		{"B's engine's malformed datagrams / the one forged", r.stB1.Malformed - r.stB0.Malformed, 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
	if bundles[0] == 0 {
		t.Error("A sent no Bundle: the small Writes were not packed")
	}
	if multis[0] == 0 {
		t.Error("A sent no multi-QP Bundle: the small Writes of two QPs were not packed together")
	}

	cms := func(op wire.Opcode, fromA bool) []*frameOf {
		var out []*frameOf
		for i := range r.frames {
			if f := &r.frames[i]; f.err == nil && f.p.Opcode == op && f.fromA == fromA {
				out = append(out, f)
			}
		}
		return out
	}
	// Connection management: the private data of each side, the reject and its reason.
	reqs := map[string]*frameOf{}
	for _, f := range cms(wire.OpConnRequest, true) {
		if f.p.CM.ServiceID != r.service {
			t.Errorf("frame %d: ConnRequest for service %d, want %d", f.n, f.p.CM.ServiceID, r.service)
		}
		if !strings.HasPrefix(info(f), fmt.Sprintf("ConnRequest service %d ", r.service)) {
			t.Errorf("frame %d: Info %q", f.n, info(f))
		}
		reqs[string(f.p.PrivateData)] = f
	}
	for _, p := range []string{"reject me", "hello from A", "second"} {
		if reqs[p] == nil {
			t.Errorf("no ConnRequest with private data %q", p)
		}
	}
	rejected := false
	for _, f := range cms(wire.OpConnReject, false) {
		if q := reqs["reject me"]; q != nil && f.p.CM.ConnID == q.p.CM.ConnID && f.p.CM.Reason == 1 && string(f.p.PrivateData) == "no, thank you" {
			rejected = true
		}
	}
	if !rejected {
		t.Error("no ConnReject of the \"reject me\" request with reason 1 and B's private data")
	}
	welcomes := 0
	for _, f := range cms(wire.OpConnReply, false) {
		if string(f.p.PrivateData) == "welcome" && f.p.Cookie != 0 && f.p.CM.Cookie == f.p.Cookie {
			welcomes++
		}
	}
	if welcomes < 2 || len(cms(wire.OpReadyToUse, true)) < 2 || len(cms(wire.OpDisconnectReq, true)) < 1 || len(cms(wire.OpDisconnectRep, false)) < 1 {
		t.Errorf("ConnReply with B's private data %d, ReadyToUse %d, DisconnectReq %d, DisconnectRep %d; want 2, 2, 1, 1",
			welcomes, len(cms(wire.OpReadyToUse, true)), len(cms(wire.OpDisconnectReq, true)), len(cms(wire.OpDisconnectRep, false)))
	}

	// Sends: the payloads as sent, the SendAndInvalidate tokens.
	isSend := func(op wire.Opcode) bool { return op >= wire.OpSendFirst && op <= wire.OpSendOnlyInv }
	sendOff := func(p *wire.Packet) uint32 { return p.Send.Offset }
	type message struct {
		name     string
		from     int // offset in A's buffer
		n        int
		last     wire.Opcode
		invToken uint32
	}
	msgs := []message{
		{"Send of one packet", 0, 100, wire.OpSendOnly, 0},
		{"Send of several", 8192, 5000, wire.OpSendLast, 0},
		{"SendAndInvalidate of one packet", 16384, 100, wire.OpSendOnlyInv, r.tok1},
		{"SendAndInvalidate of several", 16384, 3000, wire.OpSendLastInv, r.tok2},
	}
	for _, m := range msgs {
		// The message's MSN is its last packet's.
		var msn uint32
		found := false
		for i := range data {
			d := &data[i]
			if d.fromA && d.p.Opcode == m.last && d.p.Send.Total == uint32(m.n) && d.p.Send.InvToken == m.invToken {
				msn, found = d.p.Send.MSN, true
				break
			}
		}
		if !found {
			t.Errorf("%s: no %v from A with Total %d and token %#x", m.name, m.last, m.n, m.invToken)
			continue
		}
		got, psns := assemble(data, func(d *dataPkt) bool {
			return d.fromA && isSend(d.p.Opcode) && d.p.Send.MSN == msn
		}, sendOff, m.n)
		if !bytes.Equal(got, r.aBuf[m.from:m.from+m.n]) {
			t.Errorf("%s (MSN %d, PSNs %v): the payloads decoded differ from the bytes sent", m.name, msn, psns)
		}
		if m.n > 1500 && len(psns) < 3 {
			t.Errorf("%s: %d packets, want at least 3 (first, middle, last)", m.name, len(psns))
		}
	}

	// Writes and Reads: address, token and length as posted, the bytes as in memory.
	for _, o := range r.ops {
		if !o.isRead {
			got, psns := assemble(data, func(d *dataPkt) bool {
				return d.fromA && d.p.Opcode == wire.OpWrite && d.p.RDMA.Addr == o.remote && d.p.RDMA.Token == o.token && d.p.RDMA.Length == uint32(o.n)
			}, func(p *wire.Packet) uint32 { return p.RDMA.Offset }, o.n)
			if len(psns) == 0 {
				t.Errorf("%s: no Write from A to %#x, token %#x, length %d", o.name, o.remote, o.token, o.n)
			} else if !bytes.Equal(got, r.aBuf[o.local:o.local+o.n]) {
				t.Errorf("%s: the payloads decoded differ from the bytes written", o.name)
			}
			continue
		}
		var req *dataPkt
		for i := range data {
			if d := &data[i]; d.fromA && d.p.Opcode == wire.OpReadRequest && d.p.RDMA.Addr == o.remote && d.p.RDMA.Token == o.token && d.p.RDMA.Length == uint32(o.n) {
				req = d
				break
			}
		}
		if req == nil {
			t.Errorf("%s: no ReadRequest from A for %#x, token %#x, length %d", o.name, o.remote, o.token, o.n)
			continue
		}
		got, psns := assemble(data, func(d *dataPkt) bool {
			return !d.fromA && d.p.Opcode == wire.OpReadResponse && d.p.ReadResp.ReqPSN == req.p.PSN
		}, func(p *wire.Packet) uint32 { return p.ReadResp.Offset }, o.n)
		if len(psns) == 0 || !bytes.Equal(got, r.bBuf[o.readFromB:o.readFromB+o.n]) {
			t.Errorf("%s: %d ReadResponse packets for request PSN %d, bytes equal to B's memory: %v", o.name, len(psns), req.p.PSN, bytes.Equal(got, r.bBuf[o.readFromB:o.readFromB+o.n]))
		}
	}
	bundledWrites := 0
	for i := range data {
		if d := &data[i]; d.bundled && d.p.Opcode == wire.OpWrite && d.p.RDMA.Length == 32 {
			bundledWrites++
		}
	}
	if bundledWrites == 0 {
		t.Error("none of the small Writes travelled in a Bundle")
	}

	// Piggybacked acknowledgements.
	piggy := 0
	for i := range data {
		if data[i].p.Flags&wire.FlagAck != 0 {
			piggy++
		}
	}
	if piggy == 0 {
		t.Error("no data packet carried a piggybacked ack")
	}

	// NAKs: the RNR for the Send without a receive, the access error for the bad token.
	naks := func(syn wire.Syndrome, psn wire.PSN) int {
		n := 0
		for _, f := range cms(wire.OpAck, false) {
			if f.p.Ack.Syndrome == syn && f.p.Ack.NakPSN == psn {
				n++
				if len(f.packet.experts("xdpndk.nak")) != 1 {
					t.Errorf("frame %d: %v without its expert info", f.n, syn)
				}
				if want := fmt.Sprintf("%v PSN %d", syn, psn); !strings.HasPrefix(info(f), want) {
					t.Errorf("frame %d: Info %q, want it to start %q", f.n, info(f), want)
				}
			}
		}
		return n
	}
	var rnrPSN, badPSN *wire.PSN
	rnrSent := 0
	for i := range data {
		d := &data[i]
		if d.fromA && d.p.Opcode == wire.OpSendOnly && bytes.Equal(d.payload, r.aBuf[114688:114688+48]) {
			rnrPSN = &d.p.PSN
			rnrSent++
		}
		if d.fromA && d.p.Opcode == wire.OpWrite && d.p.RDMA.Token == r.badToken {
			badPSN = &d.p.PSN
		}
	}
	switch {
	case rnrPSN == nil:
		t.Error("the Send that found no receive was not captured")
	case naks(wire.SynNakRNR, *rnrPSN) == 0 || rnrSent < 2:
		t.Errorf("the Send that found no receive (PSN %d): %d RNR NAKs naming it, sent %d times; want at least 1 and 2",
			*rnrPSN, naks(wire.SynNakRNR, *rnrPSN), rnrSent)
	}
	switch {
	case badPSN == nil:
		t.Error("the Write with the bad token was not captured")
	case naks(wire.SynNakAccess, *badPSN) == 0:
		t.Errorf("no NakAccess naming the Write with the bad token (PSN %d)", *badPSN)
	}
	t.Logf("%d data packets (%d bundled Writes), %d with a piggybacked ack; RNR'd Send sent %d times", len(data), bundledWrites, piggy, rnrSent)
}
