//go:build linux

package testbed

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Locking the main goroutine in init keeps it on the process's main thread, which lets
// TestMain exercise runLocked's main-thread path deterministically.
func init() { runtime.LockOSThread() }

// mainThreadResult is what TestMain found when running runLocked on the main thread.
var mainThreadResult error

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) == "1" {
		os.Exit(crashChild())
	}
	mainThreadResult = runOnMainThread()
	os.Exit(m.Run())
}

// runOnMainThread calls runLocked from the main thread with an enter function that only
// records its thread id, and checks that the work ran elsewhere and that the main thread
// is usable (unlocked once, as locked once by init) afterwards.
func runOnMainThread() error {
	if !onMainThread() {
		return errors.New("TestMain does not run on the main thread")
	}
	var enterTid, fnTid int
	result := make(chan error, 1)
	runLocked(
		func() error { enterTid = unix.Gettid(); return nil },
		func() error { fnTid = unix.Gettid(); return nil },
		result)
	if err := <-result; err != nil {
		return err
	}
	if enterTid == unix.Getpid() || fnTid != enterTid {
		return fmt.Errorf("enter ran on thread %d and fn on %d; the main thread is %d", enterTid, fnTid, unix.Getpid())
	}
	return nil
}

// TestRunLockedAvoidsMainThread checks that namespace switching never happens on the main
// thread, which Go cannot retire (see runLocked).
func TestRunLockedAvoidsMainThread(t *testing.T) {
	if mainThreadResult != nil {
		t.Fatal(mainThreadResult)
	}
}
