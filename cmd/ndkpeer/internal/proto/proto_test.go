package proto

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestRequestRoundTrip(t *testing.T) {
	r := Request{Version: 1, Kind: KindWriteBW, MaxSize: 8 << 20, InlineSize: 256, RecvDepth: 512, QPIndex: 1, QPs: 2, Session: 0x0102030405060708}
	b := r.Append(nil)
	if len(b) != RequestLen {
		t.Fatalf("encoded %d bytes, want %d", len(b), RequestLen)
	}
	got, err := ParseRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if got != r {
		t.Fatalf("round trip: got %+v, want %+v", got, r)
	}
}

func TestParseRequestRejects(t *testing.T) {
	good := Request{Kind: KindSendLat, MaxSize: 64, QPs: 1}
	enc := func(mod func(*Request)) []byte {
		r := good
		mod(&r)
		return r.Append(nil)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"short", good.Append(nil)[:RequestLen-1], ErrMalformed},
		{"magic", append([]byte("XDKP"), good.Append(nil)[4:]...), ErrMalformed},
		{"version", func() []byte { b := good.Append(nil); b[4] = 9; return b }(), ErrVersion},
		{"kind 0", enc(func(r *Request) { r.Kind = 0 }), ErrMalformed},
		{"kind 99", enc(func(r *Request) { r.Kind = 99 }), ErrMalformed},
		{"size 0", enc(func(r *Request) { r.MaxSize = 0 }), ErrMalformed},
		{"size over", enc(func(r *Request) { r.MaxSize = MaxSize + 1 }), ErrMalformed},
		{"inline over", enc(func(r *Request) { r.InlineSize = MaxInline + 1 }), ErrMalformed},
		{"depth over", enc(func(r *Request) { r.RecvDepth = MaxRecvDepth + 1 }), ErrMalformed},
		{"qps 0", enc(func(r *Request) { r.QPs = 0 }), ErrMalformed},
		{"qps over", enc(func(r *Request) { r.QPs = MaxQPs + 1 }), ErrMalformed},
		{"index past", enc(func(r *Request) { r.QPIndex = 1 }), ErrMalformed},
	} {
		_, err := ParseRequest(tc.b)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestReplyRoundTrip(t *testing.T) {
	r := Reply{Version: Version, Kind: KindReadLat, BufAddr: 0x7f0000001000, BufLen: 1 << 20, Token: 0xdeadbeef,
		Server: Mode{Attach: AttachNative, Progress: ProgressInline, ZeroCopy: true, NeedWakeup: true,
			MTU: 9000, MaxPayload: 8972, Served: 4, Queues: 4}}
	b := r.Append(nil)
	if len(b) != ReplyLen {
		t.Fatalf("encoded %d bytes, want %d", len(b), ReplyLen)
	}
	got, err := ParseReply(b, KindReadLat)
	if err != nil {
		t.Fatal(err)
	}
	if got != r {
		t.Fatalf("round trip: got %+v, want %+v", got, r)
	}
	if _, err := ParseReply(b, KindWriteLat); !errors.Is(err, ErrMalformed) {
		t.Errorf("reply for another kind: err %v", err)
	}
	bad := bytes.Clone(b)
	bad[28] = 7 // attach mode
	if _, err := ParseReply(bad, KindReadLat); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown attach mode: err %v", err)
	}
	wrap := Reply{Kind: KindReadLat, BufAddr: ^uint64(0) - 10, BufLen: 100}
	if _, err := ParseReply(wrap.Append(nil), KindReadLat); !errors.Is(err, ErrMalformed) {
		t.Errorf("wrapping buffer: err %v", err)
	}
}

func TestRefusalRoundTrip(t *testing.T) {
	r := Refusal{Version: Version, Code: RefuseLimit, Reason: "size 32 MiB over the server's limit 16 MiB"}
	got, err := ParseRefusal(r.Append(nil))
	if err != nil || got != r {
		t.Fatalf("got %+v, %v; want %+v", got, err, r)
	}
	long := Refusal{Code: RefuseBusy, Reason: strings.Repeat("é", 200)}
	b := long.Append(nil)
	if len(b) > MaxPrivateData {
		t.Fatalf("long reason encoded in %d bytes, over %d", len(b), MaxPrivateData)
	}
	got, err = ParseRefusal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(long.Reason, got.Reason) || len(got.Reason) > MaxReason || len(got.Reason) < MaxReason-1 {
		t.Fatalf("cut reason of %d bytes", len(got.Reason))
	}
	bad := r.Append(nil)
	bad[5] = 0
	if _, err := ParseRefusal(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("code 0: err %v", err)
	}
	bad = r.Append(nil)
	bad[6] = 150 // longer than what follows
	if _, err := ParseRefusal(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("reason length past the end: err %v", err)
	}
}

