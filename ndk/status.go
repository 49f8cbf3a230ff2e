package ndk

import (
	"errors"
	"fmt"
)

// Status is an NTSTATUS value, as NDKPI verbs return and completions carry them, with the
// same numbers (ntstatus.h). A Status other than StatusSuccess, StatusPending and
// StatusTimeout is an error; functions of this package return nil for success and errors
// for which errors.Is(err, StatusX) reports the status (StatusOf extracts it).
type Status uint32

// The NTSTATUS values NDK uses.
const (
	// StatusSuccess is STATUS_SUCCESS: the operation succeeded.
	StatusSuccess Status = 0x00000000
	// StatusTimeout is STATUS_TIMEOUT: a wait timed out (success severity).
	StatusTimeout Status = 0x00000102
	// StatusPending is STATUS_PENDING: the operation completes later.
	StatusPending Status = 0x00000103
	// StatusBufferOverflow is STATUS_BUFFER_OVERFLOW: a CQ overran (its notification carries it).
	StatusBufferOverflow Status = 0x80000005
	// StatusDeviceBusy is STATUS_DEVICE_BUSY: the object is in use (an MR with bound windows).
	StatusDeviceBusy Status = 0x80000011
	// StatusNoMoreEntries is STATUS_NO_MORE_ENTRIES: a queue is full.
	StatusNoMoreEntries Status = 0x8000001A
	// StatusUnsuccessful is STATUS_UNSUCCESSFUL: a failure with no better code.
	StatusUnsuccessful Status = 0xC0000001
	// StatusNotImplemented is STATUS_NOT_IMPLEMENTED (0xC0000002), the NTSTATUS a provider
	// returns for a function it does not offer.
	StatusNotImplemented Status = 0xC0000002
	// StatusAccessViolation is STATUS_ACCESS_VIOLATION: a local or remote memory access was refused.
	StatusAccessViolation Status = 0xC0000005
	// StatusInvalidHandle is STATUS_INVALID_HANDLE: the object is closed or belongs elsewhere.
	StatusInvalidHandle Status = 0xC0000008
	// StatusInvalidParameter is STATUS_INVALID_PARAMETER: an argument is out of range.
	StatusInvalidParameter Status = 0xC000000D
	// StatusInvalidDeviceRequest is STATUS_INVALID_DEVICE_REQUEST: a malformed request (invalidate of an unbound window, of a normal MR).
	StatusInvalidDeviceRequest Status = 0xC0000010
	// StatusNoMemory is STATUS_NO_MEMORY: memory could not be had.
	StatusNoMemory Status = 0xC0000017
	// StatusBufferTooSmall is STATUS_BUFFER_TOO_SMALL: an output buffer is too small.
	StatusBufferTooSmall Status = 0xC0000023
	// StatusInvalidParameterMix is STATUS_INVALID_PARAMETER_MIX: arguments contradict each other.
	StatusInvalidParameterMix Status = 0xC0000030
	// StatusDataOverrun is STATUS_DATA_OVERRUN: a receive was too small for the incoming Send, or a request too long.
	StatusDataOverrun Status = 0xC000003C
	// StatusDataError is STATUS_DATA_ERROR: the peer refused a Send as too large for its receive.
	StatusDataError Status = 0xC000003E
	// StatusInsufficientResources is STATUS_INSUFFICIENT_RESOURCES: a table or the heap is exhausted.
	StatusInsufficientResources Status = 0xC000009A
	// StatusDeviceNotReady is STATUS_DEVICE_NOT_READY: the adapter is not ready.
	StatusDeviceNotReady Status = 0xC00000A3
	// StatusIOTimeout is STATUS_IO_TIMEOUT: retries (transport or RNR) were exhausted.
	StatusIOTimeout Status = 0xC00000B5
	// StatusNotSupported is STATUS_NOT_SUPPORTED: the request is not supported.
	StatusNotSupported Status = 0xC00000BB
	// StatusInternalError is STATUS_INTERNAL_ERROR: the QP failed while processing.
	StatusInternalError Status = 0xC00000E5
	// StatusCancelled is STATUS_CANCELLED: flushed, or cancelled after an earlier failure.
	StatusCancelled Status = 0xC0000120
	// StatusLocalDisconnect is STATUS_LOCAL_DISCONNECT: disconnected by this side.
	StatusLocalDisconnect Status = 0xC000013B
	// StatusRemoteDisconnect is STATUS_REMOTE_DISCONNECT: disconnected by the peer.
	StatusRemoteDisconnect Status = 0xC000013C
	// StatusRemoteResources is STATUS_REMOTE_RESOURCES: the request caused an error at the peer (ND_REMOTE_ERROR).
	StatusRemoteResources Status = 0xC000013D
	// StatusLinkFailed is STATUS_LINK_FAILED: the link failed.
	StatusLinkFailed Status = 0xC000013E
	// StatusInvalidAddress is STATUS_INVALID_ADDRESS: an address is not usable.
	StatusInvalidAddress Status = 0xC0000141
	// StatusInvalidDeviceState is STATUS_INVALID_DEVICE_STATE: the object is in the wrong state.
	StatusInvalidDeviceState Status = 0xC0000184
	// StatusIODeviceError is STATUS_IO_DEVICE_ERROR: an I/O error on the device.
	StatusIODeviceError Status = 0xC0000185
	// StatusInvalidBufferSize is STATUS_INVALID_BUFFER_SIZE: a buffer length is invalid.
	StatusInvalidBufferSize Status = 0xC0000206
	// StatusTooManyAddresses is STATUS_TOO_MANY_ADDRESSES: no local port is free.
	StatusTooManyAddresses Status = 0xC0000209
	// StatusAddressAlreadyExists is STATUS_ADDRESS_ALREADY_EXISTS: the address is in use.
	StatusAddressAlreadyExists Status = 0xC000020A
	// StatusConnectionDisconnected is STATUS_CONNECTION_DISCONNECTED: the connection is disconnected.
	StatusConnectionDisconnected Status = 0xC000020C
	// StatusConnectionReset is STATUS_CONNECTION_RESET: the connection was reset.
	StatusConnectionReset Status = 0xC000020D
	// StatusConnectionRefused is STATUS_CONNECTION_REFUSED: the peer refused the connection (nobody listens, or Reject).
	StatusConnectionRefused Status = 0xC0000236
	// StatusGracefulDisconnect is STATUS_GRACEFUL_DISCONNECT: the peer disconnected gracefully.
	StatusGracefulDisconnect Status = 0xC0000237
	// StatusConnectionInvalid is STATUS_CONNECTION_INVALID: the QP is not connected.
	StatusConnectionInvalid Status = 0xC000023A
	// StatusConnectionActive is STATUS_CONNECTION_ACTIVE: the QP is already connected.
	StatusConnectionActive Status = 0xC000023B
	// StatusNetworkUnreachable is STATUS_NETWORK_UNREACHABLE: no route to the peer's network.
	StatusNetworkUnreachable Status = 0xC000023C
	// StatusHostUnreachable is STATUS_HOST_UNREACHABLE: the peer does not answer.
	StatusHostUnreachable Status = 0xC000023D
	// StatusRequestAborted is STATUS_REQUEST_ABORTED: the peer aborted the request.
	StatusRequestAborted Status = 0xC0000240
	// StatusConnectionAborted is STATUS_CONNECTION_ABORTED: the connection was aborted.
	StatusConnectionAborted Status = 0xC0000241
	// StatusDeviceRemoved is STATUS_DEVICE_REMOVED: the adapter is gone (closed).
	StatusDeviceRemoved Status = 0xC00002B6
	// StatusImplementationLimit is STATUS_IMPLEMENTATION_LIMIT: a limit of this implementation was exceeded.
	StatusImplementationLimit Status = 0xC000042B
)

