package pcapng

import (
	"encoding/binary"
	"fmt"
)

// Block is one block of a file as Read finds it.
type Block struct {
	// Type is the block type; Offset where the block starts in the file; Len its total
	// length (a multiple of 4, the same at its start and its end).
	Type   uint32
	Offset int
	Len    int
	// Body is the block between its total lengths: the fields and options of its type.
	Body []byte
	// Options are the block's options in order (the end-of-options marker excluded);
	// nil for a block type Read does not know.
	Options []Option
	// Interface is the IDB that an EPB or ISB refers to (its index), or, for an IDB,
	// the block's own index.
	Interface uint32
	// For an IDB: the link type and snap length, and the timestamp resolution (if_tsresol,
	// 6 when absent).
	LinkType uint16
	SnapLen  uint32
	TsResol  uint8
	// For an EPB: the timestamp in nanoseconds since the epoch (in the interface's
	// resolution), the captured and original lengths, and the captured bytes. For an ISB:
	// Timestamp only.
	Timestamp int64
	CapLen    uint32
	OrigLen   uint32
	Data      []byte
}

// Option is one option of a block.
type Option struct {
	Code  uint16
	Value []byte
}

// Find returns the value of b's first option with code, and whether there is one.
func (b *Block) Find(code uint16) ([]byte, bool) {
	for _, o := range b.Options {
		if o.Code == code {
			return o.Value, true
		}
	}
	return nil, false
}

// Read parses a little-endian pcapng file of one section: it checks that it starts with a
// Section Header Block, that every block's two total lengths agree, are multiples of 4 and
// fit in the file, that options are well formed, that EPBs and ISBs name an interface
// described before them and that an EPB's captured length fits in its block and is at
// most the original length. It returns the blocks in order, or ErrFormat (wrapped, with
// the offset) at the first breach.
func Read(f []byte) ([]Block, error) {
	var out []Block
	var res []uint8 // per interface: if_tsresol
	le := binary.LittleEndian
	bad := func(off int, format string, a ...any) error {
		return fmt.Errorf("%w: at offset %d: %s", ErrFormat, off, fmt.Sprintf(format, a...))
	}
	for off := 0; off < len(f); {
		if len(f)-off < 12 {
			return out, bad(off, "%d bytes left, less than a block", len(f)-off)
		}
		t, n := le.Uint32(f[off:]), int(le.Uint32(f[off+4:]))
		if n < 12 || n%4 != 0 || n > len(f)-off || n > MaxBlock {
			return out, bad(off, "block length %d (%d bytes left)", n, len(f)-off)
		}
		if end := int(le.Uint32(f[off+n-4:])); end != n {
			return out, bad(off, "block length %d at its start, %d at its end", n, end)
		}
		b := Block{Type: t, Offset: off, Len: n, Body: f[off+8 : off+n-4]}
		if off == 0 && t != BlockSHB {
			return out, bad(off, "the first block is of type %#x, not a Section Header Block", t)
		}
		body := b.Body
		var opts []byte
		switch t {
		case BlockSHB:
			if off != 0 {
				return out, bad(off, "a second section: not supported")
			}
			if len(body) < 16 || le.Uint32(body) != byteOrderMagic {
				return out, bad(off, "section header without the little-endian byte-order magic")
			}
			if le.Uint16(body[4:]) != 1 {
				return out, bad(off, "major version %d", le.Uint16(body[4:]))
			}
			opts = body[16:]
		case BlockIDB:
			if len(body) < 8 {
				return out, bad(off, "interface description of %d bytes", len(body))
			}
			b.LinkType, b.SnapLen, b.Interface = le.Uint16(body), le.Uint32(body[4:]), uint32(len(res))
			opts = body[8:]
		case BlockEPB:
			if len(body) < 20 {
				return out, bad(off, "enhanced packet of %d bytes", len(body))
			}
			b.Interface = le.Uint32(body)
			b.CapLen, b.OrigLen = le.Uint32(body[12:]), le.Uint32(body[16:])
			if uint64(b.CapLen)+uint64(pad4(int(b.CapLen))) > uint64(len(body)-20) {
				return out, bad(off, "captured length %d in a block of %d", b.CapLen, n)
			}
			if b.CapLen > b.OrigLen {
				return out, bad(off, "captured length %d over the original length %d", b.CapLen, b.OrigLen)
			}
			b.Data = body[20 : 20+b.CapLen]
			opts = body[20+int(b.CapLen)+pad4(int(b.CapLen)):]
		case BlockISB:
			if len(body) < 12 {
				return out, bad(off, "interface statistics of %d bytes", len(body))
			}
			b.Interface = le.Uint32(body)
			opts = body[12:]
		default:
			out = append(out, b)
			off += n
			continue
		}
		if t == BlockEPB || t == BlockISB {
			if int(b.Interface) >= len(res) {
				return out, bad(off, "interface %d: %d described", b.Interface, len(res))
			}
			b.TsResol = res[b.Interface]
			units := uint64(le.Uint32(body[4:]))<<32 | uint64(le.Uint32(body[8:]))
			b.Timestamp = toNanos(units, b.TsResol)
		}
		var err error
		if b.Options, err = parseOptions(opts); err != nil {
			return out, bad(off, "%v", err)
		}
		if t == BlockIDB {
			b.TsResol = 6
			if v, ok := b.Find(optIfTsresol); ok {
				if len(v) != 1 || v[0] > 9 {
					return out, bad(off, "if_tsresol %x: only powers of ten up to nanoseconds are read", v)
				}
				b.TsResol = v[0]
			}
			res = append(res, b.TsResol)
		}
		out = append(out, b)
		off += n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrFormat)
	}
	return out, nil
}

// parseOptions splits an options area; it must end with opt_endofopt or at its end.
func parseOptions(b []byte) ([]Option, error) {
	var out []Option
	for len(b) > 0 {
		if len(b) < 4 {
			return out, fmt.Errorf("%d bytes after the last option", len(b))
		}
		code, n := binary.LittleEndian.Uint16(b), int(binary.LittleEndian.Uint16(b[2:]))
		if code == 0 {
			if n != 0 || len(b) != 4 {
				return out, fmt.Errorf("%d bytes after the end of options", len(b)-4)
			}
			return out, nil
		}
		if 4+n+pad4(n) > len(b) {
			return out, fmt.Errorf("option %d of %d bytes in %d", code, n, len(b)-4)
		}
		out = append(out, Option{Code: code, Value: b[4 : 4+n]})
		b = b[4+n+pad4(n):]
	}
	return out, nil
}

// toNanos converts a timestamp of units of 10^-res s to nanoseconds (saturating).
func toNanos(units uint64, res uint8) int64 {
	m := unitNanos(res)
	if units > (1<<63-1)/m {
		return 1<<63 - 1
	}
	return int64(units * m)
}

// unitNanos is the nanoseconds in one timestamp unit of 10^-res s (res at most 9).
func unitNanos(res uint8) uint64 {
	m := uint64(1)
	for i := res; i < 9; i++ {
		m *= 10
	}
	return m
}
