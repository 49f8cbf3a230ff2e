package memreg

import (
	"fmt"
	"sync"
)

// carveState hands out consecutive runs of frames from the frame area, once each.
type carveState struct {
	mu   sync.Mutex
	next int
}

// take reserves n frames of total and returns the index of the first.
func (c *carveState) take(n, total int) (int, error) {
	if n <= 0 {
		return 0, fmt.Errorf("frame pool of %d frames: must be positive", n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > total-c.next {
		return 0, fmt.Errorf("frame pool of %d frames: only %d of %d left in the umem", n, total-c.next, total)
	}
	first := c.next
	c.next += n
	return first, nil
}
