package frame

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// refChecksum is the straightforward RFC 1071 algorithm, kept deliberately naive: add the
// data as big-endian 16-bit words (a trailing odd byte padded with a zero low half), fold
// the carries back in after every word, and complement.
func refChecksum(data []byte) uint16 {
	var sum uint32
	for i := 0; i < len(data); i += 2 {
		w := uint32(data[i]) << 8
		if i+1 < len(data) {
			w |= uint32(data[i+1])
		}
		sum += w
		if sum > 0xFFFF {
			sum = sum&0xFFFF + 1
		}
	}
	return ^uint16(sum)
}

// checksumOf sums data in one Add call.
func checksumOf(data []byte) uint16 {
	var c Checksum
	c.Add(data)
	return c.Fold()
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestChecksumKnownValues(t *testing.T) {
	ipHeader := []byte{ // a well-known IPv4 header, checksum field 0xb861
		0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
		0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
	}
	zeroed := append([]byte(nil), ipHeader...)
	zeroed[10], zeroed[11] = 0, 0
	ff := make([]byte, 64)
	for i := range ff {
		ff[i] = 0xFF
	}
	for _, tc := range []struct {
		name string
		data []byte
		want uint16
	}{
		{"empty", nil, 0xFFFF},
		{"one zero byte", []byte{0}, 0xFFFF},
		{"one byte", []byte{0x12}, ^uint16(0x1200)},
		{"one word", []byte{0x12, 0x34}, ^uint16(0x1234)},
		// RFC 1071 section 3: the sum of these bytes is 0xddf2.
		{"rfc1071 example", []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, ^uint16(0xddf2)},
		{"ipv4 header, field zeroed", zeroed, 0xb861},
		{"ipv4 header, field set", ipHeader, 0},
		{"all ones", ff, 0},
		{"all ones odd", ff[:63], 0x00FF},
		{"zeros 100", make([]byte, 100), 0xFFFF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checksumOf(tc.data); got != tc.want {
				t.Errorf("Checksum = %#04x, want %#04x", got, tc.want)
			}
			if got := refChecksum(tc.data); got != tc.want {
				t.Errorf("reference = %#04x, want %#04x (bad test vector)", got, tc.want)
			}
		})
	}
}

// TestChecksumMatchesReference sums random data of every length up to 300 and a few large
// ones, at every alignment of the slice start.
func TestChecksumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lengths := []int{1500, 4096, 9000, 65535}
	for n := 0; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	buf := randBytes(r, 65535+8)
	for _, n := range lengths {
		for align := 0; align < 8; align++ {
			data := buf[align : align+n]
			if got, want := checksumOf(data), refChecksum(data); got != want {
				t.Fatalf("len %d align %d: Checksum = %#04x, reference %#04x", n, align, got, want)
			}
		}
	}
	// Data built to create many carries.
	for _, fill := range []byte{0xFF, 0xFE, 0x80, 0x7F} {
		data := make([]byte, 999)
		for i := range data {
			data[i] = fill
		}
		if got, want := checksumOf(data), refChecksum(data); got != want {
			t.Fatalf("fill %#x: Checksum = %#04x, reference %#04x", fill, got, want)
		}
	}
}

// TestChecksumSegments checks that summing in pieces of any length, odd ones included,
// equals summing in one go.
func TestChecksumSegments(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 2000; iter++ {
		data := randBytes(r, r.IntN(2000))
		want := refChecksum(data)
		var c Checksum
		rest := data
		for len(rest) > 0 {
			k := r.IntN(min(len(rest), 70) + 1)
			c.Add(rest[:k])
			rest = rest[k:]
		}
		if got := c.Fold(); got != want {
			t.Fatalf("iter %d len %d: segmented Checksum = %#04x, reference %#04x", iter, len(data), got, want)
		}
	}
	// The smallest odd cases, explicitly.
	data := []byte{1, 2, 3, 4, 5}
	for _, cuts := range [][]int{{1}, {1, 2}, {3}, {1, 1, 1, 1}, {0, 5}, {5, 0}} {
		var c Checksum
		prev := 0
		for _, k := range cuts {
			c.Add(data[prev : prev+k])
			prev += k
		}
		c.Add(data[prev:])
		if got, want := c.Fold(), refChecksum(data); got != want {
			t.Errorf("cuts %v: %#04x, want %#04x", cuts, got, want)
		}
	}
}

// TestChecksumWords checks that AddUint16 and AddUint32 add word-aligned fields whatever
// the stream parity, and that Reset empties the sum.
func TestChecksumWords(t *testing.T) {
	payload := []byte{9, 8, 7} // odd, so the stream ends mid-word
	var c Checksum
	c.Add(payload)
	c.AddUint16(0x1234)
	c.AddUint32(0xC0A80001)
	// Same thing as bytes: fields first (word-aligned), then the payload.
	want := refChecksum([]byte{0x12, 0x34, 0xC0, 0xA8, 0x00, 0x01, 9, 8, 7})
	if got := c.Fold(); got != want {
		t.Fatalf("fields + odd payload = %#04x, want %#04x", got, want)
	}
	c.Reset()
	if got := c.Fold(); got != 0xFFFF {
		t.Fatalf("after Reset Fold = %#04x, want 0xffff", got)
	}
	var w [4]byte
	binary.BigEndian.PutUint32(w[:], 0xFFFFFFFF)
	c.AddUint32(0xFFFFFFFF)
	if got, want := c.Fold(), refChecksum(w[:]); got != want {
		t.Fatalf("AddUint32(0xffffffff) = %#04x, want %#04x", got, want)
	}
}

func TestChecksumAllocs(t *testing.T) {
	data := make([]byte, 1500)
	var c Checksum
	allocs := testing.AllocsPerRun(100, func() {
		c.Reset()
		c.Add(data[:701])
		c.Add(data[701:])
		c.AddUint16(17)
		c.AddUint32(0x01020304)
		_ = c.Fold()
	})
	if allocs != 0 {
		t.Fatalf("Checksum allocates %v times per run, want 0", allocs)
	}
}

// FuzzChecksum splits data at points derived from seed and checks that the segmented sum
// equals the one-shot reference.
func FuzzChecksum(f *testing.F) {
	f.Add([]byte{}, uint64(0))
	f.Add([]byte{0xFF}, uint64(1))
	f.Add([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, uint64(7))
	f.Add(make([]byte, 1501), uint64(0xdeadbeef))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		want := refChecksum(data)
		if got := checksumOf(data); got != want {
			t.Fatalf("one-shot Checksum = %#04x, reference %#04x", got, want)
		}
		r := rand.New(rand.NewPCG(seed, uint64(len(data))))
		var c Checksum
		rest := data
		for len(rest) > 0 {
			k := r.IntN(len(rest) + 1)
			if r.IntN(4) == 0 {
				k = r.IntN(min(len(rest), 9) + 1) // favour short, odd pieces
			}
			c.Add(rest[:k])
			rest = rest[k:]
		}
		if got := c.Fold(); got != want {
			t.Fatalf("segmented Checksum = %#04x, reference %#04x", got, want)
		}
	})
}

func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{64, 1500, 9000} {
		data := randBytes(rand.New(rand.NewPCG(5, 6)), n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(n))
			var sink uint16
			for b.Loop() {
				var c Checksum
				c.Add(data)
				sink += c.Fold()
			}
			_ = sink
		})
	}
}
