package ndk

import (
	"encoding/binary"
	"fmt"

	"github.com/xdpndk/xdpndk/memreg"
)

// RemoteBuffer names memory a peer may access with Write and Read: the address of its
// first byte, its length and the remote token that grants the access, the three things
// one side sends the other (in private data or a Send) before the peer can reach its
// memory. An MR (MR.Remote, MR.RemoteOf) or a bound MW (MW.Remote) gives one; the peer
// uses Addr and Token with QP.Write and QP.Read, at Addr or at any address inside the
// buffer (Slice).
//
// Its byte encoding (AppendBinary, MarshalBinary, UnmarshalBinary) is RemoteBufferSize
// bytes in network byte order: Addr (8), Len (8), Token (4). A decoded buffer is only a
// claim of the peer's: the memory's owner checks every access against the token's region
// and rights, and refuses (STATUS_ACCESS_VIOLATION) what lies outside.
type RemoteBuffer struct {
	// Addr is the virtual address of the first byte, as the owner's region names it.
	Addr uint64
	// Len is the length in bytes.
	Len uint64
	// Token is the remote token of the MR or MW that holds the buffer.
	Token uint32
}

// RemoteBufferSize is the length of a RemoteBuffer's byte encoding.
const RemoteBufferSize = 20

// AppendBinary appends the buffer's RemoteBufferSize-byte encoding to dst
// (encoding.BinaryAppender). It never fails.
func (b RemoteBuffer) AppendBinary(dst []byte) ([]byte, error) {
	dst = binary.BigEndian.AppendUint64(dst, b.Addr)
	dst = binary.BigEndian.AppendUint64(dst, b.Len)
	return binary.BigEndian.AppendUint32(dst, b.Token), nil
}

// MarshalBinary returns the buffer's RemoteBufferSize-byte encoding
// (encoding.BinaryMarshaler). It never fails.
func (b RemoteBuffer) MarshalBinary() ([]byte, error) {
	return b.AppendBinary(make([]byte, 0, RemoteBufferSize))
}

// UnmarshalBinary decodes a buffer from exactly RemoteBufferSize bytes
// (encoding.BinaryUnmarshaler). It fails, leaving b unchanged, with STATUS_INVALID_PARAMETER
// for another length or a buffer that wraps around the address space (Addr+Len overflows).
func (b *RemoteBuffer) UnmarshalBinary(data []byte) error {
	if len(data) != RemoteBufferSize {
		return errorf(StatusInvalidParameter, "remote buffer encoding of %d bytes (want %d)", len(data), RemoteBufferSize)
	}
	r := RemoteBuffer{Addr: binary.BigEndian.Uint64(data), Len: binary.BigEndian.Uint64(data[8:]),
		Token: binary.BigEndian.Uint32(data[16:])}
	if r.Addr+r.Len < r.Addr {
		return errorf(StatusInvalidParameter, "remote buffer %#x+%d wraps around", r.Addr, r.Len)
	}
	*b = r
	return nil
}

// Slice returns the part of b that is n bytes at offset off, under the same token. It fails
// with STATUS_INVALID_PARAMETER when that part does not lie inside b.
func (b RemoteBuffer) Slice(off, n uint64) (RemoteBuffer, error) {
	if off > b.Len || n > b.Len-off {
		return RemoteBuffer{}, errorf(StatusInvalidParameter, "%d bytes at offset %d of a %d-byte remote buffer", n, off, b.Len)
	}
	return RemoteBuffer{Addr: b.Addr + off, Len: n, Token: b.Token}, nil
}

// String describes the buffer, e.g. "0x7f00a0000000+65536/token 0x1a2b".
func (b RemoteBuffer) String() string {
	return fmt.Sprintf("%#x+%d/token %#x", b.Addr, b.Len, b.Token)
}

// Remote returns the whole region as a RemoteBuffer under its remote token: a normally
// registered region from its first byte, a fast-register MR over what its last
// FastRegister mapped (at FastRegister's baseVA). A peer may access it only as the
// region's flags allow.
func (mr *MR) Remote() RemoteBuffer {
	if va, n, ok := mr.fastRange(); ok {
		return RemoteBuffer{Addr: va, Len: n, Token: mr.RemoteToken()}
	}
	return RemoteBuffer{Addr: mr.VA(), Len: mr.Len(), Token: mr.RemoteToken()}
}

// RemoteOf returns the part of a normally registered region that b is, as a RemoteBuffer.
// It fails with STATUS_INVALID_PARAMETER when b does not lie inside the region (or mr is a
// fast-register MR: use Remote and Slice).
func (mr *MR) RemoteOf(b []byte) (RemoteBuffer, error) {
	if _, _, fast := mr.fastRange(); fast || len(b) == 0 {
		return RemoteBuffer{}, errorf(StatusInvalidParameter, "RemoteOf needs a non-empty buffer of a normally registered region")
	}
	whole := mr.Remote()
	return whole.Slice(memreg.VA(b)-whole.Addr, uint64(len(b)))
}

// Remote returns what the window's last Bind granted, as a RemoteBuffer under its remote
// token: valid until the window is invalidated (the token stops working then), bound
// again or closed. An unbound window gives a zero RemoteBuffer.
func (mw *MW) Remote() RemoteBuffer {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.length == 0 {
		return RemoteBuffer{}
	}
	return RemoteBuffer{Addr: mw.va, Len: mw.length, Token: mw.RemoteToken()}
}
