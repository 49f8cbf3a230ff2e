// Package proto is what ndkpeer's client and server say to each other: the private data of
// the connection (the client's Connect carries a Request, the server's Accept a Reply, its
// Reject a Refusal; NDKPI NdkConnect, NdkAccept, NdkReject, NdkGetConnectionData) and the
// small messages of the tour, which travel as Sends.
//
//	client                                         server (ndkpeer serve)
//	NdkConnect(private = Request) ───────────────► validate, allocate the test buffer,
//	                                               QP, CQ, receives
//	NdkGetConnectionData ◄──────────────────────── NdkAccept(private = Reply: buffer
//	                                               address, length, token, server mode)
//	                    or ◄────────────────────── NdkReject(private = Refusal: code, reason)
//
// With --cpu-util or -b a run opens one more connection, of KindControl, over which the
// client and the server exchange CtlMsg Sends at the edges of the measured window (and
// once per interval of a -D run):
//
//	client                                         server
//	CtlStart (size, depth, rate, reverse?) ──────► note the CPU time (getrusage); with -b,
//	                                               start Writes/Reads/Sends towards the client
//	                    ◄────────────────────────── CtlCounters (all zero)
//	CtlSample ───────────────────────────────────► CtlCounters: CPU and operations so far
//	CtlStop ─────────────────────────────────────► stop the server's direction, drain it
//	                    ◄────────────────────────── CtlCounters at the stop
//
// Every encoding is little-endian, starts with Magic and a version, and fits in the 196
// bytes of private data the transport carries (wire.MaxPrivateData). Parsers check the
// length, the magic, the version and every field's range before they return a value, and
// never panic on any input (FuzzParse).
//
// # Versions
//
// Version 1 is the first protocol: a Request of 32 bytes, a Reply, a Refusal, TourMsg.
// Version 2 adds the Request's flags (FlagEvents, FlagBidirectional, FlagCPU), the depth
// and the client's buffer (for -b), KindControl and CtlMsg. A message is encoded in the
// lowest version that carries it (Request.Append: version 1 unless a version 2 field is
// set), so a run that uses nothing new still speaks version 1 and works with a server of
// version 1; the server answers in the version of the request. A parser takes every
// version from MinVersion to Version and fails with ErrVersion on any other; a server of
// version 1 refuses a version 2 request with RefuseVersion, and the client then says
// which options need a newer server.
package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Magic starts every message: "NDKP".
var Magic = [4]byte{'N', 'D', 'K', 'P'}

// Version is the newest protocol version this package speaks, MinVersion the oldest. A
// server refuses a Request of a version outside [MinVersion, Version] with RefuseVersion.
const (
	Version    = 2
	MinVersion = 1
)

// MaxPrivateData is the most private data a connection carries (NDK's 196 bytes,
// wire.MaxPrivateData).
const MaxPrivateData = 196

// ErrMalformed is wrapped by every parse error.
var ErrMalformed = errors.New("ndkpeer protocol: malformed message")

// Kind is the test a connection runs.
type Kind uint8

// The test kinds.
const (
	KindSendLat  Kind = 1 // Send/Receive ping-pong: the server echoes every message
	KindWriteLat Kind = 2 // one Write at a time into the server's buffer
	KindReadLat  Kind = 3 // one Read at a time from the server's buffer
	KindSendBW   Kind = 4 // pipelined Sends: the server reposts its receives
	KindWriteBW  Kind = 5 // pipelined Writes into the server's buffer
	KindReadBW   Kind = 6 // pipelined Reads from the server's buffer
	KindTour     Kind = 7 // the verbs tour: TourMsg commands over Send/Receive
	KindControl  Kind = 8 // a run's control connection (version 2): CtlMsg over Send/Receive

	// MaxKind is the largest kind.
	MaxKind = KindControl
)

var kindNames = map[Kind]string{
	KindSendLat: "send-lat", KindWriteLat: "write-lat", KindReadLat: "read-lat",
	KindSendBW: "send-bw", KindWriteBW: "write-bw", KindReadBW: "read-bw", KindTour: "tour",
	KindControl: "control",
}

// String returns the command name of the kind ("send-lat"), or "kind(N)".
func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { _, ok := kindNames[k]; return ok }

// KindOf returns the kind named by a command ("write-bw").
func KindOf(name string) (Kind, bool) {
	for k, n := range kindNames {
		if n == name {
			return k, true
		}
	}
	return 0, false
}

// Latency reports whether the kind is a latency test (one operation at a time).
func (k Kind) Latency() bool { return k == KindSendLat || k == KindWriteLat || k == KindReadLat }

