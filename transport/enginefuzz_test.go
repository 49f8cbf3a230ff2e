package transport_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/ack"
	"github.com/xdpndk/xdpndk/transport/simlink"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// FuzzEnginePair drives two connected engines on a simulated network, in virtual time,
// through a sequence of operations decoded from the input: forged connection-management
// messages with any field values (or the live connection's: its ConnIDs, QPNs, cookies,
// ports), from either peer, a third host or addresses nothing may answer; forged data
// packets and acknowledgements that pass the outer gate (right QPN, cookie and source)
// with any extension fields; replays of datagrams the engines sent with bytes changed;
// datagrams an engine sends rewritten on their way (a peer that announces out-of-range
// values); Sends, Writes, Reads and receives posted on the QPs; connects, accepts, rejects,
// cancels, disconnects and flushes; path impairments; time passing.
//
// After the operations everything is run past every timeout (connection management,
// retransmission, RNR, credits, keepalive), every pending application decision is taken (a replied
// attempt is cancelled, an unanswered request rejected, every QP flushed) and run out
// again. Then:
//   - nothing panicked;
//   - every work request and receive that was posted completed exactly once, as what it
//     was posted as, with no more bytes than it had (any status);
//   - no byte outside the registered regions the peer may write and the buffers of posted
//     receives and Reads changed (a Send's or Write's source included);
//   - the connection manager's tables stayed within their bounds all along and are empty
//     at the end; every attempt, accepted request and disconnect has its result; no QP is
//     left connecting.
//
// Each operation is an fzRec-byte record (see fzHarness.op); the seeds are built by
// fzSeeds and committed under testdata/fuzz/FuzzEnginePair (TestWriteEnginePairCorpus).
func FuzzEnginePair(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { fzRun(t, data) })
}

const (
	fzRec      = 40        // bytes per operation record
	fzMaxOps   = 48        // operations per input
	fzArena    = 256 << 10 // bytes of memory per host
	fzBufStart = 32 << 10  // where posted buffers start in the arena
	fzMaxBuf   = 3000      // largest posted buffer
	fzService  = 5         // both engines listen on it
	fzTok1     = 0x51      // region the peer may read and write: arena [0, 16K) at fzBase1
	fzTok2     = 0x52      // region the peer may only read: arena [16K, 20K) at fzBase2
	fzBase1    = 0x10000
	fzBase2    = 0x40000
	fzLen1     = 16 << 10
	fzLen2     = 4 << 10
	fzSettle   = 50 * time.Microsecond // virtual time run after every operation
	fzDrain    = 10 * time.Second      // virtual time run at the end, twice
	fzMaxSteps = 2_000_000             // engine rounds per input: more is a livelock
	fzHalfOpen = 4                     // Config.MaxHalfOpen
)

// fzThird is a host that takes no part: forged messages come from it, answers to it are lost.
var fzThird = netip.MustParseAddrPort("198.18.0.99:4793")

// fzConfig makes every timeout short, so that the end of a run comes after few events,
// and the tables small, so that the fuzzer reaches their bounds.
func fzConfig(c *transport.Config) {
	c.CMTimeout = time.Millisecond
	c.ConnectTimeout = 10 * time.Millisecond
	c.RetryTimeout = 50 * time.Millisecond
	c.RNRTimeout = 20 * time.Millisecond
	c.KeepAlive = 300 * time.Millisecond
	c.CreditTimeout = 5 * time.Millisecond
	c.RTO = ack.RTOConfig{Max: 20 * time.Millisecond}
	c.Window = 64
	c.MaxHalfOpen = fzHalfOpen
}

// fzQPConfig is the configuration of every QP of the fuzzer.
var fzQPConfig = transport.QPConfig{SendDepth: 16, RecvDepth: 16, IRD: 4, ORD: 4}

// fzNode is one engine of the pair, with its memory.
type fzNode struct {
	idx      int
	nd       *semNode
	vl       *valLink
	l        *transport.Listener
	qps      []*transport.QP
	arena    []byte
	orig     []byte   // the arena's initial contents (shared, never written)
	writable [][2]int // arena ranges the engine may write: region 1, posted receives and Read buffers
	bump     int      // next free arena byte for a posted buffer
	pulled   []*transport.ConnRequest
}

// fzPost is a posted work request or receive: what it was and how many bytes it had.
type fzPost struct {
	kind transport.OpKind
	n    int
}

// fzFlow is what the fuzzer learned of one direction of a connection from the datagrams
// its sender sent: where they come from and go, and the values right now.
type fzFlow struct {
	from, to netip.AddrPort
	qpn      uint32 // DestQPN
	cookie   uint64
	next     wire.PSN // one past the highest data PSN sent
	msn      uint32   // one past the highest MSN sent
	readPSN  wire.PSN // the last ReadRequest's PSN
}

// fzCapture is a datagram an engine sent.
type fzCapture struct {
	from, to netip.AddrPort
	b        []byte
}

// fzHarness runs one input.
type fzHarness struct {
	t       *testing.T
	w       *semWorld
	n       [2]*fzNode
	flows   []fzFlow
	connIDs []uint64
	cookies []uint64
	ports   []uint16
	caps    []fzCapture
	capNext int
	posted  map[*transport.QP]map[uint64]fzPost
	ctx     uint64
	conns   []*transport.Connector
	accepts []*transport.ConnRequest
	discs   []*transport.Disconnecting
	steps   int
}

