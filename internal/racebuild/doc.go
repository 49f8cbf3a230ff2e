// Package racebuild tells tests whether they run under the race detector, where code runs
// several times slower: tests that step through long scenarios or measure time shrink their
// volumes there and leave the measurement to the plain pass of make test. Each use says
// what it shrinks and why.
package racebuild