// Bandwidth reports whether the kind is a bandwidth test (operations pipelined).
func (k Kind) Bandwidth() bool { return k == KindSendBW || k == KindWriteBW || k == KindReadBW }

// Op is the verb a test measures: "Send", "Write" or "Read" (the tour: "tour"; the control
// connection: "control").
func (k Kind) Op() string {
	switch k {
	case KindSendLat, KindSendBW:
		return "Send"
	case KindWriteLat, KindWriteBW:
		return "Write"
	case KindReadLat, KindReadBW:
		return "Read"
	case KindControl:
		return "control"
	}
	return "tour"
}

// Limits a Request must respect.
const (
	// MaxSize is the largest message a Request may ask for (the transport's limit is 2 GiB;
	// a server's own limit, ndkpeer serve --max-size, is usually lower).
	MaxSize = 1 << 30
	// MaxInline is the largest inline size (the adapter's MaxInlineDataSize).
	MaxInline = 4096
	// MaxQPs is the most QPs one client run opens.
	MaxQPs = 64
	// MaxRecvDepth is the most receives a Request may ask the server to keep posted.
	MaxRecvDepth = 4096
	// MaxDepth is the most operations a side keeps outstanding per QP (Request.Depth,
	// CtlMsg.Depth).
	MaxDepth = 4096
)

// Flags are a version 2 Request's options.
type Flags uint8

// The request flags.
const (
	// FlagEvents: the client waits for completions on notifications (-e); the server's
	// loop then sleeps as soon as a round finds nothing instead of polling on.
	FlagEvents Flags = 1 << iota
	// FlagBidirectional: the server runs the same test towards the client (-b) when the
	// control connection's CtlStart says so; it sizes the QP for Depth operations and, for
	// Writes and Reads, targets the client's buffer (BufAddr, BufLen, Token).
	FlagBidirectional
	// FlagCPU: the client asks for the server's CPU time (--cpu-util).
	FlagCPU

	flagsKnown = FlagEvents | FlagBidirectional | FlagCPU
)

// Request is the client's Connect private data: the test and what the server must
// prepare for it.
type Request struct {
	Kind Kind
	// MaxSize is the largest message of the run in bytes (1..MaxSize): the server's buffer
	// and receives are this large.
	MaxSize uint32
	// InlineSize is the inline data size of the QPs (0: none); the server echoes messages
	// up to it inline.
	InlineSize uint16
	// RecvDepth is how many receives the server keeps posted (Send tests; 0 otherwise).
	RecvDepth uint16
	// QPIndex and QPs say which of the run's QPs this connection is (0..QPs-1).
	QPIndex, QPs uint16
	// Session identifies the run: all its QPs carry the same random number.
	Session uint64

	// Version is the protocol version of the encoding: Append writes the larger of it and
	// the lowest version that carries the request (0: that lowest version); a parsed
	// request has the version it came in.
	Version uint8
	// Flags are the run's options (version 2).
	Flags Flags
	// Depth is the operations the client keeps outstanding per QP (version 2; with
	// FlagBidirectional the server keeps as many).
	Depth uint16
	// BufAddr, BufLen and Token name the client's buffer (version 2, FlagBidirectional
	// with Write and Read tests): the target of the server's Writes and the source of its
	// Reads.
	BufAddr, BufLen uint64
	Token           uint32
}

// RequestLen is the encoded length of a version 1 Request, RequestLenV2 of a version 2 one.
const (
	RequestLen   = 32
	RequestLenV2 = 64
)

// version2 reports whether r sets a field that version 1 cannot carry.
func (r Request) version2() bool {
	return r.Flags != 0 || r.Depth != 0 || r.BufAddr != 0 || r.BufLen != 0 || r.Token != 0 || r.Kind == KindControl
}

// encodedVersion is the version Append writes.
func (r Request) encodedVersion() uint8 {
	v := r.Version
	if v == 0 {
		v = MinVersion
	}
	if r.version2() {
		v = max(v, 2)
	}
	return v
}

