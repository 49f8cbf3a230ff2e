package xdp

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/linktest"
	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/transport/link"
)

// TestLinkFlagCRC checks link.FlagCRC between two of our links at MTU 9000: datagrams of
// every length, in two to four segments, copied (payload in the Go heap) or with FlagZeroCopy
// (payload in the UMEM heap, sent by reference from 1 KiB), sent through the device's
// DeviceLink and received by the peer's Link, arrive with the CRC32C of their bytes in place
// of the junk trailer, in both UDP checksum modes; the caller's trailer is never written.
func TestLinkFlagCRC(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{MTU: 9000})
	for _, mode := range []UDPChecksum{ChecksumAuto, ChecksumSoftware} {
		for _, zc := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/zerocopy=%v", mode, zc), func(t *testing.T) {
				cfg := Config{RingSize: 256, Frames: 512, HeapSize: 1 << 20, UDPChecksum: mode}
				a, b := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
				la, lb := a.Links()[0], b.Links()[0]
				resolvePair(t, la, lb)
				sizes := []int{linktest.MinSize, 13, 64, 1025, 1472, 4095, 4097, 8191, la.MaxPayload()}
				var bufs [][]byte
				if zc {
					bufs = heapSlots(t, heapOf(t, a), len(sizes), la.MaxPayload())
				} else {
					for range sizes {
						bufs = append(bufs, make([]byte, la.MaxPayload()))
					}
				}
				trls := make([][link.CRCLen]byte, len(sizes))
				pkts := make([]link.Packet, len(sizes))
				const rounds = 6
				scratch := make([]byte, 65536)
				var in [16]link.Packet
				var done [16]uint64
				refs0 := la.Stats().TxZeroCopy
				for r := range rounds {
					for i, size := range sizes {
						seq := uint64(r*len(sizes) + i)
						linktest.CRCDatagram(&pkts[i], lb.LocalAddr(), seq, size, 2+(r+i)%3, bufs[i], trls[i][:])
						if zc {
							pkts[i].Flags |= link.FlagZeroCopy
							pkts[i].Cookie = seq
						}
					}
					if n, err := a.DeviceLink().Send(pkts); n != len(pkts) || err != nil {
						t.Fatalf("send: %d, %v", n, err)
					}
					for i := range trls {
						if !linktest.TrailerIntact(trls[i][:]) {
							t.Fatalf("datagram of %d bytes: the caller's trailer was written: %x", sizes[i], trls[i])
						}
					}
					got, cookies := 0, 0
					deadline := time.Now().Add(5 * time.Second)
					for (got < len(sizes) || (zc && cookies < len(sizes))) && time.Now().Before(deadline) {
						k, err := lb.Receive(in[:])
						if err != nil {
							t.Fatal(err)
						}
						for j := range in[:k] {
							seq, err := linktest.CheckCRC(&in[j], scratch)
							if err != nil {
								t.Fatal(err)
							}
							if want := uint64(r*len(sizes) + got + j); seq != want {
								t.Fatalf("datagram %d arrived, want %d", seq, want)
							}
						}
						lb.Release(in[:k])
						got += k
						cookies += la.TxDone(done[:])
						if k == 0 {
							_ = lb.Wait(time.Millisecond)
						}
					}
					if got != len(sizes) || (zc && cookies != len(sizes)) {
						t.Fatalf("round %d: %d of %d datagrams arrived, %d cookies came back", r, got, len(sizes), cookies)
					}
				}
				if refs := la.Stats().TxZeroCopy - refs0; zc && refs == 0 {
					t.Fatal("nothing went by reference")
				}
			})
		}
	}
}
