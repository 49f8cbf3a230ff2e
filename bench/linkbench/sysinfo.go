package linkbench

import (
	"time"

	"github.com/xdpndk/xdpndk/bench/internal/report"
)

// machineHeader returns the header fields that describe this machine and the time.
func machineHeader() Header {
	return Header{
		Host:  report.ThisHost(),
		Date:  time.Now().UTC().Format(time.RFC3339),
		Modes: map[string]string{},
		Notes: []string{},
	}
}