// Append appends r's encoding to b: RequestLen bytes in version 1, RequestLenV2 in 2.
func (r Request) Append(b []byte) []byte {
	v := r.encodedVersion()
	b = append(b, Magic[:]...)
	flags := byte(0)
	if v >= 2 {
		flags = byte(r.Flags)
	}
	b = append(b, v, byte(r.Kind), flags, 0)
	b = binary.LittleEndian.AppendUint32(b, r.MaxSize)
	b = binary.LittleEndian.AppendUint16(b, r.InlineSize)
	b = binary.LittleEndian.AppendUint16(b, r.RecvDepth)
	b = binary.LittleEndian.AppendUint16(b, r.QPIndex)
	b = binary.LittleEndian.AppendUint16(b, r.QPs)
	b = binary.LittleEndian.AppendUint64(b, r.Session)
	if v < 2 {
		return append(b, 0, 0, 0, 0)
	}
	b = binary.LittleEndian.AppendUint16(b, r.Depth)
	b = append(b, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, r.BufAddr)
	b = binary.LittleEndian.AppendUint64(b, r.BufLen)
	b = binary.LittleEndian.AppendUint32(b, r.Token)
	return append(b, make([]byte, RequestLenV2-52)...)
}

// Validate checks r's fields against the protocol's limits.
func (r Request) Validate() error {
	switch {
	case r.Version > Version:
		return fmt.Errorf("%w: request of version %d (this ndkpeer speaks %d to %d)", ErrVersion, r.Version, MinVersion, Version)
	case r.Version == 1 && r.version2():
		return fmt.Errorf("%w: a version 1 request with version 2 fields", ErrMalformed)
	case r.Flags&^flagsKnown != 0:
		return fmt.Errorf("%w: unknown request flags %#x", ErrMalformed, uint8(r.Flags))
	case r.Depth > MaxDepth:
		return fmt.Errorf("%w: depth %d over %d", ErrMalformed, r.Depth, MaxDepth)
	case r.Flags&FlagBidirectional != 0 && !r.Kind.Bandwidth() && r.Kind != KindControl:
		return fmt.Errorf("%w: bidirectional %v test", ErrMalformed, r.Kind)
	case r.BufAddr+r.BufLen < r.BufAddr:
		return fmt.Errorf("%w: buffer %#x+%d wraps", ErrMalformed, r.BufAddr, r.BufLen)
	case !r.Kind.Valid():
		return fmt.Errorf("%w: unknown test kind %d", ErrMalformed, r.Kind)
	case r.MaxSize < 1 || r.MaxSize > MaxSize:
		return fmt.Errorf("%w: size %d not in [1, %d]", ErrMalformed, r.MaxSize, MaxSize)
	case r.InlineSize > MaxInline:
		return fmt.Errorf("%w: inline size %d over %d", ErrMalformed, r.InlineSize, MaxInline)
	case r.RecvDepth > MaxRecvDepth:
		return fmt.Errorf("%w: receive depth %d over %d", ErrMalformed, r.RecvDepth, MaxRecvDepth)
	case r.QPs < 1 || r.QPs > MaxQPs || r.QPIndex >= r.QPs:
		return fmt.Errorf("%w: QP %d of %d (at most %d)", ErrMalformed, r.QPIndex, r.QPs, MaxQPs)
	}
	return nil
}

// ErrVersion is wrapped by the parse error of a message of another protocol version.
var ErrVersion = errors.New("ndkpeer protocol: other version")

// VersionOf returns the protocol version of an encoded message (0 if b is too short or
// lacks the magic), for a message that failed to parse with ErrVersion.
func VersionOf(b []byte) uint8 {
	if len(b) < 5 || [4]byte(b[:4]) != Magic {
		return 0
	}
	return b[4]
}

// header checks the magic and version of b, which must be at least n bytes long (n2 in
// version 2 and later), and returns the version.
func header(b []byte, n, n2 int, what string) (uint8, error) {
	if len(b) < 6 {
		return 0, fmt.Errorf("%w: %s of %d bytes", ErrMalformed, what, len(b))
	}
	if [4]byte(b[:4]) != Magic {
		return 0, fmt.Errorf("%w: %s without the ndkpeer magic", ErrMalformed, what)
	}
	v := b[4]
	if v < MinVersion || v > Version {
		return 0, fmt.Errorf("%w: %s of version %d (this ndkpeer speaks %d to %d)", ErrVersion, what, v, MinVersion, Version)
	}
	if v >= 2 {
		n = n2
	}
	if len(b) < n {
		return 0, fmt.Errorf("%w: %s of %d bytes (want %d)", ErrMalformed, what, len(b), n)
	}
	return v, nil
}

