package testbed

import (
	"errors"
	"fmt"
)

// Sweep removes the namespaces of beds whose creating process is gone: those named with
// NSPrefix whose recorded process id no longer runs, or now belongs to a process started
// at another time. Processes still inside such a namespace are killed and any veth end in
// it is deleted with it. Namespaces of live processes, this one included, and namespaces
// not named by this package are left alone.
//
// New calls Sweep, so a crashed test run cannot leak namespaces for longer than the next
// run. Sweep needs root and is safe for concurrent use, also across processes.
func Sweep() error {
	names, err := listNamespaces()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		id, ok := parseNSName(name)
		if !ok || id.pid == selfID.pid {
			continue
		}
		alive, err := creatorAlive(id)
		if err != nil {
			errs = append(errs, fmt.Errorf("check creator of %s: %w", name, err))
			continue
		}
		if alive {
			continue
		}
		if err := removeStale(name); err != nil {
			errs = append(errs, fmt.Errorf("remove stale namespace %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// removeStale kills what runs in namespace ns and deletes it. Deleting the namespace
// destroys the veth end inside it, and with it the pair, once nothing else holds the
// namespace; its creator is dead, so nothing of it does.
func removeStale(ns string) error {
	if err := killAll(ns); err != nil {
		return err
	}
	return deleteNamespace(ns)
}
