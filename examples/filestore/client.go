package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

const (
	// chunkSize is the most bytes one Write or Read of a transfer moves.
	chunkSize = 256 << 10
	// connectTimeout bounds Connect and CompleteConnect (Connect retries until then, so a
	// client may start a moment before its server).
	connectTimeout = 10 * time.Second
	// replyTimeout bounds the wait for a reply: the server checks a CRC at most before it
	// answers.
	replyTimeout = 30 * time.Second
	// clientHeap is a client adapter's UMEM heap: the chunks and the control buffers.
	clientHeap = readsInFlight*chunkSize + 1<<20
)

// client is one connection to a server: a QP with one CQ, two control buffers (the
// request sent, the reply received) and readsInFlight chunk buffers for the data.
type client struct {
	a      *ndk.Adapter
	pd     *ndk.PD
	cq     *ndk.CQ
	qp     *ndk.QP
	conn   *ndk.Connector
	ctl    *region // [0, msgSize): the reply's receive buffer; [msgSize, 2*msgSize): the request
	data   *region
	chunks [readsInFlight]chunk

	sending, receiving bool    // the request's Send and the reply's Receive are outstanding
	inflight           int     // chunks with a Write or Read outstanding
	reply              message // the reply, once received
	replyErr           error   // why the reply did not parse
	res                [16]ndk.Result
	have, next         int // results in res, and the next one to handle
}

// chunk is one data buffer: a Write or Read in flight, and the request context of its
// verb (a pointer in an interface costs no allocation).
type chunk struct {
	buf []byte
	sge [1]ndk.SGE
	n   int // bytes of the verb in flight
}

// refusedError is a server's refusal of a request (a reply with a code).
type refusedError struct {
	req  msgType
	name string
	code code
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("the server refused %v %q: %v", e.req, e.name, e.code)
}

// dial creates the client's objects on a and connects to the server at addr.
func dial(ctx context.Context, a *ndk.Adapter, addr netip.AddrPort) (*client, error) {
	c := &client{a: a}
	if err := c.setup(); err != nil {
		c.close()
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	// ird 0: the server reads nothing here; ord: the Reads this client keeps in flight.
	if err := c.conn.Connect(cctx, c.qp, addr, 0, readsInFlight, nil); err != nil {
		if reason := rejectReason(c.conn); reason != "" {
			err = fmt.Errorf("%w (the server says: %s)", err, reason)
		}
		c.close()
		return nil, fmt.Errorf("connect to %v: %w", addr, err)
	}
	if err := c.conn.CompleteConnect(cctx, nil); err != nil {
		c.close()
		return nil, fmt.Errorf("connect to %v: %w", addr, err)
	}
	return c, nil
}

// setup creates the PD, CQ, QP, buffers and connector.
func (c *client) setup() error {
	var err error
	if c.pd, err = c.a.NewPD(); err != nil {
		return fmt.Errorf("create PD: %w", err)
	}
	depth := readsInFlight + 2 // the chunks, the request, and a spare
	if c.cq, err = c.a.NewCQ(2*depth, nil); err != nil {
		return fmt.Errorf("create CQ: %w", err)
	}
	qc := ndk.QPConfig{ReceiveCQ: c.cq, InitiatorCQ: c.cq, ReceiveQueueDepth: 1, InitiatorQueueDepth: depth}
	if c.qp, err = c.pd.NewQP(qc); err != nil {
		return fmt.Errorf("create QP: %w", err)
	}
	if c.ctl, err = newRegion(c.a, c.pd, 2*msgSize, ndk.MRAllowLocalWrite); err != nil {
		return fmt.Errorf("control buffers: %w", err)
	}
	// Local write: Reads land in the chunks.
	if c.data, err = newRegion(c.a, c.pd, readsInFlight*chunkSize, ndk.MRAllowLocalWrite); err != nil {
		return fmt.Errorf("data buffers: %w", err)
	}
	for i := range c.chunks {
		c.chunks[i].buf = c.data.buf[i*chunkSize : (i+1)*chunkSize]
	}
	if c.conn, err = c.a.NewConnector(); err != nil {
		return fmt.Errorf("create connector: %w", err)
	}
	return nil
}

// rejectReason returns the private data of a server's Reject, made printable.
func rejectReason(conn *ndk.Connector) string {
	var b [128]byte
	_, _, n, err := conn.GetConnectionData(b[:])
	if err != nil && !errors.Is(err, ndk.StatusBufferTooSmall) {
		return ""
	}
	out := make([]byte, 0, min(n, len(b)))
	for _, ch := range b[:min(n, len(b))] {
		if ch < ' ' || ch > '~' {
			ch = '?'
		}
		out = append(out, ch)
	}
	return string(out)
}

// close disconnects (the server sees its CQ.Wait return *ndk.ConnectionEnded) and frees
// the client's objects. The adapter is the caller's.
func (c *client) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if c.conn != nil {
		_ = c.conn.Close(ctx) // disconnects a connection still up
	}
	if c.qp != nil {
		_ = c.qp.Close(ctx)
	}
	for _, r := range []*region{c.data, c.ctl} {
		if r != nil {
			_ = r.close(ctx)
		}
	}
	if c.cq != nil {
		_ = c.cq.Close(ctx)
	}
}

