package transport_test

// Helpers of the field-validation tests (validate_test.go) and of FuzzEnginePair
// (enginefuzz_test.go). Every name here starts with val.

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// valLink wraps a host's simlink link. It hands the engine datagrams that never crossed the
// network, from any source (port 0 and addresses no host can have included); it rewrites
// the header and extension of chosen outgoing datagrams, as a peer that sends out-of-range
// fields would; and it shows every datagram the engine sends and receives to observers, so a
// test learns the live connection's values (ConnIDs, QPNs, cookies, data ports, PSNs).
type valLink struct {
	*simlink.Link
	clock func() int64

	mu       sync.Mutex
	inbox    []valDgram // injected datagrams, handed over before the network's
	held     []valDgram // the injected datagrams the last Receive returned
	injected bool       // the last Receive returned injected datagrams
	// mutate may change an outgoing datagram's header and extension (not its payload
	// length); true: send the changed datagram instead.
	mutate func(p *wire.Packet) bool
	onTx   func(now int64, p *wire.Packet, pk *link.Packet)
	onRx   func(now int64, p *wire.Packet, pk *link.Packet)
	sent   map[wire.Opcode]int

	parsed wire.Packet
	segs   [link.MaxSegments][]byte
	one    [1]link.Packet
	enc    []byte
}

// valDgram is an injected datagram.
type valDgram struct {
	from netip.AddrPort
	b    []byte
}

func newValLink(l *simlink.Link, clock func() int64) *valLink {
	return &valLink{Link: l, clock: clock, sent: map[wire.Opcode]int{}, enc: make([]byte, l.MaxPayload())}
}

// inject queues dgram for the engine as if it came from from.
func (l *valLink) inject(from netip.AddrPort, dgram []byte) {
	l.mu.Lock()
	l.inbox = append(l.inbox, valDgram{from: from, b: append([]byte(nil), dgram...)})
	l.mu.Unlock()
}

// parse parses pk into l.parsed; false if it is not a valid datagram. l.mu held.
func (l *valLink) parse(pk *link.Packet) bool {
	n := min(int(pk.NSegs), link.MaxSegments)
	for i := range n {
		l.segs[i] = pk.Segs[i]
	}
	return wire.Parse(l.segs[:n], &l.parsed) == nil
}

// Send implements link.Link: one datagram at a time, each shown to onTx and, if
// mutate rewrites it, sent rewritten.
func (l *valLink) Send(pkts []link.Packet) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range pkts {
		l.one[0] = pkts[i]
		pk := &l.one[0]
		if l.parse(pk) && (l.mutate == nil || !l.mutate(&l.parsed) || l.rewrite(pk)) {
			l.sent[l.parsed.Opcode]++
			if l.onTx != nil {
				l.onTx(l.clock(), &l.parsed, pk)
			}
		}
		if n, err := l.Link.Send(l.one[:]); n == 0 {
			return i, err
		}
	}
	return len(pkts), nil
}

// rewrite encodes l.parsed (as mutate left it) with its payload into l.enc and points pk
// at it; a packet that does not encode (a piggybacked NAK) is sent as it was. It reports
// whether what is sent parses (into l.parsed). l.mu held.
func (l *valLink) rewrite(pk *link.Packet) bool {
	p := &l.parsed
	if p.Opcode >= wire.OpConnRequest {
		p.CM.PrivateLen = uint16(len(p.PrivateData))
	}
	n, err := wire.Encode(l.enc, p)
	if err == nil {
		for _, b := range p.Payload[:p.NPayload] {
			n += copy(l.enc[n:], b)
		}
		wire.PutTrailer(l.enc[n:n+wire.TrailerLen], wire.UpdateCRC(0, l.enc[:n]))
		pk.Segs = [link.MaxSegments][]byte{l.enc[: n+wire.TrailerLen : n+wire.TrailerLen]}
		pk.NSegs = 1 // a zero-copy packet's cookie is still reported: simlink copies either way
	}
	return l.parse(pk)
}

