//go:build !linux

package testbed

func enterNetns(string) error { return ErrNotSupported }

func killPid(int) error { return ErrNotSupported }

func onMainThread() bool { return false }