// step takes the next completion (CQ.Wait when none is at hand). A control completion
// updates the client's state (a reply is parsed); a data completion returns its chunk.
// A failed completion, the end of the connection or of ctx is an error.
func (c *client) step(ctx context.Context) (*chunk, error) {
	for c.next == c.have {
		n, err := c.cq.Wait(ctx, c.res[:])
		var ended *ndk.ConnectionEnded
		switch {
		case errors.As(err, &ended):
			return nil, fmt.Errorf("the server ended the connection: %w", err)
		case err != nil:
			return nil, err
		}
		c.have, c.next = n, 0
	}
	r := c.res[c.next]
	c.next++
	if r.Status != ndk.StatusSuccess {
		return nil, fmt.Errorf("%v failed: %w", describe(r.RequestContext), r.Status)
	}
	switch v := r.RequestContext.(type) {
	case *chunk:
		c.inflight--
		return v, nil
	case verb:
		switch v {
		case verbSend:
			c.sending = false
		case verbReceive:
			c.receiving = false
			c.reply, c.replyErr = parseMessage(c.ctl.buf[:min(r.BytesTransferred, msgSize+1)])
		}
	}
	return nil, nil
}

// describe names a request context in an error.
func describe(rc any) string {
	if _, ok := rc.(*chunk); ok {
		return "a chunk's Write or Read"
	}
	return fmt.Sprint(rc)
}

// request posts the receive for the reply, then the Send of m. It does not wait.
func (c *client) request(m message) error {
	if c.sending || c.receiving {
		return errors.New("a request is outstanding")
	}
	if _, err := m.encode(c.ctl.buf[msgSize:]); err != nil {
		return err
	}
	if err := c.qp.Receive(verbReceive, []ndk.SGE{c.ctl.sge(0, msgSize)}); err != nil {
		return fmt.Errorf("post receive: %w", err)
	}
	c.receiving = true
	if err := c.qp.Send(verbSend, []ndk.SGE{c.ctl.sge(msgSize, msgSize)}, 0); err != nil {
		return fmt.Errorf("post %v: %w", m.typ, err)
	}
	c.sending = true
	return nil
}