// ParseRequest decodes and validates a Request of any version from MinVersion to Version.
func ParseRequest(b []byte) (Request, error) {
	v, err := header(b, RequestLen, RequestLenV2, "request")
	if err != nil {
		return Request{}, err
	}
	r := Request{
		Version:    v,
		Kind:       Kind(b[5]),
		MaxSize:    binary.LittleEndian.Uint32(b[8:]),
		InlineSize: binary.LittleEndian.Uint16(b[12:]),
		RecvDepth:  binary.LittleEndian.Uint16(b[14:]),
		QPIndex:    binary.LittleEndian.Uint16(b[16:]),
		QPs:        binary.LittleEndian.Uint16(b[18:]),
		Session:    binary.LittleEndian.Uint64(b[20:]),
	}
	if v >= 2 {
		r.Flags = Flags(b[6])
		r.Depth = binary.LittleEndian.Uint16(b[28:])
		r.BufAddr = binary.LittleEndian.Uint64(b[32:])
		r.BufLen = binary.LittleEndian.Uint64(b[40:])
		r.Token = binary.LittleEndian.Uint32(b[48:])
	} else if r.Kind == KindControl {
		return Request{}, fmt.Errorf("%w: a control connection in a version 1 request", ErrMalformed)
	}
	if err := r.Validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// Attach is the XDP attach mode a side got.
type Attach uint8

// The attach modes.
const (
	AttachUnknown Attach = 0
	AttachNative  Attach = 1 // the driver runs the program (XDP_FLAGS_DRV_MODE)
	AttachGeneric Attach = 2 // the kernel runs it on socket buffers (XDP_FLAGS_SKB_MODE)
)

// String returns "native", "generic" or "unknown".
func (a Attach) String() string {
	switch a {
	case AttachNative:
		return "native"
	case AttachGeneric:
		return "generic"
	}
	return "unknown"
}

// Progress is the progress mode of a side's adapter (ndk.Progress, as names).
type Progress uint8

// The progress modes.
const (
	ProgressUnknown  Progress = 0
	ProgressInline   Progress = 1 // the application's polling loop drives the engine
	ProgressBusy     Progress = 2 // an engine goroutine that never sleeps
	ProgressAdaptive Progress = 3 // an engine goroutine that spins, then sleeps
)

// String returns "inline", "busy", "adaptive" or "unknown".
func (p Progress) String() string {
	switch p {
	case ProgressInline:
		return "inline"
	case ProgressBusy:
		return "busy"
	case ProgressAdaptive:
		return "adaptive"
	}
	return "unknown"
}

// Mode is what one side's adapter runs with, as its header line shows it.
type Mode struct {
	Attach      Attach
	Progress    Progress
	ZeroCopy    bool   // AF_XDP zero-copy (else copy mode)
	MultiBuffer bool   // AF_XDP multi-buffer (XDP_USE_SG)
	NeedWakeup  bool   // XDP_USE_NEED_WAKEUP
	BusyPoll    bool   // SO_BUSY_POLL accepted
	MTU         uint32 // the interface's MTU
	MaxPayload  uint32 // the largest UDP payload the link sends
	Served      uint16 // how many of the interface's RX queues are served
	Queues      uint16 // the interface's RX queues
}

const (
	flagZeroCopy = 1 << iota
	flagMultiBuffer
	flagNeedWakeup
	flagBusyPoll
)

// Reply is the server's Accept private data.
type Reply struct {
	// Version is the protocol version of the encoding: the server answers in its request's
	// (0: Version).
	Version uint8
	Kind    Kind
	// BufAddr, BufLen and Token name the server's test buffer (its MR's virtual address,
	// length and remote token): the target of Writes and the source of Reads. Zero for
	// Send tests and the tour.
	BufAddr, BufLen uint64
	Token           uint32
	// Server is the server adapter's mode.
	Server Mode
}

// ReplyLen is the encoded length of a Reply.
const ReplyLen = 48

// Append appends r's encoding to b.
func (r Reply) Append(b []byte) []byte {
	b = append(b, Magic[:]...)
	b = append(b, orVersion(r.Version), byte(r.Kind), 0, 0)
	b = binary.LittleEndian.AppendUint64(b, r.BufAddr)
	b = binary.LittleEndian.AppendUint64(b, r.BufLen)
	b = binary.LittleEndian.AppendUint32(b, r.Token)
	var f byte
	for _, x := range []struct {
		on  bool
		bit byte
	}{{r.Server.ZeroCopy, flagZeroCopy}, {r.Server.MultiBuffer, flagMultiBuffer}, {r.Server.NeedWakeup, flagNeedWakeup}, {r.Server.BusyPoll, flagBusyPoll}} {
		if x.on {
			f |= x.bit
		}
	}
	b = append(b, byte(r.Server.Attach), byte(r.Server.Progress), f, 0)
	b = binary.LittleEndian.AppendUint32(b, r.Server.MTU)
	b = binary.LittleEndian.AppendUint16(b, r.Server.Served)
	b = binary.LittleEndian.AppendUint16(b, r.Server.Queues)
	b = binary.LittleEndian.AppendUint32(b, r.Server.MaxPayload)
	return append(b, 0, 0, 0, 0)
}

// ParseReply decodes a Reply and checks that it answers a request of kind want.
func ParseReply(b []byte, want Kind) (Reply, error) {
	v, err := header(b, ReplyLen, ReplyLen, "reply")
	if err != nil {
		return Reply{}, err
	}
	f := b[30]
	r := Reply{
		Version: v,
		Kind:    Kind(b[5]),
		BufAddr: binary.LittleEndian.Uint64(b[8:]),
		BufLen:  binary.LittleEndian.Uint64(b[16:]),
		Token:   binary.LittleEndian.Uint32(b[24:]),
		Server: Mode{
			Attach: Attach(b[28]), Progress: Progress(b[29]),
			ZeroCopy: f&flagZeroCopy != 0, MultiBuffer: f&flagMultiBuffer != 0,
			NeedWakeup: f&flagNeedWakeup != 0, BusyPoll: f&flagBusyPoll != 0,
			MTU:        binary.LittleEndian.Uint32(b[32:]),
			Served:     binary.LittleEndian.Uint16(b[36:]),
			Queues:     binary.LittleEndian.Uint16(b[38:]),
			MaxPayload: binary.LittleEndian.Uint32(b[40:]),
		},
	}
	switch {
	case r.Kind != want:
		return Reply{}, fmt.Errorf("%w: reply for a %v test, asked %v", ErrMalformed, r.Kind, want)
	case r.Server.Attach > AttachGeneric || r.Server.Progress > ProgressAdaptive:
		return Reply{}, fmt.Errorf("%w: unknown attach %d or progress %d", ErrMalformed, r.Server.Attach, r.Server.Progress)
	case r.BufAddr+r.BufLen < r.BufAddr:
		return Reply{}, fmt.Errorf("%w: buffer %#x+%d wraps", ErrMalformed, r.BufAddr, r.BufLen)
	}
	return r, nil
}

// RefuseCode says why a server rejected a connection.
type RefuseCode uint8

// The refusal codes.
const (
	RefuseBadRequest RefuseCode = 1 // the request did not parse
	RefuseVersion    RefuseCode = 2 // another protocol version
	RefuseLimit      RefuseCode = 3 // over one of the server's limits (size, QPs, receive depth)
	RefuseBusy       RefuseCode = 4 // the server has its most connections
	RefuseMemory     RefuseCode = 5 // the server could not allocate or register the buffer
	RefuseStopping   RefuseCode = 6 // the server is shutting down
)

// Refusal is the server's Reject private data.
type Refusal struct {
	// Version is the protocol version of the encoding (0: Version); a refusal with
	// RefuseVersion from an older server carries that server's version.
	Version uint8
	Code    RefuseCode
	// Reason is a one-line explanation for the user (at most MaxReason bytes of UTF-8).
	Reason string
}

// MaxReason is the longest Refusal.Reason.
const MaxReason = MaxPrivateData - 8

// Append appends r's encoding to b; a longer reason is cut to MaxReason bytes (at a rune
// boundary).
func (r Refusal) Append(b []byte) []byte {
	reason := r.Reason
	for len(reason) > MaxReason {
		_, n := utf8.DecodeLastRuneInString(reason)
		reason = reason[:len(reason)-n]
	}
	b = append(b, Magic[:]...)
	b = append(b, orVersion(r.Version), byte(r.Code), byte(len(reason)), 0)
	return append(b, reason...)
}

// orVersion is v, or Version if v is 0.
func orVersion(v uint8) uint8 {
	if v == 0 {
		return Version
	}
	return v
}

// ParseRefusal decodes a Refusal.
func ParseRefusal(b []byte) (Refusal, error) {
	v, err := header(b, 8, 8, "refusal")
	if err != nil {
		return Refusal{}, err
	}
	n := int(b[6])
	if n > MaxReason || len(b) < 8+n {
		return Refusal{}, fmt.Errorf("%w: refusal reason of %d bytes in %d", ErrMalformed, n, len(b))
	}
	reason := b[8 : 8+n]
	if !utf8.Valid(reason) {
		return Refusal{}, fmt.Errorf("%w: refusal reason is not UTF-8", ErrMalformed)
	}
	code := RefuseCode(b[5])
	if code < RefuseBadRequest || code > RefuseStopping {
		return Refusal{}, fmt.Errorf("%w: refusal code %d", ErrMalformed, code)
	}
	return Refusal{Version: v, Code: code, Reason: string(reason)}, nil
}
