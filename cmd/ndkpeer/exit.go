//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/xdpndk/xdpndk/ndk"
)

// Exit codes (the package documentation lists them for users).
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitPrivilege   = 3
	exitNoInterface = 4
	exitMemlock     = 5
	exitBusy        = 6
	exitOtherXDP    = 7
	exitUnreachable = 8
	exitRefused     = 9
	exitTimeout     = 10
	exitRejected    = 11
	exitInterrupted = 130
)

// cliError is an error a user will meet: a one-line message that names the fix, and the
// exit code that tells it apart.
type cliError struct {
	code int
	msg  string
	err  error // the cause, for errors.Is; not printed (msg says what matters)
}

func (e *cliError) Error() string { return e.msg }

func (e *cliError) Unwrap() error { return e.err }

// fail returns a cliError with code and a formatted message.
func fail(code int, format string, args ...any) *cliError {
	return &cliError{code: code, msg: fmt.Sprintf(format, args...)}
}

// failWrap is fail with a cause.
func failWrap(code int, err error, format string, args ...any) *cliError {
	return &cliError{code: code, msg: fmt.Sprintf(format, args...), err: err}
}

// exitCode returns the exit code for err: a cliError's own, exitInterrupted for a
// cancelled context, exitFailed otherwise.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ce *cliError
	if errors.As(err, &ce) {
		return ce.code
	}
	if errors.Is(err, context.Canceled) {
		return exitInterrupted
	}
	return exitFailed
}

// report prints err on stderr (and, with jsonOut, as a JSON document on stdout) and
// returns its exit code.
func report(cmd string, err error, jsonOut bool) int {
	code := exitCode(err)
	if err == nil {
		return code
	}
	fmt.Fprintf(os.Stderr, "ndkpeer %s: %v\n", cmd, err)
	if jsonOut {
		writeJSON(os.Stdout, struct {
			Command  string `json:"command"`
			Error    string `json:"error"`
			ExitCode int    `json:"exit_code"`
		}{cmd, err.Error(), code})
	}
	return code
}

// writeJSONLine writes v as one JSON document on one line (a -D 0 run's stream).
func writeJSONLine(w io.Writer, v any) {
	_ = json.NewEncoder(w).Encode(v)
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// connectError turns the failure of an NdkConnect to dest into the error a user reads.
func connectError(err error, dest string, port uint16) error {
	switch ndk.StatusOf(err) {
	case ndk.StatusConnectionRefused:
		return failWrap(exitRefused, err, "%s refused the connection (STATUS_CONNECTION_REFUSED): nothing listens there on this service: start 'ndkpeer serve -i IFACE' on that host, or give the server's --service", dest)
	case ndk.StatusIOTimeout:
		return failWrap(exitTimeout, err, "no answer from %s (STATUS_IO_TIMEOUT): is 'ndkpeer serve' running there, on the interface that holds that address, and is UDP port %d open between the hosts?", dest, port)
	case ndk.StatusHostUnreachable:
		return failWrap(exitUnreachable, err, "%s is unreachable (STATUS_HOST_UNREACHABLE): no ARP answer for it or its gateway: check the address and the link", dest)
	case ndk.StatusNetworkUnreachable:
		return failWrap(exitUnreachable, err, "%s is unreachable (STATUS_NETWORK_UNREACHABLE): no route to it: check the address and 'ip route'", dest)
	case ndk.StatusCancelled:
		if errors.Is(err, context.DeadlineExceeded) {
			return failWrap(exitTimeout, err, "no answer from %s within the connection timeout (--timeout): is 'ndkpeer serve' running there and UDP port %d open?", dest, port)
		}
		return failWrap(exitInterrupted, err, "interrupted while connecting to %s", dest)
	}
	return fmt.Errorf("connect to %s: %w", dest, err)
}
