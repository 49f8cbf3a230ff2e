package xdp

import "testing"

func TestConfigRejected(t *testing.T) {
	for _, c := range []Config{
		{},
		{Interface: "x", RingSize: 100},
		{Interface: "x", RingSize: 4096, Frames: 4096},
		{Interface: "x", MTU: -1},
		{Interface: "x", Queues: []int{-1}},
		{Interface: "x", UDPChecksum: ChecksumSoftware + 1},
		{Interface: "x", UDPChecksum: -1},
	} {
		if err := c.normalize(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	// Frames and RingSize stay 0: Open sizes them by the number of queues it serves, 8192
	// and 4096 for one queue.
	if c := DefaultConfig("eth0"); c.Port != DefaultPort || c.Frames != 0 || c.RingSize != 0 || c.Logger == nil {
		t.Errorf("DefaultConfig = %+v", c)
	}
	if f, r := DefaultQueueSizes(1); f != 8192 || r != 4096 {
		t.Errorf("one queue: %d frames, ring %d; want 8192 and 4096", f, r)
	}
}
