package testbed

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// ethHeaderLen is the Ethernet header a veth frame adds to the MTU; tbf counts it.
const ethHeaderLen = 14

// maxBottleneckBytes bounds Bottleneck.Burst and Limit (tbf keeps them in 32 bits).
const maxBottleneckBytes = 1 << 30

// Bottleneck is a token-bucket rate limit (tc-tbf(8)) on the router's egress towards B: what
// R forwards to B leaves at most at Rate, after at most Burst bytes back to back, and
// waits in a queue of at most Limit bytes; what finds the queue full is dropped. It makes
// the router's B side the narrowest link of the path, where a queue builds up and drops
// happen, as at a real bottleneck. It does not add delay beyond the queue's own.
type Bottleneck struct {
	// Rate in bits per second. Must be positive.
	Rate uint64
	// Burst is the bucket size in bytes: at least one full frame (MTU + 14), at most 1 GiB.
	Burst int
	// Limit is the queue size in bytes: at least one full frame (MTU + 14), at most 1 GiB.
	Limit int
}

// QdiscStats are the counters of the root queueing discipline of the router's interface
// towards B (`tc -s qdisc show`).
type QdiscStats struct {
	// Kind is the discipline: "tbf" while a bottleneck is set, else the veth default
	// "noqueue".
	Kind string
	// Bytes and Packets are what the discipline has sent.
	Bytes, Packets uint64
	// Drops counts packets dropped (the queue was full); Overlimits counts the times a
	// packet had to wait for tokens; Requeues counts packets the device handed back.
	Drops, Overlimits, Requeues uint64
	// Backlog (bytes) and Qlen (packets) are what waits in the queue now.
	Backlog, Qlen uint64
}

// SetBottleneck installs bn on the router's interface towards B as its root queueing
// discipline (`tc qdisc replace dev <R.B> root tbf rate <Rate>bit burst <Burst> limit
// <Limit>`), replacing any bottleneck set before. Only the direction A -> B is limited;
// B -> A is not. It fails for the plain bed, a closed bed, or bn out of range (an error
// wrapping ErrInvalidOptions). A later SetMTU above Burst - 14 makes tbf drop every frame
// larger than Burst.
func (b *Bed) SetBottleneck(bn Bottleneck) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.routedOpen("set bottleneck"); err != nil {
		return err
	}
	frame := b.mtu + ethHeaderLen
	switch {
	case bn.Rate == 0:
		return fmt.Errorf("%w: bottleneck rate 0", ErrInvalidOptions)
	case bn.Burst < frame || bn.Burst > maxBottleneckBytes:
		return fmt.Errorf("%w: bottleneck burst %d bytes outside [%d, %d] (one frame at MTU %d, 1 GiB)",
			ErrInvalidOptions, bn.Burst, frame, maxBottleneckBytes, b.mtu)
	case bn.Limit < frame || bn.Limit > maxBottleneckBytes:
		return fmt.Errorf("%w: bottleneck limit %d bytes outside [%d, %d] (one frame at MTU %d, 1 GiB)",
			ErrInvalidOptions, bn.Limit, frame, maxBottleneckBytes, b.mtu)
	}
	r := b.R.B
	if _, err := runTC("-n", r.NS, "qdisc", "replace", "dev", r.Ifname, "root", "tbf",
		"rate", strconv.FormatUint(bn.Rate, 10)+"bit", "burst", strconv.Itoa(bn.Burst),
		"limit", strconv.Itoa(bn.Limit)); err != nil {
		return fmt.Errorf("set bottleneck: %w", err)
	}
	return nil
}

// ClearBottleneck removes the bottleneck from the router's interface towards B, which
// goes back to its default (no queue). Without a bottleneck it does nothing. It fails for
// the plain bed or a closed bed.
func (b *Bed) ClearBottleneck() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.routedOpen("clear bottleneck"); err != nil {
		return err
	}
	st, err := b.qdiscStats()
	if err != nil {
		return err
	}
	if st.Kind != "tbf" {
		return nil
	}
	r := b.R.B
	if _, err := runTC("-n", r.NS, "qdisc", "del", "dev", r.Ifname, "root"); err != nil {
		return fmt.Errorf("clear bottleneck: %w", err)
	}
	return nil
}

// BottleneckStats returns the counters of the root queueing discipline of the router's
// interface towards B. It fails for the plain bed or a closed bed.
func (b *Bed) BottleneckStats() (QdiscStats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.routedOpen("bottleneck stats"); err != nil {
		return QdiscStats{}, err
	}
	return b.qdiscStats()
}

// routedOpen fails unless b is a routed bed that is not closed. The caller holds b.mu.
func (b *Bed) routedOpen(what string) error {
	if b.R == nil {
		return fmt.Errorf("%s: not a routed test bed", what)
	}
	if b.closed {
		return fmt.Errorf("%s: test bed is closed", what)
	}
	return nil
}

// qdiscStats reads the root discipline of the router's interface towards B.
func (b *Bed) qdiscStats() (QdiscStats, error) {
	r := b.R.B
	out, err := runTC("-j", "-s", "-n", r.NS, "qdisc", "show", "dev", r.Ifname, "root")
	if err != nil {
		return QdiscStats{}, err
	}
	return parseQdisc(out)
}

// parseQdisc decodes `tc -j -s qdisc show ... root`: exactly one discipline.
func parseQdisc(out []byte) (QdiscStats, error) {
	var qs []struct {
		Kind       string `json:"kind"`
		Root       bool   `json:"root"`
		Bytes      uint64 `json:"bytes"`
		Packets    uint64 `json:"packets"`
		Drops      uint64 `json:"drops"`
		Overlimits uint64 `json:"overlimits"`
		Requeues   uint64 `json:"requeues"`
		Backlog    uint64 `json:"backlog"`
		Qlen       uint64 `json:"qlen"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return QdiscStats{}, fmt.Errorf("parse tc qdisc output: %w", err)
	}
	if len(qs) != 1 || !qs[0].Root {
		return QdiscStats{}, errors.New("tc qdisc show root: not exactly one root discipline")
	}
	q := qs[0]
	return QdiscStats{Kind: q.Kind, Bytes: q.Bytes, Packets: q.Packets, Drops: q.Drops,
		Overlimits: q.Overlimits, Requeues: q.Requeues, Backlog: q.Backlog, Qlen: q.Qlen}, nil
}