// await waits for the reply to request req about name, its Send's completion and those
// of the chunks still in flight: an error if they do not come within replyTimeout, or the
// reply does not parse, answers something else, or refuses.
func (c *client) await(ctx context.Context, req msgType, name string) (message, error) {
	ctx, cancel := context.WithTimeout(ctx, replyTimeout)
	defer cancel()
	for c.sending || c.receiving || c.inflight > 0 {
		if _, err := c.step(ctx); err != nil {
			return message{}, fmt.Errorf("%v %q: %w", req, name, err)
		}
	}
	m := c.reply
	switch {
	case c.replyErr != nil:
		return message{}, fmt.Errorf("%v %q: the server's reply: %w", req, name, c.replyErr)
	case m.typ != req|typeReply:
		return message{}, fmt.Errorf("%v %q: the server answered with a %v", req, name, m.typ)
	case m.code != codeOK:
		return message{}, &refusedError{req: req, name: name, code: m.code}
	}
	return m, nil
}

// call is request and await.
func (c *client) call(ctx context.Context, m message) (message, error) {
	if err := c.request(m); err != nil {
		return message{}, err
	}
	return c.await(ctx, m.typ, m.name)
}

// transferStats describes a finished transfer.
type transferStats struct {
	size    uint64
	crc     uint32
	elapsed time.Duration // from the first Write or Read to the end of the data (COMMIT's reply, the last Read)
}

// String is the line put and get print.
func (s transferStats) String() string {
	rate := "-"
	if sec := s.elapsed.Seconds(); sec > 0 && s.size > 0 {
		rate = fmt.Sprintf("%.1f MB/s, %.2f Gbit/s", float64(s.size)/sec/1e6, float64(s.size)*8/sec/1e9)
	}
	return fmt.Sprintf("%d bytes in %v (%s), crc32 %08x", s.size, s.elapsed.Round(time.Microsecond), rate, s.crc)
}

