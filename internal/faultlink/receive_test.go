package faultlink

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/xdpndk/xdpndk/transport/link"
)

func TestInject(t *testing.T) {
	s := newStub()
	l, err := Wrap(s, Config{InjectBuffers: 2})
	if err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddrPort("198.18.0.2:50001")
	if err := l.Inject(Datagram{Remote: from, Data: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Inject(Datagram{Remote: from, LocalPort: 9, Data: []byte("two")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Inject(Datagram{Remote: from, Data: []byte("three")}); !errors.Is(err, ErrInjectFull) {
		t.Fatalf("third inject into two buffers: %v", err)
	}
	if err := l.Inject(Datagram{Remote: from}); !errors.Is(err, link.ErrTooLarge) {
		t.Fatalf("empty inject: %v", err)
	}
	if err := l.Inject(Datagram{Remote: from, Data: make([]byte, s.MaxPayload()+1)}); !errors.Is(err, link.ErrTooLarge) {
		t.Fatalf("oversized inject: %v", err)
	}
	if s.wakes != 2 {
		t.Fatalf("inject woke the link %d times, want 2", s.wakes)
	}
	s.rx = [][]byte{[]byte("R-inner-1"), []byte("R-inner-2")}

	var pkts [8]link.Packet
	n, err := l.Receive(pkts[:3])
	if err != nil || n != 3 {
		t.Fatalf("Receive = %d, %v", n, err)
	}
	want := []struct {
		data  string
		from  netip.AddrPort
		lport uint16
	}{{"one", from, stubAddr.Port()}, {"two", from, 9}, {"R-inner-1", netip.MustParseAddrPort("198.18.0.2:4793"), 4793}}
	for i, w := range want {
		p := &pkts[i]
		if string(p.Segs[0]) != w.data || p.NSegs != 1 || p.Remote != w.from || p.LocalPort != w.lport {
			t.Fatalf("packet %d: %q from %v to port %d, want %q from %v to %d", i, p.Segs[0], p.Remote, p.LocalPort, w.data, w.from, w.lport)
		}
	}
	// Released in two calls, out of order: the inner link gets back only its own.
	l.Release([]link.Packet{pkts[2], pkts[0]})
	l.Release(pkts[1:2])
	if s.rxOut != 0 || s.rxBad != 0 || l.inj.out != 0 {
		t.Fatalf("inner link: %d not released, %d foreign packets released; %d injected not released", s.rxOut, s.rxBad, l.inj.out)
	}
	for i := 0; i < 2; i++ {
		if err := l.Inject(Datagram{Remote: from, Data: []byte("again")}); err != nil {
			t.Fatalf("inject after release: %v", err)
		}
	}
	if st := l.FaultStats(); st.Injected != 2 {
		t.Fatalf("stats %+v", st)
	}
	n, err = l.Receive(pkts[:])
	if err != nil || n != 3 || string(pkts[2].Segs[0]) != "R-inner-2" {
		t.Fatalf("Receive = %d, %v", n, err)
	}
	l.Release(pkts[:n])
	if s.rxOut != 0 || s.rxBad != 0 || l.inj.out != 0 {
		t.Fatalf("inner link: %d not released, %d foreign; %d injected not released", s.rxOut, s.rxBad, l.inj.out)
	}

	l2, _ := Wrap(newStub(), Config{})
	if err := l2.Inject(Datagram{Remote: from, Data: []byte("x")}); !errors.Is(err, ErrInjectDisabled) {
		t.Fatalf("inject without buffers: %v", err)
	}
}

func TestRecord(t *testing.T) {
	s := newStub()
	l, err := Wrap(s, Config{InjectBuffers: 1})
	if err != nil {
		t.Fatal(err)
	}
	var pkts [4]link.Packet
	s.rx = [][]byte{[]byte("R0")}
	n, _ := l.Receive(pkts[:])
	l.Release(pkts[:n]) // before recording: not kept
	r := l.Record(3, 2)
	for i := 1; i <= 9; i++ {
		s.rx = append(s.rx, []byte{'R', byte('0' + i)})
	}
	_ = l.Inject(Datagram{Remote: peer, Data: []byte("injected")}) // never recorded
	for {
		n, _ := l.Receive(pkts[:])
		if n == 0 {
			break
		}
		l.Release(pkts[:n])
	}
	got := r.Datagrams()
	want := []string{"R1", "R3", "R5"} // every second one, up to three
	if len(got) != len(want) || r.Len() != 3 {
		t.Fatalf("recorded %d datagrams, want %d", len(got), len(want))
	}
	for i, w := range want {
		if string(got[i].Data) != w || got[i].Remote != netip.MustParseAddrPort("198.18.0.2:4793") || got[i].LocalPort != 4793 {
			t.Fatalf("recorded %d: %q from %v to %d", i, got[i].Data, got[i].Remote, got[i].LocalPort)
		}
	}
	got[0].Data[0] = 'X' // a copy
	if again := r.Datagrams(); !bytes.Equal(again[0].Data, []byte("R1")) {
		t.Fatal("Datagrams returned the recorder's own buffer")
	}
	l.StopRecording()
	s.rx = [][]byte{[]byte("R-late")}
	n, _ = l.Receive(pkts[:])
	l.Release(pkts[:n])
	if st := l.FaultStats(); st.Recorded != 3 || r.Len() != 3 {
		t.Fatalf("stats %+v, recorder holds %d", st, r.Len())
	}
}
