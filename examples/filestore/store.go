package main

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// storeAlign is the alignment of every extent in the store region.
const storeAlign = 64

var (
	errNoSpace  = errors.New("no free extent large enough")
	errTooMany  = errors.New("the store holds its most files")
	errTooLarge = errors.New("larger than the store")
)

// store is the server's memory for files: one registered region (its bytes live in buf)
// carved into extents, and the table of committed files. Safe for concurrent use by the
// connections.
//
// An extent is referenced by whoever uses it: the connection writing it (from reserve to
// commit or release), the table while it names it, and every connection reading it (from
// open to release). Its space returns to the free list when the last reference goes, so a
// file replaced or being replaced stays readable by a GET that opened it before.
type store struct {
	buf []byte

	mu       sync.Mutex
	free     []span // free space, sorted by offset, adjacent spans merged
	files    map[string]*extent
	extents  int // extents alive: reserved, in the table, or still read
	maxFiles int
}

// span is a run of free bytes of the region.
type span struct{ off, len uint64 }

// extent is a file's bytes in the store: len bytes at off, and the data's CRC once
// committed.
type extent struct {
	off, size uint64
	space     uint64 // bytes taken from the free list (size rounded up to storeAlign)
	crc       uint32
	refs      int
}

// newStore makes a store over buf (the registered region) holding at most maxFiles
// extents at once.
func newStore(buf []byte, maxFiles int) *store {
	s := &store{buf: buf, files: map[string]*extent{}, maxFiles: maxFiles}
	if len(buf) > 0 {
		s.free = []span{{0, uint64(len(buf))}}
	}
	return s
}

// reserve takes size bytes for a file being written and returns its extent, referenced
// once (by the writer). Errors: errTooLarge, errNoSpace, errTooMany.
func (s *store) reserve(size uint64) (*extent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if size > uint64(len(s.buf)) {
		return nil, errTooLarge
	}
	if s.extents >= s.maxFiles {
		return nil, errTooMany
	}
	need := (size + storeAlign - 1) &^ (storeAlign - 1)
	e := &extent{size: size, space: need, refs: 1}
	if need > 0 {
		i := 0 // first fit
		for i < len(s.free) && s.free[i].len < need {
			i++
		}
		if i == len(s.free) {
			return nil, fmt.Errorf("%w: %d bytes asked, %d free in all", errNoSpace, size, s.freeBytesLocked())
		}
		e.off = s.free[i].off
		s.free[i].off += need
		s.free[i].len -= need
		if s.free[i].len == 0 {
			s.free = append(s.free[:i], s.free[i+1:]...)
		}
	}
	s.extents++
	return e, nil
}

// bytes returns the extent's bytes in the region.
func (s *store) bytes(e *extent) []byte { return s.buf[e.off : e.off+e.size] }

// commit puts a written extent in the table under name with its CRC; the writer's
// reference becomes the table's. A file of that name is replaced (its space is freed when
// its last reader is done).
func (s *store) commit(name string, e *extent, crc uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.crc = crc
	if old := s.files[name]; old != nil {
		s.dropLocked(old)
	}
	s.files[name] = e
}

// open returns the named file's extent with a reference for the reader, or false.
func (s *store) open(name string) (*extent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.files[name]
	if e == nil {
		return nil, false
	}
	e.refs++
	return e, true
}

// release drops a reference taken by reserve (a write abandoned) or open (a read done).
func (s *store) release(e *extent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(e)
}

// dropLocked drops a reference of e and frees its space with the last one.
func (s *store) dropLocked(e *extent) {
	e.refs--
	if e.refs > 0 {
		return
	}
	s.extents--
	if e.space == 0 {
		return
	}
	i := sort.Search(len(s.free), func(i int) bool { return s.free[i].off > e.off })
	s.free = append(s.free, span{})
	copy(s.free[i+1:], s.free[i:])
	s.free[i] = span{e.off, e.space}
	// Merge with the next span, then with the previous one.
	if i+1 < len(s.free) && s.free[i].off+s.free[i].len == s.free[i+1].off {
		s.free[i].len += s.free[i+1].len
		s.free = append(s.free[:i+1], s.free[i+2:]...)
	}
	if i > 0 && s.free[i-1].off+s.free[i-1].len == s.free[i].off {
		s.free[i-1].len += s.free[i].len
		s.free = append(s.free[:i], s.free[i+1:]...)
	}
}

// usage reports the files in the table, the extents alive and the free bytes.
func (s *store) usage() (files, extents int, free uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.files), s.extents, s.freeBytesLocked()
}

func (s *store) freeBytesLocked() uint64 {
	var n uint64
	for _, f := range s.free {
		n += f.len
	}
	return n
}
