package tcloss

// Regenerate tcloss_bpfel.go and tcloss_bpfel.o from tcloss.c (needs clang and llvm-strip).
// The output is committed, so a plain go build needs neither.
//go:generate go tool bpf2go -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -tags linux tcloss tcloss.c
