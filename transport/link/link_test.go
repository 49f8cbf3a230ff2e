package link

import "testing"

func TestPacketLen(t *testing.T) {
	var p Packet
	if p.Len() != 0 {
		t.Fatalf("empty packet has length %d", p.Len())
	}
	p.SetData(make([]byte, 7))
	if p.Len() != 7 || p.NSegs != 1 {
		t.Fatalf("SetData: len %d segs %d", p.Len(), p.NSegs)
	}
	p.Segs[1], p.Segs[2] = make([]byte, 3), make([]byte, 5)
	p.NSegs = 3
	if p.Len() != 15 {
		t.Fatalf("three segments: len %d, want 15", p.Len())
	}
	// A corrupt segment count never reads past the array.
	p.NSegs = 200
	if p.Len() != 15 {
		t.Fatalf("NSegs 200: len %d, want the 15 bytes of the array", p.Len())
	}
}
