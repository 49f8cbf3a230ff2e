package main

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/xdpndk/xdpndk/ndk"
)

// The control messages: every one is msgSize bytes, whatever its type (layout in doc.go).
// A message is what the peer claims: parseMessage checks every field, and a field a type
// does not use must be zero, so that there is one encoding of each message.
const (
	msgSize    = 108
	msgVersion = 1
	// maxName is the longest file name, in bytes.
	maxName = 64
	// maxFileSize is the largest file the format describes (1 TiB); a server's store is
	// the practical limit.
	maxFileSize = 1 << 40

	offMagic   = 0
	offVersion = 2
	offType    = 3
	offCode    = 4
	offNameLen = 6
	offZero1   = 7
	offSize    = 8
	offCRC     = 16
	offZero2   = 20
	offBuf     = 24
	offName    = offBuf + ndk.RemoteBufferSize // 44
)

// magic opens every message: "FS".
var magic = [2]byte{'F', 'S'}

// msgType is what a message asks or answers. A reply's type is its request's with
// typeReply set.
type msgType uint8

const (
	typePut    msgType = 1 // client: reserve size bytes for name; reply: the window to Write
	typeCommit msgType = 2 // client: the Writes are done, the data's CRC is crc; reply: stored
	typeGet    msgType = 3 // client: name, please; reply: the window to Read, size and CRC
	typeDone   msgType = 4 // client: the Reads are done; reply: window invalidated
	typeReply  msgType = 0x80
)

// String names the type as the protocol does.
func (t msgType) String() string {
	var s string
	switch t &^ typeReply {
	case typePut:
		s = "PUT"
	case typeCommit:
		s = "COMMIT"
	case typeGet:
		s = "GET"
	case typeDone:
		s = "DONE"
	default:
		return fmt.Sprintf("type %#x", uint8(t))
	}
	if t&typeReply != 0 {
		s += " reply"
	}
	return s
}

// code is a reply's verdict: codeOK, or why the server refused the request.
type code uint16

const (
	codeOK         code = 0
	codeNotFound   code = 1 // GET: no file of that name
	codeNoSpace    code = 2 // PUT: the store has no free extent that large now
	codeTooLarge   code = 3 // PUT: larger than the whole store
	codeBadCRC     code = 4 // COMMIT: the bytes written do not have the CRC given; nothing stored
	codeBadRequest code = 5 // the request did not parse
	codeBadState   code = 6 // the request does not fit the connection's state (COMMIT without PUT, ...)
	codeTooMany    code = 7 // PUT: the store holds its most files
	codeServer     code = 8 // the server failed (a verb it posted was refused)
	maxCode             = codeServer
)

// String says what the code means, for error messages.
func (c code) String() string {
	switch c {
	case codeOK:
		return "ok"
	case codeNotFound:
		return "no such file"
	case codeNoSpace:
		return "not enough free space in the store"
	case codeTooLarge:
		return "larger than the server's store"
	case codeBadCRC:
		return "the data the server received does not match its CRC (nothing stored)"
	case codeBadRequest:
		return "malformed request"
	case codeBadState:
		return "request out of order"
	case codeTooMany:
		return "the store holds its most files"
	case codeServer:
		return "server error"
	}
	return fmt.Sprintf("code %d", uint16(c))
}

// message is one decoded control message. Which fields a type carries:
//
//	PUT          name, size
//	COMMIT       name, size, crc
//	GET          name
//	DONE         name
//	PUT reply    size, buf (buf.Len == size; the zero buf for size 0)
//	GET reply    size, crc, buf (as PUT's)
//	other reply  nothing
//	any reply    with code != codeOK: nothing else
type message struct {
	typ  msgType
	code code
	name string
	size uint64
	crc  uint32
	buf  ndk.RemoteBuffer
}

// which fields a message type carries.
type fields struct{ name, size, crc, buf bool }

// fieldsOf returns the fields of m's type and code, and false for an unknown type.
func fieldsOf(t msgType, c code) (fields, bool) {
	switch t {
	case typePut:
		return fields{name: true, size: true}, true
	case typeCommit:
		return fields{name: true, size: true, crc: true}, true
	case typeGet, typeDone:
		return fields{name: true}, true
	case typePut | typeReply, typeGet | typeReply, typeCommit | typeReply, typeDone | typeReply:
		switch {
		case c != codeOK:
			return fields{}, true
		case t == typePut|typeReply:
			return fields{size: true, buf: true}, true
		case t == typeGet|typeReply:
			return fields{size: true, crc: true, buf: true}, true
		}
		return fields{}, true
	}
	return fields{}, false
}

