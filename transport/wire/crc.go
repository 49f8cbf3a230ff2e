package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// castagnoli is the CRC32C table. hash/crc32 recognises it and uses the CPU's CRC32
// instruction (SSE4.2 on amd64, the CRC extension on arm64) when there is one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// UpdateCRC returns the CRC32C (Castagnoli, RFC 3720 appendix B.4) of the bytes summed into
// crc so far followed by b. Start from 0 and feed the header, the extension, any private data
// and the payload in order; the result is what PutTrailer stores. Safe for concurrent use; it
// does not allocate.
func UpdateCRC(crc uint32, b []byte) uint32 {
	return crc32.Update(crc, castagnoli, b)
}

// PutTrailer stores crc, the value UpdateCRC returned over everything before the trailer,
// into b[:TrailerLen] big-endian. Precondition: len(b) >= TrailerLen (a shorter b is a
// programming error and panics).
func PutTrailer(b []byte, crc uint32) {
	binary.BigEndian.PutUint32(b[:TrailerLen], crc)
}
