package memreg

import "errors"

// ErrAccess is what every refused remote access matches (errors.Is): each error of Resolve,
// Acquire and Invalidate is one of the reasons below, which match it (Invalidate of a normal
// MR's token: an error matching both ErrAccess and ErrWrongKind). It is also the reason a
// transport.MemoryResolver refuses (the engine names it memreg.ErrAccess). The NDK status
// of the failing initiator request is STATUS_ACCESS_VIOLATION (0xC0000005) for every reason
// (as NetworkDirect providers report it), and the connection is torn down.
var ErrAccess = errors.New("remote access refused")

// Reasons an access is refused: the errors of Resolve, Acquire and Invalidate as they are,
// each matching ErrAccess, so that refusing allocates nothing. AcquireLocal refuses a local
// access with them too.
var (
	// ErrBadToken: the token's index names no slot of the registry (or is 0).
	ErrBadToken error = &refusal{msg: "memreg: bad token"}
	// ErrStale: the token names a slot but not its current mapping: invalidated,
	// deregistered, not yet bound, or guessed.
	ErrStale error = &refusal{msg: "memreg: stale token"}
	// ErrWrongPD: the token is live but belongs to another protection domain.
	ErrWrongPD error = &refusal{msg: "memreg: token of another protection domain"}
	// ErrRights: the mapping does not grant the requested access (or the token is a local
	// token, which never grants remote access).
	ErrRights error = &refusal{msg: "memreg: access not granted"}
	// ErrBounds: [addr, addr+length) is not inside the mapping.
	ErrBounds error = &refusal{msg: "memreg: range outside the mapping"}
	// ErrNotContiguous: the range is inside a fast-registered region but crosses a boundary
	// between pages that are not contiguous in memory, so it cannot be one slice. A later
	// step returns an iovec instead.
	ErrNotContiguous error = &refusal{msg: "memreg: range spans non-contiguous pages"}
)

// refusedWrongKind is Invalidate's refusal of a token that is not invalidated remotely (a
// normal MR's, or a local token): ErrWrongKind as a refusal. ErrWrongKind itself, an error
// of control operations too, does not match ErrAccess.
var refusedWrongKind error = &refusal{msg: ErrWrongKind.Error(), reason: ErrWrongKind}

// refusal is the type of the reasons above: it matches ErrAccess and, when reason is set,
// unwraps to it.
type refusal struct {
	msg    string
	reason error
}

func (r *refusal) Error() string { return r.msg }

// Is makes every refusal match ErrAccess.
func (r *refusal) Is(target error) bool { return target == ErrAccess }

func (r *refusal) Unwrap() error { return r.reason }

// Errors of the control operations, with the NDK status each maps to.
var (
	// ErrAccessViolation: Bind with remote write on an MR without local write, FastRegister
	// with remote access on an MR not initialised for it, or a Bind range outside the MR.
	// STATUS_ACCESS_VIOLATION (0xC0000005).
	ErrAccessViolation = errors.New("memreg: access violation")
	// ErrInvalidParameter: a malformed argument. STATUS_INVALID_PARAMETER (0xC000000D).
	ErrInvalidParameter = errors.New("memreg: invalid parameter")
	// ErrBusy: a window or fast-register MR is already bound, or an MR still has windows
	// bound. NDSPI ND_DEVICE_BUSY (0x80000011); for Bind/FastRegister
	// STATUS_INVALID_DEVICE_REQUEST (0xC0000010).
	ErrBusy = errors.New("memreg: busy")
	// ErrNotBound: invalidation of an unbound window or unregistered fast-register MR.
	// STATUS_INVALID_DEVICE_REQUEST (0xC0000010).
	ErrNotBound = errors.New("memreg: not bound")
	// ErrWrongKind: the operation does not apply to this kind of object, e.g. InvalidateMR
	// of a normally registered MR (use DeregisterMR). STATUS_INVALID_DEVICE_REQUEST.
	ErrWrongKind = errors.New("memreg: wrong kind of object")
	// ErrClosed: the MR was deregistered or the MW closed. STATUS_INVALID_DEVICE_REQUEST.
	ErrClosed = errors.New("memreg: object closed")
	// ErrFull: the registry has no free slot. STATUS_INSUFFICIENT_RESOURCES (0xC000009A).
	ErrFull = errors.New("memreg: registry full")
	// ErrPin: memory outside the UMEM could not be pinned (mlock refused, usually
	// RLIMIT_MEMLOCK). STATUS_INSUFFICIENT_RESOURCES (0xC000009A).
	ErrPin = errors.New("memreg: cannot pin memory")
)
