package bpf

// Regenerate steer_bpfel.go and steer_bpfel.o from steer.c (needs clang and llvm-strip; set
// BPF2GO_CC to pick a specific clang). The output is committed, so a plain go build needs
// neither. steer.c includes no kernel headers, only libbpf's bpf_helpers.h and bpf_endian.h,
// so the object is the same on every build host with the same clang.
//go:generate go tool bpf2go -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel -tags linux steer steer.c
