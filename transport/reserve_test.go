package transport_test

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// TestReserveCommit: a work request filled in place is posted by Commit, refused by it as
// PostSend refuses (nothing posted), and handed back in its completion with the poster's
// data untouched, where it was posted.
func TestReserveCommit(t *testing.T) {
	w := newWorld(t, simlink.Config{MaxPayload: 1472}, nil)
	qa, _ := w.connect(transport.QPConfig{SendDepth: 4})
	dst := make([]byte, 64)
	w.memB.add(5, 0, 0x1000, dst, memreg.AccessRemoteWrite)
	src := bytes.Repeat([]byte{0xab}, 64)

	var records []*transport.WorkRequest
	type tag struct{ n int }
	for i := range 4 {
		wr := qa.Reserve()
		if wr == nil {
			t.Fatalf("reserve %d refused", i)
		}
		wr.Kind, wr.NSGE, wr.RemoteAddr, wr.RemoteToken, wr.Context = transport.OpWrite, 1, 0x1000, 5, uint64(i)
		wr.SGL[0] = src
		wr.Poster = transport.PosterData{Context: &tag{i}, Tag: uint64(100 + i)}
		if i == 2 {
			// A malformed request: refused, nothing posted; the same record comes back.
			wr.NSGE = transport.MaxSGE + 1
			if err := qa.Commit(wr); !errors.Is(err, transport.ErrInvalidRequest) {
				t.Fatalf("commit of a malformed request: %v", err)
			}
			if again := qa.Reserve(); again != wr || !reflect.ValueOf(*again).IsZero() {
				t.Fatalf("the next reserve: %p (cleared %v), want %p cleared", again, reflect.ValueOf(*again).IsZero(), wr)
			}
			continue
		}
		if err := qa.Commit(wr); err != nil {
			t.Fatal(err)
		}
		records = append(records, wr)
	}
	if len(records) != 3 {
		t.Fatalf("%d posted", len(records))
	}
	var got []*transport.WorkRequest
	var tags []uint64
	w.rec.onComplete = func(c *transport.Completion) {
		if c.Request != nil {
			got = append(got, c.Request)
			tags = append(tags, c.Request.Poster.Tag)
		}
	}
	w.runUntil(time.Second, "three writes", func() bool { return w.rec.count(qa) == 3 })
	for i, c := range w.rec.of(qa) {
		if c.Status != transport.StatusSuccess || c.Bytes != 64 {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	for i := range got {
		if got[i] != records[i] {
			t.Fatalf("completion %d handed back %p, posted at %p", i, got[i], records[i])
		}
	}
	if want := []uint64{100, 101, 103}; !slices.Equal(tags, want) {
		t.Fatalf("poster tags %v, want %v", tags, want)
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("the writes did not land")
	}
	// Every slot a Reserve returns is clear, whatever it held: the completed requests'
	// slots come round again as the queue wraps.
	for i := range 8 {
		wr := qa.Reserve()
		if wr == nil {
			t.Fatalf("reserve %d after the completions refused", i)
		}
		if !reflect.ValueOf(*wr).IsZero() {
			t.Fatalf("reserve %d after the completions: not cleared: %+v", i, *wr)
		}
		wr.Kind, wr.NSGE, wr.RemoteAddr, wr.RemoteToken = transport.OpWrite, 1, 0x1000, 5
		wr.SGL[0] = src
		wr.Poster = transport.PosterData{Tag: uint64(200 + i)}
		if err := qa.Commit(wr); err != nil {
			t.Fatal(err)
		}
		w.runUntil(time.Second, "the write", func() bool { return w.rec.count(qa) == 4+i })
	}
}

// TestPostWhileCompleting: a poster told of a completion may post at once, while the
// completed request's record is still being handed back: SendDepth requests outstanding
// means the completed one is not counted, so the post succeeds (one slot of slack holds
// the record until the sink returns).
func TestPostWhileCompleting(t *testing.T) {
	w := newWorld(t, simlink.Config{MaxPayload: 1472}, nil)
	qa, _ := w.connect(transport.QPConfig{SendDepth: 4})
	dst := make([]byte, 64)
	w.memB.add(5, 0, 0x1000, dst, memreg.AccessRemoteWrite)
	wr := transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, RemoteAddr: 0x1000, RemoteToken: 5}
	wr.SGL[0] = make([]byte, 64)
	posted := 0
	post := func() {
		wr.Context = uint64(posted)
		if err := qa.PostSend(&wr); err != nil {
			t.Errorf("post %d: %v", posted, err)
			return
		}
		posted++
	}
	for range 4 {
		post()
	}
	if err := qa.PostSend(&wr); !errors.Is(err, transport.ErrQueueFull) {
		t.Fatalf("a fifth post with four outstanding: %v", err)
	}
	w.rec.onComplete = func(c *transport.Completion) {
		if c.Request != nil && posted < 12 {
			post() // the completed request no longer counts; its record is still in use
		}
	}
	w.runUntil(time.Second, "twelve writes", func() bool { return w.rec.count(qa) == 12 })
	for i, c := range w.rec.of(qa) {
		if c.Status != transport.StatusSuccess || c.Context != uint64(i) {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
}
