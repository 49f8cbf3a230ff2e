package xdp

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/transport/link"

	"github.com/xdpndk/xdpndk/internal/testbed"
	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
)

// oneRegion is a MemoryResolver with a single region: token 1 at address base.
type oneRegion struct {
	base uint64
	buf  []byte
}

func (r *oneRegion) Acquire(_ memreg.PD, token uint32, addr uint64, length uint32, _ memreg.Access) (memreg.Span, error) {
	if token != 1 || addr < r.base || addr-r.base > uint64(len(r.buf)) || uint64(length) > uint64(len(r.buf))-(addr-r.base) {
		return memreg.Span{}, memreg.ErrAccess
	}
	off := addr - r.base
	return memreg.Span{Buf: r.buf[off : off+uint64(length)], N: uint64(length)}, nil
}

func (r *oneRegion) Invalidate(memreg.PD, uint32) error { return memreg.ErrAccess }

// chanSink delivers completions on a channel.
type chanSink chan transport.Completion

func (c chanSink) Complete(_ *transport.QP, comp *transport.Completion) {
	cc := *comp
	cc.Request, cc.Receive = nil, nil // valid only during the call
	c <- cc
}

// TestEngineOverAFXDP runs the transport engine unchanged over the AF_XDP link between the
// two namespace hosts: the connection handshake, then Sends, Writes and Reads verified byte
// for byte, first clean and then with the steering program dropping 2% of our packets
// (seeded fault injection), which the engine must repair.
func TestEngineOverAFXDP(t *testing.T) { testEngineOverAFXDP(t, false) }

// TestEngineOverAFXDPZeroCopy is TestEngineOverAFXDP with zero-copy transmit
// (transport.Config.ZeroCopyTx) and the QPs' memory in the UMEM heaps: A's Send buffers and
// Write source, B's Write target and Read source region. The same checks hold, and both
// links must have sent payload by reference (B's Read responses, A's Sends and Write).
func TestEngineOverAFXDPZeroCopy(t *testing.T) { testEngineOverAFXDP(t, true) }

