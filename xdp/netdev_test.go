package xdp

import (
	"encoding/binary"
	"errors"
	"testing"
)

// nla appends one netlink attribute (host byte order, padded to 4 bytes unless last).
func nla(b []byte, typ uint16, v []byte, pad bool) []byte {
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:2], uint16(4+len(v)))
	binary.NativeEndian.PutUint16(h[2:4], typ)
	b = append(append(b, h[:]...), v...)
	for pad && len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }

// genl is a genetlink header for NETDEV_CMD_DEV_GET version 1.
var genl = []byte{netdevCmdDevGet, 1, 0, 0}

func TestParseNetdevReply(t *testing.T) {
	full := nla(nla(nla(nla(append([]byte(nil), genl...),
		netdevAttrIfindex, u32(7), true),
		netdevAttrXDPFeatures, u64(XDPActBasic|XDPActRedirect|XDPActXSKZeroCopy), true),
		9, []byte{1, 2, 3}, true), // an attribute of a later kernel, unaligned: skipped
		netdevAttrXDPZCMaxSegs, u32(8), false)
	info, err := parseNetdevReply(full, 7)
	if err != nil {
		t.Fatal(err)
	}
	if info.XDPFeatures != XDPActBasic|XDPActRedirect|XDPActXSKZeroCopy || info.ZCMaxSegs != 8 {
		t.Fatalf("parsed %+v", info)
	}
	old := nla(append([]byte(nil), genl...), netdevAttrIfindex, u32(7), true) // a 6.3 kernel: no limit
	if info, err := parseNetdevReply(old, 7); err != nil || info.ZCMaxSegs != 0 {
		t.Fatalf("reply without the limit: %+v, %v", info, err)
	}
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"empty", nil},
		{"header only", genl},
		{"other interface", nla(append([]byte(nil), genl...), netdevAttrIfindex, u32(8), true)},
		{"no ifindex", nla(append([]byte(nil), genl...), netdevAttrXDPZCMaxSegs, u32(2), true)},
		{"short ifindex", nla(append([]byte(nil), genl...), netdevAttrIfindex, []byte{7, 0}, true)},
		{"short features", nla(nla(append([]byte(nil), genl...), netdevAttrIfindex, u32(7), true), netdevAttrXDPFeatures, u32(1), true)},
		{"long segs", nla(nla(append([]byte(nil), genl...), netdevAttrIfindex, u32(7), true), netdevAttrXDPZCMaxSegs, u64(1), true)},
		{"truncated attribute", full[:len(full)-2]},
		{"trailing bytes", append(append([]byte(nil), full...), 0, 0)},
		{"attribute length 2", append(append([]byte(nil), genl...), 2, 0, 1, 0)},
	} {
		if _, err := parseNetdevReply(tc.msg, 7); !errors.Is(err, errNetdevReply) {
			t.Errorf("%s: error %v, want errNetdevReply", tc.name, err)
		}
	}
}

// FuzzParseNetdevReply: any bytes are refused with errNetdevReply or parsed; a parsed reply
// names the interface asked for.
func FuzzParseNetdevReply(f *testing.F) {
	f.Add(nla(nla(append([]byte(nil), genl...), netdevAttrIfindex, u32(7), true), netdevAttrXDPZCMaxSegs, u32(3), false))
	f.Add(append([]byte(nil), genl...))
	f.Fuzz(func(t *testing.T, msg []byte) {
		_, err := parseNetdevReply(msg, 7)
		if err != nil && !errors.Is(err, errNetdevReply) {
			t.Fatalf("error %v does not wrap errNetdevReply", err)
		}
		if err == nil {
			found := false
			for b := msg[genlHeaderLen:]; len(b) >= 4; {
				alen := int(binary.NativeEndian.Uint16(b))
				if binary.NativeEndian.Uint16(b[2:])&^0xC000 == netdevAttrIfindex && binary.NativeEndian.Uint32(b[4:]) == 7 {
					found = true
				}
				b = b[min((alen+3)&^3, len(b)):]
			}
			if !found {
				t.Fatal("parsed a reply without ifindex 7")
			}
		}
	})
}

func TestZeroCopyPayloadLimit(t *testing.T) {
	const room, hdr = 4096 - 256, 14 + 20 + 8
	for _, tc := range []struct {
		segs uint32
		want int
	}{{0, 0}, {1, room - hdr}, {3, 3*room - hdr}, {8, 8*room - hdr}, {1 << 20, 64*room - hdr}} {
		if got := zeroCopyPayloadLimit(tc.segs, room, hdr); got != tc.want {
			t.Errorf("zeroCopyPayloadLimit(%d) = %d, want %d", tc.segs, got, tc.want)
		}
	}
	if got := zeroCopyPayloadLimit(1, 30, hdr); got != 0 {
		t.Errorf("frames smaller than the headers: %d, want 0", got)
	}
}
