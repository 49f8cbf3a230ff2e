package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// These tests run the server and the client in one process, each on its own adapter,
// joined by an in-memory link (transport/simlink through ndk.OpenLink: what ndk's API
// offers for a link other than AF_XDP). They need no privileges. filestore_linux_test.go
// runs the real binary between two network-namespace hosts.

// logBuffer collects a server's log; the test prints it when it fails.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// bench is a started server on one adapter and a client adapter beside it.
type bench struct {
	srv    *server
	client *ndk.Adapter
	addr   netip.AddrPort // the server's listener
	stop   context.CancelFunc
	log    *logBuffer
}

// newBench starts a server with cfg (its listen address is filled in) on a simlink pair
// configured by lc; cleanup stops it and closes both adapters.
func newBench(t *testing.T, lc simlink.Config, cfg serverConfig) *bench {
	t.Helper()
	la, lb := simlink.Pair(lc)
	ca, err := ndk.OpenLink(la, ndk.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	sa, err := ndk.OpenLink(lb, ndk.DefaultOptions())
	if err != nil {
		closeAdapter(ca)
		t.Fatal(err)
	}
	b := &bench{client: ca, log: &logBuffer{}}
	cfg.listen = netip.AddrPortFrom(netip.Addr{}, defaultPort)
	b.addr = netip.AddrPortFrom(sa.LocalAddr().Addr(), defaultPort)
	b.srv, err = newServer(sa, cfg, slog.New(slog.NewTextHandler(b.log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.stop = cancel
	if err := b.srv.start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			b.srv.stop()
			stopped = true
		}
		closeAdapter(ca)
		closeAdapter(sa)
		if t.Failed() {
			t.Logf("server log:\n%s", b.log)
		}
	})
	return b
}

func defaultServerConfig() serverConfig {
	return serverConfig{storeSize: 16 << 20, maxConns: 8, maxFiles: 64}
}

// randomFile writes n seeded random bytes to a new file in dir.
func randomFile(t *testing.T, dir, name string, n int, seed uint64) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// waitFor polls cond until it holds or d passes (test code: the example itself waits on
// CQs only).
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Files of every awkward size go in and come back byte-exact over a link that loses,
// duplicates, corrupts and reorders datagrams; a PUT of an existing name replaces it.
func TestPutGetLossyLink(t *testing.T) {
	lc := simlink.Config{Seed: 7, Default: simlink.Impairments{Loss: 0.01, Duplicate: 0.01, Corrupt: 0.001, Jitter: 30 * time.Microsecond}}
	b := newBench(t, lc, defaultServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	sizes := []int{0, 1, 4097, chunkSize, readsInFlight*chunkSize + 3} // the last wraps the ring of chunks
	for i, n := range sizes {
		name := "f-" + string(rune('a'+i))
		local, data := randomFile(t, dir, name, n, 1)
		if _, err := put(ctx, b.client, b.addr, local, name); err != nil {
			t.Fatalf("put %d bytes: %v", n, err)
		}
		back := filepath.Join(dir, name+".back")
		st, err := get(ctx, b.client, b.addr, name, back)
		if err != nil {
			t.Fatalf("get %d bytes: %v", n, err)
		}
		got, err := os.ReadFile(back)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) || st.size != uint64(n) {
			t.Fatalf("%d bytes: got back %d (stats %v), not the same", n, len(got), st)
		}
	}
	// Replace f-c with other bytes.
	local, data := randomFile(t, dir, "f-c.v2", 5000, 2)
	if _, err := put(ctx, b.client, b.addr, local, "f-c"); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(dir, "f-c.v2.back")
	if _, err := get(ctx, b.client, b.addr, "f-c", back); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("the replaced file did not come back")
	}
	files, extents, _ := b.srv.store.usage()
	if files != len(sizes) || extents != files {
		t.Fatalf("store: %d files, %d extents; want %d and as many", files, extents, len(sizes))
	}
	// Every connection was cleaned up.
	waitFor(t, 5*time.Second, "sessions closed", func() bool {
		b.srv.mu.Lock()
		defer b.srv.mu.Unlock()
		return b.srv.sessions == 0
	})
}

