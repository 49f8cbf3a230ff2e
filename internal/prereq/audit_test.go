package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// commandArg says, for a function or method name, which argument is the name of the
// command it runs or looks up. Only calls that name it as a string literal are audited; a
// name held in a variable (the ndkpeer binary, os.Args[0]) is the project's own.
var commandArg = map[string]int{
	"exec.Command":        0, // exec.Command(name, args...)
	"exec.CommandContext": 1, // exec.CommandContext(ctx, name, args...)
	"exec.LookPath":       0,
	"Command":             1, // testbed's Host.Command and Router.Command(ctx, name, args...): ip netns exec
	"findTool":            0, // internal/testbed: ip, tc
	"Tool":                1, // internal/privileged.Tool(t, name, pkg)
	"hostRun":             2, // test helpers (t, host, name, args...)
	"hostCmd":             2,
	"runIn":               2,
}

// commandsRun returns every command the module's Go files (tests and the code they call)
// run or look up by a literal name, with the first place each is named.
func commandsRun(t *testing.T, root string) map[string]string {
	t.Helper()
	found := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "prereq":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var name string
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
				if pkg, ok := fn.X.(*ast.Ident); ok && pkg.Name == "exec" {
					name = "exec." + name
				}
			}
			i, ok := commandArg[name]
			if !ok || i >= len(call.Args) {
				return true
			}
			lit, ok := call.Args[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			cmd, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Errorf("%s: %v", fset.Position(lit.Pos()), err)
				return true
			}
			if _, seen := found[cmd]; !seen {
				found[cmd] = fset.Position(lit.Pos()).String()
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestTestTargetCoversCommands: every command a test runs, directly or through the code it
// calls, is a requirement of the test target (and so of ci), so that make test on a fresh
// machine installs it before a test needs it.
func TestTestTargetCoversCommands(t *testing.T) {
	found := commandsRun(t, filepath.Join("..", ".."))
	// A sample the audit must see, so that a change to the helpers that hides calls from it
	// fails here rather than passing on nothing.
	for _, c := range []string{"ip", "tc", "ping", "tshark", "iperf3", "go"} {
		if _, ok := found[c]; !ok {
			t.Errorf("the audit did not find %s run anywhere: commandArg is out of date", c)
		}
	}
	commands := map[string]bool{}
	for _, k := range targets["test"] {
		if c := requirements[k].Command; c != "" {
			commands[c] = true
		}
	}
	names := make([]string, 0, len(found))
	for c := range found {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		if !commands[c] {
			t.Errorf("%s runs %s, which the test target does not require", found[c], c)
		}
	}
}

// TestCIInstallsCIPackages: .ci/run's apt-get install line names exactly the packages of
// the ci target, so that CI's own install and this checker cannot drift apart (its
// `-check ci` would fail on a missing one, but only on a machine that lacks it).
func TestCIInstallsCIPackages(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		trimmed := strings.TrimSpace(l)
		if line == "" && !strings.HasPrefix(trimmed, "apt-get install") {
			continue
		}
		line += strings.TrimSuffix(trimmed, `\`) + " "
		if !strings.HasSuffix(trimmed, `\`) {
			break
		}
	}
	if line == "" {
		t.Fatal(".ci/run has no apt-get install line")
	}
	var got []string
	for _, f := range strings.Fields(line)[2:] {
		if !strings.HasPrefix(f, "-") {
			got = append(got, f)
		}
	}
	var want []string
	for _, k := range targets["ci"] {
		for _, p := range requirements[k].Packages {
			if !slices.Contains(want, p) {
				want = append(want, p)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf(".ci/run installs %q; the ci target's packages are %q", got, want)
	}
}
