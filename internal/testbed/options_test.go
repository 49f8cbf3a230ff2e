package testbed

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// TestOptionsDefaults checks the values a zero Options turns into.
func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatalf("zero options rejected: %v", err)
	}
	if o.MTU != DefaultMTU || o.Queues != DefaultQueues || o.Prefix != defaultPrefix {
		t.Fatalf("defaults = MTU %d, queues %d, prefix %v; want %d, %d, %v",
			o.MTU, o.Queues, o.Prefix, DefaultMTU, DefaultQueues, defaultPrefix)
	}
	a, b := hostAddrs(o.Prefix)
	if a != netip.MustParseAddr("198.18.0.1") || b != netip.MustParseAddr("198.18.0.2") {
		t.Fatalf("host addresses = %v, %v; want 198.18.0.1, 198.18.0.2", a, b)
	}
}

// TestOptionsValidation checks which prefixes, MTUs and queue counts are accepted.
func TestOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		ok      bool
		prefix  string // expected masked prefix when ok
		wantErr string // substring of the error when not ok
	}{
		{name: "default", opts: Options{}, ok: true, prefix: "198.18.0.0/24"},
		{name: "jumbo", opts: Options{MTU: 9000}, ok: true, prefix: "198.18.0.0/24"},
		{name: "upper half", opts: Options{Prefix: netip.MustParsePrefix("198.19.255.0/24")}, ok: true, prefix: "198.19.255.0/24"},
		{name: "whole range", opts: Options{Prefix: netip.MustParsePrefix("198.18.0.0/15")}, ok: true, prefix: "198.18.0.0/15"},
		{name: "masked", opts: Options{Prefix: netip.MustParsePrefix("198.18.3.7/24")}, ok: true, prefix: "198.18.3.0/24"},
		{name: "slash 30", opts: Options{Prefix: netip.MustParsePrefix("198.18.0.4/30")}, ok: true, prefix: "198.18.0.4/30"},
		{name: "rfc1918", opts: Options{Prefix: netip.MustParsePrefix("10.0.0.0/24")}, wantErr: "not inside"},
		{name: "below range", opts: Options{Prefix: netip.MustParsePrefix("198.17.255.0/24")}, wantErr: "not inside"},
		{name: "above range", opts: Options{Prefix: netip.MustParsePrefix("198.20.0.0/24")}, wantErr: "not inside"},
		{name: "wider than range", opts: Options{Prefix: netip.MustParsePrefix("198.16.0.0/14")}, wantErr: "not inside"},
		{name: "ipv6", opts: Options{Prefix: netip.MustParsePrefix("2001:db8::/64")}, wantErr: "not IPv4"},
		{name: "mapped ipv6", opts: Options{Prefix: netip.MustParsePrefix("::ffff:198.18.0.0/120")}, wantErr: "not IPv4"},
		{name: "slash 31", opts: Options{Prefix: netip.MustParsePrefix("198.18.0.0/31")}, wantErr: "no room"},
		{name: "mtu small", opts: Options{MTU: 67}, wantErr: "mtu"},
		{name: "mtu large", opts: Options{MTU: 65536}, wantErr: "mtu"},
		{name: "mtu negative", opts: Options{MTU: -1}, wantErr: "mtu"},
		{name: "queues", opts: Options{Queues: MaxQueues + 1}, wantErr: "queues"},
		{name: "queues negative", opts: Options{Queues: -1}, wantErr: "queues"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.opts.withDefaults()
			if !tc.ok {
				if err == nil {
					t.Fatalf("accepted, want error containing %q", tc.wantErr)
				}
				if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %q: want ErrInvalidOptions containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if got := o.Prefix.String(); got != tc.prefix {
				t.Fatalf("prefix = %s, want %s", got, tc.prefix)
			}
			a, b := hostAddrs(o.Prefix)
			if !allowedRange.Contains(a) || !allowedRange.Contains(b) || !o.Prefix.Contains(b) {
				t.Fatalf("host addresses %v, %v escape %v or %v", a, b, o.Prefix, allowedRange)
			}
		})
	}
}

// TestNewRejectsPrefixOutsideRange checks that New refuses a bad prefix before doing
// anything that needs privileges, so it runs everywhere.
func TestNewRejectsPrefixOutsideRange(t *testing.T) {
	b, err := New(Options{Prefix: netip.MustParsePrefix("192.168.1.0/24")})
	if err == nil {
		b.Close()
		t.Fatal("New accepted 192.168.1.0/24")
	}
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("New error %v does not wrap ErrInvalidOptions", err)
	}
}

