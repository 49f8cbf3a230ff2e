package xdp

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// planQueues: every queue by default; a named set must exist, and with SteerServeAll must
// be every queue; the refusal names the fixes.
func TestPlanQueues(t *testing.T) {
	for _, c := range []struct {
		name   string
		rx     int
		want   []int
		steer  Steering
		got    []int
		errHas []string
	}{
		{"default serves all", 4, nil, SteerServeAll, []int{0, 1, 2, 3}, nil},
		{"one queue", 1, nil, SteerServeAll, []int{0}, nil},
		{"no count reported", 0, nil, SteerServeAll, []int{0}, nil},
		{"all named, any order", 3, []int{2, 0, 1}, SteerServeAll, []int{2, 0, 1}, nil},
		{"subset refused", 4, []int{0}, SteerServeAll, nil,
			[]string{"4 RX queues", "serves only [0]", "ethtool -L eth9 combined 1", "SteerNtuple", "ethtool -N eth9"}},
		{"subset with ntuple", 4, []int{2}, SteerNtuple, []int{2}, nil},
		{"subset steered outside", 8, []int{1, 5}, SteerExternal, []int{1, 5}, nil},
		{"missing queue", 2, []int{0, 1, 2}, SteerServeAll, nil, []string{"2 RX queues (0-1)", "no queue 2", "ethtool -l eth9"}},
		{"queue named twice", 4, []int{1, 1}, SteerExternal, nil, []string{"named twice"}},
		{"ntuple without queues", 4, nil, SteerNtuple, nil, []string{"needs Config.Queues"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := planQueues("eth9", c.rx, c.want, c.steer)
			if c.errHas != nil {
				if err == nil {
					t.Fatalf("plan %v, want an error", got)
				}
				for _, s := range c.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				return
			}
			if err != nil || !slices.Equal(got, c.got) {
				t.Fatalf("plan %v, %v; want %v", got, err, c.got)
			}
		})
	}
}

// DefaultQueueSizes shares the frame budget out within the floor and the ceiling, and
// sizeQueues fills what the caller left at 0 into a valid configuration.
func TestDefaultQueueSizes(t *testing.T) {
	for _, c := range []struct {
		n      int
		frames int
		ring   uint32
	}{{1, 8192, 4096}, {4, 8192, 4096}, {5, 4096, 2048}, {8, 4096, 2048}, {16, 2048, 1024}, {32, 1024, 512}, {64, 1024, 512}, {256, 1024, 512}} {
		f, r := DefaultQueueSizes(c.n)
		if f != c.frames || r != c.ring {
			t.Errorf("%d queues: %d frames, ring %d; want %d, %d", c.n, f, r, c.frames, c.ring)
		}
	}
	for _, c := range []Config{{}, {Frames: 3000}, {RingSize: 256}, {Frames: 512, RingSize: 256}} {
		in := c
		if err := c.sizeQueues(8); err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		if c.Frames == 0 || c.RingSize == 0 || uint64(c.Frames) < uint64(c.RingSize)*3/2 {
			t.Fatalf("%+v sized to %d frames, ring %d", in, c.Frames, c.RingSize)
		}
	}
	bad := Config{Frames: 100, RingSize: 256}
	if err := bad.sizeQueues(1); err == nil {
		t.Fatal("100 frames for a 256-entry ring accepted")
	}
}

// The n-tuple rule for our port: UDP over IPv4 or IPv6, destination address and port
// matched with full masks, the queue as ring cookie, any location; laid out as struct
// ethtool_rxnfc for both __u64 alignments (include/uapi/linux/ethtool.h: the sizes are
// 192 and 180 bytes, ring_cookie at 168 and 164, location at 176 and 172 from its start).
func TestNtupleRule(t *testing.T) {
	r := ntupleRule(netip.MustParseAddr("198.18.0.2"), 4793, 3)
	if r.FlowType != udpV4Flow || r.RingCookie != 3 || r.Location != rxClsLocAny {
		t.Fatalf("v4 rule %+v", r)
	}
	if got := r.HU[4:12]; !slices.Equal(got, []byte{198, 18, 0, 2, 0, 0, 0x12, 0xb9}) {
		t.Fatalf("v4 values %x (dst address, source port 0, dst port 4793)", got)
	}
	if got := r.MU[:13]; !slices.Equal(got, []byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0xff, 0xff, 0}) {
		t.Fatalf("v4 masks %x: only dst address and port matched", got)
	}
	r6 := ntupleRule(netip.MustParseAddr("2001:db8::1"), 4793, 1)
	if r6.FlowType != udpV6Flow || r6.HU[16] != 0x20 || r6.HU[31] != 1 || r6.HU[35] != 0xb9 || r6.MU[34] != 0xff || r6.MU[0] != 0 {
		t.Fatalf("v6 rule %+v", r6)
	}
	for _, c := range []struct{ align, size, cookie, loc int }{{8, 192, 168, 176}, {4, 180, 164, 172}} {
		var b rxnfc
		out := b.put(ethtoolSRXCLSRLINS, &r, c.align)
		ne := binary.NativeEndian
		if len(out) != c.size || ne.Uint32(out[0:]) != ethtoolSRXCLSRLINS || ne.Uint32(out[4:]) != udpV4Flow ||
			ne.Uint32(out[16:]) != udpV4Flow || out[16+4+4] != 198 || out[16+76+4] != 0xff ||
			ne.Uint64(out[c.cookie:]) != 3 || ne.Uint32(out[c.loc:]) != rxClsLocAny {
			t.Fatalf("align %d: layout %x", c.align, out)
		}
		ne.PutUint32(out[c.loc:], 7) // the kernel's choice of location
		if got := b.location(c.align); got != 7 {
			t.Fatalf("align %d: location %d read back, want 7", c.align, got)
		}
	}
}
