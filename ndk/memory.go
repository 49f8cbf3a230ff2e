package ndk

import (
	"errors"

	"github.com/xdpndk/xdpndk/memreg"
	"github.com/xdpndk/xdpndk/transport"
)

// This file connects the registry (package memreg) to the rest of ndk: the NTSTATUS each
// registry error becomes. The engine resolves a peer's remote accesses through the registry
// directly (see the assertion at the end).

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

// The engine checks and resolves a peer's remote accesses through the adapter's registry
// itself: *memreg.Registry has the method set of transport.MemoryResolver (Acquire holds the
// region until the engine is done with the bytes), asked for memreg.Access rights, and
// every refusal of the registry matches memreg.ErrAccess, the reason the engine expects.
var _ transport.MemoryResolver = (*memreg.Registry)(nil)
