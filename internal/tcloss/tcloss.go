//go:build linux

// Package tcloss drops a fraction of the packets leaving (or entering) an interface at
// random: a tc BPF classifier (BPF_PROG_TYPE_SCHED_CLS, attached with tcx) that returns
// TC_ACT_SHOT with a probability set from Go and counts what it passed and dropped. The test
// bed's router uses it for random loss on a real path, since this kernel has no netem. Test
// tooling: nothing of the product imports it.
package tcloss

import (
	"errors"
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// Loss is the program attached to one interface in one direction. Close detaches it.
type Loss struct {
	objs tclossObjects
	link link.Link
}

// Attach loads the program and attaches it to interface ifindex (in the network namespace
// of the calling thread) on egress, or on ingress, dropping nothing until Set. Needs root.
func Attach(ifindex int, egress bool) (*Loss, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("tcloss: remove memlock limit: %w", err)
	}
	l := &Loss{}
	if err := loadTclossObjects(&l.objs, nil); err != nil {
		return nil, fmt.Errorf("tcloss: load: %w", err)
	}
	at := ebpf.AttachTCXIngress
	if egress {
		at = ebpf.AttachTCXEgress
	}
	lk, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: l.objs.Tcloss, Attach: at})
	if err != nil {
		l.objs.Close()
		return nil, fmt.Errorf("tcloss: attach to ifindex %d: %w", ifindex, err)
	}
	l.link = lk
	return l, nil
}

// Set makes the program drop each packet with probability p (0 to 1).
func (l *Loss) Set(p float64) error {
	if p < 0 || p > 1 || math.IsNaN(p) {
		return fmt.Errorf("tcloss: probability %v not in [0, 1]", p)
	}
	return l.objs.LossThreshold.Update(uint32(0), Threshold(p), ebpf.UpdateAny)
}

// Threshold is the program's threshold for probability p: a packet is dropped when a
// uniform 32-bit random number is below it (1<<32 drops everything).
func Threshold(p float64) uint64 {
	return uint64(math.Round(p * (1 << 32)))
}

// Counters returns how many packets the program passed and dropped, over all CPUs.
func (l *Loss) Counters() (passed, dropped uint64, err error) {
	var per []tclossCounters
	if err := l.objs.LossCounters.Lookup(uint32(0), &per); err != nil {
		return 0, 0, fmt.Errorf("tcloss: read counters: %w", err)
	}
	for _, c := range per {
		passed += c.Passed
		dropped += c.Dropped
	}
	return passed, dropped, nil
}

// Run runs the program once on pkt (BPF_PROG_TEST_RUN) and returns its verdict: 0
// (TC_ACT_OK) or 2 (TC_ACT_SHOT). For tests.
func (l *Loss) Run(pkt []byte) (uint32, error) {
	v, err := l.objs.Tcloss.Run(&ebpf.RunOptions{Data: pkt})
	if err != nil {
		return 0, fmt.Errorf("tcloss: test run: %w", err)
	}
	return v, nil
}

// Close detaches the program and releases it.
func (l *Loss) Close() error {
	var err error
	if l.link != nil {
		err = l.link.Close()
		l.link = nil
	}
	return errors.Join(err, l.objs.Close())
}
