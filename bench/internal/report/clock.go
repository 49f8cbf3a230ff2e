package report

import (
	"runtime/metrics"
	"time"
)

// monoBase anchors Now: a time.Time that carries a monotonic reading.
var monoBase = time.Now()

// Now returns monotonic nanoseconds since the process started measuring. time.Since on a
// time with a monotonic reading reads only the runtime's monotonic clock, about four times
// cheaper here than time.Now, which also reads the wall clock.
func Now() int64 { return int64(time.Since(monoBase)) }

// allocSample is reused so that reading it allocates nothing, which would count in the
// figures it measures. Measurements run one at a time.
var allocSample = []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}

// HeapObjects returns the heap objects the process allocated so far
// (runtime/metrics /gc/heap/allocs:objects; 0 if the runtime does not report it).
func HeapObjects() uint64 {
	metrics.Read(allocSample)
	if allocSample[0].Value.Kind() == metrics.KindUint64 {
		return allocSample[0].Value.Uint64()
	}
	return 0
}
