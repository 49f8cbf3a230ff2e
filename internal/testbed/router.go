package testbed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// Router is the middle namespace of a routed bed (Options.Routed): it holds one veth end on
// A's link and one on B's and forwards IPv4 between them.
//
// Its fields are set by [New] and must not be modified. A Router is safe for concurrent use.
type Router struct {
	// NS is the router's namespace's name.
	NS string
	// A is the router's interface on A's link, as a Host in NS: its Addr is A's gateway
	// (Bed.A.Gateway) and its MAC A's next hop towards B (Bed.A.GatewayMAC).
	A *Host
	// B is the router's interface on B's link, as a Host in NS: its Addr is B's gateway
	// and its MAC B's next hop towards A.
	B *Host
}

// Do runs fn inside the router's namespace, as [Host.Do] does.
func (r *Router) Do(fn func() error) error { return r.A.Do(fn) }

// Command returns a command that runs name with args inside the router's namespace, as
// [Host.Command] does (tc, ip, tshark on the router's interfaces).
func (r *Router) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return r.A.Command(ctx, name, args...)
}

// Forwarded returns the number of IPv4 datagrams the router's kernel has forwarded since
// its namespace was created (ForwDatagrams in /proc/net/snmp, RFC 4293
// ipSystemStatsOutForwDatagrams). With a delay line (Options.Path) the kernel forwards
// nothing and it stays 0: Bed.PathStats counts what the line forwarded.
func (r *Router) Forwarded() (uint64, error) {
	v, err := r.A.SNMPCounter("Ip", "ForwDatagrams")
	if err != nil {
		return 0, err
	}
	return uint64(v), nil
}

// setupRouting turns forwarding on in the router, sets the reverse-path filter in all
// three namespaces, adds A's and B's routes to each other's subnet through the router, and
// fills in the hosts' gateway MACs. It runs after the links are up.
func (b *Bed) setupRouting() error {
	r := b.R
	if err := r.Do(func() error { return setForwarding(true, r.A.Ifname, r.B.Ifname) }); err != nil {
		return fmt.Errorf("turn forwarding on in %s: %w", r.NS, err)
	}
	for _, h := range []*Host{b.A, r.A, b.B} {
		ifnames := []string{h.Ifname}
		if h == r.A {
			ifnames = append(ifnames, r.B.Ifname)
		}
		if err := h.Do(func() error { return setRPFilter(rpFilterStrict, ifnames...) }); err != nil {
			return fmt.Errorf("set rp_filter in %s: %w", h.NS, err)
		}
	}
	for _, rt := range []struct {
		h   *Host
		dst string
	}{{b.A, b.B.Prefix.String()}, {b.B, b.A.Prefix.String()}} {
		if _, err := runIP("-n", rt.h.NS, "route", "add", rt.dst, "via", rt.h.Gateway.String(),
			"dev", rt.h.Ifname); err != nil {
			return fmt.Errorf("add route: %w", err)
		}
	}
	b.A.GatewayMAC, b.B.GatewayMAC = r.A.MAC, r.B.MAC
	return nil
}

// LinkCounters are the kernel's counters of one interface (`ip -s link`).
type LinkCounters struct {
	RxPackets, RxBytes, RxDropped uint64 // received by the interface, and dropped on receive
	TxPackets, TxBytes, TxDropped uint64 // transmitted by the interface, and dropped on transmit
}

// LinkCounters returns the kernel's counters of h's veth end.
func (h *Host) LinkCounters() (LinkCounters, error) {
	out, err := runIP("-j", "-s", "-n", h.NS, "link", "show", "dev", h.Ifname)
	if err != nil {
		return LinkCounters{}, err
	}
	type dir struct {
		Bytes   uint64 `json:"bytes"`
		Packets uint64 `json:"packets"`
		Dropped uint64 `json:"dropped"`
	}
	var links []struct {
		Stats struct {
			Rx dir `json:"rx"`
			Tx dir `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return LinkCounters{}, fmt.Errorf("parse ip -s link output: %w", err)
	}
	if len(links) != 1 {
		return LinkCounters{}, fmt.Errorf("ip -s link show dev %s in %s: %d links", h.Ifname, h.NS, len(links))
	}
	s := links[0].Stats
	return LinkCounters{RxPackets: s.Rx.Packets, RxBytes: s.Rx.Bytes, RxDropped: s.Rx.Dropped,
		TxPackets: s.Tx.Packets, TxBytes: s.Tx.Bytes, TxDropped: s.Tx.Dropped}, nil
}

// SNMPCounter returns one counter of h's namespace from /proc/net/snmp: group is the line
// prefix without the colon ("Ip", "Icmp", "Udp", ...), field the column name
// ("ForwDatagrams", "InDestUnreachs", ...).
func (h *Host) SNMPCounter(group, field string) (int64, error) {
	var data []byte
	// /proc/net follows the thread group leader's namespace; thread-self follows ours.
	err := h.Do(func() (err error) { data, err = os.ReadFile("/proc/thread-self/net/snmp"); return err })
	if err != nil {
		return 0, err
	}
	return snmpField(data, group, field)
}

// snmpField finds field of group in the contents of /proc/net/snmp, where each group is a
// line of names followed by a line of values, both starting with "<group>:".
func snmpField(data []byte, group, field string) (int64, error) {
	prefix := group + ":"
	sc := bufio.NewScanner(bytes.NewReader(data))
	var names []string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != prefix {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		if len(f) != len(names) {
			return 0, fmt.Errorf("snmp group %s: %d names, %d values", group, len(names), len(f))
		}
		for i, n := range names {
			if n == field {
				v, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("snmp %s %s: %w", group, field, err)
				}
				return v, nil
			}
		}
		return 0, fmt.Errorf("snmp group %s has no field %s", group, field)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("snmp group %s not found", group)
}
