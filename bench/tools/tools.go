package tools

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The fixed ports of the tools' sockets. Each bed has its own namespaces, so two beds never
// share a port; inside one bed the runners use these and nothing else listens on them.
const (
	// QperfPort is qperf's listen (synchronisation) port, its own default, given to both
	// sides explicitly (-lp).
	QperfPort = 19765
	// QperfDataPort is the port of qperf's socket tests (-ip): the TCP or UDP socket that
	// carries the measured messages.
	QperfDataPort = 19766
	// Iperf3Port is the iperf3 server's port (-p), its default; the data connections of
	// the same test use it too.
	Iperf3Port = 5201
	// SockperfPort is the UDP port the sockperf server listens on (-p), its default.
	SockperfPort = 11111
	// FabricPort is fi_pingpong's TCP control (out-of-band) port: -B on the server, -P on
	// the client; its default. The providers' data endpoints use ports the kernel picks.
	FabricPort = 47592
)

// ErrNotSupported is returned by the runners on systems other than Linux.
var ErrNotSupported = errors.New("bench/tools needs Linux (network namespaces)")

// ErrUnsupported is wrapped by the error of a run that the tool cannot do here (a libfabric
// provider or test that does not exist or refuses the size); the result says why.
var ErrUnsupported = errors.New("not supported by the tool here")

// CPUTime is the user and system CPU time of one process, including the children it
// waited for (a forking server's test processes), from its rusage at exit.
type CPUTime struct {
	User   time.Duration `json:"user_ns"`
	System time.Duration `json:"system_ns"`
}

// Total is User + System.
func (c CPUTime) Total() time.Duration { return c.User + c.System }

// Usage is what the two processes of one run cost, and how many messages they delivered.
type Usage struct {
	// Client and Server are the CPU times of the client (host A) and the server (host B),
	// each over its whole life: start-up and tear-down included, and for the server the
	// time before the client started and after it ended (short: the server is stopped as
	// soon as the client has exited). A server that spins (sockperf --nonblocked) spends
	// that time busy too.
	Client CPUTime `json:"client"`
	Server CPUTime `json:"server"`
	// ClientWall and ServerWall are each process's life, from its start to its exit.
	ClientWall time.Duration `json:"client_wall_ns"`
	ServerWall time.Duration `json:"server_wall_ns"`
	// Messages is the number of messages delivered to a receiving application during the
	// processes' lives, counted from the tool's output: each result type says from which
	// figure. A round trip counts two (one each way).
	Messages int64 `json:"messages"`
	// Window is the CPU both processes used during the tool's own test phase, for a tool
	// that says when it starts and ends it; nil otherwise. sockperf does: its client
	// waits about 2 s between its warm-up messages and "Starting test...", during which a
	// polling server spins, so its lifetime figures overstate what the test costs.
	Window *Window `json:"window,omitempty"`
}

// Window is what both processes used between two lines of the client's output (sockperf's
// "Starting test..." and "Test end"): CPU read from /proc/PID/stat (utime + stime + cutime
// + cstime, in 10 ms clock ticks) when each line arrived, so each figure is within about
// 20 ms.
type Window struct {
	// Wall is the time between the two lines.
	Wall time.Duration `json:"wall_ns"`
	// Client and Server are the CPU time each process used meanwhile.
	Client time.Duration `json:"client_ns"`
	Server time.Duration `json:"server_ns"`
	// Messages is the number of messages delivered in the window (each result type says
	// from which figure).
	Messages int64 `json:"messages"`
}

// CPU is the client's and the server's CPU time in the window together.
func (w *Window) CPU() time.Duration { return w.Client + w.Server }

// Cores is the window's CPU over its wall time, in cores.
func (w *Window) Cores() float64 {
	if w.Wall <= 0 {
		return 0
	}
	return w.CPU().Seconds() / w.Wall.Seconds()
}

// PerMessageUS is the window's CPU per message delivered in it, in microseconds, or 0
// without messages.
func (w *Window) PerMessageUS() float64 {
	if w.Messages <= 0 {
		return 0
	}
	return float64(w.CPU()) / 1e3 / float64(w.Messages)
}

// CPU is the client's and the server's CPU time together.
func (u Usage) CPU() time.Duration { return u.Client.Total() + u.Server.Total() }

// PerMessageUS is CPU() per delivered message in microseconds, or 0 when no message was
// counted.
func (u Usage) PerMessageUS() float64 {
	if u.Messages <= 0 {
		return 0
	}
	return float64(u.CPU()) / 1e3 / float64(u.Messages)
}

// Cores is the CPU share of both processes in cores: each process's CPU time over its own
// wall time, added (1 is one core busy all the time).
func (u Usage) Cores() float64 {
	var c float64
	if u.ClientWall > 0 {
		c += u.Client.Total().Seconds() / u.ClientWall.Seconds()
	}
	if u.ServerWall > 0 {
		c += u.Server.Total().Seconds() / u.ServerWall.Seconds()
	}
	return c
}

// Run is how one measurement was made: the command lines, what they printed, what they
// cost.
type Run struct {
	// Tool is the program's name (qperf, iperf3, sockperf, fi_pingpong).
	Tool string `json:"tool"`
	// ServerArgs and ClientArgs are the argument vectors run in host B and host A
	// (inside each namespace through `ip netns exec NS`, which execs them: the process
	// measured is the tool itself).
	ServerArgs []string `json:"server_args"`
	ClientArgs []string `json:"client_args"`
	// ServerOut and ClientOut are what each printed, standard output and error together,
	// kept for failure messages (not written to JSON).
	ServerOut string `json:"-"`
	ClientOut string `json:"-"`
	// Usage is the processes' CPU time, wall time and delivered messages.
	Usage Usage `json:"usage"`
}

// Commands returns the two command lines, one per host, for the record.
func (r *Run) Commands() string {
	return "B: " + strings.Join(r.ServerArgs, " ") + "\nA: " + strings.Join(r.ClientArgs, " ")
}

// RunError is the error of a failed run: what went wrong and the run as far as it went,
// with the tools' output.
type RunError struct {
	Run *Run
	Err error
}

// Error includes the command lines and the last lines each process printed.
func (e *RunError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v", e.Run.Tool, e.Err)
	if len(e.Run.ServerArgs) > 0 {
		fmt.Fprintf(&b, "\n  server (B): %s%s", strings.Join(e.Run.ServerArgs, " "), tail(e.Run.ServerOut, 12))
	}
	if len(e.Run.ClientArgs) > 0 {
		fmt.Fprintf(&b, "\n  client (A): %s%s", strings.Join(e.Run.ClientArgs, " "), tail(e.Run.ClientOut, 12))
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *RunError) Unwrap() error { return e.Err }

// tail returns the last n non-empty lines of out, indented for an error message.
func tail(out string, n int) string {
	var lines []string
	for _, l := range strings.Split(stripANSI(out), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "\n    (printed nothing)"
	}
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return "\n    | " + strings.Join(lines, "\n    | ")
}

// stripANSI removes terminal colour sequences (ESC [ ... m), which sockperf prints.
func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b[") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] == ';' || (s[j] >= '0' && s[j] <= '9')) {
				j++
			}
			if j < len(s) && s[j] == 'm' {
				i = j
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// wholeSeconds is d rounded up to whole seconds, at least 1: the tools take integer
// seconds (qperf parses -t 0.5 as 0 and then never stops).
func wholeSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