var statusNames = map[Status]string{
	StatusSuccess:                "STATUS_SUCCESS",
	StatusTimeout:                "STATUS_TIMEOUT",
	StatusPending:                "STATUS_PENDING",
	StatusBufferOverflow:         "STATUS_BUFFER_OVERFLOW",
	StatusDeviceBusy:             "STATUS_DEVICE_BUSY",
	StatusNoMoreEntries:          "STATUS_NO_MORE_ENTRIES",
	StatusUnsuccessful:           "STATUS_UNSUCCESSFUL",
	StatusNotImplemented:         "STATUS_NOT_IMPLEMENTED",
	StatusAccessViolation:        "STATUS_ACCESS_VIOLATION",
	StatusInvalidHandle:          "STATUS_INVALID_HANDLE",
	StatusInvalidParameter:       "STATUS_INVALID_PARAMETER",
	StatusInvalidDeviceRequest:   "STATUS_INVALID_DEVICE_REQUEST",
	StatusNoMemory:               "STATUS_NO_MEMORY",
	StatusBufferTooSmall:         "STATUS_BUFFER_TOO_SMALL",
	StatusInvalidParameterMix:    "STATUS_INVALID_PARAMETER_MIX",
	StatusDataOverrun:            "STATUS_DATA_OVERRUN",
	StatusDataError:              "STATUS_DATA_ERROR",
	StatusInsufficientResources:  "STATUS_INSUFFICIENT_RESOURCES",
	StatusDeviceNotReady:         "STATUS_DEVICE_NOT_READY",
	StatusIOTimeout:              "STATUS_IO_TIMEOUT",
	StatusNotSupported:           "STATUS_NOT_SUPPORTED",
	StatusInternalError:          "STATUS_INTERNAL_ERROR",
	StatusCancelled:              "STATUS_CANCELLED",
	StatusLocalDisconnect:        "STATUS_LOCAL_DISCONNECT",
	StatusRemoteDisconnect:       "STATUS_REMOTE_DISCONNECT",
	StatusRemoteResources:        "STATUS_REMOTE_RESOURCES",
	StatusLinkFailed:             "STATUS_LINK_FAILED",
	StatusInvalidAddress:         "STATUS_INVALID_ADDRESS",
	StatusInvalidDeviceState:     "STATUS_INVALID_DEVICE_STATE",
	StatusIODeviceError:          "STATUS_IO_DEVICE_ERROR",
	StatusInvalidBufferSize:      "STATUS_INVALID_BUFFER_SIZE",
	StatusTooManyAddresses:       "STATUS_TOO_MANY_ADDRESSES",
	StatusAddressAlreadyExists:   "STATUS_ADDRESS_ALREADY_EXISTS",
	StatusConnectionDisconnected: "STATUS_CONNECTION_DISCONNECTED",
	StatusConnectionReset:        "STATUS_CONNECTION_RESET",
	StatusConnectionRefused:      "STATUS_CONNECTION_REFUSED",
	StatusGracefulDisconnect:     "STATUS_GRACEFUL_DISCONNECT",
	StatusConnectionInvalid:      "STATUS_CONNECTION_INVALID",
	StatusConnectionActive:       "STATUS_CONNECTION_ACTIVE",
	StatusNetworkUnreachable:     "STATUS_NETWORK_UNREACHABLE",
	StatusHostUnreachable:        "STATUS_HOST_UNREACHABLE",
	StatusRequestAborted:         "STATUS_REQUEST_ABORTED",
	StatusConnectionAborted:      "STATUS_CONNECTION_ABORTED",
	StatusDeviceRemoved:          "STATUS_DEVICE_REMOVED",
	StatusImplementationLimit:    "STATUS_IMPLEMENTATION_LIMIT",
}

