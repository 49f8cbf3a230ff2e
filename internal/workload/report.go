package workload

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

// Report is what one Initiator.Run did and saw.
type Report struct {
	// Elapsed is Run's duration.
	Elapsed time.Duration
	// Started is the operations started.
	Started uint64
	// Completions is the work requests and receives that completed (any status), data and
	// control connections.
	Completions uint64
	// Operations that finished successfully, by kind: Sends (checked by the target),
	// SendInvalidates (a window's release), Writes and WindowWrites (read back and
	// compared), Reads (checked), Releases (a window's release by message).
	Sends, SendInvalidates, Writes, WindowWrites, Reads, Releases uint64
	// Bytes is the payload of the data requests that completed successfully (read-backs
	// included).
	Bytes uint64
	// Statuses tallies every completion on the initiator's QPs by NTSTATUS.
	Statuses map[ndk.Status]uint64
	// FirstFailure describes the first data request that completed in error.
	FirstFailure string
	// Mismatches counts wrong bytes found by the initiator (after a Read or a read-back);
	// FirstMismatch describes the first.
	Mismatches    uint64
	FirstMismatch string
	// Unexpected counts completions that matched no request in flight, had the wrong type,
	// and control messages that broke the protocol; FirstUnexpected describes the first.
	Unexpected      uint64
	FirstUnexpected string
	// PostErrors counts posts refused inline; FirstPostError is the first.
	PostErrors     uint64
	FirstPostError error
	// Outstanding is the requests still in flight when Run returned; InFlight describes
	// (up to 16 of) them.
	Outstanding int
	InFlight    []string
	// Failed is the connections (control included) that saw a completion in error.
	Failed int
	// ControlReceives is the receives posted on the control connection when Run returned.
	ControlReceives int
	// Sent and SentBytes are, per data connection, the data messages posted and their bytes
	// since Dial.
	Sent, SentBytes []uint64
	// Receipts are the target's receipts per data connection (nil: none arrived).
	Receipts []*Receipt
	// Retransmits, Timeouts and RNRNaks sum the data QPs' transport counters
	// (retransmitted packets, retransmission timer expiries, receiver-not-ready refusals)
	// since Dial. Credits keep a data message from being sent before the target posted a
	// receive for it, so RNR refusals are rare and never exhaust the retries (the engine
	// may still refuse a Send whose receive it has not taken from the posting queue yet:
	// TestReceivePostedBeforeSendArrives).
	Retransmits, Timeouts, RNRNaks uint64
	// FirstFailures is, per data connection, the status of its first completion in error
	// (StatusSuccess: none). A connection's requests complete in posting order, so this is
	// the failure that ended it; the requests behind it complete cancelled.
	FirstFailures []ndk.Status
	// FirstFailureAt is when Run took the first data request that completed in error (the one
	// FirstFailure describes; zero: none), LastDataCompletion when it took the last
	// completion of a data request (zero: none).
	FirstFailureAt, LastDataCompletion time.Time
	// LongestGap is the longest time Run went without taking a completion while requests were
	// in flight (while it started requests and while it drained them; the wait for receipts
	// after that is not counted), and GapEnd is when that gap ended. A stall of the path or
	// of the peer shows here.
	LongestGap time.Duration
	GapEnd     time.Time
}

// Receipt is what the target says it received on a data connection since it connected.
type Receipt struct {
	Received, Bytes     uint64
	Mismatches          uint64 // data messages with a wrong length or byte
	RemoteInvalidations uint64 // windows invalidated by SendAndInvalidate
	FirstBadMessage     uint64 // the first mismatched message's number + 1 (0: none)
	FirstBadOffset      uint32 // and the offset of its first wrong byte
}

// Err returns nil if every request completed successfully, every byte checked out on both
// sides, nothing was left in flight and the target received exactly what was sent;
// otherwise an error listing what went wrong.
func (r *Report) Err() error {
	var errs []error
	for st, n := range r.Statuses {
		if st != ndk.StatusSuccess {
			errs = append(errs, fmt.Errorf("%d completions with %v", n, st))
		}
	}
	if r.FirstFailure != "" {
		errs = append(errs, fmt.Errorf("first failure: %s", r.FirstFailure))
	}
	if r.Mismatches > 0 {
		errs = append(errs, fmt.Errorf("%d mismatches, first: %s", r.Mismatches, r.FirstMismatch))
	}
	if r.Unexpected > 0 {
		errs = append(errs, fmt.Errorf("%d unexpected completions or messages, first: %s", r.Unexpected, r.FirstUnexpected))
	}
	if r.PostErrors > 0 {
		errs = append(errs, fmt.Errorf("%d posts refused, first: %w", r.PostErrors, r.FirstPostError))
	}
	if r.Outstanding > 0 {
		errs = append(errs, fmt.Errorf("%d requests still in flight: %s", r.Outstanding, strings.Join(r.InFlight, "; ")))
	}
	if r.Failed > 0 {
		errs = append(errs, fmt.Errorf("%d connections failed", r.Failed))
	}
	for i, rc := range r.Receipts {
		switch {
		case rc == nil:
			errs = append(errs, fmt.Errorf("connection %d: no receipt from the target", i))
		case rc.Mismatches > 0:
			errs = append(errs, fmt.Errorf("connection %d: target found %d bad messages, first message %d byte %d",
				i, rc.Mismatches, rc.FirstBadMessage-1, rc.FirstBadOffset))
		case rc.Received != r.Sent[i] || rc.Bytes != r.SentBytes[i]:
			errs = append(errs, fmt.Errorf("connection %d: target received %d messages, %d bytes; sent %d, %d bytes",
				i, rc.Received, rc.Bytes, r.Sent[i], r.SentBytes[i]))
		}
	}
	return errors.Join(errs...)
}

// String summarises the report on one line.
func (r *Report) String() string {
	var st []string
	for s, n := range r.Statuses {
		st = append(st, fmt.Sprintf("%s=%d", s.Name(), n))
	}
	sort.Strings(st)
	return fmt.Sprintf("%v: %d ops (%d sends, %d send-invalidates, %d writes, %d window writes, %d reads, %d releases), "+
		"%d completions, %.1f MB, %d retransmits, %d RTOs, %d RNR NAKs, statuses [%s], %d mismatches, %d unexpected, %d in flight, "+
		"longest completion gap %v",
		r.Elapsed.Round(time.Millisecond), r.Started, r.Sends, r.SendInvalidates, r.Writes, r.WindowWrites, r.Reads,
		r.Releases, r.Completions, float64(r.Bytes)/1e6, r.Retransmits, r.Timeouts, r.RNRNaks, strings.Join(st, " "),
		r.Mismatches, r.Unexpected, r.Outstanding, r.LongestGap.Round(time.Millisecond))
}
