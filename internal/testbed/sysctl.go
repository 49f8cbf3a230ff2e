package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Per-namespace IPv4 sysctls. As with ipv6ConfDir, which namespace a process sees under
// /proc/sys/net is decided by the thread that opens the file: run these inside Host.Do.
const (
	ipv4ConfDir   = "/proc/sys/net/ipv4/conf"
	ipv4IPForward = "/proc/sys/net/ipv4/ip_forward"
)

// rpFilterStrict is the reverse-path filter mode of a routed bed: strict (RFC 3704 strict
// reverse path), a packet is accepted only if the route back to its source leaves through
// the interface it arrived on.
const rpFilterStrict = 1

// writeSysctl writes value to the sysctl file at path and checks that it reads back.
func writeSysctl(path, value string) error {
	if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return checkSysctl(path, value)
}

// checkSysctl checks that the sysctl file at path reads value.
func checkSysctl(path, value string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if got := strings.TrimSpace(string(data)); got != value {
		return fmt.Errorf("%s reads %q, want %q", path, got, value)
	}
	return nil
}

// setForwarding turns IPv4 forwarding on or off in the current namespace through
// net.ipv4.ip_forward (which sets conf/all, conf/default and every interface alike) and
// checks conf/all, conf/default and each of ifnames. Run it inside Host.Do.
func setForwarding(on bool, ifnames ...string) error {
	v := "0"
	if on {
		v = "1"
	}
	if err := writeSysctl(ipv4IPForward, v); err != nil {
		return err
	}
	for _, name := range append([]string{"all", "default"}, ifnames...) {
		if err := checkSysctl(filepath.Join(ipv4ConfDir, name, "forwarding"), v); err != nil {
			return err
		}
	}
	return nil
}

// setRPFilter sets the reverse-path filter mode (0 off, 1 strict, 2 loose) of conf/all,
// conf/default and each of ifnames in the current namespace. The kernel applies the
// larger of conf/all and the interface's value, so both are set. Run it inside Host.Do.
func setRPFilter(mode int, ifnames ...string) error {
	v := strconv.Itoa(mode)
	for _, name := range append([]string{"all", "default"}, ifnames...) {
		if err := writeSysctl(filepath.Join(ipv4ConfDir, name, "rp_filter"), v); err != nil {
			return err
		}
	}
	return nil
}