// put stores the local file under name on the server: PUT, the Writes, COMMIT.
func put(ctx context.Context, a *ndk.Adapter, server netip.AddrPort, local, name string) (transferStats, error) {
	if err := checkName(name); err != nil {
		return transferStats{}, err
	}
	f, err := os.Open(local)
	if err != nil {
		return transferStats{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return transferStats{}, err
	}
	if !fi.Mode().IsRegular() {
		return transferStats{}, fmt.Errorf("%s is not a regular file", local)
	}
	size := uint64(fi.Size())
	if size > maxFileSize {
		return transferStats{}, fmt.Errorf("%s: %d bytes, over the protocol's limit %d", local, size, uint64(maxFileSize))
	}
	c, err := dial(ctx, a, server)
	if err != nil {
		return transferStats{}, err
	}
	defer c.close()
	rep, err := c.call(ctx, message{typ: typePut, name: name, size: size})
	if err != nil {
		return transferStats{}, err
	}
	if rep.size != size { // parseMessage checked that the window is rep.size bytes
		return transferStats{}, fmt.Errorf("PUT %q: the server opened a window of %d bytes for %d", name, rep.size, size)
	}
	start := time.Now()
	crc, err := c.writeAll(ctx, f, local, rep.buf, size)
	if err != nil {
		return transferStats{}, fmt.Errorf("PUT %q: %w", name, err)
	}
	// The COMMIT follows the last Write on the same QP: when its receive completes at the
	// server, every Write's bytes are in the server's memory.
	if err := c.request(message{typ: typeCommit, name: name, size: size, crc: crc}); err != nil {
		return transferStats{}, err
	}
	if _, err := c.await(ctx, typeCommit, name); err != nil {
		return transferStats{}, err
	}
	return transferStats{size: size, crc: crc, elapsed: time.Since(start)}, nil
}

// writeAll Writes the file's size bytes into the server's window w, readsInFlight chunks
// in flight at a time, and returns their CRC. It returns once every Write is posted, with
// the last ones still in flight: the COMMIT is posted behind them.
func (c *client) writeAll(ctx context.Context, f io.Reader, local string, w ndk.RemoteBuffer, size uint64) (uint32, error) {
	var crc uint32
	var off uint64
	posted := 0
	for off < size {
		// A QP's requests complete in posting order: with fewer than len(c.chunks) in
		// flight, the next chunk of the ring is free.
		for c.inflight < len(c.chunks) && off < size {
			ch := &c.chunks[posted%len(c.chunks)]
			ch.n = int(min(chunkSize, size-off))
			b := ch.buf[:ch.n]
			if _, err := io.ReadFull(f, b); err != nil {
				return 0, fmt.Errorf("read %s: %w (did it shrink?)", local, err)
			}
			crc = crc32.Update(crc, crc32.IEEETable, b)
			ch.sge[0] = c.data.mr.SGE(b)
			if err := c.qp.Write(ch, ch.sge[:], w.Addr+off, w.Token, 0); err != nil {
				return 0, fmt.Errorf("post Write: %w", err)
			}
			off += uint64(ch.n)
			posted++
			c.inflight++
		}
		if off == size {
			break
		}
		if _, err := c.step(ctx); err != nil {
			return 0, err
		}
	}
	return crc, nil
}

// get fetches name from the server into the local file: GET, the Reads, DONE. The data
// goes to a temporary file beside local, renamed to it once the CRC matched, so a failed
// get leaves no partial file and an existing one untouched.
func get(ctx context.Context, a *ndk.Adapter, server netip.AddrPort, name, local string) (st transferStats, err error) {
	if err := checkName(name); err != nil {
		return transferStats{}, err
	}
	c, err := dial(ctx, a, server)
	if err != nil {
		return transferStats{}, err
	}
	defer c.close()
	rep, err := c.call(ctx, message{typ: typeGet, name: name})
	if err != nil {
		return transferStats{}, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".filestore-*")
	if err != nil {
		return transferStats{}, err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	start := time.Now()
	crc, err := c.readAll(ctx, tmp, rep.buf, rep.size)
	if err != nil {
		return transferStats{}, fmt.Errorf("GET %q: %w", name, err)
	}
	st = transferStats{size: rep.size, crc: crc, elapsed: time.Since(start)}
	if _, err := c.call(ctx, message{typ: typeDone, name: name}); err != nil {
		return transferStats{}, err
	}
	if crc != rep.crc {
		return transferStats{}, fmt.Errorf("GET %q: the data read has CRC %08x, the server stored %08x", name, crc, rep.crc)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return transferStats{}, err
	}
	if err := tmp.Close(); err != nil {
		return transferStats{}, err
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return transferStats{}, err
	}
	return st, nil
}

// readAll Reads size bytes of the server's window w into the file, readsInFlight chunks in
// flight at a time, and returns their CRC. A QP's requests complete in posting order, so
// each completion is the oldest chunk, written out (and summed) in order.
func (c *client) readAll(ctx context.Context, f io.Writer, w ndk.RemoteBuffer, size uint64) (uint32, error) {
	var crc uint32
	var off uint64
	posted, done := 0, 0
	for done < posted || off < size {
		for c.inflight < len(c.chunks) && off < size {
			ch := &c.chunks[posted%len(c.chunks)]
			ch.n = int(min(chunkSize, size-off))
			ch.sge[0] = c.data.mr.SGE(ch.buf[:ch.n])
			if err := c.qp.Read(ch, ch.sge[:], w.Addr+off, w.Token, 0); err != nil {
				return 0, fmt.Errorf("post Read: %w", err)
			}
			off += uint64(ch.n)
			posted++
			c.inflight++
		}
		ch, err := c.step(ctx)
		if err != nil {
			return 0, err
		}
		if ch == nil {
			continue
		}
		if ch != &c.chunks[done%len(c.chunks)] {
			return 0, errors.New("a Read completed out of posting order")
		}
		b := ch.buf[:ch.n]
		crc = crc32.Update(crc, crc32.IEEETable, b)
		if _, err := f.Write(b); err != nil {
			return 0, err
		}
		done++
	}
	return crc, nil
}
