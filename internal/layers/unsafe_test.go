package layers

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// unsafe is confined to files whose name says so (*_unsafe*.go), so that a reader finds
// every use of it by name (docs/ARCHITECTURE.md); ndk and xdp/nexthop have none. Test
// files are left out.
func TestUnsafeConfined(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{.Dir}} {{join .GoFiles " "}} {{join .CgoFiles " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var users []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		pkg, dir := f[0], f[1]
		for _, name := range f[2:] {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); p != "unsafe" {
					continue
				}
				users = append(users, pkg+"/"+name)
				if !strings.Contains(name, "_unsafe") {
					t.Errorf("%s/%s imports unsafe: its name must say so (*_unsafe*.go)", pkg, name)
				}
				if under(pkg, "ndk") {
					t.Errorf("%s/%s: ndk uses no unsafe", pkg, name)
				}
				if under(pkg, "xdp/nexthop") {
					t.Errorf("%s/%s: next-hop resolution uses no unsafe", pkg, name)
				}
			}
		}
	}
	if len(users) == 0 {
		t.Fatal("no file imports unsafe: go list saw the wrong files (the xdp sockets need it)")
	}
	t.Logf("unsafe in: %s", strings.Join(users, ", "))
}
