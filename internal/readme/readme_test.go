package readme

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const (
	beginMarker = "<!-- embed:begin -->"
	endMarker   = "<!-- embed:end -->"
	// snippetDir is where the overlay puts the block, relative to the module root: a
	// directory that does not exist on disk.
	snippetDir = "internal/readme/snippet"
)

// extract returns the body of the one ```go block between the markers of readme and the
// number (from 1) of its first line in readme.
func extract(readme string) (body string, line int, err error) {
	if n := strings.Count(readme, beginMarker); n != 1 {
		return "", 0, fmt.Errorf("%d %q markers, want 1", n, beginMarker)
	}
	if n := strings.Count(readme, endMarker); n != 1 {
		return "", 0, fmt.Errorf("%d %q markers, want 1", n, endMarker)
	}
	begin := strings.Index(readme, beginMarker)
	end := strings.Index(readme, endMarker)
	if end < begin {
		return "", 0, fmt.Errorf("%q comes before %q", endMarker, beginMarker)
	}
	lines := strings.Split(readme[begin:end], "\n")
	// lines[0] is the begin marker's line; the fence must follow it, and close the block
	// on the line before the end marker.
	if len(lines) < 4 || strings.TrimSpace(lines[1]) != "```go" {
		return "", 0, fmt.Errorf("the line after %q is not a ```go fence", beginMarker)
	}
	last := len(lines) - 1 // the end marker's line, empty up to the marker
	if strings.TrimSpace(lines[last]) != "" || strings.TrimSpace(lines[last-1]) != "```" {
		return "", 0, fmt.Errorf("the ```go block does not close on the line before %q", endMarker)
	}
	code := lines[2 : last-1]
	for i, l := range code {
		if strings.HasPrefix(l, "```") {
			return "", 0, fmt.Errorf("a fence inside the block (its line %d)", i+1)
		}
	}
	line = strings.Count(readme[:begin], "\n") + 3 // the marker, the fence, the first line
	return strings.Join(code, "\n") + "\n", line, nil
}

func TestExtract(t *testing.T) {
	good := "# T\n\ntext\n" + beginMarker + "\n```go\nimport \"fmt\"\n\nvar x = fmt.Sprint(1)\n```\n" + endMarker + "\nmore\n"
	body, line, err := extract(good)
	if err != nil || body != "import \"fmt\"\n\nvar x = fmt.Sprint(1)\n" || line != 6 {
		t.Fatalf("extract = %q, %d, %v", body, line, err)
	}
	for name, bad := range map[string]string{
		"no markers":      "```go\nvar x int\n```\n",
		"no end":          beginMarker + "\n```go\nvar x int\n```\n",
		"two blocks":      good + good,
		"ends first":      endMarker + "\n" + beginMarker + "\n",
		"no fence":        beginMarker + "\nvar x int\n\n" + endMarker + "\n",
		"another tongue":  beginMarker + "\n```sh\nls\n```\n" + endMarker + "\n",
		"not closed":      beginMarker + "\n```go\nvar x int\n" + endMarker + "\n",
		"two fences":      beginMarker + "\n```go\nvar x int\n```\n```go\nvar y int\n```\n" + endMarker + "\n",
		"text after code": beginMarker + "\n```go\nvar x int\n```\nprose\n" + endMarker + "\n",
	} {
		if _, _, err := extract(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// moduleRoot returns the module's directory: two levels above this package's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(b, []byte("module github.com/xdpndk/xdpndk\n")) {
		t.Fatalf("%s is not the module's root (%v)", root, err)
	}
	return root
}

// snippetSource is the block as a Go file: a package clause, then a //line directive so
// that positions in it are README.md's.
func snippetSource(body string, line int) []byte {
	return []byte(fmt.Sprintf("package snippet\n\n//line README.md:%d:1\n%s", line, body))
}

// README.md's embedding example compiles against the module as it is, and is gofmt'ed.
func TestREADMEEmbeddingCompiles(t *testing.T) {
	root := moduleRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	body, line, err := extract(string(readme))
	if err != nil {
		t.Fatalf("README.md's embedding example: %v", err)
	}
	src := snippetSource(body, line)
	if err := compile(t, root, src); err != nil {
		t.Fatalf("README.md's embedding example (its lines %d-%d) does not compile:\n%v", line, line+strings.Count(body, "\n")-1, err)
	}
	if formatted, err := format.Source(src); err != nil || !bytes.Equal(formatted, src) {
		t.Errorf("README.md's embedding example is not gofmt'ed (%v); formatted it reads:\n%s", err, formatted)
	}
}

// compile builds src as the package snippetDir with go build -overlay, and returns the
// compiler's messages if it fails.
func compile(t *testing.T, root string, src []byte) error {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	tmp := t.TempDir()
	file := filepath.Join(tmp, "snippet.go")
	if err := os.WriteFile(file, src, 0o644); err != nil {
		t.Fatal(err)
	}
	ovl, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(root, snippetDir, "snippet.go"): file},
	})
	if err != nil {
		t.Fatal(err)
	}
	ovlFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovlFile, ovl, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "build", "-overlay", ovlFile, "./"+snippetDir)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New(string(out))
	}
	return nil
}

// The check catches a block that does not compile, and names README.md's line.
func TestCompileReportsREADMELines(t *testing.T) {
	err := compile(t, moduleRoot(t), snippetSource("import \"github.com/xdpndk/xdpndk/ndk\"\n\nvar s ndk.Status = \"no\"\n", 40))
	if err == nil || !strings.Contains(err.Error(), "README.md:42:") {
		t.Fatalf("a broken block: %v", err)
	}
}

// README.md points to the example program, which exists.
func TestREADMEPointsToTheExample(t *testing.T) {
	root := moduleRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("](examples/filestore)")) || !bytes.Contains(readme, []byte("filestore serve -i")) {
		t.Error("README.md does not link examples/filestore or show how to run it")
	}
	if _, err := os.Stat(filepath.Join(root, "examples", "filestore", "doc.go")); err != nil {
		t.Error(err)
	}
}
