package congestion

import "testing"

func TestDbgFair(t *testing.T) {
	cfg := baseSim(2)
	dc := DefaultDelayConfig()
	cfg.delay = &dc
	cfg.seed = 1
	cfg.baseRTT = 10_000
	cfg.lateStart = cfg.duration / 3
	r := runSim(t, cfg)
	for i, f := range r.flows {
		st := f.Stats()
		t.Logf("flow %d: %.3f Gbit/s cwnd %d base %d target %d last %d srtt %d dd %d ld %d rl %d ss %v", i, r.throughput[i], st.Cwnd, st.BaseDelay, st.TargetDelay, st.LastDelay, st.SmoothedDelay, st.DelayDecreases, st.LossDecreases, st.RandomLosses, st.SlowStart)
	}
}
