package simlink

import (
	"errors"
	"testing"

	"github.com/xdpndk/xdpndk/internal/linktest"
	"github.com/xdpndk/xdpndk/transport/link"
)

// TestFlagCRC checks link.FlagCRC on simlink: every datagram arrives with the CRC32C of
// its bytes in place of the junk trailer it was sent with, whatever its length and
// segmentation and duplicated or not, the caller's trailer is never written, and a
// corrupted copy fails the check (the corruption comes after the CRC, as on a wire).
func TestFlagCRC(t *testing.T) {
	for _, tc := range []struct {
		name string
		imp  Impairments
	}{
		{"clean", Impairments{}},
		{"duplicated", Impairments{Duplicate: 0.3}},
		{"corrupted", Impairments{Corrupt: 0.3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, clk := manualPair(7, tc.imp)
			const total = 600
			bufs := make([][]byte, 4)
			trls := make([][link.CRCLen]byte, 4)
			for i := range bufs {
				bufs[i] = make([]byte, a.MaxPayload())
			}
			var pkts [4]link.Packet
			for seq := 0; seq < total; seq += len(pkts) {
				for i := range pkts {
					s := seq + i
					size := linktest.MinSize + s*37%(a.MaxPayload()-linktest.MinSize+1)
					linktest.CRCDatagram(&pkts[i], b.LocalAddr(), uint64(s), size, 2+s%3, bufs[i], trls[i][:])
				}
				if n, err := a.Send(pkts[:]); n != len(pkts) || err != nil {
					t.Fatalf("send: %d, %v", n, err)
				}
				for i := range trls {
					if !linktest.TrailerIntact(trls[i][:]) {
						t.Fatalf("datagram %d: Send wrote the caller's trailer: %x", seq+i, trls[i])
					}
				}
			}
			got := runUntilIdle(t, a.net, clk, a, b)[b]
			scratch := make([]byte, 65536)
			bad := 0
			seen := map[uint64]int{}
			for _, g := range got {
				var p link.Packet
				p.SetData(g.data)
				seq, err := linktest.CheckCRC(&p, scratch)
				if err != nil {
					bad++
					continue
				}
				seen[seq]++
			}
			st := a.net.PathStats(a.LocalAddr(), b.LocalAddr())
			if bad != int(st.Corrupted) {
				t.Fatalf("%d datagrams failed the check, %d were corrupted (stats %+v)", bad, st.Corrupted, st)
			}
			if len(got) != total+int(st.Duplicated) {
				t.Fatalf("received %d datagrams, sent %d and %d duplicates", len(got), total, st.Duplicated)
			}
			if tc.imp == (Impairments{}) && (len(seen) != total || bad != 0) {
				t.Fatalf("clean path: %d distinct intact datagrams of %d, %d bad", len(seen), total, bad)
			}
			if tc.imp.Corrupt > 0 && bad == 0 {
				t.Fatal("nothing corrupted: the test proves nothing")
			}
		})
	}
}

// TestFlagCRCRefused checks that Send refuses a FlagCRC datagram whose last segment is not
// a CRCLen-byte trailer, sending nothing of it.
func TestFlagCRCRefused(t *testing.T) {
	a, b, _ := manualPair(1, Impairments{})
	var p [1]link.Packet
	p[0] = link.Packet{Remote: b.LocalAddr(), Flags: link.FlagCRC}
	p[0].Segs[0], p[0].Segs[1], p[0].NSegs = make([]byte, 20), make([]byte, 3), 2
	if n, err := a.Send(p[:]); n != 0 || !errors.Is(err, link.ErrNoTrailer) {
		t.Fatalf("send: %d, %v; want 0, ErrNoTrailer", n, err)
	}
	if st := a.Stats(); st.TxPackets != 0 {
		t.Fatalf("a refused datagram was counted sent: %+v", st)
	}
}
