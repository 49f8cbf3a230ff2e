package ndkbench

import (
	"runtime/metrics"
	"time"
)

// monoBase anchors now: a time.Time that carries a monotonic reading.
var monoBase = time.Now()

// now returns monotonic nanoseconds since monoBase (time.Since on a monotonic base reads
// no wall clock).
func now() int64 { return int64(time.Since(monoBase)) }

var allocSample = []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}

// heapObjects returns the heap objects the process allocated so far.
func heapObjects() uint64 {
	metrics.Read(allocSample)
	if allocSample[0].Value.Kind() == metrics.KindUint64 {
		return allocSample[0].Value.Uint64()
	}
	return 0
}
