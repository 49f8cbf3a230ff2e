// Package readme holds the test that keeps README.md's embedding example compiling. The
// example is the Go block between the lines <!-- embed:begin --> and <!-- embed:end -->:
// a file without its package clause (imports and declarations). The test extracts it,
// prepends a package clause and a //line directive, so that the compiler's messages name
// README.md's own lines, checks that it is gofmt'ed, and compiles it with go build -overlay
// as the package internal/readme/snippet, which exists only in the overlay: nothing is
// written into the module, and the block is compiled against the module as it is.
//
// It has no code of its own to import.
package readme