func testEngineOverAFXDP(t *testing.T, zeroCopy bool) {
	for _, drop := range []float64{0, 0.02} {
		t.Run(map[float64]string{0: "clean", 0.02: "drop2pct"}[drop], func(t *testing.T) {
			bed := testbed.NewT(t, testbed.Options{MTU: 9000})
			cfg := Config{RingSize: 1024, Frames: 2048}
			if zeroCopy {
				cfg.HeapSize = 4 << 20
			}
			da, db := openOn(t, bed.A, cfg), openOn(t, bed.B, cfg)
			if drop > 0 {
				for _, d := range []*Device{da, db} {
					if err := d.Program().SetFaultDrop(drop, 42); err != nil {
						t.Fatal(err)
					}
				}
			}
			// alloc returns n bytes of Go memory, or of host d's UMEM heap with zero copy.
			heaps := map[*Device]*memreg.Heap{}
			alloc := func(d *Device, n int) []byte {
				if !zeroCopy {
					return make([]byte, n)
				}
				h := heaps[d]
				if h == nil {
					h = heapOf(t, d)
					heaps[d] = h
				}
				b, err := h.Alloc(n, 0)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			region := &oneRegion{base: 0x7000_0000, buf: alloc(db, 1<<20)}
			mk := func(l link.Link, res transport.MemoryResolver) *transport.Engine {
				c := transport.DefaultConfig(l)
				c.Resolver = res
				c.ZeroCopyTx = zeroCopy
				e, err := transport.NewEngine(c)
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
			ea := mk(da.Links()[0], &oneRegion{})
			eb := mk(db.Links()[0], region)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			var wg sync.WaitGroup
			for _, e := range []*transport.Engine{ea, eb} {
				wg.Go(func() { _ = e.Run(ctx, 200*time.Microsecond) })
			}
			t.Cleanup(func() { cancel(); wg.Wait() })

			sa, sb := make(chanSink, 1024), make(chanSink, 1024)
			qa, err := ea.NewQP(transport.QPConfig{Sink: sa})
			if err != nil {
				t.Fatal(err)
			}
			qb, err := eb.NewQP(transport.QPConfig{Sink: sb})
			if err != nil {
				t.Fatal(err)
			}
			l, err := eb.Listen(1, 1)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := ea.Connect(qa, db.Links()[0].LocalAddr(), 1, []byte("over af_xdp"), 0)
			if err != nil {
				t.Fatal(err)
			}
			req, err := l.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := req.Accept(qb, nil, 0); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			defer func() { t.Logf("phases: %v", time.Since(t0)) }()
			if err := conn.Wait(ctx); err != nil {
				t.Fatalf("connect: %v", err)
			}
			if err := conn.Complete(); err != nil {
				t.Fatal(err)
			}
			if err := req.Wait(ctx); err != nil {
				t.Fatalf("accept: %v", err)
			}

			t.Logf("connected after %v", time.Since(t0))
			// 64 Sends of 8 KiB (multi-buffer datagrams at MTU 9000) into posted receives.
			const n = 64
			recv := make([][]byte, n)
			for i := range recv {
				recv[i] = make([]byte, 8192)
				if err := qb.PostReceive(&transport.Receive{NSGE: 1, SGL: [transport.MaxSGE][]byte{recv[i]}, Context: uint64(i)}); err != nil {
					t.Fatal(err)
				}
			}
			msgs := make([][]byte, n)
			for i := range msgs {
				msgs[i] = alloc(da, 8192)
				for j := range msgs[i] {
					msgs[i][j] = byte(i*7 + j*13)
				}
				for {
					err := qa.PostSend(&transport.WorkRequest{Kind: transport.OpSend, NSGE: 1, SGL: [transport.MaxSGE][]byte{msgs[i]}, Context: uint64(i)})
					if err == nil {
						break
					}
					if err != transport.ErrNotConnected || ctx.Err() != nil {
						t.Fatalf("post send %d: %v", i, err)
					}
					time.Sleep(time.Millisecond) // the RTU is still on its way to the engine
				}
			}
			for i := range n {
				c := waitCompletion(t, ctx, sa)
				if c.Status != transport.StatusSuccess || c.Context != uint64(i) {
					t.Fatalf("send %d completed %+v", i, c)
				}
				c = waitCompletion(t, ctx, sb)
				if c.Status != transport.StatusSuccess || c.Context != uint64(i) || c.Bytes != 8192 || !bytes.Equal(recv[i], msgs[i]) {
					t.Fatalf("receive %d completed %+v", i, c)
				}
			}

			t.Logf("sends done after %v", time.Since(t0))
			// A 1 MiB Write into B's region, then a Read of it back.
			data := alloc(da, 1<<20)
			for i := range data {
				data[i] = byte(i * 31)
			}
			back := make([]byte, 1<<20)
			if err := qa.PostSend(&transport.WorkRequest{Kind: transport.OpWrite, NSGE: 1, SGL: [transport.MaxSGE][]byte{data}, RemoteAddr: region.base, RemoteToken: 1, Context: 100}); err != nil {
				t.Fatal(err)
			}
			if err := qa.PostSend(&transport.WorkRequest{Kind: transport.OpRead, Flags: transport.WRReadFence, NSGE: 1, SGL: [transport.MaxSGE][]byte{back}, RemoteAddr: region.base, RemoteToken: 1, Context: 101}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []uint64{100, 101} {
				if c := waitCompletion(t, ctx, sa); c.Status != transport.StatusSuccess || c.Context != want {
					t.Fatalf("completion %+v, want context %d success", c, want)
				}
				t.Logf("completion %d after %v", want, time.Since(t0))
			}
			t.Logf("B: %+v", qb.Stats())
			t.Logf("links: A %+v B %+v", da.Links()[0].Stats(), db.Links()[0].Stats())
			t.Logf("engines: A %+v B %+v", ea.Stats(), eb.Stats())
			if !bytes.Equal(region.buf, data) || !bytes.Equal(back, data) {
				t.Fatal("write or read data differ")
			}
			st := qa.Stats()
			c, _ := da.Program().Counters()
			t.Logf("A: %+v; A's program dropped %d of its packets", st, c.FaultDropped)
			if drop > 0 && st.Retransmits == 0 {
				t.Fatalf("%.0f%% drop but no retransmission", drop*100)
			}
			if zeroCopy {
				for name, d := range map[string]*Device{"A": da, "B": db} {
					if st := d.Links()[0].Stats(); st.TxZeroCopy == 0 {
						t.Errorf("host %s: zero-copy engine, but no segment went by reference: %+v", name, st)
					}
				}
			}
		})
	}
}

func waitCompletion(t *testing.T, ctx context.Context, c chanSink) transport.Completion {
	t.Helper()
	select {
	case comp := <-c:
		return comp
	case <-ctx.Done():
		t.Fatal("no completion before the deadline")
	}
	return transport.Completion{}
}
