package report

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
)

// Flags are the command-line flags every benchmark command has, and what the command does
// with them before and after its run.
type Flags struct {
	Name       string // the command's name, which prefixes its messages
	Out        string // -out: where to write the JSON results
	Quick      bool   // -quick: a short run; explicit flags still win
	CPUProfile string // -cpuprofile: where to write a CPU profile of the whole run
}

// Define defines -out (defaulting to out), -quick (described by quickUsage) and -cpuprofile
// on flag.CommandLine.
func (f *Flags) Define(out, quickUsage string) {
	flag.StringVar(&f.Out, "out", out, "write the JSON results to this `path`")
	flag.BoolVar(&f.Quick, "quick", false, quickUsage)
	flag.StringVar(&f.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this `file` (go tool pprof)")
}

// Parse parses the command line and starts the CPU profile if -cpuprofile asks for one;
// it also fixes the run's Build (ThisBuild) before the run starts.
// It returns the function that ends the profile, and the names of the flags the command
// line set (to tell an explicit flag from a default that -quick replaces).
func (f *Flags) Parse() (stop func(), set map[string]bool, err error) {
	ThisBuild() // the commit at the start of the run (git may be asked), not at its end
	flag.Parse()
	set = map[string]bool{}
	flag.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	stop, err = StartCPUProfile(f.CPUProfile)
	return stop, set, err
}

// Results is what Finish needs of a benchmark's results: its own table, and the Document
// it writes.
type Results interface {
	WriteTable(w io.Writer) error
	Document() *Document
}

// Finish prints res on stdout as the bench's table, then as the Markdown table of its
// Document's headline metrics and goals (WriteMarkdown), then what trailer prints; then,
// unless ctx (the run's) was cancelled, it writes the Document as JSON to f.Out. It reports
// failures on stderr, runErr (the run's error, which may come with partial results)
// included, and returns the exit code: 130 when interrupted, 1 on a failure, else 0.
func (f *Flags) Finish(ctx context.Context, res Results, trailer func(), runErr error) int {
	fmt.Println()
	if err := res.WriteTable(os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: print table: %v\n", f.Name, err)
	}
	doc := res.Document()
	fmt.Println()
	fmt.Println("Headline figures and goals (Markdown; every figure is in the JSON):")
	fmt.Println()
	if err := WriteMarkdown(os.Stdout, doc, MarkdownOptions{Metrics: HeadlineMetrics}); err != nil {
		fmt.Fprintf(os.Stderr, "%s: print Markdown: %v\n", f.Name, err)
	}
	trailer()
	if ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "%s: interrupted; results not written\n", f.Name)
		return 130
	}
	if err := doc.WriteJSON(f.Out); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", f.Name, err)
		return 1
	}
	fmt.Println("results written to", f.Out)
	if runErr != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", f.Name, runErr)
		return 1
	}
	return 0
}
