package frame

import (
	"encoding/binary"
	"math/bits"
)

// Checksum accumulates the Internet checksum (RFC 1071: the 16-bit ones' complement of the
// ones' complement sum of 16-bit big-endian words) over data that arrives in pieces.
//
// Add feeds it bytes as one continuous stream: pieces may have any length, odd included, and
// the accumulator remembers whether the stream so far ended in the middle of a 16-bit word,
// so summing a datagram as several segments gives the same result as summing it in one go.
// AddUint16 and AddUint32 add word-aligned header fields (pseudo-header addresses, lengths,
// ports) that are not part of that stream.
//
// The zero value is an empty sum, ready to use. A Checksum is a small value with no
// pointers: copy it to fork a partial sum. It is not safe for concurrent use; nothing it does
// allocates.
type Checksum struct {
	// sum is the ones' complement sum so far, kept in 64 bits with end-around carry. Every
	// value is congruent to the 16-bit sum modulo 0xFFFF.
	sum uint64
	// odd reports that an odd number of stream bytes have been added, so the next stream
	// byte is the low-order half of a 16-bit word.
	odd bool
}

// Reset empties the accumulator.
func (c *Checksum) Reset() { *c = Checksum{} }

// Add adds b to the byte stream being summed.
func (c *Checksum) Add(b []byte) {
	if len(b) == 0 {
		return
	}
	// Ones' complement sums do not depend on byte order (RFC 1071 section 2(B)): summing
	// little-endian words and swapping the bytes of the result equals summing big-endian
	// words. When the stream is at an odd offset, b's bytes sit in the opposite halves of
	// the words, which is exactly the unswapped little-endian sum.
	s := sumLE(b)
	if !c.odd {
		s = bits.ReverseBytes16(s)
	}
	c.add(uint64(s))
	if len(b)&1 == 1 {
		c.odd = !c.odd
	}
}

// AddUint16 adds v as one 16-bit word at an even offset, whatever the parity of the byte
// stream: use it for header and pseudo-header fields.
func (c *Checksum) AddUint16(v uint16) { c.add(uint64(v)) }

// AddUint32 adds v as two 16-bit words (v>>16 and v&0xFFFF) at an even offset, whatever the
// parity of the byte stream: use it for IPv4 addresses and 32-bit pseudo-header fields.
func (c *Checksum) AddUint32(v uint32) { c.add(uint64(v>>16) + uint64(v&0xFFFF)) }

// Fold returns the value to store in a checksum field: the ones' complement of the sum
// folded to 16 bits. Summing data that includes a correct checksum field folds to 0.
func (c Checksum) Fold() uint16 { return ^fold64(c.sum) }

// add adds x with end-around carry.
func (c *Checksum) add(x uint64) {
	s, carry := bits.Add64(c.sum, x, 0)
	c.sum = s + carry
}

// fold64 reduces a 64-bit ones' complement sum to 16 bits. It returns 0 only for a zero sum.
func fold64(s uint64) uint16 {
	s = (s >> 32) + (s & 0xFFFFFFFF) // at most 33 bits
	s = (s >> 16) + (s & 0xFFFF)     // at most 18 bits
	s = (s >> 16) + (s & 0xFFFF)     // at most 17 bits, 0x10000 only if it was 0x1FFFF
	s = (s >> 16) + (s & 0xFFFF)
	return uint16(s)
}

// sumLE returns the ones' complement sum of b read as little-endian 16-bit words, a trailing
// odd byte counting as the low half of a word whose high half is zero, folded to 16 bits.
func sumLE(b []byte) uint16 {
	var acc, carry uint64
	// Eight bytes per add with the carry chained through the adds: four independent loads
	// and one dependent add-with-carry chain, 32 bytes per iteration.
	for len(b) >= 32 {
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b[0:8]), carry)
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b[8:16]), carry)
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b[16:24]), carry)
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b[24:32]), carry)
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, carry = bits.Add64(acc, binary.LittleEndian.Uint64(b), carry)
		b = b[8:]
	}
	acc, carry = bits.Add64(acc, 0, carry)
	acc += carry // cannot carry again: acc was at most 2^64-2 after the add of a carry
	var tail uint64
	if len(b) >= 4 {
		tail = uint64(binary.LittleEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		tail += uint64(binary.LittleEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		tail += uint64(b[0])
	}
	acc, carry = bits.Add64(acc, tail, 0)
	return fold64(acc + carry)
}
