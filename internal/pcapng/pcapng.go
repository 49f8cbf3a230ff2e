// Package pcapng writes capture files in the pcapng format (the IETF draft "PCAP Next
// Generation (pcapng) Capture File Format"), which Wireshark, tshark and tcpdump read: a
// Section Header Block, Interface Description Blocks, Enhanced Packet Blocks and, at the
// end, Interface Statistics Blocks. Blocks are written in little-endian byte order, the
// section's order as its byte-order magic declares.
//
// A Writer is not safe for concurrent use. It allocates only when it is created and when
// an interface is added; WritePacket allocates nothing.
//
// Read parses such a file back (the tests of this package and of its users check what was
// written with it); it validates every length before it uses it.
package pcapng

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Block types (the draft's section 11.1).
const (
	BlockSHB uint32 = 0x0A0D0D0A // Section Header Block
	BlockIDB uint32 = 0x00000001 // Interface Description Block
	BlockISB uint32 = 0x00000005 // Interface Statistics Block
	BlockEPB uint32 = 0x00000006 // Enhanced Packet Block
)

// Link types of an interface (the draft's link-type registry; the same values as pcap's).
const (
	LinkTypeEthernet uint16 = 1   // LINKTYPE_ETHERNET: packets start with an Ethernet header
	LinkTypeRaw      uint16 = 101 // LINKTYPE_RAW: packets start with an IPv4 or IPv6 header
)

// Option codes used by this package.
const (
	optSHBUserAppl = 4 // shb_userappl
	optIfName      = 2 // if_name
	optIfDesc      = 3 // if_description
	optIfTsresol   = 9 // if_tsresol
	optEPBFlags    = 2 // epb_flags
	optISBStart    = 2 // isb_starttime
	optISBEnd      = 3 // isb_endtime
	optISBIfRecv   = 4 // isb_ifrecv
	optISBIfDrop   = 5 // isb_ifdrop
)

// Direction values of a packet's epb_flags (bits 0-1).
const (
	DirUnknown  uint32 = 0
	DirInbound  uint32 = 1
	DirOutbound uint32 = 2
)

// byteOrderMagic is the SHB's byte-order magic.
const byteOrderMagic = 0x1A2B3C4D

// MaxBlock is the longest block Writer writes and Read accepts (a packet of up to 1 MiB
// with its block's fields): the draft leaves the bound to readers, this package picks one.
const MaxBlock = 1<<20 + 1024

// Errors.
var (
	// ErrInterface: the interface ID of a packet or statistics was never added.
	ErrInterface = errors.New("pcapng: unknown interface")
	// ErrTooLarge: a packet longer than MaxBlock allows, or an option longer than 65535.
	ErrTooLarge = errors.New("pcapng: block too large")
	// ErrFormat: Read found something that is not a valid pcapng file.
	ErrFormat = errors.New("pcapng: malformed file")
)

// Interface describes one capture interface (an Interface Description Block).
type Interface struct {
	// LinkType is what every packet starts with (LinkTypeRaw, LinkTypeEthernet, ...).
	LinkType uint16
	// SnapLen is the most bytes of a packet captured (0: no limit).
	SnapLen uint32
	// Name and Description are if_name and if_description ("" for none).
	Name, Description string
	// TsResol is if_tsresol: timestamps count units of 10^-TsResol s. 0 means 6
	// (microseconds, the draft's default); at most 9 (nanoseconds).
	TsResol uint8
}

// Writer writes one pcapng section to an io.Writer.
type Writer struct {
	w     io.Writer
	scale []uint64 // per interface: nanoseconds per timestamp unit
	buf   []byte   // a block's fields before or after the packet data
	err   error    // the first error; every later call returns it
}

// NewWriter writes a Section Header Block to w (with shb_userappl set to app, when not
// empty) and returns a Writer for the section's other blocks. The section length is left
// unspecified (-1), so the file can be written as a stream.
func NewWriter(w io.Writer, app string) (*Writer, error) {
	pw := &Writer{w: w, buf: make([]byte, 0, 256)}
	b := pw.begin(BlockSHB)
	b = binary.LittleEndian.AppendUint32(b, byteOrderMagic)
	b = binary.LittleEndian.AppendUint16(b, 1) // major version
	b = binary.LittleEndian.AppendUint16(b, 0) // minor version
	b = binary.LittleEndian.AppendUint64(b, ^uint64(0))
	if app != "" {
		var err error
		if b, err = appendOption(b, optSHBUserAppl, []byte(app)); err != nil {
			return nil, err
		}
	}
	b = appendEnd(b)
	if err := pw.finish(b); err != nil {
		return nil, err
	}
	return pw, nil
}

// AddInterface writes an Interface Description Block and returns the interface's ID, the
// index that packets refer to it by (0 for the first, then 1, ...).
func (w *Writer) AddInterface(ifc Interface) (uint32, error) {
	if w.err != nil {
		return 0, w.err
	}
	res := ifc.TsResol
	if res == 0 {
		res = 6
	}
	if res > 9 {
		return 0, fmt.Errorf("pcapng: if_tsresol %d: at most 9 (nanoseconds)", res)
	}
	b := w.begin(BlockIDB)
	b = binary.LittleEndian.AppendUint16(b, ifc.LinkType)
	b = binary.LittleEndian.AppendUint16(b, 0) // reserved
	b = binary.LittleEndian.AppendUint32(b, ifc.SnapLen)
	var err error
	for _, o := range []struct {
		code uint16
		v    string
	}{{optIfName, ifc.Name}, {optIfDesc, ifc.Description}} {
		if o.v != "" {
			if b, err = appendOption(b, o.code, []byte(o.v)); err != nil {
				return 0, err
			}
		}
	}
	if b, err = appendOption(b, optIfTsresol, []byte{res}); err != nil {
		return 0, err
	}
	b = appendEnd(b)
	if err := w.finish(b); err != nil {
		return 0, err
	}
	w.scale = append(w.scale, unitNanos(res))
	return uint32(len(w.scale) - 1), nil
}

// WritePacket writes an Enhanced Packet Block: a packet of interface ifc captured at ts
// (nanoseconds since the Unix epoch, stored in the interface's resolution), origLen bytes
// long on the wire, of which the captured bytes are head followed by tail (either may be
// empty: a packet given in two pieces is not copied together first). dir is DirInbound,
// DirOutbound or DirUnknown (then no epb_flags option is written). An origLen shorter than
// what was captured is raised to it.
func (w *Writer) WritePacket(ifc uint32, ts int64, origLen int, dir uint32, head, tail []byte) error {
	if w.err != nil {
		return w.err
	}
	if int(ifc) >= len(w.scale) || ifc > 1<<31 {
		return ErrInterface
	}
	capLen := len(head) + len(tail)
	if capLen > MaxBlock-64 {
		return ErrTooLarge
	}
	origLen = max(origLen, capLen)
	if uint64(origLen) > 1<<32-1 {
		return ErrTooLarge
	}
	t := uint64(max(ts, 0)) / w.scale[ifc]
	b := w.begin(BlockEPB)
	b = binary.LittleEndian.AppendUint32(b, ifc)
	b = binary.LittleEndian.AppendUint32(b, uint32(t>>32))
	b = binary.LittleEndian.AppendUint32(b, uint32(t))
	b = binary.LittleEndian.AppendUint32(b, uint32(capLen))
	b = binary.LittleEndian.AppendUint32(b, uint32(origLen))
	pad := pad4(capLen)
	// The trailer, after the data: its padding, the options, the total length.
	tr := len(b)
	b = append(b, make([]byte, pad)...)
	if dir != DirUnknown {
		b = binary.LittleEndian.AppendUint16(b, optEPBFlags)
		b = binary.LittleEndian.AppendUint16(b, 4)
		b = binary.LittleEndian.AppendUint32(b, dir&3)
		b = appendEnd(b)
	}
	total := len(b) + capLen + 4
	binary.LittleEndian.PutUint32(b[4:8], uint32(total))
	b = binary.LittleEndian.AppendUint32(b, uint32(total))
	w.buf = b
	w.write(b[:tr])
	w.write(head)
	w.write(tail)
	w.write(b[tr:])
	return w.err
}

// Stats are an interface's counters, written in an Interface Statistics Block.
type Stats struct {
	// Start and End are when the capture began and ended (nanoseconds since the epoch).
	Start, End int64
	// Received is isb_ifrecv: the packets the interface saw (written or dropped).
	Received uint64
	// Dropped is isb_ifdrop: the packets not written for lack of buffer space.
	Dropped uint64
}

// WriteStats writes an Interface Statistics Block for interface ifc, timestamped at
// s.End.
func (w *Writer) WriteStats(ifc uint32, s Stats) error {
	if w.err != nil {
		return w.err
	}
	if int(ifc) >= len(w.scale) {
		return ErrInterface
	}
	sc := w.scale[ifc]
	ts := func(b []byte, ns int64) []byte {
		t := uint64(max(ns, 0)) / sc
		b = binary.LittleEndian.AppendUint32(b, uint32(t>>32))
		return binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	b := w.begin(BlockISB)
	b = binary.LittleEndian.AppendUint32(b, ifc)
	b = ts(b, s.End)
	for _, o := range []struct {
		code uint16
		v    uint64
		time bool
	}{{optISBStart, uint64(s.Start), true}, {optISBEnd, uint64(s.End), true},
		{optISBIfRecv, s.Received, false}, {optISBIfDrop, s.Dropped, false}} {
		b = binary.LittleEndian.AppendUint16(b, o.code)
		b = binary.LittleEndian.AppendUint16(b, 8)
		if o.time {
			b = ts(b, int64(o.v))
		} else {
			b = binary.LittleEndian.AppendUint64(b, o.v)
		}
	}
	b = appendEnd(b)
	return w.finish(b)
}

// Err returns the first error a write met (nil if none).
func (w *Writer) Err() error { return w.err }

// begin starts a block of type t in w.buf, its total length to be filled in by finish.
func (w *Writer) begin(t uint32) []byte {
	b := binary.LittleEndian.AppendUint32(w.buf[:0], t)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// finish closes the block in b and writes it.
func (w *Writer) finish(b []byte) error {
	total := len(b) + 4
	binary.LittleEndian.PutUint32(b[4:8], uint32(total))
	b = binary.LittleEndian.AppendUint32(b, uint32(total))
	w.buf = b
	w.write(b)
	return w.err
}

func (w *Writer) write(b []byte) {
	if w.err != nil || len(b) == 0 {
		return
	}
	_, w.err = w.w.Write(b)
}

// appendOption appends an option (code, length, value padded to 32 bits).
func appendOption(b []byte, code uint16, v []byte) ([]byte, error) {
	if len(v) > 0xffff {
		return b, ErrTooLarge
	}
	b = binary.LittleEndian.AppendUint16(b, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	return append(b, make([]byte, pad4(len(v)))...), nil
}

// appendEnd appends opt_endofopt.
func appendEnd(b []byte) []byte { return append(b, 0, 0, 0, 0) }

// pad4 is how many bytes pad n to a multiple of 4.
func pad4(n int) int { return (4 - n%4) % 4 }
