package layers

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/xdpndk/xdpndk"

// deps returns every package of the module with its non-test dependencies.
func deps(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, module+"/...").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			m[f[0]] = f[1:]
		}
	}
	return m
}

// under reports whether pkg is dir or inside it (dir relative to the module).
func under(pkg, dir string) bool {
	p := module + "/" + dir
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

func ours(pkg string) bool { return strings.HasPrefix(pkg, module+"/") }

// rule: packages matching subject may not depend on packages matching forbidden.
type rule struct {
	name      string
	subject   func(pkg string) bool
	forbidden func(dep string) bool
}

var rules = []rule{
	{"transport/link is a leaf", func(p string) bool { return under(p, "transport/link") }, ours},
	{"bpf is a leaf", func(p string) bool { return under(p, "bpf") }, ours},
	{"the engine knows no AF_XDP, no NDK, no tooling", func(p string) bool { return under(p, "transport") },
		func(d string) bool {
			return under(d, "xdp") || under(d, "bpf") || under(d, "ndk") || under(d, "cmd") || under(d, "bench")
		}},
	{"memory is below the engine", func(p string) bool { return under(p, "memreg") },
		func(d string) bool {
			return under(d, "transport") || under(d, "xdp") || under(d, "bpf") || under(d, "ndk")
		}},
	{"xdp uses only the engine's link contract", func(p string) bool { return under(p, "xdp") },
		func(d string) bool { return under(d, "transport") && !under(d, "transport/link") || under(d, "ndk") }},
	{"xdp's lower layer has no engine and no netlink policy",
		func(p string) bool { return under(p, "xdp/xsk") || under(p, "xdp/frame") },
		func(d string) bool { return under(d, "transport") || strings.Contains(d, "netlink") }},
	{"next-hop resolution knows no socket, no steering and not its link",
		func(p string) bool { return under(p, "xdp/nexthop") },
		func(d string) bool {
			return under(d, "xdp") && !under(d, "xdp/frame") && !under(d, "xdp/nexthop") || under(d, "bpf")
		}},
	{"commands never import bench", func(p string) bool { return under(p, "cmd") },
		func(d string) bool { return under(d, "bench") }},
	{"nothing outside cmd imports a command", func(p string) bool { return !under(p, "cmd") },
		func(d string) bool { return under(d, "cmd") }},
	{"ndk carries no tooling", func(p string) bool { return under(p, "ndk") },
		func(d string) bool {
			return under(d, "bench") || under(d, "cmd") || under(d, "internal") && !under(d, "internal/plumb")
		}},
	{"the core packages export no metrics: no Prometheus client, no collector",
		func(p string) bool {
			return under(p, "ndk") || under(p, "transport") || under(p, "xdp") || under(p, "memreg") || under(p, "bpf")
		},
		func(d string) bool { return under(d, "promndk") || strings.HasPrefix(d, "github.com/prometheus/") }},
	{"the pcapng writer is a leaf", func(p string) bool { return under(p, "internal/pcapng") }, ours},
	{"the capture wrapper knows only the link contract and the file format",
		func(p string) bool { return under(p, "internal/pcaplink") },
		func(d string) bool { return ours(d) && !under(d, "transport/link") && !under(d, "internal/pcapng") }},
	{"plumb reaches the engine, nothing above it", func(p string) bool { return under(p, "internal/plumb") },
		func(d string) bool {
			return under(d, "ndk") || under(d, "xdp") || under(d, "bpf") || under(d, "internal") && !under(d, "internal/plumb")
		}},
}

// violations checks every rule against the packages' dependencies; it returns what breaks
// them and how many packages some rule applied to.
func violations(all map[string][]string) (bad []string, checked int) {
	for _, r := range rules {
		for pkg, ds := range all {
			if !r.subject(pkg) {
				continue
			}
			checked++
			for _, d := range ds {
				if d != pkg && r.forbidden(d) {
					bad = append(bad, r.name+": "+pkg+" imports "+d)
				}
			}
		}
	}
	slices.Sort(bad)
	return bad, checked
}

// The module keeps the import rules.
func TestImportRules(t *testing.T) {
	all := deps(t)
	if len(all) < 10 {
		t.Fatalf("go list found %d packages: not the module", len(all))
	}
	bad, checked := violations(all)
	if checked < len(all) {
		t.Fatalf("the rules looked at %d packages of %d", checked, len(all))
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// The checker catches each kind of breach (a synthetic module).
func TestViolationsDetected(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	fake := map[string][]string{
		m("transport"):                  {m("transport/link"), m("xdp")},
		m("transport/link"):             {"net/netip", m("memreg")},
		m("memreg"):                     {m("transport")},
		m("xdp"):                        {m("transport/link"), m("transport")},
		m("xdp/xsk"):                    {"github.com/vishvananda/netlink"},
		m("xdp/nexthop"):                {"github.com/vishvananda/netlink", m("xdp/frame"), m("xdp/xsk")},
		m("cmd/ndkpeer"):                {m("bench/ndkbench"), m("cmd/ndkpeer/internal/proto")},
		m("internal/demo"):              {m("cmd/ndkpeer")},
		m("ndk"):                        {m("internal/testbed"), m("internal/plumb"), m("promndk")},
		m("internal/plumb"):             {m("transport"), m("ndk")},
		m("bpf"):                        {"github.com/cilium/ebpf"},
		m("cmd/ndkpeer/internal/proto"): nil,
		m("xdp/frame"):                  {"github.com/prometheus/client_golang/prometheus"},
		m("promndk"):                    {m("ndk"), "github.com/prometheus/client_golang/prometheus"},
		m("internal/pcapng"):            {m("transport/link")},
		m("internal/pcaplink"):          {m("transport/link"), m("internal/pcapng"), m("xdp")},
	}
	bad, _ := violations(fake)
	want := []string{
		"commands never import bench: " + m("cmd/ndkpeer") + " imports " + m("bench/ndkbench"),
		"memory is below the engine: " + m("memreg") + " imports " + m("transport"),
		"ndk carries no tooling: " + m("ndk") + " imports " + m("internal/testbed"),
		"next-hop resolution knows no socket, no steering and not its link: " + m("xdp/nexthop") + " imports " + m("xdp/xsk"),
		"nothing outside cmd imports a command: " + m("internal/demo") + " imports " + m("cmd/ndkpeer"),
		"plumb reaches the engine, nothing above it: " + m("internal/plumb") + " imports " + m("ndk"),
		"the capture wrapper knows only the link contract and the file format: " + m("internal/pcaplink") + " imports " + m("xdp"),
		"the core packages export no metrics: no Prometheus client, no collector: " + m("ndk") + " imports " + m("promndk"),
		"the core packages export no metrics: no Prometheus client, no collector: " + m("xdp/frame") + " imports github.com/prometheus/client_golang/prometheus",
		"the engine knows no AF_XDP, no NDK, no tooling: " + m("transport") + " imports " + m("xdp"),
		"the pcapng writer is a leaf: " + m("internal/pcapng") + " imports " + m("transport/link"),
		"transport/link is a leaf: " + m("transport/link") + " imports " + m("memreg"),
		"xdp uses only the engine's link contract: " + m("xdp") + " imports " + m("transport"),
		"xdp's lower layer has no engine and no netlink policy: " + m("xdp/xsk") + " imports github.com/vishvananda/netlink",
	}
	if !slices.Equal(bad, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}

// ndk imports the engine's API (package transport and its link contract), never the
// engine's parts: its wire format, acknowledgement machinery, controllers or simulator.
// A rule on direct imports: through transport, ndk depends on all of them.
func TestNDKUsesTheEngineAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, module+"/ndk").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := strings.Fields(string(out))
	if !slices.Contains(imports, module+"/transport") {
		t.Fatalf("ndk imports %v: not the engine, the rule checks nothing", imports)
	}
	for _, d := range imports {
		if under(d, "transport") && d != module+"/transport" && !under(d, "transport/link") {
			t.Errorf("ndk imports %s: use what package transport exports", d)
		}
	}
}

// The examples are documentation for users: of the module they import directly only what
// a user's program can, package ndk and the xdp configuration ndk.Open takes (their tests
// may use more: test beds, simlink).
func TestExamplesUseThePublicAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/examples/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("go list found no examples: the rule checks nothing")
	}
	for _, line := range lines {
		f := strings.Fields(line)
		for _, d := range f[1:] {
			if ours(d) && d != module+"/ndk" && d != module+"/xdp" {
				t.Errorf("%s imports %s: an example uses ndk's public API only", f[0], d)
			}
		}
	}
}
