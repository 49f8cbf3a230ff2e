package proto

import (
	"bytes"
	"errors"
	"testing"
)

// TestRequestVersion1Golden: a request that uses nothing of version 2 is encoded exactly as
// ndkpeer's protocol version 1 encoded it, so that a server of version 1 takes it.
func TestRequestVersion1Golden(t *testing.T) {
	r := Request{Kind: KindWriteBW, MaxSize: 8 << 20, InlineSize: 256, RecvDepth: 512, QPIndex: 1, QPs: 2, Session: 0x0102030405060708}
	golden := []byte{'N', 'D', 'K', 'P', 1, 5, 0, 0,
		0x00, 0x00, 0x80, 0x00, // MaxSize
		0x00, 0x01, 0x00, 0x02, // InlineSize, RecvDepth
		0x01, 0x00, 0x02, 0x00, // QPIndex, QPs
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // Session
		0, 0, 0, 0}
	if b := r.Append(nil); !bytes.Equal(b, golden) {
		t.Fatalf("version 1 encoding changed:\n got %x\nwant %x", b, golden)
	}
	got, err := ParseRequest(golden)
	if err != nil {
		t.Fatal(err)
	}
	r.Version = 1
	if got != r {
		t.Fatalf("parsed %+v, want %+v", got, r)
	}
}

func TestRequestVersion2(t *testing.T) {
	r := Request{Kind: KindReadBW, MaxSize: 65536, QPs: 4, QPIndex: 3, Session: 77,
		Flags: FlagBidirectional | FlagEvents | FlagCPU, Depth: 16, BufAddr: 0x7f0000000000, BufLen: 65536, Token: 0xabcd}
	b := r.Append(nil)
	if len(b) != RequestLenV2 || b[4] != 2 || VersionOf(b) != 2 {
		t.Fatalf("a request with version 2 fields: %d bytes of version %d", len(b), b[4])
	}
	got, err := ParseRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	r.Version = 2
	if got != r {
		t.Fatalf("round trip: got %+v, want %+v", got, r)
	}
	// Each version 2 field alone moves the encoding to version 2.
	for name, mod := range map[string]func(*Request){
		"flags": func(r *Request) { r.Flags = FlagEvents }, "depth": func(r *Request) { r.Depth = 1 },
		"buffer":  func(r *Request) { r.BufAddr, r.BufLen, r.Token = 4096, 64, 1 },
		"control": func(r *Request) { r.Kind = KindControl },
	} {
		q := Request{Kind: KindSendBW, MaxSize: 64, QPs: 1}
		mod(&q)
		if v := VersionOf(q.Append(nil)); v != 2 {
			t.Errorf("%s: encoded in version %d", name, v)
		}
	}
	// An explicit version 2 without its fields stays version 2 (and round-trips).
	q := Request{Version: 2, Kind: KindSendLat, MaxSize: 64, QPs: 1}
	if got, err := ParseRequest(q.Append(nil)); err != nil || got != q {
		t.Errorf("explicit version 2: %+v, %v", got, err)
	}
}

