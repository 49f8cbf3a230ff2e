package bpf

import "errors"

var (
	// ErrNotSupported is returned by Load where the program cannot run: non-Linux systems
	// and big-endian architectures.
	ErrNotSupported = errors.New("xdp steering not supported on this platform")
	// ErrInvalidOptions is wrapped by Load's error for bad Options.
	ErrInvalidOptions = errors.New("invalid options")
	// ErrClosed is returned by methods called after Program.Close.
	ErrClosed = errors.New("program closed")
	// ErrAttached is returned by Attach when the Program is already attached to the
	// interface.
	ErrAttached = errors.New("already attached")
	// ErrNotAttached is returned by Detach when the Program is not attached to the
	// interface.
	ErrNotAttached = errors.New("not attached")
)
