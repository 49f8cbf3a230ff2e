package transportbench

import (
	"context"
	"testing"
	"time"
)

func TestTryIncast(t *testing.T) {
	bw := int64(10e9)
	rtt := 100 * time.Microsecond
	s := FlowSpec{Senders: 16, RTT: rtt, Mode: ModeSelective, Seed: 1, Bandwidth: bw, QueueBytes: QueueFor(bw, rtt), MaxPayload: 1472, MsgSize: 64 << 10,
		Outstanding: 16, Window: WindowFor(bw, rtt, 1472), Warmup: 100 * rtt, Measure: 200 * rtt, Sample: 10 * rtt}
	r := RunFlows(context.Background(), s)
	t.Logf("err %v steps %d real %v", r.Err, r.Steps, r.Real)
}
