package main

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/xdpndk/xdpndk/ndk"
)

// validMessages has one valid message of every type and kind of reply.
func validMessages() []message {
	win := ndk.RemoteBuffer{Addr: 0x7f0012345000, Len: 4097, Token: 0x1a2b3c4d}
	return []message{
		{typ: typePut, name: "big.bin", size: 16 << 20},
		{typ: typePut, name: "empty", size: 0},
		{typ: typeCommit, name: "a", size: 1, crc: 0xdeadbeef},
		{typ: typeGet, name: strings.Repeat("x", maxName)},
		{typ: typeDone, name: "Odd_name-1.2"},
		{typ: typePut | typeReply, size: 4097, buf: win},
		{typ: typePut | typeReply}, // an empty file: no window
		{typ: typeGet | typeReply, size: 4097, crc: 7, buf: win},
		{typ: typeCommit | typeReply},
		{typ: typeDone | typeReply},
		{typ: typeGet | typeReply, code: codeNotFound},
		{typ: typeCommit | typeReply, code: codeBadCRC},
		{typ: typePut | typeReply, code: maxCode},
	}
}

func encodeT(t testing.TB, m message) []byte {
	t.Helper()
	b, err := m.encode(make([]byte, msgSize))
	if err != nil {
		t.Fatalf("encode %+v: %v", m, err)
	}
	return b
}

// Every valid message survives encode and parse unchanged.
func TestMessageRoundTrip(t *testing.T) {
	for _, m := range validMessages() {
		b := encodeT(t, m)
		if len(b) != msgSize {
			t.Fatalf("%v: %d bytes", m.typ, len(b))
		}
		got, err := parseMessage(b)
		if err != nil {
			t.Fatalf("parse %+v: %v", m, err)
		}
		if got != m {
			t.Fatalf("round trip: %+v, want %+v", got, m)
		}
	}
}

// The parser refuses every kind of malformed message, and encode refuses to produce them.
func TestMessageRefused(t *testing.T) {
	good := encodeT(t, message{typ: typePut, name: "f", size: 10})
	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	win := ndk.RemoteBuffer{Addr: 0x1000, Len: 10, Token: 1}
	for _, tc := range []struct {
		what string
		b    []byte
		want string
	}{
		{"empty", nil, "0 bytes"},
		{"short", good[:msgSize-1], "107 bytes"},
		{"long", append(bytes.Clone(good), 0), "109 bytes"},
		{"magic", mutate(func(b []byte) { b[0] = 'X' }), "magic"},
		{"version", mutate(func(b []byte) { b[offVersion] = 2 }), "version 2"},
		{"type 0", mutate(func(b []byte) { b[offType] = 0 }), "unknown message type"},
		{"type 5", mutate(func(b []byte) { b[offType] = 5 }), "unknown message type"},
		{"reply of nothing", mutate(func(b []byte) { b[offType] = 0x80 }), "unknown message type"},
		{"request with a code", mutate(func(b []byte) { b[offCode+1] = 1 }), "with a code"},
		{"reserved byte", mutate(func(b []byte) { b[offZero1] = 1 }), "reserved"},
		{"reserved word", mutate(func(b []byte) { b[offZero2+3] = 1 }), "reserved"},
		{"name length 0", mutate(func(b []byte) { b[offNameLen] = 0; b[offName] = 0 }), "empty name"},
		{"name length 65", mutate(func(b []byte) { b[offNameLen] = 65 }), "name length 65"},
		{"name length 255", mutate(func(b []byte) { b[offNameLen] = 255 }), "name length 255"},
		{"name shorter than its bytes", mutate(func(b []byte) { b[offName+1] = 'x' }), "after the name"},
		{"name with a slash", mutate(func(b []byte) { b[offName] = '/' }), "not a letter"},
		{"name with a NUL", mutate(func(b []byte) { b[offNameLen] = 2 }), "not a letter"},
		{"name starting with a dot", mutate(func(b []byte) { b[offName] = '.' }), "starts with a dot"},
		{"size over the limit", mutate(func(b []byte) { binary.BigEndian.PutUint64(b[offSize:], maxFileSize+1) }), "limit"},
		{"PUT with a crc", mutate(func(b []byte) { b[offCRC] = 1 }), "does not carry"},
		{"PUT with a window", mutate(func(b []byte) { b[offBuf+19] = 1 }), "does not carry"},
		{"wrapping window", mutate(func(b []byte) {
			binary.BigEndian.PutUint64(b[offBuf:], ^uint64(0))
			binary.BigEndian.PutUint64(b[offBuf+8:], 2)
		}), "wraps"},
		{"GET with a size", encodeRaw(message{typ: typeGet, name: "f", size: 1}), "does not carry"},
		{"reply with a name", encodeRaw(message{typ: typeDone | typeReply, name: "f"}), "carries no name"},
		{"unknown code", encodeRaw(message{typ: typeDone | typeReply, code: maxCode + 1}), "unknown code"},
		{"refusal with a window", encodeRaw(message{typ: typePut | typeReply, code: codeNoSpace, size: 10, buf: win}), "does not carry"},
		{"window shorter than the size", encodeRaw(message{typ: typePut | typeReply, size: 11, buf: win}), "window of 10 bytes for 11"},
		{"window for an empty file", encodeRaw(message{typ: typeGet | typeReply, buf: ndk.RemoteBuffer{Addr: 1, Token: 2}}), "empty file"},
	} {
		_, err := parseMessage(tc.b)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.what, err, tc.want)
		}
		if len(tc.b) == msgSize {
			if m, perr := parseMessage(tc.b); perr == nil {
				t.Errorf("%s: parsed as %+v", tc.what, m)
			}
		}
	}
	if _, err := (message{typ: typeGet, name: "a/b"}).encode(make([]byte, msgSize)); err == nil {
		t.Error("encode accepted a name with a slash")
	}
	if _, err := (message{typ: typeGet, name: "a"}).encode(make([]byte, msgSize-1)); err == nil {
		t.Error("encode accepted a short buffer")
	}
}

