package link

// CookieQueue is a fixed-capacity FIFO of FlagZeroCopy cookies waiting to be reported by a
// Link's TxDone. Links use it to keep the contract: Send stops at a zero-copy packet while
// the queue is full, TxDone drains it in order. Not safe for concurrent use (the engine that
// owns the Link calls both); it never allocates after NewCookieQueue.
type CookieQueue struct {
	buf  []uint64
	head int
	n    int
}

// NewCookieQueue returns an empty queue that holds capacity cookies (at least 1).
func NewCookieQueue(capacity int) CookieQueue {
	return CookieQueue{buf: make([]uint64, max(capacity, 1))}
}

// Full reports whether Push would fail.
func (q *CookieQueue) Full() bool { return q.n == len(q.buf) }

// Len is the number of queued cookies.
func (q *CookieQueue) Len() int { return q.n }

// Push appends a cookie; it reports false, changing nothing, when the queue is full.
func (q *CookieQueue) Push(c uint64) bool {
	if q.Full() {
		return false
	}
	q.buf[(q.head+q.n)%len(q.buf)] = c
	q.n++
	return true
}

// Pop moves up to len(dst) cookies, oldest first, into dst and returns how many.
func (q *CookieQueue) Pop(dst []uint64) int {
	k := 0
	for k < len(dst) && q.n > 0 {
		dst[k] = q.buf[q.head]
		q.head = (q.head + 1) % len(q.buf)
		q.n--
		k++
	}
	return k
}
