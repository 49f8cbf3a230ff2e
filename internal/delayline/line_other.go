//go:build !linux

package delayline

// Line is a running delay line; on this system Open always fails.
type Line struct{}

// Open fails: the forwarder needs Linux.
func Open(Config, Port, Port) (*Line, error) { return nil, ErrNotSupported }

// Close does nothing.
func (l *Line) Close() error { return nil }

// Stats returns nothing.
func (l *Line) Stats() Stats { return Stats{} }

// Config returns the zero Config.
func (l *Line) Config() Config { return Config{} }
