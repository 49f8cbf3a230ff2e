package xsk

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// fakeBind answers each mode's bind with the error in answers (nil: a socket), and records
// the modes tried.
func fakeBind(answers map[SocketMode]error, tried *[]SocketMode) func(SocketMode) (*Socket, error) {
	return func(m SocketMode) (*Socket, error) {
		*tried = append(*tried, m)
		if err := answers[m]; err != nil {
			return nil, fmt.Errorf("bind: %w", err)
		}
		return &Socket{fd: -1, mode: m}, nil
	}
}

var (
	zcSG   = SocketMode{ZeroCopy: true, MultiBuffer: true, NeedWakeup: true}
	zc     = SocketMode{ZeroCopy: true, NeedWakeup: true}
	copySG = SocketMode{MultiBuffer: true, NeedWakeup: true}
	cp     = SocketMode{NeedWakeup: true}
	auto   = []SocketMode{zcSG, zc, copySG, cp}
)

// Zero-copy refused for itself and copy mode busy: the error is about the busy queue (ErrBusy,
// EBUSY), not about zero-copy, which stays a note.
func TestBindModesBusyAfterRefusal(t *testing.T) {
	var tried []SocketMode
	cfg := SocketConfig{IfIndex: 7, Queue: 3}
	_, err := bindModes(cfg, auto, fakeBind(map[SocketMode]error{
		zcSG: syscall.EOPNOTSUPP, zc: syscall.EOPNOTSUPP, copySG: syscall.EBUSY, cp: syscall.EBUSY,
	}, &tried))
	if !errors.Is(err, ErrBusy) || !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("error %v: want ErrBusy and EBUSY", err)
	}
	if errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("error %v matches EOPNOTSUPP: the zero-copy refusal is a note, not the cause", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "zerocopy") || strings.Contains(msg, "not supported") || !strings.Contains(msg, "ifindex 7 queue 3") {
		t.Errorf("message %q: want the queue, and nothing of zero-copy", msg)
	}
	var be *BindError
	if !errors.As(err, &be) || len(be.Refused) != 2 {
		t.Fatalf("error %#v: want a *BindError with the 2 zero-copy refusals as notes", err)
	}
	if len(tried) != 4 {
		t.Errorf("tried %v, want every mode", tried)
	}
}

// A queue busy in every mode (the kernel checks the queue first, so zero-copy is busy too on a
// driver without it): ErrBusy, and no mode in the message.
func TestBindModesAllBusy(t *testing.T) {
	var tried []SocketMode
	_, err := bindModes(SocketConfig{IfIndex: 2}, auto, fakeBind(map[SocketMode]error{
		zcSG: syscall.EBUSY, zc: syscall.EBUSY, copySG: syscall.EBUSY, cp: syscall.EBUSY,
	}, &tried))
	if !errors.Is(err, ErrBusy) || !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("error %v: want ErrBusy and EBUSY", err)
	}
	if msg := err.Error(); strings.Contains(msg, "zerocopy") || strings.Contains(msg, "copy") {
		t.Errorf("message %q names a bind mode", msg)
	}
}

// A driver that answers EBUSY for zero-copy alone still gets copy mode; the refusal is a
// fallback note.
func TestBindModesZeroCopyBusyCopyWorks(t *testing.T) {
	var tried []SocketMode
	s, err := bindModes(SocketConfig{IfIndex: 2}, auto, fakeBind(map[SocketMode]error{
		zcSG: syscall.EBUSY, zc: syscall.EBUSY,
	}, &tried))
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode() != copySG || len(s.Fallbacks()) != 2 {
		t.Fatalf("mode %v, fallbacks %v: want copy+sg after two notes", s.Mode(), s.Fallbacks())
	}
}

// Without EBUSY the cause is the last mode's failure, and the earlier refusals are named as
// notes; a failure that is no refusal of the mode ends the attempts.
func TestBindModesOtherFailures(t *testing.T) {
	var tried []SocketMode
	_, err := bindModes(SocketConfig{IfIndex: 2}, auto, fakeBind(map[SocketMode]error{
		zcSG: syscall.EOPNOTSUPP, zc: syscall.EOPNOTSUPP, copySG: syscall.EINVAL, cp: syscall.EINVAL,
	}, &tried))
	if errors.Is(err, ErrBusy) || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("error %v: want EINVAL, not busy", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "refused before") || !strings.Contains(msg, "zerocopy") {
		t.Errorf("message %q: the refusals before should be named", msg)
	}

	tried = nil
	_, err = bindModes(SocketConfig{IfIndex: 2}, auto, fakeBind(map[SocketMode]error{
		zcSG: syscall.EOPNOTSUPP, zc: syscall.ENOMEM,
	}, &tried))
	if !errors.Is(err, syscall.ENOMEM) || len(tried) != 2 {
		t.Fatalf("error %v after %v: want ENOMEM, and no attempt after it", err, tried)
	}
}