// A GET of a missing name fails with the server's "no such file" and leaves nothing on
// disk.
func TestGetMissing(t *testing.T) {
	b := newBench(t, simlink.Config{}, defaultServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	_, err := get(ctx, b.client, b.addr, "nothing-here", filepath.Join(dir, "out"))
	var re *refusedError
	if !errors.As(err, &re) || re.code != codeNotFound || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("get of a missing name: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	if _, err := put(ctx, b.client, b.addr, filepath.Join(dir, "absent"), "x"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("put of a missing local file: %v", err)
	}
	if _, err := put(ctx, b.client, b.addr, dir, "x"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("put of a directory: %v", err)
	}
}

// rawRequest sends b as a request, whatever it holds.
func (c *client) rawRequest(t *testing.T, b []byte) {
	t.Helper()
	copy(c.ctl.buf[msgSize:], b)
	if err := c.qp.Receive(verbReceive, []ndk.SGE{c.ctl.sge(0, msgSize)}); err != nil {
		t.Fatal(err)
	}
	if err := c.qp.Send(verbSend, []ndk.SGE{c.ctl.sge(msgSize, len(b))}, 0); err != nil {
		t.Fatal(err)
	}
	c.receiving, c.sending = true, true
}

// What a client may get wrong, or try, is refused: requests out of order, malformed
// requests, a wrong CRC (nothing stored), a Write past the window, a Write after the
// COMMIT (the window is invalidated).
func TestProtocolRefusals(t *testing.T) {
	b := newBench(t, simlink.Config{}, defaultServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dial(ctx, b.client, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	refused := func(err error, want code) {
		t.Helper()
		var re *refusedError
		if !errors.As(err, &re) || re.code != want {
			t.Fatalf("got %v, want the refusal %q", err, want)
		}
	}

	_, err = c.call(ctx, message{typ: typeCommit, name: "x", size: 1})
	refused(err, codeBadState)
	_, err = c.call(ctx, message{typ: typeDone, name: "x"})
	refused(err, codeBadState)
	_, err = c.call(ctx, message{typ: typePut, name: "x", size: 32 << 20})
	refused(err, codeTooLarge)

	c.rawRequest(t, encodeRaw(message{typ: typeGet, name: "../etc/passwd"}))
	_, err = c.await(ctx, typeGet, "../etc/passwd")
	refused(err, codeBadRequest)
	c.rawRequest(t, encodeRaw(message{typ: typePut, name: "x"})[:50]) // short
	_, err = c.await(ctx, typePut, "x")
	refused(err, codeBadRequest)

	// A PUT, its Write, and a COMMIT with another CRC: nothing is stored.
	rep, err := c.call(ctx, message{typ: typePut, name: "x", size: 4097})
	if err != nil {
		t.Fatal(err)
	}
	if rep.buf.Len != 4097 || rep.buf.Token == 0 {
		t.Fatalf("PUT's window: %v", rep.buf)
	}
	_, err = c.call(ctx, message{typ: typeGet, name: "y"})
	refused(err, codeBadState) // one transfer at a time
	ch := &c.chunks[0]
	ch.sge[0] = c.data.mr.SGE(ch.buf[:4097])
	if err := c.qp.Write(ch, ch.sge[:], rep.buf.Addr, rep.buf.Token, 0); err != nil {
		t.Fatal(err)
	}
	c.inflight++
	_, err = c.call(ctx, message{typ: typeCommit, name: "x", size: 4097, crc: 1})
	refused(err, codeBadCRC)
	_, err = c.call(ctx, message{typ: typeGet, name: "x"})
	refused(err, codeNotFound)
	if _, extents, _ := b.srv.store.usage(); extents != 0 {
		t.Fatalf("%d extents after a failed PUT", extents)
	}

	// Past the window's end: refused by the server's adapter, and the connection ends.
	rep, err = c.call(ctx, message{typ: typePut, name: "z", size: 10})
	if err != nil {
		t.Fatal(err)
	}
	ch.sge[0] = c.data.mr.SGE(ch.buf[:2])
	if err := c.qp.Write(ch, ch.sge[:], rep.buf.Addr+9, rep.buf.Token, 0); err != nil {
		t.Fatal(err)
	}
	c.inflight++
	if _, err := c.step(ctx); !errors.Is(err, ndk.StatusAccessViolation) {
		t.Fatalf("a Write past the window: %v", err)
	}
	waitFor(t, 5*time.Second, "the server releases the aborted PUT", func() bool {
		_, extents, _ := b.srv.store.usage()
		return extents == 0
	})
}

// After COMMIT the window is gone: a Write through its token fails.
func TestWriteAfterCommit(t *testing.T) {
	b := newBench(t, simlink.Config{}, defaultServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dial(ctx, b.client, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	rep, err := c.call(ctx, message{typ: typePut, name: "w", size: 3})
	if err != nil {
		t.Fatal(err)
	}
	ch := &c.chunks[0]
	copy(ch.buf, "abc")
	ch.sge[0] = c.data.mr.SGE(ch.buf[:3])
	if err := c.qp.Write(ch, ch.sge[:], rep.buf.Addr, rep.buf.Token, 0); err != nil {
		t.Fatal(err)
	}
	c.inflight++
	if err := c.request(message{typ: typeCommit, name: "w", size: 3, crc: 0x352441c2}); err != nil { // crc32("abc")
		t.Fatal(err)
	}
	if _, err := c.await(ctx, typeCommit, "w"); err != nil {
		t.Fatal(err)
	}
	copy(ch.buf, "XYZ")
	if err := c.qp.Write(ch, ch.sge[:], rep.buf.Addr, rep.buf.Token, 0); err != nil {
		t.Fatal(err)
	}
	c.inflight++
	if _, err := c.step(ctx); !errors.Is(err, ndk.StatusAccessViolation) {
		t.Fatalf("a Write after COMMIT: %v", err)
	}
	e, ok := b.srv.store.open("w")
	if !ok || string(b.srv.store.bytes(e)) != "abc" {
		t.Fatalf("stored %v %q", ok, b.srv.store.bytes(e))
	}
	b.srv.store.release(e)
}

// A client that disconnects in the middle of a PUT: the server sees it in CQ.Wait, and
// its window and reserved space go; the space serves the next PUT.
func TestClientVanishes(t *testing.T) {
	cfg := defaultServerConfig()
	cfg.storeSize = 2 << 20
	b := newBench(t, simlink.Config{}, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dial(ctx, b.client, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.call(ctx, message{typ: typePut, name: "big", size: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ch := &c.chunks[0]
	ch.sge[0] = c.data.mr.SGE(ch.buf)
	if err := c.qp.Write(ch, ch.sge[:], rep.buf.Addr, rep.buf.Token, 0); err != nil {
		t.Fatal(err)
	}
	c.inflight++
	if _, err := c.step(ctx); err != nil {
		t.Fatal(err)
	}
	c.close()
	waitFor(t, 5*time.Second, "the server releases the PUT's space", func() bool {
		_, extents, free := b.srv.store.usage()
		return extents == 0 && free == 2<<20
	})
	if !strings.Contains(b.log.String(), "msg=disconnected") || !strings.Contains(b.log.String(), "transfer abandoned") {
		t.Errorf("the server's log does not show the disconnect and the abandoned PUT:\n%s", b.log)
	}
	local, _ := randomFile(t, t.TempDir(), "big", 2<<20, 3)
	if _, err := put(ctx, b.client, b.addr, local, "big"); err != nil {
		t.Fatalf("a PUT into the space freed: %v", err)
	}
}

// Beyond -max-conns the listener rejects, and the client says why.
func TestTooManyClients(t *testing.T) {
	cfg := defaultServerConfig()
	cfg.maxConns = 1
	b := newBench(t, simlink.Config{}, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dial(ctx, b.client, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	_, err = dial(ctx, b.client, b.addr)
	if !errors.Is(err, ndk.StatusConnectionRefused) || !strings.Contains(err.Error(), "most clients (1)") {
		t.Fatalf("second client: %v", err)
	}
}

// The server's stop disconnects its clients: a client waiting for a reply learns it from
// its CQ.Wait.
func TestServerStopDisconnects(t *testing.T) {
	b := newBench(t, simlink.Config{}, defaultServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dial(ctx, b.client, b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if _, err := c.call(ctx, message{typ: typeGet, name: "nope"}); err == nil {
		t.Fatal("GET of nothing succeeded")
	}
	start := time.Now()
	b.stop()
	var ended *ndk.ConnectionEnded
	if _, err := c.step(ctx); !errors.As(err, &ended) || ended.Status != ndk.StatusRemoteDisconnect {
		t.Fatalf("after the server's stop: %v", err)
	}
	b.srv.stop()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the server took %v to stop", d)
	}
}

// The command line: usage errors exit 2 with the usage.
func TestCommandLine(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"serve"},
		{"serve", "-i", "eth0", "extra"},
		{"serve", "-i", "eth0", "-store-mib", "0"},
		{"serve", "-i", "eth0", "-addr", "nonsense"},
		{"serve", "-i", "eth0", "-max-conns", "0"},
		{"put", "198.18.0.2", "a", "b"},
		{"put", "-i", "eth0", "198.18.0.2", "a"},
		{"get", "-i", "eth0", "server.example", "a", "b"},
		{"get", "-nope"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "usage:") && !strings.Contains(errb.String(), "flag provided but not defined") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"help"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "filestore put") {
		t.Errorf("help: exit %d, %q", code, out.String())
	}
	for s, want := range map[string]netip.AddrPort{
		"198.18.0.2":      netip.MustParseAddrPort("198.18.0.2:4810"),
		"198.18.0.2:9":    netip.MustParseAddrPort("198.18.0.2:9"),
		"[2001:db8::1]:7": netip.MustParseAddrPort("[2001:db8::1]:7"),
		"2001:db8::1":     netip.MustParseAddrPort("[2001:db8::1]:4810"),
	} {
		if got, err := parseServer(s); err != nil || got != want {
			t.Errorf("parseServer(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for s, want := range map[string]netip.AddrPort{
		":4810":          netip.AddrPortFrom(netip.Addr{}, 4810),
		"198.18.0.2:1":   netip.MustParseAddrPort("198.18.0.2:1"),
		"0.0.0.0:4810":   netip.MustParseAddrPort("0.0.0.0:4810"),
		"[2001:db8::]:3": netip.MustParseAddrPort("[2001:db8::]:3"),
	} {
		if got, err := parseListen(s); err != nil || got != want {
			t.Errorf("parseListen(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", ":", ":65536", "1.2.3.4", "x:1"} {
		if _, err := parseListen(s); err == nil {
			t.Errorf("parseListen(%q) accepted", s)
		}
	}
}