// TestSanitizeTag checks how Options.Name is reduced to a namespace name component.
func TestSanitizeTag(t *testing.T) {
	for in, want := range map[string]string{
		"":                        "",
		"Ping/AtoB":               "pingatob",
		"a-b_c d.e":               "abcde",
		"ThisNameIsMuchTooLong42": "thisnameismuchto",
		"ünï":                     "n",
	} {
		if got := sanitizeTag(in); got != want {
			t.Errorf("sanitizeTag(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNames checks the naming scheme: lengths, uniqueness inputs and parsing back.
func TestNames(t *testing.T) {
	const maxPid = 1 << 22 // PID_MAX_LIMIT on 64-bit
	for _, n := range []uint64{1, 36, 1 << 31} {
		for _, side := range []byte{'a', 'b'} {
			name, err := vethName(maxPid, n, side)
			if err != nil {
				t.Fatalf("vethName(%d, %d): %v", maxPid, n, err)
			}
			if len(name) > ifNameMax {
				t.Fatalf("veth name %q longer than %d", name, ifNameMax)
			}
		}
	}
	if _, err := vethName(maxPid, 1<<62, 'a'); err == nil {
		t.Fatal("vethName accepted a name longer than 15 bytes")
	}
	a, _ := vethName(1234, 7, 'a')
	b, _ := vethName(1234, 7, 'b')
	c, _ := vethName(1234, 8, 'a')
	if a == b || a == c {
		t.Fatalf("veth names collide: %q %q %q", a, b, c)
	}

	id := procID{pid: 4321, start: 987654}
	for _, tag := range []string{"", "pingtest"} {
		name := nsName(id, 5, tag, 'b')
		if !strings.HasPrefix(name, NSPrefix) || !strings.HasSuffix(name, "-b") {
			t.Fatalf("nsName = %q", name)
		}
		got, ok := parseNSName(name)
		if !ok || got != id {
			t.Fatalf("parseNSName(%q) = %+v, %v; want %+v", name, got, ok, id)
		}
	}
	for _, foreign := range []string{"", "red", "xdpndk", "xdpndk-", "xdpndk-tb-abc-1-2-a", "xdpndk-tb-12-x-2-a", "xdpndk-tb-12-3", "xdpndk-17900-1-tx-a", "other-12-3-4-a"} {
		if _, ok := parseNSName(foreign); ok {
			t.Errorf("parseNSName(%q) accepted a name this package does not make", foreign)
		}
	}
}

// TestCreatorAlive checks the liveness test Sweep relies on, on this very process.
func TestCreatorAlive(t *testing.T) {
	start, running, err := procStart(os.Getpid())
	if err != nil || !running || start == 0 {
		t.Fatalf("procStart(self) = %d, %v, %v", start, running, err)
	}
	if selfID.start != start {
		t.Fatalf("selfID.start = %d, want %d", selfID.start, start)
	}
	if alive, err := creatorAlive(selfID); err != nil || !alive {
		t.Fatalf("creatorAlive(self) = %v, %v", alive, err)
	}
	if alive, err := creatorAlive(procID{pid: selfID.pid, start: start + 1}); err != nil || alive {
		t.Fatalf("creatorAlive(self with another start time) = %v, %v; want false (pid reuse)", alive, err)
	}
	if alive, err := creatorAlive(procID{pid: 1 << 23}); err != nil || alive {
		t.Fatalf("creatorAlive(impossible pid) = %v, %v; want false", alive, err)
	}
}

// TestWithInvalidOptions: With refuses what New refuses, before touching anything, and
// does not run fn.
func TestWithInvalidOptions(t *testing.T) {
	ran := false
	got, err := With(Options{MTU: 67}, func(*Bed) (int, error) { ran = true; return 1, nil })
	if !errors.Is(err, ErrInvalidOptions) || ran || got != 0 {
		t.Fatalf("With(invalid) = %d, %v (fn ran: %v); want ErrInvalidOptions without running fn", got, err, ran)
	}
}

func TestParsePing(t *testing.T) {
	out := []byte("PING 198.18.2.2 (198.18.2.2) 56(84) bytes of data.\n" +
		"64 bytes from 198.18.2.2: icmp_seq=1 ttl=63 time=2.13 ms\n" +
		"64 bytes from 198.18.2.2: icmp_seq=2 ttl=63 time=10.0 ms\n\n" +
		"--- 198.18.2.2 ping statistics ---\nrtt min/avg/max/mdev = 2.130/6.065/10.000/3.935 ms\n")
	got := parsePing(out)
	if len(got) != 2 || got[0] != 2130*time.Microsecond || got[1] != 10*time.Millisecond {
		t.Errorf("parsePing = %v", got)
	}
}

func TestPathOptions(t *testing.T) {
	if _, err := (Options{Path: &PathConfig{Delay: time.Millisecond}}).withDefaults(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("path without a router: %v, want ErrInvalidOptions", err)
	}
	if _, err := (Options{Routed: true, Path: &PathConfig{Delay: -1}}).withDefaults(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("negative delay: %v, want ErrInvalidOptions", err)
	}
	if _, err := (Options{Routed: true, Path: &PathConfig{Delay: time.Millisecond, Rate: 1e9}}).withDefaults(); err != nil {
		t.Errorf("valid path: %v", err)
	}
}
