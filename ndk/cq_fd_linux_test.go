package ndk

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// readable reports whether fd polls readable within ms milliseconds.
func readable(t *testing.T, fd, ms int) bool {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return n == 1 && pfd[0].Revents&unix.POLLIN != 0
	}
}

// CQ.FD: readable when an armed notification fires (with or without a NotifyFunc) and when
// a connection event is queued; Poll clears it; Close closes it.
func TestCQFD(t *testing.T) {
	a := cqAdapter(t)
	cq, _ := a.NewCQ(8, nil) // no callback: the FD is the notification
	fd, err := cq.FD()
	if err != nil {
		t.Fatal(err)
	}
	if fd2, err := cq.FD(); fd2 != fd || err != nil {
		t.Fatalf("second FD: %d, %v; want %d", fd2, err, fd)
	}
	var r [4]Result
	if readable(t, fd, 20) {
		t.Fatal("readable before anything happened")
	}
	push(cq, StatusSuccess, false)
	if readable(t, fd, 20) {
		t.Fatal("readable for a completion while not armed")
	}
	cq.Arm(NotifyAny) // a completion arrived since the last notification and is queued: at once
	if !readable(t, fd, 5000) {
		t.Fatal("not readable after Arm with a completion queued")
	}
	if n, err := cq.Poll(r[:]); n != 1 || err != nil {
		t.Fatalf("Poll: %d, %v", n, err)
	}
	if readable(t, fd, 0) {
		t.Fatal("still readable after Poll")
	}
	cq.Arm(NotifyAny) // nothing queued: waits
	if readable(t, fd, 20) {
		t.Fatal("readable after Arm on an empty CQ")
	}
	push(cq, StatusSuccess, false)
	if !readable(t, fd, 5000) {
		t.Fatal("not readable after an armed completion")
	}
	push(cq, StatusSuccess, false) // one-shot: the FD stays readable, nothing more is written
	if n, err := cq.Poll(r[:]); n != 2 || err != nil {
		t.Fatalf("Poll: %d, %v", n, err)
	}
	if readable(t, fd, 20) {
		t.Fatal("readable after Poll took both")
	}

	// A connection event makes it readable without an Arm.
	pd, _ := a.NewPD()
	qp, err := pd.NewQP(QPConfig{ReceiveCQ: cq, InitiatorCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	cq.connectionEnded(qp, StatusConnectionAborted, nil)
	cq.connectionEnded(qp, StatusConnectionAborted, nil) // once per QP
	if !readable(t, fd, 5000) {
		t.Fatal("not readable after a connection event")
	}
	var ce *ConnectionEnded
	if n, err := cq.Poll(r[:]); n != 0 || !errors.As(err, &ce) || ce.QP != qp {
		t.Fatalf("Poll: %d, %v", n, err)
	}
	if n, err := cq.Poll(r[:]); n != 0 || err != nil {
		t.Fatalf("Poll after the event: %d, %v", n, err)
	}
	if readable(t, fd, 20) {
		t.Fatal("readable after Poll took the event")
	}

	// With a NotifyFunc both happen.
	fn, notes := notes()
	cq2, _ := a.NewCQ(8, fn)
	fd2, err := cq2.FD()
	if err != nil {
		t.Fatal(err)
	}
	cq2.Arm(NotifySolicited)
	push(cq2, StatusSuccess, true)
	expectNote(t, notes, StatusSuccess)
	if !readable(t, fd2, 5000) {
		t.Fatal("not readable after an armed solicited receive")
	}
	if err := cq2.Close(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := cq2.FD(); !errors.Is(err, StatusInvalidDeviceState) {
		t.Fatalf("FD after Close: %v", err)
	}
}

// clear reads the FD only when a kick finished since the last clear, and a read of the FD
// by the application (which FD's doc allows) costs the next clear one empty read, not one
// per Poll from then on.
func TestCQFDClearReadsOncePerKick(t *testing.T) {
	a := cqAdapter(t)
	cq, _ := a.NewCQ(8, nil)
	fd, err := cq.FD()
	if err != nil {
		t.Fatal(err)
	}
	f := &cq.fd
	f.kick()
	if !readable(t, fd, 0) {
		t.Fatal("not readable after a kick")
	}
	f.clear()
	if readable(t, fd, 0) {
		t.Fatal("readable after the clear")
	}
	f.kick()
	var buf [8]byte
	if _, err := unix.Read(fd, buf[:]); err != nil { // the application clears it itself
		t.Fatal(err)
	}
	seen := f.seen
	f.clear() // reads nothing, catches up
	if f.seen == seen || f.seen != f.kicks.Load() {
		t.Fatalf("clear did not catch up with the kicks: seen %d, kicks %d", f.seen, f.kicks.Load())
	}
	f.clear() // nothing new: no read
	if f.seen != f.kicks.Load() || readable(t, fd, 0) {
		t.Fatal("state changed without a kick")
	}
}
