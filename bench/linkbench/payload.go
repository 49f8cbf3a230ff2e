package linkbench

import "encoding/binary"

// fillPattern writes the payload pattern of datagram seq: the sequence number, then bytes
// derived from it.
func fillPattern(b []byte, seq uint64) {
	if len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, seq)
	}
	for i := min(8, len(b)); i < len(b); i++ {
		b[i] = byte(seq*131 + uint64(i)*7 + 1)
	}
}

// putSeq writes seq at the start of b (the first 8 bytes of the pattern).
func putSeq(b []byte, seq uint64) {
	if len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, seq)
	}
}

// seqOf returns the sequence number at the start of a payload, or 0.
func seqOf(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}
