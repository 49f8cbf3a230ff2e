// Package report holds what the benchmarks under bench/ share: the results schema every
// bench writes (Document: a header describing the build, the machine and the test bed,
// one Record per figure, the Goals), merging documents, the Markdown table of a document,
// medians and percentiles, the commands' flags and the -cpuprofile flag's profile.
package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
)

// Host describes the machine a benchmark ran on. A Document's Header embeds it.
type Host struct {
	Name   string `json:"host"`   // the host name, or "unknown"
	Kernel string `json:"kernel"` // uname -r, or "unknown"
	CPU    string `json:"cpu"`    // "model name" from /proc/cpuinfo, or "unknown"
	CPUs   int    `json:"cpus"`   // logical CPUs the Go runtime sees
	Go     string `json:"go"`     // runtime.Version()
}

// String describes h: "vm (AMD EPYC, 2 CPUs, Linux 6.18.44, go1.26.8)".
func (h Host) String() string {
	return fmt.Sprintf("%s (%s, %d CPUs, Linux %s, %s)", h.Name, h.CPU, h.CPUs, h.Kernel, h.Go)
}

// ThisHost returns the Host this process runs on.
func ThisHost() Host {
	return Host{
		Name:   hostname(),
		Kernel: kernelRelease(),
		CPU:    cpuModel(),
		CPUs:   runtime.NumCPU(),
		Go:     runtime.Version(),
	}
}

// kernelRelease returns what uname -r prints, or "unknown".
func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// Median returns the median of v (the mean of the two middle values for an even count), or
// 0 for an empty v. It does not modify v.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// WriteJSON writes v as indented JSON to path, creating its directory. It writes a
// temporary file first and renames it, so a reader never sees half a document.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	b = append(b, '\n')
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("write results: %w", err), os.Remove(tmp))
	}
	return nil
}

// ReadJSON decodes the JSON document at path, as WriteJSON wrote it, into a new T.
func ReadJSON[T any](path string) (*T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("decode results %s: %w", path, err)
	}
	return &v, nil
}

// Cell formats a table cell: v*scale with prec decimals, or "-" when !ok (no figure).
func Cell(v float64, ok bool, scale float64, prec int) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v*scale)
}

// StartCPUProfile starts a CPU profile of the process written to path (go tool pprof). The
// returned stop ends the profile and closes the file. With path "" it does nothing and
// stop is a no-op.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// failedPrefix starts a header note that records a failed measurement.
const failedPrefix = "FAILED: "

// FailedNote is the header note that records err, a failed measurement.
func FailedNote(err error) string { return failedPrefix + err.Error() }

// IsFailed reports whether note records a failed measurement (FailedNote).
func IsFailed(note string) bool { return strings.HasPrefix(note, failedPrefix) }