// Name returns the status's NTSTATUS name, e.g. "STATUS_ACCESS_VIOLATION", or its number in
// hexadecimal if it has no name here.
func (s Status) Name() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("NTSTATUS(0x%08X)", uint32(s))
}

// String returns the name and the number, e.g. "STATUS_CANCELLED (0xC0000120)".
func (s Status) String() string { return fmt.Sprintf("%s (0x%08X)", s.Name(), uint32(s)) }

// Error implements error, so a Status can be returned and matched with errors.Is.
func (s Status) Error() string { return s.String() }

// IsError reports whether s has error severity (the top two bits are 11).
func (s Status) IsError() bool { return s>>30 == 3 }

// IsWarning reports whether s has warning severity (10), as STATUS_BUFFER_OVERFLOW.
func (s Status) IsWarning() bool { return s>>30 == 2 }

// statusError is a Status with the detail of what went wrong.
type statusError struct {
	st     Status
	detail string
	cause  error
}

func (e *statusError) Error() string {
	switch {
	case e.cause != nil && e.detail != "":
		return e.st.Name() + ": " + e.detail + ": " + e.cause.Error()
	case e.cause != nil:
		return e.st.Name() + ": " + e.cause.Error()
	case e.detail != "":
		return e.st.Name() + ": " + e.detail
	}
	return e.st.Name()
}

// Is matches the status itself.
func (e *statusError) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.st
}

func (e *statusError) Unwrap() error { return e.cause }

// errorf returns an error carrying st, with a formatted detail.
func errorf(st Status, format string, args ...any) error {
	return &statusError{st: st, detail: fmt.Sprintf(format, args...)}
}

// wrap returns an error carrying st whose cause is err.
func wrap(st Status, err error) error { return &statusError{st: st, cause: err} }

// StatusOf returns the NTSTATUS an error carries: StatusSuccess for nil, the Status of an
// error of this package, and StatusUnsuccessful for any other error.
func StatusOf(err error) Status {
	if err == nil {
		return StatusSuccess
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.st
	}
	var s Status
	if errors.As(err, &s) {
		return s
	}
	return StatusUnsuccessful
}