// encodeRaw lays a message out as encode does, without its checks, so that the parser's
// can be tested.
func encodeRaw(m message) []byte {
	b := make([]byte, msgSize)
	copy(b, magic[:])
	b[offVersion] = msgVersion
	b[offType] = byte(m.typ)
	binary.BigEndian.PutUint16(b[offCode:], uint16(m.code))
	b[offNameLen] = byte(len(m.name))
	binary.BigEndian.PutUint64(b[offSize:], m.size)
	binary.BigEndian.PutUint32(b[offCRC:], m.crc)
	_, _ = m.buf.AppendBinary(b[offBuf:offBuf])
	copy(b[offName:], m.name)
	return b
}

// encode and encodeRaw agree on the layout.
func TestEncodeRawMatches(t *testing.T) {
	for _, m := range validMessages() {
		if !bytes.Equal(encodeT(t, m), encodeRaw(m)) {
			t.Fatalf("%+v: encode and encodeRaw differ", m)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "A.b_c-9", strings.Repeat("z", maxName), "x."} {
		if err := checkName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", ".hidden", "a/b", "a b", "é", "a\x00", strings.Repeat("z", maxName+1)} {
		if err := checkName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// requestType recognises what claims to be a request, so that a malformed one is
// answered, and nothing else.
func TestRequestType(t *testing.T) {
	if rt, ok := requestType(encodeRaw(message{typ: typeCommit, name: "../x"})); !ok || rt != typeCommit {
		t.Errorf("a malformed COMMIT: %v %v", rt, ok)
	}
	for _, b := range [][]byte{nil, {'F', 'S', 1}, encodeRaw(message{typ: typeDone | typeReply}), bytes.Repeat([]byte{0xff}, msgSize)} {
		if rt, ok := requestType(b); ok {
			t.Errorf("%x taken for a %v", b, rt)
		}
	}
}

// FuzzParseMessage: the parser never panics, and what it accepts is canonical: encoding
// the message gives back exactly the bytes parsed.
func FuzzParseMessage(f *testing.F) {
	for _, m := range validMessages() {
		f.Add(encodeT(f, m))
	}
	f.Add([]byte{})
	f.Add([]byte("FS"))
	f.Add(bytes.Repeat([]byte{0xff}, msgSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMessage(b)
		requestType(b)
		if err != nil {
			return
		}
		out, err := m.encode(make([]byte, msgSize))
		if err != nil {
			t.Fatalf("parsed %+v but cannot encode it: %v", m, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("parsed %x as %+v, which encodes as %x", b, m, out)
		}
	})
}
