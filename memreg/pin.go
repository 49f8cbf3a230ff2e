package memreg

import (
	"fmt"
	"os"
)

// pinTable counts, per page, the registrations that pinned it, so that overlapping regions
// outside the UMEM can be registered and deregistered in any order: a page is locked by
// the first registration that covers it and unlocked when the last one goes. It is used
// under Registry.mu only.
type pinTable struct {
	count map[uint64]int32 // page number -> registrations covering it
}

var pageSize = uint64(os.Getpagesize())

// pages returns the page numbers [first, end) that cover [va, va+n).
func pages(va, n uint64) (first, end uint64) {
	return va / pageSize, (va + n + pageSize - 1) / pageSize
}

// pin locks [va, va+n) in memory and counts its pages. On error nothing changed.
func (t *pinTable) pin(va, n uint64) error {
	if err := mlock(va, n); err != nil {
		// mlock may have locked a prefix of the range before it failed (a range crossing
		// an unmapped page, EAGAIN part way): unlock again the pages nothing else pinned.
		first, end := pages(va, n)
		t.unlockUncounted(first, end)
		return fmt.Errorf("%w: mlock %d bytes at %#x: %w", ErrPin, n, va, err)
	}
	if t.count == nil {
		t.count = make(map[uint64]int32)
	}
	first, end := pages(va, n)
	for p := first; p < end; p++ {
		t.count[p]++
	}
	return nil
}

// unpin drops the counts of [va, va+n)'s pages and unlocks the pages no other
// registration covers.
func (t *pinTable) unpin(va, n uint64) {
	first, end := pages(va, n)
	for p := first; p < end; p++ {
		if t.count[p]--; t.count[p] <= 0 {
			delete(t.count, p)
		}
	}
	t.unlockUncounted(first, end)
}

// unlockUncounted unlocks, in runs, the pages of [first, end) that no registration covers.
func (t *pinTable) unlockUncounted(first, end uint64) {
	run := uint64(0) // start of the current run of pages to unlock, valid while inRun
	inRun := false
	for p := first; p <= end; p++ {
		free := p < end && t.count[p] <= 0
		switch {
		case free && !inRun:
			run, inRun = p, true
		case !free && inRun:
			munlock(run*pageSize, (p-run)*pageSize)
			inRun = false
		}
	}
}

// pinned reports how many pages the table holds locked (Registry.Stats, tests).
func (t *pinTable) pinned() int { return len(t.count) }

// releaseAll unlocks every page the table holds and forgets them.
func (t *pinTable) releaseAll() {
	for p := range t.count {
		munlock(p*pageSize, pageSize)
	}
	clear(t.count)
}
