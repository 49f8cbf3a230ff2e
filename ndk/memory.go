package ndk

import (
	"errors"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
)

// This file connects the registry (package memreg) to the rest of ndk: the NTSTATUS each
// registry error becomes, and the transport.MemoryResolver through which the engine checks
// and resolves a peer's remote accesses.

// memStatus is the NTSTATUS of a registry or heap error (NDKPI's NdkCreateMr,
// NdkRegisterMr, NdkBind and NdkFastRegister pages; a refused access is
// STATUS_ACCESS_VIOLATION as NetworkDirect providers report it).
func memStatus(err error) Status {
	switch {
	case err == nil:
		return StatusSuccess
	case errors.Is(err, memreg.ErrBadToken), errors.Is(err, memreg.ErrStale),
		errors.Is(err, memreg.ErrWrongPD), errors.Is(err, memreg.ErrRights),
		errors.Is(err, memreg.ErrBounds), errors.Is(err, memreg.ErrNotContiguous),
		errors.Is(err, memreg.ErrAccessViolation):
		// a refused access, a bind beyond the region's rights, remote access on a
		// fast-register MR initialised without it
		return StatusAccessViolation
	case errors.Is(err, memreg.ErrBusy):
		// NdkDeregisterMr with windows bound (NDSPI's ND_DEVICE_BUSY); FastRegister of an MR
		// still registered
		return StatusDeviceBusy
	case errors.Is(err, memreg.ErrNotBound), errors.Is(err, memreg.ErrWrongKind):
		// invalidate of an unbound window or an unregistered MR; Invalidate of a normally
		// registered MR; FastRegister of a normal MR
		return StatusInvalidDeviceRequest
	case errors.Is(err, memreg.ErrClosed):
		return StatusInvalidHandle
	case errors.Is(err, memreg.ErrFull), errors.Is(err, memreg.ErrHeapExhausted), errors.Is(err, memreg.ErrPin):
		return StatusInsufficientResources
	case errors.Is(err, memreg.ErrInvalidParameter), errors.Is(err, memreg.ErrInvalid):
		return StatusInvalidParameter
	}
	return StatusUnsuccessful
}

// memError returns err as an error carrying its NTSTATUS (nil stays nil).
func memError(err error) error {
	if err == nil {
		return nil
	}
	return wrap(memStatus(err), err)
}

// refusal is a remote access the registry refused, as the engine needs it: it matches
// transport.ErrAccess and unwraps to the registry's reason. One value per reason exists, so
// refusing allocates nothing.
type refusal struct{ cause error }

func (r *refusal) Error() string { return "remote access refused: " + r.cause.Error() }

func (r *refusal) Is(target error) bool { return target == transport.ErrAccess }

func (r *refusal) Unwrap() error { return r.cause }

var (
	refusedBadToken  = &refusal{memreg.ErrBadToken}
	refusedStale     = &refusal{memreg.ErrStale}
	refusedWrongPD   = &refusal{memreg.ErrWrongPD}
	refusedRights    = &refusal{memreg.ErrRights}
	refusedBounds    = &refusal{memreg.ErrBounds}
	refusedWrongKind = &refusal{memreg.ErrWrongKind}
	refusedOther     = &refusal{errors.New("memreg: refused")}
)

func refused(err error) error {
	switch err {
	case memreg.ErrBadToken:
		return refusedBadToken
	case memreg.ErrStale:
		return refusedStale
	case memreg.ErrWrongPD:
		return refusedWrongPD
	case memreg.ErrRights:
		return refusedRights
	case memreg.ErrBounds:
		return refusedBounds
	case memreg.ErrWrongKind:
		return refusedWrongKind
	}
	return refusedOther
}

// resolver is an adapter's transport.MemoryResolver: a peer's access resolves through the
// registry and holds the region until the engine is done with the bytes (memreg.Acquire).
// transport.Access and memreg.Access have the same bits, and a QP's PD is the memreg.PD.
type resolver struct{ reg *memreg.Registry }

// Resolve implements transport.MemoryResolver.
func (r resolver) Resolve(pd, token uint32, addr uint64, length uint32, access transport.Access) (memreg.Span, error) {
	s, err := r.reg.Acquire(memreg.PD(pd), token, addr, length, memreg.Access(access))
	if err != nil {
		return memreg.Span{}, refused(err)
	}
	return s, nil
}

// Invalidate implements transport.MemoryResolver (SendAndInvalidate at the target).
func (r resolver) Invalidate(pd, token uint32) error {
	if err := r.reg.Invalidate(memreg.PD(pd), token); err != nil {
		return refused(err)
	}
	return nil
}
