//go:build linux

package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/xdpndk/xdpndk/cmd/ndkpeer/internal/proto"
)

// buildVersion describes the binary: the module's version, the VCS revision and time when
// the build stamped them, and the Go version.
type buildVersion struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"vcs_revision,omitempty"`
	Time     string `json:"vcs_time,omitempty"`
	Modified bool   `json:"vcs_modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// Protocol is the newest control protocol version spoken (and MinProtocol the oldest).
	Protocol    int `json:"protocol"`
	MinProtocol int `json:"min_protocol"`
}

// readVersion reads the binary's build information.
func readVersion() buildVersion {
	v := buildVersion{Module: "github.com/xdpndk/xdpndk", Version: "unknown", Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Protocol: proto.Version, MinProtocol: proto.MinVersion}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if bi.Main.Path != "" {
		v.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the one line of `ndkpeer --version`.
func (v buildVersion) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ndkpeer %s (module %s", v.Version, v.Module)
	if v.Revision != "" {
		fmt.Fprintf(&b, ", revision %s", v.Revision)
		if v.Modified {
			b.WriteString(" with local changes")
		}
	}
	if v.Time != "" {
		fmt.Fprintf(&b, ", committed %s", v.Time)
	}
	fmt.Fprintf(&b, ") %s %s, protocol %d (speaks %d to %d)", v.Go, v.Platform, v.Protocol, v.MinProtocol, v.Protocol)
	return b.String()
}