// Receive implements link.Link: injected datagrams first (a batch of their own), then
// the network's.
func (l *valLink) Receive(pkts []link.Packet) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held, l.injected = l.held[:0], false
	if len(l.inbox) > 0 && len(pkts) > 0 {
		n := min(len(pkts), len(l.inbox))
		for i := range n {
			d := l.inbox[i]
			pkts[i] = link.Packet{Remote: d.from, LocalPort: l.LocalAddr().Port()}
			pkts[i].SetData(d.b)
			l.held = append(l.held, d)
		}
		l.inbox = append(l.inbox[:0], l.inbox[n:]...)
		l.injected = true
		l.observe(pkts[:n])
		return n, nil
	}
	n, err := l.Link.Receive(pkts)
	l.observe(pkts[:n])
	return n, err
}

// observe shows received datagrams to onRx. l.mu held.
func (l *valLink) observe(pkts []link.Packet) {
	if l.onRx == nil {
		return
	}
	for i := range pkts {
		if l.parse(&pkts[i]) {
			l.onRx(l.clock(), &l.parsed, &pkts[i])
		}
	}
}

// Release implements link.Link: injected datagrams are simply forgotten.
func (l *valLink) Release(pkts []link.Packet) {
	l.mu.Lock()
	injected := l.injected
	l.injected = false
	l.mu.Unlock()
	if injected {
		for i := range pkts {
			pkts[i] = link.Packet{}
		}
		return
	}
	l.Link.Release(pkts)
}

// sentCount returns how many datagrams of opcode op the engine sent.
func (l *valLink) sentCount(op wire.Opcode) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent[op]
}

// valEngine adds host n to w with an engine on a valLink.
func valEngine(w *semWorld, n int, tweak func(*transport.Config)) (*semNode, *valLink) {
	w.t.Helper()
	l, err := w.net.AddHost(semAddr(n))
	if err != nil {
		w.t.Fatal(err)
	}
	vl := newValLink(l, w.clock.Now)
	nd := &semNode{w: w, addr: semAddr(n), link: l, mem: newTestMem()}
	cfg := transport.DefaultConfig(vl)
	cfg.Now = w.clock.Now
	cfg.Resolver = nd.mem
	if tweak != nil {
		tweak(&cfg)
	}
	if nd.eng, err = transport.NewEngine(cfg); err != nil {
		w.t.Fatal(err)
	}
	w.nodes = append(w.nodes, nd)
	return nd, vl
}

// valEncode encodes p with payload and a correct trailer: a datagram that passes the CRC
// (whether Parse accepts the rest is the point of the callers).
func valEncode(tb testing.TB, p *wire.Packet, payload []byte) []byte {
	tb.Helper()
	if p.Opcode >= wire.OpConnRequest {
		p.CM.PrivateLen = uint16(len(p.PrivateData))
	}
	b := make([]byte, wire.HeaderLen+wire.CMExtLen+wire.MaxPrivateData+len(payload)+wire.TrailerLen)
	n, err := wire.Encode(b, p)
	if err != nil {
		tb.Fatalf("encode %v: %v", p.Opcode, err)
	}
	n += copy(b[n:], payload)
	wire.PutTrailer(b[n:], wire.UpdateCRC(0, b[:n]))
	return b[:n+wire.TrailerLen]
}

// valInject sends dgram across w's network to to, from the IP of from with from's port as
// source port (a new host there, as a raw socket on a peer would be).
func valInject(w *semWorld, from, to netip.AddrPort, dgram []byte) {
	w.t.Helper()
	l, err := w.net.AddHost(netip.AddrPortFrom(from.Addr(), 31337))
	if err != nil {
		w.t.Fatal(err)
	}
	defer l.Close()
	pk := []link.Packet{{Remote: to, LocalPort: from.Port()}}
	pk[0].SetData(dgram)
	if n, err := l.Send(pk); n != 1 || err != nil {
		w.t.Fatalf("inject: sent %d: %v", n, err)
	}
}
