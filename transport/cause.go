package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/xdpndk/xdpndk/transport/wire"
)

// Why a QP failed or disconnected: QP.Cause returns an error that wraps one of these (or,
// for a connection that ended during setup, ErrConnectTimeout, ErrRejected or
// ErrConnectCancelled), with the detail in its text. Test with errors.Is.
var (
	// ErrRetryTimeout: a packet (or a Read probe) went unacknowledged for the retransmission
	// budget (Config.RetryTimeout): the peer or the path is gone.
	ErrRetryTimeout = errors.New("peer did not acknowledge")
	// ErrRNRTimeout: the peer refused a Send with RNR NAKs (no receive posted) for the RNR
	// budget (Config.RNRTimeout).
	ErrRNRTimeout = errors.New("peer posted no receive")
	// ErrKeepAlive: the peer sent nothing for Config.KeepAlive, probes included.
	ErrKeepAlive = errors.New("peer silent")
	// ErrRemoteNak: the peer refused a request with a NAK (access, invalid request, its QP
	// failed); the text names the syndrome.
	ErrRemoteNak = errors.New("peer refused a request")
	// ErrRefused: this side refused what the peer sent (an access outside its rights, a Send
	// larger than the receive, a token it may not invalidate, a malformed request or read
	// response) and aborted the connection; the peer was told with a NAK.
	ErrRefused = errors.New("refused what the peer sent")
	// ErrPeerDisconnected: the peer disconnected gracefully.
	ErrPeerDisconnected = errors.New("peer disconnected")
	// ErrDisconnected: this side disconnected (QP.Disconnect, StartDisconnect).
	ErrDisconnected = errors.New("disconnected by this side")
	// ErrFlushed: the application flushed (QP.Flush) or closed (QP.Close) the QP.
	ErrFlushed = errors.New("flushed by the application")
	// ErrLocal: a request failed a local check when its turn came (WorkRequest.LocalStatus).
	ErrLocal = errors.New("local error")
)

// failure is a part's decision that the connection ends (the QP acts on it: QP.fail): the
// work request with sequence number seq (-1: none named) completes with st, everything
// else outstanding is cancelled, and cause is what Cause reports. The zero failure (no
// cause) is no failure.
type failure struct {
	st    Status
	seq   int64
	cause error
}

// failed reports whether f is a failure.
func (f failure) failed() bool { return f.cause != nil }

// Cause says why the QP failed or disconnected: an error wrapping one of ErrRetryTimeout,
// ErrRNRTimeout, ErrKeepAlive, ErrRemoteNak, ErrRefused, ErrPeerDisconnected,
// ErrDisconnected, ErrFlushed, ErrLocal (or, for an accepted connection that was never
// established, ErrConnectTimeout, ErrRejected or ErrConnectCancelled), with the details in
// its text. The first cause is kept: a QP that timed out and was then flushed reports the
// timeout. It is nil unless State reports QPError or QPDisconnected. Safe from any
// goroutine.
func (q *QP) Cause() error {
	switch q.State() {
	case QPError, QPDisconnected:
	default:
		return nil
	}
	if p := q.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// setCause records why the QP is about to fail or disconnect, unless a cause is recorded
// already. Engine goroutine, before the state changes (so that a reader that sees the
// state sees the cause).
func (q *QP) setCause(err error) {
	if err != nil && q.cause.Load() == nil {
		q.cause.Store(&err)
	}
}

// The causes' texts. They allocate: they run once per failed QP, never per packet.

func retryTimeoutError(d int64) error {
	return fmt.Errorf("%w for %v", ErrRetryTimeout, time.Duration(d))
}

func rnrTimeoutError(d int64) error {
	return fmt.Errorf("%w for %v (RNR NAKs)", ErrRNRTimeout, time.Duration(d))
}

func keepAliveError(d int64) error {
	return fmt.Errorf("%w for %v", ErrKeepAlive, time.Duration(d))
}

func remoteNak(syn wire.Syndrome) error { return fmt.Errorf("%w: %v", ErrRemoteNak, syn) }

// refusedPeer is ErrRefused for what (answered with a NAK of syn; SynAck: not answered).
func refusedPeer(syn wire.Syndrome, what string) error {
	if syn == wire.SynAck {
		return fmt.Errorf("%w: %s", ErrRefused, what)
	}
	return fmt.Errorf("%w: %s (answered %v)", ErrRefused, what, syn)
}

func localError(st Status) error {
	return fmt.Errorf("%w: a request failed a local check (%v)", ErrLocal, st)
}
