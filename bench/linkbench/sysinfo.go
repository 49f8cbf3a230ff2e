package linkbench

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"time"
)

// machineHeader returns the header fields that describe this machine and the time.
func machineHeader() Header {
	return Header{
		Kernel: kernelRelease(),
		CPU:    cpuModel(),
		CPUs:   runtime.NumCPU(),
		Go:     runtime.Version(),
		Date:   time.Now().Format(time.RFC3339),
		Modes:  map[string]string{},
		Notes:  []string{},
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
