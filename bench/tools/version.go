package tools

import (
	"fmt"
	"strings"
)

// Versions are the versions of the tools, as each prints them, for a results header.
type Versions struct {
	// Qperf is `qperf --version` ("0.4.11").
	Qperf string `json:"qperf"`
	// Iperf3 is `iperf3 --version`'s first line's version ("3.12").
	Iperf3 string `json:"iperf3"`
	// Sockperf is `sockperf --version`'s version ("3.7-no.git").
	Sockperf string `json:"sockperf"`
	// Libfabric is the library's version as `fi_info --version` reports it ("1.17.0");
	// fi_pingpong comes with it (libfabric-bin).
	Libfabric string `json:"libfabric"`
	// FabricProviders are the providers `fi_info -l` lists (core and utility providers and
	// hooks).
	FabricProviders []string `json:"fabric_providers"`
}

// ParseVersion extracts tool's version from what `tool --version` printed (for libfabric,
// `fi_info --version`).
func ParseVersion(tool string, out []byte) (string, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var v string
	switch tool {
	case "qperf": // qperf 0.4.11
		if f := strings.Fields(lines[0]); len(f) == 2 && f[0] == "qperf" {
			v = f[1]
		}
	case "iperf3": // iperf 3.12 (cJSON 1.7.15)
		if f := strings.Fields(lines[0]); len(f) >= 2 && f[0] == "iperf" {
			v = f[1]
		}
	case "sockperf": // sockperf, version 3.7-no.git
		if _, after, ok := strings.Cut(lines[0], "sockperf, version "); ok {
			v = strings.TrimSpace(after)
		}
	case "libfabric": // fi_info: 1.17.0 / libfabric: 1.17.0 / libfabric api: 1.17
		for _, l := range lines {
			if after, ok := strings.CutPrefix(l, "libfabric: "); ok {
				v = strings.TrimSpace(after)
			}
		}
	default:
		return "", fmt.Errorf("no version parser for %q", tool)
	}
	if v == "" {
		return "", fmt.Errorf("%s printed no version: %q", tool, strings.TrimSpace(lines[0]))
	}
	return v, nil
}

// ParseFabricProviders parses `fi_info -l`: a "name:" line per provider, each followed by
// an indented "version:" line.
func ParseFabricProviders(out []byte) ([]string, error) {
	var p []string
	for _, l := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutSuffix(strings.TrimRight(l, " \r"), ":"); ok && l != "" && l[0] != ' ' && l[0] != '\t' {
			p = append(p, name)
		}
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("fi_info -l listed no provider: %q", strings.TrimSpace(string(out)))
	}
	return p, nil
}