// encode writes m into b (at least msgSize bytes) and returns the encoded part. It
// refuses a message parseMessage would refuse (an invalid name, a field its type does not
// carry), so that nothing this program sends is malformed.
func (m message) encode(b []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if len(b) < msgSize {
		return nil, fmt.Errorf("message buffer of %d bytes (want %d)", len(b), msgSize)
	}
	b = b[:msgSize]
	clear(b)
	copy(b[offMagic:], magic[:])
	b[offVersion] = msgVersion
	b[offType] = byte(m.typ)
	binary.BigEndian.PutUint16(b[offCode:], uint16(m.code))
	b[offNameLen] = byte(len(m.name))
	binary.BigEndian.PutUint64(b[offSize:], m.size)
	binary.BigEndian.PutUint32(b[offCRC:], m.crc)
	_, _ = m.buf.AppendBinary(b[offBuf:offBuf])
	copy(b[offName:], m.name)
	return b, nil
}

// parseMessage decodes a message of exactly msgSize bytes, checking every field: the
// magic and version, a known type, a known code (requests carry none), zero in every byte
// the type does not use, a valid name where the type has one, sizes within maxFileSize,
// and a buffer that is the size announced. It never panics, whatever b holds.
func parseMessage(b []byte) (message, error) {
	if len(b) != msgSize {
		return message{}, fmt.Errorf("message of %d bytes (want %d)", len(b), msgSize)
	}
	if b[offMagic] != magic[0] || b[offMagic+1] != magic[1] {
		return message{}, errors.New("not a filestore message (bad magic)")
	}
	if b[offVersion] != msgVersion {
		return message{}, fmt.Errorf("protocol version %d (this program speaks %d)", b[offVersion], msgVersion)
	}
	if b[offZero1] != 0 || binary.BigEndian.Uint32(b[offZero2:]) != 0 {
		return message{}, errors.New("reserved bytes not zero")
	}
	m := message{typ: msgType(b[offType]), code: code(binary.BigEndian.Uint16(b[offCode:])),
		size: binary.BigEndian.Uint64(b[offSize:]), crc: binary.BigEndian.Uint32(b[offCRC:])}
	if err := m.buf.UnmarshalBinary(b[offBuf:offName]); err != nil {
		return message{}, fmt.Errorf("remote buffer: %w", err)
	}
	n := int(b[offNameLen])
	if n > maxName {
		return message{}, fmt.Errorf("name length %d (at most %d)", n, maxName)
	}
	for _, c := range b[offName+n:] {
		if c != 0 {
			return message{}, errors.New("bytes after the name not zero")
		}
	}
	m.name = string(b[offName : offName+n])
	if err := m.check(); err != nil {
		return message{}, err
	}
	return m, nil
}

// check reports what is wrong with m: an unknown type or code, a field its type does not
// carry that is not zero, a missing or invalid name, a size over maxFileSize, a buffer of
// another length than the size.
func (m message) check() error {
	f, ok := fieldsOf(m.typ, m.code)
	if !ok {
		return fmt.Errorf("unknown message type %#x", uint8(m.typ))
	}
	if m.typ&typeReply == 0 && m.code != codeOK {
		return fmt.Errorf("%v with a code (%d)", m.typ, uint16(m.code))
	}
	if m.code > maxCode {
		return fmt.Errorf("%v with unknown code %d", m.typ, uint16(m.code))
	}
	switch {
	case f.name:
		if err := checkName(m.name); err != nil {
			return fmt.Errorf("%v: %w", m.typ, err)
		}
	case m.name != "":
		return fmt.Errorf("%v carries no name", m.typ)
	}
	if !f.size && m.size != 0 || !f.crc && m.crc != 0 || !f.buf && m.buf != (ndk.RemoteBuffer{}) {
		return fmt.Errorf("%v: a field it does not carry is not zero", m.typ)
	}
	if m.size > maxFileSize {
		return fmt.Errorf("%v: size %d over the protocol's limit %d", m.typ, m.size, uint64(maxFileSize))
	}
	if f.buf {
		if m.buf.Len != m.size {
			return fmt.Errorf("%v: a window of %d bytes for %d bytes", m.typ, m.buf.Len, m.size)
		}
		if m.size == 0 && m.buf != (ndk.RemoteBuffer{}) {
			return fmt.Errorf("%v: a window for an empty file", m.typ)
		}
	}
	return nil
}

// checkName accepts 1 to maxName bytes of letters, digits, '.', '_' and '-', not starting
// with '.': a name is only a key in the server's table, never a path, but the rule keeps
// it printable and safe to use as a file name and to log.
func checkName(name string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if len(name) > maxName {
		return fmt.Errorf("name of %d bytes (at most %d)", len(name), maxName)
	}
	if name[0] == '.' {
		return fmt.Errorf("name %q starts with a dot", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("name %q: byte %#x at %d is not a letter, digit, '.', '_' or '-'", name, c, i)
		}
	}
	return nil
}