func TestTourMsgRoundTrip(t *testing.T) {
	m := TourMsg{Op: TourBound, Addr: 0x1000, Len: 4096, Token: 77}
	b := m.Append(nil)
	if len(b) != TourMsgLen {
		t.Fatalf("encoded %d bytes, want %d", len(b), TourMsgLen)
	}
	got, err := ParseTourMsg(b)
	if err != nil || got != m {
		t.Fatalf("got %+v, %v; want %+v", got, err, m)
	}
	b[5] = 0
	if _, err := ParseTourMsg(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("op 0: err %v", err)
	}
}

func TestKindNames(t *testing.T) {
	for k := KindSendLat; k <= MaxKind; k++ {
		got, ok := KindOf(k.String())
		if !ok || got != k {
			t.Errorf("KindOf(%q) = %v, %v", k.String(), got, ok)
		}
	}
	if _, ok := KindOf("send-lat "); ok {
		t.Error("KindOf accepted a name with a trailing space")
	}
	if Kind(0).Valid() || (MaxKind + 1).Valid() {
		t.Error("kinds 0 and MaxKind+1 reported valid")
	}
}

// FuzzParse feeds arbitrary bytes to every parser: none may panic, and whatever parses
// must survive an encode and parse round trip unchanged (reserved bytes are ignored).
func FuzzParse(f *testing.F) {
	f.Add(Request{Kind: KindSendBW, MaxSize: 65536, RecvDepth: 512, QPs: 1}.Append(nil))
	f.Add(Reply{Kind: KindWriteLat, BufAddr: 4096, BufLen: 64, Token: 3}.Append(nil))
	f.Add(Refusal{Code: RefuseMemory, Reason: "no memory"}.Append(nil))
	f.Add(TourMsg{Op: TourBind, Len: 4096}.Append(nil))
	f.Add([]byte("NDKP\x01"))
	f.Add(Request{Kind: KindWriteBW, MaxSize: 65536, QPs: 1, Flags: FlagBidirectional | FlagEvents, Depth: 16, BufAddr: 4096, BufLen: 65536, Token: 9}.Append(nil))
	f.Add(CtlMsg{Op: CtlStart, Flags: CtlReverse, Kind: KindSendBW, Size: 64, Depth: 128, Rate: 2000}.Append(nil))
	f.Add(CtlMsg{Op: CtlCounters, Flags: CtlPolls, Ops: 7, ElapsedNs: 1e9, LastNs: 9e8, UserNs: 5e8, SysNs: 1e8}.Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseRequest(b); err == nil {
			if again, err := ParseRequest(r.Append(nil)); err != nil || again != r {
				t.Fatalf("request %+v: round trip gave %+v, %v", r, again, err)
			}
		}
		for k := KindSendLat; k <= MaxKind; k++ {
			if r, err := ParseReply(b, k); err == nil {
				if again, err := ParseReply(r.Append(nil), k); err != nil || again != r {
					t.Fatalf("reply %+v: round trip gave %+v, %v", r, again, err)
				}
			}
		}
		if r, err := ParseRefusal(b); err == nil {
			if again, err := ParseRefusal(r.Append(nil)); err != nil || again != r {
				t.Fatalf("refusal %+v: round trip gave %+v, %v", r, again, err)
			}
		}
		if m, err := ParseCtlMsg(b); err == nil {
			if again, err := ParseCtlMsg(m.Append(nil)); err != nil || again != m {
				t.Fatalf("control message %+v: round trip gave %+v, %v", m, again, err)
			}
		}
		if m, err := ParseTourMsg(b); err == nil {
			if again, err := ParseTourMsg(m.Append(nil)); err != nil || again != m {
				t.Fatalf("tour message %+v: round trip gave %+v, %v", m, again, err)
			}
		}
	})
}
