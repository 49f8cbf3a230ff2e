// Command fuzzall runs every fuzz target of the module for a while each, several at a
// time, and fails if any of them finds a crasher. `make fuzz` runs it:
//
//	go run ./internal/fuzzall [-fuzztime 10s] [-jobs 2] [-run REGEXP]
//
// The targets are the functions `func FuzzX(f *testing.F)` of the _test.go files of the
// packages `go list ./...` names, found by reading the files rather than by `go test
// -list`, which would build every test binary of the module first. Each target runs as
// `go test -run '^$' -fuzz '^FuzzX$' -fuzztime T -parallel W`, jobs of them at once and W =
// GOMAXPROCS/jobs fuzzing workers each, so that the machine's cores are used without the
// builds and the seed runs of one target waiting for another's. A target's output is
// printed whole when it ends (its last lines when it passed), so runs do not interleave.
//
// Go 1.26's fuzz coordinator can fail a run that found nothing with "context deadline
// exceeded" when -fuzztime ends while a worker is mid-input (golang/go#75804, fixed in
// 1.27): such a run wrote no crasher into testdata/fuzz/<target>, so it is reported and not
// counted as a failure; every other failure (a crasher, a build error) fails the target.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"
)

// target is one fuzz target: its package, the package's directory and the function.
type target struct {
	pkg, dir, name string
}

// fuzzFunc matches the declaration of a fuzz target at the start of a line.
var fuzzFunc = regexp.MustCompile(`^func (Fuzz[A-Za-z0-9_]*)\(\w+ \*testing\.F\)`)

func main() {
	fuzztime := flag.Duration("fuzztime", 10*time.Second, "how long each target fuzzes")
	jobs := flag.Int("jobs", 2, "targets fuzzed at once")
	run := flag.String("run", ".", "fuzz only the targets whose name matches this regular expression")
	flag.Parse()
	sel, err := regexp.Compile(*run)
	if err != nil {
		fail("-run: %v", err)
	}
	if *jobs < 1 {
		fail("-jobs must be at least 1")
	}
	targets, err := list(sel)
	if err != nil {
		fail("%v", err)
	}
	if len(targets) == 0 {
		fail("no fuzz target matches %q", *run)
	}
	workers := max(runtime.GOMAXPROCS(0) / *jobs, 1)
	fmt.Printf("fuzzall: %d targets for %v each, %d at a time with %d workers each\n", len(targets), *fuzztime, *jobs, workers)
	start := time.Now()
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	next := make(chan target)
	for range *jobs {
		wg.Go(func() {
			for t := range next {
				report, ok := fuzz(t, *fuzztime, workers)
				mu.Lock()
				fmt.Print(report)
				if !ok {
					failed = append(failed, t.pkg+" "+t.name)
				}
				mu.Unlock()
			}
		})
	}
	for _, t := range targets {
		next <- t
	}
	close(next)
	wg.Wait()
	fmt.Printf("fuzzall: %d targets in %v\n", len(targets), time.Since(start).Round(time.Second))
	if len(failed) > 0 {
		for _, f := range failed {
			fmt.Println("FUZZ FAIL", f)
		}
		os.Exit(1)
	}
}

// fail prints a message and exits with status 2.
func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fuzzall: "+format+"\n", args...)
	os.Exit(2)
}

// list returns the fuzz targets of the module's packages whose names sel matches, in the
// order of `go list ./...` and of the files.
func list(sel *regexp.Regexp) ([]target, error) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}}", "./...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var targets []target
	for line := range strings.Lines(string(out)) {
		pkg, dir, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			names, err := fuzzTargets(f)
			if err != nil {
				return nil, err
			}
			for _, n := range names {
				if sel.MatchString(n) {
					targets = append(targets, target{pkg: pkg, dir: dir, name: n})
				}
			}
		}
	}
	return targets, nil
}

// fuzzTargets returns the names of the fuzz targets declared in the file at path.
func fuzzTargets(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if m := fuzzFunc.FindSubmatch(sc.Bytes()); m != nil {
			names = append(names, string(m[1]))
		}
	}
	return names, sc.Err()
}

// fuzz runs one target and returns what to print of it and whether it passed.
func fuzz(t target, d time.Duration, workers int) (string, bool) {
	corpus := filepath.Join(t.dir, "testdata", "fuzz", t.name)
	before := entries(corpus)
	cmd := exec.Command("go", "test", "-run", "^$", "-fuzz", "^"+t.name+"$",
		"-fuzztime", d.String(), "-parallel", fmt.Sprint(workers), t.pkg)
	out, err := cmd.CombinedOutput()
	var b strings.Builder
	fmt.Fprintf(&b, "fuzz %s %s for %v\n", t.pkg, t.name, d)
	if err == nil {
		b.WriteString(lastLines(out, 3))
		return b.String(), true
	}
	if entries(corpus) == before && bytes.Contains(out, []byte("context deadline exceeded")) {
		b.WriteString(lastLines(out, 3))
		fmt.Fprintf(&b, "fuzz %s: the toolchain's fuzztime race (golang/go#75804), no crasher written: not a failure\n", t.name)
		return b.String(), true
	}
	b.Write(out)
	fmt.Fprintf(&b, "fuzz %s: %v\n", t.name, err)
	return b.String(), false
}

// entries counts the files in dir (0 when it does not exist).
func entries(dir string) int {
	es, _ := os.ReadDir(dir)
	return len(es)
}

// lastLines returns the last n lines of out, each ending in a newline.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n") + "\n"
}