// fzRun decodes and runs one input, then checks everything FuzzEnginePair promises.
func fzRun(t *testing.T, data []byte) {
	h := fzSetup(t)
	for i := 0; i < fzMaxOps && i*fzRec < len(data); i++ {
		var r fzRecord
		copy(r[:], data[i*fzRec:])
		h.op(&r)
		h.runFor(fzSettle)
		h.checkBounds("after operation")
	}
	h.runFor(fzDrain)
	h.checkBounds("after the drain")
	h.finish()
	h.runFor(fzDrain)
	h.check()
}

// fzRecord is one operation: record[0] selects it, the rest are its arguments.
type fzRecord [fzRec]byte

func (r *fzRecord) u16(i int) uint16 { return binary.BigEndian.Uint16(r[i:]) }
func (r *fzRecord) u32(i int) uint32 { return binary.BigEndian.Uint32(r[i:]) }
func (r *fzRecord) u64(i int) uint64 { return binary.BigEndian.Uint64(r[i:]) }

// fzSetup connects a QP of engine A (host 1) to one of engine B (host 2), moves a Send each
// way on them (so that the connection's values can be learned), registers each host's
// regions and makes both listen on fzService.
func fzSetup(t *testing.T) *fzHarness {
	h := &fzHarness{t: t, posted: map[*transport.QP]map[uint64]fzPost{}}
	h.w = newSemWorld(t, simlink.Config{Seed: 7, Default: simlink.Impairments{Latency: 5 * time.Microsecond}})
	for i := range h.n {
		nd, vl := valEngine(h.w, i+1, fzConfig)
		n := &fzNode{idx: i, nd: nd, vl: vl, orig: fzPatterns()[i], bump: fzBufStart}
		n.arena = bytes.Clone(n.orig)
		n.writable = [][2]int{{0, fzLen1}}
		nd.mem.add(fzTok1, 0, fzBase1, n.arena[:fzLen1:fzLen1], memreg.AccessRemoteRead|memreg.AccessRemoteWrite)
		nd.mem.add(fzTok2, 0, fzBase2, n.arena[fzLen1:fzLen1+fzLen2:fzLen1+fzLen2], memreg.AccessRemoteRead)
		vl.onTx = func(_ int64, p *wire.Packet, pk *link.Packet) { h.learn(n, p, pk) }
		h.n[i] = n
	}
	qa, qb := h.n[0].newQP(h), h.n[1].newQP(h)
	h.w.connectQPs(h.n[0].nd, qa, h.n[1].nd, qb)
	for i := range h.n {
		var r fzRecord
		r[0], r[1] = fzOpRecv, byte(i)
		r.put16(2, 64)
		h.postRecv(h.n[i], &r)
		r[0] = fzOpSend
		r.put16(2, 16)
		h.postSend(h.n[i], &r)
	}
	h.w.runUntil(time.Second, "warm-up", func() bool { return len(h.w.rec.of(qa)) == 2 && len(h.w.rec.of(qb)) == 2 })
	for _, n := range h.n {
		var err error
		if n.l, err = n.nd.eng.Listen(fzService, 4); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (n *fzNode) newQP(h *fzHarness) *transport.QP {
	q := n.nd.qp(fzQPConfig)
	n.qps = append(n.qps, q)
	h.posted[q] = map[uint64]fzPost{}
	return q
}

// peer is the other engine of the pair.
func (h *fzHarness) peer(n *fzNode) *fzNode { return h.n[1-n.idx] }

// learn records what a datagram engine n sent tells an attacker on the path.
func (h *fzHarness) learn(n *fzNode, p *wire.Packet, pk *link.Packet) {
	from := n.nd.addr
	if pk.LocalPort != 0 {
		from = netip.AddrPortFrom(from.Addr(), pk.LocalPort)
	}
	var b []byte
	for _, s := range pk.Segs[:pk.NSegs] {
		b = append(b, s...)
	}
	c := fzCapture{from: from, to: pk.Remote, b: b}
	if len(h.caps) < 32 {
		h.caps = append(h.caps, c)
	} else {
		h.caps[h.capNext] = c
		h.capNext = (h.capNext + 1) % len(h.caps)
	}
	if p.Opcode >= wire.OpConnRequest {
		if p.Opcode == wire.OpConnRequest {
			h.connIDs = fzAdd(h.connIDs, p.CM.ConnID)
		}
		if p.CM.Cookie != 0 {
			h.cookies = fzAdd(h.cookies, p.CM.Cookie)
		}
		if p.CM.DataPort != 0 {
			h.ports = fzAdd(h.ports, p.CM.DataPort)
		}
		return
	}
	f := h.flow(from, pk.Remote, p.DestQPN)
	f.cookie = p.Cookie
	h.cookies = fzAdd(h.cookies, p.Cookie)
	h.ports = fzAdd(h.ports, from.Port())
	if p.Opcode == wire.OpAck {
		return
	}
	if !p.PSN.Less(f.next) || f.next == 0 {
		f.next = p.PSN.Add(1)
	}
	switch p.Opcode {
	case wire.OpReadRequest:
		f.readPSN = p.PSN
	case wire.OpWrite, wire.OpReadResponse:
	default:
		if msnAfter := p.Send.MSN + 1; int32(msnAfter-f.msn) > 0 {
			f.msn = msnAfter
		}
	}
}

// fzAdd appends v to a list of the 16 latest distinct values.
func fzAdd[T comparable](l []T, v T) []T {
	for i, x := range l {
		if x == v {
			return append(append(l[:i:i], l[i+1:]...), v)
		}
	}
	if len(l) == 16 {
		l = append(l[:0], l[1:]...)
	}
	return append(l, v)
}

// flow finds or adds the flow of datagrams from from to to's QP qpn.
func (h *fzHarness) flow(from, to netip.AddrPort, qpn uint32) *fzFlow {
	for i := range h.flows {
		if f := &h.flows[i]; f.from == from && f.to == to && f.qpn == qpn {
			return f
		}
	}
	if len(h.flows) == 16 {
		h.flows = h.flows[1:]
	}
	h.flows = append(h.flows, fzFlow{from: from, to: to, qpn: qpn})
	return &h.flows[len(h.flows)-1]
}

// flowsTo returns the flows into engine n.
func (h *fzHarness) flowsTo(n *fzNode) []*fzFlow {
	var out []*fzFlow
	for i := range h.flows {
		if h.flows[i].to == n.nd.addr {
			out = append(out, &h.flows[i])
		}
	}
	return out
}

// pick returns the value a choice byte c selects: 0, the random value rnd, or one of the
// learned values (c = 2: the latest).
func pick[T any](c byte, learned []T, rnd T) T {
	var zero T
	switch {
	case c%4 == 0:
		return zero
	case c%4 == 1 || len(learned) == 0:
		return rnd
	}
	return learned[len(learned)-1-int(c>>2)%len(learned)]
}

// qpns returns the QPNs of n's QPs.
func (n *fzNode) qpns() []uint32 {
	out := make([]uint32, len(n.qps))
	for i, q := range n.qps {
		out[i] = q.QPN()
	}
	return out
}

// Operations.
const (
	fzOpCM = iota
	fzOpData
	fzOpSend
	fzOpWrite
	fzOpRead
	fzOpRecv
	fzOpConnect
	fzOpAnswer
	fzOpConnector
	fzOpDisconnect
	fzOpAdvance
	fzOpFlush
	fzOpImpair
	fzOpReplay
	fzOpRewrite
	fzNumOps
)

// op runs one operation. record[1] bit 0 picks the engine it acts on (A or B) for the
// operations that act on one.
func (h *fzHarness) op(r *fzRecord) {
	n := h.n[r[1]&1]
	switch r[0] % fzNumOps {
	case fzOpCM:
		h.injectCM(n, r)
	case fzOpData:
		h.injectData(n, r)
	case fzOpSend, fzOpWrite, fzOpRead:
		h.postSend(n, r)
	case fzOpRecv:
		h.postRecv(n, r)
	case fzOpConnect:
		h.connect(n, r)
	case fzOpAnswer:
		h.answer(n, r)
	case fzOpConnector:
		h.connector(r)
	case fzOpDisconnect:
		if q := n.qp(r[1] >> 1); q != nil {
			h.discs = append(h.discs, q.StartDisconnect(0))
		}
	case fzOpAdvance:
		h.runFor(time.Duration(r.u32(2)%(1<<20)) * time.Microsecond)
	case fzOpFlush:
		if q := n.qp(r[1] >> 1); q != nil {
			q.Flush()
		}
	case fzOpImpair:
		h.impair(n, r)
	case fzOpReplay:
		h.replay(r)
	case fzOpRewrite:
		h.rewrite(n, r)
	}
}

// fzAllOps are the opcodes a rewrite rule picks from.
var fzAllOps = [...]wire.Opcode{wire.OpConnRequest, wire.OpConnReply, wire.OpReadyToUse, wire.OpConnReject,
	wire.OpDisconnectReq, wire.OpDisconnectRep, wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendLast, wire.OpSendOnly,
	wire.OpSendLastInv, wire.OpSendOnlyInv, wire.OpWrite, wire.OpReadRequest, wire.OpReadResponse, wire.OpAck}

// rewrite makes engine n's link change one field of the next datagrams of one opcode n
// sends, as a peer that announces out-of-range values would. Record: [2] opcode, [3]
// field, [4:8] 32-bit value, [8:16] 64-bit value, [16] datagrams to change (1 to 4).
func (h *fzHarness) rewrite(n *fzNode, r *fzRecord) {
	op := fzAllOps[int(r[2])%len(fzAllOps)]
	field, v32, v64, count := r[3]%8, r.u32(4), r.u64(8), 1+int(r[16]%4)
	n.vl.mutate = func(p *wire.Packet) bool {
		if p.Opcode != op || count == 0 {
			return false
		}
		count--
		switch {
		case op >= wire.OpConnRequest:
			fzRewriteCM(p, field, v32, v64)
		case op == wire.OpWrite || op == wire.OpReadRequest:
			d := &p.RDMA
			switch field % 4 {
			case 0:
				d.Addr = v64
			case 1:
				d.Token = v32
			case 2:
				d.Length = v32
			default:
				d.Offset = v32
			}
		case op == wire.OpReadResponse:
			if field%2 == 0 {
				p.ReadResp.ReqPSN = wire.PSN(v32)
			} else {
				p.ReadResp.Offset = v32
			}
		case op == wire.OpAck:
			fzRewriteAck(&p.Ack, field, v32, v64)
		default: // Send*
			sx := &p.Send
			switch field % 4 {
			case 0:
				sx.MSN = v32
			case 1:
				sx.Offset = v32
			case 2:
				sx.Total = v32
			default:
				sx.InvToken = v32
			}
		}
		return true
	}
}

// fzRewriteCM sets field number field of a connection-management message.
func fzRewriteCM(p *wire.Packet, field byte, v32 uint32, v64 uint64) {
	c := &p.CM
	switch field {
	case 0:
		c.MaxPayload = uint16(v32)
	case 1:
		c.SrcQPN = v32
	case 2:
		c.DataPort = uint16(v32)
	case 3:
		c.Cookie = v64
	case 4:
		c.ConnID = v64
	case 5:
		p.Cookie = v64
	case 6:
		c.IRD, c.ORD = byte(v32), byte(v32>>8)
	default:
		p.DestQPN = v32
	}
}

// fzRewriteAck sets field number field of an acknowledgement.
func fzRewriteAck(a *wire.AckExt, field byte, v32 uint32, v64 uint64) {
	switch field {
	case 0:
		a.AckPSN = wire.PSN(v32)
	case 1:
		a.SACK = v64
	case 2:
		a.Credits = v32
	case 3:
		a.Syndrome = wire.Syndrome(v32 % 8)
	case 4:
		a.Value = uint16(v32)
	case 5:
		a.NakPSN = wire.PSN(v32)
	case 6:
		a.EchoTS = v32
	default:
		a.Delay = v32
	}
}

// qp returns n's QP number i (modulo how many it has).
func (n *fzNode) qp(i byte) *transport.QP {
	if len(n.qps) == 0 {
		return nil
	}
	return n.qps[int(i)%len(n.qps)]
}

// source returns where a forged message to n comes from, by choice c: the peer's CM
// address, a data address the peer sends from, a third host, the peer's IP with another
// port, n's own address, or addresses nothing may answer (unspecified, multicast, port 0).
func (h *fzHarness) source(n *fzNode, c byte, port uint16) netip.AddrPort {
	p := h.peer(n).nd.addr
	switch c % 8 {
	case 1:
		for _, f := range h.flowsTo(n) {
			return f.from
		}
		return p
	case 2:
		return fzThird
	case 3:
		return netip.AddrPortFrom(p.Addr(), port)
	case 4:
		return n.nd.addr
	case 5:
		return netip.MustParseAddrPort("0.0.0.0:4793")
	case 6:
		return netip.MustParseAddrPort("224.0.0.1:4793")
	case 7:
		return netip.AddrPortFrom(p.Addr(), 0)
	}
	return p
}

// fzMaxPayloads are the MaxPayload values a forged CM message picks from (the last entry
// stands for the record's random value).
var fzMaxPayloads = [...]uint16{0, 48, wire.MinMaxPayload - 1, wire.MinMaxPayload, wire.MinMaxPayload + 1, 1472, 9000,
	wire.MaxMaxPayload, wire.MaxMaxPayload + 1, 0xffff, 0}

// injectCM hands engine n a connection-management message. Record: [1] bits 1-3 source,
// [2] opcode, [3] header DestQPN, [4] header cookie, [5] ConnID, [6] SrcQPN, [7] CM cookie,
// [8] MaxPayload, [9] DataPort, [10] service, [11] IRD, [12] ORD, [13] private data length,
// [14] flags, [16:24] random 64 bits, [24:28] random 32 bits, [28:30] random 16 bits,
// [30:34] InitialPSN, [34:36] Reason.
func (h *fzHarness) injectCM(n *fzNode, r *fzRecord) {
	rnd64, rnd32, rnd16 := r.u64(16), r.u32(24), r.u16(28)
	p := wire.Packet{Header: wire.Header{Opcode: wire.OpConnRequest + wire.Opcode(r[2]%6), TS: 1}}
	p.DestQPN = pick(r[3], n.qpns(), rnd32)
	p.Cookie = pick(r[4], h.cookies, rnd64)
	c := &p.CM
	c.ConnID = pick(r[5], h.connIDs, rnd64)
	c.SrcQPN = pick(r[6], h.peer(n).qpns(), rnd32)
	switch r[7] % 5 {
	case 0:
	case 1:
		c.Cookie = rnd64
	case 2:
		c.Cookie = p.Cookie
	default:
		c.Cookie = pick(r[7]>>2|2, h.cookies, rnd64)
	}
	if c.MaxPayload = fzMaxPayloads[int(r[8])%len(fzMaxPayloads)]; int(r[8])%len(fzMaxPayloads) == len(fzMaxPayloads)-1 {
		c.MaxPayload = rnd16
	}
	c.DataPort = pick(r[9], h.ports, rnd16)
	switch r[10] % 3 {
	case 0:
		c.ServiceID = fzService
	case 1:
		c.ServiceID = fzService + 1
	default:
		c.ServiceID = rnd64
	}
	c.IRD, c.ORD = r[11], r[12]
	c.InitialPSN = wire.PSN(r.u32(30))
	c.Reason = r.u16(34)
	p.PrivateData = make([]byte, int(r[13])%(wire.MaxPrivateData+1))
	if r[14]&1 != 0 {
		p.Flags = wire.FlagRetransmit
	}
	n.vl.inject(h.source(n, r[1]>>1, rnd16), valEncode(h.t, &p, nil))
}

// fzDataOps are the opcodes a forged data packet picks from.
var fzDataOps = [...]wire.Opcode{wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendLast, wire.OpSendOnly, wire.OpSendLastInv,
	wire.OpSendOnlyInv, wire.OpWrite, wire.OpReadRequest, wire.OpReadResponse, wire.OpAck}

// injectData hands engine n a data packet or acknowledgement on a flow into it, with the
// flow's source, QPN and cookie (record [2] bit 0 set: one of them wrong, by [2] >> 1).
// Record: [1] >> 1 flow, [3] opcode, [4] PSN offset from the flow's next (signed), [5]
// bits: 1 random PSN, 2 coherent Send fields, 4 piggybacked ack, 8 AckReq, 16 Solicited,
// 32 Last, 64 Retransmit, 128 random flags [6:8]; [8:10] payload length, [10:14] a,
// [14:18] b, [18:26] c, [26] [27] palette choices, [28:30] RNR Value, [30] Syndrome,
// [31:35] credits offset.
func (h *fzHarness) injectData(n *fzNode, r *fzRecord) {
	flows := h.flowsTo(n)
	if len(flows) == 0 {
		return
	}
	f := flows[int(r[1]>>1)%len(flows)]
	from, qpn, cookie := f.from, f.qpn, f.cookie
	if r[2]&1 != 0 {
		switch r[2] >> 1 % 3 {
		case 0:
			qpn ^= r.u32(10) | 1
		case 1:
			cookie ^= r.u64(18) | 1
		default:
			from = fzThird
		}
	}
	op := fzDataOps[int(r[3])%len(fzDataOps)]
	plen := int(r.u16(8)) % 1400
	if !wire.HasPayload(op) {
		plen = 0
	}
	a, b, c := r.u32(10), r.u32(14), r.u64(18)
	p := wire.Packet{Header: wire.Header{Opcode: op, DestQPN: qpn, Cookie: cookie, TS: 1}}
	p.PSN = f.next.Add(uint32(int32(int8(r[4]))))
	if r[5]&1 != 0 {
		p.PSN = wire.PSN(b)
	}
	fl := r[5]
	if fl&8 != 0 {
		p.Flags |= wire.FlagAckReq
	}
	if fl&16 != 0 {
		p.Flags |= wire.FlagSolicited
	}
	if fl&32 != 0 {
		p.Flags |= wire.FlagLast
	}
	if fl&64 != 0 {
		p.Flags |= wire.FlagRetransmit
	}
	if fl&4 != 0 && op != wire.OpAck {
		p.Flags |= wire.FlagAck
	}
	p.Flags &= wire.AllowedFlags(op)
	// The acknowledgement (an Ack's, or a piggybacked one) refers to n's own stream: the
	// flow out of n on the same connection, if known.
	ackPSN := wire.PSN(a)
	for _, g := range h.flows {
		if g.to == from || g.from.Addr() == n.nd.addr.Addr() && g.to == h.peer(n).nd.addr {
			ackPSN = g.next.Add(uint32(int32(int8(a))))
			break
		}
	}
	p.Ack = wire.AckExt{AckPSN: ackPSN, SACK: c, Credits: f.msn + r.u32(31)%64, EchoTS: uint32(c >> 32), Delay: a % 100}
	switch op {
	case wire.OpAck:
		p.Ack.Syndrome = wire.Syndrome(r[30] % 8)
		p.Ack.Value = r.u16(28)
		p.Ack.NakPSN = ackPSN.Add(uint32(int32(int8(r[26]))) - 1)
		if r[27]&1 == 0 {
			p.Ack.SACK = 0
		}
	case wire.OpWrite, wire.OpReadRequest:
		switch r[26] % 5 {
		case 0:
			p.RDMA.Addr, p.RDMA.Token = fzBase1+uint64(a%fzLen1), fzTok1
		case 1:
			p.RDMA.Addr, p.RDMA.Token = fzBase2+uint64(a%fzLen2), fzTok2
		case 2:
			p.RDMA.Addr, p.RDMA.Token = ^uint64(0)-uint64(a%4096), fzTok1
		case 3:
			p.RDMA.Addr, p.RDMA.Token = c, fzTok1
		default:
			p.RDMA.Addr, p.RDMA.Token = c, a
		}
		lengths := [...]uint32{uint32(plen), uint32(plen) + b%4096, 1 << 31, 1<<31 + 1, ^uint32(0), ^uint32(0) - 255, b, 0}
		p.RDMA.Length = lengths[int(r[27])%len(lengths)]
		if op == wire.OpWrite && r[27]&8 != 0 {
			p.RDMA.Offset = b % 8192
		}
		if op == wire.OpReadRequest && p.RDMA.Length == 0 {
			p.RDMA.Length = 1 + b%8192
		}
	case wire.OpReadResponse:
		p.ReadResp.ReqPSN = wire.PSN(b)
		for _, g := range h.flows {
			if g.to == from && r[26]&1 == 0 {
				p.ReadResp.ReqPSN = g.readPSN // the last Read n asked of the peer
				break
			}
		}
		offs := [...]uint32{0, a % 8192, a, ^uint32(0) - uint32(plen)}
		p.ReadResp.Offset = offs[int(r[27])%len(offs)]
	default: // Send*
		s := &p.Send
		s.MSN = f.msn + a%4 - 1
		if r[26]&1 != 0 {
			s.MSN = a
		}
		s.Offset, s.Total = b%8192, b
		if op == wire.OpSendLastInv || op == wire.OpSendOnlyInv {
			s.InvToken = fzTok1
			if r[26]&2 != 0 {
				s.InvToken = a | 1
			}
		}
		if fl&2 != 0 { // fields the opcode agrees with
			switch op {
			case wire.OpSendOnly, wire.OpSendOnlyInv:
				s.Offset, s.Total = 0, uint32(plen)
			case wire.OpSendFirst:
				s.Offset, s.Total = 0, uint32(plen)+1+b%8192
			case wire.OpSendMiddle:
				s.Offset = 1 + b%4096
				s.Total = s.Offset + uint32(plen) + 1 + a%4096
			default:
				s.Offset = 1 + b%4096
				s.Total = s.Offset + uint32(plen)
			}
		}
	}
	payload := make([]byte, plen)
	for i := range payload {
		payload[i] = byte(i) ^ r[39]
	}
	d := valEncode(h.t, &p, payload)
	if fl&128 != 0 { // any flags, the layout of the others kept
		binary.BigEndian.PutUint16(d[2:], r.u16(6))
		wire.PutTrailer(d[len(d)-wire.TrailerLen:], wire.UpdateCRC(0, d[:len(d)-wire.TrailerLen]))
	}
	n.vl.inject(from, d)
}

// alloc returns a buffer of size bytes of n's arena (nil when it is used up), writable
// when the engine may place data in it.
func (n *fzNode) alloc(size int, writable bool) []byte {
	if size <= 0 || n.bump+size+64 > fzArena {
		return nil
	}
	b := n.arena[n.bump : n.bump+size : n.bump+size]
	if writable {
		n.writable = append(n.writable, [2]int{n.bump, n.bump + size})
	}
	n.bump += size + 64 // a guard between buffers
	return b
}

// sgl splits b into one or two SGEs.
func fzSGL(b []byte, split uint16) (uint8, [transport.MaxSGE][]byte) {
	var sgl [transport.MaxSGE][]byte
	if len(b) > 1 && split%3 == 0 {
		k := 1 + int(split)%(len(b)-1)
		sgl[0], sgl[1] = b[:k:k], b[k:]
		return 2, sgl
	}
	sgl[0] = b
	return 1, sgl
}

// postSend posts a Send (or SendAndInvalidate), Write or Read on one of n's QPs. Record:
// [1] >> 1 QP, [2:4] length, [4:6] SGE split, [6] flags (1 solicited, 2 invalidate, 4
// read fence), [7] remote target, [8:12] remote offset.
func (h *fzHarness) postSend(n *fzNode, r *fzRecord) {
	q := n.qp(r[1] >> 1)
	if q == nil {
		return
	}
	kind := map[byte]transport.OpKind{fzOpSend: transport.OpSend, fzOpWrite: transport.OpWrite, fzOpRead: transport.OpRead}[r[0]%fzNumOps]
	size := int(r.u16(2)) % (fzMaxBuf + 1)
	if kind == transport.OpRead {
		size = max(size, 1)
	}
	wr := &transport.WorkRequest{Kind: kind}
	if size > 0 {
		buf := n.alloc(size, kind == transport.OpRead)
		if buf == nil {
			return
		}
		wr.NSGE, wr.SGL = fzSGL(buf, r.u16(4))
	}
	if r[6]&1 != 0 {
		wr.Flags |= transport.WRSolicited
	}
	if r[6]&4 != 0 {
		wr.Flags |= transport.WRReadFence
	}
	if kind == transport.OpSend && r[6]&2 != 0 {
		wr.Kind, wr.InvToken = transport.OpSendInv, fzTok1
	}
	off := uint64(r.u32(8))
	switch r[7] % 4 {
	case 0:
		wr.RemoteAddr, wr.RemoteToken = fzBase1+off%fzLen1, fzTok1
	case 1:
		wr.RemoteAddr, wr.RemoteToken = fzBase2+off%fzLen2, fzTok2
	case 2:
		wr.RemoteAddr, wr.RemoteToken = fzBase1+off%(2*fzLen1), fzTok1 // may run past the region
	default:
		wr.RemoteAddr, wr.RemoteToken = off<<20, r.u32(8)
	}
	h.ctx++
	wr.Context = h.ctx
	if q.PostSend(wr) == nil {
		h.posted[q][h.ctx] = fzPost{kind: wr.Kind, n: size}
	}
}

// postRecv posts a receive on one of n's QPs. Record: [1] >> 1 QP, [2:4] length, [4:6] SGE
// split.
func (h *fzHarness) postRecv(n *fzNode, r *fzRecord) {
	q := n.qp(r[1] >> 1)
	if q == nil {
		return
	}
	size := int(r.u16(2)) % (fzMaxBuf + 1)
	rv := &transport.Receive{}
	if size > 0 {
		buf := n.alloc(size, true)
		if buf == nil {
			return
		}
		rv.NSGE, rv.SGL = fzSGL(buf, r.u16(4))
	}
	h.ctx++
	rv.Context = h.ctx
	if q.PostReceive(rv) == nil {
		h.posted[q][h.ctx] = fzPost{kind: transport.OpReceive, n: size}
	}
}

// connect connects a new QP of n to the peer's listener, to a service the peer does not
// listen on, or to the third host (which never answers). Record: [2] target, [3] private
// data length.
func (h *fzHarness) connect(n *fzNode, r *fzRecord) {
	if len(n.qps) >= 12 {
		return
	}
	to, svc := h.peer(n).nd.addr, uint64(fzService)
	switch r[2] % 3 {
	case 1:
		svc++
	case 2:
		to = fzThird
	}
	q := n.newQP(h)
	c, err := n.nd.eng.Connect(q, to, svc, make([]byte, int(r[3])%(wire.MaxPrivateData+1)), 0)
	if err != nil {
		h.t.Fatalf("connect: %v", err)
	}
	h.conns = append(h.conns, c)
}

// answer takes the next request n's listener delivered, if any, and answers one of the
// requests taken: accept it with a new QP, reject it, or leave it waiting. Record: [2]
// action, [3] which.
func (h *fzHarness) answer(n *fzNode, r *fzRecord) {
	if req := pollRequest(n.l); req != nil {
		n.pulled = append(n.pulled, req)
	}
	if len(n.pulled) == 0 {
		return
	}
	i := int(r[3]) % len(n.pulled)
	req := n.pulled[i]
	switch r[2] % 3 {
	case 0:
		if len(n.qps) >= 12 {
			return
		}
		if req.Accept(n.newQP(h), nil, 0) == nil {
			h.accepts = append(h.accepts, req)
		}
	case 1:
		_ = req.Reject([]byte("no"))
	default:
		return // left waiting
	}
	n.pulled = append(n.pulled[:i], n.pulled[i+1:]...)
}

// connector completes, rejects or cancels one of the attempts. Record: [1] which, [2] action.
func (h *fzHarness) connector(r *fzRecord) {
	if len(h.conns) == 0 {
		return
	}
	c := h.conns[int(r[1])%len(h.conns)]
	switch r[2] % 3 {
	case 0:
		_ = c.Complete()
	case 1:
		_ = c.Reject(nil)
	default:
		c.Cancel()
	}
}

// impair changes the path out of n: loss, duplication, reordering. Record: [2] loss/256,
// [3] duplication/256, [4] jitter in µs.
func (h *fzHarness) impair(n *fzNode, r *fzRecord) {
	m := simlink.Impairments{Latency: 5 * time.Microsecond, Loss: float64(r[2]%128) / 256,
		Duplicate: float64(r[3]%128) / 256, Jitter: time.Duration(r[4]%64) * time.Microsecond}
	if err := h.w.net.SetPath(n.nd.addr, h.peer(n).nd.addr, m); err != nil {
		h.t.Fatal(err)
	}
}

// replay hands a datagram an engine sent, with up to four changes, to the engine it was
// sent to (if it was sent to one), from where it came. Record: [1] which of the last 32,
// [2] changes (bits 0-1: count-1; bit 7: leave the CRC wrong), then per change 7 bytes
// from [3]: offset (16 bits), kind (set a byte, xor a byte, set 16 bits, set 32 bits),
// value (32 bits).
func (h *fzHarness) replay(r *fzRecord) {
	if len(h.caps) == 0 {
		return
	}
	c := h.caps[int(r[1])%len(h.caps)]
	var to *fzNode
	for _, n := range h.n {
		if n.nd.addr == c.to {
			to = n
		}
	}
	if to == nil || len(c.b) < wire.TrailerLen {
		return
	}
	b := bytes.Clone(c.b)
	body := len(b) - wire.TrailerLen
	for k := 0; k <= int(r[2]&3) && body > 0; k++ {
		m := r[3+7*k:]
		off := int(binary.BigEndian.Uint16(m)) % body
		v := binary.BigEndian.Uint32(m[3:])
		switch m[2] % 4 {
		case 0:
			b[off] = byte(v)
		case 1:
			b[off] ^= byte(v) | 1
		case 2:
			if off+2 <= body {
				binary.BigEndian.PutUint16(b[off:], uint16(v))
			}
		default:
			if off+4 <= body {
				binary.BigEndian.PutUint32(b[off:], v)
			}
		}
	}
	if r[2]&0x80 == 0 {
		wire.PutTrailer(b[body:], wire.UpdateCRC(0, b[:body]))
	}
	to.vl.inject(c.from, b)
}

// runFor runs the pair for d of virtual time, failing the input past fzMaxSteps engine
// rounds in all (a livelock).
func (h *fzHarness) runFor(d time.Duration) {
	end := h.w.clock.Now() + int64(d)
	for h.w.clock.Now() < end {
		if h.steps++; h.steps > fzMaxSteps {
			h.t.Fatalf("no quiescence after %d rounds (virtual time %v)", h.steps, time.Duration(h.w.clock.Now()))
		}
		if !h.w.step(end) {
			h.w.clock.Set(end)
		}
	}
}

// checkBounds checks the connection manager's tables that a peer can grow against their
// bounds. (Graceful disconnects in progress are the application's: one per StartDisconnect
// call, each ending within its timeout; check checks they all end.)
func (h *fzHarness) checkBounds(when string) {
	for _, n := range h.n {
		ho, recent, conns, _ := transport.CMTableSizes(n.nd.eng)
		if ho > fzHalfOpen || recent > transport.MaxRecent || conns > transport.MaxLingering+len(n.qps) {
			h.t.Fatalf("%s: engine %d tables half-open %d, recent %d, attempts %d", when, n.idx, ho, recent, conns)
		}
	}
}

// finish takes every decision the application still owes: a replied attempt is cancelled,
// every request delivered and not answered is rejected, every QP is flushed.
func (h *fzHarness) finish() {
	for _, c := range h.conns {
		c.Cancel()
	}
	for _, n := range h.n {
		for req := pollRequest(n.l); req != nil; req = pollRequest(n.l) {
			n.pulled = append(n.pulled, req)
		}
		for _, req := range n.pulled {
			_ = req.Reject(nil)
		}
		n.pulled = nil
		for _, q := range n.qps {
			q.Flush()
		}
	}
}

// check verifies the end state (see FuzzEnginePair).
func (h *fzHarness) check() {
	t := h.t
	for _, n := range h.n {
		for _, q := range n.qps {
			if st := q.State(); st == transport.QPConnecting {
				t.Errorf("engine %d: QP %d left connecting", n.idx, q.QPN())
			}
			h.checkCompletions(n, q)
		}
		if ho, recent, conns, discs := transport.CMTableSizes(n.nd.eng); ho+recent+conns+discs != 0 {
			t.Errorf("engine %d: tables not empty at the end: half-open %d, recent %d, attempts %d, disconnects %d", n.idx, ho, recent, conns, discs)
		}
		h.checkMemory(n)
	}
	for i, c := range h.conns {
		if d, _ := c.Replied(); !d {
			t.Errorf("attempt %d has no result", i)
		}
	}
	for i, r := range h.accepts {
		if d, _ := r.Established(); !d {
			t.Errorf("accepted request %d has no result", i)
		}
	}
	for i, d := range h.discs {
		if done, _ := d.Done(); !done {
			t.Errorf("disconnect %d has no result", i)
		}
	}
}

// checkCompletions checks that every request and receive posted on q completed exactly
// once, as what it was posted as, and nothing else completed.
func (h *fzHarness) checkCompletions(n *fzNode, q *transport.QP) {
	t := h.t
	posted := h.posted[q]
	seen := map[uint64]int{}
	for _, c := range n.nd.w.rec.of(q) {
		p, ok := posted[c.Context]
		if !ok {
			t.Errorf("engine %d QP %d: completion for context %d, never posted: %+v", n.idx, q.QPN(), c.Context, c)
			continue
		}
		seen[c.Context]++
		okOp := c.Op == p.kind || (p.kind == transport.OpReceive && c.Op == transport.OpReceiveInv)
		if !okOp || int(c.Bytes) > p.n || (c.Status != transport.StatusSuccess && c.Bytes != 0) {
			t.Errorf("engine %d QP %d: %v of %d bytes completed as %+v", n.idx, q.QPN(), p.kind, p.n, c)
		}
		if c.Status == transport.StatusSuccess && p.kind != transport.OpReceive && int(c.Bytes) != p.n {
			t.Errorf("engine %d QP %d: %v of %d bytes completed with %d", n.idx, q.QPN(), p.kind, p.n, c.Bytes)
		}
	}
	for ctx, p := range posted {
		if seen[ctx] != 1 {
			t.Errorf("engine %d QP %d (%v): %v context %d completed %d times", n.idx, q.QPN(), q.State(), p.kind, ctx, seen[ctx])
		}
	}
}

// checkMemory checks that no byte of n's arena outside the writable ranges changed.
func (h *fzHarness) checkMemory(n *fzNode) {
	w := slices.Clone(n.writable)
	slices.SortFunc(w, func(a, b [2]int) int { return a[0] - b[0] })
	at := 0
	for _, r := range append(w, [2]int{fzArena, fzArena}) {
		if r[0] > at && !bytes.Equal(n.arena[at:r[0]], n.orig[at:r[0]]) {
			for i := at; i < r[0]; i++ {
				if n.arena[i] != n.orig[i] {
					h.t.Errorf("engine %d: byte %d changed outside every writable range (region 2 is [%d, %d))", n.idx, i, fzLen1, fzLen1+fzLen2)
					return
				}
			}
		}
		at = max(at, r[1])
	}
}

// fzPatterns returns the initial contents of the two hosts' arenas, made once.
var fzPatterns = sync.OnceValue(func() [2][]byte {
	var p [2][]byte
	for i := range p {
		p[i] = make([]byte, fzArena)
		pattern(p[i], 11+i)
	}
	return p
})

// TestEnginePairRandom runs FuzzEnginePair's operations and checks on pseudo-random inputs
// (fixed seeds), so that a plain test run explores beyond the committed seeds. A failing
// input is logged in the corpus format, to be committed under
// testdata/fuzz/FuzzEnginePair.
func TestEnginePairRandom(t *testing.T) {
	n := 150
	if testing.Short() {
		n = 20
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		data := make([]byte, fzRec*(1+rng.IntN(fzMaxOps)))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("input:\ngo test fuzz v1\n[]byte(%q)", data)
				}
			})
			fzRun(t, data)
		})
	}
}
