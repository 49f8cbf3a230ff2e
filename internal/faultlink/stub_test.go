package faultlink

import (
	"errors"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"
)

// stubLink is an inner link for unit tests: Send copies what it accepts into sent (with
// the flags it saw), accepts at most room datagrams when room >= 0, refuses with errTooBig
// a datagram whose length is failLen, and reports the cookie of every FlagZeroCopy
// datagram it accepted on the next TxDone, as a copying link does.
type stubLink struct {
	sent    []sentDatagram
	room    int
	failLen int
	cookies []uint64
	rx      [][]byte // datagrams Receive hands out
	rxOut   int      // handed out and not released
	rxBad   int      // Release of a packet that was not ours
	sends   int      // Send calls
	wakes   int
	waits   []time.Duration
}

type sentDatagram struct {
	data   []byte
	flags  link.PacketFlag
	remote netip.AddrPort
	lport  uint16
}

var errTooBig = errors.New("stub: refused")

var stubAddr = netip.MustParseAddrPort("198.18.0.1:4793")

func newStub() *stubLink { return &stubLink{room: -1, failLen: -1} }

func (s *stubLink) Send(pkts []link.Packet) (int, error) {
	s.sends++
	for i := range pkts {
		p := &pkts[i]
		if s.room == 0 {
			return i, nil
		}
		if p.Len() == s.failLen || p.NSegs == 0 || p.Len() > s.MaxPayload() {
			return i, errTooBig
		}
		var d []byte
		for k := 0; k < int(p.NSegs); k++ {
			d = append(d, p.Segs[k]...)
		}
		s.sent = append(s.sent, sentDatagram{data: d, flags: p.Flags, remote: p.Remote, lport: p.LocalPort})
		if p.Flags&link.FlagZeroCopy != 0 {
			s.cookies = append(s.cookies, p.Cookie)
		}
		if s.room > 0 {
			s.room--
		}
	}
	return len(pkts), nil
}

func (s *stubLink) TxDone(dst []uint64) int {
	n := copy(dst, s.cookies)
	s.cookies = s.cookies[n:]
	return n
}

func (s *stubLink) Receive(pkts []link.Packet) (int, error) {
	n := 0
	for n < len(pkts) && len(s.rx) > 0 {
		pkts[n] = link.Packet{Remote: netip.MustParseAddrPort("198.18.0.2:4793"), LocalPort: 4793, NSegs: 1}
		pkts[n].Segs[0] = s.rx[0]
		s.rx = s.rx[1:]
		n++
	}
	s.rxOut += n
	return n, nil
}

func (s *stubLink) Release(pkts []link.Packet) {
	for i := range pkts {
		if pkts[i].NSegs == 0 || len(pkts[i].Segs[0]) == 0 || pkts[i].Segs[0][0] != 'R' {
			s.rxBad++
			continue
		}
		s.rxOut--
	}
}

func (s *stubLink) Wait(d time.Duration) error { s.waits = append(s.waits, d); return nil }
func (s *stubLink) Wake()                      { s.wakes++ }
func (s *stubLink) MaxPayload() int            { return 1400 }
func (s *stubLink) LocalAddr() netip.AddrPort  { return stubAddr }
func (s *stubLink) Stats() link.Stats          { return link.Stats{} }
func (s *stubLink) Close() error               { return nil }
