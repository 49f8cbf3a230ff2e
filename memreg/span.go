package memreg

// Span is the memory a remote access resolved to (Registry.Acquire): N bytes, either
// contiguous in Buf or spread over the pages of a fast-registered region. When MR is not
// nil the Span holds that region, and the holder must call MR.Release exactly once when it
// no longer touches the bytes (see Registry.Acquire).
//
// A Span is a plain value: copying it copies the reference, not the hold.
type Span struct {
	// Buf is the span's bytes when they are contiguous (len(Buf) == N). For a span over
	// fast-registered pages it is the first contiguous piece.
	Buf []byte
	// N is the span's length in bytes.
	N uint64
	// MR is the region this span holds, or nil when it holds none.
	MR *MR

	runs [][]byte // fast-register: the region's page runs (nil: Buf is everything)
	pos  uint64   // fast-register: the span's first byte as an offset into page 0
}

// Len returns the span's length in bytes.
func (s *Span) Len() int { return int(s.N) }

// Piece returns the longest contiguous run of the span's bytes that starts off bytes into
// it, or nil when off is at or beyond the end.
func (s *Span) Piece(off uint64) []byte {
	if off >= s.N {
		return nil
	}
	if s.runs == nil {
		return s.Buf[off:s.N:s.N]
	}
	p := s.pos + off
	run := s.runs[p>>frPageShift]
	in := p & (FastRegisterPageSize - 1)
	n := min(uint64(len(run))-in, s.N-off)
	return run[in : in+n : in+n]
}

// CopyIn copies src into the span starting off bytes into it and returns how many bytes
// it copied (fewer than len(src) only at the span's end).
func (s *Span) CopyIn(off uint64, src []byte) int { return s.copyAt(off, src, true) }

// CopyOut copies the span's bytes starting off bytes into it into dst and returns how many
// bytes it copied (fewer than len(dst) only at the span's end).
func (s *Span) CopyOut(off uint64, dst []byte) int { return s.copyAt(off, dst, false) }

// copyAt copies b into the span (in) or the span into b (!in), piece by piece, starting
// off bytes into the span; it returns how many bytes it copied.
func (s *Span) copyAt(off uint64, b []byte, in bool) int {
	w := 0
	for w < len(b) {
		p := s.Piece(off + uint64(w))
		if p == nil {
			break
		}
		if in {
			w += copy(p, b[w:])
		} else {
			w += copy(b[w:], p)
		}
	}
	return w
}
