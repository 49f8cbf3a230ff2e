package testbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ipv6ConfDir holds the per-namespace IPv6 sysctls. Which namespace a process sees there is
// decided by the namespace of the thread that opens the file, so these helpers must run
// inside Host.Do.
const ipv6ConfDir = "/proc/sys/net/ipv6/conf"

// disableIPv6All disables IPv6 on every existing interface of the current namespace ("all")
// and on every interface created in it later ("default"). A kernel without IPv6 needs
// nothing. Run it inside Host.Do.
func disableIPv6All() error {
	if _, err := os.Stat(ipv6ConfDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, name := range []string{"default", "all"} {
		if err := setDisableIPv6(name); err != nil {
			return err
		}
	}
	return nil
}

// disableIPv6On disables IPv6 on interface ifname of the current namespace and checks that
// it is disabled. Run it inside Host.Do.
func disableIPv6On(ifname string) error {
	if _, err := os.Stat(ipv6ConfDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return setDisableIPv6(ifname)
}

// setDisableIPv6 writes 1 to conf/<name>/disable_ipv6 and reads it back.
func setDisableIPv6(name string) error {
	path := filepath.Join(ipv6ConfDir, name, "disable_ipv6")
	if err := os.WriteFile(path, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	got, err := ipv6Disabled(name)
	if err != nil {
		return err
	}
	if !got {
		return fmt.Errorf("%s reads 0 after writing 1", path)
	}
	return nil
}

// ipv6Disabled reports whether conf/<name>/disable_ipv6 is 1 in the current namespace.
func ipv6Disabled(name string) (bool, error) {
	path := filepath.Join(ipv6ConfDir, name, "disable_ipv6")
	data, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(data)) == "1", nil
}
