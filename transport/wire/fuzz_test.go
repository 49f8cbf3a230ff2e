package wire

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the committed fuzz seed corpora in testdata/fuzz")

// FuzzParse feeds arbitrary bytes to Parse as one datagram, and again with the trailer
// recomputed so the fuzzer reaches the checks behind the CRC. Parse must not panic, and
// whatever it accepts must satisfy checkAccepted.
//
// The seeds are every sample and the edge samples (CM values ValidConnFields refuses, a
// ReadRequest near 4 GiB, an RNR NAK with the largest delay, an ack whose HighPSN is behind
// its AckPSN); for an accepted CM packet it also checks the ConnID rule and ValidConnFields
// against their specification.
func FuzzParse(f *testing.F) {
	for _, s := range append(samples(), edgeSamples()...) {
		f.Add(dgram(f, &s.p, s.payload))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Packet
		if Parse([][]byte{data}, &p) == nil {
			checkAccepted(t, [][]byte{data}, &p)
			checkCM(t, &p)
		}
		d := bytes.Clone(data)
		fixCRC(d)
		if Parse([][]byte{d}, &p) == nil {
			checkAccepted(t, [][]byte{d}, &p)
			checkCM(t, &p)
		}
	})
}

// checkCM verifies the connection-management rules of an accepted packet: a ConnID on the
// messages that name the attempt, and ValidConnFields exactly as documented.
func checkCM(t *testing.T, p *Packet) {
	t.Helper()
	if opTable[p.Opcode].kind != kindCM {
		if ValidConnFields(p) {
			t.Fatalf("ValidConnFields accepted a %v", p.Opcode)
		}
		return
	}
	c := &p.CM
	if c.ConnID == 0 && p.Opcode != OpDisconnectReq && p.Opcode != OpDisconnectRep {
		t.Fatalf("%v with ConnID 0 accepted", p.Opcode)
	}
	want := (p.Opcode == OpConnRequest || p.Opcode == OpConnReply) && c.SrcQPN != 0 && c.DataPort != 0 &&
		int(c.MaxPayload) >= MinMaxPayload && int(c.MaxPayload) <= MaxMaxPayload &&
		(p.Opcode == OpConnRequest || (c.Cookie != 0 && c.Cookie == p.Cookie))
	if got := ValidConnFields(p); got != want {
		t.Fatalf("ValidConnFields(%v %+v, header cookie %#x) = %v, want %v", p.Opcode, *c, p.Cookie, got, want)
	}
}

// FuzzParseSplit takes a datagram (its trailer recomputed, so it is usually valid) and cuts it
// into up to MaxSegments segments at fuzzer-chosen points. Parse of the segments must agree
// with Parse of the whole: the same error, or ErrSegments exactly when the first segment is
// shorter than the part it must hold, or the same packet.
func FuzzParseSplit(f *testing.F) {
	for _, s := range samples() {
		d := dgram(f, &s.p, s.payload)
		e := len(d) - TrailerLen
		f.Add(d, uint16(fixedLen(d)), uint16(e+1), uint16(e+3))
		f.Add(d, uint16(e), uint16(e), uint16(len(d)))
	}
	f.Fuzz(func(t *testing.T, data []byte, c1, c2, c3 uint16) {
		d := bytes.Clone(data)
		fixCRC(d)
		cuts := []int{int(c1), int(c2), int(c3)}
		for i := range cuts {
			cuts[i] = min(cuts[i], len(d))
		}
		slices.Sort(cuts)
		segs := split(d, cuts...)

		var whole, parts Packet
		werr := Parse([][]byte{d}, &whole)
		perr := Parse(segs, &parts)
		if perr == ErrSegments {
			if len(segs[0]) >= fixedLen(d) {
				t.Fatalf("ErrSegments with %d bytes in the first segment, need %d (whole: %v)", len(segs[0]), fixedLen(d), werr)
			}
			return
		}
		if perr != werr {
			t.Fatalf("split %v: %v, whole: %v", cuts, perr, werr)
		}
		if perr != nil {
			return
		}
		if diff := samePacket(&whole, &parts); diff != "" {
			t.Fatalf("split %v: %s differs", cuts, diff)
		}
		checkAccepted(t, [][]byte{d}, &whole)
		checkAccepted(t, segs, &parts)
	})
}

// TestWriteCorpus rewrites testdata/fuzz/<target>/ when run with -update-corpus: one valid
// datagram per sample for both targets, one per edge sample for FuzzParse. Otherwise it
// checks the committed corpus is what the samples encode to.
func TestWriteCorpus(t *testing.T) {
	files := map[string]string{}
	for _, s := range samples() {
		d := dgram(t, &s.p, s.payload)
		e := len(d) - TrailerLen
		files[filepath.Join("FuzzParse", "valid-"+s.name)] = fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", d)
		files[filepath.Join("FuzzParseSplit", "valid-"+s.name)] = fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint16(%d)\nuint16(%d)\nuint16(%d)\n",
			d, fixedLen(d), (fixedLen(d)+e)/2, e+2)
	}
	for _, s := range edgeSamples() {
		files[filepath.Join("FuzzParse", "edge-"+s.name)] = fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", dgram(t, &s.p, s.payload))
	}
	for name, content := range files {
		path := filepath.Join("testdata", "fuzz", name)
		if *updateCorpus {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("seed corpus: %v (regenerate with go test -run TestWriteCorpus -update-corpus)", err)
		}
		if string(got) != content {
			t.Errorf("%s is stale (regenerate with go test -run TestWriteCorpus -update-corpus)", path)
		}
	}
}
