//go:build !linux || !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package bpf

import "fmt"

// Program is the steering program. On this platform it cannot be loaded: Load always
// returns ErrNotSupported, and every method of a (zero) Program returns ErrNotSupported or
// a zero value.
type Program struct{}

// Load returns ErrNotSupported: the program needs Linux on a little-endian architecture.
func Load(opts Options) (*Program, error) {
	if _, err := opts.withDefaults(); err != nil {
		return nil, fmt.Errorf("load xdp program: %w", err)
	}
	return nil, fmt.Errorf("load xdp program: %w", ErrNotSupported)
}

// Port returns 0.
func (p *Program) Port() uint16 { return 0 }

// QueueCount returns 0.
func (p *Program) QueueCount() int { return 0 }

// Attach returns ErrNotSupported.
func (p *Program) Attach(ifindex int, mode Mode) (Mode, error) {
	return mode, fmt.Errorf("attach xdp program: %w", ErrNotSupported)
}

// Detach returns ErrNotSupported.
func (p *Program) Detach(ifindex int) error {
	return fmt.Errorf("detach xdp program: %w", ErrNotSupported)
}

// SetSocket returns ErrNotSupported.
func (p *Program) SetSocket(queue int, fd int) error {
	return fmt.Errorf("set xdp socket: %w", ErrNotSupported)
}

// ClearSocket returns ErrNotSupported.
func (p *Program) ClearSocket(queue int) error {
	return fmt.Errorf("clear xdp socket: %w", ErrNotSupported)
}

// SetFaultDrop returns ErrNotSupported.
func (p *Program) SetFaultDrop(probability float64, seed uint64) error {
	return fmt.Errorf("set fault drop: %w", ErrNotSupported)
}

// Counters returns ErrNotSupported.
func (p *Program) Counters() (Counters, error) {
	return Counters{}, fmt.Errorf("read counters: %w", ErrNotSupported)
}

// Run returns ErrNotSupported.
func (p *Program) Run(pkt []byte) (uint32, error) {
	return 0, fmt.Errorf("run xdp program: %w", ErrNotSupported)
}

// Close does nothing and returns nil.
func (p *Program) Close() error { return nil }