// TestVersionCheck: every parser takes the versions from MinVersion to Version and refuses
// the others with ErrVersion; version 2 fields and messages need version 2.
func TestVersionCheck(t *testing.T) {
	req := Request{Kind: KindSendBW, MaxSize: 64, QPs: 1, Flags: FlagCPU}.Append(nil)
	for _, v := range []byte{0, Version + 1, 0xff} {
		b := bytes.Clone(req)
		b[4] = v
		if _, err := ParseRequest(b); !errors.Is(err, ErrVersion) {
			t.Errorf("request of version %d: err %v, want ErrVersion", v, err)
		}
		ref := Refusal{Code: RefuseBusy, Reason: "x"}.Append(nil)
		ref[4] = v
		if _, err := ParseRefusal(ref); !errors.Is(err, ErrVersion) {
			t.Errorf("refusal of version %d: err %v", v, err)
		}
		ctl := CtlMsg{Op: CtlSample}.Append(nil)
		ctl[4] = v
		if _, err := ParseCtlMsg(ctl); !errors.Is(err, ErrVersion) {
			t.Errorf("control message of version %d: err %v", v, err)
		}
	}
	// A version 2 request cut to version 1's length is malformed, not misread.
	if _, err := ParseRequest(req[:RequestLen]); !errors.Is(err, ErrMalformed) {
		t.Errorf("version 2 request of 32 bytes: err %v", err)
	}
	// Version 1 cannot carry version 2 fields, nor a control connection.
	if err := (Request{Version: 1, Kind: KindSendBW, MaxSize: 64, QPs: 1, Flags: FlagEvents}).Validate(); !errors.Is(err, ErrMalformed) {
		t.Errorf("version 1 with flags: err %v", err)
	}
	v1ctl := Request{Kind: KindSendLat, MaxSize: 64, QPs: 1}.Append(nil)
	v1ctl[5] = byte(KindControl)
	if _, err := ParseRequest(v1ctl); !errors.Is(err, ErrMalformed) {
		t.Errorf("version 1 control request: err %v", err)
	}
	// Version 1 ignored its reserved byte 6: a version 1 request with it set still parses,
	// without flags.
	v1 := Request{Kind: KindSendLat, MaxSize: 64, QPs: 1}.Append(nil)
	v1[6] = 0xff
	if r, err := ParseRequest(v1); err != nil || r.Flags != 0 {
		t.Errorf("version 1 request with byte 6 set: %+v, %v", r, err)
	}
	// Control messages exist from version 2 on.
	ctl := CtlMsg{Op: CtlSample}.Append(nil)
	ctl[4] = 1
	if _, err := ParseCtlMsg(ctl); !errors.Is(err, ErrVersion) {
		t.Errorf("control message of version 1: err %v", err)
	}
	// Unknown flags, and -b of a latency test, are refused.
	bad := Request{Kind: KindSendBW, MaxSize: 64, QPs: 1, Flags: 0x80}
	if _, err := ParseRequest(bad.Append(nil)); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown flags: err %v", err)
	}
	bad = Request{Kind: KindSendLat, MaxSize: 64, QPs: 1, Flags: FlagBidirectional}
	if _, err := ParseRequest(bad.Append(nil)); !errors.Is(err, ErrMalformed) {
		t.Errorf("bidirectional latency test: err %v", err)
	}
	// A server answers in its request's version: a version 1 reply parses, and says so.
	rep := Reply{Version: 1, Kind: KindSendLat}.Append(nil)
	if r, err := ParseReply(rep, KindSendLat); err != nil || r.Version != 1 {
		t.Errorf("version 1 reply: %+v, %v", r, err)
	}
	// A refusal from a server of version 1 tells the client that version.
	old := Refusal{Version: 1, Code: RefuseVersion, Reason: "request of version 2 (this ndkpeer speaks 1)"}.Append(nil)
	if r, err := ParseRefusal(old); err != nil || r.Version != 1 || r.Code != RefuseVersion {
		t.Errorf("version 1 refusal: %+v, %v", r, err)
	}
	if VersionOf([]byte("NDK")) != 0 || VersionOf([]byte("XXXX\x02")) != 0 {
		t.Error("VersionOf of no message is not 0")
	}
}

func TestCtlMsg(t *testing.T) {
	m := CtlMsg{Op: CtlCounters, Flags: CtlPolls, Ops: 123456, ElapsedNs: 2e9, LastNs: 1999e6, UserNs: 15e8, SysNs: 4e8}
	b := m.Append(nil)
	if len(b) != CtlMsgLen {
		t.Fatalf("encoded %d bytes, want %d", len(b), CtlMsgLen)
	}
	if got, err := ParseCtlMsg(b); err != nil || got != m {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, m)
	}
	start := CtlMsg{Op: CtlStart, Flags: CtlReverse, Kind: KindWriteBW, Size: 65536, Depth: 16, Rate: 2000}
	if got, err := ParseCtlMsg(start.Append(nil)); err != nil || got != start {
		t.Fatalf("start: %+v, %v", got, err)
	}
	for name, bad := range map[string]CtlMsg{
		"op 0":             {Op: 0},
		"op 6":             {Op: CtlError + 1},
		"flags":            {Op: CtlSample, Flags: 0x80},
		"depth":            {Op: CtlStart, Depth: MaxDepth + 1},
		"kind":             {Op: CtlSample, Kind: 99},
		"reverse latency":  {Op: CtlStart, Flags: CtlReverse, Kind: KindSendLat, Size: 64, Depth: 1},
		"reverse size 0":   {Op: CtlStart, Flags: CtlReverse, Kind: KindSendBW, Depth: 1},
		"reverse depth 0":  {Op: CtlStart, Flags: CtlReverse, Kind: KindSendBW, Size: 64},
		"reverse too long": {Op: CtlStart, Flags: CtlReverse, Kind: KindSendBW, Size: MaxSize + 1, Depth: 1},
	} {
		if _, err := ParseCtlMsg(bad.Append(nil)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	if _, err := ParseCtlMsg(b[:CtlMsgLen-1]); !errors.Is(err, ErrMalformed) {
		t.Errorf("short: err %v", err)
	}
}
