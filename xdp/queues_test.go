package xdp

import (
	"slices"
	"strings"
	"testing"
)

// planQueues: every queue by default; a named set must exist, and with SteerServeAll must
// be every queue; the refusal names the fixes.
func TestPlanQueues(t *testing.T) {
	for _, c := range []struct {
		name   string
		rx     int
		want   []int
		steer  Steering
		got    []int
		errHas []string
	}{
		{"default serves all", 4, nil, SteerServeAll, []int{0, 1, 2, 3}, nil},
		{"one queue", 1, nil, SteerServeAll, []int{0}, nil},
		{"no count reported", 0, nil, SteerServeAll, []int{0}, nil},
		{"all named, any order", 3, []int{2, 0, 1}, SteerServeAll, []int{2, 0, 1}, nil},
		{"subset refused", 4, []int{0}, SteerServeAll, nil,
			[]string{"4 RX queues", "serves only [0]", "ethtool -L eth9 combined 1", "SteerNtuple", "ethtool -N eth9"}},
		{"subset with ntuple", 4, []int{2}, SteerNtuple, []int{2}, nil},
		{"subset steered outside", 8, []int{1, 5}, SteerExternal, []int{1, 5}, nil},
		{"missing queue", 2, []int{0, 1, 2}, SteerServeAll, nil, []string{"2 RX queues (0-1)", "no queue 2", "ethtool -l eth9"}},
		{"queue named twice", 4, []int{1, 1}, SteerExternal, nil, []string{"named twice"}},
		{"ntuple without queues", 4, nil, SteerNtuple, nil, []string{"needs Config.Queues"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := planQueues("eth9", c.rx, c.want, c.steer)
			if c.errHas != nil {
				if err == nil {
					t.Fatalf("plan %v, want an error", got)
				}
				for _, s := range c.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				return
			}
			if err != nil || !slices.Equal(got, c.got) {
				t.Fatalf("plan %v, %v; want %v", got, err, c.got)
			}
		})
	}
}

// DefaultQueueSizes shares the frame budget out within the floor and the ceiling, and
// sizeQueues fills what the caller left at 0 into a valid configuration.
func TestDefaultQueueSizes(t *testing.T) {
	for _, c := range []struct {
		n      int
		frames int
		ring   uint32
	}{{1, 8192, 4096}, {4, 8192, 4096}, {5, 4096, 2048}, {8, 4096, 2048}, {16, 2048, 1024}, {32, 1024, 512}, {64, 1024, 512}, {256, 1024, 512}} {
		f, r := DefaultQueueSizes(c.n)
		if f != c.frames || r != c.ring {
			t.Errorf("%d queues: %d frames, ring %d; want %d, %d", c.n, f, r, c.frames, c.ring)
		}
	}
	for _, c := range []Config{{}, {Frames: 3000}, {RingSize: 256}, {Frames: 512, RingSize: 256}} {
		in := c
		if err := c.sizeQueues(8); err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		if c.Frames == 0 || c.RingSize == 0 || uint64(c.Frames) < uint64(c.RingSize)*3/2 {
			t.Fatalf("%+v sized to %d frames, ring %d", in, c.Frames, c.RingSize)
		}
	}
	bad := Config{Frames: 100, RingSize: 256}
	if err := bad.sizeQueues(1); err == nil {
		t.Fatal("100 frames for a 256-entry ring accepted")
	}
}
